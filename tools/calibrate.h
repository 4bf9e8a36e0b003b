/* SPDX-License-Identifier: MIT */
/*
 * `volrec calibrate` (cmd_calibrate.c; the rest in process_calibrate.c): loading raw
 * recordings (replay files, headerless raw, HDF5 /raw), the image engine that runs the CPU backend on them for each candidate
 * correction, and the numerical helpers (sharpness metric, least squares, fringe phase). The
 * procedures are described in docs/calibration.md.
 */
#ifndef VOLREC_CLIENTS_CALIBRATE_H
#define VOLREC_CLIENTS_CALIBRATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "config/config.h"

/* A recording's raw spectra, converted to float (bit_shift applied), whole B-scans. */
struct cal_data {
	char path[4096];
	const char *format;   /* "replay", "raw", "hdf5" */
	uint32_t K, nx, nb;   /* samples, A-scans per B-scan, B-scans loaded */
	size_t n;             /* A-scans loaded = nx * nb */
	size_t available;     /* A-scans in the file */
	float *s;             /* [n][K] */
	double saturated;     /* fraction of samples at the digitizer's limit (integer input) */
	double limit;         /* that limit (0: float input, none known) */
	enum cfg_sample type; /* as stored */
};

/*
 * Load up to max_ascans A-scans (whole B-scans, at least one) of path: a replay file (its
 * header gives the geometry), an HDF5 file with a dataset /raw ([..][nx][K], u16, i16 or f32)
 * or a headerless raw file (geometry and sample type from cfg, which must then be given).
 * cfg may be NULL; when given, its K (and nx for raw files) must match. A float sample that is
 * not finite is refused. Returns 0, or a negative errno with the message (naming the file) in
 * err. Free with cal_data_free.
 */
int cal_data_load(const char *path, const struct vr_config *cfg, size_t max_ascans,
                  struct cal_data *d, char *err, size_t errlen);
void cal_data_free(struct cal_data *d);

/* The CPU backend set up for one recording; each run takes a variant of its configuration. */
struct cal_engine {
	struct vr_config cfg; /* the base: the given configuration on the recording's geometry */
	struct be_backend *be;
	const struct cal_data *d;
	uint32_t nh;     /* depth bins: half the FFT length */
	uint32_t z0, z1; /* depth window of the sharpness metric */
	float *low;      /* [n][nh] */
	uint64_t epoch;
};

/*
 * Open the engine for d: base is the user's configuration (or defaults), of which the
 * preprocessing is kept; geometry, sample type, dB range (wide, so that amplitudes come back
 * unclipped) and mode none are set for the recording. Returns 0 or a negative errno with err.
 */
int cal_engine_open(struct cal_engine *e, const struct vr_config *base, const struct cal_data *d,
                    uint32_t z0, uint32_t z1, char *err, size_t errlen);
void cal_engine_close(struct cal_engine *e);

/*
 * Process the recording with the preprocessing of v (a variant of e->cfg: same sizes; its
 * tables may point to the caller's arrays). Writes the amplitude |X| into amp ([n][nh], may be
 * NULL) and the sharpness metric into *sharp (may be NULL). Returns 0 or a negative errno.
 */
int cal_engine_run(struct cal_engine *e, const struct vr_config *v, double *amp, double *sharp,
                   char *err, size_t errlen);

/* Weighted least squares of y on the polynomial basis 1, x, .., x^deg (deg <= 9) by Householder
 * QR; w may be NULL (all 1). c[0..deg]. Returns 0, or -EINVAL when the system is singular. */
int cal_polyfit(const double *x, const double *y, const double *w, size_t n, int deg, double *c);
double cal_polyval(const double *c, int deg, double x);

/* Full width at half maximum (bins, interpolated) of the highest peak of a[lo..hi); *peak its
 * bin. */
double cal_fwhm(const double *a, uint32_t n, uint32_t lo, uint32_t hi, uint32_t *peak);

#endif
