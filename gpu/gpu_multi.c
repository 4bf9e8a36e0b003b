/* SPDX-License-Identifier: MIT */
/*
 * The CUDA backend over several devices (be_cuda_multi_ops, gpu.devices with more than one
 * entry): one ordinary CUDA backend state per entry, each a part of the volume (gpu.h): part
 * k reconstructs the output rows of the B-scans [k ny / n, (k + 1) ny / n), preprocesses the
 * B-scans those rows need with their halo, and copies its rows over its own link straight into
 * the caller's buffers. This file routes B-scans, finishes and waits for every part, combines
 * the parts' renders (a maximum) and writes the views header, and after each cumulative epoch
 * copies into each part the rows next to its slab that the other parts computed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <volrec/protocol.h>

#include "backend/ops.h"
#include "gpu/gpu.h"

struct gpu_multi {
	uint32_t n;                    /* parts (entries of gpu.devices) */
	int devs[CFG_GPU_DEVICES_MAX]; /* their CUDA devices */
	struct gpu_state *part[CFG_GPU_DEVICES_MAX];
	uint32_t lo[CFG_GPU_DEVICES_MAX]; /* B-scan positions each part preprocesses: [lo, hi) */
	uint32_t hi[CFG_GPU_DEVICES_MAX];
	struct be_geometry geo; /* be_geometry_init: raw B-scan r is a repeat of position r / M */
	char device[2048];      /* be_device */
	struct be_live live;    /* the live scalars in force (be_live_init) */

	/* views: the parameters in force, the last combined render and what it shows */
	bool views;
	struct be_view_params vp;
	uint8_t *render;          /* [VOLREC_RENDER_MAX^2] */
	unsigned long long *vacc; /* [be_volume_room] the parts' reduced volumes combined */
	struct be_view_params last_rp;
	uint64_t last_render_id;
	bool have_render;

	/* the epoch in flight (finish_async returned 0 on every part) */
	struct be_output out;
	struct be_view_params out_vp;
	bool out_cumulative;
	bool ahead; /* the next epoch was queued ahead on some part (gpu_part_ahead) */
};

/* The per-part configuration: cfg on device devs[k] alone. */
static int gm_part_cfg(const struct gpu_multi *g, uint32_t k, const struct vr_config *cfg,
                       struct vr_config *pc)
{
	cfg_defaults(pc);
	if (cfg_copy(pc, cfg) < 0)
		return -ENOMEM;
	pc->gpu.device = g->devs[k];
	pc->gpu.ndevices = 0;
	return 0;
}

/*
 * err = "cuda backend: gpu.devices[k] (CUDA device d, NAME): msg" for part k's failure msg
 * (its own "cuda backend: " left out). \return rc.
 */
static int gm_fail(const struct gpu_multi *g, uint32_t k, int rc, const char *msg, char *err,
                   size_t errlen)
{
	static const char own[] = "cuda backend: ";
	struct cudaDeviceProp prop;
	const char *name = g->part[k] ? gpu_part_name(g->part[k]) : NULL;

	if (!name && cudaGetDeviceProperties(&prop, g->devs[k]) == cudaSuccess)
		name = prop.name;
	if (!name) {
		cudaGetLastError();
		name = "unknown device";
	}
	if (!strncmp(msg, own, sizeof(own) - 1))
		msg += sizeof(own) - 1;
	return vr_err(err, errlen, rc, "cuda backend: gpu.devices[%u] (CUDA device %d, %s): %s", k,
	              g->devs[k], name, msg);
}

static void gm_destroy(void *vg)
{
	struct gpu_multi *g = vg;

	if (!g)
		return;
	for (uint32_t k = 0; k < g->n; k++)
		if (g->part[k])
			be_cuda_ops.destroy(g->part[k]);
	free(g->render);
	free(g->vacc);
	free(g);
}

/* The reconstruction settings of several devices: those of one (gpu_recon_supported), but the
 * adaptive mode's jump recovery, which decides from the mean A-scan of the whole epoch while
 * each part holds its own rows of it. */
static int gm_recon_supported(const struct vr_config *cfg, uint32_t n, char *err, size_t errlen)
{
	int rc = gpu_recon_supported(cfg, err, errlen);

	if (rc == 0 && cfg->reconstruct.mode == CFG_RECON_ADAPTIVE &&
	    cfg->reconstruct.adaptive.jump_recovery)
		rc = vr_err(err, errlen, -ENOTSUP,
		            "reconstruct.adaptive.jump_recovery: the recovery after a jump runs on "
		            "one CUDA device, not over the %u of gpu.devices (docs/gpu.md): set it "
		            "to false or use gpu.device",
		            n);
	return rc;
}

static int gm_create(const struct vr_config *cfg, void **state, char *err, size_t errlen)
{
	const uint32_t ny = cfg->geometry.bscans_per_volume;
	struct gpu_multi *g = calloc(1, sizeof(*g));
	char msg[1024];
	size_t used;
	int rc;

	if (!g)
		return vr_err(err, errlen, -ENOMEM, "cuda backend: out of host memory");
	g->n = cfg_gpu_devices(cfg, g->devs);
	rc = gm_recon_supported(cfg, g->n, err, errlen);
	if (rc < 0)
		goto fail;
	if (cfg_functional(cfg)) {
		rc = vr_err(err, errlen, -ENOTSUP,
		            "output.channels: channels other than [structure] run on one CUDA "
		            "device, not over the %u of gpu.devices (docs/gpu.md): use gpu.device",
		            g->n);
		goto fail;
	}
	be_geometry_init(&g->geo, cfg);
	if (g->n > ny) {
		rc = vr_err(err, errlen, -EINVAL,
		            "gpu.devices: %u devices for %u B-scans per volume (each device needs "
		            "one B-scan at least)",
		            g->n, ny);
		goto fail;
	}
	int ndev = 0;
	if (cudaGetDeviceCount(&ndev) != cudaSuccess) {
		cudaGetLastError();
		ndev = 0;
	}
	for (uint32_t k = 0; k < g->n; k++)
		if (g->devs[k] >= ndev) {
			rc = vr_err(err, errlen, -ENODEV,
			            "gpu.devices[%u]: %d, but only %d CUDA device(s) present%s", k,
			            g->devs[k], ndev, ndev ? "" : " (none)");
			goto fail;
		}
	used = (size_t)snprintf(g->device, sizeof(g->device), "%u CUDA devices:", g->n);
	for (uint32_t k = 0; k < g->n; k++) {
		const struct gpu_part p = {k, g->n, (uint32_t)((uint64_t)k * ny / g->n),
		                           (uint32_t)((uint64_t)(k + 1) * ny / g->n)};
		struct vr_config pc;
		msg[0] = '\0';
		if (gm_part_cfg(g, k, cfg, &pc) < 0) {
			rc = vr_err(err, errlen, -ENOMEM, "cuda backend: out of host memory");
			goto fail;
		}
		rc = gpu_part_create(&pc, &p, &g->part[k], msg, sizeof(msg));
		cfg_free(&pc);
		if (rc < 0) {
			gm_fail(g, k, rc, msg, err, errlen);
			goto fail;
		}
		gpu_part_bscans(g->part[k], &g->lo[k], &g->hi[k]);
		if (used < sizeof(g->device))
			used += (size_t)snprintf(g->device + used, sizeof(g->device) - used,
			                         "%s [%u] %s, B-scans %u-%u", k ? ";" : "", k,
			                         be_cuda_ops.device(g->part[k]), p.b0, p.b1 - 1);
	}
	be_live_init(&g->live, cfg);
	g->views = be_views_wanted(cfg);
	if (g->views) {
		be_view_params_from_cfg(cfg, &g->vp);
		g->render = malloc((size_t)VOLREC_RENDER_MAX * VOLREC_RENDER_MAX);
		g->vacc = malloc(be_volume_room(g->vp.Y, g->vp.X, g->vp.Z) * sizeof(*g->vacc));
		if (!g->render || !g->vacc) {
			rc = vr_err(err, errlen, -ENOMEM, "cuda backend: out of host memory");
			goto fail;
		}
	}
	*state = g;
	return 0;
fail:
	gm_destroy(g);
	return rc;
}

static const char *gm_device(void *vg)
{
	return ((struct gpu_multi *)vg)->device;
}

/* Pinned and registered memory is portable (every device's context): part 0 does it. */
static int gm_host_alloc(void *vg, size_t size, void **ptr)
{
	return be_cuda_ops.host_alloc(((struct gpu_multi *)vg)->part[0], size, ptr);
}

static void gm_host_free(void *vg, void *ptr)
{
	be_cuda_ops.host_free(((struct gpu_multi *)vg)->part[0], ptr);
}

static int gm_host_register(void *vg, void *ptr, size_t size, unsigned flags)
{
	return be_cuda_ops.host_register(((struct gpu_multi *)vg)->part[0], ptr, size, flags);
}

static void gm_host_unregister(void *vg, void *ptr)
{
	be_cuda_ops.host_unregister(((struct gpu_multi *)vg)->part[0], ptr);
}

/* Raw B-scan bscan (a repeat of position bscan / M) goes to every part whose slab (with its
 * halo) needs that position. */
static int gm_bscan_submit(void *vg, uint64_t epoch, uint32_t bscan, const void *raw)
{
	struct gpu_multi *g = vg;
	const uint32_t b = bscan / g->geo.M;
	int rc = 0;

	for (uint32_t k = 0; k < g->n; k++) {
		if (b < g->lo[k] || b >= g->hi[k])
			continue;
		int r = be_cuda_ops.bscan_submit(g->part[k], epoch, bscan, raw);
		if (r < 0 && rc == 0)
			rc = r;
	}
	return rc;
}

static void gm_reset_history(void *vg)
{
	struct gpu_multi *g = vg;

	g->ahead = false;
	for (uint32_t k = 0; k < g->n; k++)
		be_cuda_ops.reset_history(g->part[k]);
}

/* A B-scan of the epoch failed on some part: every part drops the epoch (the failed ones
 * report why), so that their histories stay alike. \return the first part's failure. */
static int gm_drop_failed(struct gpu_multi *g, uint64_t epoch, char *err, size_t errlen)
{
	const struct be_output none = {0};
	char msg[1024];
	int rc = 0;
	const bool ahead = g->ahead;

	g->ahead = false;
	for (uint32_t k = 0; k < g->n; k++) {
		int r;
		msg[0] = '\0';
		if (gpu_part_failed(g->part[k])) {
			r = be_cuda_ops.epoch_finish(g->part[k], epoch, &none, msg, sizeof(msg));
			if (r == 0) /* the part's failure is reported by its finish */
				r = vr_err(msg, sizeof(msg), -EIO, "a B-scan failed");
		} else {
			r = gpu_part_drop(g->part[k], msg, sizeof(msg));
		}
		if (r < 0 && rc == 0)
			rc = gm_fail(g, k, r, msg, err, errlen);
	}
	if (ahead) /* some parts interlaced it already: every history starts afresh alike */
		gm_reset_history(g);
	return rc;
}

static int gm_epoch_finish_async(void *vg, uint64_t epoch, const struct be_output *out, char *err,
                                 size_t errlen)
{
	struct gpu_multi *g = vg;
	char msg[1024];
	int rc;

	for (uint32_t k = 0; k < g->n; k++)
		if (gpu_part_failed(g->part[k]))
			return gm_drop_failed(g, epoch, err, errlen);
	g->ahead = false;
	for (uint32_t k = 0; k < g->n; k++) {
		msg[0] = '\0';
		rc = be_cuda_ops.epoch_finish_async(g->part[k], epoch, out, msg, sizeof(msg));
		if (rc == 0)
			continue;
		gm_fail(g, k, rc, msg, err, errlen);
		/* the parts before k queued the epoch and moved their history on, k and the
		 * others did not: wait for them, and start every history afresh alike */
		for (uint32_t j = 0; j < k; j++)
			if (be_cuda_ops.epoch_wait(g->part[j], epoch, msg, sizeof(msg)) < 0)
				cudaGetLastError();
		if (k > 0)
			gm_reset_history(g);
		return rc;
	}
	g->out = *out;
	g->out_vp = g->vp;
	g->out_cumulative = g->live.mode == CFG_RECON_CUMULATIVE;
	return 0;
}

/* The reduced volume of the epoch every part finished: each block the maximum of the parts'
 * maxima, or the mean of the sum of their sums (docs/algorithms.md §4.5), into out. */
static void gm_volume_finish(struct gpu_multi *g, const struct be_view_params *p, uint8_t *out)
{
	uint32_t f[3], r[3], rows[2];
	const bool mean = p->volume_reduce == VOLREC_REDUCE_MEAN;

	be_volume_dims(p, f, r);
	const size_t plane = (size_t)r[1] * r[2];
	memset(g->vacc, 0, (size_t)r[0] * plane * sizeof(*g->vacc));
	for (uint32_t k = 0; k < g->n; k++) {
		const unsigned long long *a = gpu_part_volume(g->part[k], rows);

		for (size_t i = a ? rows[0] * plane : 0; a && i < rows[1] * plane; i++)
			g->vacc[i] = mean                ? g->vacc[i] + a[i]
			             : a[i] > g->vacc[i] ? a[i]
			                                 : g->vacc[i];
	}
	for (uint32_t yb = 0; yb < r[0]; yb++)
		for (uint32_t xb = 0; xb < r[1]; xb++)
			for (uint32_t zb = 0; zb < r[2]; zb++) {
				const size_t i = yb * plane + (size_t)xb * r[2] + zb;
				const uint64_t ny =
				        p->Y - yb * f[0] < f[0] ? p->Y - yb * f[0] : f[0];
				const uint64_t nx =
				        p->X - xb * f[1] < f[1] ? p->X - xb * f[1] : f[1];
				const uint64_t nz =
				        p->Z - zb * f[2] < f[2] ? p->Z - zb * f[2] : f[2];
				const uint64_t n = ny * nx * nz;

				out[i] = (uint8_t)(mean ? (2 * g->vacc[i] + n) / (2 * n)
				                        : g->vacc[i]);
			}
}

/* The views of the epoch every part finished: the render (the maximum of the parts' renders,
 * each the samples that start in its rows), or the last one again, the reduced volume, and the
 * header. */
static void gm_views_finish(struct gpu_multi *g)
{
	const struct be_output *out = &g->out;
	const struct be_view_params *p = &g->out_vp;
	const unsigned m = out->view_mask;
	uint64_t off[BE_VIEW_COUNT], vid[BE_VIEW_COUNT];
	unsigned present = 0;
	uint8_t *area = out->views;

	be_views_offsets(p->Y, p->X, p->Z, off);
	for (int v = 0; v < BE_VIEW_COUNT; v++)
		vid[v] = out->volume_id;
	if (m & (1u << BE_VIEW_RENDER)) {
		const size_t n = (size_t)p->render_h * p->render_w;
		memcpy(g->render, gpu_part_render(g->part[0]), n);
		for (uint32_t k = 1; k < g->n; k++) {
			const uint8_t *r = gpu_part_render(g->part[k]);
			for (size_t i = 0; i < n; i++)
				g->render[i] = r[i] > g->render[i] ? r[i] : g->render[i];
		}
		g->last_rp = *p;
		g->last_render_id = out->volume_id;
		g->have_render = true;
	}
	/* every part copied its rows of these; the B-scan came from the part holding its row */
	present = m & ((1u << BE_VIEW_ENFACE_MEAN) | (1u << BE_VIEW_ENFACE_MAX) |
	               (1u << BE_VIEW_PLANE) | (1u << BE_VIEW_BSCAN) | (1u << BE_VIEW_SLICE));
	if ((m & (1u << BE_VIEW_VOLUME)) && p->volume_max_side) {
		gm_volume_finish(g, p, area + off[BE_VIEW_VOLUME]);
		present |= 1u << BE_VIEW_VOLUME;
	}
	if (g->have_render) {
		memcpy(area + off[BE_VIEW_RENDER], g->render,
		       (size_t)g->last_rp.render_h * g->last_rp.render_w);
		vid[BE_VIEW_RENDER] = g->last_render_id;
		present |= 1u << BE_VIEW_RENDER;
	}
	be_views_describe(area, p, g->have_render ? &g->last_rp : p, vid, present);
}

/* After a cumulative epoch: the rows around each part's slab that its next epoch reads, from
 * the parts that own them. */
static int gm_halo(struct gpu_multi *g, char *err, size_t errlen)
{
	char msg[1024];
	uint32_t own0[CFG_GPU_DEVICES_MAX], own1[CFG_GPU_DEVICES_MAX];
	uint32_t h0[CFG_GPU_DEVICES_MAX], h1[CFG_GPU_DEVICES_MAX];
	int rc = 0;

	for (uint32_t k = 0; k < g->n; k++)
		gpu_part_rows(g->part[k], false, &own0[k], &own1[k], &h0[k], &h1[k]);
	for (uint32_t k = 0; k < g->n && rc == 0; k++) {
		for (uint32_t y = h0[k]; y < h1[k] && rc == 0; y++) {
			if (y >= own0[k] && y < own1[k])
				continue;
			uint32_t j = 0;
			while (j + 1 < g->n && y >= own1[j])
				j++;
			msg[0] = '\0';
			rc = gpu_part_halo(g->part[k], g->part[j], y, msg, sizeof(msg));
			if (rc < 0)
				gm_fail(g, k, rc, msg, err, errlen);
		}
	}
	for (uint32_t k = 0; k < g->n; k++) {
		msg[0] = '\0';
		int r = gpu_part_halo_wait(g->part[k], msg, sizeof(msg));
		if (r < 0 && rc == 0)
			rc = gm_fail(g, k, r, msg, err, errlen);
	}
	return rc;
}

static int gm_epoch_wait(void *vg, uint64_t epoch, char *err, size_t errlen)
{
	struct gpu_multi *g = vg;
	char msg[1024];
	int rc = 0;
	bool failed = false;

	/* the next epoch queued ahead on every part before any wait, so that no part waits
	 * for another's volume to start its own */
	for (uint32_t k = 0; k < g->n; k++)
		failed |= gpu_part_failed(g->part[k]);
	for (uint32_t k = 0; k < g->n && !failed && !g->out_cumulative; k++)
		g->ahead |= gpu_part_ahead(g->part[k], epoch);
	for (uint32_t k = 0; k < g->n; k++) {
		msg[0] = '\0';
		int r = be_cuda_ops.epoch_wait(g->part[k], epoch, msg, sizeof(msg));
		if (r < 0 && rc == 0)
			rc = gm_fail(g, k, r, msg, err, errlen);
	}
	if (rc == 0 && g->views && g->out.views)
		gm_views_finish(g);
	if (rc == 0 && g->out_cumulative && g->n > 1)
		rc = gm_halo(g, err, errlen);
	return rc;
}

static int gm_epoch_finish(void *vg, uint64_t epoch, const struct be_output *out, char *err,
                           size_t errlen)
{
	int rc = gm_epoch_finish_async(vg, epoch, out, err, errlen);
	return rc < 0 ? rc : gm_epoch_wait(vg, epoch, err, errlen);
}

static int gm_update_live(void *vg, const struct vr_config *cfg, char *err, size_t errlen)
{
	struct gpu_multi *g = vg;
	int devs[CFG_GPU_DEVICES_MAX];
	const uint32_t n = cfg_gpu_devices(cfg, devs);
	char msg[1024];

	if (n != g->n || memcmp(devs, g->devs, n * sizeof(int)))
		return vr_err(err, errlen, -EINVAL,
		              "cuda backend: gpu.devices changed: needs a rebuild, not a live "
		              "update");
	int rc0 = gm_recon_supported(cfg, n, err, errlen);
	if (rc0 < 0)
		return rc0;
	/* part 0 checks the configuration before changing anything; a later part can only
	 * fail on its device */
	for (uint32_t k = 0; k < g->n; k++) {
		struct vr_config pc;
		int rc;
		if (gm_part_cfg(g, k, cfg, &pc) < 0)
			return vr_err(err, errlen, -ENOMEM, "cuda backend: out of host memory");
		msg[0] = '\0';
		rc = be_cuda_ops.update_live(g->part[k], &pc, msg, sizeof(msg));
		cfg_free(&pc);
		if (rc == -EINVAL && k == 0)
			return vr_err(err, errlen, rc, "%s", msg);
		if (rc < 0)
			return gm_fail(g, k, rc, msg, err, errlen);
	}
	be_live_init(&g->live, cfg);
	if (g->views)
		be_view_params_from_cfg(cfg, &g->vp);
	return 0;
}

const struct be_ops be_cuda_multi_ops = {
        .version = BE_OPS_VERSION,
        .name = "cuda",
        .caps = BE_CAP_ASYNC | BE_CAP_DEVICE | BE_CAP_REGISTER,
        .create = gm_create,
        .destroy = gm_destroy,
        .device = gm_device,
        .host_alloc = gm_host_alloc,
        .host_free = gm_host_free,
        .host_register = gm_host_register,
        .host_unregister = gm_host_unregister,
        .bscan_submit = gm_bscan_submit,
        .epoch_finish = gm_epoch_finish,
        .update_live = gm_update_live,
        .reset_history = gm_reset_history,
        .epoch_finish_async = gm_epoch_finish_async,
        .epoch_wait = gm_epoch_wait,
};
