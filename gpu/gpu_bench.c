/* SPDX-License-Identifier: MIT */
/*
 * Copy-bandwidth measurements for the benchmark: pinned H2D and D2H, both directions at
 * once, and D2H into a POSIX shared-memory mapping registered with cudaHostRegister (what the
 * publisher's slots are). These are the physical limits the backend figures are compared to.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "backend/backend.h"
#include "base/base.h"
#include "gpu/gpu.h"

/* Whether /dev/shm has room for bytes more (containers often give it 64 MiB). */
static bool gpu_shm_fits(size_t bytes)
{
	struct statvfs v;

	if (statvfs("/dev/shm", &v) < 0)
		return false;
	return (unsigned long long)v.f_bavail * v.f_frsize >= bytes + (16u << 20);
}

int be_cuda_devices(void)
{
	int n = 0;

	if (cudaGetDeviceCount(&n) != cudaSuccess) {
		cudaGetLastError();
		return 0;
	}
	return n;
}

/* 0 when dev is a present CUDA device, else -ENODEV with the message in err. */
static int gpu_check_device(int dev, char *err, size_t errlen)
{
	const int n = be_cuda_devices();

	if (dev < 0 || dev >= n)
		return vr_err(err, errlen, -ENODEV,
		              "cuda backend: device %d: %d CUDA device(s) present", dev, n);
	return 0;
}

/* Best time in ms of reps rounds of: copies on streams s[0..ns), each of bytes. */
static int gpu_time_copies(int ns, void *const *dst, void *const *src,
                           const enum cudaMemcpyKind *kind, size_t bytes, int reps, cudaStream_t *s,
                           cudaEvent_t *ev, double *best_ms, char *err, size_t errlen)
{
	int rc = 0;
	double best = 1e300;

	for (int r = 0; r < reps + 1; r++) { /* round 0 warms up */
		rc = gpu_cuda_check(cudaEventRecord(ev[0], s[0]), "cudaEventRecord", err, errlen);
		if (rc < 0)
			return rc;
		for (int i = 1; i < ns; i++) {
			rc = gpu_cuda_check(cudaStreamWaitEvent(s[i], ev[0], 0),
			                    "cudaStreamWaitEvent", err, errlen);
			if (rc < 0)
				return rc;
		}
		for (int i = 0; i < ns; i++) {
			rc = gpu_cuda_check(cudaMemcpyAsync(dst[i], src[i], bytes, kind[i], s[i]),
			                    "cudaMemcpyAsync", err, errlen);
			if (rc < 0)
				return rc;
		}
		for (int i = 1; i < ns; i++) {
			rc = gpu_cuda_check(cudaEventRecord(ev[2 + i], s[i]), "cudaEventRecord",
			                    err, errlen);
			if (rc == 0)
				rc = gpu_cuda_check(cudaStreamWaitEvent(s[0], ev[2 + i], 0),
				                    "cudaStreamWaitEvent", err, errlen);
			if (rc < 0)
				return rc;
		}
		rc = gpu_cuda_check(cudaEventRecord(ev[1], s[0]), "cudaEventRecord", err, errlen);
		if (rc == 0)
			rc = gpu_cuda_check(cudaEventSynchronize(ev[1]), "cudaEventSynchronize",
			                    err, errlen);
		if (rc < 0)
			return rc;
		float ms = 0;
		rc = gpu_cuda_check(cudaEventElapsedTime(&ms, ev[0], ev[1]), "cudaEventElapsedTime",
		                    err, errlen);
		if (rc < 0)
			return rc;
		if (r > 0 && ms < best)
			best = ms;
	}
	*best_ms = best;
	return 0;
}

/* GB/s (1e9 bytes) of the best of reps copies of bytes, one way (kind). */
static int gpu_copy_gbs(void *dst, void *src, enum cudaMemcpyKind kind, size_t bytes, int reps,
                        cudaStream_t *s, cudaEvent_t *ev, double *gbs, char *err, size_t errlen)
{
	double ms;
	int rc = gpu_time_copies(1, &dst, &src, &kind, bytes, reps, s, ev, &ms, err, errlen);

	if (rc == 0)
		*gbs = bytes / (ms * 1e6);
	return rc;
}

/* A shared mapping of bytes for the D2H into registered memory, like a publisher slot: a POSIX
 * shm one (its descriptor in *fd), or where /dev/shm is too small for it (containers) an
 * anonymous shared one (*anonymous). *shm stays MAP_FAILED on failure. */
static int gpu_shm_map(size_t bytes, void **shm, int *fd, bool *anonymous, char *err, size_t errlen)
{
	char name[64];
	int rc;

	if (!gpu_shm_fits(bytes)) {
		*shm = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		if (*shm == MAP_FAILED) {
			rc = -errno;
			snprintf(err, errlen, "mmap(MAP_SHARED | MAP_ANONYMOUS, %zu): %s", bytes,
			         strerror(errno));
			return rc;
		}
		*anonymous = true;
	} else {
		snprintf(name, sizeof(name), "/volrec-bench-%ld", (long)getpid());
		*fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
		if (*fd < 0) {
			rc = -errno;
			snprintf(err, errlen, "shm_open(%s): %s", name, strerror(errno));
			return rc;
		}
		shm_unlink(name);
		if (ftruncate(*fd, (off_t)bytes) < 0) {
			rc = -errno;
			snprintf(err, errlen, "ftruncate(shm, %zu): %s", bytes, strerror(errno));
			return rc;
		}
		*shm = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
		if (*shm == MAP_FAILED) {
			rc = -errno;
			snprintf(err, errlen, "mmap(shm, %zu): %s", bytes, strerror(errno));
			return rc;
		}
	}
	return 0;
}

int be_cuda_bandwidth(int dev, size_t bytes, int reps, struct be_bandwidth *bw, char *err,
                      size_t errlen)
{
	void *h0 = NULL, *h1 = NULL, *d0 = NULL, *d1 = NULL, *shm = MAP_FAILED;
	bool registered = false;
	cudaStream_t s[2] = {NULL, NULL};
	cudaEvent_t ev[4] = {NULL, NULL, NULL, NULL};
	int rc, fd = -1;
	double ms;

	if (bytes == 0 || reps < 1) {
		snprintf(err, errlen, "cuda bandwidth: size and repetitions must be positive");
		return -EINVAL;
	}
	rc = gpu_check_device(dev, err, errlen);
	if (rc < 0)
		return rc;
	memset(bw, 0, sizeof(*bw));
	bw->bytes = bytes;
	rc = gpu_cuda_check(cudaSetDevice(dev), "cudaSetDevice", err, errlen);
	if (rc < 0)
		return rc;
	{
		struct cudaDeviceProp prop;
		snprintf(bw->device, sizeof(bw->device), "%s",
		         cudaGetDeviceProperties(&prop, dev) == cudaSuccess ? prop.name
		                                                            : "unknown");
	}
	rc = gpu_cuda_check(cudaHostAlloc(&h0, bytes, cudaHostAllocPortable),
	                    "cudaHostAlloc(bandwidth buffer)", err, errlen);
	if (rc == 0)
		rc = gpu_cuda_check(cudaHostAlloc(&h1, bytes, cudaHostAllocPortable),
		                    "cudaHostAlloc(bandwidth buffer)", err, errlen);
	if (rc == 0)
		rc = gpu_cuda_check(cudaMalloc(&d0, bytes), "cudaMalloc(bandwidth buffer)", err,
		                    errlen);
	if (rc == 0)
		rc = gpu_cuda_check(cudaMalloc(&d1, bytes), "cudaMalloc(bandwidth buffer)", err,
		                    errlen);
	for (int i = 0; rc == 0 && i < 2; i++)
		rc = gpu_cuda_check(cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking),
		                    "cudaStreamCreate", err, errlen);
	for (int i = 0; rc == 0 && i < 4; i++)
		rc = gpu_cuda_check(cudaEventCreate(&ev[i]), "cudaEventCreate", err, errlen);
	if (rc < 0)
		goto out;
	memset(h0, 1, bytes);
	memset(h1, 2, bytes);

	rc = gpu_copy_gbs(d0, h0, cudaMemcpyHostToDevice, bytes, reps, s, ev, &bw->h2d_gbs, err,
	                  errlen);
	if (rc == 0)
		rc = gpu_copy_gbs(h1, d1, cudaMemcpyDeviceToHost, bytes, reps, s, ev, &bw->d2h_gbs,
		                  err, errlen);
	if (rc < 0)
		goto out;
	{
		void *dst[2] = {d0, h1}, *src[2] = {h0, d1};
		enum cudaMemcpyKind k[2] = {cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost};
		rc = gpu_time_copies(2, dst, src, k, bytes, reps, s, ev, &ms, err, errlen);
		if (rc < 0)
			goto out;
		bw->bidir_gbs = bytes / (ms * 1e6); /* each way: both moved `bytes` in ms */
	}

	/* D2H into a registered shared mapping, like a publisher slot */
	rc = gpu_shm_map(bytes, &shm, &fd, &bw->shm_anonymous, err, errlen);
	if (rc < 0)
		goto out;
	memset(shm, 0, bytes); /* fault the pages in */
	rc = gpu_cuda_check(cudaHostRegister(shm, bytes, cudaHostRegisterPortable),
	                    "cudaHostRegister(shm mapping)", err, errlen);
	if (rc < 0)
		goto out;
	registered = true;
	rc = gpu_copy_gbs(shm, d1, cudaMemcpyDeviceToHost, bytes, reps, s, ev, &bw->d2h_shm_gbs,
	                  err, errlen);
out:
	if (registered)
		cudaHostUnregister(shm);
	if (shm != MAP_FAILED)
		munmap(shm, bytes);
	if (fd >= 0)
		close(fd);
	for (int i = 0; i < 4; i++)
		if (ev[i])
			cudaEventDestroy(ev[i]);
	for (int i = 0; i < 2; i++)
		if (s[i])
			cudaStreamDestroy(s[i]);
	cudaFree(d0);
	cudaFree(d1);
	cudaFreeHost(h0);
	cudaFreeHost(h1);
	return rc;
}

/* Seconds of one round: every device's copies queued, then all waited for (host clock). */
static int gpu_links_round(unsigned n, const int *dev, void *const *d2h_dst, void *const *d2h_src,
                           void *const *h2d_dst, void *const *h2d_src, size_t bytes,
                           cudaStream_t *s, double *sec, char *err, size_t errlen)
{
	const double t0 = vr_mono_s();
	int rc = 0;

	for (unsigned k = 0; rc == 0 && k < n; k++) {
		rc = gpu_cuda_check(cudaSetDevice(dev[k]), "cudaSetDevice", err, errlen);
		if (rc == 0)
			rc = gpu_cuda_check(cudaMemcpyAsync(d2h_dst[k], d2h_src[k], bytes,
			                                    cudaMemcpyDeviceToHost, s[2 * k]),
			                    "cudaMemcpyAsync(D2H)", err, errlen);
		if (rc == 0 && h2d_dst)
			rc = gpu_cuda_check(cudaMemcpyAsync(h2d_dst[k], h2d_src[k], bytes,
			                                    cudaMemcpyHostToDevice, s[2 * k + 1]),
			                    "cudaMemcpyAsync(H2D)", err, errlen);
	}
	for (unsigned k = 0; k < n; k++) {
		int r = gpu_cuda_check(cudaStreamSynchronize(s[2 * k]), "cudaStreamSynchronize",
		                       rc ? NULL : err, rc ? 0 : errlen);
		if (r == 0)
			r = gpu_cuda_check(cudaStreamSynchronize(s[2 * k + 1]),
			                   "cudaStreamSynchronize", rc ? NULL : err,
			                   rc ? 0 : errlen);
		if (r < 0 && rc == 0)
			rc = r;
	}
	*sec = vr_mono_s() - t0;
	return rc;
}

int be_cuda_links_bandwidth(const int *devs, unsigned n, size_t bytes, int reps, double *d2h_gbs,
                            double *both_gbs, char *err, size_t errlen)
{
	int dev[CFG_GPU_DEVICES_MAX];
	void *dsrc[CFG_GPU_DEVICES_MAX] = {0}, *ddst[CFG_GPU_DEVICES_MAX] = {0};
	void *hsrc[CFG_GPU_DEVICES_MAX] = {0}, *hdst[CFG_GPU_DEVICES_MAX];
	cudaStream_t s[2 * CFG_GPU_DEVICES_MAX] = {0};
	unsigned m = 0;
	uint8_t *host = MAP_FAILED;
	bool registered = false;
	int rc = 0;

	if (bytes == 0 || reps < 1 || n < 1 || n > CFG_GPU_DEVICES_MAX)
		return vr_err(err, errlen, -EINVAL,
		              "cuda links bandwidth: size, repetitions and devices must be "
		              "positive (at most %d devices)",
		              CFG_GPU_DEVICES_MAX);
	for (unsigned k = 0; k < n; k++) { /* each distinct device once */
		bool seen = false;
		rc = gpu_check_device(devs[k], err, errlen);
		if (rc < 0)
			return rc;
		for (unsigned j = 0; j < m; j++)
			seen |= dev[j] == devs[k];
		if (!seen)
			dev[m++] = devs[k];
	}
	/* one host buffer, a part for each link, as the slot the parts of a volume copy into */
	host = mmap(NULL, m * bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (host == MAP_FAILED)
		return vr_err(err, errlen, -errno, "mmap(MAP_SHARED | MAP_ANONYMOUS, %zu): %s",
		              m * bytes, strerror(errno));
	memset(host, 0, m * bytes);
	rc = gpu_cuda_check(cudaHostRegister(host, m * bytes, cudaHostRegisterPortable),
	                    "cudaHostRegister(links buffer)", err, errlen);
	registered = rc == 0;
	for (unsigned k = 0; rc == 0 && k < m; k++) {
		hdst[k] = host + k * bytes;
		rc = gpu_cuda_check(cudaSetDevice(dev[k]), "cudaSetDevice", err, errlen);
		if (rc == 0)
			rc = gpu_cuda_check(cudaMalloc(&dsrc[k], bytes), "cudaMalloc(links buffer)",
			                    err, errlen);
		if (rc == 0)
			rc = gpu_cuda_check(cudaMalloc(&ddst[k], bytes), "cudaMalloc(links buffer)",
			                    err, errlen);
		if (rc == 0)
			rc = gpu_cuda_check(cudaHostAlloc(&hsrc[k], bytes, cudaHostAllocPortable),
			                    "cudaHostAlloc(links buffer)", err, errlen);
		for (int i = 0; rc == 0 && i < 2; i++)
			rc = gpu_cuda_check(
			        cudaStreamCreateWithFlags(&s[2 * k + i], cudaStreamNonBlocking),
			        "cudaStreamCreate", err, errlen);
		if (rc == 0)
			memset(hsrc[k], 1, bytes);
	}
	double best = 1e300, best2 = 1e300, sec;
	for (int r = 0; rc == 0 && r < reps + 1; r++) { /* round 0 warms up */
		rc = gpu_links_round(m, dev, hdst, dsrc, NULL, NULL, bytes, s, &sec, err, errlen);
		if (rc == 0 && r > 0 && sec < best)
			best = sec;
	}
	for (int r = 0; rc == 0 && r < reps + 1; r++) {
		rc = gpu_links_round(m, dev, hdst, dsrc, ddst, hsrc, bytes, s, &sec, err, errlen);
		if (rc == 0 && r > 0 && sec < best2)
			best2 = sec;
	}
	if (rc == 0) {
		*d2h_gbs = (double)m * bytes / (best * 1e9);
		*both_gbs = (double)m * bytes / (best2 * 1e9);
	}
	for (unsigned k = 0; k < m; k++) {
		if (cudaSetDevice(dev[k]) != cudaSuccess)
			continue;
		for (int i = 0; i < 2; i++)
			if (s[2 * k + i])
				cudaStreamDestroy(s[2 * k + i]);
		cudaFree(dsrc[k]);
		cudaFree(ddst[k]);
		if (hsrc[k])
			cudaFreeHost(hsrc[k]);
	}
	cudaGetLastError();
	if (registered)
		cudaHostUnregister(host);
	munmap(host, m * bytes);
	return rc;
}
