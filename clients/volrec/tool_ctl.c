/* SPDX-License-Identifier: MIT */
/*
 * Requests to the daemon's control socket (<run_dir>/<instance>.ctl, docs/control.md) that the
 * tools share: `volrec get/set` and `volrec record --raw`.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#include "base/base.h"
#include "clients/volrec/tools.h"
#include "ipc/ipc.h"

int tool_ctl_try(const struct tool_target *t, struct json_object *req, double timeout,
                 struct json_object **reply, char *why, size_t len)
{
	char path[TOOL_PATH_MAX + 96], *text = NULL;
	const char *body = json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN);
	/* a request volrecd read in time is answered at once: wait a second beyond its expiry */
	int ms = (int)(timeout * 1000.0) + 1000, rc, fd;
	uint64_t deadline;
	size_t n;
	struct stat st;

	snprintf(path, sizeof(path), "%s/%s.ctl", t->run_dir, t->instance);
	if (stat(path, &st) != 0 || !S_ISSOCK(st.st_mode)) {
		snprintf(why, len,
		         "no control socket %s: volrecd of instance '%s' is not running (or is "
		         "older than the control socket)",
		         path, t->instance);
		return VR_EXIT_NO_DAEMON;
	}
	if (access(path, R_OK | W_OK) != 0) {
		snprintf(why, len,
		         "%s: permission denied (the control socket is for the daemon's group, "
		         "volrec: add yourself to it)",
		         path);
		return VR_EXIT_PERM;
	}
	fd = ipc_ctl_connect(path);
	if (fd == -EACCES || fd == -EPERM) {
		snprintf(why, len, "%s: permission denied (add yourself to its group)", path);
		return VR_EXIT_PERM;
	}
	if (fd < 0) {
		snprintf(why, len,
		         "cannot connect to %s: %s (is volrecd of instance '%s' running?)", path,
		         strerror(-fd), t->instance);
		return VR_EXIT_NO_DAEMON;
	}
	rc = ipc_ctl_send(fd, body, strlen(body));
	if (rc < 0) {
		snprintf(why, len, "cannot send to %s: %s", path, strerror(-rc));
		close(fd);
		return VR_EXIT_FAIL;
	}
	deadline = vr_mono_ns() + (uint64_t)ms * 1000000ull;
	do {
		uint64_t now = vr_mono_ns();
		rc = ipc_ctl_recv(fd, now < deadline ? (int)((deadline - now) / 1000000ull) : 0,
		                  &text, &n);
	} while (rc == -EINTR);
	close(fd);
	if (rc == -EAGAIN) {
		snprintf(why, len,
		         "volrecd of instance '%s' did not read the request within %.1f s: it "
		         "expired unread and is not applied",
		         t->instance, timeout);
		return VR_EXIT_TIMEOUT;
	}
	if (rc < 0) {
		snprintf(why, len, "no answer from %s: %s", path,
		         rc == -EPIPE ? "the daemon closed the connection" : strerror(-rc));
		return VR_EXIT_FAIL;
	}
	*reply = vr_json_parse_object(text, n, JSON_TOKENER_DEFAULT_DEPTH, NULL, 0);
	free(text);
	if (!*reply) {
		snprintf(why, len, "the daemon's answer is not JSON");
		return VR_EXIT_FAIL;
	}
	return VR_EXIT_OK;
}

int tool_ctl_request(const struct tool_target *t, const char *cmd, struct json_object *req,
                     double timeout, struct json_object **reply)
{
	char why[TOOL_PATH_MAX + 512];
	int rc = tool_ctl_try(t, req, timeout, reply, why, sizeof(why));

	if (rc != VR_EXIT_OK)
		fprintf(stderr, "volrec %s: %s\n", cmd, why);
	return rc;
}

int tool_ctl_checked(struct json_object *reply, const char *cmd)
{
	struct json_object *ok, *e;

	if (json_object_object_get_ex(reply, "ok", &ok) && json_object_get_boolean(ok))
		return VR_EXIT_OK;
	fprintf(stderr, "volrec %s: %s\n", cmd,
	        json_object_object_get_ex(reply, "error", &e) ? json_object_get_string(e)
	                                                      : "refused");
	return VR_EXIT_REJECTED;
}
