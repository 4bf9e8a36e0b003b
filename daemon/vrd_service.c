/* SPDX-License-Identifier: MIT */
/*
 * The volrecd service loop: signals through a signalfd (no work in async handlers), reloads,
 * the systemd notify protocol (READY, RELOADING, STOPPING, STATUS, WATCHDOG), the periodic
 * status message, lifecycle events and the pid file.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
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

#include "internal.h"

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

void vrd_event_at(const char *file, int line, const char *func, const char *name, int prio,
                  const char *message, const char *extra_json)
{
	char buf[4096];
	struct vrd_json j;

	vrd_log_at(file, line, func, prio, name, "%s", message ? message : name);
	pthread_mutex_lock(&svc.lock);
	vrd_json_init(&j, buf, sizeof(buf));
	vrd_json_raw(&j, "{\"event\":");
	vrd_json_str(&j, name);
	vrd_json_raw(&j, ",\"instance\":");
	vrd_json_str(&j, svc.instance);
	vrd_json_raw(&j, ",\"time\":%.3f", (double)vrd_realtime_ns() / 1e9);
	if (svc.pub)
		vrd_json_raw(&j, ",\"session\":%" PRIu64, vrd_pub_session(svc.pub));
	if (message) {
		vrd_json_raw(&j, ",\"message\":");
		vrd_json_str(&j, message);
	}
	if (extra_json && *extra_json)
		vrd_json_raw(&j, ",%s", extra_json);
	vrd_json_raw(&j, "}");
	snprintf(svc.last_event, sizeof(svc.last_event), "%s", name);
	snprintf(svc.last_message, sizeof(svc.last_message), "%s", message ? message : "");
	svc.last_event_ns = vrd_realtime_ns();
	if (svc.pub && !j.overflow && vrd_pub_send(svc.pub, VOLREC_TOPIC_EVENT, buf) < 0)
		vrd_log(LOG_DEBUG, NULL, "event %s: not sent (publisher busy)", name);
	pthread_mutex_unlock(&svc.lock);
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
	enum svc_state state;
	uint64_t started_ns;
	char pid_path[CFG_PATH_MAX + CFG_NAME_MAX + 8];
	char eff_path[CFG_PATH_MAX + CFG_NAME_MAX + 8]; /* <run_dir>/<instance>.yaml, "" if none */

	/* reload */
	bool live_pending;
	uint64_t live_ticket;
	struct vr_config next;  /* the configuration being applied live */
	char reload_result[16]; /* "", "ok", "rejected" */
	char reload_message[CFG_ERR_MAX];

	/* rates: the snapshot of the previous status */
	struct vrd_counters prev;
	uint64_t prev_ns;
	double rates[4]; /* A-scans/s, epochs/s, volumes/s, GVox/s */

	/* watchdog */
	bool wd_enabled;
	uint64_t wd_usec;
	struct vrd_progress wd_last;
	uint64_t wd_pings, wd_missed;
};

static uint64_t total_drops(const struct vrd_counters *c)
{
	uint64_t n = 0;

	for (int i = 0; i < VRD_DROP_COUNT; i++)
		n += c->drops[i];
	return n;
}

static const char *shown_state(const struct service *s, const struct vrd_snapshot *snap)
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
 * <run_dir>/<instance>.{lock,pub,pid,yaml} once no live writer holds the instance lock: called
 * after a graceful stop (the ipc writer released the lock and left the lock file and the
 * default ZeroMQ socket) and before a start (files of a crashed predecessor, so that no client
 * reads a dead daemon's pid or configuration, even when this start fails). The lock is held
 * while unlinking, so a daemon starting meanwhile either waits on it and refuses or makes a
 * new one. A live writer's files are never touched.
 */
static void run_dir_clean(const struct vr_config *c)
{
	static const char *const suffixes[] = {"pid", "yaml", "pub"};
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

static void update_rates(struct service *s, const struct vrd_snapshot *snap, uint64_t now)
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

static void status_line(struct service *s, const struct vrd_snapshot *snap, int readers, char *buf,
                        size_t len)
{
	int n = snprintf(buf, len,
	                 "%s: %.1f volumes/s, %.3g A-scans/s, latency p50 %.1f ms p99 %.1f ms, "
	                 "%" PRIu64 " volumes, %" PRIu64 " dropped B-scans, ring %u/%u, "
	                 "%d readers",
	                 shown_state(s, snap), s->rates[2], s->rates[0],
	                 snap->lat_p50[0] < 0 ? 0 : snap->lat_p50[0],
	                 snap->lat_p99[0] < 0 ? 0 : snap->lat_p99[0], snap->c.epochs_published,
	                 total_drops(&snap->c), snap->c.ring_used, snap->c.ring_size, readers);

	if (n > 0 && (size_t)n < len && snap->degraded)
		n += snprintf(buf + n, len - (size_t)n, "; %.200s", snap->fault);
	if (n > 0 && (size_t)n < len && !strcmp(s->reload_result, "rejected"))
		snprintf(buf + n, len - (size_t)n, "; reload rejected: %.300s", s->reload_message);
	for (char *p = buf; *p; p++)
		if (*p == '\n')
			*p = ' ';
}

static void lat_json(struct vrd_json *j, const char *name, double p50, double p99, bool comma)
{
	vrd_json_raw(j, "%s\"%s\":{\"p50\":", comma ? "," : "", name);
	if (p50 < 0)
		vrd_json_raw(j, "null");
	else
		vrd_json_num(j, p50);
	vrd_json_raw(j, ",\"p99\":");
	if (p99 < 0)
		vrd_json_raw(j, "null");
	else
		vrd_json_num(j, p99);
	vrd_json_raw(j, "}");
}

static void status_json(struct service *s, const struct vrd_snapshot *snap, int readers,
                        uint64_t now, char *buf, size_t len)
{
	const struct vr_config *c = &s->cur;
	struct volrec_shim_info info, *si = &info;
	struct vrd_pub *pub = vrd_pipeline_pub(s->pl);
	static const char *const lat_names[] = {"acquire_to_publish", "preprocess", "reconstruct",
	                                        "publish"};
	struct ipc_writer_stats ws;
	struct vrd_json j;
	uint32_t Y = c->geometry.bscans_per_volume, X = c->geometry.ascans_per_bscan;

	if (c->reconstruct.mode != CFG_RECON_NONE) {
		Y *= c->geometry.stride[1];
		X *= c->geometry.stride[0];
	}
	vrd_pipeline_source_info(s->pl, &info);
	vrd_pub_stats(pub, &ws);
	vrd_json_init(&j, buf, len);
	vrd_json_raw(&j, "{\"state\":");
	vrd_json_str(&j, shown_state(s, snap));
	vrd_json_raw(&j, ",\"instance\":");
	vrd_json_str(&j, c->instance);
	vrd_json_raw(&j, ",\"pid\":%d,\"session\":%" PRIu64 ",\"time\":%.3f", (int)getpid(),
	             vrd_pub_session(pub), (double)vrd_realtime_ns() / 1e9);
	vrd_json_raw(&j, ",\"config\":");
	vrd_json_str(&j, s->config_path);
	vrd_json_raw(&j, ",\"source\":{\"type\":");
	vrd_json_str(&j, cfg_source_name(c->source.type));
	vrd_json_raw(&j, ",\"name\":");
	vrd_json_str(&j, si->name);
	vrd_json_raw(&j, ",\"version\":");
	vrd_json_str(&j, si->version);
	vrd_json_raw(&j, ",\"device\":");
	vrd_json_str(&j, si->device);
	vrd_json_raw(&j, ",\"rate\":");
	vrd_json_num(&j, c->source.rate);
	vrd_json_raw(&j, ",\"acquisition\":");
	vrd_json_str(&j, vrd_pipeline_acquisition(s->pl));
	vrd_json_raw(&j, "},\"backend\":{\"name\":");
	vrd_json_str(&j, vrd_pipeline_backend_name(s->pl));
	vrd_json_raw(&j, ",\"device\":");
	vrd_json_str(&j, vrd_pipeline_device(s->pl));
	vrd_json_raw(&j, "},\"geometry\":{\"samples_per_ascan\":%u,\"sample_type\":",
	             c->geometry.samples_per_ascan);
	vrd_json_str(&j, cfg_sample_name(c->geometry.sample_type));
	vrd_json_raw(&j,
	             ",\"ascans_per_bscan\":%u,\"bscans_per_volume\":%u,\"stride\":[%u,%u],"
	             "\"depth_range\":[%u,%u],\"mode\":",
	             c->geometry.ascans_per_bscan, c->geometry.bscans_per_volume,
	             c->geometry.stride[0], c->geometry.stride[1], c->geometry.depth_range[0],
	             c->geometry.depth_range[1]);
	vrd_json_str(&j, cfg_recon_mode_name(c->reconstruct.mode));
	vrd_json_raw(&j, ",\"volume\":[%u,%u,%u],\"slots\":%u}", Y, X, cfg_nz(c), c->output.slots);
	vrd_json_raw(&j, ",\"rates\":{\"ascans_per_s\":");
	vrd_json_num(&j, s->rates[0]);
	vrd_json_raw(&j, ",\"epochs_per_s\":");
	vrd_json_num(&j, s->rates[1]);
	vrd_json_raw(&j, ",\"volumes_per_s\":");
	vrd_json_num(&j, s->rates[2]);
	vrd_json_raw(&j, ",\"gvox_per_s\":");
	vrd_json_num(&j, s->rates[3]);
	vrd_json_raw(&j, "},\"latency_ms\":{");
	for (int i = 0; i < 4; i++)
		lat_json(&j, lat_names[i], snap->lat_p50[i], snap->lat_p99[i], i > 0);
	vrd_json_raw(&j,
	             "},\"bscans\":{\"acquired\":%" PRIu64 ",\"processed\":%" PRIu64
	             ",\"in_ring\":%u},\"drops\":{",
	             snap->c.acquired, snap->c.processed, snap->c.ring_used);
	for (int i = 0; i < VRD_DROP_COUNT; i++)
		vrd_json_raw(&j, "\"%s\":%" PRIu64 ",", vrd_drop_names[i], snap->c.drops[i]);
	vrd_json_raw(&j, "\"total\":%" PRIu64 "}", total_drops(&snap->c));
	vrd_json_raw(&j, ",\"ring\":{\"used\":%u,\"size\":%u,\"fill\":", snap->c.ring_used,
	             snap->c.ring_size);
	vrd_json_num(&j, snap->c.ring_size ? (double)snap->c.ring_used / snap->c.ring_size : 0);
	vrd_json_raw(&j,
	             "},\"epochs\":{\"started\":%" PRIu64 ",\"published\":%" PRIu64
	             ",\"last\":%" PRIu64 "},\"volumes_published\":%" PRIu64,
	             snap->c.epochs_started, snap->c.epochs_published, snap->last_epoch,
	             snap->c.epochs_published);
	vrd_json_raw(&j,
	             ",\"faults\":{\"source\":%" PRIu64 ",\"reopens\":%" PRIu64
	             ",\"degraded\":%s,\"message\":",
	             snap->c.source_faults, snap->c.source_reopens,
	             snap->degraded ? "true" : "false");
	vrd_json_str(&j, snap->fault);
	vrd_json_raw(&j,
	             "},\"readers\":%d,\"publisher\":{\"lease_skips\":%" PRIu64
	             ",\"forced_overwrite\":%" PRIu64 ",\"send_errors\":%" PRIu64 "}",
	             readers, ws.lease_skips, ws.forced_overwrite, ws.send_errors);
	vrd_json_raw(&j, ",\"uptime_s\":");
	vrd_json_num(&j, (double)(now - s->started_ns) / 1e9);
	vrd_json_raw(&j,
	             ",\"watchdog\":{\"enabled\":%s,\"usec\":%" PRIu64 ",\"pings\":%" PRIu64
	             ",\"withheld\":%" PRIu64 "}",
	             s->wd_enabled ? "true" : "false", s->wd_usec, s->wd_pings, s->wd_missed);
	vrd_json_raw(&j, ",\"reload\":{\"result\":");
	vrd_json_str(&j, s->reload_result);
	vrd_json_raw(&j, ",\"message\":");
	vrd_json_str(&j, s->reload_message);
	pthread_mutex_lock(&svc.lock);
	vrd_json_raw(&j, "},\"last_event\":{\"event\":");
	vrd_json_str(&j, svc.last_event);
	vrd_json_raw(&j, ",\"message\":");
	vrd_json_str(&j, svc.last_message);
	vrd_json_raw(&j, ",\"time\":%.3f}}", (double)svc.last_event_ns / 1e9);
	pthread_mutex_unlock(&svc.lock);
	if (j.overflow)
		snprintf(buf, len, "{\"state\":\"%s\",\"error\":\"status too long\"}",
		         shown_state(s, snap));
}

static void send_status(struct service *s, uint64_t now)
{
	static char json[16384];
	struct vrd_snapshot snap;
	char line[1024];
	int readers;

	vrd_pipeline_snapshot(s->pl, &snap);
	update_rates(s, &snap, now);
	readers = vrd_pub_readers(vrd_pipeline_pub(s->pl));
	status_json(s, &snap, readers < 0 ? 0 : readers, now, json, sizeof(json));
	if (vrd_pub_send(vrd_pipeline_pub(s->pl), VOLREC_TOPIC_STATUS, json) < 0)
		vrd_log(LOG_DEBUG, NULL, "status: not sent (publisher busy)");
	status_line(s, &snap, readers < 0 ? 0 : readers, line, sizeof(line));
	sd_notifyf(0, "STATUS=%s", line);
}

/* "p50/p99" in ms, "n/a" for a percentile without samples (negative) */
static void lat_text(char *buf, size_t len, double p50, double p99)
{
	char a[32] = "n/a", b[32] = "n/a";

	if (p50 >= 0)
		snprintf(a, sizeof(a), "%.2f", p50);
	if (p99 >= 0)
		snprintf(b, sizeof(b), "%.2f", p99);
	snprintf(buf, len, "%s/%s", a, b);
}

static void log_statistics(struct service *s)
{
	struct vrd_snapshot snap;
	char drops[512], lat[4][72];
	int n = 0;

	vrd_pipeline_snapshot(s->pl, &snap);
	for (int i = 0; i < VRD_DROP_COUNT; i++)
		n += snprintf(drops + n, sizeof(drops) - (size_t)n, "%s%s %" PRIu64, i ? ", " : "",
		              vrd_drop_names[i], snap.c.drops[i]);
	for (int i = 0; i < 4; i++) /* a stage without samples yet has no percentiles */
		lat_text(lat[i], sizeof(lat[i]), snap.lat_p50[i], snap.lat_p99[i]);
	vrd_log(LOG_NOTICE, "statistics",
	        "statistics: state %s, uptime %.1f s, B-scans acquired %" PRIu64
	        " processed %" PRIu64 " in ring %u/%u; epochs started %" PRIu64
	        " published %" PRIu64 "; drops: %s; source faults %" PRIu64 " reopens %" PRIu64
	        "; latency ms p50/p99: acquire->publish %s, preprocess %s, reconstruct %s, "
	        "publish %s; readers %d; rates %.1f volumes/s "
	        "%.3g A-scans/s; watchdog pings %" PRIu64 " withheld %" PRIu64,
	        shown_state(s, &snap), (double)(vrd_now_ns() - s->started_ns) / 1e9,
	        snap.c.acquired, snap.c.processed, snap.c.ring_used, snap.c.ring_size,
	        snap.c.epochs_started, snap.c.epochs_published, drops, snap.c.source_faults,
	        snap.c.source_reopens, lat[0], lat[1], lat[2], lat[3],
	        vrd_pub_readers(vrd_pipeline_pub(s->pl)), s->rates[2], s->rates[0], s->wd_pings,
	        s->wd_missed);
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
	struct vrd_progress p;
	bool ok;

	vrd_pipeline_progress(s->pl, &p);
	ok = p.proc_epochs != s->wd_last.proc_epochs ||
	     (p.proc_waiting && (p.acq_returns != s->wd_last.acq_returns ||
	                         p.acq_state == VRD_ACQ_BACKOFF || p.acq_state == VRD_ACQ_ENDED));
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
		        p.acq_state == VRD_ACQ_ACQUIRING   ? "inside the source"
		        : p.acq_state == VRD_ACQ_WAIT_ROOM ? "waiting for ring room"
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

	snprintf(s->reload_result, sizeof(s->reload_result), "ok");
	s->reload_message[0] = '\0';
	vrd_log_set_level(s->cur.log.level);
	effective_write(s);
	snprintf(msg, sizeof(msg), "configuration %s reloaded%s", s->config_path,
	         structural ? " (rebuilt: new session)" : " (live parameters)");
	vrd_event("reloaded", LOG_NOTICE, msg,
	          structural ? "\"structural\":true" : "\"structural\":false");
	s->state = SVC_RUNNING;
	sd_notify(0, "READY=1");
}

/* Returns 0, or -1 when neither the new nor the old configuration can run (fatal). */
static int reload_start(struct service *s)
{
	char err[CFG_ERR_MAX];
	struct vr_config next;
	int rc;

	s->state = SVC_RELOADING;
	sd_notifyf(0, "RELOADING=1\nMONOTONIC_USEC=%" PRIu64 "\nSTATUS=reloading %s",
	           vrd_now_ns() / 1000, s->config_path);
	vrd_log(LOG_INFO, "reloading", "reloading %s", s->config_path);
	cfg_defaults(&next);
	rc = cfg_load(&next, s->config_path, err, sizeof(err));
	if (rc < 0) {
		cfg_free(&next);
		reload_reject(s, err);
		return 0;
	}
	if (!cfg_is_structural_change(&s->cur, &next)) {
		rc = vrd_pipeline_request_live(s->pl, &next, &s->live_ticket);
		if (rc < 0) {
			cfg_free(&next);
			reload_reject(s, "out of memory applying the live parameters");
			return 0;
		}
		s->next = next; /* owned until the processing thread has applied it */
		s->live_pending = true;
		return 0;
	}

	/* structural: drain, rebuild, new session */
	{
		struct vrd_pipeline *pl = NULL;
		bool unlink_old = !s->cur.ipc.keep_shm;

		set_event_pub(NULL);
		vrd_pipeline_stop(s->pl, unlink_old);
		s->pl = NULL;
		if (strcmp(s->cur.instance, next.instance) ||
		    strcmp(s->cur.ipc.run_dir, next.ipc.run_dir)) {
			pidfile_remove(s);
			effective_remove(s);
			run_dir_clean(&s->cur);
		}
		rc = vrd_pipeline_start(&next, &pl, err, sizeof(err));
		if (rc < 0) {
			char msg[CFG_ERR_MAX + 64];

			snprintf(msg, sizeof(msg), "%s: %s (keeping the previous configuration)",
			         s->config_path, err);
			cfg_free(&next);
			rc = vrd_pipeline_start(&s->cur, &pl, err, sizeof(err));
			if (rc < 0) {
				vrd_log(LOG_ERR, "fatal",
				        "cannot rebuild with the previous configuration either: %s",
				        err);
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
		cfg_free(&s->cur);
		s->cur = next;
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
		s->prev_ns = vrd_now_ns();
		reload_accepted(s, true);
	}
	return 0;
}

static void reload_poll(struct service *s)
{
	char err[512];
	int rc;

	if (!s->live_pending ||
	    !vrd_pipeline_live_done(s->pl, s->live_ticket, &rc, err, sizeof(err)))
		return;
	s->live_pending = false;
	if (rc < 0) {
		char msg[600];

		snprintf(msg, sizeof(msg), "%s: backend refused the live parameters: %s",
		         s->config_path, err);
		cfg_free(&s->next);
		reload_reject(s, msg);
		return;
	}
	cfg_free(&s->cur);
	s->cur = s->next;
	reload_accepted(s, false);
}

/* ---- run ---------------------------------------------------------------------------------- */

int vrd_service_run(const char *config_path, const struct vr_config *cfg)
{
	struct service s = {.config_path = config_path};
	uint64_t next_status, next_wd = 0, status_ns;
	bool stop = false, reload = false;
	char err[CFG_ERR_MAX];
	sigset_t mask;
	int sfd, rc, status = 1;

	cfg_defaults(&s.cur);
	cfg_defaults(&s.next);
	if (cfg_copy(&s.cur, cfg) < 0) {
		fprintf(stderr, "volrecd: out of memory\n");
		return 1;
	}
	vrd_log_init(s.cur.instance, s.cur.log.level);
	snprintf(svc.instance, sizeof(svc.instance), "%s", s.cur.instance);

	/* every thread inherits the blocked mask: only the signalfd sees these */
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	sigaddset(&mask, SIGUSR1);
	sigaddset(&mask, SIGUSR2);
	if (pthread_sigmask(SIG_BLOCK, &mask, NULL) != 0) {
		vrd_log(LOG_ERR, NULL, "cannot block signals");
		goto out_cfg;
	}
	signal(SIGPIPE, SIG_IGN);
	sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sfd < 0) {
		vrd_log(LOG_ERR, NULL, "signalfd: %s", strerror(errno));
		goto out_cfg;
	}

	s.state = SVC_STARTING;
	s.started_ns = vrd_now_ns();
	run_dir_clean(&s.cur);
	rc = vrd_pipeline_start(&s.cur, &s.pl, err, sizeof(err));
	if (rc < 0) {
		vrd_log(LOG_ERR, "start_failed", "cannot start: %s", err);
		sd_notifyf(0, "STATUS=failed to start: %s", err);
		run_dir_clean(&s.cur);
		goto out_sfd;
	}
	set_event_pub(vrd_pipeline_pub(s.pl));
	pidfile_write(&s);
	effective_write(&s);
	s.wd_enabled = sd_watchdog_enabled(0, &s.wd_usec) > 0;
	s.state = SVC_RUNNING;
	s.prev_ns = vrd_now_ns();
	{
		struct volrec_shim_info info, *si = &info;
		char msg[1024];

		vrd_pipeline_source_info(s.pl, &info);
		snprintf(
		        msg, sizeof(msg),
		        "started: instance %s, source %s (%s), backend %s (%s), session %016" PRIx64
		        "%s",
		        s.cur.instance, cfg_source_name(s.cur.source.type), si->name,
		        vrd_pipeline_backend_name(s.pl), vrd_pipeline_device(s.pl),
		        vrd_pub_session(vrd_pipeline_pub(s.pl)),
		        s.wd_enabled ? ", watchdog on" : "");
		vrd_event("started", LOG_NOTICE, msg, NULL);
	}
	sd_notifyf(0, "READY=1\nMAINPID=%d\nSTATUS=running", (int)getpid());

	status_ns = (uint64_t)s.cur.ipc.status_interval_ms * 1000000ull;
	next_status = vrd_now_ns() + status_ns;
	if (s.wd_enabled)
		next_wd = vrd_now_ns() + s.wd_usec * 1000ull / 2;
	while (!stop) {
		struct signalfd_siginfo si;
		struct pollfd pfd = {.fd = sfd, .events = POLLIN};
		uint64_t now = vrd_now_ns(), wake = next_status;
		int timeout;

		if (s.wd_enabled && next_wd < wake)
			wake = next_wd;
		timeout = wake > now ? (int)((wake - now + 999999) / 1000000) : 0;
		if (s.live_pending && timeout > 10)
			timeout = 10;
		if (poll(&pfd, 1, timeout) < 0 && errno != EINTR) {
			vrd_log(LOG_ERR, NULL, "poll: %s", strerror(errno));
			break;
		}
		while (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
			switch (si.ssi_signo) {
			case SIGTERM:
			case SIGINT:
				vrd_log(LOG_INFO, NULL, "%s received: stopping",
				        si.ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT");
				stop = true;
				break;
			case SIGHUP:
				reload = true;
				break;
			case SIGUSR1:
				log_statistics(&s);
				break;
			case SIGUSR2:
				vrd_log(LOG_INFO, NULL,
				        "SIGUSR2: resetting the reconstruction history");
				vrd_pipeline_request_reset(s.pl);
				break;
			}
		}
		if (stop)
			break;
		reload_poll(&s);
		if (reload && !s.live_pending) {
			reload = false;
			if (reload_start(&s) < 0)
				goto out_pid;
			status_ns = (uint64_t)s.cur.ipc.status_interval_ms * 1000000ull;
		}
		now = vrd_now_ns();
		if (now >= next_status) {
			send_status(&s, now);
			status_ns = (uint64_t)s.cur.ipc.status_interval_ms * 1000000ull;
			next_status = now + status_ns;
		}
		if (s.wd_enabled && now >= next_wd) {
			watchdog_tick(&s);
			next_wd = now + s.wd_usec * 1000ull / 2;
		}
	}

	s.state = SVC_STOPPING;
	sd_notify(0, "STOPPING=1\nSTATUS=stopping");
	vrd_event("stopping", LOG_NOTICE, "stopping: draining the pipeline", NULL);
	set_event_pub(NULL);
	vrd_pipeline_stop(s.pl, !s.cur.ipc.keep_shm);
	s.pl = NULL;
	vrd_log(LOG_INFO, "stopped", "stopped");
	status = 0;
out_pid:
	if (s.live_pending)
		cfg_free(&s.next);
	if (s.pl) {
		set_event_pub(NULL);
		vrd_pipeline_stop(s.pl, !s.cur.ipc.keep_shm);
	}
	pidfile_remove(&s);
	effective_remove(&s);
	run_dir_clean(&s.cur);
out_sfd:
	close(sfd);
out_cfg:
	cfg_free(&s.cur);
	return status;
}
