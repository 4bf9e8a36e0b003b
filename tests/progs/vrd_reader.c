/* SPDX-License-Identifier: MIT */
/*
 * A test reader for volrecd's integration tests: reads volumes of an instance through
 * libvolrec and writes each intact one to a file, following new sessions by itself.
 *
 *   vrd_reader INSTANCE RUN_DIR COUNT SECONDS OUTFILE
 *
 * OUTFILE gets, per volume, a 64-byte little-endian record header (session, sequence, epoch,
 * volume id, bytes, ny, nx, nz, flags) followed by the voxels. One line per volume on stdout.
 * Exit 0 when COUNT volumes were read within SECONDS, 1 otherwise.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <volrec/client.h>

struct record {
	uint64_t session, sequence, epoch, volume_id, bytes;
	uint32_t ny, nx, nz, flags;
	uint64_t reserved;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	struct volrec_client *c = NULL;
	struct volrec_client_stats st;
	unsigned long count, got = 0;
	double deadline;
	void *copy = NULL;
	FILE *out;
	int rc, status = 1;

	if (argc != 6) {
		fprintf(stderr, "usage: vrd_reader INSTANCE RUN_DIR COUNT SECONDS OUTFILE\n");
		return 2;
	}
	count = strtoul(argv[3], NULL, 10);
	deadline = now_s() + atof(argv[4]);
	out = fopen(argv[5], "wb");
	if (!out) {
		fprintf(stderr, "vrd_reader: %s: %s\n", argv[5], strerror(errno));
		return 2;
	}
	/* the daemon may still be starting: retry until it is there */
	while ((rc = volrec_client_open(argv[1], argv[2], &c)) < 0) {
		if (now_s() > deadline) {
			fprintf(stderr, "vrd_reader: cannot connect to %s: %s\n", argv[1],
			        volrec_strerror(rc));
			goto out;
		}
		usleep(20000);
	}
	fprintf(stdout, "connected session=%" PRIu64 "\n", volrec_client_session(c));
	fflush(stdout);
	while (got < count && now_s() < deadline) {
		struct volrec_view v;
		struct record r = {0};
		void *p;

		rc = volrec_client_next(c, 200, &v);
		if (rc == -ETIMEDOUT || rc == -EPROTO || rc == -EINTR || rc == -ENOENT)
			continue;
		if (rc < 0) {
			fprintf(stderr, "vrd_reader: next: %s (%s)\n", volrec_strerror(rc),
			        volrec_client_error(c));
			usleep(20000);
			continue;
		}
		p = realloc(copy, v.bytes);
		if (!p) {
			volrec_view_release(c, &v);
			goto out;
		}
		copy = p;
		memcpy(copy, v.data, v.bytes);
		if (volrec_view_release(c, &v) < 0) {
			fprintf(stdout, "torn session=%" PRIu64 " seq=%" PRIu64 "\n", v.session_id,
			        v.sequence);
			continue;
		}
		r.session = v.session_id;
		r.sequence = v.sequence;
		r.epoch = v.epoch;
		r.volume_id = v.volume_id;
		r.bytes = v.bytes;
		r.ny = v.ny;
		r.nx = v.nx;
		r.nz = v.nz;
		r.flags = v.flags;
		if (fwrite(&r, sizeof(r), 1, out) != 1 ||
		    fwrite(copy, 1, v.bytes, out) != v.bytes) {
			fprintf(stderr, "vrd_reader: %s: write failed\n", argv[5]);
			goto out;
		}
		fflush(out);
		fprintf(stdout,
		        "vol session=%" PRIu64 " seq=%" PRIu64 " epoch=%" PRIu64 " shape=%ux%ux%u "
		        "flags=%u missed=%" PRIu64 "\n",
		        v.session_id, v.sequence, v.epoch, v.ny, v.nx, v.nz, v.flags, v.missed);
		fflush(stdout);
		got++;
	}
	volrec_client_stats(c, &st);
	fprintf(stdout,
	        "done received=%" PRIu64 " missed=%" PRIu64 " torn=%" PRIu64 " remaps=%" PRIu64
	        "\n",
	        st.received, st.missed, st.torn, st.remaps);
	status = got == count ? 0 : 1;
out:
	volrec_client_close(c);
	free(copy);
	fclose(out);
	return status;
}
