/* SPDX-License-Identifier: MIT */
/*
 * `volrec`: one command for the operator's and developer's tools; dispatches to the subcommand
 * named by the first argument. The operator's tools (status, watch, record, ...) are built in;
 * the processing ones (process, sim, bench, ...) run in the helper `volrec-process` (helper.c),
 * so that this program does not link the processing stack.
 */
#include <stdio.h>

#include "base/base.h"
#include "clients/volrec/helper.h"

#define COMMAND(name, summary) int cmd_##name(int argc, char **argv);
#include "volrec_commands.h"
#undef COMMAND

/* run NULL: a command of the helper */
static const struct vr_command commands[] = {
#define COMMAND(name, summary) {#name, summary, cmd_##name},
#include "volrec_commands.h"
#undef COMMAND
#define COMMAND(name, summary) {#name, summary, NULL},
#include "volrec_helper_commands.h"
#undef COMMAND
        {NULL, NULL, NULL},
};

static void usage(FILE *f)
{
	fprintf(f, "usage: volrec COMMAND [OPTIONS]   (volrec COMMAND --help for its options)\n\n"
	           "operator's tools (a running volrecd):\n");
	for (size_t i = 0; commands[i].name; i++)
		if (commands[i].run)
			fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
	fprintf(f, "\nprocessing (run by the helper " VOLREC_HELPER "):\n");
	for (size_t i = 0; commands[i].name; i++)
		if (!commands[i].run)
			fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
	fprintf(f, "\nEvery option and exit status: man volrec.\n");
}

int main(int argc, char **argv)
{
	return vr_command_main("volrec", commands, usage, tool_helper_exec, argc, argv);
}
