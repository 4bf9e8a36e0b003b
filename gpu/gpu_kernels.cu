// SPDX-License-Identifier: MIT
/*
 * CUDA kernels of the backend and their C-callable launchers: per-B-scan preprocessing
 * (convert, background, resample, window, dispersion, log magnitude into L_e) and the
 * per-epoch VolRec reconstruction (interlace, temporal weights, 3x3x3 kernel, quantization).
 */
#include <climits>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <type_traits>

#include "backend/functional.h"
#include "backend/jump.h"
#include "backend/tables.h" /* BE_ADAPT_UNKNOWN */
#include "gpu/gpu.h"

#define GPU_THREADS 256

/* S x S temporal weights [qe][phase] and the 4 spatial weights by dx^2 + dy^2 + dz^2. */
__constant__ float c_ttab[GPU_TTAB_MAX];
__constant__ float c_g[4];

/* ---- conversion ------------------------------------------------------------------------ */

/*
 * gpu_sample<ST>: the raw sample type ST as the kernels read it. `type` is what a raw pointer
 * points at, row(a, K) the offset of A-scan a in units of `type`, at(row, k, sh) converted
 * sample k of a row (integers divided by 2^sh, floor). The packed 12-bit types (docs/algorithms.md
 * §0) are bytes, unpacked here: the host-to-device copy carries 1.5 bytes per sample.
 */
template <int ST> struct gpu_sample;
template <typename T, typename C> struct gpu_plain {
	typedef T type;
	static constexpr bool packed = false;
	static __device__ __forceinline__ size_t row(int a, int K)
	{
		return (size_t)a * K;
	}
	static __device__ __forceinline__ float at(const T *r, int k, int sh)
	{
		return C::conv(r[k], sh);
	}
};
template <> struct gpu_sample<CFG_SAMPLE_U16> : gpu_plain<uint16_t, gpu_sample<CFG_SAMPLE_U16>> {
	static __device__ __forceinline__ float conv(uint16_t v, int sh)
	{
		return (float)(v >> sh);
	}
};
template <> struct gpu_sample<CFG_SAMPLE_I16> : gpu_plain<int16_t, gpu_sample<CFG_SAMPLE_I16>> {
	/* floor(v / 2^sh): arithmetic shift of a signed int. */
	static __device__ __forceinline__ float conv(int16_t v, int sh)
	{
		return (float)((int)v >> sh);
	}
};
template <> struct gpu_sample<CFG_SAMPLE_F32> : gpu_plain<float, gpu_sample<CFG_SAMPLE_F32>> {
	static __device__ __forceinline__ float conv(float v, int sh)
	{
		return v;
	}
};

/* The pair of 12-bit samples in bytes b0 b1 b2: Mono12p (LSB first) or Mono12Packed (GV). */
template <bool GV>
static __device__ __forceinline__ void gpu_unpack12(uint32_t b0, uint32_t b1, uint32_t b2,
                                                    uint32_t &s0, uint32_t &s1)
{
	if (GV) {
		s0 = b0 << 4 | (b1 & 0xfu);
		s1 = b2 << 4 | b1 >> 4;
	} else {
		s0 = b0 | (b1 & 0xfu) << 8;
		s1 = b1 >> 4 | b2 << 4;
	}
}

template <bool GV> struct gpu_packed12 {
	typedef uint8_t type;
	static constexpr bool packed = true;
	static constexpr bool gv = GV;
	static __device__ __forceinline__ size_t row(int a, int K)
	{
		return (size_t)a * (size_t)(K / 2) * 3; /* K is even */
	}
	static __device__ __forceinline__ float at(const uint8_t *r, int k, int sh)
	{
		const uint8_t *q = r + (size_t)(k >> 1) * 3;
		uint32_t v;
		if (k & 1)
			v = GV ? (uint32_t)q[2] << 4 | q[1] >> 4
			       : (uint32_t)(q[1] >> 4) | (uint32_t)q[2] << 4;
		else
			v = GV ? (uint32_t)q[0] << 4 | (q[1] & 0xfu)
			       : q[0] | (uint32_t)(q[1] & 0xfu) << 8;
		return (float)(v >> sh);
	}
};
template <> struct gpu_sample<CFG_SAMPLE_U12P> : gpu_packed12<false> {
};
template <> struct gpu_sample<CFG_SAMPLE_U12GV> : gpu_packed12<true> {
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

/* Whether raw A-scan a of the B-scan m describes is missing (docs/algorithms.md §1.0). */
static __device__ __forceinline__ bool gpu_missing(const gpu_miss &m, int a, int nx)
{
	return m.row && m.row[m.rev ? nx - 1 - a : a];
}

/* Grid (nx): block a marks raw A-scan a of the nrep f32 B-scans at raw (the repeats of one
 * position, one after another) missing when a sample of it in any of them is a NaN or an
 * infinity, at its place in L_e, and counts it. */
__global__ void k_nonfinite(const float *raw, int K, int nx, int nrep, gpu_miss m)
{
	const int a = blockIdx.x;
	int bad = 0;
	for (int r = 0; r < nrep; r++) {
		const float *row = raw + ((size_t)r * nx + a) * K;
		for (int k = threadIdx.x; k < K; k += blockDim.x)
			bad |= !isfinite(row[k]);
	}
	bad = __syncthreads_or(bad);
	if (threadIdx.x == 0) {
		m.row[m.rev ? nx - 1 - a : a] = (unsigned char)(bad != 0);
		if (bad)
			atomicAdd(m.count, 1u);
	}
}

/* Grid (ceil(nz / threads), nx): the L_e column x of a missing A-scan by linear interpolation
 * between the nearest columns on either side that are not missing, as cpu_fill_missing_row:
 * (1 - t) * left + t * right in float, t = (x - xl) / (xr - xl); the nearest alone at an end;
 * 0 when every A-scan is missing. */
__global__ void k_fill_missing(gpu_miss m, int nx, int nz, float *lerow)
{
	const int z = blockIdx.x * blockDim.x + threadIdx.x, x = blockIdx.y;
	if (z >= nz || !m.row[x])
		return;
	int l = x - 1, r = x + 1;
	while (l >= 0 && m.row[l])
		l--;
	while (r < nx && m.row[r])
		r++;
	float v = 0.0f;
	if (l >= 0 && r < nx) {
		const float t = __fdiv_rn((float)(x - l), (float)(r - l));
		v = __fadd_rn(__fmul_rn(__fsub_rn(1.0f, t), lerow[(size_t)l * nz + z]),
		              __fmul_rn(t, lerow[(size_t)r * nz + z]));
	} else if (l >= 0) {
		v = lerow[(size_t)l * nz + z];
	} else if (r < nx) {
		v = lerow[(size_t)r * nz + z];
	}
	lerow[(size_t)x * nz + z] = v;
}

/* Per-k mean or median over the A-scans of one B-scan that are not missing (converted
 * samples; none: 0). */
template <int ST>
__global__ void k_colmean(const typename gpu_sample<ST>::type *raw, int K, int nx, int sh,
                          gpu_miss m, float *col)
{
	const int k = blockIdx.x * blockDim.x + threadIdx.x;
	if (k >= K)
		return;
	const int n = m.row ? nx - (int)*m.count : nx;
	double s = 0;
	for (int a = 0; a < nx; a++)
		if (n == nx || !gpu_missing(m, a, nx))
			s += gpu_sample<ST>::at(raw + gpu_sample<ST>::row(a, K), k, sh);
	col[k] = n ? (float)(s / n) : 0.0f;
}

/* Ascending bitonic sort of sv[0..n2) in shared memory by the block's threads (n2 a power of
 * two); every thread returns after the last pass's __syncthreads. */
static __device__ __forceinline__ void gpu_bitonic_sort(float *sv, int n2)
{
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
}

/* One block per k: bitonic sort of the column (padded with +inf to n2, the missing A-scans
 * too) in shared memory; the median of the n others. */
template <int ST>
__global__ void k_colmedian(const typename gpu_sample<ST>::type *raw, int K, int nx, int n2, int sh,
                            gpu_miss m, float *col)
{
	extern __shared__ float sv[];
	const int k = blockIdx.x;
	const int n = m.row ? nx - (int)*m.count : nx;
	for (int a = threadIdx.x; a < n2; a += blockDim.x)
		sv[a] = a < nx && !gpu_missing(m, a, nx)
		                ? gpu_sample<ST>::at(raw + gpu_sample<ST>::row(a, K), k, sh)
		                : INFINITY;
	__syncthreads();
	gpu_bitonic_sort(sv, n2);
	if (threadIdx.x == 0)
		col[k] = n ? 0.5f * (sv[(n - 1) / 2] + sv[n / 2]) : 0.0f;
}

/* Sum in double of one A-scan's converted samples over the threads of a block (thread i takes
 * samples i, i + blockDim.x, ...; 8 u16/i16 or 4 f32 per 16-byte load, 8 packed 12-bit
 * samples per three 4-byte loads when vec). Integer samples sum exactly in double, so the
 * order does not change the result for them. */
template <int ST>
static __device__ double gpu_row_sum(const typename gpu_sample<ST>::type *row, int K, int sh,
                                     bool vec)
{
	double s = 0.0;
	if constexpr (gpu_sample<ST>::packed) {
		uint32_t u = 0; /* at most 65536 samples of 12 bits: no overflow */
		if (vec) {
			const uint32_t *rw = (const uint32_t *)row;
			for (int i = threadIdx.x; i < K / 8; i += blockDim.x) {
				const uint32_t w[3] = {__ldg(&rw[3 * i]), __ldg(&rw[3 * i + 1]),
				                       __ldg(&rw[3 * i + 2])};
#pragma unroll
				for (int q = 0; q < 4; q++) {
					/* little-endian: byte n of the 12 is bits 8(n%4) of word n/4 */
					const int n = 3 * q;
					const uint32_t b0 = (w[n / 4] >> (8 * (n % 4))) & 0xffu;
					const uint32_t b1 =
					        (w[(n + 1) / 4] >> (8 * ((n + 1) % 4))) & 0xffu;
					const uint32_t b2 =
					        (w[(n + 2) / 4] >> (8 * ((n + 2) % 4))) & 0xffu;
					uint32_t s0, s1;
					gpu_unpack12<gpu_sample<ST>::gv>(b0, b1, b2, s0, s1);
					u += (s0 >> sh) + (s1 >> sh);
				}
			}
		} else {
			for (int k = threadIdx.x; k < K; k += blockDim.x)
				u += (uint32_t)gpu_sample<ST>::at(row, k, sh);
		}
		return (double)u;
	} else if (vec && ST != CFG_SAMPLE_F32) {
		const uint4 *rv = (const uint4 *)row;
		for (int i = threadIdx.x; i < K / 8; i += blockDim.x) {
			const uint4 v = __ldg(&rv[i]);
			const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
			for (int q = 0; q < 4; q++) {
				/* little-endian: element 2q in the low half */
				const typename gpu_sample<ST>::type e0 =
				        (typename gpu_sample<ST>::type)(uint16_t)(w[q] & 0xffffu);
				const typename gpu_sample<ST>::type e1 =
				        (typename gpu_sample<ST>::type)(uint16_t)(w[q] >> 16);
				s += gpu_sample<ST>::conv(e0, sh);
				s += gpu_sample<ST>::conv(e1, sh);
			}
		}
	} else if (vec) {
		const float4 *rv = (const float4 *)row;
		for (int i = threadIdx.x; i < K / 4; i += blockDim.x) {
			const float4 v = __ldg(&rv[i]);
			s += (double)v.x;
			s += (double)v.y;
			s += (double)v.z;
			s += (double)v.w;
		}
	} else {
		for (int k = threadIdx.x; k < K; k += blockDim.x)
			s += gpu_sample<ST>::conv(row[k], sh);
	}
	return s;
}

/*
 * Grid (chunks, nx): block (c, a) converts chunk c of A-scan a (GPU_CONV_PER_THREAD samples
 * per thread), subtracts the background (ascan_mean: every block of the A-scan computes the
 * same mean by the same block reduction in double, from L2), then either stores conv[a][k]
 * (resampling follows) or, without resampling, writes the windowed, dispersion-compensated,
 * zero-padded FFT input directly. vec: rows are 16-byte aligned and K a multiple of the
 * samples per 16 bytes.
 */
template <int ST, bool DIRECT>
__global__ void __launch_bounds__(GPU_THREADS)
        k_convert(gpu_prep_params p, gpu_prep_tables t, const typename gpu_sample<ST>::type *raw,
                  gpu_miss m, const float *col, float *conv, void *fin, bool vec)
{
	__shared__ double red[GPU_THREADS / 32 + 1];
	const int a = blockIdx.y, K = p.K;
	const typename gpu_sample<ST>::type *row = raw + gpu_sample<ST>::row(a, K);
	/* a missing A-scan (§1.0) transforms zeros: its L_e column is filled afterwards */
	const bool missing = gpu_missing(m, a, p.nx);
	float mean = 0.0f;

	if (p.background == CFG_BG_ASCAN_MEAN)
		mean = (float)(gpu_block_sum(gpu_row_sum<ST>(row, K, p.bit_shift, vec), red) / K);
	const int len = DIRECT ? p.N : K;
	for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < len; j += gridDim.x * blockDim.x) {
		float x = 0.0f;
		if (j < K && !missing) {
			x = gpu_sample<ST>::at(row, j, p.bit_shift);
			if (p.background == CFG_BG_ASCAN_MEAN)
				x -= mean;
			else if (p.background == CFG_BG_BSCAN_MEAN ||
			         p.background == CFG_BG_BSCAN_MEDIAN ||
			         p.background == CFG_BG_PARTIAL_MEDIAN)
				x -= col[j];
			else if (p.background == CFG_BG_REFERENCE)
				x -= t.reference[j];
		}
		if (DIRECT)
			gpu_put_fin(fin, (size_t)a * p.N, j, K, x, t, p.complex_in);
		else
			conv[(size_t)a * K + j] = x;
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

/* The spectrum of A-scan a at source bin `bin` (X, or X - C[bin] with the partial_median values
 * C, when not NULL): what k_logmag, k_power_add and k_fn_store read. */
static __device__ __forceinline__ float2 gpu_spec_at(const float2 *spec, int ld, const float2 *C,
                                                     int a, int bin)
{
	float2 c = spec[(size_t)a * ld + bin];
	if (C) {
		const float2 m = C[bin];
		c.x -= m.x;
		c.y -= m.y;
	}
	return c;
}

/* The source bin of output depth z: the crop, and flip z. */
static __device__ __forceinline__ int gpu_out_bin(const gpu_prep_params &p, int z)
{
	const int zz = p.z0 + z;
	return p.flip_z ? p.half - 1 - zz : zz;
}

/* Grid (ceil(nz / threads), nx): |X - C|, dB, normalize, flip z, crop, into L_e's B-scan row
 * (C: the partial_median values per depth, or NULL). */
__global__ void k_logmag(gpu_prep_params p, const float2 *spec, int ld, bool reverse_x,
                         const float2 *C, float *lerow)
{
	const int z = blockIdx.x * blockDim.x + threadIdx.x, a = blockIdx.y;
	if (z >= p.nz)
		return;
	const float2 c = gpu_spec_at(spec, ld, C, a, gpu_out_bin(p, z));
	const float m = sqrtf(c.x * c.x + c.y * c.y);
	const float d = 20.0f * log10f(m + 1e-12f);
	const float v = fminf(fmaxf((d - p.db_lo) * p.db_inv, 0.0f), 1.0f);
	const int xo = reverse_x ? p.nx - 1 - a : a;
	lerow[(size_t)xo * p.nz + z] = v;
}

/* Grid (ceil(nz / threads), nx): geometry.repeats M > 1 (docs/algorithms.md §5 step 1): |X - C|^2
 * of one repeat at the place k_logmag writes its value, set (first) or added to what the
 * position's earlier repeats left there; Re^2 + Im^2 as k_logmag forms it. */
__global__ void k_power_add(gpu_prep_params p, const float2 *spec, int ld, bool reverse_x,
                            const float2 *C, bool first, float *lerow)
{
	const int z = blockIdx.x * blockDim.x + threadIdx.x, a = blockIdx.y;
	if (z >= p.nz)
		return;
	const float2 c = gpu_spec_at(spec, ld, C, a, gpu_out_bin(p, z));
	const float q = c.x * c.x + c.y * c.y;
	const int xo = reverse_x ? p.nx - 1 - a : a;
	float *o = &lerow[(size_t)xo * p.nz + z];
	*o = first ? q : *o + q;
}

/* Grid (ceil(nz / threads), nx): the sum of the repeats' power P at each place of the
 * position's rows into the normalized dB of sqrtf(P * inv_m), as k_logmag does with |X|. */
__global__ void k_logpower(gpu_prep_params p, float inv_m, float *lerow)
{
	const int z = blockIdx.x * blockDim.x + threadIdx.x, a = blockIdx.y;
	if (z >= p.nz)
		return;
	float *o = &lerow[(size_t)a * p.nz + z];
	const float m = sqrtf(*o * inv_m);
	const float d = 20.0f * log10f(m + 1e-12f);
	*o = fminf(fmaxf((d - p.db_lo) * p.db_inv, 0.0f), 1.0f);
}

/* ---- functional OCT (docs/algorithms.md §5): the per-voxel functions of backend/functional.h,
 * the same code the CPU backend runs, on the spectra of one position's repeats ------------- */

/* Grid (ceil(nh / threads), nx): repeat m's spectra X - C (all nh bins) into fspec [M][nx][nh];
 * with lerow (M > 1), also k_power_add's work: |X - C|^2 of the bins that are output depths set
 * (first) or added at their places in the position's rows. */
__global__ void k_fn_store(gpu_prep_params p, const float2 *spec, int ld, bool reverse_x,
                           const float2 *C, int m, float2 *__restrict__ fspec, float *lerow,
                           bool first)
{
	const int z = blockIdx.x * blockDim.x + threadIdx.x, a = blockIdx.y;
	if (z >= p.half)
		return;
	const float2 c = gpu_spec_at(spec, ld, C, a, z);
	fspec[((size_t)m * p.nx + a) * p.half + z] = c;
	const int zo = (p.flip_z ? p.half - 1 - z : z) - p.z0; /* gpu_out_bin's inverse */
	if (!lerow || zo < 0 || zo >= p.nz)
		return;
	const float q = c.x * c.x + c.y * c.y;
	const int xo = reverse_x ? p.nx - 1 - a : a;
	float *o = &lerow[(size_t)xo * p.nz + zo];
	*o = first ? q : *o + q;
}

/* The depth range before the flip: source bins [zb0, zb0 + nz). */
static __device__ __forceinline__ int gpu_fn_zb0(const gpu_fn_params &f)
{
	return f.flip_z ? f.nh - f.z0 - f.nz : f.z0;
}

#define GPU_FN_PREP_THREADS 256 /* threads of k_fn_prep: 8 warps */

/*
 * One block per A-scan a: the mask keep[a][z] of the source bins z of the depth range (the
 * structure's dB, be_fn_structure_db, at or above functional.mask_db); then, for Doppler with
 * functional.doppler.bulk, the bulk phase of each of its pairs m into bulk[a * M + m] (cosine,
 * sine), a warp per pair: lane l sums the bins zb0 + l, zb0 + l + 32, ... (be_fn_bulk_add),
 * the lanes' sums are added by shuffles, be_fn_bulk_phase. bscan: pairs (m, m + 1), m < M - 1;
 * ascan: (a, a + 1) of repeat m, a < nx - 1.
 */
__global__ void __launch_bounds__(GPU_FN_PREP_THREADS)
        k_fn_prep(gpu_fn_params f, const float *__restrict__ X, unsigned char *keep,
                  float2 *__restrict__ bulk)
{
	const int a = blockIdx.x;
	const size_t rs = (size_t)f.nx * f.nh;
	const uint32_t zb0 = (uint32_t)gpu_fn_zb0(f), zb1 = zb0 + (uint32_t)f.nz;
	unsigned char *k = keep + (size_t)a * f.nh; /* written, then read by the block's warps */

	for (uint32_t z = zb0 + threadIdx.x; z < zb1; z += blockDim.x)
		k[z] = be_fn_structure_db(X + 2 * (size_t)a * f.nh, (uint32_t)f.M, rs, z) >=
		       f.mask_db;
	if (!f.doppler || !f.doppler_bulk || (f.doppler_ascan && a + 1 >= f.nx))
		return; /* uniform over the block */
	__syncthreads();
	const int npair = f.doppler_ascan ? f.M : f.M - 1, lane = threadIdx.x & 31;
	for (int m = threadIdx.x >> 5; m < npair; m += blockDim.x >> 5) {
		const float *E = X + 2 * ((size_t)m * rs + (size_t)a * f.nh);
		const float *L = f.doppler_ascan ? E + 2 * (size_t)f.nh : E + 2 * rs;
		float cr = 0.0f, ci = 0.0f;
		be_fn_bulk_add(L, E, k, zb0 + lane, zb1, 32, &cr, &ci);
		for (int o = 16; o > 0; o >>= 1) {
			cr += __shfl_xor_sync(0xffffffffu, cr, o);
			ci += __shfl_xor_sync(0xffffffffu, ci, o);
		}
		if (lane == 0) {
			float cb, sb;
			be_fn_bulk_phase(cr, ci, &cb, &sb);
			bulk[(size_t)a * f.M + m] = make_float2(cb, sb);
		}
	}
}

/* Grid (ceil(nz / threads), nx): output depth z of A-scan a (at x = rev ? nx - 1 - a : a of the
 * position's rows): angiography's normalized v into la (when not NULL), the Kasai sum R into
 * lre and lim (when lre is not NULL) and its phase into ph (when not NULL), as
 * cpu/preprocess.c functional_position forms them. */
__global__ void k_fn_values(gpu_fn_params f, const float *__restrict__ X,
                            const unsigned char *__restrict__ keep, const float2 *__restrict__ bulk,
                            float *__restrict__ la, float *__restrict__ lre,
                            float *__restrict__ lim, float *__restrict__ ph)
{
	const int z = blockIdx.x * blockDim.x + threadIdx.x, a = blockIdx.y;
	if (z >= f.nz)
		return;
	const size_t rs = (size_t)f.nx * f.nh;
	const int xo = f.rev ? f.nx - 1 - a : a;
	const size_t o = (size_t)xo * f.nz + z;
	const uint32_t zs = (uint32_t)(f.flip_z ? f.nh - 1 - f.z0 - z : f.z0 + z);
	const uint32_t M = (uint32_t)f.M, nh = (uint32_t)f.nh, h = (uint32_t)f.fn_half_window;

	if (la) {
		float A = 0.0f, v;
		if (keep[(size_t)a * nh + zs])
			A = f.angio_svar ? be_fn_svar(X + 2 * (size_t)a * nh, M, rs, zs)
			                 : be_fn_cdv(X + 2 * (size_t)a * nh, M, rs, nh, h, zs);
		v = (A - f.angio_lo) * f.angio_inv;
		v = v > 0.0f ? v : 0.0f;
		la[o] = v < 1.0f ? v : 1.0f;
	}
	if (lre) {
		/* ascan: the last A-scan takes the sum of the one before it; nx = 1: no pair */
		const int as = f.doppler_ascan && f.nx > 1 && a + 1 == f.nx ? a - 1 : a;
		const uint32_t npair = f.doppler_ascan ? M : M - 1;
		float sr = 0.0f, si = 0.0f;
		if (!(f.doppler_ascan && as + 1 >= f.nx) && keep[(size_t)as * nh + zs]) {
			uint32_t lo, hi;
			be_fn_window(nh, h, zs, &lo, &hi);
			for (uint32_t m = 0; m < npair; m++) {
				const float *E = X + 2 * ((size_t)m * rs + (size_t)as * nh);
				const float *L = f.doppler_ascan ? E + 2 * (size_t)nh : E + 2 * rs;
				float cb = 1.0f, sb = 0.0f;
				if (f.doppler_bulk) {
					const float2 b = bulk[(size_t)as * M + m];
					cb = b.x;
					sb = b.y;
				}
				be_fn_lag(L, E, lo, hi, cb, sb, &sr, &si);
			}
		}
		lre[o] = sr;
		lim[o] = si;
		if (ph)
			ph[o] = be_fn_phase(sr, si);
	}
}

/* n values: Doppler's phase (be_fn_phase) of re + i im. */
__global__ void k_fn_phase(const float *__restrict__ re, const float *__restrict__ im,
                           float *__restrict__ ph, size_t n)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		ph[i] = be_fn_phase(re[i], im[i]);
}

/* n values: Doppler's v = (phase + pi) / (2 pi) of re + i im (be_fn_doppler_v) into outf (when
 * not NULL) and its u8, rounded as cpu/recon.c rounds it. */
__global__ void k_doppler_v(const float *__restrict__ re, const float *__restrict__ im, size_t n,
                            uint8_t *__restrict__ out8, float *__restrict__ outf)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		const float v = be_fn_doppler_v(re[i], im[i]);
		if (outf)
			outf[i] = v;
		out8[i] = (uint8_t)(int)__fadd_rn(__fmul_rn(255.0f, v), 0.5f);
	}
}

/* ---- partial median (docs/algorithms.md §1b; cpu/preprocess.c partial_median_bscan) ------------ */

/*
 * Grid (ceil(half / threads), chunks): thread z of block (., c) sums Re, Im, Re^2, Im^2 of
 * spec[a][z] in double over the A-scans a of chunk c (A-scans c*per .. min((c+1)*per, nx)),
 * into part[q][c][z] (q = 0..3). Depth-contiguous threads: coalesced rows.
 */
__global__ void k_pm_partial(const float2 *__restrict__ spec, int ld, int nx, int half, int per,
                             double *__restrict__ part)
{
	const int z = blockIdx.x * blockDim.x + threadIdx.x, c = blockIdx.y;
	if (z >= half)
		return;
	const int a0 = c * per, a1 = min(a0 + per, nx);
	double sr = 0, si = 0, srr = 0, sii = 0;
	for (int a = a0; a < a1; a++) {
		const float2 v = __ldg(&spec[(size_t)a * ld + z]);
		const double re = v.x, im = v.y;
		sr += re;
		si += im;
		srr += re * re;
		sii += im * im;
	}
	const size_t stride = (size_t)gridDim.y * half, o = (size_t)c * half + z;
	part[o] = sr;
	part[stride + o] = si;
	part[2 * stride + o] = srr;
	part[3 * stride + o] = sii;
}

/* Grid (ceil(half / threads)): the chunks' sums in chunk order, then sigma[z] as the CPU forms
 * it: sqrt(max(vr, 0) + max(vi, 0)) in double, rounded to float. */
__global__ void k_pm_sigma(const double *__restrict__ part, int chunks, int nx, gpu_miss m,
                           int half, float *__restrict__ sig)
{
	const int z = blockIdx.x * blockDim.x + threadIdx.x;
	if (z >= half)
		return;
	const size_t stride = (size_t)chunks * half;
	double sr = 0, si = 0, srr = 0, sii = 0;
	for (int c = 0; c < chunks; c++) {
		const size_t o = (size_t)c * half + z;
		sr += part[o];
		si += part[stride + o];
		srr += part[2 * stride + o];
		sii += part[3 * stride + o];
	}
	/* a missing A-scan's spectrum is 0: it adds nothing, the statistics are over the n
	 * others (§1.0) */
	const int n = m.row ? nx - (int)*m.count : nx;
	const double dn = n ? (double)n : 1.0;
	const double mr = sr / dn, mi = si / dn;
	const double vr = srr / dn - mr * mr, vi = sii / dn - mi * mi;
	sig[z] = (float)sqrt((vr > 0 ? vr : 0.0) + (vi > 0 ? vi : 0.0));
}

/* The k-th smallest (0-based) of n non-negative floats, by radix selection on their bit
 * patterns (monotone for non-negative floats): four passes of 8 bits with a shared
 * histogram. One block; every thread returns the value. */
static __device__ float gpu_select_kth(const float *__restrict__ v, int n, int k, unsigned *hist,
                                       unsigned *sh)
{
	unsigned prefix = 0, mask = 0;
	for (int shift = 24; shift >= 0; shift -= 8) {
		for (int i = threadIdx.x; i < 256; i += blockDim.x)
			hist[i] = 0;
		__syncthreads();
		for (int i = threadIdx.x; i < n; i += blockDim.x) {
			const unsigned u = __float_as_uint(v[i]);
			if ((u & mask) == prefix)
				atomicAdd(&hist[(u >> shift) & 255u], 1u);
		}
		__syncthreads();
		if (threadIdx.x == 0) {
			unsigned cum = 0, bin = 0;
			for (bin = 0; bin < 255; bin++) {
				if (cum + hist[bin] > (unsigned)k)
					break;
				cum += hist[bin];
			}
			sh[0] = prefix | (bin << shift);
			sh[1] = (unsigned)k - cum;
		}
		__syncthreads();
		prefix = sh[0];
		k = (int)sh[1];
		mask |= 255u << shift;
		__syncthreads();
	}
	return __uint_as_float(prefix);
}

/*
 * One block: sigma_bg = the median of sig[0..half) (even count: the mean of the two middle
 * values in double, rounded to float, as cpu_median), then the depths with (double) sig[z] >
 * t * (double) sigma_bg into list (in no particular order), their number into *nsel and
 * *count, and C[z] = 0 for every depth (the medians overwrite the listed ones).
 */
__global__ void k_pm_select(const float *__restrict__ sig, int half, double t,
                            int *__restrict__ list, int *__restrict__ nsel,
                            unsigned *__restrict__ count, bool count_max, float2 *__restrict__ C)
{
	__shared__ unsigned hist[256], sh[2];
	__shared__ int n;
	const float lo = gpu_select_kth(sig, half, (half - 1) / 2, hist, sh);
	const float hi = half % 2 ? lo : gpu_select_kth(sig, half, half / 2, hist, sh);
	const float bg = half % 2 ? lo : (float)(((double)lo + (double)hi) / 2.0);
	const double thr = t * (double)bg;
	if (threadIdx.x == 0)
		n = 0;
	__syncthreads();
	for (int z = threadIdx.x; z < half; z += blockDim.x) {
		C[z] = make_float2(0.0f, 0.0f);
		if ((double)sig[z] > thr)
			list[atomicAdd(&n, 1)] = z;
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		*nsel = n;
		*count = count_max && *count > (unsigned)n ? *count : (unsigned)n;
	}
}

/* Median of the nx values in sv[0..nx) (padded with +inf to n2, a power of two) by a bitonic
 * sort in shared memory; even nx: the mean of the two middle values in double, as cpu_median. */
static __device__ float gpu_block_median(float *sv, int nx, int n2)
{
	gpu_bitonic_sort(sv, n2);
	const float m =
	        nx % 2 ? sv[nx / 2] : (float)(((double)sv[nx / 2 - 1] + (double)sv[nx / 2]) / 2.0);
	__syncthreads();
	return m;
}

/* Grid-strided over the *nsel listed depths: C[z] = the medians of Re and Im of spec[a][z] over
 * the nx A-scans. Only these depths are sorted. */
__global__ void k_pm_median(const float2 *__restrict__ spec, int ld, int nx, int n2, gpu_miss m,
                            const int *__restrict__ list, const int *__restrict__ nsel,
                            float2 *__restrict__ C)
{
	extern __shared__ float sv[];
	const int n = *nsel;
	const int nv = m.row ? nx - (int)*m.count : nx; /* A-scans not missing */
	for (int i = blockIdx.x; i < n; i += gridDim.x) {
		const int z = list[i];
		float med[2];
		for (int q = 0; q < 2; q++) {
			for (int a = threadIdx.x; a < n2; a += blockDim.x) {
				float v = INFINITY;
				if (a < nx && !gpu_missing(m, a, nx)) {
					const float2 x = spec[(size_t)a * ld + z];
					v = q ? x.y : x.x;
				}
				sv[a] = v;
			}
			__syncthreads();
			med[q] = nv ? gpu_block_median(sv, nv, n2) : 0.0f;
		}
		if (threadIdx.x == 0)
			C[z] = make_float2(med[0], med[1]);
	}
}

/* ---- reconstruction ---------------------------------------------------------------------- */

/* Grid (columns, z chunks), both grid-strided: B[y*sy+oy][x*sx+ox][z] = L_e[y][x][z] for the
 * low-resolution column c = y * nx + x of block x; E there = epoch (E NULL: a functional plane,
 * whose E is the structure's). */
__global__ void k_interlace(gpu_recon_params p, const float *__restrict__ le,
                            const unsigned char *__restrict__ miss, float *__restrict__ B,
                            long long *__restrict__ E)
{
	const size_t ncols = (size_t)p.ny * p.nx;
	for (size_t c = blockIdx.x; c < ncols; c += gridDim.x) {
		const size_t y = c / (size_t)p.nx, x = c - y * (size_t)p.nx;
		const size_t dst = (y * p.sy + p.oy) * (size_t)p.X + x * p.sx + p.ox;
		const float *src = le + c * p.nz;
		float *d = B + dst * p.nz;
		for (int z = blockIdx.y * blockDim.x + threadIdx.x; z < p.nz;
		     z += gridDim.y * blockDim.x)
			d[z] = __ldg(&src[z]);
		/* a missing A-scan (§1.0) leaves its position without a sample */
		if (E && blockIdx.y == 0 && threadIdx.x == 0)
			E[dst] = miss && miss[c] ? -1 : p.epoch;
	}
}

/* Temporal weight of age a in double (be_temporal_weight). */
static __device__ __forceinline__ double gpu_temporal_d(const gpu_recon_params &p, long long age)
{
	if (p.temporal == CFG_TEMPORAL_EXP)
		return exp(-(double)age / p.tau);
	return fmax((double)p.S - (double)age, 0.0) / (double)p.S;
}

/* Temporal weight of age a, in double and rounded once, as the host table and the CPU do. */
static __device__ __forceinline__ float gpu_temporal(const gpu_recon_params &p, long long age)
{
	return (float)gpu_temporal_d(p, age);
}

/* ---- adaptive mode (docs/algorithms.md §2b) ------------------------------------------------
 * The double arithmetic below is written with __dadd_rn / __dmul_rn so that nothing is
 * contracted into an FMA: the CPU reference rounds every product and sum, and so does this. */

/* Full-resolution position of low-resolution sample c = y * nx + x at this epoch's offset. */
static __device__ __forceinline__ size_t gpu_sample_pos(const gpu_recon_params &p, size_t c)
{
	const size_t y = c / (size_t)p.nx, x = c - y * (size_t)p.nx;
	return (y * p.sy + p.oy) * (size_t)p.X + x * p.sx + p.ox;
}

#define GPU_TILE 32 /* transpose tile of k_adapt_delta */

/*
 * Before the interlace: delta[z][c] = L[c][z] - B[s][z] (float, as cpu/recon.c) for every
 * low-resolution sample c at its full-resolution position s, transposed through shared memory
 * so that both the reads (along z) and the writes (along c) are coalesced. Block (32, 8):
 * tile (blockIdx.x: 32 samples) x (32 depths, grid-strided over blockIdx.y).
 */
__global__ void k_adapt_delta(gpu_recon_params p, const float *__restrict__ le,
                              const float *__restrict__ B, float *__restrict__ delta)
{
	__shared__ float tile[GPU_TILE][GPU_TILE + 1];
	const size_t ncols = (size_t)p.ny * p.nx, c0 = (size_t)blockIdx.x * GPU_TILE;
	const int Z = p.nz;
	for (int z0 = (int)blockIdx.y * GPU_TILE; z0 < Z; z0 += (int)gridDim.y * GPU_TILE) {
		for (int k = threadIdx.y; k < GPU_TILE; k += blockDim.y) {
			const size_t c = c0 + k;
			const int z = z0 + (int)threadIdx.x;
			if (c < ncols && z < Z)
				tile[k][threadIdx.x] =
				        __fsub_rn(__ldg(&le[c * Z + z]),
				                  __ldg(&B[gpu_sample_pos(p, c) * Z + z]));
		}
		__syncthreads();
		for (int k = threadIdx.y; k < GPU_TILE; k += blockDim.y) {
			const size_t c = c0 + threadIdx.x;
			const int z = z0 + k;
			if (c < ncols && z < Z)
				delta[(size_t)z * ncols + c] = tile[threadIdx.x][k];
		}
		__syncthreads();
	}
}

/*
 * One thread per low-resolution sample c (grid-strided), after k_adapt_delta: the mean b[z]
 * of delta over the depth window [max(0, z - h), min(Z - 1, z + h)] as a running sum in
 * double (the same additions and subtractions in the same order as cpu/recon.c), d = the mean
 * over z of b[z]^2; BE_ADAPT_UNKNOWN where E < 0 (never written). The reads of a warp are 32
 * consecutive samples of one depth (coalesced). Where the window is whole (2h + 1 bins) its
 * mean is a product with the reciprocal and one Markstein correction (q + (win - q w) / w),
 * within one double ulp of the CPU's quotient and free of the division's branches, so that
 * the unrolled loop keeps its loads in flight; at the ends it is the division itself.
 */
__global__ void k_adapt_change(gpu_recon_params p, const float *__restrict__ delta,
                               const long long *__restrict__ E, float *__restrict__ chg)
{
	const size_t ncols = (size_t)p.ny * p.nx;
	const int Z = p.nz, h = p.depth_half_window;
	const double w = 2.0 * h + 1.0, rw = 1.0 / w;
	for (size_t c = (size_t)blockIdx.x * blockDim.x + threadIdx.x; c < ncols;
	     c += (size_t)gridDim.x * blockDim.x) {
		if (E[gpu_sample_pos(p, c)] < 0) {
			chg[c] = (float)BE_ADAPT_UNKNOWN;
			chg[ncols + c] = (float)BE_ADAPT_UNKNOWN;
			continue;
		}
		const float *dc = delta + c;
#define GPU_DELTA(z) ((double)__ldg(&dc[(size_t)(z)*ncols]))
		/* d1: the bin-wise mean square, summed in the CPU's order */
		double acc1 = 0.0;
#pragma unroll 8
		for (int k = 0; k < Z; k++) {
			const double b1 = GPU_DELTA(k);
			acc1 = __dadd_rn(acc1, __dmul_rn(b1, b1));
		}
		chg[ncols + c] = (float)__ddiv_rn(acc1, (double)Z);
		double win = 0.0, acc = 0.0;
		/* z = 0: the window [0, min(h + 1, Z)) */
		const int b0 = h + 1 < Z ? h + 1 : Z;
		for (int k = 0; k < b0; k++)
			win = __dadd_rn(win, GPU_DELTA(k));
		double v = __ddiv_rn(win, (double)b0);
		acc = __dadd_rn(acc, __dmul_rn(v, v));
		int z = 1;
		/* the window grows (z <= h) or shrinks (z + h >= Z) at the ends */
		for (; z < Z && (z <= h || z + h >= Z); z++) {
			if (z + h < Z)
				win = __dadd_rn(win, GPU_DELTA(z + h));
			if (z > h)
				win = __dsub_rn(win, GPU_DELTA(z - h - 1));
			const int n = (z + h + 1 < Z ? z + h + 1 : Z) - (z > h ? z - h : 0);
			v = __ddiv_rn(win, (double)n);
			acc = __dadd_rn(acc, __dmul_rn(v, v));
		}
		/* whole window: one in, one out */
#pragma unroll 8
		for (; z + h < Z; z++) {
			win = __dadd_rn(win, GPU_DELTA(z + h));
			win = __dsub_rn(win, GPU_DELTA(z - h - 1));
			const double q = __dmul_rn(win, rw);
			v = __fma_rn(__fma_rn(-q, w, win), rw, q);
			acc = __dadd_rn(acc, __dmul_rn(v, v));
		}
		for (; z < Z; z++) {
			win = __dsub_rn(win, GPU_DELTA(z - h - 1));
			v = __ddiv_rn(win, (double)(Z - (z - h)));
			acc = __dadd_rn(acc, __dmul_rn(v, v));
		}
#undef GPU_DELTA
		chg[c] = (float)__ddiv_rn(acc, (double)Z);
	}
}

/* The interpolation axes of this epoch: entry i < X for column i, X + i for row i
 * (be_interp_axis: p = clamp((f - off) / s, 0, n - 1), i0 = min(floor p, n - 2), t = p - i0,
 * n = 1: 0, 0, 0). */
__global__ void k_adapt_axes(gpu_recon_params p, int4 *__restrict__ axy,
                             longlong2 *__restrict__ aoff)
{
	const int n_all = p.X + p.Y;
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n_all;
	     i += gridDim.x * blockDim.x) {
		const bool row = i >= p.X;
		const int f = row ? i - p.X : i, off = row ? p.oy : p.ox, st = row ? p.sy : p.sx;
		const int n = row ? p.ny : p.nx;
		int i0 = 0, i1 = 0;
		float t = 0.0f;
		if (n >= 2) {
			double q = __ddiv_rn((double)f - (double)off, (double)st);
			q = fmin(fmax(q, 0.0), (double)(n - 1));
			i0 = (int)floor(q);
			if (i0 > n - 2)
				i0 = n - 2;
			i1 = i0 + 1;
			t = (float)(q - (double)i0);
		}
		axy[i] = make_int4(i0, i1, __float_as_int(t), 0);
		/* offsets into L_e [ny][nx][Z]: a row's i * nx * Z, a column's i * Z */
		const long long unit = row ? (long long)p.nx * p.nz : (long long)p.nz;
		aoff[i] = make_longlong2(i0 * unit, i1 * unit);
	}
}

/* A change measure at a column: the bilinear interpolation of rows c0, c1 of the sample
 * grid between columns cx.x, cx.y, in double, rounded as cpu/recon.c's change_at. */
static __device__ __forceinline__ double gpu_change_at(const float *c0, const float *c1, int4 cx,
                                                       double tx, double ty)
{
	const double omtx = 1.0 - tx;
	const double r0 =
	        __dadd_rn(__dmul_rn(omtx, (double)c0[cx.x]), __dmul_rn(tx, (double)c0[cx.y]));
	const double r1 =
	        __dadd_rn(__dmul_rn(omtx, (double)c1[cx.x]), __dmul_rn(tx, (double)c1[cx.y]));
	return __dadd_rn(__dmul_rn(1.0 - ty, r0), __dmul_rn(ty, r1));
}

/*
 * One thread per output column (Y, X), grid-strided, after the interlace: D = the bilinear
 * interpolation of chg over the epoch's sample grid (double, from the float d and the float
 * t of the axes), alpha = exp(-D / k2), and the temporal weight t(a) exp(-D a / (S k2)) of
 * the column (0 where E < 0) into tmap, each rounded once to float; likewise D1 from the
 * bin-wise measures (chg + ny nx) and beta = exp(-D1 a / (S ks2)) (0 where E < 0 or ks2 = 0).
 */
__global__ void k_adapt_weights(gpu_recon_params p, const long long *__restrict__ E,
                                const float *__restrict__ chg,
                                const long long *__restrict__ since_p, const int4 *__restrict__ axy,
                                float *__restrict__ alpha, float *__restrict__ beta,
                                float *__restrict__ tmap)
{
	const size_t nlow = (size_t)p.ny * p.nx;
	const size_t n = (size_t)p.Y * p.X;
	const long long since = since_p ? *since_p : LLONG_MAX;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		const int Yc = (int)(i / (size_t)p.X), Xc = (int)(i - (size_t)Yc * p.X);
		const int4 ry = axy[p.X + Yc], cx = axy[Xc];
		const double ty = (double)__int_as_float(ry.z), tx = (double)__int_as_float(cx.z);
		const float *c0 = chg + (size_t)ry.x * p.nx, *c1 = chg + (size_t)ry.y * p.nx;
		const long long e = E[i];
		double D = gpu_change_at(c0, c1, cx, tx, ty);
		double D1 = gpu_change_at(c0 + nlow, c1 + nlow, cx, tx, ty);
		if (e >= since) /* rescanned since a jump: unchanged (gpu_launch_jump) */
			D = D1 = 0.0;
		alpha[i] = (float)exp(__ddiv_rn(-D, p.k2));
		float t = 0.0f, bt = 0.0f;
		if (e >= 0) {
			const double age = (double)(p.epoch - e);
			const double f =
			        exp(__ddiv_rn(__dmul_rn(-D, age), __dmul_rn((double)p.S, p.k2)));
			t = (float)__dmul_rn(gpu_temporal_d(p, p.epoch - e), f);
			if (p.ks2 > 0.0)
				bt = (float)exp(__ddiv_rn(__dmul_rn(-D1, age),
				                          __dmul_rn((double)p.S, p.ks2)));
		}
		tmap[i] = t;
		beta[i] = bt;
	}
}

/* Jump recovery (gpu_launch_jump): one thread per (row y, depth z), grid-strided: the sum in
 * double of the row's samples not missing at depth z, x in order as cpu/recon.c sums them. */
__global__ void k_jump_rows(gpu_recon_params p, const float *__restrict__ le,
                            const unsigned char *__restrict__ miss, double *__restrict__ rows)
{
	const size_t n = (size_t)p.ny * p.nz;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		const size_t y = i / (size_t)p.nz, z = i - y * (size_t)p.nz;
		double sum = 0.0;
		for (int x = 0; x < p.nx; x++) {
			const size_t c = y * (size_t)p.nx + x;
			if (!__ldg(&miss[c]))
				sum = __dadd_rn(sum, (double)__ldg(&le[c * p.nz + z]));
		}
		rows[i] = sum;
	}
}

#define GPU_JUMP_THREADS 256

/* Jump recovery, one block after k_jump_rows: this epoch's summed A-scan (the rows in order)
 * and the counts of the samples not missing, known and still, the mean A-scan into mean + nz,
 * then in thread 0 the decision (backend/jump.h) and *since. */
__global__ void k_jump_decide(gpu_recon_params p, const double *__restrict__ rows,
                              const unsigned char *__restrict__ miss, const float *__restrict__ chg,
                              double *mean, be_jump *j, long long *since)
{
	__shared__ unsigned long long cnt[3];
	const size_t ncols = (size_t)p.ny * p.nx;
	const double still_level = be_jump_still_level(p.k2);
	double *cur = mean + p.nz;
	unsigned long long used = 0, known = 0, still = 0;

	if (threadIdx.x < 3)
		cnt[threadIdx.x] = 0;
	for (int z = threadIdx.x; z < p.nz; z += blockDim.x) {
		double sum = 0.0;
		for (int y = 0; y < p.ny; y++)
			sum = __dadd_rn(sum, rows[(size_t)y * p.nz + z]);
		cur[z] = sum;
	}
	for (size_t c = threadIdx.x; c < ncols; c += blockDim.x) {
		if (miss[c])
			continue;
		used++;
		const float d = chg[c];
		if (d < (float)BE_ADAPT_UNKNOWN) {
			known++;
			if ((double)d < still_level)
				still++;
		}
	}
	__syncthreads(); /* cnt zeroed */
	atomicAdd(&cnt[0], used);
	atomicAdd(&cnt[1], known);
	atomicAdd(&cnt[2], still);
	__syncthreads(); /* the counts and the sums complete */
	if (cnt[0] > 0)
		for (int z = threadIdx.x; z < p.nz; z += blockDim.x)
			cur[z] = be_jump_mean(cur[z], cnt[0]);
	__syncthreads(); /* the mean complete */
	if (threadIdx.x == 0) {
		be_jump_decide(j, (uint64_t)p.epoch, cur, mean, (uint32_t)p.nz,
		               (uint32_t)p.depth_half_window, cnt[0], cnt[1], cnt[2]);
		*since = be_jump_since(j, (uint64_t)p.epoch, (uint32_t)p.S);
	}
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

/* Temporal weight of column (yy, xx), inside the volume: the S x S table or the map. */
template <bool FAST>
static __device__ __forceinline__ float gpu_tcol(const gpu_recon_params &p,
                                                 const float *__restrict__ tmap, int yy, int xx)
{
	if (FAST)
		return c_ttab[p.qe * p.S + (yy % p.sy) * p.sx + (xx % p.sx)];
	return __ldg(&tmap[(size_t)yy * p.X + xx]);
}

/*
 * One thread per output column (Y, X), grid-strided: its 9 neighbour columns' normalized
 * weights, exactly as cpu/recon.c forms them: over the neighbours inside the volume with
 * t > 0, in (dy, dx) order, sum: G = sum g, T = sum t in double and g / G, t / T rounded to
 * float; product: g t rounded to float, G = sum (double) g t, (g t) / G rounded to float.
 * Layout GPU_WCOL floats per column (gpu.h).
 */
template <bool FAST>
__global__ void k_weights(gpu_recon_params p, const float *__restrict__ tmap,
                          const float *__restrict__ alpha, const float *__restrict__ beta,
                          float *__restrict__ W)
{
	const size_t n = (size_t)p.Y * p.X;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		const int Yc = (int)(i / (size_t)p.X), Xc = (int)(i - (size_t)Yc * p.X);
		float cg[9], ct[9], o[GPU_WCOL];
		double G = 0.0, T = 0.0;
#pragma unroll
		for (int dy = -1; dy <= 1; dy++) {
#pragma unroll
			for (int dx = -1; dx <= 1; dx++) {
				const int k = (dy + 1) * 3 + dx + 1, r = Yc + dy, c = Xc + dx;
				cg[k] = ct[k] = 0.0f;
				if (r < 0 || r >= p.Y || c < 0 || c >= p.X)
					continue;
				const float t = gpu_tcol<FAST>(p, tmap, r, c);
				if (!(t > 0.0f))
					continue;
				const float g = c_g[dy * dy + dx * dx];
				if (p.product) {
					cg[k] = __fmul_rn(g, t);
					G += (double)g * (double)t;
				} else {
					cg[k] = g;
					ct[k] = t;
					G += (double)g;
					T += (double)t;
				}
			}
		}
#pragma unroll
		for (int k = 0; k < 9; k++) {
			o[k] = G > 0.0 ? (float)((double)cg[k] / G) : 0.0f;
			o[9 + k] = T > 0.0 ? (float)((double)ct[k] / T) : 0.0f;
		}
		o[18] = alpha ? alpha[i] : 0.0f;
		o[19] = beta ? beta[i] : 0.0f;
		float4 *w = (float4 *)(W + i * GPU_WCOL);
#pragma unroll
		for (int q = 0; q < GPU_WCOL / 4; q++)
			w[q] = make_float4(o[4 * q], o[4 * q + 1], o[4 * q + 2], o[4 * q + 3]);
	}
}

#define GPU_RECON_THREADS 128 /* threads per block along z */
#define GPU_RECON_XRUN    32  /* output columns along X per thread (register reuse) */

/*
 * Column (yy, xx) of B at depth z, smoothed along z as cpu/recon.c does: with b = B[z] and
 * lo, hi = B[z-1], B[z+1] (0 outside [0, Z)), sg = b + g1 (lo + hi) and s1 = b + lo + hi; all 0
 * for a column outside the volume. Every lane of the warp calls it with the same (yy, xx):
 * B[z-1] and B[z+1] come from the neighbouring lanes, lanes 0 and 31 load theirs.
 */
template <bool SUM>
static __device__ __forceinline__ void gpu_col_smooth(const gpu_recon_params &p,
                                                      const float *__restrict__ B, int yy, int xx,
                                                      int z, int lane, float &sg, float &s1)
{
	const bool in = yy >= 0 && yy < p.Y && xx >= 0 && xx < p.X;
	const float *col = B + ((size_t)(in ? yy : 0) * p.X + (in ? xx : 0)) * p.nz;
	float b = 0.0f;
	if (in && z < p.nz)
		b = __ldg(&col[z]);
	float lo = __shfl_up_sync(0xffffffffu, b, 1);
	float hi = __shfl_down_sync(0xffffffffu, b, 1);
	if (lane == 0)
		lo = in && z > 0 && z <= p.nz ? __ldg(&col[z - 1]) : 0.0f;
	if (lane == 31)
		hi = in && z + 1 < p.nz ? __ldg(&col[z + 1]) : 0.0f;
	sg = fmaf(p.g1, lo + hi, b);
	if (SUM)
		s1 = (b + lo) + hi;
}

/*
 * Grid (ceil(Z / threads), ceil(rows / GPU_RECON_ROWS), ceil(X / xrun)): thread z of block
 * (., r, c) computes the voxels (Yi, Xi, z) for the GPU_RECON_ROWS rows Yi from
 * y0 + r * GPU_RECON_ROWS (below y1) and Xi in [c * xrun, min((c + 1) * xrun, X)). The
 * z-smoothed columns of the rows Yi - 1 .. Yi + 1 of all its output rows slide along X in
 * registers (3 columns each), so each float of B is loaded (ROWS + 2) / ROWS times per tile;
 * z is fastest so that a warp reads 128 contiguous bytes. Per voxel: A = sum_n w_n sg_n (and
 * C = sum_n wt_n s1_n) over the 9 neighbour columns in (dy, dx) order with the per-column
 * weights of k_weights (0 for skipped neighbours, which leaves the sums unchanged), then
 * out = 0.5 (A / gz_sum + C / nv) (sum) or A / gz_sum (product): the CPU reference's
 * expression. ADAPT (docs/algorithms.md §2b, step 6-7): then out = alpha out + (1 - alpha) C'
 * with alpha = W[18] and C' the bilinear interpolation of the four low-resolution columns
 * of le around the column (axes axy), every product and sum rounded as cpu/recon.c does; the
 * four columns are the same for a run of sx output columns, so their loads hit the cache.
 */
/* 64 registers, no spills (sm_90); ADAPT: 72 (7 blocks an SM), 9 % faster than 64 and a spill */
/* The newest epoch at column (yy, xx), depth z: the bilinear interpolation of le on the axes,
 * rounded as cpu_current_column. */
static __device__ __forceinline__ float
gpu_current(const gpu_recon_params &p, const float *__restrict__ le, const int4 *__restrict__ axy,
            const longlong2 *__restrict__ aoff, int yy, int xx, int z)
{
	const longlong2 ro = __ldg(&aoff[p.X + yy]), co = __ldg(&aoff[xx]);
	const float ty = __int_as_float(__ldg(&axy[p.X + yy].z));
	const float tx = __int_as_float(__ldg(&axy[xx].z));
	const float w00 = __fmul_rn(1.0f - ty, 1.0f - tx);
	const float w01 = __fmul_rn(1.0f - ty, tx);
	const float w10 = __fmul_rn(ty, 1.0f - tx);
	const float w11 = __fmul_rn(ty, tx);
	const float *lz = le + z;
	float c = __fmul_rn(w00, __ldg(&lz[ro.x + co.x]));
	c = __fadd_rn(c, __fmul_rn(w01, __ldg(&lz[ro.x + co.y])));
	c = __fadd_rn(c, __fmul_rn(w10, __ldg(&lz[ro.y + co.x])));
	return __fadd_rn(c, __fmul_rn(w11, __ldg(&lz[ro.y + co.y])));
}

template <bool SUM, bool ADAPT>
__global__ void __launch_bounds__(GPU_RECON_THREADS, ADAPT ? 7 : 8)
        k_recon(gpu_recon_params p, const float *__restrict__ B, const float *__restrict__ W,
                const float *__restrict__ le, const int4 *__restrict__ axy,
                const longlong2 *__restrict__ aoff, int y0, int y1, int xrun,
                uint8_t *__restrict__ out8, float *__restrict__ outf)
{
	constexpr int R = GPU_RECON_ROWS;
	const int lane = threadIdx.x & 31;
	const int z = (int)blockIdx.x * GPU_RECON_THREADS + (int)threadIdx.x;
	const int Z = p.nz;
	if (z - lane >= Z)
		return; /* the whole warp is beyond Z (uniform: no shuffle partner is lost) */
	const int ya = y0 + (int)blockIdx.y * R;
	const int nrow = min(R, y1 - ya);
	const int xa = (int)blockIdx.z * xrun;
	const int xb = min(xa + xrun, p.X);
	const int nv = 1 + (z > 0) + (z + 1 < Z);
	const float igz = nv == 3 ? p.inv_gz[2] : (nv == 2 ? p.inv_gz[1] : p.inv_gz[0]);
	const float inz = nv == 3 ? p.inv_nz[2] : (nv == 2 ? p.inv_nz[1] : p.inv_nz[0]);
	float sg[R + 2][3], s1[R + 2][3];

#pragma unroll
	for (int r = 0; r < R + 2; r++) {
		s1[r][0] = s1[r][1] = s1[r][2] = 0.0f;
		gpu_col_smooth<SUM>(p, B, ya - 1 + r, xa - 1, z, lane, sg[r][0], s1[r][0]);
		gpu_col_smooth<SUM>(p, B, ya - 1 + r, xa, z, lane, sg[r][1], s1[r][1]);
	}
	for (int Xi = xa; Xi < xb; Xi++) {
#pragma unroll
		for (int r = 0; r < R + 2; r++)
			gpu_col_smooth<SUM>(p, B, ya - 1 + r, Xi + 1, z, lane, sg[r][2], s1[r][2]);
#pragma unroll
		for (int j = 0; j < R; j++) {
			if (j >= nrow)
				break;
			const int Yi = ya + j;
			const float4 *w4 = (const float4 *)(W + ((size_t)Yi * p.X + Xi) * GPU_WCOL);
			float w[GPU_WCOL];
#pragma unroll
			for (int q = 0; q < (SUM ? GPU_WCOL / 4 : 3); q++) {
				const float4 v = __ldg(&w4[q]);
				w[4 * q] = v.x;
				w[4 * q + 1] = v.y;
				w[4 * q + 2] = v.z;
				w[4 * q + 3] = v.w;
			}
			float A = 0.0f, C = 0.0f;
#pragma unroll
			for (int n = 0; n < 9; n++) {
				A = fmaf(w[n], sg[j + n / 3][n % 3], A);
				if (SUM)
					C = fmaf(w[9 + n], s1[j + n / 3][n % 3], C);
			}
			float o = SUM ? 0.5f * (A * igz + C * inz) : A * igz;
			if (ADAPT && z < Z) {
				const float a =
				        SUM ? w[18]
				            : __ldg(&W[((size_t)Yi * p.X + Xi) * GPU_WCOL + 18]);
				const float bt =
				        SUM ? w[19]
				            : __ldg(&W[((size_t)Yi * p.X + Xi) * GPU_WCOL + 19]);
				const float m = __ldg(&B[((size_t)Yi * p.X + Xi) * Z + z]);
				o = __fadd_rn(__fmul_rn(bt, m), __fmul_rn(1.0f - bt, o));
				const float c = gpu_current(p, le, axy, aoff, Yi, Xi, z);
				o = __fadd_rn(__fmul_rn(a, o), __fmul_rn(1.0f - a, c));
			}
			if (z < Z) {
				const size_t i = ((size_t)Yi * p.X + Xi) * Z + z;
				if (out8)
					out8[i] = (uint8_t)fminf(
					        fmaxf(floorf(255.0f * o + 0.5f), 0.0f), 255.0f);
				if (outf)
					outf[i] = o;
			}
		}
#pragma unroll
		for (int r = 0; r < R + 2; r++) {
			sg[r][0] = sg[r][1];
			sg[r][1] = sg[r][2];
			s1[r][0] = s1[r][1];
			s1[r][1] = s1[r][2];
		}
	}
}

/* ---- compensated mode (docs/algorithms.md §2c; cpu/motion.c) -------------------------------
 * Products and sums of floats are written with __fmul_rn / __fadd_rn, as cpu/motion.c and
 * be_motion_shifted round them (no FMA contraction). */

/* Grid (ceil(nz / threads), chunks): part[c][z] = the sum in double of le[i][z] over the
 * A-scans i of chunk c, in order (depth-contiguous threads: coalesced rows). */
__global__ void k_motion_profile(const float *__restrict__ le, size_t n, int nz, size_t per,
                                 double *__restrict__ part)
{
	const int z = blockIdx.x * blockDim.x + threadIdx.x;
	if (z >= nz)
		return;
	const size_t i0 = blockIdx.y * per, i1 = i0 + per < n ? i0 + per : n;
	double s = 0.0;
	for (size_t i = i0; i < i1; i++)
		s += (double)__ldg(&le[i * nz + z]);
	part[(size_t)blockIdx.y * nz + z] = s;
}

__global__ void k_motion_profile_sum(const double *__restrict__ part, int chunks, size_t n, int nz,
                                     double *__restrict__ prof)
{
	const int z = blockIdx.x * blockDim.x + threadIdx.x;
	if (z >= nz)
		return;
	double s = 0.0;
	for (int c = 0; c < chunks; c++)
		s += part[(size_t)c * nz + z];
	prof[z] = s / (double)n;
}

/* be_motion_shifted with its products rounded separately. */
static __device__ __forceinline__ float gpu_shifted(const float *__restrict__ l, int k, float fa,
                                                    float fb, int z, int Z)
{
	const long long i = (long long)z - k;
	if (fa == 0.0f)
		return i >= 0 && i < Z ? __ldg(&l[i]) : 0.0f;
	if (i < 1 || i >= Z)
		return 0.0f;
	return __fadd_rn(__fmul_rn(fa, __ldg(&l[i - 1])), __fmul_rn(fb, __ldg(&l[i])));
}

/* One thread per (A-scan, band), grid-strided: be_motion_bands' sum over the band's bins in
 * double, in order, so that the bands equal the host's bit for bit. */
__global__ void k_motion_bands(const float *__restrict__ le, size_t n, int nz, int k, float fa,
                               float fb, float *__restrict__ Be)
{
	const size_t nb = n * BE_MOTION_NB;
	for (size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x; t < nb;
	     t += (size_t)gridDim.x * blockDim.x) {
		const size_t node = t / BE_MOTION_NB;
		const int b = (int)(t - node * BE_MOTION_NB);
		const int z0 = (int)((long long)b * nz / BE_MOTION_NB);
		const int z1 = (int)((long long)(b + 1) * nz / BE_MOTION_NB);
		const float *l = le + node * nz;
		double s = 0.0;
		for (int z = z0; z < z1; z++)
			s += (double)gpu_shifted(l, k, fa, fb, z, nz);
		Be[t] = z1 > z0 ? (float)(s / (double)(z1 - z0)) : 0.0f;
	}
}

/* One warp per (entry, A-scan), grid-strided over warps: the entry bands of the ne entries
 * (be_motion_entry_bands of each entry's history slot, shifted as the entry says). Each band's
 * bins are summed in double by the lanes (bins lane, lane + 32, ... in order), then over the
 * lanes: the order differs from the CPU's only below the double's rounding, which the float
 * result absorbs. */
__global__ void k_motion_ebands(const float *__restrict__ hist,
                                const be_motion_entry *__restrict__ en, uint32_t ne, size_t n,
                                int nz, float *__restrict__ eb)
{
	const int lane = threadIdx.x & 31;
	const size_t vol = n * (size_t)nz, all = n * ne;
	const size_t warps = (size_t)gridDim.x * blockDim.x / 32;
	for (size_t w = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; w < all; w += warps) {
		const size_t j = w / n, node = w - j * n;
		const be_motion_entry e = en[j];
		const float *l = hist + e.slot * vol + node * nz;
		for (int b = 0; b < BE_MOTION_NB; b++) {
			const int z0 = (int)((long long)b * nz / BE_MOTION_NB);
			const int z1 = (int)((long long)(b + 1) * nz / BE_MOTION_NB);
			double s = 0.0;
			for (int z = z0 + lane; z < z1; z += 32)
				s += (double)gpu_shifted(l, e.k, e.fa, e.fb, z, nz);
			for (int o = 16; o > 0; o >>= 1)
				s += __shfl_xor_sync(0xffffffffu, s, o);
			if (lane == 0)
				eb[w * BE_MOTION_NB + b] =
				        z1 > z0 ? (float)(s / (double)(z1 - z0)) : 0.0f;
		}
	}
}

/* One thread per output column, grid-strided: the registration's reference bands from the
 * reference picks pkr and the entry bands eb of ne entries (be_motion_ref_column; the newest
 * epoch's interpolation from the last entry's bands on the axes axy). */
__global__ void k_motion_ref(be_motion_geom g, const be_motion_pick *__restrict__ pkr,
                             const float *__restrict__ eb, uint32_t ne,
                             const int4 *__restrict__ axy, float *__restrict__ ob)
{
	const size_t cols = (size_t)g.Y * g.X, nodes = (size_t)g.ny * g.nx;
	const float *b0 = eb + (size_t)(ne - 1) * nodes * BE_MOTION_NB;
	for (size_t c = (size_t)blockIdx.x * blockDim.x + threadIdx.x; c < cols;
	     c += (size_t)gridDim.x * blockDim.x) {
		const uint32_t yy = (uint32_t)(c / g.X), xx = (uint32_t)(c % g.X);
		const be_motion_pick *q = pkr + c;
		double cb[BE_MOTION_NB] = {0};
		if (q->n == 0 || q->a < 1.0f) {
			const int4 ay = axy[g.X + yy], ax = axy[xx];
			const size_t y0 = (size_t)ay.x * g.nx, y1 = (size_t)ay.y * g.nx;
			be_motion_current_bands(
			        b0 + (y0 + ax.x) * BE_MOTION_NB, b0 + (y0 + ax.y) * BE_MOTION_NB,
			        b0 + (y1 + ax.x) * BE_MOTION_NB, b0 + (y1 + ax.y) * BE_MOTION_NB,
			        __int_as_float(ay.z), __int_as_float(ax.z), cb);
		}
		be_motion_ref_column(q, eb, nodes, cb, ob + c * BE_MOTION_NB);
	}
}

#define GPU_PICK_WARPS 4   /* warps (columns at a time) of a block of k_motion_picks_w */
#define GPU_PICK_MAXE  128 /* entries it takes at most (more: k_motion_picks) */

/* A warp's shared memory in k_motion_picks_w: the entries' samples, the column's picks, its
 * kriging system. */
struct gpu_pick_ws {
	double cd[GPU_PICK_MAXE], cqx[GPU_PICK_MAXE], cqy[GPU_PICK_MAXE];
	uint32_t cnode[GPU_PICK_MAXE];
	double d[BE_MOTION_M + 1], cx[BE_MOTION_M + 1], cy[BE_MOTION_M + 1], tp[BE_MOTION_M];
	uint32_t en[BE_MOTION_M + 1], nd[BE_MOTION_M + 1];
	double a[(BE_MOTION_M + 1) * (BE_MOTION_M + 1)], b[BE_MOTION_M + 1];
	double f[BE_MOTION_M + 1]; /* the elimination's row factors */
};

/* Pair pi of the ordering (0,1), (0,2), (1,2), (0,3), ... (i < j, by j then i) into *i, *j. */
static __device__ void gpu_pick_pair(uint32_t pi, uint32_t *i, uint32_t *j)
{
	uint32_t jj = (uint32_t)((1.0f + sqrtf(1.0f + 8.0f * (float)pi)) * 0.5f);
	while (jj * (jj - 1) / 2 > pi)
		jj--;
	while ((jj + 1) * jj / 2 <= pi)
		jj++;
	*j = jj;
	*i = pi - jj * (jj - 1) / 2;
}

/* The lane holding the greatest of the lanes' v (non-negative: their bit patterns order as
 * the numbers do), the lowest such lane on ties (be_motion_solve's first maximum); *ok: that
 * maximum is above 0. */
static __device__ uint32_t gpu_pivot_row(double v, bool *ok)
{
	const unsigned FULL = 0xffffffffu;
	const unsigned long long u = (unsigned long long)__double_as_longlong(v);
	const unsigned hi = (unsigned)(u >> 32), lo = (unsigned)u;
#if __CUDA_ARCH__ >= 800
	const unsigned mh = __reduce_max_sync(FULL, hi);
	const unsigned ml = __reduce_max_sync(FULL, hi == mh ? lo : 0u);
#else
	unsigned mh = hi, ml;
	for (int o = 16; o > 0; o >>= 1)
		mh = max(mh, __shfl_xor_sync(FULL, mh, o));
	ml = hi == mh ? lo : 0u;
	for (int o = 16; o > 0; o >>= 1)
		ml = max(ml, __shfl_xor_sync(FULL, ml, o));
#endif
	const unsigned win = __ballot_sync(FULL, hi == mh && lo == ml);
	*ok = (mh | ml) != 0u;
	return (uint32_t)(__ffs((int)win) - 1);
}

/* Step 1 of k_motion_picks_w: every entry's sample (beyond the cut rc: infinitely far) into
 * the warp's w, each lane entries lane, lane + 32, ...; returns how many are within the cut. */
static __device__ __forceinline__ uint32_t gpu_pick_samples(const be_motion_geom &g,
                                                            const be_motion_entry *__restrict__ en,
                                                            uint32_t ne, double Px, double Py,
                                                            double rc, gpu_pick_ws &w, int lane)
{
	const unsigned FULL = 0xffffffffu;
	uint32_t inside = 0;

	for (uint32_t j0 = 0; j0 < ne; j0 += 32) {
		const uint32_t j = j0 + lane;
		double dd = INFINITY;
		if (j < ne) {
			double qx, qy;
			uint32_t node;
			dd = be_motion_candidate(&g, &en[j], Px, Py, &qx, &qy, &node);
			dd = dd < rc ? dd : INFINITY;
			w.cqx[j] = qx;
			w.cqy[j] = qy;
			w.cnode[j] = node;
			w.cd[j] = dd;
		}
		inside += __popc(__ballot_sync(FULL, dd < INFINITY));
	}
	__syncwarp();
	return inside;
}

/* Step 2: the M + 1 nearest samples, in order of distance, then entry, each placed by its
 * rank. */
static __device__ __forceinline__ void gpu_pick_nearest(gpu_pick_ws &w, uint32_t ne, int lane)
{
	for (uint32_t j = lane; j < ne; j += 32) {
		const double dj = w.cd[j];
		if (!(dj < INFINITY))
			continue;
		uint32_t r = 0;
		for (uint32_t i = 0; i < ne && r < BE_MOTION_M + 1; i++)
			r += w.cd[i] < dj || (w.cd[i] == dj && i < j);
		if (r < BE_MOTION_M + 1) {
			w.d[r] = dj;
			w.cx[r] = w.cqx[j];
			w.cy[r] = w.cqy[j];
			w.en[r] = j;
			w.nd[r] = w.cnode[j];
		}
	}
	__syncwarp();
}

/* Step 3: the cut and the taper of the n nearest: the samples it leaves, in order, with their
 * taper in w.tp; q's count and coverage. Returns the samples left. */
static __device__ __forceinline__ uint32_t gpu_pick_taper(gpu_pick_ws &w, uint32_t n, double rc,
                                                          int lane, be_motion_pick *q)
{
	const unsigned FULL = 0xffffffffu;
	const double D = n == BE_MOTION_M + 1 ? w.d[BE_MOTION_M] : rc;
	const bool mine = (uint32_t)lane < n && lane < BE_MOTION_M;
	double t = 0.0, dl = 0.0, xl = 0.0, yl = 0.0;
	uint32_t el = 0, nl = 0;

	if (mine) {
		dl = w.d[lane];
		xl = w.cx[lane];
		yl = w.cy[lane];
		el = w.en[lane];
		nl = w.nd[lane];
		t = be_motion_taper(dl / D);
	}
	const unsigned keep = __ballot_sync(FULL, mine && t > 0.0);
	const uint32_t nk = __popc(keep);
	__syncwarp();
	if (keep & (1u << lane)) {
		const int k = __popc(keep & ((1u << lane) - 1u));
		w.d[k] = dl;
		w.cx[k] = xl;
		w.cy[k] = yl;
		w.en[k] = el;
		w.nd[k] = nl;
		w.tp[k] = t;
	}
	__syncwarp();
	if (lane == 0) {
		double rest = 1.0;
		for (uint32_t i = 0; i < nk; i++)
			rest *= 1.0 - w.tp[i];
		q->n = nk;
		q->a = (float)(1.0 - rest);
	}
	return nk;
}

/* Step 4: the kriging system of nk samples, symmetric: each pair's exp once (gpu_pick_pair:
 * the pairs i < j with j < nk are the first nk (nk - 1) / 2), spread over the lanes; lane i
 * its diagonal, right-hand side and border, lane nk the constraint's row. */
static __device__ __forceinline__ void gpu_pick_system(gpu_pick_ws &w, uint32_t nk, double i2l,
                                                       int lane)
{
	const uint32_t m = nk + 1, np = nk * (nk - 1) / 2;

	for (uint32_t pi = lane; pi < np; pi += 32) {
		uint32_t i, j;
		gpu_pick_pair(pi, &i, &j);
		const double dx = __dsub_rn(w.cx[i], w.cx[j]);
		const double dy = __dsub_rn(w.cy[i], w.cy[j]);
		const double v =
		        exp(__dmul_rn(-__dadd_rn(__dmul_rn(dx, dx), __dmul_rn(dy, dy)), i2l));
		w.a[i * m + j] = v;
		w.a[j * m + i] = v;
	}
	if ((uint32_t)lane < nk) {
		const int i = lane;
		w.a[i * m + i] = __dadd_rn(1.0, __ddiv_rn(BE_MOTION_NUGGET, w.tp[i]));
		w.a[i * m + nk] = 1.0;
		w.a[nk * m + i] = 1.0;
		w.b[i] = exp(__dmul_rn(__dmul_rn(-w.d[i], w.d[i]), i2l));
	} else if ((uint32_t)lane == nk) {
		w.a[nk * m + nk] = 0.0;
		w.b[nk] = 1.0;
	}
	__syncwarp();
}

/* Step 5: elimination with partial pivoting of the m x m system (be_motion_solve): the pivot
 * by a reduction over the rows' lanes; each row's factor on its lane, then the updates a
 * column a lane (each value's operations as the host's, in any order). False when singular. */
static __device__ __forceinline__ bool gpu_pick_eliminate(gpu_pick_ws &w, uint32_t m, int lane)
{
	bool ok = true;

	for (uint32_t cc = 0; cc < m; cc++) {
		const uint32_t pr = gpu_pivot_row(
		        (uint32_t)lane >= cc && (uint32_t)lane < m ? fabs(w.a[lane * m + cc]) : 0.0,
		        &ok);
		if (!ok)
			break;
		if (pr != cc) {
			for (uint32_t j = cc + lane; j < m; j += 32) {
				const double tt = w.a[cc * m + j];
				w.a[cc * m + j] = w.a[pr * m + j];
				w.a[pr * m + j] = tt;
			}
			if (lane == 0) {
				const double tt = w.b[cc];
				w.b[cc] = w.b[pr];
				w.b[pr] = tt;
			}
			__syncwarp();
		}
		if ((uint32_t)lane > cc && (uint32_t)lane < m) {
			const double f = __ddiv_rn(w.a[lane * m + cc], w.a[cc * m + cc]);
			w.f[lane] = f;
			if (f != 0.0)
				w.b[lane] = __dsub_rn(w.b[lane], __dmul_rn(f, w.b[cc]));
		}
		__syncwarp();
		const uint32_t j = cc + 1 + lane;
		if (j < m) {
			const double acj = w.a[cc * m + j];
			for (uint32_t r = cc + 1; r < m; r++) {
				const double f = w.f[r];
				if (f != 0.0)
					w.a[r * m + j] =
					        __dsub_rn(w.a[r * m + j], __dmul_rn(f, acj));
			}
		}
		__syncwarp();
	}
	return ok;
}

/* Step 6: back substitution (be_motion_solve): row r on lane r subtracts the unknowns from the
 * last one back, each as soon as it is known; the nk weights into q. */
static __device__ __forceinline__ void gpu_pick_solve_back(gpu_pick_ws &w, uint32_t nk, int lane,
                                                           be_motion_pick *q)
{
	const unsigned FULL = 0xffffffffu;
	const uint32_t m = nk + 1;
	double v = (uint32_t)lane < m ? w.b[lane] : 0.0;

	for (uint32_t cc = m; cc-- > 0;) {
		double x = 0.0;
		if ((uint32_t)lane == cc)
			x = __ddiv_rn(v, w.a[cc * m + cc]);
		x = __shfl_sync(FULL, x, (int)cc);
		if ((uint32_t)lane < cc)
			v = __dsub_rn(v, __dmul_rn(w.a[lane * m + cc], x));
		else if ((uint32_t)lane == cc)
			v = x;
	}
	if ((uint32_t)lane < nk) {
		q->entry[lane] = w.en[lane];
		q->node[lane] = w.nd[lane];
		q->w[lane] = (float)v;
	}
	__syncwarp();
}

/*
 * be_motion_column by a warp, one output column of rows [y0, y1) at a time (grid-strided),
 * with the same result: each lane the samples of entries lane, lane + 32, ...
 * (be_motion_candidate); the M + 1 nearest by distance, then entry (the insertion sort's
 * order), each placed by its rank; the taper; the kriging system (its pairs spread over the
 * lanes) solved by Gaussian elimination with partial pivoting (the pivot by a warp reduction,
 * the updates a column a lane) and the back substitution (a row a lane, each unknown handed
 * to the rows above as soon as it is known), every product and sum rounded as the host's (no
 * contraction).
 */
__global__ void __launch_bounds__(32 * GPU_PICK_WARPS)
        k_motion_picks_w(be_motion_geom g, const be_motion_entry *__restrict__ en, uint32_t ne,
                         int y0, int y1, be_motion_pick *__restrict__ pk)
{
	__shared__ gpu_pick_ws wsa[GPU_PICK_WARPS];
	const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
	gpu_pick_ws &w = wsa[wid];
	const size_t cols = (size_t)(y1 - y0) * g.X, nw = (size_t)gridDim.x * GPU_PICK_WARPS;
	const double hX = (double)g.X / 2.0, hY = (double)g.Y / 2.0;
	const double i2l = 1.0 / (2.0 * BE_MOTION_ELL * BE_MOTION_ELL);
	double rc = BE_MOTION_R;
	rc = 0.5 * g.sx < rc ? 0.5 * g.sx : rc;
	rc = 0.5 * g.sy < rc ? 0.5 * g.sy : rc;

	for (size_t c = (size_t)blockIdx.x * GPU_PICK_WARPS + wid; c < cols; c += nw) {
		const uint32_t yy = y0 + (uint32_t)(c / g.X), xx = (uint32_t)(c % g.X);
		const double Px = (double)xx + 0.5 - hX, Py = (double)yy + 0.5 - hY;
		be_motion_pick *q = pk + (size_t)yy * g.X + xx;
		const uint32_t inside = gpu_pick_samples(g, en, ne, Px, Py, rc, w, lane);
		gpu_pick_nearest(w, ne, lane);
		const uint32_t n = inside < BE_MOTION_M + 1 ? inside : BE_MOTION_M + 1;
		const uint32_t nk = gpu_pick_taper(w, n, rc, lane, q);
		if (nk == 0)
			continue;
		gpu_pick_system(w, nk, i2l, lane);
		if (gpu_pick_eliminate(w, nk + 1, lane)) {
			gpu_pick_solve_back(w, nk, lane, q);
			continue;
		}
		/* cannot happen with a nugget > 0; the nearest sample alone then */
		if (lane == 0) {
			q->n = 1;
			q->entry[0] = w.en[0];
			q->node[0] = w.nd[0];
			q->w[0] = 1.0f;
		}
		__syncwarp();
	}
}

/* The reference's blur taps (be_motion_blur_taps), by value. */
struct gpu_blur_taps {
	double k[BE_MOTION_BLUR_TAPS];
	int r;
};

/* be_motion_set_reference's blur along Y: one thread per value of [Y][X * NB], each summed
 * over the taps in order in double, every product and sum rounded as the host's. */
__global__ void k_motion_blur_y(gpu_blur_taps t, const float *__restrict__ in, int Y, int row,
                                float *__restrict__ out)
{
	const size_t n = (size_t)Y * row;
	for (size_t q = (size_t)blockIdx.x * blockDim.x + threadIdx.x; q < n;
	     q += (size_t)gridDim.x * blockDim.x) {
		const int y = (int)(q / row), j = (int)(q - (size_t)y * row);
		double acc = 0.0;
		for (int i = -t.r; i <= t.r; i++) {
			int yy = y + i;
			yy = yy < 0 ? 0 : yy >= Y ? Y - 1 : yy;
			acc = __dadd_rn(acc,
			                __dmul_rn(t.k[i + t.r], (double)in[(size_t)yy * row + j]));
		}
		out[q] = (float)acc;
	}
}

/* ... and along X, over [Y][X][NB]. */
__global__ void k_motion_blur_x(gpu_blur_taps t, const float *__restrict__ in, int Y, int X,
                                float *__restrict__ out)
{
	const size_t n = (size_t)Y * X * BE_MOTION_NB;
	for (size_t q = (size_t)blockIdx.x * blockDim.x + threadIdx.x; q < n;
	     q += (size_t)gridDim.x * blockDim.x) {
		const size_t yx = q / BE_MOTION_NB;
		const int b = (int)(q - yx * BE_MOTION_NB), y = (int)(yx / X), x = (int)(yx % X);
		double a = 0.0;
		for (int i = -t.r; i <= t.r; i++) {
			int xx = x + i;
			xx = xx < 0 ? 0 : xx >= X ? X - 1 : xx;
			a = __dadd_rn(
			        a, __dmul_rn(t.k[i + t.r],
			                     (double)in[((size_t)y * X + xx) * BE_MOTION_NB + b]));
		}
		out[q] = (float)a;
	}
}

/* One thread per output column of rows [y0, y1), grid-strided: its picks (be_motion_column,
 * the host's code) over the ne entries, and over the first nref when nref > 0. */
__global__ void __launch_bounds__(64)
        k_motion_picks(be_motion_geom g, const be_motion_entry *__restrict__ en, uint32_t ne,
                       uint32_t nref, int y0, int y1, be_motion_pick *__restrict__ pk,
                       be_motion_pick *__restrict__ pkr)
{
	const size_t n = (size_t)(y1 - y0) * g.X;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		const uint32_t yy = y0 + (uint32_t)(i / g.X), xx = (uint32_t)(i % g.X);
		const size_t col = (size_t)yy * g.X + xx;
		be_motion_pick q;
		be_motion_column(&g, en, ne, yy, xx, &q);
		pk[col] = q;
		if (nref > 0) {
			be_motion_column(&g, en, nref, yy, xx, &q);
			pkr[col] = q;
		}
	}
}

/* The samples of one column's picks, in shared memory: A-scan, shift, weight. */
struct gpu_motion_taps {
	const float *l[BE_MOTION_M];
	int k[BE_MOTION_M];
	float fa[BE_MOTION_M], fb[BE_MOTION_M], w[BE_MOTION_M];
	int n;
	float a; /* the combination's weight against the newest epoch */
};

/* Tap i (< BE_MOTION_M) of column pick c into t, by thread i of the column's threads; thread 0
 * also writes the count and the blend weight. */
static __device__ __forceinline__ void gpu_motion_load(gpu_motion_taps &t, int i,
                                                       const be_motion_pick *__restrict__ c,
                                                       const be_motion_entry *__restrict__ en,
                                                       const float *__restrict__ hist, size_t vol,
                                                       int Z)
{
	const int n = (int)c->n;
	if (i == 0) {
		t.n = n;
		t.a = c->a;
	}
	if (i < n) {
		const be_motion_entry *e = &en[c->entry[i]];
		t.l[i] = hist + e->slot * vol + (size_t)c->node[i] * Z;
		t.k[i] = e->k;
		t.fa[i] = e->fa;
		t.fb[i] = e->fb;
		t.w[i] = c->w[i];
	}
}

/* cpu_quantize: truncation toward zero of 255 v + 0.5 */
static __device__ __forceinline__ uint8_t gpu_quantize8(float v)
{
	return (uint8_t)__float2int_rz(__fadd_rn(__fmul_rn(255.0f, v), 0.5f));
}

/* The kriging combination of taps t at depth z, summed in pick order as cpu/motion.c. */
static __device__ __forceinline__ float gpu_combine(const gpu_motion_taps &t, int z, int Z)
{
	float s = 0.0f;
	for (int i = 0; i < t.n; i++)
		s = __fadd_rn(
		        s, __fmul_rn(t.w[i], gpu_shifted(t.l[i], t.k[i], t.fa[i], t.fb[i], z, Z)));
	/* kriging weights may be negative: clamped to the normalized range (cpu/motion.c) */
	return fminf(fmaxf(s, 0.0f), 1.0f);
}

/* The value of column (yy, xx) at depth z (cpu/motion.c column()): the combination blended by
 * a with the newest epoch's interpolation, rounded as the CPU. */
static __device__ __forceinline__ float
gpu_motion_value(const gpu_motion_taps &t, const gpu_recon_params &p, const float *__restrict__ le,
                 const int4 *__restrict__ axy, const longlong2 *__restrict__ aoff, int yy, int xx,
                 int z)
{
	if (t.n == 0)
		return gpu_current(p, le, axy, aoff, yy, xx, z);
	const float s = gpu_combine(t, z, p.nz);
	if (!(t.a < 1.0f))
		return s;
	const float c = gpu_current(p, le, axy, aoff, yy, xx, z);
	return __fadd_rn(__fmul_rn(t.a, s), __fmul_rn(__fsub_rn(1.0f, t.a), c));
}

/*
 * Grid (output columns of rows [y0, y1), BE_MOTION_NB bands), GPU_THREADS threads over the
 * band's depths: the bands are the slowest index, so that the blocks that run together read
 * the same depths of neighbouring history A-scans (L2); one column a block, so that blocks are
 * short and the next epoch's urgent preprocessing finds room between them. The column's picks
 * into shared memory; then the output at the band's depths (the combination, or the newest
 * epoch's interpolation where it has no sample), quantized as cpu_quantize, and, when ob is
 * not NULL (the reference is the output itself), the output's band mean in double (block sum;
 * its order differs from the CPU's only below the double's rounding, which the float result
 * absorbs).
 */
__global__ void __launch_bounds__(GPU_THREADS)
        k_motion(gpu_recon_params p, const float *__restrict__ hist,
                 const be_motion_entry *__restrict__ en, const be_motion_pick *__restrict__ pk,
                 const float *__restrict__ le, const int4 *__restrict__ axy,
                 const longlong2 *__restrict__ aoff, int y0, uint8_t *__restrict__ out8,
                 float *__restrict__ outf, float *__restrict__ ob)
{
	__shared__ gpu_motion_taps tp;
	__shared__ double red[GPU_THREADS / 32 + 1];
	const int Z = p.nz, b = blockIdx.y;
	const int z0 = (int)((long long)b * Z / BE_MOTION_NB);
	const int z1 = (int)((long long)(b + 1) * Z / BE_MOTION_NB);
	const int yy = y0 + (int)(blockIdx.x / (unsigned)p.X);
	const int xx = (int)(blockIdx.x % (unsigned)p.X);
	const size_t vol = (size_t)p.ny * p.nx * Z, col = (size_t)yy * p.X + xx;

	if (threadIdx.x < BE_MOTION_M)
		gpu_motion_load(tp, threadIdx.x, pk + col, en, hist, vol, Z);
	__syncthreads();
	double acc = 0.0;
	for (int z = z0 + (int)threadIdx.x; z < z1; z += blockDim.x) {
		const float o = gpu_motion_value(tp, p, le, axy, aoff, yy, xx, z);
		const size_t i = col * Z + z;
		out8[i] = gpu_quantize8(o);
		if (outf)
			outf[i] = o;
		acc += (double)o;
	}
	if (ob) { /* the same for the whole block */
		const double s = gpu_block_sum(acc, red);
		if (threadIdx.x == 0)
			ob[col * BE_MOTION_NB + b] =
			        z1 > z0 ? (float)(s / (double)(z1 - z0)) : 0.0f;
	}
}

#define GPU_MOTION4_T 64 /* threads a column of k_motion4, 4 depths each */

/*
 * k_motion for Z a multiple of 32 (every band's depths a multiple of 4, every A-scan 16-byte
 * aligned): GPU_THREADS / GPU_MOTION4_T columns a block, 4 consecutive depths a thread. A
 * tap's 5 samples around them come from two aligned 16-byte loads (the tap's shift is the
 * same for the whole warp, so is their place in the 8 loaded), or one by one at the A-scan's
 * ends; every value is gpu_shifted's and is summed, clamped and blended as k_motion does.
 */
__global__ void __launch_bounds__(GPU_THREADS)
        k_motion4(gpu_recon_params p, const float *__restrict__ hist,
                  const be_motion_entry *__restrict__ en, const be_motion_pick *__restrict__ pk,
                  const float *__restrict__ le, const int4 *__restrict__ axy,
                  const longlong2 *__restrict__ aoff, int y0, int ncols, uint8_t *__restrict__ out8,
                  float *__restrict__ outf, float *__restrict__ ob)
{
	constexpr int CPB = GPU_THREADS / GPU_MOTION4_T;
	__shared__ gpu_motion_taps tps[CPB];
	__shared__ double red[GPU_THREADS / 32];
	const int Z = p.nz, b = blockIdx.y, cj = threadIdx.x / GPU_MOTION4_T;
	const int t = threadIdx.x % GPU_MOTION4_T;
	const int z0 = (int)((long long)b * Z / BE_MOTION_NB);
	const int z1 = (int)((long long)(b + 1) * Z / BE_MOTION_NB);
	const int c = blockIdx.x * CPB + cj;
	const bool have = c < ncols; /* the same for a column's threads */
	const int yy = y0 + c / p.X, xx = c % p.X;
	const size_t vol = (size_t)p.ny * p.nx * Z, col = (size_t)yy * p.X + xx;
	gpu_motion_taps &tp = tps[cj];

	if (have && t < BE_MOTION_M)
		gpu_motion_load(tp, t, pk + col, en, hist, vol, Z);
	__syncthreads();
	double acc = 0.0;
	for (int z = z0 + 4 * t; have && z < z1; z += 4 * GPU_MOTION4_T) {
		float o[4];
		if (tp.n == 0) {
			for (int j = 0; j < 4; j++)
				o[j] = gpu_current(p, le, axy, aoff, yy, xx, z + j);
		} else {
			float sm[4] = {0.0f, 0.0f, 0.0f, 0.0f};
			for (int i = 0; i < tp.n; i++) {
				const float *l = tp.l[i];
				const int k = tp.k[i];
				const float fa = tp.fa[i], fb = tp.fb[i], wi = tp.w[i];
				const int e0 =
				        z - k - 1; /* l[e0 .. e0 + 4]: the bins around z .. z + 3 */
				float v[4];
				if (e0 >= 0 && e0 + 4 < Z) {
					const int a0 = e0 & ~3, r = e0 - a0;
					const float4 A =
					        __ldg(reinterpret_cast<const float4 *>(l + a0));
					const float4 B =
					        __ldg(reinterpret_cast<const float4 *>(l + a0 + 4));
					float x[5];
					switch (r) {
					case 0:
						x[0] = A.x, x[1] = A.y, x[2] = A.z, x[3] = A.w,
						x[4] = B.x;
						break;
					case 1:
						x[0] = A.y, x[1] = A.z, x[2] = A.w, x[3] = B.x,
						x[4] = B.y;
						break;
					case 2:
						x[0] = A.z, x[1] = A.w, x[2] = B.x, x[3] = B.y,
						x[4] = B.z;
						break;
					default:
						x[0] = A.w, x[1] = B.x, x[2] = B.y, x[3] = B.z,
						x[4] = B.w;
						break;
					}
					for (int j = 0; j < 4; j++)
						v[j] = fa == 0.0f
						               ? x[j + 1]
						               : __fadd_rn(__fmul_rn(fa, x[j]),
						                           __fmul_rn(fb, x[j + 1]));
				} else {
					for (int j = 0; j < 4; j++)
						v[j] = gpu_shifted(l, k, fa, fb, z + j, Z);
				}
				for (int j = 0; j < 4; j++)
					sm[j] = __fadd_rn(sm[j], __fmul_rn(wi, v[j]));
			}
			for (int j = 0; j < 4; j++) {
				/* kriging weights may be negative: clamped (cpu/motion.c) */
				const float sv = fminf(fmaxf(sm[j], 0.0f), 1.0f);
				if (tp.a < 1.0f) {
					const float cv =
					        gpu_current(p, le, axy, aoff, yy, xx, z + j);
					o[j] = __fadd_rn(__fmul_rn(tp.a, sv),
					                 __fmul_rn(__fsub_rn(1.0f, tp.a), cv));
				} else {
					o[j] = sv;
				}
			}
		}
		uchar4 q8;
		q8.x = gpu_quantize8(o[0]);
		q8.y = gpu_quantize8(o[1]);
		q8.z = gpu_quantize8(o[2]);
		q8.w = gpu_quantize8(o[3]);
		*reinterpret_cast<uchar4 *>(out8 + col * Z + z) = q8;
		if (outf)
			*reinterpret_cast<float4 *>(outf + col * Z + z) =
			        make_float4(o[0], o[1], o[2], o[3]);
		acc += (double)o[0];
		acc += (double)o[1];
		acc += (double)o[2];
		acc += (double)o[3];
	}
	if (ob) { /* the output's band mean: per warp, then the column's two warps */
		for (int off = 16; off > 0; off >>= 1)
			acc += __shfl_down_sync(0xffffffffu, acc, off);
		if ((threadIdx.x & 31) == 0)
			red[threadIdx.x >> 5] = acc;
		__syncthreads();
		if (have && t == 0) {
			double sum = 0.0;
			for (int w = 0; w < GPU_MOTION4_T / 32; w++)
				sum += red[cj * (GPU_MOTION4_T / 32) + w];
			ob[col * BE_MOTION_NB + b] =
			        z1 > z0 ? (float)(sum / (double)(z1 - z0)) : 0.0f;
		}
	}
}

__global__ void k_quantize(const float *in, uint8_t *out, size_t n)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		out[i] = (uint8_t)fminf(fmaxf(floorf(255.0f * in[i] + 0.5f), 0.0f), 255.0f);
}

/* dst[i] = src[i], i < n: in float4 when v4 (both 16-byte aligned, n a multiple of 4). */
__global__ void k_copy(const float *__restrict__ src, float *__restrict__ dst, size_t n, bool v4)
{
	const size_t step = (size_t)gridDim.x * blockDim.x;
	size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (v4) {
		const float4 *s4 = reinterpret_cast<const float4 *>(src);
		float4 *d4 = reinterpret_cast<float4 *>(dst);
		for (; i < n / 4; i += step)
			d4[i] = s4[i];
	} else {
		for (; i < n; i += step)
			dst[i] = src[i];
	}
}

/* ---- launchers ----------------------------------------------------------------------------- */

static unsigned gpu_blocks(size_t n)
{
	size_t b = (n + GPU_THREADS - 1) / GPU_THREADS;
	return (unsigned)(b > 65536 ? 65536 : (b ? b : 1));
}

/* f(std::integral_constant<int, ST>()) for the raw sample type st (CFG_SAMPLE_F32 for any other
 * value): a launcher names its kernel once for every sample type. */
template <typename F> static void gpu_by_sample(int st, F f)
{
	switch (st) {
	case CFG_SAMPLE_U16:
		f(std::integral_constant<int, CFG_SAMPLE_U16>());
		break;
	case CFG_SAMPLE_I16:
		f(std::integral_constant<int, CFG_SAMPLE_I16>());
		break;
	case CFG_SAMPLE_U12P:
		f(std::integral_constant<int, CFG_SAMPLE_U12P>());
		break;
	case CFG_SAMPLE_U12GV:
		f(std::integral_constant<int, CFG_SAMPLE_U12GV>());
		break;
	default:
		f(std::integral_constant<int, CFG_SAMPLE_F32>());
		break;
	}
}

extern "C" cudaError_t gpu_launch_nonfinite(const gpu_prep_params *p, const void *raw, int nrep,
                                            const gpu_miss *m, cudaStream_t s)
{
	cudaError_t e = cudaMemsetAsync(m->count, 0, sizeof(unsigned), s);
	if (e != cudaSuccess)
		return e;
	k_nonfinite<<<(unsigned)p->nx, GPU_THREADS, 0, s>>>((const float *)raw, p->K, p->nx, nrep,
	                                                    *m);
	return cudaGetLastError();
}

extern "C" cudaError_t gpu_launch_fill_missing(const gpu_prep_params *p, const gpu_miss *m,
                                               float *lerow, cudaStream_t s)
{
	dim3 g((p->nz + GPU_THREADS - 1) / GPU_THREADS, p->nx);
	k_fill_missing<<<g, GPU_THREADS, 0, s>>>(*m, p->nx, p->nz, lerow);
	return cudaGetLastError();
}

extern "C" cudaError_t gpu_launch_colstat(const gpu_prep_params *p, const void *raw,
                                          const gpu_miss *m, float *col, cudaStream_t s)
{
	if (p->background == CFG_BG_BSCAN_MEAN || p->background == CFG_BG_PARTIAL_MEDIAN) {
		dim3 g((p->K + GPU_THREADS - 1) / GPU_THREADS);
		gpu_by_sample(p->sample_type, [&](auto st) {
			constexpr int ST = decltype(st)::value;
			using T = typename gpu_sample<ST>::type;
			k_colmean<ST><<<g, GPU_THREADS, 0, s>>>((const T *)raw, p->K, p->nx,
			                                        p->bit_shift, *m, col);
		});
		return cudaGetLastError();
	}
	int n2 = 1;
	while (n2 < p->nx)
		n2 <<= 1;
	const int threads = n2 / 2 < 32 ? 32 : (n2 / 2 > 1024 ? 1024 : n2 / 2);
	const size_t shm = sizeof(float) * (size_t)n2;
	gpu_by_sample(p->sample_type, [&](auto st) {
		constexpr int ST = decltype(st)::value;
		using T = typename gpu_sample<ST>::type;
		k_colmedian<ST><<<p->K, threads, shm, s>>>((const T *)raw, p->K, p->nx, n2,
		                                           p->bit_shift, *m, col);
	});
	return cudaGetLastError();
}

extern "C" cudaError_t gpu_launch_partial_median(const gpu_prep_params *p, const float2 *spec,
                                                 int ld, const gpu_pm_buffers *m,
                                                 const gpu_miss *ms, unsigned *count,
                                                 bool count_max, cudaStream_t s)
{
	const int half = p->half, nx = p->nx;
	const int chunks = nx < GPU_PM_CHUNKS ? nx : GPU_PM_CHUNKS;
	const int per = (nx + chunks - 1) / chunks;
	const unsigned zb = (unsigned)((half + GPU_THREADS - 1) / GPU_THREADS);
	k_pm_partial<<<dim3(zb, (unsigned)chunks), GPU_THREADS, 0, s>>>(spec, ld, nx, half, per,
	                                                                m->part);
	k_pm_sigma<<<zb, GPU_THREADS, 0, s>>>(m->part, chunks, nx, *ms, half, m->sig);
	k_pm_select<<<1, 1024, 0, s>>>(m->sig, half, p->pm_threshold, m->list, m->nsel, count,
	                               count_max, m->C);
	int n2 = 1;
	while (n2 < nx)
		n2 <<= 1;
	const int threads = n2 / 2 < 32 ? 32 : (n2 / 2 > 1024 ? 1024 : n2 / 2);
	const unsigned blocks = (unsigned)(half < 65535 ? half : 65535);
	k_pm_median<<<blocks, threads, sizeof(float) * (size_t)n2, s>>>(spec, ld, nx, n2, *ms,
	                                                                m->list, m->nsel, m->C);
	return cudaGetLastError();
}

#define GPU_CONV_PER_THREAD 4 /* samples per thread of k_convert */

template <bool DIRECT>
static void gpu_convert_t(const gpu_prep_params *p, const gpu_prep_tables *t, const void *raw,
                          const gpu_miss *m, const float *col, float *conv, void *fin,
                          cudaStream_t s)
{
	const int len = DIRECT ? p->N : p->K;
	const int per_block = GPU_THREADS * GPU_CONV_PER_THREAD;
	const dim3 g((unsigned)((len + per_block - 1) / per_block), (unsigned)p->nx);
	/* rows of 16-byte multiples from a cudaMalloc'd (256-byte aligned) base; packed rows of
	 * K % 8 == 0 samples are 12-byte multiples, read as 4-byte words */
	const bool aligned = ((uintptr_t)raw & 15u) == 0;
	gpu_by_sample(p->sample_type, [&](auto st) {
		constexpr int ST = decltype(st)::value;
		using T = typename gpu_sample<ST>::type;
		const int vec = ST == CFG_SAMPLE_F32 ? 4 : 8;
		k_convert<ST, DIRECT><<<g, GPU_THREADS, 0, s>>>(
		        *p, *t, (const T *)raw, *m, col, conv, fin, aligned && p->K % vec == 0);
	});
}

extern "C" cudaError_t gpu_launch_convert(const gpu_prep_params *p, const gpu_prep_tables *t,
                                          const void *raw, const gpu_miss *m, const float *col,
                                          float *conv, void *fin, cudaStream_t s)
{
	if (p->taps == 0)
		gpu_convert_t<true>(p, t, raw, m, col, conv, fin, s);
	else
		gpu_convert_t<false>(p, t, raw, m, col, conv, fin, s);
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
                                         bool reverse_x, const float2 *C, float *lerow,
                                         cudaStream_t s)
{
	dim3 g((p->nz + GPU_THREADS - 1) / GPU_THREADS, p->nx);
	k_logmag<<<g, GPU_THREADS, 0, s>>>(*p, spec, ld, reverse_x, C, lerow);
	return cudaGetLastError();
}

extern "C" cudaError_t gpu_launch_power_add(const gpu_prep_params *p, const float2 *spec, int ld,
                                            bool reverse_x, const float2 *C, bool first,
                                            float *lerow, cudaStream_t s)
{
	dim3 g((p->nz + GPU_THREADS - 1) / GPU_THREADS, p->nx);
	k_power_add<<<g, GPU_THREADS, 0, s>>>(*p, spec, ld, reverse_x, C, first, lerow);
	return cudaGetLastError();
}

extern "C" cudaError_t gpu_launch_logpower(const gpu_prep_params *p, float inv_m, float *lerow,
                                           cudaStream_t s)
{
	dim3 g((p->nz + GPU_THREADS - 1) / GPU_THREADS, p->nx);
	k_logpower<<<g, GPU_THREADS, 0, s>>>(*p, inv_m, lerow);
	return cudaGetLastError();
}

extern "C" cudaError_t gpu_launch_fn_store(const gpu_prep_params *p, const float2 *spec, int ld,
                                           bool reverse_x, const float2 *C, int m, float2 *fspec,
                                           float *lerow, bool first, cudaStream_t s)
{
	dim3 g((p->half + GPU_THREADS - 1) / GPU_THREADS, p->nx);
	k_fn_store<<<g, GPU_THREADS, 0, s>>>(*p, spec, ld, reverse_x, C, m, fspec, lerow, first);
	return cudaGetLastError();
}

#define GPU_FN_THREADS 128 /* depths per block of k_fn_values */

extern "C" cudaError_t gpu_launch_functional(const gpu_fn_params *f, const float2 *fspec,
                                             unsigned char *keep, float2 *bulk, float *la,
                                             float *lre, float *lim, float *ph, cudaStream_t s)
{
	if (f->M < 1 || f->M > (int)BE_FN_M_MAX || f->nz < 1 || f->nx < 1 || f->nz > f->nh ||
	    (f->doppler && !f->doppler_ascan && f->M < 2) || (f->angio && f->M < 2))
		return cudaErrorInvalidValue;
	const float *X = (const float *)fspec;
	k_fn_prep<<<(unsigned)f->nx, GPU_FN_PREP_THREADS, 0, s>>>(*f, X, keep, bulk);
	cudaError_t e = cudaGetLastError();
	if (e != cudaSuccess)
		return e;
	const dim3 g((f->nz + GPU_FN_THREADS - 1) / GPU_FN_THREADS, f->nx);
	k_fn_values<<<g, GPU_FN_THREADS, 0, s>>>(*f, X, keep, bulk, f->angio ? la : NULL,
	                                         f->doppler ? lre : NULL, f->doppler ? lim : NULL,
	                                         f->doppler ? ph : NULL);
	return cudaGetLastError();
}

extern "C" cudaError_t gpu_launch_fn_phase(const float *re, const float *im, float *ph, size_t n,
                                           cudaStream_t s)
{
	k_fn_phase<<<gpu_blocks(n), GPU_THREADS, 0, s>>>(re, im, ph, n);
	return cudaGetLastError();
}

extern "C" cudaError_t gpu_launch_doppler_v(const float *re, const float *im, size_t n,
                                            uint8_t *out8, float *outf, cudaStream_t s)
{
	k_doppler_v<<<gpu_blocks(n), GPU_THREADS, 0, s>>>(re, im, n, out8, outf);
	return cudaGetLastError();
}

extern "C" cudaError_t gpu_launch_interlace(const gpu_recon_params *p, const float *le,
                                            const unsigned char *miss, float *B, long long *E,
                                            cudaStream_t s)
{
	const size_t ncols = (size_t)p->ny * p->nx;
	const unsigned gx = (unsigned)(ncols < (1u << 30) ? (ncols ? ncols : 1) : (1u << 30));
	const int zc = (p->nz + 4 * GPU_THREADS - 1) / (4 * GPU_THREADS); /* 4 depths a thread */
	const dim3 g(gx, (unsigned)(zc < 1 ? 1 : (zc > 65535 ? 65535 : zc)));
	k_interlace<<<g, GPU_THREADS, 0, s>>>(*p, le, miss, B, E);
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

extern "C" cudaError_t gpu_launch_weights(const gpu_recon_params *p, const float *tmap,
                                          const float *alpha, const float *beta, float *W,
                                          cudaStream_t s)
{
	const unsigned g = gpu_blocks((size_t)p->Y * p->X);
	if (p->fast)
		k_weights<true><<<g, GPU_THREADS, 0, s>>>(*p, tmap, alpha, beta, W);
	else
		k_weights<false><<<g, GPU_THREADS, 0, s>>>(*p, tmap, alpha, beta, W);
	return cudaGetLastError();
}

#define GPU_CHANGE_THREADS 32 /* one warp a block: the few samples spread over every SM */

extern "C" cudaError_t gpu_launch_adapt_change(const gpu_recon_params *p, const float *le,
                                               const float *B, const long long *E, float *delta,
                                               float *chg, cudaStream_t s)
{
	const size_t n = (size_t)p->ny * p->nx;
	const size_t tx = (n + GPU_TILE - 1) / GPU_TILE, tz = (p->nz + GPU_TILE - 1) / GPU_TILE;
	if (tx > 0x7fffffffu)
		return cudaErrorInvalidValue;
	const dim3 g((unsigned)tx, (unsigned)(tz > 65535 ? 65535 : (tz ? tz : 1)));
	k_adapt_delta<<<g, dim3(GPU_TILE, 8), 0, s>>>(*p, le, B, delta);
	cudaError_t e = cudaGetLastError();
	if (e != cudaSuccess)
		return e;
	const size_t b = (n + GPU_CHANGE_THREADS - 1) / GPU_CHANGE_THREADS;
	k_adapt_change<<<(unsigned)(b > 65536 ? 65536 : (b ? b : 1)), GPU_CHANGE_THREADS, 0, s>>>(
	        *p, delta, E, chg);
	return cudaGetLastError();
}

extern "C" cudaError_t gpu_launch_jump(const gpu_recon_params *p, const float *le,
                                       const unsigned char *miss, const float *chg, double *rows,
                                       double *mean, be_jump *j, long long *since, cudaStream_t s)
{
	k_jump_rows<<<gpu_blocks((size_t)p->ny * p->nz), GPU_THREADS, 0, s>>>(*p, le, miss, rows);
	cudaError_t e = cudaGetLastError();
	if (e != cudaSuccess)
		return e;
	k_jump_decide<<<1, GPU_JUMP_THREADS, 0, s>>>(*p, rows, miss, chg, mean, j, since);
	return cudaGetLastError();
}

extern "C" cudaError_t gpu_launch_adapt_weights(const gpu_recon_params *p, const long long *E,
                                                const float *chg, const long long *since, int4 *axy,
                                                longlong2 *aoff, float *alpha, float *beta,
                                                float *tmap, cudaStream_t s)
{
	k_adapt_axes<<<gpu_blocks((size_t)p->X + p->Y), GPU_THREADS, 0, s>>>(*p, axy, aoff);
	cudaError_t e = cudaGetLastError();
	if (e != cudaSuccess)
		return e;
	k_adapt_weights<<<gpu_blocks((size_t)p->Y * p->X), GPU_THREADS, 0, s>>>(
	        *p, E, chg, since, axy, alpha, beta, tmap);
	return cudaGetLastError();
}

extern "C" cudaError_t gpu_launch_recon(const gpu_recon_params *p, const float *B, const float *W,
                                        const float *le, const int4 *axy, const longlong2 *aoff,
                                        int y0, int y1, uint8_t *out8, float *outf, cudaStream_t s)
{
	if (y1 <= y0 || p->X < 1 || p->nz < 1)
		return cudaSuccess;
	const int tiles = (y1 - y0 + GPU_RECON_ROWS - 1) / GPU_RECON_ROWS;
	if (tiles > 65535)
		return cudaErrorInvalidValue;
	/* columns per thread: GPU_RECON_XRUN, more where X would need over 65535 blocks */
	int xrun = GPU_RECON_XRUN;
	if ((p->X + xrun - 1) / xrun > 65535)
		xrun = (p->X + 65534) / 65535;
	const unsigned zb = (unsigned)((p->nz + GPU_RECON_THREADS - 1) / GPU_RECON_THREADS);
	const dim3 g(zb, (unsigned)tiles, (unsigned)((p->X + xrun - 1) / xrun));
	if (p->adaptive && (!le || !axy || !aoff))
		return cudaErrorInvalidValue;
	if (p->adaptive && p->product)
		k_recon<false, true><<<g, GPU_RECON_THREADS, 0, s>>>(*p, B, W, le, axy, aoff, y0,
		                                                     y1, xrun, out8, outf);
	else if (p->adaptive)
		k_recon<true, true><<<g, GPU_RECON_THREADS, 0, s>>>(*p, B, W, le, axy, aoff, y0, y1,
		                                                    xrun, out8, outf);
	else if (p->product)
		k_recon<false, false><<<g, GPU_RECON_THREADS, 0, s>>>(*p, B, W, le, axy, aoff, y0,
		                                                      y1, xrun, out8, outf);
	else
		k_recon<true, false><<<g, GPU_RECON_THREADS, 0, s>>>(*p, B, W, le, axy, aoff, y0,
		                                                     y1, xrun, out8, outf);
	return cudaGetLastError();
}

extern "C" cudaError_t gpu_launch_quantize(const float *in, uint8_t *out, size_t n, cudaStream_t s)
{
	k_quantize<<<gpu_blocks(n), GPU_THREADS, 0, s>>>(in, out, n);
	return cudaGetLastError();
}

/* ---- compensated mode ------------------------------------------------------------------------ */

extern "C" cudaError_t gpu_launch_motion_profile(const float *le, size_t n, int nz, double *part,
                                                 double *prof, cudaStream_t s)
{
	if (n == 0 || nz < 1)
		return cudaErrorInvalidValue;
	const int chunks = n < GPU_PROF_CHUNKS ? (int)n : GPU_PROF_CHUNKS;
	const size_t per = (n + chunks - 1) / chunks;
	const unsigned zb = (unsigned)((nz + GPU_THREADS - 1) / GPU_THREADS);
	k_motion_profile<<<dim3(zb, (unsigned)chunks), GPU_THREADS, 0, s>>>(le, n, nz, per, part);
	cudaError_t e = cudaGetLastError();
	if (e != cudaSuccess)
		return e;
	/* the chunks that per leaves empty sum to 0 */
	k_motion_profile_sum<<<zb, GPU_THREADS, 0, s>>>(part, chunks, n, nz, prof);
	return cudaGetLastError();
}

extern "C" cudaError_t gpu_launch_motion_bands(const float *le, size_t n, int nz,
                                               const be_motion_entry *e, float *Be, cudaStream_t s)
{
	k_motion_bands<<<gpu_blocks(n * BE_MOTION_NB), GPU_THREADS, 0, s>>>(le, n, nz, e->k, e->fa,
	                                                                    e->fb, Be);
	return cudaGetLastError();
}

extern "C" cudaError_t gpu_launch_axes(const gpu_recon_params *p, int4 *axy, longlong2 *aoff,
                                       cudaStream_t s)
{
	k_adapt_axes<<<gpu_blocks((size_t)p->X + p->Y), GPU_THREADS, 0, s>>>(*p, axy, aoff);
	return cudaGetLastError();
}

extern "C" cudaError_t gpu_launch_motion_picks(const be_motion_geom *g, const be_motion_entry *en,
                                               uint32_t ne, uint32_t nref, int y0, int y1,
                                               be_motion_pick *pk, be_motion_pick *pkr,
                                               cudaStream_t s)
{
	if (y1 <= y0)
		return cudaSuccess;
	const size_t n = (size_t)(y1 - y0) * g->X;
	if (ne <= GPU_PICK_MAXE && nref == 0) {
		const size_t b = (n + GPU_PICK_WARPS - 1) / GPU_PICK_WARPS;
		k_motion_picks_w<<<(unsigned)(b > 65536 ? 65536 : b), 32 * GPU_PICK_WARPS, 0, s>>>(
		        *g, en, ne, y0, y1, pk);
		return cudaGetLastError();
	}
	const size_t b = (n + 63) / 64;
	k_motion_picks<<<(unsigned)(b > 65536 ? 65536 : b), 64, 0, s>>>(*g, en, ne, nref, y0, y1,
	                                                                pk, pkr);
	return cudaGetLastError();
}

extern "C" cudaError_t gpu_launch_motion(const gpu_recon_params *p, const float *hist,
                                         const be_motion_entry *en, const be_motion_pick *pk,
                                         const float *le, const int4 *axy, const longlong2 *aoff,
                                         int y0, int y1, uint8_t *out8, float *outf, float *ob,
                                         cudaStream_t s)
{
	if (y1 <= y0 || p->X < 1)
		return cudaSuccess;
	const size_t cols = (size_t)(y1 - y0) * p->X;
	if (cols > 0x7fffffffu)
		return cudaErrorInvalidValue;
	if (p->nz % 32 == 0) {
		constexpr int CPB = GPU_THREADS / GPU_MOTION4_T;
		const dim3 g4((unsigned)((cols + CPB - 1) / CPB), BE_MOTION_NB);
		k_motion4<<<g4, GPU_THREADS, 0, s>>>(*p, hist, en, pk, le, axy, aoff, y0, (int)cols,
		                                     out8, outf, ob);
		return cudaGetLastError();
	}
	const dim3 g((unsigned)cols, BE_MOTION_NB);
	k_motion<<<g, GPU_THREADS, 0, s>>>(*p, hist, en, pk, le, axy, aoff, y0, out8, outf, ob);
	return cudaGetLastError();
}

extern "C" cudaError_t gpu_launch_motion_ebands(const float *hist, const be_motion_entry *en,
                                                uint32_t ne, size_t n, int nz, float *eb,
                                                cudaStream_t s)
{
	if (ne == 0 || n == 0)
		return cudaSuccess;
	k_motion_ebands<<<gpu_blocks(n * ne * 32), GPU_THREADS, 0, s>>>(hist, en, ne, n, nz, eb);
	return cudaGetLastError();
}

extern "C" cudaError_t gpu_launch_motion_ref(const be_motion_geom *g, const be_motion_pick *pkr,
                                             const float *eb, uint32_t ne, const int4 *axy,
                                             float *ob, cudaStream_t s)
{
	if (ne == 0)
		return cudaErrorInvalidValue;
	const size_t n = (size_t)g->Y * g->X, b = (n + 127) / 128;
	k_motion_ref<<<(unsigned)(b > 65536 ? 65536 : b), 128, 0, s>>>(*g, pkr, eb, ne, axy, ob);
	return cudaGetLastError();
}

extern "C" cudaError_t gpu_launch_motion_blur(const be_motion_geom *g, const double *k, int r,
                                              const float *ob, float *tmp, float *out,
                                              cudaStream_t s)
{
	gpu_blur_taps t;
	if (r < 0 || 2 * r + 1 > BE_MOTION_BLUR_TAPS)
		return cudaErrorInvalidValue;
	for (int i = 0; i <= 2 * r; i++)
		t.k[i] = k[i];
	t.r = r;
	const size_t n = (size_t)g->Y * g->X * BE_MOTION_NB;
	k_motion_blur_y<<<gpu_blocks(n), GPU_THREADS, 0, s>>>(t, ob, (int)g->Y,
	                                                      (int)(g->X * BE_MOTION_NB), tmp);
	cudaError_t e = cudaGetLastError();
	if (e != cudaSuccess)
		return e;
	k_motion_blur_x<<<gpu_blocks(n), GPU_THREADS, 0, s>>>(t, tmp, (int)g->Y, (int)g->X, out);
	return cudaGetLastError();
}

extern "C" cudaError_t gpu_launch_copy(const float *src, float *dst, size_t n, cudaStream_t s)
{
	const bool v4 = ((uintptr_t)src | (uintptr_t)dst) % 16 == 0 && n % 4 == 0;
	const size_t m = v4 ? n / 4 : n;
	k_copy<<<gpu_blocks(m) < 2048 ? gpu_blocks(m) : 2048, GPU_THREADS, 0, s>>>(src, dst, n, v4);
	return cudaGetLastError();
}
