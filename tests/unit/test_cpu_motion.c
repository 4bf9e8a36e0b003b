/* SPDX-License-Identifier: MIT */
/*
 * reconstruct.mode compensated (docs/algorithms.md §2c): the kriging pick of one column
 * (be_motion_column), the depth shift, the estimator's history bookkeeping, and the CPU
 * backend's live switch into the mode and history reset (each as from a new backend).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/motion.h"
#include "backend/ops.h"
#include "tests/unit/vrtest.h"

/* Entries of every phase of a 5 x 5 stride, H per phase, all at pose p (relative pose 0). */
static uint32_t still_entries(struct be_motion_entry *en, double rot, double shift)
{
	uint32_t n = 0;

	for (int h = 0; h < BE_MOTION_H; h++)
		for (uint32_t q = 0; q < 25; q++) {
			struct be_motion_entry *e = &en[n];
			memset(e, 0, sizeof(*e));
			e->ox = q % 5;
			e->oy = q / 5;
			e->slot = n;
			e->c = cos(rot);
			e->s = sin(rot);
			e->hx = shift;
			be_motion_shift_of(0.0, e);
			n++;
		}
	return n;
}

static void test_still_column_takes_its_own_node_and_weights_sum_to_one(void **state)
{
	const struct be_motion_geom g = {
	        .nx = 12, .ny = 12, .sx = 5, .sy = 5, .X = 60, .Y = 60, .Z = 16};
	struct be_motion_entry en[2 * BE_MOTION_H * 25];
	struct be_motion_pick pk;
	uint32_t ne = still_entries(en, 0.0, 0.0);

	(void)state;
	for (uint32_t yc = 0; yc < g.Y; yc += 7)
		for (uint32_t xc = 0; xc < g.X; xc += 3) {
			be_motion_column(&g, en, ne, yc, xc, &pk);
			/* the still scene: the nodes within 2 pitches (distance 0, 1, sqrt 2), of
			 * both epochs of each phase; inside the grid 9 x 2 = 18 */
			assert_true(pk.n >= 2 && pk.n <= BE_MOTION_M);
			double sum = 0.0;
			for (uint32_t i = 0; i < pk.n; i++)
				sum += pk.w[i];
			assert_true(fabs(sum - 1.0) < 1e-5);
			/* the nearest pick is the column's own position (distance 0) */
			const struct be_motion_entry *e = &en[pk.entry[0]];
			assert_int_equal(e->ox, xc % 5);
			assert_int_equal(e->oy, yc % 5);
			assert_int_equal(pk.node[0], (yc / 5) * g.nx + xc / 5);
			if (yc >= 5 && yc + 5 < g.Y && xc >= 5 && xc + 5 < g.X)
				assert_int_equal(pk.n, 18);
		}
	/* the two epochs of the column's own phase carry the largest weights */
	be_motion_column(&g, en, ne, 30, 30, &pk);
	for (uint32_t i = 0; i < pk.n; i++) {
		const struct be_motion_entry *e = &en[pk.entry[i]];
		if (e->ox == 0 && e->oy == 0)
			assert_true(pk.w[i] > 0.3f);
		else
			assert_true(pk.w[i] < 0.1f);
	}
}

static void test_a_shifted_history_is_picked_where_its_tissue_lies_now(void **state)
{
	const struct be_motion_geom g = {
	        .nx = 12, .ny = 12, .sx = 5, .sy = 5, .X = 60, .Y = 60, .Z = 16};
	struct be_motion_entry en[2 * BE_MOTION_H * 25];
	struct be_motion_pick a, b;

	(void)state;
	/* history one pixel to the left of now (hx = 1: its point u is at u - 1 now): column X
	 * now is what column X + 1 was then */
	uint32_t ne = still_entries(en, 0.0, 1.0);
	be_motion_column(&g, en, ne, 30, 30, &a);
	assert_true(a.n > 0);
	const struct be_motion_entry *e = &en[a.entry[0]];
	assert_int_equal(e->ox, 1);
	assert_int_equal(e->oy, 0);
	/* a rotation by 90 degrees about the centre carries the centre column onto itself */
	ne = still_entries(en, M_PI / 2, 0.0);
	be_motion_column(&g, en, ne, 29, 29, &b);
	assert_true(b.n > 0);
	double sum = 0.0;
	for (uint32_t i = 0; i < b.n; i++)
		sum += b.w[i];
	assert_true(fabs(sum - 1.0) < 1e-5);
}

static void test_depth_shift(void **state)
{
	const float l[6] = {1, 2, 3, 4, 5, 6};
	struct be_motion_entry e;

	(void)state;
	be_motion_shift_of(2.0, &e); /* tissue 2 bins deeper: out[z] = l[z - 2] */
	assert_int_equal(e.k, 2);
	assert_true(e.fa == 0.0f);
	assert_true(be_motion_shifted(&e, l, 0, 6) == 0.0f);
	assert_true(be_motion_shifted(&e, l, 2, 6) == 1.0f);
	assert_true(be_motion_shifted(&e, l, 5, 6) == 4.0f);
	be_motion_shift_of(-0.25, &e); /* out[z] = l[z + 0.25] */
	assert_int_equal(e.k, -1);
	assert_true(fabsf(be_motion_shifted(&e, l, 1, 6) - 2.25f) < 1e-6f);
	assert_true(be_motion_shifted(&e, l, 5, 6) == 0.0f); /* needs l[6] */
	be_motion_shift_of(3.0 - 1e-12, &e);                 /* within 1e-9 of an integer */
	assert_int_equal(e.k, 3);
	assert_true(e.fa == 0.0f);
}

static void test_history_slots_and_reset(void **state)
{
	const struct be_motion_geom g = {
	        .nx = 4, .ny = 3, .sx = 2, .sy = 1, .X = 8, .Y = 3, .Z = 16};
	struct be_motion *m = be_motion_create(&g);
	struct be_motion_entry en[5];
	double prof[16];
	uint32_t slot, ne, nref, seen = 0, prev = 0;
	float ob[8 * 3 * BE_MOTION_NB] = {0};

	(void)state;
	assert_non_null(m);
	/* one more than the history: an epoch's slot is never one the epoch before read */
	assert_int_equal(be_motion_slots(m), BE_MOTION_H * 2 + 1);
	for (int z = 0; z < 16; z++)
		prof[z] = z == 8 ? 1.0 : 0.0;
	be_motion_set_estimate(m, false);
	for (uint32_t e = 0; e < 9; e++) {
		assert_int_equal(
		        be_motion_epoch(m, e % 2, 0, prof, NULL, NULL, &slot, en, &ne, &nref), 0);
		be_motion_set_reference(m, ob);
		assert_true(slot < 5);
		assert_false(prev & (1u << slot));
		assert_int_equal(ne, e + 1 < 4 ? e + 1 : 4);
		assert_int_equal(en[ne - 1].slot, slot); /* the newest last */
		assert_int_equal(en[ne - 1].ox, e % 2);
		assert_int_equal(nref, 0); /* fewer than EXCL + 5 entries */
		seen |= 1u << slot;
		prev = 0;
		/* every slot in use is a different one */
		for (uint32_t i = 0; i < ne; i++) {
			prev |= 1u << en[i].slot;
			for (uint32_t j = i + 1; j < ne; j++)
				assert_int_not_equal(en[i].slot, en[j].slot);
		}
	}
	assert_int_equal(seen, 0x1f);
	struct be_motion_pose p = be_motion_last_pose(m);
	assert_true(p.th == 0.0 && p.tx == 0.0 && p.ty == 0.0 && p.tz == 0.0);
	be_motion_reset(m);
	assert_int_equal(be_motion_epoch(m, 1, 0, prof, NULL, NULL, &slot, en, &ne, &nref), 0);
	assert_int_equal(ne, 1);
	be_motion_destroy(m);
}

/* The reference from entry bands (be_motion_entry_bands, be_motion_ref_column) is the band
 * mean of the per-depth combination where that is not clamped, blended with the newest
 * epoch's bands by a, or those bands alone where the column has no pick. */
static void test_reference_from_entry_bands(void **state)
{
	enum { NXR = 3, NYR = 2, ZR = 24 };
	const struct be_motion_geom g = {
	        .nx = NXR, .ny = NYR, .sx = 2, .sy = 2, .X = 6, .Y = 4, .Z = ZR};
	const size_t nodes = NXR * NYR, nb = nodes * BE_MOTION_NB;
	static float L[2][NYR * NXR * ZR], eb[2 * NYR * NXR * BE_MOTION_NB];
	struct be_motion_entry en[2];
	struct be_motion_pick pk = {0};
	const double cb[BE_MOTION_NB] = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8};
	float ob[BE_MOTION_NB];

	(void)state;
	srand(7);
	for (int h = 0; h < 2; h++)
		for (size_t i = 0; i < nodes * ZR; i++)
			L[h][i] = (float)rand() / (float)RAND_MAX;
	be_motion_shift_of(1.25, &en[0]);
	be_motion_shift_of(-2.0, &en[1]);
	for (int h = 0; h < 2; h++)
		be_motion_entry_bands(&g, L[h], &en[h], eb + h * nb);
	pk.n = 2;
	pk.a = 1.0f;
	pk.entry[0] = 1;
	pk.node[0] = 4;
	pk.w[0] = 0.7f;
	pk.entry[1] = 0;
	pk.node[1] = 2;
	pk.w[1] = 0.3f;
	be_motion_ref_column(&pk, eb, nodes, cb, ob);
	for (uint32_t b = 0; b < BE_MOTION_NB; b++) {
		const uint32_t z0 = b * ZR / BE_MOTION_NB, z1 = (b + 1) * ZR / BE_MOTION_NB;
		double want = 0.0;
		for (uint32_t z = z0; z < z1; z++)
			want += 0.7 * be_motion_shifted(&en[1], L[1] + 4 * ZR, z, ZR) +
			        0.3 * be_motion_shifted(&en[0], L[0] + 2 * ZR, z, ZR);
		want /= (double)(z1 - z0);
		assert_true(fabs(ob[b] - want) < 1e-6);
	}
	/* blended with the newest epoch's bands by a */
	float ob1[BE_MOTION_NB];
	pk.a = 0.25f;
	be_motion_ref_column(&pk, eb, nodes, cb, ob1);
	for (uint32_t b = 0; b < BE_MOTION_NB; b++)
		assert_true(fabs(ob1[b] - (0.25 * ob[b] + 0.75 * cb[b])) < 1e-6);
	/* no pick: the newest epoch's bands alone */
	pk.n = 0;
	be_motion_ref_column(&pk, eb, nodes, cb, ob1);
	for (uint32_t b = 0; b < BE_MOTION_NB; b++)
		assert_true(ob1[b] == (float)cb[b]);
}

/* ---- the CPU backend: a live switch into the mode, and reset_history ------------------------ */

enum { K = 64, NX = 6, NY = 6 };
static uint16_t raw[12][NY][NX * K];

static void run_epoch(struct be_backend *be, uint64_t e, int set, uint8_t *v, float *full)
{
	char err[512];
	struct be_output o = {.volume = v, .full = full};

	for (uint32_t b = 0; b < NY; b++)
		assert_int_equal(be_bscan_submit(be, e, b, raw[set][b]), 0);
	assert_int_equal(be_epoch_finish(be, e, &o, err, sizeof(err)), 0);
}

static void test_live_switch_and_reset_start_as_a_new_backend(void **state)
{
	struct vr_config c, n;
	struct be_backend *be, *ref;
	char err[512];

	(void)state;
	for (int s = 0; s < 12; s++)
		for (int b = 0; b < NY; b++)
			for (int i = 0; i < NX * K; i++)
				raw[s][b][i] = (uint16_t)(30000 + ((s * 7 + b * 131 + i) * 7919u +
				                                   (uint32_t)(i % K) * 40u) %
				                                          5000u);
	vrtest_cpu_config(&c, K, CFG_SAMPLE_U16, NX, NY, 2);
	c.geometry.stride[0] = c.geometry.stride[1] = 2;
	c.reconstruct.mode = CFG_RECON_NONCUMULATIVE;
	assert_int_equal(cfg_copy(&n, &c), 0);
	n.reconstruct.mode = CFG_RECON_COMPENSATED;
	assert_int_equal(be_open(&c, &be, NULL, 0, err, sizeof(err)), 0);
	assert_int_equal(be_open(&n, &ref, NULL, 0, err, sizeof(err)), 0);
	const size_t vox = cfg_out_voxels(&c);
	uint8_t *v = malloc(vox), *vr = malloc(vox);
	float *f = malloc(vox * sizeof(float)), *fr = malloc(vox * sizeof(float));
	assert_true(v && vr && f && fr);

	for (uint64_t e = 0; e < 3; e++)
		run_epoch(be, e, (int)e, v, f);
	/* the switch resets the history: from here on as a new compensated backend */
	assert_int_equal(be_update_live(be, &n, err, sizeof(err)), 0);
	for (uint64_t e = 3; e < 12; e++) {
		run_epoch(be, e, (int)e, v, f);
		run_epoch(ref, e, (int)e, vr, fr);
		assert_memory_equal(v, vr, vox);
		assert_memory_equal(f, fr, vox * sizeof(float));
	}
	/* reset_history forgets the poses and the history on both */
	be_reset_history(be);
	be_reset_history(ref);
	for (uint64_t e = 0; e < 6; e++) {
		run_epoch(be, e, (int)(11 - e), v, f);
		run_epoch(ref, e, (int)(11 - e), vr, fr);
		assert_memory_equal(f, fr, vox * sizeof(float));
	}
	/* and a reset backend equals one that never saw the epochs before */
	struct be_backend *fresh;
	assert_int_equal(be_open(&n, &fresh, NULL, 0, err, sizeof(err)), 0);
	be_reset_history(be);
	for (uint64_t e = 0; e < 8; e++) {
		run_epoch(be, e, (int)e, v, f);
		run_epoch(fresh, e, (int)e, vr, fr);
		assert_memory_equal(f, fr, vox * sizeof(float));
	}
	be_close(fresh);
	be_close(be);
	be_close(ref);
	free(v);
	free(vr);
	free(f);
	free(fr);
	cfg_free(&c);
	cfg_free(&n);
}

VR_TEST_GROUP(cpu_motion)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_still_column_takes_its_own_node_and_weights_sum_to_one),
	        cmocka_unit_test(test_a_shifted_history_is_picked_where_its_tissue_lies_now),
	        cmocka_unit_test(test_depth_shift),
	        cmocka_unit_test(test_history_slots_and_reset),
	        cmocka_unit_test(test_reference_from_entry_bands),
	        cmocka_unit_test(test_live_switch_and_reset_start_as_a_new_backend),
	};
	return cmocka_run_group_tests_name("cpu_motion", tests, NULL, NULL);
}
