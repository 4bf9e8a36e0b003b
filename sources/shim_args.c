/* SPDX-License-Identifier: MIT */
/*
 * libyaml parsing of the flat source.shim.args mapping for the example shims, with typed,
 * range-checked getters.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "base/base.h"
#include "sources/shim_args.h"

/* Take scalar v as the next key: -EINVAL and a message when there are too many, it is too
 * long, or (outside `features`) given before. */
static int take_key(struct shim_args *args, const char *v, size_t line, bool listed, char *err,
                    size_t errlen)
{
	if (args->n == SHIM_ARGS_MAX)
		return vr_err(err, errlen, -EINVAL, "args: more than %d keys", SHIM_ARGS_MAX);
	if (strlen(v) >= SHIM_ARG_KEY_MAX)
		return vr_err(err, errlen, -EINVAL, "args: key '%.32s...' too long", v);
	for (size_t i = 0; i < args->n && !listed; i++)
		if (!args->a[i].listed && !strcmp(args->a[i].key, v))
			return vr_err(err, errlen, -EINVAL, "args: line %zu: duplicate key '%s'",
			              line, v);
	strcpy(args->a[args->n].key, v);
	args->a[args->n].line = (unsigned)line;
	args->a[args->n].listed = listed;
	return 0;
}

/* Take scalar v as the value of the key taken last. */
static int take_value(struct shim_args *args, const char *v, char *err, size_t errlen)
{
	if (strlen(v) >= SHIM_ARG_VAL_MAX)
		return vr_err(err, errlen, -EINVAL, "args: value of '%s' too long",
		              args->a[args->n].key);
	strcpy(args->a[args->n].val, v);
	args->n++;
	return 0;
}

/* Where the parser is in a `features` list. */
enum list_state {
	LIST_NONE,  /* not in it */
	LIST_ITEMS, /* between its items */
	LIST_KEY,   /* in an item, before its key */
	LIST_VALUE, /* after the key */
	LIST_DONE,  /* after the item's one pair */
};

/* The state of shim_args_parse() between two events. */
struct args_parser {
	struct shim_args *args;
	unsigned flags;
	int depth;
	bool want_key, had_list;
	enum list_state list;
	char *err;
	size_t errlen;
};

static const char list_item[] = " (each item of features is one 'Feature: value')";

static int on_mapping_start(struct args_parser *ap, size_t line)
{
	if (ap->list == LIST_ITEMS)
		ap->list = LIST_KEY;
	else if (ap->depth++ > 0 || ap->list != LIST_NONE)
		return vr_err(ap->err, ap->errlen, -EINVAL,
		              "args: line %zu: nested mappings are not accepted (flat key: value "
		              "only)%s",
		              line, ap->list != LIST_NONE ? list_item : "");
	return 0;
}

static int on_mapping_end(struct args_parser *ap, size_t line)
{
	if (ap->list == LIST_DONE)
		ap->list = LIST_ITEMS;
	else if (ap->list == LIST_KEY)
		return vr_err(ap->err, ap->errlen, -EINVAL, "args: line %zu: an empty item%s", line,
		              list_item);
	else
		ap->depth--;
	return 0;
}

/* A list is accepted only as the value of `features` (SHIM_ARGS_FEATURE_LIST). */
static int on_sequence_start(struct args_parser *ap, size_t line)
{
	struct shim_args *args = ap->args;

	if ((ap->flags & SHIM_ARGS_FEATURE_LIST) && ap->depth == 1 && !ap->want_key &&
	    ap->list == LIST_NONE && !strcmp(args->a[args->n].key, "features")) {
		int rc = 0;
		if (ap->had_list)
			rc = vr_err(ap->err, ap->errlen, -EINVAL,
			            "args: line %u: duplicate key 'features'",
			            args->a[args->n].line);
		ap->list = LIST_ITEMS; /* the key is not kept: its items are */
		ap->had_list = true;
		return rc;
	}
	return vr_err(ap->err, ap->errlen, -EINVAL, "args: line %zu: lists are not accepted%s",
	              line, ap->list != LIST_NONE ? list_item : "");
}

static int on_scalar(struct args_parser *ap, const char *v, size_t line)
{
	int rc;

	if (ap->list == LIST_KEY) {
		rc = take_key(ap->args, v, line, true, ap->err, ap->errlen);
		ap->list = LIST_VALUE;
	} else if (ap->list == LIST_VALUE) {
		rc = take_value(ap->args, v, ap->err, ap->errlen);
		ap->list = LIST_DONE;
	} else if (ap->list != LIST_NONE) {
		rc = vr_err(ap->err, ap->errlen, -EINVAL, "args: line %zu: %s%s", line,
		            ap->list == LIST_ITEMS ? "an item that is not a mapping"
		                                   : "an item with more than one key",
		            list_item);
	} else if (ap->depth != 1) {
		rc = vr_err(ap->err, ap->errlen, -EINVAL,
		            "args: must be a mapping, not the scalar '%s'", v);
	} else {
		rc = ap->want_key ? take_key(ap->args, v, line, false, ap->err, ap->errlen)
		                  : take_value(ap->args, v, ap->err, ap->errlen);
		ap->want_key = !ap->want_key;
	}
	return rc;
}

/* One event of the document; *end at the stream's end. */
static int on_event(struct args_parser *ap, const yaml_event_t *ev, bool *end)
{
	const size_t line = ev->start_mark.line + 1;

	switch (ev->type) {
	case YAML_STREAM_END_EVENT:
		*end = true;
		return 0;
	case YAML_MAPPING_START_EVENT:
		return on_mapping_start(ap, line);
	case YAML_MAPPING_END_EVENT:
		return on_mapping_end(ap, line);
	case YAML_SEQUENCE_START_EVENT:
		return on_sequence_start(ap, line);
	case YAML_SEQUENCE_END_EVENT:
		ap->list = LIST_NONE;
		ap->want_key = true;
		return 0;
	case YAML_SCALAR_EVENT:
		return on_scalar(ap, (const char *)ev->data.scalar.value, line);
	case YAML_ALIAS_EVENT:
		return vr_err(ap->err, ap->errlen, -EINVAL, "args: aliases are not accepted");
	default:
		return 0;
	}
}

int shim_args_parse(const char *yaml, unsigned flags, struct shim_args *args, char *err,
                    size_t errlen)
{
	struct args_parser ap = {.args = args,
	                         .flags = flags,
	                         .want_key = true,
	                         .list = LIST_NONE,
	                         .err = err,
	                         .errlen = errlen};
	yaml_parser_t p;
	yaml_event_t ev;
	int rc = 0;

	memset(args, 0, sizeof(*args));
	if (!yaml || !*yaml)
		return 0;
	if (!yaml_parser_initialize(&p))
		return vr_err(err, errlen, -EINVAL, "args: cannot initialize the YAML parser");
	yaml_parser_set_input_string(&p, (const unsigned char *)yaml, strlen(yaml));
	while (!rc) {
		bool end = false;

		if (!yaml_parser_parse(&p, &ev)) {
			rc = vr_err(err, errlen, -EINVAL, "args: YAML error at line %zu: %s",
			            p.problem_mark.line + 1, p.problem ? p.problem : "?");
			break;
		}
		rc = on_event(&ap, &ev, &end);
		yaml_event_delete(&ev);
		if (end)
			break;
	}
	yaml_parser_delete(&p);
	return rc;
}

static struct shim_arg *find(struct shim_args *args, const char *key)
{
	for (size_t i = 0; i < args->n; i++)
		if (!args->a[i].listed && !strcmp(args->a[i].key, key)) {
			args->a[i].used = true;
			return &args->a[i];
		}
	return NULL;
}

/* The value of sp->key, when given, into its destination. */
static int get_one(struct shim_args *args, const struct shim_arg_spec *sp, char *err, size_t errlen)
{
	struct shim_arg *a = find(args, sp->key);
	char *end;

	if (!a)
		return 0;
	errno = 0;
	if (sp->u64) {
		unsigned long long v = strtoull(a->val, &end, 0);
		if (errno || end == a->val || *end || a->val[0] == '-' || v > sp->max)
			return vr_err(err, errlen, -EINVAL,
			              "args: line %u: %s: '%s' is not an integer in 0..%llu",
			              a->line, sp->key, a->val, (unsigned long long)sp->max);
		*sp->u64 = v;
	} else if (sp->dbl) {
		double v = strtod(a->val, &end);
		if (errno || end == a->val || *end || !isfinite(v) || v < sp->lo || v > sp->hi)
			return vr_err(err, errlen, -EINVAL,
			              "args: line %u: %s: '%s' is not a number in %g..%g", a->line,
			              sp->key, a->val, sp->lo, sp->hi);
		*sp->dbl = v;
	} else if (sp->flag) {
		if (strcmp(a->val, "true") && strcmp(a->val, "false"))
			return vr_err(err, errlen, -EINVAL,
			              "args: line %u: %s: '%s' is not true or false", a->line,
			              sp->key, a->val);
		*sp->flag = !strcmp(a->val, "true");
	} else {
		if (strlen(a->val) >= sp->max)
			return vr_err(err, errlen, -EINVAL,
			              "args: line %u: %s: value too long (max %zu)", a->line,
			              sp->key, (size_t)sp->max - 1);
		strcpy(sp->str, a->val);
	}
	return 0;
}

int shim_args_get(struct shim_args *args, const struct shim_arg_spec *spec, size_t n, char *err,
                  size_t errlen)
{
	int rc = 0;

	for (size_t i = 0; i < n && !rc; i++)
		rc = get_one(args, &spec[i], err, errlen);
	return rc;
}

int shim_args_check_unused(const struct shim_args *args, const struct shim_arg_spec *spec, size_t n,
                           char *err, size_t errlen)
{
	char allowed[SHIM_ARGS_MAX * SHIM_ARG_KEY_MAX] = "";
	size_t len = 0;

	for (size_t i = 0; i < n && len < sizeof(allowed); i++)
		len += (size_t)snprintf(allowed + len, sizeof(allowed) - len, "%s%s", i ? ", " : "",
		                        spec[i].key);
	for (size_t i = 0; i < args->n; i++)
		if (!args->a[i].used)
			return vr_err(err, errlen, -EINVAL,
			              "args: line %u: unknown key '%s' (allowed: %s)",
			              args->a[i].line, args->a[i].key, allowed);
	return 0;
}
