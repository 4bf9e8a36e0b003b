/* SPDX-License-Identifier: MIT */
/*
 * The pipeline's acquisition thread (docs/architecture.md): it drives the source into the raw
 * ring epoch by epoch, never waiting for processing unless the pipeline blocks. Each epoch is a
 * list of steps: begin it (scan offset, start, room in the ring), take its B-scans one by one
 * (check, commit or drop), end it (cut, recovered or complete).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/internal.h"

/* ---- checks of what the source delivers ------------------------------------------------ */

/*
 * The acquisition time of a B-scan: the source's timestamp, or the clock when it gave none or
 * one further than TS_SKEW_MAX_NS from the clock (counted; the first of a series of such
 * B-scans in a row is logged at warning, the rest at debug). mu held.
 */
static uint64_t acq_time(struct pl_pipeline *pl, const struct volrec_shim_meta *m)
{
	uint64_t now = vr_real_ns();
	bool first = !pl->ts_failing;

	pl->ts_failing = m->timestamp_ns && (m->timestamp_ns > now + TS_SKEW_MAX_NS ||
	                                     m->timestamp_ns + TS_SKEW_MAX_NS < now);
	if (!pl->ts_failing)
		return m->timestamp_ns ? m->timestamp_ns : now;
	pl->c.bad_timestamps++;
	pl_emit(pl, "source_fault", first ? PL_WARNING : PL_DEBUG, false,
	        "source %s: epoch %llu B-scan %u: meta.timestamp_ns %llu is %.0f s from the clock "
	        "(CLOCK_REALTIME ns expected, at most %llu s away): the clock is used",
	        pl->src.info.name, (unsigned long long)m->epoch, m->bscan,
	        (unsigned long long)m->timestamp_ns, ((double)m->timestamp_ns - (double)now) / 1e9,
	        (unsigned long long)(TS_SKEW_MAX_NS / 1000000000ull));
	return now;
}

/* Whether the guard after buf[0, n) is intact; else restore it and say where it was hit. */
static bool guard_check(struct pl_pipeline *pl, void *buf, const struct volrec_shim_meta *m,
                        char *msg, size_t len)
{
	const uint8_t *g = (const uint8_t *)buf + pl->bscan_bytes;
	unsigned i = 0;

	while (i < GUARD_BYTES && g[i] == pl_guard_byte(i))
		i++;
	if (i == GUARD_BYTES)
		return true;
	pl_guard_set(buf, pl->bscan_bytes);
	snprintf(msg, len,
	         "source %s: acquire() wrote past the %zu bytes of its buffer (byte %zu changed; "
	         "epoch %llu B-scan %u): the B-scan is not used",
	         pl->src.info.name, pl->bscan_bytes, pl->bscan_bytes + i,
	         (unsigned long long)m->epoch, m->bscan);
	return false;
}

/*
 * Whether the flags of a delivered B-scan can be taken as the source says: no bit that shim.h
 * does not define, and a B-scan marked lost or incomplete only when the marks were offered
 * (VOLREC_SHIM_GEOMETRY_MARKS); else -EPROTO with the message in msg.
 */
static int meta_check(const struct pl_pipeline *pl, const struct volrec_shim_meta *m, char *msg,
                      size_t len)
{
	uint32_t marks = VOLREC_SHIM_META_LOST | VOLREC_SHIM_META_INCOMPLETE;

	if (m->flags & ~META_KNOWN) {
		snprintf(msg, len,
		         "source %s: epoch %llu B-scan %u: meta.flags 0x%x has bits 0x%x that "
		         "volrec does not know (known: 0x%x): the B-scan is not used",
		         pl->src.info.name, (unsigned long long)m->epoch, m->bscan, m->flags,
		         m->flags & ~META_KNOWN, META_KNOWN);
		return -EPROTO;
	}
	if ((m->flags & marks) && !(pl->opt.src_flags & SRC_DROP_MARKS)) {
		snprintf(msg, len,
		         "source %s: epoch %llu B-scan %u marked %s (meta.flags 0x%x), but the "
		         "marks were not offered (geometry.flags has no "
		         "VOLREC_SHIM_GEOMETRY_MARKS): a loss must be returned as an error here",
		         pl->src.info.name, (unsigned long long)m->epoch, m->bscan,
		         m->flags & VOLREC_SHIM_META_LOST ? "lost" : "incomplete", m->flags);
		return -EPROTO;
	}
	return 0;
}

/* Whether a whole B-scan at p lies in a registered region (acquisition thread). */
static bool ref_inside(const struct pl_pipeline *pl, const void *p)
{
	for (uint32_t i = 0; i < pl->nregions; i++) {
		uintptr_t b = (uintptr_t)pl->regions[i].base, q = (uintptr_t)p;

		if (q >= b && q - b <= pl->regions[i].size - pl->bscan_bytes)
			return true;
	}
	return false;
}

/* ---- acquisition -------------------------------------------------------------------------- */

/* Wait on cv (a CLOCK_MONOTONIC one, mu held) until *flag is set or ms have passed. */
void pl_wait_flag(pthread_cond_t *cv, pthread_mutex_t *mu, const bool *flag, int ms)
{
	uint64_t t = vr_mono_ns() + (uint64_t)ms * 1000000ull;
	struct timespec ts = {.tv_sec = (time_t)(t / 1000000000ull),
	                      .tv_nsec = (long)(t % 1000000000ull)};

	while (!*flag)
		if (pthread_cond_timedwait(cv, mu, &ts) == ETIMEDOUT)
			break;
}

/* Before each call into the source from acquisition: which one, since when (pl_stats reports
 * it when it does not return in time, pl_stop names it when it gives up on it). */
static void call_enter(struct pl_pipeline *pl, const char *what)
{
	pthread_mutex_lock(&pl->mu);
	pl->call = what;
	pl->call_ns = vr_mono_ns();
	pl->call_late = false;
	pthread_mutex_unlock(&pl->mu);
}

/* After each call into the source: whether pl_stop gave up waiting for it (then nothing but
 * the lock may be touched any more). */
static bool acq_abandoned(struct pl_pipeline *pl)
{
	bool ab;

	pthread_mutex_lock(&pl->mu);
	ab = pl->abandoned;
	if (!ab) {
		pl->late_returned |= pl->call_late;
		pl->call = NULL;
		pl->call_late = false;
	}
	pthread_mutex_unlock(&pl->mu);
	atomic_fetch_add(&pl->acq_returns, 1);
	return ab;
}

static int source_reopen(struct pl_pipeline *pl)
{
	char err[512];
	int rc;

	if (pl->src_is_open && pl->zc) {
		bool stop;

		/* zero-copy: every reference into the old source must be given back (its epochs
		 * processed or dropped) and its regions unregistered before it is closed */
		pthread_mutex_lock(&pl->mu);
		while (pl->ring.ready && !pl->stop_acq)
			pthread_cond_wait(&pl->cv_room, &pl->mu);
		stop = pl->stop_acq;
		pthread_mutex_unlock(&pl->mu);
		if (stop)
			return -ECANCELED; /* the source is closed after processing stopped */
		(void)pl_set_regions(pl, NULL, 0, err, sizeof(err));
	}
	if (pl->src_is_open) {
		call_enter(pl, "stop()/close()");
		pl_source_close(pl);
		pl->src_is_open = false;
	}
	call_enter(pl, "open()");
	rc = pl_source_open(pl, err, sizeof(err));
	if (rc < 0) {
		pl_emit(pl, "source_fault", PL_WARNING, false, "source: reopening failed: %s", err);
		snprintf(pl->reopen_err, sizeof(pl->reopen_err), "%.200s", err);
		return rc;
	}
	pl->reopen_err[0] = '\0';
	if (pl->zc) {
		struct volrec_shim_region *regs = NULL;
		uint32_t n = 0;

		call_enter(pl, "ref_regions()");
		if (src_has_refs(&pl->src))
			rc = pl_source_regions(pl, &regs, &n, err, sizeof(err));
		else
			rc = vr_err(err, sizeof(err), -EPROTO,
			            "the reopened source has no zero-copy calls");
		if (rc == 0)
			rc = pl_set_regions(pl, regs, n, err, sizeof(err));
		if (rc < 0) {
			pl_emit(pl, "source_fault", PL_WARNING, false,
			        "source: reopened, but zero-copy acquisition cannot resume: %s",
			        err);
			call_enter(pl, "stop()/close()");
			pl_source_close(pl);
			return rc;
		}
	}
	pl->src_is_open = true;
	pthread_mutex_lock(&pl->mu);
	pl_source_info_update(pl);
	pl->c.source_reopens++;
	pthread_mutex_unlock(&pl->mu);
	pl_emit(pl, NULL, PL_NOTICE, false, "source: reopened %s", pl->src.info.name);
	return 0;
}

/* The text of a failed source call (src_strerror names the source and the call); while the
 * source cannot be reopened, why not. */
static void fault_text(struct pl_pipeline *pl, int rc, char *msg, size_t len)
{
	if (!pl->src_is_open && pl->reopen_err[0])
		snprintf(msg, len, "source: reopening failed: %s", pl->reopen_err);
	else if (!pl->src_is_open)
		snprintf(msg, len, "source: not open: %s", strerror(-rc));
	else
		snprintf(msg, len, "%s", src_strerror(&pl->src, rc));
}

/*
 * A fault: with stop_on_fault the run ends with it; otherwise count, go degraded (an event on
 * the first of a series), back off, and every REOPEN_AFTER faults reopen the source. Returns
 * true when acquisition must end (stopping, or abandoned).
 */
static bool source_fault(struct pl_pipeline *pl, const char *msg, int rc, unsigned *streak,
                         int *backoff_ms, bool *started)
{
	bool first, stop;

	if (pl->opt.stop_on_fault) {
		pl_fail_run(pl, rc, msg);
		return true;
	}
	pthread_mutex_lock(&pl->mu);
	pl->c.source_faults++;
	first = !pl->degraded;
	pl->degraded = true;
	vr_utf8_sanitize(msg, pl->fault, sizeof(pl->fault));
	pthread_mutex_unlock(&pl->mu);
	pl_emit(pl, "source_fault", first ? PL_WARNING : PL_DEBUG, first, "%s", msg);

	(*streak)++;
	*backoff_ms = *streak == 1 ? BACKOFF_FIRST_MS : *backoff_ms * 2;
	if (*backoff_ms > BACKOFF_MAX_MS)
		*backoff_ms = BACKOFF_MAX_MS;
	atomic_store(&pl->acq_state, PL_ACQ_BACKOFF);
	pthread_mutex_lock(&pl->mu);
	pl_wait_flag(&pl->cv_room, &pl->mu, &pl->stop_acq, *backoff_ms); /* or until stopping */
	stop = pl->stop_acq;
	pthread_mutex_unlock(&pl->mu);
	atomic_fetch_add(&pl->acq_returns, 1);
	if (stop)
		return true;
	if (!pl->src_is_open || *streak % REOPEN_AFTER == 0) {
		atomic_store(&pl->acq_state, PL_ACQ_ACQUIRING);
		rc = source_reopen(pl);
		if (acq_abandoned(pl))
			return true;
		if (rc == 0)
			*started = false;
	}
	return false;
}

/*
 * The epoch being acquired ends short (fault, stop, a mis-numbered B-scan). Unfilled room goes
 * back. When processing has taken none of its B-scans they are dropped here; otherwise (depth
 * 2) processing already gave some to the backend: the partial epoch stays processing's, which
 * finishes it without publishing and counts its B-scans as incomplete_epoch. mu held.
 */
void pl_cut_epoch(struct pl_pipeline *pl)
{
	struct pl_ring *r = &pl->ring;
	uint32_t got = pl->acq_got, n;

	pl_ring_unreserve(r);
	pl->acq_got = 0;
	if (!got)
		return;
	if (r->claimed > r->ready - got) {
		pl->cut_set = true;
		pl->cut_epoch = pl->acq_epoch;
		pthread_cond_signal(&pl->cv_data);
		return;
	}
	pl_release_entries(pl, r->ready - got, got);
	n = pl_ring_retract(r, got);
	pl->c.drops[PL_DROP_INCOMPLETE_EPOCH] += n;
}

/* The epoch being acquired cannot be whole: cut it (unless it is dropped already) and drop
 * the rest of it, acquired so that positions stay aligned, as incomplete_epoch. mu held. */
static void drop_rest(struct pl_pipeline *pl, bool *dropping, enum pl_drop *why)
{
	if (*dropping)
		return;
	pl_cut_epoch(pl);
	*dropping = true;
	*why = PL_DROP_INCOMPLETE_EPOCH;
}

/*
 * The source lost data before B-scan b of epoch e (VOLREC_SHIM_META_DROPPED_BEFORE; the
 * B-scan itself is data): counted, with an event, the first of a series (epochs in a row
 * with such marks) at warning and the rest at debug. After B-scan 0 the epoch's history has
 * a gap: it is cut as if that position were lost (returns true); on B-scan 0 the epoch is
 * whole, and its volume says that the history before it has a gap.
 */
static bool source_gap(struct pl_pipeline *pl, uint64_t e, uint32_t b, bool *series)
{
	enum pl_level level = *series ? PL_DEBUG : PL_WARNING;

	pthread_mutex_lock(&pl->mu);
	pl->c.source_gaps++;
	pthread_mutex_unlock(&pl->mu);
	if (b > 0)
		pl_emit(pl, "source_gap", level, !*series,
		        "source %s: data lost before epoch %llu B-scan %u (dropped_before): the "
		        "epoch is cut short",
		        pl->src.info.name, (unsigned long long)e, b);
	else
		pl_emit(pl, "source_gap", level, !*series,
		        "source %s: data lost before epoch %llu (dropped_before): its volume is "
		        "flagged dropped_before",
		        pl->src.info.name, (unsigned long long)e);
	*series = true;
	return b > 0;
}

/* Whether a failed acquire means the replay file ended (nothing more will come). */
static bool source_ended(const struct pl_pipeline *pl, int rc)
{
	return rc == -ENODATA && pl->cfg.source.type == CFG_SOURCE_REPLAY &&
	       (!pl->cfg.source.replay.loop || (pl->opt.src_flags & SRC_NO_LOOP));
}

/* What acquisition carries from epoch to epoch. */
struct acq {
	uint64_t e;      /* the epoch being acquired */
	bool started;    /* the source was started */
	bool recovering; /* a fault cut an epoch: the next whole one says the source is back */
	bool resync;     /* after a cut: the source may still deliver the rest of its epoch */
	bool gap_series; /* epochs with data lost before them in a row */
	unsigned streak; /* faults in a row */
	int backoff_ms;
};

/* One epoch being acquired. */
struct acq_epoch {
	uint32_t b;        /* the B-scan due */
	uint32_t discards; /* leftovers of a cut epoch dropped */
	bool dropping;     /* the rest of the epoch goes to the drop counters, not the ring */
	enum pl_drop dropping_why;
	bool cut;    /* the epoch ended before its last B-scan */
	bool gapped; /* the source lost data before one of its B-scans */
	char msg[MSG_MAX];
};

/* What a step tells the loop. */
enum acq_next {
	ACQ_GO,   /* go on with the next step (or B-scan) */
	ACQ_SKIP, /* this B-scan is not counted: take the same one again */
	ACQ_CUT,  /* the epoch ends here */
	ACQ_NEXT, /* go on with the next epoch */
	ACQ_STOP, /* leave the loop: stopping, or the run's last epoch was acquired */
	ACQ_GONE, /* leave at once: pl_stop went on without this thread, or the source ended */
};

static void release_ref_locked(struct pl_pipeline *pl, const void *data)
{
	pthread_mutex_lock(&pl->mu);
	pl_release_one(pl, data);
	pthread_mutex_unlock(&pl->mu);
}

/* A fault outside a B-scan: reported, backed off; ACQ_STOP when the run ends with it. */
static enum acq_next acq_fault(struct pl_pipeline *pl, struct acq *a, const char *msg, int rc)
{
	return source_fault(pl, msg, rc, &a->streak, &a->backoff_ms, &a->started) ? ACQ_STOP
	                                                                          : ACQ_NEXT;
}

/* Step 1: whether to go on, the scan offset, the start, and room for the whole epoch. */
static enum acq_next epoch_begin(struct pl_pipeline *pl, struct acq *a, struct acq_epoch *ep)
{
	const struct vr_config *cfg = &pl->cfg;
	uint32_t ox, oy;
	bool stop;
	int rc;

	if (pl->epochs && a->e - pl->first_epoch >= pl->epochs) {
		atomic_store(&pl->acq_state, PL_ACQ_ENDED);
		return ACQ_STOP;
	}
	pthread_mutex_lock(&pl->mu);
	stop = pl->stop_acq;
	pthread_mutex_unlock(&pl->mu);
	if (stop)
		return ACQ_STOP;
	if (!pl->src_is_open) {
		fault_text(pl, -ENODEV, ep->msg, sizeof(ep->msg));
		/* the same epoch again once the source is back */
		return source_fault(pl, ep->msg, -ENODEV, &a->streak, &a->backoff_ms, &a->started)
		               ? ACQ_STOP
		               : ACQ_SKIP;
	}
	vr_scan_offset(a->e, cfg->geometry.stride[0], cfg->geometry.stride[1], &ox, &oy);
	atomic_store(&pl->acq_state, PL_ACQ_ACQUIRING);
	call_enter(pl, "set_scan_offset()");
	rc = src_set_scan_offset(&pl->src, a->e, ox, oy);
	if (rc == 0 && !a->started) {
		call_enter(pl, "start()");
		rc = src_start(&pl->src);
		a->started = rc == 0;
	}
	if (acq_abandoned(pl))
		return ACQ_GONE;
	if (rc < 0) {
		fault_text(pl, rc, ep->msg, sizeof(ep->msg));
		return acq_fault(pl, a, ep->msg, rc);
	}
	pthread_mutex_lock(&pl->mu);
	pl->c.epochs_started++;
	pl->acq_epoch = a->e;
	pl->acq_got = 0;
	/* room for the whole epoch is taken at its start: processing (depth 2) may hold part of
	 * an epoch, so the ring never fills in the middle of one */
	while (!pl->stop_acq && !pl_ring_reserve(&pl->ring, pl->nraw)) {
		if (!pl->block) {
			ep->dropping = true;
			break;
		}
		atomic_store(&pl->acq_state, PL_ACQ_WAIT_ROOM);
		pthread_cond_wait(&pl->cv_room, &pl->mu);
	}
	pthread_mutex_unlock(&pl->mu);
	return ACQ_GO;
}

/* Step 2a: one B-scan from the source (copied, or by reference); 0 or a negative errno with
 * ep->msg. *data and *meta are what it delivered. ACQ_GONE when abandoned meanwhile. */
static enum acq_next bscan_take(struct pl_pipeline *pl, struct acq_epoch *ep, void *buf,
                                const void **data, struct volrec_shim_meta *meta, int *rcp)
{
	int rc;

	atomic_store(&pl->acq_state, PL_ACQ_ACQUIRING);
	call_enter(pl, pl->zc ? "acquire_ref()" : "acquire()");
	if (pl->zc) {
		rc = src_acquire_ref(&pl->src, data, pl->timeout_ms, meta);
		if (rc == 0 && !ref_inside(pl, *data)) {
			release_ref_locked(pl, *data);
			rc = -EFAULT;
		}
	} else {
		rc = src_acquire(&pl->src, buf, pl->bscan_bytes, pl->timeout_ms, meta);
		*data = buf;
	}
	if (acq_abandoned(pl)) {
		if (rc == 0 && pl->zc)
			release_ref_locked(pl, *data);
		return ACQ_GONE;
	}
	if (rc == 0 && !pl->zc && !guard_check(pl, buf, meta, ep->msg, sizeof(ep->msg))) {
		rc = -EPROTO;
	} else if (rc == 0 && meta_check(pl, meta, ep->msg, sizeof(ep->msg)) < 0) {
		if (pl->zc)
			release_ref_locked(pl, *data);
		rc = -EPROTO;
	} else if (rc == -EFAULT && pl->zc) {
		snprintf(ep->msg, sizeof(ep->msg),
		         "source %s: acquire_ref() returned a B-scan outside the regions it "
		         "reported",
		         pl->src.info.name);
	} else if (rc < 0) {
		fault_text(pl, rc, ep->msg, sizeof(ep->msg));
	}
	*rcp = rc;
	return ACQ_GO;
}

/* Step 2b: a B-scan the source failed to deliver: counted; the epoch is cut. */
static enum acq_next bscan_failed(struct pl_pipeline *pl, struct acq *a, struct acq_epoch *ep,
                                  int rc)
{
	pthread_mutex_lock(&pl->mu);
	pl->c.drops[rc == -ETIMEDOUT ? PL_DROP_SOURCE_TIMEOUT : PL_DROP_SOURCE_ERROR]++;
	pthread_mutex_unlock(&pl->mu);
	if (source_ended(pl, rc)) {
		pthread_mutex_lock(&pl->mu);
		pl_cut_epoch(pl);
		pthread_mutex_unlock(&pl->mu);
		pl_emit(pl, "source_ended", PL_NOTICE, false,
		        "source: the replay file ended (loop: false); nothing more to acquire");
		atomic_store(&pl->acq_state, PL_ACQ_ENDED);
		return ACQ_GONE;
	}
	ep->cut = true;
	a->recovering = true;
	if (source_fault(pl, ep->msg, rc, &a->streak, &a->backoff_ms, &a->started))
		return ACQ_GONE;
	return ACQ_CUT;
}

/* Step 2c: a B-scan of another position than the one due: a leftover of a cut epoch is
 * dropped (ACQ_SKIP), anything else cuts the epoch. */
static enum acq_next bscan_misplaced(struct pl_pipeline *pl, struct acq *a, struct acq_epoch *ep,
                                     const void *data, const struct volrec_shim_meta *meta)
{
	/* after a cut the source may still deliver the rest of the epoch it was in: those are
	 * dropped until its next epoch begins */
	bool leftover = a->resync && ep->b == 0 && (meta->bscan != 0 || meta->repeat != 0) &&
	                ep->discards < pl->nraw;

	pthread_mutex_lock(&pl->mu);
	pl->c.acquired++;
	pl->c.drops[PL_DROP_INCOMPLETE_EPOCH]++;
	if (pl->zc)
		pl_release_one(pl, data);
	pthread_mutex_unlock(&pl->mu);
	if (leftover) {
		ep->discards++;
		return ACQ_SKIP;
	}
	if (pl->repeats > 1)
		snprintf(ep->msg, sizeof(ep->msg),
		         "source %s: delivered epoch %llu B-scan %u repeat %u where epoch %llu "
		         "B-scan %u repeat %u was due",
		         pl->src.info.name, (unsigned long long)meta->epoch, meta->bscan,
		         meta->repeat, (unsigned long long)a->e, ep->b / pl->repeats,
		         ep->b % pl->repeats);
	else
		snprintf(ep->msg, sizeof(ep->msg),
		         "source %s: delivered epoch %llu B-scan %u where epoch %llu B-scan %u "
		         "was due",
		         pl->src.info.name, (unsigned long long)meta->epoch, meta->bscan,
		         (unsigned long long)a->e, ep->b);
	ep->cut = true;
	a->recovering = true;
	if (source_fault(pl, ep->msg, -EPROTO, &a->streak, &a->backoff_ms, &a->started))
		return ACQ_GONE;
	return ACQ_CUT;
}

/* Step 2d: the B-scan due, delivered: its marks, then into the ring (or the drop counters). */
static void bscan_commit(struct pl_pipeline *pl, struct acq *a, struct acq_epoch *ep,
                         struct pl_entry *en, const void *data, const struct volrec_shim_meta *meta)
{
	uint64_t t_real;

	a->resync = false;
	if (meta->flags & VOLREC_SHIM_META_DROPPED_BEFORE) {
		ep->gapped = true;
		if (source_gap(pl, a->e, ep->b, &a->gap_series)) {
			pthread_mutex_lock(&pl->mu);
			drop_rest(pl, &ep->dropping, &ep->dropping_why);
			pthread_mutex_unlock(&pl->mu);
		}
	}
	if (pl->opt.tap && !(meta->flags & (VOLREC_SHIM_META_LOST | VOLREC_SHIM_META_INCOMPLETE)))
		pl->opt.tap->bscan(pl->opt.tap->ctx, a->e, ep->b, data, pl->bscan_bytes,
		                   meta->timestamp_ns,
		                   (ep->gapped ? PL_TAP_GAP : 0) |
		                           (ep->dropping && ep->dropping_why == PL_DROP_RING_FULL
		                                    ? PL_TAP_RING_FULL
		                                    : 0));
	pthread_mutex_lock(&pl->mu);
	if (meta->flags & (VOLREC_SHIM_META_LOST | VOLREC_SHIM_META_INCOMPLETE)) {
		/* the source has no data for this position (docs/shim.md): not a fault, but the
		 * epoch cannot be whole */
		if (pl->zc)
			pl_release_one(pl, data);
		pl->c.drops[meta->flags & VOLREC_SHIM_META_LOST ? PL_DROP_SOURCE_LOST
		                                                : PL_DROP_SOURCE_INCOMPLETE]++;
		drop_rest(pl, &ep->dropping, &ep->dropping_why);
		pthread_mutex_unlock(&pl->mu);
		return;
	}
	pl->c.acquired++;
	t_real = acq_time(pl, meta); /* checked whether kept or dropped */
	if (ep->dropping) {
		if (pl->zc)
			pl_release_one(pl, data);
		pl->c.drops[ep->dropping_why]++;
	} else {
		en->data = data;
		en->ref = pl->zc;
		en->gap_before = ep->b == 0 && ep->gapped;
		en->epoch = a->e;
		en->bscan = ep->b;
		en->t_mono_ns = vr_mono_ns();
		en->t_real_ns = t_real;
		pl_ring_commit(&pl->ring);
		pl->acq_got++;
		if (pl->depth > 1 || pl->acq_got == pl->nraw)
			pthread_cond_signal(&pl->cv_data);
	}
	pthread_mutex_unlock(&pl->mu);
}

/* Step 2: the B-scan due (ep->b): ACQ_GO (the next one is due), ACQ_SKIP (the same again),
 * ACQ_CUT or ACQ_GONE. */
static enum acq_next bscan_step(struct pl_pipeline *pl, struct acq *a, struct acq_epoch *ep)
{
	struct volrec_shim_meta meta = {0};
	const void *data = NULL;
	struct pl_entry *en;
	enum acq_next next;
	void *buf;
	int rc = 0;

	pthread_mutex_lock(&pl->mu);
	if (pl->stop_acq) {
		pthread_mutex_unlock(&pl->mu);
		ep->cut = true;
		return ACQ_CUT;
	}
	en = ep->dropping ? NULL : pl_ring_next(&pl->ring);
	buf = en ? en->buf : pl->scratch;
	pthread_mutex_unlock(&pl->mu);

	next = bscan_take(pl, ep, buf, &data, &meta, &rc);
	if (next != ACQ_GO)
		return next;
	if (rc < 0)
		return bscan_failed(pl, a, ep, rc);
	if (meta.epoch != a->e || meta.bscan != ep->b / pl->repeats ||
	    meta.repeat != ep->b % pl->repeats)
		return bscan_misplaced(pl, a, ep, data, &meta);
	bscan_commit(pl, a, ep, en, data, &meta);
	return ACQ_GO;
}

/* Step 3: the epoch's end: a cut one is given up (ACQ_NEXT after a fault, ACQ_STOP when
 * stopping); a whole one after faults says the source is back. */
static enum acq_next epoch_end(struct pl_pipeline *pl, struct acq *a, struct acq_epoch *ep)
{
	pthread_mutex_lock(&pl->mu);
	if (ep->cut)
		pl_cut_epoch(pl);
	else
		pl->acq_got = 0; /* complete (or dropped whole): processing's now */
	pthread_mutex_unlock(&pl->mu);
	if (pl->opt.tap)
		pl->opt.tap->epoch_end(pl->opt.tap->ctx, a->e, !ep->cut);
	if (ep->cut) {
		if (!a->recovering)
			return ACQ_STOP; /* stopping */
		a->resync = true;
		return ACQ_NEXT;
	}
	if (!ep->gapped)
		a->gap_series = false; /* a whole epoch without data lost before it */
	if (a->recovering || a->streak || pl->late_returned) {
		/* a whole epoch came through after faults: the source is back */
		bool was;

		pthread_mutex_lock(&pl->mu);
		was = pl->degraded;
		pl->degraded = false;
		pl->fault[0] = '\0';
		pthread_mutex_unlock(&pl->mu);
		if (was)
			pl_emit(pl, "source_recovered", PL_NOTICE, true,
			        "source: acquiring again after a fault");
		a->recovering = false;
		a->streak = 0;
		pl->late_returned = false;
	}
	return ACQ_NEXT;
}

/* The thread's end: abandoned (pl_stop went on without it: it may have to free everything),
 * or the epoch in progress cut and the others told. */
static void acq_exit(struct pl_pipeline *pl)
{
	pthread_mutex_lock(&pl->mu);
	if (pl->abandoned) {
		/* pl_stop went on without this thread (it cut the epoch on our behalf); when
		 * pl_close came meanwhile, freeing everything is left to us */
		bool free_now = pl->close_requested;

		pl->acq_exited = true;
		pthread_mutex_unlock(&pl->mu);
		if (free_now)
			pl_free(pl);
		return;
	}
	if (atomic_load(&pl->acq_state) != PL_ACQ_ENDED)
		atomic_store(&pl->acq_state, PL_ACQ_IDLE);
	pl_cut_epoch(pl);
	pl->acq_done = true;
	pl->acq_exited = true;
	pthread_cond_broadcast(&pl->cv_data);
	pthread_cond_broadcast(&pl->cv_done);
	pthread_mutex_unlock(&pl->mu);
}

/* The acquisition thread: epoch after epoch, begin, its B-scans, end. */
void *pl_acq_main(void *arg)
{
	struct pl_pipeline *pl = arg;
	struct acq a = {.e = pl->first_epoch};
	enum acq_next next = ACQ_NEXT;

	while (next == ACQ_NEXT) {
		struct acq_epoch ep = {.dropping_why = PL_DROP_RING_FULL};

		next = epoch_begin(pl, &a, &ep);
		if (next == ACQ_SKIP) { /* no source: the same epoch once it is back */
			next = ACQ_NEXT;
			continue;
		}
		if (next == ACQ_NEXT) { /* a fault at its start: the next epoch */
			a.e++;
			continue;
		}
		while (next == ACQ_GO && ep.b < pl->nraw) {
			next = bscan_step(pl, &a, &ep);
			if (next == ACQ_GO)
				ep.b++;
			else if (next == ACQ_SKIP)
				next = ACQ_GO;
		}
		if (next == ACQ_GONE || next == ACQ_STOP)
			break;
		next = epoch_end(pl, &a, &ep);
		if (next == ACQ_NEXT)
			a.e++;
	}
	acq_exit(pl);
	return NULL;
}
