/* SPDX-License-Identifier: MIT */
/*
 * The export benchmark (bench/export_bench.py runs it; never a timed test): exports one processed
 * recording into each format through the export engine and measures, in the same run, the two
 * limits they are held to: the file system's sequential write rate (large writes, then
 * fdatasync) for the uncompressed outputs, and blosc/zstd's own single-thread rate on the same
 * volumes' chunks, times the threads used, for OME-Zarr. JSON on stdout.
 *   export_bench IN.h5 DIR [THREADS [gz]]   (gz: .nii.gz too: zlib, one thread, slow)
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <blosc.h>
#include <json-c/json.h>

#include "formats/fmt.h"

/* Bytes per second of writing n bytes to path in 8 MiB writes, fdatasync included. */
static double disk_rate(const char *path, uint64_t n)
{
	const size_t blk = 8u << 20;
	char *buf = malloc(blk);
	double t0, dt;
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	if (fd < 0 || !buf) {
		free(buf);
		return -1;
	}
	for (size_t i = 0; i < blk; i++)
		buf[i] = (char)(i * 2654435761u >> 13);
	t0 = vr_mono_s();
	for (uint64_t done = 0; done < n; done += blk)
		if (fmt_write_all(fd, buf, blk) < 0)
			break;
	fdatasync(fd);
	dt = vr_mono_s() - t0;
	close(fd);
	unlink(path);
	free(buf);
	return (double)n / dt;
}

/* CPU seconds of the calling thread. */
static double thread_cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* What one thread of blosc/zstd does alone: input bytes per second of wall time and per
 * second of its own CPU time, and the compression ratio. */
struct blosc1 {
	double wall, cpu, ratio;
};

/* blosc/zstd on one thread as the OME-Zarr writer runs it (its level, block size and level-0
 * chunk, fmt.h) over the whole chunks of the first volumes of the recording (at least 1 s of
 * work). */
static int blosc_rate(const char *in, struct blosc1 *b)
{
	struct fmt_h5in *r;
	struct fmt_info info;
	char err[512];
	uint32_t C[3];
	uint64_t raw = 0, packed = 0;
	double busy = 0, cpu = 0;

	if (fmt_h5in_open(in, &r, &info, err, sizeof(err)) < 0)
		return -1;
	fmt_zarr_chunk(info.shape, NULL, C);                   /* as the writer makes them */
	size_t vb = fmt_channel_bytes(&info) * fmt_nch(&info); /* every channel; the first timed */
	size_t cb = (size_t)C[0] * C[1] * C[2];
	uint8_t *vol = malloc(vb), *chunk = malloc(cb), *out = malloc(cb + BLOSC_MAX_OVERHEAD);

	for (uint64_t t = 0; t < info.nt && busy < 1.0 && vol && chunk && out; t++) {
		if (fmt_h5in_read(r, t, vol, err, sizeof(err)) < 0)
			break;
		for (uint32_t y0 = 0; y0 + C[0] <= info.shape[0]; y0 += C[0])
			for (uint32_t x0 = 0; x0 + C[1] <= info.shape[1]; x0 += C[1])
				for (uint32_t z0 = 0; z0 + C[2] <= info.shape[2]; z0 += C[2]) {
					for (uint32_t y = 0; y < C[0]; y++)
						for (uint32_t x = 0; x < C[1]; x++)
							memcpy(chunk + ((size_t)y * C[1] + x) *
							                       C[2],
							       vol + (((size_t)(y0 + y) *
							                       info.shape[1] +
							               x0 + x) *
							                      info.shape[2] +
							              z0),
							       C[2]);
					double t0 = vr_mono_s(), c0 = thread_cpu_s();
					int k = blosc_compress_ctx(FMT_ZARR_CLEVEL, BLOSC_SHUFFLE,
					                           1, cb, chunk, out,
					                           cb + BLOSC_MAX_OVERHEAD, "zstd",
					                           FMT_ZARR_BLOCKSIZE, 1);
					cpu += thread_cpu_s() - c0;
					busy += vr_mono_s() - t0;
					raw += cb;
					packed += k > 0 ? (uint64_t)k : cb;
				}
	}
	free(vol);
	free(chunk);
	free(out);
	fmt_h5in_close(r);
	b->ratio = packed ? (double)raw / (double)packed : 0;
	b->wall = busy > 0 ? (double)raw / busy : -1;
	b->cpu = cpu > 0 ? (double)raw / cpu : -1;
	return busy > 0 && cpu > 0 ? 0 : -1;
}

static void add_blosc(struct json_object *o, const char *when, const struct blosc1 *b)
{
	char k[96];

	snprintf(k, sizeof(k), "blosc_zstd%d_1thread_MBps%s", FMT_ZARR_CLEVEL, when);
	json_object_object_add(o, k, json_object_new_double(b->wall / 1e6));
	snprintf(k, sizeof(k), "blosc_zstd%d_1thread_MB_per_cpu_s%s", FMT_ZARR_CLEVEL, when);
	json_object_object_add(o, k, json_object_new_double(b->cpu / 1e6));
}

/* CPU seconds (user + system) this process has used so far, every thread included. */
static double cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* Bytes the OME-Zarr writer compresses per byte of input: level 0 and the pyramid's levels
 * (halved, rounding up, down to a largest side of FMT_ZARR_PYRAMID_SIDE, as fmt_zarr.c). */
static double pyramid_factor(const uint32_t *shape)
{
	uint64_t s[3] = {shape[0], shape[1], shape[2]}, all = 0;
	double l0 = (double)(s[0] * s[1] * s[2]);

	for (;;) {
		all += s[0] * s[1] * s[2];
		if (s[0] <= FMT_ZARR_PYRAMID_SIDE && s[1] <= FMT_ZARR_PYRAMID_SIDE &&
		    s[2] <= FMT_ZARR_PYRAMID_SIDE)
			break;
		for (int i = 0; i < 3; i++)
			s[i] = (s[i] + 1) / 2;
	}
	return (double)all / l0;
}

/* What is exported: its volumes, shape, bytes (bytes), channels and pyramid factor, into o. */
static void input_json(struct json_object *o, const struct fmt_info *info, uint64_t bytes)
{
	json_object_object_add(o, "volumes", json_object_new_int64((int64_t)info->nt));
	json_object_object_add(o, "shape", json_object_new_string(""));
	char shape[64];
	snprintf(shape, sizeof(shape), "%ux%ux%u", info->shape[0], info->shape[1], info->shape[2]);
	json_object_object_add(o, "shape", json_object_new_string(shape));
	json_object_object_add(o, "input_bytes", json_object_new_int64((int64_t)bytes));
	{ /* the channels exported (each volume is one of each); blosc is measured on the first */
		struct json_object *chs = json_object_new_array();

		for (uint32_t c = 0; c < fmt_nch(info); c++)
			json_object_array_add(chs, json_object_new_string(info->ch[c].name));
		json_object_object_add(o, "channels", chs);
	}
	json_object_object_add(o, "zarr_pyramid_factor",
	                       json_object_new_double(pyramid_factor(info->shape)));
}

/* The figures of one export to format (compressed or not), of statistics st and cpu CPU
 * seconds, against limit bytes/s (0: none) and, with b (NULL: none), against blosc's input per
 * CPU second. */
static struct json_object *run_json(const char *format, bool compressed,
                                    const struct fmt_export_stats *st, double cpu, double limit,
                                    const struct blosc1 *b)
{
	struct json_object *j = json_object_new_object();
	const double rate = (double)st->bytes_in / st->seconds;

	json_object_object_add(j, "format", json_object_new_string(format));
	json_object_object_add(j, "compressed", json_object_new_boolean(compressed));
	json_object_object_add(j, "seconds", json_object_new_double(st->seconds));
	json_object_object_add(j, "read_seconds", json_object_new_double(st->read_s));
	/* CPU time over wall time: the cores the export got (a loaded machine gives less) */
	json_object_object_add(j, "cpu_seconds", json_object_new_double(cpu));
	/* the cores it got: threads when the machine is its own */
	json_object_object_add(j, "cores_used", json_object_new_double(cpu / st->seconds));
	json_object_object_add(j, "volumes_per_s",
	                       json_object_new_double((double)st->volumes / st->seconds));
	json_object_object_add(j, "input_MBps", json_object_new_double(rate / 1e6));
	json_object_object_add(j, "written_MB",
	                       json_object_new_double((double)st->bytes_out / 1e6));
	if (limit > 0) {
		json_object_object_add(j, "limit_MBps", json_object_new_double(limit / 1e6));
		json_object_object_add(j, "ratio_to_limit", json_object_new_double(rate / limit));
	}
	if (b) {
		/* input per CPU-second of the export (every thread, the reader's
		 * included) over blosc's per CPU-second of its own: the ratio the export
		 * reaches when each of its threads has a core, whatever the load */
		json_object_object_add(j, "ratio_per_cpu_second",
		                       json_object_new_double((double)st->bytes_in / cpu / b->cpu));
	}
	return j;
}

int main(int argc, char **argv)
{
	static const char *const suffix[] = {".nii", ".ome.tif", ".zarr", ".nii.gz"};
	struct json_object *o = json_object_new_object(), *runs = json_object_new_array();
	struct fmt_h5in *r;
	struct fmt_info info;
	char err[1024], path[4096];
	unsigned threads;
	double disk;
	struct blosc1 b1 = {0}, b2 = {0};

	if (argc < 3) {
		fprintf(stderr, "usage: export_bench IN.h5 DIR [THREADS]\n");
		return 2;
	}
	threads = argc > 3 ? (unsigned)atoi(argv[3]) : (unsigned)sysconf(_SC_NPROCESSORS_ONLN);
	if (fmt_h5in_open(argv[1], &r, &info, err, sizeof(err)) < 0) {
		fprintf(stderr, "export_bench: %s\n", err);
		return 1;
	}
	uint64_t bytes = info.nt * fmt_nch(&info) * fmt_channel_bytes(&info);
	input_json(o, &info, bytes);
	fmt_h5in_close(r);

	snprintf(path, sizeof(path), "%s/disk-rate.tmp", argv[2]);
	disk = disk_rate(path, bytes);
	if (blosc_rate(argv[1], &b1) < 0) {
		fprintf(stderr, "export_bench: cannot measure blosc on %s\n", argv[1]);
		return 1;
	}
	json_object_object_add(o, "disk_write_MBps", json_object_new_double(disk / 1e6));
	add_blosc(o, "", &b1);
	json_object_object_add(o, "blosc_ratio", json_object_new_double(b1.ratio));
	json_object_object_add(o, "blosc_blocksize", json_object_new_int(FMT_ZARR_BLOCKSIZE));
	{
		uint32_t C[3];
		char cs[64];

		fmt_zarr_chunk(info.shape, NULL, C);
		snprintf(cs, sizeof(cs), "%ux%ux%u", C[0], C[1], C[2]);
		json_object_object_add(o, "zarr_chunk", json_object_new_string(cs));
	}
	json_object_object_add(o, "threads", json_object_new_int((int)threads));
	size_t nruns = argc > 4 && !strcmp(argv[4], "gz") ? 4 : 3;

	for (size_t i = 0; i < nruns; i++) {
		struct fmt_options opt = {.threads = threads, .replace = true};
		struct fmt_export_stats st = {0};
		struct json_object *j;
		double limit;
		bool compressed = i >= 2;

		snprintf(path, sizeof(path), "%s/bench%s", argv[2], suffix[i]);
		double c0 = cpu_s();

		if (fmt_export(argv[1], path, &opt, NULL, NULL, NULL, &st, err, sizeof(err)) < 0) {
			fprintf(stderr, "export_bench: %s\n", err);
			return 1;
		}
		double cpu = cpu_s() - c0;

		if (i == 2 &&
		    blosc_rate(argv[1], &b2) == 0) /* the limit again, after: the load moves */
			add_blosc(o, "_after", &b2);
		/* .nii.gz: zlib through libznz, one thread: no ratio to a limit. OME-Zarr: blosc's
		 * rate on one thread, the mean of before and after, times the threads */
		limit = i == 2   ? (b1.wall + (b2.wall > 0 ? b2.wall : b1.wall)) / 2 * threads
		        : i == 3 ? 0
		                 : disk;
		j = run_json(suffix[i], compressed, &st, cpu, limit, i == 2 ? &b1 : NULL);
		json_object_array_add(runs, j);
		/* the outputs go: the next run finds the disk as this one did */
		{
			char cmd[4200];
			snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s'/bench_*.nii*", path, argv[2]);
			if (system(cmd) != 0)
				fprintf(stderr, "export_bench: cannot remove %s\n", path);
		}
	}
	json_object_object_add(o, "runs", runs);
	printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY));
	json_object_put(o);
	return 0;
}
