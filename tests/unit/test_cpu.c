/* SPDX-License-Identifier: MIT */
/*
 * Analytic checks of the CPU reference backend against docs/algorithms.md: windows against their
 * formulas, interpolation kernels exact where they must be, the median, a single reflector's
 * depth bin, and the paper's Fig. 2 interlacing example with ages and temporal weights.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/tables.h"
#include "cpu/internal.h"
#include "tests/unit/vrtest.h"

static void base_config(struct vr_config *c, uint32_t K, uint32_t nx, uint32_t ny)
{
	vrtest_cpu_config(c, K, CFG_SAMPLE_F32, nx, ny, 2);
	c->geometry.bit_shift = 0;
	c->geometry.bidirectional = false;
	c->preprocess.background.mode = CFG_BG_ASCAN_MEAN;
	c->preprocess.resample.method = CFG_RS_NONE;
	c->preprocess.window.type = CFG_WIN_HANN;
	c->preprocess.dispersion.kind = CFG_DISP_NONE;
	c->preprocess.zero_pad = 1;
	c->preprocess.db_range[0] = 0;
	c->preprocess.db_range[1] = 100;
	c->preprocess.flip.x = c->preprocess.flip.z = false;
	c->reconstruct.mode = CFG_RECON_NONE;
}

/* The CPU backend through the wrappers (backend.h); be_impl_state gives its internals. */
static struct be_backend *open_cpu(const struct vr_config *c)
{
	struct be_backend *be = NULL;
	char err[256] = "";
	int rc = be_open(c, &be, NULL, 0, err, sizeof(err));
	if (rc < 0)
		fail_msg("be_open: %s", err);
	return be;
}

/* ---- windows -------------------------------------------------------------------------------- */

static void check_window(enum cfg_window type, double param,
                         double (*f)(double j, double M, double param))
{
	enum { K = 257 };
	float w[K];

	be_window_fill(type, param, K, w);
	for (int j = 0; j < K; j++) {
		double want = f(j, K - 1, param);
		if (fabs(w[j] - want) > 1e-6)
			fail_msg("window %s j=%d: got %.9g, want %.9g", cfg_window_name(type), j,
			         w[j], want);
	}
	/* symmetric over j = 0..K-1 */
	for (int j = 0; j < K; j++)
		assert_float_equal(w[j], w[K - 1 - j], 1e-6);
}

static double f_hann(double j, double M, double p)
{
	(void)p;
	return pow(sin(M_PI * j / M), 2); /* = 0.5 - 0.5 cos(2 pi j / M) */
}
static double f_hamming(double j, double M, double p)
{
	(void)p;
	return 0.54 - 0.46 * cos(2 * M_PI * j / M);
}
static double f_blackman(double j, double M, double p)
{
	(void)p;
	return 0.42 - 0.5 * cos(2 * M_PI * j / M) + 0.08 * cos(4 * M_PI * j / M);
}
static double f_gauss(double j, double M, double s)
{
	double h = M / 2;
	return exp(-((j - h) * (j - h)) / (2 * (s * h) * (s * h)));
}
/* scipy.signal.windows.tukey(M + 1, alpha, sym=True) */
static double f_tukey(double n, double M, double a)
{
	double w = a * M / 2;
	if (n < w)
		return 0.5 * (1 + cos(M_PI * (-1 + n / w)));
	if (n > M - w)
		return 0.5 * (1 + cos(M_PI * (-2 / a + 1 + n / w)));
	return 1.0;
}

static void test_window_hann(void **s)
{
	(void)s;
	check_window(CFG_WIN_HANN, 0, f_hann);
}
static void test_window_hamming(void **s)
{
	(void)s;
	check_window(CFG_WIN_HAMMING, 0, f_hamming);
}
static void test_window_blackman(void **s)
{
	(void)s;
	check_window(CFG_WIN_BLACKMAN, 0, f_blackman);
}
static void test_window_gauss(void **s)
{
	(void)s;
	check_window(CFG_WIN_GAUSS, 0.4, f_gauss);
	check_window(CFG_WIN_GAUSS, 0.25, f_gauss);
}
static void test_window_tukey(void **s)
{
	(void)s;
	check_window(CFG_WIN_TUKEY, 0.5, f_tukey);
	check_window(CFG_WIN_TUKEY, 0.2, f_tukey);
}

/* ---- interpolation ---------------------------------------------------------------------------- */

static double cubic_poly(double x)
{
	return 3.0 - 0.5 * x + 0.02 * x * x - 0.0004 * x * x * x;
}

/* One A-scan of K samples resampled by method m at the polynomial positions poly[0..3]. */
static void poly_config(struct vr_config *c, uint32_t K, enum cfg_resample m, const double poly[4])
{
	base_config(c, K, 1, 1);
	c->preprocess.resample.method = m;
	c->preprocess.resample.positions = CFG_RSPOS_POLY;
	for (int i = 0; i < 4; i++)
		c->preprocess.resample.poly[i] = poly[i];
}

/* Resample f(i) at p[j] = c0 + c1 u (interior positions) and compare with f(p[j]). */
static void check_kernel(enum cfg_resample m, double (*f)(double), double tol)
{
	enum { K = 64 };
	struct vr_config c;
	float x[K], y[K], scratch[K];
	double pos[K];

	poly_config(&c, K, m, (const double[4]){1.37, K - 4.1, 0.9, -0.8});
	struct be_backend *be = open_cpu(&c);
	struct cpu_state *st = be_impl_state(be);
	be_positions(&c, K, pos);
	for (int i = 0; i < K; i++)
		x[i] = (float)f(i);
	cpu_resample(&st->p, K, x, y, scratch);
	for (int j = 0; j < K; j++) {
		double want = f(pos[j]);
		if (fabs(y[j] - want) > tol * (1 + fabs(want)))
			fail_msg("%s at p=%.6f: got %.7g, want %.7g", cfg_resample_name(m), pos[j],
			         y[j], want);
	}
	be_close(be);
}

static double line(double x)
{
	return 2.5 + 0.75 * x;
}

static void test_cubic_exact_on_cubics(void **s)
{
	(void)s;
	check_kernel(CFG_RS_CUBIC, cubic_poly, 2e-6);
}
static void test_cubic_exact_on_lines(void **s)
{
	(void)s;
	check_kernel(CFG_RS_CUBIC, line, 2e-6);
}
static void test_linear_exact_on_lines(void **s)
{
	(void)s;
	check_kernel(CFG_RS_LINEAR, line, 2e-6);
}
static void test_spline_exact_on_lines(void **s)
{
	(void)s;
	check_kernel(CFG_RS_SPLINE, line, 2e-6);
}

/* A natural spline through samples of a cubic is not exact, but its second derivative
 * vanishes at both ends: check it against the tridiagonal system solved in double. */
static void test_spline_matches_direct_solve(void **s)
{
	enum { K = 32 };
	struct vr_config c;
	float x[K], y[K], scratch[K];
	double pos[K], M[K], cp[K], dp[K];

	(void)s;
	poly_config(&c, K, CFG_RS_SPLINE, (const double[4]){0, K - 1, 0.6, -0.6});
	struct be_backend *be = open_cpu(&c);
	struct cpu_state *st = be_impl_state(be);
	be_positions(&c, K, pos);
	for (int i = 0; i < K; i++)
		x[i] = (float)sin(0.4 * i) * 10;
	/* general Thomas solve for M[1..K-2] with M[0] = M[K-1] = 0 */
	M[0] = M[K - 1] = 0;
	cp[0] = dp[0] = 0;
	for (int i = 1; i < K - 1; i++) {
		double r = 6.0 * ((double)x[i + 1] - 2.0 * x[i] + x[i - 1]);
		double den = 4.0 - cp[i - 1];
		cp[i] = 1.0 / den;
		dp[i] = (r - dp[i - 1]) / den;
	}
	for (int i = K - 2; i >= 1; i--)
		M[i] = dp[i] - cp[i] * M[i + 1];
	cpu_resample(&st->p, K, x, y, scratch);
	for (int j = 0; j < K; j++) {
		int i = (int)floor(pos[j]);
		if (i > K - 2)
			i = K - 2;
		double t = pos[j] - i, A = 1 - t, B = t;
		double want = A * x[i] + B * x[i + 1] +
		              ((A * A * A - A) * M[i] + (B * B * B - B) * M[i + 1]) / 6.0;
		if (fabs(y[j] - want) > 1e-4)
			fail_msg("spline at p=%.6f: got %.7g, want %.7g", pos[j], y[j], want);
	}
	be_close(be);
}

static void test_wavelength_positions_invert_kappa(void **s)
{
	enum { K = 128 };
	struct vr_config c;
	double pos[K];
	char err[256];

	(void)s;
	base_config(&c, K, 1, 1);
	c.preprocess.resample.method = CFG_RS_LINEAR;
	c.preprocess.resample.positions = CFG_RSPOS_WAVELENGTH;
	double l[4] = {800.0, 0.1, 1e-5, 0.0};
	memcpy(c.preprocess.resample.wavelength_nm, l, sizeof(l));
	be_positions(&c, K, pos);
	/* kappa at each position (linear between pixels) is equally spaced */
	double k0 = 2 * M_PI / l[0], kn = 2 * M_PI / (l[0] + (K - 1) * (l[1] + (K - 1) * l[2]));
	for (int j = 0; j < K; j++) {
		int i = (int)floor(pos[j]);
		if (i > K - 2)
			i = K - 2;
		double ki = 2 * M_PI / (l[0] + i * (l[1] + i * l[2]));
		double k1 = 2 * M_PI / (l[0] + (i + 1) * (l[1] + (i + 1) * l[2]));
		double kap = ki + (pos[j] - i) * (k1 - ki);
		double want = k0 + (kn - k0) * j / (K - 1.0);
		if (fabs(kap - want) > 1e-12)
			fail_msg("j=%d: kappa(p)=%.15g, want %.15g", j, kap, want);
	}
	assert_float_equal(pos[0], 0.0, 1e-9);
	assert_float_equal(pos[K - 1], K - 1.0, 1e-9);
	/* a wavelength that turns back is the schema's to refuse */
	c.preprocess.resample.wavelength_nm[2] = -0.01;
	assert_int_equal(cfg_check_backend(&c, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "preprocess.resample.wavelength_nm"));
}

/* ---- median -------------------------------------------------------------------------------- */

static void test_median_odd_and_even(void **s)
{
	float a[] = {5, 1, 4, 2, 3};
	float b[] = {4, 1, 3, 2};
	float c[] = {7, 7, 1, 7, 1, 1};
	float d[] = {2};
	float e[] = {9, -1};

	(void)s;
	assert_float_equal(cpu_median(a, 5), 3.0, 0);
	assert_float_equal(cpu_median(b, 4), 2.5, 0);
	assert_float_equal(cpu_median(c, 6), 4.0, 0);
	assert_float_equal(cpu_median(d, 1), 2.0, 0);
	assert_float_equal(cpu_median(e, 2), 4.0, 0);
	/* random sets against sorting */
	srand(7);
	for (int r = 0; r < 200; r++) {
		float v[37], w[37];
		int n = 1 + rand() % 37;
		for (int i = 0; i < n; i++)
			v[i] = w[i] = (float)(rand() % 11);
		for (int i = 1; i < n; i++)
			for (int j = i; j > 0 && w[j - 1] > w[j]; j--) {
				float t = w[j];
				w[j] = w[j - 1];
				w[j - 1] = t;
			}
		float want = n % 2 ? w[n / 2] : (w[n / 2 - 1] + w[n / 2]) / 2;
		assert_float_equal(cpu_median(v, n), want, 0);
	}
}

/* ---- packed 12-bit samples (docs/algorithms.md §0) ------------------------------------------------ */

static void test_unpack12_hand_computed(void **s)
{
	/* b0 b1 b2 = AB CD EF: Mono12p s0 = AB | D << 8, s1 = C | EF << 4; Mono12Packed
	 * s0 = AB << 4 | D, s1 = EF << 4 | C */
	static const struct {
		uint8_t b[3];
		bool gv;
		uint32_t s0, s1;
	} cases[] = {
	        {{0xab, 0xcd, 0xef}, false, 0xdab, 0xefc}, {{0xab, 0xcd, 0xef}, true, 0xabd, 0xefc},
	        {{0xff, 0x0f, 0x00}, false, 0xfff, 0x000}, {{0xff, 0x0f, 0x00}, true, 0xfff, 0x000},
	        {{0x00, 0xf0, 0xff}, false, 0x000, 0xfff}, {{0x00, 0xf0, 0xff}, true, 0x000, 0xfff},
	};
	uint32_t s0, s1;

	(void)s;
	for (size_t i = 0; i < VR_ARRAY_SIZE(cases); i++) {
		vr_unpack12(cases[i].b, cases[i].gv, &s0, &s1);
		assert_int_equal(s0, cases[i].s0);
		assert_int_equal(s1, cases[i].s1);
	}
}

/* Pack v[0..n) (12-bit values, n even) as u12p or u12gv. */
static void pack12(const uint16_t *v, size_t n, bool gv, uint8_t *o)
{
	for (size_t i = 0; i < n; i += 2, o += 3) {
		uint32_t a = v[i], b = v[i + 1];
		o[0] = (uint8_t)(gv ? a >> 4 : a);
		o[1] = (uint8_t)(gv ? (a & 0xf) | (b & 0xf) << 4 : (a >> 8) | (b & 0xf) << 4);
		o[2] = (uint8_t)(b >> 4);
	}
}

/* One epoch of the same 12-bit values as u16 and packed: identical outputs, for each
 * background mode (the convert step and the median's per-sample reads). */
static void packed_case(enum cfg_sample type, enum cfg_background bg, uint32_t shift)
{
	enum { K = 128, NX = 7, NY = 3 };
	static uint16_t v[NY][NX][K];
	static uint8_t packed[NY][NX][K / 2 * 3];
	static float L16[NY * NX * K / 2], Lp[NY * NX * K / 2];
	static uint8_t vol16[NY * NX * K / 2], volp[NY * NX * K / 2];
	uint64_t x = 0x9e3779b97f4a7c15ull;
	struct vr_config c;
	char err[256] = "";

	for (int b = 0; b < NY; b++)
		for (int a = 0; a < NX; a++) {
			for (int k = 0; k < K; k++) {
				x = x * 6364136223846793005ull + 1442695040888963407ull;
				v[b][a][k] = (uint16_t)(2048 + 900 * cos(0.4 * k + a) + (x >> 59));
			}
			pack12(v[b][a], K, type == CFG_SAMPLE_U12GV, packed[b][a]);
		}
	for (int pass = 0; pass < 2; pass++) {
		base_config(&c, K, NX, NY);
		c.geometry.sample_type = pass ? type : CFG_SAMPLE_U16;
		c.geometry.bit_shift = shift;
		c.preprocess.background.mode = bg;
		struct be_backend *be = open_cpu(&c);
		for (uint32_t b = 0; b < NY; b++)
			assert_int_equal(be_bscan_submit(be, 0, b, pass ? (void *)packed[b] : v[b]),
			                 0);
		struct be_output out = {.volume = pass ? volp : vol16, .lowres = pass ? Lp : L16};
		if (be_epoch_finish(be, 0, &out, err, sizeof(err)) < 0)
			fail_msg("%s", err);
		be_close(be);
	}
	for (size_t i = 0; i < sizeof(L16) / sizeof(L16[0]); i++)
		if (memcmp(&L16[i], &Lp[i], sizeof(float)) || vol16[i] != volp[i])
			fail_msg("%s %s shift %u: voxel %zu is %.9g (%u) packed, %.9g (%u) as u16",
			         cfg_sample_name(type), cfg_background_name(bg), shift, i, Lp[i],
			         volp[i], L16[i], vol16[i]);
}

static void test_packed12_equals_u16(void **s)
{
	(void)s;
	packed_case(CFG_SAMPLE_U12P, CFG_BG_ASCAN_MEAN, 0);
	packed_case(CFG_SAMPLE_U12GV, CFG_BG_ASCAN_MEAN, 0);
	packed_case(CFG_SAMPLE_U12P, CFG_BG_BSCAN_MEDIAN, 2);
	packed_case(CFG_SAMPLE_U12GV, CFG_BG_BSCAN_MEDIAN, 3);
	packed_case(CFG_SAMPLE_U12GV, CFG_BG_BSCAN_MEAN, 1);
}

/* ---- a single reflector --------------------------------------------------------------------------- */

static void reflector_case(uint32_t zp, bool flipz, uint32_t f, uint32_t want_bin)
{
	enum { K = 256, NX = 5, NY = 2 };
	struct vr_config c;
	static float raw[NY][NX][K];
	float L[NY * NX * 512];
	uint8_t vol[NY * NX * 512];
	char err[256] = "";

	base_config(&c, K, NX, NY);
	c.preprocess.zero_pad = zp;
	c.preprocess.flip.z = flipz;
	c.geometry.depth_range[1] = K * zp / 2;
	for (int b = 0; b < NY; b++)
		for (int a = 0; a < NX; a++)
			for (int k = 0; k < K; k++)
				raw[b][a][k] = 1000.0f + 300.0f * (float)cos(2 * M_PI * f * k / K);
	struct be_backend *be = open_cpu(&c);
	for (uint32_t b = 0; b < NY; b++)
		assert_int_equal(be_bscan_submit(be, 0, b, raw[b]), 0);
	struct be_output out = {.volume = vol, .lowres = L};
	if (be_epoch_finish(be, 0, &out, err, sizeof(err)) < 0)
		fail_msg("%s", err);
	uint32_t nz = K * zp / 2;
	for (int i = 0; i < NX * NY; i++) {
		uint32_t best = 0;
		for (uint32_t z = 1; z < nz; z++)
			if (L[i * nz + z] > L[i * nz + best])
				best = z;
		if (best != want_bin)
			fail_msg("A-scan %d: peak in bin %u, want %u (zero_pad %u flip.z %d)", i,
			         best, want_bin, zp, flipz);
		/* the value at the peak from a direct double DFT of the windowed cosine */
		double re = 0, im = 0, N = (double)K * zp;
		for (int k = 0; k < K; k++) {
			double w = 0.5 - 0.5 * cos(2 * M_PI * k / (K - 1.0));
			double v = 300.0 * cos(2 * M_PI * f * k / K) * w;
			re += v * cos(2 * M_PI * k * (flipz ? nz - 1 - want_bin : want_bin) / N);
			im -= v * sin(2 * M_PI * k * (flipz ? nz - 1 - want_bin : want_bin) / N);
		}
		double want_v = 20 * log10(hypot(re, im) + 1e-12) / 100;
		assert_float_equal(L[i * nz + want_bin], want_v, 1e-4);
		assert_int_equal(vol[i * nz + want_bin], (int)floor(255 * want_v + 0.5));
	}
	be_close(be);
}

static void test_reflector_lands_in_its_bin(void **s)
{
	(void)s;
	reflector_case(1, false, 40, 40);
	reflector_case(2, false, 40, 80);
	reflector_case(4, false, 17, 68);
	reflector_case(1, true, 40, 128 - 1 - 40);
}

/* ---- the paper's Fig. 2: nine 3x3 epochs, stride [3, 3] -> 9x9 --------------------------------- */

static void test_fig2_interlacing(void **s)
{
	enum { K = 16, N3 = 3, NZ = 8 };
	struct vr_config c;
	static float raw[N3][N3][K];
	float L[N3 * N3 * NZ];
	static float full[9 * 9 * NZ];
	char err[256] = "";

	(void)s;
	base_config(&c, K, N3, N3);
	c.geometry.stride[0] = c.geometry.stride[1] = 3;
	c.reconstruct.mode = CFG_RECON_NONCUMULATIVE;
	c.reconstruct.temporal = CFG_TEMPORAL_LINEAR;
	c.preprocess.db_range[0] = 0;
	c.preprocess.db_range[1] = 60;
	struct be_backend *be = open_cpu(&c);
	struct cpu_state *st = be_impl_state(be);
	assert_int_equal(st->geo.Y, 9);
	assert_int_equal(st->geo.X, 9);

	for (uint64_t e = 0; e < 9; e++) {
		/* every A-scan of every epoch is different: amplitude from (e, y, x) */
		for (int y = 0; y < N3; y++)
			for (int x = 0; x < N3; x++)
				for (int k = 0; k < K; k++)
					raw[y][x][k] =
					        100.0f + (float)(1 + e * 9 + y * 3 + x) *
					                         (float)cos(2 * M_PI * 3 * k / K);
		for (uint32_t b = 0; b < N3; b++)
			assert_int_equal(be_bscan_submit(be, e, b, raw[b]), 0);
		struct be_output out = {.lowres = L, .full = full};
		if (be_epoch_finish(be, e, &out, err, sizeof(err)) < 0)
			fail_msg("%s", err);
		uint32_t ox, oy;
		/* the one schedule (base/) is Fig. 2's: ox = e mod 3, oy = e div 3 */
		vr_scan_offset(e, 3, 3, &ox, &oy);
		assert_int_equal(ox, e % 3);
		assert_int_equal(oy, e / 3);
		/* Fig. 2: epoch 0 at [0,0], [0,3], [0,6], ...; epoch 1 at [0,1], [0,4], ... */
		for (int y = 0; y < N3; y++)
			for (int x = 0; x < N3; x++) {
				size_t fy = y * 3 + oy, fx = x * 3 + ox;
				assert_int_equal(st->E[fy * 9 + fx], (int64_t)e);
				assert_memory_equal(st->bvol + (fy * 9 + fx) * NZ,
				                    L + (y * N3 + x) * NZ, NZ * sizeof(float));
			}
		/* ages and weights: written positions are those with q = (Y%3)*3 + X%3 <= e */
		for (int Y = 0; Y < 9; Y++)
			for (int X = 0; X < 9; X++) {
				int64_t q = (Y % 3) * 3 + X % 3;
				int64_t want_e = q <= (int64_t)e ? q : -1;
				assert_int_equal(st->E[Y * 9 + X], want_e);
				float want_t =
				        want_e < 0 ? 0.0f
				                   : (float)fmax(9.0 - (double)(e - q), 0) / 9.0f;
				assert_float_equal(st->tcol[Y * 9 + X], want_t, 1e-7);
			}
	}
	/* after nine epochs every full-res position was written exactly at its epoch */
	assert_int_equal(st->E[0], 0);
	assert_int_equal(st->E[1], 1);
	assert_int_equal(st->E[3], 0);
	assert_int_equal(st->E[9], 3);
	assert_int_equal(st->E[80], 8);
	be_close(be);
}

static void test_exp_weights_and_constant_volume(void **s)
{
	enum { K = 16, NZ = 8 };
	struct vr_config c;
	static float raw[2][3][K];
	float L[2 * 3 * NZ];
	static float full[4 * 6 * NZ];
	char err[256] = "";

	(void)s;
	for (int comb = 0; comb < 2; comb++) {
		base_config(&c, K, 3, 2);
		c.geometry.stride[0] = c.geometry.stride[1] = 2;
		c.reconstruct.mode = CFG_RECON_NONCUMULATIVE;
		c.reconstruct.temporal = CFG_TEMPORAL_EXP;
		c.reconstruct.tau = 2.0;
		c.reconstruct.combine = comb ? CFG_COMBINE_PRODUCT : CFG_COMBINE_SUM;
		c.preprocess.window.type = CFG_WIN_NONE;
		c.preprocess.background.mode = CFG_BG_NONE;
		c.preprocess.db_range[0] = 0;
		c.preprocess.db_range[1] = 100;
		struct be_backend *be = open_cpu(&c);
		struct cpu_state *st = be_impl_state(be);
		/* a constant spectrum: every A-scan is the same, so is every L voxel of a depth */
		for (int b = 0; b < 2; b++)
			for (int a = 0; a < 3; a++)
				for (int k = 0; k < K; k++)
					raw[b][a][k] = 1000.0f;
		for (uint64_t e = 0; e < 6; e++) {
			for (uint32_t b = 0; b < 2; b++)
				assert_int_equal(be_bscan_submit(be, e, b, raw[b]), 0);
			struct be_output out = {.lowres = L, .full = full};
			if (be_epoch_finish(be, e, &out, err, sizeof(err)) < 0)
				fail_msg("%s", err);
			for (int i = 0; i < 4 * 6; i++) {
				int64_t E = st->E[i];
				float want = E < 0 ? 0.0f : (float)exp(-(double)(e - E) / 2.0);
				assert_float_equal(st->tcol[i], want, 1e-6);
			}
		}
		/* all positions valid after 4 epochs: z-constant would give exactly L; here L
		 * varies only with z, and the output at a depth mixes its z neighbours only */
		for (int i = 0; i < 4 * 6; i++)
			for (int z = 1; z + 1 < NZ; z++) {
				float lo = fminf(fminf(L[z - 1], L[z]), L[z + 1]);
				float hi = fmaxf(fmaxf(L[z - 1], L[z]), L[z + 1]);
				float v = full[i * NZ + z];
				if (v < lo - 1e-6f || v > hi + 1e-6f)
					fail_msg("combine %d voxel %d z %d: %g outside [%g, %g]",
					         comb, i, z, v, lo, hi);
			}
		be_close(be);
	}
}

VR_TEST_GROUP(cpu)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_window_hann),
	        cmocka_unit_test(test_window_hamming),
	        cmocka_unit_test(test_window_blackman),
	        cmocka_unit_test(test_window_gauss),
	        cmocka_unit_test(test_window_tukey),
	        cmocka_unit_test(test_cubic_exact_on_cubics),
	        cmocka_unit_test(test_cubic_exact_on_lines),
	        cmocka_unit_test(test_linear_exact_on_lines),
	        cmocka_unit_test(test_spline_exact_on_lines),
	        cmocka_unit_test(test_spline_matches_direct_solve),
	        cmocka_unit_test(test_wavelength_positions_invert_kappa),
	        cmocka_unit_test(test_median_odd_and_even),
	        cmocka_unit_test(test_unpack12_hand_computed),
	        cmocka_unit_test(test_packed12_equals_u16),
	        cmocka_unit_test(test_reflector_lands_in_its_bin),
	        cmocka_unit_test(test_fig2_interlacing),
	        cmocka_unit_test(test_exp_weights_and_constant_volume),
	};
	return cmocka_run_group_tests_name("cpu", tests, NULL, NULL);
}
