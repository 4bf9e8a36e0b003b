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
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "base/base.h"
#include "clients/volrec/tools.h"

#define CTL_MAX_KEYS 32

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

		while ((rc = tool_ctl_request(&tg, cmd, req, timeout, &reply)) == VR_EXIT_OK &&
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
	rc = tool_ctl_checked(reply, cmd);
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
