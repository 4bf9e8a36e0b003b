/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness: the web viewer's token file (clients/view/access.c, vw_tokens_parse) on
 * arbitrary bytes. A file accepted holds a view or a control token (or both, different), each
 * of 16 to 255 printable ASCII characters without spaces, ';', ',', quotes or backslashes, as
 * written in the file; the control token has its name. A file refused gets a message that fits
 * the error buffer (of 1 to 256 bytes, from the input's first byte), and the tokens given are
 * left as they were.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clients/view/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *msg, const char *detail)
{
	fprintf(stderr, "fuzz_viewtokens: %s: '%s'\n", msg, detail);
	abort();
}

static void check_token(const char *t, const char *text, size_t len)
{
	size_t n = strlen(t);

	if (!n)
		return;
	if (n < VW_TOKEN_MIN || n > 255)
		fail("a token of a length refused", t);
	for (const char *p = t; *p; p++)
		if ((unsigned char)*p <= ' ' || (unsigned char)*p >= 0x7f || strchr(";,\"\\", *p))
			fail("a token with a character refused", t);
	if (!memmem(text, len, t, n))
		fail("a token that is not in the file", t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct vw_tokens t, before;
	size_t errlen;
	char *text, *err;
	int rc;

	if (!size)
		return 0;
	errlen = 1 + data[0];
	text = malloc(size - 1 ? size - 1 : 1);
	err = malloc(errlen);
	if (!text || !err)
		goto out;
	memcpy(text, data + 1, size - 1);
	memset(&t, 0x5a, sizeof(t));
	before = t;
	rc = vw_tokens_parse(text, size - 1, &t, err, errlen);
	if (rc) {
		if (rc != -EINVAL)
			fail("an error other than -EINVAL", err);
		if (errlen > 1 && !err[0])
			fail("refused without a message", "");
		if (strlen(err) >= errlen)
			fail("a message longer than its buffer", err);
		if (memcmp(&t, &before, sizeof(t)))
			fail("refused but the tokens changed", err);
		goto out;
	}
	if (!t.view[0] && !t.control[0])
		fail("accepted without a token", "");
	check_token(t.view, text, size - 1);
	check_token(t.control, text, size - 1);
	if (t.view[0] && !strcmp(t.view, t.control))
		fail("the same view and control token", t.view);
	if (!t.control[0] != !t.control_name[0])
		fail("a control token without its name, or a name without one", t.control_name);
out:
	free(text);
	free(err);
	return 0;
}
