/* SPDX-License-Identifier: MIT */
/*
 * The writer every format shares: the format from the suffix, the call order, and partial
 * outputs (written as PATH.partial, renamed at the end, removed on any failure), so that a file
 * under its final name is always whole.
 */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#include "formats/fmt.h"

enum {
	FMT_W_OPEN,     /* volumes go in */
	FMT_W_FAILED,   /* a call failed: free removes the outputs */
	FMT_W_FINISHED, /* renamed: the outputs stay */
};

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);

	return n > k && !strcasecmp(s + n - k, suffix);
}

enum fmt_kind fmt_kind_of(const char *path)
{
	if (ends_with(path, ".zarr") || ends_with(path, ".zarr/"))
		return FMT_ZARR;
	if (ends_with(path, ".nii") || ends_with(path, ".nii.gz"))
		return FMT_NIFTI;
	if (ends_with(path, ".ome.tif") || ends_with(path, ".ome.tiff"))
		return FMT_TIFF;
	return FMT_NONE;
}

char *fmt_partial_name(const char *path)
{
	char *s = NULL;

	if (asprintf(&s, "%s.partial", path) < 0)
		return NULL;
	return s;
}

static int remove_one(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(p);
	return 0;
}

void fmt_remove_tree(const char *path)
{
	struct stat st;

	if (lstat(path, &st) < 0)
		return;
	if (S_ISDIR(st.st_mode))
		nftw(path, remove_one, 32, FTW_DEPTH | FTW_PHYS);
	else
		unlink(path);
}

int fmt_sync_path(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	int rc = 0;

	if (fd < 0)
		return -errno;
	if (fsync(fd) < 0 && errno != EINVAL)
		rc = -errno;
	close(fd);
	return rc;
}

int fmt_commit_rename(const char *from, const char *to, bool replace, char *err, size_t errlen)
{
	struct stat st;
	char *dir;
	int rc;

	if (lstat(to, &st) == 0) {
		if (!replace)
			return vr_err(err, errlen, -EEXIST, "%s: exists (--force replaces it)", to);
		if (S_ISDIR(st.st_mode))
			fmt_remove_tree(to);
	}
	if (rename(from, to) < 0)
		return vr_err_errno(err, errlen, -errno, "%s: cannot rename to %s", from, to);
	dir = strdup(to);
	if (!dir)
		return vr_err(err, errlen, -ENOMEM, "out of memory");
	rc = fmt_sync_path(dirname(dir));
	free(dir);
	return rc < 0 ? vr_err_errno(err, errlen, rc, "%s: cannot sync its folder", to) : 0;
}

int fmt_write_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;

	while (n > 0) {
		ssize_t k = write(fd, p, n);

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		if (k == 0)
			return -ENOSPC;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

int fmt_writer_open(const char *path, const struct fmt_info *info, const struct fmt_options *opt,
                    struct fmt_writer **out, char *err, size_t errlen)
{
	static const struct fmt_ops *const ops[] = {[FMT_ZARR] = &fmt_zarr_ops,
	                                            [FMT_NIFTI] = &fmt_nifti_ops,
	                                            [FMT_TIFF] = &fmt_tiff_ops};
	enum fmt_kind kind = fmt_kind_of(path);
	struct fmt_writer *w;
	int rc;

	if (kind == FMT_NONE)
		return vr_err(
		        err, errlen, -EINVAL,
		        "%s: unknown format (the suffix names it: .zarr or .ome.zarr, .nii or "
		        ".nii.gz, .ome.tif or .ome.tiff)",
		        path);
	if (ops[kind]->version != FMT_OPS_VERSION)
		return vr_err(err, errlen, -EINVAL, "%s: writer version %u, not %u",
		              ops[kind]->name, ops[kind]->version, FMT_OPS_VERSION);
	if (info->nt == 0 || !info->shape[0] || !info->shape[1] || !info->shape[2])
		return vr_err(err, errlen, -EINVAL, "%s: no volumes to write", path);
	if (opt && opt->codec && kind != FMT_ZARR)
		return vr_err(err, errlen, -EINVAL,
		              "%s: --codec is for OME-Zarr outputs (.zarr, .ome.zarr)", path);
	w = calloc(1, sizeof(*w));
	if (!w || !(w->path = strdup(path))) {
		free(w);
		return vr_err(err, errlen, -ENOMEM, "out of memory");
	}
	w->ops = ops[kind];
	w->info = *info;
	if (opt)
		w->opt = *opt;
	w->state = FMT_W_OPEN;
	rc = w->ops->open(w, err, errlen);
	if (rc < 0) {
		w->state = FMT_W_FAILED;
		fmt_writer_free(w);
		return rc;
	}
	*out = w;
	return 0;
}

int fmt_writer_put(struct fmt_writer *w, uint64_t t, const uint8_t *vol, char *err, size_t errlen)
{
	int rc;

	if (w->state != FMT_W_OPEN || t != w->next || t >= w->info.nt)
		return vr_err(err, errlen, -EINVAL,
		              "%s: volume %llu out of order (expected %llu of %llu)", w->path,
		              (unsigned long long)t, (unsigned long long)w->next,
		              (unsigned long long)w->info.nt);
	rc = w->ops->put(w, t, vol, err, errlen);
	if (rc < 0) {
		w->state = FMT_W_FAILED;
		return rc;
	}
	w->next++;
	return 0;
}

int fmt_writer_finish(struct fmt_writer *w, char *err, size_t errlen)
{
	int rc;

	if (w->state != FMT_W_OPEN || w->next != w->info.nt)
		return vr_err(err, errlen, -EINVAL, "%s: %llu of %llu volumes written", w->path,
		              (unsigned long long)w->next, (unsigned long long)w->info.nt);
	rc = w->ops->finish(w, err, errlen);
	if (rc == 0)
		rc = w->ops->commit(w, err, errlen);
	w->state = rc < 0 ? FMT_W_FAILED : FMT_W_FINISHED;
	return rc;
}

void fmt_writer_free(struct fmt_writer *w)
{
	if (!w)
		return;
	if (w->state != FMT_W_FINISHED)
		w->ops->abort(w);
	w->ops->free(w);
	free(w->path);
	free(w);
}

struct json_object *fmt_channel_json(const struct fmt_channel *ch)
{
	struct json_object *o = json_object_new_object(), *r = json_object_new_array();

	json_object_object_add(o, "name", json_object_new_string(ch->name));
	json_object_object_add(o, "dataset", json_object_new_string(ch->dataset));
	json_object_object_add(o, "value_unit",
	                       *ch->unit ? json_object_new_string(ch->unit) : NULL);
	for (int i = 0; i < 2; i++)
		json_object_array_add(r, ch->range[i] == ch->range[i]
		                                 ? json_object_new_double(ch->range[i])
		                                 : NULL);
	json_object_object_add(o, "value_range", r);
	json_object_object_add(o, "attributes", ch->meaning ? json_object_get(ch->meaning) : NULL);
	return o;
}
