/* SPDX-License-Identifier: MIT */
/*
 * Functional OCT per voxel (backend/functional.h, docs/algorithms.md §5): cases whose answer
 * is known in closed form (identical repeats, a bulk phase, a uniform phase step, two
 * amplitudes), the edges of the axial window and of the phase's range, and random spectra
 * against the formulas written out again in double precision. Then the CPU backend's loops
 * over an A-scan (cpu/functional.c) against these per-voxel functions, bit for bit, and its
 * polynomial atan2 against atan2 in double precision.
 */
#include <complex.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/functional.h"
#include "cpu/internal.h"
#include "tests/unit/vrtest.h"

enum { N = 64, MMAX = 4 };

/* Spectra [MMAX][N] as (re, im) pairs. */
struct spectra {
	float x[MMAX * N * 2];
};

static void set(struct spectra *s, uint32_t m, uint32_t z, double complex v)
{
	s->x[2 * (m * N + z)] = (float)creal(v);
	s->x[2 * (m * N + z) + 1] = (float)cimag(v);
}

static double complex get(const struct spectra *s, uint32_t m, uint32_t z)
{
	return s->x[2 * (m * N + z)] + I * s->x[2 * (m * N + z) + 1];
}

static double uniform(unsigned *seed)
{
	return (double)rand_r(seed) / RAND_MAX;
}

/* Circular complex Gaussian-like speckle: a random amplitude and phase. */
static double complex speckle(unsigned *seed)
{
	return (0.1 + 10 * uniform(seed)) * cexp(I * 2 * M_PI * uniform(seed));
}

static void test_power_and_structure_db(void **unused)
{
	struct spectra s;
	(void)unused;

	memset(&s, 0, sizeof(s));
	set(&s, 0, 3, 3 + 4 * I);
	set(&s, 1, 3, 5 * I);
	/* M = 1: |X|^2 and 20 log10 |X| */
	assert_float_equal(be_fn_power(s.x, 1, N, 3), 25.0f, 1e-5f);
	assert_float_equal(be_fn_structure_db(s.x, 1, N, 3), 20 * log10(5.0), 1e-4f);
	/* M = 2: the mean of the powers */
	set(&s, 1, 3, 1.0);
	assert_float_equal(be_fn_power(s.x, 2, N, 3), 13.0f, 1e-5f);
	/* nothing: the epsilon, no -inf */
	assert_float_equal(be_fn_structure_db(s.x, 2, N, 0), -240.0f, 1e-3f);
}

static void test_svar_of_equal_amplitudes_is_zero_and_of_two_known(void **unused)
{
	struct spectra s;
	unsigned seed = 1;
	(void)unused;

	for (uint32_t m = 0; m < MMAX; m++)
		set(&s, m, 0, 7 * cexp(I * 2 * M_PI * uniform(&seed)));
	assert_float_equal(be_fn_svar(s.x, MMAX, N, 0), 0.0f, 1e-4f);
	/* 0 dB and 20 dB: mean 10, variance 100 */
	set(&s, 0, 1, 1.0);
	set(&s, 1, 1, 10 * I);
	assert_float_equal(be_fn_svar(s.x, 2, N, 1), 100.0f, 1e-3f);
}

static void test_cdv_is_zero_for_repeats_that_differ_by_a_bulk_phase(void **unused)
{
	struct spectra s;
	unsigned seed = 2;
	(void)unused;

	for (uint32_t z = 0; z < N; z++) {
		double complex v = speckle(&seed);
		for (uint32_t m = 0; m < MMAX; m++)
			set(&s, m, z, v * cexp(I * 0.7 * m)); /* the same tissue, moved axially */
	}
	for (uint32_t z = 0; z < N; z++)
		assert_float_equal(be_fn_cdv(s.x, MMAX, N, N, 2, z), 0.0f, 2e-6f);
	/* no signal at all: 0, not 0/0 */
	memset(&s, 0, sizeof(s));
	assert_float_equal(be_fn_cdv(s.x, MMAX, N, N, 2, 5), 0.0f, 0.0f);
}

static void test_cdv_of_decorrelated_repeats_is_near_one(void **unused)
{
	struct spectra s;
	unsigned seed = 3;
	double mean = 0;
	(void)unused;

	for (uint32_t z = 0; z < N; z++)
		for (uint32_t m = 0; m < MMAX; m++)
			set(&s, m, z, speckle(&seed));
	for (uint32_t z = 0; z < N; z++)
		mean += be_fn_cdv(s.x, MMAX, N, N, 2, z) / N;
	/* independent speckle over a 5-bin window: |sum| / sum of powers is small */
	assert_true(mean > 0.5);
	assert_true(mean <= 1.0);
}

static void test_window_is_cut_at_both_ends(void **unused)
{
	uint32_t lo, hi;
	(void)unused;

	be_fn_window(N, 2, 0, &lo, &hi);
	assert_int_equal(lo, 0);
	assert_int_equal(hi, 3);
	be_fn_window(N, 2, 10, &lo, &hi);
	assert_int_equal(lo, 8);
	assert_int_equal(hi, 13);
	be_fn_window(N, 2, N - 1, &lo, &hi);
	assert_int_equal(lo, N - 3);
	assert_int_equal(hi, N);
	be_fn_window(N, 0, 7, &lo, &hi);
	assert_int_equal(hi - lo, 1);
}

/* R of the B-scan axis at bin z, bulk phases given per pair (cos, sin) */
static void kasai_bscan(const struct spectra *s, uint32_t M, uint32_t h, uint32_t z,
                        const float *cb, const float *sb, float *re, float *im)
{
	uint32_t lo, hi;

	*re = *im = 0.0f;
	be_fn_window(N, h, z, &lo, &hi);
	for (uint32_t m = 0; m + 1 < M; m++)
		be_fn_lag(s->x + 2 * (m + 1) * N, s->x + 2 * m * N, lo, hi, cb[m], sb[m], re, im);
}

static void test_a_uniform_phase_step_is_read_back_without_bulk_and_removed_with_it(void **unused)
{
	struct spectra s;
	unsigned seed = 4;
	float cb[MMAX], sb[MMAX], re, im;
	uint8_t keep[N];
	(void)unused;

	for (uint32_t z = 0; z < N; z++) {
		double complex v = speckle(&seed);
		for (uint32_t m = 0; m < MMAX; m++)
			set(&s, m, z, v * cexp(I * 1.0 * m));
	}
	for (uint32_t m = 0; m < MMAX; m++) {
		cb[m] = 1.0f;
		sb[m] = 0.0f;
	}
	for (uint32_t z = 0; z < N; z++) {
		kasai_bscan(&s, MMAX, 2, z, cb, sb, &re, &im);
		assert_float_equal(be_fn_phase(re, im), 1.0f, 1e-5f);
	}
	/* bulk: the whole step is bulk motion, nothing is left */
	memset(keep, 1, sizeof(keep));
	for (uint32_t m = 0; m + 1 < MMAX; m++) {
		be_fn_bulk(s.x + 2 * (m + 1) * N, s.x + 2 * m * N, keep, 0, N, &cb[m], &sb[m]);
		assert_float_equal(atan2f(sb[m], cb[m]), 1.0f, 1e-5f);
	}
	for (uint32_t z = 0; z < N; z++) {
		kasai_bscan(&s, MMAX, 2, z, cb, sb, &re, &im);
		assert_float_equal(be_fn_phase(re, im), 0.0f, 1e-5f);
	}
}

static void test_a_vessel_keeps_its_phase_when_bulk_motion_is_removed(void **unused)
{
	struct spectra s;
	unsigned seed = 5;
	float cb[MMAX], sb[MMAX], re, im;
	uint8_t keep[N];
	const double bulk = -0.4, flow = 0.9;
	(void)unused;

	/* tissue everywhere but a weak vessel in bins [20, 30) that also moves by flow;
	 * the vessel's bins and the depth range's outside are not used for the bulk phase */
	for (uint32_t z = 0; z < N; z++) {
		bool vessel = z >= 20 && z < 30;
		double complex v = vessel ? 0.3 * speckle(&seed) : speckle(&seed);
		for (uint32_t m = 0; m < MMAX; m++)
			set(&s, m, z, v * cexp(I * (bulk + (vessel ? flow : 0)) * m));
		keep[z] = !vessel;
	}
	for (uint32_t m = 0; m + 1 < MMAX; m++)
		be_fn_bulk(s.x + 2 * (m + 1) * N, s.x + 2 * m * N, keep, 4, N - 4, &cb[m], &sb[m]);
	for (uint32_t z = 22; z < 28; z++) { /* the window lies inside the vessel */
		kasai_bscan(&s, MMAX, 2, z, cb, sb, &re, &im);
		assert_float_equal(be_fn_phase(re, im), flow, 1e-4f);
	}
	kasai_bscan(&s, MMAX, 2, 50, cb, sb, &re, &im);
	assert_float_equal(be_fn_phase(re, im), 0.0f, 1e-4f);
	/* nothing kept: no bulk estimate, (1, 0) */
	memset(keep, 0, sizeof(keep));
	be_fn_bulk(s.x + 2 * N, s.x, keep, 0, N, &cb[0], &sb[0]);
	assert_float_equal(cb[0], 1.0f, 0.0f);
	assert_float_equal(sb[0], 0.0f, 0.0f);
}

/* The bulk phase summed as the CUDA backend sums it (32 lanes, each every 32nd bin from its
 * own, then the lanes' sums: be_fn_bulk_add with step 32) is be_fn_bulk's within float
 * rounding, with a mask and a depth range that is not a multiple of 32. */
static void test_bulk_summed_by_lanes_agrees(void **unused)
{
	struct spectra s;
	unsigned seed = 11;
	uint8_t keep[N];
	const uint32_t z0 = 3, z1 = N - 5;
	(void)unused;

	for (uint32_t z = 0; z < N; z++) {
		double complex v = speckle(&seed);
		for (uint32_t m = 0; m < 2; m++)
			set(&s, m, z, v * cexp(I * 0.7 * m));
		keep[z] = z % 7 != 0;
	}
	float cb, sb, cr = 0.0f, ci = 0.0f, lcb, lsb;
	be_fn_bulk(s.x + 2 * N, s.x, keep, z0, z1, &cb, &sb);
	for (uint32_t lane = 0; lane < 32; lane++) {
		float r = 0.0f, i = 0.0f;
		be_fn_bulk_add(s.x + 2 * N, s.x, keep, z0 + lane, z1, 32, &r, &i);
		cr += r;
		ci += i;
	}
	be_fn_bulk_phase(cr, ci, &lcb, &lsb);
	assert_float_equal(lcb, cb, 1e-6f);
	assert_float_equal(lsb, sb, 1e-6f);
	assert_float_equal(atan2f(sb, cb), 0.7f, 1e-5f);
}

static void test_phase_range_and_stored_value(void **unused)
{
	(void)unused;
	assert_float_equal(be_fn_phase(0.0f, 0.0f), 0.0f, 0.0f);
	assert_float_equal(be_fn_phase(-1.0f, -0.0f), BE_FN_PI, 0.0f); /* -π is +π */
	assert_float_equal(be_fn_phase(-1.0f, 0.0f), BE_FN_PI, 0.0f);
	assert_float_equal(be_fn_phase(0.0f, -2.0f), -BE_FN_PI / 2, 1e-6f);
	assert_float_equal(be_fn_doppler_v(1.0f, 0.0f), 0.5f, 1e-7f);
	assert_float_equal(be_fn_doppler_v(-1.0f, 0.0f), 1.0f, 1e-7f);
	/* λ0 1300 nm, n 1.38, T 10 µs, Δφ = π: 1300e-9 / (4 * 1.38 * 10e-6) m/s */
	assert_float_equal(be_fn_velocity_mm_s(M_PI, 1300, 1.38, 10), 1300e-6 / (4 * 1.38 * 10e-6),
	                   1e-9);
}

/* The formulas of docs/algorithms.md §5 in double precision, written out again */
static double ref_svar(const struct spectra *s, uint32_t M, uint32_t z)
{
	double d[MMAX], mean = 0, var = 0;

	for (uint32_t m = 0; m < M; m++) {
		d[m] = 20 * log10(cabs(get(s, m, z)) + 1e-12);
		mean += d[m] / M;
	}
	for (uint32_t m = 0; m < M; m++)
		var += (d[m] - mean) * (d[m] - mean) / M;
	return var;
}

static double ref_cdv(const struct spectra *s, uint32_t M, uint32_t h, uint32_t z)
{
	double num = 0, den = 0;

	for (uint32_t m = 0; m + 1 < M; m++) {
		double complex c = 0;
		for (int64_t j = (int64_t)z - h; j <= (int64_t)z + h; j++) {
			if (j < 0 || j >= N)
				continue;
			c += get(s, m, (uint32_t)j) * conj(get(s, m + 1, (uint32_t)j));
			den += 0.5 * (pow(cabs(get(s, m, (uint32_t)j)), 2) +
			              pow(cabs(get(s, m + 1, (uint32_t)j)), 2));
		}
		num += cabs(c);
	}
	return den > 0 ? 1 - num / den : 0;
}

static double ref_kasai(const struct spectra *s, uint32_t M, uint32_t h, uint32_t z)
{
	double complex r = 0;

	for (uint32_t m = 0; m + 1 < M; m++) {
		double complex b = 0, c = 0;
		for (uint32_t k = 0; k < N; k++)
			b += get(s, m + 1, k) * conj(get(s, m, k));
		for (int64_t j = (int64_t)z - h; j <= (int64_t)z + h; j++)
			if (j >= 0 && j < N)
				c += get(s, m + 1, (uint32_t)j) * conj(get(s, m, (uint32_t)j));
		r += c * cexp(-I * carg(b));
	}
	return carg(r);
}

static void test_random_spectra_agree_with_double_precision(void **unused)
{
	struct spectra s;
	unsigned seed = 6;
	uint8_t keep[N];
	(void)unused;

	memset(keep, 1, sizeof(keep));
	for (uint32_t M = 2; M <= MMAX; M++)
		for (uint32_t h = 0; h <= 3; h++) {
			float cb[MMAX], sb[MMAX];

			for (uint32_t z = 0; z < N; z++)
				for (uint32_t m = 0; m < M; m++) /* partly correlated repeats */
					set(&s, m, z,
					    m ? get(&s, m - 1, z) * cexp(I * 0.5) + speckle(&seed)
					      : speckle(&seed));
			for (uint32_t m = 0; m + 1 < M; m++)
				be_fn_bulk(s.x + 2 * (m + 1) * N, s.x + 2 * m * N, keep, 0, N,
				           &cb[m], &sb[m]);
			for (uint32_t z = 0; z < N; z++) {
				float re, im;
				double want = ref_kasai(&s, M, h, z), got;

				assert_float_equal(be_fn_svar(s.x, M, N, z), ref_svar(&s, M, z),
				                   1e-3 * (1 + ref_svar(&s, M, z)));
				assert_float_equal(be_fn_cdv(s.x, M, N, N, h, z),
				                   ref_cdv(&s, M, h, z), 1e-5);
				kasai_bscan(&s, M, h, z, cb, sb, &re, &im);
				got = be_fn_phase(re, im);
				/* the same angle, also across ±π */
				assert_true(fabs(remainder(got - want, 2 * M_PI)) < 1e-4);
			}
		}
}

/* ---- cpu/functional.c against the per-voxel functions ---------------------------------------- */

/* A wide dynamic range: amplitudes log-uniform over 1e-4..1e4, random phases, exact zeros
 * now and then (a masked or missing A-scan). */
static float wide(unsigned *seed)
{
	const double u = uniform(seed);
	return u < 0.02 ? 0.0f : (float)(pow(10.0, -4 + 8 * uniform(seed)) * (u < 0.5 ? -1 : 1));
}

/* What functional_position computed per voxel before cpu/functional.c: be_fn_svar or
 * be_fn_cdv, be_fn_bulk and be_fn_lag of each output bin. */
static void ref_ascan(const struct cpu_fn_ascan *p, uint32_t a, float *angio, float *dre,
                      float *dim)
{
	const struct be_live *l = p->live;
	const uint32_t M = p->M, nx = p->nx, nh = p->nh, nz = p->nz, zb0 = p->zb0;
	const size_t rs = p->rs, xs = p->xs;
	const bool bscan = l->doppler_axis == CFG_DOPPLER_BSCAN;
	const uint32_t as = !bscan && nx > 1 && a + 1 == nx ? a - 1 : a;
	const uint8_t *ka = p->keep + (size_t)a * nh, *k = p->keep + (size_t)as * nh;
	float cb[BE_FN_M_MAX], sb[BE_FN_M_MAX];
	const uint32_t npair = bscan ? M - 1 : M;

	for (uint32_t m = 0; m < npair && (bscan || as + 1 < nx); m++) {
		const float *E = p->X + 2 * ((size_t)m * rs + (size_t)as * xs);
		const float *L = bscan ? E + 2 * rs : E + 2 * xs;
		cb[m] = 1.0f;
		sb[m] = 0.0f;
		if (l->doppler_bulk)
			be_fn_bulk(L, E, k, zb0, zb0 + nz, &cb[m], &sb[m]);
	}
	for (uint32_t z = 0; z < nz; z++) {
		const uint32_t zs = l->flip_z ? zb0 + nz - 1 - z : zb0 + z;
		if (angio) {
			float A = 0.0f, v;
			if (ka[zs])
				A = l->angio_method == CFG_ANGIO_SVAR
				            ? be_fn_svar(p->X + 2 * (size_t)a * xs, M, rs, zs)
				            : be_fn_cdv(p->X + 2 * (size_t)a * xs, M, rs, nh,
				                        l->fn_half_window, zs);
			v = (A - l->angio_lo) * l->angio_inv;
			v = v > 0.0f ? v : 0.0f;
			angio[z] = v < 1.0f ? v : 1.0f;
		}
		if (dre) {
			uint32_t lo, hi;
			float sr = 0.0f, si = 0.0f;
			if (k[zs] && (bscan || as + 1 < nx)) {
				be_fn_window(nh, l->fn_half_window, zs, &lo, &hi);
				for (uint32_t m = 0; m < npair; m++) {
					const float *E =
					        p->X + 2 * ((size_t)m * rs + (size_t)as * xs);
					const float *L = bscan ? E + 2 * rs : E + 2 * xs;
					be_fn_lag(L, E, lo, hi, cb[m], sb[m], &sr, &si);
				}
			}
			dre[z] = sr;
			dim[z] = si;
		}
	}
}

/* Equal bit for bit (memcmp: +0 and -0 differ too). */
static void assert_same_floats(const float *a, const float *b, uint32_t n, const char *what)
{
	for (uint32_t i = 0; i < n; i++)
		if (memcmp(&a[i], &b[i], sizeof(float))) {
			print_error("%s[%u]: %.9g, want %.9g\n", what, i, a[i], b[i]);
			fail();
		}
}

static void test_the_cpu_loops_over_an_ascan_are_the_per_voxel_functions(void **unused)
{
	/* A-scans NH + 1 complex values apart, repeats 5 more than NX of them (as the FFT's rows) */
	enum { NX = 3, NH = 40, XS = NH + 1, RS = NX * XS + 5 };
	/* (h, zb0, nz): windows whole, cut at either end, wider than the A-scan */
	static const uint32_t ranges[][3] = {{2, 0, NH},  {2, 5, 20}, {0, 3, 30},  {5, 0, 7},
	                                     {5, 33, 7},  {1, 39, 1}, {25, 0, NH}, {25, 10, 12},
	                                     {64, 0, NH}, {3, 2, 35}};
	unsigned seed = 11;
	float X[MMAX * RS * 2], scratch[CPU_FN_SCRATCH_ROWS * NH];
	float got[3][NH], want[3][NH];
	uint8_t keep[NX * NH];
	uint32_t cases = 0;
	(void)unused;

	for (uint32_t M = 1; M <= MMAX; M++)
		for (size_t r = 0; r < sizeof(ranges) / sizeof(ranges[0]); r++)
			for (uint32_t v = 0; v < 16; v++) {
				struct be_live l = {.fn_half_window = ranges[r][0],
				                    .angio_method =
				                            v & 1 ? CFG_ANGIO_SVAR : CFG_ANGIO_CDV,
				                    .angio_lo = v & 1 ? 0.0f : 0.1f,
				                    .angio_inv = v & 1 ? 0.01f : 1.25f,
				                    .doppler_axis = v & 2 ? CFG_DOPPLER_ASCAN
				                                          : CFG_DOPPLER_BSCAN,
				                    .doppler_bulk = v & 4,
				                    .flip_z = v & 8};
				const uint32_t nx = v & 2 && M == 1 && r & 1 ? 1 : NX;
				const struct cpu_fn_ascan p = {.live = &l,
				                               .X = X,
				                               .keep = keep,
				                               .M = M,
				                               .nx = nx,
				                               .nh = NH,
				                               .xs = XS,
				                               .rs = RS,
				                               .zb0 = ranges[r][1],
				                               .nz = ranges[r][2],
				                               .scratch = scratch};
				const bool angio = M > 1;

				for (size_t i = 0; i < sizeof(X) / sizeof(X[0]); i++)
					X[i] = wide(&seed);
				for (size_t i = 0; i < sizeof(keep); i++)
					keep[i] = uniform(&seed) < 0.8;
				for (uint32_t a = 0; a < nx; a++) {
					memset(got, 0xa5, sizeof(got));
					memset(want, 0x5a, sizeof(want));
					cpu_fn_ascan(&p, a, angio ? got[0] : NULL, got[1], got[2]);
					ref_ascan(&p, a, angio ? want[0] : NULL, want[1], want[2]);
					if (angio)
						assert_same_floats(got[0], want[0], p.nz, "angio");
					assert_same_floats(got[1], want[1], p.nz, "re R");
					assert_same_floats(got[2], want[2], p.nz, "im R");
					/* Doppler alone (no angiography beside it) */
					cpu_fn_ascan(&p, a, NULL, got[1], got[2]);
					assert_same_floats(got[1], want[1], p.nz, "re R alone");
					assert_same_floats(got[2], want[2], p.nz, "im R alone");
					cases++;
				}
			}
	assert_true(cases > 500);
}

/* The mask: be_fn_structure_db >= mask_db, whatever the power, at and around the threshold,
 * 0, infinite and NaN, for mask_db from below the epsilon's -240 dB to far above. */
static void test_the_cpu_mask_is_the_structure_db_against_mask_db(void **unused)
{
	enum { NH = 512 };
	static const float masks[] = {-300.0f, -240.0f, -239.9f, -60.0f, 0.0f,
	                              17.3f,   45.0f,   300.0f,  400.0f, INFINITY};
	float X[2 * NH * 2], pw[NH], scratch[NH];
	uint8_t got[NH];
	unsigned seed = 5;
	(void)unused;

	for (size_t i = 0; i < sizeof(masks) / sizeof(masks[0]); i++) {
		struct cpu_fn_mask mk;
		const double t = pow(10.0, (double)masks[i] / 20.0); /* the magnitude at mask_db */

		cpu_fn_mask_init(&mk, masks[i]);
		for (uint32_t M = 1; M <= 2; M++) {
			for (uint32_t z = 0; z < NH; z++) {
				/* a magnitude within a few ulp of the threshold's, or anywhere */
				float re = (float)(t / sqrt((double)M));
				if (z < NH / 2)
					for (uint32_t s = z % 64; s; s--)
						re = nextafterf(re, z & 64 ? INFINITY : 0.0f);
				else
					re = wide(&seed) * 1e3f;
				X[2 * z] = re;
				X[2 * z + 1] = z % 3 ? 0.0f : re * 1e-4f;
				X[2 * (NH + z)] = X[2 * z];
				X[2 * (NH + z) + 1] = -X[2 * z + 1];
			}
			X[0] = 0.0f;
			X[2] = INFINITY;
			X[4] = NAN;
			X[7] = -INFINITY;
			for (uint32_t z = 0; z < NH;
			     z++) { /* power_add: the repeats' sum in order */
				const float *a = X + 2 * z, *b = X + 2 * (NH + z);
				pw[z] = a[0] * a[0] + a[1] * a[1];
				pw[z] = pw[z] + (b[0] * b[0] + b[1] * b[1]);
			}
			memset(got, 7, sizeof(got));
			cpu_fn_mask(&mk, X, M > 1 ? pw : NULL, M, 0, NH, scratch, got);
			for (uint32_t z = 0; z < NH; z++)
				if (got[z] != (be_fn_structure_db(X, M, NH, z) >= masks[i])) {
					print_error("mask %g M %u bin %u: %u\n", masks[i], M, z,
					            got[z]);
					fail();
				}
		}
	}
}

/* Distance on the circle of 2π between a float phase and a double one. */
static double phase_error(float got, double want)
{
	return fabs(remainder((double)got - want, 2 * M_PI));
}

/* atan2 in double with be_fn_phase's range: (-π, π], 0 at R = 0. */
static double ref_phase(float re, float im)
{
	if (re == 0.0f && im == 0.0f)
		return 0.0;
	return atan2((double)im, (double)re);
}

/*
 * cpu_fn_phase against atan2 in double: on 2^20 angles around the circle at magnitudes from
 * the smallest subnormal to FLT_MAX, on ratios near the polynomial's seams (tan(π/8), 1) and
 * on the axes, signed zeros included; within 5e-7 rad (measured: 2.8e-7 rad, about 1.2 ulp of
 * π; docs/algorithms.md §5), -π never returned. Not finite: be_fn_phase's value.
 */
static void test_the_cpu_phase_is_atan2_within_5e_7_rad(void **unused)
{
	static const float mags[] = {1.4e-45f, 1e-40f, 1e-20f, 1e-3f, 1.0f, 7.5f, 1e20f, FLT_MAX};
	static const float sp[] = {0.0f, 1e-45f, 1e-38f, 1e-10f, 0.5f, 1.0f, 3e10f, FLT_MAX};
	double worst = 0.0;
	(void)unused;

	for (size_t s = 0; s < sizeof(mags) / sizeof(mags[0]); s++)
		for (uint32_t i = 0; i < 1u << 20; i++) {
			const double th = 2 * M_PI * i / (1u << 20) - M_PI;
			const float re = (float)(mags[s] * cos(th)),
			            im = (float)(mags[s] * sin(th));
			const float p = cpu_fn_phase(re, im);
			const double e = phase_error(p, ref_phase(re, im));
			assert_true(p > -BE_FN_PI && p <= BE_FN_PI);
			worst = e > worst ? e : worst;
		}
	/* ratios t = |smaller| / |larger| near tan(π/8) and 1, in every quadrant */
	for (int q = 0; q < 8; q++)
		for (int k = -2000; k <= 2000; k++) {
			const float t8 = nextafterf(0.41421356f, 1.0f);
			float t = q & 4 ? 1.0f : t8;
			for (int j = 0; j < (k < 0 ? -k : k); j++)
				t = nextafterf(t, k < 0 ? 0.0f : 2.0f);
			const float a = q & 1 ? -1.0f : 1.0f, b = q & 2 ? -t : t;
			const double e1 = phase_error(cpu_fn_phase(a, b), ref_phase(a, b));
			const double e2 = phase_error(cpu_fn_phase(b, a), ref_phase(b, a));
			worst = e1 > worst ? e1 : worst;
			worst = e2 > worst ? e2 : worst;
		}
	/* the axes and signed zeros: exact */
	for (size_t i = 0; i < sizeof(sp) / sizeof(sp[0]); i++)
		for (int q = 0; q < 4; q++) {
			const float x = q & 1 ? -sp[i] : sp[i], y = q & 2 ? -0.0f : 0.0f;
			assert_true(cpu_fn_phase(x, y) == be_fn_phase(x, y));
			assert_true(cpu_fn_phase(y, x) == be_fn_phase(y, x));
		}
	assert_true(worst < 5e-7);
	/* not finite: atan2f's answer, NaN stays NaN */
	static const float odd[] = {INFINITY, -INFINITY, NAN, 0.0f, -1.0f, 2.0f};
	for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++)
		for (size_t j = 0; j < sizeof(odd) / sizeof(odd[0]); j++) {
			const float a = cpu_fn_phase(odd[i], odd[j]),
			            b = be_fn_phase(odd[i], odd[j]);
			assert_true(a == b || (isnan(a) && isnan(b)));
		}
}

/* A row: the phase of each voxel, v and its u8 as be_fn_doppler_v gives them from it, a value
 * that is not finite in the middle of a block; outputs left NULL untouched. */
static void test_the_cpu_doppler_row_is_the_phase_of_each_voxel(void **unused)
{
	enum { N_ROW = 700 };
	static float re[N_ROW], im[N_ROW], ph[N_ROW], v[N_ROW];
	static uint8_t q[N_ROW];
	unsigned seed = 3;
	(void)unused;

	for (uint32_t i = 0; i < N_ROW; i++) {
		re[i] = wide(&seed);
		im[i] = wide(&seed);
	}
	re[300] = INFINITY;
	im[301] = NAN;
	cpu_fn_doppler_row(re, im, N_ROW, ph, v, q);
	for (uint32_t i = 0; i < N_ROW; i++) {
		const float p = cpu_fn_phase(re[i], im[i]);
		const float w = (p + BE_FN_PI) / (2.0f * BE_FN_PI);
		assert_true(memcmp(&ph[i], &p, sizeof(p)) == 0);
		assert_true(memcmp(&v[i], &w, sizeof(w)) == 0);
		if (i != 301)
			assert_int_equal(q[i], (uint8_t)(int)(255.0f * w + 0.5f));
	}
	/* v alone */
	memset(v, 0, sizeof(v));
	cpu_fn_doppler_row(re, im, N_ROW, NULL, v, NULL);
	for (uint32_t i = 0; i < N_ROW; i++) {
		const float w = (cpu_fn_phase(re[i], im[i]) + BE_FN_PI) / (2.0f * BE_FN_PI);
		assert_true(memcmp(&v[i], &w, sizeof(w)) == 0);
	}
}

VR_TEST_GROUP(cpu_functional)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_power_and_structure_db),
	        cmocka_unit_test(test_svar_of_equal_amplitudes_is_zero_and_of_two_known),
	        cmocka_unit_test(test_cdv_is_zero_for_repeats_that_differ_by_a_bulk_phase),
	        cmocka_unit_test(test_cdv_of_decorrelated_repeats_is_near_one),
	        cmocka_unit_test(test_window_is_cut_at_both_ends),
	        cmocka_unit_test(
	                test_a_uniform_phase_step_is_read_back_without_bulk_and_removed_with_it),
	        cmocka_unit_test(test_a_vessel_keeps_its_phase_when_bulk_motion_is_removed),
	        cmocka_unit_test(test_bulk_summed_by_lanes_agrees),
	        cmocka_unit_test(test_phase_range_and_stored_value),
	        cmocka_unit_test(test_random_spectra_agree_with_double_precision),
	        cmocka_unit_test(test_the_cpu_loops_over_an_ascan_are_the_per_voxel_functions),
	        cmocka_unit_test(test_the_cpu_mask_is_the_structure_db_against_mask_db),
	        cmocka_unit_test(test_the_cpu_phase_is_atan2_within_5e_7_rad),
	        cmocka_unit_test(test_the_cpu_doppler_row_is_the_phase_of_each_voxel),
	};
	return cmocka_run_group_tests_name("cpu_functional", tests, NULL, NULL);
}
