/* SPDX-License-Identifier: MIT */
/*
 * The pipeline engine: an acquisition thread that drives the source into the raw ring (never
 * waiting for processing unless the pipeline blocks), and a processing thread that feeds epochs
 * to the backend, into the sink's buffers, and publishes them. One processing loop for both
 * depths: depth 1 takes a complete epoch, finishes it and publishes it; depth 2 submits B-scans
 * as they arrive and keeps the next epoch's submission going while one is in flight. Sources
 * with the zero-copy calls of shim.h fill no ring buffer: the ring then holds references into
 * the source's own memory, registered with the backend, released when their epoch is done.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pipeline/internal.h"

const char *const pl_drop_names[PL_DROP_COUNT] = {
        [PL_DROP_RING_FULL] = "ring_full",
        [PL_DROP_INCOMPLETE_EPOCH] = "incomplete_epoch",
        [PL_DROP_PROCESSING_ERROR] = "processing_error",
        [PL_DROP_SOURCE_ERROR] = "source_error",
        [PL_DROP_SOURCE_TIMEOUT] = "source_timeout",
        [PL_DROP_SOURCE_LOST] = "source_lost",
        [PL_DROP_SOURCE_INCOMPLETE] = "source_incomplete",
};

const char *const pl_lat_names[PL_LAT_N] = {
        [PL_LAT_E2E] = "acquire_to_publish",
        [PL_LAT_PRE] = "preprocess",
        [PL_LAT_REC] = "reconstruct",
        [PL_LAT_PUB] = "publish",
};

/* ---- events ------------------------------------------------------------------------------- */

void pl_emit(struct pl_pipeline *pl, const char *name, enum pl_level level, bool announce,
             const char *fmt, ...) VR_PRINTF(5, 6);

void pl_emit(struct pl_pipeline *pl, const char *name, enum pl_level level, bool announce,
             const char *fmt, ...)
{
	char raw[MSG_MAX], msg[MSG_MAX];
	struct pl_event ev = {.name = name, .level = level, .announce = announce, .message = msg};
	va_list ap;

	if (!pl->opt.on_event)
		return;
	va_start(ap, fmt);
	vsnprintf(raw, sizeof(raw), fmt, ap);
	va_end(ap);
	vr_utf8_sanitize(raw, msg, sizeof(msg));
	pthread_mutex_lock(&pl->ev_mu);
	if (!pl->muted)
		pl->opt.on_event(pl->opt.event_ctx, &ev);
	pthread_mutex_unlock(&pl->ev_mu);
}

/* Record the first failure of a stop_on_fault run and stop acquisition. mu not held. */
void pl_fail_run(struct pl_pipeline *pl, int rc, const char *msg)
{
	pthread_mutex_lock(&pl->mu);
	if (!pl->fail_rc) {
		pl->fail_rc = rc < 0 ? rc : -EIO;
		vr_utf8_sanitize(msg, pl->fail_msg, sizeof(pl->fail_msg));
	}
	pl->stop_acq = true;
	pthread_cond_broadcast(&pl->cv_room);
	pthread_cond_broadcast(&pl->cv_data);
	pthread_cond_broadcast(&pl->cv_done);
	pthread_mutex_unlock(&pl->mu);
}

/* ---- source open/close ---------------------------------------------------------------------- */

int pl_source_open(struct pl_pipeline *pl, char *err, size_t errlen)
{
	memset(&pl->src, 0, sizeof(pl->src));
	if (pl->opt.source_open)
		return pl->opt.source_open(pl->opt.source_ctx, &pl->cfg, pl->opt.src_flags,
		                           &pl->src, err, errlen);
	return src_open(&pl->cfg, pl->opt.src_flags, &pl->src, err, errlen);
}

void pl_source_close(struct pl_pipeline *pl)
{
	char err[MSG_MAX];

	if (pl->opt.source_close)
		pl->opt.source_close(pl->opt.source_ctx, &pl->src);
	else if (src_close_checked(&pl->src, err, sizeof(err)) < 0)
		pl_emit(pl, "source_fault", PL_WARNING, false, "%s (closed all the same)", err);
	memset(&pl->src, 0, sizeof(pl->src));
}

/* Copy the source's info, each string made valid UTF-8, for other threads. mu held. */
void pl_source_info_update(struct pl_pipeline *pl)
{
	const struct volrec_shim_info *in = &pl->src.info;
	struct volrec_shim_info *out = &pl->src_info;
	char tmp[sizeof(in->device) + 1];

	memset(out, 0, sizeof(*out));
	snprintf(tmp, sizeof(tmp), "%.*s", (int)sizeof(in->name), in->name);
	vr_utf8_sanitize(tmp, out->name, sizeof(out->name));
	snprintf(tmp, sizeof(tmp), "%.*s", (int)sizeof(in->version), in->version);
	vr_utf8_sanitize(tmp, out->version, sizeof(out->version));
	snprintf(tmp, sizeof(tmp), "%.*s", (int)sizeof(in->device), in->device);
	vr_utf8_sanitize(tmp, out->device, sizeof(out->device));
	out->flags = in->flags;
}

/* ---- zero-copy: the source's regions and references --------------------------------------- */

/* Unregister and forget the registered regions. Backend call: the thread that owns it. */
void pl_regions_unregister(struct pl_pipeline *pl)
{
	for (uint32_t i = 0; i < pl->nregions; i++)
		be_host_unregister(pl->be, (void *)pl->regions[i].base);
	free(pl->regions);
	pl->regions = NULL;
	pl->nregions = 0;
}

/* Register regs[0..n) (malloc'ed, taken over in every case) with the backend; on failure
 * nothing stays registered. Backend call: the thread that owns it. */
int pl_regions_register(struct pl_pipeline *pl, struct volrec_shim_region *regs, uint32_t n,
                        char *err, size_t errlen)
{
	for (uint32_t i = 0; i < n; i++) {
		int rc = be_host_register(pl->be, (void *)regs[i].base, regs[i].size,
		                          BE_REG_DEVICE_READS);

		if (rc < 0) {
			vr_err(err, errlen, rc, "the source's region %u of %u: %s", i, n,
			       be_last_error(pl->be));
			while (i--)
				be_host_unregister(pl->be, (void *)regs[i].base);
			free(regs);
			return rc;
		}
	}
	pl->regions = regs;
	pl->nregions = n;
	return 0;
}

/* Ask the opened source for its regions (malloc'ed into *out) and check them. Source call:
 * the thread that drives the source. */
int pl_source_regions(struct pl_pipeline *pl, struct volrec_shim_region **out, uint32_t *n,
                      char *err, size_t errlen)
{
	struct volrec_shim_region *regs;
	uint32_t count = 0, again = 0;
	int rc;

	rc = src_ref_regions(&pl->src, NULL, 0, &count);
	if (rc < 0)
		return vr_err(err, errlen, rc, "%s", src_strerror(&pl->src, rc));
	if (count == 0 || count > REGIONS_MAX)
		return vr_err(err, errlen, -EPROTO,
		              "source %s: ref_regions() reports %u regions (1..%u expected)",
		              pl->src.info.name, count, REGIONS_MAX);
	regs = calloc(count, sizeof(*regs));
	if (!regs)
		return vr_err(err, errlen, -ENOMEM, "out of memory");
	rc = src_ref_regions(&pl->src, regs, count, &again);
	if (rc < 0 || again != count) {
		free(regs);
		if (rc < 0)
			return vr_err(err, errlen, rc, "%s", src_strerror(&pl->src, rc));
		return vr_err(err, errlen, -EPROTO,
		              "source %s: ref_regions(): the region count changed",
		              pl->src.info.name);
	}
	for (uint32_t i = 0; i < count; i++)
		if (!regs[i].base || regs[i].size < pl->bscan_bytes) {
			vr_err(err, errlen, -EPROTO,
			       "source %s: ref_regions(): region %u (%zu bytes at %p) cannot hold "
			       "a B-scan of %zu bytes",
			       pl->src.info.name, i, regs[i].size, regs[i].base, pl->bscan_bytes);
			free(regs);
			return -EPROTO;
		}
	*out = regs;
	*n = count;
	return 0;
}

/* Give back a reference to the source (mu held: release_ref calls never overlap). A failure
 * is counted; the first of a series (failures in a row) is logged at warning, the rest at
 * debug: a shim failing every release would otherwise flood the log with one per B-scan. */
void pl_release_one(struct pl_pipeline *pl, const void *p)
{
	int rc = src_release_ref(&pl->src, p);
	bool first = !pl->release_failing;

	pl->release_failing = rc < 0;
	if (rc == 0)
		return;
	pl->c.release_errors++;
	pl_emit(pl, "source_fault", first ? PL_WARNING : PL_DEBUG, false, "%s (B-scan at %p)",
	        src_strerror(&pl->src, rc), p);
}

/* Release the references held by ring entries [from, from + n) from the tail (mu held). */
void pl_release_entries(struct pl_pipeline *pl, uint32_t from, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		struct pl_entry *en = pl_ring_at(&pl->ring, from + i);

		if (en->ref) {
			pl_release_one(pl, en->data);
			en->ref = false;
			en->data = NULL;
		}
	}
}

/* Have the processing thread (the backend's thread) replace the registered regions by regs
 * (malloc'ed, taken over; NULL, 0: none) and wait for it. Acquisition thread, mu not held. */
int pl_set_regions(struct pl_pipeline *pl, struct volrec_shim_region *regs, uint32_t n, char *err,
                   size_t errlen)
{
	uint64_t req;
	int rc;

	pthread_mutex_lock(&pl->mu);
	free(pl->reg_new);
	pl->reg_new = regs;
	pl->reg_new_n = n;
	req = ++pl->reg_req;
	pthread_cond_signal(&pl->cv_data);
	/* the processing thread runs until acquisition is done: it always answers */
	while (pl->reg_done < req)
		pthread_cond_wait(&pl->cv_room, &pl->mu);
	rc = pl->reg_rc;
	snprintf(err, errlen, "%s", pl->reg_err);
	pthread_mutex_unlock(&pl->mu);
	return rc;
}

/* ---- set-up ------------------------------------------------------------------------------- */

int pl_options_from_env(struct pl_options *o, char *err, size_t errlen)
{
	const char *ov = getenv("VOLRECD_PIPELINE_OVERLAP"), *zc = getenv("VOLRECD_ZERO_COPY");

	if (ov && ov[0]) {
		if (strcmp(ov, "0") && strcmp(ov, "1"))
			return vr_err(err, errlen, -EINVAL,
			              "VOLRECD_PIPELINE_OVERLAP: '%s' is not 0 (off) or 1 (on); "
			              "unset it for the backend's default",
			              ov);
		o->depth = ov[0] == '1' ? 2 : 1;
	}
	if (zc && zc[0]) {
		if (strcmp(zc, "0") && strcmp(zc, "1"))
			return vr_err(err, errlen, -EINVAL,
			              "VOLRECD_ZERO_COPY: '%s' is not 0 (copy every B-scan) or 1 "
			              "(zero-copy where the source and backend allow it, the "
			              "default)",
			              zc);
		o->zero_copy = zc[0] == '1' ? 1 : 0;
		if (!o->zero_copy)
			o->copy_reason = "VOLRECD_ZERO_COPY=0";
	}
	return 0;
}

/*
 * Depth 2 where it pays: a backend with the asynchronous epoch interface, or one that works on
 * a device (its submit starts transfers); depth 1 on the CPU backend, whose submit only
 * records the buffer. pl_options.depth forces either.
 */
static void choose_depth(struct pl_pipeline *pl)
{
	unsigned caps = be_caps(pl->be);

	if (pl->opt.depth == 1 || pl->opt.depth == 2)
		pl->depth = pl->opt.depth;
	else
		pl->depth = caps & (BE_CAP_ASYNC | BE_CAP_DEVICE) ? 2 : 1;
	if (pl->depth > 1 && pl->ring.size < 2 * pl->nraw)
		pl_emit(pl, NULL, PL_NOTICE, false,
		        "pipeline: ring_bscans %u holds less than two epochs (%u B-scans): the "
		        "next "
		        "epoch is acquired only once the one in flight is published",
		        pl->ring.size, 2 * pl->nraw);
	pl_emit(pl, NULL, PL_INFO, false, "pipeline: %s (backend %s%s)",
	        pl->depth > 1 ? "overlap: B-scans submitted as they arrive, two epochs in flight"
	                      : "one complete epoch at a time",
	        be_name(pl->be), caps & BE_CAP_ASYNC ? ", asynchronous epochs" : "");
}

/*
 * Zero-copy acquisition (docs/operations.md "Pipeline"): used when the source has the
 * zero-copy calls of shim.h and the backend registers all its regions (a no-op on the CPU
 * backend, cudaHostRegister on CUDA); otherwise B-scans are copied into the ring.
 */
static void choose_acquisition(struct pl_pipeline *pl)
{
	struct volrec_shim_region *regs = NULL;
	uint32_t n = 0;
	size_t bytes = 0;
	char why[512];
	int rc;

	pl->zc = false;
	if (pl->opt.zero_copy == 0) {
		snprintf(pl->zc_why, sizeof(pl->zc_why), "%s",
		         pl->opt.copy_reason ? pl->opt.copy_reason : "zero-copy switched off");
	} else if (!src_has_refs(&pl->src)) {
		snprintf(pl->zc_why, sizeof(pl->zc_why), "source %s has no zero-copy calls",
		         pl->src.info.name);
	} else {
		rc = pl_source_regions(pl, &regs, &n, why, sizeof(why));
		if (rc == 0)
			rc = pl_regions_register(pl, regs, n, why, sizeof(why));
		if (rc == 0) {
			pl->zc = true;
		} else {
			snprintf(pl->zc_why, sizeof(pl->zc_why), "%s", why);
			pl_emit(pl, NULL, PL_WARNING, false,
			        "acquisition: zero-copy refused, copying instead: %s", why);
		}
	}
	for (uint32_t i = 0; i < pl->nregions; i++)
		bytes += pl->regions[i].size;
	if (pl->zc)
		pl_emit(pl, NULL, PL_INFO, false,
		        "acquisition: zero-copy (source %s's buffers, %u region%s of %.1f MiB "
		        "registered with backend %s; the ring holds references)",
		        pl->src.info.name, pl->nregions, pl->nregions == 1 ? "" : "s",
		        (double)bytes / 1048576.0, be_name(pl->be));
	else
		pl_emit(pl, NULL, PL_INFO, false, "acquisition: copy into the ring (%s)",
		        pl->zc_why);
}

static void cond_init_mono(pthread_cond_t *cv)
{
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(cv, &ca);
	pthread_condattr_destroy(&ca);
}

/* ---- who holds the options' contexts (pl_options.on_freed) ------------------------------ */

static struct pl_life *life_new(const struct pl_options *o)
{
	struct pl_life *l = calloc(1, sizeof(*l));

	if (l) {
		atomic_init(&l->refs, 1);
		l->on_freed = o->on_freed;
		l->ctx = o->freed_ctx;
	}
	return l;
}

static void life_let_go(struct pl_life *l)
{
	if (l && atomic_fetch_sub(&l->refs, 1) == 1) {
		if (l->on_freed)
			l->on_freed(l->ctx);
		free(l);
	}
}

/* The ring's own slots when the source's buffers are not used in place: one host
 * allocation of the backend, each slot with its guard. 0 or a negative errno with the message
 * in err. */
static int ring_alloc(struct pl_pipeline *pl, char *err, size_t errlen)
{
	size_t bytes = pl->slot_bytes * pl->ring.size;
	int rc = be_host_alloc(pl->be, bytes, &pl->ring_mem);

	if (rc < 0) {
		pl->ring_mem = NULL;
		return vr_err_errno(err, errlen, rc,
		                    "pipeline: allocating the ring of %u B-scans (%zu bytes)",
		                    pl->ring.size, bytes);
	}
	for (uint32_t i = 0; i < pl->ring.size; i++) {
		pl->ring.e[i].buf = (char *)pl->ring_mem + (size_t)i * pl->slot_bytes;
		pl_guard_set(pl->ring.e[i].buf, pl->bscan_bytes);
	}
	return 0;
}

/* What the engine takes from cfg: the epoch's raw B-scans and their size, the source's timeout
 * and whether the acquisition waits for room or drops. -EINVAL when the ring cannot hold an
 * epoch. */
static int pl_settings(struct pl_pipeline *pl, const struct pl_options *o,
                       const struct vr_config *cfg, char *err, size_t errlen)
{
	pl->nraw = cfg_raw_bscans(cfg);
	pl->repeats = cfg->geometry.repeats;
	pl->bscan_bytes = cfg_bscan_bytes(cfg);
	if (cfg->pipeline.ring_bscans < pl->nraw)
		return vr_err(err, errlen, -EINVAL,
		              "pipeline.ring_bscans: %u is smaller than one epoch (%u raw B-scans)",
		              cfg->pipeline.ring_bscans, pl->nraw);
	if (cfg->source.type == CFG_SOURCE_SHIM)
		pl->timeout_ms = cfg->source.shim.timeout_ms;
	else
		pl->timeout_ms =
		        1000 + (cfg->source.rate > 0 ? (int)(2000.0 / cfg->source.rate) : 0);
	/* a hardware source must never stall: it drops; synth and replay wait when asked to,
	 * and when unpaced (rate 0: as fast as processing takes them) */
	pl->block = o->block || (cfg->source.type != CFG_SOURCE_SHIM &&
	                         (cfg->pipeline.overflow == CFG_OVERFLOW_BLOCK ||
	                          cfg->source.rate == 0 || (o->src_flags & SRC_UNPACED)));
	return 0;
}

/* The backend's host buffers of the engine: a scratch B-scan slot with its guard, and the
 * missing A-scan counts of two epochs. */
static int pl_host_buffers(struct pl_pipeline *pl, char *err, size_t errlen)
{
	int rc;

	pl->slot_bytes = (pl->bscan_bytes + GUARD_BYTES + SLOT_ALIGN - 1) / SLOT_ALIGN * SLOT_ALIGN;
	rc = be_host_alloc(pl->be, pl->slot_bytes, &pl->scratch);
	if (rc < 0)
		return vr_err_errno(err, errlen, rc,
		                    "pipeline: allocating a scratch B-scan (%zu bytes)",
		                    pl->slot_bytes);
	pl_guard_set(pl->scratch, pl->bscan_bytes);
	for (int i = 0; i < 2; i++) {
		rc = be_host_alloc(pl->be, pl->cfg.geometry.bscans_per_volume * sizeof(uint32_t),
		                   (void **)&pl->missing[i]);
		if (rc < 0)
			return vr_err_errno(err, errlen, rc,
			                    "pipeline: allocating the missing A-scan counts");
	}
	return 0;
}

int pl_open(const struct pl_options *o, struct pl_pipeline **out, char *err, size_t errlen)
{
	struct pl_pipeline *pl;
	const struct vr_config *cfg = o->cfg;
	char note[512] = "";
	int rc;

	if (!cfg || !!o->source_open != !!o->source_close)
		return vr_err(err, errlen, -EINVAL,
		              "pl_open: a configuration is required, and pl_source_open and "
		              "pl_source_close go together");
	pl = calloc(1, sizeof(*pl));
	if (!pl)
		return vr_err(err, errlen, -ENOMEM, "out of memory");
	pl->opt = *o;
	pl->generation = o->generation;
	pl->opt.cfg = NULL;
	pl->life = life_new(o);
	if (!pl->life) {
		free(pl);
		return vr_err(err, errlen, -ENOMEM, "out of memory");
	}
	pthread_mutex_init(&pl->mu, NULL);
	pthread_mutex_init(&pl->ev_mu, NULL);
	cond_init_mono(&pl->cv_room);
	cond_init_mono(&pl->cv_done);
	pthread_cond_init(&pl->cv_data, NULL);
	cfg_defaults(&pl->cfg);
	cfg_defaults(&pl->live_cfg);
	rc = cfg_copy(&pl->cfg, cfg);
	if (rc < 0) {
		vr_err(err, errlen, rc, "out of memory copying the configuration");
		goto fail;
	}
	rc = pl_settings(pl, o, cfg, err, errlen);
	if (rc < 0)
		goto fail;
	rc = pl_ring_init(&pl->ring, cfg->pipeline.ring_bscans);
	if (rc < 0) {
		vr_err(err, errlen, rc, "out of memory");
		goto fail;
	}
	pl->c.ring_size = pl->ring.size;

	rc = be_open(cfg, &pl->be, note, sizeof(note), err, errlen);
	if (rc < 0)
		goto fail;
	if (note[0])
		pl_emit(pl, NULL, PL_NOTICE, false, "%s", note);
	choose_depth(pl);
	rc = pl_host_buffers(pl, err, errlen);
	if (rc < 0)
		goto fail;
	rc = pl_source_open(pl, err, errlen);
	if (rc < 0)
		goto fail;
	pl->src_is_open = true;
	pl->src_epochs = pl->src.epochs;
	pl->first_epoch = pl->src.first_epoch + o->skip_epochs;
	pl_source_info_update(pl);

	choose_acquisition(pl);
	if (!pl->zc) {
		rc = ring_alloc(pl, err, errlen);
		if (rc < 0)
			goto fail;
	}
	*out = pl;
	return 0;
fail:
	pl->life->on_freed = NULL; /* a failed open leaves nothing to wait for */
	pl_close(pl);
	return rc;
}

struct be_backend *pl_backend(struct pl_pipeline *pl)
{
	return pl->be;
}

int pl_start(struct pl_pipeline *pl, const struct pl_sink *sink, char *err, size_t errlen)
{
	int rc;

	if (pl->started)
		return vr_err(err, errlen, -EALREADY, "pl_start: the pipeline was started already");
	if (!sink || !sink->begin || !sink->publish || !sink->abort)
		return vr_err(err, errlen, -EINVAL, "pl_start: a sink needs begin, publish, abort");
	pl->sink = *sink;
	pl->started = true;
	rc = -pthread_create(&pl->proc_thr, NULL, pl_proc_main, pl);
	if (rc < 0) {
		vr_err_errno(err, errlen, rc, "starting the processing thread");
		goto fail;
	}
	pl->proc_started = true;
	rc = -pthread_create(&pl->acq_thr, NULL, pl_acq_main, pl);
	if (rc < 0) {
		vr_err_errno(err, errlen, rc, "starting the acquisition thread");
		goto fail;
	}
	pl->acq_started = true;
	return 0;
fail:
	pthread_mutex_lock(&pl->mu);
	pl->acq_done = true;
	pthread_mutex_unlock(&pl->mu);
	pl_stop(pl);
	return rc;
}

/*
 * Close the source from the caller's thread (pl_stop, pl_free) without letting a stop()
 * or close() that ignores every deadline hold it: the calls run on a helper thread with the
 * source copied, and are waited for at most the source timeout plus STOP_GRACE_MS; then the
 * caller goes on without them (event source_abandoned, the source is left open) and the
 * helper frees its copy if they ever return.
 */
struct closer {
	struct pl_life *life; /* held while abandoned, let go once close returned */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct src_source src;
	void (*close_fn)(void *ctx, struct src_source *src); /* pl_options.source_close or NULL */
	void *ctx;
	bool done, abandoned;
	int rc;
	char err[MSG_MAX];
};

static void closer_free(struct closer *c)
{
	pthread_cond_destroy(&c->cv);
	pthread_mutex_destroy(&c->mu);
	free(c);
}

static void closer_run(struct closer *c)
{
	if (c->close_fn)
		c->close_fn(c->ctx, &c->src);
	else
		c->rc = src_close_checked(&c->src, c->err, sizeof(c->err));
}

static void *closer_main(void *arg)
{
	struct closer *c = arg;
	bool abandoned;

	closer_run(c);
	pthread_mutex_lock(&c->mu);
	c->done = true;
	abandoned = c->abandoned;
	pthread_cond_signal(&c->cv);
	pthread_mutex_unlock(&c->mu);
	if (abandoned) {
		struct pl_life *life = c->life;

		closer_free(c);
		life_let_go(life);
	}
	return NULL;
}

static void source_close_bounded(struct pl_pipeline *pl)
{
	struct closer *c = calloc(1, sizeof(*c));
	pthread_t thr;
	bool done;

	if (!c) {
		pl_source_close(pl); /* no memory for the helper: close here, unbounded */
		return;
	}
	pthread_mutex_init(&c->mu, NULL);
	cond_init_mono(&c->cv);
	c->src = pl->src;
	c->close_fn = pl->opt.source_close;
	c->ctx = pl->opt.source_ctx;
	memset(&pl->src, 0, sizeof(pl->src));
	if (pthread_create(&thr, NULL, closer_main, c) != 0) {
		closer_run(c); /* no thread: close here, unbounded */
	} else {
		pthread_mutex_lock(&c->mu);
		pl_wait_flag(&c->cv, &c->mu, &c->done, pl->timeout_ms + STOP_GRACE_MS);
		done = c->done;
		c->abandoned = !done;
		if (!done && pl->life) {
			atomic_fetch_add(&pl->life->refs, 1);
			c->life = pl->life;
		}
		pthread_mutex_unlock(&c->mu);
		if (!done) {
			char name[sizeof(pl->src_info.name)];

			pthread_detach(thr);
			pthread_mutex_lock(&pl->mu);
			snprintf(name, sizeof(name), "%s", pl->src_info.name);
			pthread_mutex_unlock(&pl->mu);
			pl_emit(pl, "source_abandoned", PL_WARNING, false,
			        "stopping: source %s has not returned from stop()/close() %d ms "
			        "after "
			        "it was called (timeout %d ms + %d ms): going on without it (the "
			        "source is left open)",
			        name, pl->timeout_ms + STOP_GRACE_MS, pl->timeout_ms,
			        STOP_GRACE_MS);
			return;
		}
		pthread_join(thr, NULL);
	}
	if (c->rc < 0)
		pl_emit(pl, "source_fault", PL_WARNING, false, "%s (closed all the same)", c->err);
	closer_free(c);
}

void pl_stop(struct pl_pipeline *pl)
{
	char name[sizeof(pl->src_info.name)] = "", call[32] = "";
	bool abandon = false;

	if (!pl || !pl->started || pl->stopped)
		return;
	pl->stopped = true;
	pthread_mutex_lock(&pl->mu);
	pl->stop_acq = true;
	pthread_cond_broadcast(&pl->cv_room);
	if (pl->acq_started) {
		/* a source call that ignores its timeout must not hold the stop */
		pl_wait_flag(&pl->cv_done, &pl->mu, &pl->acq_exited,
		             pl->timeout_ms + STOP_GRACE_MS);
		if (!pl->acq_exited) {
			abandon = true;
			pl->abandoned = true;
			pl_cut_epoch(pl);
			snprintf(name, sizeof(name), "%s", pl->src_info.name);
			snprintf(call, sizeof(call), "%s", pl->call ? pl->call : "a call");
		}
	}
	pthread_mutex_unlock(&pl->mu);
	if (abandon) {
		pthread_detach(pl->acq_thr);
		pl_emit(pl, "source_abandoned", PL_WARNING, false,
		        "stopping: source %s has not returned from %s %d ms after the stop request "
		        "(timeout %d ms + %d ms): stopping without it (the source is left open)",
		        name, call, pl->timeout_ms + STOP_GRACE_MS, pl->timeout_ms, STOP_GRACE_MS);
	} else if (pl->acq_started) {
		pthread_join(pl->acq_thr, NULL);
	}
	if (pl->src_is_open && !pl->zc && !abandon) {
		/* zero-copy: processing still reads the source's memory; closed in pl_close */
		source_close_bounded(pl);
		pl->src_is_open = false;
	}
	pthread_mutex_lock(&pl->mu);
	pl->acq_done = true;
	pl->stop_proc = true;
	pthread_cond_broadcast(&pl->cv_data);
	pthread_mutex_unlock(&pl->mu);
	if (pl->proc_started)
		pthread_join(pl->proc_thr, NULL);
}

void pl_close(struct pl_pipeline *pl)
{
	bool later;

	if (!pl)
		return;
	pl_stop(pl);
	pthread_mutex_lock(&pl->mu);
	/* a stuck acquisition thread may still touch pl, its ring and its source: it frees
	 * everything itself if it ever returns */
	later = pl->abandoned && !pl->acq_exited;
	if (later) {
		pthread_mutex_lock(&pl->ev_mu); /* waits for an event being told */
		pl->muted = true;
		pthread_mutex_unlock(&pl->ev_mu);
	}
	pl->close_requested = later;
	pthread_mutex_unlock(&pl->mu);
	if (!later)
		pl_free(pl);
}

void pl_free(struct pl_pipeline *pl)
{
	struct pl_life *life;

	if (pl->src_is_open && pl->ring.e) {
		/* nothing should be held now; give back whatever is before the source goes */
		for (uint32_t i = 0; i < pl->ring.size; i++)
			if (pl->ring.e[i].ref)
				pl_release_one(pl, pl->ring.e[i].data);
	}
	if (pl->be)
		pl_regions_unregister(pl);
	free(pl->reg_new);
	if (pl->src_is_open)
		source_close_bounded(pl);
	if (pl->be) {
		be_host_free(pl->be, pl->ring_mem);
		be_host_free(pl->be, pl->scratch);
		be_host_free(pl->be, pl->missing[0]);
		be_host_free(pl->be, pl->missing[1]);
		be_close(pl->be);
	}
	pl_ring_free(&pl->ring);
	cfg_free(&pl->live_cfg);
	cfg_free(&pl->cfg);
	pthread_cond_destroy(&pl->cv_done);
	pthread_cond_destroy(&pl->cv_room);
	pthread_cond_destroy(&pl->cv_data);
	pthread_mutex_destroy(&pl->ev_mu);
	pthread_mutex_destroy(&pl->mu);
	life = pl->life;
	free(pl);
	life_let_go(life);
}

int pl_run(struct pl_pipeline *pl, const struct pl_sink *sink, uint64_t epochs, char *err,
           size_t errlen)
{
	int rc;

	pl->epochs = epochs;
	rc = pl_start(pl, sink, err, errlen);
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&pl->mu);
	while (!pl->acq_done && !pl->fail_rc)
		pthread_cond_wait(&pl->cv_done, &pl->mu);
	pthread_mutex_unlock(&pl->mu);
	pl_stop(pl);
	if (pl->fail_rc)
		return vr_err(err, errlen, pl->fail_rc, "%s", pl->fail_msg);
	return 0;
}

/* ---- requests ----------------------------------------------------------------------------- */

int pl_request_live(struct pl_pipeline *pl, const struct vr_config *cfg, uint32_t generation,
                    uint64_t *ticket)
{
	int rc;

	pthread_mutex_lock(&pl->mu);
	cfg_free(&pl->live_cfg);
	cfg_defaults(&pl->live_cfg);
	rc = cfg_copy(&pl->live_cfg, cfg);
	if (rc == 0) {
		pl->live_gen = generation;
		*ticket = ++pl->live_req;
		pthread_cond_broadcast(&pl->cv_data);
	}
	pthread_mutex_unlock(&pl->mu);
	return rc;
}

bool pl_live_done(struct pl_pipeline *pl, uint64_t ticket, int *rc, char *err, size_t errlen)
{
	bool done;

	pthread_mutex_lock(&pl->mu);
	done = pl->live_done >= ticket;
	if (done) {
		*rc = pl->live_rc;
		snprintf(err, errlen, "%s", pl->live_err);
	}
	pthread_mutex_unlock(&pl->mu);
	return done;
}

void pl_request_reset(struct pl_pipeline *pl)
{
	pthread_mutex_lock(&pl->mu);
	pl->reset_req++;
	pthread_cond_broadcast(&pl->cv_data);
	pthread_mutex_unlock(&pl->mu);
}

/* ---- statistics --------------------------------------------------------------------------- */

/*
 * A source call that has not returned timeout_ms + STOP_GRACE_MS after it began (a driver
 * ignoring its timeout) is a fault: counted, degraded, its text in msg; once per call. Returns
 * whether it was the first fault of a series. mu held.
 */
static bool call_late(struct pl_pipeline *pl, bool *late, char *msg, size_t len)
{
	uint64_t ms, now = vr_mono_ns();
	bool first;

	*late = false;
	if (!pl->call || pl->call_late || pl->abandoned)
		return false;
	ms = (now - pl->call_ns) / 1000000u;
	if (ms <= (uint64_t)pl->timeout_ms + STOP_GRACE_MS)
		return false;
	snprintf(msg, len, "source %s: %s has not returned %llu ms after its timeout (%d ms)",
	         pl->src_info.name, pl->call, (unsigned long long)(ms - (uint64_t)pl->timeout_ms),
	         pl->timeout_ms);
	*late = pl->call_late = true;
	first = !pl->degraded;
	pl->degraded = true;
	pl->c.source_faults++;
	vr_utf8_sanitize(msg, pl->fault, sizeof(pl->fault));
	return first;
}

void pl_stats(struct pl_pipeline *pl, struct pl_stats *s)
{
	static const double p[2] = {50, 99};
	char late_msg[MSG_MAX];
	bool late, first;

	memset(s, 0, sizeof(*s));
	pthread_mutex_lock(&pl->mu);
	first = call_late(pl, &late, late_msg, sizeof(late_msg));
	s->c = pl->c;
	s->c.in_ring = pl->ring.ready;
	for (int i = 0; i < PL_LAT_N; i++) {
		double out[2];

		vr_window_percentiles(&pl->lat[i], p, out, 2);
		s->lat_p50[i] = out[0];
		s->lat_p99[i] = out[1];
	}
	s->degraded = pl->degraded;
	snprintf(s->fault, sizeof(s->fault), "%s", pl->fault);
	s->last_epoch = pl->last_epoch;
	pthread_mutex_unlock(&pl->mu);
	s->acq_state = atomic_load(&pl->acq_state);
	if (late)
		pl_emit(pl, "source_fault", PL_WARNING, first, "%s", late_msg);
}

void pl_progress(struct pl_pipeline *pl, struct pl_progress *p)
{
	p->proc_epochs = atomic_load(&pl->proc_epochs);
	p->acq_returns = atomic_load(&pl->acq_returns);
	p->proc_waiting = atomic_load(&pl->proc_waiting);
	p->acq_state = atomic_load(&pl->acq_state);
}

int pl_depth(struct pl_pipeline *pl)
{
	return pl->depth;
}

const char *pl_acquisition(struct pl_pipeline *pl)
{
	return pl->zc ? "zero-copy" : "copy";
}

void pl_source_info(struct pl_pipeline *pl, struct volrec_shim_info *info)
{
	pthread_mutex_lock(&pl->mu);
	*info = pl->src_info;
	pthread_mutex_unlock(&pl->mu);
}

uint64_t pl_source_epochs(struct pl_pipeline *pl)
{
	return pl->src_epochs;
}
