/* SPDX-License-Identifier: MIT */
/*
 * Loading a configuration (read, parse, validate) and changing keys of a loaded one
 * (cfg_set_keys), with the positions and messages of both. The keys are in schema.c, parsing
 * in parse.c, cross-field checks in validate.c.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "config/internal.h"

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
	const struct cfg_key *k = cfg_key_find(key);
	return k && ctx->given[k - cfg_keys];
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
	int n = ctx->name ? snprintf(ctx->err, ctx->errlen, "%s:%zu:%zu: %s: ", ctx->name, m.line,
	                             m.col, key)
	                  : snprintf(ctx->err, ctx->errlen, "%s: ", key);
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

	rc = cfg_yaml_precheck(&ctx, buf, len, "(syntax)");
	if (rc < 0)
		return rc;
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
		return vr_err_errno(err, errlen, -errno, "%s: cannot get the current directory",
		                    name);
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
		return vr_err_errno(err, errlen, -errno, "%s: cannot open the configuration file",
		                    path);
	}
	buf = malloc(CFG_FILE_MAX + 1);
	if (!buf) {
		rc = vr_err(err, errlen, -ENOMEM, "%s: out of memory", path);
		goto out_close;
	}
	len = fread(buf, 1, CFG_FILE_MAX + 1, f);
	if (ferror(f)) {
		rc = vr_err(err, errlen, -EIO, "%s: cannot read the configuration file: %s", path,
		            strerror(errno));
		goto out_free;
	}
	if (len > CFG_FILE_MAX) {
		rc = vr_err(err, errlen, -EFBIG,
		            "%s: the configuration file is larger than %u bytes", path,
		            CFG_FILE_MAX);
		goto out_free;
	}
	real = realpath(path, NULL);
	if (!real) {
		rc = vr_err_errno(err, errlen, -errno, "%s: cannot resolve the path", path);
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

/* ---- changing keys ---------------------------------------------------------------------- */

bool cfg_key_is_live(const char *path)
{
	bool any = false;
	for (size_t i = 0; i < cfg_nkeys; i++) {
		if (!cfg_path_under(cfg_keys[i].path, path))
			continue;
		if (cfg_keys[i].reload != CFG_LIVE)
			return false;
		any = true;
	}
	return any && *path;
}

/* The live keys as "a.b, c" (a section when all of its keys are live) into buf at *off. */
static void live_names(const char *path, char *buf, size_t len, size_t *off)
{
	struct cfg_child ch[CFG_KEYS_MAX];
	size_t n = cfg_children(path, ch);

	for (size_t i = 0; i < n && *off < len; i++) {
		char sub[CFG_KEY_MAX];
		snprintf(sub, sizeof(sub), "%s%s%.*s", path, *path ? "." : "", (int)ch[i].len,
		         ch[i].name);
		if (!cfg_key_is_live(sub)) {
			if (!ch[i].key)
				live_names(sub, buf, len, off);
			continue;
		}
		int w = snprintf(buf + *off, len - *off, "%s%s", *off ? ", " : "", sub);
		if (w > 0)
			*off += (size_t)w;
	}
}

/* Check that paths[i] names a key or a section, once, and (live_only) live keys only. */
static int check_path(struct cfg_ctx *ctx, const char *const *paths, size_t i, bool live_only)
{
	const char *path = paths[i];
	char live[512];
	size_t off = 0;

	if (strlen(path) >= CFG_KEY_MAX || (!cfg_key_find(path) && !cfg_is_section(path)) ||
	    !*path) {
		if (ctx->err && ctx->errlen)
			cfg_unknown_key(path, ctx->err, ctx->errlen);
		return -EINVAL;
	}
	for (size_t j = 0; j < i; j++)
		if (cfg_path_under(path, paths[j]) || cfg_path_under(paths[j], path))
			return cfg_error(ctx, -EINVAL, path,
			                 "given twice (as %s and %s; each key at most once)",
			                 paths[j], path);
	if (live_only && !cfg_key_is_live(path)) {
		live[0] = '\0';
		live_names("", live, sizeof(live), &off);
		return cfg_error(ctx, -EPERM, path,
		                 "%s structural: a change needs the configuration file and a "
		                 "reload (live keys: %s)",
		                 cfg_key_find(path) ? "is" : "holds keys that are", live);
	}
	return 0;
}

/* A window type set alone carries its own parameter, as a file that names the type alone
 * does: the parameter follows unless it was chosen, which is taken as holding another value
 * than the present type's default (a tukey set over the default hann gets alpha 0.5, not
 * 0.4). */
static void window_param_follows(struct cfg_ctx *ctx, const char *const *paths, size_t n)
{
	const struct cfg_key *param = cfg_key_find("preprocess.window.param");
	bool type_set = false;

	for (size_t i = 0; i < n; i++) {
		if (cfg_path_under("preprocess.window.param", paths[i]))
			return; /* the parameter (or its whole section) is given */
		type_set |= !strcmp(paths[i], "preprocess.window.type");
	}
	if (type_set && ctx->cfg->preprocess.window.param ==
	                        cfg_window_param_default((int)ctx->cfg->preprocess.window.type))
		ctx->given[param - cfg_keys] = false;
}

static int set_keys(struct vr_config *cfg, const char *const *paths, const char *const *values,
                    size_t n, bool live_only, char *err, size_t errlen)
{
	struct cfg_ctx ctx = {.err = err, .errlen = errlen, .keep_files = live_only};
	struct vr_config *next = malloc(sizeof(*next));
	const struct cfg_key *k;
	const char *why;
	char *slash;
	int rc = 0;

	if (err && errlen)
		err[0] = '\0';
	if (!next || cfg_copy(next, cfg)) {
		free(next);
		return vr_err(err, errlen, -ENOMEM, "%s: out of memory", n ? paths[0] : "(set)");
	}
	ctx.cfg = next;
	snprintf(ctx.base_dir, sizeof(ctx.base_dir), "%s", cfg->source_file);
	slash = strrchr(ctx.base_dir, '/');
	if (slash)
		slash[slash == ctx.base_dir] = '\0';
	else if (!getcwd(ctx.base_dir, sizeof(ctx.base_dir)))
		ctx.base_dir[0] = '\0';
	for (size_t i = 0; i < cfg_nkeys; i++)
		ctx.given[i] = cfg_key_present(&cfg_keys[i], next);
	window_param_follows(&ctx, paths, n);
	for (size_t i = 0; i < n && !rc; i++)
		rc = check_path(&ctx, paths, i, live_only);
	for (size_t i = 0; i < n && !rc; i++) {
		for (size_t j = 0; j < cfg_nkeys; j++) {
			if (!cfg_path_under(cfg_keys[j].path, paths[i]))
				continue;
			cfg_key_reset(&cfg_keys[j], next); /* a section: what it leaves out */
			ctx.given[j] = false;
		}
		rc = cfg_parse_value(&ctx, paths[i], values[i] ? values[i] : "");
	}
	/* a key that names a file is never given over the wire (before validation, which would
	 * open it): whoever may set must not make the daemon read a file of their choice */
	for (size_t j = 0; j < cfg_nkeys && !rc && live_only; j++)
		if ((cfg_keys[j].type == CFG_T_PATH || cfg_keys[j].type == CFG_T_TABLE) &&
		    cfg_mark_of(&ctx, cfg_keys[j].path).line)
			rc = cfg_error(
			        &ctx, -EPERM, cfg_keys[j].path,
			        "names a file: keys that name files are set in the "
			        "configuration file and applied by a reload, never at run time");
	/* a change that needs a rebuild is refused as such; a change of the output's size
	 * (reconstruct.mode) also when validation failed only for what it would make of the keys
	 * placed in the volume (view.position in a smaller volume) */
	if (!rc) {
		rc = cfg_validate(&ctx);
		if (live_only && (k = cfg_structural_key(cfg, next, &why)) &&
		    (!rc || cfg_out_voxels(cfg) != cfg_out_voxels(next)))
			rc = cfg_error(&ctx, -EPERM, k->path,
			               "%s (a structural change: it needs the configuration file "
			               "and a reload)",
			               why);
	}
	if (!rc) {
		cfg_free(cfg);
		*cfg = *next;
	} else {
		cfg_free(next);
	}
	free(next);
	free(ctx.pos);
	return rc;
}

int cfg_set_keys(struct vr_config *cfg, const char *const *paths, const char *const *yaml_values,
                 size_t n, char *err, size_t errlen)
{
	return set_keys(cfg, paths, yaml_values, n, true, err, errlen);
}

int cfg_override_keys(struct vr_config *cfg, const char *const *paths,
                      const char *const *yaml_values, size_t n, char *err, size_t errlen)
{
	return set_keys(cfg, paths, yaml_values, n, false, err, errlen);
}

/* Key k of ctx->cfg written as its text and read back through the parser: the checks a file's
 * value gets. Files (paths, tables) and shim arguments are taken as they are. */
static int check_key(struct cfg_ctx *ctx, const struct cfg_key *k)
{
	char *text = NULL;
	int rc;

	if (k->type == CFG_T_PATH || k->type == CFG_T_TABLE || k->type == CFG_T_ARGS ||
	    !ctx->given[k - cfg_keys])
		return 0;
	rc = cfg_get_key(ctx->cfg, k->path, &text, ctx->err, ctx->errlen);
	if (!rc)
		rc = cfg_parse_value(ctx, k->path, text);
	free(text);
	return rc;
}

static int check_config(const struct vr_config *cfg, bool backend_only, char *err, size_t errlen)
{
	struct cfg_ctx ctx = {
	        .err = err, .errlen = errlen, .keep_files = true, .backend_only = backend_only};
	struct vr_config *copy = malloc(sizeof(*copy));
	int rc = 0;

	if (err && errlen)
		err[0] = '\0';
	if (!copy || cfg_copy(copy, cfg)) {
		free(copy);
		return vr_err(err, errlen, -ENOMEM, "(check): out of memory");
	}
	ctx.cfg = copy;
	for (size_t i = 0; i < cfg_nkeys; i++)
		ctx.given[i] = cfg_key_present(&cfg_keys[i], copy);
	/* the views' place in the volume is theirs: a backend checks it when it renders
	 * (be_view_check) and publishes no view while it lies outside */
	ctx.given[cfg_key_find("view.slab") - cfg_keys] = false;
	ctx.given[cfg_key_find("view.position") - cfg_keys] = false;
	/* the acquisition's side: how B-scans reach a backend, not what it computes */
	for (size_t i = 0; backend_only && i < cfg_nkeys; i++)
		if (!strncmp(cfg_keys[i].path, "source.", 7) ||
		    !strncmp(cfg_keys[i].path, "pipeline.", 9))
			ctx.given[i] = false;
	for (size_t i = 0; i < cfg_nkeys && !rc; i++)
		rc = check_key(&ctx, &cfg_keys[i]);
	if (!rc)
		rc = cfg_validate(&ctx);
	cfg_free(copy);
	free(copy);
	free(ctx.pos);
	return rc;
}

int cfg_check(const struct vr_config *cfg, char *err, size_t errlen)
{
	return check_config(cfg, false, err, errlen);
}

int cfg_check_backend(const struct vr_config *cfg, char *err, size_t errlen)
{
	return check_config(cfg, true, err, errlen);
}

double cfg_render_diagonal(const struct vr_config *c)
{
	const double *s = c->view.render.spacing;
	uint32_t d[3];

	cfg_out_dims(c, d);
	return sqrt((double)d[1] * s[0] * d[1] * s[0] + (double)d[0] * s[1] * d[0] * s[1] +
	            (double)d[2] * s[2] * d[2] * s[2]);
}
double cfg_render_step(const struct vr_config *c)
{
	const double *s = c->view.render.spacing;
	double D = cfg_render_diagonal(c), h, n;

	if (c->view.render.step > 0)
		return c->view.render.step;
	h = 0.5 * fmin(s[0], fmin(s[1], s[2]));
	n = floor((double)CFG_RENDER_SAMPLES_MAX /
	          ((double)c->view.render.size[0] * c->view.render.size[1]));
	if (n >= 1 && D / h > n)
		h = D / n * (1.0 + 1e-12); /* ceil(D / h) == n */
	return h;
}

void cfg_voxel_um(const struct vr_config *c, double um[3])
{
	const double *l = c->preprocess.resample.wavelength_nm;
	double n = c->geometry.refractive_index, k1 = c->geometry.samples_per_ascan - 1.0;
	uint32_t d[3];

	cfg_out_dims(c, d);
	um[0] = d[1] ? c->geometry.scan_size_um[0] / d[1] : 0;
	um[1] = d[0] ? c->geometry.scan_size_um[1] / d[0] : 0;
	um[2] = c->geometry.axial_um_per_pixel;
	if (um[2] == 0 && n >= 1 && c->preprocess.resample.positions == CFG_RSPOS_WAVELENGTH) {
		/* lambda_c^2 / (2 n delta_lambda) * K / N, lambda_c the centre of the span
		 * [lambda(0), lambda(K-1)] and delta_lambda its width, in nm */
		double a = l[0], b = l[0] + k1 * (l[1] + k1 * (l[2] + k1 * l[3]));
		double lc = (a + b) / 2, span = fabs(b - a);

		if (span > 0)
			um[2] = lc * lc / (2 * n * span) / c->preprocess.zero_pad / 1000;
	}
	for (int i = 0; i < 3; i++)
		if (!isfinite(um[i]) || um[i] < 0)
			um[i] = 0;
}
