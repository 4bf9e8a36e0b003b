/* SPDX-License-Identifier: MIT */
/*
 * volrecd's control requests (vrd_ctl.h, docs/control.md): bounded JSON requests, validated
 * exactly like the configuration file (cfg_set_keys). The socket that carries them is
 * vrd_ctl_sock.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/vrd_ctl.h"
#include "daemon/vrd_gen.h"

static char *reply_text(struct json_object *o)
{
	char *s = strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));

	json_object_put(o);
	return s;
}

static struct json_object *reply_new(bool ok, const char *id)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "ok", json_object_new_boolean(ok));
	if (id)
		json_object_object_add(o, "id", json_object_new_string(id));
	return o;
}

/* A refusal {"ok": false, "id", "error"}, to which a caller may add members. */
VR_PRINTF(2, 3) static struct json_object *reply_fail(const char *id, const char *fmt, ...)
{
	char msg[CFG_ERR_MAX], clean[CFG_ERR_MAX];
	struct json_object *o = reply_new(false, id);
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	vr_utf8_sanitize(msg, clean, sizeof(clean));
	json_object_object_add(o, "error", json_object_new_string(clean));
	return o;
}

#define reply_error(...) reply_text(reply_fail(__VA_ARGS__))

/* Whether reply (one JSON object, as every answer makes it) says "ok": false. */
static bool reply_refused(const char *reply)
{
	struct json_object *o = json_tokener_parse(reply), *ok;
	bool refused = o && json_object_object_get_ex(o, "ok", &ok) &&
	               json_object_is_type(ok, json_type_boolean) && !json_object_get_boolean(ok);

	json_object_put(o);
	return refused;
}

/* The YAML text of a set value: a JSON string is YAML text as it stands ("hann", "[20, 90]");
 * any other JSON value is written as JSON, which YAML reads the same. */
static const char *value_text(struct json_object *v)
{
	if (json_object_is_type(v, json_type_string))
		return json_object_get_string(v);
	return json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN);
}

/* {"op": "get", "generation": N}: the live values that made the volumes carrying N. */
static char *get_generation(const struct vrd_ctl_ops *svc, struct json_object *gen, const char *id)
{
	uint32_t current = 0, oldest = 0;
	const char *text;
	struct json_object *o, *values;
	int64_t n;

	if (!json_object_is_type(gen, json_type_int) || (n = json_object_get_int64(gen)) < 1 ||
	    n > UINT32_MAX)
		return reply_error(id, "get: generation must be an integer 1..4294967295 (a "
		                       "volume's generation)");
	if (!svc->generation)
		return reply_error(id, "get: this service keeps no generations");
	text = svc->generation(svc->ctx, (uint32_t)n, &current, &oldest);
	if (!text)
		return reply_error(id,
		                   "get: generation %lld is not kept (kept: %u..%u, the last %d; "
		                   "a refused change leaves its number unused)",
		                   (long long)n, oldest, current, VRD_GEN_HISTORY);
	values = json_tokener_parse(text);
	if (!values)
		return NULL;
	o = reply_new(true, id);
	json_object_object_add(o, "generation", json_object_new_int64(n));
	json_object_object_add(o, "current", json_object_new_int64(current));
	json_object_object_add(o, "values", values);
	return reply_text(o);
}

static char *op_get(const struct vrd_ctl_ops *svc, struct json_object *req, const char *id,
                    const struct vrd_ctl_peer *peer)
{
	const struct vr_config *cfg = svc->config(svc->ctx);
	struct json_object *key, *o;
	char *text = NULL;
	size_t len = 0;
	int rc;

	(void)peer;
	if (json_object_object_get_ex(req, "generation", &key)) {
		if (json_object_object_get_ex(req, "key", NULL))
			return reply_error(id, "get: key and generation exclude each other");
		return get_generation(svc, key, id);
	}
	if (json_object_object_get_ex(req, "key", &key)) {
		char err[CFG_ERR_MAX];

		if (!json_object_is_type(key, json_type_string))
			return reply_error(id, "get: key must be a string (a key path such as "
			                       "preprocess.db_range)");
		rc = cfg_get_key(cfg, json_object_get_string(key), &text, err, sizeof(err));
		if (rc < 0)
			return reply_error(id, "%s", err);
		o = reply_new(true, id);
		json_object_object_add(o, "key", json_object_get(key));
		json_object_object_add(o, "value", json_object_new_string(text));
		free(text);
		return reply_text(o);
	}
	{
		FILE *f = open_memstream(&text, &len);

		if (!f)
			return NULL;
		rc = cfg_dump(cfg, f);
		if (fclose(f) || rc < 0) {
			free(text);
			return reply_error(id, "get: cannot write the configuration");
		}
	}
	o = reply_new(true, id);
	json_object_object_add(o, "config", json_object_new_string_len(text, (int)len));
	free(text);
	return reply_text(o);
}

static char *op_set(const struct vrd_ctl_ops *svc, struct json_object *req, const char *id,
                    const struct vrd_ctl_peer *peer)
{
	const char *paths[VRD_CTL_MAX_KEYS], *values[VRD_CTL_MAX_KEYS];
	char *copies[VRD_CTL_MAX_KEYS], err[CFG_ERR_MAX];
	struct json_object *vals, *o, *applied;
	struct vr_config next;
	size_t n = 0, i;
	bool oom;
	int rc;

	if (!json_object_object_get_ex(req, "values", &vals) ||
	    !json_object_is_type(vals, json_type_object))
		return reply_error(id, "set: values must be an object of key paths and values "
		                       "({\"preprocess.db_range\": [20, 90]})");
	json_object_object_foreach(vals, k, v)
	{
		(void)v;
		if (n == VRD_CTL_MAX_KEYS)
			return reply_error(id, "set: more than %d keys in one request",
			                   VRD_CTL_MAX_KEYS);
		paths[n++] = k;
	}
	if (n == 0)
		return reply_error(id, "set: no keys given");
	/* value_text may return json-c's per-object buffer: copy each before the next call */
	for (i = 0; i < n; i++) {
		copies[i] = strdup(value_text(json_object_object_get(vals, paths[i])));
		if (!copies[i])
			break;
		values[i] = copies[i];
	}
	oom = i < n || cfg_copy(&next, svc->config(svc->ctx)) < 0;
	if (!oom) {
		rc = cfg_set_keys(&next, paths, values, n, err, sizeof(err));
		if (rc == 0)
			rc = svc->apply(svc->ctx, &next, paths, n, peer, err, sizeof(err));
		cfg_free(&next);
	}
	while (i--)
		free(copies[i]);
	if (oom)
		return NULL;
	if (rc == -EBUSY) {
		/* one change at a time: the client may send the same request again shortly */
		o = reply_fail(id, "%s", err);
		json_object_object_add(o, "retry", json_object_new_boolean(true));
		return reply_text(o);
	}
	if (rc < 0)
		return reply_error(id, "%s", err);
	o = reply_new(true, id);
	applied = json_object_new_array();
	for (i = 0; i < n; i++)
		json_object_array_add(applied, json_object_new_string(paths[i]));
	json_object_object_add(o, "applied", applied);
	json_object_object_add(o, "note",
	                       json_object_new_string("runtime change: applied from the next "
	                                              "volume; a reload (SIGHUP) re-reads the file "
	                                              "and drops it"));
	return reply_text(o);
}

static char *op_reset_history(const struct vrd_ctl_ops *svc, struct json_object *req,
                              const char *id, const struct vrd_ctl_peer *peer)
{
	char err[CFG_ERR_MAX];

	if (svc->reset_history(svc->ctx, peer, err, sizeof(err)) < 0)
		return reply_error(id, "%s", err);
	return reply_text(reply_new(true, id));
}

static char *op_status(const struct vrd_ctl_ops *svc, struct json_object *req, const char *id,
                       const struct vrd_ctl_peer *peer)
{
	struct json_object *o = reply_new(true, id), *st = svc->status(svc->ctx);

	(void)req, (void)peer;
	json_object_object_add(o, "status", st ? st : json_object_new_object());
	return reply_text(o);
}

/* The whole number >= 1 of field key of req into *n (0 when absent): 0, or 1 with the error
 * reply in *reply. */
static int count_field(struct json_object *req, const char *key, const char *id, uint64_t *n,
                       char **reply)
{
	struct json_object *v;

	*n = 0;
	if (!json_object_object_get_ex(req, key, &v))
		return 0;
	if (!json_object_is_type(v, json_type_int) || json_object_get_int64(v) < 1) {
		*reply = reply_error(id, "record_start: %s must be a whole number >= 1", key);
		return 1;
	}
	*n = (uint64_t)json_object_get_int64(v);
	return 0;
}

/* record_start: {"raw": true, "name": NAME, "epochs": E | "seconds": S} or {"raw": false,
 * "name": NAME, "volumes": V | "seconds": S}. */
static char *op_record_start(const struct vrd_ctl_ops *svc, struct json_object *req, const char *id,
                             const struct vrd_ctl_peer *peer)
{
	struct json_object *raw, *name, *sec;
	char err[CFG_ERR_MAX], *reply = NULL;
	uint64_t epochs, volumes;
	double seconds = 0;
	bool is_raw, has_sec;

	if (!svc->record_start)
		return reply_error(id, "record_start: not available");
	if (!json_object_object_get_ex(req, "raw", &raw) ||
	    !json_object_is_type(raw, json_type_boolean))
		return reply_error(id,
		                   "record_start: raw must be true (raw spectra into NAME.vrr) or "
		                   "false (the published volumes into NAME.h5)");
	is_raw = json_object_get_boolean(raw);
	if (!json_object_object_get_ex(req, "name", &name) ||
	    !json_object_is_type(name, json_type_string))
		return reply_error(id, "record_start: name must be a string (letters, digits, '-', "
		                       "'_' and '.', not first)");
	if (count_field(req, "epochs", id, &epochs, &reply) ||
	    count_field(req, "volumes", id, &volumes, &reply))
		return reply;
	if (is_raw ? volumes != 0 : epochs != 0)
		return reply_error(id,
		                   "record_start: %s with raw %s (a raw recording counts epochs, "
		                   "a processed one volumes)",
		                   is_raw ? "volumes" : "epochs", is_raw ? "true" : "false");
	has_sec = json_object_object_get_ex(req, "seconds", &sec);
	if (has_sec && (epochs || volumes))
		return reply_error(id,
		                   "record_start: %s and seconds given together (one of them, "
		                   "or neither to record until record_stop)",
		                   is_raw ? "epochs" : "volumes");
	if (has_sec) {
		if ((!json_object_is_type(sec, json_type_int) &&
		     !json_object_is_type(sec, json_type_double)) ||
		    !(json_object_get_double(sec) > 0) || json_object_get_double(sec) > 1e9)
			return reply_error(id, "record_start: seconds must be a number > 0");
		seconds = json_object_get_double(sec);
	}
	if (svc->record_start(svc->ctx, is_raw, json_object_get_string(name),
	                      is_raw ? epochs : volumes, seconds, peer, err, sizeof(err)) < 0)
		return reply_error(id, "%s", err);
	return reply_text(reply_new(true, id));
}

/* record_stop: {} or {"raw": true} stops the raw recording, {"raw": false} the processed one. */
static char *op_record_stop(const struct vrd_ctl_ops *svc, struct json_object *req, const char *id,
                            const struct vrd_ctl_peer *peer)
{
	struct json_object *raw;
	char err[CFG_ERR_MAX];
	bool is_raw = true;

	if (!svc->record_stop)
		return reply_error(id, "record_stop: not available");
	if (json_object_object_get_ex(req, "raw", &raw)) {
		if (!json_object_is_type(raw, json_type_boolean))
			return reply_error(id,
			                   "record_stop: raw must be true (the raw recording, as "
			                   "when it is left out) or false (the processed one)");
		is_raw = json_object_get_boolean(raw);
	}
	if (svc->record_stop(svc->ctx, is_raw, peer, err, sizeof(err)) < 0)
		return reply_error(id, "%s", err);
	return reply_text(reply_new(true, id));
}

/* The ops: each takes op, id, expires_ms and its fields (none, one or several: a list
 * separated by spaces); any other field is refused. */
static const struct {
	const char *name, *field;
	char *(*answer)(const struct vrd_ctl_ops *svc, struct json_object *req, const char *id,
	                const struct vrd_ctl_peer *peer);
} OPS[] = {
        {"get", "key generation", op_get},
        {"set", "values", op_set},
        {"reset_history", NULL, op_reset_history},
        {"status", NULL, op_status},
        {"record_start", "raw name epochs volumes seconds", op_record_start},
        {"record_stop", "raw", op_record_stop},
};

/* Whether k is one of the space-separated fields of list (NULL: none). */
static bool field_known(const char *list, const char *k)
{
	size_t n = strlen(k);

	for (const char *p = list; p && *p;) {
		const char *e = strchr(p, ' ');
		size_t len = e ? (size_t)(e - p) : strlen(p);
		if (len == n && !strncmp(p, k, n))
			return true;
		p = e ? e + 1 : p + len;
	}
	return false;
}

/*
 * A request that carries expires_ms (CLOCK_MONOTONIC milliseconds: the socket is ipc://, on
 * this machine) and is read after it is refused, nothing done, so that a client that gave up
 * waiting knows it was not applied. The refusal, or NULL to go on.
 */
static char *expired(struct json_object *req, const char *id, const char *op)
{
	struct json_object *e, *o;
	double at, now = (double)vr_mono_ns() / 1e6;

	if (!json_object_object_get_ex(req, "expires_ms", &e))
		return NULL;
	if (!json_object_is_type(e, json_type_int) && !json_object_is_type(e, json_type_double))
		return reply_error(id,
		                   "expires_ms: must be a number (CLOCK_MONOTONIC ms), not a "
		                   "JSON %s",
		                   json_type_to_name(json_object_get_type(e)));
	at = json_object_get_double(e);
	if (now <= at)
		return NULL;
	o = reply_fail(id,
	               "%s: expired %.0f ms before volrecd read it (expires_ms %.0f, now %.0f): "
	               "not applied",
	               op, now - at, at, now);
	json_object_object_add(o, "expired", json_object_new_boolean(true));
	return reply_text(o);
}

/*
 * A client that acts for someone else (the web viewer for a browser's token) names them in
 * "via": a string of at most VRD_CTL_VIA_MAX - 1 bytes, kept with its control characters as
 * U+FFFD and its newlines and tabs as spaces, which the log and the event add to the peer's
 * uid. *who is the peer with it; returns the refusal, or NULL to go on.
 */
static char *via_of(struct json_object *req, const char *id, const struct vrd_ctl_peer *peer,
                    struct vrd_ctl_peer *who)
{
	struct json_object *v;
	size_t len;

	*who = *peer;
	who->via[0] = '\0';
	if (!json_object_object_get_ex(req, "via", &v))
		return NULL;
	if (!json_object_is_type(v, json_type_string))
		return reply_error(id,
		                   "via: must be a string (who the request is for), not a JSON %s",
		                   json_type_to_name(json_object_get_type(v)));
	len = (size_t)json_object_get_string_len(v);
	if (len >= sizeof(who->via))
		return reply_error(id, "via: %zu bytes, at most %zu", len, sizeof(who->via) - 1);
	vr_utf8_sanitize(json_object_get_string(v), who->via, sizeof(who->via));
	for (char *p = who->via; *p; p++)
		if (*p == '\n' || *p == '\t')
			*p = ' '; /* one line of the log */
	return NULL;
}

char *vrd_ctl_answer(const struct vrd_ctl_ops *svc, const char *request, size_t len,
                     const struct vrd_ctl_peer *peer, bool *refused)
{
	struct json_object *req, *op, *idv;
	struct vrd_ctl_peer who;
	const char *id = NULL, *name;
	char *reply = NULL, err[CFG_ERR_MAX], shown[68];
	size_t i;

	*refused = true;
	if (len > VRD_CTL_MAX_REQUEST)
		return reply_error(NULL, "request too large (%zu bytes, at most %d)", len,
		                   VRD_CTL_MAX_REQUEST);
	if (!vr_utf8_valid(request, len))
		return reply_error(NULL, "request is not UTF-8 text");
	req = vr_json_parse_object(request, len, VRD_CTL_MAX_DEPTH, err, sizeof(err));
	if (!req)
		return reply_error(NULL, "request is not one JSON object: %s", err);
	if (json_object_object_get_ex(req, "id", &idv)) {
		if (!json_object_is_type(idv, json_type_string)) {
			reply = reply_error(NULL,
			                    "id: must be a string (echoed in the reply), not a "
			                    "JSON %s",
			                    json_type_to_name(json_object_get_type(idv)));
			goto out;
		}
		id = json_object_get_string(idv);
	}
	if (!json_object_object_get_ex(req, "op", &op) ||
	    !json_object_is_type(op, json_type_string)) {
		reply = reply_error(id, "op: missing or not a string (get, set, reset_history, "
		                        "status, record_start or record_stop)");
		goto out;
	}
	name = json_object_get_string(op);
	for (i = 0; i < VR_ARRAY_SIZE(OPS) && strcmp(name, OPS[i].name); i++)
		;
	if (i == VR_ARRAY_SIZE(OPS)) {
		vr_utf8_sanitize(name, shown, sizeof(shown));
		reply = reply_error(id,
		                    "op: '%s' is unknown (get, set, reset_history, status, "
		                    "record_start or record_stop)",
		                    shown);
		goto out;
	}
	json_object_object_foreach(req, k, v)
	{
		(void)v;
		if (strcmp(k, "op") && strcmp(k, "id") && strcmp(k, "expires_ms") &&
		    strcmp(k, "via") && !field_known(OPS[i].field, k)) {
			vr_utf8_sanitize(k, shown, sizeof(shown));
			reply = reply_error(
			        id, "%s: unknown field '%s' (it takes op, id, expires_ms%s%s)",
			        name, shown, OPS[i].field ? " and " : "",
			        OPS[i].field ? OPS[i].field : "");
			goto out;
		}
	}
	reply = via_of(req, id, peer, &who);
	if (!reply)
		reply = expired(req, id, name);
	if (!reply)
		reply = OPS[i].answer(svc, req, id, &who);
out:
	if (reply)
		*refused = reply_refused(reply);
	json_object_put(req);
	return reply;
}
