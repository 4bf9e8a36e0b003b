/* SPDX-License-Identifier: MIT */
/*
 * The CUDA backend (be_cuda_ops): device selection and memory budget, everything allocated
 * once per configuration, per-B-scan preprocessing on round-robin streams with batched cuFFT
 * plans into one of two L_e buffers, and the asynchronous per-epoch reconstruction on its own
 * streams with slab-wise D2H copies that overlap compute and the next epoch's preprocessing.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <volrec/protocol.h>

#include "backend/jump.h"
#include "backend/ops.h"
#include "backend/tables.h"
#include "base/base.h"
#include "gpu/gpu.h"

#define GPU_MIN_CC_MAJOR 7
#define GPU_SLABS        16 /* reconstruction slabs per epoch (rows of Y), at most */
#define GPU_RSTREAMS     3  /* reconstruction streams: slab k on stream k mod 3 */

struct gpu_stream {
	cudaStream_t s;
	cudaEvent_t ev;
	void *raw;    /* one raw B-scan on the device */
	float *conv;  /* [nx][K] converted A-scans (input of the resampling) */
	float *col;   /* [K] B-scan mean / median spectrum */
	void *fin;    /* FFT input [nx][N] complex (or real for R2C) */
	float2 *fout; /* FFT output [nx][N] complex */
	void *work;   /* cuFFT work area shared by both plans */
	cufftHandle r2c, c2c;
	bool has_r2c, has_c2c;
	struct gpu_pm_buffers pm; /* partial_median scratch */
	/* output.channels other than the structure (NULL otherwise): the spectra of the
	 * position's repeats [M][nx][N/2], the mask [nx][N/2] and the bulk phases [nx][M] */
	float2 *fspec;
	unsigned char *keep;
	float2 *bulk;
};

/* The planes of the channels other than the structure (docs/algorithms.md §5 step 5):
 * angiography's v, Doppler's Re R and Im R. */
enum { GPU_PL_ANGIO, GPU_PL_DRE, GPU_PL_DIM, GPU_FN_PLANES };

struct gpu_state {
	int dev;
	char device[256];
	char name[256]; /* cudaGetDeviceProperties' name */

	/* the part of the volume this state computes (gpu.h; count 1: all of it) */
	struct gpu_part part;
	uint32_t blo, bhi;   /* the B-scans it preprocesses: [blo, bhi) */
	uint8_t *h_render;   /* count > 1: pinned [RENDER_MAX^2], its render of the last epoch */
	bool h_render_valid; /* that epoch asked for a render */
	unsigned long long *h_vacc; /* count > 1: pinned [be_volume_room], its reduced volume's
	                               maxima or sums of the last epoch over its rows */
	uint32_t h_vacc_rows[2];    /* the block rows [yb0, yb1) of it that its rows reach */
	bool h_vacc_valid;          /* that epoch asked for a reduced volume */

	struct be_geometry geo;
	bool have_full; /* full-resolution buffers exist (mode != none, or S == 1) */

	int ns;
	struct gpu_stream *st; /* preprocessing streams */
	/* reconstruction streams: rs[0] waits for the preprocessing, interlaces and sets the
	 * weights, then ev_ready; slabs go round-robin; rev[j] closes epoch's work on rs[j]
	 * and cs[j]. A slab's copy down goes on cs[j], after its kernel (cev[j]): the next
	 * slab's kernel on rs[j] does not wait for that copy, so the kernels finish early and
	 * the copy engine streams the volume while other work (the next compensated epoch's)
	 * has the device */
	cudaStream_t rs[GPU_RSTREAMS], cs[GPU_RSTREAMS];
	cudaEvent_t rev[GPU_RSTREAMS], cev[GPU_RSTREAMS];
	cudaEvent_t ev_ready;
	/* sev[k]: slab k's kernel ran (its copies wait for it); aev[j]: the epoch's last slab on
	 * rs[j] ran (the next epoch's interlace waits for them) */
	cudaEvent_t sev[GPU_SLABS], aev[GPU_RSTREAMS];
	/* the next epoch queued ahead up to its slabs (gpu_queue_ahead) into out8, the last
	 * epoch's volume then in out8b; inflight_full: the epoch in flight copies the float
	 * output */
	bool ahead, inflight_full;
	uint64_t ahead_epoch;
	struct gpu_recon_params ahead_rp;
	uint32_t ahead_slabs;
	float *cpin; /* pinned [S*S + 4]: the weight table and c_g, source of the upload */

	/* tables: host and device */
	struct gpu_tables tab;
	int32_t *d_rs_idx;
	float *d_rs_w, *d_window, *d_dre, *d_dim, *d_ref;
	struct gpu_prep_params prep;

	/* volumes */
	float *le[2]; /* [ny][nx][nz] L_e: le[cur] receives the B-scans being submitted */
	int cur;
	unsigned *counts[2]; /* [ny] partial_median depths per B-scan, beside le[cur] */
	float *P, *Q;        /* [Y][X][Z] B (M or previous output) and this epoch's float output */
	long long *E;        /* [Y][X] */
	float *tmap;         /* [Y][X] */
	float *W;            /* [Y][X][GPU_WCOL] per-column weights of the epoch */
	float *chg;          /* adaptive: [ny][nx] change measure of this epoch's samples */
	float *alpha;        /* adaptive: [Y][X] history weight of each column */
	float *beta;         /* adaptive: [Y][X] weight of each column's own history sample */
	int4 *axy;           /* adaptive: [2][X + Y] interpolation axes of this epoch */
	longlong2 *aoff;     /* adaptive: [2][X + Y] their offsets into L_e (compensated: the
	                      * second half for every other epoch, see mbuf) */
	uint8_t *out8;       /* [Y][X][Z] (or [ny][nx][nz] in mode none) */
	uint8_t *out8b;      /* the same, spare: NULL when memory is short (no queue ahead) */

	/* adaptive, jump recovery (docs/algorithms.md §2b, backend/jump.h), on the device */
	double *jrows;          /* [ny][nz] this epoch's A-scans summed along each row */
	double *jmean;          /* [2][nz] the last epoch's mean A-scan, this epoch's */
	struct be_jump *jstate; /* the decisions' state */
	long long *jsince;      /* this epoch's be_jump_since */

	/* output.channels other than the structure (docs/algorithms.md §5; NULL when a plane is
	 * not output): low-resolution planes beside le[cur], Doppler's phase beside them, B and
	 * the output of each plane [Y][X][Z] as P and Q, and Doppler's v (the output's size) */
	bool fn;
	float *lpl[GPU_FN_PLANES][2];
	float *lph[2];
	float *Ppl[GPU_FN_PLANES], *Qpl[GPU_FN_PLANES];
	float *Dv;

	/* f32: the A-scans with a non-finite sample (docs/algorithms.md §1.0), beside le[cur] */
	unsigned char *miss[2]; /* [ny][nx], x as in L_e: missing */
	unsigned *mcount[2];    /* [ny] of them per B-scan */

	/* compensated (docs/algorithms.md §2c): allocated when the mode is first used */
	struct be_motion *motion;
	uint32_t mslots;
	uint32_t mne, mnref;            /* entries of the output, of the reference */
	float *mhist;                   /* [slots][ny][nx][nz] low-resolution volumes */
	struct be_motion_entry *d_ment; /* [2][slots] entries (h_ment: pinned, [slots]) */
	struct be_motion_entry *h_ment;
	struct be_motion_pick *mpk;        /* [2][Y][X] picks of the output columns (half mbuf) */
	struct be_motion_pick *mpkr;       /* [Y][X] picks of the reference */
	float *d_mob, *h_mob;              /* [Y][X][NB] the reference bands (h_mob: mapped) */
	float *d_mtmp;                     /* [Y][X][NB] scratch of their blur */
	double mblur[BE_MOTION_BLUR_TAPS]; /* its taps (be_motion_blur_taps) */
	int mblur_r;
	bool mref_blurred; /* h_mob was blurred on the device (from the entry bands) */
	float *h_mbe;      /* [ny][nx][NB] the bands of a registration (mapped) */
	double *d_mpart;   /* [GPU_PROF_CHUNKS][nz]: the mean A-scan's partial sums */
	double *h_mprof;   /* [nz] the mean A-scan (mapped) */
	/* the device's pointers to the mapped host buffers: kernels write the small results the
	 * host's estimate waits for straight into host memory, not through the copy engine that
	 * the epoch in flight keeps busy */
	float *dm_be, *dm_ob;
	double *dm_prof;
	float *d_meb;         /* [slots][ny][nx][NB] the entry bands of this epoch */
	bool mref_pending;    /* h_mob holds the last epoch's reference, not yet set */
	bool mref_event;      /* ... at mev_ref (from the entry bands), not at the end */
	const float *mcur;    /* L_e of the epoch whose pose is being estimated */
	cudaStream_t mstream; /* the next epoch's pose estimate while one is in flight */
	cudaStream_t mqs;     /* ... and its device work before the slabs (background) */
	cudaStream_t mcs;     /* the stream of the registration's bands (mstream or rs[0]) */
	cudaEvent_t mev_ref;  /* the reference bands (blurred) written to h_mob */
	bool mpre;            /* the pose of epoch mpre_epoch is estimated (mslot) */
	uint64_t mpre_epoch;
	uint32_t mslot;
	/* the device's work before the slabs of epoch mq_epoch queued ahead on mstream (its end:
	 * mev_pre); its entries and axes in half mbuf of d_ment, axy and aoff, so that the epoch
	 * in flight keeps reading its own */
	bool mqueued;
	uint64_t mq_epoch;
	unsigned mbuf;
	cudaEvent_t mev_pre;
	uint64_t sub_epoch; /* the epoch B-scans are being submitted for, and how many */
	uint32_t sub_n;
	uint8_t *rep_got;     /* M > 1: [ny] repeats of each position submitted for sub_epoch */
	const void **rep_raw; /* M > 1: [nraw] their raw B-scans, queued once all are there */
	char merr[384];       /* a failure of the bands callback */
	size_t lmem_threads;  /* resident threads of the device (local memory) */

	/* views (gpu_views.cu): computed on vs once every slab's kernel ran (kev), copied down
	 * into the slot's views area; vev closes them for epoch_wait */
	bool views;
	bool views_valid; /* vp lies inside the volume (a validated configuration's always does) */
	char views_why[256];
	struct be_view_params vp;
	struct be_render_setup vrs;
	uint8_t *d_views; /* [3][cols] enface mean, max, plane, the render (RENDER_MAX^2), then
	                     the reduced volume (be_volume_room) */
	unsigned *d_racc; /* [RENDER_MAX^2] the render's per-pixel maxima (gpu_views.cu) */
	unsigned long long *d_vacc; /* [be_volume_room] the reduced volume's maxima or sums */
	cudaStream_t vs;
	cudaEvent_t kev[GPU_RSTREAMS], vev;
	struct be_view_params last_rp; /* the render in d_views: its parameters and volume */
	uint64_t last_render_id;
	bool have_render;

	struct be_live live; /* the live scalars (be_live_init) */
	float *ttab;         /* [S][S] temporal weights of live (NULL when S*S > GPU_TTAB_MAX) */

	/* epoch bookkeeping (the call order itself is the wrappers', backend/ops.h) */
	bool have_last;
	uint64_t last; /* last finished epoch */
	uint64_t run;  /* consecutive finished epochs ending at last */

	int sticky; /* a CUDA failure in bscan_submit/reset_history, reported next */
	char sticky_msg[512];
};

/* ---- errors ------------------------------------------------------------------------------- */

static int gpu_errno_of(cudaError_t e)
{
	switch (e) {
	case cudaSuccess:
		return 0;
	case cudaErrorMemoryAllocation:
		return -ENOMEM;
	case cudaErrorNoDevice:
	case cudaErrorInsufficientDriver:
	case cudaErrorInvalidDevice:
	case cudaErrorDevicesUnavailable:
		return -ENODEV;
	case cudaErrorInvalidValue:
	case cudaErrorInvalidConfiguration:
		return -EINVAL;
	case cudaErrorNoKernelImageForDevice:
	case cudaErrorInvalidDeviceFunction:
		return -ENOEXEC;
	default:
		return -EIO;
	}
}

int gpu_cuda_check(cudaError_t e, const char *what, char *err, size_t errlen)
{
	if (e == cudaSuccess)
		return 0;
	if (err && errlen)
		snprintf(err, errlen, "%s: %s (%s)", what, cudaGetErrorName(e),
		         cudaGetErrorString(e));
	return gpu_errno_of(e);
}

const char *gpu_cufft_name(cufftResult r)
{
	switch (r) {
	case CUFFT_SUCCESS:
		return "CUFFT_SUCCESS";
	case CUFFT_INVALID_PLAN:
		return "CUFFT_INVALID_PLAN";
	case CUFFT_ALLOC_FAILED:
		return "CUFFT_ALLOC_FAILED";
	case CUFFT_INVALID_TYPE:
		return "CUFFT_INVALID_TYPE";
	case CUFFT_INVALID_VALUE:
		return "CUFFT_INVALID_VALUE";
	case CUFFT_INTERNAL_ERROR:
		return "CUFFT_INTERNAL_ERROR";
	case CUFFT_EXEC_FAILED:
		return "CUFFT_EXEC_FAILED";
	case CUFFT_SETUP_FAILED:
		return "CUFFT_SETUP_FAILED";
	case CUFFT_INVALID_SIZE:
		return "CUFFT_INVALID_SIZE";
	case CUFFT_UNALIGNED_DATA:
		return "CUFFT_UNALIGNED_DATA";
	case CUFFT_INVALID_DEVICE:
		return "CUFFT_INVALID_DEVICE";
	case CUFFT_NO_WORKSPACE:
		return "CUFFT_NO_WORKSPACE";
	case CUFFT_NOT_IMPLEMENTED:
		return "CUFFT_NOT_IMPLEMENTED";
	case CUFFT_NOT_SUPPORTED:
		return "CUFFT_NOT_SUPPORTED";
	default:
		return "unknown cuFFT status";
	}
}

int gpu_cufft_check(cufftResult r, const char *what, char *err, size_t errlen)
{
	if (r == CUFFT_SUCCESS)
		return 0;
	if (err && errlen)
		snprintf(err, errlen, "%s: %s (%d)", what, gpu_cufft_name(r), (int)r);
	switch (r) {
	case CUFFT_ALLOC_FAILED:
		return -ENOMEM;
	case CUFFT_INVALID_VALUE:
	case CUFFT_INVALID_SIZE:
	case CUFFT_INVALID_TYPE:
		return -EINVAL;
	case CUFFT_NOT_SUPPORTED:
	case CUFFT_NOT_IMPLEMENTED:
		return -ENOTSUP;
	default:
		return -EIO;
	}
}

/* Shorthands inside functions that have err/errlen and an int rc and an `out` label. */
#define CU(call, what)                                                                             \
	do {                                                                                       \
		rc = gpu_cuda_check((call), (what), err, errlen);                                  \
		if (rc < 0)                                                                        \
			goto out;                                                                  \
	} while (0)
#define CUFFT(call, what)                                                                          \
	do {                                                                                       \
		rc = gpu_cufft_check((call), (what), err, errlen);                                 \
		if (rc < 0)                                                                        \
			goto out;                                                                  \
	} while (0)

static double gpu_gib(size_t b)
{
	return (double)b / (double)(1ull << 30);
}

/* ---- live parameters ---------------------------------------------------------------------- */

/* Reconstruction parameters and tables from cfg (host only). */
static int gpu_recon_live(struct gpu_state *st, const struct vr_config *cfg, char *err,
                          size_t errlen)
{
	if (cfg->reconstruct.mode == CFG_RECON_COMPENSATED && st->part.count > 1) {
		snprintf(
		        err, errlen,
		        "reconstruct.mode: compensated runs on one CUDA device, not over the %u of "
		        "gpu.devices (its pose estimate needs every B-scan of the epoch): use "
		        "gpu.device",
		        st->part.count);
		return -EINVAL;
	}
	if (cfg->reconstruct.mode != CFG_RECON_NONE && !st->have_full) {
		snprintf(err, errlen,
		         "reconstruct.mode: %s needs the full-resolution volumes this backend was "
		         "not built with (mode none, stride %ux%u): needs a rebuild",
		         cfg_recon_mode_name(cfg->reconstruct.mode), st->geo.sx, st->geo.sy);
		return -EINVAL;
	}
	be_live_init(&st->live, cfg);
	if (st->ttab) {
		/* row qe, column phase p: age (qe - p) mod S */
		for (uint32_t q = 0; q < st->geo.S; q++)
			for (uint32_t p = 0; p < st->geo.S; p++) {
				uint64_t age = (q + st->geo.S - p) % st->geo.S;
				st->ttab[(size_t)q * st->geo.S + p] = (float)be_temporal_weight(
				        st->live.temporal, st->geo.S, st->live.tau, (double)age);
			}
	}
	return 0;
}

/* Upload every per-configuration table (st->tab) and set the preprocessing parameters that
 * follow the configuration. The streams must be idle. */
static int gpu_prep_upload(struct gpu_state *st, const struct vr_config *cfg, char *err,
                           size_t errlen)
{
	const size_t kb = sizeof(float) * st->geo.K;
	cudaStream_t s = st->st[0].s;
	int rc = 0;

	CU(cudaMemcpyAsync(st->d_window, st->tab.window, kb, cudaMemcpyHostToDevice, s),
	   "cudaMemcpyAsync(window table)");
	if (st->tab.disp_re) {
		CU(cudaMemcpyAsync(st->d_dre, st->tab.disp_re, kb, cudaMemcpyHostToDevice, s),
		   "cudaMemcpyAsync(dispersion table)");
		CU(cudaMemcpyAsync(st->d_dim, st->tab.disp_im, kb, cudaMemcpyHostToDevice, s),
		   "cudaMemcpyAsync(dispersion table)");
	}
	if (st->tab.reference)
		CU(cudaMemcpyAsync(st->d_ref, st->tab.reference, kb, cudaMemcpyHostToDevice, s),
		   "cudaMemcpyAsync(reference spectrum)");
	if (st->tab.taps) {
		CU(cudaMemcpyAsync(st->d_rs_idx, st->tab.rs_idx, st->geo.K * sizeof(int32_t),
		                   cudaMemcpyHostToDevice, s),
		   "cudaMemcpyAsync(resampling indices)");
		CU(cudaMemcpyAsync(st->d_rs_w, st->tab.rs_w, (size_t)st->tab.taps * kb,
		                   cudaMemcpyHostToDevice, s),
		   "cudaMemcpyAsync(resampling weights)");
	}
	CU(cudaStreamSynchronize(s), "cudaStreamSynchronize(table upload)");
	/* the kernels' arguments from the live scalars (gpu_recon_live set them) */
	st->prep.background = (int)st->live.background;
	st->prep.taps = (int)st->tab.taps;
	st->prep.complex_in = st->live.dispersion;
	st->prep.pm_threshold = st->live.pm_threshold;
	st->prep.db_lo = st->live.db_lo;
	st->prep.db_inv = st->live.db_inv;
	st->prep.flip_z = st->live.flip_z;
out:
	return rc;
}

/* ---- life cycle --------------------------------------------------------------------------- */

/* Stream priorities: the preprocessing of the next epoch's B-scans and its pose estimate
 * (urgent) run ahead of the epoch in flight's reconstruction, whose output the host is not
 * waiting for yet, and that runs ahead of the next compensated epoch's work queued early
 * (background), which only has to be done by the time that epoch is finished. */
enum gpu_prio { GPU_PRIO_URGENT, GPU_PRIO_RECON, GPU_PRIO_BACKGROUND };

static cudaError_t gpu_stream_prio(cudaStream_t *s, enum gpu_prio level)
{
	int least = 0, greatest = 0;
	cudaError_t e = cudaDeviceGetStreamPriorityRange(&least, &greatest);

	if (e != cudaSuccess)
		return e;
	/* a greater priority is a lower number */
	int p = level == GPU_PRIO_URGENT  ? greatest
	        : level == GPU_PRIO_RECON ? (least - 1 > greatest ? least - 1 : least)
	                                  : least;
	return cudaStreamCreateWithPriority(s, cudaStreamNonBlocking, p);
}

/* Device memory of the compensated mode (docs/algorithms.md §2c): the history of BE_MOTION_H
 * epochs per phase, the entries, the picks of the output and of the reference, the bands, the
 * mean A-scan's sums, and the local memory of the picks kernel on every resident thread. */
static size_t gpu_motion_bytes(const struct gpu_state *st)
{
	const size_t slots = BE_MOTION_SLOTS((size_t)st->geo.S),
	             cols = (size_t)st->geo.Y * st->geo.X;
	const size_t nodes = (size_t)st->geo.ny * st->geo.nx;

	return slots * st->geo.le_count * sizeof(float) +
	       2 * slots * sizeof(struct be_motion_entry) +
	       3 * cols * sizeof(struct be_motion_pick) + 2 * cols * BE_MOTION_NB * sizeof(float) +
	       slots * nodes * BE_MOTION_NB * sizeof(float) +
	       GPU_PROF_CHUNKS * (size_t)st->geo.nz * sizeof(double) +
	       st->lmem_threads * GPU_MOTION_LMEM;
}

/* cudaFree of the n device pointers p (NULL is a no-op), cudaFreeHost of the nh host pointers h
 * that are not NULL. */
static void gpu_free_each(void *const *p, size_t n, void *const *h, size_t nh)
{
	for (size_t i = 0; i < n; i++)
		cudaFree(p[i]);
	for (size_t i = 0; i < nh; i++)
		if (h[i])
			cudaFreeHost(h[i]);
}

static void gpu_motion_free(struct gpu_state *st)
{
	if (st->mstream) {
		cudaStreamSynchronize(st->mstream);
		cudaStreamDestroy(st->mstream);
	}
	if (st->mqs) {
		cudaStreamSynchronize(st->mqs);
		cudaStreamDestroy(st->mqs);
	}
	st->mqs = NULL;
	if (st->mev_ref)
		cudaEventDestroy(st->mev_ref);
	if (st->mev_pre)
		cudaEventDestroy(st->mev_pre);
	st->mev_pre = NULL;
	st->mqueued = false;
	st->mstream = NULL;
	st->mev_ref = NULL;
	cudaFree(st->d_meb);
	st->d_meb = NULL;
	st->mpre = false;
	st->mref_event = false;
	be_motion_destroy(st->motion);
	st->motion = NULL;
	void *const dev[] = {st->mhist, st->d_ment, st->mpk,    st->mpkr,
	                     st->d_mob, st->d_mtmp, st->d_mpart};
	void *const host[] = {st->h_ment, st->h_mob, st->h_mbe, st->h_mprof};
	gpu_free_each(dev, VR_ARRAY_SIZE(dev), host, VR_ARRAY_SIZE(host));
	st->d_mtmp = NULL;
	st->mhist = NULL;
	st->d_ment = st->h_ment = NULL;
	st->mpk = st->mpkr = NULL;
	st->d_mob = st->h_mob = st->h_mbe = st->dm_be = st->dm_ob = NULL;
	st->d_mpart = st->h_mprof = st->dm_prof = NULL;
	st->mref_pending = false;
}

static void gpu_destroy(void *vst)
{
	struct gpu_state *st = vst;

	if (!st)
		return;
	cudaSetDevice(st->dev);
	if (st->st) {
		for (int i = 0; i < st->ns; i++)
			if (st->st[i].s)
				cudaStreamSynchronize(st->st[i].s);
		for (int i = 0; i < st->ns; i++) {
			struct gpu_stream *g = &st->st[i];
			if (g->has_r2c)
				cufftDestroy(g->r2c);
			if (g->has_c2c)
				cufftDestroy(g->c2c);
			void *const dev[] = {g->work, g->raw,     g->conv,   g->col,     g->fin,
			                     g->fout, g->pm.part, g->pm.sig, g->pm.list, g->pm.nsel,
			                     g->pm.C, g->fspec,   g->keep,   g->bulk};
			gpu_free_each(dev, VR_ARRAY_SIZE(dev), NULL, 0);
			if (g->ev)
				cudaEventDestroy(g->ev);
			if (g->s)
				cudaStreamDestroy(g->s);
		}
		free(st->st);
	}
	for (int j = 0; j < GPU_RSTREAMS; j++) {
		if (st->rs[j])
			cudaStreamSynchronize(st->rs[j]);
		if (st->cs[j])
			cudaStreamSynchronize(st->cs[j]);
	}
	for (int j = 0; j < GPU_RSTREAMS; j++) {
		if (st->rev[j])
			cudaEventDestroy(st->rev[j]);
		if (st->cev[j])
			cudaEventDestroy(st->cev[j]);
		if (st->aev[j])
			cudaEventDestroy(st->aev[j]);
		if (st->rs[j])
			cudaStreamDestroy(st->rs[j]);
		if (st->cs[j])
			cudaStreamDestroy(st->cs[j]);
	}
	if (st->ev_ready)
		cudaEventDestroy(st->ev_ready);
	if (st->vs)
		cudaStreamSynchronize(st->vs);
	for (int j = 0; j < GPU_RSTREAMS; j++)
		if (st->kev[j])
			cudaEventDestroy(st->kev[j]);
	if (st->vev)
		cudaEventDestroy(st->vev);
	if (st->vs)
		cudaStreamDestroy(st->vs);
	void *const dev[] = {st->d_views,  st->d_racc,    st->d_vacc,    st->d_rs_idx, st->d_rs_w,
	                     st->d_window, st->d_dre,     st->d_dim,     st->d_ref,    st->le[0],
	                     st->le[1],    st->counts[0], st->counts[1], st->P,        st->Q,
	                     st->E,        st->tmap,      st->W,         st->chg,      st->alpha,
	                     st->beta,     st->axy,       st->aoff,      st->out8,     st->out8b,
	                     st->miss[0],  st->miss[1],   st->mcount[0], st->mcount[1]};
	void *const host[] = {st->h_render, st->h_vacc, st->cpin};
	gpu_free_each(dev, VR_ARRAY_SIZE(dev), host, VR_ARRAY_SIZE(host));
	{
		void *const jdev[] = {st->jrows, st->jmean, st->jstate, st->jsince};
		gpu_free_each(jdev, VR_ARRAY_SIZE(jdev), NULL, 0);
	}
	for (int pl = 0; pl < GPU_FN_PLANES; pl++) {
		void *const fdev[] = {st->lpl[pl][0], st->lpl[pl][1], st->Ppl[pl], st->Qpl[pl]};
		gpu_free_each(fdev, VR_ARRAY_SIZE(fdev), NULL, 0);
	}
	{
		void *const fdev[] = {st->lph[0], st->lph[1], st->Dv};
		gpu_free_each(fdev, VR_ARRAY_SIZE(fdev), NULL, 0);
	}
	for (int k = 0; k < GPU_SLABS; k++)
		if (st->sev[k])
			cudaEventDestroy(st->sev[k]);
	gpu_motion_free(st);
	gpu_tables_free(&st->tab);
	free(st->ttab);
	free(st->rep_got);
	free(st->rep_raw);
	free(st);
}

/* Check the geometry limits of this backend (sizes that index kernels as int). */
static int gpu_check_geometry(const struct vr_config *cfg, char *err, size_t errlen)
{
	const uint64_t K = cfg->geometry.samples_per_ascan, zp = cfg->preprocess.zero_pad;
	const uint64_t nx = cfg->geometry.ascans_per_bscan, ny = cfg->geometry.bscans_per_volume;
	const uint64_t sx = cfg->geometry.stride[0], sy = cfg->geometry.stride[1];

	if (K * zp > (1u << 30) || nx > 65535 || nx * sx > 65535u * 128 || ny * sy > (1u << 30) ||
	    nx * K * zp > (1ull << 31)) {
		snprintf(err, errlen,
		         "cuda backend: geometry too large for the kernels (N = %llu, X = %llu, "
		         "Y = %llu)",
		         (unsigned long long)(K * zp), (unsigned long long)(nx * sx),
		         (unsigned long long)(ny * sy));
		return -EINVAL;
	}
	if ((cfg->preprocess.background.mode == CFG_BG_BSCAN_MEDIAN ||
	     cfg->preprocess.background.mode == CFG_BG_PARTIAL_MEDIAN) &&
	    nx > GPU_MEDIAN_MAX_NX) {
		snprintf(err, errlen,
		         "preprocess.background.mode: %s on CUDA supports up to %u A-scans per "
		         "B-scan, not %llu",
		         cfg_background_name(cfg->preprocess.background.mode), GPU_MEDIAN_MAX_NX,
		         (unsigned long long)nx);
		return -EINVAL;
	}
	return 0;
}

/* A cudaEventDisableTiming event into *e, naming it in the message on failure. */
static int gpu_event_new(cudaEvent_t *e, const char *what, char *err, size_t errlen)
{
	return gpu_cuda_check(cudaEventCreateWithFlags(e, cudaEventDisableTiming), what, err,
	                      errlen);
}

/* Allocate n bytes of device memory into *p, naming it in the message on failure. */
static int gpu_malloc(void **p, size_t n, const char *what, char *err, size_t errlen)
{
	char buf[160];
	snprintf(buf, sizeof(buf), "cudaMalloc(%s, %zu bytes)", what, n);
	return gpu_cuda_check(cudaMalloc(p, n ? n : 1), buf, err, errlen);
}

/* A device buffer for gpu_malloc_each: where its pointer goes, its size and its name. */
struct gpu_buf {
	void **p;
	size_t n;
	const char *what;
};

/* gpu_malloc of the n buffers b in order, up to the first failure (whose code it returns). */
static int gpu_malloc_each(const struct gpu_buf *b, size_t n, char *err, size_t errlen)
{
	int rc = 0;

	for (size_t i = 0; rc == 0 && i < n; i++)
		rc = gpu_malloc(b[i].p, b[i].n, b[i].what, err, errlen);
	return rc;
}

/*
 * The backend uses more streams (preprocessing, reconstruction, copies, views, the compensated
 * mode's) than the 8 hardware work queues CUDA gives a context by default; streams that share
 * a queue wait for each other's work (a pose estimate behind a volume's copies). Unless the
 * user set CUDA_DEVICE_MAX_CONNECTIONS, it is raised to 32 (the most) before any CUDA call:
 * at load time, while the process has one thread.
 */
__attribute__((constructor)) static void gpu_connections(void)
{
	setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
}

/* n bytes of pinned host memory mapped into the device's address space: *h for the host, *d
 * for kernels (which write small results there without the copy engines). */
static int gpu_host_mapped(void **h, void **d, size_t n, const char *what, char *err, size_t errlen)
{
	char buf[160];
	int rc;

	snprintf(buf, sizeof(buf), "cudaHostAlloc(%s, %zu bytes, mapped)", what, n);
	rc = gpu_cuda_check(cudaHostAlloc(h, n, cudaHostAllocMapped), buf, err, errlen);
	if (rc == 0) {
		snprintf(buf, sizeof(buf), "cudaHostGetDevicePointer(%s)", what);
		rc = gpu_cuda_check(cudaHostGetDevicePointer(d, *h, 0), buf, err, errlen);
	}
	return rc;
}

/* Allocate the compensated mode's buffers (nothing when they exist), with the device's free
 * memory checked first: -ENOMEM with the size it needs. The device must be current. */
static int gpu_motion_alloc(struct gpu_state *st, char *err, size_t errlen)
{
	const struct be_motion_geom g =
	        be_motion_geom_of(st->geo.nx, st->geo.ny, st->geo.sx, st->geo.sy, st->geo.nz);
	const size_t slots = BE_MOTION_SLOTS((size_t)st->geo.S),
	             cols = (size_t)st->geo.Y * st->geo.X;
	const size_t nodes = (size_t)st->geo.ny * st->geo.nx, need = gpu_motion_bytes(st);
	size_t freeb = 0, totalb = 0;
	int rc;

	if (st->motion)
		return 0;
	rc = gpu_cuda_check(cudaMemGetInfo(&freeb, &totalb), "cudaMemGetInfo", err, errlen);
	if (rc < 0)
		return rc;
	if (need > freeb) {
		snprintf(err, errlen,
		         "reconstruct.mode: compensated on gpu.device %d (%s): its history of %zu "
		         "low-resolution volumes (%ux%ux%u) needs %.2f GiB of device memory, only "
		         "%.2f GiB of %.2f GiB free",
		         st->dev, st->name, slots, st->geo.nx, st->geo.ny, st->geo.nz,
		         gpu_gib(need), gpu_gib(freeb), gpu_gib(totalb));
		return -ENOMEM;
	}
	/* the picks kernel's local memory reserved once for every resident thread: otherwise the
	 * driver grows the reservation at each of its launches and shrinks it after, a
	 * device-wide synchronization each time */
	size_t stack = 0;
	rc = gpu_cuda_check(cudaDeviceGetLimit(&stack, cudaLimitStackSize),
	                    "cudaDeviceGetLimit(stack size)", err, errlen);
	if (rc == 0 && stack < GPU_MOTION_LMEM)
		rc = gpu_cuda_check(cudaDeviceSetLimit(cudaLimitStackSize, GPU_MOTION_LMEM),
		                    "cudaDeviceSetLimit(stack size, compensated picks)", err,
		                    errlen);
	if (rc < 0)
		return rc;
	st->motion = be_motion_create(&g);
	if (!st->motion) {
		snprintf(err, errlen, "cuda backend: out of host memory for the compensated mode");
		return -ENOMEM;
	}
	st->mslots = be_motion_slots(st->motion);
	be_motion_blur_taps(st->mblur, &st->mblur_r);
	const struct gpu_buf bufs[] = {
	        {(void **)&st->mhist, slots * st->geo.le_count * sizeof(float),
	         "compensated history"},
	        {(void **)&st->d_ment, 2 * slots * sizeof(struct be_motion_entry),
	         "compensated entries"},
	        {(void **)&st->mpk, 2 * cols * sizeof(struct be_motion_pick), "kriging picks"},
	        {(void **)&st->mpkr, cols * sizeof(struct be_motion_pick), "reference picks"},
	        {(void **)&st->d_mob, cols * BE_MOTION_NB * sizeof(float), "reference bands"},
	        {(void **)&st->d_mtmp, cols * BE_MOTION_NB * sizeof(float), "reference blur"},
	        {(void **)&st->d_meb, slots * nodes * BE_MOTION_NB * sizeof(float), "entry bands"},
	};
	rc = gpu_malloc_each(bufs, VR_ARRAY_SIZE(bufs), err, errlen);
	if (rc == 0)
		rc = gpu_cuda_check(gpu_stream_prio(&st->mstream, GPU_PRIO_URGENT),
		                    "cudaStreamCreate(pose estimate)", err, errlen);
	if (rc == 0)
		rc = gpu_cuda_check(gpu_stream_prio(&st->mqs, GPU_PRIO_BACKGROUND),
		                    "cudaStreamCreate(compensated epoch ahead)", err, errlen);
	if (rc == 0)
		rc = gpu_event_new(&st->mev_ref, "cudaEventCreate(reference bands)", err, errlen);
	if (rc == 0)
		rc = gpu_event_new(&st->mev_pre, "cudaEventCreate(compensated epoch queued)", err,
		                   errlen);
	if (rc == 0)
		rc = gpu_malloc((void **)&st->d_mpart,
		                GPU_PROF_CHUNKS * (size_t)st->geo.nz * sizeof(double),
		                "mean A-scan sums", err, errlen);
	if (rc == 0) {
		rc = gpu_cuda_check(cudaHostAlloc((void **)&st->h_ment,
		                                  slots * sizeof(struct be_motion_entry),
		                                  cudaHostAllocDefault),
		                    "cudaHostAlloc(compensated entries)", err, errlen);
	}
	if (rc == 0)
		rc = gpu_host_mapped((void **)&st->h_mob, (void **)&st->dm_ob,
		                     cols * BE_MOTION_NB * sizeof(float), "reference bands", err,
		                     errlen);
	if (rc == 0)
		rc = gpu_host_mapped((void **)&st->h_mbe, (void **)&st->dm_be,
		                     nodes * BE_MOTION_NB * sizeof(float), "registration bands",
		                     err, errlen);
	if (rc == 0)
		rc = gpu_host_mapped((void **)&st->h_mprof, (void **)&st->dm_prof,
		                     st->geo.nz * sizeof(double), "mean A-scan", err, errlen);
	/* no slot is read before it is written; zeros keep a stray read harmless */
	if (rc == 0)
		rc = gpu_cuda_check(
		        cudaMemset(st->mhist, 0, slots * st->geo.le_count * sizeof(float)),
		        "cudaMemset(compensated history)", err, errlen);
	if (rc < 0)
		gpu_motion_free(st);
	return rc;
}

/* The B-scans part p needs for its rows and their one-row halo in every mode: the rows above
 * and below it whose history its 3x3x3 kernel reads, the row below that its render
 * interpolates into (and that row's own neighbours), and the low-resolution rows the adaptive
 * mode interpolates for all of them (one more B-scan at each end; two below with stride 1). */
static void gpu_part_range(const struct gpu_part *p, uint32_t ny, uint32_t sy, uint32_t *lo,
                           uint32_t *hi)
{
	const uint32_t below = sy == 1 ? 3 : 2;

	*lo = p->count == 1 || p->b0 == 0 ? 0 : p->b0 - 1;
	*hi = p->count == 1 || ny - p->b1 <= below ? ny : p->b1 + below;
}

/* The device cfg names, usable by volrec: its properties into *prop. */
static int gpu_device_check(const struct vr_config *cfg, struct cudaDeviceProp *prop, char *err,
                            size_t errlen)
{
	int rc, ndev = 0;
	cudaError_t ce = cudaGetDeviceCount(&ndev);

	if (ce != cudaSuccess || ndev == 0) {
		if (ce != cudaSuccess)
			rc = gpu_cuda_check(ce, "cudaGetDeviceCount", err, errlen);
		else
			snprintf(err, errlen, "no CUDA device present");
		return -ENODEV;
	}
	if (cfg->gpu.device >= ndev) { /* the schema keeps it within 0..255 */
		snprintf(err, errlen, "gpu.device: %d, but only %d CUDA device(s) present (0..%d)",
		         cfg->gpu.device, ndev, ndev - 1);
		return -ENODEV;
	}
	rc = gpu_cuda_check(cudaGetDeviceProperties(prop, cfg->gpu.device),
	                    "cudaGetDeviceProperties", err, errlen);
	if (rc < 0)
		return rc;
	if (prop->major < GPU_MIN_CC_MAJOR) {
		snprintf(err, errlen,
		         "gpu.device %d (%s) has compute capability %d.%d; volrec needs %d.0 or "
		         "newer",
		         cfg->gpu.device, prop->name, prop->major, prop->minor, GPU_MIN_CC_MAJOR);
		return -ENODEV;
	}
	return 0;
}

/* The derived geometry of cfg into st. */
static void gpu_geometry(struct gpu_state *st, const struct vr_config *cfg,
                         const struct cudaDeviceProp *prop)
{
	be_geometry_init(&st->geo, cfg);
	st->have_full = cfg->reconstruct.mode != CFG_RECON_NONE || st->geo.S == 1;
	st->fn = st->geo.chan[CFG_CH_ANGIO] >= 0 || st->geo.chan[CFG_CH_DOPPLER] >= 0;
	st->ns = cfg->gpu.streams;
	st->lmem_threads = (size_t)prop->multiProcessorCount * prop->maxThreadsPerMultiProcessor;
	gpu_part_range(&st->part, st->geo.ny, st->geo.sy, &st->blo, &st->bhi);
}

/* The device memory a part needs, and whether the queue ahead fits beside it. */
struct gpu_budget {
	size_t fbytes, half, taps_max, cols;
	size_t per_stream, volumes, view_bytes, motion, need, out8_bytes;
	size_t vol_room; /* elements of the reduced volume at most (be_volume_room) */
	bool ahead_off, spare;
};

static int gpu_budget(struct gpu_state *st, const struct vr_config *cfg,
                      const struct cudaDeviceProp *prop, struct gpu_budget *bu, char *err,
                      size_t errlen)
{
	const int n1[1] = {(int)st->geo.N};
	size_t ws_r2c = 0, ws_c2c = 0, freeb = 0, totalb = 0, tables, pm_bytes, view_scratch;
	uint32_t od[3];
	const char *ahead_env;
	int rc;

	rc = gpu_cufft_check(cufftEstimateMany(1, (int *)n1, NULL, 1, 0, NULL, 1, 0, CUFFT_R2C,
	                                       (int)st->geo.nx, &ws_r2c),
	                     "cufftEstimateMany(R2C)", err, errlen);
	if (rc == 0)
		rc = gpu_cufft_check(cufftEstimateMany(1, (int *)n1, NULL, 1, 0, NULL, 1, 0,
		                                       CUFFT_C2C, (int)st->geo.nx, &ws_c2c),
		                     "cufftEstimateMany(C2C)", err, errlen);
	if (rc < 0)
		return rc;
	bu->fbytes = (size_t)st->geo.nx * st->geo.N * sizeof(float2);
	bu->half = st->geo.N / 2;
	pm_bytes = (4 * GPU_PM_CHUNKS * sizeof(double) + sizeof(float) + sizeof(int) +
	            sizeof(float2)) *
	                   bu->half +
	           sizeof(int);
	bu->per_stream =
	        st->geo.bscan_bytes * (st->geo.sample_type == CFG_SAMPLE_F32 ? st->geo.M : 1) +
	        (size_t)st->geo.nx * st->geo.K * sizeof(float) + st->geo.K * sizeof(float) +
	        2 * bu->fbytes + pm_bytes + (ws_r2c > ws_c2c ? ws_r2c : ws_c2c);
	/* output.channels other than the structure: a position's spectra, mask, bulk phases */
	if (st->fn)
		bu->per_stream +=
		        (size_t)st->geo.nx * bu->half * ((size_t)st->geo.M * sizeof(float2) + 1) +
		        (size_t)st->geo.nx * st->geo.M * sizeof(float2);
	bu->taps_max = 2 * GPU_SPLINE_R + 2;
	tables = (size_t)st->geo.K *
	         (sizeof(int32_t) + bu->taps_max * sizeof(float) + 4 * sizeof(float));
	bu->cols = (size_t)st->geo.Y * st->geo.X;
	bu->volumes =
	        2 * st->geo.le_count * sizeof(float) +
	        (st->have_full
	                 ? 2 * st->geo.full_count * sizeof(float) + st->geo.full_count +
	                           bu->cols * (sizeof(long long) + (2 + GPU_WCOL) * sizeof(float)) +
	                           (size_t)st->geo.ny * st->geo.nx * sizeof(float) +
	                           ((size_t)st->geo.X + st->geo.Y) *
	                                   (sizeof(int4) + sizeof(longlong2)) +
	                           ((size_t)st->geo.ny + 2) * st->geo.nz * sizeof(double)
	                 : st->geo.le_count);
	/* and their planes: low-resolution (two each), B and output, Doppler's phase and v; the
	 * u8 volume holds every channel */
	{
		const size_t out_vox = st->have_full ? st->geo.full_count : st->geo.le_count;
		const size_t np = (st->geo.chan[CFG_CH_ANGIO] >= 0 ? 1 : 0) +
		                  (st->geo.chan[CFG_CH_DOPPLER] >= 0 ? 2 : 0);
		bu->volumes +=
		        np * (2 * st->geo.le_count + (st->have_full ? 2 * st->geo.full_count : 0)) *
		                sizeof(float) +
		        (st->geo.chan[CFG_CH_DOPPLER] >= 0
		                 ? (2 * st->geo.le_count + out_vox) * sizeof(float)
		                 : 0) +
		        (st->geo.nch - 1) * out_vox;
	}
	cfg_out_dims(cfg, od);
	bu->vol_room = be_volume_room(od[0], od[1], od[2]);
	bu->view_bytes = be_views_wanted(cfg)
	                         ? 3 * bu->cols + (size_t)VOLREC_RENDER_MAX * VOLREC_RENDER_MAX +
	                                   bu->vol_room
	                         : 0;
	view_scratch = bu->view_bytes
	                       ? (size_t)VOLREC_RENDER_MAX * VOLREC_RENDER_MAX * sizeof(unsigned) +
	                                 bu->vol_room * sizeof(unsigned long long)
	                       : 0;
	bu->motion = st->live.mode == CFG_RECON_COMPENSATED ? gpu_motion_bytes(st) : 0;
	bu->need = bu->per_stream * st->ns + tables + bu->volumes + bu->view_bytes + view_scratch +
	           bu->motion + (64u << 20); /* + context */
	rc = gpu_cuda_check(cudaMemGetInfo(&freeb, &totalb), "cudaMemGetInfo", err, errlen);
	if (rc < 0)
		return rc;
	bu->out8_bytes = (st->have_full ? st->geo.full_count : st->geo.le_count) * st->geo.nch;
	/* the queue ahead: VOLREC_CUDA_AHEAD=0 turns it off (for comparisons) */
	ahead_env = getenv("VOLREC_CUDA_AHEAD");
	if (ahead_env && strcmp(ahead_env, "0") && strcmp(ahead_env, "1")) {
		snprintf(err, errlen, "cuda backend: VOLREC_CUDA_AHEAD=%.32s: expected 0 or 1",
		         ahead_env);
		return -EINVAL;
	}
	bu->ahead_off = ahead_env && !strcmp(ahead_env, "0");
	bu->spare = bu->need + bu->out8_bytes <= freeb && !bu->ahead_off;
	if (bu->need > freeb) {
		char extra[64] = "";
		if (bu->motion)
			snprintf(extra, sizeof(extra), ", compensated history %.2f GiB",
			         gpu_gib(bu->motion));
		snprintf(err, errlen,
		         "gpu.device %d (%s): this geometry needs %.2f GiB of device memory "
		         "(volumes %.2f GiB, %d streams x %.3f GiB%s), only %.2f GiB of %.2f GiB "
		         "free",
		         st->dev, prop->name, gpu_gib(bu->need), gpu_gib(bu->volumes), st->ns,
		         gpu_gib(bu->per_stream), extra, gpu_gib(freeb), gpu_gib(totalb));
		return -ENOMEM;
	}
	return 0;
}

/* The jump recovery's state as none yet (backend/jump.h); nothing may be in flight. */
static int gpu_jump_reset(struct gpu_state *st, char *err, size_t errlen)
{
	struct be_jump j;

	be_jump_reset(&j);
	return gpu_cuda_check(cudaMemcpy(st->jstate, &j, sizeof(j), cudaMemcpyHostToDevice),
	                      "cudaMemcpy(jump recovery's state)", err, errlen);
}

/* The tables (at their largest, so that a live update never allocates) and the volumes. */
static int gpu_alloc_volumes(struct gpu_state *st, const struct gpu_budget *bu, char *err,
                             size_t errlen)
{
	const size_t cols = bu->cols;
	const struct gpu_buf tabs[] = {
	        {(void **)&st->d_window, st->geo.K * sizeof(float), "window"},
	        {(void **)&st->d_dre, st->geo.K * sizeof(float), "dispersion"},
	        {(void **)&st->d_dim, st->geo.K * sizeof(float), "dispersion"},
	        {(void **)&st->d_ref, st->geo.K * sizeof(float), "reference"},
	        {(void **)&st->d_rs_idx, st->geo.K * sizeof(int32_t), "resample index"},
	        {(void **)&st->d_rs_w, bu->taps_max * st->geo.K * sizeof(float),
	         "resample weights"},
	};
	int rc = gpu_malloc_each(tabs, VR_ARRAY_SIZE(tabs), err, errlen);
	if (rc < 0)
		return rc;

	/* volumes */
	rc = gpu_malloc((void **)&st->le[0], st->geo.le_count * sizeof(float), "L_e", err, errlen);
	if (rc == 0)
		rc = gpu_malloc((void **)&st->le[1], st->geo.le_count * sizeof(float), "second L_e",
		                err, errlen);
	for (int i = 0; rc == 0 && i < 2; i++)
		rc = gpu_malloc((void **)&st->counts[i], st->geo.ny * sizeof(unsigned),
		                "median depth counts", err, errlen);
	if (rc == 0 && st->geo.M > 1) {
		st->rep_got = calloc(st->geo.ny, 1);
		st->rep_raw = calloc(st->geo.nraw, sizeof(*st->rep_raw));
		if (!st->rep_got || !st->rep_raw)
			rc = vr_err(err, errlen, -ENOMEM, "cuda backend: out of memory");
	}
	/* output.channels other than the structure: their planes, zeros at first as L_e, B and
	 * the output */
	for (int pl = 0; rc == 0 && st->fn && pl < GPU_FN_PLANES; pl++) {
		if ((pl == GPU_PL_ANGIO ? st->geo.chan[CFG_CH_ANGIO]
		                        : st->geo.chan[CFG_CH_DOPPLER]) < 0)
			continue;
		const size_t fb = st->geo.full_count * sizeof(float);
		const size_t lb = st->geo.le_count * sizeof(float);
		const struct gpu_buf b[] = {
		        {(void **)&st->lpl[pl][0], lb, "channel L_e"},
		        {(void **)&st->lpl[pl][1], lb, "second channel L_e"},
		        {(void **)&st->Ppl[pl], st->have_full ? fb : 0, "channel B volume"},
		        {(void **)&st->Qpl[pl], st->have_full ? fb : 0, "channel output volume"},
		};
		rc = gpu_malloc_each(b, VR_ARRAY_SIZE(b), err, errlen);
		for (int i = 0; rc == 0 && i < 2; i++)
			rc = gpu_cuda_check(cudaMemset(st->lpl[pl][i], 0, lb),
			                    "cudaMemset(channel L_e)", err, errlen);
		if (rc == 0 && st->have_full)
			rc = gpu_cuda_check(cudaMemset(st->Ppl[pl], 0, fb), "cudaMemset(channel B)",
			                    err, errlen);
		if (rc == 0 && st->have_full)
			rc = gpu_cuda_check(cudaMemset(st->Qpl[pl], 0, fb),
			                    "cudaMemset(channel output)", err, errlen);
	}
	if (rc == 0 && st->geo.chan[CFG_CH_DOPPLER] >= 0) {
		const size_t lb = st->geo.le_count * sizeof(float);
		const struct gpu_buf b[] = {
		        {(void **)&st->lph[0], lb, "Doppler phase"},
		        {(void **)&st->lph[1], lb, "second Doppler phase"},
		        {(void **)&st->Dv,
		         (st->have_full ? st->geo.full_count : st->geo.le_count) * sizeof(float),
		         "Doppler output"},
		};
		rc = gpu_malloc_each(b, VR_ARRAY_SIZE(b), err, errlen);
	}
	for (int i = 0; rc == 0 && i < 2; i++)
		rc = gpu_malloc((void **)&st->miss[i], (size_t)st->geo.ny * st->geo.nx,
		                "missing A-scans", err, errlen);
	for (int i = 0; rc == 0 && i < 2; i++)
		rc = gpu_malloc((void **)&st->mcount[i], st->geo.ny * sizeof(unsigned),
		                "missing A-scan counts", err, errlen);
	if (rc == 0 && st->have_full) {
		const size_t axes = 2 * ((size_t)st->geo.X + st->geo.Y);
		const struct gpu_buf full[] = {
		        {(void **)&st->P, st->geo.full_count * sizeof(float), "B volume"},
		        {(void **)&st->Q, st->geo.full_count * sizeof(float), "output volume"},
		        {(void **)&st->E, cols * sizeof(long long), "E map"},
		        {(void **)&st->tmap, cols * sizeof(float), "weight map"},
		        {(void **)&st->W, cols * GPU_WCOL * sizeof(float), "column weights"},
		        /* the adaptive mode's buffers whatever the mode: a live switch allocates
		         * nothing */
		        {(void **)&st->chg, 2 * (size_t)st->geo.ny * st->geo.nx * sizeof(float),
		         "change measures"},
		        {(void **)&st->alpha, cols * sizeof(float), "history weights"},
		        {(void **)&st->beta, cols * sizeof(float), "history sample weights"},
		        {(void **)&st->axy, axes * sizeof(int4), "interpolation axes"},
		        {(void **)&st->aoff, axes * sizeof(longlong2), "interpolation offsets"},
		        {(void **)&st->jrows, (size_t)st->geo.ny * st->geo.nz * sizeof(double),
		         "jump recovery's row sums"},
		        {(void **)&st->jmean, 2 * (size_t)st->geo.nz * sizeof(double),
		         "jump recovery's mean A-scans"},
		        {(void **)&st->jstate, sizeof(struct be_jump), "jump recovery's state"},
		        {(void **)&st->jsince, sizeof(long long), "jump recovery's epoch"},
		};
		rc = gpu_malloc_each(full, VR_ARRAY_SIZE(full), err, errlen);
	}
	if (rc == 0)
		rc = gpu_malloc((void **)&st->out8, bu->out8_bytes, "u8 volume", err, errlen);
	/* the spare u8 volume of the queue ahead, where memory allows it (be_device says when
	 * it is off) */
	if (rc == 0 && bu->spare &&
	    cudaMalloc((void **)&st->out8b, bu->out8_bytes) != cudaSuccess) {
		cudaGetLastError();
		st->out8b = NULL;
	}
	if (rc == 0 && !st->out8b) {
		const size_t used = strlen(st->device);
		snprintf(st->device + used, sizeof(st->device) - used, ", queue ahead off (%s)",
		         bu->ahead_off ? "VOLREC_CUDA_AHEAD=0" : "no room for a second u8 volume");
	}
	/* a part never receives the B-scans outside [blo, bhi): their rows of L_e stay zero */
	for (int i = 0; rc == 0 && i < 2; i++)
		rc = gpu_cuda_check(cudaMemset(st->le[i], 0, st->geo.le_count * sizeof(float)),
		                    "cudaMemset(L_e)", err, errlen);
	for (int i = 0; rc == 0 && i < 2; i++)
		rc = gpu_cuda_check(cudaMemset(st->counts[i], 0, st->geo.ny * sizeof(unsigned)),
		                    "cudaMemset(median depth counts)", err, errlen);
	/* integer samples are never missing, nor the B-scans a part does not receive */
	for (int i = 0; rc == 0 && i < 2; i++)
		rc = gpu_cuda_check(cudaMemset(st->miss[i], 0, (size_t)st->geo.ny * st->geo.nx),
		                    "cudaMemset(missing A-scans)", err, errlen);
	for (int i = 0; rc == 0 && i < 2; i++)
		rc = gpu_cuda_check(cudaMemset(st->mcount[i], 0, st->geo.ny * sizeof(unsigned)),
		                    "cudaMemset(missing A-scan counts)", err, errlen);
	if (rc < 0)
		return rc;
	if (st->have_full) {
		rc = gpu_cuda_check(cudaMemset(st->E, 0xff, cols * sizeof(long long)),
		                    "cudaMemset(E)", err, errlen);
		if (rc == 0)
			rc = gpu_cuda_check(
			        cudaMemset(st->P, 0, st->geo.full_count * sizeof(float)),
			        "cudaMemset(B)", err, errlen);
		if (rc == 0)
			rc = gpu_cuda_check(
			        cudaMemset(st->Q, 0, st->geo.full_count * sizeof(float)),
			        "cudaMemset(output)", err, errlen);
		if (rc == 0)
			rc = gpu_jump_reset(st, err, errlen);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* Events, the reconstruction and copy streams, the views' buffers and pinned host memory. */
static int gpu_alloc_events_views(struct gpu_state *st, const struct vr_config *cfg,
                                  const struct gpu_budget *bu, char *err, size_t errlen)
{
	int rc;

	rc = gpu_event_new(&st->ev_ready, "cudaEventCreate", err, errlen);
	for (int j = 0; rc == 0 && j < GPU_RSTREAMS; j++) {
		rc = gpu_cuda_check(gpu_stream_prio(&st->rs[j], GPU_PRIO_RECON),
		                    "cudaStreamCreate(reconstruction)", err, errlen);
		if (rc == 0)
			rc = gpu_cuda_check(gpu_stream_prio(&st->cs[j], GPU_PRIO_RECON),
			                    "cudaStreamCreate(volume copies)", err, errlen);
		if (rc == 0)
			rc = gpu_event_new(&st->rev[j], "cudaEventCreate", err, errlen);
		if (rc == 0)
			rc = gpu_event_new(&st->cev[j], "cudaEventCreate", err, errlen);
		if (rc == 0)
			rc = gpu_event_new(&st->aev[j], "cudaEventCreate", err, errlen);
	}
	for (int k = 0; rc == 0 && k < GPU_SLABS; k++)
		rc = gpu_event_new(&st->sev[k], "cudaEventCreate", err, errlen);
	st->views = be_views_wanted(cfg);
	if (rc == 0 && st->views) {
		be_view_params_from_cfg(cfg, &st->vp);
		st->views_valid = be_view_check(&st->vp, st->views_why, sizeof(st->views_why)) == 0;
		be_render_setup(&st->vp, &st->vrs);
	}
	if (rc == 0 && st->views) {
		rc = gpu_malloc((void **)&st->d_views, bu->view_bytes, "views", err, errlen);
		if (rc == 0)
			rc = gpu_malloc((void **)&st->d_racc,
			                (size_t)VOLREC_RENDER_MAX * VOLREC_RENDER_MAX *
			                        sizeof(unsigned),
			                "render scratch", err, errlen);
		if (rc == 0)
			rc = gpu_malloc((void **)&st->d_vacc,
			                bu->vol_room * sizeof(unsigned long long),
			                "reduced volume scratch", err, errlen);
		if (rc == 0)
			rc = gpu_cuda_check(
			        cudaStreamCreateWithFlags(&st->vs, cudaStreamNonBlocking),
			        "cudaStreamCreate(views)", err, errlen);
		if (rc == 0)
			rc = gpu_event_new(&st->vev, "cudaEventCreate", err, errlen);
		for (int j = 0; rc == 0 && j < GPU_RSTREAMS; j++)
			rc = gpu_event_new(&st->kev[j], "cudaEventCreate", err, errlen);
		if (rc == 0 && st->part.count > 1)
			rc = gpu_cuda_check(
			        cudaHostAlloc((void **)&st->h_render,
			                      (size_t)VOLREC_RENDER_MAX * VOLREC_RENDER_MAX,
			                      cudaHostAllocDefault),
			        "cudaHostAlloc(render)", err, errlen);
		if (rc == 0 && st->part.count > 1)
			rc = gpu_cuda_check(cudaHostAlloc((void **)&st->h_vacc,
			                                  bu->vol_room * sizeof(unsigned long long),
			                                  cudaHostAllocDefault),
			                    "cudaHostAlloc(reduced volume)", err, errlen);
	}
	if (rc == 0)
		rc = gpu_cuda_check(cudaHostAlloc((void **)&st->cpin,
		                                  ((st->ttab ? (size_t)st->geo.S * st->geo.S : 0) +
		                                   4) * sizeof(float),
		                                  cudaHostAllocDefault),
		                    "cudaHostAlloc(weight tables)", err, errlen);
	if (rc < 0)
		return rc;
	return 0;
}

/* Each processing stream: its stream, event, buffers and cuFFT plans. */
static int gpu_alloc_streams(struct gpu_state *st, const struct gpu_budget *bu, char *err,
                             size_t errlen)
{
	const int n1[1] = {(int)st->geo.N};
	const size_t fbytes = bu->fbytes, half = bu->half;
	int rc;

	for (int i = 0; i < st->ns; i++) {
		struct gpu_stream *g = &st->st[i];
		size_t w1 = 0, w2 = 0;
		rc = gpu_cuda_check(gpu_stream_prio(&g->s, GPU_PRIO_URGENT), "cudaStreamCreate",
		                    err, errlen);
		if (rc == 0)
			rc = gpu_event_new(&g->ev, "cudaEventCreate", err, errlen);
		const struct gpu_buf bufs[] = {
		        /* f32: every repeat of a position (its missing A-scans are marked over all) */
		        {&g->raw,
		         st->geo.bscan_bytes *
		                 (st->geo.sample_type == CFG_SAMPLE_F32 ? st->geo.M : 1),
		         "raw B-scan"},
		        {(void **)&g->conv, (size_t)st->geo.nx * st->geo.K * sizeof(float),
		         "converted B-scan"},
		        {(void **)&g->col, st->geo.K * sizeof(float), "column spectrum"},
		        {&g->fin, fbytes, "FFT input"},
		        {(void **)&g->fout, fbytes, "FFT output"},
		        {(void **)&g->pm.part, 4 * GPU_PM_CHUNKS * half * sizeof(double),
		         "partial_median sums"},
		        {(void **)&g->pm.sig, half * sizeof(float), "partial_median sigma"},
		        {(void **)&g->pm.list, half * sizeof(int), "partial_median depth list"},
		        {(void **)&g->pm.nsel, sizeof(int), "partial_median count"},
		        {(void **)&g->pm.C, half * sizeof(float2), "partial_median values"},
		        /* output.channels other than the structure (none: 1-byte placeholders, never read) */
		        {(void **)&g->fspec,
		         st->fn ? (size_t)st->geo.M * st->geo.nx * half * sizeof(float2) : 0,
		         "repeats' spectra"},
		        {(void **)&g->keep, st->fn ? (size_t)st->geo.nx * half : 0,
		         "functional mask"},
		        {(void **)&g->bulk,
		         st->fn ? (size_t)st->geo.nx * st->geo.M * sizeof(float2) : 0,
		         "bulk phases"},
		};
		if (rc == 0)
			rc = gpu_malloc_each(bufs, VR_ARRAY_SIZE(bufs), err, errlen);
		if (rc == 0)
			rc = gpu_cufft_check(cufftCreate(&g->r2c), "cufftCreate(R2C)", err, errlen);
		if (rc < 0)
			return rc;
		g->has_r2c = true;
		rc = gpu_cufft_check(cufftCreate(&g->c2c), "cufftCreate(C2C)", err, errlen);
		if (rc < 0)
			return rc;
		g->has_c2c = true;
		rc = gpu_cufft_check(cufftSetAutoAllocation(g->r2c, 0), "cufftSetAutoAllocation",
		                     err, errlen);
		if (rc == 0)
			rc = gpu_cufft_check(cufftSetAutoAllocation(g->c2c, 0),
			                     "cufftSetAutoAllocation", err, errlen);
		if (rc == 0)
			rc = gpu_cufft_check(cufftMakePlanMany(g->r2c, 1, (int *)n1, NULL, 1, 0,
			                                       NULL, 1, 0, CUFFT_R2C,
			                                       (int)st->geo.nx, &w1),
			                     "cufftMakePlanMany(R2C)", err, errlen);
		if (rc == 0)
			rc = gpu_cufft_check(cufftMakePlanMany(g->c2c, 1, (int *)n1, NULL, 1, 0,
			                                       NULL, 1, 0, CUFFT_C2C,
			                                       (int)st->geo.nx, &w2),
			                     "cufftMakePlanMany(C2C)", err, errlen);
		if (rc == 0)
			rc = gpu_malloc(&g->work, w1 > w2 ? w1 : w2, "cuFFT work area", err,
			                errlen);
		if (rc == 0)
			rc = gpu_cufft_check(cufftSetWorkArea(g->r2c, g->work), "cufftSetWorkArea",
			                     err, errlen);
		if (rc == 0)
			rc = gpu_cufft_check(cufftSetWorkArea(g->c2c, g->work), "cufftSetWorkArea",
			                     err, errlen);
		if (rc == 0)
			rc = gpu_cufft_check(cufftSetStream(g->r2c, g->s), "cufftSetStream", err,
			                     errlen);
		if (rc == 0)
			rc = gpu_cufft_check(cufftSetStream(g->c2c, g->s), "cufftSetStream", err,
			                     errlen);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* The preprocessing parameters and live tables on the device, and a first kernel launch (the
 * kernels must exist for this device: CUDA_ARCHS of the build). */
static int gpu_prep_start(struct gpu_state *st, const struct vr_config *cfg, char *err,
                          size_t errlen)
{
	int rc;

	st->prep = (struct gpu_prep_params){
	        .K = (int)st->geo.K,
	        .N = (int)st->geo.N,
	        .nx = (int)st->geo.nx,
	        .sample_type = (int)st->geo.sample_type,
	        .bit_shift = (int)st->geo.bit_shift,
	        .nz = (int)st->geo.nz,
	        .z0 = (int)st->geo.z0,
	        .half = (int)(st->geo.N / 2),
	};
	rc = gpu_prep_upload(st, cfg, err, errlen);
	if (rc < 0)
		return rc;
	rc = gpu_cuda_check(gpu_launch_quantize(st->le[0], st->out8, 1, st->st[0].s),
	                    "a first kernel launch (is this device among the build's CUDA_ARCHS?)",
	                    err, errlen);
	if (rc == 0)
		rc = gpu_cuda_check(cudaStreamSynchronize(st->st[0].s), "cudaStreamSynchronize",
		                    err, errlen);
	if (rc < 0)
		return rc;
	return 0;
}

int gpu_part_create(const struct vr_config *cfg, const struct gpu_part *part,
                    struct gpu_state **out, char *err, size_t errlen)
{
	struct gpu_state *st = NULL;
	struct cudaDeviceProp prop;
	struct gpu_budget bu;
	int rc, drv = 0;

	rc = gpu_check_geometry(cfg, err, errlen);
	if (rc == 0)
		rc = gpu_device_check(cfg, &prop, err, errlen);
	if (rc < 0)
		return rc;
	if (part->count < 1 || part->index >= part->count || part->b0 >= part->b1 ||
	    part->b1 > cfg->geometry.bscans_per_volume) {
		snprintf(err, errlen,
		         "cuda backend: part %u of %u: B-scans [%u, %u) not within [0, %u)",
		         part->index, part->count, part->b0, part->b1,
		         cfg->geometry.bscans_per_volume);
		return -EINVAL;
	}
	st = calloc(1, sizeof(*st));
	if (!st) {
		snprintf(err, errlen, "cuda backend: out of host memory");
		return -ENOMEM;
	}
	st->dev = cfg->gpu.device;
	st->part = *part;
	snprintf(st->name, sizeof(st->name), "%s", prop.name);
	rc = gpu_cuda_check(cudaSetDevice(st->dev), "cudaSetDevice", err, errlen);
	if (rc < 0)
		goto fail;
	cudaDriverGetVersion(&drv);
	snprintf(st->device, sizeof(st->device), "%.200s (sm_%d%d, %.0f GiB, driver %d.%d)",
	         prop.name, prop.major, prop.minor, gpu_gib(prop.totalGlobalMem), drv / 1000,
	         (drv % 1000) / 10);
	gpu_geometry(st, cfg, &prop);
	rc = gpu_tables_build(cfg, &st->tab, err, errlen);
	if (rc < 0)
		goto fail;
	if ((size_t)st->geo.S * st->geo.S <= GPU_TTAB_MAX) {
		st->ttab = calloc((size_t)st->geo.S * st->geo.S, sizeof(float));
		if (!st->ttab) {
			snprintf(err, errlen, "cuda backend: out of host memory");
			rc = -ENOMEM;
			goto fail;
		}
	}
	st->st = calloc((size_t)st->ns, sizeof(*st->st));
	if (!st->st) {
		snprintf(err, errlen, "cuda backend: out of host memory");
		rc = -ENOMEM;
		goto fail;
	}
	rc = gpu_recon_live(st, cfg, err, errlen);
	if (rc < 0)
		goto fail;
	rc = gpu_budget(st, cfg, &prop, &bu, err, errlen);
	if (rc == 0)
		rc = gpu_alloc_volumes(st, &bu, err, errlen);
	if (rc == 0)
		rc = gpu_alloc_events_views(st, cfg, &bu, err, errlen);
	if (rc == 0)
		rc = gpu_alloc_streams(st, &bu, err, errlen);
	if (rc < 0)
		goto fail;
	if (st->live.mode == CFG_RECON_COMPENSATED) {
		rc = gpu_motion_alloc(st, err, errlen);
		if (rc < 0)
			goto fail;
		be_motion_set_estimate(st->motion, st->live.estimate_pose);
	}
	rc = gpu_prep_start(st, cfg, err, errlen);
	if (rc < 0)
		goto fail;
	*out = st;
	return 0;
fail:
	gpu_destroy(st);
	return rc;
}

/* The reconstruction settings the kernels do not implement yet (live: checked again on every
 * update). */
int gpu_recon_supported(const struct vr_config *cfg, char *err, size_t errlen)
{
	if (cfg->reconstruct.mode == CFG_RECON_REGISTERED)
		return vr_err(err, errlen, -ENOTSUP,
		              "cuda backend: reconstruct.mode registered is not available yet (the "
		              "cpu backend computes it; docs/algorithms.md §2d)");
	return 0;
}

/* The one-device backend: its messages name it ("cuda backend: ..."), as the composite's do;
 * the part's texts that do not (CUDA's, the device checks') get the name here. */
static int gpu_create(const struct vr_config *cfg, void **state, char *err, size_t errlen)
{
	static const char own[] = "cuda backend: ";
	const struct gpu_part whole = {0, 1, 0, cfg->geometry.bscans_per_volume};
	struct gpu_state *st;
	char msg[512] = "";
	int rc = gpu_recon_supported(cfg, err, errlen);

	if (rc < 0)
		return rc;
	rc = gpu_part_create(cfg, &whole, &st, msg, sizeof(msg));
	if (rc == 0) {
		*state = st;
		return 0;
	}
	return vr_err(err, errlen, rc, "%s%s", strncmp(msg, own, sizeof(own) - 1) ? own : "", msg);
}

static const char *gpu_device(void *vst)
{
	return ((struct gpu_state *)vst)->device;
}

/* ---- host memory -------------------------------------------------------------------------- */

static int gpu_host_alloc(void *vst, size_t size, void **ptr)
{
	struct gpu_state *st = vst;
	void *p = NULL;

	cudaSetDevice(st->dev);
	cudaError_t e = cudaHostAlloc(&p, size ? size : 1, cudaHostAllocPortable);
	if (e != cudaSuccess)
		return gpu_errno_of(e) == -EIO ? -ENOMEM : gpu_errno_of(e);
	*ptr = p;
	return 0;
}

static void gpu_host_free(void *vst, void *ptr)
{
	(void)vst;
	if (ptr)
		cudaFreeHost(ptr);
}

static int gpu_host_register(void *vst, void *ptr, size_t size, unsigned flags)
{
	struct gpu_state *st = vst;
	unsigned how = cudaHostRegisterPortable;
	int ro = 0;

	if (!ptr || !size)
		return -EINVAL;
	cudaSetDevice(st->dev);
	/* memory the device only reads (a source's, maybe a PROT_READ file mapping, which cannot
	 * be pinned for writing) is pinned for reads where the device can */
	if ((flags & BE_REG_DEVICE_READS) &&
	    cudaDeviceGetAttribute(&ro, cudaDevAttrHostRegisterReadOnlySupported, st->dev) ==
	            cudaSuccess &&
	    ro)
		how |= cudaHostRegisterReadOnly;
	cudaError_t e = cudaHostRegister(ptr, size, how);
	if (e != cudaSuccess)
		cudaGetLastError(); /* not sticky: clear it for the next launch's check */
	return e == cudaErrorHostMemoryAlreadyRegistered ? 0 : gpu_errno_of(e);
}

static void gpu_host_unregister(void *vst, void *ptr)
{
	struct gpu_state *st = vst;

	if (!ptr)
		return;
	cudaSetDevice(st->dev);
	if (cudaHostUnregister(ptr) != cudaSuccess)
		cudaGetLastError();
}

/* ---- per B-scan --------------------------------------------------------------------------- */

static void gpu_set_sticky(struct gpu_state *st, int rc, const char *fmt, ...) VR_PRINTF(3, 4);
static void gpu_set_sticky(struct gpu_state *st, int rc, const char *fmt, ...)
{
	va_list ap;

	if (st->sticky)
		return; /* keep the first */
	st->sticky = rc;
	va_start(ap, fmt);
	vsnprintf(st->sticky_msg, sizeof(st->sticky_msg), fmt, ap);
	va_end(ap);
}

/* The missing A-scans of position b (f32 samples, docs/algorithms.md §1.0; none otherwise): its
 * row of the epoch's mask and its count. */
static struct gpu_miss gpu_miss_of(const struct gpu_state *st, uint32_t b)
{
	const bool f32 = st->geo.sample_type == CFG_SAMPLE_F32;

	return (struct gpu_miss){
	        .row = f32 ? st->miss[st->cur] + (size_t)b * st->geo.nx : NULL,
	        .count = st->mcount[st->cur] + b,
	        .rev = be_live_reversed(&st->live, b),
	};
}

/* Steps 1-5 (and §1b) of repeat m of position b, its raw B-scan already on the device at draw
 * (and, f32, the position's missing A-scans marked), on stream g, into the position's rows of
 * L_e: its log magnitude (M = 1), or its power added (first: set) and, after the last, the log
 * of the mean power; f32: the missing A-scans' columns filled; with channels other than the
 * structure its spectra into g->fspec. */
static int gpu_prep_bscan(struct gpu_state *st, struct gpu_stream *g, uint32_t b, uint32_t m,
                          const void *draw, bool first, bool last, char *err, size_t errlen)
{
	const uint32_t M = st->geo.M;
	const struct gpu_prep_tables t = {
	        .rs_idx = st->d_rs_idx,
	        .rs_w = st->d_rs_w,
	        .window = st->d_window,
	        .disp_re = st->d_dre,
	        .disp_im = st->d_dim,
	        .reference = st->d_ref,
	};
	int rc = 0;

	const bool rev = be_live_reversed(&st->live, b);
	const bool f32 = st->geo.sample_type == CFG_SAMPLE_F32;
	const struct gpu_miss miss = gpu_miss_of(st, b);
	const bool pm = st->prep.background == CFG_BG_PARTIAL_MEDIAN;
	if (st->prep.background == CFG_BG_BSCAN_MEAN ||
	    st->prep.background == CFG_BG_BSCAN_MEDIAN || pm)
		CU(gpu_launch_colstat(&st->prep, draw, &miss, g->col, g->s),
		   "B-scan background kernel");
	CU(gpu_launch_convert(&st->prep, &t, draw, &miss, g->col, g->conv, g->fin, g->s),
	   "convert kernel");
	if (st->prep.taps)
		CU(gpu_launch_resample(&st->prep, &t, g->conv, g->fin, g->s), "resample kernel");
	if (st->prep.complex_in)
		CUFFT(cufftExecC2C(g->c2c, (cufftComplex *)g->fin, (cufftComplex *)g->fout,
		                   CUFFT_FORWARD),
		      "cufftExecC2C");
	else
		CUFFT(cufftExecR2C(g->r2c, (cufftReal *)g->fin, (cufftComplex *)g->fout),
		      "cufftExecR2C");
	const int ld = st->prep.complex_in ? (int)st->geo.N : (int)(st->geo.N / 2 + 1);
	float *lerow = st->le[st->cur] + (size_t)b * st->geo.nx * st->geo.nz;
	if (pm) /* the count of a position: the most over its repeats */
		CU(gpu_launch_partial_median(&st->prep, g->fout, ld, &g->pm, &miss,
		                             st->counts[st->cur] + b, !first, g->s),
		   "partial_median kernels");
	/* channels other than the structure: the repeat's spectra kept (M > 1: and its power
	 * added, in the same kernel) */
	if (st->fn)
		CU(gpu_launch_fn_store(&st->prep, g->fout, ld, rev, pm ? g->pm.C : NULL, (int)m,
		                       g->fspec, M > 1 ? lerow : NULL, first, g->s),
		   "repeats' spectra kernel");
	if (M == 1) {
		CU(gpu_launch_logmag(&st->prep, g->fout, ld, rev, pm ? g->pm.C : NULL, lerow, g->s),
		   "log-magnitude kernel");
		if (f32)
			CU(gpu_launch_fill_missing(&st->prep, &miss, lerow, g->s),
			   "missing A-scan kernel");
		return 0;
	}
	if (!st->fn)
		CU(gpu_launch_power_add(&st->prep, g->fout, ld, rev, pm ? g->pm.C : NULL, first,
		                        lerow, g->s),
		   "repeats' power kernel");
	if (last)
		CU(gpu_launch_logpower(&st->prep, 1.0f / (float)M, lerow, g->s),
		   "log-power kernel");
	if (last && f32)
		CU(gpu_launch_fill_missing(&st->prep, &miss, lerow, g->s), "missing A-scan kernel");
out:
	return rc;
}

/* docs/algorithms.md §5 for position b, once its repeats' spectra are in g->fspec: the mask,
 * angiography and Doppler into the position's rows of the planes (cpu/preprocess.c
 * functional_position), the missing A-scans' columns filled (f32), Doppler's phase. */
static int gpu_prep_functional(struct gpu_state *st, struct gpu_stream *g, uint32_t b, char *err,
                               size_t errlen)
{
	const struct be_live *l = &st->live;
	const size_t row = (size_t)b * st->geo.nx * st->geo.nz, n = (size_t)st->geo.nx * st->geo.nz;
	const int c = st->cur;
	const struct gpu_fn_params f = {
	        .M = (int)st->geo.M,
	        .nx = (int)st->geo.nx,
	        .nh = (int)st->geo.nh,
	        .nz = (int)st->geo.nz,
	        .z0 = (int)st->geo.z0,
	        .flip_z = l->flip_z,
	        .rev = be_live_reversed(l, b),
	        .fn_half_window = (int)l->fn_half_window,
	        .mask_db = l->mask_db,
	        .angio = st->lpl[GPU_PL_ANGIO][c] != NULL,
	        .angio_svar = l->angio_method == CFG_ANGIO_SVAR,
	        .angio_lo = l->angio_lo,
	        .angio_inv = l->angio_inv,
	        .doppler = st->lpl[GPU_PL_DRE][c] != NULL,
	        .doppler_ascan = l->doppler_axis == CFG_DOPPLER_ASCAN,
	        .doppler_bulk = l->doppler_bulk,
	};
	float *la = f.angio ? st->lpl[GPU_PL_ANGIO][c] + row : NULL;
	float *lre = f.doppler ? st->lpl[GPU_PL_DRE][c] + row : NULL;
	float *lim = f.doppler ? st->lpl[GPU_PL_DIM][c] + row : NULL;
	int rc = 0;

	const bool f32 = st->geo.sample_type == CFG_SAMPLE_F32;
	/* Doppler's phase with its values, or (f32) once the missing columns are filled */
	CU(gpu_launch_functional(&f, g->fspec, g->keep, g->bulk, la, lre, lim,
	                         f.doppler && !f32 ? st->lph[c] + row : NULL, g->s),
	   "angiography and Doppler kernels");
	if (f32) {
		const struct gpu_miss miss = gpu_miss_of(st, b);
		float *planes[3] = {la, lre, lim};
		for (int q = 0; q < 3; q++)
			if (planes[q])
				CU(gpu_launch_fill_missing(&st->prep, &miss, planes[q], g->s),
				   "missing A-scan kernel (channels)");
	}
	if (f.doppler && f32)
		CU(gpu_launch_fn_phase(lre, lim, st->lph[c] + row, n, g->s),
		   "Doppler phase kernel");
out:
	return rc;
}

static int gpu_bscan_submit(void *vst, uint64_t epoch, uint32_t bscan, const void *raw)
{
	struct gpu_state *st = vst;
	char err[384];
	const size_t errlen = sizeof(err);
	int rc;

	if (st->sticky)
		return st->sticky;
	rc = gpu_cuda_check(cudaSetDevice(st->dev), "cudaSetDevice", err, errlen);
	if (rc < 0)
		goto out;

	/* raw B-scan bscan is repeat bscan % M of position b (docs/algorithms.md §5): the repeats
	 * of a position, in whatever order they come, are queued once all are there (their raw
	 * buffers stay valid until the epoch is finished, backend.h), in the order m = 0, 1, ...
	 * on one stream, which sums their power into the position's row of L_e as the CPU does */
	const uint32_t M = st->geo.M, b = bscan / M;
	if (st->sub_n == 0 || st->sub_epoch != epoch) {
		st->sub_epoch = epoch;
		st->sub_n = 0;
		if (M > 1)
			memset(st->rep_got, 0, st->geo.ny);
	}
	st->sub_n++;
	struct gpu_stream *g = &st->st[b % (uint32_t)st->ns];
	if (M > 1) {
		st->rep_raw[bscan] = raw;
		if (++st->rep_got[b] < M)
			return 0;
	}
	/* f32 (docs/algorithms.md §1.0): an A-scan with a non-finite sample in any repeat is
	 * missing in all, so every repeat is on the device (g->raw holds M of them) and marked
	 * before any is processed; otherwise one raw buffer serves the repeats in turn */
	const bool f32 = st->geo.sample_type == CFG_SAMPLE_F32;
	const size_t bb = st->geo.bscan_bytes;
	const struct gpu_miss miss = gpu_miss_of(st, b);
	for (uint32_t m = 0; f32 && m < M; m++)
		CU(cudaMemcpyAsync((uint8_t *)g->raw + m * bb, M > 1 ? st->rep_raw[b * M + m] : raw,
		                   bb, cudaMemcpyHostToDevice, g->s),
		   "cudaMemcpyAsync(raw B-scan, host to device)");
	if (f32)
		CU(gpu_launch_nonfinite(&st->prep, g->raw, (int)M, &miss, g->s),
		   "non-finite sample kernel");
	for (uint32_t m = 0; m < M; m++) {
		const uint32_t r = b * M + m;
		if (!f32)
			CU(cudaMemcpyAsync(g->raw, M > 1 ? st->rep_raw[r] : raw, bb,
			                   cudaMemcpyHostToDevice, g->s),
			   "cudaMemcpyAsync(raw B-scan, host to device)");
		rc = gpu_prep_bscan(st, g, b, m, f32 ? (uint8_t *)g->raw + m * bb : g->raw, m == 0,
		                    m + 1 == M, err, errlen);
		if (rc < 0) {
			bscan = r;
			goto out;
		}
	}
	if (st->fn)
		rc = gpu_prep_functional(st, g, b, err, errlen);
out:
	if (rc < 0)
		gpu_set_sticky(st, rc, "B-scan %u of epoch %llu: %s", bscan,
		               (unsigned long long)epoch, err);
	return rc;
}

/* ---- per epoch ---------------------------------------------------------------------------- */

/* Wait for everything queued on every stream (preprocessing and reconstruction). */
static int gpu_sync_all(struct gpu_state *st, char *err, size_t errlen)
{
	int rc = 0, r;

	for (int i = 0; i < st->ns; i++) {
		r = gpu_cuda_check(cudaStreamSynchronize(st->st[i].s), "cudaStreamSynchronize", err,
		                   errlen);
		if (r < 0 && rc == 0)
			rc = r;
	}
	for (int j = 0; j < GPU_RSTREAMS; j++) {
		r = gpu_cuda_check(cudaStreamSynchronize(st->rs[j]),
		                   "cudaStreamSynchronize(reconstruction)", rc ? NULL : err,
		                   rc ? 0 : errlen);
		if (r < 0 && rc == 0)
			rc = r;
		r = gpu_cuda_check(cudaStreamSynchronize(st->cs[j]),
		                   "cudaStreamSynchronize(volume copies)", rc ? NULL : err,
		                   rc ? 0 : errlen);
		if (r < 0 && rc == 0)
			rc = r;
	}
	cudaStream_t ms[2] = {st->mstream, st->mqs};
	for (int j = 0; j < 2; j++) {
		if (!ms[j])
			continue;
		r = gpu_cuda_check(cudaStreamSynchronize(ms[j]),
		                   "cudaStreamSynchronize(compensated ahead)", rc ? NULL : err,
		                   rc ? 0 : errlen);
		if (r < 0 && rc == 0)
			rc = r;
	}
	return rc;
}

/* Rows per slab of an epoch's output (about GPU_SLABS slabs, fewer for small volumes) so that
 * the copy of one slab overlaps the compute of the next: a multiple of the reconstruction
 * kernel's rows per thread (GPU_RECON_ROWS), at most 65532 (its grid y times its rows). */
static uint32_t gpu_slab_rows(uint32_t rows)
{
	uint32_t r = (rows + GPU_SLABS - 1) / GPU_SLABS;
	r = (r + GPU_RECON_ROWS - 1) / GPU_RECON_ROWS * GPU_RECON_ROWS;
	if (r < GPU_RECON_ROWS)
		r = GPU_RECON_ROWS;
	return r > 65532 ? 65532 : r;
}

/* The output rows of this state's part for the mode in force: its own [*r0, *r1) and those it
 * computes, *rc: one more below (the first row of the next part) for the render's
 * interpolation. The whole volume: [0, rows) for all three. */
static void gpu_own_rows(const struct gpu_state *st, bool none, uint32_t *r0, uint32_t *r1,
                         uint32_t *rc)
{
	const uint32_t s = none ? 1 : st->geo.sy, rows = none ? st->geo.ny : st->geo.Y;

	*r0 = st->part.b0 * s;
	*r1 = st->part.b1 * s;
	*rc = st->part.count > 1 && *r1 < rows ? *r1 + 1 : *r1;
}

void gpu_part_rows(const struct gpu_state *st, bool none, uint32_t *r0, uint32_t *r1, uint32_t *h0,
                   uint32_t *h1)
{
	const uint32_t rows = none ? st->geo.ny : st->geo.Y;
	uint32_t rc;

	gpu_own_rows(st, none, r0, r1, &rc);
	/* the kernel of the rows [r0, rc) reads the history of [r0 - 1, rc + 1) */
	*h0 = *r0 ? *r0 - 1 : 0;
	*h1 = rc < rows ? rc + 1 : rows;
}

/* The views of this epoch's u8 volume (docs/algorithms.md §4) on st->vs, once the kernels of
 * all nslabs slabs ran (not their copies: the views overlap the volume's D2H), copied into
 * out->views; the render only when out->view_mask asks for it, else the last one again.
 * A part of several (gpu.h) computes and copies the rows [r0, r1) of the en-face pictures,
 * the slice and the plane, the B-scan when it lies there, and its render into h_render; the
 * composite writes the render and the header. */
static int gpu_views_launch(struct gpu_state *st, const struct be_output *out, uint32_t nslabs,
                            uint32_t r0, uint32_t r1, char *err, size_t errlen)
{
	const struct be_view_params *p = &st->vp;
	const size_t cols = (size_t)p->Y * p->X, pcols = (size_t)(r1 - r0) * p->X;
	const size_t row0 = (size_t)r0 * p->X;
	const bool part = st->part.count > 1;
	uint8_t *area = out->views, *d_mean = st->d_views, *d_max = d_mean + cols;
	uint8_t *d_plane = d_max + cols, *d_render = d_plane + cols;
	uint8_t *d_vol = d_render + (size_t)VOLREC_RENDER_MAX * VOLREC_RENDER_MAX;
	uint64_t off[BE_VIEW_COUNT], vid[BE_VIEW_COUNT];
	const unsigned m = out->view_mask;
	unsigned present = 0;
	int rc = 0;

	for (uint32_t j = 0; j < nslabs && j < GPU_RSTREAMS; j++)
		CU(cudaStreamWaitEvent(st->vs, st->kev[j], 0), "cudaStreamWaitEvent(views)");
	be_views_offsets(p->Y, p->X, p->Z, off);
	for (int v = 0; v < BE_VIEW_COUNT; v++)
		vid[v] = out->volume_id;
	if (m &
	    ((1u << BE_VIEW_ENFACE_MEAN) | (1u << BE_VIEW_ENFACE_MAX) | (1u << BE_VIEW_PLANE))) {
		/* the rows [r0, r1) as a volume of their own */
		struct be_view_params rp = *p;
		rp.Y = r1 - r0;
		CU(gpu_launch_enface(st->out8 + row0 * p->Z, &rp, d_mean + row0, d_max + row0,
		                     d_plane + row0, st->vs),
		   "en-face kernel");
	}
	st->h_render_valid = false;
	if (m & (1u << BE_VIEW_RENDER)) {
		CU(gpu_launch_render(st->out8, p, &st->vrs, r0, r1, st->d_racc, d_render, st->vs),
		   "render kernel");
		st->last_rp = *p;
		st->last_render_id = out->volume_id;
		st->have_render = !part;
		if (part) {
			CU(cudaMemcpyAsync(st->h_render, d_render,
			                   (size_t)p->render_h * p->render_w,
			                   cudaMemcpyDeviceToHost, st->vs),
			   "cudaMemcpyAsync(render, device to host)");
			st->h_render_valid = true;
		}
	}
	static const enum be_view from_dev[] = {BE_VIEW_ENFACE_MEAN, BE_VIEW_ENFACE_MAX,
	                                        BE_VIEW_PLANE};
	for (int i = 0; i < 3; i++) {
		enum be_view v = from_dev[i];
		if (!(m & (1u << v)))
			continue;
		CU(cudaMemcpyAsync(area + off[v] + row0, st->d_views + (size_t)i * cols + row0,
		                   pcols, cudaMemcpyDeviceToHost, st->vs),
		   "cudaMemcpyAsync(view, device to host)");
		present |= 1u << v;
	}
	/* the reduced volume on the device, only it copied back; a part of several copies its
	 * blocks' maxima or sums over its rows, which the composite combines (blocks may span
	 * the parts' rows) */
	st->h_vacc_valid = false;
	if ((m & (1u << BE_VIEW_VOLUME)) && p->volume_max_side && part && r1 > r0) {
		uint32_t f[3], r[3];
		be_volume_dims(p, f, r);
		const size_t plane = (size_t)r[1] * r[2];
		const uint32_t yb0 = r0 / f[0], yb1 = (r1 - 1) / f[0] + 1;
		CU(gpu_launch_volume(st->out8, p, r0, r1, st->d_vacc, NULL, st->vs),
		   "reduced volume kernel");
		CU(cudaMemcpyAsync(st->h_vacc + yb0 * plane, st->d_vacc + yb0 * plane,
		                   (yb1 - yb0) * plane * sizeof(unsigned long long),
		                   cudaMemcpyDeviceToHost, st->vs),
		   "cudaMemcpyAsync(reduced volume sums, device to host)");
		st->h_vacc_rows[0] = yb0;
		st->h_vacc_rows[1] = yb1;
		st->h_vacc_valid = true;
	}
	if ((m & (1u << BE_VIEW_VOLUME)) && p->volume_max_side && !part) {
		CU(gpu_launch_volume(st->out8, p, 0, p->Y, st->d_vacc, d_vol, st->vs),
		   "reduced volume kernels");
		CU(cudaMemcpyAsync(area + off[BE_VIEW_VOLUME], d_vol,
		                   be_view_size(p, BE_VIEW_VOLUME), cudaMemcpyDeviceToHost, st->vs),
		   "cudaMemcpyAsync(volume view, device to host)");
		present |= 1u << BE_VIEW_VOLUME;
	}
	if ((m & (1u << BE_VIEW_BSCAN)) && p->position[0] >= r0 && p->position[0] < r1) {
		CU(cudaMemcpyAsync(area + off[BE_VIEW_BSCAN],
		                   st->out8 + (size_t)p->position[0] * p->X * p->Z,
		                   (size_t)p->X * p->Z, cudaMemcpyDeviceToHost, st->vs),
		   "cudaMemcpyAsync(bscan, device to host)");
		present |= 1u << BE_VIEW_BSCAN;
	}
	if (m & (1u << BE_VIEW_SLICE)) {
		CU(cudaMemcpy2DAsync(area + off[BE_VIEW_SLICE] + (size_t)r0 * p->Z, p->Z,
		                     st->out8 + (row0 + p->position[1]) * p->Z, (size_t)p->X * p->Z,
		                     p->Z, r1 - r0, cudaMemcpyDeviceToHost, st->vs),
		   "cudaMemcpy2DAsync(slice, device to host)");
		present |= 1u << BE_VIEW_SLICE;
	}
	if (part) {
		CU(cudaEventRecord(st->vev, st->vs), "cudaEventRecord(views)");
		goto out;
	}
	/* the other channels' en-face mean and maximum and B-scan (protocol.h, channel views),
	 * where the first channel's are present, as cpu/views.c computes them: the en-face kernel
	 * again into d_mean and d_max, which the copies above on vs have left by then */
	for (uint32_t c = 1; out->channel_views && c < st->geo.nch; c++) {
		const size_t nvox = (size_t)p->Y * p->X * p->Z;
		const uint8_t *V = st->out8 + c * nvox;
		uint8_t *base = (uint8_t *)out->channel_views +
		                (c - 1) * volrec_channel_views_step(p->Y, p->X, p->Z);
		const bool mean = present & (1u << BE_VIEW_ENFACE_MEAN),
		           mx = present & (1u << BE_VIEW_ENFACE_MAX);

		if (mean || mx)
			CU(gpu_launch_enface(V, p, mean ? d_mean : NULL, mx ? d_max : NULL, NULL,
			                     st->vs),
			   "en-face kernel (channel)");
		if (mean)
			CU(cudaMemcpyAsync(base + volrec_channel_view_offset(
			                                  p->Y, p->X, VOLREC_IMAGE_ENFACE_MEAN),
			                   d_mean, cols, cudaMemcpyDeviceToHost, st->vs),
			   "cudaMemcpyAsync(channel view, device to host)");
		if (mx)
			CU(cudaMemcpyAsync(base + volrec_channel_view_offset(
			                                  p->Y, p->X, VOLREC_IMAGE_ENFACE_MAX),
			                   d_max, cols, cudaMemcpyDeviceToHost, st->vs),
			   "cudaMemcpyAsync(channel view, device to host)");
		if (present & (1u << BE_VIEW_BSCAN))
			CU(cudaMemcpyAsync(base + volrec_channel_view_offset(p->Y, p->X,
			                                                     VOLREC_IMAGE_BSCAN),
			                   V + (size_t)p->position[0] * p->X * p->Z,
			                   (size_t)p->X * p->Z, cudaMemcpyDeviceToHost, st->vs),
			   "cudaMemcpyAsync(channel B-scan, device to host)");
	}
	if (st->have_render) {
		CU(cudaMemcpyAsync(area + off[BE_VIEW_RENDER], d_render,
		                   (size_t)st->last_rp.render_h * st->last_rp.render_w,
		                   cudaMemcpyDeviceToHost, st->vs),
		   "cudaMemcpyAsync(render, device to host)");
		vid[BE_VIEW_RENDER] = st->last_render_id;
		present |= 1u << BE_VIEW_RENDER;
	}
	CU(cudaEventRecord(st->vev, st->vs), "cudaEventRecord(views)");
	be_views_describe(area, p, st->have_render ? &st->last_rp : p, vid, present);
out:
	return rc;
}

/* ---- compensated mode (docs/algorithms.md §2c) ------------------------------------------- */

/* be_motion_bands_fn: the bands of the epoch's L_e (st->mcur) shifted by -dz, computed on
 * reconstruction stream 0 and copied back (the host's registration waits for them). */
static int gpu_motion_bands(void *ctx, double dz, float *Be)
{
	struct gpu_state *st = ctx;
	const size_t nb = (size_t)st->geo.ny * st->geo.nx * BE_MOTION_NB;
	char *err = st->merr;
	const size_t errlen = sizeof(st->merr);
	struct be_motion_entry e;
	int rc;

	be_motion_shift_of(-dz, &e);
	CU(gpu_launch_motion_bands(st->mcur, (size_t)st->geo.ny * st->geo.nx, (int)st->geo.nz, &e,
	                           st->dm_be, st->mcs),
	   "registration bands kernel");
	CU(cudaStreamSynchronize(st->mcs), "cudaStreamSynchronize(registration bands)");
	memcpy(Be, st->h_mbe, nb * sizeof(float));
out:
	return rc;
}

/* The last epoch's reference bands, once landed in h_mob, to the estimator (blurred there
 * unless the device blurred them). */
static void gpu_motion_hand_reference(struct gpu_state *st)
{
	if (!st->mref_pending)
		return;
	if (st->mref_blurred)
		be_motion_set_reference_blurred(st->motion, st->h_mob);
	else
		be_motion_set_reference(st->motion, st->h_mob);
	st->mref_pending = false;
}

/*
 * The pose of a compensated epoch at offset (ox, oy) from its L_e le, on stream sm (which has
 * waited for the epoch's B-scans): the mean A-scan (device) and, while the device computes it,
 * the last epoch's reference handed to the estimator when its copy landed; then the pose
 * (be_motion_epoch, host, with the bands from the device when it registers): the history slot
 * (st->mslot), the entries (h_ment, mne, mnref).
 */
static int gpu_motion_pose(struct gpu_state *st, uint32_t ox, uint32_t oy, const float *le,
                           cudaStream_t sm, char *err, size_t errlen)
{
	int rc;

	CU(gpu_launch_motion_profile(le, (size_t)st->geo.ny * st->geo.nx, (int)st->geo.nz,
	                             st->d_mpart, st->dm_prof, sm),
	   "mean A-scan kernel");
	gpu_motion_hand_reference(st);
	CU(cudaStreamSynchronize(sm), "cudaStreamSynchronize(mean A-scan)");
	st->mcur = le;
	st->mcs = sm;
	st->merr[0] = '\0';
	rc = be_motion_epoch(st->motion, ox, oy, st->h_mprof, gpu_motion_bands, st, &st->mslot,
	                     st->h_ment, &st->mne, &st->mnref);
	if (rc < 0)
		snprintf(err, errlen, "cuda backend: compensated mode: pose estimate: %s",
		         st->merr[0] ? st->merr : "failed");
out:
	return rc;
}

/* This epoch's half of the compensated mode's double buffers (gpu_motion_queue). */
static struct be_motion_entry *gpu_ment(const struct gpu_state *st)
{
	return st->d_ment + (size_t)st->mbuf * st->mslots;
}

static struct be_motion_pick *gpu_mpk(const struct gpu_state *st)
{
	return st->mpk + (size_t)st->mbuf * st->geo.Y * st->geo.X;
}

static int4 *gpu_maxy(const struct gpu_state *st)
{
	return st->axy + (size_t)st->mbuf * (st->geo.X + st->geo.Y);
}

static longlong2 *gpu_maoff(const struct gpu_state *st)
{
	return st->aoff + (size_t)st->mbuf * (st->geo.X + st->geo.Y);
}

/*
 * The device's part of a compensated epoch before its slabs. On stream sq: le copied into the
 * history slot of its pose, the entries uploaded and the interpolation axes (into the half of
 * the buffers the last epoch did not use); then, once there are enough entries for a reference
 * of its own, the entry bands, the reference's picks and bands, blurred into mapped host
 * memory and marked by mev_ref, so that the next epoch's registration can start while this
 * one's output is gathered and copied. Kernels, not the copy engines, move these data: the
 * copy engines are busy with the epoch in flight's volume, and the next registration waits
 * for the reference. Then the output's picks; mev_pre marks the end. None of it touches what
 * the epoch before reads (its slot is not this one's: BE_MOTION_SLOTS), so it may run while
 * that epoch is in flight (the CUDA backend queues it on a stream below the reconstruction's
 * priority: measured, this order and priority give the highest rate).
 */
static int gpu_motion_queue(struct gpu_state *st, const struct gpu_recon_params *rp,
                            const float *le, cudaStream_t sq, char *err, size_t errlen)
{
	const struct be_motion_geom g =
	        be_motion_geom_of(st->geo.nx, st->geo.ny, st->geo.sx, st->geo.sy, st->geo.nz);
	const size_t nodes = (size_t)st->geo.ny * st->geo.nx;
	int rc;

	st->mbuf ^= 1u;
	CU(gpu_launch_copy(le, st->mhist + (size_t)st->mslot * st->geo.le_count, st->geo.le_count,
	                   sq),
	   "history slot copy kernel");
	CU(cudaMemcpyAsync(gpu_ment(st), st->h_ment, st->mne * sizeof(*st->h_ment),
	                   cudaMemcpyHostToDevice, sq),
	   "cudaMemcpyAsync(compensated entries, host to device)");
	CU(gpu_launch_axes(rp, gpu_maxy(st), gpu_maoff(st), sq), "interpolation axes kernel");
	st->mref_event = st->mnref > 0;
	if (st->mref_event) {
		CU(gpu_launch_motion_ebands(st->mhist, gpu_ment(st), st->mne, nodes,
		                            (int)st->geo.nz, st->d_meb, sq),
		   "entry bands kernel");
		CU(gpu_launch_motion_picks(&g, gpu_ment(st), st->mnref, 0, 0, (int)st->geo.Y,
		                           st->mpkr, NULL, sq),
		   "reference kriging weight kernel");
		CU(gpu_launch_motion_ref(&g, st->mpkr, st->d_meb, st->mne, gpu_maxy(st), st->d_mob,
		                         sq),
		   "reference bands kernel");
		CU(gpu_launch_motion_blur(&g, st->mblur, st->mblur_r, st->d_mob, st->d_mtmp,
		                          st->dm_ob, sq),
		   "reference blur kernels");
		CU(cudaEventRecord(st->mev_ref, sq), "cudaEventRecord(reference bands)");
	}
	CU(gpu_launch_motion_picks(&g, gpu_ment(st), st->mne, 0, 0, (int)st->geo.Y, gpu_mpk(st),
	                           NULL, sq),
	   "kriging weight kernel");
	CU(cudaEventRecord(st->mev_pre, sq), "cudaEventRecord(compensated epoch queued)");
out:
	return rc;
}

/* The reconstruction parameters of epoch e after the last epoch queued (st->last, st->run). */
static void gpu_recon_params_of(const struct gpu_state *st, uint64_t epoch,
                                struct gpu_recon_params *rp)
{
	const bool adaptive = st->live.mode == CFG_RECON_ADAPTIVE;
	const bool consecutive = st->have_last && epoch == st->last + 1;
	const uint64_t run = consecutive ? st->run + 1 : 1;
	uint32_t ox, oy;

	vr_scan_offset(epoch, st->geo.sx, st->geo.sy, &ox, &oy);
	*rp = (struct gpu_recon_params){
	        .nx = (int)st->geo.nx,
	        .ny = (int)st->geo.ny,
	        .nz = (int)st->geo.nz,
	        .sx = (int)st->geo.sx,
	        .sy = (int)st->geo.sy,
	        .S = (int)st->geo.S,
	        .X = (int)st->geo.X,
	        .Y = (int)st->geo.Y,
	        .ox = (int)ox,
	        .oy = (int)oy,
	        .qe = (int)(oy * st->geo.sx + ox), /* epoch mod S */
	        .epoch = (long long)epoch,
	        /* steady state: the last S epochs were all processed, in order (the adaptive
	         * mode scales each column's weight: always the E map; f32 input may leave a
	         * position without a sample, E = -1, docs/algorithms.md §1.0: the E map) */
	        .fast = st->ttab && run >= st->geo.S && !adaptive &&
	                st->geo.sample_type != CFG_SAMPLE_F32,
	        .product = st->live.combine == CFG_COMBINE_PRODUCT,
	        .temporal = (int)st->live.temporal,
	        .tau = st->live.tau,
	        /* as cpu/recon.c: gz(1) / gz(0) in float, its sums in double */
	        .g1 = st->live.g[1] / st->live.g[0],
	        .adaptive = adaptive,
	        .depth_half_window = (int)st->live.depth_half_window,
	        .k2 = st->live.tolerance * st->live.tolerance,
	        .ks2 = st->live.speckle_tolerance * st->live.speckle_tolerance,
	};
	for (int nv = 1; nv <= 3; nv++) {
		rp->inv_gz[nv - 1] = (float)(1.0 / (1.0 + (double)rp->g1 * (nv - 1)));
		rp->inv_nz[nv - 1] = 1.0f / (float)nv;
	}
}

/*
 * While epoch e is in flight (epoch_wait): once its reference bands landed, hand them to the
 * estimator; then, when every B-scan of the next epoch was submitted, estimate that epoch's
 * pose on the pose stream (after its B-scans' preprocessing), so that its finish only queues
 * the device's work. A failure is reported by the next finish.
 */
static int gpu_motion_ahead(struct gpu_state *st, uint64_t epoch, char *err, size_t errlen)
{
	int rc = 0;

	if (!st->motion || st->live.mode != CFG_RECON_COMPENSATED || !st->mref_event)
		return 0;
	CU(cudaEventSynchronize(st->mev_ref), "cudaEventSynchronize(reference bands)");
	gpu_motion_hand_reference(st);
	if (st->sticky || st->mpre || st->sub_n != st->geo.nraw || st->sub_epoch <= epoch)
		return 0;
	struct gpu_recon_params rq; /* the axes' parameters of its offset */
	gpu_recon_params_of(st, st->sub_epoch, &rq);
	for (int i = 0; i < st->ns; i++) {
		CU(cudaEventRecord(st->st[i].ev, st->st[i].s), "cudaEventRecord");
		CU(cudaStreamWaitEvent(st->mstream, st->st[i].ev, 0), "cudaStreamWaitEvent");
		CU(cudaStreamWaitEvent(st->mqs, st->st[i].ev, 0), "cudaStreamWaitEvent");
	}
	rc = gpu_motion_pose(st, (uint32_t)rq.ox, (uint32_t)rq.oy, st->le[st->cur], st->mstream,
	                     err, errlen);
	if (rc < 0)
		goto out;
	st->mpre = true;
	st->mpre_epoch = st->sub_epoch;
	/* and its device work before the slabs */
	rc = gpu_motion_queue(st, &rq, st->le[st->cur], st->mqs, err, errlen);
	if (rc == 0) {
		st->mqueued = true;
		st->mq_epoch = st->sub_epoch;
	}
out:
	return rc;
}

/*
 * Epoch e's work before its slabs, on rs[0]: after the preprocessing of its B-scans (events
 * recorded now, so B-scans of the next epoch submitted later are not waited for) and after the
 * slabs' kernels of the epoch before (aev: e may be queued ahead while that epoch's volume
 * still streams down, and its interlace overwrites the history those kernels read), the
 * interlace of le[cur] into B and the weights (compensated: the pose and its device work);
 * then ev_ready, which the slabs wait for. *rp: e's parameters.
 */
static int gpu_queue_pre(struct gpu_state *st, uint64_t epoch, struct gpu_recon_params *rp,
                         char *err, size_t errlen)
{
	cudaStream_t s0 = st->rs[0];
	float *le = st->le[st->cur];
	int rc = 0;

	for (int i = 0; i < st->ns; i++) {
		CU(cudaEventRecord(st->st[i].ev, st->st[i].s), "cudaEventRecord");
		CU(cudaStreamWaitEvent(s0, st->st[i].ev, 0), "cudaStreamWaitEvent");
	}
	for (int j = 1; j < GPU_RSTREAMS; j++)
		CU(cudaStreamWaitEvent(s0, st->aev[j], 0),
		   "cudaStreamWaitEvent(the last epoch's slabs)");
	*rp = (struct gpu_recon_params){0};
	if (st->live.mode == CFG_RECON_NONE)
		goto ready;
	gpu_recon_params_of(st, epoch, rp);
	if (st->live.mode == CFG_RECON_COMPENSATED) {
		/* compensated (docs/algorithms.md §2c): its own history, not B; the pose estimated
		 * ahead (epoch_wait of the last epoch) or now */
		if (st->mqueued && st->mq_epoch == epoch) {
			/* estimated and queued ahead: the slabs wait for that work */
			CU(cudaStreamWaitEvent(s0, st->mev_pre, 0),
			   "cudaStreamWaitEvent(compensated epoch queued)");
		} else {
			if ((st->mpre && st->mpre_epoch != epoch) || st->mqueued) {
				/* estimated for an epoch that did not come next (the pipeline
				 * finishes the epochs whose B-scans it submitted, so this does not
				 * happen): the estimator moved past it, start afresh */
				be_motion_reset(st->motion);
				st->mref_pending = false;
				st->mpre = false;
			}
			if (!st->mpre)
				rc = gpu_motion_pose(st, (uint32_t)rp->ox, (uint32_t)rp->oy, le, s0,
				                     err, errlen);
			if (rc == 0)
				rc = gpu_motion_queue(st, rp, le, s0, err, errlen);
		}
		st->mpre = st->mqueued = false;
		if (rc < 0)
			goto out;
		goto ready;
	}
	/* the last upload from cpin (at the last epoch's ev_ready) finished before it is
	 * overwritten: that epoch may still be in flight */
	CU(cudaEventSynchronize(st->ev_ready), "cudaEventSynchronize(weights upload)");
	const size_t nt = st->ttab ? (size_t)st->geo.S * st->geo.S : 0;
	if (nt)
		memcpy(st->cpin, st->ttab, nt * sizeof(float));
	memcpy(st->cpin + nt, st->live.g, 4 * sizeof(float));
	CU(gpu_upload_constants(st->cpin, nt, st->cpin + nt, s0),
	   "cudaMemcpyToSymbolAsync(weights)");
	/* adaptive (docs/algorithms.md §2b): the new samples against the history they replace,
	 * before the interlace overwrites it */
	if (rp->adaptive) /* Q is free until the slabs: its first ny * nx * nz floats serve as
	                   * the transposed differences' scratch */
		CU(gpu_launch_adapt_change(rp, le, st->P, st->E, st->Q, st->chg, s0),
		   "change measure kernel");
	/* and, for the jump recovery, this epoch's decision (docs/algorithms.md §2b, "Recovery
	 * after a jump"; backend/jump.h): from the changes and L_e, before the weights */
	const bool jr = rp->adaptive && st->live.jump_recovery;
	if (jr)
		CU(gpu_launch_jump(rp, le, st->miss[st->cur], st->chg, st->jrows, st->jmean,
		                   st->jstate, st->jsince, s0),
		   "jump recovery kernels");
	CU(gpu_launch_interlace(rp, le, st->miss[st->cur], st->P, st->E, s0), "interlace kernel");
	/* the channels' planes at the same places (docs/algorithms.md §5 step 5) */
	for (int pl = 0; pl < GPU_FN_PLANES; pl++)
		if (st->Ppl[pl])
			CU(gpu_launch_interlace(rp, st->lpl[pl][st->cur], NULL, st->Ppl[pl], NULL,
			                        s0),
			   "interlace kernel (channels)");
	if (rp->adaptive)
		CU(gpu_launch_adapt_weights(rp, st->E, st->chg, jr ? st->jsince : NULL, st->axy,
		                            st->aoff, st->alpha, st->beta, st->tmap, s0),
		   "adaptive weight kernel");
	else if (!rp->fast)
		CU(gpu_launch_tmap(rp, st->E, st->tmap, s0), "temporal weight kernel");
	CU(gpu_launch_weights(rp, st->tmap, rp->adaptive ? st->alpha : NULL,
	                      rp->adaptive ? st->beta : NULL, st->W, s0),
	   "column weight kernel");
ready:
	CU(cudaEventRecord(st->ev_ready, s0), "cudaEventRecord");
	for (int j = 1; j < GPU_RSTREAMS; j++)
		CU(cudaStreamWaitEvent(st->rs[j], st->ev_ready, 0), "cudaStreamWaitEvent");
out:
	return rc;
}

/* Voxels of one channel of the output: [Y][X][Z], or [ny][nx][nz] in mode none. */
static size_t gpu_out_vox(const struct gpu_state *st, bool none)
{
	return none ? st->geo.le_count : st->geo.full_count;
}

/* With channels other than the structure (docs/algorithms.md §5 step 5), the rows [y0, y1) of
 * every channel on stream s: the structure's (also when not output, in the cumulative mode:
 * its history) into its slot of out8 and outf, angiography's plane into its slot and Qpl,
 * Doppler's Re R and Im R into Qpl and their v into its slot and Dv; mode none: from L_e and
 * the low-resolution planes. Modes adaptive and compensated take no channels (the
 * configuration refuses them). */
static int gpu_queue_channels(struct gpu_state *st, const struct gpu_recon_params *rp, float *outf,
                              uint32_t y0, uint32_t y1, cudaStream_t s, char *err, size_t errlen)
{
	const bool none = st->live.mode == CFG_RECON_NONE;
	const size_t row_vox = (size_t)(none ? st->geo.nx : st->geo.X) * st->geo.nz;
	const size_t off = (size_t)y0 * row_vox, n = (size_t)(y1 - y0) * row_vox;
	const size_t vol = gpu_out_vox(st, none);
	const int sc = st->geo.chan[CFG_CH_STRUCTURE], ac = st->geo.chan[CFG_CH_ANGIO],
	          dc = st->geo.chan[CFG_CH_DOPPLER];
	const int c = st->cur;
	int rc = 0;

	if (none) {
		if (sc >= 0)
			CU(gpu_launch_quantize(st->le[c] + off, st->out8 + (size_t)sc * vol + off,
			                       n, s),
			   "quantize kernel");
		if (ac >= 0)
			CU(gpu_launch_quantize(st->lpl[GPU_PL_ANGIO][c] + off,
			                       st->out8 + (size_t)ac * vol + off, n, s),
			   "quantize kernel (angiography)");
		if (dc >= 0)
			CU(gpu_launch_doppler_v(st->lpl[GPU_PL_DRE][c] + off,
			                        st->lpl[GPU_PL_DIM][c] + off, n,
			                        st->out8 + (size_t)dc * vol + off, st->Dv + off, s),
			   "Doppler kernel");
		goto out;
	}
	if (sc >= 0 || st->live.mode == CFG_RECON_CUMULATIVE)
		CU(gpu_launch_recon(rp, st->P, st->W, NULL, NULL, NULL, (int)y0, (int)y1,
		                    sc >= 0 ? st->out8 + (size_t)sc * vol : NULL, outf, s),
		   "reconstruction kernel");
	if (ac >= 0)
		CU(gpu_launch_recon(rp, st->Ppl[GPU_PL_ANGIO], st->W, NULL, NULL, NULL, (int)y0,
		                    (int)y1, st->out8 + (size_t)ac * vol, st->Qpl[GPU_PL_ANGIO], s),
		   "reconstruction kernel (angiography)");
	if (dc >= 0) {
		for (int pl = GPU_PL_DRE; pl <= GPU_PL_DIM; pl++)
			CU(gpu_launch_recon(rp, st->Ppl[pl], st->W, NULL, NULL, NULL, (int)y0,
			                    (int)y1, NULL, st->Qpl[pl], s),
			   "reconstruction kernel (Doppler)");
		CU(gpu_launch_doppler_v(st->Qpl[GPU_PL_DRE] + off, st->Qpl[GPU_PL_DIM] + off, n,
		                        st->out8 + (size_t)dc * vol + off, st->Dv + off, s),
		   "Doppler kernel");
	}
out:
	return rc;
}

/* The slabs of rows of the epoch gpu_queue_pre prepared (a part: its rows and the one below)
 * round-robin on the reconstruction streams, into st->out8 and, unless NULL, the float output
 * outf; sev[k] after slab k's kernel (its copies wait for it), kev for the views, aev[j] after
 * the last on rs[j]. *nslabs: how many. */
static int gpu_queue_slabs(struct gpu_state *st, const struct gpu_recon_params *rp, float *outf,
                           uint32_t *nslabs, char *err, size_t errlen)
{
	const bool none = st->live.mode == CFG_RECON_NONE;
	const size_t row_vox = (size_t)(none ? st->geo.nx : st->geo.X) * st->geo.nz;
	float *le = st->le[st->cur];
	uint32_t r0, r1, rcomp, k = 0;
	int rc = 0;

	gpu_own_rows(st, none, &r0, &r1, &rcomp);
	const uint32_t sr = gpu_slab_rows(rcomp - r0);
	for (uint32_t y0 = r0; y0 < rcomp; y0 += sr, k++) {
		const uint32_t y1 = y0 + sr < rcomp ? y0 + sr : rcomp;
		const size_t off = (size_t)y0 * row_vox, n = (size_t)(y1 - y0) * row_vox;
		cudaStream_t s = st->rs[k % GPU_RSTREAMS];
		if (k >= GPU_SLABS) {
			rc = -EINVAL;
			snprintf(err, errlen, "cuda backend: more than %d slabs of %u rows",
			         GPU_SLABS, sr);
			goto out;
		}
		if (st->fn) {
			rc = gpu_queue_channels(st, rp, outf, y0, y1, s, err, errlen);
			if (rc < 0)
				goto out;
		} else if (none) {
			CU(gpu_launch_quantize(le + off, st->out8 + off, n, s), "quantize kernel");
		} else if (st->live.mode == CFG_RECON_COMPENSATED) {
			/* the output of the slab's columns from their picks (queued before the
			 * slabs); before there are enough entries for a reference, the output's
			 * bands too, copied down with the slab */
			const size_t ob0 = (size_t)y0 * st->geo.X * BE_MOTION_NB;
			CU(gpu_launch_motion(rp, st->mhist, gpu_ment(st), gpu_mpk(st), le,
			                     gpu_maxy(st), gpu_maoff(st), (int)y0, (int)y1,
			                     st->out8, outf, st->mref_event ? NULL : st->d_mob, s),
			   "compensated reconstruction kernel");
			if (!st->mref_event) /* the reference is the output itself */
				CU(cudaMemcpyAsync(st->h_mob + ob0, st->d_mob + ob0,
				                   (size_t)(y1 - y0) * st->geo.X * BE_MOTION_NB *
				                           sizeof(float),
				                   cudaMemcpyDeviceToHost, s),
				   "cudaMemcpyAsync(reference bands, device to host)");
		} else {
			CU(gpu_launch_recon(rp, st->P, st->W, le, st->axy, st->aoff, (int)y0,
			                    (int)y1, st->out8, outf, s),
			   "reconstruction kernel");
		}
		CU(cudaEventRecord(st->sev[k], s), "cudaEventRecord");
		if (st->views)
			CU(cudaEventRecord(st->kev[k % GPU_RSTREAMS], s), "cudaEventRecord");
	}
	for (int j = 0; j < GPU_RSTREAMS; j++)
		CU(cudaEventRecord(st->aev[j], st->rs[j]), "cudaEventRecord");
	*nslabs = k;
out:
	return rc;
}

/* The copies of the epoch whose nslabs slabs were queued into out: each slab's rows of its own
 * on cs[k mod 3] once its kernel ran (the next slab's kernel does not wait for that copy), the
 * part's B-scans of L_e and of the median counts, the views; rev[j] closes the epoch's work on
 * rs[j] and cs[j]. */
static int gpu_queue_copies(struct gpu_state *st, const struct be_output *out, const float *outf,
                            uint32_t nslabs, char *err, size_t errlen)
{
	const bool none = st->live.mode == CFG_RECON_NONE;
	const size_t row_vox = (size_t)(none ? st->geo.nx : st->geo.X) * st->geo.nz;
	const size_t vol = gpu_out_vox(st, none);
	uint32_t r0, r1, rcomp, k = 0;
	int rc = 0;

	gpu_own_rows(st, none, &r0, &r1, &rcomp);
	const uint32_t sr = gpu_slab_rows(rcomp - r0);
	for (uint32_t y0 = r0; y0 < rcomp && k < nslabs; y0 += sr, k++) {
		const uint32_t y1 = y0 + sr < rcomp ? y0 + sr : rcomp, yc = y1 < r1 ? y1 : r1;
		const size_t off = (size_t)y0 * row_vox;
		const size_t nc = y0 < yc ? (size_t)(yc - y0) * row_vox : 0;
		cudaStream_t cpy = st->cs[k % GPU_RSTREAMS];
		if (!(out->volume || out->full) || !nc)
			continue;
		CU(cudaStreamWaitEvent(cpy, st->sev[k], 0), "cudaStreamWaitEvent(slab kernel)");
		/* every channel's rows (output.channels, [c][Y][X][Z]) */
		for (uint32_t ch = 0; ch < st->geo.nch; ch++) {
			const size_t co = (size_t)ch * vol;
			const float *src = outf;
			if (st->geo.ch[ch] == CFG_CH_ANGIO)
				src = none ? st->lpl[GPU_PL_ANGIO][st->cur] : st->Qpl[GPU_PL_ANGIO];
			else if (st->geo.ch[ch] == CFG_CH_DOPPLER)
				src = st->Dv;
			if (out->volume)
				CU(cudaMemcpyAsync(out->volume + co + off, st->out8 + co + off, nc,
				                   cudaMemcpyDeviceToHost, cpy),
				   "cudaMemcpyAsync(u8 volume, device to host)");
			if (out->full)
				CU(cudaMemcpyAsync(out->full + co + off, src + off,
				                   nc * sizeof(float), cudaMemcpyDeviceToHost, cpy),
				   "cudaMemcpyAsync(float volume, device to host)");
		}
	}
	/* the part's B-scans of L_e and of the median counts */
	const uint32_t b0 = st->part.b0, nb = st->part.b1 - st->part.b0;
	const size_t lrow = (size_t)st->geo.nx * st->geo.nz;
	if (out->lowres)
		CU(cudaMemcpyAsync(out->lowres + b0 * lrow, st->le[st->cur] + b0 * lrow,
		                   nb * lrow * sizeof(float), cudaMemcpyDeviceToHost,
		                   st->rs[k % GPU_RSTREAMS]),
		   "cudaMemcpyAsync(low-resolution volume, device to host)");
	/* the channels' low-resolution volumes: angiography's v, Doppler's phase */
	if (out->lowres_angio && st->lpl[GPU_PL_ANGIO][st->cur])
		CU(cudaMemcpyAsync(out->lowres_angio + b0 * lrow,
		                   st->lpl[GPU_PL_ANGIO][st->cur] + b0 * lrow,
		                   nb * lrow * sizeof(float), cudaMemcpyDeviceToHost,
		                   st->rs[(k + 2) % GPU_RSTREAMS]),
		   "cudaMemcpyAsync(angiography's low-resolution volume, device to host)");
	if (out->lowres_doppler && st->lph[st->cur])
		CU(cudaMemcpyAsync(out->lowres_doppler + b0 * lrow, st->lph[st->cur] + b0 * lrow,
		                   nb * lrow * sizeof(float), cudaMemcpyDeviceToHost,
		                   st->rs[(k + 2) % GPU_RSTREAMS]),
		   "cudaMemcpyAsync(Doppler's low-resolution volume, device to host)");
	if (out->median_depths && st->prep.background == CFG_BG_PARTIAL_MEDIAN)
		CU(cudaMemcpyAsync(out->median_depths + b0, st->counts[st->cur] + b0,
		                   nb * sizeof(unsigned), cudaMemcpyDeviceToHost,
		                   st->rs[(k + 1) % GPU_RSTREAMS]),
		   "cudaMemcpyAsync(median depth counts, device to host)");
	else if (out->median_depths)
		memset(out->median_depths + b0, 0, nb * sizeof(*out->median_depths));
	if (out->missing_ascans && st->geo.sample_type == CFG_SAMPLE_F32)
		CU(cudaMemcpyAsync(out->missing_ascans + b0, st->mcount[st->cur] + b0,
		                   nb * sizeof(unsigned), cudaMemcpyDeviceToHost,
		                   st->rs[(k + 1) % GPU_RSTREAMS]),
		   "cudaMemcpyAsync(missing A-scan counts, device to host)");
	else if (out->missing_ascans)
		memset(out->missing_ascans + b0, 0, nb * sizeof(*out->missing_ascans));
	for (int j = 0; j < GPU_RSTREAMS; j++) {
		/* rev[j]: after rs[j]'s work and cs[j]'s copies */
		CU(cudaEventRecord(st->cev[j], st->rs[j]), "cudaEventRecord");
		CU(cudaStreamWaitEvent(st->cs[j], st->cev[j], 0), "cudaStreamWaitEvent");
		CU(cudaEventRecord(st->rev[j], st->cs[j]), "cudaEventRecord");
	}
	if (st->views && out->views) {
		if (!st->views_valid) {
			rc = -EINVAL;
			snprintf(err, errlen, "cuda backend: views: %s", st->views_why);
			goto out;
		}
		rc = gpu_views_launch(st, out, nslabs, r0, r1, err, errlen);
	}
out:
	return rc;
}

/*
 * Queue epoch e: its work before the slabs, the slabs, their copies into out (the float output
 * from Q in the cumulative mode or when out asks for it; mode none: L_e itself). When e was
 * queued ahead (gpu_queue_ahead) only its copies remain, and its slabs again if out asks for
 * the float output they were queued without. The next epoch's B-scans go into the other L_e.
 */
static int gpu_epoch_finish_async(void *vst, uint64_t epoch, const struct be_output *out, char *err,
                                  size_t errlen)
{
	struct gpu_state *st = vst;
	const bool ahead = st->ahead && st->ahead_epoch == epoch;
	int rc;

	st->ahead = false;
	/* a failure of bscan_submit, reset_history or the queue ahead: reported here, the
	 * epoch is dropped */
	if (st->sticky) {
		snprintf(err, errlen, "cuda backend: %s", st->sticky_msg);
		rc = st->sticky;
		st->sticky = 0;
		gpu_sync_all(st, NULL, 0);
		return rc;
	}
	rc = gpu_cuda_check(cudaSetDevice(st->dev), "cudaSetDevice", err, errlen);
	if (rc < 0)
		goto out;

	const bool none = st->live.mode == CFG_RECON_NONE;
	float *outf = none ? st->le[st->cur]
	                   : (st->live.mode == CFG_RECON_CUMULATIVE || out->full ? st->Q : NULL);
	struct gpu_recon_params rp;
	uint32_t nslabs = 0;
	if (ahead) {
		nslabs = st->ahead_slabs;
		if (outf && !none)
			rc = gpu_queue_slabs(st, &st->ahead_rp, outf, &nslabs, err, errlen);
	} else {
		rc = gpu_queue_pre(st, epoch, &rp, err, errlen);
		if (rc == 0)
			rc = gpu_queue_slabs(st, &rp, none ? NULL : outf, &nslabs, err, errlen);
	}
	if (rc == 0)
		rc = gpu_queue_copies(st, out, outf, nslabs, err, errlen);
	if (rc < 0)
		goto out;

	/* queued: the host-side state moves on to the next epoch */
	if (st->live.mode == CFG_RECON_CUMULATIVE) {
		float *t = st->P;
		st->P = st->Q;
		st->Q = t;
		for (int pl = 0; pl < GPU_FN_PLANES; pl++) {
			t = st->Ppl[pl];
			st->Ppl[pl] = st->Qpl[pl];
			st->Qpl[pl] = t;
		}
	}
	if (st->live.mode == CFG_RECON_COMPENSATED) { /* handed to the estimator at the next epoch,
	                                          * once its copy landed */
		st->mref_pending = true;
		st->mref_blurred = st->mref_event;
	}
	if (!none) {
		st->run = st->have_last && epoch == st->last + 1 ? st->run + 1 : 1;
		st->have_last = true;
		st->last = epoch;
	}
	st->inflight_full = out->full != NULL;
	st->cur ^= 1;
out:
	if (rc < 0)
		gpu_sync_all(st, NULL, 0);
	return rc;
}

/*
 * Epoch e is in flight and every B-scan of the next one was submitted: queue the next one's
 * work up to its slabs' kernels now, into the spare u8 volume, so that it runs while e's volume
 * streams down; its copies and views follow at its finish. The compensated mode's slabs follow
 * its own work ahead (gpu_motion_ahead) when that was queued. Not in the cumulative mode (the
 * output is the next history), nor after an epoch that copies the float output (Q, the
 * adaptive mode's scratch), nor without the spare volume or with VOLREC_CUDA_AHEAD=0. A failure
 * resets the history (the interlace may have run) and is reported by the next epoch's finish.
 */
static void gpu_reset_history_impl(struct gpu_state *st);

static void gpu_queue_ahead(struct gpu_state *st, uint64_t epoch)
{
	char msg[384];
	int rc;

	/* compensated: its pose estimated and its work before the slabs queued ahead already
	 * (gpu_motion_ahead), with a reference of its own (the slabs do not write the bands) */
	const bool comp = st->live.mode == CFG_RECON_COMPENSATED && st->mqueued &&
	                  st->mq_epoch == st->sub_epoch && st->mref_event;

	if (!st->out8b || st->ahead || st->sticky || st->inflight_full ||
	    st->sub_n != (st->bhi - st->blo) * st->geo.M || st->sub_epoch <= epoch ||
	    (st->live.mode != CFG_RECON_NONCUMULATIVE && st->live.mode != CFG_RECON_ADAPTIVE &&
	     st->live.mode != CFG_RECON_NONE && !comp))
		return;
	uint8_t *t = st->out8;
	st->out8 = st->out8b;
	st->out8b = t;
	rc = gpu_queue_pre(st, st->sub_epoch, &st->ahead_rp, msg, sizeof(msg));
	if (rc == 0)
		rc = gpu_queue_slabs(st, &st->ahead_rp, NULL, &st->ahead_slabs, msg, sizeof(msg));
	if (rc < 0) {
		gpu_reset_history_impl(st);
		gpu_set_sticky(st, rc, "epoch %llu queued ahead: %s",
		               (unsigned long long)st->sub_epoch, msg);
		return;
	}
	st->ahead = true;
	st->ahead_epoch = st->sub_epoch;
}

static int gpu_epoch_wait(void *vst, uint64_t epoch, char *err, size_t errlen)
{
	struct gpu_state *st = vst;
	char msg[384];
	int rc = 0, r;

	rc = gpu_cuda_check(cudaSetDevice(st->dev), "cudaSetDevice", msg, sizeof(msg));
	if (rc == 0) {
		r = gpu_motion_ahead(st, epoch, msg, sizeof(msg));
		if (r < 0) /* the next epoch's: reported by its finish */
			gpu_set_sticky(st, r, "%s", msg);
		else if (st->part.count <= 1) /* parts: gpu_part_ahead, all before any waits */
			gpu_queue_ahead(st, epoch);
	}
	for (int j = 0; rc == 0 && j < GPU_RSTREAMS; j++) {
		r = gpu_cuda_check(cudaEventSynchronize(st->rev[j]),
		                   "cudaEventSynchronize(reconstruction)", msg, sizeof(msg));
		if (r < 0)
			rc = r;
	}
	if (rc == 0 && st->views)
		rc = gpu_cuda_check(cudaEventSynchronize(st->vev), "cudaEventSynchronize(views)",
		                    msg, sizeof(msg));
	if (rc < 0) {
		snprintf(err, errlen, "cuda backend: epoch %llu: %s", (unsigned long long)epoch,
		         msg);
		gpu_sync_all(st, NULL, 0);
	}
	return rc;
}

static int gpu_epoch_finish(void *vst, uint64_t epoch, const struct be_output *out, char *err,
                            size_t errlen)
{
	int rc = gpu_epoch_finish_async(vst, epoch, out, err, errlen);
	return rc < 0 ? rc : gpu_epoch_wait(vst, epoch, err, errlen);
}

/* ---- live updates ------------------------------------------------------------------------- */

static void gpu_reset_history_impl(struct gpu_state *st)
{
	char err[256];
	int rc;

	st->ahead = false;
	st->have_last = false;
	st->run = 0;
	st->mref_pending = false;
	st->mref_event = false;
	st->mpre = false;
	st->mqueued = false;
	if (st->motion)
		be_motion_reset(st->motion);
	if (!st->have_full)
		return;
	rc = gpu_cuda_check(cudaSetDevice(st->dev), "cudaSetDevice", err, sizeof(err));
	if (rc == 0)
		rc = gpu_sync_all(st, err, sizeof(err));
	if (rc == 0)
		rc = gpu_cuda_check(
		        cudaMemsetAsync(st->E, 0xff,
		                        (size_t)st->geo.Y * st->geo.X * sizeof(long long),
		                        st->st[0].s),
		        "cudaMemsetAsync(E)", err, sizeof(err));
	if (rc == 0)
		rc = gpu_cuda_check(
		        cudaMemsetAsync(st->P, 0, st->geo.full_count * sizeof(float), st->st[0].s),
		        "cudaMemsetAsync(B)", err, sizeof(err));
	if (rc == 0)
		rc = gpu_cuda_check(
		        cudaMemsetAsync(st->Q, 0, st->geo.full_count * sizeof(float), st->st[0].s),
		        "cudaMemsetAsync(output)", err, sizeof(err));
	for (int pl = 0; rc == 0 && pl < GPU_FN_PLANES; pl++) {
		if (!st->Ppl[pl])
			continue;
		rc = gpu_cuda_check(cudaMemsetAsync(st->Ppl[pl], 0,
		                                    st->geo.full_count * sizeof(float),
		                                    st->st[0].s),
		                    "cudaMemsetAsync(channel B)", err, sizeof(err));
		if (rc == 0)
			rc = gpu_cuda_check(cudaMemsetAsync(st->Qpl[pl], 0,
			                                    st->geo.full_count * sizeof(float),
			                                    st->st[0].s),
			                    "cudaMemsetAsync(channel output)", err, sizeof(err));
	}
	if (rc == 0)
		rc = gpu_cuda_check(cudaStreamSynchronize(st->st[0].s), "cudaStreamSynchronize",
		                    err, sizeof(err));
	if (rc == 0)
		rc = gpu_jump_reset(st, err, sizeof(err));
	if (rc < 0)
		gpu_set_sticky(st, rc, "reset_history: %s", err);
}

static void gpu_reset_history(void *vst)
{
	gpu_reset_history_impl(vst);
}

static int gpu_update_live(void *vst, const struct vr_config *cfg, char *err, size_t errlen)
{
	struct gpu_state *st = vst;
	struct gpu_tables nt = {0};
	const enum cfg_recon_mode old_mode = st->live.mode;
	int rc;

	/* everything that sizes a buffer or a plan must stay (docs/algorithms.md, be_ops) */
	if (!be_geometry_same(&st->geo, cfg) || cfg->gpu.device != st->dev ||
	    cfg->gpu.streams != st->ns) {
		snprintf(err, errlen,
		         "cuda backend: geometry, zero_pad, sample type, bit shift or gpu "
		         "device/streams changed: needs a rebuild, not a live update");
		return -EINVAL;
	}
	rc = gpu_check_geometry(cfg, err, errlen);
	if (rc < 0)
		return rc;
	rc = gpu_recon_supported(cfg, err, errlen);
	if (rc < 0)
		return rc;
	rc = gpu_tables_build(cfg, &nt, err, errlen);
	if (rc < 0)
		return rc;
	/* validate the reconstruction part before changing anything */
	{
		struct gpu_state probe = *st;
		probe.ttab = NULL;
		rc = gpu_recon_live(&probe, cfg, err, errlen);
		if (rc < 0)
			goto out;
	}
	rc = gpu_cuda_check(cudaSetDevice(st->dev), "cudaSetDevice", err, errlen);
	if (rc == 0)
		rc = gpu_sync_all(st, err, errlen);
	/* into compensated: its history is allocated now (or the update fails, the mode in
	 * force unchanged) */
	if (rc == 0 && cfg->reconstruct.mode == CFG_RECON_COMPENSATED)
		rc = gpu_motion_alloc(st, err, errlen);
	if (rc < 0)
		goto out;
	/* commit: swap the new tables in (the old ones are freed below) and upload them */
	{
		struct gpu_tables old = st->tab;
		st->tab = nt;
		nt = old;
	}
	rc = gpu_recon_live(st, cfg, err, errlen);
	if (rc == 0)
		rc = gpu_prep_upload(st, cfg, err, errlen);
	if (rc < 0)
		goto out;
	if (st->motion) /* from the next epoch (cpu_live_setup likewise) */
		be_motion_set_estimate(st->motion, st->live.estimate_pose);
	if (st->views) {
		be_view_params_from_cfg(cfg, &st->vp);
		st->views_valid = be_view_check(&st->vp, st->views_why, sizeof(st->views_why)) == 0;
		be_render_setup(&st->vp, &st->vrs);
	}
	if (st->live.mode != old_mode)
		gpu_reset_history_impl(st);
out:
	gpu_tables_free(&nt);
	return rc;
}

/* ---- one part of several devices (gpu.h, gpu_multi.c) ------------------------------------- */

void gpu_part_bscans(const struct gpu_state *st, uint32_t *lo, uint32_t *hi)
{
	*lo = st->blo;
	*hi = st->bhi;
}

const char *gpu_part_name(const struct gpu_state *st)
{
	return st->name;
}

bool gpu_part_failed(const struct gpu_state *st)
{
	return st->sticky != 0;
}

int gpu_part_drop(struct gpu_state *st, char *err, size_t errlen)
{
	int rc = gpu_cuda_check(cudaSetDevice(st->dev), "cudaSetDevice", err, errlen);

	st->ahead = false;
	if (rc == 0)
		rc = gpu_sync_all(st, err, errlen);
	return rc;
}

bool gpu_part_ahead(struct gpu_state *st, uint64_t epoch)
{
	if (cudaSetDevice(st->dev) != cudaSuccess) {
		cudaGetLastError(); /* the wait that follows reports the device */
		return false;
	}
	gpu_queue_ahead(st, epoch);
	return st->ahead || st->sticky; /* queued, or failed and reset the history */
}

const struct be_motion *gpu_part_motion(const struct gpu_state *st)
{
	return st->motion;
}

const uint8_t *gpu_part_render(const struct gpu_state *st)
{
	return st->h_render_valid ? st->h_render : NULL;
}

const unsigned long long *gpu_part_volume(const struct gpu_state *st, uint32_t rows[2])
{
	if (!st->h_vacc_valid)
		return NULL;
	rows[0] = st->h_vacc_rows[0];
	rows[1] = st->h_vacc_rows[1];
	return st->h_vacc;
}

int gpu_part_halo(struct gpu_state *dst, const struct gpu_state *src, uint32_t y, char *err,
                  size_t errlen)
{
	const size_t n = (size_t)dst->geo.X * dst->geo.nz, off = (size_t)y * n;
	int rc = gpu_cuda_check(cudaSetDevice(dst->dev), "cudaSetDevice", err, errlen);

	/* rs[0] runs dst's next epoch from its interlace on: the row is in place before */
	if (rc == 0)
		rc = gpu_cuda_check(cudaMemcpyPeerAsync(dst->P + off, dst->dev, src->P + off,
		                                        src->dev, n * sizeof(float), dst->rs[0]),
		                    "cudaMemcpyPeerAsync(cumulative halo row)", err, errlen);
	return rc;
}

int gpu_part_halo_wait(struct gpu_state *dst, char *err, size_t errlen)
{
	int rc = gpu_cuda_check(cudaSetDevice(dst->dev), "cudaSetDevice", err, errlen);

	if (rc == 0)
		rc = gpu_cuda_check(cudaStreamSynchronize(dst->rs[0]),
		                    "cudaStreamSynchronize(cumulative halo rows)", err, errlen);
	return rc;
}

const struct be_ops be_cuda_ops = {
        .version = BE_OPS_VERSION,
        .name = "cuda",
        /* channels on one device only (gpu_multi.c refuses them): their views too */
        .caps = BE_CAP_ASYNC | BE_CAP_DEVICE | BE_CAP_REGISTER | BE_CAP_CHANNEL_VIEWS,
        .create = gpu_create,
        .destroy = gpu_destroy,
        .device = gpu_device,
        .host_alloc = gpu_host_alloc,
        .host_free = gpu_host_free,
        .host_register = gpu_host_register,
        .host_unregister = gpu_host_unregister,
        .bscan_submit = gpu_bscan_submit,
        .epoch_finish = gpu_epoch_finish,
        .update_live = gpu_update_live,
        .reset_history = gpu_reset_history,
        .epoch_finish_async = gpu_epoch_finish_async,
        .epoch_wait = gpu_epoch_wait,
};
