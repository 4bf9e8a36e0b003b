/* SPDX-License-Identifier: MIT */
/*
 * Private declarations of the pipeline engine (pl_): the raw ring and the engine's state.
 */
#ifndef VOLREC_PIPELINE_INTERNAL_H
#define VOLREC_PIPELINE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "pipeline/pipeline.h"

/* ---- the raw ring (ring.c) ---------------------------------------------------------------- */

/* One raw B-scan held between acquisition and processing. */
struct pl_entry {
	void *buf;        /* copying path: this entry's buffer in the ring block */
	const void *data; /* the B-scan handed to the backend: buf, or (zero-copy) a reference
	                     * into the source's memory, released with release_ref() */
	bool ref;         /* data is a reference not yet released */
	bool gap_before;  /* B-scan 0 the source marked VOLREC_SHIM_META_DROPPED_BEFORE */
	uint64_t epoch;   /* epoch and raw B-scan index it holds (position * M + repeat) */
	uint32_t bscan;
	uint64_t t_mono_ns; /* when acquire() returned it (CLOCK_MONOTONIC) */
	uint64_t t_real_ns; /* the source's timestamp (CLOCK_REALTIME) */
};

/*
 * A ring of raw B-scans. Counted from the tail (the oldest entry): [0, claimed) processing has
 * taken, [claimed, ready) acquisition committed and processing has not taken yet, [ready,
 * used) acquisition reserved for the epoch it acquires (filled in order). So 0 <= claimed <=
 * ready <= used <= size. Not thread-safe: the pipeline's lock guards it.
 */
struct pl_ring {
	struct pl_entry *e;
	uint32_t size;
	uint32_t tail; /* index of the oldest entry */
	uint32_t claimed, ready, used;
};

VR_MUST_CHECK int pl_ring_init(struct pl_ring *r, uint32_t size);
void pl_ring_free(struct pl_ring *r);
/* The i-th entry from the tail (i < size). */
struct pl_entry *pl_ring_at(const struct pl_ring *r, uint32_t i);
/* Acquisition: reserve room for n more entries; false (nothing reserved) without room. */
bool pl_ring_reserve(struct pl_ring *r, uint32_t n);
/* Acquisition: the next reserved entry to fill, NULL when none is reserved. */
struct pl_entry *pl_ring_next(const struct pl_ring *r);
/* Acquisition: the entry pl_ring_next gave is filled: processing may take it. */
void pl_ring_commit(struct pl_ring *r);
/* Acquisition: give back the reserved entries not filled; returns how many. */
uint32_t pl_ring_unreserve(struct pl_ring *r);
/* Acquisition: take back up to n of the newest committed entries processing has not taken
 * (an epoch cut short); returns how many. */
uint32_t pl_ring_retract(struct pl_ring *r, uint32_t n);
/* Processing: committed entries not taken yet. */
static inline uint32_t pl_ring_avail(const struct pl_ring *r)
{
	return r->ready - r->claimed;
}
/* Processing: take n available entries (n <= pl_ring_avail). */
void pl_ring_claim(struct pl_ring *r, uint32_t n);
/* Processing: give back the n oldest entries (n <= claimed); acquisition may reuse them. */
void pl_ring_release(struct pl_ring *r, uint32_t n);

/* ---- the engine's state, shared by its three files (engine.c, acquire.c, process.c) ---- */

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

/* Who still holds what the pipeline's options name: the pipeline itself and every source
 * close abandoned on its helper thread; the last to let go calls opt.on_freed. */
struct pl_life {
	atomic_uint refs;
	void (*on_freed)(void *ctx);
	void *ctx;
};

struct pl_pipeline {
	struct pl_options opt;
	struct pl_life *life;
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
	uint32_t nraw; /* raw B-scans an epoch: ny positions x M repeats (docs/algorithms.md §5) */
	uint32_t repeats;     /* M: en->bscan = position * M + repeat */
	int depth;            /* 1 or 2 */
	uint64_t epochs;      /* pl_run: acquire that many epochs, then end (0: until pl_stop) */
	uint64_t first_epoch; /* the first epoch acquired: the source's (a recording's first) */
	bool block;           /* wait for room instead of dropping */

	/* be_output.missing_ascans [ny] of the epochs launched, in turn (when the sink gives
	 * none) */
	uint32_t *missing[2];
	unsigned missing_next;

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

/* Byte i of the guard after a copy buffer: a pattern acquire() must leave as it is. */
static inline uint8_t pl_guard_byte(unsigned i)
{
	return (uint8_t)(0xa5u ^ (i * 29u));
}

static inline void pl_guard_set(void *buf, size_t n)
{
	for (unsigned i = 0; i < GUARD_BYTES; i++)
		((uint8_t *)buf)[n + i] = pl_guard_byte(i);
}

/* Shared by the engine's files (engine.c: events, source, regions, set-up; acquire.c; process.c) */
void pl_emit(struct pl_pipeline *pl, const char *name, enum pl_level level, bool announce,
             const char *fmt, ...);
void pl_fail_run(struct pl_pipeline *pl, int rc, const char *msg);
void pl_release_one(struct pl_pipeline *pl, const void *p);
void pl_release_entries(struct pl_pipeline *pl, uint32_t from, uint32_t n);
int pl_set_regions(struct pl_pipeline *pl, struct volrec_shim_region *regs, uint32_t n, char *err,
                   size_t errlen);
void pl_source_close(struct pl_pipeline *pl);
int pl_source_open(struct pl_pipeline *pl, char *err, size_t errlen);
void pl_source_info_update(struct pl_pipeline *pl);
int pl_source_regions(struct pl_pipeline *pl, struct volrec_shim_region **out, uint32_t *n,
                      char *err, size_t errlen);
void pl_free(struct pl_pipeline *pl);
int pl_regions_register(struct pl_pipeline *pl, struct volrec_shim_region *regs, uint32_t n,
                        char *err, size_t errlen);
void pl_regions_unregister(struct pl_pipeline *pl);
void pl_cut_epoch(struct pl_pipeline *pl);
void pl_wait_flag(pthread_cond_t *cv, pthread_mutex_t *mu, const bool *flag, int ms);
void *pl_acq_main(void *arg);
void *pl_proc_main(void *arg);

#endif
