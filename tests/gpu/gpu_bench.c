/* SPDX-License-Identifier: MIT */
/*
 * Benchmark of the CUDA backend (a benchmark, not a test): runs be_bench_cuda (backend/bench.c,
 * the same measurement `volrec bench --backend cuda` makes: pinned copy bandwidths as the
 * physical limits, then VolRec at the paper's geometry and classic 2048 -> 1024, pipelined and
 * serialized) and prints its table and JSON. Exit 0 measured, 1 failure, 2 usage, 77 no CUDA
 * device.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/bench.h"

static void say_stdout(void *ctx, const char *line)
{
	(void)ctx;
	printf("%s\n", line);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	const char *json = NULL, *commit = "unknown";
	double seconds = 3.0;
	int dev = 0;
	char err[1024] = "", devname[256] = "";
	static struct be_bench_figs figs;
	int rc;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json") && i + 1 < argc)
			json = argv[++i];
		else if (!strcmp(argv[i], "--commit") && i + 1 < argc)
			commit = argv[++i];
		else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
			seconds = atof(argv[++i]);
		else if (!strcmp(argv[i], "--device") && i + 1 < argc)
			dev = atoi(argv[++i]);
		else {
			fprintf(stderr,
			        "usage: gpu_bench [--json FILE] [--commit ID] [--seconds S] "
			        "[--device N]\n");
			return 2;
		}
	}
	if (!(seconds > 0) || seconds > 60) {
		fprintf(stderr, "gpu_bench: --seconds %g: allowed (0, 60]\n", seconds);
		return 2;
	}
	rc = be_bench_cuda(dev, seconds, say_stdout, NULL, &figs, devname, sizeof(devname), err,
	                   sizeof(err));
	if (rc == -ENODEV) {
		printf("SKIP: no CUDA device\n");
		return 77;
	}
	if (rc < 0) {
		fprintf(stderr, "gpu_bench: %s\n", err);
		return 1;
	}

	/* table */
	printf("\n%-36s %14s %-10s %12s %12s %8s %8s\n", "figure", "value", "unit", "target",
	       "limit", "/limit", "/target");
	for (unsigned i = 0; i < figs.n; i++) {
		const struct be_bench_fig *f = &figs.fig[i];
		printf("%-36s %14.4g %-10s %12.4g %12.4g %8.3f %8.3f\n", f->name, f->value, f->unit,
		       f->target, f->limit, f->limit > 0 ? f->value / f->limit : 0.0,
		       f->target > 0 ? f->value / f->target : 0.0);
	}

	if (json) {
		FILE *f = fopen(json, "w");
		char date[64];
		time_t t = time(NULL);
		struct tm tm;
		if (!f) {
			fprintf(stderr, "gpu_bench: %s: %s\n", json, strerror(errno));
			return 1;
		}
		strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &tm));
		fprintf(f, "{\n  \"benchmark\": \"volrec gpu_bench\",\n  \"device\": ");
		be_bench_json_str(f, devname);
		fprintf(f, ",\n  \"date\": \"%s\",\n  \"commit\": ", date);
		be_bench_json_str(f, commit);
		fprintf(f, ",\n  \"seconds_per_figure\": %g,\n  \"figures\": [\n", seconds);
		for (unsigned i = 0; i < figs.n; i++) {
			const struct be_bench_fig *g = &figs.fig[i];
			fprintf(f, "    {\"name\": \"%s\", \"value\": %.6g, \"unit\": \"%s\", ",
			        g->name, g->value, g->unit);
			fprintf(f, "\"target\": %.6g, \"limit\": %.6g, \"ratio_to_limit\": %.4f, ",
			        g->target, g->limit, g->limit > 0 ? g->value / g->limit : 0.0);
			fprintf(f, "\"ratio_to_target\": %.4f, \"note\": ",
			        g->target > 0 ? g->value / g->target : 0.0);
			be_bench_json_str(f, g->note);
			fprintf(f, "}%s\n", i + 1 < figs.n ? "," : "");
		}
		fprintf(f, "  ]\n}\n");
		if (fclose(f) != 0) {
			fprintf(stderr, "gpu_bench: writing %s: %s\n", json, strerror(errno));
			return 1;
		}
		printf("wrote %s\n", json);
	}
	return 0;
}
