/* SPDX-License-Identifier: MIT */
/*
 * The call-order rules of the backend interface (backend.h), enforced once in the wrappers,
 * on the CPU backend: each wrong order is refused with its code and a message naming what was
 * wrong, and changes nothing: the epoch then completed the right way gives bit for bit what a
 * backend that never saw the mistake gives. Also the table checks of be_create and the path of
 * a B-scan the backend itself failed.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "backend/ops.h"
#include "tests/unit/vrtest.h"

enum { K = 64, NX = 4, NY = 3 };

static uint16_t raw[2][NY][NX * K]; /* two different data sets */

static void small_config(struct vr_config *c)
{
	vrtest_cpu_config(c, K, CFG_SAMPLE_U16, NX, NY, 1);
	c->geometry.stride[0] = 2; /* history matters: epochs interlace */
	c->reconstruct.mode = CFG_RECON_CUMULATIVE;
}

/* The backend under test beside a reference that only ever sees the right order. */
struct rig {
	struct vr_config c;
	struct be_backend *be, *ref;
	size_t vox, low;
	uint8_t *v, *vref;
	float *l, *lref;
	struct be_output out, oref;
	char err[512];
};

static int rig_setup(void **state)
{
	struct rig *r = calloc(1, sizeof(*r));

	assert_non_null(r);
	for (int s = 0; s < 2; s++)
		for (int b = 0; b < NY; b++)
			for (int i = 0; i < NX * K; i++)
				raw[s][b][i] =
				        (uint16_t)(30000 + ((s * 7 + b * 131 + i) * 7919u) % 5000u);
	small_config(&r->c);
	assert_int_equal(be_open(&r->c, &r->be, NULL, 0, r->err, sizeof(r->err)), 0);
	assert_int_equal(be_open(&r->c, &r->ref, NULL, 0, r->err, sizeof(r->err)), 0);
	r->vox = cfg_out_voxels(&r->c);
	r->low = (size_t)NY * NX * cfg_nz(&r->c);
	r->v = calloc(r->vox, 1);
	r->vref = calloc(r->vox, 1);
	r->l = calloc(r->low, sizeof(float));
	r->lref = calloc(r->low, sizeof(float));
	assert_true(r->v && r->vref && r->l && r->lref);
	r->out = (struct be_output){.volume = r->v, .lowres = r->l};
	r->oref = (struct be_output){.volume = r->vref, .lowres = r->lref};
	*state = r;
	return 0;
}

static int rig_teardown(void **state)
{
	struct rig *r = *state;

	be_close(r->be);
	be_close(r->ref);
	free(r->v);
	free(r->vref);
	free(r->l);
	free(r->lref);
	cfg_free(&r->c);
	free(r);
	return 0;
}

static void submit(struct be_backend *be, uint64_t e, int set, uint32_t from, uint32_t to)
{
	for (uint32_t b = from; b < to; b++)
		assert_int_equal(be_bscan_submit(be, e, b, raw[set][b]), 0);
}

/* Epoch e of data set `set` through the reference, then compare with what be produced. */
static void same_as_reference(struct rig *r, uint64_t e, int set)
{
	submit(r->ref, e, set, 0, NY);
	assert_int_equal(be_epoch_finish(r->ref, e, &r->oref, r->err, sizeof(r->err)), 0);
	assert_memory_equal(r->v, r->vref, r->vox);
	assert_memory_equal(r->l, r->lref, r->low * sizeof(float));
}

/* A whole epoch the right way on be, compared with the reference. */
static void good_epoch(struct rig *r, uint64_t e, int set)
{
	submit(r->be, e, set, 0, NY);
	assert_int_equal(be_epoch_finish(r->be, e, &r->out, r->err, sizeof(r->err)), 0);
	same_as_reference(r, e, set);
}

static void test_submit_index_and_data(void **state)
{
	struct rig *r = *state;

	good_epoch(r, 0, 0);
	assert_int_equal(be_bscan_submit(r->be, 1, NY, raw[0][0]), -EINVAL);
	assert_string_equal(be_last_error(r->be),
	                    "cpu backend: B-scan 3 of epoch 1 out of range (3 B-scans per volume)");
	assert_int_equal(be_bscan_submit(r->be, 1, UINT32_MAX, raw[0][0]), -EINVAL);
	assert_int_equal(be_bscan_submit(r->be, 1, 1, NULL), -EINVAL);
	assert_string_equal(be_last_error(r->be), "cpu backend: B-scan 1 of epoch 1: no data");
	good_epoch(r, 1, 1);
}

static void test_submit_twice(void **state)
{
	struct rig *r = *state;

	good_epoch(r, 0, 0);
	submit(r->be, 1, 1, 0, 2);
	/* the second submission of B-scan 1 (other data) is refused: the first one stays */
	assert_int_equal(be_bscan_submit(r->be, 1, 1, raw[0][1]), -EINVAL);
	assert_string_equal(be_last_error(r->be),
	                    "cpu backend: B-scan 1 of epoch 1 submitted twice");
	submit(r->be, 1, 1, 2, NY);
	assert_int_equal(be_epoch_finish(r->be, 1, &r->out, r->err, sizeof(r->err)), 0);
	same_as_reference(r, 1, 1);
}

static void test_one_epoch_submitted_at_a_time(void **state)
{
	struct rig *r = *state;

	submit(r->be, 0, 0, 0, 1);
	assert_int_equal(be_bscan_submit(r->be, 1, 1, raw[1][1]), -EBUSY);
	assert_string_equal(be_last_error(r->be),
	                    "cpu backend: B-scan 1 of epoch 1 submitted while epoch 0 has 1 of 3 "
	                    "B-scans submitted: finish it first");
	submit(r->be, 0, 0, 1, NY);
	assert_int_equal(be_epoch_finish(r->be, 0, &r->out, r->err, sizeof(r->err)), 0);
	same_as_reference(r, 0, 0);
	good_epoch(r, 1, 1);
}

static void test_finish_needs_every_bscan(void **state)
{
	struct rig *r = *state;

	assert_int_equal(be_epoch_finish(r->be, 0, &r->out, r->err, sizeof(r->err)), -EINVAL);
	assert_string_equal(r->err, "cpu backend: epoch 0 finished with 0 of 3 B-scans submitted");
	submit(r->be, 0, 0, 0, 2);
	assert_int_equal(be_epoch_finish(r->be, 0, &r->out, r->err, sizeof(r->err)), -EINVAL);
	assert_string_equal(r->err, "cpu backend: epoch 0 finished with 2 of 3 B-scans submitted");
	assert_int_equal(be_epoch_finish_async(r->be, 0, &r->out, r->err, sizeof(r->err)), -EINVAL);
	assert_int_equal(be_epoch_finish(r->be, 1, &r->out, r->err, sizeof(r->err)), -EINVAL);
	assert_string_equal(r->err, "cpu backend: epoch 1 finished, but the B-scans submitted (2 "
	                            "of 3) are epoch 0's");
	submit(r->be, 0, 0, 2, NY);
	assert_int_equal(be_epoch_finish(r->be, 0, NULL, r->err, sizeof(r->err)), -EINVAL);
	assert_string_equal(r->err, "cpu backend: epoch 0 finished without an output");
	assert_int_equal(be_epoch_finish(r->be, 0, &r->out, r->err, sizeof(r->err)), 0);
	same_as_reference(r, 0, 0);
}

static void test_epochs_increase(void **state)
{
	struct rig *r = *state;

	good_epoch(r, 5, 0);
	assert_int_equal(be_bscan_submit(r->be, 5, 0, raw[1][0]), -EINVAL);
	assert_string_equal(be_last_error(r->be),
	                    "cpu backend: B-scan 0 of epoch 5: epoch 5 was finished already "
	                    "(epochs increase; reset_history starts afresh)");
	assert_int_equal(be_bscan_submit(r->be, 2, 0, raw[1][0]), -EINVAL);
	good_epoch(r, 8, 1); /* gaps are allowed */

	/* reset_history starts afresh: epoch 0 again, as from a new backend */
	be_reset_history(r->be);
	be_reset_history(r->ref);
	good_epoch(r, 0, 1);
	good_epoch(r, 1, 0);
}

static void test_one_epoch_in_flight(void **state)
{
	struct rig *r = *state;
	char e2[512] = "";

	assert_int_equal(be_epoch_wait(r->be, 0, r->err, sizeof(r->err)), -EINVAL);
	assert_string_equal(r->err, "cpu backend: epoch_wait(0) with no epoch in flight");
	submit(r->be, 0, 0, 0, NY);
	assert_int_equal(be_epoch_finish_async(r->be, 0, &r->out, r->err, sizeof(r->err)), 0);
	/* the next epoch's B-scans may be submitted, but it is not finished before the wait */
	submit(r->be, 1, 1, 0, NY);
	struct be_output o2 = {0};
	assert_int_equal(be_epoch_finish_async(r->be, 1, &o2, e2, sizeof(e2)), -EBUSY);
	assert_string_equal(e2, "cpu backend: epoch 1 finished while epoch 0 is in flight "
	                        "(epoch_wait first)");
	assert_int_equal(be_epoch_finish(r->be, 1, &o2, e2, sizeof(e2)), -EBUSY);
	assert_int_equal(be_epoch_wait(r->be, 1, e2, sizeof(e2)), -EINVAL);
	assert_string_equal(e2, "cpu backend: epoch_wait(1), but epoch 0 is in flight");
	assert_int_equal(be_epoch_wait(r->be, 0, r->err, sizeof(r->err)), 0);
	same_as_reference(r, 0, 0);
	/* exactly one wait per finish */
	assert_int_equal(be_epoch_wait(r->be, 0, e2, sizeof(e2)), -EINVAL);
	assert_string_equal(e2, "cpu backend: epoch_wait(0) with no epoch in flight");
	assert_int_equal(be_epoch_finish_async(r->be, 1, &r->out, r->err, sizeof(r->err)), 0);
	assert_int_equal(be_epoch_wait(r->be, 1, r->err, sizeof(r->err)), 0);
	same_as_reference(r, 1, 1);
}

static void test_live_and_reset_between_epochs(void **state)
{
	struct rig *r = *state;
	struct vr_config n;

	good_epoch(r, 0, 0);
	assert_int_equal(cfg_copy(&n, &r->c), 0);
	n.preprocess.db_range[1] += 10; /* a live parameter */

	/* refused while an epoch is half submitted; the epoch goes on unchanged */
	submit(r->be, 1, 1, 0, 1);
	assert_int_equal(be_update_live(r->be, &n, r->err, sizeof(r->err)), -EBUSY);
	assert_string_equal(r->err, "cpu backend: live update while epoch 1 has 1 of 3 B-scans "
	                            "submitted (live parameters apply between epochs)");
	submit(r->be, 1, 1, 1, NY);
	assert_int_equal(be_epoch_finish(r->be, 1, &r->out, r->err, sizeof(r->err)), 0);
	same_as_reference(r, 1, 1);

	/* with an epoch in flight: it lands first, its wait still reports it */
	submit(r->be, 2, 0, 0, NY);
	assert_int_equal(be_epoch_finish_async(r->be, 2, &r->out, r->err, sizeof(r->err)), 0);
	assert_int_equal(be_update_live(r->be, &n, r->err, sizeof(r->err)), 0);
	assert_int_equal(be_epoch_wait(r->be, 2, r->err, sizeof(r->err)), 0);
	same_as_reference(r, 2, 0);
	assert_int_equal(be_update_live(r->ref, &n, r->err, sizeof(r->err)), 0);
	good_epoch(r, 3, 1);

	submit(r->be, 4, 1, 0, NY);
	assert_int_equal(be_epoch_finish_async(r->be, 4, &r->out, r->err, sizeof(r->err)), 0);
	be_reset_history(r->be);
	assert_int_equal(be_epoch_wait(r->be, 4, r->err, sizeof(r->err)), 0);
	same_as_reference(r, 4, 1);
	be_reset_history(r->ref);
	good_epoch(r, 0, 0);
	cfg_free(&n);
}

/* ---- a backend whose bscan_submit fails: the CPU table with a failing submit ---------------- */

static bool flaky_fail; /* the next submit fails */
static bool flaky_failed;

static int flaky_submit(void *st, uint64_t e, uint32_t b, const void *raw_bscan)
{
	if (flaky_fail) {
		flaky_fail = false;
		flaky_failed = true;
		return -EIO;
	}
	return be_cpu_ops.bscan_submit(st, e, b, raw_bscan);
}

static int flaky_finish(void *st, uint64_t e, const struct be_output *out, char *err, size_t errlen)
{
	if (flaky_failed) {
		flaky_failed = false;
		return vr_err(err, errlen, -EIO, "flaky backend: the device lost B-scan 1");
	}
	return be_cpu_ops.epoch_finish(st, e, out, err, errlen);
}

static void test_failed_submit_is_reported_by_the_finish(void **state)
{
	struct rig *r = *state;
	struct be_ops flaky = be_cpu_ops;
	struct be_backend *be = NULL;
	char err[512] = "";

	flaky.name = "flaky";
	flaky.bscan_submit = flaky_submit;
	flaky.epoch_finish = flaky_finish;
	assert_int_equal(be_create(&flaky, &r->c, &be, err, sizeof(err)), 0);
	assert_int_equal(be_bscan_submit(be, 0, 0, raw[0][0]), 0);
	flaky_fail = true;
	assert_int_equal(be_bscan_submit(be, 0, 1, raw[0][1]), -EIO);
	assert_non_null(strstr(be_last_error(be), "flaky backend: B-scan 1 of epoch 0"));
	/* the epoch is failed: its finish is allowed with B-scans missing and reports why */
	assert_int_equal(be_epoch_finish_async(be, 0, &r->out, err, sizeof(err)), -EIO);
	assert_string_equal(err, "flaky backend: the device lost B-scan 1");
	assert_int_equal(be_epoch_wait(be, 0, err, sizeof(err)), -EINVAL); /* nothing in flight */
	/* and it is over: the next epoch runs as on a backend that never failed */
	submit(be, 1, 1, 0, NY);
	assert_int_equal(be_epoch_finish(be, 1, &r->out, err, sizeof(err)), 0);
	be_close(be);
	same_as_reference(r, 1, 1);
}

static void test_tables_are_checked(void **state)
{
	struct rig *r = *state;
	struct be_backend *be = NULL;
	char err[512] = "";
	struct be_ops t = be_cpu_ops;

	t.version = BE_OPS_VERSION + 1;
	assert_int_equal(be_create(&t, &r->c, &be, err, sizeof(err)), -EPROTO);
	assert_non_null(strstr(err, "cpu backend: its table is version"));
	t = be_cpu_ops;
	t.caps = BE_CAP_ASYNC;
	assert_int_equal(be_create(&t, &r->c, &be, err, sizeof(err)), -EPROTO);
	assert_string_equal(err, "cpu backend: BE_CAP_ASYNC without epoch_finish_async/epoch_wait");
	t = be_cpu_ops;
	t.caps = BE_CAP_REGISTER;
	assert_int_equal(be_create(&t, &r->c, &be, err, sizeof(err)), -EPROTO);
	t = be_cpu_ops;
	t.update_live = NULL;
	assert_int_equal(be_create(&t, &r->c, &be, err, sizeof(err)), -EPROTO);
	assert_string_equal(err, "cpu backend: its table lacks a function");
	assert_null(be);

	/* and what the CPU's table says of itself */
	assert_int_equal(be_caps(r->be), BE_CAP_CHANNEL_VIEWS); /* nothing to pin or register */
	assert_string_equal(be_name(r->be), "cpu");
	assert_non_null(strstr(be_device(r->be), "CPU: 1 threads"));
	void *p = NULL;
	assert_int_equal(be_host_alloc(r->be, 1000, &p), 0);
	assert_int_equal(be_host_register(r->be, p, 1000, 0), 0); /* nothing to do on the CPU */
	assert_int_equal(be_host_register(r->be, NULL, 1000, 0), -EINVAL);
	be_host_unregister(r->be, p);
	be_host_free(r->be, p);
}

VR_TEST_GROUP(cpu_epoch)
{
#define T(f) cmocka_unit_test_setup_teardown(f, rig_setup, rig_teardown)
	const struct CMUnitTest tests[] = {
	        T(test_submit_index_and_data),
	        T(test_submit_twice),
	        T(test_one_epoch_submitted_at_a_time),
	        T(test_finish_needs_every_bscan),
	        T(test_epochs_increase),
	        T(test_one_epoch_in_flight),
	        T(test_live_and_reset_between_epochs),
	        T(test_failed_submit_is_reported_by_the_finish),
	        T(test_tables_are_checked),
	};
#undef T
	return cmocka_run_group_tests_name("cpu_epoch", tests, NULL, NULL);
}
