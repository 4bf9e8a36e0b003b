/* SPDX-License-Identifier: MIT */
/*
 * Private declarations of volrecd (vrd_): command-line options, logging, the shared-memory
 * sink and the adapter over the pipeline engine, and the service loop.
 */
#ifndef VOLREC_DAEMON_INTERNAL_H
#define VOLREC_DAEMON_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <syslog.h>

#include <json-c/json.h>

#include "backend/backend.h"
#include "base/base.h"
#include "config/config.h"
#include "ipc/ipc.h"
#include "pipeline/pipeline.h"

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
/*
 * prio: a syslog priority (LOG_ERR ...); event: VOLREC_EVENT field or NULL. Thread-safe.
 * A macro, so that the journal's CODE_FILE, CODE_LINE and CODE_FUNC name the caller.
 */
#define vrd_log(prio, event, ...)                                                                  \
	vrd_log_at(__FILE__, __LINE__, __func__, (prio), (event), __VA_ARGS__)
void vrd_log_at(const char *file, int line, const char *func, int prio, const char *event,
                const char *fmt, ...) VR_PRINTF(6, 7);

/* ---- file descriptors (vrd_limits.c) ---- */
/* Raise the soft RLIMIT_NOFILE to the hard one and derive the bounds below; at start. */
void vrd_limits_init(void);
/* Control connections at once (at most VRD_CTL_MAX_CLIENTS). */
unsigned vrd_limits_ctl_max(void);
/* Connections each publisher socket keeps at once. */
unsigned vrd_limits_pub_max(uint32_t max_readers);

/* ---- publishing adapter over ipc/ (vrd_pub.c) ---- */
struct vrd_pub;

/* The median depths of the last volume published (background.mode partial_median, docs/algorithms.md
 * §1b; 0 in the other modes). */
struct vrd_median_depths {
	bool have;              /* a volume was published in this session */
	uint64_t epoch;         /* its epoch */
	double mean_per_bscan;  /* depths that took the median, mean over its B-scans */
	uint32_t max_per_bscan; /* and the most in one B-scan */
	uint32_t depths;        /* of the N/2 depths each B-scan has */
};

/* The render's cost control (docs/configuration.md "Render cost"). */
struct vrd_render_state {
	uint32_t configured_every; /* view.render.every, resolved */
	uint32_t every;            /* rendering every Nth volume now */
	double last_ms;            /* the last render's time (measured backends) */
	uint64_t abandoned;        /* parts of renders stopped at the hold limit */
	uint64_t renders;          /* renders completed */
	bool degraded;             /* rendering less often than configured: reason says why */
	bool overrun;              /* the last render was stopped at its hold limit */
	char reason[320];
};

/* Open the ipc writer for cfg's output shape and channels (the volumes of generation carrying
 * cfg's meaning of them) and register its slots with be (which must outlive it). On failure a
 * negative errno and a message in err. */
int vrd_pub_open(const struct vr_config *cfg, uint32_t generation, struct be_backend *be,
                 struct vrd_pub **out, char *err, size_t errlen) VR_MUST_CHECK;
#define VRD_PUB_MAPS 8 /* generations whose channel meaning the sink keeps */
/* What the u8 values of cfg's output.channels mean (docs/protocol.md §2.7), in their order;
 * the entries past the channels zero. */
void vrd_channel_descs(const struct vr_config *cfg,
                       struct volrec_channel_desc d[VOLREC_CHANNELS_MAX]);
/* The volumes of generation (about to be applied: before pl_request_live) carry cfg's meaning
 * of their channels; any thread. */
void vrd_pub_propose(struct vrd_pub *pub, const struct vr_config *cfg, uint32_t generation);
/* unlink_shm: remove the segments (false with ipc.keep_shm). NULL is fine. */
void vrd_pub_close(struct vrd_pub *pub, bool unlink_shm);
/* The shared-memory sink of the pipeline: volumes into shm slots, announced as `vol`. */
void vrd_pub_sink(struct vrd_pub *pub, struct pl_sink *sink);
struct vrd_rec;
/* Hand every volume published from now on to rec (NULL: none) as well; before the pipeline
 * starts. */
void vrd_pub_record(struct vrd_pub *pub, struct vrd_rec *rec);
/* Apply the live view settings of cfg (view.render.every) to the sink, between volumes. */
void vrd_pub_update(struct vrd_pub *pub, const struct vr_config *cfg);
/* Send JSON on topic "status" or "event"; any thread, never blocks. */
int vrd_pub_send(struct vrd_pub *pub, const char *topic, const char *json);
int vrd_pub_readers(struct vrd_pub *pub);
void vrd_pub_stats(struct vrd_pub *pub, struct ipc_writer_stats *st);
uint64_t vrd_pub_session(struct vrd_pub *pub);
/* The render's cost control now; any thread. */
void vrd_pub_render_state(struct vrd_pub *pub, struct vrd_render_state *rs);
/* The figures of the last volume published; any thread. */
void vrd_pub_median_depths(struct vrd_pub *pub, struct vrd_median_depths *md);

/* ---- the pipeline and its sink (vrd_pipeline.c) ---- */
struct vrd_pipeline;
struct vrd_raw;

/* Build the engine (pipeline/) for cfg with the shared-memory sink and start it, its volumes
 * carrying generation until a live change (vrd_gen.h); the
 * environment switches VOLRECD_PIPELINE_OVERLAP and VOLRECD_ZERO_COPY apply. raw (the
 * service's raw recorder, idle, which outlives the pipeline) is set to cfg's geometry and taps
 * acquisition; rec (its processed recorder, likewise) is set to cfg's volumes and handed every
 * volume published; with record, record.name's recording starts with the first epoch (a
 * failure is announced, event record_failed, and the service runs all the same). On failure
 * nothing is left but the recorders and a message is in err. */
int vrd_pipeline_start(const struct vr_config *cfg, uint32_t generation, struct vrd_raw *raw,
                       struct vrd_rec *rec, bool record, struct vrd_pipeline **out, char *err,
                       size_t errlen) VR_MUST_CHECK;
/* Stop the source, drain what is complete, publish it, end the recordings in progress (status
 * end: why; what they queued written), free everything but the recorders. NULL is fine. */
void vrd_pipeline_stop(struct vrd_pipeline *vp, bool unlink_shm, const char *why);
struct pl_pipeline *vrd_pipeline_engine(struct vrd_pipeline *vp);
/* Sources a stop left inside one of their calls (event source_abandoned) in this process. */
unsigned vrd_pipeline_abandoned(void);
struct vrd_pub *vrd_pipeline_pub(struct vrd_pipeline *vp);
struct vrd_raw *vrd_pipeline_raw(struct vrd_pipeline *vp);

/* ---- what the recorders share (vrd_record.c) ---- */
/* Whether name may name a recording: [A-Za-z0-9_.-], not starting with '.', < CFG_NAME_MAX. */
bool vrd_record_name_ok(const char *name);
/* 0, or -EINVAL with record_start's message in err when name may not name a recording. */
int vrd_record_name_check(const char *name, char *err, size_t errlen);
/* Room for a recording in dir: it is there and keeps min_free_gb free after unit_bytes more.
 * 0 or a negative errno (-ENOSPC: too little room) with record_start's message in err. */
int vrd_record_room(const char *dir, double min_free_gb, uint64_t unit_bytes, char *err,
                    size_t errlen);
/* Whether writing unit_bytes more into the file (fd, else path) would leave less than
 * min_free_gb free (0: no limit); the message then in msg. */
bool vrd_record_too_full(int fd, const char *path, double min_free_gb, uint64_t unit_bytes,
                         char *msg, size_t len);
#define VRD_BUFQ_MAX 64 /* buffers of a recorder's pool at most */
/* A recorder's buffers: free ones on a stack, filled ones in a FIFO queue of their indices.
 * Not locked: the recorder's mutex guards it. */
struct vrd_bufq {
	uint8_t *buf[VRD_BUFQ_MAX];
	int n;                               /* buffers */
	int free_stack[VRD_BUFQ_MAX], nfree; /* free ones */
	int q[VRD_BUFQ_MAX], qhead, qlen;    /* filled ones, oldest at qhead */
};
/* As many buffers of bytes (aligned to align) as budget holds, 2 to VRD_BUFQ_MAX, all free.
 * 0 or -ENOMEM with the message (what: who asks) in err, nothing allocated. */
int vrd_bufq_alloc(struct vrd_bufq *b, uint64_t bytes, uint64_t budget, size_t align,
                   const char *what, char *err, size_t errlen) VR_MUST_CHECK;
void vrd_bufq_free(struct vrd_bufq *b);
/* A free buffer's index, -1 when none is free. */
int vrd_bufq_take(struct vrd_bufq *b);
/* Buffer i back to the free ones (i < 0: nothing). */
void vrd_bufq_give(struct vrd_bufq *b, int i);
/* Queue filled buffer i; take the oldest queued (-1: none). */
void vrd_bufq_push(struct vrd_bufq *b, int i);
int vrd_bufq_pop(struct vrd_bufq *b);
/* Every queued buffer back to the free ones (what is queued is not written). */
void vrd_bufq_drain(struct vrd_bufq *b);

/* A recording's life: started, then finishing (nothing more taken, the queue being written),
 * then finished (the file closed, the thread ready to be joined); status names each. */
enum vrd_record_state {
	VRD_RECORD_IDLE,
	VRD_RECORD_RECORDING,
	VRD_RECORD_FINISHING,
	VRD_RECORD_DONE,
};

/* What both recorders keep of a recording, embedded in each; mu guards it and the recorder's
 * own fields. A unit is what a recorder writes whole: an epoch, a volume. */
struct vrd_record {
	pthread_mutex_t mu;
	pthread_cond_t cv; /* work for the writer thread, the end of a copy (vrd_rec.c) */
	enum vrd_record_state state;
	bool accepting; /* the producer hands units over */
	pthread_t thr;  /* the writer thread */
	bool thr_live;  /* thr is still to be joined */
	struct vrd_bufq b;
	uint64_t limit, accepted, skipped, written, bytes; /* limit: units, 0 none */
	uint64_t until_ns, started_ns, ended_ns;           /* until_ns: the seconds' end, 0 none */
	double min_free;                                   /* record.min_free_gb */
	bool failed;
	char name[CFG_NAME_MAX], path[CFG_PATH_MAX + CFG_NAME_MAX + 8], error[1024];
	char end[64]; /* why it ended (status "end"), "" while it runs */
};

void vrd_record_init(struct vrd_record *c);
void vrd_record_destroy(struct vrd_record *c);
/* Refused (-EBUSY, record_start's message naming what: "raw", "processed") while a recording
 * is in progress or its thread not yet joined; mu not held. */
int vrd_record_idle(struct vrd_record *c, const char *what, char *err, size_t errlen);
/* A new recording name at path, of limit units (0: no limit) or for seconds (0: no limit),
 * counts cleared, in state recording; mu held. */
void vrd_record_begin(struct vrd_record *c, const struct vr_config *cfg, const char *name,
                      const char *path, uint64_t limit, double seconds);
/* Start the writer thread thread_main(arg), then take units; on failure back to idle with
 * record_start's message in err. mu held. */
int vrd_record_spawn(struct vrd_record *c, void *(*thread_main)(void *), void *arg, char *err,
                     size_t errlen);
/* Stop taking units (status end: why, unless it says one); the thread writes what is queued.
 * mu held. */
void vrd_record_finish(struct vrd_record *c, const char *why);
/* Queue filled buffer buf as a unit accepted; at the limit, finish (why: reached). mu held. */
void vrd_record_queue(struct vrd_record *c, int buf, const char *reached);
/* For the writer thread: the oldest queued buffer, waiting for one while recording; -1 when
 * the queue is empty and the recording no longer takes units, or after an error (rc). mu not
 * held; the buffer is the thread's until it gives it back. */
int vrd_record_next(struct vrd_record *c, int rc);
/* A write failed (message err): finish (why), failed, what is queued dropped. A failure after
 * an earlier one keeps the first. mu held. */
void vrd_record_fail(struct vrd_record *c, const char *why, const char *err);
/* The file is closed: the recording is finished; its summary (what: "raw", "processed"; unit:
 * "epochs", "volumes") into msg and the priority returned for the recorder's event
 * record_stopped (sent there, so that the journal names the recorder). mu not held. */
int vrd_record_done(struct vrd_record *c, const char *what, const char *unit, char *msg,
                    size_t len);
/* record_stop: finish, or -ENOENT with the message naming what when none is in progress. */
int vrd_record_stop(struct vrd_record *c, const char *what, char *err, size_t errlen);
/* Join the thread of a recording that finished; whether this caller did. mu not held. */
bool vrd_record_reap(struct vrd_record *c);
/* End a recording in progress (finish, why) and join its thread; mu not held. */
void vrd_record_end(struct vrd_record *c, const char *why);
/* The status object's fields both recorders begin with: state and, unless idle, name, file,
 * the counts of unit ("<unit>_written", "skipped_<unit>"), bytes, seconds and rate_mb_s.
 * Returns the seconds it ran (0 when idle). mu held. */
double vrd_record_status_begin(const struct vrd_record *c, struct json_object *o, const char *unit);
/* The fields they end with, unless idle: failed, error and end. mu held. */
void vrd_record_status_end(const struct vrd_record *c, struct json_object *o);

/* ---- the raw recorder (vrd_raw.c) ---- */
struct vrd_raw;

/* A recorder for cfg's geometry, idle; its tap (vrd_raw_tap) goes into the pipeline's options
 * and the recorder must outlive the pipeline. The service keeps one for its life, so that
 * status still shows a recording a structural reload ended. */
int vrd_raw_open(const struct vr_config *cfg, struct vrd_raw **out, char *err,
                 size_t errlen) VR_MUST_CHECK;
/* Set the geometry of the recordings to come to cfg's; no recording in progress (after
 * vrd_raw_end, before the tap is used again). */
void vrd_raw_configure(struct vrd_raw *r, const struct vr_config *cfg);
void vrd_raw_tap(struct vrd_raw *r, struct pl_tap *tap);
/* Record raw epochs into <cfg->record.dir>/<name>.vrr from the next epoch on: epochs of them
 * (0: until stopped) or for seconds (0: until stopped). Refused (-EBUSY) while one is in
 * progress, (-ENOSPC) when it would leave less than record.min_free_gb, (-EEXIST) when the
 * file exists. */
int vrd_raw_start(struct vrd_raw *r, const struct vr_config *cfg, const char *name, uint64_t epochs,
                  double seconds, char *err, size_t errlen) VR_MUST_CHECK;
/* Stop taking epochs; what is queued is written and the file closed by the recorder's thread.
 * -ENOENT when none is in progress. */
int vrd_raw_stop(struct vrd_raw *r, char *err, size_t errlen);
/* The status's "recording" object (a new reference). */
struct json_object *vrd_raw_status(struct vrd_raw *r);
/* End a recording in progress (status end: why), its queue written and the file closed, once
 * the tap is called no more; what status shows of it stays. */
void vrd_raw_end(struct vrd_raw *r, const char *why);
/* vrd_raw_end ("volrecd stopping") and free r; NULL is fine. */
void vrd_raw_close(struct vrd_raw *r);

/* ---- the processed recorder (vrd_rec.c) ---- */
struct vrd_gens;

/* A recorder of the volumes cfg's pipelines publish, idle; gens (the service's) gives each
 * generation's values to the file, and must outlive it, as must the recorder the pipeline
 * (vrd_pub_record). */
int vrd_rec_open(const struct vr_config *cfg, struct vrd_gens *gens, struct vrd_rec **out,
                 char *err, size_t errlen) VR_MUST_CHECK;
/* The shape and channels of the volumes to come, cfg's; no recording in progress. */
void vrd_rec_configure(struct vrd_rec *r, const struct vr_config *cfg);
/* Record the published volumes into <cfg->record.dir>/<name>.h5 from the next one on: volumes
 * of them (0: until stopped) or for seconds (0: until stopped). Refused (-EBUSY) while one is
 * in progress, (-ENOSPC) when it would leave less than record.min_free_gb, (-EEXIST) when the
 * file exists, (-EINVAL) for a name vrd_record_name_ok refuses. */
int vrd_rec_start(struct vrd_rec *r, const struct vr_config *cfg, const char *name,
                  uint64_t volumes, double seconds, char *err, size_t errlen) VR_MUST_CHECK;
/* The publishing path (processing thread), after publishing the volume of session described
 * by meta (as the slot holds it) whose channels are at data: a copy is queued, or the volume
 * is left out (counted) when no buffer is free. Never waits for the disk. */
void vrd_rec_volume(struct vrd_rec *r, uint64_t session, const struct ipc_volume_meta *meta,
                    const void *data);
/* Stop taking volumes; what is queued is written and the file closed by the recorder's thread.
 * -ENOENT when none is in progress. */
int vrd_rec_stop(struct vrd_rec *r, char *err, size_t errlen);
/* The status's "recording.processed" object (a new reference). */
struct json_object *vrd_rec_status(struct vrd_rec *r);
/* End a recording in progress (status end: why), its queue written and the file closed, once
 * the publishing path hands it volumes no more. */
void vrd_rec_end(struct vrd_rec *r, const char *why);
/* vrd_rec_end ("volrecd stopping") and free r; NULL is fine. */
void vrd_rec_close(struct vrd_rec *r);

/* ---- events and the service (vrd_service.c) ---- */
/* Log and publish an `event` message {"event": name, "instance", "time", "session",
 * "message", the members of extra}; remembered as the status's last event. message may be
 * NULL; extra (a JSON object or NULL) is taken over. Any thread. A macro, as vrd_log is: the
 * journal names the caller. */
#define vrd_event(name, prio, message, extra)                                                      \
	vrd_event_at(__FILE__, __LINE__, __func__, (name), (prio), (message), (extra))
void vrd_event_at(const char *file, int line, const char *func, const char *name, int prio,
                  const char *message, struct json_object *extra);

/*
 * Run the service on cfg (already loaded from config_path, which SIGHUP loads again) until
 * SIGTERM/SIGINT. Returns the process exit status: 0 after a clean stop, 1 when the pipeline
 * could not be built (at start, or neither the new nor the old configuration after a failed
 * structural reload). cfg stays the caller's.
 */
int vrd_service_run(const char *config_path, const struct vr_config *cfg);

#endif
