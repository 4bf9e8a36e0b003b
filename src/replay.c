/* SPDX-License-Identifier: MIT */
/*
 * The built-in `replay` source and the replay file writer: the versioned format of
 * docs/replay-format.md (checked completely at open) and headerless raw files whose geometry
 * comes from the configuration. The file is mapped read-only and shared; acquire() copies
 * B-scans out, acquire_ref() (the zero-copy extension of shim.h) hands out pointers into it.
 */
#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "../sim/sim.h"

#define DIM_MAX (1u << 20) /* largest K, nx, ny accepted in a header */

struct replay {
	struct src_common com; /* first: src_close reads it */
	char path[CFG_PATH_MAX];
	void *map;
	size_t map_len;
	const uint8_t *data;    /* first sample */
	const uint8_t *offsets; /* the file's offset table, NULL when it has none */
	struct volrec_shim_geometry geo;
	size_t bscan_bytes;
	uint64_t epochs;
	bool loop;
	uint64_t epoch;
	uint32_t b;
	bool pend;
	uint64_t pend_epoch;
	_Atomic uint64_t refs; /* acquire_ref() references not yet released */
};

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

int src_replay_parse(const uint8_t *buf, size_t len, uint64_t file_size,
                     struct src_replay_info *info, char *err, size_t errlen)
{
	struct src_replay_info h;
	uint64_t table, need, epoch_bytes, data;
	uint64_t reserved;

	if (file_size == 0)
		return src_err(err, errlen, -EINVAL, "file is empty");
	if (len < 8 || file_size < 8)
		return src_err(err, errlen, -EINVAL,
		               "file is %llu bytes, too short for the 8-byte magic \"%s\"",
		               (unsigned long long)file_size, SRC_REPLAY_MAGIC);
	if (memcmp(buf, SRC_REPLAY_MAGIC, 8) != 0) {
		char m[9];
		printable(m, buf, 8);
		return src_err(err, errlen, -EINVAL,
		               "not a volrec replay file: magic \"%s\" is not \"%s\" (headerless "
		               "files need source.replay.format: raw)",
		               m, SRC_REPLAY_MAGIC);
	}
	if (len < SRC_REPLAY_FIXED_SIZE || file_size < SRC_REPLAY_FIXED_SIZE)
		return src_err(err, errlen, -EINVAL,
		               "truncated header: the file is %llu bytes, the fixed header alone "
		               "is %u",
		               (unsigned long long)file_size, SRC_REPLAY_FIXED_SIZE);
	memset(&h, 0, sizeof(h));
	h.version = rd32(buf + 8);
	h.header_size = rd32(buf + 12);
	h.sample_type = rd32(buf + 16);
	h.samples_per_ascan = rd32(buf + 20);
	h.ascans_per_bscan = rd32(buf + 24);
	h.bscans_per_volume = rd32(buf + 28);
	h.epochs = rd64(buf + 32);
	h.stride_x = rd32(buf + 40);
	h.stride_y = rd32(buf + 44);
	h.flags = rd32(buf + 48);
	h.metadata_len = rd32(buf + 52);
	reserved = rd64(buf + 56);

	if (h.version != SRC_REPLAY_VERSION)
		return src_err(err, errlen, -EPROTONOSUPPORT,
		               "unsupported format version %u (this volrec reads version %u)",
		               h.version, SRC_REPLAY_VERSION);
	if (h.header_size < SRC_REPLAY_FIXED_SIZE)
		return src_err(err, errlen, -EINVAL,
		               "header_size %u is smaller than the %u-byte fixed header",
		               h.header_size, SRC_REPLAY_FIXED_SIZE);
	if (h.header_size > SRC_REPLAY_HEADER_MAX)
		return src_err(err, errlen, -EINVAL, "header_size %u exceeds the limit of %u bytes",
		               h.header_size, SRC_REPLAY_HEADER_MAX);
	if (h.header_size > file_size)
		return src_err(err, errlen, -EINVAL,
		               "truncated header: header_size %u but the file is %llu bytes",
		               h.header_size, (unsigned long long)file_size);
	if (reserved != 0)
		return src_err(err, errlen, -EINVAL,
		               "reserved header bytes 56..63 are 0x%llx, must be 0",
		               (unsigned long long)reserved);
	if (h.sample_type > VOLREC_SAMPLE_U12GV)
		return src_err(err, errlen, -EINVAL,
		               "unknown sample type %u (0 = u16, 1 = i16, 2 = f32, 3 = u12p, "
		               "4 = u12gv)",
		               h.sample_type);
	if (h.flags & ~SRC_REPLAY_FLAGS_KNOWN)
		return src_err(err, errlen, -EINVAL, "unknown flags 0x%x (known: 0x%x)", h.flags,
		               SRC_REPLAY_FLAGS_KNOWN);
	if (!h.samples_per_ascan || !h.ascans_per_bscan || !h.bscans_per_volume ||
	    h.samples_per_ascan > DIM_MAX || h.ascans_per_bscan > DIM_MAX ||
	    h.bscans_per_volume > DIM_MAX)
		return src_err(err, errlen, -EINVAL,
		               "samples_per_ascan %u, ascans_per_bscan %u, bscans_per_volume %u: "
		               "each must be 1..%u",
		               h.samples_per_ascan, h.ascans_per_bscan, h.bscans_per_volume,
		               DIM_MAX);
	if (!h.stride_x || !h.stride_y || h.stride_x > 1024 || h.stride_y > 1024)
		return src_err(err, errlen, -EINVAL, "stride [%u, %u]: each must be 1..1024",
		               h.stride_x, h.stride_y);
	if (h.epochs == 0)
		return src_err(err, errlen, -EINVAL, "the file holds no epochs (epochs = 0)");
	if (h.metadata_len > SRC_REPLAY_META_MAX)
		return src_err(err, errlen, -EINVAL,
		               "metadata length %u exceeds the limit of %u bytes", h.metadata_len,
		               SRC_REPLAY_META_MAX);
	table = 0;
	if (h.flags & SRC_REPLAY_FLAG_OFFSETS) {
		if (h.epochs > SRC_REPLAY_HEADER_MAX / 8)
			return src_err(err, errlen, -EINVAL,
			               "an offset table of %llu epochs cannot fit in a header "
			               "(at most %u bytes)",
			               (unsigned long long)h.epochs, SRC_REPLAY_HEADER_MAX);
		table = h.epochs * 8;
	}
	need = SRC_REPLAY_FIXED_SIZE + table + h.metadata_len;
	if (need > h.header_size)
		return src_err(err, errlen, -EINVAL,
		               "offset table (%llu bytes) and metadata (%u bytes) need a header of "
		               "%llu bytes, header_size is %u (file %llu bytes)",
		               (unsigned long long)table, h.metadata_len, (unsigned long long)need,
		               h.header_size, (unsigned long long)file_size);
	if (len < need)
		return src_err(err, errlen, -EINVAL,
		               "internal: header buffer of %zu bytes, need %llu", len,
		               (unsigned long long)need);
	const uint8_t *meta = buf + SRC_REPLAY_FIXED_SIZE + table;
	const void *nul = memchr(meta, 0, h.metadata_len);
	if (nul)
		return src_err(err, errlen, -EINVAL,
		               "metadata holds a NUL byte at offset %td (YAML text expected)",
		               (const uint8_t *)nul - buf);

	if (h.sample_type >= VOLREC_SAMPLE_U12P && h.samples_per_ascan % 2)
		return src_err(err, errlen, -EINVAL,
		               "samples_per_ascan %u is odd with the packed sample type %s (K "
		               "must be even)",
		               h.samples_per_ascan, src_sample_name(h.sample_type));
	epoch_bytes = (uint64_t)h.bscans_per_volume * h.ascans_per_bscan *
	              volrec_sample_bytes(h.sample_type, h.samples_per_ascan);
	if (h.epochs > (UINT64_MAX - h.header_size) / epoch_bytes)
		return src_err(err, errlen, -EINVAL,
		               "%llu epochs of %llu bytes overflow a file size",
		               (unsigned long long)h.epochs, (unsigned long long)epoch_bytes);
	data = h.epochs * epoch_bytes;
	if (file_size < h.header_size + data)
		return src_err(
		        err, errlen, -EINVAL,
		        "truncated data: %llu epochs of %llu bytes need %llu bytes after the "
		        "%u-byte header, the file has %llu (%llu bytes missing)",
		        (unsigned long long)h.epochs, (unsigned long long)epoch_bytes,
		        (unsigned long long)data, h.header_size,
		        (unsigned long long)(file_size - h.header_size),
		        (unsigned long long)(h.header_size + data - file_size));
	if (file_size > h.header_size + data)
		return src_err(
		        err, errlen, -EINVAL,
		        "%llu trailing bytes after the last of %llu epochs (file %llu bytes, "
		        "header %u + data %llu)",
		        (unsigned long long)(file_size - h.header_size - data),
		        (unsigned long long)h.epochs, (unsigned long long)file_size, h.header_size,
		        (unsigned long long)data);
	if (h.flags & SRC_REPLAY_FLAG_OFFSETS) {
		for (uint64_t e = 0; e < h.epochs; e++) {
			uint32_t ox = rd32(buf + SRC_REPLAY_FIXED_SIZE + 8 * e);
			uint32_t oy = rd32(buf + SRC_REPLAY_FIXED_SIZE + 8 * e + 4);
			uint32_t ex, ey;
			if (ox >= h.stride_x || oy >= h.stride_y)
				return src_err(
				        err, errlen, -EINVAL,
				        "offset table entry %llu is (%u, %u), outside stride "
				        "[%u, %u]",
				        (unsigned long long)e, ox, oy, h.stride_x, h.stride_y);
			sim_scan_offset(e, h.stride_x, h.stride_y, &ex, &ey);
			if (ox != ex || oy != ey)
				return src_err(
				        err, errlen, -EINVAL,
				        "offset table entry %llu is (%u, %u), but epoch %llu "
				        "is scanned at (%u, %u) (ALGORITHMS.md §2.1)",
				        (unsigned long long)e, ox, oy, (unsigned long long)e, ex,
				        ey);
		}
	}
	*info = h;
	return 0;
}

/* Map path read-only; *map NULL for an empty file. */
static int map_file(const char *path, void **map, size_t *len, char *err, size_t errlen)
{
	struct stat st;
	int fd, rc = 0;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return src_err(err, errlen, -errno, "replay %s: cannot open: %s", path,
		               strerror(errno));
	if (fstat(fd, &st) < 0) {
		rc = src_err(err, errlen, -errno, "replay %s: fstat: %s", path, strerror(errno));
		goto out_close;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = src_err(err, errlen, -EINVAL, "replay %s: not a regular file", path);
		goto out_close;
	}
	*len = (size_t)st.st_size;
	*map = NULL;
	if (st.st_size > 0) {
		/* shared: the pages are the file's own (page cache, tmpfs), never copied on a
		 * write, so a backend can pin them for DMA (zero-copy acquisition) */
		void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
		if (m == MAP_FAILED) {
			rc = src_err(err, errlen, -errno, "replay %s: mmap of %lld bytes: %s", path,
			             (long long)st.st_size, strerror(errno));
			goto out_close;
		}
		*map = m;
	}
out_close:
	close(fd);
	return rc;
}

int src_replay_probe(const char *path, struct src_replay_info *info, char *err, size_t errlen)
{
	void *map;
	size_t len;
	char msg[CFG_ERR_MAX];
	int rc;

	rc = map_file(path, &map, &len, err, errlen);
	if (rc)
		return rc;
	rc = src_replay_parse(map, len, len, info, msg, sizeof(msg));
	if (rc)
		src_err(err, errlen, rc, "replay %s: %s", path, msg);
	if (map)
		munmap(map, len);
	return rc;
}

/* ---- the source ---------------------------------------------------------------------------- */

static int replay_open_abi(const char *args_yaml, struct volrec_shim_info *info, void **handle)
{
	(void)args_yaml;
	(void)info;
	(void)handle;
	return -EOPNOTSUPP; /* built-ins are opened by src_open() from the configuration */
}

static int replay_configure(void *h, const struct volrec_shim_geometry *g)
{
	struct replay *r = h;

	if (memcmp(g, &r->geo, offsetof(struct volrec_shim_geometry, rate)) != 0)
		return src_fail(&r->com, -EINVAL,
		                "replay %s: configure() with a geometry other than the "
		                "configuration's (a new geometry needs a new source)",
		                r->path);
	return 0;
}

static int replay_set_scan_offset(void *h, uint64_t epoch, uint32_t ox, uint32_t oy)
{
	struct replay *r = h;

	if (ox >= r->geo.stride_x || oy >= r->geo.stride_y)
		return src_fail(&r->com, -EINVAL,
		                "replay %s: scan offset (%u, %u) of epoch %llu outside stride "
		                "[%u, %u]",
		                r->path, ox, oy, (unsigned long long)epoch, r->geo.stride_x,
		                r->geo.stride_y);
	if (r->b != 0 && epoch == r->epoch)
		return src_fail(&r->com, -EBUSY,
		                "replay %s: epoch %llu is already being read (B-scan %u of %u)",
		                r->path, (unsigned long long)epoch, r->b, r->geo.bscans_per_volume);
	if (r->offsets) {
		uint64_t fe = epoch % r->epochs;
		uint32_t fx = rd32(r->offsets + 8 * fe), fy = rd32(r->offsets + 8 * fe + 4);
		if (fx != ox || fy != oy)
			return src_fail(
			        &r->com, -EINVAL,
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

	src_pacer_start(&r->com.pacer);
	r->com.started = true;
	return 0;
}

/* Wait for the next B-scan and point *p at it in the mapping (both acquire forms). */
static int replay_next(struct replay *r, int timeout_ms, struct volrec_shim_meta *meta,
                       const uint8_t **p)
{
	uint64_t epoch;
	int rc;

	if (!r->com.started)
		return src_fail(&r->com, -EINVAL, "replay %s: acquire() before start()", r->path);
	epoch = r->b == 0 && r->pend ? r->pend_epoch : r->epoch;
	if (!r->loop && epoch >= r->epochs)
		return src_fail(&r->com, -ENODATA, "replay %s: end of file after %llu epochs",
		                r->path, (unsigned long long)r->epochs);
	rc = src_pacer_wait(&r->com.pacer, timeout_ms);
	if (rc)
		return rc;
	if (r->b == 0) {
		r->epoch = epoch;
		r->pend = false;
	}
	uint64_t fe = r->epoch % r->epochs;
	*p = r->data + (fe * r->geo.bscans_per_volume + r->b) * r->bscan_bytes;
	src_pacer_done(&r->com.pacer);
	if (meta) {
		meta->timestamp_ns = src_now_ns(CLOCK_REALTIME);
		meta->epoch = r->epoch;
		meta->bscan = r->b;
		meta->flags = 0;
	}
	if (++r->b == r->geo.bscans_per_volume) {
		r->b = 0;
		r->epoch++;
	}
	return 0;
}

static int replay_acquire(void *h, void *buf, size_t size, int timeout_ms,
                          struct volrec_shim_meta *meta)
{
	struct replay *r = h;
	const uint8_t *p;
	int rc;

	if (size < r->bscan_bytes)
		return src_fail(&r->com, -EINVAL, "replay %s: buffer of %zu bytes, a B-scan is %zu",
		                r->path, size, r->bscan_bytes);
	rc = replay_next(r, timeout_ms, meta, &p);
	if (rc == 0)
		memcpy(buf, p, r->bscan_bytes);
	return rc;
}

static int replay_ref_regions(void *h, struct volrec_shim_region *regions, uint32_t max,
                              uint32_t *count)
{
	struct replay *r = h;

	if (!count)
		return src_fail(&r->com, -EINVAL, "replay %s: ref_regions() without a count",
		                r->path);
	if (max && !regions)
		return src_fail(&r->com, -EINVAL,
		                "replay %s: ref_regions() with max %u and no array", r->path, max);
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
	const uint8_t *p;
	int rc;

	if (!bscan)
		return src_fail(&r->com, -EINVAL, "replay %s: acquire_ref() without a pointer",
		                r->path);
	rc = replay_next(r, timeout_ms, meta, &p);
	if (rc == 0) {
		atomic_fetch_add(&r->refs, 1);
		*bscan = p;
	}
	return rc;
}

/* May run on another thread than acquire_ref (shim.h): touches only refs and constants. */
static int replay_release_ref(void *h, const void *bscan)
{
	struct replay *r = h;
	const uint8_t *p = bscan;
	uint64_t n = (uint64_t)r->epochs * r->geo.bscans_per_volume;

	if (!p || p < r->data || p >= r->data + n * r->bscan_bytes ||
	    (size_t)(p - r->data) % r->bscan_bytes)
		return src_fail(&r->com, -EINVAL,
		                "replay %s: release_ref(%p): not a B-scan this source handed out",
		                r->path, bscan);
	uint64_t held = atomic_load(&r->refs);
	do {
		if (held == 0)
			return src_fail(&r->com, -EINVAL,
			                "replay %s: release_ref(%p) with no reference held",
			                r->path, bscan);
	} while (!atomic_compare_exchange_weak(&r->refs, &held, held - 1));
	return 0;
}

static int replay_stop(void *h)
{
	struct replay *r = h;

	r->com.started = false;
	return 0;
}

static void replay_close(void *h)
{
	struct replay *r = h;

	if (!r)
		return;
	if (r->map)
		munmap(r->map, r->map_len);
	free(r);
}

static const char *replay_strerror(void *h, int code)
{
	struct replay *r = h;

	return r && code && code == r->com.msg_code ? r->com.msg : NULL;
}

const struct volrec_shim_ops src_replay_ops = {
        .abi_version = VOLREC_SHIM_ABI_VERSION,
        .struct_size = sizeof(struct volrec_shim_ops),
        .open = replay_open_abi,
        .configure = replay_configure,
        .set_scan_offset = replay_set_scan_offset,
        .start = replay_start,
        .acquire = replay_acquire,
        .stop = replay_stop,
        .close = replay_close,
        .strerror = replay_strerror,
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
			return src_err(err, errlen, -EINVAL,                                       \
			               "file has " #field " %u, the configuration's " key          \
			               " is %u",                                                   \
			               (unsigned)h->field, (unsigned)g->field);                    \
	} while (0)
	if (h->sample_type != g->sample_type)
		return src_err(err, errlen, -EINVAL,
		               "file has sample type %s, the configuration's geometry.sample_type "
		               "is %s",
		               src_sample_name(h->sample_type), src_sample_name(g->sample_type));
	SAME(samples_per_ascan, "geometry.samples_per_ascan");
	SAME(ascans_per_bscan, "geometry.ascans_per_bscan");
	SAME(bscans_per_volume, "geometry.bscans_per_volume");
	SAME(stride_x, "geometry.stride[0]");
	SAME(stride_y, "geometry.stride[1]");
#undef SAME
	if (!!(h->flags & SRC_REPLAY_FLAG_BIDIR) != !!g->bidirectional)
		return src_err(
		        err, errlen, -EINVAL,
		        "file was scanned %s, the configuration's geometry.bidirectional is %s",
		        h->flags & SRC_REPLAY_FLAG_BIDIR ? "bidirectionally" : "unidirectionally",
		        g->bidirectional ? "true" : "false");
	return 0;
}

int src_replay_open(const struct vr_config *cfg, unsigned flags, struct src_source *src, char *err,
                    size_t errlen)
{
	const char *path = cfg->source.replay.path;
	char msg[CFG_ERR_MAX];
	struct replay *r;
	uint64_t epoch_bytes;
	int rc;

	if (!path[0])
		return src_err(err, errlen, -EINVAL, "source.replay.path is not set");
	r = calloc(1, sizeof(*r));
	if (!r)
		return src_err(err, errlen, -ENOMEM, "replay: out of memory");
	r->com.kind = "replay";
	snprintf(r->path, sizeof(r->path), "%s", path);
	src_geometry_from_config(&r->geo, cfg, flags);
	r->loop = cfg->source.replay.loop && !(flags & SRC_NO_LOOP);
	r->bscan_bytes = (size_t)r->geo.ascans_per_bscan *
	                 volrec_sample_bytes(r->geo.sample_type, r->geo.samples_per_ascan);
	epoch_bytes = (uint64_t)r->bscan_bytes * r->geo.bscans_per_volume;
	if (!epoch_bytes) {
		rc = src_err(err, errlen, -EINVAL,
		             "replay %s: the configuration's geometry is empty", path);
		goto out_free;
	}
	rc = map_file(path, &r->map, &r->map_len, err, errlen);
	if (rc)
		goto out_free;

	if (cfg->source.replay.format == CFG_REPLAY_RAW) {
		if (r->map_len == 0) {
			rc = src_err(err, errlen, -EINVAL, "replay %s (raw): file is empty", path);
			goto out_unmap;
		}
		if (r->map_len % epoch_bytes) {
			rc = src_err(err, errlen, -EINVAL,
			             "replay %s (raw): file length %zu is not a whole number of "
			             "epochs of %llu bytes (%u B-scans x %u A-scans x %u samples "
			             "%s): %llu whole epochs and %llu bytes left over",
			             path, r->map_len, (unsigned long long)epoch_bytes,
			             r->geo.bscans_per_volume, r->geo.ascans_per_bscan,
			             r->geo.samples_per_ascan, src_sample_name(r->geo.sample_type),
			             (unsigned long long)(r->map_len / epoch_bytes),
			             (unsigned long long)(r->map_len % epoch_bytes));
			goto out_unmap;
		}
		r->epochs = r->map_len / epoch_bytes;
		r->data = r->map;
	} else {
		struct src_replay_info h;
		rc = src_replay_parse(r->map, r->map_len, r->map_len, &h, msg, sizeof(msg));
		if (!rc)
			rc = check_against_config(&h, &r->geo, msg, sizeof(msg));
		if (rc) {
			src_err(err, errlen, rc, "replay %s: %s", path, msg);
			goto out_unmap;
		}
		uint64_t S = (uint64_t)h.stride_x * h.stride_y;
		if ((h.flags & SRC_REPLAY_FLAG_OFFSETS) && r->loop && h.epochs % S) {
			rc = src_err(err, errlen, -EINVAL,
			             "replay %s: the file carries per-epoch scan offsets and holds "
			             "%llu epochs, not a whole number of %llu-epoch offset cycles, "
			             "so it cannot loop (set source.replay.loop: false or record a "
			             "multiple of %llu epochs)",
			             path, (unsigned long long)h.epochs, (unsigned long long)S,
			             (unsigned long long)S);
			goto out_unmap;
		}
		r->epochs = h.epochs;
		r->data = (const uint8_t *)r->map + h.header_size;
		if (h.flags & SRC_REPLAY_FLAG_OFFSETS)
			r->offsets = (const uint8_t *)r->map + SRC_REPLAY_FIXED_SIZE;
	}
	madvise(r->map, r->map_len, MADV_SEQUENTIAL);
	src_pacer_init(&r->com.pacer, r->geo.rate * r->geo.bscans_per_volume,
	               r->geo.bscans_per_volume);
	src->ops = &src_replay_ops;
	src->handle = r;
	src->dl = NULL;
	snprintf(src->info.name, sizeof(src->info.name), "replay");
	snprintf(src->info.version, sizeof(src->info.version), "%s", VOLREC_VERSION);
	snprintf(src->info.device, sizeof(src->info.device), "%.127s", path);
	src->epochs = r->epochs;
	return 0;

out_unmap:
	if (r->map)
		munmap(r->map, r->map_len);
out_free:
	free(r);
	return rc;
}

/* ---- the writer ---------------------------------------------------------------------------- */

struct src_replay_writer {
	FILE *f;
	char path[CFG_PATH_MAX];
	size_t bscan_bytes;
	uint64_t want, done; /* B-scans announced and written */
};

int src_replay_writer_open(const char *path, bool raw, const struct src_replay_info *info,
                           const uint32_t (*offsets)[2], const char *metadata,
                           struct src_replay_writer **out, char *err, size_t errlen)
{
	struct src_replay_writer *w;
	size_t meta_len = metadata ? strlen(metadata) : 0;
	uint64_t table = 0, hsize = 0;
	uint8_t *hdr = NULL;
	int rc;

	if (info->sample_type > VOLREC_SAMPLE_U12GV || !info->samples_per_ascan ||
	    (info->sample_type >= VOLREC_SAMPLE_U12P && info->samples_per_ascan % 2) ||
	    !info->ascans_per_bscan || !info->bscans_per_volume || !info->epochs ||
	    !info->stride_x || !info->stride_y || (info->flags & ~SRC_REPLAY_FLAGS_KNOWN))
		return src_err(err, errlen, -EINVAL, "replay writer %s: invalid header fields",
		               path);
	if (!raw && (info->flags & SRC_REPLAY_FLAG_OFFSETS)) {
		if (!offsets)
			return src_err(err, errlen, -EINVAL,
			               "replay writer %s: offsets flag set without a table", path);
		if (info->epochs > SRC_REPLAY_HEADER_MAX / 8)
			return src_err(err, errlen, -EINVAL,
			               "replay writer %s: %llu epochs do not fit an offset table",
			               path, (unsigned long long)info->epochs);
		for (uint64_t e = 0; e < info->epochs; e++)
			if (offsets[e][0] >= info->stride_x || offsets[e][1] >= info->stride_y)
				return src_err(err, errlen, -EINVAL,
				               "replay writer %s: offset of epoch %llu outside the "
				               "stride",
				               path, (unsigned long long)e);
		table = info->epochs * 8;
	}
	if (meta_len > SRC_REPLAY_META_MAX)
		return src_err(err, errlen, -EINVAL,
		               "replay writer %s: metadata of %zu bytes exceeds %u", path, meta_len,
		               SRC_REPLAY_META_MAX);
	w = calloc(1, sizeof(*w));
	if (!w)
		return src_err(err, errlen, -ENOMEM, "replay writer: out of memory");
	snprintf(w->path, sizeof(w->path), "%s", path);
	w->bscan_bytes = (size_t)info->ascans_per_bscan *
	                 volrec_sample_bytes(info->sample_type, info->samples_per_ascan);
	w->want = info->epochs * info->bscans_per_volume;
	w->f = fopen(path, "wbe");
	if (!w->f) {
		rc = src_err(err, errlen, -errno, "replay writer %s: cannot create: %s", path,
		             strerror(errno));
		goto out_free;
	}
	if (!raw) {
		hsize = SRC_REPLAY_FIXED_SIZE + table + meta_len;
		hsize = (hsize + SRC_REPLAY_ALIGN - 1) / SRC_REPLAY_ALIGN * SRC_REPLAY_ALIGN;
		if (hsize > SRC_REPLAY_HEADER_MAX) {
			rc = src_err(err, errlen, -EINVAL,
			             "replay writer %s: header of %llu bytes exceeds %u", path,
			             (unsigned long long)hsize, SRC_REPLAY_HEADER_MAX);
			goto out_unlink;
		}
		hdr = calloc(1, hsize);
		if (!hdr) {
			rc = src_err(err, errlen, -ENOMEM, "replay writer: out of memory");
			goto out_unlink;
		}
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
		for (uint64_t e = 0; table && e < info->epochs; e++) {
			wr32(hdr + SRC_REPLAY_FIXED_SIZE + 8 * e, offsets[e][0]);
			wr32(hdr + SRC_REPLAY_FIXED_SIZE + 8 * e + 4, offsets[e][1]);
		}
		if (meta_len)
			memcpy(hdr + SRC_REPLAY_FIXED_SIZE + table, metadata, meta_len);
		if (fwrite(hdr, 1, hsize, w->f) != hsize) {
			rc = src_err(err, errlen, -EIO, "replay writer %s: writing the header: %s",
			             path, strerror(errno));
			goto out_unlink;
		}
		free(hdr);
	}
	*out = w;
	return 0;

out_unlink:
	free(hdr);
	fclose(w->f);
	unlink(path);
out_free:
	free(w);
	return rc;
}

int src_replay_writer_bscan(struct src_replay_writer *w, const void *data, size_t size, char *err,
                            size_t errlen)
{
	if (size != w->bscan_bytes)
		return src_err(err, errlen, -EINVAL,
		               "replay writer %s: B-scan of %zu bytes, not %zu", w->path, size,
		               w->bscan_bytes);
	if (w->done >= w->want)
		return src_err(err, errlen, -ENOSPC,
		               "replay writer %s: all %llu announced B-scans already written",
		               w->path, (unsigned long long)w->want);
	if (fwrite(data, 1, size, w->f) != size)
		return src_err(err, errlen, -EIO, "replay writer %s: write: %s", w->path,
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
		rc = src_err(err, errlen, -EINVAL,
		             "replay writer %s: %llu of %llu announced B-scans written", w->path,
		             (unsigned long long)w->done, (unsigned long long)w->want);
	if (fflush(w->f) != 0 && !rc)
		rc = src_err(err, errlen, -EIO, "replay writer %s: flush: %s", w->path,
		             strerror(errno));
	if (fclose(w->f) != 0 && !rc)
		rc = src_err(err, errlen, -EIO, "replay writer %s: close: %s", w->path,
		             strerror(errno));
	if (rc)
		unlink(w->path);
	free(w);
	return rc;
}

void src_replay_writer_abort(struct src_replay_writer *w)
{
	if (!w)
		return;
	fclose(w->f);
	unlink(w->path);
	free(w);
}
