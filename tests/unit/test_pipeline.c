/* SPDX-License-Identifier: MIT */
/*
 * The pipeline engine (pipeline/) on the CPU backend with a scripted in-memory source that
 * fails, times out, numbers B-scans wrongly, marks them lost or incomplete, or stalls on
 * command: the ring, drop accounting, metadata checks, fault back-off and recovery, B-scans
 * the source has no data for, live updates and resets between epochs, depth 1 and 2 giving
 * the same volumes, sink failures, unpaced sources that wait instead of dropping, and a stop
 * that does not wait for a hung source.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <volrec/protocol.h>

#include "pipeline/internal.h"
#include "tests/unit/vrtest.h"

#define K        64
#define NX       4
#define NY       3
#define S        4 /* stride 2 x 2 */
#define MAX_VOLS 64

/* ---- the scripted source -------------------------------------------------------------------- */

struct script {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool zc;        /* offer the zero-copy calls */
	bool bad_utf8;  /* info strings that are not UTF-8 */
	uint16_t *data; /* [S][NY][NX * K]: epoch e's B-scans are those of e % S */
	/* commands, by B-scans delivered so far */
	uint64_t delivered;
	uint64_t fail_at; /* when delivered == fail_at: fail `fails` calls with fail_rc */
	unsigned fails;
	int fail_rc;
	uint64_t renumber_at;   /* when delivered == renumber_at: one B-scan numbered bscan + 1 */
	uint64_t stall_at;      /* when delivered == stall_at: block until released */
	uint64_t stall_epoch;   /* set_scan_offset(stall_epoch) blocks until released */
	bool stall_close;       /* closing the source blocks until released */
	unsigned offset_fails;  /* the next set_scan_offset calls that fail with -EIO */
	unsigned release_fails; /* the next release_ref calls that fail with -EINVAL */
	uint64_t mark_at[4];    /* when delivered == mark_at[i]: meta.flags = mark_flags[i] */
	uint32_t mark_flags[4];
	uint64_t overrun_at; /* the acquire() delivering B-scan overrun_at writes overrun bytes past
	                      * its buffer */
	unsigned overrun;
	uint64_t ts_at; /* delivered in [ts_at, ts_at + ts_n): meta.timestamp_ns = ts_value */
	unsigned ts_n;
	uint64_t ts_value;
	bool stalling, released;
	uint64_t sleep_at; /* when delivered == sleep_at: sleep sleep_ms first */
	unsigned sleep_ms;
	unsigned pace_us; /* sleep before each B-scan */
	uint32_t reps;    /* repeats of each position (0: 1), identical data, meta.repeat set */
	/* bookkeeping */
	unsigned opens, closes;
	bool freed; /* the pipeline said it lets go of the script (pl_options.on_freed) */
	int refs;   /* references held by the engine */
	/* per handle */
	uint64_t epoch, pend_epoch;
	uint32_t b, m;
	bool pend, started;
};

static const uint16_t *script_bscan(struct script *s, uint64_t e, uint32_t b)
{
	return s->data + ((size_t)(e % S) * NY + b) * NX * K;
}

static int sc_set_scan_offset(void *h, uint64_t epoch, uint32_t ox, uint32_t oy)
{
	struct script *s = h;

	(void)ox;
	(void)oy;
	pthread_mutex_lock(&s->mu);
	if (s->offset_fails) {
		s->offset_fails--;
		pthread_mutex_unlock(&s->mu);
		return -EIO;
	}
	if (epoch == s->stall_epoch && !s->released) {
		s->stalling = true;
		pthread_cond_broadcast(&s->cv);
		while (!s->released)
			pthread_cond_wait(&s->cv, &s->mu);
	}
	s->pend = true;
	s->pend_epoch = epoch;
	pthread_mutex_unlock(&s->mu);
	return 0;
}

static int sc_start(void *h)
{
	((struct script *)h)->started = true;
	return 0;
}

static int sc_stop(void *h)
{
	((struct script *)h)->started = false;
	return 0;
}

static void sc_close(void *h)
{
	(void)h;
}

/* The next B-scan, after the commands for this call. */
static int sc_next(struct script *s, const void **p, struct volrec_shim_meta *meta)
{
	uint64_t d;

	if (s->pace_us)
		usleep(s->pace_us);
	pthread_mutex_lock(&s->mu);
	d = s->delivered;
	if (d == s->sleep_at && s->sleep_ms) {
		unsigned ms = s->sleep_ms;

		s->sleep_ms = 0;
		pthread_mutex_unlock(&s->mu);
		usleep(ms * 1000u);
		pthread_mutex_lock(&s->mu);
	}
	if (d == s->stall_at && !s->released) {
		s->stalling = true;
		pthread_cond_broadcast(&s->cv);
		while (!s->released)
			pthread_cond_wait(&s->cv, &s->mu);
	}
	if (d == s->fail_at && s->fails) {
		s->fails--;
		pthread_mutex_unlock(&s->mu);
		return s->fail_rc;
	}
	if (s->b == 0 && s->m == 0 && s->pend) {
		s->epoch = s->pend_epoch;
		s->pend = false;
	}
	*p = script_bscan(s, s->epoch, s->b);
	meta->timestamp_ns = d >= s->ts_at && d - s->ts_at < s->ts_n ? s->ts_value : vr_real_ns();
	meta->epoch = s->epoch;
	meta->bscan = s->b;
	meta->repeat = s->m;
	meta->flags = 0;
	for (int i = 0; i < 4; i++)
		if (d == s->mark_at[i])
			meta->flags = s->mark_flags[i];
	if (d == s->renumber_at)
		meta->bscan++;
	s->delivered++;
	if (++s->m < (s->reps ? s->reps : 1u))
		goto out;
	s->m = 0;
	if (++s->b == NY) {
		s->b = 0;
		s->epoch++;
	}
out:
	if (s->zc)
		s->refs++;
	pthread_mutex_unlock(&s->mu);
	return 0;
}

static int sc_acquire(void *h, void *buf, size_t size, int timeout_ms,
                      struct volrec_shim_meta *meta)
{
	struct script *s = h;
	const void *p;
	uint64_t d = s->delivered; /* only this thread moves it */
	int rc = sc_next(s, &p, meta);

	(void)timeout_ms;
	if (rc == 0) {
		memcpy(buf, p, size);
		if (d == s->overrun_at)
			memset((char *)buf + size, 0x33, s->overrun);
	}
	return rc;
}

static int sc_acquire_ref(void *h, const void **p, int timeout_ms, struct volrec_shim_meta *meta)
{
	(void)timeout_ms;
	return sc_next(h, p, meta);
}

static int sc_release_ref(void *h, const void *p)
{
	struct script *s = h;

	int rc = 0;

	(void)p;
	pthread_mutex_lock(&s->mu);
	s->refs--; /* given back even when it says otherwise: the engine never retries */
	if (s->release_fails) {
		s->release_fails--;
		rc = -EINVAL;
	}
	pthread_mutex_unlock(&s->mu);
	return rc;
}

static int sc_ref_regions(void *h, struct volrec_shim_region *r, uint32_t max, uint32_t *count)
{
	struct script *s = h;

	if (max >= 1) {
		r[0].base = s->data;
		r[0].size = (size_t)S * NY * NX * K * sizeof(uint16_t);
	}
	*count = 1;
	return 0;
}

/* The calls of the copying source; the zero-copy one adds the extension's. */
#define SC_OPS_COPY                                                                                \
	.abi_version = VOLREC_SHIM_ABI_VERSION, .struct_size = sizeof(struct volrec_shim_ops),     \
	.set_scan_offset = sc_set_scan_offset, .start = sc_start, .acquire = sc_acquire,           \
	.stop = sc_stop, .close = sc_close
static const struct volrec_shim_ops sc_ops_zc = {
        SC_OPS_COPY,
        .ref_regions = sc_ref_regions,
        .acquire_ref = sc_acquire_ref,
        .release_ref = sc_release_ref,
};
static const struct volrec_shim_ops sc_ops_copy = {SC_OPS_COPY};

static int sc_open(void *ctx, const struct vr_config *cfg, unsigned flags, struct src_source *src,
                   char *err, size_t errlen)
{
	struct script *s = ctx;

	(void)cfg;
	(void)flags;
	(void)err;
	(void)errlen;
	pthread_mutex_lock(&s->mu);
	s->opens++;
	s->b = 0;
	s->m = 0;
	s->epoch = 0;
	s->pend = false;
	pthread_mutex_unlock(&s->mu);
	memset(src, 0, sizeof(*src));
	src->impl = s->zc ? sc_ops_zc : sc_ops_copy;
	src->kind = "script";
	src->handle = s;
	snprintf(src->info.name, sizeof(src->info.name), "%s",
	         s->bad_utf8 ? "scr\xff\xfeipt" : "script");
	snprintf(src->info.device, sizeof(src->info.device), "%s",
	         s->bad_utf8 ? "dev\xc3\x28ice" : "memory");
	return 0;
}

static void sc_src_close(void *ctx, struct src_source *src)
{
	struct script *s = ctx;

	pthread_mutex_lock(&s->mu);
	if (s->stall_close && !s->released) {
		s->stalling = true;
		pthread_cond_broadcast(&s->cv);
		while (!s->released)
			pthread_cond_wait(&s->cv, &s->mu);
	}
	s->closes++;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	memset(src, 0, sizeof(*src));
}

static void sc_freed(void *ctx)
{
	struct script *s = ctx;

	pthread_mutex_lock(&s->mu);
	s->freed = true;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

static void script_init(struct script *s, bool zc)
{
	memset(s, 0, sizeof(*s));
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	s->zc = zc;
	s->fail_at = s->renumber_at = s->stall_at = s->stall_epoch = s->sleep_at = UINT64_MAX;
	s->ts_at = s->overrun_at = UINT64_MAX;
	for (int i = 0; i < 4; i++)
		s->mark_at[i] = UINT64_MAX;
	s->data = malloc((size_t)S * NY * NX * K * sizeof(uint16_t));
	assert_non_null(s->data);
	for (size_t i = 0; i < (size_t)S * NY * NX * K; i++)
		s->data[i] = (uint16_t)(30000 + (i * 7919u) % 4000u + (i % K) * 13u);
}

static void script_release(struct script *s)
{
	pthread_mutex_lock(&s->mu);
	s->released = true;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

/* When delivered == at, fail the next n calls with rc. */
static void script_fail(struct script *s, uint64_t at, unsigned n, int rc)
{
	s->fail_at = at;
	s->fails = n;
	s->fail_rc = rc;
}

static void script_free(struct script *s)
{
	free(s->data);
	pthread_cond_destroy(&s->cv);
	pthread_mutex_destroy(&s->mu);
}

/* ---- a sink that keeps the volumes, and the events ----------------------------------------- */

struct memsink {
	pthread_mutex_t mu;
	size_t vox;
	uint8_t *buf;
	uint8_t *vols[MAX_VOLS];
	struct pl_volume meta[MAX_VOLS];
	unsigned n;
	uint64_t begin_fail_epoch, publish_fail_epoch;
	unsigned aborts, publish_sleep_ms;
	/* events */
	char names[256][32];
	enum pl_level levels[256];
	char texts[256][256];
	unsigned nev;
	bool bad_text; /* an event message that was not valid UTF-8 */
};

static int ms_begin(void *ctx, uint64_t epoch, struct be_output *out, char *err, size_t errlen)
{
	struct memsink *m = ctx;

	if (epoch == m->begin_fail_epoch)
		return vr_err(err, errlen, -ENOSPC, "memsink: no room for epoch %llu",
		              (unsigned long long)epoch);
	out->volume = m->buf;
	return 0;
}

static int ms_publish(void *ctx, const struct pl_volume *v, char *err, size_t errlen)
{
	struct memsink *m = ctx;

	if (m->publish_sleep_ms)
		usleep(m->publish_sleep_ms * 1000u);
	if (v->epoch == m->publish_fail_epoch)
		return vr_err(err, errlen, -EIO, "memsink: cannot publish epoch %llu",
		              (unsigned long long)v->epoch);
	pthread_mutex_lock(&m->mu);
	if (m->n < MAX_VOLS) {
		m->vols[m->n] = malloc(m->vox);
		assert_non_null(m->vols[m->n]);
		memcpy(m->vols[m->n], m->buf, m->vox);
		m->meta[m->n] = *v;
		m->n++;
	}
	pthread_mutex_unlock(&m->mu);
	return 0;
}

static void ms_abort(void *ctx)
{
	((struct memsink *)ctx)->aborts++;
}

static void ms_event(void *ctx, const struct pl_event *ev)
{
	struct memsink *m = ctx;

	pthread_mutex_lock(&m->mu);
	if (!vr_utf8_valid(ev->message, strlen(ev->message)))
		m->bad_text = true;
	if (ev->name && m->nev < 256) {
		m->levels[m->nev] = ev->level;
		snprintf(m->texts[m->nev], sizeof(m->texts[0]), "%s", ev->message);
		snprintf(m->names[m->nev++], sizeof(m->names[0]), "%s", ev->name);
	}
	pthread_mutex_unlock(&m->mu);
}

static unsigned ms_count(struct memsink *m, const char *name)
{
	unsigned n = 0;

	pthread_mutex_lock(&m->mu);
	for (unsigned i = 0; i < m->nev; i++)
		n += !strcmp(m->names[i], name);
	pthread_mutex_unlock(&m->mu);
	return n;
}

/* How many events name had at level. */
static unsigned ms_count_at(struct memsink *m, const char *name, enum pl_level level)
{
	unsigned n = 0;

	pthread_mutex_lock(&m->mu);
	for (unsigned i = 0; i < m->nev; i++)
		n += !strcmp(m->names[i], name) && m->levels[i] == level;
	pthread_mutex_unlock(&m->mu);
	return n;
}

/* Whether an event name said text. */
static bool ms_said(struct memsink *m, const char *name, const char *text)
{
	bool said = false;

	pthread_mutex_lock(&m->mu);
	for (unsigned i = 0; i < m->nev; i++)
		said |= !strcmp(m->names[i], name) && strstr(m->texts[i], text);
	pthread_mutex_unlock(&m->mu);
	return said;
}

static unsigned ms_volumes(struct memsink *m)
{
	unsigned n;

	pthread_mutex_lock(&m->mu);
	n = m->n;
	pthread_mutex_unlock(&m->mu);
	return n;
}

static void memsink_init(struct memsink *m, const struct vr_config *c)
{
	memset(m, 0, sizeof(*m));
	pthread_mutex_init(&m->mu, NULL);
	m->vox = cfg_out_voxels(c);
	m->buf = malloc(m->vox);
	assert_non_null(m->buf);
	m->begin_fail_epoch = m->publish_fail_epoch = UINT64_MAX;
}

static void memsink_free(struct memsink *m)
{
	for (unsigned i = 0; i < m->n; i++)
		free(m->vols[i]);
	free(m->buf);
	pthread_mutex_destroy(&m->mu);
}

static struct pl_sink memsink_sink(struct memsink *m)
{
	return (struct pl_sink){
	        .ctx = m, .begin = ms_begin, .publish = ms_publish, .abort = ms_abort};
}

/* ---- helpers ------------------------------------------------------------------------------- */

static void test_config(struct vr_config *c, enum cfg_source type)
{
	vrtest_cpu_config(c, K, CFG_SAMPLE_U16, NX, NY, 1);
	c->source.type = type;
	c->source.rate = 0;
	c->source.shim.timeout_ms = 200;
	c->geometry.stride[0] = c->geometry.stride[1] = 2;
	c->reconstruct.mode = CFG_RECON_NONCUMULATIVE;
	c->pipeline.ring_bscans = 4 * NY;
	c->pipeline.overflow = CFG_OVERFLOW_DROP_EPOCH;
}

/* One pipeline over the scripted source into a memsink. */
struct run {
	struct vr_config c;
	struct script s;
	struct memsink m;
	struct pl_options o; /* depth 1 until the test says otherwise */
	struct pl_pipeline *pl;
	struct pl_sink sink;
	char err[512];
};

/* The test configuration on source type, the script (zero-copy or not), the sink and the
 * options; the test adjusts any of them, then calls run_open. */
static void run_init(struct run *r, enum cfg_source type, bool zc)
{
	test_config(&r->c, type);
	script_init(&r->s, zc);
	memsink_init(&r->m, &r->c);
	r->o = (struct pl_options){.cfg = &r->c,
	                           .depth = 1,
	                           .zero_copy = -1,
	                           .on_event = ms_event,
	                           .event_ctx = &r->m,
	                           .source_open = sc_open,
	                           .source_close = sc_src_close,
	                           .source_ctx = &r->s,
	                           .on_freed = sc_freed,
	                           .freed_ctx = &r->s};
	r->pl = NULL;
	r->err[0] = '\0';
}

static void run_open(struct run *r)
{
	assert_int_equal(pl_open(&r->o, &r->pl, r->err, sizeof(r->err)), 0);
	r->sink = memsink_sink(&r->m);
}

/* pl_run over n epochs; its return code. */
static int run_epochs(struct run *r, unsigned n)
{
	return pl_run(r->pl, &r->sink, n, r->err, sizeof(r->err));
}

static void run_start(struct run *r)
{
	assert_int_equal(pl_start(r->pl, &r->sink, r->err, sizeof(r->err)), 0);
}

/* Closes the pipeline (if still open), checks that it gave every reference back, frees all. */
static void run_free(struct run *r)
{
	if (r->pl) {
		pl_close(r->pl);
		assert_true(r->s.freed); /* nothing abandoned: told at once, by pl_close */
	}
	r->pl = NULL;
	assert_int_equal(r->s.refs, 0);
	memsink_free(&r->m);
	script_free(&r->s);
	cfg_free(&r->c);
}

/* acquired == processed + in ring + the drops of acquired B-scans */
static void assert_identity(const struct pl_stats *st)
{
	uint64_t sum = st->c.processed + st->c.in_ring;

	for (int i = 0; i < PL_DROP_COUNT; i++)
		if (pl_drop_acquired(i))
			sum += st->c.drops[i];
	assert_int_equal(st->c.acquired, sum);
}

/* Stops r's pipeline (if started) and checks the drop identity with an empty ring. */
static void run_stop_and_check(struct run *r, struct pl_stats *st)
{
	pl_stop(r->pl);
	pl_stats(r->pl, st);
	assert_identity(st);
	assert_int_equal(st->c.in_ring, 0);
}

static void wait_volumes(struct memsink *m, unsigned n)
{
	for (int i = 0; i < 20000 && ms_volumes(m) < n; i++)
		usleep(1000);
	assert_true(ms_volumes(m) >= n);
}

static void wait_event(struct memsink *m, const char *name)
{
	while (ms_count(m, name) == 0)
		usleep(2000);
}

/* Volumes of epochs 0..n-1, run to completion (pl_run) at depth with the given path, in
 * ref->m; the pipeline is closed, run_free(ref) frees the rest. */
static void reference_run(int depth, bool zc, unsigned n, struct run *ref)
{
	run_init(ref, CFG_SOURCE_SYNTH, zc);
	ref->o.depth = depth;
	run_open(ref);
	assert_string_equal(pl_acquisition(ref->pl), zc ? "zero-copy" : "copy");
	assert_int_equal(pl_depth(ref->pl), depth);
	assert_int_equal(run_epochs(ref, n), 0);
	assert_int_equal(ref->m.n, n);
	for (unsigned i = 0; i < n; i++)
		assert_int_equal(ref->m.meta[i].epoch, i);
	pl_close(ref->pl);
	ref->pl = NULL;
	assert_int_equal(ref->s.refs, 0);
}

/* ---- the ring ------------------------------------------------------------------------------ */

static void test_ring_reserve_commit_claim_release(void **st)
{
	struct pl_ring r;
	(void)st;

	assert_int_equal(pl_ring_init(&r, 6), 0);
	assert_true(pl_ring_reserve(&r, 3));
	assert_false(pl_ring_reserve(&r, 4)); /* 3 + 4 > 6: nothing more reserved */
	assert_int_equal(r.used, 3);
	for (int i = 0; i < 2; i++) {
		struct pl_entry *e = pl_ring_next(&r);

		assert_non_null(e);
		e->bscan = (uint32_t)i;
		pl_ring_commit(&r);
	}
	assert_int_equal(pl_ring_avail(&r), 2);
	pl_ring_claim(&r, 1);
	assert_int_equal(pl_ring_avail(&r), 1);
	/* a cut: the unfilled entry goes back, the unclaimed committed one is retracted */
	assert_int_equal(pl_ring_unreserve(&r), 1);
	assert_int_equal(pl_ring_retract(&r, 2), 1);
	assert_int_equal(r.ready, 1);
	assert_int_equal(r.used, 1);
	pl_ring_release(&r, 1);
	assert_int_equal(r.claimed + r.ready + r.used, 0);
	assert_int_equal(r.tail, 1);
	/* wrapping around */
	assert_true(pl_ring_reserve(&r, 6));
	for (int i = 0; i < 6; i++) {
		pl_ring_next(&r)->bscan = (uint32_t)(10 + i);
		pl_ring_commit(&r);
	}
	assert_null(pl_ring_next(&r));
	assert_int_equal(pl_ring_at(&r, 5)->bscan, 15);
	assert_ptr_equal(pl_ring_at(&r, 5), &r.e[0]);
	pl_ring_claim(&r, 6);
	pl_ring_release(&r, 6);
	assert_int_equal(r.used, 0);
	pl_ring_free(&r);
}

/* ---- output ---------------------------------------------------------------------------------- */

static void test_depth_1_and_2_copy_and_zero_copy_give_identical_volumes(void **st)
{
	struct run ref, r;
	const unsigned n = 10;
	(void)st;

	reference_run(1, false, n, &ref);
	for (int depth = 1; depth <= 2; depth++)
		for (int zc = 0; zc <= 1; zc++) {
			if (depth == 1 && !zc)
				continue;
			reference_run(depth, zc, n, &r);
			for (unsigned i = 0; i < n; i++) {
				assert_memory_equal(r.m.vols[i], ref.m.vols[i], ref.m.vox);
				assert_int_equal(r.m.meta[i].ox, ref.m.meta[i].ox);
				assert_int_equal(r.m.meta[i].oy, ref.m.meta[i].oy);
			}
			run_free(&r);
		}
	/* and the volumes are not all alike (the comparison means something) */
	assert_memory_not_equal(ref.m.vols[0], ref.m.vols[1], ref.m.vox);
	run_free(&ref);
}

/* ---- drops ------------------------------------------------------------------------------------ */

static void drops_run(enum cfg_source type, int depth, struct pl_stats *st)
{
	struct run r;

	run_init(&r, type, depth == 2);
	r.c.pipeline.ring_bscans = 2 * NY;
	r.m.publish_sleep_ms = 20; /* processing much slower than the unpaced source */
	r.o.depth = depth;
	run_open(&r);
	run_start(&r);
	wait_volumes(&r.m, 6);
	pl_stats(r.pl, st);
	assert_identity(st);
	run_stop_and_check(&r, st);
	assert_int_equal(st->c.processed, (uint64_t)r.m.n * NY);
	run_free(&r);
}

static void test_a_hardware_source_faster_than_processing_drops_exactly(void **unused)
{
	struct pl_stats st;
	(void)unused;

	for (int depth = 1; depth <= 2; depth++) {
		drops_run(CFG_SOURCE_SHIM, depth, &st);
		assert_true(st.c.drops[PL_DROP_RING_FULL] > 0);
		assert_int_equal(
		        st.c.drops[PL_DROP_SOURCE_ERROR] + st.c.drops[PL_DROP_SOURCE_TIMEOUT], 0);
	}
}

static void test_unpaced_synth_and_replay_wait_instead_of_dropping(void **unused)
{
	struct pl_stats st;
	(void)unused;

	/* source.rate 0 with overflow drop_epoch: "as fast as processing takes them" */
	drops_run(CFG_SOURCE_SYNTH, 1, &st);
	assert_int_equal(st.c.drops[PL_DROP_RING_FULL], 0);
	drops_run(CFG_SOURCE_REPLAY, 2, &st);
	assert_int_equal(st.c.drops[PL_DROP_RING_FULL], 0);
}

/* ---- faults ----------------------------------------------------------------------------------- */

/* A paced hardware source, started at depth; setup (if any) adjusts the run before it opens. */
static void live_start(struct run *r, int depth, bool zc, void (*setup)(struct run *))
{
	run_init(r, CFG_SOURCE_SHIM, zc);
	r->s.pace_us = 500;
	if (setup)
		setup(r);
	r->o.depth = depth;
	run_open(r);
	run_start(r);
}

static void live_finish(struct run *r, struct pl_stats *st)
{
	run_stop_and_check(r, st);
	run_free(r);
}

/* Every published volume of epochs [from, to) equals the reference volume of its epoch. */
static void assert_volumes_match(struct memsink *m, struct memsink *ref, uint64_t from, uint64_t to)
{
	for (unsigned i = 0; i < m->n; i++) {
		uint64_t e = m->meta[i].epoch;

		if (e < from || e >= to || e >= ref->n)
			continue;
		assert_memory_equal(m->vols[i], ref->vols[e], ref->vox);
	}
}

/* Whether every epoch of the 2S - 1 before e was published in m (a volume whose history has a
 * gap differs from the reference). m->mu held or no volume coming. */
static bool ms_history_whole(struct memsink *m, uint64_t e)
{
	for (uint64_t k = e > 2 * S - 1 ? e - (2 * S - 1) : 0; k < e; k++) {
		bool found = false;

		for (unsigned i = 0; i < m->n && !found; i++)
			found = m->meta[i].epoch == k;
		if (!found)
			return false;
	}
	return true;
}

/* How many volumes of epochs [from, to) m holds whose history is whole */
static unsigned ms_whole_after(struct memsink *m, uint64_t from, uint64_t to)
{
	unsigned n = 0;

	pthread_mutex_lock(&m->mu);
	for (unsigned i = 0; i < m->n; i++)
		if (m->meta[i].epoch >= from && m->meta[i].epoch < to &&
		    ms_history_whole(m, m->meta[i].epoch))
			n++;
	pthread_mutex_unlock(&m->mu);
	return n;
}

/* Like assert_volumes_match, for the volumes whose history is whole only; returns how many
 * were compared. */
static unsigned assert_whole_volumes_match(struct memsink *m, struct memsink *ref, uint64_t from,
                                           uint64_t to)
{
	unsigned n = 0;

	for (unsigned i = 0; i < m->n; i++) {
		uint64_t e = m->meta[i].epoch;

		if (e < from || e >= to || e >= ref->n || !ms_history_whole(m, e))
			continue;
		assert_memory_equal(m->vols[i], ref->vols[e], ref->vox);
		n++;
	}
	return n;
}

static void errors_mid_epoch(struct run *r)
{
	script_fail(&r->s, 3 * NY + 1, 3, -EIO); /* in the middle of epoch 3 */
}

static void test_source_errors_back_off_then_recover(void **unused)
{
	struct run r;
	struct pl_stats st;
	(void)unused;

	for (int depth = 1; depth <= 2; depth++) {
		live_start(&r, depth, depth == 2, errors_mid_epoch);
		wait_event(&r.m, "source_recovered");
		wait_volumes(&r.m, 8);
		pl_stats(r.pl, &st);
		assert_int_equal(st.c.drops[PL_DROP_SOURCE_ERROR], 3);
		assert_int_equal(st.c.source_faults, 3);
		assert_false(st.degraded);
		assert_true(st.c.drops[PL_DROP_INCOMPLETE_EPOCH] > 0);
		/* one announced fault for the series, one recovery */
		assert_int_equal(ms_count(&r.m, "source_fault"), 3);
		assert_int_equal(ms_count(&r.m, "source_recovered"), 1);
		/* epochs 3..5 were cut; the ones published are in order and complete */
		pl_stop(r.pl); /* no volume comes while they are read */
		for (unsigned i = 1; i < r.m.n; i++)
			assert_true(r.m.meta[i].epoch > r.m.meta[i - 1].epoch);
		for (unsigned i = 0; i < r.m.n; i++)
			assert_true(r.m.meta[i].epoch < 3 || r.m.meta[i].epoch > 5);
		live_finish(&r, &st);
	}
}

static void errors_reopen(struct run *r)
{
	script_fail(&r->s, 2 * NY, 5, -ETIMEDOUT);
}

static void test_five_faults_in_a_row_reopen_the_source(void **unused)
{
	struct run r;
	struct pl_stats st;
	(void)unused;

	live_start(&r, 1, false, errors_reopen);
	wait_event(&r.m, "source_recovered");
	pl_stats(r.pl, &st);
	assert_int_equal(st.c.drops[PL_DROP_SOURCE_TIMEOUT], 5);
	assert_int_equal(st.c.source_reopens, 1);
	assert_int_equal(r.s.opens, 2);
	assert_int_equal(r.s.closes, 1);
	live_finish(&r, &st);
}

static void renumber(struct run *r)
{
	r->s.renumber_at = 2 * NY + 1; /* epoch 2, B-scan 1 says it is B-scan 2 */
	/* no epoch dropped to a full ring on a slow machine: the history has no gap but the
	 * fault's */
	r->o.block = true;
}

static void test_a_misnumbered_bscan_cuts_its_epoch_and_is_a_fault(void **unused)
{
	struct run ref, r;
	struct pl_stats st;
	(void)unused;

	reference_run(1, false, MAX_VOLS, &ref);
	for (int depth = 1; depth <= 2; depth++) {
		live_start(&r, depth, depth == 2, renumber);
		wait_event(&r.m, "source_recovered");
		wait_volumes(&r.m, 10);
		/* a volume after the fault whose history is whole again */
		for (int i = 0; i < 20000 && ms_whole_after(&r.m, 2 + 2 * S, MAX_VOLS) == 0; i++)
			usleep(1000);
		pl_stats(r.pl, &st);
		assert_int_equal(st.c.source_faults, 1);
		assert_true(st.c.drops[PL_DROP_INCOMPLETE_EPOCH] >= 2);
		pl_stop(r.pl); /* no volume comes while they are read */
		for (unsigned i = 0; i < r.m.n; i++)
			assert_int_not_equal(r.m.meta[i].epoch, 2);
		/* before the fault the volumes equal the reference; once the history holds no
		 * gap any more, too */
		assert_whole_volumes_match(&r.m, &ref.m, 0, 2);
		assert_true(assert_whole_volumes_match(&r.m, &ref.m, 2 + 2 * S, UINT64_MAX) > 0);
		live_finish(&r, &st);
	}
	run_free(&ref);
}

static void test_offline_the_first_fault_ends_the_run_with_its_message(void **unused)
{
	struct run r;
	(void)unused;

	run_init(&r, CFG_SOURCE_REPLAY, false);
	r.s.renumber_at = NY + 2;
	r.o.stop_on_fault = true;
	r.o.block = true;
	run_open(&r);
	assert_int_equal(run_epochs(&r, 10), -EPROTO);
	assert_non_null(strstr(r.err, "delivered epoch 1 B-scan 3 where epoch 1 B-scan 2 was due"));
	assert_int_equal(r.m.n, 1);
	assert_int_equal(ms_count(&r.m, "source_fault"), 0); /* returned, not announced */
	run_free(&r);
}

static void test_a_failing_set_scan_offset_before_start_is_named(void **unused)
{
	struct run r;
	(void)unused;

	run_init(&r, CFG_SOURCE_REPLAY, false);
	r.s.offset_fails = 1; /* the first call, before start() */
	r.o.stop_on_fault = true;
	run_open(&r);
	assert_int_equal(run_epochs(&r, 3), -EIO);
	assert_non_null(strstr(r.err, "script: set_scan_offset: Input/output error"));
	assert_false(r.s.started);
	run_free(&r);
}

/* ---- B-scans the source marks lost or incomplete ---------------------------------------------- */

/* Opens r (its script's marks set up by the caller) as a hardware source that never waits
 * for room (block), with stop_on_fault too: a mark must not end the run. */
static void marks_open(struct run *r, int depth)
{
	r->o.depth = depth;
	r->o.src_flags = SRC_DROP_MARKS;
	r->o.block = true;
	r->o.stop_on_fault = true;
	run_open(r);
}

static void test_marked_bscans_drop_their_epoch_without_a_fault(void **unused)
{
	const unsigned n = 5 + 2 * S + 3;
	struct run ref;
	(void)unused;

	reference_run(1, false, n, &ref);
	for (int depth = 1; depth <= 2; depth++)
		for (int zc = 0; zc <= 1; zc++) {
			struct run r;
			struct pl_stats st;

			run_init(&r, CFG_SOURCE_SHIM, zc);
			r.s.mark_at[0] = 3 * NY + 1; /* epoch 3, B-scan 1: after B-scan 0 came */
			r.s.mark_flags[0] = VOLREC_SHIM_META_LOST;
			r.s.mark_at[1] = 5 * NY; /* epoch 5, B-scan 0 */
			r.s.mark_flags[1] = VOLREC_SHIM_META_INCOMPLETE;
			marks_open(&r, depth);
			assert_int_equal(run_epochs(&r, n), 0);
			run_stop_and_check(&r, &st);
			/* each mark is counted once by its cause, never as acquired */
			assert_int_equal(st.c.drops[PL_DROP_SOURCE_LOST], 1);
			assert_int_equal(st.c.drops[PL_DROP_SOURCE_INCOMPLETE], 1);
			assert_int_equal(st.c.acquired + 2, r.s.delivered);
			assert_int_equal(r.s.delivered, (uint64_t)n * NY);
			/* the other B-scans of both epochs: acquired, dropped as incomplete_epoch
			 * (epoch 3: B-scans 0 and 2, epoch 5: 1 and 2) */
			assert_int_equal(st.c.drops[PL_DROP_INCOMPLETE_EPOCH], 4);
			assert_int_equal(st.c.drops[PL_DROP_RING_FULL], 0);
			assert_int_equal(st.c.processed, (uint64_t)(n - 2) * NY);
			/* not a fault: no back-off, no event, the run went on */
			assert_int_equal(st.c.source_faults, 0);
			assert_false(st.degraded);
			assert_int_equal(ms_count(&r.m, "source_fault"), 0);
			assert_int_equal(ms_count(&r.m, "source_recovered"), 0);
			assert_int_equal(r.m.n, n - 2);
			for (unsigned i = 0; i < r.m.n; i++)
				assert_true(r.m.meta[i].epoch != 3 && r.m.meta[i].epoch != 5);
			/* the volumes published before the gap and after the history is whole
			 * again equal the reference */
			assert_volumes_match(&r.m, &ref.m, 0, 3);
			assert_volumes_match(&r.m, &ref.m, 5 + 2 * S, UINT64_MAX);
			run_free(&r);
		}
	run_free(&ref);
}

/* geometry.repeats 2: an epoch is 2 NY raw B-scans. A repeat marked lost leaves its position's
 * repeat set incomplete, which drops the epoch like any missing B-scan: the lost repeat counted
 * by its cause, the epoch's other raw B-scans as incomplete_epoch. The repeats are identical,
 * so every other volume is the M = 1 reference's, bit for bit. */
static void test_an_incomplete_repeat_set_drops_its_epoch(void **unused)
{
	const unsigned n = 3 + 2 * S + 3, M = 2;
	struct run ref;
	(void)unused;

	reference_run(1, false, n, &ref);
	for (int depth = 1; depth <= 2; depth++)
		for (int zc = 0; zc <= 1; zc++) {
			struct run r;
			struct pl_stats st;

			run_init(&r, CFG_SOURCE_SHIM, zc);
			r.c.geometry.repeats = M;
			r.c.pipeline.ring_bscans = 4 * NY * M;
			r.s.reps = M;
			r.s.mark_at[0] = (3 * NY + 1) * M + 1; /* epoch 3, position 1, repeat 1 */
			r.s.mark_flags[0] = VOLREC_SHIM_META_LOST;
			marks_open(&r, depth);
			assert_int_equal(run_epochs(&r, n), 0);
			run_stop_and_check(&r, &st);
			assert_int_equal(r.s.delivered, (uint64_t)n * NY * M);
			assert_int_equal(st.c.drops[PL_DROP_SOURCE_LOST], 1);
			assert_int_equal(st.c.acquired + 1, r.s.delivered);
			assert_int_equal(st.c.drops[PL_DROP_INCOMPLETE_EPOCH], NY * M - 1);
			assert_int_equal(st.c.processed, (uint64_t)(n - 1) * NY * M);
			assert_int_equal(st.c.source_faults, 0);
			assert_int_equal(r.m.n, n - 1);
			for (unsigned i = 0; i < r.m.n; i++)
				assert_true(r.m.meta[i].epoch != 3);
			assert_volumes_match(&r.m, &ref.m, 0, 3);
			assert_volumes_match(&r.m, &ref.m, 3 + 2 * S, UINT64_MAX);
			run_free(&r);
		}
	run_free(&ref);
}

/* A repeat delivered where another was due (the source skipped one) cuts the epoch as a
 * misnumbered B-scan does, naming position and repeat. */
static void test_a_repeat_out_of_order_cuts_its_epoch(void **unused)
{
	const unsigned M = 2;
	struct run r;
	(void)unused;

	run_init(&r, CFG_SOURCE_SHIM, false);
	r.c.geometry.repeats = M;
	r.c.pipeline.ring_bscans = 4 * NY * M;
	r.s.reps = M;
	r.s.renumber_at = 2 * NY * M + 1; /* epoch 2, position 0, repeat 1 says position 1 */
	r.o.stop_on_fault = true;
	run_open(&r);
	assert_int_equal(run_epochs(&r, 4), -EPROTO);
	assert_non_null(strstr(r.err, "delivered epoch 2 B-scan 1 repeat 1 where epoch 2 "
	                              "B-scan 0 repeat 1 was due"));
	for (unsigned i = 0; i < r.m.n; i++)
		assert_true(r.m.meta[i].epoch < 2);
	run_free(&r);
}

/* Flags a source may not set: bits shim.h does not define (any driver), and the lost or
 * incomplete marks when they were not offered (volrec process). Each is a fault naming the
 * flags; the B-scan is not used, the run goes on. */
static void test_flags_the_source_may_not_set_are_faults(void **unused)
{
	(void)unused;
	for (int zc = 0; zc <= 1; zc++)
		for (int offered = 0; offered <= 1; offered++) {
			struct run r;
			struct pl_stats st;

			run_init(&r, CFG_SOURCE_SHIM, zc);
			r.s.pace_us = 500;
			r.s.mark_at[0] = 2 * NY + 1;
			r.s.mark_flags[0] = offered ? 0x80u : VOLREC_SHIM_META_LOST;
			r.o.src_flags = offered ? SRC_DROP_MARKS : 0;
			run_open(&r);
			run_start(&r);
			wait_event(&r.m, "source_recovered");
			wait_volumes(&r.m, 5);
			pl_stats(r.pl, &st);
			assert_int_equal(st.c.source_faults, 1);
			assert_int_equal(st.c.drops[PL_DROP_SOURCE_ERROR], 1);
			assert_int_equal(st.c.drops[PL_DROP_SOURCE_LOST], 0);
			assert_true(ms_said(
			        &r.m, "source_fault",
			        offered ? "meta.flags 0x80 has bits 0x80 that volrec does "
			                  "not know"
			                : "marked lost (meta.flags 0x2), but the marks were "
			                  "not offered"));
			pl_stop(r.pl); /* no volume comes while they are read */
			for (unsigned i = 0; i < r.m.n; i++)
				assert_true(r.m.meta[i].epoch != 2);
			live_finish(&r, &st);
		}
}

/* A source that writes past the buffer it was given (1 byte, or the whole guard): a fault
 * naming the byte, the B-scan not used, the neighbouring B-scans whole. */
static void test_a_write_past_the_buffer_is_a_fault(void **unused)
{
	const unsigned n = 5 + S;
	struct run ref;
	(void)unused;

	reference_run(1, false, n, &ref);
	for (unsigned over = 1; over <= 64; over += 63) {
		struct run r;
		struct pl_stats st;
		char want[96];

		run_init(&r, CFG_SOURCE_SHIM, false);
		r.s.overrun_at = 2 * NY + 1;
		r.s.overrun = over;
		r.o.block = true;
		run_open(&r);
		assert_int_equal(run_epochs(&r, n), 0);
		run_stop_and_check(&r, &st);
		assert_int_equal(st.c.source_faults, 1);
		assert_int_equal(st.c.drops[PL_DROP_SOURCE_ERROR], 1);
		snprintf(want, sizeof(want),
		         "acquire() wrote past the %u bytes of its buffer (byte %u", NX * K * 2,
		         NX * K * 2);
		assert_true(ms_said(&r.m, "source_fault", want));
		for (unsigned i = 0; i < r.m.n; i++)
			assert_true(r.m.meta[i].epoch != 2);
		assert_volumes_match(&r.m, &ref.m, 0, 2);
		assert_volumes_match(&r.m, &ref.m, 3 + S, UINT64_MAX);
		run_free(&r);
	}
	run_free(&ref);
}

/* A timestamp far from the clock (a device clock, microseconds) is not used: the clock is,
 * counted, and one warning for the series. */
static void test_timestamps_off_the_clock_are_replaced_and_counted(void **unused)
{
	const uint64_t bad[] = {1000, UINT64_MAX - 5};

	(void)unused;
	for (int i = 0; i < 2; i++) {
		struct run r;
		struct pl_stats st;
		uint64_t t0 = vr_real_ns();

		run_init(&r, CFG_SOURCE_SYNTH, i);
		r.s.ts_at = NY;
		r.s.ts_n = 2 * NY;
		r.s.ts_value = bad[i];
		run_open(&r);
		assert_int_equal(run_epochs(&r, 5), 0);
		run_stop_and_check(&r, &st);
		assert_int_equal(r.m.n, 5);
		assert_int_equal(st.c.bad_timestamps, 2 * NY);
		assert_int_equal(st.c.source_faults, 0);
		for (unsigned v = 0; v < r.m.n; v++) {
			assert_true(r.m.meta[v].t_first_ns >= t0);
			assert_true(r.m.meta[v].t_last_ns <= vr_real_ns());
		}
		assert_int_equal(ms_count_at(&r.m, "source_fault", PL_WARNING), 1);
		assert_int_equal(ms_count_at(&r.m, "source_fault", PL_DEBUG), 2 * NY - 1);
		assert_true(ms_said(&r.m, "source_fault", "the clock is used"));
		run_free(&r);
	}
}

static void test_data_lost_before_a_bscan_cuts_its_epoch_or_flags_its_volume(void **unused)
{
	const unsigned n = 10;
	(void)unused;

	for (int depth = 1; depth <= 2; depth++)
		for (int zc = 0; zc <= 1; zc++) {
			struct run r;
			struct pl_stats st;

			run_init(&r, CFG_SOURCE_SHIM, zc);
			r.s.mark_at[0] = 3 * NY + 1; /* epoch 3, B-scan 1: cut */
			r.s.mark_at[1] = 5 * NY;     /* epochs 5 and 6, B-scan 0: flagged */
			r.s.mark_at[2] = 6 * NY;
			for (int i = 0; i < 3; i++)
				r.s.mark_flags[i] = VOLREC_SHIM_META_DROPPED_BEFORE;
			marks_open(&r, depth);
			assert_int_equal(run_epochs(&r, n), 0);
			run_stop_and_check(&r, &st);
			assert_int_equal(st.c.source_gaps, 3);
			/* the marked B-scans are data: all acquired; epoch 3 dropped whole */
			assert_int_equal(st.c.acquired, r.s.delivered);
			assert_int_equal(st.c.drops[PL_DROP_INCOMPLETE_EPOCH], NY);
			assert_int_equal(st.c.processed, (uint64_t)(n - 1) * NY);
			assert_int_equal(st.c.source_faults, 0);
			assert_false(st.degraded);
			assert_int_equal(r.m.n, n - 1);
			for (unsigned i = 0; i < r.m.n; i++) {
				uint64_t e = r.m.meta[i].epoch;
				bool flagged = r.m.meta[i].flags & PL_VOLUME_DROPPED_BEFORE;

				assert_int_not_equal(e, 3);
				if (flagged != (e == 5 || e == 6))
					fail_msg("epoch %llu: DROPPED_BEFORE %d",
					         (unsigned long long)e, flagged);
			}
			/* two series (epoch 4 came whole in between): 3 and 5 warn, 6 is debug */
			assert_int_equal(ms_count_at(&r.m, "source_gap", PL_WARNING), 2);
			assert_int_equal(ms_count_at(&r.m, "source_gap", PL_DEBUG), 1);
			run_free(&r);
		}
}

static void test_a_marked_bscan_numbered_otherwise_than_due_is_still_a_fault(void **unused)
{
	struct run r;
	struct pl_stats st;
	(void)unused;

	run_init(&r, CFG_SOURCE_SHIM, false);
	r.s.mark_at[0] = r.s.renumber_at = NY + 1; /* epoch 1 B-scan 1, lost, says it is B-scan 2 */
	r.s.mark_flags[0] = VOLREC_SHIM_META_LOST;
	marks_open(&r, 1);
	assert_int_equal(run_epochs(&r, 4), -EPROTO);
	assert_non_null(strstr(r.err, "delivered epoch 1 B-scan 2 where epoch 1 B-scan 1 was due"));
	pl_stats(r.pl, &st);
	assert_identity(&st);
	assert_int_equal(st.c.drops[PL_DROP_SOURCE_LOST], 0);
	assert_int_equal(r.m.n, 1);
	run_free(&r);
}

static void test_release_ref_failures_are_counted_and_logged_once_per_series(void **unused)
{
	struct run r;
	struct pl_stats st;
	(void)unused;

	run_init(&r, CFG_SOURCE_SYNTH, true);
	r.s.release_fails = 2 * NY + 1; /* the first two epochs and one B-scan */
	run_open(&r);
	assert_string_equal(pl_acquisition(r.pl), "zero-copy");
	assert_int_equal(run_epochs(&r, 5), 0);
	run_stop_and_check(&r, &st);
	assert_int_equal(st.c.release_errors, 2 * NY + 1);
	/* not a fault: every epoch published, no back-off */
	assert_int_equal(st.c.epochs_published, 5);
	assert_int_equal(st.c.source_faults, 0);
	assert_false(st.degraded);
	assert_int_equal(ms_count_at(&r.m, "source_fault", PL_WARNING), 1);
	assert_int_equal(ms_count_at(&r.m, "source_fault", PL_DEBUG), 2 * NY);
	run_free(&r);
}

/* ---- sinks ------------------------------------------------------------------------------------ */

static void test_sink_failures_drop_the_epoch_as_processing_error(void **unused)
{
	struct run r;
	struct pl_stats st;
	(void)unused;

	for (int depth = 1; depth <= 2; depth++) {
		run_init(&r, CFG_SOURCE_SYNTH, false);
		r.m.begin_fail_epoch = 2;
		r.m.publish_fail_epoch = 4;
		r.o.depth = depth;
		run_open(&r);
		assert_int_equal(run_epochs(&r, 7), 0);
		pl_stats(r.pl, &st);
		assert_identity(&st);
		assert_int_equal(st.c.drops[PL_DROP_PROCESSING_ERROR], 2 * NY);
		assert_int_equal(st.c.epochs_published, 5);
		assert_int_equal(r.m.n, 5);
		assert_int_equal(ms_count(&r.m, "processing_error"), 2);
		assert_int_equal(r.m.aborts, 0); /* the backend never failed after begin */
		run_free(&r);
	}
}

/* ---- requests between epochs ------------------------------------------------------------------ */

static void test_live_update_and_history_reset_between_epochs(void **unused)
{
	struct run r;
	struct vr_config next;
	struct pl_stats st;
	uint64_t ticket = 0;
	char err[512] = "";
	int rc = 1;
	unsigned at;
	(void)unused;

	live_start(&r, 2, true, NULL);
	wait_volumes(&r.m, 2);
	/* live: a narrower dB range, applied before some next epoch */
	cfg_defaults(&next);
	assert_int_equal(cfg_copy(&next, &r.c), 0);
	next.preprocess.db_range[0] = 0;
	next.preprocess.db_range[1] = 40;
	assert_int_equal(pl_request_live(r.pl, &next, 2, &ticket), 0);
	while (!pl_live_done(r.pl, ticket, &rc, err, sizeof(err)))
		usleep(1000);
	assert_int_equal(rc, 0);
	cfg_free(&next);
	/* reset: event, and the next volume says so */
	at = ms_volumes(&r.m);
	pl_request_reset(r.pl);
	wait_event(&r.m, "history_reset");
	wait_volumes(&r.m, at + 3);
	pthread_mutex_lock(&r.m.mu);
	{
		unsigned flagged = 0, first = 0;

		for (unsigned i = at; i < r.m.n; i++)
			if (r.m.meta[i].flags & PL_VOLUME_RESET) {
				if (!flagged++)
					first = i;
			}
		assert_int_equal(flagged, 1);
		assert_true(first >= at);
	}
	pthread_mutex_unlock(&r.m.mu);
	live_finish(&r, &st);
}

static void cut_after_submit(struct run *r)
{
	/* epoch 4: B-scans 0 and 1 come, processing (depth 2) submits them, then acquire fails */
	r->s.sleep_at = 4 * NY + 2;
	r->s.sleep_ms = 100;
	script_fail(&r->s, 4 * NY + 2, 1, -EIO);
}

static void test_depth_2_finishes_an_epoch_cut_after_submission_and_resets(void **unused)
{
	struct run r;
	struct pl_stats st;
	(void)unused;

	live_start(&r, 2, true, cut_after_submit);
	wait_event(&r.m, "source_recovered");
	wait_event(&r.m, "incomplete_epoch");
	wait_volumes(&r.m, 6);
	assert_int_equal(ms_count(&r.m, "history_reset"), 1);
	pthread_mutex_lock(&r.m.mu);
	{
		bool flagged = false;

		for (unsigned i = 0; i < r.m.n; i++)
			if (r.m.meta[i].epoch > 4 && (r.m.meta[i].flags & PL_VOLUME_RESET))
				flagged = true;
		assert_true(flagged);
	}
	pthread_mutex_unlock(&r.m.mu);
	pl_stats(r.pl, &st);
	assert_int_equal(st.c.drops[PL_DROP_INCOMPLETE_EPOCH] >= 2, true);
	live_finish(&r, &st);
}

/* ---- stopping, strings ------------------------------------------------------------------------ */

static void stall_soon(struct run *r)
{
	r->s.stall_at = 2 * NY + 1;
	r->c.source.shim.timeout_ms = 100;
}

static void wait_stalling(struct script *s)
{
	pthread_mutex_lock(&s->mu);
	while (!s->stalling)
		pthread_cond_wait(&s->cv, &s->mu);
	pthread_mutex_unlock(&s->mu);
}

static void test_a_call_past_its_timeout_is_a_fault_until_it_returns(void **unused)
{
	struct run r;
	struct pl_stats st;
	double t0;
	(void)unused;

	live_start(&r, 2, false, stall_soon);
	wait_stalling(&r.s);
	t0 = vr_mono_s();
	do {
		usleep(20000);
		pl_stats(r.pl, &st);
	} while (!st.degraded && vr_mono_s() - t0 < 5.0);
	/* reported once timeout 0.1 s + 1 s are over, as a fault naming the call */
	assert_true(st.degraded);
	assert_true(vr_mono_s() - t0 >= 1.0);
	assert_int_equal(st.c.source_faults, 1);
	assert_non_null(strstr(st.fault, "source script: acquire() has not returned"));
	assert_true(ms_said(&r.m, "source_fault", "acquire() has not returned"));
	/* once per call */
	usleep(50000);
	pl_stats(r.pl, &st);
	assert_int_equal(st.c.source_faults, 1);
	assert_int_equal(ms_count(&r.m, "source_fault"), 1);
	/* the call returns with data: the source is back once a whole epoch came */
	script_release(&r.s);
	wait_event(&r.m, "source_recovered");
	pl_stats(r.pl, &st);
	assert_false(st.degraded);
	assert_int_equal(st.c.source_faults, 1);
	live_finish(&r, &st);
}

static void stall_set_scan_offset(struct run *r)
{
	r->s.stall_epoch = 2;
	r->c.source.shim.timeout_ms = 100;
}

/* Let a stalled source call return and wait until the pipeline, freed by the thread left in
 * that call, says it lets go of the script (after the source's close). */
static void release_until_freed(struct script *s)
{
	script_release(s);
	pthread_mutex_lock(&s->mu);
	while (!s->freed)
		pthread_cond_wait(&s->cv, &s->mu);
	assert_int_equal(s->closes, 1);
	pthread_mutex_unlock(&s->mu);
}

/* Close a pipeline whose acquisition thread was abandoned in a stalled source call, let the
 * source return, and free the run once that thread closed the source. */
static void abandoned_free(struct run *r)
{
	pl_close(r->pl);
	r->pl = NULL;
	release_until_freed(&r->s);
	run_free(r);
}

static void test_stop_names_the_call_it_gives_up_on(void **unused)
{
	struct run r;
	(void)unused;

	live_start(&r, 1, false, stall_set_scan_offset);
	wait_stalling(&r.s);
	pl_stop(r.pl);
	assert_true(ms_said(&r.m, "source_abandoned", "has not returned from set_scan_offset()"));
	abandoned_free(&r);
}

static void test_stop_does_not_wait_for_a_hung_source(void **unused)
{
	struct run r;
	double t0, dt;
	(void)unused;

	live_start(&r, 2, false, stall_soon);
	pthread_mutex_lock(&r.s.mu);
	while (!r.s.stalling)
		pthread_cond_wait(&r.s.cv, &r.s.mu);
	pthread_mutex_unlock(&r.s.mu);
	t0 = vr_mono_s();
	pl_stop(r.pl);
	dt = vr_mono_s() - t0;
	assert_true(dt >= 1.0 && dt < 3.0); /* timeout 0.1 s + 1 s, not the stall */
	assert_int_equal(ms_count(&r.m, "source_abandoned"), 1);
	/* the source comes back later: the abandoned thread frees the pipeline then */
	abandoned_free(&r);
}

/* A zero-copy call abandoned by pl_close returns a B-scan the source then refuses to take
 * back: the engine counts nothing and tells nobody, since its driver is gone. */
static void test_an_abandoned_zero_copy_call_reports_nothing_after_close(void **unused)
{
	struct run r;
	unsigned nev;
	(void)unused;

	live_start(&r, 2, true, stall_soon);
	wait_stalling(&r.s);
	pl_close(r.pl);
	r.pl = NULL;
	assert_true(ms_said(&r.m, "source_abandoned", "has not returned from acquire_ref()"));
	pthread_mutex_lock(&r.s.mu);
	r.s.release_fails = 1000;
	pthread_mutex_unlock(&r.s.mu);
	pthread_mutex_lock(&r.m.mu);
	nev = r.m.nev;
	pthread_mutex_unlock(&r.m.mu);
	release_until_freed(&r.s);
	pthread_mutex_lock(&r.m.mu);
	assert_int_equal(r.m.nev, nev);
	pthread_mutex_unlock(&r.m.mu);
	run_free(&r);
}

static void stall_close(struct run *r)
{
	r->s.stall_close = true;
	r->c.source.shim.timeout_ms = 100;
}

/* A source whose stop()/close() never returns holds neither pl_stop (copy) nor pl_close
 * (zero-copy, closed after processing): both go on after timeout + 1 s, and the source is
 * closed for real, with nothing else touched, when it returns. */
static void test_close_does_not_wait_for_a_hung_source(void **unused)
{
	for (int zc = 0; zc <= 1; zc++) {
		struct run r;
		struct pl_stats st;
		double t0, dt;

		live_start(&r, 2, zc, stall_close);
		wait_volumes(&r.m, 2);
		t0 = vr_mono_s();
		run_stop_and_check(&r, &st);
		pl_close(r.pl);
		r.pl = NULL;
		dt = vr_mono_s() - t0;
		assert_true(dt >= 1.0 && dt < 3.0); /* timeout 0.1 s + 1 s, not the stall */
		assert_int_equal(ms_count(&r.m, "source_abandoned"), 1);
		assert_true(
		        ms_said(&r.m, "source_abandoned", "has not returned from stop()/close()"));
		pthread_mutex_lock(&r.s.mu);
		assert_true(r.s.stalling && r.s.closes == 0);
		pthread_mutex_unlock(&r.s.mu);
		release_until_freed(&r.s);
		assert_int_equal(ms_count(&r.m, "source_abandoned"), 1);
		run_free(&r);
	}
}

static void bad_strings(struct run *r)
{
	r->s.bad_utf8 = true;
	script_fail(&r->s, NY, 1, -EIO);
}

static void test_source_strings_reach_stats_and_events_as_utf8(void **unused)
{
	struct run r;
	struct volrec_shim_info info;
	struct pl_stats st;
	(void)unused;

	live_start(&r, 1, false, bad_strings);
	pl_source_info(r.pl, &info);
	assert_true(vr_utf8_valid(info.name, strlen(info.name)));
	assert_true(vr_utf8_valid(info.device, strlen(info.device)));
	assert_non_null(strstr(info.name, "scr"));
	wait_event(&r.m, "source_recovered");
	assert_false(r.m.bad_text);
	live_finish(&r, &st);
}

VR_TEST_GROUP(pipeline)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_ring_reserve_commit_claim_release),
	        cmocka_unit_test(test_depth_1_and_2_copy_and_zero_copy_give_identical_volumes),
	        cmocka_unit_test(test_a_hardware_source_faster_than_processing_drops_exactly),
	        cmocka_unit_test(test_unpaced_synth_and_replay_wait_instead_of_dropping),
	        cmocka_unit_test(test_source_errors_back_off_then_recover),
	        cmocka_unit_test(test_five_faults_in_a_row_reopen_the_source),
	        cmocka_unit_test(test_a_misnumbered_bscan_cuts_its_epoch_and_is_a_fault),
	        cmocka_unit_test(test_offline_the_first_fault_ends_the_run_with_its_message),
	        cmocka_unit_test(test_a_failing_set_scan_offset_before_start_is_named),
	        cmocka_unit_test(test_marked_bscans_drop_their_epoch_without_a_fault),
	        cmocka_unit_test(test_an_incomplete_repeat_set_drops_its_epoch),
	        cmocka_unit_test(test_a_repeat_out_of_order_cuts_its_epoch),
	        cmocka_unit_test(test_data_lost_before_a_bscan_cuts_its_epoch_or_flags_its_volume),
	        cmocka_unit_test(test_flags_the_source_may_not_set_are_faults),
	        cmocka_unit_test(test_a_write_past_the_buffer_is_a_fault),
	        cmocka_unit_test(test_timestamps_off_the_clock_are_replaced_and_counted),
	        cmocka_unit_test(test_a_marked_bscan_numbered_otherwise_than_due_is_still_a_fault),
	        cmocka_unit_test(test_release_ref_failures_are_counted_and_logged_once_per_series),
	        cmocka_unit_test(test_sink_failures_drop_the_epoch_as_processing_error),
	        cmocka_unit_test(test_live_update_and_history_reset_between_epochs),
	        cmocka_unit_test(test_depth_2_finishes_an_epoch_cut_after_submission_and_resets),
	        cmocka_unit_test(test_stop_does_not_wait_for_a_hung_source),
	        cmocka_unit_test(test_an_abandoned_zero_copy_call_reports_nothing_after_close),
	        cmocka_unit_test(test_a_call_past_its_timeout_is_a_fault_until_it_returns),
	        cmocka_unit_test(test_stop_names_the_call_it_gives_up_on),
	        cmocka_unit_test(test_close_does_not_wait_for_a_hung_source),
	        cmocka_unit_test(test_source_strings_reach_stats_and_events_as_utf8),
	};

	return cmocka_run_group_tests_name("pipeline", tests, NULL, NULL);
}
