/* SPDX-License-Identifier: MIT */
/*
 * The synthetic scanner (sim.h) as a source: one implementation of the shim ABI's calls
 * (volrec/shim.h), opened two ways. volrecd's built-in `synth` source (synth_builtin.c) makes it
 * from the configuration; the example shim libvolrec_synth_shim.so (synth_shim.c) exports the
 * same calls with an open() that reads source.shim.args. Both give the same bytes for the same
 * scanner settings. Linked into the sources archive and into the shim, so it needs neither the
 * configuration nor the rest of the sources.
 */
#ifndef VOLREC_SRC_SYNTH_H
#define VOLREC_SRC_SYNTH_H

#include <stddef.h>
#include <stdint.h>

#include <volrec/shim.h>

#include "sources/shim_common.h"
#include "sources/sim.h"

struct synth;

/* A synth whose scanner is made now from p, for geometry geo only (configure() must tell the
 * same, its rate aside), paced at geo->rate; name ("synth") begins its messages. 0, or a
 * negative errno with the message in err and nothing made. */
int synth_open_params(const char *name, const struct sim_params *p,
                      const struct volrec_shim_geometry *geo, struct synth **out, char *err,
                      size_t errlen);
/* A synth with the settings a (and bit_shift, which the geometry does not carry) whose scanner
 * is made by configure() for the geometry it is told; name ("synth shim") begins its
 * messages. NULL when out of memory. */
struct synth *synth_open_args(const char *name, const struct sim_args *a, uint32_t bit_shift);

/* The calls of the ABI (volrec/shim.h) on a synth; strerror() is the kit's shim_strerror(). */
int synth_configure(void *h, const struct volrec_shim_geometry *g);
int synth_set_scan_offset(void *h, uint64_t epoch, uint32_t ox, uint32_t oy);
int synth_start(void *h);
int synth_acquire(void *h, void *buf, size_t size, int timeout_ms, struct volrec_shim_meta *meta);
int synth_stop(void *h);
void synth_close(void *h);

/* The ABI table of a synth whose open() is open_fn: the built-in source's (synth_builtin.c) and
 * the example shim's (synth_shim.c) differ there alone. */
#define SYNTH_OPS(open_fn)                                                                         \
	{                                                                                          \
		.abi_version = VOLREC_SHIM_ABI_VERSION,                                            \
		.struct_size = sizeof(struct volrec_shim_ops), .open = (open_fn),                  \
		.configure = synth_configure, .set_scan_offset = synth_set_scan_offset,            \
		.start = synth_start, .acquire = synth_acquire, .stop = synth_stop,                \
		.close = synth_close, .strerror = shim_strerror,                                   \
	}

#endif
