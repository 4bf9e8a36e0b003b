/* SPDX-License-Identifier: MIT */
/*
 * `volrec reprocess` (docs/cluster.md): a study's raw recordings processed again in chunks of
 * epochs into one OME-Zarr store, each chunk an ordinary `volrec process --frames --into` run
 * on this machine or as a task of a Slurm job array. The plan (reprocess_plan.c) lives in the
 * store's root .zattrs; each chunk's state is a marker file of its own under OUT/.volrec/state
 * (reprocess_task.c); Slurm is driven through its commands (reprocess_slurm.c).
 */
#ifndef VOLREC_TOOLS_REPROCESS_H
#define VOLREC_TOOLS_REPROCESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "formats/fmt.h"

struct json_object;
struct src_rec_frame;

#define RP_KEY "volrec_reprocess" /* the root .zattrs key */

/* One input recording. */
struct rp_rec {
	char *path; /* absolute */
	char *name; /* its file name without .vrr: the image OUT/<name> */
	uint64_t size;
	uint32_t crc;      /* CRC-32C of the whole file */
	uint64_t nframes;  /* recorded epochs: the image's time points */
	double interval_s; /* mean time between frames, NaN when unknown */
};

/* One chunk: frames a..b-1 of recording rec, after w frames of warm-up. */
struct rp_chunk {
	unsigned rec;
	uint64_t a, b, w;
};

struct rp_plan {
	char *out;    /* the store, absolute */
	char *config; /* the configuration file, absolute */
	uint32_t config_crc;
	struct vr_config cfg;  /* loaded (plan_make), not from the store */
	uint64_t chunk_epochs; /* 0: one chunk per recording */
	enum fmt_codec codec;  /* the images' chunks (never FMT_CODEC_DEFAULT) */
	struct rp_rec *recs;
	size_t nrecs;
	struct rp_chunk *chunks;
	size_t nchunks;
	struct json_object *json; /* the plan as stored */
};

/* ---- the plan (reprocess_plan.c) ---- */

/*
 * Check every input (readable recordings, each epoch's CRC-32C, the configuration loads and
 * fits each recording's geometry, distinct names) and make the plan, whose images' chunks are
 * codec's (FMT_CODEC_DEFAULT: zstd). 0, or a negative errno with the message in err (nothing
 * written anywhere).
 */
int rp_plan_make(struct rp_plan *p, const char *config, char *const *recs, size_t nrecs,
                 const char *out, uint64_t chunk_epochs, bool chunk_given, enum fmt_codec codec,
                 char *err, size_t errlen);
/* Read the plan of the store out (its root .zattrs; a plan without a codec, of a volrec before
 * --codec, is zstd's): 0, -ENOENT when there is no store, or a negative errno with the
 * message. */
int rp_plan_load(struct rp_plan *p, const char *out, char *err, size_t errlen);
/* Create the store of p (root .zgroup and .zattrs with the plan, then one image per recording,
 * the state folders). An existing store with the same plan is used as it is (images missing
 * after an interrupted creation are made); with another plan: -EEXIST and what differs. */
int rp_store_create(struct rp_plan *p, bool *existed, char *err, size_t errlen);
void rp_plan_free(struct rp_plan *p);

/* ---- files of the store ---- */

/* OUT/.volrec/WHAT (snprintf's contract). */
void rp_path(const struct rp_plan *p, char *buf, size_t len, const char *fmt, ...) VR_PRINTF(4, 5);
/* Write o into path atomically (a temporary beside it, fsync, rename, fsync of the folder). 0
 * or a negative errno with the message. */
int rp_json_write(const char *path, struct json_object *o, char *err, size_t errlen);
/* The last lines of a file (at most max bytes), malloc'ed; NULL when it cannot be read. */
char *rp_tail(const char *path, size_t max);
/* This host's name. */
const char *rp_host(void);
/* This program's own path (empty when /proc/self/exe cannot be read), to run `process` as a
 * task or name it in a job script. */
const char *rp_self_exe(void);

/* ---- running chunks (reprocess_task.c) ---- */

enum rp_state { RP_PENDING, RP_RUNNING, RP_DONE, RP_FAILED };

struct rp_status {
	enum rp_state state;
	char job[64];               /* Slurm job id (ARRAY_TASK), "" when none */
	char why[256];              /* failed: what happened */
	struct json_object *marker; /* the .done, .run or .failed marker (owned), NULL when none */
};

/* Run chunk k as a task: its marker, the `volrec process` run, its log. An exit status. */
int rp_task(struct rp_plan *p, size_t k);
/* After every chunk: the provenance into the root .zattrs. An exit status (1: a chunk is not
 * done, named). */
int rp_finish(struct rp_plan *p);
/* Whether the store was finished (the provenance written). */
bool rp_finished(const struct rp_plan *p);
/* The state of every chunk (st[nchunks]), with Slurm's view of the jobs when there is one. */
void rp_states(struct rp_plan *p, struct rp_status *st);
void rp_states_free(struct rp_plan *p, struct rp_status *st);
/* Run the chunks not done with n workers here, then finish. An exit status. */
int rp_run_local(struct rp_plan *p, unsigned n);

/* ---- Slurm (reprocess_slurm.c) ---- */

/* Whether cmd is an executable on PATH. */
bool rp_on_path(const char *cmd);
/* Submit the chunks todo[0..n) as one job array (sbatch options opts[0..nopts), array_max:
 * the %N throttle, 0 none) and the finishing job after it. An exit status. */
int rp_submit(struct rp_plan *p, const size_t *todo, size_t n, char *const *opts, size_t nopts,
              unsigned array_max);
/* Slurm's state of each job id of the submissions ("JOB_TASK" -> "RUNNING", ...) as a JSON
 * object (owned by the caller), NULL when squeue cannot tell. */
struct json_object *rp_slurm_queue(struct rp_plan *p);
/* The store's submissions (OUT/.volrec/slurm.json), owned by the caller, NULL when none. */
struct json_object *rp_submissions(const struct rp_plan *p);

#endif
