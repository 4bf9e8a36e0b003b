/* SPDX-License-Identifier: MIT */
/*
 * The shared host-side tables of backend/tables.c against docs/algorithms.md: kernel weights,
 * temporal and spatial weights, dispersion phasors, and the table checks' messages.
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <string.h>

#include "backend/jump.h"
#include "backend/ops.h"
#include "backend/register.h"
#include "backend/tables.h"
#include "tests/unit/vrtest.h"

static void test_resample_weights_at_a_sample(void **state)
{
	double w[4];
	int32_t base;

	(void)state;
	be_resample_weights(CFG_RS_LINEAR, 5.0, 16, &base, w);
	assert_int_equal(base, 5);
	assert_true(w[0] == 1.0 && w[1] == 0.0);
	be_resample_weights(CFG_RS_CUBIC, 5.0, 16, &base, w);
	assert_int_equal(base, 4);
	assert_true(w[0] == 0.0 && w[1] == 1.0 && w[2] == 0.0 && w[3] == 0.0);
	/* the spline's last interval is [K-2, K-1]: at K-1 all weight on y[K-1] */
	be_resample_weights(CFG_RS_SPLINE, 15.0, 16, &base, w);
	assert_int_equal(base, 14);
	assert_true(w[0] == 0.0 && w[1] == 1.0 && w[2] == 0.0 && w[3] == 0.0);
}

static void test_resample_weights_sum_to_one(void **state)
{
	const enum cfg_resample m[] = {CFG_RS_LINEAR, CFG_RS_CUBIC};
	double w[4];
	int32_t base;

	(void)state;
	for (unsigned i = 0; i < 2; i++)
		for (double p = 0.0; p <= 15.0; p += 0.137) {
			be_resample_weights(m[i], p, 16, &base, w);
			double s = w[0] + w[1] + w[2] + w[3];
			if (fabs(s - 1.0) > 1e-12)
				fail_msg("%s at %g: weights sum to %.17g", cfg_resample_name(m[i]),
				         p, s);
		}
}

static void test_temporal_weights(void **state)
{
	(void)state;
	assert_float_equal(be_temporal_weight(CFG_TEMPORAL_LINEAR, 25, 5.0, 0), 1.0, 0);
	assert_float_equal(be_temporal_weight(CFG_TEMPORAL_LINEAR, 25, 5.0, 5), 0.8, 1e-15);
	assert_float_equal(be_temporal_weight(CFG_TEMPORAL_LINEAR, 25, 5.0, 25), 0.0, 0);
	assert_float_equal(be_temporal_weight(CFG_TEMPORAL_LINEAR, 25, 5.0, 40), 0.0, 0);
	assert_float_equal(be_temporal_weight(CFG_TEMPORAL_EXP, 25, 5.0, 10), exp(-2.0), 0);
}

static void test_spatial_weights(void **state)
{
	(void)state;
	assert_float_equal(be_spatial_weight(1.0, 0), 1.0f, 0);
	assert_float_equal(be_spatial_weight(1.0, 2), (float)exp(-1.0), 0);
	assert_float_equal(be_spatial_weight(0.5, 1), (float)exp(-2.0), 0);
	/* the smallest sigma: the farthest neighbour's weight is still a normal float */
	assert_true(be_spatial_weight(CFG_SPATIAL_SIGMA_MIN, 3) >= FLT_MIN);
}

static void test_dispersion_without_phase_is_the_window(void **state)
{
	enum { K = 64 };
	struct vr_config c;
	float win[K], re[K], im[K];

	(void)state;
	cfg_defaults(&c);
	c.preprocess.dispersion.kind = CFG_DISP_COEFFS;
	c.preprocess.dispersion.coeffs[0] = c.preprocess.dispersion.coeffs[1] = 0.0;
	be_window_fill(CFG_WIN_HANN, 0.0, K, win);
	be_dispersion_fill(&c, K, win, re, im);
	for (int j = 0; j < K; j++) {
		assert_float_equal(re[j], win[j], 0);
		assert_float_equal(im[j], 0.0f, 0);
	}
	/* a2 = pi: phi = pi v^2 with v = j / (K - 1) - 0.5 */
	c.preprocess.dispersion.coeffs[0] = M_PI;
	be_dispersion_fill(&c, K, win, re, im);
	double v = 1.0 / (K - 1) - 0.5;
	assert_float_equal(re[1], win[1] * cos(M_PI * v * v), 1e-7);
	assert_float_equal(im[1], -win[1] * sin(M_PI * v * v), 1e-7);
}

/* be_live_init: each live scalar from its key, the dB range and spatial weights derived */
static void test_live_scalars_from_their_keys(void **state)
{
	struct vr_config c;
	struct be_live l;

	(void)state;
	cfg_defaults(&c);
	c.preprocess.background.mode = CFG_BG_PARTIAL_MEDIAN;
	c.preprocess.background.threshold = 7.5;
	c.preprocess.resample.method = CFG_RS_CUBIC;
	c.preprocess.dispersion.kind = CFG_DISP_COEFFS;
	c.preprocess.db_range[0] = 20;
	c.preprocess.db_range[1] = 100;
	c.preprocess.flip.x = true;
	c.preprocess.flip.z = true;
	c.geometry.bidirectional = true;
	c.reconstruct.mode = CFG_RECON_ADAPTIVE;
	c.reconstruct.temporal = CFG_TEMPORAL_EXP;
	c.reconstruct.combine = CFG_COMBINE_SUM;
	c.reconstruct.tau = 2.5;
	c.reconstruct.adaptive.tolerance = 0.25;
	c.reconstruct.adaptive.depth_half_window = 3;
	c.reconstruct.adaptive.speckle_tolerance = 0.125;
	c.reconstruct.compensated.estimate_pose = false;
	c.reconstruct.spatial_sigma = 0.8;
	be_live_init(&l, &c);
	assert_int_equal(l.background, CFG_BG_PARTIAL_MEDIAN);
	assert_true(l.pm_threshold == 7.5);
	assert_int_equal(l.resample, CFG_RS_CUBIC);
	assert_true(l.dispersion);
	assert_true(l.db_lo == 20.0f && l.db_inv == (float)(1.0 / 80.0));
	assert_true(l.flip_x && l.flip_z && l.bidirectional);
	assert_int_equal(l.mode, CFG_RECON_ADAPTIVE);
	assert_int_equal(l.temporal, CFG_TEMPORAL_EXP);
	assert_int_equal(l.combine, CFG_COMBINE_SUM);
	assert_true(l.tau == 2.5 && l.tolerance == 0.25 && l.speckle_tolerance == 0.125);
	assert_int_equal(l.depth_half_window, 3);
	assert_false(l.estimate_pose);
	for (unsigned d = 0; d < 4; d++)
		assert_true(l.g[d] == be_spatial_weight(0.8, d));
	/* flip.x, reversed again on odd B-scans when bidirectional */
	assert_true(be_live_reversed(&l, 0) && !be_live_reversed(&l, 1));
	l.flip_x = false;
	assert_true(!be_live_reversed(&l, 2) && be_live_reversed(&l, 3));
	l.bidirectional = false;
	assert_false(be_live_reversed(&l, 3));
	c.preprocess.dispersion.kind = CFG_DISP_NONE;
	be_live_init(&l, &c);
	assert_false(l.dispersion);

	/* functional.*: absent keys follow the others (docs/configuration.md) */
	assert_int_equal(l.angio_method, CFG_ANGIO_CDV);
	assert_true(l.angio_lo == 0.0f && l.angio_inv == 1.0f);
	assert_true(l.mask_db == 44.0f);                     /* 20 + 0.3 * (100 - 20) */
	assert_int_equal(l.doppler_axis, CFG_DOPPLER_ASCAN); /* M = 1 */
	assert_int_equal(l.fn_half_window, 2);
	assert_true(l.doppler_bulk);
	c.geometry.repeats = 2;
	c.functional.angio.method = CFG_ANGIO_SVAR;
	be_live_init(&l, &c);
	assert_true(l.angio_lo == 0.0f && l.angio_inv == (float)(1.0 / 100.0));
	assert_int_equal(l.doppler_axis, CFG_DOPPLER_BSCAN);
	c.functional.angio.range_given = 1;
	c.functional.angio.range[0] = 2;
	c.functional.angio.range[1] = 6;
	c.functional.mask_given = 1;
	c.functional.mask_db = 51.5;
	c.functional.doppler.axis_given = 1;
	c.functional.doppler.axis = CFG_DOPPLER_ASCAN;
	c.functional.axial_half_window = 4;
	c.functional.doppler.bulk = false;
	be_live_init(&l, &c);
	assert_true(l.angio_lo == 2.0f && l.angio_inv == 0.25f && l.mask_db == 51.5f);
	assert_int_equal(l.doppler_axis, CFG_DOPPLER_ASCAN);
	assert_int_equal(l.fn_half_window, 4);
	assert_false(l.doppler_bulk);
}

VR_TEST_GROUP(tables)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_resample_weights_at_a_sample),
	        cmocka_unit_test(test_resample_weights_sum_to_one),
	        cmocka_unit_test(test_temporal_weights),
	        cmocka_unit_test(test_spatial_weights),
	        cmocka_unit_test(test_dispersion_without_phase_is_the_window),
	        cmocka_unit_test(test_live_scalars_from_their_keys),
	};
	return cmocka_run_group_tests_name("tables", tests, NULL, NULL);
}

/* docs/algorithms.md §2d step 1: the axial shift of a column against a reference, to a
 * fraction of a bin; none for a flat column or beyond the search range. */
static void test_register_shift(void **state)
{
	(void)state;
	enum { Z = 96 };
	float l[Z], r[Z], flat[Z];
	double corr;

	for (int z = 0; z < Z; z++) {
		double a = (z - 40.0) / 3.0, b = (z - 40.0 - 2.3) / 3.0;
		double c = (z - 60.0) / 2.0, d = (z - 60.0 - 2.3) / 2.0;
		r[z] = (float)(exp(-a * a) + 0.5 * exp(-c * c));
		l[z] = (float)(exp(-b * b) + 0.5 * exp(-d * d)); /* r, 2.3 bins deeper */
		flat[z] = 0.25f;
	}
	double s = be_reg_shift(l, r, Z, &corr);
	assert_true(fabs(s - 2.3) < 0.15 && corr > 0.9);
	assert_true(fabs(be_reg_shift(r, l, Z, &corr) + 2.3) < 0.15); /* the other way */
	assert_true(be_reg_shift(flat, r, Z, &corr) == 0.0 && corr == 0.0);
	for (int z = 0; z < Z; z++) { /* 12 bins deeper: beyond BE_REG_RANGE */
		double b = (z - 52.0) / 3.0;
		l[z] = (float)exp(-b * b);
	}
	assert_true(be_reg_shift(l, r, Z, &corr) == 0.0 && corr == 0.0);
}

/* docs/algorithms.md §2d step 2: the plane of the shifts, without an outlier; an insignificant
 * plane is 0; too few shifts fit nothing. */
static void test_register_fit(void **state)
{
	(void)state;
	enum { N = 64 };
	const struct be_reg_plane truth = {0.4, 0.02, -0.015};
	double d[N], w[N];
	uint32_t ys[N], xs[N];
	struct be_reg_plane p;

	for (int i = 0; i < N; i++) {
		ys[i] = (uint32_t)(i / 8) * 5 + 2;
		xs[i] = (uint32_t)(i % 8) * 5 + 1;
		/* a deterministic jitter of +-0.05 bins */
		d[i] = be_reg_plane_at(&truth, ys[i], xs[i], 40, 40) + 0.05 * sin(1.7 * i);
		w[i] = 1.0;
	}
	d[10] += 5.0; /* an outlier */
	assert_true(be_reg_fit(d, w, ys, xs, N, 40, 40, &p));
	assert_true(w[10] == 0.0);
	assert_true(fabs(p.c - truth.c) < 0.02 && fabs(p.ax - truth.ax) < 2e-3 &&
	            fabs(p.ay - truth.ay) < 2e-3);
	for (int i = 0; i < N; i++) { /* the jitter alone: no plane */
		d[i] = 0.05 * sin(1.7 * i);
		w[i] = 1.0;
	}
	assert_true(be_reg_fit(d, w, ys, xs, N, 40, 40, &p));
	assert_true(p.c == 0.0 && p.ax == 0.0 && p.ay == 0.0);
	for (int i = 0; i < N; i++)
		w[i] = i < BE_REG_MIN_SAMPLES - 1 ? 1.0 : 0.0;
	assert_false(be_reg_fit(d, w, ys, xs, N, 40, 40, &p));
}

VR_TEST_GROUP(reg)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_register_shift),
	        cmocka_unit_test(test_register_fit),
	};
	return cmocka_run_group_tests_name("reg", tests, NULL, NULL);
}

/* One epoch of the jump recovery's decision (backend/jump.h) on a constant A-scan of Z bins at
 * level v over n samples, all known, still of them agreeing with their history. */
static void jump_epoch(struct be_jump *j, double *mean, uint64_t e, double v, uint64_t n,
                       uint64_t still)
{
	enum { Z = 16 };
	double cur[Z];

	for (int z = 0; z < Z; z++) /* the mean of the sum over the samples */
		cur[z] = n > 0 ? be_jump_mean(v * (double)n, n) : 0.0;
	be_jump_decide(j, e, cur, mean, Z, 2, n, n, still);
}

/* docs/algorithms.md §2b, "Recovery after a jump": settled after BE_JUMP_SETTLED still
 * epochs, the still level from the lag-1 changes of a settled still scene, a jump out of it
 * armed for one cycle of S epochs, not armed without a settled scene or after a gap. */
static void test_jump_decide(void **state)
{
	const uint32_t S = 4;
	struct be_jump j;
	double mean[16] = {0};
	uint64_t e = 0;

	(void)state;
	be_jump_reset(&j);
	jump_epoch(&j, mean, e, 1.0, 100, 0); /* no last epoch: a move, not a jump */
	assert_true(j.move == 0 && !j.armed && j.mean_e == 0);
	assert_true(be_jump_since(&j, e, S) == INT64_MAX);
	/* still epochs with a small change: settled after BE_JUMP_SETTLED of them, then the
	 * still level measured (its largest change) */
	for (e = 1; e <= BE_JUMP_SETTLED + 2; e++)
		jump_epoch(&j, mean, e, 1.0 + 0.001 * (double)(e % 2), 100, 100);
	assert_true(j.run == BE_JUMP_SETTLED + 2);
	assert_true(fabs(j.cal - 1e-6) < 1e-9);
	assert_false(j.armed);
	const int64_t settled_move = j.move;
	/* a change within BE_JUMP_RATIO times the still level: no move */
	jump_epoch(&j, mean, e, 1.0 + 0.001 * (double)(e % 2), 100, 100);
	assert_true(j.move == settled_move && !j.armed);
	e++;
	/* the jump: armed for the cycle that starts with it */
	const uint64_t jump = e;
	jump_epoch(&j, mean, e, 1.5, 100, 10);
	assert_true(j.move == (int64_t)jump && j.armed && j.run == 0);
	assert_true(be_jump_since(&j, jump, S) == (int64_t)jump);
	assert_true(be_jump_since(&j, jump + S - 1, S) == (int64_t)jump);
	assert_true(be_jump_since(&j, jump + S, S) == INT64_MAX);
	/* still again after the jump: a small change holds the move */
	e++;
	jump_epoch(&j, mean, e, 1.5, 100, 100);
	assert_true(j.move == (int64_t)jump && j.armed);
	/* a large change while not settled: a move, not a jump */
	e++;
	jump_epoch(&j, mean, e, 2.5, 100, 100);
	assert_true(j.move == (int64_t)e && !j.armed);
	/* a gap of an epoch: no lag-1 change, a move, not a jump */
	e += 2;
	jump_epoch(&j, mean, e, 2.5, 100, 100);
	assert_true(j.move == (int64_t)e && !j.armed && j.mean_e == (int64_t)e);
	/* nothing scanned: nothing known */
	e++;
	jump_epoch(&j, mean, e, 2.5, 0, 0);
	assert_true(j.move == (int64_t)e && !j.armed && j.mean_e == -1 && j.run == 0);
	/* an epoch with a sample without history is not still */
	e++;
	double cur[16];
	for (int z = 0; z < 16; z++)
		cur[z] = 100.0;
	be_jump_decide(&j, e, cur, mean, 16, 2, 100, 99, 99);
	assert_true(j.run == 0);
}

VR_TEST_GROUP(jump)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_jump_decide),
	};
	return cmocka_run_group_tests_name("jump", tests, NULL, NULL);
}
