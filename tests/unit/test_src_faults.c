/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of sources under fault: the call order the src_ wrappers enforce, a shim that
 * returns a positive value, shim texts that are not UTF-8, shim files that are not loadable
 * shared objects (truncated, text, another machine, crashing the loader), and replay files
 * that shrink, change or are replaced while being read, by copy and by reference.
 */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/unit/srctest.h"

#define BB (4u * 64u * 2u) /* bytes of one B-scan of the small geometry */

static char dir[256];

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/volrec-test-srcf-XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[PATH_MAX + 16];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

/* rc is want and src_strerror(s, rc) holds frag. */
static void fails_with(const struct src_source *s, int rc, int want, const char *frag)
{
	const char *t = src_strerror(s, rc);

	if (rc != want || !strstr(t, frag))
		fail_msg("got %d '%s', expected %d with '%s'", rc, t, want, frag);
}

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

/* ---- the wrappers ---------------------------------------------------------------------- */

static void wrappers_enforce_the_call_order(void **state)
{
	struct vr_config c;
	struct src_source s, closed;
	uint8_t buf[BB];
	uint32_t n;
	const void *p;

	(void)state;
	test_replay_geometry(&c);
	srctest_open_ok(&c, SRC_UNPACED, &s);
	fails_with(&s, src_acquire(&s, buf, sizeof(buf), 10, NULL), -EINVAL,
	           "synth: acquire() before start()");
	fails_with(&s, src_ref_regions(&s, NULL, 0, &n), -EOPNOTSUPP, "no zero-copy calls");
	assert_int_equal(src_start(&s), 0);
	fails_with(&s, src_start(&s), -EINVAL, "start() while started");
	assert_int_equal(src_acquire(&s, buf, sizeof(buf), 10, NULL), 0);
	assert_int_equal(src_stop(&s), 0);
	assert_int_equal(src_stop(&s), 0); /* stopping a stopped source is no error */
	assert_int_equal(src_start(&s), 0);
	src_close(&s);

	memset(&closed, 0, sizeof(closed));
	fails_with(&closed, src_start(&closed), -EBADF, "start() on a source that is not open");
	fails_with(&closed, src_acquire_ref(&closed, &p, 0, NULL), -EBADF, "not open");
	src_close(&closed); /* a zeroed struct is fine */
}

static int null_stop_calls, null_close_calls;

static int null_stop(void *h)
{
	assert_null(h);
	null_stop_calls++;
	return -EIO;
}

static void null_close(void *h)
{
	assert_null(h);
	null_close_calls++;
}

static int null_acquire(void *h, void *buf, size_t size, int timeout_ms,
                        struct volrec_shim_meta *meta)
{
	(void)h, (void)buf, (void)size, (void)timeout_ms, (void)meta;
	return -EIO;
}

/* A shim whose open() succeeded with a NULL handle is stopped and closed all the same (the
 * NULL was taken for "never opened": neither was called); stop()'s error is reported. */
static void a_null_handle_is_stopped_and_closed(void **state)
{
	struct src_source s = {
	        .impl = {.stop = null_stop, .close = null_close, .acquire = null_acquire},
	        .kind = "shim",
	        .open = true,
	        .started = true};
	char err[256] = "";

	(void)state;
	snprintf(s.info.name, sizeof(s.info.name), "nullish");
	assert_int_equal(src_close_checked(&s, err, sizeof(err)), -EIO);
	assert_int_equal(null_stop_calls, 1);
	assert_int_equal(null_close_calls, 1);
	assert_non_null(strstr(err, "shim nullish: stop: Input/output error"));
	assert_false(s.open); /* zeroed: a second close does nothing */
	src_close(&s);
	assert_int_equal(null_close_calls, 1);
}

/* A replay file of 2 epochs at path; B-scan i is filled with the byte i + 1. */
static void write_replay(const char *path)
{
	struct src_replay_info info = {.sample_type = VOLREC_SAMPLE_U16,
	                               .samples_per_ascan = 64,
	                               .ascans_per_bscan = 4,
	                               .bscans_per_volume = 3,
	                               .epochs = 2,
	                               .stride_x = 2,
	                               .stride_y = 1};
	struct src_replay_writer *w;
	char err[CFG_ERR_MAX];
	uint8_t b[BB];

	if (src_replay_writer_open(path, false, &info, NULL, "x: 1\n", &w, err, sizeof(err)))
		fail_msg("%s", err);
	for (int i = 0; i < 6; i++) {
		memset(b, i + 1, sizeof(b));
		assert_int_equal(src_replay_writer_bscan(w, b, sizeof(b), err, sizeof(err)), 0);
	}
	assert_int_equal(src_replay_writer_close(w, err, sizeof(err)), 0);
}

static void replay_cfg(struct vr_config *c, const char *path)
{
	test_replay_geometry(c);
	c->source.type = CFG_SOURCE_REPLAY;
	snprintf(c->source.replay.path, sizeof(c->source.replay.path), "%s", path);
}

/* The replay file dir/name (path) of write_replay, opened unpaced by c. */
static void replay_open(const char *name, char path[PATH_MAX], struct vr_config *c,
                        struct src_source *s)
{
	snprintf(path, PATH_MAX, "%s/%s", dir, name);
	write_replay(path);
	replay_cfg(c, path);
	srctest_open_ok(c, SRC_UNPACED, s);
}

static void wrappers_keep_copy_and_reference_apart(void **state)
{
	struct vr_config c;
	struct src_source s;
	char path[PATH_MAX];
	uint8_t buf[BB] = {0};
	const void *p;
	uint32_t n;

	(void)state;
	replay_open("order.vrr", path, &c, &s);
	assert_int_equal(src_start(&s), 0);
	fails_with(&s, src_ref_regions(&s, NULL, 0, &n), -EINVAL, "ref_regions() after start()");
	fails_with(&s, src_acquire_ref(&s, &p, 0, NULL), -EINVAL,
	           "acquire_ref() before ref_regions()");
	assert_int_equal(src_acquire(&s, buf, sizeof(buf), 0, NULL), 0);
	src_close(&s);

	srctest_open_ok(&c, SRC_UNPACED, &s);
	assert_int_equal(src_ref_regions(&s, NULL, 0, &n), 0);
	assert_int_equal(src_start(&s), 0);
	assert_int_equal(src_acquire_ref(&s, &p, 0, NULL), 0);
	fails_with(&s, src_acquire(&s, buf, sizeof(buf), 0, NULL), -EINVAL,
	           "acquire() after acquire_ref(): a source delivers by copy or by reference, not "
	           "both");
	assert_int_equal(src_release_ref(&s, p), 0);
	src_close(&s);
}

/* ---- shims: positive returns, texts that are not UTF-8 ----------------------------------- */

/* The fault shim, unpaced, commanded through the file dir/name (ctl, which reads "ok" now),
 * with the further args extra ("" or ", key: value, ..."). */
static void fault_shim_open(const char *name, const char *extra, char ctl[PATH_MAX],
                            struct src_source *s)
{
	struct vr_config c;
	char args[2 * PATH_MAX];

	snprintf(ctl, PATH_MAX, "%s/%s", dir, name);
	snprintf(args, sizeof(args), "{control_file: '%s'%s}", ctl, extra);
	write_text(ctl, "ok\n");
	srctest_shim_cfg(&c, "volrec_fault_shim", args);
	srctest_open_ok(&c, SRC_UNPACED, s);
}

static void shim_returning_a_positive_value_is_an_error(void **state)
{
	struct src_source s;
	uint8_t buf[BB];
	char ctl[PATH_MAX];

	(void)state;
	fault_shim_open("control", "", ctl, &s);
	assert_int_equal(src_start(&s), 0);
	assert_int_equal(src_acquire(&s, buf, sizeof(buf), 10, NULL), 0);
	write_text(ctl, "return 5 2\n");
	for (int i = 0; i < 2; i++)
		fails_with(&s, src_acquire(&s, buf, sizeof(buf), 10, NULL), -EPROTO,
		           "shim fault-shim: acquire() returned 5: positive values are not allowed "
		           "(0 or a negative errno)");
	assert_int_equal(src_acquire(&s, buf, sizeof(buf), 10, NULL), 0);
	/* the shim's own negative codes and texts still come through */
	write_text(ctl, "error 1\n");
	fails_with(&s, src_acquire(&s, buf, sizeof(buf), 10, NULL), -EIO, "injected error");
	src_close(&s);
}

static void shim_texts_reach_callers_as_valid_utf8(void **state)
{
	struct src_source s;
	uint8_t buf[BB];
	char ctl[PATH_MAX];
	const char *t;

	(void)state;
	/* "A", a lone continuation byte, "(" after a broken lead byte, a bell, an overlong '/',
	 * then "B" and "C" after a newline and a tab (one line: each a space) */
	fault_shim_open("control-utf8",
	                ", device_hex: '41 80 c3 28 07 c0 af 0a 42 09 43', text_hex: 'fe ff'", ctl,
	                &s);
	assert_true(vr_utf8_valid(s.info.device, strlen(s.info.device)));
	assert_string_equal(s.info.device, "A\xef\xbf\xbd\xef\xbf\xbd(\xef\xbf\xbd\xef\xbf\xbd"
	                                   "\xef\xbf\xbd B C");
	assert_string_equal(s.info.name, "fault-shim");
	assert_int_equal(src_start(&s), 0);
	write_text(ctl, "error 1\n");
	int rc = src_acquire(&s, buf, sizeof(buf), 10, NULL);
	assert_int_equal(rc, -EIO);
	t = src_strerror(&s, rc);
	assert_true(vr_utf8_valid(t, strlen(t)));
	assert_non_null(strstr(t, "injected error"));
	assert_non_null(strstr(t, "\xef\xbf\xbd\xef\xbf\xbd"));
	src_close(&s);
}

/* ---- shim files that are not loadable ------------------------------------------------------ */

/* Copy the first n bytes of src (all when n is 0) to dst; patch: byte offset and value. */
static void copy_file(const char *src, const char *dst, size_t n, long patch_at, uint16_t patch)
{
	FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
	char b[4096];
	size_t got, done = 0;

	assert_non_null(in);
	assert_non_null(out);
	while ((got = fread(b, 1, sizeof(b), in)) > 0) {
		if (n && done + got > n)
			got = n - done;
		if (patch_at >= (long)done && patch_at + 2 <= (long)(done + got))
			memcpy(b + (patch_at - (long)done), &patch, 2);
		assert_int_equal(fwrite(b, 1, got, out), got);
		done += got;
		if (n && done == n)
			break;
	}
	fclose(in);
	assert_int_equal(fclose(out), 0);
}

/* src_open and src_shim_check (in a child) refuse path with frag in the message. */
static void shim_file_refused(const char *path, const char *frag)
{
	struct vr_config c;
	struct src_source s;
	char err[CFG_ERR_MAX] = "";
	int rc;

	srctest_shim_cfg(&c, "x", "{}");
	snprintf(c.source.shim.library, sizeof(c.source.shim.library), "%s", path);
	rc = src_open(&c, 0, &s, err, sizeof(err));
	if (rc >= 0 || !strstr(err, frag) || !strstr(err, path))
		fail_msg("src_open(%s): %d '%s', expected an error with '%s'", path, rc, err, frag);
	err[0] = 0;
	rc = src_shim_check(path, true, err, sizeof(err));
	if (rc >= 0 || !strstr(err, frag))
		fail_msg("src_shim_check(%s): %d '%s', expected an error with '%s'", path, rc, err,
		         frag);
}

static void broken_shim_files_are_refused_before_loading(void **state)
{
	char good[PATH_MAX], p[PATH_MAX], err[CFG_ERR_MAX] = "";
	struct stat st;

	(void)state;
	snprintf(good, sizeof(good), "%s/lib/libvolrec_fault_shim.so", vrtest_build_dir());
	assert_int_equal(stat(good, &st), 0);
	if (src_shim_check(good, true, err, sizeof(err)))
		fail_msg("the fault shim fails the check: %s", err);

	/* truncated at half and within the ELF header */
	snprintf(p, sizeof(p), "%s/half.so", dir);
	copy_file(good, p, (size_t)st.st_size / 2, -1, 0);
	shim_file_refused(p, "truncated:");
	snprintf(p, sizeof(p), "%s/stub.so", dir);
	copy_file(good, p, 40, -1, 0);
	shim_file_refused(p, "truncated: 40 bytes, the ELF header alone is 64");
	/* a text file named .so, an empty one, a directory */
	snprintf(p, sizeof(p), "%s/text.so", dir);
	write_text(p, "INPUT(-lvolrec_fault_shim)\n");
	shim_file_refused(p, "not an ELF shared object (27 bytes, no ELF magic)");
	snprintf(p, sizeof(p), "%s/empty.so", dir);
	write_text(p, "");
	shim_file_refused(p, "not an ELF shared object (0 bytes");
	snprintf(p, sizeof(p), "%s/dir.so", dir);
	assert_int_equal(mkdir(p, 0700), 0);
	shim_file_refused(p, "not a regular file");
	/* another machine: e_machine says AArch64 (or x86-64 on an AArch64 host) */
	snprintf(p, sizeof(p), "%s/other.so", dir);
	copy_file(good, p, 0, offsetof(Elf64_Ehdr, e_machine),
#ifdef __aarch64__
	          EM_X86_64
#else
	          EM_AARCH64
#endif
	);
	shim_file_refused(p, "another architecture");
}

static void a_shim_that_crashes_its_loader_is_reported_by_the_check(void **state)
{
	char p[PATH_MAX], err[CFG_ERR_MAX] = "";
	int rc;

	(void)state;
	snprintf(p, sizeof(p), "%s/lib/libvolrec_test_bad_crash.so", vrtest_build_dir());
	rc = src_shim_check(p, true, err, sizeof(err));
	assert_int_equal(rc, -ENOEXEC);
	if (!strstr(err, "killed the loading process with signal 7") || !strstr(err, p))
		fail_msg("message '%s'", err);
	/* the table checks run in the child and come back by the pipe */
	snprintf(p, sizeof(p), "%s/lib/libvolrec_test_bad_abi.so", vrtest_build_dir());
	rc = src_shim_check(p, true, err, sizeof(err));
	assert_int_equal(rc, -EPROTONOSUPPORT);
	assert_non_null(strstr(err, "ABI version 2, this volrec speaks version 1"));
	/* the file checks alone pass it: it is a whole ELF shared object */
	assert_int_equal(src_shim_check(p, false, err, sizeof(err)), 0);
}

/* ---- replay files that change under the source --------------------------------------------- */

static void replay_file_that_shrinks_is_a_fault_not_a_crash(void **state)
{
	char path[PATH_MAX];
	struct vr_config c;
	struct src_source s;
	struct src_replay_info info;
	uint8_t buf[BB];
	char err[CFG_ERR_MAX];

	(void)state;
	replay_open("shrinks.vrr", path, &c, &s);
	assert_int_equal(src_replay_probe(path, &info, err, sizeof(err)), 0);
	assert_int_equal(src_start(&s), 0);
	assert_int_equal(src_acquire(&s, buf, sizeof(buf), 0, NULL), 0);
	assert_int_equal(buf[0], 1);
	/* B-scan 1 of epoch 0 is cut away in the middle of the epoch: a short read */
	assert_int_equal(truncate(path, info.header_size + BB + 10), 0);
	fails_with(&s, src_acquire(&s, buf, sizeof(buf), 0, NULL), -ESTALE,
	           "the file shrank while being replayed: a B-scan at bytes");
	src_close(&s);

	/* shrunk between epochs: noticed before the next epoch is handed out */
	write_replay(path);
	srctest_open_ok(&c, SRC_UNPACED, &s);
	assert_int_equal(src_start(&s), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(src_acquire(&s, buf, sizeof(buf), 0, NULL), 0);
	assert_int_equal(truncate(path, 100), 0);
	fails_with(&s, src_acquire(&s, buf, sizeof(buf), 0, NULL), -ESTALE,
	           "the file changed size while being replayed");
	src_close(&s);
	/* and reopening says what is wrong with the file now */
	err[0] = 0;
	assert_int_equal(src_open(&c, SRC_UNPACED, &s, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "truncated header: header_size 4096 but the file is 100"));
}

static void replay_file_modified_or_replaced_is_a_fault(void **state)
{
	char path[PATH_MAX], other[PATH_MAX];
	struct vr_config c;
	struct src_source s;
	uint8_t buf[BB];
	struct timespec ts[2] = {{.tv_sec = 1000000, .tv_nsec = 0}, {.tv_sec = 1000000}};

	(void)state;
	snprintf(other, sizeof(other), "%s/changes.vrr.tmp", dir);
	replay_open("changes.vrr", path, &c, &s);
	assert_int_equal(src_start(&s), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(src_acquire(&s, buf, sizeof(buf), 0, NULL), 0);
	assert_int_equal(utimensat(AT_FDCWD, path, ts, 0), 0); /* same size, new mtime */
	fails_with(&s, src_acquire(&s, buf, sizeof(buf), 0, NULL), -ESTALE,
	           "the file was modified while being replayed");
	src_close(&s);

	/* written again by the replay writer (volrec sim -o): a new file renamed over the path,
	 * so the open one stays whole and the change is told */
	srctest_open_ok(&c, SRC_UNPACED, &s);
	assert_int_equal(src_start(&s), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(src_acquire(&s, buf, sizeof(buf), 0, NULL), 0);
	write_replay(path);
	fails_with(&s, src_acquire(&s, buf, sizeof(buf), 0, NULL), -ESTALE,
	           "the path now names another file");
	src_close(&s);
	srctest_open_ok(&c, SRC_UNPACED, &s);
	src_close(&s);
	/* nothing left beside it */
	snprintf(other, sizeof(other), "%s/changes.vrr.tmp-%ld-0", dir, (long)getpid());
	assert_int_equal(access(other, F_OK), -1);
}

/* Seconds since t0 on CLOCK_MONOTONIC. */
static double since(const struct timespec *t0)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) * 1e-9;
}

static void replay_refs_hold_the_file_until_released(void **state)
{
	char path[PATH_MAX];
	struct vr_config c;
	struct src_source s;
	const void *held[2];
	struct volrec_shim_region reg;
	struct timespec t0;
	uint32_t n;
	int status, rc;
	pid_t pid;

	(void)state;
	replay_open("leased.vrr", path, &c, &s);
	rc = src_ref_regions(&s, &reg, 1, &n);
	if (rc == -EINVAL || rc == -ENOLCK || rc == -ENOSYS) {
		/* a file system without leases: zero-copy is refused, saying why */
		fails_with(&s, rc, rc, "zero-copy needs a read lease");
		src_close(&s);
		skip();
	}
	assert_int_equal(rc, 0);
	assert_int_equal(src_start(&s), 0);
	assert_int_equal(src_acquire_ref(&s, &held[0], 0, NULL), 0);
	assert_int_equal(src_acquire_ref(&s, &held[1], 0, NULL), 0);

	/* another process truncates the file: the kernel holds it back while the lease is held */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(truncate(path, 10) == 0 ? 0 : 1);
	/* acquire_ref notices the lease break: a fault, no new reference */
	const void *p = NULL;
	do {
		rc = src_acquire_ref(&s, &p, 0, NULL);
		if (rc == 0) {
			assert_int_equal(src_release_ref(&s, p), 0);
			struct timespec d = {.tv_nsec = 5000000};
			nanosleep(&d, NULL);
		}
	} while (rc == 0 && since(&t0) < 20);
	fails_with(&s, rc, -ESTALE, "another process opened the file for writing or truncated it");
	/* the references held stay readable and intact, and the truncation waits for them */
	assert_int_equal(((const uint8_t *)held[0])[BB - 1], 1);
	assert_int_equal(((const uint8_t *)held[1])[0], 2);
	assert_int_equal(waitpid(pid, &status, WNOHANG), 0);
	assert_int_equal(src_release_ref(&s, held[0]), 0);
	assert_int_equal(src_release_ref(&s, held[1]), 0);
	/* the last release gave the lease up: the truncation goes on at once */
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_true(since(&t0) < 20); /* well before the kernel's lease-break-time */
	fails_with(&s, src_acquire_ref(&s, &p, 0, NULL), -ESTALE, "another process");
	src_close(&s);

	/* a file open for writing cannot be leased: zero-copy is refused, copying works */
	write_replay(path);
	int wfd = open(path, O_WRONLY | O_CLOEXEC);
	assert_true(wfd >= 0);
	srctest_open_ok(&c, SRC_UNPACED, &s);
	fails_with(&s, src_ref_regions(&s, NULL, 0, &n), -EAGAIN, "(the file is open for writing)");
	close(wfd);
	src_close(&s);
}

VR_TEST_GROUP(src_faults)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(wrappers_enforce_the_call_order),
	        cmocka_unit_test(a_null_handle_is_stopped_and_closed),
	        cmocka_unit_test(wrappers_keep_copy_and_reference_apart),
	        cmocka_unit_test(shim_returning_a_positive_value_is_an_error),
	        cmocka_unit_test(shim_texts_reach_callers_as_valid_utf8),
	        cmocka_unit_test(broken_shim_files_are_refused_before_loading),
	        cmocka_unit_test(a_shim_that_crashes_its_loader_is_reported_by_the_check),
	        cmocka_unit_test(replay_file_that_shrinks_is_a_fault_not_a_crash),
	        cmocka_unit_test(replay_file_modified_or_replaced_is_a_fault),
	        cmocka_unit_test(replay_refs_hold_the_file_until_released),
	};
	return cmocka_run_group_tests_name("src_faults", tests, setup, teardown);
}
