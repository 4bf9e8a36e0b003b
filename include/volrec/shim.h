/* SPDX-License-Identifier: MIT */
/*
 * The frame-grabber shim ABI: what a shared library must export so that volrecd can acquire
 * raw spectral B-scans from it. The built-in `synth` and `replay` sources implement the same
 * table. A shim is loaded with dlopen(); volrecd calls volrec_shim_entry(), checks abi_version
 * and struct_size, then drives it from one acquisition thread:
 *
 *   open -> configure -> { set_scan_offset(epoch) -> acquire x ny x M } ... -> stop -> close
 *
 * with start() after configure and the first set_scan_offset (M = geometry.repeats: each
 * B-scan position acquired M times in a row, by a shim that says it repeats with
 * VOLREC_SHIM_INFO_REPEATS; else 1). Every int-returning function
 * returns 0 or a negative errno (-ETIMEDOUT for an acquire timeout); strerror() may give a
 * more precise text for a code. Functions are called from one thread at a time (the optional
 * release_ref() excepted, see below).
 */
#ifndef VOLREC_SHIM_H
#define VOLREC_SHIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VOLREC_SHIM_ABI_VERSION 1u
#define VOLREC_SHIM_ENTRY       "volrec_shim_entry"

enum volrec_sample_type {
	VOLREC_SAMPLE_U16 = 0, /* unsigned 16-bit little-endian */
	VOLREC_SAMPLE_I16 = 1, /* signed 16-bit little-endian */
	VOLREC_SAMPLE_F32 = 2, /* IEEE float32 little-endian */
	/* Two 12-bit samples in three bytes b0 b1 b2 (an A-scan's K is even): */
	VOLREC_SAMPLE_U12P =
	        3, /* PFNC Mono12p: s0 = b0 | (b1 & 0xF) << 8, s1 = b1 >> 4 | b2 << 4 */
	VOLREC_SAMPLE_U12GV = 4, /* GigE Vision Mono12Packed: s0 = b0 << 4 | (b1 & 0xF),
	                          * s1 = b2 << 4 | b1 >> 4 */
};

/* Bytes of n samples of type t (n even for the packed types), 0 for an unknown type: a
 * B-scan is volrec_sample_bytes(t, nx * K) bytes. */
static inline size_t volrec_sample_bytes(uint32_t t, size_t n)
{
	switch (t) {
	case VOLREC_SAMPLE_U16:
	case VOLREC_SAMPLE_I16:
		return n * 2;
	case VOLREC_SAMPLE_F32:
		return n * 4;
	case VOLREC_SAMPLE_U12P:
	case VOLREC_SAMPLE_U12GV:
		return n / 2 * 3;
	default:
		return 0;
	}
}

/* What volrecd expects the shim to deliver; given to configure(). */
struct volrec_shim_geometry {
	uint32_t samples_per_ascan; /* K */
	uint32_t ascans_per_bscan;  /* nx */
	uint32_t bscans_per_volume; /* ny (B-scans of one epoch) */
	uint32_t sample_type;       /* enum volrec_sample_type */
	uint32_t stride_x;          /* sx: full-resolution positions per low-res A-scan */
	uint32_t stride_y;          /* sy */
	uint32_t bidirectional;     /* 1: odd B-scans are scanned right to left */
	uint32_t flags;             /* VOLREC_SHIM_GEOMETRY_*: what the caller understands (was
	                             * `reserved`, always 0, before these flags) */
	double rate;                /* requested epochs per second, 0 = free running */
	/* Present only with VOLREC_SHIM_GEOMETRY_HELD in flags (a caller built against an
	 * earlier header passes the struct without them): */
	uint32_t held_bscans; /* B-scans the caller may hold by reference at once (acquire_ref
	                       * without release_ref: volrecd's ring, pipeline.ring_bscans) */
	uint32_t reserved;    /* 0 */
	/* Present only with VOLREC_SHIM_GEOMETRY_REPEATS in flags: */
	uint32_t repeats;   /* M, 1..16: acquisitions of each B-scan position in a row; an
	                     * epoch is ny x M B-scans, position-major ([b][m]) */
	uint32_t reserved2; /* 0 */
};

/* What the shim tells about itself in open(). */
struct volrec_shim_info {
	char name[64];    /* e.g. "synth", "acme-grabber" */
	char version[32]; /* the shim's own version */
	char device[128]; /* serial number or description, may be "" */
	uint32_t flags;   /* VOLREC_SHIM_INFO_*: what the shim understands (0 before these
	                   * flags) */
};

/* info.flags: the shim reads geometry.repeats (VOLREC_SHIM_GEOMETRY_REPEATS) and delivers M
 * repeats of each position with meta.repeat set. volrecd refuses geometry.repeats > 1 for a
 * shim without it. */
#define VOLREC_SHIM_INFO_REPEATS 0x1u

/* geometry.flags: the caller honours VOLREC_SHIM_META_LOST and VOLREC_SHIM_META_INCOMPLETE.
 * Without it a shim must not set them (it reports a loss as an error instead). */
#define VOLREC_SHIM_GEOMETRY_MARKS 0x1u
/* geometry.flags: held_bscans (and reserved) follow rate. A zero-copy shim sizes its buffers
 * from it: fewer than held_bscans plus one epoch, and a caller that falls behind holds them
 * all, so the source loses B-scans where the caller would have dropped epochs. */
#define VOLREC_SHIM_GEOMETRY_HELD 0x2u
/* geometry.flags: repeats (and reserved2) follow reserved, and the caller passes acquire() a
 * struct volrec_shim_meta with repeat (and reserved): only then may a shim write them. Set by
 * a caller that also sets VOLREC_SHIM_GEOMETRY_HELD. */
#define VOLREC_SHIM_GEOMETRY_REPEATS 0x4u

#define VOLREC_SHIM_META_DROPPED_BEFORE 0x1u /* the grabber lost data before this B-scan */
/* The B-scan due at (epoch, bscan) never arrived (a frame-id gap, the grabber had no buffer):
 * the call succeeds, counting the position, but the buffer holds no data. */
#define VOLREC_SHIM_META_LOST 0x2u
/* The B-scan due at (epoch, bscan) arrived incomplete (missing packets, wrong size): the
 * call succeeds, counting the position, but the data must not be used. */
#define VOLREC_SHIM_META_INCOMPLETE 0x4u

/* Filled by acquire() for each B-scan. */
struct volrec_shim_meta {
	uint64_t timestamp_ns; /* CLOCK_REALTIME of acquisition (end of the B-scan) */
	uint64_t epoch;        /* epoch the B-scan belongs to */
	uint32_t bscan;        /* index 0..ny-1 within the epoch */
	uint32_t flags;        /* VOLREC_SHIM_META_* */
	/* Only with VOLREC_SHIM_GEOMETRY_REPEATS in geometry.flags (a caller built against an
	 * earlier header passes the struct without them: a shim must not write them then): */
	uint32_t repeat;   /* 0..M-1: which acquisition of position bscan this is */
	uint32_t reserved; /* 0 */
};

struct volrec_shim_region;

struct volrec_shim_ops {
	uint32_t abi_version; /* VOLREC_SHIM_ABI_VERSION */
	uint32_t struct_size; /* sizeof(struct volrec_shim_ops) of the shim's build */

	/* args_yaml: the `source.shim.args` mapping as a YAML document ("{}" when absent).
	 * On success *handle is the shim's state, passed to every other call. */
	int (*open)(const char *args_yaml, struct volrec_shim_info *info, void **handle);
	/* -EINVAL (with strerror text) when the shim cannot deliver this geometry. */
	int (*configure)(void *handle, const struct volrec_shim_geometry *geometry);
	/* The scan offset (ox, oy) of `epoch`, told before its first B-scan is acquired. */
	int (*set_scan_offset)(void *handle, uint64_t epoch, uint32_t ox, uint32_t oy);
	int (*start)(void *handle);
	/* Fill buffer (size = volrec_sample_bytes(type, nx * K)) with the next B-scan, waiting at
	 * most timeout_ms. -ETIMEDOUT when nothing came in time; the buffer is then unspecified.
	 * meta says which (epoch, bscan) it is; with geometry.flags VOLREC_SHIM_GEOMETRY_MARKS a
	 * position that was lost or arrived incomplete is reported by a flag instead of data. */
	int (*acquire)(void *handle, void *buffer, size_t size, int timeout_ms,
	               struct volrec_shim_meta *meta);
	int (*stop)(void *handle);
	void (*close)(void *handle); /* accepts a handle after any failure */
	/* Text for a code this shim returned; NULL to fall back to strerror(-code). */
	const char *(*strerror)(void *handle, int code);

	/*
	 * ---- Optional: zero-copy acquisition (added in ABI version 1; docs/shim.md) ----------
	 * For shims whose B-scans already lie in memory they own (a frame grabber's DMA ring, a
	 * mapped file): volrec takes pointers instead of having each B-scan copied. The three
	 * fields below exist only when struct_size >= VOLREC_SHIM_OPS_SIZE_REFS (volrec never
	 * reads past struct_size), and the extension is used only when all three are non-NULL;
	 * a table of VOLREC_SHIM_OPS_SIZE_BASE bytes, or NULL here, gets acquire() as before.
	 * For one handle volrec calls either acquire() or acquire_ref(), never both.
	 */
	/* After configure(), before start(), once: the memory every acquire_ref() pointer lies
	 * in. Writes min(max, n) regions and sets *count = n (max may be 0 to ask n). The
	 * regions stay mapped at the same addresses, contents changed only by the shim's own
	 * acquisition, until close(); they may be read-only. volrec registers them with the
	 * backend (cudaHostRegister on CUDA); when it cannot, it uses acquire() instead. */
	int (*ref_regions)(void *handle, struct volrec_shim_region *regions, uint32_t max,
	                   uint32_t *count);
	/* As acquire(), but *bscan points at the next B-scan (volrec_sample_bytes(type, nx * K),
	 * wholly inside one region) in the shim's memory; it stays valid and unchanged until
	 * release_ref(handle, that pointer). When all its buffers are held the shim waits up to
	 * timeout_ms as for data (-ETIMEDOUT). volrec holds at most pipeline.ring_bscans. */
	int (*acquire_ref)(void *handle, const void **bscan, int timeout_ms,
	                   struct volrec_shim_meta *meta);
	/* Give back one reference acquire_ref() handed out: exactly once each, in any order,
	 * possibly after stop(), always before close(). The same pointer may be handed out again
	 * while an earlier reference to it is held (a looping file); each is released once. May
	 * be called from another thread than the acquiring one, concurrently with any call but
	 * close() and another release_ref(); must not block. */
	int (*release_ref)(void *handle, const void *bscan);
};

/* A block of shim-owned memory that acquire_ref() pointers lie in. */
struct volrec_shim_region {
	const void *base;
	size_t size; /* bytes */
};

/* struct_size of a table without the zero-copy fields, and the least with all of them. */
#define VOLREC_SHIM_OPS_SIZE_BASE offsetof(struct volrec_shim_ops, ref_regions)
#define VOLREC_SHIM_OPS_SIZE_REFS                                                                  \
	(offsetof(struct volrec_shim_ops, release_ref) + sizeof(int (*)(void *, const void *)))

/* The one symbol a shim exports. */
const struct volrec_shim_ops *volrec_shim_entry(void);

#ifdef __cplusplus
}
#endif

#endif
