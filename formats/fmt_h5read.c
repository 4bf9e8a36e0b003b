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

struct fmt_h5in {
	hid_t file, vols, space;
	uint64_t nt;
	uint32_t shape[3];
	struct json_object *attrs, *columns;
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

/* voxel_size_um of /volumes: [y, x, z] in micrometres, NaN where unknown. */
static int h5_voxel(hid_t vols, double *v, char *err, size_t errlen, const char *path)
{
	hid_t a, s;
	int rc = 0;

	v[0] = v[1] = v[2] = NAN;
	if (H5Aexists(vols, "voxel_size_um") <= 0)
		return 0;
	a = H5Aopen(vols, "voxel_size_um", H5P_DEFAULT);
	s = a >= 0 ? H5Aget_space(a) : -1;
	if (s < 0 || H5Sget_simple_extent_npoints(s) != 3 || H5Aread(a, H5T_NATIVE_DOUBLE, v) < 0)
		rc = vr_err(err, errlen, -EINVAL, "%s: /volumes voxel_size_um is not 3 numbers",
		            path);
	for (int i = 0; i < 3; i++)
		if (!(v[i] > 0) || !isfinite(v[i]))
			v[i] = NAN;
	if (s >= 0)
		H5Sclose(s);
	if (a >= 0)
		H5Aclose(a);
	return rc;
}

/* The axes attribute of /volumes, when present, must be the layout this reader reads. */
static int h5_axes(hid_t vols, char *err, size_t errlen, const char *path)
{
	struct json_object *v;
	hid_t a, t, s;
	int rc = 0;

	if (H5Aexists(vols, "axes") <= 0)
		return 0;
	a = H5Aopen(vols, "axes", H5P_DEFAULT);
	if (a < 0)
		return vr_err(err, errlen, -EINVAL, "%s: /volumes axes unreadable", path);
	t = H5Aget_type(a);
	s = H5Aget_space(a);
	v = h5_values_json(a, true, t, s);
	if (!v || !json_object_is_type(v, json_type_string) ||
	    strcmp(json_object_get_string(v), "t,y,x,z"))
		rc = vr_err(err, errlen, -EINVAL, "%s: /volumes axes are '%s', not t,y,x,z", path,
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

int fmt_h5in_open(const char *path, struct fmt_h5in **out, struct fmt_info *info, char *err,
                  size_t errlen)
{
	struct fmt_h5in *r;
	hsize_t dims[4];
	hid_t t;
	int rc;

	if (access(path, R_OK) < 0)
		return vr_err_errno(err, errlen, -errno, "%s", path);
	if (H5Fis_hdf5(path) <= 0)
		return vr_err(err, errlen, -EINVAL, "%s: not an HDF5 file", path);
	r = calloc(1, sizeof(*r));
	if (!r)
		return vr_err(err, errlen, -ENOMEM, "out of memory");
	r->vols = r->space = -1;
	r->file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
	if (r->file < 0) {
		rc = vr_err(err, errlen, -EINVAL, "%s: HDF5 cannot open it", path);
		goto out_free;
	}
	if (H5Lexists(r->file, "volumes", H5P_DEFAULT) <= 0 ||
	    (r->vols = H5Dopen2(r->file, "volumes", H5P_DEFAULT)) < 0) {
		rc = vr_err(err, errlen, -EINVAL,
		            "%s: no /volumes (not a processed recording of volrec record or volrec "
		            "process -o)",
		            path);
		goto out_free;
	}
	r->space = H5Dget_space(r->vols);
	t = H5Dget_type(r->vols);
	bool u8 = H5Tget_class(t) == H5T_INTEGER && H5Tget_size(t) == 1;
	H5Tclose(t);
	if (H5Sget_simple_extent_ndims(r->space) != 4 || !u8) {
		rc = vr_err(err, errlen, -EINVAL,
		            "%s: /volumes is not [t][y][x][z] of 8-bit values", path);
		goto out_free;
	}
	H5Sget_simple_extent_dims(r->space, dims, NULL);
	if (dims[0] == 0 || !dims[1] || !dims[2] || !dims[3] || dims[1] > UINT32_MAX ||
	    dims[2] > UINT32_MAX || dims[3] > UINT32_MAX) {
		rc = vr_err(err, errlen, -EINVAL, "%s: /volumes holds no volume", path);
		goto out_free;
	}
	r->nt = dims[0];
	for (int i = 0; i < 3; i++)
		r->shape[i] = (uint32_t)dims[i + 1];
	if ((rc = h5_axes(r->vols, err, errlen, path)) < 0)
		goto out_free;
	memset(info, 0, sizeof(*info));
	if ((rc = h5_voxel(r->vols, info->voxel_um, err, errlen, path)) < 0)
		goto out_free;
	r->attrs = json_object_new_object();
	r->columns = json_object_new_object();
	H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
	H5Aiterate2(r->file, H5_INDEX_NAME, H5_ITER_INC, NULL, h5_attr_cb, r->attrs);
	H5Literate(r->file, H5_INDEX_NAME, H5_ITER_INC, NULL, h5_column_cb, r);
	info->nt = r->nt;
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

int fmt_h5in_read(struct fmt_h5in *r, uint64_t t, uint8_t *vol, char *err, size_t errlen)
{
	hsize_t start[4] = {t, 0, 0, 0}, count[4] = {1, r->shape[0], r->shape[1], r->shape[2]};
	hid_t mem;
	herr_t rc;

	if (t >= r->nt)
		return vr_err(err, errlen, -EINVAL, "volume %llu of %llu", (unsigned long long)t,
		              (unsigned long long)r->nt);
	mem = H5Screate_simple(4, count, NULL);
	if (mem < 0 || H5Sselect_hyperslab(r->space, H5S_SELECT_SET, start, NULL, count, NULL) < 0)
		rc = -1;
	else
		rc = H5Dread(r->vols, H5T_NATIVE_UINT8, mem, r->space, H5P_DEFAULT, vol);
	if (mem >= 0)
		H5Sclose(mem);
	return rc < 0 ? vr_err(err, errlen, -EIO, "/volumes: cannot read volume %llu",
	                       (unsigned long long)t)
	              : 0;
}

void fmt_h5in_close(struct fmt_h5in *r)
{
	if (!r)
		return;
	if (r->space >= 0)
		H5Sclose(r->space);
	if (r->vols >= 0)
		H5Dclose(r->vols);
	if (r->file > 0)
		H5Fclose(r->file);
	json_object_put(r->attrs);
	json_object_put(r->columns);
	free(r);
}
