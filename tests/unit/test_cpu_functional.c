/* SPDX-License-Identifier: MIT */
/*
 * Functional OCT per voxel (backend/functional.h, docs/algorithms.md §5): cases whose answer
 * is known in closed form (identical repeats, a bulk phase, a uniform phase step, two
 * amplitudes), the edges of the axial window and of the phase's range, and random spectra
 * against the formulas written out again in double precision.
 */
#include <complex.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/functional.h"
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
	};
	return cmocka_run_group_tests_name("cpu_functional", tests, NULL, NULL);
}
