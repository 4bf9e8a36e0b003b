/* SPDX-License-Identifier: MIT */
/*
 * view_latency: a WebSocket client of `volrec view` that subscribes to the four panes' pictures
 * as the page does and measures, per picture, pictures and bytes per second and the latency from
 * the volume's acquisition (t_last_ns in the frame header, CLOCK_REALTIME) to the picture's last
 * byte received at the socket, on the daemon's host; plus the daemon's own rate from the status
 * messages the viewer passes on. Prints one JSON object (bench/view_latency.py, docs/viewer.md).
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <json-c/json.h>
#include <libwebsockets.h>
#include <zlib.h>

#include <volrec/protocol.h>

#include "base/base.h"

/* The picture frame of the viewer's WebSocket as docs/viewer.md ("Picture frames") describes it:
 * decoded here from the documented format, as the page does, not from the viewer's code. */
#define FRAME_MAGIC   UINT32_C(0x46565256) /* "VRVF" read as little-endian */
#define FRAME_VERSION 2
#define FRAME_HEADER  256 /* bytes before the payload */
enum { ENC_RAW = 0, ENC_DEFLATE = 1 };

/* The picture kinds by their number in a frame (enum volrec_image_kind) and their names in the
 * page's subscriptions. */
static const char *const kind_names[VOLREC_IMAGE_COUNT] = {
        [VOLREC_IMAGE_ENFACE_MEAN] = "enface_mean",
        [VOLREC_IMAGE_ENFACE_MAX] = "enface_max",
        [VOLREC_IMAGE_BSCAN] = "bscan",
        [VOLREC_IMAGE_SLICE] = "slice",
        [VOLREC_IMAGE_PLANE] = "plane",
        [VOLREC_IMAGE_RENDER] = "render",
        [VOLREC_IMAGE_VOLUME] = "volume",
};

static const char *kind_name(unsigned kind)
{
	return kind < VOLREC_IMAGE_COUNT ? kind_names[kind] : NULL;
}

static int kind_from_name(const char *name)
{
	for (int k = 0; k < VOLREC_IMAGE_COUNT; k++)
		if (!strcmp(name, kind_names[k]))
			return k;
	return -1;
}

#define RX_MAX ((size_t)64 << 20) /* one message, at most */

struct sample {
	double acq, pub, read; /* ms from acquisition, publication and the viewer's read */
};

struct kind_stats {
	uint64_t frames, bytes, deflated;
	uint32_t rows, cols, rstep, cstep; /* of the last picture */
	struct sample *s;                  /* pictures with a timestamp */
	size_t n, cap;
};

static struct {
	char url[1024], host[300], addr[256], path[1100];
	int port;
	bool inflate;
	double seconds, warmup, timeout;
	unsigned want;
	char subscribe[256];
	/* the run */
	int phase; /* 0 connecting, 1 warming up, 2 measuring, 3 done */
	int rc;
	double t0, t_measure, t_end, measured; /* monotonic s; measured: the window's length */
	bool subscribed;
	unsigned char *rx;
	size_t rxlen, rxcap;
	struct kind_stats k[VOLREC_IMAGE_COUNT];
	struct json_object *st_first, *st_last;
	unsigned statuses;
	char state[64];
	double inflate_ms;
	lws_sorted_usec_list_t sul;
	struct lws_context *ctx;
} r = {.port = -1, .seconds = 10, .warmup = 2, .timeout = 30, .state = "unknown"};

static void fail(int rc, const char *fmt, ...) VR_PRINTF(2, 3);
static void fail(int rc, const char *fmt, ...)
{
	va_list ap;

	if (r.phase == 3)
		return;
	fprintf(stderr, "view_latency: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	r.rc = rc;
	r.phase = 3;
}

static uint32_t get32(const unsigned char *p)
{
	return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const unsigned char *p)
{
	return get32(p) | (uint64_t)get32(p + 4) << 32;
}

static double ms_since(uint64_t now, uint64_t t)
{
	return t ? ((double)now - (double)t) / 1e6 : NAN;
}

static void on_picture(const unsigned char *m, size_t len, uint64_t now)
{
	struct kind_stats *k;
	uint32_t hs, payload, rows, cols, planes;
	unsigned kind, enc;

	if (len < FRAME_HEADER)
		return fail(1, "picture frame of %zu bytes: shorter than its %d-byte header", len,
		            FRAME_HEADER);
	if (get32(m) != FRAME_MAGIC)
		return fail(1, "picture frame: magic 0x%08x, not 0x%08x (VRVF)", get32(m),
		            FRAME_MAGIC);
	hs = m[6] | (uint32_t)m[7] << 8, kind = m[8], enc = m[9];
	rows = get32(m + 12), cols = get32(m + 16), payload = get32(m + 20);
	planes = len >= FRAME_HEADER ? get32(m + 176) : 1; /* the volume's third dimension */
	if ((m[4] | m[5] << 8) != FRAME_VERSION)
		return fail(1, "picture frame: version %u (this tool reads %d)", m[4] | m[5] << 8,
		            FRAME_VERSION);
	if (hs < FRAME_HEADER || hs > len || payload != len - hs)
		return fail(1, "picture frame: header size %u, payload %u, message %zu bytes", hs,
		            payload, len);
	if (kind >= VOLREC_IMAGE_COUNT || !(r.want & 1u << kind))
		return fail(1, "picture frame: kind %u, not one subscribed to", kind);
	if (enc > ENC_DEFLATE || (enc == ENC_RAW && payload != (uint64_t)rows * cols * planes))
		return fail(1, "picture frame (%s): encoding %u, %u payload bytes for %u x %u x %u",
		            kind_name(kind), enc, payload, rows, cols, planes);
	if (r.inflate && enc == ENC_DEFLATE) {
		uLongf n = (uLongf)rows * cols * planes;
		unsigned char *px = malloc(n ? n : 1);
		double t = vr_mono_s();
		int zrc = px ? uncompress(px, &n, m + hs, payload) : Z_MEM_ERROR;

		free(px);
		if (zrc != Z_OK || n != (uLongf)rows * cols * planes)
			return fail(
			        1,
			        "picture frame (%s): deflate payload does not inflate to %u x %u",
			        kind_name(kind), rows, cols);
		r.inflate_ms += (vr_mono_s() - t) * 1e3;
	}
	if (r.phase != 2)
		return;
	k = &r.k[kind];
	k->frames++;
	k->bytes += len;
	k->deflated += enc == ENC_DEFLATE;
	k->rows = rows, k->cols = cols, k->rstep = m[10], k->cstep = m[11];
	if (!get64(m + 40))
		return;
	if (k->n == k->cap) {
		size_t cap = k->cap ? 2 * k->cap : 1024;
		struct sample *s = realloc(k->s, cap * sizeof(*s));

		if (!s)
			return fail(1, "out of memory");
		k->s = s, k->cap = cap;
	}
	k->s[k->n++] = (struct sample){ms_since(now, get64(m + 40)), ms_since(now, get64(m + 48)),
	                               ms_since(now, get64(m + 56))};
}

static void on_text(const char *text)
{
	struct json_object *o = json_tokener_parse(text), *t = NULL, *v = NULL;
	const char *type;

	if (!o || !json_object_object_get_ex(o, "type", &t))
		return fail(1, "the viewer sent a text message that is not a typed JSON object");
	type = json_object_get_string(t);
	if (!strcmp(type, "hello")) {
		if (!json_object_object_get_ex(o, "protocol", &v) ||
		    json_object_get_int(v) != FRAME_VERSION)
			fail(1, "hello: protocol %s (this tool speaks %d)",
			     v ? json_object_get_string(v) : "missing", FRAME_VERSION);
		else if (r.phase == 0) {
			r.phase = 1;
			r.t_measure = vr_mono_s() + r.warmup;
		}
	} else if (!strcmp(type, "error")) {
		json_object_object_get_ex(o, "error", &v);
		fail(1, "the viewer answered with an error: %s",
		     v ? json_object_get_string(v) : "(no text)");
	} else if (!strcmp(type, "state") && json_object_object_get_ex(o, "state", &v) &&
	           json_object_object_get_ex(v, "state", &t)) {
		snprintf(r.state, sizeof(r.state), "%s", json_object_get_string(t));
	} else if (!strcmp(type, "status") && r.phase == 2 &&
	           json_object_object_get_ex(o, "status", &v)) {
		if (!r.st_first)
			r.st_first = json_object_get(v);
		json_object_put(r.st_last);
		r.st_last = json_object_get(v);
		r.statuses++;
	}
	json_object_put(o);
}

/* Why a connection failed, as the system says it (libwebsockets only says that it did). */
static void probe(char *why, size_t len)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
	char port[8];
	int rc, fd;

	snprintf(port, sizeof(port), "%d", r.port);
	rc = getaddrinfo(r.addr, port, &hints, &ai);
	if (rc) {
		snprintf(why, len, " (%s: %s)", r.addr, gai_strerror(rc));
		return;
	}
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd >= 0) {
		struct timeval tv = {.tv_sec = 2};

		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		if (connect(fd, ai->ai_addr, ai->ai_addrlen))
			snprintf(why, len, " (%s port %d: %s)", r.addr, r.port, strerror(errno));
		close(fd);
	}
	freeaddrinfo(ai);
}

static int callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                    size_t len)
{
	switch (reason) {
	case LWS_CALLBACK_CLIENT_CONNECTION_ERROR: {
		int http = wsi ? (int)lws_http_client_http_response(wsi) : 0;
		char why[300] = "";

		if (http)
			snprintf(why, sizeof(why), " (HTTP %d%s)", http,
			         http == 401 ? ": the viewer needs a valid --token" : "");
		else
			probe(why, sizeof(why));
		fail(1, "%s: cannot connect: %s%s", r.url, in ? (const char *)in : "unknown error",
		     why);
		break;
	}
	case LWS_CALLBACK_CLIENT_ESTABLISHED:
		lws_callback_on_writable(wsi);
		break;
	case LWS_CALLBACK_CLIENT_WRITEABLE:
		if (r.phase >= 1 && !r.subscribed) {
			unsigned char buf[LWS_PRE + sizeof(r.subscribe)];
			size_t n = strlen(r.subscribe);

			memcpy(buf + LWS_PRE, r.subscribe, n);
			if (lws_write(wsi, buf + LWS_PRE, n, LWS_WRITE_TEXT) < (int)n)
				return -1;
			r.subscribed = true;
		}
		break;
	case LWS_CALLBACK_CLIENT_RECEIVE:
		if (r.rxlen + len + 1 > r.rxcap) {
			size_t cap = (r.rxlen + len + 1) * 2;
			unsigned char *p = cap <= 2 * RX_MAX ? realloc(r.rx, cap) : NULL;

			if (!p) {
				fail(1, "a message of more than %zu bytes", r.rxlen + len);
				return -1;
			}
			r.rx = p, r.rxcap = cap;
		}
		memcpy(r.rx + r.rxlen, in, len);
		r.rxlen += len;
		if (!lws_is_final_fragment(wsi) || lws_remaining_packet_payload(wsi))
			break;
		r.rx[r.rxlen] = 0;
		if (lws_frame_is_binary(wsi))
			on_picture(r.rx, r.rxlen, vr_real_ns());
		else
			on_text((const char *)r.rx);
		r.rxlen = 0;
		if (r.phase == 1 && !r.subscribed)
			lws_callback_on_writable(wsi);
		break;
	case LWS_CALLBACK_CLIENT_CLOSED:
		fail(1, "%s: the viewer closed the connection", r.url);
		break;
	default:
		break;
	}
	return r.phase == 3 ? -1 : 0;
}

static void tick(lws_sorted_usec_list_t *sul)
{
	double now = vr_mono_s();

	if (r.phase == 0 && now > r.t0 + r.timeout)
		fail(1, "%s: no hello from the viewer within %g s", r.url, r.timeout);
	if (r.phase == 1 && now >= r.t_measure) {
		r.phase = 2;
		r.t_end = now + r.seconds;
	}
	if (r.phase == 2 && now >= r.t_end) {
		r.measured = now - (r.t_end - r.seconds);
		r.phase = 3;
	}
	if (r.phase != 3)
		lws_sul_schedule(r.ctx, 0, sul, tick, 20 * LWS_US_PER_MS);
}

static struct json_object *num(double v)
{
	char s[32];

	if (!isfinite(v))
		return NULL;
	snprintf(s, sizeof(s), "%.3f", v);
	return json_object_new_double_s(v, s);
}

static struct json_object *pair(uint32_t a, uint32_t b)
{
	struct json_object *v = json_object_new_array();

	json_object_array_add(v, json_object_new_int64(a));
	json_object_array_add(v, json_object_new_int64(b));
	return v;
}

/* {p50, p99, max, n} of one field of samples s[0..n). */
static struct json_object *pcts(const struct sample *s, size_t n, size_t field)
{
	struct json_object *o = json_object_new_object();
	double *v = malloc((n ? n : 1) * sizeof(*v));
	size_t m = 0;

	for (size_t i = 0; v && i < n; i++) {
		double x = field == 0 ? s[i].acq : field == 1 ? s[i].pub : s[i].read;
		if (isfinite(x))
			v[m++] = x;
	}
	json_object_object_add(o, "p50", num(v ? vr_percentile(v, m, 50) : NAN));
	json_object_object_add(o, "p99", num(v ? vr_percentile(v, m, 99) : NAN));
	json_object_object_add(o, "max", num(v ? vr_percentile(v, m, 100) : NAN));
	json_object_object_add(o, "n", json_object_new_int64((int64_t)m));
	free(v);
	return o;
}

static double status_num(struct json_object *st, const char *a, const char *b)
{
	struct json_object *o = st, *v = NULL;

	if (!o || !json_object_object_get_ex(o, a, b ? &o : &v) ||
	    (b && !json_object_object_get_ex(o, b, &v)))
		return NAN;
	return v && !json_object_is_type(v, json_type_null) ? json_object_get_double(v) : NAN;
}

static struct json_object *report(double dt)
{
	struct json_object *o = json_object_new_object(), *pics = json_object_new_object();
	struct json_object *views = json_object_new_array(), *d = json_object_new_object(), *x;
	struct sample *all = NULL;
	size_t nall = 0;
	double t0 = status_num(r.st_first, "time", NULL), t1 = status_num(r.st_last, "time", NULL);

	for (unsigned i = 0; i < VOLREC_IMAGE_COUNT; i++) {
		struct kind_stats *k = &r.k[i];
		struct json_object *p;
		struct sample *na;

		if (!(r.want & 1u << i))
			continue;
		json_object_array_add(views, json_object_new_string(kind_name(i)));
		p = json_object_new_object();
		json_object_object_add(p, "frames", json_object_new_int64((int64_t)k->frames));
		json_object_object_add(p, "pictures_per_s", num((double)k->frames / dt));
		json_object_object_add(p, "bytes", json_object_new_int64((int64_t)k->bytes));
		json_object_object_add(p, "bytes_per_s", num((double)k->bytes / dt));
		json_object_object_add(p, "deflated", json_object_new_int64((int64_t)k->deflated));
		json_object_object_add(p, "shape", pair(k->rows, k->cols));
		json_object_object_add(p, "reduced_by", pair(k->rstep, k->cstep));
		json_object_object_add(p, "acq_to_received_ms", pcts(k->s, k->n, 0));
		json_object_object_add(p, "publish_to_received_ms", pcts(k->s, k->n, 1));
		json_object_object_add(p, "viewer_read_to_received_ms", pcts(k->s, k->n, 2));
		json_object_object_add(pics, kind_name(i), p);
		na = realloc(all, (nall + k->n + 1) * sizeof(*all));
		if (na) {
			all = na;
			memcpy(all + nall, k->s, k->n * sizeof(*all));
			nall += k->n;
		}
	}
	json_object_object_add(o, "tool", json_object_new_string("view_latency"));
	json_object_object_add(o, "url", json_object_new_string(r.url));
	json_object_object_add(o, "views", views);
	json_object_object_add(o, "warmup_s", num(r.warmup));
	json_object_object_add(o, "seconds", num(dt));
	json_object_object_add(o, "inflated", json_object_new_boolean(r.inflate));
	if (r.inflate)
		json_object_object_add(o, "inflate_ms_total", num(r.inflate_ms));
	json_object_object_add(
	        o, "measured",
	        json_object_new_string(
	                "acquisition (the frame's t_last_ns: the volume's last B-scan "
	                "acquired, CLOCK_REALTIME) to the picture's last byte "
	                "received at the viewer's WebSocket (CLOCK_REALTIME, same "
	                "host), no decoding or drawing"));
	json_object_object_add(o, "pictures", pics);
	json_object_object_add(o, "acq_to_received_ms_all", pcts(all, nall, 0));
	free(all);
	json_object_object_add(o, "viewer_state", json_object_new_string(r.state));
	json_object_object_add(d, "status_messages", json_object_new_int(r.statuses));
	json_object_object_add(d, "volumes_per_s",
	                       num(t1 > t0 ? (status_num(r.st_last, "volumes_published", NULL) -
	                                      status_num(r.st_first, "volumes_published", NULL)) /
	                                             (t1 - t0)
	                                   : status_num(r.st_last, "rates", "volumes_per_s")));
	json_object_object_add(d, "drops",
	                       num(status_num(r.st_last, "drops", "total") -
	                           status_num(r.st_first, "drops", "total")));
	if (r.st_last && json_object_object_get_ex(r.st_last, "latency_ms", &x))
		json_object_object_add(d, "latency_ms", json_object_get(x));
	json_object_object_add(o, "daemon", d);
	return o;
}

/* ws://HOST[:PORT][/PATH]; HOST may be [v6]. */
static int parse_url(const char *u, const char *token)
{
	const char *p = u, *h, *e;
	long port;

	if (strncmp(u, "ws://", 5))
		return -EINVAL;
	p += 5;
	h = p;
	e = *p == '[' ? strchr(p, ']') : p + strcspn(p, ":/?#");
	if (!e || e == h || (size_t)(e - h) >= sizeof(r.addr))
		return -EINVAL;
	e += *p == '[';
	snprintf(r.addr, sizeof(r.addr), "%.*s", (int)(e - h - 2 * (*p == '[')), h + (*p == '['));
	port = 80;
	if (*e == ':') {
		char *end;

		errno = 0;
		port = strtol(e + 1, &end, 10);
		if (end == e + 1 || errno || port < 1 || port > 65535 || (*end && *end != '/'))
			return -EINVAL;
		e = end;
	}
	if (*e && *e != '/')
		return -EINVAL;
	r.port = (int)port;
	snprintf(r.host, sizeof(r.host), "%.*s", (int)(e - h), h); /* the Host header */
	snprintf(r.path, sizeof(r.path), "%s%s%s%s", *e ? e : "/",
	         token ? strchr(e, '?') ? "&" : "?" : "", token ? "token=" : "",
	         token ? token : "");
	return 0;
}

/* --views (comma-separated picture names) into r.want; -EINVAL, said, for an unknown name. */
static int views_parse(const char *views)
{
	for (const char *p = views; *p;) {
		size_t n = strcspn(p, ",");
		char name[32];
		int k;

		snprintf(name, sizeof(name), "%.*s", (int)(n < 31 ? n : 31), p);
		k = n < 31 ? kind_from_name(name) : -1;
		if (k < 0) {
			fprintf(stderr, "view_latency: --views: '%.*s' is not a picture (", (int)n,
			        p);
			for (unsigned i = 0; kind_name(i); i++)
				fprintf(stderr, "%s%s", i ? ", " : "", kind_name(i));
			fprintf(stderr, ")\n");
			return -EINVAL;
		}
		r.want |= 1u << k;
		p += n + (p[n] == ',');
	}
	return 0;
}

/* The page's subscribe message for r.want into r.subscribe: {"type": "subscribe", "views":
 * [...]}. */
static void subscribe_message(void)
{
	struct json_object *sub = json_object_new_object(), *v = json_object_new_array();

	for (unsigned i = 0; i < VOLREC_IMAGE_COUNT; i++)
		if (r.want & 1u << i)
			json_object_array_add(v, json_object_new_string(kind_name(i)));
	json_object_object_add(sub, "type", json_object_new_string("subscribe"));
	json_object_object_add(sub, "views", v);
	snprintf(r.subscribe, sizeof(r.subscribe), "%s",
	         json_object_to_json_string_ext(sub, JSON_C_TO_STRING_PLAIN));
	json_object_put(sub);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: view_latency [--url ws://127.0.0.1:8090/ws] [--token T]\n"
	           "                    [--seconds S] [--warmup S] [--timeout S] [--inflate]\n"
	           "                    [--views enface_mean,bscan,slice,render]\n");
}

/* The options into r and *url, *token, *views; -1 when done, else the exit status. */
static int parse_args(int argc, char **argv, const char **url, const char **token,
                      const char **views)
{
	static const struct option opts[] = {
	        {"url", required_argument, NULL, 'u'},     {"token", required_argument, NULL, 't'},
	        {"seconds", required_argument, NULL, 's'}, {"warmup", required_argument, NULL, 'w'},
	        {"timeout", required_argument, NULL, 'T'}, {"views", required_argument, NULL, 'v'},
	        {"inflate", no_argument, NULL, 'i'},       VR_CLI_LONGOPTS_END};
	const struct vr_cli_str strs[] = {{'u', url}, {'t', token}, {'v', views}};
	int ch;

	while ((ch = VR_CLI_GETOPT(argc, argv, "h", opts, strs)) != -1) {
		double v;

		switch (ch) {
		case 'i':
			r.inflate = true;
			break;
		case 's':
		case 'w':
		case 'T':
			if (vr_parse_seconds(optarg, ch == 'w', &v) || (ch != 'w' && v < 0.1) ||
			    v > 86400) {
				fprintf(stderr,
				        "view_latency: --%s %s: need seconds%s (at most 86400)\n",
				        ch == 's'   ? "seconds"
				        : ch == 'w' ? "warmup"
				                    : "timeout",
				        optarg, ch == 'w' ? " >= 0" : " >= 0.1");
				return 2;
			}
			*(ch == 's' ? &r.seconds : ch == 'w' ? &r.warmup : &r.timeout) = v;
			break;
		default:
			return vr_cli_usage(usage, ch);
		}
	}
	if (vr_cli_args_done("view_latency", argc, argv))
		return 2;
	return -1;
}

int main(int argc, char **argv)
{
	const char *url = "ws://127.0.0.1:8090/ws", *token = NULL;
	const char *views = "enface_mean,bscan,slice,render";
	static const struct lws_protocols protocols[] = {
	        {"volrec-view", callback, 0, 1 << 16, 0, NULL, 0}, {NULL, NULL, 0, 0, 0, NULL, 0}};
	struct lws_context_creation_info ci;
	struct lws_client_connect_info cc;
	struct json_object *out;
	int rc;

	rc = parse_args(argc, argv, &url, &token, &views);
	if (rc >= 0)
		return rc;
	snprintf(r.url, sizeof(r.url), "%s", url);
	if (token &&
	    (!*token || strspn(token, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	                              "0123456789-._~") != strlen(token))) {
		fprintf(stderr, "view_latency: --token: need 1 or more of A-Z a-z 0-9 - . _ ~\n");
		return 2;
	}
	if (strlen(url) >= 1000 || parse_url(url, token)) {
		fprintf(stderr,
		        "view_latency: --url %s: need ws://HOST[:PORT][/PATH] (loopback: no TLS)\n",
		        url);
		return 2;
	}
	if (views_parse(views))
		return 2;
	subscribe_message();
	signal(SIGPIPE, SIG_IGN);
	lws_set_log_level(0, NULL);
	memset(&ci, 0, sizeof(ci));
	ci.port = CONTEXT_PORT_NO_LISTEN;
	ci.protocols = protocols;
	r.ctx = lws_create_context(&ci);
	if (!r.ctx) {
		fprintf(stderr, "view_latency: libwebsockets: cannot create its context\n");
		return 1;
	}
	memset(&cc, 0, sizeof(cc));
	cc.context = r.ctx;
	cc.address = r.addr;
	cc.port = r.port;
	cc.path = r.path;
	cc.host = r.host;
	cc.protocol = "volrec-view";
	r.t0 = vr_mono_s();
	if (!lws_client_connect_via_info(&cc) && r.phase != 3) {
		char why[300] = "";

		probe(why, sizeof(why));
		fail(1, "%s: cannot connect%s", r.url, why[0] ? why : " (libwebsockets gave up)");
	}
	lws_sul_schedule(r.ctx, 0, &r.sul, tick, 20 * LWS_US_PER_MS);
	while (r.phase != 3 && lws_service(r.ctx, 0) >= 0)
		;
	lws_context_destroy(r.ctx);
	if (r.rc == 0) {
		uint64_t n = 0;

		for (unsigned i = 0; i < VOLREC_IMAGE_COUNT; i++)
			n += r.k[i].frames;
		if (!n) {
			fprintf(stderr,
			        "view_latency: %s: no pictures in %g s (the viewer's state: %s; is "
			        "volrecd publishing views?)\n",
			        r.url, r.seconds, r.state);
			r.rc = 1;
		}
		out = report(r.measured);
		printf("%s\n", json_object_to_json_string_ext(
		                       out, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED));
		json_object_put(out);
	}
	for (unsigned i = 0; i < VOLREC_IMAGE_COUNT; i++)
		free(r.k[i].s);
	free(r.rx);
	json_object_put(r.st_first);
	json_object_put(r.st_last);
	return r.rc;
}
