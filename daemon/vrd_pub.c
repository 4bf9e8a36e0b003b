/* SPDX-License-Identifier: MIT */
/*
 * volrecd's side of publishing: opens the ipc writer for the configured output shape,
 * registers its slots with the backend once (so CUDA's D2H lands straight in shared memory),
 * and is the pipeline's shared-memory sink: begin takes a slot (its volume and views area),
 * publish closes it and sends `vol` with the epochs dropped since the previous volume (the gap
 * in the pipeline's epoch numbers), abort gives it back. Begin also hands the backend a host
 * buffer for the median depths of each B-scan (background.mode partial_median), and publish
 * keeps the last volume's figures for the status.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/internal.h"

struct vrd_pub {
	struct ipc_writer *w;
	struct be_backend *be;
	void *const *slots; /* registered slot buffers */
	uint32_t nslots, nregistered;
	struct ipc_slot_ref cur; /* slot being filled */
	bool in_progress;
	bool views;                    /* slots carry views */
	_Atomic uint32_t render_every; /* set by the service thread (vrd_pub_update) */
	_Atomic bool render_reset;     /* likewise: new render settings, adapt afresh */
	uint32_t render_count;
	/* the render's cost control (processing thread; docs/configuration.md "Render cost") */
	uint32_t every_eff;       /* render every every_eff-th volume (>= render_every) */
	uint64_t last_begin_ns;   /* of the previous volume */
	double period_ns;         /* between two volumes, smoothed */
	bool render_asked;        /* for the volume being filled */
	bool render_part;         /* a render stopped at its hold: the next volume goes on */
	uint64_t render_total_ns; /* of the render in progress, over its parts */
	struct be_render_report rr;
	struct vrd_render_state render; /* guarded by lock */
	double voxel_um[3];             /* of every volume, 0 where unknown */
	uint32_t ny;                    /* B-scans per volume */
	uint32_t *md;                   /* [ny] median depths per B-scan, from be_host_alloc */
	uint32_t nch;                   /* output.channels: channels of each volume */
	/* what the channels' u8 values mean for the generations proposed last (guarded by lock):
	 * a volume carries its generation's (docs/protocol.md §2.7) */
	struct {
		uint32_t generation;
		struct volrec_channel_desc d[VOLREC_CHANNELS_MAX];
	} maps[VRD_PUB_MAPS];
	uint32_t nmaps;       /* proposed so far; the newest at (nmaps - 1) % VRD_PUB_MAPS */
	struct vrd_rec *rec;  /* the processed recorder, handed every volume published */
	pthread_mutex_t lock; /* guards last (written by the processing thread only) */
	struct vrd_median_depths last; /* of the last volume published */
};

_Static_assert(CFG_MAX_PUB <= IPC_MAX_PUB, "every configured endpoint fits the writer");
_Static_assert(CFG_CH_COUNT == VOLREC_CHANNELS_MAX, "a slot has room for every channel");
_Static_assert((int)CFG_CH_STRUCTURE == VOLREC_CHANNEL_STRUCTURE &&
                       (int)CFG_CH_ANGIO == VOLREC_CHANNEL_ANGIO &&
                       (int)CFG_CH_DOPPLER == VOLREC_CHANNEL_DOPPLER,
               "channel kinds on the wire are output.channels' names");

void vrd_channel_descs(const struct vr_config *cfg,
                       struct volrec_channel_desc d[VOLREC_CHANNELS_MAX])
{
	enum cfg_channel ch[CFG_CH_COUNT];
	uint32_t n = cfg_channels(cfg, ch);
	const double pi = 3.14159265358979323846;
	const double lambda = cfg->geometry.center_wavelength_nm;
	const double index = cfg->geometry.refractive_index > 0 ? cfg->geometry.refractive_index
	                                                        : 1.38; /* §5: the tissue's */
	const enum cfg_doppler_axis axis = cfg_doppler_axis(cfg);
	const double period = axis == CFG_DOPPLER_BSCAN ? cfg->geometry.bscan_period_us
	                                                : cfg->geometry.ascan_period_us;
	double r[2];

	memset(d, 0, sizeof(*d) * VOLREC_CHANNELS_MAX);
	for (uint32_t c = 0; c < n; c++) {
		struct volrec_channel_desc *o = &d[c];

		o->kind = (uint32_t)ch[c];
		switch (ch[c]) {
		case CFG_CH_STRUCTURE:
			o->value_lo = cfg->preprocess.db_range[0];
			o->value_hi = cfg->preprocess.db_range[1];
			snprintf((char *)o->units, sizeof(o->units), "dB");
			break;
		case CFG_CH_ANGIO:
			cfg_angio_range(cfg, r);
			o->method = cfg->functional.angio.method == CFG_ANGIO_SVAR
			                    ? VOLREC_ANGIO_SVAR
			                    : VOLREC_ANGIO_CDV;
			o->value_lo = r[0];
			o->value_hi = r[1];
			snprintf((char *)o->units, sizeof(o->units), "%s",
			         o->method == VOLREC_ANGIO_SVAR ? "dB^2" : "1");
			o->mask_db = cfg_mask_db(cfg);
			o->half_window = cfg->functional.axial_half_window;
			break;
		case CFG_CH_DOPPLER:
		default:
			/* stored v = (dphi + pi) / (2 pi), q = 255 v: dphi = 2 pi q / 255 - pi */
			o->method = axis == CFG_DOPPLER_BSCAN ? VOLREC_DOPPLER_BSCAN
			                                      : VOLREC_DOPPLER_ASCAN;
			o->value_lo = -pi;
			o->value_hi = pi;
			snprintf((char *)o->units, sizeof(o->units), "rad");
			o->period_us = period > 0 ? period : 0;
			if (lambda > 0 && period > 0) {
				/* v_z = lambda0 dphi / (4 pi n T): nm / us = mm / s */
				o->velocity_lo_mm_s = lambda * -pi / (4 * pi * index * period);
				o->velocity_hi_mm_s = lambda * pi / (4 * pi * index * period);
			}
			o->mask_db = cfg_mask_db(cfg);
			o->half_window = cfg->functional.axial_half_window;
			o->flags = cfg->functional.doppler.bulk ? VOLREC_CHANNEL_BULK : 0;
			o->center_wavelength_nm = lambda > 0 ? lambda : 0;
			o->refractive_index = index;
			break;
		}
	}
}

void vrd_pub_propose(struct vrd_pub *pub, const struct vr_config *cfg, uint32_t generation)
{
	struct volrec_channel_desc d[VOLREC_CHANNELS_MAX];
	uint32_t k;

	vrd_channel_descs(cfg, d);
	pthread_mutex_lock(&pub->lock);
	for (k = 0; k < pub->nmaps && k < VRD_PUB_MAPS; k++)
		if (pub->maps[k].generation == generation)
			break;
	if (k == pub->nmaps || k == VRD_PUB_MAPS)
		k = pub->nmaps++ % VRD_PUB_MAPS;
	pub->maps[k].generation = generation;
	memcpy(pub->maps[k].d, d, sizeof(d));
	pthread_mutex_unlock(&pub->lock);
}

/* The channels' meaning for a volume of generation into d: that generation's, else (a
 * generation never proposed: 0) the newest. */
static void pub_channel_map(struct vrd_pub *pub, uint32_t generation,
                            struct volrec_channel_desc d[VOLREC_CHANNELS_MAX])
{
	uint32_t newest, k;

	pthread_mutex_lock(&pub->lock);
	newest = (pub->nmaps + VRD_PUB_MAPS - 1) % VRD_PUB_MAPS;
	for (k = 0; k < pub->nmaps && k < VRD_PUB_MAPS; k++)
		if (pub->maps[k].generation == generation)
			break;
	if (k == pub->nmaps || k == VRD_PUB_MAPS)
		k = newest;
	memcpy(d, pub->maps[k].d, sizeof(pub->maps[k].d));
	pthread_mutex_unlock(&pub->lock);
}

/* Volume ids continue across structural reloads (the daemon's volume counter, docs/protocol.md). */
static _Atomic uint64_t next_volume_id = 1;

int vrd_pub_open(const struct vr_config *cfg, uint32_t generation, struct be_backend *be,
                 struct vrd_pub **out, char *err, size_t errlen)
{
	enum cfg_channel ch[CFG_CH_COUNT];
	struct vrd_pub *pub = calloc(1, sizeof(*pub));
	const char *eps[CFG_MAX_PUB];
	uint32_t dims[3];
	struct ipc_writer_options o = {
	        .instance = cfg->instance,
	        .run_dir = cfg->ipc.run_dir,
	        .slots = cfg->output.slots,
	        .max_readers = cfg->ipc.max_readers,
	        .hwm = cfg->ipc.hwm,
	        .pub = eps,
	        .npub = cfg->ipc.npub,
	        .curve_secret_key = cfg->ipc.curve_secret_key,
	        .curve_public_key = cfg->ipc.curve_public_key,
	        .views = be_views_wanted(cfg),
	        .max_connections = vrd_limits_pub_max(cfg->ipc.max_readers),
	};
	size_t size;
	int rc;

	if (!pub)
		return vr_err(err, errlen, -ENOMEM, "out of memory");
	pthread_mutex_init(&pub->lock, NULL);
	pub->be = be;
	pub->ny = cfg->geometry.bscans_per_volume;
	pub->nch = cfg_channels(cfg, ch);
	o.channels = pub->nch;
	vrd_pub_propose(pub, cfg, generation);
	o.channel = pub->maps[0].d;
	/* the pictures of the channels past the first, where the backend computes them */
	o.channel_views = o.views && pub->nch > 1 && (be_caps(be) & BE_CAP_CHANNEL_VIEWS);
	cfg_voxel_um(cfg, pub->voxel_um);
	pub->last.depths = cfg_fft_len(cfg) / 2;
	rc = be_host_alloc(be, pub->ny * sizeof(*pub->md), (void **)&pub->md);
	if (rc < 0) {
		vr_err(err, errlen, rc, "median depth counts: %s", be_last_error(be));
		goto fail;
	}
	for (uint32_t i = 0; i < cfg->ipc.npub && i < CFG_MAX_PUB; i++)
		eps[i] = cfg->ipc.pub[i];
	cfg_out_dims(cfg, dims);
	o.shape = (struct ipc_shape){
	        .ny = dims[0], .nx = dims[1], .nz = dims[2], .dtype = VOLREC_DTYPE_U8};
	pub->views = o.views;
	vrd_pub_update(pub, cfg);
	rc = ipc_writer_open(&o, &pub->w, err, errlen);
	if (rc < 0)
		goto fail;
	ipc_writer_slot_buffers(pub->w, &pub->slots, &pub->nslots, &size);
	for (uint32_t i = 0; i < pub->nslots; i++) {
		rc = be_host_register(be, pub->slots[i], size, 0);
		if (rc < 0) {
			vr_err(err, errlen, rc, "shm slot %u: %s", i, be_last_error(be));
			goto fail;
		}
		pub->nregistered++;
	}
	*out = pub;
	return 0;
fail:
	vrd_pub_close(pub, true);
	return rc;
}

void vrd_pub_close(struct vrd_pub *pub, bool unlink_shm)
{
	if (!pub)
		return;
	if (pub->in_progress)
		ipc_writer_abort(pub->w, &pub->cur);
	for (uint32_t i = 0; i < pub->nregistered; i++)
		be_host_unregister(pub->be, pub->slots[i]);
	ipc_writer_close(pub->w, unlink_shm);
	be_host_free(pub->be, pub->md);
	pthread_mutex_destroy(&pub->lock);
	free(pub);
}

/* A render may take this share of the volume period, amortized over the volumes it spans; one
 * render holds the processing thread at most RENDER_HOLD_MAX_NS (never less than
 * RENDER_HOLD_MIN_NS). */
#define RENDER_SHARE       0.5
#define RENDER_HOLD_MIN_NS 1000000000ull
#define RENDER_HOLD_MAX_NS 2000000000ull
#define RENDER_EVERY_MAX   100000u

/* Whether this volume gets a render; its deadline into pub->rr. Processing thread. */
static bool render_due(struct vrd_pub *pub)
{
	uint64_t now = vr_mono_ns(), hold;
	uint32_t every = atomic_load(&pub->render_every);

	if (pub->last_begin_ns) {
		double dt = (double)(now - pub->last_begin_ns);
		pub->period_ns = pub->period_ns > 0 ? 0.9 * pub->period_ns + 0.1 * dt : dt;
	}
	pub->last_begin_ns = now;
	if (atomic_exchange(&pub->render_reset, false) || pub->every_eff < every) {
		pub->every_eff = every;
		pub->render_part = false; /* the backend drops a render of old parameters */
		pub->render_total_ns = 0;
		pthread_mutex_lock(&pub->lock);
		pub->render.degraded = false;
		pub->render.overrun = false;
		pub->render.reason[0] = '\0';
		pthread_mutex_unlock(&pub->lock);
	}
	/* a render stopped at its hold goes on with the next volume */
	if (!pub->render_part && pub->render_count++ % pub->every_eff)
		return false;
	hold = (uint64_t)(RENDER_SHARE * pub->period_ns * pub->every_eff);
	hold = hold < RENDER_HOLD_MIN_NS   ? RENDER_HOLD_MIN_NS
	       : hold > RENDER_HOLD_MAX_NS ? RENDER_HOLD_MAX_NS
	                                   : hold;
	pub->rr = (struct be_render_report){.deadline_ns = now + hold};
	return true;
}

/* After a volume with a render (or a part of one): how often to render from now on.
 * Processing thread. */
static void render_done(struct vrd_pub *pub)
{
	const struct be_render_report *rr = &pub->rr;
	uint32_t every = atomic_load(&pub->render_every), next = pub->every_eff;
	double budget = RENDER_SHARE * pub->period_ns, need;
	char why[sizeof(pub->render.reason)] = "";
	bool overrun;

	if (!rr->measured)
		return;
	pub->render_total_ns += rr->ns;
	overrun = rr->abandoned || pub->render_part;
	if (rr->abandoned) {
		/* the rest with the next volume; the cadence once it is whole */
		pub->render_part = true;
		snprintf(why, sizeof(why),
		         "view.render: a render takes longer than the %.0f ms one volume may hold "
		         "the processing (%.0f ms so far): it goes on over the next volumes, and "
		         "the "
		         "picture shown is the last whole one (a smaller view.render.size or a "
		         "larger view.render.step renders faster)",
		         (double)(rr->deadline_ns - pub->last_begin_ns) / 1e6,
		         (double)pub->render_total_ns / 1e6);
	} else {
		need = budget > 0 ? ceil((double)pub->render_total_ns / budget) : 1;
		next = need <= every              ? every
		       : need >= RENDER_EVERY_MAX ? RENDER_EVERY_MAX
		                                  : (uint32_t)need;
		if (next > every)
			snprintf(why, sizeof(why),
			         "view.render: a render takes %.1f ms, more than its share of %u "
			         "volumes of %.1f ms: rendering every %u volumes instead of every "
			         "%u "
			         "(a smaller view.render.size or a larger view.render.step renders "
			         "faster)",
			         (double)pub->render_total_ns / 1e6, every, pub->period_ns / 1e6,
			         next, every);
		pub->render_part = false;
		pub->render_total_ns = 0;
	}
	pub->every_eff = next;
	pthread_mutex_lock(&pub->lock);
	pub->render.every = next;
	pub->render.last_ms = (double)rr->ns / 1e6;
	pub->render.abandoned += rr->abandoned;
	pub->render.renders += !rr->abandoned;
	pub->render.degraded = why[0] != '\0';
	pub->render.overrun = overrun;
	snprintf(pub->render.reason, sizeof(pub->render.reason), "%s", why);
	pthread_mutex_unlock(&pub->lock);
}

static int sink_begin(void *ctx, uint64_t epoch, struct be_output *out, char *err, size_t errlen)
{
	struct vrd_pub *pub = ctx;
	int rc = ipc_writer_begin(pub->w, &pub->cur);

	if (rc < 0)
		return vr_err_errno(err, errlen, rc, "shm: no slot to write into");
	pub->in_progress = true;
	out->volume = pub->cur.data;
	out->channels = pub->cur.channels;
	out->median_depths = pub->md;
	/* the id this volume will be published with (one processing thread: nothing else takes
	 * one in between), recorded in its views */
	out->volume_id = atomic_load(&next_volume_id);
	if (pub->views && pub->cur.views) {
		/* every view each volume; the render every Nth (view.render.every, or less often
		 * while renders cost more than their share of the volume period) */
		out->views = pub->cur.views;
		out->channel_views = pub->cur.channel_views;
		out->view_mask = (1u << BE_VIEW_COUNT) - 1;
		pub->render_asked = render_due(pub);
		if (pub->render_asked)
			out->render = &pub->rr;
		else
			out->view_mask &= ~(1u << BE_VIEW_RENDER);
	}
	return 0;
}

/* The pipeline's volume flags as the wire's (docs/protocol.md) */
static uint32_t wire_flags(uint32_t pl_flags)
{
	return (pl_flags & PL_VOLUME_RESET ? VOLREC_FLAG_RESET : 0) |
	       (pl_flags & PL_VOLUME_DROPPED_BEFORE ? VOLREC_FLAG_DROPPED_BEFORE : 0);
}

static int sink_publish(void *ctx, const struct pl_volume *v, char *err, size_t errlen)
{
	struct vrd_pub *pub = ctx;
	/* the pipeline numbers epochs from 0 in each session and skips the number of every epoch
	 * it drops (ring full, incomplete, processing error, source fault): a gap is a drop */
	uint64_t expected = pub->last.have ? pub->last.epoch + 1 : 0;
	uint64_t gap = v->epoch > expected ? v->epoch - expected : 0;
	/* the source lost data before the epoch's first B-scan: its history has a gap though no
	 * epoch number was skipped (the writer sets VOLREC_FLAG_DROPPED_BEFORE from drops_before) */
	uint64_t drops = gap ? gap : !!(v->flags & PL_VOLUME_DROPPED_BEFORE);
	struct ipc_volume_meta meta = {
	        .volume_id = atomic_fetch_add(&next_volume_id, 1),
	        .epoch = v->epoch,
	        .offset_x = (int32_t)v->ox,
	        .offset_y = (int32_t)v->oy,
	        .t_first_ns = v->t_first_ns,
	        .t_last_ns = v->t_last_ns,
	        .latency_ns = v->latency_ns,
	        .flags = wire_flags(v->flags) |
	                 (pub->views && pub->cur.views ? VOLREC_FLAG_VIEWS : 0) |
	                 (pub->views && pub->cur.views && pub->cur.channel_views
	                          ? VOLREC_FLAG_CHANNEL_VIEWS
	                          : 0),
	        .drops_before = drops > UINT32_MAX ? UINT32_MAX : (uint32_t)drops,
	        .generation = v->generation,
	        .voxel_um = {pub->voxel_um[0], pub->voxel_um[1], pub->voxel_um[2]},
	        .channels = pub->nch,
	};
	int rc;

	const void *data = pub->cur.data; /* publishing gives the slot back: its address first */
	struct ipc_volume_meta as;

	pub_channel_map(pub, v->generation, meta.channel);
	rc = ipc_writer_publish_as(pub->w, &pub->cur, &meta, pub->rec ? &as : NULL);
	uint64_t sum = 0;
	uint32_t max = 0;

	pub->in_progress = false;
	if (pub->render_asked)
		render_done(pub);
	pub->render_asked = false;
	if (rc < 0)
		return vr_err_errno(err, errlen, rc, "shm: publishing volume of epoch %llu",
		                    (unsigned long long)v->epoch);
	/* this thread alone writes slots: the volume stays as published while it is copied */
	if (pub->rec)
		vrd_rec_volume(pub->rec, ipc_writer_session(pub->w), &as, data);
	for (uint32_t b = 0; b < pub->ny; b++) {
		sum += pub->md[b];
		max = pub->md[b] > max ? pub->md[b] : max;
	}
	pthread_mutex_lock(&pub->lock);
	pub->last.have = true;
	pub->last.epoch = v->epoch;
	pub->last.mean_per_bscan = pub->ny ? (double)sum / pub->ny : 0;
	pub->last.max_per_bscan = max;
	pthread_mutex_unlock(&pub->lock);
	return 0;
}

static void sink_abort(void *ctx)
{
	struct vrd_pub *pub = ctx;

	if (pub->in_progress)
		ipc_writer_abort(pub->w, &pub->cur);
	pub->in_progress = false;
	pub->render_asked = false;
}

void vrd_pub_update(struct vrd_pub *pub, const struct vr_config *cfg)
{
	uint32_t every = cfg->view.render.every;

	if (every == 0) /* auto: every volume on a device, every 5th on the CPU */
		every = be_caps(pub->be) & BE_CAP_DEVICE ? 1 : 5;
	pub->render_every = every;
	atomic_store(&pub->render_reset, true);
	pthread_mutex_lock(&pub->lock);
	pub->render.configured_every = every;
	if (pub->render.every < every || !pub->render.degraded)
		pub->render.every = every;
	pthread_mutex_unlock(&pub->lock);
}

void vrd_pub_record(struct vrd_pub *pub, struct vrd_rec *rec)
{
	pub->rec = rec;
}

void vrd_pub_render_state(struct vrd_pub *pub, struct vrd_render_state *rs)
{
	pthread_mutex_lock(&pub->lock);
	*rs = pub->render;
	pthread_mutex_unlock(&pub->lock);
}

void vrd_pub_sink(struct vrd_pub *pub, struct pl_sink *sink)
{
	sink->ctx = pub;
	sink->begin = sink_begin;
	sink->publish = sink_publish;
	sink->abort = sink_abort;
}

int vrd_pub_send(struct vrd_pub *pub, const char *topic, const char *json)
{
	if (!strcmp(topic, VOLREC_TOPIC_STATUS))
		return ipc_writer_send_status(pub->w, json);
	return ipc_writer_send_event(pub->w, json);
}

int vrd_pub_readers(struct vrd_pub *pub)
{
	return ipc_writer_readers(pub->w);
}

void vrd_pub_stats(struct vrd_pub *pub, struct ipc_writer_stats *st)
{
	ipc_writer_stats(pub->w, st);
}

void vrd_pub_median_depths(struct vrd_pub *pub, struct vrd_median_depths *md)
{
	pthread_mutex_lock(&pub->lock);
	*md = pub->last;
	pthread_mutex_unlock(&pub->lock);
}

uint64_t vrd_pub_session(struct vrd_pub *pub)
{
	return ipc_writer_session(pub->w);
}
