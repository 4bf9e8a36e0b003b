/* SPDX-License-Identifier: MIT */
/*
 * The client side of volrecd's control socket (docs/control.md): a Unix SOCK_SEQPACKET
 * connection to <run_dir>/<instance>.ctl, one JSON request per datagram and one reply per
 * request, in order. Used by `volrec get/set` and the web viewer.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "ipc/ipc.h"

int ipc_ctl_connect(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd, rc;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		rc = -errno;
		close(fd);
		return rc;
	}
	return fd;
}

int ipc_ctl_send(int fd, const char *json, size_t len)
{
	ssize_t n = send(fd, json, len, MSG_DONTWAIT | MSG_NOSIGNAL);

	if (n < 0)
		return -errno;
	return (size_t)n == len ? 0 : -EMSGSIZE;
}

int ipc_ctl_recv(int fd, int timeout_ms, char **out, size_t *len)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	ssize_t n;
	char *buf;
	int rc;

	*out = NULL;
	*len = 0;
	rc = poll(&p, 1, timeout_ms);
	if (rc < 0)
		return -errno;
	if (rc == 0)
		return -EAGAIN;
	/* the datagram's length first, then exactly that many bytes */
	n = recv(fd, NULL, 0, MSG_PEEK | MSG_TRUNC | MSG_DONTWAIT);
	if (n < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	if (n == 0) {
		char c;
		/* an empty datagram or the end: the daemon never sends an empty reply */
		(void)!recv(fd, &c, 0, MSG_DONTWAIT);
		return -EPIPE;
	}
	if ((size_t)n > IPC_CTL_REPLY_MAX) {
		char c;
		(void)!recv(fd, &c, 1, MSG_DONTWAIT | MSG_TRUNC);
		return -EMSGSIZE;
	}
	buf = malloc((size_t)n + 1);
	if (!buf)
		return -ENOMEM;
	n = recv(fd, buf, (size_t)n, MSG_DONTWAIT);
	if (n <= 0) {
		rc = n < 0 ? -errno : -EPIPE;
		free(buf);
		return rc;
	}
	buf[n] = '\0';
	*out = buf;
	*len = (size_t)n;
	return 0;
}
