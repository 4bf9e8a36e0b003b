/* SPDX-License-Identifier: MIT */
/*
 * libvolrec_synth_shim.so: the built-in synth source (synth.c, the same calls and the same
 * bytes) exported as a frame-grabber shim, the template for a real grabber (docs/shim.md). What
 * is its own is open(): the scanner's settings from source.shim.args; the scanner is made by
 * configure() for the geometry volrec tells.
 * args: {seed: 1, deg_per_s: 0.25, snr_db: 40, phantom: retina, bit_shift: 0, motion_rate: 0}
 */
#include <errno.h>
#include <stdio.h>

#include <volrec/shim.h>

#include "base/base.h"
#include "sources/shim_args.h"
#include "sources/shim_common.h"
#include "sources/synth.h"

static int synth_shim_open(const char *args_yaml, struct volrec_shim_info *info, void **handle)
{
	struct sim_args a;
	uint64_t bit_shift = 0;
	struct shim_args args;
	struct synth *s;
	char err[448];
	int rc;

	sim_args_defaults(&a);
	const struct shim_arg_spec spec[] = {
	        {"seed", .u64 = &a.seed, .max = UINT64_MAX},
	        {"deg_per_s", .dbl = &a.deg_per_s, .lo = -3600, .hi = 3600},
	        {"snr_db", .dbl = &a.snr_db, .lo = -20, .hi = 200},
	        {"phantom", .str = a.phantom, .max = sizeof(a.phantom)},
	        {"bit_shift", .u64 = &bit_shift, .max = 15},
	        {"motion_rate", .dbl = &a.motion_rate, .lo = 0, .hi = 1e6},
	};
	rc = shim_args_parse(args_yaml, 0, &args, err, sizeof(err));
	if (!rc)
		rc = shim_args_get(&args, spec, VR_ARRAY_SIZE(spec), err, sizeof(err));
	if (!rc)
		rc = shim_args_check_unused(&args, spec, VR_ARRAY_SIZE(spec), err, sizeof(err));
	if (rc)
		return shim_open_fail(rc, "synth shim: %s", err);
	s = synth_open_args("synth shim", &a, (uint32_t)bit_shift);
	if (!s)
		return shim_open_fail(-ENOMEM, "synth shim: out of memory");
	snprintf(info->name, sizeof(info->name), "synth-shim");
	snprintf(info->version, sizeof(info->version), "%s", VOLREC_VERSION);
	snprintf(info->device, sizeof(info->device), "%s phantom, seed %llu", a.phantom,
	         (unsigned long long)a.seed);
	info->flags = VOLREC_SHIM_INFO_REPEATS;
	*handle = s;
	return 0;
}

const struct volrec_shim_ops shim_ops = SYNTH_OPS(synth_shim_open);
