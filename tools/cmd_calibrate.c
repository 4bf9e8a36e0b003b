/* SPDX-License-Identifier: MIT */
/*
 * `volrec calibrate`: find the corrections an OCT system needs from its own recordings and
 * write them as configuration keys (a YAML fragment), table files and a before/after picture:
 * the background reference spectrum, k-linearization from mirror recordings, the pixel order
 * of a wavelength polynomial, and dispersion coefficients. Every measurement runs the CPU
 * backend on the data, so what is measured is what volrecd will compute. docs/calibration.md.
 */
#include <errno.h>
#include <fcntl.h>
#include <fftw3.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "formats/png.h"
#include "sources/recording.h"
#include "tools/calibrate.h"

#define CAL_MIN_ASCANS_REF    16 /* --reference: A-scans to average */
#define CAL_MIN_ASCANS_METRIC 64 /* --dispersion, --orientation: A-scans for the metric */
#define CAL_MAX_SATURATED     1e-3
#define CAL_MIN_PEAK_DB       20.0 /* --klin: the mirror above the median of the spectrum */
#define CAL_PHASE_DEG         7    /* --klin: polynomial degree of the fringe phase */

enum cal_op { OP_NONE, OP_REFERENCE, OP_KLIN, OP_ORIENTATION, OP_DISPERSION };

struct cal_opts {
	enum cal_op op;
	const char *config, *outdir, *check;
	const char *inputs[2];
	int ninputs;
	size_t max_ascans;
	double range;    /* --dispersion: half-width of the coarse search, radians */
	uint32_t z0, z1; /* --depth */
	bool depth_set;
	uint32_t zmin; /* --klin: lowest depth bin searched for the mirror */
	double wl[4];  /* --wavelength-nm */
	bool wl_set;
};

static void calibrate_usage(FILE *f)
{
	fprintf(f,
	        "usage: volrec calibrate --reference | --klin | --orientation | --dispersion\n"
	        "                        [-c FILE] [-o DIR] [options] INPUT [INPUT2]\n\n"
	        "Measure a correction from raw recordings (a replay file, a headerless raw file\n"
	        "with -c giving its geometry, or HDF5 with a /raw dataset [..][nx][K]) and write\n"
	        "DIR/<what>.yaml (the configuration keys), table files and DIR/<what>.png (a\n"
	        "B-scan before | after). The rest of the preprocessing comes from -c.\n\n"
	        "  --reference      INPUT recorded with the sample arm blocked: its mean spectrum\n"
	        "                   becomes preprocess.background.reference (reference.txt)\n"
	        "  --check FILE     with --reference: a sample recording whose spectral shape the\n"
	        "                   reference must match (warns when it does not)\n"
	        "  --klin           INPUT (and INPUT2) of a mirror at one (two) depths: "
	        "resampling\n"
	        "                   table from the fringe phase (resample_table.txt); two depths\n"
	        "                   also give the dispersion (dispersion_table.txt, coeffs)\n"
	        "  --zmin BIN       with --klin: lowest depth bin searched for the mirror\n"
	        "                   (default K/16)\n"
	        "  --orientation    INPUT of a sample: the pixel order of the wavelength_nm\n"
	        "                   polynomial of -c (or --wavelength-nm) that gives the sharper\n"
	        "                   image\n"
	        "  --wavelength-nm L0,L1,L2,L3  the polynomial to orient (default: from -c)\n"
	        "  --dispersion     INPUT of a sample: [a2, a3] maximizing the sharpness, and a\n"
	        "                   table with 4th and 5th order terms (dispersion_table.txt)\n"
	        "  --range RAD      with --dispersion: coarse search over [-RAD, RAD] for a2 and\n"
	        "                   a3 (default 100)\n"
	        "  -c, --config FILE  configuration in force (geometry of raw files, sample type,\n"
	        "                   bit shift, background, resampling, window, zero_pad)\n"
	        "  -o, --output DIR where to write (default .)\n"
	        "  -n, --max-ascans N  A-scans to use, whole B-scans, at least one (default 4096)\n"
	        "  --depth Z0,Z1    depth bins of the sharpness metric (default N/64 .. N/2)\n"
	        "  -h, --help       this text\n\n"
	        "Sharpness: the mean over A-scans of sum(I^2) / sum(I)^2, I = |X|^2 over the "
	        "depth\n"
	        "bins (man volrec).\n"
	        "Exit status: 0 done, 1 the data cannot support the calibration or writing "
	        "failed,\n"
	        "2 usage or configuration error.\n");
}

static int parse_list(const char *s, double *v, int n)
{
	char *end;

	for (int i = 0; i < n; i++) {
		v[i] = strtod(s, &end);
		if (end == s || !isfinite(v[i]))
			return -EINVAL;
		s = end;
		if (i + 1 < n) {
			if (*s != ',')
				return -EINVAL;
			s++;
		}
	}
	return *s ? -EINVAL : 0;
}

static int parse_opts(int argc, char **argv, struct cal_opts *o)
{
	/* the four operations first, in the order of enum cal_op */
	enum { O_REF = 0x200, O_KLIN, O_ORIENT, O_DISP, O_CHECK, O_ZMIN, O_WL, O_RANGE, O_DEPTH };
	static const struct option longopts[] = {
	        {"reference", no_argument, NULL, O_REF},
	        {"check", required_argument, NULL, O_CHECK},
	        {"klin", no_argument, NULL, O_KLIN},
	        {"zmin", required_argument, NULL, O_ZMIN},
	        {"orientation", no_argument, NULL, O_ORIENT},
	        {"wavelength-nm", required_argument, NULL, O_WL},
	        {"dispersion", no_argument, NULL, O_DISP},
	        {"range", required_argument, NULL, O_RANGE},
	        {"depth", required_argument, NULL, O_DEPTH},
	        {"config", required_argument, NULL, 'c'},
	        {"output", required_argument, NULL, 'o'},
	        {"max-ascans", required_argument, NULL, 'n'},
	        VR_CLI_LONGOPTS_END,
	};
	int c;
	double v[2];
	uint64_t u;
	const struct vr_cli_str strs[] = {
	        {O_CHECK, &o->check}, {'c', &o->config}, {'o', &o->outdir}};

	optind = 1;
	while ((c = VR_CLI_GETOPT(argc, argv, "c:o:n:h", longopts, strs)) != -1) {
		if (c >= O_REF && c <= O_DISP) {
			enum cal_op op = (enum cal_op)(OP_REFERENCE + (c - O_REF));
			if (o->op != OP_NONE && o->op != op) {
				fprintf(stderr, "volrec calibrate: choose one of --reference, "
				                "--klin, --orientation, --dispersion\n");
				return VR_EXIT_USAGE;
			}
			o->op = op;
			continue;
		}
		switch (c) {
		case O_ZMIN:
			if (vr_cli_u64("volrec calibrate", "--zmin", optarg, 1, 1u << 20,
			               "a bin >= 1", &u))
				return VR_EXIT_USAGE;
			o->zmin = (uint32_t)u;
			break;
		case O_WL:
			if (parse_list(optarg, o->wl, 4) < 0) {
				fprintf(stderr,
				        "volrec calibrate: --wavelength-nm %s: need four numbers "
				        "L0,L1,L2,L3\n",
				        optarg);
				return VR_EXIT_USAGE;
			}
			o->wl_set = true;
			break;
		case O_RANGE:
			if (parse_list(optarg, v, 1) < 0 || !(v[0] > 0 && v[0] <= 1e5)) {
				fprintf(stderr,
				        "volrec calibrate: --range %s: need radians in (0, "
				        "100000]\n",
				        optarg);
				return VR_EXIT_USAGE;
			}
			o->range = v[0];
			break;
		case O_DEPTH:
			if (parse_list(optarg, v, 2) < 0 || v[0] < 0 || v[1] <= v[0] ||
			    v[1] > 1 << 20 || v[0] != floor(v[0]) || v[1] != floor(v[1])) {
				fprintf(stderr,
				        "volrec calibrate: --depth %s: need two bins Z0,Z1 with Z0 "
				        "< Z1\n",
				        optarg);
				return VR_EXIT_USAGE;
			}
			o->z0 = (uint32_t)v[0];
			o->z1 = (uint32_t)v[1];
			o->depth_set = true;
			break;
		case 'n':
			if (vr_cli_u64("volrec calibrate", "-n", optarg, 1, 1u << 24,
			               "a number of A-scans in 1..16777216", &u))
				return VR_EXIT_USAGE;
			o->max_ascans = (size_t)u;
			break;
		default:
			return vr_command_usage(calibrate_usage, c);
		}
	}
	for (; optind < argc; optind++) {
		if (o->ninputs == 2) {
			fprintf(stderr, "volrec calibrate: at most two inputs ('%s' is a third)\n",
			        argv[optind]);
			return VR_EXIT_USAGE;
		}
		o->inputs[o->ninputs++] = argv[optind];
	}
	if (o->op == OP_NONE) {
		fprintf(stderr, "volrec calibrate: say what to calibrate: --reference, --klin, "
		                "--orientation or --dispersion\n");
		calibrate_usage(stderr);
		return VR_EXIT_USAGE;
	}
	if (o->ninputs == 0) {
		fprintf(stderr, "volrec calibrate: no input recording given\n");
		return VR_EXIT_USAGE;
	}
	if (o->ninputs == 2 && o->op != OP_KLIN) {
		fprintf(stderr,
		        "volrec calibrate: two inputs only with --klin (a mirror at two depths)\n");
		return VR_EXIT_USAGE;
	}
	if (o->check && o->op != OP_REFERENCE) {
		fprintf(stderr, "volrec calibrate: --check goes with --reference\n");
		return VR_EXIT_USAGE;
	}
	if (o->wl_set && o->op != OP_ORIENTATION) {
		fprintf(stderr, "volrec calibrate: --wavelength-nm goes with --orientation\n");
		return VR_EXIT_USAGE;
	}
	return 0;
}

/* ---- context ---------------------------------------------------------------------------- */

#define CAL_OUTPUTS 8 /* files one run writes, at most (--klin: 4) */

/* A file written under a temporary name, renamed into place when the whole run succeeds. */
struct cal_output {
	char name[32];  /* "reference.txt" */
	char note[128]; /* printed after "wrote DIR/name" */
};

struct cal_ctx {
	struct cal_opts o;
	struct vr_config cfg; /* -c or defaults */
	bool have_cfg;
	char dir[4096];
	struct cal_output out[CAL_OUTPUTS];
	unsigned nout;
};

/* Path of a file in the output directory; staged: the temporary name it is written under. */
static void out_path(const struct cal_ctx *x, char *buf, size_t len, const char *name, bool staged)
{
	snprintf(buf, len, staged ? "%s/.%s.new" : "%s/%s", x->dir, name);
}

/* Note DIR/name as written under its temporary name. */
static void out_staged(struct cal_ctx *x, const char *name, const char *note)
{
	struct cal_output *o = &x->out[x->nout++];

	snprintf(o->name, sizeof(o->name), "%s", name);
	snprintf(o->note, sizeof(o->note), "%s", note);
}

/*
 * The end of a run: when it succeeded (ret 0) put every file it wrote into place, else remove
 * them, so that a run that fails leaves the previous outputs as they were and none of its own.
 * Returns ret, or VR_EXIT_FAIL when a rename failed.
 */
static int out_finish(struct cal_ctx *x, int ret)
{
	char tmp[4200], path[4200];
	struct stat sb;

	/* what would stop a rename, before the first one: a directory in a file's place */
	for (unsigned i = 0; ret == VR_EXIT_OK && i < x->nout; i++) {
		out_path(x, path, sizeof(path), x->out[i].name, false);
		if (lstat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
			fprintf(stderr, "volrec calibrate: %s is a directory: nothing written\n",
			        path);
			ret = VR_EXIT_FAIL;
		}
	}
	for (unsigned i = 0; i < x->nout; i++) {
		out_path(x, tmp, sizeof(tmp), x->out[i].name, true);
		out_path(x, path, sizeof(path), x->out[i].name, false);
		if (ret == VR_EXIT_OK && rename(tmp, path) < 0) {
			fprintf(stderr, "volrec calibrate: renaming %s to %s: %s\n", tmp, path,
			        strerror(errno));
			ret = VR_EXIT_FAIL;
		} else if (ret == VR_EXIT_OK) {
			printf("  wrote %s%s\n", path, x->out[i].note);
			continue;
		}
		unlink(tmp);
	}
	x->nout = 0;
	return ret;
}

/* Write DIR/name (staged): text, or with v the table "# text" and v[n], one value a line. */
static int write_file(struct cal_ctx *x, const char *name, const char *text, const double *v,
                      uint32_t n)
{
	char path[4200];
	FILE *f;

	out_path(x, path, sizeof(path), name, true);
	f = fopen(path, "w");
	if (!f) {
		fprintf(stderr, "volrec calibrate: writing %s: %s\n", path, strerror(errno));
		return VR_EXIT_FAIL;
	}
	out_staged(x, name, "");
	fprintf(f, v ? "# %s\n" : "%s", text);
	for (uint32_t i = 0; i < n; i++)
		fprintf(f, "%.10g\n", v[i]);
	if (ferror(f) | (fclose(f) != 0)) {
		fprintf(stderr, "volrec calibrate: writing %s: %s\n", path, strerror(errno));
		return VR_EXIT_FAIL;
	}
	return VR_EXIT_OK;
}

/* Before | after picture of the first B-scan: depth down, A-scans across, 20 log10 |X|
 * mapped to 0..255 between the 1st and 99.9th percentiles of the after image. */
static int write_png(struct cal_ctx *x, const char *name, const struct cal_engine *e,
                     const double *before, const double *after, const char *what)
{
	const uint32_t nx = e->d->nx, nh = e->nh, z0 = e->z0, z1 = e->z1, H = z1 - z0;
	const uint32_t W = 2 * nx + 4;
	uint8_t *pix = calloc((size_t)W * H, 1);
	double *v = malloc((size_t)nx * H * sizeof(double));
	char path[4200], perr[512], note[128];
	int rc;

	if (!pix || !v) {
		free(pix);
		free(v);
		fprintf(stderr, "volrec calibrate: out of memory for the picture\n");
		return VR_EXIT_FAIL;
	}
	for (uint32_t a = 0; a < nx; a++)
		for (uint32_t z = z0; z < z1; z++)
			v[(size_t)a * H + (z - z0)] = 20 * log10(after[(size_t)a * nh + z] + 1e-30);
	double lo = vr_percentile(v, (size_t)nx * H, 1.0);
	double hi = vr_percentile(v, (size_t)nx * H, 99.9);
	if (!(hi > lo))
		hi = lo + 1;
	for (int side = 0; side < 2; side++) {
		const double *amp = side ? after : before;
		for (uint32_t a = 0; a < nx; a++)
			for (uint32_t z = z0; z < z1; z++) {
				double d = 20 * log10(amp[(size_t)a * nh + z] + 1e-30);
				double q = 255 * (d - lo) / (hi - lo);
				q = q < 0 ? 0 : q > 255 ? 255 : q;
				pix[(size_t)(z - z0) * W + side * (nx + 4) + a] =
				        (uint8_t)(q + 0.5);
			}
	}
	for (uint32_t y = 0; y < H; y++)
		for (uint32_t c = nx; c < nx + 4; c++)
			pix[(size_t)y * W + c] = 255;
	out_path(x, path, sizeof(path), name, true);
	rc = fmt_png_write(path, pix, W, H, what, perr, sizeof(perr));
	free(pix);
	free(v);
	if (rc < 0) {
		fprintf(stderr, "volrec calibrate: %s\n", perr);
		return VR_EXIT_FAIL;
	}
	snprintf(note, sizeof(note), " (B-scan 0: before | after, %.0f..%.0f dB)", lo, hi);
	out_staged(x, name, note);
	return VR_EXIT_OK;
}

/* Write all n bytes to fd: 0 or a negative errno. */
static int write_full(int fd, const void *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		p = (const uint8_t *)p + w;
		n -= (size_t)w;
	}
	return 0;
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* The first epochs of a raw recording (version 2 of the replay format: each epoch in a frame
 * with its index entry) into the memory file fd as a version 1 replay file, each epoch's
 * CRC-32C checked: enough epochs for max_ascans A-scans of whole B-scans. 0 or a negative errno
 * with the message in err. */
static int recording_flat(const char *path, struct src_replay_info *info, size_t max_ascans, int fd,
                          char *err, size_t errlen)
{
	/* every raw B-scan, the repeats of a position too (docs/algorithms.md §5), is a B-scan of
	 * the flat file: calibration looks at spectra, not at positions */
	const uint32_t nb = (uint32_t)src_replay_raw_bscans(info);
	const uint64_t eb = src_replay_epoch_bytes(info);
	const uint64_t fb = src_rec_frame_size(eb);
	uint64_t n = 0, want = max_ascans / info->ascans_per_bscan;
	struct src_rec_frame *fr = NULL;
	uint8_t h[SRC_REPLAY_FIXED_SIZE] = SRC_REPLAY_MAGIC, *buf = NULL;
	int rc, in = -1;

	rc = src_rec_index_read(path, info, &fr, &n, err, errlen);
	if (rc < 0)
		return rc;
	want = (want ? want : 1) + nb - 1; /* whole B-scans, in epochs */
	want /= nb;
	n = n < want ? n : want;
	put32(h + 8, 1);
	put32(h + 12, SRC_REPLAY_FIXED_SIZE);
	put32(h + 16, info->sample_type);
	put32(h + 20, info->samples_per_ascan);
	put32(h + 24, info->ascans_per_bscan);
	put32(h + 28, nb);
	put32(h + 32, (uint32_t)n);
	put32(h + 36, (uint32_t)(n >> 32));
	put32(h + 40, info->stride_x);
	put32(h + 44, info->stride_y);
	put32(h + 48, info->flags & SRC_REPLAY_FLAG_BIDIR);
	buf = malloc(eb);
	in = open(path, O_RDONLY | O_CLOEXEC);
	if (!buf || in < 0) {
		rc = buf ? vr_err_errno(err, errlen, -errno, "%s", path)
		         : vr_err(err, errlen, -ENOMEM, "out of memory");
		goto out;
	}
	rc = write_full(fd, h, sizeof(h));
	for (uint64_t i = 0; rc == 0 && i < n; i++) {
		rc = vr_pread_full(in, buf, eb,
		                   info->header_size + fr[i].index * fb + SRC_REC_FRAME_HDR);
		if (rc == 0 && src_crc32c(0, buf, eb) != fr[i].crc) {
			rc = vr_err(
			        err, errlen, -EBADMSG,
			        "%s: CRC-32C mismatch in epoch %llu (frame %llu): the recording "
			        "is damaged there",
			        path, (unsigned long long)fr[i].epoch,
			        (unsigned long long)fr[i].index);
			goto out;
		}
		if (rc == 0)
			rc = write_full(fd, buf, eb);
	}
	if (rc < 0)
		rc = vr_err_errno(err, errlen, rc, "%s", path);
out:
	if (in >= 0)
		close(in);
	free(buf);
	free(fr);
	return rc;
}

/* cal_data_load, which reads version 1 of the replay format, of any input: a raw recording
 * (version 2) goes through a memory file made by recording_flat, named path in d and in err. */
static int load_any(const struct cal_ctx *x, const char *path, struct cal_data *d, char *err,
                    size_t errlen)
{
	struct src_replay_info info;
	char mem[64], probe_err[8];
	int rc, fd;

	if (src_replay_probe(path, &info, probe_err, sizeof(probe_err)) < 0 || info.version < 2)
		return cal_data_load(path, x->have_cfg ? &x->cfg : NULL, x->o.max_ascans, d, err,
		                     errlen);
	fd = memfd_create("volrec-calibrate", MFD_CLOEXEC);
	if (fd < 0)
		return vr_err_errno(err, errlen, -errno, "%s: a memory file", path);
	rc = recording_flat(path, &info, x->o.max_ascans, fd, err, errlen);
	snprintf(mem, sizeof(mem), "/proc/self/fd/%d", fd);
	if (rc == 0)
		rc = cal_data_load(mem, x->have_cfg ? &x->cfg : NULL, x->o.max_ascans, d, err,
		                   errlen);
	close(fd);
	if (rc == 0) {
		snprintf(d->path, sizeof(d->path), "%s", path);
		d->format = "raw recording";
		d->available = (size_t)info.complete * src_replay_raw_bscans(&info) *
		               info.ascans_per_bscan;
	} else {
		/* the loader's message names the memory file: name the recording */
		char *at = strstr(err, mem), tail[1024];

		if (at) {
			snprintf(tail, sizeof(tail), "%s", at + strlen(mem));
			snprintf(at, errlen - (size_t)(at - err), "%s%s", path, tail);
		}
	}
	return rc;
}

/* Load an input, refusing saturated data and too few A-scans. */
static int load_input(const struct cal_ctx *x, const char *path, size_t min_ascans,
                      struct cal_data *d)
{
	char err[1024];
	int rc = load_any(x, path, d, err, sizeof(err));

	if (rc < 0) {
		fprintf(stderr, "volrec calibrate: %s\n", err);
		return VR_EXIT_FAIL;
	}
	printf("%s: %s, %u samples x %u A-scans, %u B-scans used (%zu A-scans of %zu)\n", path,
	       d->format, d->K, d->nx, d->nb, d->n, d->available);
	if (d->n < min_ascans) {
		fprintf(stderr,
		        "volrec calibrate: %s: %zu A-scans, too few A-scans for this calibration "
		        "(at least %zu)\n",
		        path, d->n, min_ascans);
		goto out_free;
	}
	if (d->saturated > CAL_MAX_SATURATED && d->limit == 0) {
		fprintf(stderr,
		        "volrec calibrate: %s: %.2f %% of the samples sit at 0, the bottom of the "
		        "digitizer's range (at most %.1f %% allowed): too little light, or a black "
		        "level that clips the signal; check the source and the camera's offset and "
		        "record again\n",
		        path, 100 * d->saturated, 100 * CAL_MAX_SATURATED);
		goto out_free;
	}
	if (d->saturated > CAL_MAX_SATURATED) {
		fprintf(stderr,
		        "volrec calibrate: %s: saturated: %.2f %% of the samples sit at the "
		        "digitizer's limit %.0f (at most %.1f %% allowed); lower the source power "
		        "or the exposure and record again\n",
		        path, 100 * d->saturated, d->limit, 100 * CAL_MAX_SATURATED);
		goto out_free;
	}
	return VR_EXIT_OK;
out_free:
	cal_data_free(d);
	return VR_EXIT_FAIL;
}

/* The metric's depth window: --depth, else N/64 (at least 4) to N/2 within the configured
 * depth range. */
static void depth_window(const struct cal_ctx *x, uint32_t K, uint32_t *z0, uint32_t *z1)
{
	const uint32_t N = K * x->cfg.preprocess.zero_pad, nh = N / 2;
	if (x->o.depth_set) {
		*z0 = x->o.z0;
		*z1 = x->o.z1;
		return;
	}
	*z0 = N / 64 > 4 ? N / 64 : 4;
	*z1 = nh;
	if (x->have_cfg && x->cfg.geometry.depth_range[1] <= nh) {
		if (x->cfg.geometry.depth_range[0] > *z0)
			*z0 = x->cfg.geometry.depth_range[0];
		*z1 = x->cfg.geometry.depth_range[1];
	}
}

static int engine_open(const struct cal_ctx *x, const struct vr_config *base,
                       const struct cal_data *d, struct cal_engine *e)
{
	char err[1024];
	uint32_t z0, z1;
	depth_window(x, d->K, &z0, &z1);
	int rc = cal_engine_open(e, base, d, z0, z1, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "volrec calibrate: %s\n", err);
		return rc == -EINVAL ? VR_EXIT_USAGE : VR_EXIT_FAIL;
	}
	return VR_EXIT_OK;
}

/* engine_open on cfg with its background of mode a or b replaced by mode instead (in cfg too):
 * the background a calibration's pictures are made with. */
static int engine_open_bg(const struct cal_ctx *x, struct vr_config *cfg, const struct cal_data *d,
                          enum cfg_background a, enum cfg_background b, enum cfg_background instead,
                          struct cal_engine *e)
{
	if (cfg->preprocess.background.mode == a || cfg->preprocess.background.mode == b)
		cfg->preprocess.background.mode = instead;
	return engine_open(x, cfg, d, e);
}

static int engine_run(struct cal_engine *e, const struct vr_config *v, double *amp, double *s)
{
	char err[1024];
	int rc = cal_engine_run(e, v, amp, s, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "volrec calibrate: %s\n", err);
		return VR_EXIT_FAIL;
	}
	return VR_EXIT_OK;
}

/* Point t at data[len], named path (as written beside the YAML). */
static void set_table(struct cfg_table *t, double *data, uint32_t len, const char *path)
{
	t->data = data;
	t->len = len;
	snprintf(t->path, sizeof(t->path), "%s", path);
}

/* phi(j) = a2 v^2 + a3 v^3 + a4 v^4 + a5 v^5, v = j/(K-1) - 0.5, for c = a2..a5, into t[K]. */
static void disp_table(const double c[4], uint32_t K, double *t)
{
	for (uint32_t j = 0; j < K; j++) {
		double q = (double)j / (K - 1) - 0.5, q2 = q * q;
		t[j] = q2 * (c[0] + q * (c[1] + q * (c[2] + q * c[3])));
	}
}

/* Mean amplitude profile over the A-scans into prof[nh]. */
static void mean_profile(const double *amp, size_t n, uint32_t nh, double *prof)
{
	memset(prof, 0, nh * sizeof(double));
	for (size_t a = 0; a < n; a++)
		for (uint32_t z = 0; z < nh; z++)
			prof[z] += amp[a * nh + z] / (double)n;
}

/* ---- --reference -------------------------------------------------------------------------- */

/* The mean of d's A-scans (K values, to free), or NULL without memory. */
static double *mean_spectrum(const struct cal_data *d)
{
	double *m = calloc(d->K, sizeof(double));

	if (!m)
		return NULL;
	for (size_t a = 0; a < d->n; a++)
		for (uint32_t k = 0; k < d->K; k++)
			m[k] += d->s[a * d->K + k] / (double)d->n;
	return m;
}

/* Stability of the reference: the rms deviation of d's A-scans from their mean r, relative to
 * its mean level. VR_EXIT_FAIL when the spectrum is zero. */
static int ref_stability(const struct cal_data *d, const double *r)
{
	const uint32_t K = d->K;
	double dev = 0, lvl = 0;

	for (uint32_t k = 0; k < K; k++)
		lvl += fabs(r[k]) / K;
	for (size_t a = 0; a < d->n; a++)
		for (uint32_t k = 0; k < K; k++) {
			double q = d->s[a * K + k] - r[k];
			dev += q * q;
		}
	dev = sqrt(dev / ((double)d->n * K));
	printf("reference: mean of %zu A-scans; level %.6g, A-scans deviate by %.3g rms (%.2f %% "
	       "of the level); the mean's own noise is %.2f %% of that\n",
	       d->n, lvl, dev, lvl > 0 ? 100 * dev / lvl : 0.0, 100.0 / sqrt((double)d->n));
	if (!(lvl > 0)) {
		fprintf(stderr,
		        "volrec calibrate: %s: the spectrum is zero: no light reached the "
		        "detector\n",
		        d->path);
		return VR_EXIT_FAIL;
	}
	return VR_EXIT_OK;
}

/* --check: the recording loaded into chk, and how well the reference r (K values) matches
 * its mean spectrum's shape, said. */
static int ref_check(struct cal_ctx *x, const double *r, uint32_t K, struct cal_data *chk)
{
	double srr = 0, sdr = 0, sdd = 0, res = 0;
	int ret = load_input(x, x->o.check, 1, chk);

	if (ret)
		return ret;
	if (chk->K != K) {
		fprintf(stderr,
		        "volrec calibrate: --check %s: %u samples per A-scan, the reference has "
		        "%u\n",
		        chk->path, chk->K, K);
		return VR_EXIT_FAIL;
	}
	double *m = mean_spectrum(chk);
	if (!m)
		return VR_EXIT_FAIL;
	for (uint32_t k = 0; k < K; k++) {
		srr += r[k] * r[k];
		sdr += m[k] * r[k];
		sdd += m[k] * m[k];
	}
	if (!(sdd > 0)) {
		free(m);
		fprintf(stderr,
		        "volrec calibrate: --check %s: the spectrum is zero: no light reached the "
		        "detector\n",
		        chk->path);
		return VR_EXIT_FAIL;
	}
	const double alpha = sdr / srr;
	for (uint32_t k = 0; k < K; k++)
		res += (m[k] - alpha * r[k]) * (m[k] - alpha * r[k]);
	const double rel = sqrt(res / sdd), corr = sdr / sqrt(srr * sdd);
	free(m);
	printf("check against %s: the data's mean spectrum is %.4f x the reference, shape "
	       "differs by %.2f %% rms after that scaling (correlation %.6f)\n",
	       chk->path, alpha, 100 * rel, corr);
	if (rel > 0.02 || alpha < 0.8 || alpha > 1.25)
		printf("warning: the reference does not match the data's spectral shape "
		       "(%.2f %% rms, scale %.3f; good: below 2 %%, 0.8..1.25): "
		       "subtracted, it leaves lines near zero delay. Record the reference "
		       "in the same session and power as the data, or use background.mode "
		       "bscan_mean or partial_median\n",
		       100 * rel, alpha);
	else
		printf("confidence: the reference matches the data's spectral shape\n");
	return VR_EXIT_OK;
}

/* The energy near zero delay (the lowest 2 % of depths, DC excluded) before and after, said. */
static void ref_near_zero(const struct cal_engine *e, size_t n, const double *before,
                          const double *after, enum cfg_background was)
{
	double lb = 0, la = 0;
	uint32_t zz = e->nh / 50 > 2 ? e->nh / 50 : 2;

	for (size_t a = 0; a < n; a++)
		for (uint32_t z = 1; z <= zz; z++) {
			lb += before[a * e->nh + z] * before[a * e->nh + z];
			la += after[a * e->nh + z] * after[a * e->nh + z];
		}
	printf("near zero delay (depths 1..%u): %.1f dB with %s, %.1f dB with the reference\n", zz,
	       10 * log10(lb / n + 1e-300), cfg_background_name(was), 10 * log10(la / n + 1e-300));
}

/* Picture: the configured background (ascan_mean when it was none or the reference itself) |
 * the new reference r, on shown; the files are written once the backend has taken the
 * reference (it checks the table as volrecd does). */
static int ref_compare_write(struct cal_ctx *x, const struct cal_data *d,
                             const struct cal_data *shown, double *r)
{
	struct cal_engine e = {0};
	double *before = NULL, *after = NULL, sb, sa;
	char yaml[12288];
	struct vr_config base = x->cfg;
	int ret;

	base.preprocess.background.reference.data = NULL;
	ret = engine_open_bg(x, &base, shown, CFG_BG_NONE, CFG_BG_REFERENCE, CFG_BG_ASCAN_MEAN, &e);
	if (ret)
		goto out;
	const size_t na = shown->n * e.nh;
	before = malloc(na * sizeof(double));
	after = malloc(na * sizeof(double));
	if (!before || !after) {
		ret = VR_EXIT_FAIL;
		goto out;
	}
	ret = engine_run(&e, &e.cfg, before, &sb);
	struct vr_config v = e.cfg;
	v.preprocess.background.mode = CFG_BG_REFERENCE;
	set_table(&v.preprocess.background.reference, r, d->K, "reference.txt");
	if (!ret)
		ret = engine_run(&e, &v, after, &sa);
	if (!ret) {
		ref_near_zero(&e, shown->n, before, after, base.preprocess.background.mode);
		ret = write_file(x, "reference.txt", "volrec calibrate --reference: mean spectrum",
		                 r, d->K);
	}
	if (!ret) {
		snprintf(yaml, sizeof(yaml),
		         "# volrec calibrate --reference %s: mean of %zu A-scans\n"
		         "preprocess:\n"
		         "  background:\n"
		         "    mode: reference\n"
		         "    reference: reference.txt\n",
		         d->path, d->n);
		ret = write_file(x, "reference.yaml", yaml, NULL, 0);
	}
	if (!ret)
		ret = write_png(x, "reference.png", &e, before, after,
		                "volrec calibrate --reference: before | after");
out:
	cal_engine_close(&e);
	free(before);
	free(after);
	return ret;
}

static int op_reference(struct cal_ctx *x)
{
	struct cal_data d = {0}, chk = {0};
	double *r = NULL;
	int ret;

	ret = load_input(x, x->o.inputs[0], CAL_MIN_ASCANS_REF, &d);
	if (ret)
		return ret;
	r = mean_spectrum(&d);
	ret = r ? ref_stability(&d, r) : VR_EXIT_FAIL;
	/* the data the picture shows: --check's recording, else the reference recording */
	if (!ret && x->o.check)
		ret = ref_check(x, r, d.K, &chk);
	if (!ret)
		ret = ref_compare_write(x, &d, x->o.check ? &chk : &d, r);
	free(r);
	cal_data_free(&d);
	cal_data_free(&chk);
	return ret;
}

/* ---- --klin ------------------------------------------------------------------------------- */

struct fringe {
	uint32_t peak;               /* depth bin of the mirror (FFT of K) */
	double snr_db;               /* its height above the spectrum's median */
	double c[CAL_PHASE_DEG + 1]; /* phase theta(x), x = 2k/(K-1) - 1 */
	double resid; /* rms of the unwrapped phase about the fit, rad, where the fringe is */
	double *amp;  /* [K] fringe envelope */
};

/* The one-sided band of spectrum X around the peak at zp into a[K] (zero elsewhere): down to
 * 10 % of the peak on both sides, widened by a quarter (a wider band lets in more of the
 * spectrometer's fixed pattern, a narrower one cuts the fringe). */
static void fringe_band(const fftw_complex *X, const double *mag, uint32_t K, uint32_t zp,
                        uint32_t zmin, fftw_complex *a)
{
	const uint32_t half = K / 2;
	uint32_t lo = zp, hi = zp;

	while (lo > zmin / 2 && lo > 1 && mag[lo - 1] > 0.1 * mag[zp])
		lo--;
	while (hi + 1 < half && mag[hi + 1] > 0.1 * mag[zp])
		hi++;
	uint32_t pad = (hi - lo) / 4 + 2;
	lo = lo > pad + 1 ? lo - pad : 1;
	hi = hi + pad < half - 1 ? hi + pad : half - 1;
	memset(a, 0, K * sizeof(fftw_complex));
	for (uint32_t z = lo; z <= hi; z++) {
		a[z][0] = X[z][0];
		a[z][1] = X[z][1];
	}
}

/* The rms of the unwrapped phase ph about the fit f->c where the fringe is (its envelope above
 * 10 % of amax); infinite where it is nowhere. */
static double fringe_residual(const struct fringe *f, const double *ph, const double *xs,
                              uint32_t K, double amax)
{
	double s2 = 0;
	uint32_t ns = 0;

	for (uint32_t k = 0; k < K; k++)
		if (f->amp[k] > 0.1 * amax) {
			double q = ph[k] - cal_polyval(f->c, CAL_PHASE_DEG, xs[k]);
			s2 += q * q;
			ns++;
		}
	return ns ? sqrt(s2 / ns) : INFINITY;
}

/* The fringe of a mirror recording: mean spectrum, its FFT, the peak, the one-sided band
 * around it back-transformed (Hilbert transform), its phase unwrapped and fitted. */
static int fringe_measure(const struct cal_ctx *x, const struct cal_data *d, struct fringe *f)
{
	const uint32_t K = d->K, half = K / 2;
	const uint32_t zmin = x->o.zmin ? x->o.zmin : (K / 16 > 2 ? K / 16 : 2);
	double *m = fftw_alloc_real(K), *ph = malloc(K * sizeof(double));
	double *xs = malloc(K * sizeof(double)), *mag = malloc((half + 1) * sizeof(double));
	fftw_complex *X = fftw_alloc_complex(K), *a = fftw_alloc_complex(K);
	fftw_plan p1 = NULL, p2 = NULL;
	int ret = VR_EXIT_FAIL;

	f->amp = malloc(K * sizeof(double));
	if (!m || !ph || !xs || !mag || !X || !a || !f->amp)
		goto out;
	if (zmin + 4 >= half) {
		fprintf(stderr, "volrec calibrate: --zmin %u leaves no depth below %u\n", zmin,
		        half);
		goto out;
	}
	double mean = 0;
	for (uint32_t k = 0; k < K; k++) {
		m[k] = 0;
		for (size_t i = 0; i < d->n; i++)
			m[k] += d->s[i * K + k];
		m[k] /= (double)d->n;
		mean += m[k] / K;
	}
	for (uint32_t k = 0; k < K; k++)
		m[k] -= mean;
	p1 = fftw_plan_dft_r2c_1d((int)K, m, X, FFTW_ESTIMATE);
	p2 = fftw_plan_dft_1d((int)K, a, a, FFTW_BACKWARD, FFTW_ESTIMATE);
	if (!p1 || !p2)
		goto out;
	fftw_execute(p1);
	uint32_t zp = zmin;
	for (uint32_t z = 0; z <= half; z++)
		mag[z] = hypot(X[z][0], X[z][1]);
	for (uint32_t z = zmin; z < half - 1; z++)
		if (mag[z] > mag[zp])
			zp = z;
	/* the median of mag[zmin..half), taken in xs (free until the phase is fitted) */
	for (uint32_t z = zmin; z < half; z++)
		xs[z - zmin] = mag[z];
	double med = vr_percentile(xs, half - zmin, 50);
	f->peak = zp;
	f->snr_db = 20 * log10(mag[zp] / (med > 0 ? med : 1e-300));
	if (!(f->snr_db >= CAL_MIN_PEAK_DB)) {
		fprintf(stderr,
		        "volrec calibrate: %s: no reflector peak: the strongest depth (bin %u of "
		        "%u, searched from %u) stands only %.1f dB above the spectrum's median "
		        "(need %.0f dB): record a mirror, or lower --zmin if it sits closer to "
		        "zero delay\n",
		        d->path, zp, half, zmin, f->snr_db, CAL_MIN_PEAK_DB);
		goto out;
	}
	fringe_band(X, mag, K, zp, zmin, a);
	fftw_execute(p2);
	double amax = 0;
	for (uint32_t k = 0; k < K; k++) {
		f->amp[k] = hypot(a[k][0], a[k][1]);
		amax = f->amp[k] > amax ? f->amp[k] : amax;
		ph[k] = atan2(a[k][1], a[k][0]);
		if (k > 0) {
			double dd = ph[k] - ph[k - 1];
			ph[k] -= 2 * M_PI * round(dd / (2 * M_PI));
		}
		xs[k] = 2.0 * k / (K - 1) - 1;
	}
	/* the fit's weights |a|^2 go where the spectrum was (m, transformed already) */
	for (uint32_t k = 0; k < K; k++)
		m[k] = f->amp[k] * f->amp[k];
	if (cal_polyfit(xs, ph, m, K, CAL_PHASE_DEG, f->c) < 0) {
		fprintf(stderr, "volrec calibrate: %s: the fringe phase cannot be fitted\n",
		        d->path);
		goto out;
	}
	f->resid = fringe_residual(f, ph, xs, K, amax);
	printf("%s: mirror at depth bin %u of %u (FFT of %u samples), %.1f dB above the spectrum's "
	       "median; fringe phase %.1f rad over the spectrum, fit residual %.3f rad rms\n",
	       d->path, zp, half, K, f->snr_db,
	       cal_polyval(f->c, CAL_PHASE_DEG, 1) - cal_polyval(f->c, CAL_PHASE_DEG, -1),
	       f->resid);
	ret = VR_EXIT_OK;
out:
	if (p1)
		fftw_destroy_plan(p1);
	if (p2)
		fftw_destroy_plan(p2);
	fftw_free(m);
	fftw_free(X);
	fftw_free(a);
	free(ph);
	free(xs);
	free(mag);
	return ret;
}

/* Positions p[j] where the strictly increasing g (sampled at k = 0..K-1) takes K equally
 * spaced values from g(0) to g(K-1), by linear inversion. -EINVAL when g is not monotone. */
static int invert_linear(const double *g, uint32_t K, double *p)
{
	for (uint32_t k = 1; k < K; k++)
		if (!(g[k] > g[k - 1]))
			return -EINVAL;
	uint32_t i = 0;
	for (uint32_t j = 0; j < K; j++) {
		double t = g[0] + (g[K - 1] - g[0]) * j / (K - 1);
		while (i + 2 < K && g[i + 1] < t)
			i++;
		double q = i + (t - g[i]) / (g[i + 1] - g[i]);
		p[j] = q < 0 ? 0 : q > K - 1 ? K - 1 : q;
	}
	return 0;
}

/* The state of --klin: the mirror recordings, their fringes, and what is derived from them. */
struct klin {
	int nd; /* mirror depths: 1 or 2 */
	struct cal_data d[2];
	struct fringe fr[2];
	uint32_t K;
	double *pos;              /* [K] resampling positions */
	double *psi;              /* [K] two depths: dispersion phase on the linear-k grid */
	double coeffs[2];         /* two depths: [a2, a3] of the dispersion */
	double wb, wa;            /* point spread FWHM before and after, bins */
	enum cfg_resample method; /* the resampling method the table goes with */
	struct cal_engine e;
	double *before, *after;
};

/* Each mirror recording loaded and its fringe measured. */
static int klin_measure(struct cal_ctx *x, struct klin *k)
{
	for (int i = 0; i < k->nd; i++) {
		int ret = load_input(x, x->o.inputs[i], 8, &k->d[i]);
		if (ret)
			return ret;
		if (i == 1 && k->d[1].K != k->d[0].K) {
			fprintf(stderr, "volrec calibrate: %s has %u samples per A-scan, %s %u\n",
			        k->d[1].path, k->d[1].K, k->d[0].path, k->d[0].K);
			return VR_EXIT_FAIL;
		}
		ret = fringe_measure(x, &k->d[i], &k->fr[i]);
		if (ret)
			return ret;
	}
	k->K = k->d[0].K;
	return VR_EXIT_OK;
}

/* The resampling positions k->pos where the fringe phase (two depths: the difference of the
 * two) grows linearly. */
static int klin_positions(struct klin *k)
{
	const uint32_t K = k->K;
	const struct fringe *fr = k->fr;
	double *g = malloc(K * sizeof(double));
	int sign = 1, ret = VR_EXIT_FAIL;

	if (!g)
		return VR_EXIT_FAIL;
	if (k->nd == 2) {
		uint32_t sep =
		        fr[0].peak > fr[1].peak ? fr[0].peak - fr[1].peak : fr[1].peak - fr[0].peak;
		if (sep < 8) {
			fprintf(stderr,
			        "volrec calibrate: the two mirror positions are only %u bins apart "
			        "(bins %u and %u): need at least 8; move the mirror further\n",
			        sep, fr[0].peak, fr[1].peak);
			goto out;
		}
		sign = fr[1].peak > fr[0].peak ? 1 : -1;
	}
	for (uint32_t j = 0; j < K; j++) {
		double xk = 2.0 * j / (K - 1) - 1;
		g[j] = cal_polyval(fr[0].c, CAL_PHASE_DEG, xk);
		if (k->nd == 2)
			g[j] = sign * (cal_polyval(fr[1].c, CAL_PHASE_DEG, xk) - g[j]);
	}
	if (invert_linear(g, K, k->pos) < 0) {
		fprintf(stderr,
		        "volrec calibrate: the fringe phase%s is not monotone over the spectrum: "
		        "the mirror signal is too weak at the spectrum's edges or the recording "
		        "holds more than one reflector\n",
		        k->nd == 2 ? " difference" : "");
		goto out;
	}
	/* non-linearity: largest distance of the positions from the identity */
	double dmax = 0;
	for (uint32_t j = 0; j < K; j++)
		dmax = fmax(dmax, fabs(k->pos[j] - j));
	printf("k-linearization: positions deviate from the pixel grid by up to %.2f samples\n",
	       dmax);
	ret = VR_EXIT_OK;
out:
	free(g);
	return ret;
}

/* Two depths: the dispersion is the first mirror's phase on the linear-k grid minus its
 * linear part (k->psi); fitted by a2 v^2 + a3 v^3 on v = j/(K-1) - 0.5 (k->coeffs). */
static int klin_dispersion(struct klin *k)
{
	const uint32_t K = k->K;
	double *v = malloc(K * sizeof(double)), *w = malloc(K * sizeof(double));
	double cfit[4], dres = 0;
	int rc = -ENOMEM;

	if (!v || !w)
		goto out;
	for (uint32_t j = 0; j < K; j++) {
		double xk = 2.0 * k->pos[j] / (K - 1) - 1;
		k->psi[j] = cal_polyval(k->fr[0].c, CAL_PHASE_DEG, xk);
		v[j] = (double)j / (K - 1) - 0.5;
		uint32_t i = (uint32_t)k->pos[j];
		w[j] = k->fr[0].amp[i < K ? i : K - 1];
	}
	rc = cal_polyfit(v, k->psi, w, K, 3, cfit);
	if (rc < 0) {
		fprintf(stderr, "volrec calibrate: the dispersion phase cannot be fitted\n");
		goto out;
	}
	k->coeffs[0] = cfit[2];
	k->coeffs[1] = cfit[3];
	for (uint32_t j = 0; j < K; j++) {
		k->psi[j] -= cfit[0] + cfit[1] * v[j];
		double q = k->psi[j] - cfit[2] * v[j] * v[j] - cfit[3] * v[j] * v[j] * v[j];
		dres += q * q / K;
	}
	dres = sqrt(dres);
	printf("dispersion (from the two depths): [a2, a3] = [%.4f, %.4f] rad, the measured "
	       "phase departs from that cubic by %.3f rad rms\n",
	       k->coeffs[0], k->coeffs[1], dres);
out:
	free(v);
	free(w);
	return rc < 0 ? VR_EXIT_FAIL : VR_EXIT_OK;
}

/* Before | after on the (first) mirror recording: the point spread of both, said. */
static int klin_compare(struct cal_ctx *x, struct klin *k)
{
	struct vr_config base = x->cfg;
	double *prof = NULL;
	uint32_t pb, pa;
	int ret;

	if (base.preprocess.background.mode != CFG_BG_REFERENCE)
		base.preprocess.background.mode = CFG_BG_ASCAN_MEAN; /* the mirror is in every
		                                                        A-scan */
	ret = engine_open(x, &base, &k->d[0], &k->e);
	if (ret)
		return ret;
	const size_t na = k->d[0].n * k->e.nh;
	k->before = malloc(na * sizeof(double));
	k->after = malloc(na * sizeof(double));
	prof = malloc(k->e.nh * sizeof(double));
	ret = !k->before || !k->after || !prof ? VR_EXIT_FAIL : VR_EXIT_OK;
	if (!ret)
		ret = engine_run(&k->e, &k->e.cfg, k->before, NULL);
	struct vr_config v = k->e.cfg;
	if (v.preprocess.resample.method == CFG_RS_NONE)
		v.preprocess.resample.method = CFG_RS_CUBIC;
	v.preprocess.resample.positions = CFG_RSPOS_TABLE;
	set_table(&v.preprocess.resample.table, k->pos, k->K, "resample_table.txt");
	if (k->nd == 2) {
		v.preprocess.dispersion.kind = CFG_DISP_TABLE;
		set_table(&v.preprocess.dispersion.table, k->psi, k->K, "dispersion_table.txt");
	}
	k->method = v.preprocess.resample.method;
	if (!ret)
		ret = engine_run(&k->e, &v, k->after, NULL);
	if (ret)
		goto out;
	const uint32_t zlo = (x->o.zmin ? x->o.zmin : k->K / 16) * k->e.cfg.preprocess.zero_pad;
	mean_profile(k->before, k->d[0].n, k->e.nh, prof);
	k->wb = cal_fwhm(prof, k->e.nh, zlo, k->e.nh, &pb);
	mean_profile(k->after, k->d[0].n, k->e.nh, prof);
	k->wa = cal_fwhm(prof, k->e.nh, zlo, k->e.nh, &pa);
	printf("point spread (mirror, %s window, mean over A-scans): FWHM %.2f bins at bin %u "
	       "before, %.2f bins at bin %u after\n",
	       cfg_window_name(k->e.cfg.preprocess.window.type), k->wb, pb, k->wa, pa);
out:
	free(prof);
	return ret;
}

/* The confidence said; the tables, klin.yaml and klin.png written. */
static int klin_write(struct cal_ctx *x, const struct klin *k)
{
	const struct fringe *fr = k->fr;
	const bool two = k->nd == 2;
	char yaml[12288];
	int ret;

	printf("confidence: fringe %.1f dB above the median%s, phase fit residual %.3f rad rms%s; "
	       "the point spread narrows %.2f x\n",
	       two ? fmin(fr[0].snr_db, fr[1].snr_db) : fr[0].snr_db,
	       two ? " (weaker of the two)" : "", fmax(fr[0].resid, two ? fr[1].resid : 0),
	       two ? " (worse of the two)" : "", k->wa > 0 ? k->wb / k->wa : 0.0);
	ret = write_file(
	        x, "resample_table.txt",
	        "volrec calibrate --klin: resampling positions (preprocess.resample.table)", k->pos,
	        k->K);
	if (!ret && two)
		ret = write_file(x, "dispersion_table.txt",
		                 "volrec calibrate --klin: dispersion phase in radians, exp(-i "
		                 "phi) (preprocess.dispersion.table)",
		                 k->psi, k->K);
	if (ret)
		return ret;
	if (two)
		snprintf(yaml, sizeof(yaml),
		         "# volrec calibrate --klin %s %s: mirror at bins %u and %u; FWHM %.2f -> "
		         "%.2f bins\n"
		         "preprocess:\n"
		         "  resample:\n"
		         "    method: %s\n"
		         "    table: resample_table.txt\n"
		         "  dispersion:\n"
		         "    table: dispersion_table.txt\n"
		         "    # or, as a cubic: coeffs: [%.6g, %.6g]\n",
		         k->d[0].path, k->d[1].path, fr[0].peak, fr[1].peak, k->wb, k->wa,
		         cfg_resample_name(k->method), k->coeffs[0], k->coeffs[1]);
	else
		snprintf(yaml, sizeof(yaml),
		         "# volrec calibrate --klin %s: mirror at bin %u (one depth: dispersion "
		         "folded in); FWHM %.2f -> %.2f bins\n"
		         "preprocess:\n"
		         "  resample:\n"
		         "    method: %s\n"
		         "    table: resample_table.txt\n",
		         k->d[0].path, fr[0].peak, k->wb, k->wa, cfg_resample_name(k->method));
	ret = write_file(x, "klin.yaml", yaml, NULL, 0);
	if (!ret)
		ret = write_png(x, "klin.png", &k->e, k->before, k->after,
		                "volrec calibrate --klin: before | after");
	return ret;
}

static int op_klin(struct cal_ctx *x)
{
	struct klin k = {.nd = x->o.ninputs};
	int ret;

	ret = klin_measure(x, &k);
	if (ret)
		goto out;
	k.pos = malloc(k.K * sizeof(double));
	k.psi = malloc(k.K * sizeof(double));
	ret = k.pos && k.psi ? klin_positions(&k) : VR_EXIT_FAIL;
	if (ret)
		goto out;
	if (k.nd == 2)
		ret = klin_dispersion(&k);
	else
		printf("one depth: the dispersion is folded into the resampling (exact at bin %u "
		       "only); record the mirror at a second depth to separate them\n",
		       k.fr[0].peak);
	if (!ret)
		ret = klin_compare(x, &k);
	if (!ret)
		ret = klin_write(x, &k);
out:
	cal_engine_close(&k.e);
	for (int i = 0; i < 2; i++) {
		cal_data_free(&k.d[i]);
		free(k.fr[i].amp);
	}
	free(k.pos);
	free(k.psi);
	free(k.before);
	free(k.after);
	return ret;
}

/* ---- --orientation ------------------------------------------------------------------------ */

/* The state of --orientation: the recording, the polynomial in both pixel orders, and the
 * sharpness each gives. */
struct orient {
	struct cal_data d;
	struct cal_engine e;
	double l[4], r[4]; /* the polynomial as given; the same in the other pixel order */
	double *a1, *a2;   /* the amplitude pictures of the two orders */
	double s0, s[2];   /* sharpness: no resampling; as given, reversed (-1: unusable) */
	int rc;            /* the last failure of an order, when both failed */
	enum cfg_resample method;
};

/* The polynomial to orient (--wavelength-nm, else -c's) into o->l; VR_EXIT_USAGE without one. */
static int orient_polynomial(struct cal_ctx *x, struct orient *o)
{
	if (x->o.wl_set) {
		memcpy(o->l, x->o.wl, sizeof(o->l));
	} else if (x->have_cfg && x->cfg.preprocess.resample.positions == CFG_RSPOS_WAVELENGTH) {
		memcpy(o->l, x->cfg.preprocess.resample.wavelength_nm, sizeof(o->l));
	} else {
		fprintf(stderr,
		        "volrec calibrate: --orientation needs a wavelength polynomial: "
		        "preprocess.resample.wavelength_nm in -c FILE, or --wavelength-nm\n");
		return VR_EXIT_USAGE;
	}
	return VR_EXIT_OK;
}

/* The recording loaded, the polynomial checked over its K pixels and reversed into o->r. */
static int orient_load(struct cal_ctx *x, struct orient *o)
{
	char err[1024];
	const double *l = o->l;
	int ret = load_input(x, x->o.inputs[0], CAL_MIN_ASCANS_METRIC, &o->d);

	if (ret)
		return ret;
	/* --wavelength-nm by the rule of the configuration key, over the recording's K pixels
	 * (known once its header is read; the polynomial of -c passed that rule in cfg_load) */
	if (x->o.wl_set && cfg_wavelength_check(l, o->d.K, err, sizeof(err)) < 0) {
		fprintf(stderr, "volrec calibrate: --wavelength-nm %.10g,%.10g,%.10g,%.10g: %s\n",
		        l[0], l[1], l[2], l[3], err);
		return VR_EXIT_USAGE;
	}
	const double M = o->d.K - 1.0;
	/* the same polynomial in the other pixel order: lambda'(i) = lambda(M - i) */
	o->r[0] = l[0] + l[1] * M + l[2] * M * M + l[3] * M * M * M;
	o->r[1] = -l[1] - 2 * l[2] * M - 3 * l[3] * M * M;
	o->r[2] = l[2] + 3 * l[3] * M;
	o->r[3] = -l[3];
	return VR_EXIT_OK;
}

/* The sharpness without resampling and with the polynomial in either order. */
static int orient_measure(struct cal_ctx *x, struct orient *o)
{
	struct vr_config base = x->cfg;
	char err[1024];
	int ret;

	base.preprocess.resample.method = CFG_RS_NONE;
	base.preprocess.resample.positions = CFG_RSPOS_NONE;
	base.preprocess.resample.table.data = NULL;
	ret = engine_open_bg(x, &base, &o->d, CFG_BG_ASCAN_MEAN, CFG_BG_NONE, CFG_BG_BSCAN_MEAN,
	                     &o->e);
	if (ret)
		return ret;
	const size_t na = o->d.n * o->e.nh;
	o->a1 = malloc(na * sizeof(double));
	o->a2 = malloc(na * sizeof(double));
	if (!o->a1 || !o->a2)
		return VR_EXIT_FAIL;
	o->s[0] = o->s[1] = -1;
	ret = engine_run(&o->e, &o->e.cfg, NULL, &o->s0); /* no resampling: its sharpness only */
	if (ret)
		return ret;
	o->method = x->cfg.preprocess.resample.method != CFG_RS_NONE
	                    ? x->cfg.preprocess.resample.method
	                    : CFG_RS_CUBIC;
	for (int k = 0; k < 2; k++) {
		struct vr_config v = o->e.cfg;
		v.preprocess.resample.method = o->method;
		v.preprocess.resample.positions = CFG_RSPOS_WAVELENGTH;
		memcpy(v.preprocess.resample.wavelength_nm, k ? o->r : o->l, sizeof(o->l));
		o->rc = cal_engine_run(&o->e, &v, k ? o->a2 : o->a1, &o->s[k], err, sizeof(err));
		if (o->rc < 0) {
			printf("pixel order %s: not usable: %s\n", k ? "reversed" : "as given",
			       err);
			o->s[k] = -1;
		}
	}
	printf("sharpness (%s, depths %u..%u): no resampling %.6g, as given %.6g, reversed %.6g\n",
	       cfg_background_name(o->e.cfg.preprocess.background.mode), o->e.z0, o->e.z1, o->s0,
	       o->s[0], o->s[1]);
	if (o->s[0] < 0 && o->s[1] < 0) {
		fprintf(stderr,
		        "volrec calibrate: the polynomial is unusable in either pixel order\n");
		return o->rc == -EINVAL ? VR_EXIT_USAGE : VR_EXIT_FAIL;
	}
	return VR_EXIT_OK;
}

/* The sharper order, with the confidence said; orientation.yaml and orientation.png. */
static int orient_write(struct cal_ctx *x, const struct orient *o)
{
	const double *s = o->s;
	const int win = s[1] > s[0] ? 1 : 0;
	const double gain = s[1 - win] > 0 ? s[win] / s[1 - win] - 1 : INFINITY;
	const double *w = win ? o->r : o->l;
	char yaml[12288];
	int ret;

	printf("pixel order: %s (sharper by %.2f %% than %s; %+.2f %% against no resampling)\n",
	       win ? "reversed" : "as given", 100 * gain, win ? "as given" : "reversed",
	       100 * (s[win] / o->s0 - 1));
	if (gain < 0.005)
		printf("warning: low confidence: the two orders differ by less than 0.5 %%; the "
		       "data may hold too little structure\n");
	else
		printf("confidence: %.1f %% sharper\n", 100 * gain);
	if (s[win] < o->s0)
		printf("warning: even the better order is less sharp than no resampling: the "
		       "polynomial may not describe this spectrometer\n");
	snprintf(yaml, sizeof(yaml),
	         "# volrec calibrate --orientation %s: %s pixel order (sharpness %.6g vs %.6g)\n"
	         "preprocess:\n"
	         "  resample:\n"
	         "    method: %s\n"
	         "    wavelength_nm: [%.10g, %.10g, %.10g, %.10g]\n",
	         o->d.path, win ? "reversed" : "the given", s[win], s[1 - win],
	         cfg_resample_name(o->method), w[0], w[1], w[2], w[3]);
	ret = write_file(x, "orientation.yaml", yaml, NULL, 0);
	if (!ret)
		ret = write_png(x, "orientation.png", &o->e, win ? o->a1 : o->a2,
		                win ? o->a2 : o->a1,
		                "volrec calibrate --orientation: other order | chosen order");
	return ret;
}

static int op_orientation(struct cal_ctx *x)
{
	struct orient o = {0};
	int ret;

	ret = orient_polynomial(x, &o);
	if (ret)
		return ret;
	ret = orient_load(x, &o);
	if (!ret)
		ret = orient_measure(x, &o);
	if (!ret)
		ret = orient_write(x, &o);
	cal_engine_close(&o.e);
	free(o.a1);
	free(o.a2);
	cal_data_free(&o.d);
	return ret;
}

/* ---- --dispersion ------------------------------------------------------------------------- */

struct disp_search {
	struct cal_engine *e;
	struct vr_config v; /* coeffs or table variant */
	double *table;      /* [K] polynomial table (a2..a5) */
	unsigned evals;
	double smin, smax; /* over every evaluation */
};

/* Sharpness with phi = a2 v^2 + a3 v^3 + a4 v^4 + a5 v^5 (a table when a4 or a5 != 0). */
static int disp_eval(struct disp_search *s, const double c[4], double *out)
{
	const uint32_t K = s->e->d->K;
	struct vr_config *v = &s->v;

	if (c[2] == 0 && c[3] == 0) {
		v->preprocess.dispersion.kind = CFG_DISP_COEFFS;
		v->preprocess.dispersion.coeffs[0] = c[0];
		v->preprocess.dispersion.coeffs[1] = c[1];
	} else {
		disp_table(c, K, s->table);
		v->preprocess.dispersion.kind = CFG_DISP_TABLE;
		v->preprocess.dispersion.table.data = s->table;
		v->preprocess.dispersion.table.len = K;
	}
	int ret = engine_run(s->e, v, NULL, out);
	if (ret)
		return ret;
	if (!s->evals || *out < s->smin)
		s->smin = *out;
	if (!s->evals || *out > s->smax)
		s->smax = *out;
	s->evals++;
	return 0;
}

/* Grid over c[i0] and c[i1] (i1 < 0: one dimension), centred on c, half-width `half` in
 * `steps` steps each way; c and *best updated. */
static int disp_grid(struct disp_search *s, double c[4], int i0, int i1, double half, int steps,
                     double *best)
{
	double b[4];
	memcpy(b, c, sizeof(b));
	for (int p = -steps; p <= steps; p++)
		for (int q = (i1 < 0 ? 0 : -steps); q <= (i1 < 0 ? 0 : steps); q++) {
			double t[4];
			memcpy(t, c, sizeof(t));
			t[i0] += half * p / steps;
			if (i1 >= 0)
				t[i1] += half * q / steps;
			double m;
			int ret = disp_eval(s, t, &m);
			if (ret)
				return ret;
			if (m > *best) {
				*best = m;
				memcpy(b, t, sizeof(b));
			}
		}
	memcpy(c, b, sizeof(b));
	return 0;
}

/* [a2, a3] maximizing the sharpness into c[0..1] (c[2..3] 0), *best its sharpness: a coarse
 * 21 x 21 grid over [-R, R], then four refinements of 9 x 9 at a quarter of the step.
 * VR_EXIT_FAIL when the sharpness hardly changes (the data of path hold nothing to sharpen). */
static int disp_search_cubic(struct disp_search *s, const char *path, double R, double c[4],
                             double *best)
{
	double step = R / 10;
	int ret = disp_grid(s, c, 0, 1, R, 10, best);

	for (int r = 0; !ret && r < 4; r++) {
		ret = disp_grid(s, c, 0, 1, step, 4, best);
		step /= 4;
	}
	if (ret)
		return ret;
	const double spread = s->smax > 0 ? (s->smax - s->smin) / s->smax : 0;
	if (spread < 1e-3) {
		fprintf(stderr,
		        "volrec calibrate: %s: the sharpness changes by only %.3f %% over the "
		        "search: the data hold no structure whose sharpness depends on dispersion "
		        "(no reflector, or noise only); nothing written\n",
		        path, 100 * spread);
		return VR_EXIT_FAIL;
	}
	if (fabs(c[0]) >= R * 0.999 || fabs(c[1]) >= R * 0.999)
		printf("warning: the optimum lies at the edge of the search: run again with a "
		       "larger --range\n");
	return VR_EXIT_OK;
}

/* Around the cubic optimum c (sharpness best): the sensitivity, the metric 5 rad away in a2 and
 * in a3 (sa); the table alternative, 4th and 5th order terms each by a 1-D search (c5,
 * *best5). */
static int disp_search_table(struct disp_search *s, double R, const double c[4], double best,
                             double sa[2], double c5[4], double *best5)
{
	const double c3[4] = {c[0], c[1], 0, 0};
	int ret = 0;

	for (int i = 0; !ret && i < 2; i++) {
		double t[4];
		memcpy(t, c3, sizeof(t));
		t[i] += 5;
		ret = disp_eval(s, t, &sa[i]);
	}
	memcpy(c5, c3, sizeof(c3));
	*best5 = best;
	for (int r = 0; !ret && r < 2; r++) {
		ret = disp_grid(s, c5, 2, -1, R, 20, best5);
		if (!ret)
			ret = disp_grid(s, c5, 3, -1, R, 20, best5);
		if (!ret)
			ret = disp_grid(s, c5, 2, 3, R / 20, 4, best5);
	}
	return ret;
}

static int op_dispersion(struct cal_ctx *x)
{
	struct cal_data d = {0};
	struct cal_engine e = {0};
	struct disp_search s = {0};
	double *before = NULL, *after = NULL;
	char yaml[12288];
	int ret;

	ret = load_input(x, x->o.inputs[0], CAL_MIN_ASCANS_METRIC, &d);
	if (ret)
		return ret;
	struct vr_config base = x->cfg;
	ret = engine_open_bg(x, &base, &d, CFG_BG_ASCAN_MEAN, CFG_BG_NONE, CFG_BG_BSCAN_MEAN, &e);
	if (ret)
		goto out;
	ret = VR_EXIT_FAIL;
	const uint32_t K = d.K;
	const size_t na = d.n * e.nh;
	before = malloc(na * sizeof(double));
	after = malloc(na * sizeof(double));
	s.table = malloc(K * sizeof(double));
	if (!before || !after || !s.table)
		goto out;
	s.e = &e;
	s.v = e.cfg;
	double s_before;
	ret = engine_run(&e, &e.cfg, before, &s_before);
	if (ret)
		goto out;
	const char *had = e.cfg.preprocess.dispersion.kind == CFG_DISP_NONE    ? "none"
	                  : e.cfg.preprocess.dispersion.kind == CFG_DISP_TABLE ? "table"
	                                                                       : "coeffs";
	const double R = x->o.range > 0 ? x->o.range : 100;
	double c[4] = {0, 0, 0, 0}, best = -1, sa[2], c5[4], best5;
	ret = disp_search_cubic(&s, d.path, R, c, &best);
	if (!ret)
		ret = disp_search_table(&s, R, c, best, sa, c5, &best5);
	if (ret)
		goto out;
	const double s_coeffs = best;
	disp_table(c5, K, s.table);
	printf("sharpness (%s, depths %u..%u, %zu A-scans, %u evaluations): %.6g with the "
	       "configured dispersion (%s)\n",
	       cfg_background_name(e.cfg.preprocess.background.mode), e.z0, e.z1, d.n, s.evals,
	       s_before, had);
	printf("dispersion: [a2, a3] = [%.4f, %.4f] rad: sharpness %.6g (%+.2f %%); table with "
	       "[a4, a5] = [%.4f, %.4f]: %.6g (%+.2f %%)\n",
	       c[0], c[1], s_coeffs, 100 * (s_coeffs / s_before - 1), c5[2], c5[3], best5,
	       100 * (best5 / s_before - 1));
	printf("confidence: sharpness gain %.2f %%; the optimum is %s (5 rad off in a2: %+.2f %%, "
	       "in a3: %+.2f %%)\n",
	       100 * (s_coeffs / s_before - 1),
	       (sa[0] < s_coeffs * 0.999 || sa[1] < s_coeffs * 0.999) ? "distinct" : "flat",
	       100 * (sa[0] / s_coeffs - 1), 100 * (sa[1] / s_coeffs - 1));
	if (s_coeffs < s_before * 1.001)
		printf("warning: no gain over the configured dispersion (%s): it is already as "
		       "good as a cubic can be\n",
		       had);

	ret = write_file(x, "dispersion_table.txt",
	                 "volrec calibrate --dispersion: phase in radians, exp(-i phi), a2..a5 "
	                 "polynomial (preprocess.dispersion.table)",
	                 s.table, K);
	if (ret)
		goto out;
	snprintf(yaml, sizeof(yaml),
	         "# volrec calibrate --dispersion %s: sharpness %.6g -> %.6g (%+.2f %%)\n"
	         "# alternative: table: dispersion_table.txt (with a4 = %.6g, a5 = %.6g: %.6g)\n"
	         "preprocess:\n"
	         "  dispersion:\n"
	         "    coeffs: [%.6f, %.6f]\n",
	         d.path, s_before, s_coeffs, 100 * (s_coeffs / s_before - 1), c5[2], c5[3], best5,
	         c[0], c[1]);
	ret = write_file(x, "dispersion.yaml", yaml, NULL, 0);
	if (ret)
		goto out;
	struct vr_config v = e.cfg;
	v.preprocess.dispersion.kind = CFG_DISP_COEFFS;
	v.preprocess.dispersion.coeffs[0] = c[0];
	v.preprocess.dispersion.coeffs[1] = c[1];
	ret = engine_run(&e, &v, after, NULL);
	if (!ret)
		ret = write_png(x, "dispersion.png", &e, before, after,
		                "volrec calibrate --dispersion: before | after");
out:
	cal_engine_close(&e);
	free(before);
	free(after);
	free(s.table);
	cal_data_free(&d);
	return ret;
}

/* ---- the command -------------------------------------------------------------------------- */

static int (*const ops[])(struct cal_ctx *x) = {
        [OP_REFERENCE] = op_reference,
        [OP_KLIN] = op_klin,
        [OP_ORIENTATION] = op_orientation,
        [OP_DISPERSION] = op_dispersion,
};

VR_COMMAND(calibrate, "measure reference, k-linearization, orientation or dispersion from data")
{
	struct cal_ctx x;
	char err[CFG_ERR_MAX];
	struct stat sb;
	int ret;

	memset(&x, 0, sizeof(x));
	x.o.max_ascans = 4096;
	cfg_defaults(&x.cfg);
	ret = parse_opts(argc, argv, &x.o);
	if (ret)
		return ret < 0 ? VR_EXIT_OK : ret;
	if (x.o.config) {
		if (cfg_load(&x.cfg, x.o.config, err, sizeof(err)) < 0) {
			fprintf(stderr, "volrec calibrate: %s\n", err);
			return VR_EXIT_USAGE;
		}
		x.have_cfg = true;
	}
	snprintf(x.dir, sizeof(x.dir), "%s", x.o.outdir ? x.o.outdir : ".");
	if (stat(x.dir, &sb) < 0 || !S_ISDIR(sb.st_mode)) {
		fprintf(stderr, "volrec calibrate: -o %s: not a directory\n", x.dir);
		cfg_free(&x.cfg);
		return VR_EXIT_USAGE;
	}
	ret = out_finish(&x, ops[x.o.op](&x));
	cfg_free(&x.cfg);
	return ret;
}
