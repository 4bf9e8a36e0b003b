/* SPDX-License-Identifier: MIT */
/*
 * Per-configuration tables of the CUDA backend, computed once in double on the host from the
 * shared tables of backend/tables.c: gather indices and weights (linear, cubic, and the
 * natural cubic spline as an exact-to-float FIR), window, dispersion, reference background.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/tables.h"
#include "gpu/gpu.h"

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
		/* the spline's interval [i, i + 1] and its weights of y_i, y_i+1, M_i, M_i+1 */
		int32_t ib;
		double sw[4];
		be_resample_weights(CFG_RS_SPLINE, p[j], K, &ib, sw);
		const uint32_t i = (uint32_t)ib;
		const int64_t base = (int64_t)i - WOFF;
		/* weights of y_q in w[q - base]; M_m = sum_n Ainv[m][n] 6 (y_{n+1} - 2 y_n + y_{n-1}) */
		for (size_t q = 0; q < WN; q++)
			w[q] = 0;
		w[i - base] += sw[0];
		w[i + 1 - base] += sw[1];
		for (uint32_t side = 0; side < 2; side++) {
			uint32_t m = i + side, hi;
			double coef = sw[2 + side];
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
	be_positions(cfg, K, p);
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
		double w[4];
		be_resample_weights(cfg->preprocess.resample.method, p[j], K, &t->rs_idx[j], w);
		for (uint32_t q = 0; q < t->taps; q++)
			t->rs_w[(size_t)q * K + j] = (float)w[q];
	}
	rc = 0;
out:
	free(p);
	return rc;
}

int gpu_tables_live(const struct vr_config *cfg, struct gpu_tables *t, char *err, size_t errlen)
{
	const uint32_t K = cfg->geometry.samples_per_ascan;
	float *win = NULL, *dc = NULL, *ds = NULL;

	win = malloc(sizeof(float) * K);
	if (!win)
		goto oom;
	be_window_fill(cfg->preprocess.window.type, cfg->preprocess.window.param, K, win);
	if (cfg->preprocess.dispersion.kind != CFG_DISP_NONE) {
		dc = malloc(sizeof(float) * K);
		ds = malloc(sizeof(float) * K);
		if (!dc || !ds)
			goto oom;
		/* window folded in, as win[j] * exp(-i phi[j]) */
		be_dispersion_fill(cfg, K, win, dc, ds);
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
	rc = gpu_resample_tables(cfg, t, err, errlen);
	if (rc < 0)
		goto fail;
	rc = gpu_tables_live(cfg, t, err, errlen);
	if (rc < 0)
		goto fail;
	if (cfg->preprocess.background.mode == CFG_BG_REFERENCE) {
		const struct cfg_table *r = &cfg->preprocess.background.reference;
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
