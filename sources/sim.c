/* SPDX-License-Identifier: MIT */
/*
 * The synthetic scanner: retina phantom (docs/replay-format.md and docs/shim.md describe how it
 * is used), per-A-scan spectra through one inverse FFT on a demodulated uniform k grid plus an
 * 8-tap Lagrange interpolation onto the non-linear pixel grid, and the ground truth.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fftw3.h>

#include "sources/sim.h"
#include "sources/sim_scene.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "sim writes little-endian samples by memcpy: a big-endian port needs byte swaps here"
#endif

#define NTAP          8 /* Lagrange taps, nodes floor(u)-3 .. floor(u)+4 */
#define TAP_LO        3 /* nodes before floor(u) */
#define NPHASOR       SIM_NPHASOR
#define NLAYER        10 /* NFL GCL IPL INL OPL ONL ELM IS/OS RPE choroid */
#define NVESSEL       4
#define TISSUE_TOP_MM 0.55 /* the phantom never reaches above ... */
#define TISSUE_BOT_MM 1.45 /* ... or below these depths (keeps the k band narrow) */
#define CELL_XY_MM    SIM_CELL_XY_MM
#define CELL_Z_MM     SIM_CELL_Z_MM
#define BEAM_CELLS    SIM_BEAM_CELLS

/* Non-linearity: pixel position of linear-k index j is (K-1) * h(j / (K-1)),
 * h(v) = v + NL_A v (1 - v) + NL_B v (1 - v) (2v - 1). */
#define NL_A 0.12
#define NL_B 0.04
/* Dispersion phase added to the signal at linear-k index u, v = u/(K-1) - 0.5. */
#define DISP_A2 30.0
#define DISP_A3 -12.0

static const double layer_refl[NLAYER] = {
        0.70, /* NFL */
        0.16, /* GCL */
        0.40, /* IPL */
        0.07, /* INL */
        0.35, /* OPL */
        0.03, /* ONL */
        0.30, /* ELM */
        0.80, /* IS/OS */
        1.00, /* RPE */
        0.35, /* choroid (attenuated with depth) */
};

/* Vessels: centre line y = c0 + c1 x + c2 x^2 (horizontal) or x = ... (vertical), radius mm. */
static const struct {
	bool vertical;
	double c0, c1, c2, radius;
} vessels[NVESSEL] = {
        {false, 0.90, 0.10, -0.05, 0.045},
        {false, -0.80, -0.15, 0.06, 0.035},
        {true, 1.00, 0.00, 0.10, 0.030},
        {true, -1.10, 0.05, -0.08, 0.025},
};

typedef float v4f __attribute__((vector_size(16)));

struct sim {
	struct sim_params p;
	uint32_t K, X, Y;
	size_t abytes;     /* bytes of one raw A-scan */
	double dz;         /* mm per depth bin */
	uint32_t zlo, zhi; /* bins that may hold tissue */
	int32_t zc;        /* demodulation centre bin */
	double amp;        /* A: unit-reflector interference amplitude */
	double dc;         /* DC level */
	double sigma;      /* shot noise at the envelope peak */
	double fs;         /* full scale of the digitizer (before bit_shift) */
	double *u;         /* [K] linear-k coordinate of pixel i */
	float *env;        /* [K] */
	float *base;       /* [K] DC * env + fixed pattern */
	float *nsd;        /* [K] sigma * sqrt(env) */
	int32_t *tap0;     /* [K] first node + TAP_LO (index into ext) */
	float *tapw;       /* [K][NTAP] */
	float *rot;        /* [K][2] A env exp(i(phi(u) + 2 pi u zc / K)) */
	float phasor[NPHASOR][2];
	float gauss[65536];  /* standard normal quantiles at (j + 0.5) / 65536 */
	fftwf_complex *grid; /* [K] */
	float *ext_re;       /* [K + NTAP] grid with periodic wrap, real parts */
	float *ext_im;       /* [K + NTAP] imaginary parts */
	float *spec;         /* [K] one A-scan before quantization */
	fftwf_plan plan;
	bool mirror;  /* phantom "mirror": one flat reflector of amplitude 1 ... */
	uint32_t zm;  /* ... at this depth bin (mirror_mm), phase 0 */
	bool tilted;  /* phantom "tilted": the retina and a strong tilted reflector */
	bool bowl;    /* phantom "bowl": the retina bent into a bowl (SIM_CURVE_*) */
	bool blocked; /* phantom "blocked": the sample arm blocked, no light back from it */
	/* a solid phantom (sim_scene.c): its scene, and a column's reflectivity at zlo..zhi */
	struct sim_scene scene;
	float *sol; /* [zhi - zlo + 1][2] */
};

/* A column of the phantom at one lateral position and time. */
struct column {
	double top[NLAYER + 1]; /* top of each layer, top[NLAYER] = bottom of the choroid */
	double vtop[NVESSEL], vbot[NVESSEL];
	int nv;
	int32_t tilt_bin; /* "tilted": depth bin of the strong reflector here, else -1 */
	uint64_t hcol;    /* hash of the lateral scatterer cell */
	uint64_t hflow;   /* hash for blood (changes every epoch) */
	double dz;        /* axial displacement of the phantom at this time, mm */
	/* beam_um > 0: the scatterer cells under the beam, each with its hash, its blood hash and
	 * its amplitude weight (the weights' squares sum to 1) */
	int ncell;
	uint64_t chash[BEAM_CELLS], cflow[BEAM_CELLS];
	float cw[BEAM_CELLS];
};

/* Approximately standard normal from one 64-bit value (Irwin-Hall of four 16-bit uniforms). */
static inline float gauss64(uint64_t r)
{
	uint32_t s = (uint32_t)(r & 0xffff) + (uint32_t)((r >> 16) & 0xffff) +
	             (uint32_t)((r >> 32) & 0xffff) + (uint32_t)(r >> 48);
	/* sum of 4 U(0,1): mean 2, variance 1/3 */
	return ((float)s * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;
}

void sim_params_from_config(struct sim_params *p, const struct vr_config *cfg)
{
	memset(p, 0, sizeof(*p));
	p->samples_per_ascan = cfg->geometry.samples_per_ascan;
	p->ascans_per_bscan = cfg->geometry.ascans_per_bscan;
	p->bscans_per_volume = cfg->geometry.bscans_per_volume;
	p->stride_x = cfg->geometry.stride[0];
	p->stride_y = cfg->geometry.stride[1];
	p->sample_type = cfg_sample_abi(cfg->geometry.sample_type);
	p->bit_shift = cfg->geometry.bit_shift;
	p->bidirectional = cfg->geometry.bidirectional;
	p->rate = cfg->source.rate;
	p->seed = cfg->source.synth.seed;
	snprintf(p->phantom, sizeof(p->phantom), "%s", cfg->source.synth.phantom);
	p->deg_per_s = cfg->source.synth.deg_per_s;
	for (int i = 0; i < 3; i++) {
		p->shift_mm_per_s[i] = cfg->source.synth.shift_mm_per_s[i];
		p->jump_mm[i] = cfg->source.synth.jump_mm[i];
	}
	p->jump_epoch = cfg->source.synth.jump_epoch;
	p->jump_deg = cfg->source.synth.jump_deg;
	for (int i = 0; i < 3; i++) {
		p->periodic_mm[i] = cfg->source.synth.periodic_mm[i];
		p->periodic_deg[i] = cfg->source.synth.periodic_deg[i];
	}
	for (int i = 0; i < 2; i++) {
		p->jump_tilt_deg[i] = cfg->source.synth.jump_tilt_deg[i];
		p->tilt_deg_per_s[i] = cfg->source.synth.tilt_deg_per_s[i];
		p->warp_centre_mm[i] = cfg->source.synth.warp_centre_mm[i];
	}
	p->tilt_max_deg = cfg->source.synth.tilt_max_deg;
	p->periodic_hz = cfg->source.synth.periodic_hz;
	p->warp_mm = cfg->source.synth.warp_mm;
	p->warp_radius_mm = cfg->source.synth.warp_radius_mm;
	p->warp_hz = cfg->source.synth.warp_hz;
	p->snr_db = cfg->source.synth.snr_db;
	p->mirror_mm = cfg->source.synth.mirror_mm;
	p->beam_um = cfg->source.synth.beam_um;
	p->flow_peak_mm_s = cfg->source.synth.flow.peak_mm_per_s;
	p->flow_direction = cfg->source.synth.flow.direction;
	p->flow_bulk_um = cfg->source.synth.flow.bulk_um_per_repeat;
	p->flow_decor_um = cfg->source.synth.flow.decorrelation_um;
	p->flow_tau_us = cfg->source.synth.flow.blood_tau_us;
	p->ascan_period_us = cfg->geometry.ascan_period_us;
	p->bscan_period_us = cfg->geometry.bscan_period_us;
	p->wavelength_nm = cfg->geometry.center_wavelength_nm;
	p->refractive_index = cfg->geometry.refractive_index;
}

void sim_params_from_geometry(struct sim_params *p, const struct volrec_shim_geometry *g)
{
	*p = (struct sim_params){
	        .samples_per_ascan = g->samples_per_ascan,
	        .ascans_per_bscan = g->ascans_per_bscan,
	        .bscans_per_volume = g->bscans_per_volume,
	        .stride_x = g->stride_x,
	        .stride_y = g->stride_y,
	        .sample_type = g->sample_type,
	        .bidirectional = g->bidirectional,
	        .rate = g->rate,
	};
}

void sim_args_defaults(struct sim_args *a)
{
	*a = (struct sim_args){.seed = 1, .deg_per_s = 0.25, .snr_db = 40};
	snprintf(a->phantom, sizeof(a->phantom), "retina");
}

void sim_params_from_args(struct sim_params *p, const struct volrec_shim_geometry *g,
                          const struct sim_args *a)
{
	sim_params_from_geometry(p, g);
	if (a->motion_rate > 0)
		p->rate = a->motion_rate;
	p->seed = a->seed;
	snprintf(p->phantom, sizeof(p->phantom), "%s", a->phantom);
	p->deg_per_s = a->deg_per_s;
	p->snr_db = a->snr_db;
}

static double nl_h(double v)
{
	return v + NL_A * v * (1 - v) + NL_B * v * (1 - v) * (2 * v - 1);
}

static double nl_dh(double v)
{
	/* h = (1 + A - B) v + (-A + 3B) v^2 - 2B v^3 */
	return (1 + NL_A - NL_B) + 2 * (-NL_A + 3 * NL_B) * v - 6 * NL_B * v * v;
}

static pthread_once_t fftw_once = PTHREAD_ONCE_INIT;
static void fftw_init(void)
{
	fftwf_make_planner_thread_safe();
}

static int check_params(const struct sim_params *p, char *err, size_t errlen)
{
	uint64_t bytes;

	if (strcmp(p->phantom, "retina") != 0 && strcmp(p->phantom, "mirror") != 0 &&
	    strcmp(p->phantom, "tilted") != 0 && strcmp(p->phantom, "blocked") != 0 &&
	    strcmp(p->phantom, "bowl") != 0 && sim_solid_kind(p->phantom) == SIM_SOLID_NONE)
		return vr_err(err, errlen, -EINVAL,
		              "synth: unknown phantom '%s' (allowed: retina, mirror, tilted, "
		              "blocked, curved, anterior, skin, bowl, flow)",
		              p->phantom);
	if (!(p->mirror_mm >= 0 && p->mirror_mm < SIM_DEPTH_MM))
		return vr_err(err, errlen, -EINVAL,
		              "synth: mirror depth %g mm out of range (0 for the default %g, or "
		              "within (0, %g))",
		              p->mirror_mm, SIM_MIRROR_MM, SIM_DEPTH_MM);
	if (p->samples_per_ascan < 16 || p->samples_per_ascan > SIM_MAX_K)
		return vr_err(err, errlen, -EINVAL,
		              "synth: samples_per_ascan %u out of range (16..%u)",
		              p->samples_per_ascan, SIM_MAX_K);
	if (!p->ascans_per_bscan || !p->bscans_per_volume || p->ascans_per_bscan > 65536 ||
	    p->bscans_per_volume > 65536)
		return vr_err(
		        err, errlen, -EINVAL,
		        "synth: ascans_per_bscan %u / bscans_per_volume %u out of range (1..65536)",
		        p->ascans_per_bscan, p->bscans_per_volume);
	if (!p->stride_x || !p->stride_y || p->stride_x > 64 || p->stride_y > 64)
		return vr_err(err, errlen, -EINVAL, "synth: stride [%u, %u] out of range (1..64)",
		              p->stride_x, p->stride_y);
	if (p->sample_type > VOLREC_SAMPLE_U12GV)
		return vr_err(err, errlen, -EINVAL, "synth: unknown sample type %u",
		              p->sample_type);
	if (p->sample_type >= VOLREC_SAMPLE_U12P && p->samples_per_ascan % 2)
		return vr_err(err, errlen, -EINVAL,
		              "synth: samples_per_ascan %u is odd with a packed 12-bit sample type",
		              p->samples_per_ascan);
	if (p->bit_shift > (p->sample_type >= VOLREC_SAMPLE_U12P ? 11u : 15u))
		return vr_err(err, errlen, -EINVAL, "synth: bit_shift %u out of range (0..%u)",
		              p->bit_shift, p->sample_type >= VOLREC_SAMPLE_U12P ? 11u : 15u);
	if (!(p->beam_um >= 0 && p->beam_um <= SIM_BEAM_MAX_UM))
		return vr_err(err, errlen, -EINVAL,
		              "synth: beam_um %g out of range (0 for a pencil beam, up to %g)",
		              p->beam_um, SIM_BEAM_MAX_UM);
	if (!isfinite(p->deg_per_s) || !isfinite(p->snr_db) || !isfinite(p->rate) || p->rate < 0)
		return vr_err(
		        err, errlen, -EINVAL,
		        "synth: rate %g, deg_per_s %g and snr_db %g must be finite (rate >= 0)",
		        p->rate, p->deg_per_s, p->snr_db);
	for (int i = 0; i < 3; i++)
		if (!isfinite(p->shift_mm_per_s[i]) || !isfinite(p->jump_mm[i]) ||
		    !isfinite(p->jump_deg))
			return vr_err(
			        err, errlen, -EINVAL,
			        "synth: motion shift_mm_per_s, jump shift_mm and jump deg must be "
			        "finite");
	bytes = (uint64_t)p->ascans_per_bscan *
	        volrec_sample_bytes(p->sample_type, p->samples_per_ascan);
	if (bytes > (1ull << 31))
		return vr_err(err, errlen, -EINVAL,
		              "synth: one B-scan would be %llu bytes (max 2 GiB)",
		              (unsigned long long)bytes);
	return sim_scene_check(p, err, errlen);
}

/* Inverse of the standard normal CDF (Acklam's rational approximation, |error| < 1.2e-9
 * relative, refined by one Halley step on erfc). */
static double normal_quantile(double p)
{
	static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,
	                           -2.759285104469687e+02, 1.383577518672690e+02,
	                           -3.066479806614716e+01, 2.506628277459239e+00};
	static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02,
	                           -1.556989798598866e+02, 6.680131188771972e+01,
	                           -1.328068155288572e+01};
	static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01,
	                           -2.400758277161838e+00, -2.549732539343734e+00,
	                           4.374664141464968e+00,  2.938163982698783e+00};
	static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01,
	                           2.445134137142996e+00, 3.754408661907416e+00};
	double q, r, x;

	if (p < 0.02425) {
		q = sqrt(-2 * log(p));
		x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
		    ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
	} else if (p > 1 - 0.02425) {
		q = sqrt(-2 * log(1 - p));
		x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
		    ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
	} else {
		q = p - 0.5;
		r = q * q;
		x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
		    (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
	}
	double e = 0.5 * erfc(-x / M_SQRT2) - p, u = e * sqrt(2 * M_PI) * exp(x * x / 2);
	return x - u / (1 + x * u / 2);
}

static void lagrange(double t, float w[NTAP])
{
	for (int k = 0; k < NTAP; k++) {
		double num = 1, den = 1;
		for (int m = 0; m < NTAP; m++) {
			if (m == k)
				continue;
			num *= t - (m - TAP_LO);
			den *= (double)(k - m);
		}
		w[k] = (float)(num / den);
	}
}

/* The per-sample tables of s (K entries each, the solid's per-depth ones when it has a
 * solid) and the inverse FFT's plan. */
static int sim_alloc_tables(struct sim *s, char *err, size_t errlen)
{
	const uint32_t K = s->K;

	s->u = calloc(K, sizeof(*s->u));
	s->env = calloc(K, sizeof(*s->env));
	s->base = calloc(K, sizeof(*s->base));
	s->nsd = calloc(K, sizeof(*s->nsd));
	s->tap0 = calloc(K, sizeof(*s->tap0));
	s->tapw = calloc((size_t)K * NTAP, sizeof(*s->tapw));
	s->rot = calloc((size_t)K * 2, sizeof(*s->rot));
	s->ext_re = calloc((size_t)K + NTAP, sizeof(*s->ext_re));
	s->ext_im = calloc((size_t)K + NTAP, sizeof(*s->ext_im));
	s->spec = calloc(K, sizeof(*s->spec));
	s->grid = fftwf_alloc_complex(K);
	if (s->scene.kind != SIM_SOLID_NONE)
		s->sol = calloc(2 * ((size_t)s->zhi - s->zlo + 1), sizeof(*s->sol));
	if ((s->scene.kind != SIM_SOLID_NONE && !s->sol) || !s->u || !s->env || !s->base ||
	    !s->nsd || !s->tap0 || !s->tapw || !s->rot || !s->ext_re || !s->ext_im || !s->spec ||
	    !s->grid) {
		return vr_err(err, errlen, -ENOMEM, "synth: out of memory for K = %u tables", K);
	}
	s->plan = fftwf_plan_dft_1d((int)K, s->grid, s->grid, FFTW_BACKWARD, FFTW_ESTIMATE);
	if (!s->plan)
		return vr_err(err, errlen, -ENOMEM, "synth: FFTW could not plan a %u-point FFT", K);
	return 0;
}

/* Each spectral pixel's tables: its linear-k position u, the envelope, the background with
 * its fixed pattern, the noise's deviation, the reference rotation and the interpolation taps
 * of u. */
static void sim_pixel_tables(struct sim *s)
{
	const uint32_t K = s->K;

	uint64_t fpkey = sim_mix64(s->p.seed ^ 0x66706e5f6b657921ull);
	double zfp = K / 64.0 > 2 ? K / 64.0 : 2; /* depth of the fixed coherent artifact */
	for (uint32_t i = 0; i < K; i++) {
		/* pixel i sits at linear-k u: solve (K-1) h(u / (K-1)) = i by Newton */
		double target = (double)i / (K - 1), v = target;
		for (int it = 0; it < 30; it++) {
			double dv = (nl_h(v) - target) / nl_dh(v);
			v -= dv;
			if (fabs(dv) < 1e-15)
				break;
		}
		double u = v * (K - 1);
		s->u[i] = u;
		double env = sim_envelope_k(s, u);
		s->env[i] = (float)env;
		double fpn = s->dc * 0.004 * gauss64(sim_mix64(fpkey + i)) +
		             0.6 * s->amp * env * cos(2 * M_PI * u * zfp / K);
		s->base[i] = (float)(s->dc * env + fpn);
		s->nsd[i] = (float)(s->sigma * sqrt(env));
		double vv = u / (K - 1) - 0.5;
		double ph = DISP_A2 * vv * vv + DISP_A3 * vv * vv * vv + 2 * M_PI * u * s->zc / K;
		s->rot[2 * i] = (float)(s->amp * env * cos(ph));
		s->rot[2 * i + 1] = (float)(s->amp * env * sin(ph));
		double fl = floor(u);
		s->tap0[i] = (int32_t)fl; /* ext index of node floor(u) - TAP_LO */
		lagrange(u - fl, &s->tapw[(size_t)i * NTAP]);
	}
}

int sim_create(const struct sim_params *p, struct sim **out, char *err, size_t errlen)
{
	struct sim *s;
	uint32_t K;
	int rc;

	rc = check_params(p, err, errlen);
	if (rc)
		return rc;
	pthread_once(&fftw_once, fftw_init);

	s = calloc(1, sizeof(*s));
	if (!s)
		return vr_err(err, errlen, -ENOMEM, "synth: out of memory");
	s->p = *p;
	K = s->K = p->samples_per_ascan;
	s->X = p->ascans_per_bscan * p->stride_x;
	s->Y = p->bscans_per_volume * p->stride_y;
	s->abytes = volrec_sample_bytes(p->sample_type, K);
	s->dz = SIM_DEPTH_MM / (K / 2.0);
	s->zlo = (uint32_t)ceil(TISSUE_TOP_MM / s->dz);
	s->zhi = (uint32_t)floor(TISSUE_BOT_MM / s->dz);
	s->zc = (int32_t)((s->zlo + s->zhi) / 2);
	s->mirror = strcmp(p->phantom, "mirror") == 0;
	s->zm = (uint32_t)lround((p->mirror_mm > 0 ? p->mirror_mm : SIM_MIRROR_MM) / s->dz);
	s->tilted = strcmp(p->phantom, "tilted") == 0;
	s->bowl = strcmp(p->phantom, "bowl") == 0;
	s->blocked = strcmp(p->phantom, "blocked") == 0;
	sim_scene_init(&s->scene, &s->p, s->dz, s->zlo, s->zhi, (const float(*)[2])s->phasor);

	s->fs = p->sample_type == VOLREC_SAMPLE_F32    ? 65535.0
	        : p->sample_type >= VOLREC_SAMPLE_U12P ? (double)(4095u >> p->bit_shift)
	                                               : (double)(65535u >> p->bit_shift);
	s->dc = 0.45 * s->fs;
	s->amp = 0.25 * s->dc / sqrt(K / 8.0);
	s->sigma = p->noiseless ? 0 : s->amp * sqrt((double)K) / 2 * pow(10, -p->snr_db / 20);

	rc = sim_alloc_tables(s, err, errlen);
	if (rc)
		goto out_free;

	for (int i = 0; i < NPHASOR; i++) {
		s->phasor[i][0] = (float)cos(2 * M_PI * i / NPHASOR);
		s->phasor[i][1] = (float)sin(2 * M_PI * i / NPHASOR);
	}

	for (int j = 0; j < 65536; j++)
		s->gauss[j] = (float)normal_quantile((j + 0.5) / 65536);

	sim_pixel_tables(s);
	*out = s;
	return 0;

out_free:
	sim_destroy(s);
	return rc;
}

void sim_destroy(struct sim *s)
{
	if (!s)
		return;
	if (s->plan)
		fftwf_destroy_plan(s->plan);
	fftwf_free(s->grid);
	free(s->u);
	free(s->env);
	free(s->base);
	free(s->nsd);
	free(s->tap0);
	free(s->tapw);
	free(s->rot);
	free(s->ext_re);
	free(s->ext_im);
	free(s->spec);
	free(s->sol);
	free(s);
}

size_t sim_bscan_bytes(const struct sim *s)
{
	return s->abytes * s->p.ascans_per_bscan;
}

void sim_resample_poly(const struct sim *s, double poly[4])
{
	double k1 = s->K - 1;

	poly[0] = 0;
	poly[1] = k1 * (1 + NL_A - NL_B);
	poly[2] = k1 * (-NL_A + 3 * NL_B);
	poly[3] = k1 * (-2 * NL_B);
}

void sim_resample_table(const struct sim *s, double *table)
{
	for (uint32_t j = 0; j < s->K; j++)
		table[j] = (s->K - 1) * nl_h((double)j / (s->K - 1));
}

void sim_dispersion_coeffs(const struct sim *s, double coeffs[2])
{
	coeffs[0] = DISP_A2;
	coeffs[1] = DISP_A3;
}

void sim_reference_spectrum(const struct sim *s, double *out)
{
	for (uint32_t i = 0; i < s->K; i++)
		out[i] = s->base[i];
}

double sim_pixel_k(const struct sim *s, uint32_t i)
{
	return i < s->K ? s->u[i] : NAN;
}

double sim_envelope(const struct sim *s, uint32_t i)
{
	return i < s->K ? s->env[i] : NAN;
}

double sim_envelope_k(const struct sim *s, double u)
{
	double e = (u - (s->K - 1) / 2.0) / (0.3 * s->K);

	return exp(-0.5 * e * e);
}

double sim_unit_amplitude(const struct sim *s)
{
	return s->amp;
}

double sim_noise_sigma(const struct sim *s)
{
	return s->sigma;
}

/* ---- the phantom ------------------------------------------------------------------------- */

/* Lateral position (mm, lab frame) of full-resolution A-scan (Yf, Xf). */
static void lab_xy(const struct sim *s, uint32_t Yf, uint32_t Xf, double *x, double *y)
{
	*x = ((Xf + 0.5) / s->X - 0.5) * SIM_FOV_MM;
	*y = ((Yf + 0.5) / s->Y - 0.5) * SIM_FOV_MM;
}

/* Axial displacement (mm) after travelling dist mm at constant speed back and forth within
 * [-SIM_AXIAL_MM, SIM_AXIAL_MM], starting at 0 (a triangle wave). */
static double axial_bounce(double dist)
{
	double period = 4 * SIM_AXIAL_MM, u = fmod(fabs(dist), period);
	double v = u < SIM_AXIAL_MM ? u : u < 3 * SIM_AXIAL_MM ? 2 * SIM_AXIAL_MM - u : u - period;

	return dist < 0 ? -v : v;
}

static void column_at(const struct sim *s, uint64_t epoch, double x, double y, struct column *c)
{
	const struct sim_params *p = &s->p;
	/* seconds of the motion clock */
	double t = (double)epoch / (p->rate > 0 ? p->rate : SIM_DEFAULT_RATE);
	bool jumped = p->jump_epoch > 0 && epoch >= p->jump_epoch;
	double th = (p->deg_per_s * t + (jumped ? p->jump_deg : 0)) * (M_PI / 180);

	/* the tilted reflector stays in the lab frame: neither turned nor moved */
	c->tilt_bin = -1;
	if (s->tilted) {
		double f = x / SIM_FOV_MM + 0.5; /* 0 at the left edge, 1 at the right */
		f = f < 0 ? 0 : f > 1 ? 1 : f;
		c->tilt_bin = (int32_t)lround(
		        (SIM_TILT_TOP_MM + f * (SIM_TILT_BOT_MM - SIM_TILT_TOP_MM)) / s->dz);
	}
	double ct = cos(th), st = sin(th);
	/* the phantom moved by (mx, my) and turned by th about its own centre: the lab point
	 * (x, y) is the phantom point R(-th) (x - mx, y - my) */
	double mx = p->shift_mm_per_s[0] * t + (jumped ? p->jump_mm[0] : 0);
	double my = p->shift_mm_per_s[1] * t + (jumped ? p->jump_mm[1] : 0);
	double xp = ct * (x - mx) + st * (y - my), yp = -st * (x - mx) + ct * (y - my);

	c->dz = axial_bounce(p->shift_mm_per_s[2] * t) + (jumped ? p->jump_mm[2] : 0);
	double fx = xp - 0.2, fy = yp + 0.1, rho2 = fx * fx + fy * fy;
	double pit = exp(-rho2 / (2 * 0.22 * 0.22));
	double elm = 0.93 + 0.035 * rho2 + 0.015 * xp;
	if (s->bowl) /* a bowl about the phantom's centre, turning with it */
		elm += SIM_CURVE_MM_PER_MM2 * (xp * xp + yp * yp) - SIM_CURVE_LIFT_MM;
	static const double inner[6] = {0.030, 0.045, 0.035, 0.035, 0.030, 0.085};
	static const double thin[6] = {0.95, 0.95, 0.90, 0.90, 0.85, -0.30};
	static const double outer[4] = {0.008, 0.030, 0.025, 0.180};

	/* stack the inner layers (NFL..ONL) upwards from the ELM, thinned in the foveal pit */
	double d = elm;
	for (int l = 5; l >= 0; l--) {
		d -= inner[l] * (1 - thin[l] * pit);
		c->top[l] = d;
	}
	d = elm;
	for (int l = 6; l < NLAYER; l++) {
		c->top[l] = d;
		d += outer[l - 6];
	}
	c->top[NLAYER] = d;

	c->nv = 0;
	if (rho2 > 0.35 * 0.35) { /* foveal avascular zone */
		for (int v = 0; v < NVESSEL; v++) {
			double a = vessels[v].vertical ? yp : xp, b = vessels[v].vertical ? xp : yp;
			double f = vessels[v].c0 + vessels[v].c1 * a + vessels[v].c2 * a * a;
			double df = vessels[v].c1 + 2 * vessels[v].c2 * a;
			double dist = fabs(b - f) / sqrt(1 + df * df), r = vessels[v].radius;
			if (dist >= r)
				continue;
			double h = sqrt(r * r - dist * dist), mid = c->top[1] + r;
			c->vtop[c->nv] = mid - h;
			c->vbot[c->nv] = mid + h;
			c->nv++;
		}
	}
	uint64_t fkey = sim_mix64(epoch + 0x27d4eb2f165667c5ull);
	c->ncell = 0;
	if (!(p->beam_um > 0)) {
		int64_t ix = (int64_t)floor(xp / CELL_XY_MM), iy = (int64_t)floor(yp / CELL_XY_MM);
		c->hcol = sim_cell_hash(p->seed, ix, iy);
		c->hflow = sim_mix64(c->hcol ^ fkey);
		return;
	}
	/* A Gaussian beam of intensity FWHM beam_um: amplitude weight exp(-2 ln2 r^2 / FWHM^2)
	 * of each scatterer cell (a lattice of pitch FWHM / 3, fixed in the phantom) within
	 * 1.2 FWHM of the beam's axis, at the cell's centre. */
	double fw = p->beam_um * 1e-3, cell = fw / 3, rmax = 1.2 * fw, sum2 = 0;
	int64_t x0 = (int64_t)floor((xp - rmax) / cell), x1 = (int64_t)floor((xp + rmax) / cell);
	int64_t y0 = (int64_t)floor((yp - rmax) / cell), y1 = (int64_t)floor((yp + rmax) / cell);
	for (int64_t iy = y0; iy <= y1; iy++) {
		for (int64_t ix = x0; ix <= x1; ix++) {
			double ddx = (ix + 0.5) * cell - xp, ddy = (iy + 0.5) * cell - yp;
			double r2 = ddx * ddx + ddy * ddy;
			if (r2 > rmax * rmax || c->ncell == BEAM_CELLS)
				continue;
			double w = exp(-2 * M_LN2 * r2 / (fw * fw));
			c->chash[c->ncell] = sim_cell_hash(p->seed, ix, iy);
			c->cflow[c->ncell] = sim_mix64(c->chash[c->ncell] ^ fkey);
			c->cw[c->ncell] = (float)w;
			sum2 += w * w;
			c->ncell++;
		}
	}
	for (int i = 0; i < c->ncell; i++)
		c->cw[i] = (float)(c->cw[i] / sqrt(sum2));
}

/* The complex reflectivity at depth d (mm) of a column into *re, *im; false where there is
 * none. The structure (layer, vessels, shadows) is that on the beam's axis; the speckle is
 * one scatterer cell's (pencil beam) or the weighted sum of the cells under the beam. */
static inline bool column_field(const struct sim *s, const struct column *c, double d, float *re,
                                float *im)
{
	double r, att, shadow = 1;
	bool blood = false;
	uint32_t ph;
	int l;

	if (d < TISSUE_TOP_MM || d > TISSUE_BOT_MM)
		return false;
	d -= c->dz; /* depth in the phantom's own frame */
	if (d < c->top[0] || d >= c->top[NLAYER])
		return false;
	for (l = 0; l < NLAYER - 1 && d >= c->top[l + 1]; l++)
		;
	r = layer_refl[l];
	if (l == NLAYER - 1)
		r *= expf((float)(-(d - c->top[l]) * (1 / 0.08)));
	att = expf((float)(-(d - c->top[0]) * (1 / 1.2)));
	for (int v = 0; v < c->nv; v++) {
		if (d >= c->vbot[v]) {
			shadow *= 0.2;
		} else if (d >= c->vtop[v]) {
			if (d < c->vtop[v] + 0.006) {
				r = 0.85; /* vessel wall */
			} else {
				r = 0.20; /* flowing blood: speckle decorrelates every epoch */
				blood = true;
			}
		}
	}
	int64_t iz = (int64_t)(d * (1 / CELL_Z_MM)); /* d > 0: truncation is floor */
	if (c->ncell == 0) {
		double m = sim_cell_speckle(blood ? c->hflow : c->hcol, iz, &ph);
		float a = (float)(sqrt(r) * att * shadow * m);
		*re = a * s->phasor[ph][0];
		*im = a * s->phasor[ph][1];
		return a != 0;
	}
	double sr = 0, si = 0, a = sqrt(r) * att * shadow;
	for (int i = 0; i < c->ncell; i++) {
		double m = c->cw[i] * sim_cell_speckle(blood ? c->cflow[i] : c->chash[i], iz, &ph);
		sr += m * s->phasor[ph][0];
		si += m * s->phasor[ph][1];
	}
	*re = (float)(a * sr);
	*im = (float)(a * si);
	return a != 0;
}

/* One A-scan's spectrum (before quantization) into s->spec: of the column c, or of a solid
 * phantom's column sol (sim_scene_column) when c is NULL. */
static void ascan(struct sim *s, const struct column *c, const float *sol, uint64_t nkey)
{
	const uint32_t K = s->K;
	fftwf_complex *g = s->grid;
	float *ere = s->ext_re, *eim = s->ext_im;

	memset(g, 0, sizeof(*g) * K);
	if (s->mirror) {
		g[((int64_t)s->zm - s->zc + K) % K][0] = 1;
		c = NULL; /* the mirror is the same at every position */
	}
	if (s->blocked)
		c = NULL; /* nothing interferes: the reference arm's spectrum and noise */
	for (uint32_t z = s->zlo; c && z <= s->zhi; z++) {
		float re, im;
		if (!column_field(s, c, z * s->dz, &re, &im))
			continue;
		uint32_t n = (uint32_t)(((int64_t)z - s->zc + K) % K);
		g[n][0] = re;
		g[n][1] = im;
	}
	for (uint32_t z = s->zlo; sol && z <= s->zhi; z++) {
		uint32_t n = (uint32_t)(((int64_t)z - s->zc + K) % K);
		g[n][0] = sol[2 * (z - s->zlo)];
		g[n][1] = sol[2 * (z - s->zlo) + 1];
	}
	if (c && c->tilt_bin >= 0)
		g[((int64_t)c->tilt_bin - s->zc + K) % K][0] += (float)SIM_TILT_AMP;
	fftwf_execute(s->plan);
	/* ext[j + TAP_LO] = grid[j mod K] for j = -TAP_LO .. K + NTAP - TAP_LO - 1 */
	for (int64_t j = -TAP_LO; j < (int64_t)K + NTAP - TAP_LO; j++) {
		const int64_t m = j < 0 ? j + K : j >= K ? j - K : j;
		ere[j + TAP_LO] = g[m][0];
		eim[j + TAP_LO] = g[m][1];
	}
	uint64_t st = nkey, rnd = 0;
	for (uint32_t i = 0; i < K; i++) {
		/* 8-tap dot products in a fixed order (two 4-lane halves, then across lanes) */
		v4f w0, w1, r0, r1, i0, i1, pr, pi;
		memcpy(&w0, &s->tapw[(size_t)i * NTAP], sizeof(w0));
		memcpy(&w1, &s->tapw[(size_t)i * NTAP + 4], sizeof(w1));
		memcpy(&r0, &ere[s->tap0[i]], sizeof(r0));
		memcpy(&r1, &ere[s->tap0[i] + 4], sizeof(r1));
		memcpy(&i0, &eim[s->tap0[i]], sizeof(i0));
		memcpy(&i1, &eim[s->tap0[i] + 4], sizeof(i1));
		pr = w0 * r0 + w1 * r1;
		pi = w0 * i0 + w1 * i1;
		float re = (pr[0] + pr[1]) + (pr[2] + pr[3]);
		float im = (pi[0] + pi[1]) + (pi[2] + pi[3]);
		float v = s->base[i] + s->rot[2 * i] * re - s->rot[2 * i + 1] * im;
		if (s->sigma > 0) {
			/* wyrand (one 64x64->128 multiply per four samples), keyed per A-scan;
			 * each 16-bit piece picks a normal quantile */
			if ((i & 3) == 0) {
				st += 0xa0761d6478bd642full;
				__uint128_t m = (__uint128_t)st * (st ^ 0xe7037ed1a0b428dbull);
				rnd = (uint64_t)(m >> 64) ^ (uint64_t)m;
			}
			v += s->nsd[i] * s->gauss[rnd & 0xffff];
			rnd >>= 16;
		}
		s->spec[i] = v;
	}
}

static void quantize(const struct sim *s, void *dst)
{
	const uint32_t K = s->K;

	if (s->p.sample_type == VOLREC_SAMPLE_F32) {
		memcpy(dst, s->spec, K * sizeof(float));
	} else if (s->p.sample_type == VOLREC_SAMPLE_U16) {
		uint16_t *o = dst;
		float fs = (float)s->fs;
		for (uint32_t i = 0; i < K; i++) {
			float v = s->spec[i] + 0.5f;
			v = v < 0 ? 0 : v > fs ? fs : v;
			/* truncation is floor for v >= 0 */
			o[i] = (uint16_t)((uint32_t)v << s->p.bit_shift);
		}
	} else if (s->p.sample_type >= VOLREC_SAMPLE_U12P) {
		/* a 12-bit digitizer, packed two samples in three bytes (docs/algorithms.md §0) */
		uint8_t *o = dst;
		float fs = (float)s->fs;
		bool gv = s->p.sample_type == VOLREC_SAMPLE_U12GV;
		for (uint32_t i = 0; i < K; i += 2, o += 3) {
			uint32_t q[2];
			for (uint32_t j = 0; j < 2; j++) {
				float v = s->spec[i + j] + 0.5f;
				v = v < 0 ? 0 : v > fs ? fs : v;
				q[j] = (uint32_t)v << s->p.bit_shift;
			}
			if (gv) {
				o[0] = (uint8_t)(q[0] >> 4);
				o[1] = (uint8_t)((q[0] & 0xf) | (q[1] & 0xf) << 4);
				o[2] = (uint8_t)(q[1] >> 4);
			} else {
				o[0] = (uint8_t)q[0];
				o[1] = (uint8_t)((q[0] >> 8) | (q[1] & 0xf) << 4);
				o[2] = (uint8_t)(q[1] >> 4);
			}
		}
	} else {
		int16_t *o = dst;
		float half = (float)((s->fs + 1) / 2);
		for (uint32_t i = 0; i < K; i++) {
			float v = s->spec[i] - half + 0.5f;
			v = v < -half ? -half : v > half ? half : v;
			/* floor via truncation of a positive number */
			int32_t q = (int32_t)(v + 65536.0f) - 65536;
			if (q > (int32_t)half - 1)
				q = (int32_t)half - 1;
			o[i] = (int16_t)(q * (1 << s->p.bit_shift));
		}
	}
}

int sim_bscan(struct sim *s, uint64_t epoch, uint32_t ox, uint32_t oy, uint32_t b, void *buf,
              size_t size)
{
	return sim_bscan_repeat(s, epoch, ox, oy, b, 0, buf, size);
}

int sim_bscan_repeat(struct sim *s, uint64_t epoch, uint32_t ox, uint32_t oy, uint32_t b,
                     uint32_t m, void *buf, size_t size)
{
	const struct sim_params *p = &s->p;
	uint8_t *out = buf;

	if (ox >= p->stride_x || oy >= p->stride_y || b >= p->bscans_per_volume ||
	    size < sim_bscan_bytes(s))
		return -EINVAL;
	uint32_t Yf = b * p->stride_y + oy;
	uint64_t bkey = sim_mix64(p->seed ^ 0x6e6f697365000000ull ^ sim_mix64(epoch) ^
	                          sim_mix64(0x5bd1e9955bd1e995ull + b) ^
	                          (m ? sim_mix64(0x7265706561740000ull + m) : 0));
	struct sim_pose pose;
	if (s->sol)
		sim_pose_at(p, epoch, &pose);
	for (uint32_t a = 0; a < p->ascans_per_bscan; a++) {
		uint32_t xl = p->bidirectional && (b & 1) ? p->ascans_per_bscan - 1 - a : a;
		struct column c;
		double x, y;
		lab_xy(s, Yf, xl * p->stride_x + ox, &x, &y);
		if (s->sol) {
			if (s->scene.kind == SIM_SOLID_FLOW) /* the time of this A-scan */
				pose.ts =
				        (m * (p->bscan_period_us > 0
				                      ? p->bscan_period_us
				                      : p->ascan_period_us * p->ascans_per_bscan) +
				         a * p->ascan_period_us) *
				        1e-6;
			sim_scene_column(&s->scene, &pose, x, y, s->sol);
			ascan(s, NULL, s->sol, sim_mix64(bkey + a));
		} else {
			column_at(s, epoch, x, y, &c);
			ascan(s, &c, NULL, sim_mix64(bkey + a));
		}
		quantize(s, out + (size_t)a * s->abytes);
	}
	return 0;
}

int sim_flow_truth(const struct sim *s, uint64_t epoch, uint32_t zero_pad, uint32_t z0, uint32_t z1,
                   uint8_t *label, float *vz)
{
	const size_t nz = z1 - z0;
	struct sim_pose pose;

	if (s->scene.kind != SIM_SOLID_FLOW || zero_pad < 1 || zero_pad > 16 || z0 >= z1 ||
	    z1 > s->K * zero_pad / 2)
		return -EINVAL;
	sim_pose_at(&s->p, epoch, &pose);
	for (uint32_t Yf = 0; Yf < s->Y; Yf++) {
		for (uint32_t Xf = 0; Xf < s->X; Xf++) {
			size_t o = ((size_t)Yf * s->X + Xf) * nz;
			double xm, ym;
			lab_xy(s, Yf, Xf, &xm, &ym);
			for (uint32_t z = z0; z < z1; z++)
				label[o + z - z0] = (uint8_t)sim_scene_flow_point(
				        &s->scene, &pose, xm, ym, z * s->dz / zero_pad,
				        &vz[o + z - z0]);
		}
	}
	return 0;
}

/* The phasors of one column at the scanner's depth bins 0..K-1 into g (what ascan() puts
 * on its demodulated grid, here at the bins themselves); a solid phantom's from sol. */
static void column_phasors(const struct sim *s, const struct column *c, const float *sol,
                           fftwf_complex *g)
{
	memset(g, 0, sizeof(*g) * s->K);
	if (sol) {
		for (uint32_t z = s->zlo; z <= s->zhi; z++) {
			g[z][0] = sol[2 * (z - s->zlo)];
			g[z][1] = sol[2 * (z - s->zlo) + 1];
		}
		return;
	}
	if (s->mirror) {
		g[s->zm][0] = 1;
		return;
	}
	if (s->blocked)
		return;
	for (uint32_t z = s->zlo; z <= s->zhi; z++) {
		float re, im;
		if (!column_field(s, c, z * s->dz, &re, &im))
			continue;
		g[z][0] = re;
		g[z][1] = im;
	}
	if (c->tilt_bin >= 0)
		g[c->tilt_bin][0] += (float)SIM_TILT_AMP;
}

int sim_truth(const struct sim *s, uint64_t epoch, uint32_t zero_pad, const float *window,
              uint32_t z0, uint32_t z1, float *out)
{
	const uint32_t K = s->K, N = K * zero_pad;
	fftwf_complex *g, *x;
	fftwf_plan back = NULL, fwd = NULL;
	float *ew, *sol = NULL;
	struct sim_pose pose;
	double norm = 0;
	int rc = 0;

	if (!window || zero_pad < 1 || zero_pad > 16 || z0 >= z1 || z1 > N / 2)
		return -EINVAL;
	g = fftwf_alloc_complex(K);
	x = fftwf_alloc_complex(N);
	ew = malloc(K * sizeof(*ew));
	if (s->sol) {
		sol = calloc(2 * ((size_t)s->zhi - s->zlo + 1), sizeof(*sol));
		sim_pose_at(&s->p, epoch, &pose);
	}
	if (g && x && ew && (sol || !s->sol)) {
		back = fftwf_plan_dft_1d((int)K, g, g, FFTW_BACKWARD, FFTW_ESTIMATE);
		fwd = fftwf_plan_dft_1d((int)N, x, x, FFTW_FORWARD, FFTW_ESTIMATE);
	}
	if (!back || !fwd) {
		rc = -ENOMEM;
		goto out;
	}
	for (uint32_t j = 0; j < K; j++) {
		double w = window[j] * sim_envelope_k(s, j);
		ew[j] = (float)w;
		norm += w;
	}
	if (!(norm > 0)) {
		rc = -EINVAL; /* an all-zero window images nothing */
		goto out;
	}
	const size_t nz = z1 - z0;
	const float inv = (float)(1 / norm);
	for (uint32_t Yf = 0; Yf < s->Y; Yf++) {
		for (uint32_t Xf = 0; Xf < s->X; Xf++) {
			struct column c;
			double xm, ym;
			float *o = out + ((size_t)Yf * s->X + Xf) * nz;
			lab_xy(s, Yf, Xf, &xm, &ym);
			if (sol) {
				sim_scene_column(&s->scene, &pose, xm, ym, sol);
			} else {
				column_at(s, epoch, xm, ym, &c);
			}
			column_phasors(s, sol ? NULL : &c, sol, g);
			fftwf_execute(back); /* g[j] = sum_m c[m] exp(+2 pi i j m / K) */
			memset(x, 0, sizeof(*x) * N);
			for (uint32_t j = 0; j < K; j++) {
				x[j][0] = ew[j] * g[j][0];
				x[j][1] = ew[j] * g[j][1];
			}
			fftwf_execute(fwd);
			for (uint32_t z = z0; z < z1; z++) {
				float a = hypotf(x[z][0], x[z][1]) * inv;
				o[z - z0] = a < 1 ? a : 1;
			}
		}
	}
out:
	if (back)
		fftwf_destroy_plan(back);
	if (fwd)
		fftwf_destroy_plan(fwd);
	fftwf_free(g);
	fftwf_free(x);
	free(ew);
	free(sol);
	return rc;
}
