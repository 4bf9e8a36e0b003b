/* SPDX-License-Identifier: MIT */
/*
 * OME-Zarr (NGFF 0.4) writer: a Zarr v2 directory store with one multiscale image [t][y][x][z]
 * ([t][c][y][x][z] with channels: structure, angio, doppler), a pyramid of 2x2x2 means (of
 * Doppler's phases, circular means) down to a largest side of FMT_ZARR_PYRAMID_SIDE, chunks
 * compressed with blosc (zstd or lz4; or written raw, codec none) by a pool of threads, and the
 * provenance in .zattrs (docs/formats.md).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <blosc.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#include <json-c/json.h>

#include "formats/fmt.h"

#define ZARR_LEVELS_MAX  16
#define ZARR_THREADS_MAX 64
#define ZARR_CLEVEL      FMT_ZARR_CLEVEL
/* blosc's level for level l of the pyramid */
#define ZARR_CLEVEL_OF(l) ((l) ? FMT_ZARR_CLEVEL_PYRAMID : FMT_ZARR_CLEVEL)

struct zarr_level {
	uint32_t shape[3]; /* [y][x][z] */
	uint32_t chunk[3];
	uint32_t nchunks[3];
	uint8_t *vol; /* this level of the current volume, [c][y][x][z] (level 0: the caller's) */
};

struct zarr {
	char *tmp; /* PATH.partial */
	unsigned nlevels, threads;
	enum fmt_codec codec;            /* never FMT_CODEC_DEFAULT */
	uint32_t nch;                    /* channels of a volume */
	bool caxis;                      /* the arrays have a channel axis c after t */
	bool circular[FMT_CHANNELS_MAX]; /* the channel holds phases (Doppler) */
	double cos8[256], sin8[256];     /* a phase's unit vector by its u8 value */
	struct zarr_level lv[ZARR_LEVELS_MAX];
	/* the current volume's work, shared by the threads */
	uint64_t t;
	unsigned level;           /* the level being downsampled */
	atomic_ulong next;        /* the next task */
	unsigned long ntasks;     /* chunks of every level */
	atomic_ullong written;    /* compressed bytes */
	pthread_mutex_t lock;     /* err */
	int rc;                   /* the first error */
	char err[PATH_MAX + 256]; /* its message */
	size_t scratch;           /* bytes of each thread's chunk and output buffers */
	/* each thread's chunk and output buffers (2 * scratch), kept from volume to volume */
	uint8_t *buf[ZARR_THREADS_MAX];
};

static uint32_t ceil_div(uint32_t a, uint32_t b)
{
	return (a + b - 1) / b;
}

static const char *const codec_names[] = {
        [FMT_CODEC_DEFAULT] = "zstd",
        [FMT_CODEC_ZSTD] = "zstd",
        [FMT_CODEC_LZ4] = "lz4",
        [FMT_CODEC_NONE] = "none",
};

int fmt_codec_parse(const char *name, enum fmt_codec *out, char *err, size_t errlen)
{
	for (int c = FMT_CODEC_ZSTD; c <= FMT_CODEC_NONE; c++)
		if (name && !strcmp(name, codec_names[c])) {
			*out = (enum fmt_codec)c;
			return 0;
		}
	return vr_err(err, errlen, -EINVAL, "--codec %s: unknown codec (%s)", name ? name : "",
	              FMT_CODEC_NAMES);
}

const char *fmt_codec_name(enum fmt_codec c)
{
	return (unsigned)c <= FMT_CODEC_NONE ? codec_names[c] : "?";
}

void fmt_zarr_chunk(const uint32_t shape[3], const uint32_t want[3], uint32_t chunk[3])
{
	static const uint32_t def[3] = {FMT_ZARR_CHUNK_Y, FMT_ZARR_CHUNK_X, FMT_ZARR_CHUNK_Z};

	for (int i = 0; i < 3; i++) {
		uint32_t c = want && want[i] ? want[i] : def[i];

		c = c < shape[i] ? c : shape[i];
		/* the default: as many chunks along the axis, of even sizes, so that the edge
		 * chunk is not mostly padding (300 in 128s: 3 of 100, not 128 + 128 + 44) */
		if (!(want && want[i]))
			c = ceil_div(shape[i], ceil_div(shape[i], c));
		chunk[i] = c;
	}
}

/* Keep the first error of the threads: "PATH: WHAT" (WHAT NULL: the errno's text). */
static void zarr_fail(struct zarr *z, int rc, const char *path, const char *what)
{
	pthread_mutex_lock(&z->lock);
	if (z->rc == 0) {
		z->rc = rc;
		snprintf(z->err, sizeof(z->err), "%s: %s", path, what ? what : strerror(-rc));
	}
	pthread_mutex_unlock(&z->lock);
}

/* ---- running a function over [0, n) on the pool ------------------------------------------- */

struct zarr_job {
	struct zarr *z;
	unsigned long n;
	void (*fn)(struct zarr *z, unsigned long i, uint8_t *scratch);
	atomic_uint slot; /* the next thread's buffers */
};

static void *zarr_worker(void *arg)
{
	struct zarr_job *job = arg;
	struct zarr *z = job->z;
	unsigned slot = atomic_fetch_add(&job->slot, 1);
	uint8_t *scratch = z->buf[slot];

	if (!scratch && !(scratch = z->buf[slot] = malloc(2 * z->scratch))) {
		zarr_fail(z, -ENOMEM, "chunk buffer", NULL);
		return NULL;
	}
	for (;;) {
		unsigned long i = atomic_fetch_add(&z->next, 1);

		if (i >= job->n || z->rc)
			break;
		job->fn(z, i, scratch);
	}
	return NULL;
}

static int zarr_run(struct zarr *z, unsigned long n,
                    void (*fn)(struct zarr *z, unsigned long i, uint8_t *scratch))
{
	pthread_t th[ZARR_THREADS_MAX];
	struct zarr_job job = {.z = z, .n = n, .fn = fn};
	unsigned k, started = 0, want = z->threads < n ? z->threads : (unsigned)n;

	atomic_store(&z->next, 0);
	atomic_store(&job.slot, 0);
	for (k = 1; k < want; k++) {
		if (pthread_create(&th[k], NULL, zarr_worker, &job) != 0)
			break;
		started++;
	}
	zarr_worker(&job);
	for (k = 1; k <= started; k++)
		pthread_join(th[k], NULL);
	return z->rc;
}

/* ---- the pyramid: level l+1 is the rounded mean of 2x2x2 voxels of level l ---------------- */

/*
 * The rounded means of 2x2x2 voxels of four columns of depth (p, p + SZ, p + row, p + row + SZ)
 * for the first n of out, 16 at a time (SSE2: the pairs of depth summed as 16-bit lanes); the
 * count done, the rest is the caller's.
 */
static uint32_t zarr_mean8_row(uint8_t *out, const uint8_t *p, size_t row, size_t SZ, uint32_t n)
{
	uint32_t i = 0;
#ifdef __SSE2__
	const __m128i lo = _mm_set1_epi16(0xff), four = _mm_set1_epi16(4);
	const uint8_t *q[4] = {p, p + SZ, p + row, p + row + SZ};

	for (; i + 16 <= n; i += 16) {
		__m128i s0 = four, s1 = four;

		for (int k = 0; k < 4; k++) {
			__m128i a = _mm_loadu_si128((const __m128i *)(q[k] + 2 * i));
			__m128i b = _mm_loadu_si128((const __m128i *)(q[k] + 2 * i + 16));

			s0 = _mm_add_epi16(
			        s0, _mm_add_epi16(_mm_and_si128(a, lo), _mm_srli_epi16(a, 8)));
			s1 = _mm_add_epi16(
			        s1, _mm_add_epi16(_mm_and_si128(b, lo), _mm_srli_epi16(b, 8)));
		}
		_mm_storeu_si128((__m128i *)(out + i),
		                 _mm_packus_epi16(_mm_srli_epi16(s0, 3), _mm_srli_epi16(s1, 3)));
	}
#else
	(void)out;
	(void)p;
	(void)row;
	(void)SZ;
	(void)n;
#endif
	return i;
}

/* The u8 of the circular mean of the phases of n voxels at p[off[0..n)] (u8 q is the phase
 * 2π q / 255 − π): the angle of the sum of their unit vectors; 128 (a phase of 0, as Doppler
 * writes it) where they cancel. */
static uint8_t zarr_circular_mean(const struct zarr *z, const uint8_t *const *q, unsigned n)
{
	const double pi = 3.14159265358979323846;
	double c = 0, s = 0;
	unsigned same = 1;

	while (same < n && *q[same] == *q[0]) /* most of a volume: no flow, 128 */
		same++;
	if (same == n) /* the mean of one phase is that phase (and u8 back the same u8) */
		return *q[0];
	for (unsigned i = 0; i < n; i++) {
		c += z->cos8[*q[i]];
		s += z->sin8[*q[i]];
	}
	if (c * c + s * s < 1e-12)
		return 128;
	return (uint8_t)floor(255.0 * (atan2(s, c) + pi) / (2 * pi) + 0.5);
}

/* Plane y of level + 1 of Doppler's channel: the circular mean of 2x2x2 phases (fewer at the
 * edges). */
static void zarr_downsample_circular(struct zarr *z, const uint8_t *in, uint8_t *out, uint32_t y)
{
	const struct zarr_level *src = &z->lv[z->level], *dst = &z->lv[z->level + 1];
	const uint32_t SY = src->shape[0], SX = src->shape[1], SZ = src->shape[2];
	const uint32_t DX = dst->shape[1], DZ = dst->shape[2];

	for (uint32_t x = 0; x < DX; x++)
		for (uint32_t zz = 0; zz < DZ; zz++) {
			const uint8_t *q[8];
			unsigned n = 0;

			for (uint32_t dy = 0; dy < 2 && 2 * y + dy < SY; dy++)
				for (uint32_t dx = 0; dx < 2 && 2 * x + dx < SX; dx++)
					for (uint32_t d = 0; d < 2 && 2 * zz + d < SZ; d++)
						q[n++] = in +
						         ((size_t)(2 * y + dy) * SX + 2 * x + dx) *
						                 SZ +
						         2 * zz + d;
			out[(size_t)x * DZ + zz] = zarr_circular_mean(z, q, n);
		}
}

/* Task i: plane i % DY of channel i / DY of level + 1. */
static void zarr_downsample_plane(struct zarr *z, unsigned long i, uint8_t *scratch)
{
	const struct zarr_level *src = &z->lv[z->level], *dst = &z->lv[z->level + 1];
	const uint32_t SY = src->shape[0], SX = src->shape[1], SZ = src->shape[2];
	const uint32_t DY = dst->shape[0], DX = dst->shape[1], DZ = dst->shape[2];
	const uint32_t c = (uint32_t)(i / DY), y = (uint32_t)(i % DY);
	const uint8_t *in = src->vol + (size_t)c * SY * SX * SZ;
	uint8_t *out = dst->vol + (size_t)c * DY * DX * DZ + (size_t)y * DX * DZ;

	(void)scratch;
	if (z->circular[c]) {
		zarr_downsample_circular(z, in, out, y);
		return;
	}
	for (uint32_t x = 0; x < DX; x++) {
		uint32_t zz = 0;

		if (2 * y + 1 < SY && 2 * x + 1 < SX) /* 2x2 columns: 16 means at a time */
			zz = zarr_mean8_row(out + (size_t)x * DZ,
			                    in + ((size_t)(2 * y) * SX + 2 * x) * SZ, SX * SZ, SZ,
			                    SZ / 2);
		for (; zz < DZ; zz++) {
			unsigned sum = 0, n = 0;

			for (uint32_t dy = 0; dy < 2 && 2 * y + dy < SY; dy++)
				for (uint32_t dx = 0; dx < 2 && 2 * x + dx < SX; dx++) {
					const uint8_t *p =
					        in + ((size_t)(2 * y + dy) * SX + 2 * x + dx) * SZ +
					        2 * zz;
					sum += p[0];
					n++;
					if (2 * zz + 1 < SZ) {
						sum += p[1];
						n++;
					}
				}
			out[(size_t)x * DZ + zz] = (uint8_t)((sum + n / 2) / n);
		}
	}
}

/* ---- chunks ---------------------------------------------------------------------------------- */

static int zarr_mkdir(const char *path)
{
	if (mkdir(path, 0777) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

static int zarr_write_file(const char *path, const void *buf, size_t n)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	int rc;

	if (fd < 0)
		return -errno;
	rc = fmt_write_all(fd, buf, n);
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	return rc;
}

/* The folders of time point z->t under each level (made at open): t, (c,) cy and cx, made
 * once per volume before its chunks, so that each chunk is one open, write and close (EEXIST
 * is fine: an earlier attempt's, `volrec reprocess`). */
static int zarr_folders(struct zarr *z, char *err, size_t errlen)
{
	char path[PATH_MAX];
	int rc = 0;

	for (unsigned l = 0; rc == 0 && l < z->nlevels; l++) {
		const struct zarr_level *lv = &z->lv[l];
		int n = snprintf(path, sizeof(path), "%s/%u/%llu", z->tmp, l,
		                 (unsigned long long)z->t);

		rc = zarr_mkdir(path);
		for (uint32_t c = 0; rc == 0 && c < (z->caxis ? z->nch : 1); c++) {
			int m = n;

			if (z->caxis) {
				m += snprintf(path + n, sizeof(path) - (size_t)n, "/%u", c);
				rc = zarr_mkdir(path);
			}
			for (uint32_t cy = 0; rc == 0 && cy < lv->nchunks[0]; cy++) {
				int k = m + snprintf(path + m, sizeof(path) - (size_t)m, "/%u", cy);

				rc = zarr_mkdir(path);
				for (uint32_t cx = 0; rc == 0 && cx < lv->nchunks[1]; cx++) {
					snprintf(path + k, sizeof(path) - (size_t)k, "/%u", cx);
					rc = zarr_mkdir(path);
				}
			}
		}
	}
	return rc < 0 ? vr_err_errno(err, errlen, rc, "%s", path) : 0;
}

/*
 * The chunk at y0, x0, z0 of level lv's channel vol in buf ([CY][CX][CZ], zeros, the fill value,
 * past the edges); the chunk itself, where it lies in vol, when it is whole B-scans (x and z
 * whole, y inside).
 */
static const uint8_t *zarr_gather(const struct zarr_level *lv, const uint8_t *vol, uint32_t y0,
                                  uint32_t x0, uint32_t z0, uint8_t *buf)
{
	const uint32_t SY = lv->shape[0], SX = lv->shape[1], SZ = lv->shape[2];
	const uint32_t CY = lv->chunk[0], CX = lv->chunk[1], CZ = lv->chunk[2];
	const uint32_t ny = SY - y0 < CY ? SY - y0 : CY, nx = SX - x0 < CX ? SX - x0 : CX;
	const uint32_t nz = SZ - z0 < CZ ? SZ - z0 : CZ;

	if (CX == SX && CZ == SZ && ny == CY)
		return vol + (size_t)y0 * SX * SZ;
	if (ny < CY || nx < CX || nz < CZ)
		memset(buf, 0, (size_t)CY * CX * CZ);
	for (uint32_t y = 0; y < ny; y++) {
		const uint8_t *s = vol + ((size_t)(y0 + y) * SX + x0) * SZ + z0;
		uint8_t *d = buf + (size_t)y * CX * CZ;

		if (CZ == SZ) { /* whole columns of depth: the row of x is one run */
			memcpy(d, s, (size_t)nx * CZ);
			continue;
		}
		for (uint32_t x = 0; x < nx; x++, s += SZ, d += CZ) {
			/* the columns a few ahead are one stride apart: ask for them early */
			__builtin_prefetch(s + 8 * (size_t)SZ);
			__builtin_prefetch(s + 8 * (size_t)SZ + CZ - 1);
			memcpy(d, s, nz);
		}
	}
	return buf;
}

/* Task i: the chunk's level, channel and position, in level order. */
static void zarr_chunk(struct zarr *z, unsigned long i, uint8_t *scratch)
{
	const struct zarr_level *lv = z->lv;
	unsigned l = 0;
	unsigned long per;
	char path[PATH_MAX], cdir[16] = "";

	while ((per = (unsigned long)lv[l].nchunks[0] * lv[l].nchunks[1] * lv[l].nchunks[2] *
	              z->nch) <= i) {
		i -= per;
		l++;
	}
	lv += l;
	per /= z->nch;
	const uint32_t c = (uint32_t)(i / per);
	const uint8_t *vol = lv->vol + (size_t)c * lv->shape[0] * lv->shape[1] * lv->shape[2];

	i %= per;
	if (z->caxis)
		snprintf(cdir, sizeof(cdir), "/%u", c);
	uint32_t cz = (uint32_t)(i % lv->nchunks[2]);
	uint32_t cx = (uint32_t)(i / lv->nchunks[2] % lv->nchunks[1]);
	uint32_t cy = (uint32_t)(i / lv->nchunks[2] / lv->nchunks[1]);
	const size_t raw = (size_t)lv->chunk[0] * lv->chunk[1] * lv->chunk[2];
	uint8_t *packed = scratch + z->scratch;
	const uint8_t *out = packed;
	const uint8_t *src = zarr_gather(lv, vol, cy * lv->chunk[0], cx * lv->chunk[1],
	                                 cz * lv->chunk[2], scratch);
	int k;

	if (z->codec == FMT_CODEC_NONE) { /* the chunk itself, as Zarr's compressor null has it */
		out = src;
		k = (int)raw;
	} else {
		k = blosc_compress_ctx(ZARR_CLEVEL_OF(l), BLOSC_SHUFFLE, 1, raw, src, packed,
		                       raw + BLOSC_MAX_OVERHEAD,
		                       z->codec == FMT_CODEC_LZ4 ? "lz4" : "zstd",
		                       FMT_ZARR_BLOCKSIZE, 1);
	}

	snprintf(path, sizeof(path), "%s/%u/%llu%s/%u/%u/%u", z->tmp, l, (unsigned long long)z->t,
	         cdir, cy, cx, cz);
	if (k <= 0) {
		zarr_fail(z, -EIO, path, "blosc could not compress the chunk");
		return;
	}
	/* its folder was made by zarr_folders */
	int rc = zarr_write_file(path, out, (size_t)k);

	if (rc < 0)
		zarr_fail(z, rc, path, NULL);
	else
		atomic_fetch_add(&z->written, (unsigned long long)k);
}

/* ---- metadata ------------------------------------------------------------------------------ */

static int zarr_write_json(const char *dir, const char *name, struct json_object *o, char *err,
                           size_t errlen)
{
	char path[PATH_MAX];
	const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY |
	                                                          JSON_C_TO_STRING_NOSLASHESCAPE);
	int rc;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	rc = zarr_write_file(path, s, strlen(s));
	return rc < 0 ? vr_err_errno(err, errlen, rc, "%s", path) : 0;
}

/* [first, (c,) v...]: c only where the store has a channel axis (c >= 0). */
static struct json_object *json_u32s(const uint32_t *v, unsigned n, uint64_t first, int64_t c)
{
	struct json_object *a = json_object_new_array();

	json_object_array_add(a, json_object_new_int64((int64_t)first));
	if (c >= 0)
		json_object_array_add(a, json_object_new_int64(c));
	for (unsigned i = 0; i < n; i++)
		json_object_array_add(a, json_object_new_int64(v[i]));
	return a;
}

static struct json_object *json_num(double v)
{
	return v == v ? json_object_new_double(v) : NULL; /* NaN (unknown): null */
}

static int zarr_write_zarray(struct zarr *z, const struct fmt_writer *w, unsigned l, char *err,
                             size_t errlen)
{
	struct json_object *o = json_object_new_object(), *c = json_object_new_object();
	char dir[PATH_MAX];
	int rc;

	json_object_object_add(o, "zarr_format", json_object_new_int(2));
	json_object_object_add(
	        o, "shape",
	        json_u32s(z->lv[l].shape, 3, w->info.nt, z->caxis ? (int64_t)z->nch : -1));
	json_object_object_add(o, "chunks", json_u32s(z->lv[l].chunk, 3, 1, z->caxis ? 1 : -1));
	json_object_object_add(o, "dtype", json_object_new_string("|u1"));
	if (z->codec == FMT_CODEC_NONE) {
		json_object_put(c);
		c = NULL; /* "compressor": null, the chunks raw */
	} else {
		json_object_object_add(c, "id", json_object_new_string("blosc"));
		json_object_object_add(c, "cname",
		                       json_object_new_string(fmt_codec_name(z->codec)));
		json_object_object_add(c, "clevel", json_object_new_int(ZARR_CLEVEL_OF(l)));
		json_object_object_add(c, "shuffle", json_object_new_int(BLOSC_SHUFFLE));
		json_object_object_add(c, "blocksize", json_object_new_int(FMT_ZARR_BLOCKSIZE));
	}
	json_object_object_add(o, "compressor", c);
	json_object_object_add(o, "fill_value", json_object_new_int(0));
	json_object_object_add(o, "order", json_object_new_string("C"));
	json_object_object_add(o, "filters", NULL);
	json_object_object_add(o, "dimension_separator", json_object_new_string("/"));
	snprintf(dir, sizeof(dir), "%s/%u", z->tmp, l);
	rc = zarr_mkdir(dir);
	if (rc < 0)
		rc = vr_err_errno(err, errlen, rc, "%s", dir);
	else
		rc = zarr_write_json(dir, ".zarray", o, err, errlen);
	json_object_put(o);
	return rc;
}

static struct json_object *zarr_axis(const char *name, const char *type, const char *unit)
{
	struct json_object *a = json_object_new_object();

	json_object_object_add(a, "name", json_object_new_string(name));
	json_object_object_add(a, "type", json_object_new_string(type));
	if (unit)
		json_object_object_add(a, "unit", json_object_new_string(unit));
	return a;
}

/* The NGFF 0.4 multiscales entry: axes t, y, x, z and one dataset per level. */
static struct json_object *zarr_multiscale(const struct zarr *z, const struct fmt_writer *w)
{
	static const char *const names[3] = {"y", "x", "z"};
	const struct fmt_info *in = &w->info;
	bool known = fmt_voxel_known(in), tknown = in->interval_s == in->interval_s;
	struct json_object *ms = json_object_new_object(), *axes = json_object_new_array();
	struct json_object *sets = json_object_new_array(), *meta = json_object_new_object();
	const char *base = strrchr(w->path, '/') ? strrchr(w->path, '/') + 1 : w->path;

	json_object_object_add(ms, "version", json_object_new_string("0.4"));
	json_object_object_add(ms, "name", json_object_new_string(base));
	json_object_array_add(axes, zarr_axis("t", "time", tknown ? "second" : NULL));
	if (z->caxis)
		json_object_array_add(axes, zarr_axis("c", "channel", NULL));
	for (int i = 0; i < 3; i++)
		json_object_array_add(axes,
		                      zarr_axis(names[i], "space", known ? "micrometer" : NULL));
	json_object_object_add(ms, "axes", axes);
	for (unsigned l = 0; l < z->nlevels; l++) {
		struct json_object *d = json_object_new_object(), *ts = json_object_new_array();
		struct json_object *sc = json_object_new_object(), *s = json_object_new_array();
		struct json_object *tr = json_object_new_object(), *o = json_object_new_array();
		double f = ldexp(1.0, (int)l);

		json_object_array_add(s, json_object_new_double(tknown ? in->interval_s : 1.0));
		json_object_array_add(o, json_object_new_double(0.0));
		if (z->caxis) { /* channels are not scaled */
			json_object_array_add(s, json_object_new_double(1.0));
			json_object_array_add(o, json_object_new_double(0.0));
		}
		for (int i = 0; i < 3; i++) {
			double v = known ? in->voxel_um[i] : 1.0;

			json_object_array_add(s, json_object_new_double(v * f));
			/* a mean of 2^l voxels sits at the centre of the first 2^l */
			json_object_array_add(o, json_object_new_double(v * (f - 1) / 2));
		}
		json_object_object_add(sc, "type", json_object_new_string("scale"));
		json_object_object_add(sc, "scale", s);
		json_object_object_add(tr, "type", json_object_new_string("translation"));
		json_object_object_add(tr, "translation", o);
		json_object_array_add(ts, sc);
		json_object_array_add(ts, tr);
		char p[16];

		snprintf(p, sizeof(p), "%u", l);
		json_object_object_add(d, "path", json_object_new_string(p));
		json_object_object_add(d, "coordinateTransformations", ts);
		json_object_array_add(sets, d);
	}
	json_object_object_add(ms, "datasets", sets);
	json_object_object_add(ms, "type", json_object_new_string("mean"));
	json_object_object_add(
	        meta, "description",
	        json_object_new_string(
	                z->caxis ? "each level: the mean of 2x2x2 voxels of the level before "
	                           "(fewer at the edges), rounded half up; of Doppler's phases the "
	                           "circular mean (the angle of the sum of their unit vectors, a "
	                           "phase of 0 where they cancel)"
	                         : "each level: the mean of 2x2x2 voxels of the level before "
	                           "(fewer at the edges), rounded half up"));
	json_object_object_add(ms, "metadata", meta);
	return ms;
}

/* The "omero" block of NGFF 0.4 (transitional): a label and a colour per channel, the window
 * of the 8-bit values. */
static struct json_object *zarr_omero(const struct fmt_writer *w)
{
	const struct fmt_info *in = &w->info;
	struct json_object *o = json_object_new_object(), *chs = json_object_new_array();
	struct json_object *rd = json_object_new_object();

	for (uint32_t c = 0; c < in->nch; c++) {
		const char *name = in->ch[c].name;
		struct json_object *ch = json_object_new_object(), *win = json_object_new_object();

		json_object_object_add(ch, "label", json_object_new_string(name));
		json_object_object_add(ch, "color",
		                       json_object_new_string(!strcmp(name, "angio") ? "FF0000"
		                                              : !strcmp(name, "doppler")
		                                                      ? "00FF00"
		                                                      : "FFFFFF"));
		json_object_object_add(ch, "active", json_object_new_boolean(true));
		json_object_object_add(ch, "coefficient", json_object_new_double(1.0));
		json_object_object_add(ch, "family", json_object_new_string("linear"));
		json_object_object_add(ch, "inverted", json_object_new_boolean(false));
		json_object_object_add(win, "min", json_object_new_double(0.0));
		json_object_object_add(win, "max", json_object_new_double(255.0));
		json_object_object_add(win, "start", json_object_new_double(0.0));
		json_object_object_add(win, "end", json_object_new_double(255.0));
		json_object_object_add(ch, "window", win);
		json_object_array_add(chs, ch);
	}
	json_object_object_add(o, "version", json_object_new_string("0.4"));
	json_object_object_add(o, "channels", chs);
	json_object_object_add(rd, "model", json_object_new_string("color"));
	json_object_object_add(rd, "defaultT", json_object_new_int(0));
	json_object_object_add(o, "rdefs", rd);
	return o;
}

/* The provenance: volrec's own key beside "multiscales". */
static struct json_object *zarr_provenance(const struct zarr *z, const struct fmt_writer *w)
{
	const struct fmt_info *in = &w->info;
	struct json_object *v = json_object_new_object(), *vs = json_object_new_array();

	json_object_object_add(v, "volrec_version", json_object_new_string(VOLREC_VERSION));
	if (w->opt.source)
		json_object_object_add(v, "source", json_object_new_string(w->opt.source));
	json_object_object_add(v, "axes",
	                       json_object_new_string(z->caxis ? "t,c,y,x,z" : "t,y,x,z"));
	if (z->caxis) {
		struct json_object *chs = json_object_new_array();

		for (uint32_t c = 0; c < in->nch; c++)
			json_object_array_add(chs, fmt_channel_json(&in->ch[c]));
		json_object_object_add(v, "channels", chs);
	}
	for (int i = 0; i < 3; i++)
		json_object_array_add(vs, json_num(in->voxel_um[i]));
	json_object_object_add(v, "voxel_size_um", vs);
	json_object_object_add(v, "voxel_size_known", json_object_new_boolean(fmt_voxel_known(in)));
	json_object_object_add(v, "interval_s", json_num(in->interval_s));
	if (in->attrs)
		json_object_object_add(v, "attributes", json_object_get(in->attrs));
	if (in->columns)
		json_object_object_add(v, "volumes", json_object_get(in->columns));
	return v;
}

/* ---- operations -------------------------------------------------------------------------- */

static int zarr_open(struct fmt_writer *w, char *err, size_t errlen)
{
	struct zarr *z = calloc(1, sizeof(*z));
	struct json_object *g;
	struct stat st;
	int rc;

	if (!z)
		return vr_err(err, errlen, -ENOMEM, "out of memory");
	w->priv = z;
	pthread_mutex_init(&z->lock, NULL);
	z->threads = w->opt.threads ? w->opt.threads : (unsigned)sysconf(_SC_NPROCESSORS_ONLN);
	if (z->threads < 1)
		z->threads = 1;
	if (z->threads > ZARR_THREADS_MAX)
		z->threads = ZARR_THREADS_MAX;
	z->codec = w->opt.codec ? w->opt.codec : FMT_CODEC_ZSTD;
	z->nch = fmt_nch(&w->info);
	z->caxis = fmt_channel_axis(&w->info);
	for (uint32_t c = 0; z->caxis && c < z->nch; c++)
		z->circular[c] = !strcmp(w->info.ch[c].name, "doppler");
	for (int q = 0; q < 256; q++) {
		double a = 2 * 3.14159265358979323846 * q / 255.0 - 3.14159265358979323846;

		z->cos8[q] = cos(a);
		z->sin8[q] = sin(a);
	}
	if (!w->opt.replace && stat(w->path, &st) == 0)
		return vr_err(err, errlen, -EEXIST, "%s: exists (--force replaces it)", w->path);
	if (!(z->tmp = fmt_partial_name(w->path)))
		return vr_err(err, errlen, -ENOMEM, "out of memory");
	fmt_remove_tree(z->tmp); /* the leftover of an earlier run */
	if (mkdir(z->tmp, 0777) < 0)
		return vr_err_errno(err, errlen, -errno, "%s", z->tmp);

	/* the levels */
	for (int i = 0; i < 3; i++)
		z->lv[0].shape[i] = w->info.shape[i];
	for (;;) {
		struct zarr_level *lv = &z->lv[z->nlevels];
		uint32_t big = 0;
		size_t raw;

		fmt_zarr_chunk(lv->shape, w->opt.chunk, lv->chunk);
		for (int i = 0; i < 3; i++) {
			lv->nchunks[i] = ceil_div(lv->shape[i], lv->chunk[i]);
			big = lv->shape[i] > big ? lv->shape[i] : big;
		}
		raw = (size_t)lv->chunk[0] * lv->chunk[1] * lv->chunk[2];
		z->scratch = raw + BLOSC_MAX_OVERHEAD > z->scratch ? raw + BLOSC_MAX_OVERHEAD
		                                                   : z->scratch;
		z->ntasks +=
		        (unsigned long)lv->nchunks[0] * lv->nchunks[1] * lv->nchunks[2] * z->nch;
		if (z->nlevels > 0 && !(lv->vol = malloc((size_t)lv->shape[0] * lv->shape[1] *
		                                         lv->shape[2] * z->nch)))
			return vr_err(err, errlen, -ENOMEM, "out of memory");
		z->nlevels++;
		if (big <= FMT_ZARR_PYRAMID_SIDE || z->nlevels == ZARR_LEVELS_MAX)
			break;
		for (int i = 0; i < 3; i++)
			lv[1].shape[i] = ceil_div(lv->shape[i], 2);
	}
	g = json_object_new_object();
	json_object_object_add(g, "zarr_format", json_object_new_int(2));
	rc = zarr_write_json(z->tmp, ".zgroup", g, err, errlen);
	json_object_put(g);
	for (unsigned l = 0; rc == 0 && l < z->nlevels; l++)
		rc = zarr_write_zarray(z, w, l, err, errlen);
	return rc;
}

static int zarr_put(struct fmt_writer *w, uint64_t t, const uint8_t *vol, char *err, size_t errlen)
{
	struct zarr *z = w->priv;
	int rc;

	z->t = t;
	z->lv[0].vol = (uint8_t *)vol;
	atomic_store(&z->written, 0);
	for (z->level = 0; z->level + 1 < z->nlevels; z->level++) {
		rc = zarr_run(z, (unsigned long)z->lv[z->level + 1].shape[0] * z->nch,
		              zarr_downsample_plane);
		if (rc < 0)
			return vr_err(err, errlen, rc, "%s", z->err);
	}
	rc = zarr_folders(z, err, errlen);
	if (rc < 0)
		return rc;
	rc = zarr_run(z, z->ntasks, zarr_chunk);
	if (rc < 0)
		return vr_err(err, errlen, rc, "%s", z->err);
	w->written += atomic_load(&z->written);
	return 0;
}

static int zarr_finish(struct fmt_writer *w, char *err, size_t errlen)
{
	struct zarr *z = w->priv;
	struct json_object *a = json_object_new_object(), *ms = json_object_new_array();
	int rc;

	json_object_array_add(ms, zarr_multiscale(z, w));
	json_object_object_add(a, "multiscales", ms);
	if (z->caxis)
		json_object_object_add(a, "omero", zarr_omero(w));
	json_object_object_add(a, "volrec", zarr_provenance(z, w));
	rc = zarr_write_json(z->tmp, ".zattrs", a, err, errlen);
	json_object_put(a);
	if (rc < 0)
		return rc;
	/* the chunks reach the disk before the store takes its final name */
	int fd = open(z->tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0 || syncfs(fd) < 0)
		rc = vr_err_errno(err, errlen, -errno, "%s: cannot sync", z->tmp);
	if (fd >= 0)
		close(fd);
	return rc;
}

static int zarr_commit(struct fmt_writer *w, char *err, size_t errlen)
{
	struct zarr *z = w->priv;

	return fmt_commit_rename(z->tmp, w->path, w->opt.replace, err, errlen);
}

static void zarr_abort(struct fmt_writer *w)
{
	struct zarr *z = w->priv;

	if (z && z->tmp)
		fmt_remove_tree(z->tmp);
}

static void zarr_free(struct fmt_writer *w)
{
	struct zarr *z = w->priv;

	if (!z)
		return;
	for (unsigned l = 1; l < z->nlevels; l++)
		free(z->lv[l].vol);
	for (unsigned k = 0; k < ZARR_THREADS_MAX; k++)
		free(z->buf[k]);
	pthread_mutex_destroy(&z->lock);
	free(z->tmp);
	free(z);
}

const struct fmt_ops fmt_zarr_ops = {
        .version = FMT_OPS_VERSION,
        .name = "ome-zarr",
        .open = zarr_open,
        .put = zarr_put,
        .finish = zarr_finish,
        .commit = zarr_commit,
        .abort = zarr_abort,
        .free = zarr_free,
};

/* ---- images written time point by time point (`volrec reprocess`) ------------------------ */

/* A writer of fmt_zarr_ops over path (not through fmt_writer_open: these are not series written
 * in order). */
static struct fmt_writer *zarr_image_writer(const char *path, const struct fmt_info *info,
                                            const struct fmt_options *opt)
{
	struct fmt_writer *w = calloc(1, sizeof(*w));

	if (!w || !(w->path = strdup(path))) {
		free(w);
		return NULL;
	}
	w->ops = &fmt_zarr_ops;
	w->info = *info;
	if (opt)
		w->opt = *opt;
	return w;
}

static void zarr_image_writer_free(struct fmt_writer *w)
{
	if (!w)
		return;
	zarr_abort(w);
	zarr_free(w);
	free(w->path);
	free(w);
}

int fmt_zarr_image_create(const char *path, const struct fmt_info *info,
                          const struct fmt_options *opt, char *err, size_t errlen)
{
	struct fmt_options o = opt ? *opt : (struct fmt_options){0};
	struct fmt_writer *w;
	int rc;

	o.replace = false;
	if (info->nt == 0 || !info->shape[0] || !info->shape[1] || !info->shape[2])
		return vr_err(err, errlen, -EINVAL, "%s: no volumes to write", path);
	w = zarr_image_writer(path, info, &o);
	if (!w)
		return vr_err(err, errlen, -ENOMEM, "out of memory");
	rc = zarr_open(w, err, errlen);
	if (rc == 0)
		rc = zarr_finish(w, err, errlen);
	if (rc == 0)
		rc = zarr_commit(w, err, errlen);
	if (rc == 0) {
		/* committed: nothing for the abort of the free to remove */
		struct zarr *z = w->priv;
		free(z->tmp);
		z->tmp = NULL;
	}
	zarr_image_writer_free(w);
	return rc;
}

/* The shape of level 0 of the image at path ([t][y][x][z]) from its .zarray. */
static int zarr_image_shape(const char *path, uint64_t shape[4], char *err, size_t errlen)
{
	char file[PATH_MAX];
	struct json_object *o, *s;
	int rc = 0;

	snprintf(file, sizeof(file), "%s/0/.zarray", path);
	o = json_object_from_file(file);
	if (!o)
		return vr_err(err, errlen, -EINVAL,
		              "%s: not an OME-Zarr image of volrec (no readable 0/.zarray)", path);
	if (!json_object_object_get_ex(o, "shape", &s) ||
	    !json_object_is_type(s, json_type_array) || json_object_array_length(s) != 4)
		rc = vr_err(err, errlen, -EINVAL, "%s: its shape is not [t, y, x, z]", file);
	for (size_t i = 0; rc == 0 && i < 4; i++)
		shape[i] = (uint64_t)json_object_get_int64(json_object_array_get_idx(s, i));
	json_object_put(o);
	return rc;
}

/* The codec of a level's .zarray object o: 0 with *out, or -EINVAL (file names it). */
static int zarr_codec_of(struct json_object *o, const char *file, enum fmt_codec *out, char *err,
                         size_t errlen)
{
	struct json_object *c, *v;
	const char *id = NULL, *cname = NULL;

	if (!json_object_object_get_ex(o, "compressor", &c))
		return vr_err(err, errlen, -EINVAL, "%s: no compressor", file);
	if (!c) {
		*out = FMT_CODEC_NONE;
		return 0;
	}
	if (json_object_object_get_ex(c, "id", &v))
		id = json_object_get_string(v);
	if (json_object_object_get_ex(c, "cname", &v))
		cname = json_object_get_string(v);
	if (id && cname && !strcmp(id, "blosc") && !strcmp(cname, "zstd"))
		*out = FMT_CODEC_ZSTD;
	else if (id && cname && !strcmp(id, "blosc") && !strcmp(cname, "lz4"))
		*out = FMT_CODEC_LZ4;
	else
		return vr_err(err, errlen, -EINVAL,
		              "%s: compressor %s that volrec does not write (blosc with zstd or "
		              "lz4, or null)",
		              file, json_object_to_json_string(c));
	return 0;
}

int fmt_zarr_image_codec(const char *path, enum fmt_codec *out, char *err, size_t errlen)
{
	char file[PATH_MAX];
	struct json_object *o;
	int rc;

	snprintf(file, sizeof(file), "%s/0/.zarray", path);
	o = json_object_from_file(file);
	if (!o)
		return vr_err(err, errlen, -EINVAL,
		              "%s: not an OME-Zarr image of volrec (no readable 0/.zarray)", path);
	rc = zarr_codec_of(o, file, out, err, errlen);
	json_object_put(o);
	return rc;
}

int fmt_zarr_image_open(const char *path, const struct fmt_info *info,
                        const struct fmt_options *opt, const char *staging, struct fmt_writer **out,
                        char *err, size_t errlen)
{
	struct fmt_options o = opt ? *opt : (struct fmt_options){0};
	struct fmt_writer *w;
	uint64_t shape[4];
	char sp[PATH_MAX];
	int rc;

	enum fmt_codec codec;

	rc = zarr_image_shape(path, shape, err, errlen);
	if (rc == 0)
		rc = fmt_zarr_image_codec(path, &codec, err, errlen);
	if (rc < 0)
		return rc;
	/* the chunks of a time point are those the image's .zarray says, whoever asks */
	if (o.codec && o.codec != codec)
		return vr_err(err, errlen, -EINVAL,
		              "%s: the image's chunks are %s (its .zarray); they cannot be written "
		              "as %s",
		              path, fmt_codec_name(codec), fmt_codec_name(o.codec));
	o.codec = codec;
	if (shape[0] != info->nt || shape[1] != info->shape[0] || shape[2] != info->shape[1] ||
	    shape[3] != info->shape[2])
		return vr_err(
		        err, errlen, -EINVAL,
		        "%s: the image is [%llu, %llu, %llu, %llu] (t, y, x, z); these volumes "
		        "make [%llu, %u, %u, %u]",
		        path, (unsigned long long)shape[0], (unsigned long long)shape[1],
		        (unsigned long long)shape[2], (unsigned long long)shape[3],
		        (unsigned long long)info->nt, info->shape[0], info->shape[1],
		        info->shape[2]);
	o.replace = true;
	snprintf(sp, sizeof(sp), "%s/%s", path, staging);
	w = zarr_image_writer(sp, info, &o);
	if (!w)
		return vr_err(err, errlen, -ENOMEM, "out of memory");
	/* zarr_open makes the staging folder (SP.partial, with its levels); the writer then
	 * names the image, where put moves each time point */
	rc = zarr_open(w, err, errlen);
	free(w->path);
	if (!(w->path = strdup(path)) && rc == 0)
		rc = vr_err(err, errlen, -ENOMEM, "out of memory");
	if (rc < 0) {
		zarr_image_writer_free(w);
		return rc;
	}
	*out = w;
	return 0;
}

int fmt_zarr_image_put(struct fmt_writer *w, uint64_t t, const uint8_t *vol, char *err,
                       size_t errlen)
{
	struct zarr *z = w->priv;
	char from[PATH_MAX], to[PATH_MAX];
	int rc;

	if (t >= w->info.nt)
		return vr_err(err, errlen, -EINVAL, "%s: time point %llu of %llu", w->path,
		              (unsigned long long)t, (unsigned long long)w->info.nt);
	rc = zarr_put(w, t, vol, err, errlen);
	/* each level's folder of time point t, whole, takes its place in the image: a reader
	 * sees the time point of an earlier attempt or this one, never a part of one */
	for (unsigned l = 0; rc == 0 && l < z->nlevels; l++) {
		snprintf(from, sizeof(from), "%s/%u/%llu", z->tmp, l, (unsigned long long)t);
		snprintf(to, sizeof(to), "%s/%u/%llu", w->path, l, (unsigned long long)t);
		if (rename(from, to) == 0)
			continue;
		if (errno == ENOTEMPTY || errno == EEXIST) {
			fmt_remove_tree(to); /* an earlier attempt's */
			if (rename(from, to) == 0)
				continue;
		}
		rc = vr_err_errno(err, errlen, -errno, "%s -> %s", from, to);
	}
	return rc;
}

int fmt_zarr_image_close(struct fmt_writer *w, char *err, size_t errlen)
{
	int rc = 0, fd;

	if (!w)
		return 0;
	if (err) {
		fd = open(w->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0 || syncfs(fd) < 0)
			rc = vr_err_errno(err, errlen, -errno, "%s: cannot sync", w->path);
		if (fd >= 0)
			close(fd);
	}
	zarr_image_writer_free(w);
	return rc;
}
