/* SPDX-License-Identifier: MIT */
/*
 * Per-configuration tables of the CUDA backend, computed once in double on the host:
 * resampling positions turned into gather indices and weights (linear, cubic, and the natural
 * cubic spline as an exact-to-float FIR), window, dispersion phase, reference background.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

void gpu_tables_free(struct gpu_tables *t)
{
	if (!t)
		return;
	free(t->rs_idx);
	free(t->rs_w);
	free(t->window);
	free(t->disp_re);
	free(t->disp_im);
	free(t->reference);
	memset(t, 0, sizeof(*t));
}

static double gpu_clampd(double v, double lo, double hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

static double gpu_kappa(const double *l, uint32_t i)
{
	double x = i;
	return 2.0 * M_PI / (l[0] + x * (l[1] + x * (l[2] + x * l[3])));
}

/* Fractional input positions p[j] (ALGORITHMS.md §1.2) clamped to [0, K-1], computed exactly
 * as the CPU reference does (docs/algorithms.md). */
static int gpu_positions(const struct vr_config *cfg, double *p, char *err, size_t errlen)
{
	const __typeof__(cfg->preprocess.resample) *rs = &cfg->preprocess.resample;
	const uint32_t K = cfg->geometry.samples_per_ascan;
	const double top = (double)(K - 1);

	switch (rs->positions) {
	case CFG_RSPOS_TABLE:
		if (!rs->table.data || rs->table.len != K) {
			snprintf(err, errlen,
			         "preprocess.resample.table: %zu values loaded, %u needed (one per "
			         "sample)",
			         rs->table.data ? rs->table.len : (size_t)0, K);
			return -EINVAL;
		}
		for (uint32_t j = 0; j < K; j++) {
			if (!isfinite(rs->table.data[j])) {
				snprintf(err, errlen,
				         "preprocess.resample.table: value %u is not finite", j);
				return -EINVAL;
			}
			p[j] = gpu_clampd(rs->table.data[j], 0.0, top);
		}
		return 0;
	case CFG_RSPOS_POLY:
		for (uint32_t j = 0; j < K; j++) {
			double u = K > 1 ? (double)j / top : 0.0;
			double v = rs->poly[0] +
			           u * (rs->poly[1] + u * (rs->poly[2] + u * rs->poly[3]));
			if (!isfinite(v)) {
				snprintf(err, errlen,
				         "preprocess.resample.poly: not finite at j=%u", j);
				return -EINVAL;
			}
			p[j] = gpu_clampd(v, 0.0, top);
		}
		return 0;
	case CFG_RSPOS_WAVELENGTH: {
		const double *l = rs->wavelength_nm;
		uint32_t i = 0;

		if (K < 2) {
			for (uint32_t j = 0; j < K; j++)
				p[j] = 0.0;
			return 0;
		}
		for (uint32_t ii = 0; ii < K; ii++) {
			double lam = l[0] + ii * (l[1] + ii * (l[2] + ii * l[3]));
			if (!(lam > 0.0) || !isfinite(lam)) {
				snprintf(err, errlen,
				         "preprocess.resample.wavelength_nm: lambda(%u) = %g nm, "
				         "must "
				         "be > 0 on every pixel",
				         ii, lam);
				return -EINVAL;
			}
		}
		const double kap0 = gpu_kappa(l, 0), kapn = gpu_kappa(l, K - 1);
		const double s = kapn > kap0 ? 1.0 : -1.0;
		for (uint32_t ii = 0; ii + 1 < K; ii++) {
			if (!(s * (gpu_kappa(l, ii + 1) - gpu_kappa(l, ii)) > 0.0)) {
				snprintf(err, errlen,
				         "preprocess.resample.wavelength_nm: wavenumber "
				         "2*pi/lambda(i) "
				         "is not strictly monotone (pixels %u and %u)",
				         ii, ii + 1);
				return -EINVAL;
			}
		}
		for (uint32_t j = 0; j < K; j++) {
			double kt = kap0 + (kapn - kap0) * (double)j / top;
			while (i < K - 2 && s * gpu_kappa(l, i + 1) < s * kt)
				i++;
			double ki = gpu_kappa(l, i), k1 = gpu_kappa(l, i + 1);
			p[j] = gpu_clampd((double)i + (kt - ki) / (k1 - ki), 0.0, top);
		}
		return 0;
	}
	case CFG_RSPOS_NONE:
	default:
		snprintf(err, errlen,
		         "preprocess.resample: method %s needs positions (table, poly or "
		         "wavelength_nm)",
		         cfg_resample_name(rs->method));
		return -EINVAL;
	}
}

#define GPU_SPLINE_W 64 /* half-width of the sub-system solved per row */

/* Row m (1 <= m <= K-2) of the inverse on [lo, hi]: row[n - lo]; returns lo, writes *hi. */
static uint32_t gpu_inv_row(uint32_t K, uint32_t m, double *row, double *cp, double *dp,
                            uint32_t *hi_out)
{
	const uint32_t W = GPU_SPLINE_W;
	uint32_t lo = m > W + 1 ? m - W : 1, hi = m + W < K - 2 ? m + W : K - 2;
	uint32_t n = hi - lo + 1;

	/* Thomas on the sub-system (4 on the diagonal, 1 beside) with e_m on the right. */
	for (uint32_t q = 0; q < n; q++) {
		double den = 4 - (q ? cp[q - 1] : 0);
		cp[q] = (q + 1 < n ? 1 : 0) / den;
		dp[q] = ((lo + q == m ? 1 : 0) - (q ? dp[q - 1] : 0)) / den;
	}
	for (uint32_t q = n; q-- > 0;)
		row[q] = dp[q] - (q + 1 < n ? cp[q] * row[q + 1] : 0);
	*hi_out = hi;
	return lo;
}

static int gpu_spline_fir(uint32_t K, const double *p, struct gpu_tables *t, char *err,
                          size_t errlen)
{
	const uint32_t T = K < 2 * GPU_SPLINE_R + 2 ? K : 2 * GPU_SPLINE_R + 2;
	const size_t WN = 2 * GPU_SPLINE_W + 8;
	/* w covers input indices [i - WOFF, i - WOFF + WN) */
	const int64_t WOFF = GPU_SPLINE_W + 3;
	double *row = NULL, *cp = NULL, *dp = NULL, *w = NULL;
	int rc = -ENOMEM;

	t->taps = T;
	t->rs_idx = malloc(sizeof(int32_t) * K);
	t->rs_w = malloc(sizeof(float) * (size_t)T * K);
	row = malloc(sizeof(double) * WN);
	cp = malloc(sizeof(double) * WN);
	dp = malloc(sizeof(double) * WN);
	w = malloc(sizeof(double) * WN);
	if (!t->rs_idx || !t->rs_w || !row || !cp || !dp || !w) {
		snprintf(err, errlen, "out of memory for the spline tables (K = %u)", K);
		goto out;
	}
	for (uint32_t j = 0; j < K; j++) {
		if (K < 3) { /* no interior second derivative: the spline is linear */
			t->rs_idx[j] = 0;
			t->rs_w[j] = K == 1 ? 1.0f : (float)(1 - p[j]);
			if (K == 2)
				t->rs_w[(size_t)K + j] = (float)p[j];
			continue;
		}
		uint32_t i = (uint32_t)floor(p[j]);
		if (i > K - 2)
			i = K - 2;
		const int64_t base = (int64_t)i - WOFF;
		double tt = p[j] - i, a = ((1 - tt) * (1 - tt) * (1 - tt) - (1 - tt)) / 6,
		       b = (tt * tt * tt - tt) / 6;
		/* weights of y_q in w[q - base]; M_m = sum_n Ainv[m][n] 6 (y_{n+1} - 2 y_n + y_{n-1}) */
		for (size_t q = 0; q < WN; q++)
			w[q] = 0;
		w[i - base] += 1 - tt;
		w[i + 1 - base] += tt;
		for (uint32_t side = 0; side < 2; side++) {
			uint32_t m = i + side, hi;
			double coef = side ? b : a;
			if (m == 0 || m == K - 1)
				continue; /* natural end: M = 0 */
			uint32_t lo = gpu_inv_row(K, m, row, cp, dp, &hi);
			for (uint32_t n = lo; n <= hi; n++) {
				double c = 6 * coef * row[n - lo];
				w[n - 1 - base] += c;
				w[n - base] -= 2 * c;
				w[n + 1 - base] += c;
			}
		}
		int64_t start = (int64_t)i - GPU_SPLINE_R;
		if (start < 0)
			start = 0;
		if (start > (int64_t)(K - T))
			start = K - T;
		t->rs_idx[j] = (int32_t)start;
		for (uint32_t m = 0; m < T; m++) {
			int64_t q = start + m - base;
			t->rs_w[(size_t)m * K + j] = q >= 0 && q < (int64_t)WN ? (float)w[q] : 0.0f;
		}
	}
	rc = 0;
out:
	free(row);
	free(cp);
	free(dp);
	free(w);
	return rc;
}

static int gpu_resample_tables(const struct vr_config *cfg, struct gpu_tables *t, char *err,
                               size_t errlen)
{
	const uint32_t K = cfg->geometry.samples_per_ascan;
	double *p;
	int rc;

	if (cfg->preprocess.resample.method == CFG_RS_NONE) {
		t->taps = 0;
		return 0;
	}
	p = malloc(sizeof(double) * K);
	if (!p) {
		snprintf(err, errlen, "out of memory for the resampling positions (K = %u)", K);
		return -ENOMEM;
	}
	rc = gpu_positions(cfg, p, err, errlen);
	if (rc < 0)
		goto out;
	if (cfg->preprocess.resample.method == CFG_RS_SPLINE) {
		rc = gpu_spline_fir(K, p, t, err, errlen);
		goto out;
	}
	t->taps = cfg->preprocess.resample.method == CFG_RS_LINEAR ? 2 : 4;
	t->rs_idx = malloc(sizeof(int32_t) * K);
	t->rs_w = malloc(sizeof(float) * (size_t)t->taps * K);
	if (!t->rs_idx || !t->rs_w) {
		snprintf(err, errlen, "out of memory for the resampling tables (K = %u)", K);
		rc = -ENOMEM;
		goto out;
	}
	for (uint32_t j = 0; j < K; j++) {
		int32_t i = (int32_t)floor(p[j]);
		if (i > (int32_t)K - 1)
			i = (int32_t)K - 1;
		double tt = p[j] - i;
		if (t->taps == 2) {
			t->rs_idx[j] = i;
			t->rs_w[j] = (float)(1 - tt);
			t->rs_w[(size_t)K + j] = (float)tt;
		} else {
			t->rs_idx[j] = i - 1;
			t->rs_w[j] = (float)(-tt * (tt - 1) * (tt - 2) / 6);
			t->rs_w[(size_t)K + j] = (float)((tt + 1) * (tt - 1) * (tt - 2) / 2);
			t->rs_w[(size_t)2 * K + j] = (float)(-(tt + 1) * tt * (tt - 2) / 2);
			t->rs_w[(size_t)3 * K + j] = (float)((tt + 1) * tt * (tt - 1) / 6);
		}
	}
	rc = 0;
out:
	free(p);
	return rc;
}

/* Window value at j of K (ALGORITHMS.md §1.3, symmetric; the formulas of docs/algorithms.md,
 * written as the CPU reference computes them). */
static double gpu_window_value(enum cfg_window type, double param, uint32_t j, uint32_t K)
{
	const double M = K > 1 ? (double)(K - 1) : 1.0, r = (double)j / M;

	if (K == 1)
		return 1.0;
	switch (type) {
	case CFG_WIN_HANN:
		return 0.5 - 0.5 * cos(2.0 * M_PI * r);
	case CFG_WIN_HAMMING:
		return 0.54 - 0.46 * cos(2.0 * M_PI * r);
	case CFG_WIN_BLACKMAN:
		return 0.42 - 0.5 * cos(2.0 * M_PI * r) + 0.08 * cos(4.0 * M_PI * r);
	case CFG_WIN_GAUSS: {
		double h = M / 2.0, u = ((double)j - h) / (param * h);
		return exp(-0.5 * u * u);
	}
	case CFG_WIN_TUKEY:
		if (param <= 0.0)
			return 1.0;
		if (r < param / 2.0)
			return 0.5 - 0.5 * cos(2.0 * M_PI * r / param);
		if (r > 1.0 - param / 2.0)
			return 0.5 - 0.5 * cos(2.0 * M_PI * (1.0 - r) / param);
		return 1.0;
	case CFG_WIN_NONE:
	default:
		return 1.0;
	}
}

int gpu_tables_live(const struct vr_config *cfg, struct gpu_tables *t, char *err, size_t errlen)
{
	const uint32_t K = cfg->geometry.samples_per_ascan;
	float *win = malloc(sizeof(float) * K), *dc = NULL, *ds = NULL;

	if (!win)
		goto oom;
	for (uint32_t j = 0; j < K; j++)
		win[j] = (float)gpu_window_value(cfg->preprocess.window.type,
		                                 cfg->preprocess.window.param, j, K);
	if (cfg->preprocess.dispersion.kind != CFG_DISP_NONE) {
		const double km1 = K > 1 ? (double)(K - 1) : 1.0;
		if (cfg->preprocess.dispersion.kind == CFG_DISP_TABLE &&
		    (!cfg->preprocess.dispersion.table.data ||
		     cfg->preprocess.dispersion.table.len != K)) {
			snprintf(err, errlen,
			         "preprocess.dispersion.table: %zu values loaded, %u (K) needed",
			         cfg->preprocess.dispersion.table.len, K);
			free(win);
			return -EINVAL;
		}
		dc = malloc(sizeof(float) * K);
		ds = malloc(sizeof(float) * K);
		if (!dc || !ds)
			goto oom;
		for (uint32_t j = 0; j < K; j++) {
			double phi;
			if (cfg->preprocess.dispersion.kind == CFG_DISP_TABLE) {
				phi = cfg->preprocess.dispersion.table.data[j];
			} else {
				double v = (K > 1 ? (double)j / km1 : 0.0) - 0.5;
				phi = cfg->preprocess.dispersion.coeffs[0] * v * v +
				      cfg->preprocess.dispersion.coeffs[1] * v * v * v;
			}
			/* window folded in, as win[j] * exp(-i phi[j]) */
			dc[j] = (float)((double)win[j] * cos(phi));
			ds[j] = (float)(-(double)win[j] * sin(phi));
		}
	}
	free(t->window);
	free(t->disp_re);
	free(t->disp_im);
	t->window = win;
	t->disp_re = dc;
	t->disp_im = ds;
	return 0;
oom:
	free(win);
	free(dc);
	free(ds);
	snprintf(err, errlen, "out of memory for the window/dispersion tables (K = %u)", K);
	return -ENOMEM;
}

int gpu_tables_build(const struct vr_config *cfg, struct gpu_tables *t, char *err, size_t errlen)
{
	const uint32_t K = cfg->geometry.samples_per_ascan;
	int rc;

	memset(t, 0, sizeof(*t));
	t->K = K;
	if (K == 0) {
		snprintf(err, errlen, "geometry.samples_per_ascan: 0 (at least 1 needed)");
		return -EINVAL;
	}
	rc = gpu_resample_tables(cfg, t, err, errlen);
	if (rc < 0)
		goto fail;
	rc = gpu_tables_live(cfg, t, err, errlen);
	if (rc < 0)
		goto fail;
	if (cfg->preprocess.background.mode == CFG_BG_REFERENCE) {
		const struct cfg_table *r = &cfg->preprocess.background.reference;
		if (!r->data || r->len != K) {
			snprintf(
			        err, errlen,
			        "preprocess.background.reference: %zu values loaded, %u (K) needed",
			        r->len, K);
			rc = -EINVAL;
			goto fail;
		}
		t->reference = malloc(sizeof(float) * K);
		if (!t->reference) {
			snprintf(err, errlen, "out of memory for the reference spectrum");
			rc = -ENOMEM;
			goto fail;
		}
		for (uint32_t k = 0; k < K; k++)
			t->reference[k] = (float)r->data[k];
	}
	return 0;
fail:
	gpu_tables_free(t);
	return rc;
}

double gpu_temporal_weight(const struct vr_config *cfg, uint64_t age)
{
	const double S = cfg_stride_area(cfg);

	if (cfg->reconstruct.temporal == CFG_TEMPORAL_EXP)
		return exp(-(double)age / cfg->reconstruct.tau);
	return age >= (uint64_t)S ? 0.0 : (S - (double)age) / S;
}
