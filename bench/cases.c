/* SPDX-License-Identifier: MIT */
/*
 * The benchmark cases: each geometry and processing chain written once, for `volrec bench`
 * (CPU and CUDA), bench/gpu_bench and the end-to-end bench/e2e_bench.
 */
#include <string.h>

#include "bench.h"

/* A case: names; geometry; mode and preprocessing; the end-to-end run and its targets (a line
 * each, where clang-format would give every field one). */
/* clang-format off */
const struct bench_case bench_cases[] = {
	{.name = "tiny", .title = "tiny 12x12x256 s3",
	 .K = 256, .nx = 12, .ny = 12, .stride = 3, .z1 = 128,
	 .mode = CFG_RECON_NONCUMULATIVE, .pre = BENCH_PRE_DEFAULT,
	 .e2e_epochs = 36},
	{.name = "classic-2048", .title = "classic 2048->1024",
	 .K = 2048, .nx = 1024, .ny = 64, .stride = 1, .z1 = 1024,
	 .mode = CFG_RECON_NONE, .pre = BENCH_PRE_CLASSIC,
	 .e2e_epochs = 2, .paced_rate = 160, .target_ascans = 10e6},
	/* classic-2048 with packed 12-bit input (ALGORITHMS.md §0): 1.5 bytes/sample over
	 * PCIe instead of 2 */
	{.name = "classic-2048-u12p", .title = "classic 2048->1024, u12p",
	 .K = 2048, .nx = 1024, .ny = 64, .sample = CFG_SAMPLE_U12P, .stride = 1, .z1 = 1024,
	 .mode = CFG_RECON_NONE, .pre = BENCH_PRE_CLASSIC,
	 .e2e_epochs = 2, .paced_rate = 160, .target_ascans = 14e6},
	{.name = "classic-2048-corrected", .title = "classic 2048->1024, cubic+dispersion",
	 .K = 2048, .nx = 1024, .ny = 64, .stride = 1, .z1 = 1024,
	 .mode = CFG_RECON_NONE, .pre = BENCH_PRE_CORRECTED},
	{.name = "volrec-small", .title = "VolRec 30x30x2048 s3 -> 90x90x1024",
	 .K = 2048, .nx = 30, .ny = 30, .stride = 3, .z1 = 1024,
	 .mode = CFG_RECON_NONCUMULATIVE},
	{.name = "volrec-medium", .title = "VolRec 60x60x2048 s5 -> 300x300x1024",
	 .K = 2048, .nx = 60, .ny = 60, .stride = 5, .z1 = 1024,
	 .mode = CFG_RECON_NONCUMULATIVE},
	{.name = "paper", .title = "VolRec 60x60x8192 s5 -> 300x300x4096",
	 .K = 8192, .nx = 60, .ny = 60, .stride = 5, .z1 = 4096,
	 .mode = CFG_RECON_NONCUMULATIVE,
	 .e2e_epochs = 25, .paced_rate = 120, .target_vps = 120, .target_p99_ms = 15},
	/* a volume beyond one link: 737 MB, for gpu.devices (gpu_bench --devices) */
	{.name = "large-600", .title = "VolRec 120x120x4096 s5 -> 600x600x2048",
	 .K = 4096, .nx = 120, .ny = 120, .stride = 5, .z1 = 2048,
	 .mode = CFG_RECON_NONCUMULATIVE},
	/* issue 18: reconstruct.mode adaptive at the paper's geometry, >= 100 volumes/s end to
	 * end and >= 0.8 of `paper` (noncumulative) measured in the same run */
	{.name = "paper-adaptive", .title = "VolRec adaptive 60x60x8192 s5 -> 300x300x4096",
	 .K = 8192, .nx = 60, .ny = 60, .stride = 5, .z1 = 4096,
	 .mode = CFG_RECON_ADAPTIVE,
	 .e2e_epochs = 25, .paced_rate = 100, .target_vps = 100, .target_p99_ms = 15},
	/* reconstruct.mode compensated (docs/algorithms.md §2c) at the paper's geometry: the host's
	 * pose estimate per epoch and the kriging of up to 20 history samples per voxel */
	{.name = "paper-compensated", .title = "VolRec compensated 60x60x8192 s5 -> 300x300x4096",
	 .K = 8192, .nx = 60, .ny = 60, .stride = 5, .z1 = 4096,
	 .mode = CFG_RECON_COMPENSATED,
	 .e2e_epochs = 25, .paced_rate = 100, .target_vps = 100, .target_p99_ms = 15},
};
/* clang-format on */
const unsigned bench_ncases = VR_ARRAY_SIZE(bench_cases);

const struct bench_case *bench_case_find(const char *name)
{
	for (unsigned i = 0; i < bench_ncases; i++)
		if (!strcmp(bench_cases[i].name, name))
			return &bench_cases[i];
	return NULL;
}

void bench_case_config(const struct bench_case *c, enum cfg_backend b, struct vr_config *cfg)
{
	cfg_defaults(cfg);
	cfg->backend = b;
	cfg->geometry.samples_per_ascan = c->K;
	cfg->geometry.sample_type = c->sample;
	cfg->geometry.ascans_per_bscan = c->nx;
	cfg->geometry.bscans_per_volume = c->ny;
	cfg->geometry.stride[0] = cfg->geometry.stride[1] = c->stride;
	cfg->geometry.depth_range[0] = c->z0;
	cfg->geometry.depth_range[1] = c->z1;
	cfg->preprocess.zero_pad = 1;
	cfg->reconstruct.mode = c->mode;
	cfg->pipeline.ring_bscans = 4 * c->ny;
	cfg_view_defaults(cfg);
	switch (c->pre) {
	case BENCH_PRE_CLASSIC:
		cfg->preprocess.background.mode = CFG_BG_ASCAN_MEAN;
		cfg->preprocess.window.type = CFG_WIN_HANN;
		cfg->preprocess.dispersion.kind = CFG_DISP_COEFFS;
		cfg->preprocess.dispersion.coeffs[0] = 2.0;
		cfg->preprocess.dispersion.coeffs[1] = -0.5;
		cfg->preprocess.db_range[0] = 20;
		cfg->preprocess.db_range[1] = 90;
		break;
	case BENCH_PRE_CORRECTED:
		cfg->preprocess.resample.method = CFG_RS_CUBIC;
		cfg->preprocess.resample.positions = CFG_RSPOS_POLY;
		cfg->preprocess.resample.poly[0] = 0;
		cfg->preprocess.resample.poly[1] = c->K - 1;
		cfg->preprocess.resample.poly[2] = 40;
		cfg->preprocess.resample.poly[3] = -40;
		cfg->preprocess.dispersion.kind = CFG_DISP_COEFFS;
		cfg->preprocess.dispersion.coeffs[0] = 20;
		cfg->preprocess.dispersion.coeffs[1] = -5;
		break;
	case BENCH_PRE_DEFAULT:
		break;
	}
}
