/* SPDX-License-Identifier: MIT */
/*
 * The `volrec` command's subcommands. Each lives in its own cmd_*.c and is declared there with
 * VR_COMMAND(name, "one-line summary") { ... }, which defines int cmd_name(int argc, char **argv)
 * (argv[0] is the subcommand name). The build collects them into the dispatch table.
 * Exit codes every subcommand keeps: 0 success, 1 failure at run time, 2 usage or config error,
 * 3 no daemon running for the instance; further codes are documented per subcommand.
 */
#ifndef VOLREC_CLIENTS_COMMANDS_H
#define VOLREC_CLIENTS_COMMANDS_H

#include <stdio.h>

#include "base/base.h" /* vr_cli_: the usage errors every subcommand prints alike */

#define VR_COMMAND(name, summary) int cmd_##name(int argc, char **argv)

enum {
	VR_EXIT_OK = 0,
	VR_EXIT_FAIL = 1,
	VR_EXIT_USAGE = 2,
	VR_EXIT_NO_DAEMON = 3,
	VR_EXIT_INCOMPLETE = 4, /* done, but volumes are missing (record: see /missed) */
	VR_EXIT_REJECTED = 5,   /* the daemon refused the request (reload: reload_rejected) */
	VR_EXIT_TIMEOUT = 6,    /* the daemon did not answer or confirm in time */
	VR_EXIT_PERM = 7,       /* permission denied (shared memory, pid file, signal, output) */
	VR_EXIT_NOSPACE = 8,    /* output stopped: disk full or file size limit (file closed) */
};

/* A program's table of subcommands, ended by one with name NULL. */
struct vr_command {
	const char *name;
	const char *summary;
	int (*run)(int argc, char **argv); /* NULL: run by vr_command_main's other() */
};

/*
 * The main() of `volrec` and `volrec-process` (dispatch.c): with argv[1] --help, -h or help,
 * usage(stdout) and 0; --version prints "PROG VERSION"; else the command argv[1] names runs
 * with argv + 1 (through other() when its run is NULL). No or an unknown command: usage(stderr)
 * and VR_EXIT_USAGE. Returns the exit status.
 */
int vr_command_main(const char *prog, const struct vr_command *cmds, void (*usage)(FILE *f),
                    int (*other)(int argc, char **argv), int argc, char **argv);

/* The end of the switch of a command that ends itself after --help (process, calibrate): opt
 * 'h' prints usage(stdout) and returns -1, any other as vr_cli_usage. */
int vr_command_usage(void (*usage)(FILE *f), int opt);
/* After the options of a command that takes no operand: 0 when given (its required options
 * are) and getopt took every argument; else "volrec CMD: unexpected arguments" or "volrec CMD:
 * MISSING" (what is required), the usage on stderr, and VR_EXIT_USAGE. */
int vr_command_required(const char *cmd, bool given, const char *missing, int argc,
                        void (*usage)(FILE *f));
/* The value of --backend NAME (cpu, cuda, auto) as an enum cfg_backend, or -1 after "volrec CMD:
 * --backend NAME: allowed cpu, cuda, auto". */
int vr_command_backend(const char *cmd, const char *name);

#endif
