/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness: the replay reader on arbitrary file contents (held in a memfd), opened
 * with a fixed small configuration as a versioned file (format auto, looping or not) and as a
 * raw file; when it opens, a few B-scans are acquired, copied and by reference.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "config/config.h"
#include "sources/sim.h"
#include "sources/source.h"
#include "tests/replay/geometry.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int rofd = -1;
static char memfd_path[64];

/* The memfd as a replay file in the geometry of tests/replay/make_bad.py. */
static void small_cfg(struct vr_config *c, enum cfg_replay_format format, bool loop)
{
	test_replay_geometry(c);
	c->source.type = CFG_SOURCE_REPLAY;
	c->source.replay.format = format;
	c->source.replay.loop = loop;
	snprintf(c->source.replay.path, sizeof(c->source.replay.path), "%s", memfd_path);
}

static void fail(const char *what, const char *msg)
{
	fprintf(stderr, "fuzz_replay: %s: %s\n", what, msg);
	abort();
}

/* Acquire two epochs and a bit, as the daemon would: by copy, or by reference when the
 * source can (its regions first, then start). */
static void drive(struct src_source *s, const struct vr_config *c, bool by_ref)
{
	const uint32_t sx = c->geometry.stride[0], sy = c->geometry.stride[1];
	const uint32_t ny = c->geometry.bscans_per_volume;
	uint8_t buf[4 * 64 * 2];
	const void *ref[8];
	uint32_t nref = 0, nreg = 0;
	struct volrec_shim_region reg;
	int rc;

	if (by_ref) {
		if (!src_has_refs(s))
			return;
		rc = src_ref_regions(s, &reg, 1, &nreg);
		if (rc) {
			if (!src_strerror(s, rc)[0])
				fail("ref_regions", "failed without a message");
			return;
		}
		if (nreg != 1 || !reg.base || !reg.size)
			fail("ref_regions", "not one non-empty region");
	}
	rc = src_start(s);
	if (rc)
		fail("start", src_strerror(s, rc));
	for (uint64_t e = 0; e < 2; e++) {
		uint32_t ox, oy;
		vr_scan_offset(e, sx, sy, &ox, &oy);
		rc = src_set_scan_offset(s, e, ox, oy);
		if (rc)
			goto release; /* a file recorded at other offsets: a clean refusal */
		for (uint32_t b = 0; b < ny; b++) {
			struct volrec_shim_meta m;
			if (!by_ref) {
				rc = src_acquire(s, buf, sizeof(buf), 0, &m);
			} else {
				rc = src_acquire_ref(s, &ref[nref], 0, &m);
				if (rc == 0) {
					/* read the whole B-scan: ASan checks it lies in the map */
					volatile uint8_t sum = 0;
					for (size_t i = 0; i < sizeof(buf); i++)
						sum ^= ((const uint8_t *)ref[nref])[i];
					(void)sum;
					nref++;
				}
			}
			if (rc == -ENODATA)
				goto release; /* end of a file that does not loop */
			if (rc)
				fail("acquire", src_strerror(s, rc));
			if (m.epoch != e || m.bscan != b)
				fail("acquire", "meta names another epoch or B-scan");
		}
	}
release:
	for (uint32_t i = 0; i < nref; i++) {
		rc = src_release_ref(s, ref[i]);
		if (rc)
			fail("release_ref", src_strerror(s, rc));
	}
	(void)src_stop(s);
}

static void try_open(enum cfg_replay_format format, bool loop)
{
	struct vr_config c;
	struct src_source s;
	char err[CFG_ERR_MAX] = "";

	small_cfg(&c, format, loop);
	for (int by_ref = 0; by_ref < 2; by_ref++) {
		memset(&s, 0, sizeof(s));
		if (src_open(&c, SRC_UNPACED | (loop ? 0 : SRC_NO_LOOP), &s, err, sizeof(err)) ==
		    0) {
			drive(&s, &c, by_ref);
			src_close(&s);
		} else if (!err[0]) {
			fail("src_open", "failed without a message");
		}
	}
	cfg_free(&c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct src_replay_info info;
	char err[CFG_ERR_MAX];
	int memfd;

	/* a new file each time, held by a read-only descriptor only: a writable one open would
	 * refuse the read lease zero-copy needs */
	if (rofd >= 0)
		close(rofd);
	memfd = memfd_create("fuzz_replay", MFD_CLOEXEC);
	if (memfd < 0)
		fail("memfd_create", strerror(errno));
	if (size && pwrite(memfd, data, size, 0) != (ssize_t)size)
		fail("writing the memfd", strerror(errno));
	snprintf(memfd_path, sizeof(memfd_path), "/proc/self/fd/%d", memfd);
	rofd = open(memfd_path, O_RDONLY | O_CLOEXEC);
	if (rofd < 0)
		fail("reopening the memfd", strerror(errno));
	close(memfd);
	snprintf(memfd_path, sizeof(memfd_path), "/proc/self/fd/%d", rofd);

	if (src_replay_probe(memfd_path, &info, err, sizeof(err)) == 0 &&
	    (info.header_size > size || info.epochs == 0))
		fail("src_replay_probe", "accepted a header larger than the file");
	try_open(CFG_REPLAY_AUTO, true);
	try_open(CFG_REPLAY_AUTO, false);
	try_open(CFG_REPLAY_RAW, true);
	return 0;
}
