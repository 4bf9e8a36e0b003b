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

int shim_args_parse(const char *yaml, unsigned flags, struct shim_args *args, char *err,
                    size_t errlen)
{
	static const char item[] = " (each item of features is one 'Feature: value')";
	yaml_parser_t p;
	yaml_event_t ev;
	int rc = 0, depth = 0;
	bool want_key = true, had_list = false;
	enum list_state list = LIST_NONE;

	memset(args, 0, sizeof(*args));
	if (!yaml || !*yaml)
		return 0;
	if (!yaml_parser_initialize(&p))
		return vr_err(err, errlen, -EINVAL, "args: cannot initialize the YAML parser");
	yaml_parser_set_input_string(&p, (const unsigned char *)yaml, strlen(yaml));
	while (!rc) {
		if (!yaml_parser_parse(&p, &ev)) {
			rc = vr_err(err, errlen, -EINVAL, "args: YAML error at line %zu: %s",
			            p.problem_mark.line + 1, p.problem ? p.problem : "?");
			break;
		}
		const size_t line = ev.start_mark.line + 1;
		bool end = false;

		switch (ev.type) {
		case YAML_STREAM_END_EVENT:
			end = true;
			break;
		case YAML_MAPPING_START_EVENT:
			if (list == LIST_ITEMS)
				list = LIST_KEY;
			else if (depth++ > 0 || list != LIST_NONE)
				rc = vr_err(
				        err, errlen, -EINVAL,
				        "args: line %zu: nested mappings are not accepted (flat "
				        "key: value only)%s",
				        line, list != LIST_NONE ? item : "");
			break;
		case YAML_MAPPING_END_EVENT:
			if (list == LIST_DONE)
				list = LIST_ITEMS;
			else if (list == LIST_KEY)
				rc = vr_err(err, errlen, -EINVAL, "args: line %zu: an empty item%s",
				            line, item);
			else
				depth--;
			break;
		case YAML_SEQUENCE_START_EVENT:
			if ((flags & SHIM_ARGS_FEATURE_LIST) && depth == 1 && !want_key &&
			    list == LIST_NONE && !strcmp(args->a[args->n].key, "features")) {
				if (had_list)
					rc = vr_err(err, errlen, -EINVAL,
					            "args: line %u: duplicate key 'features'",
					            args->a[args->n].line);
				list = LIST_ITEMS; /* the key is not kept: its items are */
				had_list = true;
				break;
			}
			rc = vr_err(err, errlen, -EINVAL,
			            "args: line %zu: lists are not accepted%s", line,
			            list != LIST_NONE ? item : "");
			break;
		case YAML_SEQUENCE_END_EVENT:
			list = LIST_NONE;
			want_key = true;
			break;
		case YAML_SCALAR_EVENT: {
			const char *v = (const char *)ev.data.scalar.value;

			if (list == LIST_KEY) {
				rc = take_key(args, v, line, true, err, errlen);
				list = LIST_VALUE;
			} else if (list == LIST_VALUE) {
				rc = take_value(args, v, err, errlen);
				list = LIST_DONE;
			} else if (list != LIST_NONE) {
				rc = vr_err(err, errlen, -EINVAL, "args: line %zu: %s%s", line,
				            list == LIST_ITEMS ? "an item that is not a mapping"
				                               : "an item with more than one key",
				            item);
			} else if (depth != 1) {
				rc = vr_err(err, errlen, -EINVAL,
				            "args: must be a mapping, not the scalar '%s'", v);
			} else {
				rc = want_key ? take_key(args, v, line, false, err, errlen)
				              : take_value(args, v, err, errlen);
				want_key = !want_key;
			}
			break;
		}
		case YAML_ALIAS_EVENT:
			rc = vr_err(err, errlen, -EINVAL, "args: aliases are not accepted");
			break;
		default:
			break;
		}
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
