/* SPDX-License-Identifier: MIT */
/*
 * Generations of the live parameters (docs/control.md "Generations"): every accepted change of
 * a live key (a `set`, a reload) gives the live values a new number, which each volume made
 * with them carries (protocol 1.3); the daemon keeps the values of the last VRD_GEN_HISTORY
 * numbers for `get` with a generation.
 */
#ifndef VOLREC_DAEMON_VRD_GEN_H
#define VOLREC_DAEMON_VRD_GEN_H

#include <pthread.h>
#include <stdint.h>

#include "base/base.h"
#include "config/config.h"

#define VRD_GEN_HISTORY 256 /* generations whose values are kept */

struct vrd_gens {
	uint32_t current; /* in force: the volumes being made carry it; 0 before init */
	uint32_t last;    /* the newest number given (current, or one being applied) */
	struct {
		uint32_t n;
		char *json; /* cfg_live_json's text, owned */
	} e[VRD_GEN_HISTORY];
	/* guards e[] against vrd_gen_dup: the service's thread changes e[] (under it) and reads
	 * it without; other threads read it through vrd_gen_dup only */
	pthread_mutex_t lock;
};

/* Generation 1: the live values of cfg. 0 or -ENOMEM (g then empty). */
VR_MUST_CHECK int vrd_gen_init(struct vrd_gens *g, const struct vr_config *cfg);
/*
 * The generation of cfg's live values, about to be applied: the current one when they are
 * unchanged, else a new number whose values are readable at once (a volume may carry it
 * before vrd_gen_commit). 0 or -ENOMEM.
 */
VR_MUST_CHECK int vrd_gen_propose(struct vrd_gens *g, const struct vr_config *cfg, uint32_t *n);
/* n (from vrd_gen_propose) is in force. */
void vrd_gen_commit(struct vrd_gens *g, uint32_t n);
/* n (from vrd_gen_propose) was refused: its values are forgotten, its number never reused. */
void vrd_gen_drop(struct vrd_gens *g, uint32_t n);
/* The JSON object of generation n's live values (owned by g), NULL when n is not kept: never
 * given, refused, or older than the last VRD_GEN_HISTORY. */
const char *vrd_gen_values(const struct vrd_gens *g, uint32_t n);
/* A copy of generation n's values (malloc'ed, the caller frees it), NULL when n is not kept
 * or memory is short. Any thread. */
char *vrd_gen_dup(struct vrd_gens *g, uint32_t n);
/* The oldest generation whose values are kept. */
uint32_t vrd_gen_oldest(const struct vrd_gens *g);
void vrd_gen_free(struct vrd_gens *g);

#endif
