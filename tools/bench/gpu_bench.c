/* SPDX-License-Identifier: MIT */
/*
 * Benchmark of the CUDA backend (a benchmark, not a test): runs bench_cuda (tools/bench/bench.c, the
 * same measurement `volrec bench --backend cuda` makes: pinned copy bandwidths as the physical
 * limits, then the cases `paper` and `classic-2048` through the pipeline engine, pipelined and
 * serialized) and prints its table and JSON; --functional: the functional OCT case instead
 * (bench_cuda_functional, its bandwidths first); with --devices, also the paper case over several
 * devices (bench_cuda_devices: host memory bandwidth, each link's limit, per-device and total
 * rates). Exit 0 measured, 1 failure, 2 usage, 77 no CUDA device.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/base.h"
#include "tools/bench/bench.h"

static void say_stdout(void *ctx, const char *line)
{
	printf("%s\n", line);
	fflush(stdout);
}

static int write_json(const char *path, const char *devname, const char *commit, double seconds,
                      const struct bench_figs *figs)
{
	struct json_object *root = json_object_new_object(), *arr = json_object_new_array();
	char date[64];
	time_t t = time(NULL);
	struct tm tm;
	int rc;

	strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &tm));
	json_object_object_add(root, "benchmark", json_object_new_string("volrec gpu_bench"));
	json_object_object_add(root, "device", json_object_new_string(devname));
	json_object_object_add(root, "date", json_object_new_string(date));
	json_object_object_add(root, "commit", json_object_new_string(commit));
	json_object_object_add(root, "seconds_per_figure", bench_json_num(seconds, false));
	for (unsigned i = 0; i < figs->n; i++) {
		const struct bench_fig *g = &figs->fig[i];
		struct json_object *f = json_object_new_object();

		json_object_object_add(f, "name", json_object_new_string(g->name));
		json_object_object_add(f, "value", bench_json_num(g->value, false));
		json_object_object_add(f, "unit", json_object_new_string(g->unit));
		json_object_object_add(f, "target", bench_json_num(g->target, false));
		json_object_object_add(f, "limit", bench_json_num(g->limit, false));
		json_object_object_add(
		        f, "ratio_to_limit",
		        bench_json_num(g->limit > 0 ? g->value / g->limit : 0, true));
		json_object_object_add(
		        f, "ratio_to_target",
		        bench_json_num(g->target > 0 ? g->value / g->target : 0, true));
		json_object_object_add(f, "note", json_object_new_string(g->note));
		json_object_array_add(arr, f);
	}
	json_object_object_add(root, "figures", arr);
	rc = json_object_to_file_ext(path, root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED);
	json_object_put(root);
	return rc < 0 ? -EIO : 0;
}

int main(int argc, char **argv)
{
	const char *json = NULL, *commit = "unknown";
	double seconds = 3.0;
	int dev = 0, devs[CFG_GPU_DEVICES_MAX];
	unsigned ndevs = 0;
	bool functional_only = false;
	char err[1024] = "", devname[256] = "";
	static struct bench_figs figs;
	int rc;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json") && i + 1 < argc)
			json = argv[++i];
		else if (!strcmp(argv[i], "--commit") && i + 1 < argc)
			commit = argv[++i];
		else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
			seconds = atof(argv[++i]);
		else if (!strcmp(argv[i], "--functional"))
			functional_only = true;
		else if (!strcmp(argv[i], "--device") && i + 1 < argc)
			dev = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--devices") && i + 1 < argc) {
			/* gpu.devices: comma-separated ordinals */
			i++;
			if (vr_parse_ordinals(argv[i], 255, devs, CFG_GPU_DEVICES_MAX, &ndevs)) {
				fprintf(stderr,
				        "gpu_bench: --devices %s: expected up to %d device "
				        "ordinals "
				        "0-255 separated by commas\n",
				        argv[i], CFG_GPU_DEVICES_MAX);
				return 2;
			}
		} else {
			fprintf(stderr,
			        "usage: gpu_bench [--json FILE] [--commit ID] [--seconds S] "
			        "[--device N] [--devices D0,D1,...] [--functional]\n"
			        "  --functional: only the functional OCT case (and its "
			        "bandwidths)\n");
			return 2;
		}
	}
	if (!(seconds > 0) || seconds > 60) {
		fprintf(stderr, "gpu_bench: --seconds %g: allowed (0, 60]\n", seconds);
		return 2;
	}
	/* --functional: the functional OCT case (output.channels, docs/gpu.md) alone */
	if (functional_only)
		rc = bench_cuda_functional(dev, seconds, say_stdout, NULL, &figs, devname,
		                           sizeof(devname), err, sizeof(err));
	else
		rc = bench_cuda(dev, seconds, say_stdout, NULL, &figs, devname, sizeof(devname),
		                err, sizeof(err));
	if (rc == -ENODEV || rc == -ENOTSUP) {
		printf("SKIP: %s\n", err);
		return 77;
	}
	if (rc == 0 && ndevs && !functional_only)
		rc = bench_cuda_devices(devs, ndevs, seconds, say_stdout, NULL, &figs, err,
		                        sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "gpu_bench: %s\n", err);
		return 1;
	}

	printf("\n%-36s %14s %-10s %12s %12s %8s %8s\n", "figure", "value", "unit", "target",
	       "limit", "/limit", "/target");
	for (unsigned i = 0; i < figs.n; i++) {
		const struct bench_fig *f = &figs.fig[i];

		printf("%-36s %14.4g %-10s %12.4g %12.4g %8.3f %8.3f\n", f->name, f->value, f->unit,
		       f->target, f->limit, f->limit > 0 ? f->value / f->limit : 0.0,
		       f->target > 0 ? f->value / f->target : 0.0);
	}
	if (json) {
		if (write_json(json, devname, commit, seconds, &figs) < 0) {
			fprintf(stderr, "gpu_bench: writing %s failed\n", json);
			return 1;
		}
		printf("wrote %s\n", json);
	}
	return 0;
}
