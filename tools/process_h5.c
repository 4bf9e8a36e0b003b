/* SPDX-License-Identifier: MIT */
/*
 * `volrec process`'s HDF5 sink, written through h5vol (the writer `record` uses): one row per
 * volume of /volumes (and /lowres, /full on request), /epoch, /offset and with
 * background.mode partial_median /median_depths, and the attributes that describe how they
 * were made. The file on disk is complete after every volume; a full disk keeps the ones
 * before.
 */
#include <errno.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/h5attr.h"
#include "formats/h5vol.h"
#include "tools/process.h"

/* volumes, angio, doppler, lowres, lowres_angio, lowres_doppler, full, full_angio,
 * full_doppler, epoch, offset, median_depths, generation, generation_index, generations,
 * generation_numbers */
#define PROC_FIELDS 16

/* The datasets of each channel (docs/algorithms.md §5 step 6), by enum cfg_channel. */
static const char *const vol_names[CFG_CH_COUNT] = {"volumes", "angio", "doppler"};
static const char *const low_names[CFG_CH_COUNT] = {"lowres", "lowres_angio", "lowres_doppler"};
static const char *const full_names[CFG_CH_COUNT] = {"full", "full_angio", "full_doppler"};

struct proc_h5 {
	const struct vr_config *cfg;
	hid_t text_type; /* of /generations */
	struct be_backend *be;
	char path[4096];
	struct h5vol *w;
	hsize_t dvol[3], dlow[3];
	uint8_t *vol;              /* [c][Y][X][Z] the channels */
	float *low, *full;         /* the structure's L_e; [c][Y][X][Z] */
	float *lowf[CFG_CH_COUNT]; /* the angio and Doppler low-resolution volumes (or NULL) */
	uint32_t nch;
	enum cfg_channel ch[CFG_CH_COUNT];
	size_t nvox;      /* voxels of one channel */
	uint32_t *md;     /* partial_median: [ny] host buffer the backend writes the counts into */
	uint64_t n, done; /* volumes asked, written */
	uint64_t med_sum; /* partial_median: the sum of the counts of the volumes written */
	uint32_t med_max; /* their largest */
	bool progress;
	double t0, tshow;
};

static char *config_yaml(const struct vr_config *cfg)
{
	char *text = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&text, &len);

	if (!m)
		return NULL;
	if (cfg_dump(cfg, m) < 0) {
		fclose(m);
		free(text);
		return NULL;
	}
	if (fclose(m)) {
		free(text);
		return NULL;
	}
	return text;
}

/* What each channel's values mean (docs/formats.md "Channels"): attributes of its datasets,
 * u8 and (with --lowres) float. 0 or -EIO. */
static int write_meanings(struct proc_h5 *h)
{
	const struct vr_config *cfg = h->cfg;
	const hid_t f = h5vol_file(h->w);
	const bool bscan = cfg_doppler_axis(cfg) == CFG_DOPPLER_BSCAN;
	const double n = cfg->geometry.refractive_index > 0 ? cfg->geometry.refractive_index : 1.38;
	const double T = bscan ? cfg->geometry.bscan_period_us : cfg->geometry.ascan_period_us;
	const char *method = cfg->functional.angio.method == CFG_ANGIO_SVAR ? "svar" : "cdv";
	double range[2];
	int rc = 0;

	cfg_angio_range(cfg, range);
	for (uint32_t c = 0; c < h->nch && rc == 0; c++) {
		const char *vn = vol_names[h->ch[c]], *ln = low_names[h->ch[c]];

		switch (h->ch[c]) {
		case CFG_CH_STRUCTURE:
			rc = vr_h5_structure_meaning(f, vn, cfg->preprocess.db_range);
			break;
		case CFG_CH_ANGIO:
			rc = vr_h5_angio_meaning(f, vn, true, method, range);
			if (rc == 0 && h->low)
				rc = vr_h5_angio_meaning(f, ln, false, method, range);
			break;
		case CFG_CH_DOPPLER:
			rc = vr_h5_doppler_meaning(f, vn, true, bscan ? "bscan" : "ascan", T,
			                           cfg->geometry.center_wavelength_nm, n);
			if (rc == 0 && h->low)
				rc = vr_h5_doppler_meaning(f, ln, false, bscan ? "bscan" : "ascan",
				                           T, cfg->geometry.center_wavelength_nm,
				                           n);
			break;
		default:
			break;
		}
	}
	return rc;
}

/* The attributes known before the first volume (`epochs` is written at the close): 0 or -EIO. */
static int write_attrs(struct proc_h5 *h, const char *backend, const char *device)
{
	const struct vr_config *cfg = h->cfg;
	const hid_t f = h5vol_file(h->w);
	const uint32_t geo[3] = {cfg->geometry.samples_per_ascan, cfg->geometry.ascans_per_bscan,
	                         cfg->geometry.bscans_per_volume};
	const uint32_t depth[2] = {cfg->geometry.depth_range[0], cfg->geometry.depth_range[1]};
	const uint32_t shape[3] = {(uint32_t)h->dvol[0], (uint32_t)h->dvol[1],
	                           (uint32_t)h->dvol[2]};
	char *yaml = config_yaml(cfg), chans[64] = "";
	double um[3];
	bool ok = true;

	cfg_voxel_um(cfg, um);
	for (uint32_t c = 0; c < h->nch && ok; c++) {
		ok = vr_h5_dataset_units(f, vol_names[h->ch[c]], um) == 0;
		snprintf(chans + strlen(chans), sizeof(chans) - strlen(chans), "%s%s", c ? "," : "",
		         cfg_channel_name(h->ch[c]));
	}
	ok = ok && yaml && vr_h5_attr_str(f, "channels", chans) == 0 &&
	     vr_h5_attr_u32v(f, "geometry", geo, 3) == 0 &&
	     vr_h5_attr_u32v(f, "stride", cfg->geometry.stride, 2) == 0 &&
	     vr_h5_attr_u32v(f, "depth_range", depth, 2) == 0 &&
	     vr_h5_attr_u32v(f, "volume_shape", shape, 3) == 0 &&
	     vr_h5_attr_u32(f, "zero_pad", cfg->preprocess.zero_pad) == 0 &&
	     vr_h5_attr_str(f, "reconstruct_mode", cfg_recon_mode_name(cfg->reconstruct.mode)) ==
	             0 &&
	     vr_h5_attr_str(f, "backend", backend) == 0 &&
	     vr_h5_attr_str(f, "device", device) == 0 &&
	     vr_h5_attr_str(f, "volrec_version", VOLREC_VERSION) == 0 &&
	     vr_h5_attr_str(f, "config", yaml) == 0 && write_meanings(h) == 0;

	free(yaml);
	return ok ? 0 : -EIO;
}

/* The one row of /generations and /generation_numbers (fields gen and gen + 1): the
 * configuration's live values as generation 1. */
static int write_generation(struct proc_h5 *h, size_t gen, char *err, size_t errlen)
{
	const uint32_t one = 1;
	char *text = NULL;
	int rc = cfg_live_json(h->cfg, &text);

	if (rc == 0)
		rc = h5vol_log(h->w, gen, &text, err, errlen);
	if (rc == 0)
		rc = h5vol_log(h->w, gen + 1, &one, err, errlen);
	free(text);
	return rc;
}

int proc_h5_create(const char *path, const struct vr_config *cfg, struct be_backend *be, uint64_t n,
                   bool lowres, bool full, bool progress, struct proc_h5 **out, char *err,
                   size_t errlen)
{
	const uint32_t nx = cfg->geometry.ascans_per_bscan, ny = cfg->geometry.bscans_per_volume;
	const bool none = cfg->reconstruct.mode == CFG_RECON_NONE;
	struct proc_h5 *h = calloc(1, sizeof(*h));
	size_t nvox = cfg_out_voxels(cfg);
	struct h5vol_field f[PROC_FIELDS];
	size_t nf = 0;
	int rc;

	if (!h)
		return vr_err(err, errlen, -ENOMEM, "out of memory");
	h->cfg = cfg;
	h->text_type = -1;
	h->be = be;
	h->n = n;
	h->progress = progress;
	snprintf(h->path, sizeof(h->path), "%s", path);
	h->dvol[0] = none ? ny : (hsize_t)ny * cfg->geometry.stride[1];
	h->dvol[1] = none ? nx : (hsize_t)nx * cfg->geometry.stride[0];
	h->dvol[2] = cfg_nz(cfg);
	h->dlow[0] = ny;
	h->dlow[1] = nx;
	h->dlow[2] = cfg_nz(cfg);
	h->nch = cfg_channels(cfg, h->ch);
	h->nvox = nvox;
	const size_t nlow = (size_t)h->dlow[0] * h->dlow[1] * h->dlow[2];
	rc = be_host_alloc(be, nvox * h->nch, (void **)&h->vol);
	for (uint32_t c = 0; c < h->nch && rc == 0 && lowres; c++)
		if (h->ch[c] != CFG_CH_STRUCTURE)
			rc = be_host_alloc(be, nlow * sizeof(float), (void **)&h->lowf[h->ch[c]]);
	if (rc == 0 && cfg->preprocess.background.mode == CFG_BG_PARTIAL_MEDIAN)
		rc = be_host_alloc(be, ny * sizeof(*h->md), (void **)&h->md);
	if (rc == 0 && lowres)
		rc = be_host_alloc(be, h->dlow[0] * h->dlow[1] * h->dlow[2] * sizeof(float),
		                   (void **)&h->low);
	if (rc == 0 && full)
		rc = be_host_alloc(be, nvox * h->nch * sizeof(float), (void **)&h->full);
	if (rc < 0) {
		vr_err(err, errlen, rc, "out of memory for the buffers");
		goto fail;
	}
	/* one row per volume, in the order of sink_publish's rows: the u8 volume of each channel,
	 * the low-resolution ones (the structure's always), the floats of each channel */
	for (uint32_t c = 0; c < h->nch; c++)
		f[nf++] = (struct h5vol_field){vol_names[h->ch[c]],
		                               H5T_NATIVE_UINT8,
		                               3,
		                               {h->dvol[0], h->dvol[1], h->dvol[2]},
		                               false};
	if (lowres)
		f[nf++] = (struct h5vol_field){
		        "lowres", H5T_NATIVE_FLOAT, 3, {ny, nx, h->dlow[2]}, false};
	for (uint32_t c = 0; c < h->nch && lowres; c++)
		if (h->ch[c] != CFG_CH_STRUCTURE)
			f[nf++] = (struct h5vol_field){low_names[h->ch[c]],
			                               H5T_NATIVE_FLOAT,
			                               3,
			                               {ny, nx, h->dlow[2]},
			                               false};
	for (uint32_t c = 0; c < h->nch && full; c++)
		f[nf++] = (struct h5vol_field){full_names[h->ch[c]],
		                               H5T_NATIVE_FLOAT,
		                               3,
		                               {h->dvol[0], h->dvol[1], h->dvol[2]},
		                               false};
	f[nf++] = (struct h5vol_field){"epoch", H5T_NATIVE_UINT64, 0, {0}, false};
	f[nf++] = (struct h5vol_field){"offset", H5T_NATIVE_UINT32, 1, {2}, false};
	if (h->md)
		f[nf++] = (struct h5vol_field){"median_depths", H5T_NATIVE_UINT32, 1, {ny}, false};
	/* offline, one generation of live parameters: the configuration's (docs/tools.md) */
	f[nf++] = (struct h5vol_field){"generation", H5T_NATIVE_UINT32, 0, {0}, false};
	f[nf++] = (struct h5vol_field){"generation_index", H5T_NATIVE_UINT32, 0, {0}, false};
	h->text_type = vr_h5_text_type();
	f[nf++] = (struct h5vol_field){"generations", h->text_type, 0, {0}, true};
	f[nf++] = (struct h5vol_field){"generation_numbers", H5T_NATIVE_UINT32, 0, {0}, true};
	rc = h->text_type < 0 ? vr_err(err, errlen, -EIO, "cannot make the /generations type")
	                      : h5vol_create(path, true, f, nf, &h->w, err, errlen);
	if (rc < 0)
		goto fail;
	rc = write_attrs(h, be_name(be), be_device(be));
	if (rc == 0)
		rc = write_generation(h, nf - 2, err, errlen);
	if (rc < 0) {
		vr_err(err, errlen, rc, "%s: writing the attributes failed", path);
		h5vol_close(h->w, NULL, 0);
		h->w = NULL;
		unlink(path);
		goto fail;
	}
	h->t0 = vr_mono_s();
	*out = h;
	return 0;
fail:
	proc_h5_close(h, NULL, 0);
	return rc;
}

static int sink_begin(void *ctx, uint64_t epoch, struct be_output *out, char *err, size_t errlen)
{
	struct proc_h5 *h = ctx;

	if (h->done >= h->n)
		return vr_err(err, errlen, -ENOSPC,
		              "%s: epoch %llu is one more than the %llu asked", h->path,
		              (unsigned long long)epoch, (unsigned long long)h->n);
	out->volume = h->vol;
	out->lowres = h->low;
	out->full = h->full;
	out->lowres_angio = h->lowf[CFG_CH_ANGIO];
	out->lowres_doppler = h->lowf[CFG_CH_DOPPLER];
	out->channels = h->nch;
	out->median_depths = h->md;
	return 0;
}

static int sink_publish(void *ctx, const struct pl_volume *v, char *err, size_t errlen)
{
	struct proc_h5 *h = ctx;
	const uint32_t nx = h->cfg->geometry.ascans_per_bscan;
	const uint32_t ny = h->cfg->geometry.bscans_per_volume;
	const uint64_t epoch = v->epoch;
	const uint32_t offset[2] = {v->ox, v->oy}, generation = 1, generation_index = 0;
	const void *rows[PROC_FIELDS];
	size_t k = 0;
	double t;
	int rc;

	for (uint32_t c = 0; c < h->nch; c++)
		rows[k++] = h->vol + c * h->nvox;
	if (h->low)
		rows[k++] = h->low;
	for (uint32_t c = 0; c < h->nch && h->low; c++)
		if (h->ch[c] != CFG_CH_STRUCTURE)
			rows[k++] = h->lowf[h->ch[c]];
	for (uint32_t c = 0; c < h->nch && h->full; c++)
		rows[k++] = h->full + c * h->nvox;
	rows[k++] = &epoch;
	rows[k++] = offset;
	if (h->md)
		rows[k++] = h->md;
	rows[k++] = &generation;
	rows[k++] = &generation_index;
	rows[k++] = NULL; /* generations, generation_numbers: written once at the start */
	rows[k++] = NULL;
	/* the thread that publishes may not be the one that created the file: HDF5's error
	 * printing is set per thread (h5vol's message says what failed) */
	H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
	rc = h5vol_append(h->w, rows, err, errlen);
	if (rc < 0)
		return rc;
	for (uint32_t b = 0; h->md && b < ny; b++) {
		h->med_sum += h->md[b];
		h->med_max = h->md[b] > h->med_max ? h->md[b] : h->med_max;
	}
	h->done++;
	t = vr_mono_s();
	if (h->progress && (t - h->tshow > 0.1 || h->done == h->n)) {
		double dt = t - h->t0 > 1e-9 ? t - h->t0 : 1e-9;

		fprintf(stderr, "\rprocess: epoch %llu/%llu  %.2f epochs/s  %.0f A-scans/s  ",
		        (unsigned long long)h->done, (unsigned long long)h->n, h->done / dt,
		        (double)h->done * nx * ny / dt);
		h->tshow = t;
	}
	return 0;
}

static void sink_abort(void *ctx)
{
	/* the buffers are the sink's own: nothing to give back */
}

void proc_h5_sink(struct proc_h5 *h, struct pl_sink *sink)
{
	sink->ctx = h;
	sink->begin = sink_begin;
	sink->publish = sink_publish;
	sink->abort = sink_abort;
}

uint64_t proc_h5_done(const struct proc_h5 *h)
{
	return h->done;
}

bool proc_h5_median_depths(const struct proc_h5 *h, double *mean, uint32_t *max)
{
	const uint32_t ny = h->cfg->geometry.bscans_per_volume;

	if (!h->md || !h->done)
		return false;
	*mean = (double)h->med_sum / ((double)h->done * ny);
	*max = h->med_max;
	return true;
}

int proc_h5_close(struct proc_h5 *h, char *err, size_t errlen)
{
	int rc = 0;

	if (!h)
		return 0;
	if (h->progress && h->done)
		fputc('\n', stderr);
	if (h->w && !h5vol_broken(h->w) &&
	    vr_h5_attr_u32(h5vol_file(h->w), "epochs", (uint32_t)h->done) < 0)
		rc = vr_err(err, errlen, -EIO, "%s: writing the attribute epochs failed", h->path);
	if (h->w) {
		int rc2 = h5vol_close(h->w, rc ? NULL : err, rc ? 0 : errlen);
		rc = rc ? rc : rc2;
	}
	be_host_free(h->be, h->vol);
	be_host_free(h->be, h->low);
	be_host_free(h->be, h->full);
	for (int c = 0; c < CFG_CH_COUNT; c++)
		be_host_free(h->be, h->lowf[c]);
	be_host_free(h->be, h->md);
	if (h->text_type >= 0)
		H5Tclose(h->text_type);
	free(h);
	return rc;
}
