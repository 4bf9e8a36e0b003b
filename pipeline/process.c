/* SPDX-License-Identifier: MIT */
/*
 * The pipeline's processing thread (docs/architecture.md): it feeds epochs to the backend,
 * into the sink's buffers, publishes them in epoch order, and applies requests (live
 * parameters, history reset, regions) only when no epoch is in the backend.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/internal.h"

/* ---- processing --------------------------------------------------------------------------- */

/* Whether the main thread or acquisition asked for something between epochs; mu held. */
static bool requests_pending(const struct pl_pipeline *pl)
{
	return pl->live_req != pl->live_done || pl->reset_req != pl->reset_done ||
	       pl->reg_req != pl->reg_done;
}

/* Apply the requests (no epoch is in the backend); mu held, dropped around backend calls. */
static void apply_requests(struct pl_pipeline *pl)
{
	if (pl->reg_req != pl->reg_done) {
		/* the source is being reopened: it holds no references now (source_reopen) */
		uint64_t req = pl->reg_req;
		struct volrec_shim_region *regs = pl->reg_new;
		uint32_t n = pl->reg_new_n;
		char err[512] = "";
		int rc = 0;

		pl->reg_new = NULL;
		pl->reg_new_n = 0;
		pthread_mutex_unlock(&pl->mu);
		pl_regions_unregister(pl);
		if (n)
			rc = pl_regions_register(pl, regs, n, err, sizeof(err));
		pthread_mutex_lock(&pl->mu);
		pl->reg_rc = rc;
		snprintf(pl->reg_err, sizeof(pl->reg_err), "%s", err);
		pl->reg_done = req;
		pthread_cond_broadcast(&pl->cv_room);
	}
	if (pl->live_req != pl->live_done) {
		uint64_t req = pl->live_req;
		char err[512] = "";
		int rc;

		pthread_mutex_unlock(&pl->mu);
		rc = be_update_live(pl->be, &pl->live_cfg, err, sizeof(err));
		pthread_mutex_lock(&pl->mu);
		if (rc == 0)
			pl->generation = pl->live_gen;
		pl->live_rc = rc;
		snprintf(pl->live_err, sizeof(pl->live_err), "%s", err);
		pl->live_done = req;
	}
	if (pl->reset_req != pl->reset_done) {
		pl->reset_done = pl->reset_req;
		pl->reset_flag = true;
		pthread_mutex_unlock(&pl->mu);
		be_reset_history(pl->be);
		pl_emit(pl, "history_reset", PL_NOTICE, true,
		        "reconstruction history reset: the next epoch starts afresh");
		pthread_mutex_lock(&pl->mu);
	}
}

/*
 * An epoch processing holds: `sb` while its B-scans are submitted, `fl` once finished
 * asynchronously (reconstruction and the copies into the sink's buffers in flight). Its ring
 * entries are the oldest ones processing holds.
 */
struct pl_flight {
	bool on;
	uint64_t epoch;
	uint32_t n;           /* B-scans claimed (sb) / ring entries held (fl) */
	bool failed;          /* a submit failed: the epoch is dropped as processing_error */
	char err[512];        /* its message */
	double pre_ms;        /* time spent in bscan_submit for this epoch */
	uint64_t t_fin;       /* when the finish was queued (fl) */
	struct be_output out; /* valid until be_epoch_wait returns (contract) */
	uint64_t missing;     /* A-scans missing in the published volume (non-finite samples) */
};

/* Give back the n oldest entries; published: counted as processed, else as drops of cause.
 * mu held. */
static void finish_entries(struct pl_pipeline *pl, uint32_t n, bool published, enum pl_drop cause)
{
	pl_release_entries(pl, 0, n);
	pl_ring_release(&pl->ring, n);
	if (published) {
		pl->c.processed += n;
		pl->c.epochs_published++;
	} else {
		pl->c.drops[cause] += n;
	}
	pthread_cond_broadcast(&pl->cv_room);
	atomic_fetch_add(&pl->proc_epochs, 1);
}

/* Submit ring entries [from, from + k) (from the tail) of epoch sb; mu not held. */
static void submit(struct pl_pipeline *pl, struct pl_flight *sb, uint32_t from, uint32_t k)
{
	uint64_t t0 = vr_mono_ns();

	for (uint32_t i = 0; i < k && !sb->failed; i++) {
		const struct pl_entry *en = pl_ring_at(&pl->ring, from + i);
		int rc = be_bscan_submit(pl->be, en->epoch, en->bscan, en->data);

		if (rc < 0) {
			sb->failed = true;
			vr_err(sb->err, sizeof(sb->err), rc, "%s", be_last_error(pl->be));
		}
	}
	sb->pre_ms += (double)(vr_mono_ns() - t0) / 1e6;
}

/* Finish an epoch whose output is not wanted (cut short, or a submit failed) so that the
 * backend is ready for the next one; missing B-scans come from the scratch buffer. Returns
 * whether the backend finished it (its history then holds made-up data). mu not held. */
static bool finish_unwanted(struct pl_pipeline *pl, struct pl_flight *sb)
{
	struct be_output none = {0};
	char err[512];
	int rc;

	if (!sb->failed) {
		uint8_t *have = calloc(pl->nraw, 1);

		if (!have)
			return false;
		for (uint32_t i = 0; i < sb->n; i++)
			have[pl_ring_at(&pl->ring, i)->bscan] = 1;
		for (uint32_t b = 0; b < pl->nraw; b++)
			if (!have[b] && be_bscan_submit(pl->be, sb->epoch, b, pl->scratch) < 0)
				break;
		free(have);
	}
	rc = be_epoch_finish_async(pl->be, sb->epoch, &none, err, sizeof(err));
	if (rc == 0)
		rc = be_epoch_wait(pl->be, sb->epoch, err, sizeof(err));
	if (rc < 0 && !sb->failed)
		pl_emit(pl, "processing_error", PL_WARNING, false,
		        "epoch %llu (cut short): the backend could not finish it: %s",
		        (unsigned long long)sb->epoch, err);
	return rc == 0;
}

/* Take the sink's buffers and queue the finish of sb into them; mu not held. */
static int launch(struct pl_pipeline *pl, struct pl_flight *sb, char *err, size_t errlen)
{
	int rc;

	if (sb->failed)
		return vr_err(err, errlen, -EIO, "%s", sb->err);
	memset(&sb->out, 0, sizeof(sb->out));
	rc = pl->sink.begin(pl->sink.ctx, sb->epoch, &sb->out, err, errlen);
	if (rc < 0) {
		/* the backend holds the whole epoch: finish it, without output */
		finish_unwanted(pl, sb);
		return rc;
	}
	if (!sb->out.missing_ascans) {
		sb->out.missing_ascans = pl->missing[pl->missing_next];
		pl->missing_next ^= 1u;
	}
	sb->t_fin = vr_mono_ns();
	rc = be_epoch_finish_async(pl->be, sb->epoch, &sb->out, err, errlen);
	if (rc < 0)
		pl->sink.abort(pl->sink.ctx);
	return rc;
}

/* Wait for the epoch in flight and publish it; fills ms. mu not held. */
static int land(struct pl_pipeline *pl, struct pl_flight *fl, double ms[PL_LAT_N], char *err,
                size_t errlen)
{
	const struct pl_entry *e0 = pl_ring_at(&pl->ring, 0),
	                      *el = pl_ring_at(&pl->ring, fl->n - 1);
	struct pl_volume v = {0};
	uint64_t t_pub;
	int rc;

	rc = be_epoch_wait(pl->be, fl->epoch, err, errlen);
	if (rc < 0) {
		pl->sink.abort(pl->sink.ctx);
		return rc;
	}
	v.t_done_mono_ns = vr_mono_ns();
	v.epoch = fl->epoch;
	vr_scan_offset(fl->epoch, pl->cfg.geometry.stride[0], pl->cfg.geometry.stride[1], &v.ox,
	               &v.oy);
	v.t_first_ns = e0->t_real_ns;
	v.t_last_ns = el->t_real_ns;
	v.t_first_mono_ns = e0->t_mono_ns;
	v.latency_ns = v.t_done_mono_ns > el->t_mono_ns ? v.t_done_mono_ns - el->t_mono_ns : 0;
	v.preprocess_ms = fl->pre_ms;
	v.reconstruct_ms = (double)(v.t_done_mono_ns - fl->t_fin) / 1e6;
	v.generation = pl->generation;
	v.flags = (pl->reset_flag ? PL_VOLUME_RESET : 0) |
	          (e0->gap_before ? PL_VOLUME_DROPPED_BEFORE : 0);
	for (uint32_t b = 0; b < pl->cfg.geometry.bscans_per_volume; b++) /* per position */
		v.missing_ascans += fl->out.missing_ascans[b];
	fl->missing = v.missing_ascans;
	rc = pl->sink.publish(pl->sink.ctx, &v, err, errlen);
	if (rc < 0)
		return rc;
	pl->reset_flag = false;
	t_pub = vr_mono_ns();
	ms[PL_LAT_E2E] = (double)(t_pub - el->t_mono_ns) / 1e6;
	ms[PL_LAT_PRE] = v.preprocess_ms;
	ms[PL_LAT_REC] = v.reconstruct_ms;
	ms[PL_LAT_PUB] = (double)(t_pub - v.t_done_mono_ns) / 1e6;
	return 0;
}

/* A processing failure: reported, and with stop_on_fault the end of the run. mu not held. */
static void processing_error(struct pl_pipeline *pl, uint64_t epoch, int rc, const char *err)
{
	if (pl->opt.stop_on_fault)
		pl_fail_run(pl, rc, err);
	else
		pl_emit(pl, "processing_error", PL_ERR, false, "epoch %llu dropped: %s",
		        (unsigned long long)epoch, err);
}

/*
 * The processing loop. Depth 1: take a complete epoch, submit it, finish it, publish it. Depth
 * 2: submit B-scans as acquisition delivers them; an epoch whose B-scans are all submitted is
 * finished asynchronously, and the next one is submitted while it is in flight; volumes are
 * published in epoch order. Requests (live parameters, history reset, regions) are applied
 * only when no epoch is in the backend.
 */
/* Step 2: the epoch in flight: wait for it, publish it, release its B-scans (mu held, and
 * dropped meanwhile). */
static void step_land(struct pl_pipeline *pl, struct pl_flight *fl)
{
	double ms[PL_LAT_N];
	char err[512] = "";
	int rc;

	pthread_mutex_unlock(&pl->mu);
	rc = land(pl, fl, ms, err, sizeof(err));
	if (rc < 0)
		processing_error(pl, fl->epoch, rc, err);
	pthread_mutex_lock(&pl->mu);
	if (rc == 0) {
		pl->last_epoch = fl->epoch;
		pl->c.missing_ascans += fl->missing;
		for (int i = 0; i < PL_LAT_N; i++)
			vr_window_add(&pl->lat[i], ms[i]);
	}
	finish_entries(pl, fl->n, rc == 0, PL_DROP_PROCESSING_ERROR);
	fl->on = false;
}

/* Step 3: the epoch being submitted is complete: finish it, in flight from now on (mu held,
 * and dropped meanwhile). */
static void step_launch(struct pl_pipeline *pl, struct pl_flight *sb, struct pl_flight *fl)
{
	char err[512] = "";
	int rc;

	pthread_mutex_unlock(&pl->mu);
	rc = launch(pl, sb, err, sizeof(err));
	if (rc < 0) {
		if (sb->failed)
			finish_unwanted(pl, sb);
		processing_error(pl, sb->epoch, rc, err);
	}
	pthread_mutex_lock(&pl->mu);
	if (rc < 0) {
		finish_entries(pl, sb->n, false, PL_DROP_PROCESSING_ERROR);
	} else {
		*fl = *sb;
		fl->on = true;
	}
	sb->on = false;
}

/* Step 4: the epoch being submitted was cut short after processing took part of it: finished
 * without output, the history reset (mu held, and dropped meanwhile). */
static void step_cut(struct pl_pipeline *pl, struct pl_flight *sb)
{
	bool history = pl->cfg.reconstruct.mode != CFG_RECON_NONE;
	bool finished;

	pl->cut_set = false;
	pthread_mutex_unlock(&pl->mu);
	finished = finish_unwanted(pl, sb);
	if (finished && history) {
		/* its made-up B-scans are now in the history: start afresh */
		be_reset_history(pl->be);
		pl->reset_flag = true;
		pl_emit(pl, "history_reset", PL_NOTICE, true,
		        "reconstruction history reset: an epoch was cut short after its first "
		        "B-scans were processed");
	}
	pl_emit(pl, "incomplete_epoch", PL_INFO, false,
	        "epoch %llu cut short after %u of %u B-scans: not published",
	        (unsigned long long)sb->epoch, sb->n, pl->nraw);
	pthread_mutex_lock(&pl->mu);
	finish_entries(pl, sb->n, false, PL_DROP_INCOMPLETE_EPOCH);
	sb->on = false;
}

/* Step 1: take what acquisition delivered of the epoch being submitted, and submit it (mu
 * held, and dropped meanwhile). Whether it submitted anything. */
static bool step_submit(struct pl_pipeline *pl, struct pl_flight *sb, uint32_t avail, bool start)
{
	uint32_t from = pl->ring.claimed, k = 0;

	if (start) {
		memset(sb, 0, sizeof(*sb));
		sb->on = true;
		sb->epoch = pl_ring_at(&pl->ring, pl->ring.claimed)->epoch;
	}
	if (!sb->on || !avail || sb->n >= pl->nraw)
		return false;
	while (k < avail && sb->n + k < pl->nraw &&
	       pl_ring_at(&pl->ring, from + k)->epoch == sb->epoch)
		k++;
	if (!k)
		return false;
	pl_ring_claim(&pl->ring, k);
	pthread_mutex_unlock(&pl->mu);
	submit(pl, sb, from, k);
	pthread_mutex_lock(&pl->mu);
	sb->n += k;
	return true;
}

/* The processing thread: requests between epochs, then the steps above in turn until
 * stopping has drained everything. */
void *pl_proc_main(void *arg)
{
	struct pl_pipeline *pl = arg;
	struct pl_flight fl = {0}, sb = {0};

	pthread_mutex_lock(&pl->mu);
	while (1) {
		bool requests = requests_pending(pl);
		uint32_t avail = pl_ring_avail(&pl->ring);
		bool take = pl->depth > 1 || !fl.on;

		atomic_store(&pl->proc_waiting, false);
		if (!fl.on && !sb.on && requests) {
			apply_requests(pl);
			continue;
		}
		if (take &&
		    step_submit(pl, &sb, avail,
		                !sb.on && !requests && avail >= (pl->depth > 1 ? 1 : pl->nraw)))
			continue;
		if (fl.on) {
			step_land(pl, &fl);
			continue;
		}
		if (sb.on && sb.n == pl->nraw) {
			step_launch(pl, &sb, &fl);
			continue;
		}
		if (sb.on && sb.n < pl->nraw && pl->cut_set && pl->cut_epoch == sb.epoch &&
		    (!avail || pl_ring_at(&pl->ring, pl->ring.claimed)->epoch != sb.epoch)) {
			step_cut(pl, &sb);
			continue;
		}
		/* stopping: everything acquired was processed or dropped */
		if (!sb.on && pl->stop_proc && pl->acq_done && pl->ring.ready == 0)
			break;
		atomic_store(&pl->proc_waiting, true);
		pthread_cond_wait(&pl->cv_data, &pl->mu);
	}
	atomic_store(&pl->proc_waiting, true);
	pthread_mutex_unlock(&pl->mu);
	return NULL;
}
