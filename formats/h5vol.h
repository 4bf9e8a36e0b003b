/* SPDX-License-Identifier: MIT */
/*
 * The HDF5 volume writer of the `volrec` commands that write volumes (record, process): a file
 * of datasets that grow by one row per volume (/volumes [n][Y][X][Z] and its per-volume
 * columns), written so that the file on disk is complete and readable after every volume, and
 * stays so when the disk fills up (docs/operations.md, "Recording").
 *
 * How: before each volume the writer reserves the file's next bytes on the disk
 * (fallocate(FALLOC_FL_KEEP_SIZE) past HDF5's end of allocation: the volume, its chunk index
 * and a margin for the metadata written at close). When the reservation fails the volume is
 * not written (-ENOSPC/-EDQUOT/-EFBIG) and the file can still be closed in the space already
 * held. After each volume everything is flushed (H5Fflush). At close the unused reservation is
 * given back. On file systems without fallocate the free space is checked instead (statvfs),
 * which another process filling the disk can still beat. The file is written through a driver
 * with an undo journal (h5vol_vfd.h): a write that fails half way through a volume, a flush or
 * the close is undone, and the file is put back as of its last flush.
 */
#ifndef VOLREC_CLIENTS_H5VOL_H
#define VOLREC_CLIENTS_H5VOL_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hdf5.h>

#include "base/base.h"

/* Bytes kept reserved beyond the next volume for the metadata HDF5 writes by the next flush
 * and at close (chunk index, dataspaces, the attributes a caller writes at the end). */
#define H5VOL_MARGIN (1u << 20)

/* One dataset at the file's root that grows in its first dimension. */
struct h5vol_field {
	const char *name; /* dataset name, e.g. "volumes" */
	hid_t type;       /* its element type (memory and file), e.g. H5T_NATIVE_UINT8; copied */
	unsigned rank;    /* dimensions of one row: 0 (one value per row) to 3 */
	hsize_t dims[3];  /* the row's shape, dims[0..rank) */
	bool log;         /* false: one row per volume (h5vol_append); true: a table of its own
	                     length, rows added by h5vol_log (e.g. /missed) */
};

struct h5vol;

/*
 * Call once, before any other HDF5 call of the program: no HDF5 exit handler (an HDF5 object
 * left open by a failed close would crash the process in it: the program calls H5close() itself
 * after a clean h5vol_close), and no HDF5 error stack printed (h5vol's messages say what
 * failed).
 */
void h5vol_init(void);

/*
 * Create path with the fields' datasets, each of 0 rows: volumes (rank 3) and rows of 8 KiB or
 * more are one chunk each (h5py: f["volumes"].chunks == (1, Y, X, Z)), smaller rows are
 * chunked 1024 at a time.
 * replace: truncate an existing file, else fail with -EEXIST. Returns 0 with *out
 * (the caller closes it with h5vol_close) or a negative errno (the file's errno: -ENOENT,
 * -EACCES, -EEXIST, -ENOSPC, ...; -EIO for an HDF5 error) with the message in err; nothing is
 * left behind on failure (a file that was created is removed).
 */
int h5vol_create(const char *path, bool replace, const struct h5vol_field *fields, size_t nfields,
                 struct h5vol **out, char *err, size_t errlen) VR_MUST_CHECK;

/* How h5vol_create_opt stores the volumes; zero is h5vol_create's default. */
struct h5vol_options {
	unsigned deflate; /* 0: as they are; 1..9: the fields of rank 3 (the volumes) through
	                     HDF5's own shuffle then deflate (gzip) filters at this level, one
	                     chunk per volume as before (h5py: compression "gzip", shuffle) */
};

/* h5vol_create with options (opt may be NULL); -ENOTSUP when the HDF5 library lacks the
 * deflate filter. */
int h5vol_create_opt(const char *path, bool replace, const struct h5vol_field *fields,
                     size_t nfields, const struct h5vol_options *opt, struct h5vol **out, char *err,
                     size_t errlen) VR_MUST_CHECK;

/* The file, for attributes (h5attr.h). Attributes of more than H5VOL_MARGIN / 2 bytes in all
 * are best written before the first volume, or followed by h5vol_flush. */
hid_t h5vol_file(const struct h5vol *w);

/* Volumes in the file: rows written so far of the per-volume fields (after an error: as of the
 * last flush). */
uint64_t h5vol_count(const struct h5vol *w);

/*
 * Append one volume: rows[i] is the row of field i (ignored for log fields, may be NULL there).
 * Reserves the space first: -ENOSPC (or -EDQUOT, -EFBIG for the file size limit) then means the
 * volume was not written and the file holds the ones before it, and err says how much was
 * needed. Flushes the file after the volume. A write or flush that fails after the reservation
 * (a file system without fallocate, or one that cannot keep its promise) leaves the writer
 * broken (h5vol_broken): h5vol_close then puts the file back as of its last flush (the
 * journal) instead of closing it. After any error the writer is good for h5vol_close only.
 */
int h5vol_append(struct h5vol *w, const void *const *rows, char *err, size_t errlen) VR_MUST_CHECK;

/* Append one row to log field `field`; reserves, writes and flushes like h5vol_append. */
int h5vol_log(struct h5vol *w, size_t field, const void *row, char *err,
              size_t errlen) VR_MUST_CHECK;

/* Take the per-volume fields back to their first n rows (n <= h5vol_count) and flush: volumes
 * written that turn out not to belong in the file. 0 or a negative errno. */
int h5vol_truncate(struct h5vol *w, uint64_t n, char *err, size_t errlen) VR_MUST_CHECK;

/* A write or flush failed: attributes can no longer be written, h5vol_close will not close the
 * file through HDF5 (and the program must not call H5close). */
bool h5vol_broken(const struct h5vol *w);

/* Reserve the margin and flush: after attributes written between volumes. 0 or as append. */
int h5vol_flush(struct h5vol *w, char *err, size_t errlen) VR_MUST_CHECK;

/*
 * Close the datasets and the file and give back the reservation. NULL is fine. Returns 0 when
 * the file was closed cleanly, else a negative errno with the message in err (the error of
 * the write that failed, e.g. -ENOSPC, when the file could be put back as of its last flush,
 * which happens for a broken writer and for a close that failed). After a failure HDF5 may
 * still hold the file, and the caller must not call H5close() (h5vol_init removed the
 * library's own exit handler for this reason).
 */
int h5vol_close(struct h5vol *w, char *err, size_t errlen);

/* The exit code class of an errno from h5vol: true for a full disk or file size limit. */
static inline bool h5vol_is_nospace(int err)
{
	return err == -ENOSPC || err == -EDQUOT || err == -EFBIG;
}

#endif
