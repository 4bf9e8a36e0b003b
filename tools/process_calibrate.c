/* SPDX-License-Identifier: MIT */
/*
 * The parts of `volrec calibrate` that are not the command line: reading raw recordings,
 * running the CPU backend on them for each candidate correction (one engine, the same
 * processing the daemon runs), the sharpness metric and the small numerical helpers.
 */
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/h5attr.h"
#include "sources/source.h"
#include "tools/calibrate.h"

/* ---- loading ------------------------------------------------------------------------------ */

/* Saturation of integer data: the share of samples at the largest (smallest, for signed) value,
 * when that value is a full scale 2^b - 1 (or -2^b) of some bit depth b in 8..16 (else 0). */
static void saturation(struct cal_data *d, size_t at_max, size_t at_min, double vmax, double vmin,
                       uint32_t sh)
{
	size_t total = d->n * d->K;

	if (d->type == CFG_SAMPLE_F32 || !total)
		return;
	for (int b = 8; b <= 16 - (int)sh; b++) {
		if (vmax == ldexp(1.0, b) - 1 ||
		    (d->type == CFG_SAMPLE_I16 && vmax == ldexp(1.0, b - 1) - 1)) {
			d->limit = vmax;
			d->saturated = (double)at_max / (double)total;
		}
		if (d->type == CFG_SAMPLE_I16 && vmin == -ldexp(1.0, b - 1)) {
			double f = (double)at_min / (double)total;
			if (f > d->saturated) {
				d->saturated = f;
				d->limit = vmin;
			}
		}
	}
	if ((d->type == CFG_SAMPLE_U16 || cfg_sample_packed(d->type)) && vmin == 0 &&
	    (double)at_min / (double)total > d->saturated) {
		d->saturated = (double)at_min / (double)total;
		d->limit = 0;
	}
}

/* Convert the n x K samples in `in` (as stored: little-endian, type d->type; K even for the
 * packed types) into d->s, integers shifted right by sh (floor), and measure their saturation.
 * Float samples must be finite: -EINVAL with err naming the first that is not. */
static int convert(struct cal_data *d, const void *in, uint32_t sh, char *err, size_t errlen)
{
	const enum cfg_sample t = d->type;
	const size_t n = d->n * d->K;
	double hi = -INFINITY, lo = INFINITY;
	size_t at_max = 0, at_min = 0;

	for (size_t i = 0; i < n; i++) {
		double v;
		if (t == CFG_SAMPLE_U16) {
			v = (double)(((const uint16_t *)in)[i] >> sh);
		} else if (t == CFG_SAMPLE_I16) {
			v = (double)((int32_t)((const int16_t *)in)[i] >> sh);
		} else if (cfg_sample_packed(t)) {
			uint32_t s[2];
			vr_unpack12((const uint8_t *)in + i / 2 * 3, t == CFG_SAMPLE_U12GV, &s[0],
			            &s[1]);
			v = (double)(s[i % 2] >> sh);
		} else {
			v = ((const float *)in)[i];
			if (!isfinite(v)) {
				const size_t a = i / d->K;
				return vr_err(err, errlen, -EINVAL,
				              "%s: sample %zu of A-scan %zu of B-scan %zu (counted "
				              "from 0) is %g: the samples must be finite numbers",
				              d->path, i % d->K, a % d->nx, a / d->nx, v);
			}
		}
		d->s[i] = (float)v;
		hi = v > hi ? v : hi;
		lo = v < lo ? v : lo;
	}
	for (size_t i = 0; i < n; i++) {
		at_max += d->s[i] == (float)hi;
		at_min += d->s[i] == (float)lo;
	}
	saturation(d, at_max, at_min, hi, lo, sh);
	return 0;
}

/* Take K samples per A-scan and nx A-scans per B-scan as a replay or HDF5 file gives them,
 * within the ranges volrecd can be configured with (geometry.samples_per_ascan,
 * geometry.ascans_per_bscan; a raw file's come from the configuration, checked alike), before
 * they are narrowed to 32 bits. */
static int set_geometry(struct cal_data *d, uint64_t K, uint64_t nx, char *err, size_t errlen)
{
	if (K < CFG_K_MIN || K > CFG_K_MAX)
		return vr_err(err, errlen, -EINVAL,
		              "%s: %llu samples per A-scan, outside %u..%u (the range of "
		              "geometry.samples_per_ascan)",
		              d->path, (unsigned long long)K, CFG_K_MIN, CFG_K_MAX);
	if (nx < 1 || nx > CFG_NX_MAX)
		return vr_err(err, errlen, -EINVAL,
		              "%s: %llu A-scans per B-scan, outside 1..%u (the range of "
		              "geometry.ascans_per_bscan)",
		              d->path, (unsigned long long)nx, CFG_NX_MAX);
	d->K = (uint32_t)K;
	d->nx = (uint32_t)nx;
	return 0;
}

/* vr_pread_full, a file that ends early reported as -EIO */
static int read_at(int fd, void *buf, size_t len, off_t off)
{
	int rc = vr_pread_full(fd, buf, len, (uint64_t)off);

	return rc == -ENODATA ? -EIO : rc;
}

/* How many whole B-scans of nx A-scans to load out of `available` A-scans. */
static uint32_t bscans_to_load(size_t available, uint32_t nx, size_t max_ascans)
{
	size_t nb = available / nx, lim = max_ascans / nx;

	if (lim < 1)
		lim = 1;
	return (uint32_t)(nb < lim ? nb : lim);
}

static int load_flat(struct cal_data *d, int fd, off_t off, uint32_t sh, char *err, size_t errlen)
{
	const size_t count = d->n * d->K, bytes = cfg_sample_bytes(d->type, count);
	void *buf = malloc(bytes);
	int rc;

	d->s = malloc(count * sizeof(float));
	if (!buf || !d->s) {
		free(buf);
		return vr_err(err, errlen, -ENOMEM, "%s: out of memory for %zu A-scans", d->path,
		              d->n);
	}
	rc = read_at(fd, buf, bytes, off);
	if (rc < 0) {
		free(buf);
		return vr_err_errno(err, errlen, rc, "%s: reading the samples", d->path);
	}
	rc = convert(d, buf, sh, err, errlen);
	free(buf);
	return rc;
}

/* The configuration's sample type of a replay header's (src_replay_probe checked its range). */
static const enum cfg_sample from_shim_type[] = {
        [VOLREC_SAMPLE_U16] = CFG_SAMPLE_U16,     [VOLREC_SAMPLE_I16] = CFG_SAMPLE_I16,
        [VOLREC_SAMPLE_F32] = CFG_SAMPLE_F32,     [VOLREC_SAMPLE_U12P] = CFG_SAMPLE_U12P,
        [VOLREC_SAMPLE_U12GV] = CFG_SAMPLE_U12GV,
};

static int load_hdf5(struct cal_data *d, const struct vr_config *cfg, size_t max_ascans, char *err,
                     size_t errlen)
{
	hid_t f = -1, ds = -1, sp = -1, ty = -1, ms = -1;
	hsize_t dims[8];
	int rank, rc = -EINVAL;
	void *buf = NULL;
	const uint32_t sh =
	        cfg && cfg->geometry.sample_type != CFG_SAMPLE_F32 ? cfg->geometry.bit_shift : 0;

	H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
	f = H5Fopen(d->path, H5F_ACC_RDONLY, H5P_DEFAULT);
	if (f < 0)
		return vr_err(err, errlen, -EINVAL, "%s: not a readable HDF5 file", d->path);
	ds = H5Dopen2(f, "raw", H5P_DEFAULT);
	if (ds < 0) {
		const bool raw = H5Lexists(f, "raw", H5P_DEFAULT) > 0;
		const bool vols = !raw && H5Lexists(f, "volumes", H5P_DEFAULT) > 0;

		rc = vr_err(err, errlen, -EINVAL, "%s: %s (raw spectra [..][A-scans][samples])%s",
		            d->path, raw ? "/raw is not a dataset" : "no dataset /raw",
		            vols ? "; it holds /volumes, processed volumes, which cannot be "
		                   "calibrated"
		                 : "");
		goto out;
	}
	sp = H5Dget_space(ds);
	rank = sp < 0 ? -1 : H5Sget_simple_extent_ndims(sp);
	if (rank < 2 || rank > 8 || H5Sget_simple_extent_dims(sp, dims, NULL) < 0) {
		rc = vr_err(err, errlen, -EINVAL,
		            "%s: /raw must have 2 to 8 dimensions [..][nx][K]", d->path);
		goto out;
	}
	ty = H5Dget_type(ds);
	hid_t mem;
	if (H5Tget_class(ty) == H5T_FLOAT && H5Tget_size(ty) == 4) {
		d->type = CFG_SAMPLE_F32;
		mem = H5T_NATIVE_FLOAT;
	} else if (H5Tget_class(ty) == H5T_INTEGER && H5Tget_size(ty) == 2) {
		d->type = H5Tget_sign(ty) == H5T_SGN_NONE ? CFG_SAMPLE_U16 : CFG_SAMPLE_I16;
		mem = d->type == CFG_SAMPLE_U16 ? H5T_NATIVE_UINT16 : H5T_NATIVE_INT16;
	} else {
		rc = vr_err(err, errlen, -EINVAL, "%s: /raw must hold u16, i16 or f32 samples",
		            d->path);
		goto out;
	}
	/* the dimensions are checked before they are multiplied or narrowed */
	size_t available = 1, samples;
	bool ovf = false;
	for (int i = 0; i < rank - 1; i++)
		ovf |= __builtin_mul_overflow(available, dims[i], &available);
	ovf |= __builtin_mul_overflow(available, dims[rank - 1], &samples);
	if (ovf) {
		rc = vr_err(err, errlen, -EINVAL, "%s: /raw holds 2^64 samples or more", d->path);
		goto out;
	}
	hsize_t nx = dims[rank - 2];
	if (rank == 2 && cfg && cfg->geometry.ascans_per_bscan <= available)
		nx = cfg->geometry.ascans_per_bscan; /* a flat [A-scans][K] list */
	rc = set_geometry(d, dims[rank - 1], nx, err, errlen);
	if (rc < 0)
		goto out;
	d->available = available;
	if (d->available < d->nx) {
		rc = vr_err(err, errlen, -EINVAL,
		            "%s: /raw of %u samples x %u A-scans is too small", d->path, d->K,
		            d->nx);
		goto out;
	}
	d->nb = bscans_to_load(d->available, d->nx, max_ascans);
	d->n = (size_t)d->nb * d->nx;
	/* read the leading index range that holds the first n A-scans, keep those */
	{
		hsize_t st[8] = {0}, cn[8], inner = 1;
		for (int i = 1; i < rank; i++)
			inner *= dims[i];
		for (int i = 0; i < rank; i++)
			cn[i] = dims[i];
		cn[0] = ((hsize_t)d->n * d->K + inner - 1) / inner;
		if (cn[0] > dims[0])
			cn[0] = dims[0];
		hsize_t total = cn[0] * inner;
		if (H5Sselect_hyperslab(sp, H5S_SELECT_SET, st, NULL, cn, NULL) < 0)
			goto out_io;
		ms = H5Screate_simple(1, &total, NULL);
		buf = malloc(cfg_sample_bytes(d->type, (size_t)total));
		d->s = malloc(d->n * d->K * sizeof(float));
		if (!buf || !d->s) {
			rc = vr_err(err, errlen, -ENOMEM, "%s: out of memory", d->path);
			goto out;
		}
		if (ms < 0 || H5Dread(ds, mem, ms, sp, H5P_DEFAULT, buf) < 0)
			goto out_io;
	}
	rc = convert(d, buf, sh, err, errlen);
	goto out;
out_io:
	rc = vr_err(err, errlen, -EIO, "%s: reading /raw failed", d->path);
out:
	free(buf);
	VR_H5_CLOSE(ms, ty, sp, ds, f);
	return rc;
}

int cal_data_load(const char *path, const struct vr_config *cfg, size_t max_ascans,
                  struct cal_data *d, char *err, size_t errlen)
{
	unsigned char magic[8] = {0};
	struct stat sb;
	uint32_t sh = 0;
	off_t off = 0;
	int fd, rc;

	memset(d, 0, sizeof(*d));
	snprintf(d->path, sizeof(d->path), "%s", path);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return vr_err_errno(err, errlen, -errno, "%s", path);
	if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
		rc = vr_err(err, errlen, -EINVAL, "%s: not a regular file", path);
		goto out_close;
	}
	rc = sb.st_size >= 8 ? read_at(fd, magic, 8, 0) : 0;
	if (rc < 0) {
		rc = vr_err_errno(err, errlen, rc, "%s", path);
		goto out_close;
	}
	if (!memcmp(magic, "\x89HDF\r\n\x1a\n", 8)) {
		close(fd);
		d->format = "hdf5";
		rc = load_hdf5(d, cfg, max_ascans, err, errlen);
		goto check;
	}
	if (!memcmp(magic, SRC_REPLAY_MAGIC, 8)) {
		struct src_replay_info info;
		rc = src_replay_probe(path, &info, err, errlen);
		if (rc == 0)
			rc = set_geometry(d, info.samples_per_ascan, info.ascans_per_bscan, err,
			                  errlen);
		if (rc < 0)
			goto out_close;
		d->format = "replay";
		d->type = from_shim_type[info.sample_type];
		d->available =
		        (size_t)info.epochs * src_replay_raw_bscans(&info) * info.ascans_per_bscan;
		if (cfg && cfg->geometry.sample_type != CFG_SAMPLE_F32 && d->type != CFG_SAMPLE_F32)
			sh = cfg->geometry.bit_shift;
		off = (off_t)info.header_size;
	} else {
		if (!cfg) {
			rc = vr_err(err, errlen, -EINVAL,
			            "%s: a headerless raw file: give its geometry and sample type "
			            "with -c FILE",
			            path);
			goto out_close;
		}
		d->format = "raw";
		d->type = cfg->geometry.sample_type;
		d->K = cfg->geometry.samples_per_ascan;
		d->nx = cfg->geometry.ascans_per_bscan;
		sh = d->type == CFG_SAMPLE_F32 ? 0 : cfg->geometry.bit_shift;
		const size_t as = cfg_sample_bytes(d->type, d->K);
		if (sb.st_size == 0 || (size_t)sb.st_size % as) {
			rc = vr_err(err, errlen, -EINVAL,
			            "%s: %lld bytes is not a whole number of %u-sample %s A-scans",
			            path, (long long)sb.st_size, d->K, cfg_sample_name(d->type));
			goto out_close;
		}
		d->available = (size_t)sb.st_size / as;
	}
	d->nb = bscans_to_load(d->available, d->nx, max_ascans);
	d->n = (size_t)d->nb * d->nx;
	/* no B-scan: refused below, after the check of K */
	rc = d->nb ? load_flat(d, fd, off, sh, err, errlen) : 0;
	close(fd);
check:
	if (rc == 0 && cfg && d->K != cfg->geometry.samples_per_ascan) {
		rc = vr_err(err, errlen, -EINVAL,
		            "%s: %u samples per A-scan, the configuration says %u", path, d->K,
		            cfg->geometry.samples_per_ascan);
	}
	if (rc == 0 && d->nb == 0)
		rc = vr_err(err, errlen, -EINVAL,
		            "%s: %zu A-scans, fewer than one B-scan of %u (too few A-scans)", path,
		            d->available, d->nx);
	if (rc < 0)
		cal_data_free(d);
	return rc;
out_close:
	close(fd);
	return rc;
}

void cal_data_free(struct cal_data *d)
{
	free(d->s);
	d->s = NULL;
}

/* ---- the engine ----------------------------------------------------------------------------- */

#define CAL_DB_LO (-100.0)
#define CAL_DB_HI 300.0

int cal_engine_open(struct cal_engine *e, const struct vr_config *base, const struct cal_data *d,
                    uint32_t z0, uint32_t z1, char *err, size_t errlen)
{
	int rc;

	memset(e, 0, sizeof(*e));
	e->d = d;
	rc = cfg_copy(&e->cfg, base);
	if (rc < 0)
		return vr_err(err, errlen, rc, "out of memory");
	struct vr_config *c = &e->cfg;
	c->backend = CFG_BACKEND_CPU;
	c->cpu.threads = 0;
	c->geometry.samples_per_ascan = d->K;
	c->geometry.sample_type = CFG_SAMPLE_F32;
	c->geometry.bit_shift = 0;
	c->geometry.ascans_per_bscan = d->nx;
	c->geometry.bscans_per_volume = d->nb;
	c->geometry.repeats = 1; /* the spectra one by one, repeats or not */
	c->geometry.stride[0] = c->geometry.stride[1] = 1;
	c->geometry.bidirectional = false;
	e->nh = cfg_fft_len(c) / 2;
	c->geometry.depth_range[0] = 0;
	c->geometry.depth_range[1] = e->nh;
	c->preprocess.db_range[0] = CAL_DB_LO;
	c->preprocess.db_range[1] = CAL_DB_HI;
	c->preprocess.flip.x = c->preprocess.flip.z = false;
	c->reconstruct.mode = CFG_RECON_NONE;
	c->pipeline.ring_bscans = d->nb;
	e->z0 = z0;
	e->z1 = z1 && z1 <= e->nh ? z1 : e->nh;
	if (e->z0 >= e->z1) {
		rc = vr_err(err, errlen, -EINVAL, "--depth: [%u, %u) is empty or beyond %u", z0, z1,
		            e->nh);
		goto out_cfg;
	}
	e->low = malloc(d->n * e->nh * sizeof(float));
	if (!e->low) {
		rc = vr_err(err, errlen, -ENOMEM, "out of memory for %zu A-scans", d->n);
		goto out_cfg;
	}
	rc = be_open(c, &e->be, NULL, 0, err, errlen);
	if (rc == 0)
		return 0;
	free(e->low);
out_cfg:
	cfg_free(c);
	return rc;
}

void cal_engine_close(struct cal_engine *e)
{
	be_close(e->be);
	free(e->low);
	cfg_free(&e->cfg);
	memset(e, 0, sizeof(*e));
}

/* Sharpness S = mean over the A-scans of sum I^2 / (sum I)^2, I = amp^2 over [z0, z1). */
static double cal_sharpness(const double *amp, size_t n, uint32_t nh, uint32_t z0, uint32_t z1)
{
	double s = 0;

	for (size_t a = 0; a < n; a++) {
		double s1 = 0, s2 = 0;
		for (uint32_t z = z0; z < z1; z++) {
			double i = amp[a * nh + z] * amp[a * nh + z];
			s1 += i;
			s2 += i * i;
		}
		s += s1 > 0 ? s2 / (s1 * s1) : 0;
	}
	return n ? s / (double)n : 0;
}

int cal_engine_run(struct cal_engine *e, const struct vr_config *v, double *amp, double *sharp,
                   char *err, size_t errlen)
{
	const struct cal_data *d = e->d;
	const size_t bb = (size_t)d->nx * d->K;
	int rc;

	rc = be_update_live(e->be, v, err, errlen);
	if (rc < 0)
		return rc;
	for (uint32_t b = 0; b < d->nb; b++) {
		rc = be_bscan_submit(e->be, e->epoch, b, d->s + b * bb);
		if (rc < 0)
			return vr_err(err, errlen, rc, "%s", be_last_error(e->be));
	}
	struct be_output o = {.lowres = e->low};
	rc = be_epoch_finish(e->be, e->epoch, &o, err, errlen);
	e->epoch++;
	if (rc < 0)
		return rc;
	double *a = amp;
	if (!a && sharp) {
		a = malloc(d->n * e->nh * sizeof(double));
		if (!a)
			return vr_err(err, errlen, -ENOMEM, "out of memory");
	}
	if (a) {
		const double span = CAL_DB_HI - CAL_DB_LO;
		for (size_t i = 0; i < d->n * e->nh; i++)
			a[i] = pow(10.0, (CAL_DB_LO + (double)e->low[i] * span) / 20.0);
	}
	if (sharp)
		*sharp = cal_sharpness(a, d->n, e->nh, e->z0, e->z1);
	if (a != amp)
		free(a);
	return 0;
}

/* ---- numerics ------------------------------------------------------------------------------- */

int cal_polyfit(const double *x, const double *y, const double *w, size_t n, int deg, double *c)
{
	const int m = deg + 1;
	double *A, *b;
	int rc = 0;

	if (deg < 0 || deg > 9 || n < (size_t)m)
		return -EINVAL;
	A = malloc(n * (size_t)m * sizeof(double));
	b = malloc(n * sizeof(double));
	if (!A || !b) {
		free(A);
		free(b);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		double sw = w ? sqrt(w[i] > 0 ? w[i] : 0) : 1, p = sw;
		for (int q = 0; q < m; q++, p *= x[i])
			A[i * m + q] = p;
		b[i] = sw * y[i];
	}
	/* Householder QR, column by column; b gets Q^T b */
	for (int q = 0; q < m; q++) {
		double norm = 0;
		for (size_t i = q; i < n; i++)
			norm += A[i * m + q] * A[i * m + q];
		norm = sqrt(norm);
		if (norm == 0) {
			rc = -EINVAL;
			goto out;
		}
		double alpha = A[q * m + q] > 0 ? -norm : norm;
		double v0 = A[q * m + q] - alpha, vnorm2 = v0 * v0;
		for (size_t i = q + 1; i < n; i++)
			vnorm2 += A[i * m + q] * A[i * m + q];
		if (vnorm2 == 0)
			continue;
		A[q * m + q] = v0; /* v is stored in column q from row q on */
		for (int r = q + 1; r < m; r++) {
			double dot = 0;
			for (size_t i = q; i < n; i++)
				dot += A[i * m + q] * A[i * m + r];
			double f = 2 * dot / vnorm2;
			for (size_t i = q; i < n; i++)
				A[i * m + r] -= f * A[i * m + q];
		}
		double dot = 0;
		for (size_t i = q; i < n; i++)
			dot += A[i * m + q] * b[i];
		double f = 2 * dot / vnorm2;
		for (size_t i = q; i < n; i++)
			b[i] -= f * A[i * m + q];
		A[q * m + q] = alpha; /* R's diagonal */
	}
	for (int q = m - 1; q >= 0; q--) {
		double s = b[q];
		for (int r = q + 1; r < m; r++)
			s -= A[q * m + r] * c[r];
		if (fabs(A[q * m + q]) < 1e-300) {
			rc = -EINVAL;
			goto out;
		}
		c[q] = s / A[q * m + q];
	}
out:
	free(A);
	free(b);
	return rc;
}

double cal_polyval(const double *c, int deg, double x)
{
	double v = 0;

	for (int q = deg; q >= 0; q--)
		v = v * x + c[q];
	return v;
}

double cal_fwhm(const double *a, uint32_t n, uint32_t lo, uint32_t hi, uint32_t *peak)
{
	uint32_t b = lo;

	for (uint32_t z = lo; z < hi && z < n; z++)
		if (a[z] > a[b])
			b = z;
	*peak = b;
	const double half = a[b] / 2;
	uint32_t z = b;
	while (z > 0 && a[z - 1] >= half)
		z--;
	double left = z > 0 ? z - (a[z] - half) / (a[z] - a[z - 1]) : 0.0;
	z = b;
	while (z + 1 < n && a[z + 1] >= half)
		z++;
	double right = z + 1 < n ? z + (a[z] - half) / (a[z] - a[z + 1]) : n - 1.0;
	return right - left;
}
