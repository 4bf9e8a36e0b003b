/* SPDX-License-Identifier: MIT */
/*
 * `volrec process`'s HDF5 sink: one chunk per volume in growable datasets, the epoch and scan
 * offset of each volume, with background.mode partial_median the median depths of each B-scan,
 * and the attributes that describe how they were made.
 */
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "h5attr.h"
#include "process.h"

struct proc_h5 {
	const struct vr_config *cfg;
	struct be_backend *be;
	char path[4096];
	hid_t f, ds_vol, ds_low, ds_full;
	hsize_t dvol[3], dlow[3];
	uint8_t *vol;
	float *low, *full;
	uint64_t n, done;
	uint64_t *epochs;
	uint32_t *offsets;
	uint32_t *md;      /* partial_median: [ny] host buffer the backend writes the counts into */
	uint32_t *medians; /* partial_median: [n][ny] the counts of the volumes written */
	uint64_t med_sum;  /* their sum */
	uint32_t med_max;  /* their largest */
	bool progress, created;
	bool broken; /* a volume could not be written: the file cannot be completed */
	double t0, tshow;
};

/* A dataset [n][d1][d2][d3] of type, chunked one volume per chunk, growable in n. */
static hid_t h5_volumes(hid_t f, const char *name, hid_t type, uint64_t n, const hsize_t d[3])
{
	hsize_t dims[4] = {n, d[0], d[1], d[2]}, maxd[4] = {H5S_UNLIMITED, d[0], d[1], d[2]};
	hsize_t chunk[4] = {1, d[0], d[1], d[2]};
	hid_t sp = H5Screate_simple(4, dims, maxd), pl = H5Pcreate(H5P_DATASET_CREATE), ds = -1;

	if (sp >= 0 && pl >= 0 && H5Pset_chunk(pl, 4, chunk) >= 0)
		ds = H5Dcreate2(f, name, type, sp, H5P_DEFAULT, pl, H5P_DEFAULT);
	VR_H5_CLOSE(pl, sp);
	return ds;
}

static int h5_shrink(hid_t ds, uint64_t n, const hsize_t d[3])
{
	hsize_t dims[4] = {n, d[0], d[1], d[2]};

	return H5Dset_extent(ds, dims) >= 0 ? 0 : -EIO;
}

static char *config_yaml(const struct vr_config *cfg)
{
	char *text = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&text, &len);

	if (!m)
		return NULL;
	if (cfg_dump(cfg, m) < 0) {
		fclose(m);
		free(text);
		return NULL;
	}
	if (fclose(m)) {
		free(text);
		return NULL;
	}
	return text;
}

int proc_h5_create(const char *path, const struct vr_config *cfg, struct be_backend *be, uint64_t n,
                   bool lowres, bool full, bool progress, struct proc_h5 **out, char *err,
                   size_t errlen)
{
	const uint32_t nx = cfg->geometry.ascans_per_bscan, ny = cfg->geometry.bscans_per_volume;
	const bool none = cfg->reconstruct.mode == CFG_RECON_NONE;
	struct proc_h5 *h = calloc(1, sizeof(*h));
	size_t nvox = cfg_out_voxels(cfg);
	int rc;

	if (!h)
		return vr_err(err, errlen, -ENOMEM, "out of memory");
	h->cfg = cfg;
	h->be = be;
	h->f = h->ds_vol = h->ds_low = h->ds_full = -1;
	h->n = n;
	h->progress = progress;
	snprintf(h->path, sizeof(h->path), "%s", path);
	h->dvol[0] = none ? ny : (hsize_t)ny * cfg->geometry.stride[1];
	h->dvol[1] = none ? nx : (hsize_t)nx * cfg->geometry.stride[0];
	h->dvol[2] = cfg_nz(cfg);
	h->dlow[0] = ny;
	h->dlow[1] = nx;
	h->dlow[2] = cfg_nz(cfg);
	h->epochs = calloc(n, sizeof(*h->epochs));
	h->offsets = calloc(2 * n, sizeof(*h->offsets));
	rc = h->epochs && h->offsets ? 0 : -ENOMEM;
	if (rc == 0 && cfg->preprocess.background.mode == CFG_BG_PARTIAL_MEDIAN) {
		h->medians = calloc((size_t)n * ny, sizeof(*h->medians));
		rc = h->medians ? be_host_alloc(be, ny * sizeof(*h->md), (void **)&h->md) : -ENOMEM;
	}
	if (rc == 0)
		rc = be_host_alloc(be, nvox, (void **)&h->vol);
	if (rc == 0 && lowres)
		rc = be_host_alloc(be, h->dlow[0] * h->dlow[1] * h->dlow[2] * sizeof(float),
		                   (void **)&h->low);
	if (rc == 0 && full)
		rc = be_host_alloc(be, nvox * sizeof(float), (void **)&h->full);
	if (rc < 0) {
		vr_err(err, errlen, rc, "out of memory for the buffers");
		goto fail;
	}
	/* the file itself first, for a precise errno (HDF5 reports its own stack, not the
	 * cause) */
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	if (fd < 0) {
		rc = vr_err_errno(err, errlen, -errno, "cannot create %s", path);
		goto fail;
	}
	close(fd);
	h->created = true;
	H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
	h->f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
	if (h->f < 0) {
		rc = vr_err(err, errlen, -EIO, "%s: cannot create the HDF5 file", path);
		goto fail;
	}
	h->ds_vol = h5_volumes(h->f, "volumes", H5T_NATIVE_UINT8, n, h->dvol);
	if (lowres)
		h->ds_low = h5_volumes(h->f, "lowres", H5T_NATIVE_FLOAT, n, h->dlow);
	if (full)
		h->ds_full = h5_volumes(h->f, "full", H5T_NATIVE_FLOAT, n, h->dvol);
	if (h->ds_vol < 0 || (lowres && h->ds_low < 0) || (full && h->ds_full < 0)) {
		rc = vr_err(err, errlen, -EIO, "%s: cannot create the datasets", path);
		goto fail;
	}
	h->t0 = vr_mono_s();
	*out = h;
	return 0;
fail:
	proc_h5_remove(h);
	return rc;
}

static int sink_begin(void *ctx, uint64_t epoch, struct be_output *out, char *err, size_t errlen)
{
	struct proc_h5 *h = ctx;

	if (h->done >= h->n)
		return vr_err(err, errlen, -ENOSPC,
		              "%s: epoch %llu is one more than the %llu asked", h->path,
		              (unsigned long long)epoch, (unsigned long long)h->n);
	out->volume = h->vol;
	out->lowres = h->low;
	out->full = h->full;
	out->median_depths = h->md;
	return 0;
}

static int sink_publish(void *ctx, const struct pl_volume *v, char *err, size_t errlen)
{
	struct proc_h5 *h = ctx;
	const uint32_t nx = h->cfg->geometry.ascans_per_bscan;
	const uint32_t ny = h->cfg->geometry.bscans_per_volume;
	uint64_t i = h->done;
	double t;

	/* the thread that publishes may not be the one that created the file: HDF5's error
	 * printing is set per thread (the message says what failed) */
	H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
	if (vr_h5_write_row(h->ds_vol, H5T_NATIVE_UINT8, 3, i, h->dvol, h->vol) < 0 ||
	    (h->low && vr_h5_write_row(h->ds_low, H5T_NATIVE_FLOAT, 3, i, h->dlow, h->low) < 0) ||
	    (h->full &&
	     vr_h5_write_row(h->ds_full, H5T_NATIVE_FLOAT, 3, i, h->dvol, h->full) < 0)) {
		h->broken = true;
		return vr_err(err, errlen, -EIO, "%s: writing volume %llu failed", h->path,
		              (unsigned long long)v->epoch);
	}
	h->epochs[i] = v->epoch;
	h->offsets[2 * i] = v->ox;
	h->offsets[2 * i + 1] = v->oy;
	for (uint32_t b = 0; h->md && b < ny; b++) {
		h->medians[i * ny + b] = h->md[b];
		h->med_sum += h->md[b];
		h->med_max = h->md[b] > h->med_max ? h->md[b] : h->med_max;
	}
	h->done = i + 1;
	t = vr_mono_s();
	if (h->progress && (t - h->tshow > 0.1 || h->done == h->n)) {
		double dt = t - h->t0 > 1e-9 ? t - h->t0 : 1e-9;

		fprintf(stderr, "\rprocess: epoch %llu/%llu  %.2f epochs/s  %.0f A-scans/s  ",
		        (unsigned long long)h->done, (unsigned long long)h->n, h->done / dt,
		        (double)h->done * nx * ny / dt);
		h->tshow = t;
	}
	return 0;
}

static void sink_abort(void *ctx)
{
	(void)ctx; /* the buffers are the sink's own: nothing to give back */
}

void proc_h5_sink(struct proc_h5 *h, struct pl_sink *sink)
{
	sink->ctx = h;
	sink->begin = sink_begin;
	sink->publish = sink_publish;
	sink->abort = sink_abort;
}

uint64_t proc_h5_done(const struct proc_h5 *h)
{
	return h->done;
}

bool proc_h5_median_depths(const struct proc_h5 *h, double *mean, uint32_t *max)
{
	const uint32_t ny = h->cfg->geometry.bscans_per_volume;

	if (!h->md || !h->done)
		return false;
	*mean = (double)h->med_sum / ((double)h->done * ny);
	*max = h->med_max;
	return true;
}

int proc_h5_finish(struct proc_h5 *h, const char *backend, const char *device, char *err,
                   size_t errlen)
{
	const struct vr_config *cfg = h->cfg;
	uint64_t done = h->done;
	hsize_t dn = done, d2[2] = {done, 2};
	uint32_t geo[3] = {cfg->geometry.samples_per_ascan, cfg->geometry.ascans_per_bscan,
	                   cfg->geometry.bscans_per_volume};
	uint32_t depth[2] = {cfg->geometry.depth_range[0], cfg->geometry.depth_range[1]};
	uint32_t shape[3] = {(uint32_t)h->dvol[0], (uint32_t)h->dvol[1], (uint32_t)h->dvol[2]};
	hsize_t dm[2] = {done, cfg->geometry.bscans_per_volume};
	char *yaml;
	bool ok;

	if (h->progress && done)
		fputc('\n', stderr);
	if (h->broken)
		return vr_err(err, errlen, -EIO, "%s: a volume could not be written", h->path);
	if (done < h->n && (h5_shrink(h->ds_vol, done, h->dvol) < 0 ||
	                    (h->low && h5_shrink(h->ds_low, done, h->dlow) < 0) ||
	                    (h->full && h5_shrink(h->ds_full, done, h->dvol) < 0)))
		return vr_err(err, errlen, -EIO, "%s: cannot resize the datasets", h->path);
	/* /epoch u64 [done], /offset u32 [done][2], /median_depths u32 [done][ny] (partial_median) */
	ok = vr_h5_dataset(h->f, "epoch", H5T_NATIVE_UINT64, H5T_NATIVE_UINT64, 1, &dn,
	                   done ? h->epochs : NULL) == 0 &&
	     vr_h5_dataset(h->f, "offset", H5T_NATIVE_UINT32, H5T_NATIVE_UINT32, 2, d2,
	                   done ? h->offsets : NULL) == 0 &&
	     (!h->md || vr_h5_dataset(h->f, "median_depths", H5T_NATIVE_UINT32, H5T_NATIVE_UINT32,
	                              2, dm, done ? h->medians : NULL) == 0);
	yaml = config_yaml(cfg);
	ok = ok && yaml && vr_h5_attr_u32v(h->f, "geometry", geo, 3) == 0 &&
	     vr_h5_attr_u32v(h->f, "stride", cfg->geometry.stride, 2) == 0 &&
	     vr_h5_attr_u32v(h->f, "depth_range", depth, 2) == 0 &&
	     vr_h5_attr_u32v(h->f, "volume_shape", shape, 3) == 0 &&
	     vr_h5_attr_u32(h->f, "zero_pad", cfg->preprocess.zero_pad) == 0 &&
	     vr_h5_attr_u32(h->f, "epochs", (uint32_t)done) == 0 &&
	     vr_h5_attr_str(h->f, "reconstruct_mode", cfg_recon_mode_name(cfg->reconstruct.mode)) ==
	             0 &&
	     vr_h5_attr_str(h->f, "backend", backend) == 0 &&
	     vr_h5_attr_str(h->f, "device", device) == 0 &&
	     vr_h5_attr_str(h->f, "volrec_version", VOLREC_VERSION) == 0 &&
	     vr_h5_attr_str(h->f, "config", yaml) == 0;
	free(yaml);
	if (!ok)
		return vr_err(err, errlen, -EIO, "%s: writing the metadata failed", h->path);
	if (H5Fflush(h->f, H5F_SCOPE_GLOBAL) < 0)
		return vr_err(err, errlen, -EIO, "%s: flush failed", h->path);
	return 0;
}

int proc_h5_close(struct proc_h5 *h)
{
	int rc = 0;

	if (!h)
		return 0;
	VR_H5_CLOSE(h->ds_full, h->ds_low, h->ds_vol);
	if (h->f >= 0 && H5Fclose(h->f) < 0)
		rc = -EIO;
	be_host_free(h->be, h->vol);
	be_host_free(h->be, h->low);
	be_host_free(h->be, h->full);
	be_host_free(h->be, h->md);
	free(h->medians);
	free(h->epochs);
	free(h->offsets);
	free(h);
	return rc;
}

int proc_h5_remove(struct proc_h5 *h)
{
	char path[sizeof(h->path)];
	bool created;

	if (!h)
		return 0;
	created = h->created;
	snprintf(path, sizeof(path), "%s", h->path);
	proc_h5_close(h);
	if (created && unlink(path) < 0 && errno != ENOENT)
		return -errno;
	return 0;
}
