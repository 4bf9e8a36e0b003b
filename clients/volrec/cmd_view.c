/* SPDX-License-Identifier: MIT */
/*
 * `volrec view`: runs the web viewer volrec-view (clients/view/), a program of its own so
 * that `volrec` does not link libwebsockets. It is found, first match, in $VOLREC_EXEC_PATH
 * (when set, only there), beside the running volrec (the build tree), in
 * <prefix>/libexec/volrec/ for a volrec in <prefix>/bin/, and in VOLREC_VIEW_DIR.
 * getopt: clients/view/main.c
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"

#ifndef VOLREC_VIEW_DIR
#define VOLREC_VIEW_DIR "/usr/local/libexec/volrec"
#endif
#define VIEW_PROGRAM "volrec-view"

static int candidate(char *out, size_t len, const char *dir, const char *sub)
{
	if ((size_t)snprintf(out, len, "%s%s/" VIEW_PROGRAM, dir, sub) >= len)
		return -ENAMETOOLONG;
	return access(out, X_OK) ? -ENOENT : 0;
}

static int find_view(char *path, size_t len)
{
	const char *env = getenv("VOLREC_EXEC_PATH");
	char self[PATH_MAX];
	ssize_t n;

	if (env && *env)
		return candidate(path, len, env, "");
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		char *slash;

		self[n] = 0;
		slash = strrchr(self, '/');
		if (slash) {
			*slash = 0;
			if (!candidate(path, len, self, ""))
				return 0;
			slash = strrchr(self, '/');
			if (slash) {
				*slash = 0;
				if (!candidate(path, len, self, "/libexec/volrec"))
					return 0;
			}
		}
	}
	return candidate(path, len, VOLREC_VIEW_DIR, "");
}

VR_COMMAND(view, "serve a live web viewer of the daemon's views (browser, any number)")
{
	char path[PATH_MAX];

	if (find_view(path, sizeof(path))) {
		fprintf(stderr,
		        "volrec view: the viewer " VIEW_PROGRAM
		        " is not installed (looked beside volrec, in <prefix>/libexec/volrec and "
		        "in " VOLREC_VIEW_DIR "; VOLREC_EXEC_PATH=DIR names its folder)\n");
		return VR_EXIT_FAIL;
	}
	(void)argc;
	argv[0] = (char *)VIEW_PROGRAM;
	fflush(stdout);
	execv(path, argv);
	fprintf(stderr, "volrec view: cannot run %s: %s\n", path, strerror(errno));
	return VR_EXIT_FAIL;
}
