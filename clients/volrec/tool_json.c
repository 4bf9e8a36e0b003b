/* SPDX-License-Identifier: MIT */
/*
 * Reading the daemon's status and event messages (docs/operations.md) with json-c: dotted paths
 * into the parsed object, and strings made safe to print.
 */
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "clients/volrec/tools.h"

struct json_object *tool_json_parse(const char *text, size_t len, char *err, size_t errlen)
{
	return vr_json_parse_object(text, len, JSON_TOKENER_DEFAULT_DEPTH, err, errlen);
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
