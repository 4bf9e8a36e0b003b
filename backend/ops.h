/* SPDX-License-Identifier: MIT */
/*
 * The implementation side of the backend interface: the versioned table of functions a
 * backend provides (cpu/, gpu/) and what the selection (backend/open.c) builds a handle from.
 * Only backend/, cpu/, gpu/ and their tests include this header; everyone else uses the
 * wrappers of backend.h.
 *
 * The wrappers (backend/backend.c) enforce the call-order rules of backend.h before calling
 * a table, so an implementation may rely on them:
 *  - bscan_submit: bscan < ny * M (the raw index: position * M + repeat), raw != NULL, all B-scans between two finishes belong to one
 *    epoch, and each is submitted once;
 *  - epoch_finish / epoch_finish_async: out != NULL; all ny B-scans of epoch were submitted
 *    and succeeded, or one of its bscan_submit calls failed (then the call must report that
 *    failure, return an error and leave the backend ready for the next epoch; the wrapper
 *    makes it through epoch_finish with an output that asks for nothing); no epoch in flight
 *    ("all ny B-scans" are all ny * M raw B-scans);
 *  - epoch_wait(e) only for the e of a successful epoch_finish_async, exactly once;
 *  - update_live and reset_history never with an epoch in flight (the wrapper waits for it),
 *    update_live never with a half-submitted epoch.
 *  - create and update_live only with a configuration cfg_check_backend() accepts (the
 *    wrappers check it against the schema first).
 * An implementation checks only what is its own: what the schema cannot know (device
 * limits, what a live update may not change, the sizes its kernels index), its own failures.
 */
#ifndef VOLREC_BACKEND_OPS_H
#define VOLREC_BACKEND_OPS_H

#include "backend/backend.h"

/* The geometry a backend works in, derived from the configuration once (be_geometry_init) for
 * every backend: sizes in samples, bins, A-scans and voxels (docs/algorithms.md §0). */
struct be_geometry {
	uint32_t K;                  /* samples per A-scan */
	uint32_t N;                  /* FFT length: K * preprocess.zero_pad */
	uint32_t nh;                 /* N / 2: the depth bins of a transform */
	uint32_t nx, ny;             /* A-scans per B-scan, B-scan positions per epoch */
	uint32_t M, nraw;            /* repeats of each position; raw B-scans an epoch, ny * M:
	                              * raw B-scan r is repeat r % M of position r / M */
	uint32_t z0, nz;             /* the first output depth bin, the output depths */
	uint32_t sx, sy, S;          /* the interlacing stride, S = sx * sy epochs a cycle */
	uint32_t X, Y;               /* full-resolution columns and rows: nx * sx, ny * sy */
	enum cfg_sample sample_type; /* of the raw B-scans */
	uint32_t bit_shift;          /* right shift of integer samples (f32: 0) */
	size_t bscan_bytes;          /* one raw B-scan */
	size_t le_count, full_count; /* voxels: low-resolution [ny][nx][nz], full [Y][X][nz] */
	/* output.channels (docs/algorithms.md §5): nch channels ch[0..nch) in the output volume,
	 * [c][Y][X][Z]; chan[CFG_CH_*] the index of a channel there, -1 when not output */
	uint32_t nch;
	enum cfg_channel ch[CFG_CH_COUNT];
	int chan[CFG_CH_COUNT];
};

/* The geometry of cfg, a configuration cfg_check_backend() accepts, into *g. */
void be_geometry_init(struct be_geometry *g, const struct vr_config *cfg);

/* The live scalars a backend reads, derived from the configuration once (be_live_init) for
 * every backend, named as the configuration keys they come from (docs/algorithms.md). A
 * backend keeps no other copy of these values; a kernel's argument structure is filled from
 * this one in one place. */
struct be_live {
	enum cfg_background background; /* preprocess.background.mode */
	double pm_threshold;            /* preprocess.background.threshold: t of partial_median */
	enum cfg_resample resample;     /* preprocess.resample.method */
	bool dispersion;                /* preprocess.dispersion.kind is not none: complex FFT */
	float db_lo, db_inv;            /* db_range: lo, 1 / (hi - lo) */
	bool flip_x, flip_z;            /* preprocess.flip */
	bool bidirectional;             /* geometry.bidirectional */
	enum cfg_recon_mode mode;       /* reconstruct.mode */
	enum cfg_temporal temporal;     /* reconstruct.temporal */
	enum cfg_combine combine;       /* reconstruct.combine */
	double tau;                     /* reconstruct.tau */
	double tolerance;               /* reconstruct.adaptive.tolerance: kappa */
	uint32_t depth_half_window;     /* reconstruct.adaptive.depth_half_window: h */
	double speckle_tolerance;       /* reconstruct.adaptive.speckle_tolerance: kappa_s */
	bool jump_recovery;             /* reconstruct.adaptive.jump_recovery */
	bool estimate_pose;             /* reconstruct.compensated.estimate_pose */
	/* functional.* (docs/algorithms.md §5) */
	enum cfg_angio_method angio_method; /* functional.angio.method */
	float angio_lo, angio_inv;          /* functional.angio.range: lo, 1 / (hi - lo) */
	uint32_t fn_half_window;            /* functional.axial_half_window: h */
	float mask_db;                      /* functional.mask_db (or its default) */
	enum cfg_doppler_axis doppler_axis; /* functional.doppler.axis (or its default) */
	bool doppler_bulk;                  /* functional.doppler.bulk */
	float g[4]; /* spatial weight of a neighbour at squared distance d = 0..3 (be_spatial_weight
	               of reconstruct.spatial_sigma) */
};

/* The live scalars of cfg, a configuration cfg_check_backend() accepts, into *l. */
void be_live_init(struct be_live *l, const struct vr_config *cfg);

/* Whether B-scan b runs against x: flip.x, reversed again on odd B-scans when bidirectional. */
static inline bool be_live_reversed(const struct be_live *l, uint32_t b)
{
	return l->flip_x != (l->bidirectional && (b & 1u));
}
/* Whether cfg has geometry g: false when a live update would change a size (the geometry,
 * zero_pad, the sample type or the bit shift), which needs a rebuild. */
bool be_geometry_same(const struct be_geometry *g, const struct vr_config *cfg);

/* The version of struct be_ops this volrec speaks. A member added later is read only from a
 * table whose version is at least the version that added it. */
#define BE_OPS_VERSION 1u

struct be_ops {
	uint32_t version; /* BE_OPS_VERSION the table was written against */
	const char *name; /* "cpu", "cuda": messages say "<name> backend: ..." */
	unsigned caps;    /* BE_CAP_*: ASYNC needs the async pair, REGISTER host_(un)register */

	/* Build everything for this config (plans, tables, device memory).
	 * \return 0 and *state, or a negative errno with a message naming what failed in err. */
	int (*create)(const struct vr_config *cfg, void **state, char *err, size_t errlen);
	void (*destroy)(void *state);
	/* \return the device description (valid until destroy). */
	const char *(*device)(void *state);
	/* \return 0 and *ptr, or -ENOMEM; free accepts NULL. */
	int (*host_alloc)(void *state, size_t size, void **ptr);
	void (*host_free)(void *state, void *ptr);
	/* BE_CAP_REGISTER only (NULL otherwise): ptr != NULL and size > 0; flags BE_REG_*.
	 * \return 0 (also when already registered) or a negative errno. */
	int (*host_register)(void *state, void *ptr, size_t size, unsigned flags);
	void (*host_unregister)(void *state, void *ptr);
	/* Queue B-scan b of epoch e (rules above). \return 0 or the backend's failure, whose
	 * message the next epoch_finish reports. */
	int (*bscan_submit)(void *state, uint64_t epoch, uint32_t bscan, const void *raw);
	/* Reconstruct epoch e and write out. \return 0 or a negative errno with err. */
	int (*epoch_finish)(void *state, uint64_t epoch, const struct be_output *out, char *err,
	                    size_t errlen);
	/* Apply live parameters (nothing changes on failure). \return 0, -EINVAL with err. */
	int (*update_live)(void *state, const struct vr_config *cfg, char *err, size_t errlen);
	void (*reset_history)(void *state);
	/* BE_CAP_ASYNC only (NULL otherwise): queue epoch e's work and return; epoch_wait(e)
	 * waits for it. epoch_finish must be exactly epoch_finish_async + epoch_wait.
	 * \return 0 or a negative errno with err (nothing in flight then). */
	int (*epoch_finish_async)(void *state, uint64_t epoch, const struct be_output *out,
	                          char *err, size_t errlen);
	int (*epoch_wait)(void *state, uint64_t epoch, char *err, size_t errlen);
};

extern const struct be_ops be_cpu_ops;
#ifdef VOLREC_HAVE_CUDA
extern const struct be_ops be_cuda_ops;
/* gpu.devices with more than one entry: the volume divided between devices (docs/gpu.md) */
extern const struct be_ops be_cuda_multi_ops;
#endif

/*
 * Create a handle around ops for cfg (what be_open does once it chose). \return 0 and *out,
 * -EPROTO when the table is not one this volrec can drive (version, missing functions), or
 * ops->create's error; messages in err.
 */
VR_MUST_CHECK int be_create(const struct be_ops *ops, const struct vr_config *cfg,
                            struct be_backend **out, char *err, size_t errlen);

/* The implementation's state behind be, for white-box tests of a backend. */
void *be_impl_state(const struct be_backend *be);

#endif
