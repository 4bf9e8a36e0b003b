/* SPDX-License-Identifier: MIT */
/*
 * The CUDA backend against the CPU reference: for configurations covering every option, on
 * random raw inputs (u16/i16/f32) and on simulator output, at small and at the paper's
 * geometry, /lowres within 1e-4 relative and u8 within 1 LSB on >= 99.9 % of voxels, epoch by
 * epoch, through epoch_finish and through the asynchronous interface with interleaved epochs,
 * every reconstruction mode (the motion-adaptive and motion-compensated ones on moving
 * simulator scenes too). The compensated mode's poses come from the host's estimator fed by
 * device reductions (the registration bands equal the host's bit for bit, the mean A-scan
 * within the rounding of its double sums) and its kriging weights from the same code in double
 * on the device (exp and contractions within a few double ulps, rounded to float): its
 * outputs meet the limits above, and its poses must agree within POSE_TOL.
 * With --devices LIST (gpu.devices, e.g. 0,0: one GPU used as two) the CUDA side is the
 * backend over those devices, compared with the CPU as above and with one device bit for bit
 * (volume, L_e, float volume, median counts, every view).
 * First checks the host-side resampling tables (no device needed). Exit 0 all pass, 1 a
 * failure, 2 usage, 77 no CUDA device (skip).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <volrec/protocol.h>

#include "backend/backend.h"
#include "backend/motion.h"
#include "backend/ops.h"
#include "base/base.h"
#include "config/config.h"
#include "cpu/internal.h"
#include "gpu/gpu.h"
#include "sources/sim.h"

#define LOWRES_TOL      1e-4
#define U8_MIN_FRACTION 0.999
#define POSE_TOL                                                                                   \
	5e-5 /* compensated: rad (rotation), pixels and bins (shifts);
                              * measured 3.7e-6 on the simulator (H200) */

/* Random samples; random samples with strong lines at fixed and at A-scan-dependent depths
 * (partial_median: depths where the median differs from the mean); the simulator; random f32
 * samples (or lines) with NaNs and infinities (docs/algorithms.md §1.0: missing A-scans). */
/* IN_REPEATS: per position and A-scan a random base spectrum, each repeat the base plus noise of
 * a strength drawn per A-scan (0, 2 %, 20 %, all noise: static tissue and flow side by side),
 * so that angiography and Doppler span their ranges (docs/algorithms.md §5). */
enum input { IN_RANDOM, IN_LINES, IN_SIM, IN_NONFINITE, IN_LINES_NONFINITE, IN_REPEATS };

/* What a case changes in the running pipeline between epochs (EV_LIVE_PM: into
 * partial_median with threshold 3). */
/* EV_FULL_SOME (async cases): the float output on epochs e % 3 == 2 only, so that the CUDA
 * backend's queue ahead (an epoch's slabs queued while the last one's volume streams down, not
 * after an epoch that copies the float output) runs, runs without the float output the epoch
 * then asks for, and does not run */
enum event { EV_NONE, EV_LIVE, EV_RESET, EV_GAP, EV_LIVE_PM, EV_FULL_SOME };

struct tcase {
	const char *name;
	bool paper; /* the paper's geometry (skipped by --small) */
	enum input input;
	unsigned epochs;
	bool want_full; /* also ask for the float output volume */
	void (*setup)(struct vr_config *c);
	enum event ev; /* applied once, after epochs / 2 (but EV_FULL_SOME) */
	bool async;    /* epoch e+1 submitted while e is in flight (be_epoch_finish_async) */
	void (*live)(struct vr_config *c); /* EV_LIVE's change (NULL: live_change) */
};

/* ---- helpers ------------------------------------------------------------------------------ */

/* --devices: the CUDA side runs over these (multi_n 0: one device, gpu.device) */
static int multi_devs[CFG_GPU_DEVICES_MAX];
static uint32_t multi_n;

/* c over the --devices list. */
static void set_devices(struct vr_config *c)
{
	c->gpu.ndevices = multi_n;
	for (uint32_t i = 0; i < multi_n; i++)
		c->gpu.devices[i] = multi_devs[i];
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng_next(void)
{
	/* splitmix64 */
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static double rng_unit(void)
{
	return (double)(rng_next() >> 11) / (double)(1ull << 53);
}

static double *table_new(size_t n)
{
	double *d = malloc(n * sizeof(double));
	if (!d) {
		fprintf(stderr, "gpu_equal: out of memory\n");
		exit(1);
	}
	return d;
}

static void set_table(struct cfg_table *t, double *data, size_t n, const char *what)
{
	t->data = data;
	t->len = n;
	snprintf(t->path, sizeof(t->path), "(generated %s)", what);
}

static void geom(struct vr_config *c, uint32_t K, uint32_t nx, uint32_t ny, uint32_t sx,
                 uint32_t sy, enum cfg_sample t)
{
	c->geometry.samples_per_ascan = K;
	c->geometry.ascans_per_bscan = nx;
	c->geometry.bscans_per_volume = ny;
	c->geometry.stride[0] = sx;
	c->geometry.stride[1] = sy;
	c->geometry.sample_type = t;
	c->geometry.depth_range[0] = 0;
	c->geometry.depth_range[1] = K * c->preprocess.zero_pad / 2;
	c->cpu.threads = 0;
	c->gpu.streams = 4;
}

/* ---- the cases ---------------------------------------------------------------------------- */

static void c_default(struct vr_config *c)
{
	geom(c, 512, 24, 20, 2, 3, CFG_SAMPLE_U16);
}

static void c_i16(struct vr_config *c)
{
	geom(c, 512, 24, 20, 3, 2, CFG_SAMPLE_I16);
	c->geometry.bit_shift = 2;
	c->geometry.bidirectional = true;
	c->preprocess.background.mode = CFG_BG_BSCAN_MEAN;
	c->preprocess.resample.method = CFG_RS_LINEAR;
	c->preprocess.resample.positions = CFG_RSPOS_POLY;
	double poly[4] = {3.0, 511 - 10.0, 9.0, -4.0};
	memcpy(c->preprocess.resample.poly, poly, sizeof(poly));
	c->preprocess.window.type = CFG_WIN_HAMMING;
	c->preprocess.flip.x = true;
	c->reconstruct.mode = CFG_RECON_CUMULATIVE;
	c->gpu.streams = 3;
}

static void c_f32(struct vr_config *c)
{
	geom(c, 500, 26, 18, 2, 2, CFG_SAMPLE_F32);
	c->preprocess.background.mode = CFG_BG_BSCAN_MEDIAN;
	c->preprocess.resample.method = CFG_RS_CUBIC;
	c->preprocess.resample.positions = CFG_RSPOS_TABLE;
	double *t = table_new(500);
	for (uint32_t j = 0; j < 500; j++) {
		double u = j / 499.0;
		t[j] = 499.0 * (u + 0.08 * u * (1 - u)) - 0.5; /* clamps at 0 */
	}
	set_table(&c->preprocess.resample.table, t, 500, "resample table");
	c->preprocess.window.type = CFG_WIN_BLACKMAN;
	c->preprocess.dispersion.kind = CFG_DISP_COEFFS;
	c->preprocess.dispersion.coeffs[0] = 30.0;
	c->preprocess.dispersion.coeffs[1] = -12.0;
	c->reconstruct.combine = CFG_COMBINE_PRODUCT;
	c->reconstruct.temporal = CFG_TEMPORAL_EXP;
	c->reconstruct.tau = 2.5;
	c->gpu.streams = 2;
}

static void c_reference_spline(struct vr_config *c)
{
	c->preprocess.zero_pad = 2;
	geom(c, 384, 20, 16, 2, 2, CFG_SAMPLE_U16);
	c->geometry.depth_range[0] = 17;
	c->geometry.depth_range[1] = 300;
	c->preprocess.background.mode = CFG_BG_REFERENCE;
	double *r = table_new(384);
	for (uint32_t k = 0; k < 384; k++)
		r[k] = 32768.0 + 900.0 * sin(k * 0.05);
	set_table(&c->preprocess.background.reference, r, 384, "reference");
	c->preprocess.resample.method = CFG_RS_SPLINE;
	c->preprocess.resample.positions = CFG_RSPOS_WAVELENGTH;
	double l[4] = {800.0, 0.12, 2e-5, 0.0};
	memcpy(c->preprocess.resample.wavelength_nm, l, sizeof(l));
	c->preprocess.window.type = CFG_WIN_GAUSS;
	c->preprocess.window.param = 0.4;
	c->preprocess.dispersion.kind = CFG_DISP_TABLE;
	double *ph = table_new(384);
	for (uint32_t j = 0; j < 384; j++) {
		double v = j / 383.0 - 0.5;
		ph[j] = 25.0 * v * v + 3.0 * sin(6.0 * v);
	}
	set_table(&c->preprocess.dispersion.table, ph, 384, "dispersion table");
	c->preprocess.flip.z = true;
}

static void c_none_tukey(struct vr_config *c)
{
	c->preprocess.zero_pad = 4;
	geom(c, 256, 32, 12, 1, 1, CFG_SAMPLE_U16);
	c->preprocess.background.mode = CFG_BG_NONE;
	c->preprocess.window.type = CFG_WIN_TUKEY;
	c->preprocess.window.param = 0.3;
	c->reconstruct.mode = CFG_RECON_NONE;
	c->geometry.bidirectional = true;
}

static void c_median_odd_spline(struct vr_config *c)
{
	geom(c, 300, 23, 14, 2, 2, CFG_SAMPLE_U16);
	c->geometry.bit_shift = 4;
	c->preprocess.background.mode = CFG_BG_BSCAN_MEDIAN;
	c->preprocess.resample.method = CFG_RS_SPLINE;
	c->preprocess.resample.positions = CFG_RSPOS_POLY;
	double poly[4] = {0.0, 299.0 * 0.9, 299.0 * 0.15, -299.0 * 0.05};
	memcpy(c->preprocess.resample.poly, poly, sizeof(poly));
	c->reconstruct.mode = CFG_RECON_CUMULATIVE;
	c->reconstruct.combine = CFG_COMBINE_PRODUCT;
	c->reconstruct.spatial_sigma = 0.7;
}

static void c_stride1_one_stream(struct vr_config *c)
{
	geom(c, 256, 16, 16, 1, 1, CFG_SAMPLE_I16);
	c->preprocess.window.type = CFG_WIN_NONE;
	c->gpu.streams = 1;
}

static void c_stride5_steady(struct vr_config *c)
{
	geom(c, 256, 12, 10, 5, 5, CFG_SAMPLE_U16);
	c->reconstruct.temporal = CFG_TEMPORAL_EXP;
	c->reconstruct.tau = 5.0;
	c->gpu.streams = 5;
}

static void c_live(struct vr_config *c)
{
	geom(c, 256, 16, 12, 2, 2, CFG_SAMPLE_U16);
	c->preprocess.dispersion.kind = CFG_DISP_COEFFS;
	c->preprocess.dispersion.coeffs[0] = 10.0;
}

/* The live change applied by EV_LIVE: window, dB range, dispersion, flips, background,
 * resampling, weights, mode (docs/algorithms.md: all live on both backends). */
static void live_change(struct vr_config *c)
{
	c->preprocess.flip.x = !c->preprocess.flip.x;
	c->preprocess.flip.z = !c->preprocess.flip.z;
	c->preprocess.background.mode = CFG_BG_BSCAN_MEDIAN;
	c->preprocess.resample.method = CFG_RS_SPLINE;
	c->preprocess.resample.positions = CFG_RSPOS_POLY;
	c->preprocess.resample.poly[0] = 0.5;
	c->preprocess.resample.poly[1] = c->geometry.samples_per_ascan - 2.0;
	c->preprocess.resample.poly[2] = 0.5;
	c->preprocess.resample.poly[3] = 0.0;
	c->preprocess.window.type = CFG_WIN_TUKEY;
	c->preprocess.window.param = 0.6;
	c->preprocess.db_range[0] += 3.0;
	c->preprocess.db_range[1] -= 2.0;
	c->preprocess.dispersion.coeffs[1] = 7.0;
	c->reconstruct.temporal = CFG_TEMPORAL_EXP;
	c->reconstruct.tau = 1.5;
	c->reconstruct.combine = CFG_COMBINE_PRODUCT;
	c->reconstruct.spatial_sigma = 1.4;
	if (cfg_stride_area(c) == 1)
		c->reconstruct.mode = CFG_RECON_CUMULATIVE;
}

static void c_live_s1(struct vr_config *c)
{
	geom(c, 256, 16, 12, 1, 1, CFG_SAMPLE_U16);
	c->preprocess.dispersion.kind = CFG_DISP_COEFFS;
	c->preprocess.dispersion.coeffs[0] = 10.0;
}

static void c_sim_small(struct vr_config *c)
{
	geom(c, 1024, 32, 24, 2, 2, CFG_SAMPLE_U16);
	c->preprocess.resample.method = CFG_RS_CUBIC;
	c->preprocess.resample.positions = CFG_RSPOS_POLY; /* filled from the simulator */
	c->preprocess.dispersion.kind = CFG_DISP_COEFFS;   /* filled from the simulator */
	/* The simulator's spectra carry the source envelope: ascan_mean leaves it ~100 dB above
	 * the deepest bins, where float32 FFT rounding alone moves /lowres by ~1e-4 on either
	 * backend (docs/gpu.md). Real processing removes it with a B-scan background. */
	c->preprocess.background.mode = CFG_BG_BSCAN_MEAN;
}

static void c_sim_spline_bidir(struct vr_config *c)
{
	geom(c, 1024, 30, 20, 3, 1, CFG_SAMPLE_I16);
	c->geometry.bidirectional = true;
	c->preprocess.resample.method = CFG_RS_SPLINE;
	c->preprocess.resample.positions = CFG_RSPOS_TABLE; /* filled from the simulator */
	c->preprocess.background.mode = CFG_BG_BSCAN_MEDIAN;
	c->reconstruct.mode = CFG_RECON_CUMULATIVE;
}

/* Packed 12-bit input (docs/algorithms.md §0), unpacked in the convert kernels: K % 8 == 0 takes
 * the word-load path, other even K the byte path. */
static void c_u12p(struct vr_config *c)
{
	geom(c, 512, 24, 20, 2, 3, CFG_SAMPLE_U12P);
}

static void c_u12gv_median(struct vr_config *c)
{
	geom(c, 300, 23, 14, 1, 1, CFG_SAMPLE_U12GV);
	c->geometry.bit_shift = 1;
	c->preprocess.background.mode = CFG_BG_BSCAN_MEDIAN;
	c->reconstruct.mode = CFG_RECON_NONE;
}

static void c_u12p_bmean_linear(struct vr_config *c)
{
	geom(c, 1000, 20, 12, 2, 2, CFG_SAMPLE_U12P);
	c->geometry.bit_shift = 3;
	c->preprocess.background.mode = CFG_BG_BSCAN_MEAN;
	c->preprocess.resample.method = CFG_RS_LINEAR;
	c->preprocess.resample.positions = CFG_RSPOS_POLY;
	double poly[4] = {2.0, 999 - 6.0, 7.0, -3.0};
	memcpy(c->preprocess.resample.poly, poly, sizeof(poly));
}

static void c_u12gv_ref(struct vr_config *c)
{
	geom(c, 256, 16, 12, 1, 1, CFG_SAMPLE_U12GV);
	c->preprocess.background.mode = CFG_BG_REFERENCE;
	double *r = table_new(256);
	for (uint32_t k = 0; k < 256; k++)
		r[k] = 2048.0 + 300.0 * sin(k * 0.07);
	set_table(&c->preprocess.background.reference, r, 256, "reference");
}

static void c_sim_u12p(struct vr_config *c)
{
	c_sim_small(c);
	c->geometry.sample_type = CFG_SAMPLE_U12P;
}

/* partial_median (docs/algorithms.md §1b) */
static void c_pm_lines(struct vr_config *c)
{
	geom(c, 512, 64, 12, 2, 2, CFG_SAMPLE_U16);
	c->preprocess.background.mode = CFG_BG_PARTIAL_MEDIAN;
}

static void c_pm_lines_u12p(struct vr_config *c)
{
	geom(c, 512, 64, 12, 2, 2, CFG_SAMPLE_U12P);
	c->preprocess.background.mode = CFG_BG_PARTIAL_MEDIAN;
}

static void c_pm_lines_f32(struct vr_config *c)
{
	c->preprocess.zero_pad = 2;
	geom(c, 400, 63, 10, 1, 1, CFG_SAMPLE_F32);
	c->preprocess.background.mode = CFG_BG_PARTIAL_MEDIAN;
	c->preprocess.background.threshold = 4.0;
	c->preprocess.resample.method = CFG_RS_CUBIC;
	c->preprocess.resample.positions = CFG_RSPOS_POLY;
	double poly[4] = {1.0, 399 - 6.0, 8.0, -3.0};
	memcpy(c->preprocess.resample.poly, poly, sizeof(poly));
	c->preprocess.dispersion.kind = CFG_DISP_COEFFS;
	c->preprocess.dispersion.coeffs[0] = 12.0;
	c->preprocess.dispersion.coeffs[1] = -5.0;
	c->preprocess.flip.z = true;
	c->reconstruct.mode = CFG_RECON_NONE;
}

static void c_pm_sim_tilted(struct vr_config *c)
{
	geom(c, 1024, 64, 16, 2, 1, CFG_SAMPLE_U16);
	snprintf(c->source.synth.phantom, sizeof(c->source.synth.phantom), "tilted");
	c->preprocess.background.mode = CFG_BG_PARTIAL_MEDIAN;
	c->preprocess.resample.method = CFG_RS_CUBIC;
	c->preprocess.resample.positions = CFG_RSPOS_POLY; /* filled from the simulator */
	c->preprocess.dispersion.kind = CFG_DISP_COEFFS;   /* filled from the simulator */
	c->reconstruct.mode = CFG_RECON_CUMULATIVE;
}

/* No depth above the threshold: the CUDA backend's partial_median equals the CPU's, which
 * equals its bscan_mean (tests/unit/test_cpu.c). */
static void c_pm_none_above(struct vr_config *c)
{
	geom(c, 512, 32, 8, 1, 1, CFG_SAMPLE_U16);
	c->preprocess.background.mode = CFG_BG_PARTIAL_MEDIAN;
	c->preprocess.background.threshold = 1e6;
}

static void c_pm_paper_sim(struct vr_config *c)
{
	geom(c, 8192, 60, 60, 5, 5, CFG_SAMPLE_U16);
	snprintf(c->source.synth.phantom, sizeof(c->source.synth.phantom), "tilted");
	c->preprocess.background.mode = CFG_BG_PARTIAL_MEDIAN;
	c->preprocess.resample.method = CFG_RS_LINEAR;
	c->preprocess.resample.positions = CFG_RSPOS_POLY; /* filled from the simulator */
	c->preprocess.dispersion.kind = CFG_DISP_COEFFS;   /* filled from the simulator */
}

static void c_paper(struct vr_config *c)
{
	geom(c, 8192, 60, 60, 5, 5, CFG_SAMPLE_U16);
}

static void c_paper_sim(struct vr_config *c)
{
	geom(c, 8192, 60, 60, 5, 5, CFG_SAMPLE_U16);
	c->preprocess.resample.method = CFG_RS_LINEAR;
	c->preprocess.resample.positions = CFG_RSPOS_POLY; /* filled from the simulator */
	c->preprocess.dispersion.kind = CFG_DISP_COEFFS;   /* filled from the simulator */
	c->preprocess.background.mode = CFG_BG_BSCAN_MEAN; /* see c_sim_small */
	c->reconstruct.mode = CFG_RECON_CUMULATIVE;
}

/* reconstruct.mode adaptive (docs/algorithms.md §2b) on random input: the change between
 * epochs is noise of every size, so alpha takes every value between 0 and 1; sum combine */
static void c_adaptive(struct vr_config *c)
{
	geom(c, 512, 24, 20, 2, 3, CFG_SAMPLE_U16);
	c->reconstruct.mode = CFG_RECON_ADAPTIVE;
	c->reconstruct.adaptive.jump_recovery = false; /* the variant without it */
	c->reconstruct.adaptive.tolerance = 0.2;
}

/* adaptive on packed 12-bit input */
static void c_u12p_adaptive(struct vr_config *c)
{
	c_adaptive(c);
	c->geometry.sample_type = CFG_SAMPLE_U12P;
}

/* adaptive with product combine, exp temporal weights, a window of 1 bin (h = 0), a wide
 * speckle tolerance and an odd
 * geometry with stride 3 x 1 (one row of offsets: ny = 1 along no axis, nx odd) */
static void c_adaptive_product(struct vr_config *c)
{
	geom(c, 300, 23, 14, 3, 1, CFG_SAMPLE_I16);
	c->reconstruct.mode = CFG_RECON_ADAPTIVE;
	c->reconstruct.adaptive.jump_recovery = false; /* the variant without it */
	c->reconstruct.combine = CFG_COMBINE_PRODUCT;
	c->reconstruct.temporal = CFG_TEMPORAL_EXP;
	c->reconstruct.tau = 2.0;
	c->reconstruct.adaptive.depth_half_window = 0;
	c->reconstruct.adaptive.tolerance = 0.3;
	c->reconstruct.adaptive.speckle_tolerance = 0.5; /* beta between 0 and 1 on random data */
}

/* The simulator's retina turning, drifting laterally and axially, and jumping at epoch 7:
 * the adaptive mode where part of the scene moved and part did not. */
static void c_sim_adaptive_motion(struct vr_config *c)
{
	c_sim_small(c);
	c->reconstruct.mode = CFG_RECON_ADAPTIVE;
	c->reconstruct.adaptive.jump_recovery = false; /* the variant without it */
	c->source.rate = 25;
	c->source.synth.deg_per_s = 30;
	c->source.synth.shift_mm_per_s[0] = 0.5;
	c->source.synth.shift_mm_per_s[2] = 0.25;
	c->source.synth.jump_epoch = 7;
	c->source.synth.jump_mm[0] = 0.2;
	c->source.synth.jump_mm[1] = 0.1;
	c->source.synth.jump_deg = 4;
}

/* Live: noncumulative -> adaptive with another tolerance and window, without the exact
 * history samples (history reset) */
static void live_to_adaptive(struct vr_config *c)
{
	c->reconstruct.mode = CFG_RECON_ADAPTIVE;
	c->reconstruct.adaptive.jump_recovery = false; /* the variant without it */
	c->reconstruct.adaptive.tolerance = 0.15;
	c->reconstruct.adaptive.depth_half_window = 2;
	c->reconstruct.adaptive.speckle_tolerance = 0;
}

/* the same with the recovery after a jump */
static void live_to_adaptive_jump_recovery(struct vr_config *c)
{
	live_to_adaptive(c);
	c->reconstruct.adaptive.jump_recovery = true;
}

static void c_paper_adaptive(struct vr_config *c)
{
	geom(c, 8192, 60, 60, 5, 5, CFG_SAMPLE_U16);
	c->reconstruct.mode = CFG_RECON_ADAPTIVE;
	c->reconstruct.adaptive.jump_recovery = false; /* the variant without it */
}

/* reconstruct.mode compensated (docs/algorithms.md §2c) on random input: stride 2 x 3, 12
 * history slots, so that from epoch 10 on the reference is kriged from the older entries
 * (nref > 0). Without the pose estimate (estimate_pose false): a registration of noise is
 * ill-conditioned, so that the last-digit differences of the device's reductions move its
 * result by more than the tolerances; the simulator's cases below estimate the poses. */
static void c_compensated(struct vr_config *c)
{
	geom(c, 512, 24, 20, 2, 3, CFG_SAMPLE_U16);
	c->reconstruct.mode = CFG_RECON_COMPENSATED;
	c->reconstruct.compensated.estimate_pose = false;
}

/* The simulator's retina turning, drifting and jumping (c_sim_adaptive_motion) under the
 * compensated mode, at stride 3 x 2 (nref > 0 from epoch 10) and with the jump at epoch 12,
 * when the residual test has the history it needs to drop the history. */
static void c_sim_compensated_motion(struct vr_config *c)
{
	c_sim_adaptive_motion(c);
	c->geometry.ascans_per_bscan = 24;
	c->geometry.stride[0] = 3;
	c->geometry.stride[1] = 2;
	c->reconstruct.mode = CFG_RECON_COMPENSATED;
	c->source.synth.jump_epoch = 12;
}

/* Live: noncumulative -> compensated (its history allocated by the update) */
static void live_to_compensated(struct vr_config *c)
{
	c->reconstruct.mode = CFG_RECON_COMPENSATED;
	c->reconstruct.compensated.estimate_pose = false; /* random input: c_compensated */
}

static void c_paper_compensated(struct vr_config *c)
{
	geom(c, 8192, 60, 60, 5, 5, CFG_SAMPLE_U16);
	c->reconstruct.mode = CFG_RECON_COMPENSATED;
	c->reconstruct.compensated.estimate_pose = false; /* random input: c_compensated */
}

/* geometry.repeats (docs/algorithms.md §5 step 1): the structure is the repeats' mean power.
 * submit_all hands the repeats of a position over in no particular order. */
static void c_repeats_2(struct vr_config *c)
{
	c_default(c);
	c->geometry.repeats = 2;
}

/* M = 4 at odd sizes: K 250, 13 A-scans, 7 positions, bidirectional (every repeat of an odd
 * position reversed), flip z, a crop, the B-scan median of each repeat, cumulative. */
static void c_repeats_4_odd(struct vr_config *c)
{
	geom(c, 250, 13, 7, 3, 2, CFG_SAMPLE_I16);
	c->geometry.repeats = 4;
	c->geometry.bidirectional = true;
	c->geometry.depth_range[0] = 9;
	c->geometry.depth_range[1] = 101;
	c->preprocess.flip.z = true;
	c->preprocess.background.mode = CFG_BG_BSCAN_MEDIAN;
	c->reconstruct.mode = CFG_RECON_CUMULATIVE;
}

/* The simulator's repeats: the same tissue, noise of their own. */
static void c_sim_repeats_3(struct vr_config *c)
{
	c_sim_small(c);
	c->geometry.repeats = 3;
}

/* partial_median on each repeat; a position's median depth count is its repeats' largest. */
static void c_pm_sim_repeats_2(struct vr_config *c)
{
	c_pm_sim_tilted(c);
	c->geometry.repeats = 2;
}

/* compensated on the simulator's bowl (a curved retina), still but for a jump at epoch 20: the stillness
 * test holds the pose (docs/algorithms.md §2c), the jump drops the history, then it holds
 * again */
static void c_sim_compensated_bowl_still(struct vr_config *c)
{
	c_sim_compensated_motion(c);
	snprintf(c->source.synth.phantom, sizeof(c->source.synth.phantom), "bowl");
	c->source.synth.deg_per_s = 0;
	c->source.synth.shift_mm_per_s[0] = 0;
	c->source.synth.shift_mm_per_s[2] = 0;
	c->source.synth.jump_epoch = 20;
}

/* The adaptive mode's recovery after a jump (docs/algorithms.md §2b, "Recovery after a
 * jump"), the decisions of backend/jump.h on the device: on random input (never still: never
 * armed, the statistics and the decision every epoch) */
static void c_adaptive_jump_recovery(struct vr_config *c)
{
	c_adaptive(c);
	c->reconstruct.adaptive.jump_recovery = true;
}

/* on the simulator's moving retina with its jump (c_sim_adaptive_motion) */
static void c_sim_adaptive_motion_jump_recovery(struct vr_config *c)
{
	c_sim_adaptive_motion(c);
	c->reconstruct.adaptive.jump_recovery = true;
}

/* on the simulator's bowl, still but for a jump at epoch 20 (c_sim_compensated_bowl_still,
 * S = 6): settled from the second cycle on, the still level measured, the jump arms the
 * recovery for one cycle (epochs 20 to 25), then still again */
static void c_sim_adaptive_bowl_still_jump(struct vr_config *c)
{
	c_sim_compensated_bowl_still(c);
	c->reconstruct.mode = CFG_RECON_ADAPTIVE;
	c->reconstruct.adaptive.jump_recovery = true;
	c->source.synth.jump_mm[2] = 0.06; /* and axially: the mean A-scan moves */
}

/* Non-finite f32 samples (docs/algorithms.md §1.0): every background over the A-scans that are
 * not missing, every reconstruction mode with missing positions (E = -1) */
static void c_nf_bmean_cumul(struct vr_config *c)
{
	geom(c, 256, 24, 12, 2, 3, CFG_SAMPLE_F32);
	c->geometry.bidirectional = true;
	c->preprocess.background.mode = CFG_BG_BSCAN_MEAN;
	c->preprocess.resample.method = CFG_RS_CUBIC;
	c->preprocess.resample.positions = CFG_RSPOS_POLY;
	double poly[4] = {2.0, 255 - 6.0, 5.0, -2.0};
	memcpy(c->preprocess.resample.poly, poly, sizeof(poly));
	c->reconstruct.mode = CFG_RECON_CUMULATIVE;
}

static void c_nf_median_odd_noncumul(struct vr_config *c)
{
	geom(c, 256, 25, 12, 2, 2, CFG_SAMPLE_F32);
	c->preprocess.background.mode = CFG_BG_BSCAN_MEDIAN;
	c->preprocess.flip.x = true;
	c->preprocess.dispersion.kind = CFG_DISP_COEFFS;
	c->preprocess.dispersion.coeffs[0] = 10.0;
	c->preprocess.dispersion.coeffs[1] = -4.0;
}

static void c_nf_ascan_adaptive(struct vr_config *c)
{
	geom(c, 256, 24, 12, 2, 3, CFG_SAMPLE_F32);
	c->reconstruct.mode = CFG_RECON_ADAPTIVE;
	c->reconstruct.adaptive.jump_recovery = false; /* the variant without it */
	c->reconstruct.adaptive.tolerance = 0.2;
}

/* with the recovery after a jump: the missing A-scans left out of the mean A-scan */
static void c_nf_ascan_adaptive_jump_recovery(struct vr_config *c)
{
	c_nf_ascan_adaptive(c);
	c->reconstruct.adaptive.jump_recovery = true;
}

static void c_nf_none(struct vr_config *c)
{
	geom(c, 256, 24, 12, 2, 2, CFG_SAMPLE_F32);
	c->preprocess.background.mode = CFG_BG_BSCAN_MEAN;
	c->reconstruct.mode = CFG_RECON_NONE;
}

static void c_nf_pmedian(struct vr_config *c)
{
	geom(c, 512, 64, 12, 2, 2, CFG_SAMPLE_F32);
	c->preprocess.background.mode = CFG_BG_PARTIAL_MEDIAN;
}

/* output.channels (docs/algorithms.md §5): the CUDA backend's angiography and Doppler against
 * the CPU's, every channel and its low-resolution volume. */
static void set_channels(struct vr_config *c, const char *a, const char *b, const char *d)
{
	const char *n[3] = {a, b, d};

	c->output.nchannels = 0;
	for (int i = 0; i < 3; i++)
		if (n[i])
			snprintf(c->output.channels[c->output.nchannels++], CFG_PATH_MAX, "%s",
			         n[i]);
}

/* M = 2, every channel, cdv, inter-B-scan Doppler with the bulk phase, noncumulative. */
static void c_ch_m2_cdv_bscan(struct vr_config *c)
{
	c_default(c);
	c->geometry.repeats = 2;
	set_channels(c, "structure", "angio", "doppler");
	c->functional.angio.method = CFG_ANGIO_CDV;
	c->functional.doppler.bulk = true;
}

/* M = 4 at odd sizes: K 250, 13 A-scans, 7 positions, bidirectional, flip x and z, a crop, the
 * B-scan median, cumulative; svar, inter-A-scan Doppler without the bulk phase, h = 3. */
static void c_ch_m4_odd_svar_ascan(struct vr_config *c)
{
	geom(c, 250, 13, 7, 3, 2, CFG_SAMPLE_I16);
	c->geometry.repeats = 4;
	c->geometry.bidirectional = true;
	c->geometry.depth_range[0] = 9;
	c->geometry.depth_range[1] = 101;
	c->preprocess.flip.x = true;
	c->preprocess.flip.z = true;
	c->preprocess.background.mode = CFG_BG_BSCAN_MEDIAN;
	c->reconstruct.mode = CFG_RECON_CUMULATIVE;
	set_channels(c, "structure", "angio", "doppler");
	c->functional.angio.method = CFG_ANGIO_SVAR;
	c->functional.angio.range_given = 1;
	c->functional.angio.range[0] = 0.0;
	c->functional.angio.range[1] = 40.0;
	c->functional.axial_half_window = 3;
	c->functional.doppler.axis_given = 1;
	c->functional.doppler.axis = CFG_DOPPLER_ASCAN;
	c->functional.doppler.bulk = false;
}

/* M = 4, u12p, mode none: the channels of L_e; cdv, inter-A-scan Doppler with the bulk phase,
 * dispersion (complex transforms). */
static void c_ch_m4_u12p_none_ascan(struct vr_config *c)
{
	geom(c, 512, 23, 10, 2, 2, CFG_SAMPLE_U12P);
	c->geometry.repeats = 4;
	c->reconstruct.mode = CFG_RECON_NONE;
	c->preprocess.dispersion.kind = CFG_DISP_COEFFS;
	c->preprocess.dispersion.coeffs[0] = 10.0;
	c->preprocess.dispersion.coeffs[1] = -4.0;
	set_channels(c, "structure", "angio", "doppler");
	c->functional.doppler.axis_given = 1;
	c->functional.doppler.axis = CFG_DOPPLER_ASCAN;
	c->functional.doppler.bulk = true;
}

/* M = 2 without the structure: angio and doppler alone (the structure's weights still), svar,
 * inter-B-scan without the bulk phase, partial_median, stride 1 x 3. */
static void c_ch_m2_pmedian_no_structure(struct vr_config *c)
{
	geom(c, 512, 24, 12, 1, 3, CFG_SAMPLE_U16);
	c->geometry.repeats = 2;
	c->preprocess.background.mode = CFG_BG_PARTIAL_MEDIAN;
	c->preprocess.background.threshold = 3.0;
	set_channels(c, "angio", "doppler", NULL);
	c->functional.angio.method = CFG_ANGIO_SVAR;
	c->functional.doppler.bulk = false;
}

/* M = 1: Doppler alone beside the structure, inter-A-scan (its default), odd nx, bulk on,
 * product, exp. */
static void c_ch_m1_doppler(struct vr_config *c)
{
	geom(c, 256, 7, 9, 1, 2, CFG_SAMPLE_U16);
	c->reconstruct.combine = CFG_COMBINE_PRODUCT;
	c->reconstruct.temporal = CFG_TEMPORAL_EXP;
	c->reconstruct.tau = 1.5;
	set_channels(c, "structure", "doppler", NULL);
	c->functional.doppler.bulk = true;
}

/* f32 with non-finite samples (docs/algorithms.md §1.0), M = 1, Doppler: the planes' columns of
 * the missing A-scans filled as L_e's, cumulative. */
static void c_ch_f32_nonfinite_doppler(struct vr_config *c)
{
	geom(c, 256, 24, 12, 2, 3, CFG_SAMPLE_F32);
	c->preprocess.background.mode = CFG_BG_BSCAN_MEAN;
	c->reconstruct.mode = CFG_RECON_CUMULATIVE;
	set_channels(c, "structure", "doppler", NULL);
	c->functional.doppler.bulk = true;
}

/* The simulator's flow phantom (docs/algorithms.md "The flow phantom"): M = 4, vessels of
 * flowing blood, bulk motion, ascan_mean (for Doppler), cdv, inter-B-scan Doppler with the
 * bulk phase over the sample's depths. */
static void c_ch_sim_flow(struct vr_config *c)
{
	geom(c, 1024, 32, 8, 2, 2, CFG_SAMPLE_U16);
	c->geometry.repeats = 4;
	c->geometry.depth_range[0] = 128;
	c->geometry.depth_range[1] = 384;
	c->geometry.ascan_period_us = 10.0;
	c->geometry.bscan_period_us = 700.0;
	c->geometry.center_wavelength_nm = 840.0;
	snprintf(c->source.synth.phantom, sizeof(c->source.synth.phantom), "flow");
	c->source.synth.flow.peak_mm_per_s = 1.0;
	c->source.synth.flow.bulk_um_per_repeat = 0.05;
	c->preprocess.background.mode = CFG_BG_ASCAN_MEAN;
	set_channels(c, "structure", "angio", "doppler");
	c->functional.doppler.bulk = true;
}

/* f32 with repeats (docs/algorithms.md §1.0): an A-scan with a non-finite sample in any repeat
 * of its position is missing in all of them. */
static void c_nf_m2_bmean_cumul(struct vr_config *c)
{
	c_nf_bmean_cumul(c);
	c->geometry.repeats = 2;
}

static void c_nf_m3_pmedian(struct vr_config *c)
{
	c_nf_pmedian(c);
	c->geometry.repeats = 3;
}

/* ... and every channel: M = 4, cdv, inter-A-scan Doppler with the bulk phase. */
static void c_ch_f32_nonfinite_m4(struct vr_config *c)
{
	c_ch_f32_nonfinite_doppler(c);
	c->geometry.repeats = 4;
	set_channels(c, "structure", "angio", "doppler");
	c->functional.doppler.axis_given = 1;
	c->functional.doppler.axis = CFG_DOPPLER_ASCAN;
}

/* Live: every functional.* key changes (method, range, window, mask, axis, bulk). */
static void live_functional(struct vr_config *c)
{
	c->functional.angio.method = CFG_ANGIO_SVAR;
	c->functional.axial_half_window = 1;
	c->functional.mask_given = 1;
	c->functional.mask_db = c->preprocess.db_range[0] +
	                        0.5 * (c->preprocess.db_range[1] - c->preprocess.db_range[0]);
	c->functional.doppler.axis_given = 1;
	c->functional.doppler.axis = CFG_DOPPLER_ASCAN;
	c->functional.doppler.bulk = !c->functional.doppler.bulk;
}

static const struct tcase cases[] = {
        {"rand-u16-default", false, IN_RANDOM, 8, true, c_default, EV_NONE, false, NULL},
        {"rand-i16-shift-bmean-linear-cumul", false, IN_RANDOM, 8, false, c_i16, EV_NONE, false,
         NULL},
        {"rand-f32-median-cubic-disp-product-exp", false, IN_RANDOM, 7, true, c_f32, EV_NONE, false,
         NULL},
        {"rand-u16-ref-spline-wl-gauss-disptab-zp2", false, IN_RANDOM, 6, false, c_reference_spline,
         EV_NONE, false, NULL},
        {"rand-u16-mode-none-tukey-zp4-bidir", false, IN_RANDOM, 3, true, c_none_tukey, EV_NONE,
         false, NULL},
        {"rand-u16-median-odd-spline-cumul-product", false, IN_RANDOM, 6, true, c_median_odd_spline,
         EV_NONE, false, NULL},
        {"rand-i16-stride1-window-none-1-stream", false, IN_RANDOM, 4, false, c_stride1_one_stream,
         EV_NONE, false, NULL},
        {"rand-u16-stride5-steady-exp", false, IN_RANDOM, 29, false, c_stride5_steady, EV_NONE,
         false, NULL},
        {"rand-u16-live-update", false, IN_RANDOM, 10, true, c_live, EV_LIVE, false, NULL},
        {"rand-u16-live-update-mode-s1", false, IN_RANDOM, 6, true, c_live_s1, EV_LIVE, false,
         NULL},
        {"rand-u16-reset-history", false, IN_RANDOM, 9, false, c_default, EV_RESET, false, NULL},
        {"rand-u16-epoch-gap", false, IN_RANDOM, 12, false, c_default, EV_GAP, false, NULL},
        {"sim-u16-bmean-cubic-disp", false, IN_SIM, 6, true, c_sim_small, EV_NONE, false, NULL},
        {"sim-i16-spline-median-bidir-cumul", false, IN_SIM, 5, false, c_sim_spline_bidir, EV_NONE,
         false, NULL},
        {"rand-u12p-default", false, IN_RANDOM, 6, true, c_u12p, EV_NONE, false, NULL},
        {"rand-u12gv-shift-median-k300-none", false, IN_RANDOM, 3, true, c_u12gv_median, EV_NONE,
         false, NULL},
        {"rand-u12p-shift-bmean-linear-k1000", false, IN_RANDOM, 5, false, c_u12p_bmean_linear,
         EV_NONE, false, NULL},
        {"rand-u12gv-reference-k256", false, IN_RANDOM, 3, true, c_u12gv_ref, EV_NONE, false, NULL},
        {"sim-u12p-bmean-cubic-disp", false, IN_SIM, 5, true, c_sim_u12p, EV_NONE, false, NULL},
        {"async-rand-u12p-default", false, IN_RANDOM, 6, true, c_u12p, EV_NONE, true, NULL},
        {"paper-rand-u16-60x60x8192-s5", true, IN_RANDOM, 27, false, c_paper, EV_NONE, false, NULL},
        {"paper-sim-u16-bmean-linear-disp-cumul", true, IN_SIM, 6, false, c_paper_sim, EV_NONE,
         false, NULL},
        {"async-rand-u16-default-full", false, IN_RANDOM, 9, true, c_default, EV_NONE, true, NULL},
        {"async-rand-i16-cumul", false, IN_RANDOM, 8, false, c_i16, EV_NONE, true, NULL},
        {"async-rand-u16-mode-none-full", false, IN_RANDOM, 5, true, c_none_tukey, EV_NONE, true,
         NULL},
        {"async-sim-i16-spline-median-cumul", false, IN_SIM, 6, true, c_sim_spline_bidir, EV_NONE,
         true, NULL},
        {"paper-async-rand-u16-60x60x8192-s5", true, IN_RANDOM, 8, false, c_paper, EV_NONE, true,
         NULL},
        {"rand-u16-adaptive", false, IN_RANDOM, 16, true, c_adaptive, EV_NONE, false, NULL},
        {"rand-u12p-adaptive", false, IN_RANDOM, 16, true, c_u12p_adaptive, EV_NONE, false, NULL},
        {"rand-i16-adaptive-product-exp-h0-s3x1", false, IN_RANDOM, 9, true, c_adaptive_product,
         EV_NONE, false, NULL},
        {"rand-u16-adaptive-jump-recovery", false, IN_RANDOM, 16, true, c_adaptive_jump_recovery,
         EV_NONE, false, NULL},
        {"rand-u16-adaptive-jump-recovery-reset-history", false, IN_RANDOM, 14, false,
         c_adaptive_jump_recovery, EV_RESET, false, NULL},
        {"rand-u16-adaptive-jump-recovery-epoch-gap", false, IN_RANDOM, 14, false,
         c_adaptive_jump_recovery, EV_GAP, false, NULL},
        {"sim-u16-adaptive-rotation-shift-jump-recovery", false, IN_SIM, 12, true,
         c_sim_adaptive_motion_jump_recovery, EV_NONE, false, NULL},
        {"sim-u16-adaptive-bowl-still-jump-recovery", false, IN_SIM, 34, true,
         c_sim_adaptive_bowl_still_jump, EV_NONE, false, NULL},
        {"async-sim-u16-adaptive-bowl-still-jump-recovery", false, IN_SIM, 34, true,
         c_sim_adaptive_bowl_still_jump, EV_NONE, true, NULL},
        {"rand-u16-adaptive-reset-history", false, IN_RANDOM, 14, false, c_adaptive, EV_RESET,
         false, NULL},
        {"rand-u16-adaptive-epoch-gap", false, IN_RANDOM, 14, false, c_adaptive, EV_GAP, false,
         NULL},
        {"rand-u16-live-noncumulative-to-adaptive", false, IN_RANDOM, 18, true, c_default, EV_LIVE,
         false, live_to_adaptive},
        {"rand-u16-live-noncumulative-to-adaptive-jump-recovery", false, IN_RANDOM, 18, true,
         c_default, EV_LIVE, false, live_to_adaptive_jump_recovery},
        {"sim-u16-adaptive-rotation-shift-jump", false, IN_SIM, 12, true, c_sim_adaptive_motion,
         EV_NONE, false, NULL},
        {"async-sim-u16-adaptive-rotation-shift-jump", false, IN_SIM, 12, true,
         c_sim_adaptive_motion, EV_NONE, true, NULL},
        {"paper-rand-u16-adaptive-60x60x8192-s5", true, IN_RANDOM, 28, false, c_paper_adaptive,
         EV_NONE, false, NULL},
        {"paper-async-rand-u16-adaptive-60x60x8192-s5", true, IN_RANDOM, 28, false,
         c_paper_adaptive, EV_NONE, true, NULL},
        {"pmedian-lines-u16-s2", false, IN_LINES, 6, true, c_pm_lines, EV_NONE, false, NULL},
        {"pmedian-lines-u12p-s2", false, IN_LINES, 6, true, c_pm_lines_u12p, EV_NONE, false, NULL},
        {"pmedian-lines-f32-odd-cubic-disp-zp2-flipz", false, IN_LINES, 4, true, c_pm_lines_f32,
         EV_NONE, false, NULL},
        {"pmedian-sim-tilted-cubic-disp-cumul", false, IN_SIM, 5, true, c_pm_sim_tilted, EV_NONE,
         false, NULL},
        {"pmedian-none-above-threshold", false, IN_LINES, 3, true, c_pm_none_above, EV_NONE, false,
         NULL},
        {"pmedian-live-from-ascan-mean", false, IN_LINES, 6, true, c_default, EV_LIVE_PM, false,
         NULL},
        {"async-pmedian-sim-tilted", false, IN_SIM, 6, true, c_pm_sim_tilted, EV_NONE, true, NULL},
        {"paper-pmedian-sim-tilted-60x60x8192-s5", true, IN_SIM, 4, false, c_pm_paper_sim, EV_NONE,
         false, NULL},
        /* compensated last: the cases before draw the same random inputs as before it existed */
        {"rand-u16-compensated", false, IN_RANDOM, 16, true, c_compensated, EV_NONE, false, NULL},
        {"rand-u16-compensated-reset-history", false, IN_RANDOM, 20, false, c_compensated, EV_RESET,
         false, NULL},
        {"rand-u16-live-noncumulative-to-compensated", false, IN_RANDOM, 24, true, c_default,
         EV_LIVE, false, live_to_compensated},
        {"sim-u16-compensated-rotation-shift-jump", false, IN_SIM, 20, true,
         c_sim_compensated_motion, EV_NONE, false, NULL},
        {"async-sim-u16-compensated-rotation-shift-jump", false, IN_SIM, 20, true,
         c_sim_compensated_motion, EV_NONE, true, NULL},
        {"async-rand-u16-compensated", false, IN_RANDOM, 14, true, c_compensated, EV_NONE, true,
         NULL},
        {"paper-rand-u16-compensated-60x60x8192-s5", true, IN_RANDOM, 14, false,
         c_paper_compensated, EV_NONE, false, NULL},
        {"paper-async-rand-u16-compensated-60x60x8192-s5", true, IN_RANDOM, 12, false,
         c_paper_compensated, EV_NONE, true, NULL},
        /* the queue ahead (EV_FULL_SOME) last, for the same reason */
        {"async-rand-u16-default-ahead", false, IN_RANDOM, 10, true, c_default, EV_FULL_SOME, true,
         NULL},
        {"async-rand-u16-mode-none-ahead", false, IN_RANDOM, 7, true, c_none_tukey, EV_FULL_SOME,
         true, NULL},
        {"async-sim-u16-adaptive-rotation-shift-jump-ahead", false, IN_SIM, 12, true,
         c_sim_adaptive_motion, EV_FULL_SOME, true, NULL},
        {"async-sim-u16-adaptive-bowl-still-jump-recovery-ahead", false, IN_SIM, 34, true,
         c_sim_adaptive_bowl_still_jump, EV_FULL_SOME, true, NULL},
        {"async-pmedian-sim-tilted-ahead", false, IN_SIM, 7, true, c_pm_sim_tilted, EV_FULL_SOME,
         true, NULL},
        {"async-sim-u16-compensated-rotation-shift-jump-ahead", false, IN_SIM, 20, true,
         c_sim_compensated_motion, EV_FULL_SOME, true, NULL},
        /* repeats last, for the same reason */
        {"rand-u16-repeats-2", false, IN_RANDOM, 8, true, c_repeats_2, EV_NONE, false, NULL},
        {"rand-i16-repeats-4-odd-bidir-flipz-crop-bmedian-cumul", false, IN_RANDOM, 8, true,
         c_repeats_4_odd, EV_NONE, false, NULL},
        {"sim-u16-repeats-3-bmean-cubic-disp", false, IN_SIM, 6, true, c_sim_repeats_3, EV_NONE,
         false, NULL},
        {"pmedian-sim-tilted-repeats-2", false, IN_SIM, 5, true, c_pm_sim_repeats_2, EV_NONE, false,
         NULL},
        {"async-rand-u16-repeats-2", false, IN_RANDOM, 9, true, c_repeats_2, EV_NONE, true, NULL},
        {"async-rand-u16-repeats-2-ahead", false, IN_RANDOM, 10, true, c_repeats_2, EV_FULL_SOME,
         true, NULL},
        /* non-finite f32 samples last: the cases before draw the same random inputs as before */
        {"nonfinite-f32-bmean-cubic-bidir-cumul", false, IN_NONFINITE, 8, true, c_nf_bmean_cumul,
         EV_NONE, false, NULL},
        {"nonfinite-f32-median-odd-flipx-disp", false, IN_NONFINITE, 6, true,
         c_nf_median_odd_noncumul, EV_NONE, false, NULL},
        {"nonfinite-f32-ascan-mean-adaptive", false, IN_NONFINITE, 14, true, c_nf_ascan_adaptive,
         EV_NONE, false, NULL},
        {"nonfinite-f32-ascan-mean-adaptive-jump-recovery", false, IN_NONFINITE, 14, true,
         c_nf_ascan_adaptive_jump_recovery, EV_NONE, false, NULL},
        {"nonfinite-f32-mode-none", false, IN_NONFINITE, 3, true, c_nf_none, EV_NONE, false, NULL},
        {"nonfinite-pmedian-lines-f32", false, IN_LINES_NONFINITE, 6, true, c_nf_pmedian, EV_NONE,
         false, NULL},
        {"async-nonfinite-f32-bmean-cubic-bidir-cumul", false, IN_NONFINITE, 8, true,
         c_nf_bmean_cumul, EV_NONE, true, NULL},
        /* the stillness test of the compensated mode (docs/algorithms.md §2c) */
        {"sim-u16-compensated-bowl-still-jump", false, IN_SIM, 34, true,
         c_sim_compensated_bowl_still, EV_NONE, false, NULL},
        {"async-sim-u16-compensated-bowl-still-jump", false, IN_SIM, 34, true,
         c_sim_compensated_bowl_still, EV_NONE, true, NULL},
        /* output.channels last, for the same reason */
        {"channels-u16-m2-cdv-bscan-bulk", false, IN_REPEATS, 6, true, c_ch_m2_cdv_bscan, EV_NONE,
         false, NULL},
        {"channels-i16-m4-odd-svar-ascan-nobulk-flips-crop-cumul", false, IN_REPEATS, 6, true,
         c_ch_m4_odd_svar_ascan, EV_NONE, false, NULL},
        {"channels-u12p-m4-cdv-ascan-bulk-disp-none", false, IN_REPEATS, 3, true,
         c_ch_m4_u12p_none_ascan, EV_NONE, false, NULL},
        {"channels-u16-m2-svar-bscan-nobulk-pmedian-no-structure", false, IN_REPEATS, 6, true,
         c_ch_m2_pmedian_no_structure, EV_NONE, false, NULL},
        {"channels-u16-m1-doppler-ascan-odd-product", false, IN_RANDOM, 6, true, c_ch_m1_doppler,
         EV_NONE, false, NULL},
        {"channels-f32-nonfinite-m1-doppler-cumul", false, IN_NONFINITE, 6, true,
         c_ch_f32_nonfinite_doppler, EV_NONE, false, NULL},
        {"channels-sim-flow-m4-cdv-bscan-bulk", false, IN_SIM, 4, true, c_ch_sim_flow, EV_NONE,
         false, NULL},
        {"channels-u16-m2-live-functional", false, IN_REPEATS, 8, true, c_ch_m2_cdv_bscan, EV_LIVE,
         false, live_functional},
        {"channels-i16-m4-odd-reset-history", false, IN_REPEATS, 8, false, c_ch_m4_odd_svar_ascan,
         EV_RESET, false, NULL},
        {"async-channels-u16-m2-cdv-bscan-bulk", false, IN_REPEATS, 7, true, c_ch_m2_cdv_bscan,
         EV_NONE, true, NULL},
        {"async-channels-u16-m2-cdv-bscan-bulk-ahead", false, IN_REPEATS, 10, true,
         c_ch_m2_cdv_bscan, EV_FULL_SOME, true, NULL},
        {"async-channels-u12p-m4-none-ahead", false, IN_REPEATS, 7, true, c_ch_m4_u12p_none_ascan,
         EV_FULL_SOME, true, NULL},
        {"async-channels-i16-m4-odd-cumul", false, IN_REPEATS, 6, true, c_ch_m4_odd_svar_ascan,
         EV_NONE, true, NULL},
        /* f32 with repeats */
        {"nonfinite-f32-m2-bmean-cubic-bidir-cumul", false, IN_NONFINITE, 6, true,
         c_nf_m2_bmean_cumul, EV_NONE, false, NULL},
        {"nonfinite-pmedian-lines-f32-m3", false, IN_LINES_NONFINITE, 4, true, c_nf_m3_pmedian,
         EV_NONE, false, NULL},
        {"channels-f32-nonfinite-m4-cdv-ascan-bulk-cumul", false, IN_NONFINITE, 5, true,
         c_ch_f32_nonfinite_m4, EV_NONE, false, NULL},
        {"async-nonfinite-f32-m2-bmean-cubic-bidir-cumul", false, IN_NONFINITE, 6, true,
         c_nf_m2_bmean_cumul, EV_NONE, true, NULL},
};

/* ---- host-side table check (no device needed) ---------------------------------------------- */

/* Natural cubic spline through y (unit spacing) evaluated at p, in double. */
static double spline_ref(const double *y, uint32_t K, double p, double *m, double *c)
{
	for (uint32_t i = 0; i < K; i++)
		m[i] = 0;
	if (K >= 3) {
		double prev = 0;
		for (uint32_t i = 1; i + 1 < K; i++) {
			double den = 4 - (i > 1 ? c[i - 1] : 0);
			c[i] = 1 / den;
			prev = (6 * (y[i + 1] - 2 * y[i] + y[i - 1]) - prev) / den;
			m[i] = prev;
		}
		for (uint32_t i = K - 2; i >= 2; i--)
			m[i - 1] -= c[i - 1] * m[i];
	}
	uint32_t i = (uint32_t)floor(p);
	if (i > K - 2)
		i = K - 2;
	double t = p - i, a = 1 - t;
	return a * y[i] + t * y[i + 1] + (a * a * a - a) / 6 * m[i] +
	       (t * t * t - t) / 6 * m[i + 1];
}

static int host_table_check(void)
{
	static const uint32_t Ks[] = {3, 5, 37, 300, 2048};
	int fails = 0;

	for (size_t ki = 0; ki < sizeof(Ks) / sizeof(Ks[0]); ki++) {
		const uint32_t K = Ks[ki];
		struct vr_config c;
		struct gpu_tables t;
		char err[512];
		double *y = table_new(K), *m = table_new(K), *cc = table_new(K);
		double *tab = table_new(K);

		cfg_defaults(&c);
		geom(&c, K, 4, 4, 1, 1, CFG_SAMPLE_F32);
		c.preprocess.resample.method = CFG_RS_SPLINE;
		c.preprocess.resample.positions = CFG_RSPOS_TABLE;
		for (uint32_t j = 0; j < K; j++)
			tab[j] = rng_unit() * (K - 1);
		tab[0] = 0;
		tab[K - 1] = K - 1;
		set_table(&c.preprocess.resample.table, tab, K, "positions");
		for (uint32_t k = 0; k < K; k++)
			y[k] = 1000 * (rng_unit() - 0.5) + 300 * sin(k * 0.3);
		if (gpu_tables_build(&c, &t, err, sizeof(err)) < 0) {
			printf("host-spline-fir K=%u: FAIL (%s)\n", K, err);
			fails++;
		} else {
			double maxerr = 0, maxy = 0;
			for (uint32_t k = 0; k < K; k++)
				maxy = fmax(maxy, fabs(y[k]));
			for (uint32_t j = 0; j < K; j++) {
				double v = 0;
				for (uint32_t q = 0; q < t.taps; q++) {
					int64_t i = t.rs_idx[j] + (int64_t)q;
					i = i < 0 ? 0 : i > K - 1 ? K - 1 : i;
					v += (double)t.rs_w[(size_t)q * K + j] * y[i];
				}
				maxerr = fmax(maxerr, fabs(v - spline_ref(y, K, tab[j], m, cc)));
			}
			bool ok = maxerr <= 2e-6 * maxy;
			printf("host-spline-fir K=%u taps=%u: max error %.3g of max |y| %.3g: %s\n",
			       K, t.taps, maxerr, maxy, ok ? "PASS" : "FAIL");
			fails += !ok;
			gpu_tables_free(&t);
		}
		cfg_free(&c);
		free(y);
		free(m);
		free(cc);
	}
	return fails;
}

/* ---- one case ---------------------------------------------------------------------------- */

/* One backend's outputs of an epoch. With output.channels (docs/algorithms.md §5) vol and full
 * hold nch channels of vox voxels each ([c][Y][X][Z]); la and ld the low-resolution volumes of
 * angiography and Doppler (when output). */
struct outs {
	uint8_t *vol;
	float *low, *full;
	uint32_t *md; /* [2][ny] median depths (partial_median), missing A-scans */
	uint32_t ny;
	uint32_t nch;   /* channels in vol and full */
	int sc, ac, dc; /* the structure's, angiography's, Doppler's channel (-1: not output) */
	float *la, *ld; /* lowres_angio, lowres_doppler, or NULL */
	/* With channels and views: the views area and the channel views (protocol.h) of the
	 * views' parameters vp, asked for as CHV_MASK; NULL otherwise */
	uint8_t *views, *chv;
	struct be_view_params vp;
	uint64_t volume_id;
};

/* The pictures the channel views have (protocol.h): asked for in every channel case. */
#define CHV_MASK ((1u << BE_VIEW_ENFACE_MEAN) | (1u << BE_VIEW_ENFACE_MAX) | (1u << BE_VIEW_BSCAN))

static void outs_free(struct outs *o)
{
	free(o->vol);
	free(o->low);
	free(o->full);
	free(o->md);
	free(o->la);
	free(o->ld);
	free(o->views);
	free(o->chv);
}

/* The outputs of c's channels: vox voxels a channel, low low-resolution samples, the float
 * volume when full is not 0. */
static int outs_alloc(struct outs *o, const struct vr_config *c, size_t vox, size_t low,
                      size_t full, uint32_t ny)
{
	enum cfg_channel ch[CFG_CH_COUNT];

	o->nch = cfg_channels(c, ch);
	o->sc = o->ac = o->dc = -1;
	for (uint32_t i = 0; i < o->nch; i++) {
		if (ch[i] == CFG_CH_STRUCTURE)
			o->sc = (int)i;
		else if (ch[i] == CFG_CH_ANGIO)
			o->ac = (int)i;
		else
			o->dc = (int)i;
	}
	o->vol = malloc(vox * o->nch);
	o->low = malloc(low * sizeof(float));
	o->full = full ? malloc(full * o->nch * sizeof(float)) : NULL;
	o->md = malloc(2 * ny * sizeof(uint32_t));
	o->la = o->ac >= 0 ? malloc(low * sizeof(float)) : NULL;
	o->ld = o->dc >= 0 ? malloc(low * sizeof(float)) : NULL;
	o->ny = ny;
	if (o->md)
		memset(o->md, 0xff, 2 * ny * sizeof(uint32_t)); /* must be overwritten */
	/* and the channels' outputs likewise (NaN floats, a u8 pattern) */
	if (o->vol)
		memset(o->vol, 0xa5, vox * o->nch);
	if (o->full)
		memset(o->full, 0xff, full * o->nch * sizeof(float));
	if (o->la)
		memset(o->la, 0xff, low * sizeof(float));
	if (o->ld)
		memset(o->ld, 0xff, low * sizeof(float));
	/* channels with views: both areas, poisoned (the comparison finds a byte left out) */
	if (o->nch > 1 && be_views_wanted(c)) {
		be_view_params_from_cfg(c, &o->vp);
		if ((size_t)o->vp.Y * o->vp.X * o->vp.Z != vox)
			return -EINVAL;
		const size_t vb = volrec_views_bytes(o->vp.Y, o->vp.X, o->vp.Z),
		             cb = volrec_channel_views_bytes(o->vp.Y, o->vp.X, o->vp.Z, o->nch);
		o->views = aligned_alloc(64, (vb + 63) / 64 * 64);
		o->chv = aligned_alloc(64, (cb + 63) / 64 * 64);
		if (!o->views || !o->chv)
			return -ENOMEM;
		memset(o->views, 0xee, vb);
		memset(o->chv, 0xee, cb);
	}
	return o->vol && o->low && o->md && (!full || o->full) && (o->ac < 0 || o->la) &&
	                       (o->dc < 0 || o->ld)
	               ? 0
	               : -ENOMEM;
}

/* The be_output of o: every output it has (the float volume when full). */
static struct be_output outs_out(struct outs *o, bool full)
{
	o->volume_id++;
	if (o->chv) /* a picture left out shows */
		memset(o->chv, 0xee, volrec_channel_views_bytes(o->vp.Y, o->vp.X, o->vp.Z, o->nch));
	return (struct be_output){.volume = o->vol,
	                          .views = o->views,
	                          .channel_views = o->chv,
	                          .view_mask = o->views ? CHV_MASK : 0,
	                          .volume_id = o->volume_id,
	                          .lowres = o->low,
	                          .full = full ? o->full : NULL,
	                          .lowres_angio = o->la,
	                          .lowres_doppler = o->ld,
	                          .channels = o->nch,
	                          .median_depths = o->md,
	                          .missing_ascans = o->md + o->ny};
}

static void fill_random(const struct vr_config *c, uint8_t *raw, size_t bytes)
{
	const size_t n = bytes / (cfg_sample_packed(c->geometry.sample_type)
	                                  ? 1
	                                  : cfg_sample_bytes(c->geometry.sample_type, 1));

	switch (c->geometry.sample_type) {
	case CFG_SAMPLE_U12P:
	case CFG_SAMPLE_U12GV: /* any bytes are valid packed samples */
		for (size_t i = 0; i < n; i++)
			raw[i] = (uint8_t)(rng_next() >> 56);
		break;
	case CFG_SAMPLE_U16:
		for (size_t i = 0; i < n; i++)
			((uint16_t *)raw)[i] = (uint16_t)(rng_next() >> 48);
		break;
	case CFG_SAMPLE_I16:
		for (size_t i = 0; i < n; i++)
			((int16_t *)raw)[i] = (int16_t)(uint16_t)(rng_next() >> 48);
		break;
	default:
		for (size_t i = 0; i < n; i++)
			((float *)raw)[i] = (float)(2000.0 * rng_unit() - 700.0);
		break;
	}
}

/* Pack v[0..n) (12-bit values, n even) as u12p or u12gv (docs/algorithms.md §0). */
static void pack12(const uint16_t *v, size_t n, bool gv, uint8_t *o)
{
	for (size_t i = 0; i < n; i += 2, o += 3) {
		const uint32_t a = v[i], b = v[i + 1];
		if (gv) {
			o[0] = (uint8_t)(a >> 4);
			o[1] = (uint8_t)((a & 0xf) | (b & 0xf) << 4);
			o[2] = (uint8_t)(b >> 4);
		} else {
			o[0] = (uint8_t)a;
			o[1] = (uint8_t)(a >> 8 | (b & 0xf) << 4);
			o[2] = (uint8_t)(b >> 4);
		}
	}
}

/* Random u16/i16/f32/u12 samples around mid-scale with strong lines: three at fixed depths with an
 * amplitude that changes from A-scan to A-scan, and in every other A-scan a "tilted
 * reflector" whose depth moves with the A-scan index over a tenth of the spectrum's
 * frequencies (docs/algorithms.md §1b: fewer than half the depths carry lines, so sigma_bg is the
 * noise's, and their sigma stands 40-80 times above it: the decisions have a wide margin). */
static void fill_lines(const struct vr_config *c, uint8_t *raw, size_t bytes)
{
	const uint32_t K = c->geometry.samples_per_ascan, nx = c->geometry.ascans_per_bscan;
	const enum cfg_sample t = c->geometry.sample_type;
	const size_t nas = bytes / cfg_sample_bytes(t, K);
	const double fixed[3] = {0.061, 0.137, 0.29}; /* cycles per sample */
	uint16_t *row = cfg_sample_packed(t) ? malloc(K * sizeof(*row)) : NULL;

	for (size_t r = 0; r < nas; r++) {
		const uint32_t a = (uint32_t)(r % nx);
		double amp[3], tilt = 0.05 + 0.1 * a / (double)nx, ta = a % 2 ? 8000 : 0;
		for (int q = 0; q < 3; q++)
			amp[q] = 3000.0 * rng_unit();
		for (uint32_t k = 0; k < K; k++) {
			double v = 400.0 * (rng_unit() - 0.5) + ta * cos(2 * M_PI * tilt * k);
			for (int q = 0; q < 3; q++)
				v += amp[q] * cos(2 * M_PI * fixed[q] * k + q);
			const size_t i = r * K + k;
			switch (c->geometry.sample_type) {
			case CFG_SAMPLE_U16:
				((uint16_t *)raw)[i] = (uint16_t)fmin(fmax(v + 30000.0, 0), 65535);
				break;
			case CFG_SAMPLE_I16:
				((int16_t *)raw)[i] = (int16_t)fmin(fmax(v, -32768), 32767);
				break;
			case CFG_SAMPLE_U12P:
			case CFG_SAMPLE_U12GV: /* a 12-bit digitizer: a 16th of the scale */
				if (row)
					row[k] = (uint16_t)fmin(fmax(v / 16 + 2048.0, 0), 4095);
				break;
			default:
				((float *)raw)[i] = (float)(v + 500.0);
				break;
			}
		}
		if (row)
			pack12(row, K, t == CFG_SAMPLE_U12GV, raw + cfg_sample_bytes(t, r * K));
	}
	free(row);
}

/* IN_REPEATS (enum input) for the raw epoch of c (every repeat of every position). */
static void fill_repeats(const struct vr_config *c, uint8_t *raw)
{
	const uint32_t K = c->geometry.samples_per_ascan, nx = c->geometry.ascans_per_bscan,
	               ny = c->geometry.bscans_per_volume, M = c->geometry.repeats;
	const enum cfg_sample t = c->geometry.sample_type;
	const size_t bbytes = cfg_bscan_bytes(c), abytes = cfg_ascan_bytes(c);
	static const double wt[4] = {0.0, 0.02, 0.2, 1.0};
	double *base = malloc(K * sizeof(double));
	uint16_t *row = malloc(K * sizeof(uint16_t));

	if (!base || !row) {
		fprintf(stderr, "gpu_equal: out of memory\n");
		exit(1);
	}
	for (uint32_t b = 0; b < ny; b++)
		for (uint32_t a = 0; a < nx; a++) {
			const double w = wt[rng_next() % 4];
			for (uint32_t k = 0; k < K; k++)
				base[k] = (double)(rng_next() % 4096);
			for (uint32_t m = 0; m < M; m++) {
				uint8_t *dst =
				        raw + (size_t)(b * M + m) * bbytes + (size_t)a * abytes;
				for (uint32_t k = 0; k < K; k++) {
					const double v =
					        (1 - w) * base[k] + w * (double)(rng_next() % 4096);
					row[k] = (uint16_t)fmin(fmax(rint(v), 0), 4095);
				}
				for (uint32_t k = 0; k < K; k++) {
					if (t == CFG_SAMPLE_U16)
						((uint16_t *)dst)[k] = (uint16_t)(row[k] * 16);
					else if (t == CFG_SAMPLE_I16)
						((int16_t *)dst)[k] =
						        (int16_t)((int)row[k] * 8 - 16384);
					else if (t == CFG_SAMPLE_F32)
						((float *)dst)[k] = (float)row[k];
				}
				if (cfg_sample_packed(t))
					pack12(row, K, t == CFG_SAMPLE_U12GV, dst);
			}
		}
	free(base);
	free(row);
}

/* NaNs and infinities in the f32 epoch e (docs/algorithms.md §1.0): in B-scan 1 two
 * neighbouring A-scans (a NaN, a -inf) that move with e, in B-scan 2 its first A-scan all +inf
 * and a NaN in its last (the ends: the nearest A-scan alone), every third epoch the whole of
 * B-scan 3 (nothing to fill from), and about 2 % of the other A-scans a NaN at a random
 * sample. */
static void poke_nonfinite(const struct vr_config *c, uint64_t e, float *raw)
{
	/* ny: the raw B-scans (with repeats, a repeat's non-finite sample makes the A-scan
	 * missing in all of its position's repeats) */
	const uint32_t K = c->geometry.samples_per_ascan, nx = c->geometry.ascans_per_bscan,
	               ny = cfg_raw_bscans(c);
#define AS(b, a) (raw + ((size_t)(b)*nx + (a)) * K)
	AS(1 % ny, e % nx)[(e * 7) % K] = NAN;
	AS(1 % ny, (e + 1) % nx)[(e * 13 + 5) % K] = -INFINITY;
	for (uint32_t k = 0; k < K; k++)
		AS(2 % ny, 0)[k] = INFINITY;
	AS(2 % ny, nx - 1)[0] = NAN;
	if (e % 3 == 0)
		for (uint32_t a = 0; a < nx; a++)
			AS(3 % ny, a)[(a * 3) % K] = NAN;
	for (uint32_t b = 4; b < ny; b++)
		for (uint32_t a = 0; a < nx; a++)
			if (rng_next() % 50 == 0)
				AS(b, a)[rng_next() % K] = NAN;
#undef AS
}

/* The raw input of epoch e: the simulator's B-scans at e's offset, or fresh random data. */
static int make_input(struct sim *sim, enum input in, const struct vr_config *c, uint64_t e,
                      uint8_t *raw, char *err, size_t errlen)
{
	const uint32_t nraw = cfg_raw_bscans(c), M = c->geometry.repeats;
	const size_t bbytes = cfg_bscan_bytes(c);

	if (!sim) {
		if (in == IN_LINES || in == IN_LINES_NONFINITE)
			fill_lines(c, raw, bbytes * nraw);
		else if (in == IN_REPEATS)
			fill_repeats(c, raw);
		else
			fill_random(c, raw, bbytes * nraw);
		if (in == IN_NONFINITE || in == IN_LINES_NONFINITE)
			poke_nonfinite(c, e, (float *)raw);
		return 0;
	}
	uint32_t ox, oy;
	vr_scan_offset(e, c->geometry.stride[0], c->geometry.stride[1], &ox, &oy);
	for (uint32_t b = 0; b < nraw; b++) { /* raw B-scan b: repeat b % M of position b / M */
		int rc = sim_bscan_repeat(sim, e, ox, oy, b / M, b % M, raw + (size_t)b * bbytes,
		                          bbytes);
		if (rc < 0) {
			snprintf(err, errlen, "sim_bscan: %s", strerror(-rc));
			return rc;
		}
	}
	return 0;
}

/* Open the backend `kind` (cpu or cuda) for c, whatever c->backend says. */
static int open_backend(struct vr_config *c, enum cfg_backend kind, struct be_backend **be,
                        char *err, size_t errlen)
{
	const enum cfg_backend keep = c->backend;
	int rc;

	c->backend = kind;
	rc = be_open(c, be, NULL, 0, err, errlen);
	c->backend = keep;
	return rc;
}

/* Open the CUDA backend over the --devices list for c. */
static int open_multi(struct vr_config *c, struct be_backend **be, char *err, size_t errlen)
{
	struct vr_config m;
	int rc = cfg_copy(&m, c);

	if (rc < 0)
		return rc;
	set_devices(&m);
	rc = open_backend(&m, CFG_BACKEND_CUDA, be, err, errlen);
	cfg_free(&m);
	return rc;
}

/* Whether the outputs of several devices (m) equal one device's (o) bit for bit; the first
 * difference into why. */
static bool same_outs(const struct outs *o, const struct outs *m, size_t vox, size_t low,
                      size_t full, char *why, size_t len)
{
	for (size_t i = 0; i < vox; i++)
		if (o->vol[i] != m->vol[i]) {
			snprintf(why, len, "u8 voxel %zu: one device %u, several %u", i, o->vol[i],
			         m->vol[i]);
			return false;
		}
	if (memcmp(o->low, m->low, low * sizeof(float))) {
		size_t i = 0;
		while (i < low && !memcmp(&o->low[i], &m->low[i], sizeof(float)))
			i++;
		snprintf(why, len, "lowres %zu: one device %.9g, several %.9g", i, o->low[i],
		         m->low[i]);
		return false;
	}
	if (full && memcmp(o->full, m->full, full * sizeof(float))) {
		size_t i = 0;
		while (i < full && !memcmp(&o->full[i], &m->full[i], sizeof(float)))
			i++;
		snprintf(why, len, "float voxel %zu: one device %.9g, several %.9g", i, o->full[i],
		         m->full[i]);
		return false;
	}
	for (uint32_t b = 0; b < 2 * o->ny; b++)
		if (o->md[b] != m->md[b]) {
			snprintf(why, len, "%s of B-scan %u: one device %u, several %u",
			         b < o->ny ? "median depths" : "missing A-scans", b % o->ny,
			         o->md[b], m->md[b]);
			return false;
		}
	return true;
}

/* Fill outputs with a pattern that no backend writes, so that a part left out shows. */
static void outs_poison(struct outs *o, size_t vox, size_t low, size_t full)
{
	memset(o->vol, 0xa5, vox);
	memset(o->low, 0xff, low * sizeof(float));
	if (full)
		memset(o->full, 0xff, full * sizeof(float));
	memset(o->md, 0xff, 2 * o->ny * sizeof(uint32_t));
}

/* Submit every raw B-scan of epoch e (ny: their number, positions x repeats) in an interleaved
 * order (any order is allowed: the repeats of a position too). */
static int submit_all(struct be_backend *be, uint64_t e, const uint8_t *raw, size_t bbytes,
                      uint32_t ny, char *err, size_t errlen)
{
	for (uint32_t b = 0; b < ny; b++) {
		uint32_t bb = ny % 7 == 0 ? b : (b * 7 + 3) % ny;
		int rc = be_bscan_submit(be, e, bb, raw + (size_t)bb * bbytes);
		if (rc < 0) {
			snprintf(err, errlen, "%s", be_last_error(be));
			return rc;
		}
	}
	return 0;
}

/* One epoch through one backend. */
static int run_epoch(struct be_backend *be, uint64_t e, const uint8_t *raw, size_t bbytes,
                     uint32_t ny, const struct be_output *out, char *err, size_t errlen)
{
	int rc = submit_all(be, e, raw, bbytes, ny, err, errlen);
	return rc < 0 ? rc : be_epoch_finish(be, e, out, err, errlen);
}

/* The dB range that puts this input's values mid-scale: one CPU epoch in mode none with a
 * wide range, then the 1st and 99.9th percentiles of the dB values. */
static int calibrate_db(struct vr_config *c, const uint8_t *raw, size_t bbytes, char *err,
                        size_t errlen)
{
	struct vr_config w;
	struct be_backend *be = NULL;
	float *low = NULL;
	int rc;

	rc = cfg_copy(&w, c);
	if (rc < 0)
		return rc;
	w.reconstruct.mode = CFG_RECON_NONE;
	w.preprocess.db_range[0] = -100;
	w.preprocess.db_range[1] = 300;
	const size_t n =
	        (size_t)w.geometry.bscans_per_volume * w.geometry.ascans_per_bscan * cfg_nz(&w);
	low = malloc(n * sizeof(float));
	rc = low ? open_backend(&w, CFG_BACKEND_CPU, &be, err, errlen) : -ENOMEM;
	if (rc == 0) {
		struct be_output o = {.lowres = low};
		rc = run_epoch(be, 0, raw, bbytes, cfg_raw_bscans(&w), &o, err, errlen);
	}
	if (rc == 0) {
		/* histogram over 0.01 dB bins of [-100, 300] */
		const size_t nb = 40000;
		size_t *h = calloc(nb, sizeof(size_t)), acc = 0;
		double lo = 0, hi = 0;
		bool have_lo = false;
		if (!h) {
			rc = -ENOMEM;
		} else {
			for (size_t i = 0; i < n; i++) {
				size_t b = (size_t)(low[i] * (nb - 1));
				h[b < nb ? b : nb - 1]++;
			}
			for (size_t b = 0; b < nb; b++) {
				acc += h[b];
				double d = -100 + 400.0 * b / (nb - 1);
				if (!have_lo && acc >= n / 100) {
					lo = d;
					have_lo = true;
				}
				if (acc >= n - n / 1000) {
					hi = d;
					break;
				}
			}
			free(h);
			c->preprocess.db_range[0] = floor(lo - 3);
			c->preprocess.db_range[1] = ceil(hi + 1);
			if (!(c->preprocess.db_range[1] > c->preprocess.db_range[0] + 1))
				c->preprocess.db_range[1] = c->preprocess.db_range[0] + 10;
		}
	}
	be_close(be);
	free(low);
	cfg_free(&w);
	return rc;
}

/* The channels' comparisons (docs/algorithms.md §5): angiography's v (low-resolution, float
 * volume: absolute difference, v in [0, 1]), Doppler's phase in radians on the circle
 * (low-resolution), its v on the circle of 1 (float volume), the u8 of both (Doppler's on the
 * circle of 255). A value counts as equal within its tolerance; a voxel where the structure
 * lies at functional.mask_db within float rounding may be masked on one backend only, so
 * FN_MIN_FRACTION of the values must be equal (not all), and the largest difference is
 * reported. */
#define FN_MIN_FRACTION 0.9999
#define PHASE_TOL       1e-3 /* rad */
enum { FN_LA, FN_FA, FN_UA, FN_LD, FN_FD, FN_UD, FN_FIGS };
static const char *const fn_names[FN_FIGS] = {"lowres_angio",   "full_angio",   "angio u8",
                                              "lowres_doppler", "full_doppler", "doppler u8"};
/* The least spread (standard deviation of the CPU's values) of a figure that is not degenerate:
 * Doppler's float v is phase / 2 pi (bulk-corrected static tissue stays near 0.5). */
static const double fn_spread[FN_FIGS] = {0.01, 0.01, 1.0, 0.01, 0.001, 1.0};
struct fn_fig {
	uint64_t n, bad;    /* values compared, beyond the tolerance */
	double max;         /* largest difference */
	double s, s2;       /* sum and sum of squares of the CPU's values (spread) */
	uint64_t max_epoch; /* where the largest difference is */
	size_t max_index;
	double max_cpu, max_gpu;
};

struct figures {
	double low_rel;    /* worst epoch */
	double u8_frac;    /* worst epoch */
	double full_rel;   /* worst epoch, when compared */
	int u8_maxdiff;    /* largest u8 difference over all epochs */
	double low_spread; /* standard deviation of the CPU's lowres (degenerate check) */
	unsigned epochs;
	/* where the worst lowres difference is (worst epoch): index, values, the CPU A-scan's
	 * largest value; and the worst difference among bins within 40 dB of their A-scan's
	 * peak */
	uint64_t md_mismatch; /* B-scans whose median depth counts differ */
	uint64_t md_total;    /* median depths over all epochs and B-scans (CPU) */
	uint64_t mc_mismatch; /* B-scans whose missing A-scan counts differ */
	uint64_t mc_total;    /* missing A-scans over all epochs (CPU) */
	uint64_t w_epoch;
	size_t w_index;
	float w_cpu, w_gpu, w_amax;
	double low_rel_40db;
	/* --devices: epochs whose outputs differ from one device's, and the first difference */
	unsigned multi_bad;
	char multi_why[256];
	/* compensated: epochs whose poses were compared, the largest difference, where */
	unsigned poses;
	double pose_diff;
	uint64_t pose_epoch;
	struct be_motion_pose pose_cpu, pose_gpu;
	/* output.channels: per channel figure (struct fn_fig), over all epochs */
	struct fn_fig fn[FN_FIGS];
	/* the channel views (protocol.h) of channels 1..: epochs compared; bytes of the CUDA
	 * backend's that differ from cpu_views_compute on the CUDA backend's own channel volume
	 * (must be 0), with the first; against the CPU backend's channel views, pictures'
	 * pixels compared, those more than 2 LSB apart (circular for Doppler) and the largest
	 * difference */
	unsigned chv_epochs;
	uint64_t chv_own_diff;
	char chv_why[200];
	uint64_t chv_n, chv_bad;
	int chv_maxd;
};

/* compensated: the pose of the epoch both backends just finished, compared (nothing when
 * either has no estimator yet, or the CUDA side is several devices). */
static void compare_pose(struct be_backend *cb, struct be_backend *gb, uint64_t epoch,
                         struct figures *f)
{
	const struct cpu_state *cst = be_impl_state(cb);
	const struct be_motion *gm = multi_n ? NULL : gpu_part_motion(be_impl_state(gb));

	if (!cst->motion || !gm)
		return;
	const struct be_motion_pose a = be_motion_last_pose(cst->motion);
	const struct be_motion_pose b = be_motion_last_pose(gm);
	const double d = fmax(fmax(fabs(a.th - b.th), fabs(a.tx - b.tx)),
	                      fmax(fabs(a.ty - b.ty), fabs(a.tz - b.tz)));
	if (!f->poses++ || d > f->pose_diff || d != d) {
		f->pose_diff = d != d ? INFINITY : d;
		f->pose_epoch = epoch;
		f->pose_cpu = a;
		f->pose_gpu = b;
	}
}

/* --devices: one epoch of several devices (m) against one device (o). */
static void compare_multi(const struct outs *o, const struct outs *m, size_t vox, size_t low,
                          size_t full, uint64_t epoch, struct figures *f)
{
	char why[200];

	if (same_outs(o, m, vox, low, full, why, sizeof(why)))
		return;
	if (!f->multi_bad++)
		snprintf(f->multi_why, sizeof(f->multi_why), "epoch %llu: %s",
		         (unsigned long long)epoch, why);
}

/* Compare one epoch's outputs; nz and db_span (hi - lo of the dB range) locate the worst
 * lowres difference in its A-scan. */
/* Distance of a and b on a circle of the given period. */
static double circle(double a, double b, double period)
{
	double d = fmod(fabs(a - b), period);
	return d != d ? INFINITY : fmin(d, period - d);
}

/* n values of one channel's output (period 0: absolute differences) into the figure. */
static void fn_add(struct fn_fig *q, const float *c, const float *g, size_t n, double tol,
                   double period, uint64_t epoch)
{
	for (size_t i = 0; i < n; i++) {
		double d = period > 0 ? circle(g[i], c[i], period) : fabs((double)g[i] - c[i]);
		if (d != d)
			d = INFINITY;
		q->bad += !(d <= tol);
		if (d > q->max || (!q->n && i == 0)) {
			q->max = d;
			q->max_epoch = epoch;
			q->max_index = i;
			q->max_cpu = c[i];
			q->max_gpu = g[i];
		}
		q->s += c[i];
		q->s2 += (double)c[i] * c[i];
	}
	q->n += n;
}

/* The same for u8 values, within 1 LSB. */
static void fn_add8(struct fn_fig *q, const uint8_t *c, const uint8_t *g, size_t n, bool circular,
                    uint64_t epoch)
{
	for (size_t i = 0; i < n; i++) {
		double d = circular ? circle(g[i], c[i], 255) : abs((int)g[i] - (int)c[i]);
		q->bad += d > 1;
		if (d > q->max) {
			q->max = d;
			q->max_epoch = epoch;
			q->max_index = i;
			q->max_cpu = c[i];
			q->max_gpu = g[i];
		}
		q->s += c[i];
		q->s2 += (double)c[i] * c[i];
	}
	q->n += n;
}

/* The channel views of one epoch (docs/algorithms.md §4 on each channel past the first): the
 * CUDA backend's (g) against the CPU's code run on the CUDA backend's own channel volume, byte
 * for byte, and against the CPU backend's (c), whose channel volumes differ by the channels'
 * tolerance. */
static void compare_chv(const struct outs *c, const struct outs *g, size_t vox, uint64_t epoch,
                        struct figures *f)
{
	static const enum be_view kinds[] = {BE_VIEW_ENFACE_MEAN, BE_VIEW_ENFACE_MAX,
	                                     BE_VIEW_BSCAN};
	const struct be_view_params *p = &g->vp;
	const uint64_t step = volrec_channel_views_step(p->Y, p->X, p->Z);
	uint8_t *ref = malloc(step);
	struct be_render_setup rs;

	if (!ref) {
		f->chv_own_diff++;
		snprintf(f->chv_why, sizeof(f->chv_why), "out of memory");
		return;
	}
	be_render_setup(p, &rs);
	for (uint32_t ch = 1; ch < g->nch; ch++) {
		const uint8_t *gv = g->chv + (ch - 1) * step, *cv = c->chv + (ch - 1) * step;
		const bool doppler = (int)ch == g->dc;
		uint8_t *pic[BE_VIEW_COUNT] = {0};

		memset(ref, 0x5a, step);
		for (int k = 0; k < 3; k++)
			pic[kinds[k]] = ref + volrec_channel_view_offset(p->Y, p->X, kinds[k]);
		cpu_views_compute(g->vol + ch * vox, p, &rs, pic);
		for (int k = 0; k < 3; k++) {
			const size_t o = volrec_channel_view_offset(p->Y, p->X, kinds[k]);
			const size_t n = be_view_size(p, kinds[k]);

			for (size_t i = 0; i < n; i++) {
				const int dd = abs((int)gv[o + i] - (int)cv[o + i]);
				const int d = doppler && 255 - dd < dd ? 255 - dd : dd;

				if (gv[o + i] != ref[o + i] && !f->chv_own_diff++)
					snprintf(f->chv_why, sizeof(f->chv_why),
					         "epoch %llu channel %u %s pixel %zu: cuda %u, cpu "
					         "code on cuda's volume %u",
					         (unsigned long long)epoch, ch,
					         be_view_name(kinds[k]), i, gv[o + i], ref[o + i]);
				f->chv_bad += d > 2;
				f->chv_maxd = d > f->chv_maxd ? d : f->chv_maxd;
			}
			f->chv_n += n;
		}
	}
	f->chv_epochs++;
	free(ref);
}

/* The channels other than the structure of one epoch (vox voxels a channel; full: the float
 * volume was asked for). */
static void compare_fn(const struct outs *c, const struct outs *g, size_t vox, size_t low,
                       size_t full, uint64_t epoch, struct figures *f)
{
	if (c->ac >= 0) {
		const size_t o = (size_t)c->ac * vox;
		fn_add(&f->fn[FN_LA], c->la, g->la, low, LOWRES_TOL, 0, epoch);
		if (full)
			fn_add(&f->fn[FN_FA], c->full + o, g->full + o, vox, LOWRES_TOL, 0, epoch);
		fn_add8(&f->fn[FN_UA], c->vol + o, g->vol + o, vox, false, epoch);
	}
	if (c->dc >= 0) {
		const size_t o = (size_t)c->dc * vox;
		fn_add(&f->fn[FN_LD], c->ld, g->ld, low, PHASE_TOL, 2 * M_PI, epoch);
		if (full)
			fn_add(&f->fn[FN_FD], c->full + o, g->full + o, vox, PHASE_TOL / (2 * M_PI),
			       1.0, epoch);
		fn_add8(&f->fn[FN_UD], c->vol + o, g->vol + o, vox, true, epoch);
	}
}

/* Whether the channels' figures pass (u8: FN_MIN_FRACTION's 99.9 %, as the structure's): each
 * compared one, and the CPU's values spread (not a degenerate input). */
static bool fn_pass(const struct figures *f, const struct outs *o)
{
	for (int k = 0; k < FN_FIGS; k++) {
		const struct fn_fig *q = &f->fn[k];
		const bool u8 = k == FN_UA || k == FN_UD;
		const bool want = (k <= FN_UA && o->ac >= 0) || (k >= FN_LD && o->dc >= 0);
		if (!want)
			continue;
		if (!q->n) {
			if (k == FN_FA || k == FN_FD)
				continue; /* no float volume asked for */
			return false;
		}
		const double ok = 1.0 - (double)q->bad / (double)q->n;
		const double mean = q->s / (double)q->n;
		const double sd = sqrt(fmax(q->s2 / (double)q->n - mean * mean, 0));
		if (ok < (u8 ? U8_MIN_FRACTION : FN_MIN_FRACTION) || !(sd > fn_spread[k]))
			return false;
	}
	return true;
}

/* Whether the channel views pass, where the case has them: every epoch compared, the CUDA
 * backend's equal to the CPU's code on its own volume byte for byte, and within 2 LSB of the
 * CPU backend's (whose channel volumes differ by up to the channels' tolerance; a projection's
 * maximum can take the next value where a Doppler phase wraps) at CHV_MIN_FRACTION of the
 * pixels. */
#define CHV_MIN_FRACTION 0.99
static bool chv_pass(const struct figures *f, const struct outs *o)
{
	if (!o->chv)
		return true;
	return f->chv_epochs == f->epochs && f->chv_epochs > 0 && f->chv_own_diff == 0 &&
	       f->chv_n > 0 && 1.0 - (double)f->chv_bad / (double)f->chv_n >= CHV_MIN_FRACTION;
}

/* The channels' figures, a line each. */
static void fn_print(const struct figures *f, const struct outs *o)
{
	for (int k = 0; k < FN_FIGS; k++) {
		const struct fn_fig *q = &f->fn[k];
		const bool u8 = k == FN_UA || k == FN_UD;
		if (!q->n)
			continue;
		const double mean = q->s / (double)q->n;
		const double sd = sqrt(fmax(q->s2 / (double)q->n - mean * mean, 0));
		printf("  %-15s %10llu values, %.5f%% equal (>= %.2f%%; tolerance %s), largest "
		       "difference %.3g (epoch %llu, value %zu: cpu %.6g cuda %.6g), spread %.3g "
		       "(> %g)\n",
		       fn_names[k], (unsigned long long)q->n,
		       100.0 * (1.0 - (double)q->bad / (double)q->n),
		       100.0 * (u8 ? U8_MIN_FRACTION : FN_MIN_FRACTION),
		       u8           ? "1 LSB"
		       : k == FN_LD ? "1e-3 rad on the circle"
		       : k == FN_FD ? "1e-3 rad / 2 pi on the circle"
		                    : "1e-4",
		       q->max, (unsigned long long)q->max_epoch, q->max_index, q->max_cpu,
		       q->max_gpu, sd, fn_spread[k]);
	}
	(void)o;
}

static void compare(const struct outs *c, const struct outs *g, size_t vox, size_t low, size_t full,
                    uint32_t nz, double db_span, uint64_t epoch, struct figures *f)
{
	double maxc = 0, maxd = 0, s = 0, s2 = 0, maxd40 = 0;
	size_t ok = 0, wi = 0;

	compare_fn(c, g, vox, low, full, epoch, f);
	if (g->chv && c->chv)
		compare_chv(c, g, vox, epoch, f);
	/* the structure's channel below (nothing of the volumes when it is not output) */
	struct outs cs = *c, gs = *g;
	if (c->sc >= 0) {
		cs.vol += (size_t)c->sc * vox;
		gs.vol += (size_t)c->sc * vox;
		if (full) {
			cs.full += (size_t)c->sc * vox;
			gs.full += (size_t)c->sc * vox;
		}
	} else {
		vox = full = 0;
	}
	c = &cs;
	g = &gs;

	for (size_t i = 0; i < low; i++) {
		double d = fabs((double)g->low[i] - c->low[i]);
		maxc = fmax(maxc, fabs(c->low[i]));
		if (d > maxd || d != d) {
			maxd = d != d ? INFINITY : d;
			wi = i;
		}
		s += c->low[i];
		s2 += (double)c->low[i] * c->low[i];
	}
	for (size_t a0 = 0; a0 < low; a0 += nz) {
		float amax = c->low[a0];
		for (uint32_t z = 1; z < nz; z++)
			amax = fmaxf(amax, c->low[a0 + z]);
		for (uint32_t z = 0; z < nz; z++)
			if ((amax - c->low[a0 + z]) * db_span <= 40.0)
				maxd40 =
				        fmax(maxd40, fabs((double)g->low[a0 + z] - c->low[a0 + z]));
	}
	double rel = maxd / fmax(maxc, 1e-6);
	if (rel != rel)
		rel = INFINITY;
	if (!f->epochs || rel > f->low_rel) {
		const size_t a0 = wi / nz * nz;
		f->w_epoch = epoch;
		f->w_index = wi;
		f->w_cpu = c->low[wi];
		f->w_gpu = g->low[wi];
		f->w_amax = c->low[a0];
		for (uint32_t z = 1; z < nz; z++)
			f->w_amax = fmaxf(f->w_amax, c->low[a0 + z]);
	}
	f->low_rel = fmax(f->low_rel, rel);
	f->low_rel_40db = fmax(f->low_rel_40db, maxd40 / fmax(maxc, 1e-6));
	double mean = s / (double)low, sd = sqrt(fmax(s2 / (double)low - mean * mean, 0));
	f->low_spread = f->epochs ? fmin(f->low_spread, sd) : sd;
	for (size_t i = 0; i < vox; i++) {
		int d = abs((int)c->vol[i] - (int)g->vol[i]);
		ok += d <= 1;
		if (d > f->u8_maxdiff)
			f->u8_maxdiff = d;
	}
	for (uint32_t b = 0; b < c->ny; b++) {
		f->md_mismatch += c->md[b] != g->md[b];
		f->md_total += c->md[b];
		f->mc_mismatch += c->md[c->ny + b] != g->md[c->ny + b];
		f->mc_total += c->md[c->ny + b];
	}
	double frac = vox ? (double)ok / (double)vox : 1.0;
	f->u8_frac = f->epochs ? fmin(f->u8_frac, frac) : frac;
	if (full && c->full && g->full) {
		maxc = 0;
		maxd = 0;
		for (size_t i = 0; i < full; i++) {
			maxc = fmax(maxc, fabs(c->full[i]));
			maxd = fmax(maxd, fabs((double)g->full[i] - c->full[i]));
		}
		f->full_rel = fmax(f->full_rel, maxd / fmax(maxc, 1e-6));
	}
	f->epochs++;
}

/*
 * The asynchronous interface against the CPU epoch by epoch: epoch e's B-scans go to the CUDA
 * backend while e-1 is in flight (its raw input, in the other of two registered buffers, and
 * its outputs untouched until be_epoch_wait(e-1)); the CPU runs through the same wrappers
 * (the synchronous fallback). Also checks the one-epoch-in-flight errors once.
 */
static int run_async(const struct vr_config *c, struct sim *sim, enum input in,
                     struct be_backend *cb, struct be_backend *gb, struct be_backend *sb,
                     uint8_t *raw[2], struct outs oc[2], struct outs og[2], struct outs os[2],
                     size_t vox, size_t low, size_t full, bool full_some, unsigned epochs,
                     struct figures *f, char *err, size_t errlen)
{
	const uint32_t ny = cfg_raw_bscans(c), nz = cfg_nz(c); /* ny: raw B-scans to submit */
	const size_t bbytes = cfg_bscan_bytes(c);
	const double span = c->preprocess.db_range[1] - c->preprocess.db_range[0];
	bool inflight = false;
	uint64_t infl_e = 0;
	int rc = 0;

	for (uint64_t e = 0; e <= epochs; e++) {
		const unsigned k = (unsigned)(e % 2), pk = 1 - k;
		const bool fe = !full_some || e % 3 == 2;       /* e asks for the float output */
		const bool fp = !full_some || (e + 2) % 3 == 2; /* e - 1 did */
		if (e < epochs) {
			rc = make_input(sim, in, c, e, raw[k], err, errlen);
			if (rc == 0)
				rc = submit_all(cb, e, raw[k], bbytes, ny, err, errlen);
			struct be_output o = outs_out(&oc[k], fe);
			if (rc == 0)
				rc = be_epoch_finish_async(cb, e, &o, err, errlen);
			if (rc == 0)
				rc = be_epoch_wait(cb, e, err, errlen);
			/* --devices: one device, synchronously as the CPU */
			struct be_output so = outs_out(&os[k], fe);
			if (rc == 0 && sb)
				rc = submit_all(sb, e, raw[k], bbytes, ny, err, errlen);
			if (rc == 0 && sb)
				rc = be_epoch_finish(sb, e, &so, err, errlen);
			/* the CUDA backend: e's B-scans while e-1 is still in flight */
			if (rc == 0)
				rc = submit_all(gb, e, raw[k], bbytes, ny, err, errlen);
			if (rc < 0)
				goto out;
		}
		if (e > 0) {
			inflight = false;
			rc = be_epoch_wait(gb, e - 1, err, errlen);
			if (rc < 0)
				goto out;
			compare(&oc[pk], &og[pk], vox, low, fp ? full : 0, nz, span, e - 1, f);
			if (sb)
				compare_multi(&os[pk], &og[pk], vox, low, fp ? full : 0, e - 1, f);
		}
		if (e < epochs) {
			if (sb)
				outs_poison(&og[k], vox, low, full);
			struct be_output o = outs_out(&og[k], fe);
			rc = be_epoch_finish_async(gb, e, &o, err, errlen);
			if (rc < 0)
				goto out;
			inflight = true;
			infl_e = e;
			/* the pose is estimated when the epoch is queued */
			compare_pose(cb, gb, e, f);
			if (e == 1) {
				/* one epoch in flight: a second finish and a wrong wait are refused */
				char e2[256] = "";
				int r1 = be_epoch_finish_async(gb, e, &o, e2, sizeof(e2));
				int r2 = be_epoch_wait(gb, e + 1, e2, sizeof(e2));
				if (r1 != -EBUSY || r2 != -EINVAL || !strstr(e2, "in flight")) {
					snprintf(err, errlen,
					         "second finish %d (want -EBUSY), wrong wait %d "
					         "(want "
					         "-EINVAL): %s",
					         r1, r2, e2);
					rc = -EPROTO;
					goto out;
				}
			}
		}
	}
out:
	if (rc < 0 && inflight) {
		char e2[256];
		if (be_epoch_wait(gb, infl_e, e2, sizeof(e2)) < 0)
			fprintf(stderr, "gpu_equal: after a failure: %s\n", e2);
	}
	return rc;
}

static int run_case(const struct tcase *tc, bool *pass)
{
	struct vr_config c;
	struct sim *sim = NULL;
	struct be_backend *cs = NULL, *gs = NULL, *ms = NULL, *xs;
	uint8_t *raw = NULL, *raw2 = NULL;
	struct outs oc = {0}, og = {0}, oc2 = {0}, og2 = {0}, os = {0}, os2 = {0};
	struct figures f = {0};
	char err[1024] = "";
	int rc;
	struct timespec t0, t1;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	*pass = false;
	cfg_defaults(&c);
	tc->setup(&c);
	cfg_view_defaults(&c);
	c.backend = CFG_BACKEND_CPU;
	if (multi_n) /* the one device compared with is the list's first */
		c.gpu.device = multi_devs[0];
	const uint32_t ny = c.geometry.bscans_per_volume, sx = c.geometry.stride[0],
	               sy = c.geometry.stride[1], nraw = cfg_raw_bscans(&c), M = c.geometry.repeats;
	const size_t bbytes = cfg_bscan_bytes(&c);

	if (tc->input == IN_SIM) {
		struct sim_params sp;
		sim_params_from_config(&sp, &c);
		sp.seed = 7;
		rc = sim_create(&sp, &sim, err, sizeof(err));
		if (rc < 0)
			goto out;
		const uint32_t K = c.geometry.samples_per_ascan;
		if (c.preprocess.resample.positions == CFG_RSPOS_POLY)
			sim_resample_poly(sim, c.preprocess.resample.poly);
		if (c.preprocess.resample.positions == CFG_RSPOS_TABLE) {
			double *t = table_new(K);
			sim_resample_table(sim, t);
			set_table(&c.preprocess.resample.table, t, K, "simulator positions");
		}
		if (c.preprocess.dispersion.kind == CFG_DISP_COEFFS)
			sim_dispersion_coeffs(sim, c.preprocess.dispersion.coeffs);
	}

	/* the raw epoch in pinned memory of the CUDA backend (created first for host_alloc) */
	raw = aligned_alloc(4096, (bbytes * nraw + 4095) / 4096 * 4096); /* page-aligned */
	if (tc->async)
		raw2 = aligned_alloc(4096, (bbytes * nraw + 4095) / 4096 * 4096);
	if (!raw || (tc->async && !raw2)) {
		rc = -ENOMEM;
		snprintf(err, sizeof(err), "out of memory for the raw epoch");
		goto out;
	}
	/* calibrate the dB range on the first epoch's data */
	if (sim) {
		uint32_t ox, oy;
		vr_scan_offset(0, sx, sy, &ox, &oy);
		for (uint32_t b = 0; b < nraw; b++) {
			rc = sim_bscan_repeat(sim, 0, ox, oy, b / M, b % M,
			                      raw + (size_t)b * bbytes, bbytes);
			if (rc < 0) {
				snprintf(err, sizeof(err), "sim_bscan: %s", strerror(-rc));
				goto out;
			}
		}
	} else {
		uint64_t keep = rng_state;
		if (tc->input == IN_LINES || tc->input == IN_LINES_NONFINITE)
			fill_lines(&c, raw, bbytes * nraw);
		else if (tc->input == IN_REPEATS)
			fill_repeats(&c, raw);
		else
			fill_random(&c, raw, bbytes * nraw);
		rng_state = keep; /* epoch 0 gets the same data again below */
	}
	rc = calibrate_db(&c, raw, bbytes, err, sizeof(err));
	if (rc < 0)
		goto out;

	rc = open_backend(&c, CFG_BACKEND_CPU, &cs, err, sizeof(err));
	if (rc < 0)
		goto out;
	rc = open_backend(&c, CFG_BACKEND_CUDA, &gs, err, sizeof(err));
	if (rc < 0)
		goto out;
	/* --devices with output.channels: refused (docs/gpu.md), with a message naming the key */
	if (multi_n && cfg_functional(&c)) {
		char e2[512] = "";
		const int r = open_multi(&c, &ms, e2, sizeof(e2));
		*pass = r == -ENOTSUP && strstr(e2, "gpu.devices") && strstr(e2, "output.channels");
		printf("%-44s %u devices refuse output.channels: %d (%s)  %s\n", tc->name, multi_n,
		       r, e2, *pass ? "PASS" : "FAIL");
		goto out;
	}
	/* --devices: several devices against the CPU, and against one device (gs) */
	if (multi_n) {
		rc = open_multi(&c, &ms, err, sizeof(err));
		if (rc < 0)
			goto out;
	}
	xs = ms ? ms : gs;
	const size_t vox = cfg_out_voxels(&c);
	const size_t low = (size_t)ny * c.geometry.ascans_per_bscan * cfg_nz(&c);
	const size_t full = tc->want_full ? vox : 0;
	if (outs_alloc(&oc, &c, vox, low, full, ny) < 0 ||
	    outs_alloc(&og, &c, vox, low, full, ny) < 0 ||
	    (tc->async && (outs_alloc(&oc2, &c, vox, low, full, ny) < 0 ||
	                   outs_alloc(&og2, &c, vox, low, full, ny) < 0)) ||
	    (ms && (outs_alloc(&os, &c, vox, low, full, ny) < 0 ||
	            (tc->async && outs_alloc(&os2, &c, vox, low, full, ny) < 0)))) {
		rc = -ENOMEM;
		snprintf(err, sizeof(err), "out of memory for the outputs");
		goto out;
	}
	{
		/* the same input through pinned memory for the CUDA side */
		void *pin = NULL;
		rc = be_host_alloc(gs, bbytes * nraw, &pin);
		if (rc < 0) {
			snprintf(err, sizeof(err), "%s", be_last_error(gs));
			goto out;
		}
		be_host_free(gs, pin);
		/* and registration of caller memory (the raw buffer itself) */
		rc = be_host_register(gs, raw, bbytes * nraw, BE_REG_DEVICE_READS);
		if (rc < 0) {
			snprintf(err, sizeof(err), "%s", be_last_error(gs));
			goto out;
		}
		if (raw2) {
			rc = be_host_register(gs, raw2, bbytes * nraw, BE_REG_DEVICE_READS);
			if (rc < 0) {
				snprintf(err, sizeof(err), "%s", be_last_error(gs));
				goto out_unreg;
			}
		}
		/* several devices: what gs registered above is portable (every device's context
		 * in this process), so ms reads raw as it is; ms's own registration and
		 * host_alloc are exercised on a buffer of their own (registering one range twice
		 * is an API error to compute-sanitizer) */
		if (ms) {
			void *own = malloc(bbytes);

			rc = own ? be_host_register(ms, own, bbytes, 0) : -ENOMEM;
			if (rc == 0)
				be_host_unregister(ms, own);
			free(own);
			if (rc == 0)
				rc = be_host_alloc(ms, bbytes, &pin);
			if (rc < 0) {
				snprintf(err, sizeof(err), "%s", be_last_error(ms));
				goto out_unreg;
			}
			be_host_free(ms, pin);
		}
	}
	const double span = c.preprocess.db_range[1] - c.preprocess.db_range[0];

	if (tc->async) {
		uint8_t *raws[2] = {raw, raw2};
		struct outs ocs[2] = {oc, oc2}, ogs[2] = {og, og2}, oss[2] = {os, os2};
		rc = run_async(&c, sim, tc->input, cs, xs, ms ? gs : NULL, raws, ocs, ogs, oss, vox,
		               low, full, tc->ev == EV_FULL_SOME, tc->epochs, &f, err, sizeof(err));
		if (rc < 0)
			goto out_unreg;
		goto report;
	}

	uint64_t e = 0;
	for (unsigned i = 0; i < tc->epochs; i++, e++) {
		if (i == tc->epochs / 2 && tc->ev != EV_NONE) {
			if (tc->ev == EV_LIVE || tc->ev == EV_LIVE_PM) {
				struct vr_config n;
				rc = cfg_copy(&n, &c);
				if (rc < 0)
					goto out_unreg;
				if (tc->ev == EV_LIVE) {
					(tc->live ? tc->live : live_change)(&n);
				} else {
					n.preprocess.background.mode = CFG_BG_PARTIAL_MEDIAN;
					n.preprocess.background.threshold = 3.0;
				}
				rc = be_update_live(cs, &n, err, sizeof(err));
				if (rc == 0)
					rc = be_update_live(gs, &n, err, sizeof(err));
				if (rc == 0 && ms) {
					set_devices(&n);
					rc = be_update_live(ms, &n, err, sizeof(err));
				}
				cfg_free(&n);
				if (rc < 0)
					goto out_unreg;
			} else if (tc->ev == EV_RESET) {
				be_reset_history(cs);
				be_reset_history(gs);
				if (ms)
					be_reset_history(ms);
				e = 0;
			} else {
				e += 3; /* epochs dropped: ages jump, the E map path again */
			}
		}
		rc = make_input(sim, tc->input, &c, e, raw, err, sizeof(err));
		if (rc < 0)
			goto out_unreg;
		struct be_output ocb = outs_out(&oc, true);
		struct be_output ogb = outs_out(&og, true);
		struct be_output osb = outs_out(&os, true);
		if (ms)
			outs_poison(&og, vox, low, full);
		rc = run_epoch(cs, e, raw, bbytes, nraw, &ocb, err, sizeof(err));
		if (rc == 0)
			rc = run_epoch(xs, e, raw, bbytes, nraw, &ogb, err, sizeof(err));
		if (rc == 0 && ms)
			rc = run_epoch(gs, e, raw, bbytes, nraw, &osb, err, sizeof(err));
		if (rc < 0)
			goto out_unreg;
		compare(&oc, &og, vox, low, full, cfg_nz(&c), span, e, &f);
		compare_pose(cs, gs, e, &f);
		if (ms)
			compare_multi(&os, &og, vox, low, full, e, &f);
	}
report:
	clock_gettime(CLOCK_MONOTONIC, &t1);
	/* partial_median subtracts a per-depth median that nearly cancels bins far below their
	 * A-scan's peak, where FFTW's and cuFFT's float32 rounding (~1e-7 of the peak's spectrum)
	 * become relatively large (docs/gpu.md): there the 1e-4 limit holds for the bins within
	 * 40 dB of their peak, and every bin stays within 5e-4 */
	const bool pm = c.preprocess.background.mode == CFG_BG_PARTIAL_MEDIAN;
	const bool nonfinite = tc->input == IN_NONFINITE || tc->input == IN_LINES_NONFINITE;
	const bool low_ok = pm ? f.low_rel_40db <= LOWRES_TOL && f.low_rel <= 5 * LOWRES_TOL
	                       : f.low_rel <= LOWRES_TOL;
	*pass = low_ok && f.u8_frac >= U8_MIN_FRACTION && f.u8_maxdiff <= 2 &&
	        (!full || f.full_rel <= (pm ? 5 : 1) * LOWRES_TOL) && f.low_spread > 0.01 &&
	        f.md_mismatch == 0 && f.multi_bad == 0 && (!f.poses || f.pose_diff <= POSE_TOL) &&
	        f.mc_mismatch == 0 && (nonfinite ? f.mc_total > 0 : f.mc_total == 0) &&
	        fn_pass(&f, &oc) && chv_pass(&f, &oc);
	printf("%-44s epochs %2u  lowres rel %.2e (<= %.0e)  u8 within 1 LSB %.5f%% (>= %.1f%%), "
	       "max diff %d (<= 2)",
	       tc->name, f.epochs, f.low_rel, LOWRES_TOL, 100.0 * f.u8_frac,
	       100.0 * U8_MIN_FRACTION, f.u8_maxdiff);
	if (full)
		printf("  full rel %.2e (<= %.0e)", f.full_rel, LOWRES_TOL);
	if (pm)
		printf("  within 40 dB of the peak %.2e (<= %.0e), all bins <= %.0e",
		       f.low_rel_40db, LOWRES_TOL, 5 * LOWRES_TOL);
	if (nonfinite)
		printf("  missing A-scans %llu (> 0), %llu B-scans' counts differ (0)",
		       (unsigned long long)f.mc_total, (unsigned long long)f.mc_mismatch);
	if (pm || tc->ev == EV_LIVE_PM)
		printf("  median depths %.1f per B-scan, %llu B-scans differ (0)",
		       f.epochs ? (double)f.md_total / ((double)f.epochs * ny) : 0.0,
		       (unsigned long long)f.md_mismatch);
	if (f.poses)
		printf("  poses of %u epochs within %.1e (<= %.0e)", f.poses, f.pose_diff,
		       POSE_TOL);
	if (oc.chv)
		printf("  channel views of %u epochs: %llu bytes differ from the CPU's code on "
		       "CUDA's volume (0)%s%s, against the CPU backend's max |diff| %d, %.4f%% "
		       "within 2 LSB (>= %.0f%%)",
		       f.chv_epochs, (unsigned long long)f.chv_own_diff,
		       f.chv_own_diff ? ", first: " : "", f.chv_why, f.chv_maxd,
		       f.chv_n ? 100.0 * (1.0 - (double)f.chv_bad / (double)f.chv_n) : 0.0,
		       100.0 * CHV_MIN_FRACTION);
	if (ms)
		printf("  %u devices: %u epoch(s) differ from one device (0)%s%s", multi_n,
		       f.multi_bad, f.multi_bad ? ", first: " : "", f.multi_why);
	printf("  spread %.3f  %.1fs  %s%s\n", f.low_spread,
	       (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9, *pass ? "PASS" : "FAIL",
	       f.low_spread > 0.01 ? "" : " (degenerate input)");
	fn_print(&f, &oc);
	if (f.poses && f.pose_diff > 0)
		printf("  largest pose difference: epoch %llu: cpu (%.9g rad, %.9g, %.9g px, %.9g "
		       "bins) cuda (%.9g rad, %.9g, %.9g px, %.9g bins)\n",
		       (unsigned long long)f.pose_epoch, f.pose_cpu.th, f.pose_cpu.tx,
		       f.pose_cpu.ty, f.pose_cpu.tz, f.pose_gpu.th, f.pose_gpu.tx, f.pose_gpu.ty,
		       f.pose_gpu.tz);
	if (f.epochs && f.low_rel > 1e-5) {
		/* where the two differ most: [b][a][z] of L_e, and how far below its A-scan's
		 * peak that bin lies */
		const uint32_t nz = cfg_nz(&c), nx = c.geometry.ascans_per_bscan;
		const size_t col = f.w_index / nz;
		printf("  worst lowres: epoch %llu B-scan %zu A-scan %zu depth %zu: cpu %.6f cuda "
		       "%.6f, A-scan max %.6f: %.1f dB below the A-scan's peak (dB range [%g, "
		       "%g]); bins within 40 dB of their peak: rel %.2e\n",
		       (unsigned long long)f.w_epoch, col / nx, col % nx, f.w_index % nz, f.w_cpu,
		       f.w_gpu, f.w_amax, (f.w_amax - f.w_cpu) * span, c.preprocess.db_range[0],
		       c.preprocess.db_range[1], f.low_rel_40db);
	}
out_unreg:
	be_host_unregister(gs, raw);
	if (raw2)
		be_host_unregister(gs, raw2);
out:
	if (rc < 0)
		printf("%-44s FAIL: %s\n", tc->name, err);
	be_close(ms);
	be_close(gs);
	be_close(cs);
	outs_free(&oc);
	outs_free(&og);
	outs_free(&oc2);
	outs_free(&og2);
	outs_free(&os);
	outs_free(&os2);
	free(raw);
	free(raw2);
	sim_destroy(sim);
	cfg_free(&c);
	fflush(stdout);
	return rc;
}

/* The CUDA backend refuses what it cannot do, with a message naming it. */
static int error_checks(void)
{
	struct vr_config c;
	struct be_backend *st = NULL;
	char err[1024] = "";
	int fails = 0, rc;

	cfg_defaults(&c);
	geom(&c, 256, 8, 8, 1, 1, CFG_SAMPLE_U16);
	c.gpu.device = 200; /* within the schema's 0..255, beyond any host's devices */
	rc = open_backend(&c, CFG_BACKEND_CUDA, &st, err, sizeof(err));
	bool ok = rc == -ENODEV && strstr(err, "gpu.device");
	printf("error-bad-device: %s: %s\n", err, ok ? "PASS" : "FAIL");
	fails += !ok;
	if (rc == 0)
		be_close(st);

	/* beyond what the kernels index (N * nx > 2^31) in a geometry the schema accepts (one
	 * B-scan, one depth): refused as such, before any memory question */
	cfg_free(&c);
	cfg_defaults(&c);
	geom(&c, 65536, 60000, 1, 1, 1, CFG_SAMPLE_U16);
	c.geometry.depth_range[1] = 1;
	c.reconstruct.mode = CFG_RECON_NONE;
	st = NULL;
	err[0] = '\0';
	rc = open_backend(&c, CFG_BACKEND_CUDA, &st, err, sizeof(err));
	ok = rc == -EINVAL && strstr(err, "too large for the kernels");
	printf("error-kernel-limits: %s: %s\n", err, ok ? "PASS" : "FAIL");
	fails += !ok;
	if (rc == 0)
		be_close(st);

	/* within the kernels' limits and the schema's (an output volume under 16 GiB) but far
	 * beyond any device's memory: 800 x 800 A-scans of 2048 samples, stride 5 -> 4000 x
	 * 4000 x 1024 voxels, two float volumes and the u8 one (about 140 GiB) and the
	 * compensated history of 2 S low-resolution volumes (about 120 GiB). Must say how much
	 * is needed and how much is free. */
	cfg_free(&c);
	cfg_defaults(&c);
	geom(&c, 2048, 800, 800, 5, 5, CFG_SAMPLE_U16);
	c.reconstruct.mode = CFG_RECON_COMPENSATED;
	st = NULL;
	err[0] = '\0';
	rc = open_backend(&c, CFG_BACKEND_CUDA, &st, err, sizeof(err));
	{
		const char *p = strstr(err, "needs ");
		double need = 0, freeg = -1;
		const char *q = strstr(err, "only ");
		ok = rc == -ENOMEM && p && q && sscanf(p, "needs %lf GiB", &need) == 1 &&
		     sscanf(q, "only %lf GiB", &freeg) == 1 && need > 200 && freeg < need &&
		     strstr(err, "free");
	}
	printf("error-out-of-memory: %s: %s\n", err, ok ? "PASS" : "FAIL");
	fails += !ok;
	if (rc == 0)
		be_close(st);

	/* a live switch into compensated whose history (2 S low-resolution volumes, as much as
	 * the two float volumes) does not fit beside the volumes: refused with its size, the
	 * mode in force kept (its next update still applies) */
	size_t freeb = 0, totalb = 0;
	if (cudaSetDevice(c.gpu.device) == cudaSuccess &&
	    cudaMemGetInfo(&freeb, &totalb) == cudaSuccess) {
		/* stride 4 x 4, 128 depths: about 9.5 bytes of device memory per output voxel,
		 * 60 % of the free memory */
		const uint32_t nx = 64, nz = 128;
		uint64_t ny = (uint64_t)((double)freeb * 0.6 / (9.5 * nx * 16.0 * nz));
		cfg_free(&c);
		cfg_defaults(&c);
		geom(&c, 2 * nz, nx, (uint32_t)(ny < 65536 ? ny : 65536), 4, 4, CFG_SAMPLE_U16);
		c.reconstruct.mode = CFG_RECON_NONCUMULATIVE;
		st = NULL;
		err[0] = '\0';
		rc = open_backend(&c, CFG_BACKEND_CUDA, &st, err, sizeof(err));
		ok = rc == 0;
		if (rc == 0) {
			struct vr_config n;
			ok = cfg_copy(&n, &c) == 0;
			if (ok) {
				n.reconstruct.mode = CFG_RECON_COMPENSATED;
				rc = be_update_live(st, &n, err, sizeof(err));
				ok = rc == -ENOMEM && strstr(err, "compensated") &&
				     strstr(err, "needs") && strstr(err, "GiB");
				n.reconstruct.mode = CFG_RECON_CUMULATIVE;
				char e2[256] = "";
				if (ok && be_update_live(st, &n, e2, sizeof(e2)) != 0) {
					ok = false;
					snprintf(err, sizeof(err), "then cumulative: %s", e2);
				}
				cfg_free(&n);
			}
			be_close(st);
		}
		printf("error-live-compensated-memory: %s: %s\n", err, ok ? "PASS" : "FAIL");
		fails += !ok;
	} else {
		cudaGetLastError();
		printf("error-live-compensated-memory: cannot query device %d: FAIL\n",
		       c.gpu.device);
		fails++;
	}

	/* not in the kernels yet (docs/gpu.md): the registered mode, at creation and in a live
	 * update, naming the key */
	static const struct {
		const char *name, *key;
		enum cfg_recon_mode mode;
	} nyi[] = {{"error-registered", "registered", CFG_RECON_REGISTERED}};
	for (size_t k = 0; k < sizeof(nyi) / sizeof(nyi[0]); k++) {
		cfg_free(&c);
		cfg_defaults(&c);
		geom(&c, 256, 8, 8, 2, 2, CFG_SAMPLE_U16);
		c.reconstruct.mode = nyi[k].mode;
		c.reconstruct.adaptive.jump_recovery = true;
		st = NULL;
		err[0] = '\0';
		rc = open_backend(&c, CFG_BACKEND_CUDA, &st, err, sizeof(err));
		ok = rc == -ENOTSUP && strstr(err, nyi[k].key) && strstr(err, "cpu backend");
		printf("%s: %s: %s\n", nyi[k].name, err, ok ? "PASS" : "FAIL");
		fails += !ok;
		if (rc == 0)
			be_close(st);
		c.reconstruct.mode = CFG_RECON_NONCUMULATIVE;
		st = NULL;
		rc = open_backend(&c, CFG_BACKEND_CUDA, &st, err, sizeof(err));
		ok = rc == 0;
		if (rc == 0) {
			struct vr_config n;
			ok = cfg_copy(&n, &c) == 0;
			if (ok) {
				n.reconstruct.mode = nyi[k].mode;
				err[0] = '\0';
				rc = be_update_live(st, &n, err, sizeof(err));
				ok = rc == -ENOTSUP && strstr(err, nyi[k].key);
				cfg_free(&n);
			}
			be_close(st);
		}
		printf("%s-live: %s: %s\n", nyi[k].name, err, ok ? "PASS" : "FAIL");
		fails += !ok;
	}

	/* the adaptive mode's recovery after a jump (the default) is: accepted at creation and in
	 * a live update, where it was refused before the kernels had it */
	cfg_free(&c);
	cfg_defaults(&c);
	geom(&c, 256, 8, 8, 2, 2, CFG_SAMPLE_U16);
	c.reconstruct.mode = CFG_RECON_ADAPTIVE;
	ok = c.reconstruct.adaptive.jump_recovery; /* the default */
	st = NULL;
	err[0] = '\0';
	rc = open_backend(&c, CFG_BACKEND_CUDA, &st, err, sizeof(err));
	ok = ok && rc == 0;
	printf("jump-recovery-accepted: %s: %s\n", rc == 0 ? "created" : err, ok ? "PASS" : "FAIL");
	fails += !ok;
	if (rc == 0)
		be_close(st);
	c.reconstruct.mode = CFG_RECON_NONCUMULATIVE;
	st = NULL;
	err[0] = '\0';
	rc = open_backend(&c, CFG_BACKEND_CUDA, &st, err, sizeof(err));
	ok = rc == 0;
	if (rc == 0) {
		struct vr_config n;
		ok = cfg_copy(&n, &c) == 0;
		if (ok) {
			n.reconstruct.mode = CFG_RECON_ADAPTIVE;
			n.reconstruct.adaptive.jump_recovery = true;
			rc = be_update_live(st, &n, err, sizeof(err));
			ok = rc == 0;
			cfg_free(&n);
		}
		be_close(st);
	}
	printf("jump-recovery-accepted-live: %s: %s\n", ok ? "updated" : err, ok ? "PASS" : "FAIL");
	fails += !ok;

	cfg_free(&c);
	cfg_defaults(&c);
	geom(&c, 256, 8, 8, 1, 1, CFG_SAMPLE_U16);
	st = NULL;
	rc = open_backend(&c, CFG_BACKEND_CUDA, &st, err, sizeof(err));
	if (rc == 0) {
		uint16_t *raw = calloc(256 * 8, sizeof(uint16_t));
		uint8_t *vol = malloc(cfg_out_voxels(&c));
		for (size_t i = 0; raw && i < 256 * 8; i++)
			raw[i] = (uint16_t)(30000 + (i * 7919u) % 4000u);
		struct be_output o = {.volume = vol};
		int r1 = be_bscan_submit(st, 0, 8, raw);
		int r2 = be_bscan_submit(st, 0, 0, raw);
		int r3 = be_bscan_submit(st, 1, 1, raw);
		int r4 = be_epoch_finish(st, 0, &o, err, sizeof(err));
		ok = r1 == -EINVAL && r2 == 0 && r3 == -EBUSY && r4 == -EINVAL &&
		     strstr(err, "1 of 8");
		printf("error-submit-finish: %s: %s\n", err, ok ? "PASS" : "FAIL");
		fails += !ok;
		/* the refusals changed nothing: epoch 0 completes */
		for (uint32_t b = 1; b < 8 && r2 == 0; b++)
			r2 = be_bscan_submit(st, 0, b, raw);
		if (r2 == 0)
			r2 = be_epoch_finish(st, 0, &o, err, sizeof(err));
		else
			snprintf(err, sizeof(err), "%s", be_last_error(st));
		ok = r2 == 0;
		printf("error-then-epoch: %s: %s\n", ok ? "epoch 0 finished" : err,
		       ok ? "PASS" : "FAIL");
		fails += !ok;
		struct vr_config n;
		if (cfg_copy(&n, &c) == 0) {
			n.geometry.samples_per_ascan = 512;
			n.geometry.depth_range[1] = 256;
			r1 = be_update_live(st, &n, err, sizeof(err));
			ok = r1 == -EINVAL && strstr(err, "rebuild");
			printf("error-structural-live: %s: %s\n", err, ok ? "PASS" : "FAIL");
			fails += !ok;
			cfg_free(&n);
		}
		printf("device: %s\n", be_device(st));
		free(raw);
		free(vol);
		be_close(st);
	} else {
		printf("error-submit-finish: create failed: %s: FAIL\n", err);
		fails++;
	}
	cfg_free(&c);
	return fails;
}

/* The backend over several devices (--devices) refuses what it cannot do, and a failure on one
 * device names it: its index in gpu.devices, its ordinal and its name. */
static int multi_error_checks(void)
{
	struct vr_config c;
	struct be_backend *st = NULL;
	char err[1024] = "";
	int fails = 0, rc;
	bool ok;

	cfg_defaults(&c);
	geom(&c, 256, 8, 8, 1, 1, CFG_SAMPLE_U16);
	set_devices(&c);
	c.gpu.devices[multi_n - 1] = 200;
	rc = open_backend(&c, CFG_BACKEND_CUDA, &st, err, sizeof(err));
	char want[64];
	snprintf(want, sizeof(want), "gpu.devices[%u]: 200, but only", multi_n - 1);
	ok = rc == -ENODEV && strstr(err, want);
	printf("error-multi-bad-device: %s: %s\n", err, ok ? "PASS" : "FAIL");
	fails += !ok;
	if (rc == 0)
		be_close(st);

	/* more devices than B-scans */
	cfg_free(&c);
	cfg_defaults(&c);
	geom(&c, 256, 8, multi_n - 1, 1, 1, CFG_SAMPLE_U16);
	set_devices(&c);
	st = NULL;
	rc = open_backend(&c, CFG_BACKEND_CUDA, &st, err, sizeof(err));
	ok = rc == -EINVAL && strstr(err, "gpu.devices: ") && strstr(err, "B-scans per volume");
	printf("error-multi-more-devices-than-bscans: %s: %s\n", err, ok ? "PASS" : "FAIL");
	fails += !ok;
	if (rc == 0)
		be_close(st);

	/* a geometry that fits one device's free memory but not twice: with the list's first
	 * device repeated, the second part finds too little and says which it is */
	size_t freeb = 0, totalb = 0;
	struct cudaDeviceProp prop;
	if (cudaSetDevice(multi_devs[0]) != cudaSuccess ||
	    cudaMemGetInfo(&freeb, &totalb) != cudaSuccess ||
	    cudaGetDeviceProperties(&prop, multi_devs[0]) != cudaSuccess) {
		printf("error-multi-device-named: cannot query device %d: FAIL\n", multi_devs[0]);
		cfg_free(&c);
		return fails + 1;
	}
	/* mode none, stride 1: about 18 bytes of device memory per voxel; 60 % of free */
	const uint32_t K = 256, nx = 1024, nz = K / 2;
	uint64_t ny = (uint64_t)((double)freeb * 0.6 / (18.0 * nx * nz));
	/* the schema's bound on the low-resolution float volume (16 GiB; binds only on a device
	 * with more than about 120 GiB free) */
	if (ny > (16ull << 30) / (4ull * nx * nz))
		ny = (16ull << 30) / (4ull * nx * nz);
	cfg_free(&c);
	cfg_defaults(&c);
	geom(&c, K, nx, (uint32_t)(ny < 65536 ? ny : 65536), 1, 1, CFG_SAMPLE_U16);
	c.reconstruct.mode = CFG_RECON_NONE;
	c.gpu.ndevices = 2;
	c.gpu.devices[0] = c.gpu.devices[1] = multi_devs[0];
	st = NULL;
	rc = open_backend(&c, CFG_BACKEND_CUDA, &st, err, sizeof(err));
	snprintf(want, sizeof(want), "gpu.devices[1] (CUDA device %d, ", multi_devs[0]);
	/* named once, by the composite (the part's own "cuda backend: " left out) */
	ok = rc == -ENOMEM && strstr(err, want) && strstr(err, prop.name) && strstr(err, "free") &&
	     !strncmp(err, "cuda backend: ", 14) && !strstr(err + 1, "cuda backend");
	printf("error-multi-device-named: %s: %s\n", err, ok ? "PASS" : "FAIL");
	fails += !ok;
	if (rc == 0)
		be_close(st);

	/* compensated needs every B-scan of an epoch on one device: refused, naming gpu.devices */
	cfg_free(&c);
	cfg_defaults(&c);
	geom(&c, 256, 8, 8, 2, 2, CFG_SAMPLE_U16);
	c.reconstruct.mode = CFG_RECON_COMPENSATED;
	set_devices(&c);
	st = NULL;
	rc = open_backend(&c, CFG_BACKEND_CUDA, &st, err, sizeof(err));
	ok = rc == -EINVAL && strstr(err, "compensated") && strstr(err, "gpu.devices");
	printf("error-multi-compensated: %s: %s\n", err, ok ? "PASS" : "FAIL");
	fails += !ok;
	if (rc == 0)
		be_close(st);

	/* the jump recovery decides from the whole epoch's mean A-scan: refused over several
	 * devices at creation and in a live update, naming both keys */
	cfg_free(&c);
	cfg_defaults(&c);
	geom(&c, 256, 8, 8, 2, 2, CFG_SAMPLE_U16);
	c.reconstruct.mode = CFG_RECON_ADAPTIVE;
	c.reconstruct.adaptive.jump_recovery = true;
	set_devices(&c);
	st = NULL;
	rc = open_backend(&c, CFG_BACKEND_CUDA, &st, err, sizeof(err));
	ok = rc == -ENOTSUP && strstr(err, "jump_recovery") && strstr(err, "gpu.devices");
	printf("error-multi-jump-recovery: %s: %s\n", err, ok ? "PASS" : "FAIL");
	fails += !ok;
	if (rc == 0)
		be_close(st);
	c.reconstruct.adaptive.jump_recovery = false;
	st = NULL;
	rc = open_backend(&c, CFG_BACKEND_CUDA, &st, err, sizeof(err));
	ok = rc == 0;
	if (rc == 0) {
		struct vr_config n;
		ok = cfg_copy(&n, &c) == 0;
		if (ok) {
			n.reconstruct.adaptive.jump_recovery = true;
			err[0] = '\0';
			rc = be_update_live(st, &n, err, sizeof(err));
			ok = rc == -ENOTSUP && strstr(err, "jump_recovery") &&
			     strstr(err, "gpu.devices");
			cfg_free(&n);
		}
		be_close(st);
	}
	printf("error-multi-jump-recovery-live: %s: %s\n", err, ok ? "PASS" : "FAIL");
	fails += !ok;
	cfg_free(&c);
	return fails;
}

/* Whether case tc runs the adaptive mode's jump recovery (one device only). */
static bool case_jump_recovery(const struct tcase *tc)
{
	struct vr_config c;
	bool r;

	cfg_defaults(&c);
	tc->setup(&c);
	if (tc->live)
		tc->live(&c);
	r = c.reconstruct.mode == CFG_RECON_ADAPTIVE && c.reconstruct.adaptive.jump_recovery;
	cfg_free(&c);
	return r;
}

/* Whether case tc runs the compensated mode (one device only). */
static bool case_compensated(const struct tcase *tc)
{
	struct vr_config c;
	bool r;

	cfg_defaults(&c);
	tc->setup(&c);
	r = c.reconstruct.mode == CFG_RECON_COMPENSATED || tc->live == live_to_compensated;
	cfg_free(&c);
	return r;
}

/* ---- views ------------------------------------------------------------------------------ */

struct vcase {
	const char *name;
	uint32_t K, nx, ny, sx, sy;
	enum cfg_recon_mode mode;
	uint32_t slab[2], pos[3], size[2];
	double ang[2], sp[3], step;
	uint32_t vmax;               /* view.volume.max_side */
	enum cfg_volume_reduce vred; /* view.volume.reduce */
};

/*
 * The views (docs/algorithms.md §4) of the CUDA backend against the CPU's own code run on the same
 * u8 volume (the one the device produced): projections, slices and plane exact, the render
 * within 1 LSB, the reduced volume (§4.5) exact for maxima and within 1 LSB for means (odd block
 * factors with partial blocks at the far edges); the descriptors; and a render not asked for
 * carried over with its volume id.
 */
static int views_checks(void)
{
	static const struct vcase vc[] = {
	        {"views-recon",
	         512,
	         24,
	         20,
	         2,
	         3,
	         CFG_RECON_NONCUMULATIVE,
	         {0, 256},
	         {30, 20, 100},
	         {256, 256},
	         {30, 15},
	         {1, 1, 1},
	         0.5,
	         7,
	         CFG_VOLUME_MAX},
	        {"views-none-odd",
	         256,
	         37,
	         13,
	         1,
	         1,
	         CFG_RECON_NONE,
	         {17, 99},
	         {12, 36, 0},
	         {61, 97},
	         {-60, 40},
	         {2, 3, 0.5},
	         0.25,
	         5,
	         CFG_VOLUME_MEAN},
	        {"views-anisotropic",
	         1024,
	         16,
	         16,
	         3,
	         2,
	         CFG_RECON_NONCUMULATIVE,
	         {100, 101},
	         {0, 47, 511},
	         {200, 120},
	         {137, -75},
	         {1.5, 0.7, 1.1},
	         0.3,
	         128,
	         CFG_VOLUME_MEAN},
	        {"views-volume-max-edges",
	         512,
	         37,
	         13,
	         1,
	         1,
	         CFG_RECON_NONE,
	         {0, 256},
	         {6, 18, 100},
	         {64, 64},
	         {30, 20},
	         {1, 1, 1},
	         0.5,
	         11,
	         CFG_VOLUME_MAX},
	};
	int fails = 0;

	for (size_t k = 0; k < sizeof(vc) / sizeof(vc[0]); k++) {
		const struct vcase *v = &vc[k];
		struct vr_config c;
		struct be_backend *gs = NULL, *ms = NULL;
		struct be_view_params p;
		struct be_render_setup rs;
		uint8_t *raw = NULL, *vol = NULL, *area = NULL, *ref[BE_VIEW_COUNT] = {0};
		uint8_t *mvol = NULL, *marea = NULL; /* --devices: several devices' */
		bool mdiff = false;
		uint64_t off[BE_VIEW_COUNT];
		char err[1024] = "";
		int rc, maxd = 0, vmaxd = 0;
		size_t rdiff = 0;
		bool ok = true;

		cfg_defaults(&c);
		geom(&c, v->K, v->nx, v->ny, v->sx, v->sy, CFG_SAMPLE_U16);
		if (multi_n)
			c.gpu.device = multi_devs[0];
		c.reconstruct.mode = v->mode;
		c.view.enabled = true;
		memcpy(c.view.slab, v->slab, sizeof(v->slab));
		memcpy(c.view.position, v->pos, sizeof(v->pos));
		memcpy(c.view.render.size, v->size, sizeof(v->size));
		memcpy(c.view.render.angles_deg, v->ang, sizeof(v->ang));
		memcpy(c.view.render.spacing, v->sp, sizeof(v->sp));
		c.view.render.step = v->step;
		c.view.volume.max_side = v->vmax;
		c.view.volume.reduce = v->vred;
		be_view_params_from_cfg(&c, &p);
		rc = be_view_check(&p, err, sizeof(err));
		const size_t bbytes = cfg_bscan_bytes(&c), vox = cfg_out_voxels(&c);
		const size_t abytes = volrec_views_bytes(p.Y, p.X, p.Z);
		if (rc == 0)
			rc = open_backend(&c, CFG_BACKEND_CUDA, &gs, err, sizeof(err));
		if (rc == 0 && multi_n) {
			rc = open_multi(&c, &ms, err, sizeof(err));
			mvol = malloc(vox);
			marea = aligned_alloc(64, (abytes + 63) / 64 * 64);
			if (rc == 0 && (!mvol || !marea))
				rc = -ENOMEM;
		}
		raw = malloc(bbytes * v->ny);
		vol = malloc(vox);
		area = aligned_alloc(64, (abytes + 63) / 64 * 64);
		for (int i = 0; i < BE_VIEW_COUNT; i++)
			ref[i] = malloc(be_view_size(&p, (enum be_view)i));
		if (rc == 0 &&
		    (!raw || !vol || !area || !ref[BE_VIEW_RENDER] || !ref[BE_VIEW_VOLUME]))
			rc = -ENOMEM;
		for (uint64_t e = 0; rc == 0 && e < 2; e++) {
			struct be_output out = {.volume = vol,
			                        .views = area,
			                        .volume_id = 11 + e,
			                        .view_mask = e ? 0x5fu : 0x7fu};
			fill_random(&c, raw, bbytes * v->ny);
			memset(area, 0xee, abytes);
			rc = run_epoch(gs, e, raw, bbytes, v->ny, &out, err, sizeof(err));
			if (rc < 0)
				break;
			if (ms) {
				/* several devices: the same volume and views area, byte for byte */
				struct be_output mo = out;
				mo.volume = mvol;
				mo.views = marea;
				memset(marea, 0xee, abytes);
				memset(mvol, 0xa5, vox);
				rc = run_epoch(ms, e, raw, bbytes, v->ny, &mo, err, sizeof(err));
				if (rc < 0)
					break;
				for (size_t j = 0; j < vox && !mdiff; j++)
					if (vol[j] != mvol[j]) {
						printf("%s epoch %llu: %u devices: voxel %zu: %u, "
						       "one "
						       "device %u\n",
						       v->name, (unsigned long long)e, multi_n, j,
						       mvol[j], vol[j]);
						mdiff = true;
					}
				for (size_t j = 0; j < abytes && !mdiff; j++)
					if (area[j] != marea[j]) {
						printf("%s epoch %llu: %u devices: views byte %zu: "
						       "%u, "
						       "one device %u\n",
						       v->name, (unsigned long long)e, multi_n, j,
						       marea[j], area[j]);
						mdiff = true;
					}
			}
			be_render_setup(&p, &rs);
			if (e == 0)
				cpu_views_compute(vol, &p, &rs, ref);
			else
				cpu_views_compute(vol, &p, &rs,
				                  (uint8_t *const[]){ref[0], ref[1], ref[2], ref[3],
				                                     ref[4], NULL, ref[6]});
			be_views_offsets(p.Y, p.X, p.Z, off);
			const struct volrec_views_header *h = (const void *)area;
			const struct volrec_image_desc *d = (const void *)(h + 1);
			ok = ok && h->magic == VOLREC_VIEWS_MAGIC && h->count == VOLREC_IMAGE_COUNT;
			for (int i = 0; i < BE_VIEW_COUNT; i++) {
				const size_t n = be_view_size(&p, (enum be_view)i);
				const uint8_t *got = area + off[i];
				uint64_t want_id = i == BE_VIEW_RENDER ? 11 : 11 + e;
				uint32_t f[3], r[3];
				be_volume_dims(&p, f, r);
				if (i == BE_VIEW_VOLUME &&
				    (d[i].rows != r[0] || d[i].cols != r[1] ||
				     d[i].planes != r[2] || d[i].block_y != f[0] ||
				     d[i].block_x != f[1] || d[i].block_z != f[2] ||
				     d[i].reduce != (uint32_t)v->vred)) {
					printf("%s epoch %llu: volume descriptor %ux%ux%u in "
					       "blocks "
					       "%ux%ux%u reduce %u (expected %ux%ux%u in %ux%ux%u, "
					       "%u)\n",
					       v->name, (unsigned long long)e, d[i].rows, d[i].cols,
					       d[i].planes, d[i].block_y, d[i].block_x,
					       d[i].block_z, d[i].reduce, r[0], r[1], r[2], f[0],
					       f[1], f[2], (unsigned)v->vred);
					ok = false;
				}
				if (!d[i].present || d[i].volume_id != want_id ||
				    d[i].offset != off[i]) {
					printf("%s epoch %llu: %s descriptor: present %u, volume "
					       "%llu "
					       "(expected %llu), offset %llu (expected %llu)\n",
					       v->name, (unsigned long long)e,
					       be_view_name((enum be_view)i), d[i].present,
					       (unsigned long long)d[i].volume_id,
					       (unsigned long long)want_id,
					       (unsigned long long)d[i].offset,
					       (unsigned long long)off[i]);
					ok = false;
				}
				for (size_t j = 0; j < n; j++) {
					int dd = abs((int)got[j] - (int)ref[i][j]);
					if (i == BE_VIEW_RENDER) {
						maxd = dd > maxd ? dd : maxd;
						rdiff += dd != 0;
					} else if (i == BE_VIEW_VOLUME &&
					           v->vred == CFG_VOLUME_MEAN && dd <= 1) {
						vmaxd = dd > vmaxd ? dd : vmaxd;
					} else if (dd) {
						printf("%s epoch %llu: %s differs at %zu: cuda %u, "
						       "cpu "
						       "%u\n",
						       v->name, (unsigned long long)e,
						       be_view_name((enum be_view)i), j, got[j],
						       ref[i][j]);
						ok = false;
						break;
					}
				}
			}
		}
		if (rc < 0) {
			printf("%s: %s\n", v->name, err);
			ok = false;
		}
		ok = ok && maxd <= 1 && !mdiff;
		printf("%s: %ux%ux%u, render %ux%u at [%g, %g]: projections/slices exact, render "
		       "max "
		       "|diff| %d (%zu pixels differ), volume view (max_side %u, %s) max |diff| "
		       "%d, "
		       "carried render%s: %s\n",
		       v->name, p.Y, p.X, p.Z, p.render_h, p.render_w, p.angles_deg[0],
		       p.angles_deg[1], maxd, rdiff, v->vmax,
		       v->vred == CFG_VOLUME_MEAN ? "mean" : "max", vmaxd,
		       ms ? (mdiff ? ", several devices differ from one"
		                   : ", several devices equal to one byte for byte")
		          : "",
		       ok ? "PASS" : "FAIL");
		fails += !ok;
		be_close(ms);
		free(mvol);
		free(marea);
		be_close(gs);
		cfg_free(&c);
		free(raw);
		free(vol);
		free(area);
		for (int i = 0; i < BE_VIEW_COUNT; i++)
			free(ref[i]);
	}
	return fails;
}

int main(int argc, char **argv)
{
	bool small = false, paper = false;
	const char *only = NULL;
	int fails = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--small")) {
			small = true;
		} else if (!strcmp(argv[i], "--paper")) {
			paper = true;
		} else if (!strcmp(argv[i], "--case") && i + 1 < argc) {
			only = argv[++i];
		} else if (!strcmp(argv[i], "--devices") && i + 1 < argc) {
			/* a comma-separated list of CUDA device ordinals: gpu.devices */
			i++;
			if (vr_parse_ordinals(argv[i], 255, multi_devs, CFG_GPU_DEVICES_MAX,
			                      &multi_n)) {
				fprintf(stderr,
				        "gpu_equal: --devices %s: expected 2 to %d device ordinals "
				        "0-255 separated by commas\n",
				        argv[i], CFG_GPU_DEVICES_MAX);
				return 2;
			}
			if (multi_n < 2) {
				fprintf(stderr,
				        "gpu_equal: --devices %s: name 2 devices at least\n",
				        argv[i]);
				return 2;
			}
		} else if (!strcmp(argv[i], "--list")) {
			for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++)
				printf("%s%s\n", cases[k].name, cases[k].paper ? " (paper)" : "");
			return 0;
		} else {
			fprintf(stderr,
			        "usage: gpu_equal [--small | --paper] [--case NAME] [--list] "
			        "[--devices D0,D1,...]\n"
			        "  CUDA backend vs CPU reference (--devices: over those devices, "
			        "also "
			        "vs one device bit for bit); exit 0 pass, 1 fail, 77 no device\n");
			return 2;
		}
	}
	fails += host_table_check();
	if (be_cuda_devices() == 0) {
		printf("SKIP: no CUDA device\n");
		return fails ? 1 : 77;
	}
	if (multi_n)
		printf("CUDA side: gpu.devices with %u entries (first %d), compared with the CPU "
		       "and "
		       "with device %d alone\n",
		       multi_n, multi_devs[0], multi_devs[0]);
	if (!only)
		fails += error_checks();
	if (!only && multi_n)
		fails += multi_error_checks();
	if (!only || !strncmp(only, "views", 5))
		fails += views_checks();
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		const struct tcase *tc = &cases[k];
		bool pass = false;
		if (only ? strcmp(only, tc->name) != 0
		         : (small && tc->paper) || (paper && !tc->paper))
			continue;
		if (multi_n && case_compensated(tc)) {
			printf("%-44s SKIP: compensated runs on one device "
			       "(error-multi-compensated)\n",
			       tc->name);
			continue;
		}
		if (multi_n && case_jump_recovery(tc)) {
			printf("%-44s SKIP: the jump recovery runs on one device "
			       "(error-multi-jump-recovery)\n",
			       tc->name);
			continue;
		}
		run_case(tc, &pass);
		fails += !pass;
	}
	printf("%s: %d failure(s)\n", fails ? "FAIL" : "PASS", fails);
	return fails ? 1 : 0;
}
