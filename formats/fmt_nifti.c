/* SPDX-License-Identifier: MIT */
/*
 * NIfTI-2 writer through libnifti2 (.nii, .nii.gz by the suffix): one file per volume
 * (OUT_00000.nii.gz, ...) or, with opt.series, one 4-D file; the channels other than the
 * structure in files of their own (OUT_angio_00000.nii.gz, OUT_doppler.nii.gz), whose
 * scl_slope and scl_inter turn the 8-bit values into their quantity. Voxel axes i, j, k are
 * depth z, x and y (the volume's memory order, written as it is); the sform and qform map them
 * to micrometres when the voxel size is known. The provenance is a JSON comment extension.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>
#include <nifti/nifti2_io.h>

#include "formats/fmt.h"

struct nifti {
	char **names; /* final names: per channel, one or one per volume (file c * per + k) */
	char *dir;    /* PATH.partial: a folder for the files being written */
	char **tmps;  /* where they are written: DIR/their final base name */
	size_t nfiles;
	size_t per;                   /* files per channel */
	znzFile fp[FMT_CHANNELS_MAX]; /* each channel's open .nii.gz file */
	int fd[FMT_CHANNELS_MAX];     /* each channel's open .nii file (-1: none): no stdio */
	bool gz;
	size_t committed; /* files renamed to their final names so far */
};

static bool nifti_is_gz(const char *path)
{
	size_t n = strlen(path);

	return n > 3 && !strcasecmp(path + n - 3, ".gz");
}

/* OUT.nii.gz -> OUT_00007.nii.gz (volume t), OUT_angio_00007.nii.gz (channel angio); t
 * UINT64_MAX: no volume index (a series); ch NULL: the structure, no channel name. */
static char *nifti_file_name(const char *path, const char *ch, uint64_t t)
{
	size_t n = strlen(path);
	size_t k = nifti_is_gz(path) ? 7 : 4; /* ".nii.gz" or ".nii" */
	char *s = NULL, num[24] = "";

	if (t != UINT64_MAX)
		snprintf(num, sizeof(num), "_%05llu", (unsigned long long)t);
	if (asprintf(&s, "%.*s%s%s%s%s", (int)(n - k), path, ch ? "_" : "", ch ? ch : "", num,
	             path + n - k) < 0)
		return NULL;
	return s;
}

/* The JSON comment of a file of channel c: the attributes, the channel's meaning, and the
 * columns' values of volumes [t0, t1). */
static char *nifti_provenance(const struct fmt_writer *w, uint32_t c, uint64_t t0, uint64_t t1)
{
	const struct fmt_info *in = &w->info;
	struct json_object *o = json_object_new_object(), *cols = json_object_new_object();
	char *s;

	json_object_object_add(o, "volrec_version", json_object_new_string(VOLREC_VERSION));
	if (w->opt.source)
		json_object_object_add(o, "source", json_object_new_string(w->opt.source));
	json_object_object_add(o, "axes", json_object_new_string("i=z (depth), j=x, k=y, t"));
	json_object_object_add(o, "first_volume", json_object_new_int64((int64_t)t0));
	json_object_object_add(o, "voxel_size_known", json_object_new_boolean(fmt_voxel_known(in)));
	if (fmt_channel_axis(in))
		json_object_object_add(o, "channel", fmt_channel_json(&in->ch[c]));
	if (in->attrs)
		json_object_object_add(o, "attributes", json_object_get(in->attrs));
	if (in->columns) {
		json_object_object_foreach(in->columns, key, val)
		{
			struct json_object *a = json_object_new_array();

			for (uint64_t t = t0; t < t1; t++)
				json_object_array_add(
				        a, json_object_get(json_object_array_get_idx(val, t)));
			json_object_object_add(cols, key, a);
		}
	}
	json_object_object_add(o, "volumes", cols);
	s = strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
	                                                     JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(o);
	return s;
}

/* Channel c's scaling of its 8-bit values into its quantity (scl_slope, scl_inter: value =
 * inter + slope * u8) and the name of that quantity: none for the structure (its 8-bit image
 * as it always was) or a range not known. */
static void nifti_scaling(nifti_image *nim, const struct fmt_info *in, uint32_t c)
{
	const struct fmt_channel *ch = &in->ch[c];

	if (!fmt_channel_axis(in) || !strcmp(ch->name, "structure") || ch->range[0] != ch->range[0])
		return;
	nim->scl_slope = (ch->range[1] - ch->range[0]) / 255.0;
	nim->scl_inter = ch->range[0];
	snprintf(nim->intent_name, sizeof(nim->intent_name), "%s %s", ch->name, ch->unit);
}

/* The header of file f of channel c (volumes [t0, t0 + nt)). */
static nifti_image *nifti_header(const struct fmt_writer *w, const struct nifti *n, uint32_t c,
                                 size_t f, uint64_t t0, uint64_t nt)
{
	const struct fmt_info *in = &w->info;
	bool known = fmt_voxel_known(in), tknown = in->interval_s == in->interval_s;
	int64_t dims[8] = {nt > 1 || w->opt.series ? 4 : 3,
	                   in->shape[2],
	                   in->shape[1],
	                   in->shape[0],
	                   (int64_t)nt,
	                   1,
	                   1,
	                   1};
	double vz = known ? in->voxel_um[2] : 1, vx = known ? in->voxel_um[1] : 1;
	double vy = known ? in->voxel_um[0] : 1;
	nifti_image *nim = nifti_make_new_nim(dims, DT_UINT8, 0);
	char *prov;

	if (!nim)
		return NULL;
	nim->nifti_type = NIFTI_FTYPE_NIFTI2_1;
	nim->pixdim[1] = nim->dx = vz;
	nim->pixdim[2] = nim->dy = vx;
	nim->pixdim[3] = nim->dz = vy;
	nim->pixdim[4] = nim->dt = tknown ? in->interval_s : 1;
	nim->xyz_units = known ? NIFTI_UNITS_MICRON : NIFTI_UNITS_UNKNOWN;
	nim->time_units = tknown ? NIFTI_UNITS_SEC : NIFTI_UNITS_UNKNOWN;
	/* world x <- j (x), world y <- k (y), world z <- i (depth) */
	memset(&nim->sto_xyz, 0, sizeof(nim->sto_xyz));
	nim->sto_xyz.m[0][1] = vx;
	nim->sto_xyz.m[1][2] = vy;
	nim->sto_xyz.m[2][0] = vz;
	nim->sto_xyz.m[3][3] = 1;
	nim->sto_ijk = nifti_dmat44_inverse(nim->sto_xyz);
	nifti_dmat44_to_quatern(nim->sto_xyz, &nim->quatern_b, &nim->quatern_c, &nim->quatern_d,
	                        &nim->qoffset_x, &nim->qoffset_y, &nim->qoffset_z, NULL, NULL, NULL,
	                        &nim->qfac);
	nim->qto_xyz = nim->sto_xyz;
	nim->qto_ijk = nim->sto_ijk;
	nim->sform_code = nim->qform_code = known ? NIFTI_XFORM_SCANNER_ANAT : NIFTI_XFORM_UNKNOWN;
	snprintf(nim->descrip, sizeof(nim->descrip), "volrec OCT%s%s i=z j=x k=y%s",
	         fmt_channel_axis(in) ? " " : "", fmt_channel_axis(in) ? in->ch[c].name : "",
	         known ? " um" : ": voxel size unknown");
	nifti_scaling(nim, in, c);
	nim->fname = strdup(n->names[f]);
	nim->iname = strdup(n->names[f]);
	prov = nifti_provenance(w, c, t0, t0 + nt);
	if (!nim->fname || !nim->iname || !prov ||
	    nifti_add_extension(nim, prov, (int)strlen(prov) + 1, NIFTI_ECODE_COMMENT) != 0) {
		free(prov);
		nifti_image_free(nim);
		return NULL;
	}
	free(prov);
	return nim;
}

/*
 * Create file f and write its header; the data follows through nifti_data. The header is
 * libnifti's (nifti_convert_nim2n2hdr), written here with its extension: libnifti2 3.0's own
 * writer takes a NIfTI-2 image for a pair of files and writes the data to a second one. The
 * header, extensions and padding are put together in memory and written at once.
 */
static int nifti_start(struct fmt_writer *w, struct nifti *n, uint32_t c, size_t f, uint64_t t0,
                       uint64_t nt, char *err, size_t errlen)
{
	nifti_image *nim = nifti_header(w, n, c, f, t0, nt);
	nifti_2_header h;
	const char extender[4] = {1, 0, 0, 0};
	int64_t off = (int64_t)sizeof(h) + 4;
	int rc = 0;

	if (!nim)
		return vr_err(err, errlen, -ENOMEM, "%s: cannot make the NIfTI header",
		              n->names[f]);
	for (int i = 0; i < nim->num_ext; i++)
		off += nim->ext_list[i].esize;
	nim->iname_offset = (off + 15) / 16 * 16;
	if (nifti_convert_nim2n2hdr(nim, &h) != 0) {
		nifti_image_free(nim);
		return vr_err(err, errlen, -EINVAL, "%s: libnifti refused the header", n->names[f]);
	}
	size_t hb = (size_t)nim->iname_offset;
	uint8_t *head = calloc(1, hb), *p = head;

	if (!head) {
		nifti_image_free(nim);
		return vr_err(err, errlen, -ENOMEM, "out of memory");
	}
	memcpy(p, &h, sizeof(h));
	p += sizeof(h);
	memcpy(p, extender, 4);
	p += 4;
	for (int i = 0; i < nim->num_ext; i++) {
		const nifti1_extension *e = &nim->ext_list[i];
		int32_t eh[2] = {e->esize, e->ecode};

		memcpy(p, eh, 8);
		memcpy(p + 8, e->edata, (size_t)e->esize - 8);
		p += e->esize;
	}
	nifti_image_free(nim);
	errno = 0;
	if (n->gz) {
		n->fp[c] = znzopen(n->tmps[f], "wb", 1);
		if (znz_isnull(n->fp[c]))
			rc = vr_err_errno(err, errlen, errno ? -errno : -EIO, "%s", n->tmps[f]);
		else if (znzwrite(head, 1, hb, n->fp[c]) != hb)
			rc = vr_err_errno(err, errlen, errno ? -errno : -EIO, "%s", n->tmps[f]);
	} else {
		n->fd[c] = open(n->tmps[f], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
		if (n->fd[c] < 0)
			rc = vr_err_errno(err, errlen, -errno, "%s", n->tmps[f]);
		else if ((rc = fmt_write_all(n->fd[c], head, hb)) < 0)
			rc = vr_err_errno(err, errlen, rc, "%s", n->tmps[f]);
	}
	free(head);
	return rc;
}

/* The data of file f: one write of the whole volume for .nii, then the kernel is asked to start
 * writing it back (without waiting) so that the disk works while the next volume comes. */
static int nifti_data(struct nifti *n, uint32_t c, size_t f, const uint8_t *vol, size_t bytes,
                      char *err, size_t errlen)
{
	int rc;

	errno = 0;
	if (n->gz)
		return znzwrite(vol, 1, bytes, n->fp[c]) == bytes
		               ? 0
		               : vr_err_errno(err, errlen, errno ? -errno : -EIO, "%s", n->tmps[f]);
	if ((rc = fmt_write_all(n->fd[c], vol, bytes)) < 0)
		return vr_err_errno(err, errlen, rc, "%s", n->tmps[f]);
	sync_file_range(n->fd[c], 0, 0,
	                SYNC_FILE_RANGE_WRITE); /* a hint: errors come at the sync */
	return 0;
}

/* Close file f of channel c; it is flushed to the disk by nifti_sync, once for every file at
 * the end. */
static int nifti_end(struct nifti *n, uint32_t c, size_t f, char *err, size_t errlen)
{
	int rc;

	errno = 0;
	if (n->gz) {
		rc = znzclose(n->fp[c]);
		n->fp[c] = NULL;
	} else {
		rc = close(n->fd[c]);
		n->fd[c] = -1;
	}
	return rc != 0 ? vr_err_errno(err, errlen, errno ? -errno : -EIO, "%s", n->tmps[f]) : 0;
}

static int nifti_sync(struct nifti *n, char *err, size_t errlen)
{
	for (size_t f = 0; f < n->nfiles; f++) {
		int rc = fmt_sync_path(n->tmps[f]);

		if (rc < 0)
			return vr_err_errno(err, errlen, rc, "%s", n->tmps[f]);
	}
	return 0;
}

/* The bytes file f takes on the disk (compressed for .nii.gz). */
static uint64_t nifti_file_size(const struct nifti *n, size_t f)
{
	struct stat st;

	return stat(n->tmps[f], &st) == 0 ? (uint64_t)st.st_size : 0;
}

static int nifti_open(struct fmt_writer *w, char *err, size_t errlen)
{
	struct nifti *n = calloc(1, sizeof(*n));
	const uint32_t nch = fmt_nch(&w->info);

	if (!n)
		return vr_err(err, errlen, -ENOMEM, "out of memory");
	w->priv = n;
	for (int c = 0; c < FMT_CHANNELS_MAX; c++)
		n->fd[c] = -1;
	n->gz = nifti_is_gz(w->path);
	if (!(n->dir = fmt_partial_name(w->path)))
		return vr_err(err, errlen, -ENOMEM, "out of memory");
	fmt_remove_tree(n->dir); /* the leftover of an earlier run */
	if (mkdir(n->dir, 0777) < 0)
		return vr_err_errno(err, errlen, -errno, "%s", n->dir);
	n->per = w->opt.series ? 1 : (size_t)w->info.nt;
	n->nfiles = n->per * nch;
	n->names = calloc(n->nfiles, sizeof(char *));
	n->tmps = calloc(n->nfiles, sizeof(char *));
	if (!n->names || !n->tmps)
		return vr_err(err, errlen, -ENOMEM, "out of memory");
	for (size_t f = 0; f < n->nfiles; f++) {
		const char *ch = w->info.ch[f / n->per].name;

		n->names[f] = nifti_file_name(
		        w->path, fmt_channel_axis(&w->info) && strcmp(ch, "structure") ? ch : NULL,
		        w->opt.series ? UINT64_MAX : f % n->per);
		if (n->names[f] &&
		    asprintf(&n->tmps[f], "%s/%s", n->dir,
		             strrchr(n->names[f], '/') ? strrchr(n->names[f], '/') + 1
		                                       : n->names[f]) < 0)
			n->tmps[f] = NULL;
		if (!n->tmps[f])
			return vr_err(err, errlen, -ENOMEM, "out of memory");
		if (!w->opt.replace && access(n->names[f], F_OK) == 0)
			return vr_err(err, errlen, -EEXIST, "%s: exists (--force replaces it)",
			              n->names[f]);
	}
	for (uint32_t c = 0; w->opt.series && c < nch; c++) {
		int rc = nifti_start(w, n, c, c, 0, w->info.nt, err, errlen);

		if (rc < 0)
			return rc;
	}
	return 0;
}

static int nifti_put(struct fmt_writer *w, uint64_t t, const uint8_t *vol, char *err, size_t errlen)
{
	struct nifti *n = w->priv;
	size_t bytes = fmt_channel_bytes(&w->info);
	int rc = 0;

	for (uint32_t c = 0; c < fmt_nch(&w->info) && rc == 0; c++) {
		size_t f = c * n->per + (w->opt.series ? 0 : (size_t)t);

		if (!w->opt.series && (rc = nifti_start(w, n, c, f, t, 1, err, errlen)) < 0)
			return rc;
		if ((rc = nifti_data(n, c, f, vol + c * bytes, bytes, err, errlen)) < 0)
			return rc;
		if (w->opt.series)
			continue;
		rc = nifti_end(n, c, f, err, errlen);
		w->written += nifti_file_size(n, f);
	}
	return rc;
}

static int nifti_finish(struct fmt_writer *w, char *err, size_t errlen)
{
	struct nifti *n = w->priv;
	int rc = 0;

	if (w->opt.series) {
		w->written = 0;
		for (uint32_t c = 0; c < fmt_nch(&w->info) && rc == 0; c++) {
			rc = nifti_end(n, c, c, err, errlen);
			w->written += nifti_file_size(n, c);
		}
	}
	return rc < 0 ? rc : nifti_sync(n, err, errlen);
}

static int nifti_commit(struct fmt_writer *w, char *err, size_t errlen)
{
	struct nifti *n = w->priv;

	for (size_t f = 0; f < n->nfiles; f++) {
		int rc = fmt_commit_rename(n->tmps[f], n->names[f], w->opt.replace, err, errlen);

		if (rc < 0)
			return rc;
		n->committed = f + 1;
	}
	if (rmdir(n->dir) < 0)
		return vr_err_errno(err, errlen, -errno, "%s", n->dir);
	return 0;
}

static void nifti_abort(struct fmt_writer *w)
{
	struct nifti *n = w->priv;

	if (!n)
		return;
	for (int c = 0; c < FMT_CHANNELS_MAX; c++) {
		if (!znz_isnull(n->fp[c]))
			znzclose(n->fp[c]);
		if (n->fd[c] >= 0)
			close(n->fd[c]);
		n->fp[c] = NULL;
		n->fd[c] = -1;
	}
	if (n->dir)
		fmt_remove_tree(n->dir);
	/* renamed before a later rename failed: not a whole series */
	for (size_t f = 0; f < n->committed; f++)
		unlink(n->names[f]);
}

static void nifti_free(struct fmt_writer *w)
{
	struct nifti *n = w->priv;

	if (!n)
		return;
	for (size_t f = 0; f < n->nfiles; f++) {
		if (n->names)
			free(n->names[f]);
		if (n->tmps)
			free(n->tmps[f]);
	}
	free(n->names);
	free(n->tmps);
	free(n->dir);
	free(n);
}

const struct fmt_ops fmt_nifti_ops = {
        .version = FMT_OPS_VERSION,
        .name = "nifti-2",
        .open = nifti_open,
        .put = nifti_put,
        .finish = nifti_finish,
        .commit = nifti_commit,
        .abort = nifti_abort,
        .free = nifti_free,
};
