/* SPDX-License-Identifier: MIT */
/*
 * Who may use the viewer (docs/viewer.md, Security): the token file, the token generated at
 * start, and the HTTP headers that carry a token or say where a request comes from (Host,
 * Origin, Cookie, Authorization, Sec-WebSocket-Protocol). Pure functions on text, so that they
 * are tested and fuzzed without a server (tests/fuzz/fuzz_viewhttp.c, fuzz_viewtokens.c).
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

#include "base/base.h"
#include "clients/view/internal.h"

bool vw_token_equal(const char *given, const char *expected)
{
	size_t lg = strlen(given), le = strlen(expected);
	unsigned char d = lg != le;

	/* constant time over the expected token */
	for (size_t i = 0; i < le; i++)
		d |= (unsigned char)(expected[i] ^ (i < lg ? given[i] : 0));
	return !d && le;
}

bool vw_cookie_token(const char *cookies, char *out, size_t len)
{
	static const char name[] = VW_COOKIE "=";

	for (const char *p = cookies; p && *p;) {
		const char *end = strchr(p, ';');

		while (*p == ' ')
			p++;
		if (!strncmp(p, name, sizeof(name) - 1)) {
			const char *v = p + sizeof(name) - 1;
			size_t l = end ? (size_t)(end - v) : strlen(v);

			if (l >= len)
				return false;
			memcpy(out, v, l);
			out[l] = 0;
			return true;
		}
		p = end ? end + 1 : NULL;
	}
	return false;
}

bool vw_bearer_token(const char *authorization, char *out, size_t len)
{
	size_t l;

	if (strncasecmp(authorization, "Bearer ", 7))
		return false;
	l = strlen(authorization + 7);
	if (!l || l >= len)
		return false;
	memcpy(out, authorization + 7, l + 1);
	return true;
}

/* host[:port] of a Host or Origin header, lower case, without the scheme; false when it does
 * not fit. */
static bool host_part(const char *s, char *out, size_t len)
{
	const char *p = strstr(s, "://");
	size_t i = 0;

	p = p ? p + 3 : s;
	for (; *p && *p != '/'; p++) {
		if (i + 1 >= len)
			return false;
		out[i++] = (char)tolower((unsigned char)*p);
	}
	out[i] = 0;
	return true;
}

bool vw_same_origin(const char *origin, const char *host)
{
	char oh[256], hh[256];

	return host_part(origin, oh, sizeof(oh)) && host_part(host, hh, sizeof(hh)) &&
	       !strcmp(oh, hh);
}

bool vw_loopback_host(const char *hostport)
{
	char h[256];
	char *port;
	struct in_addr a;
	uint64_t pn;
	size_t n = strlen(hostport);

	if (!n || n >= sizeof(h))
		return false;
	for (size_t i = 0; i <= n; i++)
		h[i] = (char)tolower((unsigned char)hostport[i]);
	port = h[0] == '[' ? strchr(h, ']') : h;
	if (!port)
		return false;
	port = strchr(port, ':');
	if (port) {
		if (vr_parse_u64(port + 1, 0, 65535, &pn))
			return false;
		*port = 0;
	}
	if (!strcmp(h, "localhost") || !strcmp(h, "[::1]"))
		return true;
	return inet_pton(AF_INET, h, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

bool vw_offers_subprotocol(const char *list)
{
	size_t n = strlen(VW_SUBPROTOCOL);

	for (const char *p = list; *p;) {
		p += strspn(p, " \t,");
		if (!strncmp(p, VW_SUBPROTOCOL, n) && strchr(" \t,", p[n]))
			return true;
		p += strcspn(p, ",");
	}
	return false;
}

/* ---- tokens ------------------------------------------------------------------------------------ */

/* A token may travel in a URL, a cookie and a header: printable ASCII without spaces, ';',
 * ',', quotes or backslashes. */
static bool token_chars_ok(const char *v)
{
	for (; *v; v++)
		if ((unsigned char)*v <= ' ' || (unsigned char)*v >= 0x7f || strchr(";,\"\\", *v))
			return false;
	return true;
}

int vw_tokens_parse(const char *text, size_t len, struct vw_tokens *t, char *err, size_t errlen)
{
	struct vw_tokens r;
	size_t at = 0;
	int n = 0;

	memset(&r, 0, sizeof(r));
	if (memchr(text, 0, len))
		return vr_err(err, errlen, -EINVAL, "holds a NUL byte: not a text file");
	while (at < len) {
		const char *line = text + at, *nl = memchr(line, '\n', len - at);
		size_t ll = nl ? (size_t)(nl - line) : len - at;
		char buf[512], *p = buf, *v, *e;
		char *dst;

		at += ll + (nl != NULL);
		n++;
		if (ll >= sizeof(buf))
			return vr_err(err, errlen, -EINVAL, "line %d: longer than %zu bytes", n,
			              sizeof(buf) - 1);
		memcpy(buf, line, ll);
		buf[ll] = 0;
		p += strspn(p, " \t\r");
		if (*p == '#' || !*p)
			continue;
		v = strchr(p, ':');
		if (!v)
			return vr_err(err, errlen, -EINVAL,
			              "line %d: need 'view: TOKEN' or 'control: TOKEN'", n);
		*v++ = 0;
		v += strspn(v, " \t");
		for (e = v + strlen(v); e > v && strchr(" \r\t", e[-1]);)
			*--e = 0;
		if (!strcmp(p, "view"))
			dst = r.view;
		else if (!strcmp(p, "control"))
			dst = r.control;
		else
			return vr_err(err, errlen, -EINVAL,
			              "line %d: need 'view: TOKEN' or 'control: TOKEN'", n);
		if (strlen(v) < VW_TOKEN_MIN || strlen(v) >= sizeof(r.view) || !token_chars_ok(v))
			return vr_err(
			        err, errlen, -EINVAL,
			        "line %d: %s token: need %d to %zu printable ASCII characters "
			        "without spaces, ';', ',', quotes or backslashes",
			        n, p, VW_TOKEN_MIN, sizeof(r.view) - 1);
		memcpy(dst, v, strlen(v) + 1);
	}
	if (!r.view[0] && !r.control[0])
		return vr_err(err, errlen, -EINVAL, "no 'view:' or 'control:' token");
	if (r.view[0] && !strcmp(r.view, r.control))
		return vr_err(err, errlen, -EINVAL, "the view and control tokens are the same");
	if (r.control[0])
		snprintf(r.control_name, sizeof(r.control_name), "control");
	*t = r;
	return 0;
}

int vw_token_generate(char *out, size_t len)
{
	static const char b64url[] =
	        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
	unsigned char rnd[VW_TOKEN_BYTES];
	size_t got = 0, o = 0;
	uint32_t acc = 0;
	int bits = 0;

	if (len < (VW_TOKEN_BYTES * 8 + 5) / 6 + 1)
		return -ENOSPC;
	while (got < sizeof(rnd)) {
		ssize_t r = getrandom(rnd + got, sizeof(rnd) - got, 0);

		if (r < 0 && errno != EINTR)
			return -errno;
		if (r > 0)
			got += (size_t)r;
	}
	for (size_t i = 0; i < sizeof(rnd); i++) {
		acc = (acc << 8) | rnd[i];
		bits += 8;
		while (bits >= 6) {
			bits -= 6;
			out[o++] = b64url[(acc >> bits) & 63];
		}
	}
	if (bits)
		out[o++] = b64url[(acc << (6 - bits)) & 63];
	out[o] = 0;
	return 0;
}
