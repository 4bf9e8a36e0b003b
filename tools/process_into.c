/* SPDX-License-Identifier: MIT */
/*
 * `volrec process --frames A:B --warm-up W`: a part of a recording, as `volrec reprocess` runs
 * it. The warm-up volumes (epochs before frame A's) are processed for their history and not
 * written (a filter in front of any sink); with --into, the volumes go straight into time
 * points A..B-1 of an OME-Zarr image that `volrec reprocess` made (fmt_zarr_image_*), each
 * checked against the recording's index: volume t is frame t's epoch.
 */
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/fmt.h"
#include "sources/recording.h"
#include "tools/process.h"

/* ---- the warm-up filter -------------------------------------------------------------------- */

static int warm_begin(void *ctx, uint64_t epoch, struct be_output *out, char *err, size_t errlen)
{
	struct proc_warm *f = ctx;

	return f->inner.begin(f->inner.ctx, epoch, out, err, errlen);
}

static int warm_publish(void *ctx, const struct pl_volume *v, char *err, size_t errlen)
{
	struct proc_warm *f = ctx;

	if (v->epoch < f->start_epoch) {
		f->warm++; /* its output is in the sink's buffers, which the next epoch reuses */
		return 0;
	}
	return f->inner.publish(f->inner.ctx, v, err, errlen);
}

static void warm_abort(void *ctx)
{
	struct proc_warm *f = ctx;

	f->inner.abort(f->inner.ctx);
}

void proc_warm_sink(struct proc_warm *f, struct pl_sink *sink)
{
	sink->ctx = f;
	sink->begin = warm_begin;
	sink->publish = warm_publish;
	sink->abort = warm_abort;
}

/* ---- time points of an OME-Zarr image ------------------------------------------------------ */

void proc_fmt_info(const struct vr_config *cfg, uint64_t nt, struct fmt_info *info)
{
	const bool none = cfg->reconstruct.mode == CFG_RECON_NONE;
	double um[3];

	memset(info, 0, sizeof(*info));
	info->nt = nt;
	info->interval_s = NAN;
	info->shape[0] = cfg->geometry.bscans_per_volume * (none ? 1 : cfg->geometry.stride[1]);
	info->shape[1] = cfg->geometry.ascans_per_bscan * (none ? 1 : cfg->geometry.stride[0]);
	info->shape[2] = cfg_nz(cfg);
	cfg_voxel_um(cfg, um); /* [dx, dy, dz], 0 unknown */
	info->voxel_um[0] = um[1] > 0 ? um[1] : NAN;
	info->voxel_um[1] = um[0] > 0 ? um[0] : NAN;
	info->voxel_um[2] = um[2] > 0 ? um[2] : NAN;
}

/* The CPUs this process may run on (a Slurm task's allocation, taskset), for the compression
 * threads: sysconf's online CPUs would oversubscribe a shared node. */
static unsigned cpus_allowed(void)
{
	cpu_set_t set;
	int n;

	if (sched_getaffinity(0, sizeof(set), &set) < 0)
		return 0; /* the writer's default */
	n = CPU_COUNT(&set);
	return n > 0 ? (unsigned)n : 0;
}

struct proc_into {
	struct be_backend *be;
	struct fmt_writer *w;
	char image[4096];
	uint8_t *vol;
	const struct src_rec_frame *frames; /* the recording's index */
	uint64_t next, end;                 /* the next time point, one past the last */
};

int proc_into_open(const char *image, const struct vr_config *cfg, struct be_backend *be,
                   const struct src_rec_frame *frames, uint64_t nframes, uint64_t first,
                   uint64_t end, enum fmt_codec codec, struct proc_into **out, char *err,
                   size_t errlen)
{
	struct proc_into *p = calloc(1, sizeof(*p));
	struct fmt_info info;
	struct fmt_options opt = {.threads = cpus_allowed(), .codec = codec};
	char staging[64];
	int rc;

	if (!p)
		return vr_err(err, errlen, -ENOMEM, "out of memory");
	p->be = be;
	p->frames = frames;
	p->next = first;
	p->end = end;
	snprintf(p->image, sizeof(p->image), "%s", image);
	proc_fmt_info(cfg, nframes, &info);
	/* one staging folder per part: the parts of an image are written side by side */
	snprintf(staging, sizeof(staging), ".staging-%llu", (unsigned long long)first);
	rc = be_host_alloc(be, cfg_out_voxels(cfg), (void **)&p->vol);
	if (rc < 0) {
		p->vol = NULL;
		rc = vr_err(err, errlen, rc, "out of memory for the volume buffer");
	} else {
		rc = fmt_zarr_image_open(image, &info, &opt, staging, &p->w, err, errlen);
	}
	if (rc < 0) {
		proc_into_close(p, NULL, 0);
		return rc;
	}
	*out = p;
	return 0;
}

static int into_begin(void *ctx, uint64_t epoch, struct be_output *out, char *err, size_t errlen)
{
	struct proc_into *p = ctx;

	(void)err;
	(void)errlen;
	(void)epoch;
	out->volume = p->vol;
	return 0;
}

static int into_publish(void *ctx, const struct pl_volume *v, char *err, size_t errlen)
{
	struct proc_into *p = ctx;

	if (p->next >= p->end)
		return vr_err(err, errlen, -ENOSPC,
		              "%s: epoch %llu is one more than time points %llu..%llu", p->image,
		              (unsigned long long)v->epoch, (unsigned long long)(p->end - 1),
		              (unsigned long long)p->end);
	if (v->epoch != p->frames[p->next].epoch)
		return vr_err(err, errlen, -EPROTO,
		              "%s: time point %llu is recorded epoch %llu, but epoch %llu came "
		              "(an epoch was lost in processing)",
		              p->image, (unsigned long long)p->next,
		              (unsigned long long)p->frames[p->next].epoch,
		              (unsigned long long)v->epoch);
	int rc = fmt_zarr_image_put(p->w, p->next, p->vol, err, errlen);
	if (rc == 0)
		p->next++;
	return rc;
}

static void into_abort(void *ctx)
{
	(void)ctx; /* the buffer is the sink's own */
}

void proc_into_sink(struct proc_into *p, struct pl_sink *sink)
{
	sink->ctx = p;
	sink->begin = into_begin;
	sink->publish = into_publish;
	sink->abort = into_abort;
}

uint64_t proc_into_next(const struct proc_into *p)
{
	return p->next;
}

int proc_into_close(struct proc_into *p, char *err, size_t errlen)
{
	int rc;

	if (!p)
		return 0;
	rc = fmt_zarr_image_close(p->w, err, errlen);
	be_host_free(p->be, p->vol);
	free(p);
	return rc;
}
