/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness: a browser's text message to the web viewer (clients/view/msg.c,
 * vw_msg_parse) on arbitrary bytes. A message that is not UTF-8 is refused; one accepted has a
 * known type with the fields it needs (set: an object of one or more values; get: a string key
 * or none; ping and every id: a string or an exact finite number); a refusal has a message, and
 * the error the viewer would send for it ({"type": "error", "id", "error"}, cut at 511 bytes as
 * the server cuts it) is valid UTF-8 that parses back as one JSON object.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clients/view/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *msg, const char *detail)
{
	fprintf(stderr, "fuzz_viewmsg: %s%s%s\n", msg, detail ? ": " : "", detail ? detail : "");
	abort();
}

/* A value the browser reads back as it sent it. */
static void check_echoable(struct json_object *v, const char *what)
{
	int64_t i;

	switch (json_object_get_type(v)) {
	case json_type_string:
		if (!vr_utf8_valid(json_object_get_string(v),
		                   (size_t)json_object_get_string_len(v)))
			fail(what, "a string that is not UTF-8");
		return;
	case json_type_double:
		if (!isfinite(json_object_get_double(v)))
			fail(what, "not finite");
		return;
	case json_type_int:
		i = json_object_get_int64(v);
		if (i < -(INT64_C(1) << 53) || i > (INT64_C(1) << 53))
			fail(what, "an integer beyond 2^53");
		return;
	default:
		fail(what, "neither a string nor a number");
	}
}

/* The error message as the server sends it, which a browser must be able to read. */
static void check_error_reply(const char *err, struct json_object *id)
{
	struct json_object *o = json_object_new_object(), *back;
	char msg[512], why[128];
	const char *text;

	vr_utf8_sanitize(err, msg, sizeof(msg));
	json_object_object_add(o, "type", json_object_new_string("error"));
	if (id)
		json_object_object_add(o, "id", json_object_get(id));
	json_object_object_add(o, "error", json_object_new_string(msg));
	text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
	if (!vr_utf8_valid(text, strlen(text)))
		fail("the error sent is not UTF-8", text);
	back = vr_json_parse_object(text, strlen(text), 16, why, sizeof(why));
	if (!back)
		fail("the error sent does not parse back", why);
	json_object_put(back);
	json_object_put(o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size ? size : 1), err[2048];
	struct vw_msg m;
	int rc;

	if (!text)
		return 0;
	memcpy(text, data, size);
	rc = vw_msg_parse(text, size, 16, &m, err, sizeof(err));
	if (rc && rc != -EINVAL)
		fail("an error other than -EINVAL", NULL);
	if (!rc && !vr_utf8_valid(text, size))
		fail("accepted a message that is not UTF-8", NULL);
	if (m.id)
		check_echoable(m.id, "id");
	if (rc) {
		if (!err[0])
			fail("refused without a message", NULL);
		check_error_reply(err, m.id);
		goto out;
	}
	if (!m.root || !json_object_is_type(m.root, json_type_object))
		fail("accepted without an object", NULL);
	switch (m.type) {
	case VW_MSG_SUBSCRIBE:
		if (m.views >> VOLREC_IMAGE_COUNT)
			fail("subscribed to a picture that does not exist", NULL);
		break;
	case VW_MSG_SET:
		if (!m.values || !json_object_is_type(m.values, json_type_object) ||
		    !json_object_object_length(m.values))
			fail("a set without values", NULL);
		break;
	case VW_MSG_GET:
		if (m.key && !json_object_is_type(m.key, json_type_string))
			fail("a get whose key is not a string", NULL);
		break;
	case VW_MSG_PING:
		if (m.t)
			check_echoable(m.t, "t");
		break;
	case VW_MSG_VIEW:
		if (!m.has_pos && !m.has_slab)
			fail("a view that sets neither position nor slab", NULL);
		if ((m.own_pos && !m.has_pos) || (m.own_slab && !m.has_slab))
			fail("a view's own value without its field", NULL);
		if (m.own_pos &&
		    (m.pos[0] == UINT32_MAX || m.pos[1] == UINT32_MAX || m.pos[2] == UINT32_MAX))
			fail("a view position past the largest index", NULL);
		break;
	case VW_MSG_RECORD_START:
	case VW_MSG_RECORD_STOP:
		if (!m.fields || !json_object_is_type(m.fields, json_type_object))
			fail("a record request without its fields", NULL);
		json_object_object_foreach(m.fields, k, v)
		{
			if (m.type == VW_MSG_RECORD_STOP && strcmp(k, "raw"))
				fail("a record_stop field other than raw", NULL);
			if (strcmp(k, "name") && strcmp(k, "raw") && strcmp(k, "epochs") &&
			    strcmp(k, "volumes") && strcmp(k, "seconds"))
				fail("a record_start field the daemon does not take", NULL);
			if (!strcmp(k, "name") && !json_object_is_type(v, json_type_string))
				fail("a record_start name that is not a string", NULL);
			if (!strcmp(k, "raw") && !json_object_is_type(v, json_type_boolean))
				fail("a record raw that is not true or false", NULL);
		}
		break;
	default:
		fail("an unknown type accepted", NULL);
	}
out:
	vw_msg_free(&m);
	free(text);
	return 0;
}
