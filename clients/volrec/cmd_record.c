/* SPDX-License-Identifier: MIT */
/*
 * `volrec record`: subscribe to a running daemon and write every volume into HDF5, copied out of
 * its leased slot and checked not torn. Volumes it could not get (sequence gaps, torn reads) are
 * listed in /missed and on stderr, and the exit status says so. The recording follows the daemon
 * across restarts and rebuilds as long as the geometry stays the same, and keeps every volume it
 * completed readable when the disk fills up (h5vol.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <hdf5.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#include "base/base.h"
#include "clients/volrec/tools.h"
#include "config/config.h"
#include "formats/h5attr.h"
#include "formats/h5rec.h"
#include "formats/h5vol.h"
#include "ipc/ipc.h"

/* The geometry keys of the status message that must not change within one recording. */
static const char *const geometry_keys[] = {
        "samples_per_ascan", "sample_type", "ascans_per_bscan",
        "bscans_per_volume", "repeats",     "stride",
        "depth_range",       "mode",        "volume",
        "voxel_size_um",
};

/* What --raw and --in-daemon do: the daemon records, this command asks and follows. */
static void record_daemon_usage(FILE *f)
{
	fprintf(f,
	        "--raw: the daemon records the raw spectra it acquires into <record.dir>/NAME.vrr\n"
	        "(man volrec) for EPOCHS epochs, SECONDS seconds, or until Ctrl-C, which\n"
	        "stops it cleanly (record_stop); the command shows its progress on a terminal\n"
	        "(size, rate, epochs written and left out) and prints the file, its epochs and "
	        "why\n"
	        "it ended. NAME is a name, not a path (letters, digits, '-', '_' and '.', not\n"
	        "first; a trailing .vrr is dropped). Exit status 4 when epochs were left out, 5\n"
	        "when the daemon refused (record.dir, an existing NAME, a recording in progress,\n"
	        "record.min_free_gb), 8 when the disk (or record.min_free_gb) ended it.\n\n"
	        "--in-daemon: the daemon writes every volume it publishes into\n"
	        "<record.dir>/NAME.h5 (the layout below, written by its own thread) for VOLUMES\n"
	        "volumes, SECONDS seconds, or until Ctrl-C; otherwise as --raw (a trailing .h5 is\n"
	        "dropped). Volumes the disk could not keep up with are left out and listed in\n"
	        "/missed with reason 3 (exit status 4). It may run beside a raw recording.\n\n");
}

static void record_usage(FILE *f)
{
	fprintf(f,
	        "usage: volrec record -o FILE.h5 [-n N | -s S] [--force] [-w S] [-i NAME] [-r "
	        "DIR]\n"
	        "                     [-c FILE]\n"
	        "       volrec record --raw NAME [-n EPOCHS | -s SECONDS] [-i NAME] [-r DIR] [-c "
	        "FILE]\n"
	        "       volrec record --in-daemon NAME [-n VOLUMES | -s SECONDS] [-i NAME] [-r "
	        "DIR] [-c FILE]\n\n");
	record_daemon_usage(f);
	fprintf(f,
	        "Subscribe to a running volrecd and write every volume it publishes into HDF5 "
	        "until N\n"
	        "volumes are written, S seconds have passed, or Ctrl-C (SIGINT) / SIGTERM. Each "
	        "volume\n"
	        "is copied out of its shared-memory slot and checked not overwritten meanwhile. "
	        "The\n"
	        "file is flushed after every volume: it is readable at any time and holds every\n"
	        "volume completed, also when the disk fills up or the recorder is killed.\n"
	        "The recording follows the daemon when it restarts or rebuilds (a new session): "
	        "with\n"
	        "the same geometry it continues into the same file; with another one it stops and\n"
	        "says so (the file keeps the volumes of the first geometry).\n\n"
	        "File layout (h5py: f['volumes'] is [n][Y][X][Z] uint8):\n"
	        "  /volumes      u8  [n][Y][X][Z]  one chunk per volume, extendible\n"
	        "  /sequence     u64 [n]   volume sequence number within its session\n"
	        "  /session      u64 [n]   session id (changes when the daemon restarts or "
	        "rebuilds)\n"
	        "  /volume_id    u64 [n]   the daemon's volume counter\n"
	        "  /epoch        u64 [n]   epoch of the last low-resolution volume interlaced\n"
	        "  /offset       i32 [n][2]  its scan offset (ox, oy)\n"
	        "  /t_first_ns, /t_last_ns, /t_publish_ns  u64 [n]  CLOCK_REALTIME ns: first and "
	        "last\n"
	        "                B-scan acquired, published\n"
	        "  /latency_ns   u64 [n]   processing latency; /flags u32 [n] (2 reset, 4 epochs "
	        "dropped before)\n"
	        "  /generation   u32 [n]   generation of the live parameters that made the volume\n"
	        "                (the daemon's number; 0: not told)\n"
	        "  /generation_index u32 [n]  the row of /generations holding its values\n"
	        "  /generations  text [m]  JSON object of every live key and its value, one row "
	        "per\n"
	        "                generation seen (null: the daemon could not be asked)\n"
	        "  /generation_numbers u32 [m]  the daemon's number of each row of /generations\n"
	        "  /volumes attributes: axes \"t,y,x,z\", voxel_size_um [dy, dx, dz] (NaN: "
	        "unknown)\n"
	        "  /angio, /doppler  u8 [n][Y][X][Z]  with output.channels, as volrec process "
	        "writes\n"
	        "                them; each channel's dataset says what its values mean "
	        "(channel,\n"
	        "                units, value_range ...); /channel_range f64 [n][c][2] per "
	        "volume\n"
	        "  /missed       [m] {session, first, last, reason}: sequence ranges not "
	        "recorded;\n"
	        "                reason 1 = never received (overwritten before the recorder got "
	        "it:\n"
	        "                it fell behind, or published while the daemon restarted or never\n"
	        "                announced before it went away), 2 = torn\n"
	        "                (overwritten while being copied), 3 = left out by volrecd's\n"
	        "                recorder (--in-daemon: the disk fell behind)\n"
	        "  attributes: shape [Y, X, Z], instance, volumes, missed_volumes, sessions, "
	        "complete,\n"
	        "  end (why the recording ended), the geometry, source and backend from the "
	        "daemon's\n"
	        "  status (status_json: the whole message), config_path, and config_yaml: the "
	        "daemon's\n"
	        "  effective configuration (<run_dir>/<instance>.yaml, every default filled in), "
	        "or\n"
	        "  without it the -c file as read now (config_yaml_source says which).\n\n"
	        "  -o, --output FILE    HDF5 file to write (must not exist, unless --force)\n"
	        "  -n, --count N        stop after N volumes written\n"
	        "  -s, --seconds S      stop after S seconds\n"
	        "  -f, --force          replace FILE if it exists\n"
	        "      --compress[=L]   compress /volumes with HDF5's own shuffle + deflate "
	        "(gzip)\n"
	        "                       filters at level L (1 to 9, default 1: the fastest), one\n"
	        "                       chunk per volume; h5py, HDFView and volrec export read it\n"
	        "                       as it is. It runs on the recorder's one thread: a daemon\n"
	        "                       publishing faster than it compresses makes it miss\n"
	        "                       volumes (listed in /missed, exit 4)\n"
	        "  -w, --restart-wait S when the daemon stops or goes away, wait at most S "
	        "seconds\n"
	        "                       for it to come back (default: as long as the recording "
	        "runs;\n"
	        "                       0: stop at once)\n" TOOL_COMMON_HELP "\n" TOOL_EXIT_HELP
	        ";\n"
	        "1 also when FILE cannot be created (a missing directory) or the daemon came back "
	        "with\n"
	        "another geometry; 3 also when the daemon went away and did not come back within "
	        "-w;\n"
	        "4 finished but volumes are missing (listed in /missed and on stderr); 7 also for "
	        "FILE;\n"
	        "8 disk full or file size limit: stopped, the file is closed and holds every "
	        "volume\n"
	        "completed. On 1, 3, 4 and 8 the file holds what was recorded.\n");
}

/* What the command line asks for. */
struct rec_args {
	unsigned deflate; /* --compress level, 0: none */
	bool force;
	const char *raw;       /* --raw NAME: the daemon records raw spectra (cmd_record_raw.c) */
	const char *in_daemon; /* --in-daemon NAME: the daemon records its volumes (likewise) */
};

struct rec {
	const char *path;
	struct h5rec *w;
	struct h5rec_layout l;                              /* shape and channels (protocol 2.1) */
	struct volrec_channel meaning[VOLREC_CHANNELS_MAX]; /* the last volume's (data unused) */
	uint64_t sessions;                                  /* sessions recorded from */
	uint64_t last_session, last_seq;
	uint64_t session_first; /* volumes written before the current session's first */
	bool have_status;       /* the first status message is in the attributes */
	char geometry[1024];    /* its geometry (geometry_keys), to compare later sessions with */
	uint64_t checked;       /* the last session whose status showed that geometry */
	uint64_t changed;       /* the session whose status showed another one */
	uint64_t volumes;       /* volumes in the file when it was closed */
	int seg_fd;             /* the data segment of session seg_session, kept open: -1 none */
	char ctl_path[4200];    /* the daemon's control socket, to read generations' values */
	bool warned_gen;        /* the daemon could not be asked once already */
	char *yaml;             /* the configuration in the file, owned */
	uint64_t seg_session;
	char err[1024];
};

/* The geometry_keys of a status message, as "key value; ..." (values as JSON). */
static void geometry_text(struct json_object *st, char *buf, size_t len)
{
	size_t n = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < VR_ARRAY_SIZE(geometry_keys) && n < len; i++) {
		char path[64];
		struct json_object *v;

		snprintf(path, sizeof(path), "geometry.%s", geometry_keys[i]);
		v = tool_json_at(st, path);
		n += (size_t)snprintf(buf + n, len - n, "%s%s %s", i ? "; " : "", geometry_keys[i],
		                      v ? json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN)
		                        : "?");
	}
}

/* What differs between two geometry_text()s, as "key a -> b; ...". */
static void geometry_diff(const char *was, const char *now, char *buf, size_t len)
{
	char a[1024], b[1024], *sa, *sb, *pa, *pb;
	size_t n = 0;

	snprintf(a, sizeof(a), "%s", was);
	snprintf(b, sizeof(b), "%s", now);
	buf[0] = '\0';
	for (pa = strtok_r(a, ";", &sa), pb = strtok_r(b, ";", &sb); pa && pb && n < len;
	     pa = strtok_r(NULL, ";", &sa), pb = strtok_r(NULL, ";", &sb)) {
		const char *va, *vb;

		pa += *pa == ' ';
		pb += *pb == ' ';
		if (!strcmp(pa, pb))
			continue;
		va = strchr(pa, ' ');
		vb = strchr(pb, ' ');
		n += (size_t)snprintf(buf + n, len - n, "%s%.*s %s -> %s", n ? ", " : "",
		                      (int)(va ? va - pa : 0), pa, va ? va + 1 : "?",
		                      vb ? vb + 1 : "?");
	}
}

/* Note sequences [first, last] of session as missing: stderr (unless said already) and
 * /missed. */
static int rec_miss(struct rec *r, uint64_t session, uint64_t first, uint64_t last,
                    enum h5rec_reason why, bool said)
{
	if (!said && first == last)
		fprintf(stderr, "volrec record: volume #%" PRIu64 " missed (%s)\n", first,
		        why == H5REC_TORN
		                ? "torn: overwritten while being copied"
		                : "never received: overwritten before the recorder got it");
	else if (!said)
		fprintf(stderr, "volrec record: volumes #%" PRIu64 "-#%" PRIu64 " missed (%s)\n",
		        first, last,
		        why == H5REC_TORN ? "torn" : "never received: the recorder fell behind");
	return h5rec_miss(r->w, session, first, last, why, r->err, sizeof(r->err));
}

/* The channels of the volumes the instance's data segment holds (protocol 2.1), from its
 * descriptors, which the daemon writes for every slot when it creates the segment: their
 * number and kinds into r; a segment of an older daemon holds the structure alone. 0, or -EPROTO
 * with r->err for a segment whose descriptors cannot be read or name unknown kinds. */
static int rec_channel_kinds(struct rec *r, const char *instance, const struct volrec_shm_header *h)
{
	char name[VOLREC_INSTANCE_MAX + 16];
	int fd, rc = 0;

	r->l.nch = h->channels ? h->channels : 1;
	r->l.kind[0] = VOLREC_CHANNEL_STRUCTURE;
	if (!h->channels)
		return 0;
	if (h->channels > VOLREC_CHANNELS_MAX ||
	    h->channel_desc_size < sizeof(struct volrec_channel_desc))
		return vr_err(r->err, sizeof(r->err), -EPROTO,
		              "the shared memory of instance '%s' has %u channels of %u-byte "
		              "descriptors",
		              instance, h->channels, h->channel_desc_size);
	snprintf(name, sizeof(name), "%s%s", VOLREC_SHM_PREFIX, instance);
	fd = shm_open(name, O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0)
		return vr_err(r->err, sizeof(r->err), -errno, "%s: %s", name, strerror(errno));
	for (uint32_t c = 0; c < r->l.nch && !rc; c++) {
		struct volrec_channel_desc d;
		off_t at = (off_t)(h->channel_table_offset + (uint64_t)c * h->channel_desc_size);
		uint32_t seen = 0;

		if (pread(fd, &d, sizeof(d), at) != (ssize_t)sizeof(d))
			rc = vr_err(r->err, sizeof(r->err), -EPROTO,
			            "%s: cannot read the descriptor of channel %u", name, c);
		else if (d.kind >= VOLREC_CHANNEL_KINDS)
			rc = vr_err(r->err, sizeof(r->err), -EPROTO,
			            "%s: channel %u has the unknown kind %u", name, c, d.kind);
		for (uint32_t k = 0; k < c && !rc; k++)
			seen |= 1u << r->l.kind[k];
		if (!rc && seen & (1u << d.kind))
			rc = vr_err(r->err, sizeof(r->err), -EPROTO, "%s: channel kind %u twice",
			            name, d.kind);
		if (!rc)
			r->l.kind[c] = d.kind;
	}
	close(fd);
	return rc;
}

/* Keep the instance's data segment open while it holds session (the one recorded from now
 * on), so that what it published can still be read once the daemon is gone or replaced. */
static void rec_follow_segment(struct rec *r, const char *instance, uint64_t session)
{
	char name[VOLREC_INSTANCE_MAX + 16];
	struct volrec_shm_header h;
	int fd;

	if (r->seg_fd >= 0)
		close(r->seg_fd);
	r->seg_fd = -1;
	r->seg_session = 0;
	snprintf(name, sizeof(name), "%s%s", VOLREC_SHM_PREFIX, instance);
	fd = shm_open(name, O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0)
		return;
	if (pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) || h.magic != VOLREC_SHM_MAGIC ||
	    h.session_id != session) {
		close(fd);
		return;
	}
	r->seg_fd = fd;
	r->seg_session = session;
}

/*
 * The volumes the session recorded last published after the last one the recorder got (their
 * notifications never came: the daemon went away, or was replaced by a new session, before
 * they went out) are missing: stderr and /missed, reason 1. 0 or a negative errno (r->err).
 */
static int rec_miss_tail(struct rec *r, const char *nl)
{
	struct volrec_shm_header h;
	uint64_t first = r->last_seq + 1;

	if (r->seg_fd < 0 || !r->last_session || r->seg_session != r->last_session ||
	    pread(r->seg_fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) ||
	    h.session_id != r->last_session || h.latest_sequence < first)
		return 0;
	r->last_seq = h.latest_sequence;
	fprintf(stderr,
	        "%svolrec record: volumes #%" PRIu64 "-#%" PRIu64 " of session %016" PRIx64
	        " missed (published, but never announced to the recorder before the daemon went "
	        "away or restarted)\n",
	        nl, first, h.latest_sequence, r->last_session);
	return rec_miss(r, r->last_session, first, h.latest_sequence, H5REC_GAP, true);
}

/* The values of the daemon's generation n as JSON text (malloc'ed), or NULL when it cannot be
 * asked (no control socket access, not kept any more, an older daemon). */
static char *generation_ask(struct rec *r, uint32_t n)
{
	char req[80], *reply = NULL, *text = NULL;
	struct json_object *o = NULL, *values;
	size_t len;
	int fd = ipc_ctl_connect(r->ctl_path);

	if (fd < 0)
		return NULL;
	snprintf(req, sizeof(req), "{\"op\":\"get\",\"generation\":%" PRIu32 "}", n);
	if (ipc_ctl_send(fd, req, strlen(req)) == 0 && ipc_ctl_recv(fd, 5000, &reply, &len) == 0)
		o = json_tokener_parse(reply);
	if (o && json_object_object_get_ex(o, "values", &values))
		text = strdup(json_object_to_json_string_ext(values, JSON_C_TO_STRING_PLAIN));
	json_object_put(o);
	free(reply);
	close(fd);
	return text;
}

/* The values of generation n for the file (h5rec_gen_fn): asked of the daemon; said once on
 * stderr when they cannot be known (/generations then says null). */
static char *rec_gen_values(void *ctx, uint32_t n)
{
	struct rec *r = ctx;
	char *text = generation_ask(r, n);

	if (!text && !r->warned_gen) {
		fprintf(stderr,
		        "volrec record: the values of generation %" PRIu32 " are not known (the "
		        "daemon's control socket did not give them): /generations says null\n",
		        n);
		r->warned_gen = true;
	}
	return text;
}

/* The first status message's figures as attributes (geometry, source, backend, config path). */
static void rec_status_attrs(struct rec *r, const char *text, struct json_object *st)
{
	static const char *const nums[] = {"geometry.samples_per_ascan",
	                                   "geometry.ascans_per_bscan",
	                                   "geometry.bscans_per_volume", "geometry.repeats"};
	static const char *const strs[][2] = {
	        {"geometry.sample_type", "sample_type"},
	        {"geometry.mode", "reconstruct_mode"},
	        {"source.type", "source"},
	        {"source.device", "source_device"},
	        {"backend.name", "backend"},
	        {"backend.device", "device"},
	        {"config", "config_path"},
	};
	static const char *const pairs[] = {"stride", "depth_range"};
	hid_t f = h5rec_file(r->w);
	char s[1024];

	h5rec_attr_text(f, "status_json", text);
	for (size_t i = 0; i < VR_ARRAY_SIZE(nums); i++)
		vr_h5_attr_u64(f, strchr(nums[i], '.') + 1, tool_json_u64(st, nums[i], 0));
	for (size_t i = 0; i < VR_ARRAY_SIZE(pairs); i++) {
		uint32_t v[2];
		for (int k = 0; k < 2; k++) {
			snprintf(s, sizeof(s), "geometry.%s.%d", pairs[i], k);
			v[k] = (uint32_t)tool_json_u64(st, s, 0);
		}
		vr_h5_attr(f, pairs[i], H5T_NATIVE_UINT32, 2, v);
	}
	for (size_t i = 0; i < VR_ARRAY_SIZE(strs); i++)
		if (tool_json_str(st, strs[i][0], s, sizeof(s)))
			vr_h5_attr_str(f, strs[i][1], s);
}

static char *config_yaml(const char *path)
{
	struct vr_config cfg;
	char err[CFG_ERR_MAX], *text = NULL;
	size_t len = 0;
	FILE *m;

	cfg_defaults(&cfg);
	if (cfg_load(&cfg, path, err, sizeof(err)) < 0) {
		cfg_free(&cfg);
		return NULL;
	}
	m = open_memstream(&text, &len);
	if (m && (cfg_dump(&cfg, m) < 0 || fclose(m))) {
		free(text);
		text = NULL;
	} else if (!m) {
		text = NULL;
	}
	cfg_free(&cfg);
	return text;
}

/* The daemon's effective configuration, <run_dir>/<instance>.yaml (docs/operations.md); NULL
 * when it cannot be read. At most 1 MiB. The caller frees it. */
static char *daemon_config_yaml(const struct tool_target *t)
{
	char path[TOOL_PATH_MAX + VOLREC_INSTANCE_MAX + 8], *text = NULL;
	size_t len = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s.yaml", t->run_dir, t->instance);
	f = fopen(path, "re");
	if (!f)
		return NULL;
	text = malloc(1 << 20);
	if (text) {
		len = fread(text, 1, (1 << 20) - 1, f);
		if (ferror(f) || len == 0) {
			free(text);
			text = NULL;
		} else {
			text[len] = '\0';
		}
	}
	fclose(f);
	return text;
}

/* What is known when the file is created: layout, instance, the daemon's configuration (its
 * <run_dir>/<instance>.yaml, else the -c file as read now, kept in r->yaml). 0 or as
 * h5rec_create (r->err). */
static int rec_create(struct rec *r, const struct tool_target *t, const struct rec_args *a)
{
	const char *from = "daemon";
	int rc;

	r->yaml = daemon_config_yaml(t);
	if (!r->yaml && t->config[0]) {
		r->yaml = config_yaml(t->config);
		from = "config file";
	}
	rc = h5rec_create(r->path, a->force, a->deflate, &r->l,
	                  &(struct h5rec_origin){.instance = t->instance,
	                                         .config_yaml = r->yaml,
	                                         .config_from = from,
	                                         .gen_values = rec_gen_values,
	                                         .ctx = r},
	                  &r->w, r->err, sizeof(r->err));
	if (rc == -EEXIST)
		snprintf(r->err, sizeof(r->err), "%s exists (use --force to replace it)", r->path);
	if (rc) { /* no file: nothing closes it later */
		free(r->yaml);
		r->yaml = NULL;
	}
	return rc;
}

/*
 * A status message: the first one goes into the attributes; a later session's must show the
 * same geometry. Returns 0, 1 when the geometry changed (r->err says how), or a negative errno
 * when the file could not be written (r->err).
 */
static int rec_status(struct rec *r, const char *text, size_t len)
{
	struct json_object *st = tool_json_parse(text, len, NULL, 0);
	uint64_t session;
	char now[sizeof(r->geometry)], diff[512];
	int rc = 0;

	if (!st)
		return 0;
	session = tool_json_u64(st, "session", 0);
	if (!r->have_status) {
		geometry_text(st, r->geometry, sizeof(r->geometry));
		rec_status_attrs(r, text, st);
		r->have_status = true;
		r->checked = session;
		rc = h5vol_flush(h5rec_vol(r->w), r->err, sizeof(r->err));
	} else if (session && session != r->checked) {
		geometry_text(st, now, sizeof(now));
		if (strcmp(now, r->geometry)) {
			geometry_diff(r->geometry, now, diff, sizeof(diff));
			snprintf(r->err, sizeof(r->err),
			         "the daemon now runs another geometry (%s, session %016" PRIx64
			         ")",
			         diff, session);
			r->changed = session;
			rc = 1;
		} else {
			r->checked = session;
		}
	}
	json_object_put(st);
	return rc;
}

/* Write volume v (its channels in data, their meaning in r->meaning) with its voxel size and
 * generation as the daemon tells them. 0 or as h5rec_append (r->err). */
static int rec_write(struct rec *r, struct volrec_client *c, const struct volrec_view *v,
                     const uint8_t *data)
{
	double um[3];
	uint32_t gen = 0;

	volrec_view_voxel_size(c, v, um);
	volrec_view_generation(c, v, &gen);
	if (!gen && !r->warned_gen) {
		fprintf(stderr, "volrec record: the values of generation 0 are not known (an older "
		                "daemon): /generations says null\n");
		r->warned_gen = true;
	}
	return h5rec_append(r->w, v, data, r->meaning, um, gen, r->err, sizeof(r->err));
}

/* Writing the file failed with rc: say so; the exit status (8 for a full disk, else 1). */
static int rec_failed(const struct rec *r, int rc, const char *nl, const char **end)
{
	bool full = tool_exit_for_output(rc) == VR_EXIT_NOSPACE;

	fprintf(stderr, "%svolrec record: %s: stopping\n", nl, r->err); /* h5vol names the file */
	*end = full ? "disk full" : "write error";
	return full ? VR_EXIT_NOSPACE : VR_EXIT_FAIL;
}

/* The daemon of t is running: its pid, or 0. */
static int daemon_pid(const struct tool_target *t)
{
	struct tool_daemon d;

	return tool_daemon_find(t, &d) == 0 ? d.pid : 0;
}

/* ---- the recording's steps ----------------------------------------------------------------- */

/* What one step of the loop says: go on, end the recording, or the daemon is gone for good. */
enum rec_step { REC_GO_ON, REC_END, REC_GONE };

/* One recording's loop state beside the file's (struct rec). */
struct rec_loop {
	struct tool_target *tg;
	struct tool_run run;
	struct volrec_client *c;
	uint8_t *buf; /* one volume */
	int pid;
	bool tty;
	const char *nl;  /* "\n" before a message while a progress line is shown */
	const char *end; /* why the recording ended (attribute "end") */
	int status;      /* exit status so far */
	double next_progress;
};

enum { OPT_COMPRESS = 0x300, OPT_RAW, OPT_IN_DAEMON };

/* The options into tg, run and a; TOOL_ARGS_GO_ON, or the exit status to end with. */
static int rec_parse(int argc, char **argv, struct tool_target *tg, struct tool_run *run,
                     struct rec *r, struct rec_args *a)
{
	static const struct option longopts[] = {
	        TOOL_COMMON_LONGOPTS,
	        {"output", required_argument, NULL, 'o'},
	        TOOL_RUN_LONGOPTS,
	        {"force", no_argument, NULL, 'f'},
	        {"compress", optional_argument, NULL, OPT_COMPRESS},
	        {"raw", required_argument, NULL, OPT_RAW},
	        {"in-daemon", required_argument, NULL, OPT_IN_DAEMON},
	        VR_CLI_LONGOPTS_END,
	};
	uint64_t level;
	int opt;

	while ((opt = tool_run_getopt(tg, run, "record", argc, argv, "i:r:c:o:n:s:fw:h",
	                              longopts)) != -1) {
		switch (opt) {
		case 'o':
			r->path = optarg;
			break;
		case 'f':
			a->force = true;
			break;
		case OPT_RAW:
			a->raw = optarg;
			break;
		case OPT_IN_DAEMON:
			a->in_daemon = optarg;
			break;
		case OPT_COMPRESS:
			if (!optarg) {
				a->deflate = 1;
				break;
			}
			if (vr_cli_u64("volrec record", "--compress", optarg, 1, 9, "1 to 9",
			               &level) < 0)
				return VR_EXIT_USAGE;
			a->deflate = (unsigned)level;
			break;
		default:
			return tool_usage(record_usage, opt);
		}
	}
	if (vr_cli_args_done("volrec record", argc, argv))
		return VR_EXIT_USAGE;
	if (a->raw && a->in_daemon) {
		fprintf(stderr, "volrec record: --raw and --in-daemon are two recordings: start "
		                "each with its own command\n");
		return VR_EXIT_USAGE;
	}
	if (a->raw || a->in_daemon) {
		const char *which = a->raw ? "--raw" : "--in-daemon";

		if (r->path || a->force || a->deflate || run->restart_wait >= 0) {
			fprintf(stderr,
			        "volrec record: %s NAME records in the daemon's "
			        "record.dir: -o, --force, --compress and --restart-wait are "
			        "for HDF5 recordings made by this command\n",
			        which);
			return VR_EXIT_USAGE;
		}
		if (run->count && run->seconds) {
			fprintf(stderr, "volrec record: %s takes -n %s or -s SECONDS, not both\n",
			        which, a->raw ? "EPOCHS" : "VOLUMES");
			return VR_EXIT_USAGE;
		}
		return TOOL_ARGS_GO_ON;
	}
	if (!r->path || !*r->path || strlen(r->path) >= TOOL_PATH_MAX) {
		fprintf(stderr, "volrec record: -o FILE.h5 (or --raw NAME, --in-daemon NAME) is "
		                "required (see --help)\n");
		return VR_EXIT_USAGE;
	}
	return TOOL_ARGS_GO_ON;
}

/* Find the daemon, subscribe, create the file and its first attributes. VR_EXIT_OK, or the exit
 * status with the message printed; with L->end set when the file was made (close it). */
static int rec_setup(struct rec *r, struct rec_loop *L, const struct rec_args *a)
{
	struct tool_daemon d;
	int rc;

	rc = tool_target_finish(L->tg, "record");
	if (rc)
		return rc;
	rc = tool_daemon_require(L->tg, "record", &d);
	if (rc)
		return rc;
	if (!d.have_header || !d.header.ny || !d.header.nx || !d.header.nz ||
	    d.header.dtype != VOLREC_DTYPE_U8) {
		fprintf(stderr,
		        "volrec record: the shared memory of instance '%s' holds no u8 volumes "
		        "(%s)\n",
		        L->tg->instance, d.have_header ? "output.dtype is not u8" : "no segment");
		return d.have_header ? VR_EXIT_FAIL : VR_EXIT_NO_DAEMON;
	}
	/* generous queue: notifications are 128 bytes; volumes themselves stay in the slots */
	rc = tool_client_open(L->tg, "record",
	                      VOLREC_SUB_VOL | VOLREC_SUB_STATUS | VOLREC_SUB_EVENT, 100000, &L->c);
	if (rc)
		return rc;
	snprintf(r->ctl_path, sizeof(r->ctl_path), "%s/%s.ctl", L->tg->run_dir, L->tg->instance);
	r->l.Y = d.header.ny;
	r->l.X = d.header.nx;
	r->l.Z = d.header.nz;
	L->pid = d.pid;
	rc = rec_channel_kinds(r, L->tg->instance, &d.header);
	if (rc) {
		fprintf(stderr, "volrec record: %s\n", r->err);
		return VR_EXIT_FAIL;
	}
	rc = rec_create(r, L->tg, a);
	if (rc) {
		fprintf(stderr, "volrec record: %s\n", r->err);
		return rc == -EEXIST ? VR_EXIT_USAGE : tool_exit_for_output(rc);
	}
	L->end = "count reached";
	rc = h5rec_describe(r->w, r->err, sizeof(r->err));
	L->buf = malloc((size_t)r->l.Y * r->l.X * r->l.Z * r->l.nch);
	if (rc || !L->buf) {
		fprintf(stderr, "volrec record: %s\n", rc ? r->err : "out of memory");
		L->end = rc && h5vol_is_nospace(rc) ? "disk full"
		         : rc                       ? "write error"
		                                    : "out of memory";
		return rc ? tool_exit_for_output(rc) : VR_EXIT_FAIL;
	}
	return VR_EXIT_OK;
}

/* No message for a while: is the daemon still there, gone, or back? */
static enum rec_step rec_quiet(struct rec_loop *L, double now)
{
	bool running =
	        (!L->run.away_since && tool_pid_is_volrecd(L->pid)) || (L->pid = daemon_pid(L->tg));

	switch (tool_run_presence(&L->run, running, now)) {
	case TOOL_DAEMON_GONE:
		return REC_GONE;
	case TOOL_DAEMON_AWAY:
		fprintf(stderr,
		        "%svolrec record: volrecd of instance '%s' %s; waiting for it to come "
		        "back%s\n",
		        L->nl, L->tg->instance, L->run.stopping ? "stopped" : "went away",
		        L->run.restart_wait > 0 ? " (--restart-wait)" : " (Ctrl-C to end)");
		break;
	case TOOL_DAEMON_BACK:
		fprintf(stderr, "%svolrec record: volrecd of instance '%s' is back (pid %d)\n",
		        L->nl, L->tg->instance, L->pid);
		break;
	case TOOL_DAEMON_SAME:
		break;
	}
	return REC_GO_ON;
}

/* A status message: the first goes into the attributes; another geometry ends the recording
 * (the volumes of that session already written go out again). */
static enum rec_step rec_on_status(struct rec *r, struct rec_loop *L, const char *text, size_t len)
{
	int rc = rec_status(r, text, len);

	if (rc < 0) {
		L->status = rec_failed(r, rc, L->nl, &L->end);
		return REC_END;
	}
	if (!rc)
		return REC_GO_ON;
	uint64_t keep = r->last_session == r->changed ? r->session_first : h5rec_count(r->w);
	char terr[256] = "";

	if (keep < h5rec_count(r->w) && h5vol_truncate(h5rec_vol(r->w), keep, terr, sizeof(terr)))
		fprintf(stderr, "%svolrec record: %s\n", L->nl, terr);
	fprintf(stderr,
	        "%svolrec record: %s: stopping; %s holds the %" PRIu64 " volumes recorded "
	        "before\n",
	        L->nl, r->err, r->path, h5rec_count(r->w));
	if (r->last_session != r->changed && rec_miss_tail(r, L->nl))
		fprintf(stderr, "%svolrec record: %s\n", L->nl, r->err);
	L->status = VR_EXIT_FAIL;
	L->end = "geometry changed";
	return REC_END;
}

/* An event message: `stopping` says the daemon stops (not that it went away). */
static void rec_on_event(struct rec_loop *L, const char *text, size_t len)
{
	struct json_object *ev = tool_json_parse(text, len, NULL, 0);
	char name[64];

	if (!ev)
		return;
	tool_json_str(ev, "event", name, sizeof(name));
	if (!strcmp(name, "stopping"))
		L->run.stopping = true;
	json_object_put(ev);
}

/* Copy the channels of the held view v into L->buf ([c][Y][X][Z]) with their meaning into r:
 * 0, or -EPROTO (r->err) when they are not the channels the file was made for. */
static int rec_copy_channels(struct rec *r, struct rec_loop *L, const struct volrec_view *v)
{
	uint32_t n = 0;

	if (volrec_view_channels(L->c, v, &n) < 0 || n != r->l.nch)
		return vr_err(r->err, sizeof(r->err), -EPROTO,
		              "the daemon now publishes %u channels (was %u, session %016" PRIx64
		              ")",
		              n, r->l.nch, v->session_id);
	for (uint32_t k = 0; k < n; k++) {
		struct volrec_channel *ch = &r->meaning[k];

		if (volrec_view_channel(L->c, v, k, ch) < 0 || !ch->data || ch->bytes != v->bytes ||
		    ch->kind != r->l.kind[k])
			return vr_err(r->err, sizeof(r->err), -EPROTO,
			              "the daemon now publishes %s as channel %u (was %s, session "
			              "%016" PRIx64 ")",
			              h5rec_channel_name(ch->kind), k,
			              h5rec_channel_name(r->l.kind[k]), v->session_id);
		memcpy(L->buf + (size_t)k * v->bytes, ch->data, v->bytes);
		ch->data = NULL;
	}
	return 0;
}

/* A volume: account for gaps, copy it out, check it was not torn, write it. */
static enum rec_step rec_on_volume(struct rec *r, struct rec_loop *L, struct volrec_message *m)
{
	struct volrec_view v = m->view;
	uint64_t first = 1;
	bool torn;
	int rc = 0;

	if (!r->have_status) {
		/* the recording starts after the daemon's first status message: it names the
		 * geometry of the volumes (a restart before it came would otherwise go
		 * unchecked) */
		volrec_view_release(L->c, &m->view);
		return REC_GO_ON;
	}
	if (v.ny != r->l.Y || v.nx != r->l.X || v.nz != r->l.Z || v.dtype != VOLREC_DTYPE_U8) {
		volrec_view_release(L->c, &m->view);
		fprintf(stderr,
		        "%svolrec record: the daemon now publishes %u x %u x %u volumes of dtype "
		        "%u (was %u x %u x %u u8, session %016" PRIx64 "): stopping; %s holds the "
		        "%" PRIu64 " volumes recorded before\n",
		        L->nl, v.ny, v.nx, v.nz, v.dtype, r->l.Y, r->l.X, r->l.Z, v.session_id,
		        r->path, h5rec_count(r->w));
		if (v.session_id != r->last_session && rec_miss_tail(r, L->nl))
			fprintf(stderr, "%svolrec record: %s\n", L->nl, r->err);
		L->status = VR_EXIT_FAIL;
		L->end = "geometry changed";
		return REC_END;
	}
	if (rec_copy_channels(r, L, &v) < 0) {
		volrec_view_release(L->c, &m->view);
		fprintf(stderr,
		        "%svolrec record: %s: stopping; %s holds the %" PRIu64
		        " volumes recorded before\n",
		        L->nl, r->err, r->path, h5rec_count(r->w));
		if (v.session_id != r->last_session && rec_miss_tail(r, L->nl))
			fprintf(stderr, "%svolrec record: %s\n", L->nl, r->err);
		L->status = VR_EXIT_FAIL;
		L->end = "geometry changed";
		return REC_END;
	}
	torn = volrec_view_release(L->c, &m->view) == VOLREC_ETORN;
	if (tool_run_presence(&L->run, true, vr_mono_s()) == TOOL_DAEMON_BACK)
		fprintf(stderr, "%svolrec record: volrecd of instance '%s' is back\n", L->nl,
		        L->tg->instance);
	if (r->last_session == v.session_id) {
		first = r->last_seq + 1;
	} else {
		if (!r->last_session)
			first = v.sequence; /* recording starts here */
		else
			fprintf(stderr,
			        "%svolrec record: the daemon restarted or rebuilt (session "
			        "%016" PRIx64 ", same volume shape): recording continues\n",
			        L->nl, v.session_id);
		r->session_first = h5rec_count(r->w);
		r->sessions++;
		rc = rec_miss_tail(r, L->nl);
		rec_follow_segment(r, L->tg->instance, v.session_id);
	}
	if (!rc && v.sequence > first)
		rc = rec_miss(r, v.session_id, first, v.sequence - 1, H5REC_GAP, false);
	r->last_session = v.session_id;
	r->last_seq = v.sequence;
	if (!rc && torn)
		rc = rec_miss(r, v.session_id, v.sequence, v.sequence, H5REC_TORN, false);
	else if (!rc)
		rc = rec_write(r, L->c, &v, L->buf);
	if (rc) {
		L->status = rec_failed(r, rc, L->nl, &L->end);
		return REC_END;
	}
	return REC_GO_ON;
}

/* The progress line on a terminal, at most 4 times a second. */
static void rec_progress(const struct rec *r, struct rec_loop *L, double now)
{
	if (!L->tty || now < L->next_progress)
		return;
	fprintf(stderr,
	        "\rvolrec record: %" PRIu64 " volumes (#%" PRIu64 "), %" PRIu64
	        " missed, %.1f MB, %.0f s%s\033[K",
	        h5rec_count(r->w), r->last_seq, h5rec_missed(r->w),
	        (double)h5rec_count(r->w) * r->l.Y * r->l.X * r->l.Z / 1e6, now - L->run.t0,
	        L->run.away_since ? ", waiting for the daemon" : "");
	L->next_progress = now + 0.25;
}

/* Record until the count, the time, Ctrl-C, an error, or the daemon gone for good. */
static void rec_loop(struct rec *r, struct rec_loop *L)
{
	enum rec_step step = REC_GO_ON;

	tool_catch_signals();
	L->nl = "";
	L->run.t0 = vr_mono_s();
	while (step == REC_GO_ON) {
		struct volrec_message m;
		double now = vr_mono_s();
		int rc;

		if (L->run.count && h5rec_count(r->w) >= L->run.count)
			break;
		if (tool_run_time_up(&L->run, now)) {
			L->end = "time reached";
			break;
		}
		if (tool_interrupted()) {
			L->end = "interrupted";
			break;
		}
		rec_progress(r, L, now);
		L->nl = L->tty ? "\n" : "";
		rc = volrec_client_next_message(L->c, tool_run_wait_ms(&L->run, now, 200), &m);
		if (rc == -ETIMEDOUT)
			step = rec_quiet(L, now);
		else if (rc == -EINTR || rc == -EAGAIN || rc == -EPROTO)
			continue;
		else if (rc) {
			fprintf(stderr, "%svolrec record: %s: %s\n", L->nl, volrec_strerror(rc),
			        volrec_client_error(L->c));
			L->status = VR_EXIT_FAIL;
			L->end = "client error";
			step = REC_END;
		} else if (m.type == VOLREC_MSG_STATUS)
			step = rec_on_status(r, L, m.text, m.len);
		else if (m.type == VOLREC_MSG_EVENT)
			rec_on_event(L, m.text, m.len);
		else
			step = rec_on_volume(r, L, &m);
	}
	if (step == REC_GONE) {
		L->end = L->run.stopping ? "the daemon stopped" : "the daemon went away";
		if (rec_miss_tail(r, L->nl))
			fprintf(stderr, "%svolrec record: %s\n", L->nl, r->err);
		fprintf(stderr, "%svolrec record: volrecd of instance '%s' %s%s\n", L->nl,
		        L->tg->instance, L->run.stopping ? "stopped" : "went away",
		        L->run.restart_wait > 0 ? " and did not come back within --restart-wait"
		                                : "");
		L->status = VR_EXIT_NO_DAEMON;
	}
}

/* Close the file with its summary, free what the recording held, print the result; the exit
 * status. */
static int rec_finish(struct rec *r, struct rec_loop *L)
{
	int rc, status = L->status;
	const uint64_t missed = h5rec_missed(r->w);

	if (L->tty)
		fprintf(stderr, "\r\033[K");
	volrec_client_close(L->c);
	free(L->buf);
	if (r->seg_fd >= 0)
		close(r->seg_fd);
	rc = h5rec_close(r->w, L->end, status == VR_EXIT_OK && missed == 0, r->sessions,
	                 &r->volumes, r->err, sizeof(r->err));
	r->w = NULL;
	free(r->yaml);
	if (rc) {
		fprintf(stderr, "volrec record: %s\n", r->err);
		if (status == VR_EXIT_OK || status == VR_EXIT_INCOMPLETE)
			status = tool_exit_for_output(rc) == VR_EXIT_NOSPACE ? VR_EXIT_NOSPACE
			                                                     : VR_EXIT_FAIL;
	} else {
		H5close(); /* every HDF5 object is closed: the library may go */
	}
	printf("%s: %" PRIu64 " volumes of %u x %u x %u [Y][X][Z] u8 (%s)", r->path, r->volumes,
	       r->l.Y, r->l.X, r->l.Z, L->end);
	if (missed)
		printf("; %" PRIu64 " missed (see /missed)", missed);
	printf("\n");
	if (status == VR_EXIT_OK && missed)
		status = VR_EXIT_INCOMPLETE;
	return status;
}

VR_COMMAND(record, "write every published volume into HDF5, or record raw spectra (--raw)")
{
	struct rec r = {.seg_fd = -1};
	struct rec_args a = {0};
	struct tool_target tg;
	struct rec_loop L = {.tg = &tg, .tty = isatty(STDERR_FILENO), .nl = ""};
	int rc;

	h5vol_init();
	tool_target_init(&tg);
	tool_run_init(&L.run);
	rc = rec_parse(argc, argv, &tg, &L.run, &r, &a);
	if (rc != TOOL_ARGS_GO_ON)
		return rc;
	if (a.raw || a.in_daemon)
		return record_in_daemon(&tg, &L.run, a.raw ? a.raw : a.in_daemon, a.raw != NULL);
	L.status = rec_setup(&r, &L, &a);
	if (L.status == VR_EXIT_OK)
		rec_loop(&r, &L);
	else if (!L.end) { /* no file made */
		volrec_client_close(L.c);
		return L.status;
	}
	return rec_finish(&r, &L);
}
