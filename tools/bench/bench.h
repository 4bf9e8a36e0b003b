/* SPDX-License-Identifier: MIT */
/*
 * Benchmarks (bench_): the one table of benchmark cases, and measurements through the pipeline
 * engine with an in-memory source and a timing sink, shared by `volrec bench`, tools/bench/gpu_bench
 * and tools/bench/e2e_bench (which runs the same cases end to end through volrecd).
 */
#ifndef VOLREC_BENCH_H
#define VOLREC_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "base/base.h"
#include "config/config.h"

/* ---- the cases ----------------------------------------------------------------------------- */

enum bench_pre {
	BENCH_PRE_DEFAULT,   /* the configuration's defaults */
	BENCH_PRE_CLASSIC,   /* background ascan_mean, hann, dispersion [2, -0.5], dB [20, 90] */
	BENCH_PRE_CORRECTED, /* cubic resampling (poly) and dispersion [20, -5] */
	BENCH_PRE_DEMO, /* scripts/demo.sh: bscan_mean, the simulator's k and dispersion undone */
};

/* One geometry and processing chain, measured by whichever benchmark lists it. */
struct bench_case {
	const char *name;       /* e2e_bench --case NAME */
	const char *title;      /* figure name of `volrec bench` on the CPU */
	uint32_t K, nx, ny;     /* samples per A-scan, A-scans per B-scan, B-scans per epoch */
	enum cfg_sample sample; /* geometry.sample_type (CFG_SAMPLE_U16 when left out) */
	uint32_t stride;        /* sx = sy */
	uint32_t z0, z1;        /* depth_range */
	enum cfg_recon_mode mode;
	enum bench_pre pre;
	uint32_t e2e_epochs;  /* epochs in e2e_bench's replay file (0: not an e2e case) */
	double paced_rate;    /* e2e: epochs/s of the paced run (0: from the max run) */
	double target_vps;    /* volumes/s target (0: none) */
	double target_ascans; /* A-scans/s target (0: none) */
	double target_p99_ms; /* processing latency p99 target (0: none) */
	double target_over_nc; /* rate over the noncumulative case of its geometry, same run (0: none) */
	const char *target_stem; /* e2e_bench's JSON: <stem>_volumes_per_s, ... (NULL: the name) */
	uint32_t repeats;        /* geometry.repeats (0: 1) */
	bool functional; /* output.channels [structure, angio, doppler], functional.* defaults */
	double target_in_ratio; /* e2e: raw input GB/s over the pinned H2D limit of the same run
	                         * (0: none) */
};

/* Raw B-scans of an epoch of c (positions x repeats) and the channels of its output. */
static inline uint32_t bench_case_repeats(const struct bench_case *c)
{
	return c->repeats ? c->repeats : 1;
}
static inline uint32_t bench_case_channels(const struct bench_case *c)
{
	return c->functional ? 3 : 1;
}

extern const struct bench_case bench_cases[];
extern const unsigned bench_ncases;
/* The case called name, NULL when none is. */
const struct bench_case *bench_case_find(const char *name);
/* cfg: defaults, then the case's geometry, mode and preprocessing, on backend b. */
void bench_case_config(const struct bench_case *c, enum cfg_backend b, struct vr_config *cfg);
/*
 * The case as JSON, for the benchmarks outside C (`volrec bench --print-case NAME`): name and
 * title; "config", what bench_case_config sets as configuration file keys (the geometry,
 * reconstruct.mode and pipeline.ring_bscans always, preprocessing keys that differ from the
 * defaults); "e2e" (epochs, paced_rate) for an end-to-end case; "targets" where it has any.
 * A new object (json_object_put it), or NULL when out of memory.
 */
struct json_object *bench_case_json(const struct bench_case *c);

/* ---- figures ------------------------------------------------------------------------------- */

/* One measured figure, the target its case sets (cases.c) and the physical limit measured in
 * the same run (same unit; 0 = none). */
struct bench_fig {
	char name[64];
	const char *unit; /* a static string */
	double value;
	double target;
	double limit;
	char note[160]; /* what was measured and what the limit is */
	bool lower_is_better;
};

#define BENCH_MAX_FIGS 64

struct bench_figs {
	struct bench_fig fig[BENCH_MAX_FIGS];
	unsigned n;
};

/* Append a figure (ignored once the set is full); returns it, or NULL when full. */
struct bench_fig *bench_add(struct bench_figs *f, const char *name, double value, const char *unit,
                            double target, double limit, const char *note);
/* A JSON number with 6 significant digits (4 decimals with fixed4), as the results record. */
struct json_object *bench_json_num(double v, bool fixed4);

/* ---- measurements through the engine -------------------------------------------------------- */

/* What one bench_run measured. */
struct bench_result {
	double epochs_per_s;        /* timed epochs per second */
	double p50_ms, p99_ms;      /* latency: first B-scan acquired -> output in host memory */
	size_t in_bytes, out_bytes; /* per epoch: raw input, u8 output volume */
	unsigned epochs;            /* epochs timed */
	double median_depths;       /* per B-scan, mean over the timed epochs (partial_median) */
	bool shm_anonymous; /* /dev/shm too small: output in a MAP_SHARED | MAP_ANONYMOUS mapping */
	char device[256];   /* the backend's device description */
};

/*
 * Sustained throughput of the backend cfg->backend selects, driven by the pipeline engine
 * (pipeline/) at depth 1 (serialized: submit, finish, publish one epoch at a time) or 2
 * (pipelined: epoch e+1 submitted while e is in flight): an in-memory source hands out
 * references to pseudo-random raw B-scans (registered with the backend), and a timing sink
 * takes the u8 output in a POSIX shm mapping registered with the backend (what a publisher
 * slot is). Measures for at least `seconds` and min_epochs epochs after `warm` epochs.
 * Returns 0 or a negative errno with the message in err; frees everything.
 */
VR_MUST_CHECK int bench_run(const struct vr_config *cfg, unsigned warm, unsigned min_epochs,
                            double seconds, int depth, struct bench_result *r, char *err,
                            size_t errlen);
/* bench_run on the caller's input: raw holds one epoch of raw B-scans of cfg's geometry
 * ([ny][nx][K] samples, copied before the run; NULL: the pseudo-random ones), handed out for
 * every epoch. */
VR_MUST_CHECK int bench_run_raw(const struct vr_config *cfg, const void *raw, unsigned warm,
                                unsigned min_epochs, double seconds, int depth,
                                struct bench_result *r, char *err, size_t errlen);

/* Progress lines of a long measurement, for the caller to print (no trailing newline). */
typedef void (*bench_say_fn)(void *ctx, const char *line);

/*
 * The CUDA suite on device dev: pinned H2D, D2H, both ways at once and D2H into registered
 * shm, then the cases `paper` and `classic-2048`, each pipelined and serialized for `seconds`,
 * every figure beside its PCIe limit. Appends the figures to figs (the names bench/results
 * gpu-*.json record), writes the device name into device. -ENOTSUP in a build without CUDA,
 * -ENODEV without a device; other failures as bench_run. say may be NULL.
 */
VR_MUST_CHECK int bench_cuda(int dev, double seconds, bench_say_fn say, void *ctx,
                             struct bench_figs *figs, char *device, size_t devlen, char *err,
                             size_t errlen);

/*
 * The paper case over several CUDA devices (gpu.devices = devs[0..n)): host memory bandwidth
 * (memcpy of 1 GiB, the next limit once several links feed one host), D2H into registered shm
 * of each entry's device (a device named twice shares one link), then the case pipelined over
 * the list and on devs[0] alone, same run: the total rate beside the sum of the distinct links'
 * limits, each entry's D2H rate (its slab's bytes) beside its link, and the ratio to one
 * device. Appends to figs; errors as bench_cuda.
 */
VR_MUST_CHECK int bench_cuda_devices(const int *devs, unsigned n, double seconds, bench_say_fn say,
                                     void *ctx, struct bench_figs *figs, char *err, size_t errlen);
/*
 * Functional OCT on CUDA device dev (docs/gpu.md): pinned H2D and both ways at once, then 300 x
 * 300 positions x 4 repeats x 2048 u12p samples, output.channels [structure, angio, doppler],
 * noncumulative, through the backend directly (the engine takes no channels yet), epoch e + 1
 * submitted while e is in flight, for `seconds`: the input rate beside the H2D limit of the same
 * run (target 0.85 of it) and the volume rate beside both copies at once; the device name into
 * device. Errors as bench_cuda.
 */
VR_MUST_CHECK int bench_cuda_functional(int dev, double seconds, bench_say_fn say, void *ctx,
                                        struct bench_figs *figs, char *device, size_t devlen,
                                        char *err, size_t errlen);
/* Host memory bandwidth: memcpy of bytes between two buffers, best of reps, in GB/s (NAN when
 * the buffers cannot be had). */
double bench_host_memcpy_gbs(size_t bytes, int reps);

#endif
