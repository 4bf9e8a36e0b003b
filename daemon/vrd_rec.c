/* SPDX-License-Identifier: MIT */
/*
 * The processed recorder of volrecd (docs/recording.md): the publishing path hands it a copy of
 * every volume it publishes (all channels, with the description readers see) into buffers of
 * its own, never waiting; its own thread writes them through formats/h5rec.h into
 * <record.dir>/<name>.h5, the file `volrec record` writes. When the disk falls behind, whole
 * volumes are left out, counted and noted in the file's /missed (reason 3).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/internal.h"
#include "daemon/vrd_gen.h"
#include "formats/h5attr.h"
#include "formats/h5rec.h"
#include "formats/h5vol.h"

/* A queued volume's description. */
struct rec_meta {
	struct volrec_view v;
	struct volrec_channel ch[VOLREC_CHANNELS_MAX];
	double um[3];
	uint32_t gen;
	uint64_t skip_first, skip_last; /* sequences left out just before it; skip_first 0: none */
};

struct vrd_rec {
	struct vrd_record c;   /* the recording (its units: volumes); c.mu guards what follows */
	struct vrd_gens *gens; /* the service's: the values of each volume's generation */

	/* the volumes to come (vrd_rec_configure), under c.mu */
	struct h5rec_layout l;
	uint64_t ch_bytes; /* one channel of one volume */
	char instance[CFG_NAME_MAX];

	/* one recording, under c.mu */
	bool copying; /* the publishing path copies into a buffer it took (c.b stays) */
	struct h5rec *w;
	char *yaml; /* the configuration in the file, owned while w is */
	struct rec_meta m[VRD_BUFQ_MAX];
	uint64_t skip_first, skip_last; /* left out since the last volume queued; 0: none */
	uint64_t skip_session;
};

/* ---- the publishing path (processing thread) ---------------------------------------------- */

/* The description of the volume as a reader sees it (ipc/reader.c), into m. */
static void describe(struct rec_meta *m, const struct vrd_rec *r, uint64_t session,
                     const struct ipc_volume_meta *in)
{
	memset(m, 0, sizeof(*m));
	m->v = (struct volrec_view){.ny = r->l.Y,
	                            .nx = r->l.X,
	                            .nz = r->l.Z,
	                            .dtype = VOLREC_DTYPE_U8,
	                            .bytes = r->ch_bytes,
	                            .flags = in->flags,
	                            .session_id = session,
	                            .sequence = in->sequence,
	                            .volume_id = in->volume_id,
	                            .epoch = in->epoch,
	                            .offset_x = in->offset_x,
	                            .offset_y = in->offset_y,
	                            .t_first_ns = in->t_first_ns,
	                            .t_last_ns = in->t_last_ns,
	                            .t_publish_ns = in->t_publish_ns,
	                            .latency_ns = in->latency_ns};
	for (uint32_t c = 0; c < r->l.nch; c++) {
		const struct volrec_channel_desc *d = &in->channel[c];

		m->ch[c] = (struct volrec_channel){
		        .kind = d->kind,
		        .method = d->method,
		        .value_lo = d->value_lo,
		        .value_hi = d->value_hi,
		        .velocity_mm_s = {d->velocity_lo_mm_s, d->velocity_hi_mm_s},
		        .period_us = d->period_us,
		        .mask_db = d->mask_db,
		        .half_window = d->half_window,
		        .flags = d->flags,
		        .center_wavelength_nm = d->center_wavelength_nm,
		        .refractive_index = d->refractive_index,
		};
		memcpy(m->ch[c].units, d->units, sizeof(m->ch[c].units));
		m->ch[c].units[sizeof(m->ch[c].units) - 1] = '\0';
	}
	memcpy(m->um, in->voxel_um, sizeof(m->um));
	m->gen = in->generation;
}

/* A volume left out (no buffer free): counted, and noted with the next one queued. mu held. */
static void leave_out(struct vrd_rec *r, uint64_t session, uint64_t sequence)
{
	r->c.skipped++;
	if (!r->skip_first || r->skip_session != session)
		r->skip_first = sequence;
	r->skip_last = sequence;
	r->skip_session = session;
}

void vrd_rec_volume(struct vrd_rec *r, uint64_t session, const struct ipc_volume_meta *meta,
                    const void *data)
{
	uint8_t *dst;
	int buf;

	pthread_mutex_lock(&r->c.mu);
	if (!r->c.accepting || meta->channels != r->l.nch)
		goto out;
	if (r->c.until_ns && vr_mono_ns() >= r->c.until_ns) {
		vrd_record_finish(&r->c, "seconds reached");
		goto out;
	}
	buf = vrd_bufq_take(&r->c.b);
	if (buf < 0) {
		leave_out(r, session, meta->sequence);
		goto out;
	}
	describe(&r->m[buf], r, session, meta);
	dst = r->c.b.buf[buf];
	r->copying = true; /* the buffers stay while it copies (reap waits) */
	pthread_mutex_unlock(&r->c.mu);

	memcpy(dst, data, r->ch_bytes * r->l.nch);

	pthread_mutex_lock(&r->c.mu);
	r->copying = false;
	pthread_cond_broadcast(&r->c.cv);
	if (!r->c.accepting) { /* stopped meanwhile */
		vrd_bufq_give(&r->c.b, buf);
		goto out;
	}
	if (r->skip_first && r->skip_session == session) {
		r->m[buf].skip_first = r->skip_first;
		r->m[buf].skip_last = r->skip_last;
	}
	r->skip_first = r->skip_last = 0;
	vrd_record_queue(&r->c, buf, "volumes reached");
out:
	pthread_mutex_unlock(&r->c.mu);
}

/* ---- the writer thread --------------------------------------------------------------------- */

/* The values of generation n for the file (h5rec_gen_fn). */
static char *gen_values(void *ctx, uint32_t n)
{
	struct vrd_rec *r = ctx;

	return vrd_gen_dup(r->gens, n);
}

/* Write one queued volume, after the gap before it in /missed. 0, -ENOSPC (record.min_free_gb
 * or a full disk) or as h5rec_append, with the message in err. */
static int write_one(struct vrd_rec *r, const struct rec_meta *m, const uint8_t *data, char *err,
                     size_t errlen)
{
	int rc;

	if (vrd_record_too_full(-1, r->c.path, r->c.min_free, r->ch_bytes * r->l.nch, err, errlen))
		return -ENOSPC;
	if (m->skip_first) {
		rc = h5rec_miss(r->w, m->v.session_id, m->skip_first, m->skip_last, H5REC_LEFT_OUT,
		                err, errlen);
		if (rc)
			return rc;
	}
	return h5rec_append(r->w, &m->v, data, m->ch, m->um, m->gen, err, errlen);
}

/* The end: the volumes left out after the last one written into /missed, the summary, the
 * file closed (as of its last whole volume after an error). mu not held. */
static void close_file(struct vrd_rec *r, int rc)
{
	char err[1024] = "", end[64];
	uint64_t first, last, session, volumes = 0;
	bool complete;

	pthread_mutex_lock(&r->c.mu);
	first = r->skip_first;
	last = r->skip_last;
	session = r->skip_session;
	r->skip_first = r->skip_last = 0;
	snprintf(end, sizeof(end), "%s", r->c.end[0] ? r->c.end : "record_stop");
	pthread_mutex_unlock(&r->c.mu);
	if (!rc && first &&
	    h5rec_miss(r->w, session, first, last, H5REC_LEFT_OUT, err, sizeof(err)))
		rc = -EIO;
	complete = !rc && h5rec_missed(r->w) == 0;
	rc = h5rec_close(r->w, end, complete, 1, &volumes, err, sizeof(err));
	pthread_mutex_lock(&r->c.mu);
	r->w = NULL;
	free(r->yaml);
	r->yaml = NULL;
	if (rc < 0)
		vrd_record_fail(&r->c, h5vol_is_nospace(rc) ? "disk full" : "write error", err);
	pthread_mutex_unlock(&r->c.mu);
}

static void *rec_main(void *arg)
{
	struct vrd_rec *r = arg;
	char err[1024] = "", msg[5600];
	int buf, prio, rc = 0;

	while ((buf = vrd_record_next(&r->c, rc)) >= 0) {
		rc = write_one(r, &r->m[buf], r->c.b.buf[buf], err, sizeof(err));

		pthread_mutex_lock(&r->c.mu);
		vrd_bufq_give(&r->c.b, buf);
		if (rc == 0) {
			r->c.written = h5rec_count(r->w);
			r->c.bytes += r->ch_bytes * r->l.nch;
		} else {
			vrd_record_fail(&r->c, h5vol_is_nospace(rc) ? "disk full" : "write error",
			                err);
		}
		pthread_mutex_unlock(&r->c.mu);
	}
	close_file(r, rc);
	prio = vrd_record_done(&r->c, "processed", "volumes", msg, sizeof(msg));
	vrd_event("record_stopped", prio, msg, NULL);
	return NULL;
}

/* ---- life cycle ---------------------------------------------------------------------------- */

int vrd_rec_open(const struct vr_config *cfg, struct vrd_gens *gens, struct vrd_rec **out,
                 char *err, size_t errlen)
{
	struct vrd_rec *r = calloc(1, sizeof(*r));

	if (!r)
		return vr_err(err, errlen, -ENOMEM, "out of memory");
	vrd_record_init(&r->c);
	r->gens = gens;
	h5vol_init(); /* before HDF5 initializes itself (h5vol.h) */
	vrd_rec_configure(r, cfg);
	*out = r;
	return 0;
}

void vrd_rec_configure(struct vrd_rec *r, const struct vr_config *cfg)
{
	enum cfg_channel ch[CFG_CH_COUNT];
	uint32_t dims[3];

	pthread_mutex_lock(&r->c.mu);
	cfg_out_dims(cfg, dims);
	r->l = (struct h5rec_layout){.Y = dims[0], .X = dims[1], .Z = dims[2]};
	r->l.nch = cfg_channels(cfg, ch);
	for (uint32_t c = 0; c < r->l.nch; c++)
		r->l.kind[c] = (uint32_t)ch[c];
	r->ch_bytes = (uint64_t)dims[0] * dims[1] * dims[2];
	snprintf(r->instance, sizeof(r->instance), "%s", cfg->instance);
	pthread_mutex_unlock(&r->c.mu);
}

/* The buffers freed once no volume is being copied into one; mu not held. */
static void free_buffers(struct vrd_rec *r)
{
	pthread_mutex_lock(&r->c.mu);
	while (r->copying)
		pthread_cond_wait(&r->c.cv, &r->c.mu);
	vrd_bufq_free(&r->c.b);
	pthread_mutex_unlock(&r->c.mu);
}

/* Join a recording's thread that ended; mu not held. */
static void reap(struct vrd_rec *r)
{
	if (vrd_record_reap(&r->c))
		free_buffers(r);
}

/* The configuration in force as YAML text (malloc'ed), NULL when memory is short. */
static char *config_text(const struct vr_config *cfg)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	if (!f)
		return NULL;
	if (cfg_dump(cfg, f) < 0) {
		fclose(f);
		free(text);
		return NULL;
	}
	if (fclose(f)) {
		free(text);
		return NULL;
	}
	return text;
}

/* What the configuration says of the volumes, as the attributes `volrec record` takes from the
 * daemon's status. */
static void describe_file(struct vrd_rec *r, const struct vr_config *cfg, const char *name)
{
	hid_t f = h5rec_file(r->w);
	uint32_t stride[2] = {cfg->geometry.stride[0], cfg->geometry.stride[1]};
	uint32_t depth[2] = {cfg->geometry.depth_range[0], cfg->geometry.depth_range[1]};

	vr_h5_attr_u64(f, "samples_per_ascan", cfg->geometry.samples_per_ascan);
	vr_h5_attr_u64(f, "ascans_per_bscan", cfg->geometry.ascans_per_bscan);
	vr_h5_attr_u64(f, "bscans_per_volume", cfg->geometry.bscans_per_volume);
	vr_h5_attr_u64(f, "repeats", cfg->geometry.repeats);
	vr_h5_attr(f, "stride", H5T_NATIVE_UINT32, 2, stride);
	vr_h5_attr(f, "depth_range", H5T_NATIVE_UINT32, 2, depth);
	vr_h5_attr_str(f, "sample_type", cfg_sample_name(cfg->geometry.sample_type));
	vr_h5_attr_str(f, "recorded_by", "volrecd");
	vr_h5_attr_str(f, "name", name);
}

/* The file at path with its description (r->w, r->yaml). 0 or a negative errno with the
 * message in err, nothing left behind. */
static int open_file(struct vrd_rec *r, const struct vr_config *cfg, const char *name,
                     const char *path, char *err, size_t errlen)
{
	struct h5rec_layout l;
	int rc;

	pthread_mutex_lock(&r->c.mu);
	l = r->l;
	pthread_mutex_unlock(&r->c.mu);
	r->yaml = config_text(cfg);
	rc = h5rec_create(path, false, 0, &l,
	                  &(struct h5rec_origin){.instance = r->instance,
	                                         .config_yaml = r->yaml,
	                                         .config_from = "daemon",
	                                         .gen_values = gen_values,
	                                         .ctx = r},
	                  &r->w, err, errlen);
	if (rc == -EEXIST)
		vr_err(err, errlen, rc,
		       "record_start: %s exists (a recording is never replaced: choose another "
		       "name)",
		       path);
	if (!rc) {
		describe_file(r, cfg, name);
		rc = h5rec_describe(r->w, err, errlen);
		if (rc) {
			h5rec_close(r->w, "write error", false, 1, NULL, NULL, 0);
			r->w = NULL;
			remove(path);
		}
	}
	if (rc) {
		free(r->yaml);
		r->yaml = NULL;
	}
	return rc;
}

int vrd_rec_start(struct vrd_rec *r, const struct vr_config *cfg, const char *name,
                  uint64_t volumes, double seconds, char *err, size_t errlen)
{
	char path[sizeof(r->c.path)];
	int rc;

	reap(r);
	rc = vrd_record_name_check(name, err, errlen);
	if (!rc)
		rc = vrd_record_idle(&r->c, "processed", err, errlen);
	if (rc)
		return rc;
	snprintf(path, sizeof(path), "%s/%s.h5", cfg->record.dir, name);
	rc = vrd_record_room(cfg->record.dir, cfg->record.min_free_gb, r->ch_bytes * r->l.nch, err,
	                     errlen);
	if (rc)
		return rc;
	pthread_mutex_lock(&r->c.mu);
	rc = vrd_bufq_alloc(&r->c.b, r->ch_bytes * r->l.nch, (uint64_t)cfg->record.queue_mb << 20,
	                    64, "processed recording", err, errlen);
	pthread_mutex_unlock(&r->c.mu);
	if (!rc)
		rc = open_file(r, cfg, name, path, err, errlen);
	if (rc) {
		free_buffers(r);
		return rc;
	}
	pthread_mutex_lock(&r->c.mu);
	vrd_record_begin(&r->c, cfg, name, path, volumes, seconds);
	r->skip_first = r->skip_last = 0;
	rc = vrd_record_spawn(&r->c, rec_main, r, err, errlen);
	pthread_mutex_unlock(&r->c.mu);
	if (rc) {
		h5rec_close(r->w, "thread", false, 1, NULL, NULL, 0);
		r->w = NULL;
		free(r->yaml);
		r->yaml = NULL;
		free_buffers(r);
		return rc;
	}
	vrd_log(LOG_NOTICE, "record_started", "processed recording %s started", path);
	return 0;
}

int vrd_rec_stop(struct vrd_rec *r, char *err, size_t errlen)
{
	return vrd_record_stop(&r->c, "processed", err, errlen);
}

struct json_object *vrd_rec_status(struct vrd_rec *r)
{
	struct json_object *o = json_object_new_object();
	double secs;

	reap(r);
	pthread_mutex_lock(&r->c.mu);
	secs = vrd_record_status_begin(&r->c, o, "volumes");
	if (r->c.state != VRD_RECORD_IDLE) {
		json_object_object_add(o, "volumes_per_s",
		                       json_object_new_double(secs > 0 ? r->c.written / secs : 0));
		json_object_object_add(o, "volumes_limit",
		                       json_object_new_int64((int64_t)r->c.limit));
	}
	vrd_record_status_end(&r->c, o);
	pthread_mutex_unlock(&r->c.mu);
	return o;
}

void vrd_rec_end(struct vrd_rec *r, const char *why)
{
	vrd_record_end(&r->c, why);
	free_buffers(r);
}

void vrd_rec_close(struct vrd_rec *r)
{
	if (!r)
		return;
	vrd_rec_end(r, "volrecd stopping");
	vrd_record_destroy(&r->c);
	free(r);
}
