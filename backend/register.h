/* SPDX-License-Identifier: MIT */
/*
 * Registered reconstruction (reconstruct.mode registered, docs/algorithms.md §2d): the
 * backend-independent part. Each epoch's new samples are registered against the running
 * reconstruction: per sample an axial shift (the normalized cross-correlation of its A-scan
 * with the reconstruction's column at its position), then a plane fitted to those shifts over
 * the field, the axial part of a rigid motion (axial translation and the rotations about the
 * two lateral axes). The history is carried into the newest epoch's frame by that plane.
 */
#ifndef VOLREC_BACKEND_REGISTER_H
#define VOLREC_BACKEND_REGISTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define BE_REG_RANGE       8    /* axial search range (bins) */
#define BE_REG_MIN_CORR    0.3  /* correlation below which a sample's shift is not used */
#define BE_REG_OUTLIER     1.5  /* residual (bins) beyond which a shift leaves the second fit */
#define BE_REG_MIN_F       20.0 /* F ratio below which the plane is not significant: 0 */
#define BE_REG_MIN_SAMPLES 6    /* shifts a fit needs */

/* An axial plane over the output's columns: the shift (bins, tissue deeper for > 0) at column
 * (Y, X) is c + ax (X - xc) + ay (Y - yc), xc = (X_n - 1) / 2, yc = (Y_n - 1) / 2. */
struct be_reg_plane {
	double c, ax, ay;
};

/* The shift at column (Y, X) of an output of Xn x Yn columns. */
static inline double be_reg_plane_at(const struct be_reg_plane *p, uint32_t Y, uint32_t X,
                                     uint32_t Yn, uint32_t Xn)
{
	return p->c + p->ax * ((double)X - 0.5 * ((double)Xn - 1.0)) +
	       p->ay * ((double)Y - 0.5 * ((double)Yn - 1.0));
}

/* The axial shift of column l against reference column r (Z bins each): the d in
 * [-BE_REG_RANGE, BE_REG_RANGE] maximising the normalized cross-correlation
 * sum_z (l[z + d] - mean l)(r[z] - mean r) / sqrt(sum (l - mean l)^2 sum (r - mean r)^2) (over
 * the overlap, means over the whole columns, in double; the first maximum), refined by the
 * parabola through its neighbours. *corr: the correlation at the integer maximum; 0 (and the
 * result 0) for a flat column, and when the maximum lies at either end of the range. */
double be_reg_shift(const float *l, const float *r, uint32_t Z, double *corr);

/* The plane of the shifts d[i] measured at columns (ys[i], xs[i]), i < n, with weights w[i]
 * (0: unused; w is changed: the second fit's outliers get 0): weighted least squares, then
 * again without the shifts whose residual exceeds BE_REG_OUTLIER. false (and *p all 0) when
 * fewer than BE_REG_MIN_SAMPLES shifts have weight or the system is singular; a plane that is
 * not significant (its reduction of the weighted sum of squares of the shifts, per its 3
 * degrees of freedom, at most BE_REG_MIN_F times the residual's per degree of freedom) is
 * returned as 0 (true). */
bool be_reg_fit(const double *d, double *w, const uint32_t *ys, const uint32_t *xs, size_t n,
                uint32_t Yn, uint32_t Xn, struct be_reg_plane *p);

#endif
