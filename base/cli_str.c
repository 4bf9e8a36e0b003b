/* SPDX-License-Identifier: MIT */
/* Command lines (base.h): the options whose value a main() keeps as it is given. */
#include <getopt.h>

#include "base/base.h"

int vr_cli_getopt(int argc, char **argv, const char *optstring, const struct option *longopts,
                  const struct vr_cli_str *strs, size_t n)
{
	for (;;) {
		int opt = getopt_long(argc, argv, optstring, longopts, NULL);
		size_t i = 0;

		while (i < n && strs[i].opt != opt)
			i++;
		if (opt == -1 || i == n)
			return opt;
		*strs[i].dst = optarg;
	}
}
