/* SPDX-License-Identifier: MIT */
/*
 * docs/algorithms.md §5 on the CPU, an A-scan (or a row of voxels) at a time, in loops the
 * compiler vectorizes: the mask, angiography and Doppler's Kasai sums of one A-scan, and
 * Doppler's phase of a row of voxels. Each value is the one the per-voxel functions of
 * backend/functional.h give, bit for bit (the same operations in the same order), except the
 * phase, whose atan2 is the polynomial of cpu_fn_phase.
 *
 * The window sums: the terms of a pair of A-scans (X_m[j] conj(X_{m+1}[j]) and the mean power)
 * are computed once per bin, then each output bin sums the 2h + 1 terms of its window in the
 * order j = z - h, ..., z + h, a vector of bins at a time. A running sum (adding the entering
 * and subtracting the leaving term) would cost O(1) a bin instead of O(h), but it subtracts
 * the terms of a strong reflector that left the window from a sum that now holds weak ones:
 * their relative precision is lost (float cancellation), beyond the rounding of the per-voxel
 * sums that the CUDA backend computes.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "backend/functional.h"
#include "cpu/internal.h"

/* The loops below are built for AVX2 and for the baseline and picked at load time by an ifunc
 * resolver, except under ThreadSanitizer (its runtime is not up yet when resolvers run). AVX2
 * alone does not enable FMA, and ISO C (-std=c11) fuses no product into a sum: the
 * operations round as written. */
#if defined(__SANITIZE_THREAD__)
#define FN_CLONES
#else
#define FN_CLONES __attribute__((target_clones("avx2", "default")))
#endif

/* ---- the mask ------------------------------------------------------------------------------ */

void cpu_fn_mask_init(struct cpu_fn_mask *mk, float mask_db)
{
	/*
	 * d(P) = 20 log10f(sqrtf(P) + 1e-12) rounds within 3e-4 dB of the exact value for any
	 * float P (sqrtf and the sum round to 2^-24 relative, about 1e-6 dB; log10f within
	 * 2 ulp of a logarithm below 40 in magnitude, 20 x 7.6e-6; the product 20 x half an
	 * ulp of 800). The exact d is non-decreasing in P, so a power whose exact d lies more
	 * than the margin below or above mask_db is decided by comparing P with the powers at
	 * mask_db -/+ the margin (computed in double, then rounded outwards to float): d is
	 * computed only for the powers between the two.
	 */
	const double margin = 0.01 + 1e-6 * fabs((double)mask_db);
	const double eps = (double)BE_FN_EPS;
	const double lo = pow(10.0, ((double)mask_db - margin) / 20.0) - eps;
	const double hi = pow(10.0, ((double)mask_db + margin) / 20.0) - eps;

	mk->mask_db = mask_db;
	if (!isfinite(mask_db)) { /* d computed for every bin */
		mk->lo = -INFINITY;
		mk->hi = INFINITY;
		return;
	}
	/* lo <= 0: every power (P >= 0) lies above it */
	mk->lo = lo > 0.0 ? (float)(lo * lo) : -1.0f;
	if (lo > 0.0 && (double)mk->lo > lo * lo)
		mk->lo = nextafterf(mk->lo, -INFINITY);
	mk->hi = hi > 0.0 ? (float)(hi * hi) : 0.0f;
	if (hi > 0.0 && (double)mk->hi < hi * hi)
		mk->hi = nextafterf(mk->hi, INFINITY);
}

/* keep[z] for bins z0..z1-1 of an A-scan whose mean power over the repeats (be_fn_power) is
 * P[z]; d computed where P lies between the bounds. NaN is not kept, as d >= mask_db says. */
FN_CLONES static void mask_bins(const struct cpu_fn_mask *mk, const float *restrict P, uint32_t z0,
                                uint32_t z1, uint8_t *restrict keep)
{
	const float lo = mk->lo, hi = mk->hi;
	int near = 0;

	for (uint32_t z = z0; z < z1; z++) {
		keep[z] = P[z] > hi;
		near |= (P[z] >= lo) & (P[z] <= hi);
	}
	if (!near)
		return;
	for (uint32_t z = z0; z < z1; z++)
		if (P[z] >= lo && P[z] <= hi)
			keep[z] = 20.0f * log10f(sqrtf(P[z]) + BE_FN_EPS) >= mk->mask_db;
}

void cpu_fn_mask(const struct cpu_fn_mask *mk, const float *Xa, const float *pow, uint32_t M,
                 uint32_t z0, uint32_t z1, float *scratch, uint8_t *keep)
{
	/* be_fn_power bit for bit: the repeats' sum (pow, summed from the first repeat on in
	 * their order) times the float 1/M; with M = 1 (0 + |X_0|^2) x 1 */
	const float inv_m = 1.0f / (float)M;

	if (pow) {
		for (uint32_t z = z0; z < z1; z++)
			scratch[z] = pow[z] * inv_m;
	} else {
		for (size_t z = z0; z < z1; z++) {
			const float re = Xa[2 * z], im = Xa[2 * z + 1];
			scratch[z] = (0.0f + (re * re + im * im)) * inv_m;
		}
	}
	mask_bins(mk, scratch, z0, z1, keep);
}

/* ---- angiography and Doppler of one A-scan ---------------------------------------------------- */

/* The scratch rows of cpu_fn_ascan, nh floats each. */
enum { S_CR, S_CI, S_PW, S_WR, S_WI, S_NUM, S_DEN, S_SR, S_SI, S_ROWS };
_Static_assert(S_ROWS <= CPU_FN_SCRATCH_ROWS, "cpu_fn_ascan's scratch");

/* For bins [lo, hi): cr + i ci = L[j] conj(E[j]) (be_fn_lag's terms) and, with pw, the mean
 * power 0.5 (|E[j]|^2 + |L[j]|^2) (be_fn_cdv's, E the earlier repeat). */
FN_CLONES static void pair_terms(const float *restrict L, const float *restrict E, uint32_t lo,
                                 uint32_t hi, float *restrict cr, float *restrict ci,
                                 float *restrict pw)
{
	/* size_t offsets from lo: addresses the vectorizer sees as contiguous (a uint32_t 2j
	 * might wrap, and its loads would be gathered one by one) */
	const size_t n = hi - lo;
	const float *restrict l = L + 2 * (size_t)lo, *restrict e = E + 2 * (size_t)lo;
	float *restrict r = cr + lo, *restrict i = ci + lo;

	for (size_t j = 0; j < n; j++) {
		const float lr = l[2 * j], li = l[2 * j + 1], er = e[2 * j], ei = e[2 * j + 1];
		r[j] = lr * er + li * ei;
		i[j] = li * er - lr * ei;
	}
	if (!pw)
		return;
	float *restrict w = pw + lo;
	for (size_t j = 0; j < n; j++) {
		const float ar = e[2 * j], ai = e[2 * j + 1], br = l[2 * j], bi = l[2 * j + 1];
		w[j] = 0.5f * (ar * ar + ai * ai + br * br + bi * bi);
	}
}

/* out[z] (+)= the sum of c[j] over the window of bin z (be_fn_window), for z in [z0, z1),
 * each term added in the order of j; from 0 unless add. */
FN_CLONES static void window_sums(const float *restrict c, uint32_t nh, uint32_t h, uint32_t z0,
                                  uint32_t z1, bool add, float *restrict out)
{
	/* the bins whose window is whole, [h, nh - h), within [z0, z1): a vector of bins adds
	 * each of the 2h + 1 terms in turn */
	uint32_t i0 = z0 > h ? z0 : h, i1 = nh > 2 * h && nh - h < z1 ? nh - h : z1;

	if (nh <= 2 * h || i0 > i1)
		i0 = i1 = z1;
	float *restrict o = out + i0;
	const size_t n = i1 - i0;
	if (!add)
		memset(o, 0, n * sizeof(float));
	for (uint32_t d = 0; d <= 2 * h; d++) {
		const float *restrict t = c + i0 - h + d; /* i0 >= h */
		for (size_t i = 0; i < n; i++)
			o[i] += t[i];
	}
	/* the others, cut by an end, one at a time */
	for (uint32_t z = z0; z < z1; z++) {
		if (z == i0)
			z = i1;
		if (z >= z1)
			break;
		uint32_t lo, hi;
		float s = add ? out[z] : 0.0f;
		be_fn_window(nh, h, z, &lo, &hi);
		for (uint32_t j = lo; j < hi; j++)
			s += c[j];
		out[z] = s;
	}
}

/* The bulk phase of a pair (be_fn_bulk) from its terms cr + i ci over [z0, z1): the same
 * terms summed in the same order; a bin not kept adds +0, which changes no sum (a sum that
 * starts at +0 is never -0), where be_fn_bulk_add skips it. */
FN_CLONES static void bulk_phase(const float *restrict cr, const float *restrict ci,
                                 const uint8_t *restrict k, uint32_t z0, uint32_t z1, float *cb,
                                 float *sb)
{
	float r = 0.0f, i = 0.0f;

	for (size_t z = z0; z < z1; z++) {
		r += k[z] ? cr[z] : 0.0f;
		i += k[z] ? ci[z] : 0.0f;
	}
	be_fn_bulk_phase(r, i, cb, sb);
}

/* Kasai: (sr, si) += (wr + i wi) e^{-i beta}, as be_fn_lag. */
FN_CLONES static void rotate_add(const float *restrict wr, const float *restrict wi, float cb,
                                 float sb, uint32_t z0, uint32_t z1, float *restrict sr,
                                 float *restrict si)
{
	for (uint32_t z = z0; z < z1; z++) {
		sr[z] += wr[z] * cb + wi[z] * sb;
		si[z] += wi[z] * cb - wr[z] * sb;
	}
}

/* cdv: num += |wr + i wi| (be_fn_cdv's a conj(b) is the conjugate of L conj(E): the same
 * magnitude). */
FN_CLONES static void cdv_num(const float *restrict wr, const float *restrict wi, uint32_t z0,
                              uint32_t z1, float *restrict num)
{
	for (uint32_t z = z0; z < z1; z++)
		num[z] += sqrtf(wr[z] * wr[z] + wi[z] * wi[z]);
}

/* cdv: A = 1 - num / den, 0 where den is 0, into num. */
FN_CLONES static void cdv_value(float *restrict num, const float *restrict den, uint32_t z0,
                                uint32_t z1)
{
	for (uint32_t z = z0; z < z1; z++) {
		const float A = 1.0f - num[z] / den[z]; /* computed always: a select, no branch */
		num[z] = den[z] > 0.0f ? A : 0.0f;
	}
}

/* dst[0..n) = t reversed (flip.z). */
FN_CLONES static void reverse_row(const float *restrict t, uint32_t n, float *restrict dst)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = t[n - 1 - i];
}

/* The angiography's stored v of A (0 where not kept) into v, in source order. */
FN_CLONES static void angio_out(const struct be_live *l, const uint8_t *restrict k,
                                const float *restrict A, uint32_t zb0, uint32_t nz,
                                float *restrict v)
{
	const float lo = l->angio_lo, inv = l->angio_inv;
	const float *restrict a = A + zb0;
	const uint8_t *restrict kz = k + zb0;

	for (size_t i = 0; i < nz; i++) {
		float t = ((kz[i] ? a[i] : 0.0f) - lo) * inv;
		t = t > 0.0f ? t : 0.0f;
		v[i] = t < 1.0f ? t : 1.0f;
	}
}

/* Doppler's R (0 where not kept) into re and im, in source order. */
FN_CLONES static void doppler_out(const uint8_t *restrict k, const float *restrict sr,
                                  const float *restrict si, uint32_t zb0, uint32_t nz,
                                  float *restrict re, float *restrict im)
{
	const float *restrict r = sr + zb0, *restrict m = si + zb0;
	const uint8_t *restrict kz = k + zb0;

	for (size_t i = 0; i < nz; i++) {
		re[i] = kz[i] ? r[i] : 0.0f;
		im[i] = kz[i] ? m[i] : 0.0f;
	}
}

void cpu_fn_ascan(const struct cpu_fn_ascan *p, uint32_t a, float *angio, float *dre, float *dim)
{
	const struct be_live *l = p->live;
	const uint32_t M = p->M, nx = p->nx, nh = p->nh, h = l->fn_half_window;
	const uint32_t z0 = p->zb0, z1 = p->zb0 + p->nz;
	const uint32_t w0 = z0 > h ? z0 - h : 0, w1 = z1 + h < nh ? z1 + h : nh; /* the windows' */
	const size_t rs = p->rs, xs = p->xs;
	float *const s = p->scratch;
	float *cr = s + S_CR * (size_t)nh, *ci = s + S_CI * (size_t)nh, *pw = s + S_PW * (size_t)nh;
	float *wr = s + S_WR * (size_t)nh, *wi = s + S_WI * (size_t)nh;
	float *A = s + S_NUM * (size_t)nh, *den = s + S_DEN * (size_t)nh;
	float *sr = s + S_SR * (size_t)nh, *si = s + S_SI * (size_t)nh;
	const uint8_t *ka = p->keep + (size_t)a * nh;
	const bool cdv = angio && l->angio_method == CFG_ANGIO_CDV;
	const bool bscan = l->doppler_axis == CFG_DOPPLER_BSCAN;
	/* ascan: the last A-scan takes the sum of the one before it */
	const uint32_t as = dre && !bscan && nx > 1 && a + 1 == nx ? a - 1 : a;
	/* bscan Doppler beside cdv: the same pairs, the same window sums */
	const bool shared = dre && cdv && bscan;

	if (angio && !cdv) { /* svar: a voxel alone, no window */
		const float *Xa = p->X + 2 * (size_t)a * xs;
		for (uint32_t z = z0; z < z1; z++)
			A[z] = ka[z] ? be_fn_svar(Xa, M, rs, z) : 0.0f;
	}
	if (cdv) { /* num, then A */
		memset(A + z0, 0, p->nz * sizeof(float));
		memset(den + z0, 0, p->nz * sizeof(float));
	}
	if (dre) {
		memset(sr + z0, 0, p->nz * sizeof(float));
		memset(si + z0, 0, p->nz * sizeof(float));
	}
	/* cdv's pairs (m, m + 1), and bscan Doppler's with it */
	for (uint32_t m = 0; cdv && m + 1 < M; m++) {
		const float *E = p->X + 2 * ((size_t)m * rs + (size_t)a * xs), *L = E + 2 * rs;
		pair_terms(L, E, w0, w1, cr, ci, pw);
		window_sums(cr, nh, h, z0, z1, false, wr);
		window_sums(ci, nh, h, z0, z1, false, wi);
		window_sums(pw, nh, h, z0, z1, true, den);
		cdv_num(wr, wi, z0, z1, A);
		if (shared) {
			float cb = 1.0f, sb = 0.0f;
			if (l->doppler_bulk)
				bulk_phase(cr, ci, ka, z0, z1, &cb, &sb);
			rotate_add(wr, wi, cb, sb, z0, z1, sr, si);
		}
	}
	if (cdv)
		cdv_value(A, den, z0, z1);
	if (dre && !shared && (bscan || as + 1 < nx)) { /* ascan with nx = 1: no pair, R = 0 */
		const uint8_t *k = p->keep + (size_t)as * nh; /* the earlier A-scan's mask */
		for (uint32_t m = 0; m < (bscan ? M - 1 : M); m++) {
			const float *E = p->X + 2 * ((size_t)m * rs + (size_t)as * xs);
			const float *L = bscan ? E + 2 * rs : E + 2 * xs;
			float cb = 1.0f, sb = 0.0f;
			pair_terms(L, E, w0, w1, cr, ci, NULL);
			if (l->doppler_bulk)
				bulk_phase(cr, ci, k, z0, z1, &cb, &sb);
			window_sums(cr, nh, h, z0, z1, false, wr);
			window_sums(ci, nh, h, z0, z1, false, wi);
			rotate_add(wr, wi, cb, sb, z0, z1, sr, si);
		}
	}
	/* into the outputs, or with flip.z through the scratch rows cr, ci, reversed */
	const bool flip = l->flip_z;
	if (angio) {
		angio_out(l, ka, A, z0, p->nz, flip ? cr : angio);
		if (flip)
			reverse_row(cr, p->nz, angio);
	}
	if (dre) {
		doppler_out(p->keep + (size_t)as * nh, sr, si, z0, p->nz, flip ? cr : dre,
		            flip ? ci : dim);
		if (flip) {
			reverse_row(cr, p->nz, dre);
			reverse_row(ci, p->nz, dim);
		}
	}
}

/* ---- Doppler's phase -------------------------------------------------------------------------- */

/*
 * atan2(y, x) for finite x, y, not both 0: the angle of the smaller over the larger magnitude
 * t in [0, 1], reduced to |u| <= tan(π/8) by u = (t - 1) / (t + 1) above it (Cephes atanf: its
 * polynomial, relative error 1.9e-7 there), then π/2 - r where |y| > |x|, π - r where x < 0,
 * and the sign of y. Written with selects only, so that a loop of it vectorizes.
 */
static inline float fn_atan2(float y, float x)
{
	const float ax = fabsf(x), ay = fabsf(y);
	const float mx = ax > ay ? ax : ay, mn = ax > ay ? ay : ax;
	const float t = mn / mx;
	const bool big = t > 0.414213562373095f;
	const float v = (t - 1.0f) / (t + 1.0f); /* computed always: a select, no branch */
	const float u = big ? v : t, z = u * u;
	const float q = (((8.05374449538e-2f * z - 1.38776856032e-1f) * z + 1.99777106478e-1f) * z -
	                 3.33329491539e-1f) *
	                        z * u +
	                u;
	float r = big ? q + 0.25f * BE_FN_PI : q;
	r = ay > ax ? 0.5f * BE_FN_PI - r : r;
	r = x < 0.0f ? BE_FN_PI - r : r;
	return copysignf(r, y);
}

/* be_fn_phase with fn_atan2 for finite values; a value that is not finite goes to
 * be_fn_phase (atan2f's special cases, NaN stays NaN). */
static inline float fn_phase(float re, float im)
{
	const float p = fn_atan2(im, re);
	const float q = re == 0.0f && im == 0.0f ? 0.0f : p;
	return q <= -BE_FN_PI ? BE_FN_PI : q;
}

float cpu_fn_phase(float re, float im)
{
	if (!(fabsf(re) <= FLT_MAX && fabsf(im) <= FLT_MAX))
		return be_fn_phase(re, im);
	return fn_phase(re, im);
}

enum { FN_BLOCK = 256 };

/* The phase of n <= FN_BLOCK voxels into ph; whether all were finite. */
FN_CLONES static bool phase_block(const float *restrict re, const float *restrict im, size_t n,
                                  float *restrict ph)
{
	int odd = 0;

	for (size_t i = 0; i < n; i++) {
		ph[i] = fn_phase(re[i], im[i]);
		odd |= !(fabsf(re[i]) <= FLT_MAX) | !(fabsf(im[i]) <= FLT_MAX);
	}
	return !odd;
}

/* v = (Δφ + π) / (2π) (be_fn_doppler_v) into v and its u8 into q (either may be NULL). */
FN_CLONES static void phase_values(const float *restrict ph, size_t n, float *restrict v,
                                   uint8_t *restrict q)
{
	float t[FN_BLOCK];

	for (size_t i = 0; i < n; i++)
		t[i] = (ph[i] + BE_FN_PI) / (2.0f * BE_FN_PI);
	if (v)
		memcpy(v, t, n * sizeof(float));
	if (q)
		for (size_t i = 0; i < n; i++)
			q[i] = (uint8_t)(int)(255.0f * t[i] + 0.5f);
}

void cpu_fn_doppler_row(const float *re, const float *im, size_t n, float *phase, float *v,
                        uint8_t *u8)
{
	float ph[FN_BLOCK];

	for (size_t o = 0; o < n; o += FN_BLOCK) {
		const size_t b = n - o < FN_BLOCK ? n - o : FN_BLOCK;
		if (!phase_block(re + o, im + o, b, ph))
			for (size_t i = 0; i < b; i++)
				ph[i] = cpu_fn_phase(re[o + i], im[o + i]);
		if (phase)
			memcpy(phase + o, ph, b * sizeof(float));
		if (v || u8)
			phase_values(ph, b, v ? v + o : NULL, u8 ? u8 + o : NULL);
	}
}
