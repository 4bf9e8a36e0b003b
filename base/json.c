/* SPDX-License-Identifier: MIT */
/*
 * Strict JSON through json-c: exactly one object, refusing what json-c 0.16 lets through even
 * in strict mode (single quotes, NaN and Infinity), for the requests of the control socket and
 * the messages of the web viewer's browsers.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include <json-c/json.h>

#include "base.h"

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
	else
		return o;
	json_object_put(o);
	return NULL;
}
