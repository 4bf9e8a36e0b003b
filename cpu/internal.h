/* SPDX-License-Identifier: MIT */
/*
 * Private declarations of the CPU reference backend (cpu_): the per-configuration tables
 * (window, resampling, dispersion, reconstruction weights), the state, and the pure helpers
 * the unit tests check against docs/algorithms.md (which says what was chosen).
 */
#ifndef VOLREC_CPU_INTERNAL_H
#define VOLREC_CPU_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <fftw3.h>

#include "backend/jump.h"
#include "backend/motion.h"
#include "backend/ops.h"
#include "backend/register.h"
#include "backend/views.h"
#include "config/config.h"

#define CPU_BATCH       8 /* A-scans per FFT call (fftwf_plan_many_dft*) */
#define CPU_MAX_THREADS 256
/* Planes of the functional channels: angiography, Doppler re, Doppler im. */
enum { CPU_PL_ANGIO, CPU_PL_DRE, CPU_PL_DIM, CPU_FN_PLANES };

/* Everything derived from the live parameters, rebuilt by cpu_params_build without allocating:
 * the arrays have K entries and belong to the state. */
struct cpu_params {
	struct be_live live;      /* the live scalars (be_live_init) */
	float *bg_ref;            /* [K] reference spectrum (mode reference) */
	int32_t *rs_idx;          /* [K] base index: linear/spline i = floor(p), cubic i - 1 */
	float *rs_w;              /* [K][4] weights (linear: 2 used; spline: A, B, C, D) */
	float *spl_c;             /* [K] Thomas coefficients of the natural spline (1 4 1) system */
	float *win;               /* [K] window */
	float *disp_re, *disp_im; /* [K] win[j] * exp(-i phi[j]) (live.dispersion) */
	float gxy[9]; /* live.g laid out: weight of (dx, dy), index (dy + 1) * 3 + dx + 1 */
	float gz[3];  /* live.g laid out: weight of dz, index dz + 1 */
};

struct cpu_state;

/* Per-thread scratch, allocated once. */
struct cpu_worker {
	struct cpu_state *st;
	float *conv;         /* [K] converted A-scan */
	float *rsout;        /* [K] resampled A-scan */
	double *dacc;        /* [K] B-scan mean accumulator */
	float *spl_m;        /* [K] spline second derivatives */
	float *med;          /* [nx] median scratch */
	fftwf_complex *fin;  /* FFT input, CPU_BATCH x N complex (or real) */
	fftwf_complex *fout; /* FFT output, CPU_BATCH x N complex */
	float *ring;         /* recon: 3 rows x X x 2 x Z z-smoothed columns */
	float *acc;          /* recon: 2 x Z accumulators (compensated: 3) */
	/* partial_median (cpu_pm_alloc; NULL until that mode is first used) */
	fftwf_complex *spec; /* [nx][nh] the B-scan's spectra */
	double *pm_acc;      /* [4][nh] shifted sums of Re, Im, Re^2, Im^2 over the A-scans */
	float *pm_sig;       /* [nh] sigma[z], then a copy for the median over z */
	float *pm_c;         /* [nh][2] C[z]: the value subtracted at depth z */
	float *pow;          /* M > 1: [nx][nh] sum over the repeats of |X_m[z]|^2 */
	/* channels other than the structure (docs/algorithms.md §5; NULL otherwise) */
	fftwf_complex *fspec; /* [M][cpu_fspec_rows][N]: the spectra of one position's repeats */
	uint8_t *keep;        /* [nx][nh] the structure at or above functional.mask_db */
	float *fn_scratch;    /* [CPU_FN_SCRATCH_ROWS][nh] cpu_fn_mask's and cpu_fn_ascan's */
};

/* ---- functional OCT (cpu/functional.c, docs/algorithms.md §5) ---- */

/* A-scan rows of each repeat in a worker's fspec: nx rounded up to whole FFT batches. */
static inline size_t cpu_fspec_rows(const struct be_geometry *g)
{
	return (g->nx + CPU_BATCH - 1) / CPU_BATCH * CPU_BATCH;
}

#define CPU_FN_SCRATCH_ROWS 9               /* rows of nh floats of a worker's fn_scratch */
#define CPU_FN_CHUNK        (4 * CPU_BATCH) /* A-scans of a position processed together */

/* functional.mask_db, and the powers beyond which a bin is kept (P > hi) or dropped (P < lo)
 * whatever the rounding of its dB (cpu_fn_mask_init). */
struct cpu_fn_mask {
	float mask_db;
	float lo, hi;
};
void cpu_fn_mask_init(struct cpu_fn_mask *mk, float mask_db);

/* keep[z] = be_fn_structure_db(...) >= mask_db for bins z0..z1-1 of one A-scan, whose repeats'
 * sum of power (the structure's, cpu/preprocess.c) is pow[z] with M > 1, whose spectrum is Xa
 * (re, im pairs) with M = 1 (pow NULL); scratch: nh floats. The same answer as be_fn_power and
 * be_fn_structure_db, with the logarithm only near mask_db. */
void cpu_fn_mask(const struct cpu_fn_mask *mk, const float *Xa, const float *pow, uint32_t M,
                 uint32_t z0, uint32_t z1, float *scratch, uint8_t *keep);

/* One position's A-scans for cpu_fn_ascan. */
struct cpu_fn_ascan {
	const struct be_live *live; /* the functional.* keys and flip.z */
	const float *X;             /* (re, im) pairs: A-scan a of repeat m at 2 (m rs + a xs) */
	const uint8_t *keep;        /* [nx][nh] the mask, bins zb0..zb0+nz-1 */
	uint32_t M, nx, nh;
	size_t xs, rs;    /* A-scan to A-scan and repeat to repeat in X, complex values */
	uint32_t zb0, nz; /* the depth range in source bins (before the flip) */
	float *scratch;   /* CPU_FN_SCRATCH_ROWS x nh floats */
};

/* A-scan a's angiography v (angio: nz values in the output's order, or NULL) and Doppler's R
 * (dre, dim, or NULL) as be_fn_svar, be_fn_cdv, be_fn_bulk and be_fn_lag compute them per
 * voxel (bit for bit), masked, flipped and normalized as docs/algorithms.md §5 says. */
void cpu_fn_ascan(const struct cpu_fn_ascan *p, uint32_t a, float *angio, float *dre, float *dim);

/* be_fn_phase with atan2 as a polynomial (vectorizable), for the CPU backend's Doppler: within
 * 2.8e-7 rad of atan2 (measured, docs/algorithms.md §5); not finite: be_fn_phase's value. */
float cpu_fn_phase(float re, float im);

/* Doppler's outputs of n voxels of R = re + i im: the phase (cpu_fn_phase) into phase, the
 * stored v = (phase + π) / (2π) into v and its u8 into u8 (each may be NULL). */
void cpu_fn_doppler_row(const float *re, const float *im, size_t n, float *phase, float *v,
                        uint8_t *u8);

/* The views of each volume (cpu/views.c), parameters from the live configuration. */
struct cpu_views {
	bool enabled;
	bool valid; /* p lies inside the volume (else why says how not) */
	char why[256];
	struct be_view_params p;   /* current parameters */
	struct be_render_setup rs; /* camera of p */
	uint8_t *last_render;      /* [VOLREC_RENDER_MAX^2] the last render computed */
	uint8_t *next_render;      /* [VOLREC_RENDER_MAX^2] the one being computed */
	/* the render in progress (rbusy): of a copy of the volume it began with, rows [0, rrow)
	 * done; it goes on with the next volume that asks for a render */
	bool rbusy;
	uint32_t rrow;
	uint64_t rid;
	struct be_view_params rp;
	struct be_render_setup rrs;
	uint8_t *rvol;
	size_t rvol_size;
	struct be_view_params last_p;
	uint64_t last_id; /* volume it shows */
	bool have_last;
};

struct cpu_state {
	struct be_geometry geo;
	unsigned nthreads;

	struct cpu_params p;
	struct cpu_views views;
	double *pos_tmp; /* [K] positions while (re)building, in double */

	fftwf_plan plan_r2c, plan_c2c; /* CPU_BATCH transforms of length N, made once */
	struct cpu_worker *workers;    /* [nthreads] */

	const void **raw;   /* [nraw] submitted raw B-scans of the current epoch */
	uint32_t *pm_count; /* [nraw] depths that took the median (partial_median), this epoch */
	bool pm_ready;      /* the workers' partial_median buffers exist */
	float *bgspec;      /* [nraw] [K] raw B-scan background spectra */
	float *lowres;      /* [ny][nx][nz] when the caller wants none */
	/* the planes of the channels other than the structure (docs/algorithms.md §5 step 5;
	 * NULL when not output): angiography's v, Doppler's re and im of R */
	bool functional;           /* any of them */
	float *lpl[CPU_FN_PLANES]; /* [ny][nx][nz] low-resolution (when the caller wants none) */
	float *bpl[CPU_FN_PLANES]; /* [Y][X][Z] as bvol */
	float *opl[CPU_FN_PLANES]; /* [Y][X][Z] as ovol */
	float *dres[2];            /* Doppler: [Y][X][Z] reconstructed re and im */
	float *bvol;               /* [Y][X][Z]: M (noncumulative) or B (cumulative) */
	float *ovol;               /* [Y][X][Z]: last output (cumulative) */
	int64_t *E;                /* [Y][X] epoch last written, -1 never */
	float *tcol;               /* [Y][X] temporal weight of this epoch */
	float *inv_gz;             /* [Z] 1 / sum of gz over the valid dz at z */
	float *inv_nz;             /* [Z] 1 / number of valid dz at z */
	float *chg;   /* adaptive: [2][ny][nx] change measures d and d1 of the samples */
	float *alpha; /* adaptive: [Y][X] weight of the history estimate */
	float *beta;  /* adaptive: [Y][X] weight of the column's own history sample */
	/* adaptive, jump recovery (docs/algorithms.md §2b): the state of backend/jump.h and the
	 * mean A-scans it compares */
	struct be_jump jump;
	double *jmean; /* [3][nz]: the last epoch's mean, this epoch's sum, a row's sum */

	/* A-scans with a non-finite sample this epoch (docs/algorithms.md §1.0), per position: an
	 * A-scan missing in any repeat is missing */
	uint8_t *miss;        /* [ny][nx], x as in L_e: missing */
	uint32_t *miss_count; /* [ny] per B-scan position */
	/* registered (docs/algorithms.md §2d; NULL until that mode is first used): the plane's
	 * shift at each column when it was written, the history carried into this epoch's frame,
	 * the cumulative plane, whether ovol holds the last output, and per sample scratch of
	 * the registration */
	float *rsh;                        /* [Y][X] */
	float *rhist;                      /* [Y][X][Z] */
	struct be_reg_plane rpose, rdelta; /* cumulative; this epoch's increment */
	bool rhave;
	double *rd, *rw;     /* [ny][nx] shifts and weights */
	uint32_t *rys, *rxs; /* [ny][nx] their columns */
	/* compensated (cpu/motion.c; NULL until that mode is first used) */
	struct be_motion *motion;
	float *mhist; /* [slots][ny][nx][nz] low-resolution volumes of the history */
	float *mref;  /* [Y][X][NB] the registration's reference of this epoch */
	float *meb;   /* [slots][ny][nx][NB] the entry bands of this epoch's entries */
	struct be_motion_entry *ment; /* [slots] this epoch's entries */
	uint32_t mne, mnref;          /* entries of the output, of the reference */
	double *mprof;                /* [nz] this epoch's mean A-scan */
	const float *mcur;            /* this epoch's L while its pose is estimated */

	char device[128];
};

/* registered: its buffers (once; docs/algorithms.md §2d). */
int cpu_register_alloc(struct cpu_state *st, char *err, size_t errlen);

/* Median of n values (reorders v); for even n the mean of the two middle ones. */
float cpu_median(float *v, size_t n);

/* (Re)build the live tables of st->p from cfg; touches nothing on failure. */
int cpu_params_build(struct cpu_state *st, const struct vr_config *cfg, char *err, size_t errlen);

/* Resample x (K values) into y through the configured kernel (m: K floats of scratch). */
void cpu_resample(const struct cpu_params *p, uint32_t K, const float *x, float *y, float *m);

/* Preprocess every submitted B-scan of the epoch into L (docs/algorithms.md §1, steps 1-9)
 * and, with functional channels, into Lf[CPU_PL_*] (§5; NULL for a plane not output); with
 * mode none also writes the structure's u8 and float outputs. */
void cpu_preprocess_epoch(struct cpu_state *st, float *L, float *const Lf[CPU_FN_PLANES],
                          const struct be_output *out);

/* docs/algorithms.md §1.0: fill the columns of the missing A-scans (miss[x] != 0) of one
 * B-scan row of L_e (nx columns of nz) from the nearest others along the row. */
void cpu_fill_missing_row(const uint8_t *miss, uint32_t nx, uint32_t nz, float *row);

/* Reconstruct epoch e from L (docs/algorithms.md §2) into out, and the functional planes Lf
 * with the structure's weights (§5 step 5). */
void cpu_recon_epoch(struct cpu_state *st, uint64_t e, const float *L,
                     float *const Lf[CPU_FN_PLANES], const struct be_output *out);

/* Newest epoch at column (yy, xx): the bilinear interpolation of L over the epoch's sample
 * grid (docs/algorithms.md §2b step 6) into c[nz]. */
void cpu_current_column(const struct cpu_state *st, const float *L, uint32_t ox, uint32_t oy,
                        uint32_t yy, uint32_t xx, float *c);

/* compensated (docs/algorithms.md §2c): allocate the history (once; nothing when it exists;
 * -ENOMEM with err), free it, and reconstruct epoch e from L into out (0, or an error). */
int cpu_motion_alloc(struct cpu_state *st, char *err, size_t errlen);
void cpu_motion_free(struct cpu_state *st);
int cpu_motion_epoch(struct cpu_state *st, uint64_t e, const float *L, const struct be_output *out,
                     char *err, size_t errlen);

/* Run fn(worker, item) for item = 0..n-1 on the state's threads. */
void cpu_parallel(struct cpu_state *st, size_t n,
                  void (*fn)(struct cpu_worker *w, size_t item, void *ctx), void *ctx);

/* The u8 output q[0..n) of the normalized column v[0..n). */
static inline void cpu_quantize(uint8_t *q, const float *v, uint32_t n)
{
	for (uint32_t z = 0; z < n; z++)
		q[z] = (uint8_t)(int)(255.0f * v[z] + 0.5f); /* v in [0, 1]: truncation is floor */
}

/* Set up st->views from cfg (create and live updates). \return 0 or -ENOMEM with the message
 * in err. */
int cpu_views_setup(struct cpu_state *st, const struct vr_config *cfg, char *err, size_t errlen);
/* The views of the u8 volume out->volume into out->views (out->view_mask). \return 0, or
 * -EINVAL when the view parameters lie outside the volume (message in err). */
int cpu_views_epoch(struct cpu_state *st, const struct be_output *out, char *err, size_t errlen);
void cpu_views_free(struct cpu_state *st);
/* The views of docs/algorithms.md §4 of the u8 volume V (p checked by be_view_check, r from
 * be_render_setup(p)) into out[v] (be_view_size bytes each; a NULL entry is skipped). */
void cpu_views_compute(const uint8_t *V, const struct be_view_params *p,
                       const struct be_render_setup *r, uint8_t *const out[BE_VIEW_COUNT]);
/* The reduced volume of docs/algorithms.md §4.5 of V into out (be_view_size(p, BE_VIEW_VOLUME)
 * bytes, [Yr][Xr][Zr]); nothing when p->volume_max_side is 0. */
void cpu_volume_reduce(const uint8_t *V, const struct be_view_params *p, uint8_t *out);
/* The render alone into out (H x W), from row *row on, stopped between two rows once
 * deadline_ns (CLOCK_MONOTONIC, 0: none) has passed (*row: the next row to do).
 * \return whether it is whole. */
bool cpu_render(const uint8_t *V, const struct be_view_params *p, const struct be_render_setup *r,
                uint8_t *out, uint32_t *row, uint64_t deadline_ns);

#endif
