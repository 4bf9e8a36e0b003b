/* SPDX-License-Identifier: MIT */
/*
 * The built-in `synth` source: the one synth (synth.c) made from the configuration, paced at
 * source.rate (none when unpaced).
 */
#include <errno.h>
#include <stdio.h>

#include "sources/internal.h"
#include "sources/synth.h"

static const struct volrec_shim_ops src_synth_ops = SYNTH_OPS(src_builtin_open);

int src_synth_open(const struct vr_config *cfg, unsigned flags, struct src_source *src, char *err,
                   size_t errlen)
{
	struct volrec_shim_geometry geo;
	struct sim_params p;
	struct synth *s;
	int rc;

	src_geometry_from_config(&geo, cfg, flags);
	sim_params_from_config(&p, cfg);
	rc = synth_open_params("synth", &p, &geo, &s, err, errlen);
	if (rc)
		return rc;
	src->impl = src_synth_ops;
	src->handle = s;
	src->dl = NULL;
	src->kind = "synth";
	snprintf(src->info.name, sizeof(src->info.name), "synth");
	src->info.flags = VOLREC_SHIM_INFO_REPEATS;
	snprintf(src->info.version, sizeof(src->info.version), "%s", VOLREC_VERSION);
	snprintf(src->info.device, sizeof(src->info.device), "%s phantom, seed %llu", p.phantom,
	         (unsigned long long)p.seed);
	src->epochs = 0;
	return 0;
}
