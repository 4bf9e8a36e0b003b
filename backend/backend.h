/* SPDX-License-Identifier: MIT */
/*
 * The processing backend interface: one table of functions that the CPU reference backend
 * (cpu/) and the CUDA backend (gpu/) both implement, so the daemon, `volrec process` and the
 * benchmarks drive either without knowing which. The numerical contract is docs/algorithms.md.
 *
 * Life of an epoch: be_bscan_submit() once for each of its ny B-scans (any order, each raw
 * buffer stays valid and unchanged until be_epoch_finish() for that epoch returns), then
 * be_epoch_finish() which writes the output volume. One epoch at a time; calls on one backend
 * come from one thread at a time.
 */
#ifndef VOLREC_BACKEND_H
#define VOLREC_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/base.h"
#include "../config/config.h"

struct be_backend;

/* What one finished epoch produces. Any pointer may be NULL when not wanted. */
struct be_output {
	uint8_t *volume; /* u8 output volume [Y][X][Z] (cfg_out_voxels bytes) */
	float *lowres;   /* low-resolution volume L_e [ny][nx][nz], normalized floats */
	float *full;     /* output before quantization [Y][X][Z] (float of volume) */
};

struct be_ops {
	const char *name; /* "cpu" or "cuda" */
	/* Build everything for this config (plans, tables, device memory). On failure returns
	 * a negative errno and writes a message naming what failed into err. */
	int (*create)(const struct vr_config *cfg, void **state, char *err, size_t errlen);
	void (*destroy)(void *state);
	/* Human-readable device description ("CPU: 2 threads, FFTW 3.3.10", "NVIDIA H200 ..."). */
	const char *(*device)(void *state);
	/* Host memory for raw B-scans / output volumes that the backend transfers fastest
	 * (pinned on CUDA). free accepts NULL. */
	int (*host_alloc)(void *state, size_t size, void **ptr);
	void (*host_free)(void *state, void *ptr);
	/* Make caller-owned memory (a shm slot, a shim's buffers) fast for transfers. */
	int (*host_register)(void *state, void *ptr, size_t size);
	void (*host_unregister)(void *state, void *ptr);
	/* Queue B-scan b (0..ny-1) of epoch e; raw is [nx][K] samples of geometry.sample_type. */
	int (*bscan_submit)(void *state, uint64_t epoch, uint32_t bscan, const void *raw);
	/* Finish epoch e: all its B-scans were submitted. Reconstructs and writes out. */
	int (*epoch_finish)(void *state, uint64_t epoch, const struct be_output *out, char *err,
	                    size_t errlen);
	/* Apply live parameters of cfg (non-structural, see cfg_is_structural_change) from the
	 * next epoch on, without reallocation. */
	int (*update_live)(void *state, const struct vr_config *cfg, char *err, size_t errlen);
	/* Forget the reconstruction history (E, cumulative output): as if epoch 0 came next. */
	void (*reset_history)(void *state);

	/*
	 * Optional asynchronous form of epoch_finish (NULL when a backend has none; use the
	 * be_epoch_finish_async/be_epoch_wait wrappers, which fall back to epoch_finish).
	 * epoch_finish_async(e) checks that all ny B-scans of e were submitted, queues the
	 * reconstruction of e and the copies into out, and returns without waiting for them.
	 * epoch_wait(e) then waits until every output of e asked for in out is complete in host
	 * memory (or reports the failure of any of that work). Between the two calls:
	 *  - bscan_submit of the next epoch is allowed (its preprocessing overlaps e's copies);
	 *  - one epoch in flight: epoch_finish_async of another epoch before epoch_wait(e)
	 *    returned is -EBUSY, as is epoch_finish; update_live and reset_history wait for e;
	 *  - the raw buffers of epoch e stay valid and unchanged until epoch_wait(e) returns,
	 *    and the out buffers (and the be_output struct's pointers) until epoch_wait(e)
	 *    returns; they must not be read before that.
	 * epoch_wait must be called exactly once for each epoch_finish_async that returned 0;
	 * when epoch_finish_async fails nothing is in flight. epoch_finish is exactly
	 * epoch_finish_async followed by epoch_wait.
	 */
	int (*epoch_finish_async)(void *state, uint64_t epoch, const struct be_output *out,
	                          char *err, size_t errlen);
	int (*epoch_wait)(void *state, uint64_t epoch, char *err, size_t errlen);
};

extern const struct be_ops be_cpu_ops;
#ifdef VOLREC_HAVE_CUDA
extern const struct be_ops be_cuda_ops;
#endif

struct be_backend {
	const struct be_ops *ops;
	void *state;
	/* be_epoch_finish_async's fallback for backends without the async form: the epoch it
	 * already finished synchronously, for be_epoch_wait to check. */
	bool sync_pending;
	uint64_t sync_epoch;
};

/*
 * Open the backend cfg->backend names. `auto` tries CUDA when built with it and falls back to
 * the CPU, writing why into note (may be NULL) when it does. On failure returns a negative
 * errno and the message in err; *out is written only on success. Free with be_close().
 */
__attribute__((warn_unused_result)) int be_open(const struct vr_config *cfg,
                                                struct be_backend **out, char *note, size_t notelen,
                                                char *err, size_t errlen);
void be_close(struct be_backend *be);

/* The asynchronous epoch interface of be_ops (contract above): ops->epoch_finish_async and
 * ops->epoch_wait when the backend has them, else epoch_finish at once and a wait that only
 * checks the epoch. Messages in err as for epoch_finish. */
__attribute__((warn_unused_result)) int be_epoch_finish_async(struct be_backend *be, uint64_t epoch,
                                                              const struct be_output *out,
                                                              char *err, size_t errlen);
__attribute__((warn_unused_result)) int be_epoch_wait(struct be_backend *be, uint64_t epoch,
                                                      char *err, size_t errlen);

/*
 * Wrappers: every caller goes through these, never through ops-> (STYLE 17). Contracts are
 * those of struct be_ops above; the wrappers enforce the call-order rules once.
 */
/* Capability flags of a backend (be_caps). */
#define BE_CAP_ASYNC    0x1u /* epoch_finish_async/epoch_wait really overlap work */
#define BE_CAP_DEVICE   0x2u /* processes on a device: host memory should be pinned/registered */
#define BE_CAP_REGISTER 0x4u /* host_register makes caller memory faster to transfer */
unsigned be_caps(const struct be_backend *be);
const char *be_name(const struct be_backend *be);
const char *be_device(const struct be_backend *be);
VR_MUST_CHECK int be_host_alloc(struct be_backend *be, size_t size, void **ptr);
void be_host_free(struct be_backend *be, void *ptr);
VR_MUST_CHECK int be_host_register(struct be_backend *be, void *ptr, size_t size);
void be_host_unregister(struct be_backend *be, void *ptr);
VR_MUST_CHECK int be_bscan_submit(struct be_backend *be, uint64_t epoch, uint32_t bscan,
                                  const void *raw);
VR_MUST_CHECK int be_epoch_finish(struct be_backend *be, uint64_t epoch,
                                  const struct be_output *out, char *err, size_t errlen);
VR_MUST_CHECK int be_update_live(struct be_backend *be, const struct vr_config *cfg, char *err,
                                 size_t errlen);
void be_reset_history(struct be_backend *be);

/* Whether this build has the CUDA backend compiled in. */
bool be_have_cuda(void);

#endif
