/* SPDX-License-Identifier: MIT */
/*
 * The CPU reference backend (be_cpu_ops): state, FFTW plans made once per configuration
 * (plan creation serialized by a process-wide mutex), pthreads over A-scan batches and output
 * rows, and the be_ops entry points. The numerical contract is docs/algorithms.md.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu/internal.h"

/* FFTW's planner is not thread-safe: every plan is made and destroyed under this lock. */
static pthread_mutex_t cpu_fftw_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- threads ------------------------------------------------------------------------------ */

struct par_job {
	size_t n;
	atomic_size_t next;
	void (*fn)(struct cpu_worker *w, size_t item, void *ctx);
	void *ctx;
};

struct par_arg {
	struct par_job *job;
	struct cpu_worker *w;
};

static void *par_main(void *varg)
{
	struct par_arg *a = varg;
	struct par_job *job = a->job;

	for (;;) {
		size_t i = atomic_fetch_add(&job->next, 1);
		if (i >= job->n)
			break;
		job->fn(a->w, i, job->ctx);
	}
	return NULL;
}

void cpu_parallel(struct cpu_state *st, size_t n,
                  void (*fn)(struct cpu_worker *w, size_t item, void *ctx), void *ctx)
{
	struct par_job job = {.n = n, .fn = fn, .ctx = ctx};
	struct par_arg args[CPU_MAX_THREADS];
	pthread_t tid[CPU_MAX_THREADS];
	bool started[CPU_MAX_THREADS] = {false};
	unsigned nt = st->nthreads;

	atomic_init(&job.next, 0);
	if (n < nt)
		nt = (unsigned)n;
	/* Threads that cannot start leave their share to the others: the result is the same. */
	for (unsigned t = 1; t < nt; t++) {
		args[t] = (struct par_arg){.job = &job, .w = &st->workers[t]};
		started[t] = pthread_create(&tid[t], NULL, par_main, &args[t]) == 0;
	}
	args[0] = (struct par_arg){.job = &job, .w = &st->workers[0]};
	par_main(&args[0]);
	for (unsigned t = 1; t < nt; t++)
		if (started[t])
			pthread_join(tid[t], NULL);
}

/* ---- memory ------------------------------------------------------------------------------- */

static void *xalloc(size_t size)
{
	void *p = NULL;
	size_t align = size >= (2u << 20) ? (2u << 20) : 64;

	if (size == 0)
		size = 1;
	size = (size + align - 1) / align * align;
	if (posix_memalign(&p, align, size))
		return NULL;
	return p;
}

static void cpu_destroy(void *vst)
{
	struct cpu_state *st = vst;

	if (!st)
		return;
	cpu_views_free(st);
	pthread_mutex_lock(&cpu_fftw_lock);
	if (st->plan_r2c)
		fftwf_destroy_plan(st->plan_r2c);
	if (st->plan_c2c)
		fftwf_destroy_plan(st->plan_c2c);
	pthread_mutex_unlock(&cpu_fftw_lock);
	if (st->workers) {
		for (unsigned t = 0; t < st->nthreads; t++) {
			struct cpu_worker *w = &st->workers[t];
			free(w->conv);
			free(w->rsout);
			free(w->dacc);
			free(w->spl_m);
			free(w->med);
			fftwf_free(w->fin);
			fftwf_free(w->fout);
			free(w->ring);
			free(w->acc);
			fftwf_free(w->spec);
			free(w->pm_acc);
			free(w->pm_sig);
			free(w->pm_c);
			free(w->pow);
			fftwf_free(w->fspec);
			free(w->keep);
			free(w->fn_scratch);
		}
		free(st->workers);
	}
	free(st->p.bg_ref);
	free(st->p.rs_idx);
	free(st->p.rs_w);
	free(st->p.spl_c);
	free(st->p.win);
	free(st->p.disp_re);
	free(st->p.disp_im);
	free(st->pos_tmp);
	free(st->raw);
	free(st->pm_count);
	free(st->miss);
	free(st->miss_count);
	free(st->bgspec);
	free(st->lowres);
	free(st->bvol);
	free(st->ovol);
	for (int pl = 0; pl < CPU_FN_PLANES; pl++) {
		free(st->lpl[pl]);
		free(st->bpl[pl]);
		free(st->opl[pl]);
	}
	free(st->dres[0]);
	free(st->dres[1]);
	free(st->E);
	free(st->tcol);
	free(st->inv_gz);
	free(st->inv_nz);
	free(st->chg);
	free(st->alpha);
	free(st->beta);
	free(st->jmean);
	free(st->rsh);
	free(st->rhist);
	free(st->rd);
	free(st->rw);
	free(st->rys);
	free(st->rxs);
	cpu_motion_free(st);
	free(st);
}

static void cpu_reset_history(void *vst)
{
	struct cpu_state *st = vst;
	size_t cols = (size_t)st->geo.Y * st->geo.X;

	for (size_t i = 0; i < cols; i++)
		st->E[i] = -1;
	memset(st->bvol, 0, cols * st->geo.nz * sizeof(float));
	memset(st->ovol, 0, cols * st->geo.nz * sizeof(float));
	for (int pl = 0; pl < CPU_FN_PLANES; pl++) {
		if (st->bpl[pl])
			memset(st->bpl[pl], 0, cols * st->geo.nz * sizeof(float));
		if (st->opl[pl])
			memset(st->opl[pl], 0, cols * st->geo.nz * sizeof(float));
	}
	if (st->motion)
		be_motion_reset(st->motion);
	st->rpose = (struct be_reg_plane){0};
	st->rhave = false;
	if (st->rhist)
		memset(st->rhist, 0, cols * st->geo.nz * sizeof(float));
	be_jump_reset(&st->jump);
}

static unsigned cpu_count_threads(int want)
{
	long n = want > 0 ? want : sysconf(_SC_NPROCESSORS_ONLN);

	if (n < 1)
		n = 1;
	return (unsigned)(n > CPU_MAX_THREADS ? CPU_MAX_THREADS : n);
}

/* Allocate the per-thread partial_median buffers (once; nothing when they exist).
 * \return 0, or -ENOMEM with a message in err. */
static int cpu_pm_alloc(struct cpu_state *st, char *err, size_t errlen)
{
	const size_t nh = st->geo.nh;

	if (st->pm_ready)
		return 0;
	for (unsigned t = 0; t < st->nthreads; t++) {
		struct cpu_worker *w = &st->workers[t];
		if (!w->spec)
			w->spec = fftwf_malloc((size_t)st->geo.nx * nh * sizeof(fftwf_complex));
		if (!w->pm_acc)
			w->pm_acc = xalloc(4 * nh * sizeof(double));
		if (!w->pm_sig)
			w->pm_sig = xalloc(2 * nh * sizeof(float));
		if (!w->pm_c)
			w->pm_c = xalloc(2 * nh * sizeof(float));
		if (!w->spec || !w->pm_acc || !w->pm_sig || !w->pm_c) {
			/* what was allocated stays for a later try and is freed by destroy */
			return vr_err(err, errlen, -ENOMEM,
			              "cpu backend: out of memory for partial_median (%u threads x "
			              "%zu MiB of spectra)",
			              st->nthreads,
			              ((size_t)st->geo.nx * nh * sizeof(fftwf_complex)) >> 20);
		}
	}
	st->pm_ready = true;
	return 0;
}

#define ALLOC(ptr, count)                                                                          \
	do {                                                                                       \
		(ptr) = xalloc((size_t)(count) * sizeof(*(ptr)));                                  \
		if (!(ptr))                                                                        \
			goto out_nomem;                                                            \
	} while (0)

/* What the live keys set up, at create and at each live update: the partial median's
 * buffers when it is on, the parameters and the views. */
static int cpu_live_setup(struct cpu_state *st, const struct vr_config *cfg, char *err,
                          size_t errlen)
{
	int rc;

	if (cfg->reconstruct.mode == CFG_RECON_COMPENSATED) {
		rc = cpu_motion_alloc(st, err, errlen);
		if (rc < 0)
			return rc;
		be_motion_set_estimate(st->motion, cfg->reconstruct.compensated.estimate_pose);
	}
	if (cfg->reconstruct.mode == CFG_RECON_REGISTERED) {
		rc = cpu_register_alloc(st, err, errlen);
		if (rc < 0)
			return rc;
	}
	if (cfg->preprocess.background.mode == CFG_BG_PARTIAL_MEDIAN) {
		rc = cpu_pm_alloc(st, err, errlen);
		if (rc < 0)
			return rc;
	}
	rc = cpu_params_build(st, cfg, err, errlen);
	if (rc < 0)
		return rc;
	return cpu_views_setup(st, cfg, err, errlen);
}

/* Every buffer of st (its geometry set): false when out of memory. */
static bool cpu_alloc(struct cpu_state *st)
{
	const uint32_t K = st->geo.K, N = st->geo.N;
	const size_t cols = (size_t)st->geo.Y * st->geo.X;
	ALLOC(st->p.bg_ref, K);
	ALLOC(st->p.rs_idx, K);
	ALLOC(st->p.rs_w, 4 * (size_t)K);
	ALLOC(st->p.spl_c, K);
	ALLOC(st->p.win, K);
	ALLOC(st->p.disp_re, K);
	ALLOC(st->p.disp_im, K);
	ALLOC(st->pos_tmp, K);
	ALLOC(st->raw, st->geo.nraw);
	ALLOC(st->pm_count, st->geo.nraw);
	ALLOC(st->miss, (size_t)st->geo.ny * st->geo.nx);
	ALLOC(st->miss_count, st->geo.ny);
	ALLOC(st->bgspec, (size_t)st->geo.nraw * K);
	ALLOC(st->lowres, (size_t)st->geo.ny * st->geo.nx * st->geo.nz);
	ALLOC(st->bvol, cols * st->geo.nz);
	ALLOC(st->ovol, cols * st->geo.nz);
	ALLOC(st->E, cols);
	ALLOC(st->tcol, cols);
	ALLOC(st->inv_gz, st->geo.nz);
	ALLOC(st->inv_nz, st->geo.nz);
	ALLOC(st->chg, 2 * (size_t)st->geo.ny * st->geo.nx);
	ALLOC(st->alpha, cols);
	ALLOC(st->beta, cols);
	ALLOC(st->jmean, 3 * (size_t)st->geo.nz);
	for (int pl = 0; pl < CPU_FN_PLANES; pl++) {
		bool want = pl == CPU_PL_ANGIO ? st->geo.chan[CFG_CH_ANGIO] >= 0
		                               : st->geo.chan[CFG_CH_DOPPLER] >= 0;
		if (!want)
			continue;
		ALLOC(st->lpl[pl], (size_t)st->geo.ny * st->geo.nx * st->geo.nz);
		ALLOC(st->bpl[pl], cols * st->geo.nz);
		ALLOC(st->opl[pl], cols * st->geo.nz);
		st->functional = true;
	}
	if (st->geo.chan[CFG_CH_DOPPLER] >= 0) {
		ALLOC(st->dres[0], cols * st->geo.nz);
		ALLOC(st->dres[1], cols * st->geo.nz);
	}
	st->workers = calloc(st->nthreads, sizeof(*st->workers));
	if (!st->workers)
		return false;
	for (unsigned t = 0; t < st->nthreads; t++) {
		struct cpu_worker *w = &st->workers[t];
		w->st = st;
		ALLOC(w->conv, K);
		ALLOC(w->rsout, K);
		ALLOC(w->dacc, K);
		ALLOC(w->spl_m, K);
		ALLOC(w->med, st->geo.nx);
		ALLOC(w->ring, 3 * (size_t)st->geo.X * 2 * st->geo.nz);
		ALLOC(w->acc, 3 * (size_t)st->geo.nz); /* recon: 2; compensated: 3 */
		if (st->geo.M > 1) /* the repeats' mean power of a B-scan's A-scans */
			ALLOC(w->pow, (size_t)st->geo.nx * st->geo.nh);
		if (st->functional) { /* one position's spectra, all its repeats */
			ALLOC(w->keep, (size_t)st->geo.nx * st->geo.nh);
			ALLOC(w->fn_scratch, (size_t)CPU_FN_SCRATCH_ROWS * st->geo.nh);
			w->fspec = fftwf_malloc((size_t)st->geo.M * cpu_fspec_rows(&st->geo) * N *
			                        sizeof(fftwf_complex));
			if (!w->fspec)
				return false;
		}
		w->fin = fftwf_malloc((size_t)CPU_BATCH * N * sizeof(fftwf_complex));
		w->fout = fftwf_malloc((size_t)CPU_BATCH * N * sizeof(fftwf_complex));
		if (!w->fin || !w->fout)
			return false;
	}
	return true;
out_nomem:
	return false;
}

/* The two FFTW plans. */
static int cpu_plan(struct cpu_state *st, char *err, size_t errlen)
{
	/* Both transforms are planned up front, so that switching dispersion on or off live
	 * needs neither allocation nor planning. FFTW_ESTIMATE, not FFTW_MEASURE: a measured plan
	 * depends on the machine's load at planning time, and a different plan rounds
	 * differently; the reference backend must give the same bits in every process (the
	 * daemon, `volrec process`, the tests), so the plan must not depend on timing. */
	const uint32_t N = st->geo.N;
	int n[1] = {(int)N};
	struct cpu_worker *w0 = &st->workers[0];

	{
		pthread_mutex_lock(&cpu_fftw_lock);
		st->plan_r2c = fftwf_plan_many_dft_r2c(1, n, CPU_BATCH, (float *)w0->fin, NULL, 1,
		                                       (int)N, w0->fout, NULL, 1,
		                                       (int)st->geo.nh + 1, FFTW_ESTIMATE);
		st->plan_c2c =
		        fftwf_plan_many_dft(1, n, CPU_BATCH, w0->fin, NULL, 1, (int)N, w0->fout,
		                            NULL, 1, (int)N, FFTW_FORWARD, FFTW_ESTIMATE);
		pthread_mutex_unlock(&cpu_fftw_lock);
		if (!st->plan_r2c || !st->plan_c2c)
			return vr_err(err, errlen, -EINVAL,
			              "cpu backend: FFTW could not plan %u-point transforms", N);
	}
	return 0;
}

static int cpu_create(const struct vr_config *cfg, void **state, char *err, size_t errlen)
{
	struct cpu_state *st;
	int rc;

	st = calloc(1, sizeof(*st));
	if (!st)
		return vr_err(err, errlen, -ENOMEM, "cpu backend: out of memory");
	be_geometry_init(&st->geo, cfg);
	st->nthreads = cpu_count_threads(cfg->cpu.threads);

	if (!cpu_alloc(st))
		goto out_nomem;
	memset(st->pm_count, 0, st->geo.nraw * sizeof(*st->pm_count));
	memset(st->miss, 0, (size_t)st->geo.ny * st->geo.nx);
	memset(st->miss_count, 0, st->geo.ny * sizeof(*st->miss_count));
	rc = cpu_live_setup(st, cfg, err, errlen);
	if (rc < 0)
		goto out_destroy;

	rc = cpu_plan(st, err, errlen);
	if (rc < 0)
		goto out_destroy;
	for (unsigned t = 0; t < st->nthreads; t++) {
		memset(st->workers[t].fin, 0,
		       (size_t)CPU_BATCH * st->geo.N * sizeof(fftwf_complex));
		memset(st->workers[t].fout, 0,
		       (size_t)CPU_BATCH * st->geo.N * sizeof(fftwf_complex));
	}
	cpu_reset_history(st);
	snprintf(st->device, sizeof(st->device), "CPU: %u threads, FFTW %s", st->nthreads,
	         fftwf_version);
	*state = st;
	return 0;

out_nomem:
	rc = vr_err(err, errlen, -ENOMEM,
	            "cpu backend: out of memory for a %ux%ux%u (stride %ux%u) geometry", st->geo.nx,
	            st->geo.ny, st->geo.K, st->geo.sx, st->geo.sy);
out_destroy:
	cpu_destroy(st);
	return rc;
}

static const char *cpu_device(void *vst)
{
	return ((struct cpu_state *)vst)->device;
}

static int cpu_host_alloc(void *vst, size_t size, void **ptr)
{
	void *p = xalloc(size);

	if (!p)
		return -ENOMEM;
	*ptr = p;
	return 0;
}

static void cpu_host_free(void *vst, void *ptr)
{
	free(ptr);
}

/* Call order (an index in range, one epoch at a time, all B-scans before the finish) is the
 * wrappers' (backend/ops.h): the CPU only records where the B-scan is. */
static int cpu_bscan_submit(void *vst, uint64_t epoch, uint32_t bscan, const void *raw)
{
	struct cpu_state *st = vst;

	st->raw[bscan] = raw;
	return 0;
}

/* What fn_lowres_rows writes: out's functional low-resolution outputs from the planes Lf, n
 * voxels a channel, row voxels a B-scan. */
struct fn_lowres_ctx {
	float *const *Lf;
	const struct be_output *out;
	size_t n, row;
	int ac, dc;
	bool none;
};

/* B-scan item of functional_lowres (each voxel on its own: any split gives the same bytes). */
static void fn_lowres_rows(struct cpu_worker *w, size_t item, void *vctx)
{
	const struct fn_lowres_ctx *c = vctx;
	const struct be_output *out = c->out;
	const size_t o = item * c->row;

	(void)w;
	if (c->none && c->ac >= 0) {
		const size_t a = (size_t)c->ac * c->n;
		if (out->full)
			memcpy(out->full + a + o, c->Lf[CPU_PL_ANGIO] + o, c->row * sizeof(float));
		if (out->volume)
			cpu_quantize(out->volume + a + o, c->Lf[CPU_PL_ANGIO] + o,
			             (uint32_t)c->row);
	}
	if (c->dc < 0)
		return;
	const size_t d = (size_t)c->dc * c->n + o;
	cpu_fn_doppler_row(c->Lf[CPU_PL_DRE] + o, c->Lf[CPU_PL_DIM] + o, c->row,
	                   out->lowres_doppler ? out->lowres_doppler + o : NULL,
	                   c->none && out->full ? out->full + d : NULL,
	                   c->none && out->volume ? out->volume + d : NULL);
}

/* The functional channels' low-resolution outputs (Doppler's phase) and, in mode none, their
 * volumes: angiography's v, Doppler's v of R (docs/algorithms.md §5); a B-scan an item on the
 * state's threads. */
static void functional_lowres(struct cpu_state *st, float *const Lf[CPU_FN_PLANES],
                              const struct be_output *out)
{
	const struct fn_lowres_ctx c = {
	        .Lf = Lf,
	        .out = out,
	        .n = st->geo.le_count,
	        .row = st->geo.le_count / st->geo.ny,
	        .ac = st->geo.chan[CFG_CH_ANGIO],
	        .dc = st->geo.chan[CFG_CH_DOPPLER],
	        .none = st->p.live.mode == CFG_RECON_NONE,
	};

	if (!(c.none && c.ac >= 0) && !(c.dc >= 0 && (c.none || out->lowres_doppler)))
		return;
	cpu_parallel(st, st->geo.ny, fn_lowres_rows, (void *)&c);
}

static int cpu_epoch_finish(void *vst, uint64_t epoch, const struct be_output *out, char *err,
                            size_t errlen)
{
	struct cpu_state *st = vst;
	float *L = out->lowres ? out->lowres : st->lowres;
	float *Lf[CPU_FN_PLANES] = {NULL, NULL, NULL};

	if (st->lpl[CPU_PL_ANGIO])
		Lf[CPU_PL_ANGIO] = out->lowres_angio ? out->lowres_angio : st->lpl[CPU_PL_ANGIO];
	Lf[CPU_PL_DRE] = st->lpl[CPU_PL_DRE];
	Lf[CPU_PL_DIM] = st->lpl[CPU_PL_DIM];
	cpu_preprocess_epoch(st, L, Lf, out);
	if (st->functional)
		functional_lowres(st, Lf, out);
	if (st->p.live.mode == CFG_RECON_COMPENSATED) {
		int rc = cpu_motion_epoch(st, epoch, L, out, err, errlen);
		if (rc < 0)
			return rc;
	} else if (st->p.live.mode != CFG_RECON_NONE) {
		cpu_recon_epoch(st, epoch, L, Lf, out);
	}
	if (out->median_depths) {
		for (uint32_t b = 0; b < st->geo.ny; b++) {
			uint32_t most = 0; /* the most over the position's repeats */
			for (uint32_t m = 0; m < st->geo.M; m++)
				if (st->pm_count[b * st->geo.M + m] > most)
					most = st->pm_count[b * st->geo.M + m];
			out->median_depths[b] =
			        st->p.live.background == CFG_BG_PARTIAL_MEDIAN ? most : 0;
		}
	}
	if (out->missing_ascans)
		memcpy(out->missing_ascans, st->miss_count, st->geo.ny * sizeof(uint32_t));
	return cpu_views_epoch(st, out, err, errlen);
}

static int cpu_update_live(void *vst, const struct vr_config *cfg, char *err, size_t errlen)
{
	struct cpu_state *st = vst;
	enum cfg_recon_mode old = st->p.live.mode;
	int rc;

	if (!be_geometry_same(&st->geo, cfg) || cpu_count_threads(cfg->cpu.threads) != st->nthreads)
		return vr_err(
		        err, errlen, -EINVAL,
		        "cpu backend: geometry, zero_pad, sample type or cpu.threads changed: "
		        "needs a rebuild, not a live update");
	rc = cpu_live_setup(st, cfg, err, errlen);
	if (rc < 0)
		return rc;
	if (st->p.live.mode != old)
		cpu_reset_history(st);
	return 0;
}

const struct be_ops be_cpu_ops = {
        .version = BE_OPS_VERSION,
        .name = "cpu",
        /* synchronous, in host memory: nothing to pin or register */
        .caps = BE_CAP_CHANNEL_VIEWS,
        .create = cpu_create,
        .destroy = cpu_destroy,
        .device = cpu_device,
        .host_alloc = cpu_host_alloc,
        .host_free = cpu_host_free,
        .bscan_submit = cpu_bscan_submit,
        .epoch_finish = cpu_epoch_finish,
        .update_live = cpu_update_live,
        .reset_history = cpu_reset_history,
};
