/* SPDX-License-Identifier: MIT */
/*
 * The raw recorder of volrecd (docs/recording.md): a tap of the pipeline (pl_tap) copies whole
 * epochs of raw B-scans into buffers of its own on the acquisition thread, never waiting; its
 * own thread writes them as frames of a recording (sources/recording.h) into record.dir. When the
 * disk falls behind, whole epochs are left out (counted, and marked in the next frame's
 * index entry); acquisition and processing never wait for it.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "daemon/internal.h"
#include "sources/recording.h"

struct vrd_raw {
	struct vrd_record c; /* the recording (its units: epochs); c.mu guards what follows */
	uint32_t ny, sx, sy; /* ny: raw B-scans an epoch (positions x repeats) */
	size_t bscan_bytes;
	uint64_t epoch_bytes, frame_bytes;

	/* one recording, under c.mu */
	struct src_rec_writer *w;
	struct src_rec_frame f[VRD_BUFQ_MAX]; /* the frame header of each buffer queued */
	int cur;                              /* the buffer the acquisition thread fills, -1 none */
	struct src_rec_frame cur_f;
	uint32_t cur_got;
	uint64_t skipped_pending; /* epochs left out since the last one queued */
	bool direct;
};

/* ---- the tap (acquisition thread) ---------------------------------------------------------- */

static void drop_cur(struct vrd_raw *r)
{
	vrd_bufq_give(&r->c.b, r->cur);
	r->cur = -1;
}

/* The first B-scan of an epoch: a buffer for it, or the epoch is left out. mu held. */
static void tap_begin(struct vrd_raw *r, uint64_t epoch, uint64_t t_ns)
{
	drop_cur(r); /* the rest of a cut epoch */
	if ((r->c.limit && r->c.accepted >= r->c.limit) ||
	    (r->c.until_ns && vr_mono_ns() >= r->c.until_ns)) {
		vrd_record_finish(&r->c, r->c.until_ns ? "seconds reached" : "epochs reached");
		return;
	}
	r->cur = vrd_bufq_take(&r->c.b);
	if (r->cur < 0) {
		r->c.skipped++;
		r->skipped_pending++;
		return;
	}
	memset(&r->cur_f, 0, sizeof(r->cur_f));
	r->cur_f.epoch = epoch;
	vr_scan_offset(epoch, r->sx, r->sy, &r->cur_f.ox, &r->cur_f.oy);
	r->cur_f.t_first_ns = t_ns;
	r->cur_got = 0;
}

static void tap_bscan(void *ctx, uint64_t epoch, uint32_t b, const void *data, size_t bytes,
                      uint64_t t_ns, unsigned marks)
{
	struct vrd_raw *r = ctx;

	pthread_mutex_lock(&r->c.mu);
	if (!r->c.accepting)
		goto out;
	if (b == 0)
		tap_begin(r, epoch, t_ns);
	if (r->cur < 0)
		goto out;
	if (epoch != r->cur_f.epoch || b != r->cur_got || bytes != r->bscan_bytes) {
		drop_cur(r);
		goto out;
	}
	memcpy(r->c.b.buf[r->cur] + SRC_REC_FRAME_HDR + (size_t)b * r->bscan_bytes, data, bytes);
	r->cur_got++;
	r->cur_f.t_last_ns = t_ns;
	r->cur_f.marks |= (marks & PL_TAP_GAP ? SRC_REC_MARK_GAP : 0) |
	                  (marks & PL_TAP_RING_FULL ? SRC_REC_MARK_RING_FULL : 0);
out:
	pthread_mutex_unlock(&r->c.mu);
}

static void tap_epoch_end(void *ctx, uint64_t epoch, bool whole)
{
	struct vrd_raw *r = ctx;

	pthread_mutex_lock(&r->c.mu);
	if (r->cur >= 0 && r->cur_f.epoch == epoch) {
		if (whole && r->cur_got == r->ny && r->c.accepting) {
			r->f[r->cur] = r->cur_f;
			r->f[r->cur].skipped_before = r->skipped_pending;
			r->skipped_pending = 0;
			vrd_record_queue(&r->c, r->cur, "epochs reached");
			r->cur = -1;
		} else {
			drop_cur(r);
		}
	}
	pthread_mutex_unlock(&r->c.mu);
}

/* ---- the writer thread --------------------------------------------------------------------- */

/* Write the epoch queued in buffer buf (the writer thread's until it gives it back) as its
 * frame: 0, -ENOSPC (record.min_free_gb) or as src_rec_writer_frame, with the message in err. */
static int write_one(struct vrd_raw *r, int buf, char *err, size_t errlen)
{
	struct src_rec_frame f = r->f[buf]; /* the writer fills in its CRC and index */

	if (vrd_record_too_full(src_rec_writer_fd(r->w), r->c.path, r->c.min_free, r->frame_bytes,
	                        err, errlen))
		return -ENOSPC;
	return src_rec_writer_frame(r->w, &f, r->c.b.buf[buf], err, errlen);
}

static void *raw_main(void *arg)
{
	struct vrd_raw *r = arg;
	char err[512] = "", msg[5600];
	int buf, prio, rc = 0;

	while ((buf = vrd_record_next(&r->c, rc)) >= 0) {
		rc = write_one(r, buf, err, sizeof(err));

		pthread_mutex_lock(&r->c.mu);
		vrd_bufq_give(&r->c.b, buf);
		if (rc == 0) {
			struct src_rec_writer_stats ws;
			src_rec_writer_stats(r->w, &ws);
			r->c.written = ws.frames;
			r->c.bytes = ws.bytes;
		} else {
			vrd_record_fail(&r->c, rc == -ENOSPC ? "disk full" : "write error", err);
		}
		pthread_mutex_unlock(&r->c.mu);
	}
	rc = src_rec_writer_close(r->w, err, sizeof(err));
	pthread_mutex_lock(&r->c.mu);
	r->w = NULL;
	if (rc < 0)
		vrd_record_fail(&r->c, "write error", err);
	pthread_mutex_unlock(&r->c.mu);
	prio = vrd_record_done(&r->c, "raw", "epochs", msg, sizeof(msg));
	vrd_event("record_stopped", prio, msg, NULL);
	return NULL;
}

/* ---- life cycle ---------------------------------------------------------------------------- */

int vrd_raw_open(const struct vr_config *cfg, struct vrd_raw **out, char *err, size_t errlen)
{
	struct vrd_raw *r = calloc(1, sizeof(*r));

	if (!r)
		return vr_err(err, errlen, -ENOMEM, "out of memory");
	vrd_record_init(&r->c);
	r->cur = -1;
	vrd_raw_configure(r, cfg);
	*out = r;
	return 0;
}

void vrd_raw_configure(struct vrd_raw *r, const struct vr_config *cfg)
{
	pthread_mutex_lock(&r->c.mu);
	r->ny = cfg_raw_bscans(cfg);
	r->sx = cfg->geometry.stride[0];
	r->sy = cfg->geometry.stride[1];
	r->bscan_bytes = (size_t)cfg->geometry.ascans_per_bscan *
	                 volrec_sample_bytes(cfg_sample_abi(cfg->geometry.sample_type),
	                                     cfg->geometry.samples_per_ascan);
	r->epoch_bytes = (uint64_t)r->bscan_bytes * r->ny;
	r->frame_bytes = src_rec_frame_size(r->epoch_bytes);
	pthread_mutex_unlock(&r->c.mu);
}

void vrd_raw_tap(struct vrd_raw *r, struct pl_tap *tap)
{
	tap->ctx = r;
	tap->bscan = tap_bscan;
	tap->epoch_end = tap_epoch_end;
}

/* The buffers freed, none filled by the tap any more; mu not held. */
static void free_buffers(struct vrd_raw *r)
{
	pthread_mutex_lock(&r->c.mu);
	vrd_bufq_free(&r->c.b);
	r->cur = -1;
	pthread_mutex_unlock(&r->c.mu);
}

/* Join a recording's thread that ended; mu not held. */
static void reap(struct vrd_raw *r)
{
	if (vrd_record_reap(&r->c))
		free_buffers(r);
}

/* The effective configuration with its tables as sections beside it (the tables' paths in
 * the text name files "<key>.txt" beside the configuration, as `volrec process` writes them). */
static int make_sections(const struct vr_config *cfg, struct src_rec_section *s, size_t *ns,
                         char *err, size_t errlen)
{
	struct {
		const char *key;
		size_t off;
	} tabs[] = {
	        {"preprocess.background.reference",
	         offsetof(struct vr_config, preprocess.background.reference)},
	        {"preprocess.resample.table",
	         offsetof(struct vr_config, preprocess.resample.table)},
	        {"preprocess.dispersion.table",
	         offsetof(struct vr_config, preprocess.dispersion.table)},
	};
	struct vr_config c;
	size_t n = 1;
	FILE *f;

	if (cfg_copy(&c, cfg) < 0)
		return vr_err(err, errlen, -ENOMEM, "out of memory");
	for (size_t i = 0; i < VR_ARRAY_SIZE(tabs); i++) {
		struct cfg_table *t = (struct cfg_table *)((char *)&c + tabs[i].off);
		if (!t->data)
			continue;
		snprintf(t->path, sizeof(t->path), "%s.txt", tabs[i].key);
		snprintf(s[n].name, sizeof(s[n].name), "%s", tabs[i].key);
		f = open_memstream(&s[n].text, &s[n].len);
		if (!f)
			goto oom;
		for (size_t k = 0; k < t->len; k++)
			fprintf(f, "%.17g\n", t->data[k]);
		if (fclose(f))
			goto oom;
		n++;
	}
	snprintf(s[0].name, sizeof(s[0].name), "config");
	f = open_memstream(&s[0].text, &s[0].len);
	if (!f || cfg_dump(&c, f) < 0 || fclose(f))
		goto oom;
	cfg_free(&c);
	*ns = n;
	return 0;
oom:
	cfg_free(&c);
	for (size_t i = 0; i < n; i++)
		free(s[i].text);
	return vr_err(err, errlen, -ENOMEM, "out of memory");
}

/* The epoch buffers and the recording's file at path (r->w), with the geometry, the metadata
 * and the configuration's sections in its header. 0 or a negative errno with the message in
 * err, nothing left allocated. */
static int open_recording(struct vrd_raw *r, const struct vr_config *cfg, const char *name,
                          const char *path, char *err, size_t errlen)
{
	struct src_rec_section sec[4] = {0};
	struct src_replay_info info = {0};
	char meta[1024];
	size_t ns = 0;
	int rc;

	info.sample_type = cfg_sample_abi(cfg->geometry.sample_type);
	info.samples_per_ascan = cfg->geometry.samples_per_ascan;
	info.ascans_per_bscan = cfg->geometry.ascans_per_bscan;
	info.bscans_per_volume = cfg->geometry.bscans_per_volume;
	info.repeats = cfg->geometry.repeats;
	info.stride_x = cfg->geometry.stride[0];
	info.stride_y = cfg->geometry.stride[1];
	info.flags = cfg->geometry.bidirectional ? SRC_REPLAY_FLAG_BIDIR : 0;
	snprintf(meta, sizeof(meta),
	         "recording: raw\nname: %s\nvolrec_version: \"%s\"\nsample_type: %s\nrepeats: %u\n"
	         "started_unix_s: %.3f\n",
	         name, VOLREC_VERSION, cfg_sample_name(cfg->geometry.sample_type),
	         cfg->geometry.repeats, (double)vr_real_ns() / 1e9);
	rc = make_sections(cfg, sec, &ns, err, errlen);
	if (rc)
		return rc;
	pthread_mutex_lock(&r->c.mu);
	rc = vrd_bufq_alloc(&r->c.b, r->frame_bytes, (uint64_t)cfg->record.queue_mb << 20,
	                    SRC_REPLAY_ALIGN, "raw recording", err, errlen);
	pthread_mutex_unlock(&r->c.mu);
	if (!rc)
		rc = src_rec_writer_open(path, &info, meta, sec, ns, &r->w, err, errlen);
	if (rc == -EEXIST)
		vr_err(err, errlen, rc,
		       "record_start: %s exists (a recording is never replaced: choose another "
		       "name)",
		       path);
	for (size_t i = 0; i < ns; i++)
		free(sec[i].text);
	if (rc)
		free_buffers(r);
	return rc;
}

int vrd_raw_start(struct vrd_raw *r, const struct vr_config *cfg, const char *name, uint64_t epochs,
                  double seconds, char *err, size_t errlen)
{
	char path[sizeof(r->c.path)];
	int rc;

	reap(r);
	rc = vrd_record_name_check(name, err, errlen);
	if (!rc)
		rc = vrd_record_idle(&r->c, "raw", err, errlen);
	if (rc)
		return rc;
	snprintf(path, sizeof(path), "%s/%s.vrr", cfg->record.dir, name);
	rc = vrd_record_room(cfg->record.dir, cfg->record.min_free_gb, r->frame_bytes, err, errlen);
	if (!rc)
		rc = open_recording(r, cfg, name, path, err, errlen);
	if (rc)
		return rc;
	pthread_mutex_lock(&r->c.mu);
	struct src_rec_writer_stats ws;
	src_rec_writer_stats(r->w, &ws);
	vrd_record_begin(&r->c, cfg, name, path, epochs, seconds);
	r->direct = ws.direct;
	r->c.bytes = ws.bytes; /* the file's header */
	r->skipped_pending = 0;
	rc = vrd_record_spawn(&r->c, raw_main, r, err, errlen);
	pthread_mutex_unlock(&r->c.mu);
	if (rc) {
		if (src_rec_writer_close(r->w, NULL, 0) < 0)
			r->c.failed = true;
		r->w = NULL;
		free_buffers(r);
		return rc;
	}
	vrd_log(LOG_NOTICE, "record_started", "raw recording %s started (%s writes)%s", path,
	        ws.direct ? "O_DIRECT" : "buffered", "");
	return 0;
}

int vrd_raw_stop(struct vrd_raw *r, char *err, size_t errlen)
{
	return vrd_record_stop(&r->c, "raw", err, errlen);
}

struct json_object *vrd_raw_status(struct vrd_raw *r)
{
	struct json_object *o = json_object_new_object();

	reap(r);
	pthread_mutex_lock(&r->c.mu);
	vrd_record_status_begin(&r->c, o, "epochs");
	if (r->c.state != VRD_RECORD_IDLE) {
		json_object_object_add(o, "epochs_limit",
		                       json_object_new_int64((int64_t)r->c.limit));
		json_object_object_add(o, "direct", json_object_new_boolean(r->direct));
	}
	vrd_record_status_end(&r->c, o);
	pthread_mutex_unlock(&r->c.mu);
	return o;
}

void vrd_raw_end(struct vrd_raw *r, const char *why)
{
	vrd_record_end(&r->c, why);
	free_buffers(r);
}

void vrd_raw_close(struct vrd_raw *r)
{
	if (!r)
		return;
	vrd_raw_end(r, "volrecd stopping");
	vrd_record_destroy(&r->c);
	free(r);
}
