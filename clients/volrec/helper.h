/* SPDX-License-Identifier: MIT */
/* The processing helper `volrec-process` that `volrec` runs for process, sim, bench, ...,
 * and where `volrec` looks for the programs it runs (helper.c). */
#ifndef VOLREC_CLIENTS_HELPER_H
#define VOLREC_CLIENTS_HELPER_H

#include <stdbool.h>
#include <stddef.h>

#define VOLREC_HELPER "volrec-process"

/*
 * Where `volrec` finds the programs it runs (the helper, the viewer volrec-view): the program
 * name, first match, in $VOLREC_EXEC_PATH (when set, only there), beside the running volrec
 * (the build tree), in <prefix>/libexec/volrec/ for a volrec in <prefix>/bin/, and in dir (the
 * installed place). 0 with its path in path (len bytes), or -ENOENT with the places looked at
 * in tried.
 */
int tool_program_find(const char *name, const char *dir, char *path, size_t len, char *tried,
                      size_t tlen);

/* Run `volrec-process argv[0] argv[1..argc)` in place of this process; returns only on failure
 * (after printing why), with the exit status to use. */
int tool_helper_exec(int argc, char **argv);

/* Run the processing helper with args (args[0] the command, NULL-terminated) as a child and
 * wait for it: its exit status (0 success), or -1 with the reason in err (not installed,
 * cannot start, killed by a signal). */
int tool_helper_run(const char *const *args, char *err, size_t errlen);

#endif
