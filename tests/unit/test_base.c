/* SPDX-License-Identifier: MIT */
/* The base layer: error text, percentiles, the sample window, UTF-8 checks, strict JSON, option
 * values. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include <json-c/json.h>

#include "base/base.h"
#include "tests/unit/vrtest.h"

static void test_err_returns_code_and_writes_message(void **state)
{
	char err[64];

	(void)state;
	assert_int_equal(vr_err(err, sizeof(err), -EINVAL, "bad %s", "thing"), -EINVAL);
	assert_string_equal(err, "bad thing");
	assert_int_equal(vr_err_errno(err, sizeof(err), -ENOENT, "open %s", "x"), -ENOENT);
	assert_string_equal(err, "open x: No such file or directory");
	vr_err_prefix(err, sizeof(err), "replay %d", 3);
	assert_string_equal(err, "replay 3: open x: No such file or directory");
	assert_int_equal(vr_err(NULL, 0, -EIO, "ignored"), -EIO);
}

static void test_percentile_nearest_rank(void **state)
{
	double v[] = {5, 1, 4, 2, 3, 10, 9, 8, 7, 6};

	(void)state;
	assert_true(vr_percentile(v, 10, 50) == 5.0);
	assert_true(vr_percentile(v, 10, 99) == 10.0);
	assert_true(vr_percentile(v, 10, 0) == 1.0);
	assert_true(vr_percentile(v, 10, 10) == 1.0);
	assert_true(vr_percentile(v, 10, 11) == 2.0);
	assert_true(isnan(vr_percentile(v, 0, 50)));
}

static void test_window_keeps_the_latest_samples(void **state)
{
	static struct vr_window w;
	const double p[] = {50, 99, 100};
	double out[3];

	(void)state;
	vr_window_percentiles(&w, p, out, 3);
	assert_true(isnan(out[0]) && isnan(out[2]));
	for (int i = 0; i < 3 * VR_WINDOW_SAMPLES; i++)
		vr_window_add(&w, i < 2 * VR_WINDOW_SAMPLES ? 1000.0 : (double)(i % 100));
	vr_window_percentiles(&w, p, out, 3);
	assert_int_equal(w.n, VR_WINDOW_SAMPLES);
	assert_true(out[2] == 99.0);
	assert_true(out[0] >= 48.0 && out[0] <= 51.0);
	vr_window_add(&w, NAN);
	vr_window_add(&w, -5.0);
	vr_window_percentiles(&w, p, out, 1);
	assert_true(out[0] <= 51.0);
}

static void test_utf8_validity(void **state)
{
	(void)state;
	assert_true(vr_utf8_valid("plain", 5));
	{
		const char *s = "\xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80";
		assert_true(vr_utf8_valid(s, strlen(s)));
		assert_false(vr_utf8_valid(s, strlen(s) - 1)); /* cut inside the last character */
	}
	assert_false(vr_utf8_valid("\xff", 1));
	assert_false(vr_utf8_valid("\xc3", 1));             /* truncated */
	assert_false(vr_utf8_valid("\xc0\xaf", 2));         /* overlong */
	assert_false(vr_utf8_valid("\xed\xa0\x80", 3));     /* surrogate */
	assert_false(vr_utf8_valid("\xf4\x90\x80\x80", 4)); /* past U+10FFFF */
}

static void test_utf8_sanitize_replaces_bad_bytes(void **state)
{
	char out[32];

	(void)state;
	assert_int_equal(vr_utf8_sanitize("ok \xc3\xa9", out, sizeof(out)), 0);
	assert_string_equal(out, "ok \xc3\xa9");
	assert_int_equal(vr_utf8_sanitize("a\xff"
	                                  "b\x01",
	                                  out, sizeof(out)),
	                 2);
	assert_string_equal(out, "a\xef\xbf\xbd"
	                         "b\xef\xbf\xbd");
	assert_true(vr_utf8_valid(out, strlen(out)));
	/* truncation never splits a character */
	assert_int_equal(vr_utf8_sanitize("\xc3\xa9\xc3\xa9", out, 4), 0);
	assert_string_equal(out, "\xc3\xa9");
	/* DEL and the C1 controls (CSI U+009B: a terminal's ESC [) are control characters too
	 * (found by tests/fuzz/fuzz_text); U+00A0 is not */
	assert_int_equal(vr_utf8_sanitize("a\x7f"
	                                  "b\xc2\x9b"
	                                  "31m\xc2\xa0",
	                                  out, sizeof(out)),
	                 2);
	assert_string_equal(out, "a\xef\xbf\xbd"
	                         "b\xef\xbf\xbd"
	                         "31m\xc2\xa0");
}

/* The raster of docs/algorithms.md: x fastest, one cycle every sx * sy epochs. */
static void test_scan_offset_rasters_over_the_strides(void **state)
{
	static const struct {
		uint64_t epoch;
		uint32_t sx, sy, ox, oy;
	} t[] = {
	        {0, 5, 5, 0, 0},  {1, 5, 5, 1, 0},  {7, 5, 5, 2, 1},
	        {24, 5, 5, 4, 4}, {25, 5, 5, 0, 0}, {0, 3, 2, 0, 0},
	        {4, 3, 2, 1, 1},  {5, 3, 2, 2, 1},  {6 * 1000003ull + 5, 3, 2, 2, 1},
	        {7, 1, 1, 0, 0},  {7, 0, 0, 0, 0},
	};
	uint32_t ox, oy;

	(void)state;
	for (size_t i = 0; i < VR_ARRAY_SIZE(t); i++) {
		vr_scan_offset(t[i].epoch, t[i].sx, t[i].sy, &ox, &oy);
		assert_int_equal(ox, t[i].ox);
		assert_int_equal(oy, t[i].oy);
	}
}

static void test_option_values_are_strict(void **state)
{
	uint64_t u = 7;
	double s = 7;

	(void)state;
	assert_int_equal(vr_parse_u64("16", 1, 16, &u), 0);
	assert_int_equal(u, 16);
	assert_int_equal(vr_parse_u64("17", 1, 16, &u), -EINVAL);
	assert_int_equal(vr_parse_u64("0", 1, 16, &u), -EINVAL);
	assert_int_equal(vr_parse_u64("+3", 1, 16, &u), -EINVAL);
	assert_int_equal(vr_parse_u64("-3", 0, UINT64_MAX, &u), -EINVAL);
	assert_int_equal(vr_parse_u64("3x", 1, 16, &u), -EINVAL);
	assert_int_equal(vr_parse_u64(" 3", 1, 16, &u), -EINVAL);
	assert_int_equal(vr_parse_u64("", 0, 16, &u), -EINVAL);
	assert_int_equal(vr_parse_u64("18446744073709551616", 0, UINT64_MAX, &u), -EINVAL);
	assert_int_equal(u, 16);
	assert_int_equal(vr_parse_seconds("0.25", false, &s), 0);
	assert_true(s == 0.25);
	assert_int_equal(vr_parse_seconds("0", false, &s), -EINVAL);
	assert_int_equal(vr_parse_seconds("0", true, &s), 0);
	assert_true(s == 0);
	assert_int_equal(vr_parse_seconds("-1", true, &s), -EINVAL);
	assert_int_equal(vr_parse_seconds("nan", true, &s), -EINVAL);
	assert_int_equal(vr_parse_seconds("1e8", true, &s), -EINVAL);
	assert_int_equal(vr_parse_seconds("2s", true, &s), -EINVAL);
	assert_int_equal(vr_parse_seconds("1e7", true, &s), 0);
	assert_true(s == 1e7);
	assert_int_equal(vr_parse_seconds(".5", false, &s), 0);
	assert_true(s == 0.5);
	/* strtod's other spellings are not a number of seconds */
	assert_int_equal(vr_parse_seconds(" 5", true, &s), -EINVAL);
	assert_int_equal(vr_parse_seconds("+5", true, &s), -EINVAL);
	assert_int_equal(vr_parse_seconds("0x10", true, &s), -EINVAL);
	assert_int_equal(vr_parse_seconds("inf", true, &s), -EINVAL);
	assert_int_equal(vr_parse_seconds("", true, &s), -EINVAL);
	assert_true(s == 0.5);
}

static void test_ordinal_lists(void **state)
{
	int v[3] = {-1, -1, -1};
	unsigned n = 9;

	(void)state;
	assert_int_equal(vr_parse_ordinals("0,1,1", 255, v, 3, &n), 0);
	assert_int_equal(n, 3);
	assert_int_equal(v[0], 0);
	assert_int_equal(v[1], 1);
	assert_int_equal(v[2], 1);
	assert_int_equal(vr_parse_ordinals("7", 255, v, 3, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(v[0], 7);
	n = 9;
	/* too many, out of range, empty items, signs, junk: refused, n untouched */
	assert_int_equal(vr_parse_ordinals("0,1,2,3", 255, v, 3, &n), -EINVAL);
	assert_int_equal(vr_parse_ordinals("256", 255, v, 3, &n), -EINVAL);
	assert_int_equal(vr_parse_ordinals("", 255, v, 3, &n), -EINVAL);
	assert_int_equal(vr_parse_ordinals("0,", 255, v, 3, &n), -EINVAL);
	assert_int_equal(vr_parse_ordinals(",0", 255, v, 3, &n), -EINVAL);
	assert_int_equal(vr_parse_ordinals("0,,1", 255, v, 3, &n), -EINVAL);
	assert_int_equal(vr_parse_ordinals("-1", 255, v, 3, &n), -EINVAL);
	assert_int_equal(vr_parse_ordinals("+1", 255, v, 3, &n), -EINVAL);
	assert_int_equal(vr_parse_ordinals("1x", 255, v, 3, &n), -EINVAL);
	assert_int_equal(vr_parse_ordinals("0, 1", 255, v, 3, &n), -EINVAL);
	assert_int_equal(n, 9);
}

static void test_pacer_schedules_and_restarts(void **state)
{
	struct vr_pacer p;
	uint64_t due, now;

	(void)state;
	vr_pacer_init(&p, 0, 4); /* unpaced: every item due at once */
	vr_pacer_start(&p);
	assert_int_equal(vr_pacer_due(&p, 0, &due), 0);
	assert_int_equal(due, 0);
	assert_int_equal(vr_pacer_due_in(&p), 0);

	vr_pacer_init(&p, 1, 4); /* 1 s a period, 4 s of slack */
	assert_int_equal(p.period_ns, 1000000000);
	assert_int_equal(p.slack_ns, 4000000000);
	vr_pacer_start(&p);
	now = vr_mono_ns();
	assert_int_equal(vr_pacer_due(&p, 0, &due), -ETIMEDOUT); /* due in ~1 s */
	assert_int_equal(vr_pacer_due(&p, -1, &due), 0);
	assert_true(due > now && due <= p.t0 + p.period_ns);
	assert_true(vr_pacer_due_in(&p) > 0);
	/* far behind the schedule: it restarts, the item is due at once */
	p.t0 -= 10 * p.period_ns;
	now = vr_mono_ns();
	assert_int_equal(vr_pacer_due(&p, 0, &due), 0);
	assert_true(due >= now && due <= vr_mono_ns());
	vr_pacer_done(&p);
	assert_int_equal(p.n, 1);

	/* any positive rate paces: a period beyond the longest one is that long (1e-12 items a
	 * second used to overflow the period to 0 and run unpaced) */
	const double tiny[] = {1e-12, 5e-324, 1e-9};
	for (size_t i = 0; i < VR_ARRAY_SIZE(tiny); i++) {
		vr_pacer_init(&p, tiny[i], 1u << 20);
		assert_int_equal(p.period_ns, VR_PACER_MAX_NS);
		assert_int_equal(p.slack_ns, VR_PACER_MAX_NS);
		vr_pacer_start(&p);
		assert_int_equal(vr_pacer_due(&p, 0, &due), -ETIMEDOUT);
		assert_true(vr_pacer_due_in(&p) > VR_PACER_MAX_NS / 2);
		p.n = UINT64_MAX / 2; /* the due time saturates instead of wrapping round */
		assert_int_equal(vr_pacer_due(&p, 0, &due), -ETIMEDOUT);
		assert_true(vr_pacer_due_in(&p) > VR_PACER_MAX_NS / 2);
	}
}

/* vr_json_parse_object refuses text with the message fragment want; NULL want: accepts it. */
static void assert_json(const char *text, const char *want)
{
	char err[128] = "";
	struct json_object *o = vr_json_parse_object(text, strlen(text), 4, err, sizeof(err));

	if (want && (o || !strstr(err, want)))
		fail_msg("'%s': %s '%s', expected a refusal with '%s'", text,
		         o ? "accepted" : "refused with", err, want);
	if (!want && !o)
		fail_msg("'%s': refused with '%s', expected it accepted", text, err);
	json_object_put(o);
}

static void test_json_is_one_strict_object(void **state)
{
	(void)state;
	assert_json("{\"a\": [1, {\"b\": \"it's\"}]} \r\n", NULL);
	assert_json("", "unexpected end of text");
	assert_json("{\"a\":1", "unexpected end of text");
	assert_json("[1]", "a JSON array");
	assert_json("{\"a\":1,}", "unexpected character at byte 7");
	assert_json("{\"a\":[1,]}", "unexpected character at byte 8");
	assert_json("{\"a\":1} x", "more text after the object, at byte 8");
	assert_json("{\"a\":1}{}", "more text after the object, at byte 7");
	assert_json("{'a':1}", "a single quote at byte 1");
	assert_json("{\"a\":NaN}", "not finite");
	assert_json("{\"a\":[-Infinity]}", "not finite");
	assert_json("{\"a\":1e999}", "not finite");
	assert_json("{\"a\":[[[[1]]]]}", "nesting too deep at byte 8");
	assert_json("{\"a\":'x'}", "a single quote at byte 5");
}

static void test_json_refuses_duplicate_keys_and_nul_in_strings(void **state)
{
	(void)state;
	assert_json("{\"a\":1,\"a\":2}", "duplicate key 'a' at byte 7 (each key once)");
	assert_json("{\"a\":1,\"\\u0061\":2}", "duplicate key 'a' at byte 7");
	assert_json("{\"b\":1,\"c\":[{\"b\":2,\"b\":3}]}", "duplicate key 'b' at byte 19");
	/* the same key in different objects, and a key equal to a value, are fine */
	assert_json("{\"b\":{\"b\":1},\"c\":[{\"b\":2},{\"b\":\"b\"}],\"d\":\"b\"}", NULL);
	assert_json("{\"a\\u0000b\":1}", "the key at byte 1 holds U+0000 (NUL) after 'a'");
	assert_json("{\"a\":[\"x\\u0000\"]}", "the string at byte 6 holds U+0000 (NUL) after 'x'");
	assert_json("{\"a\":\"\\u00e9\\n\\\"\"}", NULL);
	/* raw control characters: json-c takes them, JSON does not */
	assert_json("{\"a\":\"x\ty\"}",
	            "the string at byte 5 holds a raw control character U+0009 at byte 7");
	assert_json("{\"a\nb\":1}", "the key at byte 1 holds a raw control character U+000A");
	assert_json("{\"a\":[\"\x1f\"]}", "U+001F at byte 7 (JSON wants it escaped: \\u001F)");
	/* a raw NUL byte inside a string, unescaped: json-c's text ends there */
	static const char raw[] = "{\"a\":\"x\0y\"}";
	char err[128] = "";
	struct json_object *o = vr_json_parse_object(raw, sizeof(raw) - 1, 4, err, sizeof(err));
	assert_null(o);
	assert_non_null(strstr(err, "unexpected end of data at byte 8"));
}

static void test_json_refuses_unpaired_surrogate_escapes(void **state)
{
	(void)state;
	/* a pair is one character (U+1F600), in either case */
	assert_json("{\"a\":\"\\ud83d\\ude00\"}", NULL);
	assert_json("{\"a\":[\"x\\uD83D\\uDE00y\"]}", NULL);
	assert_json("{\"a\":\"\\ufffd\\ud7ff\\ue000\"}", NULL);
	/* an escaped backslash before a 'u' is no escape */
	assert_json("{\"a\":\"\\\\ud800\"}", NULL);
	/* json-c would read each of these as U+FFFD: the string would not be the one sent */
	assert_json("{\"a\":\"\\ud800\"}", "the string at byte 5 holds an unpaired surrogate "
	                                   "\\ud800 at byte 6");
	assert_json("{\"a\":\"x\\uDC00\\ud83d\"}", "unpaired surrogate \\uDC00 at byte 7");
	assert_json("{\"a\":\"\\ud83d\\u0041\"}", "unpaired surrogate \\ud83d at byte 6");
	assert_json("{\"a\":\"\\ud83d\\ud83d\\ude00\"}", "unpaired surrogate \\ud83d at byte 6");
	assert_json("{\"a\":\"\\ud83d\\n\"}", "unpaired surrogate \\ud83d at byte 6");
	assert_json("{\"\\udfff\":1}", "the key at byte 1 holds an unpaired surrogate \\udfff");
}

VR_TEST_GROUP(base)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_err_returns_code_and_writes_message),
	        cmocka_unit_test(test_percentile_nearest_rank),
	        cmocka_unit_test(test_window_keeps_the_latest_samples),
	        cmocka_unit_test(test_utf8_validity),
	        cmocka_unit_test(test_utf8_sanitize_replaces_bad_bytes),
	        cmocka_unit_test(test_json_is_one_strict_object),
	        cmocka_unit_test(test_json_refuses_duplicate_keys_and_nul_in_strings),
	        cmocka_unit_test(test_json_refuses_unpaired_surrogate_escapes),
	        cmocka_unit_test(test_scan_offset_rasters_over_the_strides),
	        cmocka_unit_test(test_option_values_are_strict),
	        cmocka_unit_test(test_ordinal_lists),
	        cmocka_unit_test(test_pacer_schedules_and_restarts),
	};
	return cmocka_run_group_tests_name("base", tests, NULL, NULL);
}
