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

#include "internal.h"
#include "volrec/protocol.h"

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

#define BACKOFF_FIRST_MS 100
#define BACKOFF_MAX_MS   5000
#define REOPEN_AFTER     5     /* consecutive faults before the source is closed and reopened */
#define REGIONS_MAX      4096u /* most regions a source may report */
#define STOP_GRACE_MS    1000  /* a stuck source call is waited for its timeout plus this */
#define MSG_MAX          1024
/* A source timestamp further than this from CLOCK_REALTIME is not used (the clock is) */
#define TS_SKEW_MAX_NS (60ull * 1000000000ull)
/* Bytes after each copy buffer a source is given, checked after every acquire() */
#define GUARD_BYTES 64u
#define SLOT_ALIGN  4096u /* page: DMA from the ring as aligned as before */
#define META_KNOWN                                                                                 \
	(VOLREC_SHIM_META_DROPPED_BEFORE | VOLREC_SHIM_META_LOST | VOLREC_SHIM_META_INCOMPLETE)

struct pl_pipeline {
	struct pl_options opt;
	struct vr_config cfg; /* owned copy: the structural parameters in force */
	struct be_backend *be;
	struct src_source src;
	bool src_is_open;
	char reopen_err[256];             /* why the source could not be reopened, "" when it was */
	struct volrec_shim_info src_info; /* sanitized copy for other threads, under mu */
	uint64_t src_epochs;
	struct pl_sink sink;
	size_t bscan_bytes;
	int timeout_ms;
	uint32_t ny;
	int depth;       /* 1 or 2 */
	uint64_t epochs; /* pl_run: acquire epochs 0..epochs-1, then end (0: until pl_stop) */
	bool block;      /* wait for room instead of dropping */

	void *ring_mem;    /* copying path: the ring's B-scans (host_alloc) */
	void *scratch;     /* where B-scans of a dropped epoch land */
	size_t slot_bytes; /* ring stride: a B-scan, its guard, aligned to SLOT_ALIGN */
	struct pl_ring ring;
	bool zc;                            /* zero-copy: entries are references (fixed) */
	char zc_why[512];                   /* why the copying path runs */
	struct volrec_shim_region *regions; /* the source's regions registered with the backend */
	uint32_t nregions;
	/* a new region set for the processing thread to register (source reopened; zc only) */
	struct volrec_shim_region *reg_new;
	uint32_t reg_new_n;
	uint64_t reg_req, reg_done;
	int reg_rc;
	char reg_err[512];

	/* the epoch acquisition is in (for a cut on its behalf when it is abandoned) */
	uint64_t acq_epoch;
	uint32_t acq_got; /* its B-scans committed to the ring */
	/* an epoch cut short after processing took part of it (depth 2) */
	bool cut_set;
	uint64_t cut_epoch;

	pthread_mutex_t mu;
	pthread_cond_t cv_data; /* processing waits for B-scans or a request */
	pthread_cond_t cv_room; /* acquisition waits for room, sleeps in back-off */
	pthread_cond_t cv_done; /* pl_run and pl_stop wait for acquisition to end */
	bool stop_acq, acq_done, acq_exited, stop_proc;
	bool abandoned;       /* pl_stop went on without the acquisition thread */
	bool close_requested; /* abandoned, and pl_close was called: the thread frees pl */
	/* on_event is called with ev_mu held, never once muted: pl_close mutes the events of an
	 * acquisition thread it leaves behind, since its driver is gone when it returns */
	pthread_mutex_t ev_mu;
	bool muted;
	int fail_rc; /* stop_on_fault: the first fault or error */
	char fail_msg[MSG_MAX];

	/* requests applied by the processing thread between epochs */
	struct vr_config live_cfg;
	uint64_t live_req, live_done;
	uint32_t live_gen;   /* generation of live_cfg's live values */
	uint32_t generation; /* generation applied to the backend (processing thread) */
	int live_rc;
	char live_err[512];
	uint64_t reset_req, reset_done;
	bool reset_flag; /* the next published volume is the first after a history reset */

	/* the source call acquisition is inside, for pl_stats and pl_stop to name (under mu) */
	const char *call;   /* "acquire()", "open()", ...; NULL between calls */
	uint64_t call_ns;   /* when it began (CLOCK_MONOTONIC) */
	bool call_late;     /* reported as not returning past its timeout (once per call) */
	bool late_returned; /* a late call returned: degraded until a whole epoch comes (set
	                     * and cleared by acquisition only) */

	/* watchdog marks */
	_Atomic uint64_t proc_epochs, acq_returns;
	_Atomic bool proc_waiting;
	_Atomic int acq_state;

	/* statistics, under mu */
	struct pl_counters c;
	struct vr_window lat[PL_LAT_N];
	bool degraded;
	char fault[256];
	bool release_failing; /* the last release_ref() failed */
	bool ts_failing;      /* the last B-scan's timestamp was not used */
	uint64_t last_epoch;

	pthread_t acq_thr, proc_thr;
	bool acq_started, proc_started, started, stopped;
};

/* ---- events ------------------------------------------------------------------------------- */

static void emit(struct pl_pipeline *pl, const char *name, enum pl_level level, bool announce,
                 const char *fmt, ...) VR_PRINTF(5, 6);

static void emit(struct pl_pipeline *pl, const char *name, enum pl_level level, bool announce,
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
static void fail_run(struct pl_pipeline *pl, int rc, const char *msg)
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

static int source_open(struct pl_pipeline *pl, char *err, size_t errlen)
{
	memset(&pl->src, 0, sizeof(pl->src));
	if (pl->opt.source_open)
		return pl->opt.source_open(pl->opt.source_ctx, &pl->cfg, pl->opt.src_flags,
		                           &pl->src, err, errlen);
	return src_open(&pl->cfg, pl->opt.src_flags, &pl->src, err, errlen);
}

static void source_close(struct pl_pipeline *pl)
{
	char err[MSG_MAX];

	if (pl->opt.source_close)
		pl->opt.source_close(pl->opt.source_ctx, &pl->src);
	else if (src_close_checked(&pl->src, err, sizeof(err)) < 0)
		emit(pl, "source_fault", PL_WARNING, false, "%s (closed all the same)", err);
	memset(&pl->src, 0, sizeof(pl->src));
}

/* Copy the source's info, each string made valid UTF-8, for other threads. mu held. */
static void source_info_update(struct pl_pipeline *pl)
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
static void regions_unregister(struct pl_pipeline *pl)
{
	for (uint32_t i = 0; i < pl->nregions; i++)
		be_host_unregister(pl->be, (void *)pl->regions[i].base);
	free(pl->regions);
	pl->regions = NULL;
	pl->nregions = 0;
}

/* Register regs[0..n) (malloc'ed, taken over in every case) with the backend; on failure
 * nothing stays registered. Backend call: the thread that owns it. */
static int regions_register(struct pl_pipeline *pl, struct volrec_shim_region *regs, uint32_t n,
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
static int source_regions(struct pl_pipeline *pl, struct volrec_shim_region **out, uint32_t *n,
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

/* Give back a reference to the source (mu held: release_ref calls never overlap). A failure
 * is counted; the first of a series (failures in a row) is logged at warning, the rest at
 * debug: a shim failing every release would otherwise flood the log with one per B-scan. */
static void release_one(struct pl_pipeline *pl, const void *p)
{
	int rc = src_release_ref(&pl->src, p);
	bool first = !pl->release_failing;

	pl->release_failing = rc < 0;
	if (rc == 0)
		return;
	pl->c.release_errors++;
	emit(pl, "source_fault", first ? PL_WARNING : PL_DEBUG, false, "%s (B-scan at %p)",
	     src_strerror(&pl->src, rc), p);
}

/* Byte i of the guard after a copy buffer: a pattern acquire() must leave as it is. */
static uint8_t guard_byte(unsigned i)
{
	return (uint8_t)(0xa5u ^ (i * 29u));
}

static void guard_set(void *buf, size_t n)
{
	for (unsigned i = 0; i < GUARD_BYTES; i++)
		((uint8_t *)buf)[n + i] = guard_byte(i);
}

/* Whether the guard after buf[0, n) is intact; else restore it and say where it was hit. */
static bool guard_check(struct pl_pipeline *pl, void *buf, const struct volrec_shim_meta *m,
                        char *msg, size_t len)
{
	const uint8_t *g = (const uint8_t *)buf + pl->bscan_bytes;
	unsigned i = 0;

	while (i < GUARD_BYTES && g[i] == guard_byte(i))
		i++;
	if (i == GUARD_BYTES)
		return true;
	guard_set(buf, pl->bscan_bytes);
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
	emit(pl, "source_fault", first ? PL_WARNING : PL_DEBUG, false,
	     "source %s: epoch %llu B-scan %u: meta.timestamp_ns %llu is %.0f s from the clock "
	     "(CLOCK_REALTIME ns expected, at most %llu s away): the clock is used",
	     pl->src.info.name, (unsigned long long)m->epoch, m->bscan,
	     (unsigned long long)m->timestamp_ns, ((double)m->timestamp_ns - (double)now) / 1e9,
	     (unsigned long long)(TS_SKEW_MAX_NS / 1000000000ull));
	return now;
}

/* Release the references held by ring entries [from, from + n) from the tail (mu held). */
static void release_entries(struct pl_pipeline *pl, uint32_t from, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		struct pl_entry *en = pl_ring_at(&pl->ring, from + i);

		if (en->ref) {
			release_one(pl, en->data);
			en->ref = false;
			en->data = NULL;
		}
	}
}

/* Have the processing thread (the backend's thread) replace the registered regions by regs
 * (malloc'ed, taken over; NULL, 0: none) and wait for it. Acquisition thread, mu not held. */
static int set_regions(struct pl_pipeline *pl, struct volrec_shim_region *regs, uint32_t n,
                       char *err, size_t errlen)
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

/* ---- acquisition -------------------------------------------------------------------------- */

/* Wait on cv (a CLOCK_MONOTONIC one, mu held) until *flag is set or ms have passed. */
static void wait_flag(pthread_cond_t *cv, pthread_mutex_t *mu, const bool *flag, int ms)
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
		(void)set_regions(pl, NULL, 0, err, sizeof(err));
	}
	if (pl->src_is_open) {
		call_enter(pl, "stop()/close()");
		source_close(pl);
		pl->src_is_open = false;
	}
	call_enter(pl, "open()");
	rc = source_open(pl, err, sizeof(err));
	if (rc < 0) {
		emit(pl, "source_fault", PL_WARNING, false, "source: reopening failed: %s", err);
		snprintf(pl->reopen_err, sizeof(pl->reopen_err), "%.200s", err);
		return rc;
	}
	pl->reopen_err[0] = '\0';
	if (pl->zc) {
		struct volrec_shim_region *regs = NULL;
		uint32_t n = 0;

		call_enter(pl, "ref_regions()");
		if (src_has_refs(&pl->src))
			rc = source_regions(pl, &regs, &n, err, sizeof(err));
		else
			rc = vr_err(err, sizeof(err), -EPROTO,
			            "the reopened source has no zero-copy calls");
		if (rc == 0)
			rc = set_regions(pl, regs, n, err, sizeof(err));
		if (rc < 0) {
			emit(pl, "source_fault", PL_WARNING, false,
			     "source: reopened, but zero-copy acquisition cannot resume: %s", err);
			call_enter(pl, "stop()/close()");
			source_close(pl);
			return rc;
		}
	}
	pl->src_is_open = true;
	pthread_mutex_lock(&pl->mu);
	source_info_update(pl);
	pl->c.source_reopens++;
	pthread_mutex_unlock(&pl->mu);
	emit(pl, NULL, PL_NOTICE, false, "source: reopened %s", pl->src.info.name);
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
		fail_run(pl, rc, msg);
		return true;
	}
	pthread_mutex_lock(&pl->mu);
	pl->c.source_faults++;
	first = !pl->degraded;
	pl->degraded = true;
	vr_utf8_sanitize(msg, pl->fault, sizeof(pl->fault));
	pthread_mutex_unlock(&pl->mu);
	emit(pl, "source_fault", first ? PL_WARNING : PL_DEBUG, first, "%s", msg);

	(*streak)++;
	*backoff_ms = *streak == 1 ? BACKOFF_FIRST_MS : *backoff_ms * 2;
	if (*backoff_ms > BACKOFF_MAX_MS)
		*backoff_ms = BACKOFF_MAX_MS;
	atomic_store(&pl->acq_state, PL_ACQ_BACKOFF);
	pthread_mutex_lock(&pl->mu);
	wait_flag(&pl->cv_room, &pl->mu, &pl->stop_acq, *backoff_ms); /* or until stopping */
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
static void cut_epoch(struct pl_pipeline *pl)
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
	release_entries(pl, r->ready - got, got);
	n = pl_ring_retract(r, got);
	pl->c.drops[PL_DROP_INCOMPLETE_EPOCH] += n;
}

/* The epoch being acquired cannot be whole: cut it (unless it is dropped already) and drop
 * the rest of it, acquired so that positions stay aligned, as incomplete_epoch. mu held. */
static void drop_rest(struct pl_pipeline *pl, bool *dropping, enum pl_drop *why)
{
	if (*dropping)
		return;
	cut_epoch(pl);
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
		emit(pl, "source_gap", level, !*series,
		     "source %s: data lost before epoch %llu B-scan %u (dropped_before): the "
		     "epoch is cut short",
		     pl->src.info.name, (unsigned long long)e, b);
	else
		emit(pl, "source_gap", level, !*series,
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

static void pipeline_free(struct pl_pipeline *pl);

static void *acq_main(void *arg)
{
	struct pl_pipeline *pl = arg;
	const struct vr_config *cfg = &pl->cfg;
	bool started = false, recovering = false, resync = false, gap_series = false;
	unsigned streak = 0;
	int backoff_ms = 0;
	uint64_t e = 0;

	while (1) {
		uint32_t ox, oy, b, discards = 0;
		bool dropping = false, cut = false, gapped = false;
		enum pl_drop dropping_why = PL_DROP_RING_FULL; /* of the rest of a dropped epoch */
		char msg[MSG_MAX];
		int rc;

		if (pl->epochs && e >= pl->epochs) {
			atomic_store(&pl->acq_state, PL_ACQ_ENDED);
			break;
		}
		pthread_mutex_lock(&pl->mu);
		if (pl->stop_acq) {
			pthread_mutex_unlock(&pl->mu);
			break;
		}
		pthread_mutex_unlock(&pl->mu);
		if (!pl->src_is_open) {
			fault_text(pl, -ENODEV, msg, sizeof(msg));
			if (source_fault(pl, msg, -ENODEV, &streak, &backoff_ms, &started))
				break;
			continue;
		}

		vr_scan_offset(e, cfg->geometry.stride[0], cfg->geometry.stride[1], &ox, &oy);
		atomic_store(&pl->acq_state, PL_ACQ_ACQUIRING);
		call_enter(pl, "set_scan_offset()");
		rc = src_set_scan_offset(&pl->src, e, ox, oy);
		if (rc == 0 && !started) {
			call_enter(pl, "start()");
			rc = src_start(&pl->src);
			started = rc == 0;
		}
		if (acq_abandoned(pl))
			goto out;
		if (rc < 0) {
			fault_text(pl, rc, msg, sizeof(msg));
			if (source_fault(pl, msg, rc, &streak, &backoff_ms, &started))
				break;
			e++;
			continue;
		}
		pthread_mutex_lock(&pl->mu);
		pl->c.epochs_started++;
		pl->acq_epoch = e;
		pl->acq_got = 0;
		/* room for the whole epoch is taken at its start: processing (depth 2) may hold
		 * part of an epoch, so the ring never fills in the middle of one */
		while (!pl->stop_acq && !pl_ring_reserve(&pl->ring, pl->ny)) {
			if (!pl->block) {
				dropping = true;
				break;
			}
			atomic_store(&pl->acq_state, PL_ACQ_WAIT_ROOM);
			pthread_cond_wait(&pl->cv_room, &pl->mu);
		}
		pthread_mutex_unlock(&pl->mu);

		for (b = 0; b < pl->ny;) {
			struct volrec_shim_meta meta = {0};
			const void *data = NULL;
			uint64_t t_real;
			struct pl_entry *en;
			void *buf;

			pthread_mutex_lock(&pl->mu);
			if (pl->stop_acq) {
				pthread_mutex_unlock(&pl->mu);
				cut = true;
				break;
			}
			en = dropping ? NULL : pl_ring_next(&pl->ring);
			buf = en ? en->buf : pl->scratch;
			pthread_mutex_unlock(&pl->mu);

			atomic_store(&pl->acq_state, PL_ACQ_ACQUIRING);
			call_enter(pl, pl->zc ? "acquire_ref()" : "acquire()");
			if (pl->zc) {
				rc = src_acquire_ref(&pl->src, &data, pl->timeout_ms, &meta);
				if (rc == 0 && !ref_inside(pl, data)) {
					pthread_mutex_lock(&pl->mu);
					release_one(pl, data);
					pthread_mutex_unlock(&pl->mu);
					rc = -EFAULT;
				}
			} else {
				rc = src_acquire(&pl->src, buf, pl->bscan_bytes, pl->timeout_ms,
				                 &meta);
				data = buf;
			}
			if (acq_abandoned(pl)) {
				if (rc == 0 && pl->zc) {
					pthread_mutex_lock(&pl->mu);
					release_one(pl, data);
					pthread_mutex_unlock(&pl->mu);
				}
				goto out;
			}
			if (rc == 0 && !pl->zc && !guard_check(pl, buf, &meta, msg, sizeof(msg))) {
				rc = -EPROTO;
			} else if (rc == 0 && meta_check(pl, &meta, msg, sizeof(msg)) < 0) {
				if (pl->zc) {
					pthread_mutex_lock(&pl->mu);
					release_one(pl, data);
					pthread_mutex_unlock(&pl->mu);
				}
				rc = -EPROTO;
			} else if (rc == -EFAULT && pl->zc) {
				snprintf(msg, sizeof(msg),
				         "source %s: acquire_ref() returned a B-scan outside the "
				         "regions "
				         "it reported",
				         pl->src.info.name);
			} else if (rc < 0) {
				fault_text(pl, rc, msg, sizeof(msg));
			}
			if (rc < 0) {
				pthread_mutex_lock(&pl->mu);
				pl->c.drops[rc == -ETIMEDOUT ? PL_DROP_SOURCE_TIMEOUT
				                             : PL_DROP_SOURCE_ERROR]++;
				pthread_mutex_unlock(&pl->mu);
				if (source_ended(pl, rc)) {
					pthread_mutex_lock(&pl->mu);
					cut_epoch(pl);
					pthread_mutex_unlock(&pl->mu);
					emit(pl, "source_ended", PL_NOTICE, false,
					     "source: the replay file ended (loop: false); nothing "
					     "more to acquire");
					atomic_store(&pl->acq_state, PL_ACQ_ENDED);
					goto out;
				}
				cut = true;
				recovering = true;
				if (source_fault(pl, msg, rc, &streak, &backoff_ms, &started))
					goto out;
				break;
			}
			if (meta.epoch != e || meta.bscan != b) {
				/* after a cut the source may still deliver the rest of the epoch it
				 * was in: those are dropped until its next epoch begins */
				bool leftover =
				        resync && b == 0 && meta.bscan != 0 && discards < pl->ny;

				pthread_mutex_lock(&pl->mu);
				pl->c.acquired++;
				pl->c.drops[PL_DROP_INCOMPLETE_EPOCH]++;
				if (pl->zc)
					release_one(pl, data);
				pthread_mutex_unlock(&pl->mu);
				if (leftover) {
					discards++;
					continue;
				}
				snprintf(msg, sizeof(msg),
				         "source %s: delivered epoch %llu B-scan %u where epoch "
				         "%llu B-scan %u was due",
				         pl->src.info.name, (unsigned long long)meta.epoch,
				         meta.bscan, (unsigned long long)e, b);
				cut = true;
				recovering = true;
				if (source_fault(pl, msg, -EPROTO, &streak, &backoff_ms, &started))
					goto out;
				break;
			}
			resync = false;
			if (meta.flags & VOLREC_SHIM_META_DROPPED_BEFORE) {
				gapped = true;
				if (source_gap(pl, e, b, &gap_series)) {
					pthread_mutex_lock(&pl->mu);
					drop_rest(pl, &dropping, &dropping_why);
					pthread_mutex_unlock(&pl->mu);
				}
			}
			if (meta.flags & (VOLREC_SHIM_META_LOST | VOLREC_SHIM_META_INCOMPLETE)) {
				/* the source has no data for this position (docs/shim.md): not a
				 * fault, but the epoch cannot be whole */
				pthread_mutex_lock(&pl->mu);
				if (pl->zc)
					release_one(pl, data);
				pl->c.drops[meta.flags & VOLREC_SHIM_META_LOST
				                    ? PL_DROP_SOURCE_LOST
				                    : PL_DROP_SOURCE_INCOMPLETE]++;
				drop_rest(pl, &dropping, &dropping_why);
				pthread_mutex_unlock(&pl->mu);
				b++;
				continue;
			}
			pthread_mutex_lock(&pl->mu);
			pl->c.acquired++;
			t_real = acq_time(pl, &meta); /* checked whether kept or dropped */
			if (dropping) {
				if (pl->zc)
					release_one(pl, data);
				pl->c.drops[dropping_why]++;
			} else {
				en->data = data;
				en->ref = pl->zc;
				en->gap_before = b == 0 && gapped;
				en->epoch = e;
				en->bscan = b;
				en->t_mono_ns = vr_mono_ns();
				en->t_real_ns = t_real;
				pl_ring_commit(&pl->ring);
				pl->acq_got++;
				if (pl->depth > 1 || pl->acq_got == pl->ny)
					pthread_cond_signal(&pl->cv_data);
			}
			pthread_mutex_unlock(&pl->mu);
			b++;
		}
		pthread_mutex_lock(&pl->mu);
		if (cut)
			cut_epoch(pl);
		else
			pl->acq_got = 0; /* complete (or dropped whole): processing's now */
		pthread_mutex_unlock(&pl->mu);
		if (cut) {
			if (recovering) {
				resync = true;
				e++;
				continue;
			}
			break; /* stopping */
		}
		if (!gapped)
			gap_series = false; /* a whole epoch without data lost before it */
		if (recovering || streak || pl->late_returned) {
			/* a whole epoch came through after faults: the source is back */
			bool was;

			pthread_mutex_lock(&pl->mu);
			was = pl->degraded;
			pl->degraded = false;
			pl->fault[0] = '\0';
			pthread_mutex_unlock(&pl->mu);
			if (was)
				emit(pl, "source_recovered", PL_NOTICE, true,
				     "source: acquiring again after a fault");
			recovering = false;
			streak = 0;
			pl->late_returned = false;
		}
		e++;
	}
out:
	pthread_mutex_lock(&pl->mu);
	if (pl->abandoned) {
		/* pl_stop went on without this thread (it cut the epoch on our behalf); when
		 * pl_close came meanwhile, freeing everything is left to us */
		bool free_now = pl->close_requested;

		pl->acq_exited = true;
		pthread_mutex_unlock(&pl->mu);
		if (free_now)
			pipeline_free(pl);
		return NULL;
	}
	if (atomic_load(&pl->acq_state) != PL_ACQ_ENDED)
		atomic_store(&pl->acq_state, PL_ACQ_IDLE);
	cut_epoch(pl);
	pl->acq_done = true;
	pl->acq_exited = true;
	pthread_cond_broadcast(&pl->cv_data);
	pthread_cond_broadcast(&pl->cv_done);
	pthread_mutex_unlock(&pl->mu);
	return NULL;
}

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
		regions_unregister(pl);
		if (n)
			rc = regions_register(pl, regs, n, err, sizeof(err));
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
		emit(pl, "history_reset", PL_NOTICE, true,
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
};

/* Give back the n oldest entries; published: counted as processed, else as drops of cause.
 * mu held. */
static void finish_entries(struct pl_pipeline *pl, uint32_t n, bool published, enum pl_drop cause)
{
	release_entries(pl, 0, n);
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
		uint8_t *have = calloc(pl->ny, 1);

		if (!have)
			return false;
		for (uint32_t i = 0; i < sb->n; i++)
			have[pl_ring_at(&pl->ring, i)->bscan] = 1;
		for (uint32_t b = 0; b < pl->ny; b++)
			if (!have[b] && be_bscan_submit(pl->be, sb->epoch, b, pl->scratch) < 0)
				break;
		free(have);
	}
	rc = be_epoch_finish_async(pl->be, sb->epoch, &none, err, sizeof(err));
	if (rc == 0)
		rc = be_epoch_wait(pl->be, sb->epoch, err, sizeof(err));
	if (rc < 0 && !sb->failed)
		emit(pl, "processing_error", PL_WARNING, false,
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
	v.flags = (pl->reset_flag ? VOLREC_FLAG_RESET : 0) |
	          (e0->gap_before ? VOLREC_FLAG_DROPPED_BEFORE : 0);
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
		fail_run(pl, rc, err);
	else
		emit(pl, "processing_error", PL_ERR, false, "epoch %llu dropped: %s",
		     (unsigned long long)epoch, err);
}

/*
 * The processing loop. Depth 1: take a complete epoch, submit it, finish it, publish it. Depth
 * 2: submit B-scans as acquisition delivers them; an epoch whose B-scans are all submitted is
 * finished asynchronously, and the next one is submitted while it is in flight; volumes are
 * published in epoch order. Requests (live parameters, history reset, regions) are applied
 * only when no epoch is in the backend.
 */
static void *proc_main(void *arg)
{
	struct pl_pipeline *pl = arg;
	struct pl_flight fl = {0}, sb = {0};
	char err[512];

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
		/* 1. take what acquisition delivered of the epoch being submitted */
		if (!sb.on && take && !requests && avail >= (pl->depth > 1 ? 1 : pl->ny)) {
			memset(&sb, 0, sizeof(sb));
			sb.on = true;
			sb.epoch = pl_ring_at(&pl->ring, pl->ring.claimed)->epoch;
		}
		if (sb.on && take && avail && sb.n < pl->ny) {
			uint32_t from = pl->ring.claimed, k = 0;

			while (k < avail && sb.n + k < pl->ny &&
			       pl_ring_at(&pl->ring, from + k)->epoch == sb.epoch)
				k++;
			if (k) {
				pl_ring_claim(&pl->ring, k);
				pthread_mutex_unlock(&pl->mu);
				submit(pl, &sb, from, k);
				pthread_mutex_lock(&pl->mu);
				sb.n += k;
				continue;
			}
		}
		/* 2. the epoch in flight: wait for it, publish it, release its B-scans */
		if (fl.on) {
			double ms[PL_LAT_N];
			int rc;

			pthread_mutex_unlock(&pl->mu);
			err[0] = '\0';
			rc = land(pl, &fl, ms, err, sizeof(err));
			if (rc < 0)
				processing_error(pl, fl.epoch, rc, err);
			pthread_mutex_lock(&pl->mu);
			if (rc == 0) {
				pl->last_epoch = fl.epoch;
				for (int i = 0; i < PL_LAT_N; i++)
					vr_window_add(&pl->lat[i], ms[i]);
			}
			finish_entries(pl, fl.n, rc == 0, PL_DROP_PROCESSING_ERROR);
			fl.on = false;
			continue;
		}
		/* 3. the epoch being submitted is complete: finish it */
		if (sb.on && sb.n == pl->ny) {
			int rc;

			pthread_mutex_unlock(&pl->mu);
			err[0] = '\0';
			rc = launch(pl, &sb, err, sizeof(err));
			if (rc < 0) {
				if (sb.failed)
					finish_unwanted(pl, &sb);
				processing_error(pl, sb.epoch, rc, err);
			}
			pthread_mutex_lock(&pl->mu);
			if (rc < 0) {
				finish_entries(pl, sb.n, false, PL_DROP_PROCESSING_ERROR);
			} else {
				fl = sb;
				fl.on = true;
			}
			sb.on = false;
			continue;
		}
		/* 4. the epoch being submitted was cut short after processing took part of it */
		if (sb.on && sb.n < pl->ny && pl->cut_set && pl->cut_epoch == sb.epoch &&
		    (!avail || pl_ring_at(&pl->ring, pl->ring.claimed)->epoch != sb.epoch)) {
			bool history = pl->cfg.reconstruct.mode != CFG_RECON_NONE;
			bool finished;

			pl->cut_set = false;
			pthread_mutex_unlock(&pl->mu);
			finished = finish_unwanted(pl, &sb);
			if (finished && history) {
				/* its made-up B-scans are now in the history: start afresh */
				be_reset_history(pl->be);
				pl->reset_flag = true;
				emit(pl, "history_reset", PL_NOTICE, true,
				     "reconstruction history reset: an epoch was cut short after "
				     "its first B-scans were processed");
			}
			emit(pl, "incomplete_epoch", PL_INFO, false,
			     "epoch %llu cut short after %u of %u B-scans: not published",
			     (unsigned long long)sb.epoch, sb.n, pl->ny);
			pthread_mutex_lock(&pl->mu);
			finish_entries(pl, sb.n, false, PL_DROP_INCOMPLETE_EPOCH);
			sb.on = false;
			continue;
		}
		/* 5. stopping: everything acquired was processed or dropped */
		if (!sb.on && pl->stop_proc && pl->acq_done && pl->ring.ready == 0)
			break;
		atomic_store(&pl->proc_waiting, true);
		pthread_cond_wait(&pl->cv_data, &pl->mu);
	}
	atomic_store(&pl->proc_waiting, true);
	pthread_mutex_unlock(&pl->mu);
	return NULL;
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
	if (pl->depth > 1 && pl->ring.size < 2 * pl->ny)
		emit(pl, NULL, PL_NOTICE, false,
		     "pipeline: ring_bscans %u holds less than two epochs (%u B-scans): the next "
		     "epoch is acquired only once the one in flight is published",
		     pl->ring.size, 2 * pl->ny);
	emit(pl, NULL, PL_INFO, false, "pipeline: %s (backend %s%s)",
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
		rc = source_regions(pl, &regs, &n, why, sizeof(why));
		if (rc == 0)
			rc = regions_register(pl, regs, n, why, sizeof(why));
		if (rc == 0) {
			pl->zc = true;
		} else {
			snprintf(pl->zc_why, sizeof(pl->zc_why), "%s", why);
			emit(pl, NULL, PL_WARNING, false,
			     "acquisition: zero-copy refused, copying instead: %s", why);
		}
	}
	for (uint32_t i = 0; i < pl->nregions; i++)
		bytes += pl->regions[i].size;
	if (pl->zc)
		emit(pl, NULL, PL_INFO, false,
		     "acquisition: zero-copy (source %s's buffers, %u region%s of %.1f MiB "
		     "registered with backend %s; the ring holds references)",
		     pl->src.info.name, pl->nregions, pl->nregions == 1 ? "" : "s",
		     (double)bytes / 1048576.0, be_name(pl->be));
	else
		emit(pl, NULL, PL_INFO, false, "acquisition: copy into the ring (%s)", pl->zc_why);
}

static void cond_init_mono(pthread_cond_t *cv)
{
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(cv, &ca);
	pthread_condattr_destroy(&ca);
}

int pl_open(const struct pl_options *o, struct pl_pipeline **out, char *err, size_t errlen)
{
	struct pl_pipeline *pl;
	const struct vr_config *cfg = o->cfg;
	char note[512] = "";
	int rc;

	if (!cfg || !!o->source_open != !!o->source_close)
		return vr_err(err, errlen, -EINVAL,
		              "pl_open: a configuration is required, and source_open and "
		              "source_close go together");
	pl = calloc(1, sizeof(*pl));
	if (!pl)
		return vr_err(err, errlen, -ENOMEM, "out of memory");
	pl->opt = *o;
	pl->generation = o->generation;
	pl->opt.cfg = NULL;
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
	pl->ny = cfg->geometry.bscans_per_volume;
	pl->bscan_bytes = cfg_bscan_bytes(cfg);
	if (cfg->pipeline.ring_bscans < pl->ny) {
		rc = vr_err(err, errlen, -EINVAL,
		            "pipeline.ring_bscans: %u is smaller than one epoch (%u B-scans)",
		            cfg->pipeline.ring_bscans, pl->ny);
		goto fail;
	}
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
		emit(pl, NULL, PL_NOTICE, false, "%s", note);
	choose_depth(pl);
	pl->slot_bytes = (pl->bscan_bytes + GUARD_BYTES + SLOT_ALIGN - 1) / SLOT_ALIGN * SLOT_ALIGN;
	rc = be_host_alloc(pl->be, pl->slot_bytes, &pl->scratch);
	if (rc < 0) {
		vr_err_errno(err, errlen, rc, "pipeline: allocating a scratch B-scan (%zu bytes)",
		             pl->slot_bytes);
		goto fail;
	}
	guard_set(pl->scratch, pl->bscan_bytes);
	rc = source_open(pl, err, errlen);
	if (rc < 0)
		goto fail;
	pl->src_is_open = true;
	pl->src_epochs = pl->src.epochs;
	source_info_update(pl);

	choose_acquisition(pl);
	if (!pl->zc) {
		size_t bytes = pl->slot_bytes * pl->ring.size;

		rc = be_host_alloc(pl->be, bytes, &pl->ring_mem);
		if (rc < 0) {
			pl->ring_mem = NULL;
			vr_err_errno(err, errlen, rc,
			             "pipeline: allocating the ring of %u B-scans (%zu bytes)",
			             pl->ring.size, bytes);
			goto fail;
		}
		for (uint32_t i = 0; i < pl->ring.size; i++) {
			pl->ring.e[i].buf = (char *)pl->ring_mem + (size_t)i * pl->slot_bytes;
			guard_set(pl->ring.e[i].buf, pl->bscan_bytes);
		}
	}
	*out = pl;
	return 0;
fail:
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
	rc = -pthread_create(&pl->proc_thr, NULL, proc_main, pl);
	if (rc < 0) {
		vr_err_errno(err, errlen, rc, "starting the processing thread");
		goto fail;
	}
	pl->proc_started = true;
	rc = -pthread_create(&pl->acq_thr, NULL, acq_main, pl);
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
 * Close the source from the caller's thread (pl_stop, pipeline_free) without letting a stop()
 * or close() that ignores every deadline hold it: the calls run on a helper thread with the
 * source copied, and are waited for at most the source timeout plus STOP_GRACE_MS; then the
 * caller goes on without them (event source_abandoned, the source is left open) and the
 * helper frees its copy if they ever return.
 */
struct closer {
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
	if (abandoned)
		closer_free(c);
	return NULL;
}

static void source_close_bounded(struct pl_pipeline *pl)
{
	struct closer *c = calloc(1, sizeof(*c));
	pthread_t thr;
	bool done;

	if (!c) {
		source_close(pl); /* no memory for the helper: close here, unbounded */
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
		wait_flag(&c->cv, &c->mu, &c->done, pl->timeout_ms + STOP_GRACE_MS);
		done = c->done;
		c->abandoned = !done;
		pthread_mutex_unlock(&c->mu);
		if (!done) {
			char name[sizeof(pl->src_info.name)];

			pthread_detach(thr);
			pthread_mutex_lock(&pl->mu);
			snprintf(name, sizeof(name), "%s", pl->src_info.name);
			pthread_mutex_unlock(&pl->mu);
			emit(pl, "source_abandoned", PL_WARNING, false,
			     "stopping: source %s has not returned from stop()/close() %d ms after "
			     "it was called (timeout %d ms + %d ms): going on without it (the "
			     "source is left open)",
			     name, pl->timeout_ms + STOP_GRACE_MS, pl->timeout_ms, STOP_GRACE_MS);
			return;
		}
		pthread_join(thr, NULL);
	}
	if (c->rc < 0)
		emit(pl, "source_fault", PL_WARNING, false, "%s (closed all the same)", c->err);
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
		wait_flag(&pl->cv_done, &pl->mu, &pl->acq_exited, pl->timeout_ms + STOP_GRACE_MS);
		if (!pl->acq_exited) {
			abandon = true;
			pl->abandoned = true;
			cut_epoch(pl);
			snprintf(name, sizeof(name), "%s", pl->src_info.name);
			snprintf(call, sizeof(call), "%s", pl->call ? pl->call : "a call");
		}
	}
	pthread_mutex_unlock(&pl->mu);
	if (abandon) {
		pthread_detach(pl->acq_thr);
		emit(pl, "source_abandoned", PL_WARNING, false,
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
		pipeline_free(pl);
}

static void pipeline_free(struct pl_pipeline *pl)
{
	if (pl->src_is_open && pl->ring.e) {
		/* nothing should be held now; give back whatever is before the source goes */
		for (uint32_t i = 0; i < pl->ring.size; i++)
			if (pl->ring.e[i].ref)
				release_one(pl, pl->ring.e[i].data);
	}
	if (pl->be)
		regions_unregister(pl);
	free(pl->reg_new);
	if (pl->src_is_open)
		source_close_bounded(pl);
	if (pl->be) {
		be_host_free(pl->be, pl->ring_mem);
		be_host_free(pl->be, pl->scratch);
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
	free(pl);
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
		emit(pl, "source_fault", PL_WARNING, first, "%s", late_msg);
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
