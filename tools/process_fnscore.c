/* SPDX-License-Identifier: MIT */
/*
 * `volrec quality --functional`: angiography and Doppler volumes (HDF5 datasets of `volrec
 * process`, or any of the same shapes) scored against the flow phantom's truth of `volrec sim
 * --truth` (/vessel, /velocity; docs/algorithms.md "Scoring functional OCT", docs/formats.md
 * "Truth file"): angiography by its contrast and the area under the ROC curve of vessel against
 * tissue, Doppler by the velocity error inside the vessels.
 */
#include <errno.h>
#include <getopt.h>
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "base/base.h"
#include "config/config.h"
#include "tools/fnscore.h"

#define FN_ANGIO_MAX   8
#define FN_PHASE_LIMIT 2.5 /* rad: Doppler is scored where the true phase step is below this */
#define FN_PI          3.14159265358979323846

static const char fn_help[] =
        "usage: volrec quality --functional FILE.h5 -c FILE -t TRUTH.h5 [--angio DSET]...\n"
        "                      [--doppler DSET] [--doppler-axis bscan|ascan] [--json OUT]\n"
        "                      [--name NAME]\n"
        "\n"
        "Score functional OCT volumes of FILE.h5 against the flow phantom's truth of\n"
        "`volrec sim --truth` (/vessel: 1 static tissue, 2 blood; /velocity: blood's axial\n"
        "velocity, mm/s). A dataset is [n][Y][X][Z] (full resolution, as the truth) or\n"
        "[n][ny][nx][Z] (low resolution, at each epoch's offset), or without n for one\n"
        "epoch; row i is scored against the truth's row i, pooled over the rows.\n"
        "\n"
        "  --functional FILE   the volumes (e.g. the output of volrec process)\n"
        "  -c, --config FILE   the configuration they were made with (geometry: the\n"
        "                      times, centre wavelength and refractive index; no flips)\n"
        "  -t, --truth FILE    the truth of volrec sim --truth of the flow phantom\n"
        "  --angio DSET        an angiography dataset (u8 or float; may be repeated):\n"
        "                      contrast (mean in vessels - mean in tissue) / the\n"
        "                      tissue's standard deviation, and the area under the ROC\n"
        "                      curve of vessel against tissue (default: angio, if there)\n"
        "  --doppler DSET      a Doppler dataset: float, the phase step in radians\n"
        "                      (lowres_doppler), or u8 (doppler, v = (dphi + pi) / (2 pi)\n"
        "                      quantized); velocity v = lambda0 dphi / (4 pi n T) against\n"
        "                      the truth inside vessels where the true |dphi| < 2.5 rad:\n"
        "                      mean absolute error, relative to the mean |v|, and bias\n"
        "                      (default: doppler, if there)\n"
        "  --doppler-axis A    bscan (default; T = geometry.bscan_period_us) or ascan\n"
        "                      (T = geometry.ascan_period_us)\n"
        "  --json FILE         also write the figures as JSON (- for stdout)\n"
        "  --name NAME         the scene's name in the table and the JSON\n"
        "  -h, --help          this text\n"
        "\n"
        "Exit status: 0 done, 1 failure while reading, 2 usage, configuration or input\n"
        "error (a missing dataset, shapes that do not match the truth).\n";

static void fn_usage(FILE *f)
{
	fputs(fn_help, f);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

double fn_auc(double *pos, size_t np, double *neg, size_t nn)
{
	double s = 0;
	size_t lo = 0, hi = 0; /* neg[0..lo) < v, neg[0..hi) <= v */

	if (!np || !nn)
		return NAN;
	qsort(pos, np, sizeof(*pos), cmp_double);
	qsort(neg, nn, sizeof(*neg), cmp_double);
	for (size_t i = 0; i < np; i++) {
		while (lo < nn && neg[lo] < pos[i])
			lo++;
		if (hi < lo)
			hi = lo;
		while (hi < nn && neg[hi] <= pos[i])
			hi++;
		s += (double)lo + 0.5 * (double)(hi - lo);
	}
	return s / ((double)np * (double)nn);
}

/* What the command line asks for. */
struct fn_opts {
	const char *in, *cfg_path, *truth_path, *json_path, *name, *doppler, *axis;
	const char *angio[FN_ANGIO_MAX];
	int nangio;
};

/* One dataset of the input, read whole as doubles, and how its rows meet the truth's. */
struct fn_vol {
	const char *name;
	bool u8, lowres;
	hsize_t n, a, b, z; /* rows, then [a][b][z] */
	double *v;          /* [n][a][b][z] */
};

/* The truth: labels, velocities, offsets. */
struct fn_truth {
	hsize_t n, Y, X, Z;
	uint8_t *label;
	float *vel;
	uint32_t (*off)[2];
};

static int fn_read_dims(hid_t ds, hsize_t dims[4], int *rank)
{
	hid_t sp = H5Dget_space(ds);
	int r = sp < 0 ? -1 : H5Sget_simple_extent_ndims(sp);

	if (r >= 3 && r <= 4)
		H5Sget_simple_extent_dims(sp, dims, NULL);
	if (sp >= 0)
		H5Sclose(sp);
	*rank = r;
	return r >= 3 && r <= 4 ? 0 : -EINVAL;
}

static int fn_truth_read(const char *path, struct fn_truth *t, char *err, size_t errlen)
{
	hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT), dl = -1, dv = -1, dof = -1;
	hsize_t dims[4] = {0}, d2[4] = {0};
	int rank = 0, r2 = 0, rc = 0;

	if (f < 0)
		return vr_err(err, errlen, -ENOENT, "%s: cannot open the truth (HDF5)", path);
	if (H5Lexists(f, "vessel", H5P_DEFAULT) <= 0 ||
	    H5Lexists(f, "velocity", H5P_DEFAULT) <= 0 ||
	    H5Lexists(f, "offset", H5P_DEFAULT) <= 0) {
		rc = vr_err(err, errlen, -EINVAL,
		            "%s: no /vessel, /velocity or /offset: not the truth of the flow "
		            "phantom (volrec sim --truth with source.synth.phantom: flow)",
		            path);
		goto out;
	}
	dl = H5Dopen2(f, "vessel", H5P_DEFAULT);
	dv = H5Dopen2(f, "velocity", H5P_DEFAULT);
	dof = H5Dopen2(f, "offset", H5P_DEFAULT);
	if (dl < 0 || dv < 0 || dof < 0 || fn_read_dims(dl, dims, &rank) || rank != 4 ||
	    fn_read_dims(dv, d2, &r2) || memcmp(dims, d2, sizeof(dims))) {
		rc = vr_err(err, errlen, -EINVAL,
		            "%s: /vessel and /velocity must be [n][Y][X][Z] of one shape", path);
		goto out;
	}
	t->n = dims[0];
	t->Y = dims[1];
	t->X = dims[2];
	t->Z = dims[3];
	size_t vox = (size_t)(t->n * t->Y * t->X * t->Z);
	t->label = malloc(vox ? vox : 1);
	t->vel = malloc((vox ? vox : 1) * sizeof(float));
	t->off = calloc(t->n ? t->n : 1, sizeof(*t->off));
	if (!t->label || !t->vel || !t->off) {
		rc = vr_err(err, errlen, -ENOMEM, "out of memory for the truth of %s", path);
		goto out;
	}
	if (H5Dread(dl, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, t->label) < 0 ||
	    H5Dread(dv, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, t->vel) < 0 ||
	    H5Dread(dof, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, t->off) < 0)
		rc = vr_err(err, errlen, -EIO, "%s: reading the truth failed", path);
out:
	if (dl >= 0)
		H5Dclose(dl);
	if (dv >= 0)
		H5Dclose(dv);
	if (dof >= 0)
		H5Dclose(dof);
	H5Fclose(f);
	return rc;
}

/* Dataset name of file f (path for messages) into v, its shape checked against the truth. */
static int fn_vol_read(hid_t f, const char *path, const char *name, const struct fn_truth *t,
                       const struct vr_config *cfg, struct fn_vol *v, char *err, size_t errlen)
{
	hsize_t dims[4] = {0};
	int rank = 0, rc = 0;
	hid_t ds, ty;

	v->name = name;
	if (H5Lexists(f, name, H5P_DEFAULT) <= 0)
		return vr_err(err, errlen, -ENOENT, "%s: no dataset /%s", path, name);
	ds = H5Dopen2(f, name, H5P_DEFAULT);
	if (ds < 0 || fn_read_dims(ds, dims, &rank)) {
		rc = vr_err(err, errlen, -EINVAL,
		            "%s: /%s is not a volume ([n][Y][X][Z] or [Y][X][Z])", path, name);
		goto out;
	}
	if (rank == 3) {
		memmove(dims + 1, dims, 3 * sizeof(*dims));
		dims[0] = 1;
	}
	ty = H5Dget_type(ds);
	v->u8 = H5Tget_class(ty) == H5T_INTEGER && H5Tget_size(ty) == 1;
	bool fl = H5Tget_class(ty) == H5T_FLOAT;
	H5Tclose(ty);
	v->n = dims[0];
	v->a = dims[1];
	v->b = dims[2];
	v->z = dims[3];
	v->lowres = !(v->a == t->Y && v->b == t->X);
	if (!v->u8 && !fl) {
		rc = vr_err(err, errlen, -EINVAL, "%s: /%s is neither u8 nor floating point", path,
		            name);
	} else if (v->z != t->Z || (v->lowres && !(v->a == cfg->geometry.bscans_per_volume &&
	                                           v->b == cfg->geometry.ascans_per_bscan &&
	                                           v->a * cfg->geometry.stride[1] == t->Y &&
	                                           v->b * cfg->geometry.stride[0] == t->X))) {
		rc = vr_err(err, errlen, -EINVAL,
		            "%s: /%s is [%llu][%llu][%llu] a row, neither the truth's "
		            "[%llu][%llu][%llu] "
		            "nor the low resolution [%u][%u][%llu] of the configuration",
		            path, name, (unsigned long long)v->a, (unsigned long long)v->b,
		            (unsigned long long)v->z, (unsigned long long)t->Y,
		            (unsigned long long)t->X, (unsigned long long)t->Z,
		            cfg->geometry.bscans_per_volume, cfg->geometry.ascans_per_bscan,
		            (unsigned long long)t->Z);
	} else if (v->n > t->n) {
		rc = vr_err(err, errlen, -EINVAL, "%s: /%s has %llu rows, the truth only %llu",
		            path, name, (unsigned long long)v->n, (unsigned long long)t->n);
	}
	if (rc)
		goto out;
	v->v = malloc((size_t)(v->n * v->a * v->b * v->z) * sizeof(double));
	if (!v->v) {
		rc = vr_err(err, errlen, -ENOMEM, "out of memory for /%s", name);
		goto out;
	}
	if (H5Dread(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v->v) < 0)
		rc = vr_err(err, errlen, -EIO, "%s: reading /%s failed", path, name);
out:
	if (ds >= 0)
		H5Dclose(ds);
	return rc;
}

/* The truth's voxel index of the dataset's voxel (row i, a, b, z). */
static size_t fn_truth_index(const struct fn_truth *t, const struct fn_vol *v,
                             const struct vr_config *cfg, hsize_t i, hsize_t a, hsize_t b,
                             hsize_t z)
{
	hsize_t y = a, x = b;

	if (v->lowres) {
		y = a * cfg->geometry.stride[1] + t->off[i][1];
		x = b * cfg->geometry.stride[0] + t->off[i][0];
	}
	return (size_t)(((i * t->Y + y) * t->X + x) * t->Z + z);
}

struct fn_angio_score {
	double contrast, auc;
	size_t nv, nt;
};

static int fn_score_angio(const struct fn_truth *t, const struct fn_vol *v,
                          const struct vr_config *cfg, struct fn_angio_score *s)
{
	size_t total = (size_t)(v->n * v->a * v->b * v->z), np = 0, nn = 0, k = 0;
	double *pos = malloc(total * sizeof(double)), *neg = malloc(total * sizeof(double));
	double sv = 0, st = 0, st2 = 0;

	if (!pos || !neg) {
		free(pos);
		free(neg);
		return -ENOMEM;
	}
	for (hsize_t i = 0; i < v->n; i++)
		for (hsize_t a = 0; a < v->a; a++)
			for (hsize_t b = 0; b < v->b; b++)
				for (hsize_t z = 0; z < v->z; z++, k++) {
					uint8_t l = t->label[fn_truth_index(t, v, cfg, i, a, b, z)];
					if (l == 2) {
						pos[np++] = v->v[k];
						sv += v->v[k];
					} else if (l == 1) {
						neg[nn++] = v->v[k];
						st += v->v[k];
						st2 += v->v[k] * v->v[k];
					}
				}
	s->nv = np;
	s->nt = nn;
	double mt = nn ? st / nn : NAN, var = nn ? st2 / nn - mt * mt : NAN;
	s->contrast = np && nn ? (sv / np - mt) / sqrt(var > 0 ? var : 0) : NAN;
	s->auc = fn_auc(pos, np, neg, nn);
	free(pos);
	free(neg);
	return 0;
}

struct fn_doppler_score {
	double mae, rel, bias, mean_true, period_us;
	size_t n;
};

static void fn_score_doppler(const struct fn_truth *t, const struct fn_vol *v,
                             const struct vr_config *cfg, double period_us,
                             struct fn_doppler_score *s)
{
	const double lambda = cfg->geometry.center_wavelength_nm,
	             n = cfg->geometry.refractive_index > 0 ? cfg->geometry.refractive_index : 1.38;
	/* v = lambda0 dphi / (4 pi n T), mm/s from nm and us */
	const double k = lambda * 1e-6 / (4 * FN_PI * n * period_us * 1e-6);
	double sa = 0, sb = 0, sm = 0;
	size_t cnt = 0, idx = 0;

	for (hsize_t i = 0; i < v->n; i++)
		for (hsize_t a = 0; a < v->a; a++)
			for (hsize_t b = 0; b < v->b; b++)
				for (hsize_t z = 0; z < v->z; z++, idx++) {
					size_t ti = fn_truth_index(t, v, cfg, i, a, b, z);
					if (t->label[ti] != 2 ||
					    !(fabs(t->vel[ti] / k) < FN_PHASE_LIMIT))
						continue;
					double dphi = v->u8 ? 2 * FN_PI * v->v[idx] / 255.0 - FN_PI
					                    : v->v[idx];
					double e = k * dphi - t->vel[ti];
					sa += fabs(e);
					sb += e;
					sm += fabs(t->vel[ti]);
					cnt++;
				}
	s->n = cnt;
	s->period_us = period_us;
	s->mae = cnt ? sa / cnt : NAN;
	s->bias = cnt ? sb / cnt : NAN;
	s->mean_true = cnt ? sm / cnt : NAN;
	s->rel = cnt && sm > 0 ? sa / sm : NAN;
}

static struct json_object *fn_num(double v)
{
	return isfinite(v) ? json_object_new_double(v) : NULL;
}

/* -1 when the options are read into o, else the exit status. */
static int fn_parse_args(int argc, char **argv, struct fn_opts *o)
{
	static const struct option longopts[] = {
	        {"functional", required_argument, NULL, 'F'},
	        {"config", required_argument, NULL, 'c'},
	        {"truth", required_argument, NULL, 't'},
	        {"angio", required_argument, NULL, 'A'},
	        {"doppler", required_argument, NULL, 'D'},
	        {"doppler-axis", required_argument, NULL, 'X'},
	        {"json", required_argument, NULL, 'j'},
	        {"name", required_argument, NULL, 'N'},
	        VR_CLI_LONGOPTS_END,
	};
	const struct vr_cli_str strs[] = {
	        {'F', &o->in},   {'c', &o->cfg_path},  {'t', &o->truth_path}, {'D', &o->doppler},
	        {'X', &o->axis}, {'j', &o->json_path}, {'N', &o->name}};
	int c;

	optind = 1;
	while ((c = VR_CLI_GETOPT(argc, argv, "c:t:h", longopts, strs)) != -1) {
		if (c == 'A') {
			if (o->nangio == FN_ANGIO_MAX) {
				fprintf(stderr, "volrec quality: --angio at most %d times\n",
				        FN_ANGIO_MAX);
				return VR_EXIT_USAGE;
			}
			o->angio[o->nangio++] = optarg;
			continue;
		}
		return vr_cli_usage(fn_usage, c);
	}
	if (vr_cli_args_done("volrec quality", argc, argv))
		return VR_EXIT_USAGE;
	if (vr_command_required("quality", o->in && o->cfg_path && o->truth_path,
	                        "--functional FILE, -c FILE and -t TRUTH.h5 are required", argc,
	                        fn_usage))
		return VR_EXIT_USAGE;
	if (o->axis && strcmp(o->axis, "bscan") && strcmp(o->axis, "ascan")) {
		fprintf(stderr, "volrec quality: --doppler-axis %s: expected bscan or ascan\n",
		        o->axis);
		return VR_EXIT_USAGE;
	}
	return -1;
}

/* The Doppler pair's period from the configuration, 0 (and a message) when unknown. */
static double fn_period(const struct vr_config *cfg, const char *axis, char *err, size_t errlen)
{
	bool ascan = axis && !strcmp(axis, "ascan");
	double T = ascan ? cfg->geometry.ascan_period_us : cfg->geometry.bscan_period_us;

	if (!(T > 0) || !(cfg->geometry.center_wavelength_nm > 0))
		vr_err(err, errlen, -EINVAL,
		       "Doppler needs geometry.%s and geometry.center_wavelength_nm above 0 (the "
		       "velocity is lambda0 dphi / (4 pi n T))",
		       ascan ? "ascan_period_us" : "bscan_period_us");
	return T > 0 && cfg->geometry.center_wavelength_nm > 0 ? T : 0;
}

static int fn_write_json(const struct fn_opts *o, const struct fn_angio_score *as,
                         const struct fn_vol *av, int na, const struct fn_doppler_score *ds,
                         const struct fn_vol *dv)
{
	struct json_object *j = json_object_new_object(), *angio = json_object_new_array();

	if (o->name)
		json_object_object_add(j, "name", json_object_new_string(o->name));
	json_object_object_add(j, "input", json_object_new_string(o->in));
	json_object_object_add(j, "truth", json_object_new_string(o->truth_path));
	for (int i = 0; i < na; i++) {
		struct json_object *a = json_object_new_object();
		json_object_object_add(a, "dataset", json_object_new_string(av[i].name));
		json_object_object_add(a, "rows", json_object_new_int64((int64_t)av[i].n));
		json_object_object_add(a, "lowres", json_object_new_boolean(av[i].lowres));
		json_object_object_add(a, "contrast", fn_num(as[i].contrast));
		json_object_object_add(a, "auc", fn_num(as[i].auc));
		json_object_object_add(a, "vessel_voxels",
		                       json_object_new_int64((int64_t)as[i].nv));
		json_object_object_add(a, "tissue_voxels",
		                       json_object_new_int64((int64_t)as[i].nt));
		json_object_array_add(angio, a);
	}
	json_object_object_add(j, "angio", angio);
	if (dv) {
		struct json_object *d = json_object_new_object();
		json_object_object_add(d, "dataset", json_object_new_string(dv->name));
		json_object_object_add(d, "rows", json_object_new_int64((int64_t)dv->n));
		json_object_object_add(d, "lowres", json_object_new_boolean(dv->lowres));
		json_object_object_add(d, "unit", json_object_new_string(dv->u8 ? "u8" : "rad"));
		json_object_object_add(d, "period_us", fn_num(ds->period_us));
		json_object_object_add(d, "phase_limit_rad",
		                       json_object_new_double(FN_PHASE_LIMIT));
		json_object_object_add(d, "voxels", json_object_new_int64((int64_t)ds->n));
		json_object_object_add(d, "mae_mm_s", fn_num(ds->mae));
		json_object_object_add(d, "relative_error", fn_num(ds->rel));
		json_object_object_add(d, "bias_mm_s", fn_num(ds->bias));
		json_object_object_add(d, "mean_true_mm_s", fn_num(ds->mean_true));
		json_object_object_add(j, "doppler", d);
	}
	const char *text = json_object_to_json_string_ext(j, JSON_C_TO_STRING_PLAIN);
	FILE *f = strcmp(o->json_path, "-") ? fopen(o->json_path, "w") : stdout;
	bool ok = f && fprintf(f, "%s\n", text) >= 0;
	if (f && f != stdout && fclose(f))
		ok = false;
	json_object_put(j);
	if (!ok)
		fprintf(stderr, "volrec quality: %s: writing failed\n", o->json_path);
	return ok ? 0 : -EIO;
}

int fn_quality_main(int argc, char **argv)
{
	struct fn_opts o = {0};
	struct vr_config cfg;
	struct fn_truth t = {0};
	struct fn_vol av[FN_ANGIO_MAX] = {0}, dv = {0};
	struct fn_angio_score as[FN_ANGIO_MAX] = {0};
	struct fn_doppler_score ds = {0};
	char err[CFG_ERR_MAX] = "";
	int rc, ret = VR_EXIT_USAGE;
	hid_t f = -1;

	cfg_defaults(&cfg);
	rc = fn_parse_args(argc, argv, &o);
	if (rc >= 0)
		return rc;
	if (cfg_load(&cfg, o.cfg_path, err, sizeof(err)) < 0) {
		fprintf(stderr, "volrec quality: %s\n", err);
		return VR_EXIT_USAGE;
	}
	if (cfg.preprocess.flip.x || cfg.preprocess.flip.z) {
		fprintf(stderr,
		        "volrec quality: %s: preprocess.flip is set; --functional scores volumes "
		        "in the truth's orientation (no flips)\n",
		        o.cfg_path);
		goto out;
	}
	H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
	rc = fn_truth_read(o.truth_path, &t, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "volrec quality: %s\n", err);
		ret = rc == -EIO || rc == -ENOMEM ? VR_EXIT_FAIL : VR_EXIT_USAGE;
		goto out;
	}
	f = H5Fopen(o.in, H5F_ACC_RDONLY, H5P_DEFAULT);
	if (f < 0) {
		fprintf(stderr, "volrec quality: %s: cannot open (HDF5)\n", o.in);
		goto out;
	}
	bool defaults = !o.nangio && !o.doppler;
	if (defaults) { /* what is there of /angio and /doppler */
		if (H5Lexists(f, "angio", H5P_DEFAULT) > 0)
			o.angio[o.nangio++] = "angio";
		if (H5Lexists(f, "doppler", H5P_DEFAULT) > 0)
			o.doppler = "doppler";
		if (!o.nangio && !o.doppler) {
			fprintf(stderr,
			        "volrec quality: %s has neither /angio nor /doppler: name the "
			        "datasets with --angio and --doppler\n",
			        o.in);
			goto out;
		}
	}
	double period = 0;
	if (o.doppler && !(period = fn_period(&cfg, o.axis, err, sizeof(err)))) {
		fprintf(stderr, "volrec quality: %s: %s\n", o.cfg_path, err);
		goto out;
	}
	for (int i = 0; i < o.nangio; i++) {
		rc = fn_vol_read(f, o.in, o.angio[i], &t, &cfg, &av[i], err, sizeof(err));
		if (!rc)
			rc = fn_score_angio(&t, &av[i], &cfg, &as[i]);
		if (rc) {
			fprintf(stderr, "volrec quality: %s\n",
			        rc == -ENOMEM ? "out of memory" : err);
			ret = rc == -EIO || rc == -ENOMEM ? VR_EXIT_FAIL : VR_EXIT_USAGE;
			goto out;
		}
	}
	if (o.doppler) {
		rc = fn_vol_read(f, o.in, o.doppler, &t, &cfg, &dv, err, sizeof(err));
		if (rc) {
			fprintf(stderr, "volrec quality: %s\n", err);
			ret = rc == -EIO || rc == -ENOMEM ? VR_EXIT_FAIL : VR_EXIT_USAGE;
			goto out;
		}
		fn_score_doppler(&t, &dv, &cfg, period, &ds);
	}
	printf("%s%s%-24s %10s %10s %10s %10s\n", o.name ? o.name : "", o.name ? "\n" : "",
	       "angiography", "contrast", "AUC", "vessel", "tissue");
	for (int i = 0; i < o.nangio; i++)
		printf("%-24s %10.3f %10.4f %10zu %10zu\n", av[i].name, as[i].contrast, as[i].auc,
		       as[i].nv, as[i].nt);
	if (o.doppler)
		printf("%-24s %10s %10s %10s %10s\n%-24s %10.4f %10.4f %10.4f %10zu\n",
		       "Doppler (|dphi| < 2.5)", "MAE mm/s", "relative", "bias mm/s", "voxels",
		       dv.name, ds.mae, ds.rel, ds.bias, ds.n);
	ret = VR_EXIT_OK;
	if (o.json_path && fn_write_json(&o, as, av, o.nangio, &ds, o.doppler ? &dv : NULL))
		ret = VR_EXIT_FAIL;
out:
	if (f >= 0)
		H5Fclose(f);
	for (int i = 0; i < FN_ANGIO_MAX; i++)
		free(av[i].v);
	free(dv.v);
	free(t.label);
	free(t.vel);
	free(t.off);
	cfg_free(&cfg);
	return ret;
}
