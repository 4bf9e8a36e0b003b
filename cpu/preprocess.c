/* SPDX-License-Identifier: MIT */
/*
 * docs/algorithms.md §1 on the CPU: convert and remove the background, resample, window (and
 * dispersion), batched FFTW transforms, log/normalize, flips and crop into the low-resolution
 * volume L_e, A-scans spread over the backend's threads in batches of CPU_BATCH. With
 * geometry.repeats M > 1 each position's M raw B-scans go through steps 1-5 one after another
 * and their mean power is the structure (docs/algorithms.md §5 step 1).
 */
#include <math.h>
#include <string.h>

#include "cpu/internal.h"

/* The hot loops (conversion, steps 1-4, step 6-8) are built for AVX2 and for the baseline and
 * picked at load time by an ifunc resolver, except under ThreadSanitizer, whose runtime is not
 * up yet when resolvers run. Element by element the same operations: the same values. */
#if defined(__SANITIZE_THREAD__)
#define CPU_CLONES
#else
#define CPU_CLONES __attribute__((target_clones("avx2", "default")))
#endif

/* Convert A-scan a of a raw B-scan to float (integer samples divided by 2^bit_shift, floor);
 * returns the sum of the converted samples. */
CPU_CLONES static double convert_ascan(const struct cpu_state *st, const void *raw, uint32_t a,
                                       float *out)
{
	const uint32_t K = st->geo.K, sh = st->geo.bit_shift;
	const size_t off = (size_t)a * K;

	switch (st->geo.sample_type) {
	case CFG_SAMPLE_U12P:
	case CFG_SAMPLE_U12GV: {
		/* packed: two samples in three bytes, unpacked here in the convert step */
		const uint8_t *s = (const uint8_t *)raw + off / 2 * 3;
		const bool gv = st->geo.sample_type == CFG_SAMPLE_U12GV;
		uint64_t sum = 0;
		for (uint32_t k = 0; k < K; k += 2, s += 3) {
			uint32_t v0, v1;
			vr_unpack12(s, gv, &v0, &v1);
			v0 >>= sh;
			v1 >>= sh;
			sum += v0 + v1;
			out[k] = (float)v0;
			out[k + 1] = (float)v1;
		}
		return (double)sum;
	}
	case CFG_SAMPLE_U16: {
		const uint16_t *s = (const uint16_t *)raw + off;
		uint64_t sum = 0;
		for (uint32_t k = 0; k < K; k++) {
			uint32_t v = (uint32_t)s[k] >> sh;
			sum += v;
			out[k] = (float)v;
		}
		return (double)sum;
	}
	case CFG_SAMPLE_I16: {
		const int16_t *s = (const int16_t *)raw + off;
		int64_t sum = 0;
		for (uint32_t k = 0; k < K; k++) {
			int32_t v = (int32_t)s[k] >> sh; /* arithmetic shift: floor division */
			sum += v;
			out[k] = (float)v;
		}
		return (double)sum;
	}
	case CFG_SAMPLE_F32:
	default: {
		const float *s = (const float *)raw + off;
		double sum = 0.0;
		for (uint32_t k = 0; k < K; k++) {
			sum += s[k];
			out[k] = s[k];
		}
		return sum;
	}
	}
}

static float sample_at(const struct cpu_state *st, const void *raw, size_t i)
{
	switch (st->geo.sample_type) {
	case CFG_SAMPLE_U16:
		return (float)((uint32_t)((const uint16_t *)raw)[i] >> st->geo.bit_shift);
	case CFG_SAMPLE_I16:
		return (float)((int32_t)((const int16_t *)raw)[i] >> st->geo.bit_shift);
	case CFG_SAMPLE_U12P:
	case CFG_SAMPLE_U12GV: {
		uint32_t v0, v1;
		vr_unpack12((const uint8_t *)raw + i / 2 * 3,
		            st->geo.sample_type == CFG_SAMPLE_U12GV, &v0, &v1);
		return (float)((i & 1 ? v1 : v0) >> st->geo.bit_shift);
	}
	case CFG_SAMPLE_F32:
	default:
		return ((const float *)raw)[i];
	}
}

/* Whether raw A-scan a of raw B-scan r is missing (a non-finite f32 sample in any repeat of
 * its position, §1.0). */
static bool ascan_missing(const struct cpu_state *st, uint32_t r, uint32_t a)
{
	const uint32_t nx = st->geo.nx, b = r / st->geo.M;
	const uint32_t xo = be_live_reversed(&st->p.live, b) ? nx - 1 - a : a;

	return st->miss[(size_t)b * nx + xo] != 0;
}

/* docs/algorithms.md §1.0 for B-scan position b (f32 samples): mark the A-scans that hold a
 * NaN or an infinity in any of the position's repeats, at their place in L_e, and count them. */
static void mark_nonfinite(struct cpu_worker *w, size_t b, void *ctx)
{
	struct cpu_state *st = w->st;
	const uint32_t K = st->geo.K, nx = st->geo.nx, M = st->geo.M;
	const bool rev = be_live_reversed(&st->p.live, (uint32_t)b);
	uint32_t count = 0;

	(void)ctx;
	for (uint32_t a = 0; a < nx; a++) {
		bool bad = false;
		for (uint32_t m = 0; m < M; m++) {
			const float *s = (const float *)st->raw[b * M + m] + (size_t)a * K;
			for (uint32_t k = 0; k < K; k++)
				bad |= !isfinite(s[k]);
		}
		st->miss[b * nx + (rev ? nx - 1 - a : a)] = bad;
		count += bad;
	}
	st->miss_count[b] = count;
}

/* Background spectrum of B-scan b for the bscan_mean / bscan_median modes (partial_median
 * starts from the bscan_mean one, see partial_median_bscan). */
static void bscan_background(struct cpu_worker *w, size_t b, void *ctx)
{
	struct cpu_state *st = w->st;
	const void *raw = st->raw[b];
	float *bg = st->bgspec + b * st->geo.K;
	const uint32_t K = st->geo.K, nx = st->geo.nx;
	/* the A-scans that are not missing (§1.0); none: the background is 0 */
	const uint32_t n = nx - st->miss_count[b / st->geo.M];

	(void)ctx;
	if (st->p.live.background == CFG_BG_BSCAN_MEAN ||
	    st->p.live.background == CFG_BG_PARTIAL_MEDIAN) {
		for (uint32_t k = 0; k < K; k++)
			w->dacc[k] = 0.0;
		for (uint32_t a = 0; a < nx; a++) {
			if (n < nx && ascan_missing(st, (uint32_t)b, a))
				continue;
			convert_ascan(st, raw, a, w->conv);
			for (uint32_t k = 0; k < K; k++)
				w->dacc[k] += w->conv[k];
		}
		for (uint32_t k = 0; k < K; k++)
			bg[k] = n ? (float)(w->dacc[k] / n) : 0.0f;
	} else {
		for (uint32_t k = 0; k < K; k++) {
			uint32_t m = 0;
			for (uint32_t a = 0; a < nx; a++)
				if (n == nx || !ascan_missing(st, (uint32_t)b, a))
					w->med[m++] = sample_at(st, raw, (size_t)a * K + k);
			bg[k] = cpu_median(w->med, m);
		}
	}
}

/* log2 of a positive normal float, vectorizable: exponent plus 2 atanh((m-1)/(m+1)) on the
 * mantissa m reduced to [sqrt(1/2), sqrt(2)) by integer arithmetic on the bits; absolute
 * error below 3e-7. */
static inline float fast_log2(float x)
{
	int32_t i, mi;
	float m;

	memcpy(&i, &x, sizeof(i));
	int32_t u = i - 0x3f3504f3; /* bits of sqrt(1/2) */
	int32_t e = u >> 23;        /* arithmetic shift: floor */
	mi = (u & 0x007fffff) + 0x3f3504f3;
	memcpy(&m, &mi, sizeof(m));
	float r = (m - 1.0f) / (m + 1.0f), r2 = r * r;
	float ln = 2.0f * r *
	           (1.0f + r2 * (1.0f / 3 + r2 * (1.0f / 5 + r2 * (1.0f / 7 + r2 * (1.0f / 9)))));
	return (float)e + ln * 1.44269504088896341f;
}

/* dB of a magnitude, normalized and clamped to [0, 1] (written so that it vectorizes). */
static inline float norm_mag(float mag, float lo, float inv)
{
	float v = (6.02059991327962390f * fast_log2(mag + 1e-12f) - lo) * inv;
	v = v > 0.0f ? v : 0.0f;
	return v < 1.0f ? v : 1.0f;
}

/* dB of a complex value, normalized and clamped to [0, 1]. */
static inline float norm_db(float re, float im, float lo, float inv)
{
	return norm_mag(sqrtf(re * re + im * im), lo, inv);
}

struct post_args {
	const float *re_im; /* interleaved complex row, or NULL: pow */
	const float *pow;   /* M > 1: the row of sums of |X_m|^2 over the repeats */
	float inv_m;        /* 1 / M */
	float *dst;         /* L_e row */
	float *full;        /* float output row (mode none) or NULL */
	uint8_t *u8;        /* u8 output row (mode none) or NULL */
	uint32_t zstart;    /* first source bin */
	int32_t zstep;      /* +1, or -1 with flip.z */
	uint32_t nz;
	float lo, inv;
};

/* Step 6-8 for one A-scan: magnitude, dB, normalize, clamp, crop/flip, quantize. */
CPU_CLONES static void post_row(const struct post_args *a)
{
	const float *restrict c = a->re_im;
	const float lo = a->lo, inv = a->inv;
	float *restrict dst = a->dst;
	const uint32_t nz = a->nz;

	if (a->pow) {
		/* docs/algorithms.md §5 step 1: P = (1/M) sum |X_m|^2, d = 20 log10(sqrt(P) + 1e-12) */
		const float *restrict p = a->pow, im = a->inv_m;
		if (a->zstep > 0) {
			p += a->zstart;
			for (size_t z = 0; z < nz; z++)
				dst[z] = norm_mag(sqrtf(p[z] * im), lo, inv);
		} else {
			p += (size_t)a->zstart + 1 - nz;
			for (size_t z = 0; z < nz; z++)
				dst[nz - 1 - z] = norm_mag(sqrtf(p[z] * im), lo, inv);
		}
	} else if (a->zstep > 0) {
		c += 2 * (size_t)a->zstart;
		for (size_t z = 0; z < nz; z++)
			dst[z] = norm_db(c[2 * z], c[2 * z + 1], lo, inv);
	} else {
		c += 2 * ((size_t)a->zstart + 1 - nz); /* the lowest source bin */
		for (size_t z = 0; z < nz; z++)
			dst[nz - 1 - z] = norm_db(c[2 * z], c[2 * z + 1], lo, inv);
	}
	if (a->full)
		memcpy(a->full, dst, a->nz * sizeof(float));
	if (a->u8) {
		uint8_t *restrict q = a->u8;
		for (size_t z = 0; z < nz; z++)
			q[z] = (uint8_t)(int)(255.0f * dst[z] + 0.5f);
	}
}

/* Steps 1-4 of A-scan a of B-scan b into row r of the worker's FFT input: convert, remove
 * the background, resample, window or window x dispersion phasor, zero padding. */
CPU_CLONES static void fill_fft_row(struct cpu_worker *w, uint32_t b, uint32_t a, uint32_t r)
{
	struct cpu_state *st = w->st;
	const struct cpu_params *p = &st->p;
	const uint32_t K = st->geo.K, N = st->geo.N;
	const float *bgs = st->bgspec + (size_t)b * K;
	float *x = w->conv;
	float *y = p->live.resample == CFG_RS_NONE ? x : w->rsout;
	const bool missing = st->miss_count[b / st->geo.M] && ascan_missing(st, b, a);
	double sum = 0.0;

	/* a missing A-scan (§1.0) transforms zeros: its L_e column is filled afterwards */
	if (missing)
		memset(x, 0, K * sizeof(float));
	else
		sum = convert_ascan(st, st->raw[b], a, x);
	switch (missing ? CFG_BG_NONE : p->live.background) {
	case CFG_BG_ASCAN_MEAN: {
		float mean = (float)(sum / K);
		for (uint32_t k = 0; k < K; k++)
			x[k] -= mean;
		break;
	}
	case CFG_BG_BSCAN_MEAN:
	case CFG_BG_BSCAN_MEDIAN:
	case CFG_BG_PARTIAL_MEDIAN: /* the mean spectrum first: see partial_median_bscan */
		for (uint32_t k = 0; k < K; k++)
			x[k] -= bgs[k];
		break;
	case CFG_BG_REFERENCE:
		for (uint32_t k = 0; k < K; k++)
			x[k] -= p->bg_ref[k];
		break;
	case CFG_BG_NONE:
		break;
	}
	if (p->live.resample != CFG_RS_NONE)
		cpu_resample(p, K, x, y, w->spl_m);
	if (p->live.dispersion) {
		float *row = (float *)(w->fin + (size_t)r * N);
		/* size_t j: a uint32_t 2j might wrap, and the stores would go one by one */
		for (size_t j = 0; j < K; j++) {
			row[2 * j] = y[j] * p->disp_re[j];
			row[2 * j + 1] = y[j] * p->disp_im[j];
		}
		memset(row + 2 * (size_t)K, 0, 2 * (size_t)(N - K) * sizeof(float));
	} else {
		float *row = (float *)w->fin + (size_t)r * N;
		for (uint32_t j = 0; j < K; j++)
			row[j] = y[j] * p->win[j];
		memset(row + K, 0, (size_t)(N - K) * sizeof(float));
	}
}

/* The distance in complex values between two rows of the FFT's output. */
static size_t fft_stride(const struct cpu_state *st)
{
	return st->p.live.dispersion ? st->geo.N : st->geo.nh + 1;
}

/* Transform the worker's FFT input (a batch of CPU_BATCH rows; rows beyond those filled hold
 * stale data whose transforms nobody reads) into out: w->fout, or CPU_BATCH rows of
 * fft_stride() aligned as w->fout (FFTW's new-array execution: the same plan, the same
 * arithmetic). \return the stride of the output rows in complex values. */
static size_t fft_batch(struct cpu_worker *w, fftwf_complex *out)
{
	struct cpu_state *st = w->st;

	if (st->p.live.dispersion)
		fftwf_execute_dft(st->plan_c2c, w->fin, out);
	else
		fftwf_execute_dft_r2c(st->plan_r2c, (float *)w->fin, out);
	return fft_stride(st);
}

struct pre_ctx {
	float *L;
	float *const *Lf; /* [CPU_FN_PLANES] the functional planes (entries may be NULL) */
	float *sfull;     /* mode none: the structure's float and u8 outputs, or NULL */
	uint8_t *su8;
	uint32_t nchunks;
};

/* Steps 6-8 for A-scans a0..a0+na-1 of B-scan position b, whose spectra are rows of spec
 * (stride complex values apart), or with M > 1 (spec NULL) whose sums of the repeats' power
 * are rows of pow (nh values apart), into L (and the outputs in mode none). */
static void post_rows(struct cpu_worker *w, const struct pre_ctx *ctx, uint32_t b, uint32_t a0,
                      uint32_t na, const fftwf_complex *spec, size_t stride, const float *pow)
{
	struct cpu_state *st = w->st;
	const struct cpu_params *p = &st->p;
	const uint32_t nx = st->geo.nx;
	const bool rev = be_live_reversed(&p->live, b);
	const bool none = p->live.mode == CFG_RECON_NONE;
	struct post_args pa = {
	        .zstart = p->live.flip_z ? st->geo.nh - 1 - st->geo.z0 : st->geo.z0,
	        .zstep = p->live.flip_z ? -1 : 1,
	        .nz = st->geo.nz,
	        .lo = p->live.db_lo,
	        .inv = p->live.db_inv,
	        .inv_m = 1.0f / (float)st->geo.M,
	};
	for (uint32_t r = 0; r < na; r++) {
		uint32_t a = a0 + r, xo = rev ? nx - 1 - a : a;
		size_t o = ((size_t)b * nx + xo) * st->geo.nz;

		if (spec)
			pa.re_im = (const float *)(spec + r * stride);
		else
			pa.pow = pow + (size_t)r * st->geo.nh;
		pa.dst = ctx->L + o;
		pa.full = none && ctx->sfull ? ctx->sfull + o : NULL;
		pa.u8 = none && ctx->su8 ? ctx->su8 + o : NULL;
		post_row(&pa);
	}
}

/* Add |X|^2 of n rows of spec (stride complex values apart, nh bins each) into the rows of pow
 * (nh apart); the first repeat sets them. The one place the repeats' power is summed, in
 * the order of the repeats (docs/algorithms.md §5 step 1). */
static void power_add(float *restrict pow, const fftwf_complex *spec, size_t stride, uint32_t n,
                      uint32_t nh, bool first)
{
	for (uint32_t r = 0; r < n; r++) {
		const float *restrict c = (const float *)(spec + r * stride);
		float *restrict p = pow + (size_t)r * nh;
		for (size_t z = 0; z < nh; z++) { /* size_t: see fill_fft_row */
			float q = c[2 * z] * c[2 * z] + c[2 * z + 1] * c[2 * z + 1];
			p[z] = first ? q : p[z] + q;
		}
	}
}

static void preprocess_chunk(struct cpu_worker *w, size_t item, void *vctx)
{
	struct pre_ctx *ctx = vctx;
	const uint32_t nx = w->st->geo.nx, M = w->st->geo.M;
	const uint32_t b = (uint32_t)(item / ctx->nchunks);
	const uint32_t a0 = (uint32_t)(item % ctx->nchunks) * CPU_BATCH;
	const uint32_t na = nx - a0 < CPU_BATCH ? nx - a0 : CPU_BATCH;

	if (M == 1) {
		for (uint32_t r = 0; r < na; r++)
			fill_fft_row(w, b, a0 + r, r);
		const size_t ostride = fft_batch(w, w->fout);
		post_rows(w, ctx, b, a0, na, w->fout, ostride, NULL);
		return;
	}
	/* the position's repeats one after another (raw B-scans b * M + m), their power summed */
	for (uint32_t m = 0; m < M; m++) {
		for (uint32_t r = 0; r < na; r++)
			fill_fft_row(w, b * M + m, a0 + r, r);
		const size_t ostride = fft_batch(w, w->fout);
		power_add(w->pow, w->fout, ostride, na, w->st->geo.nh, m == 0);
	}
	post_rows(w, ctx, b, a0, na, NULL, 0, w->pow);
}

/*
 * docs/algorithms.md §1b for raw B-scan b: its corrected spectra X' - C' into w->spec ([nx][nh])
 * and the depths that took the median into pm_count[b]. The spectra are those of x[k] = s[k]
 * minus the B-scan's mean spectrum (bscan_mean): the FFT is linear, so X' = X - m with m[z]
 * the complex mean of X over the A-scans; sigma is unchanged, C' = C - m, and X' - C' = X - C
 * exactly, while the DC of the raw spectra (about 1e7 for u16 data) never enters float32
 * sums. Per depth sigma[z] = sqrt(var Re + var Im) (population; sums of X' and X'^2 over the
 * A-scans in double); sigma_bg = median over z of the float sigma[z]; C'[z] = the medians of
 * Re X' and Im X' over the A-scans where (double) sigma[z] > t * (double) sigma_bg, else 0
 * (the mean, already removed); X' - C' (steps 6-8 follow in partial_median_bscan). With no
 * depth above the threshold the result is bscan_mean's, bit for bit.
 */
static void partial_median_spectra(struct cpu_worker *w, uint32_t b)
{
	struct cpu_state *st = w->st;
	const uint32_t nx = st->geo.nx, nh = st->geo.nh;
	fftwf_complex *spec = w->spec;
	double *sr = w->pm_acc, *si = sr + nh, *srr = si + nh, *sii = srr + nh;
	float *sig = w->pm_sig, *c = w->pm_c;
	uint32_t count = 0;

	for (uint32_t a0 = 0; a0 < nx; a0 += CPU_BATCH) {
		const uint32_t na = nx - a0 < CPU_BATCH ? nx - a0 : CPU_BATCH;
		for (uint32_t r = 0; r < na; r++)
			fill_fft_row(w, b, a0 + r, r);
		const size_t ostride = fft_batch(w, w->fout);
		for (uint32_t r = 0; r < na; r++)
			memcpy(spec + (size_t)(a0 + r) * nh, w->fout + r * ostride,
			       nh * sizeof(fftwf_complex));
	}

	/* per-depth statistics */
	for (uint32_t z = 0; z < nh; z++)
		sr[z] = si[z] = srr[z] = sii[z] = 0.0;
	for (uint32_t a = 0; a < nx; a++) {
		const float *row = (const float *)(spec + (size_t)a * nh);
		for (uint32_t z = 0; z < nh; z++) {
			double re = row[2 * z], im = row[2 * z + 1];
			sr[z] += re;
			si[z] += im;
			srr[z] += re * re;
			sii[z] += im * im;
		}
	}
	/* a missing A-scan's spectrum is 0 (fill_fft_row): it adds nothing to the sums, and the
	 * statistics are over the n others (§1.0) */
	const uint32_t n = nx - st->miss_count[b / st->geo.M];
	const double dn = n ? (double)n : 1.0;
	for (uint32_t z = 0; z < nh; z++) {
		double mr = sr[z] / dn, mi = si[z] / dn;
		double vr = srr[z] / dn - mr * mr, vi = sii[z] / dn - mi * mi;
		sig[z] = (float)sqrt((vr > 0 ? vr : 0.0) + (vi > 0 ? vi : 0.0));
	}
	memcpy(sig + nh, sig, nh * sizeof(float));
	const double thr = st->p.live.pm_threshold * (double)cpu_median(sig + nh, nh);

	/* medians where the spread says a strong reflector makes the mean wrong */
	for (uint32_t z = 0; z < nh; z++) {
		c[2 * z] = c[2 * z + 1] = 0.0f;
		if (!((double)sig[z] > thr))
			continue;
		for (int q = 0; q < 2; q++) {
			uint32_t m = 0;
			for (uint32_t a = 0; a < nx; a++)
				if (n == nx || !ascan_missing(st, b, a))
					w->med[m++] = spec[(size_t)a * nh + z][q];
			c[2 * z + q] = cpu_median(w->med, m);
		}
		count++;
	}
	st->pm_count[b] = count;

	if (count) {
		for (uint32_t a = 0; a < nx; a++) {
			float *row = (float *)(spec + (size_t)a * nh);
			for (uint32_t z = 0; z < 2 * nh; z++)
				row[z] -= c[z];
		}
	}
}

/*
 * docs/algorithms.md §1.0 for B-scan b: the L_e column of each missing A-scan, by linear
 * interpolation along the B-scan between the nearest A-scans on either side that are not
 * missing (the nearest one alone at an end; 0 when the whole B-scan is missing), in float:
 * (1 - t) * left + t * right, t = (x - xl) / (xr - xl). Mode none: its outputs again.
 */
void cpu_fill_missing_row(const uint8_t *miss, uint32_t nx, uint32_t nz, float *row)
{
	int64_t left = -1;

	for (uint32_t x = 0; x < nx; x++) {
		if (!miss[x]) {
			left = x;
			continue;
		}
		uint32_t r = x + 1;
		while (r < nx && miss[r])
			r++;
		float *d = row + (size_t)x * nz;
		const float *l = left >= 0 ? row + (size_t)left * nz : NULL;
		const float *rr = r < nx ? row + (size_t)r * nz : NULL;
		if (l && rr) {
			const float t = (float)(x - (uint32_t)left) / (float)(r - (uint32_t)left);
			for (uint32_t z = 0; z < nz; z++)
				d[z] = (1.0f - t) * l[z] + t * rr[z];
		} else if (l || rr) {
			memcpy(d, l ? l : rr, nz * sizeof(float));
		} else {
			memset(d, 0, nz * sizeof(float));
		}
	}
}

static void fill_missing(struct cpu_worker *w, size_t b, void *vctx)
{
	struct pre_ctx *ctx = vctx;
	struct cpu_state *st = w->st;
	const uint32_t nx = st->geo.nx, nz = st->geo.nz;
	const size_t o = (size_t)b * nx * nz;

	if (!st->miss_count[b])
		return;
	cpu_fill_missing_row(st->miss + b * nx, nx, nz, ctx->L + o);
	/* the functional planes alike (their outputs are made from them afterwards) */
	for (int q = 0; q < CPU_FN_PLANES; q++)
		if (ctx->Lf && ctx->Lf[q])
			cpu_fill_missing_row(st->miss + b * nx, nx, nz, ctx->Lf[q] + o);
	if (st->p.live.mode != CFG_RECON_NONE)
		return;
	for (uint32_t x = 0; x < nx; x++) {
		if (!st->miss[b * nx + x])
			continue;
		const size_t c = o + (size_t)x * nz;
		if (ctx->sfull)
			memcpy(ctx->sfull + c, ctx->L + c, nz * sizeof(float));
		if (ctx->su8)
			cpu_quantize(ctx->su8 + c, ctx->L + c, nz);
	}
}

/* §1b for B-scan position b (one item per position): each repeat's corrected spectra (raw
 * B-scan b * M + m, its own statistics and medians), then steps 6-8 of them (M = 1) or of
 * their mean power. */
static void partial_median_bscan(struct cpu_worker *w, size_t item, void *vctx)
{
	struct pre_ctx *ctx = vctx;
	const uint32_t nx = w->st->geo.nx, nh = w->st->geo.nh, M = w->st->geo.M;
	const uint32_t b = (uint32_t)item;

	if (M == 1) {
		partial_median_spectra(w, b);
		post_rows(w, ctx, b, 0, nx, w->spec, nh, NULL);
		return;
	}
	for (uint32_t m = 0; m < M; m++) {
		partial_median_spectra(w, b * M + m);
		power_add(w->pow, w->spec, nh, nx, nh, m == 0);
	}
	post_rows(w, ctx, b, 0, nx, NULL, 0, w->pow);
}

/* The distance in complex values between two A-scans' spectra in w->fspec: the FFT's rows,
 * written there by the transforms, or nh after §1b (copied from w->spec). */
static size_t fspec_stride(const struct cpu_state *st)
{
	return st->p.live.background == CFG_BG_PARTIAL_MEDIAN ? st->geo.nh : fft_stride(st);
}

/* The spectra of raw B-scan r, repeat m of its position (steps 1-5, or §1b), into rows of
 * fspec_stride() complex values at dst, nh bins used, the nx rows rounded up to CPU_BATCH
 * (the last batch's rows beyond nx are transformed too): [nx][stride]; with M > 1 their power
 * added into w->pow (power_add, each batch while it is in cache). Steps 1-5: A-scans
 * [a_begin, a_end) alone (a_begin a multiple of CPU_BATCH); §1b: all of them. */
static void bscan_spectra(struct cpu_worker *w, uint32_t r, uint32_t m, fftwf_complex *dst,
                          uint32_t a_begin, uint32_t a_end)
{
	struct cpu_state *st = w->st;
	const uint32_t nx = st->geo.nx, nh = st->geo.nh;
	const size_t S = fspec_stride(st);

	if (st->p.live.background == CFG_BG_PARTIAL_MEDIAN) {
		partial_median_spectra(w, r);
		memcpy(dst, w->spec, (size_t)nx * nh * sizeof(fftwf_complex));
		if (st->geo.M > 1)
			power_add(w->pow, dst, S, nx, nh, m == 0);
		return;
	}
	for (uint32_t a0 = a_begin; a0 < a_end; a0 += CPU_BATCH) {
		const uint32_t na = a_end - a0 < CPU_BATCH ? a_end - a0 : CPU_BATCH;
		for (uint32_t q = 0; q < na; q++)
			fill_fft_row(w, r, a0 + q, q);
		fft_batch(w, dst + (size_t)a0 * S);
		if (st->geo.M > 1)
			power_add(w->pow + (size_t)a0 * nh, dst + (size_t)a0 * S, S, na, nh,
			          m == 0);
	}
}

/* §5 for B-scan position b (one item per position) when channels other than the structure
 * are output: every repeat's spectra (steps 1-5, or §1b), the structure from them exactly as
 * without channels, then the mask, angiography and Doppler of each A-scan, flipped and
 * cropped as the structure (cpu/functional.c). */
static void functional_position(struct cpu_worker *w, size_t item, void *vctx)
{
	struct pre_ctx *ctx = vctx;
	struct cpu_state *st = w->st;
	const struct be_live *l = &st->p.live;
	const uint32_t nx = st->geo.nx, nh = st->geo.nh, M = st->geo.M, nz = st->geo.nz;
	const uint32_t b = (uint32_t)item;
	const size_t S = fspec_stride(st);              /* A-scan to A-scan */
	const size_t rs = cpu_fspec_rows(&st->geo) * S; /* repeat to repeat */
	const float *X = (const float *)w->fspec;
	const bool rev = be_live_reversed(l, b);
	float *La = ctx->Lf[CPU_PL_ANGIO], *Lr = ctx->Lf[CPU_PL_DRE], *Li = ctx->Lf[CPU_PL_DIM];
	/* the depth range in source bins (before the flip): the output's depths */
	const uint32_t zb0 = l->flip_z ? nh - st->geo.z0 - nz : st->geo.z0, zb1 = zb0 + nz;
	const struct cpu_fn_ascan fa = {.live = l,
	                                .X = X,
	                                .keep = w->keep,
	                                .M = M,
	                                .nx = nx,
	                                .nh = nh,
	                                .xs = S,
	                                .rs = rs,
	                                .zb0 = zb0,
	                                .nz = nz,
	                                .scratch = w->fn_scratch};
	/* a chunk of A-scans at a time, its repeats' spectra still in cache when its channels are
	 * computed (§1b: the repeats' spectra need the whole B-scan's statistics, one chunk) */
	const bool whole = l->background == CFG_BG_PARTIAL_MEDIAN;
	const uint32_t chunk = whole ? nx : CPU_FN_CHUNK;
	/* ascan Doppler of A-scan a needs a + 1: the chunk's last waits for the next chunk */
	const bool ahead = Lr && l->doppler_axis == CFG_DOPPLER_ASCAN;
	struct cpu_fn_mask mk;
	uint32_t done = 0; /* A-scans whose channels are written */

	cpu_fn_mask_init(&mk, l->mask_db);
	for (uint32_t m = 0; whole && m < M; m++)
		bscan_spectra(w, b * M + m, m, w->fspec + (size_t)m * rs, 0, nx);
	for (uint32_t c0 = 0; c0 < nx; c0 += chunk) {
		const uint32_t c1 = nx - c0 < chunk ? nx : c0 + chunk;
		for (uint32_t m = 0; !whole && m < M; m++)
			bscan_spectra(w, b * M + m, m, w->fspec + (size_t)m * rs, c0, c1);
		if (M == 1)
			post_rows(w, ctx, b, c0, c1 - c0, w->fspec + (size_t)c0 * S, S, NULL);
		else
			post_rows(w, ctx, b, c0, c1 - c0, NULL, 0, w->pow + (size_t)c0 * nh);
		/* the mask: the structure in dB against functional.mask_db, over the output's bins
		 * (the only ones read: angiography and Doppler there, the bulk phase over the depth
		 * range) */
		for (uint32_t a = c0; a < c1; a++)
			cpu_fn_mask(&mk, X + 2 * (size_t)a * S,
			            M > 1 ? w->pow + (size_t)a * nh : NULL, M, zb0, zb1,
			            w->fn_scratch, w->keep + (size_t)a * nh);
		for (const uint32_t end = ahead && c1 < nx ? c1 - 1 : c1; done < end; done++) {
			const uint32_t a = done;
			const size_t o = ((size_t)b * nx + (rev ? nx - 1 - a : a)) * nz;
			cpu_fn_ascan(&fa, a, La ? La + o : NULL, Lr ? Lr + o : NULL,
			             Li ? Li + o : NULL);
		}
	}
}

void cpu_preprocess_epoch(struct cpu_state *st, float *L, float *const Lf[CPU_FN_PLANES],
                          const struct be_output *out)
{
	const int sc = st->geo.chan[CFG_CH_STRUCTURE];
	struct pre_ctx ctx = {
	        .L = L,
	        .Lf = Lf,
	        .sfull = out->full && sc >= 0 ? out->full + (size_t)sc * st->geo.le_count : NULL,
	        .su8 = out->volume && sc >= 0 ? out->volume + (size_t)sc * st->geo.le_count : NULL,
	        .nchunks = (st->geo.nx + CPU_BATCH - 1) / CPU_BATCH};

	if (st->geo.sample_type == CFG_SAMPLE_F32)
		cpu_parallel(st, st->geo.ny, mark_nonfinite, NULL);

	if (st->p.live.background == CFG_BG_BSCAN_MEAN ||
	    st->p.live.background == CFG_BG_BSCAN_MEDIAN ||
	    st->p.live.background == CFG_BG_PARTIAL_MEDIAN)
		cpu_parallel(st, st->geo.nraw, bscan_background, NULL);
	if (st->functional)
		cpu_parallel(st, st->geo.ny, functional_position, &ctx);
	else if (st->p.live.background == CFG_BG_PARTIAL_MEDIAN)
		cpu_parallel(st, st->geo.ny, partial_median_bscan, &ctx);
	else
		cpu_parallel(st, (size_t)st->geo.ny * ctx.nchunks, preprocess_chunk, &ctx);
	if (st->geo.sample_type == CFG_SAMPLE_F32)
		cpu_parallel(st, st->geo.ny, fill_missing, &ctx);
}
