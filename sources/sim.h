/* SPDX-License-Identifier: MIT */
/*
 * The synthetic OCT scanner (sim_): a retina-like phantom in millimetres that rotates about the
 * depth axis, scanned at each epoch's offset into raw spectra (envelope, DC, interference,
 * non-linear k sampling, dispersion, fixed-pattern and shot noise), plus its ground truth.
 */
#ifndef VOLREC_SIM_H
#define VOLREC_SIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <volrec/shim.h>

#include "base/base.h"
#include "config/config.h"

#define SIM_DEFAULT_RATE 25.0 /* epochs per second for the motion clock when rate is 0 */
#define SIM_FOV_MM       3.0  /* lateral field of view (square), mm */
#define SIM_DEPTH_MM     2.0  /* optical depth covered by the K/2 depth bins, mm */
#define SIM_MAX_K        65536u
#define SIM_MIRROR_MM    1.0   /* depth of the "mirror" phantom (bin K/4 of the K/2 bins) */
#define SIM_AXIAL_MM     0.1   /* amplitude of the axial (depth) motion */
#define SIM_BEAM_MAX_UM  500.0 /* widest beam_um (lateral resolution, FWHM) */
/* The "tilted" phantom: the retina plus a strong flat reflector of amplitude SIM_TILT_AMP, in
 * the lab frame (it does not turn with the retina), whose depth rises linearly from
 * SIM_TILT_TOP_MM at the left edge of the field of view to SIM_TILT_BOT_MM at the right (nearest
 * bin, phase 0): the fixed-pattern artifact of mean background subtraction (docs/algorithms.md §1b) */
#define SIM_TILT_AMP    8.0
#define SIM_TILT_TOP_MM 0.60
#define SIM_TILT_BOT_MM 1.40
/* The "bowl" phantom: the retina's layers bent into a bowl about the phantom's centre, depth
 * SIM_CURVE_MM_PER_MM2 * r^2 - SIM_CURVE_LIFT_MM added (r in mm; 0.23 mm deeper at the field's
 * corners than at its centre, on top of the retina's own curvature): a surface whose depth
 * changes with the scan offset everywhere (docs/algorithms.md §2c) */
#define SIM_CURVE_MM_PER_MM2 0.05
#define SIM_CURVE_LIFT_MM    0.12

/* What the scanner produces. */
struct sim_params {
	uint32_t samples_per_ascan; /* K, 16..SIM_MAX_K */
	uint32_t ascans_per_bscan;  /* nx */
	uint32_t bscans_per_volume; /* ny */
	uint32_t stride_x, stride_y;
	uint32_t sample_type; /* enum volrec_sample_type */
	uint32_t bit_shift;   /* integer samples are left-aligned by this many bits */
	bool bidirectional;   /* odd B-scans are scanned right to left */
	double rate;          /* epochs per second of the motion clock (<= 0: SIM_DEFAULT_RATE) */
	uint64_t seed;
	char phantom
	        [CFG_NAME_MAX]; /* "retina"; "blocked": no sample light; "mirror": one ideal flat reflector of
	                             * amplitude 1 at mirror_mm, nearest bin (tests); "tilted":
	                             * the retina and a strong tilted reflector (SIM_TILT_*);
	                             * the solid phantoms (sim_scene.c) "curved": a retina on a
	                             * sphere, "anterior": cornea and iris, "skin": a rough
	                             * layered skin; "bowl": the retina bent into a bowl
	                             * (SIM_CURVE_*); "flow": static tissue with
	                             * three vessels of flowing blood (flow_* below) */
	double mirror_mm;         /* depth of the mirror, (0, SIM_DEPTH_MM); 0: SIM_MIRROR_MM */
	double deg_per_s;         /* rotation about the depth axis */
	double shift_mm_per_s[3]; /* translation speed: lateral x, y (steady drift) and depth
	                             * (back and forth within +-SIM_AXIAL_MM at this speed) */
	uint64_t jump_epoch;      /* from this epoch on (0: never) the phantom is moved by ... */
	double jump_mm[3];        /* ... this much (x, y, depth; mm) ... */
	double jump_deg;          /* ... and turned by this much: a patient who moved, then stays */
	double jump_tilt_deg[2];  /* ... and tilted this much about x and y (solid phantoms) */
	/* Motions of the solid phantoms only (docs/configuration.md, source.synth.motion): */
	double tilt_deg_per_s[2]; /* rotation about the lateral axes x and y (tilt), ... */
	double tilt_max_deg;      /* ... back and forth within +-this (> 0 where tilting) */
	double periodic_hz;       /* periodic motion: this frequency, ... */
	double periodic_mm[3];    /* ... these amplitudes of shift (x, y, depth; mm) ... */
	double periodic_deg[3];   /* ... and of rotation about x, y, depth (degrees) */
	double warp_mm;           /* non-rigid: a local bump of this peak displacement, ... */
	double warp_radius_mm;    /* ... this radius (Gaussian sigma, > 0 where warping), ... */
	double warp_hz;           /* ... breathing at this frequency (0: fixed) ... */
	double warp_centre_mm[2]; /* ... centred here in the phantom (x, y) */
	double snr_db;            /* see sim_noise_sigma() */
	double beam_um; /* lateral resolution, intensity FWHM in um; 0: a pencil beam (each
	                  * position sees only its own 6 um scatterer cell) */
	bool noiseless; /* no shot noise (tests) */
	/* The "flow" phantom (sim_scene.c, docs/algorithms.md "The flow phantom"): its blood, and
	 * the times and optics its Doppler phases are made with (geometry.*). */
	double flow_peak_mm_s;   /* speed on each vessel's axis, mm/s */
	int flow_direction;      /* 1: along the vessels' directions, -1: against */
	double flow_bulk_um;     /* axial bulk motion per repeat period, um (+: deeper) */
	double flow_decor_um;    /* blood's travel that renews its speckle, um (> 0) */
	double flow_tau_us;      /* renewal time of resting blood, us; 0: never */
	double ascan_period_us;  /* A-scan to A-scan */
	double bscan_period_us;  /* repeat to repeat; 0: ascans_per_bscan A-scan periods */
	double wavelength_nm;    /* centre wavelength lambda0 */
	double refractive_index; /* n; 0: 1.38 */
};

struct sim;

/* Fill p from the configuration's geometry and source.synth keys. */
void sim_params_from_config(struct sim_params *p, const struct vr_config *cfg);
/* Fill p from a source's geometry g (sample type and rate included); every other key 0. */
void sim_params_from_geometry(struct sim_params *p, const struct volrec_shim_geometry *g);

/* The scanner's settings a shim takes in its shim.args (docs/shim.md): the synth shim's, and
 * the GenICam Fake camera's with simulate: synth. */
struct sim_args {
	uint64_t seed;
	double deg_per_s, snr_db;
	char phantom[CFG_NAME_MAX];
	double motion_rate; /* epochs/s of the phantom's clock; 0: the geometry's rate */
};

/* The defaults of a shim's settings: seed 1, 0.25 deg/s, 40 dB, the retina phantom. */
void sim_args_defaults(struct sim_args *a);
/* Fill p from a source's geometry g (sim_params_from_geometry) and a shim's settings a. */
void sim_params_from_args(struct sim_params *p, const struct volrec_shim_geometry *g,
                          const struct sim_args *a);

/*
 * Build a scanner (tables, FFT plan, scratch). On failure returns -EINVAL/-ENOMEM with a
 * message naming the bad parameter in err; *out is written only on success. The scanner is
 * not thread-safe (scratch buffers); use one per thread. Free with sim_destroy().
 */
VR_MUST_CHECK int sim_create(const struct sim_params *p, struct sim **out, char *err,
                             size_t errlen);
void sim_destroy(struct sim *s); /* NULL is fine */

/* Bytes of one raw B-scan (nx * K * sample size). */
size_t sim_bscan_bytes(const struct sim *s);

/*
 * Write the raw spectra of B-scan b (0..ny-1) of `epoch` scanned at offset (ox, oy) into buf
 * (size >= sim_bscan_bytes), [a][k], little-endian. Depends only on the parameters and
 * (epoch, ox, oy, b): never on earlier calls. -EINVAL for an offset or b out of range or a
 * short buffer.
 */
VR_MUST_CHECK int sim_bscan(struct sim *s, uint64_t epoch, uint32_t ox, uint32_t oy, uint32_t b,
                            void *buf, size_t size);
/* Repeat m (0..M-1, docs/algorithms.md §5) of the same B-scan: the same tissue at the same
 * instant with noise of its own; repeat 0 is sim_bscan's, byte for byte. */
VR_MUST_CHECK int sim_bscan_repeat(struct sim *s, uint64_t epoch, uint32_t ox, uint32_t oy,
                                   uint32_t b, uint32_t m, void *buf, size_t size);

/*
 * Ground truth of `epoch`: what a noise-free full-resolution scan of the same instant shows
 * through the ideal processing chain, as an image amplitude at every full-resolution position
 * and output depth bin z0..z1-1 of an FFT of length N = K * zero_pad. Per position, the
 * phantom's phasors c[m] (amplitude and speckle phase of depth bin m of the scanner's K / 2
 * bins, exactly those sim_bscan scans) give the linear-k spectrum
 * S[j] = window[j] * E(j) * sum_m c[m] exp(2 pi i j m / K), j = 0..K-1, with E the source
 * envelope as a function of linear k (sim_envelope_k); then, zero-padded to N,
 * X[z] = sum_j S[j] exp(-2 pi i j z / N) and out = min(|X[z]| / sum_j window[j] E(j), 1):
 * a unit reflector at bin m reads 1 at z = m * zero_pad, its point-spread function elsewhere.
 * No noise, no background, no k non-linearity, no dispersion, no conjugate image, no log.
 * window[K] is the processing's spectral window (preprocess.window, be_window_fill).
 * out is [Y][X][z1 - z0] floats, Y = ny * sy, X = nx * sx, indexed by the output volume's
 * (y, x) (no flips). -EINVAL for a bad range or no window, -ENOMEM when the FFT cannot be
 * planned or its buffers allocated.
 */
VR_MUST_CHECK int sim_truth(const struct sim *s, uint64_t epoch, uint32_t zero_pad,
                            const float *window, uint32_t z0, uint32_t z1, float *out);

/*
 * The "flow" phantom's truth of `epoch` (docs/formats.md "Truth file"), at the same positions
 * and output depth bins as sim_truth: label[Y][X][z1 - z0] 0 where there is no sample, 1 static
 * tissue (vessel walls included), 2 flowing blood (a vessel's lumen); vz the same shape, the
 * blood's axial velocity relative to the tissue in mm/s, positive away from the probe (deeper),
 * 0 outside the lumens; the bulk motion is not in it. -EINVAL for another phantom or a bad
 * range.
 */
VR_MUST_CHECK int sim_flow_truth(const struct sim *s, uint64_t epoch, uint32_t zero_pad,
                                 uint32_t z0, uint32_t z1, uint8_t *label, float *vz);

/* The source envelope at linear-k index u (0..K-1): exp(-(u - (K - 1) / 2)^2 / (2 (0.3 K)^2)),
 * the factor E of sim_truth; sim_envelope(i) is the same at pixel i's u. */
double sim_envelope_k(const struct sim *s, double u);

/* Resampling positions that undo the k non-linearity, as preprocess.resample.poly
 * [c0, c1, c2, c3] (exact: the scanner's non-linearity is defined by this cubic). */
void sim_resample_poly(const struct sim *s, double poly[4]);
/* The same as a table of K fractional pixel positions (preprocess.resample.table). */
void sim_resample_table(const struct sim *s, double *table);
/* preprocess.dispersion.coeffs [a2, a3] that cancel the scanner's dispersion exactly. */
void sim_dispersion_coeffs(const struct sim *s, double coeffs[2]);

/* The spectrum without any sample (DC * envelope + fixed pattern), [K] sample units before
 * quantization: what preprocess.background.reference would hold for a perfect background. */
void sim_reference_spectrum(const struct sim *s, double *out);
/* Linear-k coordinate u(i) of pixel i (0..K-1 after resampling). */
double sim_pixel_k(const struct sim *s, uint32_t i);
/* Source envelope at pixel i (1 at the peak). */
double sim_envelope(const struct sim *s, uint32_t i);
/* Interference amplitude (sample units) of a unit-amplitude reflector at the envelope peak. */
double sim_unit_amplitude(const struct sim *s);
/*
 * Shot-noise standard deviation at the envelope peak, in sample units (before quantization);
 * at pixel i it is sigma * sqrt(envelope(i)). Chosen so that a unit-amplitude reflector's peak
 * in the depth domain (unwindowed DFT) stands snr_db above the noise's standard deviation:
 * sigma = A * sqrt(K) / 2 * 10^(-snr_db / 20). 0 when noiseless.
 */
double sim_noise_sigma(const struct sim *s);

#endif
