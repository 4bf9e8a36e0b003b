/* SPDX-License-Identifier: MIT */
/*
 * Shared helpers of the operator's tools (`volrec status/watch/record/snapshot/reload/stop`):
 * the common options, finding and signalling the daemon, status/event JSON.
 */
#ifndef VOLREC_CLIENTS_TOOLS_H
#define VOLREC_CLIENTS_TOOLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <getopt.h>

#include <volrec/client.h>
#include <volrec/protocol.h>

#include "base/base.h"

/* ---- the instance a tool talks to (tool_common.c) ---------------------------------------- */

#define TOOL_PATH_MAX 4096

struct tool_target {
	char instance[VOLREC_INSTANCE_MAX + 1]; /* --instance, default "default" */
	char run_dir[TOOL_PATH_MAX]; /* --run-dir, default $VOLREC_RUN_DIR or /run/volrec */
	char config[TOOL_PATH_MAX];  /* -c FILE, "" when not given */
	double status_interval_s;    /* from -c (ipc.status_interval_ms), else 0 */
	double timeout;              /* -t/--timeout SECONDS of the tools that have it, else 0 */
	bool instance_set, run_dir_set;
};

/* Long options every tool accepts; their codes are above 0x100 so tools can add their own. */
enum {
	TOOL_OPT_INSTANCE = 0x100,
	TOOL_OPT_RUN_DIR,
	TOOL_OPT_CONFIG,
};
#define TOOL_COMMON_LONGOPTS                                                                       \
	{"instance", required_argument, NULL, TOOL_OPT_INSTANCE},                                  \
	        {"run-dir", required_argument, NULL, TOOL_OPT_RUN_DIR},                            \
	{                                                                                          \
		"config", required_argument, NULL, TOOL_OPT_CONFIG                                 \
	}
#define TOOL_COMMON_HELP                                                                           \
	"  -i, --instance NAME  daemon instance (default \"default\")\n"                           \
	"  -r, --run-dir DIR    the daemon's ipc.run_dir (default $VOLREC_RUN_DIR, else\n"         \
	"                       /run/volrec)\n"                                                    \
	"  -c, --config FILE    take instance and run_dir from volrecd's configuration file\n"     \
	"                       (--instance/--run-dir given as well override it)\n"                \
	"  -h, --help           this text\n"
#define TOOL_EXIT_HELP                                                                             \
	"Exit status: 0 success, 1 failure, 2 usage or configuration error, 3 no daemon\n"         \
	"running for the instance, 6 the daemon's shared memory not ready in time, 7\n"            \
	"permission denied (shared memory, pid file, signal)"

/* Empty t and start reading a command line (optind = 1). */
void tool_target_init(struct tool_target *t);
/* A code of tool_getopt: a common option's value was wrong, the message printed. */
#define TOOL_OPT_ERROR (-2)
/*
 * getopt_long over a tool's command line (optstring with "i:r:c:", longopts with
 * TOOL_COMMON_LONGOPTS) that applies the common options to t itself, and -t/--timeout SECONDS
 * (into t->timeout) where optstring has "t:": returns the tool's next own option, -1 after the
 * last option, or TOOL_OPT_ERROR (exit with VR_EXIT_USAGE).
 */
int tool_getopt(struct tool_target *t, const char *cmd, int argc, char **argv,
                const char *optstring, const struct option *longopts);
/* The end of a tool's switch over tool_getopt: VR_EXIT_USAGE after TOOL_OPT_ERROR, else as
 * vr_cli_usage (the help after -h, exit 0; a usage error after an option the tool lacks). */
int tool_usage(void (*usage)(FILE *f), int opt);
/* What tool_timeout_args returns when the tool goes on. */
#define TOOL_ARGS_GO_ON (-1)
/*
 * The options of a tool whose only own one is -t/--timeout SECONDS: the common ones into t, the
 * timeout into *timeout; usage(f, ctx) prints the tool's help. Returns TOOL_ARGS_GO_ON with
 * optind at the first operand, else the exit status to end with (0 after --help, VR_EXIT_USAGE
 * after a wrong option, its message printed).
 */
int tool_timeout_args(struct tool_target *t, const char *cmd, int argc, char **argv,
                      double *timeout, void (*usage)(FILE *f, const void *ctx), const void *ctx);
/* Apply -c (cfg_load) and fill the defaults. Prints the error; returns a VR_EXIT_ code. */
int tool_target_finish(struct tool_target *t, const char *cmd);

/* How long to wait for a status message by default: 2.5 intervals when -c gave the interval,
 * else 3 s (the default interval is 1 s). */
double tool_status_timeout(const struct tool_target *t);

/* ---- the daemon ---------------------------------------------------------------------------- */

/* What the tools can learn without talking to the daemon. */
struct tool_daemon {
	int pid;                         /* the running volrecd, 0 when none */
	bool have_header;                /* the data segment exists and its header was read */
	struct volrec_shm_header header; /* a copy of it */
	char why[TOOL_PATH_MAX + 256];   /* when pid == 0: what was looked at */
};

/*
 * Find the daemon of t: the pid file (a live process whose /proc/PID/comm is volrecd), else the
 * data segment's writer pid (checked the same way); copies the segment header when there is one.
 * Returns 0 (d->pid may be 0: no daemon; d->why says what was found), -EACCES when the pid file
 * or the segment cannot be read, another negative errno on other errors.
 */
int tool_daemon_find(const struct tool_target *t, struct tool_daemon *d);

/* True when pid is a live (not zombie) process whose comm is "volrecd". */
bool tool_pid_is_volrecd(int pid);

/*
 * Find the daemon and say why not, as every tool does: returns VR_EXIT_OK with d filled and
 * d->pid != 0, else prints "volrec CMD: ..." and returns VR_EXIT_NO_DAEMON, VR_EXIT_PERM or
 * VR_EXIT_FAIL.
 */
int tool_daemon_require(const struct tool_target *t, const char *cmd, struct tool_daemon *d);
/* After a tool's options: no operand left (vr_cli_args_done), tool_target_finish, then
 * tool_daemon_require into d. Prints the error; returns a VR_EXIT_ code. */
int tool_target_daemon(struct tool_target *t, const char *cmd, int argc, char **argv,
                       struct tool_daemon *d);

/* Open a libvolrec client on t with the given topics; prints the error and returns a VR_EXIT_
 * code (VR_EXIT_OK with *out set). */
int tool_client_open(const struct tool_target *t, const char *cmd, unsigned topics, int rcvhwm,
                     struct volrec_client **out);

/* Map a negative errno of the daemon side (finding it, its shared memory, signalling it) to an
 * exit code: ENOENT -> 3 no daemon, EACCES/EPERM -> 7, ETIMEDOUT -> 6, else 1. */
int tool_exit_for(int err);
/* Map a negative errno of the tool's own output (-o FILE or DIR) to an exit code: ENOSPC/EDQUOT/
 * EFBIG -> 8, EACCES/EPERM -> 7, anything else (a missing directory included) -> 1. */
int tool_exit_for_output(int err);

/* ---- a tool that follows the daemon for a while (record, watch) ------------------------- */

#define TOOL_RUN_LONGOPTS                                                                          \
	{"count", required_argument, NULL, 'n'}, {"seconds", required_argument, NULL, 's'},        \
	{                                                                                          \
		"restart-wait", required_argument, NULL, 'w'                                       \
	}

struct tool_run {
	uint64_t count;      /* -n/--count: end after this many volumes, 0: no limit */
	double seconds;      /* -s/--seconds: end this long after t0, 0: no limit */
	double restart_wait; /* -w/--restart-wait: wait this long for a daemon gone, -1: forever */
	double t0;           /* vr_mono_s() at the start */
	double away_since;   /* vr_mono_s() when the daemon was found gone, 0 while it runs */
	bool stopping;       /* the daemon announced `stopping` */
};

/* No limits, t0 now. */
void tool_run_init(struct tool_run *r);
/* tool_getopt that also takes -n, -s and -w (TOOL_RUN_LONGOPTS) into r: the tool's next own
 * option, -1 after the last option, or TOOL_OPT_ERROR (a wrong value, its message printed). */
int tool_run_getopt(struct tool_target *t, struct tool_run *r, const char *cmd, int argc,
                    char **argv, const char *optstring, const struct option *longopts);
/* True when --seconds have passed at now. */
bool tool_run_time_up(const struct tool_run *r, double now);
/* wait_ms, cut to what is left of --seconds at now. */
int tool_run_wait_ms(const struct tool_run *r, double now, int wait_ms);

/* What tool_run_presence saw change. */
enum tool_presence {
	TOOL_DAEMON_SAME, /* nothing */
	TOOL_DAEMON_AWAY, /* it went away: wait for it */
	TOOL_DAEMON_BACK, /* it came back */
	TOOL_DAEMON_GONE, /* away for longer than --restart-wait: end */
};
/* Whether the daemon runs at now: keep r->away_since and r->stopping and say what changed. */
enum tool_presence tool_run_presence(struct tool_run *r, bool running, double now);

/* SIGINT/SIGTERM set a flag instead of killing the tool (so files get closed). */
void tool_catch_signals(void);
bool tool_interrupted(void);

/* ---- signalling the daemon (tool_control.c) ---------------------------------------------- */

/* How long reload and stop wait for the confirmation by default (-t/--timeout), seconds. */
#define TOOL_CONTROL_TIMEOUT 30.0
/* A command that signals the daemon and waits for its confirmation (reload, stop). */
struct tool_control {
	const char *name;      /* subcommand */
	const char *help;      /* paragraph for --help */
	const char *exit_help; /* appended to the exit-status list */
	int signal;            /* sent to volrecd */
	/* Wait until deadline (vr_mono_s() clock) for the confirmation; c may be NULL (no
	 * subscription). Prints the outcome; returns the exit status. */
	int (*confirm)(const struct tool_control *ctl, const struct tool_target *t, int pid,
	               struct volrec_client *c, double t_signal, double deadline, double timeout);
};

/* Parse the command line, find the daemon, subscribe, signal it, confirm. Returns the exit
 * status. */
int tool_control_run(const struct tool_control *ctl, int argc, char **argv);

/* ---- JSON (tool_json.c): the daemon's status and event messages, read with json-c ------ */

/* Parse one JSON object (a status or event message) of len bytes strictly, as
 * vr_json_parse_object at json-c's default depth: a json-c object the caller releases with
 * json_object_put, or NULL with the reason (and byte offset) in err. */
struct json_object *tool_json_parse(const char *text, size_t len, char *err, size_t errlen);
/* The value at a dotted path ("rates.volumes_per_s", "geometry.volume.0"), NULL if absent. */
struct json_object *tool_json_at(struct json_object *o, const char *path);
/* Values at a path; the default when absent or of another type (a number for num: int or
 * double; u64 exact to 2^64 - 1, as session ids need). */
double tool_json_num(struct json_object *o, const char *path, double def);
uint64_t tool_json_u64(struct json_object *o, const char *path, uint64_t def);
bool tool_json_bool(struct json_object *o, const char *path, bool def);
/* The string at path into buf (len > 0), made safe for a terminal and for UTF-8 attributes
 * (vr_utf8_sanitize); "" and false when absent or not a string. */
bool tool_json_str(struct json_object *o, const char *path, char *buf, size_t len);

/* ---- the control socket (tool_ctl.c) ------------------------------------------------------ */

/*
 * Send one JSON request to the control socket of t and wait up to timeout s (plus one: a request
 * volrecd read in time is answered at once) for the reply. Prints "volrec CMD: ..." on errors and
 * returns a VR_EXIT_ code: VR_EXIT_OK with *reply set (the caller puts it), VR_EXIT_NO_DAEMON (no
 * socket, no connection), VR_EXIT_PERM, VR_EXIT_TIMEOUT (no answer) or VR_EXIT_FAIL.
 */
int tool_ctl_request(const struct tool_target *t, const char *cmd, struct json_object *req,
                     double timeout, struct json_object **reply);
/* tool_ctl_request that prints nothing: the reason of a failure in why (len bytes). */
int tool_ctl_try(const struct tool_target *t, struct json_object *req, double timeout,
                 struct json_object **reply, char *why, size_t len);
/* VR_EXIT_OK when reply says "ok": true, else prints "volrec CMD: ERROR" (the daemon's error)
 * and returns VR_EXIT_REJECTED. */
int tool_ctl_checked(struct json_object *reply, const char *cmd);

/* ---- `volrec record --raw | --in-daemon` (cmd_record_raw.c) ------------------------------- */

/* Ask the daemon of tg (options read, not finished) to record (raw) raw spectra into
 * <record.dir>/NAME.vrr for run->count epochs, else the volumes it publishes into
 * <record.dir>/NAME.h5 for run->count volumes, or for run->seconds (0: until Ctrl-C); follow
 * it with a progress line on a terminal, and stop it on Ctrl-C. The exit status. */
int record_in_daemon(struct tool_target *tg, const struct tool_run *run, const char *name,
                     bool raw);

/* ---- status screen (tool_status.c) -------------------------------------------------------- */

/* Print the status screen from a parsed status message (and the segment header, may be
 * NULL). eol is the line end ("\n", or "\033[K\n" when redrawing a terminal). */
void tool_status_print(FILE *f, struct json_object *st, const struct volrec_shm_header *h,
                       const char *eol);
/* One line for an event message: "HH:MM:SS event: message". */
void tool_event_line(struct json_object *ev, char *buf, size_t len);
/* Wait up to timeout_s for the next status message on c (subscribed to it); its text is
 * copied into *text (malloc'ed, caller frees). 0, -ETIMEDOUT, -EINTR or another error. */
int tool_wait_status(struct volrec_client *c, double timeout_s, char **text);

#endif
