/* SPDX-License-Identifier: MIT */
/*
 * Test reader for the multi-process ipc tests, on libvolrec. Modes: verify (check every volume
 * against its sequence pattern until the writer's "done" event, print a JSON tally), hold
 * (lease one volume and wait to be killed), stall (lease one, wait for a line on stdin, then
 * report whether it was torn), follow (keep reading across writer restarts).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <volrec/client.h>

#include "tests/ipc/ipc_testutil.h"

static int fail(const char *what, int rc, struct volrec_client *c)
{
	fprintf(stderr, "ipc_testreader: %s: %s (%s)\n", what, volrec_strerror(rc),
	        c ? volrec_client_error(c) : "");
	return 1;
}

static int mode_verify(struct volrec_client *c)
{
	uint64_t intact = 0, torn = 0, bad = 0, first = 0, last = 0, done = 0, proto = 0;
	struct volrec_client_stats st;
	struct volrec_message m;
	int rc;

	for (;;) {
		rc = volrec_client_next_message(c, 20000, &m);
		if (rc == -EPROTO) {
			if (!proto++)
				fprintf(stderr, "ipc_testreader: rejected: %s\n",
				        volrec_client_error(c));
			continue;
		}
		if (rc)
			return fail("next", rc, c);
		if (m.type == VOLREC_MSG_EVENT) {
			const char *d = strstr(m.text, "\"done\":");
			if (d) {
				done = strtoull(d + 7, NULL, 10);
				break;
			}
			continue;
		}
		if (m.type != VOLREC_MSG_VOL)
			continue;
		if (!first) {
			volrec_client_stats(c, &st);
			first = m.view.sequence - st.missed;
		}
		last = m.view.sequence;
		bool ok = ipc_test_verify(m.view.data, m.view.bytes, m.view.sequence);
		rc = volrec_view_release(c, &m.view);
		if (rc == -ESTALE)
			torn++;
		else if (rc)
			return fail("release", rc, c);
		else if (ok)
			intact++;
		else
			bad++;
	}
	volrec_client_stats(c, &st);
	printf("{\"intact\": %" PRIu64 ", \"torn\": %" PRIu64 ", \"bad\": %" PRIu64
	       ", \"missed\": %" PRIu64 ", \"first\": %" PRIu64 ", \"last\": %" PRIu64
	       ", \"done\": %" PRIu64 ", \"rejected\": %" PRIu64 "}\n",
	       intact, torn, bad, st.missed, first, last, done, proto);
	return 0;
}

static int mode_hold(struct volrec_client *c, bool stall)
{
	struct volrec_view v;
	char line[16];
	int rc;

	for (int i = 0; i < 2000; i++) {
		rc = volrec_client_latest(c, &v);
		if (rc != -EAGAIN)
			break;
		usleep(5000);
	}
	if (rc)
		return fail("latest", rc, c);
	printf("held %u %" PRIu64 "\n", v.slot, v.sequence);
	fflush(stdout);
	if (!stall) {
		for (;;)
			pause();
	}
	if (!fgets(line, sizeof(line), stdin))
		return fail("stdin", -EIO, c);
	rc = volrec_view_release(c, &v);
	printf("%s\n", rc == -ESTALE ? "torn" : rc == 0 ? "intact" : "error");
	return rc == -ESTALE || rc == 0 ? 0 : 1;
}

static int mode_follow(struct volrec_client *c, unsigned want)
{
	uint64_t first_session = volrec_client_session(c), bad = 0, intact_after = 0;
	struct volrec_client_stats st;
	struct volrec_view v;
	int rc;

	while (intact_after < want) {
		rc = volrec_client_next(c, 20000, &v);
		if (rc == -EPROTO)
			continue;
		if (rc)
			return fail("next", rc, c);
		bool ok = ipc_test_verify(v.data, v.bytes, v.sequence);
		bool later = v.session_id != first_session;
		rc = volrec_view_release(c, &v);
		if (rc == 0 && !ok)
			bad++;
		if (rc == 0 && ok && later)
			intact_after++;
	}
	volrec_client_stats(c, &st);
	printf("{\"remaps\": %" PRIu64 ", \"intact_after\": %" PRIu64 ", \"bad\": %" PRIu64 "}\n",
	       st.remaps, intact_after, bad);
	return 0;
}

int main(int argc, char **argv)
{
	const char *instance = NULL, *run_dir = NULL, *mode = "verify";
	struct volrec_client_options o = {0};
	struct volrec_client *c;
	unsigned want = 10;
	int opt, rc;

	while ((opt = getopt(argc, argv, "i:r:m:k:")) != -1) {
		if (ipc_test_target_option(opt, &instance, &run_dir))
			continue;
		switch (opt) {
		case 'm':
			mode = optarg;
			break;
		case 'k':
			want = (unsigned)strtoul(optarg, NULL, 10);
			break;
		default:
			fprintf(stderr, "usage: ipc_testreader -i INSTANCE -r RUN_DIR "
			                "[-m verify|hold|stall|follow] [-k N]\n");
			return 2;
		}
	}
	if (!instance || !run_dir)
		return 2;
	o.run_dir = run_dir;
	o.topics = VOLREC_SUB_VOL | VOLREC_SUB_EVENT;
	o.rcvhwm = 100000;
	rc = volrec_client_open_opts(instance, &o, &c);
	if (rc) {
		fprintf(stderr, "ipc_testreader: open %s: %s\n", instance, volrec_strerror(rc));
		return rc == -ENOENT ? 3 : 1;
	}
	if (!strcmp(mode, "verify"))
		rc = mode_verify(c);
	else if (!strcmp(mode, "hold"))
		rc = mode_hold(c, false);
	else if (!strcmp(mode, "stall"))
		rc = mode_hold(c, true);
	else if (!strcmp(mode, "follow"))
		rc = mode_follow(c, want);
	else
		rc = 2;
	volrec_client_close(c);
	return rc;
}
