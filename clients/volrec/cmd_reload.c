/* SPDX-License-Identifier: MIT */
/*
 * `volrec reload`: SIGHUP to the instance's volrecd (verified through /proc), then wait for the
 * `reloaded` or `reload_rejected` event (or, if a rebuild made it unreachable, the status
 * messages' reload result) and say which.
 * getopt: clients/volrec/tool_common.c
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "base/base.h"
#include "clients/volrec/tools.h"

/* An event or status message that settles the reload: -1 = not yet, else the exit status. */
static int settle(const char *name, const char *message, const struct tool_target *t)
{
	if (!strcmp(name, "reloaded") || !strcmp(name, "ok")) {
		printf("volrecd of instance '%s': %s\n", t->instance,
		       message[0] ? message : "configuration reloaded");
		return VR_EXIT_OK;
	}
	if (!strcmp(name, "reload_rejected") || !strcmp(name, "rejected")) {
		fprintf(stderr,
		        "volrec reload: volrecd of instance '%s' rejected the configuration and "
		        "keeps running on the previous one: %s\n",
		        t->instance, message);
		return VR_EXIT_REJECTED;
	}
	return -1;
}

static int reload_confirm(const struct tool_control *ctl, const struct tool_target *t, int pid,
                          struct volrec_client *c, double t_signal, double deadline, double timeout)
{
	int statuses = 0; /* status messages stamped after the signal */
	double t0 = vr_mono_s();
	int last_rc = 0;

	if (!c) {
		/* nothing to wait for: say so now instead of claiming a timeout */
		fprintf(stderr,
		        "volrec reload: SIGHUP sent to volrecd (pid %d) of instance '%s', but its "
		        "answer cannot be heard (see above): the outcome is unknown, see its log\n",
		        pid, t->instance);
		return VR_EXIT_FAIL;
	}
	while (vr_mono_s() < deadline) {
		struct volrec_message m;
		struct json_object *j;
		char name[64], message[4096], state[32];
		int rc = volrec_client_next_message(c, 100, &m);

		if (rc) {
			/* a timeout, or a transient error (a rebuild re-creates the segment): keep
			 * listening until the deadline, but remember what went wrong */
			if (rc != -ETIMEDOUT)
				last_rc = rc;
			if (!tool_pid_is_volrecd(pid)) {
				fprintf(stderr,
				        "volrec reload: volrecd (pid %d) of instance '%s' exited "
				        "while reloading (see its log)\n",
				        pid, t->instance);
				return VR_EXIT_FAIL;
			}
			if (rc != -ETIMEDOUT && rc != -EINTR) {
				/* an error returns at once: do not spin */
				vr_sleep_ns(50 * 1000000ull);
			}
			continue;
		}
		if (m.type == VOLREC_MSG_VOL) {
			volrec_view_release(c, &m.view);
			continue;
		}
		j = tool_json_parse(m.text, m.len, NULL, 0);
		if (!j)
			continue;
		rc = -1;
		if (m.type == VOLREC_MSG_EVENT && tool_json_num(j, "time", 0) >= t_signal - 0.5) {
			tool_json_str(j, "event", name, sizeof(name));
			tool_json_str(j, "message", message, sizeof(message));
			rc = settle(name, message, t);
		} else if (m.type == VOLREC_MSG_STATUS && tool_json_num(j, "time", 0) > t_signal) {
			/* the second status after the signal comes from a loop turn that has read
			 * it; the event itself can be lost when a rebuild re-created the socket */
			tool_json_str(j, "state", state, sizeof(state));
			if (++statuses >= 2 && strcmp(state, "reloading")) {
				tool_json_str(j, "reload.result", name, sizeof(name));
				tool_json_str(j, "reload.message", message, sizeof(message));
				rc = settle(name, message, t);
			}
		}
		json_object_put(j);
		if (rc >= 0)
			return rc;
	}
	if (!tool_pid_is_volrecd(pid)) {
		fprintf(stderr,
		        "volrec reload: volrecd (pid %d) of instance '%s' exited (see its log)\n",
		        pid, t->instance);
		return VR_EXIT_FAIL;
	}
	fprintf(stderr,
	        "volrec reload: SIGHUP sent to volrecd (pid %d) of instance '%s', but no "
	        "confirmation within %.1f s%s%s\n",
	        pid, t->instance, vr_mono_s() - t0, last_rc ? "; last error: " : "",
	        last_rc ? volrec_strerror(last_rc) : "");
	return VR_EXIT_TIMEOUT;
}

VR_COMMAND(reload, "reload the daemon's configuration (SIGHUP) and report the outcome")
{
	static const struct tool_control ctl = {
	        .name = "reload",
	        .help = "Make the instance's volrecd read its configuration file again: send "
	                "SIGHUP to\n"
	                "the pid in <run_dir>/<instance>.pid (or the shared memory's writer), "
	                "checked\n"
	                "to be volrecd through /proc, and wait for its answer. Live parameters "
	                "apply\n"
	                "between epochs; structural changes rebuild the pipeline (a new "
	                "session).\n",
	        .exit_help =
	                ",\n5 the daemon rejected the new configuration (its message is printed) "
	                "and runs\non the previous one, 6 also: no confirmation within the timeout",
	        .signal = SIGHUP,
	        .confirm = reload_confirm,
	};

	return tool_control_run(&ctl, argc, argv);
}
