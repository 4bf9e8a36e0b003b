/* SPDX-License-Identifier: MIT */
/*
 * The export benchmark (bench/export_bench.py runs it; never a timed test): exports one processed
 * recording into each format through the export engine and measures, in the same run, the two
 * limits they are held to: the file system's sequential write rate (large writes, then
 * fdatasync) for the uncompressed outputs, and blosc/zstd's own single-thread rate, times the
 * threads used, for OME-Zarr: on the very chunks the export compressed (level 0 and the pyramid,
 * at the writer's levels and block size), read back from the store. JSON on stdout.
 *   export_bench IN.h5 DIR [THREADS [gz]]   (gz: .nii.gz too: zlib, one thread, slow)
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
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

/*
 * blosc/zstd on one thread over the very chunks the OME-Zarr export compressed: each chunk file
 * of the store read back and decompressed (not timed), then compressed again as the writer did
 * (its level's clevel, FMT_ZARR_BLOCKSIZE, the chunk's whole size, edge padding included), timed
 * by the wall clock and by the thread's CPU time. Index 0: level 0 (the volumes), 1: the
 * pyramid's levels. Time points from 0 on, every level of each, until 2 CPU-seconds of
 * compression.
 */
struct blosc_store {
	double in[2], cpu[2], wall[2], out[2];
	uint64_t chunks[2];
	uint64_t volumes; /* time points measured */
	int failed;
};

static struct blosc_store *store_acc;
static unsigned store_level;

static int store_chunk(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	struct blosc_store *b = store_acc;
	const int i = store_level ? 1 : 0;
	size_t nbytes = 0, cbytes = 0, blocksize = 0;
	uint8_t *packed, *raw = NULL, *out = NULL;
	FILE *f;

	(void)ftw;
	if (type != FTW_F)
		return 0;
	packed = malloc((size_t)st->st_size);
	f = fopen(path, "rb");
	if (!packed || !f || fread(packed, 1, (size_t)st->st_size, f) != (size_t)st->st_size)
		goto fail;
	blosc_cbuffer_sizes(packed, &nbytes, &cbytes, &blocksize);
	raw = malloc(nbytes);
	out = malloc(nbytes + BLOSC_MAX_OVERHEAD);
	if (!raw || !out || cbytes != (size_t)st->st_size ||
	    blosc_decompress_ctx(packed, raw, nbytes, 1) != (int)nbytes)
		goto fail;
	double t0 = vr_mono_s(), c0 = thread_cpu_s();
	int k = blosc_compress_ctx(store_level ? FMT_ZARR_CLEVEL_PYRAMID : FMT_ZARR_CLEVEL,
	                           BLOSC_SHUFFLE, 1, nbytes, raw, out, nbytes + BLOSC_MAX_OVERHEAD,
	                           "zstd", FMT_ZARR_BLOCKSIZE, 1);
	b->cpu[i] += thread_cpu_s() - c0;
	b->wall[i] += vr_mono_s() - t0;
	b->in[i] += (double)nbytes;
	b->out[i] += k > 0 ? (double)k : (double)nbytes;
	b->chunks[i]++;
	fclose(f);
	free(packed);
	free(raw);
	free(out);
	return 0;
fail:
	fprintf(stderr, "export_bench: %s: not a blosc chunk that reads back\n", path);
	if (f)
		fclose(f);
	free(packed);
	free(raw);
	free(out);
	b->failed = 1;
	return 1;
}

static int blosc_store_rate(const char *store, uint64_t nt, struct blosc_store *b)
{
	char dir[4200];
	struct stat st;

	memset(b, 0, sizeof(*b));
	store_acc = b;
	for (uint64_t t = 0; t < nt && b->cpu[0] + b->cpu[1] < 2.0 && !b->failed; t++) {
		for (store_level = 0;; store_level++) {
			snprintf(dir, sizeof(dir), "%s/%u", store, store_level);
			if (stat(dir, &st) < 0)
				break;
			snprintf(dir, sizeof(dir), "%s/%u/%llu", store, store_level,
			         (unsigned long long)t);
			if (nftw(dir, store_chunk, 16, FTW_PHYS) != 0) {
				b->failed = 1;
				break;
			}
		}
		b->volumes++;
	}
	return b->failed || b->cpu[0] <= 0 ? -1 : 0;
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
 * seconds, against limit bytes/s (0: none); OME-Zarr's against its compressor: zarr_json. */
static struct json_object *run_json(const char *format, bool compressed,
                                    const struct fmt_export_stats *st, double cpu, double limit)
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
	return j;
}

/* The OME-Zarr run's figures against blosc on its own chunks (bs, all_cpu and all_wall: its
 * input per CPU-second and per wall-second over every level), into j; b1: blosc on level 0's
 * chunks alone, the earlier figure. */
static void zarr_json(struct json_object *j, const struct blosc_store *bs,
                      const struct fmt_export_stats *st, double cpu, double all_cpu,
                      double all_wall, const struct blosc1 *b1)
{
	struct json_object *c = json_object_new_object();
	/* the compressor's input: level 0 and the pyramid, edge padding included,
	 * per byte of the export's input (the volumes) */
	double per_volume = (bs->in[0] + bs->in[1]) / (double)bs->volumes;
	double cin = per_volume * (double)st->volumes;
	double cin_per_in = cin / (double)st->bytes_in;

	json_object_object_add(c, "volumes_measured", json_object_new_int64((int64_t)bs->volumes));
	json_object_object_add(c, "chunks_measured",
	                       json_object_new_int64((int64_t)(bs->chunks[0] + bs->chunks[1])));
	json_object_object_add(c, "level0_MB_per_cpu_s",
	                       json_object_new_double(bs->in[0] / bs->cpu[0] / 1e6));
	json_object_object_add(c, "level0_MBps",
	                       json_object_new_double(bs->in[0] / bs->wall[0] / 1e6));
	if (bs->cpu[1] > 0) {
		json_object_object_add(c, "pyramid_MB_per_cpu_s",
		                       json_object_new_double(bs->in[1] / bs->cpu[1] / 1e6));
		json_object_object_add(c, "pyramid_MBps",
		                       json_object_new_double(bs->in[1] / bs->wall[1] / 1e6));
	}
	json_object_object_add(c, "all_MB_per_cpu_s", json_object_new_double(all_cpu / 1e6));
	json_object_object_add(c, "all_MBps", json_object_new_double(all_wall / 1e6));
	json_object_object_add(
	        c, "compression_ratio",
	        json_object_new_double((bs->in[0] + bs->in[1]) / (bs->out[0] + bs->out[1])));
	json_object_object_add(c, "input_per_export_input", json_object_new_double(cin_per_in));
	/* what compressing this export's chunks costs on one thread alone */
	json_object_object_add(c, "cpu_seconds_for_export", json_object_new_double(cin / all_cpu));
	json_object_object_add(j, "compressor", c);
	/* the share of the export's CPU time (every thread) that is the compressor */
	json_object_object_add(j, "compressor_share_of_cpu",
	                       json_object_new_double(cin / all_cpu / cpu));
	/* input per CPU-second of the export (every thread, the reader's
	 * included) over compressor input per CPU-second of blosc alone on the same
	 * chunks: the ratio the export reaches when each of its threads has a core,
	 * whatever the load */
	json_object_object_add(j, "ratio_per_cpu_second",
	                       json_object_new_double((double)st->bytes_in / cpu / all_cpu));
	/* its ceiling, were the compressor all the export did: the pyramid's and
	 * the padding's extra input */
	json_object_object_add(j, "ratio_per_cpu_second_ceiling",
	                       json_object_new_double(1 / cin_per_in));
	/* the earlier figure (up to 2026-12-07): over level 0's whole chunks alone */
	json_object_object_add(j, "ratio_per_cpu_second_level0_blosc",
	                       json_object_new_double((double)st->bytes_in / cpu / b1->cpu));
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

		struct blosc_store bs = {0};
		double all_cpu = 0, all_wall = 0;

		if (i == 2) {
			/* level 0's chunks of the first volumes again, after: the load moves */
			if (blosc_rate(argv[1], &b2) == 0)
				add_blosc(o, "_after", &b2);
			/* the limit: blosc over the chunks this export compressed, every level */
			if (blosc_store_rate(path, info.nt, &bs) < 0) {
				fprintf(stderr, "export_bench: cannot measure blosc on %s\n", path);
				return 1;
			}
			all_cpu = (bs.in[0] + bs.in[1]) / (bs.cpu[0] + bs.cpu[1]);
			all_wall = (bs.in[0] + bs.in[1]) / (bs.wall[0] + bs.wall[1]);
		}
		/* .nii.gz: zlib through libznz, one thread: no ratio to a limit. OME-Zarr: blosc's
		 * rate on one thread over the export's own chunks (compressor input per second),
		 * times the threads */
		limit = i == 2 ? all_wall * threads : i == 3 ? 0 : disk;
		j = run_json(suffix[i], compressed, &st, cpu, limit);
		if (i == 2)
			zarr_json(j, &bs, &st, cpu, all_cpu, all_wall, &b1);
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
