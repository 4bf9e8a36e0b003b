// SPDX-License-Identifier: MIT
/*
 * CUDA kernels of the backend and their C-callable launchers: per-B-scan preprocessing
 * (convert, background, resample, window, dispersion, log magnitude into L_e) and the
 * per-epoch VolRec reconstruction (interlace, temporal weights, 3x3x3 kernel, quantization).
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "gpu.h"

#define GPU_THREADS 256

/* S x S temporal weights [qe][phase] and the 4 spatial weights by dx^2 + dy^2 + dz^2. */
__constant__ float c_ttab[GPU_TTAB_MAX];
__constant__ float c_g[4];

/* ---- conversion ------------------------------------------------------------------------ */

template <int ST> struct gpu_sample;
template <> struct gpu_sample<CFG_SAMPLE_U16> {
	typedef uint16_t type;
	static __device__ __forceinline__ float conv(uint16_t v, int sh)
	{
		return (float)(v >> sh);
	}
};
template <> struct gpu_sample<CFG_SAMPLE_I16> {
	typedef int16_t type;
	/* floor(v / 2^sh): arithmetic shift of a signed int. */
	static __device__ __forceinline__ float conv(int16_t v, int sh)
	{
		return (float)((int)v >> sh);
	}
};
template <> struct gpu_sample<CFG_SAMPLE_F32> {
	typedef float type;
	static __device__ __forceinline__ float conv(float v, int sh)
	{
		return v;
	}
};

/* Block-wide sum in double; every thread gets the result. blockDim.x == GPU_THREADS. */
static __device__ double gpu_block_sum(double v, double *sh)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_down_sync(0xffffffffu, v, o);
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	if (lane == 0)
		sh[warp] = v;
	__syncthreads();
	if (warp == 0) {
		v = lane < (GPU_THREADS / 32) ? sh[lane] : 0.0;
		for (int o = 16; o > 0; o >>= 1)
			v += __shfl_down_sync(0xffffffffu, v, o);
		if (lane == 0)
			sh[GPU_THREADS / 32] = v;
	}
	__syncthreads();
	double r = sh[GPU_THREADS / 32];
	__syncthreads();
	return r;
}

/* Write FFT input sample j (< N) of one A-scan: y * window, times exp(-i phi) when complex. */
static __device__ __forceinline__ void gpu_put_fin(void *fin, size_t base, int j, int K, float y,
                                                   const gpu_prep_tables &t, bool cplx)
{
	if (cplx) {
		float2 v = make_float2(0.0f, 0.0f);
		if (j < K)
			v = make_float2(y * t.disp_re[j], y * t.disp_im[j]);
		((float2 *)fin)[base + j] = v;
	} else {
		((float *)fin)[base + j] = j < K ? y * t.window[j] : 0.0f;
	}
}

/* Per-k mean or median over the nx A-scans of one B-scan (converted samples). */
template <int ST>
__global__ void k_colmean(const typename gpu_sample<ST>::type *raw, int K, int nx, int sh,
                          float *col)
{
	const int k = blockIdx.x * blockDim.x + threadIdx.x;
	if (k >= K)
		return;
	double s = 0;
	for (int a = 0; a < nx; a++)
		s += gpu_sample<ST>::conv(raw[(size_t)a * K + k], sh);
	col[k] = (float)(s / nx);
}

/* One block per k: bitonic sort of the column (padded with +inf to n2) in shared memory. */
template <int ST>
__global__ void k_colmedian(const typename gpu_sample<ST>::type *raw, int K, int nx, int n2, int sh,
                            float *col)
{
	extern __shared__ float sv[];
	const int k = blockIdx.x;
	for (int a = threadIdx.x; a < n2; a += blockDim.x)
		sv[a] = a < nx ? gpu_sample<ST>::conv(raw[(size_t)a * K + k], sh) : INFINITY;
	__syncthreads();
	for (int size = 2; size <= n2; size <<= 1) {
		for (int stride = size >> 1; stride > 0; stride >>= 1) {
			for (int i = threadIdx.x; i < (n2 >> 1); i += blockDim.x) {
				int lo = 2 * stride * (i / stride) + (i % stride), hi = lo + stride;
				bool asc = (lo & size) == 0;
				float x = sv[lo], y = sv[hi];
				if ((x > y) == asc) {
					sv[lo] = y;
					sv[hi] = x;
				}
			}
			__syncthreads();
		}
	}
	if (threadIdx.x == 0)
		col[k] = 0.5f * (sv[(nx - 1) / 2] + sv[nx / 2]);
}

/*
 * One block per A-scan: convert, subtract the background (ascan_mean by a block reduction in
 * double), then either store conv[a][k] (resampling follows) or, without resampling, write
 * the windowed, dispersion-compensated, zero-padded FFT input directly.
 */
template <int ST, bool DIRECT>
__global__ void k_convert(gpu_prep_params p, gpu_prep_tables t,
                          const typename gpu_sample<ST>::type *raw, const float *col, float *conv,
                          void *fin)
{
	__shared__ double red[GPU_THREADS / 32 + 1];
	const int a = blockIdx.x, K = p.K;
	const typename gpu_sample<ST>::type *row = raw + (size_t)a * K;
	float mean = 0.0f;

	if (p.background == CFG_BG_ASCAN_MEAN) {
		double s = 0;
		for (int k = threadIdx.x; k < K; k += blockDim.x)
			s += gpu_sample<ST>::conv(row[k], p.bit_shift);
		mean = (float)(gpu_block_sum(s, red) / K);
	}
	if (DIRECT) {
		const size_t base = (size_t)a * p.N;
		for (int j = threadIdx.x; j < p.N; j += blockDim.x) {
			float x = 0.0f;
			if (j < K) {
				x = gpu_sample<ST>::conv(row[j], p.bit_shift);
				if (p.background == CFG_BG_ASCAN_MEAN)
					x -= mean;
				else if (p.background == CFG_BG_BSCAN_MEAN ||
				         p.background == CFG_BG_BSCAN_MEDIAN)
					x -= col[j];
				else if (p.background == CFG_BG_REFERENCE)
					x -= t.reference[j];
			}
			gpu_put_fin(fin, base, j, K, x, t, p.complex_in);
		}
	} else {
		float *out = conv + (size_t)a * K;
		for (int k = threadIdx.x; k < K; k += blockDim.x) {
			float x = gpu_sample<ST>::conv(row[k], p.bit_shift);
			if (p.background == CFG_BG_ASCAN_MEAN)
				x -= mean;
			else if (p.background == CFG_BG_BSCAN_MEAN ||
			         p.background == CFG_BG_BSCAN_MEDIAN)
				x -= col[k];
			else if (p.background == CFG_BG_REFERENCE)
				x -= t.reference[k];
			out[k] = x;
		}
	}
}

/* Grid (ceil(N / threads), nx): gather the resampled value of output j, then window etc. */
__global__ void k_resample(gpu_prep_params p, gpu_prep_tables t, const float *conv, void *fin)
{
	const int j = blockIdx.x * blockDim.x + threadIdx.x, a = blockIdx.y, K = p.K;
	if (j >= p.N)
		return;
	float y = 0.0f;
	if (j < K) {
		const float *x = conv + (size_t)a * K;
		const int i0 = t.rs_idx[j];
		for (int m = 0; m < p.taps; m++) {
			int i = min(max(i0 + m, 0), K - 1);
			y = fmaf(t.rs_w[(size_t)m * K + j], __ldg(&x[i]), y);
		}
	}
	gpu_put_fin(fin, (size_t)a * p.N, j, K, y, t, p.complex_in);
}

/* Grid (ceil(nz / threads), nx): |X|, dB, normalize, flip z, crop, into L_e's B-scan row. */
__global__ void k_logmag(gpu_prep_params p, const float2 *spec, int ld, bool reverse_x,
                         float *lerow)
{
	const int z = blockIdx.x * blockDim.x + threadIdx.x, a = blockIdx.y;
	if (z >= p.nz)
		return;
	const int zz = p.z0 + z, bin = p.flip_z ? p.half - 1 - zz : zz;
	const float2 c = spec[(size_t)a * ld + bin];
	const float m = sqrtf(c.x * c.x + c.y * c.y);
	const float d = 20.0f * log10f(m + 1e-12f);
	const float v = fminf(fmaxf((d - p.db_lo) * p.db_inv, 0.0f), 1.0f);
	const int xo = reverse_x ? p.nx - 1 - a : a;
	lerow[(size_t)xo * p.nz + z] = v;
}

/* ---- reconstruction ---------------------------------------------------------------------- */

/* Grid-stride over ny*nx*nz: B[y*sy+oy][x*sx+ox][z] = L_e[y][x][z]; E there = epoch. */
__global__ void k_interlace(gpu_recon_params p, const float *le, float *B, long long *E)
{
	const size_t total = (size_t)p.ny * p.nx * p.nz;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
	     i += (size_t)gridDim.x * blockDim.x) {
		const size_t col = i / p.nz; /* y * nx + x */
		const int z = (int)(i - col * p.nz);
		const int y = (int)(col / p.nx), x = (int)(col - (size_t)y * p.nx);
		const size_t Yf = (size_t)y * p.sy + p.oy, Xf = (size_t)x * p.sx + p.ox;
		const size_t dst = Yf * p.X + Xf;
		B[dst * p.nz + z] = le[i];
		if (z == 0)
			E[dst] = p.epoch;
	}
}

/* Temporal weight of age a, in double and rounded once, as the host table and the CPU do. */
static __device__ __forceinline__ float gpu_temporal(const gpu_recon_params &p, long long age)
{
	if (p.temporal == CFG_TEMPORAL_EXP)
		return (float)exp(-(double)age / p.tau);
	return (float)(fmax((double)p.S - (double)age, 0.0) / (double)p.S);
}

__global__ void k_tmap(gpu_recon_params p, const long long *E, float *tmap)
{
	const size_t n = (size_t)p.Y * p.X;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		const long long e = E[i];
		tmap[i] = e < 0 ? 0.0f : gpu_temporal(p, p.epoch - e);
	}
}

#define GPU_RECON_THREADS 128 /* threads per block along z */
#define GPU_RECON_XRUN    16  /* output columns along X per thread (register reuse) */

/* Column (yy, xx) of B around depth z: v = B[z-1], B[z], B[z+1] (0 outside [0, Z)) and its
 * temporal weight t; t = 0 for a column outside the volume, which is skipped like any column
 * whose weight is not > 0. */
template <bool FAST>
static __device__ __forceinline__ void
gpu_col_load(const gpu_recon_params &p, const float *__restrict__ B, const float *__restrict__ tmap,
             int yy, int xx, int z, float *v, float &t)
{
	v[0] = v[1] = v[2] = 0.0f;
	t = 0.0f;
	if (yy < 0 || yy >= p.Y || xx < 0 || xx >= p.X)
		return;
	if (FAST)
		t = c_ttab[p.qe * p.S + (yy % p.sy) * p.sx + (xx % p.sx)];
	else
		t = __ldg(&tmap[(size_t)yy * p.X + xx]);
	if (!(t > 0.0f))
		return;
	const float *col = B + ((size_t)yy * p.X + xx) * p.nz;
	if (z > 0)
		v[0] = __ldg(&col[z - 1]);
	v[1] = __ldg(&col[z]);
	if (z + 1 < p.nz)
		v[2] = __ldg(&col[z + 1]);
}

/*
 * Grid (ceil(Z / threads), rows, ceil(X / xrun)): thread z of block (., Yi - y0, c) computes
 * the voxels (Yi, Xi, z) for Xi in [c * xrun, min((c + 1) * xrun, X)), sliding a 3 x 3 window
 * of columns along X in registers so that each column of B is read once per row of the
 * window instead of three times. z is fastest so that a warp reads contiguous memory. The
 * arithmetic per voxel (order of the sums over dy, dx, dz, skipped neighbours) is that of the
 * CPU reference: valid neighbours lie inside the volume and have t > 0.
 */
template <bool FAST, bool PRODUCT>
__global__ void __launch_bounds__(GPU_RECON_THREADS)
        k_recon(gpu_recon_params p, const float *__restrict__ B, const float *__restrict__ tmap,
                int y0, int xrun, uint8_t *__restrict__ out8, float *__restrict__ outf)
{
	const int z = blockIdx.x * blockDim.x + threadIdx.x;
	const int Yi = y0 + (int)blockIdx.y;
	const int xa = (int)blockIdx.z * xrun;
	const int xb = min(xa + xrun, p.X);
	const int Z = p.nz;
	if (z >= Z)
		return;
	float v[3][3][3]; /* [dy + 1][column Xi - 1, Xi, Xi + 1][dz + 1] */
	float t[3][3];
#pragma unroll
	for (int r = 0; r < 3; r++) {
		gpu_col_load<FAST>(p, B, tmap, Yi + r - 1, xa - 1, z, v[r][0], t[r][0]);
		gpu_col_load<FAST>(p, B, tmap, Yi + r - 1, xa, z, v[r][1], t[r][1]);
	}
	for (int Xi = xa; Xi < xb; Xi++) {
#pragma unroll
		for (int r = 0; r < 3; r++)
			gpu_col_load<FAST>(p, B, tmap, Yi + r - 1, Xi + 1, z, v[r][2], t[r][2]);
		float sgb = 0.0f, sg = 0.0f, stb = 0.0f, st = 0.0f;
#pragma unroll
		for (int r = 0; r < 3; r++) {
#pragma unroll
			for (int k = 0; k < 3; k++) {
				const float tt = t[r][k];
				if (!(tt > 0.0f))
					continue;
				const int d2 = (r - 1) * (r - 1) + (k - 1) * (k - 1);
				float cb = 0.0f, cg = 0.0f, cbb = 0.0f, cn = 0.0f;
#pragma unroll
				for (int q = 0; q < 3; q++) {
					const int zz = z + q - 1;
					if (zz < 0 || zz >= Z)
						continue;
					const float b = v[r][k][q], g = c_g[d2 + (q - 1) * (q - 1)];
					cb = fmaf(g, b, cb);
					cg += g;
					cbb += b;
					cn += 1.0f;
				}
				if (PRODUCT) {
					sgb = fmaf(tt, cb, sgb);
					sg = fmaf(tt, cg, sg);
				} else {
					sgb += cb;
					sg += cg;
					stb = fmaf(tt, cbb, stb);
					st = fmaf(tt, cn, st);
				}
			}
		}
		float o = 0.0f;
		if (sg > 0.0f)
			o = PRODUCT ? sgb / sg : 0.5f * (sgb / sg + stb / st);
		const size_t i = ((size_t)Yi * p.X + Xi) * Z + z;
		out8[i] = (uint8_t)fminf(fmaxf(floorf(255.0f * o + 0.5f), 0.0f), 255.0f);
		if (outf)
			outf[i] = o;
#pragma unroll
		for (int r = 0; r < 3; r++) {
#pragma unroll
			for (int q = 0; q < 3; q++) {
				v[r][0][q] = v[r][1][q];
				v[r][1][q] = v[r][2][q];
			}
			t[r][0] = t[r][1];
			t[r][1] = t[r][2];
		}
	}
}

__global__ void k_quantize(const float *in, uint8_t *out, size_t n)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		out[i] = (uint8_t)fminf(fmaxf(floorf(255.0f * in[i] + 0.5f), 0.0f), 255.0f);
}

/* ---- launchers ----------------------------------------------------------------------------- */

static unsigned gpu_blocks(size_t n)
{
	size_t b = (n + GPU_THREADS - 1) / GPU_THREADS;
	return (unsigned)(b > 65536 ? 65536 : (b ? b : 1));
}

extern "C" cudaError_t gpu_launch_colstat(const gpu_prep_params *p, const void *raw, float *col,
                                          cudaStream_t s)
{
	if (p->background == CFG_BG_BSCAN_MEAN) {
		dim3 g((p->K + GPU_THREADS - 1) / GPU_THREADS);
		switch (p->sample_type) {
		case CFG_SAMPLE_U16:
			k_colmean<CFG_SAMPLE_U16><<<g, GPU_THREADS, 0, s>>>(
			        (const uint16_t *)raw, p->K, p->nx, p->bit_shift, col);
			break;
		case CFG_SAMPLE_I16:
			k_colmean<CFG_SAMPLE_I16><<<g, GPU_THREADS, 0, s>>>(
			        (const int16_t *)raw, p->K, p->nx, p->bit_shift, col);
			break;
		default:
			k_colmean<CFG_SAMPLE_F32><<<g, GPU_THREADS, 0, s>>>(
			        (const float *)raw, p->K, p->nx, p->bit_shift, col);
			break;
		}
		return cudaGetLastError();
	}
	int n2 = 1;
	while (n2 < p->nx)
		n2 <<= 1;
	const int threads = n2 / 2 < 32 ? 32 : (n2 / 2 > 1024 ? 1024 : n2 / 2);
	const size_t shm = sizeof(float) * (size_t)n2;
	switch (p->sample_type) {
	case CFG_SAMPLE_U16:
		k_colmedian<CFG_SAMPLE_U16><<<p->K, threads, shm, s>>>(
		        (const uint16_t *)raw, p->K, p->nx, n2, p->bit_shift, col);
		break;
	case CFG_SAMPLE_I16:
		k_colmedian<CFG_SAMPLE_I16><<<p->K, threads, shm, s>>>(
		        (const int16_t *)raw, p->K, p->nx, n2, p->bit_shift, col);
		break;
	default:
		k_colmedian<CFG_SAMPLE_F32><<<p->K, threads, shm, s>>>(
		        (const float *)raw, p->K, p->nx, n2, p->bit_shift, col);
		break;
	}
	return cudaGetLastError();
}

template <bool DIRECT>
static void gpu_convert_t(const gpu_prep_params *p, const gpu_prep_tables *t, const void *raw,
                          const float *col, float *conv, void *fin, cudaStream_t s)
{
	switch (p->sample_type) {
	case CFG_SAMPLE_U16:
		k_convert<CFG_SAMPLE_U16, DIRECT><<<p->nx, GPU_THREADS, 0, s>>>(
		        *p, *t, (const uint16_t *)raw, col, conv, fin);
		break;
	case CFG_SAMPLE_I16:
		k_convert<CFG_SAMPLE_I16, DIRECT><<<p->nx, GPU_THREADS, 0, s>>>(
		        *p, *t, (const int16_t *)raw, col, conv, fin);
		break;
	default:
		k_convert<CFG_SAMPLE_F32, DIRECT>
		        <<<p->nx, GPU_THREADS, 0, s>>>(*p, *t, (const float *)raw, col, conv, fin);
		break;
	}
}

extern "C" cudaError_t gpu_launch_convert(const gpu_prep_params *p, const gpu_prep_tables *t,
                                          const void *raw, const float *col, float *conv, void *fin,
                                          cudaStream_t s)
{
	if (p->taps == 0)
		gpu_convert_t<true>(p, t, raw, col, conv, fin, s);
	else
		gpu_convert_t<false>(p, t, raw, col, conv, fin, s);
	return cudaGetLastError();
}

extern "C" cudaError_t gpu_launch_resample(const gpu_prep_params *p, const gpu_prep_tables *t,
                                           const float *conv, void *fin, cudaStream_t s)
{
	dim3 g((p->N + GPU_THREADS - 1) / GPU_THREADS, p->nx);
	k_resample<<<g, GPU_THREADS, 0, s>>>(*p, *t, conv, fin);
	return cudaGetLastError();
}

extern "C" cudaError_t gpu_launch_logmag(const gpu_prep_params *p, const float2 *spec, int ld,
                                         bool reverse_x, float *lerow, cudaStream_t s)
{
	dim3 g((p->nz + GPU_THREADS - 1) / GPU_THREADS, p->nx);
	k_logmag<<<g, GPU_THREADS, 0, s>>>(*p, spec, ld, reverse_x, lerow);
	return cudaGetLastError();
}

extern "C" cudaError_t gpu_launch_interlace(const gpu_recon_params *p, const float *le, float *B,
                                            long long *E, cudaStream_t s)
{
	k_interlace<<<gpu_blocks((size_t)p->ny * p->nx * p->nz), GPU_THREADS, 0, s>>>(*p, le, B, E);
	return cudaGetLastError();
}

extern "C" cudaError_t gpu_launch_tmap(const gpu_recon_params *p, const long long *E, float *tmap,
                                       cudaStream_t s)
{
	k_tmap<<<gpu_blocks((size_t)p->Y * p->X), GPU_THREADS, 0, s>>>(*p, E, tmap);
	return cudaGetLastError();
}

extern "C" cudaError_t gpu_upload_constants(const float *ttab, size_t n, const float g[4],
                                            cudaStream_t s)
{
	cudaError_t e = cudaSuccess;
	if (n > GPU_TTAB_MAX)
		return cudaErrorInvalidValue;
	if (n)
		e = cudaMemcpyToSymbolAsync(c_ttab, ttab, n * sizeof(float), 0,
		                            cudaMemcpyHostToDevice, s);
	if (e == cudaSuccess)
		e = cudaMemcpyToSymbolAsync(c_g, g, 4 * sizeof(float), 0, cudaMemcpyHostToDevice,
		                            s);
	return e;
}

extern "C" cudaError_t gpu_launch_recon(const gpu_recon_params *p, const float *B,
                                        const float *tmap, int y0, int y1, uint8_t *out8,
                                        float *outf, cudaStream_t s)
{
	if (y1 <= y0 || p->X < 1 || p->nz < 1)
		return cudaSuccess;
	if (y1 - y0 > 65535)
		return cudaErrorInvalidValue;
	/* columns per thread: GPU_RECON_XRUN, more where X would need over 65535 blocks */
	int xrun = GPU_RECON_XRUN;
	if ((p->X + xrun - 1) / xrun > 65535)
		xrun = (p->X + 65534) / 65535;
	const unsigned zb = (unsigned)((p->nz + GPU_RECON_THREADS - 1) / GPU_RECON_THREADS);
	const dim3 g(zb, (unsigned)(y1 - y0), (unsigned)((p->X + xrun - 1) / xrun));
	if (p->fast) {
		if (p->product)
			k_recon<true, true>
			        <<<g, GPU_RECON_THREADS, 0, s>>>(*p, B, tmap, y0, xrun, out8, outf);
		else
			k_recon<true, false>
			        <<<g, GPU_RECON_THREADS, 0, s>>>(*p, B, tmap, y0, xrun, out8, outf);
	} else {
		if (p->product)
			k_recon<false, true>
			        <<<g, GPU_RECON_THREADS, 0, s>>>(*p, B, tmap, y0, xrun, out8, outf);
		else
			k_recon<false, false>
			        <<<g, GPU_RECON_THREADS, 0, s>>>(*p, B, tmap, y0, xrun, out8, outf);
	}
	return cudaGetLastError();
}

extern "C" cudaError_t gpu_launch_quantize(const float *in, uint8_t *out, size_t n, cudaStream_t s)
{
	k_quantize<<<gpu_blocks(n), GPU_THREADS, 0, s>>>(in, out, n);
	return cudaGetLastError();
}
