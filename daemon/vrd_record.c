/* SPDX-License-Identifier: MIT */
/*
 * What volrecd's two recorders share (docs/recording.md): the rule for a recording's name, the
 * room record.min_free_gb keeps on the disk, the bounded pool of buffers through which a
 * pipeline thread hands copies to a recorder's writer thread without ever waiting for it, and
 * a recording's life (how it starts, how it ends, what status shows of it), so that the two
 * end, report and fail alike.
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

/* ---- a recording's life ------------------------------------------------------------------- */

static const char *const state_names[] = {"idle", "recording", "finishing", "finished"};

void vrd_record_init(struct vrd_record *c)
{
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cv, NULL);
}

void vrd_record_destroy(struct vrd_record *c)
{
	pthread_mutex_destroy(&c->mu);
	pthread_cond_destroy(&c->cv);
}

int vrd_record_idle(struct vrd_record *c, const char *what, char *err, size_t errlen)
{
	bool busy;

	pthread_mutex_lock(&c->mu);
	busy = c->state == VRD_RECORD_RECORDING || c->state == VRD_RECORD_FINISHING || c->thr_live;
	pthread_mutex_unlock(&c->mu);
	if (busy)
		return vr_err(err, errlen, -EBUSY,
		              "record_start: a %s recording (%s) is in progress", what, c->path);
	return 0;
}

void vrd_record_begin(struct vrd_record *c, const struct vr_config *cfg, const char *name,
                      const char *path, uint64_t limit, double seconds)
{
	snprintf(c->name, sizeof(c->name), "%s", name);
	snprintf(c->path, sizeof(c->path), "%s", path);
	c->limit = limit;
	c->started_ns = vr_mono_ns();
	c->until_ns = seconds > 0 ? c->started_ns + (uint64_t)(seconds * 1e9) : 0;
	c->min_free = cfg->record.min_free_gb;
	c->accepted = c->skipped = c->written = c->bytes = 0;
	c->failed = false;
	c->error[0] = c->end[0] = '\0';
	c->state = VRD_RECORD_RECORDING;
}

int vrd_record_spawn(struct vrd_record *c, void *(*thread_main)(void *), void *arg, char *err,
                     size_t errlen)
{
	int rc = pthread_create(&c->thr, NULL, thread_main, arg);

	if (rc) {
		c->state = VRD_RECORD_IDLE;
		return vr_err(err, errlen, -rc, "record_start: thread: %s", strerror(rc));
	}
	c->thr_live = true;
	c->accepting = true; /* only now: the thread is there to write what is queued */
	return 0;
}

void vrd_record_finish(struct vrd_record *c, const char *why)
{
	if (!c->end[0]) /* the first reason a recording ends is the one status shows */
		snprintf(c->end, sizeof(c->end), "%s", why);
	c->accepting = false;
	if (c->state == VRD_RECORD_RECORDING)
		c->state = VRD_RECORD_FINISHING;
	pthread_cond_broadcast(&c->cv);
}

void vrd_record_queue(struct vrd_record *c, int buf, const char *reached)
{
	vrd_bufq_push(&c->b, buf);
	c->accepted++;
	if (c->limit && c->accepted >= c->limit)
		vrd_record_finish(c, reached);
	pthread_cond_broadcast(&c->cv);
}

int vrd_record_next(struct vrd_record *c, int rc)
{
	int buf = -1;

	pthread_mutex_lock(&c->mu);
	while (c->b.qlen == 0 && c->state == VRD_RECORD_RECORDING)
		pthread_cond_wait(&c->cv, &c->mu);
	if (c->b.qlen && !rc)
		buf = vrd_bufq_pop(&c->b);
	pthread_mutex_unlock(&c->mu);
	return buf;
}

void vrd_record_fail(struct vrd_record *c, const char *why, const char *err)
{
	if (c->failed)
		return;
	c->failed = true;
	snprintf(c->error, sizeof(c->error), "%s", err);
	vrd_record_finish(c, why);
	vrd_bufq_drain(&c->b); /* stop taking units; what is queued is not written */
}

int vrd_record_done(struct vrd_record *c, const char *what, const char *unit, char *msg, size_t len)
{
	bool failed;

	pthread_mutex_lock(&c->mu);
	c->accepting = false;
	c->state = VRD_RECORD_DONE;
	c->ended_ns = vr_mono_ns();
	failed = c->failed;
	snprintf(msg, len, "%s recording %s: %llu %s written, %llu left out, %llu bytes (%s)%s%s",
	         what, c->path, (unsigned long long)c->written, unit,
	         (unsigned long long)c->skipped, (unsigned long long)c->bytes, c->end,
	         failed ? ": " : "", failed ? c->error : "");
	pthread_mutex_unlock(&c->mu);
	return failed ? LOG_WARNING : LOG_NOTICE;
}

int vrd_record_stop(struct vrd_record *c, const char *what, char *err, size_t errlen)
{
	bool was;

	pthread_mutex_lock(&c->mu);
	was = c->state == VRD_RECORD_RECORDING;
	if (was)
		vrd_record_finish(c, "record_stop");
	pthread_mutex_unlock(&c->mu);
	if (!was)
		return vr_err(err, errlen, -ENOENT, "record_stop: no %s recording in progress",
		              what);
	return 0;
}

bool vrd_record_reap(struct vrd_record *c)
{
	bool join;

	pthread_mutex_lock(&c->mu);
	join = c->thr_live && c->state == VRD_RECORD_DONE;
	if (join)
		c->thr_live = false; /* this caller joins it, no other */
	pthread_mutex_unlock(&c->mu);
	if (join)
		pthread_join(c->thr, NULL);
	return join;
}

void vrd_record_end(struct vrd_record *c, const char *why)
{
	bool live;

	pthread_mutex_lock(&c->mu);
	c->accepting = false;
	if (c->state == VRD_RECORD_RECORDING)
		vrd_record_finish(c, why);
	pthread_cond_broadcast(&c->cv);
	live = c->thr_live;
	c->thr_live = false; /* this caller joins it, no other */
	pthread_mutex_unlock(&c->mu);
	if (live)
		pthread_join(c->thr, NULL);
}

static void jadd_u64(struct json_object *o, const char *key, uint64_t v)
{
	json_object_object_add(o, key, json_object_new_int64((int64_t)v));
}

double vrd_record_status_begin(const struct vrd_record *c, struct json_object *o, const char *unit)
{
	char key[64];
	double secs;

	json_object_object_add(o, "state", json_object_new_string(state_names[c->state]));
	if (c->state == VRD_RECORD_IDLE)
		return 0;
	secs = (double)((c->state == VRD_RECORD_DONE ? c->ended_ns : vr_mono_ns()) -
	                c->started_ns) /
	       1e9;
	json_object_object_add(o, "name", json_object_new_string(c->name));
	json_object_object_add(o, "file", json_object_new_string(c->path));
	snprintf(key, sizeof(key), "%s_written", unit);
	jadd_u64(o, key, c->written);
	snprintf(key, sizeof(key), "skipped_%s", unit);
	jadd_u64(o, key, c->skipped);
	jadd_u64(o, "bytes", c->bytes);
	json_object_object_add(o, "seconds", json_object_new_double(secs));
	json_object_object_add(o, "rate_mb_s",
	                       json_object_new_double(secs > 0 ? c->bytes / secs / 1e6 : 0));
	return secs;
}

void vrd_record_status_end(const struct vrd_record *c, struct json_object *o)
{
	if (c->state == VRD_RECORD_IDLE)
		return;
	json_object_object_add(o, "failed", json_object_new_boolean(c->failed));
	json_object_object_add(o, "error", json_object_new_string(c->error));
	json_object_object_add(o, "end", json_object_new_string(c->end));
}
