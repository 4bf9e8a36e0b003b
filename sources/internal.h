/* SPDX-License-Identifier: MIT */
/*
 * Private declarations of the sources module (src_): the state every built-in source shares
 * (the source kit's error text, pacing) and the three openers src_open dispatches to.
 */
#ifndef VOLREC_SRC_INTERNAL_H
#define VOLREC_SRC_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "base/base.h"
#include "sources/shim_common.h"
#include "sources/source.h"

/* What the built-in sources share: the handle of each starts with it. */
struct src_common {
	struct shim_err err;   /* first: the kit's shim_strerror() reads it */
	const char *kind;      /* "synth", "replay" (messages) */
	struct vr_pacer pacer; /* of the B-scans */
};

/* open() of the built-ins' ops tables: -EOPNOTSUPP, src_open() opens them from the
 * configuration. */
int src_common_open(const char *args_yaml, struct volrec_shim_info *info, void **handle);
/* configure() of a built-in whose geometry from the configuration is have: g must be the same
 * (its rate aside), else -EINVAL and a message naming c->kind and path (may be NULL). */
int src_common_configure(struct src_common *c, const struct volrec_shim_geometry *have,
                         const struct volrec_shim_geometry *g, const char *path);
/* stop() of the built-ins: nothing to stop. */
int src_common_stop(void *h);

/* Geometry of cfg as told to configure(); rate 0 when unpaced. */
void src_geometry_from_config(struct volrec_shim_geometry *g, const struct vr_config *cfg,
                              unsigned flags);

/* The openers: fill src (impl, handle, dl, kind, info, epochs) or return a negative errno and
 * a message. */
int src_synth_open(const struct vr_config *cfg, unsigned flags, struct src_source *src, char *err,
                   size_t errlen);
int src_replay_open(const struct vr_config *cfg, unsigned flags, struct src_source *src, char *err,
                    size_t errlen);
int src_shim_open(const struct vr_config *cfg, unsigned flags, struct src_source *src, char *err,
                  size_t errlen);

const char *src_sample_name(uint32_t sample_type);

#endif
