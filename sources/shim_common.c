/* SPDX-License-Identifier: MIT */
/*
 * The source kit (shim_common.h): error texts, pacing and B-scan positions, shared by every
 * shim and by the built-in sources (synth.c, replay.c). A shim also links shim_entry.c, its ABI
 * entry.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/base.h"
#include "sources/shim_common.h"

/* open() failed: no handle to keep the text in. */
static __thread char open_msg[SHIM_MSG_MAX];

int shim_fail(struct shim_err *e, int code, const char *fmt, ...)
{
	size_t n;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof(e->msg) - strlen(e->suffix), fmt, ap);
	va_end(ap);
	n = strlen(e->msg);
	snprintf(e->msg + n, sizeof(e->msg) - n, "%s", e->suffix);
	e->code = code;
	return code;
}

int shim_open_fail(int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(open_msg, sizeof(open_msg), fmt, ap);
	va_end(ap);
	return code;
}

const char *shim_strerror(void *h, int code)
{
	const struct shim_err *e = h; /* the handle begins with its struct shim_err */

	if (!e)
		return open_msg[0] ? open_msg : NULL;
	return code && code == e->code ? e->msg : NULL;
}

int shim_geometry_fixed(struct shim_err *e, const struct volrec_shim_geometry *have,
                        const struct volrec_shim_geometry *g, const char *who)
{
	if (memcmp(g, have, offsetof(struct volrec_shim_geometry, rate)) != 0)
		return shim_fail(
		        e, -EINVAL,
		        "%s: configure() with a geometry other than the configuration's (a "
		        "new geometry needs a new source)",
		        who);
	return 0;
}

void shim_pacer_init(struct vr_pacer *p, const struct volrec_shim_geometry *g)
{
	uint32_t n = g->bscans_per_volume * shim_repeats(g); /* raw B-scans an epoch */

	vr_pacer_init(p, g->rate * n, n);
}

void shim_pos_deliver(struct shim_pos *pos, const struct volrec_shim_geometry *g,
                      struct volrec_shim_meta *meta)
{
	if (meta) {
		meta->timestamp_ns = vr_now_ns(CLOCK_REALTIME);
		meta->epoch = pos->epoch;
		meta->bscan = pos->b;
		meta->flags = 0;
		if (g->flags & VOLREC_SHIM_GEOMETRY_REPEATS) {
			meta->repeat = pos->m;
			meta->reserved = 0;
		}
	}
	if (++pos->m < shim_repeats(g))
		return;
	pos->m = 0;
	if (++pos->b == g->bscans_per_volume) {
		pos->b = 0;
		pos->epoch++;
	}
}
