/* SPDX-License-Identifier: MIT */
/*
 * Private declarations of the configuration module: the parse context that remembers where
 * every key was written (for FILE:LINE:COLUMN messages), and the steps of cfg_load.
 */
#ifndef VOLREC_CONFIG_INTERNAL_H
#define VOLREC_CONFIG_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <yaml.h>

#include "config.h"

#define CFG_FILE_MAX       (1u << 20)  /* largest configuration file read (1 MiB) */
#define CFG_ARGS_MAX       (64u << 10) /* largest shim.args text (64 KiB) */
#define CFG_TABLE_FILE_MAX (16u << 20) /* largest table file read (16 MiB) */
#define CFG_KEY_MAX        128 /* longest key path ("preprocess.resample.wavelength_nm[3]") */

/* Sanity bounds on sizes derived from the geometry (see docs/configuration.md). */
#define CFG_MAX_VOLUME_BYTES (16ull << 30) /* one output volume, or one low-res float volume */
#define CFG_MAX_SLOTS_BYTES  (64ull << 30) /* all output slots together */
#define CFG_MAX_RING_BYTES   (16ull << 30) /* the raw B-scan ring */
#define CFG_SLOT_ALIGN       (2ull << 20)  /* slot data alignment (DESIGN.md §5) */
#define CFG_MAX_STRIDE_AREA  128           /* sx * sy: S x S temporal weights stay small */
#define CFG_SUN_PATH_MAX     107           /* longest ipc:// path (sockaddr_un.sun_path - 1) */

/* Where a key's value was written: 1-based, line 0 = not written. */
struct cfg_mark {
	size_t line, col;
};

struct cfg_pos {
	char path[CFG_KEY_MAX];
	struct cfg_mark mark;
};

/* State of one cfg_load: the file's name for messages, the directory relative paths resolve
 * against, the marks of every key seen, and the first error. */
struct cfg_ctx {
	struct vr_config *cfg;
	const char *name;
	char base_dir[CFG_PATH_MAX];
	struct cfg_pos *pos;
	size_t npos, cappos;
	struct cfg_mark root; /* the root node (1:1 for an empty document) */
	char *err;
	size_t errlen;
};

/* NULL-terminated YAML names of each enum, in enum order. */
extern const char *const cfg_backend_names[],
        *const cfg_source_names[],
                *const cfg_replay_format_names[],
                        *const cfg_sample_names[],
                                *const cfg_background_names[],
                                        *const cfg_resample_names[],
                                                *const cfg_window_names[],
                                                        *const cfg_recon_mode_names[],
                                                                *const cfg_temporal_names[],
                                                                        *const cfg_combine_names[],
                                                                                *const cfg_overflow_names[],
                                                                                        *const cfg_log_level_names
                                                                                                [];

/* Write "NAME:LINE:COL: KEY: message" at the mark recorded for key (or its nearest recorded
 * ancestor, else the root) and return rc (a negative errno). */
__attribute__((format(printf, 4, 5))) int cfg_error(struct cfg_ctx *ctx, int rc, const char *key,
                                                    const char *fmt, ...);
/* Same, at an explicit mark. */
__attribute__((format(printf, 5, 6))) int
cfg_error_at(struct cfg_ctx *ctx, int rc, struct cfg_mark m, const char *key, const char *fmt, ...);
/* The mark recorded for key, or a zero mark when the key was not written. */
struct cfg_mark cfg_mark_of(const struct cfg_ctx *ctx, const char *key);
/* Whether key was written in the file. */
bool cfg_given(const struct cfg_ctx *ctx, const char *key);

/* Parse the document of parser into ctx->cfg (types, ranges, enums, unknown and duplicate
 * keys); record every key's mark. */
int cfg_parse_document(struct cfg_ctx *ctx, yaml_parser_t *parser);
/* Cross-field checks, defaults that depend on other keys, files and tables. */
int cfg_validate(struct cfg_ctx *ctx);
/* Read a table file (one float per line) of exactly n finite values into t->data. The error
 * is reported at key. */
int cfg_table_load(struct cfg_ctx *ctx, struct cfg_table *t, size_t n, const char *key);

/* Resolve path against base_dir unless absolute; -ENAMETOOLONG when it does not fit. */
int cfg_resolve_path(char *dst, size_t dstlen, const char *base_dir, const char *path);
/* Write s as a double-quoted YAML scalar. */
void cfg_put_quoted(FILE *out, const char *s);

#endif
