/* SPDX-License-Identifier: MIT */
/*
 * Functional OCT per voxel (docs/algorithms.md §5): speckle variance and complex differential
 * variance angiography, and the Kasai autocorrelation of phase-resolved Doppler with its bulk
 * phase, from the complex spectra of the M repeats of one B-scan position. The same code runs
 * on the device (the CUDA backend) and on the host, where the CPU backend computes the same
 * operations in the same order an A-scan at a time in vectorized loops (cpu/functional.c,
 * tested bit for bit against these functions), so the two compute each voxel alike.
 *
 * Spectra are single-precision complex numbers stored as (re, im) float pairs. For one A-scan
 * position, repeat m's depth bin z is X[2 * (m * rs + z)] (re) and the float after it (im): rs
 * is the distance between repeats in complex elements, bins are contiguous; n bins in all.
 */
#ifndef VOLREC_BACKEND_FUNCTIONAL_H
#define VOLREC_BACKEND_FUNCTIONAL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define BE_FN_HD __host__ __device__
#else
#define BE_FN_HD
#endif

#define BE_FN_EPS   1e-12f /* added to magnitudes before their logarithm */
#define BE_FN_PI    3.14159265358979323846f
#define BE_FN_M_MAX 16u /* geometry.repeats at most */

/* Re and im of repeat m's bin z. */
BE_FN_HD static inline float be_fn_re(const float *X, size_t rs, uint32_t m, uint32_t z)
{
	return X[2 * ((size_t)m * rs + z)];
}

BE_FN_HD static inline float be_fn_im(const float *X, size_t rs, uint32_t m, uint32_t z)
{
	return X[2 * ((size_t)m * rs + z) + 1];
}

/* The structure's power (§5 step 1): the sum over the M repeats of |X_m[z]|^2 in the order
 * m = 0, 1, ..., times the float 1/M. */
BE_FN_HD static inline float be_fn_power(const float *X, uint32_t M, size_t rs, uint32_t z)
{
	float p = 0.0f;

	for (uint32_t m = 0; m < M; m++) {
		float re = be_fn_re(X, rs, m, z), im = be_fn_im(X, rs, m, z);
		p += re * re + im * im;
	}
	return p * (1.0f / (float)M);
}

/* The structure in dB before its normalization: 20 log10(sqrt(P) + 1e-12). */
BE_FN_HD static inline float be_fn_structure_db(const float *X, uint32_t M, size_t rs, uint32_t z)
{
	return 20.0f * log10f(sqrtf(be_fn_power(X, M, rs, z)) + BE_FN_EPS);
}

/* Speckle variance (dB^2): the variance over the repeats of 20 log10(|X_m[z]| + 1e-12), with
 * the mean of the repeats (1/M), M >= 2. */
BE_FN_HD static inline float be_fn_svar(const float *X, uint32_t M, size_t rs, uint32_t z)
{
	float d[BE_FN_M_MAX], mean = 0.0f, var = 0.0f;

	for (uint32_t m = 0; m < M; m++) {
		float re = be_fn_re(X, rs, m, z), im = be_fn_im(X, rs, m, z);
		d[m] = 20.0f * log10f(sqrtf(re * re + im * im) + BE_FN_EPS);
		mean += d[m];
	}
	mean /= (float)M;
	for (uint32_t m = 0; m < M; m++)
		var += (d[m] - mean) * (d[m] - mean);
	return var / (float)M;
}

/* The axial window of bin z: [lo, hi) = [z - h, z + h] within [0, n). */
BE_FN_HD static inline void be_fn_window(uint32_t n, uint32_t h, uint32_t z, uint32_t *lo,
                                         uint32_t *hi)
{
	*lo = z > h ? z - h : 0;
	*hi = z + h + 1 < n ? z + h + 1 : n;
}

/*
 * Complex differential variance (Nam et al. 2014), uniform weights over the axial window:
 * 1 - sum over pairs (m, m+1) of |sum_j X_m[j] conj(X_{m+1}[j])|, over the sum over pairs of
 * sum_j (|X_m[j]|^2 + |X_{m+1}[j]|^2) / 2; 0 when that is 0. M >= 2.
 */
BE_FN_HD static inline float be_fn_cdv(const float *X, uint32_t M, size_t rs, uint32_t n,
                                       uint32_t h, uint32_t z)
{
	uint32_t lo, hi;
	float num = 0.0f, den = 0.0f;

	be_fn_window(n, h, z, &lo, &hi);
	for (uint32_t m = 0; m + 1 < M; m++) {
		float cr = 0.0f, ci = 0.0f;

		for (uint32_t j = lo; j < hi; j++) {
			float ar = be_fn_re(X, rs, m, j), ai = be_fn_im(X, rs, m, j);
			float br = be_fn_re(X, rs, m + 1, j), bi = be_fn_im(X, rs, m + 1, j);

			/* a conj(b) */
			cr += ar * br + ai * bi;
			ci += ai * br - ar * bi;
			den += 0.5f * (ar * ar + ai * ai + br * br + bi * bi);
		}
		num += sqrtf(cr * cr + ci * ci);
	}
	return den > 0.0f ? 1.0f - num / den : 0.0f;
}

/* Accumulates into (*sr, *si) the sum over bins j in [lo, hi) of L[j] conj(E[j]) rotated by
 * -beta (given as its cosine and sine): one pair's term of the Kasai autocorrelation, L the
 * later and E the earlier A-scan (each with its own pointer: the same position's next repeat,
 * or the next A-scan of the same repeat). */
BE_FN_HD static inline void be_fn_lag(const float *L, const float *E, uint32_t lo, uint32_t hi,
                                      float cb, float sb, float *sr, float *si)
{
	float cr = 0.0f, ci = 0.0f;

	for (uint32_t j = lo; j < hi; j++) {
		float lr = L[2 * j], li = L[2 * j + 1], er = E[2 * j], ei = E[2 * j + 1];

		cr += lr * er + li * ei;
		ci += li * er - lr * ei;
	}
	/* (cr + i ci) e^{-i beta} */
	*sr += cr * cb + ci * sb;
	*si += ci * cb - cr * sb;
}

/* Accumulates into (*cr, *ci) the terms of the bulk phase's sum (be_fn_bulk) of the bins
 * z = z0, z0 + step, ... below z1, in that order: L[z] conj(E[z]) where keep[z] is non-zero. */
BE_FN_HD static inline void be_fn_bulk_add(const float *L, const float *E, const uint8_t *keep,
                                           uint32_t z0, uint32_t z1, uint32_t step, float *cr,
                                           float *ci)
{
	float r = *cr, i = *ci;

	for (uint32_t z = z0; z < z1; z += step) {
		float lr = L[2 * z], li = L[2 * z + 1], er = E[2 * z], ei = E[2 * z + 1];

		if (!keep[z])
			continue;
		r += lr * er + li * ei;
		i += li * er - lr * ei;
	}
	*cr = r;
	*ci = i;
}

/* The bulk phase of the sum (cr, ci) as its cosine and sine; (1, 0) when the sum is 0. */
BE_FN_HD static inline void be_fn_bulk_phase(float cr, float ci, float *cb, float *sb)
{
	float r = sqrtf(cr * cr + ci * ci);

	if (r > 0.0f) {
		*cb = cr / r;
		*sb = ci / r;
	} else {
		*cb = 1.0f;
		*sb = 0.0f;
	}
}

/*
 * The bulk phase of one pair (L later, E earlier): arg of the sum over bins z in [z0, z1) (the
 * depth range before the flip) of L[z] conj(E[z]) where keep[z] is non-zero (the earlier
 * A-scan's structure not masked); given as its cosine and sine, (1, 0) when the sum is 0. The
 * CPU sums the bins in order; the CUDA backend sums them over the 32 lanes of a warp
 * (be_fn_bulk_add of every 32nd bin, then the lanes' sums), the same terms in another order.
 */
BE_FN_HD static inline void be_fn_bulk(const float *L, const float *E, const uint8_t *keep,
                                       uint32_t z0, uint32_t z1, float *cb, float *sb)
{
	float cr = 0.0f, ci = 0.0f;

	be_fn_bulk_add(L, E, keep, z0, z1, 1, &cr, &ci);
	be_fn_bulk_phase(cr, ci, cb, sb);
}

/* Δφ = atan2(im, re) in (-π, π]: -π is taken as +π, and R = 0 gives 0. The CPU backend's
 * voxels take cpu_fn_phase (cpu/functional.c), the same with a vectorizable atan2 within
 * 2.8e-7 rad (docs/algorithms.md §5). */
BE_FN_HD static inline float be_fn_phase(float re, float im)
{
	float p;

	if (re == 0.0f && im == 0.0f)
		return 0.0f;
	p = atan2f(im, re);
	return p <= -BE_FN_PI ? BE_FN_PI : p;
}

/* The stored Doppler value before step 8: (Δφ + π) / (2π), in (0, 1]. */
BE_FN_HD static inline float be_fn_doppler_v(float re, float im)
{
	return (be_fn_phase(re, im) + BE_FN_PI) / (2.0f * BE_FN_PI);
}

/* Axial velocity (mm/s) of a phase step dphi (rad) over period_us between the two A-scans:
 * λ0 Δφ / (4π n T), λ0 the centre wavelength (nm), n the refractive index. */
static inline double be_fn_velocity_mm_s(double dphi, double lambda0_nm, double n, double period_us)
{
	return lambda0_nm * 1e-6 * dphi / (4.0 * 3.14159265358979323846 * n * period_us * 1e-6);
}

#endif
