/* SPDX-License-Identifier: MIT */
/* The processing helper `volrec-process` that `volrec` runs for process, sim, bench, ...
 * (helper.c: where it is looked for). */
#ifndef VOLREC_CLIENTS_HELPER_H
#define VOLREC_CLIENTS_HELPER_H

#include <stdbool.h>
#include <stddef.h>

#define VOLREC_HELPER "volrec-process"

/* The helper's path into path (len bytes): 0, or -ENOENT with the places looked at in tried. */
int tool_helper_find(char *path, size_t len, char *tried, size_t tlen);

/* Run `volrec-process argv[0] argv[1..argc)` in place of this process; returns only on failure
 * (after printing why), with the exit status to use. */
int tool_helper_exec(int argc, char **argv);

#endif
