/* SPDX-License-Identifier: MIT */
/*
 * Host part of the views (docs/algorithms.md §4): sizes, names, parameter checks and the render's
 * camera, shared by the CPU and CUDA implementations.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>

#include <string.h>

#include <volrec/protocol.h>

#include "base/base.h"
#include "config/config.h"
#include "backend/views.h"

_Static_assert((int)BE_VIEW_ENFACE_MEAN == VOLREC_IMAGE_ENFACE_MEAN &&
                       (int)BE_VIEW_ENFACE_MAX == VOLREC_IMAGE_ENFACE_MAX &&
                       (int)BE_VIEW_BSCAN == VOLREC_IMAGE_BSCAN &&
                       (int)BE_VIEW_SLICE == VOLREC_IMAGE_SLICE &&
                       (int)BE_VIEW_PLANE == VOLREC_IMAGE_PLANE &&
                       (int)BE_VIEW_RENDER == VOLREC_IMAGE_RENDER &&
                       (int)BE_VIEW_VOLUME == VOLREC_IMAGE_VOLUME &&
                       (int)BE_VIEW_COUNT == VOLREC_IMAGE_COUNT,
               "views in the order of protocol.h");
_Static_assert((int)CFG_VOLUME_MAX == VOLREC_REDUCE_MAX &&
                       (int)CFG_VOLUME_MEAN == VOLREC_REDUCE_MEAN && VOLREC_VOLUME_MAX == 256,
               "view.volume keys as protocol.h says (config/schema.c: max_side <= 256)");

static const char *const names[BE_VIEW_COUNT] = {"enface_mean", "enface_max", "bscan", "slice",
                                                 "plane",       "render",     "volume"};

const char *be_view_name(enum be_view v)
{
	return (unsigned)v < BE_VIEW_COUNT ? names[v] : "?";
}

void be_volume_dims(const struct be_view_params *p, uint32_t f[3], uint32_t r[3])
{
	const uint32_t n[3] = {p->Y, p->X, p->Z}, m = p->volume_max_side;

	for (int a = 0; a < 3; a++) {
		f[a] = m ? (n[a] + m - 1) / m : 0;
		r[a] = m ? (n[a] + f[a] - 1) / f[a] : 0;
	}
}

size_t be_volume_room(uint32_t Y, uint32_t X, uint32_t Z)
{
	const uint32_t m = VOLREC_VOLUME_MAX;

	return (size_t)(Y < m ? Y : m) * (X < m ? X : m) * (Z < m ? Z : m);
}

/* Rows x columns of view v for these parameters (a volume: Yr x Xr, its planes apart). */
static void view_dims(const struct be_view_params *p, enum be_view v, uint32_t *rows,
                      uint32_t *cols)
{
	uint32_t f[3], r[3];

	switch (v) {
	case BE_VIEW_ENFACE_MEAN:
	case BE_VIEW_ENFACE_MAX:
	case BE_VIEW_PLANE:
		*rows = p->Y, *cols = p->X;
		break;
	case BE_VIEW_BSCAN:
		*rows = p->X, *cols = p->Z;
		break;
	case BE_VIEW_SLICE:
		*rows = p->Y, *cols = p->Z;
		break;
	case BE_VIEW_RENDER:
		*rows = p->render_h, *cols = p->render_w;
		break;
	case BE_VIEW_VOLUME:
		be_volume_dims(p, f, r);
		*rows = r[0], *cols = r[1];
		break;
	default:
		*rows = *cols = 0;
	}
}

size_t be_view_size(const struct be_view_params *p, enum be_view v)
{
	uint32_t r, c, f[3], d[3];

	view_dims(p, v, &r, &c);
	if (v == BE_VIEW_VOLUME) {
		be_volume_dims(p, f, d);
		return (size_t)d[0] * d[1] * d[2];
	}
	return (size_t)r * c;
}

int be_view_check(const struct be_view_params *p, char *err, size_t errlen)
{
	if (!(p->slab[0] < p->slab[1] && p->slab[1] <= p->Z))
		return vr_err(err, errlen, -EINVAL,
		              "view.slab: [%u, %u] is not a depth range inside the volume "
		              "(0 <= za < zb <= %u)",
		              p->slab[0], p->slab[1], p->Z);
	if (p->position[0] >= p->Y || p->position[1] >= p->X || p->position[2] >= p->Z)
		return vr_err(err, errlen, -EINVAL,
		              "view.position: [%u, %u, %u] is outside the volume "
		              "([y, x, z] with y < %u, x < %u, z < %u)",
		              p->position[0], p->position[1], p->position[2], p->Y, p->X, p->Z);
	if (p->render_h < 1 || p->render_w < 1 || p->render_h > VOLREC_RENDER_MAX ||
	    p->render_w > VOLREC_RENDER_MAX)
		return vr_err(err, errlen, -EINVAL,
		              "view.render.size: [%u, %u] is not allowed (1 to 1024 pixels each)",
		              p->render_h, p->render_w);
	for (int a = 0; a < 3; a++)
		if (!(p->spacing[a] > 0.0 && isfinite(p->spacing[a])))
			return vr_err(err, errlen, -EINVAL,
			              "view.render.spacing: [%g, %g, %g] is not allowed "
			              "(three finite values > 0)",
			              p->spacing[0], p->spacing[1], p->spacing[2]);
	if (!isfinite(p->angles_deg[0]) || !isfinite(p->angles_deg[1]))
		return vr_err(err, errlen, -EINVAL,
		              "view.render.angles_deg: not finite (two angles in degrees)");
	{
		double D = sqrt(pow(p->X * p->spacing[0], 2) + pow(p->Y * p->spacing[1], 2) +
		                pow(p->Z * p->spacing[2], 2));
		if (!(p->step > 0.0 && isfinite(p->step)) || D / p->step > 1e6)
			return vr_err(err, errlen, -EINVAL,
			              "view.render.step: %g is not allowed (> 0, and at most 10^6 "
			              "samples along the diagonal %g)",
			              p->step, D);
	}
	if (p->volume_max_side > VOLREC_VOLUME_MAX || p->volume_reduce > VOLREC_REDUCE_MEAN)
		return vr_err(err, errlen, -EINVAL,
		              "view.volume.max_side: %u is not allowed (0 = off, or 1 to %d voxels "
		              "a side)",
		              p->volume_max_side, VOLREC_VOLUME_MAX);
	return 0;
}

void be_render_setup(const struct be_view_params *p, struct be_render_setup *r)
{
	const double deg = M_PI / 180.0;
	double ph = p->angles_deg[0] * deg, th = p->angles_deg[1] * deg;
	double cp = cos(ph), sp = sin(ph), ct = cos(th), st = sin(th);
	/* R = R_x(theta) R_y(phi); the camera axes are the rows of R (R^T applied to unit vectors). */
	double R[3][3] = {
	        {cp, 0.0, sp},
	        {st * sp, ct, -st * cp},
	        {-ct * sp, st, ct * cp},
	};
	double s[3] = {p->spacing[0], p->spacing[1], p->spacing[2]};
	double n[3] = {p->X, p->Y, p->Z};
	double D = sqrt(pow(n[0] * s[0], 2) + pow(n[1] * s[1], 2) + pow(n[2] * s[2], 2));

	for (int a = 0; a < 3; a++) {
		double c = (n[a] - 1.0) * s[a] / 2.0;
		double er = R[0][a], ed = R[1][a], ev = R[2][a];

		r->org[a] = (c - D / 2.0 * er - D / 2.0 * ed - D / 2.0 * ev) / s[a];
		r->du[a] = D / p->render_w * er / s[a];
		r->dv[a] = D / p->render_h * ed / s[a];
		r->dt[a] = p->step * ev / s[a];
		r->forg[a] = (float)r->org[a];
		r->fdu[a] = (float)r->du[a];
		r->fdv[a] = (float)r->dv[a];
		r->fdt[a] = (float)r->dt[a];
		r->lim[a] = (float)(n[a] - 1.0);
	}
	r->nsamples = (uint32_t)ceil(D / p->step);
	r->H = p->render_h;
	r->W = p->render_w;
}

void be_view_params_from_cfg(const struct vr_config *cfg, struct be_view_params *p)
{
	uint32_t d[3];
	const double *s = cfg->view.render.spacing;

	cfg_out_dims(cfg, d);
	memset(p, 0, sizeof(*p));
	p->Y = d[0], p->X = d[1], p->Z = d[2];
	p->slab[0] = cfg->view.slab[0];
	p->slab[1] = cfg->view.slab[1];
	for (int a = 0; a < 3; a++) {
		p->position[a] = cfg->view.position[a];
		p->spacing[a] = s[a];
	}
	p->render_h = cfg->view.render.size[0];
	p->render_w = cfg->view.render.size[1];
	p->angles_deg[0] = cfg->view.render.angles_deg[0];
	p->angles_deg[1] = cfg->view.render.angles_deg[1];
	p->step = cfg_render_step(cfg);
	p->volume_max_side = cfg->view.volume.max_side;
	p->volume_reduce = (uint32_t)cfg->view.volume.reduce;
}

bool be_views_wanted(const struct vr_config *cfg)
{
	return cfg->view.enabled && cfg->output.dtype == CFG_DTYPE_U8;
}

void be_views_offsets(uint32_t Y, uint32_t X, uint32_t Z, uint64_t off[BE_VIEW_COUNT])
{
	const uint64_t a = 63;
	uint64_t yx = ((uint64_t)Y * X + a) & ~a, xz = ((uint64_t)X * Z + a) & ~a;
	uint64_t yz = ((uint64_t)Y * Z + a) & ~a;

	off[BE_VIEW_ENFACE_MEAN] = VOLREC_VIEWS_DATA_OFFSET;
	off[BE_VIEW_ENFACE_MAX] = off[BE_VIEW_ENFACE_MEAN] + yx;
	off[BE_VIEW_PLANE] = off[BE_VIEW_ENFACE_MAX] + yx;
	off[BE_VIEW_BSCAN] = off[BE_VIEW_PLANE] + yx;
	off[BE_VIEW_SLICE] = off[BE_VIEW_BSCAN] + xz;
	off[BE_VIEW_RENDER] = off[BE_VIEW_SLICE] + yz;
	off[BE_VIEW_VOLUME] = off[BE_VIEW_RENDER] + (uint64_t)VOLREC_RENDER_MAX * VOLREC_RENDER_MAX;
}

void be_views_describe(void *area, const struct be_view_params *p, const struct be_view_params *rp,
                       const uint64_t vid[BE_VIEW_COUNT], unsigned present)
{
	struct volrec_views_header *h = area;
	struct volrec_image_desc *desc = (struct volrec_image_desc *)(h + 1);
	uint64_t off[BE_VIEW_COUNT];
	uint32_t f[3], r[3];

	be_volume_dims(p, f, r);
	be_views_offsets(p->Y, p->X, p->Z, off);
	memset(h, 0, VOLREC_VIEWS_DATA_OFFSET);
	h->magic = VOLREC_VIEWS_MAGIC;
	h->count = VOLREC_IMAGE_COUNT;
	h->desc_size = sizeof(struct volrec_image_desc);
	for (int v = 0; v < BE_VIEW_COUNT; v++) {
		struct volrec_image_desc *d = &desc[v];
		const struct be_view_params *q = v == BE_VIEW_RENDER ? rp : p;

		d->kind = (uint32_t)v;
		d->present = (present >> v) & 1u;
		view_dims(q, (enum be_view)v, &d->rows, &d->cols);
		d->offset = off[v];
		d->volume_id = vid[v];
		d->slab_za = q->slab[0];
		d->slab_zb = q->slab[1];
		d->position_y = q->position[0];
		d->position_x = q->position[1];
		d->position_z = q->position[2];
		d->azimuth_deg = (float)q->angles_deg[0];
		d->elevation_deg = (float)q->angles_deg[1];
		d->spacing_x = (float)q->spacing[0];
		d->spacing_y = (float)q->spacing[1];
		d->spacing_z = (float)q->spacing[2];
		d->step = (float)q->step;
		d->planes = 1;
		d->block_y = d->block_x = d->block_z = 1;
		if (v == BE_VIEW_VOLUME && p->volume_max_side) {
			d->planes = r[2];
			d->block_y = f[0], d->block_x = f[1], d->block_z = f[2];
			d->reduce = p->volume_reduce;
		}
	}
}
