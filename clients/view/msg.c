/* SPDX-License-Identifier: MIT */
/*
 * A browser's text message, parsed and checked before the server acts on it (docs/viewer.md,
 * the WebSocket protocol): one strict JSON object of UTF-8 text with a known type and its
 * fields. Pure, so that it is fuzzed without a server (tests/fuzz/fuzz_viewmsg.c).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "clients/view/internal.h"

#define VW_EXACT_INT (INT64_C(1) << 53) /* integers JavaScript's numbers hold exactly */

/* Whether a value the browser sent may be echoed into JSON that the browser's JSON.parse reads
 * back as it was: a UTF-8 string, a finite number, an integer JavaScript holds exactly. */
static bool echoable(struct json_object *v)
{
	int64_t i;

	switch (json_object_get_type(v)) {
	case json_type_string:
		return vr_utf8_valid(json_object_get_string(v),
		                     (size_t)json_object_get_string_len(v));
	case json_type_double:
		return isfinite(json_object_get_double(v));
	case json_type_int:
		i = json_object_get_int64(v); /* a uint64 past INT64_MAX reads INT64_MAX */
		return i >= -VW_EXACT_INT && i <= VW_EXACT_INT;
	default:
		return false;
	}
}

static int parse_subscribe(struct vw_msg *m, char *err, size_t errlen)
{
	struct json_object *views;

	if (!json_object_object_get_ex(m->root, "views", &views) ||
	    !json_object_is_type(views, json_type_array))
		return vr_err(err, errlen, -EINVAL,
		              "subscribe: views: need an array of picture names");
	m->views = 0;
	for (size_t i = 0; i < json_object_array_length(views); i++) {
		struct json_object *v = json_object_array_get_idx(views, i);
		int k = json_object_is_type(v, json_type_string)
		                ? vw_kind_from_name(json_object_get_string(v))
		                : -1;

		if (k < 0)
			return vr_err(err, errlen, -EINVAL,
			              "subscribe: views[%zu]: unknown picture %s (enface_mean, "
			              "enface_max, bscan, slice, plane, render, volume, "
			              "angio_enface_mean, angio_enface_max, angio_bscan, "
			              "doppler_enface_mean, doppler_enface_max, doppler_bscan)",
			              i, json_object_to_json_string(v));
		m->views |= 1u << k;
	}
	return 0;
}

/* record_start {name, raw, epochs | volumes | seconds} and record_stop {raw}: the fields' shape
 * only (the daemon checks their values, docs/control.md), copied into m->fields for the
 * request. */
static int parse_record(struct vw_msg *m, bool start, char *err, size_t errlen)
{
	const char *op = start ? "record_start" : "record_stop";

	m->type = start ? VW_MSG_RECORD_START : VW_MSG_RECORD_STOP;
	m->fields = json_object_new_object();
	if (!m->fields)
		return vr_err(err, errlen, -ENOMEM, "%s: out of memory", op);
	json_object_object_foreach(m->root, k, v)
	{
		json_type t = json_object_get_type(v);
		bool ok;

		if (!strcmp(k, "type") || !strcmp(k, "id"))
			continue;
		if (!strcmp(k, "raw"))
			ok = t == json_type_boolean;
		else if (!start)
			return vr_err(err, errlen, -EINVAL,
			              "record_stop: unknown field '%.64s' (raw)", k);
		else if (!strcmp(k, "name"))
			ok = t == json_type_string;
		else if (!strcmp(k, "epochs") || !strcmp(k, "volumes"))
			ok = t == json_type_int;
		else if (!strcmp(k, "seconds"))
			ok = t == json_type_int || t == json_type_double;
		else
			return vr_err(err, errlen, -EINVAL,
			              "record_start: unknown field '%.64s' (name, raw, epochs, "
			              "volumes, seconds)",
			              k);
		if (!ok)
			return vr_err(err, errlen, -EINVAL, "%s: %s: need %s", op, k,
			              !strcmp(k, "name")      ? "a string"
			              : !strcmp(k, "raw")     ? "true or false"
			              : !strcmp(k, "seconds") ? "a number"
			                                      : "a whole number");
		json_object_object_add(m->fields, k, json_object_get(v));
	}
	return 0;
}

/* A whole number 0 .. UINT32_MAX-1 into *out. */
static bool index_of(struct json_object *v, uint32_t *out)
{
	int64_t i;

	if (!json_object_is_type(v, json_type_int))
		return false;
	i = json_object_get_int64(v);
	if (i < 0 || i >= (int64_t)UINT32_MAX)
		return false;
	*out = (uint32_t)i;
	return true;
}

/* view {position: [y0, x0, z0] | null, slab: [za, zb] | null}: this browser's own crosshair
 * and slab (null: the daemon's again); the server checks them against the volume. */
static int parse_view(struct vw_msg *m, char *err, size_t errlen)
{
	m->type = VW_MSG_VIEW;
	json_object_object_foreach(m->root, k, v)
	{
		bool pos = !strcmp(k, "position");
		size_t n = pos ? 3 : 2;
		uint32_t *dst = pos ? m->pos : m->slab;

		if (!strcmp(k, "type") || !strcmp(k, "id"))
			continue;
		if (!pos && strcmp(k, "slab"))
			return vr_err(err, errlen, -EINVAL,
			              "view: unknown field '%.64s' (position, slab)", k);
		*(pos ? &m->has_pos : &m->has_slab) = true;
		if (!v)
			continue; /* null: the daemon's */
		if (!json_object_is_type(v, json_type_array) || json_object_array_length(v) != n)
			return vr_err(err, errlen, -EINVAL, "view: %s: need %s or null", k,
			              pos ? "[y0, x0, z0]" : "[za, zb]");
		for (size_t i = 0; i < n; i++)
			if (!index_of(json_object_array_get_idx(v, i), &dst[i]))
				return vr_err(err, errlen, -EINVAL,
				              "view: %s[%zu]: need a whole number from 0", k, i);
		*(pos ? &m->own_pos : &m->own_slab) = true;
	}
	if (!m->has_pos && !m->has_slab)
		return vr_err(err, errlen, -EINVAL,
		              "view: need position [y0, x0, z0] or slab [za, zb] (or null for the "
		              "daemon's)");
	return 0;
}

int vw_msg_parse(const char *text, size_t len, int depth, struct vw_msg *m, char *err,
                 size_t errlen)
{
	char why[128], shown[65]; /* a type's first 64 bytes, cut at a character */
	struct json_object *type, *id = NULL;
	const char *t;

	memset(m, 0, sizeof(*m));
	m->root = vr_json_parse_object(text, len, depth, why, sizeof(why));
	if (!vr_utf8_valid(text, len)) {
		/* refused here: the daemon's error could not say whose request it was */
		if (m->root && json_object_object_get_ex(m->root, "id", &id) && echoable(id))
			m->id = id;
		return vr_err(err, errlen, -EINVAL, "message: not valid UTF-8 text");
	}
	if (!m->root)
		return vr_err(err, errlen, -EINVAL, "message: not a JSON object: %s", why);
	if (json_object_object_get_ex(m->root, "id", &id) && !echoable(id))
		return vr_err(err, errlen, -EINVAL,
		              "message: id: need a string or a finite number (an integer within "
		              "+-2^53)");
	m->id = id;
	if (!json_object_object_get_ex(m->root, "type", &type) ||
	    !json_object_is_type(type, json_type_string))
		return vr_err(err, errlen, -EINVAL,
		              "message: type: missing or not a string (subscribe, view, set, get, "
		              "ping, record_start, record_stop)");
	t = json_object_get_string(type);
	if (!strcmp(t, "subscribe")) {
		m->type = VW_MSG_SUBSCRIBE;
		return parse_subscribe(m, err, errlen);
	}
	if (!strcmp(t, "ping")) {
		m->type = VW_MSG_PING;
		if (json_object_object_get_ex(m->root, "t", &m->t) && !echoable(m->t)) {
			m->t = NULL;
			return vr_err(err, errlen, -EINVAL,
			              "ping: t: need a string or a finite number (an integer "
			              "within +-2^53)");
		}
		return 0;
	}
	if (!strcmp(t, "set")) {
		m->type = VW_MSG_SET;
		if (!json_object_object_get_ex(m->root, "values", &m->values) ||
		    !json_object_is_type(m->values, json_type_object) ||
		    !json_object_object_length(m->values)) {
			m->values = NULL;
			return vr_err(err, errlen, -EINVAL,
			              "set: values: need an object of one or more keys, e.g. "
			              "{\"view.position\": [10, 20, 30]}");
		}
		return 0;
	}
	if (!strcmp(t, "record_start") || !strcmp(t, "record_stop"))
		return parse_record(m, !strcmp(t, "record_start"), err, errlen);
	if (!strcmp(t, "view"))
		return parse_view(m, err, errlen);
	if (!strcmp(t, "get")) {
		m->type = VW_MSG_GET;
		if (json_object_object_get_ex(m->root, "key", &m->key) &&
		    !json_object_is_type(m->key, json_type_string)) {
			m->key = NULL;
			return vr_err(err, errlen, -EINVAL, "get: key: need a string");
		}
		return 0;
	}
	vr_utf8_sanitize(t, shown, sizeof(shown));
	return vr_err(err, errlen, -EINVAL,
	              "message: unknown type '%s' (subscribe, view, set, get, ping, "
	              "record_start, record_stop)",
	              shown);
}

void vw_msg_free(struct vw_msg *m)
{
	json_object_put(m->fields);
	json_object_put(m->root);
	memset(m, 0, sizeof(*m));
}
