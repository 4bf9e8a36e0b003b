/* SPDX-License-Identifier: MIT */
/*
 * The YAML walk: one table of keys per mapping (type, range, destination), so every key is
 * type- and range-checked the same way and unknown or duplicate keys are caught with the
 * position of the offending node. Cross-field checks are in validate.c.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

enum key_kind {
	K_MAP,      /* nested mapping, keys in sub */
	K_INT,      /* int in [min, max] */
	K_U32,      /* uint32_t in [min, max] */
	K_U64,      /* uint64_t, any value */
	K_F64,      /* finite double in [min, max] (or (min, max] with gt_min) */
	K_BOOL,     /* true | false */
	K_STR,      /* string into char[n] */
	K_PATH,     /* file name into char[n], resolved against the config's directory */
	K_ENUM,     /* one of names, stored as an int-sized enum */
	K_STRENUM,  /* one of names, stored as a string into char[n] */
	K_F64_SEQ,  /* exactly n finite doubles in [min, max] */
	K_U32_SEQ,  /* exactly n uint32_t in [min, max] */
	K_STR_LIST, /* up to n strings into char[n][CFG_PATH_MAX], count in count */
	K_ARGS,     /* any mapping, re-emitted as flow YAML text into char ** */
	K_TABLE,    /* file name of a table: resolved into struct cfg_table.path */
};

struct key {
	const char *name;
	enum key_kind kind;
	void *dst;
	double min, max;
	bool gt_min;              /* min itself is excluded */
	const char *const *names; /* K_ENUM, K_STRENUM */
	size_t n;                 /* string size, sequence length, list capacity */
	const struct key *sub;    /* K_MAP */
	uint32_t *count;          /* K_STR_LIST */
	const char *shape;        /* K_*_SEQ: how the sequence reads ("[lo, hi]") */
};

_Static_assert(sizeof(enum cfg_backend) == sizeof(int) && sizeof(enum cfg_window) == sizeof(int),
               "enums are stored as int");

/* ---- node helpers ----------------------------------------------------------------------- */

static struct cfg_mark node_mark(const yaml_node_t *n)
{
	return (struct cfg_mark){n->start_mark.line + 1, n->start_mark.column + 1};
}

static bool is_plain(const yaml_node_t *n)
{
	return n->type == YAML_SCALAR_NODE && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
}

static const char *scalar(const yaml_node_t *n)
{
	return (const char *)n->data.scalar.value;
}

static bool is_null(const yaml_node_t *n)
{
	if (!is_plain(n))
		return false;
	const char *s = scalar(n);
	return !*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") ||
	       !strcmp(s, "NULL");
}

/* A short printable rendering of a node, for "got ..." in messages. */
static const char *describe(const yaml_node_t *n, char *buf, size_t len)
{
	if (n->type == YAML_MAPPING_NODE)
		return "a mapping";
	if (n->type == YAML_SEQUENCE_NODE)
		return "a sequence";
	if (is_null(n))
		return "nothing (null)";
	char v[48];
	size_t i;
	const char *s = scalar(n);
	for (i = 0; s[i] && i < 40; i++)
		v[i] = (unsigned char)s[i] < 0x20 ? '?' : s[i];
	v[i] = '\0';
	snprintf(buf, len, "%s'%s%s'", is_plain(n) ? "" : "the string ", v, s[i] ? "..." : "");
	return buf;
}

/* Key path of element i of the sequence at path ("ipc.pub[2]"); paths are short by design
 * (CFG_KEY_MAX), a longer one is cut. */
static void index_path(char *dst, size_t len, const char *path, size_t i)
{
	if (snprintf(dst, len, "%s[%zu]", path, i) >= (int)len)
		dst[len - 1] = '\0';
}

/* Key path of name inside the mapping at path ("" for the root). */
static void child_path(char *dst, size_t len, const char *path, const char *name)
{
	if (snprintf(dst, len, "%s%s%s", path, *path ? "." : "", name) >= (int)len)
		dst[len - 1] = '\0';
}

static int record(struct cfg_ctx *ctx, const char *path, const yaml_node_t *n)
{
	if (ctx->npos == ctx->cappos) {
		size_t cap = ctx->cappos ? 2 * ctx->cappos : 64;
		struct cfg_pos *p = realloc(ctx->pos, cap * sizeof(*p));
		if (!p)
			return cfg_error_at(ctx, -ENOMEM, node_mark(n), path, "out of memory");
		ctx->pos = p;
		ctx->cappos = cap;
	}
	snprintf(ctx->pos[ctx->npos].path, sizeof(ctx->pos[0].path), "%s", path);
	ctx->pos[ctx->npos].mark = node_mark(n);
	ctx->npos++;
	return 0;
}

static void join_names(char *buf, size_t len, const char *const *names)
{
	size_t off = 0;
	buf[0] = '\0';
	for (size_t i = 0; names[i] && off < len; i++) {
		int n = snprintf(buf + off, len - off, "%s%s", i ? ", " : "", names[i]);
		if (n < 0)
			break;
		off += (size_t)n;
	}
}

static void join_keys(char *buf, size_t len, const struct key *keys)
{
	size_t off = 0;
	buf[0] = '\0';
	for (size_t i = 0; keys[i].name && off < len; i++) {
		int n = snprintf(buf + off, len - off, "%s%s", i ? ", " : "", keys[i].name);
		if (n < 0)
			break;
		off += (size_t)n;
	}
}

/* ---- scalars ---------------------------------------------------------------------------- */

static void range_text(char *buf, size_t len, const struct key *k, bool integer)
{
	if (integer)
		snprintf(buf, len, "an integer from %.0f to %.0f", k->min, k->max);
	else if (k->gt_min)
		snprintf(buf, len, "a number greater than %g and at most %g", k->min, k->max);
	else
		snprintf(buf, len, "a number from %g to %g", k->min, k->max);
}

/* Parse a plain decimal integer (no leading zeros, no exponent) into *v. */
static bool parse_int(const char *s, long long *v)
{
	const char *d = s + (*s == '-' || *s == '+');
	if (!*d || (d[0] == '0' && d[1]))
		return false;
	for (const char *p = d; *p; p++)
		if (*p < '0' || *p > '9')
			return false;
	errno = 0;
	char *end;
	*v = strtoll(s, &end, 10);
	return !errno && !*end;
}

static int get_integer(struct cfg_ctx *ctx, const yaml_node_t *n, const char *path,
                       const struct key *k, long long *v)
{
	char got[64], allowed[96];
	range_text(allowed, sizeof(allowed), k, true);
	if (!is_plain(n) || is_null(n) || !parse_int(scalar(n), v))
		return cfg_error_at(ctx, -EINVAL, node_mark(n), path, "expected %s, got %s",
		                    allowed, describe(n, got, sizeof(got)));
	if ((double)*v < k->min || (double)*v > k->max)
		return cfg_error_at(ctx, -ERANGE, node_mark(n), path, "%lld is out of range (%s)",
		                    *v, allowed);
	return 0;
}

static int get_u64(struct cfg_ctx *ctx, const yaml_node_t *n, const char *path, uint64_t *v)
{
	char got[64];
	const char *s = is_plain(n) ? scalar(n) : "";
	bool ok = is_plain(n) && *s && (s[0] != '0' || !s[1]);
	for (const char *p = s; ok && *p; p++)
		ok = *p >= '0' && *p <= '9';
	if (ok) {
		char *end;
		errno = 0;
		*v = strtoull(s, &end, 10);
		ok = !errno && !*end;
	}
	if (!ok)
		return cfg_error_at(ctx, -EINVAL, node_mark(n), path,
		                    "expected an integer from 0 to 18446744073709551615, got %s",
		                    describe(n, got, sizeof(got)));
	return 0;
}

static int get_double(struct cfg_ctx *ctx, const yaml_node_t *n, const char *path,
                      const struct key *k, double *v)
{
	char got[64], allowed[96];
	range_text(allowed, sizeof(allowed), k, false);
	bool ok = is_plain(n) && !is_null(n);
	if (ok) {
		char *end;
		const char *s = scalar(n);
		errno = 0;
		*v = strtod(s, &end);
		ok = end != s && !*end && (s[0] != '0' || s[1] != 'x') && !strchr(s, 'x') &&
		     !strchr(s, 'X');
		if (ok && !isfinite(*v))
			return cfg_error_at(ctx, -ERANGE, node_mark(n), path,
			                    "%s is not a finite number (%s)", s, allowed);
	}
	if (!ok)
		return cfg_error_at(ctx, -EINVAL, node_mark(n), path, "expected %s, got %s",
		                    allowed, describe(n, got, sizeof(got)));
	if (*v < k->min || *v > k->max || (k->gt_min && *v <= k->min))
		return cfg_error_at(ctx, -ERANGE, node_mark(n), path, "%s is out of range (%s)",
		                    scalar(n), allowed);
	return 0;
}

static int get_bool(struct cfg_ctx *ctx, const yaml_node_t *n, const char *path, bool *v)
{
	char got[64];
	const char *s = is_plain(n) ? scalar(n) : "";
	if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "TRUE"))
		*v = true;
	else if (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "FALSE"))
		*v = false;
	else
		return cfg_error_at(ctx, -EINVAL, node_mark(n), path,
		                    "expected a boolean (true or false), got %s",
		                    describe(n, got, sizeof(got)));
	return 0;
}

static int get_string(struct cfg_ctx *ctx, const yaml_node_t *n, const char *path, char *dst,
                      size_t size)
{
	char got[64];
	if (n->type != YAML_SCALAR_NODE || is_null(n))
		return cfg_error_at(ctx, -EINVAL, node_mark(n), path, "expected a string, got %s",
		                    describe(n, got, sizeof(got)));
	size_t len = n->data.scalar.length;
	if (memchr(scalar(n), '\0', len))
		return cfg_error_at(ctx, -EINVAL, node_mark(n), path,
		                    "contains a NUL character (a plain string is allowed)");
	if (len >= size)
		return cfg_error_at(ctx, -ENAMETOOLONG, node_mark(n), path,
		                    "is %zu bytes long (at most %zu allowed)", len, size - 1);
	memcpy(dst, scalar(n), len + 1);
	return 0;
}

static int get_path(struct cfg_ctx *ctx, const yaml_node_t *n, const char *path, char *dst,
                    size_t size)
{
	char raw[CFG_PATH_MAX];
	int rc = get_string(ctx, n, path, raw, sizeof(raw));
	if (rc)
		return rc;
	if (!raw[0])
		return cfg_error_at(ctx, -EINVAL, node_mark(n), path,
		                    "is empty (a file name is needed)");
	if (cfg_resolve_path(dst, size, ctx->base_dir, raw))
		return cfg_error_at(ctx, -ENAMETOOLONG, node_mark(n), path,
		                    "'%s' relative to %s is too long (at most %zu bytes)", raw,
		                    ctx->base_dir, size - 1);
	return 0;
}

static int get_enum(struct cfg_ctx *ctx, const yaml_node_t *n, const char *path,
                    const char *const *names, int *v)
{
	char got[64], allowed[256];
	join_names(allowed, sizeof(allowed), names);
	if (n->type == YAML_SCALAR_NODE && !is_null(n))
		for (int i = 0; names[i]; i++)
			if (!strcmp(scalar(n), names[i])) {
				*v = i;
				return 0;
			}
	if (n->type == YAML_SCALAR_NODE && !is_null(n))
		return cfg_error_at(ctx, -EINVAL, node_mark(n), path,
		                    "%s is not allowed (one of: %s)", describe(n, got, sizeof(got)),
		                    allowed);
	return cfg_error_at(ctx, -EINVAL, node_mark(n), path, "expected one of: %s, got %s",
	                    allowed, describe(n, got, sizeof(got)));
}

/* ---- shim.args: re-emit a mapping as one line of flow YAML ------------------------------ */

struct textbuf {
	char *data;
	size_t len, cap;
	bool overflow;
};

static int text_write(void *data, unsigned char *buf, size_t size)
{
	struct textbuf *t = data;
	if (t->len + size + 1 > CFG_ARGS_MAX) {
		t->overflow = true;
		return 0;
	}
	if (t->len + size + 1 > t->cap) {
		size_t cap = t->cap ? t->cap : 256;
		while (cap < t->len + size + 1)
			cap *= 2;
		char *d = realloc(t->data, cap);
		if (!d)
			return 0;
		t->data = d;
		t->cap = cap;
	}
	memcpy(t->data + t->len, buf, size);
	t->len += size;
	t->data[t->len] = '\0';
	return 1;
}

static int emit_node(yaml_emitter_t *e, yaml_document_t *doc, yaml_node_t *n, int depth)
{
	yaml_event_t ev;

	if (depth > 32)
		return -ELOOP;
	switch (n->type) {
	case YAML_SCALAR_NODE: {
		bool plain = n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
		if (!yaml_scalar_event_initialize(
		            &ev, NULL, NULL, n->data.scalar.value, (int)n->data.scalar.length,
		            plain, 1, plain ? YAML_ANY_SCALAR_STYLE : n->data.scalar.style))
			return -ENOMEM;
		return yaml_emitter_emit(e, &ev) ? 0 : -EIO;
	}
	case YAML_SEQUENCE_NODE:
		if (!yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1,
		                                          YAML_FLOW_SEQUENCE_STYLE) ||
		    !yaml_emitter_emit(e, &ev))
			return -EIO;
		for (yaml_node_item_t *it = n->data.sequence.items.start;
		     it < n->data.sequence.items.top; it++) {
			int rc = emit_node(e, doc, yaml_document_get_node(doc, *it), depth + 1);
			if (rc)
				return rc;
		}
		yaml_sequence_end_event_initialize(&ev);
		return yaml_emitter_emit(e, &ev) ? 0 : -EIO;
	case YAML_MAPPING_NODE:
		if (!yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1,
		                                         YAML_FLOW_MAPPING_STYLE) ||
		    !yaml_emitter_emit(e, &ev))
			return -EIO;
		for (yaml_node_pair_t *p = n->data.mapping.pairs.start;
		     p < n->data.mapping.pairs.top; p++) {
			int rc = emit_node(e, doc, yaml_document_get_node(doc, p->key), depth + 1);
			if (!rc)
				rc = emit_node(e, doc, yaml_document_get_node(doc, p->value),
				               depth + 1);
			if (rc)
				return rc;
		}
		yaml_mapping_end_event_initialize(&ev);
		return yaml_emitter_emit(e, &ev) ? 0 : -EIO;
	default:
		return -EINVAL;
	}
}

static int get_args(struct cfg_ctx *ctx, yaml_document_t *doc, yaml_node_t *n, const char *path,
                    char **dst)
{
	struct textbuf t = {0};
	yaml_emitter_t e;
	yaml_event_t ev;
	char got[64];
	int rc = 0;

	if (is_null(n))
		return 0; /* no args: keep "{}" */
	if (n->type != YAML_MAPPING_NODE)
		return cfg_error_at(ctx, -EINVAL, node_mark(n), path,
		                    "expected a mapping (any keys, passed to the shim), got %s",
		                    describe(n, got, sizeof(got)));
	if (!yaml_emitter_initialize(&e))
		return cfg_error_at(ctx, -ENOMEM, node_mark(n), path, "out of memory");
	yaml_emitter_set_output(&e, text_write, &t);
	yaml_emitter_set_width(&e, -1);
	yaml_emitter_set_unicode(&e, 1);
	if (!yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING) ||
	    !yaml_emitter_emit(&e, &ev) ||
	    !yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1) ||
	    !yaml_emitter_emit(&e, &ev))
		rc = -EIO;
	if (!rc)
		rc = emit_node(&e, doc, n, 0);
	if (!rc) {
		yaml_document_end_event_initialize(&ev, 1);
		if (!yaml_emitter_emit(&e, &ev))
			rc = -EIO;
		yaml_stream_end_event_initialize(&ev);
		if (!rc && (!yaml_emitter_emit(&e, &ev) || !yaml_emitter_flush(&e)))
			rc = -EIO;
	}
	yaml_emitter_delete(&e);
	if (t.overflow)
		rc = cfg_error_at(ctx, -E2BIG, node_mark(n), path,
		                  "is too large (at most %u bytes as YAML text)", CFG_ARGS_MAX);
	else if (rc == -ELOOP)
		rc = cfg_error_at(ctx, rc, node_mark(n), path,
		                  "is nested too deeply (at most 32 levels)");
	else if (rc || !t.data)
		rc = cfg_error_at(ctx, rc ? rc : -EIO, node_mark(n), path,
		                  "cannot be written back as YAML text");
	if (rc) {
		free(t.data);
		return rc;
	}
	while (t.len && (t.data[t.len - 1] == '\n' || t.data[t.len - 1] == ' '))
		t.data[--t.len] = '\0';
	*dst = t.data;
	return 0;
}

/* ---- mappings and sequences ------------------------------------------------------------- */

static int walk_map(struct cfg_ctx *ctx, yaml_document_t *doc, yaml_node_t *n, const char *path,
                    const struct key *keys);

static int walk_seq(struct cfg_ctx *ctx, yaml_node_t *n, yaml_document_t *doc, const char *path,
                    const struct key *k)
{
	char got[64], child[CFG_KEY_MAX];
	const char *what = k->kind == K_F64_SEQ ? "numbers" : "integers";
	size_t count;

	if (n->type != YAML_SEQUENCE_NODE)
		return cfg_error_at(ctx, -EINVAL, node_mark(n), path,
		                    "expected a sequence of %zu %s %s, got %s", k->n, what,
		                    k->shape, describe(n, got, sizeof(got)));
	count = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
	if (count != k->n)
		return cfg_error_at(ctx, -EINVAL, node_mark(n), path,
		                    "has %zu element%s (exactly %zu %s %s)", count,
		                    count == 1 ? "" : "s", k->n, what, k->shape);
	for (size_t i = 0; i < count; i++) {
		yaml_node_t *it = yaml_document_get_node(doc, n->data.sequence.items.start[i]);
		int rc;
		index_path(child, sizeof(child), path, i);
		rc = record(ctx, child, it);
		if (rc)
			return rc;
		if (k->kind == K_F64_SEQ) {
			rc = get_double(ctx, it, child, k, (double *)k->dst + i);
		} else {
			long long v;
			rc = get_integer(ctx, it, child, k, &v);
			if (!rc)
				((uint32_t *)k->dst)[i] = (uint32_t)v;
		}
		if (rc)
			return rc;
	}
	return 0;
}

static int walk_str_list(struct cfg_ctx *ctx, yaml_node_t *n, yaml_document_t *doc,
                         const char *path, const struct key *k)
{
	char got[64], child[CFG_KEY_MAX];
	char(*dst)[CFG_PATH_MAX] = k->dst;
	size_t count;

	if (n->type != YAML_SEQUENCE_NODE)
		return cfg_error_at(ctx, -EINVAL, node_mark(n), path,
		                    "expected a sequence of at most %zu strings, got %s", k->n,
		                    describe(n, got, sizeof(got)));
	count = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
	if (count > k->n)
		return cfg_error_at(ctx, -E2BIG, node_mark(n), path,
		                    "has %zu entries (at most %zu)", count, k->n);
	for (size_t i = 0; i < count; i++) {
		yaml_node_t *it = yaml_document_get_node(doc, n->data.sequence.items.start[i]);
		index_path(child, sizeof(child), path, i);
		int rc = record(ctx, child, it);
		if (!rc)
			rc = get_string(ctx, it, child, dst[i], CFG_PATH_MAX);
		if (rc)
			return rc;
	}
	*k->count = (uint32_t)count;
	return 0;
}

static int walk_value(struct cfg_ctx *ctx, yaml_document_t *doc, yaml_node_t *n, const char *path,
                      const struct key *k)
{
	long long iv;
	int rc, ev;

	switch (k->kind) {
	case K_MAP:
		return walk_map(ctx, doc, n, path, k->sub);
	case K_INT:
		rc = get_integer(ctx, n, path, k, &iv);
		if (!rc)
			*(int *)k->dst = (int)iv;
		return rc;
	case K_U32:
		rc = get_integer(ctx, n, path, k, &iv);
		if (!rc)
			*(uint32_t *)k->dst = (uint32_t)iv;
		return rc;
	case K_U64:
		return get_u64(ctx, n, path, k->dst);
	case K_F64:
		return get_double(ctx, n, path, k, k->dst);
	case K_BOOL:
		return get_bool(ctx, n, path, k->dst);
	case K_STR:
		return get_string(ctx, n, path, k->dst, k->n);
	case K_PATH:
		return get_path(ctx, n, path, k->dst, k->n);
	case K_TABLE:
		return get_path(ctx, n, path, ((struct cfg_table *)k->dst)->path, CFG_PATH_MAX);
	case K_ENUM:
		rc = get_enum(ctx, n, path, k->names, &ev);
		if (!rc)
			memcpy(k->dst, &ev, sizeof(ev));
		return rc;
	case K_STRENUM:
		rc = get_enum(ctx, n, path, k->names, &ev);
		if (!rc)
			snprintf(k->dst, k->n, "%s", k->names[ev]);
		return rc;
	case K_F64_SEQ:
	case K_U32_SEQ:
		return walk_seq(ctx, n, doc, path, k);
	case K_STR_LIST:
		return walk_str_list(ctx, n, doc, path, k);
	case K_ARGS:
		return get_args(ctx, doc, n, path, k->dst);
	}
	return cfg_error_at(ctx, -EINVAL, node_mark(n), path, "internal error: unknown key kind");
}

static int walk_map(struct cfg_ctx *ctx, yaml_document_t *doc, yaml_node_t *n, const char *path,
                    const struct key *keys)
{
	char got[64], allowed[512], child[CFG_KEY_MAX];
	const char *where = *path ? path : "(root)";

	join_keys(allowed, sizeof(allowed), keys);
	if (n->type != YAML_MAPPING_NODE)
		return cfg_error_at(ctx, -EINVAL, node_mark(n), where,
		                    "expected a mapping (keys: %s), got %s", allowed,
		                    describe(n, got, sizeof(got)));
	for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top;
	     p++) {
		yaml_node_t *kn = yaml_document_get_node(doc, p->key);
		yaml_node_t *vn = yaml_document_get_node(doc, p->value);
		const struct key *k = NULL;

		if (kn->type != YAML_SCALAR_NODE || is_null(kn))
			return cfg_error_at(ctx, -EINVAL, node_mark(kn), where,
			                    "a key is %s (keys are names: %s)",
			                    describe(kn, got, sizeof(got)), allowed);
		const char *name = scalar(kn);
		for (yaml_node_pair_t *q = n->data.mapping.pairs.start; q < p; q++) {
			yaml_node_t *prev = yaml_document_get_node(doc, q->key);
			if (prev->type == YAML_SCALAR_NODE && !strcmp(scalar(prev), name)) {
				child_path(child, sizeof(child), path, name);
				return cfg_error_at(ctx, -EINVAL, node_mark(kn), child,
				                    "duplicate key (first given at line %zu, "
				                    "column %zu; each key at most once)",
				                    node_mark(prev).line, node_mark(prev).col);
			}
		}
		for (size_t i = 0; keys[i].name; i++)
			if (!strcmp(keys[i].name, name))
				k = &keys[i];
		if (strlen(path) + strlen(name) + 2 > CFG_KEY_MAX)
			return cfg_error_at(ctx, -EINVAL, node_mark(kn), where,
			                    "key '%.40s...' is too long", name);
		child_path(child, sizeof(child), path, name);
		if (!k)
			return cfg_error_at(ctx, -EINVAL, node_mark(kn), child,
			                    "unknown key (allowed%s%s: %s)", *path ? " in " : "",
			                    path, allowed);
		int rc = record(ctx, child, vn);
		if (!rc)
			rc = walk_value(ctx, doc, vn, child, k);
		if (rc)
			return rc;
	}
	return 0;
}

/* ---- the schema ------------------------------------------------------------------------- */

static const char *const phantom_names[] = {"retina", "mirror", "tilted", NULL};
static const char *const dtype_names[] = {"u8", NULL};

#define MAP(nm, s)                                                                                 \
	{                                                                                          \
		.name = nm, .kind = K_MAP, .sub = s                                                \
	}
#define INT(nm, d, lo, hi)                                                                         \
	{                                                                                          \
		.name = nm, .kind = K_INT, .dst = d, .min = lo, .max = hi                          \
	}
#define U32(nm, d, lo, hi)                                                                         \
	{                                                                                          \
		.name = nm, .kind = K_U32, .dst = d, .min = lo, .max = hi                          \
	}
#define F64(nm, d, lo, hi)                                                                         \
	{                                                                                          \
		.name = nm, .kind = K_F64, .dst = d, .min = lo, .max = hi                          \
	}
#define F64GT(nm, d, lo, hi)                                                                       \
	{                                                                                          \
		.name = nm, .kind = K_F64, .dst = d, .min = lo, .max = hi, .gt_min = 1             \
	}
#define BOOL(nm, d)                                                                                \
	{                                                                                          \
		.name = nm, .kind = K_BOOL, .dst = d                                               \
	}
#define STR(nm, d)                                                                                 \
	{                                                                                          \
		.name = nm, .kind = K_STR, .dst = d, .n = sizeof(d)                                \
	}
#define PATH(nm, d)                                                                                \
	{                                                                                          \
		.name = nm, .kind = K_PATH, .dst = d, .n = sizeof(d)                               \
	}
#define ENUM(nm, d, names_)                                                                        \
	{                                                                                          \
		.name = nm, .kind = K_ENUM, .dst = d, .names = names_                              \
	}
#define END                                                                                        \
	{                                                                                          \
		.name = NULL                                                                       \
	}

static int parse_root(struct cfg_ctx *ctx, yaml_document_t *doc, yaml_node_t *root)
{
	struct vr_config *c = ctx->cfg;
	int dtype = 0;

	const struct key gpu[] = {INT("device", &c->gpu.device, 0, 255),
	                          INT("streams", &c->gpu.streams, 1, 32), END};
	const struct key cpu[] = {INT("threads", &c->cpu.threads, 0, 256), END};
	const struct key replay[] = {
	        PATH("path", c->source.replay.path),
	        ENUM("format", &c->source.replay.format, cfg_replay_format_names),
	        BOOL("loop", &c->source.replay.loop), END};
	const struct key motion[] = {F64("deg_per_s", &c->source.synth.deg_per_s, -360, 360), END};
	const struct key synth[] = {{.name = "seed", .kind = K_U64, .dst = &c->source.synth.seed},
	                            {.name = "phantom",
	                             .kind = K_STRENUM,
	                             .dst = c->source.synth.phantom,
	                             .n = sizeof(c->source.synth.phantom),
	                             .names = phantom_names},
	                            MAP("motion", motion),
	                            F64("snr_db", &c->source.synth.snr_db, 0, 150),
	                            END};
	const struct key shim[] = {
	        PATH("library", c->source.shim.library),
	        {.name = "args", .kind = K_ARGS, .dst = &c->source.shim.args_yaml},
	        INT("timeout_ms", &c->source.shim.timeout_ms, 1, 600000),
	        END};
	const struct key source[] = {ENUM("type", &c->source.type, cfg_source_names),
	                             F64("rate", &c->source.rate, 0, 100000),
	                             MAP("replay", replay),
	                             MAP("synth", synth),
	                             MAP("shim", shim),
	                             END};
	const struct key geometry[] = {
	        U32("samples_per_ascan", &c->geometry.samples_per_ascan, 16, 65536),
	        ENUM("sample_type", &c->geometry.sample_type, cfg_sample_names),
	        U32("bit_shift", &c->geometry.bit_shift, 0, 15),
	        U32("ascans_per_bscan", &c->geometry.ascans_per_bscan, 1, 65536),
	        U32("bscans_per_volume", &c->geometry.bscans_per_volume, 1, 65536),
	        {.name = "stride",
	         .kind = K_U32_SEQ,
	         .dst = c->geometry.stride,
	         .n = 2,
	         .min = 1,
	         .max = 64,
	         .shape = "[sx, sy]"},
	        {.name = "depth_range",
	         .kind = K_U32_SEQ,
	         .dst = c->geometry.depth_range,
	         .n = 2,
	         .min = 0,
	         .max = 131072,
	         .shape = "[z0, z1]"},
	        BOOL("bidirectional", &c->geometry.bidirectional),
	        END};
	const struct key background[] = {
	        ENUM("mode", &c->preprocess.background.mode, cfg_background_names),
	        {.name = "reference", .kind = K_TABLE, .dst = &c->preprocess.background.reference},
	        F64("threshold", &c->preprocess.background.threshold, 0, 1e6),
	        END};
	const struct key resample[] = {
	        ENUM("method", &c->preprocess.resample.method, cfg_resample_names),
	        {.name = "table", .kind = K_TABLE, .dst = &c->preprocess.resample.table},
	        {.name = "poly",
	         .kind = K_F64_SEQ,
	         .dst = c->preprocess.resample.poly,
	         .n = 4,
	         .min = -1e12,
	         .max = 1e12,
	         .shape = "[c0, c1, c2, c3]"},
	        {.name = "wavelength_nm",
	         .kind = K_F64_SEQ,
	         .dst = c->preprocess.resample.wavelength_nm,
	         .n = 4,
	         .min = -1e12,
	         .max = 1e12,
	         .shape = "[l0, l1, l2, l3]"},
	        END};
	const struct key window[] = {ENUM("type", &c->preprocess.window.type, cfg_window_names),
	                             F64("param", &c->preprocess.window.param, 0, 10), END};
	const struct key dispersion[] = {
	        {.name = "coeffs",
	         .kind = K_F64_SEQ,
	         .dst = c->preprocess.dispersion.coeffs,
	         .n = 2,
	         .min = -1e6,
	         .max = 1e6,
	         .shape = "[a2, a3] in radians"},
	        {.name = "table", .kind = K_TABLE, .dst = &c->preprocess.dispersion.table},
	        END};
	const struct key flip[] = {BOOL("x", &c->preprocess.flip.x),
	                           BOOL("z", &c->preprocess.flip.z), END};
	const struct key preprocess[] = {MAP("background", background),
	                                 MAP("resample", resample),
	                                 MAP("window", window),
	                                 MAP("dispersion", dispersion),
	                                 U32("zero_pad", &c->preprocess.zero_pad, 1, 4),
	                                 {.name = "db_range",
	                                  .kind = K_F64_SEQ,
	                                  .dst = c->preprocess.db_range,
	                                  .n = 2,
	                                  .min = -400,
	                                  .max = 400,
	                                  .shape = "[lo, hi] in dB"},
	                                 MAP("flip", flip),
	                                 END};
	const struct key reconstruct[] = {
	        ENUM("mode", &c->reconstruct.mode, cfg_recon_mode_names),
	        F64GT("spatial_sigma", &c->reconstruct.spatial_sigma, 0, 100),
	        ENUM("temporal", &c->reconstruct.temporal, cfg_temporal_names),
	        F64GT("tau", &c->reconstruct.tau, 0, 1e6),
	        ENUM("combine", &c->reconstruct.combine, cfg_combine_names),
	        END};
	const struct key output[] = {ENUM("dtype", &dtype, dtype_names),
	                             U32("slots", &c->output.slots, 2, 64), END};
	const struct key pipeline[] = {U32("ring_bscans", &c->pipeline.ring_bscans, 1, 65536),
	                               ENUM("overflow", &c->pipeline.overflow, cfg_overflow_names),
	                               END};
	const struct key ipc[] = {PATH("run_dir", c->ipc.run_dir),
	                          {.name = "pub",
	                           .kind = K_STR_LIST,
	                           .dst = c->ipc.pub,
	                           .n = CFG_MAX_PUB,
	                           .count = &c->ipc.npub},
	                          U32("status_interval_ms", &c->ipc.status_interval_ms, 50, 60000),
	                          U32("hwm", &c->ipc.hwm, 1, 100000),
	                          U32("max_readers", &c->ipc.max_readers, 1, 1024),
	                          BOOL("keep_shm", &c->ipc.keep_shm),
	                          PATH("curve_secret_key", c->ipc.curve_secret_key),
	                          PATH("curve_public_key", c->ipc.curve_public_key),
	                          END};
	const struct key log[] = {ENUM("level", &c->log.level, cfg_log_level_names), END};
	const struct key top[] = {STR("instance", c->instance),
	                          ENUM("backend", &c->backend, cfg_backend_names),
	                          MAP("gpu", gpu),
	                          MAP("cpu", cpu),
	                          MAP("source", source),
	                          MAP("geometry", geometry),
	                          MAP("preprocess", preprocess),
	                          MAP("reconstruct", reconstruct),
	                          MAP("output", output),
	                          MAP("pipeline", pipeline),
	                          MAP("ipc", ipc),
	                          MAP("log", log),
	                          END};

	return walk_map(ctx, doc, root, "", top);
}

/* ---- the document ----------------------------------------------------------------------- */

static int syntax_error(struct cfg_ctx *ctx, yaml_parser_t *p)
{
	struct cfg_mark m = {p->problem_mark.line + 1, p->problem_mark.column + 1};

	switch (p->error) {
	case YAML_MEMORY_ERROR:
		return cfg_error_at(ctx, -ENOMEM, ctx->root, "(file)", "out of memory");
	case YAML_READER_ERROR:
		return -EILSEQ; /* the caller turns the byte offset into a position */
	default:
		break;
	}
	if (p->context)
		return cfg_error_at(ctx, -EINVAL, m, "(syntax)",
		                    "%s (%s at line %zu, column %zu; the file must be valid YAML)",
		                    p->problem ? p->problem : "invalid YAML", p->context,
		                    p->context_mark.line + 1, p->context_mark.column + 1);
	return cfg_error_at(ctx, -EINVAL, m, "(syntax)", "%s (the file must be valid YAML)",
	                    p->problem ? p->problem : "invalid YAML");
}

int cfg_parse_document(struct cfg_ctx *ctx, yaml_parser_t *parser)
{
	yaml_document_t doc, extra;
	yaml_node_t *root, *more;
	int rc = 0;

	if (!yaml_parser_load(parser, &doc))
		return syntax_error(ctx, parser);
	root = yaml_document_get_root_node(&doc);
	if (root) {
		ctx->root = node_mark(root);
		/* "---" alone or "~" is an empty document too: all defaults */
		if (!is_null(root))
			rc = parse_root(ctx, &doc, root);
	}
	if (!rc && root) {
		if (!yaml_parser_load(parser, &extra)) {
			rc = syntax_error(ctx, parser);
		} else {
			more = yaml_document_get_root_node(&extra);
			if (more)
				rc = cfg_error_at(ctx, -EINVAL, node_mark(more), "(root)",
				                  "a second YAML document (one document allowed)");
			yaml_document_delete(&extra);
		}
	}
	yaml_document_delete(&doc);
	return rc;
}
