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
