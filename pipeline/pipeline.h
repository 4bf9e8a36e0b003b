/* SPDX-License-Identifier: MIT */
/*
 * The pipeline engine (pl_): source -> raw B-scan ring -> backend -> sink, epoch by epoch, the
 * one loop that volrecd, `volrec process` and the benchmarks drive with their own sinks
 * (docs/architecture.md). It owns the acquisition thread and the processing thread, checks what
 * the source says about each B-scan, counts every drop by cause, applies live parameters and
 * history resets between epochs, and backs off and reopens a faulty source. It never logs:
 * what happens is reported through the event callback, and statistics are read with
 * pl_stats().
 */
#ifndef VOLREC_PIPELINE_H
#define VOLREC_PIPELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "base/base.h"
#include "config/config.h"
#include "sources/source.h"

struct pl_pipeline;

/* ---- sinks: where finished volumes go ---------------------------------------------------- */

/* What the engine knows about a finished volume (handed to pl_sink.publish). */
struct pl_volume {
	uint64_t epoch;
	uint32_t ox, oy;     /* scan offset of the epoch */
	uint64_t t_first_ns; /* CLOCK_REALTIME: first B-scan acquired (the source's timestamp) */
	uint64_t t_last_ns;  /* CLOCK_REALTIME: last B-scan acquired */
	uint64_t t_first_mono_ns; /* CLOCK_MONOTONIC: when acquire() returned the first B-scan */
	uint64_t t_done_mono_ns;  /* CLOCK_MONOTONIC: the output was complete in host memory */
	uint64_t latency_ns;      /* last B-scan acquired -> output complete */
	double preprocess_ms;     /* time spent submitting the epoch's B-scans */
	double reconstruct_ms;    /* epoch finish -> output complete */
	uint32_t generation;      /* of the live parameters it was made with (pl_request_live) */
	uint64_t missing_ascans;  /* A-scans with a non-finite sample, reconstructed from their
	                           * neighbours (f32 input, docs/algorithms.md §1.0) */
	uint32_t flags;           /* PL_VOLUME_RESET: the first volume after a history reset;
	                          * PL_VOLUME_DROPPED_BEFORE: the source lost data before its
	                          * first B-scan (epochs skipped are for the sink to tell) */
};
#define PL_VOLUME_RESET          0x1u
#define PL_VOLUME_DROPPED_BEFORE 0x2u

/*
 * A sink, called from the processing thread only, one volume at a time:
 *  - begin(epoch, out): say where the output of `epoch` goes: out->volume (cfg_out_voxels
 *    bytes, required) and, when wanted, out->lowres / out->full / out->views /
 *    out->median_depths (be_output); the buffers stay the sink's and must stay valid until
 *    publish() or abort(). 0 or a negative errno with a message in err (the epoch is then
 *    dropped as processing_error).
 *  - publish(meta): the output is complete. 0 or a negative errno with a message in err.
 *  - abort(): the epoch begun last is dropped (backend failure); give its buffers back.
 * Live reload and history resets never happen between begin and publish/abort.
 */
struct pl_sink {
	void *ctx;
	int (*begin)(void *ctx, uint64_t epoch, struct be_output *out, char *err, size_t errlen);
	int (*publish)(void *ctx, const struct pl_volume *meta, char *err, size_t errlen);
	void (*abort)(void *ctx);
};

/* ---- the raw tap: acquired B-scans, for a recorder ----------------------------------------- */

#define PL_TAP_GAP       0x1u /* the source lost data before this B-scan */
#define PL_TAP_RING_FULL 0x2u /* processing has no room for this epoch: it drops it */

/*
 * A second consumer of the raw B-scans beside processing, called from the acquisition thread
 * for every B-scan acquisition accepts (in order, whether or not processing keeps its epoch)
 * and at the end of each epoch. It must never wait for anything slow (a disk): it copies what
 * it keeps and returns. data is valid during the call only.
 */
struct pl_tap {
	void *ctx;
	void (*bscan)(void *ctx, uint64_t epoch, uint32_t b, const void *data, size_t bytes,
	              uint64_t t_ns, unsigned marks);
	/* whole: every B-scan of the epoch was handed to bscan(); false when it was cut short */
	void (*epoch_end)(void *ctx, uint64_t epoch, bool whole);
};

/* ---- events ------------------------------------------------------------------------------ */

enum pl_level { PL_DEBUG, PL_INFO, PL_NOTICE, PL_WARNING, PL_ERR };

/* Something that happened, for the driver to log, publish or act on. */
struct pl_event {
	const char *name; /* "source_fault", "source_recovered", "history_reset", ...; NULL
	                      * for a plain note (modes chosen, notices) */
	enum pl_level level;
	bool announce;       /* a lifecycle event clients should be told of (volrecd: `event`) */
	const char *message; /* valid UTF-8, valid during the call only */
};

/* Called from the engine's threads (and from pl_open/pl_stop/pl_stats on the caller's), one
 * call at a time and never once pl_close has returned, not even by an acquisition thread left
 * in a source call: keep it short and thread-safe; it must not call back into the pipeline. */
typedef void (*pl_event_fn)(void *ctx, const struct pl_event *ev);

/* ---- options ----------------------------------------------------------------------------- */

struct pl_options {
	const struct vr_config *cfg; /* copied by pl_open */
	uint32_t generation;         /* that the volumes carry until a pl_request_live (0: none) */
	unsigned src_flags;          /* src_open flags (SRC_UNPACED | SRC_NO_LOOP for offline;
	                              * SRC_DROP_MARKS where a lost B-scan may drop its epoch) */
	bool block;                  /* never drop: wait for ring room whatever the source */
	bool stop_on_fault;          /* the first source fault or processing error ends the run with
	                         * its error (offline); otherwise back off, retry, go on */
	int depth;               /* epochs in flight: 1 (submit a complete epoch, finish, publish)
	                         * or 2 (B-scans submitted as they arrive, epoch e+1 submitted
	                         * while e is in flight); 0: 2 where the backend gains from it
	                         * (BE_CAP_ASYNC or BE_CAP_DEVICE), else 1 */
	int zero_copy;           /* 1 or -1 (default): references into the source's own memory
	                         * where source and backend allow it; 0: copy into the ring */
	const char *copy_reason; /* with zero_copy 0: why, for the note ("VOLRECD_ZERO_COPY=0") */
	pl_event_fn on_event;    /* may be NULL */
	void *event_ctx;
	/* Open/close the source another way than src_open/src_close (tests, embedders); both or
	 * neither. open has src_open's contract. */
	int (*source_open)(void *ctx, const struct vr_config *cfg, unsigned flags,
	                   struct src_source *src, char *err, size_t errlen);
	void (*source_close)(void *ctx, struct src_source *src);
	void *source_ctx;
	const struct pl_tap *tap; /* copied; NULL: none. Its ctx must outlive the pipeline. */
	/* Called once, from whichever thread lets go last (pl_close's caller, or a source call
	 * that was abandoned and returned later), when nothing of the pipeline will touch
	 * source_ctx, event_ctx or the tap's ctx again: the moment an embedder may free them
	 * (not called when pl_open fails). NULL: not told. */
	void (*on_freed)(void *ctx);
	void *freed_ctx;
	uint64_t skip_epochs; /* start this many epochs after the source's first (a part of a
	                           * recording: `volrec process --frames`); 0: at its first */
};

/*
 * Read the diagnostics switches of the environment into o: VOLRECD_PIPELINE_OVERLAP=0|1
 * (depth 1 or 2) and VOLRECD_ZERO_COPY=0|1. -EINVAL with a message naming the variable when a
 * value is neither.
 */
VR_MUST_CHECK int pl_options_from_env(struct pl_options *o, char *err, size_t errlen);

/* ---- life cycle -------------------------------------------------------------------------- */

/*
 * Build a pipeline for o->cfg: opens the backend, the source (zero-copy regions registered
 * with the backend where possible) and the ring; starts nothing. On failure returns a negative
 * errno with the message in err and leaves nothing. Free with pl_close().
 */
VR_MUST_CHECK int pl_open(const struct pl_options *o, struct pl_pipeline **out, char *err,
                          size_t errlen);
/* The backend (for a sink to register its buffers or allocate host memory); owned by pl. */
struct be_backend *pl_backend(struct pl_pipeline *pl);
/* Start the acquisition and processing threads, output into sink (copied; its ctx must live
 * until pl_stop returns). Once per pipeline. */
VR_MUST_CHECK int pl_start(struct pl_pipeline *pl, const struct pl_sink *sink, char *err,
                           size_t errlen);
/*
 * Stop the source, finish what is complete, join the threads. A source stuck inside one of its
 * calls is waited for at most its timeout plus one second: then the pipeline stops without it
 * (event "source_abandoned"); what that call may still touch (the pipeline, its ring, the
 * source, the backend) stays allocated until it returns, and is freed then if pl_close came.
 * The source's stop() and close() (here, or in pl_close after zero-copy) have the same bound:
 * past it the source is left open, its calls running on a thread of their own.
 */
void pl_stop(struct pl_pipeline *pl);
/* Free everything (stops first if needed); the sink must be done with the backend before. */
void pl_close(struct pl_pipeline *pl);

/*
 * The blocking form (curl's easy_perform over the engine): start into sink, acquire `epochs`
 * epochs from the source's first (0, or a recording's first recorded epoch), wait until they are processed, the source has ended, or (stop_on_fault) a
 * fault or error ended the run, then stop. Returns 0 or the error (its message in err);
 * pl_stats() then says how many volumes were published.
 */
VR_MUST_CHECK int pl_run(struct pl_pipeline *pl, const struct pl_sink *sink, uint64_t epochs,
                         char *err, size_t errlen);

/* ---- requests between epochs ------------------------------------------------------------- */

/* Queue the live parameters of cfg (copied), applied before the next epoch; *ticket names the
 * request for pl_live_done. Once applied, the volumes carry generation (struct pl_volume), the
 * number the driver gives those parameters (docs/control.md); until then the one before. */
VR_MUST_CHECK int pl_request_live(struct pl_pipeline *pl, const struct vr_config *cfg,
                                  uint32_t generation, uint64_t *ticket);
/* Whether request ticket was applied; then *rc and err are be_update_live's result. */
bool pl_live_done(struct pl_pipeline *pl, uint64_t ticket, int *rc, char *err, size_t errlen);
/* Reset the reconstruction history before the next epoch (event history_reset when done). */
void pl_request_reset(struct pl_pipeline *pl);

/* ---- statistics -------------------------------------------------------------------------- */

enum pl_drop {
	PL_DROP_RING_FULL,         /* acquired, no room in the ring: the epoch dropped */
	PL_DROP_INCOMPLETE_EPOCH,  /* acquired, but its epoch was cut short (fault, stop, a B-scan
	                            * numbered otherwise than due, one marked lost/incomplete, or
	                            * data lost before a B-scan after the first) */
	PL_DROP_PROCESSING_ERROR,  /* acquired, but the backend or the sink failed on its epoch */
	PL_DROP_SOURCE_ERROR,      /* acquire() failed: a B-scan never acquired */
	PL_DROP_SOURCE_TIMEOUT,    /* acquire() timed out: a B-scan never acquired */
	PL_DROP_SOURCE_LOST,       /* the source marked the B-scan due lost (VOLREC_SHIM_META_LOST):
	                            * never acquired, not a fault; the rest of its epoch dropped */
	PL_DROP_SOURCE_INCOMPLETE, /* the source marked it incomplete (_META_INCOMPLETE): as lost */
	PL_DROP_COUNT,
};
extern const char *const pl_drop_names[PL_DROP_COUNT];
/* Whether drops of this cause were acquired B-scans (they then count in the identity). */
static inline bool pl_drop_acquired(enum pl_drop d)
{
	return d <= PL_DROP_PROCESSING_ERROR;
}

enum pl_acq_state {
	PL_ACQ_IDLE,      /* not started yet, or stopped */
	PL_ACQ_ACQUIRING, /* inside the source */
	PL_ACQ_WAIT_ROOM, /* waiting for processing to free the ring */
	PL_ACQ_BACKOFF,   /* sleeping after a source fault before retrying */
	PL_ACQ_ENDED,     /* the source ended (replay with loop: false) or epochs were done */
};

/* Cumulative counters; consistent with each other: acquired == processed + in_ring + the drops
 * of every acquired cause (pl_drop_acquired). */
struct pl_counters {
	uint64_t acquired;  /* B-scans acquire() delivered */
	uint64_t processed; /* B-scans of published epochs */
	uint64_t drops[PL_DROP_COUNT];
	uint64_t epochs_started, epochs_published;
	uint64_t source_faults, source_reopens;
	uint64_t release_errors; /* release_ref() calls that failed (not faults: data flows on) */
	uint64_t bad_timestamps; /* B-scans whose meta.timestamp_ns was off the clock (not used) */
	uint64_t missing_ascans; /* A-scans of published volumes with a non-finite sample (f32),
	                          * reconstructed from their neighbours (docs/algorithms.md §1.0) */
	uint64_t source_gaps;    /* B-scans the source marked VOLREC_SHIM_META_DROPPED_BEFORE (data
	                       * lost before them): acquired, counted as any other */
	uint32_t in_ring, ring_size; /* acquired B-scans held in the ring now / capacity */
};

enum pl_lat { PL_LAT_E2E, PL_LAT_PRE, PL_LAT_REC, PL_LAT_PUB, PL_LAT_N };
extern const char *const pl_lat_names[PL_LAT_N];

struct pl_stats {
	struct pl_counters c;
	double lat_p50[PL_LAT_N], lat_p99[PL_LAT_N]; /* ms; NAN before the first volume */
	bool degraded;   /* source faults since the last complete epoch */
	char fault[256]; /* the last fault's message while degraded (UTF-8) */
	enum pl_acq_state acq_state;
	uint64_t last_epoch; /* epoch of the newest published volume */
};
/*
 * Read the statistics. It also supervises the source: a call into it (acquire(), open() on a
 * reopen, ...) that has not returned its timeout plus one second after it began is reported
 * here, once per call, as a source fault (counted, degraded, event source_fault on the
 * caller's thread); a driver that ignores its timeout is seen by whoever reads the status.
 */
void pl_stats(struct pl_pipeline *pl, struct pl_stats *s);

/* Watchdog marks: progress counters read without the lock. */
struct pl_progress {
	uint64_t proc_epochs; /* epochs processing finished (published or dropped) */
	uint64_t acq_returns; /* source calls that returned, back-off rounds done */
	bool proc_waiting;    /* processing waits for input */
	enum pl_acq_state acq_state;
};
void pl_progress(struct pl_pipeline *pl, struct pl_progress *p);

/* ---- what runs --------------------------------------------------------------------------- */

int pl_depth(struct pl_pipeline *pl); /* 1 or 2 */
/* "zero-copy" (references into the source's registered buffers) or "copy" (into the ring). */
const char *pl_acquisition(struct pl_pipeline *pl);
/* What the source said about itself in open(), strings made valid UTF-8 (it may be reopened). */
void pl_source_info(struct pl_pipeline *pl, struct volrec_shim_info *info);
/* Epochs the source holds (replay), 0 = unbounded. */
uint64_t pl_source_epochs(struct pl_pipeline *pl);

#endif
