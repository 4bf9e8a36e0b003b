/* SPDX-License-Identifier: MIT */
/*
 * What the operator's tools share: the --instance/--run-dir/-c options, finding the daemon of an
 * instance (pid file, shared-memory header, /proc), opening a client with clear errors, signal
 * flags and free-space checks.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "clients/volrec/tools.h"
#include "config/config.h"
#include "ipc/ipc.h"

void tool_target_init(struct tool_target *t)
{
	memset(t, 0, sizeof(*t));
	optind = 1;
}

static bool instance_valid(const char *s)
{
	size_t n = strlen(s);

	if (n < 1 || n > VOLREC_INSTANCE_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char ch = s[i];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '_' || ch == '-'))
			return false;
	}
	return true;
}

/* A path option's value arg into dst[n]: 1, or -1 after "volrec CMD: NEED". */
static int set_path(char *dst, size_t n, const char *cmd, const char *need, const char *arg)
{
	if (!*arg || strlen(arg) >= n) {
		fprintf(stderr, "volrec %s: %s\n", cmd, need);
		return -1;
	}
	snprintf(dst, n, "%s", arg);
	return 1;
}

static int target_option(struct tool_target *t, const char *cmd, int opt, const char *arg)
{
	switch (opt) {
	case 'i':
	case TOOL_OPT_INSTANCE:
		if (!instance_valid(arg)) {
			fprintf(stderr,
			        "volrec %s: --instance '%s': need 1-%d characters of A-Z a-z 0-9 _ "
			        "-\n",
			        cmd, arg, VOLREC_INSTANCE_MAX);
			return -1;
		}
		snprintf(t->instance, sizeof(t->instance), "%s", arg);
		t->instance_set = true;
		return 1;
	case 'r':
	case TOOL_OPT_RUN_DIR:
		t->run_dir_set = true; /* (a wrong one ends the tool) */
		return set_path(t->run_dir, sizeof(t->run_dir), cmd,
		                "--run-dir: need a directory path", arg);
	case 'c':
	case TOOL_OPT_CONFIG:
		return set_path(t->config, sizeof(t->config), cmd, "-c: need a configuration file",
		                arg);
	case 't': {
		char prog[64];

		snprintf(prog, sizeof(prog), "volrec %s", cmd);
		return vr_cli_seconds(prog, "--timeout", arg, false, &t->timeout) ? -1 : 1;
	}
	default:
		return 0;
	}
}

int tool_getopt(struct tool_target *t, const char *cmd, int argc, char **argv,
                const char *optstring, const struct option *longopts)
{
	int opt, rc;

	do {
		opt = getopt_long(argc, argv, optstring, longopts, NULL);
		rc = opt == -1 ? 0 : target_option(t, cmd, opt, optarg);
	} while (rc > 0);
	return rc < 0 ? TOOL_OPT_ERROR : opt;
}

int tool_timeout_args(struct tool_target *t, const char *cmd, int argc, char **argv,
                      double *timeout, void (*usage)(FILE *f, const void *ctx), const void *ctx)
{
	static const struct option longopts[] = {
	        TOOL_COMMON_LONGOPTS,
	        {"timeout", required_argument, NULL, 't'},
	        VR_CLI_LONGOPTS_END,
	};
	int opt = tool_getopt(t, cmd, argc, argv, "i:r:c:t:h", longopts);

	if (opt == TOOL_OPT_ERROR)
		return VR_EXIT_USAGE;
	if (opt != -1) {
		usage(opt == 'h' ? stdout : stderr, ctx);
		return opt == 'h' ? VR_EXIT_OK : VR_EXIT_USAGE;
	}
	if (t->timeout)
		*timeout = t->timeout;
	return TOOL_ARGS_GO_ON;
}

int tool_usage(void (*usage)(FILE *f), int opt)
{
	return opt == TOOL_OPT_ERROR ? VR_EXIT_USAGE : vr_cli_usage(usage, opt);
}

int tool_target_finish(struct tool_target *t, const char *cmd)
{
	if (t->config[0]) {
		struct vr_config cfg;
		char err[CFG_ERR_MAX];

		cfg_defaults(&cfg);
		if (cfg_load(&cfg, t->config, err, sizeof(err)) < 0) {
			fprintf(stderr, "volrec %s: %s\n", cmd, err);
			cfg_free(&cfg);
			return VR_EXIT_USAGE;
		}
		if (!t->instance_set)
			snprintf(t->instance, sizeof(t->instance), "%s", cfg.instance);
		if (!t->run_dir_set)
			snprintf(t->run_dir, sizeof(t->run_dir), "%s", cfg.ipc.run_dir);
		t->status_interval_s = cfg.ipc.status_interval_ms / 1000.0;
		cfg_free(&cfg);
	}
	if (!t->instance[0])
		snprintf(t->instance, sizeof(t->instance), "default");
	if (!t->run_dir[0]) {
		const char *env = getenv("VOLREC_RUN_DIR");

		snprintf(t->run_dir, sizeof(t->run_dir), "%s",
		         env && *env ? env : VOLREC_DEFAULT_RUN_DIR);
	}
	return VR_EXIT_OK;
}

int tool_target_daemon(struct tool_target *t, const char *cmd, int argc, char **argv,
                       struct tool_daemon *d)
{
	char prog[64];
	int rc;

	snprintf(prog, sizeof(prog), "volrec %s", cmd);
	if (vr_cli_args_done(prog, argc, argv))
		return VR_EXIT_USAGE;
	rc = tool_target_finish(t, cmd);
	return rc ? rc : tool_daemon_require(t, cmd, d);
}

double tool_status_timeout(const struct tool_target *t)
{
	double s = 2.5 * t->status_interval_s;

	return s > 3.0 ? s : 3.0;
}

/* ---- the daemon ---------------------------------------------------------------------------- */

bool tool_pid_is_volrecd(int pid)
{
	char path[64], buf[512];
	ssize_t n;
	int fd;

	if (pid <= 0)
		return false;
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	/* "PID (comm) S ...": comm may hold spaces and parentheses, the state follows the last ')' */
	{
		char *open_p = strchr(buf, '('), *close_p = strrchr(buf, ')');

		if (!open_p || !close_p || close_p < open_p || close_p[1] != ' ')
			return false;
		if (close_p[2] == 'Z' || close_p[2] == 'X')
			return false; /* exited, not reaped yet */
		*close_p = '\0';
		return !strcmp(open_p + 1, "volrecd");
	}
}

/* Read the pid file: 0 with *pid (0 when absent), or a negative errno. */
static int read_pidfile(const struct tool_target *t, int *pid, char *path, size_t len)
{
	char buf[32];
	ssize_t n;
	long v;
	char *end;
	int fd;

	*pid = 0;
	if ((size_t)snprintf(path, len, "%s/%s.pid", t->run_dir, t->instance) >= len)
		return -ENAMETOOLONG;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT || errno == ENOTDIR ? 0 : -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	errno = 0;
	v = strtol(buf, &end, 10);
	if (errno || end == buf || v <= 0 || v > INT_MAX || (*end && *end != '\n'))
		return 0; /* not ours: treat as absent */
	*pid = (int)v;
	return 0;
}

/* Copy the data segment's header: 0, -ENOENT when absent, another negative errno. */
static int read_header(const char *instance, struct volrec_shm_header *h)
{
	char name[VOLREC_INSTANCE_MAX + 16];
	ssize_t n;
	int fd;

	snprintf(name, sizeof(name), "%s%s", VOLREC_SHM_PREFIX, instance);
	fd = shm_open(name, O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	n = pread(fd, h, sizeof(*h), 0);
	close(fd);
	if (n != (ssize_t)sizeof(*h) || h->magic != VOLREC_SHM_MAGIC)
		return -EPROTO;
	return 0;
}

int tool_daemon_find(const struct tool_target *t, struct tool_daemon *d)
{
	char pidpath[TOOL_PATH_MAX + 80];
	int rc, pid = 0, hrc;

	memset(d, 0, sizeof(*d));
	rc = read_pidfile(t, &pid, pidpath, sizeof(pidpath));
	if (rc < 0 && rc != -EACCES)
		return rc;
	hrc = read_header(t->instance, &d->header);
	d->have_header = hrc == 0;
	if (pid && tool_pid_is_volrecd(pid)) {
		d->pid = pid;
		return 0;
	}
	if (d->have_header && d->header.state != VOLREC_STATE_CLOSED &&
	    tool_pid_is_volrecd(d->header.writer_pid)) {
		d->pid = d->header.writer_pid;
		return 0;
	}
	if (rc == -EACCES || hrc == -EACCES)
		return -EACCES;
	if (pid)
		snprintf(d->why, sizeof(d->why), "%s names pid %d, which is not a running volrecd",
		         pidpath, pid);
	else if (d->have_header)
		snprintf(d->why, sizeof(d->why),
		         "no %s, and the shared memory /dev/shm/volrec.%s was left by pid %d, "
		         "which is not running",
		         pidpath, t->instance, d->header.writer_pid);
	else
		snprintf(d->why, sizeof(d->why), "no %s and no shared memory /dev/shm/volrec.%s",
		         pidpath, t->instance);
	return 0;
}

int tool_daemon_require(const struct tool_target *t, const char *cmd, struct tool_daemon *d)
{
	int rc = tool_daemon_find(t, d);

	if (rc == -EACCES) {
		fprintf(stderr,
		        "volrec %s: permission denied reading %s/%s.pid or /dev/shm/volrec.%s (run "
		        "as the daemon's user, root, or a member of group volrec)\n",
		        cmd, t->run_dir, t->instance, t->instance);
		return VR_EXIT_PERM;
	}
	if (rc < 0) {
		fprintf(stderr, "volrec %s: cannot look for the daemon of instance '%s': %s\n", cmd,
		        t->instance, strerror(-rc));
		return VR_EXIT_FAIL;
	}
	if (!d->pid) {
		fprintf(stderr, "volrec %s: no volrecd running for instance '%s' (%s)\n", cmd,
		        t->instance, d->why);
		return VR_EXIT_NO_DAEMON;
	}
	return VR_EXIT_OK;
}

/* What both mappings share: 0 -> 0, EACCES/EPERM -> 7, anything else 1. */
static int exit_for_common(int err)
{
	return !err ? VR_EXIT_OK : err == -EACCES || err == -EPERM ? VR_EXIT_PERM : VR_EXIT_FAIL;
}

int tool_exit_for(int err)
{
	return err == -ENOENT      ? VR_EXIT_NO_DAEMON
	       : err == -ETIMEDOUT ? VR_EXIT_TIMEOUT
	                           : exit_for_common(err);
}

int tool_exit_for_output(int err)
{
	return err == -ENOSPC || err == -EFBIG || err == -EDQUOT ? VR_EXIT_NOSPACE
	                                                         : exit_for_common(err);
}

/* What is wrong with the data segment of instance, into why: false when it validates (the
 * protocol error was elsewhere: its lease table) or cannot be looked at. */
static bool segment_problem(const char *instance, char *why, size_t len)
{
	char name[VOLREC_INSTANCE_MAX + 16];
	struct stat st;
	void *map;
	int fd, rc;

	snprintf(name, sizeof(name), "%s%s", VOLREC_SHM_PREFIX, instance);
	fd = shm_open(name, O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0)
		return false;
	if (fstat(fd, &st) || st.st_size <= 0) {
		close(fd);
		return false;
	}
	map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (map == MAP_FAILED)
		return false;
	rc = ipc_shm_validate(map, (size_t)st.st_size, why, len);
	munmap(map, (size_t)st.st_size);
	return rc == -EPROTO;
}

int tool_client_open(const struct tool_target *t, const char *cmd, unsigned topics, int rcvhwm,
                     struct volrec_client **out)
{
	char why[256];

	struct volrec_client_options o = {
	        .run_dir = t->run_dir, .topics = topics, .rcvhwm = rcvhwm};
	int rc = volrec_client_open_opts(t->instance, &o, out);

	if (!rc)
		return VR_EXIT_OK;
	switch (rc) {
	case -ENOENT:
		fprintf(stderr,
		        "volrec %s: no volrecd running for instance '%s' (no shared memory "
		        "/dev/shm/volrec.%s)\n",
		        cmd, t->instance, t->instance);
		break;
	case -EACCES:
	case -EPERM:
		fprintf(stderr,
		        "volrec %s: permission denied opening /dev/shm/volrec.%s or its lease "
		        "table (run as the daemon's user, root, or a member of group volrec)\n",
		        cmd, t->instance);
		break;
	case -EAGAIN:
		fprintf(stderr,
		        "volrec %s: volrecd of instance '%s' is still creating its shared memory "
		        "(not ready after 2 s); try again\n",
		        cmd, t->instance);
		return VR_EXIT_TIMEOUT;
	case -EPROTO:
		if (!segment_problem(t->instance, why, sizeof(why)))
			snprintf(why, sizeof(why),
			         "its lease table /dev/shm/volrec.%s.readers is of another "
			         "protocol version or malformed",
			         t->instance);
		fprintf(stderr, "volrec %s: cannot read instance '%s' (/dev/shm/volrec.%s): %s\n",
		        cmd, t->instance, t->instance, why);
		break;
	case -EUSERS:
		fprintf(stderr,
		        "volrec %s: every reader entry of instance '%s' is taken: raise "
		        "ipc.max_readers or stop a reader\n",
		        cmd, t->instance);
		break;
	default:
		fprintf(stderr, "volrec %s: cannot connect to instance '%s': %s\n", cmd,
		        t->instance, volrec_strerror(rc));
		break;
	}
	return tool_exit_for(rc);
}

/* ---- signals ------------------------------------------------------------------------------- */

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
	interrupted = sig;
}

void tool_catch_signals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = 0; /* no SA_RESTART: blocking calls return EINTR */
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
}

bool tool_interrupted(void)
{
	return interrupted != 0;
}

void tool_run_init(struct tool_run *r)
{
	memset(r, 0, sizeof(*r));
	r->restart_wait = -1;
	r->t0 = vr_mono_s();
}

/* An option of tool_getopt: 1 when it was -n, -s or -w (its value into r), 0 when it is none
 * of them, -1 (message printed) when its value is wrong. */
static int run_option(struct tool_run *r, const char *cmd, int opt, const char *arg)
{
	char prog[64];

	snprintf(prog, sizeof(prog), "volrec %s", cmd);
	switch (opt) {
	case 'n':
		return vr_cli_u64(prog, "--count", arg, 1, UINT64_MAX, "a whole number >= 1",
		                  &r->count)
		               ? -1
		               : 1;
	case 's':
		return vr_cli_seconds(prog, "--seconds", arg, false, &r->seconds) ? -1 : 1;
	case 'w':
		return vr_cli_seconds(prog, "--restart-wait", arg, true, &r->restart_wait) ? -1 : 1;
	default:
		return 0;
	}
}

int tool_run_getopt(struct tool_target *t, struct tool_run *r, const char *cmd, int argc,
                    char **argv, const char *optstring, const struct option *longopts)
{
	int opt, rc;

	do {
		opt = tool_getopt(t, cmd, argc, argv, optstring, longopts);
		rc = opt < 0 ? 0 : run_option(r, cmd, opt, optarg);
	} while (rc > 0);
	return rc < 0 ? TOOL_OPT_ERROR : opt;
}

bool tool_run_time_up(const struct tool_run *r, double now)
{
	return r->seconds && now - r->t0 >= r->seconds;
}

int tool_run_wait_ms(const struct tool_run *r, double now, int wait_ms)
{
	if (r->seconds && (r->t0 + r->seconds - now) * 1000 < wait_ms)
		wait_ms = (int)((r->t0 + r->seconds - now) * 1000) + 1;
	return wait_ms;
}

enum tool_presence tool_run_presence(struct tool_run *r, bool running, double now)
{
	if (!running && !r->away_since) {
		r->away_since = now;
		return r->restart_wait == 0 ? TOOL_DAEMON_GONE : TOOL_DAEMON_AWAY;
	}
	if (running && r->away_since) {
		r->away_since = 0;
		r->stopping = false;
		return TOOL_DAEMON_BACK;
	}
	if (!running && r->restart_wait > 0 && now - r->away_since >= r->restart_wait)
		return TOOL_DAEMON_GONE;
	return TOOL_DAEMON_SAME;
}
