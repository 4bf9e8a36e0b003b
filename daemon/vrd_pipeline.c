/* SPDX-License-Identifier: MIT */
/*
 * The volrecd pipeline: an acquisition thread that drives the source into a ring of raw B-scans
 * (never waiting for processing unless pipeline.overflow is block), and a processing thread that
 * feeds epochs to the backend, straight into the shm slot, and publishes them: complete epochs
 * one at a time, or (overlap mode) B-scans as they arrive with two epochs in flight. Sources
 * with the zero-copy calls of shim.h fill no ring buffer: the ring then holds references into
 * the source's own memory, registered with the backend, released when their epoch is done.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

const char *const vrd_drop_names[VRD_DROP_COUNT] = {
        [VRD_DROP_RING_FULL] = "ring_full",
        [VRD_DROP_INCOMPLETE_EPOCH] = "incomplete_epoch",
        [VRD_DROP_PROCESSING_ERROR] = "processing_error",
        [VRD_DROP_SOURCE_ERROR] = "source_error",
        [VRD_DROP_SOURCE_TIMEOUT] = "source_timeout",
};

enum { LAT_E2E, LAT_PRE, LAT_REC, LAT_PUB, LAT_N };

#define BACKOFF_FIRST_MS 100
#define BACKOFF_MAX_MS   5000
#define REOPEN_AFTER     5 /* consecutive faults before the source is closed and opened again */

struct vrd_pipeline {
	struct vr_config cfg; /* owned copy: the structural parameters in force */
	struct be_backend *be;
	char be_note[512];
	struct src_source src;
	bool src_is_open;
	struct volrec_shim_info src_info; /* copy of src.info for other threads, under mu */
	char reopen_err[256];             /* why the source could not be reopened */
	struct vrd_pub *pub;
	size_t bscan_bytes;
	int timeout_ms;

	/* the ring: entries [tail, tail + committed) hold epochs acquisition is done with
	 * (processing's), the next `pending` ones the epoch being acquired (acquisition's). In
	 * overlap mode processing also reads pending entries: the first `claimed` entries from
	 * tail are those it handed to the backend (an epoch in flight, the epoch being
	 * submitted), and committed may end with an epoch cut short after processing claimed
	 * part of it (see cut_pending). */
	void *ring_mem;
	void *scratch; /* where B-scans of a dropped epoch land */
	struct vrd_entry *ring;
	uint32_t nring, ny;
	uint32_t tail, committed, pending;
	bool overlap; /* B-scans submitted as they arrive, two epochs in flight */
	bool zc; /* zero-copy: entries are references into the source's memory (fixed at start) */
	char zc_why[512];                   /* why the copying path runs, for the log */
	struct volrec_shim_region *regions; /* the source's regions registered with the backend */
	uint32_t nregions;
	/* a new region set for the processing thread to register (source reopened; zc only) */
	struct volrec_shim_region *reg_new;
	uint32_t reg_new_n;
	uint64_t reg_req, reg_done;
	int reg_rc;
	char reg_err[512];
	uint32_t claimed; /* overlap: entries from tail the processing thread has taken */
	pthread_mutex_t mu;
	pthread_cond_t cv_data; /* processing waits for a complete epoch or a request */
	pthread_cond_t cv_room; /* acquisition waits for room (block) or sleeps in back-off */
	bool stop_acq, acq_done, stop_proc;

	/* requests from the main thread, applied by the processing thread between epochs */
	struct vr_config live_cfg;
	bool live_cfg_set;
	uint64_t live_req, live_done;
	int live_rc;
	char live_err[512];
	uint64_t reset_req, reset_done;
	bool reset_flag; /* the next published volume is the first after a history reset */

	/* watchdog marks */
	_Atomic uint64_t proc_epochs, acq_returns;
	_Atomic bool proc_waiting;
	_Atomic int acq_state;

	/* statistics, under mu */
	struct vrd_counters c;
	struct vrd_lat lat[LAT_N];
	bool degraded;
	char fault[256];
	uint64_t last_epoch;

	pthread_t acq_thr, proc_thr;
	bool acq_started, proc_started;
};

static void scan_offset(const struct vr_config *cfg, uint64_t e, uint32_t *ox, uint32_t *oy)
{
	uint32_t sx = cfg->geometry.stride[0], s = cfg_stride_area(cfg);
	uint32_t q = s ? (uint32_t)(e % s) : 0;

	*ox = sx ? q % sx : 0;
	*oy = sx ? q / sx : 0;
}

/* ---- zero-copy: the source's regions and references ---------------------------------------- */

#define REGIONS_MAX 4096u /* most regions a source may report */

/* Unregister and forget the registered regions. Backend call: the thread that owns it. */
static void regions_unregister(struct vrd_pipeline *pl)
{
	for (uint32_t i = 0; i < pl->nregions; i++)
		be_host_unregister(pl->be, (void *)pl->regions[i].base);
	free(pl->regions);
	pl->regions = NULL;
	pl->nregions = 0;
}

/* Register regs[0..n) (malloc'ed, taken over in every case) with the backend; on failure
 * nothing stays registered. Backend call: the thread that owns it. */
static int regions_register(struct vrd_pipeline *pl, struct volrec_shim_region *regs, uint32_t n,
                            char *err, size_t errlen)
{
	for (uint32_t i = 0; i < n; i++) {
		int rc = be_host_register(pl->be, (void *)regs[i].base, regs[i].size);
		if (rc < 0) {
			snprintf(err, errlen,
			         "backend %s: host_register of the source's region %u of %u (%zu "
			         "bytes at %p): %s",
			         be_name(pl->be), i, n, regs[i].size, regs[i].base, strerror(-rc));
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
static int source_regions(struct vrd_pipeline *pl, struct volrec_shim_region **out, uint32_t *n,
                          char *err, size_t errlen)
{
	struct volrec_shim_region *regs;
	uint32_t count = 0, again = 0;
	int rc;

	rc = src_ref_regions(&pl->src, NULL, 0, &count);
	if (rc < 0) {
		snprintf(err, errlen, "source %s: ref_regions(): %s", pl->src.info.name,
		         src_strerror(&pl->src, rc));
		return rc;
	}
	if (count == 0 || count > REGIONS_MAX) {
		snprintf(err, errlen,
		         "source %s: ref_regions() reports %u regions (1..%u expected)",
		         pl->src.info.name, count, REGIONS_MAX);
		return -EPROTO;
	}
	regs = calloc(count, sizeof(*regs));
	if (!regs) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	rc = src_ref_regions(&pl->src, regs, count, &again);
	if (rc < 0 || again != count) {
		snprintf(err, errlen, "source %s: ref_regions(): %s", pl->src.info.name,
		         rc < 0 ? src_strerror(&pl->src, rc) : "the region count changed");
		free(regs);
		return rc < 0 ? rc : -EPROTO;
	}
	for (uint32_t i = 0; i < count; i++)
		if (!regs[i].base || regs[i].size < pl->bscan_bytes) {
			snprintf(
			        err, errlen,
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
static bool ref_inside(const struct vrd_pipeline *pl, const void *p)
{
	for (uint32_t i = 0; i < pl->nregions; i++) {
		uintptr_t b = (uintptr_t)pl->regions[i].base, q = (uintptr_t)p;
		if (q >= b && q - b <= pl->regions[i].size - pl->bscan_bytes)
			return true;
	}
	return false;
}

/* Give back a reference to the source (mu held: release_ref calls never overlap). */
static void release_one(struct vrd_pipeline *pl, const void *p)
{
	int rc = src_release_ref(&pl->src, p);

	if (rc < 0)
		vrd_log(LOG_WARNING, "source_fault", "source %s: release_ref(%p): %s",
		        pl->src.info.name, p, src_strerror(&pl->src, rc));
}

/* Release the references held by ring entries [from, from + n) (mu held). */
static void release_entries(struct vrd_pipeline *pl, uint32_t from, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		struct vrd_entry *en = &pl->ring[(from + i) % pl->nring];

		if (en->ref) {
			release_one(pl, en->data);
			en->ref = false;
			en->data = NULL;
		}
	}
}

/* Have the processing thread (the backend's thread) replace the registered regions by regs
 * (malloc'ed, taken over; NULL, 0: none) and wait for it. Acquisition thread, mu not held. */
static int set_regions(struct vrd_pipeline *pl, struct volrec_shim_region *regs, uint32_t n,
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

/* Sleep ms or until stop is asked (mu held by the caller). Returns true when stopping. */
static bool sleep_or_stop(struct vrd_pipeline *pl, int ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	while (!pl->stop_acq)
		if (pthread_cond_timedwait(&pl->cv_room, &pl->mu, &ts) == ETIMEDOUT)
			break;
	return pl->stop_acq;
}

static int source_reopen(struct vrd_pipeline *pl)
{
	char err[512];
	int rc;

	if (pl->src_is_open && pl->zc) {
		bool stop;

		/* zero-copy: every reference into the old source must be given back (its epochs
		 * processed or dropped) and its regions unregistered before it is closed */
		pthread_mutex_lock(&pl->mu);
		while (pl->c.ring_used && !pl->stop_acq)
			pthread_cond_wait(&pl->cv_room, &pl->mu);
		stop = pl->stop_acq;
		pthread_mutex_unlock(&pl->mu);
		if (stop)
			return -ECANCELED; /* the source is closed after processing stopped */
		set_regions(pl, NULL, 0, err, sizeof(err));
	}
	if (pl->src_is_open) {
		src_close(&pl->src);
		pl->src_is_open = false;
	}
	memset(&pl->src, 0, sizeof(pl->src));
	rc = src_open(&pl->cfg, 0, &pl->src, err, sizeof(err));
	if (rc < 0) {
		vrd_log(LOG_WARNING, "source_fault", "source: reopening failed: %s", err);
		snprintf(pl->reopen_err, sizeof(pl->reopen_err), "%.200s", err);
		return rc;
	}
	pl->reopen_err[0] = 0;
	if (pl->zc) {
		struct volrec_shim_region *regs = NULL;
		uint32_t n = 0;

		if (src_has_refs(&pl->src)) {
			rc = source_regions(pl, &regs, &n, err, sizeof(err));
		} else {
			rc = -EPROTO;
			snprintf(err, sizeof(err), "the reopened source has no zero-copy calls");
		}
		if (rc == 0)
			rc = set_regions(pl, regs, n, err, sizeof(err));
		if (rc < 0) {
			vrd_log(LOG_WARNING, "source_fault",
			        "source: reopened, but zero-copy acquisition cannot resume: %s",
			        err);
			src_close(&pl->src);
			return rc;
		}
	}
	pl->src_is_open = true;
	pthread_mutex_lock(&pl->mu);
	pl->src_info = pl->src.info;
	pl->c.source_reopens++;
	pthread_mutex_unlock(&pl->mu);
	vrd_log(LOG_NOTICE, NULL, "source: reopened %s", pl->src.info.name);
	return 0;
}

/* A fault: count, go degraded (event on the first of a series), back off, maybe reopen.
 * Returns true when stopping. */
static bool source_fault(struct vrd_pipeline *pl, const char *what, int rc, unsigned *streak,
                         int *backoff_ms, bool *started)
{
	char msg[256];
	bool first, stop;

	if (!pl->src_is_open && pl->reopen_err[0])
		snprintf(msg, sizeof(msg), "source: reopening failed: %.200s", pl->reopen_err);
	else
		snprintf(msg, sizeof(msg), "source %s: %s: %s",
		         pl->src_is_open ? pl->src.info.name : "-", what,
		         pl->src_is_open ? src_strerror(&pl->src, rc) : strerror(-rc));
	pthread_mutex_lock(&pl->mu);
	pl->c.source_faults++;
	first = !pl->degraded;
	pl->degraded = true;
	snprintf(pl->fault, sizeof(pl->fault), "%s", msg);
	pthread_mutex_unlock(&pl->mu);
	if (first)
		vrd_event("source_fault", LOG_WARNING, msg, NULL);
	else
		vrd_log(LOG_DEBUG, "source_fault", "%s", msg);

	(*streak)++;
	*backoff_ms = *streak == 1 ? BACKOFF_FIRST_MS : *backoff_ms * 2;
	if (*backoff_ms > BACKOFF_MAX_MS)
		*backoff_ms = BACKOFF_MAX_MS;
	atomic_store(&pl->acq_state, VRD_ACQ_BACKOFF);
	pthread_mutex_lock(&pl->mu);
	stop = sleep_or_stop(pl, *backoff_ms);
	pthread_mutex_unlock(&pl->mu);
	atomic_fetch_add(&pl->acq_returns, 1);
	if (stop)
		return true;
	if (!pl->src_is_open || *streak % REOPEN_AFTER == 0) {
		atomic_store(&pl->acq_state, VRD_ACQ_ACQUIRING);
		if (source_reopen(pl) == 0)
			*started = false;
		atomic_fetch_add(&pl->acq_returns, 1);
	}
	return false;
}

/* Give the epoch being acquired back: its B-scans counted under cause. mu held. */
static void drop_pending(struct vrd_pipeline *pl, enum vrd_drop cause)
{
	release_entries(pl, pl->tail + pl->committed, pl->pending);
	pl->c.drops[cause] += pl->pending;
	pl->c.ring_used -= pl->pending;
	pl->pending = 0;
}

/* The epoch being acquired was cut short (source fault, stop). Without overlap, or when
 * processing has not taken any of it, its B-scans are dropped here; otherwise processing
 * already gave some to the backend: the partial epoch becomes processing's, which finishes it
 * without publishing and counts its B-scans as incomplete_epoch drops. mu held. */
static void cut_pending(struct vrd_pipeline *pl)
{
	if (pl->overlap && pl->pending && pl->claimed > pl->committed) {
		pl->committed += pl->pending;
		pl->pending = 0;
		pthread_cond_signal(&pl->cv_data);
		return;
	}
	drop_pending(pl, VRD_DROP_INCOMPLETE_EPOCH);
}

static void *acq_main(void *arg)
{
	struct vrd_pipeline *pl = arg;
	const struct vr_config *cfg = &pl->cfg;
	bool block =
	        cfg->pipeline.overflow == CFG_OVERFLOW_BLOCK && cfg->source.type != CFG_SOURCE_SHIM;
	bool started = false, recovering = false;
	unsigned streak = 0;
	int backoff_ms = 0;
	uint64_t e = 0;

	while (1) {
		uint32_t ox, oy, b;
		bool dropping = false, cut = false;
		int rc;

		pthread_mutex_lock(&pl->mu);
		if (pl->stop_acq) {
			pthread_mutex_unlock(&pl->mu);
			break;
		}
		pthread_mutex_unlock(&pl->mu);
		if (!pl->src_is_open) {
			if (source_fault(pl, "open", -ENODEV, &streak, &backoff_ms, &started))
				break;
			continue;
		}

		scan_offset(cfg, e, &ox, &oy);
		atomic_store(&pl->acq_state, VRD_ACQ_ACQUIRING);
		rc = src_set_scan_offset(&pl->src, e, ox, oy);
		if (rc == 0 && !started) {
			rc = src_start(&pl->src);
			started = rc == 0;
		}
		atomic_fetch_add(&pl->acq_returns, 1);
		if (rc < 0) {
			if (source_fault(pl, started ? "set_scan_offset" : "start", rc, &streak,
			                 &backoff_ms, &started))
				break;
			e++;
			continue;
		}
		pthread_mutex_lock(&pl->mu);
		pl->c.epochs_started++;
		/* overlap: processing may already hold part of an epoch, so the ring must never
		 * fill in the middle of one: room for the whole epoch is taken at its start */
		while (pl->overlap && !pl->stop_acq &&
		       pl->nring - pl->committed - pl->pending < pl->ny) {
			if (!block) {
				dropping = true;
				break;
			}
			atomic_store(&pl->acq_state, VRD_ACQ_WAIT_ROOM);
			pthread_cond_wait(&pl->cv_room, &pl->mu);
		}
		pthread_mutex_unlock(&pl->mu);

		for (b = 0; b < pl->ny; b++) {
			struct volrec_shim_meta meta = {0};
			const void *data = NULL;
			void *buf;

			pthread_mutex_lock(&pl->mu);
			while (!dropping && !pl->stop_acq &&
			       pl->committed + pl->pending == pl->nring) {
				if (!block) {
					/* no room for the rest of this epoch: drop all of it */
					dropping = true;
					drop_pending(pl, VRD_DROP_RING_FULL);
					break;
				}
				atomic_store(&pl->acq_state, VRD_ACQ_WAIT_ROOM);
				pthread_cond_wait(&pl->cv_room, &pl->mu);
			}
			if (pl->stop_acq) {
				pthread_mutex_unlock(&pl->mu);
				cut = true;
				break;
			}
			buf = dropping ? pl->scratch
			               : pl->ring[(pl->tail + pl->committed + pl->pending) %
			                          pl->nring]
			                         .buf;
			pthread_mutex_unlock(&pl->mu);

			atomic_store(&pl->acq_state, VRD_ACQ_ACQUIRING);
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
			atomic_fetch_add(&pl->acq_returns, 1);
			if (rc < 0) {
				pthread_mutex_lock(&pl->mu);
				pl->c.drops[rc == -ETIMEDOUT ? VRD_DROP_SOURCE_TIMEOUT
				                             : VRD_DROP_SOURCE_ERROR]++;
				cut_pending(pl);
				pthread_mutex_unlock(&pl->mu);
				if (rc == -ENODATA && !cfg->source.replay.loop &&
				    cfg->source.type == CFG_SOURCE_REPLAY) {
					vrd_log(LOG_NOTICE, "source_ended",
					        "source: the replay file ended (loop: false); "
					        "nothing more to acquire");
					atomic_store(&pl->acq_state, VRD_ACQ_ENDED);
					pthread_mutex_lock(&pl->mu);
					while (!pl->stop_acq)
						pthread_cond_wait(&pl->cv_room, &pl->mu);
					pthread_mutex_unlock(&pl->mu);
					goto out;
				}
				cut = true;
				recovering = true;
				if (source_fault(pl,
				                 rc == -ETIMEDOUT ? "acquire timed out"
				                 : rc == -EFAULT && pl->zc
				                         ? "acquire_ref returned a B-scan outside "
				                           "the regions it reported"
				                         : "acquire",
				                 rc, &streak, &backoff_ms, &started))
					goto out;
				break;
			}
			pthread_mutex_lock(&pl->mu);
			pl->c.acquired++;
			if (dropping) {
				if (pl->zc)
					release_one(pl, data);
				pl->c.drops[VRD_DROP_RING_FULL]++;
			} else {
				struct vrd_entry *en =
				        &pl->ring[(pl->tail + pl->committed + pl->pending) %
				                  pl->nring];
				en->data = data;
				en->ref = pl->zc;
				en->epoch = e;
				en->bscan = b;
				en->t_mono_ns = vrd_now_ns();
				en->t_real_ns =
				        meta.timestamp_ns ? meta.timestamp_ns : vrd_realtime_ns();
				pl->pending++;
				pl->c.ring_used++;
				if (pl->overlap)
					pthread_cond_signal(&pl->cv_data);
			}
			pthread_mutex_unlock(&pl->mu);
		}
		if (cut) {
			pthread_mutex_lock(&pl->mu);
			cut_pending(pl);
			pthread_mutex_unlock(&pl->mu);
			if (recovering) {
				e++;
				continue;
			}
			break; /* stopping */
		}
		if (!dropping) {
			pthread_mutex_lock(&pl->mu);
			pl->committed += pl->pending;
			pl->pending = 0;
			pthread_cond_signal(&pl->cv_data);
			pthread_mutex_unlock(&pl->mu);
		}
		if (recovering || streak) {
			/* a whole epoch came through after faults: the source is back */
			bool was;

			pthread_mutex_lock(&pl->mu);
			was = pl->degraded;
			pl->degraded = false;
			pl->fault[0] = '\0';
			pthread_mutex_unlock(&pl->mu);
			if (was)
				vrd_event("source_recovered", LOG_NOTICE,
				          "source: acquiring again after a fault", NULL);
			recovering = false;
			streak = 0;
		}
		e++;
	}
out:
	atomic_store(&pl->acq_state, VRD_ACQ_IDLE);
	pthread_mutex_lock(&pl->mu);
	cut_pending(pl);
	pl->acq_done = true;
	pthread_cond_broadcast(&pl->cv_data);
	pthread_mutex_unlock(&pl->mu);
	return NULL;
}

/* ---- processing --------------------------------------------------------------------------- */

/* Apply what the main thread asked for (live parameters, history reset); mu held. */
static bool requests_pending(const struct vrd_pipeline *pl)
{
	return pl->live_req != pl->live_done || pl->reset_req != pl->reset_done ||
	       pl->reg_req != pl->reg_done;
}

static void apply_requests(struct vrd_pipeline *pl)
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
		pl->live_rc = rc;
		snprintf(pl->live_err, sizeof(pl->live_err), "%s", err);
		pl->live_done = req;
	}
	if (pl->reset_req != pl->reset_done) {
		pl->reset_done = pl->reset_req;
		pl->reset_flag = true;
		pthread_mutex_unlock(&pl->mu);
		be_reset_history(pl->be);
		vrd_event("history_reset", LOG_NOTICE,
		          "reconstruction history reset: the next epoch starts afresh", NULL);
		pthread_mutex_lock(&pl->mu);
	}
}

/*
 * Publish the epoch whose output is complete in the slot begun last: its first and last ring
 * entries give the timestamps. t_done is when the output was complete; fills the publish and
 * end-to-end latencies of ms. Returns 0 or the writer's error.
 */
static int publish_epoch(struct vrd_pipeline *pl, uint64_t epoch, const struct vrd_entry *e0,
                         const struct vrd_entry *el, uint64_t t_done, double ms[LAT_N], char *err,
                         size_t errlen)
{
	struct vrd_vol_meta meta = {0};
	uint64_t t_pub;
	int rc;

	meta.epoch = epoch;
	scan_offset(&pl->cfg, epoch, &meta.ox, &meta.oy);
	meta.t_first_ns = e0->t_real_ns;
	meta.t_last_ns = el->t_real_ns;
	meta.latency_ns = t_done > el->t_mono_ns ? t_done - el->t_mono_ns : 0;
	meta.flags = pl->reset_flag ? VOLREC_FLAG_RESET : 0;
	rc = vrd_pub_publish(pl->pub, &meta, err, errlen);
	if (rc < 0)
		return rc;
	pl->reset_flag = false;
	t_pub = vrd_now_ns();
	ms[LAT_E2E] = (double)(t_pub - el->t_mono_ns) / 1e6;
	ms[LAT_PUB] = (double)(t_pub - t_done) / 1e6;
	return 0;
}

static int process_epoch(struct vrd_pipeline *pl, uint32_t first, double ms[LAT_N], char *err,
                         size_t errlen)
{
	const struct vrd_entry *e0 = &pl->ring[first],
	                       *el = &pl->ring[(first + pl->ny - 1) % pl->nring];
	struct be_output out = {0};
	uint64_t t0, t1, t2;
	uint8_t *vol = NULL;
	int rc;

	t0 = vrd_now_ns();
	for (uint32_t b = 0; b < pl->ny; b++) {
		const struct vrd_entry *en = &pl->ring[(first + b) % pl->nring];

		rc = be_bscan_submit(pl->be, en->epoch, en->bscan, en->data);
		if (rc < 0) {
			snprintf(err, errlen, "backend %s: submitting B-scan %u of epoch %llu: %s",
			         be_name(pl->be), en->bscan, (unsigned long long)en->epoch,
			         strerror(-rc));
			return rc;
		}
	}
	t1 = vrd_now_ns();
	rc = vrd_pub_begin(pl->pub, &vol, err, errlen);
	if (rc < 0)
		return rc;
	out.volume = vol;
	rc = be_epoch_finish(pl->be, e0->epoch, &out, err, errlen);
	if (rc < 0) {
		vrd_pub_abort(pl->pub);
		return rc;
	}
	t2 = vrd_now_ns();
	ms[LAT_PRE] = (double)(t1 - t0) / 1e6;
	ms[LAT_REC] = (double)(t2 - t1) / 1e6;
	return publish_epoch(pl, e0->epoch, e0, el, t2, ms, err, errlen);
}

static void *proc_main(void *arg)
{
	struct vrd_pipeline *pl = arg;

	pthread_mutex_lock(&pl->mu);
	while (1) {
		double ms[LAT_N];
		char err[512];
		uint32_t first;
		uint64_t epoch;
		int rc;

		atomic_store(&pl->proc_waiting, true);
		apply_requests(pl);
		while (pl->committed < pl->ny && !(pl->stop_proc && pl->acq_done) &&
		       !requests_pending(pl))
			pthread_cond_wait(&pl->cv_data, &pl->mu);
		if (requests_pending(pl))
			continue;
		if (pl->committed < pl->ny)
			break; /* stopping, and everything complete was processed */
		atomic_store(&pl->proc_waiting, false);
		first = pl->tail;
		epoch = pl->ring[first].epoch;
		pthread_mutex_unlock(&pl->mu);

		err[0] = '\0';
		rc = process_epoch(pl, first, ms, err, sizeof(err));
		if (rc < 0)
			vrd_log(LOG_ERR, "processing_error", "epoch %llu dropped: %s",
			        (unsigned long long)epoch, err);

		pthread_mutex_lock(&pl->mu);
		release_entries(pl, pl->tail, pl->ny);
		pl->tail = (pl->tail + pl->ny) % pl->nring;
		pl->committed -= pl->ny;
		pl->c.ring_used -= pl->ny;
		if (rc < 0) {
			pl->c.drops[VRD_DROP_PROCESSING_ERROR] += pl->ny;
		} else {
			pl->c.processed += pl->ny;
			pl->c.epochs_published++;
			pl->last_epoch = epoch;
			for (int i = 0; i < LAT_N; i++)
				vrd_lat_add(&pl->lat[i], ms[i]);
		}
		pthread_cond_broadcast(&pl->cv_room);
		atomic_fetch_add(&pl->proc_epochs, 1);
	}
	atomic_store(&pl->proc_waiting, true);
	pthread_mutex_unlock(&pl->mu);
	return NULL;
}

/* ---- processing, overlap mode ----------------------------------------------------------- */

/*
 * With the asynchronous epoch interface (backend.h) the processing thread keeps at most two
 * epochs: `fl`, finished asynchronously (reconstruction and the copy into its shm slot in
 * flight), and `sb`, whose B-scans are submitted as acquisition delivers them (preprocessing
 * overlaps fl's copies). The ring entries of fl are released when be_epoch_wait returns;
 * volumes are published in epoch order. Live parameters and history resets are applied only
 * when neither exists, so they take effect from the next epoch whose first B-scan is submitted
 * after they were asked for.
 */
struct ov_epoch {
	bool on;
	uint64_t epoch;
	uint32_t n;           /* B-scans claimed (sb) / ring entries held (fl) */
	bool failed;          /* a submit failed: the epoch is dropped as processing_error */
	char err[512];        /* its message */
	double pre_ms;        /* time spent in bscan_submit for this epoch */
	uint64_t t_fin;       /* when epoch_finish_async was called (fl) */
	struct be_output out; /* valid until be_epoch_wait returns (contract) */
};

/* Release the n entries at tail (the oldest epoch processing holds); mu held. published:
 * counted as processed, else as drops of cause. */
static void ov_release(struct vrd_pipeline *pl, uint32_t n, bool published, enum vrd_drop cause)
{
	release_entries(pl, pl->tail, n);
	pl->tail = (pl->tail + n) % pl->nring;
	pl->committed -= n;
	pl->claimed -= n;
	pl->c.ring_used -= n;
	if (published) {
		pl->c.processed += n;
		pl->c.epochs_published++;
	} else {
		pl->c.drops[cause] += n;
	}
	pthread_cond_broadcast(&pl->cv_room);
	atomic_fetch_add(&pl->proc_epochs, 1);
}

/* Submit ring entries [from, from + k) of epoch sb (mu not held). */
static void ov_submit(struct vrd_pipeline *pl, struct ov_epoch *sb, uint32_t from, uint32_t k)
{
	uint64_t t0 = vrd_now_ns();

	for (uint32_t i = 0; i < k && !sb->failed; i++) {
		const struct vrd_entry *en = &pl->ring[(from + i) % pl->nring];
		int rc = be_bscan_submit(pl->be, en->epoch, en->bscan, en->data);

		if (rc < 0) {
			sb->failed = true;
			snprintf(sb->err, sizeof(sb->err),
			         "backend %s: submitting B-scan %u of epoch %llu: %s",
			         be_name(pl->be), en->bscan, (unsigned long long)en->epoch,
			         strerror(-rc));
		}
	}
	sb->pre_ms += (double)(vrd_now_ns() - t0) / 1e6;
}

/* Finish an epoch whose output is not wanted (cut short, or a submit failed) so that the
 * backend is ready for the next one; missing B-scans come from the scratch buffer. Returns
 * whether the backend finished it (its history then holds made-up data). mu not held. */
static bool ov_finish_unwanted(struct vrd_pipeline *pl, struct ov_epoch *sb)
{
	struct be_output none = {0};
	char err[512];
	int rc;

	if (!sb->failed) {
		uint8_t *have = calloc(pl->ny, 1);

		if (!have)
			return false;
		for (uint32_t i = 0; i < sb->n; i++)
			have[pl->ring[(pl->tail + i) % pl->nring].bscan] = 1;
		for (uint32_t b = 0; b < pl->ny; b++)
			if (!have[b] && be_bscan_submit(pl->be, sb->epoch, b, pl->scratch) < 0)
				break;
		free(have);
	}
	rc = be_epoch_finish_async(pl->be, sb->epoch, &none, err, sizeof(err));
	if (rc == 0)
		rc = be_epoch_wait(pl->be, sb->epoch, err, sizeof(err));
	if (rc < 0 && !sb->failed)
		vrd_log(LOG_WARNING, "processing_error",
		        "epoch %llu (cut short): the backend could not finish it: %s",
		        (unsigned long long)sb->epoch, err);
	return rc == 0;
}

/* Wait for the epoch in flight and publish it (mu not held). Returns 0 or the error. */
static int ov_land(struct vrd_pipeline *pl, struct ov_epoch *fl, double ms[LAT_N], char *err,
                   size_t errlen)
{
	const struct vrd_entry *e0 = &pl->ring[pl->tail],
	                       *el = &pl->ring[(pl->tail + fl->n - 1) % pl->nring];
	uint64_t t2;
	int rc;

	rc = be_epoch_wait(pl->be, fl->epoch, err, errlen);
	if (rc < 0) {
		vrd_pub_abort(pl->pub);
		return rc;
	}
	t2 = vrd_now_ns();
	ms[LAT_PRE] = fl->pre_ms;
	ms[LAT_REC] = (double)(t2 - fl->t_fin) / 1e6;
	return publish_epoch(pl, fl->epoch, e0, el, t2, ms, err, errlen);
}

/* Take a shm slot and finish sb asynchronously into it (mu not held). */
static int ov_launch(struct vrd_pipeline *pl, struct ov_epoch *sb, char *err, size_t errlen)
{
	uint8_t *vol = NULL;
	int rc;

	if (sb->failed) {
		snprintf(err, errlen, "%s", sb->err);
		return -EIO;
	}
	rc = vrd_pub_begin(pl->pub, &vol, err, errlen);
	if (rc < 0)
		return rc;
	memset(&sb->out, 0, sizeof(sb->out));
	sb->out.volume = vol;
	sb->t_fin = vrd_now_ns();
	rc = be_epoch_finish_async(pl->be, sb->epoch, &sb->out, err, errlen);
	if (rc < 0)
		vrd_pub_abort(pl->pub);
	return rc;
}

static void *proc_overlap_main(void *arg)
{
	struct vrd_pipeline *pl = arg;
	struct ov_epoch fl = {0}, sb = {0};
	char err[512];

	pthread_mutex_lock(&pl->mu);
	while (1) {
		bool requests = requests_pending(pl);
		uint32_t avail = pl->committed + pl->pending - pl->claimed;

		atomic_store(&pl->proc_waiting, false);
		if (!fl.on && !sb.on && requests) {
			apply_requests(pl);
			continue;
		}
		/* 1. take what acquisition delivered of the epoch being submitted */
		if (!sb.on && avail && !requests) {
			memset(&sb, 0, sizeof(sb));
			sb.on = true;
			sb.epoch = pl->ring[(pl->tail + pl->claimed) % pl->nring].epoch;
		}
		if (sb.on && avail && sb.n < pl->ny) {
			uint32_t from = pl->tail + pl->claimed, k = 0;

			while (k < avail && sb.n + k < pl->ny &&
			       pl->ring[(from + k) % pl->nring].epoch == sb.epoch)
				k++;
			if (k) {
				pl->claimed += k;
				pthread_mutex_unlock(&pl->mu);
				ov_submit(pl, &sb, from, k);
				pthread_mutex_lock(&pl->mu);
				sb.n += k;
				continue;
			}
		}
		/* 2. the epoch in flight: wait for it, publish it, release its B-scans */
		if (fl.on) {
			double ms[LAT_N];
			int rc;

			pthread_mutex_unlock(&pl->mu);
			err[0] = '\0';
			rc = ov_land(pl, &fl, ms, err, sizeof(err));
			if (rc < 0)
				vrd_log(LOG_ERR, "processing_error", "epoch %llu dropped: %s",
				        (unsigned long long)fl.epoch, err);
			pthread_mutex_lock(&pl->mu);
			if (rc == 0) {
				pl->last_epoch = fl.epoch;
				for (int i = 0; i < LAT_N; i++)
					vrd_lat_add(&pl->lat[i], ms[i]);
			}
			ov_release(pl, fl.n, rc == 0, VRD_DROP_PROCESSING_ERROR);
			fl.on = false;
			continue;
		}
		/* 3. the epoch being submitted is complete (and committed): finish it */
		if (sb.on && sb.n == pl->ny && pl->committed >= pl->ny) {
			int rc;

			pthread_mutex_unlock(&pl->mu);
			err[0] = '\0';
			rc = ov_launch(pl, &sb, err, sizeof(err));
			if (rc < 0) {
				if (sb.failed)
					ov_finish_unwanted(pl, &sb);
				vrd_log(LOG_ERR, "processing_error", "epoch %llu dropped: %s",
				        (unsigned long long)sb.epoch, err);
			}
			pthread_mutex_lock(&pl->mu);
			if (rc < 0) {
				ov_release(pl, sb.n, false, VRD_DROP_PROCESSING_ERROR);
			} else {
				fl = sb;
				fl.on = true;
			}
			sb.on = false;
			continue;
		}
		/* 4. the epoch being submitted was cut short after processing took part of it
		 *    (cut_pending handed it over: all its entries are committed) */
		if (sb.on && sb.n < pl->ny && sb.n <= pl->committed) {
			bool history = pl->cfg.reconstruct.mode != CFG_RECON_NONE;
			bool finished;

			pthread_mutex_unlock(&pl->mu);
			finished = ov_finish_unwanted(pl, &sb);
			if (finished && history) {
				/* its made-up B-scans are now in the history: start afresh */
				be_reset_history(pl->be);
				pl->reset_flag = true;
				vrd_event("history_reset", LOG_NOTICE,
				          "reconstruction history reset: an epoch was cut short "
				          "after "
				          "its first B-scans were processed",
				          NULL);
			}
			vrd_log(LOG_INFO, "incomplete_epoch",
			        "epoch %llu cut short after %u of %u B-scans: not published",
			        (unsigned long long)sb.epoch, sb.n, pl->ny);
			pthread_mutex_lock(&pl->mu);
			ov_release(pl, sb.n, false, VRD_DROP_INCOMPLETE_EPOCH);
			sb.on = false;
			continue;
		}
		/* 5. stopping: everything acquired was processed or dropped */
		if (!sb.on && pl->stop_proc && pl->acq_done && pl->committed == 0)
			break;
		atomic_store(&pl->proc_waiting, true);
		pthread_cond_wait(&pl->cv_data, &pl->mu);
	}
	atomic_store(&pl->proc_waiting, true);
	pthread_mutex_unlock(&pl->mu);
	return NULL;
}

/* ---- life cycle ---------------------------------------------------------------------------- */

static void pipeline_free(struct vrd_pipeline *pl, bool unlink_shm)
{
	if (!pl)
		return;
	if (pl->src_is_open && pl->ring) {
		/* nothing should be held now; give back whatever is before the source goes */
		for (uint32_t i = 0; i < pl->nring; i++)
			if (pl->ring[i].ref)
				release_one(pl, pl->ring[i].data);
	}
	if (pl->be)
		regions_unregister(pl);
	free(pl->reg_new);
	if (pl->src_is_open)
		src_close(&pl->src);
	if (pl->pub)
		vrd_pub_close(pl->pub, unlink_shm);
	if (pl->be) {
		be_host_free(pl->be, pl->ring_mem);
		be_host_free(pl->be, pl->scratch);
		be_close(pl->be);
	}
	free(pl->ring);
	if (pl->live_cfg_set)
		cfg_free(&pl->live_cfg);
	cfg_free(&pl->cfg);
	pthread_cond_destroy(&pl->cv_room);
	pthread_cond_destroy(&pl->cv_data);
	pthread_mutex_destroy(&pl->mu);
	free(pl);
}

/*
 * Overlap mode (B-scans submitted as they arrive, two epochs in flight) is used where it pays:
 * a backend with the asynchronous epoch interface, or one whose bscan_submit works on a device
 * (anything but the CPU backend, whose submit only records the buffer). The environment
 * variable VOLRECD_PIPELINE_OVERLAP=0|1 forces it off or on (diagnostics and tests: on the CPU
 * backend be_epoch_finish_async falls back to the synchronous finish).
 */
static int pipeline_mode(struct vrd_pipeline *pl, char *err, size_t errlen)
{
	const char *env = getenv("VOLRECD_PIPELINE_OVERLAP");
	const unsigned caps = be_caps(pl->be);

	if (env && env[0]) {
		if (strcmp(env, "0") && strcmp(env, "1")) {
			snprintf(
			        err, errlen,
			        "VOLRECD_PIPELINE_OVERLAP: '%s' is not 0 (off) or 1 (on); unset it "
			        "for the backend's default",
			        env);
			return -EINVAL;
		}
		pl->overlap = env[0] == '1';
	} else {
		pl->overlap = (caps & BE_CAP_ASYNC) || (caps & BE_CAP_DEVICE);
	}
	if (pl->overlap && pl->nring < 2 * pl->ny)
		vrd_log(LOG_NOTICE, NULL,
		        "pipeline: ring_bscans %u holds less than two epochs (%u B-scans): the "
		        "next "
		        "epoch is acquired only once the one in flight is published",
		        pl->nring, 2 * pl->ny);
	vrd_log(LOG_INFO, NULL, "pipeline: %s (backend %s%s)",
	        pl->overlap ? "overlap: B-scans submitted as they arrive, two epochs in flight"
	                    : "one complete epoch at a time",
	        be_name(pl->be), (caps & BE_CAP_ASYNC) ? ", asynchronous epochs" : "");
	return 0;
}

/*
 * Zero-copy acquisition (docs/operations.md "Pipeline"): used when the source has the
 * zero-copy calls of shim.h and the backend registers all its regions (a no-op on the CPU
 * backend, cudaHostRegister on CUDA); otherwise B-scans are copied into the ring. The
 * environment variable VOLRECD_ZERO_COPY=0 forces the copying path (comparisons, tests).
 * Main thread, before the pipeline threads exist.
 */
static int acquisition_mode(struct vrd_pipeline *pl, char *err, size_t errlen)
{
	const char *env = getenv("VOLRECD_ZERO_COPY");
	struct volrec_shim_region *regs = NULL;
	uint32_t n = 0;
	size_t bytes = 0;
	char why[512];
	int rc;

	pl->zc = false;
	if (env && env[0] && strcmp(env, "0") && strcmp(env, "1")) {
		snprintf(err, errlen,
		         "VOLRECD_ZERO_COPY: '%s' is not 0 (copy every B-scan) or 1 (zero-copy "
		         "where the source and backend allow it, the default)",
		         env);
		return -EINVAL;
	}
	if (env && !strcmp(env, "0")) {
		snprintf(pl->zc_why, sizeof(pl->zc_why), "VOLRECD_ZERO_COPY=0");
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
			vrd_log(LOG_WARNING, NULL,
			        "acquisition: zero-copy refused, copying instead: %s", why);
		}
	}
	for (uint32_t i = 0; i < pl->nregions; i++)
		bytes += pl->regions[i].size;
	if (pl->zc)
		vrd_log(LOG_INFO, NULL,
		        "acquisition: zero-copy (source %s's buffers, %u region%s of %.1f MiB "
		        "registered with backend %s; the ring holds references)",
		        pl->src.info.name, pl->nregions, pl->nregions == 1 ? "" : "s",
		        (double)bytes / 1048576.0, be_name(pl->be));
	else
		vrd_log(LOG_INFO, NULL, "acquisition: copy into the ring (%s)", pl->zc_why);
	return 0;
}

int vrd_pipeline_start(const struct vr_config *cfg, struct vrd_pipeline **out, char *err,
                       size_t errlen)
{
	struct vrd_pipeline *pl = calloc(1, sizeof(*pl));
	char why[512];
	int rc;

	if (!pl) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	pthread_mutex_init(&pl->mu, NULL);
	{
		pthread_condattr_t ca;

		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&pl->cv_room, &ca);
		pthread_condattr_destroy(&ca);
	}
	pthread_cond_init(&pl->cv_data, NULL);
	cfg_defaults(&pl->cfg);
	cfg_defaults(&pl->live_cfg);
	rc = cfg_copy(&pl->cfg, cfg);
	if (rc < 0) {
		snprintf(err, errlen, "out of memory copying the configuration");
		goto fail;
	}
	pl->ny = cfg->geometry.bscans_per_volume;
	pl->nring = cfg->pipeline.ring_bscans;
	pl->bscan_bytes = cfg_bscan_bytes(cfg);
	if (pl->nring < pl->ny) {
		snprintf(err, errlen,
		         "pipeline.ring_bscans: %u is smaller than one epoch (%u B-scans)",
		         pl->nring, pl->ny);
		rc = -EINVAL;
		goto fail;
	}
	if (cfg->source.type == CFG_SOURCE_SHIM)
		pl->timeout_ms = cfg->source.shim.timeout_ms;
	else
		pl->timeout_ms =
		        1000 + (cfg->source.rate > 0 ? (int)(2000.0 / cfg->source.rate) : 0);

	rc = be_open(cfg, &pl->be, pl->be_note, sizeof(pl->be_note), why, sizeof(why));
	if (rc < 0) {
		snprintf(err, errlen, "backend: %s", why);
		goto fail;
	}
	if (pl->be_note[0])
		vrd_log(LOG_NOTICE, NULL, "%s", pl->be_note);
	rc = pipeline_mode(pl, err, errlen);
	if (rc < 0)
		goto fail;
	rc = be_host_alloc(pl->be, pl->bscan_bytes, &pl->scratch);
	if (rc < 0) {
		snprintf(err, errlen, "pipeline: allocating a scratch B-scan (%zu bytes): %s",
		         pl->bscan_bytes, strerror(-rc));
		goto fail;
	}
	pl->ring = calloc(pl->nring, sizeof(*pl->ring));
	if (!pl->ring) {
		rc = -ENOMEM;
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	pl->c.ring_size = pl->nring;

	rc = src_open(cfg, 0, &pl->src, why, sizeof(why));
	if (rc < 0) {
		snprintf(err, errlen, "%s", why);
		goto fail;
	}
	pl->src_is_open = true;
	pl->src_info = pl->src.info;

	rc = acquisition_mode(pl, err, errlen);
	if (rc < 0)
		goto fail;
	if (!pl->zc) {
		rc = be_host_alloc(pl->be, pl->bscan_bytes * pl->nring, &pl->ring_mem);
		if (rc < 0) {
			snprintf(err, errlen,
			         "pipeline: allocating the ring of %u B-scans (%zu bytes): %s",
			         pl->nring, pl->bscan_bytes * pl->nring, strerror(-rc));
			goto fail;
		}
		for (uint32_t i = 0; i < pl->nring; i++)
			pl->ring[i].buf = (char *)pl->ring_mem + (size_t)i * pl->bscan_bytes;
	}

	rc = vrd_pub_open(cfg, pl->be, &pl->pub, why, sizeof(why));
	if (rc < 0) {
		snprintf(err, errlen, "%s", why);
		goto fail;
	}

	rc = -pthread_create(&pl->proc_thr, NULL, pl->overlap ? proc_overlap_main : proc_main, pl);
	if (rc < 0) {
		snprintf(err, errlen, "starting the processing thread: %s", strerror(-rc));
		goto fail;
	}
	pl->proc_started = true;
	rc = -pthread_create(&pl->acq_thr, NULL, acq_main, pl);
	if (rc < 0) {
		snprintf(err, errlen, "starting the acquisition thread: %s", strerror(-rc));
		goto fail;
	}
	pl->acq_started = true;
	*out = pl;
	return 0;

fail:
	if (pl->proc_started) {
		pthread_mutex_lock(&pl->mu);
		pl->stop_proc = true;
		pl->acq_done = true;
		pthread_cond_broadcast(&pl->cv_data);
		pthread_mutex_unlock(&pl->mu);
		pthread_join(pl->proc_thr, NULL);
	}
	pipeline_free(pl, true);
	return rc;
}

void vrd_pipeline_stop(struct vrd_pipeline *pl, bool unlink_shm)
{
	if (!pl)
		return;
	pthread_mutex_lock(&pl->mu);
	pl->stop_acq = true;
	pthread_cond_broadcast(&pl->cv_room);
	pthread_mutex_unlock(&pl->mu);
	if (pl->acq_started)
		pthread_join(pl->acq_thr, NULL);
	if (pl->src_is_open && !pl->zc) {
		/* zero-copy: processing still reads the source's memory; closed in
		 * pipeline_free once it is done */
		src_close(&pl->src);
		pl->src_is_open = false;
	}
	pthread_mutex_lock(&pl->mu);
	pl->acq_done = true;
	pl->stop_proc = true;
	pthread_cond_broadcast(&pl->cv_data);
	pthread_mutex_unlock(&pl->mu);
	if (pl->proc_started)
		pthread_join(pl->proc_thr, NULL);
	pipeline_free(pl, unlink_shm);
}

int vrd_pipeline_request_live(struct vrd_pipeline *pl, const struct vr_config *cfg,
                              uint64_t *ticket)
{
	int rc;

	pthread_mutex_lock(&pl->mu);
	if (pl->live_cfg_set)
		cfg_free(&pl->live_cfg);
	rc = cfg_copy(&pl->live_cfg, cfg);
	pl->live_cfg_set = rc == 0;
	if (rc == 0) {
		*ticket = ++pl->live_req;
		pthread_cond_broadcast(&pl->cv_data);
	}
	pthread_mutex_unlock(&pl->mu);
	return rc;
}

bool vrd_pipeline_live_done(struct vrd_pipeline *pl, uint64_t ticket, int *rc, char *err,
                            size_t errlen)
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

void vrd_pipeline_request_reset(struct vrd_pipeline *pl)
{
	pthread_mutex_lock(&pl->mu);
	pl->reset_req++;
	pthread_cond_broadcast(&pl->cv_data);
	pthread_mutex_unlock(&pl->mu);
}

void vrd_pipeline_snapshot(struct vrd_pipeline *pl, struct vrd_snapshot *s)
{
	memset(s, 0, sizeof(*s));
	pthread_mutex_lock(&pl->mu);
	s->c = pl->c;
	for (int i = 0; i < LAT_N; i++)
		vrd_lat_percentiles(&pl->lat[i], &s->lat_p50[i], &s->lat_p99[i]);
	s->degraded = pl->degraded;
	snprintf(s->fault, sizeof(s->fault), "%s", pl->fault);
	s->last_epoch = pl->last_epoch;
	pthread_mutex_unlock(&pl->mu);
	s->acq_state = atomic_load(&pl->acq_state);
}

void vrd_pipeline_progress(struct vrd_pipeline *pl, struct vrd_progress *p)
{
	p->proc_epochs = atomic_load(&pl->proc_epochs);
	p->acq_returns = atomic_load(&pl->acq_returns);
	p->proc_waiting = atomic_load(&pl->proc_waiting);
	p->acq_state = atomic_load(&pl->acq_state);
}

struct vrd_pub *vrd_pipeline_pub(struct vrd_pipeline *pl)
{
	return pl->pub;
}

const struct vr_config *vrd_pipeline_config(struct vrd_pipeline *pl)
{
	return &pl->cfg;
}

const char *vrd_pipeline_backend_name(struct vrd_pipeline *pl)
{
	return be_name(pl->be);
}

const char *vrd_pipeline_device(struct vrd_pipeline *pl)
{
	return be_device(pl->be);
}

const char *vrd_pipeline_acquisition(struct vrd_pipeline *pl)
{
	return pl->zc ? "zero-copy" : "copy";
}

void vrd_pipeline_source_info(struct vrd_pipeline *pl, struct volrec_shim_info *info)
{
	pthread_mutex_lock(&pl->mu);
	*info = pl->src_info;
	pthread_mutex_unlock(&pl->mu);
}
