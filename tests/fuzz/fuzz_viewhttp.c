/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness: the web viewer's reading of a request's headers (clients/view/access.c)
 * on arbitrary bytes. The input is split at newlines into Host, Origin, Cookie, Authorization
 * and Sec-WebSocket-Protocol, each NUL-terminated in a buffer of its own size. A token read
 * from a cookie or a bearer header fits the given buffer (of 1 to 64 bytes, from the input's
 * first byte, so that ASan sees a write past it) and is the text that follows the cookie's
 * name or "Bearer "; a loopback Host names only loopback, in any case; an Origin matches a
 * Host only when their host[:port] is the same; the subprotocol is found only where it is.
 */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "clients/view/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { HOST, ORIGIN, COOKIE, AUTH, PROTO, FIELDS };

static void fail(const char *msg, const char *detail)
{
	fprintf(stderr, "fuzz_viewhttp: %s: '%s'\n", msg, detail);
	abort();
}

/* s[0..n) as a NUL-terminated string of its own allocation (a NUL inside ends it early, as a
 * C header reader sees it). */
static char *field(const uint8_t *s, size_t n)
{
	char *f = malloc(n + 1);

	if (f) {
		memcpy(f, s, n);
		f[n] = 0;
	}
	return f;
}

static void check_cookie(const char *cookies, size_t len)
{
	char *out = malloc(len);
	const char *at;

	if (!out)
		return;
	if (vw_cookie_token(cookies, out, len)) {
		size_t l = strlen(out);

		if (l >= len)
			fail("cookie token longer than its buffer", out);
		if (strchr(out, ';'))
			fail("cookie token runs into the next cookie", out);
		/* it follows the cookie's name, at the start or after a ';' and spaces */
		at = strstr(cookies, VW_COOKIE "=");
		while (at && strncmp(at + sizeof(VW_COOKIE), out, l))
			at = strstr(at + 1, VW_COOKIE "=");
		if (!at)
			fail("cookie token is not the text after the cookie's name", out);
	}
	free(out);
}

static void check_bearer(const char *auth, size_t len)
{
	char *out = malloc(len);

	if (!out)
		return;
	if (vw_bearer_token(auth, out, len)) {
		if (strncasecmp(auth, "Bearer ", 7) || strcmp(out, auth + 7) ||
		    strlen(out) >= len || !out[0])
			fail("bearer token is not the header's text after 'Bearer '", auth);
	}
	free(out);
}

static void check_host(const char *host)
{
	size_t n = strlen(host);
	char *upper = malloc(n + 1);
	bool loop = vw_loopback_host(host);

	if (!upper)
		return;
	for (size_t i = 0; i <= n; i++)
		upper[i] = (char)toupper((unsigned char)host[i]);
	if (vw_loopback_host(upper) != loop)
		fail("loopback depends on the case", host);
	if (loop && (n >= 256 || strpbrk(host, "/@% \t\r") || !n))
		fail("a loopback host that cannot be one", host);
	if (loop && strncasecmp(host, "localhost", 9) && strncmp(host, "[::1]", 5) &&
	    strncmp(host, "127.", 4))
		fail("a loopback host that names something else", host);
	free(upper);
}

static void check_origin(const char *origin, const char *host)
{
	const char *o = strstr(origin, "://"), *h = strstr(host, "://");
	size_t ol, hl;

	if (!vw_same_origin(origin, host))
		return;
	o = o ? o + 3 : origin;
	h = h ? h + 3 : host;
	ol = strcspn(o, "/");
	hl = strcspn(h, "/");
	if (ol != hl || strncasecmp(o, h, ol) || ol >= 256)
		fail("an origin matched a different host", origin);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *f[FIELDS] = {0};
	size_t len, at = 1;

	if (!size)
		return 0;
	len = 1 + data[0] % 64;
	for (int i = 0; i < FIELDS; i++) {
		const uint8_t *nl = at < size ? memchr(data + at, '\n', size - at) : NULL;
		size_t n = at < size ? (nl ? (size_t)(nl - (data + at)) : size - at) : 0;

		f[i] = field(data + at, n);
		at += n + 1;
	}
	for (int i = 0; i < FIELDS; i++)
		if (!f[i])
			goto out;
	check_host(f[HOST]);
	check_origin(f[ORIGIN], f[HOST]);
	check_cookie(f[COOKIE], len);
	check_bearer(f[AUTH], len);
	if (vw_offers_subprotocol(f[PROTO]) && !strstr(f[PROTO], VW_SUBPROTOCOL))
		fail("a subprotocol found where it is not", f[PROTO]);
	if (vw_token_equal(f[COOKIE], f[AUTH]) != (f[AUTH][0] && !strcmp(f[COOKIE], f[AUTH])))
		fail("token comparison differs from strcmp", f[AUTH]);
out:
	for (int i = 0; i < FIELDS; i++)
		free(f[i]);
	return 0;
}
