/* SPDX-License-Identifier: MIT */
/*
 * Test publisher for the multi-process ipc tests: publishes volumes filled with the sequence
 * pattern (tests/ipc/ipc_testutil.h) as fast as it can or at a rate, then an event
 * {"done": N}. Prints "ready <session>" once the segments and endpoints exist.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ipc/ipc.h"
#include "tests/ipc/ipc_testutil.h"

static volatile sig_atomic_t stop;

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

static void usage(void)
{
	fprintf(stderr,
	        "usage: ipc_testwriter -i INSTANCE -r RUN_DIR [-n COUNT (0 = until SIGTERM)] "
	        "[-s SLOTS] [-g YxXxZ] [-m MAX_READERS] [-w READERS] [-R RATE_HZ] [-G (send "
	        "malformed vol messages first)]\n");
}

int main(int argc, char **argv)
{
	const char *instance = NULL, *run_dir = NULL;
	struct ipc_writer_options o;
	struct ipc_shape g = {.ny = 16, .nx = 64, .nz = 64, .dtype = VOLREC_DTYPE_U8};
	uint32_t slots = 4, max_readers = 64;
	unsigned long count = 300, wait_readers = 0;
	double rate = 0;
	bool garbage = false;
	struct ipc_writer *w;
	struct ipc_writer_stats st;
	char err[1024], json[128];
	int opt, rc;

	while ((opt = getopt(argc, argv, "i:r:n:s:g:m:w:R:G")) != -1) {
		if (ipc_test_target_option(opt, &instance, &run_dir))
			continue;
		switch (opt) {
		case 'n':
			count = strtoul(optarg, NULL, 10);
			break;
		case 's':
			slots = (uint32_t)strtoul(optarg, NULL, 10);
			break;
		case 'm':
			max_readers = (uint32_t)strtoul(optarg, NULL, 10);
			break;
		case 'g':
			if (sscanf(optarg, "%ux%ux%u", &g.ny, &g.nx, &g.nz) != 3) {
				usage();
				return 2;
			}
			break;
		case 'w':
			wait_readers = strtoul(optarg, NULL, 10);
			break;
		case 'R':
			rate = strtod(optarg, NULL);
			break;
		case 'G':
			garbage = true;
			break;
		default:
			usage();
			return 2;
		}
	}
	if (!instance || !run_dir) {
		usage();
		return 2;
	}
	signal(SIGTERM, on_term);
	signal(SIGINT, on_term);
	ipc_test_options(&o, instance, run_dir);
	o.shape = g;
	o.slots = slots;
	o.max_readers = max_readers;
	rc = ipc_writer_open(&o, &w, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "ipc_testwriter: %s\n", err);
		return 1;
	}
	printf("ready %016llx\n", (unsigned long long)ipc_writer_session(w));
	fflush(stdout);
	while (!stop && wait_readers && (unsigned long)ipc_writer_readers(w) < wait_readers)
		usleep(10000);
	if (wait_readers)
		usleep(300000); /* let the subscriptions reach us; late ones count misses */
	if (garbage) {
		struct volrec_vol_msg m = {
		        .magic = VOLREC_VOL_MAGIC, .major = 7, .size = sizeof(m)};
		/* well formed, but announcing a volume never published (2n wraps to 2) */
		struct volrec_vol_msg f = {.magic = VOLREC_VOL_MAGIC,
		                           .major = VOLREC_PROTO_MAJOR,
		                           .size = sizeof(f),
		                           .session_id = ipc_writer_session(w),
		                           .sequence = (UINT64_C(1) << 63) + 1,
		                           .ny = g.ny,
		                           .nx = g.nx,
		                           .nz = g.nz,
		                           .dtype = g.dtype};
		rc = ipc_writer_send_raw(w, VOLREC_TOPIC_VOL, "short", 5);
		rc |= ipc_writer_send_raw(w, VOLREC_TOPIC_VOL, &m, sizeof(m));
		rc |= ipc_writer_send_raw(w, VOLREC_TOPIC_VOL, &f, sizeof(f));
		if (rc)
			fprintf(stderr, "ipc_testwriter: sending malformed messages failed\n");
	}
	for (unsigned long i = 0; !stop && (!count || i < count); i++) {
		struct ipc_slot_ref s;
		struct ipc_volume_meta meta = {.volume_id = i, .epoch = i};

		rc = ipc_writer_begin(w, &s);
		if (rc) {
			fprintf(stderr, "ipc_testwriter: begin: %s\n", strerror(-rc));
			break;
		}
		ipc_test_fill(s.data, s.bytes, s.sequence);
		rc = ipc_writer_publish(w, &s, &meta);
		if (rc) {
			fprintf(stderr, "ipc_testwriter: publish: %s\n", strerror(-rc));
			break;
		}
		if (rate > 0) {
			struct timespec ts = {0, (long)(1e9 / rate)};
			nanosleep(&ts, NULL);
		}
	}
	ipc_writer_stats(w, &st);
	snprintf(json, sizeof(json), "{\"done\": %llu}", (unsigned long long)st.published);
	/* repeated: a reader may still be joining; readers act on the first */
	for (int i = 0; i < 20 && !stop; i++) {
		ipc_writer_send_event(w, json);
		usleep(50000);
	}
	while (!stop && count)
		pause();
	printf("published %llu forced %llu skips %llu dead %llu\n",
	       (unsigned long long)st.published, (unsigned long long)st.forced_overwrite,
	       (unsigned long long)st.lease_skips, (unsigned long long)st.dead_leases);
	ipc_writer_close(w, true);
	return 0;
}
