/* SPDX-License-Identifier: MIT */
/*
 * Benchmark measurements through the backend interface, shared by `volrec bench` and
 * tests/gpu/gpu_bench: sustained throughput and per-epoch latency of any backend, and the
 * CUDA suite (pinned copy bandwidths as the physical limits, the paper and classic cases).
 */
#ifndef VOLREC_BACKEND_BENCH_H
#define VOLREC_BACKEND_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../config/config.h"

/* One measured figure, the target DESIGN.md §10 sets and the physical limit measured in the
 * same run (same unit; 0 = none). */
struct be_bench_fig {
	char name[64];
	const char *unit; /* a static string */
	double value;
	double target;
	double limit;
	char note[160]; /* what was measured and what the limit is */
	bool lower_is_better;
};

#define BE_BENCH_MAX_FIGS 32

struct be_bench_figs {
	struct be_bench_fig fig[BE_BENCH_MAX_FIGS];
	unsigned n;
};

/* Append a figure (ignored once the set is full); returns it, or NULL when full. */
struct be_bench_fig *be_bench_add(struct be_bench_figs *f, const char *name, double value,
                                  const char *unit, double target, double limit, const char *note);

/* Write s to f as a JSON string (quotes, backslashes and control characters escaped). */
void be_bench_json_str(FILE *f, const char *s);

/* What one be_bench_run measured. */
struct be_bench_result {
	double epochs_per_s;        /* timed epochs per second */
	double p50_ms, p99_ms;      /* latency of one epoch (see be_bench_run) */
	size_t in_bytes, out_bytes; /* per epoch: raw input, u8 output volume */
	unsigned epochs;            /* epochs timed */
	bool shm_anonymous; /* /dev/shm too small: output in a MAP_SHARED | MAP_ANONYMOUS mapping */
	char device[256];   /* the backend's device description */
};

/*
 * Sustained throughput of the backend cfg->backend selects, for at least `seconds` and
 * min_epochs epochs after `warm` epochs, with pseudo-random raw input already in the
 * backend's host memory (host_alloc) and the u8 output landing in a POSIX shm mapping made
 * fast with host_register (what a publisher slot is). Pipelined: epoch e's B-scans are
 * submitted while e-1 is in flight (be_epoch_finish_async), latency from e's first
 * bscan_submit to be_epoch_wait(e) returning; serialized: submit then epoch_finish, one epoch
 * after the other. Returns 0 or a negative errno with the message in err; frees everything.
 */
__attribute__((warn_unused_result)) int be_bench_run(const struct vr_config *cfg, unsigned warm,
                                                     unsigned min_epochs, double seconds,
                                                     bool pipelined, struct be_bench_result *r,
                                                     char *err, size_t errlen);

/* Progress lines of a long measurement, for the caller to print (no trailing newline). */
typedef void (*be_bench_say_fn)(void *ctx, const char *line);

/*
 * The CUDA suite on device dev: pinned H2D, D2H, both ways at once and D2H into registered
 * shm (gpu_bench_bandwidth), then VolRec at the paper's geometry (60x60x8192 u16, stride 5)
 * and classic (2048 u16 -> 1024 u8, mode none), each pipelined and serialized for `seconds`,
 * every figure beside its PCIe limit. Appends the figures to figs (the names bench/results
 * gpu-*.json record), writes the device name into device. -ENOTSUP in a build without CUDA,
 * -ENODEV without a device; other failures as be_bench_run. say may be NULL.
 */
__attribute__((warn_unused_result)) int be_bench_cuda(int dev, double seconds, be_bench_say_fn say,
                                                      void *ctx, struct be_bench_figs *figs,
                                                      char *device, size_t devlen, char *err,
                                                      size_t errlen);

#endif
