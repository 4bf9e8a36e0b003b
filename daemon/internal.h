/* SPDX-License-Identifier: MIT */
/*
 * Private declarations of volrecd (vrd_): command-line options, logging, statistics, the
 * publishing adapter, the pipeline threads and the service loop.
 */
#ifndef VOLREC_DAEMON_INTERNAL_H
#define VOLREC_DAEMON_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <syslog.h>

#include "backend/backend.h"
#include "config/config.h"
#include "ipc/ipc.h"
#include "src/source.h"

#define VRD_DEFAULT_CONFIG "/etc/volrec/volrecd.yaml"

struct vrd_options {
	const char *config; /* -c FILE, default VRD_DEFAULT_CONFIG */
	bool check;         /* --check: validate, print the effective config, exit */
};

/* What vrd_options_parse asks main() to do next. */
enum vrd_parse_result {
	VRD_RUN,        /* options in *opt, go on */
	VRD_EXIT_OK,    /* --help or --version was printed: exit 0 */
	VRD_EXIT_USAGE, /* a usage error was printed to stderr: exit 2 */
};

/* Parse volrecd's command line into *opt (prints --help, --version and usage errors). */
enum vrd_parse_result vrd_options_parse(int argc, char **argv, struct vrd_options *opt);

/* ---- logging (vrd_log.c) ---- */
void vrd_log_init(const char *instance, enum cfg_log_level level);
void vrd_log_set_level(enum cfg_log_level level);
void vrd_log_set_instance(const char *instance);
bool vrd_log_to_journal(void);
/*
 * prio: a syslog priority (LOG_ERR ...); event: VOLREC_EVENT field or NULL. Thread-safe.
 * A macro, so that the journal's CODE_FILE, CODE_LINE and CODE_FUNC name the caller.
 */
#define vrd_log(prio, event, ...)                                                                  \
	vrd_log_at(__FILE__, __LINE__, __func__, (prio), (event), __VA_ARGS__)
void vrd_log_at(const char *file, int line, const char *func, int prio, const char *event,
                const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* ---- statistics helpers (vrd_stats.c) ---- */
#define VRD_LAT_SAMPLES 1024 /* latency samples kept per stage (a ring of the most recent) */

struct vrd_lat {
	float ms[VRD_LAT_SAMPLES];
	uint32_t n;    /* samples held */
	uint32_t next; /* where the next one goes */
};

uint64_t vrd_now_ns(void);      /* CLOCK_MONOTONIC */
uint64_t vrd_realtime_ns(void); /* CLOCK_REALTIME */
void vrd_lat_add(struct vrd_lat *lat, double ms);
void vrd_lat_percentiles(const struct vrd_lat *lat, double *p50, double *p99);

struct vrd_json {
	char *buf;
	size_t cap, len;
	bool overflow; /* text was cut: the message must not be sent */
};
void vrd_json_init(struct vrd_json *j, char *buf, size_t cap);
void vrd_json_raw(struct vrd_json *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void vrd_json_str(struct vrd_json *j, const char *s);
void vrd_json_num(struct vrd_json *j, double v);

/* ---- publishing adapter over ipc/ (vrd_pub.c) ---- */
struct vrd_pub;

/* What the processing thread knows about a finished volume. */
struct vrd_vol_meta {
	uint64_t epoch;
	uint32_t ox, oy;
	uint64_t t_first_ns; /* CLOCK_REALTIME, first B-scan acquired */
	uint64_t t_last_ns;  /* CLOCK_REALTIME, last B-scan acquired */
	uint64_t latency_ns; /* last B-scan acquired -> volume written (monotonic) */
	uint32_t flags;      /* VOLREC_FLAG_* */
};

/* Open the ipc writer for cfg's output shape and register its slots with be (which must
 * outlive it). On failure a negative errno and a message in err. */
int vrd_pub_open(const struct vr_config *cfg, struct be_backend *be, struct vrd_pub **out,
                 char *err, size_t errlen) __attribute__((warn_unused_result));
/* unlink_shm: remove the segments (false with ipc.keep_shm). NULL is fine. */
void vrd_pub_close(struct vrd_pub *pub, bool unlink_shm);
/* Take the next shm slot to fill; begin/publish/abort from the processing thread only. */
int vrd_pub_begin(struct vrd_pub *pub, uint8_t **volume, char *err, size_t errlen);
int vrd_pub_publish(struct vrd_pub *pub, const struct vrd_vol_meta *meta, char *err, size_t errlen);
void vrd_pub_abort(struct vrd_pub *pub);
/* Send JSON on topic "status" or "event"; any thread, never blocks. */
int vrd_pub_send(struct vrd_pub *pub, const char *topic, const char *json);
int vrd_pub_readers(struct vrd_pub *pub);
void vrd_pub_stats(struct vrd_pub *pub, struct ipc_writer_stats *st);
uint64_t vrd_pub_session(struct vrd_pub *pub);

/* ---- the pipeline (vrd_pipeline.c) ---- */
enum vrd_drop {
	VRD_DROP_RING_FULL, /* acquired, no room in the ring: the rest of the epoch dropped */
	VRD_DROP_INCOMPLETE_EPOCH, /* acquired, but its epoch was cut short (source fault, stop) */
	VRD_DROP_PROCESSING_ERROR, /* acquired, but the backend or the writer failed on its epoch */
	VRD_DROP_SOURCE_ERROR,     /* acquire() failed: a B-scan never acquired */
	VRD_DROP_SOURCE_TIMEOUT,   /* acquire() timed out: a B-scan never acquired */
	VRD_DROP_COUNT,
};
extern const char *const vrd_drop_names[VRD_DROP_COUNT];

enum vrd_acq_state {
	VRD_ACQ_IDLE,      /* not started yet, or stopped */
	VRD_ACQ_ACQUIRING, /* inside the source (set_scan_offset, start, acquire, reopen) */
	VRD_ACQ_WAIT_ROOM, /* overflow block: waiting for processing to free the ring */
	VRD_ACQ_BACKOFF,   /* sleeping after a source fault before retrying */
	VRD_ACQ_ENDED,     /* replay file ended (loop: false): nothing more to acquire */
};

struct vrd_entry {
	void *buf;        /* copying path: this entry's B-scan in the host_alloc'ed ring block */
	const void *data; /* the B-scan handed to the backend: buf, or (zero-copy) a reference
	                   * into the source's own memory, released with release_ref() */
	bool ref;         /* data is a reference not yet released */
	uint64_t epoch;   /* epoch and B-scan index it holds */
	uint32_t bscan;
	uint64_t t_mono_ns; /* when acquire() returned it (CLOCK_MONOTONIC) */
	uint64_t t_real_ns; /* the source's timestamp (CLOCK_REALTIME) */
};

/* Cumulative counters of one pipeline; read consistently under the pipeline lock, so that
 * acquired == processed + in ring + drops of ring_full, incomplete_epoch, processing_error. */
struct vrd_counters {
	uint64_t acquired;  /* B-scans acquire() delivered */
	uint64_t processed; /* B-scans of published epochs */
	uint64_t drops[VRD_DROP_COUNT];
	uint64_t epochs_started, epochs_published;
	uint64_t source_faults, source_reopens;
	uint32_t ring_used, ring_size; /* B-scans held in the ring now / capacity */
};

/* A consistent copy of what status needs. */
struct vrd_snapshot {
	struct vrd_counters c;
	double lat_p50[4], lat_p99[4]; /* acquire->publish, preprocess, reconstruct, publish (ms) */
	bool degraded;
	char fault[256]; /* last source fault message while degraded */
	enum vrd_acq_state acq_state;
	uint64_t last_epoch; /* epoch of the newest published volume */
};

/* Watchdog progress marks (see docs/operations.md). */
struct vrd_progress {
	uint64_t proc_epochs; /* epochs the processing thread finished (published or failed) */
	uint64_t acq_returns; /* calls into the source that returned, back-off rounds done */
	bool proc_waiting;    /* the processing thread is waiting for a complete epoch */
	enum vrd_acq_state acq_state;
};

struct vrd_pipeline;

/* Build backend, ring, source and publisher for cfg (copied) and start both threads. On
 * failure nothing is left and a message is in err. */
int vrd_pipeline_start(const struct vr_config *cfg, struct vrd_pipeline **out, char *err,
                       size_t errlen) __attribute__((warn_unused_result));
/* Stop the source, drain what is complete, publish it, join the threads, free everything. */
void vrd_pipeline_stop(struct vrd_pipeline *pl, bool unlink_shm);
/* Queue the live parameters of cfg (copied) for the processing thread, applied before its
 * next epoch; *ticket identifies the request for vrd_pipeline_live_done. */
int vrd_pipeline_request_live(struct vrd_pipeline *pl, const struct vr_config *cfg,
                              uint64_t *ticket) __attribute__((warn_unused_result));
/* Whether request `ticket` was applied; then *rc and err are update_live's result. */
bool vrd_pipeline_live_done(struct vrd_pipeline *pl, uint64_t ticket, int *rc, char *err,
                            size_t errlen);
/* Ask for be_ops->reset_history before the next epoch (event history_reset when done). */
void vrd_pipeline_request_reset(struct vrd_pipeline *pl);
void vrd_pipeline_snapshot(struct vrd_pipeline *pl, struct vrd_snapshot *s);
void vrd_pipeline_progress(struct vrd_pipeline *pl, struct vrd_progress *p);
struct vrd_pub *vrd_pipeline_pub(struct vrd_pipeline *pl);
const struct vr_config *vrd_pipeline_config(struct vrd_pipeline *pl);
const char *vrd_pipeline_backend_name(struct vrd_pipeline *pl);
const char *vrd_pipeline_device(struct vrd_pipeline *pl);
/* How B-scans are acquired: "zero-copy" (references into the source's registered buffers,
 * docs/shim.md) or "copy" (acquire() into the ring). Fixed for the pipeline's life. */
const char *vrd_pipeline_acquisition(struct vrd_pipeline *pl);
/* A copy of what the source said about itself in open() (it may be reopened). */
void vrd_pipeline_source_info(struct vrd_pipeline *pl, struct volrec_shim_info *info);

/* ---- events and the service (vrd_service.c) ---- */
/* Log and publish an `event` message {"event": name, "instance", "time", "session",
 * "message", extra_json members}; remembered as the status's last event. message and
 * extra_json may be NULL. Any thread. A macro, as vrd_log is: the journal names the caller. */
#define vrd_event(name, prio, message, extra_json)                                                 \
	vrd_event_at(__FILE__, __LINE__, __func__, (name), (prio), (message), (extra_json))
void vrd_event_at(const char *file, int line, const char *func, const char *name, int prio,
                  const char *message, const char *extra_json);

/*
 * Run the service on cfg (already loaded from config_path, which SIGHUP loads again) until
 * SIGTERM/SIGINT. Returns the process exit status: 0 after a clean stop, 1 when the pipeline
 * could not be built (at start, or neither the new nor the old configuration after a failed
 * structural reload). cfg stays the caller's.
 */
int vrd_service_run(const char *config_path, const struct vr_config *cfg);

#endif
