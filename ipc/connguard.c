/* SPDX-License-Identifier: MIT */
/*
 * A bound on the connections a ZeroMQ socket that binds accepts (docs/protocol.md,
 * "Connections"): libzmq has no such option, and its ipc:// listener ends the process when
 * accept(2) fails with EMFILE. A thread reads the socket's monitor events; a connection
 * accepted beyond the bound is shut down at once (libzmq then closes it itself), counted and
 * logged once by the caller from the counters. With the listen backlog small, the descriptors
 * the process holds stay near the bound.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <zmq.h>

#include "ipc/internal.h"

struct ipc_connguard {
	void *mon;           /* PAIR connected to the monitor endpoint */
	void *watched;       /* the socket monitored (to stop its monitor) */
	unsigned max;        /* connections at once */
	unsigned fdcap;      /* entries of live */
	unsigned char *live; /* [fdcap] 1: an accepted connection counted on this descriptor */
	unsigned count;
	_Atomic uint64_t refused;
	_Atomic bool stop;
	pthread_t thread;
};

static void on_event(struct ipc_connguard *g, uint16_t ev, int fd)
{
	if (fd < 0 || (unsigned)fd >= g->fdcap)
		return;
	if (ev == ZMQ_EVENT_ACCEPTED) {
		if (g->count >= g->max) {
			shutdown(fd, SHUT_RDWR); /* libzmq sees the end and closes it */
			atomic_fetch_add(&g->refused, 1);
			return;
		}
		if (!g->live[fd]) {
			g->live[fd] = 1;
			g->count++;
		}
	} else if (g->live[fd]) { /* disconnected or closed */
		g->live[fd] = 0;
		g->count--;
	}
}

static void *guard_main(void *arg)
{
	struct ipc_connguard *g = arg;

	while (!atomic_load(&g->stop)) {
		zmq_msg_t a, b;
		uint16_t ev;
		int32_t value;

		zmq_msg_init(&a);
		if (zmq_msg_recv(&a, g->mon, 0) < 0) {
			zmq_msg_close(&a);
			if (zmq_errno() == ETERM)
				break;
			continue; /* the receive timeout: look at stop */
		}
		if (zmq_msg_size(&a) >= 6) {
			memcpy(&ev, zmq_msg_data(&a), 2);
			memcpy(&value, (char *)zmq_msg_data(&a) + 2, 4);
			on_event(g, ev, value);
		}
		zmq_msg_close(&a);
		/* the endpoint frame */
		zmq_msg_init(&b);
		zmq_msg_recv(&b, g->mon, 0);
		zmq_msg_close(&b);
	}
	return NULL;
}

int ipc_connguard_start(void *zctx, void *sock, const char *name, unsigned max,
                        struct ipc_connguard **out, char *err, size_t errlen)
{
	struct ipc_connguard *g = calloc(1, sizeof(*g));
	char ep[96];
	int timeo = 100, linger = 0, rc;

	if (!g)
		return vr_err(err, errlen, -ENOMEM, "%s: out of memory", name);
	g->max = max;
	g->fdcap = 1u << 20; /* the kernel's largest descriptor limit (fs.nr_open default) */
	g->live = calloc(g->fdcap, 1);
	g->watched = sock;
	snprintf(ep, sizeof(ep), "inproc://volrec-guard-%p", (void *)g);
	if (!g->live ||
	    zmq_socket_monitor(sock, ep,
	                       ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CLOSED)) {
		rc = vr_err(err, errlen, g->live ? -zmq_errno() : -ENOMEM,
		            "%s: cannot watch its connections: %s", name,
		            g->live ? zmq_strerror(zmq_errno()) : "out of memory");
		free(g->live);
		free(g);
		return rc;
	}
	g->mon = zmq_socket(zctx, ZMQ_PAIR);
	if (!g->mon || zmq_setsockopt(g->mon, ZMQ_RCVTIMEO, &timeo, sizeof(timeo)) ||
	    zmq_setsockopt(g->mon, ZMQ_LINGER, &linger, sizeof(linger)) ||
	    zmq_connect(g->mon, ep)) {
		rc = vr_err(err, errlen, -zmq_errno(), "%s: cannot watch its connections: %s", name,
		            zmq_strerror(zmq_errno()));
		goto fail;
	}
	rc = pthread_create(&g->thread, NULL, guard_main, g);
	if (rc) {
		rc = vr_err(err, errlen, -rc, "%s: cannot start the connection guard", name);
		goto fail;
	}
	*out = g;
	return 0;
fail:
	zmq_socket_monitor(sock, NULL, 0);
	if (g->mon)
		zmq_close(g->mon);
	free(g->live);
	free(g);
	return rc;
}

uint64_t ipc_connguard_refused(struct ipc_connguard *g)
{
	return g ? atomic_load(&g->refused) : 0;
}

void ipc_connguard_stop(struct ipc_connguard *g)
{
	if (!g)
		return;
	atomic_store(&g->stop, true);
	pthread_join(g->thread, NULL);
	zmq_socket_monitor(g->watched, NULL, 0);
	zmq_close(g->mon);
	free(g->live);
	free(g);
}
