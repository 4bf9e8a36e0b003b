/* SPDX-License-Identifier: MIT */
/*
 * The adaptive mode's recovery after a jump (docs/algorithms.md §2b, "Recovery after a jump"):
 * the decision of each epoch from its statistics, shared by the backends. The CPU backend
 * calls it on the host; the CUDA backend in one device thread (gpu/gpu_kernels.cu), with the
 * same roundings: every double sum, difference, product and quotient is rounded on its own
 * (no contraction into an FMA), so that both reach the same decisions from the same sums.
 * C11 and CUDA C++.
 */
#ifndef VOLREC_BACKEND_JUMP_H
#define VOLREC_BACKEND_JUMP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/tables.h" /* BE_JUMP_* */

#ifdef __CUDACC__
#define BE_JUMP_FN static __host__ __device__ __forceinline__
#else
#define BE_JUMP_FN static inline
#endif

/* The state carried from epoch to epoch (be_jump_reset: none yet). */
struct be_jump {
	int64_t mean_e; /* the epoch of the last mean A-scan (-1: none) */
	double cal;     /* the still level (< 0: not measured yet) */
	int64_t move;   /* the last epoch at which the scene moved */
	uint64_t run;   /* still epochs in a row */
	bool armed;     /* that move was a jump out of a settled scene */
};

BE_JUMP_FN void be_jump_reset(struct be_jump *j)
{
	j->mean_e = -1;
	j->cal = -1.0;
	j->move = -1;
	j->run = 0;
	j->armed = false;
}

BE_JUMP_FN double be_jump_add(double a, double b)
{
#ifdef __CUDA_ARCH__
	return __dadd_rn(a, b);
#else
	return a + b;
#endif
}

BE_JUMP_FN double be_jump_sub(double a, double b)
{
#ifdef __CUDA_ARCH__
	return __dsub_rn(a, b);
#else
	return a - b;
#endif
}

BE_JUMP_FN double be_jump_mul(double a, double b)
{
#ifdef __CUDA_ARCH__
	return __dmul_rn(a, b);
#else
	return a * b;
#endif
}

BE_JUMP_FN double be_jump_div(double a, double b)
{
#ifdef __CUDA_ARCH__
	return __ddiv_rn(a, b);
#else
	return a / b;
#endif
}

/* The change measure below which a sample agrees with its history, k2 = tolerance^2. */
BE_JUMP_FN double be_jump_still_level(double k2)
{
	return be_jump_mul(BE_JUMP_STILL, k2);
}

/* The mean A-scan at one depth: sum over the used samples (> 0 of them) of their A-scans (in
 * the order rows of sums, each over its row: the backends sum alike). */
BE_JUMP_FN double be_jump_mean(double sum, uint64_t used)
{
	return be_jump_div(sum, (double)used);
}

/*
 * Epoch e's decision. cur[Z]: the epoch's mean A-scan (be_jump_mean; anything when used is 0),
 * prev[Z]: the last epoch's mean, replaced by this one; used: samples not
 * missing, known: of those, with a history, still: of those, with a change below
 * be_jump_still_level; h: the depth half window. Updates j: whether the scene moved since the
 * last epoch (j->move = e), whether out of a settled scene (j->armed), and the still level.
 */
BE_JUMP_FN void be_jump_decide(struct be_jump *j, uint64_t e, const double *cur, double *prev,
                               uint32_t Z, uint32_t h, uint64_t used, uint64_t known,
                               uint64_t still)
{
	if (used == 0) { /* nothing scanned: nothing known */
		j->move = (int64_t)e;
		j->armed = false;
		j->mean_e = -1;
		j->run = 0;
		return;
	}
	const bool lag1 = j->mean_e >= 0 && (uint64_t)j->mean_e + 1 == e;
	double g = 0.0;
	if (lag1) { /* the depth-windowed change, in double */
		double win = 0.0;
		uint32_t lo = 0, hi = 0;
		for (uint32_t z = 0; z < Z; z++) {
			uint32_t a = z > h ? z - h : 0, b = z + h + 1 < Z ? z + h + 1 : Z;
			for (; hi < b; hi++)
				win = be_jump_add(win, be_jump_sub(cur[hi], prev[hi]));
			for (; lo < a; lo++)
				win = be_jump_sub(win, be_jump_sub(cur[lo], prev[lo]));
			double v = be_jump_div(win, (double)(b - a));
			g = be_jump_add(g, be_jump_mul(v, v));
		}
		g = be_jump_div(g, (double)Z);
	}
	/* settled: the last BE_JUMP_SETTLED epochs were all still (their samples all have a
	 * history and agree with it) */
	const bool settled = j->run >= BE_JUMP_SETTLED;
	const bool is_still =
	        known == used && (double)still >= be_jump_mul(BE_JUMP_STILL_FRACTION, (double)used);
	if (!lag1 || !(j->cal >= 0.0) || g > be_jump_mul(BE_JUMP_RATIO, j->cal)) {
		j->move = (int64_t)e;
		j->armed = lag1 && settled && j->cal >= 0.0; /* a jump out of a settled scene */
	}
	/* the still level: the largest lag-1 change of a still epoch of a settled scene */
	if (lag1 && settled && is_still && g > j->cal)
		j->cal = g;
	j->run = is_still ? j->run + 1 : 0;
	for (uint32_t z = 0; z < Z; z++)
		prev[z] = cur[z];
	j->mean_e = (int64_t)e;
}

/* The first epoch whose samples count as unchanged at epoch e (cycle of S epochs): the move
 * when it was a jump within the last cycle, else none (INT64_MAX). */
BE_JUMP_FN int64_t be_jump_since(const struct be_jump *j, uint64_t e, uint32_t S)
{
	return j->armed && (int64_t)e < j->move + (int64_t)S ? j->move : INT64_MAX;
}

#endif
