/* SPDX-License-Identifier: MIT */
/*
 * Motion-compensated reconstruction (reconstruct.mode compensated, docs/algorithms.md §2c):
 * the backend-independent part. The host estimates the rigid pose of every epoch (rotation
 * about the depth axis, lateral and axial shift) by registering the new low-resolution samples
 * against the previous output, keeps the poses of the last H epochs of every interlacing
 * phase, and tells the backend, per epoch, where each history epoch's samples now lie
 * (be_motion_entry). Each output column is then the ordinary-kriging combination of the
 * nearest compensated samples (be_motion_column, the same code on the host and the device).
 */
#ifndef VOLREC_BACKEND_MOTION_H
#define VOLREC_BACKEND_MOTION_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define BE_MOTION_HD __host__ __device__
#else
#define BE_MOTION_HD
#endif

#define BE_MOTION_H      2   /* epochs of history per interlacing phase */
#define BE_MOTION_M      20  /* samples per column at most */
#define BE_MOTION_R      2.0 /* ... within this distance (full-resolution pitches) */
#define BE_MOTION_ELL    1.3 /* Gaussian correlation length of the kriging (pitches) */
#define BE_MOTION_NUGGET 0.1 /* its nugget */
#define BE_MOTION_NB     8   /* depth bands of the registration */
#define BE_MOTION_BLUR   0.8 /* lateral blur of the registration's reference (pitches) */
#define BE_MOTION_EXCL   4   /* newest epochs left out of the reference */
#define BE_MOTION_WARM   5   /* phases seen before the lateral registration starts */
#define BE_MOTION_NAX    4   /* epochs whose mean A-scans make the axial estimate */
#define BE_MOTION_ZR     6   /* axial search range (bins) */
#define BE_MOTION_RESET  3.0 /* residual factor over its median that drops the history */
#define BE_MOTION_GA     0.5 /* alpha-beta gains of the pose prediction */
#define BE_MOTION_GB     0.05
#define BE_MOTION_STILL  0.01 /* stillness: bands' change over a cycle / their spread */

struct be_motion_pose {
	double th;     /* rotation about the depth axis (rad) */
	double tx, ty; /* lateral shift (full-resolution pixels) */
	double tz;     /* axial shift (bins, tissue moved deeper for > 0) */
};

/* Where the samples of one history epoch lie now, for the pose of this epoch: history point
 * h maps to the current frame as R(-phi)(h - hx, hy) + (px, py), current point p to the
 * history frame as R(phi)(p - (px, py)) + (hx, hy), with c = cos(phi), s = sin(phi), phi the
 * history epoch's rotation minus the current one; lab coordinates are centred (column X is
 * at X + 0.5 - Xn / 2). Its samples are shifted in depth by dz = tz(now) - tz(then):
 * k = floor(dz), fa = dz - k, fb = 1 - fa (docs/algorithms.md §2c). */
struct be_motion_entry {
	uint32_t ox, oy; /* the epoch's scan offset */
	uint32_t slot;   /* where the backend keeps its low-resolution volume */
	int32_t k;
	float fa, fb;
	double c, s, hx, hy, px, py;
};

struct be_motion_geom {
	uint32_t nx, ny, sx, sy, X, Y, Z;
};

/* The geometry of nx x ny samples at stride sx x sy, Z depths. */
static inline struct be_motion_geom be_motion_geom_of(uint32_t nx, uint32_t ny, uint32_t sx,
                                                      uint32_t sy, uint32_t Z)
{
	struct be_motion_geom g;

	g.nx = nx;
	g.ny = ny;
	g.sx = sx;
	g.sy = sy;
	g.X = nx * sx;
	g.Y = ny * sy;
	g.Z = Z;
	return g;
}

/* The samples one column combines: n <= BE_MOTION_M, each an entry index, a low-resolution
 * A-scan index (y * nx + x) and its kriging weight; a, the weight of their combination
 * against the newest epoch's interpolation (1 where a sample lies well inside the cut, 0
 * where none lies inside: n = 0). */
struct be_motion_pick {
	uint32_t n;
	float a;
	uint32_t entry[BE_MOTION_M];
	uint32_t node[BE_MOTION_M];
	float w[BE_MOTION_M];
};

/* Solve a x = b for the n x n matrix a (row-major, overwritten; b overwritten by x) by
 * Gaussian elimination with partial pivoting, in double. \return false when singular. */
BE_MOTION_HD static inline bool be_motion_solve(double *a, double *b, uint32_t n)
{
	for (uint32_t c = 0; c < n; c++) {
		uint32_t p = c;
		for (uint32_t r = c + 1; r < n; r++)
			if (fabs(a[r * n + c]) > fabs(a[p * n + c]))
				p = r;
		if (!(fabs(a[p * n + c]) > 0.0))
			return false;
		if (p != c) {
			for (uint32_t j = c; j < n; j++) {
				double t = a[c * n + j];
				a[c * n + j] = a[p * n + j];
				a[p * n + j] = t;
			}
			double t = b[c];
			b[c] = b[p];
			b[p] = t;
		}
		for (uint32_t r = c + 1; r < n; r++) {
			double f = a[r * n + c] / a[c * n + c];
			if (f == 0.0)
				continue;
			for (uint32_t j = c + 1; j < n; j++)
				a[r * n + j] -= f * a[c * n + j];
			b[r] -= f * b[c];
		}
	}
	/* from the last unknown back, each row subtracting the known ones from the last back
	 * (so that a device can hand each unknown to every row above as soon as it is known) */
	for (uint32_t c = n; c-- > 0;) {
		double v = b[c];
		for (uint32_t j = n; --j > c;)
			v -= a[c * n + j] * b[j];
		b[c] = v / a[c * n + c];
	}
	return true;
}

/* Taper of a sample at distance u (in units of the column's cut distance): 1 up to 0.8,
 * then (1 - v^2)^2 with v = (u - 0.8) / 0.2, 0 from 1 on. */
BE_MOTION_HD static inline double be_motion_taper(double u)
{
	if (u <= 0.8)
		return 1.0;
	if (u >= 1.0)
		return 0.0;
	double v = (u - 0.8) / 0.2, t = 1.0 - v * v;
	return t * t;
}

/* The sample of entry e whose tissue point now lies nearest to the lab point (Px, Py) of a
 * column: the point carried into the entry's frame, its nearest node of the entry's offset
 * (clamped to the grid), that node carried back to now (*qx, *qy; its index *node).
 * \return its distance to (Px, Py). */
BE_MOTION_HD static inline double be_motion_candidate(const struct be_motion_geom *g,
                                                      const struct be_motion_entry *e, double Px,
                                                      double Py, double *qx, double *qy,
                                                      uint32_t *node)
{
	const double hX = (double)g->X / 2.0, hY = (double)g->Y / 2.0;
	double vx = Px - e->px, vy = Py - e->py;
	double gx = e->c * vx - e->s * vy + e->hx + hX - 0.5;
	double gy = e->s * vx + e->c * vy + e->hy + hY - 0.5;
	double fx = rint((gx - (double)e->ox) / (double)g->sx);
	double fy = rint((gy - (double)e->oy) / (double)g->sy);
	fx = fx >= 0.0 ? (fx > (double)(g->nx - 1) ? (double)(g->nx - 1) : fx) : 0.0;
	fy = fy >= 0.0 ? (fy > (double)(g->ny - 1) ? (double)(g->ny - 1) : fy) : 0.0;
	uint32_t ix = (uint32_t)fx, iy = (uint32_t)fy;
	double ux = (double)(ix * g->sx + e->ox) + 0.5 - hX - e->hx;
	double uy = (double)(iy * g->sy + e->oy) + 0.5 - hY - e->hy;
	*qx = e->c * ux + e->s * uy + e->px;
	*qy = -e->s * ux + e->c * uy + e->py;
	*node = iy * g->nx + ix;
	return sqrt((*qx - Px) * (*qx - Px) + (*qy - Py) * (*qy - Py));
}

/*
 * The samples of column (yc, xc) and their weights (docs/algorithms.md §2c): from each of the
 * ne entries, the sample of its epoch whose tissue point now lies nearest to the column (the
 * column mapped into the epoch's frame, the nearest node of its scan offset, that node mapped
 * back); of those the BE_MOTION_M nearest closer than the cut D = min(BE_MOTION_R, sx / 2,
 * sy / 2, the distance of the (M + 1)-th nearest) (ties: the earlier entry), with their
 * ordinary-kriging weights under the correlation exp(-d^2 / (2 ell^2)) and a nugget that
 * grows to infinity as a sample nears the cut (BE_MOTION_NUGGET / taper(d / D)), so that the
 * weights change continuously with the poses. All in double, the weights stored as float.
 */
BE_MOTION_HD static inline void be_motion_column(const struct be_motion_geom *g,
                                                 const struct be_motion_entry *en, uint32_t ne,
                                                 uint32_t yc, uint32_t xc,
                                                 struct be_motion_pick *pk)
{
	const double hX = (double)g->X / 2.0, hY = (double)g->Y / 2.0;
	const double Px = (double)xc + 0.5 - hX, Py = (double)yc + 0.5 - hY;
	const double i2l = 1.0 / (2.0 * BE_MOTION_ELL * BE_MOTION_ELL);
	double rc = BE_MOTION_R;
	double d[BE_MOTION_M + 1], cx[BE_MOTION_M + 1], cy[BE_MOTION_M + 1];
	uint32_t en_i[BE_MOTION_M + 1], nd_i[BE_MOTION_M + 1];
	uint32_t n = 0;

	/* beyond half a stride the nearest node of an epoch jumps: the cut stays inside */
	rc = 0.5 * g->sx < rc ? 0.5 * g->sx : rc;
	rc = 0.5 * g->sy < rc ? 0.5 * g->sy : rc;
	for (uint32_t j = 0; j < ne; j++) {
		double qx, qy;
		uint32_t node;
		const double dd = be_motion_candidate(g, &en[j], Px, Py, &qx, &qy, &node);
		if (!(dd < rc))
			continue;
		if (n == BE_MOTION_M + 1 && !(dd < d[n - 1]))
			continue;
		uint32_t i = n < BE_MOTION_M + 1 ? n++ : n - 1;
		while (i > 0 && dd < d[i - 1]) {
			d[i] = d[i - 1];
			cx[i] = cx[i - 1];
			cy[i] = cy[i - 1];
			en_i[i] = en_i[i - 1];
			nd_i[i] = nd_i[i - 1];
			i--;
		}
		d[i] = dd;
		cx[i] = qx;
		cy[i] = qy;
		en_i[i] = j;
		nd_i[i] = node;
	}
	/* the cut: the (M + 1)-th nearest when there is one; the samples the taper leaves */
	const double D = n == BE_MOTION_M + 1 ? d[BE_MOTION_M] : rc;
	double tp[BE_MOTION_M], rest = 1.0;
	uint32_t k = 0;
	for (uint32_t i = 0; i < n && i < BE_MOTION_M; i++) {
		double t = be_motion_taper(d[i] / D);
		if (!(t > 0.0))
			continue;
		d[k] = d[i];
		cx[k] = cx[i];
		cy[k] = cy[i];
		pk->entry[k] = en_i[i];
		pk->node[k] = nd_i[i];
		tp[k] = t;
		rest *= 1.0 - t;
		k++;
	}
	n = k;
	pk->n = n;
	pk->a = (float)(1.0 - rest);
	if (n == 0)
		return;

	double a[(BE_MOTION_M + 1) * (BE_MOTION_M + 1)], b[BE_MOTION_M + 1];
	const uint32_t m = n + 1;
	for (uint32_t i = 0; i < n; i++) {
		/* symmetric: each pair's exp once; on the diagonal exp(0) = 1 */
		a[i * m + i] = 1.0 + BE_MOTION_NUGGET / tp[i];
		for (uint32_t j = i + 1; j < n; j++) {
			double dx = cx[i] - cx[j], dy = cy[i] - cy[j];
			a[i * m + j] = a[j * m + i] = exp(-(dx * dx + dy * dy) * i2l);
		}
		a[i * m + n] = 1.0;
		a[n * m + i] = 1.0;
		b[i] = exp(-d[i] * d[i] * i2l);
	}
	a[n * m + n] = 0.0;
	b[n] = 1.0;
	if (!be_motion_solve(a, b, m)) {
		/* cannot happen with a nugget > 0; the nearest sample alone then */
		pk->n = 1;
		pk->w[0] = 1.0f;
		return;
	}
	for (uint32_t i = 0; i < n; i++)
		pk->w[i] = (float)b[i];
}

/* Sample z of low-resolution A-scan l (Z bins) shifted in depth by entry e's dz: l[z - dz],
 * linear between the two bins around it, 0 where a bin it needs lies outside [0, Z). */
BE_MOTION_HD static inline float be_motion_shifted(const struct be_motion_entry *e, const float *l,
                                                   uint32_t z, uint32_t Z)
{
	int64_t i = (int64_t)z - e->k; /* l[i - 1] * fa + l[i] * fb */
	if (e->fa == 0.0f)
		return i >= 0 && i < (int64_t)Z ? l[i] : 0.0f;
	if (i < 1 || i >= (int64_t)Z)
		return 0.0f;
	return e->fa * l[i - 1] + e->fb * l[i];
}

/* Products and sums in double rounded one by one, on the device as on the host (no FMA
 * contraction: the host's C is compiled without it). */
#ifdef __CUDA_ARCH__
#define BE_MOTION_DMUL(a, b) __dmul_rn((a), (b))
#define BE_MOTION_DADD(a, b) __dadd_rn((a), (b))
#else
#define BE_MOTION_DMUL(a, b) ((a) * (b))
#define BE_MOTION_DADD(a, b) ((a) + (b))
#endif

/* The newest epoch's bilinear interpolation at a column, in bands (cb[NB], double): the four
 * A-scans' bands b00 .. b11 (of the epoch's entry bands) with the weights of
 * cpu_current_column (float, from the axes' ty, tx), summed in double. */
BE_MOTION_HD static inline void be_motion_current_bands(const float *b00, const float *b01,
                                                        const float *b10, const float *b11,
                                                        float ty, float tx, double *cb)
{
	const float w00 = (1.0f - ty) * (1.0f - tx), w01 = (1.0f - ty) * tx;
	const float w10 = ty * (1.0f - tx), w11 = ty * tx;

	for (uint32_t b = 0; b < BE_MOTION_NB; b++) {
		double v = BE_MOTION_DMUL((double)w00, (double)b00[b]);
		v = BE_MOTION_DADD(v, BE_MOTION_DMUL((double)w01, (double)b01[b]));
		v = BE_MOTION_DADD(v, BE_MOTION_DMUL((double)w10, (double)b10[b]));
		cb[b] = BE_MOTION_DADD(v, BE_MOTION_DMUL((double)w11, (double)b11[b]));
	}
}

/*
 * The registration's reference at a column, in bands (docs/algorithms.md §2c, "Reference"),
 * from its reference picks pk: K[b] = sum over the picks, in order, of w_i times the band b of
 * the picked entry's node (eb: the entry bands, [entry][nodes][NB]), in double and not
 * clamped; blended by a with the newest epoch's interpolation in bands cb where a < 1, cb
 * alone where the column has no pick. Stored as float.
 */
BE_MOTION_HD static inline void be_motion_ref_column(const struct be_motion_pick *pk,
                                                     const float *eb, size_t nodes,
                                                     const double *cb, float *ob)
{
	const double a = (double)pk->a, ra = 1.0 - a;

	for (uint32_t b = 0; b < BE_MOTION_NB; b++) {
		double s = 0.0;
		for (uint32_t i = 0; i < pk->n; i++) {
			const float *e =
			        eb + ((size_t)pk->entry[i] * nodes + pk->node[i]) * BE_MOTION_NB;
			s = BE_MOTION_DADD(s, BE_MOTION_DMUL((double)pk->w[i], (double)e[b]));
		}
		double v = pk->n == 0 ? cb[b]
		           : pk->a < 1.0f
		                   ? BE_MOTION_DADD(BE_MOTION_DMUL(a, s), BE_MOTION_DMUL(ra, cb[b]))
		                   : s;
		ob[b] = (float)v;
	}
}

/* ---- the host's estimator (backend/motion.c) ----------------------------------------------- */

struct be_motion;

/* For g with scan offsets of S = sx * sy phases. \return NULL when out of memory. */
struct be_motion *be_motion_create(const struct be_motion_geom *g);
void be_motion_destroy(struct be_motion *m);
/* Forget every pose and the history (reset_history, a change of mode). */
void be_motion_reset(struct be_motion *m);

/* on (the default): estimate every epoch's pose; off: every pose is 0, the history is
 * combined where it was scanned (reconstruct.compensated.estimate_pose). Takes effect at the
 * next epoch. */
void be_motion_set_estimate(struct be_motion *m, bool on);

/* The slots a backend keeps low-resolution volumes in, for S scan offsets: one more than the
 * history holds, so that an epoch's volume never goes to a slot the epoch before it reads (a
 * backend can store it while that epoch is still being reconstructed). */
#define BE_MOTION_SLOTS(S) (BE_MOTION_H * (S) + 1)
/* BE_MOTION_SLOTS of the estimator's geometry. */
uint32_t be_motion_slots(const struct be_motion *m);

/* Bands of low-resolution volume L shifted in depth by -dz, for the registration: Be[node][b]
 * = the mean over band b's bins of the shifted A-scan (band b: bins [b Z / NB, (b + 1) Z / NB)). */
typedef int (*be_motion_bands_fn)(void *ctx, double dz, float *Be);

/*
 * Epoch e at scan offset (ox, oy): estimate its pose from the mean A-scan prof[Z] (double) and
 * the bands (computed through bands(ctx, dz, Be) when the registration runs), record it, and
 * give the slot its low-resolution volume goes to (*slot) and the entries the output combines
 * (en, *ne; at most be_motion_slots) and the reference (the first *nref of them; 0: the
 * reference is the output itself). \return 0, or bands's error.
 */
int be_motion_epoch(struct be_motion *m, uint32_t ox, uint32_t oy, const double *prof,
                    be_motion_bands_fn bands, void *ctx, uint32_t *slot, struct be_motion_entry *en,
                    uint32_t *ne, uint32_t *nref);

/* The reference bands of this epoch's output (Y x X x NB floats, the columns kriged from the
 * first nref entries, or the output, in bands): kept, blurred, for the next registration. */
void be_motion_set_reference(struct be_motion *m, const float *ob);
/* The same with ob already blurred (by be_motion_blur's taps, each output summed over the taps
 * in order in double, along Y then along X, as be_motion_set_reference does): a backend that
 * blurs on its device. */
void be_motion_set_reference_blurred(struct be_motion *m, const float *ob);

/* The reference's blur: the normalized Gaussian taps k[0 .. 2r] (k[i + r] at offset i) of
 * BE_MOTION_BLUR, r = ceil(3 BE_MOTION_BLUR) (*r; k holds at least BE_MOTION_BLUR_TAPS). */
#define BE_MOTION_BLUR_TAPS 64
void be_motion_blur_taps(double *k, int *r);

/* The pose of the last epoch (for tests). */
struct be_motion_pose be_motion_last_pose(const struct be_motion *m);

/* Host helpers over a low-resolution volume L [ny][nx][Z] in host memory: the mean A-scan
 * (double) and the shifted bands of be_motion_bands_fn. */
void be_motion_profile(const struct be_motion_geom *g, const float *L, double *prof);
void be_motion_bands(const struct be_motion_geom *g, const float *L, double dz, float *Be);

/* The entry bands Be[node][b] of low-resolution volume L shifted as entry e: the mean over
 * band b's bins of be_motion_shifted (double, stored float); be_motion_bands is this with the
 * shift of -dz. */
void be_motion_entry_bands(const struct be_motion_geom *g, const float *L,
                           const struct be_motion_entry *e, float *Be);

/* The entry-like shift of dz (k, fa, fb of struct be_motion_entry). */
void be_motion_shift_of(double dz, struct be_motion_entry *e);

#endif
