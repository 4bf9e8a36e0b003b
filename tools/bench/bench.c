/* SPDX-License-Identifier: MIT */
/*
 * Benchmark measurements through the pipeline engine: an in-memory source that hands out
 * references to pseudo-random raw B-scans and a timing sink whose output lands in registered
 * shm, so the benchmarks time the same code volrecd runs; and the CUDA suite (`volrec bench
 * --backend cuda`, tools/bench/gpu_bench), every figure beside the PCIe limit measured in the run.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <volrec/protocol.h>

#include "pipeline/pipeline.h"
#include "tools/bench/bench.h"

struct bench_fig *bench_add(struct bench_figs *f, const char *name, double value, const char *unit,
                            double target, double limit, const char *note)
{
	struct bench_fig *g;

	if (f->n >= BENCH_MAX_FIGS)
		return NULL;
	g = &f->fig[f->n++];
	memset(g, 0, sizeof(*g));
	snprintf(g->name, sizeof(g->name), "%s", name);
	g->value = value;
	g->unit = unit;
	g->target = target;
	g->limit = limit;
	snprintf(g->note, sizeof(g->note), "%s", note);
	g->lower_is_better = !strcmp(unit, "ms");
	return g;
}

struct json_object *bench_json_num(double v, bool fixed4)
{
	char text[64];

	if (!isfinite(v))
		return NULL;
	snprintf(text, sizeof(text), fixed4 ? "%.4f" : "%.6g", v);
	return json_object_new_double_s(v, text);
}

/* ---- the in-memory source ----------------------------------------------------------------- */

/* One epoch of raw B-scans in memory, handed out by reference for every epoch (the same
 * pointer while an earlier reference to it is held, as shim.h allows). */
struct mem_src {
	struct volrec_shim_geometry geo;
	uint8_t *data;
	size_t bscan_bytes;
	uint64_t epoch, pend_epoch;
	uint32_t b;
	bool pend, started;
};

static int mem_set_scan_offset(void *h, uint64_t epoch, uint32_t ox, uint32_t oy)
{
	struct mem_src *m = h;

	m->pend = true;
	m->pend_epoch = epoch;
	return 0;
}

static int mem_start(void *h)
{
	((struct mem_src *)h)->started = true;
	return 0;
}

static int mem_stop(void *h)
{
	((struct mem_src *)h)->started = false;
	return 0;
}

static void mem_next(struct mem_src *m, struct volrec_shim_meta *meta)
{
	if (m->b == 0 && m->pend) {
		m->epoch = m->pend_epoch;
		m->pend = false;
	}
	meta->timestamp_ns = vr_real_ns();
	meta->epoch = m->epoch;
	meta->bscan = m->b;
	meta->flags = 0;
	if (++m->b == m->geo.bscans_per_volume) {
		m->b = 0;
		m->epoch++;
	}
}

static int mem_acquire_ref(void *h, const void **bscan, int timeout_ms,
                           struct volrec_shim_meta *meta)
{
	struct mem_src *m = h;

	if (!m->started)
		return -EINVAL;
	*bscan = m->data + (size_t)m->b * m->bscan_bytes;
	mem_next(m, meta);
	return 0;
}

static int mem_acquire(void *h, void *buf, size_t size, int timeout_ms,
                       struct volrec_shim_meta *meta)
{
	struct mem_src *m = h;
	const void *p;
	int rc = mem_acquire_ref(h, &p, timeout_ms, meta);

	if (rc == 0)
		memcpy(buf, p, size < m->bscan_bytes ? size : m->bscan_bytes);
	return rc;
}

static int mem_release_ref(void *h, const void *bscan)
{
	return 0;
}

static int mem_ref_regions(void *h, struct volrec_shim_region *regions, uint32_t max,
                           uint32_t *count)
{
	struct mem_src *m = h;

	if (max >= 1) {
		regions[0].base = m->data;
		regions[0].size = m->bscan_bytes * m->geo.bscans_per_volume;
	}
	*count = 1;
	return 0;
}

static void mem_close(void *h)
{
	struct mem_src *m = h;

	if (!m)
		return;
	free(m->data);
	free(m);
}

static const struct volrec_shim_ops mem_ops = {
        .abi_version = VOLREC_SHIM_ABI_VERSION,
        .struct_size = sizeof(struct volrec_shim_ops),
        .set_scan_offset = mem_set_scan_offset,
        .start = mem_start,
        .acquire = mem_acquire,
        .stop = mem_stop,
        .close = mem_close,
        .ref_regions = mem_ref_regions,
        .acquire_ref = mem_acquire_ref,
        .release_ref = mem_release_ref,
};

/* ctx: the caller's epoch of raw B-scans, or NULL for pseudo-random samples. */
static int mem_open(void *ctx, const struct vr_config *cfg, unsigned flags, struct src_source *src,
                    char *err, size_t errlen)
{
	struct mem_src *m = calloc(1, sizeof(*m));
	size_t bytes;
	uint64_t s = 88172645463325252ull;

	if (!m)
		return vr_err(err, errlen, -ENOMEM, "out of memory");
	m->geo.bscans_per_volume = cfg->geometry.bscans_per_volume;
	m->bscan_bytes = cfg_bscan_bytes(cfg);
	bytes = m->bscan_bytes * m->geo.bscans_per_volume;
	m->data = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
	if (!m->data) {
		free(m);
		return vr_err(err, errlen, -ENOMEM, "out of memory for %zu bytes of raw input",
		              bytes);
	}
	if (ctx)
		memcpy(m->data, ctx, bytes);
	for (size_t i = 0; !ctx && i < bytes / 2; i++) {
		s ^= s << 13;
		s ^= s >> 7;
		s ^= s << 17;
		((uint16_t *)m->data)[i] = (uint16_t)(s >> 20);
	}
	memset(src, 0, sizeof(*src));
	src->impl = mem_ops;
	src->kind = "memory";
	src->handle = m;
	snprintf(src->info.name, sizeof(src->info.name), "memory");
	return 0;
}

static void mem_src_close(void *ctx, struct src_source *src)
{
	mem_close(src->handle);
	memset(src, 0, sizeof(*src));
}

/* ---- the timing sink ---------------------------------------------------------------------- */

/* A shm mapping of size bytes registered with the backend (what a publisher slot is). */
struct shm_buf {
	void *p;
	size_t size;
	bool registered, anonymous;
};

/* Whether /dev/shm has room for bytes more (containers often give it 64 MiB). */
static bool shm_fits(size_t bytes)
{
	struct statvfs v;

	if (statvfs("/dev/shm", &v) < 0)
		return false;
	return (unsigned long long)v.f_bavail * v.f_frsize >= bytes + (16u << 20);
}

static int shm_buf_open(struct shm_buf *b, size_t size, struct be_backend *be, char *err,
                        size_t errlen)
{
	char name[64];
	int fd = -1, rc;

	memset(b, 0, sizeof(*b));
	b->anonymous = !shm_fits(size);
	if (!b->anonymous) {
		snprintf(name, sizeof(name), "/volrec-bench-%ld", (long)getpid());
		fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
		if (fd < 0)
			return vr_err_errno(err, errlen, -errno, "shm_open(%s)", name);
		shm_unlink(name);
		if (ftruncate(fd, (off_t)size) < 0) {
			rc = -errno;
			close(fd);
			return vr_err_errno(err, errlen, rc, "ftruncate(%zu)", size);
		}
	}
	b->p = mmap(NULL, size, PROT_READ | PROT_WRITE,
	            MAP_SHARED | (b->anonymous ? MAP_ANONYMOUS : 0), fd, 0);
	rc = b->p == MAP_FAILED ? -errno : 0;
	if (fd >= 0)
		close(fd);
	if (rc < 0)
		return vr_err_errno(err, errlen, rc, "mmap(%s%zu)",
		                    b->anonymous ? "MAP_SHARED | MAP_ANONYMOUS, " : "", size);
	b->size = size;
	memset(b->p, 0, size);
	rc = be_host_register(be, b->p, size, 0);
	if (rc < 0)
		return vr_err_errno(err, errlen, rc, "host_register(shm, %zu)", size);
	b->registered = true;
	return 0;
}

static void shm_buf_close(struct shm_buf *b, struct be_backend *be)
{
	if (b->registered)
		be_host_unregister(be, b->p);
	if (b->p != MAP_FAILED && b->p)
		munmap(b->p, b->size);
	b->p = MAP_FAILED;
	b->registered = false;
}

#define LAT_MAX 100000u

/* Counts the published volumes; after `warm` of them, times until seconds and min_epochs. */
struct timing {
	struct shm_buf out;
	size_t views_off; /* views area in out (volume, then views), 0: none */
	uint32_t render_every, seen_begin;
	uint32_t *md;    /* [ny] median depths of the volume being made (be_host_alloc) */
	uint32_t ny;     /* B-scans per volume */
	uint64_t md_sum; /* sum of md over the timed volumes */
	unsigned warm, min_epochs;
	double seconds;
	uint64_t seen;
	double t_start, t_end;
	double *lat; /* ms, first B-scan acquired -> output complete */
	unsigned n;
	bool done;
	pthread_mutex_t mu;
	pthread_cond_t cv;
};

static int timing_begin(void *ctx, uint64_t epoch, struct be_output *out, char *err, size_t errlen)
{
	struct timing *t = ctx;

	out->volume = t->out.p;
	if (t->views_off) { /* as the daemon's sink: every view, the render every Nth volume */
		out->views = (uint8_t *)t->out.p + t->views_off;
		out->volume_id = ++t->seen_begin;
		out->view_mask = (1u << BE_VIEW_COUNT) - 1;
		if ((t->seen_begin - 1) % t->render_every)
			out->view_mask &= ~(1u << BE_VIEW_RENDER);
	}
	out->median_depths = t->md;
	return 0;
}

static int timing_publish(void *ctx, const struct pl_volume *v, char *err, size_t errlen)
{
	struct timing *t = ctx;
	double now = (double)v->t_done_mono_ns * 1e-9;

	pthread_mutex_lock(&t->mu);
	if (!t->done) {
		if (t->seen + 1 == t->warm)
			t->t_start = now;
		if (t->seen >= t->warm) {
			t->lat[t->n++] = (double)(v->t_done_mono_ns - v->t_first_mono_ns) / 1e6;
			for (uint32_t b = 0; b < t->ny; b++)
				t->md_sum += t->md[b];
			if ((now - t->t_start >= t->seconds && t->n >= t->min_epochs) ||
			    t->n >= LAT_MAX) {
				t->t_end = now;
				t->done = true;
				pthread_cond_signal(&t->cv);
			}
		}
	}
	t->seen++;
	pthread_mutex_unlock(&t->mu);
	return 0;
}

static void timing_abort(void *ctx)
{
	/* nothing to give back: every epoch writes into the one output buffer */
}

/* Engine events: failures end the measurement. */
struct bench_events {
	pthread_mutex_t mu;
	char err[512];
	struct timing *t;
};

static void bench_event(void *ctx, const struct pl_event *ev)
{
	struct bench_events *b = ctx;

	if (ev->level < PL_WARNING)
		return;
	pthread_mutex_lock(&b->mu);
	if (!b->err[0])
		snprintf(b->err, sizeof(b->err), "%s", ev->message);
	pthread_mutex_unlock(&b->mu);
	if (b->t && ev->level >= PL_ERR) {
		pthread_mutex_lock(&b->t->mu);
		b->t->done = true;
		pthread_cond_signal(&b->t->cv);
		pthread_mutex_unlock(&b->t->mu);
	}
}

int bench_run(const struct vr_config *cfg, unsigned warm, unsigned min_epochs, double seconds,
              int depth, struct bench_result *r, char *err, size_t errlen)
{
	return bench_run_raw(cfg, NULL, warm, min_epochs, seconds, depth, r, err, errlen);
}

int bench_run_raw(const struct vr_config *cfg, const void *raw, unsigned warm, unsigned min_epochs,
                  double seconds, int depth, struct bench_result *r, char *err, size_t errlen)
{
	struct bench_events ev = {.mu = PTHREAD_MUTEX_INITIALIZER};
	struct pl_options o = {.cfg = cfg,
	                       .block = true,
	                       .depth = depth,
	                       .zero_copy = 1,
	                       .on_event = bench_event,
	                       .event_ctx = &ev,
	                       .source_open = mem_open,
	                       .source_close = mem_src_close,
	                       .source_ctx = (void *)raw};
	struct timing t = {.warm = warm ? warm : 1,
	                   .min_epochs = min_epochs ? min_epochs : 1,
	                   .seconds = seconds,
	                   .mu = PTHREAD_MUTEX_INITIALIZER,
	                   .cv = PTHREAD_COND_INITIALIZER,
	                   .out = {.p = MAP_FAILED},
	                   .ny = cfg->geometry.bscans_per_volume};
	struct pl_sink sink = {
	        .ctx = &t, .begin = timing_begin, .publish = timing_publish, .abort = timing_abort};
	struct pl_pipeline *pl = NULL;
	struct pl_stats st;
	int rc;

	memset(r, 0, sizeof(*r));
	t.lat = malloc(LAT_MAX * sizeof(double));
	if (!t.lat)
		return vr_err(err, errlen, -ENOMEM, "out of memory");
	rc = pl_open(&o, &pl, err, errlen);
	if (rc < 0)
		goto out;
	snprintf(r->device, sizeof(r->device), "%s", be_device(pl_backend(pl)));
	if (be_views_wanted(cfg)) {
		uint32_t d[3];

		cfg_out_dims(cfg, d);
		t.views_off = (cfg_out_voxels(cfg) + 63) & ~(size_t)63;
		t.render_every = cfg->view.render.every
		                         ? cfg->view.render.every
		                         : (be_caps(pl_backend(pl)) & BE_CAP_DEVICE ? 1 : 5);
		rc = shm_buf_open(&t.out, t.views_off + volrec_views_bytes(d[0], d[1], d[2]),
		                  pl_backend(pl), err, errlen);
	} else {
		rc = shm_buf_open(&t.out, cfg_out_voxels(cfg), pl_backend(pl), err, errlen);
	}
	if (rc < 0)
		goto out;
	r->shm_anonymous = t.out.anonymous;
	rc = be_host_alloc(pl_backend(pl), t.ny * sizeof(*t.md), (void **)&t.md);
	if (rc < 0) {
		vr_err(err, errlen, rc, "%s", be_last_error(pl_backend(pl)));
		goto out;
	}
	ev.t = &t;
	rc = pl_start(pl, &sink, err, errlen);
	if (rc < 0)
		goto out;
	pthread_mutex_lock(&t.mu);
	while (!t.done)
		pthread_cond_wait(&t.cv, &t.mu);
	pthread_mutex_unlock(&t.mu);
	pl_stop(pl);
	pl_stats(pl, &st);
	if (!t.n || st.c.drops[PL_DROP_PROCESSING_ERROR]) {
		rc = vr_err(err, errlen, -EIO, "%s", ev.err[0] ? ev.err : "no epoch was measured");
		goto out;
	}
	r->epochs = t.n;
	r->epochs_per_s = t.t_end > t.t_start ? t.n / (t.t_end - t.t_start) : 0;
	r->in_bytes = cfg_bscan_bytes(cfg) * cfg->geometry.bscans_per_volume;
	r->out_bytes = cfg_out_voxels(cfg);
	r->p50_ms = vr_percentile(t.lat, t.n, 50);
	r->p99_ms = vr_percentile(t.lat, t.n, 99);
	r->median_depths = (double)t.md_sum / ((double)t.n * t.ny);
out:
	pl_stop(pl);
	if (pl) {
		shm_buf_close(&t.out, pl_backend(pl));
		be_host_free(pl_backend(pl), t.md);
	}
	pl_close(pl);
	free(t.lat);
	return rc;
}

/* ---- the CUDA suite ----------------------------------------------------------------------- */

#ifdef VOLREC_HAVE_CUDA

static void say(bench_say_fn fn, void *ctx, const char *fmt, ...) VR_PRINTF(3, 4);

static void say(bench_say_fn fn, void *ctx, const char *fmt, ...)
{
	char line[512];
	va_list ap;

	if (!fn)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fn(ctx, line);
}

/* The pipelined and the serialized run of one case on device dev. */
static int run_pair(const struct bench_case *bc, int dev, unsigned warm, double seconds,
                    bench_say_fn fn, void *ctx, struct bench_result *r, struct bench_result *rs,
                    char *err, size_t errlen)
{
	struct vr_config c;
	int rc;

	bench_case_config(bc, CFG_BACKEND_CUDA, &c);
	c.gpu.device = dev;
	rc = bench_run(&c, warm, 1, seconds, 2, r, err, errlen);
	if (rc == 0)
		rc = bench_run(&c, warm, 1, seconds, 1, rs, err, errlen);
	cfg_free(&c);
	if (rc < 0)
		return rc;
	if (r->shm_anonymous)
		say(fn, ctx, "  (/dev/shm too small: output in an anonymous shared mapping)");
	say(fn, ctx, "  %s", r->device);
	return 0;
}

/* The physical limits the figures compare with: copy bandwidths of device dev (its name into
 * device), figures pinned_* and d2h_registered_shm. */
static int cuda_limits(int dev, bench_say_fn fn, void *ctx, struct bench_figs *figs, char *device,
                       size_t devlen, struct be_bandwidth *bwp, char *err, size_t errlen)
{
	struct be_bandwidth bw;
	int rc;

	rc = be_cuda_bandwidth(dev, 256u << 20, 10, &bw, err, errlen);
	if (rc < 0)
		return rc;
	if (device && devlen)
		snprintf(device, devlen, "%s", bw.device);
	say(fn, ctx,
	    "bandwidth (256 MiB, best of 10): H2D %.1f GB/s, D2H %.1f GB/s, both ways %.1f GB/s "
	    "each, D2H into registered %s %.1f GB/s",
	    bw.h2d_gbs, bw.d2h_gbs, bw.bidir_gbs,
	    bw.shm_anonymous ? "anonymous shared mapping (/dev/shm too small)" : "shm",
	    bw.d2h_shm_gbs);
	bench_add(figs, "pinned_h2d", bw.h2d_gbs, "GB/s", 0, 0, "cudaMemcpyAsync 256 MiB");
	bench_add(figs, "pinned_d2h", bw.d2h_gbs, "GB/s", 0, 0, "cudaMemcpyAsync 256 MiB");
	bench_add(figs, "pinned_bidirectional_each_way", bw.bidir_gbs, "GB/s", 0, 0,
	          "H2D and D2H at once on two streams");
	bench_add(figs, "d2h_registered_shm", bw.d2h_shm_gbs, "GB/s", 0, 0,
	          "shm_open + mmap(MAP_SHARED) + cudaHostRegister");

	*bwp = bw;
	return 0;
}

/* The paper's case without views, beside r of the same case with them: their cost (target:
 * views take at most 5 %), figures volrec_paper_volumes_per_s_views_off and
 * volrec_paper_views_rate_ratio. */
static int cuda_paper_views_off(const struct bench_case *paper, int dev, double seconds,
                                const struct bench_result *r, double overl, bench_say_fn fn,
                                void *ctx, struct bench_figs *figs, char *err, size_t errlen)
{
	struct bench_result rn;
	struct vr_config c;
	int vrc;

	bench_case_config(paper, CFG_BACKEND_CUDA, &c);
	c.gpu.device = dev;
	c.view.enabled = false;
	vrc = bench_run(&c, 30, 1, seconds, 2, &rn, err, errlen);
	cfg_free(&c);
	if (vrc < 0)
		return vrc;
	say(fn, ctx, "  pipelined without views: %.1f volumes/s; with views %.1f (%.3f of it)",
	    rn.epochs_per_s, r->epochs_per_s, r->epochs_per_s / rn.epochs_per_s);
	bench_add(figs, "volrec_paper_volumes_per_s_views_off", rn.epochs_per_s, "volumes/s",
	          paper->target_vps, overl, "as volrec_paper_volumes_per_s, view.enabled false");
	bench_add(figs, "volrec_paper_views_rate_ratio", r->epochs_per_s / rn.epochs_per_s, "",
	          0.95, 1.0,
	          "views on / views off, same run (target >= 0.95: views cost at most 5 %)");
	return 0;
}

/* VolRec at the paper's geometry through the pipeline engine, pipelined and serialized, with
 * and without views; figures volrec_paper_*. */
static int cuda_paper(int dev, double seconds, const struct be_bandwidth *bw, bench_say_fn fn,
                      void *ctx, struct bench_figs *figs, char *err, size_t errlen)
{
	const struct bench_case *paper = bench_case_find("paper");
	struct bench_result r, rs;
	int rc;

	say(fn, ctx, "%s u16 (case %s), through the pipeline engine:", paper->title, paper->name);
	rc = run_pair(paper, dev, 30, seconds, fn, ctx, &r, &rs, err, errlen);
	if (rc < 0)
		return rc;

	/* limits: copies overlapped across epochs (H2D of e+1 during D2H of e, both ways
	 * at once), and one after the other (depth 1) */
	double serial =
	        1.0 / (r.in_bytes / (bw->h2d_gbs * 1e9) + r.out_bytes / (bw->d2h_gbs * 1e9));
	double overl =
	        1.0 / fmax(r.in_bytes / (bw->bidir_gbs * 1e9), r.out_bytes / (bw->bidir_gbs * 1e9));

	say(fn, ctx, "  pipelined: %.1f volumes/s (%u epochs), latency p50 %.2f ms p99 %.2f ms",
	    r.epochs_per_s, r.epochs, r.p50_ms, r.p99_ms);
	say(fn, ctx, "  serialized: %.1f volumes/s (%u epochs), latency p50 %.2f ms p99 %.2f ms",
	    rs.epochs_per_s, rs.epochs, rs.p50_ms, rs.p99_ms);
	say(fn, ctx, "  PCIe ceiling %.1f/s overlapped, %.1f/s serial copies", overl, serial);
	rc = cuda_paper_views_off(paper, dev, seconds, &r, overl, fn, ctx, figs, err, errlen);
	if (rc < 0)
		return rc;
	bench_add(figs, "volrec_paper_volumes_per_s", r.epochs_per_s, "volumes/s",
	          paper->target_vps, overl,
	          "pipelined (engine depth 2: epoch e+1 submitted while e is in flight); "
	          "limit: H2D and D2H at once at the measured both-ways bandwidth");
	bench_add(figs, "volrec_paper_volumes_per_s_serialized", rs.epochs_per_s, "volumes/s",
	          paper->target_vps, serial,
	          "engine depth 1, one epoch at a time; limit: H2D then D2H");
	bench_add(figs, "volrec_paper_ceiling_overlapped", overl, "volumes/s", paper->target_vps,
	          overl, "limit with H2D of epoch e+1 overlapping D2H of epoch e");
	bench_add(figs, "volrec_paper_latency_p50", r.p50_ms, "ms", paper->target_p99_ms,
	          1e3 / serial,
	          "pipelined: first B-scan acquired to the output in host memory "
	          "(includes waiting for e-1); limit: its copies alone");
	bench_add(figs, "volrec_paper_latency_p99", r.p99_ms, "ms", paper->target_p99_ms,
	          1e3 / serial, "");
	bench_add(figs, "volrec_paper_latency_p50_serialized", rs.p50_ms, "ms",
	          paper->target_p99_ms, 1e3 / serial,
	          "first B-scan acquired to the output in host memory, nothing else in "
	          "flight");
	bench_add(figs, "volrec_paper_latency_p99_serialized", rs.p99_ms, "ms",
	          paper->target_p99_ms, 1e3 / serial, "");
	return 0;
}

/* The classic case (2048 u16 -> 1024 u8 depths, mode none) through the pipeline engine,
 * pipelined and serialized; figures classic_*. */
static int cuda_classic(int dev, double seconds, const struct be_bandwidth *bw, bench_say_fn fn,
                        void *ctx, struct bench_figs *figs, char *err, size_t errlen)
{
	const struct bench_case *classic = bench_case_find("classic-2048");
	struct bench_result r, rs;
	char note[160];
	int rc;

	say(fn, ctx, "%s, %ux%u A-scans (case %s), through the pipeline engine:", classic->title,
	    classic->nx, classic->ny, classic->name);
	rc = run_pair(classic, dev, 3, seconds, fn, ctx, &r, &rs, err, errlen);
	if (rc < 0)
		return rc;

	const double asc = (double)classic->nx * classic->ny;
	double serial =
	        asc / (r.in_bytes / (bw->h2d_gbs * 1e9) + r.out_bytes / (bw->d2h_gbs * 1e9));
	double overl =
	        asc / fmax(r.in_bytes / (bw->bidir_gbs * 1e9), r.out_bytes / (bw->bidir_gbs * 1e9));

	say(fn, ctx, "  pipelined: %.2f M A-scans/s (%u epochs), latency p50 %.2f ms p99 %.2f ms",
	    r.epochs_per_s * asc / 1e6, r.epochs, r.p50_ms, r.p99_ms);
	say(fn, ctx, "  serialized: %.2f M A-scans/s (%u epochs), latency p50 %.2f ms p99 %.2f ms",
	    rs.epochs_per_s * asc / 1e6, rs.epochs, rs.p50_ms, rs.p99_ms);
	say(fn, ctx, "  PCIe ceiling %.2f M/s overlapped, %.2f M/s serial copies", overl / 1e6,
	    serial / 1e6);
	bench_add(figs, "classic_ascans_per_s", r.epochs_per_s * asc, "A-scans/s",
	          classic->target_ascans, overl,
	          "pipelined; limit: H2D and D2H at once at the measured both-ways "
	          "bandwidth");
	bench_add(figs, "classic_ascans_per_s_serialized", rs.epochs_per_s * asc, "A-scans/s",
	          classic->target_ascans, serial,
	          "engine depth 1, one epoch at a time; limit: H2D then D2H");
	bench_add(figs, "classic_ceiling_overlapped", overl, "A-scans/s", classic->target_ascans,
	          overl, "limit with the copies of consecutive epochs overlapping");
	snprintf(note, sizeof(note), "pipelined, per epoch of %.0f A-scans", asc);
	bench_add(figs, "classic_latency_p50", r.p50_ms, "ms", 0, 1e3 * asc / serial, note);
	bench_add(figs, "classic_latency_p99", r.p99_ms, "ms", 0, 1e3 * asc / serial, "");
	return 0;
}

int bench_cuda(int dev, double seconds, bench_say_fn fn, void *ctx, struct bench_figs *figs,
               char *device, size_t devlen, char *err, size_t errlen)
{
	struct be_bandwidth bw;
	int rc;

	if (be_cuda_devices() == 0)
		return vr_err(err, errlen, -ENODEV, "no CUDA device");
	/* 1. physical limits, 2. VolRec at the paper's geometry, 3. classic */
	rc = cuda_limits(dev, fn, ctx, figs, device, devlen, &bw, err, errlen);
	if (rc == 0)
		rc = cuda_paper(dev, seconds, &bw, fn, ctx, figs, err, errlen);
	if (rc == 0)
		rc = cuda_classic(dev, seconds, &bw, fn, ctx, figs, err, errlen);
	return rc < 0 ? rc : 0;
}

/* One case over gpu.devices and on the first entry's device alone, same run: figures
 * "<tag>_volumes_per_s_devices", "<tag>_volumes_per_s_one_device", "<tag>_devices_over_one",
 * "device<k>_<tag>_d2h" (each entry's slab per second beside its link). */
static int devices_case(const char *case_name, const char *tag, const int *devs, unsigned n,
                        const double *link, double sum, double together, double seconds,
                        bench_say_fn fn, void *ctx, struct bench_figs *figs, char *err,
                        size_t errlen)
{
	const struct bench_case *bc = bench_case_find(case_name);
	struct bench_result r, r1;
	struct vr_config c;
	char name[96], note[200];
	int rc;

	bench_case_config(bc, CFG_BACKEND_CUDA, &c);
	c.gpu.device = devs[0];
	rc = bench_run(&c, 30, 1, seconds, 2, &r1, err, errlen);
	c.gpu.ndevices = n;
	for (unsigned k = 0; k < n; k++)
		c.gpu.devices[k] = devs[k];
	if (rc == 0)
		rc = bench_run(&c, 30, 1, seconds, 2, &r, err, errlen);
	const uint32_t ny = c.geometry.bscans_per_volume;
	cfg_free(&c);
	if (rc < 0)
		return rc;
	say(fn, ctx, "%s over %u devices: %.1f volumes/s pipelined (device %d alone: %.1f, %.2fx)",
	    bc->title, n, r.epochs_per_s, devs[0], r1.epochs_per_s,
	    r.epochs_per_s / r1.epochs_per_s);
	say(fn, ctx, "  %s", r.device);
	snprintf(name, sizeof(name), "%s_volumes_per_s_devices", tag);
	snprintf(note, sizeof(note),
	         "%s pipelined over gpu.devices (%.1f GB/s); limit: the distinct links' D2H limits "
	         "together",
	         bc->title, r.epochs_per_s * (double)r.out_bytes / 1e9);
	bench_add(figs, name, r.epochs_per_s, "volumes/s", 0, sum * 1e9 / (double)r.out_bytes,
	          note);
	snprintf(name, sizeof(name), "%s_d2h_devices", tag);
	bench_add(figs, name, r.epochs_per_s * (double)r.out_bytes / 1e9, "GB/s", 0, together,
	          "the volumes' D2H over gpu.devices; limit: the distinct links' D2H at once "
	          "into one host buffer (links_d2h_together), same run");
	snprintf(name, sizeof(name), "%s_volumes_per_s_one_device", tag);
	bench_add(figs, name, r1.epochs_per_s, "volumes/s", 0, link[0] * 1e9 / (double)r1.out_bytes,
	          "the first entry's device alone, same run");
	snprintf(name, sizeof(name), "%s_devices_over_one", tag);
	bench_add(figs, name, r.epochs_per_s / r1.epochs_per_s, "", n >= 2 ? 1.8 : 0, n,
	          "several devices / one (target >= 1.8 on 2 distinct GPUs; a GPU named twice "
	          "shares its link: about 1)");
	for (unsigned k = 0; k < n; k++) {
		/* part k copies the rows of the B-scans [k ny / n, (k + 1) ny / n) */
		const uint64_t b0 = (uint64_t)k * ny / n, b1 = (uint64_t)(k + 1) * ny / n;
		const double gbs =
		        r.epochs_per_s * (double)r.out_bytes * (double)(b1 - b0) / (double)ny / 1e9;
		snprintf(name, sizeof(name), "device%u_%s_d2h", k, tag);
		snprintf(note, sizeof(note),
		         "gpu.devices[%u] = device %d: its slab (B-scans %llu-%llu) per second; "
		         "limit: its link",
		         k, devs[k], (unsigned long long)b0, (unsigned long long)(b1 - 1));
		bench_add(figs, name, gbs, "GB/s", 0, link[k], note);
		say(fn, ctx, "  gpu.devices[%u] = device %d: %.1f GB/s of its link's %.1f", k,
		    devs[k], gbs, link[k]);
	}
	return 0;
}

int bench_cuda_devices(const int *devs, unsigned n, double seconds, bench_say_fn fn, void *ctx,
                       struct bench_figs *figs, char *err, size_t errlen)
{
	double link[CFG_GPU_DEVICES_MAX], sum = 0, host;
	char name[64], note[160];
	int rc;

	if (n < 1 || n > CFG_GPU_DEVICES_MAX)
		return vr_err(err, errlen, -EINVAL, "gpu.devices: %u entries (1 to %d)", n,
		              CFG_GPU_DEVICES_MAX);
	if (be_cuda_devices() == 0)
		return vr_err(err, errlen, -ENODEV, "no CUDA device");
	host = bench_host_memcpy_gbs((size_t)1 << 30, 5);
	say(fn, ctx, "host memory: memcpy of 1 GiB %.1f GB/s", host);
	bench_add(figs, "host_memcpy", host, "GB/s", 0, 0,
	          "memcpy 1 GiB, best of 5: host memory bandwidth, the limit once several "
	          "links write into one host");
	for (unsigned k = 0; k < n; k++) {
		struct be_bandwidth bw;
		bool seen = false;
		for (unsigned j = 0; j < k; j++)
			if (devs[j] == devs[k]) {
				link[k] = link[j];
				seen = true;
			}
		if (!seen) {
			rc = be_cuda_bandwidth(devs[k], 256u << 20, 10, &bw, err, errlen);
			if (rc < 0)
				return rc;
			link[k] = bw.d2h_shm_gbs > 0 ? bw.d2h_shm_gbs : bw.d2h_gbs;
			sum += link[k];
		}
		say(fn, ctx, "gpu.devices[%u] = device %d: D2H into registered shm %.1f GB/s%s", k,
		    devs[k], link[k], seen ? " (the link of an earlier entry)" : "");
		snprintf(name, sizeof(name), "device%u_d2h_registered_shm", k);
		snprintf(note, sizeof(note), "CUDA device %d%s", devs[k],
		         seen ? ", shared with an earlier entry" : "");
		bench_add(figs, name, link[k], "GB/s", 0, 0, note);
	}
	bench_add(figs, "links_d2h_sum", sum, "GB/s", 0, host,
	          "D2H limits of the distinct devices' links together; limit: host memcpy");
	double together = 0, both = 0;
	rc = be_cuda_links_bandwidth(devs, n, 512u << 20, 5, &together, &both, err, errlen);
	if (rc < 0)
		return rc;
	say(fn, ctx,
	    "the distinct links at once into one host buffer: D2H %.1f GB/s (%.2f of their sum), "
	    "both ways %.1f GB/s each",
	    together, together / sum, both);
	bench_add(figs, "links_d2h_together", together, "GB/s", 0, sum,
	          "every distinct device copies 512 MiB D2H at once into its part of one "
	          "registered host buffer, best of 5; limit: the links' D2H limits measured alone");
	bench_add(figs, "links_both_ways_together", both, "GB/s", 0, sum,
	          "the same with 512 MiB H2D at once on every link, each way");

	/* the paper's geometry (target: >= 1.8x one GPU on two), then 600 x 600 x 2048 at
	 * stride 5 (737 MB a volume; target: >= 0.85 of the links' D2H limits together) */
	rc = devices_case("paper", "volrec_paper", devs, n, link, sum, together, seconds, fn, ctx,
	                  figs, err, errlen);
	if (rc == 0)
		rc = devices_case("large-600", "volrec_600", devs, n, link, sum, together, seconds,
		                  fn, ctx, figs, err, errlen);
	return rc;
}

/* The functional OCT case of bench_cuda_functional: 300 x 300 positions x 4 repeats x 2048 u12p
 * samples, noncumulative at stride 1, every channel. */
static void functional_config(int dev, struct vr_config *c)
{
	cfg_defaults(c);
	c->backend = CFG_BACKEND_CUDA;
	c->gpu.device = dev;
	c->geometry.samples_per_ascan = 2048;
	c->geometry.sample_type = CFG_SAMPLE_U12P;
	c->geometry.ascans_per_bscan = 300;
	c->geometry.bscans_per_volume = 300;
	c->geometry.repeats = 4;
	c->geometry.stride[0] = c->geometry.stride[1] = 1;
	c->geometry.depth_range[0] = 0;
	c->geometry.depth_range[1] = 1024;
	c->preprocess.zero_pad = 1;
	c->reconstruct.mode = CFG_RECON_NONCUMULATIVE;
	c->view.enabled = false;
	static const char *const ch[3] = {"structure", "angio", "doppler"};
	c->output.nchannels = 3;
	for (int i = 0; i < 3; i++)
		snprintf(c->output.channels[i], sizeof(c->output.channels[i]), "%s", ch[i]);
	cfg_view_defaults(c);
}

/* Submit the nraw raw B-scans of epoch e (the same pinned input every epoch), in order. */
static int functional_submit(struct be_backend *be, uint64_t e, const uint8_t *raw, size_t bbytes,
                             uint32_t nraw, char *err, size_t errlen)
{
	for (uint32_t r = 0; r < nraw; r++) {
		int rc = be_bscan_submit(be, e, r, raw + (size_t)r * bbytes);
		if (rc < 0)
			return vr_err(err, errlen, rc, "%s", be_last_error(be));
	}
	return 0;
}

int bench_cuda_functional(int dev, double seconds, bench_say_fn fn, void *ctx,
                          struct bench_figs *figs, char *device, size_t devlen, char *err,
                          size_t errlen)
{
	struct be_bandwidth bw;
	struct vr_config c;
	struct be_backend *be = NULL;
	uint8_t *raw = NULL, *vol[2] = {NULL, NULL};
	unsigned timed = 0;
	double t0 = 0, t1 = 0;
	char note[200];
	int rc;

	if (be_cuda_devices() == 0)
		return vr_err(err, errlen, -ENODEV, "no CUDA device");
	rc = be_cuda_bandwidth(dev, 256u << 20, 10, &bw, err, errlen);
	if (rc < 0)
		return rc;
	if (device && devlen)
		snprintf(device, devlen, "%s", bw.device);
	say(fn, ctx,
	    "bandwidth (256 MiB, best of 10): H2D %.1f GB/s, D2H %.1f GB/s, both ways %.1f GB/s "
	    "each",
	    bw.h2d_gbs, bw.d2h_gbs, bw.bidir_gbs);
	functional_config(dev, &c);
	const uint32_t nraw = cfg_raw_bscans(&c), nch = 3;
	const size_t bbytes = cfg_bscan_bytes(&c), vox = cfg_out_voxels(&c);
	const size_t in_bytes = bbytes * nraw, out_bytes = vox * nch;
	rc = be_open(&c, &be, NULL, 0, err, errlen);
	if (rc < 0)
		goto out;
	rc = be_host_alloc(be, in_bytes, (void **)&raw);
	for (int k = 0; rc == 0 && k < 2; k++)
		rc = be_host_alloc(be, out_bytes, (void **)&vol[k]);
	if (rc < 0) {
		rc = vr_err(err, errlen, rc, "%s", be_last_error(be));
		goto out;
	}
	/* random packed samples: any bytes are valid u12p */
	{
		uint64_t x = 0x9e3779b97f4a7c15ull;
		for (size_t i = 0; i + 8 <= in_bytes; i += 8) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			memcpy(raw + i, &x, 8);
		}
	}
	say(fn, ctx,
	    "functional OCT 300x300 positions x 4 repeats x 2048 u12p -> 3 x 300x300x1024 "
	    "(structure, angio cdv, doppler bscan with bulk), noncumulative, the backend driven "
	    "directly (epoch e+1 submitted while e is in flight):");
	say(fn, ctx, "  %s", be_device(be));
	/* epoch e's B-scans are queued while e - 1 is in flight, as the engine at depth 2; the
	 * clock starts when epoch warm - 1 is in host memory and stops at the last one timed */
	const unsigned warm = 3;
	for (uint64_t e = 0;; e++) {
		struct be_output o = {.volume = vol[e % 2], .channels = nch};
		rc = functional_submit(be, e, raw, bbytes, nraw, err, errlen);
		if (rc < 0) {
			if (e > 0 && be_epoch_wait(be, e - 1, note, sizeof(note)) < 0)
				say(fn, ctx, "  after a failure: %s", note);
			goto out;
		}
		if (e > 0) {
			rc = be_epoch_wait(be, e - 1, err, errlen);
			if (rc < 0)
				goto out;
		}
		if (e == warm)
			t0 = vr_mono_s();
		if (e > warm) {
			timed = (unsigned)(e - warm);
			t1 = vr_mono_s();
		}
		if (e > warm && t1 - t0 >= seconds && timed >= 3) {
			/* every epoch started is finished */
			rc = be_epoch_finish(be, e, &o, err, errlen);
			if (rc < 0)
				goto out;
			break;
		}
		rc = be_epoch_finish_async(be, e, &o, err, errlen);
		if (rc < 0)
			goto out;
	}
	{
		/* every epoch counted ended between t0 (epoch warm - 1 done) and t1 */
		const double eps = timed / (t1 - t0);
		const double in_gbs = eps * (double)in_bytes / 1e9;
		const double overl = 1.0 / fmax((double)in_bytes / (bw.bidir_gbs * 1e9),
		                                (double)out_bytes / (bw.bidir_gbs * 1e9));
		say(fn, ctx,
		    "  %.2f volumes/s (%u epochs): input %.1f GB/s of H2D %.1f GB/s (%.3f), "
		    "ceiling "
		    "with H2D and D2H at once %.2f volumes/s",
		    eps, timed, in_gbs, bw.h2d_gbs, in_gbs / bw.h2d_gbs, overl);
		snprintf(note, sizeof(note),
		         "raw input %.2f GB/epoch (1200 u12p B-scans) at the volume rate; limit: "
		         "pinned H2D of the same run (target 0.85 of it)",
		         (double)in_bytes / 1e9);
		bench_add(figs, "functional_input_gbs", in_gbs, "GB/s", 0.85 * bw.h2d_gbs,
		          bw.h2d_gbs, note);
		bench_add(
		        figs, "functional_volumes_per_s", eps, "volumes/s", 0, overl,
		        "structure + angio + doppler of 300x300 positions x 4 repeats; limit: H2D "
		        "of the input and D2H of the 3 u8 channels at once at the both-ways "
		        "bandwidth");
	}
out:
	if (be) {
		be_host_free(be, raw);
		be_host_free(be, vol[0]);
		be_host_free(be, vol[1]);
	}
	be_close(be);
	cfg_free(&c);
	return rc;
}

#else

int bench_cuda_devices(const int *devs, unsigned n, double seconds, bench_say_fn fn, void *ctx,
                       struct bench_figs *figs, char *err, size_t errlen)
{
	return vr_err(err, errlen, -ENOTSUP,
	              "cuda backend: this volrec was built without CUDA (use cpu or auto)");
}

int bench_cuda(int dev, double seconds, bench_say_fn fn, void *ctx, struct bench_figs *figs,
               char *device, size_t devlen, char *err, size_t errlen)
{
	return vr_err(err, errlen, -ENOTSUP,
	              "cuda backend: this volrec was built without CUDA (use cpu or auto)");
}

int bench_cuda_functional(int dev, double seconds, bench_say_fn fn, void *ctx,
                          struct bench_figs *figs, char *device, size_t devlen, char *err,
                          size_t errlen)
{
	return vr_err(err, errlen, -ENOTSUP,
	              "cuda backend: this volrec was built without CUDA (use cpu or auto)");
}

#endif

double bench_host_memcpy_gbs(size_t bytes, int reps)
{
	char *a = malloc(bytes), *b = malloc(bytes);
	double best = 0;

	if (!a || !b) {
		free(a);
		free(b);
		return NAN;
	}
	memset(a, 1, bytes);
	memset(b, 2, bytes);
	for (int i = 0; i < reps; i++) {
		double t = vr_mono_s();
		memcpy(b, a, bytes);
		t = vr_mono_s() - t;
		if (t > 0 && (double)bytes / t / 1e9 > best)
			best = (double)bytes / t / 1e9;
		a[i] = b[bytes - 1 - (size_t)i]; /* the copy is used */
	}
	free(a);
	free(b);
	return best;
}
