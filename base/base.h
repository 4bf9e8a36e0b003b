/* SPDX-License-Identifier: MIT */
/*
 * The base layer every module may use (prefix vr_): clocks, the scan-offset schedule, packed
 * 12-bit samples, error text, percentiles over a bounded window of samples, UTF-8 checking,
 * strict JSON through json-c, and option values and usage errors of command lines.
 * Nothing here logs, prints or allocates behind the caller's back except where a function says
 * so (the vr_cli_ helpers print the usage errors of a main()).
 */
#ifndef VOLREC_BASE_H
#define VOLREC_BASE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <time.h>

/* A function whose result must be looked at (curl's WARN_UNUSED_RESULT). */
#define VR_MUST_CHECK __attribute__((warn_unused_result))
/* A printf-like function: argument fmt is the format, first the first checked argument. */
#define VR_PRINTF(fmt, first) __attribute__((format(printf, fmt, first)))
#define VR_ARRAY_SIZE(a)      (sizeof(a) / sizeof((a)[0]))

/* ---- clocks ------------------------------------------------------------------------------- */

/* Nanoseconds on clock clk (CLOCK_MONOTONIC, CLOCK_REALTIME, ...). */
uint64_t vr_now_ns(clockid_t clk);
static inline uint64_t vr_mono_ns(void)
{
	return vr_now_ns(CLOCK_MONOTONIC);
}
static inline uint64_t vr_real_ns(void)
{
	return vr_now_ns(CLOCK_REALTIME);
}
/* Seconds on CLOCK_MONOTONIC, for durations. */
static inline double vr_mono_s(void)
{
	return (double)vr_now_ns(CLOCK_MONOTONIC) * 1e-9;
}
/* Sleep for ns nanoseconds on CLOCK_MONOTONIC, resuming after signals. */
void vr_sleep_ns(uint64_t ns);
/* Sleep until CLOCK_MONOTONIC reads t ns (absolute: no drift over a schedule), resuming after
 * signals. */
void vr_sleep_until_ns(uint64_t t);

/* A schedule of items at a fixed period on CLOCK_MONOTONIC (absolute times: no drift): the
 * n-th item since t0 is due at t0 + (n + 1) * period. A source paces its B-scans with it. */
#define VR_PACER_MAX_NS 1000000000000000000ull /* the longest period: about 32 years */
struct vr_pacer {
	uint64_t period_ns; /* per item, 0: unpaced (every item is due at once) */
	uint64_t slack_ns; /* further behind than this, the schedule restarts instead of bursting */
	uint64_t t0, n;    /* origin (CLOCK_MONOTONIC ns), items delivered since */
};

/* rate items per second (<= 0: unpaced; a period longer than VR_PACER_MAX_NS is that long),
 * slack_items periods of slack (at most VR_PACER_MAX_NS). */
void vr_pacer_init(struct vr_pacer *p, double rate, uint64_t slack_items);
/* Start the schedule now. */
void vr_pacer_start(struct vr_pacer *p);
/* When the next item is due (CLOCK_MONOTONIC ns, 0 when unpaced) into *due; far behind, the
 * schedule restarts and it is due now. -ETIMEDOUT, after sleeping timeout_ms, when it is due
 * later than that (timeout_ms < 0: no limit). */
int vr_pacer_due(struct vr_pacer *p, int timeout_ms, uint64_t *due);
/* vr_pacer_due, then sleep until the item is due. */
int vr_pacer_wait(struct vr_pacer *p, int timeout_ms);
/* Ns from now until the next item is due (0 when it is due). */
uint64_t vr_pacer_due_in(const struct vr_pacer *p);
/* One more item delivered. */
static inline void vr_pacer_done(struct vr_pacer *p)
{
	p->n++;
}

/* ---- files -------------------------------------------------------------------------------- */

/* Read n bytes at off of fd, resuming after signals and short reads: the bytes read (fewer than
 * n only where the file ends), or a negative errno. */
ssize_t vr_pread_upto(int fd, void *buf, size_t n, uint64_t off);
/* As vr_pread_upto, all n bytes: 0, -ENODATA when the file ends first, or a negative errno. */
int vr_pread_full(int fd, void *buf, size_t n, uint64_t off);
/* The folder of the running program (/proc/self/exe less its last component) into dir (len
 * bytes): 0, or a negative errno. */
int vr_self_dir(char *dir, size_t len);

/* ---- the scan-offset schedule ------------------------------------------------------------ */

/*
 * The VolRec scan offset of epoch e for strides (sx, sy) (docs/algorithms.md): the one
 * definition that sources, simulator, backends and the pipeline all use.
 */
void vr_scan_offset(uint64_t epoch, uint32_t sx, uint32_t sy, uint32_t *ox, uint32_t *oy);

/* ---- packed 12-bit samples ---------------------------------------------------------------- */

/* Unpack the pair of 12-bit samples in bytes p[0..2] (docs/algorithms.md §0): u12p is PFNC Mono12p
 * (LSB first), u12gv (gv true) GigE Vision Mono12Packed. */
static inline void vr_unpack12(const uint8_t *p, bool gv, uint32_t *s0, uint32_t *s1)
{
	if (gv) {
		*s0 = (uint32_t)p[0] << 4 | (p[1] & 0xfu);
		*s1 = (uint32_t)p[2] << 4 | p[1] >> 4;
	} else {
		*s0 = p[0] | (uint32_t)(p[1] & 0xfu) << 8;
		*s1 = (uint32_t)(p[1] >> 4) | (uint32_t)p[2] << 4;
	}
}

/* ---- error text --------------------------------------------------------------------------- */

/*
 * Write a message into err (errlen bytes, may be 0/NULL) and return code, so that a failing
 * function reads `return vr_err(err, errlen, -EINVAL, "what: %s", why);`. The rule
 * (docs/architecture.md): the callee names itself and what failed; a caller adds context
 * only when it adds information.
 */
int vr_err(char *err, size_t errlen, int code, const char *fmt, ...) VR_PRINTF(4, 5);
/* As vr_err, appending ": " and strerror(-code). */
int vr_err_errno(char *err, size_t errlen, int code, const char *fmt, ...) VR_PRINTF(4, 5);
/* Prepend "prefix: " to the message already in err (for a caller adding real context). */
void vr_err_prefix(char *err, size_t errlen, const char *fmt, ...) VR_PRINTF(3, 4);

/* ---- percentiles -------------------------------------------------------------------------- */

/* Nearest-rank percentile p (0..100) of v[0..n): sorts v in place. NAN when n is 0. */
double vr_percentile(double *v, size_t n, double p);

/* A bounded window of the most recent samples (latencies in ms, say). */
#define VR_WINDOW_SAMPLES 1024
struct vr_window {
	float v[VR_WINDOW_SAMPLES]; /* ring of samples */
	uint32_t next;              /* where the next sample goes */
	uint32_t n;                 /* samples held, <= VR_WINDOW_SAMPLES */
};
/* Add a sample; negative or NaN values count as 0. */
void vr_window_add(struct vr_window *w, double x);
/* Nearest-rank percentiles p[0..k) (0..100) of the samples into out; NAN when empty. */
void vr_window_percentiles(const struct vr_window *w, const double *p, double *out, size_t k);

/* ---- text --------------------------------------------------------------------------------- */

/* Whether s[0..len) is valid UTF-8 (no overlongs, surrogates or code points past U+10FFFF). */
bool vr_utf8_valid(const char *s, size_t len);
/*
 * Copy the NUL-terminated string s into out (outlen > 0), replacing each byte that is not part
 * of valid UTF-8 by U+FFFD and each control character (C0 but tab/newline, DEL, C1) by U+FFFD;
 * truncates at a character boundary. For text that comes from a shim, a camera or a file and goes to JSON,
 * logs or terminals. Returns the number of replacements.
 */
size_t vr_utf8_sanitize(const char *s, char *out, size_t outlen);

/* ---- JSON --------------------------------------------------------------------------------- */

struct json_object;
/*
 * Parse text[0..len) as exactly one JSON object, strictly: json-c's strict tokener at most depth
 * levels deep, whitespace only after the object, and refused as well what json-c 0.16 reads
 * even when strict: single quotes, NaN, Infinity and out-of-range numbers, a key given twice
 * in one object (json-c keeps the last) and a string holding U+0000 (json-c cuts keys there).
 * Returns the object (a new reference: json_object_put it), or NULL with why in err ("duplicate
 * key 'op' at byte 14 (each key once)"). Does not check UTF-8 (vr_utf8_valid).
 */
struct json_object *vr_json_parse_object(const char *text, size_t len, int depth, char *err,
                                         size_t errlen);

/* ---- command lines ------------------------------------------------------------------------ */

/* Strict option values: a whole number in [min, max] (digits only, no sign), seconds > 0 (zero:
 * >= 0) and at most VR_SECONDS_MAX (a decimal number: no sign, space, hexadecimal, inf or nan).
 * 0, or -EINVAL with *out untouched. */
#define VR_SECONDS_MAX 1e7
int vr_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out);
int vr_parse_seconds(const char *s, bool zero, double *out);
/* A comma-separated list of 1..max_n integers 0..max ("0,1,1"): into out[], *n entries; 0 or
 * -EINVAL (empty, an empty item, a sign, a value above max, more than max_n). */
int vr_parse_ordinals(const char *s, unsigned max, int *out, unsigned max_n, unsigned *n);

/*
 * For the main() of programs and subcommands, the only code that prints (prog starts each
 * message: "volrec status", "volrec view", ...). The value arg of option opt as above, or
 * "PROG: OPT ARG: need NEED" (seconds: "need a decimal number of seconds > 0 (or >= 0) and at
 * most 10000000") on stderr and -EINVAL.
 */
int vr_cli_u64(const char *prog, const char *opt, const char *arg, uint64_t min, uint64_t max,
               const char *need, uint64_t *out);
int vr_cli_seconds(const char *prog, const char *opt, const char *arg, bool zero, double *out);
/* What getopt_long's loop does with -h/--help (opt 'h': the usage on stdout, returns exit
 * status 0) and with an option the program does not know (on stderr, returns 2). */
int vr_cli_usage(void (*usage)(FILE *f), int opt);
/* 0 when getopt_long took every argument (optind == argc), else "PROG: unexpected argument
 * 'ARG'" on stderr and -EINVAL. */
int vr_cli_args_done(const char *prog, int argc, char **argv);

/* The options of a main() whose value is kept as it is given: getopt_long's code of each, and
 * where its value goes. */
struct vr_cli_str {
	int opt;
	const char **dst;
};
struct option;
/* getopt_long that stores the value of each option of strs[0..n) itself: returns the program's
 * next other option (for its switch), or -1 after the last one. */
int vr_cli_getopt(int argc, char **argv, const char *optstring, const struct option *longopts,
                  const struct vr_cli_str *strs, size_t n);
/* The same over a whole array strs. */
#define VR_CLI_GETOPT(argc, argv, optstring, longopts, strs)                                       \
	vr_cli_getopt(argc, argv, optstring, longopts, strs, sizeof(strs) / sizeof((strs)[0]))

/* The end of the getopt_long table of a main(): -h/--help (see vr_cli_usage) and the
 * terminating entry. */
#define VR_CLI_LONGOPTS_END                                                                        \
	{"help", no_argument, NULL, 'h'},                                                          \
	{                                                                                          \
		NULL, 0, NULL, 0                                                                   \
	}

/* ---- subcommands (command.c) ------------------------------------------------------------ */

/*
 * The subcommands of `volrec` and of its helper `volrec-process`. Each lives in its own cmd_*.c
 * and is declared there with VR_COMMAND(name, "one-line summary") { ... }, which defines
 * int cmd_name(int argc, char **argv) (argv[0] is the subcommand name). The build collects them
 * into the dispatch table. Exit codes every subcommand keeps: 0 success, 1 failure at run time,
 * 2 usage or config error, 3 no daemon running for the instance; further codes are documented
 * per subcommand.
 */
#define VR_COMMAND(name, summary) int cmd_##name(int argc, char **argv)

enum {
	VR_EXIT_OK = 0,
	VR_EXIT_FAIL = 1,
	VR_EXIT_USAGE = 2,
	VR_EXIT_NO_DAEMON = 3,
	VR_EXIT_INCOMPLETE = 4, /* done, but volumes are missing (record: see /missed) */
	VR_EXIT_REJECTED = 5,   /* the daemon refused the request (reload: reload_rejected) */
	VR_EXIT_TIMEOUT = 6,    /* the daemon did not answer or confirm in time */
	VR_EXIT_PERM = 7,       /* permission denied (shared memory, pid file, signal, output) */
	VR_EXIT_NOSPACE = 8,    /* output stopped: disk full or file size limit (file closed) */
};

/* A program's table of subcommands, ended by one with name NULL. */
struct vr_command {
	const char *name;
	const char *summary;
	int (*run)(int argc, char **argv); /* NULL: run by vr_command_main's other() */
};

/*
 * The main() of `volrec` and `volrec-process` (command.c): with argv[1] --help, -h or help,
 * usage(stdout) and 0; --version prints "PROG VERSION"; else the command argv[1] names runs
 * with argv + 1 (through other() when its run is NULL). No or an unknown command: usage(stderr)
 * and VR_EXIT_USAGE. Returns the exit status.
 */
int vr_command_main(const char *prog, const struct vr_command *cmds, void (*usage)(FILE *f),
                    int (*other)(int argc, char **argv), int argc, char **argv);

/* The end of the switch of a command that ends itself after --help (process, calibrate): opt
 * 'h' prints usage(stdout) and returns -1, any other as vr_cli_usage. */
int vr_command_usage(void (*usage)(FILE *f), int opt);
/* After the options of a command that takes no operand: 0 when given (its required options
 * are) and getopt took every argument; else "volrec CMD: unexpected arguments" or "volrec CMD:
 * MISSING" (what is required), the usage on stderr, and VR_EXIT_USAGE. */
int vr_command_required(const char *cmd, bool given, const char *missing, int argc,
                        void (*usage)(FILE *f));

#endif
