/* SPDX-License-Identifier: MIT */
/*
 * libvolrec_synth_shim.so: the synthetic scanner as a frame-grabber shim. It is the template
 * for a real grabber (docs/shim.md): every ABI call is here, with the pacing a free-running
 * camera would impose, the scan offset of each epoch, timeouts, and error texts.
 * args: {seed: 1, deg_per_s: 0.25, snr_db: 40, phantom: retina, bit_shift: 0, motion_rate: 0}
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "volrec/shim.h"
#include "args.h"
#include "sim/sim.h"
#include "base/base.h"

#define ALLOWED "seed, deg_per_s, snr_db, phantom, bit_shift, motion_rate"

struct synth_shim {
	/* from open() */
	uint64_t seed;
	double deg_per_s, snr_db;
	char phantom[CFG_NAME_MAX];
	uint64_t bit_shift; /* the geometry does not carry it */
	double motion_rate; /* epochs/s of the phantom's clock; 0: the geometry's rate */
	/* from configure() */
	struct sim *sim;
	struct volrec_shim_geometry geo;
	uint64_t period_ns; /* per B-scan, 0 = free running */
	/* acquisition */
	bool started;
	uint64_t t0, n; /* schedule origin (CLOCK_MONOTONIC ns), B-scans delivered */
	uint64_t epoch;
	uint32_t b, ox, oy;
	bool pend;
	uint64_t pend_epoch;
	uint32_t pend_ox, pend_oy;
	int code; /* last error code and its text */
	char msg[512];
};

/* open() failed: no handle to keep the text in. */
static __thread char open_msg[512];

static int fail(struct synth_shim *s, int code, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static int fail(struct synth_shim *s, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(s->msg, sizeof(s->msg), fmt, ap);
	va_end(ap);
	s->code = code;
	return code;
}

static int shim_open(const char *args_yaml, struct volrec_shim_info *info, void **handle)
{
	struct synth_shim *s;
	struct shim_args args;
	char err[448];
	int rc;

	s = calloc(1, sizeof(*s));
	if (!s) {
		snprintf(open_msg, sizeof(open_msg), "synth shim: out of memory");
		return -ENOMEM;
	}
	s->seed = 1;
	s->deg_per_s = 0.25;
	s->snr_db = 40;
	snprintf(s->phantom, sizeof(s->phantom), "retina");
	rc = shim_args_parse(args_yaml, &args, err, sizeof(err));
	if (!rc)
		rc = shim_args_u64(&args, "seed", 0, UINT64_MAX, &s->seed, err, sizeof(err));
	if (!rc)
		rc = shim_args_double(&args, "deg_per_s", -3600, 3600, &s->deg_per_s, err,
		                      sizeof(err));
	if (!rc)
		rc = shim_args_double(&args, "snr_db", -20, 200, &s->snr_db, err, sizeof(err));
	if (!rc)
		rc = shim_args_str(&args, "phantom", s->phantom, sizeof(s->phantom), err,
		                   sizeof(err));
	if (!rc)
		rc = shim_args_u64(&args, "bit_shift", 0, 15, &s->bit_shift, err, sizeof(err));
	if (!rc)
		rc = shim_args_double(&args, "motion_rate", 0, 1e6, &s->motion_rate, err,
		                      sizeof(err));
	if (!rc)
		rc = shim_args_check_unused(&args, ALLOWED, err, sizeof(err));
	if (rc) {
		snprintf(open_msg, sizeof(open_msg), "synth shim: %s", err);
		free(s);
		return rc;
	}
	snprintf(info->name, sizeof(info->name), "synth-shim");
	snprintf(info->version, sizeof(info->version), "%s", VOLREC_VERSION);
	snprintf(info->device, sizeof(info->device), "%s phantom, seed %llu", s->phantom,
	         (unsigned long long)s->seed);
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

	memset(&p, 0, sizeof(p));
	p.samples_per_ascan = g->samples_per_ascan;
	p.ascans_per_bscan = g->ascans_per_bscan;
	p.bscans_per_volume = g->bscans_per_volume;
	p.stride_x = g->stride_x;
	p.stride_y = g->stride_y;
	p.sample_type = g->sample_type;
	p.bidirectional = g->bidirectional;
	p.bit_shift = (uint32_t)s->bit_shift;
	p.rate = s->motion_rate > 0 ? s->motion_rate : g->rate;
	p.seed = s->seed;
	snprintf(p.phantom, sizeof(p.phantom), "%s", s->phantom);
	p.deg_per_s = s->deg_per_s;
	p.snr_db = s->snr_db;
	if (s->started)
		return fail(s, -EBUSY, "synth shim: configure() while started");
	sim_destroy(s->sim);
	s->sim = NULL;
	rc = sim_create(&p, &s->sim, err, sizeof(err));
	if (rc)
		return fail(s, rc, "synth shim: %s", err);
	s->geo = *g;
	s->period_ns = g->rate > 0 ? (uint64_t)(1e9 / (g->rate * g->bscans_per_volume) + 0.5) : 0;
	s->epoch = 0;
	s->b = 0;
	s->pend = false;
	return 0;
}

static int shim_set_scan_offset(void *h, uint64_t epoch, uint32_t ox, uint32_t oy)
{
	struct synth_shim *s = h;

	if (!s->sim)
		return fail(s, -EINVAL, "synth shim: set_scan_offset() before configure()");
	if (ox >= s->geo.stride_x || oy >= s->geo.stride_y)
		return fail(s, -EINVAL, "synth shim: offset (%u, %u) outside stride [%u, %u]", ox,
		            oy, s->geo.stride_x, s->geo.stride_y);
	if (s->b != 0 && epoch == s->epoch)
		return fail(s, -EBUSY, "synth shim: epoch %llu is already being acquired",
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
		return fail(s, -EINVAL, "synth shim: start() before configure()");
	s->t0 = vr_now_ns(CLOCK_MONOTONIC);
	s->n = 0;
	s->started = true;
	return 0;
}

static int shim_acquire(void *h, void *buf, size_t size, int timeout_ms,
                        struct volrec_shim_meta *meta)
{
	struct synth_shim *s = h;
	int rc;

	if (!s->started)
		return fail(s, -EINVAL, "synth shim: acquire() before start()");
	if (size < sim_bscan_bytes(s->sim))
		return fail(s, -EINVAL, "synth shim: buffer of %zu bytes, a B-scan is %zu", size,
		            sim_bscan_bytes(s->sim));
	uint64_t due = 0;
	if (s->period_ns) {
		/* a free-running camera: B-scan n ends at t0 + (n + 1) * period */
		uint64_t now = vr_now_ns(CLOCK_MONOTONIC);
		due = s->t0 + (s->n + 1) * s->period_ns;
		if (now > due + s->geo.bscans_per_volume * s->period_ns) {
			s->t0 = now - (s->n + 1) * s->period_ns; /* far behind: rebase */
			due = now;
		}
		if (timeout_ms >= 0 && due > now + (uint64_t)timeout_ms * 1000000ull) {
			vr_sleep_until_ns(now + (uint64_t)timeout_ms * 1000000ull);
			return -ETIMEDOUT;
		}
	}
	if (s->b == 0) {
		if (s->pend) {
			s->epoch = s->pend_epoch;
			s->ox = s->pend_ox;
			s->oy = s->pend_oy;
		} else {
			vr_scan_offset(s->epoch, s->geo.stride_x, s->geo.stride_y, &s->ox, &s->oy);
		}
		s->pend = false;
	}
	rc = sim_bscan(s->sim, s->epoch, s->ox, s->oy, s->b, buf, size);
	if (rc)
		return fail(s, rc, "synth shim: B-scan %u of epoch %llu failed", s->b,
		            (unsigned long long)s->epoch);
	if (due)
		vr_sleep_until_ns(due);
	s->n++;
	if (meta) {
		meta->timestamp_ns = vr_now_ns(CLOCK_REALTIME);
		meta->epoch = s->epoch;
		meta->bscan = s->b;
		meta->flags = 0;
	}
	if (++s->b == s->geo.bscans_per_volume) {
		s->b = 0;
		s->epoch++;
	}
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

static const char *shim_strerror(void *h, int code)
{
	struct synth_shim *s = h;

	if (!s)
		return open_msg[0] ? open_msg : NULL;
	return code && code == s->code ? s->msg : NULL;
}

static const struct volrec_shim_ops ops = {
        .abi_version = VOLREC_SHIM_ABI_VERSION,
        .struct_size = sizeof(struct volrec_shim_ops),
        .open = shim_open,
        .configure = shim_configure,
        .set_scan_offset = shim_set_scan_offset,
        .start = shim_start,
        .acquire = shim_acquire,
        .stop = shim_stop,
        .close = shim_close,
        .strerror = shim_strerror,
};

const struct volrec_shim_ops *volrec_shim_entry(void)
{
	return &ops;
}
