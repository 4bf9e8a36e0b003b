/* SPDX-License-Identifier: MIT */
/*
 * Per-configuration tables of the CPU backend: window, resampling positions and kernel
 * weights, natural-spline factors, dispersion phasors and reconstruction weights, computed in
 * double once per configuration and stored as float32 (docs/algorithms.md).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

void cpu_window_fill(enum cfg_window type, double param, uint32_t K, float *win)
{
	double M = K > 1 ? (double)(K - 1) : 1.0;

	for (uint32_t j = 0; j < K; j++) {
		double r = (double)j / M, w = 1.0;

		switch (type) {
		case CFG_WIN_NONE:
			w = 1.0;
			break;
		case CFG_WIN_HANN:
			w = 0.5 - 0.5 * cos(2.0 * M_PI * r);
			break;
		case CFG_WIN_HAMMING:
			w = 0.54 - 0.46 * cos(2.0 * M_PI * r);
			break;
		case CFG_WIN_BLACKMAN:
			w = 0.42 - 0.5 * cos(2.0 * M_PI * r) + 0.08 * cos(4.0 * M_PI * r);
			break;
		case CFG_WIN_GAUSS: {
			double h = M / 2.0, u = ((double)j - h) / (param * h);
			w = exp(-0.5 * u * u);
			break;
		}
		case CFG_WIN_TUKEY:
			if (param <= 0.0)
				w = 1.0;
			else if (r < param / 2.0)
				w = 0.5 - 0.5 * cos(2.0 * M_PI * r / param);
			else if (r > 1.0 - param / 2.0)
				w = 0.5 - 0.5 * cos(2.0 * M_PI * (1.0 - r) / param);
			else
				w = 1.0;
			break;
		}
		if (K == 1)
			w = 1.0;
		win[j] = (float)w;
	}
}

static double clampd(double v, double lo, double hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

int cpu_positions(const struct vr_config *cfg, uint32_t K, double *p, char *err, size_t errlen)
{
	const __typeof__(cfg->preprocess.resample) *rs = &cfg->preprocess.resample;
	double top = (double)(K - 1);

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
			p[j] = clampd(rs->table.data[j], 0.0, top);
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
			p[j] = clampd(v, 0.0, top);
		}
		return 0;
	case CFG_RSPOS_WAVELENGTH: {
		const double *l = rs->wavelength_nm;
		double kap0 = 0, kapn = 0, s;
		uint32_t i = 0;

		if (K < 2) {
			for (uint32_t j = 0; j < K; j++)
				p[j] = 0.0;
			return 0;
		}
		/* kappa(i) goes into p first, then p is overwritten from the end backwards
		 * would alias: use the inversion walk on values recomputed on the fly. */
#define KAPPA(ii)                                                                                  \
	(2.0 * M_PI / (l[0] + (double)(ii) * (l[1] + (double)(ii) * (l[2] + (double)(ii)*l[3]))))
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
		kap0 = KAPPA(0);
		kapn = KAPPA(K - 1);
		s = kapn > kap0 ? 1.0 : -1.0;
		for (uint32_t ii = 0; ii + 1 < K; ii++) {
			if (!(s * (KAPPA(ii + 1) - KAPPA(ii)) > 0.0)) {
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
			while (i < K - 2 && s * KAPPA(i + 1) < s * kt)
				i++;
			double ki = KAPPA(i), k1 = KAPPA(i + 1);
			p[j] = clampd((double)i + (kt - ki) / (k1 - ki), 0.0, top);
		}
#undef KAPPA
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

static int load_table(const struct cfg_table *t, uint32_t K, const char *key, char *err,
                      size_t errlen)
{
	if (!t->data || t->len != K) {
		snprintf(err, errlen, "%s: %zu values loaded from '%s', %u needed", key,
		         t->data ? t->len : (size_t)0, t->path, K);
		return -EINVAL;
	}
	for (uint32_t j = 0; j < K; j++)
		if (!isfinite(t->data[j])) {
			snprintf(err, errlen, "%s: value %u of '%s' is not finite", key, j + 1,
			         t->path);
			return -EINVAL;
		}
	return 0;
}

int cpu_params_build(struct cpu_state *st, const struct vr_config *cfg, char *err, size_t errlen)
{
	struct cpu_params *p = &st->p;
	const uint32_t K = st->K;
	const double *ph = NULL;
	double lo = cfg->preprocess.db_range[0], hi = cfg->preprocess.db_range[1];
	int rc;

	/* validate everything first, so that a failure leaves the old tables in place */
	if (cfg->preprocess.background.mode == CFG_BG_REFERENCE) {
		rc = load_table(&cfg->preprocess.background.reference, K,
		                "preprocess.background.reference", err, errlen);
		if (rc < 0)
			return rc;
	}
	if (cfg->preprocess.resample.method != CFG_RS_NONE) {
		rc = cpu_positions(cfg, K, st->pos_tmp, err, errlen);
		if (rc < 0)
			return rc;
	}
	if (cfg->preprocess.dispersion.kind == CFG_DISP_TABLE) {
		rc = load_table(&cfg->preprocess.dispersion.table, K, "preprocess.dispersion.table",
		                err, errlen);
		if (rc < 0)
			return rc;
		ph = cfg->preprocess.dispersion.table.data;
	}
	if (!(hi > lo) || !isfinite(lo) || !isfinite(hi)) {
		snprintf(err, errlen, "preprocess.db_range: [%g, %g], need lo < hi", lo, hi);
		return -EINVAL;
	}
	if (cfg->reconstruct.mode != CFG_RECON_NONE &&
	    (!(cfg->reconstruct.spatial_sigma > 0) ||
	     (cfg->reconstruct.temporal == CFG_TEMPORAL_EXP && !(cfg->reconstruct.tau > 0)))) {
		snprintf(err, errlen, "reconstruct: spatial_sigma (%g) and tau (%g) must be > 0",
		         cfg->reconstruct.spatial_sigma, cfg->reconstruct.tau);
		return -EINVAL;
	}
	if (cfg->preprocess.window.type == CFG_WIN_GAUSS && !(cfg->preprocess.window.param > 0)) {
		snprintf(err, errlen, "preprocess.window.param: gauss sigma %g, must be > 0",
		         cfg->preprocess.window.param);
		return -EINVAL;
	}

	/* commit */
	p->bg_mode = cfg->preprocess.background.mode;
	if (p->bg_mode == CFG_BG_REFERENCE)
		for (uint32_t k = 0; k < K; k++)
			p->bg_ref[k] = (float)cfg->preprocess.background.reference.data[k];

	p->rs = cfg->preprocess.resample.method;
	for (uint32_t j = 0; p->rs != CFG_RS_NONE && j < K; j++) {
		double pos = st->pos_tmp[j];
		int32_t i = (int32_t)floor(pos);
		double t;
		float *w = &p->rs_w[4 * j];

		if (i > (int32_t)K - 1)
			i = (int32_t)K - 1;
		t = pos - i;
		switch (p->rs) {
		case CFG_RS_LINEAR:
			p->rs_idx[j] = i;
			w[0] = (float)(1.0 - t);
			w[1] = (float)t;
			w[2] = w[3] = 0.0f;
			break;
		case CFG_RS_CUBIC:
			p->rs_idx[j] = i - 1;
			w[0] = (float)(-t * (t - 1) * (t - 2) / 6.0);
			w[1] = (float)((t + 1) * (t - 1) * (t - 2) / 2.0);
			w[2] = (float)(-(t + 1) * t * (t - 2) / 2.0);
			w[3] = (float)((t + 1) * t * (t - 1) / 6.0);
			break;
		case CFG_RS_SPLINE: {
			double A, B;
			if (K >= 2 && i >= (int32_t)K - 1) {
				i = (int32_t)K - 2;
				t = pos - i;
			}
			A = 1.0 - t;
			B = t;
			p->rs_idx[j] = i;
			w[0] = (float)A;
			w[1] = (float)B;
			w[2] = (float)((A * A * A - A) / 6.0);
			w[3] = (float)((B * B * B - B) / 6.0);
			break;
		}
		case CFG_RS_NONE:
			break;
		}
	}
	/* Thomas factors of the (1 4 1) system for M[1..K-2]: c[i] = 1 / (4 - c[i-1]) */
	if (p->rs == CFG_RS_SPLINE) {
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

	cpu_window_fill(cfg->preprocess.window.type, cfg->preprocess.window.param, K, p->win);

	p->disp = cfg->preprocess.dispersion.kind != CFG_DISP_NONE;
	for (uint32_t j = 0; p->disp && j < K; j++) {
		double phi;
		if (ph) {
			phi = ph[j];
		} else {
			double v = (K > 1 ? (double)j / (double)(K - 1) : 0.0) - 0.5;
			phi = cfg->preprocess.dispersion.coeffs[0] * v * v +
			      cfg->preprocess.dispersion.coeffs[1] * v * v * v;
		}
		p->disp_re[j] = (float)((double)p->win[j] * cos(phi));
		p->disp_im[j] = (float)(-(double)p->win[j] * sin(phi));
	}

	p->lo = (float)lo;
	p->inv_range = (float)(1.0 / (hi - lo));
	p->flip_x = cfg->preprocess.flip.x;
	p->flip_z = cfg->preprocess.flip.z;
	p->bidir = cfg->geometry.bidirectional;

	p->mode = cfg->reconstruct.mode;
	p->temporal = cfg->reconstruct.temporal;
	p->combine = cfg->reconstruct.combine;
	p->tau = cfg->reconstruct.tau;
	{
		double s2 = 2.0 * cfg->reconstruct.spatial_sigma * cfg->reconstruct.spatial_sigma;
		if (!(s2 > 0))
			s2 = 2.0;
		for (int dy = -1; dy <= 1; dy++)
			for (int dx = -1; dx <= 1; dx++)
				p->gxy[(dy + 1) * 3 + dx + 1] =
				        (float)exp(-(dx * dx + dy * dy) / s2);
		for (int dz = -1; dz <= 1; dz++)
			p->gz[dz + 1] = (float)exp(-(dz * dz) / s2);
	}
	return 0;
}

void cpu_resample(const struct cpu_params *p, uint32_t K, const float *x, float *y, float *m)
{
	const int32_t last = (int32_t)K - 1;

	switch (p->rs) {
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
