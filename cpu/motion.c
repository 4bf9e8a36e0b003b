/* SPDX-License-Identifier: MIT */
/*
 * reconstruct.mode compensated on the CPU (docs/algorithms.md §2c): the host estimator of
 * backend/motion.c gives the epoch's pose and where each history epoch's samples lie now;
 * each output column is the kriging combination of its nearest compensated samples
 * (be_motion_column), and the registration's reference is the same combination without the
 * newest epochs, in depth bands.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/tables.h"
#include "cpu/internal.h"

struct motion_ctx {
	const struct be_output *out;
	const float *L;
	uint32_t ox, oy;
};

int cpu_motion_alloc(struct cpu_state *st, char *err, size_t errlen)
{
	if (st->motion)
		return 0;
	const struct be_motion_geom g =
	        be_motion_geom_of(st->geo.nx, st->geo.ny, st->geo.sx, st->geo.sy, st->geo.nz);
	struct be_motion *m = be_motion_create(&g);
	uint32_t slots = m ? be_motion_slots(m) : 0;
	float *hist =
	        m ? calloc((size_t)slots * st->geo.ny * st->geo.nx * st->geo.nz, sizeof(float))
	          : NULL;
	float *ref = calloc((size_t)st->geo.Y * st->geo.X * BE_MOTION_NB, sizeof(float));
	float *eb = calloc((size_t)(slots ? slots : 1) * st->geo.ny * st->geo.nx * BE_MOTION_NB,
	                   sizeof(float));
	struct be_motion_entry *en = calloc(slots ? slots : 1, sizeof(*en));
	double *prof = calloc(st->geo.nz, sizeof(double));

	if (!m || !hist || !ref || !eb || !en || !prof) {
		be_motion_destroy(m);
		free(hist);
		free(ref);
		free(eb);
		free(en);
		free(prof);
		return vr_err(err, errlen, -ENOMEM,
		              "cpu backend: out of memory for the compensated mode's history (%u "
		              "epochs of %ux%ux%u)",
		              BE_MOTION_H * st->geo.S, st->geo.nx, st->geo.ny, st->geo.nz);
	}
	st->motion = m;
	st->mhist = hist;
	st->mref = ref;
	st->meb = eb;
	st->ment = en;
	st->mprof = prof;
	return 0;
}

void cpu_motion_free(struct cpu_state *st)
{
	be_motion_destroy(st->motion);
	free(st->mhist);
	free(st->mref);
	free(st->meb);
	free(st->ment);
	free(st->mprof);
	st->motion = NULL;
}

static int motion_bands(void *vctx, double dz, float *Be)
{
	const struct cpu_state *st = vctx;
	const struct be_motion_geom g =
	        be_motion_geom_of(st->geo.nx, st->geo.ny, st->geo.sx, st->geo.sy, st->geo.nz);

	be_motion_bands(&g, st->mcur, dz, Be);
	return 0;
}

/* Column (yy, xx) from entries en[0..ne) into res (docs/algorithms.md §2c): the kriging
 * combination, clamped to [0, 1], blended by the pick's a with the newest epoch's
 * interpolation (cur: scratch for it). */
static void column(const struct cpu_state *st, const struct motion_ctx *ctx,
                   const struct be_motion_geom *g, uint32_t ne, uint32_t yy, uint32_t xx,
                   float *res, float *cur)
{
	const size_t vol = (size_t)st->geo.ny * st->geo.nx * st->geo.nz;
	struct be_motion_pick pk;

	be_motion_column(g, st->ment, ne, yy, xx, &pk);
	if (pk.a < 1.0f)
		cpu_current_column(st, ctx->L, ctx->ox, ctx->oy, yy, xx, cur);
	if (pk.n == 0) {
		memcpy(res, cur, st->geo.nz * sizeof(float));
		return;
	}
	const float a = pk.a, b = 1.0f - a;
	for (uint32_t z = 0; z < st->geo.nz; z++) {
		float s = 0.0f;
		for (uint32_t i = 0; i < pk.n; i++) {
			const struct be_motion_entry *e = &st->ment[pk.entry[i]];
			const float *l =
			        st->mhist + e->slot * vol + (size_t)pk.node[i] * st->geo.nz;
			s += pk.w[i] * be_motion_shifted(e, l, z, st->geo.nz);
		}
		/* kriging weights may be negative: clamped to the normalized range */
		s = fminf(fmaxf(s, 0.0f), 1.0f);
		res[z] = a < 1.0f ? a * s + b * cur[z] : s;
	}
}

/* The reference bands of column (yy, xx) from the entry bands (be_motion_ref_column); the
 * newest epoch's interpolation from its own entry's bands (the last entry: dz = 0). */
static void ref_column(const struct cpu_state *st, const struct motion_ctx *ctx,
                       const struct be_motion_geom *g, uint32_t yy, uint32_t xx, float *ob)
{
	const size_t nodes = (size_t)st->geo.ny * st->geo.nx;
	struct be_motion_pick pk;
	double cb[BE_MOTION_NB] = {0};

	be_motion_column(g, st->ment, st->mnref, yy, xx, &pk);
	if (pk.n == 0 || pk.a < 1.0f) {
		const float *b0 = st->meb + (size_t)(st->mne - 1) * nodes * BE_MOTION_NB;
		uint32_t y0, y1, x0, x1;
		float ty, tx;
		be_interp_axis(yy, ctx->oy, st->geo.sy, st->geo.ny, &y0, &y1, &ty);
		be_interp_axis(xx, ctx->ox, st->geo.sx, st->geo.nx, &x0, &x1, &tx);
		be_motion_current_bands(b0 + ((size_t)y0 * st->geo.nx + x0) * BE_MOTION_NB,
		                        b0 + ((size_t)y0 * st->geo.nx + x1) * BE_MOTION_NB,
		                        b0 + ((size_t)y1 * st->geo.nx + x0) * BE_MOTION_NB,
		                        b0 + ((size_t)y1 * st->geo.nx + x1) * BE_MOTION_NB, ty, tx,
		                        cb);
	}
	be_motion_ref_column(&pk, st->meb, nodes, cb, ob);
}

static void motion_rows(struct cpu_worker *w, size_t item, void *vctx)
{
	const struct motion_ctx *ctx = vctx;
	const struct cpu_state *st = w->st;
	const uint32_t X = st->geo.X, Z = st->geo.nz, yy = (uint32_t)item;
	const struct be_motion_geom g =
	        be_motion_geom_of(st->geo.nx, st->geo.ny, st->geo.sx, st->geo.sy, st->geo.nz);
	float *A = w->acc, *cur = w->acc + 2 * (size_t)Z;

	for (uint32_t xx = 0; xx < X; xx++) {
		size_t o = ((size_t)yy * X + xx) * Z;
		float *res = ctx->out->full ? ctx->out->full + o : A;
		column(st, ctx, &g, st->mne, yy, xx, res, cur);
		if (ctx->out->volume)
			cpu_quantize(ctx->out->volume + o, res, Z);
		float *ob = st->mref + ((size_t)yy * X + xx) * BE_MOTION_NB;
		if (st->mnref > 0) {
			/* the registration's reference, from the entry bands */
			ref_column(st, ctx, &g, yy, xx, ob);
			continue;
		}
		/* before there are enough entries: the output itself, in bands */
		for (uint32_t b = 0; b < BE_MOTION_NB; b++) {
			uint32_t z0 = b * Z / BE_MOTION_NB, z1 = (b + 1) * Z / BE_MOTION_NB;
			double s = 0.0;
			for (uint32_t z = z0; z < z1; z++)
				s += res[z];
			ob[b] = z1 > z0 ? (float)(s / (double)(z1 - z0)) : 0.0f;
		}
	}
}

/* The entry bands of entry item (docs/algorithms.md §2c, "Reference"). */
static void motion_entry_bands(struct cpu_worker *w, size_t item, void *vctx)
{
	const struct cpu_state *st = w->st;
	const struct be_motion_geom g =
	        be_motion_geom_of(st->geo.nx, st->geo.ny, st->geo.sx, st->geo.sy, st->geo.nz);
	const struct be_motion_entry *e = &st->ment[item];
	const size_t vol = (size_t)st->geo.ny * st->geo.nx * st->geo.nz;

	be_motion_entry_bands(&g, st->mhist + e->slot * vol, e,
	                      st->meb + item * (size_t)st->geo.ny * st->geo.nx * BE_MOTION_NB);
}

int cpu_motion_epoch(struct cpu_state *st, uint64_t e, const float *L, const struct be_output *out,
                     char *err, size_t errlen)
{
	const struct be_motion_geom g =
	        be_motion_geom_of(st->geo.nx, st->geo.ny, st->geo.sx, st->geo.sy, st->geo.nz);
	const size_t vol = (size_t)st->geo.ny * st->geo.nx * st->geo.nz;
	uint32_t ox, oy, slot;
	int rc;

	vr_scan_offset(e, st->geo.sx, st->geo.sy, &ox, &oy);
	be_motion_profile(&g, L, st->mprof);
	st->mcur = L;
	rc = be_motion_epoch(st->motion, ox, oy, st->mprof, motion_bands, st, &slot, st->ment,
	                     &st->mne, &st->mnref);
	if (rc < 0)
		return vr_err(err, errlen, rc,
		              "cpu backend: compensated mode: pose estimate failed");
	memcpy(st->mhist + slot * vol, L, vol * sizeof(float));

	struct motion_ctx ctx = {.out = out, .L = L, .ox = ox, .oy = oy};
	if (st->mnref > 0) /* every entry's: the last one's (dz = 0) for the fallback */
		cpu_parallel(st, st->mne, motion_entry_bands, NULL);
	cpu_parallel(st, st->geo.Y, motion_rows, &ctx);
	be_motion_set_reference(st->motion, st->mref);
	return 0;
}
