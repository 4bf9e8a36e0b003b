/* SPDX-License-Identifier: MIT */
/*
 * The export engine: a processed HDF5 recording into any format of fmt_writer, the next volume
 * (every channel asked for) read by a thread of its own while the current one is written. One engine for `volrec export`
 * and bench/export_bench.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "formats/fmt.h"

/* Two buffers: the reader fills one while the writer drains the other. */
struct export_pipe {
	struct fmt_h5in *in;
	uint64_t nt;
	size_t bytes;
	uint8_t *buf[2];
	int state[2]; /* 0 empty, 1 full, -1 the reader failed */
	bool stop;    /* the writer gave up */
	double read_s;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	char err[512];
	int rc;
};

static void *export_reader(void *arg)
{
	struct export_pipe *p = arg;

	for (uint64_t t = 0; t < p->nt; t++) {
		int b = (int)(t & 1), rc;
		double t0;

		pthread_mutex_lock(&p->lock);
		while (p->state[b] != 0 && !p->stop)
			pthread_cond_wait(&p->cond, &p->lock);
		bool stop = p->stop;
		pthread_mutex_unlock(&p->lock);
		if (stop)
			break;
		t0 = vr_mono_s();
		rc = fmt_h5in_read(p->in, t, p->buf[b], p->err, sizeof(p->err));
		pthread_mutex_lock(&p->lock);
		p->read_s += vr_mono_s() - t0;
		p->state[b] = rc < 0 ? -1 : 1;
		p->rc = rc;
		pthread_cond_broadcast(&p->cond);
		pthread_mutex_unlock(&p->lock);
		if (rc < 0)
			break;
	}
	return NULL;
}

/* Wait for volume t; NULL when the reader failed. */
static const uint8_t *export_take(struct export_pipe *p, uint64_t t)
{
	int b = (int)(t & 1);
	const uint8_t *v;

	pthread_mutex_lock(&p->lock);
	while (p->state[b] == 0)
		pthread_cond_wait(&p->cond, &p->lock);
	v = p->state[b] == 1 ? p->buf[b] : NULL;
	pthread_mutex_unlock(&p->lock);
	return v;
}

static void export_give_back(struct export_pipe *p, uint64_t t)
{
	pthread_mutex_lock(&p->lock);
	p->state[t & 1] = 0;
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
}

static void export_stop(struct export_pipe *p)
{
	pthread_mutex_lock(&p->lock);
	p->stop = true;
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
}

/* Write every volume through the pipe into w. */
static int export_volumes(struct export_pipe *p, struct fmt_writer *w, fmt_progress_fn progress,
                          void *ctx, bool (*interrupted)(void), double t0, char *err, size_t errlen)
{
	for (uint64_t t = 0; t < p->nt; t++) {
		const uint8_t *v = export_take(p, t);
		int rc;

		if (!v)
			return vr_err(err, errlen, p->rc, "%s", p->err);
		rc = fmt_writer_put(w, t, v, err, errlen);
		export_give_back(p, t);
		if (rc < 0)
			return rc;
		if (progress)
			progress(ctx, t + 1, p->nt, w->written, vr_mono_s() - t0);
		if (interrupted && interrupted() && t + 1 < p->nt)
			return vr_err(err, errlen, -EINTR, "interrupted after %llu of %llu volumes",
			              (unsigned long long)(t + 1), (unsigned long long)p->nt);
	}
	return 0;
}

int fmt_export(const char *in, const char *out, const struct fmt_options *opt,
               fmt_progress_fn progress, void *ctx, bool (*interrupted)(void),
               struct fmt_export_stats *stats, char *err, size_t errlen)
{
	struct export_pipe p = {.lock = PTHREAD_MUTEX_INITIALIZER,
	                        .cond = PTHREAD_COND_INITIALIZER};
	struct fmt_options o = opt ? *opt : (struct fmt_options){0};
	struct fmt_writer *w = NULL;
	struct fmt_info info;
	double t0 = vr_mono_s();
	pthread_t th;
	int rc;

	if (fmt_kind_of(out) == FMT_NONE)
		return vr_err(
		        err, errlen, -EINVAL,
		        "%s: unknown format (the suffix names it: .zarr or .ome.zarr, .nii or "
		        ".nii.gz, .ome.tif or .ome.tiff)",
		        out);
	rc = fmt_h5in_open_channels(in, o.channels, &p.in, &info, err, errlen);
	if (rc < 0)
		return rc;
	if (!o.source)
		o.source = in;
	p.nt = info.nt;
	p.bytes = fmt_channel_bytes(&info) * fmt_nch(&info); /* every channel of a volume */
	p.buf[0] = malloc(p.bytes);
	p.buf[1] = malloc(p.bytes);
	if (!p.buf[0] || !p.buf[1]) {
		rc = vr_err(err, errlen, -ENOMEM, "out of memory for two volumes of %zu bytes",
		            p.bytes);
		goto out_free;
	}
	rc = fmt_writer_open(out, &info, &o, &w, err, errlen);
	if (rc < 0)
		goto out_free;
	if (pthread_create(&th, NULL, export_reader, &p) != 0) {
		rc = vr_err(err, errlen, -EAGAIN, "cannot start the reader thread");
		goto out_free;
	}
	rc = export_volumes(&p, w, progress, ctx, interrupted, t0, err, errlen);
	export_stop(&p);
	pthread_join(th, NULL);
	if (rc == 0)
		rc = fmt_writer_finish(w, err, errlen);
	if (stats) {
		stats->volumes = rc == 0 ? p.nt : w->next;
		stats->bytes_in = stats->volumes * p.bytes;
		stats->bytes_out = w->written;
		stats->seconds = vr_mono_s() - t0;
		stats->read_s = p.read_s;
	}
out_free:
	fmt_writer_free(w); /* removes the partial output unless finished */
	free(p.buf[0]);
	free(p.buf[1]);
	fmt_h5in_close(p.in);
	return rc;
}
