/* SPDX-License-Identifier: MIT */
/*
 * The host's part of reconstruct.mode compensated (docs/algorithms.md §2c): the pose of every
 * epoch (axial shift from the mean A-scans, rotation and lateral shift by registering the new
 * samples' depth bands against the previous output's), the history of poses and slots, and
 * the entries that tell a backend where each history epoch's samples lie now.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "motion.h"

#define PROFS 10 /* mean A-scans kept */
#define CLOG  10 /* registration residuals the drop test looks at */

struct hist_entry {
	uint32_t ox, oy, slot;
	struct be_motion_pose pose;
};

struct be_motion {
	struct be_motion_geom g;
	uint32_t S, nslots, nn;  /* nn: ny * nx * NB band values */
	struct hist_entry *hist; /* oldest first */
	uint32_t nh;
	uint8_t *seen; /* [S] phases seen since the history began */
	uint32_t nseen;
	bool have_last;
	struct be_motion_pose last, vel;
	double *profs; /* [PROFS][Z] mean A-scans of the last epochs, oldest first */
	double ptz[PROFS];
	uint32_t nprof;
	double clog[CLOG]; /* registration residuals since the last drop, newest last */
	uint32_t nclog;
	bool lost, off;
	float *ob, *tmp; /* [Y][X][NB] the reference (blurred), scratch */
	bool have_ob;
	float *be;               /* [nn] this epoch's bands */
	double *r0, *r1, *rj[3]; /* [nn] residuals */
	double *ac;              /* [Z] scratch */
	double *acc;             /* [X * NB] scratch of the blur */
};

struct be_motion *be_motion_create(const struct be_motion_geom *g)
{
	struct be_motion *m = calloc(1, sizeof(*m));

	if (!m)
		return NULL;
	m->g = *g;
	m->S = g->sx * g->sy;
	m->nslots = BE_MOTION_H * m->S;
	m->nn = g->ny * g->nx * BE_MOTION_NB;
	size_t cols = (size_t)g->Y * g->X * BE_MOTION_NB;
	m->hist = calloc(m->nslots, sizeof(*m->hist));
	m->seen = calloc(m->S, 1);
	m->profs = calloc((size_t)PROFS * g->Z, sizeof(double));
	m->ob = calloc(cols, sizeof(float));
	m->tmp = calloc(cols, sizeof(float));
	m->be = calloc(m->nn, sizeof(float));
	m->r0 = calloc(m->nn, sizeof(double));
	m->r1 = calloc(m->nn, sizeof(double));
	for (int j = 0; j < 3; j++)
		m->rj[j] = calloc(m->nn, sizeof(double));
	m->ac = calloc(g->Z, sizeof(double));
	m->acc = calloc((size_t)g->X * BE_MOTION_NB, sizeof(double));
	if (!m->hist || !m->seen || !m->profs || !m->ob || !m->tmp || !m->be || !m->r0 || !m->r1 ||
	    !m->rj[0] || !m->rj[1] || !m->rj[2] || !m->ac || !m->acc) {
		be_motion_destroy(m);
		return NULL;
	}
	return m;
}

void be_motion_destroy(struct be_motion *m)
{
	if (!m)
		return;
	free(m->hist);
	free(m->seen);
	free(m->profs);
	free(m->ob);
	free(m->tmp);
	free(m->be);
	free(m->r0);
	free(m->r1);
	for (int j = 0; j < 3; j++)
		free(m->rj[j]);
	free(m->ac);
	free(m->acc);
	free(m);
}

static void drop_history(struct be_motion *m)
{
	m->nh = 0;
	memset(m->seen, 0, m->S);
	m->nseen = 0;
	memset(&m->vel, 0, sizeof(m->vel));
}

void be_motion_reset(struct be_motion *m)
{
	drop_history(m);
	m->have_last = false;
	memset(&m->last, 0, sizeof(m->last));
	m->nprof = 0;
	m->nclog = 0;
	m->lost = false;
	m->have_ob = false;
}

void be_motion_set_estimate(struct be_motion *m, bool on)
{
	m->off = !on;
}

uint32_t be_motion_slots(const struct be_motion *m)
{
	return m->nslots;
}

struct be_motion_pose be_motion_last_pose(const struct be_motion *m)
{
	return m->last;
}

void be_motion_shift_of(double dz, struct be_motion_entry *e)
{
	double k = floor(dz), f = dz - k;

	if (f < 1e-9) {
		f = 0.0;
	} else if (f > 1.0 - 1e-9) {
		k += 1.0;
		f = 0.0;
	}
	e->k = (int32_t)k;
	e->fa = (float)f;
	e->fb = (float)(1.0 - f);
}

void be_motion_profile(const struct be_motion_geom *g, const float *L, double *prof)
{
	const size_t n = (size_t)g->ny * g->nx;

	for (uint32_t z = 0; z < g->Z; z++)
		prof[z] = 0.0;
	for (size_t i = 0; i < n; i++)
		for (uint32_t z = 0; z < g->Z; z++)
			prof[z] += L[i * g->Z + z];
	for (uint32_t z = 0; z < g->Z; z++)
		prof[z] /= (double)n;
}

void be_motion_bands(const struct be_motion_geom *g, const float *L, double dz, float *Be)
{
	const size_t n = (size_t)g->ny * g->nx;
	struct be_motion_entry e;

	be_motion_shift_of(-dz, &e);
	for (size_t i = 0; i < n; i++) {
		const float *l = L + i * g->Z;
		for (uint32_t b = 0; b < BE_MOTION_NB; b++) {
			uint32_t z0 = b * g->Z / BE_MOTION_NB, z1 = (b + 1) * g->Z / BE_MOTION_NB;
			double s = 0.0;
			for (uint32_t z = z0; z < z1; z++)
				s += be_motion_shifted(&e, l, z, g->Z);
			Be[i * BE_MOTION_NB + b] = z1 > z0 ? (float)(s / (double)(z1 - z0)) : 0.0f;
		}
	}
}

/* The shift (bins) of mean A-scan a against b (a[z + d] ~ b[z]): the peak of their
 * cross-correlation over +-BE_MOTION_ZR bins (means removed), refined by a parabola. */
static double zxcorr(const double *a, const double *b, uint32_t Z, double *ac)
{
	const int r = BE_MOTION_ZR;
	double ma = 0.0, mb = 0.0, cc[2 * BE_MOTION_ZR + 1];

	for (uint32_t z = 0; z < Z; z++) {
		ma += a[z];
		mb += b[z];
	}
	ma /= Z;
	mb /= Z;
	for (uint32_t z = 0; z < Z; z++)
		ac[z] = a[z] - ma;
	int best = 0;
	for (int k = -r; k <= r; k++) {
		double s = 0.0;
		for (int64_t i = 0; i < (int64_t)Z - (k < 0 ? -k : k); i++)
			s += k >= 0 ? ac[i + k] * (b[i] - mb) : ac[i] * (b[i - k] - mb);
		cc[k + r] = s;
		if (cc[k + r] > cc[best])
			best = k + r;
	}
	double d = best - r;
	if (best > 0 && best < 2 * r) {
		double den = cc[best - 1] - 2.0 * cc[best] + cc[best + 1];
		if (den < 0.0)
			d += 0.5 * (cc[best - 1] - cc[best + 1]) / den;
	}
	return d;
}

/* Residual of this epoch's bands against the reference, for pose p: per band value, the band
 * minus the reference bilinearly interpolated where the same tissue stood at the last epoch
 * (0 where that lies outside). \return the sum of squares; *nok the nodes inside. */
static double residual(const struct be_motion *m, uint32_t ox, uint32_t oy,
                       const struct be_motion_pose *p, double *r, uint32_t *nok)
{
	const struct be_motion_geom *g = &m->g;
	const double hX = g->X / 2.0, hY = g->Y / 2.0;
	const double c = cos(m->last.th - p->th), s = sin(m->last.th - p->th);
	double sum = 0.0;
	uint32_t ok = 0;

	for (uint32_t iy = 0; iy < g->ny; iy++)
		for (uint32_t ix = 0; ix < g->nx; ix++) {
			size_t node = (size_t)iy * g->nx + ix;
			double vx = (double)(ix * g->sx + ox) + 0.5 - hX - p->tx;
			double vy = (double)(iy * g->sy + oy) + 0.5 - hY - p->ty;
			double gx = c * vx - s * vy + m->last.tx + hX - 0.5;
			double gy = s * vx + c * vy + m->last.ty + hY - 0.5;
			double fx = floor(gx), fy = floor(gy);
			double *rn = r + node * BE_MOTION_NB;
			if (!(fx >= 0.0 && fx + 1.0 < g->X && fy >= 0.0 && fy + 1.0 < g->Y)) {
				for (uint32_t b = 0; b < BE_MOTION_NB; b++)
					rn[b] = 0.0;
				continue;
			}
			ok++;
			size_t x0 = (size_t)fx, y0 = (size_t)fy;
			double tx = gx - fx, ty = gy - fy;
			const float *o00 = m->ob + (y0 * g->X + x0) * BE_MOTION_NB;
			const float *o01 = o00 + BE_MOTION_NB;
			const float *o10 = o00 + (size_t)g->X * BE_MOTION_NB;
			const float *o11 = o10 + BE_MOTION_NB;
			const float *bn = m->be + node * BE_MOTION_NB;
			for (uint32_t b = 0; b < BE_MOTION_NB; b++) {
				double pr = o00[b] * ((1 - tx) * (1 - ty)) +
				            o01[b] * (tx * (1 - ty)) + o10[b] * ((1 - tx) * ty) +
				            o11[b] * (tx * ty);
				rn[b] = bn[b] - pr;
				sum += rn[b] * rn[b];
			}
		}
	*nok = ok;
	return sum;
}

static double *pose_at(struct be_motion_pose *p, int j)
{
	return j == 0 ? &p->th : j == 1 ? &p->tx : &p->ty;
}

/* Rotation and lateral shift from start: a search over rotation increments, then
 * Levenberg-Marquardt on (th, tx, ty). \return the residual per node at the result. */
static double register_lateral(struct be_motion *m, uint32_t ox, uint32_t oy,
                               struct be_motion_pose *pose)
{
	static const double search[] = {0, -0.5, 0.5, -1, 1, -2, 2, -3, 3, -4, 4, -6, 6};
	static const double step[3] = {1e-3, 1e-2, 1e-2}, lim[3] = {0.02, 1.0, 1.0};
	struct be_motion_pose best = *pose;
	double bc = INFINITY;
	uint32_t nok;

	for (size_t i = 0; i < sizeof(search) / sizeof(search[0]); i++) {
		struct be_motion_pose pp = *pose;
		pp.th += search[i] * M_PI / 180.0;
		double c = residual(m, ox, oy, &pp, m->r0, &nok);
		c /= nok > 0 ? nok : 1;
		if (c < bc) {
			bc = c;
			best = pp;
		}
	}
	*pose = best;
	double c0 = residual(m, ox, oy, pose, m->r0, &nok), lam = 1e-2;
	for (int it = 0; it < 6; it++) {
		double A[9] = {0}, gr[3] = {0};
		for (int j = 0; j < 3; j++) {
			struct be_motion_pose pp = *pose;
			uint32_t nj;
			*pose_at(&pp, j) += step[j];
			(void)residual(m, ox, oy, &pp, m->rj[j], &nj);
			for (uint32_t i = 0; i < m->nn; i++)
				m->rj[j][i] = (m->rj[j][i] - m->r0[i]) / step[j];
		}
		for (int a = 0; a < 3; a++) {
			for (int b = 0; b < 3; b++) {
				double s = 0.0;
				for (uint32_t i = 0; i < m->nn; i++)
					s += m->rj[a][i] * m->rj[b][i];
				A[a * 3 + b] = s;
			}
			double s = 0.0;
			for (uint32_t i = 0; i < m->nn; i++)
				s += m->rj[a][i] * m->r0[i];
			gr[a] = s;
		}
		double c1 = INFINITY, d[3] = {0};
		struct be_motion_pose pp = *pose;
		uint32_t n1 = 0;
		for (int t = 0; t < 6; t++) {
			double Mx[9], x[3];
			for (int k = 0; k < 9; k++)
				Mx[k] = A[k];
			for (int k = 0; k < 3; k++) {
				Mx[k * 3 + k] += lam * (A[k * 3 + k] + 1e-9);
				x[k] = gr[k];
			}
			if (!be_motion_solve(Mx, x, 3))
				break;
			pp = *pose;
			for (int k = 0; k < 3; k++) {
				d[k] = fmin(fmax(-x[k], -lim[k]), lim[k]);
				*pose_at(&pp, k) += d[k];
			}
			c1 = residual(m, ox, oy, &pp, m->r1, &n1);
			if (c1 < c0)
				break;
			lam *= 10.0;
		}
		if (!(c1 < c0))
			break;
		double *t = m->r0;
		m->r0 = m->r1;
		m->r1 = t;
		*pose = pp;
		c0 = c1;
		nok = n1;
		lam = fmax(lam / 10.0, 1e-4);
		if (fmax(fabs(d[0]), fmax(fabs(d[1]), fabs(d[2]))) < 1e-5)
			break;
	}
	return c0 / (nok > 0 ? nok : 1);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* The pose of an epoch (docs/algorithms.md §2c, "Pose"). */
static int estimate(struct be_motion *m, uint32_t ox, uint32_t oy, const double *prof,
                    be_motion_bands_fn bands, void *ctx, struct be_motion_pose *out)
{
	const uint32_t Z = m->g.Z;

	if (!m->have_last || m->off) {
		memset(out, 0, sizeof(*out));
		return 0;
	}
	struct be_motion_pose pred = m->last, pose;
	pred.th += m->vel.th;
	pred.tx += m->vel.tx;
	pred.ty += m->vel.ty;
	pred.tz += m->vel.tz;
	pose = pred;
	/* axial: the mean over the last NAX epochs of their pose plus the shift against their
	 * mean A-scan, taken as measured */
	uint32_t na = m->nprof < BE_MOTION_NAX ? m->nprof : BE_MOTION_NAX;
	double tz = 0.0;
	for (uint32_t i = m->nprof - na; i < m->nprof; i++)
		tz += m->ptz[i] + zxcorr(prof, m->profs + (size_t)i * Z, Z, m->ac);
	if (na > 0 && isfinite(tz))
		pose.tz = tz / na;
	double dz = pose.tz - m->last.tz;
	if (m->nseen < BE_MOTION_WARM || !m->have_ob) {
		*out = pose;
		return 0;
	}
	int rc = bands(ctx, dz, m->be);
	if (rc < 0)
		return rc;
	double cn = register_lateral(m, ox, oy, &pose);
	if (!isfinite(pose.th) || !isfinite(pose.tx) || !isfinite(pose.ty) || !isfinite(cn)) {
		/* cannot happen on finite samples; keep the prediction and start over */
		double z = pose.tz;
		*out = pred;
		out->tz = z;
		m->lost = true;
		m->nclog = 0;
		return 0;
	}
	/* a registration that leaves RESET times its usual residual: the chain of poses is lost
	 * (the patient moved at once), the history is dropped at this epoch */
	if (m->nclog > 5) {
		double v[CLOG];
		uint32_t k = m->nclog < CLOG ? m->nclog : CLOG;
		memcpy(v, m->clog + CLOG - k, k * sizeof(double));
		qsort(v, k, sizeof(double), cmp_double);
		double med = k % 2 ? v[k / 2] : 0.5 * (v[k / 2 - 1] + v[k / 2]);
		if (cn > BE_MOTION_RESET * med) {
			m->lost = true;
			m->nclog = 0;
		}
	}
	memmove(m->clog, m->clog + 1, (CLOG - 1) * sizeof(double));
	m->clog[CLOG - 1] = cn;
	m->nclog++;
	/* alpha-beta: the velocity follows the innovation; the axial estimate as measured */
	m->vel.th += BE_MOTION_GB * (pose.th - pred.th);
	m->vel.tx += BE_MOTION_GB * (pose.tx - pred.tx);
	m->vel.ty += BE_MOTION_GB * (pose.ty - pred.ty);
	m->vel.tz = 0.0;
	out->th = pred.th + BE_MOTION_GA * (pose.th - pred.th);
	out->tx = pred.tx + BE_MOTION_GA * (pose.tx - pred.tx);
	out->ty = pred.ty + BE_MOTION_GA * (pose.ty - pred.ty);
	out->tz = pose.tz;
	return 0;
}

int be_motion_epoch(struct be_motion *m, uint32_t ox, uint32_t oy, const double *prof,
                    be_motion_bands_fn bands, void *ctx, uint32_t *slot, struct be_motion_entry *en,
                    uint32_t *ne, uint32_t *nref)
{
	const uint32_t Z = m->g.Z;
	struct be_motion_pose pose;
	int rc = estimate(m, ox, oy, prof, bands, ctx, &pose);

	if (rc < 0)
		return rc;
	m->last = pose;
	m->have_last = true;
	if (m->nprof == PROFS) {
		memmove(m->profs, m->profs + Z, (size_t)(PROFS - 1) * Z * sizeof(double));
		memmove(m->ptz, m->ptz + 1, (PROFS - 1) * sizeof(double));
		m->nprof--;
	}
	memcpy(m->profs + (size_t)m->nprof * Z, prof, Z * sizeof(double));
	m->ptz[m->nprof++] = pose.tz;
	if (m->lost) {
		drop_history(m);
		m->lost = false;
	}

	/* the slot: a free one, or the oldest entry's */
	uint32_t s = 0;
	if (m->nh == m->nslots) {
		s = m->hist[0].slot;
		memmove(m->hist, m->hist + 1, (m->nh - 1) * sizeof(*m->hist));
		m->nh--;
	} else {
		for (bool used = true; used; s++) {
			used = false;
			for (uint32_t i = 0; i < m->nh && !used; i++)
				used = m->hist[i].slot == s;
			if (!used)
				break;
		}
	}
	m->hist[m->nh++] = (struct hist_entry){.ox = ox, .oy = oy, .slot = s, .pose = pose};
	uint32_t q = oy * m->g.sx + ox;
	if (q < m->S && !m->seen[q]) {
		m->seen[q] = 1;
		m->nseen++;
	}
	*slot = s;

	for (uint32_t i = 0; i < m->nh; i++) {
		const struct hist_entry *h = &m->hist[i];
		struct be_motion_entry *e = &en[i];
		double phi = h->pose.th - pose.th;
		e->ox = h->ox;
		e->oy = h->oy;
		e->slot = h->slot;
		e->c = cos(phi);
		e->s = sin(phi);
		e->hx = h->pose.tx;
		e->hy = h->pose.ty;
		e->px = pose.tx;
		e->py = pose.ty;
		be_motion_shift_of(pose.tz - h->pose.tz, e);
	}
	*ne = m->nh;
	*nref = m->nh > BE_MOTION_EXCL + 5 ? m->nh - BE_MOTION_EXCL : 0;
	return 0;
}

void be_motion_set_reference(struct be_motion *m, const float *ob)
{
	const struct be_motion_geom *g = &m->g;
	const int r = (int)ceil(3.0 * BE_MOTION_BLUR);
	double k[64], ks = 0.0;
	const size_t NB = BE_MOTION_NB;

	for (int i = -r; i <= r; i++)
		ks += k[i + r] = exp(-(double)(i * i) / (2.0 * BE_MOTION_BLUR * BE_MOTION_BLUR));
	for (int i = 0; i <= 2 * r; i++)
		k[i] /= ks;
	/* along Y into tmp, then along X into ob; edges repeated; each output summed over the
	 * taps in order, in double (rows at a time, so that the loops vectorize) */
	const size_t row = (size_t)g->X * NB;
	double *acc = m->acc;
	for (uint32_t y = 0; y < g->Y; y++) {
		for (size_t j = 0; j < row; j++)
			acc[j] = 0.0;
		for (int i = -r; i <= r; i++) {
			int64_t yy = (int64_t)y + i;
			yy = yy < 0 ? 0 : yy >= g->Y ? g->Y - 1 : yy;
			const float *src = ob + (size_t)yy * row;
			const double kk = k[i + r];
			for (size_t j = 0; j < row; j++)
				acc[j] += kk * src[j];
		}
		float *dst = m->tmp + (size_t)y * row;
		for (size_t j = 0; j < row; j++)
			dst[j] = (float)acc[j];
	}
	for (uint32_t y = 0; y < g->Y; y++) {
		const float *src = m->tmp + (size_t)y * row;
		float *dst = m->ob + (size_t)y * row;
		for (uint32_t x = 0; x < g->X; x++) {
			double a[BE_MOTION_NB] = {0};
			for (int i = -r; i <= r; i++) {
				int64_t xx = (int64_t)x + i;
				xx = xx < 0 ? 0 : xx >= g->X ? g->X - 1 : xx;
				const float *c = src + (size_t)xx * NB;
				for (size_t b = 0; b < NB; b++)
					a[b] += k[i + r] * c[b];
			}
			for (size_t b = 0; b < NB; b++)
				dst[(size_t)x * NB + b] = (float)a[b];
		}
	}
	m->have_ob = true;
}
