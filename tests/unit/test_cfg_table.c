/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the configuration schema (config/schema.c): every key is well formed and
 * classified live or structural, round-trips through the dump at its default and at a value of
 * its own, and a change of it alone is classified as the table says; cfg_set_keys and
 * cfg_get_key, and docs/configuration.md against the table.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/internal.h"
#include "tests/unit/vrtest.h"

/* ---- helpers ----------------------------------------------------------------------------- */

static char tmp_dir[64];
static char file1[128], file2[128], table1[128], table2[128];

static void write_file(const char *path, size_t values, double start)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	for (size_t i = 0; i < values; i++)
		fprintf(f, "%.17g\n", start + 0.001 * (double)i);
	assert_int_equal(fclose(f), 0);
}

/* Two plain files and two tables of K = 2048 values with different contents. */
static int make_files(void **state)
{
	snprintf(tmp_dir, sizeof(tmp_dir), "/tmp/volrec-test-cfgtab-XXXXXX");
	if (!mkdtemp(tmp_dir))
		return -1;
	snprintf(file1, sizeof(file1), "%s/a.key", tmp_dir);
	snprintf(file2, sizeof(file2), "%s/b.key", tmp_dir);
	snprintf(table1, sizeof(table1), "%s/t1.txt", tmp_dir);
	snprintf(table2, sizeof(table2), "%s/t2.txt", tmp_dir);
	write_file(file1, 1, 1);
	write_file(file2, 1, 2);
	write_file(table1, 2048, 0);
	write_file(table2, 2048, 1);
	return 0;
}

static int remove_files(void **state)
{
	unlink(file1);
	unlink(file2);
	unlink(table1);
	unlink(table2);
	return rmdir(tmp_dir);
}

/* "@file", "@file2", "@table", "@table2" stand for the files above. */
static const char *subst(const char *v)
{
	if (!strcmp(v, "@file"))
		return file1;
	if (!strcmp(v, "@file2"))
		return file2;
	if (!strcmp(v, "@table"))
		return table1;
	if (!strcmp(v, "@table2"))
		return table2;
	return v;
}

/* Apply "path=value" assignments (any key) to c; fail the test on an error. */
static void apply(struct vr_config *c, const char *const *assign, size_t n)
{
	char paths[8][CFG_KEY_MAX], err[CFG_ERR_MAX];
	const char *p[8], *v[8];
	assert_true(n <= 8);
	for (size_t i = 0; i < n; i++) {
		const char *eq = strchr(assign[i], '=');
		assert_non_null(eq);
		snprintf(paths[i], sizeof(paths[i]), "%.*s", (int)(eq - assign[i]), assign[i]);
		p[i] = paths[i];
		v[i] = subst(eq + 1);
	}
	int rc = cfg_override_keys(c, p, v, n, err, sizeof(err));
	if (rc)
		print_error("%s=%s...: %s\n", p[0], v[0], err);
	assert_int_equal(rc, 0);
}

static char *dump_text(const struct vr_config *c)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	assert_non_null(f);
	assert_int_equal(cfg_dump(c, f), 0);
	assert_int_equal(fclose(f), 0);
	return text;
}

/* c -> dump -> cfg_load_string -> equal to c. */
static void assert_round_trip(const struct vr_config *c, const char *what)
{
	char err[CFG_ERR_MAX] = "", *text = dump_text(c);
	struct vr_config back;
	int rc = cfg_load_string(&back, text, "dump.yaml", err, sizeof(err));
	if (rc || !cfg_equal(c, &back))
		print_error("%s: %s\n---\n%s", what, err, text);
	assert_int_equal(rc, 0);
	assert_true(cfg_equal(c, &back));
	cfg_free(&back);
	free(text);
}

/* cfg_get_key's text of path in c (malloc'ed: the caller frees it); fails the test on an
 * error, with its message. */
static char *get_text(const struct vr_config *c, const char *path)
{
	char err[CFG_ERR_MAX] = "", *text = NULL;
	int rc = cfg_get_key(c, path, &text, err, sizeof(err));

	if (rc)
		fail_msg("get %s: %d: %s", path, rc, err);
	return text;
}

/* cfg_get_key of path in c reads want. */
static void assert_get(const struct vr_config *c, const char *path, const char *want)
{
	char *text = get_text(c, path);

	if (strcmp(text, want))
		fail_msg("get %s: '%s', expected '%s'", path, text, want);
	free(text);
}

static size_t count_names(const char *const *names)
{
	size_t n = 0;
	while (names[n])
		n++;
	return n;
}

/* ---- the table --------------------------------------------------------------------------- */

static size_t expected_size(const struct cfg_key *k)
{
	switch (k->type) {
	case CFG_T_BOOL:
		return sizeof(bool);
	case CFG_T_INT:
	case CFG_T_ENUM:
		return sizeof(int);
	case CFG_T_U32:
		return sizeof(uint32_t);
	case CFG_T_U64:
		return sizeof(uint64_t);
	case CFG_T_F64:
		return sizeof(double);
	case CFG_T_U32S:
		return k->n * sizeof(uint32_t);
	case CFG_T_F64S:
		return k->n * sizeof(double);
	case CFG_T_LIST:
		return k->n * CFG_PATH_MAX;
	case CFG_T_INTS:
		return k->n * sizeof(int);
	case CFG_T_TABLE:
		return sizeof(struct cfg_table);
	case CFG_T_ARGS:
		return sizeof(char *);
	default: /* strings: any size */
		return k->size;
	}
}

static void test_every_key_is_classified_and_well_formed(void **state)
{
	assert_true(cfg_nkeys > 50 && cfg_nkeys <= CFG_KEYS_MAX);
	for (size_t i = 0; i < cfg_nkeys; i++) {
		const struct cfg_key *k = &cfg_keys[i];
		if (k->reload != CFG_LIVE && k->reload != CFG_STRUCTURAL)
			print_error("%s: neither live nor structural\n", k->path);
		assert_true(k->reload == CFG_LIVE || k->reload == CFG_STRUCTURAL);
		/* a live key may turn structural by a rule; a structural one has no rule */
		assert_true(!k->structural_if || k->reload == CFG_LIVE);
		if (expected_size(k) != k->size)
			print_error("%s: destination of %zu bytes for its type\n", k->path,
			            k->size);
		assert_int_equal(expected_size(k), k->size);
		assert_true(k->off + k->size <= sizeof(struct vr_config));
		assert_true(strlen(k->path) + 4 < CFG_KEY_MAX);
		assert_ptr_equal(cfg_key_find(k->path), k);
		assert_false(cfg_is_section(k->path)); /* a key is never a section too */
		for (size_t j = 0; j < i; j++) {       /* destinations do not overlap */
			const struct cfg_key *o = &cfg_keys[j];
			if (k->off < o->off + o->size && o->off < k->off + k->size)
				print_error("%s overlaps %s\n", k->path, o->path);
			assert_false(k->off < o->off + o->size && o->off < k->off + k->size);
		}
		switch (k->type) {
		case CFG_T_ENUM:
		case CFG_T_NAME:
			assert_non_null(k->names);
			assert_true(count_names(k->names) >= 1);
			if (k->type == CFG_T_ENUM)
				assert_true(k->def[0] >= 0 && k->def[0] < count_names(k->names));
			break;
		case CFG_T_INTS:
			assert_non_null(k->shape);
			assert_true(k->n >= 1 && k->min < k->max);
			break;
		case CFG_T_U32S:
		case CFG_T_F64S:
			assert_non_null(k->shape);
			assert_true(k->n >= 1 && k->n <= 4);
			/* fall through */
		case CFG_T_INT:
		case CFG_T_U32:
		case CFG_T_F64:
			assert_true(k->min < k->max);
			for (size_t e = 0; e < (k->n ? k->n : 1); e++)
				assert_true(k->def[e] >= k->min && k->def[e] <= k->max);
			break;
		default:
			break;
		}
	}
}

static void test_defaults_round_trip(void **state)
{
	struct vr_config c, d;
	char err[CFG_ERR_MAX];

	cfg_defaults(&c);
	assert_round_trip(&c, "defaults");
	/* an empty file gives the same configuration as cfg_defaults */
	assert_int_equal(cfg_load_string(&d, "", "empty.yaml", err, sizeof(err)), 0);
	assert_true(cfg_equal(&c, &d));
	assert_false(cfg_is_structural_change(&c, &d));
	cfg_free(&d);
	cfg_free(&c);
}

/*
 * What a key needs around it to be valid (a method for sample positions, the other CURVE key,
 * ...), given as its base: the configuration it changes from, with the key itself set when it
 * is optional. value overrides the value the test derives from the key's type. Any key not
 * here changes alone from the defaults.
 */
static const struct {
	const char *key;
	const char *base[3];
	const char *value;
} needs[] = {
        {"source.type", {"source.replay.path=@file"}, NULL},
        {"geometry.depth_range",
         {"view.slab=[0, 999]", "view.position=[150, 150, 500]"},
         "[1, 1000]"},
        {"view.slab", {NULL}, "[10, 20]"},
        {"view.position", {NULL}, "[1, 2, 3]"},
        {"preprocess.background.threshold", {"preprocess.background.mode=partial_median"}, NULL},
        {"preprocess.background.reference",
         {"preprocess.background.mode=reference", "preprocess.background.reference=@table"},
         NULL},
        {"preprocess.resample.method",
         {"preprocess.resample.method=cubic", "preprocess.resample.poly=[0, 2047, 0, 0]"},
         NULL},
        {"preprocess.resample.table",
         {"preprocess.resample.method=linear", "preprocess.resample.table=@table"},
         NULL},
        {"preprocess.resample.poly",
         {"preprocess.resample.method=linear", "preprocess.resample.poly=[0, 2047, 0, 0]"},
         NULL},
        {"preprocess.resample.wavelength_nm",
         {"preprocess.resample.method=linear",
          "preprocess.resample.wavelength_nm=[800, 0.1, 0, 0]"},
         NULL},
        {"preprocess.dispersion.coeffs", {"preprocess.dispersion.coeffs=[0, 0]"}, NULL},
        {"preprocess.dispersion.table", {"preprocess.dispersion.table=@table"}, NULL},
        {"output.channels", {"geometry.repeats=2"}, "[structure, angio, doppler]"},
        {"functional.angio.range", {NULL}, "[0, 2]"},
        {"ipc.curve_secret_key",
         {"ipc.curve_secret_key=@file", "ipc.curve_public_key=@file"},
         NULL},
        {"ipc.curve_public_key",
         {"ipc.curve_secret_key=@file", "ipc.curve_public_key=@file"},
         NULL},
};

/* A value of k, as YAML text, other than its value in c. */
static void other_value(const struct cfg_key *k, const struct vr_config *c, char *buf, size_t len)
{
	const void *p = (const char *)c + k->off;
	size_t off = 0;

	switch (k->type) {
	case CFG_T_BOOL:
		snprintf(buf, len, "%s", *(const bool *)p ? "false" : "true");
		return;
	case CFG_T_INT:
	case CFG_T_U32: {
		long long v = k->type == CFG_T_INT ? (long long)*(const int *)p
		                                   : (long long)*(const uint32_t *)p;
		snprintf(buf, len, "%lld", v + 1 <= k->max ? v + 1 : v - 1);
		return;
	}
	case CFG_T_U64:
		snprintf(buf, len, "%llu", (unsigned long long)*(const uint64_t *)p + 1);
		return;
	case CFG_T_F64: {
		double v = *(const double *)p;
		snprintf(buf, len, "%.17g", v + 1 <= k->max ? v + 1 : (v + k->min) / 2);
		return;
	}
	case CFG_T_ENUM:
	case CFG_T_NAME: {
		size_t n = count_names(k->names), v = 0;
		if (k->type == CFG_T_ENUM)
			v = (size_t) * (const int *)p;
		else
			while (strcmp(k->names[v], p))
				v++;
		snprintf(buf, len, "%s", k->names[(v + 1) % n]);
		return;
	}
	case CFG_T_STR:
		snprintf(buf, len, "other");
		return;
	case CFG_T_PATH:
		snprintf(buf, len, "%s", strcmp(p, file2) ? file2 : file1);
		return;
	case CFG_T_TABLE:
		snprintf(buf, len, "%s",
		         strcmp(((const struct cfg_table *)p)->path, table2) ? table2 : table1);
		return;
	case CFG_T_ARGS:
		snprintf(buf, len, "{board: 1, name: \"a: b\"}");
		return;
	case CFG_T_LIST:
		snprintf(buf, len, "[\"ipc://%s/x.pub\", \"tcp://127.0.0.1:5555\"]", tmp_dir);
		return;
	case CFG_T_INTS: /* absent by default: a list that repeats an entry */
		snprintf(buf, len, "[%.0f, %.0f, %.0f]", k->min + 1, k->min, k->min + 1);
		return;
	case CFG_T_U32S:
	case CFG_T_F64S:
		for (size_t i = 0; i < k->n; i++) {
			double v = k->type == CFG_T_U32S ? ((const uint32_t *)p)[i]
			                                 : ((const double *)p)[i];
			off += (size_t)snprintf(buf + off, len - off, "%s%.17g", i ? ", " : "[",
			                        v + 1 <= k->max ? v + 1 : v - 1);
		}
		snprintf(buf + off, len - off, "]");
		return;
	}
	fail_msg("%s: no value for its type", k->path);
}

static void test_each_key_round_trips_and_is_classified_alone(void **state)
{
	size_t changed = 0;

	for (size_t i = 0; i < cfg_nkeys; i++) {
		const struct cfg_key *k = &cfg_keys[i];
		const char *base[3] = {NULL}, *fixed = NULL;
		char value[1024], *text, err[CFG_ERR_MAX];
		struct vr_config a, b, c;
		size_t nbase = 0;

		for (size_t j = 0; j < sizeof(needs) / sizeof(needs[0]); j++)
			if (!strcmp(needs[j].key, k->path)) {
				memcpy(base, needs[j].base, sizeof(base));
				fixed = needs[j].value;
			}
		while (nbase < 3 && base[nbase])
			nbase++;
		cfg_defaults(&a);
		apply(&a, base, nbase);
		assert_round_trip(&a, k->path);
		if ((k->type == CFG_T_ENUM || k->type == CFG_T_NAME) && !k->names[1]) {
			cfg_free(&a); /* one allowed value (output.dtype): nothing to change to */
			continue;
		}
		if (fixed)
			snprintf(value, sizeof(value), "%s", fixed);
		else
			other_value(k, &a, value, sizeof(value));

		/* a value of its own: differs in this key only, and reads back from the dump */
		assert_int_equal(cfg_copy(&b, &a), 0);
		const char *p = k->path, *v = value;
		int rc = cfg_override_keys(&b, &p, &v, 1, err, sizeof(err));
		if (rc)
			print_error("%s=%s: %s\n", k->path, value, err);
		assert_int_equal(rc, 0);
		assert_false(cfg_key_equal(k, &a, &b));
		for (size_t j = 0; j < cfg_nkeys; j++)
			if (j != i && !cfg_key_equal(&cfg_keys[j], &a, &b))
				fail_msg("%s=%s changed %s too", k->path, value, cfg_keys[j].path);
		assert_round_trip(&b, k->path);

		/* the change alone is classified as the table says, both ways */
		bool structural = k->reload == CFG_STRUCTURAL;
		if (cfg_is_structural_change(&a, &b) != structural)
			print_error("%s=%s: expected %s\n", k->path, value,
			            structural ? "structural" : "live");
		assert_int_equal(cfg_is_structural_change(&a, &b), structural);
		assert_int_equal(cfg_is_structural_change(&b, &a), structural);

		/* cfg_get_key's text sets the same value again */
		text = get_text(&b, k->path);
		assert_int_equal(cfg_copy(&c, &a), 0);
		v = text;
		rc = cfg_override_keys(&c, &p, &v, 1, err, sizeof(err));
		if (rc || !cfg_equal(&b, &c))
			print_error("%s: get gave '%s', set back: %s\n", k->path, text, err);
		free(text);
		assert_int_equal(rc, 0);
		assert_true(cfg_equal(&b, &c));
		cfg_free(&c);

		/* cfg_set_keys: a live key changes, a structural one is refused untouched */
		assert_int_equal(cfg_copy(&c, &a), 0);
		v = value;
		rc = cfg_set_keys(&c, &p, &v, 1, err, sizeof(err));
		if (structural) {
			assert_int_equal(rc, -EPERM);
			assert_non_null(strstr(err, "needs the configuration file and a reload"));
			assert_true(cfg_equal(&a, &c));
		} else if (k->type == CFG_T_TABLE || k->type == CFG_T_PATH) {
			/* live through a reload, never over the wire */
			assert_int_equal(rc, -EPERM);
			assert_non_null(strstr(err, "names a file"));
			assert_true(cfg_equal(&a, &c));
		} else {
			if (rc)
				print_error("%s=%s: %s\n", k->path, value, err);
			assert_int_equal(rc, 0);
			assert_true(cfg_equal(&b, &c));
		}
		cfg_free(&c);
		cfg_free(&b);
		cfg_free(&a);
		changed++;
	}
	assert_int_equal(changed, cfg_nkeys - 1); /* all but output.dtype */
}

/* ---- cfg_set_keys and cfg_get_key ------------------------------------------------------- */

static int set1(struct vr_config *c, const char *path, const char *value, char *err, size_t len)
{
	return cfg_set_keys(c, &path, &value, 1, err, len);
}

/* Setting path to value fails with the message the same value gets in a file, less the
 * position. */
static void assert_set_fails_as_in_a_file(const char *path, const char *value, int want_rc)
{
	char yaml[512], ferr[CFG_ERR_MAX], serr[CFG_ERR_MAX];
	struct vr_config c, d;
	const char *dot;
	int depth = 0;

	/* "a.b.c" = v -> "a: {b: {c: v}}" */
	size_t off = 0;
	for (const char *p = path; (dot = strchr(p, '.')); p = dot + 1, depth++)
		off += (size_t)snprintf(yaml + off, sizeof(yaml) - off, "%.*s: {", (int)(dot - p),
		                        p);
	off += (size_t)snprintf(yaml + off, sizeof(yaml) - off, "%s: %s",
	                        strrchr(path, '.') ? strrchr(path, '.') + 1 : path, value);
	while (depth--)
		off += (size_t)snprintf(yaml + off, sizeof(yaml) - off, "}");
	assert_true(off < sizeof(yaml));
	assert_true(cfg_load_string(&d, yaml, "t.yaml", ferr, sizeof(ferr)) < 0);

	cfg_defaults(&c);
	int rc = set1(&c, path, value, serr, sizeof(serr));
	const char *msg = ferr; /* "t.yaml:LINE:COL: " off */
	for (int colons = 0; colons < 3 && msg; colons++)
		msg = strchr(msg, ':') ? strchr(msg, ':') + 1 : NULL;
	msg = msg ? msg + 1 : "(no position)";
	if (rc != want_rc || strcmp(serr, msg))
		print_error("set %s=%s: rc %d, '%s'\nfile: '%s'\n", path, value, rc, serr, ferr);
	assert_int_equal(rc, want_rc);
	assert_string_equal(serr, msg);
	cfg_defaults(&d);
	assert_true(cfg_equal(&c, &d)); /* nothing applied */
	cfg_free(&c);
	cfg_free(&d);
}

static void test_set_checks_values_as_the_file_does(void **state)
{
	assert_set_fails_as_in_a_file("preprocess.db_range", "[0, 1000]", -ERANGE);
	assert_set_fails_as_in_a_file("preprocess.db_range", "[50, 50]", -EINVAL);
	assert_set_fails_as_in_a_file("preprocess.db_range", "[1, 2, 3]", -EINVAL);
	assert_set_fails_as_in_a_file("preprocess.db_range", "20", -EINVAL);
	assert_set_fails_as_in_a_file("preprocess.db_range", "", -EINVAL);
	assert_set_fails_as_in_a_file("preprocess.window.type", "fancy", -EINVAL);
	assert_set_fails_as_in_a_file("preprocess.window.param", "11", -ERANGE);
	assert_set_fails_as_in_a_file("preprocess.window", "{type: hann, typ: 1}", -EINVAL);
	assert_set_fails_as_in_a_file("preprocess.window", "[1]", -EINVAL);
	assert_set_fails_as_in_a_file("reconstruct.tau", "0", -ERANGE);
	assert_set_fails_as_in_a_file("reconstruct.tau", "'5'", -EINVAL);
	assert_set_fails_as_in_a_file("ipc.status_interval_ms", "49", -ERANGE);
	assert_set_fails_as_in_a_file("ipc.status_interval_ms", "1.5", -EINVAL);
	assert_set_fails_as_in_a_file("log.level", "warn", -EINVAL);
}

static void test_set_names_unknown_and_structural_keys(void **state)
{
	char err[CFG_ERR_MAX];
	struct vr_config c;

	cfg_defaults(&c);
	assert_int_equal(set1(&c, "preprocess.windw.type", "hann", err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "preprocess.windw: unknown key (allowed in preprocess: "
	                         "background, resample, window, dispersion, zero_pad, "
	                         "db_range, flip)");
	assert_int_equal(set1(&c, "bogus", "1", err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "bogus: unknown key (allowed: instance, backend, gpu, cpu"));
	assert_int_equal(set1(&c, "preprocess.db_range.lo", "1", err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "preprocess.db_range.lo: unknown key (preprocess.db_range has "
	                         "no keys below it)");
	assert_int_equal(set1(&c, "", "1", err, sizeof(err)), -EINVAL);

	assert_int_equal(set1(&c, "geometry.stride", "[1, 1]", err, sizeof(err)), -EPERM);
	assert_string_equal(err,
	                    "geometry.stride: is structural: a change needs the "
	                    "configuration file and a reload (live keys: "
	                    "preprocess.background.mode, preprocess.background.threshold, "
	                    "preprocess.window, preprocess.dispersion, "
	                    "preprocess.db_range, reconstruct, functional, ipc.status_interval_ms, "
	                    "log, view.slab, view.position, view.render, view.volume)");
	assert_int_equal(set1(&c, "preprocess", "{db_range: [1, 2]}", err, sizeof(err)), -EPERM);
	assert_non_null(strstr(err, "preprocess: holds keys that are structural"));
	/* live keys whose change is structural all the same */
	assert_int_equal(set1(&c, "preprocess.dispersion.coeffs", "[1, 2]", err, sizeof(err)),
	                 -EPERM);
	assert_string_equal(err, "preprocess.dispersion.coeffs: switches dispersion on or off, "
	                         "which changes the FFT (a structural change: it needs the "
	                         "configuration file and a reload)");
	assert_int_equal(set1(&c, "reconstruct.mode", "none", err, sizeof(err)), -EPERM);
	assert_non_null(strstr(err, "reconstruct.mode: changes the size of the output volume"));
	assert_int_equal(set1(&c, "reconstruct.mode", "cumulative", err, sizeof(err)), 0);
	assert_int_equal(c.reconstruct.mode, CFG_RECON_CUMULATIVE);
	cfg_free(&c);
}

static void test_set_is_all_or_nothing(void **state)
{
	const char *paths[] = {"preprocess.db_range", "log.level", "preprocess.window.param"};
	const char *good[] = {"[20, 90]", "debug", "0.3"};
	const char *bad[] = {"[20, 90]", "debug", "-1"};
	char err[CFG_ERR_MAX];
	struct vr_config c, d;

	cfg_defaults(&c);
	cfg_defaults(&d);
	assert_int_equal(cfg_set_keys(&c, paths, bad, 3, err, sizeof(err)), -ERANGE);
	assert_string_equal(err, "preprocess.window.param: -1 is out of range (a number from 0 "
	                         "to 10)");
	assert_true(cfg_equal(&c, &d));
	/* a cross-field rule fails the whole set too */
	const char *gauss[] = {"preprocess.window.type", "preprocess.window.param"};
	const char *zero[] = {"gauss", "0"};
	assert_int_equal(cfg_set_keys(&c, gauss, zero, 2, err, sizeof(err)), -ERANGE);
	assert_non_null(strstr(err, "preprocess.window.param: 0 is out of range for gauss"));
	assert_true(cfg_equal(&c, &d));
	const char *twice[] = {"preprocess.window", "preprocess.window.type"};
	assert_int_equal(cfg_set_keys(&c, twice, zero, 2, err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "preprocess.window.type: given twice (as preprocess.window and "
	                         "preprocess.window.type; each key at most once)");

	assert_int_equal(cfg_set_keys(&c, paths, good, 3, err, sizeof(err)), 0);
	assert_true(c.preprocess.db_range[0] == 20 && c.preprocess.db_range[1] == 90);
	assert_int_equal(c.log.level, CFG_LOG_DEBUG);
	assert_true(c.preprocess.window.param == 0.3);
	assert_int_equal(cfg_set_keys(&c, paths, good, 0, err, sizeof(err)), 0);
	cfg_free(&c);
}

static void test_set_of_a_section_replaces_it(void **state)
{
	char err[CFG_ERR_MAX], yaml[512];
	struct vr_config c;

	/* a key set alone keeps its neighbours (a window parameter that was not chosen follows
	 * its type, as in a file); a section set leaves out returns to defaults */
	cfg_defaults(&c);
	assert_int_equal(set1(&c, "preprocess.window.param", "0.3", err, sizeof(err)), 0);
	assert_int_equal(set1(&c, "preprocess.window.type", "tukey", err, sizeof(err)), 0);
	assert_true(c.preprocess.window.param == 0.3);
	assert_int_equal(set1(&c, "preprocess.window", "{type: tukey}", err, sizeof(err)), 0);
	assert_true(c.preprocess.window.param == 0.5);
	assert_get(&c, "preprocess.window", "{type: tukey, param: 0.5}");
	assert_int_equal(set1(&c, "reconstruct", "{mode: cumulative, tau: 3}", err, sizeof(err)),
	                 0);
	assert_get(&c, "reconstruct",
	           "{mode: cumulative, spatial_sigma: 1, temporal: linear, tau: 3, "
	           "combine: sum, adaptive: {tolerance: 0.1, depth_half_window: 4, "
	           "speckle_tolerance: 0.05, jump_recovery: true}, compensated: {estimate_pose: "
	           "true}}");
	cfg_free(&c);

	/* dispersion coefficients -> a table: one section, as coeffs and table exclude each
	 * other; the table is read relative to the configuration file */
	snprintf(yaml, sizeof(yaml), "%s/c.yaml", tmp_dir);
	FILE *f = fopen(yaml, "w");
	assert_non_null(f);
	fputs("preprocess: {dispersion: {coeffs: [1, 2]}}\n", f);
	assert_int_equal(fclose(f), 0);
	assert_int_equal(cfg_load(&c, yaml, err, sizeof(err)), 0);
	/* a table is a file: never named over the wire, alone or inside its section */
	assert_int_equal(set1(&c, "preprocess.dispersion.table", "t1.txt", err, sizeof(err)),
	                 -EPERM);
	assert_string_equal(err, "preprocess.dispersion.table: names a file: keys that name files "
	                         "are set in the configuration file and applied by a reload, "
	                         "never at run time");
	assert_int_equal(set1(&c, "preprocess.dispersion", "{table: t1.txt}", err, sizeof(err)),
	                 -EPERM);
	assert_int_equal(c.preprocess.dispersion.kind, CFG_DISP_COEFFS);
	cfg_free(&c);
	f = fopen(yaml, "w");
	assert_non_null(f);
	fputs("preprocess: {dispersion: {table: t1.txt}}\n", f);
	assert_int_equal(fclose(f), 0);
	assert_int_equal(cfg_load(&c, yaml, err, sizeof(err)), 0);
	assert_int_equal(c.preprocess.dispersion.kind, CFG_DISP_TABLE);
	assert_string_equal(c.preprocess.dispersion.table.path, table1);
	assert_int_equal(c.preprocess.dispersion.table.len, 2048);
	assert_true(c.preprocess.dispersion.table.data[1] == 0.001);
	assert_get(&c, "preprocess.dispersion.coeffs", "~");
	/* a table already loaded is not read again when another key changes */
	unlink(yaml);
	assert_int_equal(set1(&c, "preprocess.db_range", "[1, 2]", err, sizeof(err)), 0);
	assert_int_equal(c.preprocess.dispersion.table.len, 2048);
	cfg_free(&c);
}

static void test_get_key(void **state)
{
	char err[CFG_ERR_MAX], *text;
	struct vr_config c;

	cfg_defaults(&c);
	assert_get(&c, "preprocess.db_range", "[0, 100]");
	assert_get(&c, "ipc.run_dir", "\"/run/volrec\"");
	assert_get(&c, "ipc.pub", "[]");
	assert_get(&c, "ipc.curve_secret_key", "~");
	assert_get(&c, "preprocess.dispersion", "{}");
	assert_get(&c, "source.synth",
	           "{seed: 1, phantom: retina, motion: {deg_per_s: 0.25, "
	           "shift_mm_per_s: [0, 0, 0], jump: {epoch: 0, shift_mm: [0, 0, "
	           "0], deg: 0, tilt_deg: [0, 0]}, tilt_deg_per_s: [0, 0], tilt_max_deg: 5, "
	           "periodic: {hz: 0, shift_mm: [0, 0, 0], deg: [0, 0, 0]}, warp: {mm: 0, "
	           "radius_mm: 0.5, hz: 0.5, centre_mm: [0.4, -0.3]}}, flow: {peak_mm_per_s: 1, "
	           "direction: 1, bulk_um_per_repeat: 0, decorrelation_um: 10, blood_tau_us: "
	           "3000}, mirror_mm: 0, snr_db: 40, beam_um: 0}");
	text = get_text(&c, "");
	assert_memory_equal(text, "{instance: \"default\", backend: auto, gpu: {device: 0, ", 51);
	free(text);
	text = NULL;
	assert_int_equal(cfg_get_key(&c, "geometry.strid", &text, err, sizeof(err)), -ENOENT);
	assert_null(text);
	assert_string_equal(err, "geometry.strid: unknown key (allowed in geometry: "
	                         "samples_per_ascan, sample_type, bit_shift, ascans_per_bscan, "
	                         "bscans_per_volume, stride, depth_range, bidirectional, "
	                         "repeats, ascan_period_us, bscan_period_us, "
	                         "center_wavelength_nm, scan_size_um, axial_um_per_pixel, "
	                         "refractive_index)");
	assert_get(&c, "log.level", "info");
	assert_true(cfg_key_is_live("log.level") && cfg_key_is_live("reconstruct"));
	assert_false(cfg_key_is_live("preprocess") || cfg_key_is_live("geometry.stride") ||
	             cfg_key_is_live("") || cfg_key_is_live("nothing"));
	cfg_free(&c);
}

/* ---- the documentation ------------------------------------------------------------------ */

static void test_docs_list_every_key_with_its_reload_class(void **state)
{
	char path[1024], *line = NULL;
	size_t cap = 0;
	bool seen[CFG_KEYS_MAX] = {false};

	snprintf(path, sizeof(path), "%s/docs/configuration.md", vrtest_src_dir());
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	while (getline(&line, &cap, f) > 0) {
		char key[CFG_KEY_MAX], *col[6];
		int n = 0;
		/* | `key` | type | default | allowed | reload | meaning | */
		if (sscanf(line, "| `%127[^`]` |", key) != 1)
			continue;
		for (char *p = line; (p = strchr(p, '|')) && n < 6; p++)
			col[n++] = p + 1;
		assert_int_equal(n, 6);
		const struct cfg_key *k = cfg_key_find(key);
		if (!k)
			fail_msg("docs/configuration.md documents %s, which is no key", key);
		while (*col[4] == ' ')
			col[4]++;
		bool live = !strncmp(col[4], "live", 4);
		if (live != (k->reload == CFG_LIVE))
			fail_msg("docs/configuration.md: %s is %s in the table", key,
			         k->reload == CFG_LIVE ? "live" : "structural");
		seen[k - cfg_keys] = true;
	}
	free(line);
	fclose(f);
	for (size_t i = 0; i < cfg_nkeys; i++)
		if (!seen[i])
			fail_msg("docs/configuration.md has no row for %s", cfg_keys[i].path);
}

VR_TEST_GROUP(cfg_table)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_every_key_is_classified_and_well_formed),
	        cmocka_unit_test(test_defaults_round_trip),
	        cmocka_unit_test(test_each_key_round_trips_and_is_classified_alone),
	        cmocka_unit_test(test_set_checks_values_as_the_file_does),
	        cmocka_unit_test(test_set_names_unknown_and_structural_keys),
	        cmocka_unit_test(test_set_is_all_or_nothing),
	        cmocka_unit_test(test_set_of_a_section_replaces_it),
	        cmocka_unit_test(test_get_key),
	        cmocka_unit_test(test_docs_list_every_key_with_its_reload_class),
	};
	return cmocka_run_group_tests_name("cfg_table", tests, make_files, remove_files);
}
