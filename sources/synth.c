/* SPDX-License-Identifier: MIT */
/*
 * The built-in `synth` source: the synthetic scanner (sim.c) behind struct volrec_shim_ops,
 * paced at source.rate, scanning each epoch at the offset it was told (or docs/algorithms.md §2.1's).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sources/internal.h"
#include "sources/sim.h"

struct synth {
	struct src_common com;
	struct sim *sim;
	struct volrec_shim_geometry geo;
	uint64_t epoch;  /* epoch being (or next to be) acquired */
	uint32_t b;      /* next B-scan within it; 0 = at an epoch boundary */
	uint32_t ox, oy; /* offset of the current epoch */
	bool pend;       /* an offset was told for an epoch not yet begun */
	uint64_t pend_epoch;
	uint32_t pend_ox, pend_oy;
};
_Static_assert(offsetof(struct synth, com) == 0, "shim_strerror() reads com.err");

static int synth_configure(void *h, const struct volrec_shim_geometry *g)
{
	struct synth *s = h;
	return src_common_configure(&s->com, &s->geo, g, NULL);
}

static int synth_set_scan_offset(void *h, uint64_t epoch, uint32_t ox, uint32_t oy)
{
	struct synth *s = h;

	if (ox >= s->geo.stride_x || oy >= s->geo.stride_y)
		return shim_fail(
		        &s->com.err, -EINVAL,
		        "synth: scan offset (%u, %u) of epoch %llu outside stride [%u, %u]", ox, oy,
		        (unsigned long long)epoch, s->geo.stride_x, s->geo.stride_y);
	if (s->b != 0 && epoch == s->epoch)
		return shim_fail(&s->com.err, -EBUSY,
		                 "synth: epoch %llu is already being acquired (B-scan %u of %u)",
		                 (unsigned long long)epoch, s->b, s->geo.bscans_per_volume);
	s->pend = true;
	s->pend_epoch = epoch;
	s->pend_ox = ox;
	s->pend_oy = oy;
	return 0;
}

static int synth_start(void *h)
{
	struct synth *s = h;

	vr_pacer_start(&s->com.pacer);
	return 0;
}

static int synth_acquire(void *h, void *buf, size_t size, int timeout_ms,
                         struct volrec_shim_meta *meta)
{
	struct synth *s = h;
	int rc;

	if (size < sim_bscan_bytes(s->sim))
		return shim_fail(&s->com.err, -EINVAL,
		                 "synth: buffer of %zu bytes, a B-scan is %zu", size,
		                 sim_bscan_bytes(s->sim));
	if (vr_pacer_due_in(&s->com.pacer) >
	    (timeout_ms < 0 ? UINT64_MAX : (uint64_t)timeout_ms * 1000000ull)) {
		rc = vr_pacer_wait(&s->com.pacer, timeout_ms);
		if (rc)
			return rc;
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
		return shim_fail(&s->com.err, rc, "synth: B-scan %u of epoch %llu failed", s->b,
		                 (unsigned long long)s->epoch);
	rc = vr_pacer_wait(&s->com.pacer, -1);
	(void)rc;
	vr_pacer_done(&s->com.pacer);
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

static void synth_close(void *h)
{
	struct synth *s = h;

	if (!s)
		return;
	sim_destroy(s->sim);
	free(s);
}

static const struct volrec_shim_ops src_synth_ops = {
        .abi_version = VOLREC_SHIM_ABI_VERSION,
        .struct_size = sizeof(struct volrec_shim_ops),
        .open = src_common_open,
        .configure = synth_configure,
        .set_scan_offset = synth_set_scan_offset,
        .start = synth_start,
        .acquire = synth_acquire,
        .stop = src_common_stop,
        .close = synth_close,
        .strerror = shim_strerror,
};

int src_synth_open(const struct vr_config *cfg, unsigned flags, struct src_source *src, char *err,
                   size_t errlen)
{
	struct sim_params p;
	struct synth *s;
	int rc;

	s = calloc(1, sizeof(*s));
	if (!s)
		return vr_err(err, errlen, -ENOMEM, "synth: out of memory");
	s->com.kind = "synth";
	src_geometry_from_config(&s->geo, cfg, flags);
	sim_params_from_config(&p, cfg);
	rc = sim_create(&p, &s->sim, err, errlen);
	if (rc)
		goto out_free;
	shim_pacer_init(&s->com.pacer, &s->geo);
	src->impl = src_synth_ops;
	src->handle = s;
	src->dl = NULL;
	src->kind = "synth";
	snprintf(src->info.name, sizeof(src->info.name), "synth");
	snprintf(src->info.version, sizeof(src->info.version), "%s", VOLREC_VERSION);
	snprintf(src->info.device, sizeof(src->info.device), "retina phantom, seed %llu",
	         (unsigned long long)p.seed);
	src->epochs = 0;
	return 0;

out_free:
	free(s);
	return rc;
}
