/* SPDX-License-Identifier: MIT */
/*
 * ipc benchmark: notification latency publish -> reader wakes over ipc:// (p50/p99), and the
 * writer's publish cost (begin + publish, without filling) with 0, 1, 4 and 16 reader
 * processes leasing every volume. Prints a table; --json FILE writes the figures.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <volrec/client.h>

#include "ipc/internal.h"
#include "ipc/ipc.h"
#include "tests/ipc/ipc_testutil.h"

#define LAT_SAMPLES 2000
#define PUB_SAMPLES 3000

struct pct {
	double p50, p99, mean;
	int n;
};

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static struct pct percentiles(uint64_t *v, int n)
{
	struct pct p = {.n = n};
	double sum = 0;

	qsort(v, (size_t)n, sizeof(*v), cmp_u64);
	for (int i = 0; i < n; i++)
		sum += (double)v[i];
	p.p50 = (double)v[n / 2] / 1e3;
	p.p99 = (double)v[(int)((n - 1) * 0.99)] / 1e3;
	p.mean = sum / n / 1e3;
	return p;
}

/* A reader process: leases every volume it is told about until the "done" event. With a
 * result pipe, it sends the wake-up latency of each volume. */
static void reader_child(const char *instance, const char *run_dir, int ready_fd, int lat_fd)
{
	struct volrec_client_options o = {
	        .run_dir = run_dir, .topics = VOLREC_SUB_VOL | VOLREC_SUB_EVENT, .rcvhwm = 100000};
	struct volrec_client *c = NULL;
	struct volrec_message m;
	int rc;
	char b = 1;

	for (int i = 0; i < 1000; i++) {
		rc = volrec_client_open_opts(instance, &o, &c);
		if (rc != -ENOENT && rc != -EAGAIN) /* not created, or not initialized yet */
			break;
		usleep(5000);
	}
	if (rc)
		_exit(1);
	/* the subscription is live once the first sync event arrives */
	while ((rc = volrec_client_next_message(c, 10000, &m)) == 0 && m.type != VOLREC_MSG_EVENT)
		if (m.type == VOLREC_MSG_VOL)
			volrec_view_release(c, &m.view);
	if (rc || write(ready_fd, &b, 1) != 1)
		_exit(1);
	for (;;) {
		rc = volrec_client_next_message(c, 20000, &m);
		if (rc)
			_exit(1);
		if (m.type == VOLREC_MSG_EVENT && strstr(m.text, "stop"))
			break;
		if (m.type != VOLREC_MSG_VOL)
			continue;
		if (lat_fd >= 0) {
			uint64_t lat = vr_now_ns(CLOCK_REALTIME) - m.view.t_publish_ns;
			if (write(lat_fd, &lat, sizeof(lat)) != sizeof(lat))
				_exit(1);
		}
		volrec_view_release(c, &m.view);
	}
	volrec_client_close(c);
	_exit(0);
}

struct run {
	char instance[64];
	char run_dir[64];
	struct ipc_writer *w;
	pid_t pids[16];
	int nreaders;
	int lat_pipe[2];
};

static int start(struct run *r, int nreaders, bool latency)
{
	struct ipc_writer_options o;
	int ready[2];
	char err[1024], b;

	ipc_test_instance(r->instance, sizeof(r->instance), "bench");
	r->nreaders = nreaders;
	r->lat_pipe[0] = r->lat_pipe[1] = -1;
	if (pipe(ready) || (latency && pipe(r->lat_pipe)))
		return -errno;
	for (int i = 0; i < nreaders; i++) {
		r->pids[i] = fork();
		if (r->pids[i] == 0)
			reader_child(r->instance, r->run_dir, ready[1],
			             latency ? r->lat_pipe[1] : -1);
	}
	ipc_test_options(&o, r->instance, r->run_dir);
	o.shape = (struct ipc_shape){.ny = 16, .nx = 64, .nz = 64, .dtype = VOLREC_DTYPE_U8};
	o.slots = 8;
	if (ipc_writer_open(&o, &r->w, err, sizeof(err))) {
		fprintf(stderr, "ipc_bench: %s\n", err);
		return -EIO;
	}
	for (int got = 0; got < nreaders;) {
		/* a reader that gave up never signals: fail instead of waiting for it forever */
		for (int i = 0; i < nreaders; i++) {
			int st;

			if (r->pids[i] > 0 && waitpid(r->pids[i], &st, WNOHANG) == r->pids[i]) {
				fprintf(stderr,
				        "ipc_bench: reader %d exited during setup (status %d)\n", i,
				        st);
				r->pids[i] = -1;
				return -EIO;
			}
		}
		ipc_writer_send_event(r->w, "{\"event\":\"sync\"}");
		struct timespec ts = {0, 5000000};
		nanosleep(&ts, NULL);
		fd_set fds;
		struct timeval tv = {0, 0};
		FD_ZERO(&fds);
		FD_SET(ready[0], &fds);
		while (select(ready[0] + 1, &fds, NULL, NULL, &tv) > 0 && got < nreaders) {
			if (read(ready[0], &b, 1) == 1)
				got++;
			FD_SET(ready[0], &fds);
		}
	}
	close(ready[0]);
	close(ready[1]);
	return 0;
}

/* After a failed start: stop the readers and remove the segments. */
static void abandon(struct run *r)
{
	for (int i = 0; i < r->nreaders; i++)
		if (r->pids[i] > 0) {
			kill(r->pids[i], SIGKILL);
			waitpid(r->pids[i], NULL, 0);
		}
	if (r->w)
		ipc_writer_close(r->w, true);
	r->w = NULL;
	rmdir(r->run_dir);
}

static void finish(struct run *r)
{
	for (int i = 0; i < 20; i++) {
		ipc_writer_send_event(r->w, "{\"event\":\"stop\"}");
		usleep(20000);
	}
	for (int i = 0; i < r->nreaders; i++) {
		int st;
		waitpid(r->pids[i], &st, 0);
	}
	ipc_writer_close(r->w, true);
	r->w = NULL;
	if (r->lat_pipe[0] >= 0) {
		close(r->lat_pipe[0]);
		close(r->lat_pipe[1]);
	}
}

static void publish_one(struct ipc_writer *w, uint64_t *cost_ns)
{
	struct ipc_slot_ref s;
	struct ipc_volume_meta m = {0};
	uint64_t t0, t1, t2;

	t0 = vr_now_ns(CLOCK_MONOTONIC);
	if (ipc_writer_begin(w, &s))
		abort();
	t1 = vr_now_ns(CLOCK_MONOTONIC);
	memset(s.data, (int)s.sequence, 64); /* touch it, as a producer would */
	t2 = vr_now_ns(CLOCK_MONOTONIC);
	if (ipc_writer_publish(w, &s, &m))
		abort();
	if (cost_ns)
		*cost_ns = (t1 - t0) + (vr_now_ns(CLOCK_MONOTONIC) - t2);
}

int main(int argc, char **argv)
{
	const char *json = NULL;
	static uint64_t v[PUB_SAMPLES > LAT_SAMPLES ? PUB_SAMPLES : LAT_SAMPLES];
	const int nr[] = {0, 1, 4, 16};
	struct pct lat, cost[4];
	struct run r = {0};
	struct utsname un;
	FILE *f;

	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--json") && i + 1 < argc)
			json = argv[++i];
	signal(SIGPIPE, SIG_IGN);
	snprintf(r.run_dir, sizeof(r.run_dir), "/tmp/volrec-bench-XXXXXX");
	if (!mkdtemp(r.run_dir))
		return 1;

	/* 1. latency: one reader, one volume every 500 us so each wake-up is measured alone */
	if (start(&r, 1, true)) {
		abandon(&r);
		return 1;
	}
	for (int i = 0; i < LAT_SAMPLES; i++) {
		struct timespec ts = {0, 500000};
		publish_one(r.w, NULL);
		if (read(r.lat_pipe[0], &v[i], sizeof(v[i])) != sizeof(v[i]))
			return 1;
		nanosleep(&ts, NULL);
	}
	lat = percentiles(v, LAT_SAMPLES);
	finish(&r);

	/* 2. publish cost vs readers, every volume leased and released by every reader */
	for (int k = 0; k < 4; k++) {
		if (start(&r, nr[k], false)) {
			abandon(&r);
			return 1;
		}
		for (int i = 0; i < 200; i++)
			publish_one(r.w, NULL);
		for (int i = 0; i < PUB_SAMPLES; i++) {
			struct timespec ts = {0, 100000};
			publish_one(r.w, &v[i]);
			nanosleep(&ts, NULL);
		}
		cost[k] = percentiles(v, PUB_SAMPLES);
		finish(&r);
	}
	rmdir(r.run_dir);

	uname(&un);
	printf("ipc benchmark on %s (%ld CPUs)\n", un.nodename, sysconf(_SC_NPROCESSORS_ONLN));
	printf("  notification latency publish -> reader wakes (ipc://, %d samples): p50 %.1f us, "
	       "p99 %.1f us\n",
	       lat.n, lat.p50, lat.p99);
	printf("  %-8s %12s %12s %12s\n", "readers", "p50 us", "p99 us", "mean us");
	for (int k = 0; k < 4; k++)
		printf("  %-8d %12.2f %12.2f %12.2f\n", nr[k], cost[k].p50, cost[k].p99,
		       cost[k].mean);
	if (json) {
		f = fopen(json, "w");
		if (!f) {
			perror(json);
			return 1;
		}
		fprintf(f, "{\n  \"bench\": \"ipc\",\n  \"host\": \"%s\",\n  \"cpus\": %ld,\n",
		        un.nodename, sysconf(_SC_NPROCESSORS_ONLN));
		fprintf(f, "  \"volume_bytes\": %d,\n", 16 * 64 * 64);
		fprintf(f,
		        "  \"notify_latency_us\": {\"p50\": %.2f, \"p99\": %.2f, \"mean\": %.2f, "
		        "\"samples\": %d},\n",
		        lat.p50, lat.p99, lat.mean, lat.n);
		fprintf(f, "  \"publish_cost_us\": {");
		for (int k = 0; k < 4; k++)
			fprintf(f, "%s\n    \"%d\": {\"p50\": %.2f, \"p99\": %.2f, \"mean\": %.2f}",
			        k ? "," : "", nr[k], cost[k].p50, cost[k].p99, cost[k].mean);
		fprintf(f, "\n  }\n}\n");
		fclose(f);
	}
	return 0;
}
