/* SPDX-License-Identifier: MIT */
/*
 * What `volrec reload` and `volrec stop` share: the command line, finding the daemon (pid file,
 * verified through /proc to be volrecd), subscribing to its messages before signalling it, so
 * that the confirming event cannot be missed, and sending the signal.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <string.h>

#include "base/base.h"
#include "clients/volrec/tools.h"

static void control_usage(FILE *f, const void *ctx)
{
	const struct tool_control *ctl = ctx;

	fprintf(f,
	        "usage: volrec %s [--timeout S] [-i NAME] [-r DIR] [-c FILE]\n\n%s\n"
	        "  -t, --timeout S      wait at most S seconds for the confirmation (default "
	        "%.0f)\n" TOOL_COMMON_HELP "\n" TOOL_EXIT_HELP "%s.\n",
	        ctl->name, ctl->help, TOOL_CONTROL_TIMEOUT, ctl->exit_help);
}

int tool_control_run(const struct tool_control *ctl, int argc, char **argv)
{
	struct tool_target tg;
	struct tool_daemon d;
	struct volrec_client *c = NULL;
	double timeout = TOOL_CONTROL_TIMEOUT, ready, t_sig;
	int rc;

	tool_target_init(&tg);
	rc = tool_timeout_args(&tg, ctl->name, argc, argv, &timeout, control_usage, ctl);
	if (rc != TOOL_ARGS_GO_ON)
		return rc;
	rc = tool_target_daemon(&tg, ctl->name, argc, argv, &d);
	if (rc)
		return rc;

	/* Subscribe first, and wait for any message (a volume comes within one epoch, a status
	 * within one interval): then the subscription is in place at the publisher and the
	 * event that answers the signal cannot be lost. Without a segment (or with no access to
	 * it) the process itself is the only confirmation. No lease: listening needs no reader
	 * entry, so a full table (ipc.max_readers) does not leave the tool deaf. */
	rc = volrec_client_open_opts(
	        tg.instance,
	        &(struct volrec_client_options){.run_dir = tg.run_dir,
	                                        .topics = VOLREC_SUB_VOL | VOLREC_SUB_STATUS |
	                                                  VOLREC_SUB_EVENT | VOLREC_OPEN_NO_LEASE},
	        &c);
	if (rc) {
		c = NULL;
		fprintf(stderr, "volrec %s: cannot listen to volrecd's messages: %s\n", ctl->name,
		        volrec_strerror(rc));
	}
	ready = vr_mono_s() + (timeout < 2.5 ? timeout : 2.5);
	while (c && vr_mono_s() < ready) {
		struct volrec_message m;

		rc = volrec_client_next_message(c, (int)((ready - vr_mono_s()) * 1000) + 1, &m);
		if (rc == -EAGAIN || rc == -EPROTO)
			continue;
		if (rc)
			break;
		if (m.type == VOLREC_MSG_VOL)
			volrec_view_release(c, &m.view);
		break;
	}

	t_sig = (double)vr_real_ns() / 1e9;
	if (kill(d.pid, ctl->signal) < 0) {
		rc = errno;
		volrec_client_close(c);
		if (rc == ESRCH) {
			fprintf(stderr, "volrec %s: volrecd (pid %d) of instance '%s' is gone\n",
			        ctl->name, d.pid, tg.instance);
			return VR_EXIT_NO_DAEMON;
		}
		fprintf(stderr,
		        "volrec %s: cannot signal volrecd (pid %d) of instance '%s': %s%s\n",
		        ctl->name, d.pid, tg.instance, strerror(rc),
		        rc == EPERM ? " (it runs as another user: use sudo, or systemctl "
		                      "reload/stop volrecd)"
		                    : "");
		return rc == EPERM ? VR_EXIT_PERM : VR_EXIT_FAIL;
	}
	rc = ctl->confirm(ctl, &tg, d.pid, c, t_sig, vr_mono_s() + timeout, timeout);
	volrec_client_close(c);
	return rc;
}
