/* SPDX-License-Identifier: MIT */
/*
 * The backend wrappers (backend.h): the one place where the call-order rules of the epoch
 * interface are checked, for every backend, before its table (ops.h) is called.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/ops.h"
#include "backend/tables.h"

struct be_backend {
	const struct be_ops *ops;
	void *state;
	uint32_t ny;  /* raw B-scans per epoch: positions x repeats */
	uint32_t M;   /* repeats (geometry.repeats) */
	uint32_t nch; /* output.channels: channels of the output volume */

	/* the epoch being submitted */
	bool open;         /* B-scans of `epoch` were submitted and it is not finished */
	uint64_t epoch;    /* its number */
	uint32_t nsub;     /* its B-scans submitted successfully */
	uint8_t *have;     /* [ny] which */
	int failed;        /* the first failure of a bscan_submit of it in the backend, else 0 */
	uint32_t failed_b; /* the B-scan of that failure */

	/* the last epoch finished (epochs increase until reset_history) */
	bool have_last;
	uint64_t last;

	/* the epoch in flight: finish_async returned 0, be_epoch_wait not called yet */
	bool inflight;
	uint64_t inflight_epoch;
	bool landed;   /* already waited for (update_live, reset_history, no BE_CAP_ASYNC) */
	int landed_rc; /* and its result */
	char landed_err[512];

	char last_error[512]; /* be_last_error */
};

/* Refuse a call: the message, prefixed with the backend's name, into err. */
static int be_refuse(const struct be_backend *be, char *err, size_t errlen, int code,
                     const char *fmt, ...) VR_PRINTF(5, 6);
static int be_refuse(const struct be_backend *be, char *err, size_t errlen, int code,
                     const char *fmt, ...)
{
	char msg[400];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return vr_err(err, errlen, code, "%s backend: %s", be->ops->name, msg);
}

/* ---- life cycle ------------------------------------------------------------------------------ */

static int be_ops_check(const struct be_ops *ops, char *err, size_t errlen)
{
	const char *name = ops->name ? ops->name : "(unnamed)";

	if (ops->version != BE_OPS_VERSION)
		return vr_err(err, errlen, -EPROTO,
		              "%s backend: its table is version %u, this volrec speaks version %u",
		              name, ops->version, BE_OPS_VERSION);
	if (!ops->name || !ops->create || !ops->destroy || !ops->device || !ops->host_alloc ||
	    !ops->host_free || !ops->bscan_submit || !ops->epoch_finish || !ops->update_live ||
	    !ops->reset_history)
		return vr_err(err, errlen, -EPROTO, "%s backend: its table lacks a function", name);
	if ((ops->caps & BE_CAP_ASYNC) && (!ops->epoch_finish_async || !ops->epoch_wait))
		return vr_err(err, errlen, -EPROTO,
		              "%s backend: BE_CAP_ASYNC without epoch_finish_async/epoch_wait",
		              name);
	if ((ops->caps & BE_CAP_REGISTER) && (!ops->host_register || !ops->host_unregister))
		return vr_err(err, errlen, -EPROTO,
		              "%s backend: BE_CAP_REGISTER without host_register/host_unregister",
		              name);
	return 0;
}

int be_create(const struct be_ops *ops, const struct vr_config *cfg, struct be_backend **out,
              char *err, size_t errlen)
{
	struct be_backend *be;
	int rc;

	rc = be_ops_check(ops, err, errlen);
	if (rc < 0)
		return rc;
	/* the schema's checks, once for every backend: they check only what it cannot know */
	rc = cfg_check_backend(cfg, err, errlen);
	if (rc < 0)
		return rc;
	be = calloc(1, sizeof(*be));
	if (be)
		be->have = calloc(cfg_raw_bscans(cfg) ? cfg_raw_bscans(cfg) : 1, 1);
	if (!be || !be->have) {
		free(be);
		return vr_err(err, errlen, -ENOMEM, "%s backend: out of memory", ops->name);
	}
	be->ops = ops;
	be->ny = cfg_raw_bscans(cfg);
	be->M = cfg->geometry.repeats;
	{
		enum cfg_channel ch[CFG_CH_COUNT];
		be->nch = cfg_channels(cfg, ch);
	}
	rc = ops->create(cfg, &be->state, err, errlen);
	if (rc < 0) {
		free(be->have);
		free(be);
		return rc;
	}
	*out = be;
	return 0;
}

/* Wait for the epoch in flight now (its be_epoch_wait reports the result later). */
static void be_land(struct be_backend *be)
{
	if (!be->inflight || be->landed)
		return;
	be->landed_err[0] = '\0';
	be->landed_rc = be->ops->epoch_wait(be->state, be->inflight_epoch, be->landed_err,
	                                    sizeof(be->landed_err));
	be->landed = true;
}

void be_close(struct be_backend *be)
{
	if (!be)
		return;
	be_land(be);
	be->ops->destroy(be->state);
	free(be->have);
	free(be);
}

void *be_impl_state(const struct be_backend *be)
{
	return be->state;
}

/* ---- properties and host memory -------------------------------------------------------------- */

unsigned be_caps(const struct be_backend *be)
{
	return be->ops->caps;
}

const char *be_name(const struct be_backend *be)
{
	return be->ops->name;
}

const char *be_device(const struct be_backend *be)
{
	return be->ops->device(be->state);
}

const char *be_last_error(const struct be_backend *be)
{
	return be->last_error;
}

int be_host_alloc(struct be_backend *be, size_t size, void **ptr)
{
	int rc = be->ops->host_alloc(be->state, size, ptr);

	if (rc < 0)
		vr_err_errno(be->last_error, sizeof(be->last_error), rc,
		             "%s backend: host_alloc(%zu bytes)", be->ops->name, size);
	return rc;
}

void be_host_free(struct be_backend *be, void *ptr)
{
	if (ptr)
		be->ops->host_free(be->state, ptr);
}

int be_host_register(struct be_backend *be, void *ptr, size_t size, unsigned flags)
{
	int rc;

	if (!ptr || !size)
		return be_refuse(be, be->last_error, sizeof(be->last_error), -EINVAL,
		                 "host_register(%p, %zu bytes): no memory given", ptr, size);
	if (!(be->ops->caps & BE_CAP_REGISTER))
		return 0; /* the backend reads host memory as it is */
	rc = be->ops->host_register(be->state, ptr, size, flags);
	if (rc < 0)
		vr_err_errno(be->last_error, sizeof(be->last_error), rc,
		             "%s backend: host_register(%p, %zu bytes)", be->ops->name, ptr, size);
	return rc;
}

void be_host_unregister(struct be_backend *be, void *ptr)
{
	if (ptr && (be->ops->caps & BE_CAP_REGISTER))
		be->ops->host_unregister(be->state, ptr);
}

/* ---- epochs ---------------------------------------------------------------------------------- */

int be_bscan_submit(struct be_backend *be, uint64_t epoch, uint32_t bscan, const void *raw)
{
	char *msg = be->last_error;
	const size_t msglen = sizeof(be->last_error);
	const unsigned long long e = epoch;
	int rc;

	if (bscan >= be->ny && be->M > 1)
		return be_refuse(be, msg, msglen, -EINVAL,
		                 "B-scan %u of epoch %llu out of range (%u raw B-scans per volume: "
		                 "%u positions x %u repeats)",
		                 bscan, e, be->ny, be->ny / be->M, be->M);
	if (bscan >= be->ny)
		return be_refuse(be, msg, msglen, -EINVAL,
		                 "B-scan %u of epoch %llu out of range (%u B-scans per volume)",
		                 bscan, e, be->ny);
	if (!raw)
		return be_refuse(be, msg, msglen, -EINVAL, "B-scan %u of epoch %llu: no data",
		                 bscan, e);
	if (be->open && epoch != be->epoch)
		return be_refuse(be, msg, msglen, -EBUSY,
		                 "B-scan %u of epoch %llu submitted while epoch %llu has %u of %u "
		                 "B-scans submitted: finish it first",
		                 bscan, e, (unsigned long long)be->epoch, be->nsub, be->ny);
	if (!be->open && be->have_last && epoch <= be->last)
		return be_refuse(be, msg, msglen, -EINVAL,
		                 "B-scan %u of epoch %llu: epoch %llu was finished already (epochs "
		                 "increase; reset_history starts afresh)",
		                 bscan, e, (unsigned long long)be->last);
	if (be->open && be->have[bscan])
		return be_refuse(be, msg, msglen, -EINVAL,
		                 "B-scan %u of epoch %llu submitted twice", bscan, e);

	rc = be->ops->bscan_submit(be->state, epoch, bscan, raw);
	if (!be->open) {
		be->open = true;
		be->epoch = epoch;
	}
	if (rc < 0) {
		if (!be->failed) {
			be->failed = rc;
			be->failed_b = bscan;
		}
		return vr_err_errno(msg, msglen, rc,
		                    "%s backend: B-scan %u of epoch %llu (finishing the epoch "
		                    "reports the details)",
		                    be->ops->name, bscan, e);
	}
	be->have[bscan] = 1;
	be->nsub++;
	return 0;
}

/* The checks every finish makes; 0 when the epoch may be finished. */
static int be_finish_check(struct be_backend *be, uint64_t epoch, const struct be_output *out,
                           char *err, size_t errlen)
{
	const unsigned long long e = epoch;

	if (be->inflight)
		return be_refuse(be, err, errlen, -EBUSY,
		                 "epoch %llu finished while epoch %llu is in flight (epoch_wait "
		                 "first)",
		                 e, (unsigned long long)be->inflight_epoch);
	if (!out)
		return be_refuse(be, err, errlen, -EINVAL, "epoch %llu finished without an output",
		                 e);
	if (!be->open)
		return be_refuse(be, err, errlen, -EINVAL,
		                 "epoch %llu finished with 0 of %u B-scans submitted", e, be->ny);
	if (epoch != be->epoch)
		return be_refuse(be, err, errlen, -EINVAL,
		                 "epoch %llu finished, but the B-scans submitted (%u of %u) are "
		                 "epoch %llu's",
		                 e, be->nsub, be->ny, (unsigned long long)be->epoch);
	if (be->nsub != be->ny && !be->failed)
		return be_refuse(be, err, errlen, -EINVAL,
		                 "epoch %llu finished with %u of %u B-scans submitted", e, be->nsub,
		                 be->ny);
	if ((out->volume || out->full) && (out->channels ? out->channels : 1) < be->nch)
		return be_refuse(be, err, errlen, -EINVAL,
		                 "epoch %llu: output.channels has %u channels, but the output "
		                 "holds %u (this caller writes the structure alone)",
		                 e, be->nch, out->channels ? out->channels : 1);
	return 0;
}

/* The epoch being submitted is finished (whatever the result): the next one may start. */
static void be_finished(struct be_backend *be)
{
	memset(be->have, 0, be->ny);
	be->nsub = 0;
	be->open = false;
	be->failed = 0;
	be->have_last = true;
	be->last = be->epoch;
}

/* Finish an epoch of which a bscan_submit failed: the backend reports the failure. */
static int be_finish_failed(struct be_backend *be, uint64_t epoch, char *err, size_t errlen)
{
	const struct be_output none = {0};
	int rc = be->ops->epoch_finish(be->state, epoch, &none, err, errlen);

	if (rc == 0)
		rc = vr_err_errno(err, errlen, be->failed, "%s backend: epoch %llu: B-scan %u",
		                  be->ops->name, (unsigned long long)epoch, be->failed_b);
	be_finished(be);
	return rc;
}

/* Finish the epoch being submitted, asynchronously when asked and the backend can. */
static int be_finish(struct be_backend *be, uint64_t epoch, const struct be_output *out, bool async,
                     char *err, size_t errlen)
{
	int rc = be_finish_check(be, epoch, out, err, errlen);

	if (rc < 0)
		return rc;
	if (be->failed)
		return be_finish_failed(be, epoch, err, errlen);
	if (async && (be->ops->caps & BE_CAP_ASYNC))
		rc = be->ops->epoch_finish_async(be->state, epoch, out, err, errlen);
	else
		rc = be->ops->epoch_finish(be->state, epoch, out, err, errlen);
	be_finished(be);
	return rc;
}

int be_epoch_finish(struct be_backend *be, uint64_t epoch, const struct be_output *out, char *err,
                    size_t errlen)
{
	return be_finish(be, epoch, out, false, err, errlen);
}

int be_epoch_finish_async(struct be_backend *be, uint64_t epoch, const struct be_output *out,
                          char *err, size_t errlen)
{
	int rc = be_finish(be, epoch, out, true, err, errlen);

	if (rc < 0)
		return rc;
	be->inflight = true;
	be->inflight_epoch = epoch;
	be->landed = !(be->ops->caps & BE_CAP_ASYNC);
	be->landed_rc = 0;
	be->landed_err[0] = '\0';
	return 0;
}

int be_epoch_wait(struct be_backend *be, uint64_t epoch, char *err, size_t errlen)
{
	if (!be->inflight)
		return be_refuse(be, err, errlen, -EINVAL,
		                 "epoch_wait(%llu) with no epoch in flight",
		                 (unsigned long long)epoch);
	if (epoch != be->inflight_epoch)
		return be_refuse(be, err, errlen, -EINVAL,
		                 "epoch_wait(%llu), but epoch %llu is in flight",
		                 (unsigned long long)epoch, (unsigned long long)be->inflight_epoch);
	be_land(be);
	be->inflight = false;
	be->landed = false;
	if (be->landed_rc < 0)
		vr_err(err, errlen, be->landed_rc, "%s", be->landed_err);
	return be->landed_rc;
}

int be_update_live(struct be_backend *be, const struct vr_config *cfg, char *err, size_t errlen)
{
	int rc;

	if (be->open)
		return be_refuse(
		        be, err, errlen, -EBUSY,
		        "live update while epoch %llu has %u of %u B-scans submitted (live "
		        "parameters apply between epochs)",
		        (unsigned long long)be->epoch, be->nsub, be->ny);
	rc = cfg_check_backend(cfg, err, errlen);
	if (rc < 0)
		return rc;
	be_land(be);
	return be->ops->update_live(be->state, cfg, err, errlen);
}

void be_reset_history(struct be_backend *be)
{
	be_land(be);
	be->ops->reset_history(be->state);
	be->have_last = false;
}

void be_geometry_init(struct be_geometry *g, const struct vr_config *cfg)
{
	g->K = cfg->geometry.samples_per_ascan;
	g->N = cfg_fft_len(cfg);
	g->nh = g->N / 2;
	g->nx = cfg->geometry.ascans_per_bscan;
	g->ny = cfg->geometry.bscans_per_volume;
	g->M = cfg->geometry.repeats;
	g->nraw = g->ny * g->M;
	g->z0 = cfg->geometry.depth_range[0];
	g->nz = cfg_nz(cfg);
	g->sx = cfg->geometry.stride[0];
	g->sy = cfg->geometry.stride[1];
	g->S = g->sx * g->sy;
	g->X = g->nx * g->sx;
	g->Y = g->ny * g->sy;
	g->sample_type = cfg->geometry.sample_type;
	g->bit_shift = cfg->geometry.sample_type == CFG_SAMPLE_F32 ? 0 : cfg->geometry.bit_shift;
	g->bscan_bytes = cfg_bscan_bytes(cfg);
	g->le_count = (size_t)g->ny * g->nx * g->nz;
	g->full_count = (size_t)g->Y * g->X * g->nz;
	g->nch = cfg_channels(cfg, g->ch);
	for (int c = 0; c < CFG_CH_COUNT; c++)
		g->chan[c] = -1;
	for (uint32_t i = 0; i < g->nch; i++)
		g->chan[g->ch[i]] = (int)i;
}

void be_live_init(struct be_live *l, const struct vr_config *cfg)
{
	const double lo = cfg->preprocess.db_range[0], hi = cfg->preprocess.db_range[1];

	l->background = cfg->preprocess.background.mode;
	l->pm_threshold = cfg->preprocess.background.threshold;
	l->resample = cfg->preprocess.resample.method;
	l->dispersion = cfg->preprocess.dispersion.kind != CFG_DISP_NONE;
	l->db_lo = (float)lo;
	l->db_inv = (float)(1.0 / (hi - lo));
	l->flip_x = cfg->preprocess.flip.x;
	l->flip_z = cfg->preprocess.flip.z;
	l->bidirectional = cfg->geometry.bidirectional;
	l->mode = cfg->reconstruct.mode;
	l->temporal = cfg->reconstruct.temporal;
	l->combine = cfg->reconstruct.combine;
	l->tau = cfg->reconstruct.tau;
	l->tolerance = cfg->reconstruct.adaptive.tolerance;
	l->depth_half_window = cfg->reconstruct.adaptive.depth_half_window;
	l->speckle_tolerance = cfg->reconstruct.adaptive.speckle_tolerance;
	l->jump_recovery = cfg->reconstruct.adaptive.jump_recovery;
	l->estimate_pose = cfg->reconstruct.compensated.estimate_pose;
	double ar[2];
	cfg_angio_range(cfg, ar);
	l->angio_method = cfg->functional.angio.method;
	l->angio_lo = (float)ar[0];
	l->angio_inv = (float)(1.0 / (ar[1] - ar[0]));
	l->fn_half_window = cfg->functional.axial_half_window;
	l->mask_db = (float)cfg_mask_db(cfg);
	l->doppler_axis = cfg_doppler_axis(cfg);
	l->doppler_bulk = cfg->functional.doppler.bulk;
	for (unsigned d = 0; d < 4; d++)
		l->g[d] = be_spatial_weight(cfg->reconstruct.spatial_sigma, d);
}

bool be_geometry_same(const struct be_geometry *g, const struct vr_config *cfg)
{
	struct be_geometry n;

	be_geometry_init(&n, cfg);
	return n.K == g->K && n.N == g->N && n.nx == g->nx && n.ny == g->ny && n.M == g->M &&
	       n.sx == g->sx && n.sy == g->sy && n.z0 == g->z0 && n.nz == g->nz &&
	       n.sample_type == g->sample_type && n.bit_shift == g->bit_shift && n.nch == g->nch &&
	       !memcmp(n.chan, g->chan, sizeof(n.chan));
}
