/* SPDX-License-Identifier: MIT */
/*
 * views_dump VOLUME.u8 Y X Z ZA ZB Y0 X0 Z0 H W DX DY DZ PHI THETA STEP OUTDIR
 * Computes the six views of the u8 volume [Y][X][Z] in VOLUME.u8 with cpu_views_compute and
 * writes OUTDIR/<name>.u8 for each; a rejected parameter prints the message and exits 2.
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

int main(int argc, char **argv)
{
	struct be_view_params p;
	struct be_render_setup r;
	uint8_t *V, *out[BE_VIEW_COUNT];
	char err[256], path[4096];
	int rc = 1;

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
