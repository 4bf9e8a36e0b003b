/* SPDX-License-Identifier: MIT */
/*
 * The viewer's client of the daemon's control socket (docs/control.md): one SOCK_SEQPACKET
 * connection (ipc/ctl_wire.c), made when a request is sent and made again after the daemon
 * restarted, with any number of requests in flight and never blocking: replies are matched to
 * their browser by the request id the viewer puts in, and a request the daemon does not answer
 * in time is answered with an error here.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>
#include <unistd.h>

#include "base/base.h"
#include "clients/view/internal.h"
#include "ipc/ipc.h"

/* A request volrecd read before it expired is answered at once: waited this much longer */
#define REPLY_GRACE_S 1.0

struct vw_pending {
	uint64_t id;     /* 0: free */
	uint64_t cookie; /* the caller's */
	double deadline; /* CLOCK_MONOTONIC s */
};

struct vw_control {
	int fd;                 /* the connection, -1 until a request is sent */
	char path[VW_PATH_MAX]; /* the socket file */
	char endpoint[VW_PATH_MAX];
	double timeout_s;
	uint64_t next_id;
	unsigned np; /* requests in flight, at most */
	struct vw_pending *p;
};

int vw_control_open(const char *endpoint, double timeout_s, unsigned max_inflight,
                    struct vw_control **out)
{
	struct vw_control *c = calloc(1, sizeof(*c));

	if (!c)
		return -ENOMEM;
	c->np = max_inflight;
	c->p = calloc(max_inflight, sizeof(*c->p));
	if (!c->p) {
		free(c);
		return -ENOMEM;
	}
	snprintf(c->endpoint, sizeof(c->endpoint), "%s", endpoint);
	snprintf(c->path, sizeof(c->path), "%s",
	         strncmp(endpoint, "ipc://", 6) ? endpoint : endpoint + 6);
	c->timeout_s = timeout_s;
	c->next_id = 1;
	c->fd = -1;
	*out = c;
	return 0;
}

void vw_control_close(struct vw_control *c)
{
	if (!c)
		return;
	if (c->fd >= 0)
		close(c->fd);
	free(c->p);
	free(c);
}

/* The connection, made now if there is none (a daemon that restarted has a new socket). */
static int connection(struct vw_control *c)
{
	if (c->fd < 0)
		c->fd = ipc_ctl_connect(c->path);
	return c->fd;
}

static void disconnect(struct vw_control *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
}

int vw_control_send(struct vw_control *c, const char *request_json, uint64_t cookie)
{
	struct json_object *o = json_tokener_parse(request_json);
	struct vw_pending *slot = NULL;
	char id[32];
	const char *text;
	double expires;
	int rc = 0;

	if (!o || !json_object_is_type(o, json_type_object)) {
		json_object_put(o);
		return -EINVAL;
	}
	for (unsigned i = 0; i < c->np && !slot; i++)
		if (!c->p[i].id)
			slot = &c->p[i];
	if (!slot) {
		json_object_put(o);
		return -ENOSPC;
	}
	snprintf(id, sizeof(id), "view-%" PRIu64, c->next_id);
	json_object_object_add(o, "id", json_object_new_string(id));
	/* volrecd refuses it unread past this: a request it does not answer is not applied */
	expires = vr_mono_s() + c->timeout_s;
	json_object_object_add(o, "expires_ms", json_object_new_int64((int64_t)(expires * 1000)));
	text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
	rc = connection(c);
	if (rc >= 0) {
		rc = ipc_ctl_send(c->fd, text, strlen(text));
		if (rc == -EPIPE || rc == -ECONNRESET || rc == -ENOTCONN) {
			/* the daemon restarted since: once more on a new connection */
			disconnect(c);
			rc = connection(c);
			if (rc >= 0)
				rc = ipc_ctl_send(c->fd, text, strlen(text));
		}
	}
	/* nothing listening: as "not there" (the caller says the daemon is stopped) */
	if (rc == -ENOENT || rc == -ECONNREFUSED) {
		disconnect(c);
		rc = -EAGAIN;
	}
	json_object_put(o);
	if (rc)
		return rc;
	slot->id = c->next_id++;
	slot->cookie = cookie;
	slot->deadline = expires + REPLY_GRACE_S;
	return 0;
}

/* The pending request a reply's id names, NULL if none: *given_up tells whether it was one of
 * ours that expired or was cancelled, rather than not ours at all. */
static struct vw_pending *match(struct vw_control *c, struct json_object *reply, bool *given_up)
{
	struct json_object *id;
	const char *s;
	uint64_t n;

	*given_up = false;
	if (!json_object_object_get_ex(reply, "id", &id) ||
	    !json_object_is_type(id, json_type_string))
		return NULL;
	s = json_object_get_string(id);
	if (sscanf(s, "view-%" SCNu64, &n) != 1 || !n)
		return NULL;
	for (unsigned i = 0; i < c->np; i++)
		if (c->p[i].id == n)
			return &c->p[i];
	*given_up = n < c->next_id;
	return NULL;
}

void vw_control_cancel(struct vw_control *c, uint64_t cookie)
{
	for (unsigned i = 0; i < c->np; i++)
		if (c->p[i].id && c->p[i].cookie == cookie)
			c->p[i].id = 0;
}

int vw_control_poll(struct vw_control *c, vw_control_done done, void *ctx)
{
	double now;
	int left = 0;

	while (c->fd >= 0) {
		struct json_object *reply, *ok, *err;
		struct vw_pending *p;
		bool given_up = false;
		char *text = NULL;
		size_t len;
		int rc = ipc_ctl_recv(c->fd, 0, &text, &len);

		if (rc == -EAGAIN)
			break;
		if (rc == -EMSGSIZE) {
			vw_log("control: dropped a reply larger than %u bytes", IPC_CTL_REPLY_MAX);
			continue;
		}
		if (rc < 0) { /* the daemon went away: its replies with it (requests time out) */
			disconnect(c);
			break;
		}
		reply = json_tokener_parse(text);
		p = reply && json_object_is_type(reply, json_type_object)
		            ? match(c, reply, &given_up)
		            : NULL;
		if (p) {
			bool is_ok = json_object_object_get_ex(reply, "ok", &ok) &&
			             json_object_get_boolean(ok);
			const char *e = !is_ok && json_object_object_get_ex(reply, "error", &err)
			                        ? json_object_get_string(err)
			                        : NULL;
			uint64_t cookie = p->cookie;

			p->id = 0;
			done(ctx, cookie, is_ok, is_ok ? NULL : (e ? e : "refused"), text);
		} else if (!given_up) {
			vw_log("control: dropped a reply that matches no request: %.200s", text);
		}
		json_object_put(reply);
		free(text);
	}
	now = vr_mono_s();
	for (unsigned i = 0; i < c->np; i++) {
		char e[VW_PATH_MAX + 192];

		if (!c->p[i].id)
			continue;
		if (now < c->p[i].deadline) {
			left++;
			continue;
		}
		c->p[i].id = 0;
		snprintf(e, sizeof(e),
		         "volrecd did not read the request within %.1f s (control socket %s): it "
		         "expired unread and is not applied",
		         c->timeout_s, c->endpoint);
		done(ctx, c->p[i].cookie, false, e, NULL);
	}
	return left;
}
