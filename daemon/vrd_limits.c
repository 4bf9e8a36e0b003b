/* SPDX-License-Identifier: MIT */
/*
 * The daemon's file descriptors (docs/control.md "Limits"): the soft limit raised to the hard
 * one at start, and the connections the control socket and each publisher keep at once
 * derived from what is left, so that no number of clients can exhaust the descriptors the
 * pipeline needs (libzmq ends a process whose ipc:// listener meets EMFILE).
 */
#include <dirent.h>
#include <inttypes.h>
#include <sys/resource.h>
#include <syslog.h>

#include "daemon/internal.h"
#include "daemon/vrd_ctl.h"

/* Descriptors kept for the pipeline and what it opens later (sources, shims, files) */
#define FD_RESERVE 64

static uint64_t fd_limit = 1024, fd_room = 1024 - FD_RESERVE;

static unsigned open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	unsigned n = 0;

	if (!d)
		return 16;
	while (readdir(d))
		n++;
	closedir(d);
	return n > 2 ? n - 2 : 0; /* . and .. */
}

void vrd_limits_init(void)
{
	struct rlimit rl;
	uint64_t was;
	unsigned used = open_fds();

	if (getrlimit(RLIMIT_NOFILE, &rl))
		return;
	was = rl.rlim_cur;
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl))
			rl.rlim_cur = was;
	}
	fd_limit = rl.rlim_cur;
	fd_room = fd_limit > used + FD_RESERVE + 8 ? fd_limit - used - FD_RESERVE : 8;
	vrd_log(LOG_INFO, NULL,
	        "file descriptors: %" PRIu64 " (soft limit %s%" PRIu64
	        "); at once at most %u control "
	        "connections and %u per publisher (for ipc.max_readers 64)",
	        fd_limit, was == fd_limit ? "" : "raised from ", was, vrd_limits_ctl_max(),
	        vrd_limits_pub_max(64));
}

unsigned vrd_limits_ctl_max(void)
{
	uint64_t n = fd_room / 4;

	return n < 1 ? 1 : n > VRD_CTL_MAX_CLIENTS ? VRD_CTL_MAX_CLIENTS : (unsigned)n;
}

unsigned vrd_limits_pub_max(uint32_t max_readers)
{
	/* half of the room stays free: connections accepted beyond the bound hold a
	 * descriptor until they are shut down */
	uint64_t want = 2ull * max_readers < 64 ? 64 : 2ull * max_readers;
	uint64_t room = fd_room - vrd_limits_ctl_max() - fd_room / 2;

	if (room > fd_room)
		room = 1;
	return room < 1 ? 1 : room > want ? (unsigned)want : (unsigned)room;
}
