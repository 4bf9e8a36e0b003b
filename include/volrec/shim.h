/* SPDX-License-Identifier: MIT */
/*
 * The frame-grabber shim ABI: what a shared library must export so that volrecd can acquire
 * raw spectral B-scans from it. The built-in `synth` and `replay` sources implement the same
 * table. A shim is loaded with dlopen(); volrecd calls volrec_shim_entry(), checks abi_version
 * and struct_size, then drives it from one acquisition thread:
 *
 *   open -> configure -> { set_scan_offset(epoch) -> acquire x ny } ... -> stop -> close
 *
 * with start() after configure and the first set_scan_offset. Every int-returning function
 * returns 0 or a negative errno (-ETIMEDOUT for an acquire timeout); strerror() may give a
 * more precise text for a code. Functions are called from one thread at a time.
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
};

/* What volrecd expects the shim to deliver; given to configure(). */
struct volrec_shim_geometry {
	uint32_t samples_per_ascan; /* K */
	uint32_t ascans_per_bscan;  /* nx */
	uint32_t bscans_per_volume; /* ny (B-scans of one epoch) */
	uint32_t sample_type;       /* enum volrec_sample_type */
	uint32_t stride_x;          /* sx: full-resolution positions per low-res A-scan */
	uint32_t stride_y;          /* sy */
	uint32_t bidirectional;     /* 1: odd B-scans are scanned right to left */
	uint32_t reserved;          /* 0 */
	double rate;                /* requested epochs per second, 0 = free running */
};

/* What the shim tells about itself in open(). */
struct volrec_shim_info {
	char name[64];    /* e.g. "synth", "acme-grabber" */
	char version[32]; /* the shim's own version */
	char device[128]; /* serial number or description, may be "" */
	uint32_t flags;   /* reserved, 0 */
};

#define VOLREC_SHIM_META_DROPPED_BEFORE 0x1u /* the grabber lost data before this B-scan */

/* Filled by acquire() for each B-scan. */
struct volrec_shim_meta {
	uint64_t timestamp_ns; /* CLOCK_REALTIME of acquisition (end of the B-scan) */
	uint64_t epoch;        /* epoch the B-scan belongs to */
	uint32_t bscan;        /* index 0..ny-1 within the epoch */
	uint32_t flags;        /* VOLREC_SHIM_META_* */
};

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
	/* Fill buffer (size = nx * K * sample size bytes) with the next B-scan, waiting at most
	 * timeout_ms. -ETIMEDOUT when nothing came in time; the buffer is then unspecified. */
	int (*acquire)(void *handle, void *buffer, size_t size, int timeout_ms,
	               struct volrec_shim_meta *meta);
	int (*stop)(void *handle);
	void (*close)(void *handle); /* accepts a handle after any failure */
	/* Text for a code this shim returned; NULL to fall back to strerror(-code). */
	const char *(*strerror)(void *handle, int code);
};

/* The one symbol a shim exports. */
const struct volrec_shim_ops *volrec_shim_entry(void);

#ifdef __cplusplus
}
#endif

#endif
