/* SPDX-License-Identifier: MIT */
/*
 * The viewer's server (libwebsockets, one thread): the page's assets over HTTP(S) and one
 * WebSocket per browser (docs/viewer.md). Each browser gets, whenever its socket can take a
 * message, the newest frame of each picture it shows that it has not had yet — a slow browser
 * skips pictures, nothing queues up for it, and no browser waits for another. Access: tokens
 * (URL argument, cookie or bearer header) when a token file is given; on loopback without one,
 * any local page of the viewer's own origin.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <json-c/json.h>
#include <libwebsockets.h>

#include "base/base.h"
#include "clients/view/internal.h"

#define VW_ASSETS_MAX                 64
#define VW_TEXT_QUEUE                 16 /* replies and errors waiting for one browser, at most */
#define VW_INFLIGHT                   8 /* a browser's requests whose replies it has not had, at most */
#define VW_JSON_DEPTH                 16    /* nesting of a browser's message, at most */
#define VW_HEADERS_MAX                16384 /* bytes of a request's header values: more get 431 */
#define VW_HEADERS_BUF                32768 /* libwebsockets' buffer: more close the connection unanswered */
#define VW_HEADER_SECS                10 /* a request's headers must arrive within this */
#define HTTP_STATUS_HEADERS_TOO_LARGE 431

enum vw_access { VW_DENIED, VW_VIEW, VW_CONTROL };

struct vw_asset {
	char url[128]; /* "/index.html" */
	char path[VW_PATH_MAX];
	const char *mime;
};

/* A text message with room for the WebSocket header in front. */
struct vw_text {
	size_t len;
	unsigned char *buf; /* VW_PRE + len */
};

struct vw_session {
	struct lws *wsi;
	struct vw_session *next;
	uint64_t uid; /* for control replies that arrive after a close */
	enum vw_access access;
	unsigned want;                /* picture kinds shown */
	uint64_t sent[VW_KIND_COUNT]; /* serial of the last frame sent, per kind */
	unsigned rr;                  /* next kind to look at first */
	uint64_t text_sent[VW_TEXTS]; /* serial of the last text sent, per kind */
	struct vw_text q[VW_TEXT_QUEUE];
	unsigned qhead, qlen;
	unsigned pending; /* requests at volrecd: each holds one slot of q for its reply */
	bool rx_paused;   /* q and pending full: the browser's messages wait in its socket */
	char *rx;         /* a message in fragments */
	size_t rxlen;
	bool rx_oversized, rx_binary;
	uint64_t frames, bytes; /* sent */
	bool hello;
	bool own; /* its own crosshair or slab: key */
	struct vw_own_key key;
};

struct vw_cookie {
	uint64_t cookie;               /* 0: free */
	uint64_t session;              /* vw_session.uid */
	struct json_object *client_id; /* the browser's id (a reference), NULL none */
};

struct vw_server {
	struct lws_context *ctx;
	struct lws_vhost *vh;
	struct vw_server_opts o;
	struct vw_tokens tokens;
	struct vw_feed *feed;
	struct vw_control *ctl;
	struct vw_asset assets[VW_ASSETS_MAX];
	int nassets;
	int port;
	volatile sig_atomic_t stop;
	struct vw_session *sessions;
	uint32_t nsessions;
	uint64_t next_uid, next_cookie;
	struct vw_cookie *cookies; /* VW_INFLIGHT per browser: every browser's requests fit */
	unsigned ncookies;
	lws_sorted_usec_list_t sul_ctl, sul_tick;
	bool ctl_polling;
	/* what the feed delivered, owned by this thread */
	struct vw_frame *frame[VW_KIND_COUNT];
	uint64_t serial; /* of the last frame taken, daemon's or own: one count for both */
	struct vw_own_out own[VW_OWN_MAX]; /* the newest pictures of the browsers' own views */
	unsigned nown;
	uint32_t shape[3]; /* of the newest volume the feed read */
	struct vw_text text[VW_TEXTS];
	uint64_t text_serial[VW_TEXTS];
};

/* The type of each text's message, and the member that holds it. */
static const char *const TEXT_TYPE[VW_TEXTS] = {"state", "status", "event"};

static struct vw_server *server_of(struct lws *wsi)
{
	return lws_context_user(lws_get_context(wsi));
}

/* ---- text messages ------------------------------------------------------------------------ */

/* Set t to s, made valid UTF-8: a browser closes the socket over a text message that is not,
 * so each byte that is not part of a character becomes U+FFFD. */
static int text_set(struct vw_text *t, const char *s)
{
	size_t len = strlen(s);
	bool valid = vr_utf8_valid(s, len);
	size_t cap = valid ? len + 1 : 3 * len + 1; /* U+FFFD: 3 bytes for 1 */
	unsigned char *b = malloc(VW_PRE + cap);

	if (!b)
		return -ENOMEM;
	if (valid) {
		memcpy(b + VW_PRE, s, len);
	} else {
		vr_utf8_sanitize(s, (char *)b + VW_PRE, cap);
		len = strlen((char *)b + VW_PRE);
	}
	free(t->buf);
	t->buf = b;
	t->len = len;
	return 0;
}

static void text_free(struct vw_text *t)
{
	free(t->buf);
	t->buf = NULL;
	t->len = 0;
}

/* Slots of s's queue taken: texts waiting and replies due from volrecd. */
static unsigned session_load(const struct vw_session *s)
{
	return s->qlen + s->pending;
}

/*
 * Queue a JSON object for one browser (taking the reference). Nothing queued is dropped: a
 * browser gets at most VW_INFLIGHT requests answered ahead of its reading (more are refused
 * with an error), and once even the errors fill the queue its messages are left unread in its
 * socket until it reads what it was sent.
 */
static void session_queue(struct vw_session *s, struct json_object *o)
{
	struct vw_text *t;

	if (s->qlen == VW_TEXT_QUEUE) { /* cannot happen: reading stops first */
		vw_log("browser %" PRIu64 ": reply queue full: a message dropped", s->uid);
		json_object_put(o);
		return;
	}
	t = &s->q[(s->qhead + s->qlen) % VW_TEXT_QUEUE];
	if (!text_set(t, json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN)))
		s->qlen++;
	json_object_put(o);
	if (session_load(s) >= VW_TEXT_QUEUE && !s->rx_paused) {
		s->rx_paused = true;
		lws_rx_flow_control(s->wsi, 0);
	}
	lws_callback_on_writable(s->wsi);
}

static void session_error(struct vw_server *sv, struct vw_session *s, struct json_object *id,
                          const char *fmt, ...) VR_PRINTF(4, 5);

static void session_error(struct vw_server *sv, struct vw_session *s, struct json_object *id,
                          const char *fmt, ...)
{
	struct json_object *o = json_object_new_object();
	char raw[2048], msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(raw, sizeof(raw), fmt, ap);
	va_end(ap);
	/* at most 511 bytes cut at a character (so never past raw's own cut at 2047) */
	vr_utf8_sanitize(raw, msg, sizeof(msg));
	vw_log_limited(VW_LOG_BROWSER, "browser %" PRIu64 ": %s", s->uid, msg);
	json_object_object_add(o, "type", json_object_new_string("error"));
	if (id)
		json_object_object_add(o, "id", json_object_get(id));
	json_object_object_add(o, "error", json_object_new_string(msg));
	session_queue(s, o);
}

/* ---- access --------------------------------------------------------------------------------- */

/* The token a request carries: ?token=, the cookie (in any of the Cookie headers, however
 * many other cookies of the host come along), or Authorization: Bearer. */
static bool request_token(struct lws *wsi, char *out, size_t len, bool *from_url)
{
	char buf[1024];
	const char *v;
	int n;

	*from_url = false;
	v = lws_get_urlarg_by_name(wsi, "token=", buf, (int)sizeof(buf));
	if (v) {
		snprintf(out, len, "%s", v);
		/* lws decodes a '+' of the query as a space; a token has none (vw_tokens_parse),
		 * but base64 ones have '+' */
		for (char *p = out; (p = strchr(p, ' '));)
			*p = '+';
		*from_url = true;
		return true;
	}
	for (int f = 0; (n = lws_hdr_fragment_length(wsi, WSI_TOKEN_HTTP_COOKIE, f)) > 0; f++) {
		char *c = malloc((size_t)n + 1);
		bool found = c &&
		             lws_hdr_copy_fragment(wsi, c, n + 1, WSI_TOKEN_HTTP_COOKIE, f) >= 0 &&
		             vw_cookie_token(c, out, len);

		free(c);
		if (found)
			return true;
	}
	return lws_hdr_copy(wsi, buf, (int)sizeof(buf), WSI_TOKEN_HTTP_AUTHORIZATION) > 0 &&
	       vw_bearer_token(buf, out, len);
}

/*
 * Who may do what. A WebSocket's Origin must be the viewer's own (no other site's page driving
 * the daemon through the user's browser). With a token file: the token's level. On loopback
 * without one: a request whose Host is a loopback name (no DNS rebinding) may view, and with
 * the control token generated at start may also control; a wrong token (a cookie of another
 * viewer of the same host, or of this one before a restart) only views.
 */
static enum vw_access access_of(struct vw_server *sv, struct lws *wsi, bool websocket,
                                bool *from_url, char *token, size_t tlen)
{
	char host[256] = "", origin[512] = "";
	bool have;

	*from_url = false;
	token[0] = 0;
	if (lws_hdr_copy(wsi, host, (int)sizeof(host), WSI_TOKEN_HOST) <= 0 &&
	    lws_hdr_copy(wsi, host, (int)sizeof(host), WSI_TOKEN_HTTP_COLON_AUTHORITY) <= 0)
		host[0] = 0;
	/* an origin longer than any a browser sends is not the viewer's own */
	if (websocket && lws_hdr_total_length(wsi, WSI_TOKEN_ORIGIN) > 0 &&
	    (lws_hdr_copy(wsi, origin, (int)sizeof(origin), WSI_TOKEN_ORIGIN) <= 0 ||
	     !vw_same_origin(origin, host)))
		return VW_DENIED;
	if (sv->o.open_view && !vw_loopback_host(host))
		return VW_DENIED;
	have = request_token(wsi, token, tlen, from_url);
	if (have && sv->tokens.control[0] && vw_token_equal(token, sv->tokens.control))
		return VW_CONTROL;
	if (have && sv->tokens.view[0] && vw_token_equal(token, sv->tokens.view))
		return VW_VIEW;
	*from_url = false; /* a wrong token is not made a cookie */
	return sv->o.open_view ? VW_VIEW : VW_DENIED;
}

/* Bytes of a request's header values (what libwebsockets keeps of them). */
static size_t header_bytes(struct lws *wsi)
{
	size_t n = 0;

	for (int t = 0; t < WSI_TOKEN_COUNT; t++) {
		int l = lws_hdr_total_length(wsi, (enum lws_token_indexes)t);

		if (l > 0)
			n += (size_t)l;
	}
	return n;
}

/* A status and nothing else, no body a browser could take for the page; a 401 asks for a
 * bearer token. */
static int send_empty(struct lws *wsi, unsigned status)
{
	unsigned char buf[LWS_PRE + 512], *start = buf + LWS_PRE, *p = start,
	                                  *end = buf + sizeof(buf);

	if (lws_add_http_header_status(wsi, status, &p, end) ||
	    (status == HTTP_STATUS_UNAUTHORIZED &&
	     lws_add_http_header_by_name(wsi, (const unsigned char *)"www-authenticate:",
	                                 (const unsigned char *)"Bearer realm=\"volrec\"", 21, &p,
	                                 end)) ||
	    lws_add_http_header_content_length(wsi, 0, &p, end) ||
	    lws_finalize_http_header(wsi, &p, end))
		return -1;
	if (lws_write(wsi, start, (size_t)(p - start), LWS_WRITE_HTTP_HEADERS) < 0)
		return -1;
	return 1;
}

/* ---- assets ----------------------------------------------------------------------------------- */

static const char *mime_of(const char *name)
{
	static const struct {
		const char *ext, *mime;
	} t[] = {
	        {".html", "text/html; charset=utf-8"},
	        {".js", "text/javascript; charset=utf-8"},
	        {".css", "text/css; charset=utf-8"},
	        {".png", "image/png"},
	        {".svg", "image/svg+xml"},
	        {".ico", "image/x-icon"},
	        {".json", "application/json"},
	};
	const char *dot = strrchr(name, '.');

	for (size_t i = 0; dot && i < sizeof(t) / sizeof(t[0]); i++)
		if (!strcmp(dot, t[i].ext))
			return t[i].mime;
	return "text/plain; charset=utf-8";
}

static bool plain_name(const char *n)
{
	if (n[0] == '.' || !n[0])
		return false;
	for (; *n; n++)
		if (!isalnum((unsigned char)*n) && !strchr("._-", *n))
			return false;
	return true;
}

/* Every plain file of dir and its subfolders (two levels), served under its relative path. */
static int assets_scan(struct vw_server *sv, const char *dir, const char *prefix, int depth)
{
	DIR *d = opendir(dir);
	struct dirent *e;

	if (!d)
		return -errno;
	while ((e = readdir(d))) {
		char path[VW_PATH_MAX], url[128];
		struct stat st;

		if (!plain_name(e->d_name))
			continue;
		if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) >= sizeof(path) ||
		    (size_t)snprintf(url, sizeof(url), "%s/%s", prefix, e->d_name) >= sizeof(url) ||
		    stat(path, &st))
			continue;
		if (S_ISDIR(st.st_mode) && depth < 2) {
			assets_scan(sv, path, url, depth + 1);
		} else if (S_ISREG(st.st_mode) && sv->nassets < VW_ASSETS_MAX) {
			struct vw_asset *a = &sv->assets[sv->nassets++];

			snprintf(a->url, sizeof(a->url), "%s", url);
			snprintf(a->path, sizeof(a->path), "%s", path);
			a->mime = mime_of(e->d_name);
		}
	}
	closedir(d);
	return 0;
}

static const struct vw_asset *asset_find(struct vw_server *sv, const char *url)
{
	if (!strcmp(url, "/") || !url[0])
		url = "/index.html";
	for (int i = 0; i < sv->nassets; i++)
		if (!strcmp(sv->assets[i].url, url))
			return &sv->assets[i];
	return NULL;
}

static int serve_asset(struct vw_server *sv, struct lws *wsi, const char *url)
{
	unsigned char hdr[4096], *p = hdr, *end = hdr + sizeof(hdr);
	char token[1024], cookie[1200];
	const struct vw_asset *a;
	bool from_url;
	enum vw_access acc;
	size_t hb = header_bytes(wsi);
	int n;

	if (hb > VW_HEADERS_MAX) {
		vw_log_limited(VW_LOG_HTTP, "http: 431 for %s (%zu bytes of headers, at most %d)",
		               url, hb, VW_HEADERS_MAX);
		return send_empty(wsi, HTTP_STATUS_HEADERS_TOO_LARGE) < 0
		               ? -1
		               : (lws_http_transaction_completed(wsi) ? -1 : 0);
	}
	acc = access_of(sv, wsi, false, &from_url, token, sizeof(token));
	if (acc == VW_DENIED) {
		vw_log_limited(VW_LOG_HTTP, "http: 401 for %s (no valid token)", url);
		return send_empty(wsi, HTTP_STATUS_UNAUTHORIZED) < 0
		               ? -1
		               : (lws_http_transaction_completed(wsi) ? -1 : 0);
	}
	a = asset_find(sv, url);
	if (!a) {
		if (lws_return_http_status(wsi, HTTP_STATUS_NOT_FOUND, NULL))
			return -1;
		return lws_http_transaction_completed(wsi) ? -1 : 0;
	}
#define HDR(name, value)                                                                           \
	lws_add_http_header_by_name(wsi, (const unsigned char *)(name),                            \
	                            (const unsigned char *)(value), (int)strlen(value), &p, end)
	if (HDR("cache-control:", "no-store") || HDR("x-content-type-options:", "nosniff") ||
	    HDR("referrer-policy:", "no-referrer") || HDR("x-frame-options:", "DENY") ||
	    HDR("content-security-policy:",
	        "default-src 'self'; connect-src 'self'; img-src 'self' data:; "
	        "style-src 'self' 'unsafe-inline'; script-src 'self'; frame-ancestors 'none'"))
		return -1;
	/* a token from the address becomes a cookie, so that the assets and the socket carry it */
	if (from_url) {
		snprintf(cookie, sizeof(cookie),
		         VW_COOKIE "=%s; Path=/; HttpOnly; SameSite=Strict%s", token,
		         sv->o.cert ? "; Secure" : "");
		if (HDR("set-cookie:", cookie))
			return -1;
	}
#undef HDR
	n = lws_serve_http_file(wsi, a->path, a->mime, (const char *)hdr, (int)(p - hdr));
	if (n < 0 || (n > 0 && lws_http_transaction_completed(wsi)))
		return -1;
	return 0;
}

/* ---- browser requests ------------------------------------------------------------------------ */

/* The frame of kind k that session s is due: of its own view, or the daemon's. */
static struct vw_frame *frame_for(const struct vw_server *sv, const struct vw_session *s,
                                  unsigned k)
{
	if (!s->own || !(VW_OWN_KINDS & (1u << k)))
		return sv->frame[k];
	for (unsigned i = 0; i < sv->nown; i++)
		if (vw_own_key_equal(&sv->own[i].key, &s->key))
			return sv->own[i].frame[k];
	return NULL;
}

static void own_free(struct vw_own_out *o)
{
	for (unsigned k = 0; k < VW_KIND_COUNT; k++) {
		vw_frame_free(o->frame[k]);
		o->frame[k] = NULL;
	}
}

/*
 * What the feed reads: the daemon's pictures that browsers at its view show, and the own views
 * (each once however many browsers share it) with the pictures their browsers show. Pictures of
 * views no browser shows any more are dropped. changed: a browser's view changed (the feed
 * extracts from the newest volume at once).
 */
static void update_wanted(struct vw_server *sv, bool changed)
{
	struct vw_mailbox *b = &sv->feed->box;
	struct vw_own_req req[VW_OWN_MAX];
	unsigned m = 0, n = 0;

	for (struct vw_session *s = sv->sessions; s; s = s->next) {
		unsigned i = 0;

		if (!s->own || !(s->want & VW_OWN_KINDS)) {
			m |= s->want;
			continue;
		}
		m |= s->want & ~VW_OWN_KINDS;
		while (i < n && !vw_own_key_equal(&req[i].key, &s->key))
			i++;
		if (i == n) { /* room checked when the view was set */
			req[n].key = s->key;
			req[n].fresh = false;
			req[n++].kinds = 0;
		}
		req[i].kinds |= s->want & VW_OWN_KINDS;
	}
	/* a view whose pictures the server lacks (new, or dropped when no browser had it a moment
	 * ago): extracted again even from a volume it was extracted from */
	for (unsigned i = 0; i < n; i++) {
		const struct vw_frame *const *fr = NULL;

		for (unsigned j = 0; j < sv->nown && !fr; j++)
			if (vw_own_key_equal(&sv->own[j].key, &req[i].key))
				fr = (const struct vw_frame *const *)sv->own[j].frame;
		for (unsigned k = 0; k < VW_KIND_COUNT && !req[i].fresh; k++)
			req[i].fresh = (req[i].kinds & (1u << k)) && (!fr || !fr[k]);
	}
	for (unsigned j = 0; j < sv->nown;) {
		unsigned i = 0;

		while (i < n && !vw_own_key_equal(&req[i].key, &sv->own[j].key))
			i++;
		if (i < n) {
			j++;
			continue;
		}
		own_free(&sv->own[j]);
		sv->own[j] = sv->own[--sv->nown];
	}
	pthread_mutex_lock(&b->lock);
	changed |= n != b->nreq;
	for (unsigned i = 0; i < n && !changed; i++)
		changed = !vw_own_key_equal(&req[i].key, &b->req[i].key) ||
		          req[i].kinds != b->req[i].kinds;
	memcpy(b->req, req, n * sizeof(req[0]));
	b->nreq = n;
	pthread_mutex_unlock(&b->lock);
	atomic_store(&sv->feed->wanted, m);
	atomic_store(&sv->feed->own_any, n > 0);
	if (changed && n)
		atomic_store(&sv->feed->own_changed, true);
}

/* The own views browsers have, counted once each, with s's new one (key) in place of its own;
 * past VW_OWN_MAX it stops counting. */
static unsigned own_views(const struct vw_server *sv, const struct vw_session *s,
                          const struct vw_own_key *key)
{
	struct vw_own_key seen[VW_OWN_MAX + 1];
	unsigned n = 0;

	seen[n++] = *key;
	for (const struct vw_session *o = sv->sessions; o && n <= VW_OWN_MAX; o = o->next) {
		unsigned i = 0;

		if (o == s || !o->own)
			continue;
		while (i < n && !vw_own_key_equal(&seen[i], &o->key))
			i++;
		if (i == n)
			seen[n++] = o->key;
	}
	return n;
}

static struct vw_session *session_by_uid(struct vw_server *sv, uint64_t uid)
{
	for (struct vw_session *s = sv->sessions; s; s = s->next)
		if (s->uid == uid)
			return s;
	return NULL;
}

static void on_control_reply(void *ctx, uint64_t cookie, bool ok, const char *error,
                             const char *reply_json)
{
	struct vw_server *sv = ctx;
	struct vw_cookie *ck = NULL;
	struct vw_session *s;
	struct json_object *o, *id, *r;

	for (unsigned i = 0; i < sv->ncookies; i++)
		if (sv->cookies[i].cookie == cookie)
			ck = &sv->cookies[i];
	if (!ck)
		return;
	ck->cookie = 0;
	id = ck->client_id;
	ck->client_id = NULL;
	s = session_by_uid(sv, ck->session);
	if (!error)
		error = "";
	if (!ok)
		vw_log_limited(VW_LOG_CONTROL, "control: %s", error);
	if (!s) {
		json_object_put(id);
		return;
	}
	s->pending--; /* its slot becomes the reply's */
	o = json_object_new_object();
	json_object_object_add(o, "type", json_object_new_string("reply"));
	json_object_object_add(o, "id", id); /* null when the request had none */
	json_object_object_add(o, "ok", json_object_new_boolean(ok));
	if (!ok)
		json_object_object_add(o, "error", json_object_new_string(error));
	r = reply_json ? json_tokener_parse(reply_json) : NULL;
	if (r)
		json_object_object_add(o, "reply", r);
	session_queue(s, o);
}

static void ctl_poll_cb(lws_sorted_usec_list_t *sul)
{
	struct vw_server *sv = lws_container_of(sul, struct vw_server, sul_ctl);

	if (vw_control_poll(sv->ctl, on_control_reply, sv) > 0)
		lws_sul_schedule(sv->ctx, 0, &sv->sul_ctl, ctl_poll_cb, 5 * LWS_US_PER_MS);
	else
		sv->ctl_polling = false;
}

/* Forward {"op": op, field: value} (field NULL: op alone), with the members of fields (an
 * object, or NULL) besides, to the daemon's control socket. */
static void forward(struct vw_server *sv, struct vw_session *s, struct json_object *id,
                    const char *op, const char *field, struct json_object *value,
                    struct json_object *fields)
{
	struct vw_cookie *ck = NULL;
	struct json_object *req;
	int rc;

	for (unsigned i = 0; i < sv->ncookies && !ck; i++)
		if (!sv->cookies[i].cookie)
			ck = &sv->cookies[i];
	if (!ck) {
		session_error(sv, s, id, "too many control requests in flight; try again");
		return;
	}
	req = json_object_new_object();
	json_object_object_add(req, "op", json_object_new_string(op));
	if (field)
		json_object_object_add(req, field, json_object_get(value));
	if (fields) {
		json_object_object_foreach(fields, k, v)
		{
			json_object_object_add(req, k, json_object_get(v));
		}
	}
	/* the daemon's log and event name the token, not the viewer's own uid */
	if (s->access == VW_CONTROL && sv->tokens.control_name[0]) {
		char via[96];

		snprintf(via, sizeof(via), "volrec view, token '%s'", sv->tokens.control_name);
		json_object_object_add(req, "via", json_object_new_string(via));
	}
	rc = vw_control_send(sv->ctl, json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN),
	                     ++sv->next_cookie);
	json_object_put(req);
	if (rc == -EAGAIN) {
		session_error(sv, s, id,
		              "volrecd's control socket %s is not there (daemon stopped?)",
		              sv->o.ctl_endpoint);
		return;
	}
	if (rc) {
		session_error(sv, s, id, "cannot send to volrecd's control socket: %s",
		              strerror(-rc));
		return;
	}
	ck->cookie = sv->next_cookie;
	ck->session = s->uid;
	s->pending++;
	ck->client_id = json_object_get(id);
	if (!sv->ctl_polling) {
		sv->ctl_polling = true;
		lws_sul_schedule(sv->ctx, 0, &sv->sul_ctl, ctl_poll_cb, 2 * LWS_US_PER_MS);
	}
}

/* A newly shown pane gets the newest picture at once. */
static void subscribe(struct vw_server *sv, struct vw_session *s, unsigned want)
{
	for (unsigned k = 0; k < VW_KIND_COUNT; k++)
		if ((want & (1u << k)) && !(s->want & (1u << k)))
			s->sent[k] = 0;
	s->want = want;
	update_wanted(sv, false);
	lws_callback_on_writable(s->wsi);
}

/* This browser's own crosshair and slab (or the daemon's again), checked against the newest
 * volume: refused with a message when outside it, never moved into it. */
static void set_view(struct vw_server *sv, struct vw_session *s, const struct vw_msg *m)
{
	struct vw_own_key key = s->key;
	struct json_object *o;
	char err[512];

	if (m->has_pos) {
		key.own_pos = m->own_pos;
		memcpy(key.pos, m->own_pos ? m->pos : (const uint32_t[3]){0}, sizeof(key.pos));
	}
	if (m->has_slab) {
		key.own_slab = m->own_slab;
		memcpy(key.slab, m->own_slab ? m->slab : (const uint32_t[2]){0}, sizeof(key.slab));
	}
	if ((key.own_pos || key.own_slab) &&
	    vw_view_check(sv->shape, key.own_pos ? key.pos : NULL, key.own_slab ? key.slab : NULL,
	                  err, sizeof(err))) {
		session_error(sv, s, m->id, "%s", err);
		return;
	}
	if ((key.own_pos || key.own_slab) && own_views(sv, s, &key) > VW_OWN_MAX) {
		session_error(sv, s, m->id,
		              "view: %d browsers' own views are shown already (at most %d): use "
		              "the daemon's or one of theirs",
		              VW_OWN_MAX, VW_OWN_MAX);
		return;
	}
	s->key = key;
	s->own = key.own_pos || key.own_slab;
	for (unsigned k = 0; k < VW_KIND_COUNT; k++)
		if (VW_OWN_KINDS & (1u << k))
			s->sent[k] = 0; /* the pictures of the new view, whatever was sent before */
	update_wanted(sv, true);
	o = json_object_new_object();
	json_object_object_add(o, "type", json_object_new_string("view"));
	if (m->id)
		json_object_object_add(o, "id", json_object_get(m->id));
	if (key.own_pos) {
		struct json_object *a = json_object_new_array();

		for (unsigned i = 0; i < 3; i++)
			json_object_array_add(a, json_object_new_int64(key.pos[i]));
		json_object_object_add(o, "position", a);
	} else {
		json_object_object_add(o, "position", NULL);
	}
	if (key.own_slab) {
		struct json_object *a = json_object_new_array();

		for (unsigned i = 0; i < 2; i++)
			json_object_array_add(a, json_object_new_int64(key.slab[i]));
		json_object_object_add(o, "slab", a);
	} else {
		json_object_object_add(o, "slab", NULL);
	}
	session_queue(s, o);
}

static void pong(struct vw_session *s, const struct vw_msg *m)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "type", json_object_new_string("pong"));
	if (m->id)
		json_object_object_add(o, "id", json_object_get(m->id));
	if (m->t)
		json_object_object_add(o, "t", json_object_get(m->t));
	json_object_object_add(o, "server_ns", json_object_new_int64((int64_t)vr_real_ns()));
	session_queue(s, o);
}

static void handle_message(struct vw_server *sv, struct vw_session *s, const char *text, size_t len)
{
	char err[2048];
	struct vw_msg m;

	if (vw_msg_parse(text, len, VW_JSON_DEPTH, &m, err, sizeof(err))) {
		session_error(sv, s, m.id, "%s", err);
	} else if (session_load(s) >= VW_INFLIGHT) {
		session_error(sv, s, m.id, "too many requests in flight (%d); wait for the replies",
		              VW_INFLIGHT);
	} else if (m.type == VW_MSG_SUBSCRIBE) {
		subscribe(sv, s, m.views);
	} else if (m.type == VW_MSG_PING) {
		pong(s, &m);
	} else if (m.type == VW_MSG_VIEW) {
		set_view(sv, s, &m); /* display, not data: no token needed */
	} else if (m.type != VW_MSG_GET && s->access != VW_CONTROL) {
		/* set, record_start, record_stop: they change what is recorded */
		const char *op = m.type == VW_MSG_SET            ? "set"
		                 : m.type == VW_MSG_RECORD_START ? "record_start"
		                                                 : "record_stop";

		if (sv->o.open_view)
			session_error(sv, s, m.id,
			              "%s: this browser may only view: open the address the viewer "
			              "printed at start (with ?token=...) to control",
			              op);
		else
			session_error(
			        sv, s, m.id,
			        "%s: this viewer's token may only view (the control token may "
			        "set and record)",
			        op);
	} else if (m.type == VW_MSG_SET) {
		forward(sv, s, m.id, "set", "values", m.values, NULL);
	} else if (m.type == VW_MSG_RECORD_START || m.type == VW_MSG_RECORD_STOP) {
		forward(sv, s, m.id, m.type == VW_MSG_RECORD_START ? "record_start" : "record_stop",
		        NULL, NULL, m.fields);
	} else {
		forward(sv, s, m.id, "get", m.key ? "key" : NULL, m.key, NULL);
	}
	vw_msg_free(&m);
}

/* ---- the feed's deliveries ----------------------------------------------------------------- */

/* The browser's message for a feed text: {"type": TYPE, TYPE: the text's JSON}. */
static void wrap_text(struct vw_text *t, uint64_t *serial, const char *type, const char *json)
{
	struct json_object *v = json_tokener_parse(json), *o;

	if (!v) {
		vw_log("%s: not JSON, not sent", type);
		return;
	}
	o = json_object_new_object();
	json_object_object_add(o, "type", json_object_new_string(type));
	json_object_object_add(o, type, v);
	if (!text_set(t, json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN)))
		(*serial)++;
	json_object_put(o);
}

/* The feed's new pictures of own views: each replaces the one of its view and kind, for the
 * views browsers still have (the others are dropped). Takes the frames. */
static void take_own(struct vw_server *sv, struct vw_own_out *out, unsigned nout)
{
	for (unsigned i = 0; i < nout; i++) {
		bool shown = false;
		unsigned j = 0;

		for (struct vw_session *s = sv->sessions; s && !shown; s = s->next)
			shown = s->own && vw_own_key_equal(&s->key, &out[i].key);
		while (j < sv->nown && !vw_own_key_equal(&sv->own[j].key, &out[i].key))
			j++;
		if (!shown || (j == sv->nown && sv->nown == VW_OWN_MAX)) {
			own_free(&out[i]);
			continue;
		}
		if (j == sv->nown) {
			memset(&sv->own[j], 0, sizeof(sv->own[j]));
			sv->own[sv->nown++].key = out[i].key;
		}
		for (unsigned k = 0; k < VW_KIND_COUNT; k++)
			if (out[i].frame[k]) {
				vw_frame_free(sv->own[j].frame[k]);
				sv->own[j].frame[k] = out[i].frame[k];
				out[i].frame[k]->serial = ++sv->serial;
			}
	}
}

/* The volume's shape changed (a reload, a new session): a browser's view outside the new one
 * is the daemon's again, and the browser is told. */
static void views_recheck(struct vw_server *sv)
{
	bool changed = false;

	for (struct vw_session *s = sv->sessions; s; s = s->next) {
		char err[512];

		if (!s->own ||
		    !vw_view_check(sv->shape, s->key.own_pos ? s->key.pos : NULL,
		                   s->key.own_slab ? s->key.slab : NULL, err, sizeof(err)))
			continue;
		memset(&s->key, 0, sizeof(s->key));
		s->own = false;
		for (unsigned k = 0; k < VW_KIND_COUNT; k++)
			if (VW_OWN_KINDS & (1u << k))
				s->sent[k] = 0;
		session_error(sv, s, NULL, "%s; showing the daemon's crosshair and slab again",
		              err);
		changed = true;
	}
	if (changed)
		update_wanted(sv, false);
}

static void take_mailbox(struct vw_server *sv)
{
	struct vw_mailbox *b = &sv->feed->box;
	struct vw_frame *fr[VW_KIND_COUNT];
	struct vw_own_out out[VW_OWN_MAX];
	unsigned nout;
	uint32_t shape[3];
	char *text[VW_TEXTS];
	bool clear;

	pthread_mutex_lock(&b->lock);
	if (!b->dirty) {
		pthread_mutex_unlock(&b->lock);
		return;
	}
	clear = b->clear;
	b->clear = false;
	memcpy(fr, b->frame, sizeof(fr));
	memset(b->frame, 0, sizeof(b->frame));
	memcpy(text, b->text, sizeof(text));
	memset(b->text, 0, sizeof(b->text));
	nout = b->nout;
	memcpy(out, b->out, nout * sizeof(out[0]));
	b->nout = 0;
	memcpy(shape, b->shape, sizeof(shape));
	b->dirty = false;
	pthread_mutex_unlock(&b->lock);

	for (unsigned i = 0; i < sv->nown && clear; i++)
		own_free(&sv->own[i]);
	if (nout) {
		take_own(sv, out, nout);
		update_wanted(sv, false); /* the views that have their pictures now */
	}
	if (memcmp(shape, sv->shape, sizeof(shape))) {
		memcpy(sv->shape, shape, sizeof(shape));
		views_recheck(sv);
	}

	for (unsigned k = 0; k < VW_KIND_COUNT && clear; k++) {
		vw_frame_free(sv->frame[k]); /* the session before's: never sent again */
		sv->frame[k] = NULL;
	}
	for (unsigned k = 0; k < VW_KIND_COUNT; k++)
		if (fr[k]) {
			vw_frame_free(sv->frame[k]);
			sv->frame[k] = fr[k];
			fr[k]->serial = ++sv->serial;
		}
	for (unsigned t = 0; t < VW_TEXTS; t++) {
		if (text[t])
			wrap_text(&sv->text[t], &sv->text_serial[t], TEXT_TYPE[t], text[t]);
		free(text[t]);
	}
	lws_callback_on_writable_all_protocol(sv->ctx,
	                                      lws_vhost_name_to_protocol(sv->vh, VW_SUBPROTOCOL));
}

/* ---- writing ---------------------------------------------------------------------------------- */

static int write_text(struct lws *wsi, struct vw_text *t)
{
	return lws_write(wsi, t->buf + VW_PRE, t->len, LWS_WRITE_TEXT) < (int)t->len ? -1 : 0;
}

/* The first text s has not had yet, VW_TEXTS when none. */
static unsigned text_due(const struct vw_server *sv, const struct vw_session *s)
{
	unsigned t = 0;

	while (t < VW_TEXTS && (s->text_sent[t] == sv->text_serial[t] || !sv->text[t].buf))
		t++;
	return t;
}

/* Drop the oldest text of s's queue. */
static void queue_pop(struct vw_session *s)
{
	text_free(&s->q[s->qhead]);
	s->qhead = (s->qhead + 1) % VW_TEXT_QUEUE;
	s->qlen--;
}

/* One message to s: what it waits for most, then ask for the next turn if more is due. */
static int session_write(struct vw_server *sv, struct vw_session *s)
{
	struct vw_text hello = {0};
	unsigned t;
	int rc = 0;
	bool more;

	if (!s->hello) {
		struct json_object *o = json_object_new_object(), *v = json_object_new_array();

		for (unsigned k = 0; k < VW_KIND_COUNT; k++)
			json_object_array_add(v, json_object_new_string(vw_kind_name(k)));
		json_object_object_add(o, "type", json_object_new_string("hello"));
		json_object_object_add(o, "protocol", json_object_new_int(VW_FRAME_VERSION));
		json_object_object_add(o, "instance", json_object_new_string(sv->o.instance));
		json_object_object_add(o, "control",
		                       json_object_new_boolean(s->access == VW_CONTROL));
		json_object_object_add(o, "views", v);
		json_object_object_add(o, "max_message",
		                       json_object_new_int((int)sv->o.max_message));
		s->hello = true;
		rc = text_set(&hello, json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
		json_object_put(o);
		if (!rc)
			rc = write_text(s->wsi, &hello);
		text_free(&hello);
	} else if (s->qlen) {
		rc = write_text(s->wsi, &s->q[s->qhead]);
		queue_pop(s);
		if (s->rx_paused && session_load(s) < VW_TEXT_QUEUE) {
			s->rx_paused = false;
			lws_rx_flow_control(s->wsi, 1);
		}
	} else if ((t = text_due(sv, s)) < VW_TEXTS) {
		rc = write_text(s->wsi, &sv->text[t]);
		s->text_sent[t] = sv->text_serial[t];
	} else {
		for (unsigned i = 0; i < VW_KIND_COUNT; i++) {
			unsigned k = (s->rr + i) % VW_KIND_COUNT;
			struct vw_frame *f = frame_for(sv, s, k);

			if (!(s->want & (1u << k)) || !f || s->sent[k] == f->serial)
				continue;
			if (lws_write(s->wsi, f->buf + VW_PRE, f->len, LWS_WRITE_BINARY) <
			    (int)f->len)
				return -1;
			s->sent[k] = f->serial;
			s->frames++;
			s->bytes += f->len;
			s->rr = k + 1;
			break;
		}
	}
	if (rc)
		return -1;
	more = s->qlen || text_due(sv, s) < VW_TEXTS;
	for (unsigned k = 0; k < VW_KIND_COUNT && !more; k++) {
		struct vw_frame *f = frame_for(sv, s, k);

		more = (s->want & (1u << k)) && f && s->sent[k] != f->serial;
	}
	if (more)
		lws_callback_on_writable(s->wsi);
	return 0;
}

/* ---- callbacks ------------------------------------------------------------------------------- */

/*
 * An upgrade is a browser's session only on /ws with the volrec-view subprotocol: any other
 * would be bound to the HTTP protocol, accepted and then ignored, and not counted against
 * --max-browsers. 401 without access, 400 for the rest.
 */
static int confirm_upgrade(struct vw_server *sv, struct lws *wsi)
{
	char token[1024], path[256] = "", proto[256] = "", shown[2][64];
	size_t hb = header_bytes(wsi);
	bool from_url;

	if (hb > VW_HEADERS_MAX) {
		vw_log_limited(VW_LOG_HTTP, "websocket: 431 (%zu bytes of headers, at most %d)", hb,
		               VW_HEADERS_MAX);
		return send_empty(wsi, HTTP_STATUS_HEADERS_TOO_LARGE);
	}
	if (access_of(sv, wsi, true, &from_url, token, sizeof(token)) == VW_DENIED) {
		vw_log_limited(VW_LOG_HTTP, "websocket: 401 (no valid token, or a foreign origin)");
		return send_empty(wsi, HTTP_STATUS_UNAUTHORIZED);
	}
	if (lws_hdr_copy(wsi, path, (int)sizeof(path), WSI_TOKEN_GET_URI) < 0)
		path[0] = 0;
	if (lws_hdr_copy(wsi, proto, (int)sizeof(proto), WSI_TOKEN_PROTOCOL) < 0)
		proto[0] = 0;
	if (!strcmp(path, "/ws") && vw_offers_subprotocol(proto))
		return 0;
	vr_utf8_sanitize(path, shown[0], sizeof(shown[0]));
	vr_utf8_sanitize(proto, shown[1], sizeof(shown[1]));
	vw_log_limited(
	        VW_LOG_HTTP,
	        "websocket: 400 for path '%s', subprotocols '%s' (need /ws and " VW_SUBPROTOCOL ")",
	        shown[0], shown[1]);
	return send_empty(wsi, HTTP_STATUS_BAD_REQUEST);
}

static int cb_http(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                   size_t len)
{
	struct vw_server *sv = server_of(wsi);

	switch (reason) {
	case LWS_CALLBACK_HTTP:
		return serve_asset(sv, wsi, (const char *)in);
	case LWS_CALLBACK_HTTP_FILE_COMPLETION:
		return lws_http_transaction_completed(wsi) ? -1 : 0;
	case LWS_CALLBACK_HTTP_CONFIRM_UPGRADE:
		return confirm_upgrade(sv, wsi);
	case LWS_CALLBACK_HTTP_BODY:
		return -1; /* nothing here takes a body */
	default:
		break;
	}
	return lws_callback_http_dummy(wsi, reason, user, in, len);
}

static void session_close(struct vw_server *sv, struct vw_session *s)
{
	for (struct vw_session **pp = &sv->sessions; *pp; pp = &(*pp)->next)
		if (*pp == s) {
			*pp = s->next;
			sv->nsessions--;
			break;
		}
	/* its requests at volrecd: their slots are free for the browsers that remain */
	for (unsigned i = 0; i < sv->ncookies; i++) {
		struct vw_cookie *ck = &sv->cookies[i];

		if (ck->cookie && ck->session == s->uid) {
			vw_control_cancel(sv->ctl, ck->cookie);
			json_object_put(ck->client_id);
			memset(ck, 0, sizeof(*ck));
		}
	}
	while (s->qlen)
		queue_pop(s);
	free(s->rx);
	s->rx = NULL;
	update_wanted(sv, false);
}

static int cb_ws(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                 size_t len)
{
	struct vw_server *sv = server_of(wsi);
	struct vw_session *s = user;
	char token[1024], peer[128] = "";
	bool from_url;

	switch (reason) {
	case LWS_CALLBACK_HTTP_CONFIRM_UPGRADE:
		return confirm_upgrade(sv, wsi);
	case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
		if (sv->nsessions >= sv->o.max_sessions) {
			vw_log_limited(VW_LOG_HTTP,
			               "websocket: refused: %u browsers already (--max-browsers)",
			               sv->nsessions);
			return 1;
		}
		return access_of(sv, wsi, true, &from_url, token, sizeof(token)) == VW_DENIED;
	case LWS_CALLBACK_ESTABLISHED:
		memset(s, 0, sizeof(*s));
		s->wsi = wsi;
		s->uid = ++sv->next_uid;
		s->access = access_of(sv, wsi, true, &from_url, token, sizeof(token));
		if (s->access == VW_DENIED) /* cannot happen: filtered above */
			return -1;
		s->next = sv->sessions;
		sv->sessions = s;
		sv->nsessions++;
		lws_get_peer_simple(wsi, peer, sizeof(peer));
		vw_log_limited(VW_LOG_SESSIONS, "browser %" PRIu64 " connected from %s (%s)",
		               s->uid, peer,
		               s->access == VW_CONTROL ? "view and control" : "view only");
		/* the current state and status at once; old events are not news */
		s->text_sent[VW_EVENT] = sv->text_serial[VW_EVENT];
		lws_callback_on_writable(wsi);
		return 0;
	case LWS_CALLBACK_CLOSED:
		vw_log_limited(VW_LOG_SESSIONS,
		               "browser %" PRIu64 " disconnected (%" PRIu64 " pictures, %" PRIu64
		               " bytes sent)",
		               s->uid, s->frames, s->bytes);
		session_close(sv, s);
		return 0;
	case LWS_CALLBACK_SERVER_WRITEABLE:
		return session_write(sv, s);
	case LWS_CALLBACK_RECEIVE:
		if (lws_frame_is_binary(wsi))
			s->rx_binary = true;
		if (!s->rx_oversized && !s->rx_binary) {
			if (s->rxlen + len > sv->o.max_message) {
				s->rx_oversized = true;
			} else {
				char *n = realloc(s->rx, s->rxlen + len + 1);

				if (!n)
					return -1;
				s->rx = n;
				memcpy(s->rx + s->rxlen, in, len);
				s->rxlen += len;
			}
		}
		if (!lws_is_final_fragment(wsi) || lws_remaining_packet_payload(wsi))
			return 0;
		if (s->rx_binary)
			session_error(sv, s, NULL, "message: binary messages are not accepted");
		else if (s->rx_oversized)
			session_error(sv, s, NULL, "message: longer than %u bytes: ignored",
			              sv->o.max_message);
		else
			handle_message(sv, s, s->rx, s->rxlen);
		s->rxlen = 0;
		s->rx_oversized = s->rx_binary = false;
		return 0;
	case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
		if (sv)
			take_mailbox(sv);
		return 0;
	default:
		break;
	}
	return 0;
}

static const struct lws_protocols protocols[] = {
        {"http", cb_http, 0, 0, 0, NULL, 0},
        {VW_SUBPROTOCOL, cb_ws, sizeof(struct vw_session), 4096, 0, NULL, 0},
        {NULL, NULL, 0, 0, 0, NULL, 0},
};

static void tick_cb(lws_sorted_usec_list_t *sul)
{
	struct vw_server *sv = lws_container_of(sul, struct vw_server, sul_tick);

	take_mailbox(sv);
	vw_log_flush();
	lws_sul_schedule(sv->ctx, 0, &sv->sul_tick, tick_cb, 250 * LWS_US_PER_MS);
}

static void lws_emit(int level, const char *line)
{
	size_t n = strlen(line);

	while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
		n--;
	vw_log_limited(VW_LOG_LWS, "libwebsockets%s: %.*s", level == LLL_ERR ? " error" : "",
	               (int)n, line);
}

int vw_server_create(const struct vw_server_opts *o, struct vw_feed *feed, struct vw_server **out)
{
	struct lws_context_creation_info ci;
	struct vw_server *sv = calloc(1, sizeof(*sv));
	int rc;

	if (!sv)
		return -ENOMEM;
	sv->o = *o;
	sv->feed = feed;
	sv->tokens = *o->tokens;
	rc = assets_scan(sv, o->assets, "", 0);
	if (rc || !asset_find(sv, "/")) {
		vw_log("assets: %s has no index.html", o->assets);
		rc = rc ? rc : -ENOENT;
		goto out_free;
	}
	sv->ncookies = o->max_sessions * VW_INFLIGHT;
	sv->cookies = calloc(sv->ncookies, sizeof(*sv->cookies));
	if (!sv->cookies) {
		rc = -ENOMEM;
		goto out_free;
	}
	rc = vw_control_open(o->ctl_endpoint, 3.0, sv->ncookies, &sv->ctl);
	if (rc) {
		vw_log("control socket %s: %s", o->ctl_endpoint, strerror(-rc));
		goto out_free;
	}
	lws_set_log_level(LLL_ERR | LLL_WARN, lws_emit);
	memset(&ci, 0, sizeof(ci));
	ci.options = LWS_SERVER_OPTION_EXPLICIT_VHOSTS |
	             (o->cert ? LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT : 0);
	ci.user = sv;
	ci.protocols = protocols;
	ci.port = CONTEXT_PORT_NO_LISTEN;
	/* a browser's headers with many cookies of the host fit; more get 431 (header_bytes)
	 * up to the buffer, beyond it the connection is closed */
	ci.max_http_header_data = VW_HEADERS_BUF;
	sv->ctx = lws_create_context(&ci);
	if (!sv->ctx) {
		rc = -EIO;
		goto out_control;
	}
	memset(&ci, 0, sizeof(ci));
	ci.port = o->port;
	ci.iface = o->addr[0] ? o->addr : NULL;
	ci.protocols = protocols;
	ci.vhost_name = "volrec-view";
	ci.options = o->cert ? LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT : 0;
	if (o->addr[0] && !strchr(o->addr, ':'))
		ci.options |= LWS_SERVER_OPTION_DISABLE_IPV6;
	ci.ssl_cert_filepath = o->cert;
	ci.ssl_private_key_filepath = o->key;
	ci.alpn = "http/1.1"; /* WebSockets over HTTP/1.1 upgrades, as on plain http */
	/* slow clients: headers within VW_HEADER_SECS of their first byte, an idle keep-alive
	 * connection closed after 30 s; no client holds the one thread (it never blocks) */
	ci.keepalive_timeout = 30;
	ci.timeout_secs = 30;
	ci.timeout_secs_ah_idle = VW_HEADER_SECS;
	sv->vh = lws_create_vhost(sv->ctx, &ci);
	if (!sv->vh) {
		vw_log("cannot listen on %s:%d%s", o->addr[0] ? o->addr : "*", o->port,
		       o->cert ? " (or the certificate and key were refused)" : "");
		lws_context_destroy(sv->ctx);
		rc = -EADDRNOTAVAIL;
		goto out_control;
	}
	sv->port = lws_get_vhost_listen_port(sv->vh);
	lws_sul_schedule(sv->ctx, 0, &sv->sul_tick, tick_cb, 250 * LWS_US_PER_MS);
	*out = sv;
	return 0;
out_control:
	vw_control_close(sv->ctl);
out_free:
	free(sv->cookies);
	free(sv);
	return rc;
}

int vw_server_port(const struct vw_server *s)
{
	return s->port;
}

void vw_server_wake(void *server)
{
	struct vw_server *sv = server;

	lws_cancel_service(sv->ctx);
}

int vw_server_run(struct vw_server *s)
{
	while (!s->stop)
		if (lws_service(s->ctx, 0) < 0)
			return -EIO;
	return 0;
}

void vw_server_stop(struct vw_server *s)
{
	s->stop = 1;
	lws_cancel_service(s->ctx);
}

void vw_server_destroy(struct vw_server *s)
{
	if (!s)
		return;
	lws_context_destroy(s->ctx);
	vw_control_close(s->ctl);
	for (unsigned k = 0; k < VW_KIND_COUNT; k++)
		vw_frame_free(s->frame[k]);
	for (unsigned i = 0; i < s->nown; i++)
		own_free(&s->own[i]);
	for (unsigned t = 0; t < VW_TEXTS; t++)
		text_free(&s->text[t]);
	for (unsigned i = 0; i < s->ncookies; i++)
		json_object_put(s->cookies[i].client_id);
	free(s->cookies);
	free(s);
}
