/* SPDX-License-Identifier: MIT */
/*
 * `volrec reprocess`: checking the inputs, the plan (chunks of frames with their warm-up,
 * docs/cluster.md "Chunks and warm-up") and the store that holds it.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "formats/fmt.h"
#include "sources/recording.h"
#include "sources/source.h"
#include "tools/process.h"
#include "tools/reprocess.h"

#define RP_PLAN_VERSION 1

/* ---- files --------------------------------------------------------------------------------- */

void rp_path(const struct rp_plan *p, char *buf, size_t len, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(buf, len, "%s/.volrec/", p->out);

	va_start(ap, fmt);
	if (n >= 0 && (size_t)n < len)
		vsnprintf(buf + n, len - (size_t)n, fmt, ap);
	va_end(ap);
}

int rp_json_write(const char *path, struct json_object *o, char *err, size_t errlen)
{
	char tmp[PATH_MAX], dir[PATH_MAX], *slash;
	const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY |
	                                                          JSON_C_TO_STRING_NOSLASHESCAPE);
	int fd, rc;

	snprintf(tmp, sizeof(tmp), "%s.tmp-%ld", path, (long)getpid());
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	if (fd < 0)
		return vr_err_errno(err, errlen, -errno, "%s", tmp);
	rc = fmt_write_all(fd, s, strlen(s));
	if (rc == 0 && fsync(fd) < 0)
		rc = -errno;
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	if (rc == 0 && rename(tmp, path) < 0)
		rc = -errno;
	if (rc < 0) {
		unlink(tmp);
		return vr_err_errno(err, errlen, rc, "%s", path);
	}
	snprintf(dir, sizeof(dir), "%s", path);
	slash = strrchr(dir, '/');
	if (slash) {
		*slash = 0;
		fmt_sync_path(dir);
	}
	return 0;
}

char *rp_tail(const char *path, size_t max)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	char *buf;
	ssize_t n;

	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) < 0 || !(buf = malloc(max + 1))) {
		close(fd);
		return NULL;
	}
	n = vr_pread_upto(fd, buf, max,
	                  (uint64_t)st.st_size > max ? (uint64_t)st.st_size - max : 0);
	close(fd);
	if (n < 0) {
		free(buf);
		return NULL;
	}
	buf[n] = 0;
	/* from the first whole line */
	if ((uint64_t)st.st_size > max && strchr(buf, '\n'))
		memmove(buf, strchr(buf, '\n') + 1, strlen(strchr(buf, '\n') + 1) + 1);
	return buf;
}

const char *rp_host(void)
{
	static char host[256];

	if (!host[0] && gethostname(host, sizeof(host) - 1) < 0)
		snprintf(host, sizeof(host), "unknown");
	return host;
}

const char *rp_self_exe(void)
{
	static char path[PATH_MAX];
	ssize_t n;

	if (!path[0]) {
		n = readlink("/proc/self/exe", path, sizeof(path) - 1);
		path[n > 0 ? n : 0] = 0;
	}
	return path;
}

/* ---- inputs -------------------------------------------------------------------------------- */

/* CRC-32C of the whole file and of each frame's data against its index entry, in one pass. */
static int rec_verify(struct rp_rec *r, const struct src_replay_info *info,
                      const struct src_rec_frame *f, uint64_t n, char *err, size_t errlen)
{
	const uint64_t epoch_bytes = src_replay_epoch_bytes(info);
	const uint64_t frame = src_rec_frame_size(epoch_bytes);
	const size_t block = 4u << 20;
	uint8_t *buf = malloc(block);
	uint64_t at = 0, bad = 0, first_bad = 0;
	uint32_t crc = 0;
	int fd, rc = 0;

	fd = open(r->path, O_RDONLY | O_CLOEXEC);
	if (!buf || fd < 0) {
		rc = vr_err_errno(err, errlen, buf ? -errno : -ENOMEM, "%s", r->path);
		goto out;
	}
	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	/* the header, then each frame: its head and padding in the file's CRC only */
	for (uint64_t i = 0; i <= n && rc == 0; i++) {
		uint64_t start = i == 0 ? 0 : info->header_size + (i - 1) * frame;
		uint64_t len = i == 0 ? info->header_size : frame;
		uint32_t dcrc = 0;

		for (uint64_t done = 0; done < len && rc == 0;) {
			size_t k = len - done < block ? (size_t)(len - done) : block;
			rc = vr_pread_full(fd, buf, k, start + done);
			if (rc) {
				rc = vr_err_errno(err, errlen, rc, "%s: reading bytes %llu..%llu",
				                  r->path, (unsigned long long)(start + done),
				                  (unsigned long long)(start + done + k));
				break;
			}
			crc = src_crc32c(crc, buf, k);
			if (i > 0) {
				/* the data part of this block: [HDR, HDR + epoch_bytes) of the frame */
				uint64_t lo = done, hi = done + k;
				uint64_t dlo = SRC_REC_FRAME_HDR,
				         dhi = SRC_REC_FRAME_HDR + epoch_bytes;
				if (hi > dlo && lo < dhi) {
					uint64_t a = lo > dlo ? lo : dlo, b = hi < dhi ? hi : dhi;
					dcrc = src_crc32c(dcrc, buf + (a - lo), (size_t)(b - a));
				}
			}
			done += k;
		}
		if (rc == 0 && i > 0 && dcrc != f[i - 1].crc) {
			if (!bad)
				first_bad = f[i - 1].epoch;
			bad++;
		}
		at = start + len;
	}
	/* a frame cut short after the last complete one */
	for (uint64_t end = r->size; rc == 0 && at < end;) {
		size_t k = end - at < block ? (size_t)(end - at) : block;
		rc = vr_pread_full(fd, buf, k, at);
		if (rc)
			rc = vr_err_errno(err, errlen, rc, "%s", r->path);
		else
			crc = src_crc32c(crc, buf, k);
		at += k;
	}
	if (rc == 0 && bad)
		rc = vr_err(
		        err, errlen, -EBADMSG,
		        "%s: %llu recorded epochs fail their CRC-32C, the first epoch %llu: the "
		        "recording is damaged (`volrec process --source %s --on-crc-error skip` "
		        "names each and processes the others)",
		        r->path, (unsigned long long)bad, (unsigned long long)first_bad, r->path);
	r->crc = crc;
out:
	if (fd >= 0)
		close(fd);
	free(buf);
	return rc;
}

/* The configuration fits the recording: the replay source's own checks (sample type, K, nx, ny,
 * stride, scan direction), opening it as `volrec process` will. */
static int rec_fits(const struct vr_config *cfg, const char *rec, char *err, size_t errlen)
{
	struct vr_config c = *cfg;
	struct src_source src = {0};
	int rc;

	c.source.type = CFG_SOURCE_REPLAY;
	snprintf(c.source.replay.path, sizeof(c.source.replay.path), "%s", rec);
	c.source.replay.format = CFG_REPLAY_AUTO;
	c.source.replay.loop = false;
	rc = src_open(&c, SRC_UNPACED | SRC_NO_LOOP | SRC_DROP_MARKS, &src, err, errlen);
	if (rc == 0)
		src_close(&src);
	return rc;
}

static char *rec_name(const char *path)
{
	const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	size_t n = strlen(base);

	if (n > 4 && !strcmp(base + n - 4, ".vrr"))
		n -= 4;
	return strndup(base, n);
}

/* Frames of warm-up before frame a: back to the frame from which every scan offset of the
 * interlacing cycle was recorded again, frame a's included (S-1 frames without gaps), or to
 * frame 0. */
static uint64_t warm_up(const struct vr_config *cfg, const struct src_rec_frame *f, uint64_t a)
{
	const uint32_t sx = cfg->geometry.stride[0], S = sx * cfg->geometry.stride[1];
	bool seen[128 * 128] = {false};
	uint32_t have = 0;

	if (cfg->reconstruct.mode == CFG_RECON_NONE || a == 0)
		return 0;
	/* frame a's own offset is written before its volume is made */
	if (f[a].oy * sx + f[a].ox < S) {
		seen[f[a].oy * sx + f[a].ox] = true;
		if (++have == S)
			return 0;
	}
	for (uint64_t i = a; i > 0; i--) {
		uint32_t q = f[i - 1].oy * sx + f[i - 1].ox;
		if (q < S && !seen[q]) {
			seen[q] = true;
			if (++have == S)
				return a - (i - 1);
		}
	}
	return a;
}

/* ---- the plan as JSON ---------------------------------------------------------------------- */

static struct json_object *hex32(uint32_t v)
{
	char s[16];

	snprintf(s, sizeof(s), "%08x", v);
	return json_object_new_string(s);
}

static char *file_text(const char *path, uint32_t *crc, char *err, size_t errlen)
{
	FILE *f = fopen(path, "rb");
	char *text = NULL;
	size_t len = 0, cap = 0, k;

	if (!f) {
		vr_err_errno(err, errlen, -errno, "%s", path);
		return NULL;
	}
	do {
		if (len + 4096 + 1 > cap) {
			char *t = realloc(text, cap = cap ? 2 * cap : 8192);
			if (!t) {
				free(text);
				fclose(f);
				vr_err(err, errlen, -ENOMEM, "out of memory");
				return NULL;
			}
			text = t;
		}
		k = fread(text + len, 1, 4096, f);
		len += k;
	} while (k > 0);
	fclose(f);
	text[len] = 0;
	*crc = src_crc32c(0, text, len);
	return text;
}

static const char *warm_up_rule(const struct vr_config *cfg)
{
	switch (cfg->reconstruct.mode) {
	case CFG_RECON_NONE:
		return "none: each volume is made of its own epoch";
	case CFG_RECON_NONCUMULATIVE:
		return "the frames before the chunk back to where every scan offset of the "
		       "interlacing cycle was recorded again (S-1 without gaps)";
	default:
		return "one chunk per recording: the history of this mode has no bound";
	}
}

static struct json_object *plan_json(const struct rp_plan *p, const char *config_text)
{
	struct json_object *o = json_object_new_object(), *c = json_object_new_object();
	struct json_object *recs = json_object_new_array(), *chunks = json_object_new_array();
	struct json_object *stride = json_object_new_array();

	json_object_object_add(o, "plan_version", json_object_new_int(RP_PLAN_VERSION));
	json_object_object_add(c, "path", json_object_new_string(p->config));
	json_object_object_add(c, "crc32c", hex32(p->config_crc));
	json_object_object_add(c, "text", json_object_new_string(config_text));
	json_object_object_add(o, "config", c);
	json_object_object_add(
	        o, "reconstruct_mode",
	        json_object_new_string(cfg_recon_mode_name(p->cfg.reconstruct.mode)));
	json_object_array_add(stride, json_object_new_int((int)p->cfg.geometry.stride[0]));
	json_object_array_add(stride, json_object_new_int((int)p->cfg.geometry.stride[1]));
	json_object_object_add(o, "stride", stride);
	json_object_object_add(o, "chunk_epochs", json_object_new_int64((int64_t)p->chunk_epochs));
	json_object_object_add(o, "codec", json_object_new_string(fmt_codec_name(p->codec)));
	json_object_object_add(o, "warm_up", json_object_new_string(warm_up_rule(&p->cfg)));
	for (size_t i = 0; i < p->nrecs; i++) {
		const struct rp_rec *r = &p->recs[i];
		struct json_object *j = json_object_new_object();

		json_object_object_add(j, "name", json_object_new_string(r->name));
		json_object_object_add(j, "path", json_object_new_string(r->path));
		json_object_object_add(j, "size", json_object_new_int64((int64_t)r->size));
		json_object_object_add(j, "crc32c", hex32(r->crc));
		json_object_object_add(j, "frames", json_object_new_int64((int64_t)r->nframes));
		json_object_array_add(recs, j);
	}
	json_object_object_add(o, "recordings", recs);
	for (size_t k = 0; k < p->nchunks; k++) {
		const struct rp_chunk *ch = &p->chunks[k];
		struct json_object *j = json_object_new_object(), *fr = json_object_new_array();

		json_object_object_add(j, "recording", json_object_new_int((int)ch->rec));
		json_object_array_add(fr, json_object_new_int64((int64_t)ch->a));
		json_object_array_add(fr, json_object_new_int64((int64_t)ch->b));
		json_object_object_add(j, "frames", fr);
		json_object_object_add(j, "warm_up", json_object_new_int64((int64_t)ch->w));
		json_object_array_add(chunks, j);
	}
	json_object_object_add(o, "chunks", chunks);
	return o;
}

/* ---- making the plan ----------------------------------------------------------------------- */

static char *absolute(const char *path)
{
	char *r = realpath(path, NULL);

	return r ? r : strdup(path);
}

/* out may not exist: its folder's real path and its name. */
static char *absolute_new(const char *path)
{
	char *copy = strdup(path), *slash, *dir, *r = NULL;
	size_t n;

	if (!copy)
		return NULL;
	n = strlen(copy);
	while (n > 1 && copy[n - 1] == '/')
		copy[--n] = 0;
	slash = strrchr(copy, '/');
	if (!slash) {
		dir = realpath(".", NULL);
		if (dir && asprintf(&r, "%s/%s", dir, copy) < 0)
			r = NULL;
	} else {
		*slash = 0;
		dir = realpath(copy[0] ? copy : "/", NULL);
		if (dir && asprintf(&r, "%s/%s", strcmp(dir, "/") ? dir : "", slash + 1) < 0)
			r = NULL;
	}
	free(dir);
	free(copy);
	return r;
}

static int plan_chunks(struct rp_plan *p, struct src_rec_frame *const *frames)
{
	size_t cap = 0;

	for (size_t i = 0; i < p->nrecs; i++) {
		uint64_t n = p->recs[i].nframes;
		uint64_t e = p->chunk_epochs ? p->chunk_epochs : n;

		for (uint64_t a = 0; a < n; a += e) {
			if (p->nchunks == cap) {
				struct rp_chunk *c =
				        realloc(p->chunks, (cap = cap ? 2 * cap : 64) * sizeof(*c));
				if (!c)
					return -ENOMEM;
				p->chunks = c;
			}
			p->chunks[p->nchunks++] = (struct rp_chunk){
			        .rec = (unsigned)i,
			        .a = a,
			        .b = a + e < n ? a + e : n,
			        .w = warm_up(&p->cfg, frames[i], a),
			};
		}
	}
	return 0;
}

int rp_plan_make(struct rp_plan *p, const char *config, char *const *recs, size_t nrecs,
                 const char *out, uint64_t chunk_epochs, bool chunk_given, enum fmt_codec codec,
                 char *err, size_t errlen)
{
	struct src_rec_frame **frames = calloc(nrecs ? nrecs : 1, sizeof(*frames));
	char *text = NULL;
	bool cfg_loaded = false;
	int rc = 0;

	memset(p, 0, sizeof(*p));
	p->chunk_epochs = chunk_epochs;
	p->codec = codec ? codec : FMT_CODEC_ZSTD;
	p->out = absolute_new(out);
	p->config = absolute(config);
	p->recs = calloc(nrecs ? nrecs : 1, sizeof(*p->recs));
	if (!frames || !p->out || !p->config || !p->recs) {
		rc = vr_err(err, errlen, -ENOMEM, "out of memory");
		goto out;
	}
	cfg_defaults(&p->cfg);
	rc = cfg_load(&p->cfg, config, err, errlen);
	if (rc < 0)
		goto out;
	cfg_loaded = true;
	text = file_text(config, &p->config_crc, err, errlen);
	if (!text) {
		rc = -EIO;
		goto out;
	}
	if (p->cfg.reconstruct.mode != CFG_RECON_NONE &&
	    p->cfg.reconstruct.mode != CFG_RECON_NONCUMULATIVE && chunk_epochs) {
		rc = vr_err(
		        err, errlen, -EINVAL,
		        "%s: reconstruct.mode %s keeps a history without bound, so a chunk "
		        "that starts inside a recording cannot give the volumes of one run over "
		        "it: give --chunk-epochs 0 (one chunk per recording)%s",
		        config, cfg_recon_mode_name(p->cfg.reconstruct.mode),
		        chunk_given ? "" : " (man volrec: volrec reprocess)");
		goto out;
	}
	for (size_t i = 0; i < nrecs && rc == 0; i++) {
		struct rp_rec *r = &p->recs[i];
		struct src_replay_info info;
		struct stat st;

		r->path = absolute(recs[i]);
		r->name = rec_name(recs[i]);
		if (!r->path || !r->name) {
			rc = vr_err(err, errlen, -ENOMEM, "out of memory");
			break;
		}
		p->nrecs++;
		if (stat(r->path, &st) < 0) {
			rc = vr_err_errno(err, errlen, -errno, "%s", recs[i]);
			break;
		}
		r->size = (uint64_t)st.st_size;
		if (!r->name[0] || r->name[0] == '.') {
			rc = vr_err(err, errlen, -EINVAL,
			            "%s: its name '%s' cannot name an image of the store (empty or "
			            "hidden)",
			            recs[i], r->name);
			break;
		}
		for (size_t j = 0; j < i; j++)
			if (!strcmp(p->recs[j].name, r->name))
				rc = vr_err(
				        err, errlen, -EINVAL,
				        "%s and %s have the same name '%s': the store holds one "
				        "image per name (rename one of them)",
				        p->recs[j].path, r->path, r->name);
		if (rc)
			break;
		rc = src_rec_index_read(r->path, &info, &frames[i], &r->nframes, err, errlen);
		if (rc == 0 && info.version != SRC_REC_VERSION)
			rc = vr_err(
			        err, errlen, -EINVAL,
			        "%s: a replay file of version %u, not a raw recording (version %u)",
			        r->path, info.version, SRC_REC_VERSION);
		if (rc < 0)
			break;
		rc = rec_fits(&p->cfg, r->path, err, errlen);
		if (rc < 0) {
			vr_err_prefix(err, errlen, "%s does not fit %s: ", config, recs[i]);
			break;
		}
		rc = rec_verify(r, &info, frames[i], r->nframes, err, errlen);
		r->interval_s = r->nframes > 1 && frames[i][r->nframes - 1].t_first_ns >
		                                          frames[i][0].t_first_ns
		                        ? (double)(frames[i][r->nframes - 1].t_first_ns -
		                                   frames[i][0].t_first_ns) *
		                                  1e-9 /
		                                  (double)(frames[i][r->nframes - 1].epoch -
		                                           frames[i][0].epoch)
		                        : NAN;
	}
	if (rc == 0 && plan_chunks(p, frames) < 0)
		rc = vr_err(err, errlen, -ENOMEM, "out of memory");
	if (rc == 0)
		p->json = plan_json(p, text);
out:
	for (size_t i = 0; i < nrecs && frames; i++)
		free(frames[i]);
	free(frames);
	free(text);
	if (rc < 0) {
		if (!cfg_loaded)
			cfg_defaults(&p->cfg); /* nothing for cfg_free to free */
		rp_plan_free(p);
	}
	return rc;
}

/* ---- the store ----------------------------------------------------------------------------- */

static struct json_object *root_attrs(const char *out)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/.zattrs", out);
	return json_object_from_file(path);
}

static int64_t jint(struct json_object *o, const char *key)
{
	struct json_object *v;

	return json_object_object_get_ex(o, key, &v) ? json_object_get_int64(v) : -1;
}

static const char *jstr(struct json_object *o, const char *key)
{
	struct json_object *v;

	return json_object_object_get_ex(o, key, &v) ? json_object_get_string(v) : NULL;
}

int rp_plan_load(struct rp_plan *p, const char *out, char *err, size_t errlen)
{
	struct json_object *a, *rp, *plan, *c, *recs, *chunks;
	struct stat st;
	int rc = 0;

	memset(p, 0, sizeof(*p));
	cfg_defaults(&p->cfg);
	p->out = absolute(out);
	if (!p->out)
		return vr_err(err, errlen, -ENOMEM, "out of memory");
	if (stat(p->out, &st) < 0) {
		rc = vr_err_errno(err, errlen, -errno, "%s", out);
		rp_plan_free(p);
		return rc;
	}
	a = root_attrs(p->out);
	if (!a || !json_object_object_get_ex(a, RP_KEY, &rp) ||
	    !json_object_object_get_ex(rp, "plan", &plan)) {
		json_object_put(a);
		rp_plan_free(p);
		return vr_err(err, errlen, -EINVAL,
		              "%s: not a store of `volrec reprocess` (no plan in its .zattrs)",
		              out);
	}
	p->json = json_object_get(plan);
	json_object_put(a);
	if (!json_object_object_get_ex(plan, "config", &c) ||
	    !json_object_object_get_ex(plan, "recordings", &recs) ||
	    !json_object_object_get_ex(plan, "chunks", &chunks) || !jstr(c, "path") ||
	    jint(plan, "plan_version") != RP_PLAN_VERSION) {
		rp_plan_free(p);
		return vr_err(err, errlen, -EINVAL,
		              "%s: its plan is malformed or of another version of volrec", out);
	}
	p->config = strdup(jstr(c, "path"));
	p->config_crc = (uint32_t)strtoul(jstr(c, "crc32c") ? jstr(c, "crc32c") : "0", NULL, 16);
	p->chunk_epochs = (uint64_t)jint(plan, "chunk_epochs");
	p->codec = FMT_CODEC_ZSTD; /* a plan of a volrec before --codec */
	if (jstr(plan, "codec") &&
	    fmt_codec_parse(jstr(plan, "codec"), &p->codec, err, errlen) < 0) {
		rc = vr_err(err, errlen, -EINVAL,
		            "%s: its plan names the codec '%s', not one of %s", out,
		            jstr(plan, "codec"), FMT_CODEC_NAMES);
		rp_plan_free(p);
		return rc;
	}
	p->nrecs = json_object_array_length(recs);
	p->nchunks = json_object_array_length(chunks);
	p->recs = calloc(p->nrecs + 1, sizeof(*p->recs));
	p->chunks = calloc(p->nchunks + 1, sizeof(*p->chunks));
	if (!p->config || !p->recs || !p->chunks) {
		rp_plan_free(p);
		return vr_err(err, errlen, -ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < p->nrecs && rc == 0; i++) {
		struct json_object *r = json_object_array_get_idx(recs, i);
		const char *path = jstr(r, "path"), *name = jstr(r, "name"),
		           *crc = jstr(r, "crc32c");

		if (!path || !name || !crc || jint(r, "frames") < 1)
			rc = -EINVAL;
		else if (!(p->recs[i].path = strdup(path)) || !(p->recs[i].name = strdup(name)))
			rc = -ENOMEM;
		p->recs[i].size = (uint64_t)jint(r, "size");
		p->recs[i].nframes = (uint64_t)jint(r, "frames");
		p->recs[i].crc = crc ? (uint32_t)strtoul(crc, NULL, 16) : 0;
	}
	for (size_t k = 0; k < p->nchunks && rc == 0; k++) {
		struct json_object *j = json_object_array_get_idx(chunks, k), *fr;
		int64_t rec = jint(j, "recording"), w = jint(j, "warm_up");

		if (rec < 0 || (size_t)rec >= p->nrecs || w < 0 ||
		    !json_object_object_get_ex(j, "frames", &fr) ||
		    json_object_array_length(fr) != 2) {
			rc = -EINVAL;
			break;
		}
		p->chunks[k] = (struct rp_chunk){
		        .rec = (unsigned)rec,
		        .a = (uint64_t)json_object_get_int64(json_object_array_get_idx(fr, 0)),
		        .b = (uint64_t)json_object_get_int64(json_object_array_get_idx(fr, 1)),
		        .w = (uint64_t)w};
		if (p->chunks[k].b <= p->chunks[k].a || p->chunks[k].w > p->chunks[k].a ||
		    p->chunks[k].b > p->recs[rec].nframes)
			rc = -EINVAL;
	}
	if (rc) {
		rp_plan_free(p);
		return rc == -ENOMEM ? vr_err(err, errlen, rc, "out of memory")
		                     : vr_err(err, errlen, rc, "%s: its plan is malformed", out);
	}
	return 0;
}

/* What differs between two plans, for the message. */
static const char *plan_difference(struct json_object *a, struct json_object *b)
{
	static const char *const keys[] = {"config",       "recordings", "reconstruct_mode",
	                                   "chunk_epochs", "chunks",     "codec",
	                                   "plan_version"};
	static char what[256];
	struct json_object *va, *vb;
	size_t n = 0;

	what[0] = 0;
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		bool ha = json_object_object_get_ex(a, keys[i], &va);
		bool hb = json_object_object_get_ex(b, keys[i], &vb);
		if (ha != hb || (ha && !json_object_equal(va, vb)))
			n += (size_t)snprintf(what + n, n < sizeof(what) ? sizeof(what) - n : 0,
			                      "%s%s", n ? ", " : "", keys[i]);
		if (n >= sizeof(what))
			break;
	}
	return what[0] ? what : "its layout";
}

static int store_images(struct rp_plan *p, char *err, size_t errlen)
{
	char path[PATH_MAX];
	struct stat st;
	int rc = 0;

	for (size_t i = 0; i < p->nrecs && rc == 0; i++) {
		struct fmt_info info;
		struct fmt_options opt = {.source = p->recs[i].path, .codec = p->codec};
		struct json_object *attrs = json_object_new_object();

		snprintf(path, sizeof(path), "%s/%s", p->out, p->recs[i].name);
		if (stat(path, &st) == 0) {
			json_object_put(attrs);
			continue;
		}
		proc_fmt_info(&p->cfg, p->recs[i].nframes, &info);
		info.interval_s = p->recs[i].interval_s;
		json_object_object_add(attrs, "recording", json_object_new_string(p->recs[i].path));
		json_object_object_add(attrs, "recording_crc32c", hex32(p->recs[i].crc));
		json_object_object_add(attrs, "config", json_object_new_string(p->config));
		json_object_object_add(
		        attrs, "reconstruct_mode",
		        json_object_new_string(cfg_recon_mode_name(p->cfg.reconstruct.mode)));
		info.attrs = attrs;
		rc = fmt_zarr_image_create(path, &info, &opt, err, errlen);
		json_object_put(attrs);
	}
	return rc;
}

int rp_store_create(struct rp_plan *p, bool *existed, char *err, size_t errlen)
{
	char path[PATH_MAX];
	struct json_object *a, *rp, *plan;
	int rc;

	*existed = false;
	a = root_attrs(p->out);
	if (a) {
		if (!json_object_object_get_ex(a, RP_KEY, &rp) ||
		    !json_object_object_get_ex(rp, "plan", &plan)) {
			json_object_put(a);
			return vr_err(err, errlen, -EEXIST,
			              "%s exists and is not a store of `volrec reprocess`", p->out);
		}
		if (!json_object_equal(plan, p->json)) {
			rc = vr_err(err, errlen, -EEXIST,
			            "%s exists with another plan (it differs in %s): give another "
			            "output, or remove it to start again",
			            p->out, plan_difference(plan, p->json));
			json_object_put(a);
			return rc;
		}
		json_object_put(a);
		*existed = true;
	} else {
		struct stat st;
		struct json_object *g = json_object_new_object();

		if (stat(p->out, &st) == 0)
			return vr_err(err, errlen, -EEXIST,
			              "%s exists and is not a store of `volrec reprocess`", p->out);
		if (mkdir(p->out, 0777) < 0)
			return vr_err_errno(err, errlen, -errno, "%s", p->out);
		snprintf(path, sizeof(path), "%s/.zgroup", p->out);
		json_object_object_add(g, "zarr_format", json_object_new_int(2));
		rc = rp_json_write(path, g, err, errlen);
		json_object_put(g);
		if (rc < 0)
			return rc;
		/* the plan first: whatever follows can be found and finished from it */
		a = json_object_new_object();
		rp = json_object_new_object();
		json_object_object_add(rp, "volrec_version",
		                       json_object_new_string(VOLREC_VERSION));
		json_object_object_add(rp, "created_unix_s",
		                       json_object_new_double(vr_now_ns(CLOCK_REALTIME) * 1e-9));
		json_object_object_add(rp, "plan", json_object_get(p->json));
		json_object_object_add(a, RP_KEY, rp);
		snprintf(path, sizeof(path), "%s/.zattrs", p->out);
		rc = rp_json_write(path, a, err, errlen);
		json_object_put(a);
		if (rc < 0)
			return rc;
	}
	static const char *const dirs[] = {"", "state", "logs", "slurm"};
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		rp_path(p, path, sizeof(path), "%s", dirs[i]);
		if (mkdir(path, 0777) < 0 && errno != EEXIST)
			return vr_err_errno(err, errlen, -errno, "%s", path);
	}
	return store_images(p, err, errlen);
}

void rp_plan_free(struct rp_plan *p)
{
	for (size_t i = 0; p->recs && i < p->nrecs; i++) {
		free(p->recs[i].path);
		free(p->recs[i].name);
	}
	free(p->recs);
	free(p->chunks);
	free(p->out);
	free(p->config);
	json_object_put(p->json);
	cfg_free(&p->cfg);
	memset(p, 0, sizeof(*p));
	cfg_defaults(&p->cfg);
}
