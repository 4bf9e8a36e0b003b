/* SPDX-License-Identifier: MIT */
/*
 * The raw B-scan ring between acquisition and processing: reserve/commit on one side,
 * claim/release on the other, counted from the tail (internal.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/internal.h"

int pl_ring_init(struct pl_ring *r, uint32_t size)
{
	memset(r, 0, sizeof(*r));
	if (size == 0)
		return -EINVAL;
	r->e = calloc(size, sizeof(*r->e));
	if (!r->e)
		return -ENOMEM;
	r->size = size;
	return 0;
}

void pl_ring_free(struct pl_ring *r)
{
	free(r->e);
	memset(r, 0, sizeof(*r));
}

struct pl_entry *pl_ring_at(const struct pl_ring *r, uint32_t i)
{
	return &r->e[(r->tail + i) % r->size];
}

bool pl_ring_reserve(struct pl_ring *r, uint32_t n)
{
	if (r->size - r->used < n)
		return false;
	r->used += n;
	return true;
}

struct pl_entry *pl_ring_next(const struct pl_ring *r)
{
	return r->ready < r->used ? pl_ring_at(r, r->ready) : NULL;
}

void pl_ring_commit(struct pl_ring *r)
{
	if (r->ready < r->used)
		r->ready++;
}

uint32_t pl_ring_unreserve(struct pl_ring *r)
{
	uint32_t n = r->used - r->ready;

	r->used = r->ready;
	return n;
}

uint32_t pl_ring_retract(struct pl_ring *r, uint32_t n)
{
	uint32_t k = r->ready - r->claimed;

	if (k > n)
		k = n;
	r->ready -= k;
	r->used -= k;
	return k;
}

void pl_ring_claim(struct pl_ring *r, uint32_t n)
{
	if (n > r->ready - r->claimed)
		n = r->ready - r->claimed;
	r->claimed += n;
}

void pl_ring_release(struct pl_ring *r, uint32_t n)
{
	if (n > r->claimed)
		n = r->claimed;
	r->tail = (r->tail + n) % r->size;
	r->claimed -= n;
	r->ready -= n;
	r->used -= n;
}
