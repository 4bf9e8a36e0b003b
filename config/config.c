/* SPDX-License-Identifier: MIT */
/*
 * The configuration's life cycle: defaults, cfg_load (read, parse, validate), copy, free,
 * comparison and the names of enum values. Parsing is in parse.c, checks in validate.c.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

/* shim.args when absent; never freed (see cfg_free). */
static char cfg_args_empty[] = "{}";

void cfg_defaults(struct vr_config *c)
{
	memset(c, 0, sizeof(*c));
	snprintf(c->instance, sizeof(c->instance), "default");
	c->backend = CFG_BACKEND_AUTO;
	c->gpu.device = 0;
	c->gpu.streams = 4;
	c->cpu.threads = 0;

	c->source.type = CFG_SOURCE_SYNTH;
	c->source.rate = 25.0;
	c->source.replay.format = CFG_REPLAY_AUTO;
	c->source.replay.loop = true;
	c->source.synth.seed = 1;
	snprintf(c->source.synth.phantom, sizeof(c->source.synth.phantom), "retina");
	c->source.synth.deg_per_s = 0.25;
	c->source.synth.snr_db = 40.0;
	c->source.shim.args_yaml = cfg_args_empty;
	c->source.shim.timeout_ms = 1000;

	c->geometry.samples_per_ascan = 2048;
	c->geometry.sample_type = CFG_SAMPLE_U16;
	c->geometry.bit_shift = 0;
	c->geometry.ascans_per_bscan = 60;
	c->geometry.bscans_per_volume = 60;
	c->geometry.stride[0] = 5;
	c->geometry.stride[1] = 5;
	c->geometry.depth_range[0] = 0;
	c->geometry.depth_range[1] = 1024;
	c->geometry.bidirectional = false;

	c->preprocess.background.mode = CFG_BG_ASCAN_MEAN;
	c->preprocess.background.threshold = 10.0;
	c->preprocess.resample.method = CFG_RS_NONE;
	c->preprocess.resample.positions = CFG_RSPOS_NONE;
	c->preprocess.window.type = CFG_WIN_HANN;
	c->preprocess.window.param = 0.4;
	c->preprocess.dispersion.kind = CFG_DISP_NONE;
	c->preprocess.zero_pad = 1;
	c->preprocess.db_range[0] = 0.0;
	c->preprocess.db_range[1] = 100.0;

	c->reconstruct.mode = CFG_RECON_NONCUMULATIVE;
	c->reconstruct.spatial_sigma = 1.0;
	c->reconstruct.temporal = CFG_TEMPORAL_LINEAR;
	c->reconstruct.tau = 5.0;
	c->reconstruct.combine = CFG_COMBINE_SUM;

	c->output.slots = 4;
	c->pipeline.ring_bscans = 256;
	c->pipeline.overflow = CFG_OVERFLOW_DROP_EPOCH;

	snprintf(c->ipc.run_dir, sizeof(c->ipc.run_dir), "/run/volrec");
	c->ipc.npub = 0;
	c->ipc.status_interval_ms = 1000;
	c->ipc.hwm = 16;
	c->ipc.max_readers = 64;
	c->ipc.keep_shm = false;

	c->log.level = CFG_LOG_INFO;
}

static void table_free(struct cfg_table *t)
{
	free(t->data);
	t->data = NULL;
	t->len = 0;
}

void cfg_free(struct vr_config *cfg)
{
	if (!cfg)
		return;
	table_free(&cfg->preprocess.background.reference);
	table_free(&cfg->preprocess.resample.table);
	table_free(&cfg->preprocess.dispersion.table);
	if (cfg->source.shim.args_yaml != cfg_args_empty)
		free(cfg->source.shim.args_yaml);
	cfg_defaults(cfg);
}

static int table_copy(struct cfg_table *dst, const struct cfg_table *src)
{
	dst->data = NULL;
	if (!src->data)
		return 0;
	dst->data = malloc(src->len * sizeof(double));
	if (!dst->data)
		return -ENOMEM;
	memcpy(dst->data, src->data, src->len * sizeof(double));
	return 0;
}

int cfg_copy(struct vr_config *dst, const struct vr_config *src)
{
	*dst = *src;
	dst->preprocess.background.reference.data = NULL;
	dst->preprocess.resample.table.data = NULL;
	dst->preprocess.dispersion.table.data = NULL;
	dst->source.shim.args_yaml = cfg_args_empty;
	if (src->source.shim.args_yaml && src->source.shim.args_yaml != cfg_args_empty) {
		dst->source.shim.args_yaml = strdup(src->source.shim.args_yaml);
		if (!dst->source.shim.args_yaml) {
			dst->source.shim.args_yaml = cfg_args_empty;
			goto out_nomem;
		}
	}
	if (table_copy(&dst->preprocess.background.reference,
	               &src->preprocess.background.reference) ||
	    table_copy(&dst->preprocess.resample.table, &src->preprocess.resample.table) ||
	    table_copy(&dst->preprocess.dispersion.table, &src->preprocess.dispersion.table))
		goto out_nomem;
	return 0;

out_nomem:
	cfg_free(dst);
	return -ENOMEM;
}

/* ---- positions and messages ------------------------------------------------------------- */

struct cfg_mark cfg_mark_of(const struct cfg_ctx *ctx, const char *key)
{
	for (size_t i = 0; i < ctx->npos; i++)
		if (!strcmp(ctx->pos[i].path, key))
			return ctx->pos[i].mark;
	return (struct cfg_mark){0, 0};
}

bool cfg_given(const struct cfg_ctx *ctx, const char *key)
{
	return cfg_mark_of(ctx, key).line != 0;
}

/* The mark of key, else of its nearest written ancestor ("a.b[2].c" -> "a.b[2]" -> "a.b" ->
 * "a"), else the root. */
static struct cfg_mark mark_or_ancestor(const struct cfg_ctx *ctx, const char *key)
{
	char buf[CFG_KEY_MAX];

	snprintf(buf, sizeof(buf), "%s", key);
	for (;;) {
		struct cfg_mark m = cfg_mark_of(ctx, buf);
		if (m.line)
			return m;
		char *dot = strrchr(buf, '.');
		char *br = strrchr(buf, '[');
		char *cut = dot > br ? dot : br;
		if (!cut)
			break;
		*cut = '\0';
	}
	return ctx->root;
}

static int verror_at(struct cfg_ctx *ctx, int rc, struct cfg_mark m, const char *key,
                     const char *fmt, va_list ap)
{
	if (!ctx->err || !ctx->errlen)
		return rc;
	int n = snprintf(ctx->err, ctx->errlen, "%s:%zu:%zu: %s: ", ctx->name, m.line, m.col, key);
	if (n >= 0 && (size_t)n < ctx->errlen)
		vsnprintf(ctx->err + n, ctx->errlen - n, fmt, ap);
	/* one line, whatever the file held (keys, strings and paths are echoed) */
	for (char *p = ctx->err; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '?';
	return rc;
}

int cfg_error_at(struct cfg_ctx *ctx, int rc, struct cfg_mark m, const char *key, const char *fmt,
                 ...)
{
	va_list ap;
	va_start(ap, fmt);
	verror_at(ctx, rc, m, key, fmt, ap);
	va_end(ap);
	return rc;
}

int cfg_error(struct cfg_ctx *ctx, int rc, const char *key, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	verror_at(ctx, rc, mark_or_ancestor(ctx, key), key, fmt, ap);
	va_end(ap);
	return rc;
}

int cfg_resolve_path(char *dst, size_t dstlen, const char *base_dir, const char *path)
{
	int n;

	if (path[0] == '/' || !base_dir[0])
		n = snprintf(dst, dstlen, "%s", path);
	else
		n = snprintf(dst, dstlen, "%s/%s", base_dir, path);
	return n < 0 || (size_t)n >= dstlen ? -ENAMETOOLONG : 0;
}

/* ---- loading ---------------------------------------------------------------------------- */

/* Reader errors carry only a byte offset: turn it into a line and column. */
static struct cfg_mark offset_mark(const unsigned char *buf, size_t len, size_t off)
{
	struct cfg_mark m = {1, 1};
	for (size_t i = 0; i < off && i < len; i++) {
		if (buf[i] == '\n') {
			m.line++;
			m.col = 1;
		} else if ((buf[i] & 0xc0) != 0x80) {
			m.col++;
		}
	}
	return m;
}

static int load_buffer(struct vr_config *cfg, const unsigned char *buf, size_t len,
                       const char *name, const char *base_dir, char *err, size_t errlen)
{
	struct cfg_ctx ctx = {
	        .cfg = cfg,
	        .name = name,
	        .root = {1, 1},
	        .err = err,
	        .errlen = errlen,
	};
	yaml_parser_t parser;
	int rc;

	if (err && errlen)
		err[0] = '\0';
	if (strlen(base_dir) >= sizeof(ctx.base_dir))
		return cfg_error_at(&ctx, -ENAMETOOLONG, ctx.root, "(file)",
		                    "the directory name %s is too long", base_dir);
	snprintf(ctx.base_dir, sizeof(ctx.base_dir), "%s", base_dir);

	if (!yaml_parser_initialize(&parser))
		return cfg_error_at(&ctx, -ENOMEM, ctx.root, "(file)", "out of memory");
	yaml_parser_set_input_string(&parser, buf, len);
	rc = cfg_parse_document(&ctx, &parser);
	if (rc == -EILSEQ && parser.error == YAML_READER_ERROR) {
		struct cfg_mark m = offset_mark(buf, len, parser.problem_offset);
		rc = cfg_error_at(&ctx, -EINVAL, m, "(syntax)", "%s (the file must be UTF-8 text)",
		                  parser.problem ? parser.problem : "unreadable input");
	}
	yaml_parser_delete(&parser);
	if (!rc)
		rc = cfg_validate(&ctx);
	free(ctx.pos);
	if (rc < 0)
		cfg_free(cfg);
	return rc;
}

int cfg_load_string(struct vr_config *cfg, const char *yaml, const char *name, char *err,
                    size_t errlen)
{
	char cwd[CFG_PATH_MAX];

	cfg_defaults(cfg);
	if (!getcwd(cwd, sizeof(cwd))) {
		int rc = -errno;
		if (err && errlen)
			snprintf(err, errlen, "%s: cannot get the current directory: %s", name,
			         strerror(-rc));
		return rc;
	}
	return load_buffer(cfg, (const unsigned char *)yaml, strlen(yaml), name, cwd, err, errlen);
}

int cfg_load(struct vr_config *cfg, const char *path, char *err, size_t errlen)
{
	char dir[CFG_PATH_MAX], *real = NULL, *slash;
	unsigned char *buf = NULL;
	size_t len = 0;
	FILE *f = NULL;
	int rc;

	cfg_defaults(cfg);
	f = fopen(path, "rb");
	if (!f) {
		rc = -errno;
		snprintf(err, errlen, "%s: cannot open the configuration file: %s", path,
		         strerror(-rc));
		return rc;
	}
	buf = malloc(CFG_FILE_MAX + 1);
	if (!buf) {
		rc = -ENOMEM;
		snprintf(err, errlen, "%s: out of memory", path);
		goto out_close;
	}
	len = fread(buf, 1, CFG_FILE_MAX + 1, f);
	if (ferror(f)) {
		rc = -EIO;
		snprintf(err, errlen, "%s: cannot read the configuration file: %s", path,
		         strerror(errno));
		goto out_free;
	}
	if (len > CFG_FILE_MAX) {
		rc = -EFBIG;
		snprintf(err, errlen, "%s: the configuration file is larger than %u bytes", path,
		         CFG_FILE_MAX);
		goto out_free;
	}
	real = realpath(path, NULL);
	if (!real) {
		rc = -errno;
		snprintf(err, errlen, "%s: cannot resolve the path: %s", path, strerror(-rc));
		goto out_free;
	}
	snprintf(dir, sizeof(dir), "%s", real);
	slash = strrchr(dir, '/');
	if (slash == dir)
		slash[1] = '\0';
	else if (slash)
		*slash = '\0';
	rc = load_buffer(cfg, buf, len, path, dir, err, errlen);
	if (!rc && strlen(real) < sizeof(cfg->source_file))
		snprintf(cfg->source_file, sizeof(cfg->source_file), "%s", real);
	free(real);
out_free:
	free(buf);
out_close:
	fclose(f);
	return rc;
}

/* ---- comparison ------------------------------------------------------------------------- */

static bool table_equal(const struct cfg_table *a, const struct cfg_table *b)
{
	if (strcmp(a->path, b->path) || a->len != b->len || !a->data != !b->data)
		return false;
	return !a->data || !memcmp(a->data, b->data, a->len * sizeof(double));
}

static const char *args_text(const struct vr_config *c)
{
	return c->source.shim.args_yaml ? c->source.shim.args_yaml : "{}";
}

/* Compare everything but source_file, the tables' data and the args pointer, which
 * cfg_equal compares by content. Padding is not compared: fields are copied one by one. */
static void comparable(struct vr_config *dst, const struct vr_config *src)
{
	*dst = *src;
	memset(dst->source_file, 0, sizeof(dst->source_file));
	dst->source.shim.args_yaml = NULL;
	dst->preprocess.background.reference.data = NULL;
	dst->preprocess.resample.table.data = NULL;
	dst->preprocess.dispersion.table.data = NULL;
}

bool cfg_equal(const struct vr_config *a, const struct vr_config *b)
{
	struct vr_config *x, *y;
	bool eq = false;

	if (strcmp(args_text(a), args_text(b)) ||
	    !table_equal(&a->preprocess.background.reference,
	                 &b->preprocess.background.reference) ||
	    !table_equal(&a->preprocess.resample.table, &b->preprocess.resample.table) ||
	    !table_equal(&a->preprocess.dispersion.table, &b->preprocess.dispersion.table))
		return false;
	/* compare field by field through a normalized copy; calloc so padding is zero */
	x = calloc(2, sizeof(*x));
	if (!x)
		return false;
	y = x + 1;
	comparable(x, a);
	comparable(y, b);
#define EQ(f) (!memcmp(&x->f, &y->f, sizeof(x->f)))
	eq = EQ(instance) && EQ(backend) && EQ(gpu.device) && EQ(gpu.streams) && EQ(cpu.threads) &&
	     EQ(source.type) && x->source.rate == y->source.rate && EQ(source.replay.path) &&
	     EQ(source.replay.format) && EQ(source.replay.loop) && EQ(source.synth.seed) &&
	     EQ(source.synth.phantom) && x->source.synth.deg_per_s == y->source.synth.deg_per_s &&
	     x->source.synth.snr_db == y->source.synth.snr_db && EQ(source.shim.library) &&
	     EQ(source.shim.timeout_ms) && EQ(geometry.samples_per_ascan) &&
	     EQ(geometry.sample_type) && EQ(geometry.bit_shift) && EQ(geometry.ascans_per_bscan) &&
	     EQ(geometry.bscans_per_volume) && EQ(geometry.stride) && EQ(geometry.depth_range) &&
	     EQ(geometry.bidirectional) && EQ(preprocess.background.mode) &&
	     x->preprocess.background.threshold == y->preprocess.background.threshold &&
	     EQ(preprocess.resample.method) && EQ(preprocess.resample.positions) &&
	     EQ(preprocess.resample.poly) && EQ(preprocess.resample.wavelength_nm) &&
	     EQ(preprocess.window.type) &&
	     x->preprocess.window.param == y->preprocess.window.param &&
	     EQ(preprocess.dispersion.kind) && EQ(preprocess.dispersion.coeffs) &&
	     EQ(preprocess.zero_pad) && EQ(preprocess.db_range) && EQ(preprocess.flip.x) &&
	     EQ(preprocess.flip.z) && EQ(reconstruct.mode) &&
	     x->reconstruct.spatial_sigma == y->reconstruct.spatial_sigma &&
	     EQ(reconstruct.temporal) && x->reconstruct.tau == y->reconstruct.tau &&
	     EQ(reconstruct.combine) && EQ(output.slots) && EQ(pipeline.ring_bscans) &&
	     EQ(pipeline.overflow) && EQ(ipc.run_dir) && EQ(ipc.npub) &&
	     !memcmp(x->ipc.pub, y->ipc.pub, sizeof(x->ipc.pub[0]) * x->ipc.npub) &&
	     EQ(ipc.status_interval_ms) && EQ(ipc.hwm) && EQ(ipc.max_readers) && EQ(ipc.keep_shm) &&
	     EQ(ipc.curve_secret_key) && EQ(ipc.curve_public_key) && EQ(log.level);
#undef EQ
	free(x);
	return eq;
}

/*
 * Structural: anything that changes sizes, allocations, devices, the source, the shm layout or
 * the sockets. Live: db_range, window, dispersion values (coeffs <-> table, not on <-> off,
 * which changes the FFT plan), background mode and threshold (a reference table of other
 * content stays structural), reconstruction weights and mode (unless the mode change
 * changes the output size), log level, status interval.
 */
bool cfg_is_structural_change(const struct vr_config *a, const struct vr_config *b)
{
	struct vr_config *x, *y;
	bool structural = true;

	if ((a->preprocess.dispersion.kind == CFG_DISP_NONE) !=
	    (b->preprocess.dispersion.kind == CFG_DISP_NONE))
		return true;
	if (cfg_out_voxels(a) != cfg_out_voxels(b))
		return true;
	x = calloc(2, sizeof(*x));
	if (!x)
		return true;
	y = x + 1;
	/* copy a and b, then overwrite every live field of y with x's: what remains differs
	 * only in structural fields */
	*x = *a;
	*y = *b;
	y->preprocess.db_range[0] = x->preprocess.db_range[0];
	y->preprocess.db_range[1] = x->preprocess.db_range[1];
	y->preprocess.window = x->preprocess.window;
	y->preprocess.dispersion = x->preprocess.dispersion;
	y->preprocess.background.mode = x->preprocess.background.mode;
	y->preprocess.background.threshold = x->preprocess.background.threshold;
	y->reconstruct = x->reconstruct;
	y->log = x->log;
	y->ipc.status_interval_ms = x->ipc.status_interval_ms;
	y->source.shim.args_yaml = x->source.shim.args_yaml;
	y->preprocess.background.reference.data = x->preprocess.background.reference.data;
	y->preprocess.resample.table.data = x->preprocess.resample.table.data;
	structural = strcmp(args_text(a), args_text(b)) ||
	             !table_equal(&a->preprocess.background.reference,
	                          &b->preprocess.background.reference) ||
	             !table_equal(&a->preprocess.resample.table, &b->preprocess.resample.table) ||
	             !cfg_equal(x, y);
	free(x);
	return structural;
}

/* ---- names ------------------------------------------------------------------------------ */

const char *const cfg_backend_names[] = {"auto", "cuda", "cpu", NULL};
const char *const cfg_source_names[] = {"synth", "replay", "shim", NULL};
const char *const cfg_replay_format_names[] = {"auto", "raw", NULL};
const char *const cfg_sample_names[] = {"u16", "i16", "f32", NULL};
const char *const cfg_background_names[] = {
        "ascan_mean", "bscan_mean", "bscan_median", "reference", "none", "partial_median", NULL};
const char *const cfg_resample_names[] = {"none", "linear", "cubic", "spline", NULL};
const char *const cfg_window_names[] = {"none",  "hann",  "hamming", "blackman",
                                        "gauss", "tukey", NULL};
const char *const cfg_recon_mode_names[] = {"none", "noncumulative", "cumulative", NULL};
const char *const cfg_temporal_names[] = {"linear", "exp", NULL};
const char *const cfg_combine_names[] = {"sum", "product", NULL};
const char *const cfg_overflow_names[] = {"drop_epoch", "block", NULL};
const char *const cfg_log_level_names[] = {"error", "warning", "info", "debug", NULL};

static const char *name_of(const char *const *names, size_t n, int v)
{
	return v >= 0 && (size_t)v < n ? names[v] : "?";
}
#define NAME_OF(tab, v) name_of(tab, sizeof(tab) / sizeof(tab[0]) - 1, (int)(v))

const char *cfg_backend_name(enum cfg_backend v)
{
	return NAME_OF(cfg_backend_names, v);
}
const char *cfg_source_name(enum cfg_source v)
{
	return NAME_OF(cfg_source_names, v);
}
const char *cfg_replay_format_name(enum cfg_replay_format v)
{
	return NAME_OF(cfg_replay_format_names, v);
}
const char *cfg_sample_name(enum cfg_sample v)
{
	return NAME_OF(cfg_sample_names, v);
}
const char *cfg_background_name(enum cfg_background v)
{
	return NAME_OF(cfg_background_names, v);
}
const char *cfg_resample_name(enum cfg_resample v)
{
	return NAME_OF(cfg_resample_names, v);
}
const char *cfg_window_name(enum cfg_window v)
{
	return NAME_OF(cfg_window_names, v);
}
const char *cfg_recon_mode_name(enum cfg_recon_mode v)
{
	return NAME_OF(cfg_recon_mode_names, v);
}
const char *cfg_temporal_name(enum cfg_temporal v)
{
	return NAME_OF(cfg_temporal_names, v);
}
const char *cfg_combine_name(enum cfg_combine v)
{
	return NAME_OF(cfg_combine_names, v);
}
const char *cfg_overflow_name(enum cfg_overflow v)
{
	return NAME_OF(cfg_overflow_names, v);
}
const char *cfg_log_level_name(enum cfg_log_level v)
{
	return NAME_OF(cfg_log_level_names, v);
}
