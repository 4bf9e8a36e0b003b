/* SPDX-License-Identifier: MIT */
/*
 * What volrecd's two recorders share (docs/recording.md): the rule for a recording's name, the
 * room record.min_free_gb keeps on the disk, and the bounded pool of buffers through which a
 * pipeline thread hands copies to a recorder's writer thread without ever waiting for it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

#include "daemon/internal.h"

bool vrd_record_name_ok(const char *name)
{
	size_t n = strlen(name);

	if (n == 0 || n >= CFG_NAME_MAX || name[0] == '.')
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '-' || c == '_' || c == '.'))
			return false;
	}
	return true;
}

int vrd_record_name_check(const char *name, char *err, size_t errlen)
{
	if (vrd_record_name_ok(name))
		return 0;
	return vr_err(err, errlen, -EINVAL,
	              "record_start: name '%.64s' is not allowed (letters, digits, '-', '_' and "
	              "'.', not first; at most %d characters): recordings go into record.dir only",
	              name, CFG_NAME_MAX - 1);
}

/* Bytes free for an unprivileged writer, from statvfs. */
static double avail_bytes(const struct statvfs *vfs)
{
	return (double)vfs->f_bavail * (double)vfs->f_frsize;
}

int vrd_record_room(const char *dir, double min_free_gb, uint64_t unit_bytes, char *err,
                    size_t errlen)
{
	struct statvfs vfs;

	if (statvfs(dir, &vfs) < 0)
		return vr_err(err, errlen, -errno,
		              "record_start: record.dir %s: %s (record.dir in the configuration "
		              "names the directory recordings go into; the package makes its "
		              "default, /var/lib/volrec/recordings)",
		              dir, strerror(errno));
	if (avail_bytes(&vfs) - (double)unit_bytes < min_free_gb * 1e9)
		return vr_err(err, errlen, -ENOSPC,
		              "record_start: %s has %.3f GB free; a recording would leave less "
		              "than record.min_free_gb %g",
		              dir, avail_bytes(&vfs) / 1e9, min_free_gb);
	return 0;
}

bool vrd_record_too_full(int fd, const char *path, double min_free_gb, uint64_t unit_bytes,
                         char *msg, size_t len)
{
	struct statvfs vfs;

	if (min_free_gb <= 0)
		return false; /* no limit: write until the disk refuses */
	if ((fd >= 0 ? fstatvfs(fd, &vfs) : statvfs(path, &vfs)) < 0)
		return false;
	if (avail_bytes(&vfs) - (double)unit_bytes >= min_free_gb * 1e9)
		return false;
	snprintf(msg, len,
	         "stopped before the disk falls below record.min_free_gb %g (%.3f GB free)",
	         min_free_gb, avail_bytes(&vfs) / 1e9);
	return true;
}

void vrd_record_set_end(char *end, size_t len, const char *why)
{
	if (!end[0])
		snprintf(end, len, "%s", why);
}

/* ---- the pool of buffers ------------------------------------------------------------------- */

int vrd_bufq_alloc(struct vrd_bufq *b, uint64_t bytes, uint64_t budget, size_t align,
                   const char *what, char *err, size_t errlen)
{
	uint64_t n = budget / bytes;

	if (n < 2)
		n = 2;
	if (n > VRD_BUFQ_MAX)
		n = VRD_BUFQ_MAX;
	memset(b, 0, sizeof(*b));
	for (b->n = 0; b->n < (int)n; b->n++) {
		if (posix_memalign((void **)&b->buf[b->n], align, bytes)) {
			vrd_bufq_free(b);
			return vr_err(err, errlen, -ENOMEM,
			              "%s: no memory for %llu buffers of %llu bytes", what,
			              (unsigned long long)n, (unsigned long long)bytes);
		}
		b->free_stack[b->n] = b->n;
	}
	b->nfree = b->n;
	return 0;
}

void vrd_bufq_free(struct vrd_bufq *b)
{
	for (int i = 0; i < b->n; i++)
		free(b->buf[i]);
	memset(b, 0, sizeof(*b));
}

int vrd_bufq_take(struct vrd_bufq *b)
{
	return b->nfree ? b->free_stack[--b->nfree] : -1;
}

void vrd_bufq_give(struct vrd_bufq *b, int i)
{
	if (i >= 0)
		b->free_stack[b->nfree++] = i;
}

void vrd_bufq_push(struct vrd_bufq *b, int i)
{
	b->q[(b->qhead + b->qlen) % VRD_BUFQ_MAX] = i;
	b->qlen++;
}

int vrd_bufq_pop(struct vrd_bufq *b)
{
	int i;

	if (!b->qlen)
		return -1;
	i = b->q[b->qhead];
	b->qhead = (b->qhead + 1) % VRD_BUFQ_MAX;
	b->qlen--;
	return i;
}

void vrd_bufq_drain(struct vrd_bufq *b)
{
	while (b->qlen)
		vrd_bufq_give(b, vrd_bufq_pop(b));
}
