/* SPDX-License-Identifier: MIT */
/*
 * The synthetic scanner (sim.c) as a source (synth.h): every call of the shim ABI with what a
 * real grabber needs, the pacing a free-running camera imposes (shim_common.c), the scan offset
 * of each epoch (told, or docs/algorithms.md §2.1's), timeouts and error texts. The built-in
 * `synth` source and the example shim are this code.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/base.h"
#include "sources/shim_common.h"
#include "sources/synth.h"

struct synth {
	struct shim_err err; /* last error and its text; first (shim_strerror) */
	const char *name;    /* begins every message */
	/* the built-in: the scanner is made at open, for this geometry only */
	bool fixed;
	/* the shim: the scanner's settings, made into one by configure() */
	struct sim_args args;
	uint32_t bit_shift; /* the geometry does not carry it */
	/* the scanner and its schedule */
	struct sim *sim;
	struct volrec_shim_geometry geo;
	struct vr_pacer pace;
	/* acquisition */
	bool started;
	struct shim_pos pos; /* of the next B-scan */
	uint32_t ox, oy;     /* offset of the current epoch */
	bool pend;           /* an offset was told for an epoch not yet begun */
	uint64_t pend_epoch;
	uint32_t pend_ox, pend_oy;
};
SHIM_HANDLE_CHECK(struct synth);

int synth_open_params(const char *name, const struct sim_params *p,
                      const struct volrec_shim_geometry *geo, struct synth **out, char *err,
                      size_t errlen)
{
	struct synth *s = calloc(1, sizeof(*s));
	int rc;

	if (!s)
		return vr_err(err, errlen, -ENOMEM, "%s: out of memory", name);
	rc = sim_create(p, &s->sim, err, errlen);
	if (rc) {
		free(s);
		return rc;
	}
	s->name = name;
	s->fixed = true;
	s->geo = *geo;
	shim_pacer_init(&s->pace, geo);
	*out = s;
	return 0;
}

struct synth *synth_open_args(const char *name, const struct sim_args *a, uint32_t bit_shift)
{
	struct synth *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->name = name;
	s->args = *a;
	s->bit_shift = bit_shift;
	return s;
}

int synth_configure(void *h, const struct volrec_shim_geometry *g)
{
	struct synth *s = h;
	struct sim_params p;
	char err[256];
	int rc;

	if (s->fixed)
		return shim_geometry_fixed(&s->err, &s->geo, g, s->name);
	sim_params_from_args(&p, g, &s->args);
	p.bit_shift = s->bit_shift;
	if (s->started)
		return shim_fail(&s->err, -EBUSY, "%s: configure() while started", s->name);
	sim_destroy(s->sim);
	s->sim = NULL;
	rc = sim_create(&p, &s->sim, err, sizeof(err));
	if (rc)
		return shim_fail(&s->err, rc, "%s: %s", s->name, err);
	s->geo = *g;
	shim_pacer_init(&s->pace, g);
	s->pos.epoch = 0;
	s->pos.b = 0;
	s->pos.m = 0;
	s->pend = false;
	return 0;
}

int synth_set_scan_offset(void *h, uint64_t epoch, uint32_t ox, uint32_t oy)
{
	struct synth *s = h;

	if (!s->sim)
		return shim_fail(&s->err, -EINVAL, "%s: set_scan_offset() before configure()",
		                 s->name);
	if (ox >= s->geo.stride_x || oy >= s->geo.stride_y)
		return shim_fail(&s->err, -EINVAL,
		                 "%s: scan offset (%u, %u) of epoch %llu outside stride [%u, %u]",
		                 s->name, ox, oy, (unsigned long long)epoch, s->geo.stride_x,
		                 s->geo.stride_y);
	if ((s->pos.b != 0 || s->pos.m != 0) && epoch == s->pos.epoch)
		return shim_fail(&s->err, -EBUSY,
		                 "%s: epoch %llu is already being acquired (B-scan %u of %u)",
		                 s->name, (unsigned long long)epoch, s->pos.b,
		                 s->geo.bscans_per_volume);
	s->pend = true;
	s->pend_epoch = epoch;
	s->pend_ox = ox;
	s->pend_oy = oy;
	return 0;
}

int synth_start(void *h)
{
	struct synth *s = h;

	if (!s->sim)
		return shim_fail(&s->err, -EINVAL, "%s: start() before configure()", s->name);
	vr_pacer_start(&s->pace);
	s->started = true;
	return 0;
}

int synth_acquire(void *h, void *buf, size_t size, int timeout_ms, struct volrec_shim_meta *meta)
{
	struct synth *s = h;
	uint64_t due;
	int rc;

	if (!s->started)
		return shim_fail(&s->err, -EINVAL, "%s: acquire() before start()", s->name);
	if (size < sim_bscan_bytes(s->sim))
		return shim_fail(&s->err, -EINVAL, "%s: buffer of %zu bytes, a B-scan is %zu",
		                 s->name, size, sim_bscan_bytes(s->sim));
	rc = vr_pacer_due(&s->pace, timeout_ms, &due);
	if (rc)
		return rc;
	if (s->pos.b == 0 && s->pos.m == 0) {
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
	/* each repeat of a position is a scan of its own: the same tissue, fresh noise */
	rc = sim_bscan_repeat(s->sim, s->pos.epoch, s->ox, s->oy, s->pos.b, s->pos.m, buf, size);
	if (rc)
		return shim_fail(&s->err, rc, "%s: B-scan %u (repeat %u) of epoch %llu failed",
		                 s->name, s->pos.b, s->pos.m, (unsigned long long)s->pos.epoch);
	if (due)
		vr_sleep_until_ns(due); /* the camera's B-scan ends then */
	vr_pacer_done(&s->pace);
	shim_pos_deliver(&s->pos, &s->geo, meta);
	return 0;
}

int synth_stop(void *h)
{
	struct synth *s = h;

	s->started = false;
	return 0;
}

void synth_close(void *h)
{
	struct synth *s = h;

	if (!s)
		return;
	sim_destroy(s->sim);
	free(s);
}
