/* SPDX-License-Identifier: MIT */
/*
 * Private declarations of the configuration module: the schema (one table of keys, schema.c),
 * the parse context that remembers where every key was written (for FILE:LINE:COLUMN
 * messages), and the steps of cfg_load and cfg_set_keys.
 */
#ifndef VOLREC_CONFIG_INTERNAL_H
#define VOLREC_CONFIG_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <yaml.h>

#include "config/config.h"

#define CFG_FILE_MAX       (1u << 20)  /* largest configuration file read (1 MiB) */
#define CFG_ARGS_MAX       (64u << 10) /* largest shim.args text (64 KiB) */
#define CFG_TABLE_FILE_MAX (16u << 20) /* largest table file read (16 MiB) */
#define CFG_KEY_MAX        128 /* longest key path ("preprocess.resample.wavelength_nm[3]") */
#define CFG_KEYS_MAX       128 /* most keys in the schema */

/* Sanity bounds on sizes derived from the geometry (see docs/configuration.md). */
#define CFG_MAX_VOLUME_BYTES (16ull << 30) /* one output volume, or one low-res float volume */
#define CFG_MAX_SLOTS_BYTES  (64ull << 30) /* all output slots together */
#define CFG_MAX_RING_BYTES   (16ull << 30) /* the raw B-scan ring */
#define CFG_SLOT_ALIGN       (2ull << 20)  /* slot data alignment (docs/protocol.md) */
#define CFG_MAX_STRIDE_AREA  128           /* sx * sy: S x S temporal weights stay small */
#define CFG_SUN_PATH_MAX     107           /* longest ipc:// path (sockaddr_un.sun_path - 1) */

/* ---- the schema (schema.c) ------------------------------------------------------------- */

enum cfg_type {
	CFG_T_BOOL,  /* true | false */
	CFG_T_INT,   /* int in [min, max] */
	CFG_T_U32,   /* uint32_t in [min, max] */
	CFG_T_U64,   /* uint64_t, any value */
	CFG_T_F64,   /* finite double in [min, max] (or (min, max] with gt_min) */
	CFG_T_ENUM,  /* one of names, stored as an int-sized enum */
	CFG_T_NAME,  /* one of names, stored as a string into char[size] */
	CFG_T_STR,   /* string into char[size] */
	CFG_T_PATH,  /* file name into char[size], resolved against the config's directory */
	CFG_T_TABLE, /* file name of a table: struct cfg_table, read by validation */
	CFG_T_ARGS,  /* any mapping, re-emitted as flow YAML text into an owned char * */
	CFG_T_U32S,  /* exactly n uint32_t in [min, max] */
	CFG_T_F64S,  /* exactly n finite doubles in [min, max] */
	CFG_T_LIST,  /* up to n strings into char[n][CFG_PATH_MAX], uint32_t count at count */
	CFG_T_INTS, /* 1 to n ints in [min, max] into int[n], uint32_t count at count (0: absent) */
};

enum cfg_reload {
	CFG_STRUCTURAL = 1, /* a change rebuilds the pipeline (new session) */
	CFG_LIVE = 2,       /* a change applies from the next epoch */
};

struct cfg_key {
	const char *path; /* "preprocess.db_range" */
	enum cfg_type type;
	enum cfg_reload reload;
	size_t off, size;         /* the destination in struct vr_config */
	size_t n;                 /* _U32S, _F64S: elements; _LIST, _INTS: capacity */
	size_t count;             /* _LIST, _INTS: offset of the count */
	double min, max;          /* numbers and their elements */
	bool gt_min;              /* min itself is excluded */
	const char *const *names; /* _ENUM, _NAME: NULL-terminated, in enum order */
	const char *shape; /* _U32S, _F64S, _INTS: how the sequence reads ("[lo, hi] in dB") */
	double def[4];     /* default of numbers, booleans, enums and their elements */
	const char *sdef;  /* default of strings */
	size_t when;       /* nonzero: the key holds a value only when the int here... */
	int when_is;       /* ...is this (which of exclusive keys validation found) */
	/* A live key: NULL, or why going from a to b is structural after all (NULL: it is not). */
	const char *(*structural_if)(const struct vr_config *a, const struct vr_config *b);
};

extern const struct cfg_key cfg_keys[];
extern const size_t cfg_nkeys;

/* A child of a section: a key, or a section (key NULL), named name[0..len). */
struct cfg_child {
	const char *name;
	size_t len;
	const struct cfg_key *key;
};

/* The key at path, or NULL. */
const struct cfg_key *cfg_key_find(const char *path);
/* Whether path is top, or a key or section below it ("" is the root, above all). */
bool cfg_path_under(const char *path, const char *top);
/* The children of the section at path into out[CFG_KEYS_MAX], in table order; their count
 * (0: path is no section). */
size_t cfg_children(const char *path, struct cfg_child *out);
bool cfg_is_section(const char *path);
/* The names of those children as "a, b, c". */
void cfg_child_names(const char *path, char *buf, size_t len);
/* "a.b: unknown key (allowed in a: ...)" about the first unknown part of path. */
void cfg_unknown_key(const char *path, char *buf, size_t len);

static inline void *cfg_at(const struct vr_config *c, const struct cfg_key *k)
{
	return (char *)c + k->off;
}
/* Whether k holds a value in c (a file name is set, validation chose it). */
bool cfg_key_present(const struct cfg_key *k, const struct vr_config *c);
/* Whether a and b hold the same value of k (tables by content). */
bool cfg_key_equal(const struct cfg_key *k, const struct vr_config *a, const struct vr_config *b);
/* Put k back to its default, freeing what it owned. */
void cfg_key_reset(const struct cfg_key *k, struct vr_config *c);
/* The first key whose change from a to b is structural, and why; NULL when it is live. */
const struct cfg_key *cfg_structural_key(const struct vr_config *a, const struct vr_config *b,
                                         const char **why);

/* ---- parsing and validation ------------------------------------------------------------- */

/* Where a key's value was written: 1-based, line 0 = not written. */
struct cfg_mark {
	size_t line, col;
};

struct cfg_pos {
	char path[CFG_KEY_MAX];
	struct cfg_mark mark;
};

/* State of one cfg_load or cfg_set_keys: the file's name for messages (NULL: no positions),
 * the directory relative paths resolve against, the marks of what was written, which keys
 * hold a value, and the first error. */
struct cfg_ctx {
	struct vr_config *cfg;
	const char *name;
	char base_dir[CFG_PATH_MAX];
	struct cfg_pos *pos;
	size_t npos, cappos;
	struct cfg_mark root;     /* the root node (1:1 for an empty document) */
	bool given[CFG_KEYS_MAX]; /* by cfg_keys index: written now, or held from before */
	bool keep_files;          /* files already checked: do not look at them again */
	bool backend_only;        /* cfg_check_backend: no source, pipeline or ring rules */
	char *err;
	size_t errlen;
};

/* Write "NAME:LINE:COL: KEY: message" (without a NAME: "KEY: message") at the mark recorded
 * for key (or its nearest recorded ancestor, else the root) and return rc (a negative errno). */
VR_PRINTF(4, 5) int cfg_error(struct cfg_ctx *ctx, int rc, const char *key, const char *fmt, ...);
/* Same, at an explicit mark. */
VR_PRINTF(5, 6)
int cfg_error_at(struct cfg_ctx *ctx, int rc, struct cfg_mark m, const char *key, const char *fmt,
                 ...);
/* The mark recorded for key, or a zero mark when the key was not written. */
struct cfg_mark cfg_mark_of(const struct cfg_ctx *ctx, const char *key);
/* Whether key holds a value: written now, or (cfg_set_keys) held from before. */
bool cfg_given(const struct cfg_ctx *ctx, const char *key);

/* Parse the document of parser into ctx->cfg (types, ranges, enums, unknown and duplicate
 * keys); record every key's mark. */
int cfg_parse_document(struct cfg_ctx *ctx, yaml_parser_t *parser);
/* 0, or -EINVAL at the first collection nested deeper than CFG_YAML_DEPTH_MAX in text (before
 * the document is loaded, which would take time growing with the square of the nesting) or the
 * first explicit tag (!!str 4 is the string "4", which the schema would read as 4); a syntax
 * error is left to the load. */
int cfg_yaml_precheck(struct cfg_ctx *ctx, const unsigned char *text, size_t len, const char *key);
/* Parse one value (YAML text) of the key or section at path into ctx->cfg. */
int cfg_parse_value(struct cfg_ctx *ctx, const char *path, const char *text);
/* Cross-field checks, defaults that depend on other keys, files and tables. */
int cfg_validate(struct cfg_ctx *ctx);

/* The default of preprocess.window.param for a window type (gauss sigma 0.4, tukey alpha 0.5;
 * the others take none). */
double cfg_window_param_default(int type);

#endif
