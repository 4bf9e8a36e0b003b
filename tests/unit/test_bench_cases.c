/* SPDX-License-Identifier: MIT */
/* The one table of benchmark cases (tools/bench/cases.c): what `volrec bench --print-case` tells the
 * Python benchmarks is the whole configuration of each case. */
#include <stdio.h>
#include <string.h>

#include <json-c/json.h>

#include "tests/unit/vrtest.h"
#include "tools/bench/bench.h"

#define KEYS_MAX 64

struct keys {
	char path[KEYS_MAX][128];
	char value[KEYS_MAX][256];
	const char *paths[KEYS_MAX], *values[KEYS_MAX];
	size_t n;
};

/* The leaves of o as configuration keys ("geometry.stride") and YAML flow values (JSON is). */
static void flatten(struct json_object *o, const char *prefix, struct keys *k)
{
	json_object_object_foreach(o, key, v)
	{
		char path[128];

		snprintf(path, sizeof(path), "%s%s%s", prefix, prefix[0] ? "." : "", key);
		if (json_object_is_type(v, json_type_object)) {
			flatten(v, path, k);
			continue;
		}
		assert_true(k->n < KEYS_MAX);
		snprintf(k->path[k->n], sizeof(k->path[0]), "%s", path);
		snprintf(k->value[k->n], sizeof(k->value[0]), "%s",
		         v ? json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN) : "~");
		k->paths[k->n] = k->path[k->n];
		k->values[k->n] = k->value[k->n];
		k->n++;
	}
}

/* Every case: its printed keys over the defaults give the configuration the benchmarks in C run
 * (a key bench_case_config sets that the printed list left out fails here). */
static void test_printed_case_is_the_whole_configuration(void **state)
{
	(void)state;
	for (unsigned i = 0; i < bench_ncases; i++) {
		const struct bench_case *c = &bench_cases[i];
		struct json_object *o = bench_case_json(c), *conf;
		struct vr_config want, got;
		struct keys k = {.n = 0};
		char err[512] = "";

		assert_non_null(o);
		assert_true(json_object_object_get_ex(o, "config", &conf));
		flatten(conf, "", &k);
		bench_case_config(c, CFG_BACKEND_AUTO, &want);
		/* the views' slab and position follow the geometry (a file's validation fills them
		 * in; over the defaults here they are given) */
		snprintf(k.value[k.n], sizeof(k.value[0]), "[%u, %u]", want.view.slab[0],
		         want.view.slab[1]);
		k.paths[k.n] = "view.slab";
		k.values[k.n] = k.value[k.n];
		k.n++;
		snprintf(k.value[k.n], sizeof(k.value[0]), "[%u, %u, %u]", want.view.position[0],
		         want.view.position[1], want.view.position[2]);
		k.paths[k.n] = "view.position";
		k.values[k.n] = k.value[k.n];
		k.n++;
		cfg_defaults(&got);
		if (cfg_override_keys(&got, k.paths, k.values, k.n, err, sizeof(err)))
			fail_msg("case %s: %s", c->name, err);
		if (!cfg_equal(&got, &want))
			fail_msg("case %s: the printed keys do not give its configuration",
			         c->name);
		cfg_free(&got);
		cfg_free(&want);
		json_object_put(o);
	}
}

/* Every case's configuration, built in code, is one the schema accepts (cfg_check): what the
 * benchmarks measure is what volrecd would run. */
static void test_every_case_passes_the_schema(void **state)
{
	static const enum cfg_backend backends[] = {CFG_BACKEND_CPU, CFG_BACKEND_CUDA,
	                                            CFG_BACKEND_AUTO};

	for (unsigned i = 0; i < bench_ncases; i++)
		for (size_t b = 0; b < sizeof(backends) / sizeof(backends[0]); b++) {
			struct vr_config c;
			char err[512] = "";

			bench_case_config(&bench_cases[i], backends[b], &c);
			if (cfg_check(&c, err, sizeof(err)))
				fail_msg("case %s: %s", bench_cases[i].name, err);
			cfg_free(&c);
		}
}

VR_TEST_GROUP(bench_cases)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_printed_case_is_the_whole_configuration),
	        cmocka_unit_test(test_every_case_passes_the_schema),
	};
	return cmocka_run_group_tests_name("bench_cases", tests, NULL, NULL);
}
