/* SPDX-License-Identifier: MIT */
/*
 * Acquisition sources (src_): the built-in synthetic scanner and replay reader, and shims
 * loaded from a .so, all behind struct volrec_shim_ops (include/volrec/shim.h) and the src_
 * wrappers below, so every caller drives every source the same way.
 */
#ifndef VOLREC_SOURCE_H
#define VOLREC_SOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <volrec/shim.h>

#include "base/base.h"
#include "config/config.h"

#define SRC_UNPACED 0x1u /* ignore source.rate: deliver as fast as asked (offline processing) */
#define SRC_NO_LOOP 0x2u /* replay: report end of file (-ENODATA) instead of looping */
/* The caller honours VOLREC_SHIM_META_LOST / _INCOMPLETE (told to shims in geometry.flags). */
#define SRC_DROP_MARKS 0x4u

/*
 * An opened source. Fields other than info and epochs are the wrappers' business: call the
 * source only through src_set_scan_offset() ... src_release_ref() below, which enforce the
 * call order of include/volrec/shim.h once for every source and turn a broken return
 * (a positive value) into an error.
 */
struct src_source {
	struct volrec_shim_ops impl;  /* the source's table (a shim's is copied: NULL past the
	                               * struct_size it declares) */
	void *handle;                 /* the source's own state */
	void *dl;                     /* dlopen handle for shims, NULL for built-ins */
	const char *kind;             /* "synth", "replay", "shim" (messages) */
	bool open;                    /* opened: close() is due (the handle may be NULL) */
	bool started;                 /* between src_start() and src_stop() */
	bool by_copy, by_ref;         /* src_acquire() / src_acquire_ref() used */
	bool regions;                 /* src_ref_regions() succeeded */
	struct volrec_shim_info info; /* as reported by open(), valid UTF-8 */
	uint64_t epochs;              /* epochs available (replay), 0 = unbounded */
	uint64_t first_epoch;         /* the epoch number the source starts at (a recording's
	                               * first recorded epoch; 0 otherwise) */
};

/*
 * Open and configure the source cfg->source names (synth, replay, shim): loads and checks a
 * shim's file and ABI, validates a replay file against cfg before anything starts. On
 * failure returns a negative errno and a message naming the file or shim and what is wrong
 * in err; *src is then untouched and needs no close. Close with src_close().
 */
VR_MUST_CHECK int src_open(const struct vr_config *cfg, unsigned flags, struct src_source *src,
                           char *err, size_t errlen);

/* Stop (if started) and close the source. Accepts a zeroed struct. */
void src_close(struct src_source *src);
/* The same: 0, or stop()'s error (the source is closed all the same) with its message
 * (src_strerror) in err. */
int src_close_checked(struct src_source *src, char *err, size_t errlen);

/*
 * The calls of include/volrec/shim.h, each 0 or a negative errno (a source that returns a
 * positive value gets -EPROTO). The text for a code any of them returned is
 * src_strerror(src, code), asked on the same thread before the next call.
 *
 * src_set_scan_offset: the offset (ox, oy) of `epoch`, before its first B-scan (and before
 *   src_start). src_start: once (again only after src_stop). src_acquire: copy the next
 *   B-scan (size bytes, at least one B-scan) into buf, waiting at most timeout_ms:
 *   -ETIMEDOUT when nothing came, -ENODATA at the end of a replay file that does not loop;
 *   -EINVAL before src_start. src_stop: 0 when not started.
 */
VR_MUST_CHECK int src_set_scan_offset(struct src_source *src, uint64_t epoch, uint32_t ox,
                                      uint32_t oy);
VR_MUST_CHECK int src_start(struct src_source *src);
VR_MUST_CHECK int src_acquire(struct src_source *src, void *buf, size_t size, int timeout_ms,
                              struct volrec_shim_meta *meta);
int src_stop(struct src_source *src);

/*
 * Zero-copy acquisition (docs/shim.md), for a source where src_has_refs() is true. A source
 * delivers either by copy (src_acquire) or by reference, never both. src_ref_regions: before
 * src_start, the memory every reference lies in (writes min(max, n) regions, *count = n; may
 * fail, e.g. a replay file that cannot be leased: then copy). src_acquire_ref: only after a
 * successful src_ref_regions; *bscan stays valid until src_release_ref(src, *bscan), which
 * may be called from another thread (it touches nothing the acquiring thread writes).
 */
bool src_has_refs(const struct src_source *src);
VR_MUST_CHECK int src_ref_regions(struct src_source *src, struct volrec_shim_region *regions,
                                  uint32_t max, uint32_t *count);
VR_MUST_CHECK int src_acquire_ref(struct src_source *src, const void **bscan, int timeout_ms,
                                  struct volrec_shim_meta *meta);
int src_release_ref(const struct src_source *src, const void *bscan);

/* Message for a code one of the calls above returned on this thread, naming the source and
 * the call once: the source's own text, which names the source, after the call ("acquire:
 * fault shim: injected error ..."); the wrappers' own ("shim fault-shim: acquire() before
 * start()"); without a text, the source, the call and strerror's ("shim fault-shim: acquire:
 * Input/output error"). One line of valid UTF-8 (bytes that are not are replaced), valid
 * until the next src_strerror() on this thread. */
const char *src_strerror(const struct src_source *src, int code);

/*
 * Check the shim library before anything loads it (a path, or a short name resolved as
 * source.shim.library's: NAME-shim.so in the shim directory), so a broken file is an error and
 * not a crash of the loading process: a readable regular file holding a shared object ELF
 * header for this machine whose program headers and loadable segments lie inside the file.
 * With in_child, then load it in a child process (dlopen, volrec_shim_entry(), the ABI
 * checks of src_open, not open()) and report how that went: a shim that crashes its
 * loader is reported with the signal. 0 or a negative errno with the message in err.
 */
VR_MUST_CHECK int src_shim_check(const char *library, bool in_child, char *err, size_t errlen);

/* ---- replay files (docs/replay-format.md) ------------------------------------------------ */

#define SRC_REPLAY_MAGIC        "VOLRECRP" /* 8 bytes, no NUL */
#define SRC_REPLAY_VERSION      1u
#define SRC_REPLAY_FIXED_SIZE   64u         /* bytes of the fixed part of the header */
#define SRC_REPLAY_ALIGN        4096u       /* the writer aligns the data start to this */
#define SRC_REPLAY_HEADER_MAX   (64u << 20) /* largest header_size accepted */
#define SRC_REPLAY_META_MAX     (1u << 20)  /* largest YAML metadata accepted */
#define SRC_REPLAY_FLAG_BIDIR   0x1u        /* odd B-scans were scanned right to left */
#define SRC_REPLAY_FLAG_OFFSETS 0x2u        /* an (ox, oy) table of one entry per epoch follows */
#define SRC_REPLAY_FLAGS_KNOWN  0x3u
#define SRC_REPLAY_REPEATS_MAX  16u /* M at most (geometry.repeats) */

/* The header of a replay file as read or to be written. */
struct src_replay_info {
	uint32_t version;
	uint32_t header_size;       /* data start; multiple of SRC_REPLAY_ALIGN when written */
	uint32_t sample_type;       /* enum volrec_sample_type */
	uint32_t samples_per_ascan; /* K */
	uint32_t ascans_per_bscan;  /* nx */
	uint32_t bscans_per_volume; /* ny */
	uint64_t epochs;
	uint32_t stride_x, stride_y;
	uint32_t flags;        /* SRC_REPLAY_FLAG_* */
	uint32_t metadata_len; /* bytes of YAML text */
	uint32_t repeats;      /* M: acquisitions of each B-scan position, 1..16 (a version 1
	                        * file written before repeats has 0 there: read as 1) */
	uint32_t sections_len; /* version 2: bytes of sections after the metadata */
	uint64_t complete;     /* version 2: complete frames the file holds (epochs written) */
};

/* Raw B-scans of one epoch of a file: ny positions x M repeats ([b][m] order). */
static inline uint64_t src_replay_raw_bscans(const struct src_replay_info *h)
{
	return (uint64_t)h->bscans_per_volume * (h->repeats ? h->repeats : 1);
}
/* Bytes of one epoch's samples. */
static inline uint64_t src_replay_epoch_bytes(const struct src_replay_info *h)
{
	return src_replay_raw_bscans(h) * h->ascans_per_bscan *
	       volrec_sample_bytes(h->sample_type, h->samples_per_ascan);
}

struct src_replay_writer;

/*
 * Write a replay file at path: a new file beside it (path.tmp-PID-N), renamed over path by
 * src_replay_writer_close once complete, so that a process reading the old path never sees a
 * partial or truncated file. Starts with a header for info (header_size and version are
 * filled in by the writer); raw = true writes a headerless file instead.
 * offsets: epochs entries of {ox, oy}, required when info->flags has SRC_REPLAY_FLAG_OFFSETS.
 * metadata: YAML text or NULL. Then write epochs * ny B-scans in order with
 * src_replay_writer_bscan and finish with src_replay_writer_close. On failure returns a
 * negative errno with a message naming the file in err; *out is written only on success.
 */
VR_MUST_CHECK int src_replay_writer_open(const char *path, bool raw,
                                         const struct src_replay_info *info,
                                         const uint32_t (*offsets)[2], const char *metadata,
                                         struct src_replay_writer **out, char *err, size_t errlen);
/* Append one B-scan (size must be nx * K * sample size). */
VR_MUST_CHECK int src_replay_writer_bscan(struct src_replay_writer *w, const void *data,
                                          size_t size, char *err, size_t errlen);
/* Flush, close and rename the file to its path; fails (and removes the new file, leaving
 * path as it was) if fewer B-scans than announced were written. Frees w in every case; NULL
 * is fine. */
VR_MUST_CHECK int src_replay_writer_close(struct src_replay_writer *w, char *err, size_t errlen);
/* Close and remove the unfinished file (path is left as it was). NULL is fine. */
void src_replay_writer_abort(struct src_replay_writer *w);

/*
 * Read and check the header of the replay file at path (every rule of docs/replay-format.md
 * that does not need a configuration), without mapping the data. 0 and *info on success, a
 * negative errno and the message in err otherwise.
 */
VR_MUST_CHECK int src_replay_probe(const char *path, struct src_replay_info *info, char *err,
                                   size_t errlen);

#endif
