/* SPDX-License-Identifier: MIT */
/* HDF5 helpers of the `volrec` subcommands (h5attr.h). */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "formats/h5attr.h"

int vr_h5_attr(hid_t obj, const char *name, hid_t type, hsize_t n, const void *val)
{
	hid_t sp = n ? H5Screate_simple(1, &n, NULL) : H5Screate(H5S_SCALAR);
	hid_t a;
	int rc;

	if (sp < 0)
		return -EIO;
	if (H5Aexists(obj, name) > 0)
		H5Adelete(obj, name);
	a = H5Acreate2(obj, name, type, sp, H5P_DEFAULT, H5P_DEFAULT);
	rc = a >= 0 && H5Awrite(a, type, val) >= 0 ? 0 : -EIO;
	if (a >= 0)
		H5Aclose(a);
	H5Sclose(sp);
	return rc;
}

int vr_h5_attr_str(hid_t obj, const char *name, const char *s)
{
	hid_t t = H5Tcopy(H5T_C_S1);
	int rc;

	if (t < 0)
		return -EIO;
	H5Tset_size(t, strlen(s) + 1);
	H5Tset_strpad(t, H5T_STR_NULLTERM);
	H5Tset_cset(t, H5T_CSET_UTF8);
	rc = vr_h5_attr(obj, name, t, 0, s);
	H5Tclose(t);
	return rc;
}

int vr_h5_attr_u32(hid_t obj, const char *name, uint32_t v)
{
	return vr_h5_attr(obj, name, H5T_NATIVE_UINT32, 0, &v);
}

int vr_h5_attr_u32v(hid_t obj, const char *name, const uint32_t *v, hsize_t n)
{
	return vr_h5_attr(obj, name, H5T_NATIVE_UINT32, n, v);
}

int vr_h5_attr_u64(hid_t obj, const char *name, uint64_t v)
{
	return vr_h5_attr(obj, name, H5T_NATIVE_UINT64, 0, &v);
}

int vr_h5_volume_units(hid_t file, const double um[3])
{
	return vr_h5_dataset_units(file, "volumes", um);
}

int vr_h5_dataset_units(hid_t file, const char *name, const double um[3])
{
	hid_t ds = H5Dopen2(file, name, H5P_DEFAULT);
	/* the spatial axes in the dataset's order: y, x, z */
	double v[3] = {um[1], um[0], um[2]};
	int rc;

	if (ds < 0)
		return -EIO;
	for (int i = 0; i < 3; i++)
		if (!(v[i] > 0 && isfinite(v[i])))
			v[i] = NAN;
	rc = vr_h5_attr_str(ds, "axes", "t,y,x,z");
	if (!rc)
		rc = vr_h5_attr(ds, "voxel_size_um", H5T_NATIVE_DOUBLE, 3, v);
	if (!rc)
		rc = vr_h5_attr_str(ds, "voxel_size_order", "y,x,z (NaN: unknown)");
	H5Dclose(ds);
	return rc;
}

static int h5_attr_f64(hid_t obj, const char *name, double v)
{
	return vr_h5_attr(obj, name, H5T_NATIVE_DOUBLE, 0, &v);
}

static int h5_attr_f64v(hid_t obj, const char *name, const double *v, hsize_t n)
{
	return vr_h5_attr(obj, name, H5T_NATIVE_DOUBLE, n, v);
}

int vr_h5_structure_meaning(hid_t file, const char *name, const double db_range[2])
{
	hid_t ds = H5Dopen2(file, name, H5P_DEFAULT);
	int rc;

	if (ds < 0)
		return -EIO;
	rc = vr_h5_attr_str(ds, "quantity", "structure: 20 log10 of the OCT magnitude");
	if (!rc)
		rc = vr_h5_attr_str(ds, "value_unit", "dB");
	if (!rc)
		rc = h5_attr_f64v(ds, "value_range", db_range, 2);
	H5Dclose(ds);
	return rc;
}

int vr_h5_angio_meaning(hid_t file, const char *name, bool u8, const char *method,
                        const double range[2])
{
	const bool cdv = !strcmp(method, "cdv");
	hid_t ds = H5Dopen2(file, name, H5P_DEFAULT);
	int rc;

	if (ds < 0)
		return -EIO;
	rc = vr_h5_attr_str(ds, "quantity",
	                    cdv ? "angiography: complex differential variance (1 - the "
	                          "correlation of successive repeats)"
	                        : "angiography: speckle variance (the variance of the repeats' "
	                          "dB)");
	if (!rc)
		rc = vr_h5_attr_str(ds, "angio_method", method);
	if (!rc)
		rc = vr_h5_attr_str(ds, "value_unit", cdv ? "1" : "dB^2");
	if (!rc)
		rc = h5_attr_f64v(ds, "value_range", range, 2);
	if (!rc && !u8)
		rc = vr_h5_attr_str(ds, "value_encoding",
		                    "v in [0, 1]: value_range[0] + (value_range[1] - "
		                    "value_range[0]) * v");
	H5Dclose(ds);
	return rc;
}

int vr_h5_doppler_meaning(hid_t file, const char *name, bool u8, const char *axis,
                          double interval_us, double wavelength_nm, double index)
{
	const double pi = 3.14159265358979323846, phase[2] = {-pi, pi};
	const bool known = interval_us > 0 && wavelength_nm > 0 && index > 0;
	/* v = λ0 Δφ / (4π n T): nm over us is mm/s */
	const double k = known ? wavelength_nm / (4 * pi * index * interval_us) : NAN;
	const double vr[2] = {-pi * k, pi * k};
	hid_t ds = H5Dopen2(file, name, H5P_DEFAULT);
	int rc;

	if (ds < 0)
		return -EIO;
	rc = vr_h5_attr_str(ds, "quantity",
	                    "Doppler: the phase difference of successive acquisitions (Kasai), "
	                    "positive for motion away from the probe");
	if (!rc)
		rc = vr_h5_attr_str(ds, "value_unit", "rad");
	if (!rc && u8)
		rc = h5_attr_f64v(ds, "value_range", phase, 2);
	if (!rc)
		rc = vr_h5_attr_str(ds, "doppler_axis", axis);
	if (!rc)
		rc = h5_attr_f64(ds, "doppler_interval_us", interval_us > 0 ? interval_us : NAN);
	if (!rc)
		rc = h5_attr_f64(ds, "center_wavelength_nm",
		                 wavelength_nm > 0 ? wavelength_nm : NAN);
	if (!rc)
		rc = h5_attr_f64(ds, "refractive_index", index);
	if (!rc)
		rc = h5_attr_f64(ds, "velocity_mm_s_per_rad", k);
	if (!rc && u8)
		rc = h5_attr_f64v(ds, "velocity_range_mm_s", vr, 2);
	H5Dclose(ds);
	return rc;
}

hid_t vr_h5_text_type(void)
{
	hid_t t = H5Tcopy(H5T_C_S1);

	if (t >= 0 && (H5Tset_size(t, H5T_VARIABLE) < 0 || H5Tset_cset(t, H5T_CSET_UTF8) < 0)) {
		H5Tclose(t);
		return -1;
	}
	return t;
}

int vr_h5_close(const hid_t *ids, size_t n)
{
	static const struct {
		H5I_type_t type;
		herr_t (*close)(hid_t);
	} closes[] = {{H5I_FILE, H5Fclose},        {H5I_DATASET, H5Dclose},
	              {H5I_DATASPACE, H5Sclose},   {H5I_DATATYPE, H5Tclose},
	              {H5I_GENPROP_LST, H5Pclose}, {H5I_ATTR, H5Aclose}};
	int rc = 0;

	for (size_t i = 0; i < n; i++) {
		H5I_type_t type = ids[i] < 0 ? H5I_BADID : H5Iget_type(ids[i]);
		size_t k = 0;

		if (type == H5I_BADID)
			continue;
		while (k < sizeof(closes) / sizeof(closes[0]) && closes[k].type != type)
			k++;
		if ((k < sizeof(closes) / sizeof(closes[0]) ? closes[k].close(ids[i])
		                                            : H5Idec_ref(ids[i])) < 0)
			rc = -EIO;
	}
	return rc;
}

int vr_h5_write_row(hid_t ds, hid_t type, unsigned rank, uint64_t i, const hsize_t *dims,
                    const void *row)
{
	hsize_t start[H5S_MAX_RANK] = {i}, count[H5S_MAX_RANK] = {1};
	hid_t fs, ms;
	int rc = -EIO, e;

	for (unsigned k = 0; k < rank; k++)
		count[k + 1] = dims[k];
	fs = H5Dget_space(ds);
	ms = H5Screate_simple((int)rank + 1, count, NULL);
	if (fs >= 0 && ms >= 0 &&
	    H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL) >= 0 &&
	    H5Dwrite(ds, type, ms, fs, H5P_DEFAULT, row) >= 0)
		rc = 0;
	e = errno;
	VR_H5_CLOSE(ms, fs);
	errno = e;
	return rc;
}
