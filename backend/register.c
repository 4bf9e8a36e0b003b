/* SPDX-License-Identifier: MIT */
/* docs/algorithms.md §2d: the registration of the registered mode (backend/register.h). */
#include "backend/register.h"

#include <math.h>

double be_reg_shift(const float *l, const float *r, uint32_t Z, double *corr)
{
	const int R = BE_REG_RANGE;
	double ml = 0.0, mr = 0.0, sl = 0.0, sr = 0.0, c[2 * BE_REG_RANGE + 1];

	*corr = 0.0;
	for (uint32_t z = 0; z < Z; z++) {
		ml += l[z];
		mr += r[z];
	}
	ml /= (double)Z;
	mr /= (double)Z;
	for (uint32_t z = 0; z < Z; z++) {
		sl += ((double)l[z] - ml) * ((double)l[z] - ml);
		sr += ((double)r[z] - mr) * ((double)r[z] - mr);
	}
	if (!(sl > 0.0) || !(sr > 0.0))
		return 0.0;
	const double norm = 1.0 / sqrt(sl * sr);
	int best = 0;
	for (int d = -R; d <= R; d++) {
		double s = 0.0;
		int64_t z0 = d < 0 ? -d : 0, z1 = d > 0 ? (int64_t)Z - d : (int64_t)Z;
		for (int64_t z = z0; z < z1; z++)
			s += ((double)l[z + d] - ml) * ((double)r[z] - mr);
		c[d + R] = s * norm;
		if (c[d + R] > c[best])
			best = d + R;
	}
	if (best == 0 || best == 2 * R)
		return 0.0;
	*corr = c[best];
	double a = c[best - 1], b = c[best], e = c[best + 1], den = a - 2.0 * b + e;
	double frac = den < 0.0 ? 0.5 * (a - e) / den : 0.0;
	return (double)(best - R) + frac;
}

/* The weighted least-squares plane of the shifts (Gaussian elimination with partial
 * pivoting on the 3 x 3 normal equations). */
static bool fit_once(const double *d, const double *w, const uint32_t *ys, const uint32_t *xs,
                     size_t n, uint32_t Yn, uint32_t Xn, struct be_reg_plane *p)
{
	double A[3][4] = {{0}};
	size_t used = 0;
	const double xc = 0.5 * ((double)Xn - 1.0), yc = 0.5 * ((double)Yn - 1.0);

	for (size_t i = 0; i < n; i++) {
		if (!(w[i] > 0.0))
			continue;
		const double v[3] = {1.0, (double)xs[i] - xc, (double)ys[i] - yc};
		for (int r = 0; r < 3; r++) {
			for (int k = 0; k < 3; k++)
				A[r][k] += w[i] * v[r] * v[k];
			A[r][3] += w[i] * v[r] * d[i];
		}
		used++;
	}
	if (used < BE_REG_MIN_SAMPLES)
		return false;
	for (int k = 0; k < 3; k++) {
		int piv = k;
		for (int r = k + 1; r < 3; r++)
			if (fabs(A[r][k]) > fabs(A[piv][k]))
				piv = r;
		if (!(fabs(A[piv][k]) > 1e-12 * (fabs(A[0][0]) + 1e-300)))
			return false;
		for (int c = 0; c < 4; c++) {
			double t = A[k][c];
			A[k][c] = A[piv][c];
			A[piv][c] = t;
		}
		for (int r = k + 1; r < 3; r++) {
			double f = A[r][k] / A[k][k];
			for (int c = k; c < 4; c++)
				A[r][c] -= f * A[k][c];
		}
	}
	double x[3];
	for (int k = 2; k >= 0; k--) {
		double s = A[k][3];
		for (int c = k + 1; c < 3; c++)
			s -= A[k][c] * x[c];
		x[k] = s / A[k][k];
	}
	p->c = x[0];
	p->ax = x[1];
	p->ay = x[2];
	return true;
}

bool be_reg_fit(const double *d, double *w, const uint32_t *ys, const uint32_t *xs, size_t n,
                uint32_t Yn, uint32_t Xn, struct be_reg_plane *p)
{
	p->c = p->ax = p->ay = 0.0;
	if (!fit_once(d, w, ys, xs, n, Yn, Xn, p))
		return false;
	for (size_t i = 0; i < n; i++)
		if (w[i] > 0.0 &&
		    fabs(d[i] - be_reg_plane_at(p, ys[i], xs[i], Yn, Xn)) > BE_REG_OUTLIER)
			w[i] = 0.0;
	if (!fit_once(d, w, ys, xs, n, Yn, Xn, p)) {
		p->c = p->ax = p->ay = 0.0;
		return false;
	}
	/* significance: the plane's reduction of the weighted sum of squares of the shifts
	 * against its residual, per degree of freedom (an F ratio) */
	double ss0 = 0.0, ss1 = 0.0;
	size_t used = 0;
	for (size_t i = 0; i < n; i++) {
		if (!(w[i] > 0.0))
			continue;
		double r = d[i] - be_reg_plane_at(p, ys[i], xs[i], Yn, Xn);
		ss0 += w[i] * d[i] * d[i];
		ss1 += w[i] * r * r;
		used++;
	}
	if (!((ss0 - ss1) / 3.0 > BE_REG_MIN_F * ss1 / (double)(used - 3)))
		p->c = p->ax = p->ay = 0.0;
	return true;
}
