/* SPDX-License-Identifier: MIT */
/* The main() of `volrec` and of its helper `volrec-process`: run the subcommand argv[1] names;
 * the ends of the option parsing the subcommands share. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"

int vr_command_main(const char *prog, const struct vr_command *cmds, void (*usage)(FILE *f),
                    int (*other)(int argc, char **argv), int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return VR_EXIT_USAGE;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
		usage(stdout);
		return VR_EXIT_OK;
	}
	if (!strcmp(argv[1], "--version")) {
		printf("%s %s\n", prog, VOLREC_VERSION);
		return VR_EXIT_OK;
	}
	for (size_t i = 0; cmds[i].name; i++)
		if (!strcmp(argv[1], cmds[i].name))
			return cmds[i].run ? cmds[i].run(argc - 1, argv + 1)
			                   : other(argc - 1, argv + 1);
	fprintf(stderr, "%s: unknown command '%s'\n", prog, argv[1]);
	usage(stderr);
	return VR_EXIT_USAGE;
}

int vr_command_usage(void (*usage)(FILE *f), int opt)
{
	if (opt != 'h')
		return vr_cli_usage(usage, opt);
	usage(stdout);
	return -1;
}

int vr_command_required(const char *cmd, bool given, const char *missing, int argc,
                        void (*usage)(FILE *f))
{
	if (given && optind == argc)
		return 0;
	fprintf(stderr, "volrec %s: %s\n", cmd, optind != argc ? "unexpected arguments" : missing);
	usage(stderr);
	return VR_EXIT_USAGE;
}
