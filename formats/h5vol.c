/* SPDX-License-Identifier: MIT */
/* The HDF5 volume writer shared by `volrec record` and `volrec process` (h5vol.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "formats/h5attr.h"
#include "formats/h5vol.h"
#include "formats/h5vol_vfd.h"

#define H5VOL_SMALL_ROW  8192u /* rows smaller than this are chunked H5VOL_CHUNK_ROWS at once */
#define H5VOL_CHUNK_ROWS 1024u

struct h5vol_ds {
	hid_t ds, type;
	unsigned rank;   /* of one row */
	hsize_t dims[3]; /* of one row */
	size_t row_bytes;
	bool log;
	uint64_t rows; /* log fields: rows written */
};

struct h5vol {
	char path[PATH_MAX];
	hid_t f;
	struct h5vol_ds *fld;
	size_t nfld;
	uint64_t count;         /* volumes written */
	size_t volume_bytes;    /* bytes of one h5vol_append */
	int fd;                 /* the sec2 driver's descriptor (HDF5 owns it) */
	uint64_t reserved;      /* [0, reserved) of the file is allocated on the disk */
	bool no_fallocate;      /* the file system cannot reserve: check statvfs instead */
	bool broken;            /* a write or flush failed: HDF5's state may not reach the disk */
	int fault;              /* the error that broke it */
	uint64_t flushed;       /* volumes in the file as of the last successful flush */
	struct h5vol_journal j; /* the file as of that flush, for putting it back (h5vol_vfd.h) */
};

/* The errno an HDF5 call left (the sec2 driver's system call), as a negative errno. */
static int h5_errno(int e)
{
	return e > 0 ? -e : -EIO;
}

/* A failed HDF5 call: its errno (e) when it left one, else "HDF5 error". */
static int VR_PRINTF(4, 5) fail_errno(char *err, size_t errlen, int e, const char *fmt, ...)
{
	char what[PATH_MAX + 128];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	if (e > 0)
		return vr_err_errno(err, errlen, -e, "%s", what);
	return vr_err(err, errlen, -EIO, "%s: HDF5 error", what);
}

/* ---- reserving the file's next bytes on the disk -------------------------------------- */

static void free_space(const char *path, double *mib)
{
	char dir[PATH_MAX], *slash;
	struct statvfs v;

	snprintf(dir, sizeof(dir), "%s", path);
	slash = strrchr(dir, '/');
	if (slash)
		*(slash == dir ? slash + 1 : slash) = '\0';
	else
		snprintf(dir, sizeof(dir), ".");
	*mib = statvfs(dir, &v) == 0 ? (double)v.f_bavail * (double)v.f_frsize / 1048576.0 : -1;
}

static int nospace(struct h5vol *w, int code, uint64_t need, char *err, size_t errlen)
{
	double mib;

	free_space(w->path, &mib);
	if (code == -EDQUOT)
		return vr_err(err, errlen, code,
		              "%s: disk quota exceeded (the next volume needs %.1f MiB with the "
		              "file's metadata)",
		              w->path, (double)need / 1048576.0);
	return vr_err(err, errlen, code,
	              "%s: disk full (%.1f MiB free, the next volume needs %.1f MiB with the "
	              "file's metadata)",
	              w->path, mib < 0 ? 0.0 : mib, (double)need / 1048576.0);
}

/* Make sure `bytes` more (and the margin) past HDF5's end of allocation are on the disk. */
static int reserve(struct h5vol *w, size_t bytes, char *err, size_t errlen)
{
	uint64_t need = (uint64_t)bytes + H5VOL_MARGIN, target;
	haddr_t eoa;
	struct rlimit rl;

	if (H5Fget_eoa(w->f, &eoa) < 0)
		return vr_err(err, errlen, -EIO, "%s: cannot read the end of allocation", w->path);
	target = (uint64_t)eoa + need;
	if (getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    target > (uint64_t)rl.rlim_cur)
		return vr_err(err, errlen, -EFBIG,
		              "%s: file size limit reached (ulimit -f: %llu bytes; the file has "
		              "%llu, the next volume needs %llu more with the file's metadata)",
		              w->path, (unsigned long long)rl.rlim_cur, (unsigned long long)eoa,
		              (unsigned long long)need);
	if (!w->no_fallocate) {
		if (target <= w->reserved)
			return 0;
		for (;;) {
			if (fallocate(w->fd, FALLOC_FL_KEEP_SIZE, (off_t)w->reserved,
			              (off_t)(target - w->reserved)) == 0) {
				w->reserved = target;
				return 0;
			}
			if (errno != EINTR)
				break;
		}
		if (errno == ENOSPC || errno == EDQUOT)
			return nospace(w, -errno, need, err, errlen);
		if (errno == EFBIG)
			return vr_err(err, errlen, -EFBIG, "%s: file too large for its file system",
			              w->path);
		if (errno != EOPNOTSUPP && errno != ENOSYS)
			return vr_err_errno(err, errlen, -errno, "%s: cannot reserve disk space",
			                    w->path);
		w->no_fallocate = true;
	}
	double mib;
	free_space(w->path, &mib);
	if (mib >= 0 && mib * 1048576.0 < (double)need)
		return nospace(w, -ENOSPC, need, err, errlen);
	return 0;
}

/*
 * Flush, then commit the journal: the file as it is now is the one a later failure goes back
 * to. (The driver never makes the file shorter between volumes, so the space reserved past its
 * end stays reserved.)
 */
static int flush(struct h5vol *w, char *err, size_t errlen)
{
	haddr_t eoa;
	int rc;

	errno = 0;
	if (H5Fflush(w->f, H5F_SCOPE_LOCAL) < 0)
		rc = fail_errno(err, errlen, errno, "%s: flush failed", w->path);
	else if (H5Fget_eoa(w->f, &eoa) < 0)
		rc = vr_err(err, errlen, -EIO, "%s: cannot read the end of allocation", w->path);
	/* the in-place writes reach the file; then it is the one to go back to */
	else if ((rc = h5vol_journal_commit(&w->j, (uint64_t)eoa)) != 0)
		rc = fail_errno(err, errlen, -rc, "%s: flush failed", w->path);
	if (rc) {
		w->broken = true;
		return w->fault = rc;
	}
	w->flushed = w->count;
	return 0;
}

/* ---- datasets ------------------------------------------------------------------------- */

static hid_t create_dataset(hid_t f, const struct h5vol_field *fl, size_t row_bytes,
                            unsigned deflate)
{
	hsize_t cur[4] = {0}, maxd[4] = {H5S_UNLIMITED}, chunk[4];
	hid_t sp, pl, apl, ds = -1;

	/* a volume is what a reader reads: one chunk, however small */
	chunk[0] = fl->rank == 3 || row_bytes >= H5VOL_SMALL_ROW ? 1 : H5VOL_CHUNK_ROWS;
	for (unsigned i = 0; i < fl->rank; i++)
		cur[i + 1] = maxd[i + 1] = chunk[i + 1] = fl->dims[i];
	sp = H5Screate_simple((int)fl->rank + 1, cur, maxd);
	pl = H5Pcreate(H5P_DATASET_CREATE);
	apl = H5Pcreate(H5P_DATASET_ACCESS);
	/* no chunk cache: every row reaches the file at once, so errors show at once */
	if (fl->rank != 3)
		deflate = 0;
	if (sp >= 0 && pl >= 0 && apl >= 0 && H5Pset_chunk(pl, (int)fl->rank + 1, chunk) >= 0 &&
	    H5Pset_chunk_cache(apl, 0, 0, 1.0) >= 0 &&
	    (!deflate || (H5Pset_shuffle(pl) >= 0 && H5Pset_deflate(pl, deflate) >= 0)))
		ds = H5Dcreate2(f, fl->name, fl->type, sp, H5P_DEFAULT, pl, apl);
	VR_H5_CLOSE(apl, pl, sp);
	return ds;
}

static int set_rows(const struct h5vol_ds *d, uint64_t n)
{
	hsize_t dims[4] = {n, d->dims[0], d->dims[1], d->dims[2]};

	return H5Dset_extent(d->ds, dims) < 0 ? -EIO : 0;
}

/* Grow d to i + 1 rows and write row i. errno is the write's when it fails. */
static int write_row(const struct h5vol_ds *d, uint64_t i, const void *row)
{
	if (set_rows(d, i + 1))
		return -EIO;
	return vr_h5_write_row(d->ds, d->type, d->rank, i, d->dims, row);
}

/* ---- the writer ----------------------------------------------------------------------- */

void h5vol_init(void)
{
	/* before the library initializes itself: it registers its exit handler then */
	H5dont_atexit();
	H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

int h5vol_create(const char *path, bool replace, const struct h5vol_field *fields, size_t nfields,
                 struct h5vol **out, char *err, size_t errlen)
{
	return h5vol_create_opt(path, replace, fields, nfields, NULL, out, err, errlen);
}

int h5vol_create_opt(const char *path, bool replace, const struct h5vol_field *fields,
                     size_t nfields, const struct h5vol_options *opt, struct h5vol **out, char *err,
                     size_t errlen)
{
	unsigned deflate = opt ? opt->deflate : 0;

	struct h5vol *w;
	hid_t fapl = -1;
	void *handle = NULL;
	int fd, rc;

	if (!path || !*path || strlen(path) >= PATH_MAX || !fields || !nfields || !out)
		return vr_err(err, errlen, -EINVAL, "h5vol_create: bad arguments");
	for (size_t i = 0; i < nfields; i++)
		if (!fields[i].name || fields[i].rank > 3)
			return vr_err(err, errlen, -EINVAL, "h5vol_create: bad field %zu", i);
	if (deflate > 9)
		return vr_err(err, errlen, -EINVAL, "h5vol_create: deflate level %u", deflate);
	if (deflate && H5Zfilter_avail(H5Z_FILTER_DEFLATE) <= 0)
		return vr_err(err, errlen, -ENOTSUP, "this HDF5 library has no deflate filter");
	/* the file itself first, for a precise errno (HDF5's is not reliable after its retries) */
	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | (replace ? O_TRUNC : O_EXCL), 0666);
	if (fd < 0) {
		if (errno == EEXIST)
			return vr_err(err, errlen, -EEXIST, "%s exists", path);
		return vr_err_errno(err, errlen, -errno, "cannot create %s", path);
	}
	close(fd);

	w = calloc(1, sizeof(*w));
	if (!w || !(w->fld = calloc(nfields, sizeof(*w->fld)))) {
		free(w);
		unlink(path);
		return vr_err(err, errlen, -ENOMEM, "out of memory");
	}
	snprintf(w->path, sizeof(w->path), "%s", path);
	w->f = -1;
	w->j.fd = -1;
	w->nfld = nfields;
	for (size_t i = 0; i < nfields; i++)
		w->fld[i].ds = w->fld[i].type = -1;

	/* the journaling driver; strong close: closing the file closes whatever is open in it */
	fapl = h5vol_vfd_fapl(&w->j);
	errno = 0;
	if (fapl < 0) {
		rc = vr_err(err, errlen, -EIO, "%s: cannot set up the HDF5 file access", path);
		goto out_fail;
	}
	w->f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
	if (w->f < 0) {
		rc = fail_errno(err, errlen, errno, "cannot create %s", path);
		goto out_fail;
	}
	if (H5Fget_vfd_handle(w->f, fapl, &handle) < 0 || !handle) {
		rc = vr_err(err, errlen, -EIO, "%s: no file descriptor from HDF5", path);
		goto out_fail;
	}
	w->fd = *(int *)handle;
	w->j.fd = fcntl(w->fd, F_DUPFD_CLOEXEC, 0);
	if (w->j.fd < 0) {
		rc = vr_err_errno(err, errlen, -errno, "%s: cannot keep a descriptor", path);
		goto out_fail;
	}
	for (size_t i = 0; i < nfields; i++) {
		struct h5vol_ds *d = &w->fld[i];
		size_t n = 1;

		d->rank = fields[i].rank;
		d->log = fields[i].log;
		for (unsigned k = 0; k < 3; k++)
			d->dims[k] = k < d->rank ? fields[i].dims[k] : 1;
		for (unsigned k = 0; k < d->rank; k++)
			n *= (size_t)d->dims[k];
		d->type = H5Tcopy(fields[i].type);
		d->row_bytes = d->type >= 0 ? n * H5Tget_size(d->type) : 0;
		errno = 0;
		d->ds = d->type >= 0 ? create_dataset(w->f, &fields[i], d->row_bytes, deflate) : -1;
		if (d->ds < 0) {
			rc = fail_errno(err, errlen, errno, "%s: cannot create its datasets", path);
			goto out_fail;
		}
		if (!d->log)
			w->volume_bytes += d->row_bytes;
	}
	rc = reserve(w, 0, err, errlen);
	if (!rc)
		rc = flush(w, err, errlen);
	if (rc)
		goto out_fail;
	H5Pclose(fapl);
	*out = w;
	return 0;

out_fail:
	if (fapl >= 0)
		H5Pclose(fapl);
	h5vol_close(w, NULL, 0);
	unlink(path);
	return rc;
}

hid_t h5vol_file(const struct h5vol *w)
{
	return w->f;
}

uint64_t h5vol_count(const struct h5vol *w)
{
	return w->broken ? w->flushed : w->count;
}

int h5vol_append(struct h5vol *w, const void *const *rows, char *err, size_t errlen)
{
	int rc = reserve(w, w->volume_bytes, err, errlen);

	if (rc)
		return rc;
	for (size_t i = 0; i < w->nfld; i++) {
		if (w->fld[i].log)
			continue;
		errno = 0;
		if (write_row(&w->fld[i], w->count, rows[i])) {
			int e = errno;

			/* whatever HDF5 holds now may not reach the disk: the file stays as flushed */
			w->broken = true;
			rc = w->fault = h5_errno(e);
			if (h5vol_is_nospace(rc))
				return nospace(w, rc, w->volume_bytes + H5VOL_MARGIN, err, errlen);
			return fail_errno(err, errlen, e, "%s: writing a volume failed", w->path);
		}
	}
	w->count++;
	return flush(w, err, errlen);
}

int h5vol_log(struct h5vol *w, size_t field, const void *row, char *err, size_t errlen)
{
	struct h5vol_ds *d;
	int rc;

	if (field >= w->nfld || !w->fld[field].log)
		return vr_err(err, errlen, -EINVAL, "h5vol_log: field %zu is not a log", field);
	d = &w->fld[field];
	rc = reserve(w, d->row_bytes, err, errlen);
	if (rc)
		return rc;
	errno = 0;
	if (write_row(d, d->rows, row)) {
		int e = errno;

		w->broken = true;
		w->fault = h5_errno(e);
		if (h5vol_is_nospace(h5_errno(e)))
			return nospace(w, h5_errno(e), d->row_bytes + H5VOL_MARGIN, err, errlen);
		return fail_errno(err, errlen, e, "%s: writing a row failed", w->path);
	}
	d->rows++;
	return flush(w, err, errlen);
}

int h5vol_truncate(struct h5vol *w, uint64_t n, char *err, size_t errlen)
{
	if (n > w->count)
		return vr_err(err, errlen, -EINVAL, "h5vol_truncate: %llu rows of %llu",
		              (unsigned long long)n, (unsigned long long)w->count);
	for (size_t i = 0; i < w->nfld; i++)
		if (!w->fld[i].log && set_rows(&w->fld[i], n)) {
			w->broken = true;
			return w->fault = vr_err(err, errlen, -EIO,
			                         "%s: cannot shrink the datasets", w->path);
		}
	w->count = n;
	return flush(w, err, errlen);
}

int h5vol_flush(struct h5vol *w, char *err, size_t errlen)
{
	int rc = reserve(w, 0, err, errlen);

	return rc ? rc : flush(w, err, errlen);
}

bool h5vol_broken(const struct h5vol *w)
{
	return w->broken;
}

/*
 * After a failed write, flush or close, HDF5's cache may hold metadata that would not fit on the
 * disk, and part of what it rewrote in place may be on the disk already (the superblock, object
 * headers, chunk indexes pointing at blocks never written): closing would write more of it. Put
 * the file back as of the last flush instead (the journal: the old bytes of every write since,
 * then cut to its end then), refuse whatever HDF5 writes later, and leave HDF5 alone (the
 * program exits without H5close): the file holds the volumes flushed then, as they were flushed.
 * `what` says what failed, code is its error (returned when the file could be put back).
 */
static int abandon(struct h5vol *w, const char *what, int code, char *err, size_t errlen)
{
	int rc = h5vol_journal_restore(&w->j);

	if (rc)
		return vr_err_errno(err, errlen, rc,
		                    "%s: %s, and putting it back as of its last flush failed (it "
		                    "may not be readable)",
		                    w->path, what);
	return vr_err(err, errlen, code < 0 ? code : -EIO,
	              "%s: %s; it holds the %llu volumes written before it, without its closing "
	              "attributes",
	              w->path, what, (unsigned long long)w->flushed);
}

int h5vol_close(struct h5vol *w, char *err, size_t errlen)
{
	int rc = 0, e = 0;

	if (!w)
		return 0;
	if (w->broken) {
		rc = abandon(w, "not closed after the write error", w->fault, err, errlen);
		goto out_free;
	}
	for (size_t i = 0; i < w->nfld; i++) {
		errno = 0;
		if (w->fld[i].ds >= 0 && H5Dclose(w->fld[i].ds) < 0 && !rc) {
			e = errno;
			rc = fail_errno(err, errlen, e, "%s: closing a dataset failed", w->path);
		}
		if (w->fld[i].type >= 0)
			H5Tclose(w->fld[i].type);
	}
	if (w->f >= 0) {
		errno = 0;
		if (H5Fclose(w->f) < 0) {
			if (!rc) {
				e = errno;
				rc = fail_errno(err, errlen, e, "closing %s failed", w->path);
			}
		} else if (!rc && (e = -h5vol_journal_commit(&w->j, w->j.mark)) > 0) {
			/* the close's in-place writes (h5vol_vfd.h) */
			rc = fail_errno(err, errlen, e, "closing %s failed", w->path);
		} else if (!rc && w->reserved) {
			/* give back what was reserved past the end and not used */
			int fd = open(w->path, O_WRONLY | O_CLOEXEC);
			struct stat st;

			if (fd >= 0 && fstat(fd, &st) == 0 && (uint64_t)st.st_size < w->reserved)
				(void)fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
				                st.st_size,
				                (off_t)(w->reserved - (uint64_t)st.st_size));
			if (fd >= 0)
				close(fd);
		}
	}
	if (rc && w->j.mark) {
		/* part of the close may be on the disk: back to the last flush */
		char why[128];

		snprintf(why, sizeof(why), "closing it failed (%s)",
		         e > 0 ? strerror(e) : "HDF5 error");
		rc = abandon(w, why, rc, err, errlen);
	}
out_free:
	h5vol_journal_free(&w->j);
	free(w->fld);
	free(w);
	return rc;
}
