/* SPDX-License-Identifier: MIT */
/*
 * output.channels on the CPU backend (docs/algorithms.md §5): the functional.* keys are live
 * (a change applies from the next epoch on, as a backend built with them computes it), and an
 * output that holds fewer channels than configured is refused instead of written past.
 * The numbers themselves are checked against the float64 reference in
 * tests/integration/test_channels.py.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "tests/unit/vrtest.h"

enum { K = 64, NX = 5, NY = 3, M = 2 };

static uint16_t raw[NY * M][NX * K];

static void channels_config(struct vr_config *c)
{
	vrtest_cpu_config(c, K, CFG_SAMPLE_U16, NX, NY, 2);
	c->geometry.repeats = M;
	c->reconstruct.mode = CFG_RECON_NONE;
	c->output.nchannels = 3;
	strcpy(c->output.channels[0], "structure");
	strcpy(c->output.channels[1], "angio");
	strcpy(c->output.channels[2], "doppler");
	/* the views inside this small volume, as a loaded file's defaults would be */
	c->view.slab[1] = K / 2;
	c->view.position[0] = NY / 2;
	c->view.position[1] = NX / 2;
	c->view.position[2] = K / 4;
}

static void fill_raw(void)
{
	unsigned seed = 12345;

	for (int b = 0; b < NY * M; b++)
		for (int i = 0; i < NX * K; i++) {
			seed = seed * 1103515245u + 12345u;
			/* repeats share most of a position's signal: angiography between 0 and 1 */
			unsigned base = ((unsigned)(b / M) * 7919u + (unsigned)i * 104729u) % 4000u;
			raw[b][i] = (uint16_t)(base + (seed >> 16) % (b % 2 ? 600u : 50u));
		}
}

/* One epoch of raw through be into vol (3 channels) and its low-resolution volumes. */
static void run_epoch(struct be_backend *be, uint64_t e, uint8_t *vol, float *la, float *ld)
{
	struct be_output out = {
	        .volume = vol, .lowres_angio = la, .lowres_doppler = ld, .channels = 3};
	char err[512];

	for (uint32_t b = 0; b < NY * M; b++)
		assert_int_equal(be_bscan_submit(be, e, b, raw[b]), 0);
	assert_int_equal(be_epoch_finish(be, e, &out, err, sizeof(err)), 0);
}

static void test_functional_keys_are_live(void **unused)
{
	const size_t vox = (size_t)NX * NY * (K / 2), low = vox;
	const char *paths[] = {"functional.angio.method", "functional.doppler.bulk",
	                       "functional.mask_db", "functional.doppler.axis"};
	const char *values[] = {"svar", "false", "60", "ascan"};
	struct vr_config a, b;
	struct be_backend *be, *fresh;
	uint8_t *v0 = malloc(3 * vox), *v1 = malloc(3 * vox), *vf = malloc(3 * vox);
	float *la = malloc(2 * low * sizeof(float)), *ld = malloc(2 * low * sizeof(float));
	float *laf = malloc(low * sizeof(float)), *ldf = malloc(low * sizeof(float));
	char err[CFG_ERR_MAX];

	assert_true(v0 && v1 && vf && la && ld && laf && ldf);
	fill_raw();
	channels_config(&a);
	assert_int_equal(be_open(&a, &be, NULL, 0, err, sizeof(err)), 0);
	run_epoch(be, 0, v0, la, ld);

	/* set as a client would: every key is live */
	assert_int_equal(cfg_copy(&b, &a), 0);
	for (int i = 0; i < 4; i++)
		if (cfg_set_keys(&b, &paths[i], &values[i], 1, err, sizeof(err)))
			fail_msg("%s: %s", paths[i], err);
	assert_int_equal(be_update_live(be, &b, err, sizeof(err)), 0);
	run_epoch(be, 1, v1, la + low, ld + low);

	/* the same as a backend built with the new values, and not as before */
	assert_int_equal(be_open(&b, &fresh, NULL, 0, err, sizeof(err)), 0);
	run_epoch(fresh, 0, vf, laf, ldf);
	assert_memory_equal(v1, vf, 3 * vox);
	assert_memory_equal(la + low, laf, low * sizeof(float));
	assert_memory_equal(ld + low, ldf, low * sizeof(float));
	assert_memory_equal(v0, v1, vox); /* the structure does not change */
	assert_memory_not_equal(v0 + vox, v1 + vox, vox);
	assert_memory_not_equal(v0 + 2 * vox, v1 + 2 * vox, vox);

	be_close(fresh);
	be_close(be);
	cfg_free(&a);
	cfg_free(&b);
	free(v0);
	free(v1);
	free(vf);
	free(la);
	free(ld);
	free(laf);
	free(ldf);
}

static void test_channels_are_structural(void **unused)
{
	struct vr_config c;
	const char *path = "output.channels", *value = "[structure, angio]";
	char err[CFG_ERR_MAX];

	channels_config(&c);
	assert_int_equal(cfg_set_keys(&c, &path, &value, 1, err, sizeof(err)), -EPERM);
	assert_non_null(strstr(err, "output.channels: "));
	cfg_free(&c);
}

static void test_an_output_too_small_for_the_channels_is_refused(void **unused)
{
	struct vr_config c;
	struct be_backend *be;
	uint8_t *v = malloc((size_t)NX * NY * (K / 2));
	struct be_output out = {.volume = v}; /* a caller that knows the structure alone */
	char err[512];

	assert_non_null(v);
	fill_raw();
	channels_config(&c);
	assert_int_equal(be_open(&c, &be, NULL, 0, err, sizeof(err)), 0);
	for (uint32_t b = 0; b < NY * M; b++)
		assert_int_equal(be_bscan_submit(be, 0, b, raw[b]), 0);
	assert_int_equal(be_epoch_finish(be, 0, &out, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "epoch 0: output.channels has 3 channels, but the output "
	                            "holds 1 (this caller writes the structure alone)"));
	be_close(be);
	cfg_free(&c);
	free(v);
}

VR_TEST_GROUP(cpu_channels)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_functional_keys_are_live),
	        cmocka_unit_test(test_channels_are_structural),
	        cmocka_unit_test(test_an_output_too_small_for_the_channels_is_refused),
	};
	return cmocka_run_group_tests_name("cpu_channels", tests, NULL, NULL);
}
