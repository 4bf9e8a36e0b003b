/* SPDX-License-Identifier: MIT */
/*
 * The raw recorder's write path alone (bench/raw_record_bench.py runs it; never a timed test):
 * FRAMES epochs of K x NX x NY u16 samples written into DIR through the recorder's own writer
 * (sources/recording.h: one aligned write of a whole frame each, O_DIRECT where the file system
 * allows it, else buffered with sync_file_range and posix_fadvise), the final fdatasync
 * included, and the memory-copy rate of the same frames (what the recorder's tap does on the
 * acquisition thread). JSON on stdout; the script measures dd on the same file system with the
 * same block size and flags beside it.
 *   raw_write_bench DIR K NX NY FRAMES
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <volrec/shim.h>

#include "base/base.h"
#include "sources/recording.h"

/* Bytes per second of copying n frames of frame bytes (the tap's memcpy), at least 0.5 s. */
static double copy_rate(uint8_t *a, uint8_t *b, size_t frame)
{
	double t0 = vr_mono_s(), dt;
	uint64_t n = 0;

	do {
		memcpy(b, a, frame);
		memcpy(a, b, frame);
		n += 2;
		dt = vr_mono_s() - t0;
	} while (dt < 0.5);
	return (double)n * (double)frame / dt;
}

int main(int argc, char **argv)
{
	struct src_replay_info info = {0};
	struct src_rec_writer *w;
	struct src_rec_writer_stats st;
	char path[4096], err[1024];
	uint8_t *buf, *other;
	uint64_t frames, frame;
	double t0, dt, copy;

	if (argc != 6) {
		fprintf(stderr, "usage: raw_write_bench DIR K NX NY FRAMES\n");
		return 2;
	}
	info.sample_type = VOLREC_SAMPLE_U16;
	info.samples_per_ascan = (uint32_t)strtoul(argv[2], NULL, 10);
	info.ascans_per_bscan = (uint32_t)strtoul(argv[3], NULL, 10);
	info.bscans_per_volume = (uint32_t)strtoul(argv[4], NULL, 10);
	info.stride_x = info.stride_y = 1;
	frames = strtoull(argv[5], NULL, 10);
	if (!info.samples_per_ascan || !info.ascans_per_bscan || !info.bscans_per_volume ||
	    !frames) {
		fprintf(stderr, "raw_write_bench: K, NX, NY and FRAMES must be > 0\n");
		return 2;
	}
	frame = src_rec_frame_size(2ull * info.samples_per_ascan * info.ascans_per_bscan *
	                           info.bscans_per_volume);
	if (posix_memalign((void **)&buf, SRC_REPLAY_ALIGN, frame) ||
	    posix_memalign((void **)&other, SRC_REPLAY_ALIGN, frame)) {
		fprintf(stderr, "raw_write_bench: no memory for two frames of %llu bytes\n",
		        (unsigned long long)frame);
		return 1;
	}
	for (uint64_t i = 0; i < frame; i++) /* not zeros: no file system may shortcut them */
		buf[i] = (uint8_t)(i * 2654435761u >> 13);
	copy = copy_rate(buf, other, frame);

	snprintf(path, sizeof(path), "%s/raw-write-bench-%d.vrr", argv[1], (int)getpid());
	t0 = vr_mono_s();
	if (src_rec_writer_open(path, &info, "recording: raw\n", NULL, 0, &w, err, sizeof(err))) {
		fprintf(stderr, "raw_write_bench: %s\n", err);
		return 1;
	}
	for (uint64_t i = 0; i < frames; i++) {
		struct src_rec_frame f = {.epoch = i};

		if (src_rec_writer_frame(w, &f, buf, err, sizeof(err))) {
			fprintf(stderr, "raw_write_bench: %s\n", err);
			if (src_rec_writer_close(w, NULL, 0) < 0)
				fprintf(stderr, "raw_write_bench: closing %s failed too\n", path);
			unlink(path);
			return 1;
		}
	}
	src_rec_writer_stats(w, &st);
	if (src_rec_writer_close(w, err, sizeof(err))) {
		fprintf(stderr, "raw_write_bench: %s\n", err);
		unlink(path);
		return 1;
	}
	dt = vr_mono_s() - t0;
	unlink(path);
	printf("{\"frame_bytes\": %llu, \"frames\": %llu, \"bytes\": %llu, \"seconds\": %.6f, "
	       "\"writer_MBps\": %.3f, \"direct\": %s, \"memcpy_MBps\": %.3f}\n",
	       (unsigned long long)frame, (unsigned long long)frames, (unsigned long long)st.bytes,
	       dt, (double)st.bytes / dt / 1e6, st.direct ? "true" : "false", copy / 1e6);
	free(buf);
	free(other);
	return 0;
}
