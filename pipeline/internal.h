/* SPDX-License-Identifier: MIT */
/*
 * Private declarations of the pipeline engine (pl_): the raw ring.
 */
#ifndef VOLREC_PIPELINE_INTERNAL_H
#define VOLREC_PIPELINE_INTERNAL_H

#include "pipeline.h"

/* ---- the raw ring (ring.c) ---------------------------------------------------------------- */

/* One raw B-scan held between acquisition and processing. */
struct pl_entry {
	void *buf;        /* copying path: this entry's buffer in the ring block */
	const void *data; /* the B-scan handed to the backend: buf, or (zero-copy) a reference
	                     * into the source's memory, released with release_ref() */
	bool ref;         /* data is a reference not yet released */
	bool gap_before;  /* B-scan 0 the source marked VOLREC_SHIM_META_DROPPED_BEFORE */
	uint64_t epoch;   /* epoch and B-scan index it holds */
	uint32_t bscan;
	uint64_t t_mono_ns; /* when acquire() returned it (CLOCK_MONOTONIC) */
	uint64_t t_real_ns; /* the source's timestamp (CLOCK_REALTIME) */
};

/*
 * A ring of raw B-scans. Counted from the tail (the oldest entry): [0, claimed) processing has
 * taken, [claimed, ready) acquisition committed and processing has not taken yet, [ready,
 * used) acquisition reserved for the epoch it acquires (filled in order). So 0 <= claimed <=
 * ready <= used <= size. Not thread-safe: the pipeline's lock guards it.
 */
struct pl_ring {
	struct pl_entry *e;
	uint32_t size;
	uint32_t tail; /* index of the oldest entry */
	uint32_t claimed, ready, used;
};

VR_MUST_CHECK int pl_ring_init(struct pl_ring *r, uint32_t size);
void pl_ring_free(struct pl_ring *r);
/* The i-th entry from the tail (i < size). */
struct pl_entry *pl_ring_at(const struct pl_ring *r, uint32_t i);
/* Acquisition: reserve room for n more entries; false (nothing reserved) without room. */
bool pl_ring_reserve(struct pl_ring *r, uint32_t n);
/* Acquisition: the next reserved entry to fill, NULL when none is reserved. */
struct pl_entry *pl_ring_next(const struct pl_ring *r);
/* Acquisition: the entry pl_ring_next gave is filled: processing may take it. */
void pl_ring_commit(struct pl_ring *r);
/* Acquisition: give back the reserved entries not filled; returns how many. */
uint32_t pl_ring_unreserve(struct pl_ring *r);
/* Acquisition: take back up to n of the newest committed entries processing has not taken
 * (an epoch cut short); returns how many. */
uint32_t pl_ring_retract(struct pl_ring *r, uint32_t n);
/* Processing: committed entries not taken yet. */
static inline uint32_t pl_ring_avail(const struct pl_ring *r)
{
	return r->ready - r->claimed;
}
/* Processing: take n available entries (n <= pl_ring_avail). */
void pl_ring_claim(struct pl_ring *r, uint32_t n);
/* Processing: give back the n oldest entries (n <= claimed); acquisition may reuse them. */
void pl_ring_release(struct pl_ring *r, uint32_t n);

#endif
