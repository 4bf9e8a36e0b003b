/* SPDX-License-Identifier: MIT */
/*
 * The reader of processed HDF5 recordings (`volrec record`, `volrec process -o`): /volumes
 * [t][y][x][z] u8 one volume at a time, its voxel size, and the file's attributes and
 * per-volume columns as JSON for the provenance of the exported files.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hdf5.h>
#include <json-c/json.h>

#include "formats/fmt.h"

#define H5IN_COLUMN_MAX 16 /* values per row of a per-volume column */
#define H5IN_PI         3.14159265358979323846

struct fmt_h5in {
	hid_t file;
	uint32_t nch;
	hid_t ds[FMT_CHANNELS_MAX], space[FMT_CHANNELS_MAX]; /* each channel's dataset */
	uint64_t nt;
	uint32_t shape[3];
	struct json_object *attrs, *columns;
	struct json_object *meaning[FMT_CHANNELS_MAX]; /* each channel's attributes */
};

/* The channels a file may hold (docs/algorithms.md §5 "Channels"), in their order. */
static const struct {
	const char *name, *dataset;
} h5_channels[FMT_CHANNELS_MAX] = {
        {"structure", "volumes"},
        {"angio", "angio"},
        {"doppler", "doppler"},
};

/* An attribute or dataset's numbers or strings as JSON: a scalar for one value, else an array. */
static struct json_object *h5_values_json(hid_t obj, bool attr, hid_t type, hid_t space)
{
	H5T_class_t cls = H5Tget_class(type);
	hssize_t n = H5Sget_simple_extent_npoints(space);
	struct json_object *out = NULL;

	if (n <= 0 || n > (1 << 20))
		return NULL;
	if (cls == H5T_STRING) {
		hid_t mt = H5Tcopy(H5T_C_S1);
		bool vlen = H5Tis_variable_str(type) > 0;
		char **v = calloc((size_t)n, sizeof(char *));
		size_t sz = H5Tget_size(type);
		char *buf = vlen ? NULL : calloc((size_t)n, sz + 1);

		H5Tset_size(mt, vlen ? H5T_VARIABLE : sz + 1);
		H5Tset_cset(mt, H5Tget_cset(type));
		if (v && (vlen || buf)) {
			void *dst = vlen ? (void *)v : (void *)buf;
			herr_t rc = attr ? H5Aread(obj, mt, dst)
			                 : H5Dread(obj, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, dst);
			if (rc >= 0) {
				out = n == 1 ? NULL : json_object_new_array();
				for (hssize_t i = 0; i < n; i++) {
					const char *s = vlen ? v[i] : buf + i * (sz + 1);
					struct json_object *js = json_object_new_string(s ? s : "");

					if (n == 1)
						out = js;
					else
						json_object_array_add(out, js);
				}
				if (vlen)
					H5Dvlen_reclaim(mt, space, H5P_DEFAULT, v);
			}
		}
		free(v);
		free(buf);
		H5Tclose(mt);
		return out;
	}
	if (cls != H5T_INTEGER && cls != H5T_FLOAT)
		return NULL;
	bool sgn = cls == H5T_INTEGER && H5Tget_sign(type) == H5T_SGN_2;
	hid_t mt = cls == H5T_FLOAT ? H5T_NATIVE_DOUBLE
	           : sgn            ? H5T_NATIVE_INT64
	                            : H5T_NATIVE_UINT64;
	void *v = calloc((size_t)n, 8);

	if (!v)
		return NULL;
	if ((attr ? H5Aread(obj, mt, v) : H5Dread(obj, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, v)) >=
	    0) {
		out = n == 1 ? NULL : json_object_new_array();
		for (hssize_t i = 0; i < n; i++) {
			struct json_object *js;

			if (cls == H5T_FLOAT) {
				double d = ((double *)v)[i];
				js = isfinite(d) ? json_object_new_double(d) : NULL;
			} else if (sgn) {
				js = json_object_new_int64(((int64_t *)v)[i]);
			} else {
				js = json_object_new_uint64(((uint64_t *)v)[i]);
			}
			if (n == 1)
				out = js;
			else
				json_object_array_add(out, js);
		}
	}
	free(v);
	return out;
}

static herr_t h5_attr_cb(hid_t loc, const char *name, const H5A_info_t *info, void *ctx)
{
	struct json_object *o = ctx;
	hid_t a = H5Aopen(loc, name, H5P_DEFAULT);

	(void)info;
	if (a < 0)
		return 0;
	hid_t t = H5Aget_type(a), s = H5Aget_space(a);
	struct json_object *v = h5_values_json(a, true, t, s);

	if (v || H5Tget_class(t) == H5T_FLOAT)
		json_object_object_add(o, name, v);
	H5Sclose(s);
	H5Tclose(t);
	H5Aclose(a);
	return 0;
}

/* A root dataset of nt rows of at most H5IN_COLUMN_MAX numbers: a column, one JSON value per
 * volume (a number or an array of numbers); /generations: its JSON texts, parsed. */
static herr_t h5_column_cb(hid_t g, const char *name, const H5L_info_t *info, void *ctx)
{
	struct fmt_h5in *r = ctx;
	hsize_t dims[4];
	hid_t d, t, s;
	int rank;

	(void)info;
	if (!strcmp(name, "volumes"))
		return 0;
	d = H5Dopen2(g, name, H5P_DEFAULT); /* fails quietly for a group */
	if (d < 0)
		return 0;
	t = H5Dget_type(d);
	s = H5Dget_space(d);
	rank = H5Sget_simple_extent_dims(s, dims, NULL);
	if (!strcmp(name, "generations") && H5Tget_class(t) == H5T_STRING && rank == 1) {
		struct json_object *v = h5_values_json(d, false, t, s), *gens;

		gens = json_object_new_array();
		for (size_t i = 0;
		     v && i < (json_object_is_type(v, json_type_array) ? json_object_array_length(v)
		                                                       : 1);
		     i++) {
			struct json_object *e = json_object_is_type(v, json_type_array)
			                                ? json_object_array_get_idx(v, i)
			                                : v;
			struct json_object *p = json_tokener_parse(json_object_get_string(e));

			json_object_array_add(gens, p ? p : json_object_get(e));
		}
		json_object_put(v);
		json_object_object_add(r->attrs, "generations", gens);
	} else if (rank >= 1 && rank <= 2 && dims[0] == r->nt &&
	           (rank == 1 || dims[1] <= H5IN_COLUMN_MAX) &&
	           (H5Tget_class(t) == H5T_INTEGER || H5Tget_class(t) == H5T_FLOAT)) {
		struct json_object *v = h5_values_json(d, false, t, s);

		if (v && rank == 2) { /* rows of dims[1] values */
			struct json_object *rows = json_object_new_array();

			for (hsize_t i = 0; i < dims[0]; i++) {
				struct json_object *row = json_object_new_array();

				for (hsize_t j = 0; j < dims[1]; j++)
					json_object_array_add(
					        row, json_object_get(json_object_array_get_idx(
					                     v, (size_t)(i * dims[1] + j))));
				json_object_array_add(rows, row);
			}
			json_object_put(v);
			v = rows;
		} else if (v && r->nt == 1) {
			struct json_object *a = json_object_new_array();

			json_object_array_add(a, v);
			v = a;
		}
		if (v)
			json_object_object_add(r->columns, name, v);
	}
	H5Sclose(s);
	H5Tclose(t);
	H5Dclose(d);
	return 0;
}

/* voxel_size_um of a channel's dataset: [y, x, z] in micrometres, NaN where unknown. */
static int h5_voxel(hid_t vols, const char *name, double *v, char *err, size_t errlen,
                    const char *path)
{
	hid_t a, s;
	int rc = 0;

	v[0] = v[1] = v[2] = NAN;
	if (H5Aexists(vols, "voxel_size_um") <= 0)
		return 0;
	a = H5Aopen(vols, "voxel_size_um", H5P_DEFAULT);
	s = a >= 0 ? H5Aget_space(a) : -1;
	if (s < 0 || H5Sget_simple_extent_npoints(s) != 3 || H5Aread(a, H5T_NATIVE_DOUBLE, v) < 0)
		rc = vr_err(err, errlen, -EINVAL, "%s: /%s voxel_size_um is not 3 numbers", path,
		            name);
	for (int i = 0; i < 3; i++)
		if (!(v[i] > 0) || !isfinite(v[i]))
			v[i] = NAN;
	if (s >= 0)
		H5Sclose(s);
	if (a >= 0)
		H5Aclose(a);
	return rc;
}

/* The axes attribute of a channel's dataset, when present, must be the layout this reader
 * reads. */
static int h5_axes(hid_t vols, const char *name, char *err, size_t errlen, const char *path)
{
	struct json_object *v;
	hid_t a, t, s;
	int rc = 0;

	if (H5Aexists(vols, "axes") <= 0)
		return 0;
	a = H5Aopen(vols, "axes", H5P_DEFAULT);
	if (a < 0)
		return vr_err(err, errlen, -EINVAL, "%s: /%s axes unreadable", path, name);
	t = H5Aget_type(a);
	s = H5Aget_space(a);
	v = h5_values_json(a, true, t, s);
	if (!v || !json_object_is_type(v, json_type_string) ||
	    strcmp(json_object_get_string(v), "t,y,x,z"))
		rc = vr_err(err, errlen, -EINVAL, "%s: /%s axes are '%s', not t,y,x,z", path, name,
		            v ? json_object_get_string(v) : "?");
	json_object_put(v);
	H5Sclose(s);
	H5Tclose(t);
	H5Aclose(a);
	return rc;
}

static double h5_interval(struct fmt_h5in *r)
{
	struct json_object *t = json_object_object_get(r->columns, "t_first_ns");
	size_t n = t ? json_object_array_length(t) : 0;
	uint64_t first, last;

	if (n < 2)
		return NAN;
	first = json_object_get_uint64(json_object_array_get_idx(t, 0));
	last = json_object_get_uint64(json_object_array_get_idx(t, n - 1));
	return last > first ? (double)(last - first) / 1e9 / (double)(n - 1) : NAN;
}

/* Which of h5_channels to read, in order, into idx: those named in list (comma-separated), or
 * every one the file has. \return their number, or a negative errno with the message. */
static int h5_pick(hid_t file, const char *list, int idx[FMT_CHANNELS_MAX], const char *path,
                   char *err, size_t errlen)
{
	bool has[FMT_CHANNELS_MAX];
	char have[64] = "";
	int n = 0;

	for (int k = 0; k < FMT_CHANNELS_MAX; k++) {
		has[k] = H5Lexists(file, h5_channels[k].dataset, H5P_DEFAULT) > 0;
		if (has[k])
			snprintf(have + strlen(have), sizeof(have) - strlen(have), "%s%s",
			         *have ? ", " : "", h5_channels[k].name);
	}
	if (!*have)
		return vr_err(err, errlen, -EINVAL,
		              "%s: no /volumes, /angio or /doppler (not a processed recording of "
		              "volrec record or volrec process -o)",
		              path);
	if (!list || !*list) {
		for (int k = 0; k < FMT_CHANNELS_MAX; k++)
			if (has[k])
				idx[n++] = k;
		return n;
	}
	for (const char *p = list;; p++) {
		size_t len = strcspn(p, ",");
		int k = 0;

		while (k < FMT_CHANNELS_MAX && (strlen(h5_channels[k].name) != len ||
		                                strncmp(p, h5_channels[k].name, len) != 0))
			k++;
		if (k == FMT_CHANNELS_MAX)
			return vr_err(err, errlen, -EINVAL,
			              "channel '%.*s' is not one of structure, angio, doppler",
			              (int)len, p);
		for (int i = 0; i < n; i++)
			if (idx[i] == k)
				return vr_err(err, errlen, -EINVAL, "channel %s asked for twice",
				              h5_channels[k].name);
		if (!has[k])
			return vr_err(err, errlen, -EINVAL,
			              "%s: no channel %s (dataset /%s); the file has %s", path,
			              h5_channels[k].name, h5_channels[k].dataset, have);
		idx[n++] = k;
		p += len;
		if (!*p)
			break;
	}
	return n;
}

/* The attributes of a channel's dataset as JSON, but those of its axes and voxel size (the
 * image's own), and what its u8 values mean into ch: value_unit and value_range when written;
 * else for Doppler the contract's −π..π (docs/algorithms.md §5), for the others unknown. */
static void h5_meaning(hid_t ds, struct fmt_channel *ch, struct json_object **out)
{
	struct json_object *o = json_object_new_object(), *v;

	H5Aiterate2(ds, H5_INDEX_NAME, H5_ITER_INC, NULL, h5_attr_cb, o);
	json_object_object_del(o, "axes");
	json_object_object_del(o, "voxel_size_um");
	json_object_object_del(o, "voxel_size_order");
	ch->range[0] = ch->range[1] = NAN;
	ch->unit[0] = 0;
	if (json_object_object_get_ex(o, "value_range", &v) &&
	    json_object_is_type(v, json_type_array) && json_object_array_length(v) == 2 &&
	    json_object_object_get_ex(o, "value_unit", NULL)) {
		for (int i = 0; i < 2; i++) {
			struct json_object *e = json_object_array_get_idx(v, (size_t)i);

			ch->range[i] = e ? json_object_get_double(e) : NAN;
		}
		json_object_object_get_ex(o, "value_unit", &v);
		snprintf(ch->unit, sizeof(ch->unit), "%s", json_object_get_string(v));
	} else if (!strcmp(ch->name, "doppler")) {
		ch->range[0] = -H5IN_PI;
		ch->range[1] = H5IN_PI;
		snprintf(ch->unit, sizeof(ch->unit), "rad");
	}
	if (!(ch->range[0] == ch->range[0] && ch->range[1] == ch->range[1])) {
		ch->range[0] = ch->range[1] = NAN;
		ch->unit[0] = 0;
	}
	*out = o;
}

/* Open channel c (h5_channels[k]) of r: [t][y][x][z] u8 of the first channel's shape, the same
 * axes and voxel size. */
static int h5_open_channel(struct fmt_h5in *r, uint32_t c, int k, struct fmt_info *info,
                           const char *path, char *err, size_t errlen)
{
	const char *name = h5_channels[k].dataset;
	struct fmt_channel *ch = &info->ch[c];
	hsize_t dims[4];
	double vox[3];
	hid_t t;
	int rc;

	if ((r->ds[c] = H5Dopen2(r->file, name, H5P_DEFAULT)) < 0)
		return vr_err(err, errlen, -EINVAL, "%s: /%s cannot be opened", path, name);
	r->space[c] = H5Dget_space(r->ds[c]);
	t = H5Dget_type(r->ds[c]);
	bool u8 = H5Tget_class(t) == H5T_INTEGER && H5Tget_size(t) == 1;
	H5Tclose(t);
	if (H5Sget_simple_extent_ndims(r->space[c]) != 4 || !u8)
		return vr_err(err, errlen, -EINVAL, "%s: /%s is not [t][y][x][z] of 8-bit values",
		              path, name);
	H5Sget_simple_extent_dims(r->space[c], dims, NULL);
	if (dims[0] == 0 || !dims[1] || !dims[2] || !dims[3] || dims[1] > UINT32_MAX ||
	    dims[2] > UINT32_MAX || dims[3] > UINT32_MAX)
		return vr_err(err, errlen, -EINVAL, "%s: /%s holds no volume", path, name);
	if (c == 0) {
		r->nt = dims[0];
		for (int i = 0; i < 3; i++)
			r->shape[i] = (uint32_t)dims[i + 1];
	} else if (dims[0] != r->nt || dims[1] != r->shape[0] || dims[2] != r->shape[1] ||
	           dims[3] != r->shape[2]) {
		return vr_err(err, errlen, -EINVAL,
		              "%s: /%s is [%llu, %llu, %llu, %llu] but /%s is [%llu, %u, %u, %u] "
		              "(t, y, x, z)",
		              path, name, (unsigned long long)dims[0], (unsigned long long)dims[1],
		              (unsigned long long)dims[2], (unsigned long long)dims[3],
		              info->ch[0].dataset, (unsigned long long)r->nt, r->shape[0],
		              r->shape[1], r->shape[2]);
	}
	if ((rc = h5_axes(r->ds[c], name, err, errlen, path)) < 0)
		return rc;
	if ((rc = h5_voxel(r->ds[c], name, c ? vox : info->voxel_um, err, errlen, path)) < 0)
		return rc;
	for (int i = 0; c && i < 3; i++)
		if (memcmp(&vox[i], &info->voxel_um[i], sizeof(double)) != 0 &&
		    !(vox[i] != vox[i] && info->voxel_um[i] != info->voxel_um[i]))
			return vr_err(err, errlen, -EINVAL,
			              "%s: /%s voxel_size_um differs from /%s's", path, name,
			              info->ch[0].dataset);
	snprintf(ch->name, sizeof(ch->name), "%s", h5_channels[k].name);
	snprintf(ch->dataset, sizeof(ch->dataset), "%s", name);
	h5_meaning(r->ds[c], ch, &r->meaning[c]);
	ch->meaning = r->meaning[c];
	return 0;
}

int fmt_h5in_open_channels(const char *path, const char *channels, struct fmt_h5in **out,
                           struct fmt_info *info, char *err, size_t errlen)
{
	int idx[FMT_CHANNELS_MAX];
	struct fmt_h5in *r;
	int rc, n;

	if (access(path, R_OK) < 0)
		return vr_err_errno(err, errlen, -errno, "%s", path);
	if (H5Fis_hdf5(path) <= 0)
		return vr_err(err, errlen, -EINVAL, "%s: not an HDF5 file", path);
	r = calloc(1, sizeof(*r));
	if (!r)
		return vr_err(err, errlen, -ENOMEM, "out of memory");
	for (int c = 0; c < FMT_CHANNELS_MAX; c++)
		r->ds[c] = r->space[c] = -1;
	memset(info, 0, sizeof(*info));
	r->file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
	if (r->file < 0) {
		rc = vr_err(err, errlen, -EINVAL, "%s: HDF5 cannot open it", path);
		goto out_free;
	}
	H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
	if ((rc = n = h5_pick(r->file, channels, idx, path, err, errlen)) < 0)
		goto out_free;
	for (r->nch = 0; r->nch < (uint32_t)n; r->nch++)
		if ((rc = h5_open_channel(r, r->nch, idx[r->nch], info, path, err, errlen)) < 0)
			goto out_free;
	r->attrs = json_object_new_object();
	r->columns = json_object_new_object();
	H5Aiterate2(r->file, H5_INDEX_NAME, H5_ITER_INC, NULL, h5_attr_cb, r->attrs);
	H5Literate(r->file, H5_INDEX_NAME, H5_ITER_INC, NULL, h5_column_cb, r);
	info->nt = r->nt;
	info->nch = r->nch;
	memcpy(info->shape, r->shape, sizeof(r->shape));
	info->interval_s = h5_interval(r);
	info->attrs = r->attrs;
	info->columns = r->columns;
	*out = r;
	return 0;
out_free:
	fmt_h5in_close(r);
	return rc;
}

int fmt_h5in_open(const char *path, struct fmt_h5in **out, struct fmt_info *info, char *err,
                  size_t errlen)
{
	return fmt_h5in_open_channels(path, NULL, out, info, err, errlen);
}

int fmt_h5in_read(struct fmt_h5in *r, uint64_t t, uint8_t *vol, char *err, size_t errlen)
{
	hsize_t start[4] = {t, 0, 0, 0}, count[4] = {1, r->shape[0], r->shape[1], r->shape[2]};
	const size_t bytes = (size_t)r->shape[0] * r->shape[1] * r->shape[2];
	hid_t mem;
	herr_t rc = 0;

	if (t >= r->nt)
		return vr_err(err, errlen, -EINVAL, "volume %llu of %llu", (unsigned long long)t,
		              (unsigned long long)r->nt);
	mem = H5Screate_simple(4, count, NULL);
	for (uint32_t c = 0; c < r->nch && rc >= 0; c++) {
		if (mem < 0 ||
		    H5Sselect_hyperslab(r->space[c], H5S_SELECT_SET, start, NULL, count, NULL) < 0)
			rc = -1;
		else
			rc = H5Dread(r->ds[c], H5T_NATIVE_UINT8, mem, r->space[c], H5P_DEFAULT,
			             vol + c * bytes);
		if (rc < 0) {
			char name[64];

			if (H5Iget_name(r->ds[c], name, sizeof(name)) <= 0)
				snprintf(name, sizeof(name), "/volumes");
			if (mem >= 0)
				H5Sclose(mem);
			return vr_err(err, errlen, -EIO, "%s: cannot read volume %llu", name,
			              (unsigned long long)t);
		}
	}
	if (mem >= 0)
		H5Sclose(mem);
	return 0;
}

void fmt_h5in_close(struct fmt_h5in *r)
{
	if (!r)
		return;
	for (int c = 0; c < FMT_CHANNELS_MAX; c++) {
		if (r->space[c] >= 0)
			H5Sclose(r->space[c]);
		if (r->ds[c] >= 0)
			H5Dclose(r->ds[c]);
		json_object_put(r->meaning[c]);
	}
	if (r->file > 0)
		H5Fclose(r->file);
	json_object_put(r->attrs);
	json_object_put(r->columns);
	free(r);
}
