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

#endif
