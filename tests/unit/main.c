/* SPDX-License-Identifier: MIT */
/*
 * The one cmocka runner: runs every test group compiled in (see vrtest.h), or only the groups
 * named as arguments. Exit status is the number of failed tests (capped at 255).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/vrtest.h"

#define GROUP(name) int vr_test_group_##name(void);
#include "unit_groups.h"
#undef GROUP

static const struct {
	const char *name;
	int (*run)(void);
} groups[] = {
#define GROUP(name) {#name, vr_test_group_##name},
#include "unit_groups.h"
#undef GROUP
        {NULL, NULL},
};

static int wanted(const char *name, int argc, char **argv)
{
	if (argc < 2)
		return 1;
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], name))
			return 1;
	return 0;
}

int main(int argc, char **argv)
{
	int failed = 0, ran = 0;

	for (size_t i = 0; groups[i].name; i++) {
		if (!wanted(groups[i].name, argc, argv))
			continue;
		failed += groups[i].run();
		ran++;
	}
	if (!ran) {
		fprintf(stderr, "unit_runner: no test group matched\n");
		return 2;
	}
	return failed > 255 ? 255 : failed;
}
