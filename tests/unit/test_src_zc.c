/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of zero-copy acquisition (the ref_regions/acquire_ref/release_ref extension of
 * include/volrec/shim.h): the replay source hands out the bytes acquire() copies, looping and
 * end of file, references held across the loop, bad releases; sources without it.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sources/internal.h"
#include "tests/replay/geometry.h"
#include "tests/unit/vrtest.h"

#define EPOCHS 3u

static char dir[256];
static char path[PATH_MAX];

/* The replay file at path in the geometry of tests/replay: small and quick. */
static void zc_cfg(struct vr_config *c, bool loop)
{
	test_replay_geometry(c);
	c->source.type = CFG_SOURCE_REPLAY;
	c->source.replay.loop = loop;
	snprintf(c->source.replay.path, sizeof(c->source.replay.path), "%s", path);
}

#define BSCAN_BYTES (4u * 64u * 2u)

/* A replay file whose B-scan i (over the file) is filled with the 16-bit pattern i*1000+j. */
static int setup_file(void **state)
{
	struct src_replay_info info = {.sample_type = VOLREC_SAMPLE_U16,
	                               .samples_per_ascan = 64,
	                               .ascans_per_bscan = 4,
	                               .bscans_per_volume = 3,
	                               .epochs = EPOCHS,
	                               .stride_x = 2,
	                               .stride_y = 1};
	struct src_replay_writer *w;
	uint16_t b[BSCAN_BYTES / 2];
	char err[CFG_ERR_MAX];

	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/volrec-test-zc-XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	snprintf(path, sizeof(path), "%s/zc.vrr", dir);
	if (src_replay_writer_open(path, false, &info, NULL, "note: zc", &w, err, sizeof(err)))
		return -1;
	for (uint32_t i = 0; i < EPOCHS * 3; i++) {
		for (uint32_t j = 0; j < BSCAN_BYTES / 2; j++)
			b[j] = (uint16_t)(i * 1000u + j);
		if (src_replay_writer_bscan(w, b, sizeof(b), err, sizeof(err))) {
			src_replay_writer_abort(w);
			return -1;
		}
	}
	return src_replay_writer_close(w, err, sizeof(err)) ? -1 : 0;
}

static int teardown_file(void **state)
{
	(void)state;
	unlink(path);
	return rmdir(dir);
}

static void open_src(struct src_source *s, bool loop)
{
	struct vr_config c;
	char err[CFG_ERR_MAX] = "";
	int rc;

	zc_cfg(&c, loop);
	rc = src_open(&c, SRC_UNPACED | (loop ? 0 : SRC_NO_LOOP), s, err, sizeof(err));
	if (rc)
		fail_msg("src_open: %s (%d)", err, rc);
}

/* Tell the epoch's offset (first B-scan) and start once. */
static void tell(struct src_source *s, uint64_t e, bool *started)
{
	assert_int_equal(src_set_scan_offset(s, e, (uint32_t)(e % 2), 0), 0);
	if (!*started) {
		assert_int_equal(src_start(s), 0);
		*started = true;
	}
}

static void replay_refs_deliver_the_bytes_acquire_copies(void **state)
{
	struct src_source cp, zc;
	struct volrec_shim_region reg;
	const void *held[4 * EPOCHS * 3];
	uint8_t buf[BSCAN_BYTES];
	uint32_t n = 99;
	bool s1 = false, s2 = false;

	(void)state;
	open_src(&cp, true);
	open_src(&zc, true);
	assert_true(src_has_refs(&zc));
	assert_int_equal(src_ref_regions(&zc, NULL, 0, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(src_ref_regions(&zc, &reg, 1, &n), 0);
	assert_non_null(reg.base);
	assert_true(reg.size >= (size_t)EPOCHS * 3 * BSCAN_BYTES);
	assert_int_equal((uintptr_t)reg.base % (uintptr_t)sysconf(_SC_PAGESIZE), 0);

	/* four passes over the file, every reference held until the end (the loop hands out
	 * the same pointers again while the earlier references are held) */
	for (uint32_t i = 0; i < 4 * EPOCHS * 3; i++) {
		struct volrec_shim_meta m1, m2;
		uint64_t e = i / 3;

		if (i % 3 == 0) {
			tell(&cp, e, &s1);
			tell(&zc, e, &s2);
		}
		assert_int_equal(src_acquire(&cp, buf, sizeof(buf), 100, &m1), 0);
		assert_int_equal(src_acquire_ref(&zc, &held[i], 100, &m2), 0);
		assert_true((const uint8_t *)held[i] >= (const uint8_t *)reg.base);
		assert_true((const uint8_t *)held[i] + BSCAN_BYTES <=
		            (const uint8_t *)reg.base + reg.size);
		assert_memory_equal(held[i], buf, sizeof(buf));
		assert_int_equal(((const uint16_t *)held[i])[1], (uint16_t)((i % 9) * 1000u + 1));
		assert_int_equal(m2.epoch, e);
		assert_int_equal(m2.bscan, i % 3);
		assert_int_equal(m1.epoch, m2.epoch);
		if (i >= EPOCHS * 3)
			assert_ptr_equal(held[i], held[i - EPOCHS * 3]);
	}
	/* still intact after all that, then released in reverse order */
	for (uint32_t i = 4 * EPOCHS * 3; i-- > 0;) {
		assert_int_equal(((const uint16_t *)held[i])[7], (uint16_t)((i % 9) * 1000u + 7));
		assert_int_equal(src_release_ref(&zc, held[i]), 0);
	}
	src_close(&cp);
	src_close(&zc);
}

static void replay_refs_end_of_file_and_bad_releases(void **state)
{
	struct src_source zc;
	const void *held[EPOCHS * 3], *p = NULL;
	bool started = false;
	uint32_t n = 0;
	int rc;

	(void)state;
	open_src(&zc, false);
	assert_true(src_has_refs(&zc));
	/* ref_regions argument checks */
	rc = src_ref_regions(&zc, NULL, 0, NULL);
	assert_int_equal(rc, -EINVAL);
	assert_non_null(strstr(src_strerror(&zc, rc), "ref_regions() without a count"));
	rc = src_ref_regions(&zc, NULL, 2, &n);
	assert_int_equal(rc, -EINVAL);
	/* before start: refused like acquire() */
	rc = src_acquire_ref(&zc, &p, 0, NULL);
	assert_int_equal(rc, -EINVAL);
	assert_non_null(strstr(src_strerror(&zc, rc), "acquire_ref() before start()"));
	assert_int_equal(src_ref_regions(&zc, NULL, 0, &n), 0);
	assert_int_equal(n, 1);
	for (uint32_t i = 0; i < EPOCHS * 3; i++) {
		if (i % 3 == 0)
			tell(&zc, i / 3, &started);
		assert_int_equal(src_acquire_ref(&zc, &held[i], 0, NULL), 0);
	}
	/* the end of the file (loop: false) */
	tell(&zc, EPOCHS, &started);
	rc = src_acquire_ref(&zc, &p, 0, NULL);
	assert_int_equal(rc, -ENODATA);
	assert_non_null(strstr(src_strerror(&zc, rc), "end of file after 3 epochs"));
	rc = src_acquire_ref(&zc, NULL, 0, NULL);
	assert_int_equal(rc, -EINVAL);
	/* references stay valid after the end and after stop() */
	assert_int_equal(src_stop(&zc), 0);
	assert_int_equal(((const uint16_t *)held[8])[0], 8000);
	/* a pointer it never handed out: inside the file but not at a B-scan, and outside */
	rc = src_release_ref(&zc, (const uint8_t *)held[1] + 2);
	assert_int_equal(rc, -EINVAL);
	assert_non_null(strstr(src_strerror(&zc, rc), "not a B-scan this source handed out"));
	rc = src_release_ref(&zc, &rc);
	assert_int_equal(rc, -EINVAL);
	for (uint32_t i = 0; i < EPOCHS * 3; i++)
		assert_int_equal(src_release_ref(&zc, held[i]), 0);
	/* one release too many */
	rc = src_release_ref(&zc, held[0]);
	assert_int_equal(rc, -EINVAL);
	assert_non_null(strstr(src_strerror(&zc, rc), "no reference held"));
	src_close(&zc);
}

static void sources_without_the_extension(void **state)
{
	struct vr_config c;
	struct src_source s;
	char err[CFG_ERR_MAX] = "";

	(void)state;
	/* the synthetic scanner copies */
	zc_cfg(&c, true);
	c.source.type = CFG_SOURCE_SYNTH;
	assert_int_equal(src_open(&c, SRC_UNPACED, &s, err, sizeof(err)), 0);
	assert_false(src_has_refs(&s));
	src_close(&s);
	/* a shim built without the zero-copy calls (NULL there) loads and copies */
	zc_cfg(&c, true);
	c.source.type = CFG_SOURCE_SHIM;
	snprintf(c.source.shim.library, sizeof(c.source.shim.library),
	         "%s/lib/libvolrec_fault_shim.so", vrtest_build_dir());
	c.source.shim.args_yaml = "{}";
	if (src_open(&c, SRC_UNPACED, &s, err, sizeof(err)))
		fail_msg("src_open: %s", err);
	assert_false(src_has_refs(&s));
	assert_null(s.impl.acquire_ref);
	src_close(&s);
	assert_false(src_has_refs(NULL));
	/* the table sizes the header promises */
	assert_int_equal(VOLREC_SHIM_OPS_SIZE_BASE, 2 * sizeof(uint32_t) + 8 * sizeof(void *));
	assert_int_equal(VOLREC_SHIM_OPS_SIZE_REFS, sizeof(struct volrec_shim_ops));
}

VR_TEST_GROUP(src_zc)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(replay_refs_deliver_the_bytes_acquire_copies),
	        cmocka_unit_test(replay_refs_end_of_file_and_bad_releases),
	        cmocka_unit_test(sources_without_the_extension),
	};
	return cmocka_run_group_tests_name("src_zc", tests, setup_file, teardown_file);
}
