/* SPDX-License-Identifier: MIT */
/*
 * Partial median subtraction (docs/algorithms.md §1b) on the CPU reference backend: without depths
 * above the threshold it is bscan_mean bit for bit; a fixed-pattern line that a strong tilted
 * reflector crosses is removed by the median where the mean leaves it; the count of median
 * depths per B-scan; switching the mode on and off live.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "tests/unit/vrtest.h"

enum { K = 256, NX = 64, NY = 2, NZ = K / 2, LINE = 40 };

static void pm_config(struct vr_config *c, enum cfg_background mode, double threshold)
{
	vrtest_cpu_config(c, K, CFG_SAMPLE_F32, NX, NY, 2); /* depth range [0, NZ) */
	c->preprocess.background.mode = mode;
	c->preprocess.background.threshold = threshold;
	c->preprocess.window.type = CFG_WIN_NONE; /* integer-bin cosines stay in their bin */
	c->preprocess.db_range[0] = 0;
	c->preprocess.db_range[1] = 150;
	c->reconstruct.mode = CFG_RECON_NONE;
}

/* Spectra [NY][NX][K]: DC, noise, a fixed-pattern cosine at bin LINE in every A-scan, and a
 * strong reflector whose depth moves with the A-scan (a tilted surface) through bin LINE in
 * A-scans 30..32. */
static float *pm_data(void)
{
	float *s = malloc(sizeof(float) * NY * NX * K);
	uint64_t r = 0x243f6a8885a308d3ull;

	assert_non_null(s);
	for (int b = 0; b < NY; b++)
		for (int a = 0; a < NX; a++) {
			int zt = 10 + (a * 90) / NX;
			if (a >= 30 && a <= 32)
				zt = LINE;
			for (int k = 0; k < K; k++) {
				r ^= r << 13;
				r ^= r >> 7;
				r ^= r << 17;
				double noise =
				        ((double)(r >> 11) / 9007199254740992.0 - 0.5) * 20.0;
				double v = 30000.0 + noise + 200.0 * cos(2 * M_PI * LINE * k / K) +
				           5000.0 * cos(2 * M_PI * zt * k / K + 0.3 * a);
				s[((size_t)b * NX + a) * K + k] = (float)v;
			}
		}
	return s;
}

/* One epoch of data through a CPU backend for c: lowres [NY][NX][NZ] and the counts. */
static void pm_run(const struct vr_config *c, const float *data, float *low, uint32_t *md)
{
	struct be_backend *be = NULL;
	char err[256] = "";
	int rc = be_open(c, &be, NULL, 0, err, sizeof(err));

	if (rc < 0)
		fail_msg("be_open: %s", err);
	for (uint32_t b = 0; b < NY; b++)
		assert_int_equal(be_bscan_submit(be, 0, b, data + (size_t)b * NX * K), 0);
	struct be_output o = {.lowres = low, .median_depths = md};
	rc = be_epoch_finish(be, 0, &o, err, sizeof(err));
	if (rc < 0)
		fail_msg("be_epoch_finish: %s", err);
	be_close(be);
}

/* Mean dB value (normalized) at depth z over the A-scans the reflector never touches there. */
static double line_level(const float *low, int b, int z)
{
	double s = 0;
	int n = 0;

	for (int a = 0; a < NX; a++) {
		if (a >= 28 && a <= 34)
			continue;
		s += low[((size_t)b * NX + a) * NZ + z];
		n++;
	}
	return s / n;
}

static void test_pmedian_without_median_depths_is_bscan_mean(void **state)
{
	struct vr_config c;
	float *data = pm_data();
	float *lm = malloc(sizeof(float) * NY * NX * NZ),
	      *lp = malloc(sizeof(float) * NY * NX * NZ);
	uint32_t md[NY] = {7, 7};

	(void)state;
	pm_config(&c, CFG_BG_BSCAN_MEAN, 10);
	pm_run(&c, data, lm, md);
	assert_int_equal(md[0], 0); /* other modes report 0 */
	pm_config(&c, CFG_BG_PARTIAL_MEDIAN, 1e6);
	pm_run(&c, data, lp, md);
	assert_int_equal(md[0], 0);
	assert_int_equal(md[1], 0);
	for (size_t i = 0; i < (size_t)NY * NX * NZ; i++)
		if (lm[i] != lp[i])
			fail_msg("voxel %zu: bscan_mean %.9g, partial_median %.9g", i, lm[i],
			         lp[i]);
	free(data);
	free(lm);
	free(lp);
}

static void test_pmedian_removes_the_line_the_mean_leaves(void **state)
{
	struct vr_config c;
	float *data = pm_data();
	float *lm = malloc(sizeof(float) * NY * NX * NZ),
	      *lp = malloc(sizeof(float) * NY * NX * NZ);
	uint32_t md[NY];

	(void)state;
	pm_config(&c, CFG_BG_BSCAN_MEAN, 10);
	pm_run(&c, data, lm, md);
	pm_config(&c, CFG_BG_PARTIAL_MEDIAN, 10);
	pm_run(&c, data, lp, md);
	for (int b = 0; b < NY; b++) {
		/* the reflector visits about NX distinct depths, each in 1-3 A-scans: each is a
		 * median depth; the noise-only depths are not */
		if (md[b] < 40 || md[b] > 80)
			fail_msg("B-scan %d: %u median depths, want 40..80", b, md[b]);
		double mean_line = line_level(lm, b, LINE), pm_line = line_level(lp, b, LINE);
		double mean_bg = line_level(lm, b, 120), pm_bg = line_level(lp, b, 120);
		print_message("B-scan %d: %u median depths; line at bin %d: bscan_mean %.4f, "
		              "partial_median %.4f; noise at bin 120: %.4f, %.4f\n",
		              b, md[b], LINE, mean_line, pm_line, mean_bg, pm_bg);
		/* 150 dB range: 0.01 = 1.5 dB; the mean leaves 3 x 5000 / 64 x K/2 in every
		 * A-scan, about 40 dB above the noise */
		if (!(mean_line > mean_bg + 0.2))
			fail_msg("B-scan %d: bscan_mean line %.4f, background %.4f: no artifact", b,
			         mean_line, mean_bg);
		if (!(pm_line < pm_bg + 0.05))
			fail_msg("B-scan %d: partial_median line %.4f, background %.4f: artifact "
			         "left",
			         b, pm_line, pm_bg);
	}
	free(data);
	free(lm);
	free(lp);
}

static void test_pmedian_switches_live(void **state)
{
	struct vr_config c, d;
	struct be_backend *be = NULL;
	float *data = pm_data();
	float *low = malloc(sizeof(float) * NY * NX * NZ);
	uint32_t md[NY];
	char err[256] = "";

	(void)state;
	pm_config(&c, CFG_BG_ASCAN_MEAN, 10);
	assert_int_equal(be_open(&c, &be, NULL, 0, err, sizeof(err)), 0);
	for (uint64_t e = 0; e < 3; e++) {
		if (e == 1) {
			pm_config(&d, CFG_BG_PARTIAL_MEDIAN, 10);
			if (be_update_live(be, &d, err, sizeof(err)) < 0)
				fail_msg("update_live: %s", err);
		} else if (e == 2) {
			pm_config(&d, CFG_BG_ASCAN_MEAN, 10);
			if (be_update_live(be, &d, err, sizeof(err)) < 0)
				fail_msg("update_live: %s", err);
		}
		for (uint32_t b = 0; b < NY; b++)
			assert_int_equal(be_bscan_submit(be, e, b, data + (size_t)b * NX * K), 0);
		struct be_output o = {.lowres = low, .median_depths = md};
		if (be_epoch_finish(be, e, &o, err, sizeof(err)) < 0)
			fail_msg("epoch %llu: %s", (unsigned long long)e, err);
		if (e == 1 && md[0] == 0)
			fail_msg("epoch 1 (partial_median): no median depth reported");
		if (e != 1 && (md[0] != 0 || md[1] != 0))
			fail_msg("epoch %llu (ascan_mean): %u median depths", (unsigned long long)e,
			         md[0]);
	}
	/* a negative threshold is refused by the schema, naming the key, and changes nothing */
	pm_config(&d, CFG_BG_PARTIAL_MEDIAN, -1);
	assert_int_equal(be_update_live(be, &d, err, sizeof(err)), -ERANGE);
	if (!strstr(err, "preprocess.background.threshold"))
		fail_msg("message: %s", err);
	be_close(be);
	free(data);
	free(low);
}

VR_TEST_GROUP(cpu_pmedian)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_pmedian_without_median_depths_is_bscan_mean),
	        cmocka_unit_test(test_pmedian_removes_the_line_the_mean_leaves),
	        cmocka_unit_test(test_pmedian_switches_live),
	};
	return cmocka_run_group_tests_name("cpu_pmedian", tests, NULL, NULL);
}
