/* SPDX-License-Identifier: MIT */
/*
 * src_dump: open the source a configuration names (src_open, unpaced, no loop) and write the
 * raw bytes of its first N B-scans to a file, so integration tests can compare sources
 * (synth, replay, shim) bit for bit. usage: src_dump -c CONFIG -n BSCANS -o OUT
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "sources/source.h"

int main(int argc, char **argv)
{
	const char *cfg_path = NULL, *out = NULL;
	struct vr_config cfg;
	struct src_source src;
	char err[CFG_ERR_MAX];
	long n = 0;
	int c, rc, ret = 1;
	FILE *f = NULL;
	void *buf = NULL;

	while ((c = getopt(argc, argv, "c:n:o:")) != -1) {
		if (c == 'c')
			cfg_path = optarg;
		else if (c == 'n')
			n = strtol(optarg, NULL, 10);
		else if (c == 'o')
			out = optarg;
		else
			return 2;
	}
	if (!cfg_path || !out || n < 1) {
		fprintf(stderr, "usage: src_dump -c CONFIG -n BSCANS -o OUT\n");
		return 2;
	}
	rc = cfg_load(&cfg, cfg_path, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "src_dump: %s\n", err);
		return 2;
	}
	rc = src_open(&cfg, SRC_UNPACED | SRC_NO_LOOP, &src, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "src_dump: %s\n", err);
		cfg_free(&cfg);
		return 2;
	}
	size_t bb = cfg_bscan_bytes(&cfg);
	buf = malloc(bb);
	f = fopen(out, "wb");
	if (!buf || !f) {
		fprintf(stderr, "src_dump: %s: %s\n", out, strerror(errno));
		goto out;
	}
	rc = src_start(&src);
	const uint32_t M = cfg.geometry.repeats, nraw = cfg_raw_bscans(&cfg);
	for (long i = 0; !rc && i < n; i++) {
		struct volrec_shim_meta m;
		rc = src_acquire(&src, buf, bb, 10000, &m);
		/* raw B-scan i is repeat i % M of position (i % nraw) / M (docs/algorithms.md §5) */
		if (!rc && (m.epoch != src.first_epoch + (uint64_t)i / nraw ||
		            m.bscan != (uint32_t)(i % nraw) / M || m.repeat != (uint32_t)i % M)) {
			fprintf(stderr,
			        "src_dump: B-scan %ld: meta says epoch %llu B-scan %u repeat %u, "
			        "expected epoch %llu B-scan %u repeat %u\n",
			        i, (unsigned long long)m.epoch, m.bscan, m.repeat,
			        (unsigned long long)(src.first_epoch + (uint64_t)i / nraw),
			        (uint32_t)(i % nraw) / M, (uint32_t)i % M);
			goto out;
		}
		if (!rc && fwrite(buf, 1, bb, f) != bb)
			rc = -EIO;
	}
	if (rc) {
		fprintf(stderr, "src_dump: %s\n", src_strerror(&src, rc));
		goto out;
	}
	ret = 0;
out:
	if (f && fclose(f) != 0)
		ret = 1;
	free(buf);
	src_close(&src);
	cfg_free(&cfg);
	return ret;
}
