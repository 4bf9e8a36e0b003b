/* SPDX-License-Identifier: MIT */
/*
 * The source kit: what every source shares, the shims (besides their arguments, shim_args.h)
 * and the built-in synth and replay sources: the text of the last error, which strerror() hands
 * back, the pacing of a free-running camera, and the position of the next B-scan with the
 * metadata acquire() reports for it.
 */
#ifndef VOLREC_SHIMS_COMMON_H
#define VOLREC_SHIMS_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <volrec/shim.h>

#include "base/base.h"

#define SHIM_MSG_MAX 1024

/* The last error of a handle: its code and text. */
struct shim_err {
	int code;
	char suffix[64]; /* appended to every text ("" for none) */
	char msg[SHIM_MSG_MAX];
};

/* Keep the text and code of an error of handle e; returns code. */
int shim_fail(struct shim_err *e, int code, const char *fmt, ...) VR_PRINTF(3, 4);
/* Keep the text of a failed open(), where no handle holds it (per thread); returns code. */
int shim_open_fail(int code, const char *fmt, ...) VR_PRINTF(2, 3);

/*
 * The shim ABI table (volrec/shim.h) of one shim. Each shim's handle begins with its struct
 * shim_err (checked by SHIM_HANDLE_CHECK), so that one strerror() serves every shim. A shim
 * defines its calls as static functions of the names below and its table as
 *   const struct volrec_shim_ops shim_ops = { SHIM_OPS_BASE, ...optional calls... };
 * which volrec_shim_entry() (shim_entry.c, the one symbol a shim exports) hands out.
 */
#define SHIM_OPS_BASE                                                                              \
	.abi_version = VOLREC_SHIM_ABI_VERSION, .struct_size = sizeof(struct volrec_shim_ops),     \
	.open = shim_open, .configure = shim_configure, .set_scan_offset = shim_set_scan_offset,   \
	.start = shim_start, .acquire = shim_acquire, .stop = shim_stop, .close = shim_close,      \
	.strerror = shim_strerror
#define SHIM_HANDLE_CHECK(type)                                                                    \
	_Static_assert(offsetof(type, err) == 0, #type ": struct shim_err must come first")

extern const struct volrec_shim_ops shim_ops;
/* strerror() of every shim: the text of code when it is the handle's last error (the handle
 * begins with its struct shim_err); with h NULL, that of the last failed open() of this
 * thread. NULL when there is none (volrec falls back to strerror(-code)). */
const char *shim_strerror(void *h, int code);

/* configure() of a source made for geometry have (a built-in, from the configuration): g must
 * be the same, its rate aside. 0, or -EINVAL kept in e with a message that begins with who. */
int shim_geometry_fixed(struct shim_err *e, const struct volrec_shim_geometry *have,
                        const struct volrec_shim_geometry *g, const char *who);

/* A free-running camera's clock (base.h's vr_pacer): the B-scans of geometry g at g->rate
 * epochs/s (0: free running), one epoch of slack. */
void shim_pacer_init(struct vr_pacer *p, const struct volrec_shim_geometry *g);

/* The position of the next B-scan: epoch, index within it and repeat of that index. */
struct shim_pos {
	uint64_t epoch;
	uint32_t b;
	uint32_t m; /* 0..M-1 (docs/algorithms.md §5) */
};

/* M of geometry g: its repeats with VOLREC_SHIM_GEOMETRY_REPEATS (and not 0), else 1. */
static inline uint32_t shim_repeats(const struct volrec_shim_geometry *g)
{
	return (g->flags & VOLREC_SHIM_GEOMETRY_REPEATS) && g->repeats ? g->repeats : 1;
}

/* One B-scan of geometry g delivered at pos: fill meta (may be NULL) with it and the time now
 * (its repeat only where g says the caller's meta has it), and step pos on to the next one:
 * the next repeat, then the next position. */
void shim_pos_deliver(struct shim_pos *pos, const struct volrec_shim_geometry *g,
                      struct volrec_shim_meta *meta);

#endif
