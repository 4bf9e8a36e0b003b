/* SPDX-License-Identifier: MIT */
/*
 * libvolrec_synth_shim.so: the synthetic scanner as a frame-grabber shim. It is the template
 * for a real grabber (docs/shim.md): every ABI call is here (strerror() and the entry are in
 * common.c), with the pacing a free-running camera would impose, the scan offset of each epoch,
 * timeouts, and error texts.
 * args: {seed: 1, deg_per_s: 0.25, snr_db: 40, phantom: retina, bit_shift: 0, motion_rate: 0}
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <volrec/shim.h>

#include "base/base.h"
#include "sources/shim_args.h"
#include "sources/shim_common.h"
#include "sources/sim.h"

struct synth_shim {
	struct shim_err err; /* last error and its text; first (shim_strerror) */
	/* from open() */
	struct sim_args args; /* the scanner's settings */
	uint64_t bit_shift;   /* the geometry does not carry it */
	/* from configure() */
	struct sim *sim;
	struct volrec_shim_geometry geo;
	struct vr_pacer pace;
	/* acquisition */
	bool started;
	struct shim_pos pos; /* of the next B-scan */
	uint32_t ox, oy;
	bool pend;
	uint64_t pend_epoch;
	uint32_t pend_ox, pend_oy;
};
SHIM_HANDLE_CHECK(struct synth_shim);

static int shim_open(const char *args_yaml, struct volrec_shim_info *info, void **handle)
{
	struct synth_shim *s;
	struct shim_args args;
	char err[448];
	int rc;

	s = calloc(1, sizeof(*s));
	if (!s)
		return shim_open_fail(-ENOMEM, "synth shim: out of memory");
	sim_args_defaults(&s->args);
	const struct shim_arg_spec spec[] = {
	        {"seed", .u64 = &s->args.seed, .max = UINT64_MAX},
	        {"deg_per_s", .dbl = &s->args.deg_per_s, .lo = -3600, .hi = 3600},
	        {"snr_db", .dbl = &s->args.snr_db, .lo = -20, .hi = 200},
	        {"phantom", .str = s->args.phantom, .max = sizeof(s->args.phantom)},
	        {"bit_shift", .u64 = &s->bit_shift, .max = 15},
	        {"motion_rate", .dbl = &s->args.motion_rate, .lo = 0, .hi = 1e6},
	};
	rc = shim_args_parse(args_yaml, 0, &args, err, sizeof(err));
	if (!rc)
		rc = shim_args_get(&args, spec, VR_ARRAY_SIZE(spec), err, sizeof(err));
	if (!rc)
		rc = shim_args_check_unused(&args, spec, VR_ARRAY_SIZE(spec), err, sizeof(err));
	if (rc) {
		free(s);
		return shim_open_fail(rc, "synth shim: %s", err);
	}
	snprintf(info->name, sizeof(info->name), "synth-shim");
	snprintf(info->version, sizeof(info->version), "%s", VOLREC_VERSION);
	snprintf(info->device, sizeof(info->device), "%s phantom, seed %llu", s->args.phantom,
	         (unsigned long long)s->args.seed);
	info->flags = 0;
	*handle = s;
	return 0;
}

static int shim_configure(void *h, const struct volrec_shim_geometry *g)
{
	struct synth_shim *s = h;
	struct sim_params p;
	char err[256];
	int rc;

	sim_params_from_args(&p, g, &s->args);
	p.bit_shift = (uint32_t)s->bit_shift;
	if (s->started)
		return shim_fail(&s->err, -EBUSY, "synth shim: configure() while started");
	sim_destroy(s->sim);
	s->sim = NULL;
	rc = sim_create(&p, &s->sim, err, sizeof(err));
	if (rc)
		return shim_fail(&s->err, rc, "synth shim: %s", err);
	s->geo = *g;
	shim_pacer_init(&s->pace, g);
	s->pos.epoch = 0;
	s->pos.b = 0;
	s->pend = false;
	return 0;
}

static int shim_set_scan_offset(void *h, uint64_t epoch, uint32_t ox, uint32_t oy)
{
	struct synth_shim *s = h;

	if (!s->sim)
		return shim_fail(&s->err, -EINVAL,
		                 "synth shim: set_scan_offset() before configure()");
	if (ox >= s->geo.stride_x || oy >= s->geo.stride_y)
		return shim_fail(&s->err, -EINVAL,
		                 "synth shim: offset (%u, %u) outside stride [%u, %u]", ox, oy,
		                 s->geo.stride_x, s->geo.stride_y);
	if (s->pos.b != 0 && epoch == s->pos.epoch)
		return shim_fail(&s->err, -EBUSY,
		                 "synth shim: epoch %llu is already being acquired",
		                 (unsigned long long)epoch);
	s->pend = true;
	s->pend_epoch = epoch;
	s->pend_ox = ox;
	s->pend_oy = oy;
	return 0;
}

static int shim_start(void *h)
{
	struct synth_shim *s = h;

	if (!s->sim)
		return shim_fail(&s->err, -EINVAL, "synth shim: start() before configure()");
	vr_pacer_start(&s->pace);
	s->started = true;
	return 0;
}

static int shim_acquire(void *h, void *buf, size_t size, int timeout_ms,
                        struct volrec_shim_meta *meta)
{
	struct synth_shim *s = h;
	int rc;

	if (!s->started)
		return shim_fail(&s->err, -EINVAL, "synth shim: acquire() before start()");
	if (size < sim_bscan_bytes(s->sim))
		return shim_fail(&s->err, -EINVAL,
		                 "synth shim: buffer of %zu bytes, a B-scan is %zu", size,
		                 sim_bscan_bytes(s->sim));
	uint64_t due;
	rc = vr_pacer_due(&s->pace, timeout_ms, &due);
	if (rc)
		return rc;
	if (s->pos.b == 0) {
		if (s->pend) {
			s->pos.epoch = s->pend_epoch;
			s->ox = s->pend_ox;
			s->oy = s->pend_oy;
		} else {
			vr_scan_offset(s->pos.epoch, s->geo.stride_x, s->geo.stride_y, &s->ox,
			               &s->oy);
		}
		s->pend = false;
	}
	rc = sim_bscan(s->sim, s->pos.epoch, s->ox, s->oy, s->pos.b, buf, size);
	if (rc)
		return shim_fail(&s->err, rc, "synth shim: B-scan %u of epoch %llu failed",
		                 s->pos.b, (unsigned long long)s->pos.epoch);
	if (due)
		vr_sleep_until_ns(due); /* the camera's B-scan ends then */
	vr_pacer_done(&s->pace);
	shim_pos_deliver(&s->pos, &s->geo, meta);
	return 0;
}

static int shim_stop(void *h)
{
	struct synth_shim *s = h;
	s->started = false;
	return 0;
}

static void shim_close(void *h)
{
	struct synth_shim *s = h;

	if (!s)
		return;
	sim_destroy(s->sim);
	free(s);
}

const struct volrec_shim_ops shim_ops = {SHIM_OPS_BASE};
