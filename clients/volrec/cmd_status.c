/* SPDX-License-Identifier: MIT */
/*
 * `volrec status`: one screen on a running daemon, from its next `status` message and its
 * shared-memory header; `--json` prints the message itself for scripts.
 */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "base/base.h"
#include "clients/volrec/tools.h"

static void status_usage(FILE *f)
{
	fprintf(f,
	        "usage: volrec status [--json] [--timeout S] [-i NAME] [-r DIR] [-c FILE]\n\n"
	        "Show the state of a running volrecd: state, source, backend and device, "
	        "geometry,\n"
	        "rates, latency p50/p99 per stage, drops by cause, readers, uptime, last event.\n"
	        "It waits for the daemon's next `status` message (every "
	        "ipc.status_interval_ms).\n\n"
	        "      --json           print the status message (one JSON object) and nothing "
	        "else\n"
	        "  -t, --timeout S      wait at most S seconds for it (default 3, or 2.5 "
	        "intervals with -c)\n" TOOL_COMMON_HELP "\n" TOOL_EXIT_HELP
	        ",\n6 also: no status message within the timeout.\n");
}

VR_COMMAND(status, "state, rates, latency and drops of a running daemon")
{
	static const struct option longopts[] = {
	        TOOL_COMMON_LONGOPTS,
	        {"json", no_argument, NULL, 'j'},
	        {"timeout", required_argument, NULL, 't'},
	        VR_CLI_LONGOPTS_END,
	};
	struct tool_target tg;
	struct tool_daemon d;
	struct volrec_client *c = NULL;
	struct json_object *st;
	double timeout;
	bool json = false;
	char *text = NULL;
	int opt, rc;

	tool_target_init(&tg);
	while ((opt = tool_getopt(&tg, "status", argc, argv, "i:r:c:t:h", longopts)) != -1) {
		switch (opt) {
		case 'j':
			json = true;
			break;
		default:
			return tool_usage(status_usage, opt);
		}
	}
	rc = tool_target_daemon(&tg, "status", argc, argv, &d);
	if (rc)
		return rc;
	timeout = tg.timeout ? tg.timeout : tool_status_timeout(&tg);
	/* no lease: status must work when ipc.max_readers readers are connected */
	rc = tool_client_open(&tg, "status", VOLREC_SUB_STATUS | VOLREC_OPEN_NO_LEASE, 0, &c);
	if (rc)
		return rc;
	rc = tool_wait_status(c, timeout, &text);
	volrec_client_close(c);
	if (rc == -ETIMEDOUT) {
		fprintf(stderr,
		        "volrec status: volrecd (pid %d) sent no status message within %.1f s "
		        "(state in shared memory: %s, latest volume #%llu); a long "
		        "ipc.status_interval_ms? try --timeout\n",
		        d.pid, timeout,
		        !d.have_header                        ? "no segment"
		        : d.header.state == VOLREC_STATE_LIVE ? "live"
		        : d.header.state == VOLREC_STATE_INIT ? "initializing"
		                                              : "closed",
		        (unsigned long long)d.header.latest_sequence);
		return VR_EXIT_TIMEOUT;
	}
	if (rc) {
		fprintf(stderr, "volrec status: %s\n", volrec_strerror(rc));
		return rc == -EINTR ? VR_EXIT_FAIL : tool_exit_for(rc);
	}
	if (json) {
		fputs(text, stdout);
		fputc('\n', stdout);
	} else {
		char why[256];

		st = tool_json_parse(text, strlen(text), why, sizeof(why));
		if (!st) {
			fprintf(stderr, "volrec status: the daemon's status message: %s: %.200s\n",
			        why, text);
			free(text);
			return VR_EXIT_FAIL;
		}
		/* the header again: the latest sequence right now */
		if (tool_daemon_find(&tg, &d) < 0)
			d.have_header = false;
		tool_status_print(stdout, st, d.have_header ? &d.header : NULL, "\n");
		json_object_put(st);
	}
	free(text);
	if (fflush(stdout) == EOF) {
		fprintf(stderr, "volrec status: cannot write to stdout: %s\n", strerror(errno));
		return VR_EXIT_FAIL;
	}
	return VR_EXIT_OK;
}
