/* SPDX-License-Identifier: MIT */
/*
 * `volrec quality`: reconstruct a replay that has a ground truth (`volrec sim --truth`) in each
 * reconstruction mode through the pipeline engine, and score every mode and the current-epoch
 * baselines against the truth with PSNR and SSIM as docs/algorithms.md §3 defines them (the
 * output brought into the truth's amplitude unit; means over the planes of constant y, then
 * over the epochs from S on). Prints a table; --json writes the figures.
 */
#include <errno.h>
#include <getopt.h>
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <json-c/json.h>

#include "backend/tables.h"
#include "base/base.h"
#include "config/config.h"
#include "formats/h5attr.h"
#include "pipeline/pipeline.h"
#include "tools/fnscore.h"
#include "tools/process.h"

static const char quality_help[] =
        "usage: volrec quality -c FILE -t TRUTH.h5 [-n EPOCHS] [--skip N] [--json OUT]\n"
        "                      [--name NAME] [--backend cpu|cuda|auto]\n"
        "       volrec quality --functional FILE.h5 -c FILE -t TRUTH.h5 [--angio DSET]...\n"
        "                      [--doppler DSET] (volrec quality --functional x --help)\n"
        "\n"
        "Reconstruct the configured replay in every mode and score each against the\n"
        "ground truth of `volrec sim --truth`: PSNR (dB) and SSIM (7 x 7 window) in two\n"
        "units: the output brought into the truth's amplitude (the gain: the median over\n"
        "the sampled voxels), and the truth brought into the output's normalized dB\n"
        "image; per plane of constant y, means over the planes, then over the epochs\n"
        "from --skip on. Rows: the newest epoch alone (nearest sample, linear interpolation),\n"
        "noncumulative, cumulative, noncumulative with product combine and exp temporal\n"
        "weights (tau 3), adaptive (reconstruct.adaptive of the configuration),\n"
        "compensated (reconstruct.compensated of the configuration) and registered\n"
        "(reconstruct.adaptive of the configuration). The\n"
        "preprocessing (corrections, background, db_range) is the configuration's.\n"
        "\n"
        "  -c, --config FILE   configuration (YAML) whose source is the replay\n"
        "  -t, --truth FILE    its ground truth (HDF5 /truth f32 [n][Y][X][Z], amplitudes\n"
        "                      from 0 to 1, /offset; the settings volrec sim writes\n"
        "                      beside it must be the configuration's)\n"
        "  -n, --epochs N      epochs to score (default: all of the replay, which must\n"
        "                      be as many as the truth's)\n"
        "      --skip N        epochs left out of the means (default S = sx*sy)\n"
        "      --json FILE     also write the figures as JSON (- for stdout)\n"
        "      --name NAME     the scene's name in the table and the JSON\n"
        "      --backend NAME  override the configuration's backend (cpu, cuda, auto)\n"
        "  -h, --help          this text\n"
        "\n"
        "Exit status: 0 done, 1 failure while running, 2 usage or configuration error,\n"
        "or a truth that does not belong to the replay.\n";

static void quality_usage(FILE *f)
{
	fputs(quality_help, f);
}

/* ---- the metric (docs/algorithms.md §3, tests/reference/quality_ref.py) ------------------- */

#define Q_WIN        7       /* SSIM window */
#define Q_EPOCHS_MAX 1000000 /* -n and the truth's epochs, at most */

/* PSNR of two images of n values with data range 1 (inf when equal). */
static double q_psnr(const double *a, const double *t, size_t n)
{
	double s = 0.0;

	for (size_t i = 0; i < n; i++) {
		double d = a[i] - t[i];
		s += d * d;
	}
	return s > 0.0 ? 10.0 * log10((double)n / s) : INFINITY;
}

/* Integral image of f(a, t) over R x C into I[(R + 1) x (C + 1)]. */
static void q_integral(const double *a, const double *t, uint32_t R, uint32_t C, int what,
                       double *I)
{
	const size_t W = (size_t)C + 1;

	for (size_t j = 0; j < W; j++)
		I[j] = 0.0;
	for (uint32_t r = 0; r < R; r++) {
		double row = 0.0;
		I[(r + 1) * W] = 0.0;
		for (uint32_t c = 0; c < C; c++) {
			size_t i = (size_t)r * C + c;
			double v = what == 0   ? a[i]
			           : what == 1 ? t[i]
			           : what == 2 ? a[i] * a[i]
			           : what == 3 ? t[i] * t[i]
			                       : a[i] * t[i];
			row += v;
			I[(r + 1) * W + c + 1] = I[r * W + c + 1] + row;
		}
	}
}

/* SSIM (Wang et al. 2004) of two R x C images with data range 1: 7 x 7 uniform window, sample
 * covariance, valid region, K1 = 0.01, K2 = 0.03; scratch holds 5 (R + 1)(C + 1) doubles. */
static double q_ssim(const double *a, const double *t, uint32_t R, uint32_t C, double *scratch)
{
	const size_t W = (size_t)C + 1, plane = ((size_t)R + 1) * W;
	const double n = Q_WIN * Q_WIN, cn = n / (n - 1.0);
	const double c1 = 0.01 * 0.01, c2 = 0.03 * 0.03;
	double *I[5], sum = 0.0;

	for (int k = 0; k < 5; k++) {
		I[k] = scratch + (size_t)k * plane;
		q_integral(a, t, R, C, k, I[k]);
	}
	for (uint32_t r = 0; r + Q_WIN <= R; r++)
		for (uint32_t c = 0; c + Q_WIN <= C; c++) {
			double m[5];
			for (int k = 0; k < 5; k++) {
				const double *J = I[k];
				m[k] = (J[(r + Q_WIN) * W + c + Q_WIN] - J[r * W + c + Q_WIN] -
				        J[(r + Q_WIN) * W + c] + J[r * W + c]) /
				       n;
			}
			double ux = m[0], uy = m[1];
			double vx = cn * (m[2] - ux * ux), vy = cn * (m[3] - uy * uy);
			double vxy = cn * (m[4] - ux * uy);
			sum += (2 * ux * uy + c1) * (2 * vxy + c2) /
			       ((ux * ux + uy * uy + c1) * (vx + vy + c2));
		}
	return sum / ((double)(R - Q_WIN + 1) * (C - Q_WIN + 1));
}

/* ---- the runs ----------------------------------------------------------------------------- */

enum q_row {
	Q_NEAREST,
	Q_LINEAR,
	Q_NONCUM,
	Q_CUMUL,
	Q_PRODUCT,
	Q_ADAPTIVE,
	Q_COMPENSATED,
	Q_REGISTERED,
	Q_ROWS
};

/* Each row's name in the table and key in the JSON; the reconstruction rows' settings (the
 * baselines are scored in the noncumulative pass). */
static const struct {
	const char *name, *key;
	enum cfg_recon_mode mode;
	enum cfg_combine combine;
	enum cfg_temporal temporal;
} q_rows[Q_ROWS] = {
        [Q_NEAREST] = {"newest epoch, nearest", "current_nearest"},
        [Q_LINEAR] = {"newest epoch, linear", "current_linear"},
        [Q_NONCUM] = {"noncumulative", "noncumulative", CFG_RECON_NONCUMULATIVE},
        [Q_CUMUL] = {"cumulative", "cumulative", CFG_RECON_CUMULATIVE},
        [Q_PRODUCT] = {"product + exp tau=3", "product_exp_tau3", CFG_RECON_NONCUMULATIVE,
                       CFG_COMBINE_PRODUCT, CFG_TEMPORAL_EXP},
        [Q_ADAPTIVE] = {"adaptive", "adaptive", CFG_RECON_ADAPTIVE},
        [Q_COMPENSATED] = {"compensated", "compensated", CFG_RECON_COMPENSATED},
        [Q_REGISTERED] = {"registered", "registered", CFG_RECON_REGISTERED},
};

/* The two units a volume is compared in (docs/algorithms.md §3): the truth's image amplitude,
 * and the normalized dB image the output is published in. */
enum q_domain { Q_AMPLITUDE, Q_IMAGE, Q_DOMAINS };

struct q_score {
	unsigned n; /* epochs in the means */
	struct {
		double psnr_sum, ssim_sum;
		double *psnr, *ssim; /* [epochs] per epoch */
	} d[Q_DOMAINS];
};

struct q_ctx {
	uint32_t nx, ny, nz, sx, sy, X, Y;
	uint64_t n, skip, done;
	bool n_given;   /* -n given; else n is the truth's epochs, which must be the replay's */
	bool bad_input; /* the failure is the truth file's or the replay's (exit 2) */
	double lo, hi;
	/* the truth */
	const char *tpath;
	hid_t tf, tds, tspace;
	uint32_t (*toff)[2]; /* [n] offsets of the truth file */
	float *truth;        /* [Y][X][Z] of the epoch */
	float *truth_img;    /* [Y][X][Z] the truth as a normalized dB image (q_truth_image) */
	/* buffers the backend writes (be_host_alloc) */
	struct be_backend *be;
	uint8_t *vol;
	float *low, *full;
	/* pass 0: the gain samples; later passes: the scores */
	bool gain_pass;
	float *gs;
	size_t ngs, cap;
	double gain;
	int row; /* the reconstruction's row; with lowres also the two baselines */
	struct q_score *score;
	double *pa, *pt, *scratch; /* plane [X][Z] output and truth in double; SSIM scratch */
	float *cur;                /* [Y][X][Z] baseline volume */
};

static int q_truth_read(struct q_ctx *q, uint64_t e, char *err, size_t errlen)
{
	hsize_t start[4] = {e, 0, 0, 0}, count[4] = {1, q->Y, q->X, q->nz};
	hid_t mem = H5Screate_simple(4, count, NULL);
	int rc = 0;

	if (mem < 0 ||
	    H5Sselect_hyperslab(q->tspace, H5S_SELECT_SET, start, NULL, count, NULL) < 0 ||
	    H5Dread(q->tds, H5T_NATIVE_FLOAT, mem, q->tspace, H5P_DEFAULT, q->truth) < 0)
		rc = vr_err(err, errlen, -EIO, "%s: reading the truth of epoch %llu failed",
		            q->tpath, (unsigned long long)e);
	if (mem >= 0)
		H5Sclose(mem);
	/* an amplitude in [0, 1] (volrec sim --truth): anything else scores nonsense */
	const size_t vox = (size_t)q->Y * q->X * q->nz;
	for (size_t i = 0; rc == 0 && i < vox; i++)
		if (!(q->truth[i] >= 0.0f && q->truth[i] <= 1.0f)) {
			const size_t z = i % q->nz, x = i / q->nz % q->X, y = i / q->nz / q->X;
			q->bad_input = true;
			rc = vr_err(err, errlen, -EINVAL,
			            "%s: /truth[%llu][%zu][%zu][%zu] is %g: the truth is an "
			            "amplitude from 0 to 1",
			            q->tpath, (unsigned long long)e, y, x, z, (double)q->truth[i]);
		}
	return rc;
}

/* The output in the truth's unit: 10^((lo + v (hi - lo) - G) / 20) clipped to [0, 1], 0 where
 * v = 0. */
static double q_amplitude(const struct q_ctx *q, float v)
{
	if (!(v > 0.0f))
		return 0.0;
	double a = pow(10.0, (q->lo + (double)v * (q->hi - q->lo) - q->gain) / 20.0);
	return a > 1.0 ? 1.0 : a;
}

/* The truth in the output's unit, the normalized dB image: (20 log10 t + G - lo) / (hi - lo)
 * clipped to [0, 1], 0 where t = 0; into q->truth_img. */
static void q_truth_image(struct q_ctx *q)
{
	const size_t vox = (size_t)q->Y * q->X * q->nz;

	for (size_t k = 0; k < vox; k++) {
		double t = q->truth[k], v = 0.0;
		if (t > 0.0)
			v = (20.0 * log10(t) + q->gain - q->lo) / (q->hi - q->lo);
		q->truth_img[k] = (float)(v < 0.0 ? 0.0 : v > 1.0 ? 1.0 : v);
	}
}

/* Score the volume v [Y][X][Z] of epoch e (index i) into s, in both units. */
static void q_score_volume(struct q_ctx *q, const float *v, uint64_t i, struct q_score *s)
{
	const size_t plane = (size_t)q->X * q->nz;
	double p[Q_DOMAINS] = {0.0}, m[Q_DOMAINS] = {0.0};

	for (uint32_t y = 0; y < q->Y; y++) {
		const float *vy = v + y * plane;
		for (int d = 0; d < Q_DOMAINS; d++) {
			const float *ty = (d == Q_IMAGE ? q->truth_img : q->truth) + y * plane;
			for (size_t k = 0; k < plane; k++) {
				double a = vy[k] > 0.0f ? vy[k] : 0.0;
				q->pa[k] =
				        d == Q_IMAGE ? (a > 1.0 ? 1.0 : a) : q_amplitude(q, vy[k]);
				q->pt[k] = ty[k];
			}
			p[d] += q_psnr(q->pa, q->pt, plane);
			m[d] += q_ssim(q->pa, q->pt, q->X, q->nz, q->scratch);
		}
	}
	for (int d = 0; d < Q_DOMAINS; d++) {
		p[d] /= q->Y;
		m[d] /= q->Y;
		s->d[d].psnr[i] = p[d];
		s->d[d].ssim[i] = m[d];
		if (i >= q->skip) {
			s->d[d].psnr_sum += p[d];
			s->d[d].ssim_sum += m[d];
		}
	}
	if (i >= q->skip)
		s->n++;
}

/* The sample nearest to full-resolution position P on an axis of n samples at offset o, stride
 * s. */
static uint32_t q_nearest(uint32_t P, uint32_t o, uint32_t s, uint32_t n)
{
	double p = floor(((double)P - o) / s + 0.5);
	return p < 0 ? 0 : (p > n - 1 ? n - 1 : (uint32_t)p);
}

/* The newest epoch alone at full resolution (docs/algorithms.md §3): nearest sample, or the
 * bilinear interpolation C of §2b. */
static void q_current(struct q_ctx *q, uint32_t ox, uint32_t oy, bool linear)
{
	const uint32_t Z = q->nz;

	for (uint32_t Y = 0; Y < q->Y; Y++) {
		const uint32_t ys = q_nearest(Y, oy, q->sy, q->ny);
		uint32_t y0, y1;
		float ty;
		be_interp_axis(Y, oy, q->sy, q->ny, &y0, &y1, &ty);
		for (uint32_t X = 0; X < q->X; X++) {
			float *o = q->cur + ((size_t)Y * q->X + X) * Z;
			const uint32_t xs = q_nearest(X, ox, q->sx, q->nx);
			uint32_t x0, x1;
			float tx;
			be_interp_axis(X, ox, q->sx, q->nx, &x0, &x1, &tx);
			if (!linear) {
				memcpy(o, q->low + ((size_t)ys * q->nx + xs) * Z,
				       Z * sizeof(float));
				continue;
			}
			const float *c00 = q->low + ((size_t)y0 * q->nx + x0) * Z;
			const float *c01 = q->low + ((size_t)y0 * q->nx + x1) * Z;
			const float *c10 = q->low + ((size_t)y1 * q->nx + x0) * Z;
			const float *c11 = q->low + ((size_t)y1 * q->nx + x1) * Z;
			const float w00 = (1.0f - ty) * (1.0f - tx), w01 = (1.0f - ty) * tx;
			const float w10 = ty * (1.0f - tx), w11 = ty * tx;
			for (uint32_t z = 0; z < Z; z++)
				o[z] = w00 * c00[z] + w01 * c01[z] + w10 * c10[z] + w11 * c11[z];
		}
	}
}

static int q_begin(void *ctx, uint64_t epoch, struct be_output *out, char *err, size_t errlen)
{
	struct q_ctx *q = ctx;

	if (q->done >= q->n)
		return vr_err(err, errlen, -ENOSPC, "epoch %llu is one more than the %llu asked",
		              (unsigned long long)epoch, (unsigned long long)q->n);
	out->volume = q->vol;
	out->lowres = q->low;
	out->full = q->full;
	return 0;
}

static int q_publish(void *ctx, const struct pl_volume *v, char *err, size_t errlen)
{
	struct q_ctx *q = ctx;
	int rc;

	if (v->epoch >= q->n)
		return vr_err(err, errlen, -EINVAL, "epoch %llu is beyond the %llu scored",
		              (unsigned long long)v->epoch, (unsigned long long)q->n);
	if (v->ox != q->toff[v->epoch][0] || v->oy != q->toff[v->epoch][1]) {
		q->bad_input = true; /* exit 2, as every truth that does not belong to the replay */
		return vr_err(err, errlen, -EINVAL,
		              "%s: epoch %llu was scanned at offset (%u, %u), the truth's /offset "
		              "has (%u, %u) there: not the truth of this recording",
		              q->tpath, (unsigned long long)v->epoch, v->ox, v->oy,
		              q->toff[v->epoch][0], q->toff[v->epoch][1]);
	}
	rc = q_truth_read(q, v->epoch, err, errlen);
	if (rc < 0)
		return rc;
	if (q->gain_pass) {
		/* lowres dB - 20 log10(truth) where each sample lies, truth > 0.05, lowres > 0 */
		for (uint32_t y = 0; y < q->ny; y++)
			for (uint32_t x = 0; x < q->nx; x++) {
				const float *l = q->low + ((size_t)y * q->nx + x) * q->nz;
				const float *t = q->truth + (((size_t)y * q->sy + v->oy) * q->X +
				                             (size_t)x * q->sx + v->ox) *
				                                    q->nz;
				for (uint32_t z = 0; z < q->nz; z++) {
					if (!(t[z] > 0.05f) || !(l[z] > 0.0f))
						continue;
					if (q->ngs == q->cap) {
						size_t nc = q->cap ? 2 * q->cap : 65536;
						float *g = realloc(q->gs, nc * sizeof(float));
						if (!g)
							return vr_err(err, errlen, -ENOMEM,
							              "out of memory for the gain "
							              "samples");
						q->gs = g;
						q->cap = nc;
					}
					q->gs[q->ngs++] =
					        (float)((double)l[z] * (q->hi - q->lo) + q->lo -
					                20.0 * log10((double)t[z]));
				}
			}
		q->done++;
		return 0;
	}
	q_truth_image(q);
	q_score_volume(q, q->full, v->epoch, &q->score[q->row]);
	for (int lin = 0; q->low && lin < 2; lin++) {
		q_current(q, v->ox, v->oy, lin);
		q_score_volume(q, q->cur, v->epoch, &q->score[lin ? Q_LINEAR : Q_NEAREST]);
	}
	q->done++;
	return 0;
}

static void q_abort(void *ctx)
{
	/* the buffers are the sink's own */
}

static int cmp_float(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return (x > y) - (x < y);
}

static void print_event(void *ctx, const struct pl_event *ev)
{
	if (ev->level >= PL_NOTICE && (!ev->name || strcmp(ev->name, "source_ended")))
		fprintf(stderr, "volrec quality: %s\n", ev->message);
}

/* One pass of the pipeline over the replay with cfg (a mode of the table, or mode none for the
 * gain), into q. */
static int q_pass(struct q_ctx *q, const struct vr_config *cfg, bool lowres, char *err,
                  size_t errlen)
{
	struct pl_options po = {.cfg = cfg,
	                        .src_flags = SRC_UNPACED | SRC_NO_LOOP,
	                        .block = true,
	                        .stop_on_fault = true,
	                        .zero_copy = -1,
	                        .on_event = print_event};
	struct pl_pipeline *pl = NULL;
	struct pl_sink sink = {.ctx = q, .begin = q_begin, .publish = q_publish, .abort = q_abort};
	const size_t nlow = (size_t)q->ny * q->nx * q->nz;
	int rc;

	rc = pl_options_from_env(&po, err, errlen);
	if (rc == 0)
		rc = pl_open(&po, &pl, err, errlen);
	if (rc < 0)
		return rc;
	if (!q->n_given && pl_source_epochs(pl) && q->n != pl_source_epochs(pl)) {
		q->bad_input = true;
		rc = vr_err(
		        err, errlen, -EINVAL,
		        "%s holds %llu epochs, the replay %llu (-n N scores the first N of both)",
		        q->tpath, (unsigned long long)q->n,
		        (unsigned long long)pl_source_epochs(pl));
		goto out;
	}
	if (pl_source_epochs(pl) && q->n > pl_source_epochs(pl)) {
		q->bad_input = true;
		rc = vr_err(err, errlen, -EINVAL, "-n %llu: the replay holds %llu epochs",
		            (unsigned long long)q->n, (unsigned long long)pl_source_epochs(pl));
		goto out;
	}
	q->be = pl_backend(pl);
	q->done = 0;
	q->low = q->full = NULL;
	q->vol = NULL;
	rc = be_host_alloc(q->be, cfg_out_voxels(cfg), (void **)&q->vol);
	if (rc == 0 && lowres)
		rc = be_host_alloc(q->be, nlow * sizeof(float), (void **)&q->low);
	if (rc == 0 && cfg->reconstruct.mode != CFG_RECON_NONE)
		rc = be_host_alloc(q->be, cfg_out_voxels(cfg) * sizeof(float), (void **)&q->full);
	if (rc < 0) {
		vr_err(err, errlen, rc, "out of memory for the output buffers");
		goto out_free;
	}
	rc = pl_run(pl, &sink, q->n, err, errlen);
	if (rc == 0 && q->done < q->n)
		rc = vr_err(err, errlen, -EIO, "the source ended after %llu of %llu epochs",
		            (unsigned long long)q->done, (unsigned long long)q->n);
out_free:
	be_host_free(q->be, q->vol);
	be_host_free(q->be, q->low);
	be_host_free(q->be, q->full);
	q->vol = NULL;
	q->low = q->full = NULL;
out:
	pl_close(pl);
	return rc;
}

/* Attribute name of the truth dataset, n values read as type into v: 1, 0 where the file has
 * none (a truth not written by volrec sim), -1 where it has another shape or type class. */
static int q_truth_attr(hid_t ds, const char *name, hid_t type, hsize_t n, void *v)
{
	if (H5Aexists(ds, name) <= 0)
		return 0;
	hid_t a = H5Aopen(ds, name, H5P_DEFAULT), sp = a < 0 ? -1 : H5Aget_space(a);
	hid_t t = a < 0 ? -1 : H5Aget_type(a);
	hssize_t np = sp < 0 ? -1 : H5Sget_simple_extent_npoints(sp);
	int rc = np == (hssize_t)(n ? n : 1) && H5Tget_class(t) == H5Tget_class(type) &&
	                         H5Aread(a, type, v) >= 0
	                 ? 1
	                 : -1;
	VR_H5_CLOSE(t, sp, a);
	return rc;
}

/* The settings volrec sim wrote beside the truth (the geometry and the preprocessing that shape
 * the volumes it belongs to) against the configuration: 0, or -EINVAL naming the first that
 * differs. A truth without them is taken as it is. */
static int q_truth_settings(struct q_ctx *q, const struct vr_config *cfg, char *err, size_t errlen)
{
	const uint32_t geo[3] = {cfg->geometry.samples_per_ascan, cfg->geometry.ascans_per_bscan,
	                         cfg->geometry.bscans_per_volume};
	const struct {
		const char *name, *key;
		const uint32_t *want;
		hsize_t n;
	} u32[] = {
	        {"samples_ascans_bscans", "geometry", geo, 3},
	        {"stride", "geometry.stride", cfg->geometry.stride, 2},
	        {"depth_range", "geometry.depth_range", cfg->geometry.depth_range, 2},
	        {"zero_pad", "preprocess.zero_pad", &cfg->preprocess.zero_pad, 1},
	};
	for (size_t i = 0; i < VR_ARRAY_SIZE(u32); i++) {
		uint32_t got[3] = {0};
		int r = q_truth_attr(q->tds, u32[i].name, H5T_NATIVE_UINT32, u32[i].n, got);
		if (r < 0)
			return vr_err(err, errlen, -EINVAL,
			              "%s: /truth attribute %s is not %llu unsigned integer(s)",
			              q->tpath, u32[i].name, (unsigned long long)u32[i].n);
		if (r && memcmp(got, u32[i].want, u32[i].n * sizeof(uint32_t))) {
			char g[48] = "", w[48] = "";
			for (hsize_t k = 0; k < u32[i].n; k++) {
				snprintf(g + strlen(g), sizeof(g) - strlen(g), "%s%u",
				         k ? ", " : "", got[k]);
				snprintf(w + strlen(w), sizeof(w) - strlen(w), "%s%u",
				         k ? ", " : "", u32[i].want[k]);
			}
			return vr_err(err, errlen, -EINVAL,
			              "%s: /truth was made with %s [%s], the configuration's %s is "
			              "[%s]: not the truth of this recording",
			              q->tpath, u32[i].name, g, u32[i].key, w);
		}
	}
	double param = 0;
	int r = q_truth_attr(q->tds, "window_param", H5T_NATIVE_DOUBLE, 0, &param);
	if (r < 0 || (r && param != cfg->preprocess.window.param))
		return vr_err(err, errlen, -EINVAL,
		              "%s: /truth was made with window_param %g, the configuration's "
		              "preprocess.window.param is %g",
		              q->tpath, param, cfg->preprocess.window.param);
	if (H5Aexists(q->tds, "window") > 0) {
		hid_t a = H5Aopen(q->tds, "window", H5P_DEFAULT), t = a < 0 ? -1 : H5Aget_type(a);
		char w[32] = "";
		/* a fixed-length string (vr_h5_attr_str), read as the file stores it */
		r = t >= 0 && H5Tget_class(t) == H5T_STRING && H5Tis_variable_str(t) == 0 &&
		    H5Tget_size(t) < sizeof(w) && H5Aread(a, t, w) >= 0;
		VR_H5_CLOSE(t, a);
		w[sizeof(w) - 1] = '\0';
		const char *want = cfg_window_name(cfg->preprocess.window.type);
		if (!r || strcmp(w, want))
			return vr_err(err, errlen, -EINVAL,
			              "%s: /truth was made with window '%s', the configuration's "
			              "preprocess.window.type is '%s'",
			              q->tpath, r ? w : "(unreadable)", want);
	}
	return 0;
}

/* Open the truth file and check it against the configuration's geometry. */
static int q_truth_open(struct q_ctx *q, const struct vr_config *cfg, const char *path, char *err,
                        size_t errlen)
{
	hsize_t d[4];
	hid_t od = -1, os = -1, ty;
	int rc = 0;

	q->tpath = path;
	H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* the messages below say what is wrong */
	q->tf = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
	if (q->tf < 0)
		return vr_err(err, errlen, -ENOENT, "%s: cannot open as HDF5 (%s)", path,
		              access(path, R_OK) ? strerror(errno) : "not an HDF5 file");
	q->tds = H5Dopen2(q->tf, "truth", H5P_DEFAULT);
	q->tspace = q->tds < 0 ? -1 : H5Dget_space(q->tds);
	if (q->tspace < 0 || H5Sget_simple_extent_ndims(q->tspace) != 4 ||
	    H5Sget_simple_extent_dims(q->tspace, d, NULL) < 0)
		return vr_err(err, errlen, -EINVAL, "%s: no dataset /truth [n][Y][X][Z]", path);
	ty = H5Dget_type(q->tds);
	const bool is_float = H5Tget_class(ty) == H5T_FLOAT;
	H5Tclose(ty);
	if (!is_float)
		return vr_err(err, errlen, -EINVAL,
		              "%s: /truth is not floating point (an amplitude from 0 to 1)", path);
	if (d[1] != q->Y || d[2] != q->X || d[3] != q->nz)
		return vr_err(err, errlen, -EINVAL,
		              "%s: /truth is [%llu][%llu][%llu][%llu], the configuration's volumes "
		              "[%u][%u][%u]",
		              path, (unsigned long long)d[0], (unsigned long long)d[1],
		              (unsigned long long)d[2], (unsigned long long)d[3], q->Y, q->X,
		              q->nz);
	if (d[0] == 0)
		return vr_err(err, errlen, -EINVAL, "%s: /truth holds no epochs", path);
	if (d[0] > Q_EPOCHS_MAX)
		return vr_err(err, errlen, -EINVAL, "%s: /truth holds %llu epochs, more than %d",
		              path, (unsigned long long)d[0], Q_EPOCHS_MAX);
	rc = q_truth_settings(q, cfg, err, errlen);
	if (rc < 0)
		return rc;
	q->n_given = q->n != 0;
	if (q->n == 0)
		q->n = d[0];
	if (q->n > d[0])
		return vr_err(err, errlen, -EINVAL, "-n %llu: %s holds %llu epochs",
		              (unsigned long long)q->n, path, (unsigned long long)d[0]);
	q->toff = calloc(d[0], sizeof(*q->toff));
	if (!q->toff)
		return vr_err(err, errlen, -ENOMEM, "out of memory");
	od = H5Dopen2(q->tf, "offset", H5P_DEFAULT);
	os = od < 0 ? -1 : H5Dget_space(od);
	hsize_t od2[2];
	if (os < 0 || H5Sget_simple_extent_ndims(os) != 2 ||
	    H5Sget_simple_extent_dims(os, od2, NULL) < 0 || od2[0] != d[0] || od2[1] != 2 ||
	    H5Dread(od, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, q->toff) < 0)
		rc = vr_err(err, errlen, -EINVAL, "%s: no dataset /offset u32 [%llu][2]", path,
		            (unsigned long long)d[0]);
	VR_H5_CLOSE(os, od);
	return rc;
}

static struct json_object *q_num(double v)
{
	return isfinite(v) ? json_object_new_double(v) : json_object_new_null();
}

/* A JSON array of n values, integers or doubles. */
static struct json_object *q_array(const double *v, size_t n, bool integers)
{
	struct json_object *a = json_object_new_array();

	for (size_t i = 0; i < n; i++)
		json_object_array_add(a, integers ? json_object_new_int64((int64_t)v[i])
		                                  : json_object_new_double(v[i]));
	return a;
}

/* {"psnr_db", "ssim", "psnr_db_per_epoch", "ssim_per_epoch"} of one row in unit d. */
static struct json_object *q_json_scores(const struct q_score *s, enum q_domain d, uint64_t n)
{
	struct json_object *m = json_object_new_object();
	struct json_object *pe = json_object_new_array(), *se = json_object_new_array();

	json_object_object_add(m, "psnr_db", q_num(s->d[d].psnr_sum / s->n));
	json_object_object_add(m, "ssim", q_num(s->d[d].ssim_sum / s->n));
	for (uint64_t e = 0; e < n; e++) {
		json_object_array_add(pe, q_num(s->d[d].psnr[e]));
		json_object_array_add(se, q_num(s->d[d].ssim[e]));
	}
	json_object_object_add(m, "psnr_db_per_epoch", pe);
	json_object_object_add(m, "ssim_per_epoch", se);
	return m;
}

/* What the command line asks for. */
struct q_opts {
	const char *cfg_path, *truth_path, *json_path, *backend, *name;
	uint64_t n_arg, skip_arg; /* skip_arg UINT64_MAX: --skip not given */
};

/* -1 when the options are read into o, else the exit status. */
static int q_parse_args(int argc, char **argv, struct q_opts *o)
{
	static const struct option longopts[] = {
	        {"config", required_argument, NULL, 'c'},  {"truth", required_argument, NULL, 't'},
	        {"epochs", required_argument, NULL, 'n'},  {"skip", required_argument, NULL, 's'},
	        {"json", required_argument, NULL, 'j'},    {"name", required_argument, NULL, 'N'},
	        {"backend", required_argument, NULL, 'B'}, VR_CLI_LONGOPTS_END,
	};
	const struct vr_cli_str strs[] = {{'c', &o->cfg_path},
	                                  {'t', &o->truth_path},
	                                  {'j', &o->json_path},
	                                  {'N', &o->name},
	                                  {'B', &o->backend}};
	int c;

	optind = 1;
	while ((c = VR_CLI_GETOPT(argc, argv, "c:t:n:h", longopts, strs)) != -1) {
		switch (c) {
		case 'n':
			if (vr_cli_u64("volrec quality", "-n", optarg, 1, Q_EPOCHS_MAX,
			               "1..1000000 epochs", &o->n_arg))
				return VR_EXIT_USAGE;
			break;
		case 's':
			if (vr_cli_u64("volrec quality", "--skip", optarg, 0, 1000000,
			               "0..1000000 epochs", &o->skip_arg))
				return VR_EXIT_USAGE;
			break;
		default:
			return vr_cli_usage(quality_usage, c);
		}
	}
	if (vr_command_required("quality", o->cfg_path && o->truth_path,
	                        "-c FILE and -t TRUTH.h5 are required", argc, quality_usage))
		return VR_EXIT_USAGE;
	return -1;
}

/* The loaded configuration checked for scoring and its geometry in q; -1 when done, else
 * the exit status. */
static int q_setup(struct q_ctx *q, struct vr_config *cfg, const struct q_opts *o)
{
	if (o->backend) {
		int b = proc_backend_arg("quality", o->backend);
		if (b < 0)
			return VR_EXIT_USAGE;
		cfg->backend = (enum cfg_backend)b;
	}
	if (cfg->source.type != CFG_SOURCE_REPLAY) {
		fprintf(stderr,
		        "volrec quality: %s: source.type must be replay (the recording the truth "
		        "belongs to)\n",
		        o->cfg_path);
		return VR_EXIT_USAGE;
	}
	q->nx = cfg->geometry.ascans_per_bscan;
	q->ny = cfg->geometry.bscans_per_volume;
	q->nz = cfg_nz(cfg);
	q->sx = cfg->geometry.stride[0];
	q->sy = cfg->geometry.stride[1];
	q->X = q->nx * q->sx;
	q->Y = q->ny * q->sy;
	q->lo = cfg->preprocess.db_range[0];
	q->hi = cfg->preprocess.db_range[1];
	q->n = o->n_arg;
	q->skip = o->skip_arg != UINT64_MAX ? o->skip_arg : cfg_stride_area(cfg);
	if (q->X < Q_WIN || q->nz < Q_WIN) {
		fprintf(stderr,
		        "volrec quality: volumes of %u x %u x %u: SSIM needs X and Z of at least "
		        "%d\n",
		        q->Y, q->X, q->nz, Q_WIN);
		return VR_EXIT_USAGE;
	}
	return -1;
}

/* The volumes, planes and per-epoch scores of a run; *per_epoch holds every score's
 * per-epoch values in one block. */
static int q_alloc(struct q_ctx *q, struct q_score *score, double **per_epoch)
{
	const size_t vox = (size_t)q->Y * q->X * q->nz, plane = (size_t)q->X * q->nz;

	q->truth = malloc(vox * sizeof(float));
	q->truth_img = malloc(vox * sizeof(float));
	q->cur = malloc(vox * sizeof(float));
	q->pa = malloc(plane * sizeof(double));
	q->pt = malloc(plane * sizeof(double));
	q->scratch = malloc(5 * ((size_t)q->X + 1) * (q->nz + 1) * sizeof(double));
	*per_epoch = malloc((size_t)Q_ROWS * Q_DOMAINS * 2 * q->n * sizeof(double));
	for (int r = 0; *per_epoch && r < Q_ROWS; r++)
		for (int d = 0; d < Q_DOMAINS; d++) {
			score[r].d[d].psnr = *per_epoch + ((size_t)r * Q_DOMAINS + d) * 2 * q->n;
			score[r].d[d].ssim = score[r].d[d].psnr + q->n;
		}
	if (!q->truth || !q->truth_img || !q->cur || !q->pa || !q->pt || !q->scratch ||
	    !*per_epoch) {
		fprintf(stderr, "volrec quality: out of memory for %u x %u x %u volumes\n", q->Y,
		        q->X, q->nz);
		return -ENOMEM;
	}
	q->score = score;
	return 0;
}

/* Pass 0: the system gain G, the median over the low-resolution volumes (mode none); -1
 * when done, else the exit status. */
static int q_gain_pass(struct q_ctx *q, const struct vr_config *cfg, struct vr_config *run,
                       char *err, size_t errlen)
{
	if (cfg_copy(run, cfg) < 0) {
		fprintf(stderr, "volrec quality: out of memory\n");
		return VR_EXIT_FAIL;
	}
	run->reconstruct.mode = CFG_RECON_NONE;
	q->gain_pass = true;
	if (q_pass(q, run, true, err, errlen) < 0) {
		fprintf(stderr, "volrec quality: %s\n", err);
		return q->bad_input ? VR_EXIT_USAGE : VR_EXIT_FAIL;
	}
	if (q->ngs == 0) {
		fprintf(stderr, "volrec quality: no sample where the truth exceeds 0.05 and the "
		                "output is above the dB range's floor: no gain to calibrate\n");
		return VR_EXIT_FAIL;
	}
	qsort(q->gs, q->ngs, sizeof(float), cmp_float);
	q->gain = q->ngs % 2 ? q->gs[q->ngs / 2]
	                     : 0.5 * ((double)q->gs[q->ngs / 2 - 1] + (double)q->gs[q->ngs / 2]);
	q->gain_pass = false;
	return -1;
}

/* One pass per reconstruction row; the noncumulative one also scores the baselines. -1
 * when done, else the exit status. */
static int q_row_passes(struct q_ctx *q, const struct vr_config *cfg, struct vr_config *run,
                        char *err, size_t errlen)
{
	for (int r = Q_NONCUM; r < Q_ROWS; r++) {
		cfg_free(run);
		if (cfg_copy(run, cfg) < 0) {
			fprintf(stderr, "volrec quality: out of memory\n");
			return VR_EXIT_FAIL;
		}
		run->reconstruct.mode = q_rows[r].mode;
		run->reconstruct.combine = q_rows[r].combine;
		run->reconstruct.temporal = q_rows[r].temporal;
		if (r == Q_PRODUCT)
			run->reconstruct.tau = 3.0;
		q->row = r;
		if (q_pass(q, run, r == Q_NONCUM, err, errlen) < 0) {
			fprintf(stderr, "volrec quality: %s: %s\n", q_rows[r].name, err);
			return q->bad_input ? VR_EXIT_USAGE : VR_EXIT_FAIL;
		}
	}
	return -1;
}

static void q_print_table(const struct q_ctx *q, const struct q_score *score, const char *name)
{
	printf("volrec quality%s%s: %llu epochs of %u x %u x %u (stride %ux%u), means over epochs "
	       "%llu..%llu, gain %.3f dB, dB range [%g, %g]\n",
	       name ? " " : "", name ? name : "", (unsigned long long)q->n, q->Y, q->X, q->nz,
	       q->sx, q->sy, (unsigned long long)q->skip, (unsigned long long)q->n - 1, q->gain,
	       q->lo, q->hi);
	printf("%-24s %17s   %17s\n", "", "amplitude", "dB image");
	printf("%-24s %9s %7s   %9s %7s\n", "mode", "PSNR dB", "SSIM", "PSNR dB", "SSIM");
	for (int r = 0; r < Q_ROWS; r++)
		printf("%-24s %9.2f %7.3f   %9.2f %7.3f\n", q_rows[r].name,
		       score[r].d[Q_AMPLITUDE].psnr_sum / score[r].n,
		       score[r].d[Q_AMPLITUDE].ssim_sum / score[r].n,
		       score[r].d[Q_IMAGE].psnr_sum / score[r].n,
		       score[r].d[Q_IMAGE].ssim_sum / score[r].n);
}

/* The scores as JSON to o->json_path ("-": standard output). */
static int q_write_json(const struct q_ctx *q, const struct vr_config *cfg,
                        const struct q_score *score, const struct q_opts *opt)
{
	struct json_object *o = json_object_new_object(), *modes = json_object_new_object();

	if (opt->name)
		json_object_object_add(o, "name", json_object_new_string(opt->name));
	json_object_object_add(o, "truth", json_object_new_string(opt->truth_path));
	json_object_object_add(o, "epochs", json_object_new_int64((int64_t)q->n));
	json_object_object_add(o, "first_scored_epoch", json_object_new_int64((int64_t)q->skip));
	const double shape[] = {q->Y, q->X, q->nz}, stride[] = {q->sx, q->sy};
	const double dbr[] = {q->lo, q->hi};
	json_object_object_add(o, "volume_shape", q_array(shape, 3, true));
	json_object_object_add(o, "stride", q_array(stride, 2, true));
	json_object_object_add(o, "db_range", q_array(dbr, 2, false));
	json_object_object_add(o, "gain_db", json_object_new_double(q->gain));
	json_object_object_add(o, "adaptive_tolerance",
	                       json_object_new_double(cfg->reconstruct.adaptive.tolerance));
	json_object_object_add(o, "adaptive_depth_half_window",
	                       json_object_new_int64(cfg->reconstruct.adaptive.depth_half_window));
	json_object_object_add(o, "adaptive_speckle_tolerance",
	                       json_object_new_double(cfg->reconstruct.adaptive.speckle_tolerance));
	for (int r = 0; r < Q_ROWS; r++) {
		struct json_object *m = q_json_scores(&score[r], Q_AMPLITUDE, q->n);
		json_object_object_add(m, "image", q_json_scores(&score[r], Q_IMAGE, q->n));
		json_object_object_add(modes, q_rows[r].key, m);
	}
	json_object_object_add(o, "modes", modes);
	const char *text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
	FILE *f = strcmp(opt->json_path, "-") ? fopen(opt->json_path, "w") : stdout;
	bool ok = f && fprintf(f, "%s\n", text) >= 0;
	if (f && f != stdout && fclose(f))
		ok = false;
	json_object_put(o);
	if (!ok) {
		fprintf(stderr, "volrec quality: %s: writing failed\n", opt->json_path);
		return -EIO;
	}
	return 0;
}

VR_COMMAND(quality, "score every reconstruction mode against a simulator's ground truth")
{
	struct q_opts o = {.skip_arg = UINT64_MAX};
	struct vr_config cfg, run;
	struct q_ctx q = {.tf = -1, .tds = -1, .tspace = -1};
	struct q_score score[Q_ROWS] = {0};
	double *per_epoch = NULL; /* psnr and ssim of every score, one block */
	char err[CFG_ERR_MAX] = "";
	int rc, ret = VR_EXIT_FAIL;

	for (int i = 1; i < argc; i++) /* angiography and Doppler against the flow phantom */
		if (!strcmp(argv[i], "--functional") || !strncmp(argv[i], "--functional=", 13))
			return fn_quality_main(argc, argv);
	cfg_defaults(&cfg);
	cfg_defaults(&run);
	rc = q_parse_args(argc, argv, &o);
	if (rc >= 0)
		return rc;
	if (cfg_load(&cfg, o.cfg_path, err, sizeof(err)) < 0) {
		fprintf(stderr, "volrec quality: %s\n", err);
		return VR_EXIT_USAGE;
	}
	rc = q_setup(&q, &cfg, &o);
	if (rc >= 0) {
		ret = rc;
		goto out;
	}
	rc = q_truth_open(&q, &cfg, o.truth_path, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "volrec quality: %s\n", err);
		ret = VR_EXIT_USAGE;
		goto out;
	}
	if (q.skip >= q.n) {
		fprintf(stderr, "volrec quality: --skip %llu leaves none of the %llu epochs\n",
		        (unsigned long long)q.skip, (unsigned long long)q.n);
		ret = VR_EXIT_USAGE;
		goto out;
	}
	if (q_alloc(&q, score, &per_epoch))
		goto out;
	rc = q_gain_pass(&q, &cfg, &run, err, sizeof(err));
	if (rc < 0)
		rc = q_row_passes(&q, &cfg, &run, err, sizeof(err));
	if (rc >= 0) {
		ret = rc;
		goto out;
	}
	q_print_table(&q, score, o.name);
	if (o.json_path && q_write_json(&q, &cfg, score, &o))
		goto out;
	ret = VR_EXIT_OK;
out:
	VR_H5_CLOSE(q.tspace, q.tds, q.tf);
	void *bufs[] = {q.toff, q.gs, q.truth,   q.truth_img, q.cur,
	                q.pa,   q.pt, q.scratch, per_epoch};
	for (size_t i = 0; i < VR_ARRAY_SIZE(bufs); i++)
		free(bufs[i]);
	cfg_free(&run);
	cfg_free(&cfg);
	return ret;
}
