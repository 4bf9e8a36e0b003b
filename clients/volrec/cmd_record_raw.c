/* SPDX-License-Identifier: MIT */
/*
 * `volrec record --raw NAME [-n EPOCHS | -s SECONDS]` and `volrec record --in-daemon NAME
 * [-n VOLUMES | -s SECONDS]`: asks the running daemon to record raw spectra into
 * <record.dir>/NAME.vrr, or the volumes it publishes into <record.dir>/NAME.h5 (control
 * record_start, docs/recording.md), follows it in the daemon's status (size, rate, epochs or
 * volumes written and left out; a progress line on a terminal) and ends it with record_stop on
 * Ctrl-C. The daemon writes the file; this command only asks and watches, so the recording is
 * the same whether or not it runs.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "base/base.h"
#include "clients/volrec/tools.h"

#define RAW_CTL_TIMEOUT 5.0 /* seconds for each control request */
#define RAW_POLL_S      0.25

/* What differs between the daemon's two recordings. */
struct raw_kind {
	bool raw;
	const char *opt;     /* the option that asks for it */
	const char *suffix;  /* of the file the daemon writes */
	const char *unit;    /* what it counts */
	const char *at;      /* its object in the status reply */
	const char *written; /* its fields there */
	const char *skipped;
	const char *limit;
	const char *gaps; /* where the file says what was left out */
};

static const struct raw_kind kinds[2] = {
        {true, "--raw", ".vrr", "epochs", "status.recording", "epochs_written", "skipped_epochs",
         "epochs_limit", "the file's index marks where"},
        {false, "--in-daemon", ".h5", "volumes", "status.recording.processed", "volumes_written",
         "skipped_volumes", "volumes_limit", "its /missed lists them"},
};

/* The recording as the daemon's status shows it. */
struct raw_seen {
	char state[32], name[256], file[4200], end[64], error[600];
	uint64_t written, skipped, bytes, limit;
	double seconds, rate_mb_s;
	bool failed;
};

/* A name, never a path: what the daemon will refuse anyway, said here with the reason. A
 * trailing suffix (the one the daemon adds) is dropped. VR_EXIT_OK or VR_EXIT_USAGE. */
static int raw_name(const struct raw_kind *k, const char *arg, char *name, size_t len)
{
	size_t n = strlen(arg), sl = strlen(k->suffix);

	if (strchr(arg, '/')) {
		fprintf(stderr,
		        "volrec record: %s takes a NAME, not a path ('%s'): volrecd writes "
		        "<record.dir>/NAME%s, record.dir being in its configuration (man "
		        "volrecd.yaml)\n",
		        k->opt, arg, k->suffix);
		return VR_EXIT_USAGE;
	}
	if (n > sl && !strcmp(arg + n - sl, k->suffix))
		n -= sl;
	if (n == 0 || n >= len) {
		fprintf(stderr, "volrec record: %s NAME: %s\n", k->opt,
		        n ? "too long" : "empty (letters, digits, '-', '_' and '.', not first)");
		return VR_EXIT_USAGE;
	}
	snprintf(name, len, "%.*s", (int)n, arg);
	return VR_EXIT_OK;
}

/* One request {"op": op, ...}: VR_EXIT_OK with *reply when the daemon said ok, else the exit
 * status with the message printed (quiet: the daemon's refusal is not printed). */
static int raw_request(const struct tool_target *tg, struct json_object *req, bool quiet,
                       struct json_object **reply)
{
	struct json_object *ok;
	int rc;

	*reply = NULL;
	/* volrecd refuses it unread past the timeout: no answer means not done */
	json_object_object_add(
	        req, "expires_ms",
	        json_object_new_int64((int64_t)((vr_mono_s() + RAW_CTL_TIMEOUT) * 1000)));
	rc = tool_ctl_request(tg, "record", req, RAW_CTL_TIMEOUT, reply);
	json_object_put(req);
	if (rc != VR_EXIT_OK)
		return rc;
	if (quiet && !(json_object_object_get_ex(*reply, "ok", &ok) && json_object_get_boolean(ok)))
		rc = VR_EXIT_REJECTED;
	else
		rc = tool_ctl_checked(*reply, "record");
	if (rc != VR_EXIT_OK) {
		json_object_put(*reply);
		*reply = NULL;
	}
	return rc;
}

static struct json_object *raw_op(const char *op)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "op", json_object_new_string(op));
	return o;
}

/* The status request: a control socket that fails while volrecd runs (a structural reload
 * reopens it) is asked again, for up to RAW_CTL_TIMEOUT; the exit status, the message printed. */
static int raw_status_reply(const struct tool_target *tg, struct json_object **reply)
{
	double until = vr_mono_s() + RAW_CTL_TIMEOUT;
	char why[TOOL_PATH_MAX + 512];
	struct tool_daemon d;
	int rc;

	for (;;) {
		struct json_object *req = raw_op("status");

		rc = tool_ctl_try(tg, req, RAW_CTL_TIMEOUT, reply, why, sizeof(why));
		json_object_put(req);
		if (rc == VR_EXIT_OK || rc == VR_EXIT_PERM || vr_mono_s() > until ||
		    tool_daemon_find(tg, &d) < 0 || !d.pid)
			break;
		nanosleep(&(struct timespec){.tv_nsec = 50000000}, NULL);
	}
	if (rc != VR_EXIT_OK)
		fprintf(stderr, "\nvolrec record: %s\n", why);
	return rc;
}

/* The daemon's status of the recording of kind k into s; the exit status of the request. */
static int raw_status(const struct raw_kind *k, const struct tool_target *tg, struct raw_seen *s)
{
	struct json_object *reply, *rec;
	int rc = raw_status_reply(tg, &reply);

	if (rc != VR_EXIT_OK)
		return rc;
	rec = tool_json_at(reply, k->at);
	memset(s, 0, sizeof(*s));
	tool_json_str(rec, "state", s->state, sizeof(s->state));
	tool_json_str(rec, "name", s->name, sizeof(s->name));
	tool_json_str(rec, "file", s->file, sizeof(s->file));
	tool_json_str(rec, "end", s->end, sizeof(s->end));
	tool_json_str(rec, "error", s->error, sizeof(s->error));
	s->written = tool_json_u64(rec, k->written, 0);
	s->skipped = tool_json_u64(rec, k->skipped, 0);
	s->bytes = tool_json_u64(rec, "bytes", 0);
	s->limit = tool_json_u64(rec, k->limit, 0);
	s->seconds = tool_json_num(rec, "seconds", 0);
	s->rate_mb_s = tool_json_num(rec, "rate_mb_s", 0);
	s->failed = tool_json_bool(rec, "failed", false);
	json_object_put(reply);
	if (!s->state[0]) {
		fprintf(stderr,
		        "volrec record: the daemon's status shows no %s recording (an "
		        "older volrecd?)\n",
		        k->raw ? "raw" : "processed");
		return VR_EXIT_FAIL;
	}
	return VR_EXIT_OK;
}

/* record_stop {raw} of kind k. */
static struct json_object *raw_stop_op(const struct raw_kind *k)
{
	struct json_object *o = raw_op("record_stop");

	json_object_object_add(o, "raw", json_object_new_boolean(k->raw));
	return o;
}

/* Ask for the recording: record_start {raw, name, epochs | volumes | seconds}. */
static int raw_start(const struct raw_kind *k, const struct tool_target *tg,
                     const struct tool_run *run, const char *name)
{
	struct json_object *req = raw_op("record_start"), *reply;
	int rc;

	json_object_object_add(req, "raw", json_object_new_boolean(k->raw));
	json_object_object_add(req, "name", json_object_new_string(name));
	if (run->count)
		json_object_object_add(req, k->unit, json_object_new_int64((int64_t)run->count));
	if (run->seconds > 0)
		json_object_object_add(req, "seconds", json_object_new_double(run->seconds));
	rc = raw_request(tg, req, false, &reply);
	json_object_put(reply);
	return rc;
}

/* The progress line: size, rate, epochs or volumes written (of the limit) and left out,
 * time. */
static void raw_progress(const struct raw_kind *k, const struct raw_seen *s)
{
	char of[32] = "";

	if (s->limit)
		snprintf(of, sizeof(of), "/%" PRIu64, s->limit);
	fprintf(stderr,
	        "\rvolrec record: %s: %.1f MB, %.1f MB/s, %" PRIu64 "%s %s, %" PRIu64
	        " left out, %.0f s%s\033[K",
	        s->name, (double)s->bytes / 1e6, s->rate_mb_s, s->written, of, k->unit, s->skipped,
	        s->seconds, strcmp(s->state, "finishing") ? "" : " (finishing)");
}

/* The result line and the exit status of a recording that ended. */
static int raw_result(const struct raw_kind *k, const struct raw_seen *s, bool interrupted)
{
	bool full = strstr(s->end, "disk full") || strstr(s->error, "min_free_gb");

	printf("%s: %" PRIu64 " %s, %" PRIu64 " left out, %.1f MB, %.1f MB/s (%s)\n", s->file,
	       s->written, k->unit, s->skipped, (double)s->bytes / 1e6, s->rate_mb_s,
	       s->end[0] ? s->end : "ended");
	if (s->failed) {
		fprintf(stderr,
		        "volrec record: %s: %s; the file holds the %" PRIu64 " %s "
		        "written\n",
		        s->name, s->error, s->written, k->unit);
		return full ? VR_EXIT_NOSPACE : VR_EXIT_FAIL;
	}
	if (!interrupted &&
	    (!strcmp(s->end, "structural reload") || !strcmp(s->end, "volrecd stopping"))) {
		fprintf(stderr,
		        "volrec record: %s ended early: %s; the file holds the %" PRIu64
		        " %s written\n",
		        s->name,
		        s->end[0] == 's' ? "a structural reload of volrecd ended it"
		                         : "volrecd "
		                           "stopped",
		        s->written, k->unit);
		return VR_EXIT_FAIL;
	}
	if (s->skipped) {
		fprintf(stderr,
		        "volrec record: %" PRIu64 " %s left out (the disk fell behind; %s)\n",
		        s->skipped, k->unit, k->gaps);
		return VR_EXIT_INCOMPLETE;
	}
	return VR_EXIT_OK;
}

/* Follow the recording until it has ended; Ctrl-C sends record_stop (once). */
static int raw_follow(const struct raw_kind *k, const struct tool_target *tg, const char *name,
                      bool tty)
{
	struct raw_seen s;
	bool stop_sent = false;
	int rc;

	for (;;) {
		rc = raw_status(k, tg, &s);
		if (rc == VR_EXIT_NO_DAEMON) {
			fprintf(stderr,
			        "%svolrec record: volrecd went away during the recording; "
			        "its file holds the %s written up to then\n",
			        tty ? "\n" : "", k->unit);
			return rc;
		}
		if (rc != VR_EXIT_OK)
			return rc;
		if (strcmp(s.name, name) || !strcmp(s.state, "idle")) {
			fprintf(stderr,
			        "%svolrec record: the daemon's status no longer shows recording "
			        "%s (it shows %s%s%s): it restarted, or another recording began\n",
			        tty ? "\n" : "", name, s.state, s.name[0] ? " " : "", s.name);
			return VR_EXIT_FAIL;
		}
		if (!strcmp(s.state, "finished"))
			break;
		if (tty)
			raw_progress(k, &s);
		if (tool_interrupted() && !stop_sent) {
			struct json_object *reply;

			/* refused when it ended meanwhile: the next status says how */
			raw_request(tg, raw_stop_op(k), true, &reply);
			json_object_put(reply);
			stop_sent = true;
			continue;
		}
		nanosleep(&(struct timespec){.tv_nsec = (long)(RAW_POLL_S * 1e9)}, NULL);
	}
	if (tty)
		fprintf(stderr, "\r\033[K");
	return raw_result(k, &s, stop_sent);
}

int record_in_daemon(struct tool_target *tg, const struct tool_run *run, const char *arg, bool raw)
{
	const struct raw_kind *k = &kinds[raw ? 0 : 1];
	char name[256];
	struct tool_daemon d;
	int rc = raw_name(k, arg, name, sizeof(name));

	if (rc)
		return rc;
	rc = tool_target_finish(tg, "record");
	if (rc)
		return rc;
	rc = tool_daemon_require(tg, "record", &d);
	if (rc)
		return rc;
	/* from here Ctrl-C ends the recording with record_stop, even one sent before the
	 * daemon's answer came */
	tool_catch_signals();
	rc = raw_start(k, tg, run, name);
	if (rc)
		return rc;
	return raw_follow(k, tg, name, isatty(STDERR_FILENO));
}
