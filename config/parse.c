/* SPDX-License-Identifier: MIT */
/*
 * The YAML walk over the schema (schema.c): every key is type- and range-checked the same way,
 * in a file or in one value given to cfg_set_keys, and unknown or duplicate keys are caught
 * with the position of the offending node. Cross-field checks are in validate.c.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/internal.h"

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

/* ---- scalars ---------------------------------------------------------------------------- */

static void range_text(char *buf, size_t len, const struct cfg_key *k, bool integer)
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
                       const struct cfg_key *k, long long *v)
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
                      const struct cfg_key *k, double *v)
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

/* path resolved against base_dir unless absolute; -ENAMETOOLONG when it does not fit. */
static int resolve_path(char *dst, size_t dstlen, const char *base_dir, const char *path)
{
	int n;

	if (path[0] == '/' || !base_dir[0])
		n = snprintf(dst, dstlen, "%s", path);
	else
		n = snprintf(dst, dstlen, "%s/%s", base_dir, path);
	return n < 0 || (size_t)n >= dstlen ? -ENAMETOOLONG : 0;
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
	if (!strcmp(path, "source.shim.library") && !strchr(raw, '/')) {
		/* a shipped shim's short name (`genicam`), found by src/shim.c */
		snprintf(dst, size, "%s", raw);
		return 0;
	}
	if (resolve_path(dst, size, ctx->base_dir, raw))
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

/* ---- keys, mappings and sequences ------------------------------------------------------- */

/* The sequence n of key k: exactly k->n numbers (_U32S, _F64S), up to k->n strings (_LIST) or
 * 1 to k->n integers (_INTS); the length of a list goes to k->count. */
static int walk_seq(struct cfg_ctx *ctx, yaml_node_t *n, yaml_document_t *doc, const char *path,
                    const struct cfg_key *k)
{
	char got[64], want[256], child[CFG_KEY_MAX];
	bool list = k->type == CFG_T_LIST || k->type == CFG_T_INTS;
	size_t count;

	if (k->type == CFG_T_LIST)
		snprintf(want, sizeof(want), "at most %zu strings", k->n);
	else if (k->type == CFG_T_INTS)
		snprintf(want, sizeof(want), "1 to %zu integers %s", k->n, k->shape);
	else
		snprintf(want, sizeof(want), "%zu %s %s", k->n,
		         k->type == CFG_T_F64S ? "numbers" : "integers", k->shape);
	if (n->type != YAML_SEQUENCE_NODE)
		return cfg_error_at(ctx, -EINVAL, node_mark(n), path,
		                    "expected a sequence of %s, got %s", want,
		                    describe(n, got, sizeof(got)));
	count = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
	if (k->type == CFG_T_LIST && count > k->n)
		return cfg_error_at(ctx, -E2BIG, node_mark(n), path,
		                    "has %zu entries (at most %zu)", count, k->n);
	if (k->type == CFG_T_INTS && (count < 1 || count > k->n))
		return cfg_error_at(ctx, count ? -E2BIG : -EINVAL, node_mark(n), path,
		                    "has %zu entries (%s)", count, want);
	if (!list && count != k->n)
		return cfg_error_at(ctx, -EINVAL, node_mark(n), path,
		                    "has %zu element%s (exactly %s)", count, count == 1 ? "" : "s",
		                    want);
	for (size_t i = 0; i < count; i++) {
		yaml_node_t *it = yaml_document_get_node(doc, n->data.sequence.items.start[i]);
		void *dst = cfg_at(ctx->cfg, k);
		long long v;
		int rc;
		index_path(child, sizeof(child), path, i);
		rc = record(ctx, child, it);
		if (!rc && k->type == CFG_T_F64S)
			rc = get_double(ctx, it, child, k, (double *)dst + i);
		else if (!rc && k->type == CFG_T_LIST)
			rc = get_string(ctx, it, child, ((char(*)[CFG_PATH_MAX])dst)[i],
			                CFG_PATH_MAX);
		else if (!rc && !(rc = get_integer(ctx, it, child, k, &v))) {
			if (k->type == CFG_T_INTS)
				((int *)dst)[i] = (int)v;
			else
				((uint32_t *)dst)[i] = (uint32_t)v;
		}
		if (rc)
			return rc;
	}
	if (list)
		*(uint32_t *)((char *)ctx->cfg + k->count) = (uint32_t)count;
	return 0;
}

/* The value n of key k (written at path) into ctx->cfg. */
static int walk_value(struct cfg_ctx *ctx, yaml_document_t *doc, yaml_node_t *n, const char *path,
                      const struct cfg_key *k)
{
	void *dst = cfg_at(ctx->cfg, k);
	long long iv;
	int rc, ev;

	ctx->given[k - cfg_keys] = true;
	switch (k->type) {
	case CFG_T_INT:
	case CFG_T_U32:
		rc = get_integer(ctx, n, path, k, &iv);
		if (!rc && k->type == CFG_T_INT)
			*(int *)dst = (int)iv;
		else if (!rc)
			*(uint32_t *)dst = (uint32_t)iv;
		return rc;
	case CFG_T_U64:
		return get_u64(ctx, n, path, dst);
	case CFG_T_F64:
		return get_double(ctx, n, path, k, dst);
	case CFG_T_BOOL:
		return get_bool(ctx, n, path, dst);
	case CFG_T_STR:
		return get_string(ctx, n, path, dst, k->size);
	case CFG_T_PATH:
		return get_path(ctx, n, path, dst, k->size);
	case CFG_T_TABLE:
		cfg_key_reset(k, ctx->cfg); /* a new file: its values are read by validation */
		return get_path(ctx, n, path, ((struct cfg_table *)dst)->path, CFG_PATH_MAX);
	case CFG_T_ENUM:
	case CFG_T_NAME:
		rc = get_enum(ctx, n, path, k->names, &ev);
		if (!rc && k->type == CFG_T_ENUM)
			memcpy(dst, &ev, sizeof(ev));
		else if (!rc)
			snprintf(dst, k->size, "%s", k->names[ev]);
		return rc;
	case CFG_T_INTS:
		cfg_key_reset(k, ctx->cfg); /* a shorter list leaves no entries behind */
		                            /* fall through */
	case CFG_T_U32S:
	case CFG_T_F64S:
	case CFG_T_LIST:
		return walk_seq(ctx, n, doc, path, k);
	case CFG_T_ARGS:
		cfg_key_reset(k, ctx->cfg);
		return get_args(ctx, doc, n, path, dst);
	}
	return cfg_error_at(ctx, -EINVAL, node_mark(n), path, "internal error: unknown key type");
}

/* The mapping n of the section at path ("" for the root) into ctx->cfg. */
static int walk_map(struct cfg_ctx *ctx, yaml_document_t *doc, yaml_node_t *n, const char *path)
{
	char got[64], allowed[512], child[CFG_KEY_MAX];
	const char *where = *path ? path : "(root)";

	cfg_child_names(path, allowed, sizeof(allowed));
	if (n->type != YAML_MAPPING_NODE)
		return cfg_error_at(ctx, -EINVAL, node_mark(n), where,
		                    "expected a mapping (keys: %s), got %s", allowed,
		                    describe(n, got, sizeof(got)));
	for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top;
	     p++) {
		yaml_node_t *kn = yaml_document_get_node(doc, p->key);
		yaml_node_t *vn = yaml_document_get_node(doc, p->value);

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
		if (strlen(path) + strlen(name) + 2 > CFG_KEY_MAX)
			return cfg_error_at(ctx, -EINVAL, node_mark(kn), where,
			                    "key '%.40s...' is too long", name);
		child_path(child, sizeof(child), path, name);
		bool plain_name = *name && !strchr(name, '.');
		const struct cfg_key *k = plain_name ? cfg_key_find(child) : NULL;
		if (!k && (!plain_name || !cfg_is_section(child)))
			return cfg_error_at(ctx, -EINVAL, node_mark(kn), child,
			                    "unknown key (allowed%s%s: %s)", *path ? " in " : "",
			                    path, allowed);
		int rc = record(ctx, child, vn);
		if (!rc)
			rc = k ? walk_value(ctx, doc, vn, child, k) : walk_map(ctx, doc, vn, child);
		if (rc)
			return rc;
	}
	return 0;
}

/* ---- documents -------------------------------------------------------------------------- */

/* A syntax error in the file, or (set) in the value of key. */
static int syntax_error(struct cfg_ctx *ctx, yaml_parser_t *p, const char *key)
{
	struct cfg_mark m = {p->problem_mark.line + 1, p->problem_mark.column + 1};
	const char *what = ctx->name ? "the file" : "the value";

	switch (p->error) {
	case YAML_MEMORY_ERROR:
		return cfg_error_at(ctx, -ENOMEM, ctx->root, ctx->name ? "(file)" : key,
		                    "out of memory");
	case YAML_READER_ERROR:
		if (ctx->name)
			return -EILSEQ; /* the caller turns the byte offset into a position */
		return cfg_error_at(ctx, -EINVAL, m, key, "%s (%s must be UTF-8 text)",
		                    p->problem ? p->problem : "unreadable input", what);
	default:
		break;
	}
	if (p->context)
		return cfg_error_at(ctx, -EINVAL, m, key,
		                    "%s (%s at line %zu, column %zu; %s must be valid YAML)",
		                    p->problem ? p->problem : "invalid YAML", p->context,
		                    p->context_mark.line + 1, p->context_mark.column + 1, what);
	return cfg_error_at(ctx, -EINVAL, m, key, "%s (%s must be valid YAML)",
	                    p->problem ? p->problem : "invalid YAML", what);
}

/* After the document of parser: nothing more, else an error at key. */
static int no_more(struct cfg_ctx *ctx, yaml_parser_t *parser, const char *key)
{
	yaml_document_t extra;
	yaml_node_t *more;
	int rc = 0;

	if (!yaml_parser_load(parser, &extra))
		return syntax_error(ctx, parser, key);
	more = yaml_document_get_root_node(&extra);
	if (more)
		rc = cfg_error_at(ctx, -EINVAL, node_mark(more), key,
		                  "a second YAML document (one %s allowed)",
		                  ctx->name ? "document" : "value");
	yaml_document_delete(&extra);
	return rc;
}

/* The tag written on the event, or NULL where it has none of its own (implicit) */
static const char *explicit_tag(const yaml_event_t *ev)
{
	const yaml_char_t *t = NULL;

	if (ev->type == YAML_SCALAR_EVENT && !ev->data.scalar.plain_implicit &&
	    !ev->data.scalar.quoted_implicit)
		t = ev->data.scalar.tag;
	else if (ev->type == YAML_SEQUENCE_START_EVENT && !ev->data.sequence_start.implicit)
		t = ev->data.sequence_start.tag;
	else if (ev->type == YAML_MAPPING_START_EVENT && !ev->data.mapping_start.implicit)
		t = ev->data.mapping_start.tag;
	return (const char *)t;
}

int cfg_yaml_precheck(struct cfg_ctx *ctx, const unsigned char *text, size_t len, const char *key)
{
	yaml_parser_t parser;
	yaml_event_t ev;
	int depth = 0, rc = 0;
	bool end = false;

	if (!yaml_parser_initialize(&parser))
		return cfg_error(ctx, -ENOMEM, key, "out of memory");
	yaml_parser_set_input_string(&parser, text, len);
	/* event by event, stopping at the first level too deep (libyaml's scanner takes time
	 * that grows with the square of the nesting: 100000 levels, 23 s) or the first tag */
	while (!rc && !end && yaml_parser_parse(&parser, &ev)) {
		const struct cfg_mark m = {ev.start_mark.line + 1, ev.start_mark.column + 1};
		const char *tag = explicit_tag(&ev);

		if (tag) /* "!!str 4" reads as the string "4", which the schema takes as 4 */
			rc = cfg_error_at(
			        ctx, -EINVAL, m, key,
			        "the tag %s is not accepted: a value is written as its type "
			        "(4, 0.5, true, name, \"text\")",
			        tag);
		else if (ev.type == YAML_SEQUENCE_START_EVENT ||
		         ev.type == YAML_MAPPING_START_EVENT) {
			if (++depth > CFG_YAML_DEPTH_MAX)
				rc = cfg_error_at(ctx, -EINVAL, m, key,
				                  "nested more than %d levels deep",
				                  CFG_YAML_DEPTH_MAX);
		} else if (ev.type == YAML_SEQUENCE_END_EVENT ||
		           ev.type == YAML_MAPPING_END_EVENT) {
			depth--;
		}
		end = ev.type == YAML_STREAM_END_EVENT;
		yaml_event_delete(&ev);
	}
	/* a syntax error: the document's load reports it */
	yaml_parser_delete(&parser);
	return rc;
}

int cfg_parse_document(struct cfg_ctx *ctx, yaml_parser_t *parser)
{
	yaml_document_t doc;
	yaml_node_t *root;
	int rc = 0;

	if (!yaml_parser_load(parser, &doc))
		return syntax_error(ctx, parser, "(syntax)");
	root = yaml_document_get_root_node(&doc);
	if (root) {
		ctx->root = node_mark(root);
		/* "---" alone or "~" is an empty document too: all defaults */
		if (!is_null(root))
			rc = walk_map(ctx, &doc, root, "");
		if (!rc)
			rc = no_more(ctx, parser, "(root)");
	}
	yaml_document_delete(&doc);
	return rc;
}

int cfg_parse_value(struct cfg_ctx *ctx, const char *path, const char *text)
{
	const struct cfg_key *k = cfg_key_find(path);
	yaml_parser_t parser;
	yaml_document_t doc;
	yaml_node_t *n;
	int rc;

	rc = cfg_yaml_precheck(ctx, (const unsigned char *)text, strlen(text), path);
	if (rc < 0)
		return rc;
	if (!yaml_parser_initialize(&parser))
		return cfg_error(ctx, -ENOMEM, path, "out of memory");
	yaml_parser_set_input_string(&parser, (const unsigned char *)text, strlen(text));
	if (!yaml_parser_load(&parser, &doc)) {
		rc = syntax_error(ctx, &parser, path);
		yaml_parser_delete(&parser);
		return rc;
	}
	n = yaml_document_get_root_node(&doc);
	rc = n ? no_more(ctx, &parser, path) : 0;
	yaml_parser_delete(&parser);
	if (!n) { /* an empty value: null, as "key:" in a file */
		int id = yaml_document_add_scalar(&doc, NULL, (yaml_char_t *)"", 0,
		                                  YAML_PLAIN_SCALAR_STYLE);
		n = id ? yaml_document_get_node(&doc, id) : NULL;
	}
	if (!n)
		rc = cfg_error(ctx, -ENOMEM, path, "out of memory");
	if (!rc)
		rc = record(ctx, path, n);
	if (!rc)
		rc = k ? walk_value(ctx, &doc, n, path, k) : walk_map(ctx, &doc, n, path);
	yaml_document_delete(&doc);
	return rc;
}
