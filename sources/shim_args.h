/* SPDX-License-Identifier: MIT */
/*
 * Shim argument parsing shared by the example shims: source.shim.args arrives as a YAML
 * document holding one flat mapping of scalars, parsed here with libyaml; with
 * SHIM_ARGS_FEATURE_LIST also a key `features` holding a list of one-key mappings.
 */
#ifndef VOLREC_SHIMS_ARGS_H
#define VOLREC_SHIMS_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SHIM_ARGS_MAX    32 /* keys accepted */
#define SHIM_ARG_KEY_MAX 64
#define SHIM_ARG_VAL_MAX 4096

struct shim_arg {
	char key[SHIM_ARG_KEY_MAX];
	char val[SHIM_ARG_VAL_MAX];
	unsigned line; /* 1-based line of the key in the document */
	bool used;     /* set by the getters: unused keys are reported as unknown */
	bool listed;   /* an item of `features` (repeats allowed; the getters skip it) */
};

struct shim_args {
	struct shim_arg a[SHIM_ARGS_MAX];
	size_t n;
};

/* flags of shim_args_parse: the key `features` may hold a list of `{key: value}` items, taken
 * in order where the list stands (as entries with `listed` set; a key may repeat there) */
#define SHIM_ARGS_FEATURE_LIST 0x1u

/* Parse yaml ("{}" or NULL: no keys). -EINVAL and a message on anything but a flat mapping
 * of scalars (nested values, duplicate keys, too many or too long keys/values), or with
 * SHIM_ARGS_FEATURE_LIST a `features` that is not a list of one-key mappings of scalars. */
int shim_args_parse(const char *yaml, unsigned flags, struct shim_args *args, char *err,
                    size_t errlen);

/* One key for shim_args_get(): exactly one destination is set; it keeps its default when the
 * key is absent. */
struct shim_arg_spec {
	const char *key;
	uint64_t *u64; /* an integer in 0..max */
	double *dbl;   /* a number in lo..hi */
	bool *flag;    /* true or false */
	char *str;     /* a string shorter than max bytes */
	uint64_t max;
	double lo, hi;
};

/* Fill the destinations of spec[0..n) in order: -EINVAL and a message naming the key and value
 * at the first one malformed or out of range. */
int shim_args_get(struct shim_args *args, const struct shim_arg_spec *spec, size_t n, char *err,
                  size_t errlen);
/* -EINVAL naming the first key no getter asked for, and the keys of spec[0..n) as the allowed
 * ones. */
int shim_args_check_unused(const struct shim_args *args, const struct shim_arg_spec *spec, size_t n,
                           char *err, size_t errlen);

#endif
