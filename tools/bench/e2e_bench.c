/* SPDX-License-Identifier: MIT */
/*
 * End-to-end benchmark through volrecd without Python: a replay file in tmpfs -> the daemon's
 * pipeline -> `vol` received by a libvolrec subscriber; throughput, latency, drops, and the
 * physical limit measured in the same run (PCIe copies on CUDA, memcpy on the CPU).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include <volrec/client.h>

#include "backend/backend.h"
#include "base/base.h"
#include "tools/bench/bench.h"

/* The e2e cases of the one table (tools/bench/cases.c). */
#define bcase bench_case

/* The latencies of each received `vol` (JSON keys in lat_keys). */
enum lat {
	LAT_PROC,  /* the `vol` latency field (last B-scan -> written) */
	LAT_LAST,  /* last B-scan acquired -> received */
	LAT_FIRST, /* first B-scan acquired -> received */
	NLAT
};

static const char *const lat_keys[NLAT] = {"processing_latency_ms", "last_acquired_to_received_ms",
                                           "first_acquired_to_received_ms"};

struct run_result {
	const char *kind; /* "max" or "paced" */
	double rate;      /* source.rate */
	double seconds;
	uint64_t volumes, missed, torn;
	double vps, ascans_s, gvox_s, in_gbs, out_gbs;
	double load[2]; /* the 1-minute load average at the run's start and end */
	/* p50, p99 of each enum lat, ms */
	double lat[NLAT][2];
	uint64_t drops_total, drops_ring_full, drops_other;
	struct json_object *drops; /* the status's "drops" at the end (a reference; NULL: none) */
	struct json_object
	        *backend;     /* the status's "backend" at the end (a reference; NULL: none) */
	char acquisition[32]; /* status source.acquisition: "zero-copy" or "copy" */
	int exit_status;
	bool ok;
};

/* The physical limits measured before the daemon runs, GB/s (NAN: not measured). */
struct limits {
	double memcpy, h2d, d2h, bidir;
	double link_d2h[CFG_GPU_DEVICES_MAX]; /* --devices: each entry's device's D2H limit */
};

static struct {
	char build[PATH_MAX];
	const char *backend, *shm_dir, *overlap, *output;
	int views; /* view.enabled of the daemon: 1 (default) or 0 */
	double seconds, warmup, rate;
	bool paced, maxrun;
	int devs[CFG_GPU_DEVICES_MAX]; /* --devices: gpu.devices of the daemon (ndevs 0: absent) */
	unsigned ndevs;
} opt = {.views = 1,
         .backend = "auto",
         .shm_dir = "/dev/shm",
         .seconds = 5,
         .warmup = 2,
         .paced = true,
         .maxrun = true};

static uint64_t out_voxels(const struct bcase *c)
{
	bool none = c->mode == CFG_RECON_NONE;
	return (uint64_t)c->ny * (none ? 1 : c->stride) * c->nx * (none ? 1 : c->stride) *
	       (c->z1 - c->z0);
}

/* Raw bytes of an epoch: every position's repeats. */
static uint64_t in_bytes(const struct bcase *c)
{
	return (uint64_t)c->ny * bench_case_repeats(c) * c->nx * cfg_sample_bytes(c->sample, c->K);
}

/* Bytes of an epoch's u8 output: every channel's volume. */
static uint64_t out_bytes(const struct bcase *c)
{
	return out_voxels(c) * bench_case_channels(c);
}

/* The daemon's (or `volrec sim`'s) configuration for case c: the case's geometry and processing
 * from the table, then the run's source, instance and publishing, written as YAML. */
static int write_config(const char *path, const struct bcase *c, const char *instance,
                        const char *run_dir, const char *replay, bool synth, double rate,
                        bool block)
{
	struct vr_config cfg;
	FILE *f = fopen(path, "w");
	int rc = 0;

	if (!f) {
		fprintf(stderr, "e2e_bench: %s: %s\n", path, strerror(errno));
		return -errno;
	}
	bench_case_config(c,
	                  !strcmp(opt.backend, "cuda")  ? CFG_BACKEND_CUDA
	                  : !strcmp(opt.backend, "cpu") ? CFG_BACKEND_CPU
	                                                : CFG_BACKEND_AUTO,
	                  &cfg);
	snprintf(cfg.instance, sizeof(cfg.instance), "%s", instance);
	if (synth) {
		cfg.source.type = CFG_SOURCE_SYNTH;
		cfg.source.rate = 25;
		cfg.source.synth.seed = 1;
	} else {
		cfg.source.type = CFG_SOURCE_REPLAY;
		cfg.source.rate = rate;
		snprintf(cfg.source.replay.path, sizeof(cfg.source.replay.path), "%s", replay);
		cfg.source.replay.format = CFG_REPLAY_AUTO;
		cfg.source.replay.loop = true;
	}
	cfg.output.slots = 4;
	cfg.gpu.ndevices = opt.ndevs;
	for (unsigned k = 0; k < opt.ndevs; k++)
		cfg.gpu.devices[k] = opt.devs[k];
	cfg.view.enabled = opt.views;
	cfg.pipeline.ring_bscans = 4 * c->ny * bench_case_repeats(c);
	cfg.pipeline.overflow = block ? CFG_OVERFLOW_BLOCK : CFG_OVERFLOW_DROP_EPOCH;
	snprintf(cfg.ipc.run_dir, sizeof(cfg.ipc.run_dir), "%s", run_dir);
	cfg.ipc.status_interval_ms = 500;
	cfg.ipc.hwm = 1000;
	cfg.log.level = CFG_LOG_INFO;
	if (cfg_dump(&cfg, f) < 0)
		rc = -EIO;
	cfg_free(&cfg);
	if (fclose(f) || rc < 0) {
		fprintf(stderr, "e2e_bench: writing %s: %s\n", path, strerror(errno));
		return -EIO;
	}
	return 0;
}

/* fork + exec argv with stdout/stderr into log (append); returns the pid or -errno. */
static pid_t spawn(char *const argv[], const char *log, const char *overlap)
{
	pid_t pid = fork();

	if (pid < 0)
		return -errno;
	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		if (overlap)
			setenv("VOLRECD_PIPELINE_OVERLAP", overlap, 1);
		execv(argv[0], argv);
		fprintf(stderr, "e2e_bench: exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	return pid;
}

/* Wait for pid up to secs; SIGKILL after. Returns the exit status, or 128+signal. */
static int reap(pid_t pid, double secs)
{
	double end = vr_mono_s() + secs;
	int st;

	while (1) {
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		if (r < 0)
			return -1;
		if (vr_mono_s() > end) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			return 128 + SIGKILL;
		}
		usleep(20000);
	}
}

static void print_log_tail(const char *log)
{
	char buf[4096];
	FILE *f = fopen(log, "r");
	long sz;
	size_t n;

	if (!f)
		return;
	fseek(f, 0, SEEK_END);
	sz = ftell(f);
	fseek(f, sz > (long)sizeof(buf) - 1 ? sz - (long)sizeof(buf) + 1 : 0, SEEK_SET);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = 0;
	fclose(f);
	fprintf(stderr, "---- %s (end) ----\n%s\n----\n", log, buf);
}

/* The member key of the object obj in a status message (NULL when absent). */
static struct json_object *status_get(struct json_object *st, const char *obj, const char *key)
{
	struct json_object *o = NULL, *v = NULL;

	if (st && json_object_object_get_ex(st, obj, &o) && key)
		json_object_object_get_ex(o, key, &v);
	return key ? v : o;
}

static uint64_t status_u64(struct json_object *st, const char *obj, const char *key)
{
	struct json_object *v = status_get(st, obj, key);

	return v ? json_object_get_uint64(v) : 0;
}

/* One daemon run of run_daemon(): the daemon, its client, the status messages and the
 * latencies of the volumes measured. */
struct e2e_daemon {
	const struct bcase *c;
	struct run_result *r;
	char log[PATH_MAX];
	pid_t pid;
	struct volrec_client *cl;
	char *status, *status0; /* the newest status; the one at the window's start */
	double *lat[NLAT];      /* [cap] per volume measured, ms */
	size_t cap, n;
};

/* volrecd started on the case's configuration, and a client connected to it. */
static int e2e_daemon_start(struct e2e_daemon *d, const char *work, const char *replay, double rate,
                            bool block)
{
	char cfg[PATH_MAX], run_dir[PATH_MAX], bin[PATH_MAX + 32], instance[64];
	struct volrec_client_options co = {0};
	double deadline;
	int rc;

	snprintf(instance, sizeof(instance), "e2e%d%s", (int)getpid(), block ? "m" : "p");
	snprintf(run_dir, sizeof(run_dir), "%s/run", work);
	snprintf(cfg, sizeof(cfg), "%s/volrecd-%s.yaml", work, d->r->kind);
	snprintf(d->log, sizeof(d->log), "%s/volrecd-%s.log", work, d->r->kind);
	snprintf(bin, sizeof(bin), "%s/bin/volrecd", opt.build);
	mkdir(run_dir, 0755);
	rc = write_config(cfg, d->c, instance, run_dir, replay, false, rate, block);
	if (rc < 0)
		return rc;
	d->cap = 1 << 16;
	for (int j = 0; j < NLAT; j++) {
		d->lat[j] = malloc(d->cap * sizeof(double));
		if (!d->lat[j])
			return -ENOMEM;
	}
	{
		char *argv[] = {bin, "-c", cfg, NULL};
		d->pid = spawn(argv, d->log, opt.overlap);
	}
	if (d->pid < 0) {
		fprintf(stderr, "e2e_bench: starting %s: %s\n", bin, strerror(-d->pid));
		return d->pid;
	}
	co.run_dir = run_dir;
	co.topics = VOLREC_SUB_VOL | VOLREC_SUB_STATUS;
	co.rcvhwm = 100000;
	deadline = vr_mono_s() + 120;
	while ((rc = volrec_client_open_opts(instance, &co, &d->cl)) < 0) {
		if (waitpid(d->pid, NULL, WNOHANG) == d->pid || vr_mono_s() > deadline) {
			fprintf(stderr, "e2e_bench: %s: volrecd did not come up: %s\n", d->c->name,
			        volrec_strerror(rc));
			print_log_tail(d->log);
			kill(d->pid, SIGKILL);
			reap(d->pid, 5);
			return -EIO;
		}
		usleep(50000);
	}
	return 0;
}

/* The latencies of volume v, received at now_ns, recorded; -ENOMEM when they cannot be. */
static int e2e_daemon_record(struct e2e_daemon *d, const struct volrec_view *v, uint64_t now_ns)
{
	if (d->n == d->cap) {
		bool short_of_memory = false;
		d->cap *= 2;
		for (int j = 0; j < NLAT; j++) {
			double *a = realloc(d->lat[j], d->cap * sizeof(double));
			d->lat[j] = a ? a : d->lat[j];
			short_of_memory |= !a;
		}
		if (short_of_memory)
			return -ENOMEM;
	}
	d->lat[LAT_PROC][d->n] = (double)v->latency_ns / 1e6;
	d->lat[LAT_LAST][d->n] = (double)(int64_t)(now_ns - v->t_last_ns) / 1e6;
	d->lat[LAT_FIRST][d->n] = (double)(int64_t)(now_ns - v->t_first_ns) / 1e6;
	d->n++;
	d->r->missed += v->missed;
	return 0;
}

/* The warm-up (plans, page faults, the first S epochs of the history), then the measured
 * window of opt.seconds; its length in r->seconds. */
static int e2e_daemon_measure(struct e2e_daemon *d)
{
	double t0 = 0, t_end = INFINITY, warm_end = vr_mono_s() + opt.warmup;
	double deadline = vr_mono_s() + 120 + opt.warmup;
	uint64_t warm_n = 0;
	int rc = 0;

	while (1) {
		struct volrec_message m;
		double now = vr_mono_s();

		if (t0 == 0 && warm_n >= 3 && now >= warm_end && d->status) {
			t0 = now;
			t_end = t0 + opt.seconds;
			d->status0 = strdup(d->status);
		}
		if (now >= t_end)
			break;
		if (t0 == 0 && now > deadline) {
			fprintf(stderr, "e2e_bench: %s: no volumes within the warm-up\n",
			        d->c->name);
			print_log_tail(d->log);
			break;
		}
		rc = volrec_client_next_message(d->cl, 200, &m);
		if (rc == -ETIMEDOUT || rc == -EPROTO || rc == -EINTR)
			continue;
		if (rc < 0) {
			fprintf(stderr, "e2e_bench: %s: receiving: %s (%s)\n", d->c->name,
			        volrec_strerror(rc), volrec_client_error(d->cl));
			break;
		}
		if (m.type == VOLREC_MSG_STATUS) {
			free(d->status);
			d->status = strdup(m.text);
			continue;
		}
		if (m.type != VOLREC_MSG_VOL)
			continue;
		uint64_t now_ns = vr_real_ns();
		if (t0 == 0) {
			warm_n++;
		} else if (e2e_daemon_record(d, &m.view, now_ns) < 0) {
			rc = -ENOMEM;
			volrec_view_release(d->cl, &m.view);
			break;
		}
		if (volrec_view_release(d->cl, &m.view) == VOLREC_ETORN)
			d->r->torn++;
	}
	d->r->seconds = t0 > 0 ? vr_mono_s() - t0 : 0;
	return rc;
}

/* The status at the end of the window, for the drops in it; then volrecd stopped. */
static void e2e_daemon_stop(struct e2e_daemon *d)
{
	double end = vr_mono_s() + 1.5;

	while (vr_mono_s() < end) {
		struct volrec_message m;
		if (volrec_client_next_message(d->cl, 100, &m) < 0)
			continue;
		if (m.type == VOLREC_MSG_VOL) {
			volrec_view_release(d->cl, &m.view);
		} else if (m.type == VOLREC_MSG_STATUS) {
			free(d->status);
			d->status = strdup(m.text);
			break;
		}
	}
	kill(d->pid, SIGTERM);
	d->r->exit_status = reap(d->pid, 30);
	if (d->r->exit_status != 0) {
		fprintf(stderr, "e2e_bench: %s: volrecd exited with %d\n", d->c->name,
		        d->r->exit_status);
		print_log_tail(d->log);
	}
}

/* Rates, latency percentiles and the drops of the window into r. */
static void e2e_daemon_summarize(struct e2e_daemon *d)
{
	struct run_result *r = d->r;
	const struct bcase *c = d->c;

	r->volumes = d->n;
	if (r->seconds > 0) {
		/* raw A-scans: every repeat of every position */
		double a = (double)c->nx * c->ny * bench_case_repeats(c);
		r->vps = (double)d->n / r->seconds;
		r->ascans_s = r->vps * a;
		r->gvox_s = r->vps * (double)out_bytes(c) / 1e9;
		r->in_gbs = r->vps * (double)in_bytes(c) / 1e9;
		r->out_gbs = r->vps * (double)out_bytes(c) / 1e9;
	}
	for (int j = 0; j < NLAT; j++) {
		r->lat[j][0] = vr_percentile(d->lat[j], d->n, 50);
		r->lat[j][1] = vr_percentile(d->lat[j], d->n, 99);
	}
	struct json_object *st = d->status ? json_tokener_parse(d->status) : NULL;
	struct json_object *st0 = d->status0 ? json_tokener_parse(d->status0) : NULL;
	struct json_object *acq = status_get(st, "source", "acquisition");

	if (st && st0) {
		uint64_t rf = status_u64(st, "drops", "ring_full") -
		              status_u64(st0, "drops", "ring_full");

		r->drops_total =
		        status_u64(st, "drops", "total") - status_u64(st0, "drops", "total");
		r->drops_ring_full = rf;
		r->drops_other = r->drops_total - rf;
	}
	r->drops = json_object_get(status_get(st, "drops", NULL));
	r->backend = json_object_get(status_get(st, "backend", NULL));
	/* which acquisition path the daemon ran (docs/operations.md "Pipeline") */
	snprintf(r->acquisition, sizeof(r->acquisition), "%s",
	         acq ? json_object_get_string(acq) : "unknown");
	json_object_put(st);
	json_object_put(st0);
}

static int run_daemon(const struct bcase *c, const char *work, const char *replay, double rate,
                      bool block, struct run_result *r)
{
	struct e2e_daemon d = {.c = c, .r = r};
	int rc;

	memset(r, 0, sizeof(*r));
	r->kind = block ? "max" : "paced";
	r->rate = rate;
	r->load[0] = r->load[1] = NAN;
	getloadavg(&r->load[0], 1);
	rc = e2e_daemon_start(&d, work, replay, rate, block);
	if (rc < 0)
		goto out;
	rc = e2e_daemon_measure(&d);
	getloadavg(&r->load[1], 1);
	e2e_daemon_stop(&d);
	e2e_daemon_summarize(&d);
	r->ok = d.n > 0 && r->exit_status == 0;
	rc = r->ok ? 0 : -EIO;
out:
	volrec_client_close(d.cl);
	free(d.status);
	free(d.status0);
	for (int j = 0; j < NLAT; j++)
		free(d.lat[j]);
	return rc;
}

/* For a case c of a motion-adaptive mode (docs/algorithms.md §2b, §2c), the selected
 * noncumulative case of c's geometry: the reference of c's rate (issue 18: >= 0.8 of it in the
 * same run). -1 when c is of another mode or none is selected. */
static int same_geometry_noncumulative(const struct bcase *const *sel, int nsel,
                                       const struct bcase *c)
{
	if (c->mode != CFG_RECON_ADAPTIVE && c->mode != CFG_RECON_COMPENSATED)
		return -1;
	for (int j = 0; j < nsel; j++) {
		const struct bcase *o = sel[j];
		if (o->mode == CFG_RECON_NONCUMULATIVE && o->K == c->K && o->sample == c->sample &&
		    o->nx == c->nx && o->ny == c->ny && o->stride == c->stride && o->z0 == c->z0 &&
		    o->z1 == c->z1)
			return j;
	}
	return -1;
}

/* The targets of the table's cases, each <stem>_<figure> (bench_case.target_stem), and
 * adaptive_over_noncumulative: the motion-adaptive modes' rate over noncumulative (the lowest
 * where their cases differ). */
static struct json_object *targets_json(void)
{
	struct json_object *t = json_object_new_object();
	double over_nc = 0;

	for (unsigned i = 0; i < bench_ncases; i++) {
		const struct bcase *c = &bench_cases[i];
		const struct {
			const char *figure;
			double v;
		} figs[] = {{"volumes_per_s", c->target_vps},
		            {"p99_ms", c->target_p99_ms},
		            {"ascans_per_s", c->target_ascans},
		            {"input_over_h2d", c->target_in_ratio}};
		char stem[64], key[96];

		snprintf(stem, sizeof(stem), "%s", c->target_stem ? c->target_stem : c->name);
		for (char *q = stem; *q; q++)
			*q = *q == '-' ? '_' : *q;
		for (unsigned j = 0; j < VR_ARRAY_SIZE(figs); j++)
			if (figs[j].v > 0) {
				snprintf(key, sizeof(key), "%s_%s", stem, figs[j].figure);
				json_object_object_add(t, key, bench_json_num(figs[j].v, false));
			}
		if (c->target_over_nc > 0 && (over_nc == 0 || c->target_over_nc < over_nc))
			over_nc = c->target_over_nc;
	}
	if (over_nc > 0)
		json_object_object_add(t, "adaptive_over_noncumulative",
		                       bench_json_num(over_nc, false));
	return t;
}

static struct json_object *u32_pair(uint32_t a, uint32_t b)
{
	struct json_object *v = json_object_new_array();

	json_object_array_add(v, json_object_new_int64(a));
	json_object_array_add(v, json_object_new_int64(b));
	return v;
}

/* Each entry of gpu.devices: its slab (rows of B-scans [k ny / n, (k + 1) ny / n)) per second
 * over its link, and the link's limit. */
static struct json_object *devices_json(const struct bcase *c, const struct run_result *r,
                                        const struct limits *lim)
{
	struct json_object *devs = json_object_new_array();

	for (unsigned n = 0; n < opt.ndevs; n++) {
		const uint64_t b0 = (uint64_t)n * c->ny / opt.ndevs,
		               b1 = (uint64_t)(n + 1) * c->ny / opt.ndevs;
		struct json_object *d = json_object_new_object();

		json_object_object_add(d, "device", json_object_new_int(opt.devs[n]));
		json_object_object_add(d, "gbs",
		                       bench_json_num(r->vps * (double)out_voxels(c) *
		                                              (double)(b1 - b0) / (double)c->ny /
		                                              1e9,
		                                      false));
		json_object_object_add(d, "limit_gbs", bench_json_num(lim->link_d2h[n], false));
		json_object_array_add(devs, d);
	}
	return devs;
}

/* Whether run r meets the targets of case c. */
static struct json_object *meets_json(const struct bcase *c, const struct run_result *r,
                                      const struct limits *lim)
{
	struct json_object *d = json_object_new_object();

	if (c->target_vps) {
		json_object_object_add(d, "volumes_per_s",
		                       json_object_new_boolean(r->vps >= c->target_vps));
		json_object_object_add(
		        d, "p99_processing_ms",
		        json_object_new_boolean(r->lat[LAT_PROC][1] <= c->target_p99_ms));
		json_object_object_add(
		        d, "p99_first_acquired_ms",
		        json_object_new_boolean(r->lat[LAT_FIRST][1] <= c->target_p99_ms));
	}
	if (c->target_ascans)
		json_object_object_add(d, "ascans_per_s",
		                       json_object_new_boolean(r->ascans_s >= c->target_ascans));
	if (c->target_in_ratio)
		json_object_object_add(
		        d, "input_over_h2d",
		        json_object_new_boolean(isfinite(lim->h2d) &&
		                                r->in_gbs >= c->target_in_ratio * lim->h2d));
	return d;
}

/* One run r (k: 0 max, 1 paced) of case c: its setting, figures, latencies, drops, and whether
 * it meets the case's targets. */
static struct json_object *run_json(const struct bcase *c, int k, const struct run_result *r,
                                    const struct limits *lim)
{
	struct json_object *o = json_object_new_object(), *g = json_object_new_object(), *d;
	double lim_vps = NAN;

	if (isfinite(lim->d2h) && isfinite(lim->h2d))
		lim_vps = fmin(fmin(lim->h2d * 1e9 / (double)in_bytes(c),
		                    lim->d2h * 1e9 / (double)out_bytes(c)),
		               lim->bidir * 1e9 / fmax((double)in_bytes(c), (double)out_bytes(c)));
	json_object_object_add(o, "case", json_object_new_string(c->name));
	json_object_object_add(o, "run", json_object_new_string(r->kind));
	json_object_object_add(o, "sample_type",
	                       json_object_new_string(cfg_sample_name(c->sample)));
	json_object_object_add(g, "samples", json_object_new_int64(c->K));
	json_object_object_add(g, "ascans_per_bscan", json_object_new_int64(c->nx));
	json_object_object_add(g, "bscans", json_object_new_int64(c->ny));
	json_object_object_add(g, "stride", u32_pair(c->stride, c->stride));
	json_object_object_add(g, "depth", u32_pair(c->z0, c->z1));
	json_object_object_add(g, "repeats", json_object_new_int64(bench_case_repeats(c)));
	json_object_object_add(o, "geometry", g);
	json_object_object_add(
	        o, "channels",
	        json_object_new_string(c->functional ? "structure,angio,doppler" : "structure"));
	json_object_object_add(o, "mode", json_object_new_string(cfg_recon_mode_name(c->mode)));
	json_object_object_add(o, "rate", bench_json_num(r->rate, false));
	json_object_object_add(o, "overflow", json_object_new_string(k ? "drop_epoch" : "block"));
	json_object_object_add(o, "seconds", bench_json_num(r->seconds, false));
	json_object_object_add(o, "volumes", json_object_new_uint64(r->volumes));
	json_object_object_add(o, "missed", json_object_new_uint64(r->missed));
	json_object_object_add(o, "torn", json_object_new_uint64(r->torn));
	json_object_object_add(o, "volumes_per_s", bench_json_num(r->vps, false));
	if (opt.ndevs > 1 && isfinite(lim->d2h)) {
		json_object_object_add(o, "device_d2h_gbs", devices_json(c, r, lim));
	}
	/* raw A-scans (every repeat) per second */
	json_object_object_add(o, "ascans_per_s", bench_json_num(r->ascans_s, false));
	if (isfinite(lim->h2d)) {
		/* the raw input beside the pinned H2D limit of the same run (issue 41's target) */
		json_object_object_add(o, "input_h2d_limit_gbs", bench_json_num(lim->h2d, false));
		json_object_object_add(o, "input_over_h2d",
		                       bench_json_num(r->in_gbs / lim->h2d, true));
	}
	d = json_object_new_array();
	json_object_array_add(d, bench_json_num(r->load[0], false));
	json_object_array_add(d, bench_json_num(r->load[1], false));
	json_object_object_add(o, "loadavg_1min_start_end", d);
	json_object_object_add(o, "gvox_per_s", bench_json_num(r->gvox_s, false));
	json_object_object_add(o, "input_gbs", bench_json_num(r->in_gbs, false));
	json_object_object_add(o, "output_gbs", bench_json_num(r->out_gbs, false));
	json_object_object_add(o, "pcie_limit_volumes_per_s", bench_json_num(lim_vps, false));
	json_object_object_add(o, "ratio_to_limit", bench_json_num(r->vps / lim_vps, false));
	for (int j = 0; j < NLAT; j++) {
		d = json_object_new_object();
		json_object_object_add(d, "p50", bench_json_num(r->lat[j][0], false));
		json_object_object_add(d, "p99", bench_json_num(r->lat[j][1], false));
		json_object_object_add(o, lat_keys[j], d);
	}
	d = json_object_new_object();
	json_object_object_add(d, "total", json_object_new_uint64(r->drops_total));
	json_object_object_add(d, "ring_full", json_object_new_uint64(r->drops_ring_full));
	json_object_object_add(d, "other", json_object_new_uint64(r->drops_other));
	json_object_object_add(o, "drops_in_window", d);
	json_object_object_add(o, "daemon_drops_total", json_object_get(r->drops));
	json_object_object_add(o, "exit_status", json_object_new_int(r->exit_status));
	json_object_object_add(o, "acquisition", json_object_new_string(r->acquisition));
	if (c->target_vps || c->target_ascans || c->target_in_ratio)
		json_object_object_add(o, "meets", meets_json(c, r, lim));
	return o;
}

/* The whole record: the run's setting, the limits, the table's targets, the ratios of the
 * motion-adaptive modes to noncumulative, and every run. A new object. */
static struct json_object *results_json(const char *host, const char *date, const char *commit,
                                        struct json_object *device, const struct limits *lim,
                                        const struct bcase *const *sel, int nsel,
                                        struct run_result (*res)[2])
{
	struct json_object *o = json_object_new_object(), *l = json_object_new_object();
	struct json_object *ratios = json_object_new_object(), *runs = json_object_new_array();

	json_object_object_add(o, "benchmark",
	                       json_object_new_string("volrecd end to end (C): replay in tmpfs -> "
	                                              "vol received; run max: rate 0, overflow "
	                                              "block; run paced: fixed rate, drop_epoch"));
	json_object_object_add(o, "host", json_object_new_string(host));
	json_object_object_add(o, "date", json_object_new_string(date));
	json_object_object_add(o, "commit", json_object_new_string(commit));
	json_object_object_add(o, "backend", json_object_new_string(opt.backend));
	json_object_object_add(o, "overlap",
	                       json_object_new_string(opt.overlap ? opt.overlap : "auto"));
	json_object_object_add(o, "views", json_object_new_boolean(opt.views));
	json_object_object_add(o, "cpus", json_object_new_int64(sysconf(_SC_NPROCESSORS_ONLN)));
	json_object_object_add(o, "device", json_object_get(device));
	json_object_object_add(l, "memcpy_gbs", bench_json_num(lim->memcpy, false));
	json_object_object_add(l, "h2d_pinned_gbs", bench_json_num(lim->h2d, false));
	json_object_object_add(l, "d2h_shm_gbs", bench_json_num(lim->d2h, false));
	json_object_object_add(l, "bidir_each_gbs", bench_json_num(lim->bidir, false));
	if (opt.ndevs > 1 && isfinite(lim->d2h)) {
		struct json_object *devs = json_object_new_array();

		for (unsigned k = 0; k < opt.ndevs; k++) {
			struct json_object *d = json_object_new_object();

			json_object_object_add(d, "device", json_object_new_int(opt.devs[k]));
			json_object_object_add(d, "d2h_shm_gbs",
			                       bench_json_num(lim->link_d2h[k], false));
			json_object_array_add(devs, d);
		}
		json_object_object_add(l, "devices", devs);
	}
	json_object_object_add(o, "limits", l);
	json_object_object_add(o, "targets", targets_json());
	for (int i = 0; i < nsel; i++) {
		int j = same_geometry_noncumulative(sel, nsel, sel[i]);
		char key[128];

		if (j < 0 || !(res[j][0].vps > 0) || !res[i][0].kind)
			continue;
		snprintf(key, sizeof(key), "%s/%s", sel[i]->name, sel[j]->name);
		json_object_object_add(ratios, key,
		                       bench_json_num(res[i][0].vps / res[j][0].vps, true));
	}
	json_object_object_add(o, "adaptive_over_noncumulative", ratios);
	for (int i = 0; i < nsel; i++)
		for (int k = 0; k < 2; k++)
			if (res[i][k].kind)
				json_object_array_add(runs, run_json(sel[i], k, &res[i][k], lim));
	json_object_object_add(o, "results", runs);
	return o;
}

/* True when arg of --name is a or b, else says so. */
static bool one_of(const char *name, const char *arg, const char *a, const char *b)
{
	if (!strcmp(arg, a) || !strcmp(arg, b))
		return true;
	fprintf(stderr, "e2e_bench: --%s %s: %s or %s\n", name, arg, a, b);
	return false;
}

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: e2e_bench [--build DIR] [--backend cpu|cuda|auto] [--case NAME]...\n"
	        "                 [--seconds S] [--warmup S] [--rate EPOCHS_PER_S] [--no-paced]\n"
	        "                 [--no-max] [--overlap 0|1] [--views on|off] [--shm-dir DIR]\n"
	        "                 [--devices D0,D1,...] [-o FILE]\n"
	        "cases:");
	for (unsigned i = 0; i < bench_ncases; i++)
		if (bench_cases[i].e2e_epochs)
			fprintf(f, " %s", bench_cases[i].name);
	fprintf(f, " (default: tiny classic-2048)\n");
}

/* --case NAME: one more end-to-end case into sel[*nsel] (8 at most). 0, or -EINVAL with the
 * message and the usage printed. */
static int e2e_case_arg(const char *arg, const struct bcase **sel, int *nsel)
{
	const struct bcase *found = bench_case_find(arg);

	if (!found || !found->e2e_epochs || *nsel == 8) {
		fprintf(stderr, "e2e_bench: --case %s: not an end-to-end case (or more than 8)\n",
		        arg);
		usage(stderr);
		return -EINVAL;
	}
	sel[(*nsel)++] = found;
	return 0;
}

/* --seconds (ch 's', > 0), --warmup ('w') or --rate ('r', >= 0), at most 1e5, into opt. 0, or
 * -EINVAL with the message printed. */
static int e2e_seconds_arg(int ch, const char *arg)
{
	char *end = NULL;
	double v = strtod(arg, &end);

	if (!end || *end || !(v >= 0) || v > 1e5 || (ch == 's' && v <= 0)) {
		fprintf(stderr, "e2e_bench: --%s %s: expected a number %s\n",
		        ch == 's'   ? "seconds"
		        : ch == 'w' ? "warmup"
		                    : "rate",
		        arg, ch == 's' ? "> 0" : ">= 0");
		return -EINVAL;
	}
	*(ch == 's' ? &opt.seconds : ch == 'w' ? &opt.warmup : &opt.rate) = v;
	return 0;
}

/* -1 when the options are read into opt and sel[*nsel] (8 at most), else the exit status. */
static int e2e_parse_args(int argc, char **argv, const struct bcase **sel, int *nsel)
{
	static const struct option lo[] = {{"build", required_argument, NULL, 'b'},
	                                   {"backend", required_argument, NULL, 'k'},
	                                   {"case", required_argument, NULL, 'c'},
	                                   {"seconds", required_argument, NULL, 's'},
	                                   {"warmup", required_argument, NULL, 'w'},
	                                   {"rate", required_argument, NULL, 'r'},
	                                   {"no-paced", no_argument, NULL, 'P'},
	                                   {"no-max", no_argument, NULL, 'M'},
	                                   {"overlap", required_argument, NULL, 'v'},
	                                   {"shm-dir", required_argument, NULL, 'd'},
	                                   {"views", required_argument, NULL, 'V'},
	                                   {"output", required_argument, NULL, 'o'},
	                                   {"devices", required_argument, NULL, 'D'},
	                                   VR_CLI_LONGOPTS_END};
	const struct vr_cli_str strs[] = {{'d', &opt.shm_dir}, {'o', &opt.output}};
	int ch;

	while ((ch = VR_CLI_GETOPT(argc, argv, "o:h", lo, strs)) != -1) {
		switch (ch) {
		case 'b':
			snprintf(opt.build, sizeof(opt.build), "%s", optarg);
			break;
		case 'k':
			if (strcmp(optarg, "cpu") && strcmp(optarg, "cuda") &&
			    strcmp(optarg, "auto")) {
				fprintf(stderr, "e2e_bench: --backend %s: cpu, cuda or auto\n",
				        optarg);
				return 2;
			}
			opt.backend = optarg;
			break;
		case 'c':
			if (e2e_case_arg(optarg, sel, nsel))
				return 2;
			break;
		case 's':
		case 'w':
		case 'r':
			if (e2e_seconds_arg(ch, optarg))
				return 2;
			break;
		case 'P':
			opt.paced = false;
			break;
		case 'M':
			opt.maxrun = false;
			break;
		case 'v':
			if (!one_of("overlap", optarg, "0", "1"))
				return 2;
			opt.overlap = optarg;
			break;
		case 'V':
			if (!one_of("views", optarg, "on", "off"))
				return 2;
			opt.views = !strcmp(optarg, "on");
			break;
		case 'D':
			/* gpu.devices of the daemon: comma-separated ordinals */
			if (vr_parse_ordinals(optarg, 255, opt.devs, CFG_GPU_DEVICES_MAX,
			                      &opt.ndevs)) {
				fprintf(stderr,
				        "e2e_bench: --devices %s: up to %d device ordinals 0-255 "
				        "separated by commas\n",
				        optarg, CFG_GPU_DEVICES_MAX);
				return 2;
			}
			break;
		default:
			return vr_cli_usage(usage, ch);
		}
	}
	if (optind != argc) {
		usage(stderr);
		return 2;
	}
	if (!opt.maxrun && !opt.paced) {
		fprintf(stderr, "e2e_bench: --no-max and --no-paced leave nothing to run\n");
		return 2;
	}
	if (!*nsel) {
		sel[(*nsel)++] = bench_case_find("tiny");
		sel[(*nsel)++] = bench_case_find("classic-2048");
	}
	return -1;
}

/* The commit measured: $VOLREC_GIT_COMMIT, else git's short hash of HEAD, else "unknown". */
static void e2e_commit(char *commit, size_t len)
{
	if (getenv("VOLREC_GIT_COMMIT")) {
		snprintf(commit, len, "%s", getenv("VOLREC_GIT_COMMIT"));
		return;
	}
	FILE *p = popen("git rev-parse --short HEAD 2>/dev/null", "r");
	if (p) {
		if (fgets(commit, (int)len, p))
			commit[strcspn(commit, "\n")] = 0;
		if (!commit[0])
			snprintf(commit, len, "unknown");
		pclose(p);
	}
}

/* Several devices: each distinct device's link into lim->link_d2h, the limits of the whole
 * the sums over distinct devices (an ordinal named twice shares its link). */
static void e2e_device_links(struct limits *lim)
{
	double h2d = 0, d2h = 0, bidir = 0;
	struct be_bandwidth bw;
	char err[512];

	for (unsigned k = 0; k < opt.ndevs; k++) {
		bool seen = false;
		for (unsigned j = 0; j < k && !seen; j++)
			if (opt.devs[j] == opt.devs[k]) {
				lim->link_d2h[k] = lim->link_d2h[j];
				seen = true;
			}
		if (seen)
			continue;
		if (be_cuda_bandwidth(opt.devs[k], (size_t)256 << 20, 5, &bw, err, sizeof(err)) <
		    0) {
			fprintf(stderr, "e2e_bench: PCIe bandwidth of device %d not measured: %s\n",
			        opt.devs[k], err);
			h2d = d2h = bidir = NAN;
			break;
		}
		lim->link_d2h[k] = bw.d2h_shm_gbs > 0 ? bw.d2h_shm_gbs : bw.d2h_gbs;
		h2d += bw.h2d_gbs;
		d2h += lim->link_d2h[k];
		bidir += bw.bidir_gbs;
	}
	lim->h2d = h2d;
	lim->d2h = d2h;
	lim->bidir = bidir;
}

/* The physical limits, measured before the daemon runs: memcpy bandwidth (GB/s, best of 5)
 * over 256 MiB, the CPU's figure, and on CUDA the PCIe links. */
static void e2e_limits(struct limits *lim)
{
	lim->memcpy = bench_host_memcpy_gbs((size_t)256 << 20, 5);
	if (!strcmp(opt.backend, "cpu") || be_cuda_devices() <= 0)
		return;
	struct be_bandwidth bw;
	char err[512];
	if (be_cuda_bandwidth(opt.ndevs ? opt.devs[0] : 0, (size_t)256 << 20, 5, &bw, err,
	                      sizeof(err)) == 0) {
		lim->h2d = bw.h2d_gbs;
		lim->d2h = bw.d2h_shm_gbs > 0 ? bw.d2h_shm_gbs : bw.d2h_gbs;
		lim->bidir = bw.bidir_gbs;
	} else {
		fprintf(stderr, "e2e_bench: PCIe bandwidth not measured: %s\n", err);
	}
	if (opt.ndevs > 1 && isfinite(lim->d2h))
		e2e_device_links(lim);
}

/* The replay file of case c written with `volrec sim` to replay; 0, else 1 (said). */
static int e2e_write_replay(const struct bcase *c, const char *work, const char *replay)
{
	char simcfg[PATH_MAX], log[PATH_MAX], bin[PATH_MAX + 32], nep[16];
	struct statvfs vfs;
	uint64_t need = in_bytes(c) * c->e2e_epochs + 4 * out_bytes(c) + ((uint64_t)64 << 20);

	if (statvfs(opt.shm_dir, &vfs) == 0 && (uint64_t)vfs.f_bavail * vfs.f_frsize < need) {
		fprintf(stderr,
		        "e2e_bench: %s: %s has %.2f GB free, the replay file and the shm "
		        "slots need %.2f GB (use --shm-dir or a larger /dev/shm)\n",
		        c->name, opt.shm_dir, (double)vfs.f_bavail * vfs.f_frsize / 1e9,
		        (double)need / 1e9);
		return 1;
	}
	snprintf(simcfg, sizeof(simcfg), "%s/sim-%s.yaml", work, c->name);
	snprintf(log, sizeof(log), "%s/sim-%s.log", work, c->name);
	snprintf(bin, sizeof(bin), "%s/bin/volrec", opt.build);
	snprintf(nep, sizeof(nep), "%u", c->e2e_epochs);
	if (write_config(simcfg, c, "e2esim", work, replay, true, 0, true) < 0)
		return 1;
	char *sargv[] = {bin, "sim", "-c", simcfg, "-o", (char *)replay, "-n", nep, NULL};
	double t = vr_mono_s();
	pid_t pid = spawn(sargv, log, NULL);
	int rc = pid < 0 ? pid : reap(pid, 600);
	if (rc != 0) {
		fprintf(stderr, "e2e_bench: %s: volrec sim failed (%d)\n", c->name, rc);
		print_log_tail(log);
		unlink(replay);
		return 1;
	}
	fprintf(stderr, "e2e_bench: %s: replay of %u epochs written in %.1f s\n", c->name,
	        c->e2e_epochs, vr_mono_s() - t);
	return 0;
}

/* Case c's runs into res[0] (max) and res[1] (paced); 0, else 1. */
static int e2e_run_case(const struct bcase *c, const char *work, struct run_result res[2])
{
	char replay[PATH_MAX];
	int status = 0;

	memset(res, 0, 2 * sizeof(*res));
	snprintf(replay, sizeof(replay), "%s/vre2e-%d-%s.vrr", opt.shm_dir, (int)getpid(), c->name);
	if (e2e_write_replay(c, work, replay))
		return 1;
	if (opt.maxrun && run_daemon(c, work, replay, 0, true, &res[0]) < 0)
		status = 1;
	if (opt.paced) {
		double rate = opt.rate > 0 ? opt.rate : c->paced_rate;
		/* a rate the backend can follow: near the target, below what it sustains */
		if (opt.rate <= 0 && res[0].vps > 0 && (rate <= 0 || rate > 0.8 * res[0].vps))
			rate = 0.6 * res[0].vps;
		if (rate <= 0)
			rate = 10;
		rate = floor(rate * 10 + 0.5) / 10;
		if (run_daemon(c, work, replay, rate, false, &res[1]) < 0)
			status = 1;
	}
	unlink(replay);
	return status;
}

static void e2e_print_table(const struct bcase *const *sel, int nsel, struct run_result (*res)[2],
                            const struct limits *lim, const char *host, const char *commit)
{
	printf("\nvolrecd end to end (replay in %s -> vol received), backend %s, %s, commit %s\n",
	       opt.shm_dir, opt.backend, host, commit);
	printf("%-13s %-6s %7s %9s %11s %7s %9s %9s %9s %9s %7s %-9s\n", "case", "run", "rate",
	       "vol/s", "A-scans/s", "GVox/s", "proc p50", "proc p99", "first p50", "first p99",
	       "drops", "acquire");
	for (int i = 0; i < nsel; i++)
		for (int k = 0; k < 2; k++) {
			const struct run_result *r = &res[i][k];
			if (!r->kind)
				continue;
			printf("%-13s %-6s %7.1f %9.2f %11.4g %7.3f %9.2f %9.2f %9.2f %9.2f "
			       "%7" PRIu64 " %-9s\n",
			       sel[i]->name, r->kind, r->rate, r->vps, r->ascans_s, r->gvox_s,
			       r->lat[LAT_PROC][0], r->lat[LAT_PROC][1], r->lat[LAT_FIRST][0],
			       r->lat[LAT_FIRST][1], r->drops_total, r->acquisition);
		}
	for (int i = 0; i < nsel; i++)
		for (int k = 0; k < 2; k++) {
			const struct run_result *r = &res[i][k];
			if (!r->kind)
				continue;
			if (sel[i]->repeats > 1 || sel[i]->functional)
				printf("%s %s: %u repeats, %u channel(s): %.4g raw A-scans/s, "
				       "input %.3f GB/s",
				       sel[i]->name, r->kind, bench_case_repeats(sel[i]),
				       bench_case_channels(sel[i]), r->ascans_s, r->in_gbs);
			else
				printf("%s %s:", sel[i]->name, r->kind);
			if (sel[i]->target_in_ratio && isfinite(lim->h2d))
				printf(", %.3f of pinned H2D %.1f GB/s (target >= %g)",
				       r->in_gbs / lim->h2d, lim->h2d, sel[i]->target_in_ratio);
			if (sel[i]->target_ascans)
				printf(", %.3f of the target %.4g A-scans/s",
				       r->ascans_s / sel[i]->target_ascans, sel[i]->target_ascans);
			printf("; load average %.2f at the start, %.2f at the end\n", r->load[0],
			       r->load[1]);
		}
	for (int i = 0; i < nsel; i++) {
		int j = same_geometry_noncumulative(sel, nsel, sel[i]);
		if (j >= 0 && res[j][0].vps > 0 && res[i][0].kind)
			printf("%s / %s (max runs): %.3f (target >= %g)\n", sel[i]->name,
			       sel[j]->name, res[i][0].vps / res[j][0].vps, sel[i]->target_over_nc);
	}
	printf("limits: memcpy %.1f GB/s", lim->memcpy);
	if (isfinite(lim->h2d))
		printf(", pinned H2D %.1f GB/s, D2H (shm) %.1f GB/s, both ways %.1f GB/s each%s",
		       lim->h2d, lim->d2h, lim->bidir,
		       opt.ndevs > 1 ? " (the distinct devices' links together)" : "");
	if (opt.ndevs > 1 && isfinite(lim->d2h))
		for (unsigned k = 0; k < opt.ndevs; k++)
			printf("\n  gpu.devices[%u] = device %d: D2H (shm) %.1f GB/s", k,
			       opt.devs[k], lim->link_d2h[k]);
	printf("\nlatencies in ms: proc = the vol message's processing latency (last B-scan "
	       "acquired -> volume written); first = first B-scan acquired -> vol received\n");
}

/* The record written to path; 0, else 1 (said). */
static int e2e_write_json(const char *path, struct json_object *doc)
{
	int err = doc ? 0 : ENOMEM;

	errno = 0;
	if (doc && json_object_to_file_ext(path, doc,
	                                   JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
	                                           JSON_C_TO_STRING_NOSLASHESCAPE) < 0)
		err = errno ? errno : EIO;
	json_object_put(doc);
	if (err) {
		fprintf(stderr, "e2e_bench: %s: %s\n", path, strerror(err));
		return 1;
	}
	printf("wrote %s\n", path);
	return 0;
}

int main(int argc, char **argv)
{
	const struct bcase *sel[8];
	struct run_result res[8][2];
	int nsel = 0, status;
	struct limits lim = {.memcpy = NAN, .h2d = NAN, .d2h = NAN, .bidir = NAN};
	char work[] = "/tmp/vre2eXXXXXX", host[128] = "unknown", date[32], commit[64] = "unknown";
	char outpath[PATH_MAX], *up;
	struct json_object *device = NULL;
	time_t now = time(NULL);

	/* --build by default: the folder above this program's (build/tests/e2e_bench: build) */
	if (vr_self_dir(opt.build, sizeof(opt.build)) == 0 && (up = strrchr(opt.build, '/')))
		*up = 0;
	status = e2e_parse_args(argc, argv, sel, &nsel);
	if (status >= 0)
		return status;
	status = 0;
	if (!strcmp(opt.backend, "cuda") && be_cuda_devices() <= 0) {
		printf("SKIP: --backend cuda: no CUDA device\n");
		return 77;
	}
	if (!mkdtemp(work)) {
		fprintf(stderr, "e2e_bench: mkdtemp: %s\n", strerror(errno));
		return 1;
	}
	gethostname(host, sizeof(host) - 1);
	strftime(date, sizeof(date), "%Y%m%dT%H%M%SZ", gmtime(&now));
	e2e_commit(commit, sizeof(commit));
	e2e_limits(&lim);
	for (int i = 0; i < nsel; i++) {
		status |= e2e_run_case(sel[i], work, res[i]);
		for (int k = 0; k < 2; k++)
			if (res[i][k].backend)
				device = res[i][k].backend;
	}
	e2e_print_table(sel, nsel, res, &lim, host, commit);
	if (opt.output)
		snprintf(outpath, sizeof(outpath), "%s", opt.output);
	else
		snprintf(outpath, sizeof(outpath), "bench/results/e2e-c-%s-%s-%s.json", opt.backend,
		         host, date);
	status |= e2e_write_json(outpath,
	                         results_json(host, date, commit, device, &lim, sel, nsel, res));
	for (int i = 0; i < nsel; i++)
		for (int k = 0; k < 2; k++) {
			json_object_put(res[i][k].drops);
			json_object_put(res[i][k].backend);
		}
	{
		char cmd[PATH_MAX + 16];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", work);
		if (system(cmd) != 0)
			fprintf(stderr, "e2e_bench: could not remove %s\n", work);
	}
	return status;
}
