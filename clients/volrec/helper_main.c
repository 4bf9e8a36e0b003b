/* SPDX-License-Identifier: MIT */
/*
 * `volrec-process`: the processing subcommands of `volrec` (process, sim, bench, quality, ...)
 * in a program of their own, so that the operator's tools do not link the processing stack
 * (backends, cuFFT, CUDA runtime, FFTW). `volrec COMMAND` runs it as `volrec-process COMMAND`
 * (helper.c says where it looks); it can also be run that way by hand.
 */
#include <stdio.h>
#include <string.h>

#include "commands.h"

#define COMMAND(name, summary) int cmd_##name(int argc, char **argv);
#include "volrec_helper_commands.h"
#undef COMMAND

static const struct {
	const char *name;
	int (*run)(int argc, char **argv);
} commands[] = {
#define COMMAND(name, summary) {#name, cmd_##name},
#include "volrec_helper_commands.h"
#undef COMMAND
        {NULL, NULL},
};

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: volrec-process COMMAND [OPTIONS]   (normally run as `volrec COMMAND`)\n\n"
	        "commands:");
	for (size_t i = 0; commands[i].name; i++)
		fprintf(f, " %s", commands[i].name);
	fprintf(f, "\n");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return VR_EXIT_USAGE;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage(stdout);
		return VR_EXIT_OK;
	}
	if (!strcmp(argv[1], "--version")) {
		printf("volrec-process %s\n", VOLREC_VERSION);
		return VR_EXIT_OK;
	}
	for (size_t i = 0; commands[i].name; i++)
		if (!strcmp(argv[1], commands[i].name))
			return commands[i].run(argc - 1, argv + 1);
	fprintf(stderr, "volrec-process: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return VR_EXIT_USAGE;
}
