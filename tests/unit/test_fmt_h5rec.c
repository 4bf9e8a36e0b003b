/* SPDX-License-Identifier: MIT */
/*
 * The processed recording's file (formats/h5rec.c, docs/recording.md "Processed recordings"):
 * each channel's volumes and per-volume columns as appended, /missed and /generations rows,
 * the summary attributes at close, and the refusals (an existing file, a bad layout).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hdf5.h>

#include "formats/h5rec.h"
#include "formats/h5vol.h"
#include "tests/unit/vrtest.h"

enum { Y = 3, X = 4, Z = 5, N = Y * X * Z };

static void tmp_path(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "/tmp/vr_h5rec_%d_%s.h5", (int)getpid(), name);
	unlink(buf);
}

static int gen_calls;

static char *gen_values(void *ctx, uint32_t n)
{
	char *s = malloc(64);

	(void)ctx;
	gen_calls++;
	snprintf(s, 64, "{\"generation\":%u}", n);
	return s;
}

static uint64_t attr_u64(hid_t f, const char *name)
{
	uint64_t v = 0;
	hid_t a = H5Aopen(f, name, H5P_DEFAULT);

	assert_true(a >= 0);
	assert_true(H5Aread(a, H5T_NATIVE_UINT64, &v) >= 0);
	H5Aclose(a);
	return v;
}

static void attr_str(hid_t f, const char *name, char *buf, size_t len)
{
	hid_t a = H5Aopen(f, name, H5P_DEFAULT), t = H5Aget_type(a), mt = H5Tcopy(H5T_C_S1);
	char *s = NULL;

	assert_true(a >= 0);
	H5Tset_size(mt, H5T_VARIABLE);
	H5Tset_cset(mt, H5T_CSET_UTF8);
	if (H5Tis_variable_str(t) > 0) {
		assert_true(H5Aread(a, mt, &s) >= 0);
		snprintf(buf, len, "%s", s);
		H5free_memory(s);
	} else {
		size_t n = H5Tget_size(t);
		char *b = calloc(1, n + 1);

		assert_true(H5Aread(a, t, b) >= 0);
		snprintf(buf, len, "%s", b);
		free(b);
	}
	H5Tclose(mt);
	H5Tclose(t);
	H5Aclose(a);
}

/* The rows of a 1-D u64 or u32 dataset, read as u64. */
static void read_u64(hid_t f, const char *name, uint64_t *out, hsize_t want)
{
	hid_t d = H5Dopen2(f, name, H5P_DEFAULT), s = H5Dget_space(d);
	hsize_t n = 0;

	assert_true(d >= 0);
	H5Sget_simple_extent_dims(s, &n, NULL);
	assert_int_equal(n, want);
	assert_true(H5Dread(d, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) >= 0);
	H5Sclose(s);
	H5Dclose(d);
}

static void fill(uint8_t *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(i * 7 + seed * 31);
}

static void test_channels_and_columns_are_written_as_appended(void **state)
{
	const struct h5rec_layout l = {
	        Y, X, Z, 2, {VOLREC_CHANNEL_STRUCTURE, VOLREC_CHANNEL_ANGIO}};
	struct volrec_channel ch[2] = {
	        {.kind = VOLREC_CHANNEL_STRUCTURE, .value_lo = 0, .value_hi = 100},
	        {.kind = VOLREC_CHANNEL_ANGIO, .value_lo = 0, .value_hi = 1}};
	const double um[3] = {10, 20, 3};
	uint8_t data[2][2 * N], got[2][N];
	char path[128], err[512], s[256];
	struct h5rec *r;
	uint64_t volumes = 0, seq[2], gen[2], gidx[2];
	double range[2][2][2];
	hid_t f, d;

	(void)state;
	tmp_path(path, sizeof(path), "ch");
	gen_calls = 0;
	assert_int_equal(h5rec_create(path, false, 0, &l,
	                              &(struct h5rec_origin){.instance = "unit",
	                                                     .config_yaml = "a: 1\n",
	                                                     .gen_values = gen_values},
	                              &r, err, sizeof(err)),
	                 0);
	assert_int_equal(h5rec_describe(r, err, sizeof(err)), 0);
	for (unsigned i = 0; i < 2; i++) {
		struct volrec_view v = {
		        .ny = Y, .nx = X, .nz = Z, .session_id = 9, .sequence = 4 + i};

		fill(data[i], sizeof(data[i]), i + 1);
		ch[1].value_hi = 1 + i; /* the live range of each volume goes into /channel_range */
		assert_int_equal(h5rec_append(r, &v, data[i], ch, um, 7, err, sizeof(err)), 0);
	}
	assert_int_equal(gen_calls, 1); /* one row for the generation of both volumes */
	assert_int_equal(h5rec_miss(r, 9, 6, 8, H5REC_GAP, err, sizeof(err)), 0);
	assert_int_equal(h5rec_count(r), 2);
	assert_int_equal(h5rec_missed(r), 3);
	assert_int_equal(h5rec_close(r, "stopped", false, 1, &volumes, err, sizeof(err)), 0);
	assert_int_equal(volumes, 2);

	f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
	assert_true(f >= 0);
	for (unsigned k = 0; k < 2; k++) {
		d = H5Dopen2(f, k ? "angio" : "volumes", H5P_DEFAULT);
		assert_true(d >= 0);
		assert_true(H5Dread(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, got) >= 0);
		H5Dclose(d);
		for (unsigned i = 0; i < 2; i++)
			assert_memory_equal(got[i], data[i] + (size_t)k * N, N);
	}
	d = H5Dopen2(f, "channel_range", H5P_DEFAULT);
	assert_true(H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, range) >= 0);
	H5Dclose(d);
	assert_true(range[0][1][1] == 1 && range[1][1][1] == 2 && range[1][0][1] == 100);
	read_u64(f, "sequence", seq, 2);
	assert_true(seq[0] == 4 && seq[1] == 5);
	read_u64(f, "generation", gen, 2);
	read_u64(f, "generation_index", gidx, 2);
	assert_true(gen[0] == 7 && gen[1] == 7 && gidx[0] == 0 && gidx[1] == 0);
	assert_int_equal(attr_u64(f, "volumes"), 2);
	assert_int_equal(attr_u64(f, "missed_volumes"), 3);
	assert_int_equal(attr_u64(f, "complete"), 0);
	attr_str(f, "end", s, sizeof(s));
	assert_string_equal(s, "stopped");
	attr_str(f, "channels", s, sizeof(s));
	assert_string_equal(s, "structure,angio");
	attr_str(f, "instance", s, sizeof(s));
	assert_string_equal(s, "unit");
	assert_true(H5Lexists(f, "doppler", H5P_DEFAULT) == 0);
	H5Fclose(f);
	unlink(path);
}

static void test_an_existing_file_and_a_bad_layout_are_refused(void **state)
{
	struct h5rec_layout l = {Y, X, Z, 1, {VOLREC_CHANNEL_STRUCTURE}};
	char path[128], err[512];
	struct h5rec *r = NULL;
	FILE *fp;

	(void)state;
	tmp_path(path, sizeof(path), "exists");
	fp = fopen(path, "w");
	assert_non_null(fp);
	fputs("keep", fp);
	fclose(fp);
	assert_int_equal(
	        h5rec_create(path, false, 0, &l, &(struct h5rec_origin){0}, &r, err, sizeof(err)),
	        -EEXIST);
	assert_null(r);
	fp = fopen(path, "r");
	assert_non_null(fp); /* never replaced without asking */
	fclose(fp);
	unlink(path);
	l.kind[0] = 99;
	assert_int_equal(
	        h5rec_create(path, false, 0, &l, &(struct h5rec_origin){0}, &r, err, sizeof(err)),
	        -EINVAL);
	assert_non_null(strstr(err, "unknown kind 99"));
	assert_int_equal(access(path, F_OK), -1);
}

VR_TEST_GROUP(fmt_h5rec)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_channels_and_columns_are_written_as_appended),
	        cmocka_unit_test(test_an_existing_file_and_a_bad_layout_are_refused),
	};

	h5vol_init();
	return cmocka_run_group_tests_name("fmt_h5rec", tests, NULL, NULL);
}
