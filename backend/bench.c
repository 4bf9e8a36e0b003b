/* SPDX-License-Identifier: MIT */
/*
 * Benchmark measurements through the backend interface (bench.h): the pipelined and
 * serialized epoch loop of any backend, and the CUDA suite that `volrec bench --backend cuda`
 * and tests/gpu/gpu_bench both run, so the two report the same figures the same way.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "bench.h"

struct be_bench_fig *be_bench_add(struct be_bench_figs *f, const char *name, double value,
                                  const char *unit, double target, double limit, const char *note)
{
	struct be_bench_fig *g;

	if (f->n >= BE_BENCH_MAX_FIGS)
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

void be_bench_json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fprintf(f, "\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			fprintf(f, "\\u%04x", *s);
		else
			fputc(*s, f);
	}
	fputc('"', f);
}

static double be_now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int be_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* The p-quantile of v[0..n) (n > 0), nearest rank; sorts v. */
static double be_percentile(double *v, size_t n, double p)
{
	qsort(v, n, sizeof(double), be_cmp_double);
	size_t i = (size_t)ceil(p * (double)n) - 1;
	return v[i < n ? i : n - 1];
}

/* A shm mapping of size bytes registered with the backend (what a publisher slot is). */
struct be_shm_buf {
	void *p;
	size_t size;
	bool registered;
	bool anonymous;
};

/* Whether /dev/shm has room for bytes more (containers often give it 64 MiB). */
static bool be_shm_fits(size_t bytes)
{
	struct statvfs v;

	if (statvfs("/dev/shm", &v) < 0)
		return false;
	return (unsigned long long)v.f_bavail * v.f_frsize >= bytes + (16u << 20);
}

static int be_shm_buf_open(struct be_shm_buf *b, size_t size, struct be_backend *be, char *err,
                           size_t errlen)
{
	char name[64];
	int fd, rc;

	memset(b, 0, sizeof(*b));
	b->p = MAP_FAILED;
	if (!be_shm_fits(size)) {
		b->anonymous = true;
		b->p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		if (b->p == MAP_FAILED) {
			rc = -errno;
			snprintf(err, errlen, "mmap(MAP_SHARED | MAP_ANONYMOUS, %zu): %s", size,
			         strerror(-rc));
			return rc;
		}
	} else {
		snprintf(name, sizeof(name), "/volrec-bench-%ld", (long)getpid());
		fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
		if (fd < 0) {
			rc = -errno;
			snprintf(err, errlen, "shm_open(%s): %s", name, strerror(-rc));
			return rc;
		}
		shm_unlink(name);
		if (ftruncate(fd, (off_t)size) < 0) {
			rc = -errno;
			snprintf(err, errlen, "ftruncate(%zu): %s", size, strerror(-rc));
			close(fd);
			return rc;
		}
		b->p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		rc = b->p == MAP_FAILED ? -errno : 0;
		close(fd);
		if (rc < 0) {
			snprintf(err, errlen, "mmap(%zu): %s", size, strerror(-rc));
			return rc;
		}
	}
	b->size = size;
	memset(b->p, 0, size);
	rc = be_host_register(be, b->p, size);
	if (rc < 0) {
		snprintf(err, errlen, "host_register(shm, %zu): %s", size, strerror(-rc));
		return rc;
	}
	b->registered = true;
	return 0;
}

static void be_shm_buf_close(struct be_shm_buf *b, struct be_backend *be)
{
	if (b->registered)
		be_host_unregister(be, b->p);
	if (b->p != MAP_FAILED && b->p)
		munmap(b->p, b->size);
	b->p = MAP_FAILED;
	b->registered = false;
}

int be_bench_run(const struct vr_config *cfg, unsigned warm, unsigned min_epochs, double seconds,
                 bool pipelined, struct be_bench_result *r, char *err, size_t errlen)
{
	struct be_backend *be = NULL;
	uint8_t *raw = NULL;
	struct be_shm_buf out = {.p = MAP_FAILED};
	double *lat = NULL;
	const unsigned max_epochs = 100000;
	const uint32_t ny = cfg->geometry.bscans_per_volume;
	const size_t bb = cfg_bscan_bytes(cfg), vox = cfg_out_voxels(cfg);
	const unsigned nbuf = 2; /* two raw epochs: e+1's is submitted while e is in flight */
	bool inflight = false;
	uint64_t infl_e = 0;
	int rc;

	memset(r, 0, sizeof(*r));
	if (min_epochs < 1)
		min_epochs = 1;
	rc = be_open(cfg, &be, NULL, 0, err, errlen);
	if (rc < 0)
		return rc;
	snprintf(r->device, sizeof(r->device), "%s", be_device(be));
	rc = be_host_alloc(be, bb * ny * nbuf, (void **)&raw);
	if (rc < 0) {
		snprintf(err, errlen, "host_alloc(%zu): %s", bb * ny * nbuf, strerror(-rc));
		raw = NULL;
		goto out;
	}
	{
		uint64_t s = 88172645463325252ull;
		uint16_t *p = (uint16_t *)raw;
		for (size_t i = 0; i < bb * ny * nbuf / 2; i++) {
			s ^= s << 13;
			s ^= s >> 7;
			s ^= s << 17;
			p[i] = (uint16_t)(s >> 20);
		}
	}
	rc = be_shm_buf_open(&out, vox, be, err, errlen);
	if (rc < 0)
		goto out;
	r->shm_anonymous = out.anonymous;
	lat = malloc(max_epochs * sizeof(double));
	if (!lat) {
		rc = -ENOMEM;
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	struct be_output o = {.volume = out.p};
	double t_start = 0, t_first[2] = {0, 0};
	unsigned n = 0;
	for (uint64_t e = 0;; e++) {
		const uint8_t *src = raw + (e % nbuf) * bb * ny;
		t_first[e % 2] = be_now_s();
		for (uint32_t b = 0; b < ny; b++) {
			rc = be_bscan_submit(be, e, b, src + (size_t)b * bb);
			if (rc < 0) {
				snprintf(err, errlen, "bscan_submit: %s", strerror(-rc));
				goto out;
			}
		}
		if (!pipelined) {
			rc = be_epoch_finish(be, e, &o, err, errlen);
			if (rc < 0)
				goto out;
		} else if (e > 0) {
			/* e's B-scans are queued: now wait for e-1, then queue e */
			inflight = false;
			rc = be_epoch_wait(be, e - 1, err, errlen);
			if (rc < 0)
				goto out;
		}
		/* the epoch that just completed: e (serialized) or e-1 (pipelined) */
		const double t1 = be_now_s();
		const int64_t done = pipelined ? (int64_t)e - 1 : (int64_t)e;
		if (done == (int64_t)warm - 1)
			t_start = t1;
		if (done >= (int64_t)warm) {
			lat[n++] = (t1 - t_first[done % 2]) * 1e3;
			if ((t1 - t_start >= seconds && n >= min_epochs) || n >= max_epochs) {
				r->epochs_per_s = n / (t1 - t_start);
				break;
			}
		}
		if (pipelined) {
			rc = be_epoch_finish_async(be, e, &o, err, errlen);
			if (rc < 0)
				goto out;
			inflight = true;
			infl_e = e;
		}
	}
	/* pipelined: the loop ended after waiting for e-1, before queueing e: nothing is in
	 * flight; e's submitted B-scans are left to destroy, which waits for every stream */
	r->epochs = n;
	r->in_bytes = bb * ny;
	r->out_bytes = vox;
	r->p50_ms = be_percentile(lat, n, 0.50);
	r->p99_ms = be_percentile(lat, n, 0.99);
out:
	if (inflight) {
		/* a failure with an epoch in flight: its copies into out end before out goes;
		 * err keeps the first failure, a second one only joins it */
		char e2[256];
		if (be_epoch_wait(be, infl_e, e2, sizeof(e2)) < 0) {
			size_t l = strlen(err);
			snprintf(err + l, errlen - l, " (then epoch %llu: %s)",
			         (unsigned long long)infl_e, e2);
		}
	}
	free(lat);
	be_shm_buf_close(&out, be);
	if (raw)
		be_host_free(be, raw);
	be_close(be);
	return rc;
}

#ifdef VOLREC_HAVE_CUDA

static void be_say(be_bench_say_fn say, void *ctx, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

static void be_say(be_bench_say_fn say, void *ctx, const char *fmt, ...)
{
	char line[512];
	va_list ap;

	if (!say)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	say(ctx, line);
}

/* The pipelined and the serialized run of one case. */
static int be_bench_pair(const struct vr_config *c, unsigned warm, double seconds,
                         be_bench_say_fn say, void *ctx, struct be_bench_result *r,
                         struct be_bench_result *rs, char *err, size_t errlen)
{
	int rc = be_bench_run(c, warm, 1, seconds, true, r, err, errlen);

	if (rc == 0)
		rc = be_bench_run(c, warm, 1, seconds, false, rs, err, errlen);
	if (rc < 0)
		return rc;
	if (r->shm_anonymous)
		be_say(say, ctx, "  (/dev/shm too small: output in an anonymous shared mapping)");
	be_say(say, ctx, "  %s", r->device);
	return 0;
}

static void be_bench_cuda_config(struct vr_config *c, int dev, uint32_t K, uint32_t nx, uint32_t ny,
                                 uint32_t stride, enum cfg_recon_mode mode)
{
	cfg_defaults(c);
	c->backend = CFG_BACKEND_CUDA;
	c->gpu.device = dev;
	c->geometry.samples_per_ascan = K;
	c->geometry.ascans_per_bscan = nx;
	c->geometry.bscans_per_volume = ny;
	c->geometry.stride[0] = c->geometry.stride[1] = stride;
	c->geometry.depth_range[0] = 0;
	c->geometry.depth_range[1] = K / 2;
	c->reconstruct.mode = mode;
}

int be_bench_cuda(int dev, double seconds, be_bench_say_fn say, void *ctx,
                  struct be_bench_figs *figs, char *device, size_t devlen, char *err, size_t errlen)
{
	struct be_bandwidth bw;
	struct vr_config c;
	struct be_bench_result r, rs;
	int rc;

	if (be_cuda_devices() == 0) {
		snprintf(err, errlen, "no CUDA device");
		return -ENODEV;
	}

	/* 1. physical limits */
	rc = be_cuda_bandwidth(dev, 256u << 20, 10, &bw, err, errlen);
	if (rc < 0)
		return rc;
	if (device && devlen)
		snprintf(device, devlen, "%s", bw.device);
	be_say(say, ctx,
	       "bandwidth (256 MiB, best of 10): H2D %.1f GB/s, D2H %.1f GB/s, both ways %.1f "
	       "GB/s each, D2H into registered %s %.1f GB/s",
	       bw.h2d_gbs, bw.d2h_gbs, bw.bidir_gbs,
	       bw.shm_anonymous ? "anonymous shared mapping (/dev/shm too small)" : "shm",
	       bw.d2h_shm_gbs);
	be_bench_add(figs, "pinned_h2d", bw.h2d_gbs, "GB/s", 0, 0, "cudaMemcpyAsync 256 MiB");
	be_bench_add(figs, "pinned_d2h", bw.d2h_gbs, "GB/s", 0, 0, "cudaMemcpyAsync 256 MiB");
	be_bench_add(figs, "pinned_bidirectional_each_way", bw.bidir_gbs, "GB/s", 0, 0,
	             "H2D and D2H at once on two streams");
	be_bench_add(figs, "d2h_registered_shm", bw.d2h_shm_gbs, "GB/s", 0, 0,
	             "shm_open + mmap(MAP_SHARED) + cudaHostRegister");

	/* 2. VolRec at the paper's geometry */
	be_bench_cuda_config(&c, dev, 8192, 60, 60, 5, CFG_RECON_NONCUMULATIVE);
	be_say(say, ctx, "volrec 60x60x8192 u16, stride 5 -> 300x300x4096 u8:");
	rc = be_bench_pair(&c, 30, seconds, say, ctx, &r, &rs, err, errlen);
	if (rc < 0)
		return rc;
	{
		/* limits: copies overlapped across epochs (H2D of e+1 during D2H of e, both ways
		 * at once), and one after the other (the serialized epoch_finish) */
		double serial =
		        1.0 / (r.in_bytes / (bw.h2d_gbs * 1e9) + r.out_bytes / (bw.d2h_gbs * 1e9));
		double overl = 1.0 / fmax(r.in_bytes / (bw.bidir_gbs * 1e9),
		                          r.out_bytes / (bw.bidir_gbs * 1e9));
		be_say(say, ctx,
		       "  pipelined: %.1f volumes/s (%u epochs), latency p50 %.2f ms p99 %.2f ms",
		       r.epochs_per_s, r.epochs, r.p50_ms, r.p99_ms);
		be_say(say, ctx,
		       "  serialized: %.1f volumes/s (%u epochs), latency p50 %.2f ms p99 %.2f ms",
		       rs.epochs_per_s, rs.epochs, rs.p50_ms, rs.p99_ms);
		be_say(say, ctx, "  PCIe ceiling %.1f/s overlapped, %.1f/s serial copies", overl,
		       serial);
		be_bench_add(figs, "volrec_paper_volumes_per_s", r.epochs_per_s, "volumes/s", 120,
		             overl,
		             "pipelined (epoch e+1 submitted while e is in flight); limit: H2D and "
		             "D2H at once at the measured both-ways bandwidth");
		be_bench_add(figs, "volrec_paper_volumes_per_s_serialized", rs.epochs_per_s,
		             "volumes/s", 120, serial,
		             "epoch_finish one epoch at a time; limit: H2D then D2H");
		be_bench_add(figs, "volrec_paper_ceiling_overlapped", overl, "volumes/s", 120,
		             overl, "limit with H2D of epoch e+1 overlapping D2H of epoch e");
		be_bench_add(figs, "volrec_paper_latency_p50", r.p50_ms, "ms", 15, 1e3 / serial,
		             "pipelined: first bscan_submit of e to be_epoch_wait(e) returning "
		             "(includes waiting for e-1); limit: its copies alone");
		be_bench_add(figs, "volrec_paper_latency_p99", r.p99_ms, "ms", 15, 1e3 / serial,
		             "");
		be_bench_add(
		        figs, "volrec_paper_latency_p50_serialized", rs.p50_ms, "ms", 15,
		        1e3 / serial,
		        "first bscan_submit to epoch_finish returning, nothing else in flight");
		be_bench_add(figs, "volrec_paper_latency_p99_serialized", rs.p99_ms, "ms", 15,
		             1e3 / serial, "");
	}

	/* 3. classic: 2048 u16 -> 1024 u8 depths, mode none */
	be_bench_cuda_config(&c, dev, 2048, 1024, 256, 1, CFG_RECON_NONE);
	be_say(say, ctx, "classic 1024x256 A-scans of 2048 u16 -> 1024 u8, mode none:");
	rc = be_bench_pair(&c, 3, seconds, say, ctx, &r, &rs, err, errlen);
	if (rc < 0)
		return rc;
	{
		const double asc = 1024.0 * 256;
		double serial =
		        asc / (r.in_bytes / (bw.h2d_gbs * 1e9) + r.out_bytes / (bw.d2h_gbs * 1e9));
		double overl = asc / fmax(r.in_bytes / (bw.bidir_gbs * 1e9),
		                          r.out_bytes / (bw.bidir_gbs * 1e9));
		be_say(say, ctx,
		       "  pipelined: %.2f M A-scans/s (%u epochs), latency p50 %.2f ms p99 %.2f ms",
		       r.epochs_per_s * asc / 1e6, r.epochs, r.p50_ms, r.p99_ms);
		be_say(say, ctx,
		       "  serialized: %.2f M A-scans/s (%u epochs), latency p50 %.2f ms p99 %.2f "
		       "ms",
		       rs.epochs_per_s * asc / 1e6, rs.epochs, rs.p50_ms, rs.p99_ms);
		be_say(say, ctx, "  PCIe ceiling %.2f M/s overlapped, %.2f M/s serial copies",
		       overl / 1e6, serial / 1e6);
		be_bench_add(figs, "classic_ascans_per_s", r.epochs_per_s * asc, "A-scans/s", 10e6,
		             overl,
		             "pipelined; limit: H2D and D2H at once at the measured both-ways "
		             "bandwidth");
		be_bench_add(figs, "classic_ascans_per_s_serialized", rs.epochs_per_s * asc,
		             "A-scans/s", 10e6, serial,
		             "epoch_finish one epoch at a time; limit: H2D then D2H");
		be_bench_add(figs, "classic_ceiling_overlapped", overl, "A-scans/s", 10e6, overl,
		             "limit with the copies of consecutive epochs overlapping");
		be_bench_add(figs, "classic_latency_p50", r.p50_ms, "ms", 0, 1e3 * asc / serial,
		             "pipelined, per epoch of 262144 A-scans");
		be_bench_add(figs, "classic_latency_p99", r.p99_ms, "ms", 0, 1e3 * asc / serial,
		             "");
	}
	return 0;
}

#else

int be_bench_cuda(int dev, double seconds, be_bench_say_fn say, void *ctx,
                  struct be_bench_figs *figs, char *device, size_t devlen, char *err, size_t errlen)
{
	(void)dev;
	(void)seconds;
	(void)say;
	(void)ctx;
	(void)figs;
	(void)device;
	(void)devlen;
	snprintf(err, errlen,
	         "backend: cuda: this volrec was built without CUDA (use cpu or auto)");
	return -ENOTSUP;
}

#endif
