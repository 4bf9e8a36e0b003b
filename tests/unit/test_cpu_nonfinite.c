/* SPDX-License-Identifier: MIT */
/*
 * Non-finite f32 samples (docs/algorithms.md §1.0) on the CPU reference backend: an A-scan that
 * holds a NaN or an infinity is missing, whatever and wherever its non-finite samples are (one
 * NaN, one -inf, the whole A-scan +inf give the same volumes bit for bit); it is counted per
 * B-scan; it adds nothing to the background, so that against the same input with that A-scan
 * replaced by one the background cannot see, only the voxels next to its position change (in
 * cumulative mode: a neighbourhood that grows by one column an epoch, never the whole volume);
 * integer samples go through unchanged.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/base.h"
#include "tests/unit/vrtest.h"

enum { K = 64, NX = 12, NY = 6, NZ = 32, SX = 2, SY = 2, X = NX * SX, Y = NY * SY, EPOCHS = 9 };
enum { BAD_B = 2, BAD_A = 5, BAD_EPOCH = 4 };

#define BSCAN ((size_t)NX * K)
#define EPOCH ((size_t)NY * BSCAN)
#define FULL  ((size_t)Y * X * NZ)

static void nf_config(struct vr_config *c, enum cfg_sample st, enum cfg_background bg,
                      enum cfg_recon_mode mode)
{
	vrtest_cpu_config(c, K, st, NX, NY, 2);
	c->geometry.stride[0] = SX;
	c->geometry.stride[1] = SY;
	c->geometry.depth_range[1] = NZ;
	c->preprocess.background.mode = bg;
	c->preprocess.background.threshold = 0.5;
	c->preprocess.db_range[0] = 20;
	c->preprocess.db_range[1] = 90;
	c->reconstruct.mode = mode;
}

static uint64_t nf_rand(uint64_t *r)
{
	*r ^= *r << 13;
	*r ^= *r >> 7;
	*r ^= *r << 17;
	return *r;
}

/* EPOCHS epochs of integer-valued spectra [EPOCHS][NY][NX][K] (below 4096: u12p can hold them):
 * a DC, two reflectors whose depth varies over the volume, noise. */
static float *nf_data(void)
{
	float *s = malloc(sizeof(float) * EPOCHS * EPOCH);
	uint64_t r = 0x9e3779b97f4a7c15ull;

	assert_non_null(s);
	for (int e = 0; e < EPOCHS; e++)
		for (int b = 0; b < NY; b++)
			for (int a = 0; a < NX; a++)
				for (int k = 0; k < K; k++) {
					double z1 = 6 + 0.5 * a + 0.3 * b, z2 = 17 + 0.2 * a;
					double v = 2000 + 600 * cos(2 * M_PI * z1 * k / K) +
					           300 * cos(2 * M_PI * z2 * k / K + 0.1 * b) +
					           (double)(nf_rand(&r) % 41) - 20;
					s[e * EPOCH + (b * NX + a) * BSCAN / NX + k] =
					        (float)floor(v);
				}
	return s;
}

static float *at(float *d, int e, int b, int a)
{
	return d + (size_t)e * EPOCH + (size_t)b * BSCAN + (size_t)a * K;
}

/* Make A-scan (BAD_B, BAD_A) of epoch BAD_EPOCH invisible to background bg: for bscan_mean the
 * other A-scans' sum is made a multiple of NX - 1 (on A-scan 0) and the A-scan is their mean,
 * for bscan_median it is the median of the other NX - 1 (odd): the background over all NX
 * A-scans is then exactly that over the others. Other modes: nothing to do. */
static void nf_neutral(float *d, enum cfg_background bg)
{
	for (int k = 0; k < K; k++) {
		double sum = 0;
		float v[NX - 1];
		int n = 0;
		for (int a = 0; a < NX; a++)
			if (a != BAD_A) {
				sum += at(d, BAD_EPOCH, BAD_B, a)[k];
				v[n++] = at(d, BAD_EPOCH, BAD_B, a)[k];
			}
		if (bg == CFG_BG_BSCAN_MEAN || bg == CFG_BG_PARTIAL_MEDIAN) {
			long rem = (long)sum % (NX - 1);
			at(d, BAD_EPOCH, BAD_B, 0)[k] -= (float)rem;
			at(d, BAD_EPOCH, BAD_B, BAD_A)[k] = (float)((sum - rem) / (NX - 1));
		} else if (bg == CFG_BG_BSCAN_MEDIAN) {
			for (int i = 1; i < n; i++)
				for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
					float t = v[j];
					v[j] = v[j - 1];
					v[j - 1] = t;
				}
			at(d, BAD_EPOCH, BAD_B, BAD_A)[k] = v[n / 2];
		}
	}
}

/* The float output of every epoch [EPOCHS][FULL] and the missing counts [EPOCHS][NY] of data
 * (raw bytes of EPOCHS epochs of cfg's sample type, epoch_bytes each). */
static void nf_run(const struct vr_config *c, const void *data, size_t epoch_bytes, float *full,
                   uint32_t *missing)
{
	struct be_backend *be = NULL;
	char err[256] = "";
	int rc = be_open(c, &be, NULL, 0, err, sizeof(err));

	if (rc < 0)
		fail_msg("be_open: %s", err);
	for (int e = 0; e < EPOCHS; e++) {
		const uint8_t *ep = (const uint8_t *)data + (size_t)e * epoch_bytes;
		for (uint32_t b = 0; b < NY; b++)
			assert_int_equal(be_bscan_submit(be, (uint64_t)e, b,
			                                 ep + (size_t)b * (epoch_bytes / NY)),
			                 0);
		struct be_output o = {.full = full + (size_t)e * FULL,
		                      .missing_ascans = missing + (size_t)e * NY};
		rc = be_epoch_finish(be, (uint64_t)e, &o, err, sizeof(err));
		if (rc < 0)
			fail_msg("be_epoch_finish: %s", err);
	}
	be_close(be);
}

static const enum cfg_background bgs[] = {CFG_BG_ASCAN_MEAN, CFG_BG_BSCAN_MEAN, CFG_BG_BSCAN_MEDIAN,
                                          CFG_BG_PARTIAL_MEDIAN, CFG_BG_NONE};
static const enum cfg_recon_mode modes[] = {CFG_RECON_NONCUMULATIVE, CFG_RECON_CUMULATIVE,
                                            CFG_RECON_ADAPTIVE, CFG_RECON_NONE};

/* The full-resolution position (row, column) of A-scan (BAD_B, BAD_A) at BAD_EPOCH. */
static void bad_position(int *fy, int *fx)
{
	uint32_t ox, oy;

	vr_scan_offset(BAD_EPOCH, SX, SY, &ox, &oy);
	*fy = BAD_B * SY + (int)oy;
	*fx = BAD_A * SX + (int)ox;
}

/* One NaN, one -inf, or the whole A-scan +inf: the same volumes, bit for bit, all finite, and
 * the A-scan counted at its B-scan in its epoch only. */
static void test_nonfinite_any_kind_is_the_same_missing_ascan(void **state)
{
	(void)state;
	float *base = nf_data();
	float *in[3], *full[3];
	uint32_t *miss[3];

	for (int i = 0; i < 3; i++) {
		in[i] = malloc(sizeof(float) * EPOCHS * EPOCH);
		full[i] = malloc(sizeof(float) * EPOCHS * FULL);
		miss[i] = malloc(sizeof(uint32_t) * EPOCHS * NY);
		assert_true(in[i] && full[i] && miss[i]);
		memcpy(in[i], base, sizeof(float) * EPOCHS * EPOCH);
	}
	at(in[0], BAD_EPOCH, BAD_B, BAD_A)[17] = NAN;
	at(in[1], BAD_EPOCH, BAD_B, BAD_A)[K - 1] = -INFINITY;
	for (int k = 0; k < K; k++)
		at(in[2], BAD_EPOCH, BAD_B, BAD_A)[k] = INFINITY;

	for (size_t ib = 0; ib < sizeof(bgs) / sizeof(bgs[0]); ib++)
		for (size_t im = 0; im < sizeof(modes) / sizeof(modes[0]); im++) {
			struct vr_config c;
			nf_config(&c, CFG_SAMPLE_F32, bgs[ib], modes[im]);
			c.geometry.bidirectional = im == 1; /* the reversed rows too */
			for (int i = 0; i < 3; i++)
				nf_run(&c, in[i], EPOCH * sizeof(float), full[i], miss[i]);
			for (size_t v = 0; v < (size_t)EPOCHS * FULL; v++)
				if (!isfinite(full[0][v]))
					fail_msg("background %s, mode %s: voxel %zu is %g",
					         cfg_background_name(bgs[ib]),
					         cfg_recon_mode_name(modes[im]), v, full[0][v]);
			for (int i = 1; i < 3; i++)
				if (memcmp(full[0], full[i], sizeof(float) * EPOCHS * FULL))
					fail_msg("background %s, mode %s: input %d differs",
					         cfg_background_name(bgs[ib]),
					         cfg_recon_mode_name(modes[im]), i);
			for (int e = 0; e < EPOCHS; e++)
				for (int b = 0; b < NY; b++)
					assert_int_equal(miss[0][e * NY + b],
					                 e == BAD_EPOCH && b == BAD_B ? 1 : 0);
		}
	for (int i = 0; i < 3; i++) {
		free(in[i]);
		free(full[i]);
		free(miss[i]);
	}
	free(base);
}

/* Against the same input with the A-scan replaced by one the background does not see (for
 * partial_median only the mean is blind to it, sigma is not: its B-scan's row may differ): at the
 * epoch, only the columns within reach of its position differ (one column: the 3 x 3 weights;
 * adaptive: one stride, the interpolation of the newest epoch and of the change); later,
 * noncumulative only until the position is scanned again (a cycle), adaptive until then
 * included (the new sample there has no history to compare with), cumulative within one more
 * column an epoch. */
static void test_nonfinite_changes_only_the_neighbourhood(void **state)
{
	(void)state;
	float *clean = malloc(sizeof(float) * EPOCHS * EPOCH);
	float *bad = malloc(sizeof(float) * EPOCHS * EPOCH);
	float *fc = malloc(sizeof(float) * EPOCHS * FULL),
	      *fb = malloc(sizeof(float) * EPOCHS * FULL);
	uint32_t miss[EPOCHS * NY];
	int fy, fx;

	assert_true(clean && bad && fc && fb);
	bad_position(&fy, &fx);
	for (size_t ib = 0; ib < sizeof(bgs) / sizeof(bgs[0]); ib++)
		for (size_t im = 0; im < 3; im++) {
			float *base = nf_data();
			nf_neutral(base, bgs[ib]);
			memcpy(clean, base, sizeof(float) * EPOCHS * EPOCH);
			memcpy(bad, base, sizeof(float) * EPOCHS * EPOCH);
			free(base);
			at(bad, BAD_EPOCH, BAD_B, BAD_A)[3] = NAN;
			struct vr_config c;
			nf_config(&c, CFG_SAMPLE_F32, bgs[ib], modes[im]);
			nf_run(&c, clean, EPOCH * sizeof(float), fc, miss);
			nf_run(&c, bad, EPOCH * sizeof(float), fb, miss);
			const bool adaptive = modes[im] == CFG_RECON_ADAPTIVE;
			const bool cumulative = modes[im] == CFG_RECON_CUMULATIVE;
			size_t changed = 0;
			for (int e = 0; e < EPOCHS; e++)
				for (int yy = 0; yy < Y; yy++)
					for (int xx = 0; xx < X; xx++) {
						const size_t o =
						        ((size_t)e * Y * X + (size_t)yy * X + xx) *
						        NZ;
						int ry = adaptive ? SY : 1, rx = adaptive ? SX : 1;
						/* partial_median: sigma over the A-scans
						 * differs (NX - 1 of them): the B-scan's row */
						if (bgs[ib] == CFG_BG_PARTIAL_MEDIAN)
							rx = X;
						bool inside;
						if (cumulative) {
							ry += e - BAD_EPOCH;
							rx += e - BAD_EPOCH;
						}
						inside = e >= BAD_EPOCH && abs(yy - fy) <= ry &&
						         abs(xx - fx) <= rx &&
						         (cumulative || e < BAD_EPOCH + SX * SY ||
						          (adaptive && e == BAD_EPOCH + SX * SY));
						bool same =
						        !memcmp(fc + o, fb + o, NZ * sizeof(float));
						if (!same && !inside)
							fail_msg("background %s, mode %s: epoch %d "
							         "column "
							         "(%d, %d) changed, the A-scan is "
							         "at (%d, %d)",
							         cfg_background_name(bgs[ib]),
							         cfg_recon_mode_name(modes[im]), e,
							         yy, xx, fy, fx);
						changed += !same;
					}
			/* the test can see a change: the position itself is reconstructed */
			assert_true(changed > 0);
		}
	free(clean);
	free(bad);
	free(fc);
	free(fb);
}

/* Integer samples never take the non-finite path: u16 and u12p input give the volumes of the
 * same values as f32, bit for bit, and count nothing. */
static void test_nonfinite_integer_input_is_unchanged(void **state)
{
	(void)state;
	float *f = nf_data();
	uint16_t *u = malloc(sizeof(uint16_t) * EPOCHS * EPOCH);
	uint8_t *p = malloc(EPOCHS * EPOCH / 2 * 3);
	float *ff = malloc(sizeof(float) * EPOCHS * FULL),
	      *fu = malloc(sizeof(float) * EPOCHS * FULL),
	      *fp = malloc(sizeof(float) * EPOCHS * FULL);
	uint32_t mf[EPOCHS * NY], mu[EPOCHS * NY], mp[EPOCHS * NY];

	assert_true(u && p && ff && fu && fp);
	for (size_t i = 0; i < (size_t)EPOCHS * EPOCH; i++)
		u[i] = (uint16_t)f[i];
	for (size_t i = 0; i < (size_t)EPOCHS * EPOCH; i += 2) {
		/* Mono12p: s0 = b0 | (b1 & 0xF) << 8, s1 = b1 >> 4 | b2 << 4 */
		uint8_t *q = p + i / 2 * 3;
		q[0] = (uint8_t)(u[i] & 0xff);
		q[1] = (uint8_t)((u[i] >> 8) | (u[i + 1] & 0xf) << 4);
		q[2] = (uint8_t)(u[i + 1] >> 4);
	}
	for (size_t ib = 0; ib < sizeof(bgs) / sizeof(bgs[0]); ib++) {
		struct vr_config c;
		nf_config(&c, CFG_SAMPLE_F32, bgs[ib], CFG_RECON_CUMULATIVE);
		nf_run(&c, f, EPOCH * sizeof(float), ff, mf);
		nf_config(&c, CFG_SAMPLE_U16, bgs[ib], CFG_RECON_CUMULATIVE);
		nf_run(&c, u, EPOCH * sizeof(uint16_t), fu, mu);
		nf_config(&c, CFG_SAMPLE_U12P, bgs[ib], CFG_RECON_CUMULATIVE);
		nf_run(&c, p, EPOCH / 2 * 3, fp, mp);
		assert_memory_equal(ff, fu, sizeof(float) * EPOCHS * FULL);
		assert_memory_equal(ff, fp, sizeof(float) * EPOCHS * FULL);
		for (int i = 0; i < EPOCHS * NY; i++)
			assert_true(mf[i] == 0 && mu[i] == 0 && mp[i] == 0);
	}
	free(f);
	free(u);
	free(p);
	free(ff);
	free(fu);
	free(fp);
}

VR_TEST_GROUP(cpu_nonfinite)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_nonfinite_any_kind_is_the_same_missing_ascan),
	        cmocka_unit_test(test_nonfinite_changes_only_the_neighbourhood),
	        cmocka_unit_test(test_nonfinite_integer_input_is_unchanged),
	};
	return cmocka_run_group_tests_name("cpu_nonfinite", tests, NULL, NULL);
}
