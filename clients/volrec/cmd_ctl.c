/* SPDX-License-Identifier: MIT */
/*
 * `volrec get [KEY]` and `volrec set KEY=VALUE ...`: the daemon's control socket
 * (<run_dir>/<instance>.ctl, docs/control.md). A set is validated by the daemon exactly
 * like the configuration file, all keys or none, and applied between volumes.
 * getopt: clients/volrec/tool_common.c
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "base/base.h"
#include "clients/volrec/tools.h"
#include "ipc/ipc.h"

#define CTL_MAX_KEYS 32

/* Send one JSON request and wait up to timeout s for the reply; prints errors and returns a
 * VR_EXIT_ code, *reply set (caller puts it) on VR_EXIT_OK. */
static int ctl_request(const struct tool_target *t, const char *cmd, struct json_object *req,
                       double timeout, struct json_object **reply)
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
		fprintf(stderr,
		        "volrec %s: no control socket %s: volrecd of instance '%s' is not "
		        "running (or is older than the control socket)\n",
		        cmd, path, t->instance);
		return VR_EXIT_NO_DAEMON;
	}
	if (access(path, R_OK | W_OK) != 0) {
		fprintf(stderr,
		        "volrec %s: %s: permission denied (the control socket is for the "
		        "daemon's group, volrec: add yourself to it)\n",
		        cmd, path);
		return VR_EXIT_PERM;
	}
	fd = ipc_ctl_connect(path);
	if (fd == -EACCES || fd == -EPERM) {
		fprintf(stderr, "volrec %s: %s: permission denied (add yourself to its group)\n",
		        cmd, path);
		return VR_EXIT_PERM;
	}
	if (fd < 0) {
		fprintf(stderr,
		        "volrec %s: cannot connect to %s: %s (is volrecd of instance '%s' "
		        "running?)\n",
		        cmd, path, strerror(-fd), t->instance);
		return VR_EXIT_NO_DAEMON;
	}
	rc = ipc_ctl_send(fd, body, strlen(body));
	if (rc < 0) {
		fprintf(stderr, "volrec %s: cannot send to %s: %s\n", cmd, path, strerror(-rc));
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
		fprintf(stderr,
		        "volrec %s: volrecd of instance '%s' did not read the request within %.1f "
		        "s: it expired unread and is not applied\n",
		        cmd, t->instance, timeout);
		return VR_EXIT_TIMEOUT;
	}
	if (rc < 0) {
		fprintf(stderr, "volrec %s: no answer from %s: %s\n", cmd, path,
		        rc == -EPIPE ? "the daemon closed the connection" : strerror(-rc));
		return VR_EXIT_FAIL;
	}
	*reply = vr_json_parse_object(text, n, JSON_TOKENER_DEFAULT_DEPTH, NULL, 0);
	free(text);
	if (!*reply) {
		fprintf(stderr, "volrec %s: the daemon's answer is not JSON\n", cmd);
		return VR_EXIT_FAIL;
	}
	return VR_EXIT_OK;
}

/* VR_EXIT_OK when the reply says ok, else prints its error and returns VR_EXIT_REJECTED. */
static int ctl_checked(struct json_object *reply, const char *cmd)
{
	struct json_object *ok, *e;

	if (json_object_object_get_ex(reply, "ok", &ok) && json_object_get_boolean(ok))
		return VR_EXIT_OK;
	fprintf(stderr, "volrec %s: %s\n", cmd,
	        json_object_object_get_ex(reply, "error", &e) ? json_object_get_string(e)
	                                                      : "refused");
	return VR_EXIT_REJECTED;
}

static void ctl_usage(FILE *f, const void *ctx)
{
	const char *cmd = ctx;

	if (!strcmp(cmd, "get"))
		fprintf(f, "usage: volrec get [options] [KEY]\n"
		           "Print the running daemon's effective configuration, or one key or "
		           "section of it\n"
		           "(YAML flow text), through its control socket.\n");
	else
		fprintf(f, "usage: volrec set [options] KEY=VALUE ...\n"
		           "Change live keys of the running daemon through its control socket: "
		           "values are\n"
		           "YAML flow text (volrec set preprocess.db_range=[20,90] "
		           "view.render.angles_deg=[30,15]),\n"
		           "checked exactly like the configuration file, all or none, applied "
		           "between volumes.\n"
		           "Structural keys need the file and a reload; a reload drops runtime "
		           "changes.\n");
	fprintf(f, "Options:\n" TOOL_COMMON_HELP
	           "  -t, --timeout SECONDS  wait this long for the daemon's answer (default 5)\n"
	           "See man volrec.\n" TOOL_EXIT_HELP ", 5 the daemon refused the request.\n");
}

static int ctl_main(int argc, char **argv, const char *cmd)
{
	struct tool_target tg;
	struct json_object *req, *vals = NULL, *reply = NULL, *v;
	double timeout = 5;
	int rc;

	tool_target_init(&tg);
	rc = tool_timeout_args(&tg, cmd, argc, argv, &timeout, ctl_usage, cmd);
	if (rc != TOOL_ARGS_GO_ON)
		return rc;
	req = json_object_new_object();
	if (!strcmp(cmd, "get")) {
		if (argc - optind > 1) {
			fprintf(stderr, "volrec get: one KEY at most (got %d)\n", argc - optind);
			goto usage;
		}
		json_object_object_add(req, "op", json_object_new_string("get"));
		if (optind < argc)
			json_object_object_add(req, "key", json_object_new_string(argv[optind]));
	} else {
		vals = json_object_new_object();
		if (optind == argc || argc - optind > CTL_MAX_KEYS) {
			fprintf(stderr, "volrec set: give 1 to %d KEY=VALUE arguments\n",
			        CTL_MAX_KEYS);
			goto usage;
		}
		for (int i = optind; i < argc; i++) {
			const char *eq = strchr(argv[i], '=');
			char key[256];

			if (!eq || eq == argv[i] || (size_t)(eq - argv[i]) >= sizeof(key)) {
				fprintf(stderr,
				        "volrec set: '%s' is not KEY=VALUE (for example "
				        "preprocess.db_range=[20,90])\n",
				        argv[i]);
				goto usage;
			}
			snprintf(key, sizeof(key), "%.*s", (int)(eq - argv[i]), argv[i]);
			if (json_object_object_get_ex(vals, key, NULL)) {
				/* the configuration refuses a key given twice: so does set */
				fprintf(stderr, "volrec set: %s given twice (each key once)\n",
				        key);
				goto usage;
			}
			json_object_object_add(vals, key, json_object_new_string(eq + 1));
		}
		json_object_object_add(req, "op", json_object_new_string("set"));
		json_object_object_add(req, "values", vals);
	}
	rc = tool_target_finish(&tg, cmd);
	if (rc == VR_EXIT_OK) {
		/* a set refused only because another change is being applied is sent again */
		double end = vr_mono_s() + timeout;
		struct json_object *retry;

		/* volrecd refuses it unread past the timeout: no answer means not applied */
		json_object_object_add(req, "expires_ms",
		                       json_object_new_int64((int64_t)(end * 1000)));

		while ((rc = ctl_request(&tg, cmd, req, timeout, &reply)) == VR_EXIT_OK &&
		       json_object_object_get_ex(reply, "retry", &retry) &&
		       json_object_get_boolean(retry) && vr_mono_s() + 0.05 < end) {
			json_object_put(reply);
			reply = NULL;
			nanosleep(&(struct timespec){.tv_nsec = 50000000}, NULL);
		}
	}
	json_object_put(req);
	if (rc != VR_EXIT_OK)
		return rc;
	rc = ctl_checked(reply, cmd);
	if (rc == VR_EXIT_OK && !strcmp(cmd, "get")) {
		if (json_object_object_get_ex(reply, "value", &v))
			printf("%s\n", json_object_get_string(v));
		else if (json_object_object_get_ex(reply, "config", &v))
			fputs(json_object_get_string(v), stdout);
	} else if (rc == VR_EXIT_OK) {
		printf("volrecd of instance '%s': set %d key(s); they take effect with the next "
		       "volume\n",
		       tg.instance, argc - optind);
	}
	json_object_put(reply);
	return rc;
usage:
	json_object_put(req);
	json_object_put(vals);
	return VR_EXIT_USAGE;
}

VR_COMMAND(get, "print the running daemon's effective configuration or one key (control socket)")
{
	return ctl_main(argc, argv, "get");
}

VR_COMMAND(set, "change live keys of the running daemon: KEY=VALUE ... (control socket)")
{
	return ctl_main(argc, argv, "set");
}
