/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the synthetic scanner: determinism for a seed, scan offsets landing at the
 * right full-resolution positions, shot noise against snr_db, the ground truth against the
 * spectra, the exposed resampling and dispersion corrections (exactly, on the mirror phantom),
 * and quantization.
 */
#include <complex.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sources/sim.h"
#include "tests/unit/vrtest.h"

#define assert_near(a, b, tol)                                                                     \
	do {                                                                                       \
		double a_ = (a), b_ = (b), t_ = (tol);                                             \
		if (!(fabs(a_ - b_) <= t_))                                                        \
			fail_msg("%s = %.9g, expected %.9g within %g", #a, a_, b_, t_);            \
	} while (0)

/* The processing's windows over K samples (docs/algorithms.md §1.5): rectangular or Hann. */
static float *window(uint32_t K, bool hann)
{
	float *w = malloc(K * sizeof(*w));

	assert_non_null(w);
	for (uint32_t j = 0; j < K; j++)
		w[j] = hann ? (float)(0.5 - 0.5 * cos(2 * M_PI * j / (K - 1))) : 1.0f;
	return w;
}

static struct sim_params small(void)
{
	struct sim_params p;

	memset(&p, 0, sizeof(p));
	p.samples_per_ascan = 256;
	p.ascans_per_bscan = 8;
	p.bscans_per_volume = 6;
	p.stride_x = 2;
	p.stride_y = 3;
	p.sample_type = VOLREC_SAMPLE_U16;
	p.rate = 25;
	p.seed = 7;
	strcpy(p.phantom, "retina");
	p.deg_per_s = 0.5;
	p.snr_db = 40;
	return p;
}

static struct sim *make(const struct sim_params *p)
{
	struct sim *s = NULL;
	char err[256] = "";
	int rc = sim_create(p, &s, err, sizeof(err));
	if (rc)
		fail_msg("sim_create: %s (%d)", err, rc);
	return s;
}

static void *bscan(struct sim *s, uint64_t e, uint32_t ox, uint32_t oy, uint32_t b)
{
	size_t n = sim_bscan_bytes(s);
	void *buf = malloc(n);
	assert_non_null(buf);
	assert_int_equal(sim_bscan(s, e, ox, oy, b, buf, n), 0);
	return buf;
}

static void same_seed_gives_same_bscans_in_any_order(void **state)
{
	struct sim_params p = small();
	struct sim *a = make(&p), *b = make(&p);
	size_t n = sim_bscan_bytes(a);

	/* b generates other B-scans first: the result must not depend on history */
	free(bscan(b, 9, 1, 2, 4));
	free(bscan(b, 2, 0, 0, 0));
	void *x = bscan(a, 5, 1, 2, 3), *y = bscan(b, 5, 1, 2, 3);
	assert_memory_equal(x, y, n);
	free(x);
	free(y);
	sim_destroy(a);
	sim_destroy(b);
}

static void other_seed_or_epoch_gives_other_bscans(void **state)
{
	struct sim_params p = small(), q = small();
	q.seed = 8;
	struct sim *a = make(&p), *b = make(&q);
	size_t n = sim_bscan_bytes(a);
	void *x = bscan(a, 5, 1, 2, 3), *y = bscan(b, 5, 1, 2, 3), *z = bscan(a, 6, 1, 2, 3);

	assert_memory_not_equal(x, y, n);
	assert_memory_not_equal(x, z, n);
	free(x);
	free(y);
	free(z);
	sim_destroy(a);
	sim_destroy(b);
}

/* A-scan (b, a) at offset (ox, oy) of a strided scan is the full-resolution A-scan
 * (b*sy + oy, a*sx + ox) of an unstrided scan of the same field (noiseless, same epoch). */
static void offset_ascans_land_at_full_resolution_positions(void **state)
{
	struct sim_params p = small(), f = small();
	p.noiseless = f.noiseless = true;
	p.sample_type = f.sample_type = VOLREC_SAMPLE_F32;
	f.stride_x = f.stride_y = 1;
	f.ascans_per_bscan = p.ascans_per_bscan * p.stride_x;
	f.bscans_per_volume = p.bscans_per_volume * p.stride_y;
	struct sim *s = make(&p), *full = make(&f);
	const uint32_t K = p.samples_per_ascan, e = 4;

	for (uint32_t oy = 0; oy < p.stride_y; oy++) {
		for (uint32_t ox = 0; ox < p.stride_x; ox++) {
			for (uint32_t b = 0; b < p.bscans_per_volume; b += 2) {
				float *lo = bscan(s, e, ox, oy, b);
				float *hi = bscan(full, e, 0, 0, b * p.stride_y + oy);
				for (uint32_t a = 0; a < p.ascans_per_bscan; a++)
					assert_memory_equal(lo + (size_t)a * K,
					                    hi + (size_t)(a * p.stride_x + ox) * K,
					                    K * sizeof(float));
				/* and not at a neighbouring position */
				assert_memory_not_equal(lo, hi + (size_t)((ox + 1) % 2) * K,
				                        K * sizeof(float));
				free(lo);
				free(hi);
			}
		}
	}
	sim_destroy(s);
	sim_destroy(full);
}

static void bidirectional_reverses_odd_bscans(void **state)
{
	struct sim_params p = small(), q = small();
	q.bidirectional = true;
	struct sim *a = make(&p), *b = make(&q);
	const uint32_t K = p.samples_per_ascan, nx = p.ascans_per_bscan;
	uint16_t *x = bscan(a, 3, 1, 0, 1), *y = bscan(b, 3, 1, 0, 1);
	uint16_t *x0 = bscan(a, 3, 1, 0, 0), *y0 = bscan(b, 3, 1, 0, 0);

	assert_memory_equal(x0, y0, sim_bscan_bytes(a)); /* even B-scans unchanged */
	/* noise is keyed on the buffer index, so compare the noise-free part loosely: the
	 * reversed A-scan must correlate with the forward one at the mirrored index */
	for (uint32_t a2 = 0; a2 < nx; a2++) {
		const uint16_t *f = x + (size_t)(nx - 1 - a2) * K, *r = y + (size_t)a2 * K;
		double d = 0, n = 0;
		for (uint32_t k = 0; k < K; k++) {
			d += fabs((double)f[k] - r[k]);
			n += f[k];
		}
		assert_true(d / n < 0.05);
	}
	assert_memory_not_equal(x, y, sim_bscan_bytes(a));
	free(x);
	free(y);
	free(x0);
	free(y0);
	sim_destroy(a);
	sim_destroy(b);
}

/* Noise = noisy - noiseless spectra (f32): its standard deviation relative to sqrt(envelope)
 * must be sigma = A sqrt(K)/2 10^(-snr/20). */
static double measured_sigma(double snr_db, double *expect)
{
	struct sim_params p = small(), q;
	p.sample_type = VOLREC_SAMPLE_F32;
	p.snr_db = snr_db;
	p.ascans_per_bscan = 32;
	q = p;
	q.noiseless = true;
	struct sim *a = make(&p), *b = make(&q);
	const uint32_t K = p.samples_per_ascan;
	double ss = 0;
	size_t n = 0;

	for (uint32_t bb = 0; bb < 4; bb++) {
		float *x = bscan(a, 1, 0, 0, bb), *y = bscan(b, 1, 0, 0, bb);
		for (uint32_t i = 0; i < K * p.ascans_per_bscan; i++) {
			double d = ((double)x[i] - y[i]) / sqrt(sim_envelope(a, i % K));
			ss += d * d;
			n++;
		}
		free(x);
		free(y);
	}
	*expect = sim_unit_amplitude(a) * sqrt((double)K) / 2 * pow(10, -snr_db / 20);
	assert_near(sim_noise_sigma(a), *expect, 1e-9 * *expect);
	assert_true(sim_noise_sigma(b) == 0);
	sim_destroy(a);
	sim_destroy(b);
	return sqrt(ss / n);
}

static void shot_noise_matches_snr_db(void **state)
{
	double e40, e20;
	double m40 = measured_sigma(40, &e40), m20 = measured_sigma(20, &e20);

	if (fabs(m40 / e40 - 1) > 0.05 || fabs(m20 / e20 - 1) > 0.05)
		fail_msg("noise sigma: measured %g / %g, expected %g / %g", m40, m20, e40, e20);
	/* 20 dB apart: a factor of 10 */
	assert_near(m20 / m40, 10.0, 0.5);
}

static void quantization_respects_sample_type_and_bit_shift(void **state)
{
	struct sim_params p = small();
	p.bit_shift = 4;
	struct sim *s = make(&p);
	uint16_t *u = bscan(s, 0, 0, 0, 0);
	const size_t n = sim_bscan_bytes(s) / 2;
	size_t odd = 0;
	double mean = 0;

	for (size_t i = 0; i < n; i++) {
		odd += u[i] & 0xf;
		mean += u[i];
	}
	assert_int_equal(odd, 0);
	mean /= n;
	/* DC sits near 45 % of full scale times the envelope */
	assert_true(mean > 0.2 * 65535 && mean < 0.5 * 65535);
	free(u);
	sim_destroy(s);

	p = small();
	p.sample_type = VOLREC_SAMPLE_I16;
	s = make(&p);
	int16_t *v = bscan(s, 0, 0, 0, 0);
	int neg = 0, pos = 0;
	for (size_t i = 0; i < n; i++) {
		neg += v[i] < 0;
		pos += v[i] > 0;
	}
	assert_true(neg > 0 && pos > 0); /* centred on zero */
	free(v);
	sim_destroy(s);
}

static void bad_parameters_are_rejected_with_a_message(void **state)
{
	struct sim_params p = small();
	struct sim *s = (struct sim *)0x1;
	char err[256];

	strcpy(p.phantom, "brain");
	assert_int_equal(sim_create(&p, &s, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "brain"));
	assert_ptr_equal(s, (struct sim *)0x1);
	p = small();
	p.stride_x = 0;
	assert_int_equal(sim_create(&p, &s, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "stride"));
	p = small();
	p.samples_per_ascan = 8;
	assert_int_equal(sim_create(&p, &s, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "samples_per_ascan"));

	p = small();
	s = make(&p);
	uint8_t buf[16];
	assert_int_equal(sim_bscan(s, 0, 2, 0, 0, buf, sizeof(buf)), -EINVAL); /* ox >= sx */
	assert_int_equal(sim_bscan(s, 0, 0, 0, 0, buf, sizeof(buf)), -EINVAL); /* short buffer */
	sim_destroy(s);
}

static void resample_table_equals_poly_and_inverts_the_pixel_k_map(void **state)
{
	struct sim_params p = small();
	struct sim *s = make(&p);
	const uint32_t K = p.samples_per_ascan;
	double poly[4], *t = malloc(K * sizeof(double));

	sim_resample_poly(s, poly);
	sim_resample_table(s, t);
	assert_near(t[0], 0, 1e-9);
	assert_near(t[K - 1], K - 1, 1e-9);
	double maxdev = 0;
	for (uint32_t j = 0; j < K; j++) {
		double u = (double)j / (K - 1);
		double v = poly[0] + poly[1] * u + poly[2] * u * u + poly[3] * u * u * u;
		assert_near(t[j], v, 1e-9);
		if (fabs(t[j] - j) > maxdev)
			maxdev = fabs(t[j] - j);
	}
	assert_true(maxdev > 0.02 * K); /* the non-linearity matters */
	/* pixel i holds linear-k u(i); the table maps u back to pixel positions */
	for (uint32_t i = 0; i < K; i += 17) {
		double u = sim_pixel_k(s, i), v = u / (K - 1);
		double back = poly[0] + poly[1] * v + poly[2] * v * v + poly[3] * v * v * v;
		assert_near(back, i, 1e-6);
	}
	free(t);
	sim_destroy(s);
}

/* Correlation of the depth profile that the spectrum gives with the exposed corrections
 * (background removed, resampled to linear k, dispersion undone, no window), with the ground
 * truth at the same position imaged with a rectangular window; without either correction it
 * drops. */
static double profile_truth_correlation(bool correct_dispersion, bool correct_k)
{
	struct sim_params p = small();
	p.noiseless = true;
	p.sample_type = VOLREC_SAMPLE_F32;
	p.deg_per_s = 3;
	struct sim *s = make(&p);
	const uint32_t K = p.samples_per_ascan, Z = K / 2, X = p.ascans_per_bscan * p.stride_x;
	const uint32_t Y = p.bscans_per_volume * p.stride_y;
	const uint64_t e = 11;
	uint32_t ox, oy;
	double *ref = malloc(K * sizeof(double)), disp[2];
	float *truth = malloc((size_t)Y * X * Z * sizeof(float));
	double sxy = 0, sx = 0, sy = 0, sxx = 0, syy = 0;
	size_t n = 0;

	vr_scan_offset(e, p.stride_x, p.stride_y, &ox, &oy);
	sim_reference_spectrum(s, ref);
	sim_dispersion_coeffs(s, disp);
	float *rect = window(K, false);
	assert_int_equal(sim_truth(s, e, 1, rect, 0, Z, truth), 0);
	double norm = 0;
	for (uint32_t j = 0; j < K; j++)
		norm += sim_envelope_k(s, j);
	for (uint32_t b = 1; b < p.bscans_per_volume; b += 2) {
		float *spec = bscan(s, e, ox, oy, b);
		for (uint32_t a = 0; a < p.ascans_per_bscan; a += 3) {
			const float *x = spec + (size_t)a * K;
			const float *t =
			        truth +
			        ((size_t)(b * p.stride_y + oy) * X + a * p.stride_x + ox) * Z;
			for (uint32_t z = 0; z < Z; z++) {
				double complex acc = 0;
				for (uint32_t i = 0; i < K; i++) {
					double u = correct_k ? sim_pixel_k(s, i) : i;
					double du = i == 0 || i == K - 1 ? 0.5
					                                 : (sim_pixel_k(s, i + 1) -
					                                    sim_pixel_k(s, i - 1)) /
					                                           2;
					double v = u / (K - 1) - 0.5;
					double ph = 2 * M_PI * u * z / K;
					if (correct_dispersion)
						ph += disp[0] * v * v + disp[1] * v * v * v;
					acc += (x[i] - ref[i]) * (correct_k ? du : 1) *
					       cexp(-I * ph);
				}
				double m = cabs(acc) / (sim_unit_amplitude(s) * norm / 2),
				       tt = t[z];
				sxy += m * tt;
				sx += m;
				sy += tt;
				sxx += m * m;
				syy += tt * tt;
				n++;
			}
		}
		free(spec);
	}
	free(ref);
	free(rect);
	free(truth);
	sim_destroy(s);
	return (sxy - sx * sy / n) / sqrt((sxx - sx * sx / n) * (syy - sy * sy / n));
}

static void truth_matches_spectra_with_the_exposed_corrections(void **state)
{
	double good = profile_truth_correlation(true, true);
	double nodisp = profile_truth_correlation(false, true);
	double nok = profile_truth_correlation(true, false);

	/* measured: corrected 1.000 (the truth is this imaging without the conjugate image),
	 * no dispersion correction 0.78, no k correction 0.66 */
	if (!(good > 0.999 && nodisp < good - 0.2 && nok < good - 0.2))
		fail_msg("correlation with truth: corrected %.3f, no dispersion correction %.3f, "
		         "no k correction %.3f",
		         good, nodisp, nok);
}

/*
 * The mirror phantom's spectrum is exactly the documented model with the exposed corrections:
 * s(i) - reference(i) = A S(u_i) cos(2 pi u_i zm / K + phi(u_i)), phi from
 * sim_dispersion_coeffs on v = u_i / (K - 1) - 0.5 (volrec's exp(-i phi) convention: the
 * positive-frequency part carries +phi), zm = SIM_MIRROR_MM / dz; the truth (Hann window,
 * zero_pad 2) is 1 at 2 zm and elsewhere the point-spread function |sum_j w[j] E(j)
 * exp(-2 pi i j (z - 2 zm) / 2K)| / sum_j w[j] E(j), computed here in double.
 */
static void mirror_spectrum_is_the_model_with_the_exposed_corrections(void **state)
{
	struct sim_params p = small();
	strcpy(p.phantom, "mirror");
	p.noiseless = true;
	p.sample_type = VOLREC_SAMPLE_F32;
	p.stride_x = p.stride_y = 1;
	struct sim *s = make(&p);
	const uint32_t K = p.samples_per_ascan, Z = K / 2;
	const uint32_t zm = (uint32_t)lround(SIM_MIRROR_MM / (SIM_DEPTH_MM / Z));
	double *ref = malloc(K * sizeof(double)), disp[2], maxerr[2] = {0, 0};
	float *truth =
	        malloc((size_t)p.ascans_per_bscan * p.bscans_per_volume * 2 * Z * sizeof(float));
	float *spec = bscan(s, 3, 0, 0, 1);

	assert_int_equal(zm, K / 4);
	sim_reference_spectrum(s, ref);
	sim_dispersion_coeffs(s, disp);
	for (uint32_t a = 0; a < p.ascans_per_bscan; a++) {
		for (uint32_t i = 0; i < K; i++) {
			double u = sim_pixel_k(s, i), v = u / (K - 1) - 0.5;
			double phi = disp[0] * v * v + disp[1] * v * v * v;
			double model = sim_unit_amplitude(s) * sim_envelope(s, i);
			double x = spec[(size_t)a * K + i] - ref[i];
			double err[2] = {fabs(x - model * cos(2 * M_PI * u * zm / K + phi)),
			                 fabs(x - model * cos(2 * M_PI * u * zm / K - phi))};
			for (int k = 0; k < 2; k++)
				if (err[k] > maxerr[k])
					maxerr[k] = err[k];
		}
	}
	/* float32 generation with an 8-tap interpolation: -80 dB of A; the other sign of the
	 * dispersion phase is far off */
	if (!(maxerr[0] < 1e-4 * sim_unit_amplitude(s) && maxerr[1] > 0.5 * sim_unit_amplitude(s)))
		fail_msg("mirror spectrum vs model: %g (phase +phi), %g (phase -phi), A = %g",
		         maxerr[0], maxerr[1], sim_unit_amplitude(s));

	float *hann = window(K, true);
	double psf[2 * 128], norm = 0, worst = 0;
	assert_true(Z <= 128);
	for (uint32_t j = 0; j < K; j++)
		norm += hann[j] * sim_envelope_k(s, j);
	for (uint32_t z = 0; z < 2 * Z; z++) {
		double complex acc = 0;
		for (uint32_t j = 0; j < K; j++)
			acc += hann[j] * sim_envelope_k(s, j) *
			       cexp(-I * 2 * M_PI * j * ((double)z - 2.0 * zm) / (2.0 * K));
		psf[z] = cabs(acc) / norm;
	}
	assert_int_equal(sim_truth(s, 3, 2, hann, 0, 2 * Z, truth), 0);
	for (size_t c = 0; c < (size_t)p.ascans_per_bscan * p.bscans_per_volume; c++) {
		assert_true(truth[c * 2 * Z + 2 * zm] == 1.0f);
		for (uint32_t z = 0; z < 2 * Z; z++)
			if (fabs(truth[c * 2 * Z + z] - psf[z]) > worst)
				worst = fabs(truth[c * 2 * Z + z] - psf[z]);
	}
	/* float32 FFTs of 256 and 512 points */
	if (!(worst < 1e-5))
		fail_msg("mirror truth vs the point-spread function: %g", worst);
	assert_int_equal(sim_truth(s, 3, 2, NULL, 0, 2 * Z, truth), -EINVAL);
	free(hann);
	free(spec);
	free(ref);
	free(truth);
	sim_destroy(s);
}

static void truth_has_layers_and_moves_with_the_phantom(void **state)
{
	struct sim_params p = small();
	p.deg_per_s = 20;
	struct sim *s = make(&p);
	const uint32_t X = 16, Y = 18, Z = 256; /* zero_pad 2: 256 output bins */
	float *t0 = malloc((size_t)X * Y * Z * sizeof(float));
	float *t1 = malloc((size_t)X * Y * Z * sizeof(float));
	float *t2 = malloc((size_t)X * Y * Z * sizeof(float));

	float *hann = window(p.samples_per_ascan, true);

	assert_int_equal(sim_truth(s, 0, 2, hann, 0, Z, t0), 0);
	assert_int_equal(sim_truth(s, 50, 2, hann, 0, Z, t1), 0); /* 2 s later: 40 degrees */
	assert_int_equal(sim_truth(s, 0, 2, hann, 0, Z, t2), 0);
	assert_memory_equal(t0, t2, (size_t)X * Y * Z * sizeof(float));
	assert_memory_not_equal(t0, t1, (size_t)X * Y * Z * sizeof(float));
	size_t nonzero = 0;
	for (size_t i = 0; i < (size_t)X * Y * Z; i++) {
		assert_true(t0[i] >= 0 && t0[i] <= 1);
		nonzero += t0[i] > 0;
	}
	/* depth 0.55 mm of 2 mm = bin 70 of 256: above it only the point-spread function's
	 * tail (Hann window and Gaussian source: below -60 dB ten bins away) */
	for (size_t c = 0; c < (size_t)X * Y; c++)
		for (uint32_t z = 0; z < 60; z++)
			assert_true(t0[c * Z + z] < 1e-3f);
	size_t strong = 0;
	for (size_t i = 0; i < (size_t)X * Y * Z; i++)
		strong += t0[i] > 0.05f;
	assert_true(strong > (size_t)X * Y * 40); /* the retina is ~0.4-0.7 mm thick */
	assert_true(nonzero >= strong);
	assert_int_equal(sim_truth(s, 0, 2, hann, 10, 300, t0), -EINVAL);
	free(hann);
	free(t0);
	free(t1);
	free(t2);
	sim_destroy(s);
}

VR_TEST_GROUP(sim)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(same_seed_gives_same_bscans_in_any_order),
	        cmocka_unit_test(other_seed_or_epoch_gives_other_bscans),
	        cmocka_unit_test(offset_ascans_land_at_full_resolution_positions),
	        cmocka_unit_test(bidirectional_reverses_odd_bscans),
	        cmocka_unit_test(shot_noise_matches_snr_db),
	        cmocka_unit_test(quantization_respects_sample_type_and_bit_shift),
	        cmocka_unit_test(bad_parameters_are_rejected_with_a_message),
	        cmocka_unit_test(resample_table_equals_poly_and_inverts_the_pixel_k_map),
	        cmocka_unit_test(truth_matches_spectra_with_the_exposed_corrections),
	        cmocka_unit_test(truth_has_layers_and_moves_with_the_phantom),
	        cmocka_unit_test(mirror_spectrum_is_the_model_with_the_exposed_corrections),
	};
	return cmocka_run_group_tests_name("sim", tests, NULL, NULL);
}
