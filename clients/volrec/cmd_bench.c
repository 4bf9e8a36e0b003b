/* SPDX-License-Identifier: MIT */
/*
 * `volrec bench`: backend throughput against the physical limit measured in the same run. On
 * the CPU: host memcpy, classic FD-OCT in A-scans/s and VolRec time per epoch; on CUDA the
 * suite of backend/bench.c (pinned copy bandwidths, the paper and classic cases pipelined).
 * A table on stdout and a JSON record.
 */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/bench.h"
#include "commands.h"
#include "config/config.h"

struct bench {
	struct be_bench_figs figs;
	double bw1, bwn; /* host memcpy bytes/s: one thread, all threads */
	unsigned threads;
	char device[256];
	const char *backend; /* asked for, then the one that ran */
	double min_seconds;  /* per measurement */
	bool cuda;           /* the CUDA suite ran */
	int gpu_device;      /* its device (gpu.device of the defaults) */
};

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ---- host limits: memcpy bandwidth ---------------------------------------------------------- */

struct copy_arg {
	char *dst;
	const char *src;
	size_t len;
	int reps;
};

static void *copy_main(void *va)
{
	struct copy_arg *a = va;
	for (int r = 0; r < a->reps; r++)
		memcpy(a->dst, a->src, a->len);
	return NULL;
}

/* Bytes copied per second by n threads, each on its own slice (best of 3). */
static double memcpy_rate(char *dst, const char *src, size_t len, unsigned n)
{
	pthread_t tid[256];
	struct copy_arg args[256];
	double best = 0;
	size_t slice = len / n / 64 * 64;

	for (int trial = 0; trial < 3; trial++) {
		double t0 = now_s();
		unsigned started = 0;
		for (unsigned i = 0; i < n; i++) {
			args[i] = (struct copy_arg){dst + i * slice, src + i * slice, slice, 4};
			if (i == 0 || pthread_create(&tid[i], NULL, copy_main, &args[i]) == 0)
				started++;
			else
				args[i].reps = 0;
		}
		copy_main(&args[0]);
		for (unsigned i = 1; i < n; i++)
			if (args[i].reps)
				pthread_join(tid[i], NULL);
		double dt = now_s() - t0, rate = 0;
		for (unsigned i = 0; i < n; i++)
			rate += (double)args[i].len * args[i].reps;
		rate /= dt;
		if (rate > best)
			best = rate;
		(void)started;
	}
	return best;
}

static int bench_host_limits(struct bench *b)
{
	size_t len = 256u << 20;
	char *src = malloc(len), *dst = malloc(len);

	if (!src || !dst) {
		free(src);
		free(dst);
		return -ENOMEM;
	}
	memset(src, 1, len);
	memset(dst, 2, len);
	b->bw1 = memcpy_rate(dst, src, len, 1);
	b->bwn = memcpy_rate(dst, src, len, b->threads);
	free(src);
	free(dst);
	char note[32];
	snprintf(note, sizeof(note), "%u threads", b->threads);
	be_bench_add(&b->figs, "host memcpy, 1 thread", b->bw1 / 1e9, "GB/s", 0, 0, "1 thread");
	be_bench_add(&b->figs, "host memcpy, all threads", b->bwn / 1e9, "GB/s", 0, 0, note);
	return 0;
}

/* ---- runs through the backend --------------------------------------------------------------- */

static void bench_config(struct vr_config *c, const struct bench *b, uint32_t K, uint32_t nx,
                         uint32_t ny, uint32_t stride, enum cfg_recon_mode mode)
{
	cfg_defaults(c);
	c->backend = !strcmp(b->backend, "cuda")  ? CFG_BACKEND_CUDA
	             : !strcmp(b->backend, "cpu") ? CFG_BACKEND_CPU
	                                          : CFG_BACKEND_AUTO;
	c->cpu.threads = (int)b->threads;
	c->geometry.samples_per_ascan = K;
	c->geometry.sample_type = CFG_SAMPLE_U16;
	c->geometry.ascans_per_bscan = nx;
	c->geometry.bscans_per_volume = ny;
	c->geometry.stride[0] = c->geometry.stride[1] = stride;
	c->geometry.depth_range[0] = 0;
	c->geometry.depth_range[1] = K / 2;
	c->preprocess.zero_pad = 1;
	c->reconstruct.mode = mode;
}

/* Seconds per epoch, serialized (submit, epoch_finish), for at least min_seconds and
 * min_epochs after one warm-up epoch; or a negative errno with the message in err. */
static double run_epochs(struct bench *b, const struct vr_config *c, unsigned min_epochs, char *err,
                         size_t errlen)
{
	struct be_bench_result r;
	int rc = be_bench_run(c, 1, min_epochs, b->min_seconds, false, &r, err, errlen);

	if (rc < 0)
		return rc;
	snprintf(b->device, sizeof(b->device), "%s", r.device);
	return 1.0 / r.epochs_per_s;
}

static int bench_classic(struct bench *b, bool corrections, char *err, size_t errlen)
{
	struct vr_config c;
	const uint32_t K = 2048, nx = 512, ny = 32;

	bench_config(&c, b, K, nx, ny, 1, CFG_RECON_NONE);
	if (corrections) {
		c.preprocess.resample.method = CFG_RS_CUBIC;
		c.preprocess.resample.positions = CFG_RSPOS_POLY;
		c.preprocess.resample.poly[0] = 0;
		c.preprocess.resample.poly[1] = K - 1;
		c.preprocess.resample.poly[2] = 40;
		c.preprocess.resample.poly[3] = -40;
		c.preprocess.dispersion.kind = CFG_DISP_COEFFS;
		c.preprocess.dispersion.coeffs[0] = 20;
		c.preprocess.dispersion.coeffs[1] = -5;
	}
	double spe = run_epochs(b, &c, 3, err, errlen);
	if (spe < 0)
		return (int)spe;
	/* streaming limit: 4096 B in + 1024 B out per A-scan at the all-thread memcpy rate,
	 * which moves (reads and writes) two bytes per byte copied */
	be_bench_add(&b->figs,
	             corrections ? "classic 2048->1024, cubic+dispersion" : "classic 2048->1024",
	             nx * ny / spe, "A-scans/s", 0, 2.0 * b->bwn / (2.0 * K + K / 2.0),
	             "memory streaming of 5120 B/A-scan");
	return 0;
}

static int bench_volrec(struct bench *b, const char *name, uint32_t n, uint32_t K, uint32_t stride,
                        char *err, size_t errlen)
{
	struct vr_config c;

	bench_config(&c, b, K, n, n, stride, CFG_RECON_NONCUMULATIVE);
	double spe = run_epochs(b, &c, 2, err, errlen);
	if (spe < 0)
		return (int)spe;
	/* streaming limit: read B (float) and write u8 once, plus the raw input */
	double bytes = (double)cfg_out_voxels(&c) * 5.0 + (double)n * n * K * 2.0;
	char note[64];
	snprintf(note, sizeof(note), "memory streaming of %.0f MB/epoch", bytes / 1e6);
	struct be_bench_fig *f = be_bench_add(&b->figs, name, spe * 1e3, "ms/epoch", 0,
	                                      bytes / (2.0 * b->bwn / 2.0) * 1e3, note);
	if (f)
		f->lower_is_better = true;
	return 0;
}

/* ---- output ------------------------------------------------------------------------------------ */

static void cpu_model(char *buf, size_t len)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[512];

	snprintf(buf, len, "unknown");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, "model name", 10)) {
			char *p = strchr(line, ':');
			if (p) {
				p += 1 + strspn(p + 1, " \t");
				p[strcspn(p, "\n")] = '\0';
				snprintf(buf, len, "%s", p);
			}
			break;
		}
	}
	fclose(f);
}

/* How close value comes to ref (a limit or a target): 1 = at it, below 1 = short of it. */
static double fig_ratio(double value, double ref, const struct be_bench_fig *g)
{
	return g->lower_is_better ? ref / value : value / ref;
}

static int write_json(const struct bench *b, const char *path, const char *commit)
{
	char host[256] = "unknown", model[256], date[64];
	time_t t = time(NULL);
	struct tm tm;
	FILE *f = fopen(path, "w");

	if (!f)
		return -errno;
	gethostname(host, sizeof(host) - 1);
	cpu_model(model, sizeof(model));
	gmtime_r(&t, &tm);
	strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", &tm);
	fprintf(f, "{\n  \"host\": ");
	be_bench_json_str(f, host);
	fprintf(f, ",\n  \"cpu_model\": ");
	be_bench_json_str(f, model);
	fprintf(f, ",\n  \"date\": \"%s\",\n  \"git_commit\": ", date);
	be_bench_json_str(f, commit);
	fprintf(f, ",\n  \"backend\": ");
	be_bench_json_str(f, b->backend);
	fprintf(f, ",\n  \"device\": ");
	be_bench_json_str(f, b->device);
	fprintf(f, ",\n  \"threads\": %u,\n  \"volrec_version\": \"%s\",\n  \"figures\": [\n",
	        b->threads, VOLREC_VERSION);
	for (unsigned i = 0; i < b->figs.n; i++) {
		const struct be_bench_fig *g = &b->figs.fig[i];
		fprintf(f, "    {\"name\": ");
		be_bench_json_str(f, g->name);
		fprintf(f, ", \"unit\": ");
		be_bench_json_str(f, g->unit);
		fprintf(f, ", \"value\": %.6g", g->value);
		if (g->limit > 0) {
			fprintf(f, ", \"limit\": %.6g, \"limit_is\": ", g->limit);
			be_bench_json_str(f, g->note);
			fprintf(f, ", \"ratio\": %.4f", fig_ratio(g->value, g->limit, g));
		} else if (g->note[0]) {
			fprintf(f, ", \"note\": ");
			be_bench_json_str(f, g->note);
		}
		if (g->target > 0)
			fprintf(f, ", \"target\": %.6g, \"ratio_to_target\": %.4f", g->target,
			        fig_ratio(g->value, g->target, g));
		fprintf(f, "}%s\n", i + 1 < b->figs.n ? "," : "");
	}
	fprintf(f, "  ]\n}\n");
	return fclose(f) ? -errno : 0;
}

static void print_table(const struct bench *b)
{
	printf("\nvolrec bench: %s backend, %s\n\n", b->backend, b->device);
	printf("%-40s %14s %14s %-10s %7s %10s\n", "figure", "value", "limit", "unit", "ratio",
	       "target");
	for (unsigned i = 0; i < b->figs.n; i++) {
		const struct be_bench_fig *g = &b->figs.fig[i];
		char lim[32] = "-", ratio[16] = "-", tgt[32] = "-";
		if (g->limit > 0) {
			snprintf(lim, sizeof(lim), "%.4g", g->limit);
			snprintf(ratio, sizeof(ratio), "%.1f%%",
			         100 * fig_ratio(g->value, g->limit, g));
		}
		if (g->target > 0)
			snprintf(tgt, sizeof(tgt), "%.4g", g->target);
		printf("%-40s %14.4g %14s %-10s %7s %10s\n", g->name, g->value, lim, g->unit, ratio,
		       tgt);
	}
	if (b->cuda)
		printf("\nlimits: PCIe copies at the pinned bandwidths measured above (pipelined: "
		       "H2D "
		       "and D2H at once, serialized: one after the other); targets: DESIGN.md "
		       "section 10\n");
	else
		printf("\nlimits: memory streaming at the all-thread memcpy rate (a memcpy moves "
		       "two "
		       "bytes per byte copied)\n");
}

static void bench_usage(FILE *f)
{
	fprintf(f,
	        "usage: volrec bench [--backend cpu|cuda|auto] [-t THREADS] [-o FILE.json]\n"
	        "                    [--commit ID] [--quick] [--no-medium]\n\n"
	        "Measures, with synthetic inputs already in host memory, the backend that\n"
	        "--backend opens (default cpu; auto: CUDA when a device is present).\n"
	        "CPU:\n"
	        "  host memcpy bandwidth (1 and all threads), the physical limit;\n"
	        "  classic 2048-sample u16 -> 1024 u8 depths, in A-scans/s (plain, and with cubic\n"
	        "  resampling and dispersion);\n"
	        "  VolRec time per epoch: 30x30x2048 stride 3 and 60x60x2048 stride 5.\n"
	        "CUDA (the figures of tests/gpu/gpu_bench):\n"
	        "  pinned H2D, D2H, both ways at once and D2H into registered shm, the limits;\n"
	        "  VolRec at the paper's geometry (60x60x8192 u16, stride 5 -> 300x300x4096 u8)\n"
	        "  and classic (1024x256 A-scans of 2048 u16 -> 1024 u8, mode none): volumes or\n"
	        "  A-scans per second and latency p50/p99, pipelined and serialized.\n"
	        "Prints a table and writes JSON (host, cpu model, date, commit, backend, device).\n"
	        "  -t, --threads N  CPU threads (default all cores)\n"
	        "  --quick          shorter measurements (about 0.5 s each)\n"
	        "  --no-medium      CPU: leave out the 60x60x2048 VolRec case\n"
	        "  --commit ID      git commit recorded in the JSON (default $VOLREC_GIT_COMMIT)\n"
	        "Exit status: 0 done, 1 failure (--backend cuda without a usable device among\n"
	        "them), 2 usage error.\n");
}

static void say_stderr(void *ctx, const char *line)
{
	(void)ctx;
	fprintf(stderr, "volrec bench: %s\n", line);
}

/* Which backend --backend opens here: the one be_open picks for the classic geometry (its
 * message on failure, its note when auto falls back to the CPU). */
static int bench_resolve(struct bench *b, char *err, size_t errlen)
{
	struct vr_config c;
	struct be_backend *be = NULL;
	char note[CFG_ERR_MAX] = "";
	int rc;

	bench_config(&c, b, 2048, 512, 32, 1, CFG_RECON_NONE);
	rc = be_open(&c, &be, note, sizeof(note), err, errlen);
	if (rc < 0)
		return rc;
	if (note[0])
		fprintf(stderr, "volrec bench: %s\n", note);
	b->cuda = !strcmp(be_name(be), "cuda");
	b->gpu_device = c.gpu.device;
	b->backend = b->cuda ? "cuda" : "cpu";
	be_close(be);
	return 0;
}

VR_COMMAND(bench, "measure backend throughput against the hardware limits")
{
	static const struct option longopts[] = {
	        {"backend", required_argument, NULL, 'B'},
	        {"threads", required_argument, NULL, 't'},
	        {"output", required_argument, NULL, 'o'},
	        {"commit", required_argument, NULL, 'C'},
	        {"quick", no_argument, NULL, 'q'},
	        {"no-medium", no_argument, NULL, 'M'},
	        {"help", no_argument, NULL, 'h'},
	        {NULL, 0, NULL, 0},
	};
	struct bench b = {.backend = "cpu", .min_seconds = 3.0};
	const char *json = NULL, *commit = getenv("VOLREC_GIT_COMMIT");
	bool medium = true;
	char err[CFG_ERR_MAX] = "";
	int c, rc;
	long nt = sysconf(_SC_NPROCESSORS_ONLN);

	b.threads = nt > 0 ? (unsigned)(nt > 256 ? 256 : nt) : 1;
	optind = 1;
	while ((c = getopt_long(argc, argv, "t:o:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'B':
			if (strcmp(optarg, "cpu") && strcmp(optarg, "cuda") &&
			    strcmp(optarg, "auto")) {
				fprintf(stderr,
				        "volrec bench: --backend %s: allowed cpu, cuda, auto\n",
				        optarg);
				return VR_EXIT_USAGE;
			}
			b.backend = optarg;
			break;
		case 't': {
			char *end;
			long v = strtol(optarg, &end, 10);
			if (*end || v < 1 || v > 256) {
				fprintf(stderr, "volrec bench: -t %s: allowed 1..256\n", optarg);
				return VR_EXIT_USAGE;
			}
			b.threads = (unsigned)v;
			break;
		}
		case 'o':
			json = optarg;
			break;
		case 'C':
			commit = optarg;
			break;
		case 'q':
			b.min_seconds = 0.5;
			break;
		case 'M':
			medium = false;
			break;
		case 'h':
			bench_usage(stdout);
			return VR_EXIT_OK;
		default:
			bench_usage(stderr);
			return VR_EXIT_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "volrec bench: unexpected argument '%s'\n", argv[optind]);
		return VR_EXIT_USAGE;
	}

	rc = bench_resolve(&b, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "volrec bench: %s\n", err[0] ? err : strerror(-rc));
		return VR_EXIT_FAIL;
	}
	if (b.cuda) {
		rc = be_bench_cuda(b.gpu_device, b.min_seconds, say_stderr, NULL, &b.figs, b.device,
		                   sizeof(b.device), err, sizeof(err));
	} else {
		fprintf(stderr, "volrec bench: host memory bandwidth...\n");
		rc = bench_host_limits(&b);
		if (rc < 0)
			snprintf(err, sizeof(err), "host memory bandwidth: %s", strerror(-rc));
		if (rc == 0) {
			fprintf(stderr, "volrec bench: classic...\n");
			rc = bench_classic(&b, false, err, sizeof(err));
		}
		if (rc == 0)
			rc = bench_classic(&b, true, err, sizeof(err));
		if (rc == 0) {
			fprintf(stderr, "volrec bench: VolRec small...\n");
			rc = bench_volrec(&b, "VolRec 30x30x2048 s3 -> 90x90x1024", 30, 2048, 3,
			                  err, sizeof(err));
		}
		if (rc == 0 && medium) {
			fprintf(stderr, "volrec bench: VolRec medium...\n");
			rc = bench_volrec(&b, "VolRec 60x60x2048 s5 -> 300x300x1024", 60, 2048, 5,
			                  err, sizeof(err));
		}
	}
	if (rc < 0) {
		fprintf(stderr, "volrec bench: %s\n", err[0] ? err : strerror(-rc));
		return VR_EXIT_FAIL;
	}
	print_table(&b);
	if (json) {
		rc = write_json(&b, json, commit && *commit ? commit : "unknown");
		if (rc < 0) {
			fprintf(stderr, "volrec bench: %s: %s\n", json, strerror(-rc));
			return VR_EXIT_FAIL;
		}
		printf("wrote %s\n", json);
	}
	return VR_EXIT_OK;
}
