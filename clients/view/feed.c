/* SPDX-License-Identifier: MIT */
/*
 * The viewer's feed thread: follows the daemon through libvolrec (waiting for it to start,
 * following its restarts and structural reloads), and for the newest volume only — announced
 * volumes that a newer one overtook are passed over — encodes the pictures some browser shows,
 * once for all browsers, into the mailbox the server takes them from. Status and event
 * messages go the same way. Never more than max_rate volumes per second.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>

#include "base/base.h"
#include "clients/view/internal.h"

#define VW_TIMES 64 /* acquisition times remembered for pictures of older volumes */

struct vw_times {
	uint64_t vid[VW_TIMES], t_last[VW_TIMES], t_publish[VW_TIMES];
	unsigned next;
};

static void times_put(struct vw_times *t, const struct volrec_view *v)
{
	unsigned i = t->next++ % VW_TIMES;

	t->vid[i] = v->volume_id;
	t->t_last[i] = v->t_last_ns;
	t->t_publish[i] = v->t_publish_ns;
}

static bool times_get(const struct vw_times *t, uint64_t vid, uint64_t *last, uint64_t *pub)
{
	for (unsigned i = 0; i < VW_TIMES; i++)
		if (t->vid[i] == vid && t->t_last[i]) {
			*last = t->t_last[i];
			*pub = t->t_publish[i];
			return true;
		}
	return false;
}

/* Replace *slot with text (ownership taken), under the mailbox lock. */
static void box_text(struct vw_feed *f, char **slot, char *text)
{
	pthread_mutex_lock(&f->box.lock);
	free(*slot);
	*slot = text;
	f->box.dirty = true;
	pthread_mutex_unlock(&f->box.lock);
	f->wake(f->wake_ctx);
}

static void post_state(struct vw_feed *f, const char *state, const char *message)
{
	struct json_object *o = json_object_new_object();
	char *text;

	json_object_object_add(o, "state", json_object_new_string(state));
	json_object_object_add(o, "message", json_object_new_string(message));
	json_object_object_add(o, "instance", json_object_new_string(f->instance));
	if (f->session) {
		char hex[17];

		/* hexadecimal, as the page writes a frame's session id */
		snprintf(hex, sizeof(hex), "%" PRIx64, f->session);
		json_object_object_add(o, "session", json_object_new_string(hex));
		json_object_object_add(o, "views", json_object_new_boolean(!f->no_views));
	}
	text = strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
	json_object_put(o);
	if (text)
		box_text(f, &f->box.text[VW_STATE], text);
}

/*
 * The daemon's session is now this one: the pictures of the one before are dropped (a browser
 * opened now would otherwise be sent a stopped daemon's pictures, a daemon restarted without
 * views none to replace them), and the browsers are told, so they clear theirs.
 */
static void new_session(struct vw_feed *f, uint64_t session)
{
	if (session == f->session)
		return;
	pthread_mutex_lock(&f->box.lock);
	for (unsigned k = 0; k < VW_KIND_COUNT; k++) {
		vw_frame_free(f->box.frame[k]);
		f->box.frame[k] = NULL;
	}
	for (unsigned i = 0; i < f->box.nout; i++)
		for (unsigned k = 0; k < VW_KIND_COUNT; k++)
			vw_frame_free(f->box.out[i].frame[k]);
	f->box.nout = 0;
	f->box.clear = f->session != 0;
	f->box.dirty = true;
	pthread_mutex_unlock(&f->box.lock);
	f->session = session;
	f->no_views = false;
	post_state(f, "connected", "reading volrecd");
}

/* A daemon's status or event text, checked to be one JSON object before browsers get it. */
static void post_json(struct vw_feed *f, char **slot, const char *text, size_t len)
{
	struct json_tokener *tok = json_tokener_new_ex(32);
	struct json_object *o = tok ? json_tokener_parse_ex(tok, text, (int)len) : NULL;
	char *copy = NULL;

	if (o && json_object_is_type(o, json_type_object))
		copy = strndup(text, len);
	json_object_put(o);
	if (tok)
		json_tokener_free(tok);
	if (copy)
		box_text(f, slot, copy);
}

/* Sleep up to ms, in short steps, unless asked to stop. */
static void nap(struct vw_feed *f, int ms)
{
	while (ms > 0 && !atomic_load(&f->stop)) {
		struct timespec ts = {0, (ms < 50 ? ms : 50) * 1000000L};

		nanosleep(&ts, NULL);
		ms -= 50;
	}
}

/* What the frames of volume v say beside their pixels (um: [dx, dy, dz], NaN unknown). */
static struct vw_frame_meta meta_of(const struct volrec_view *v, const double um[3])
{
	/* [dx, dy, dz], NaN unknown, as the frames' [dy, dx, dz], 0 unknown */
	return (struct vw_frame_meta){
	        .volume_id = v->volume_id,
	        .epoch = v->epoch,
	        .t_last_ns = v->t_last_ns,
	        .t_publish_ns = v->t_publish_ns,
	        .session_id = v->session_id,
	        .shape = {v->ny, v->nx, v->nz},
	        .voxel_um = {um[1] > 0 ? um[1] : 0, um[0] > 0 ? um[0] : 0, um[2] > 0 ? um[2] : 0},
	};
}

/* The own views extracted from one volume, so that each is extracted once per volume. */
struct vw_own_done {
	uint64_t vid, session;
	struct vw_own_key key[VW_OWN_MAX];
	unsigned kinds[VW_OWN_MAX];
	unsigned n;
};

static bool own_done(const struct vw_own_done *d, const struct volrec_view *v,
                     const struct vw_own_req *r)
{
	if (d->vid != v->volume_id || d->session != v->session_id)
		return false;
	for (unsigned i = 0; i < d->n; i++)
		if (vw_own_key_equal(&d->key[i], &r->key) && !(r->kinds & ~d->kinds[i]))
			return true;
	return false;
}

static void own_mark(struct vw_own_done *d, const struct volrec_view *v, const struct vw_own_req *r)
{
	if (d->vid != v->volume_id || d->session != v->session_id) {
		d->vid = v->volume_id;
		d->session = v->session_id;
		d->n = 0;
	}
	for (unsigned i = 0; i < d->n; i++)
		if (vw_own_key_equal(&d->key[i], &r->key)) {
			d->kinds[i] |= r->kinds;
			return;
		}
	if (d->n < VW_OWN_MAX) {
		d->key[d->n] = r->key;
		d->kinds[d->n++] = r->kinds;
	}
}

/* Hand the own views' new frames to the server: each replaces the one of its view and kind;
 * views no browser shows any more are dropped. Takes the frames. */
static void own_post(struct vw_feed *f, const struct vw_own_req *req, unsigned n,
                     struct vw_frame *(*fr)[VW_KIND_COUNT])
{
	struct vw_mailbox *b = &f->box;

	pthread_mutex_lock(&b->lock);
	for (unsigned i = 0; i < n; i++) {
		unsigned j = 0;
		bool any = false;

		for (unsigned k = 0; k < VW_KIND_COUNT; k++)
			any |= fr[i][k] != NULL;
		if (!any)
			continue;
		while (j < b->nout && !vw_own_key_equal(&b->out[j].key, &req[i].key))
			j++;
		if (j == b->nout) {
			if (b->nout == VW_OWN_MAX) { /* the server forgot the view meanwhile */
				for (unsigned k = 0; k < VW_KIND_COUNT; k++)
					vw_frame_free(fr[i][k]);
				continue;
			}
			memset(&b->out[b->nout], 0, sizeof(b->out[0]));
			b->out[b->nout++].key = req[i].key;
		}
		for (unsigned k = 0; k < VW_KIND_COUNT; k++)
			if (fr[i][k]) {
				vw_frame_free(b->out[j].frame[k]);
				b->out[j].frame[k] = fr[i][k];
			}
	}
	b->dirty = true;
	pthread_mutex_unlock(&b->lock);
	f->wake(f->wake_ctx);
}

/* The channel that picture kind k (>= VW_CHANNEL_KIND0) shows, of volume v (held): its index
 * and its data and meaning into *ch, or -ENOENT when the volume does not hold it (the daemon publishes no such
 * channel). */
static int channel_of(const struct volrec_client *c, const struct volrec_view *v, unsigned k,
                      struct volrec_channel *ch)
{
	int idx = volrec_view_find_channel(c, v, vw_kind_channel(k));

	if (idx < 0 || volrec_view_channel(c, v, (unsigned)idx, ch) || !ch->data)
		return -ENOENT;
	return idx;
}

/*
 * The pictures of the browsers' own views from volume v (held), taken from the volume itself
 * (extract.c); the daemon's position or slab, for what a view does not set, from v's own
 * pictures. Each view once per volume; nothing when the volume was overwritten meanwhile.
 */
static void extract_own(struct vw_feed *f, struct volrec_client *c, const struct volrec_view *v,
                        const double um[3], struct vw_own_done *done)
{
	struct vw_own_req req[VW_OWN_MAX];
	struct vw_frame *fr[VW_OWN_MAX][VW_KIND_COUNT];
	uint32_t dpos[3] = {0}, dslab[2] = {0}, shape[3] = {v->ny, v->nx, v->nz};
	bool daemon = false, any = false;
	struct volrec_image img;
	uint8_t *buf = NULL;
	unsigned n;
	size_t side;

	pthread_mutex_lock(&f->box.lock);
	n = f->box.nreq;
	memcpy(req, f->box.req, n * sizeof(req[0]));
	atomic_store(&f->own_changed, false);
	pthread_mutex_unlock(&f->box.lock);
	memset(fr, 0, sizeof(fr));
	if (!n || v->dtype != VOLREC_DTYPE_U8 || !v->data)
		return;
	for (unsigned k = 0; k < VW_KIND_COUNT && !daemon; k++)
		if ((VW_OWN_KINDS & (1u << k)) && !volrec_view_image(c, v, k, &img)) {
			memcpy(dpos, img.position, sizeof(dpos));
			memcpy(dslab, img.slab, sizeof(dslab));
			daemon = true;
		}
	side = (size_t)v->ny * v->nx; /* the largest picture: en-face, B-scan or slice */
	if ((size_t)v->nx * v->nz > side)
		side = (size_t)v->nx * v->nz;
	if ((size_t)v->ny * v->nz > side)
		side = (size_t)v->ny * v->nz;
	for (unsigned i = 0; i < n; i++) {
		const struct vw_own_key *key = &req[i].key;
		const uint32_t *pos = key->own_pos ? key->pos : dpos,
		               *slab = key->own_slab ? key->slab : dslab;
		char err[256];

		if ((!req[i].fresh && own_done(done, v, &req[i])) ||
		    ((!key->own_pos || !key->own_slab) && !daemon) ||
		    vw_view_check(shape, pos, slab, err, sizeof(err)))
			continue; /* a view outside this volume: the server tells its browsers */
		if (!buf && !(buf = malloc(side)))
			break;
		for (unsigned k = 0; k < VW_KIND_COUNT; k++) {
			struct vw_frame_meta m = meta_of(v, um);
			struct volrec_channel ch;

			if (!(req[i].kinds & VW_OWN_KINDS & (1u << k)))
				continue;
			if (k >= VW_CHANNEL_KIND0) {
				/* a channel's picture, from the channel's volume */
				if (channel_of(c, v, k, &ch) < 0)
					continue;
				m.kind = k;
				m.chan = &ch;
				vw_extract(ch.data, v->ny, v->nx, v->nz, vw_kind_base(k), pos, slab,
				           buf, &img);
			} else {
				vw_extract(v->data, v->ny, v->nx, v->nz, k, pos, slab, buf, &img);
			}
			img.volume_id = v->volume_id;
			m.t_read_ns = vr_now_ns(CLOCK_REALTIME);
			if (vw_frame_encode(&img, &m, &f->enc, &fr[i][k]))
				fr[i][k] = NULL;
			else
				any = true;
		}
	}
	free(buf);
	if (volrec_view_check(c, v)) {
		/* overwritten while read: the pictures may mix two volumes */
		for (unsigned i = 0; i < n; i++)
			for (unsigned k = 0; k < VW_KIND_COUNT; k++)
				vw_frame_free(fr[i][k]);
		return;
	}
	for (unsigned i = 0; i < n; i++)
		own_mark(done, v, &req[i]);
	if (any)
		own_post(f, req, n, fr);
}

/* The shape of the newest volume read, for the server's checks of a browser's view. */
static void post_shape(struct vw_feed *f, const struct volrec_view *v)
{
	pthread_mutex_lock(&f->box.lock);
	if (f->box.shape[0] != v->ny || f->box.shape[1] != v->nx || f->box.shape[2] != v->nz) {
		f->box.shape[0] = v->ny;
		f->box.shape[1] = v->nx;
		f->box.shape[2] = v->nz;
		f->box.dirty = true;
	}
	pthread_mutex_unlock(&f->box.lock);
}

/* The own views' pictures of the newest volume, without a new one (a browser moved its
 * crosshair or slab). */
static void extract_latest(struct vw_feed *f, struct volrec_client *c, struct vw_own_done *done)
{
	struct volrec_view v;
	double um[3];

	if (volrec_client_latest(c, &v))
		return;
	post_shape(f, &v);
	if (volrec_view_voxel_size(c, &v, um))
		um[0] = um[1] = um[2] = NAN;
	extract_own(f, c, &v, um, done);
	volrec_view_release(c, &v);
}

/* Encode the wanted pictures of the newest volume, the daemon's and the own views'. */
static void encode_latest(struct vw_feed *f, struct volrec_client *c, const struct vw_times *tm,
                          uint64_t *last_render, struct vw_own_done *done)
{
	struct vw_frame *fr[VW_KIND_COUNT] = {0};
	unsigned wanted = atomic_load(&f->wanted);
	struct volrec_view v;
	uint64_t render_vid = 0;
	double um[3];
	bool any = false;
	int rc;

	rc = volrec_client_latest(c, &v);
	if (rc)
		return;
	post_shape(f, &v);
	if (!(v.flags & VOLREC_FLAG_VIEWS) != f->no_views) {
		f->no_views = !(v.flags & VOLREC_FLAG_VIEWS);
		post_state(f, "connected",
		           f->no_views ? "volrecd publishes no pictures (view.enabled: false)"
		                       : "reading volrecd");
		vw_log("volrecd '%s' %s", f->instance,
		       f->no_views ? "publishes no pictures (view.enabled: false)"
		                   : "publishes pictures");
	}
	if (volrec_view_voxel_size(c, &v, um))
		um[0] = um[1] = um[2] = NAN;
	for (unsigned k = 0; k < VW_KIND_COUNT; k++) {
		struct volrec_image img;
		struct vw_frame_meta m = meta_of(&v, um);

		struct volrec_channel ch;
		int idx = 0;

		if (!(wanted & (1u << k)))
			continue;
		if (k >= VW_CHANNEL_KIND0) {
			/* a channel's picture as the daemon made it (§2.8): none when it publishes
			 * no such channel or no pictures of it */
			idx = channel_of(c, &v, k, &ch);
			if (idx < 0 ||
			    volrec_view_channel_image(c, &v, (unsigned)idx, vw_kind_base(k), &img))
				continue;
			m.kind = k;
			m.chan = &ch;
		} else if (volrec_view_image(c, &v, k, &img)) {
			continue;
		}
		/* a render carried over from an older volume (every Nth on the CPU) is sent once */
		if (k == VOLREC_IMAGE_RENDER) {
			if (img.volume_id == *last_render)
				continue;
			render_vid = img.volume_id;
		}
		if (img.volume_id != v.volume_id &&
		    !times_get(tm, img.volume_id, &m.t_last_ns, &m.t_publish_ns))
			m.t_last_ns = m.t_publish_ns = 0; /* unknown: the page shows no age */
		m.volume_id = img.volume_id;
		m.t_read_ns = vr_now_ns(CLOCK_REALTIME);
		if (vw_frame_encode(&img, &m, &f->enc, &fr[k]))
			fr[k] = NULL;
		else
			any = true;
	}
	if (atomic_load(&f->own_any))
		extract_own(f, c, &v, um, done);
	rc = volrec_view_release(c, &v);
	if (rc) {
		/* overwritten while read: the pictures may mix two volumes */
		for (unsigned k = 0; k < VW_KIND_COUNT; k++)
			vw_frame_free(fr[k]);
		return;
	}
	if (render_vid)
		*last_render = render_vid;
	if (!any)
		return;
	pthread_mutex_lock(&f->box.lock);
	for (unsigned k = 0; k < VW_KIND_COUNT; k++)
		if (fr[k]) {
			vw_frame_free(f->box.frame[k]);
			f->box.frame[k] = fr[k];
		}
	f->box.dirty = true;
	pthread_mutex_unlock(&f->box.lock);
	f->wake(f->wake_ctx);
}

static int open_client(struct vw_feed *f, struct volrec_client **out, int *last_rc)
{
	struct volrec_client_options o = {
	        .run_dir = f->run_dir,
	        .topics = VOLREC_SUB_VOL | VOLREC_SUB_STATUS | VOLREC_SUB_EVENT,
	        .rcvhwm = 100,
	};
	char msg[VW_PATH_MAX + 256];
	int rc = volrec_client_open_opts(f->instance, &o, out);

	if (!rc) {
		/* whether this daemon publishes pictures is found again from its next volume
		 * (encode_latest), which then says so: this message replaces any earlier one */
		f->no_views = false;
		snprintf(msg, sizeof(msg), "reading volrecd '%s'", f->instance);
		post_state(f, "connected", msg);
		vw_log("connected to volrecd '%s' (%s)", f->instance, f->run_dir);
		*last_rc = 0;
		return 0;
	}
	if (rc != *last_rc) {
		snprintf(msg, sizeof(msg), "waiting for volrecd '%s' in %s: %s", f->instance,
		         f->run_dir, volrec_strerror(rc));
		post_state(f, "waiting", msg);
		vw_log("%s", msg);
		*last_rc = rc;
	}
	return rc;
}

static void *feed_main(void *arg)
{
	struct vw_feed *f = arg;
	struct volrec_client *c = NULL;
	struct vw_times tm = {0};
	struct vw_own_done done = {0};
	uint64_t last_render = 0, session = 0, next_ok = 0, last_check = 0;
	const uint64_t period = f->max_rate > 0 ? (uint64_t)(1e9 / f->max_rate) : 0;
	bool pending = false, alive = true;
	int last_rc = 1;

	while (!atomic_load(&f->stop)) {
		struct volrec_message m;
		uint64_t now = vr_now_ns(CLOCK_MONOTONIC);
		int wait, rc;

		if (!c) {
			if (open_client(f, &c, &last_rc)) {
				c = NULL;
				nap(f, 250);
				continue;
			}
			session = volrec_client_session(c);
			new_session(f, session);
			pending = true; /* show what is there at once */
			alive = true;
		}
		if (pending && now >= next_ok)
			wait = 0;
		else if (pending)
			wait = (int)((next_ok - now) / 1000000u) + 1;
		else
			wait = atomic_load(&f->own_any) ? 20
			                                : 200; /* a browser may move its view */
		rc = volrec_client_next_message(c, wait, &m);
		if (!rc && m.type == VOLREC_MSG_VOL) {
			times_put(&tm, &m.view);
			volrec_view_release(c, &m.view);
			pending = true;
			continue;
		}
		if (!rc) {
			post_json(f,
			          &f->box.text[m.type == VOLREC_MSG_STATUS ? VW_STATUS : VW_EVENT],
			          m.text, m.len);
			continue;
		}
		if (rc == -ETIMEDOUT) {
			struct volrec_segment_info info;

			now = vr_now_ns(CLOCK_MONOTONIC);
			if (volrec_client_session(c) != session) {
				session = volrec_client_session(c);
				last_render = 0;
				vw_log("volrecd '%s' has a new session: following it", f->instance);
				new_session(f, session);
			}
			if (pending && now >= next_ok &&
			    (atomic_load(&f->wanted) || atomic_load(&f->own_any))) {
				pending = false;
				encode_latest(f, c, &tm, &last_render, &done);
				next_ok = now + period;
			} else if (pending && !atomic_load(&f->wanted) &&
			           !atomic_load(&f->own_any)) {
				pending = false;
			} else if (atomic_load(&f->own_changed) && now >= next_ok) {
				extract_latest(f, c, &done);
				next_ok = now + period;
			}
			if (now - last_check > 500000000u) {
				last_check = now;
				volrec_client_info(c, &info);
				if (alive != (bool)info.writer_alive) {
					alive = info.writer_alive;
					/* the state box keeps the latest message only: one
					 * saying the daemon is back must not hide that it
					 * publishes no pictures (encode_latest says so once) */
					post_state(f, alive ? "connected" : "stopped",
					           !alive ? "volrecd stopped: waiting for it to "
					                    "come back"
					           : f->no_views ? "volrecd publishes no pictures "
					                           "(view.enabled: false)"
					                         : "reading volrecd");
					vw_log("volrecd '%s' %s", f->instance,
					       alive ? "is back" : "stopped; waiting for it");
				}
			}
			continue;
		}
		if (rc == -EPROTO || rc == -EINTR || rc == -EAGAIN)
			continue;
		vw_log("reading volrecd '%s': %s (%s); reconnecting", f->instance,
		       volrec_strerror(rc), volrec_client_error(c));
		volrec_client_close(c);
		c = NULL;
		last_rc = 1;
		nap(f, 250);
	}
	volrec_client_close(c);
	return NULL;
}

int vw_feed_start(struct vw_feed *f)
{
	int rc = pthread_mutex_init(&f->box.lock, NULL);

	if (rc)
		return -rc;
	rc = pthread_create(&f->thread, NULL, feed_main, f);
	if (rc) {
		pthread_mutex_destroy(&f->box.lock);
		return -rc;
	}
	f->started = true;
	return 0;
}

void vw_feed_stop(struct vw_feed *f)
{
	if (!f->started)
		return;
	atomic_store(&f->stop, true);
	pthread_join(f->thread, NULL);
	for (unsigned k = 0; k < VW_KIND_COUNT; k++)
		vw_frame_free(f->box.frame[k]);
	for (unsigned i = 0; i < f->box.nout; i++)
		for (unsigned k = 0; k < VW_KIND_COUNT; k++)
			vw_frame_free(f->box.out[i].frame[k]);
	for (unsigned t = 0; t < VW_TEXTS; t++)
		free(f->box.text[t]);
	pthread_mutex_destroy(&f->box.lock);
	f->started = false;
}
