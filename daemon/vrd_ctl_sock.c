/* SPDX-License-Identifier: MIT */
/*
 * volrecd's control socket (vrd_ctl.h, docs/control.md): a Unix SOCK_SEQPACKET socket, one
 * datagram per request (its size bounded by the kernel's read: the bytes beyond the bound are
 * discarded, never held) and per reply, at most VRD_CTL_MAX_CLIENTS connections (more are
 * refused, counted and logged; running out of descriptors refuses a connection, never ends
 * the daemon), answered without ever blocking the service loop; acquisition and processing
 * run in their own threads.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <syslog.h>
#include <unistd.h>

#include "daemon/internal.h"
#include "daemon/vrd_ctl.h"

struct vrd_ctl_client {
	int fd; /* -1: free */
	struct vrd_ctl_peer peer;
};

struct vrd_ctl {
	struct vrd_ctl_ops svc;
	int lfd;     /* the listening socket */
	int ep;      /* epoll over lfd and the clients (level-triggered): what the service polls */
	int reserve; /* a spare descriptor, given up to accept and close one when none is left */
	struct vrd_ctl_client clients[VRD_CTL_MAX_CLIENTS];
	unsigned nclients, max_clients;
	uint64_t refused[2];       /* connections refused: [0] too many clients, [1] no fd */
	uint64_t refused_shown[2]; /* ... as of the last log line */
	uint64_t last_log_ns;
	char *buf;               /* one request, VRD_CTL_MAX_REQUEST + 1 bytes */
	char path[CFG_PATH_MAX]; /* the socket file, removed on close */
};

int vrd_ctl_open(const char *path, unsigned max_clients, const struct vrd_ctl_ops *svc,
                 struct vrd_ctl **out, char *err, size_t errlen)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct epoll_event ev = {.events = EPOLLIN};
	struct vrd_ctl *c;
	int rc;

	if (strlen(path) >= sizeof(sa.sun_path))
		return vr_err(err, errlen, -ENAMETOOLONG,
		              "control socket %s: the path is longer than the %zu bytes a socket "
		              "file may have",
		              path, sizeof(sa.sun_path) - 1);
	c = calloc(1, sizeof(*c));
	if (!c || !(c->buf = malloc(VRD_CTL_MAX_REQUEST + 1))) {
		if (c)
			free(c);
		return vr_err(err, errlen, -ENOMEM, "control socket: out of memory");
	}
	c->svc = *svc;
	c->max_clients = max_clients < 1                     ? 1
	                 : max_clients > VRD_CTL_MAX_CLIENTS ? VRD_CTL_MAX_CLIENTS
	                                                     : max_clients;
	c->lfd = c->ep = c->reserve = -1;
	for (unsigned i = 0; i < VRD_CTL_MAX_CLIENTS; i++)
		c->clients[i].fd = -1;
	snprintf(c->path, sizeof(c->path), "%s", path);
	memcpy(sa.sun_path, path, strlen(path) + 1);
	c->lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	c->ep = epoll_create1(EPOLL_CLOEXEC);
	c->reserve = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (c->lfd < 0 || c->ep < 0 || c->reserve < 0) {
		rc = vr_err_errno(err, errlen, -errno, "control socket");
		goto out_free;
	}
	/* a stale socket file of a dead daemon would make bind fail with EADDRINUSE */
	unlink(c->path);
	if (bind(c->lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(c->lfd, 64)) {
		rc = vr_err_errno(err, errlen, -errno, "control socket: cannot bind %s", c->path);
		goto out_free;
	}
	/* 0660 and the run_dir's group, whatever the umask (operators are in group volrec) */
	{
		char dir[CFG_PATH_MAX], *slash;
		struct stat st;

		snprintf(dir, sizeof(dir), "%s", c->path);
		slash = strrchr(dir, '/');
		if (slash)
			*slash = '\0';
		if (chmod(c->path, 0660) ||
		    (slash && stat(dir, &st) == 0 && st.st_gid != getegid() &&
		     chown(c->path, (uid_t)-1, st.st_gid))) {
			rc = vr_err_errno(err, errlen, -errno,
			                  "control socket %s: cannot set its mode", c->path);
			goto out_unlink;
		}
	}
	ev.data.u32 = UINT32_MAX;
	if (epoll_ctl(c->ep, EPOLL_CTL_ADD, c->lfd, &ev)) {
		rc = vr_err_errno(err, errlen, -errno, "control socket: epoll");
		goto out_unlink;
	}
	*out = c;
	return 0;
out_unlink:
	unlink(c->path);
out_free:
	if (c->lfd >= 0)
		close(c->lfd);
	if (c->ep >= 0)
		close(c->ep);
	if (c->reserve >= 0)
		close(c->reserve);
	free(c->buf);
	free(c);
	return rc;
}

int vrd_ctl_fd(struct vrd_ctl *c)
{
	return c->ep;
}

static void drop_client(struct vrd_ctl *c, struct vrd_ctl_client *cl)
{
	epoll_ctl(c->ep, EPOLL_CTL_DEL, cl->fd, NULL);
	close(cl->fd);
	cl->fd = -1;
	c->nclients--;
}

/* Refusals are counted; the log says so once, then at most once a minute with the count. */
static void note_refusals(struct vrd_ctl *c)
{
	uint64_t now = vr_mono_ns();

	if (c->refused[0] == c->refused_shown[0] && c->refused[1] == c->refused_shown[1])
		return;
	if (c->last_log_ns && now - c->last_log_ns < 60000000000ull)
		return;
	vrd_log(LOG_WARNING, NULL,
	        "control socket %s: refused %" PRIu64 " connection(s) beyond the %u allowed at "
	        "once and %" PRIu64 " for want of file descriptors (in all, since start)",
	        c->path, c->refused[0], c->max_clients, c->refused[1]);
	c->refused_shown[0] = c->refused[0];
	c->refused_shown[1] = c->refused[1];
	c->last_log_ns = now;
}

/* Take the pending connections: each a client while there is room, else refused with a
 * reply that says why. Out of descriptors, the spare one is given up to take a connection
 * off the queue and close it, so that the listener does not stay readable for nothing. */
static void accept_clients(struct vrd_ctl *c)
{
	for (int n = 0; n < VRD_CTL_BURST; n++) {
		struct epoll_event ev = {.events = EPOLLIN};
		struct vrd_ctl_client *cl = NULL;
		struct ucred cr;
		socklen_t len = sizeof(cr);
		int fd = accept4(c->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0 && (errno == EMFILE || errno == ENFILE) && c->reserve >= 0) {
			static const char full[] =
			        "{\"ok\":false,\"error\":\"volrecd is out of file descriptors: "
			        "this control connection is refused; try again\"}";

			close(c->reserve);
			fd = accept4(c->lfd, NULL, NULL, SOCK_CLOEXEC);
			if (fd >= 0) {
				/* a reply the client reads, not a reset it cannot tell apart */
				(void)!send(fd, full, sizeof(full) - 1,
				            MSG_DONTWAIT | MSG_NOSIGNAL);
				close(fd);
			}
			c->reserve = open("/dev/null", O_RDONLY | O_CLOEXEC);
			c->refused[1]++;
			continue;
		}
		if (fd < 0)
			break;
		for (unsigned i = 0; i < c->max_clients && !cl; i++)
			if (c->clients[i].fd < 0)
				cl = &c->clients[i];
		if (!cl) {
			char msg[160];
			int mlen = snprintf(
			        msg, sizeof(msg),
			        "{\"ok\":false,\"error\":\"too many control connections at "
			        "once (at most %u): try again when one has closed\"}",
			        c->max_clients);
			(void)!send(fd, msg, (size_t)mlen, MSG_DONTWAIT | MSG_NOSIGNAL);
			close(fd);
			c->refused[0]++;
			continue;
		}
		memset(cl, 0, sizeof(*cl));
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0) {
			cl->peer.have_uid = true;
			cl->peer.uid = cr.uid;
			cl->peer.pid = cr.pid;
		}
		ev.data.u32 = (uint32_t)(cl - c->clients);
		if (epoll_ctl(c->ep, EPOLL_CTL_ADD, fd, &ev)) {
			close(fd);
			c->refused[1]++;
			continue;
		}
		cl->fd = fd;
		c->nclients++;
	}
	note_refusals(c);
}

/* Read and answer one request of cl; false when the client is gone. */
static bool serve_client(struct vrd_ctl *c, struct vrd_ctl_client *cl)
{
	/* MSG_TRUNC: the datagram's whole length, its bytes beyond the buffer discarded by the
	 * kernel, never held here */
	ssize_t n = recv(cl->fd, c->buf, VRD_CTL_MAX_REQUEST + 1, MSG_DONTWAIT | MSG_TRUNC);
	bool refused;
	char *reply;

	if (n < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
	if (n == 0) /* the peer closed (clients never send an empty request) */
		return false;
	reply = vrd_ctl_answer(&c->svc, c->buf, (size_t)n, &cl->peer, &refused);
	if (!reply)
		reply = strdup("{\"ok\":false,\"error\":\"out of memory\"}");
	/* a peer that does not read its replies loses them; it never holds the daemon */
	if (reply && send(cl->fd, reply, strlen(reply), MSG_DONTWAIT | MSG_NOSIGNAL) < 0 &&
	    errno == EMSGSIZE) {
		static const char big[] = "{\"ok\":false,\"error\":\"the reply is larger than "
		                          "the socket's buffer allows\"}";
		(void)!send(cl->fd, big, sizeof(big) - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
	}
	free(reply);
	return true;
}

int vrd_ctl_process(struct vrd_ctl *c)
{
	struct epoll_event evs[VRD_CTL_BURST];
	int n = epoll_wait(c->ep, evs, VRD_CTL_BURST, 0), done = 0;

	for (int i = 0; i < n; i++) {
		uint32_t k = evs[i].data.u32;
		struct vrd_ctl_client *cl;

		if (k == UINT32_MAX) {
			accept_clients(c);
			continue;
		}
		cl = &c->clients[k];
		if (cl->fd < 0)
			continue;
		if ((evs[i].events & EPOLLIN) && serve_client(c, cl))
			done++;
		else if (evs[i].events & (EPOLLHUP | EPOLLERR | EPOLLIN))
			drop_client(c, cl);
	}
	return done;
}

void vrd_ctl_close(struct vrd_ctl *c)
{
	if (!c)
		return;
	for (unsigned i = 0; i < VRD_CTL_MAX_CLIENTS; i++)
		if (c->clients[i].fd >= 0)
			close(c->clients[i].fd);
	close(c->lfd);
	close(c->ep);
	if (c->reserve >= 0)
		close(c->reserve);
	unlink(c->path);
	free(c->buf);
	free(c);
}
