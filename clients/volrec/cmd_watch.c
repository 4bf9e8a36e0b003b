/* SPDX-License-Identifier: MIT */
/*
 * `volrec watch`: the status screen live, redrawn in place once a second on a terminal (one
 * plain line a second otherwise), with the volume notifications as they arrive and the events.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "base/base.h"
#include "clients/volrec/tools.h"

#define WATCH_EVENTS 4  /* events kept on the screen */
#define WATCH_SEQS   12 /* sequence numbers shown */

static void watch_usage(FILE *f)
{
	fprintf(f,
	        "usage: volrec watch [-n N] [-s S] [-w S] [-i NAME] [-r DIR] [-c FILE]\n\n"
	        "Watch a running volrecd live: the status screen (see volrec status) redrawn once "
	        "a\n"
	        "second on a terminal, with the volumes as they are announced (sequence, epoch, "
	        "scan\n"
	        "offset, latency) and the daemon's events. When stdout is not a terminal, one "
	        "line\n"
	        "per second and one line per event. Ctrl-C (SIGINT) or SIGTERM end it (exit "
	        "0).\n"
	        "It follows the daemon when it restarts or rebuilds: when the daemon stops or "
	        "goes\n"
	        "away, watch says so and waits for it to come back.\n\n"
	        "  -n, --count N        stop after N volumes\n"
	        "  -s, --seconds S      stop after S seconds\n"
	        "  -w, --restart-wait S when the daemon stops or goes away, wait at most S "
	        "seconds\n"
	        "                       for it to come back (default: until Ctrl-C, -n or -s; "
	        "0: end\n"
	        "                       at once)\n" TOOL_COMMON_HELP "\n" TOOL_EXIT_HELP ";\n"
	        "when the daemon does not come back within -w: 0 if it said it was stopping, "
	        "else 3.\n");
}

struct watch {
	bool tty;
	struct json_object *st; /* the last status message, parsed */
	char events[WATCH_EVENTS][640];
	int nevents;
	uint64_t seqs[WATCH_SEQS];
	int nseqs;
	struct volrec_view last; /* copy of the last view (data pointer not used) */
	uint64_t seen, torn;
	struct tool_run run; /* the limits, the start, whether the daemon is away */
};

static void take_status(struct watch *w, const char *text, size_t len)
{
	struct json_object *st = tool_json_parse(text, len, NULL, 0);

	if (!st)
		return;
	json_object_put(w->st);
	w->st = st;
}

static void add_event(struct watch *w, const char *line)
{
	if (w->nevents == WATCH_EVENTS) {
		memmove(w->events[0], w->events[1], sizeof(w->events[0]) * (WATCH_EVENTS - 1));
		w->nevents--;
	}
	snprintf(w->events[w->nevents], sizeof(w->events[0]), "%s", line);
	if (!w->tty) {
		printf("event %s\n", w->events[w->nevents]);
		fflush(stdout);
	}
	w->nevents++;
}

static void take_event(struct watch *w, const char *text, size_t len)
{
	struct json_object *ev = tool_json_parse(text, len, NULL, 0);
	char name[64], line[sizeof(w->events[0])];

	if (!ev)
		return;
	tool_event_line(ev, line, sizeof(line));
	tool_json_str(ev, "event", name, sizeof(name));
	if (!strcmp(name, "stopping"))
		w->run.stopping = true;
	add_event(w, line);
	json_object_put(ev);
}

/* A line of the watcher's own, among the events: "HH:MM:SS what". */
static void own_event(struct watch *w, const char *what)
{
	char line[sizeof(w->events[0])];
	time_t t = time(NULL);
	struct tm tm;

	if (!localtime_r(&t, &tm))
		memset(&tm, 0, sizeof(tm));
	snprintf(line, sizeof(line), "%02d:%02d:%02d %s", tm.tm_hour, tm.tm_min, tm.tm_sec, what);
	add_event(w, line);
}

static void take_volume(struct watch *w, const struct volrec_view *v)
{
	if (w->nseqs == WATCH_SEQS) {
		memmove(w->seqs, w->seqs + 1, sizeof(w->seqs[0]) * (WATCH_SEQS - 1));
		w->nseqs--;
	}
	w->seqs[w->nseqs++] = v->sequence;
	w->last = *v;
	w->seen++;
}

static void draw(struct watch *w, struct volrec_client *c, const struct tool_daemon *d)
{
	struct volrec_client_stats cs;
	const char *eol = w->tty ? "\033[K\n" : "\n";

	volrec_client_stats(c, &cs);
	if (!w->tty) {
		char state[32] = "?", chans[64] = "", name[16], path[32];
		struct json_object *a = w->st ? tool_json_at(w->st, "channels") : NULL;
		size_t n = a && json_object_is_type(a, json_type_array)
		                   ? json_object_array_length(a)
		                   : 0;

		/* the channels of each volume, when more than the structure (output.channels) */
		for (size_t i = 0; n > 1 && i < n && i < 4; i++) {
			snprintf(path, sizeof(path), "channels.%zu.name", i);
			tool_json_str(w->st, path, name, sizeof(name));
			snprintf(chans + strlen(chans), sizeof(chans) - strlen(chans), "%s%s",
			         i ? "+" : "; channels ", name);
		}
		if (w->run.away_since)
			snprintf(state, sizeof(state), "no daemon");
		else if (w->st)
			tool_json_str(w->st, "state", state, sizeof(state));
		printf("%.1f s: %s; volume #%" PRIu64 " epoch %" PRIu64 " offset (%d, %d) "
		       "latency %.2f ms; %.2f volumes/s; latency p50/p99 %.2f/%.2f ms; drops %.0f; "
		       "readers %.0f; seen %" PRIu64 ", missed %" PRIu64 ", torn %" PRIu64 "%s\n",
		       vr_mono_s() - w->run.t0, state, w->last.sequence, w->last.epoch,
		       w->last.offset_x, w->last.offset_y, (double)w->last.latency_ns / 1e6,
		       w->st ? tool_json_num(w->st, "rates.volumes_per_s", 0) : 0,
		       w->st ? tool_json_num(w->st, "latency_ms.acquire_to_publish.p50", 0) : 0,
		       w->st ? tool_json_num(w->st, "latency_ms.acquire_to_publish.p99", 0) : 0,
		       w->st ? tool_json_num(w->st, "drops.total", 0) : 0,
		       w->st ? tool_json_num(w->st, "readers", 0) : 0, w->seen, cs.missed, w->torn,
		       chans);
		fflush(stdout);
		return;
	}
	fputs("\033[H", stdout);
	if (w->st)
		tool_status_print(stdout, w->st, d->have_header ? &d->header : NULL, eol);
	else
		printf("volrecd %s: waiting for its first status message...%s", "", eol);
	printf("%s", eol);
	printf("  latest    #%" PRIu64 ": epoch %" PRIu64
	       ", offset (%d, %d), latency %.2f ms%s%s%s",
	       w->last.sequence, w->last.epoch, w->last.offset_x, w->last.offset_y,
	       (double)w->last.latency_ns / 1e6,
	       w->last.flags & VOLREC_FLAG_DROPPED_BEFORE ? ", epochs dropped before it" : "",
	       w->last.flags & VOLREC_FLAG_RESET ? ", history reset" : "", eol);
	printf("  arriving ");
	for (int i = 0; i < w->nseqs; i++)
		printf(" %" PRIu64, w->seqs[i]);
	printf("%s", eol);
	printf("  watcher   %" PRIu64 " volumes seen, %" PRIu64 " missed, %" PRIu64
	       " torn, %.0f s%s",
	       w->seen, cs.missed, w->torn, vr_mono_s() - w->run.t0, eol);
	for (int i = 0; i < w->nevents; i++)
		printf("  %s %s%s", i ? "         " : "events   ", w->events[i], eol);
	if (w->run.away_since)
		printf("  DAEMON    %s %.0f s ago; waiting for it to come back%s",
		       w->run.stopping ? "stopped" : "went away", vr_mono_s() - w->run.away_since,
		       eol);
	printf("  (Ctrl-C to quit)%s\033[J", eol);
	fflush(stdout);
}

/* Whether volrecd is still there, with an event line of our own when it went away or came
 * back; true when it is gone for good. */
static bool watch_presence(struct watch *w, struct tool_target *tg, struct tool_daemon *d,
                           double now)
{
	/* an error looking (permissions) is not "gone" */
	bool running = tool_daemon_find(tg, d) != 0 || d->pid;
	char line[96];

	switch (tool_run_presence(&w->run, running, now)) {
	case TOOL_DAEMON_GONE:
		return true;
	case TOOL_DAEMON_AWAY:
		own_event(w, w->run.stopping ? "volrecd stopped: waiting for it to come back"
		                             : "volrecd went away (no stopping event seen): "
		                               "waiting for it to come back");
		break;
	case TOOL_DAEMON_BACK:
		snprintf(line, sizeof(line), "volrecd is back (pid %d)", d->pid);
		own_event(w, line);
		break;
	case TOOL_DAEMON_SAME:
		break;
	}
	return false;
}

/* A message received: a volume (released at once), the status, or an event. */
static void take_message(struct watch *w, struct volrec_client *c, struct volrec_message *m)
{
	switch (m->type) {
	case VOLREC_MSG_VOL:
		if (volrec_view_release(c, &m->view) == VOLREC_ETORN)
			w->torn++;
		take_volume(w, &m->view);
		break;
	case VOLREC_MSG_STATUS:
		take_status(w, m->text, m->len);
		break;
	case VOLREC_MSG_EVENT:
		take_event(w, m->text, m->len);
		break;
	}
}

VR_COMMAND(watch, "live status and volume notifications, redrawn every second")
{
	static const struct option longopts[] = {
	        TOOL_COMMON_LONGOPTS,
	        TOOL_RUN_LONGOPTS,
	        VR_CLI_LONGOPTS_END,
	};
	struct tool_target tg;
	struct tool_daemon d;
	struct volrec_client *c = NULL;
	struct watch w;
	double next_draw;
	int opt, rc, status = VR_EXIT_OK;

	tool_target_init(&tg);
	memset(&w, 0, sizeof(w));
	tool_run_init(&w.run);
	opt = tool_run_getopt(&tg, &w.run, "watch", argc, argv, "i:r:c:n:s:w:h", longopts);
	if (opt != -1)
		return tool_usage(watch_usage, opt);
	rc = tool_target_daemon(&tg, "watch", argc, argv, &d);
	if (rc)
		return rc;
	rc = tool_client_open(&tg, "watch", VOLREC_SUB_VOL | VOLREC_SUB_STATUS | VOLREC_SUB_EVENT,
	                      0, &c);
	if (rc)
		return rc;

	tool_catch_signals();
	w.tty = isatty(STDOUT_FILENO);
	w.run.t0 = vr_mono_s();
	if (w.tty)
		fputs("\033[H\033[2J", stdout);
	next_draw = w.run.t0 + 1.0;
	for (;;) {
		struct volrec_message m;
		double now = vr_mono_s();
		int wait_ms;

		if (tool_interrupted())
			break;
		if (tool_run_time_up(&w.run, now))
			break;
		if (w.run.count && w.seen >= w.run.count)
			break;
		if (now >= next_draw) {
			if (watch_presence(&w, &tg, &d, now))
				goto gone;
			draw(&w, c, &d);
			next_draw += 1.0;
			if (next_draw < now)
				next_draw = now + 1.0;
			continue;
		}
		wait_ms = (int)((next_draw - now) * 1000) + 1;
		wait_ms = tool_run_wait_ms(&w.run, now, wait_ms);
		rc = volrec_client_next_message(c, wait_ms, &m);
		if (rc == -ETIMEDOUT || rc == -EINTR || rc == -EAGAIN || rc == -EPROTO)
			continue;
		if (rc) {
			fprintf(stderr, "volrec watch: %s: %s\n", volrec_strerror(rc),
			        volrec_client_error(c));
			status = VR_EXIT_FAIL;
			goto out;
		}
		take_message(&w, c, &m);
	}
	tool_daemon_find(&tg, &d);
	draw(&w, c, &d);
	goto out;
gone:
	draw(&w, c, &d);
	fprintf(stderr, "volrec watch: volrecd of instance '%s' %s\n", tg.instance,
	        w.run.stopping ? "stopped" : "is gone (no stopping event seen)");
	status = w.run.stopping ? VR_EXIT_OK : VR_EXIT_NO_DAEMON;
out:
	volrec_client_close(c);
	json_object_put(w.st);
	if (fflush(stdout) == EOF && status == VR_EXIT_OK) {
		fprintf(stderr, "volrec watch: cannot write to stdout: %s\n", strerror(errno));
		status = VR_EXIT_FAIL;
	}
	return status;
}
