/* SPDX-License-Identifier: MIT */
/*
 * A reader for the soak run (bench/soak.py): reads volumes of an instance through libvolrec
 * for SECONDS and checks each intact one against the first volume seen for the same epoch
 * modulo PERIOD (the daemon replays a looping file of PERIOD epochs, so those must be equal).
 *
 *   soak_reader INSTANCE RUN_DIR SECONDS PERIOD next|latest
 *
 * It stops after SECONDS or at SIGTERM/SIGINT, whichever comes first.
 * `next` takes every volume announced (volrec_client_next); `latest` polls the newest one
 * (volrec_client_latest). Volumes within PERIOD epochs of a history reset or of dropped
 * epochs (the flag, or epochs that advanced more than the sequence) are counted but not
 * compared: their history is still filling. Prints one JSON object on stdout at the end;
 * exit 0 when no volume differed and no call failed unexpectedly, 1 otherwise, 2 on usage.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <volrec/client.h>
#include <volrec/protocol.h>

#define MAX_PERIOD 4096

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	stop = 1;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* FNV-1a over 64-bit words (and the tail bytes): a fingerprint, not a cryptographic hash. */
static uint64_t fingerprint(const void *data, size_t n)
{
	const unsigned char *p = data;
	uint64_t h = 14695981039346656037ull, w;
	size_t i;

	for (i = 0; i + 8 <= n; i += 8) {
		memcpy(&w, p + i, 8);
		h = (h ^ w) * 1099511628211ull;
	}
	for (; i < n; i++)
		h = (h ^ p[i]) * 1099511628211ull;
	return h ^ n;
}

int main(int argc, char **argv)
{
	static uint64_t seen[MAX_PERIOD];
	static unsigned char known[MAX_PERIOD];
	struct volrec_client *c = NULL;
	struct volrec_client_stats st = {0};
	uint64_t checked = 0, mismatches = 0, errors = 0, polls = 0, last_seq = 0, last_epoch = 0;
	uint64_t last_session = 0;
	uint64_t reset_epoch = 0, first_mismatch_epoch = 0;
	unsigned long period;
	char last_error[256] = "";
	double deadline;
	struct sigaction sa = {.sa_handler = on_signal};
	int latest, rc;

	if (argc != 6 || (strcmp(argv[5], "next") && strcmp(argv[5], "latest"))) {
		fprintf(stderr, "usage: soak_reader INSTANCE RUN_DIR SECONDS PERIOD next|latest\n");
		return 2;
	}
	period = strtoul(argv[4], NULL, 10);
	if (period == 0 || period > MAX_PERIOD) {
		fprintf(stderr, "soak_reader: PERIOD %s is not in 1..%d\n", argv[4], MAX_PERIOD);
		return 2;
	}
	latest = !strcmp(argv[5], "latest");
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	deadline = now_s() + atof(argv[3]);
	while ((rc = volrec_client_open(argv[1], argv[2], &c)) < 0) {
		if (stop || now_s() > deadline) {
			fprintf(stderr, "soak_reader: cannot connect to %s: %s\n", argv[1],
			        volrec_strerror(rc));
			return 1;
		}
		usleep(20000);
	}
	while (!stop && now_s() < deadline) {
		struct volrec_view v;
		uint64_t h, key;

		if (latest) {
			rc = volrec_client_latest(c, &v);
			polls++;
			if (rc == -EAGAIN) {
				usleep(1000);
				continue;
			}
			if (rc == 0 && v.sequence == last_seq && v.session_id == last_session) {
				(void)volrec_view_release(c, &v);
				usleep(1000);
				continue;
			}
		} else {
			rc = volrec_client_next(c, 200, &v);
			if (rc == -ETIMEDOUT || rc == -EINTR)
				continue;
		}
		if (rc < 0) {
			errors++;
			snprintf(last_error, sizeof(last_error), "%s: %s (%s)",
			         latest ? "latest" : "next", volrec_strerror(rc),
			         volrec_client_error(c));
			usleep(20000);
			continue;
		}
		h = fingerprint(v.data, v.bytes);
		if (volrec_view_release(c, &v) < 0)
			continue; /* torn: counted by the client */
		if ((v.flags & (VOLREC_FLAG_RESET | VOLREC_FLAG_DROPPED_BEFORE)) ||
		    v.session_id != last_session || v.epoch - last_epoch != v.sequence - last_seq)
			reset_epoch = v.epoch;
		last_session = v.session_id;
		last_epoch = v.epoch;
		last_seq = v.sequence;
		if (v.epoch < reset_epoch + period)
			continue;
		key = v.epoch % period;
		if (!known[key]) {
			known[key] = 1;
			seen[key] = h;
		} else if (seen[key] != h) {
			if (!mismatches)
				first_mismatch_epoch = v.epoch;
			mismatches++;
		}
		checked++;
	}
	volrec_client_stats(c, &st);
	volrec_client_close(c);
	printf("{\"reader\": \"c-%s\", \"received\": %" PRIu64 ", \"missed\": %" PRIu64
	       ", \"torn\": %" PRIu64 ", \"remaps\": %" PRIu64 ", \"rejected\": %" PRIu64
	       ", \"checked\": %" PRIu64 ", \"mismatches\": %" PRIu64
	       ", \"first_mismatch_epoch\": %" PRIu64 ", \"errors\": %" PRIu64
	       ", \"polls\": %" PRIu64 ", \"last_error\": \"",
	       latest ? "latest" : "next", st.received, st.missed, st.torn, st.remaps, st.rejected,
	       checked, mismatches, first_mismatch_epoch, errors, polls);
	for (const char *p = last_error; *p; p++)
		if (*p != '"' && *p != '\\' && (unsigned char)*p >= 0x20)
			putchar(*p);
	printf("\"}\n");
	return mismatches || errors ? 1 : 0;
}
