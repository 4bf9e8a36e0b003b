/* SPDX-License-Identifier: MIT */
/*
 * A minimal shim whose table the including file breaks on purpose (BAD_ABI_VERSION,
 * BAD_STRUCT_SIZE, BAD_NULL_ACQUIRE, BAD_NO_ENTRY, BAD_NULL_TABLE), to test that src_open
 * rejects each with a precise message.
 */
#ifndef VOLREC_TESTS_BAD_COMMON_H
#define VOLREC_TESTS_BAD_COMMON_H

#include <errno.h>
#include <string.h>

#include <volrec/shim.h>

static int b_open(const char *a, struct volrec_shim_info *i, void **h)
{
	(void)a;
	strcpy(i->name, "bad");
	*h = i;
	return 0;
}
static int b_configure(void *h, const struct volrec_shim_geometry *g)
{
	(void)h;
	(void)g;
	return 0;
}
static int b_offset(void *h, uint64_t e, uint32_t x, uint32_t y)
{
	(void)h;
	(void)e;
	(void)x;
	(void)y;
	return 0;
}
static int b_start(void *h)
{
	(void)h;
	return 0;
}
__attribute__((unused)) static int b_acquire(void *h, void *b, size_t n, int t,
                                             struct volrec_shim_meta *m)
{
	(void)h;
	(void)b;
	(void)n;
	(void)t;
	(void)m;
	return -EIO;
}
static int b_stop(void *h)
{
	(void)h;
	return 0;
}
static void b_close(void *h)
{
	(void)h;
}
static const char *b_strerror(void *h, int c)
{
	(void)h;
	(void)c;
	return NULL;
}

#ifndef BAD_ABI_VERSION
#define BAD_ABI_VERSION VOLREC_SHIM_ABI_VERSION
#endif
#ifndef BAD_STRUCT_SIZE
#define BAD_STRUCT_SIZE sizeof(struct volrec_shim_ops)
#endif

static const struct volrec_shim_ops bad_ops = {
        .abi_version = BAD_ABI_VERSION,
        .struct_size = BAD_STRUCT_SIZE,
        .open = b_open,
        .configure = b_configure,
        .set_scan_offset = b_offset,
        .start = b_start,
#ifdef BAD_NULL_ACQUIRE
        .acquire = NULL,
#else
        .acquire = b_acquire,
#endif
        .stop = b_stop,
        .close = b_close,
        .strerror = b_strerror,
};

#ifdef BAD_NO_ENTRY
const struct volrec_shim_ops *volrec_shim_entry_v0(void);
const struct volrec_shim_ops *volrec_shim_entry_v0(void)
#else
const struct volrec_shim_ops *volrec_shim_entry(void)
#endif
{
#ifdef BAD_NULL_TABLE
	return (void)bad_ops, NULL;
#else
	return &bad_ops;
#endif
}

#endif
