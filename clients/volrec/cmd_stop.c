/* SPDX-License-Identifier: MIT */
/*
 * `volrec stop`: SIGTERM to the instance's volrecd (verified through /proc), then wait until the
 * process is gone, printing its `stopping` event.
 * getopt: clients/volrec/tool_common.c
 */
#include <errno.h>
#include <signal.h>
#include <string.h>

#include <json-c/json.h>

#include "base/base.h"
#include "clients/volrec/tools.h"

static int stop_confirm(const struct tool_control *ctl, const struct tool_target *t, int pid,
                        struct volrec_client *c, double t_signal, double deadline, double timeout)
{
	bool said = false;

	for (;;) {
		if (!tool_pid_is_volrecd(pid)) {
			printf("volrecd (pid %d) of instance '%s' stopped\n", pid, t->instance);
			return VR_EXIT_OK;
		}
		if (vr_mono_s() >= deadline) {
			fprintf(stderr,
			        "volrec stop: volrecd (pid %d) of instance '%s' is still running "
			        "%.0f s after SIGTERM%s\n",
			        pid, t->instance, timeout,
			        said ? " (it said it is stopping: draining takes longer?)" : "");
			return VR_EXIT_TIMEOUT;
		}
		if (c) {
			struct volrec_message m;
			int rc = volrec_client_next_message(c, 50, &m);

			if (rc == 0 && m.type == VOLREC_MSG_VOL) {
				volrec_view_release(c, &m.view);
			} else if (rc == 0 && m.type == VOLREC_MSG_EVENT) {
				struct json_object *ev = tool_json_parse(m.text, m.len, NULL, 0);
				char name[64], line[700];

				if (ev) {
					tool_json_str(ev, "event", name, sizeof(name));
					if (!strcmp(name, "stopping") &&
					    tool_json_num(ev, "time", 0) >= t_signal - 0.5 &&
					    !said) {
						tool_event_line(ev, line, sizeof(line));
						printf("%s\n", line);
						fflush(stdout);
						said = true;
					}
					json_object_put(ev);
				}
			} else if (rc && rc != -ETIMEDOUT && rc != -EAGAIN && rc != -EPROTO &&
			           rc != -EINTR) {
				c = NULL; /* the segment went away with the daemon: poll /proc only */
			}
		} else {
			vr_sleep_ns(50 * 1000000ull);
		}
	}
}

static const char stop_help[] =
        "Stop the instance's volrecd: send SIGTERM to the pid in <run_dir>/<instance>.pid\n"
        "(or the shared memory's writer), checked to be volrecd through /proc; it stops\n"
        "the source, publishes what is finished and removes its shared memory. Waits\n"
        "until the process is gone and prints its `stopping` event.\n";

static const char stop_exit_help[] =
        ",\n"
        "6 also: the process is still running when the timeout runs out; 0 means it is gone";

VR_COMMAND(stop, "stop a running daemon (SIGTERM) and wait until it is gone")
{
	static const struct tool_control ctl = {
	        .name = "stop",
	        .help = stop_help,
	        .exit_help = stop_exit_help,
	        .signal = SIGTERM,
	        .confirm = stop_confirm,
	};

	return tool_control_run(&ctl, argc, argv);
}
