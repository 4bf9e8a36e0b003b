/* SPDX-License-Identifier: MIT */
/*
 * The volrecd service loop: signals through a signalfd (no work in async handlers), reloads,
 * the systemd notify protocol (READY, RELOADING, STOPPING, STATUS, WATCHDOG), the periodic
 * status message, lifecycle events and the pid file.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "daemon/internal.h"
#include "daemon/vrd_ctl.h"
#include "daemon/vrd_gen.h"

enum svc_state { SVC_STARTING, SVC_RUNNING, SVC_RELOADING, SVC_STOPPING };
static const char *const state_names[] = {"starting", "running", "reloading", "stopping"};

/* What other threads may touch: the publisher events go out on, and the last event. */
static struct {
	pthread_mutex_t lock;
	struct vrd_pub *pub;
	char instance[CFG_NAME_MAX];
	char last_event[32];
	char last_message[512];
	uint64_t last_event_ns; /* CLOCK_REALTIME */
} svc = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* ---- JSON through json-c ------------------------------------------------------------------ */

/* A string member: text from a shim, a camera or a file is made valid UTF-8 first. */
static struct json_object *jstr(const char *s)
{
	char clean[2048];

	vr_utf8_sanitize(s ? s : "", clean, sizeof(clean));
	return json_object_new_string(clean);
}

/* A number written with fmt, or null when it is not finite (JSON has no NaN). */
static struct json_object *jnumf(double v, const char *fmt)
{
	char text[64];

	if (!isfinite(v))
		return NULL;
	snprintf(text, sizeof(text), fmt, v);
	return json_object_new_double_s(v, text);
}

static struct json_object *jnum(double v)
{
	return jnumf(v, "%.6g");
}

static void jset(struct json_object *o, const char *key, struct json_object *v)
{
	json_object_object_add(o, key, v);
}

static void jset_u64(struct json_object *o, const char *key, uint64_t v)
{
	json_object_object_add(o, key, json_object_new_uint64(v));
}

void vrd_event_at(const char *file, int line, const char *func, const char *name, int prio,
                  const char *message, struct json_object *extra)
{
	struct json_object *ev;
	const char *text;

	vrd_log_at(file, line, func, prio, name, "%s", message ? message : name);
	ev = json_object_new_object();
	pthread_mutex_lock(&svc.lock);
	jset(ev, "event", jstr(name));
	jset(ev, "instance", jstr(svc.instance));
	jset(ev, "time", jnumf((double)vr_real_ns() / 1e9, "%.3f"));
	if (svc.pub)
		jset_u64(ev, "session", vrd_pub_session(svc.pub));
	if (message)
		jset(ev, "message", jstr(message));
	if (extra) {
		json_object_object_foreach(extra, key, val) jset(ev, key, json_object_get(val));
		json_object_put(extra);
	}
	snprintf(svc.last_event, sizeof(svc.last_event), "%s", name);
	snprintf(svc.last_message, sizeof(svc.last_message), "%s", message ? message : "");
	svc.last_event_ns = vr_real_ns();
	text = json_object_to_json_string_ext(ev, JSON_C_TO_STRING_PLAIN);
	if (svc.pub && vrd_pub_send(svc.pub, VOLREC_TOPIC_EVENT, text) < 0)
		vrd_log(LOG_DEBUG, NULL, "event %s: not sent (publisher busy)", name);
	pthread_mutex_unlock(&svc.lock);
	json_object_put(ev);
}

static void set_event_pub(struct vrd_pub *pub)
{
	pthread_mutex_lock(&svc.lock);
	svc.pub = pub;
	pthread_mutex_unlock(&svc.lock);
}

/* ---- the main loop's state ---------------------------------------------------------------- */

struct service {
	const char *config_path;
	struct vr_config cur; /* the configuration in force */
	struct vrd_pipeline *pl;
	struct vrd_raw *raw; /* the raw recorder, across rebuilds (vrd_raw.c) */
	struct vrd_rec *rec; /* the processed recorder, likewise (vrd_rec.c) */
	enum svc_state state;
	uint64_t started_ns;
	char pid_path[CFG_PATH_MAX + CFG_NAME_MAX + 8];
	char eff_path[CFG_PATH_MAX + CFG_NAME_MAX + 8]; /* <run_dir>/<instance>.yaml, "" if none */

	/* reload */
	bool live_pending;
	uint64_t live_ticket;
	struct vr_config next; /* the configuration being applied live */
	bool set_pending;      /* next comes from a control `set`, not the file */
	char set_keys[512];    /* its keys, for the log and the event */
	struct vrd_ctl_peer set_peer;
	char runtime_keys[512]; /* keys changed with `set` since the file was last read */
	char reload_result[16]; /* "", "ok", "rejected" */
	char reload_message[CFG_ERR_MAX];

	/* the control socket (vrd_ctl.c) */
	struct vrd_ctl *ctl;
	/* generations of the live values (vrd_gen.c); next_gen: of next, while live_pending */
	struct vrd_gens gens;
	uint32_t next_gen;

	/* rates: the snapshot of the previous status */
	struct pl_counters prev;
	uint64_t prev_ns;
	double rates[4];          /* A-scans/s, epochs/s, volumes/s, GVox/s */
	bool render_was_degraded; /* at the last status: a log line when it changes */
	uint64_t pub_refused_logged, pub_refused_log_ns; /* publisher connections refused */

	/* watchdog */
	bool wd_enabled;
	uint64_t wd_usec;
	struct pl_progress wd_last;
	uint64_t wd_pings, wd_missed;
};

static uint64_t total_drops(const struct pl_counters *c)
{
	uint64_t n = 0;

	for (int i = 0; i < PL_DROP_COUNT; i++)
		n += c->drops[i];
	return n;
}

/* Whether the render runs degraded (less often than configured, or a render spans several
 * volumes): rs has the reason. The render's own state, in status's render and the log: the
 * pipeline is not degraded by it. */
static bool render_degraded(const struct service *s, struct vrd_render_state *rs)
{
	memset(rs, 0, sizeof(*rs));
	if (!s->pl)
		return false;
	vrd_pub_render_state(vrd_pipeline_pub(s->pl), rs);
	return rs->degraded;
}

static const char *shown_state(const struct service *s, const struct pl_stats *snap)
{
	if (s->state == SVC_RUNNING && snap->degraded)
		return "degraded";
	return state_names[s->state];
}

/* ---- pid file ---------------------------------------------------------------------------- */

static void pidfile_write(struct service *s)
{
	char buf[32];
	int fd, n;

	snprintf(s->pid_path, sizeof(s->pid_path), "%s/%s.pid", s->cur.ipc.run_dir,
	         s->cur.instance);
	fd = open(s->pid_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		vrd_log(LOG_WARNING, NULL, "cannot write the pid file %s: %s", s->pid_path,
		        strerror(errno));
		s->pid_path[0] = '\0';
		return;
	}
	n = snprintf(buf, sizeof(buf), "%d\n", (int)getpid());
	if (write(fd, buf, (size_t)n) != n)
		vrd_log(LOG_WARNING, NULL, "cannot write the pid file %s: %s", s->pid_path,
		        strerror(errno));
	close(fd);
}

static void pidfile_remove(struct service *s)
{
	char buf[32] = "";
	int fd;

	if (!s->pid_path[0])
		return;
	/* only our own: a successor may already have written its pid there */
	fd = open(s->pid_path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t n = read(fd, buf, sizeof(buf) - 1);

		close(fd);
		if (n > 0 && atoi(buf) == (int)getpid())
			unlink(s->pid_path);
	}
	s->pid_path[0] = '\0';
}

/* ---- the effective configuration, for clients ---------------------------------------------- */

/*
 * <run_dir>/<instance>.yaml: the configuration in force with every default filled in (what
 * `volrecd --check` prints), rewritten at start and after every accepted reload, removed at
 * exit, so a recorder can store what produced its volumes. Written to a temporary file and
 * renamed: a reader never sees half of it.
 */
static void effective_write(struct service *s)
{
	char tmp[sizeof(s->eff_path) + 16];
	FILE *f;
	int fd;

	snprintf(s->eff_path, sizeof(s->eff_path), "%s/%s.yaml", s->cur.ipc.run_dir,
	         s->cur.instance);
	snprintf(tmp, sizeof(tmp), "%s.tmp%d", s->eff_path, (int)getpid());
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
	f = fd >= 0 ? fdopen(fd, "w") : NULL;
	if (!f) {
		if (fd >= 0)
			close(fd);
		goto fail;
	}
	if (cfg_dump(&s->cur, f) < 0 || fflush(f) || ferror(f)) {
		fclose(f);
		unlink(tmp);
		goto fail;
	}
	if (fclose(f) || rename(tmp, s->eff_path) < 0) {
		unlink(tmp);
		goto fail;
	}
	return;
fail:
	vrd_log(LOG_WARNING, NULL, "cannot write the effective configuration %s: %s", s->eff_path,
	        strerror(errno));
	s->eff_path[0] = '\0';
}

static void effective_remove(struct service *s)
{
	if (s->eff_path[0])
		unlink(s->eff_path);
	s->eff_path[0] = '\0';
}

/* ---- what else the instance leaves in run_dir ----------------------------------------------- */

/*
 * <run_dir>/<instance>.{lock,pub,ctl,pid,yaml} once no live writer holds the instance lock: called
 * after a graceful stop (the ipc writer released the lock and left the lock file and the
 * default ZeroMQ socket) and before a start (files of a crashed predecessor, so that no client
 * reads a dead daemon's pid or configuration, even when this start fails). The lock is held
 * while unlinking, so a daemon starting meanwhile either waits on it and refuses or makes a
 * new one. A live writer's files are never touched.
 */
static void run_dir_clean(const struct vr_config *c)
{
	static const char *const suffixes[] = {"pid", "yaml", "pub", "ctl"};
	char path[CFG_PATH_MAX + CFG_NAME_MAX + 8];
	struct stat st;
	int fd;

	snprintf(path, sizeof(path), "%s/%s.lock", c->ipc.run_dir, c->instance);
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return; /* no lock file: nothing was left */
	if (flock(fd, LOCK_EX | LOCK_NB)) {
		close(fd); /* a live writer's */
		return;
	}
	for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
		char other[sizeof(path)];

		snprintf(other, sizeof(other), "%s/%s.%s", c->ipc.run_dir, c->instance,
		         suffixes[i]);
		/* the ZeroMQ endpoint only if it is a socket: ipc.pub may name other files */
		if (lstat(other, &st) == 0 &&
		    (i < 2 ? S_ISREG(st.st_mode) : S_ISSOCK(st.st_mode)) && unlink(other) < 0 &&
		    errno != ENOENT)
			vrd_log(LOG_WARNING, NULL, "cannot remove %s: %s", other, strerror(errno));
	}
	if (unlink(path) < 0 && errno != ENOENT)
		vrd_log(LOG_WARNING, NULL, "cannot remove %s: %s", path, strerror(errno));
	close(fd);
}

/* ---- status ------------------------------------------------------------------------------ */

static void update_rates(struct service *s, const struct pl_stats *snap, uint64_t now)
{
	const struct vr_config *c = &s->cur;
	double dt = (double)(now - s->prev_ns) / 1e9;
	uint64_t dproc = snap->c.processed - s->prev.processed;
	uint64_t dep = snap->c.epochs_published - s->prev.epochs_published;

	if (dt <= 0)
		return;
	s->rates[0] = (double)dproc * c->geometry.ascans_per_bscan / dt;
	s->rates[1] = (double)dep / dt;
	s->rates[2] = s->rates[1];
	s->rates[3] = (double)dep * (double)cfg_out_voxels(c) / dt / 1e9;
	s->prev = snap->c;
	s->prev_ns = now;
}

static void status_line(struct service *s, const struct pl_stats *snap, int readers, char *buf,
                        size_t len)
{
	struct vrd_render_state rs;
	int n = snprintf(buf, len,
	                 "%s: %.1f volumes/s, %.3g A-scans/s, latency p50 %.1f ms p99 %.1f ms, "
	                 "%" PRIu64 " volumes, %" PRIu64 " dropped B-scans, ring %u/%u, "
	                 "%d readers",
	                 shown_state(s, snap), s->rates[2], s->rates[0],
	                 isfinite(snap->lat_p50[0]) ? snap->lat_p50[0] : 0,
	                 isfinite(snap->lat_p99[0]) ? snap->lat_p99[0] : 0,
	                 snap->c.epochs_published, total_drops(&snap->c), snap->c.in_ring,
	                 snap->c.ring_size, readers);

	if (n > 0 && (size_t)n < len && snap->degraded)
		n += snprintf(buf + n, len - (size_t)n, "; %.200s", snap->fault);
	if (n > 0 && (size_t)n < len && render_degraded(s, &rs))
		n += snprintf(buf + n, len - (size_t)n, "; %.320s", rs.reason);
	if (n > 0 && (size_t)n < len && !strcmp(s->reload_result, "rejected"))
		snprintf(buf + n, len - (size_t)n, "; reload rejected: %.300s", s->reload_message);
	for (char *p = buf; *p; p++)
		if (*p == '\n')
			*p = ' ';
}

/* The pipeline's counters: B-scans, drops by cause, ring, epochs, faults. */
static void status_counters(struct json_object *st, const struct pl_stats *snap)
{
	struct json_object *o;

	o = json_object_new_object();
	jset_u64(o, "acquired", snap->c.acquired);
	jset_u64(o, "processed", snap->c.processed);
	jset_u64(o, "in_ring", snap->c.in_ring);
	jset_u64(o, "missing_ascans", snap->c.missing_ascans);
	jset(st, "bscans", o);
	o = json_object_new_object();
	for (int i = 0; i < PL_DROP_COUNT; i++)
		jset_u64(o, pl_drop_names[i], snap->c.drops[i]);
	jset_u64(o, "total", total_drops(&snap->c));
	jset(st, "drops", o);
	o = json_object_new_object();
	jset_u64(o, "used", snap->c.in_ring);
	jset_u64(o, "size", snap->c.ring_size);
	jset(o, "fill", jnum(snap->c.ring_size ? (double)snap->c.in_ring / snap->c.ring_size : 0));
	jset(st, "ring", o);
	o = json_object_new_object();
	jset_u64(o, "started", snap->c.epochs_started);
	jset_u64(o, "published", snap->c.epochs_published);
	jset_u64(o, "last", snap->last_epoch);
	jset(st, "epochs", o);
	jset_u64(st, "volumes_published", snap->c.epochs_published);
	o = json_object_new_object();
	jset_u64(o, "source", snap->c.source_faults);
	jset_u64(o, "reopens", snap->c.source_reopens);
	jset_u64(o, "dropped_before", snap->c.source_gaps);
	jset_u64(o, "release_ref", snap->c.release_errors);
	jset_u64(o, "timestamps", snap->c.bad_timestamps);
	jset(o, "degraded", json_object_new_boolean(snap->degraded));
	jset(o, "message", jstr(snap->fault));
	jset(st, "faults", o);
}

/* How often the render runs, and why less often than configured. */
static void status_render(const struct service *s, struct json_object *st)
{
	struct vrd_render_state rs;
	bool deg = render_degraded(s, &rs);
	struct json_object *o = json_object_new_object();

	jset_u64(o, "configured_every", rs.configured_every);
	jset_u64(o, "every", rs.every);
	jset(o, "last_ms", jnum(rs.last_ms));
	jset_u64(o, "abandoned", rs.abandoned);
	jset_u64(o, "renders", rs.renders);
	jset(o, "degraded", json_object_new_boolean(rs.degraded));
	jset(o, "overrun", json_object_new_boolean(rs.overrun));
	jset(o, "reason", deg ? jstr(rs.reason) : NULL);
	jset(st, "render", o);
}

/* The service's own: watchdog, the last reload, the last event. */
static void status_service(const struct service *s, struct json_object *st)
{
	struct json_object *o;

	o = json_object_new_object();
	jset(o, "enabled", json_object_new_boolean(s->wd_enabled));
	jset_u64(o, "usec", s->wd_usec);
	jset_u64(o, "pings", s->wd_pings);
	jset_u64(o, "withheld", s->wd_missed);
	jset(st, "watchdog", o);
	o = json_object_new_object();
	jset(o, "result", jstr(s->reload_result));
	jset(o, "message", jstr(s->reload_message));
	jset(st, "reload", o);
	o = json_object_new_object();
	pthread_mutex_lock(&svc.lock);
	jset(o, "event", jstr(svc.last_event));
	jset(o, "message", jstr(svc.last_message));
	jset(o, "time", jnumf((double)svc.last_event_ns / 1e9, "%.3f"));
	pthread_mutex_unlock(&svc.lock);
	jset(st, "last_event", o);
}

/* The "geometry" object of the status: the configuration's, and the output volume's shape. */
static struct json_object *status_geometry(const struct vr_config *c)
{
	struct json_object *o, *a;
	uint32_t Y = c->geometry.bscans_per_volume, X = c->geometry.ascans_per_bscan;

	if (c->reconstruct.mode != CFG_RECON_NONE) {
		Y *= c->geometry.stride[1];
		X *= c->geometry.stride[0];
	}
	o = json_object_new_object();
	jset(o, "samples_per_ascan", json_object_new_int64(c->geometry.samples_per_ascan));
	jset(o, "sample_type", jstr(cfg_sample_name(c->geometry.sample_type)));
	jset(o, "ascans_per_bscan", json_object_new_int64(c->geometry.ascans_per_bscan));
	jset(o, "bscans_per_volume", json_object_new_int64(c->geometry.bscans_per_volume));
	jset(o, "repeats", json_object_new_int64(c->geometry.repeats));
	a = json_object_new_array();
	json_object_array_add(a, json_object_new_int64(c->geometry.stride[0]));
	json_object_array_add(a, json_object_new_int64(c->geometry.stride[1]));
	jset(o, "stride", a);
	a = json_object_new_array();
	json_object_array_add(a, json_object_new_int64(c->geometry.depth_range[0]));
	json_object_array_add(a, json_object_new_int64(c->geometry.depth_range[1]));
	jset(o, "depth_range", a);
	jset(o, "mode", jstr(cfg_recon_mode_name(c->reconstruct.mode)));
	a = json_object_new_array();
	json_object_array_add(a, json_object_new_int64(Y));
	json_object_array_add(a, json_object_new_int64(X));
	json_object_array_add(a, json_object_new_int64(cfg_nz(c)));
	jset(o, "volume", a);
	jset(o, "slots", json_object_new_int64(c->output.slots));
	{
		double um[3];

		cfg_voxel_um(c, um);
		a = json_object_new_array();
		for (int i = 0; i < 3; i++) /* [dx, dy, dz]: null where unknown */
			json_object_array_add(a, um[i] > 0 ? jnum(um[i]) : NULL);
		jset(o, "voxel_size_um", a);
	}
	return o;
}

/* The "channels" array of the status: each channel of output.channels in the volume's order with
 * what its u8 values mean under the live values in force (docs/protocol.md §2.7). */
static struct json_object *status_channels(const struct vr_config *c)
{
	static const char *const names[] = {"structure", "angio", "doppler"};
	struct volrec_channel_desc d[VOLREC_CHANNELS_MAX];
	enum cfg_channel ch[CFG_CH_COUNT];
	uint32_t n = cfg_channels(c, ch);
	struct json_object *a = json_object_new_array(), *o, *r;

	vrd_channel_descs(c, d);
	for (uint32_t i = 0; i < n; i++) {
		o = json_object_new_object();
		jset(o, "name", jstr(names[d[i].kind]));
		jset(o, "units", jstr((const char *)d[i].units));
		r = json_object_new_array();
		json_object_array_add(r, jnum(d[i].value_lo));
		json_object_array_add(r, jnum(d[i].value_hi));
		jset(o, "range", r);
		if (d[i].kind == VOLREC_CHANNEL_ANGIO) {
			jset(o, "method", jstr(d[i].method == VOLREC_ANGIO_SVAR ? "svar" : "cdv"));
			jset(o, "mask_db", jnum(d[i].mask_db));
		} else if (d[i].kind == VOLREC_CHANNEL_DOPPLER) {
			jset(o, "axis",
			     jstr(d[i].method == VOLREC_DOPPLER_BSCAN ? "bscan" : "ascan"));
			jset(o, "mask_db", jnum(d[i].mask_db));
			jset(o, "bulk", json_object_new_boolean(d[i].flags & VOLREC_CHANNEL_BULK));
			jset(o, "period_us", d[i].period_us > 0 ? jnum(d[i].period_us) : NULL);
			if (d[i].velocity_hi_mm_s > 0) {
				r = json_object_new_array();
				json_object_array_add(r, jnum(d[i].velocity_lo_mm_s));
				json_object_array_add(r, jnum(d[i].velocity_hi_mm_s));
			} else {
				r = NULL;
			}
			jset(o, "velocity_mm_s", r);
		}
		json_object_array_add(a, o);
	}
	return a;
}

static struct json_object *status_json(struct service *s, const struct pl_stats *snap, int readers,
                                       uint64_t now)
{
	const struct vr_config *c = &s->cur;
	struct pl_pipeline *pl = vrd_pipeline_engine(s->pl);
	struct vrd_pub *pub = vrd_pipeline_pub(s->pl);
	struct json_object *st = json_object_new_object(), *o, *a;
	struct volrec_shim_info si;
	struct ipc_writer_stats ws;

	pl_source_info(pl, &si);
	vrd_pub_stats(pub, &ws);
	jset(st, "state", jstr(shown_state(s, snap)));
	jset(st, "instance", jstr(c->instance));
	jset(st, "pid", json_object_new_int((int)getpid()));
	jset_u64(st, "session", vrd_pub_session(pub));
	jset(st, "time", jnumf((double)vr_real_ns() / 1e9, "%.3f"));
	jset(st, "config", jstr(s->config_path));

	o = json_object_new_object();
	jset(o, "type", jstr(cfg_source_name(c->source.type)));
	jset(o, "name", jstr(si.name));
	jset(o, "version", jstr(si.version));
	jset(o, "device", jstr(si.device));
	jset(o, "rate", jnum(c->source.rate));
	jset(o, "acquisition", jstr(pl_acquisition(pl)));
	jset(st, "source", o);

	o = json_object_new_object();
	jset(o, "name", jstr(be_name(pl_backend(pl))));
	jset(o, "device", jstr(be_device(pl_backend(pl))));
	jset(st, "backend", o);

	jset(st, "geometry", status_geometry(c));
	jset(st, "channels", status_channels(c));
	jset(st, "generation", json_object_new_int64(s->gens.current));

	if (c->preprocess.background.mode == CFG_BG_PARTIAL_MEDIAN) {
		struct vrd_median_depths md;

		vrd_pub_median_depths(pub, &md);
		a = json_object_new_object();
		jset(a, "mean_per_bscan", md.have ? jnum(md.mean_per_bscan) : NULL);
		jset(a, "max_per_bscan", md.have ? json_object_new_int64(md.max_per_bscan) : NULL);
		jset(a, "depths", json_object_new_int64(md.depths));
		o = json_object_new_object();
		jset(o, "median_depths", a);
		jset(st, "preprocess", o);
	}

	o = json_object_new_object();
	jset(o, "ascans_per_s", jnum(s->rates[0]));
	jset(o, "epochs_per_s", jnum(s->rates[1]));
	jset(o, "volumes_per_s", jnum(s->rates[2]));
	jset(o, "gvox_per_s", jnum(s->rates[3]));
	jset(st, "rates", o);

	o = json_object_new_object();
	for (int i = 0; i < PL_LAT_N; i++) {
		struct json_object *l = json_object_new_object();

		jset(l, "p50", jnum(snap->lat_p50[i]));
		jset(l, "p99", jnum(snap->lat_p99[i]));
		jset(o, pl_lat_names[i], l);
	}
	jset(st, "latency_ms", o);

	status_counters(st, snap);
	status_render(s, st);
	jset(st, "readers", json_object_new_int(readers));
	o = json_object_new_object();
	jset_u64(o, "lease_skips", ws.lease_skips);
	jset_u64(o, "forced_overwrite", ws.forced_overwrite);
	jset_u64(o, "send_errors", ws.send_errors);
	jset_u64(o, "connections_refused", ws.connections_refused);
	jset(st, "publisher", o);
	jset(st, "uptime_s", jnum((double)(now - s->started_ns) / 1e9));
	o = vrd_raw_status(s->raw);
	jset(o, "processed", vrd_rec_status(s->rec));
	jset(st, "recording", o);
	status_service(s, st);
	return st;
}

static void send_status(struct service *s, uint64_t now)
{
	struct pl_stats snap;
	struct json_object *st;
	const char *text;
	char line[1024];
	int readers;

	pl_stats(vrd_pipeline_engine(s->pl), &snap);
	update_rates(s, &snap, now);
	readers = vrd_pub_readers(vrd_pipeline_pub(s->pl));
	{
		struct vrd_render_state rs;
		bool deg = render_degraded(s, &rs);

		if (deg != s->render_was_degraded)
			vrd_log(deg ? LOG_WARNING : LOG_NOTICE, NULL, "%s",
			        deg ? rs.reason : "view.render: rendering as configured again");
		s->render_was_degraded = deg;
	}
	{
		struct ipc_writer_stats ws;

		/* once, then at most once a minute while more come */
		vrd_pub_stats(vrd_pipeline_pub(s->pl), &ws);
		if (ws.connections_refused > s->pub_refused_logged &&
		    (!s->pub_refused_log_ns || now - s->pub_refused_log_ns >= 60000000000ull)) {
			vrd_log(LOG_WARNING, NULL,
			        "publisher: refused %" PRIu64 " connection(s) beyond the %u a "
			        "publisher socket keeps at once (in all, since the session began)",
			        ws.connections_refused, vrd_limits_pub_max(s->cur.ipc.max_readers));
			s->pub_refused_logged = ws.connections_refused;
			s->pub_refused_log_ns = now;
		}
	}
	st = status_json(s, &snap, readers, now);
	text = json_object_to_json_string_ext(st, JSON_C_TO_STRING_PLAIN);
	if (strlen(text) >= VOLREC_TEXT_MAX)
		vrd_log(LOG_WARNING, NULL, "status: %zu bytes of JSON, more than %u: not sent",
		        strlen(text), VOLREC_TEXT_MAX);
	else if (vrd_pub_send(vrd_pipeline_pub(s->pl), VOLREC_TOPIC_STATUS, text) < 0)
		vrd_log(LOG_DEBUG, NULL, "status: not sent (publisher busy)");
	json_object_put(st);
	status_line(s, &snap, readers, line, sizeof(line));
	sd_notifyf(0, "STATUS=%s", line);
}

/* "p50/p99" in ms, "n/a" for a percentile without samples */
static void lat_text(char *buf, size_t len, double p50, double p99)
{
	char a[32] = "n/a", b[32] = "n/a";

	if (isfinite(p50) && p50 >= 0)
		snprintf(a, sizeof(a), "%.2f", p50);
	if (isfinite(p99) && p99 >= 0)
		snprintf(b, sizeof(b), "%.2f", p99);
	snprintf(buf, len, "%s/%s", a, b);
}

static void log_statistics(struct service *s)
{
	struct pl_stats snap;
	struct vrd_median_depths md;
	char drops[512], lat[4][72], median[128] = "";
	int n = 0;

	pl_stats(vrd_pipeline_engine(s->pl), &snap);
	for (int i = 0; i < 4; i++) /* a stage without samples yet has no percentiles */
		lat_text(lat[i], sizeof(lat[i]), snap.lat_p50[i], snap.lat_p99[i]);
	for (int i = 0; i < PL_DROP_COUNT; i++)
		n += snprintf(drops + n, sizeof(drops) - (size_t)n, "%s%s %" PRIu64, i ? ", " : "",
		              pl_drop_names[i], snap.c.drops[i]);
	vrd_pub_median_depths(vrd_pipeline_pub(s->pl), &md);
	if (s->cur.preprocess.background.mode == CFG_BG_PARTIAL_MEDIAN && md.have)
		snprintf(median, sizeof(median),
		         "; partial_median: median depths per B-scan of the last volume mean %.2f "
		         "max %u of %u",
		         md.mean_per_bscan, md.max_per_bscan, md.depths);
	else if (s->cur.preprocess.background.mode == CFG_BG_PARTIAL_MEDIAN)
		snprintf(median, sizeof(median), "; partial_median: no volume yet");
	vrd_log(LOG_NOTICE, "statistics",
	        "statistics: state %s, uptime %.1f s, B-scans acquired %" PRIu64
	        " processed %" PRIu64 " in ring %u/%u; A-scans missing (non-finite) %" PRIu64
	        "; epochs started %" PRIu64 " published %" PRIu64
	        "; drops: %s; source faults %" PRIu64 " reopens %" PRIu64 " dropped_before %" PRIu64
	        " release_ref errors %" PRIu64 " timestamps off %" PRIu64
	        "; latency ms p50/p99: acquire->publish %s, preprocess %s, reconstruct %s, "
	        "publish %s; readers %d; rates %.1f volumes/s "
	        "%.3g A-scans/s; watchdog pings %" PRIu64 " withheld %" PRIu64 "%s",
	        shown_state(s, &snap), (double)(vr_mono_ns() - s->started_ns) / 1e9,
	        snap.c.acquired, snap.c.processed, snap.c.in_ring, snap.c.ring_size,
	        snap.c.missing_ascans, snap.c.epochs_started, snap.c.epochs_published, drops,
	        snap.c.source_faults, snap.c.source_reopens, snap.c.source_gaps,
	        snap.c.release_errors, snap.c.bad_timestamps, lat[0], lat[1], lat[2], lat[3],
	        vrd_pub_readers(vrd_pipeline_pub(s->pl)), s->rates[2], s->rates[0], s->wd_pings,
	        s->wd_missed, median);
}

/* ---- watchdog ---------------------------------------------------------------------------- */

/*
 * The pipeline made progress since the last ping when the processing thread finished an epoch,
 * or when it is waiting for input and the acquisition thread is legitimately idle or busy:
 * a call into the source returned (data, error or timeout), or it sleeps in a bounded back-off,
 * or the replay file ended. A stage stuck inside the backend or inside the source stops pings.
 */
static void watchdog_tick(struct service *s)
{
	struct pl_progress p;
	bool ok;

	pl_progress(vrd_pipeline_engine(s->pl), &p);
	ok = p.proc_epochs != s->wd_last.proc_epochs ||
	     (p.proc_waiting && (p.acq_returns != s->wd_last.acq_returns ||
	                         p.acq_state == PL_ACQ_BACKOFF || p.acq_state == PL_ACQ_ENDED));
	if (ok) {
		sd_notify(0, "WATCHDOG=1");
		s->wd_last = p;
		s->wd_pings++;
	} else {
		s->wd_missed++;
		vrd_log(LOG_WARNING, "watchdog",
		        "watchdog: no pipeline progress since the last ping (processing %s, "
		        "acquisition %s): ping withheld",
		        p.proc_waiting ? "waiting for input" : "busy on one epoch",
		        p.acq_state == PL_ACQ_ACQUIRING   ? "inside the source"
		        : p.acq_state == PL_ACQ_WAIT_ROOM ? "waiting for ring room"
		                                          : "idle");
	}
}

/* ---- reload ------------------------------------------------------------------------------ */

static void reload_reject(struct service *s, const char *msg)
{
	snprintf(s->reload_result, sizeof(s->reload_result), "rejected");
	snprintf(s->reload_message, sizeof(s->reload_message), "%s", msg);
	vrd_event("reload_rejected", LOG_ERR, msg, NULL);
	s->state = SVC_RUNNING;
	sd_notify(0, "READY=1");
}

static void reload_accepted(struct service *s, bool structural)
{
	char msg[CFG_PATH_MAX + 64];
	struct json_object *extra;

	snprintf(s->reload_result, sizeof(s->reload_result), "ok");
	s->reload_message[0] = '\0';
	vrd_log_set_level(s->cur.log.level);
	effective_write(s);
	snprintf(msg, sizeof(msg), "configuration %s reloaded%s", s->config_path,
	         structural ? " (rebuilt: new session)" : " (live parameters)");
	extra = json_object_new_object();
	jset(extra, "structural", json_object_new_boolean(structural));
	vrd_event("reloaded", LOG_NOTICE, msg, extra);
	s->state = SVC_RUNNING;
	sd_notify(0, "READY=1");
}

static void ctl_open(struct service *s);

#define STUCK_NOTE                                                                                 \
	" (the previous source never returned from a call and may still hold its device: "         \
	"exiting, so that a restart frees it)"

/* Whether a structural reload from cur to next starts record.name's recording: next names
 * one, and another file than cur did (the same name is the recording cur already made). */
static bool record_anew(const struct vr_config *cur, const struct vr_config *next)
{
	return next->record.name[0] && (strcmp(cur->record.name, next->record.name) ||
	                                strcmp(cur->record.dir, next->record.dir));
}

/* Why next's record.name cannot be recorded (an invalid name, an existing file), in err: true;
 * false when it can. A reload that would fail so is refused as a whole (docs/recording.md). */
static bool record_conflict(const struct vr_config *next, char *err, size_t errlen)
{
	char path[CFG_PATH_MAX + CFG_NAME_MAX + 8];

	if (!vrd_record_name_ok(next->record.name)) {
		snprintf(err, errlen,
		         "record.name '%.64s' is not allowed (letters, digits, '-', '_' and '.', "
		         "not first): keeping the previous configuration",
		         next->record.name);
		return true;
	}
	snprintf(path, sizeof(path), "%s/%s.vrr", next->record.dir, next->record.name);
	if (access(path, F_OK) == 0) {
		snprintf(err, errlen,
		         "record.name %s: %.700s exists (a recording is never replaced: name "
		         "another "
		         "one): keeping the previous configuration",
		         next->record.name, path);
		return true;
	}
	return false;
}

/* Returns 0, or -1 when neither the new nor the old configuration can run (fatal). */
/* A structural change failed to start with next (its message in err): back on the previous
 * configuration, the reload rejected. -1 when even that fails (fatal). */
static int reload_fall_back(struct service *s, const char *err, unsigned abandoned)
{
	struct vrd_pipeline *pl = NULL;
	char msg[CFG_ERR_MAX + 64], err2[CFG_ERR_MAX];

	vrd_gen_drop(&s->gens, s->next_gen);
	snprintf(msg, sizeof(msg), "%s: %s (keeping the previous configuration)", s->config_path,
	         err);
	if (vrd_pipeline_start(&s->cur, s->gens.current, s->raw, s->rec, false, &pl, err2,
	                       sizeof(err2)) < 0) {
		bool stuck = vrd_pipeline_abandoned() != abandoned;

		vrd_log(LOG_ERR, "fatal",
		        "cannot rebuild with the previous configuration either: %s%s", err2,
		        stuck ? STUCK_NOTE : "");
		return -1;
	}
	s->pl = pl;
	set_event_pub(vrd_pipeline_pub(pl));
	if (!s->pid_path[0])
		pidfile_write(s);
	if (!s->eff_path[0])
		effective_write(s);
	reload_reject(s, msg);
	return 0;
}

/* A structural change: drain, rebuild with next (which it takes), new session. -1 when
 * neither next nor the previous configuration starts (fatal). */
static int reload_rebuild(struct service *s, struct vr_config *next)
{
	char err[CFG_ERR_MAX];
	struct vrd_pipeline *pl = NULL;
	bool unlink_old = !s->cur.ipc.keep_shm, record = record_anew(&s->cur, next);
	unsigned abandoned;

	if (record && record_conflict(next, err, sizeof(err))) {
		/* refused before anything stops: a recording in progress goes on */
		vrd_gen_drop(&s->gens, s->next_gen);
		cfg_free(next);
		reload_reject(s, err);
		return 0;
	}
	set_event_pub(NULL);
	abandoned = vrd_pipeline_abandoned();
	vrd_pipeline_stop(s->pl, unlink_old, "structural reload");
	s->pl = NULL;
	if (strcmp(s->cur.instance, next->instance) ||
	    strcmp(s->cur.ipc.run_dir, next->ipc.run_dir)) {
		pidfile_remove(s);
		effective_remove(s);
		run_dir_clean(&s->cur);
	}
	if (vrd_pipeline_start(next, s->next_gen, s->raw, s->rec, record, &pl, err, sizeof(err)) <
	    0) {
		cfg_free(next);
		return reload_fall_back(s, err, abandoned);
	}
	cfg_free(&s->cur);
	s->cur = *next;
	vrd_gen_commit(&s->gens, s->next_gen);
	s->pl = pl;
	pthread_mutex_lock(&svc.lock);
	snprintf(svc.instance, sizeof(svc.instance), "%s", s->cur.instance);
	pthread_mutex_unlock(&svc.lock);
	vrd_log_set_instance(s->cur.instance);
	set_event_pub(vrd_pipeline_pub(pl));
	if (!s->pid_path[0])
		pidfile_write(s);
	memset(&s->prev, 0, sizeof(s->prev));
	memset(&s->wd_last, 0, sizeof(s->wd_last));
	s->prev_ns = vr_mono_ns();
	ctl_open(s);
	reload_accepted(s, true);
	return 0;
}

static int reload_start(struct service *s)
{
	char err[CFG_ERR_MAX];
	struct vr_config next;
	int rc;

	s->state = SVC_RELOADING;
	sd_notifyf(0, "RELOADING=1\nMONOTONIC_USEC=%" PRIu64 "\nSTATUS=reloading %s",
	           vr_mono_ns() / 1000, s->config_path);
	vrd_log(LOG_INFO, "reloading", "reloading %s", s->config_path);
	if (s->runtime_keys[0]) {
		vrd_log(LOG_NOTICE, NULL,
		        "reloading %s drops the runtime changes made with set (%s)", s->config_path,
		        s->runtime_keys);
		s->runtime_keys[0] = '\0';
	}
	cfg_defaults(&next);
	rc = cfg_load(&next, s->config_path, err, sizeof(err));
	if (rc < 0) {
		cfg_free(&next);
		reload_reject(s, err);
		return 0;
	}
	if (vrd_gen_propose(&s->gens, &next, &s->next_gen) < 0) {
		cfg_free(&next);
		reload_reject(s, "out of memory for the live parameters' generation");
		return 0;
	}
	if (cfg_is_structural_change(&s->cur, &next))
		return reload_rebuild(s, &next);
	/* live: the pipeline stays, and a raw recording in progress goes on */
	vrd_pub_propose(vrd_pipeline_pub(s->pl), &next, s->next_gen);
	rc = pl_request_live(vrd_pipeline_engine(s->pl), &next, s->next_gen, &s->live_ticket);
	if (rc < 0) {
		vrd_gen_drop(&s->gens, s->next_gen);
		cfg_free(&next);
		reload_reject(s, "out of memory applying the live parameters");
		return 0;
	}
	s->next = next; /* owned until the processing thread has applied it */
	s->live_pending = true;
	return 0;
}

/* ---- the control socket ---------------------------------------------------------------------- */

static const struct vr_config *ctl_config(void *ctx)
{
	return &((struct service *)ctx)->cur;
}

/* "uid U (pid P)", and "via WHOM" when the peer asked for someone else (the web viewer names
 * the browser's token). */
static void peer_text(const struct vrd_ctl_peer *p, char *buf, size_t len)
{
	if (p->have_uid)
		snprintf(buf, len, "uid %u (pid %d)%s%s", (unsigned)p->uid, (int)p->pid,
		         p->via[0] ? " via " : "", p->via);
	else
		snprintf(buf, len, "an unknown peer%s%s", p->via[0] ? " via " : "", p->via);
}

/* A `set` validated by the configuration's rules: applied like a live reload, between volumes;
 * the reply says it was queued, the log and the `set` event say when it took effect. */
static int ctl_apply(void *ctx, const struct vr_config *next, const char *const *paths, size_t n,
                     const struct vrd_ctl_peer *peer, char *err, size_t errlen)
{
	struct service *s = ctx;
	size_t len = 0;
	int rc;

	if (s->live_pending || s->state != SVC_RUNNING)
		return vr_err(err, errlen, -EBUSY,
		              "a reload or another set is being applied: retry in a moment");
	cfg_defaults(&s->next);
	if (cfg_copy(&s->next, next) < 0)
		return vr_err(err, errlen, -ENOMEM, "out of memory");
	if (vrd_gen_propose(&s->gens, &s->next, &s->next_gen) < 0) {
		cfg_free(&s->next);
		return vr_err(err, errlen, -ENOMEM, "out of memory");
	}
	vrd_pub_propose(vrd_pipeline_pub(s->pl), &s->next, s->next_gen);
	rc = pl_request_live(vrd_pipeline_engine(s->pl), &s->next, s->next_gen, &s->live_ticket);
	if (rc < 0) {
		vrd_gen_drop(&s->gens, s->next_gen);
		cfg_free(&s->next);
		return vr_err(err, errlen, rc, "out of memory applying the live parameters");
	}
	s->set_keys[0] = '\0';
	for (size_t i = 0; i < n; i++)
		len += (size_t)snprintf(s->set_keys + len,
		                        len < sizeof(s->set_keys) ? sizeof(s->set_keys) - len : 0,
		                        "%s%s", i ? ", " : "", paths[i]);
	s->set_peer = *peer;
	s->set_pending = true;
	s->live_pending = true;
	return 0;
}

/* The processing thread applied (or the backend refused) the pending `set`. */
static void set_done(struct service *s, int rc, const char *err)
{
	char who[64 + VRD_CTL_VIA_MAX], msg[2048];
	struct json_object *extra = json_object_new_object();

	peer_text(&s->set_peer, who, sizeof(who));
	jset(extra, "keys", jstr(s->set_keys));
	if (s->set_peer.have_uid)
		jset(extra, "uid", json_object_new_int64(s->set_peer.uid));
	if (s->set_peer.via[0])
		jset(extra, "via", jstr(s->set_peer.via));
	if (rc < 0) {
		snprintf(msg, sizeof(msg), "set %s by %s: refused: %s", s->set_keys, who, err);
		vrd_gen_drop(&s->gens, s->next_gen);
		cfg_free(&s->next);
		vrd_event("set_rejected", LOG_ERR, msg, extra);
		return;
	}
	cfg_free(&s->cur);
	s->cur = s->next;
	cfg_defaults(&s->next);
	vrd_gen_commit(&s->gens, s->next_gen);
	jset(extra, "generation", json_object_new_int64(s->next_gen));
	vrd_log_set_level(s->cur.log.level);
	vrd_pub_update(vrd_pipeline_pub(s->pl), &s->cur);
	effective_write(s);
	{
		size_t l = strlen(s->runtime_keys);
		snprintf(s->runtime_keys + l, sizeof(s->runtime_keys) - l, "%s%s", l ? ", " : "",
		         s->set_keys);
	}
	snprintf(msg, sizeof(msg),
	         "set %s by %s (runtime change: a reload re-reads %s and drops it)", s->set_keys,
	         who, s->config_path);
	vrd_event("set", LOG_NOTICE, msg, extra);
}

static int ctl_reset(void *ctx, const struct vrd_ctl_peer *peer, char *err, size_t errlen)
{
	struct service *s = ctx;
	char who[64 + VRD_CTL_VIA_MAX];

	(void)err, (void)errlen;
	peer_text(peer, who, sizeof(who));
	vrd_log(LOG_INFO, NULL, "reset_history by %s: resetting the reconstruction history", who);
	pl_request_reset(vrd_pipeline_engine(s->pl));
	return 0;
}

static const char *ctl_generation(void *ctx, uint32_t n, uint32_t *current, uint32_t *oldest)
{
	struct service *s = ctx;

	*current = s->gens.current;
	*oldest = vrd_gen_oldest(&s->gens);
	return vrd_gen_values(&s->gens, n);
}

static struct json_object *ctl_status(void *ctx)
{
	struct service *s = ctx;
	struct pl_stats snap;

	pl_stats(vrd_pipeline_engine(s->pl), &snap);
	return status_json(s, &snap, vrd_pub_readers(vrd_pipeline_pub(s->pl)), vr_mono_ns());
}

static int ctl_record_start(void *ctx, bool raw, const char *name, uint64_t count, double seconds,
                            const struct vrd_ctl_peer *peer, char *err, size_t errlen)
{
	struct service *s = ctx;
	char who[64 + VRD_CTL_VIA_MAX];
	int rc;

	peer_text(peer, who, sizeof(who));
	rc = raw ? vrd_raw_start(s->raw, &s->cur, name, count, seconds, err, errlen)
	         : vrd_rec_start(s->rec, &s->cur, name, count, seconds, err, errlen);
	if (rc == 0)
		vrd_log(LOG_NOTICE, NULL, "record_start by %s: %s recording %s", who,
		        raw ? "raw" : "processed", name);
	return rc;
}

static int ctl_record_stop(void *ctx, bool raw, const struct vrd_ctl_peer *peer, char *err,
                           size_t errlen)
{
	struct service *s = ctx;
	char who[64 + VRD_CTL_VIA_MAX];

	peer_text(peer, who, sizeof(who));
	vrd_log(LOG_INFO, NULL, "record_stop by %s (%s recording)", who, raw ? "raw" : "processed");
	return raw ? vrd_raw_stop(s->raw, err, errlen) : vrd_rec_stop(s->rec, err, errlen);
}

/* (Re)open the control socket of the instance in force; a failure is logged, not fatal. */
static void ctl_open(struct service *s)
{
	const struct vrd_ctl_ops o = {.ctx = s,
	                              .config = ctl_config,
	                              .apply = ctl_apply,
	                              .reset_history = ctl_reset,
	                              .status = ctl_status,
	                              .generation = ctl_generation,
	                              .record_start = ctl_record_start,
	                              .record_stop = ctl_record_stop};
	char path[CFG_PATH_MAX + CFG_NAME_MAX + 16], err[512];

	vrd_ctl_close(s->ctl);
	s->ctl = NULL;
	snprintf(path, sizeof(path), "%s/%s.ctl", s->cur.ipc.run_dir, s->cur.instance);
	if (vrd_ctl_open(path, vrd_limits_ctl_max(), &o, &s->ctl, err, sizeof(err)) < 0)
		vrd_log(LOG_ERR, NULL, "%s: volrec get/set will not work", err);
	else
		vrd_log(LOG_INFO, NULL, "control socket %s", path);
}

static void ctl_close(struct service *s)
{
	vrd_ctl_close(s->ctl);
	s->ctl = NULL;
}

static void reload_poll(struct service *s)
{
	char err[512];
	int rc;

	if (!s->live_pending ||
	    !pl_live_done(vrd_pipeline_engine(s->pl), s->live_ticket, &rc, err, sizeof(err)))
		return;
	s->live_pending = false;
	if (s->set_pending) {
		s->set_pending = false;
		set_done(s, rc, err);
		return;
	}
	if (rc < 0) {
		char msg[600];

		snprintf(msg, sizeof(msg), "%s: the live parameters were refused: %s",
		         s->config_path, err);
		vrd_gen_drop(&s->gens, s->next_gen);
		cfg_free(&s->next);
		reload_reject(s, msg);
		return;
	}
	cfg_free(&s->cur);
	s->cur = s->next;
	vrd_gen_commit(&s->gens, s->next_gen);
	vrd_pub_update(vrd_pipeline_pub(s->pl), &s->cur);
	reload_accepted(s, false);
}

/* ---- run ---------------------------------------------------------------------------------- */

/* Block the signals the service reads from its signalfd (every thread inherits the mask), and
 * raise the descriptor limit. The signalfd, or -1 (logged). */
static int service_signals(void)
{
	sigset_t mask;
	int sfd;

	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	sigaddset(&mask, SIGUSR1);
	sigaddset(&mask, SIGUSR2);
	if (pthread_sigmask(SIG_BLOCK, &mask, NULL) != 0) {
		vrd_log(LOG_ERR, NULL, "cannot block signals");
		return -1;
	}
	signal(SIGPIPE, SIG_IGN);
	vrd_limits_init();
	sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sfd < 0)
		vrd_log(LOG_ERR, NULL, "signalfd: %s", strerror(errno));
	return sfd;
}

/* Start the pipeline, the files and the control socket; tell systemd. -1 on failure. */
static int service_start(struct service *s)
{
	struct volrec_shim_info si;
	char err[CFG_ERR_MAX], msg[1024];
	int rc;

	s->state = SVC_STARTING;
	s->started_ns = vr_mono_ns();
	run_dir_clean(&s->cur);
	if (vrd_gen_init(&s->gens, &s->cur) < 0) {
		vrd_log(LOG_ERR, "start_failed", "cannot start: out of memory");
		return -1;
	}
	rc = vrd_raw_open(&s->cur, &s->raw, err, sizeof(err));
	if (rc == 0)
		rc = vrd_rec_open(&s->cur, &s->gens, &s->rec, err, sizeof(err));
	if (rc == 0)
		rc = vrd_pipeline_start(&s->cur, s->gens.current, s->raw, s->rec, true, &s->pl, err,
		                        sizeof(err));
	if (rc < 0) {
		vrd_log(LOG_ERR, "start_failed", "cannot start: %s", err);
		sd_notifyf(0, "STATUS=failed to start: %s", err);
		run_dir_clean(&s->cur);
		vrd_raw_close(s->raw);
		s->raw = NULL;
		vrd_rec_close(s->rec);
		s->rec = NULL;
		return -1;
	}
	set_event_pub(vrd_pipeline_pub(s->pl));
	pidfile_write(s);
	effective_write(s);
	ctl_open(s);
	s->wd_enabled = sd_watchdog_enabled(0, &s->wd_usec) > 0;
	s->state = SVC_RUNNING;
	s->prev_ns = vr_mono_ns();
	pl_source_info(vrd_pipeline_engine(s->pl), &si);
	snprintf(msg, sizeof(msg),
	         "started: instance %s, source %s (%s), backend %s (%s), session %016" PRIx64 "%s",
	         s->cur.instance, cfg_source_name(s->cur.source.type), si.name,
	         be_name(pl_backend(vrd_pipeline_engine(s->pl))),
	         be_device(pl_backend(vrd_pipeline_engine(s->pl))),
	         vrd_pub_session(vrd_pipeline_pub(s->pl)), s->wd_enabled ? ", watchdog on" : "");
	vrd_event("started", LOG_NOTICE, msg, NULL);
	sd_notifyf(0, "READY=1\nMAINPID=%d\nSTATUS=running", (int)getpid());
	return 0;
}

/* The signals that came: *stop and *reload set, the others acted on at once. */
static void service_read_signals(struct service *s, int sfd, bool *stop, bool *reload)
{
	struct signalfd_siginfo si;

	while (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		switch (si.ssi_signo) {
		case SIGTERM:
		case SIGINT:
			vrd_log(LOG_INFO, NULL, "%s received: stopping",
			        si.ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT");
			*stop = true;
			break;
		case SIGHUP:
			*reload = true;
			break;
		case SIGUSR1:
			log_statistics(s);
			break;
		case SIGUSR2:
			vrd_log(LOG_INFO, NULL, "SIGUSR2: resetting the reconstruction history");
			pl_request_reset(vrd_pipeline_engine(s->pl));
			break;
		}
	}
}

/* The service loop: signals, reloads, control requests, status and watchdog, until a stop
 * (0) or a reload that cannot go on (-1). */
static int service_loop(struct service *s, int sfd)
{
	uint64_t next_status, next_wd = 0;
	bool stop = false, reload = false, ctl_more = false;

	next_status = vr_mono_ns() + (uint64_t)s->cur.ipc.status_interval_ms * 1000000ull;
	if (s->wd_enabled)
		next_wd = vr_mono_ns() + s->wd_usec * 1000ull / 2;
	while (!stop) {
		struct pollfd pfd[2] = {{.fd = sfd, .events = POLLIN},
		                        {.fd = s->ctl ? vrd_ctl_fd(s->ctl) : -1, .events = POLLIN}};
		uint64_t now = vr_mono_ns(), wake = next_status;
		int timeout;

		if (s->wd_enabled && next_wd < wake)
			wake = next_wd;
		timeout = wake > now ? (int)((wake - now + 999999) / 1000000) : 0;
		if (s->live_pending && timeout > 10)
			timeout = 10;
		if (ctl_more)
			timeout = 0; /* a full burst answered: more requests may wait */
		if (poll(pfd, 2, timeout) < 0 && errno != EINTR) {
			vrd_log(LOG_ERR, NULL, "poll: %s", strerror(errno));
			break;
		}
		service_read_signals(s, sfd, &stop, &reload);
		if (stop)
			break;
		reload_poll(s);
		ctl_more = s->ctl && vrd_ctl_process(s->ctl) == VRD_CTL_BURST;
		if (reload && !s->live_pending) {
			reload = false;
			if (reload_start(s) < 0)
				return -1;
		}
		now = vr_mono_ns();
		if (now >= next_status) {
			send_status(s, now);
			next_status = now + (uint64_t)s->cur.ipc.status_interval_ms * 1000000ull;
		}
		if (s->wd_enabled && now >= next_wd) {
			watchdog_tick(s);
			next_wd = now + s->wd_usec * 1000ull / 2;
		}
	}
	return 0;
}

int vrd_service_run(const char *config_path, const struct vr_config *cfg)
{
	struct service s = {.config_path = config_path};
	int sfd, status = 1;

	cfg_defaults(&s.cur);
	cfg_defaults(&s.next);
	if (cfg_copy(&s.cur, cfg) < 0) {
		fprintf(stderr, "volrecd: out of memory\n");
		return 1;
	}
	vrd_log_init(s.cur.instance, s.cur.log.level);
	snprintf(svc.instance, sizeof(svc.instance), "%s", s.cur.instance);
	sfd = service_signals();
	if (sfd < 0)
		goto out_cfg;
	if (service_start(&s) < 0)
		goto out_sfd;
	if (service_loop(&s, sfd) < 0)
		goto out_pid;

	s.state = SVC_STOPPING;
	ctl_close(&s);
	sd_notify(0, "STOPPING=1\nSTATUS=stopping");
	vrd_event("stopping", LOG_NOTICE, "stopping: draining the pipeline", NULL);
	set_event_pub(NULL);
	vrd_pipeline_stop(s.pl, !s.cur.ipc.keep_shm, "volrecd stopping");
	s.pl = NULL;
	vrd_log(LOG_INFO, "stopped", "stopped");
	status = 0;
out_pid:
	ctl_close(&s);
	if (s.live_pending)
		cfg_free(&s.next);
	if (s.pl) {
		set_event_pub(NULL);
		vrd_pipeline_stop(s.pl, !s.cur.ipc.keep_shm, "volrecd stopping");
	}
	vrd_raw_close(s.raw);
	vrd_rec_close(s.rec);
	pidfile_remove(&s);
	effective_remove(&s);
	run_dir_clean(&s.cur);
out_sfd:
	close(sfd);
out_cfg:
	vrd_gen_free(&s.gens);
	cfg_free(&s.cur);
	return status;
}
