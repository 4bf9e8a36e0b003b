/* SPDX-License-Identifier: MIT */
/*
 * `volrec view`: runs the web viewer volrec-view (clients/view/), a program of its own so
 * that `volrec` does not link libwebsockets, found where the processing helper is
 * (tool_program_find), installed in VOLREC_VIEW_DIR.
 * getopt: clients/view/main.c
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "clients/volrec/helper.h"

#ifndef VOLREC_VIEW_DIR
#define VOLREC_VIEW_DIR "/usr/local/libexec/volrec"
#endif
#define VIEW_PROGRAM "volrec-view"

VR_COMMAND(view, "serve a live web viewer of the daemon's views (browser, any number)")
{
	char path[PATH_MAX], tried[3 * PATH_MAX + 64];

	if (tool_program_find(VIEW_PROGRAM, VOLREC_VIEW_DIR, path, sizeof(path), tried,
	                      sizeof(tried))) {
		fprintf(stderr,
		        "volrec view: the viewer " VIEW_PROGRAM
		        " is not installed (looked beside volrec, in <prefix>/libexec/volrec and "
		        "in " VOLREC_VIEW_DIR "; VOLREC_EXEC_PATH=DIR names its folder)\n");
		return VR_EXIT_FAIL;
	}
	argv[0] = (char *)VIEW_PROGRAM;
	fflush(stdout);
	execv(path, argv);
	fprintf(stderr, "volrec view: cannot run %s: %s\n", path, strerror(errno));
	return VR_EXIT_FAIL;
}
