/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of raw recordings (sources/recording.h): CRC-32C against RFC 3720's vectors, index
 * entries that round-trip and refuse damage, and a recording written, cut short and read back
 * by its index.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sources/recording.h"
#include "tests/unit/vrtest.h"

static void test_crc32c_matches_rfc3720_vectors(void **state)
{
	uint8_t b[32];

	(void)state;
	memset(b, 0, sizeof(b));
	assert_int_equal(src_crc32c(0, b, 32), 0x8a9136aa);
	memset(b, 0xff, sizeof(b));
	assert_int_equal(src_crc32c(0, b, 32), 0x62a8ab43);
	for (int i = 0; i < 32; i++)
		b[i] = (uint8_t)i;
	assert_int_equal(src_crc32c(0, b, 32), 0x46dd794e);
	for (int i = 0; i < 32; i++)
		b[i] = (uint8_t)(31 - i);
	assert_int_equal(src_crc32c(0, b, 32), 0x113fdb5c);
	assert_int_equal(src_crc32c(0, "123456789", 9), 0xe3069283);
	assert_int_equal(src_crc32c_tables(0, "123456789", 9), 0xe3069283);
}

static void test_crc32c_continues_and_both_paths_agree(void **state)
{
	uint8_t *b = malloc(100003);

	(void)state;
	assert_non_null(b);
	for (size_t i = 0; i < 100003; i++)
		b[i] = (uint8_t)(i * 2654435761u >> 13);
	for (size_t n = 0; n < 40; n++)
		assert_int_equal(src_crc32c(0, b + 1, n), src_crc32c_tables(0, b + 1, n));
	uint32_t whole = src_crc32c(0, b, 100003);
	assert_int_equal(whole, src_crc32c_tables(0, b, 100003));
	assert_int_equal(src_crc32c(src_crc32c(0, b, 777), b + 777, 100003 - 777), whole);
	/* around and beyond the length from which three streams are joined */
	static const size_t lens[] = {12287, 12288, 12289, 12295, 24575, 24583, 65541, 99999};
	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++)
		for (size_t off = 0; off < 3; off++)
			assert_int_equal(src_crc32c(0x12345678u, b + off, lens[i]),
			                 src_crc32c_tables(0x12345678u, b + off, lens[i]));
	free(b);
}

static void test_index_entry_round_trips_and_refuses_damage(void **state)
{
	struct src_rec_frame f = {.epoch = 1234567890123ull,
	                          .ox = 2,
	                          .oy = 3,
	                          .t_first_ns = 11,
	                          .t_last_ns = 22,
	                          .marks = SRC_REC_MARK_GAP,
	                          .crc = 0xdeadbeef,
	                          .skipped_before = 7,
	                          .index = 9},
	                     g;
	uint8_t e[SRC_REC_ENTRY_SIZE];

	(void)state;
	src_rec_frame_encode(e, &f);
	assert_int_equal(src_rec_frame_decode(e, &g), 0);
	assert_memory_equal(&f, &g, sizeof(f));
	e[20] ^= 1; /* oy */
	assert_int_equal(src_rec_frame_decode(e, &g), -EBADMSG);
	memset(e, 0, sizeof(e)); /* never written */
	assert_int_equal(src_rec_frame_decode(e, &g), -EBADMSG);
}

/* A 4-epoch recording of K 16, nx 4, ny 3 u16, stride 2 x 1, epochs 10..13 with 12 left out. */
static void write_recording(const char *path, uint64_t *frame_bytes, uint32_t *header)
{
	struct src_replay_info info = {.sample_type = VOLREC_SAMPLE_U16,
	                               .samples_per_ascan = 16,
	                               .ascans_per_bscan = 4,
	                               .bscans_per_volume = 3,
	                               .stride_x = 2,
	                               .stride_y = 1};
	struct src_rec_section sec = {.name = "config", .text = "backend: cpu\n", .len = 13};
	struct src_rec_writer *w;
	char err[256];
	uint64_t epoch_bytes = 16 * 4 * 3 * 2, fb = src_rec_frame_size(epoch_bytes);
	uint8_t *buf;
	uint64_t epochs[] = {10, 11, 13};

	unlink(path);
	assert_int_equal(posix_memalign((void **)&buf, 4096, fb), 0);
	assert_int_equal(
	        src_rec_writer_open(path, &info, "recording: raw\n", &sec, 1, &w, err, sizeof(err)),
	        0);
	for (int i = 0; i < 3; i++) {
		struct src_rec_frame f = {.epoch = epochs[i], .ox = (uint32_t)(epochs[i] % 2)};
		memset(buf + SRC_REC_FRAME_HDR, 0x30 + i, epoch_bytes);
		f.skipped_before = epochs[i] == 13;
		assert_int_equal(src_rec_writer_frame(w, &f, buf, err, sizeof(err)), 0);
	}
	assert_int_equal(src_rec_writer_close(w, err, sizeof(err)), 0);
	free(buf);
	*frame_bytes = fb;
	*header = 4096;
}

static void test_recording_index_reads_back_and_survives_a_cut(void **state)
{
	char path[] = "/tmp/volrec-test-rec-XXXXXX";
	struct src_replay_info info;
	struct src_rec_frame *f;
	struct src_rec_section *s;
	uint64_t n, fb;
	uint32_t hs;
	size_t ns;
	char err[512];
	int fd = mkstemp(path);

	(void)state;
	assert_true(fd >= 0);
	close(fd);
	write_recording(path, &fb, &hs);
	assert_int_equal(src_rec_index_read(path, &info, &f, &n, err, sizeof(err)), 0);
	assert_int_equal(n, 3);
	assert_int_equal(info.epochs, 3);
	assert_int_equal(f[0].epoch, 10);
	assert_int_equal(f[2].epoch, 13);
	assert_int_equal(f[2].skipped_before, 1);
	assert_int_equal(f[2].index, 2);
	free(f);
	assert_int_equal(src_rec_sections_read(path, &s, &ns, err, sizeof(err)), 0);
	assert_int_equal(ns, 1);
	assert_string_equal(s[0].name, "config");
	assert_string_equal(s[0].text, "backend: cpu\n");
	src_rec_sections_free(s, ns);

	/* cut in the middle of the third epoch: two are left */
	assert_int_equal(truncate(path, (off_t)(hs + 2 * fb + fb / 2)), 0);
	assert_int_equal(src_rec_index_read(path, &info, &f, &n, err, sizeof(err)), 0);
	assert_int_equal(n, 2);
	free(f);
	/* cut inside the first: nothing complete */
	assert_int_equal(truncate(path, (off_t)(hs + 100)), 0);
	assert_int_equal(src_rec_index_read(path, &info, &f, &n, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "holds no complete epoch"));
	unlink(path);
}

static void test_writer_refuses_an_existing_file(void **state)
{
	char path[] = "/tmp/volrec-test-rec-XXXXXX";
	struct src_replay_info info = {.sample_type = VOLREC_SAMPLE_U16,
	                               .samples_per_ascan = 16,
	                               .ascans_per_bscan = 4,
	                               .bscans_per_volume = 3,
	                               .stride_x = 1,
	                               .stride_y = 1};
	struct src_rec_writer *w = NULL;
	char err[512];
	int fd = mkstemp(path);

	(void)state;
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(src_rec_writer_open(path, &info, NULL, NULL, 0, &w, err, sizeof(err)),
	                 -EEXIST);
	assert_null(w);
	unlink(path);
}

VR_TEST_GROUP(src_rec)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_crc32c_matches_rfc3720_vectors),
	        cmocka_unit_test(test_crc32c_continues_and_both_paths_agree),
	        cmocka_unit_test(test_index_entry_round_trips_and_refuses_damage),
	        cmocka_unit_test(test_recording_index_reads_back_and_survives_a_cut),
	        cmocka_unit_test(test_writer_refuses_an_existing_file),
	};
	return cmocka_run_group_tests_name("src_rec", tests, NULL, NULL);
}
