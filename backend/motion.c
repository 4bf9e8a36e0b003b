/* SPDX-License-Identifier: MIT */
/*
 * The host's part of reconstruct.mode compensated (docs/algorithms.md §2c): the pose of every
 * epoch (axial shift from the mean A-scans, rotation and lateral shift by registering the new
 * samples' depth bands against the previous output's), the history of poses and slots, and
 * the entries that tell a backend where each history epoch's samples lie now.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/motion.h"

#define PROFS 10 /* mean A-scans kept */
#define CLOG  10 /* registration residuals the drop test looks at */
#define CHUNKS                                                                                     \
	16       /* the registration's sums: partial sums over these parts of the node rows,
                   * added in order, so that the result does not depend on the threads */
#define NSRCH 13 /* rotations of the search */
#define POOL  8  /* helper threads at most */

struct be_motion;

/* Helper threads that run the parts of a job (fn(m, part, arg) for part < n) with the caller. */
struct pool {
	pthread_t t[POOL];
	unsigned nt;
	pthread_mutex_t mu;
	pthread_cond_t cv, done;
	void (*fn)(struct be_motion *m, unsigned part, void *arg);
	void *arg;
	unsigned n, next, busy;
	uint64_t gen;
	bool quit;
};

struct hist_entry {
	uint32_t ox, oy, slot;
	struct be_motion_pose pose;
};

struct be_motion {
	struct be_motion_geom g;
	uint32_t S, nslots, nn;  /* nn: ny * nx * NB band values */
	uint32_t cap;            /* entries at most: BE_MOTION_H * S */
	struct hist_entry *hist; /* oldest first */
	uint32_t nh;
	uint8_t *prev; /* [nslots] the slots the last epoch's entries named */
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
	double *acc;             /* [CHUNKS][X * NB] scratch of the blur */

	/* the stillness test: the unshifted bands of the last epoch of each offset since the
	 * history began, and this epoch's */
	float *bq;      /* [S][nn] */
	uint8_t *bq_ok; /* [S] */
	float *b0;      /* [nn] */
	bool still;     /* this epoch was still: its offset's last entry takes its pose */
	struct pool pool;
	bool pool_ok;
};

/* ---- the helper threads ---------------------------------------------------------------- */

/* Take parts of the current job until none is left; mu held on entry and exit. */
static void pool_work(struct be_motion *m, struct pool *p)
{
	while (p->next < p->n) {
		unsigned part = p->next++;
		p->busy++;
		pthread_mutex_unlock(&p->mu);
		p->fn(m, part, p->arg);
		pthread_mutex_lock(&p->mu);
		if (--p->busy == 0 && p->next == p->n)
			pthread_cond_broadcast(&p->done);
	}
}

static void *pool_main(void *arg)
{
	struct be_motion *m = arg;
	struct pool *p = &m->pool;
	uint64_t seen = 0;

	pthread_mutex_lock(&p->mu);
	while (!p->quit) {
		if (p->gen != seen) {
			seen = p->gen;
			pool_work(m, p);
			continue;
		}
		pthread_cond_wait(&p->cv, &p->mu);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

/* Run fn over parts [0, n) on the helpers and the caller; returns when all are done. */
static void pool_run(struct be_motion *m, void (*fn)(struct be_motion *, unsigned, void *),
                     void *arg, unsigned n)
{
	struct pool *p = &m->pool;

	if (!m->pool_ok || p->nt == 0) {
		for (unsigned i = 0; i < n; i++)
			fn(m, i, arg);
		return;
	}
	pthread_mutex_lock(&p->mu);
	p->fn = fn;
	p->arg = arg;
	p->n = n;
	p->next = 0;
	p->busy = 0;
	p->gen++;
	pthread_cond_broadcast(&p->cv);
	pool_work(m, p);
	while (p->busy > 0 || p->next < p->n)
		pthread_cond_wait(&p->done, &p->mu);
	pthread_mutex_unlock(&p->mu);
}

static void pool_start(struct be_motion *m, struct pool *p)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned want = cpus > 1 ? (unsigned)(cpus - 1) : 0;

	want = want > POOL ? POOL : want;
	p->nt = 0;
	if (pthread_mutex_init(&p->mu, NULL))
		return;
	if (pthread_cond_init(&p->cv, NULL)) {
		pthread_mutex_destroy(&p->mu);
		return;
	}
	if (pthread_cond_init(&p->done, NULL)) {
		pthread_cond_destroy(&p->cv);
		pthread_mutex_destroy(&p->mu);
		return;
	}
	m->pool_ok = true;
	/* threads that cannot start leave their share to the others: the result is the same */
	for (unsigned i = 0; i < want; i++)
		if (pthread_create(&p->t[p->nt], NULL, pool_main, m) == 0)
			p->nt++;
}

static void pool_stop(struct be_motion *m)
{
	struct pool *p = &m->pool;

	if (!m->pool_ok)
		return;
	pthread_mutex_lock(&p->mu);
	p->quit = true;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	for (unsigned i = 0; i < p->nt; i++)
		pthread_join(p->t[i], NULL);
	pthread_cond_destroy(&p->done);
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->mu);
	m->pool_ok = false;
}

struct be_motion *be_motion_create(const struct be_motion_geom *g)
{
	struct be_motion *m = calloc(1, sizeof(*m));

	if (!m)
		return NULL;
	m->g = *g;
	m->S = g->sx * g->sy;
	m->cap = BE_MOTION_H * m->S;
	m->nslots = BE_MOTION_SLOTS(m->S);
	m->nn = g->ny * g->nx * BE_MOTION_NB;
	size_t cols = (size_t)g->Y * g->X * BE_MOTION_NB;
	m->hist = calloc(m->nslots, sizeof(*m->hist));
	m->prev = calloc(m->nslots, 1);
	m->seen = calloc(m->S, 1);
	m->profs = calloc((size_t)PROFS * g->Z, sizeof(double));
	m->ob = calloc(cols, sizeof(float));
	m->tmp = calloc(cols, sizeof(float));
	m->be = calloc(m->nn, sizeof(float));
	m->bq = calloc((size_t)m->S * m->nn, sizeof(float));
	m->bq_ok = calloc(m->S, 1);
	m->b0 = calloc(m->nn, sizeof(float));
	m->r0 = calloc(m->nn, sizeof(double));
	m->r1 = calloc(m->nn, sizeof(double));
	for (int j = 0; j < 3; j++)
		m->rj[j] = calloc(m->nn, sizeof(double));
	m->ac = calloc(g->Z, sizeof(double));
	m->acc = calloc((size_t)CHUNKS * g->X * BE_MOTION_NB, sizeof(double));
	if (!m->hist || !m->prev || !m->seen || !m->profs || !m->ob || !m->tmp || !m->be ||
	    !m->r0 || !m->r1 || !m->rj[0] || !m->rj[1] || !m->rj[2] || !m->ac || !m->acc ||
	    !m->bq || !m->bq_ok || !m->b0) {
		be_motion_destroy(m);
		return NULL;
	}
	pool_start(m, &m->pool);
	return m;
}

void be_motion_destroy(struct be_motion *m)
{
	if (!m)
		return;
	pool_stop(m);
	free(m->hist);
	free(m->prev);
	free(m->seen);
	free(m->profs);
	free(m->ob);
	free(m->tmp);
	free(m->be);
	free(m->bq);
	free(m->bq_ok);
	free(m->b0);
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
	memset(m->bq_ok, 0, m->S);
}

void be_motion_reset(struct be_motion *m)
{
	drop_history(m);
	memset(m->prev, 0, m->nslots);
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
	struct be_motion_entry e;

	be_motion_shift_of(-dz, &e);
	be_motion_entry_bands(g, L, &e, Be);
}

void be_motion_entry_bands(const struct be_motion_geom *g, const float *L,
                           const struct be_motion_entry *ep, float *Be)
{
	const size_t n = (size_t)g->ny * g->nx;
	const struct be_motion_entry e = *ep;

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

/* Residual of this epoch's bands against the reference for pose p over node rows [iy0, iy1):
 * per band value, the band minus the reference bilinearly interpolated where the same tissue
 * stood at the last epoch (0 where that lies outside), into r when not NULL. *sum: the sum of
 * squares; *nok: the nodes inside. */
static void residual_rows(const struct be_motion *m, uint32_t ox, uint32_t oy,
                          const struct be_motion_pose *p, double *r, uint32_t iy0, uint32_t iy1,
                          double *sum_out, uint32_t *nok)
{
	const struct be_motion_geom *g = &m->g;
	const double hX = g->X / 2.0, hY = g->Y / 2.0;
	const double c = cos(m->last.th - p->th), s = sin(m->last.th - p->th);
	double sum = 0.0;
	uint32_t ok = 0;

	for (uint32_t iy = iy0; iy < iy1; iy++)
		for (uint32_t ix = 0; ix < g->nx; ix++) {
			size_t node = (size_t)iy * g->nx + ix;
			double vx = (double)(ix * g->sx + ox) + 0.5 - hX - p->tx;
			double vy = (double)(iy * g->sy + oy) + 0.5 - hY - p->ty;
			double gx = c * vx - s * vy + m->last.tx + hX - 0.5;
			double gy = s * vx + c * vy + m->last.ty + hY - 0.5;
			double fx = floor(gx), fy = floor(gy);
			double *rn = r ? r + node * BE_MOTION_NB : NULL;
			if (!(fx >= 0.0 && fx + 1.0 < g->X && fy >= 0.0 && fy + 1.0 < g->Y)) {
				for (uint32_t b = 0; rn && b < BE_MOTION_NB; b++)
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
				double v = bn[b] - pr;
				if (rn)
					rn[b] = v;
				sum += v * v;
			}
		}
	*sum_out = sum;
	*nok = ok;
}

/* The node rows of part k of CHUNKS. */
static void part_rows(const struct be_motion *m, unsigned k, uint32_t *iy0, uint32_t *iy1)
{
	*iy0 = (uint32_t)((uint64_t)k * m->g.ny / CHUNKS);
	*iy1 = (uint32_t)((uint64_t)(k + 1) * m->g.ny / CHUNKS);
}

/* The residuals of np poses (the first one's values into r, when not NULL), by parts. */
struct res_job {
	uint32_t ox, oy;
	const struct be_motion_pose *poses;
	unsigned np;
	double *r;
	double sum[NSRCH][CHUNKS];
	uint32_t ok[NSRCH][CHUNKS];
};

static void res_part(struct be_motion *m, unsigned k, void *arg)
{
	struct res_job *j = arg;
	uint32_t iy0, iy1;

	part_rows(m, k, &iy0, &iy1);
	for (unsigned i = 0; i < j->np; i++)
		residual_rows(m, j->ox, j->oy, &j->poses[i], i == 0 ? j->r : NULL, iy0, iy1,
		              &j->sum[i][k], &j->ok[i][k]);
}

/* The residual of this epoch's bands for each of np poses (sum of squares in cost[i], the
 * nodes inside in nok[i]; the first pose's values into r when not NULL): the parts' sums
 * added in order. */
static void residuals(struct be_motion *m, uint32_t ox, uint32_t oy,
                      const struct be_motion_pose *poses, unsigned np, double *r, double *cost,
                      uint32_t *nok)
{
	struct res_job j = {.ox = ox, .oy = oy, .poses = poses, .np = np, .r = r};

	pool_run(m, res_part, &j, CHUNKS);
	for (unsigned i = 0; i < np; i++) {
		cost[i] = 0.0;
		nok[i] = 0;
		for (unsigned k = 0; k < CHUNKS; k++) {
			cost[i] += j.sum[i][k];
			nok[i] += j.ok[i][k];
		}
	}
}

static double residual(struct be_motion *m, uint32_t ox, uint32_t oy,
                       const struct be_motion_pose *p, double *r, uint32_t *nok)
{
	double c;

	residuals(m, ox, oy, p, 1, r, &c, nok);
	return c;
}

static double *pose_at(struct be_motion_pose *p, int j)
{
	return j == 0 ? &p->th : j == 1 ? &p->tx : &p->ty;
}

static const double jac_step[3] = {1e-3, 1e-2, 1e-2};

/* The Jacobian by forward differences at the poses pp[j] (rj = (r(pp[j]) - r0) / step) and
 * its normal equations A = J^T J, gr = J^T r0, by parts. */
struct jac_job {
	uint32_t ox, oy;
	struct be_motion_pose pp[3];
	double A[CHUNKS][9], gr[CHUNKS][3];
};

static void jac_part(struct be_motion *m, unsigned k, void *arg)
{
	struct jac_job *j = arg;
	uint32_t iy0, iy1, nj;
	double unused;

	part_rows(m, k, &iy0, &iy1);
	const size_t i0 = (size_t)iy0 * m->g.nx * BE_MOTION_NB,
	             i1 = (size_t)iy1 * m->g.nx * BE_MOTION_NB;
	for (int d = 0; d < 3; d++) {
		residual_rows(m, j->ox, j->oy, &j->pp[d], m->rj[d], iy0, iy1, &unused, &nj);
		for (size_t i = i0; i < i1; i++)
			m->rj[d][i] = (m->rj[d][i] - m->r0[i]) / jac_step[d];
	}
	for (int a = 0; a < 3; a++) {
		for (int b = 0; b < 3; b++) {
			double s = 0.0;
			for (size_t i = i0; i < i1; i++)
				s += m->rj[a][i] * m->rj[b][i];
			j->A[k][a * 3 + b] = s;
		}
		double s = 0.0;
		for (size_t i = i0; i < i1; i++)
			s += m->rj[a][i] * m->r0[i];
		j->gr[k][a] = s;
	}
}

/* Rotation and lateral shift from start: a search over rotation increments, then
 * Levenberg-Marquardt on (th, tx, ty). \return the residual per node at the result. */
static double register_lateral(struct be_motion *m, uint32_t ox, uint32_t oy,
                               struct be_motion_pose *pose)
{
	static const double search[NSRCH] = {0, -0.5, 0.5, -1, 1, -2, 2, -3, 3, -4, 4, -6, 6};
	static const double lim[3] = {0.02, 1.0, 1.0};
	struct be_motion_pose best = *pose, cand[NSRCH];
	double bc = INFINITY, cost[NSRCH];
	uint32_t nok, nk[NSRCH];

	for (size_t i = 0; i < NSRCH; i++) {
		cand[i] = *pose;
		cand[i].th += search[i] * M_PI / 180.0;
	}
	residuals(m, ox, oy, cand, NSRCH, NULL, cost, nk);
	for (size_t i = 0; i < NSRCH; i++) {
		double c = cost[i] / (nk[i] > 0 ? nk[i] : 1);
		if (c < bc) {
			bc = c;
			best = cand[i];
		}
	}
	*pose = best;
	double c0 = residual(m, ox, oy, pose, m->r0, &nok), lam = 1e-2;
	for (int it = 0; it < 6; it++) {
		double A[9] = {0}, gr[3] = {0};
		struct jac_job jj = {.ox = ox, .oy = oy};
		for (int j = 0; j < 3; j++) {
			jj.pp[j] = *pose;
			*pose_at(&jj.pp[j], j) += jac_step[j];
		}
		pool_run(m, jac_part, &jj, CHUNKS);
		for (unsigned k = 0; k < CHUNKS; k++) {
			for (int a = 0; a < 9; a++)
				A[a] += jj.A[k][a];
			for (int a = 0; a < 3; a++)
				gr[a] += jj.gr[k][a];
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

/* Log a registration residual (the drop compares with the median of the last CLOG). */
static void log_residual(struct be_motion *m, double cn)
{
	memmove(m->clog, m->clog + 1, (CLOG - 1) * sizeof(double));
	m->clog[CLOG - 1] = cn;
	m->nclog++;
}

/* The pose of an epoch (docs/algorithms.md §2c, "Pose"). */
/* Whether the bands m->b0 of offset q (q < S: one of the cycle's) changed by less than
 * BE_MOTION_STILL of their own spread since the last epoch at q; they are kept for the next. */
static bool bands_still(struct be_motion *m, uint32_t q)
{
	bool still = false;

	if (q < m->S && m->bq_ok[q]) {
		const float *bq = m->bq + (size_t)q * m->nn;
		double mean = 0.0, var = 0.0, dif = 0.0;
		for (uint32_t i = 0; i < m->nn; i++)
			mean += m->b0[i];
		mean /= m->nn;
		for (uint32_t i = 0; i < m->nn; i++) {
			const double a = m->b0[i] - mean, d = (double)m->b0[i] - bq[i];
			var += a * a;
			dif += d * d;
		}
		still = var > 0.0 && dif < BE_MOTION_STILL * 2.0 * var;
	}
	if (q < m->S) {
		memcpy(m->bq + (size_t)q * m->nn, m->b0, m->nn * sizeof(float));
		m->bq_ok[q] = 1;
	}
	return still;
}

/* Whether the registration's residual cn is over BE_MOTION_RESET times the median of the
 * logged ones (more than 5 logged). */
static bool residual_jumped(const struct be_motion *m, double cn)
{
	double v[CLOG];
	uint32_t k = m->nclog < CLOG ? m->nclog : CLOG;

	if (m->nclog <= 5)
		return false;
	memcpy(v, m->clog + CLOG - k, k * sizeof(double));
	qsort(v, k, sizeof(double), cmp_double);
	double med = k % 2 ? v[k / 2] : 0.5 * (v[k / 2 - 1] + v[k / 2]);
	return cn > BE_MOTION_RESET * med;
}

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
	/* the stillness test: this epoch's bands against those of the last epoch at the same
	 * offset (the same positions: no interpolation, no depth that a curved or tilted surface
	 * moves with the offset); a change below BE_MOTION_STILL of the bands' own spread means
	 * that nothing moved for a cycle, and the pose stays the last one */
	const uint32_t q = oy * m->g.sx + ox;
	int rc = bands(ctx, 0.0, m->b0);
	if (rc < 0)
		return rc;
	const bool still = bands_still(m, q);
	m->still = false;
	if (still) {
		*out = m->last;
		memset(&m->vel, 0, sizeof(m->vel));
		m->still = true;
		/* the residual at the held pose keeps the drop's median up to date */
		if (m->nseen >= BE_MOTION_WARM && m->have_ob) {
			uint32_t nok;
			memcpy(m->be, m->b0, m->nn * sizeof(float));
			log_residual(m,
			             residual(m, ox, oy, out, m->r0, &nok) / (nok > 0 ? nok : 1));
		}
		return 0;
	}
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
	rc = bands(ctx, dz, m->be);
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
	if (residual_jumped(m, cn)) {
		m->lost = true;
		m->nclog = 0;
	}
	log_residual(m, cn);
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

	/* still (the stillness test): the last entry at this offset shows the tissue where it is
	 * now, so it takes this epoch's pose */
	if (m->still) {
		for (uint32_t i = m->nh; i-- > 0;)
			if (m->hist[i].ox == ox && m->hist[i].oy == oy) {
				m->hist[i].pose = pose;
				break;
			}
	}

	/* the oldest entry leaves a full history; the slot: the first that no entry holds and
	 * that the last epoch's entries did not name (that epoch may still be read) */
	if (m->nh == m->cap) {
		memmove(m->hist, m->hist + 1, (m->nh - 1) * sizeof(*m->hist));
		m->nh--;
	}
	uint32_t s = 0;
	for (; s < m->nslots; s++) {
		bool used = m->prev[s];
		for (uint32_t i = 0; i < m->nh && !used; i++)
			used = m->hist[i].slot == s;
		if (!used)
			break;
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
	memset(m->prev, 0, m->nslots);
	for (uint32_t i = 0; i < m->nh; i++)
		m->prev[m->hist[i].slot] = 1;
	*ne = m->nh;
	*nref = m->nh > BE_MOTION_EXCL + 5 ? m->nh - BE_MOTION_EXCL : 0;
	return 0;
}

/* The reference's blur (docs/algorithms.md §2c), rows [part] of CHUNKS: along Y into tmp,
 * then those rows along X into ob; edges repeated; each output summed over the taps in order,
 * in double (rows at a time, so that the loops vectorize). */
struct blur_job {
	const float *in;
	double k[BE_MOTION_BLUR_TAPS];
	int r;
};

static void blur_part(struct be_motion *m, unsigned part, void *arg)
{
	const struct blur_job *j = arg;
	const struct be_motion_geom *g = &m->g;
	const int r = j->r;
	const size_t NB = BE_MOTION_NB, row = (size_t)g->X * NB;
	const uint32_t y0 = (uint32_t)((uint64_t)part * g->Y / CHUNKS);
	const uint32_t y1 = (uint32_t)((uint64_t)(part + 1) * g->Y / CHUNKS);
	double *acc = m->acc + part * row;

	for (uint32_t y = y0; y < y1; y++) {
		for (size_t i = 0; i < row; i++)
			acc[i] = 0.0;
		for (int i = -r; i <= r; i++) {
			int64_t yy = (int64_t)y + i;
			yy = yy < 0 ? 0 : yy >= g->Y ? g->Y - 1 : yy;
			const float *src = j->in + (size_t)yy * row;
			const double kk = j->k[i + r];
			for (size_t q = 0; q < row; q++)
				acc[q] += kk * src[q];
		}
		float *dst = m->tmp + (size_t)y * row;
		for (size_t q = 0; q < row; q++)
			dst[q] = (float)acc[q];
	}
	for (uint32_t y = y0; y < y1; y++) {
		const float *src = m->tmp + (size_t)y * row;
		float *dst = m->ob + (size_t)y * row;
		for (uint32_t x = 0; x < g->X; x++) {
			double a[BE_MOTION_NB] = {0};
			for (int i = -r; i <= r; i++) {
				int64_t xx = (int64_t)x + i;
				xx = xx < 0 ? 0 : xx >= g->X ? g->X - 1 : xx;
				const float *c = src + (size_t)xx * NB;
				for (size_t b = 0; b < NB; b++)
					a[b] += j->k[i + r] * c[b];
			}
			for (size_t b = 0; b < NB; b++)
				dst[(size_t)x * NB + b] = (float)a[b];
		}
	}
}

void be_motion_blur_taps(double *k, int *r)
{
	const int rr = (int)ceil(3.0 * BE_MOTION_BLUR);
	double ks = 0.0;

	for (int i = -rr; i <= rr; i++)
		ks += k[i + rr] = exp(-(double)(i * i) / (2.0 * BE_MOTION_BLUR * BE_MOTION_BLUR));
	for (int i = 0; i <= 2 * rr; i++)
		k[i] /= ks;
	*r = rr;
}

void be_motion_set_reference(struct be_motion *m, const float *ob)
{
	struct blur_job j = {.in = ob};

	be_motion_blur_taps(j.k, &j.r);
	pool_run(m, blur_part, &j, CHUNKS);
	m->have_ob = true;
}

void be_motion_set_reference_blurred(struct be_motion *m, const float *ob)
{
	memcpy(m->ob, ob, (size_t)m->g.Y * m->g.X * BE_MOTION_NB * sizeof(float));
	m->have_ob = true;
}
