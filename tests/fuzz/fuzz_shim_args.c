/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness: the example shims' parser of source.shim.args (sources/shim_args.c) on arbitrary
 * bytes. The input's first byte picks the flags (with or without the GenICam shim's `features`
 * list) and the type each key is read as; the rest is the YAML document a shim's open() gets.
 * A parsed document must keep every bound its header states, and every refusal must say why.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sources/shim_args.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct shim_args args; /* 133 KiB: not on the fuzzer's stack */

static void fail(const char *what, const char *detail)
{
	fprintf(stderr, "fuzz_shim_args: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
	abort();
}

/* A refusal is -EINVAL with a message that fits its buffer. */
static void check_refusal(int rc, const char *err, size_t errlen)
{
	if (rc != -EINVAL)
		fail("a refusal that is not -EINVAL", NULL);
	if (!err[0])
		fail("a refusal without a message", NULL);
	if (strnlen(err, errlen) >= errlen)
		fail("a message that does not fit its buffer", NULL);
}

/* What shim_args.h promises of a parsed document. */
static void check_parsed(unsigned flags)
{
	if (args.n > SHIM_ARGS_MAX)
		fail("more keys than SHIM_ARGS_MAX", NULL);
	for (size_t i = 0; i < args.n; i++) {
		const struct shim_arg *a = &args.a[i];

		if (strnlen(a->key, sizeof(a->key)) >= sizeof(a->key) ||
		    strnlen(a->val, sizeof(a->val)) >= sizeof(a->val))
			fail("a key or value without its NUL", NULL);
		if (a->used)
			fail("a key marked used before any getter", a->key);
		if (a->listed && !(flags & SHIM_ARGS_FEATURE_LIST))
			fail("a listed item without SHIM_ARGS_FEATURE_LIST", a->key);
		if (!a->line)
			fail("a key without its line", a->key);
		for (size_t j = 0; j < i && !a->listed; j++)
			if (!args.a[j].listed && !strcmp(args.a[j].key, a->key))
				fail("a duplicate key accepted", a->key);
	}
}

/* Read every key but the last as the type `pick` gives it (rotating per key): the getters
 * must fill them or refuse with a message, and check_unused must then refuse naming the key
 * left unread, or, with every key read, accept (listed items are the caller's to mark). */
static void check_getters(uint8_t pick)
{
	struct shim_arg_spec spec[SHIM_ARGS_MAX];
	uint64_t u[SHIM_ARGS_MAX];
	double d[SHIM_ARGS_MAX];
	bool b[SHIM_ARGS_MAX];
	static char s[4][SHIM_ARG_VAL_MAX];
	const char *unread = NULL;
	char err[SHIM_ARGS_MAX * SHIM_ARG_KEY_MAX + 512] = "", want[SHIM_ARG_KEY_MAX + 8];
	size_t n = 0;
	int rc;

	for (size_t i = 0; i < args.n; i++) {
		if (args.a[i].listed) {
			args.a[i].used = true; /* as the GenICam shim marks the features it wrote */
			continue;
		}
		unread = args.a[i].key;
		struct shim_arg_spec *sp = &spec[n];
		memset(sp, 0, sizeof(*sp));
		sp->key = args.a[i].key;
		switch ((pick + i) % 4) {
		case 0:
			sp->u64 = &u[n];
			sp->max = (uint64_t)pick << 24;
			break;
		case 1:
			sp->dbl = &d[n];
			sp->lo = -1e6;
			sp->hi = 1e6;
			break;
		case 2:
			sp->flag = &b[n];
			break;
		default:
			sp->str = s[n % 4];
			sp->max = 1 + (size_t)pick * 32; /* 1..4065, within SHIM_ARG_VAL_MAX */
			break;
		}
		n++;
	}
	/* every key read but the last one found (pick's top bit: all of them) */
	if (n && !(pick & 0x40))
		n--;
	else
		unread = NULL;
	rc = shim_args_get(&args, spec, n, err, sizeof(err));
	if (rc) {
		check_refusal(rc, err, sizeof(err));
		return;
	}
	for (size_t i = 0; i < n; i++)
		if (spec[i].str && strnlen(spec[i].str, spec[i].max) >= spec[i].max)
			fail("a string longer than its destination", spec[i].key);
	err[0] = '\0';
	rc = shim_args_check_unused(&args, spec, n, err, sizeof(err));
	if (!unread) {
		if (rc)
			fail("check_unused refused with every key read", err);
		return;
	}
	check_refusal(rc, err, sizeof(err));
	snprintf(want, sizeof(want), "key '%s'", unread);
	if (!strstr(err, want))
		fail("check_unused does not name the key left unread", err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[448] = "";
	unsigned flags;
	uint8_t pick;
	char *text;
	int rc;

	if (size < 1)
		return 0;
	pick = data[0];
	flags = (pick & 1) ? SHIM_ARGS_FEATURE_LIST : 0;
	text = malloc(size);
	if (!text)
		return 0;
	memcpy(text, data + 1, size - 1);
	text[size - 1] = '\0'; /* the shim gets a C string: a NUL ends the document */
	rc = shim_args_parse(text, flags, &args, err, sizeof(err));
	if (rc)
		check_refusal(rc, err, sizeof(err));
	else {
		check_parsed(flags);
		check_getters(pick >> 1);
	}
	free(text);
	return 0;
}
