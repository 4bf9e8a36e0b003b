/* SPDX-License-Identifier: MIT */
/*
 * Strict JSON through json-c: exactly one object, refusing what json-c 0.16 lets through even
 * in strict mode (single quotes, NaN and Infinity, duplicate keys, U+0000 inside strings), for
 * the requests of the control socket and the messages of the web viewer's browsers.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "base/base.h"

/* Whether every number in o is finite: json-c reads NaN, Infinity and 1e999 even when strict. */
static bool all_finite(struct json_object *o)
{
	switch (json_object_get_type(o)) {
	case json_type_double:
		return isfinite(json_object_get_double(o));
	case json_type_array:
		for (size_t i = 0; i < json_object_array_length(o); i++)
			if (!all_finite(json_object_array_get_idx(o, i)))
				return false;
		return true;
	case json_type_object: {
		json_object_object_foreach(o, k, v)
		{
			(void)k;
			if (!all_finite(v))
				return false;
		}
		return true;
	}
	default:
		return true;
	}
}

/* Offset of the first single quote outside a string in text, or len: json-c reads
 * single-quoted keys even when strict. */
static size_t single_quote_at(const char *text, size_t len)
{
	bool in_string = false;

	for (size_t i = 0; i < len; i++) {
		if (in_string && text[i] == '\\')
			i++;
		else if (text[i] == '"')
			in_string = !in_string;
		else if (!in_string && text[i] == '\'')
			return i;
	}
	return len;
}

/* The end of the string token that starts at text[at] (its opening quote): the offset just past
 * its closing quote; *escaped tells whether it holds a backslash. */
static size_t string_end(const char *text, size_t len, size_t at, bool *escaped)
{
	size_t i = at + 1;

	*escaped = false;
	while (i < len && text[i] != '"') {
		if (text[i] == '\\') {
			*escaped = true;
			i++;
		}
		i++;
	}
	return i + 1;
}

/* The value of the 4 hex digits at s (valid JSON: they are there). */
static unsigned hex4(const char *s)
{
	unsigned v = 0;

	for (int i = 0; i < 4; i++)
		v = v * 16 + (unsigned)(isdigit((unsigned char)s[i]) ? s[i] - '0'
		                                                     : (s[i] | 0x20) - 'a' + 10);
	return v;
}

/* Offset of the first \uD800-\uDFFF escape in the string token text[at, end) that is not one
 * half of a pair (a high one followed by a low one), or end: json-c reads it as U+FFFD, so the
 * string would silently become another one. */
static size_t unpaired_surrogate_at(const char *text, size_t at, size_t end)
{
	for (size_t i = at + 1; i + 1 < end; i++) {
		unsigned u;

		if (text[i] != '\\')
			continue;
		if (text[i + 1] != 'u') {
			i++;
			continue;
		}
		u = hex4(text + i + 2);
		if (u >= 0xdc00 && u <= 0xdfff)
			return i;
		if (u >= 0xd800 && u <= 0xdbff) {
			if (i + 13 > end || text[i + 6] != '\\' || text[i + 7] != 'u' ||
			    hex4(text + i + 8) < 0xdc00 || hex4(text + i + 8) > 0xdfff)
				return i;
			i += 6; /* the low half */
		}
		i += 5;
	}
	return end;
}

/* The string token at text[i] (its end, one past the closing quote, into *end_out): no raw
 * control character, no unpaired surrogate, no U+0000; when it is a key of the object whose
 * keys so far obj holds (NULL: not in an object), not one of them (it is added). */
static int check_string(const char *text, size_t len, size_t i, struct json_object *obj,
                        struct json_tokener *tok, size_t *end_out, char *err, size_t errlen)
{
	struct json_object *s = NULL;
	const char *str;
	size_t end, n, after, u;
	bool escaped, is_key;
	char shown[68];
	int rc = 0;

	end = string_end(text, len, i, &escaped);
	*end_out = end;
	for (after = end; after < len && strchr(" \t\r\n", text[after]); after++)
		;
	is_key = obj && after < len && text[after] == ':';
	for (size_t k = i + 1; k + 1 < end; k++)
		if ((unsigned char)text[k] < 0x20)
			return vr_err(err, errlen, -EINVAL,
			              "the %s at byte %zu holds a raw control character U+%04X at "
			              "byte %zu (JSON wants it escaped: \\u%04X)",
			              is_key ? "key" : "string", i,
			              (unsigned)(unsigned char)text[k], k,
			              (unsigned)(unsigned char)text[k]);
	if (escaped && (u = unpaired_surrogate_at(text, i, end)) < end)
		return vr_err(err, errlen, -EINVAL,
		              "the %s at byte %zu holds an unpaired surrogate %.6s at byte %zu",
		              is_key ? "key" : "string", i, text + u, u);
	if (escaped) {
		/* the string token, decoded by json-c (a new reference) */
		json_tokener_reset(tok);
		s = json_tokener_parse_ex(tok, text + i, (int)(end - i));
		if (!s)
			return vr_err(err, errlen, -EINVAL, "a bad string at byte %zu", i);
		str = json_object_get_string(s);
		n = (size_t)json_object_get_string_len(s);
	} else {
		str = text + i + 1;
		n = end - i - 2;
	}
	if (escaped ? strlen(str) != n : memchr(str, '\0', n) != NULL) {
		vr_utf8_sanitize(str, shown, sizeof(shown));
		rc = vr_err(err, errlen, -EINVAL,
		            "the %s at byte %zu holds U+0000 (NUL) after '%s'",
		            is_key ? "key" : "string", i, shown);
	} else if (is_key) {
		char *key = strndup(str, n);

		if (!key) {
			rc = vr_err(err, errlen, -ENOMEM, "out of memory");
		} else if (json_object_object_get_ex(obj, key, NULL)) {
			vr_utf8_sanitize(key, shown, sizeof(shown));
			rc = vr_err(err, errlen, -EINVAL,
			            "duplicate key '%s' at byte %zu (each key once)", shown, i);
		} else if (json_object_object_add(obj, key, NULL)) {
			rc = vr_err(err, errlen, -ENOMEM, "out of memory");
		}
		free(key);
	}
	json_object_put(s);
	return rc;
}

/*
 * Walk text, valid JSON of at most depth levels, for what json-c's tree cannot show: a key given
 * twice in one object (json-c keeps the last), a string holding U+0000 (json-c cuts keys at
 * it) and a raw control character inside a string (json-c takes it, JSON does not). 0, or -EINVAL with why in err; -ENOMEM.
 */
static int check_keys_and_strings(const char *text, size_t len, int depth, char *err, size_t errlen)
{
	/* per open container: the keys seen so far in an object (as a json-c object), NULL in an
	 * array */
	struct json_object **keys = calloc((size_t)depth + 1, sizeof(*keys));
	struct json_tokener *tok = json_tokener_new_ex(1);
	int top = -1, rc = 0;

	if (!keys || !tok) {
		rc = vr_err(err, errlen, -ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < len && !rc; i++) {
		size_t end;

		switch (text[i]) {
		case '{':
		case '[':
			if (top == depth) {
				rc = vr_err(err, errlen, -EINVAL, "nested too deeply at byte %zu",
				            i);
				break;
			}
			keys[++top] = text[i] == '{' ? json_object_new_object() : NULL;
			if (text[i] == '{' && !keys[top])
				rc = vr_err(err, errlen, -ENOMEM, "out of memory");
			break;
		case '}':
		case ']':
			if (top >= 0)
				json_object_put(keys[top--]);
			break;
		case '"':
			rc = check_string(text, len, i, top >= 0 ? keys[top] : NULL, tok, &end, err,
			                  errlen);
			i = end - 1;
			break;
		default:
			break;
		}
	}
out:
	while (keys && top >= 0)
		json_object_put(keys[top--]);
	free(keys);
	if (tok)
		json_tokener_free(tok);
	return rc;
}

struct json_object *vr_json_parse_object(const char *text, size_t len, int depth, char *err,
                                         size_t errlen)
{
	struct json_tokener *tok;
	struct json_object *o = NULL;
	enum json_tokener_error e;
	size_t end, q;

	if (len > (size_t)INT32_MAX) {
		vr_err(err, errlen, -EINVAL, "%zu bytes is too long", len);
		return NULL;
	}
	tok = json_tokener_new_ex(depth);
	if (!tok) {
		vr_err(err, errlen, -ENOMEM, "out of memory");
		return NULL;
	}
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_ALLOW_TRAILING_CHARS);
	o = json_tokener_parse_ex(tok, text, (int)len);
	e = json_tokener_get_error(tok);
	end = json_tokener_get_parse_end(tok);
	json_tokener_free(tok);
	while (e == json_tokener_success && end < len && text[end] && strchr(" \t\r\n", text[end]))
		end++;
	if ((q = single_quote_at(text, len)) < len)
		vr_err(err, errlen, -EINVAL,
		       "a single quote at byte %zu (strings take double quotes)", q);
	else if (e == json_tokener_continue)
		vr_err(err, errlen, -EINVAL, "unexpected end of text");
	else if (e != json_tokener_success)
		vr_err(err, errlen, -EINVAL, "%s at byte %zu", json_tokener_error_desc(e), end);
	else if (end < len)
		vr_err(err, errlen, -EINVAL, "more text after the object, at byte %zu", end);
	else if (!json_object_is_type(o, json_type_object))
		vr_err(err, errlen, -EINVAL, "a JSON %s",
		       json_type_to_name(json_object_get_type(o)));
	else if (!all_finite(o))
		vr_err(err, errlen, -EINVAL,
		       "a number that is not finite (NaN, Infinity, or out of range)");
	else if (check_keys_and_strings(text, len, depth, err, errlen) == 0)
		return o;
	json_object_put(o);
	return NULL;
}
