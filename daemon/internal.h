/* SPDX-License-Identifier: MIT */
/*
 * Private declarations of volrecd (vrd_): command-line options.
 */
#ifndef VOLREC_DAEMON_INTERNAL_H
#define VOLREC_DAEMON_INTERNAL_H

#include <stdbool.h>

#define VRD_DEFAULT_CONFIG "/etc/volrec/volrecd.yaml"

struct vrd_options {
	const char *config; /* -c FILE, default VRD_DEFAULT_CONFIG */
	bool check;         /* --check: validate, print the effective config, exit */
};

/* What vrd_options_parse asks main() to do next. */
enum vrd_parse_result {
	VRD_RUN,        /* options in *opt, go on */
	VRD_EXIT_OK,    /* --help or --version was printed: exit 0 */
	VRD_EXIT_USAGE, /* a usage error was printed to stderr: exit 2 */
};

/* Parse volrecd's command line into *opt (prints --help, --version and usage errors). */
enum vrd_parse_result vrd_options_parse(int argc, char **argv, struct vrd_options *opt);

#endif
