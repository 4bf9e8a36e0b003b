/* SPDX-License-Identifier: MIT */
/*
 * The status screen `volrec status` prints and `volrec watch` redraws: the daemon's `status`
 * message (docs/operations.md) laid out for a person, plus the shared-memory header's view.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>

#include "clients/volrec/tools.h"

static void fmt_uptime(double s, char *buf, size_t len)
{
	unsigned long t = s > 0 ? (unsigned long)s : 0;

	if (t >= 86400)
		snprintf(buf, len, "%lud %02luh %02lum", t / 86400, t / 3600 % 24, t / 60 % 60);
	else if (t >= 3600)
		snprintf(buf, len, "%luh %02lum %02lus", t / 3600, t / 60 % 60, t % 60);
	else if (t >= 60)
		snprintf(buf, len, "%lum %02lus", t / 60, t % 60);
	else
		snprintf(buf, len, "%.1f s", s > 0 ? s : 0);
}

static void fmt_clock(double t, char *buf, size_t len)
{
	time_t tt = (time_t)t;
	struct tm tm;

	if (t <= 0 || !localtime_r(&tt, &tm)) {
		snprintf(buf, len, "-");
		return;
	}
	strftime(buf, len, "%H:%M:%S", &tm);
}

/* "p50/p99 ms" of one latency stage, "-" for a null. */
static void fmt_lat(struct json_object *st, const char *stage, char *buf, size_t len)
{
	char path[96];
	double p50, p99;

	snprintf(path, sizeof(path), "latency_ms.%s.p50", stage);
	p50 = tool_json_num(st, path, NAN);
	snprintf(path, sizeof(path), "latency_ms.%s.p99", stage);
	p99 = tool_json_num(st, path, NAN);
	if (isnan(p50) || isnan(p99))
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "%.2f / %.2f", p50, p99);
}

void tool_event_line(struct json_object *ev, char *buf, size_t len)
{
	char name[64], msg[600], when[16];
	size_t n;

	tool_json_str(ev, "event", name, sizeof(name));
	tool_json_str(ev, "message", msg, sizeof(msg));
	fmt_clock(tool_json_num(ev, "time", 0), when, sizeof(when));
	/* a message that names its event already ("stopping: draining the pipeline", "set KEYS by
	 * WHO", written so for the log, which has no event column) is not prefixed with it again */
	n = strlen(name);
	if (n && !strncmp(msg, name, n) && (msg[n] == ':' || msg[n] == ' '))
		snprintf(buf, len, "%s %s", when, msg);
	else
		snprintf(buf, len, "%s %s%s%s", when, name[0] ? name : "?", msg[0] ? ": " : "",
		         msg);
}

/* The daemon's recordings as status shows them: where, what they count, and the line's name. */
struct status_rec {
	const char *at, *label, *unit, *written, *skipped;
	bool say_none; /* print "<label> none" when idle */
};

/* A recording's line: none, or its name, state, file, size, rate, epochs or volumes and left
 * out. */
static void status_recording(FILE *f, struct json_object *st, const struct status_rec *k,
                             const char *eol)
{
	char state[32], name[256], file[1024], end[64], error[512], key[96];
	double mb, rate, written, skipped, secs;
#define AT(field) (snprintf(key, sizeof(key), "%s.%s", k->at, (field)), key)

	if (!tool_json_str(st, AT("state"), state, sizeof(state)))
		return; /* an older daemon */
	if (!strcmp(state, "idle")) {
		if (k->say_none)
			fprintf(f, "  %s none%s", k->label, eol);
		return;
	}
	tool_json_str(st, AT("name"), name, sizeof(name));
	tool_json_str(st, AT("file"), file, sizeof(file));
	tool_json_str(st, AT("end"), end, sizeof(end));
	tool_json_str(st, AT("error"), error, sizeof(error));
	mb = tool_json_num(st, AT("bytes"), 0) / 1e6;
	rate = tool_json_num(st, AT("rate_mb_s"), 0);
	written = tool_json_num(st, AT(k->written), 0);
	skipped = tool_json_num(st, AT(k->skipped), 0);
	secs = tool_json_num(st, AT("seconds"), 0);
	fprintf(f, "  %s %s %s%s%s%s: %s, %.1f MB, %.1f MB/s, %.0f %s, %.0f left out, %.0f s%s%s%s",
	        k->label, name, state, end[0] ? " (" : "", end, end[0] ? ")" : "", file, mb, rate,
	        written, k->unit, skipped, secs, error[0] ? "; " : "", error, eol);
#undef AT
}

static void status_recordings(FILE *f, struct json_object *st, const char *eol)
{
	static const struct status_rec raw = {"recording",      "recording",      "epochs",
	                                      "epochs_written", "skipped_epochs", true},
	                               processed = {"recording.processed",
	                                            "processed recording",
	                                            "volumes",
	                                            "volumes_written",
	                                            "skipped_volumes",
	                                            false};

	status_recording(f, st, &raw, eol);
	status_recording(f, st, &processed, eol);
}

/* The channels of each volume and what their u8 values mean (docs/protocol.md §2.7): one line,
 * "structure dB [0, 100], angio cdv [0, 1] (mask 40 dB), doppler bscan rad [-3.14, 3.14] =
 * [-0.3, 0.3] mm/s (mask 40 dB, bulk removed)"; none from a daemon older than the channels. */
static void print_channels(FILE *f, struct json_object *st, const char *eol)
{
	struct json_object *a = tool_json_at(st, "channels");
	char line[1024] = "", name[32], units[32], extra[32], p[64];
	size_t n = a && json_object_is_type(a, json_type_array) ? json_object_array_length(a) : 0;

	for (size_t i = 0; i < n && i < 8; i++) {
		size_t l = strlen(line);

#define CH(key) (snprintf(p, sizeof(p), "channels.%zu.%s", i, key), p)
		tool_json_str(st, CH("name"), name, sizeof(name));
		tool_json_str(st, CH("units"), units, sizeof(units));
		extra[0] = '\0';
		if (!tool_json_str(st, CH("method"), extra, sizeof(extra)))
			tool_json_str(st, CH("axis"), extra, sizeof(extra));
		l += (size_t)snprintf(line + l, sizeof(line) - l, "%s%s%s%s %s [%.4g, %.4g]",
		                      i ? ", " : "", name, extra[0] ? " " : "", extra, units,
		                      tool_json_num(st, CH("range.0"), NAN),
		                      tool_json_num(st, CH("range.1"), NAN));
		if (l < sizeof(line) && tool_json_at(st, CH("velocity_mm_s.1")))
			l += (size_t)snprintf(line + l, sizeof(line) - l, " = [%.4g, %.4g] mm/s",
			                      tool_json_num(st, CH("velocity_mm_s.0"), NAN),
			                      tool_json_num(st, CH("velocity_mm_s.1"), NAN));
		if (l < sizeof(line) && tool_json_at(st, CH("mask_db")))
			l += (size_t)snprintf(
			        line + l, sizeof(line) - l, " (mask %.4g dB%s)",
			        tool_json_num(st, CH("mask_db"), NAN),
			        tool_json_bool(st, CH("bulk"), false) ? ", bulk removed" : "");
#undef CH
		if (l >= sizeof(line))
			break;
	}
	if (n)
		fprintf(f, "  channels  %s%s", line, eol);
}

/* The status's first lines: the daemon, its configuration, source, backend and geometry. */
static void print_setup(FILE *f, struct json_object *st, const char *eol)
{
	char a[256], b[256], c[512], up[32];

	tool_json_str(st, "instance", a, sizeof(a));
	tool_json_str(st, "state", b, sizeof(b));
	fmt_uptime(tool_json_num(st, "uptime_s", 0), up, sizeof(up));
	fprintf(f, "volrecd %s: %s   pid %.0f   up %s   session %016" PRIx64 "%s", a, b,
	        tool_json_num(st, "pid", 0), up, tool_json_u64(st, "session", 0), eol);
	tool_json_str(st, "config", c, sizeof(c));
	if (c[0])
		fprintf(f, "  config    %s%s", c, eol);

	tool_json_str(st, "source.type", a, sizeof(a));
	tool_json_str(st, "source.name", b, sizeof(b));
	tool_json_str(st, "source.device", c, sizeof(c));
	fprintf(f, "  source    %s (%s): %s; %.4g epochs/s configured%s", a, b, c,
	        tool_json_num(st, "source.rate", 0), eol);
	tool_json_str(st, "backend.name", a, sizeof(a));
	tool_json_str(st, "backend.device", c, sizeof(c));
	fprintf(f, "  backend   %s: %s%s", a, c, eol);

	tool_json_str(st, "geometry.sample_type", a, sizeof(a));
	tool_json_str(st, "geometry.mode", b, sizeof(b));
	const double reps = tool_json_num(st, "geometry.repeats", 1);
	if (reps > 1)
		snprintf(c, sizeof(c), " (each B-scan %.0f times)", reps);
	else
		c[0] = '\0';
	fprintf(f,
	        "  geometry  %.0f x %.0f A-scans%s of %.0f %s samples, stride %.0fx%.0f, depth "
	        "[%.0f, %.0f), %s%s",
	        tool_json_num(st, "geometry.ascans_per_bscan", 0),
	        tool_json_num(st, "geometry.bscans_per_volume", 0), c,
	        tool_json_num(st, "geometry.samples_per_ascan", 0), a,
	        tool_json_num(st, "geometry.stride.0", 0),
	        tool_json_num(st, "geometry.stride.1", 0),
	        tool_json_num(st, "geometry.depth_range.0", 0),
	        tool_json_num(st, "geometry.depth_range.1", 0), b, eol);
	fprintf(f, "  volume    %.0f x %.0f x %.0f [Y][X][Z] u8, %.0f slots%s",
	        tool_json_num(st, "geometry.volume.0", 0),
	        tool_json_num(st, "geometry.volume.1", 0),
	        tool_json_num(st, "geometry.volume.2", 0), tool_json_num(st, "geometry.slots", 0),
	        eol);
	print_channels(f, st, eol);
}

/* What the processing does: median depths, rates, latencies, volumes and drops. */
static void print_processing(FILE *f, struct json_object *st, const struct volrec_shm_header *h,
                             const char *eol)
{
	char lat[4][48];
	int drops;

	if (tool_json_at(st, "preprocess.median_depths")) {
		double mean = tool_json_num(st, "preprocess.median_depths.mean_per_bscan", NAN);
		double depths = tool_json_num(st, "preprocess.median_depths.depths", 0);

		if (isnan(mean))
			fprintf(f, "  median    partial_median: no volume yet (of %.0f depths)%s",
			        depths, eol);
		else
			fprintf(f,
			        "  median    partial_median: %.2f median depths per B-scan, at "
			        "most %.0f, of %.0f (last volume)%s",
			        mean,
			        tool_json_num(st, "preprocess.median_depths.max_per_bscan", 0),
			        depths, eol);
	}
	fprintf(f, "  rates     %.2f volumes/s, %.2f epochs/s, %.4g A-scans/s, %.3f GVox/s%s",
	        tool_json_num(st, "rates.volumes_per_s", 0),
	        tool_json_num(st, "rates.epochs_per_s", 0),
	        tool_json_num(st, "rates.ascans_per_s", 0),
	        tool_json_num(st, "rates.gvox_per_s", 0), eol);
	fmt_lat(st, "acquire_to_publish", lat[0], sizeof(lat[0]));
	fmt_lat(st, "preprocess", lat[1], sizeof(lat[1]));
	fmt_lat(st, "reconstruct", lat[2], sizeof(lat[2]));
	fmt_lat(st, "publish", lat[3], sizeof(lat[3]));
	fprintf(f,
	        "  latency   p50 / p99 ms: acquire->publish %s; preprocess %s; reconstruct %s; "
	        "publish %s%s",
	        lat[0], lat[1], lat[2], lat[3], eol);

	fprintf(f, "  volumes   %.0f published", tool_json_num(st, "volumes_published", 0));
	if (h)
		fprintf(f, ", latest #%" PRIu64 " (shared memory)", h->latest_sequence);
	fprintf(f, "; B-scans acquired %.0f, processed %.0f; ring %.0f/%.0f%s",
	        tool_json_num(st, "bscans.acquired", 0), tool_json_num(st, "bscans.processed", 0),
	        tool_json_num(st, "ring.used", 0), tool_json_num(st, "ring.size", 0), eol);
	if (tool_json_num(st, "bscans.missing_ascans", 0) > 0)
		fprintf(f,
		        "  missing   %.0f A-scans with a non-finite sample, reconstructed from "
		        "their neighbours%s",
		        tool_json_num(st, "bscans.missing_ascans", 0), eol);

	fprintf(f, "  drops     ");
	drops = 0;
	{
		struct json_object *o = tool_json_at(st, "drops");

		if (json_object_is_type(o, json_type_object)) {
			json_object_object_foreach(o, key, v)
			{
				char name[64];

				if (!json_object_is_type(v, json_type_int) &&
				    !json_object_is_type(v, json_type_double))
					continue;
				vr_utf8_sanitize(key, name, sizeof(name));
				fprintf(f, "%s%s %.0f", drops++ ? ", " : "", name,
				        json_object_get_double(v));
			}
		}
	}
	fprintf(f, "%s (B-scans)%s", drops ? "" : "-", eol);
}

/* Faults, readers, the last reload and the last event. */
static void print_health(FILE *f, struct json_object *st, const char *eol)
{
	char a[256], c[512], when[16];
	double now = (double)vr_real_ns() / 1e9;

	tool_json_str(st, "faults.message", c, sizeof(c));
	fprintf(f, "  faults    source %.0f, reopens %.0f%s%s%s",
	        tool_json_num(st, "faults.source", 0), tool_json_num(st, "faults.reopens", 0),
	        tool_json_bool(st, "faults.degraded", false) ? "; DEGRADED: " : "",
	        tool_json_bool(st, "faults.degraded", false) ? c : "", eol);
	fprintf(f,
	        "  readers   %.0f; publisher: %.0f lease skips, %.0f forced overwrites, %.0f "
	        "failed sends%s",
	        tool_json_num(st, "readers", 0), tool_json_num(st, "publisher.lease_skips", 0),
	        tool_json_num(st, "publisher.forced_overwrite", 0),
	        tool_json_num(st, "publisher.send_errors", 0), eol);
	status_recordings(f, st, eol);
	if (tool_json_str(st, "reload.result", a, sizeof(a)) && a[0]) {
		tool_json_str(st, "reload.message", c, sizeof(c));
		fprintf(f, "  reload    %s%s%s%s", a, c[0] ? ": " : "", c, eol);
	}
	tool_json_str(st, "last_event.event", a, sizeof(a));
	tool_json_str(st, "last_event.message", c, sizeof(c));
	{
		double t = tool_json_num(st, "last_event.time", 0);

		fmt_clock(t, when, sizeof(when));
		if (a[0])
			fprintf(f, "  event     %s (%s, %.0f s ago): %s%s", a, when,
			        t > 0 && now > t ? now - t : 0, c, eol);
	}
}

void tool_status_print(FILE *f, struct json_object *st, const struct volrec_shm_header *h,
                       const char *eol)
{
	print_setup(f, st, eol);
	print_processing(f, st, h, eol);
	print_health(f, st, eol);
}

int tool_wait_status(struct volrec_client *c, double timeout_s, char **text)
{
	double deadline = vr_mono_s() + timeout_s;

	for (;;) {
		struct volrec_message m;
		double left = deadline - vr_mono_s();
		int rc;

		if (left <= 0)
			return -ETIMEDOUT;
		/* at most a second per wait: the deadline may lie past what int ms can hold */
		rc = volrec_client_next_message(c, left > 1.0 ? 1000 : (int)(left * 1000) + 1, &m);
		if (rc == -EAGAIN || rc == -EPROTO || (rc == -ETIMEDOUT && vr_mono_s() < deadline))
			continue;
		if (rc)
			return rc;
		if (m.type == VOLREC_MSG_VOL) {
			volrec_view_release(c, &m.view);
			continue;
		}
		if (m.type == VOLREC_MSG_STATUS) {
			*text = strndup(m.text, m.len);
			return *text ? 0 : -ENOMEM;
		}
	}
}
