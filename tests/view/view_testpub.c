/* SPDX-License-Identifier: MIT */
/*
 * A stand-in for volrecd in the web viewer's tests and benchmark, for as long as volrecd does
 * not publish views itself: publishes synthetic u8 volumes (a tilted, layered "retina" that
 * moves from volume to volume, with deterministic speckle) with their views computed by the CPU
 * backend's own code (cpu_views_compute, be_views_describe), a status message like volrecd's,
 * and a control socket answered by volrecd's own request handling (daemon/vrd_ctl.c) over a
 * configuration validated by config/ — so a set is checked exactly as the daemon checks it and
 * shows in the next volume's views. Each applied set is printed ("set KEY=VALUE ...").
 *
 *   view_testpub -i INSTANCE -r RUN_DIR [-g YxXxZ] [-R HZ] [-n COUNT] [-e RENDER_EVERY]
 *                [-s RENDER_SIDE]
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <zmq.h>

#include "backend/views.h"
#include "config/config.h"
#include "cpu/internal.h"
#include "daemon/vrd_ctl.h"
#include "ipc/ipc.h"

static volatile sig_atomic_t stop;

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

struct pub {
	struct vr_config cfg;
	struct be_view_params p;
	struct be_render_setup rs;
	struct ipc_writer *w;
	double rate;
	uint64_t published, sets;
	double lat_ms[64]; /* acquisition -> publish of the last volumes */
	unsigned nlat;
};

static uint64_t real_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void params_update(struct pub *s)
{
	be_view_params_from_cfg(&s->cfg, &s->p);
	be_render_setup(&s->p, &s->rs);
}

/* ---- control: volrecd's request handling over this configuration ---------------------------- */

static const struct vr_config *c_config(void *ctx)
{
	return &((struct pub *)ctx)->cfg;
}

static int c_apply(void *ctx, const struct vr_config *next, const char *const *paths, size_t n,
                   const struct vrd_ctl_peer *peer, char *err, size_t errlen)
{
	struct pub *s = ctx;
	struct vr_config tmp;
	struct be_view_params p;
	char value[1024];

	(void)peer;
	memset(&tmp, 0, sizeof(tmp));
	if (cfg_copy(&tmp, next) < 0)
		return -ENOMEM;
	be_view_params_from_cfg(&tmp, &p);
	if (be_view_check(&p, err, errlen)) {
		cfg_free(&tmp);
		return -EINVAL;
	}
	cfg_free(&s->cfg);
	s->cfg = tmp;
	params_update(s);
	s->sets++;
	printf("set");
	for (size_t i = 0; i < n; i++) {
		if (cfg_get_key(&s->cfg, paths[i], value, sizeof(value)))
			snprintf(value, sizeof(value), "?");
		printf(" %s=%s", paths[i], value);
	}
	printf("\n");
	fflush(stdout);
	return 0;
}

static int c_reset(void *ctx, const struct vrd_ctl_peer *peer, char *err, size_t errlen)
{
	(void)ctx, (void)peer, (void)err, (void)errlen;
	return 0;
}

static double pct(const double *v, unsigned n, double q)
{
	double s[64];

	if (!n)
		return 0;
	memcpy(s, v, n * sizeof(*s));
	for (unsigned i = 1; i < n; i++)
		for (unsigned j = i; j > 0 && s[j - 1] > s[j]; j--) {
			double t = s[j];
			s[j] = s[j - 1];
			s[j - 1] = t;
		}
	return s[(unsigned)(q * (n - 1) + 0.5)];
}

/* The fields of volrecd's status message that viewers show. */
static struct json_object *c_status(void *ctx)
{
	struct pub *s = ctx;
	struct json_object *o = json_object_new_object(), *r = json_object_new_object(),
	                   *l = json_object_new_object(), *a = json_object_new_object(),
	                   *d = json_object_new_object();
	unsigned n = s->nlat < 64 ? s->nlat : 64;

	json_object_object_add(o, "state", json_object_new_string("running"));
	json_object_object_add(o, "instance", json_object_new_string(s->cfg.instance));
	json_object_object_add(r, "ascans_per_s",
	                       json_object_new_double(s->rate * s->p.Y * s->p.X));
	json_object_object_add(r, "volumes_per_s", json_object_new_double(s->rate));
	json_object_object_add(o, "rates", r);
	json_object_object_add(a, "p50", json_object_new_double(pct(s->lat_ms, n, 0.5)));
	json_object_object_add(a, "p99", json_object_new_double(pct(s->lat_ms, n, 0.99)));
	json_object_object_add(l, "acquire_to_publish", a);
	json_object_object_add(o, "latency_ms", l);
	json_object_object_add(d, "total", json_object_new_int64(0));
	json_object_object_add(o, "drops", d);
	json_object_object_add(o, "readers", json_object_new_int(ipc_writer_readers(s->w)));
	json_object_object_add(o, "volumes_published",
	                       json_object_new_int64((int64_t)s->published));
	json_object_object_add(o, "sets", json_object_new_int64((int64_t)s->sets));
	return o;
}

/* ---- the volume ------------------------------------------------------------------------------ */

static uint32_t hash3(uint32_t a, uint32_t b, uint32_t c)
{
	uint32_t h = a * 0x9E3779B1u ^ b * 0x85EBCA77u ^ c * 0xC2B2AE3Du;

	h ^= h >> 15;
	h *= 0x2C1B3C6Du;
	h ^= h >> 12;
	return h;
}

/* Layers under a surface that tilts and waves, moving with the volume id: a depth profile
 * tabulated once per volume, shadows under two vessels, and speckle from a hash. */
static void fill_volume(uint8_t *V, uint32_t Y, uint32_t X, uint32_t Z, uint64_t id)
{
	const double t = (double)(id % 1000) / 1000.0;
	float *prof = malloc(sizeof(*prof) * Z);

	if (!prof)
		return;
	for (uint32_t d = 0; d < Z; d++)
		prof[d] = d < 3 ? 230.0f
		                : (float)(40 + 140 * exp(-(double)d / (0.25 * Z)) *
		                                       (0.6 + 0.4 * cos(d * 0.5)));
	for (uint32_t y = 0; y < Y; y++)
		for (uint32_t x = 0; x < X; x++) {
			uint8_t *a = V + ((size_t)y * X + x) * Z;
			double s = Z * (0.3 + 0.08 * sin(2 * M_PI * ((double)x / X + t)) +
			                0.05 * cos(2 * M_PI * (double)y / Y) + 0.1 * (double)y / Y);
			double pit = hypot((double)x - X / 2.0, (double)y - Y / 2.0) / (0.15 * X);
			/* two vessels: a shadow under them (what an en-face shows) */
			bool vessel = fabs(y - Y * (0.3 + 0.12 * sin(6.0 * x / X + 2 * M_PI * t))) <
			                      1.6 ||
			              fabs(x - X * (0.65 + 0.1 * cos(5.0 * y / Y))) < 1.6;
			uint32_t top;

			if (pit < 1)
				s += 0.06 * Z * (1 + cos(M_PI * pit)) / 2;
			top = s < 0 ? 0 : s >= Z ? Z : (uint32_t)s;
			for (uint32_t z = 0; z < Z; z++) {
				uint32_t h = hash3(x, y, z + 7919u * (uint32_t)id);
				float v;

				if (z < top)
					v = (float)(8 + (h & 15));
				else
					v = prof[z - top] * (vessel && z - top >= 3 ? 0.3f : 1.0f) +
					    (float)(z - top < 3 ? 0 : (h & 31));
				a[z] = (uint8_t)(v > 255 ? 255 : v);
			}
		}
	free(prof);
}

static int publish_one(struct pub *s, uint64_t id, uint32_t every, uint8_t *last_render,
                       struct be_view_params *rp, uint64_t *render_vid)
{
	struct ipc_slot_ref slot;
	struct ipc_volume_meta meta = {.volume_id = id, .epoch = id, .flags = VOLREC_FLAG_VIEWS};
	uint64_t off[BE_VIEW_COUNT], vid[BE_VIEW_COUNT];
	uint8_t *area, *out[BE_VIEW_COUNT];
	bool render = every <= 1 || !*render_vid || id % every == 0;
	int rc;

	rc = ipc_writer_begin(s->w, &slot);
	if (rc)
		return rc;
	meta.t_first_ns = meta.t_last_ns = real_ns();
	fill_volume(slot.data, s->p.Y, s->p.X, s->p.Z, id);
	area = slot.views;
	be_views_offsets(s->p.Y, s->p.X, s->p.Z, off);
	for (int v = 0; v < BE_VIEW_COUNT; v++) {
		out[v] = area + off[v];
		vid[v] = id;
	}
	if (!render)
		out[BE_VIEW_RENDER] = NULL;
	cpu_views_compute(slot.data, &s->p, &s->rs, out);
	if (render) {
		memcpy(last_render, area + off[BE_VIEW_RENDER],
		       (size_t)s->p.render_h * s->p.render_w);
		*rp = s->p;
		*render_vid = id;
	} else {
		memcpy(area + off[BE_VIEW_RENDER], last_render,
		       (size_t)rp->render_h * rp->render_w);
	}
	vid[BE_VIEW_RENDER] = *render_vid;
	be_views_describe(area, &s->p, rp, vid, (1u << BE_VIEW_COUNT) - 1);
	rc = ipc_writer_publish(s->w, &slot, &meta);
	if (rc)
		return rc;
	s->lat_ms[s->nlat++ % 64] = (double)(real_ns() - meta.t_last_ns) / 1e6;
	s->published++;
	return 0;
}

static void usage(void)
{
	fprintf(stderr, "usage: view_testpub -i INSTANCE -r RUN_DIR [-g YxXxZ] [-R HZ] [-n COUNT] "
	                "[-e RENDER_EVERY] [-s RENDER_SIDE]\n");
}

int main(int argc, char **argv)
{
	const char *instance = NULL, *run_dir = NULL;
	uint32_t Y = 48, X = 64, Z = 96, every = 1, side = 96;
	unsigned long count = 0;
	double rate = 10;
	char yaml[4096], err[CFG_ERR_MAX], ep[4200];
	struct ipc_writer_options o = {0};
	struct vrd_ctl_ops ops;
	struct vrd_ctl *ctl = NULL;
	static struct pub s;
	struct be_view_params rp;
	uint8_t *last_render;
	uint64_t render_vid = 0;
	void *zctx;
	double next, last_status = 0;
	int opt, rc;

	while ((opt = getopt(argc, argv, "i:r:g:R:n:e:s:")) != -1) {
		switch (opt) {
		case 'i':
			instance = optarg;
			break;
		case 'r':
			run_dir = optarg;
			break;
		case 'g':
			if (sscanf(optarg, "%ux%ux%u", &Y, &X, &Z) != 3) {
				usage();
				return 2;
			}
			break;
		case 'R':
			rate = strtod(optarg, NULL);
			break;
		case 'n':
			count = strtoul(optarg, NULL, 10);
			break;
		case 'e':
			every = (uint32_t)strtoul(optarg, NULL, 10);
			break;
		case 's':
			side = (uint32_t)strtoul(optarg, NULL, 10);
			break;
		default:
			usage();
			return 2;
		}
	}
	if (!instance || !run_dir || rate <= 0) {
		usage();
		return 2;
	}
	snprintf(yaml, sizeof(yaml),
	         "instance: %s\nbackend: cpu\nsource: {type: synth, rate: %g}\n"
	         "geometry: {samples_per_ascan: %u, sample_type: u16, ascans_per_bscan: %u, "
	         "bscans_per_volume: %u, stride: [1, 1], depth_range: [0, %u]}\n"
	         "reconstruct: {mode: none}\noutput: {slots: 4}\n"
	         "ipc: {run_dir: '%s', status_interval_ms: 200}\n"
	         "view: {render: {size: [%u, %u], step: 1}}\n",
	         instance, rate, 2 * Z, X, Y, Z, run_dir, side, side);
	if (cfg_load_string(&s.cfg, yaml, "view_testpub", err, sizeof(err))) {
		fprintf(stderr, "view_testpub: %s\n", err);
		return 2;
	}
	params_update(&s);
	if (be_view_check(&s.p, err, sizeof(err))) {
		fprintf(stderr, "view_testpub: %s\n", err);
		return 2;
	}
	s.rate = rate;
	last_render = calloc((size_t)VOLREC_RENDER_MAX * VOLREC_RENDER_MAX, 1);
	signal(SIGTERM, on_term);
	signal(SIGINT, on_term);
	o.instance = instance;
	o.run_dir = run_dir;
	o.shape = (struct ipc_shape){.ny = Y, .nx = X, .nz = Z, .dtype = VOLREC_DTYPE_U8};
	o.slots = 4;
	o.max_readers = 64;
	o.hwm = 1000;
	o.views = true;
	rc = ipc_writer_open(&o, &s.w, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "view_testpub: %s\n", err);
		return 1;
	}
	zctx = zmq_ctx_new();
	ops = (struct vrd_ctl_ops){&s, c_config, c_apply, c_reset, c_status};
	snprintf(ep, sizeof(ep), "ipc://%s/%s.ctl", run_dir, instance);
	if (vrd_ctl_open(zctx, ep, &ops, &ctl, err, sizeof(err))) {
		fprintf(stderr, "view_testpub: %s\n", err);
		ipc_writer_close(s.w, true);
		return 1;
	}
	printf("ready %016" PRIx64 "\n", ipc_writer_session(s.w));
	fflush(stdout);
	next = mono_s();
	for (uint64_t id = 1; !stop && (!count || id <= count);) {
		double now = mono_s();
		struct pollfd pfd = {.fd = vrd_ctl_fd(ctl), .events = POLLIN};

		vrd_ctl_process(ctl);
		if (now >= next) {
			rc = publish_one(&s, id, every, last_render, &rp, &render_vid);
			if (rc && rc != -EBUSY) {
				fprintf(stderr, "view_testpub: publish: %s\n", strerror(-rc));
				break;
			}
			id++;
			next += 1.0 / rate;
			if (next < now - 1.0) /* far behind: do not catch up in a burst */
				next = now;
		}
		if (now - last_status >= 0.2) {
			struct json_object *st = c_status(&s);

			ipc_writer_send_status(
			        s.w, json_object_to_json_string_ext(st, JSON_C_TO_STRING_PLAIN));
			json_object_put(st);
			last_status = now;
		}
		now = mono_s();
		if (next > now)
			poll(&pfd, 1,
			     (int)((next - now) * 1000) + 1 > 50 ? 50
			                                         : (int)((next - now) * 1000) + 1);
	}
	while (!stop && count) { /* COUNT given: keep answering until told to stop */
		struct pollfd pfd = {.fd = vrd_ctl_fd(ctl), .events = POLLIN};

		vrd_ctl_process(ctl);
		poll(&pfd, 1, 50);
	}
	printf("published %" PRIu64 " sets %" PRIu64 "\n", s.published, s.sets);
	vrd_ctl_close(ctl);
	zmq_ctx_term(zctx);
	ipc_writer_close(s.w, true);
	cfg_free(&s.cfg);
	free(last_render);
	return 0;
}
