/* SPDX-License-Identifier: MIT */
/*
 * `volrec record`: subscribe to a running daemon and write every volume into HDF5, copied out of
 * its leased slot and checked not torn. Volumes it could not get (sequence gaps, torn reads) are
 * listed in /missed and on stderr, and the exit status says so.
 */
#include <errno.h>
#include <getopt.h>
#include <hdf5.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "h5attr.h"
#include "config/config.h"
#include "tools.h"

#define REC_CHUNK_META 1024      /* rows per chunk of the per-volume datasets */
#define REC_MARGIN     (1 << 20) /* bytes kept free for the file's metadata at close */

enum rec_reason { REC_GAP = 1, REC_TORN = 2 };

static void record_usage(FILE *f)
{
	fprintf(f,
	        "usage: volrec record -o FILE.h5 [-n N | -s S] [--force] [-i NAME] [-r DIR] [-c "
	        "FILE]\n\n"
	        "Subscribe to a running volrecd and write every volume it publishes into HDF5 "
	        "until "
	        "N\n"
	        "volumes are written, S seconds have passed, or Ctrl-C (SIGINT) / SIGTERM. Each "
	        "volume\n"
	        "is copied out of its shared-memory slot and checked not overwritten meanwhile.\n\n"
	        "File layout (h5py: f['volumes'] is [n][Y][X][Z] uint8):\n"
	        "  /volumes      u8  [n][Y][X][Z]  one chunk per volume, extendible\n"
	        "  /sequence     u64 [n]   volume sequence number within its session\n"
	        "  /session      u64 [n]   session id (changes when the daemon rebuilds)\n"
	        "  /volume_id    u64 [n]   the daemon's volume counter\n"
	        "  /epoch        u64 [n]   epoch of the last low-resolution volume interlaced\n"
	        "  /offset       i32 [n][2]  its scan offset (ox, oy)\n"
	        "  /t_first_ns, /t_last_ns, /t_publish_ns  u64 [n]  CLOCK_REALTIME ns: first and "
	        "last\n"
	        "                B-scan acquired, published\n"
	        "  /latency_ns   u64 [n]   processing latency; /flags u32 [n] (2 reset, 4 "
	        "epochs dropped before)\n"
	        "  /missed       [m] {session, first, last, reason}: sequence ranges not "
	        "recorded;\n"
	        "                reason 1 = never received (overwritten before the recorder got "
	        "it:\n"
	        "                it fell behind), 2 = torn (overwritten while being copied)\n"
	        "  attributes: shape [Y, X, Z], instance, volumes, missed, complete, end, the\n"
	        "  geometry, source and backend from the daemon's status (status_json: the whole\n"
	        "  message), config_path, and config_yaml: the daemon's effective configuration\n"
	        "  (<run_dir>/<instance>.yaml, every default filled in), or without it the -c\n"
	        "  file as read now (config_yaml_source says which).\n\n"
	        "  -o, --output FILE    HDF5 file to write (must not exist, unless --force)\n"
	        "  -n, --count N        stop after N volumes written\n"
	        "  -s, --seconds S      stop after S seconds\n"
	        "  -f, --force          replace FILE if it exists\n" TOOL_COMMON_HELP
	        "\n" TOOL_EXIT_HELP ",\n"
	        "4 finished but volumes are missing (listed in /missed and on stderr), 8 disk full "
	        "or\n"
	        "file size limit: stopped, the file is closed and valid up to the last volume. "
	        "On 1, 3\n"
	        "(the daemon went away), 4 and 8 the file holds what was recorded.\n");
}

struct rec_missed {
	uint64_t session, first, last;
	uint8_t reason;
};

struct rec {
	const char *path;
	char dir[TOOL_PATH_MAX];
	hid_t f, vols, seq, session, volid, epoch, offset, tfirst, tlast, tpub, lat, flags, missed;
	hid_t missed_type;
	uint32_t Y, X, Z;
	uint64_t n;       /* volumes written */
	uint64_t nmissed; /* volumes missing */
	uint64_t nranges; /* rows of /missed */
	uint64_t last_session, last_seq;
	char *status;   /* first status message */
	uint64_t bytes; /* written so far (volumes), for the space check */
	char err[1024];
};

static hid_t h5_extendible(hid_t f, const char *name, hid_t type, int rank, const hsize_t *dims,
                           const hsize_t *chunk)
{
	hsize_t cur[4] = {0}, maxd[4];
	hid_t sp, pl, apl, ds = -1;

	for (int i = 0; i < rank; i++) {
		cur[i] = i ? dims[i] : 0;
		maxd[i] = i ? dims[i] : H5S_UNLIMITED;
	}
	sp = H5Screate_simple(rank, cur, maxd);
	pl = H5Pcreate(H5P_DATASET_CREATE);
	apl = H5Pcreate(H5P_DATASET_ACCESS);
	/* no chunk cache: every write reaches the file at once, so errors show at once */
	if (sp >= 0 && pl >= 0 && apl >= 0 && H5Pset_chunk(pl, rank, chunk) >= 0 &&
	    H5Pset_chunk_cache(apl, 0, 0, 1.0) >= 0)
		ds = H5Dcreate2(f, name, type, sp, H5P_DEFAULT, pl, apl);
	if (apl >= 0)
		H5Pclose(apl);
	if (pl >= 0)
		H5Pclose(pl);
	if (sp >= 0)
		H5Sclose(sp);
	return ds;
}

/* Append one row (of rank-1 trailing dims) at index i, growing the dataset to i + 1. */
static int h5_append(hid_t ds, hid_t type, uint64_t i, const void *row)
{
	hsize_t dims[4], start[4] = {i, 0, 0, 0}, count[4];
	hid_t fs = -1, ms = -1;
	int rank, rc = -EIO;

	fs = H5Dget_space(ds);
	rank = fs >= 0 ? H5Sget_simple_extent_dims(fs, dims, NULL) : -1;
	if (fs >= 0)
		H5Sclose(fs);
	if (rank < 1)
		return -EIO;
	dims[0] = i + 1;
	if (H5Dset_extent(ds, dims) < 0)
		return -EIO;
	fs = H5Dget_space(ds);
	count[0] = 1;
	for (int k = 1; k < rank; k++)
		count[k] = dims[k];
	ms = H5Screate_simple(rank, count, NULL);
	if (fs >= 0 && ms >= 0 &&
	    H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL) >= 0 &&
	    H5Dwrite(ds, type, ms, fs, H5P_DEFAULT, row) >= 0)
		rc = 0;
	if (ms >= 0)
		H5Sclose(ms);
	if (fs >= 0)
		H5Sclose(fs);
	return rc;
}

/* errno after a failed HDF5 call, as the sec2 driver left it: ENOSPC/EFBIG/EDQUOT or EIO. */
static int h5_errno(int saved)
{
	return saved == ENOSPC || saved == EFBIG || saved == EDQUOT ? -saved : -EIO;
}

static int rec_open(struct rec *r, bool force)
{
	hsize_t vd[4] = {0, r->Y, r->X, r->Z}, vc[4] = {1, r->Y, r->X, r->Z};
	hsize_t md[2] = {0, 2}, mc[2] = {REC_CHUNK_META, 2}, one[1] = {REC_CHUNK_META};
	char tmp[TOOL_PATH_MAX];
	struct stat st;

	snprintf(tmp, sizeof(tmp), "%s", r->path);
	snprintf(r->dir, sizeof(r->dir), "%s", dirname(tmp));
	if (!force && stat(r->path, &st) == 0) {
		snprintf(r->err, sizeof(r->err), "%s exists (use --force to replace it)", r->path);
		return -EEXIST;
	}
	errno = 0;
	r->f = H5Fcreate(r->path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
	if (r->f < 0) {
		int e = errno ? errno : EIO;

		snprintf(r->err, sizeof(r->err), "cannot create %s: %s", r->path, strerror(e));
		return -e;
	}
	r->vols = h5_extendible(r->f, "volumes", H5T_NATIVE_UINT8, 4, vd, vc);
	r->seq = h5_extendible(r->f, "sequence", H5T_NATIVE_UINT64, 1, one, one);
	r->session = h5_extendible(r->f, "session", H5T_NATIVE_UINT64, 1, one, one);
	r->volid = h5_extendible(r->f, "volume_id", H5T_NATIVE_UINT64, 1, one, one);
	r->epoch = h5_extendible(r->f, "epoch", H5T_NATIVE_UINT64, 1, one, one);
	r->offset = h5_extendible(r->f, "offset", H5T_NATIVE_INT32, 2, md, mc);
	r->tfirst = h5_extendible(r->f, "t_first_ns", H5T_NATIVE_UINT64, 1, one, one);
	r->tlast = h5_extendible(r->f, "t_last_ns", H5T_NATIVE_UINT64, 1, one, one);
	r->tpub = h5_extendible(r->f, "t_publish_ns", H5T_NATIVE_UINT64, 1, one, one);
	r->lat = h5_extendible(r->f, "latency_ns", H5T_NATIVE_UINT64, 1, one, one);
	r->flags = h5_extendible(r->f, "flags", H5T_NATIVE_UINT32, 1, one, one);
	r->missed_type = H5Tcreate(H5T_COMPOUND, sizeof(struct rec_missed));
	if (r->missed_type >= 0) {
		H5Tinsert(r->missed_type, "session", HOFFSET(struct rec_missed, session),
		          H5T_NATIVE_UINT64);
		H5Tinsert(r->missed_type, "first", HOFFSET(struct rec_missed, first),
		          H5T_NATIVE_UINT64);
		H5Tinsert(r->missed_type, "last", HOFFSET(struct rec_missed, last),
		          H5T_NATIVE_UINT64);
		H5Tinsert(r->missed_type, "reason", HOFFSET(struct rec_missed, reason),
		          H5T_NATIVE_UINT8);
		r->missed = h5_extendible(r->f, "missed", r->missed_type, 1, one, one);
	}
	if (r->vols < 0 || r->seq < 0 || r->session < 0 || r->volid < 0 || r->epoch < 0 ||
	    r->offset < 0 || r->tfirst < 0 || r->tlast < 0 || r->tpub < 0 || r->lat < 0 ||
	    r->flags < 0 || r->missed_type < 0 || r->missed < 0) {
		int e = errno;

		snprintf(r->err, sizeof(r->err), "cannot create the datasets in %s: %s", r->path,
		         e ? strerror(e) : "HDF5 error");
		return h5_errno(e);
	}
	return 0;
}

/* Note sequences [first, last] of session as missing: stderr and /missed. */
static int rec_miss(struct rec *r, uint64_t session, uint64_t first, uint64_t last,
                    enum rec_reason why)
{
	struct rec_missed m = {session, first, last, (uint8_t)why};

	r->nmissed += last - first + 1;
	if (first == last)
		fprintf(stderr, "volrec record: volume #%" PRIu64 " missed (%s)\n", first,
		        why == REC_TORN ? "torn: overwritten while being copied"
		                        : "never received: overwritten before the recorder got it");
	else
		fprintf(stderr, "volrec record: volumes #%" PRIu64 "-#%" PRIu64 " missed (%s)\n",
		        first, last,
		        why == REC_TORN ? "torn" : "never received: the recorder fell behind");
	errno = 0;
	if (h5_append(r->missed, r->missed_type, r->nranges, &m)) {
		snprintf(r->err, sizeof(r->err), "cannot write /missed: %s",
		         errno ? strerror(errno) : "HDF5 error");
		return h5_errno(errno);
	}
	r->nranges++;
	return 0;
}

static int rec_write(struct rec *r, const struct volrec_view *v, const void *data)
{
	int32_t off[2] = {v->offset_x, v->offset_y};
	int rc;

	rc = tool_space_check(r->dir, r->bytes, v->bytes + REC_MARGIN, r->err, sizeof(r->err));
	if (rc)
		return rc;
	errno = 0;
	if (h5_append(r->vols, H5T_NATIVE_UINT8, r->n, data) ||
	    h5_append(r->seq, H5T_NATIVE_UINT64, r->n, &v->sequence) ||
	    h5_append(r->session, H5T_NATIVE_UINT64, r->n, &v->session_id) ||
	    h5_append(r->volid, H5T_NATIVE_UINT64, r->n, &v->volume_id) ||
	    h5_append(r->epoch, H5T_NATIVE_UINT64, r->n, &v->epoch) ||
	    h5_append(r->offset, H5T_NATIVE_INT32, r->n, off) ||
	    h5_append(r->tfirst, H5T_NATIVE_UINT64, r->n, &v->t_first_ns) ||
	    h5_append(r->tlast, H5T_NATIVE_UINT64, r->n, &v->t_last_ns) ||
	    h5_append(r->tpub, H5T_NATIVE_UINT64, r->n, &v->t_publish_ns) ||
	    h5_append(r->lat, H5T_NATIVE_UINT64, r->n, &v->latency_ns) ||
	    h5_append(r->flags, H5T_NATIVE_UINT32, r->n, &v->flags)) {
		int e = errno;

		snprintf(r->err, sizeof(r->err), "cannot write volume #%" PRIu64 ": %s",
		         v->sequence, e ? strerror(e) : "HDF5 error");
		return h5_errno(e);
	}
	r->n++;
	r->bytes += v->bytes;
	return 0;
}

/* The status message's figures as attributes (geometry, source, backend, config path). */
static void rec_status_attrs(struct rec *r)
{
	static const char *const nums[] = {"geometry.samples_per_ascan",
	                                   "geometry.ascans_per_bscan",
	                                   "geometry.bscans_per_volume"};
	struct tool_json j;
	char s[1024];

	if (!r->status || tool_json_parse(&j, r->status, strlen(r->status), NULL))
		return;
	vr_h5_attr_str(r->f, "status_json", r->status);
	for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]); i++)
		vr_h5_attr_u64(r->f, strchr(nums[i], '.') + 1, tool_json_u64(&j, nums[i], 0));
	{
		uint32_t stride[2] = {(uint32_t)tool_json_u64(&j, "geometry.stride.0", 0),
		                      (uint32_t)tool_json_u64(&j, "geometry.stride.1", 0)};
		uint32_t depth[2] = {(uint32_t)tool_json_u64(&j, "geometry.depth_range.0", 0),
		                     (uint32_t)tool_json_u64(&j, "geometry.depth_range.1", 0)};

		vr_h5_attr(r->f, "stride", H5T_NATIVE_UINT32, 2, stride);
		vr_h5_attr(r->f, "depth_range", H5T_NATIVE_UINT32, 2, depth);
	}
	if (tool_json_str(&j, "geometry.sample_type", s, sizeof(s)))
		vr_h5_attr_str(r->f, "sample_type", s);
	if (tool_json_str(&j, "geometry.mode", s, sizeof(s)))
		vr_h5_attr_str(r->f, "reconstruct_mode", s);
	if (tool_json_str(&j, "source.type", s, sizeof(s)))
		vr_h5_attr_str(r->f, "source", s);
	if (tool_json_str(&j, "source.device", s, sizeof(s)))
		vr_h5_attr_str(r->f, "source_device", s);
	if (tool_json_str(&j, "backend.name", s, sizeof(s)))
		vr_h5_attr_str(r->f, "backend", s);
	if (tool_json_str(&j, "backend.device", s, sizeof(s)))
		vr_h5_attr_str(r->f, "device", s);
	if (tool_json_str(&j, "config", s, sizeof(s)))
		vr_h5_attr_str(r->f, "config_path", s);
	tool_json_free(&j);
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

/* Write the summary attributes and close everything; 0 or a negative errno. */
static int rec_close(struct rec *r, const struct tool_target *t, const char *end, bool complete)
{
	hid_t *ds[] = {&r->vols,   &r->seq,   &r->session, &r->volid, &r->epoch, &r->offset,
	               &r->tfirst, &r->tlast, &r->tpub,    &r->lat,   &r->flags, &r->missed};
	uint32_t shape[3] = {r->Y, r->X, r->Z};
	int rc = 0;

	if (r->f < 0)
		return 0;
	errno = 0;
	vr_h5_attr(r->f, "shape", H5T_NATIVE_UINT32, 3, shape);
	vr_h5_attr_str(r->f, "layout", "volumes [n][Y][X][Z] u8, Z (depth) fastest");
	vr_h5_attr_str(r->f, "instance", t->instance);
	vr_h5_attr_u64(r->f, "volumes", r->n);
	vr_h5_attr_u64(r->f, "missed_volumes", r->nmissed);
	vr_h5_attr_str(r->f, "end", end);
	vr_h5_attr_u64(r->f, "complete", complete ? 1 : 0);
	vr_h5_attr_str(r->f, "missed_reasons",
	               "1 never received (overwritten before the recorder got it), 2 torn "
	               "(overwritten while being copied)");
	vr_h5_attr_str(r->f, "volrec_version", VOLREC_VERSION);
	rec_status_attrs(r);
	{
		/* what the daemon runs (its <run_dir>/<instance>.yaml), else the -c file as read now */
		char *y = daemon_config_yaml(t);
		const char *from = "daemon";

		if (!y && t->config[0]) {
			y = config_yaml(t->config);
			from = "config file";
		}
		if (y) {
			vr_h5_attr_str(r->f, "config_yaml", y);
			vr_h5_attr_str(r->f, "config_yaml_source", from);
		}
		free(y);
	}
	for (size_t i = 0; i < sizeof(ds) / sizeof(ds[0]); i++)
		if (*ds[i] >= 0) {
			if (H5Dclose(*ds[i]) < 0)
				rc = h5_errno(errno);
			*ds[i] = -1;
		}
	if (r->missed_type >= 0)
		H5Tclose(r->missed_type);
	r->missed_type = -1;
	if (H5Fclose(r->f) < 0 && !rc)
		rc = h5_errno(errno);
	r->f = -1;
	return rc;
}

VR_COMMAND(record, "write every published volume into HDF5, reporting any it missed")
{
	static const struct option longopts[] = {
	        TOOL_COMMON_LONGOPTS,
	        {"output", required_argument, NULL, 'o'},
	        {"count", required_argument, NULL, 'n'},
	        {"seconds", required_argument, NULL, 's'},
	        {"force", no_argument, NULL, 'f'},
	        {"help", no_argument, NULL, 'h'},
	        {NULL, 0, NULL, 0},
	};
	struct rec r = {.f = -1,
	                .vols = -1,
	                .seq = -1,
	                .session = -1,
	                .volid = -1,
	                .epoch = -1,
	                .offset = -1,
	                .tfirst = -1,
	                .tlast = -1,
	                .tpub = -1,
	                .lat = -1,
	                .flags = -1,
	                .missed = -1,
	                .missed_type = -1};
	struct tool_target tg;
	struct tool_daemon d;
	struct volrec_client *c = NULL;
	uint64_t count = 0;
	double seconds = 0, t0, next_progress = 0;
	bool force = false, tty = isatty(STDERR_FILENO), stopping = false;
	const char *end = "count reached";
	uint8_t *buf = NULL;
	int opt, rc, status = VR_EXIT_OK;

	tool_target_init(&tg);
	optind = 1;
	while ((opt = getopt_long(argc, argv, "i:r:c:o:n:s:fh", longopts, NULL)) != -1) {
		rc = tool_target_option(&tg, "record", opt, optarg);
		if (rc < 0)
			return VR_EXIT_USAGE;
		if (rc)
			continue;
		switch (opt) {
		case 'o':
			r.path = optarg;
			break;
		case 'n':
			if (tool_parse_u64(optarg, 1, UINT64_MAX, &count)) {
				fprintf(stderr, "volrec record: -n %s: need a whole number >= 1\n",
				        optarg);
				return VR_EXIT_USAGE;
			}
			break;
		case 's':
			if (tool_parse_seconds(optarg, &seconds)) {
				fprintf(stderr, "volrec record: --seconds %s: need seconds > 0\n",
				        optarg);
				return VR_EXIT_USAGE;
			}
			break;
		case 'f':
			force = true;
			break;
		case 'h':
			record_usage(stdout);
			return VR_EXIT_OK;
		default:
			record_usage(stderr);
			return VR_EXIT_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "volrec record: unexpected argument '%s'\n", argv[optind]);
		return VR_EXIT_USAGE;
	}
	if (!r.path || !*r.path || strlen(r.path) >= TOOL_PATH_MAX) {
		fprintf(stderr, "volrec record: -o FILE.h5 is required (see --help)\n");
		return VR_EXIT_USAGE;
	}
	rc = tool_target_finish(&tg, "record");
	if (rc)
		return rc;
	rc = tool_daemon_require(&tg, "record", &d);
	if (rc)
		return rc;
	if (!d.have_header || !d.header.ny || !d.header.nx || !d.header.nz ||
	    d.header.dtype != VOLREC_DTYPE_U8) {
		fprintf(stderr,
		        "volrec record: the shared memory of instance '%s' holds no u8 volumes "
		        "(%s)\n",
		        tg.instance, d.have_header ? "output.dtype is not u8" : "no segment");
		return d.have_header ? VR_EXIT_FAIL : VR_EXIT_NO_DAEMON;
	}
	/* generous queue: notifications are 128 bytes; volumes themselves stay in the slots */
	rc = tool_client_open(&tg, "record", VOLREC_SUB_VOL | VOLREC_SUB_STATUS | VOLREC_SUB_EVENT,
	                      100000, &c);
	if (rc)
		return rc;
	r.Y = d.header.ny;
	r.X = d.header.nx;
	r.Z = d.header.nz;
	H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
	rc = rec_open(&r, force);
	if (rc) {
		fprintf(stderr, "volrec record: %s\n", r.err);
		rec_close(&r, &tg, "could not create", false);
		if (rc != -EEXIST)
			unlink(r.path);
		volrec_client_close(c);
		return rc == -EEXIST ? VR_EXIT_USAGE : tool_exit_for(rc);
	}
	buf = malloc((size_t)r.Y * r.X * r.Z);
	if (!buf) {
		fprintf(stderr, "volrec record: out of memory\n");
		status = VR_EXIT_FAIL;
		end = "out of memory";
		goto out;
	}
	tool_catch_signals();
	t0 = tool_now();
	for (;;) {
		struct volrec_message m;
		double now = tool_now();
		int wait_ms = 200;

		if (count && r.n >= count)
			break;
		if (seconds && now - t0 >= seconds) {
			end = "time reached";
			break;
		}
		if (tool_interrupted()) {
			end = "interrupted";
			break;
		}
		if (tty && now >= next_progress) {
			fprintf(stderr,
			        "\rvolrec record: %" PRIu64 " volumes (#%" PRIu64 "), %" PRIu64
			        " missed, %.1f MB, %.0f s\033[K",
			        r.n, r.last_seq, r.nmissed, (double)r.bytes / 1e6, now - t0);
			next_progress = now + 0.25;
		}
		if (seconds && (t0 + seconds - now) * 1000 < wait_ms)
			wait_ms = (int)((t0 + seconds - now) * 1000) + 1;
		rc = volrec_client_next_message(c, wait_ms, &m);
		if (rc == -ETIMEDOUT || rc == -EINTR || rc == -EAGAIN || rc == -EPROTO) {
			if (rc == -ETIMEDOUT && !tool_pid_is_volrecd(d.pid) &&
			    (tool_daemon_find(&tg, &d) || !d.pid)) {
				end = stopping ? "the daemon stopped" : "the daemon went away";
				fprintf(stderr, "%svolrec record: volrecd of instance '%s' %s\n",
				        tty ? "\n" : "", tg.instance,
				        stopping ? "stopped" : "went away");
				status = VR_EXIT_NO_DAEMON;
				break;
			}
			continue;
		}
		if (rc) {
			fprintf(stderr, "volrec record: %s: %s\n", volrec_strerror(rc),
			        volrec_client_error(c));
			status = VR_EXIT_FAIL;
			end = "client error";
			break;
		}
		if (m.type == VOLREC_MSG_STATUS) {
			if (!r.status)
				r.status = strndup(m.text, m.len);
			continue;
		}
		if (m.type == VOLREC_MSG_EVENT) {
			struct tool_json ev;
			char name[64];

			if (!tool_json_parse(&ev, m.text, m.len, NULL)) {
				tool_json_str(&ev, "event", name, sizeof(name));
				if (!strcmp(name, "stopping"))
					stopping = true;
				tool_json_free(&ev);
			}
			continue;
		}

		/* a volume: account for gaps, copy it out, check it was not torn, write it */
		{
			struct volrec_view v = m.view;
			uint64_t first = 1;
			bool torn;

			if (v.ny != r.Y || v.nx != r.X || v.nz != r.Z) {
				volrec_view_release(c, &m.view);
				fprintf(stderr,
				        "%svolrec record: the daemon rebuilt with another shape "
				        "(%u x "
				        "%u x %u, was %u x %u x %u): stopping\n",
				        tty ? "\n" : "", v.ny, v.nx, v.nz, r.Y, r.X, r.Z);
				status = VR_EXIT_FAIL;
				end = "shape changed";
				break;
			}
			memcpy(buf, v.data, v.bytes);
			torn = volrec_view_release(c, &m.view) == VOLREC_ETORN;
			if (r.last_session == v.session_id)
				first = r.last_seq + 1;
			else if (!r.last_session)
				first = v.sequence; /* recording starts here */
			rc = 0;
			if (v.sequence > first)
				rc = rec_miss(&r, v.session_id, first, v.sequence - 1, REC_GAP);
			r.last_session = v.session_id;
			r.last_seq = v.sequence;
			if (!rc && torn)
				rc = rec_miss(&r, v.session_id, v.sequence, v.sequence, REC_TORN);
			else if (!rc)
				rc = rec_write(&r, &v, buf);
			if (rc) {
				fprintf(stderr, "%svolrec record: %s: %s: stopping\n",
				        tty ? "\n" : "", r.path, r.err);
				status = tool_exit_for(rc) == VR_EXIT_NOSPACE ? VR_EXIT_NOSPACE
				                                              : VR_EXIT_FAIL;
				end = status == VR_EXIT_NOSPACE ? "disk full" : "write error";
				break;
			}
		}
	}
out:
	if (tty)
		fprintf(stderr, "\r\033[K");
	volrec_client_close(c);
	free(buf);
	{
		bool complete = status == VR_EXIT_OK && r.nmissed == 0;

		rc = rec_close(&r, &tg, end, complete);
	}
	if (rc) {
		fprintf(stderr, "volrec record: closing %s: %s\n", r.path,
		        rc == -ENOSPC ? "disk full" : strerror(-rc));
		if (status == VR_EXIT_OK || status == VR_EXIT_INCOMPLETE)
			status = tool_exit_for(rc) == VR_EXIT_NOSPACE ? VR_EXIT_NOSPACE
			                                              : VR_EXIT_FAIL;
	}
	free(r.status);
	printf("%s: %" PRIu64 " volumes of %u x %u x %u [Y][X][Z] u8 (%s)", r.path, r.n, r.Y, r.X,
	       r.Z, end);
	if (r.nmissed)
		printf("; %" PRIu64 " missed (see /missed)", r.nmissed);
	printf("\n");
	if (status == VR_EXIT_OK && r.nmissed)
		status = VR_EXIT_INCOMPLETE;
	return status;
}
