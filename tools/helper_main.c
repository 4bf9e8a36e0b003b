/* SPDX-License-Identifier: MIT */
/*
 * `volrec-process`: the processing subcommands of `volrec` (process, sim, bench, quality, ...)
 * in a program of their own, so that the operator's tools do not link the processing stack
 * (backends, cuFFT, CUDA runtime, FFTW). `volrec COMMAND` runs it as `volrec-process COMMAND`
 * (helper.c says where it looks); it can also be run that way by hand.
 */
#include <stdio.h>

#include "base/base.h"

#define COMMAND(name, summary) int cmd_##name(int argc, char **argv);
#include "volrec_helper_commands.h"
#undef COMMAND

static const struct vr_command commands[] = {
#define COMMAND(name, summary) {#name, summary, cmd_##name},
#include "volrec_helper_commands.h"
#undef COMMAND
        {NULL, NULL, NULL},
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
	return vr_command_main("volrec-process", commands, usage, NULL, argc, argv);
}
