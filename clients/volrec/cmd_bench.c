/* SPDX-License-Identifier: MIT */
/*
 * `volrec bench`: backend throughput against the physical limit measured in the same run:
 * classic FD-OCT (2048 u16 samples -> 1024 u8 depths) in A-scans/s and the VolRec path in
 * time per epoch at a small and a medium geometry; a table on stdout and a JSON record.
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
#include "commands.h"
#include "config/config.h"

#define BENCH_MAX_FIGS 16

/* One measured figure and the physical limit it is compared with. */
struct bench_fig {
	char name[64];
	char unit[16];
	double value;
	double limit; /* same unit; 0 = none */
	char limit_what[96];
	bool lower_is_better;
};

struct bench {
	struct bench_fig figs[BENCH_MAX_FIGS];
	unsigned nfigs;
	double bw1, bwn; /* host memcpy bytes/s: one thread, all threads */
	unsigned threads;
	char device[256];
	const char *backend;
	double min_seconds; /* per measurement */
};

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static struct bench_fig *add_fig(struct bench *b, const char *name, const char *unit)
{
	struct bench_fig *f = &b->figs[b->nfigs++];
	memset(f, 0, sizeof(*f));
	snprintf(f->name, sizeof(f->name), "%s", name);
	snprintf(f->unit, sizeof(f->unit), "%s", unit);
	return f;
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
	struct bench_fig *f = add_fig(b, "host memcpy, 1 thread", "GB/s");
	f->value = b->bw1 / 1e9;
	f = add_fig(b, "host memcpy, all threads", "GB/s");
	f->value = b->bwn / 1e9;
	snprintf(f->limit_what, sizeof(f->limit_what), "%u threads", b->threads);
	return 0;
}

/* Backend-specific limits (for instance PCIe and device bandwidth of the CUDA backend) are
 * added next to bench_host_limits, under #ifdef VOLREC_HAVE_CUDA, by the backend that has
 * them; the table and the JSON take any number of figures. */

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

/* Runs epochs until min_seconds have passed (at least min_epochs after one warm-up);
 * returns seconds per epoch or a negative errno. */
static double run_epochs(struct bench *b, const struct vr_config *c, unsigned min_epochs, char *err,
                         size_t errlen)
{
	struct be_backend *be = NULL;
	const uint32_t ny = c->geometry.bscans_per_volume;
	size_t bscan = cfg_bscan_bytes(c), nvox = cfg_out_voxels(c);
	void **raw = calloc(ny, sizeof(*raw));
	uint8_t *vol = NULL;
	double result = -ENOMEM;
	int rc;

	if (!raw)
		return -ENOMEM;
	rc = be_open(c, &be, NULL, 0, err, errlen);
	if (rc < 0) {
		free(raw);
		return rc;
	}
	snprintf(b->device, sizeof(b->device), "%s", be->ops->device(be->state));
	for (uint32_t i = 0; i < ny; i++) {
		if (be->ops->host_alloc(be->state, bscan, &raw[i]) < 0)
			goto out;
		uint16_t *s = raw[i];
		uint32_t x = 0x9e3779b9u * (i + 1);
		for (size_t k = 0; k < bscan / 2; k++) {
			x ^= x << 13;
			x ^= x >> 17;
			x ^= x << 5;
			s[k] = (uint16_t)(1000 + (x & 0xfff));
		}
	}
	if (be->ops->host_alloc(be->state, nvox, (void **)&vol) < 0)
		goto out;
	memset(vol, 0, nvox);

	double t0 = 0;
	unsigned done = 0;
	for (uint64_t e = 0;; e++) {
		struct be_output out = {.volume = vol};
		if (e == 1)
			t0 = now_s();
		for (uint32_t i = 0; i < ny; i++) {
			rc = be->ops->bscan_submit(be->state, e, i, raw[i]);
			if (rc < 0) {
				snprintf(err, errlen, "bscan_submit: %s", strerror(-rc));
				result = rc;
				goto out;
			}
		}
		rc = be->ops->epoch_finish(be->state, e, &out, err, errlen);
		if (rc < 0) {
			result = rc;
			goto out;
		}
		if (e >= 1) {
			done++;
			if (done >= min_epochs && now_s() - t0 >= b->min_seconds)
				break;
		}
	}
	result = (now_s() - t0) / done;
out:
	if (be) {
		for (uint32_t i = 0; i < ny; i++)
			be->ops->host_free(be->state, raw[i]);
		be->ops->host_free(be->state, vol);
	}
	free(raw);
	be_close(be);
	return result;
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
	struct bench_fig *f = add_fig(
	        b, corrections ? "classic 2048->1024, cubic+dispersion" : "classic 2048->1024",
	        "A-scans/s");
	f->value = nx * ny / spe;
	/* streaming limit: 4096 B in + 1024 B out per A-scan at the all-thread memcpy rate,
	 * which moves (reads and writes) two bytes per byte copied */
	f->limit = 2.0 * b->bwn / (2.0 * K + K / 2.0);
	snprintf(f->limit_what, sizeof(f->limit_what), "memory streaming of 5120 B/A-scan");
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
	struct bench_fig *f = add_fig(b, name, "ms/epoch");
	f->value = spe * 1e3;
	f->lower_is_better = true;
	/* streaming limit: read B (float) and write u8 once, plus the raw input */
	double bytes = (double)cfg_out_voxels(&c) * 5.0 + (double)n * n * K * 2.0;
	f->limit = bytes / (2.0 * b->bwn / 2.0) * 1e3;
	snprintf(f->limit_what, sizeof(f->limit_what), "memory streaming of %.0f MB/epoch",
	         bytes / 1e6);
	return 0;
}

/* ---- output ------------------------------------------------------------------------------------ */

static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fprintf(f, "\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			fprintf(f, "\\u%04x", *s);
		else
			fputc(*s, f);
	}
	fputc('"', f);
}

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
	json_str(f, host);
	fprintf(f, ",\n  \"cpu_model\": ");
	json_str(f, model);
	fprintf(f, ",\n  \"date\": \"%s\",\n  \"git_commit\": ", date);
	json_str(f, commit);
	fprintf(f, ",\n  \"backend\": ");
	json_str(f, b->backend);
	fprintf(f, ",\n  \"device\": ");
	json_str(f, b->device);
	fprintf(f, ",\n  \"threads\": %u,\n  \"volrec_version\": \"%s\",\n  \"figures\": [\n",
	        b->threads, VOLREC_VERSION);
	for (unsigned i = 0; i < b->nfigs; i++) {
		const struct bench_fig *g = &b->figs[i];
		fprintf(f, "    {\"name\": ");
		json_str(f, g->name);
		fprintf(f, ", \"unit\": ");
		json_str(f, g->unit);
		fprintf(f, ", \"value\": %.6g", g->value);
		if (g->limit > 0) {
			fprintf(f, ", \"limit\": %.6g, \"limit_is\": ", g->limit);
			json_str(f, g->limit_what);
			fprintf(f, ", \"ratio\": %.4f",
			        g->lower_is_better ? g->limit / g->value : g->value / g->limit);
		}
		fprintf(f, "}%s\n", i + 1 < b->nfigs ? "," : "");
	}
	fprintf(f, "  ]\n}\n");
	return fclose(f) ? -errno : 0;
}

static void print_table(const struct bench *b)
{
	printf("\nvolrec bench: %s backend, %s\n\n", b->backend, b->device);
	printf("%-40s %14s %14s %-10s %7s\n", "figure", "value", "limit", "unit", "ratio");
	for (unsigned i = 0; i < b->nfigs; i++) {
		const struct bench_fig *g = &b->figs[i];
		if (g->limit > 0)
			printf("%-40s %14.4g %14.4g %-10s %6.1f%%\n", g->name, g->value, g->limit,
			       g->unit,
			       100 * (g->lower_is_better ? g->limit / g->value
			                                 : g->value / g->limit));
		else
			printf("%-40s %14.4g %14s %-10s %7s\n", g->name, g->value, "-", g->unit,
			       "-");
	}
	printf("\nlimits: memory streaming at the all-thread memcpy rate (a memcpy moves two bytes "
	       "per byte copied)\n");
}

static void bench_usage(FILE *f)
{
	fprintf(f,
	        "usage: volrec bench [--backend cpu|cuda|auto] [-t THREADS] [-o FILE.json]\n"
	        "                    [--commit ID] [--quick] [--no-medium]\n\n"
	        "Measures, with synthetic inputs already in host memory:\n"
	        "  host memcpy bandwidth (1 and all threads), the physical limit;\n"
	        "  classic 2048-sample u16 -> 1024 u8 depths, in A-scans/s (plain, and with cubic\n"
	        "  resampling and dispersion);\n"
	        "  VolRec time per epoch: 30x30x2048 stride 3 and 60x60x2048 stride 5.\n"
	        "Prints a table and writes JSON (host, cpu model, date, commit, backend, device).\n"
	        "  -t, --threads N  CPU threads (default all cores)\n"
	        "  --quick          shorter measurements (about 0.5 s each)\n"
	        "  --commit ID      git commit recorded in the JSON (default $VOLREC_GIT_COMMIT)\n"
	        "Exit status: 0 done, 1 failure, 2 usage error.\n");
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

	fprintf(stderr, "volrec bench: host memory bandwidth...\n");
	rc = bench_host_limits(&b);
	if (rc < 0) {
		fprintf(stderr, "volrec bench: %s\n", strerror(-rc));
		return VR_EXIT_FAIL;
	}
	fprintf(stderr, "volrec bench: classic...\n");
	rc = bench_classic(&b, false, err, sizeof(err));
	if (rc == 0)
		rc = bench_classic(&b, true, err, sizeof(err));
	if (rc == 0) {
		fprintf(stderr, "volrec bench: VolRec small...\n");
		rc = bench_volrec(&b, "VolRec 30x30x2048 s3 -> 90x90x1024", 30, 2048, 3, err,
		                  sizeof(err));
	}
	if (rc == 0 && medium) {
		fprintf(stderr, "volrec bench: VolRec medium...\n");
		rc = bench_volrec(&b, "VolRec 60x60x2048 s5 -> 300x300x1024", 60, 2048, 5, err,
		                  sizeof(err));
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
