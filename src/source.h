/* SPDX-License-Identifier: MIT */
/*
 * Acquisition sources (src_): the built-in synthetic scanner and replay reader, and shims
 * loaded from a .so, all behind struct volrec_shim_ops (include/volrec/shim.h), so the daemon
 * and `volrec process` drive every source the same way.
 */
#ifndef VOLREC_SOURCE_H
#define VOLREC_SOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "volrec/shim.h"
#include "../config/config.h"

#define SRC_UNPACED 0x1u /* ignore source.rate: deliver as fast as asked (offline processing) */
#define SRC_NO_LOOP 0x2u /* replay: report end of file (-ENODATA) instead of looping */
/* The caller honours VOLREC_SHIM_META_LOST / _INCOMPLETE (told to shims in geometry.flags). */
#define SRC_DROP_MARKS 0x4u

/* An opened source: the ops table and its handle, plus what the daemon needs to know. */
struct src_source {
	const struct volrec_shim_ops *ops;
	void *handle;
	void *dl;                     /* dlopen handle for shims, NULL for built-ins */
	struct volrec_shim_info info; /* as reported by open() */
	uint64_t epochs;              /* epochs available (replay), 0 = unbounded */
};

/*
 * Open and configure the source cfg->source names (synth, replay, shim): loads and checks a
 * shim's ABI, validates a replay file against cfg before anything starts. acquire() returns
 * -ENODATA at the end of a replay file when it does not loop. On failure returns a negative
 * errno and a message naming the file or shim and what is wrong in err; *src is then unusable
 * and needs no close. Close with src_close().
 */
__attribute__((warn_unused_result)) int src_open(const struct vr_config *cfg, unsigned flags,
                                                 struct src_source *src, char *err, size_t errlen);

/* Stop (if started) and close the source, unload a shim. Accepts a zeroed struct. */
void src_close(struct src_source *src);

/* Message for a code returned by one of src->ops (the shim's own text when it has one). */
const char *src_strerror(const struct src_source *src, int code);

/* Whether src offers zero-copy acquisition (ref_regions/acquire_ref/release_ref of
 * include/volrec/shim.h): src->ops is always a full table of this volrec (a shim's shorter
 * table is wrapped), so the fields can be read. */
static inline bool src_has_refs(const struct src_source *src)
{
	return src && src->ops && src->ops->struct_size >= VOLREC_SHIM_OPS_SIZE_REFS &&
	       src->ops->ref_regions && src->ops->acquire_ref && src->ops->release_ref;
}

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
};

struct src_replay_writer;

/*
 * Create path (truncating it) and write a replay file header for info (header_size and
 * version are filled in by the writer): raw = true writes a headerless file instead.
 * offsets: epochs entries of {ox, oy}, required when info->flags has SRC_REPLAY_FLAG_OFFSETS.
 * metadata: YAML text or NULL. Then write epochs * ny B-scans in order with
 * src_replay_writer_bscan and finish with src_replay_writer_close. On failure returns a
 * negative errno with a message naming the file in err; *out is written only on success.
 */
__attribute__((warn_unused_result)) int
src_replay_writer_open(const char *path, bool raw, const struct src_replay_info *info,
                       const uint32_t (*offsets)[2], const char *metadata,
                       struct src_replay_writer **out, char *err, size_t errlen);
/* Append one B-scan (size must be nx * K * sample size). */
__attribute__((warn_unused_result)) int src_replay_writer_bscan(struct src_replay_writer *w,
                                                                const void *data, size_t size,
                                                                char *err, size_t errlen);
/* Flush and close; fails (and removes the file) if fewer B-scans than announced were
 * written. Frees w in every case; NULL is fine. */
__attribute__((warn_unused_result)) int src_replay_writer_close(struct src_replay_writer *w,
                                                                char *err, size_t errlen);
/* Close and remove the unfinished file. NULL is fine. */
void src_replay_writer_abort(struct src_replay_writer *w);

/*
 * Read and check the header of the replay file at path (every rule of docs/replay-format.md
 * that does not need a configuration), without mapping the data. 0 and *info on success, a
 * negative errno and the message in err otherwise.
 */
__attribute__((warn_unused_result)) int
src_replay_probe(const char *path, struct src_replay_info *info, char *err, size_t errlen);

#endif
