/* SPDX-License-Identifier: MIT */
/*
 * be_epoch_finish_async / be_epoch_wait on a backend without the asynchronous form (the CPU):
 * the synchronous fallback gives epoch_finish's output and enforces one epoch in flight.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "tests/unit/vrtest.h"

static void async_config(struct vr_config *c)
{
	vrtest_cpu_config(c, 64, CFG_SAMPLE_U16, 4, 3, 1);
	c->reconstruct.mode = CFG_RECON_NONCUMULATIVE;
}

static void submit_epoch(struct be_backend *be, uint64_t e, const uint16_t *raw)
{
	for (uint32_t b = 0; b < 3; b++)
		assert_int_equal(be_bscan_submit(be, e, b, raw + (size_t)b * 4 * 64), 0);
}

static void test_async_fallback(void **s)
{
	struct vr_config c;
	struct be_backend *a = NULL, *b = NULL;
	char err[512] = "";
	uint16_t raw[3 * 4 * 64];
	(void)s;

	async_config(&c);
	for (size_t i = 0; i < sizeof(raw) / sizeof(raw[0]); i++)
		raw[i] = (uint16_t)(30000 + (i * 7919u) % 4000u);
	assert_int_equal(be_open(&c, &a, NULL, 0, err, sizeof(err)), 0);
	assert_int_equal(be_open(&c, &b, NULL, 0, err, sizeof(err)), 0);
	assert_int_equal(be_caps(a) & BE_CAP_ASYNC, 0);
	const size_t vox = cfg_out_voxels(&c);
	uint8_t *va = calloc(vox, 1), *vb = calloc(vox, 1);
	assert_non_null(va);
	assert_non_null(vb);
	struct be_output oa = {.volume = va}, ob = {.volume = vb};

	/* nothing in flight yet */
	assert_int_equal(be_epoch_wait(a, 0, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "no epoch in flight"));
	for (uint64_t e = 0; e < 3; e++) {
		submit_epoch(a, e, raw);
		submit_epoch(b, e, raw);
		assert_int_equal(be_epoch_finish_async(a, e, &oa, err, sizeof(err)), 0);
		/* one epoch in flight */
		assert_int_equal(be_epoch_finish_async(a, e, &oa, err, sizeof(err)), -EBUSY);
		assert_int_equal(be_epoch_wait(a, e + 1, err, sizeof(err)), -EINVAL);
		assert_non_null(strstr(err, "in flight"));
		assert_int_equal(be_epoch_wait(a, e, err, sizeof(err)), 0);
		assert_int_equal(be_epoch_finish(b, e, &ob, err, sizeof(err)), 0);
		assert_memory_equal(va, vb, vox);
	}
	free(va);
	free(vb);
	be_close(a);
	be_close(b);
	cfg_free(&c);
}

VR_TEST_GROUP(cpu_async)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_async_fallback),
	};
	return cmocka_run_group_tests_name("cpu_async", tests, NULL, NULL);
}
