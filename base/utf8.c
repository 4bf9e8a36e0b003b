/* SPDX-License-Identifier: MIT */
/* UTF-8 checking for text from shims, cameras and files before it reaches JSON or logs. */
#include <string.h>

#include "base/base.h"

/* Length of the valid UTF-8 sequence at s (at most n bytes), or 0 if it is not valid. */
static size_t seq_len(const unsigned char *s, size_t n)
{
	uint32_t cp;
	size_t len, i;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		len = 2, cp = s[0] & 0x1f;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		len = 3, cp = s[0] & 0x0f;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		len = 4, cp = s[0] & 0x07;
	else
		return 0;
	if (len > n)
		return 0;
	for (i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10ffff ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

bool vr_utf8_valid(const char *s, size_t len)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0, l;

	while (i < len) {
		l = seq_len(p + i, len - i);
		if (!l)
			return false;
		i += l;
	}
	return true;
}

size_t vr_utf8_sanitize(const char *s, char *out, size_t outlen)
{
	static const char repl[] = "\xef\xbf\xbd";
	const unsigned char *p = (const unsigned char *)s;
	size_t n = strlen(s), i = 0, o = 0, bad = 0, l;

	while (i < n) {
		l = seq_len(p + i, n - i);
		/* an invalid byte, and control characters: C0 but tab and newline, DEL, and C1
		 * (U+0080..U+009F, which holds CSI, U+009B, that terminals take for ESC [): one
		 * U+FFFD each */
		if (l == 0 ||
		    (l == 1 && ((p[i] < 0x20 && p[i] != '\t' && p[i] != '\n') || p[i] == 0x7f)) ||
		    (l == 2 && p[i] == 0xc2 && p[i + 1] < 0xa0)) {
			if (o + 3 >= outlen)
				break;
			memcpy(out + o, repl, 3);
			o += 3;
			i += l ? l : 1;
			bad++;
			continue;
		}
		if (o + l >= outlen)
			break;
		memcpy(out + o, p + i, l);
		o += l;
		i += l;
	}
	out[o] = '\0';
	return bad;
}
