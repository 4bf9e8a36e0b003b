/* SPDX-License-Identifier: MIT */
/*
 * `volrec bench`: throughput of the pipeline engine and its backend against the physical limit
 * measured in the same run, over the cases of tools/bench/cases.c. On the CPU: host memcpy, classic
 * FD-OCT in A-scans/s and VolRec time per epoch; on CUDA the suite of tools/bench/bench.c (pinned
 * copy bandwidths, the paper and classic cases pipelined). A table on stdout and a JSON record.
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
#include "base/base.h"
#include "config/config.h"
#include "tools/bench/bench.h"
#include "tools/process.h"

struct bench {
	struct bench_figs figs;
	double bw1, bwn; /* host memcpy bytes/s: one thread, all threads */
	unsigned threads;
	char device[256];
	const char *backend; /* asked for, then the one that ran */
	double min_seconds;  /* per measurement */
	bool cuda;           /* the CUDA suite ran */
	int gpu_device;      /* its device (gpu.device of the defaults) */
};

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
		double t0 = vr_mono_s();
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
		double dt = vr_mono_s() - t0, rate = 0;
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
	bench_add(&b->figs, "host memcpy, 1 thread", b->bw1 / 1e9, "GB/s", 0, 0, "1 thread");
	bench_add(&b->figs, "host memcpy, all threads", b->bwn / 1e9, "GB/s", 0, 0, note);
	return 0;
}

/* ---- runs through the backend --------------------------------------------------------------- */

static enum cfg_backend bench_backend(const struct bench *b)
{
	return !strcmp(b->backend, "cuda")  ? CFG_BACKEND_CUDA
	       : !strcmp(b->backend, "cpu") ? CFG_BACKEND_CPU
	                                    : CFG_BACKEND_AUTO;
}

/* Seconds per epoch of a case through the engine, one epoch at a time, for at least
 * min_seconds and min_epochs after one warm-up epoch; or a negative errno with the message in
 * err. */
static double run_case(struct bench *b, const struct bench_case *bc, unsigned min_epochs, char *err,
                       size_t errlen)
{
	struct bench_result r;
	struct vr_config c;
	int rc;

	bench_case_config(bc, bench_backend(b), &c);
	c.cpu.threads = (int)b->threads;
	rc = bench_run(&c, 1, min_epochs, b->min_seconds, 1, &r, err, errlen);
	cfg_free(&c);
	if (rc < 0)
		return rc;
	snprintf(b->device, sizeof(b->device), "%s", r.device);
	return 1.0 / r.epochs_per_s;
}

static int bench_classic(struct bench *b, const char *name, char *err, size_t errlen)
{
	const struct bench_case *bc = bench_case_find(name);
	const double K = bc->K;
	double spe = run_case(b, bc, 3, err, errlen);

	if (spe < 0)
		return (int)spe;
	/* streaming limit: 2K B in + K/2 B out per A-scan at the all-thread memcpy rate,
	 * which moves (reads and writes) two bytes per byte copied */
	bench_add(&b->figs, bc->title, bc->nx * bc->ny / spe, "A-scans/s", 0,
	          2.0 * b->bwn / (2.0 * K + K / 2.0), "memory streaming of 5120 B/A-scan");
	return 0;
}

static int bench_volrec(struct bench *b, const char *name, char *err, size_t errlen)
{
	const struct bench_case *bc = bench_case_find(name);
	struct vr_config c;
	double spe = run_case(b, bc, 2, err, errlen), bytes;
	struct bench_fig *f;
	char note[64];

	if (spe < 0)
		return (int)spe;
	/* streaming limit: read B (float) and write u8 once, plus the raw input */
	bench_case_config(bc, CFG_BACKEND_CPU, &c);
	bytes = (double)cfg_out_voxels(&c) * 5.0 + (double)bc->nx * bc->ny * bc->K * 2.0;
	cfg_free(&c);
	snprintf(note, sizeof(note), "memory streaming of %.0f MB/epoch", bytes / 1e6);
	f = bench_add(&b->figs, bc->title, spe * 1e3, "ms/epoch", 0,
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
static double fig_ratio(double value, double ref, const struct bench_fig *g)
{
	return g->lower_is_better ? ref / value : value / ref;
}

static int write_json(const struct bench *b, const char *path, const char *commit)
{
	char host[256] = "unknown", model[256], date[64];
	struct json_object *root = json_object_new_object(), *arr = json_object_new_array();
	time_t t = time(NULL);
	struct tm tm;
	int rc;

	gethostname(host, sizeof(host) - 1);
	cpu_model(model, sizeof(model));
	gmtime_r(&t, &tm);
	strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", &tm);
	json_object_object_add(root, "host", json_object_new_string(host));
	json_object_object_add(root, "cpu_model", json_object_new_string(model));
	json_object_object_add(root, "date", json_object_new_string(date));
	json_object_object_add(root, "git_commit", json_object_new_string(commit));
	json_object_object_add(root, "backend", json_object_new_string(b->backend));
	json_object_object_add(root, "device", json_object_new_string(b->device));
	json_object_object_add(root, "threads", json_object_new_int64(b->threads));
	json_object_object_add(root, "volrec_version", json_object_new_string(VOLREC_VERSION));
	for (unsigned i = 0; i < b->figs.n; i++) {
		const struct bench_fig *g = &b->figs.fig[i];
		struct json_object *f = json_object_new_object();

		json_object_object_add(f, "name", json_object_new_string(g->name));
		json_object_object_add(f, "unit", json_object_new_string(g->unit));
		json_object_object_add(f, "value", bench_json_num(g->value, false));
		if (g->limit > 0) {
			json_object_object_add(f, "limit", bench_json_num(g->limit, false));
			json_object_object_add(f, "limit_is", json_object_new_string(g->note));
			json_object_object_add(
			        f, "ratio", bench_json_num(fig_ratio(g->value, g->limit, g), true));
		} else if (g->note[0]) {
			json_object_object_add(f, "note", json_object_new_string(g->note));
		}
		if (g->target > 0) {
			json_object_object_add(f, "target", bench_json_num(g->target, false));
			json_object_object_add(
			        f, "ratio_to_target",
			        bench_json_num(fig_ratio(g->value, g->target, g), true));
		}
		json_object_array_add(arr, f);
	}
	json_object_object_add(root, "figures", arr);
	rc = json_object_to_file_ext(path, root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED);
	json_object_put(root);
	return rc < 0 ? -EIO : 0;
}

static void print_table(const struct bench *b)
{
	printf("\nvolrec bench: %s backend, %s\n\n", b->backend, b->device);
	printf("%-40s %14s %14s %-10s %7s %10s\n", "figure", "value", "limit", "unit", "ratio",
	       "target");
	for (unsigned i = 0; i < b->figs.n; i++) {
		const struct bench_fig *g = &b->figs.fig[i];
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
		       "H2D and D2H at once, serialized: one after the other); "
		       "targets: the cases'\n");
	else
		printf("\nlimits: memory streaming at the all-thread memcpy rate (a memcpy moves "
		       "two bytes per byte copied)\n");
}

static void bench_usage(FILE *f)
{
	fprintf(f,
	        "usage: volrec bench [--backend cpu|cuda|auto] [-t THREADS] [-o FILE.json]\n"
	        "                    [--commit ID] [--quick] [--no-medium]\n"
	        "       volrec bench --print-case NAME\n\n"
	        "Measures, with synthetic inputs already in host memory, the pipeline engine on\n"
	        "the backend --backend opens (default cpu; auto: CUDA when a device is present);\n"
	        "the cases are those of e2e_bench (tools/bench/cases.c).\n"
	        "CPU:\n"
	        "  host memcpy bandwidth (1 and all threads), the physical limit;\n"
	        "  classic 2048-sample u16 -> 1024 u8 depths, 1024x64 A-scans per epoch, in\n"
	        "  A-scans/s (background, window, dispersion; and with cubic resampling);\n"
	        "  VolRec time per epoch: 30x30x2048 stride 3 and 60x60x2048 stride 5.\n"
	        "CUDA (the figures of gpu_bench):\n"
	        "  pinned H2D, D2H, both ways at once and D2H into registered shm, the limits;\n"
	        "  VolRec at the paper's geometry (60x60x8192 u16, stride 5 -> 300x300x4096 u8)\n"
	        "  and classic (1024x64 A-scans of 2048 u16 -> 1024 u8, mode none): volumes or\n"
	        "  A-scans per second and latency p50/p99, pipelined and serialized.\n"
	        "Prints a table and writes JSON (host, cpu model, date, commit, backend, device).\n"
	        "  -t, --threads N  CPU threads (default all cores)\n"
	        "  --quick          shorter measurements (about 0.5 s each)\n"
	        "  --no-medium      CPU: leave out the 60x60x2048 VolRec case\n"
	        "  --commit ID      git commit recorded in the JSON (default $VOLREC_GIT_COMMIT)\n"
	        "  --print-case NAME  print the case NAME of tools/bench/cases.c as JSON (its\n"
	        "                   configuration keys, end-to-end run and targets) and exit,\n"
	        "                   for the benchmarks in Python; an unknown NAME lists them\n"
	        "Exit status: 0 done, 1 failure (--backend cuda without a usable device among\n"
	        "them), 2 usage error.\n");
}

/* --print-case NAME: the case as JSON on stdout; a usage error listing the cases when no
 * case has that name. */
static int print_case(const char *name)
{
	const struct bench_case *c = bench_case_find(name);
	struct json_object *o;

	if (!c) {
		fprintf(stderr, "volrec bench: --print-case %s: no such case (cases:", name);
		for (unsigned i = 0; i < bench_ncases; i++)
			fprintf(stderr, " %s", bench_cases[i].name);
		fprintf(stderr, ")\n");
		return VR_EXIT_USAGE;
	}
	o = bench_case_json(c);
	if (!o) {
		fprintf(stderr, "volrec bench: --print-case %s: %s\n", name, strerror(ENOMEM));
		return VR_EXIT_FAIL;
	}
	printf("%s\n",
	       json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
	                                                 JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(o);
	return fflush(stdout) == 0 ? VR_EXIT_OK : VR_EXIT_FAIL;
}

static void say_stderr(void *ctx, const char *line)
{
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

	bench_case_config(bench_case_find("tiny"), bench_backend(b), &c);
	rc = be_open(&c, &be, note, sizeof(note), err, errlen);
	cfg_free(&c);
	if (rc < 0)
		return rc;
	if (note[0])
		fprintf(stderr, "volrec bench: %s\n", note);
	b->cuda = (be_caps(be) & BE_CAP_DEVICE) != 0;
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
	        {"print-case", required_argument, NULL, 'P'},
	        VR_CLI_LONGOPTS_END,
	};
	struct bench b = {.backend = "cpu", .min_seconds = 3.0};
	const char *json = NULL, *commit = getenv("VOLREC_GIT_COMMIT"), *print = NULL;
	bool medium = true;
	char err[CFG_ERR_MAX] = "";
	int c, rc;
	long nt = sysconf(_SC_NPROCESSORS_ONLN);
	uint64_t v;

	b.threads = nt > 0 ? (unsigned)(nt > 256 ? 256 : nt) : 1;
	const struct vr_cli_str strs[] = {{'o', &json}, {'C', &commit}, {'P', &print}};
	optind = 1;
	while ((c = VR_CLI_GETOPT(argc, argv, "t:o:h", longopts, strs)) != -1) {
		switch (c) {
		case 'B':
			if (proc_backend_arg("bench", optarg) < 0)
				return VR_EXIT_USAGE;
			b.backend = optarg;
			break;
		case 't':
			if (vr_cli_u64("volrec bench", "-t", optarg, 1, 256, "1 to 256", &v))
				return VR_EXIT_USAGE;
			b.threads = (unsigned)v;
			break;
		case 'q':
			b.min_seconds = 0.5;
			break;
		case 'M':
			medium = false;
			break;
		default:
			return vr_cli_usage(bench_usage, c);
		}
	}
	if (vr_cli_args_done("volrec bench", argc, argv))
		return VR_EXIT_USAGE;
	if (print)
		return print_case(print);

	rc = bench_resolve(&b, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "volrec bench: %s\n", err[0] ? err : strerror(-rc));
		return VR_EXIT_FAIL;
	}
	if (b.cuda) {
		rc = bench_cuda(b.gpu_device, b.min_seconds, say_stderr, NULL, &b.figs, b.device,
		                sizeof(b.device), err, sizeof(err));
	} else {
		fprintf(stderr, "volrec bench: host memory bandwidth...\n");
		rc = bench_host_limits(&b);
		if (rc < 0)
			snprintf(err, sizeof(err), "host memory bandwidth: %s", strerror(-rc));
		if (rc == 0) {
			fprintf(stderr, "volrec bench: classic...\n");
			rc = bench_classic(&b, "classic-2048", err, sizeof(err));
		}
		if (rc == 0)
			rc = bench_classic(&b, "classic-2048-corrected", err, sizeof(err));
		if (rc == 0) {
			fprintf(stderr, "volrec bench: VolRec small...\n");
			rc = bench_volrec(&b, "volrec-small", err, sizeof(err));
		}
		if (rc == 0 && medium) {
			fprintf(stderr, "volrec bench: VolRec medium...\n");
			rc = bench_volrec(&b, "volrec-medium", err, sizeof(err));
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
