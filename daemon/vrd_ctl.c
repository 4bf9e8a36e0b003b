/* SPDX-License-Identifier: MIT */
/*
 * volrecd's control socket (vrd_ctl.h, docs/control.md): bounded JSON requests over a ZeroMQ
 * ROUTER socket, validated exactly like the configuration file (cfg_set_keys), answered without
 * ever blocking the service loop; acquisition and processing run in their own threads.
 */
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zmq.h>

#include "vrd_ctl.h"

struct vrd_ctl {
	void *sock;
	struct vrd_ctl_ops svc;
	char path[CFG_PATH_MAX]; /* the ipc socket file, removed on close */
};

static char *reply_text(struct json_object *o)
{
	char *s = strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));

	json_object_put(o);
	return s;
}

static struct json_object *reply_new(bool ok, const char *id)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "ok", json_object_new_boolean(ok));
	if (id)
		json_object_object_add(o, "id", json_object_new_string(id));
	return o;
}

/* A refusal {"ok": false, "id", "error"}, to which a caller may add members. */
VR_PRINTF(2, 3) static struct json_object *reply_fail(const char *id, const char *fmt, ...)
{
	char msg[CFG_ERR_MAX], clean[CFG_ERR_MAX];
	struct json_object *o = reply_new(false, id);
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	vr_utf8_sanitize(msg, clean, sizeof(clean));
	json_object_object_add(o, "error", json_object_new_string(clean));
	return o;
}

#define reply_error(...) reply_text(reply_fail(__VA_ARGS__))

/* Whether reply (one JSON object, as every answer makes it) says "ok": false. */
static bool reply_refused(const char *reply)
{
	struct json_object *o = json_tokener_parse(reply), *ok;
	bool refused = o && json_object_object_get_ex(o, "ok", &ok) &&
	               json_object_is_type(ok, json_type_boolean) && !json_object_get_boolean(ok);

	json_object_put(o);
	return refused;
}

/* The YAML text of a set value: a JSON string is YAML text as it stands ("hann", "[20, 90]");
 * any other JSON value is written as JSON, which YAML reads the same. */
static const char *value_text(struct json_object *v)
{
	if (json_object_is_type(v, json_type_string))
		return json_object_get_string(v);
	return json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN);
}

static char *op_get(const struct vrd_ctl_ops *svc, struct json_object *req, const char *id,
                    const struct vrd_ctl_peer *peer)
{
	const struct vr_config *cfg = svc->config(svc->ctx);
	struct json_object *key, *o;
	char *text = NULL;
	size_t len = 0;
	int rc;

	(void)peer;
	if (json_object_object_get_ex(req, "key", &key)) {
		char err[CFG_ERR_MAX];

		if (!json_object_is_type(key, json_type_string))
			return reply_error(id, "get: key must be a string (a key path such as "
			                       "preprocess.db_range)");
		rc = cfg_get_key(cfg, json_object_get_string(key), &text, err, sizeof(err));
		if (rc < 0)
			return reply_error(id, "%s", err);
		o = reply_new(true, id);
		json_object_object_add(o, "key", json_object_get(key));
		json_object_object_add(o, "value", json_object_new_string(text));
		free(text);
		return reply_text(o);
	}
	{
		FILE *f = open_memstream(&text, &len);

		if (!f)
			return NULL;
		rc = cfg_dump(cfg, f);
		if (fclose(f) || rc < 0) {
			free(text);
			return reply_error(id, "get: cannot write the configuration");
		}
	}
	o = reply_new(true, id);
	json_object_object_add(o, "config", json_object_new_string_len(text, (int)len));
	free(text);
	return reply_text(o);
}

static char *op_set(const struct vrd_ctl_ops *svc, struct json_object *req, const char *id,
                    const struct vrd_ctl_peer *peer)
{
	const char *paths[VRD_CTL_MAX_KEYS], *values[VRD_CTL_MAX_KEYS];
	char *copies[VRD_CTL_MAX_KEYS], err[CFG_ERR_MAX];
	struct json_object *vals, *o, *applied;
	struct vr_config next;
	size_t n = 0, i;
	bool oom;
	int rc;

	if (!json_object_object_get_ex(req, "values", &vals) ||
	    !json_object_is_type(vals, json_type_object))
		return reply_error(id, "set: values must be an object of key paths and values "
		                       "({\"preprocess.db_range\": [20, 90]})");
	json_object_object_foreach(vals, k, v)
	{
		(void)v;
		if (n == VRD_CTL_MAX_KEYS)
			return reply_error(id, "set: more than %d keys in one request",
			                   VRD_CTL_MAX_KEYS);
		paths[n++] = k;
	}
	if (n == 0)
		return reply_error(id, "set: no keys given");
	/* value_text may return json-c's per-object buffer: copy each before the next call */
	for (i = 0; i < n; i++) {
		copies[i] = strdup(value_text(json_object_object_get(vals, paths[i])));
		if (!copies[i])
			break;
		values[i] = copies[i];
	}
	oom = i < n || cfg_copy(&next, svc->config(svc->ctx)) < 0;
	if (!oom) {
		rc = cfg_set_keys(&next, paths, values, n, err, sizeof(err));
		if (rc == 0)
			rc = svc->apply(svc->ctx, &next, paths, n, peer, err, sizeof(err));
		cfg_free(&next);
	}
	while (i--)
		free(copies[i]);
	if (oom)
		return NULL;
	if (rc == -EBUSY) {
		/* one change at a time: the client may send the same request again shortly */
		o = reply_fail(id, "%s", err);
		json_object_object_add(o, "retry", json_object_new_boolean(true));
		return reply_text(o);
	}
	if (rc < 0)
		return reply_error(id, "%s", err);
	o = reply_new(true, id);
	applied = json_object_new_array();
	for (i = 0; i < n; i++)
		json_object_array_add(applied, json_object_new_string(paths[i]));
	json_object_object_add(o, "applied", applied);
	json_object_object_add(o, "note",
	                       json_object_new_string("runtime change: applied from the next "
	                                              "volume; a reload (SIGHUP) re-reads the file "
	                                              "and drops it"));
	return reply_text(o);
}

static char *op_reset_history(const struct vrd_ctl_ops *svc, struct json_object *req,
                              const char *id, const struct vrd_ctl_peer *peer)
{
	char err[CFG_ERR_MAX];

	(void)req;
	if (svc->reset_history(svc->ctx, peer, err, sizeof(err)) < 0)
		return reply_error(id, "%s", err);
	return reply_text(reply_new(true, id));
}

static char *op_status(const struct vrd_ctl_ops *svc, struct json_object *req, const char *id,
                       const struct vrd_ctl_peer *peer)
{
	struct json_object *o = reply_new(true, id), *st = svc->status(svc->ctx);

	(void)req, (void)peer;
	json_object_object_add(o, "status", st ? st : json_object_new_object());
	return reply_text(o);
}

/* The ops: each takes op, id, expires_ms and its one field (NULL: none); any other field is
 * refused. */
static const struct {
	const char *name, *field;
	char *(*answer)(const struct vrd_ctl_ops *svc, struct json_object *req, const char *id,
	                const struct vrd_ctl_peer *peer);
} OPS[] = {
        {"get", "key", op_get},
        {"set", "values", op_set},
        {"reset_history", NULL, op_reset_history},
        {"status", NULL, op_status},
};

/*
 * A request that carries expires_ms (CLOCK_MONOTONIC milliseconds: the socket is ipc://, on
 * this machine) and is read after it is refused, nothing done, so that a client that gave up
 * waiting knows it was not applied. The refusal, or NULL to go on.
 */
static char *expired(struct json_object *req, const char *id, const char *op)
{
	struct json_object *e, *o;
	double at, now = (double)vr_mono_ns() / 1e6;

	if (!json_object_object_get_ex(req, "expires_ms", &e))
		return NULL;
	if (!json_object_is_type(e, json_type_int) && !json_object_is_type(e, json_type_double))
		return reply_error(id,
		                   "expires_ms: must be a number (CLOCK_MONOTONIC ms), not a "
		                   "JSON %s",
		                   json_type_to_name(json_object_get_type(e)));
	at = json_object_get_double(e);
	if (now <= at)
		return NULL;
	o = reply_fail(id,
	               "%s: expired %.0f ms before volrecd read it (expires_ms %.0f, now %.0f): "
	               "not applied",
	               op, now - at, at, now);
	json_object_object_add(o, "expired", json_object_new_boolean(true));
	return reply_text(o);
}

/*
 * A client that acts for someone else (the web viewer for a browser's token) names them in
 * "via": a string of at most VRD_CTL_VIA_MAX - 1 bytes, kept with its control characters as
 * U+FFFD and its newlines and tabs as spaces, which the log and the event add to the peer's
 * uid. *who is the peer with it; returns the refusal, or NULL to go on.
 */
static char *via_of(struct json_object *req, const char *id, const struct vrd_ctl_peer *peer,
                    struct vrd_ctl_peer *who)
{
	struct json_object *v;
	size_t len;

	*who = *peer;
	who->via[0] = '\0';
	if (!json_object_object_get_ex(req, "via", &v))
		return NULL;
	if (!json_object_is_type(v, json_type_string))
		return reply_error(id,
		                   "via: must be a string (who the request is for), not a JSON %s",
		                   json_type_to_name(json_object_get_type(v)));
	len = (size_t)json_object_get_string_len(v);
	if (len >= sizeof(who->via))
		return reply_error(id, "via: %zu bytes, at most %zu", len, sizeof(who->via) - 1);
	vr_utf8_sanitize(json_object_get_string(v), who->via, sizeof(who->via));
	for (char *p = who->via; *p; p++)
		if (*p == '\n' || *p == '\t')
			*p = ' '; /* one line of the log */
	return NULL;
}

char *vrd_ctl_answer(const struct vrd_ctl_ops *svc, const char *request, size_t len,
                     const struct vrd_ctl_peer *peer, bool *refused)
{
	struct json_object *req, *op, *idv;
	struct vrd_ctl_peer who;
	const char *id = NULL, *name;
	char *reply = NULL, err[CFG_ERR_MAX], shown[68];
	size_t i;

	*refused = true;
	if (len > VRD_CTL_MAX_REQUEST)
		return reply_error(NULL, "request too large (%zu bytes, at most %d)", len,
		                   VRD_CTL_MAX_REQUEST);
	if (!vr_utf8_valid(request, len))
		return reply_error(NULL, "request is not UTF-8 text");
	req = vr_json_parse_object(request, len, VRD_CTL_MAX_DEPTH, err, sizeof(err));
	if (!req)
		return reply_error(NULL, "request is not one JSON object: %s", err);
	if (json_object_object_get_ex(req, "id", &idv)) {
		if (!json_object_is_type(idv, json_type_string)) {
			reply = reply_error(NULL,
			                    "id: must be a string (echoed in the reply), not a "
			                    "JSON %s",
			                    json_type_to_name(json_object_get_type(idv)));
			goto out;
		}
		id = json_object_get_string(idv);
	}
	if (!json_object_object_get_ex(req, "op", &op) ||
	    !json_object_is_type(op, json_type_string)) {
		reply = reply_error(id, "op: missing or not a string (get, set, reset_history or "
		                        "status)");
		goto out;
	}
	name = json_object_get_string(op);
	for (i = 0; i < VR_ARRAY_SIZE(OPS) && strcmp(name, OPS[i].name); i++)
		;
	if (i == VR_ARRAY_SIZE(OPS)) {
		vr_utf8_sanitize(name, shown, sizeof(shown));
		reply = reply_error(id, "op: '%s' is unknown (get, set, reset_history or status)",
		                    shown);
		goto out;
	}
	json_object_object_foreach(req, k, v)
	{
		(void)v;
		if (strcmp(k, "op") && strcmp(k, "id") && strcmp(k, "expires_ms") &&
		    strcmp(k, "via") && (!OPS[i].field || strcmp(k, OPS[i].field))) {
			vr_utf8_sanitize(k, shown, sizeof(shown));
			reply = reply_error(
			        id, "%s: unknown field '%s' (it takes op, id, expires_ms%s%s)",
			        name, shown, OPS[i].field ? " and " : "",
			        OPS[i].field ? OPS[i].field : "");
			goto out;
		}
	}
	reply = via_of(req, id, peer, &who);
	if (!reply)
		reply = expired(req, id, name);
	if (!reply)
		reply = OPS[i].answer(svc, req, id, &who);
out:
	if (reply)
		*refused = reply_refused(reply);
	json_object_put(req);
	return reply;
}

int vrd_ctl_open(void *zctx, const char *endpoint, const struct vrd_ctl_ops *svc,
                 struct vrd_ctl **out, char *err, size_t errlen)
{
	struct vrd_ctl *c;
	int64_t maxmsg = VRD_CTL_HARD_LIMIT;
	int linger = 0, rc;

	if (strncmp(endpoint, "ipc://", 6))
		return vr_err(
		        err, errlen, -EINVAL,
		        "control endpoint %s: only ipc:// is accepted (a tcp:// control socket "
		        "needs CURVE and an allow-list of client keys)",
		        endpoint);
	c = calloc(1, sizeof(*c));
	if (!c)
		return vr_err(err, errlen, -ENOMEM, "control socket: out of memory");
	c->svc = *svc;
	snprintf(c->path, sizeof(c->path), "%s", endpoint + 6);
	c->sock = zmq_socket(zctx, ZMQ_ROUTER);
	if (!c->sock || zmq_setsockopt(c->sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof(maxmsg)) ||
	    zmq_setsockopt(c->sock, ZMQ_LINGER, &linger, sizeof(linger))) {
		rc = vr_err(err, errlen, -ENOMEM, "control socket: %s", zmq_strerror(zmq_errno()));
		goto out_free;
	}
	/* a stale socket file of a dead daemon would make bind fail with EADDRINUSE */
	unlink(c->path);
	if (zmq_bind(c->sock, endpoint)) {
		rc = -zmq_errno();
		vr_err(err, errlen, rc, "control socket: cannot bind %s: %s", endpoint,
		       zmq_strerror(-rc));
		goto out_free;
	}
	/* 0660 and the run_dir's group, whatever the umask (operators are in group volrec) */
	{
		char dir[CFG_PATH_MAX], *slash;
		struct stat st;

		snprintf(dir, sizeof(dir), "%s", c->path);
		slash = strrchr(dir, '/');
		if (slash)
			*slash = '\0';
		if (chmod(c->path, 0660) ||
		    (slash && stat(dir, &st) == 0 && st.st_gid != getegid() &&
		     chown(c->path, (uid_t)-1, st.st_gid))) {
			rc = vr_err_errno(err, errlen, -errno,
			                  "control socket %s: cannot set its mode", c->path);
			goto out_free;
		}
	}
	*out = c;
	return 0;
out_free:
	if (c->sock)
		zmq_close(c->sock);
	free(c);
	return rc;
}

int vrd_ctl_fd(struct vrd_ctl *c)
{
	int fd = -1;
	size_t len = sizeof(fd);

	if (zmq_getsockopt(c->sock, ZMQ_FD, &fd, &len))
		return -1;
	return fd;
}

static void peer_of(zmq_msg_t *m, struct vrd_ctl_peer *p)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);
	int fd = zmq_msg_get(m, ZMQ_SRCFD);

	memset(p, 0, sizeof(*p));
	if (fd >= 0 && getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0) {
		p->have_uid = true;
		p->uid = cr.uid;
		p->pid = cr.pid;
	}
}

/* Receive the rest of a multipart message into parts (at most max; extra parts are counted in
 * *extra and dropped). */
static int recv_parts(void *sock, zmq_msg_t *parts, int max, int *extra)
{
	int n = 0, more = 1;
	size_t len;

	*extra = 0;
	while (more) {
		zmq_msg_t tmp, *m = n < max ? &parts[n] : &tmp;

		zmq_msg_init(m);
		if (zmq_msg_recv(m, sock, ZMQ_DONTWAIT) < 0) {
			zmq_msg_close(m);
			break;
		}
		len = sizeof(more);
		if (zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &len))
			more = 0;
		if (n < max)
			n++;
		else {
			zmq_msg_close(&tmp);
			(*extra)++;
		}
	}
	return n;
}

int vrd_ctl_process(struct vrd_ctl *c)
{
	int done = 0;

	/* ROUTER: [peer identity][empty delimiter (REQ clients)][one JSON frame]; a ROUTER never
	 * blocks and has no send/receive state to get stuck in when a peer goes away */
	while (done < VRD_CTL_BURST) {
		struct vrd_ctl_peer peer;
		zmq_msg_t parts[3];
		int n, extra, body;
		bool refused, delim;
		char *reply;

		n = recv_parts(c->sock, parts, 3, &extra);
		if (n == 0)
			break;
		delim = n >= 2 && zmq_msg_size(&parts[1]) == 0;
		body = delim ? 2 : 1;
		if (n <= body || extra || n > body + 1) {
			reply = reply_error(NULL, "a request is one frame holding one JSON object");
		} else {
			peer_of(&parts[body], &peer);
			reply = vrd_ctl_answer(&c->svc, zmq_msg_data(&parts[body]),
			                       zmq_msg_size(&parts[body]), &peer, &refused);
		}
		if (!reply)
			reply = strdup("{\"ok\":false,\"error\":\"out of memory\"}");
		/* reply to the identity; a peer that is gone or slow loses its reply */
		if (reply && zmq_send(c->sock, zmq_msg_data(&parts[0]), zmq_msg_size(&parts[0]),
		                      ZMQ_SNDMORE | ZMQ_DONTWAIT) >= 0) {
			if (delim)
				zmq_send(c->sock, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT);
			zmq_send(c->sock, reply, strlen(reply), ZMQ_DONTWAIT);
		}
		free(reply);
		for (int i = 0; i < n; i++)
			zmq_msg_close(&parts[i]);
		done++;
	}
	return done;
}

void vrd_ctl_close(struct vrd_ctl *c)
{
	if (!c)
		return;
	zmq_close(c->sock);
	unlink(c->path);
	free(c);
}
