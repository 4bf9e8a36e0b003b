/* SPDX-License-Identifier: MIT */
/*
 * volrecd's control requests (daemon/vrd_ctl.c) against a stand-in service: get, set (all or
 * none, the configuration file's messages, structural keys refused), reset_history, status,
 * and malformed, oversized and unknown requests answered with an error, never a crash.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/vrd_ctl.h"
#include "tests/unit/vrtest.h"

struct fake {
	struct vr_config cfg;
	int applied, resets;
	uid_t last_uid;
	int fail_apply; /* negative: apply fails with it */
};

static const struct vr_config *f_config(void *ctx)
{
	return &((struct fake *)ctx)->cfg;
}

static int f_apply(void *ctx, const struct vr_config *next, const char *const *paths, size_t n,
                   const struct vrd_ctl_peer *peer, char *err, size_t errlen)
{
	struct fake *f = ctx;

	(void)paths, (void)n;
	if (f->fail_apply)
		return vr_err(err, errlen, f->fail_apply, "service: cannot apply now");
	cfg_free(&f->cfg);
	if (cfg_copy(&f->cfg, next) < 0)
		return -ENOMEM;
	f->applied++;
	f->last_uid = peer->uid;
	return 0;
}

static int f_reset(void *ctx, const struct vrd_ctl_peer *peer, char *err, size_t errlen)
{
	(void)peer, (void)err, (void)errlen;
	((struct fake *)ctx)->resets++;
	return 0;
}

static struct json_object *f_status(void *ctx)
{
	struct json_object *o = json_object_new_object();

	(void)ctx;
	json_object_object_add(o, "volumes_per_s", json_object_new_double(12.5));
	return o;
}

static struct fake F;
static const struct vrd_ctl_ops OPS = {&F, f_config, f_apply, f_reset, f_status, NULL, NULL};
static const struct vrd_ctl_peer PEER = {.have_uid = true, .uid = 1234, .pid = 99};

static int setup(void **state)
{
	(void)state;
	memset(&F, 0, sizeof(F));
	cfg_defaults(&F.cfg);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	cfg_free(&F.cfg);
	return 0;
}

/* The reply to text, parsed; *refused set. */
static struct json_object *ask(const char *text, bool *refused)
{
	char *r = vrd_ctl_answer(&OPS, text, strlen(text), &PEER, refused);
	struct json_object *o;

	assert_non_null(r);
	o = json_tokener_parse(r);
	if (!o)
		fail_msg("reply is not JSON: %s", r);
	free(r);
	return o;
}

static const char *field(struct json_object *o, const char *name)
{
	struct json_object *v;

	if (!json_object_object_get_ex(o, name, &v))
		return NULL;
	return json_object_get_string(v);
}

/* The reply to text, parsed: a refusal when refusal is true, else an acceptance. */
static struct json_object *ask_for(const char *text, bool refusal)
{
	bool refused;
	struct json_object *o = ask(text, &refused);

	if (refused != refusal)
		fail_msg("%s: %s", refused ? "refused" : "not refused",
		         json_object_to_json_string(o));
	return o;
}

/* Ask text and expect a refusal whose error contains fragment. */
static void ask_refused(const char *text, const char *fragment)
{
	struct json_object *o = ask_for(text, true);

	assert_non_null(strstr(field(o, "error"), fragment));
	json_object_put(o);
}

/* Ask each of reqs[0..n) and expect a refusal whose error contains fragment, with no id. */
static void refused_without_id(const char *const *reqs, size_t n, const char *fragment)
{
	for (size_t i = 0; i < n; i++) {
		struct json_object *o = ask_for(reqs[i], true);

		if (!strstr(field(o, "error"), fragment) || json_object_object_get(o, "id"))
			fail_msg("request '%s': reply %s", reqs[i], json_object_to_json_string(o));
		json_object_put(o);
	}
}

static void test_get_one_key_and_the_whole_configuration(void **state)
{
	struct json_object *o;

	(void)state;
	o = ask_for("{\"op\":\"get\",\"key\":\"preprocess.db_range\",\"id\":\"a1\"}", false);
	assert_string_equal(field(o, "value"), "[0, 100]");
	assert_string_equal(field(o, "id"), "a1");
	json_object_put(o);
	o = ask_for("{\"op\":\"get\"}", false);
	assert_non_null(strstr(field(o, "config"), "db_range"));
	json_object_put(o);
	ask_refused("{\"op\":\"get\",\"key\":\"preprocess.nope\"}", "preprocess.nope: unknown key");
}

static void test_get_returns_values_longer_than_4_kib_whole(void **state)
{
	char want[CFG_PATH_MAX + 2];
	struct json_object *o;
	size_t n = sizeof(F.cfg.ipc.run_dir) - 1;

	(void)state;
	memset(F.cfg.ipc.run_dir, 'd', n);
	F.cfg.ipc.run_dir[0] = '/';
	F.cfg.ipc.run_dir[n] = '\0';
	snprintf(want, sizeof(want), "\"%s\"", F.cfg.ipc.run_dir);
	o = ask_for("{\"op\":\"get\",\"key\":\"ipc.run_dir\"}", false);
	assert_string_equal(field(o, "value"), want);
	json_object_put(o);
	o = ask_for("{\"op\":\"get\",\"key\":\"ipc\"}", false);
	assert_non_null(strstr(field(o, "value"), want));
	json_object_put(o);
	o = ask_for("{\"op\":\"get\",\"key\":\"\"}", false);
	assert_non_null(strstr(field(o, "value"), want));
	json_object_put(o);
}

static void test_set_applies_live_keys_with_yaml_or_json_values(void **state)
{
	struct json_object *o;

	(void)state;
	o = ask_for("{\"op\":\"set\",\"values\":{\"preprocess.db_range\":[20,90],"
	            "\"preprocess.window.type\":\"tukey\"}}",
	            false);
	json_object_put(o);
	assert_int_equal(F.applied, 1);
	assert_int_equal(F.last_uid, 1234);
	assert_true(F.cfg.preprocess.db_range[0] == 20 && F.cfg.preprocess.db_range[1] == 90);
	/* a JSON string is YAML text */
	o = ask_for("{\"op\":\"set\",\"values\":{\"preprocess.db_range\":\"[10, 80]\"}}", false);
	json_object_put(o);
	assert_true(F.cfg.preprocess.db_range[0] == 10 && F.cfg.preprocess.db_range[1] == 80);
}

static void test_set_is_all_or_none_with_the_files_messages(void **state)
{
	(void)state;
	ask_refused("{\"op\":\"set\",\"values\":{\"preprocess.db_range\":[20,90],"
	            "\"preprocess.zero_pad\":3}}",
	            "preprocess.zero_pad");
	assert_int_equal(F.applied, 0);
	assert_true(F.cfg.preprocess.db_range[0] == 0 && F.cfg.preprocess.db_range[1] == 100);
	ask_refused("{\"op\":\"set\",\"values\":{\"preprocess.db_range\":[50,50]}}",
	            "preprocess.db_range: [50, 50] is empty");
}

static void test_set_refuses_structural_keys(void **state)
{
	struct json_object *o;

	(void)state;
	o = ask_for("{\"op\":\"set\",\"values\":{\"geometry.stride\":[3,3]}}", true);
	assert_non_null(strstr(field(o, "error"), "geometry.stride"));
	assert_non_null(strstr(field(o, "error"), "reload"));
	json_object_put(o);
	assert_int_equal(F.applied, 0);
}

static void test_service_refusal_is_reported(void **state)
{
	struct json_object *o;

	(void)state;
	F.fail_apply = -EBUSY;
	o = ask_for("{\"op\":\"set\",\"values\":{\"preprocess.db_range\":[20,90]}}", true);
	assert_string_equal(field(o, "error"), "service: cannot apply now");
	assert_true(json_object_get_boolean(json_object_object_get(o, "retry")));
	json_object_put(o);
	/* any other refusal is final: no "retry" */
	F.fail_apply = -ENOMEM;
	o = ask_for("{\"op\":\"set\",\"values\":{\"preprocess.db_range\":[20,90]}}", true);
	assert_null(json_object_object_get(o, "retry"));
	json_object_put(o);
}

static void test_reset_history_and_status(void **state)
{
	struct json_object *o, *st;

	(void)state;
	o = ask_for("{\"op\":\"reset_history\"}", false);
	json_object_put(o);
	assert_int_equal(F.resets, 1);
	o = ask_for("{\"op\":\"status\"}", false);
	assert_true(json_object_object_get_ex(o, "status", &st));
	assert_non_null(json_object_object_get(st, "volumes_per_s"));
	json_object_put(o);
}

static void test_bad_requests_get_error_replies(void **state)
{
	static const struct {
		const char *req, *msg;
	} cases[] = {
	        {"", "not one JSON object"},
	        {"{", "not one JSON object"},
	        {"[1,2]", "not one JSON object: a JSON array"},
	        {"{\"op\":\"get\"} trailing",
	         "not one JSON object: more text after the object, at byte 13"},
	        {"{\"op\":\"get\"}{}", "more text after the object, at byte 12"},
	        {"{'op':'get'}", "not one JSON object: a single quote at byte 1"},
	        {"{\"op\":\"get\",}", "not one JSON object: unexpected character at byte 12"},
	        {"{\"op\":\"set\",\"values\":{\"preprocess.db_range\":[20,90,]}}",
	         "unexpected character"},
	        {"{\"op\":\"set\",\"values\":{\"view.render.every\":NaN}}", "not finite"},
	        {"{}", "op: missing"},
	        {"{\"op\":5}", "op: missing"},
	        {"{\"op\":\"fly\"}", "op: 'fly' is unknown"},
	        {"{\"op\":\"set\"}", "set: values must be an object"},
	        {"{\"op\":\"set\",\"values\":[]}", "set: values must be an object"},
	        {"{\"op\":\"set\",\"values\":{}}", "set: no keys given"},
	        {"{\"op\":\"get\",\"key\":7}", "get: key must be a string"},
	        {"\"\xff\xfe\"", "not UTF-8"},
	};
	bool refused;

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct json_object *o = ask(cases[i].req, &refused);

		if (!refused || !strstr(field(o, "error"), cases[i].msg))
			fail_msg("request '%s': refused %d, reply error '%s', expected '%s'",
			         cases[i].req, refused, field(o, "error"), cases[i].msg);
		json_object_put(o);
	}
	assert_int_equal(F.applied, 0);
}

static void test_duplicate_keys_are_refused_in_any_object(void **state)
{
	(void)state;
	ask_refused("{\"op\":\"set\",\"values\":{\"view.render.every\":\"zzz\","
	            "\"view.render.every\":4}}",
	            "not one JSON object: duplicate key 'view.render.every' at byte 48");
	ask_refused("{\"op\":\"set\",\"op\":\"get\"}", "duplicate key 'op' at byte 12");
	ask_refused("{\"op\":\"get\",\"key\":\"log\",\"key\":\"preprocess\"}",
	            "duplicate key 'key'");
	ask_refused("{\"op\":\"get\",\"id\":\"a\",\"\\u0069d\":\"b\"}", "duplicate key 'id'");
	ask_refused("{\"op\":\"set\",\"values\":{\"preprocess.window\":{\"type\":\"hann\","
	            "\"type\":\"tukey\"}}}",
	            "duplicate key 'type'");
	assert_int_equal(F.applied, 0);
}

static void test_strings_holding_nul_are_refused(void **state)
{
	static const char *const reqs[] = {
	        "{\"op\":\"set\",\"values\":{\"view.render.every\\u0000; rm -rf\":5}}",
	        "{\"op\":\"set\",\"values\":{\"preprocess.window.type\":\"tukey\\u0000x\"}}",
	        "{\"op\":\"get\\u0000xyz\"}",
	        "{\"op\":\"get\",\"key\":\"view.render.every\\u0000junk\"}",
	        "{\"op\":\"status\",\"id\":\"a\\u0000b\"}",
	        "{\"op\\u0000\":\"status\"}",
	};

	(void)state;
	refused_without_id(reqs, VR_ARRAY_SIZE(reqs), "holds U+0000 (NUL)");
	assert_int_equal(F.applied, 0);
}

static void test_unknown_fields_are_refused_per_op(void **state)
{
	(void)state;
	ask_refused("{\"op\":\"get\",\"kye\":\"view.render.every\"}",
	            "get: unknown field 'kye' (it takes op, id, expires_ms and key)");
	ask_refused("{\"op\":\"get\",\"values\":{}}", "get: unknown field 'values'");
	ask_refused("{\"op\":\"set\",\"values\":{\"preprocess.db_range\":[20,90]},\"key\":\"x\"}",
	            "set: unknown field 'key' (it takes op, id, expires_ms and values)");
	ask_refused("{\"op\":\"reset_history\",\"values\":{\"x\":1}}",
	            "reset_history: unknown field 'values' (it takes op, id, expires_ms)");
	ask_refused("{\"id\":\"a\",\"op\":\"status\",\"verbose\":true}",
	            "status: unknown field 'verbose' (it takes op, id, expires_ms)");
	assert_int_equal(F.applied, 0);
	assert_int_equal(F.resets, 0);
}

/* A request read after its expires_ms (CLOCK_MONOTONIC ms) is refused, nothing done; one read
 * in time is answered as usual. */
static void test_a_request_read_after_it_expired_is_not_applied(void **state)
{
	char req[256];
	double now = (double)vr_mono_ns() / 1e6;
	struct json_object *o, *e;

	(void)state;
	snprintf(req, sizeof(req),
	         "{\"op\":\"set\",\"values\":{\"preprocess.db_range\":[20,90]},\"id\":\"s\","
	         "\"expires_ms\":%.0f}",
	         now - 1500);
	o = ask_for(req, true);
	assert_non_null(strstr(field(o, "error"), "set: expired "));
	assert_non_null(strstr(field(o, "error"), "ms before volrecd read it"));
	assert_true(json_object_object_get_ex(o, "expired", &e) && json_object_get_boolean(e));
	assert_string_equal(field(o, "id"), "s");
	json_object_put(o);
	assert_int_equal(F.applied, 0);
	ask_refused("{\"op\":\"reset_history\",\"expires_ms\":1}", "reset_history: expired");
	assert_int_equal(F.resets, 0);
	ask_refused("{\"op\":\"status\",\"expires_ms\":\"soon\"}",
	            "expires_ms: must be a number (CLOCK_MONOTONIC ms), not a JSON string");
	snprintf(req, sizeof(req),
	         "{\"op\":\"set\",\"values\":{\"preprocess.db_range\":[20,90]},"
	         "\"expires_ms\":%.0f}",
	         now + 60000);
	json_object_put(ask_for(req, false));
	assert_int_equal(F.applied, 1);
}

static void test_an_id_that_is_not_a_string_is_refused_and_not_echoed(void **state)
{
	static const char *const reqs[] = {
	        "{\"op\":\"get\",\"id\":5}",
	        "{\"op\":\"reset_history\",\"id\":null}",
	        "{\"op\":\"status\",\"id\":[\"a\"]}",
	        "{\"id\":{\"x\":\"a\"},\"op\":\"get\"}",
	};

	(void)state;
	refused_without_id(reqs, VR_ARRAY_SIZE(reqs),
	                   "id: must be a string (echoed in the reply), not a JSON ");
	assert_int_equal(F.resets, 0);
}

static void test_oversized_and_deep_requests_are_refused(void **state)
{
	size_t n = VRD_CTL_MAX_REQUEST + 10, depth = 10000;
	char *big = malloc(n + 1), *deep = malloc(2 * depth + 1);
	bool refused;
	char *r;

	(void)state;
	memset(big, ' ', n);
	big[n] = '\0';
	r = vrd_ctl_answer(&OPS, big, n, &PEER, &refused);
	assert_true(refused);
	assert_non_null(strstr(r, "request too large"));
	free(r);
	memset(deep, '[', depth);
	memset(deep + depth, ']', depth);
	deep[2 * depth] = '\0';
	r = vrd_ctl_answer(&OPS, deep, 2 * depth, &PEER, &refused);
	assert_true(refused);
	assert_non_null(strstr(r, "not one JSON object"));
	free(r);
	free(big);
	free(deep);
}

static void test_set_with_too_many_keys_is_refused(void **state)
{
	char req[8192];
	size_t len = (size_t)snprintf(req, sizeof(req), "{\"op\":\"set\",\"values\":{");

	(void)state;
	for (int i = 0; i <= VRD_CTL_MAX_KEYS; i++)
		len += (size_t)snprintf(req + len, sizeof(req) - len, "%s\"k%d\":1", i ? "," : "",
		                        i);
	snprintf(req + len, sizeof(req) - len, "}}");
	ask_refused(req, "more than");
}

VR_TEST_GROUP(ctl)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(test_get_one_key_and_the_whole_configuration, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(test_get_returns_values_longer_than_4_kib_whole,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(test_set_applies_live_keys_with_yaml_or_json_values,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(test_set_is_all_or_none_with_the_files_messages,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(test_set_refuses_structural_keys, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_service_refusal_is_reported, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_reset_history_and_status, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_bad_requests_get_error_replies, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(test_duplicate_keys_are_refused_in_any_object,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(test_strings_holding_nul_are_refused, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(test_unknown_fields_are_refused_per_op, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(test_a_request_read_after_it_expired_is_not_applied,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(
	                test_an_id_that_is_not_a_string_is_refused_and_not_echoed, setup, teardown),
	        cmocka_unit_test_setup_teardown(test_oversized_and_deep_requests_are_refused, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(test_set_with_too_many_keys_is_refused, setup,
	                                        teardown),
	};
	return cmocka_run_group_tests_name("ctl", tests, NULL, NULL);
}
