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
#include <sys/wait.h>
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

int tool_helper_run(const char *const *args, char *err, size_t errlen)
{
	char path[PATH_MAX], tried[3 * PATH_MAX + 64];
	size_t n = 0;
	int status;
	pid_t pid;

	if (tool_program_find(VOLREC_HELPER, VOLREC_HELPER_DIR, path, sizeof(path), tried,
	                      sizeof(tried))) {
		snprintf(err, errlen,
		         "needs the processing helper " VOLREC_HELPER
		         ", which is not installed (looked for %s; VOLREC_EXEC_PATH=DIR names its "
		         "directory)",
		         tried);
		return -1;
	}
	while (args[n])
		n++;
	char **argv = calloc(n + 2, sizeof(*argv));
	if (!argv) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	argv[0] = (char *)VOLREC_HELPER;
	for (size_t i = 0; i < n; i++)
		argv[i + 1] = (char *)args[i];
	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid == 0) {
		execv(path, argv);
		fprintf(stderr, "volrec: cannot run %s: %s\n", path, strerror(errno));
		_exit(127);
	}
	free(argv);
	if (pid < 0) {
		snprintf(err, errlen, "cannot start %s: %s", path, strerror(errno));
		return -1;
	}
	while (waitpid(pid, &status, 0) < 0) {
		if (errno != EINTR) {
			snprintf(err, errlen, "waiting for %s: %s", path, strerror(errno));
			return -1;
		}
	}
	if (WIFSIGNALED(status)) {
		snprintf(err, errlen, "%s %s ended by signal %d", VOLREC_HELPER, args[0],
		         WTERMSIG(status));
		return -1;
	}
	return WEXITSTATUS(status);
}
