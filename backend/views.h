/* SPDX-License-Identifier: MIT */
/*
 * Views of a published volume (docs/algorithms.md §4): en-face mean and max over
 * a depth slab, the B-scan, slice and plane through a position, and the MIP render. The host
 * part here checks the parameters and sets up the render's camera once, so that the CPU
 * (cpu/views.c) and CUDA (gpu/gpu_views.cu) implementations compute from the same numbers.
 */
#ifndef VOLREC_BACKEND_VIEWS_H
#define VOLREC_BACKEND_VIEWS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

#ifdef __cplusplus
extern "C" {
#endif

enum be_view {
	BE_VIEW_ENFACE_MEAN, /* [Y][X] */
	BE_VIEW_ENFACE_MAX,  /* [Y][X] */
	BE_VIEW_BSCAN,       /* [X][Z] at y0 */
	BE_VIEW_SLICE,       /* [Y][Z] at x0 */
	BE_VIEW_PLANE,       /* [Y][X] at z0 */
	BE_VIEW_RENDER,      /* [H][W] */
	BE_VIEW_VOLUME,      /* [Yr][Xr][Zr] the volume reduced by blocks (§4.5) */
	BE_VIEW_COUNT
};

/* The parameters of the views of one volume (the config's view: section, resolved). */
struct be_view_params {
	uint32_t Y, X, Z;         /* volume size */
	uint32_t slab[2];         /* [za, zb), za < zb <= Z */
	uint32_t position[3];     /* y0 < Y, x0 < X, z0 < Z */
	uint32_t render_h;        /* H >= 1 */
	uint32_t render_w;        /* W >= 1 */
	double spacing[3];        /* dx, dy, dz > 0 */
	double angles_deg[2];     /* azimuth phi, elevation theta */
	double step;              /* h > 0 */
	uint32_t volume_max_side; /* reduced volume: at most this a side, 0 none */
	uint32_t volume_reduce;   /* enum volrec_reduce */
};

/* The reduced volume's block factors f[a] = ceil(n_a / max_side) and sizes r[a] = ceil(n_a /
 * f[a]), a = y, x, z (all 0 when max_side is 0). */
void be_volume_dims(const struct be_view_params *p, uint32_t f[3], uint32_t r[3]);
/* Elements the reduced volume of a Y x X x Z volume may take at most, whatever its live
 * view.volume.max_side (protocol.h: volrec_views_bytes). */
size_t be_volume_room(uint32_t Y, uint32_t X, uint32_t Z);

/*
 * The render's camera in voxel coordinates (x, y, z), computed once per parameters: sample k of
 * pixel (i, j) is at org + (j + 1/2) du + (i + 1/2) dv + (k + 1/2) dt, which is docs/algorithms.md
 * §4.4's p(t_k) divided by the spacing. Double for the CPU, the same values rounded to float for
 * the device and for be_render_krange.
 */
struct be_render_setup {
	double org[3], du[3], dv[3], dt[3]; /* origin and steps per column, row and sample */
	float forg[3], fdu[3], fdv[3], fdt[3];
	float lim[3];      /* X - 1, Y - 1, Z - 1 */
	uint32_t nsamples; /* ceil(D / h) */
	uint32_t H, W;
};

struct vr_config;

/* The view parameters cfg's view section gives for its output volume (slab and position
 * already resolved and checked by the configuration). */
void be_view_params_from_cfg(const struct vr_config *cfg, struct be_view_params *p);
/* Whether cfg asks for views (view.enabled, u8 output). */
bool be_views_wanted(const struct vr_config *cfg);

/* Offsets of each picture in a slot's views area (protocol.h: volrec_views_bytes; fixed for
 * the volume size, the render taking up to VOLREC_RENDER_MAX^2). */
void be_views_offsets(uint32_t Y, uint32_t X, uint32_t Z, uint64_t off[BE_VIEW_COUNT]);
/* Write the views header of area: picture v is present when bit v of present is set, shows
 * volume vid[v] and was computed with p (rp for the render, which may be an older one's). */
void be_views_describe(void *area, const struct be_view_params *p, const struct be_view_params *rp,
                       const uint64_t vid[BE_VIEW_COUNT], unsigned present);

/* Bytes of view v (0 for a volume view that is off). */
size_t be_view_size(const struct be_view_params *p, enum be_view v);
/* Name of view v ("enface_mean", ...). */
const char *be_view_name(enum be_view v);

/* Check p against its volume (slab, position inside, render size, spacing, step); -EINVAL with
 * a message naming the key (view.slab, view.position, ...) otherwise. Nothing is clamped. */
int be_view_check(const struct be_view_params *p, char *err, size_t errlen) VR_MUST_CHECK;

/* The render's camera for p (already checked). */
void be_render_setup(const struct be_view_params *p, struct be_render_setup *r);

/* Samples k of pixel ray (i, j) that may lie inside the box: [*k0, *k1). Conservative (one
 * sample wider than the analytic interval on each side); the caller tests each sample with
 * be_render_inside-equivalent logic. */
#ifdef __CUDACC__
__host__ __device__
#endif
        static inline void
        be_render_krange(const struct be_render_setup *r, uint32_t i, uint32_t j, uint32_t *k0,
                         uint32_t *k1)
{
	float lo = 0.0f, hi = (float)r->nsamples;

	for (int a = 0; a < 3; a++) {
		float o =
		        r->forg[a] + ((float)j + 0.5f) * r->fdu[a] + ((float)i + 0.5f) * r->fdv[a];
		float d = r->fdt[a];
		float emin = -1e-4f, emax = r->lim[a] + 1e-4f;

		if (d == 0.0f) {
			if (o < emin || o > emax) {
				*k0 = *k1 = 0;
				return;
			}
			continue;
		}
		/* o + (k + 0.5) d in [emin, emax] */
		float t0 = (emin - o) / d - 0.5f, t1 = (emax - o) / d - 0.5f;
		if (t0 > t1) {
			float t = t0;
			t0 = t1;
			t1 = t;
		}
		if (t0 > lo)
			lo = t0;
		if (t1 + 1.0f < hi)
			hi = t1 + 1.0f;
	}
	lo = lo - 1.0f;
	hi = hi + 1.0f;
	if (lo < 0.0f)
		lo = 0.0f;
	if (hi > (float)r->nsamples)
		hi = (float)r->nsamples;
	if (!(hi > lo)) {
		*k0 = *k1 = 0;
		return;
	}
	*k0 = (uint32_t)lo;
	*k1 = (uint32_t)hi;
	if (*k1 < (uint32_t)r->nsamples && (float)*k1 < hi)
		(*k1)++;
}

#ifdef __cplusplus
}
#endif

#endif
