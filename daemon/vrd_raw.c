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

enum raw_state { RAW_IDLE, RAW_RECORDING, RAW_FINISHING, RAW_DONE };
static const char *const raw_state_names[] = {"idle", "recording", "finishing", "finished"};

struct vrd_raw {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint32_t ny, sx, sy; /* ny: raw B-scans an epoch (positions x repeats) */
	size_t bscan_bytes;
	uint64_t epoch_bytes, frame_bytes;

	/* one recording, under mu */
	enum raw_state state;
	bool accepting; /* the tap takes epochs */
	struct src_rec_writer *w;
	pthread_t thr;
	bool thr_live;
	struct vrd_bufq b;
	struct src_rec_frame f[VRD_BUFQ_MAX]; /* the frame header of each buffer queued */
	int cur;                              /* the buffer the acquisition thread fills, -1 none */
	struct src_rec_frame cur_f;
	uint32_t cur_got;
	uint64_t epochs_limit, accepted, skipped, skipped_pending, written, bytes;
	uint64_t until_ns, started_ns, ended_ns;
	double min_free;
	bool direct, failed;
	char name[CFG_NAME_MAX], path[CFG_PATH_MAX + CFG_NAME_MAX + 8], error[512];
	char end[64]; /* why it ended (status "end"), "" while it runs */
};

/* The first reason a recording ends is the one status shows. mu held. */
static void set_end(struct vrd_raw *r, const char *why)
{
	vrd_record_set_end(r->end, sizeof(r->end), why);
}

/* ---- the tap (acquisition thread) ---------------------------------------------------------- */

static void drop_cur(struct vrd_raw *r)
{
	vrd_bufq_give(&r->b, r->cur);
	r->cur = -1;
}

/* The first B-scan of an epoch: a buffer for it, or the epoch is left out. mu held. */
static void tap_begin(struct vrd_raw *r, uint64_t epoch, uint64_t t_ns)
{
	drop_cur(r); /* the rest of a cut epoch */
	if ((r->epochs_limit && r->accepted >= r->epochs_limit) ||
	    (r->until_ns && vr_mono_ns() >= r->until_ns)) {
		set_end(r, r->until_ns ? "seconds reached" : "epochs reached");
		r->accepting = false;
		r->state = RAW_FINISHING;
		pthread_cond_signal(&r->cv);
		return;
	}
	r->cur = vrd_bufq_take(&r->b);
	if (r->cur < 0) {
		r->skipped++;
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

	pthread_mutex_lock(&r->mu);
	if (!r->accepting)
		goto out;
	if (b == 0)
		tap_begin(r, epoch, t_ns);
	if (r->cur < 0)
		goto out;
	if (epoch != r->cur_f.epoch || b != r->cur_got || bytes != r->bscan_bytes) {
		drop_cur(r);
		goto out;
	}
	memcpy(r->b.buf[r->cur] + SRC_REC_FRAME_HDR + (size_t)b * r->bscan_bytes, data, bytes);
	r->cur_got++;
	r->cur_f.t_last_ns = t_ns;
	r->cur_f.marks |= (marks & PL_TAP_GAP ? SRC_REC_MARK_GAP : 0) |
	                  (marks & PL_TAP_RING_FULL ? SRC_REC_MARK_RING_FULL : 0);
out:
	pthread_mutex_unlock(&r->mu);
}

static void tap_epoch_end(void *ctx, uint64_t epoch, bool whole)
{
	struct vrd_raw *r = ctx;

	pthread_mutex_lock(&r->mu);
	if (r->cur >= 0 && r->cur_f.epoch == epoch) {
		if (whole && r->cur_got == r->ny && r->accepting) {
			r->f[r->cur] = r->cur_f;
			r->f[r->cur].skipped_before = r->skipped_pending;
			r->skipped_pending = 0;
			vrd_bufq_push(&r->b, r->cur);
			r->accepted++;
			r->cur = -1;
			if (r->epochs_limit && r->accepted >= r->epochs_limit) {
				set_end(r, "epochs reached");
				r->accepting = false;
				r->state = RAW_FINISHING;
			}
			pthread_cond_signal(&r->cv);
		} else {
			drop_cur(r);
		}
	}
	pthread_mutex_unlock(&r->mu);
}

/* ---- the writer thread --------------------------------------------------------------------- */

static void *raw_main(void *arg)
{
	struct vrd_raw *r = arg;
	char err[512] = "", msg[5200];
	int rc = 0;

	for (;;) {
		struct src_rec_frame f;
		int buf;

		pthread_mutex_lock(&r->mu);
		while (r->b.qlen == 0 && r->state == RAW_RECORDING)
			pthread_cond_wait(&r->cv, &r->mu);
		if (r->b.qlen == 0 || rc) {
			pthread_mutex_unlock(&r->mu);
			break;
		}
		buf = vrd_bufq_pop(&r->b);
		f = r->f[buf];
		pthread_mutex_unlock(&r->mu);

		if (vrd_record_too_full(src_rec_writer_fd(r->w), r->path, r->min_free,
		                        r->frame_bytes, err, sizeof(err)))
			rc = -ENOSPC;
		else
			rc = src_rec_writer_frame(r->w, &f, r->b.buf[buf], err, sizeof(err));

		pthread_mutex_lock(&r->mu);
		vrd_bufq_give(&r->b, buf);
		if (rc == 0) {
			struct src_rec_writer_stats ws;
			src_rec_writer_stats(r->w, &ws);
			r->written = ws.frames;
			r->bytes = ws.bytes;
		} else {
			/* stop taking epochs; what is queued is not written */
			r->accepting = false;
			r->state = RAW_FINISHING;
			r->failed = true;
			snprintf(r->error, sizeof(r->error), "%s", err);
			set_end(r, rc == -ENOSPC ? "disk full" : "write error");
			vrd_bufq_drain(&r->b);
		}
		pthread_mutex_unlock(&r->mu);
	}
	if (src_rec_writer_close(r->w, err, sizeof(err)) < 0 && !rc) {
		rc = -EIO;
		pthread_mutex_lock(&r->mu);
		r->failed = true;
		snprintf(r->error, sizeof(r->error), "%s", err);
		set_end(r, "write error");
		pthread_mutex_unlock(&r->mu);
	}
	pthread_mutex_lock(&r->mu);
	r->w = NULL;
	r->accepting = false;
	r->state = RAW_DONE;
	r->ended_ns = vr_mono_ns();
	snprintf(msg, sizeof(msg),
	         "raw recording %s: %llu epochs written, %llu left out, %llu bytes (%s)%s%s",
	         r->path, (unsigned long long)r->written, (unsigned long long)r->skipped,
	         (unsigned long long)r->bytes, r->end, r->failed ? ": " : "",
	         r->failed ? r->error : "");
	pthread_mutex_unlock(&r->mu);
	vrd_event("record_stopped", r->failed ? LOG_WARNING : LOG_NOTICE, msg, NULL);
	return NULL;
}

/* ---- life cycle ---------------------------------------------------------------------------- */

int vrd_raw_open(const struct vr_config *cfg, struct vrd_raw **out, char *err, size_t errlen)
{
	struct vrd_raw *r = calloc(1, sizeof(*r));

	if (!r)
		return vr_err(err, errlen, -ENOMEM, "out of memory");
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->cv, NULL);
	r->cur = -1;
	vrd_raw_configure(r, cfg);
	*out = r;
	return 0;
}

void vrd_raw_configure(struct vrd_raw *r, const struct vr_config *cfg)
{
	pthread_mutex_lock(&r->mu);
	r->ny = cfg_raw_bscans(cfg);
	r->sx = cfg->geometry.stride[0];
	r->sy = cfg->geometry.stride[1];
	r->bscan_bytes = (size_t)cfg->geometry.ascans_per_bscan *
	                 volrec_sample_bytes(cfg_sample_abi(cfg->geometry.sample_type),
	                                     cfg->geometry.samples_per_ascan);
	r->epoch_bytes = (uint64_t)r->bscan_bytes * r->ny;
	r->frame_bytes = src_rec_frame_size(r->epoch_bytes);
	pthread_mutex_unlock(&r->mu);
}

void vrd_raw_tap(struct vrd_raw *r, struct pl_tap *tap)
{
	tap->ctx = r;
	tap->bscan = tap_bscan;
	tap->epoch_end = tap_epoch_end;
}

static void free_buffers(struct vrd_raw *r)
{
	vrd_bufq_free(&r->b);
	r->cur = -1;
}

/* Join a recording's thread that ended; mu not held. */
static void reap(struct vrd_raw *r)
{
	pthread_mutex_lock(&r->mu);
	bool join = r->thr_live && r->state == RAW_DONE;
	if (join)
		r->thr_live = false; /* this caller joins it, no other */
	pthread_mutex_unlock(&r->mu);
	if (!join)
		return;
	pthread_join(r->thr, NULL);
	pthread_mutex_lock(&r->mu);
	free_buffers(r);
	pthread_mutex_unlock(&r->mu);
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
	pthread_mutex_lock(&r->mu);
	rc = vrd_bufq_alloc(&r->b, r->frame_bytes, (uint64_t)cfg->record.queue_mb << 20,
	                    SRC_REPLAY_ALIGN, "raw recording", err, errlen);
	pthread_mutex_unlock(&r->mu);
	if (!rc)
		rc = src_rec_writer_open(path, &info, meta, sec, ns, &r->w, err, errlen);
	if (rc == -EEXIST)
		vr_err(err, errlen, rc,
		       "record_start: %s exists (a recording is never replaced: choose another "
		       "name)",
		       path);
	for (size_t i = 0; i < ns; i++)
		free(sec[i].text);
	if (rc) {
		pthread_mutex_lock(&r->mu);
		free_buffers(r);
		pthread_mutex_unlock(&r->mu);
	}
	return rc;
}

int vrd_raw_start(struct vrd_raw *r, const struct vr_config *cfg, const char *name, uint64_t epochs,
                  double seconds, char *err, size_t errlen)
{
	char path[sizeof(r->path)];
	int rc;

	reap(r);
	rc = vrd_record_name_check(name, err, errlen);
	if (rc)
		return rc;
	pthread_mutex_lock(&r->mu);
	rc = r->state == RAW_RECORDING || r->state == RAW_FINISHING || r->thr_live;
	pthread_mutex_unlock(&r->mu);
	if (rc)
		return vr_err(err, errlen, -EBUSY,
		              "record_start: a raw recording (%s) is in progress", r->path);
	snprintf(path, sizeof(path), "%s/%s.vrr", cfg->record.dir, name);
	rc = vrd_record_room(cfg->record.dir, cfg->record.min_free_gb, r->frame_bytes, err, errlen);
	if (!rc)
		rc = open_recording(r, cfg, name, path, err, errlen);
	if (rc)
		return rc;
	pthread_mutex_lock(&r->mu);
	struct src_rec_writer_stats ws;
	src_rec_writer_stats(r->w, &ws);
	snprintf(r->name, sizeof(r->name), "%s", name);
	snprintf(r->path, sizeof(r->path), "%s", path);
	r->direct = ws.direct;
	r->bytes = ws.bytes;
	r->epochs_limit = epochs;
	r->started_ns = vr_mono_ns();
	r->until_ns = seconds > 0 ? r->started_ns + (uint64_t)(seconds * 1e9) : 0;
	r->min_free = cfg->record.min_free_gb;
	r->accepted = r->skipped = r->skipped_pending = r->written = 0;
	r->failed = false;
	r->error[0] = r->end[0] = '\0';
	r->state = RAW_RECORDING;
	rc = pthread_create(&r->thr, NULL, raw_main, r);
	if (rc) {
		r->state = RAW_IDLE;
		pthread_mutex_unlock(&r->mu);
		if (src_rec_writer_close(r->w, NULL, 0) < 0)
			r->failed = true;
		r->w = NULL;
		free_buffers(r);
		return vr_err(err, errlen, -rc, "record_start: thread: %s", strerror(rc));
	}
	r->thr_live = true;
	r->accepting = true;
	pthread_mutex_unlock(&r->mu);
	vrd_log(LOG_NOTICE, "record_started", "raw recording %s started (%s writes)%s", path,
	        ws.direct ? "O_DIRECT" : "buffered", "");
	return 0;
}

int vrd_raw_stop(struct vrd_raw *r, char *err, size_t errlen)
{
	bool was;

	pthread_mutex_lock(&r->mu);
	was = r->state == RAW_RECORDING;
	if (was) {
		set_end(r, "record_stop");
		r->accepting = false;
		r->state = RAW_FINISHING;
		pthread_cond_signal(&r->cv);
	}
	pthread_mutex_unlock(&r->mu);
	if (!was)
		return vr_err(err, errlen, -ENOENT, "record_stop: no raw recording in progress");
	return 0;
}

struct json_object *vrd_raw_status(struct vrd_raw *r)
{
	struct json_object *o = json_object_new_object();
	double secs;
	uint64_t now = vr_mono_ns();

	reap(r);
	pthread_mutex_lock(&r->mu);
	json_object_object_add(o, "state", json_object_new_string(raw_state_names[r->state]));
	if (r->state != RAW_IDLE) {
		secs = (double)((r->state == RAW_DONE ? r->ended_ns : now) - r->started_ns) / 1e9;
		json_object_object_add(o, "name", json_object_new_string(r->name));
		json_object_object_add(o, "file", json_object_new_string(r->path));
		json_object_object_add(o, "epochs_written",
		                       json_object_new_int64((int64_t)r->written));
		json_object_object_add(o, "skipped_epochs",
		                       json_object_new_int64((int64_t)r->skipped));
		json_object_object_add(o, "bytes", json_object_new_int64((int64_t)r->bytes));
		json_object_object_add(o, "seconds", json_object_new_double(secs));
		json_object_object_add(
		        o, "rate_mb_s",
		        json_object_new_double(secs > 0 ? r->bytes / secs / 1e6 : 0));
		json_object_object_add(o, "epochs_limit",
		                       json_object_new_int64((int64_t)r->epochs_limit));
		json_object_object_add(o, "direct", json_object_new_boolean(r->direct));
		json_object_object_add(o, "failed", json_object_new_boolean(r->failed));
		json_object_object_add(o, "error", json_object_new_string(r->error));
		json_object_object_add(o, "end", json_object_new_string(r->end));
	}
	pthread_mutex_unlock(&r->mu);
	return o;
}

void vrd_raw_end(struct vrd_raw *r, const char *why)
{
	bool live;

	pthread_mutex_lock(&r->mu);
	r->accepting = false;
	if (r->state == RAW_RECORDING) {
		set_end(r, why);
		r->state = RAW_FINISHING;
	}
	pthread_cond_signal(&r->cv);
	live = r->thr_live;
	r->thr_live = false; /* this caller joins it, no other */
	pthread_mutex_unlock(&r->mu);
	if (live)
		pthread_join(r->thr, NULL);
	pthread_mutex_lock(&r->mu);
	free_buffers(r);
	pthread_mutex_unlock(&r->mu);
}

void vrd_raw_close(struct vrd_raw *r)
{
	if (!r)
		return;
	vrd_raw_end(r, "volrecd stopping");
	pthread_mutex_destroy(&r->mu);
	pthread_cond_destroy(&r->cv);
	free(r);
}
