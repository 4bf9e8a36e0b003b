/* SPDX-License-Identifier: MIT */
/*
 * docs/algorithms.md §2 on the CPU: interlace L_e at the epoch's scan offset, age map and temporal
 * weights, and the 27-neighbour spatio-temporal convolution, output rows (planes of constant
 * Y) spread over the threads. The Gaussian factorizes into gxy(dx, dy) * gz(dz) and the
 * temporal weight depends on the column only, so each column is first smoothed along z.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/jump.h"
#include "backend/tables.h"
#include "cpu/internal.h"

struct recon_ctx {
	uint32_t rows; /* output rows per item */
	/* the plane reconstructed (docs/algorithms.md §5 step 5): B (interlaced, or the last
	 * output with L_e written), the cumulative output, and where the result goes (NULL: not
	 * wanted) */
	const float *B;
	float *ovol;
	float *full;
	uint8_t *u8;
	const float *L;  /* adaptive: the epoch's low-resolution volume */
	uint32_t ox, oy; /* adaptive: the epoch's scan offset */
	bool adaptive;   /* adaptive or registered: the blend of §2b step 7 */
	bool keep;       /* the output goes to ovol (cumulative: its history; registered: the
	                  * next epoch's reference) */
};

void cpu_current_column(const struct cpu_state *st, const float *L, uint32_t ox, uint32_t oy,
                        uint32_t yy, uint32_t xx, float *c)
{
	const uint32_t Z = st->geo.nz;
	uint32_t y0, y1, x0, x1;
	float ty, tx;

	be_interp_axis(yy, oy, st->geo.sy, st->geo.ny, &y0, &y1, &ty);
	be_interp_axis(xx, ox, st->geo.sx, st->geo.nx, &x0, &x1, &tx);
	const float *c00 = L + ((size_t)y0 * st->geo.nx + x0) * Z;
	const float *c01 = L + ((size_t)y0 * st->geo.nx + x1) * Z;
	const float *c10 = L + ((size_t)y1 * st->geo.nx + x0) * Z;
	const float *c11 = L + ((size_t)y1 * st->geo.nx + x1) * Z;
	const float w00 = (1.0f - ty) * (1.0f - tx), w01 = (1.0f - ty) * tx;
	const float w10 = ty * (1.0f - tx), w11 = ty * tx;

	for (uint32_t z = 0; z < Z; z++)
		c[z] = w00 * c00[z] + w01 * c01[z] + w10 * c10[z] + w11 * c11[z];
}

/* adaptive (docs/algorithms.md §2b): the history estimate res of column (yy, xx) blended
 * with the column's own history sample by beta, then with the linear interpolation of the
 * current epoch (into scratch c) by alpha. */
static void adaptive_blend(const struct cpu_state *st, const struct recon_ctx *ctx, uint32_t yy,
                           uint32_t xx, float *res, float *c)
{
	const uint32_t Z = st->geo.nz;
	const size_t i = (size_t)yy * st->geo.X + xx;
	const float a = st->alpha[i], b = 1.0f - a, bt = st->beta[i], bh = 1.0f - bt;
	const float *m = ctx->B + i * Z;

	cpu_current_column(st, ctx->L, ctx->ox, ctx->oy, yy, xx, c);
	for (uint32_t z = 0; z < Z; z++) {
		float h = bt * m[z] + bh * res[z];
		res[z] = a * h + b * c[z];
	}
}

/* adaptive: the depth-windowed change of column l against column m (docs/algorithms.md §2b
 * step 1): (1/Z) sum over z of the mean of l - m over the window around z, squared. */
static float windowed_change(const float *l, const float *m, uint32_t Z, uint32_t h)
{
	double win = 0.0, acc = 0.0;
	uint32_t lo = 0, hi = 0; /* the window [lo, hi) summed in win */

	for (uint32_t z = 0; z < Z; z++) {
		uint32_t a = z > h ? z - h : 0, b = z + h + 1 < Z ? z + h + 1 : Z;
		while (hi < b) {
			win += (double)(l[hi] - m[hi]);
			hi++;
		}
		while (lo < a) {
			win -= (double)(l[lo] - m[lo]);
			lo++;
		}
		double v = win / (double)(b - a);
		acc += v * v;
	}
	return (float)(acc / (double)Z);
}

/* adaptive: the change measures of low-res sample (y, x) against the history at its
 * full-resolution position, before the interlace overwrites it: d (depth-windowed) as the
 * result, d1 (bin by bin) into *d1. */
static float adaptive_change(const struct cpu_state *st, const float *B, const float *L, uint32_t y,
                             uint32_t x, size_t full, float *d1)
{
	const uint32_t Z = st->geo.nz;
	const float *l = L + ((size_t)y * st->geo.nx + x) * Z, *m = B + full * Z;
	double acc1 = 0.0;

	if (st->E[full] < 0) {
		*d1 = (float)BE_ADAPT_UNKNOWN;
		return (float)BE_ADAPT_UNKNOWN;
	}
	for (uint32_t z = 0; z < Z; z++) {
		double b1 = (double)(l[z] - m[z]);
		acc1 += b1 * b1;
	}
	*d1 = (float)(acc1 / (double)Z);
	return windowed_change(l, m, Z, st->p.live.depth_half_window);
}

static void adaptive_changes(struct cpu_worker *w, size_t item, void *vctx)
{
	struct recon_ctx *ctx = vctx;
	struct cpu_state *st = w->st;
	uint32_t y = (uint32_t)item;

	const size_t n = (size_t)st->geo.ny * st->geo.nx;
	for (uint32_t x = 0; x < st->geo.nx; x++) {
		size_t fy = (size_t)y * st->geo.sy + ctx->oy, fx = (size_t)x * st->geo.sx + ctx->ox;
		size_t c = (size_t)y * st->geo.nx + x;
		st->chg[c] = adaptive_change(st, ctx->B, ctx->L, y, x, fy * st->geo.X + fx,
		                             &st->chg[n + c]);
	}
}

/* adaptive, jump recovery (docs/algorithms.md §2b, "Recovery after a jump"): this epoch's
 * statistics, its changes (st->chg) and its summed A-scan (each row's sum, then the rows' in
 * order, as the CUDA backend sums them), and the decision of backend/jump.h. */
static void jump_detect(struct cpu_state *st, uint64_t e, const float *L)
{
	const uint32_t Z = st->geo.nz;
	const double still_level = be_jump_still_level(st->p.live.tolerance * st->p.live.tolerance);
	double *prev = st->jmean, *cur = st->jmean + Z, *row = st->jmean + 2 * (size_t)Z;
	uint64_t used = 0, known = 0, still = 0;

	for (uint32_t z = 0; z < Z; z++)
		cur[z] = 0.0;
	for (uint32_t y = 0; y < st->geo.ny; y++) {
		for (uint32_t z = 0; z < Z; z++)
			row[z] = 0.0;
		for (uint32_t x = 0; x < st->geo.nx; x++) {
			const size_t c = (size_t)y * st->geo.nx + x;
			if (st->miss[c])
				continue;
			used++;
			for (uint32_t z = 0; z < Z; z++)
				row[z] += (double)L[c * Z + z];
			if (st->chg[c] < (float)BE_ADAPT_UNKNOWN) {
				known++;
				if ((double)st->chg[c] < still_level)
					still++;
			}
		}
		for (uint32_t z = 0; z < Z; z++)
			cur[z] += row[z];
	}
	if (used > 0)
		for (uint32_t z = 0; z < Z; z++)
			cur[z] = be_jump_mean(cur[z], used);
	be_jump_decide(&st->jump, e, cur, prev, Z, st->p.live.depth_half_window, used, known,
	               still);
}

/* adaptive: a change measure at a column, the bilinear interpolation (in double) of rows c0,
 * c1 of the sample grid between columns x0, x1. */
static double change_at(const float *c0, const float *c1, uint32_t x0, uint32_t x1, float tx,
                        float ty)
{
	return (1.0 - ty) * ((1.0 - tx) * c0[x0] + (double)tx * c0[x1]) +
	       (double)ty * ((1.0 - tx) * c1[x0] + (double)tx * c1[x1]);
}

/* z-smoothed copies of column (r, c) of B: sg = sum gz(dz) B[z+dz], s1 = sum B[z+dz]. */
static void smooth_column(const struct cpu_state *st, const float *B, uint32_t r, uint32_t c,
                          float *sg, float *s1)
{
	const uint32_t Z = st->geo.nz;
	const float *b = B + ((size_t)r * st->geo.X + c) * Z;
	const float g1 = st->p.gz[0] / st->p.gz[1];

	if (Z == 1) {
		sg[0] = s1[0] = b[0];
		return;
	}
	sg[0] = b[0] + g1 * b[1];
	s1[0] = b[0] + b[1];
	for (uint32_t z = 1; z + 1 < Z; z++) {
		sg[z] = b[z] + g1 * (b[z - 1] + b[z + 1]);
		s1[z] = b[z] + b[z - 1] + b[z + 1];
	}
	sg[Z - 1] = b[Z - 1] + g1 * b[Z - 2];
	s1[Z - 1] = b[Z - 1] + b[Z - 2];
}

static void fill_ring_row(const struct cpu_state *st, struct cpu_worker *w, const float *B,
                          uint32_t r)
{
	const uint32_t X = st->geo.X, Z = st->geo.nz;
	float *slot = w->ring + (size_t)(r % 3) * X * 2 * Z;

	for (uint32_t c = 0; c < X; c++)
		if (st->tcol[(size_t)r * X + c] > 0.0f)
			smooth_column(st, B, r, c, slot + (size_t)c * 2 * Z,
			              slot + (size_t)c * 2 * Z + Z);
}

/* out[z] = sum over i < n (n >= 1, in order of i) of w[i] * s[i][z], the weights first
 * divided by norm in place. */
static void weighted_sum(float *out, float *w, double norm, const float *const *s, unsigned n,
                         uint32_t Z)
{
	for (unsigned i = 0; i < n; i++)
		w[i] = (float)(w[i] / norm);
	for (uint32_t z = 0; z < Z; z++)
		out[z] = w[0] * s[0][z];
	for (unsigned i = 1; i < n; i++)
		for (uint32_t z = 0; z < Z; z++)
			out[z] += w[i] * s[i][z];
}

static void recon_rows(struct cpu_worker *w, size_t item, void *vctx)
{
	struct recon_ctx *ctx = vctx;
	struct cpu_state *st = w->st;
	const struct cpu_params *p = &st->p;
	const uint32_t Y = st->geo.Y, X = st->geo.X, Z = st->geo.nz;
	const uint32_t y0 = (uint32_t)item * ctx->rows;
	const uint32_t y1 = y0 + ctx->rows < Y ? y0 + ctx->rows : Y;
	const bool cum = ctx->keep, sum = p->live.combine == CFG_COMBINE_SUM;
	float *A = w->acc, *C = w->acc + Z;

	/* rows y0-1 and y0 first, then one more per output row */
	if (y0 > 0)
		fill_ring_row(st, w, ctx->B, y0 - 1);
	fill_ring_row(st, w, ctx->B, y0);
	for (uint32_t yy = y0; yy < y1; yy++) {
		if (yy + 1 < Y)
			fill_ring_row(st, w, ctx->B, yy + 1);
		for (uint32_t xx = 0; xx < X; xx++) {
			const float *sg[9], *s1[9];
			float cg[9], ct[9];
			double G = 0.0, T = 0.0;
			unsigned n = 0;

			for (int dy = -1; dy <= 1; dy++) {
				int64_t r = (int64_t)yy + dy;
				if (r < 0 || r >= Y)
					continue;
				for (int dx = -1; dx <= 1; dx++) {
					int64_t c = (int64_t)xx + dx;
					if (c < 0 || c >= X)
						continue;
					float t = st->tcol[(size_t)r * X + (size_t)c];
					if (!(t > 0.0f))
						continue;
					float *col = w->ring + (size_t)(r % 3) * X * 2 * Z +
					             (size_t)c * 2 * Z;
					float g = p->gxy[(dy + 1) * 3 + dx + 1];
					sg[n] = col;
					s1[n] = col + Z;
					if (sum) {
						cg[n] = g;
						ct[n] = t;
						G += g;
						T += t;
					} else {
						cg[n] = g * t;
						G += (double)g * t;
					}
					n++;
				}
			}

			size_t o = ((size_t)yy * X + xx) * Z;
			float *res = cum ? ctx->ovol + o : (ctx->full ? ctx->full + o : A);
			if (n == 0) {
				memset(res, 0, Z * sizeof(float));
			} else {
				weighted_sum(A, cg, G, sg, n, Z);
				if (sum) {
					weighted_sum(C, ct, T, s1, n, Z);
					for (uint32_t z = 0; z < Z; z++)
						res[z] = 0.5f * (A[z] * st->inv_gz[z] +
						                 C[z] * st->inv_nz[z]);
				} else {
					for (uint32_t z = 0; z < Z; z++)
						res[z] = A[z] * st->inv_gz[z];
				}
			}
			if (ctx->adaptive)
				adaptive_blend(st, ctx, yy, xx, res, C);
			if (cum && ctx->full)
				memcpy(ctx->full + o, res, Z * sizeof(float));
			if (ctx->u8)
				cpu_quantize(ctx->u8 + o, res, Z);
		}
	}
}

/* L (one plane [ny][nx][nz]) written into B at the epoch's positions. */
static void interlace(struct cpu_state *st, float *B, const float *L, uint32_t ox, uint32_t oy)
{
	const uint32_t X = st->geo.X, Z = st->geo.nz;

	for (uint32_t y = 0; y < st->geo.ny; y++)
		for (uint32_t x = 0; x < st->geo.nx; x++) {
			size_t fy = (size_t)y * st->geo.sy + oy, fx = (size_t)x * st->geo.sx + ox;
			memcpy(B + (fy * X + fx) * Z, L + ((size_t)y * st->geo.nx + x) * Z,
			       Z * sizeof(float));
		}
}

/* The convolution of one plane (ctx: B, ovol, full, u8) over the output rows. */
static void recon_plane(struct cpu_state *st, struct recon_ctx *ctx)
{
	const uint32_t Y = st->geo.Y;
	uint32_t target = st->nthreads * 4;

	ctx->rows = (Y + target - 1) / target;
	if (ctx->rows == 0)
		ctx->rows = 1;
	cpu_parallel(st, (Y + ctx->rows - 1) / ctx->rows, recon_rows, ctx);
}

/* The Doppler channel's value v of the reconstructed re and im (§5 step 3), rows of the
 * output as items. */
struct doppler_ctx {
	const float *re, *im;
	float *full;
	uint8_t *u8;
	size_t row; /* voxels a row */
};

static void doppler_rows(struct cpu_worker *w, size_t item, void *vctx)
{
	const struct doppler_ctx *d = vctx;
	const size_t o = item * d->row;

	cpu_fn_doppler_row(d->re + o, d->im + o, d->row, NULL, d->full ? d->full + o : NULL,
	                   d->u8 ? d->u8 + o : NULL);
}

int cpu_register_alloc(struct cpu_state *st, char *err, size_t errlen)
{
	const size_t cols = (size_t)st->geo.Y * st->geo.X, n = (size_t)st->geo.ny * st->geo.nx;

	if (st->rhist)
		return 0;
	st->rsh = calloc(cols, sizeof(float));
	st->rhist = calloc(cols * st->geo.nz, sizeof(float));
	st->rd = calloc(n, sizeof(double));
	st->rw = calloc(n, sizeof(double));
	st->rys = calloc(n, sizeof(uint32_t));
	st->rxs = calloc(n, sizeof(uint32_t));
	if (!st->rsh || !st->rhist || !st->rd || !st->rw || !st->rys || !st->rxs) {
		free(st->rsh);
		free(st->rhist);
		free(st->rd);
		free(st->rw);
		free(st->rys);
		free(st->rxs);
		st->rsh = st->rhist = NULL;
		st->rd = st->rw = NULL;
		st->rys = st->rxs = NULL;
		return vr_err(err, errlen, -ENOMEM,
		              "cpu backend: out of memory for the registered mode's history (%zu "
		              "MB)",
		              (cols * (st->geo.nz + 1) * sizeof(float)) >> 20);
	}
	st->rpose = (struct be_reg_plane){0};
	st->rhave = false;
	return 0;
}

/* registered: column m shifted u bins deeper into h (h[z] = m[z - u], linear between the two
 * bins around z - u, 0 outside the column; docs/algorithms.md §2d step 3). */
static void carry_column(const float *m, float *h, uint32_t Z, double u)
{
	const double fk = floor(u);
	const int64_t k = (int64_t)fk;
	const float f = (float)(u - fk), g = 1.0f - f;

	if (f == 0.0f && k == 0) {
		memcpy(h, m, Z * sizeof(float));
		return;
	}
	for (uint32_t z = 0; z < Z; z++) {
		/* between m[z - k - 1] (weight f) and m[z - k] (weight g) */
		int64_t a = (int64_t)z - k, b = a - 1;
		float va = a >= 0 && a < (int64_t)Z ? m[a] : 0.0f;
		float vb = b >= 0 && b < (int64_t)Z ? m[b] : 0.0f;
		h[z] = f == 0.0f ? va : g * va + f * vb;
	}
}

/* registered: the cumulative plane's shift at column i (Y, X) since it was written. */
static double carried_shift(const struct cpu_state *st, size_t i, uint32_t Y, uint32_t X)
{
	return be_reg_plane_at(&st->rpose, Y, X, st->geo.Y, st->geo.X) - (double)st->rsh[i];
}

/* registered: the axial shift of each new sample of row y against the last output (ovol) at
 * its position (docs/algorithms.md §2d step 1; none before the first output). */
static void register_row(struct cpu_worker *w, size_t item, void *vctx)
{
	struct recon_ctx *ctx = vctx;
	struct cpu_state *st = w->st;
	const uint32_t y = (uint32_t)item, Z = st->geo.nz;

	for (uint32_t x = 0; x < st->geo.nx; x++) {
		const size_t c = (size_t)y * st->geo.nx + x;
		const uint32_t fy = y * st->geo.sy + ctx->oy, fx = x * st->geo.sx + ctx->ox;
		const size_t i = (size_t)fy * st->geo.X + fx;
		double corr = 0.0;
		st->rys[c] = fy;
		st->rxs[c] = fx;
		st->rd[c] = 0.0;
		st->rw[c] = 0.0;
		if (st->miss[c] || !st->rhave)
			continue;
		st->rd[c] = be_reg_shift(ctx->L + c * Z, st->ovol + i * Z, Z, &corr);
		st->rw[c] = corr >= BE_REG_MIN_CORR ? corr : 0.0;
	}
}

/* registered: the history M of row Y carried into this epoch's frame (rhist): each written
 * column shifted in depth by the cumulative plane now minus the plane when it was written
 * (docs/algorithms.md §2d step 3). */
static void carry_row(struct cpu_worker *w, size_t item, void *vctx)
{
	struct cpu_state *st = w->st;
	const uint32_t Y = (uint32_t)item, Z = st->geo.nz;

	(void)vctx;
	for (uint32_t X = 0; X < st->geo.X; X++) {
		const size_t i = (size_t)Y * st->geo.X + X;
		if (st->E[i] >= 0)
			carry_column(st->bvol + i * Z, st->rhist + i * Z, Z,
			             carried_shift(st, i, Y, X));
	}
}

/* registered: estimate this epoch's plane against the last output and carry the history into
 * its frame (docs/algorithms.md §2d steps 1-3). */
static void register_epoch(struct cpu_state *st, struct recon_ctx *ctx)
{
	const size_t n = (size_t)st->geo.ny * st->geo.nx;

	st->rdelta = (struct be_reg_plane){0};
	cpu_parallel(st, st->geo.ny, register_row, ctx);
	be_reg_fit(st->rd, st->rw, st->rys, st->rxs, n, st->geo.Y, st->geo.X, &st->rdelta);
	st->rpose.c += st->rdelta.c;
	st->rpose.ax += st->rdelta.ax;
	st->rpose.ay += st->rdelta.ay;
	cpu_parallel(st, st->geo.Y, carry_row, ctx);
}

/* Interlace the epoch's samples (docs/algorithms.md §2b step 1): B is M (noncumulative) or
 * the previous output (cumulative, after the swap at the end of the last epoch; zeros at
 * first), the functional planes' B likewise; registered, the carried history and the plane's
 * shift at each sampled column too; E the epoch each sampled column was written, -1 where its
 * A-scan is missing (§1.0). */
static void interlace_epoch(struct cpu_state *st, uint64_t e, const float *L,
                            float *const Lf[CPU_FN_PLANES], uint32_t ox, uint32_t oy, bool reg)
{
	const uint32_t X = st->geo.X;

	interlace(st, st->bvol, L, ox, oy);
	if (reg) {
		interlace(st, st->rhist, L, ox, oy);
		for (uint32_t y = 0; y < st->geo.ny; y++)
			for (uint32_t x = 0; x < st->geo.nx; x++) {
				uint32_t fy = y * st->geo.sy + oy, fx = x * st->geo.sx + ox;
				st->rsh[(size_t)fy * X + fx] = (float)be_reg_plane_at(
				        &st->rpose, fy, fx, st->geo.Y, st->geo.X);
			}
	}
	for (uint32_t pl = 0; pl < CPU_FN_PLANES; pl++)
		if (Lf[pl])
			interlace(st, st->bpl[pl], Lf[pl], ox, oy);
	for (uint32_t y = 0; y < st->geo.ny; y++)
		for (uint32_t x = 0; x < st->geo.nx; x++) {
			size_t fy = (size_t)y * st->geo.sy + oy, fx = (size_t)x * st->geo.sx + ox;
			/* a missing A-scan (§1.0) leaves its position without a sample */
			st->E[fy * X + fx] = st->miss[(size_t)y * st->geo.nx + x] ? -1 : (int64_t)e;
		}
}

/* The weights of each column for epoch e (docs/algorithms.md §2.3, §2b): tcol the temporal
 * weight, and adaptive alpha and beta from the change measures interpolated at the column;
 * columns written at or after since count as unchanged. */
static void column_weights(struct cpu_state *st, uint64_t e, uint32_t ox, uint32_t oy,
                           bool adaptive, int64_t since)
{
	const struct cpu_params *p = &st->p;
	const uint32_t X = st->geo.X, Y = st->geo.Y, S = st->geo.S;
	const double k2 = p->live.tolerance * p->live.tolerance,
	             ks2 = p->live.speckle_tolerance * p->live.speckle_tolerance;
	const size_t nlow = (size_t)st->geo.ny * st->geo.nx;

	for (uint32_t y = 0; y < Y; y++) {
		uint32_t y0 = 0, y1 = 0, x0, x1;
		float ty = 0.0f, tx;
		if (adaptive)
			be_interp_axis(y, oy, st->geo.sy, st->geo.ny, &y0, &y1, &ty);
		for (uint32_t x = 0; x < X; x++) {
			size_t i = (size_t)y * X + x;
			float t = 0.0f;
			double D = 0.0, D1 = 0.0;
			if (adaptive) {
				const float *c0 = st->chg + (size_t)y0 * st->geo.nx;
				const float *c1 = st->chg + (size_t)y1 * st->geo.nx;
				be_interp_axis(x, ox, st->geo.sx, st->geo.nx, &x0, &x1, &tx);
				D = change_at(c0, c1, x0, x1, tx, ty);
				D1 = change_at(c0 + nlow, c1 + nlow, x0, x1, tx, ty);
				if (st->E[i] >= since)
					D = D1 = 0.0;
				st->alpha[i] = (float)exp(-D / k2);
				st->beta[i] = 0.0f;
			}
			if (st->E[i] >= 0) {
				double age = (double)((int64_t)e - st->E[i]);
				double tw =
				        be_temporal_weight(p->live.temporal, S, p->live.tau, age);
				if (adaptive) {
					tw *= exp(-D * age / ((double)S * k2));
					if (ks2 > 0.0)
						st->beta[i] =
						        (float)exp(-D1 * age / ((double)S * ks2));
				}
				t = (float)tw;
			}
			st->tcol[i] = t;
		}
	}
}

/* The axial normalizations at each depth: 1 / the sum of gz over the valid dz, 1 / their
 * number. */
static void depth_norms(struct cpu_state *st)
{
	const float g1 = st->p.gz[0] / st->p.gz[1];

	for (uint32_t z = 0; z < st->geo.nz; z++) {
		unsigned nv = 1 + (z > 0) + (z + 1 < st->geo.nz);
		st->inv_gz[z] = (float)(1.0 / (1.0 + (double)g1 * (nv - 1)));
		st->inv_nz[z] = 1.0f / (float)nv;
	}
}

/* The channels other than the structure with the structure's E, t, g and valid neighbours
 * (docs/algorithms.md §5 step 5): angiography's plane into its channel, Doppler's Re and Im
 * then its v. */
static void recon_channels(struct cpu_state *st, const float *L, float *const Lf[CPU_FN_PLANES],
                           const struct be_output *out, uint32_t ox, uint32_t oy, bool cum)
{
	const size_t fc = st->geo.full_count;

	for (uint32_t pl = 0; pl < CPU_FN_PLANES; pl++) {
		if (!Lf[pl])
			continue;
		struct recon_ctx c = {.B = st->bpl[pl],
		                      .ovol = st->opl[pl],
		                      .L = L,
		                      .ox = ox,
		                      .oy = oy,
		                      .keep = cum};
		const int ac = st->geo.chan[CFG_CH_ANGIO];
		if (pl == CPU_PL_ANGIO) {
			c.full = out->full ? out->full + (size_t)ac * fc : NULL;
			c.u8 = out->volume ? out->volume + (size_t)ac * fc : NULL;
		} else {
			c.full = st->dres[pl - CPU_PL_DRE];
		}
		recon_plane(st, &c);
	}
	if (Lf[CPU_PL_DRE]) {
		const size_t dc = (size_t)st->geo.chan[CFG_CH_DOPPLER];
		struct doppler_ctx d = {.re = st->dres[0],
		                        .im = st->dres[1],
		                        .full = out->full ? out->full + dc * fc : NULL,
		                        .u8 = out->volume ? out->volume + dc * fc : NULL,
		                        .row = (size_t)st->geo.X * st->geo.nz};
		cpu_parallel(st, st->geo.Y, doppler_rows, &d);
	}
}

/* Cumulative: this epoch's outputs become the next epoch's B. */
static void swap_history(struct cpu_state *st)
{
	float *t = st->bvol;
	st->bvol = st->ovol;
	st->ovol = t;
	for (uint32_t pl = 0; pl < CPU_FN_PLANES; pl++) {
		t = st->bpl[pl];
		st->bpl[pl] = st->opl[pl];
		st->opl[pl] = t;
	}
}

void cpu_recon_epoch(struct cpu_state *st, uint64_t e, const float *L,
                     float *const Lf[CPU_FN_PLANES], const struct be_output *out)
{
	const struct cpu_params *p = &st->p;
	const size_t fc = st->geo.full_count;
	const int sc = st->geo.chan[CFG_CH_STRUCTURE];
	uint32_t ox, oy;

	vr_scan_offset(e, st->geo.sx, st->geo.sy, &ox, &oy);
	struct recon_ctx ctx = {.B = st->bvol,
	                        .ovol = st->ovol,
	                        .full = out->full && sc >= 0 ? out->full + (size_t)sc * fc : NULL,
	                        .u8 = out->volume && sc >= 0 ? out->volume + (size_t)sc * fc : NULL,
	                        .L = L,
	                        .ox = ox,
	                        .oy = oy};
	const bool reg = p->live.mode == CFG_RECON_REGISTERED;
	const bool adaptive = p->live.mode == CFG_RECON_ADAPTIVE || reg;
	const bool cum = p->live.mode == CFG_RECON_CUMULATIVE;
	ctx.adaptive = adaptive;
	ctx.keep = cum || reg;

	/* registered: the history carried into this epoch's frame takes M's place */
	if (reg) {
		register_epoch(st, &ctx);
		ctx.B = st->rhist;
	}

	/* adaptive: compare the new samples with the history they replace (and, for the jump
	 * recovery, the epoch with the last) */
	const bool jr = adaptive && p->live.jump_recovery;
	if (adaptive)
		cpu_parallel(st, st->geo.ny, adaptive_changes, &ctx);
	if (jr)
		jump_detect(st, e, L);
	/* columns rescanned since a move detected within the last cycle hold the scene as it is
	 * now: their own samples count as unchanged */
	const int64_t since = jr ? be_jump_since(&st->jump, e, st->geo.S) : INT64_MAX;

	interlace_epoch(st, e, L, Lf, ox, oy, reg);
	column_weights(st, e, ox, oy, adaptive, since);
	depth_norms(st);

	/* the structure: always when cumulative (its history) or adaptive (its weights) */
	if (sc >= 0 || cum || adaptive)
		recon_plane(st, &ctx);
	if (reg)
		st->rhave = true;
	recon_channels(st, L, Lf, out, ox, oy, cum);
	if (cum)
		swap_history(st);
}
