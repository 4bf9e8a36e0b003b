/* SPDX-License-Identifier: MIT */
/*
 * Partial median benchmark (a benchmark, not a test): line rate of background.mode
 * partial_median against the number of depths that take the median per B-scan (0, 64, 256 and
 * all N/2), as Fig. 3 of Watanabe (J. Biomed. Opt. 17(5) 2012), with bscan_mean beside it,
 * at 1024 A-scans x 1024 samples per B-scan, on the CUDA or the CPU backend, through the
 * pipeline engine as the daemon runs it (bench_run_raw: epoch e+1 submitted while e is in
 * flight, output into registered shared memory). The input makes the count exact:
 * window none and M integer-bin fringes whose amplitude changes from A-scan to A-scan over a
 * weak noise floor; the counts the backend reports are recorded beside each rate. Writes a
 * table and, with --json, a JSON record for bench/results/. Exit 0 measured, 1 failure,
 * 2 usage, 77 CUDA asked for and no device.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>

#include "backend/backend.h"
#include "base/base.h"
#include "config/config.h"
#include "tools/bench/bench.h"

struct pm_case {
	const char *name;
	enum cfg_background mode;
	int lines;        /* fringes with A-scan-dependent amplitude; -1: N/2 (threshold 0) */
	double threshold; /* that selects exactly those depths (see pm_threshold_for) */
};

static void usage(FILE *f)
{
	fprintf(f, "usage: pmedian_bench [--backend cpu|cuda] [--json FILE] [--seconds S]\n"
	           "                     [--bscans N] [--ascans NX] [--samples K] [--device N]\n"
	           "                     [--commit ID]\n"
	           "  line rate of background.mode partial_median against the median depths per\n"
	           "  B-scan (0, 64, 256, N/2) and of bscan_mean; defaults: cuda, 3 s per case,\n"
	           "  16 B-scans of 1024 A-scans x 1024 u16 samples per epoch\n");
}

/* Deterministic xorshift64, as a uniform number in [0, 1). */
static double pm_uniform(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return (double)(*s >> 11) / 9007199254740992.0;
}

/*
 * u16 spectra [ny][nx][K] around 30000: uniform noise of +-20 and `lines` cosines at distinct
 * integer bins between 8 and N/2 - 8, each with an amplitude uniform in [0, 200) and a random
 * phase per A-scan. With window none each fringe stays in its bin, where sigma is about 80
 * times the noise's.
 */
static void pm_fill(uint16_t *raw, uint32_t ny, uint32_t nx, uint32_t K, int lines)
{
	const uint32_t half = K / 2;
	uint64_t s = 0x9e3779b97f4a7c15ull;
	double *acc = malloc(K * sizeof(double)), *ct = malloc(2 * K * sizeof(double));

	if (!acc || !ct) {
		free(acc);
		free(ct);
		return;
	}
	for (uint32_t k = 0; k < K; k++) { /* cos and sin of 2 pi k / K */
		ct[2 * k] = cos(2 * M_PI * k / K);
		ct[2 * k + 1] = sin(2 * M_PI * k / K);
	}
	for (size_t r = 0; r < (size_t)ny * nx; r++) {
		for (uint32_t k = 0; k < K; k++)
			acc[k] = 30000.0 + 40.0 * (pm_uniform(&s) - 0.5);
		for (int m = 0; m < lines; m++) {
			const uint32_t z =
			        8 + (uint32_t)((uint64_t)m * (half - 16) / (uint64_t)lines);
			const double amp = 200.0 * pm_uniform(&s);
			const double ph = 2 * M_PI * pm_uniform(&s);
			const double ca = amp * cos(ph), sa = amp * sin(ph);
			/* amp cos(2 pi z k / K + ph), the angle reduced exactly in integers */
			for (uint32_t k = 0, i = 0; k < K; k++, i = (i + z) % K)
				acc[k] += ca * ct[2 * i] - sa * ct[2 * i + 1];
		}
		for (uint32_t k = 0; k < K; k++)
			raw[r * K + k] = (uint16_t)fmin(fmax(acc[k] + 0.5, 0), 65535);
	}
	free(acc);
	free(ct);
}

/* thresholds: 10 (the default) while the fringes are fewer than half the depths and sigma_bg
 * is the noise; 1 for N/4 fringes, where sigma_bg falls midway between the noise and the
 * weakest fringe; 0 takes every depth */
static const struct pm_case pm_cases[] = {
        {"bscan_mean", CFG_BG_BSCAN_MEAN, 64, 10},
        {"partial_median_0", CFG_BG_PARTIAL_MEDIAN, 0, 10},
        {"partial_median_64", CFG_BG_PARTIAL_MEDIAN, 64, 10},
        {"partial_median_256", CFG_BG_PARTIAL_MEDIAN, 256, 1},
        {"partial_median_all", CFG_BG_PARTIAL_MEDIAN, -1, 0},
};
#define PM_CASES VR_ARRAY_SIZE(pm_cases)

/* What the command line asks for. */
struct pm_opts {
	const char *json, *commit, *backend;
	double seconds;
	long ny, nx, K, dev;
	bool cuda;
};

/* -1 when the options are read into o and in range, else the exit status. */
static int pm_parse_args(int argc, char **argv, struct pm_opts *o)
{
	static const struct option longopts[] = {
	        {"backend", required_argument, NULL, 'b'},
	        {"json", required_argument, NULL, 'j'},
	        {"seconds", required_argument, NULL, 's'},
	        {"bscans", required_argument, NULL, 'y'},
	        {"ascans", required_argument, NULL, 'x'},
	        {"samples", required_argument, NULL, 'k'},
	        {"device", required_argument, NULL, 'd'},
	        {"commit", required_argument, NULL, 'c'},
	        VR_CLI_LONGOPTS_END,
	};
	const struct vr_cli_str strs[] = {{'b', &o->backend}, {'j', &o->json}, {'c', &o->commit}};
	int c;

	while ((c = VR_CLI_GETOPT(argc, argv, "h", longopts, strs)) != -1) {
		char *end = NULL;
		switch (c) {
		case 's':
			o->seconds = strtod(optarg, &end);
			break;
		case 'y':
		case 'x':
		case 'k':
		case 'd':
			*(c == 'y'   ? &o->ny
			  : c == 'x' ? &o->nx
			  : c == 'k' ? &o->K
			             : &o->dev) = strtol(optarg, &end, 10);
			break;
		default:
			return vr_cli_usage(usage, c);
		}
		if (end && (*end || end == optarg)) {
			fprintf(stderr, "pmedian_bench: '%s' is not a number\n", optarg);
			return 2;
		}
	}
	if (optind < argc || (strcmp(o->backend, "cpu") && strcmp(o->backend, "cuda")) ||
	    !(o->seconds > 0 && o->seconds <= 60) || o->ny < 1 || o->ny > 4096 || o->nx < 2 ||
	    o->nx > 8192 || o->K < 64 || o->K > 65536 || o->K % 2 || o->dev < 0) {
		fprintf(stderr, "pmedian_bench: need --backend cpu|cuda, --seconds in (0, 60], "
		                "--bscans 1..4096, --ascans 2..8192, --samples even 64..65536\n");
		return 2;
	}
	o->cuda = !strcmp(o->backend, "cuda");
	return -1;
}

/* The configuration of case pc: its background mode alone, on the bench's geometry. */
static void pm_config(struct vr_config *cfg, const struct pm_opts *o, const struct pm_case *pc)
{
	cfg_defaults(cfg);
	cfg->backend = o->cuda ? CFG_BACKEND_CUDA : CFG_BACKEND_CPU;
	cfg->gpu.device = (int)o->dev;
	cfg->geometry.samples_per_ascan = (uint32_t)o->K;
	cfg->geometry.ascans_per_bscan = (uint32_t)o->nx;
	cfg->geometry.bscans_per_volume = (uint32_t)o->ny;
	cfg->geometry.stride[0] = cfg->geometry.stride[1] = 1;
	cfg->geometry.depth_range[0] = 0;
	cfg->geometry.depth_range[1] = (uint32_t)(o->K / 2);
	cfg->pipeline.ring_bscans = (uint32_t)o->ny;
	cfg->preprocess.background.mode = pc->mode;
	cfg->preprocess.background.threshold = pc->threshold;
	cfg->preprocess.window.type = CFG_WIN_NONE;
	cfg->reconstruct.mode = CFG_RECON_NONE;
	/* preprocessing alone is measured; the default view positions assume a deeper volume
	 * than depth_range [0, N/2) and would make every epoch fail */
	cfg->view.enabled = false;
}

/* Every case measured into res, a row of the table each; -1 when done, else the exit
 * status. */
static int pm_run_cases(const struct pm_opts *o, struct bench_result *res, char *device,
                        size_t devlen)
{
	const int half = (int)(o->K / 2);
	char err[1024] = "";
	uint16_t *data = malloc((size_t)o->ny * o->nx * o->K * sizeof(uint16_t));

	if (!data) {
		fprintf(stderr, "pmedian_bench: out of memory\n");
		return 1;
	}
	printf("%-22s %8s %14s %12s %22s\n", "case", "fringes", "A-scans/s", "epochs/s",
	       "median depths/B-scan");
	for (size_t i = 0; i < PM_CASES; i++) {
		const struct pm_case *pc = &pm_cases[i];
		struct vr_config cfg;
		const int lines = pc->lines < 0 ? (half / 2 < 256 ? half / 2 : 256) : pc->lines;
		if (lines >= half / 2 + 1 && pc->threshold > 1) {
			fprintf(stderr, "pmedian_bench: K = %ld too small for %d fringes\n", o->K,
			        lines);
			free(data);
			return 2;
		}
		pm_config(&cfg, o, pc);
		pm_fill(data, (uint32_t)o->ny, (uint32_t)o->nx, (uint32_t)o->K, lines);
		int rc = bench_run_raw(&cfg, data, 2, 3, o->seconds, 2, &res[i], err, sizeof(err));
		cfg_free(&cfg);
		snprintf(device, devlen, "%s", res[i].device);
		if (rc < 0) {
			fprintf(stderr, "pmedian_bench: %s: %s\n", pc->name, err);
			free(data);
			return 1;
		}
		printf("%-22s %8d %14.0f %12.2f %22.2f\n", pc->name, lines,
		       res[i].epochs_per_s * (double)o->ny * (double)o->nx, res[i].epochs_per_s,
		       res[i].median_depths);
		fflush(stdout);
	}
	free(data);
	return -1;
}

/* The JSON record of the run for bench/results/. */
static int pm_write_json(const struct pm_opts *o, const struct bench_result *res,
                         const char *device)
{
	struct json_object *root = json_object_new_object(), *arr = json_object_new_array();
	char date[64];
	time_t t = time(NULL);
	struct tm tm;

	strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &tm));
	json_object_object_add(root, "benchmark",
	                       json_object_new_string("volrec pmedian_bench (Fig. 3 of "
	                                              "Watanabe 2012)"));
	json_object_object_add(root, "backend", json_object_new_string(o->backend));
	json_object_object_add(root, "device", json_object_new_string(device));
	json_object_object_add(root, "date", json_object_new_string(date));
	json_object_object_add(root, "commit", json_object_new_string(o->commit));
	json_object_object_add(root, "ascans_per_bscan", json_object_new_int64(o->nx));
	json_object_object_add(root, "samples_per_ascan", json_object_new_int64(o->K));
	json_object_object_add(root, "bscans_per_epoch", json_object_new_int64(o->ny));
	json_object_object_add(root, "depths", json_object_new_int64(o->K / 2));
	json_object_object_add(root, "seconds_per_case", json_object_new_double(o->seconds));
	json_object_object_add(root, "note",
	                       json_object_new_string("u16 input, window none, reconstruct.mode "
	                                              "none, through the pipeline engine, "
	                                              "pipelined (epoch e+1 submitted while e is "
	                                              "in flight), u8 output into registered "
	                                              "shared memory"));
	for (size_t i = 0; i < PM_CASES; i++) {
		struct json_object *c = json_object_new_object();
		json_object_object_add(c, "name", json_object_new_string(pm_cases[i].name));
		json_object_object_add(
		        c, "mode", json_object_new_string(cfg_background_name(pm_cases[i].mode)));
		json_object_object_add(c, "threshold",
		                       json_object_new_double(pm_cases[i].threshold));
		json_object_object_add(c, "median_depths_per_bscan",
		                       json_object_new_double(res[i].median_depths));
		json_object_object_add(c, "ascans_per_s",
		                       json_object_new_double(res[i].epochs_per_s * (double)o->ny *
		                                              (double)o->nx));
		json_object_object_add(c, "epochs_per_s",
		                       json_object_new_double(res[i].epochs_per_s));
		json_object_object_add(c, "epochs", json_object_new_int64(res[i].epochs));
		json_object_array_add(arr, c);
	}
	json_object_object_add(root, "cases", arr);
	int rc = json_object_to_file_ext(o->json, root, JSON_C_TO_STRING_PRETTY);
	json_object_put(root);
	if (rc < 0) {
		fprintf(stderr, "pmedian_bench: %s: cannot write\n", o->json);
		return 1;
	}
	printf("wrote %s\n", o->json);
	return 0;
}

int main(int argc, char **argv)
{
	struct pm_opts o = {.commit = "unknown",
	                    .backend = "cuda",
	                    .seconds = 3.0,
	                    .ny = 16,
	                    .nx = 1024,
	                    .K = 1024};
	struct bench_result res[PM_CASES];
	char device[256] = "";
	int rc;

	rc = pm_parse_args(argc, argv, &o);
	if (rc >= 0)
		return rc;
	if (o.cuda && be_cuda_devices() == 0) {
		printf("SKIP: no CUDA device\n");
		return 77;
	}
	rc = pm_run_cases(&o, res, device, sizeof(device));
	if (rc >= 0)
		return rc;
	printf("device: %s\n", device);
	return o.json ? pm_write_json(&o, res, device) : 0;
}
