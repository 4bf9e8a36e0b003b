/* SPDX-License-Identifier: MIT */
/*
 * The host-side tables both backends build from the configuration (docs/algorithms.md),
 * computed in double once per configuration: the CPU reference and the CUDA backend start
 * from the very same numbers.
 */
#include <math.h>

#include "base/base.h"
#include "backend/tables.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

void be_window_fill(enum cfg_window type, double param, uint32_t K, float *win)
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

static double be_clampd(double v, double lo, double hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

/* Wavenumber 2 pi / lambda(i) of pixel i, lambda the cubic of wavelength_nm. */
static double be_kappa(const double *l, uint32_t i)
{
	double x = (double)i;
	return 2.0 * M_PI / (l[0] + x * (l[1] + x * (l[2] + x * l[3])));
}

void be_positions(const struct vr_config *cfg, uint32_t K, double *p)
{
	const double top = (double)(K - 1);
	const double *l = cfg->preprocess.resample.wavelength_nm;
	const double *c = cfg->preprocess.resample.poly;

	switch (cfg->preprocess.resample.positions) {
	case CFG_RSPOS_TABLE:
		for (uint32_t j = 0; j < K; j++)
			p[j] = be_clampd(cfg->preprocess.resample.table.data[j], 0.0, top);
		return;
	case CFG_RSPOS_POLY:
		for (uint32_t j = 0; j < K; j++) {
			double u = (double)j / top;
			p[j] = be_clampd(c[0] + u * (c[1] + u * (c[2] + u * c[3])), 0.0, top);
		}
		return;
	case CFG_RSPOS_WAVELENGTH: {
		/* target wavenumbers equally spaced from kappa(0) to kappa(K-1); p[j] by linear
		 * inversion of the monotone kappa(i) (the schema's cfg_wavelength_check), walking
		 * i forward */
		const double kap0 = be_kappa(l, 0), kapn = be_kappa(l, K - 1);
		const double s = kapn > kap0 ? 1.0 : -1.0;
		uint32_t i = 0;
		for (uint32_t j = 0; j < K; j++) {
			double kt = kap0 + (kapn - kap0) * (double)j / top;
			while (i < K - 2 && s * be_kappa(l, i + 1) < s * kt)
				i++;
			double ki = be_kappa(l, i), k1 = be_kappa(l, i + 1);
			p[j] = be_clampd((double)i + (kt - ki) / (k1 - ki), 0.0, top);
		}
		return;
	}
	case CFG_RSPOS_NONE:
	default: /* method none: no positions (the schema requires them otherwise) */
		for (uint32_t j = 0; j < K; j++)
			p[j] = (double)j;
		return;
	}
}

void be_resample_weights(enum cfg_resample method, double pos, uint32_t K, int32_t *base,
                         double w[4])
{
	int32_t i = (int32_t)floor(pos);
	double t;

	if (i > (int32_t)K - 1)
		i = (int32_t)K - 1;
	t = pos - i;
	switch (method) {
	case CFG_RS_CUBIC:
		*base = i - 1;
		w[0] = -t * (t - 1) * (t - 2) / 6.0;
		w[1] = (t + 1) * (t - 1) * (t - 2) / 2.0;
		w[2] = -(t + 1) * t * (t - 2) / 2.0;
		w[3] = (t + 1) * t * (t - 1) / 6.0;
		break;
	case CFG_RS_SPLINE: {
		double A, B;
		if (K >= 2 && i >= (int32_t)K - 1) {
			i = (int32_t)K - 2;
			t = pos - i;
		}
		A = 1.0 - t;
		B = t;
		*base = i;
		w[0] = A;
		w[1] = B;
		w[2] = (A * A * A - A) / 6.0;
		w[3] = (B * B * B - B) / 6.0;
		break;
	}
	case CFG_RS_LINEAR:
	case CFG_RS_NONE:
	default:
		*base = i;
		w[0] = 1.0 - t;
		w[1] = t;
		w[2] = w[3] = 0.0;
		break;
	}
}

void be_dispersion_fill(const struct vr_config *cfg, uint32_t K, const float *win, float *re,
                        float *im)
{
	const double *ph = cfg->preprocess.dispersion.kind == CFG_DISP_TABLE
	                           ? cfg->preprocess.dispersion.table.data
	                           : NULL;

	for (uint32_t j = 0; j < K; j++) {
		double phi;
		if (ph) {
			phi = ph[j];
		} else {
			double v = (K > 1 ? (double)j / (double)(K - 1) : 0.0) - 0.5;
			phi = cfg->preprocess.dispersion.coeffs[0] * v * v +
			      cfg->preprocess.dispersion.coeffs[1] * v * v * v;
		}
		re[j] = (float)((double)win[j] * cos(phi));
		im[j] = (float)(-(double)win[j] * sin(phi));
	}
}

float be_spatial_weight(double sigma, unsigned d2)
{
	return (float)exp(-(double)d2 / (2.0 * sigma * sigma));
}

double be_temporal_weight(enum cfg_temporal temporal, uint32_t S, double tau, double age)
{
	if (temporal == CFG_TEMPORAL_EXP)
		return exp(-age / tau);
	return fmax((double)S - age, 0.0) / (double)S;
}

void be_interp_axis(uint32_t f, uint32_t off, uint32_t s, uint32_t n, uint32_t *i0, uint32_t *i1,
                    float *t)
{
	double p = ((double)f - (double)off) / (double)s;
	uint32_t i;

	if (n < 2) {
		*i0 = *i1 = 0;
		*t = 0.0f;
		return;
	}
	p = be_clampd(p, 0.0, (double)(n - 1));
	i = (uint32_t)floor(p);
	if (i > n - 2)
		i = n - 2;
	*i0 = i;
	*i1 = i + 1;
	*t = (float)(p - (double)i);
}
