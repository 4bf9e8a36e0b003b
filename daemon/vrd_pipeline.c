/* SPDX-License-Identifier: MIT */
/*
 * volrecd's adapter over the pipeline engine (pipeline/): builds it for the configuration with
 * the shared-memory sink (vrd_pub.c), and turns its events into log lines and `event` messages.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/internal.h"

struct vrd_pipeline {
	struct pl_pipeline *pl;
	struct vrd_pub *pub;
	struct vrd_raw *raw; /* the service's raw recorder, tapping acquisition */
	struct vrd_rec *rec; /* the service's processed recorder, fed by the sink */
	struct pl_tap tap;
};

/* Sources left inside a call by a stop (event source_abandoned), in this process */
static atomic_uint abandoned;

static void on_event(void *ctx, const struct pl_event *ev)
{
	static const int prio[] = {
	        [PL_DEBUG] = LOG_DEBUG,     [PL_INFO] = LOG_INFO, [PL_NOTICE] = LOG_NOTICE,
	        [PL_WARNING] = LOG_WARNING, [PL_ERR] = LOG_ERR,
	};

	if (ev->name && !strcmp(ev->name, "source_abandoned"))
		atomic_fetch_add(&abandoned, 1);
	if (ev->announce)
		vrd_event(ev->name, prio[ev->level], ev->message, NULL);
	else
		vrd_log(prio[ev->level], ev->name, "%s", ev->message);
}

/* record.name: a raw recording from the first epoch on (headless capture); a failure is
 * announced, the service runs all the same. */
static void record_at_start(struct vrd_pipeline *vp, const struct vr_config *cfg)
{
	char err[512];

	if (!cfg->record.name[0])
		return;
	if (vrd_raw_start(vp->raw, cfg, cfg->record.name, cfg->record.epochs, cfg->record.seconds,
	                  err, sizeof(err)) < 0)
		vrd_event("record_failed", LOG_WARNING, err, NULL);
}

int vrd_pipeline_start(const struct vr_config *cfg, uint32_t generation, struct vrd_raw *raw,
                       struct vrd_rec *rec, bool record, struct vrd_pipeline **out, char *err,
                       size_t errlen)
{
	/* a B-scan a camera lost drops its epoch and acquisition goes on (docs/shim.md) */
	struct pl_options o = {.cfg = cfg,
	                       .generation = generation,
	                       .src_flags = SRC_DROP_MARKS,
	                       .zero_copy = -1,
	                       .on_event = on_event};
	struct vrd_pipeline *vp;
	struct pl_sink sink;
	int rc;

	rc = pl_options_from_env(&o, err, errlen);
	if (rc < 0)
		return rc;
	vp = calloc(1, sizeof(*vp));
	if (!vp)
		return vr_err(err, errlen, -ENOMEM, "out of memory");
	vp->raw = raw;
	vp->rec = rec;
	vrd_raw_configure(raw, cfg);
	vrd_rec_configure(rec, cfg);
	vrd_raw_tap(raw, &vp->tap);
	o.tap = &vp->tap;
	rc = pl_open(&o, &vp->pl, err, errlen);
	if (rc < 0)
		goto fail;
	rc = vrd_pub_open(cfg, generation, pl_backend(vp->pl), &vp->pub, err, errlen);
	if (rc < 0)
		goto fail;
	vrd_pub_sink(vp->pub, &sink);
	vrd_pub_record(vp->pub, rec);
	if (record)
		record_at_start(vp, cfg);
	rc = pl_start(vp->pl, &sink, err, errlen);
	if (rc < 0)
		goto fail;
	*out = vp;
	return 0;
fail:
	vrd_pipeline_stop(vp, true, "volrecd could not start");
	return rc;
}

void vrd_pipeline_stop(struct vrd_pipeline *vp, bool unlink_shm, const char *why)
{
	if (!vp)
		return;
	pl_stop(vp->pl);
	vrd_raw_end(vp->raw, why);          /* acquisition is over: what is queued is written */
	vrd_rec_end(vp->rec, why);          /* so is publishing */
	vrd_pub_close(vp->pub, unlink_shm); /* before the backend it registered with goes */
	pl_close(vp->pl);
	free(vp);
}

unsigned vrd_pipeline_abandoned(void)
{
	return atomic_load(&abandoned);
}

struct pl_pipeline *vrd_pipeline_engine(struct vrd_pipeline *vp)
{
	return vp->pl;
}

struct vrd_pub *vrd_pipeline_pub(struct vrd_pipeline *vp)
{
	return vp->pub;
}

struct vrd_raw *vrd_pipeline_raw(struct vrd_pipeline *vp)
{
	return vp->raw;
}
