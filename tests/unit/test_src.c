/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the sources: replay header round trip, raw files, looping and end of file,
 * offsets, the malformed corpus of tests/replay/bad/, the synth source against the scanner,
 * pacing and timeouts, and loading shims (good, faulty and broken ones).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sources/sim.h"
#include "tests/unit/srctest.h"

static char tmpdir[256];

static int setup_tmp(void **state)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/volrec-test-src-XXXXXX");
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_tmp(void **state)
{
	char cmd[PATH_MAX + 16];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	return system(cmd) == 0 ? 0 : -1;
}

/* The geometry of tests/replay/make_bad.py, synthetic scanner seed 3. */
static void small_cfg(struct vr_config *c)
{
	test_replay_geometry(c);
	c->source.synth.seed = 3;
}

/* small_cfg() replaying path. */
static void replay_cfg(struct vr_config *c, const char *path)
{
	small_cfg(c);
	c->source.type = CFG_SOURCE_REPLAY;
	snprintf(c->source.replay.path, sizeof(c->source.replay.path), "%s", path);
}

static double mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void open_fails(const struct vr_config *c, unsigned flags, const char *frag1,
                       const char *frag2)
{
	struct src_source s;
	char err[CFG_ERR_MAX] = "";
	memset(&s, 0x5a, sizeof(s));
	int rc = src_open(c, flags, &s, err, sizeof(err));
	if (rc >= 0)
		fail_msg("src_open succeeded, expected an error with '%s'", frag1);
	if (!strstr(err, frag1) || (frag2 && !strstr(err, frag2)))
		fail_msg("error '%s' lacks '%s'%s%s", err, frag1, frag2 ? " or " : "",
		         frag2 ? frag2 : "");
	assert_true(s.handle == (void *)0x5a5a5a5a5a5a5a5aull); /* untouched on failure */
}

/* src_open of c fails with the shim's own text ("fault shim: ..."), which names the shim: the
 * message does not name it a second time ("shim PATH: ... fault shim: ..."). */
static void open_names_the_shim_once(const struct vr_config *c)
{
	struct src_source s;
	char err[CFG_ERR_MAX] = "";

	assert_true(src_open(c, 0, &s, err, sizeof(err)) < 0);
	if (!strstr(err, "fault shim: ") || !strncmp(err, "shim ", 5))
		fail_msg("'%s' does not name the shim once", err);
}

/* Write a replay file of n epochs of synthetic B-scans; returns the data written. */
static uint8_t *write_file(const char *path, bool raw, uint64_t n, bool offsets, const char *meta,
                           size_t *bscan_bytes)
{
	struct vr_config c;
	struct sim_params p;
	struct sim *sim;
	struct src_replay_writer *w;
	struct src_replay_info info;
	uint32_t(*off)[2] = calloc(n, sizeof(*off));
	char err[CFG_ERR_MAX];

	small_cfg(&c);
	sim_params_from_config(&p, &c);
	assert_int_equal(sim_create(&p, &sim, err, sizeof(err)), 0);
	size_t bb = sim_bscan_bytes(sim);
	uint8_t *all = malloc(bb * 3 * n);
	memset(&info, 0, sizeof(info));
	info.sample_type = VOLREC_SAMPLE_U16;
	info.samples_per_ascan = 64;
	info.ascans_per_bscan = 4;
	info.bscans_per_volume = 3;
	info.epochs = n;
	info.stride_x = 2;
	info.stride_y = 1;
	info.flags = offsets ? SRC_REPLAY_FLAG_OFFSETS : 0;
	for (uint64_t e = 0; e < n; e++)
		vr_scan_offset(e, 2, 1, &off[e][0], &off[e][1]);
	if (src_replay_writer_open(path, raw, &info, (const uint32_t(*)[2])off, meta, &w, err,
	                           sizeof(err)))
		fail_msg("writer: %s", err);
	for (uint64_t e = 0; e < n; e++)
		for (uint32_t b = 0; b < 3; b++) {
			uint8_t *d = all + (e * 3 + b) * bb;
			assert_int_equal(sim_bscan(sim, e, off[e][0], off[e][1], b, d, bb), 0);
			assert_int_equal(src_replay_writer_bscan(w, d, bb, err, sizeof(err)), 0);
		}
	if (src_replay_writer_close(w, err, sizeof(err)))
		fail_msg("writer close: %s", err);
	sim_destroy(sim);
	free(off);
	*bscan_bytes = bb;
	return all;
}

static void replay_header_round_trips(void **state)
{
	char path[PATH_MAX], err[CFG_ERR_MAX];
	struct src_replay_info info;
	size_t bb;
	const char *meta = "scanner: synthetic\nseed: 3\n";

	snprintf(path, sizeof(path), "%s/rt.rp", tmpdir);
	uint8_t *data = write_file(path, false, 4, true, meta, &bb);
	if (src_replay_probe(path, &info, err, sizeof(err)))
		fail_msg("probe: %s", err);
	assert_int_equal(info.version, SRC_REPLAY_VERSION);
	assert_int_equal(info.header_size % SRC_REPLAY_ALIGN, 0);
	assert_int_equal(info.sample_type, VOLREC_SAMPLE_U16);
	assert_int_equal(info.samples_per_ascan, 64);
	assert_int_equal(info.ascans_per_bscan, 4);
	assert_int_equal(info.bscans_per_volume, 3);
	assert_int_equal(info.epochs, 4);
	assert_int_equal(info.stride_x, 2);
	assert_int_equal(info.stride_y, 1);
	assert_int_equal(info.flags, SRC_REPLAY_FLAG_OFFSETS);
	assert_int_equal(info.metadata_len, strlen(meta));

	struct vr_config c;
	struct src_source s;
	struct volrec_shim_meta m;
	uint8_t *buf = malloc(bb);
	replay_cfg(&c, path);
	srctest_open_ok(&c, SRC_UNPACED | SRC_NO_LOOP, &s);
	assert_int_equal(s.epochs, 4);
	assert_string_equal(s.info.name, "replay");
	assert_int_equal(src_start(&s), 0);
	for (uint32_t i = 0; i < 12; i++) {
		assert_int_equal(src_acquire(&s, buf, bb, 100, &m), 0);
		assert_memory_equal(buf, data + i * bb, bb);
		assert_int_equal(m.epoch, i / 3);
		assert_int_equal(m.bscan, i % 3);
		assert_true(m.timestamp_ns > 0);
	}
	int rc = src_acquire(&s, buf, bb, 100, &m);
	assert_int_equal(rc, -ENODATA);
	/* the replay source names itself once, the call adds what failed */
	char want[PATH_MAX + 64];
	snprintf(want, sizeof(want), "acquire: replay %s: end of file after 4 epochs", path);
	assert_string_equal(src_strerror(&s, rc), want);
	src_close(&s);
	free(buf);
	free(data);
}

/* A file of M = 2 repeats: its header says M, the source delivers [b][m] with meta naming the
 * repeat, and a configuration of another M is refused naming both. */
static void replay_with_repeats_round_trips(void **state)
{
	char path[PATH_MAX], err[CFG_ERR_MAX];
	const uint32_t M = 2, ny = 3, n = 2;
	struct src_replay_writer *w;
	struct src_replay_info info = {.sample_type = VOLREC_SAMPLE_U16,
	                               .samples_per_ascan = 64,
	                               .ascans_per_bscan = 4,
	                               .bscans_per_volume = ny,
	                               .epochs = n,
	                               .stride_x = 2,
	                               .stride_y = 1,
	                               .repeats = M};
	const size_t bb = 4 * 64 * 2;
	uint8_t *data = malloc(bb * n * ny * M), *buf = malloc(bb);
	struct volrec_shim_meta m;
	struct vr_config c;
	struct src_source s;

	for (size_t i = 0; i < bb * n * ny * M; i++)
		data[i] = (uint8_t)(i * 31 + i / bb);
	snprintf(path, sizeof(path), "%s/rep.rp", tmpdir);
	if (src_replay_writer_open(path, false, &info, NULL, NULL, &w, err, sizeof(err)))
		fail_msg("writer: %s", err);
	for (uint32_t i = 0; i < n * ny * M; i++)
		assert_int_equal(src_replay_writer_bscan(w, data + i * bb, bb, err, sizeof(err)),
		                 0);
	if (src_replay_writer_close(w, err, sizeof(err)))
		fail_msg("writer close: %s", err);
	if (src_replay_probe(path, &info, err, sizeof(err)))
		fail_msg("probe: %s", err);
	assert_int_equal(info.repeats, M);
	assert_int_equal(info.bscans_per_volume, ny);

	replay_cfg(&c, path);
	open_fails(&c, SRC_UNPACED, "file has repeats 2", "geometry.repeats is 1");
	c.geometry.repeats = M;
	srctest_open_ok(&c, SRC_UNPACED | SRC_NO_LOOP, &s);
	assert_int_equal(src_start(&s), 0);
	for (uint32_t i = 0; i < n * ny * M; i++) {
		assert_int_equal(src_acquire(&s, buf, bb, 100, &m), 0);
		assert_memory_equal(buf, data + i * bb, bb);
		assert_int_equal(m.epoch, i / (ny * M));
		assert_int_equal(m.bscan, i % (ny * M) / M);
		assert_int_equal(m.repeat, i % M);
	}
	assert_int_equal(src_acquire(&s, buf, bb, 100, &m), -ENODATA);
	src_close(&s);

	/* by reference: the same B-scans, each released once */
	const void *held[2 * 3 * 2];
	struct volrec_shim_region reg;
	uint32_t nreg = 0;
	srctest_open_ok(&c, SRC_UNPACED | SRC_NO_LOOP, &s);
	assert_int_equal(src_ref_regions(&s, &reg, 1, &nreg), 0);
	assert_int_equal(nreg, 1);
	assert_int_equal(src_start(&s), 0);
	for (uint32_t i = 0; i < n * ny * M; i++) {
		assert_int_equal(src_acquire_ref(&s, &held[i], 100, &m), 0);
		assert_memory_equal(held[i], data + i * bb, bb);
		assert_int_equal(m.bscan, i % (ny * M) / M);
		assert_int_equal(m.repeat, i % M);
	}
	for (uint32_t i = 0; i < n * ny * M; i++)
		assert_int_equal(src_release_ref(&s, held[i]), 0);
	src_close(&s);
	free(buf);
	free(data);
}

/* geometry.repeats > 1 needs a shim that says it repeats (VOLREC_SHIM_INFO_REPEATS): the fault
 * shim does not and is refused by name; the synth shim does and delivers [b][m]. */
static void repeats_need_a_shim_that_repeats(void **state)
{
	struct vr_config c;
	struct src_source s;
	struct volrec_shim_meta m;
	uint8_t buf[4 * 64 * 2];

	srctest_shim_cfg(&c, "volrec_fault_shim", "{}");
	c.geometry.repeats = 3;
	open_fails(&c, 0,
	           "libvolrec_fault_shim.so: geometry.repeats is 3, but the shim does not "
	           "deliver repeated B-scans",
	           "VOLREC_SHIM_INFO_REPEATS");
	c.geometry.repeats = 1;
	srctest_open_ok(&c, SRC_UNPACED, &s);
	src_close(&s);

	srctest_shim_cfg(&c, "volrec_synth_shim", "{}");
	c.geometry.repeats = 3;
	srctest_open_ok(&c, SRC_UNPACED, &s);
	assert_true(s.info.flags & VOLREC_SHIM_INFO_REPEATS);
	assert_int_equal(src_start(&s), 0);
	for (uint32_t i = 0; i < 2 * 3 * 3; i++) {
		assert_int_equal(src_acquire(&s, buf, sizeof(buf), 1000, &m), 0);
		assert_int_equal(m.epoch, i / 9);
		assert_int_equal(m.bscan, i % 9 / 3);
		assert_int_equal(m.repeat, i % 3);
	}
	src_close(&s);
}

static void replay_loops_and_follows_told_epochs(void **state)
{
	char path[PATH_MAX];
	size_t bb;
	struct vr_config c;
	struct src_source s;
	struct volrec_shim_meta m;

	snprintf(path, sizeof(path), "%s/loop.rp", tmpdir);
	uint8_t *data = write_file(path, false, 2, true, NULL, &bb);
	uint8_t *buf = malloc(bb);
	replay_cfg(&c, path);
	srctest_open_ok(&c, SRC_UNPACED, &s);
	assert_int_equal(src_start(&s), 0);
	for (uint32_t i = 0; i < 6 * 3 + 1; i++) {
		assert_int_equal(src_acquire(&s, buf, bb, 100, &m), 0);
		assert_memory_equal(buf, data + (i % 6) * bb, bb);
		assert_int_equal(m.epoch, i / 3);
	}
	/* mid-epoch: telling the current epoch again is refused */
	assert_int_equal(src_set_scan_offset(&s, 6, 0, 0), -EBUSY);
	assert_int_equal(src_acquire(&s, buf, bb, 100, &m), 0);
	assert_int_equal(src_acquire(&s, buf, bb, 100, &m), 0);
	/* epoch 9 is file epoch 1, recorded at (1, 0): (0, 0) is refused with the reason */
	int rc = src_set_scan_offset(&s, 9, 0, 0);
	assert_int_equal(rc, -EINVAL);
	assert_non_null(strstr(src_strerror(&s, rc), "recorded at offset (1, 0)"));
	assert_int_equal(src_set_scan_offset(&s, 9, 1, 0), 0);
	assert_int_equal(src_acquire(&s, buf, bb, 100, &m), 0);
	assert_int_equal(m.epoch, 9);
	assert_memory_equal(buf, data + 3 * bb, bb);
	src_close(&s);
	free(buf);
	free(data);
}

static void file_with_offsets_loops_only_over_whole_offset_cycles(void **state)
{
	char path[PATH_MAX];
	size_t bb;
	struct vr_config c;
	struct src_source s;

	snprintf(path, sizeof(path), "%s/odd.rp", tmpdir);
	free(write_file(path, false, 3, true, NULL, &bb)); /* 3 epochs, S = 2 */
	replay_cfg(&c, path);
	open_fails(&c, 0, "not a whole number of 2-epoch offset cycles, so it cannot loop", path);
	srctest_open_ok(&c, SRC_NO_LOOP, &s);
	src_close(&s);
	c.source.replay.loop = false;
	srctest_open_ok(&c, 0, &s);
	src_close(&s);
}

static void raw_files_need_a_whole_number_of_epochs(void **state)
{
	char path[PATH_MAX];
	size_t bb;
	struct vr_config c;
	struct src_source s;

	snprintf(path, sizeof(path), "%s/x.raw", tmpdir);
	uint8_t *data = write_file(path, true, 3, false, NULL, &bb);
	replay_cfg(&c, path);
	c.source.replay.format = CFG_REPLAY_RAW;
	srctest_open_ok(&c, SRC_UNPACED, &s);
	assert_int_equal(s.epochs, 3);
	uint8_t *buf = malloc(bb);
	assert_int_equal(src_start(&s), 0);
	assert_int_equal(src_acquire(&s, buf, bb, 100, NULL), 0);
	assert_memory_equal(buf, data, bb);
	src_close(&s);
	/* the same file as a headerless one is not a volrec file */
	c.source.replay.format = CFG_REPLAY_AUTO;
	open_fails(&c, 0, "not a volrec replay file", path);
	/* one byte more */
	FILE *f = fopen(path, "ab");
	fputc(1, f);
	fclose(f);
	c.source.replay.format = CFG_REPLAY_RAW;
	open_fails(&c, 0, "file length 4609 is not a whole number of epochs of 1536 bytes",
	           "3 whole epochs and 1 bytes left over");
	free(buf);
	free(data);
}

static void malformed_corpus_is_rejected(void **state)
{
	char path[PATH_MAX], line[1024];
	struct vr_config c;
	size_t n = 0;

	snprintf(path, sizeof(path), "%s/tests/replay/bad/CASES", vrtest_src_dir());
	FILE *f = fopen(path, "r");
	if (!f)
		fail_msg("cannot open %s", path);
	while (fgets(line, sizeof(line), f)) {
		if (line[0] == '#')
			continue;
		line[strcspn(line, "\n")] = 0;
		char *name = strtok(line, "\t"), *fmt = strtok(NULL, "\t"),
		     *frag = strtok(NULL, "");
		assert_non_null(frag);
		small_cfg(&c);
		c.source.type = CFG_SOURCE_REPLAY;
		c.source.replay.format = !strcmp(fmt, "raw") ? CFG_REPLAY_RAW : CFG_REPLAY_AUTO;
		snprintf(c.source.replay.path, sizeof(c.source.replay.path),
		         "%s/tests/replay/bad/%s", vrtest_src_dir(), name);
		open_fails(&c, 0, frag, name);
		n++;
	}
	fclose(f);
	assert_true(n >= 15);

	/* the geometry is right: a well-formed file with it opens */
	size_t bb;
	struct src_source s;
	snprintf(path, sizeof(path), "%s/good.rp", tmpdir);
	free(write_file(path, false, 2, true, "a: 1\n", &bb));
	replay_cfg(&c, path);
	srctest_open_ok(&c, 0, &s);
	src_close(&s);
}

static void synth_source_delivers_the_scanners_bscans_at_told_offsets(void **state)
{
	struct vr_config c;
	struct src_source s;
	struct sim_params p;
	struct sim *sim;
	struct volrec_shim_meta m;
	char err[256];

	small_cfg(&c);
	sim_params_from_config(&p, &c);
	assert_int_equal(sim_create(&p, &sim, err, sizeof(err)), 0);
	size_t bb = sim_bscan_bytes(sim);
	uint8_t *buf = malloc(bb), *ref = malloc(bb);
	srctest_open_ok(&c, SRC_UNPACED, &s);
	assert_int_equal(s.epochs, 0);
	assert_int_equal(src_acquire(&s, buf, bb, 100, &m), -EINVAL); /* not started */
	assert_non_null(strstr(src_strerror(&s, -EINVAL), "before start()"));
	assert_int_equal(src_start(&s), 0);
	/* epochs 0 and 1 at the default offsets (0,0), (1,0) */
	for (uint32_t i = 0; i < 6; i++) {
		uint32_t e = i / 3, b = i % 3;
		assert_int_equal(src_acquire(&s, buf, bb, 100, &m), 0);
		assert_int_equal(sim_bscan(sim, e, e % 2, 0, b, ref, bb), 0);
		assert_memory_equal(buf, ref, bb);
		assert_int_equal(m.epoch, e);
		assert_int_equal(m.bscan, b);
	}
	/* told: epoch 7 at (0, 0) (not its default (1, 0)) */
	assert_int_equal(src_set_scan_offset(&s, 7, 0, 0), 0);
	assert_int_equal(src_set_scan_offset(&s, 7, 2, 0), -EINVAL);
	assert_non_null(strstr(src_strerror(&s, -EINVAL), "outside stride"));
	assert_int_equal(src_acquire(&s, buf, bb, 100, &m), 0);
	assert_int_equal(m.epoch, 7);
	assert_int_equal(sim_bscan(sim, 7, 0, 0, 0, ref, bb), 0);
	assert_memory_equal(buf, ref, bb);
	src_close(&s);
	sim_destroy(sim);
	free(buf);
	free(ref);
}

static void synth_is_paced_at_the_rate_and_times_out(void **state)
{
	struct vr_config c;
	struct src_source s;
	uint8_t buf[4 * 64 * 2];

	small_cfg(&c);
	c.source.rate = 100; /* 300 B-scans/s: 10 B-scans take at least 33 ms */
	srctest_open_ok(&c, 0, &s);
	assert_int_equal(src_start(&s), 0);
	double t0 = mono();
	for (int i = 0; i < 10; i++)
		assert_int_equal(src_acquire(&s, buf, sizeof(buf), 1000, NULL), 0);
	double dt = mono() - t0;
	if (dt < 0.030)
		fail_msg("10 B-scans at 300/s took %.1f ms", dt * 1e3);
	src_close(&s);

	c.source.rate = 0.1; /* one B-scan every 3.3 s */
	srctest_open_ok(&c, 0, &s);
	assert_int_equal(src_start(&s), 0);
	t0 = mono();
	assert_int_equal(src_acquire(&s, buf, sizeof(buf), 20, NULL), -ETIMEDOUT);
	assert_true(mono() - t0 >= 0.019);
	src_close(&s);

	/* unpaced: the same rate does not hold anything back */
	srctest_open_ok(&c, SRC_UNPACED, &s);
	assert_int_equal(src_start(&s), 0);
	assert_int_equal(src_acquire(&s, buf, sizeof(buf), 0, NULL), 0);
	src_close(&s);
}

static void synth_shim_equals_the_builtin_synth(void **state)
{
	struct vr_config c, b;
	struct src_source s, t;
	uint8_t x[4 * 64 * 2], y[4 * 64 * 2];

	srctest_shim_cfg(&c, "volrec_synth_shim", "{seed: 3, deg_per_s: 0.25, snr_db: 40}");
	c.source.rate = 25;
	small_cfg(&b);
	b.source.rate = 25;
	srctest_open_ok(&c, SRC_UNPACED, &s);
	srctest_open_ok(&b, SRC_UNPACED, &t);
	assert_non_null(s.dl);
	assert_string_equal(s.info.name, "synth-shim");
	assert_int_equal(src_start(&s), 0);
	assert_int_equal(src_start(&t), 0);
	assert_int_equal(src_set_scan_offset(&s, 0, 1, 0), 0);
	assert_int_equal(src_set_scan_offset(&t, 0, 1, 0), 0);
	for (int i = 0; i < 7; i++) {
		assert_int_equal(src_acquire(&s, x, sizeof(x), 100, NULL), 0);
		assert_int_equal(src_acquire(&t, y, sizeof(y), 100, NULL), 0);
		assert_memory_equal(x, y, sizeof(x));
	}
	src_close(&s);
	src_close(&t);

	srctest_shim_cfg(&c, "volrec_synth_shim", "{seed: 3, colour: blue}");
	open_fails(&c, 0, "unknown key 'colour'",
	           "(allowed: seed, deg_per_s, snr_db, phantom, bit_shift, motion_rate)");
	srctest_shim_cfg(&c, "volrec_synth_shim", "{seed: [1, 2]}");
	open_fails(&c, 0, "open(args) failed", "lists are not accepted");
}

static void fault_shim_injects_errors_timeouts_and_stalls(void **state)
{
	struct vr_config c;
	struct src_source s;
	uint8_t buf[4 * 64 * 2];
	char ctl[PATH_MAX], args[PATH_MAX + 64];
	int rc;

	srctest_shim_cfg(&c, "volrec_fault_shim", "{fail_open: true}");
	open_fails(
	        &c, 0, "fail_open: true",
	        "libvolrec_fault_shim.so: open(args) failed: fault shim: open failed on request");
	open_names_the_shim_once(&c);
	srctest_shim_cfg(&c, "volrec_fault_shim", "{stall_ms: 1,\n fail_often: true}");
	open_fails(&c, 0, "line 2: unknown key 'fail_often'",
	           "(allowed: fail_open, fail_configure, fail_start, fail_stop, exclusive, "
	           "stall_stop_ms, fail_every, timeout_every, stall_ms, stall_after, control_file, "
	           "device_hex, text_hex, crash_after, crash_signal)");
	srctest_shim_cfg(&c, "volrec_fault_shim", "{fail_configure: true}");
	open_fails(&c, 0, "configure(K 64, nx 4, ny 3, u16, stride [2, 1]", "fail_configure");
	open_names_the_shim_once(&c);

	srctest_shim_cfg(&c, "volrec_fault_shim", "{fail_every: 3, timeout_every: 5}");
	srctest_open_ok(&c, SRC_UNPACED, &s);
	assert_int_equal(src_start(&s), 0);
	for (int i = 1; i <= 6; i++) {
		rc = src_acquire(&s, buf, sizeof(buf), 1, NULL);
		assert_int_equal(rc, i % 3 == 0 ? -EIO : i == 5 ? -ETIMEDOUT : 0);
		/* the shim's text names the shim; without one, volrec names it */
		if (rc == -EIO) {
			char want[80];
			snprintf(want, sizeof(want),
			         "acquire: fault shim: injected error (fail_every: 3, call %d)", i);
			assert_string_equal(src_strerror(&s, rc), want);
		}
		if (rc == -ETIMEDOUT)
			assert_string_equal(src_strerror(&s, rc),
			                    "shim fault-shim: acquire: Connection timed out");
	}
	src_close(&s);

	snprintf(ctl, sizeof(ctl), "%s/control", tmpdir);
	snprintf(args, sizeof(args), "{control_file: '%s'}", ctl);
	srctest_shim_cfg(&c, "volrec_fault_shim", args);
	srctest_open_ok(&c, SRC_UNPACED, &s);
	assert_int_equal(src_start(&s), 0);
	assert_int_equal(src_acquire(&s, buf, sizeof(buf), 10, NULL), 0);
	FILE *f = fopen(ctl, "w");
	fputs("error 2\n", f);
	fclose(f);
	assert_int_equal(src_acquire(&s, buf, sizeof(buf), 10, NULL), -EIO);
	assert_int_equal(src_acquire(&s, buf, sizeof(buf), 10, NULL), -EIO);
	assert_int_equal(src_acquire(&s, buf, sizeof(buf), 10, NULL), 0);
	f = fopen(ctl, "w");
	fputs("stall 60\n", f);
	fclose(f);
	double t0 = mono();
	assert_int_equal(src_acquire(&s, buf, sizeof(buf), 10, NULL), 0);
	assert_true(mono() - t0 >= 0.055);
	f = fopen(ctl, "w");
	fputs("timeout 1\n", f);
	fclose(f);
	assert_int_equal(src_acquire(&s, buf, sizeof(buf), 10, NULL), -ETIMEDOUT);
	f = fopen(ctl, "w");
	fputs("explode\n", f);
	fclose(f);
	rc = src_acquire(&s, buf, sizeof(buf), 10, NULL);
	assert_int_equal(rc, -EINVAL);
	assert_non_null(strstr(src_strerror(&s, rc), "unknown command 'explode'"));
	f = fopen(ctl, "w");
	fputs("ok\n", f);
	fclose(f);
	assert_int_equal(src_acquire(&s, buf, sizeof(buf), 10, NULL), 0);
	src_close(&s);
}

static void broken_shims_are_rejected_naming_the_fault(void **state)
{
	struct vr_config c;

	srctest_shim_cfg(&c, "volrec_test_bad_abi", "{}");
	open_fails(&c, 0, "ABI version 2, this volrec speaks version 1", "bad_abi.so");
	srctest_shim_cfg(&c, "volrec_test_bad_size", "{}");
	open_fails(&c, 0, "function table is 16 bytes", "bad_size.so");
	srctest_shim_cfg(&c, "volrec_test_bad_null_acquire", "{}");
	open_fails(&c, 0, "function table has no acquire()", "bad_null_acquire.so");
	srctest_shim_cfg(&c, "volrec_test_bad_no_entry", "{}");
	open_fails(&c, 0, "no symbol volrec_shim_entry", "bad_no_entry.so");
	srctest_shim_cfg(&c, "volrec_test_bad_null_table", "{}");
	open_fails(&c, 0, "volrec_shim_entry() returned NULL", "bad_null_table.so");
	srctest_shim_cfg(&c, "volrec_no_such_shim", "{}");
	open_fails(&c, 0, "cannot open: No such file or directory", "libvolrec_no_such_shim.so");
	srctest_shim_cfg(&c, "x", "{}");
	c.source.shim.library[0] = 0;
	open_fails(&c, 0, "source.shim.library is not set", NULL);
}

VR_TEST_GROUP(src)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(replay_header_round_trips),
	        cmocka_unit_test(replay_loops_and_follows_told_epochs),
	        cmocka_unit_test(file_with_offsets_loops_only_over_whole_offset_cycles),
	        cmocka_unit_test(raw_files_need_a_whole_number_of_epochs),
	        cmocka_unit_test(malformed_corpus_is_rejected),
	        cmocka_unit_test(synth_source_delivers_the_scanners_bscans_at_told_offsets),
	        cmocka_unit_test(synth_is_paced_at_the_rate_and_times_out),
	        cmocka_unit_test(synth_shim_equals_the_builtin_synth),
	        cmocka_unit_test(fault_shim_injects_errors_timeouts_and_stalls),
	        cmocka_unit_test(replay_with_repeats_round_trips),
	        cmocka_unit_test(repeats_need_a_shim_that_repeats),
	        cmocka_unit_test(broken_shims_are_rejected_naming_the_fault),
	};
	return cmocka_run_group_tests_name("src", tests, setup_tmp, teardown_tmp);
}
