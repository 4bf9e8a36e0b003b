/* SPDX-License-Identifier: MIT */
/*
 * Private declarations of the sources module (src_): the built-ins' ABI fillers and the three
 * openers src_open dispatches to. What every source shares is the source kit (shim_common.h).
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

/* open() of the built-ins' ops tables: -EOPNOTSUPP, src_open() opens them from the
 * configuration. Everything else they share with the shims is the source kit's
 * (shim_common.h). */
int src_builtin_open(const char *args_yaml, struct volrec_shim_info *info, void **handle);
/* stop() of a built-in with nothing to stop. */
int src_builtin_stop(void *h);

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
