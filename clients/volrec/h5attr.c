/* SPDX-License-Identifier: MIT */
/* HDF5 attribute writers of the `volrec` subcommands (h5attr.h). */
#include <errno.h>
#include <string.h>

#include "h5attr.h"

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
