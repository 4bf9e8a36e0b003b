/* SPDX-License-Identifier: MIT */
/*
 * Backend selection, the one part above cpu/ and gpu/ (its own archive, beopen): `cpu`,
 * `cuda`, or `auto` (CUDA when compiled in and a usable device exists, else the CPU with a
 * note saying why; CUDA over several devices when gpu.devices names more than one). In a build
 * without CUDA it also answers the CUDA queries of backend.h (gpu/gpu_bench.c otherwise).
 */
#include <errno.h>
#include <stdio.h>

#include "backend/ops.h"

#ifdef VOLREC_HAVE_CUDA
/* One device's backend, or the composite when gpu.devices names several. */
static const struct be_ops *be_cuda_table(const struct vr_config *cfg)
{
	int devs[CFG_GPU_DEVICES_MAX];
	return cfg_gpu_devices(cfg, devs) > 1 ? &be_cuda_multi_ops : &be_cuda_ops;
}
#endif

int be_open(const struct vr_config *cfg, struct be_backend **out, char *note, size_t notelen,
            char *err, size_t errlen)
{
	if (note && notelen)
		note[0] = '\0';
	switch (cfg->backend) {
	case CFG_BACKEND_CPU:
		return be_create(&be_cpu_ops, cfg, out, err, errlen);
	case CFG_BACKEND_CUDA:
#ifdef VOLREC_HAVE_CUDA
		return be_create(be_cuda_table(cfg), cfg, out, err, errlen);
#else
		return vr_err(err, errlen, -ENOTSUP,
		              "cuda backend: this volrec was built without CUDA (use cpu or auto)");
#endif
	case CFG_BACKEND_AUTO:
	default: {
#ifdef VOLREC_HAVE_CUDA
		char why[512];
		int rc = be_create(be_cuda_table(cfg), cfg, out, why, sizeof(why));
		if (rc == 0)
			return 0;
		if (note && notelen)
			snprintf(note, notelen, "%s; using the CPU backend", why);
#else
		if (note && notelen)
			snprintf(note, notelen, "built without CUDA: using the CPU backend");
#endif
		return be_create(&be_cpu_ops, cfg, out, err, errlen);
	}
	}
}

#ifndef VOLREC_HAVE_CUDA
/* Without CUDA: no devices; gpu/gpu_bench.c defines these in a CUDA build. */
int be_cuda_devices(void)
{
	return 0;
}

int be_cuda_bandwidth(int dev, size_t bytes, int reps, struct be_bandwidth *bw, char *err,
                      size_t errlen)
{
	return vr_err(err, errlen, -ENOTSUP,
	              "cuda backend: this volrec was built without CUDA (use cpu or auto)");
}

int be_cuda_links_bandwidth(const int *devs, unsigned n, size_t bytes, int reps, double *d2h_gbs,
                            double *both_gbs, char *err, size_t errlen)
{
	return be_cuda_bandwidth(0, bytes, reps, NULL, err, errlen);
}
#endif
