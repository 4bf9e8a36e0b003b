/* SPDX-License-Identifier: MIT */
/* File reads that do not stop half way, and where the running program lies (base.h). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"

ssize_t vr_pread_upto(int fd, void *buf, size_t n, uint64_t off)
{
	size_t done = 0;

	while (done < n) {
		ssize_t r = pread(fd, (char *)buf + done, n - done, (off_t)(off + done));

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			break;
		done += (size_t)r;
	}
	return (ssize_t)done;
}

int vr_pread_full(int fd, void *buf, size_t n, uint64_t off)
{
	ssize_t r = vr_pread_upto(fd, buf, n, off);

	if (r < 0)
		return (int)r;
	return (size_t)r < n ? -ENODATA : 0;
}

int vr_self_dir(char *dir, size_t len)
{
	char self[PATH_MAX], *slash;
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	if (n < 0)
		return -errno;
	self[n] = '\0';
	slash = strrchr(self, '/');
	if (!slash)
		return -ENOENT;
	*slash = '\0';
	if ((size_t)snprintf(dir, len, "%s", self) >= len)
		return -ENAMETOOLONG;
	return 0;
}
