// SPDX-License-Identifier: MIT
/*
 * The views of docs/algorithms.md §4 on the device, from the u8 volume already there: en-face
 * mean/max over the slab and the plane (one warp per A-scan column), and the MIP render (one
 * thread per pixel, samples clipped to the box by be_render_krange), and the reduced volume (one
 * thread per output voxel over its block when one device holds the whole volume; one thread per
 * depth block of an A-scan, combined per block with 64-bit atomics, for a part of the rows; only
 * the small result leaves the device). The B-scan and slice are plain copies out of the volume
 * (gpu_backend.c). cpu/views.c is the reference.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include <volrec/protocol.h>

#include "gpu/gpu.h"

__global__ void k_enface(const uint8_t *__restrict__ V, int Y, int X, int Z, int za, int zb, int z0,
                         uint8_t *mean, uint8_t *mx, uint8_t *plane)
{
	const int lane = threadIdx.x & 31;
	const long long col = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;

	if (col >= (long long)Y * X)
		return;
	const uint8_t *a = V + col * Z;
	unsigned sum = 0, m = 0;
	for (int z = za + lane; z < zb; z += 32) {
		unsigned v = __ldg(a + z);
		sum += v;
		m = v > m ? v : m;
	}
	for (int o = 16; o > 0; o >>= 1) {
		sum += __shfl_down_sync(0xffffffffu, sum, o);
		unsigned t = __shfl_down_sync(0xffffffffu, m, o);
		m = t > m ? t : m;
	}
	if (lane == 0) {
		unsigned n = (unsigned)(zb - za);
		if (mean)
			mean[col] = (uint8_t)((2u * sum + n) / (2u * n));
		if (mx)
			mx[col] = (uint8_t)m;
		if (plane)
			plane[col] = a[z0];
	}
}

__device__ __forceinline__ float vox(const uint8_t *V, int X, int Z, int y, int x, int z)
{
	return (float)__ldg(V + ((long long)y * X + x) * Z + z);
}

/* Samples per thread of the render: a ray's samples are split into chunks of this many, one
 * thread each, so that the few rays that cross a thin, deep volume (the en-face MIP of an
 * OCT volume) do not leave the device to a handful of serial threads. */
#define GPU_RENDER_CHUNK 64

/* The maximum over the samples of chunk blockIdx.z of pixel (i, j), as the bits of a
 * non-negative float (which order like the floats), into acc with atomicMax; only the samples
 * whose interpolation starts at a row in [ry0, ry1) (reading rows ry0 .. ry1). */
__global__ void k_render_chunks(const uint8_t *__restrict__ V, int Y, int X, int Z, int ry0,
                                int ry1, struct be_render_setup r, unsigned *acc)
{
	const int j = blockIdx.x * blockDim.x + threadIdx.x;
	const int i = blockIdx.y * blockDim.y + threadIdx.y;

	if (i >= (int)r.H || j >= (int)r.W)
		return;
	uint32_t k0, k1;
	be_render_krange(&r, (uint32_t)i, (uint32_t)j, &k0, &k1);
	const uint32_t c0 = blockIdx.z * GPU_RENDER_CHUNK, c1 = c0 + GPU_RENDER_CHUNK;
	if (k0 < c0)
		k0 = c0;
	if (k1 > c1)
		k1 = c1;
	if (k0 >= k1)
		return;
	float o[3];
	for (int a = 0; a < 3; a++)
		o[a] = r.forg[a] + ((float)j + 0.5f) * r.fdu[a] + ((float)i + 0.5f) * r.fdv[a];
	float best = -1.0f;
	for (uint32_t k = k0; k < k1; k++) {
		float q[3];
		bool inside = true;
#pragma unroll
		for (int a = 0; a < 3; a++) {
			q[a] = o[a] + ((float)k + 0.5f) * r.fdt[a];
			inside = inside && q[a] >= -1e-4f && q[a] <= r.lim[a] + 1e-4f;
			q[a] = fminf(fmaxf(q[a], 0.0f), r.lim[a]);
		}
		if (!inside)
			continue;
		int x0 = min((int)q[0], X - 1), y0 = min((int)q[1], Y - 1),
		    z0 = min((int)q[2], Z - 1);
		if (y0 < ry0 || y0 >= ry1)
			continue;
		int x1 = min(x0 + 1, X - 1), y1 = min(y0 + 1, Y - 1), z1 = min(z0 + 1, Z - 1);
		float fx = q[0] - x0, fy = q[1] - y0, fz = q[2] - z0;
		float c00 = vox(V, X, Z, y0, x0, z0), c01 = vox(V, X, Z, y0, x1, z0);
		float c10 = vox(V, X, Z, y1, x0, z0), c11 = vox(V, X, Z, y1, x1, z0);
		c00 += (vox(V, X, Z, y0, x0, z1) - c00) * fz;
		c01 += (vox(V, X, Z, y0, x1, z1) - c01) * fz;
		c10 += (vox(V, X, Z, y1, x0, z1) - c10) * fz;
		c11 += (vox(V, X, Z, y1, x1, z1) - c11) * fz;
		c00 += (c01 - c00) * fx;
		c10 += (c11 - c10) * fx;
		float v = c00 + (c10 - c00) * fy;
		best = fmaxf(best, v);
	}
	if (best >= 0.0f)
		atomicMax(&acc[(size_t)i * r.W + j], __float_as_uint(best) + 1u);
}

/* acc holds 1 + the bits of each pixel's maximum, 0 where no sample was inside. */
__global__ void k_render_finish(const unsigned *acc, uint32_t n, uint8_t *out)
{
	const uint32_t p = blockIdx.x * blockDim.x + threadIdx.x;

	if (p >= n)
		return;
	const unsigned a = acc[p];
	out[p] = a ? (uint8_t)floorf(__uint_as_float(a - 1u) + 0.5f) : 0;
}

extern "C" cudaError_t gpu_launch_enface(const uint8_t *V, const struct be_view_params *p,
                                         uint8_t *mean, uint8_t *mx, uint8_t *plane, cudaStream_t s)
{
	const long long cols = (long long)p->Y * p->X;
	const int per_block = 8;

	k_enface<<<(unsigned)((cols + per_block - 1) / per_block), 32 * per_block, 0, s>>>(
	        V, (int)p->Y, (int)p->X, (int)p->Z, (int)p->slab[0], (int)p->slab[1],
	        (int)p->position[2], mean, mx, plane);
	return cudaGetLastError();
}

extern "C" cudaError_t gpu_launch_render(const uint8_t *V, const struct be_view_params *p,
                                         const struct be_render_setup *r, uint32_t ry0,
                                         uint32_t ry1, unsigned *acc, uint8_t *out, cudaStream_t s)
{
	const uint32_t n = r->H * r->W,
	               chunks = (r->nsamples + GPU_RENDER_CHUNK - 1) / GPU_RENDER_CHUNK;
	dim3 block(32, 4), grid((r->W + 31) / 32, (r->H + 3) / 4, chunks ? chunks : 1);
	cudaError_t e = cudaMemsetAsync(acc, 0, (size_t)n * sizeof(unsigned), s);

	if (e != cudaSuccess)
		return e;
	k_render_chunks<<<grid, block, 0, s>>>(V, (int)p->Y, (int)p->X, (int)p->Z, (int)ry0,
	                                       (int)ry1, *r, acc);
	e = cudaGetLastError();
	if (e != cudaSuccess)
		return e;
	k_render_finish<<<(n + 255) / 256, 256, 0, s>>>(acc, n, out);
	return cudaGetLastError();
}

/* Rows [ry0, ry1) of V into the reduced volume's accumulators acc ([Yr][Xr][Zr] words): each
 * thread reduces the depth block zb of one A-scan (consecutive threads read consecutive blocks)
 * and combines it into its block's word, the maximum or the sum. */
__global__ void k_volume_acc(const uint8_t *__restrict__ V, int X, int Z, int ry0, int ry1, int fy,
                             int fx, int fz, int Xr, int Zr, int mean, unsigned long long *acc)
{
	const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	const long long n = (long long)(ry1 - ry0) * X * Zr;

	if (t >= n)
		return;
	const int zb = (int)(t % Zr);
	const long long ax = t / Zr; /* A-scan index from row ry0 on */
	const int x = (int)(ax % X), y = ry0 + (int)(ax / X);
	const uint8_t *a = V + ((long long)y * X + x) * Z;
	const int z0 = zb * fz, z1 = min(z0 + fz, Z);
	unsigned long long v = 0;

	if (mean) {
		for (int z = z0; z < z1; z++)
			v += __ldg(a + z);
	} else {
		for (int z = z0; z < z1; z++) {
			unsigned long long w = __ldg(a + z);
			v = w > v ? w : v;
		}
	}
	unsigned long long *d = acc + ((long long)(y / fy) * Xr + x / fx) * Zr + zb;
	if (mean)
		atomicAdd(d, v);
	else
		atomicMax(d, v);
}

/* The accumulators as u8: the maximum, or the mean over the voxels of each block rounded half
 * up (blocks at the far edges hold fewer). */
__global__ void k_volume_finish(const unsigned long long *acc, int Y, int X, int Z, int fy, int fx,
                                int fz, int Yr, int Xr, int Zr, int mean, uint8_t *out)
{
	const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;

	if (t >= (long long)Yr * Xr * Zr)
		return;
	if (!mean) {
		out[t] = (uint8_t)acc[t];
		return;
	}
	const int zb = (int)(t % Zr), xb = (int)(t / Zr % Xr), yb = (int)(t / Zr / Xr);
	const unsigned long long ny = min(fy, Y - yb * fy), nx = min(fx, X - xb * fx),
	                         nz = min(fz, Z - zb * fz);
	const unsigned long long nn = ny * nx * nz;
	out[t] = (uint8_t)((2 * acc[t] + nn) / (2 * nn));
}

/* The maximum (as a byte) or the sum of the n bytes at a: 16 at a time where a is aligned to
 * 16 (every depth block of a volume whose depth and block are multiples of 16), one at a time
 * otherwise and for the tail. */
__device__ __forceinline__ unsigned volume_block_bytes(const uint8_t *__restrict__ a, int n,
                                                       int mean)
{
	unsigned v = 0, m4 = 0;
	int z = 0;

	if (((size_t)a & 15) == 0) {
		for (; z + 16 <= n; z += 16) {
			const uint4 q = __ldg(reinterpret_cast<const uint4 *>(a + z));

			if (mean)
				v += __vsadu4(q.x, 0) + __vsadu4(q.y, 0) + __vsadu4(q.z, 0) +
				     __vsadu4(q.w, 0);
			else
				m4 = __vmaxu4(m4, __vmaxu4(__vmaxu4(q.x, q.y), __vmaxu4(q.z, q.w)));
		}
		if (!mean) {
			m4 = __vmaxu4(m4, m4 >> 16);
			m4 = __vmaxu4(m4, m4 >> 8);
			v = m4 & 0xffu;
		}
	}
	for (; z < n; z++) {
		const unsigned w = __ldg(a + z);

		v = mean ? v + w : max(v, w);
	}
	return v;
}

/* The whole reduced volume of one device's whole volume: one thread per output voxel (its
 * depth block fastest, so that a warp reads consecutive stretches of one A-scan), over the
 * fy x fx A-scans of its block; no accumulators, no atomics. Equal to k_volume_acc followed by
 * k_volume_finish. */
__global__ void k_volume_direct(const uint8_t *__restrict__ V, int Y, int X, int Z, int fy, int fx,
                                int fz, int Yr, int Xr, int Zr, int mean, uint8_t *out)
{
	const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;

	if (t >= (long long)Yr * Xr * Zr)
		return;
	const int zb = (int)(t % Zr), xb = (int)(t / Zr % Xr), yb = (int)(t / Zr / Xr);
	const int y1 = min((yb + 1) * fy, Y), x1 = min((xb + 1) * fx, X);
	const int z0 = zb * fz, nz = min(fz, Z - z0);
	unsigned long long v = 0;

	for (int y = yb * fy; y < y1; y++)
		for (int x = xb * fx; x < x1; x++) {
			const unsigned w =
			        volume_block_bytes(V + ((long long)y * X + x) * Z + z0, nz, mean);

			v = mean ? v + w : (w > v ? w : v);
		}
	if (!mean) {
		out[t] = (uint8_t)v;
		return;
	}
	const unsigned long long nn =
	        (unsigned long long)(y1 - yb * fy) * (unsigned long long)(x1 - xb * fx) * nz;
	out[t] = (uint8_t)((2 * v + nn) / (2 * nn));
}

extern "C" cudaError_t gpu_launch_volume(const uint8_t *V, const struct be_view_params *p,
                                         uint32_t ry0, uint32_t ry1, unsigned long long *acc,
                                         uint8_t *out, cudaStream_t s)
{
	uint32_t f[3], r[3];
	const int mean = p->volume_reduce == VOLREC_REDUCE_MEAN;

	be_volume_dims(p, f, r);
	const size_t nout = (size_t)r[0] * r[1] * r[2];
	const long long nthr = (long long)(ry1 - ry0) * p->X * r[2];

	if (out && ry0 == 0 && ry1 == p->Y) {
		/* the whole volume on this device: straight to the bytes */
		if (!nout)
			return cudaSuccess;
		k_volume_direct<<<(unsigned)((nout + 255) / 256), 256, 0, s>>>(
		        V, (int)p->Y, (int)p->X, (int)p->Z, (int)f[0], (int)f[1], (int)f[2],
		        (int)r[0], (int)r[1], (int)r[2], mean, out);
		return cudaGetLastError();
	}
	cudaError_t e = cudaMemsetAsync(acc, 0, nout * sizeof(*acc), s);

	if (e != cudaSuccess || !nout)
		return e;
	if (nthr > 0) {
		k_volume_acc<<<(unsigned)((nthr + 255) / 256), 256, 0, s>>>(
		        V, (int)p->X, (int)p->Z, (int)ry0, (int)ry1, (int)f[0], (int)f[1],
		        (int)f[2], (int)r[1], (int)r[2], mean, acc);
		e = cudaGetLastError();
		if (e != cudaSuccess)
			return e;
	}
	if (!out)
		return cudaSuccess;
	k_volume_finish<<<(unsigned)((nout + 255) / 256), 256, 0, s>>>(
	        acc, (int)p->Y, (int)p->X, (int)p->Z, (int)f[0], (int)f[1], (int)f[2], (int)r[0],
	        (int)r[1], (int)r[2], mean, out);
	return cudaGetLastError();
}
