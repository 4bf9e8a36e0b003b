/* SPDX-License-Identifier: MIT */
/* h5vol's file driver: sec2's pread/pwrite; in-place writes held to the commit, with an undo
 * journal (h5vol_vfd.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <H5FDpublic.h>

#include "formats/h5vol_vfd.h"

/* The file driver interface this driver fills (H5FD_class_t and its callbacks) is that of HDF5
 * 1.10.0 and every 1.10 release after it; 1.12 adds the class's value, 1.14 its version and new
 * callbacks. A build against another HDF5 stops here, saying which it needs. */
#if !H5_VERSION_GE(1, 10, 0) || H5_VERSION_GE(1, 11, 0)
#error "formats/h5vol_vfd.c: needs HDF5 1.10.x (its file driver interface); this HDF5 is older or newer (H5_VERS_INFO in H5public.h): install HDF5 1.10 (Debian 12: libhdf5-dev)"
#endif

/* the largest range of object headers written at once (h5vol_journal_commit) */
#define VFD_HEADERS_MAX (256u * 1024u)

/* the largest address: what fits in off_t, as sec2 has it */
#define VFD_MAXADDR (((haddr_t)1 << (8 * sizeof(off_t) - 1)) - 1)

struct h5vol_span {
	uint64_t addr;
	size_t len;
	unsigned char *buf; /* undo: the old bytes; held: the new ones */
	H5FD_mem_t type;    /* held: what HDF5 wrote there */
	uint64_t order;     /* held object headers far apart: header_order() */
};

/* an object header chunk: the file's bytes HDF5 has written as one, and when it first did */
struct h5vol_header {
	uint64_t addr;
	uint64_t len;
	uint64_t born; /* h5vol_journal.born at its first write */
};

struct vfd_info {
	struct h5vol_journal *j;
};

struct vfd_file {
	H5FD_t pub; /* first: HDF5's part */
	int fd;
	haddr_t eoa, eof;
	dev_t dev;
	ino_t ino;
	struct h5vol_journal *j;
};

static const H5FD_class_t vfd_class;
static hid_t vfd_id = H5I_INVALID_HID;

static int pwrite_all(int fd, const void *buf, size_t len, uint64_t off)
{
	while (len) {
		ssize_t n = pwrite(fd, buf, len > (size_t)SSIZE_MAX ? (size_t)SSIZE_MAX : len,
		                   (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO;
		buf = (const char *)buf + n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

/* Room for one more span in *v (n used, *cap allocated). 0 or -ENOMEM. */
static int spans_grow(struct h5vol_span **v, size_t n, size_t *cap)
{
	struct h5vol_span *u;
	size_t c;

	if (n < *cap)
		return 0;
	c = *cap ? 2 * *cap : 64;
	u = realloc(*v, c * sizeof(*u));
	if (!u)
		return -ENOMEM;
	*v = u;
	*cap = c;
	return 0;
}

/* Keep the old bytes of [addr, addr + len) (all below the mark). 0 or a negative errno. */
static int journal_save(struct h5vol_journal *j, int fd, uint64_t addr, size_t len)
{
	struct h5vol_span *u;
	ssize_t got;

	if (spans_grow(&j->undo, j->n, &j->cap))
		return -ENOMEM;
	u = &j->undo[j->n];
	u->buf = malloc(len);
	if (!u->buf)
		return -ENOMEM;
	got = vr_pread_upto(fd, u->buf, len, addr);
	if (got < 0) {
		free(u->buf);
		return (int)got;
	}
	memset(u->buf + got, 0, len - (size_t)got); /* past the end: the file held zeros */
	u->addr = addr;
	u->len = len;
	j->bytes += len;
	j->n++;
	return 0;
}

static void journal_drop(struct h5vol_journal *j)
{
	for (size_t i = 0; i < j->n; i++)
		free(j->undo[i].buf);
	j->n = 0;
	j->bytes = 0;
}

static void held_drop(struct h5vol_journal *j)
{
	for (size_t i = 0; i < j->nheld; i++)
		free(j->held[i].buf);
	j->nheld = 0;
}

/*
 * An object header chunk [addr, addr + len) is written: note when it was first (the chunks it
 * overlaps become one, as old as the oldest). HDF5 numbers the chunks of a header in the order
 * it creates them (a new one goes last; h5vol creates its file and never reopens it), which is
 * the order in which the driver first sees them written. 0 or -ENOMEM.
 */
static int header_note(struct h5vol_journal *j, uint64_t addr, size_t len)
{
	uint64_t lo = addr, hi = addr + len, born = j->born + 1;
	size_t k = 0;

	for (size_t i = 0; i < j->nhdr; i++) {
		const struct h5vol_header *h = &j->hdr[i];

		if (h->addr <= addr && h->addr + h->len >= addr + len)
			return 0; /* (the usual case: a chunk written again) */
		if (h->addr < hi && h->addr + h->len > lo) {
			lo = h->addr < lo ? h->addr : lo;
			hi = h->addr + h->len > hi ? h->addr + h->len : hi;
			born = h->born < born ? h->born : born;
		} else {
			j->hdr[k++] = *h;
		}
	}
	if (k == j->nhdr && k == j->caphdr) {
		size_t c = j->caphdr ? 2 * j->caphdr : 64;
		struct h5vol_header *u = realloc(j->hdr, c * sizeof(*u));

		if (!u)
			return -ENOMEM;
		j->hdr = u;
		j->caphdr = c;
	}
	if (born > j->born)
		j->born = born;
	j->hdr[k++] = (struct h5vol_header){lo, hi - lo, born};
	j->nhdr = k;
	return 0;
}

/* When the header chunk at [addr, addr + len) was first written (0: never seen). */
static uint64_t header_born(const struct h5vol_journal *j, uint64_t addr, size_t len)
{
	uint64_t born = 0;

	for (size_t i = 0; i < j->nhdr; i++) {
		const struct h5vol_header *h = &j->hdr[i];

		if (h->addr < addr + len && h->addr + h->len > addr && (!born || h->born < born))
			born = h->born;
	}
	return born;
}

/*
 * Hold a write of [addr, addr + len) below the mark. The held spans stay disjoint: the ones it
 * overlaps are merged into it, its bytes over theirs. 0 or -ENOMEM.
 */
static int held_add(struct h5vol_journal *j, H5FD_mem_t type, uint64_t addr, size_t len,
                    const void *buf)
{
	uint64_t lo = addr, hi = addr + len;
	unsigned char *b;
	size_t k = 0;

	for (size_t i = 0; i < j->nheld; i++) {
		const struct h5vol_span *h = &j->held[i];

		if (h->addr < addr + len && h->addr + h->len > addr) {
			lo = h->addr < lo ? h->addr : lo;
			hi = h->addr + h->len > hi ? h->addr + h->len : hi;
		}
	}
	if (spans_grow(&j->held, j->nheld, &j->capheld))
		return -ENOMEM;
	b = malloc((size_t)(hi - lo));
	if (!b)
		return -ENOMEM;
	for (size_t i = 0; i < j->nheld; i++) {
		struct h5vol_span *h = &j->held[i];

		if (h->addr < addr + len && h->addr + h->len > addr) {
			memcpy(b + (h->addr - lo), h->buf, h->len);
			free(h->buf);
			if (h->type == H5FD_MEM_OHDR || h->type == H5FD_MEM_SUPER)
				type = h->type; /* (the order below keeps to the stricter one) */
		} else {
			j->held[k++] = *h;
		}
	}
	memcpy(b + (addr - lo), buf, len);
	j->held[k++] = (struct h5vol_span){lo, (size_t)(hi - lo), b, type, 0};
	j->nheld = k;
	return 0;
}

/* The held bytes over what was read of [addr, addr + size). */
static void held_overlay(const struct h5vol_journal *j, uint64_t addr, size_t size, void *buf)
{
	for (size_t i = 0; i < j->nheld; i++) {
		const struct h5vol_span *h = &j->held[i];
		uint64_t lo = h->addr > addr ? h->addr : addr;
		uint64_t hi = h->addr + h->len < addr + size ? h->addr + h->len : addr + size;

		if (lo < hi)
			memcpy((char *)buf + (lo - addr), h->buf + (lo - h->addr),
			       (size_t)(hi - lo));
	}
}

/* Held spans past end are gone with the file's tail: cut them there. */
static void held_cut(struct h5vol_journal *j, uint64_t end)
{
	size_t k = 0;

	for (size_t i = 0; i < j->nheld; i++) {
		struct h5vol_span *h = &j->held[i];

		if (h->addr >= end) {
			free(h->buf);
			continue;
		}
		if (h->addr + h->len > end)
			h->len = (size_t)(end - h->addr);
		j->held[k++] = *h;
	}
	j->nheld = k;
}

/* The commit's order: the superblock first, then from the end of the file down; the object
 * headers last (h5vol_journal_commit). */
static int held_order(const void *a, const void *b)
{
	const struct h5vol_span *x = a, *y = b;
	int px = x->type == H5FD_MEM_SUPER ? 0 : x->type == H5FD_MEM_OHDR ? 2 : 1;
	int py = y->type == H5FD_MEM_SUPER ? 0 : y->type == H5FD_MEM_OHDR ? 2 : 1;

	if (px != py)
		return px < py ? -1 : 1;
	if (x->addr == y->addr)
		return 0;
	return x->addr > y->addr ? -1 : 1;
}

/*
 * The place of an object header chunk in the commit when the chunks cannot go in one write: first
 * the chunks new since the last commit (nothing on the file points at them yet), the newest first
 * (an older one may point at it); then the others as HDF5 created them, the oldest first. HDF5
 * moves a message only into an earlier chunk of its header (condensing the header after a message
 * was removed: an attribute rewritten), so the chunk it moves to is written before the one it
 * leaves: a kill in between leaves the message twice, never nowhere.
 */
static uint64_t header_order(const struct h5vol_journal *j, const struct h5vol_span *h)
{
	uint64_t born = header_born(j, h->addr, h->len);

	if (!born || born > j->born_mark)
		return born ? UINT64_MAX / 2 - born : 0;
	return UINT64_MAX / 2 + born;
}

static int order_cmp(const void *a, const void *b)
{
	const struct h5vol_span *x = a, *y = b;

	if (x->order != y->order)
		return x->order < y->order ? -1 : 1;
	if (x->addr == y->addr)
		return 0;
	return x->addr < y->addr ? -1 : 1;
}

/* Write [addr, addr + len) from buf, its old bytes kept. 0 or a negative errno. */
static int commit_write(struct h5vol_journal *j, uint64_t addr, size_t len, const void *buf)
{
	int rc = journal_save(j, j->fd, addr, len);

	if (rc) {
		j->error = rc;
		return rc;
	}
	rc = pwrite_all(j->fd, buf, len, addr);
	if (!rc)
		j->writes++;
	return rc;
}

/*
 * The object headers held[first, last) in one write over the range they span, the bytes between
 * them as the file holds them.
 */
static int commit_range(struct h5vol_journal *j, size_t first, size_t last)
{
	uint64_t lo = UINT64_MAX, hi = 0;
	unsigned char *b;
	ssize_t got;
	int rc;

	if (last == first + 1)
		return commit_write(j, j->held[first].addr, j->held[first].len, j->held[first].buf);
	for (size_t i = first; i < last; i++) {
		lo = j->held[i].addr < lo ? j->held[i].addr : lo;
		hi = j->held[i].addr + j->held[i].len > hi ? j->held[i].addr + j->held[i].len : hi;
	}
	b = malloc((size_t)(hi - lo));
	if (!b)
		return -ENOMEM;
	got = vr_pread_upto(j->fd, b, (size_t)(hi - lo), lo);
	if (got < 0) {
		free(b);
		return (int)got;
	}
	memset(b + got, 0, (size_t)(hi - lo) - (size_t)got);
	for (size_t i = first; i < last; i++)
		memcpy(b + (j->held[i].addr - lo), j->held[i].buf, j->held[i].len);
	rc = commit_write(j, lo, (size_t)(hi - lo), b);
	free(b);
	return rc;
}

/*
 * The object headers held[first, nheld) (after all else): in one write when they lie within
 * VFD_HEADERS_MAX (every dataset's new extent at once: the datasets' headers lie together at the
 * file's start). Chunks far apart (the root group's attributes at the close: a chunk added after
 * the first volume, one at the end) go in header_order(), the old ones that lie close together
 * in that order still in one write.
 */
static int commit_headers(struct h5vol_journal *j, size_t first)
{
	uint64_t lo = UINT64_MAX, hi = 0;
	size_t i;
	int rc = 0;

	if (first == j->nheld)
		return 0;
	for (i = first; i < j->nheld; i++) {
		lo = j->held[i].addr < lo ? j->held[i].addr : lo;
		hi = j->held[i].addr + j->held[i].len > hi ? j->held[i].addr + j->held[i].len : hi;
	}
	if (hi - lo <= VFD_HEADERS_MAX)
		return commit_range(j, first, j->nheld);
	for (i = first; i < j->nheld; i++)
		j->held[i].order = header_order(j, &j->held[i]);
	qsort(j->held + first, j->nheld - first, sizeof(*j->held), order_cmp);
	for (i = first; i < j->nheld && !rc;) {
		size_t k = i + 1;

		lo = j->held[i].addr;
		hi = lo + j->held[i].len;
		/* old chunks next in the order and near: together */
		while (j->held[i].order > UINT64_MAX / 2 && k < j->nheld) {
			const struct h5vol_span *h = &j->held[k];
			uint64_t l = h->addr < lo ? h->addr : lo;
			uint64_t e = h->addr + h->len > hi ? h->addr + h->len : hi;

			if (e - l > VFD_HEADERS_MAX)
				break;
			lo = l;
			hi = e;
			k++;
		}
		rc = commit_range(j, i, k);
		i = k;
	}
	return rc;
}

int h5vol_journal_commit(struct h5vol_journal *j, uint64_t end)
{
	size_t i = 0;
	int rc = 0;

	if (j->frozen)
		return -EIO;
	if (j->nheld > 1)
		qsort(j->held, j->nheld, sizeof(*j->held), held_order);
	for (; i < j->nheld && !rc && j->held[i].type != H5FD_MEM_OHDR; i++)
		rc = commit_write(j, j->held[i].addr, j->held[i].len, j->held[i].buf);
	if (!rc)
		rc = commit_headers(j, i);
	if (!rc && j->cut && ftruncate(j->fd, (off_t)j->cut) < 0)
		rc = -errno;
	j->cut = 0;
	held_drop(j);
	if (rc)
		return rc;
	journal_drop(j);
	j->mark = end;
	j->born_mark = j->born;
	j->error = 0;
	return 0;
}

int h5vol_journal_restore(struct h5vol_journal *j)
{
	int rc = j->error;

	j->frozen = true;
	if (j->fd < 0)
		return -EBADF;
	held_drop(j);
	for (size_t i = j->n; i-- > 0 && !rc;)
		rc = pwrite_all(j->fd, j->undo[i].buf, j->undo[i].len, j->undo[i].addr);
	if (!rc && ftruncate(j->fd, (off_t)j->mark) < 0)
		rc = -errno;
	if (!rc)
		journal_drop(j);
	return rc;
}

void h5vol_journal_free(struct h5vol_journal *j)
{
	journal_drop(j);
	held_drop(j);
	free(j->undo);
	free(j->held);
	free(j->hdr);
	j->undo = j->held = NULL;
	j->hdr = NULL;
	j->cap = j->capheld = 0;
	j->nhdr = j->caphdr = 0;
	if (j->fd >= 0)
		close(j->fd);
	j->fd = -1;
}

/* ---- the driver's callbacks ---------------------------------------------------------- */

static H5FD_t *vfd_open(const char *name, unsigned flags, hid_t fapl, haddr_t maxaddr)
{
	const struct vfd_info *info = H5Pget_driver_info(fapl);
	struct vfd_file *f;
	struct stat st;
	int o = O_CLOEXEC | ((flags & H5F_ACC_RDWR) ? O_RDWR : O_RDONLY);

	if (!name || !*name || maxaddr == 0 || maxaddr == HADDR_UNDEF || maxaddr > VFD_MAXADDR ||
	    !info || !info->j) {
		errno = EINVAL;
		return NULL;
	}
	if (flags & H5F_ACC_TRUNC)
		o |= O_TRUNC;
	if (flags & H5F_ACC_CREAT)
		o |= O_CREAT;
	if (flags & H5F_ACC_EXCL)
		o |= O_EXCL;
	f = calloc(1, sizeof(*f));
	if (!f)
		return NULL;
	f->fd = open(name, o, 0666);
	if (f->fd < 0 || fstat(f->fd, &st) < 0) {
		int e = errno;

		if (f->fd >= 0)
			close(f->fd);
		free(f);
		errno = e;
		return NULL;
	}
	f->eof = (haddr_t)st.st_size;
	f->dev = st.st_dev;
	f->ino = st.st_ino;
	f->j = info->j;
	return &f->pub;
}

static herr_t vfd_close(H5FD_t *file)
{
	struct vfd_file *f = (struct vfd_file *)file;
	int rc = close(f->fd);

	free(f);
	return rc < 0 ? -1 : 0;
}

static int vfd_cmp(const H5FD_t *a, const H5FD_t *b)
{
	const struct vfd_file *f = (const struct vfd_file *)a, *g = (const struct vfd_file *)b;

	if (f->dev != g->dev)
		return f->dev < g->dev ? -1 : 1;
	if (f->ino != g->ino)
		return f->ino < g->ino ? -1 : 1;
	return 0;
}

/*
 * sec2's features (H5Fget_eoa asks for SUPPORTS_SWMR_IO: plain POSIX I/O, as sec2) less the
 * metadata accumulator: it would join the superblock and the object headers beside it into one
 * write, which the commit could then not order.
 */
static herr_t vfd_query(const H5FD_t *file, unsigned long *flags)
{
	if (flags)
		*flags = H5FD_FEAT_AGGREGATE_METADATA | H5FD_FEAT_DATA_SIEVE |
		         H5FD_FEAT_AGGREGATE_SMALLDATA | H5FD_FEAT_POSIX_COMPAT_HANDLE |
		         H5FD_FEAT_SUPPORTS_SWMR_IO;
	return 0;
}

static haddr_t vfd_get_eoa(const H5FD_t *file, H5FD_mem_t type)
{
	return ((const struct vfd_file *)file)->eoa;
}

static herr_t vfd_set_eoa(H5FD_t *file, H5FD_mem_t type, haddr_t addr)
{
	((struct vfd_file *)file)->eoa = addr;
	return 0;
}

static haddr_t vfd_get_eof(const H5FD_t *file, H5FD_mem_t type)
{
	return ((const struct vfd_file *)file)->eof;
}

static herr_t vfd_get_handle(H5FD_t *file, hid_t fapl, void **handle)
{
	if (!handle)
		return -1;
	*handle = &((struct vfd_file *)file)->fd;
	return 0;
}

static herr_t vfd_read(H5FD_t *file, H5FD_mem_t type, hid_t dxpl, haddr_t addr, size_t size,
                       void *buf)
{
	struct vfd_file *f = (struct vfd_file *)file;
	ssize_t got;

	if (addr == HADDR_UNDEF || addr > VFD_MAXADDR || size > VFD_MAXADDR - addr ||
	    addr + size > f->eoa) {
		errno = EINVAL;
		return -1;
	}
	got = vr_pread_upto(f->fd, buf, size, addr);
	if (got < 0) {
		errno = (int)-got;
		return -1;
	}
	memset((char *)buf + got, 0, size - (size_t)got); /* past the end of the file: zeros */
	held_overlay(f->j, addr, size, buf);
	return 0;
}

static herr_t vfd_write(H5FD_t *file, H5FD_mem_t type, hid_t dxpl, haddr_t addr, size_t size,
                        const void *buf)
{
	struct vfd_file *f = (struct vfd_file *)file;
	struct h5vol_journal *j = f->j;
	int rc;

	if (j->frozen) {
		errno = EIO;
		return -1;
	}
	if (addr == HADDR_UNDEF || addr > VFD_MAXADDR || size > VFD_MAXADDR - addr ||
	    addr + size > f->eoa) {
		errno = EINVAL;
		return -1;
	}
	if (type == H5FD_MEM_OHDR) {
		rc = header_note(j, addr, size);
		if (rc) {
			errno = -rc;
			return -1;
		}
	}
	if (addr < j->mark) {
		size_t len = addr + size > j->mark ? (size_t)(j->mark - addr) : size;

		/* in place: held to the commit */
		rc = held_add(j, type, addr, len, buf);
		if (rc) {
			errno = -rc;
			return -1;
		}
		addr += len;
		buf = (const char *)buf + len;
		size -= len;
		if (!size)
			return 0;
	}
	/* new blocks: nothing on the file references them before the commit */
	rc = pwrite_all(f->fd, buf, size, addr);
	if (rc) {
		errno = -rc;
		return -1;
	}
	j->writes++;
	if (addr + size > f->eof)
		f->eof = addr + size;
	return 0;
}

/*
 * HDF5 makes the file as long as its end of allocation when it flushes and closes. Between
 * volumes it is only ever made longer: cutting it (HDF5 gives space at its end back) would also
 * give back the space h5vol reserved past the end (fallocate KEEP_SIZE) to whoever takes it
 * first. At close it is cut to the end of allocation.
 */
static herr_t vfd_truncate(H5FD_t *file, hid_t dxpl, hbool_t closing)
{
	struct vfd_file *f = (struct vfd_file *)file;

	if (f->j->frozen) {
		errno = EIO;
		return -1;
	}
	if (f->eoa > f->eof) {
		if (ftruncate(f->fd, (off_t)f->eoa) < 0)
			return -1;
		f->eof = f->eoa;
	} else if (closing && f->eoa < f->eof) {
		/* after the held writes (the file as committed may still use its tail) */
		f->j->cut = f->eoa;
		f->eof = f->eoa;
		held_cut(f->j, f->eoa);
	}
	return 0;
}

static const H5FD_class_t vfd_class = {
        .name = "volrec_journal",
        .maxaddr = VFD_MAXADDR,
        .fc_degree = H5F_CLOSE_WEAK,
        .fapl_size = sizeof(struct vfd_info),
        .open = vfd_open,
        .close = vfd_close,
        .cmp = vfd_cmp,
        .query = vfd_query,
        .get_eoa = vfd_get_eoa,
        .set_eoa = vfd_set_eoa,
        .get_eof = vfd_get_eof,
        .get_handle = vfd_get_handle,
        .read = vfd_read,
        .write = vfd_write,
        .truncate = vfd_truncate,
        .fl_map = H5FD_FLMAP_DICHOTOMY,
};

hid_t h5vol_vfd_fapl(struct h5vol_journal *j)
{
	struct vfd_info info = {j};
	hid_t fapl;

	if (vfd_id < 0 || H5Iis_valid(vfd_id) <= 0)
		vfd_id = H5FDregister(&vfd_class);
	if (vfd_id < 0)
		return H5I_INVALID_HID;
	fapl = H5Pcreate(H5P_FILE_ACCESS);
	if (fapl < 0)
		return H5I_INVALID_HID;
	if (H5Pset_driver(fapl, vfd_id, &info) < 0 ||
	    H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG) < 0) {
		H5Pclose(fapl);
		return H5I_INVALID_HID;
	}
	return fapl;
}
