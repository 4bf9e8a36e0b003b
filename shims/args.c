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

#include "args.h"
#include "base/base.h"

int shim_args_parse(const char *yaml, struct shim_args *args, char *err, size_t errlen)
{
	yaml_parser_t p;
	yaml_event_t ev;
	int rc = 0, depth = 0, done = 0;
	bool want_key = true, have_map = false;

	memset(args, 0, sizeof(*args));
	if (!yaml || !*yaml)
		return 0;
	if (!yaml_parser_initialize(&p))
		return vr_err(err, errlen, -EINVAL, "args: cannot initialize the YAML parser");
	yaml_parser_set_input_string(&p, (const unsigned char *)yaml, strlen(yaml));
	while (!done) {
		if (!yaml_parser_parse(&p, &ev)) {
			rc = vr_err(err, errlen, -EINVAL, "args: YAML error at line %zu: %s",
			            p.problem_mark.line + 1, p.problem ? p.problem : "?");
			break;
		}
		switch (ev.type) {
		case YAML_STREAM_END_EVENT:
			done = 1;
			break;
		case YAML_MAPPING_START_EVENT:
			if (depth > 0) {
				rc = vr_err(err, errlen, -EINVAL,
				            "args: line %zu: nested mappings are not "
				            "accepted (flat key: value only)",
				            ev.start_mark.line + 1);
				done = 1;
			}
			depth++;
			have_map = true;
			break;
		case YAML_MAPPING_END_EVENT:
			depth--;
			break;
		case YAML_SEQUENCE_START_EVENT:
			rc = vr_err(err, errlen, -EINVAL, "args: line %zu: lists are not accepted",
			            ev.start_mark.line + 1);
			done = 1;
			break;
		case YAML_SCALAR_EVENT: {
			const char *v = (const char *)ev.data.scalar.value;
			if (depth != 1) {
				rc = vr_err(err, errlen, -EINVAL,
				            "args: must be a mapping, not the scalar '%s'", v);
				done = 1;
				break;
			}
			if (want_key) {
				if (args->n == SHIM_ARGS_MAX) {
					rc = vr_err(err, errlen, -EINVAL, "args: more than %d keys",
					            SHIM_ARGS_MAX);
					done = 1;
					break;
				}
				if (strlen(v) >= SHIM_ARG_KEY_MAX) {
					rc = vr_err(err, errlen, -EINVAL,
					            "args: key '%.32s...' too long", v);
					done = 1;
					break;
				}
				for (size_t i = 0; i < args->n; i++)
					if (!strcmp(args->a[i].key, v)) {
						rc = vr_err(err, errlen, -EINVAL,
						            "args: line %zu: duplicate key '%s'",
						            ev.start_mark.line + 1, v);
						done = 1;
					}
				if (done)
					break;
				strcpy(args->a[args->n].key, v);
				args->a[args->n].line = (unsigned)ev.start_mark.line + 1;
			} else {
				if (strlen(v) >= SHIM_ARG_VAL_MAX) {
					rc = vr_err(err, errlen, -EINVAL,
					            "args: value of '%s' too long",
					            args->a[args->n].key);
					done = 1;
					break;
				}
				strcpy(args->a[args->n].val, v);
				args->n++;
			}
			want_key = !want_key;
			break;
		}
		case YAML_ALIAS_EVENT:
			rc = vr_err(err, errlen, -EINVAL, "args: aliases are not accepted");
			done = 1;
			break;
		default:
			break;
		}
		yaml_event_delete(&ev);
	}
	yaml_parser_delete(&p);
	(void)have_map; /* an empty document is fine; a scalar document was caught above */
	return rc;
}

static struct shim_arg *find(struct shim_args *args, const char *key)
{
	for (size_t i = 0; i < args->n; i++)
		if (!strcmp(args->a[i].key, key)) {
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
