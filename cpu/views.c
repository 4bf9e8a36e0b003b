/* SPDX-License-Identifier: MIT */
/*
 * The views of docs/algorithms.md §4 on the CPU, from the u8 volume V[y][x][z] exactly as published:
 * en-face mean/max over the slab, B-scan, slice and plane at the position, and the MIP render
 * (orthographic rays, trilinear samples, maximum rounded half up), and the reduced volume
 * (block maxima or means, §4.5). The CUDA backend computes the same from the same
 * be_render_setup and block factors (gpu/gpu_views.cu).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <volrec/protocol.h>

#include "cpu/internal.h"

/* Trilinear interpolation of V at voxel coordinates (x, y, z) already inside [0, n - 1]. */
static double trilinear(const uint8_t *V, uint32_t Y, uint32_t X, uint32_t Z, double x, double y,
                        double z)
{
	uint32_t x0 = (uint32_t)x, y0 = (uint32_t)y, z0 = (uint32_t)z;
	uint32_t x1, y1, z1;
	double fx, fy, fz, c00, c01, c10, c11;

	if (x0 > X - 1)
		x0 = X - 1;
	if (y0 > Y - 1)
		y0 = Y - 1;
	if (z0 > Z - 1)
		z0 = Z - 1;
	x1 = x0 + 1 < X ? x0 + 1 : x0;
	y1 = y0 + 1 < Y ? y0 + 1 : y0;
	z1 = z0 + 1 < Z ? z0 + 1 : z0;
	fx = x - x0, fy = y - y0, fz = z - z0;
#define VV(yy, xx, zz) ((double)V[((size_t)(yy)*X + (xx)) * Z + (zz)])
	c00 = VV(y0, x0, z0) + (VV(y0, x0, z1) - VV(y0, x0, z0)) * fz;
	c01 = VV(y0, x1, z0) + (VV(y0, x1, z1) - VV(y0, x1, z0)) * fz;
	c10 = VV(y1, x0, z0) + (VV(y1, x0, z1) - VV(y1, x0, z0)) * fz;
	c11 = VV(y1, x1, z0) + (VV(y1, x1, z1) - VV(y1, x1, z0)) * fz;
#undef VV
	c00 += (c01 - c00) * fx;
	c10 += (c11 - c10) * fx;
	return c00 + (c10 - c00) * fy;
}

static uint8_t render_pixel(const uint8_t *V, const struct be_view_params *p,
                            const struct be_render_setup *r, uint32_t i, uint32_t j)
{
	double o[3], best = -1.0;
	uint32_t k0, k1;

	be_render_krange(r, i, j, &k0, &k1);
	for (int a = 0; a < 3; a++)
		o[a] = r->org[a] + (j + 0.5) * r->du[a] + (i + 0.5) * r->dv[a];
	for (uint32_t k = k0; k < k1; k++) {
		double q[3];
		bool inside = true;

		for (int a = 0; a < 3; a++) {
			q[a] = o[a] + (k + 0.5) * r->dt[a];
			if (!(q[a] >= -1e-4 && q[a] <= r->lim[a] + 1e-4)) {
				inside = false;
				break;
			}
			q[a] = q[a] < 0.0 ? 0.0 : q[a] > r->lim[a] ? r->lim[a] : q[a];
		}
		if (inside) {
			double v = trilinear(V, p->Y, p->X, p->Z, q[0], q[1], q[2]);
			if (v > best)
				best = v;
		}
	}
	return best < 0.0 ? 0 : (uint8_t)floor(best + 0.5);
}

void cpu_volume_reduce(const uint8_t *V, const struct be_view_params *p, uint8_t *out)
{
	uint32_t f[3], r[3];
	uint64_t acc[VOLREC_VOLUME_MAX];

	be_volume_dims(p, f, r);
	if (!p->volume_max_side)
		return;
	for (uint32_t yb = 0; yb < r[0]; yb++) {
		const uint32_t y0 = yb * f[0], y1 = y0 + f[0] < p->Y ? y0 + f[0] : p->Y;

		for (uint32_t xb = 0; xb < r[1]; xb++) {
			const uint32_t x0 = xb * f[1], x1 = x0 + f[1] < p->X ? x0 + f[1] : p->X;
			uint8_t *o = out + ((size_t)yb * r[1] + xb) * r[2];

			memset(acc, 0, sizeof(acc[0]) * r[2]);
			for (uint32_t y = y0; y < y1; y++)
				for (uint32_t x = x0; x < x1; x++) {
					const uint8_t *a = V + ((size_t)y * p->X + x) * p->Z;

					/* one block of f[2] depths per element: no division per voxel */
					for (uint32_t zb = 0, z = 0; zb < r[2]; zb++) {
						const uint32_t z1 =
						        z + f[2] < p->Z ? z + f[2] : p->Z;
						uint64_t v = acc[zb];
						uint8_t m = (uint8_t)v; /* u8: a vector max */

						if (p->volume_reduce == VOLREC_REDUCE_MEAN) {
							uint32_t t = 0; /* < 2^32: Z <= 131072 */

							for (; z < z1; z++)
								t += a[z];
							v += t;
						} else {
							for (; z < z1; z++)
								m = a[z] > m ? a[z] : m;
							v = m;
						}
						acc[zb] = v;
					}
				}
			for (uint32_t zb = 0; zb < r[2]; zb++) {
				const uint32_t z0 = zb * f[2],
				               z1 = z0 + f[2] < p->Z ? z0 + f[2] : p->Z;
				const uint64_t n = (uint64_t)(y1 - y0) * (x1 - x0) * (z1 - z0);

				o[zb] = p->volume_reduce == VOLREC_REDUCE_MEAN
				                ? (uint8_t)((2 * acc[zb] + n) / (2 * n))
				                : (uint8_t)acc[zb];
			}
		}
	}
}

void cpu_views_compute(const uint8_t *V, const struct be_view_params *p,
                       const struct be_render_setup *r, uint8_t *const out[BE_VIEW_COUNT])
{
	const uint32_t Y = p->Y, X = p->X, Z = p->Z;
	const uint32_t za = p->slab[0], zb = p->slab[1], n = zb - za;
	const uint32_t y0 = p->position[0], x0 = p->position[1], z0 = p->position[2];

	for (uint32_t y = 0; y < Y; y++)
		for (uint32_t x = 0; x < X; x++) {
			const uint8_t *a = V + ((size_t)y * X + x) * Z;
			uint32_t sum = 0;
			uint8_t mx = 0;

			for (uint32_t z = za; z < zb; z++) {
				sum += a[z];
				mx = a[z] > mx ? a[z] : mx;
			}
			if (out[BE_VIEW_ENFACE_MEAN])
				out[BE_VIEW_ENFACE_MEAN][(size_t)y * X + x] =
				        (uint8_t)((2u * sum + n) / (2u * n));
			if (out[BE_VIEW_ENFACE_MAX])
				out[BE_VIEW_ENFACE_MAX][(size_t)y * X + x] = mx;
			if (out[BE_VIEW_PLANE])
				out[BE_VIEW_PLANE][(size_t)y * X + x] = a[z0];
			if (out[BE_VIEW_SLICE] && x == x0)
				memcpy(out[BE_VIEW_SLICE] + (size_t)y * Z, a, Z);
		}
	if (out[BE_VIEW_BSCAN])
		memcpy(out[BE_VIEW_BSCAN], V + (size_t)y0 * X * Z, (size_t)X * Z);
	if (out[BE_VIEW_RENDER]) {
		uint32_t row = 0;
		cpu_render(V, p, r, out[BE_VIEW_RENDER], &row, 0);
	}
	if (out[BE_VIEW_VOLUME])
		cpu_volume_reduce(V, p, out[BE_VIEW_VOLUME]);
}

bool cpu_render(const uint8_t *V, const struct be_view_params *p, const struct be_render_setup *r,
                uint8_t *out, uint32_t *row, uint64_t deadline_ns)
{
	for (; *row < r->H; (*row)++) {
		if (deadline_ns && vr_mono_ns() >= deadline_ns)
			return false;
		for (uint32_t j = 0; j < r->W; j++)
			out[(size_t)*row * r->W + j] = render_pixel(V, p, r, *row, j);
	}
	return true;
}

/* Go on with the render in progress, or begin one of out's volume (a private copy: a render
 * that takes several volumes' time shows the volume it began with); whether it is whole. */
static bool render_step(struct cpu_views *v, const struct be_output *out, uint64_t deadline_ns)
{
	size_t bytes = (size_t)v->p.Y * v->p.X * v->p.Z;
	const uint8_t *V = out->volume;

	if (!v->rbusy) {
		if (bytes > v->rvol_size) {
			free(v->rvol);
			v->rvol = malloc(bytes);
			v->rvol_size = v->rvol ? bytes : 0;
		}
		v->rbusy = true;
		v->rrow = 0;
		v->rid = out->volume_id;
		v->rp = v->p;
		v->rrs = v->rs;
		if (v->rvol)
			memcpy(v->rvol, out->volume, bytes);
	}
	if (v->rvol)
		V = v->rvol;
	else
		deadline_ns = 0; /* no room for a copy: the whole render now, of this volume */
	return cpu_render(V, &v->rp, &v->rrs, v->next_render, &v->rrow, deadline_ns);
}

int cpu_views_setup(struct cpu_state *st, const struct vr_config *cfg, char *err, size_t errlen)
{
	struct cpu_views *v = &st->views;
	struct be_view_params p;
	int rc;

	if (!be_views_wanted(cfg)) {
		v->enabled = false;
		return 0;
	}
	be_view_params_from_cfg(cfg, &p);
	/* a configuration built in code may leave the view keys unresolved: that fails only
	 * when views are asked for (cpu_views_epoch), a validated one never does */
	rc = be_view_check(&p, v->why, sizeof(v->why));
	v->valid = rc == 0;
	v->enabled = true;
	v->p = p;
	be_render_setup(&v->p, &v->rs);
	v->rbusy = false; /* a render in progress had the old parameters */
	if (!v->last_render) {
		v->last_render = calloc((size_t)VOLREC_RENDER_MAX * VOLREC_RENDER_MAX, 1);
		v->next_render = calloc((size_t)VOLREC_RENDER_MAX * VOLREC_RENDER_MAX, 1);
		if (!v->last_render || !v->next_render)
			return vr_err(err, errlen, -ENOMEM,
			              "cpu backend: out of memory for the views");
	}
	return 0;
}

void cpu_views_free(struct cpu_state *st)
{
	free(st->views.last_render);
	free(st->views.next_render);
	free(st->views.rvol);
	st->views.last_render = NULL;
	st->views.next_render = NULL;
	st->views.rvol = NULL;
	st->views.rvol_size = 0;
	st->views.rbusy = false;
}

int cpu_views_epoch(struct cpu_state *st, const struct be_output *out, char *err, size_t errlen)
{
	struct cpu_views *v = &st->views;
	uint8_t *area = out->views, *pic[BE_VIEW_COUNT];
	uint64_t off[BE_VIEW_COUNT], vid[BE_VIEW_COUNT];
	unsigned present = 0;
	bool want_render;

	if (!v->enabled || !area || !out->volume)
		return 0;
	if (!v->valid)
		return vr_err(err, errlen, -EINVAL, "cpu backend: views: %s", v->why);
	be_views_offsets(v->p.Y, v->p.X, v->p.Z, off);
	for (int i = 0; i < BE_VIEW_COUNT; i++) {
		bool want = (out->view_mask >> i) & 1u;

		if (i == BE_VIEW_VOLUME && !v->p.volume_max_side)
			want = false; /* view.volume.max_side: 0 */
		pic[i] = want ? area + off[i] : NULL;
		vid[i] = out->volume_id;
		if (want && i != BE_VIEW_RENDER)
			present |= 1u << i;
	}
	want_render = pic[BE_VIEW_RENDER] != NULL;
	pic[BE_VIEW_RENDER] = NULL;
	cpu_views_compute(out->volume, &v->p, &v->rs, pic);
	if (want_render) {
		/* into the spare picture: one stopped at its deadline goes on with the next
		 * volume that asks for a render, and the last whole one stays meanwhile */
		struct be_render_report *rr = out->render;
		uint64_t t0 = vr_mono_ns();
		bool done = render_step(v, out, rr ? rr->deadline_ns : 0);

		if (rr) {
			rr->ns = vr_mono_ns() - t0;
			rr->measured = true;
			rr->abandoned = !done;
		}
		if (done) {
			uint8_t *t = v->last_render;
			v->last_render = v->next_render;
			v->next_render = t;
			v->last_p = v->rp;
			v->last_id = v->rid;
			v->have_last = true;
			v->rbusy = false;
		}
	}
	/* the render of this volume, or the last one computed (its own id and parameters) */
	if (v->have_last) {
		memcpy(area + off[BE_VIEW_RENDER], v->last_render,
		       (size_t)v->last_p.render_h * v->last_p.render_w);
		vid[BE_VIEW_RENDER] = v->last_id;
		present |= 1u << BE_VIEW_RENDER;
	}
	be_views_describe(area, &v->p, v->have_last ? &v->last_p : &v->p, vid, present);
	/* the other channels' en-face projections and B-scan, where the first one's are present */
	for (uint32_t c = 1; out->channel_views && c < st->geo.nch; c++) {
		const uint64_t nvox = (uint64_t)v->p.Y * v->p.X * v->p.Z;
		uint8_t *base = (uint8_t *)out->channel_views +
		                (c - 1) * volrec_channel_views_step(v->p.Y, v->p.X, v->p.Z);
		uint8_t *cp[BE_VIEW_COUNT] = {0};
		static const int kinds[] = {BE_VIEW_ENFACE_MEAN, BE_VIEW_ENFACE_MAX, BE_VIEW_BSCAN};

		for (int i = 0; i < 3; i++)
			if (present & (1u << kinds[i]))
				cp[kinds[i]] = base + volrec_channel_view_offset(
				                              v->p.Y, v->p.X, (unsigned)kinds[i]);
		cpu_views_compute(out->volume + c * nvox, &v->p, &v->rs, cp);
	}
	return 0;
}
