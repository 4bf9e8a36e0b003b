/* SPDX-License-Identifier: MIT */
/*
 * HDF5 attribute writers shared by the `volrec` subcommands that write files (process, sim,
 * record). Each returns 0 or -EIO; an existing attribute of the same name is replaced.
 */
#ifndef VOLREC_CLIENTS_H5ATTR_H
#define VOLREC_CLIENTS_H5ATTR_H

#include <stdint.h>

#include <hdf5.h>

/* n == 0: a scalar; else a one-dimensional attribute of n values. val is of type type. */
int vr_h5_attr(hid_t obj, const char *name, hid_t type, hsize_t n, const void *val);
/* A UTF-8, NUL-terminated string. */
int vr_h5_attr_str(hid_t obj, const char *name, const char *s);
int vr_h5_attr_u32(hid_t obj, const char *name, uint32_t v);
int vr_h5_attr_u32v(hid_t obj, const char *name, const uint32_t *v, hsize_t n);
int vr_h5_attr_u64(hid_t obj, const char *name, uint64_t v);

#endif
