/* SPDX-License-Identifier: MIT */
/*
 * Benchmark of the CUDA backend (a benchmark, not a test): pinned copy bandwidths (the
 * physical limits), then sustained throughput and per-epoch latency of be_cuda_ops with raw
 * input already in pinned memory and the output landing in a cudaHostRegister'ed POSIX shm
 * mapping, pipelined (epoch e+1 submitted while e is in flight, be_epoch_finish_async) and
 * serialized (epoch_finish): VolRec at the paper's geometry and the classic 2048 -> 1024
 * pipeline. Prints a table and writes JSON. Exit 0 measured, 1 failure, 2 usage, 77 no CUDA
 * device.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "backend/backend.h"
#include "config/config.h"
#include "gpu/gpu.h"

#define MAX_FIGURES 24

struct figure {
	char name[64];
	double value, target, limit;
	const char *unit;
	const char *note;
};

static struct figure figs[MAX_FIGURES];
static int nfigs;

static void add_figure(const char *name, double value, const char *unit, double target,
                       double limit, const char *note)
{
	if (nfigs >= MAX_FIGURES)
		return;
	struct figure *f = &figs[nfigs++];
	snprintf(f->name, sizeof(f->name), "%s", name);
	f->value = value;
	f->unit = unit;
	f->target = target;
	f->limit = limit;
	f->note = note;
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double percentile(double *v, size_t n, double p)
{
	qsort(v, n, sizeof(double), cmp_double);
	size_t i = (size_t)ceil(p * n) - 1;
	return v[i < n ? i : n - 1];
}

/* A registered shm mapping of size bytes (what a publisher slot is). */
struct shm_buf {
	void *p;
	size_t size;
	bool registered;
};

static int shm_buf_open(struct shm_buf *b, size_t size, void *be, char *err, size_t errlen)
{
	char name[64];
	int fd, rc;

	memset(b, 0, sizeof(*b));
	b->p = MAP_FAILED;
	if (!gpu_shm_fits(size)) {
		/* /dev/shm too small (a container): an anonymous shared mapping instead */
		b->p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		if (b->p == MAP_FAILED) {
			rc = -errno;
			snprintf(err, errlen, "mmap(MAP_SHARED | MAP_ANONYMOUS, %zu): %s", size,
			         strerror(errno));
			return rc;
		}
		printf("  (/dev/shm too small: output in an anonymous shared mapping)\n");
	} else {
		snprintf(name, sizeof(name), "/volrec-gpubench-%ld", (long)getpid());
		fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
		if (fd < 0) {
			snprintf(err, errlen, "shm_open(%s): %s", name, strerror(errno));
			return -errno;
		}
		shm_unlink(name);
		if (ftruncate(fd, (off_t)size) < 0) {
			rc = -errno;
			snprintf(err, errlen, "ftruncate(%zu): %s", size, strerror(errno));
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
	rc = be_cuda_ops.host_register(be, b->p, size);
	if (rc < 0) {
		snprintf(err, errlen, "host_register(shm, %zu): %s", size, strerror(-rc));
		return rc;
	}
	b->registered = true;
	return 0;
}

static void shm_buf_close(struct shm_buf *b, void *be)
{
	if (b->registered)
		be_cuda_ops.host_unregister(be, b->p);
	if (b->p != MAP_FAILED && b->p)
		munmap(b->p, b->size);
	b->p = MAP_FAILED;
}

struct run_result {
	double epochs_per_s, p50_ms, p99_ms;
	size_t in_bytes, out_bytes; /* per epoch */
	unsigned epochs;
};

/*
 * Sustained throughput of cfg for about `seconds` after `warm` epochs. Pipelined: epoch e's
 * B-scans are submitted while e-1 is in flight, then be_epoch_wait(e-1), then
 * be_epoch_finish_async(e); latency is from e's first bscan_submit to be_epoch_wait(e)
 * returning. Serialized: submit, epoch_finish, one epoch after the other.
 */
static int bench_backend(const struct vr_config *cfg, unsigned warm, double seconds, bool pipelined,
                         struct run_result *r, char *err, size_t errlen)
{
	void *be = NULL;
	uint8_t *raw = NULL;
	struct shm_buf out = {.p = MAP_FAILED};
	double *lat = NULL;
	const unsigned max_epochs = 100000;
	const uint32_t ny = cfg->geometry.bscans_per_volume;
	const size_t bb = cfg_bscan_bytes(cfg), vox = cfg_out_voxels(cfg);
	const unsigned nbuf = 2; /* two raw epochs: e+1's is submitted while e is in flight */
	bool inflight = false;
	uint64_t infl_e = 0;
	int rc;

	rc = be_cuda_ops.create(cfg, &be, err, errlen);
	if (rc < 0)
		return rc;
	rc = be_cuda_ops.host_alloc(be, bb * ny * nbuf, (void **)&raw);
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
	rc = shm_buf_open(&out, vox, be, err, errlen);
	if (rc < 0)
		goto out;
	lat = malloc(max_epochs * sizeof(double));
	if (!lat) {
		rc = -ENOMEM;
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	struct be_output o = {.volume = out.p};
	struct be_backend bk = {.ops = &be_cuda_ops, .state = be};
	double t_start = 0, t_first[2] = {0, 0};
	unsigned n = 0;
	for (uint64_t e = 0;; e++) {
		const uint8_t *src = raw + (e % nbuf) * bb * ny;
		t_first[e % 2] = now_s();
		for (uint32_t b = 0; b < ny; b++) {
			rc = be_cuda_ops.bscan_submit(be, e, b, src + (size_t)b * bb);
			if (rc < 0) {
				snprintf(err, errlen, "bscan_submit: %s", strerror(-rc));
				goto out;
			}
		}
		if (!pipelined) {
			rc = be_cuda_ops.epoch_finish(be, e, &o, err, errlen);
			if (rc < 0)
				goto out;
		} else if (e > 0) {
			/* e's B-scans are queued: now wait for e-1, then queue e */
			inflight = false;
			rc = be_epoch_wait(&bk, e - 1, err, errlen);
			if (rc < 0)
				goto out;
		}
		/* the epoch that just completed: e (serialized) or e-1 (pipelined) */
		const double t1 = now_s();
		const int64_t done = pipelined ? (int64_t)e - 1 : (int64_t)e;
		if (done == (int64_t)warm - 1)
			t_start = t1;
		if (done >= (int64_t)warm) {
			lat[n++] = (t1 - t_first[done % 2]) * 1e3;
			if (t1 - t_start >= seconds || n >= max_epochs) {
				r->epochs_per_s = n / (t1 - t_start);
				break;
			}
		}
		if (pipelined) {
			rc = be_epoch_finish_async(&bk, e, &o, err, errlen);
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
	r->p50_ms = percentile(lat, n, 0.50);
	r->p99_ms = percentile(lat, n, 0.99);
	printf("  %s\n", be_cuda_ops.device(be));
out:
	if (inflight) {
		/* a failure with an epoch in flight: its copies into out end before out goes */
		char e2[256];
		if (be_cuda_ops.epoch_wait(be, infl_e, e2, sizeof(e2)) < 0)
			fprintf(stderr, "gpu_bench: after a failure: %s\n", e2);
	}
	free(lat);
	shm_buf_close(&out, be);
	if (raw)
		be_cuda_ops.host_free(be, raw);
	be_cuda_ops.destroy(be);
	return rc;
}

static void json_str(FILE *f, const char *s)
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

int main(int argc, char **argv)
{
	const char *json = NULL, *commit = "unknown";
	double seconds = 3.0;
	int dev = 0;
	char err[1024] = "", devname[256] = "";
	struct gpu_bw bw;
	int rc;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json") && i + 1 < argc)
			json = argv[++i];
		else if (!strcmp(argv[i], "--commit") && i + 1 < argc)
			commit = argv[++i];
		else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
			seconds = atof(argv[++i]);
		else if (!strcmp(argv[i], "--device") && i + 1 < argc)
			dev = atoi(argv[++i]);
		else {
			fprintf(stderr,
			        "usage: gpu_bench [--json FILE] [--commit ID] [--seconds S] "
			        "[--device N]\n");
			return 2;
		}
	}
	if (!(seconds > 0) || seconds > 60) {
		fprintf(stderr, "gpu_bench: --seconds %g: allowed (0, 60]\n", seconds);
		return 2;
	}
	if (gpu_device_count() == 0) {
		printf("SKIP: no CUDA device\n");
		return 77;
	}
	{
		struct cudaDeviceProp p;
		if (cudaGetDeviceProperties(&p, dev) == cudaSuccess)
			snprintf(devname, sizeof(devname), "%s", p.name);
	}

	/* 1. physical limits */
	rc = gpu_bench_bandwidth(dev, 256u << 20, 10, &bw, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "gpu_bench: bandwidth: %s\n", err);
		return 1;
	}
	printf("bandwidth (256 MiB, best of 10): H2D %.1f GB/s, D2H %.1f GB/s, both ways %.1f "
	       "GB/s each, D2H into registered %s %.1f GB/s\n",
	       bw.h2d_gbs, bw.d2h_gbs, bw.bidir_gbs,
	       bw.shm_anonymous ? "anonymous shared mapping (/dev/shm too small)" : "shm",
	       bw.d2h_shm_gbs);
	add_figure("pinned_h2d", bw.h2d_gbs, "GB/s", 0, 0, "cudaMemcpyAsync 256 MiB");
	add_figure("pinned_d2h", bw.d2h_gbs, "GB/s", 0, 0, "cudaMemcpyAsync 256 MiB");
	add_figure("pinned_bidirectional_each_way", bw.bidir_gbs, "GB/s", 0, 0,
	           "H2D and D2H at once on two streams");
	add_figure("d2h_registered_shm", bw.d2h_shm_gbs, "GB/s", 0, 0,
	           "shm_open + mmap(MAP_SHARED) + cudaHostRegister");

	/* 2. VolRec at the paper's geometry */
	struct vr_config c;
	struct run_result r;
	cfg_defaults(&c);
	c.gpu.device = dev;
	c.geometry.samples_per_ascan = 8192;
	c.geometry.ascans_per_bscan = 60;
	c.geometry.bscans_per_volume = 60;
	c.geometry.stride[0] = c.geometry.stride[1] = 5;
	c.geometry.depth_range[0] = 0;
	c.geometry.depth_range[1] = 4096;
	c.reconstruct.mode = CFG_RECON_NONCUMULATIVE;
	printf("volrec 60x60x8192 u16, stride 5 -> 300x300x4096 u8:\n");
	struct run_result rs;
	rc = bench_backend(&c, 30, seconds, true, &r, err, sizeof(err));
	if (rc == 0)
		rc = bench_backend(&c, 30, seconds, false, &rs, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "gpu_bench: volrec: %s\n", err);
		return 1;
	}
	{
		/* limits: copies overlapped across epochs (H2D of e+1 during D2H of e, both ways
		 * at once), and one after the other (the serialized epoch_finish) */
		double serial =
		        1.0 / (r.in_bytes / (bw.h2d_gbs * 1e9) + r.out_bytes / (bw.d2h_gbs * 1e9));
		double overl = 1.0 / fmax(r.in_bytes / (bw.bidir_gbs * 1e9),
		                          r.out_bytes / (bw.bidir_gbs * 1e9));
		printf("  pipelined: %.1f volumes/s (%u epochs), latency p50 %.2f ms p99 %.2f ms\n"
		       "  serialized: %.1f volumes/s (%u epochs), latency p50 %.2f ms p99 %.2f ms\n"
		       "  PCIe ceiling %.1f/s overlapped, %.1f/s serial copies\n",
		       r.epochs_per_s, r.epochs, r.p50_ms, r.p99_ms, rs.epochs_per_s, rs.epochs,
		       rs.p50_ms, rs.p99_ms, overl, serial);
		add_figure(
		        "volrec_paper_volumes_per_s", r.epochs_per_s, "volumes/s", 120, overl,
		        "pipelined (epoch e+1 submitted while e is in flight); limit: H2D and D2H "
		        "at once at the measured both-ways bandwidth");
		add_figure("volrec_paper_volumes_per_s_serialized", rs.epochs_per_s, "volumes/s",
		           120, serial, "epoch_finish one epoch at a time; limit: H2D then D2H");
		add_figure("volrec_paper_ceiling_overlapped", overl, "volumes/s", 120, overl,
		           "limit with H2D of epoch e+1 overlapping D2H of epoch e");
		add_figure("volrec_paper_latency_p50", r.p50_ms, "ms", 15, 1e3 / serial,
		           "pipelined: first bscan_submit of e to be_epoch_wait(e) returning "
		           "(includes waiting for e-1); limit: its copies alone");
		add_figure("volrec_paper_latency_p99", r.p99_ms, "ms", 15, 1e3 / serial, "");
		add_figure("volrec_paper_latency_p50_serialized", rs.p50_ms, "ms", 15, 1e3 / serial,
		           "first bscan_submit to epoch_finish returning, nothing else in flight");
		add_figure("volrec_paper_latency_p99_serialized", rs.p99_ms, "ms", 15, 1e3 / serial,
		           "");
	}

	/* 3. classic: 2048 u16 -> 1024 u8 depths, mode none */
	cfg_defaults(&c);
	c.gpu.device = dev;
	c.geometry.samples_per_ascan = 2048;
	c.geometry.ascans_per_bscan = 1024;
	c.geometry.bscans_per_volume = 256;
	c.geometry.stride[0] = c.geometry.stride[1] = 1;
	c.geometry.depth_range[0] = 0;
	c.geometry.depth_range[1] = 1024;
	c.reconstruct.mode = CFG_RECON_NONE;
	printf("classic 1024x256 A-scans of 2048 u16 -> 1024 u8, mode none:\n");
	rc = bench_backend(&c, 3, seconds, true, &r, err, sizeof(err));
	if (rc == 0)
		rc = bench_backend(&c, 3, seconds, false, &rs, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "gpu_bench: classic: %s\n", err);
		return 1;
	}
	{
		const double asc = 1024.0 * 256;
		double serial =
		        asc / (r.in_bytes / (bw.h2d_gbs * 1e9) + r.out_bytes / (bw.d2h_gbs * 1e9));
		double overl = asc / fmax(r.in_bytes / (bw.bidir_gbs * 1e9),
		                          r.out_bytes / (bw.bidir_gbs * 1e9));
		printf("  pipelined: %.2f M A-scans/s (%u epochs), latency p50 %.2f ms p99 %.2f "
		       "ms\n"
		       "  serialized: %.2f M A-scans/s (%u epochs), latency p50 %.2f ms p99 %.2f "
		       "ms\n"
		       "  PCIe ceiling %.2f M/s overlapped, %.2f M/s serial copies\n",
		       r.epochs_per_s * asc / 1e6, r.epochs, r.p50_ms, r.p99_ms,
		       rs.epochs_per_s * asc / 1e6, rs.epochs, rs.p50_ms, rs.p99_ms, overl / 1e6,
		       serial / 1e6);
		add_figure("classic_ascans_per_s", r.epochs_per_s * asc, "A-scans/s", 10e6, overl,
		           "pipelined; limit: H2D and D2H at once at the measured both-ways "
		           "bandwidth");
		add_figure("classic_ascans_per_s_serialized", rs.epochs_per_s * asc, "A-scans/s",
		           10e6, serial, "epoch_finish one epoch at a time; limit: H2D then D2H");
		add_figure("classic_ceiling_overlapped", overl, "A-scans/s", 10e6, overl,
		           "limit with the copies of consecutive epochs overlapping");
		add_figure("classic_latency_p50", r.p50_ms, "ms", 0, 1e3 * asc / serial,
		           "pipelined, per epoch of 262144 A-scans");
		add_figure("classic_latency_p99", r.p99_ms, "ms", 0, 1e3 * asc / serial, "");
	}

	/* table */
	printf("\n%-36s %14s %-10s %12s %12s %8s %8s\n", "figure", "value", "unit", "target",
	       "limit", "/limit", "/target");
	for (int i = 0; i < nfigs; i++) {
		const struct figure *f = &figs[i];
		printf("%-36s %14.4g %-10s %12.4g %12.4g %8.3f %8.3f\n", f->name, f->value, f->unit,
		       f->target, f->limit, f->limit > 0 ? f->value / f->limit : 0.0,
		       f->target > 0 ? f->value / f->target : 0.0);
	}

	if (json) {
		FILE *f = fopen(json, "w");
		char date[64];
		time_t t = time(NULL);
		struct tm tm;
		if (!f) {
			fprintf(stderr, "gpu_bench: %s: %s\n", json, strerror(errno));
			return 1;
		}
		strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &tm));
		fprintf(f, "{\n  \"benchmark\": \"volrec gpu_bench\",\n  \"device\": ");
		json_str(f, devname);
		fprintf(f, ",\n  \"date\": \"%s\",\n  \"commit\": ", date);
		json_str(f, commit);
		fprintf(f, ",\n  \"seconds_per_figure\": %g,\n  \"figures\": [\n", seconds);
		for (int i = 0; i < nfigs; i++) {
			const struct figure *g = &figs[i];
			fprintf(f, "    {\"name\": \"%s\", \"value\": %.6g, \"unit\": \"%s\", ",
			        g->name, g->value, g->unit);
			fprintf(f, "\"target\": %.6g, \"limit\": %.6g, \"ratio_to_limit\": %.4f, ",
			        g->target, g->limit, g->limit > 0 ? g->value / g->limit : 0.0);
			fprintf(f, "\"ratio_to_target\": %.4f, \"note\": ",
			        g->target > 0 ? g->value / g->target : 0.0);
			json_str(f, g->note);
			fprintf(f, "}%s\n", i + 1 < nfigs ? "," : "");
		}
		fprintf(f, "  ]\n}\n");
		if (fclose(f) != 0) {
			fprintf(stderr, "gpu_bench: writing %s: %s\n", json, strerror(errno));
			return 1;
		}
		printf("wrote %s\n", json);
	}
	return 0;
}
