/* SPDX-License-Identifier: MIT */
/*
 * Per-configuration tables of the CPU backend, stored as float32: the shared tables of
 * backend/tables.c laid out for the CPU kernels, the natural-spline factors, the median of
 * the bscan_median background, and the resampling of one A-scan (docs/algorithms.md).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backend/tables.h"
#include "cpu/internal.h"

/* Hoare selection: afterwards v[k] is the k-th smallest and v[0..k) <= v[k] <= v(k..n). */
static void select_kth(float *v, size_t n, size_t k)
{
	size_t lo = 0, hi = n - 1;

	while (lo < hi) {
		float pivot = v[lo + (hi - lo) / 2];
		size_t i = lo, j = hi;
		while (i <= j) {
			while (v[i] < pivot)
				i++;
			while (v[j] > pivot)
				j--;
			if (i <= j) {
				float t = v[i];
				v[i] = v[j];
				v[j] = t;
				i++;
				if (j == 0)
					break;
				j--;
			}
		}
		if (k <= j)
			hi = j;
		else if (k >= i)
			lo = i;
		else
			return;
	}
}

float cpu_median(float *v, size_t n)
{
	size_t h = n / 2;

	if (n == 0)
		return 0.0f;
	select_kth(v, n, h);
	if (n % 2)
		return v[h];
	/* the lower middle is the largest of v[0..h) */
	float m = v[0];
	for (size_t i = 1; i < h; i++)
		if (v[i] > m)
			m = v[i];
	return (float)(((double)m + (double)v[h]) / 2.0);
}

int cpu_params_build(struct cpu_state *st, const struct vr_config *cfg, char *err, size_t errlen)
{
	struct cpu_params *p = &st->p;
	const uint32_t K = st->geo.K;

	/* the tables and values as the schema accepted them (cfg_check_backend); a failure
	 * leaves the old tables in place */
	if (cfg->preprocess.background.mode == CFG_BG_PARTIAL_MEDIAN && !st->pm_ready)
		return vr_err(
		        err, errlen, -EINVAL,
		        "cpu backend: partial_median buffers are not allocated (cpu_pm_alloc)");

	be_live_init(&p->live, cfg);
	if (p->live.resample != CFG_RS_NONE)
		be_positions(cfg, K, st->pos_tmp);
	if (p->live.background == CFG_BG_REFERENCE)
		for (uint32_t k = 0; k < K; k++)
			p->bg_ref[k] = (float)cfg->preprocess.background.reference.data[k];

	for (uint32_t j = 0; p->live.resample != CFG_RS_NONE && j < K; j++) {
		double w[4];
		be_resample_weights(p->live.resample, st->pos_tmp[j], K, &p->rs_idx[j], w);
		for (int q = 0; q < 4; q++)
			p->rs_w[4 * j + q] = (float)w[q];
	}
	/* Thomas factors of the (1 4 1) system for M[1..K-2]: c[i] = 1 / (4 - c[i-1]) */
	if (p->live.resample == CFG_RS_SPLINE) {
		double c = 0.0;
		for (uint32_t i = 0; i < K; i++) {
			if (i >= 1 && i + 1 < K) {
				c = 1.0 / (4.0 - c);
				p->spl_c[i] = (float)c;
			} else {
				p->spl_c[i] = 0.0f;
			}
		}
	}

	be_window_fill(cfg->preprocess.window.type, cfg->preprocess.window.param, K, p->win);
	if (p->live.dispersion)
		be_dispersion_fill(cfg, K, p->win, p->disp_re, p->disp_im);

	for (int dy = -1; dy <= 1; dy++)
		for (int dx = -1; dx <= 1; dx++)
			p->gxy[(dy + 1) * 3 + dx + 1] = p->live.g[dx * dx + dy * dy];
	for (int dz = -1; dz <= 1; dz++)
		p->gz[dz + 1] = p->live.g[dz * dz];
	return 0;
}

void cpu_resample(const struct cpu_params *p, uint32_t K, const float *x, float *y, float *m)
{
	const int32_t last = (int32_t)K - 1;

	switch (p->live.resample) {
	case CFG_RS_NONE:
		memcpy(y, x, K * sizeof(*y));
		break;
	case CFG_RS_LINEAR:
		for (uint32_t j = 0; j < K; j++) {
			int32_t i = p->rs_idx[j], i1 = i < last ? i + 1 : last;
			y[j] = p->rs_w[4 * j] * x[i] + p->rs_w[4 * j + 1] * x[i1];
		}
		break;
	case CFG_RS_CUBIC:
		for (uint32_t j = 0; j < K; j++) {
			int32_t b = p->rs_idx[j];
			const float *w = &p->rs_w[4 * j];
			if (b >= 0 && b + 3 <= last) {
				y[j] = w[0] * x[b] + w[1] * x[b + 1] + w[2] * x[b + 2] +
				       w[3] * x[b + 3];
			} else {
				float acc = 0.0f;
				for (int q = 0; q < 4; q++) {
					int32_t i = b + q;
					i = i < 0 ? 0 : i > last ? last : i;
					acc += w[q] * x[i];
				}
				y[j] = acc;
			}
		}
		break;
	case CFG_RS_SPLINE:
		/* natural spline: M[0] = M[K-1] = 0, M[i-1] + 4 M[i] + M[i+1] = 6 (x[i+1] - 2 x[i]
		 * + x[i-1]); forward sweep then back substitution with the stored factors */
		m[0] = 0.0f;
		if (K < 3) {
			for (uint32_t i = 0; i < K; i++)
				m[i] = 0.0f;
		} else {
			m[K - 1] = 0.0f;
			float prev = 0.0f;
			for (uint32_t i = 1; i + 1 < K; i++) {
				float r = 6.0f * (x[i + 1] - 2.0f * x[i] + x[i - 1]);
				prev = (r - prev) * p->spl_c[i];
				m[i] = prev;
			}
			for (uint32_t i = K - 2; i >= 1; i--)
				m[i] -= p->spl_c[i] * m[i + 1];
		}
		if (K < 2) {
			y[0] = x[0];
			break;
		}
		for (uint32_t j = 0; j < K; j++) {
			int32_t i = p->rs_idx[j];
			const float *w = &p->rs_w[4 * j];
			y[j] = w[0] * x[i] + w[1] * x[i + 1] + w[2] * m[i] + w[3] * m[i + 1];
		}
		break;
	}
}
