/* SPDX-License-Identifier: MIT */
/*
 * Reading the daemon's status and event messages (docs/operations.md) with json-c: dotted paths
 * into the parsed object, and strings made safe to print.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "tools.h"

struct json_object *tool_json_parse(const char *text, size_t len, char *err, size_t errlen)
{
	struct json_tokener *tok;
	struct json_object *o;
	size_t end;

	if (len > (size_t)INT32_MAX) {
		vr_err(err, errlen, -EINVAL, "message of %zu bytes is too long", len);
		return NULL;
	}
	tok = json_tokener_new();
	if (!tok) {
		vr_err(err, errlen, -ENOMEM, "out of memory");
		return NULL;
	}
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
	o = json_tokener_parse_ex(tok, text, (int)len);
	end = json_tokener_get_parse_end(tok);
	if (!o || json_tokener_get_error(tok) != json_tokener_success) {
		enum json_tokener_error e = json_tokener_get_error(tok);

		vr_err(err, errlen, -EINVAL, "malformed JSON at byte %zu: %s", end,
		       e == json_tokener_continue ? "unexpected end" : json_tokener_error_desc(e));
		json_object_put(o);
		json_tokener_free(tok);
		return NULL;
	}
	json_tokener_free(tok);
	while (end < len && strchr(" \t\r\n", text[end]))
		end++;
	if (end < len || !json_object_is_type(o, json_type_object)) {
		vr_err(err, errlen, -EINVAL, "malformed message at byte %zu: %s", end,
		       end < len ? "text after the JSON object" : "not a JSON object");
		json_object_put(o);
		return NULL;
	}
	return o;
}

struct json_object *tool_json_at(struct json_object *o, const char *path)
{
	const char *p = path;

	while (o && *p) {
		const char *dot = strchr(p, '.');
		size_t n = dot ? (size_t)(dot - p) : strlen(p);
		char key[128];

		if (n >= sizeof(key))
			return NULL;
		memcpy(key, p, n);
		key[n] = '\0';
		if (json_object_is_type(o, json_type_object)) {
			if (!json_object_object_get_ex(o, key, &o))
				return NULL;
		} else if (json_object_is_type(o, json_type_array)) {
			char *end;
			unsigned long i = strtoul(key, &end, 10);

			if (!n || *end || i >= json_object_array_length(o))
				return NULL;
			o = json_object_array_get_idx(o, i);
		} else {
			return NULL;
		}
		p += n + (dot ? 1 : 0);
	}
	return o;
}

double tool_json_num(struct json_object *o, const char *path, double def)
{
	struct json_object *v = tool_json_at(o, path);

	if (json_object_is_type(v, json_type_double) || json_object_is_type(v, json_type_int))
		return json_object_get_double(v);
	return def;
}

uint64_t tool_json_u64(struct json_object *o, const char *path, uint64_t def)
{
	struct json_object *v = tool_json_at(o, path);

	if (!json_object_is_type(v, json_type_int))
		return def;
	/* json-c keeps integers above INT64_MAX as unsigned; a negative one is not a u64 */
	if (json_object_get_int64(v) < 0)
		return def;
	return json_object_get_uint64(v);
}

bool tool_json_bool(struct json_object *o, const char *path, bool def)
{
	struct json_object *v = tool_json_at(o, path);

	return json_object_is_type(v, json_type_boolean) ? json_object_get_boolean(v) : def;
}

bool tool_json_str(struct json_object *o, const char *path, char *buf, size_t len)
{
	struct json_object *v = tool_json_at(o, path);

	buf[0] = '\0';
	if (!json_object_is_type(v, json_type_string))
		return false;
	vr_utf8_sanitize(json_object_get_string(v), buf, len);
	return true;
}
