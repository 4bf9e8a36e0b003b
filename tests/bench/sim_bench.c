/* SPDX-License-Identifier: MIT */
/*
 * sim_bench: how fast the synthetic scanner generates spectra on one core, in A-scans per
 * second, at a given geometry (default 60 x 60 x 2048 u16, the daemon's synth source).
 * usage: sim_bench [K [nx [ny [seconds]]]]
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "base/base.h"
#include "sources/sim.h"

int main(int argc, char **argv)
{
	const struct sim_params p = {
	        .samples_per_ascan = argc > 1 ? (uint32_t)atoi(argv[1]) : 2048,
	        .ascans_per_bscan = argc > 2 ? (uint32_t)atoi(argv[2]) : 60,
	        .bscans_per_volume = argc > 3 ? (uint32_t)atoi(argv[3]) : 60,
	        .stride_x = 5,
	        .stride_y = 5,
	        .sample_type = VOLREC_SAMPLE_U16,
	        .rate = 25,
	        .seed = 1,
	        .phantom = "retina",
	        .deg_per_s = 0.25,
	        .snr_db = 40,
	};
	struct sim *s;
	char err[256];
	double secs = argc > 4 ? atof(argv[4]) : 2.0;
	if (sim_create(&p, &s, err, sizeof(err))) {
		fprintf(stderr, "sim_bench: %s\n", err);
		return 1;
	}
	size_t n = sim_bscan_bytes(s);
	void *buf = malloc(n);
	if (!buf) {
		sim_destroy(s);
		return 1;
	}
	uint64_t ascans = 0, e = 0;
	double t0 = vr_mono_s(), c0 = vr_now_ns(CLOCK_PROCESS_CPUTIME_ID) * 1e-9, t;
	do {
		uint32_t ox, oy;
		vr_scan_offset(e, p.stride_x, p.stride_y, &ox, &oy);
		for (uint32_t b = 0; b < p.bscans_per_volume; b++) {
			if (sim_bscan(s, e, ox, oy, b, buf, n)) {
				fprintf(stderr, "sim_bench: sim_bscan failed\n");
				return 1;
			}
			ascans += p.ascans_per_bscan;
		}
		e++;
		t = vr_mono_s() - t0;
	} while (t < secs);
	double cpu = vr_now_ns(CLOCK_PROCESS_CPUTIME_ID) * 1e-9 - c0;
	printf("sim_bench: K %u, %u x %u A-scans per epoch, one thread: %.0f A-scans/s of CPU "
	       "time (%.2f epochs/s), %.0f A-scans/s of wall time\n",
	       p.samples_per_ascan, p.ascans_per_bscan, p.bscans_per_volume, ascans / cpu, e / cpu,
	       ascans / t);
	free(buf);
	sim_destroy(s);
	return 0;
}
