/* SPDX-License-Identifier: MIT */
/*
 * Private declarations of the CUDA backend (gpu_): the host-side tables computed once per
 * configuration, the kernel launchers (gpu_kernels.cu) and the error helpers. Only gpu/ and
 * tests/gpu/ include this header; everyone else asks through backend.h (be_open, be_cuda_devices,
 * be_cuda_bandwidth) and ops.h (be_cuda_ops, be_cuda_multi_ops).
 */
#ifndef VOLREC_GPU_H
#define VOLREC_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>
#include <cufft.h>

#include "config/config.h"
#include "backend/motion.h"
#include "backend/views.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest S x S temporal weight table kept in constant memory (S <= 90); beyond it the
 * reconstruction always uses the E map. */
#define GPU_TTAB_MAX 8192
/* Spline resampling: half-width of the FIR that replaces the per-A-scan tridiagonal solve. */
#define GPU_SPLINE_R 17
/* Largest A-scans per B-scan for bscan_median and partial_median (bitonic sort of a column in
 * shared memory). */
#define GPU_MEDIAN_MAX_NX 8192
/* partial_median: A-scan chunks of the per-depth sums (summed in chunk order afterwards). */
#define GPU_PM_CHUNKS 16

/* ---- tables (gpu_tables.c): computed in double on the host, stored as float ------------- */

struct gpu_tables {
	uint32_t K;       /* samples per A-scan */
	uint32_t taps;    /* resampling taps per output sample: 0 = none, 2, 4, spline */
	int32_t *rs_idx;  /* [K] first input index of output j (clamped per tap on use) */
	float *rs_w;      /* [taps][K] weights, tap-major so that j is contiguous */
	float *window;    /* [K] */
	float *disp_re;   /* [K] window * cos(phi), NULL without dispersion */
	float *disp_im;   /* [K] -window * sin(phi), NULL without dispersion */
	float *reference; /* [K] background spectrum, NULL unless background is reference */
};

/* Compute every per-configuration table of cfg, a configuration the schema accepted (its
 * tables' lengths and values checked). On failure (memory) returns a negative errno with a
 * message in err and leaves t empty. Free with gpu_tables_free (accepts a zeroed struct). */
VR_MUST_CHECK int gpu_tables_build(const struct vr_config *cfg, struct gpu_tables *t, char *err,
                                   size_t errlen);
/* Only the live parts (window, dispersion) into an existing table set. */
VR_MUST_CHECK int gpu_tables_live(const struct vr_config *cfg, struct gpu_tables *t, char *err,
                                  size_t errlen);
void gpu_tables_free(struct gpu_tables *t);

/* ---- errors (gpu_backend.c) -------------------------------------------------------------- */

/* Turn a CUDA runtime status into 0 or a negative errno; on error writes "what: name (text)"
 * into err. Never exits. */
int gpu_cuda_check(cudaError_t e, const char *what, char *err, size_t errlen);
/* Same for a cuFFT status. */
int gpu_cufft_check(cufftResult r, const char *what, char *err, size_t errlen);
const char *gpu_cufft_name(cufftResult r);

/* ---- kernel launchers (gpu_kernels.cu): each returns the launch status ------------------ */

/* Parameters of the per-B-scan preprocessing, fixed between live updates. */
struct gpu_prep_params {
	int K, N, nx;    /* samples, FFT length, A-scans per B-scan */
	int sample_type; /* enum cfg_sample */
	int bit_shift;
	int background;   /* enum cfg_background */
	int taps;         /* 0: no resampling */
	bool complex_in;  /* dispersion: C2C input */
	int nz, z0, half; /* kept depths, first depth, N/2 */
	bool flip_z;
	float db_lo, db_inv; /* (d - lo) * inv, inv = 1 / (hi - lo) */
	double pm_threshold; /* partial_median: t */
};

/* Device scratch of one stream for partial_median (half = N / 2 depths). */
struct gpu_pm_buffers {
	double *part; /* [4][GPU_PM_CHUNKS][half] partial sums */
	float *sig;   /* [half] sigma[z] */
	int *list;    /* [half] depths that take the median */
	int *nsel;    /* their number */
	float2 *C;    /* [half] the value subtracted at each depth */
};

/* Device-side tables the preprocessing reads. */
struct gpu_prep_tables {
	const int32_t *rs_idx;
	const float *rs_w;
	const float *window;
	const float *disp_re, *disp_im; /* window folded in */
	const float *reference;
};

/* The missing A-scans of one B-scan (docs/algorithms.md §1.0; f32 samples only): row[x] != 0
 * for the A-scan at x of L_e (raw A-scan a at x = rev ? nx - 1 - a : a), *count of them. row
 * NULL: none can be missing (integer samples). */
struct gpu_miss {
	unsigned char *row;
	unsigned *count;
	bool rev;
};
/* Mark the A-scans that hold a NaN or an infinity in any of the nrep raw f32 B-scans at raw (a
 * position's repeats, one after another) into m (its count is set first). */
cudaError_t gpu_launch_nonfinite(const struct gpu_prep_params *p, const void *raw, int nrep,
                                 const struct gpu_miss *m, cudaStream_t s);
/* Fill the columns of the missing A-scans of the B-scan's row of L_e (lerow) from their
 * neighbours along the row (docs/algorithms.md §1.0). */
cudaError_t gpu_launch_fill_missing(const struct gpu_prep_params *p, const struct gpu_miss *m,
                                    float *lerow, cudaStream_t s);

/* Column statistic (bscan_mean / bscan_median) of one raw B-scan into col[K], over the A-scans
 * that are not missing (m). */
cudaError_t gpu_launch_colstat(const struct gpu_prep_params *p, const void *raw,
                               const struct gpu_miss *m, float *col, cudaStream_t s);
/* Convert + background (+ window/dispersion/zero padding when taps == 0) of one B-scan:
 * writes conv[nx][K] (taps > 0) or the FFT input fin (taps == 0). */
cudaError_t gpu_launch_convert(const struct gpu_prep_params *p, const struct gpu_prep_tables *t,
                               const void *raw, const struct gpu_miss *m, const float *col,
                               float *conv, void *fin, cudaStream_t s);
/* Resample conv[nx][K] and apply window/dispersion/zero padding into the FFT input. */
cudaError_t gpu_launch_resample(const struct gpu_prep_params *p, const struct gpu_prep_tables *t,
                                const float *conv, void *fin, cudaStream_t s);
/* partial_median (docs/algorithms.md §1b) on the spectra of one B-scan (after the FFT of the
 * mean-removed A-scans, as cpu/preprocess.c): per-depth sigma, sigma_bg, the depths above
 * p->pm_threshold * sigma_bg (their number into *count, or with count_max the larger of it and
 * *count: a later repeat of the position), their medians into m->C (0 elsewhere). spec has ld
 * complex values per A-scan. */
cudaError_t gpu_launch_partial_median(const struct gpu_prep_params *p, const float2 *spec, int ld,
                                      const struct gpu_pm_buffers *m, const struct gpu_miss *ms,
                                      unsigned *count, bool count_max, cudaStream_t s);
/* Magnitude (of X - C[z] when C is not NULL), log, normalize, flip z, crop into the B-scan's
 * rows of L_e (row = L_e + b*nx*nz); reverse_x writes A-scan a at nx-1-a. spec has ld complex
 * values per A-scan. */
cudaError_t gpu_launch_logmag(const struct gpu_prep_params *p, const float2 *spec, int ld,
                              bool reverse_x, const float2 *C, float *lerow, cudaStream_t s);
/* geometry.repeats M > 1 (docs/algorithms.md §5 step 1): |X - C[z]|^2 of one repeat, at the
 * places gpu_launch_logmag writes, into the position's rows (first: set, else added). */
cudaError_t gpu_launch_power_add(const struct gpu_prep_params *p, const float2 *spec, int ld,
                                 bool reverse_x, const float2 *C, bool first, float *lerow,
                                 cudaStream_t s);
/* After the last repeat: each value P of the position's rows (the sum of the repeats' power)
 * becomes the normalized dB of sqrtf(P * inv_m), in place. */
cudaError_t gpu_launch_logpower(const struct gpu_prep_params *p, float inv_m, float *lerow,
                                cudaStream_t s);

/* Output channels other than the structure (docs/algorithms.md §5) of one B-scan position,
 * from the functional.* keys when the position is queued. */
struct gpu_fn_params {
	int M, nx, nh, nz, z0; /* repeats, A-scans, N / 2 bins, output depths, first depth */
	bool flip_z;
	bool rev; /* the position runs against x (be_live_reversed) */
	/* the functional.* values of struct be_live (backend/ops.h), under its names */
	int fn_half_window;        /* functional.axial_half_window: h */
	float mask_db;             /* functional.mask_db (or its default) */
	bool angio, angio_svar;    /* angiography output; angio_method svar (else cdv) */
	float angio_lo, angio_inv; /* functional.angio.range: lo, 1 / (hi - lo) */
	bool doppler;              /* Doppler output */
	bool doppler_ascan;        /* doppler_axis ascan (else bscan) */
	bool doppler_bulk;         /* functional.doppler.bulk */
};
/* Repeat m's spectra X - C[z] (C NULL: X; all N / 2 bins, spec ld complex values per A-scan)
 * into the position's fspec [M][nx][N / 2]; with lerow (M > 1) also gpu_launch_power_add's
 * work in the same kernel (first: set). */
cudaError_t gpu_launch_fn_store(const struct gpu_prep_params *p, const float2 *spec, int ld,
                                bool reverse_x, const float2 *C, int m, float2 *fspec, float *lerow,
                                bool first, cudaStream_t s);
/* After the position's last repeat: per A-scan the mask keep [nx][N / 2] (its depth range) and
 * the bulk phases bulk [nx][M] (Doppler with functional.doppler.bulk); then angiography's v
 * into the position's rows la, Doppler's R into lre, lim and its phase into ph (may be NULL)
 * ([nx][nz] each, as L_e's rows), by the functions of backend/functional.h. */
cudaError_t gpu_launch_functional(const struct gpu_fn_params *f, const float2 *fspec,
                                  unsigned char *keep, float2 *bulk, float *la, float *lre,
                                  float *lim, float *ph, cudaStream_t s);
/* Doppler's phase (be_fn_phase) of n values re + i im into ph. */
cudaError_t gpu_launch_fn_phase(const float *re, const float *im, float *ph, size_t n,
                                cudaStream_t s);
/* Doppler's v (be_fn_doppler_v) of n values re + i im: u8 into out8, float into outf (may be
 * NULL). */
cudaError_t gpu_launch_doppler_v(const float *re, const float *im, size_t n, uint8_t *out8,
                                 float *outf, cudaStream_t s);

/* Parameters of the reconstruction of one epoch. */
struct gpu_recon_params {
	int nx, ny, nz;  /* low resolution */
	int sx, sy, S;   /* strides */
	int X, Y;        /* full resolution (Z = nz) */
	int ox, oy;      /* this epoch's offset */
	int qe;          /* e mod S (row of the constant table) */
	long long epoch; /* e, for E and ages */
	bool fast;       /* use the S x S constant table instead of E */
	bool product;    /* combine: product (else sum) */
	int temporal;    /* enum cfg_temporal (E path) */
	double tau;      /* exp temporal (E path) */
	/* z profile of the CPU reference (cpu/recon.c): g1 = gz(1) / gz(0), and by the number
	 * nv of depths z-1, z, z+1 inside [0, Z), index nv - 1: 1 / (1 + g1 (nv - 1)) and 1 / nv */
	float g1;
	float inv_gz[3], inv_nz[3];
	/* reconstruct.mode adaptive (docs/algorithms.md §2b) */
	bool adaptive;
	int depth_half_window; /* h: 2h + 1 bins averaged */
	double k2;             /* tolerance^2 */
	double ks2;            /* speckle_tolerance^2 (0: beta = 0) */
};

/* Per-column weights of the reconstruction (gpu_launch_weights): for output column (Y, X),
 * neighbour column n = (dy + 1) * 3 + dx + 1: [n] = g_n / sum g (sum) or g_n t_n / sum g t
 * (product), [9 + n] = t_n / sum t (sum only), 0 for a neighbour outside the volume or with
 * t_n = 0; [18] the adaptive mode's history weight alpha of the column (0 otherwise), [19]
 * its weight beta of the column's own history sample (0 otherwise). */
#define GPU_WCOL 20
/* Output rows per thread of the reconstruction kernel; slabs are multiples of it. */
#define GPU_RECON_ROWS 4

/* Write L_e into B at the epoch's positions and set E there: the epoch, or -1 where the A-scan
 * was missing (miss [ny][nx], NULL: none); E NULL: only B (a functional channel's plane). */
cudaError_t gpu_launch_interlace(const struct gpu_recon_params *p, const float *le,
                                 const unsigned char *miss, float *B, long long *E, cudaStream_t s);
/* Temporal weight map tmap[Y][X] from E (the E path). */
cudaError_t gpu_launch_tmap(const struct gpu_recon_params *p, const long long *E, float *tmap,
                            cudaStream_t s);
/* Adaptive mode, before the interlace: the change measures chg[2][ny][nx] (d, then d1) of each
 * new sample of le against the history B at its full-resolution position (E < 0 there:
 * BE_ADAPT_UNKNOWN): the differences transposed into delta (scratch of ny * nx * nz floats,
 * [nz][ny * nx]), then one thread per sample with a running depth window (d) and the bin-wise
 * sum (d1), in double as cpu/recon.c computes them. */
cudaError_t gpu_launch_adapt_change(const struct gpu_recon_params *p, const float *le,
                                    const float *B, const long long *E, float *delta, float *chg,
                                    cudaStream_t s);
/* Adaptive mode, after the interlace: the epoch's interpolation axes axy[X + Y] (entry X for
 * column X, entry X + Y for row Y: {i0, i1, bits of t, 0}, be_interp_axis computed on the
 * device in double) and aoff[X + Y] (the offsets of those columns and rows in L_e: i * Z for a
 * column, i * nx * Z for a row), then per column the history weight alpha[Y][X] and the
 * temporal weights tmap[Y][X] scaled by the change (t' of docs/algorithms.md §2b), and the
 * weight beta[Y][X] of each column's own history sample; since (NULL: none): the jump
 * recovery's epoch, from which a column's sample counts as unchanged (gpu_launch_jump). */
cudaError_t gpu_launch_adapt_weights(const struct gpu_recon_params *p, const long long *E,
                                     const float *chg, const long long *since, int4 *axy,
                                     longlong2 *aoff, float *alpha, float *beta, float *tmap,
                                     cudaStream_t s);
struct be_jump;
/* Adaptive mode, jump recovery (docs/algorithms.md §2b, backend/jump.h), after
 * gpu_launch_adapt_change: the sums of le (its samples not missing, miss [ny][nx]) along each
 * row into rows [ny][nz], then in one block their sum over the rows and the counts of the
 * samples not missing, known and still (chg), and in one thread be_jump_decide on the state
 * j with the mean A-scans mean [2][nz] (the last epoch's, this epoch's) and *since =
 * be_jump_since, all in double as cpu/recon.c computes them. */
cudaError_t gpu_launch_jump(const struct gpu_recon_params *p, const float *le,
                            const unsigned char *miss, const float *chg, double *rows, double *mean,
                            struct be_jump *j, long long *since, cudaStream_t s);
/* Upload the S x S table (row qe: weights by phase) and the 4 spatial weights by |d|^2. */
cudaError_t gpu_upload_constants(const float *ttab, size_t n, const float g[4], cudaStream_t s);
/* The per-column weights W[Y][X][GPU_WCOL] of this epoch, from the S x S table (p->fast)
 * or from tmap, in double as the CPU reference computes them; alpha and beta (adaptive, else
 * NULL) go into [18] and [19]. */
cudaError_t gpu_launch_weights(const struct gpu_recon_params *p, const float *tmap,
                               const float *alpha, const float *beta, float *W, cudaStream_t s);
/* The 3x3x3 kernel on rows [y0, y1) of B with the weights W: u8 into out8 (full volume
 * base, may be NULL), float into outf (full volume base, may be NULL). Adaptive (p->adaptive): blended
 * with the column of B by W[19], then with the bilinear interpolation of le on the axes axy,
 * aoff (gpu_launch_adapt_weights) by W[18]. */
cudaError_t gpu_launch_recon(const struct gpu_recon_params *p, const float *B, const float *W,
                             const float *le, const int4 *axy, const longlong2 *aoff, int y0,
                             int y1, uint8_t *out8, float *outf, cudaStream_t s);
/* Quantize n floats to u8 (mode none). */
cudaError_t gpu_launch_quantize(const float *in, uint8_t *out, size_t n, cudaStream_t s);

/* ---- compensated mode (docs/algorithms.md §2c), gpu_kernels.cu ---------------------------
 * The host estimator (backend/motion.c) is fed by the device reductions below; the output
 * combines the history slots hist [slots][ny][nx][nz] with the kriging weights of
 * be_motion_column, computed on the device. */

/* Chunks of A-scans of the mean A-scan's partial sums (summed in chunk order afterwards). */
#define GPU_PROF_CHUNKS 64

/* The mean A-scan prof[nz] (double) of L_e [n][nz] (n = ny * nx A-scans): per depth, sums in
 * double over GPU_PROF_CHUNKS chunks of A-scans into part [chunks][nz], then the chunks in
 * order, divided by n. */
cudaError_t gpu_launch_motion_profile(const float *le, size_t n, int nz, double *part, double *prof,
                                      cudaStream_t s);
/* be_motion_bands on the device: Be[node][b] of L_e shifted by the entry-like shift e (k, fa,
 * fb; be_motion_shift_of(-dz)), each band summed in double in the CPU's order. */
cudaError_t gpu_launch_motion_bands(const float *le, size_t n, int nz,
                                    const struct be_motion_entry *e, float *Be, cudaStream_t s);
/* The interpolation axes axy, aoff of this epoch (gpu_launch_adapt_weights' first kernel). */
cudaError_t gpu_launch_axes(const struct gpu_recon_params *p, int4 *axy, longlong2 *aoff,
                            cudaStream_t s);
/* The picks of the output columns of rows [y0, y1): pk from the entries en[0..ne), and pkr
 * from en[0..nref) when nref > 0 (be_motion_column, one thread per column). */
cudaError_t gpu_launch_motion_picks(const struct be_motion_geom *g,
                                    const struct be_motion_entry *en, uint32_t ne, uint32_t nref,
                                    int y0, int y1, struct be_motion_pick *pk,
                                    struct be_motion_pick *pkr, cudaStream_t s);
/* The output of rows [y0, y1): per column the kriging combination of its picks pk over the
 * history (where it has none, the bilinear interpolation of le on the axes axy, aoff), every
 * product and sum rounded as cpu/motion.c rounds them, u8 into out8 and float into outf (may
 * be NULL); when ob is not NULL, the output's band means (double) into ob [Y][X][NB] (the
 * reference before there are enough entries). */
cudaError_t gpu_launch_motion(const struct gpu_recon_params *p, const float *hist,
                              const struct be_motion_entry *en, const struct be_motion_pick *pk,
                              const float *le, const int4 *axy, const longlong2 *aoff, int y0,
                              int y1, uint8_t *out8, float *outf, float *ob, cudaStream_t s);
/* The entry bands eb [ne][n][NB] of the ne entries en (be_motion_entry_bands of each entry's
 * slot of hist, n A-scans of nz bins each). */
cudaError_t gpu_launch_motion_ebands(const float *hist, const struct be_motion_entry *en,
                                     uint32_t ne, size_t n, int nz, float *eb, cudaStream_t s);
/* The reference bands ob [Y][X][NB] of every column (be_motion_ref_column) from the reference
 * picks pkr, the entry bands eb of ne entries (the last: this epoch) and the axes axy. */
cudaError_t gpu_launch_motion_ref(const struct be_motion_geom *g, const struct be_motion_pick *pkr,
                                  const float *eb, uint32_t ne, const int4 *axy, float *ob,
                                  cudaStream_t s);
/* The reference bands ob [Y][X][NB] blurred into out as be_motion_set_reference blurs them,
 * with the taps k[0 .. 2r] of be_motion_blur_taps (bit for bit; tmp: scratch of ob's size;
 * out may be mapped host memory). */
cudaError_t gpu_launch_motion_blur(const struct be_motion_geom *g, const double *k, int r,
                                   const float *ob, float *tmp, float *out, cudaStream_t s);
/* n floats from src to dst by a kernel (on the stream's priority, not the copy engines). */
cudaError_t gpu_launch_copy(const float *src, float *dst, size_t n, cudaStream_t s);
/* Local memory per thread of the picks kernel (be_motion_column's arrays), for the budget. */
#define GPU_MOTION_LMEM 6144

/* ---- views (gpu_views.cu), docs/algorithms.md §4 -------------------------------------------- */

/* En-face mean and max over p->slab and the plane at p->position[2], each [Y][X] on the device
 * (any may be NULL), from the u8 volume V on the device. */
cudaError_t gpu_launch_enface(const uint8_t *V, const struct be_view_params *p, uint8_t *mean,
                              uint8_t *mx, uint8_t *plane, cudaStream_t s);
/* The MIP render [H][W] of V with the camera r (be_render_setup of p) into out; acc is
 * H * W words of scratch on the device. Only the samples whose trilinear interpolation starts
 * at a row y in [ry0, ry1) count (rows ry0 .. ry1 of V are read; [0, Y) is the whole render):
 * the maximum of the renders of row ranges that cover [0, Y) is the render of the whole. */
cudaError_t gpu_launch_render(const uint8_t *V, const struct be_view_params *p,
                              const struct be_render_setup *r, uint32_t ry0, uint32_t ry1,
                              unsigned *acc, uint8_t *out, cudaStream_t s);

/* The reduced volume of docs/algorithms.md §4.5 (p->volume_max_side > 0): the rows [ry0, ry1)
 * of V combined into acc (be_volume_dims' Yr * Xr * Zr words on the device, zeroed first: the
 * maxima, or the sums for a mean), then, when out is not NULL, acc as u8 into out on the
 * device ([0, Y): the whole volume view). */
cudaError_t gpu_launch_volume(const uint8_t *V, const struct be_view_params *p, uint32_t ry0,
                              uint32_t ry1, unsigned long long *acc, uint8_t *out, cudaStream_t s);

/* ---- one part of several devices (gpu_backend.c for gpu_multi.c) -------------------------
 * The composite backend over gpu.devices (gpu_multi.c, be_cuda_multi_ops) owns one ordinary
 * CUDA backend state per entry, each a part: part k of n reconstructs the output rows of the
 * B-scans [b0, b1) (rows [b0 sy, b1 sy) of a reconstructed volume, [b0, b1) in mode none),
 * preprocesses the B-scans those rows need ([blo, bhi): gpu_part_bscans) and copies only its
 * rows, its B-scans' low-resolution rows and median counts, and its rows of the views into the
 * caller's buffers; its render covers the samples that start in its rows (gpu_part_render).
 * It is driven through be_cuda_ops' functions on the state gpu_part_create gives. */

struct gpu_state;

struct gpu_part {
	uint32_t index, count; /* part index of count (count 1: the whole volume) */
	uint32_t b0, b1;       /* its B-scans' rows: [b0, b1) */
};

/* Create part *part of cfg on CUDA device cfg->gpu.device (be_cuda_ops.create's contract). */
VR_MUST_CHECK int gpu_part_create(const struct vr_config *cfg, const struct gpu_part *part,
                                  struct gpu_state **st, char *err, size_t errlen);
/* The B-scans the part preprocesses: [*lo, *hi). */
void gpu_part_bscans(const struct gpu_state *st, uint32_t *lo, uint32_t *hi);
/* The device's name (cudaGetDeviceProperties). */
const char *gpu_part_name(const struct gpu_state *st);
/* Whether a B-scan of the epoch being submitted failed on this part (its epoch_finish reports
 * it). */
bool gpu_part_failed(const struct gpu_state *st);
/* Drop the epoch being submitted without finishing it (another part failed): wait for its
 * queued preprocessing; the part's history is as if the epoch never came, unless it was queued
 * ahead (gpu_part_ahead: the caller then resets every part's history). \return 0 or the CUDA
 * error with err. */
int gpu_part_drop(struct gpu_state *st, char *err, size_t errlen);
/* With epoch in flight on every part and none failed: queue the next epoch ahead on this part
 * (as one device does in its epoch_wait), before waiting for any part. \return whether the
 * part's history changed: queued, or failed (reported by the next finish) and reset. */
bool gpu_part_ahead(struct gpu_state *st, uint64_t epoch);
/* The part's render of the epoch last waited for ([H][W] maxima of its rows, host memory), or
 * NULL when that epoch asked for none. */
const uint8_t *gpu_part_render(const struct gpu_state *st);
/* The part's reduced-volume accumulators of the epoch last waited for (host memory, [Yr][Xr][Zr]
 * words: the maxima or sums over its own rows), valid in the block rows [rows[0], rows[1]);
 * NULL when that epoch asked for none. */
const unsigned long long *gpu_part_volume(const struct gpu_state *st, uint32_t rows[2]);
/* Output rows of the part when mode none is in force (none) or not: the rows it owns
 * [*r0, *r1) and those its state must hold from the other parts after each cumulative epoch
 * (its halo): [*h0, *r0) and [*r1, *h1). */
void gpu_part_rows(const struct gpu_state *st, bool none, uint32_t *r0, uint32_t *r1, uint32_t *h0,
                   uint32_t *h1);
/* Copy row y of src's history (the cumulative output it just made) into dst's, queued on dst;
 * gpu_part_halo_wait(dst) waits for dst's copies, which must land before src's next epoch
 * writes its history. Both between epochs. \return 0 or the CUDA error with err. */
int gpu_part_halo(struct gpu_state *dst, const struct gpu_state *src, uint32_t y, char *err,
                  size_t errlen);
int gpu_part_halo_wait(struct gpu_state *dst, char *err, size_t errlen);

/* The compensated mode's estimator of a state (NULL until that mode is first used), for tests:
 * be_motion_last_pose. */
const struct be_motion *gpu_part_motion(const struct gpu_state *st);

/* gpu_bench.c defines backend.h's be_cuda_devices, be_cuda_bandwidth and
 * be_cuda_links_bandwidth (the copy bandwidths benchmarks compare with). */

#ifdef __cplusplus
}
#endif

/* The reconstruction settings the kernels do not implement yet (docs/gpu.md):
 * reconstruct.mode registered (also checked by every live update). \return 0 or -ENOTSUP with
 * the message in err. */
int gpu_recon_supported(const struct vr_config *cfg, char *err, size_t errlen);

#endif
