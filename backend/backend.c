/* SPDX-License-Identifier: MIT */
/*
 * Backend selection: `cpu`, `cuda`, or `auto` (CUDA when compiled in and a usable device
 * exists, else the CPU with a note saying why).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

bool be_have_cuda(void)
{
#ifdef VOLREC_HAVE_CUDA
	return true;
#else
	return false;
#endif
}

static int be_try(const struct be_ops *ops, const struct vr_config *cfg, struct be_backend **out,
                  char *err, size_t errlen)
{
	struct be_backend *be = calloc(1, sizeof(*be));
	int rc;

	if (!be) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	be->ops = ops;
	rc = ops->create(cfg, &be->state, err, errlen);
	if (rc < 0) {
		free(be);
		return rc;
	}
	*out = be;
	return 0;
}

int be_open(const struct vr_config *cfg, struct be_backend **out, char *note, size_t notelen,
            char *err, size_t errlen)
{
	if (note && notelen)
		note[0] = '\0';
	switch (cfg->backend) {
	case CFG_BACKEND_CPU:
		return be_try(&be_cpu_ops, cfg, out, err, errlen);
	case CFG_BACKEND_CUDA:
#ifdef VOLREC_HAVE_CUDA
		return be_try(&be_cuda_ops, cfg, out, err, errlen);
#else
		snprintf(err, errlen,
		         "backend: cuda: this volrec was built without CUDA (use cpu or auto)");
		return -ENOTSUP;
#endif
	case CFG_BACKEND_AUTO:
	default: {
#ifdef VOLREC_HAVE_CUDA
		char why[512];
		int rc = be_try(&be_cuda_ops, cfg, out, why, sizeof(why));
		if (rc == 0)
			return 0;
		if (note && notelen)
			snprintf(note, notelen,
			         "CUDA backend unavailable (%s): using the CPU backend", why);
#else
		if (note && notelen)
			snprintf(note, notelen, "built without CUDA: using the CPU backend");
#endif
		return be_try(&be_cpu_ops, cfg, out, err, errlen);
	}
	}
}

void be_close(struct be_backend *be)
{
	if (!be)
		return;
	if (be->ops && be->state)
		be->ops->destroy(be->state);
	free(be);
}

int be_epoch_finish_async(struct be_backend *be, uint64_t epoch, const struct be_output *out,
                          char *err, size_t errlen)
{
	int rc;

	if (be->ops->epoch_finish_async && be->ops->epoch_wait)
		return be->ops->epoch_finish_async(be->state, epoch, out, err, errlen);
	if (be->sync_pending) {
		snprintf(err, errlen,
		         "%s backend: epoch %llu finished before epoch_wait(%llu) (one epoch in "
		         "flight)",
		         be->ops->name, (unsigned long long)epoch,
		         (unsigned long long)be->sync_epoch);
		return -EBUSY;
	}
	rc = be->ops->epoch_finish(be->state, epoch, out, err, errlen);
	if (rc == 0) {
		be->sync_pending = true;
		be->sync_epoch = epoch;
	}
	return rc;
}

int be_epoch_wait(struct be_backend *be, uint64_t epoch, char *err, size_t errlen)
{
	if (be->ops->epoch_finish_async && be->ops->epoch_wait)
		return be->ops->epoch_wait(be->state, epoch, err, errlen);
	if (!be->sync_pending || be->sync_epoch != epoch) {
		if (be->sync_pending)
			snprintf(err, errlen,
			         "%s backend: epoch_wait(%llu), but epoch %llu is in flight",
			         be->ops->name, (unsigned long long)epoch,
			         (unsigned long long)be->sync_epoch);
		else
			snprintf(err, errlen,
			         "%s backend: epoch_wait(%llu) with no epoch in flight",
			         be->ops->name, (unsigned long long)epoch);
		return -EINVAL;
	}
	be->sync_pending = false;
	return 0;
}

unsigned be_caps(const struct be_backend *be)
{
	unsigned caps = 0;

	if (be->ops->epoch_finish_async && be->ops->epoch_wait)
		caps |= BE_CAP_ASYNC;
	if (strcmp(be->ops->name, "cpu") != 0)
		caps |= BE_CAP_DEVICE | BE_CAP_REGISTER;
	return caps;
}

const char *be_name(const struct be_backend *be)
{
	return be->ops->name;
}

const char *be_device(const struct be_backend *be)
{
	return be->ops->device(be->state);
}

int be_host_alloc(struct be_backend *be, size_t size, void **ptr)
{
	return be->ops->host_alloc(be->state, size, ptr);
}

void be_host_free(struct be_backend *be, void *ptr)
{
	be->ops->host_free(be->state, ptr);
}

int be_host_register(struct be_backend *be, void *ptr, size_t size)
{
	return be->ops->host_register(be->state, ptr, size);
}

void be_host_unregister(struct be_backend *be, void *ptr)
{
	be->ops->host_unregister(be->state, ptr);
}

int be_bscan_submit(struct be_backend *be, uint64_t epoch, uint32_t bscan, const void *raw)
{
	return be->ops->bscan_submit(be->state, epoch, bscan, raw);
}

int be_epoch_finish(struct be_backend *be, uint64_t epoch, const struct be_output *out, char *err,
                    size_t errlen)
{
	return be->ops->epoch_finish(be->state, epoch, out, err, errlen);
}

int be_update_live(struct be_backend *be, const struct vr_config *cfg, char *err, size_t errlen)
{
	return be->ops->update_live(be->state, cfg, err, errlen);
}

void be_reset_history(struct be_backend *be)
{
	be->ops->reset_history(be->state);
}
