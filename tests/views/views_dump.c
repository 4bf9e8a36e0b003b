/* SPDX-License-Identifier: MIT */
/*
 * views_dump VOLUME.u8 Y X Z ZA ZB Y0 X0 Z0 H W DX DY DZ PHI THETA STEP OUTDIR [MAX_SIDE max|mean]
 * Computes the views of the u8 volume [Y][X][Z] in VOLUME.u8 with cpu_views_compute (the
 * reduced volume when MAX_SIDE is given) and writes OUTDIR/<name>.u8 for each; a rejected
 * parameter prints the message and exits 2.
 * views_dump --volume-time VOLUME.u8 Y X Z MAX_SIDE max|mean REPEATS OUT.u8
 * Times the reduced volume alone (bench/volume_view_bench.py): one JSON line with the fastest
 * and the median of REPEATS runs, the reduced volume written to OUT.u8.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <volrec/protocol.h>

#include "cpu/internal.h"

static int read_all(const char *path, uint8_t *buf, size_t n)
{
	FILE *f = fopen(path, "rb");
	size_t got;

	if (!f)
		return -errno;
	got = fread(buf, 1, n, f);
	fclose(f);
	return got == n ? 0 : -EIO;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static int volume_time(int argc, char **argv)
{
	struct be_view_params p;
	uint64_t *ns;
	uint8_t *V, *out;
	uint32_t f[3], r[3];
	int repeats, rc = 1;
	FILE *o;

	if (argc != 10 || (strcmp(argv[7], "max") && strcmp(argv[7], "mean"))) {
		fprintf(stderr, "usage: views_dump --volume-time VOLUME Y X Z MAX_SIDE max|mean "
		                "REPEATS OUT\n");
		return 2;
	}
	memset(&p, 0, sizeof(p));
	p.Y = (uint32_t)strtoul(argv[3], NULL, 10);
	p.X = (uint32_t)strtoul(argv[4], NULL, 10);
	p.Z = (uint32_t)strtoul(argv[5], NULL, 10);
	p.volume_max_side = (uint32_t)strtoul(argv[6], NULL, 10);
	p.volume_reduce = strcmp(argv[7], "mean") ? VOLREC_REDUCE_MAX : VOLREC_REDUCE_MEAN;
	repeats = atoi(argv[8]);
	if (!p.Y || !p.X || !p.Z || !p.volume_max_side || p.volume_max_side > VOLREC_VOLUME_MAX ||
	    repeats < 1) {
		fprintf(stderr, "views_dump: sizes >= 1, MAX_SIDE 1..%d, REPEATS >= 1\n",
		        VOLREC_VOLUME_MAX);
		return 2;
	}
	be_volume_dims(&p, f, r);
	V = malloc((size_t)p.Y * p.X * p.Z);
	out = malloc(be_view_size(&p, BE_VIEW_VOLUME));
	ns = calloc((size_t)repeats, sizeof(*ns));
	if (!V || !out || !ns || read_all(argv[2], V, (size_t)p.Y * p.X * p.Z) < 0) {
		fprintf(stderr, "views_dump: cannot read %s\n", argv[2]);
		goto out;
	}
	for (int i = 0; i < repeats; i++) {
		uint64_t t0 = vr_mono_ns();

		cpu_volume_reduce(V, &p, out);
		ns[i] = vr_mono_ns() - t0;
	}
	qsort(ns, (size_t)repeats, sizeof(*ns), cmp_u64);
	o = fopen(argv[9], "wb");
	if (!o || fwrite(out, 1, be_view_size(&p, BE_VIEW_VOLUME), o) !=
	                  be_view_size(&p, BE_VIEW_VOLUME)) {
		fprintf(stderr, "views_dump: cannot write %s\n", argv[9]);
		if (o)
			fclose(o);
		goto out;
	}
	fclose(o);
	printf("{\"shape\": [%u, %u, %u], \"blocks\": [%u, %u, %u], \"reduced\": [%u, %u, %u], "
	       "\"reduce\": \"%s\", \"repeats\": %d, \"min_ms\": %.3f, \"median_ms\": %.3f}\n",
	       p.Y, p.X, p.Z, f[0], f[1], f[2], r[0], r[1], r[2], argv[7], repeats, ns[0] / 1e6,
	       ns[repeats / 2] / 1e6);
	rc = 0;
out:
	free(V);
	free(out);
	free(ns);
	return rc;
}

int main(int argc, char **argv)
{
	struct be_view_params p;
	struct be_render_setup r;
	uint8_t *V, *out[BE_VIEW_COUNT];
	char err[256], path[4096];
	int rc = 1;

	if (argc > 1 && !strcmp(argv[1], "--volume-time"))
		return volume_time(argc, argv);
	if (argc != 19 && argc != 21) {
		fprintf(stderr,
		        "usage: views_dump VOLUME Y X Z ZA ZB Y0 X0 Z0 H W DX DY DZ PHI THETA "
		        "STEP OUTDIR [VOLUME_MAX_SIDE max|mean]\n");
		return 2;
	}
	memset(&p, 0, sizeof(p));
	p.Y = (uint32_t)strtoul(argv[2], NULL, 10);
	p.X = (uint32_t)strtoul(argv[3], NULL, 10);
	p.Z = (uint32_t)strtoul(argv[4], NULL, 10);
	p.slab[0] = (uint32_t)strtoul(argv[5], NULL, 10);
	p.slab[1] = (uint32_t)strtoul(argv[6], NULL, 10);
	for (int a = 0; a < 3; a++)
		p.position[a] = (uint32_t)strtoul(argv[7 + a], NULL, 10);
	p.render_h = (uint32_t)strtoul(argv[10], NULL, 10);
	p.render_w = (uint32_t)strtoul(argv[11], NULL, 10);
	for (int a = 0; a < 3; a++)
		p.spacing[a] = strtod(argv[12 + a], NULL);
	p.angles_deg[0] = strtod(argv[15], NULL);
	p.angles_deg[1] = strtod(argv[16], NULL);
	p.step = strtod(argv[17], NULL);
	if (argc == 21) {
		p.volume_max_side = (uint32_t)strtoul(argv[19], NULL, 10);
		if (strcmp(argv[20], "max") && strcmp(argv[20], "mean")) {
			fprintf(stderr, "views_dump: reduce %s: max or mean\n", argv[20]);
			return 2;
		}
		p.volume_reduce = strcmp(argv[20], "mean") ? VOLREC_REDUCE_MAX : VOLREC_REDUCE_MEAN;
	}
	if (be_view_check(&p, err, sizeof(err)) < 0) {
		fprintf(stderr, "%s\n", err);
		return 2;
	}
	be_render_setup(&p, &r);
	V = malloc((size_t)p.Y * p.X * p.Z);
	if (!V || read_all(argv[1], V, (size_t)p.Y * p.X * p.Z) < 0) {
		fprintf(stderr, "views_dump: cannot read %s\n", argv[1]);
		free(V);
		return 1;
	}
	for (int v = 0; v < BE_VIEW_COUNT; v++)
		out[v] = malloc(be_view_size(&p, (enum be_view)v));
	cpu_views_compute(V, &p, &r, out);
	for (int v = 0; v < BE_VIEW_COUNT; v++) {
		FILE *f;

		snprintf(path, sizeof(path), "%s/%s.u8", argv[18], be_view_name((enum be_view)v));
		f = fopen(path, "wb");
		if (!f || fwrite(out[v], 1, be_view_size(&p, (enum be_view)v), f) !=
		                  be_view_size(&p, (enum be_view)v)) {
			fprintf(stderr, "views_dump: cannot write %s\n", path);
			if (f)
				fclose(f);
			goto out;
		}
		fclose(f);
	}
	rc = 0;
out:
	for (int v = 0; v < BE_VIEW_COUNT; v++)
		free(out[v]);
	free(V);
	return rc;
}
