/* SPDX-License-Identifier: MIT */
/*
 * HDF5 helpers shared by the `volrec` subcommands that read and write files (process, sim,
 * record, quality, calibrate): attribute writers (each returns 0 or -EIO; an existing attribute
 * of the same name is replaced), closing identifiers and writing one row of a dataset.
 */
#ifndef VOLREC_CLIENTS_H5ATTR_H
#define VOLREC_CLIENTS_H5ATTR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hdf5.h>

/* n == 0: a scalar; else a one-dimensional attribute of n values. val is of type type. */
int vr_h5_attr(hid_t obj, const char *name, hid_t type, hsize_t n, const void *val);
/* A UTF-8, NUL-terminated string. */
int vr_h5_attr_str(hid_t obj, const char *name, const char *s);
int vr_h5_attr_u32(hid_t obj, const char *name, uint32_t v);
int vr_h5_attr_u32v(hid_t obj, const char *name, const uint32_t *v, hsize_t n);
int vr_h5_attr_u64(hid_t obj, const char *name, uint64_t v);

/*
 * The units of the dataset /volumes [n][Y][X][Z] of file (docs/tools.md "Units"): its
 * attributes axes = "t,y,x,z" and voxel_size_um = [dy, dx, dz] in the order of its spatial axes
 * (float64, NaN where unknown), from um = [dx, dy, dz] (0 or NaN: unknown). 0 or -EIO.
 */
int vr_h5_volume_units(hid_t file, const double um[3]);
/* The same for the volumes [t][y][x][z] of dataset name (a channel: /angio, /doppler). */
int vr_h5_dataset_units(hid_t file, const char *name, const double um[3]);
/*
 * What the values of a channel's dataset mean (docs/formats.md "Channels"), as attributes of
 * the dataset name of file: quantity (what it is, in words), value_unit, and for 8-bit values
 * value_range [lo, hi], the values u8 0 and 255 stand for (linear between: value = lo +
 * (hi - lo) * u8 / 255; clamped outside). Each returns 0 or -EIO.
 */
/* The structure: 20 log10 of the magnitude in dB, db_range [lo, hi] mapped to 0..255. */
int vr_h5_structure_meaning(hid_t file, const char *name, const double db_range[2]);
/* Angiography of method ("cdv": 1 - the correlation of repeats, unit 1; "svar": the variance of
 * the repeats' dB, unit dB^2), range [lo, hi] mapped to 0..255; u8 false: a float v in [0, 1]
 * (lo + (hi - lo) v, the low-resolution /lowres_angio). */
int vr_h5_angio_meaning(hid_t file, const char *name, bool u8, const char *method,
                        const double range[2]);
/* Doppler phase differences Δφ of pairs of axis ("bscan": repeat to repeat, "ascan": A-scan
 * to A-scan) interval_us apart; u8: −π..π mapped to 0..255 (Δφ = 0 is 127.5, written as 128),
 * else radians (the float /lowres_doppler). The axial velocity v = λ0 Δφ / (4π n T) in mm/s
 * with wavelength_nm (λ0) and index (n) when interval_us and wavelength_nm are known (> 0),
 * else written as NaN (unknown). */
int vr_h5_doppler_meaning(hid_t file, const char *name, bool u8, const char *axis,
                          double interval_us, double wavelength_nm, double index);
/* A variable-length UTF-8 string type (the caller closes it), or a negative id. */
hid_t vr_h5_text_type(void);

/* Close each of ids[0..n) that is not negative (a file, dataset, dataspace, datatype, property
 * list or attribute), in that order: 0, or -EIO when a close failed. */
int vr_h5_close(const hid_t *ids, size_t n);
#define VR_H5_CLOSE(...)                                                                           \
	vr_h5_close((const hid_t[]){__VA_ARGS__}, sizeof((hid_t[]){__VA_ARGS__}) / sizeof(hid_t))

/* Write row i (rank dims[], one [dims...] block) of the dataset ds [rows][dims...] of type, which
 * has that row already: 0, or -EIO with errno the write's. */
int vr_h5_write_row(hid_t ds, hid_t type, unsigned rank, uint64_t i, const hsize_t *dims,
                    const void *row);

#endif
