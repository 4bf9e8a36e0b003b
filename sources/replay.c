/* SPDX-License-Identifier: MIT */
/*
 * The built-in `replay` source and the replay file writer: the versioned format of
 * docs/replay-format.md (checked completely at open) and headerless raw files whose geometry
 * comes from the configuration. acquire() reads B-scans with pread(), so a file that shrinks
 * is a short read, never a SIGBUS; acquire_ref() (the zero-copy extension of shim.h) hands out
 * pointers into a shared mapping of the file, made only while the source holds a read lease
 * on it, so that no other process can truncate or write the file while the backend reads it
 * in place. A file that changes in any way is a source fault (docs/replay-format.md).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sources/internal.h"
#include "sources/recording.h"

#define DIM_MAX (1u << 20) /* largest K, nx, ny accepted in a header */

struct replay {
	struct shim_err err; /* first: the kit's shim_strerror() reads it */
	struct vr_pacer pacer;
	char path[CFG_PATH_MAX];
	int fd;            /* the file, open read-only */
	struct stat st;    /* at open: a change of size, mtime or inode is a fault */
	uint64_t data_off; /* file offset of the first sample */
	uint8_t *offsets;  /* private copy of the file's offset table, NULL when none */
	void *map;         /* zero-copy only: the whole file, mapped while leased */
	size_t map_len;
	const uint8_t *data;       /* first sample in the mapping */
	_Atomic bool lease_broken; /* another process wants to write or truncate the file */
	struct volrec_shim_geometry geo;
	size_t bscan_bytes;
	uint64_t epochs;
	bool loop;
	uint64_t epoch;
	uint32_t b;    /* raw B-scan due within the epoch: position * M + repeat */
	uint32_t M;    /* repeats of each position (geometry.repeats) */
	uint32_t nraw; /* raw B-scans an epoch: ny x M */
	bool pend;
	uint64_t pend_epoch;
	_Atomic uint64_t refs; /* acquire_ref() references not yet released */
	/* version 2 (recordings): the index of the complete frames */
	struct src_rec_frame *frames;
	uint64_t nframes;
	uint64_t frame_bytes; /* a frame: head and data, padded */
	uint64_t first, span; /* first recorded epoch; epochs from it to the last one */
	bool crc_skip;        /* source.replay.on_crc_error: skip */
	bool cur_lost;        /* the epoch being read is delivered as lost (skipped, or left out) */
	uint64_t cur_frame;   /* the frame it is read from */
	uint64_t crc_skipped; /* epochs skipped for a wrong CRC-32C */
	uint8_t *crc_buf;     /* copying path: where an epoch's bytes are read to check them */
};
SHIM_HANDLE_CHECK(struct replay);

static uint32_t rd32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t rd64(const uint8_t *p)
{
	return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

static void wr32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static void wr64(uint8_t *p, uint64_t v)
{
	wr32(p, (uint32_t)v);
	wr32(p + 4, (uint32_t)(v >> 32));
}

static void printable(char *dst, const uint8_t *src, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = src[i] >= 0x20 && src[i] < 0x7f ? (char)src[i] : '.';
	dst[n] = 0;
}

/* The metadata at meta (len bytes; buf the header's start): YAML text, without a NUL byte.
 * With info, *h is the parsed header to hand out on success. */
static int metadata_check(const uint8_t *meta, uint32_t len, const uint8_t *buf,
                          struct src_replay_info *info, const struct src_replay_info *h, char *err,
                          size_t errlen)
{
	const void *nul = memchr(meta, 0, len);

	if (nul)
		return vr_err(err, errlen, -EINVAL,
		              "metadata holds a NUL byte at offset %td (YAML text expected)",
		              (const uint8_t *)nul - buf);
	if (!vr_utf8_valid((const char *)meta, len))
		return vr_err(err, errlen, -EINVAL,
		              "metadata is not valid UTF-8 (YAML text expected)");
	if (info)
		*info = *h;
	return 0;
}

/* The magic and the size of the fixed header, the first things a replay file is checked for. */
static int replay_check_magic(const uint8_t *buf, size_t len, uint64_t file_size, char *err,
                              size_t errlen)
{
	if (file_size == 0)
		return vr_err(err, errlen, -EINVAL, "file is empty");
	if (len < 8 || file_size < 8)
		return vr_err(err, errlen, -EINVAL,
		              "file is %llu bytes, too short for the 8-byte magic \"%s\"",
		              (unsigned long long)file_size, SRC_REPLAY_MAGIC);
	if (memcmp(buf, SRC_REPLAY_MAGIC, 8) != 0) {
		char m[9];
		printable(m, buf, 8);
		return vr_err(err, errlen, -EINVAL,
		              "not a volrec replay file: magic \"%s\" is not \"%s\" (headerless "
		              "files need source.replay.format: raw)",
		              m, SRC_REPLAY_MAGIC);
	}
	if (len < SRC_REPLAY_FIXED_SIZE || file_size < SRC_REPLAY_FIXED_SIZE)
		return vr_err(err, errlen, -EINVAL,
		              "truncated header: the file is %llu bytes, the fixed header alone "
		              "is %u",
		              (unsigned long long)file_size, SRC_REPLAY_FIXED_SIZE);
	return 0;
}

/* The fields of the fixed header (buf holds SRC_REPLAY_FIXED_SIZE bytes); version 1: repeats
 * from bytes 56..59 (0 in files written before repeats: M = 1) and the reserved bytes 60..63
 * in *reserved. */
static void replay_read_fixed(const uint8_t *buf, struct src_replay_info *h, uint64_t *reserved)
{
	memset(h, 0, sizeof(*h));
	h->version = rd32(buf + 8);
	h->header_size = rd32(buf + 12);
	h->sample_type = rd32(buf + 16);
	h->samples_per_ascan = rd32(buf + 20);
	h->ascans_per_bscan = rd32(buf + 24);
	h->bscans_per_volume = rd32(buf + 28);
	h->epochs = rd64(buf + 32);
	h->stride_x = rd32(buf + 40);
	h->stride_y = rd32(buf + 44);
	h->flags = rd32(buf + 48);
	h->metadata_len = rd32(buf + 52);
	h->repeats = rd32(buf + 56);
	*reserved = rd32(buf + 60);
}

/* The fixed header's fields, each within the limits of docs/replay-format.md. */
static int replay_check_fixed(const struct src_replay_info *h, uint64_t reserved,
                              uint64_t file_size, char *err, size_t errlen)
{
	if (h->version != SRC_REPLAY_VERSION && h->version != SRC_REC_VERSION)
		return vr_err(
		        err, errlen, -EPROTONOSUPPORT,
		        "unsupported format version %u (this volrec reads versions %u and %u)",
		        h->version, SRC_REPLAY_VERSION, SRC_REC_VERSION);
	if (h->header_size < SRC_REPLAY_FIXED_SIZE)
		return vr_err(err, errlen, -EINVAL,
		              "header_size %u is smaller than the %u-byte fixed header",
		              h->header_size, SRC_REPLAY_FIXED_SIZE);
	if (h->header_size > SRC_REPLAY_HEADER_MAX)
		return vr_err(err, errlen, -EINVAL, "header_size %u exceeds the limit of %u bytes",
		              h->header_size, SRC_REPLAY_HEADER_MAX);
	if (h->header_size > file_size)
		return vr_err(err, errlen, -EINVAL,
		              "truncated header: header_size %u but the file is %llu bytes",
		              h->header_size, (unsigned long long)file_size);
	if (reserved != 0 && h->version == SRC_REPLAY_VERSION)
		return vr_err(err, errlen, -EINVAL,
		              "reserved header bytes 60..63 are 0x%llx, must be 0",
		              (unsigned long long)reserved);
	if (h->repeats > SRC_REPLAY_REPEATS_MAX)
		return vr_err(err, errlen, -EINVAL,
		              "repeats %u: each B-scan position is acquired 1..%u times (0: 1, a "
		              "file written before repeats)",
		              h->repeats, SRC_REPLAY_REPEATS_MAX);
	if (h->sample_type > VOLREC_SAMPLE_U12GV)
		return vr_err(err, errlen, -EINVAL,
		              "unknown sample type %u (0 = u16, 1 = i16, 2 = f32, 3 = u12p, "
		              "4 = u12gv)",
		              h->sample_type);
	if (h->flags & ~SRC_REPLAY_FLAGS_KNOWN)
		return vr_err(err, errlen, -EINVAL, "unknown flags 0x%x (known: 0x%x)", h->flags,
		              SRC_REPLAY_FLAGS_KNOWN);
	if (!h->samples_per_ascan || !h->ascans_per_bscan || !h->bscans_per_volume ||
	    h->samples_per_ascan > DIM_MAX || h->ascans_per_bscan > DIM_MAX ||
	    h->bscans_per_volume > DIM_MAX)
		return vr_err(err, errlen, -EINVAL,
		              "samples_per_ascan %u, ascans_per_bscan %u, bscans_per_volume %u: "
		              "each must be 1..%u",
		              h->samples_per_ascan, h->ascans_per_bscan, h->bscans_per_volume,
		              DIM_MAX);
	if (!h->stride_x || !h->stride_y || h->stride_x > 1024 || h->stride_y > 1024)
		return vr_err(err, errlen, -EINVAL, "stride [%u, %u]: each must be 1..1024",
		              h->stride_x, h->stride_y);
	if (h->metadata_len > SRC_REPLAY_META_MAX)
		return vr_err(err, errlen, -EINVAL,
		              "metadata length %u exceeds the limit of %u bytes", h->metadata_len,
		              SRC_REPLAY_META_MAX);
	if (h->sample_type >= VOLREC_SAMPLE_U12P && h->samples_per_ascan % 2)
		return vr_err(err, errlen, -EINVAL,
		              "samples_per_ascan %u is odd with the packed sample type %s (K "
		              "must be even)",
		              h->samples_per_ascan, src_sample_name(h->sample_type));
	return 0;
}

/* Version 1: the offset table and the metadata fit the header; *table is the table's size. */
static int replay_check_v1_header(const uint8_t *buf, size_t len, uint64_t file_size,
                                  const struct src_replay_info *h, uint64_t *table, char *err,
                                  size_t errlen)
{
	uint64_t need;

	if (h->epochs == 0)
		return vr_err(err, errlen, -EINVAL, "the file holds no epochs (epochs = 0)");
	*table = 0;
	if (h->flags & SRC_REPLAY_FLAG_OFFSETS) {
		if (h->epochs > SRC_REPLAY_HEADER_MAX / 8)
			return vr_err(err, errlen, -EINVAL,
			              "an offset table of %llu epochs cannot fit in a header "
			              "(at most %u bytes)",
			              (unsigned long long)h->epochs, SRC_REPLAY_HEADER_MAX);
		*table = h->epochs * 8;
	}
	need = SRC_REPLAY_FIXED_SIZE + *table + h->metadata_len;
	if (need > h->header_size)
		return vr_err(err, errlen, -EINVAL,
		              "offset table (%llu bytes) and metadata (%u bytes) need a header of "
		              "%llu bytes, header_size is %u (file %llu bytes)",
		              (unsigned long long)*table, h->metadata_len, (unsigned long long)need,
		              h->header_size, (unsigned long long)file_size);
	if (len < need)
		return vr_err(err, errlen, -EINVAL,
		              "internal: header buffer of %zu bytes, need %llu", len,
		              (unsigned long long)need);
	return metadata_check(buf + SRC_REPLAY_FIXED_SIZE + *table, h->metadata_len, buf, NULL,
	                      NULL, err, errlen);
}

/* Version 1: the file holds exactly the header and its epochs. */
static int replay_check_v1_size(const struct src_replay_info *h, uint64_t file_size, char *err,
                                size_t errlen)
{
	uint64_t epoch_bytes, data;

	epoch_bytes = src_replay_epoch_bytes(h);
	if (h->epochs > (UINT64_MAX - h->header_size) / epoch_bytes)
		return vr_err(err, errlen, -EINVAL,
		              "%llu epochs of %llu bytes overflow a file size",
		              (unsigned long long)h->epochs, (unsigned long long)epoch_bytes);
	data = h->epochs * epoch_bytes;
	if (file_size < h->header_size + data)
		return vr_err(err, errlen, -EINVAL,
		              "truncated data: %llu epochs of %llu bytes need %llu bytes after the "
		              "%u-byte header, the file has %llu (%llu bytes missing)",
		              (unsigned long long)h->epochs, (unsigned long long)epoch_bytes,
		              (unsigned long long)data, h->header_size,
		              (unsigned long long)(file_size - h->header_size),
		              (unsigned long long)(h->header_size + data - file_size));
	if (file_size > h->header_size + data)
		return vr_err(err, errlen, -EINVAL,
		              "%llu trailing bytes after the last of %llu epochs (file %llu bytes, "
		              "header %u + data %llu)",
		              (unsigned long long)(file_size - h->header_size - data),
		              (unsigned long long)h->epochs, (unsigned long long)file_size,
		              h->header_size, (unsigned long long)data);
	return 0;
}

/* Version 1 with an offset table: each entry is the offset epoch e is scanned at. */
static int replay_check_v1_offsets(const uint8_t *buf, const struct src_replay_info *h, char *err,
                                   size_t errlen)
{
	if (!(h->flags & SRC_REPLAY_FLAG_OFFSETS))
		return 0;
	for (uint64_t e = 0; e < h->epochs; e++) {
		uint32_t ox = rd32(buf + SRC_REPLAY_FIXED_SIZE + 8 * e);
		uint32_t oy = rd32(buf + SRC_REPLAY_FIXED_SIZE + 8 * e + 4);
		uint32_t ex, ey;
		if (ox >= h->stride_x || oy >= h->stride_y)
			return vr_err(err, errlen, -EINVAL,
			              "offset table entry %llu is (%u, %u), outside stride "
			              "[%u, %u]",
			              (unsigned long long)e, ox, oy, h->stride_x, h->stride_y);
		vr_scan_offset(e, h->stride_x, h->stride_y, &ex, &ey);
		if (ox != ex || oy != ey)
			return vr_err(err, errlen, -EINVAL,
			              "offset table entry %llu is (%u, %u), but epoch %llu "
			              "is scanned at (%u, %u) (docs/algorithms.md §2.1)",
			              (unsigned long long)e, ox, oy, (unsigned long long)e, ex, ey);
	}
	return 0;
}

/*
 * Check a replay header held in buf (len bytes read from the file's start, at least
 * min(file_size, SRC_REPLAY_FIXED_SIZE + offset table + metadata) when those fit) against
 * docs/replay-format.md for a file of file_size bytes. On success fills *info and, when the
 * file has an offset table, checks each entry. Messages do not name the file (the caller
 * prefixes it).
 */
static int src_replay_parse(const uint8_t *buf, size_t len, uint64_t file_size,
                            struct src_replay_info *info, char *err, size_t errlen)
{
	struct src_replay_info h;
	uint64_t reserved, table;
	int rc;

	rc = replay_check_magic(buf, len, file_size, err, errlen);
	if (rc)
		return rc;
	replay_read_fixed(buf, &h, &reserved);
	rc = replay_check_fixed(&h, reserved, file_size, err, errlen);
	if (rc)
		return rc;
	if (h.version == SRC_REC_VERSION) {
		rc = src_rec_parse_v2(buf, len, file_size, &h, err, errlen);
		if (rc)
			return rc;
		return metadata_check(buf + SRC_REPLAY_FIXED_SIZE, h.metadata_len, buf, info, &h,
		                      err, errlen);
	}
	rc = replay_check_v1_header(buf, len, file_size, &h, &table, err, errlen);
	if (rc)
		return rc;
	h.repeats = h.repeats ? h.repeats : 1;
	h.complete = h.epochs;
	rc = replay_check_v1_size(&h, file_size, err, errlen);
	if (!rc)
		rc = replay_check_v1_offsets(buf, &h, err, errlen);
	if (rc)
		return rc;
	*info = h;
	return 0;
}

/* Open path read-only as a regular file; *st its status. */
static int open_file(const char *path, int *fd_out, struct stat *st, char *err, size_t errlen)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);

	if (fd < 0)
		return vr_err(err, errlen, -errno, "replay %s: cannot open: %s", path,
		              strerror(errno));
	if (fstat(fd, st) < 0) {
		int rc = vr_err(err, errlen, -errno, "replay %s: fstat: %s", path, strerror(errno));
		close(fd);
		return rc;
	}
	if (!S_ISREG(st->st_mode)) {
		close(fd);
		return vr_err(err, errlen, -EINVAL, "replay %s: not a regular file", path);
	}
	*fd_out = fd;
	return 0;
}

/* Read the header part src_replay_parse needs (malloc'ed into *buf, *len bytes): the fixed
 * part, then up to the header_size it declares (bounded by the file and the format). */
static int read_header(int fd, uint64_t size, uint8_t **buf, size_t *len, char *err, size_t errlen)
{
	size_t n = size < SRC_REPLAY_FIXED_SIZE ? (size_t)size : SRC_REPLAY_FIXED_SIZE;
	uint8_t *b = malloc(n ? n : 1), *nb;
	int rc;

	if (!b)
		return vr_err(err, errlen, -ENOMEM, "out of memory");
	rc = vr_pread_full(fd, b, n, 0);
	if (rc == 0 && n == SRC_REPLAY_FIXED_SIZE && !memcmp(b, SRC_REPLAY_MAGIC, 8)) {
		uint64_t want = rd32(b + 12);
		if (want > SRC_REPLAY_HEADER_MAX)
			want = SRC_REPLAY_HEADER_MAX;
		if (want > size)
			want = size;
		if (want > n) {
			nb = realloc(b, want);
			if (!nb) {
				free(b);
				return vr_err(err, errlen, -ENOMEM, "out of memory");
			}
			b = nb;
			rc = vr_pread_full(fd, b + n, want - n, n);
			n = want;
		}
	}
	if (rc) {
		free(b);
		return vr_err(err, errlen, rc == -ENODATA ? -ESTALE : rc, "reading the header: %s",
		              rc == -ENODATA ? "the file shrank while being read" : strerror(-rc));
	}
	*buf = b;
	*len = n;
	return 0;
}

int src_replay_probe(const char *path, struct src_replay_info *info, char *err, size_t errlen)
{
	char msg[CFG_ERR_MAX];
	struct stat st;
	uint8_t *buf;
	size_t len;
	int fd, rc;

	rc = open_file(path, &fd, &st, err, errlen);
	if (rc)
		return rc;
	rc = read_header(fd, (uint64_t)st.st_size, &buf, &len, msg, sizeof(msg));
	if (rc == 0) {
		rc = src_replay_parse(buf, len, (uint64_t)st.st_size, info, msg, sizeof(msg));
		free(buf);
	}
	if (rc)
		vr_err(err, errlen, rc, "replay %s: %s", path, msg);
	close(fd);
	return rc;
}

/* ---- the source ---------------------------------------------------------------------------- */

static int64_t frame_of(const struct replay *r, uint64_t e);

static int replay_configure(void *h, const struct volrec_shim_geometry *g)
{
	struct replay *r = h;
	char who[sizeof(r->path) + 8];

	snprintf(who, sizeof(who), "replay %s", r->path);
	return shim_geometry_fixed(&r->err, &r->geo, g, who);
}

static int replay_set_scan_offset(void *h, uint64_t epoch, uint32_t ox, uint32_t oy)
{
	struct replay *r = h;

	if (ox >= r->geo.stride_x || oy >= r->geo.stride_y)
		return shim_fail(&r->err, -EINVAL,
		                 "replay %s: scan offset (%u, %u) of epoch %llu outside stride "
		                 "[%u, %u]",
		                 r->path, ox, oy, (unsigned long long)epoch, r->geo.stride_x,
		                 r->geo.stride_y);
	if (r->b != 0 && epoch == r->epoch)
		return shim_fail(
		        &r->err, -EBUSY,
		        "replay %s: epoch %llu is already being read (raw B-scan %u of %u)",
		        r->path, (unsigned long long)epoch, r->b, r->nraw);
	if (r->frames) {
		int64_t i = frame_of(r, epoch);
		if (i >= 0 && (r->frames[i].ox != ox || r->frames[i].oy != oy))
			return shim_fail(
			        &r->err, -EINVAL,
			        "replay %s: epoch %llu is recorded epoch %llu, recorded at "
			        "offset (%u, %u), not at the (%u, %u) asked for",
			        r->path, (unsigned long long)epoch,
			        (unsigned long long)r->frames[i].epoch, r->frames[i].ox,
			        r->frames[i].oy, ox, oy);
	} else if (r->offsets) {
		uint64_t fe = epoch % r->epochs;
		uint32_t fx = rd32(r->offsets + 8 * fe), fy = rd32(r->offsets + 8 * fe + 4);
		if (fx != ox || fy != oy)
			return shim_fail(
			        &r->err, -EINVAL,
			        "replay %s: epoch %llu is file epoch %llu, recorded at offset "
			        "(%u, %u), not at the (%u, %u) asked for",
			        r->path, (unsigned long long)epoch, (unsigned long long)fe, fx, fy,
			        ox, oy);
	}
	r->pend = true;
	r->pend_epoch = epoch;
	return 0;
}

static int replay_start(void *h)
{
	struct replay *r = h;

	vr_pacer_start(&r->pacer);
	return 0;
}

/* Whether the file is still the one opened: same size and mtime, and the path still names it.
 * Asked before each epoch; a change is -ESTALE with the reason. */
static int check_unchanged(struct replay *r)
{
	struct stat now, at;

	if (fstat(r->fd, &now) < 0)
		return shim_fail(&r->err, -errno, "replay %s: fstat: %s", r->path, strerror(errno));
	if (now.st_size != r->st.st_size)
		return shim_fail(
		        &r->err, -ESTALE,
		        "replay %s: the file changed size while being replayed (%lld bytes "
		        "when opened, now %lld); it is read again when the source is "
		        "reopened",
		        r->path, (long long)r->st.st_size, (long long)now.st_size);
	if (now.st_mtim.tv_sec != r->st.st_mtim.tv_sec ||
	    now.st_mtim.tv_nsec != r->st.st_mtim.tv_nsec)
		return shim_fail(
		        &r->err, -ESTALE,
		        "replay %s: the file was modified while being replayed; it is read "
		        "again when the source is reopened",
		        r->path);
	bool gone = stat(r->path, &at) < 0;
	if (gone || at.st_dev != r->st.st_dev || at.st_ino != r->st.st_ino)
		return shim_fail(&r->err, -ESTALE,
		                 "replay %s: the path %s while being replayed; it is read again "
		                 "when the source is reopened",
		                 r->path,
		                 gone ? "names no file any more" : "now names another file");
	return 0;
}

/* Zero-copy: another process asked to open the file for writing or to truncate it (the
 * kernel holds it back while the lease is held). Give the lease up once no reference is held,
 * so that it may go on; until then and after, acquire_ref() fails. Any thread. */
static void lease_give_up_if_idle(struct replay *r)
{
	if (atomic_load(&r->lease_broken) && atomic_load(&r->refs) == 0)
		fcntl(r->fd, F_SETLEASE, F_UNLCK);
}

/* A recording: the frame of pipeline epoch e (looping over the recorded span), or -1 when
 * the recorder left that epoch out. */
static int64_t frame_of(const struct replay *r, uint64_t e)
{
	uint64_t t, lo = 0, hi = r->nframes;

	if (e < r->first)
		return -1;
	t = r->first + (e - r->first) % r->span;
	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;
		if (r->frames[mid].epoch < t)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < r->nframes && r->frames[lo].epoch == t ? (int64_t)lo : -1;
}

/* A recording: check the CRC-32C of frame i's data. 0, or -EBADMSG with the message. */
static int frame_crc_check(struct replay *r, uint64_t i)
{
	uint64_t epoch_bytes = (uint64_t)r->bscan_bytes * r->nraw;
	uint64_t at = r->data_off + i * r->frame_bytes + SRC_REC_FRAME_HDR;
	uint32_t crc = 0;
	int rc;

	if (r->data) {
		crc = src_crc32c(0, r->data + i * r->frame_bytes + SRC_REC_FRAME_HDR, epoch_bytes);
	} else {
		for (uint64_t done = 0; done < epoch_bytes;) {
			size_t n = epoch_bytes - done < (1u << 20) ? (size_t)(epoch_bytes - done)
			                                           : (1u << 20);
			rc = vr_pread_full(r->fd, r->crc_buf, n, at + done);
			if (rc)
				return shim_fail(&r->err, rc == -ENODATA ? -ESTALE : rc,
				                 "replay %s: reading epoch %llu to check it: %s",
				                 r->path, (unsigned long long)r->frames[i].epoch,
				                 rc == -ENODATA ? "the file shrank"
				                                : strerror(-rc));
			crc = src_crc32c(crc, r->crc_buf, n);
			done += n;
		}
	}
	if (crc == r->frames[i].crc)
		return 0;
	return shim_fail(
	        &r->err, -EBADMSG,
	        "replay %s: CRC-32C mismatch in epoch %llu (frame %llu at byte %llu): "
	        "0x%08x, recorded 0x%08x; the data is damaged (source.replay.on_crc_error: "
	        "skip leaves such epochs out)",
	        r->path, (unsigned long long)r->frames[i].epoch, (unsigned long long)i,
	        (unsigned long long)(at - SRC_REC_FRAME_HDR), crc, r->frames[i].crc);
}

/* A recording, at the first B-scan of epoch e: which frame to read (r->cur_frame), or that the
 * epoch is delivered as lost (left out when recorded, or skipped for its CRC). */
static int frame_begin(struct replay *r, uint64_t e)
{
	int64_t i = frame_of(r, e);
	int rc;

	r->cur_lost = i < 0;
	r->cur_frame = i < 0 ? 0 : (uint64_t)i;
	if (i >= 0) {
		rc = frame_crc_check(r, (uint64_t)i);
		if (rc && !(rc == -EBADMSG && r->crc_skip))
			return rc;
		r->cur_lost = rc != 0;
		if (rc)
			r->crc_skipped++;
	}
	if (r->cur_lost && !(r->geo.flags & VOLREC_SHIM_GEOMETRY_MARKS))
		return shim_fail(&r->err, -ENODATA,
		                 "replay %s: epoch %llu is not in the recording (%s), and this "
		                 "pipeline cannot take an epoch marked lost",
		                 r->path, (unsigned long long)e,
		                 i < 0 ? "the recorder left it out" : "its CRC-32C is wrong");
	return 0;
}

/* Wait for the next B-scan and give its position in the file (both acquire forms). */
static int replay_next(struct replay *r, int timeout_ms, struct volrec_shim_meta *meta,
                       uint64_t *pos)
{
	uint64_t epoch;
	int rc;

	epoch = r->b == 0 && r->pend ? r->pend_epoch : r->epoch;
	if (!r->loop && epoch >= r->first + r->epochs)
		return shim_fail(&r->err, -ENODATA, "replay %s: end of file after %llu epochs",
		                 r->path, (unsigned long long)r->epochs);
	rc = vr_pacer_wait(&r->pacer, timeout_ms);
	if (rc)
		return rc;
	if (r->b == 0) {
		rc = check_unchanged(r);
		if (rc == 0 && r->frames)
			rc = frame_begin(r, epoch);
		if (rc)
			return rc;
		r->epoch = epoch;
		r->pend = false;
	}
	if (r->frames)
		*pos = r->cur_frame * r->frame_bytes + SRC_REC_FRAME_HDR +
		       (r->cur_lost ? 0 : (uint64_t)r->b * r->bscan_bytes);
	else
		*pos = ((r->epoch % r->epochs) * r->nraw + r->b) * r->bscan_bytes;
	vr_pacer_done(&r->pacer);
	if (meta) {
		meta->timestamp_ns = vr_now_ns(CLOCK_REALTIME);
		meta->epoch = r->epoch;
		meta->bscan = r->b / r->M;
		meta->flags = r->frames && r->cur_lost ? VOLREC_SHIM_META_LOST : 0;
		if (r->geo.flags & VOLREC_SHIM_GEOMETRY_REPEATS) {
			meta->repeat = r->b % r->M;
			meta->reserved = 0;
		}
	}
	if (++r->b == r->nraw) {
		r->b = 0;
		r->epoch++;
	}
	return 0;
}

static int replay_acquire(void *h, void *buf, size_t size, int timeout_ms,
                          struct volrec_shim_meta *meta)
{
	struct replay *r = h;
	uint64_t pos;
	struct stat now;
	int rc;

	if (size < r->bscan_bytes)
		return shim_fail(&r->err, -EINVAL,
		                 "replay %s: buffer of %zu bytes, a B-scan is %zu", r->path, size,
		                 r->bscan_bytes);
	rc = replay_next(r, timeout_ms, meta, &pos);
	if (rc)
		return rc;
	rc = vr_pread_full(r->fd, buf, r->bscan_bytes, r->data_off + pos);
	if (rc == -ENODATA)
		return shim_fail(
		        &r->err, -ESTALE,
		        "replay %s: the file shrank while being replayed: a B-scan at bytes "
		        "%llu..%llu, the file now ends at %lld",
		        r->path, (unsigned long long)(r->data_off + pos),
		        (unsigned long long)(r->data_off + pos + r->bscan_bytes),
		        fstat(r->fd, &now) == 0 ? (long long)now.st_size : -1ll);
	if (rc)
		return shim_fail(&r->err, rc, "replay %s: reading a B-scan at byte %llu: %s",
		                 r->path, (unsigned long long)(r->data_off + pos), strerror(-rc));
	return 0;
}

/* Take a read lease on the file and map it (once): from then on no other process can
 * truncate the file or open it for writing before the lease is given up. */
static int lease_and_map(struct replay *r)
{
	struct stat now;
	void *m;
	int e;

	if (r->map)
		return 0;
	/* a lease break signals the lease's owner: SIGURG, ignored by default, for the moment
	 * before F_SETOWN 0 (no owner: no signal at all); the break is polled (F_GETLEASE) */
	if (fcntl(r->fd, F_SETSIG, SIGURG) < 0 || fcntl(r->fd, F_SETLEASE, F_RDLCK) < 0) {
		e = errno;
		return shim_fail(&r->err, -e,
		                 "replay %s: zero-copy needs a read lease on the file, so that it "
		                 "cannot change while the backend reads it in place: %s%s",
		                 r->path, strerror(e),
		                 e == EACCES   ? " (the file belongs to another user: the process "
		                                 "needs to own it or CAP_LEASE)"
		                 : e == EAGAIN ? " (the file is open for writing)"
		                               : "");
	}
	if (fcntl(r->fd, F_SETOWN, 0) < 0) {
		e = errno;
		fcntl(r->fd, F_SETLEASE, F_UNLCK);
		return shim_fail(&r->err, -e, "replay %s: F_SETOWN: %s", r->path, strerror(e));
	}
	/* the file may have changed between open and the lease */
	if (fstat(r->fd, &now) < 0 || now.st_size != r->st.st_size ||
	    now.st_mtim.tv_sec != r->st.st_mtim.tv_sec ||
	    now.st_mtim.tv_nsec != r->st.st_mtim.tv_nsec) {
		fcntl(r->fd, F_SETLEASE, F_UNLCK);
		return shim_fail(
		        &r->err, -ESTALE,
		        "replay %s: the file changed since it was opened; it is read again "
		        "when the source is reopened",
		        r->path);
	}
	/* shared: the pages are the file's own (page cache, tmpfs), never copied on a write,
	 * so a backend can pin them for DMA */
	m = mmap(NULL, (size_t)r->st.st_size, PROT_READ, MAP_SHARED, r->fd, 0);
	if (m == MAP_FAILED) {
		e = errno;
		fcntl(r->fd, F_SETLEASE, F_UNLCK);
		return shim_fail(&r->err, -e, "replay %s: mmap of %lld bytes: %s", r->path,
		                 (long long)r->st.st_size, strerror(e));
	}
	madvise(m, (size_t)r->st.st_size, MADV_SEQUENTIAL);
	r->map = m;
	r->map_len = (size_t)r->st.st_size;
	r->data = (const uint8_t *)m + r->data_off;
	return 0;
}

static int replay_ref_regions(void *h, struct volrec_shim_region *regions, uint32_t max,
                              uint32_t *count)
{
	struct replay *r = h;
	int rc;

	if (!count)
		return shim_fail(&r->err, -EINVAL, "replay %s: ref_regions() without a count",
		                 r->path);
	if (max && !regions)
		return shim_fail(&r->err, -EINVAL,
		                 "replay %s: ref_regions() with max %u and no array", r->path, max);
	rc = lease_and_map(r);
	if (rc)
		return rc;
	*count = 1;
	if (max) {
		/* the whole mapping: page-aligned, what cudaHostRegister wants */
		regions[0].base = r->map;
		regions[0].size = r->map_len;
	}
	return 0;
}

static int replay_acquire_ref(void *h, const void **bscan, int timeout_ms,
                              struct volrec_shim_meta *meta)
{
	struct replay *r = h;
	uint64_t pos;
	int rc;

	if (!bscan)
		return shim_fail(&r->err, -EINVAL, "replay %s: acquire_ref() without a pointer",
		                 r->path);
	if (!r->map)
		return shim_fail(&r->err, -EINVAL, "replay %s: acquire_ref() before ref_regions()",
		                 r->path);
	if (atomic_load(&r->lease_broken) || fcntl(r->fd, F_GETLEASE) != F_RDLCK) {
		atomic_store(&r->lease_broken, true);
		lease_give_up_if_idle(r);
		return shim_fail(&r->err, -ESTALE,
		                 "replay %s: another process opened the file for writing or "
		                 "truncated it; the source lets go of it (once its %llu B-scans in "
		                 "use are released) and reads it again when reopened",
		                 r->path, (unsigned long long)atomic_load(&r->refs));
	}
	rc = replay_next(r, timeout_ms, meta, &pos);
	if (rc == 0) {
		atomic_fetch_add(&r->refs, 1);
		*bscan = r->data + pos;
	}
	return rc;
}

/* May run on another thread than acquire_ref (shim.h): touches only refs, the lease and
 * constants. */
static int replay_release_ref(void *h, const void *bscan)
{
	struct replay *r = h;
	const uint8_t *p = bscan;
	uint64_t n = (uint64_t)r->epochs * r->nraw, rel;

	rel = r->frames && p >= r->data ? (uint64_t)(p - r->data) % r->frame_bytes : 0;
	if (r->frames && rel >= SRC_REC_FRAME_HDR)
		rel -= SRC_REC_FRAME_HDR;
	else if (r->frames)
		rel = 1; /* inside a frame's head: not a B-scan */
	if (!r->data || !p || p < r->data ||
	    (r->frames
	             ? p >= (const uint8_t *)r->map + r->map_len || rel % r->bscan_bytes
	             : p >= r->data + n * r->bscan_bytes || (size_t)(p - r->data) % r->bscan_bytes))
		return shim_fail(&r->err, -EINVAL,
		                 "replay %s: release_ref(%p): not a B-scan this source handed out",
		                 r->path, bscan);
	uint64_t held = atomic_load(&r->refs);
	do {
		if (held == 0)
			return shim_fail(&r->err, -EINVAL,
			                 "replay %s: release_ref(%p) with no reference held",
			                 r->path, bscan);
	} while (!atomic_compare_exchange_weak(&r->refs, &held, held - 1));
	if (held == 1)
		lease_give_up_if_idle(r);
	return 0;
}

static void replay_close(void *h)
{
	struct replay *r = h;

	if (!r)
		return;
	if (r->map)
		munmap(r->map, r->map_len);
	if (r->fd >= 0)
		close(r->fd); /* gives up the lease */
	free(r->offsets);
	free(r->frames);
	free(r->crc_buf);
	free(r);
}

static const struct volrec_shim_ops src_replay_ops = {
        .abi_version = VOLREC_SHIM_ABI_VERSION,
        .struct_size = sizeof(struct volrec_shim_ops),
        .open = src_builtin_open,
        .configure = replay_configure,
        .set_scan_offset = replay_set_scan_offset,
        .start = replay_start,
        .acquire = replay_acquire,
        .stop = src_builtin_stop,
        .close = replay_close,
        .strerror = shim_strerror,
        .ref_regions = replay_ref_regions,
        .acquire_ref = replay_acquire_ref,
        .release_ref = replay_release_ref,
};

/* The header's geometry against the configuration's. */
static int check_against_config(const struct src_replay_info *h,
                                const struct volrec_shim_geometry *g, char *err, size_t errlen)
{
#define SAME(field, key)                                                                           \
	do {                                                                                       \
		if (h->field != g->field)                                                          \
			return vr_err(err, errlen, -EINVAL,                                        \
			              "file has " #field " %u, the configuration's " key " is %u", \
			              (unsigned)h->field, (unsigned)g->field);                     \
	} while (0)
	if (h->sample_type != g->sample_type)
		return vr_err(err, errlen, -EINVAL,
		              "file has sample type %s, the configuration's geometry.sample_type "
		              "is %s",
		              src_sample_name(h->sample_type), src_sample_name(g->sample_type));
	SAME(samples_per_ascan, "geometry.samples_per_ascan");
	SAME(ascans_per_bscan, "geometry.ascans_per_bscan");
	SAME(bscans_per_volume, "geometry.bscans_per_volume");
	SAME(stride_x, "geometry.stride[0]");
	SAME(stride_y, "geometry.stride[1]");
#undef SAME
	if (h->repeats != shim_repeats(g))
		return vr_err(err, errlen, -EINVAL,
		              "file has repeats %u (each B-scan position acquired %u times), the "
		              "configuration's geometry.repeats is %u",
		              h->repeats, h->repeats, shim_repeats(g));
	if (!!(h->flags & SRC_REPLAY_FLAG_BIDIR) != !!g->bidirectional)
		return vr_err(
		        err, errlen, -EINVAL,
		        "file was scanned %s, the configuration's geometry.bidirectional is %s",
		        h->flags & SRC_REPLAY_FLAG_BIDIR ? "bidirectionally" : "unidirectionally",
		        g->bidirectional ? "true" : "false");
	return 0;
}

/* A recording (version 2): its index, the span of epochs it covers, whether it can loop. */
static int open_recording(struct replay *r, const struct src_replay_info *h, uint64_t S, char *err,
                          size_t errlen)
{
	uint64_t epoch_bytes = (uint64_t)r->bscan_bytes * r->nraw;
	int rc;

	rc = src_rec_index_load(r->fd, r->path, h, &r->frames, &r->nframes, err, errlen);
	if (rc)
		return rc;
	r->frame_bytes = src_rec_frame_size(epoch_bytes);
	r->first = r->frames[0].epoch;
	r->span = r->frames[r->nframes - 1].epoch - r->first + 1;
	r->epochs = r->span;
	r->data_off = h->header_size;
	if (r->loop && r->span % S)
		return vr_err(err, errlen, -EINVAL,
		              "replay %s: the recording covers %llu epochs (%llu..%llu), not a "
		              "whole number of %llu-epoch offset cycles, so it cannot loop (set "
		              "source.replay.loop: false)",
		              r->path, (unsigned long long)r->span, (unsigned long long)r->first,
		              (unsigned long long)(r->first + r->span - 1), (unsigned long long)S);
	r->crc_buf = malloc(1u << 20);
	if (!r->crc_buf)
		return vr_err(err, errlen, -ENOMEM, "replay: out of memory");
	return 0;
}

/* A versioned file: parse and check its header, keep a copy of its offset table. */
static int open_versioned(struct replay *r, char *err, size_t errlen)
{
	const uint64_t size = (uint64_t)r->st.st_size;
	char msg[CFG_ERR_MAX];
	struct src_replay_info h;
	uint8_t *buf = NULL;
	size_t len;
	int rc;

	rc = read_header(r->fd, size, &buf, &len, msg, sizeof(msg));
	if (!rc)
		rc = src_replay_parse(buf, len, size, &h, msg, sizeof(msg));
	if (!rc)
		rc = check_against_config(&h, &r->geo, msg, sizeof(msg));
	if (rc) {
		vr_err(err, errlen, rc, "replay %s: %s", r->path, msg);
		goto out;
	}
	uint64_t S = (uint64_t)h.stride_x * h.stride_y;
	if (h.version == SRC_REC_VERSION) {
		rc = open_recording(r, &h, S, err, errlen);
		goto out;
	}
	if ((h.flags & SRC_REPLAY_FLAG_OFFSETS) && r->loop && h.epochs % S) {
		rc = vr_err(err, errlen, -EINVAL,
		            "replay %s: the file carries per-epoch scan offsets and holds %llu "
		            "epochs, not a whole number of %llu-epoch offset cycles, so it cannot "
		            "loop (set source.replay.loop: false or record a multiple of %llu "
		            "epochs)",
		            r->path, (unsigned long long)h.epochs, (unsigned long long)S,
		            (unsigned long long)S);
		goto out;
	}
	r->epochs = h.epochs;
	r->data_off = h.header_size;
	if (h.flags & SRC_REPLAY_FLAG_OFFSETS) {
		r->offsets = malloc(h.epochs * 8);
		if (!r->offsets) {
			rc = vr_err(err, errlen, -ENOMEM, "replay: out of memory");
			goto out;
		}
		memcpy(r->offsets, buf + SRC_REPLAY_FIXED_SIZE, h.epochs * 8);
	}
out:
	free(buf);
	return rc;
}

int src_replay_open(const struct vr_config *cfg, unsigned flags, struct src_source *src, char *err,
                    size_t errlen)
{
	const char *path = cfg->source.replay.path;
	struct replay *r;
	uint64_t epoch_bytes, size;
	int rc;

	if (!path[0])
		return vr_err(err, errlen, -EINVAL, "source.replay.path is not set");
	r = calloc(1, sizeof(*r));
	if (!r)
		return vr_err(err, errlen, -ENOMEM, "replay: out of memory");
	r->fd = -1;
	snprintf(r->path, sizeof(r->path), "%s", path);
	src_geometry_from_config(&r->geo, cfg, flags);
	r->loop = cfg->source.replay.loop && !(flags & SRC_NO_LOOP);
	r->crc_skip = cfg->source.replay.on_crc_error == CFG_CRC_SKIP;
	r->bscan_bytes = (size_t)r->geo.ascans_per_bscan *
	                 volrec_sample_bytes(r->geo.sample_type, r->geo.samples_per_ascan);
	r->M = shim_repeats(&r->geo);
	r->nraw = r->geo.bscans_per_volume * r->M;
	epoch_bytes = (uint64_t)r->bscan_bytes * r->nraw;
	if (!epoch_bytes) {
		rc = vr_err(err, errlen, -EINVAL,
		            "replay %s: the configuration's geometry is empty", path);
		goto out_free;
	}
	rc = open_file(path, &r->fd, &r->st, err, errlen);
	if (rc)
		goto out_free;
	size = (uint64_t)r->st.st_size;

	if (cfg->source.replay.format == CFG_REPLAY_RAW) {
		if (size == 0) {
			rc = vr_err(err, errlen, -EINVAL, "replay %s (raw): file is empty", path);
			goto out_free;
		}
		if (size % epoch_bytes) {
			rc = vr_err(err, errlen, -EINVAL,
			            "replay %s (raw): file length %llu is not a whole number of "
			            "epochs of %llu bytes (%u B-scans x %u A-scans x %u samples "
			            "%s): %llu whole epochs and %llu bytes left over",
			            path, (unsigned long long)size, (unsigned long long)epoch_bytes,
			            r->nraw, r->geo.ascans_per_bscan, r->geo.samples_per_ascan,
			            src_sample_name(r->geo.sample_type),
			            (unsigned long long)(size / epoch_bytes),
			            (unsigned long long)(size % epoch_bytes));
			goto out_free;
		}
		r->epochs = size / epoch_bytes;
		r->data_off = 0;
	} else {
		rc = open_versioned(r, err, errlen);
		if (rc)
			goto out_free;
	}
	posix_fadvise(r->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	shim_pacer_init(&r->pacer, &r->geo);
	src->impl = src_replay_ops;
	src->handle = r;
	src->dl = NULL;
	src->kind = "replay";
	snprintf(src->info.name, sizeof(src->info.name), "replay");
	snprintf(src->info.version, sizeof(src->info.version), "%s", VOLREC_VERSION);
	snprintf(src->info.device, sizeof(src->info.device), "%.127s", path);
	src->epochs = r->epochs;
	src->first_epoch = r->first;
	return 0;

out_free:
	replay_close(r);
	return rc;
}

/* ---- the writer ---------------------------------------------------------------------------- */

struct src_replay_writer {
	FILE *f;
	char path[CFG_PATH_MAX];     /* the file to make */
	char tmp[CFG_PATH_MAX + 32]; /* where it is written, renamed to path when complete */
	size_t bscan_bytes;
	uint64_t want, done; /* B-scans announced and written */
};

/* The writer's arguments, each within what the format holds; *table the offset table's size. */
static int writer_check(const char *path, bool raw, const struct src_replay_info *info,
                        const uint32_t (*offsets)[2], size_t meta_len, uint64_t *table, char *err,
                        size_t errlen)
{
	*table = 0;
	if (info->sample_type > VOLREC_SAMPLE_U12GV || !info->samples_per_ascan ||
	    (info->sample_type >= VOLREC_SAMPLE_U12P && info->samples_per_ascan % 2) ||
	    !info->ascans_per_bscan || !info->bscans_per_volume || !info->epochs ||
	    !info->stride_x || !info->stride_y || (info->flags & ~SRC_REPLAY_FLAGS_KNOWN) ||
	    info->repeats > SRC_REPLAY_REPEATS_MAX)
		return vr_err(err, errlen, -EINVAL, "replay writer %s: invalid header fields",
		              path);
	if (!raw && (info->flags & SRC_REPLAY_FLAG_OFFSETS)) {
		if (!offsets)
			return vr_err(err, errlen, -EINVAL,
			              "replay writer %s: offsets flag set without a table", path);
		if (info->epochs > SRC_REPLAY_HEADER_MAX / 8)
			return vr_err(err, errlen, -EINVAL,
			              "replay writer %s: %llu epochs do not fit an offset table",
			              path, (unsigned long long)info->epochs);
		for (uint64_t e = 0; e < info->epochs; e++)
			if (offsets[e][0] >= info->stride_x || offsets[e][1] >= info->stride_y)
				return vr_err(err, errlen, -EINVAL,
				              "replay writer %s: offset of epoch %llu "
				              "outside the "
				              "stride",
				              path, (unsigned long long)e);
		*table = info->epochs * 8;
	}
	if (meta_len > SRC_REPLAY_META_MAX)
		return vr_err(err, errlen, -EINVAL,
		              "replay writer %s: metadata of %zu bytes exceeds %u", path, meta_len,
		              SRC_REPLAY_META_MAX);
	return 0;
}

/* A new file beside path, w->tmp, open in w->f: renamed over path when complete, so that a
 * daemon replaying path goes on reading the old file, never a truncated one
 * (docs/replay-format.md). */
static int writer_create(struct src_replay_writer *w, const char *path, char *err, size_t errlen)
{
	for (unsigned i = 0;; i++) {
		int fd, rc;

		snprintf(w->tmp, sizeof(w->tmp), "%s.tmp-%ld-%u", path, (long)getpid(), i);
		fd = open(w->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
		if (fd >= 0) {
			w->f = fdopen(fd, "wb");
			if (w->f)
				return 0;
			rc = vr_err(err, errlen, -errno, "replay writer %s: fdopen: %s", path,
			            strerror(errno));
			close(fd);
			unlink(w->tmp);
			return rc;
		}
		if (errno != EEXIST || i == 100)
			return vr_err(err, errlen, -errno, "replay writer %s: cannot create %s: %s",
			              path, w->tmp, strerror(errno));
	}
}

/* The versioned header (docs/replay-format.md) written to w->f: the fixed part, the offset
 * table of table bytes, the metadata, padded. */
static int writer_header(struct src_replay_writer *w, const char *path,
                         const struct src_replay_info *info, const uint32_t (*offsets)[2],
                         uint64_t table, const char *metadata, size_t meta_len, char *err,
                         size_t errlen)
{
	uint64_t hsize = SRC_REPLAY_FIXED_SIZE + table + meta_len;
	uint8_t *hdr;
	int rc = 0;

	hsize = (hsize + SRC_REPLAY_ALIGN - 1) / SRC_REPLAY_ALIGN * SRC_REPLAY_ALIGN;
	if (hsize > SRC_REPLAY_HEADER_MAX)
		return vr_err(err, errlen, -EINVAL,
		              "replay writer %s: header of %llu bytes exceeds %u", path,
		              (unsigned long long)hsize, SRC_REPLAY_HEADER_MAX);
	hdr = calloc(1, hsize);
	if (!hdr)
		return vr_err(err, errlen, -ENOMEM, "replay writer: out of memory");
	memcpy(hdr, SRC_REPLAY_MAGIC, 8);
	wr32(hdr + 8, SRC_REPLAY_VERSION);
	wr32(hdr + 12, (uint32_t)hsize);
	wr32(hdr + 16, info->sample_type);
	wr32(hdr + 20, info->samples_per_ascan);
	wr32(hdr + 24, info->ascans_per_bscan);
	wr32(hdr + 28, info->bscans_per_volume);
	wr64(hdr + 32, info->epochs);
	wr32(hdr + 40, info->stride_x);
	wr32(hdr + 44, info->stride_y);
	wr32(hdr + 48, info->flags);
	wr32(hdr + 52, (uint32_t)meta_len);
	/* M = 1 is written as 0, as every file before repeats: such a file stays byte for byte
	 * what it was, and a reader that predates repeats refuses M > 1 (reserved bytes) */
	wr32(hdr + 56, info->repeats > 1 ? info->repeats : 0);
	for (uint64_t e = 0; table && e < info->epochs; e++) {
		wr32(hdr + SRC_REPLAY_FIXED_SIZE + 8 * e, offsets[e][0]);
		wr32(hdr + SRC_REPLAY_FIXED_SIZE + 8 * e + 4, offsets[e][1]);
	}
	if (meta_len)
		memcpy(hdr + SRC_REPLAY_FIXED_SIZE + table, metadata, meta_len);
	if (fwrite(hdr, 1, hsize, w->f) != hsize)
		rc = vr_err(err, errlen, -EIO, "replay writer %s: writing the header: %s", path,
		            strerror(errno));
	free(hdr);
	return rc;
}

int src_replay_writer_open(const char *path, bool raw, const struct src_replay_info *info,
                           const uint32_t (*offsets)[2], const char *metadata,
                           struct src_replay_writer **out, char *err, size_t errlen)
{
	struct src_replay_writer *w;
	size_t meta_len = metadata ? strlen(metadata) : 0;
	uint64_t table;
	int rc;

	rc = writer_check(path, raw, info, offsets, meta_len, &table, err, errlen);
	if (rc)
		return rc;
	w = calloc(1, sizeof(*w));
	if (!w)
		return vr_err(err, errlen, -ENOMEM, "replay writer: out of memory");
	snprintf(w->path, sizeof(w->path), "%s", path);
	w->bscan_bytes = (size_t)info->ascans_per_bscan *
	                 volrec_sample_bytes(info->sample_type, info->samples_per_ascan);
	w->want = info->epochs * src_replay_raw_bscans(info);
	rc = writer_create(w, path, err, errlen);
	if (rc)
		goto out_free;
	if (!raw) {
		rc = writer_header(w, path, info, offsets, table, metadata, meta_len, err, errlen);
		if (rc)
			goto out_unlink;
	}
	*out = w;
	return 0;

out_unlink:
	fclose(w->f);
	unlink(w->tmp);
out_free:
	free(w);
	return rc;
}

int src_replay_writer_bscan(struct src_replay_writer *w, const void *data, size_t size, char *err,
                            size_t errlen)
{
	if (size != w->bscan_bytes)
		return vr_err(err, errlen, -EINVAL,
		              "replay writer %s: B-scan of %zu bytes, not %zu", w->path, size,
		              w->bscan_bytes);
	if (w->done >= w->want)
		return vr_err(err, errlen, -ENOSPC,
		              "replay writer %s: all %llu announced B-scans already written",
		              w->path, (unsigned long long)w->want);
	if (fwrite(data, 1, size, w->f) != size)
		return vr_err(err, errlen, -EIO, "replay writer %s: write: %s", w->path,
		              strerror(errno));
	w->done++;
	return 0;
}

int src_replay_writer_close(struct src_replay_writer *w, char *err, size_t errlen)
{
	int rc = 0;

	if (!w)
		return 0;
	if (w->done != w->want)
		rc = vr_err(err, errlen, -EINVAL,
		            "replay writer %s: %llu of %llu announced B-scans written", w->path,
		            (unsigned long long)w->done, (unsigned long long)w->want);
	if (fflush(w->f) != 0 && !rc)
		rc = vr_err(err, errlen, -EIO, "replay writer %s: flush: %s", w->path,
		            strerror(errno));
	if (fclose(w->f) != 0 && !rc)
		rc = vr_err(err, errlen, -EIO, "replay writer %s: close: %s", w->path,
		            strerror(errno));
	if (!rc && rename(w->tmp, w->path) != 0)
		rc = vr_err(err, errlen, -errno, "replay writer %s: renaming %s to it: %s", w->path,
		            w->tmp, strerror(errno));
	if (rc)
		unlink(w->tmp);
	free(w);
	return rc;
}

void src_replay_writer_abort(struct src_replay_writer *w)
{
	if (!w)
		return;
	fclose(w->f);
	unlink(w->tmp);
	free(w);
}
