/* SPDX-License-Identifier: MIT */
/*
 * The control socket of volrecd (docs/control.md): a Unix SOCK_SEQPACKET socket at
 * <run_dir>/<instance>.ctl (0660, the run_dir's group) answering JSON requests get, set,
 * reset_history and status, one datagram each. This part parses, bounds and answers requests;
 * what a request does is the service's (callbacks), so that a set goes through the same live
 * path as a reload.
 */
#ifndef VOLREC_DAEMON_VRD_CTL_H
#define VOLREC_DAEMON_VRD_CTL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <json-c/json.h>

#include "base/base.h"
#include "config/config.h"

#define VRD_CTL_MAX_REQUEST 65536 /* bytes: larger requests get an error reply, unread */
#define VRD_CTL_MAX_CLIENTS 64    /* connections at once, at most; more are refused, counted */
#define VRD_CTL_MAX_KEYS    32    /* keys in one set */
#define VRD_CTL_MAX_DEPTH   16    /* nesting of a request, at most */
#define VRD_CTL_BURST       16    /* requests answered per vrd_ctl_process call */

#define VRD_CTL_VIA_MAX 96 /* bytes of a request's "via", at most */

/* Who sent a request. */
struct vrd_ctl_peer {
	bool have_uid;
	uid_t uid; /* over ipc://: the peer's uid (SO_PEERCRED) */
	pid_t pid;
	char via[VRD_CTL_VIA_MAX]; /* whom the peer asks for (the request's "via"), "" none */
};

/* What the service does for the control socket. Each returns 0 or a negative errno with a
 * message in err (sent back in the reply). Called from the thread that calls vrd_ctl_process. */
struct vrd_ctl_ops {
	void *ctx;
	/* The effective configuration (the one in force, runtime sets included). */
	const struct vr_config *(*config)(void *ctx);
	/* Apply next, which differs from config() in live keys only (paths[0..n) were set); the
	 * service applies it between volumes, logs it, sends an event and rewrites the
	 * effective configuration file. */
	int (*apply)(void *ctx, const struct vr_config *next, const char *const *paths, size_t n,
	             const struct vrd_ctl_peer *peer, char *err, size_t errlen);
	/* Reset the reconstruction history before the next epoch. */
	int (*reset_history)(void *ctx, const struct vrd_ctl_peer *peer, char *err, size_t errlen);
	/* The status object (a new reference; the same JSON as the status message). */
	struct json_object *(*status)(void *ctx);
	/* The live values of generation n as a JSON object's text (owned by the service), NULL
	 * when it is not kept; *current and *oldest: the generation in force and the oldest
	 * kept. NULL: the service keeps no generations. */
	const char *(*generation)(void *ctx, uint32_t n, uint32_t *current, uint32_t *oldest);
	/* Start a recording named name (checked: vrd_record_name_ok): raw, of count epochs, else
	 * processed, of count volumes; or of seconds seconds (0 both: until stopped). Stop the
	 * raw or the processed one in progress. */
	int (*record_start)(void *ctx, bool raw, const char *name, uint64_t count, double seconds,
	                    const struct vrd_ctl_peer *peer, char *err, size_t errlen);
	int (*record_stop)(void *ctx, bool raw, const struct vrd_ctl_peer *peer, char *err,
	                   size_t errlen);
};

struct vrd_ctl;

/* Bind the control socket at path (the socket file gets mode 0660 and the group of its
 * directory), keeping at most max_clients (<= VRD_CTL_MAX_CLIENTS) connections at once. On failure a negative errno and a message in err. */
VR_MUST_CHECK int vrd_ctl_open(const char *path, unsigned max_clients,
                               const struct vrd_ctl_ops *ops, struct vrd_ctl **out, char *err,
                               size_t errlen);
/* The file descriptor to poll for POLLIN (an epoll set, level-triggered: readable while a
 * connection or a request waits). */
int vrd_ctl_fd(struct vrd_ctl *c);
/* Answer up to VRD_CTL_BURST pending requests; never blocks. Returns how many were answered. */
int vrd_ctl_process(struct vrd_ctl *c);
/* Close the socket and remove its file. NULL is fine. */
void vrd_ctl_close(struct vrd_ctl *c);

/* The reply to one request (exposed for the fuzz harness and unit tests): request is len
 * bytes (not NUL-terminated); returns the reply text (malloc'ed, caller frees) or NULL when
 * out of memory. *refused tells whether the reply is an error. */
char *vrd_ctl_answer(const struct vrd_ctl_ops *ops, const char *request, size_t len,
                     const struct vrd_ctl_peer *peer, bool *refused);

#endif
