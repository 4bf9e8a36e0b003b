/* SPDX-License-Identifier: MIT */
/*
 * The processing backend interface: the CPU reference backend (cpu/) and the CUDA backend
 * (gpu/) behind one opaque handle, so that the pipeline, `volrec process` and the benchmarks
 * drive either without knowing which. The numerical contract is docs/algorithms.md; the table
 * the backends implement is backend/ops.h (backend/, cpu/ and gpu/ only).
 *
 * Life of an epoch: be_bscan_submit() once for each of its ny B-scans (any order; each raw
 * buffer stays valid and unchanged until the epoch is finished: be_epoch_finish() returned, or
 * be_epoch_wait() after be_epoch_finish_async()), then be_epoch_finish() or
 * be_epoch_finish_async() + be_epoch_wait(), which write the outputs. The wrappers below enforce
 * the call-order rules for every backend, once:
 *  - B-scan indices are 0..ny-1 and each is submitted once per epoch;
 *  - the B-scans of one epoch are submitted before any of another (-EBUSY otherwise), and
 *    epochs increase (gaps allowed); be_reset_history() starts the numbering afresh;
 *  - an epoch is finished only once all its ny B-scans were submitted, or after a
 *    be_bscan_submit() of it failed in the backend (the finish then reports that failure and
 *    drops the epoch: a caller finishes every epoch it started);
 *  - one epoch in flight: between be_epoch_finish_async(e) and be_epoch_wait(e) the B-scans
 *    of the next epoch may be submitted, but no other epoch finished (-EBUSY);
 *  - be_epoch_wait() exactly once for each be_epoch_finish_async() that returned 0;
 *  - be_update_live() and be_reset_history() apply between epochs: they wait for the epoch in
 *    flight (its be_epoch_wait() still follows and reports its result), and be_update_live()
 *    refuses a half-submitted epoch.
 * A refused call changes nothing. Calls on one backend come from one thread at a time.
 * Messages name the backend ("cpu backend: ...", "cuda backend: ..."): a caller adds context
 * only when it knows more (STYLE 19).
 */
#ifndef VOLREC_BACKEND_H
#define VOLREC_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "config/config.h"
#include "backend/views.h"

/* An open backend (opaque). */
struct be_backend;

/* What one finished epoch produces. Any pointer may be NULL when not wanted. */
/*
 * The render's budget and cost for one volume. A backend that measures its render (the CPU)
 * stops it at deadline_ns (CLOCK_MONOTONIC; 0: none) and keeps its last picture: abandoned.
 * One that does not (a device, whose render is bounded by the sample cap alone) leaves
 * measured false.
 */
struct be_render_report {
	uint64_t deadline_ns; /* in */
	uint64_t ns;          /* out: time spent rendering */
	bool measured;        /* out: ns and abandoned are meaningful */
	bool abandoned;       /* out: the deadline came first; the last picture stays */
};

struct be_output {
	/* u8 output volume [c][Y][X][Z]: the channels of output.channels one after another
	 * (cfg_out_voxels bytes each; docs/algorithms.md §5 step 6) */
	uint8_t *volume;
	float *lowres; /* the structure's low-resolution volume L_e [ny][nx][nz], normalized */
	float *full;   /* output before quantization [c][Y][X][Z] (float of volume) */
	/* The other channels' low-resolution volumes [ny][nx][nz] (when output): angiography's
	 * normalized v, Doppler's phase in radians, in (-pi, pi] */
	float *lowres_angio;
	float *lowres_doppler;
	/* The channels volume and full have room for (0 is taken as 1): an epoch is refused when
	 * output.channels has more, so that a caller that knows the structure alone fails with a
	 * message instead of being written past its buffer. */
	uint32_t channels;
	/* Views (docs/algorithms.md §4; needs volume): the slot's views area (protocol.h), filled with
	 * the pictures in view_mask (bits 1 << BE_VIEW_*) and the header; a render not asked for
	 * carries the backend's last one with the id of the volume it shows. NULL: no views. */
	void *views;
	/* With BE_CAP_CHANNEL_VIEWS and views: the pictures of channels 1.. of volume (protocol.h,
	 * channel views: en-face mean and maximum, B-scan, with the views' parameters), written
	 * where the views area gets the same kinds. NULL: none. */
	void *channel_views;
	uint64_t volume_id; /* this volume's id, recorded in its pictures */
	unsigned view_mask;
	/* When the render is asked for and this is not NULL: its time budget in, what it cost
	 * out (docs/configuration.md "Render cost"). */
	struct be_render_report *render;
	/* [ny]: per B-scan, the depths that took the median (background.mode partial_median,
	 * docs/algorithms.md §1b); all 0 in the other modes. With BE_CAP_DEVICE, host memory from
	 * be_host_alloc or registered with be_host_register is fastest. */
	uint32_t *median_depths;
	/* [ny]: per B-scan, the A-scans treated as missing because a sample is not finite (f32
	 * input, docs/algorithms.md §1.0); all 0 for integer samples. Host memory as
	 * median_depths. */
	uint32_t *missing_ascans;
};

/* Capability flags of a backend (be_caps). */
#define BE_CAP_ASYNC    0x1u /* be_epoch_finish_async really overlaps work with the caller */
#define BE_CAP_DEVICE   0x2u /* processes on a device: host memory should be pinned/registered */
#define BE_CAP_REGISTER 0x4u /* be_host_register makes caller memory faster to transfer */
#define BE_CAP_CHANNEL_VIEWS                                                                       \
	0x8u /* computes be_output.channel_views (the pictures of the channels past the first) */

/* ---- selection (backend/open.c, above cpu/ and gpu/) ----------------------------------------- */

/*
 * Open the backend cfg->backend names: `cpu`, `cuda`, or `auto` (CUDA when built with it and
 * a usable device exists, else the CPU, with the reason in note, which may be NULL).
 * The configuration is checked against the schema first (cfg_check_backend).
 * \return 0 and *out (free with be_close), -ENOTSUP for `cuda` in a build without CUDA,
 * the schema's error (-EINVAL, -ERANGE ...: "key: what is wrong", as for a loaded file), or
 * the backend's (-EINVAL beyond what the backend can do, -ENODEV no device, -ENOMEM ...) with
 * the message in err; *out is written only on success.
 */
VR_MUST_CHECK int be_open(const struct vr_config *cfg, struct be_backend **out, char *note,
                          size_t notelen, char *err, size_t errlen);
/* Close be (NULL is allowed), waiting for an epoch still in flight. */
void be_close(struct be_backend *be);
/* Number of CUDA devices (0 when none, no driver, or a build without CUDA). */
int be_cuda_devices(void);

/* Copy bandwidths between host and device (the physical limits benchmarks compare with). */
struct be_bandwidth {
	double h2d_gbs;     /* pinned host -> device, GB/s (1e9 bytes) */
	double d2h_gbs;     /* device -> pinned host */
	double bidir_gbs;   /* each way, both directions at once (mean of the two) */
	double d2h_shm_gbs; /* device -> registered shm_open + mmap(MAP_SHARED) memory */
	size_t bytes;       /* transfer size per copy */
	bool shm_anonymous; /* /dev/shm too small: MAP_SHARED | MAP_ANONYMOUS instead */
	char device[256];   /* the device's name */
};
/*
 * Measure the copy bandwidths of CUDA device dev with transfers of bytes (best of reps).
 * \return 0, -ENOTSUP in a build without CUDA, -ENODEV without the device, or the CUDA error
 * with the message in err. Frees everything it allocates.
 */
VR_MUST_CHECK int be_cuda_bandwidth(int dev, size_t bytes, int reps, struct be_bandwidth *bw,
                                    char *err, size_t errlen);
/*
 * The links of the distinct CUDA devices devs[0..n) at once: every device copies bytes D2H
 * into its part of one registered host buffer (*d2h_gbs, GB/s of all together), then H2D and
 * D2H at once (*both_gbs, each way, all together): what several links can move into one host,
 * whose memory they share. \return as be_cuda_bandwidth.
 */
VR_MUST_CHECK int be_cuda_links_bandwidth(const int *devs, unsigned n, size_t bytes, int reps,
                                          double *d2h_gbs, double *both_gbs, char *err,
                                          size_t errlen);

/* ---- the wrappers (backend/backend.c): every caller goes through these ----------------------- */

/* \return the BE_CAP_* flags of be. */
unsigned be_caps(const struct be_backend *be);
/* \return "cpu" or "cuda". */
const char *be_name(const struct be_backend *be);
/* \return a human-readable device ("CPU: 2 threads, FFTW 3.3.10", "NVIDIA H200 (...)"). */
const char *be_device(const struct be_backend *be);
/*
 * The message of the last call on be that failed and has no err argument (be_bscan_submit,
 * be_host_alloc, be_host_register); "" when none failed yet.
 */
const char *be_last_error(const struct be_backend *be);

/* Host memory for raw B-scans and outputs that the backend transfers fastest (pinned on
 * CUDA). \return 0 and *ptr, -ENOMEM (message in be_last_error). Free with be_host_free. */
VR_MUST_CHECK int be_host_alloc(struct be_backend *be, size_t size, void **ptr);
/* Free what be_host_alloc gave (NULL is allowed). */
void be_host_free(struct be_backend *be, void *ptr);
#define BE_REG_DEVICE_READS                                                                        \
	0x1u /* the backend only reads it: a source's memory, which may be \
                                    a PROT_READ file mapping */
/* Make caller-owned memory (a shm slot, a source's buffers) fast for transfers; does nothing
 * without BE_CAP_REGISTER. flags: 0 (the backend writes into it) or BE_REG_DEVICE_READS.
 * \return 0, -EINVAL when ptr is NULL or size 0, or the backend's error (message in
 * be_last_error). Undo with be_host_unregister before unmapping. */
VR_MUST_CHECK int be_host_register(struct be_backend *be, void *ptr, size_t size, unsigned flags);
/* Undo be_host_register (NULL is allowed). */
void be_host_unregister(struct be_backend *be, void *ptr);

/*
 * Queue raw B-scan bscan of epoch epoch; raw is [nx][K] samples of geometry.sample_type. With
 * geometry.repeats M, an epoch is ny * M raw B-scans and bscan = position * M + repeat
 * (docs/algorithms.md §5); "ny" below is that count.
 * \return 0, -EINVAL when bscan >= ny, raw is NULL, bscan was already submitted for this
 * epoch or epoch is not after the last finished one, -EBUSY when B-scans of another epoch
 * are submitted and not finished, or the backend's error (the epoch is then failed: its
 * finish reports the details). Message in be_last_error.
 */
VR_MUST_CHECK int be_bscan_submit(struct be_backend *be, uint64_t epoch, uint32_t bscan,
                                  const void *raw);
/*
 * Finish epoch epoch: reconstruct and write the outputs asked for in out, then return.
 * \return 0, -EINVAL when out is NULL or not all ny B-scans of epoch were submitted, -EBUSY
 * while an epoch is in flight, or the backend's error (the epoch is then dropped). Message
 * in err.
 */
VR_MUST_CHECK int be_epoch_finish(struct be_backend *be, uint64_t epoch,
                                  const struct be_output *out, char *err, size_t errlen);
/*
 * Start finishing epoch epoch and return without waiting for its outputs (with BE_CAP_ASYNC;
 * otherwise it finishes at once). out and the buffers it points to, and the epoch's raw
 * buffers, stay untouched by the caller until be_epoch_wait(epoch) returns.
 * \return 0 (be_epoch_wait must follow), or as be_epoch_finish (nothing is in flight then).
 */
VR_MUST_CHECK int be_epoch_finish_async(struct be_backend *be, uint64_t epoch,
                                        const struct be_output *out, char *err, size_t errlen);
/*
 * Wait until every output of the epoch in flight is complete in host memory.
 * \return 0, -EINVAL when epoch is not the epoch in flight (or none is), or the failure of
 * any of its work. Message in err.
 */
VR_MUST_CHECK int be_epoch_wait(struct be_backend *be, uint64_t epoch, char *err, size_t errlen);
/*
 * Apply the live parameters of cfg (non-structural, see cfg_is_structural_change) from the
 * next epoch on, without reallocation; waits for the epoch in flight.
 * \return 0, -EBUSY while an epoch is half submitted, the schema's error when cfg_check_backend
 * refuses cfg, -EINVAL when cfg changes something structural or the backend cannot do it
 * (nothing changed then). Message in err.
 */
VR_MUST_CHECK int be_update_live(struct be_backend *be, const struct vr_config *cfg, char *err,
                                 size_t errlen);
/* Forget the reconstruction history (E, cumulative output) as if epoch 0 came next, and the
 * last epoch number (epochs may start again from 0); waits for the epoch in flight. */
void be_reset_history(struct be_backend *be);

#endif
