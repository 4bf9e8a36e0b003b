/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness: text a shim or a file provides, on arbitrary bytes. The input's first byte
 * picks an output size (1..256), the rest is the text. vr_utf8_sanitize must give valid UTF-8
 * without control characters (tab and newline aside) that fits, leave clean text that fits as
 * it is, and change nothing the second time; the source wrappers' text paths (sources/source.c:
 * src_strerror on a stand-in source whose strerror() returns the text, and the wrapper's own
 * message for a positive acquire() return, which quotes the shim's name) must give valid UTF-8;
 * and sanitized text must survive JSON (json-c, as the status message) unchanged.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "base/base.h"
#include "sources/source.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char text[4096];

static void fail(const char *msg)
{
	fprintf(stderr, "fuzz_text: %s\n", msg);
	abort();
}

/* valid UTF-8 without control characters (C0 but tab and newline, DEL, C1 U+0080..U+009F) */
static bool clean(const char *s)
{
	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		if ((*p < 0x20 && *p != '\t' && *p != '\n') || *p == 0x7f ||
		    (p[0] == 0xc2 && p[1] >= 0x80 && p[1] < 0xa0))
			return false;
	return vr_utf8_valid(s, strlen(s));
}

static const char *fake_strerror(void *handle, int code)
{
	return text;
}

static int fake_acquire(void *handle, void *buf, size_t size, int timeout_ms,
                        struct volrec_shim_meta *meta)
{
	return 7; /* a positive return: the wrapper reports it with the shim's name */
}

static void check_sanitize(size_t outlen)
{
	char out[256], again[256];
	size_t n = vr_utf8_sanitize(text, out, outlen), m;

	if (strnlen(out, outlen) >= outlen)
		fail("the output does not fit its buffer");
	if (!clean(out))
		fail("the output is not clean UTF-8");
	if (clean(text) && strlen(text) < outlen && (n || strcmp(out, text)))
		fail("clean text that fits was changed");
	m = vr_utf8_sanitize(out, again, outlen);
	if (m || strcmp(out, again))
		fail("sanitizing twice changes the text");
}

static void check_json(const char *s)
{
	struct json_object *o = json_object_new_string(s), *back;
	const char *j = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);

	if (!vr_utf8_valid(j, strlen(j)))
		fail("the JSON text is not valid UTF-8");
	back = json_tokener_parse(j);
	if (!back || !json_object_is_type(back, json_type_string) ||
	    strcmp(json_object_get_string(back), s))
		fail("the text does not survive JSON");
	json_object_put(back);
	json_object_put(o);
}

static void check_source(void)
{
	struct src_source s;
	const char *t;
	char buf[8];
	int rc;

	memset(&s, 0, sizeof(s));
	s.impl.strerror = fake_strerror;
	s.impl.acquire = fake_acquire;
	s.kind = "shim";
	s.started = true;
	/* src_open keeps the info strings this way (sanitize_field: one line of valid UTF-8) */
	vr_utf8_sanitize(text, s.info.name, sizeof(s.info.name));
	for (char *p = s.info.name; *p; p++)
		if (*p == '\n' || *p == '\t')
			*p = ' ';
	t = src_strerror(&s, -5);
	if (!clean(t) && !vr_utf8_valid(t, strlen(t)))
		fail("src_strerror gave invalid UTF-8 for a shim's text");
	if (strlen(t) >= 512)
		fail("src_strerror overran its buffer");
	rc = src_acquire(&s, buf, sizeof(buf), 0, NULL);
	if (rc != -EPROTO)
		fail("a positive acquire() return is not -EPROTO");
	t = src_strerror(&s, rc);
	if (!vr_utf8_valid(t, strlen(t)) || !strstr(t, s.info.name))
		fail("the positive-return message is not valid UTF-8 or lacks the shim's name");
	check_json(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char out[256];
	size_t outlen;

	if (size < 1 || size > sizeof(text))
		return 0;
	outlen = 1 + data[0] % 256;
	memcpy(text, data + 1, size - 1);
	text[size - 1] = '\0';
	check_sanitize(outlen);
	vr_utf8_sanitize(text, out, sizeof(out));
	check_json(out);
	check_source();
	return 0;
}
