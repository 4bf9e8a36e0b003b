/* SPDX-License-Identifier: MIT */
/*
 * Running the processing helper, git style: `volrec process ...` executes
 * `volrec-process process ...`, found (first match) in
 *   1. $VOLREC_EXEC_PATH, when set (and only there),
 *   2. the directory of the running volrec (the build tree: build/bin/),
 *   3. <prefix>/libexec/volrec/ for a volrec in <prefix>/bin/ (an installed tree, whatever
 *      its prefix),
 *   4. VOLREC_HELPER_DIR, the libexec directory of the build's PREFIX.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "clients/volrec/helper.h"

#ifndef VOLREC_HELPER_DIR
#define VOLREC_HELPER_DIR "/usr/local/libexec/volrec"
#endif

static bool candidate(char *out, size_t len, const char *dir, const char *sub, const char *name,
                      char *tried, size_t tlen)
{
	size_t n = strlen(tried);

	if ((size_t)snprintf(out, len, "%s%s/%s", dir, sub, name) >= len)
		return false;
	if (access(out, X_OK) == 0)
		return true;
	if (n < tlen)
		snprintf(tried + n, tlen - n, "%s%s", n ? ", " : "", out);
	return false;
}

int tool_program_find(const char *name, const char *dir, char *path, size_t len, char *tried,
                      size_t tlen)
{
	const char *env = getenv("VOLREC_EXEC_PATH");
	char self[PATH_MAX], *slash;

	tried[0] = '\0';
	if (env && *env)
		return candidate(path, len, env, "", name, tried, tlen) ? 0 : -ENOENT;
	if (!vr_self_dir(self, sizeof(self))) {
		if (candidate(path, len, self, "", name, tried, tlen))
			return 0;
		/* <prefix>/bin/volrec -> <prefix>/libexec/volrec/ */
		slash = strrchr(self, '/');
		if (slash) {
			*slash = '\0';
			if (candidate(path, len, self, "/libexec/volrec", name, tried, tlen))
				return 0;
		}
	}
	return candidate(path, len, dir, "", name, tried, tlen) ? 0 : -ENOENT;
}

int tool_helper_exec(int argc, char **argv)
{
	char path[PATH_MAX], tried[3 * PATH_MAX + 64];
	char **args;

	if (tool_program_find(VOLREC_HELPER, VOLREC_HELPER_DIR, path, sizeof(path), tried,
	                      sizeof(tried))) {
		fprintf(stderr,
		        "volrec %s: needs the processing helper " VOLREC_HELPER
		        ", which is not installed (looked for %s; VOLREC_EXEC_PATH=DIR names its "
		        "directory). It is built with volrec (make) and installed beside it (make "
		        "install, the volrecd package).\n",
		        argv[0], tried);
		return VR_EXIT_FAIL;
	}
	args = calloc((size_t)argc + 2, sizeof(*args));
	if (!args) {
		fprintf(stderr, "volrec %s: out of memory\n", argv[0]);
		return VR_EXIT_FAIL;
	}
	args[0] = (char *)VOLREC_HELPER;
	for (int i = 0; i < argc; i++)
		args[i + 1] = argv[i];
	fflush(stdout);
	execv(path, args);
	fprintf(stderr, "volrec %s: cannot run %s: %s\n", argv[0], path, strerror(errno));
	free(args);
	return VR_EXIT_FAIL;
}
