/* SPDX-License-Identifier: MIT */
/*
 * Host-side tables of the numerical contract (docs/algorithms.md) that both backends use, so
 * that the CUDA backend computes from exactly the numbers the CPU reference does: resampling
 * positions and kernel weights, window, dispersion phasors, spatial and temporal weights.
 */
#ifndef VOLREC_BACKEND_TABLES_H
#define VOLREC_BACKEND_TABLES_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "config/config.h"

/* Fill win[0..K-1] with the window of docs/algorithms.md §1.5 (docs/algorithms.md gives the
 * formulas), in double, stored as float; param is sigma (gauss) or alpha (tukey). */
void be_window_fill(enum cfg_window type, double param, uint32_t K, float *win);

/* Resampling positions p[0..K-1] (docs/algorithms.md §1.3, clamped to [0, K-1]) from the
 * configured table, poly or wavelength_nm of cfg, a configuration the schema accepted (it
 * checks the table's length and values, the polynomial's finite values and the wavelengths'
 * monotone wavenumbers); with no positions (method none), p[j] = j. */
void be_positions(const struct vr_config *cfg, uint32_t K, double *p);

/* Kernel weights of one output sample at position pos (in [0, K-1]) for method linear, cubic
 * or spline, in double: *base is the first input index and w[0..3] its weights.
 * linear: base = floor(pos), w = (1 - t, t, 0, 0); cubic: base = floor(pos) - 1, the four
 * Lagrange weights (indices to be clamped to [0, K-1] on use); spline: base = i, the interval
 * [i, i + 1] (i <= K - 2), w = (A, B, (A^3 - A) / 6, (B^3 - B) / 6) multiplying y[i], y[i+1],
 * M[i], M[i+1] (the second derivatives). */
void be_resample_weights(enum cfg_resample method, double pos, uint32_t K, int32_t *base,
                         double w[4]);

/* Dispersion phasors win[j] * exp(-i phi[j]) (docs/algorithms.md §1.6) into re[0..K-1] and
 * im[0..K-1], phi from preprocess.dispersion (coeffs, or its table of K finite values, as the
 * schema accepts it). Only for a dispersion kind other than none. */
void be_dispersion_fill(const struct vr_config *cfg, uint32_t K, const float *win, float *re,
                        float *im);

/* Unnormalized Gaussian spatial weight exp(-d2 / (2 sigma^2)) of a neighbour at squared
 * distance d2 = dx^2 + dy^2 (+ dz^2) (docs/algorithms.md §2.4), as float; sigma as the schema
 * accepts it (>= CFG_SPATIAL_SIGMA_MIN). */
float be_spatial_weight(double sigma, unsigned d2);

/* Temporal weight of an A-scan written age epochs ago (docs/algorithms.md §2.3), in double:
 * linear max(S - age, 0) / S, exp exp(-age / tau). */
double be_temporal_weight(enum cfg_temporal temporal, uint32_t S, double tau, double age);

/* Change measure of a sampled position whose history is unknown (never written): large
 * enough that exp(-d / tolerance^2) is 0 for every allowed tolerance (docs/algorithms.md §2b). */
#define BE_ADAPT_UNKNOWN 1e6

/* The adaptive mode's jump recovery (docs/algorithms.md §2b, "Recovery after a jump"): a
 * sample agrees with its history when d < BE_JUMP_STILL * tolerance^2; an epoch is still when
 * at least BE_JUMP_STILL_FRACTION of its samples agree; the scene is settled after
 * BE_JUMP_SETTLED still epochs in a row; it moved since the last epoch when the change of the
 * mean A-scan exceeds BE_JUMP_RATIO times its still level. */
#define BE_JUMP_STILL          0.5
#define BE_JUMP_STILL_FRACTION 0.9
#define BE_JUMP_SETTLED        5
#define BE_JUMP_RATIO          3.0

/* Linear interpolation of the current epoch along one axis (docs/algorithms.md §2b): full
 * resolution index f, offset off, stride s, n low-resolution samples. Position
 * p = clamp((f - off) / s, 0, n - 1); *i0 = min(floor(p), n - 2), *i1 = *i0 + 1,
 * *t = p - *i0 (n = 1: 0, 0, 0). In double, t stored as float. */
void be_interp_axis(uint32_t f, uint32_t off, uint32_t s, uint32_t n, uint32_t *i0, uint32_t *i1,
                    float *t);

#endif
