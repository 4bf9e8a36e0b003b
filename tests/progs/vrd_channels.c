/* SPDX-License-Identifier: MIT */
/*
 * A test reader of the channels of volumes (protocol 2.1) through libvolrec, for
 * tests/integration/test_daemon_channels.py:
 *
 *   vrd_channels INSTANCE RUN_DIR COUNT SECONDS OUTFILE
 *
 * Reads COUNT intact volumes; OUTFILE gets, per volume, every channel's voxels one after
 * another ([c][Y][X][Z]); stdout one JSON line per volume: its epoch, shape and each channel's
 * description (kind, units, value range, velocities, method, period, mask, window, flags).
 * Exit 0 when COUNT volumes were read within SECONDS, 1 otherwise.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <volrec/client.h>
#include <volrec/protocol.h>

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A double as JSON: null when not finite. */
static void jnum(FILE *f, double v)
{
	if (isfinite(v))
		fprintf(f, "%.17g", v);
	else
		fputs("null", f);
}

int main(int argc, char **argv)
{
	struct volrec_client *c = NULL;
	struct volrec_channel ch[VOLREC_CHANNELS_MAX];
	unsigned long count, got = 0;
	uint8_t *copy = NULL;
	double deadline;
	FILE *out;
	int rc, status = 1;

	if (argc != 6) {
		fprintf(stderr, "usage: vrd_channels INSTANCE RUN_DIR COUNT SECONDS OUTFILE\n");
		return 2;
	}
	count = strtoul(argv[3], NULL, 10);
	deadline = now_s() + atof(argv[4]);
	out = fopen(argv[5], "wb");
	if (!out) {
		fprintf(stderr, "vrd_channels: %s: %s\n", argv[5], strerror(errno));
		return 2;
	}
	while ((rc = volrec_client_open(argv[1], argv[2], &c)) < 0) {
		if (now_s() > deadline) {
			fprintf(stderr, "vrd_channels: cannot connect to %s: %s\n", argv[1],
			        volrec_strerror(rc));
			goto out;
		}
		usleep(20000);
	}
	while (got < count && now_s() < deadline) {
		struct volrec_view v;
		uint32_t n = 0;
		uint8_t *p;
		int found;

		rc = volrec_client_next(c, 200, &v);
		if (rc == -ETIMEDOUT || rc == -EPROTO || rc == -EINTR || rc == -ENOENT)
			continue;
		if (rc < 0) {
			fprintf(stderr, "vrd_channels: next: %s (%s)\n", volrec_strerror(rc),
			        volrec_client_error(c));
			goto out;
		}
		if (volrec_view_channels(c, &v, &n) < 0 || n < 1 || n > VOLREC_CHANNELS_MAX) {
			fprintf(stderr, "vrd_channels: %u channels\n", n);
			goto out;
		}
		p = realloc(copy, n * v.bytes);
		if (!p) {
			volrec_view_release(c, &v);
			goto out;
		}
		copy = p;
		for (uint32_t i = 0; i < n; i++) {
			if (volrec_view_channel(c, &v, i, &ch[i]) < 0 || !ch[i].data ||
			    ch[i].bytes != v.bytes) {
				fprintf(stderr, "vrd_channels: channel %u: %s\n", i,
				        volrec_client_error(c));
				goto out;
			}
			memcpy(copy + i * v.bytes, ch[i].data, v.bytes);
		}
		/* channel 0 is the view's own data; a kind is found where it is */
		found = volrec_view_find_channel(c, &v, ch[n - 1].kind);
		if (ch[0].data != v.data || found != (int)(n - 1) ||
		    volrec_view_channel(c, &v, n, &ch[0]) != -EINVAL) {
			fprintf(stderr, "vrd_channels: channel lookup disagrees\n");
			goto out;
		}
		/* the pictures of every channel: the en-face maximum over the views' slab of its
		 * own voxels (docs/algorithms.md §4.1), the B-scan its row y0 */
		for (uint32_t i = 0; i < n; i++) {
			struct volrec_image mx, bs;

			if (volrec_view_channel_image(c, &v, i, VOLREC_IMAGE_ENFACE_MAX, &mx) < 0 ||
			    volrec_view_channel_image(c, &v, i, VOLREC_IMAGE_BSCAN, &bs) < 0 ||
			    volrec_view_channel_image(c, &v, i, VOLREC_IMAGE_RENDER, &bs) !=
			            -EINVAL) {
				fprintf(stderr, "vrd_channels: channel %u pictures: %s\n", i,
				        volrec_client_error(c));
				goto out;
			}
			volrec_view_channel_image(c, &v, i, VOLREC_IMAGE_BSCAN, &bs);
			for (uint32_t y = 0; y < v.ny; y++)
				for (uint32_t x = 0; x < v.nx; x++) {
					const uint8_t *a =
					        ch[i].data + ((size_t)y * v.nx + x) * v.nz;
					uint8_t m = 0;

					for (uint32_t z = mx.slab[0]; z < mx.slab[1]; z++)
						m = a[z] > m ? a[z] : m;
					if (mx.data[(size_t)y * v.nx + x] != m) {
						fprintf(stderr,
						        "vrd_channels: channel %u en-face max "
						        "differs at y %u x %u\n",
						        i, y, x);
						goto out;
					}
				}
			if (memcmp(bs.data, ch[i].data + (size_t)bs.position[0] * v.nx * v.nz,
			           (size_t)v.nx * v.nz)) {
				fprintf(stderr, "vrd_channels: channel %u B-scan differs\n", i);
				goto out;
			}
		}
		if (volrec_view_release(c, &v) < 0)
			continue; /* torn: not a volume read */
		if (fwrite(copy, 1, n * v.bytes, out) != n * v.bytes || fflush(out)) {
			fprintf(stderr, "vrd_channels: %s: write failed\n", argv[5]);
			goto out;
		}
		printf("{\"epoch\": %" PRIu64 ", \"shape\": [%u, %u, %u], \"channels\": [", v.epoch,
		       v.ny, v.nx, v.nz);
		for (uint32_t i = 0; i < n; i++) {
			printf("%s{\"kind\": %u, \"method\": %u, \"units\": \"%s\", \"range\": [",
			       i ? ", " : "", ch[i].kind, ch[i].method, ch[i].units);
			jnum(stdout, ch[i].value_lo);
			fputs(", ", stdout);
			jnum(stdout, ch[i].value_hi);
			fputs("], \"velocity_mm_s\": [", stdout);
			jnum(stdout, ch[i].velocity_mm_s[0]);
			fputs(", ", stdout);
			jnum(stdout, ch[i].velocity_mm_s[1]);
			fputs("], \"period_us\": ", stdout);
			jnum(stdout, ch[i].period_us);
			fputs(", \"mask_db\": ", stdout);
			jnum(stdout, ch[i].mask_db);
			printf(", \"half_window\": %u, \"flags\": %u}", ch[i].half_window,
			       ch[i].flags);
		}
		printf("]}\n");
		fflush(stdout);
		got++;
	}
	status = got == count ? 0 : 1;
out:
	volrec_client_close(c);
	free(copy);
	fclose(out);
	return status;
}
