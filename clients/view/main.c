/* SPDX-License-Identifier: MIT */
/*
 * volrec-view, run as `volrec view`: the live web viewer of a volrecd instance (volrec(1),
 * docs/viewer.md). Parses the command line, finds the page's assets and the daemon's endpoints,
 * checks that nothing but loopback is served without TLS and tokens, then runs the feed thread
 * and the server until SIGINT/SIGTERM.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "clients/view/internal.h"
#include "config/config.h"
#include "ipc/ipc.h"

#ifndef VOLREC_VIEW_ASSETS
#define VOLREC_VIEW_ASSETS "/usr/local/share/volrec/view"
#endif

#define VW_DEFAULT_LISTEN "127.0.0.1:8090"

/* Exit codes of the volrec command (base/base.h). */
enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2 };

static struct vw_server *g_server;

/* One line of the log, valid UTF-8: what a browser or the daemon wrote (a message's type, a
 * key the daemon's error quotes) has its control characters as U+FFFD and its newlines and
 * tabs as spaces, so that it cannot start a line that seems to be the viewer's own. */
static void log_line(const char *fmt, va_list ap)
{
	char raw[2048], line[2048];
	const uint64_t now = vr_real_ns();
	const time_t sec = (time_t)(now / 1000000000u);
	struct tm tm;

	localtime_r(&sec, &tm);
	vsnprintf(raw, sizeof(raw), fmt, ap);
	vr_utf8_sanitize(raw, line, sizeof(line));
	for (char *p = line; *p; p++)
		if (*p == '\n' || *p == '\t')
			*p = ' ';
	fprintf(stderr, "%02d:%02d:%02d.%03ld volrec view: %s\n", tm.tm_hour, tm.tm_min, tm.tm_sec,
	        (long)(now / 1000000u % 1000u), line);
}

void vw_log(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_line(fmt, ap);
	va_end(ap);
}

/* Lines of each kind in the current second, and those left out of it. */
static struct {
	pthread_mutex_t lock;
	uint64_t window_ns[VW_LOG_KINDS]; /* CLOCK_MONOTONIC start of the current second */
	unsigned lines[VW_LOG_KINDS];     /* logged in it */
	uint64_t left_out[VW_LOG_KINDS];  /* not logged in it */
} g_limit = {.lock = PTHREAD_MUTEX_INITIALIZER};

static const char *const LOG_KIND[VW_LOG_KINDS] = {"refused browser message", "refused request",
                                                   "control error", "browser connect and leave",
                                                   "libwebsockets"};

/* With g_limit.lock held: close the kind's second if it ended, saying what it left out. */
static void limit_roll(enum vw_log_kind k, uint64_t now)
{
	if (now - g_limit.window_ns[k] < 1000000000u)
		return;
	if (g_limit.left_out[k])
		vw_log("%" PRIu64 " more %s lines left out (at most %d a second)",
		       g_limit.left_out[k], LOG_KIND[k], VW_LOG_BURST);
	g_limit.window_ns[k] = now;
	g_limit.lines[k] = 0;
	g_limit.left_out[k] = 0;
}

void vw_log_limited(enum vw_log_kind kind, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&g_limit.lock);
	limit_roll(kind, vr_mono_ns());
	if (g_limit.lines[kind] < VW_LOG_BURST) {
		g_limit.lines[kind]++;
		va_start(ap, fmt);
		log_line(fmt, ap);
		va_end(ap);
	} else {
		g_limit.left_out[kind]++;
	}
	pthread_mutex_unlock(&g_limit.lock);
}

void vw_log_flush(void)
{
	const uint64_t now = vr_mono_ns();

	pthread_mutex_lock(&g_limit.lock);
	for (int k = 0; k < VW_LOG_KINDS; k++)
		limit_roll((enum vw_log_kind)k, now);
	pthread_mutex_unlock(&g_limit.lock);
}

static void on_signal(int sig)
{
	if (g_server)
		vw_server_stop(g_server);
}

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: volrec view [--listen ADDR:PORT] [-i NAME | -c FILE] [-r DIR]\n"
	        "                   [--cert FILE --key FILE --token-file FILE] [OPTIONS]\n\n"
	        "Serve a live web viewer of a volrecd instance: en-face, B-scan, slice and render\n"
	        "panes, the daemon's rates and latency, and its view and dB-range controls.\n\n"
	        "  -l, --listen ADDR:PORT  where to listen (default " VW_DEFAULT_LISTEN
	        "; PORT 0: any\n"
	        "                          free port). Any address but loopback needs --cert,\n"
	        "                          --key and --token-file\n"
	        "  -i, --instance NAME     daemon instance (default \"default\")\n"
	        "  -r, --run-dir DIR       the daemon's ipc.run_dir (default $VOLREC_RUN_DIR, "
	        "else\n"
	        "                          /run/volrec)\n"
	        "  -c, --config FILE       take instance and run_dir from volrecd's configuration\n"
	        "      --cert FILE         TLS certificate (PEM); serves https and wss\n"
	        "      --key FILE          its private key (PEM)\n"
	        "      --token-file FILE   access tokens, lines 'view: TOKEN' and 'control: "
	        "TOKEN'\n"
	        "                          (not readable by others); requests without one get "
	        "401.\n"
	        "                          Without it (loopback only) local pages may watch, and\n"
	        "                          control needs the token made at start: open the\n"
	        "                          address printed, http://ADDR:PORT/?token=...\n"
	        "      --assets DIR        the page's files (default: beside the program, else\n"
	        "                          " VOLREC_VIEW_ASSETS ")\n"
	        "      --max-side N        reduce pictures to at most N pixels a side (block\n"
	        "                          maxima; default 1024, at least 64)\n"
	        "      --encoding MODE     auto (default: deflate for pictures over 16 KiB when "
	        "it\n"
	        "                          saves an eighth), raw or deflate\n"
	        "      --max-rate HZ       encode at most HZ volumes per second (default 60)\n"
	        "      --max-browsers N    browsers at once (default 16)\n"
	        "  -h, --help              this text\n\n"
	        "Exit status: 0 stopped by a signal, 1 failure, 2 usage or configuration error.\n"
	        "More: man volrec.\n");
}

static bool addr_loopback(const char *a)
{
	struct in_addr v4;
	struct in6_addr v6;

	if (!strcmp(a, "localhost"))
		return true;
	if (inet_pton(AF_INET, a, &v4) == 1)
		return (ntohl(v4.s_addr) >> 24) == 127;
	if (inet_pton(AF_INET6, a, &v6) == 1)
		return IN6_IS_ADDR_LOOPBACK(&v6);
	return false;
}

/* ADDR:PORT, [V6]:PORT or :PORT / *:PORT (every address). */
static int parse_listen(const char *s, char *addr, size_t alen, int *port)
{
	const char *colon;
	char *end;
	long p;
	size_t n;

	if (s[0] == '[') {
		const char *rb = strchr(s, ']');

		if (!rb || rb[1] != ':')
			return -EINVAL;
		n = (size_t)(rb - s - 1);
		colon = rb + 1;
		if (n >= alen)
			return -EINVAL;
		memcpy(addr, s + 1, n);
	} else {
		colon = strrchr(s, ':');
		if (!colon)
			return -EINVAL;
		n = (size_t)(colon - s);
		if (n >= alen)
			return -EINVAL;
		memcpy(addr, s, n);
	}
	addr[n] = 0;
	if (!strcmp(addr, "*") || !strcmp(addr, "0.0.0.0") || !strcmp(addr, "::"))
		addr[0] = 0;
	errno = 0;
	p = strtol(colon + 1, &end, 10);
	if (errno || *end || end == colon + 1 || p < 0 || p > 65535)
		return -EINVAL;
	if (addr[0]) {
		struct in_addr v4;
		struct in6_addr v6;

		if (strcmp(addr, "localhost") && inet_pton(AF_INET, addr, &v4) != 1 &&
		    inet_pton(AF_INET6, addr, &v6) != 1)
			return -EINVAL;
	}
	*port = (int)p;
	return 0;
}

/* The token file: not readable by others (the tokens are passwords), at most 64 KiB, parsed
 * by vw_tokens_parse. */
static int read_tokens(const char *path, struct vw_tokens *t)
{
	char text[65536], err[256];
	FILE *f = fopen(path, "r");
	struct stat st;
	size_t n;
	int rc;

	if (!f) {
		rc = -errno;
		fprintf(stderr, "volrec view: --token-file %s: %s\n", path, strerror(-rc));
		return rc;
	}
	if (fstat(fileno(f), &st) == 0 && (st.st_mode & 0007)) {
		fprintf(stderr,
		        "volrec view: --token-file %s: readable by others (mode %03o): chmod o-rwx "
		        "it\n",
		        path, st.st_mode & 0777);
		fclose(f);
		return -EPERM;
	}
	n = fread(text, 1, sizeof(text), f);
	rc = ferror(f) ? -EIO : n == sizeof(text) ? -EFBIG : 0;
	fclose(f);
	if (rc) {
		fprintf(stderr, "volrec view: --token-file %s: %s\n", path,
		        rc == -EFBIG ? "larger than 64 KiB" : strerror(-rc));
		return rc;
	}
	rc = vw_tokens_parse(text, n, t, err, sizeof(err));
	if (rc)
		fprintf(stderr, "volrec view: --token-file %s: %s\n", path, err);
	return rc;
}

static bool is_dir_with_index(const char *dir)
{
	char p[PATH_MAX + 64];

	snprintf(p, sizeof(p), "%s/index.html", dir);
	return access(p, R_OK) == 0;
}

/* The assets: --assets, else beside the program (build tree: build/bin -> build/share;
 * installed: <prefix>/libexec/volrec -> <prefix>/share), else the compiled-in folder. */
static int find_assets(const char *given, char *out, size_t len)
{
	static const char *const rel[] = {"/../share/volrec/view", "/../../share/volrec/view"};
	char self[PATH_MAX];
	int rc;

	if (given) {
		if (!is_dir_with_index(given)) {
			fprintf(stderr, "volrec view: --assets %s: no index.html there\n", given);
			return -ENOENT;
		}
		snprintf(out, len, "%s", given);
		return 0;
	}
	rc = vr_self_dir(self, sizeof(self));
	for (size_t i = 0; !rc && i < VR_ARRAY_SIZE(rel); i++) {
		char cand[PATH_MAX + 32];
		char real[PATH_MAX];

		snprintf(cand, sizeof(cand), "%s%s", self, rel[i]);
		if (is_dir_with_index(cand) && realpath(cand, real)) {
			snprintf(out, len, "%s", real);
			return 0;
		}
	}
	if (is_dir_with_index(VOLREC_VIEW_ASSETS)) {
		snprintf(out, len, "%s", VOLREC_VIEW_ASSETS);
		return 0;
	}
	fprintf(stderr,
	        "volrec view: the page's files are not installed (looked beside %s and "
	        "in " VOLREC_VIEW_ASSETS "); --assets DIR names them\n",
	        !rc ? self : "the program");
	return -ENOENT;
}

/* The value of an integer option in [min, max], or its message ("need an integer from MIN to
 * MAX") and -EINVAL. */
static int int_option(const char *opt, const char *arg, uint64_t min, uint64_t max, uint64_t *v)
{
	char need[64];

	snprintf(need, sizeof(need), "an integer from %llu to %llu", (unsigned long long)min,
	         (unsigned long long)max);
	return vr_cli_u64("volrec view", opt, arg, min, max, need, v);
}

enum {
	OPT_CERT = 0x100,
	OPT_KEY,
	OPT_TOKENS,
	OPT_ASSETS,
	OPT_MAX_SIDE,
	OPT_ENCODING,
	OPT_MAX_RATE,
	OPT_MAX_BROWSERS,
};

/* What main() gathers before it serves: the options as given, and what they resolve to. */
struct view_args {
	const char *listen, *instance, *run_dir, *config;
	const char *cert, *key, *token_file, *assets_opt;
	struct vw_server_opts so;
	struct vw_feed *feed;
	struct vw_tokens *tokens;
	char assets[VW_PATH_MAX];
	char ctl[VW_PATH_MAX + 64];
};

/* A step of main() that lets it go on. Every other value is main()'s exit status. */
#define VIEW_GO_ON (-1)

/* The options one by one into a: the strings as given, the numbers checked. */
static int parse_options(int argc, char **argv, struct view_args *a)
{
	static const struct option longopts[] = {
	        {"listen", required_argument, NULL, 'l'},
	        {"instance", required_argument, NULL, 'i'},
	        {"run-dir", required_argument, NULL, 'r'},
	        {"config", required_argument, NULL, 'c'},
	        {"cert", required_argument, NULL, OPT_CERT},
	        {"key", required_argument, NULL, OPT_KEY},
	        {"token-file", required_argument, NULL, OPT_TOKENS},
	        {"assets", required_argument, NULL, OPT_ASSETS},
	        {"max-side", required_argument, NULL, OPT_MAX_SIDE},
	        {"encoding", required_argument, NULL, OPT_ENCODING},
	        {"max-rate", required_argument, NULL, OPT_MAX_RATE},
	        {"max-browsers", required_argument, NULL, OPT_MAX_BROWSERS},
	        VR_CLI_LONGOPTS_END,
	};
	const struct vr_cli_str strs[] = {{'l', &a->listen},
	                                  {'i', &a->instance},
	                                  {'r', &a->run_dir},
	                                  {'c', &a->config},
	                                  {OPT_CERT, &a->cert},
	                                  {OPT_KEY, &a->key},
	                                  {OPT_TOKENS, &a->token_file},
	                                  {OPT_ASSETS, &a->assets_opt}};
	struct vw_feed *feed = a->feed;
	uint64_t v;
	int opt;

	optind = 1;
	while ((opt = VR_CLI_GETOPT(argc, argv, "l:i:r:c:h", longopts, strs)) != -1) {
		switch (opt) {
		case OPT_MAX_SIDE:
			if (int_option("--max-side", optarg, 64, 65536, &v))
				return EXIT_USAGE;
			feed->enc.max_side = (uint32_t)v;
			break;
		case OPT_ENCODING:
			if (!strcmp(optarg, "auto"))
				feed->enc.mode = VW_MODE_AUTO;
			else if (!strcmp(optarg, "raw"))
				feed->enc.mode = VW_MODE_RAW;
			else if (!strcmp(optarg, "deflate"))
				feed->enc.mode = VW_MODE_DEFLATE;
			else {
				fprintf(stderr,
				        "volrec view: --encoding %s: need auto, raw or deflate\n",
				        optarg);
				return EXIT_USAGE;
			}
			break;
		case OPT_MAX_RATE:
			if (int_option("--max-rate", optarg, 1, 1000, &v))
				return EXIT_USAGE;
			feed->max_rate = (double)v;
			break;
		case OPT_MAX_BROWSERS:
			if (int_option("--max-browsers", optarg, 1, 1024, &v))
				return EXIT_USAGE;
			a->so.max_sessions = (uint32_t)v;
			break;
		default:
			return vr_cli_usage(usage, opt);
		}
	}
	if (vr_cli_args_done("volrec view", argc, argv))
		return EXIT_USAGE;
	return VIEW_GO_ON;
}

/* The address to serve, and what serving it needs: TLS and tokens off loopback, the files
 * readable, a control token made now when no token file names one. */
static int check_serving(struct view_args *a)
{
	struct vw_server_opts *so = &a->so;
	int rc;

	if (parse_listen(a->listen, so->addr, sizeof(so->addr), &so->port)) {
		fprintf(stderr,
		        "volrec view: --listen %s: need ADDR:PORT with a numeric address, "
		        "localhost, [IPv6] or * (every address), and a port 0-65535\n",
		        a->listen);
		return EXIT_USAGE;
	}
	if (!a->cert != !a->key) {
		fprintf(stderr, "volrec view: --cert and --key go together\n");
		return EXIT_USAGE;
	}
	if (!(so->addr[0] && addr_loopback(so->addr)) && (!a->cert || !a->token_file)) {
		fprintf(stderr,
		        "volrec view: --listen %s is not a loopback address: serving it needs TLS "
		        "(--cert, --key) and access tokens (--token-file)\n",
		        a->listen);
		return EXIT_USAGE;
	}
	if (a->cert && (access(a->cert, R_OK) || access(a->key, R_OK))) {
		fprintf(stderr, "volrec view: %s %s: %s\n",
		        access(a->cert, R_OK) ? "--cert" : "--key",
		        access(a->cert, R_OK) ? a->cert : a->key, strerror(errno));
		return EXIT_USAGE;
	}
	if (a->token_file && read_tokens(a->token_file, a->tokens))
		return EXIT_USAGE;
	/* loopback without a token file: anyone local may watch, control needs a token made now */
	if (!a->token_file) {
		rc = vw_token_generate(a->tokens->control, sizeof(a->tokens->control));
		if (rc) {
			fprintf(stderr, "volrec view: cannot make a control token: %s\n",
			        strerror(-rc));
			return EXIT_FAIL;
		}
		snprintf(a->tokens->control_name, sizeof(a->tokens->control_name), "generated");
	}
	return VIEW_GO_ON;
}

/* The instance to watch (-c FILE, then -i/-r over it), its control endpoint and the page's
 * files. */
static int resolve_instance(struct view_args *a)
{
	struct vw_feed *feed = a->feed;
	const char *env = getenv("VOLREC_RUN_DIR");

	snprintf(feed->instance, sizeof(feed->instance), "default");
	snprintf(feed->run_dir, sizeof(feed->run_dir), "%s",
	         env && *env ? env : VOLREC_DEFAULT_RUN_DIR);
	if (a->config) {
		static struct vr_config cfg;
		char err[CFG_ERR_MAX];

		if (cfg_load(&cfg, a->config, err, sizeof(err))) {
			fprintf(stderr, "volrec view: %s\n", err);
			return EXIT_USAGE;
		}
		snprintf(feed->instance, sizeof(feed->instance), "%s", cfg.instance);
		snprintf(feed->run_dir, sizeof(feed->run_dir), "%s", cfg.ipc.run_dir);
		cfg_free(&cfg);
	}
	if (a->instance) {
		if (!ipc_instance_valid(a->instance)) {
			fprintf(stderr,
			        "volrec view: --instance %s: need 1 to %d of [A-Za-z0-9_-]\n",
			        a->instance, VOLREC_INSTANCE_MAX);
			return EXIT_USAGE;
		}
		snprintf(feed->instance, sizeof(feed->instance), "%s", a->instance);
	}
	if (a->run_dir)
		snprintf(feed->run_dir, sizeof(feed->run_dir), "%s", a->run_dir);
	if ((size_t)snprintf(a->ctl, sizeof(a->ctl), "ipc://%s/%s.ctl", feed->run_dir,
	                     feed->instance) >= sizeof(a->ctl)) {
		fprintf(stderr, "volrec view: --run-dir %s: too long\n", feed->run_dir);
		return EXIT_USAGE;
	}
	if (find_assets(a->assets_opt, a->assets, sizeof(a->assets)))
		return EXIT_FAIL;
	return VIEW_GO_ON;
}

/* The address to open on stdout, with the generated control token in it as Jupyter prints
 * it. */
static void print_address(const struct view_args *a)
{
	const char *host = a->so.addr[0] ? a->so.addr : "0.0.0.0";
	bool v6 = strchr(host, ':') != NULL;

	printf("volrec view: serving %s://%s%s%s:%d/%s%s for volrecd '%s' (%s)%s\n",
	       a->cert ? "https" : "http", v6 ? "[" : "", host, v6 ? "]" : "",
	       vw_server_port(g_server),
	       a->token_file ? "" : "?token=", a->token_file ? "" : a->tokens->control,
	       a->feed->instance, a->feed->run_dir, a->token_file ? "; add ?token=TOKEN" : "");
	fflush(stdout);
}

/* The server and the feed thread until SIGINT/SIGTERM. */
static int serve(struct view_args *a)
{
	struct vw_feed *feed = a->feed;
	struct sigaction sa;
	int rc;

	a->so.cert = a->cert;
	a->so.key = a->key;
	a->so.tokens = a->tokens;
	a->so.open_view = !a->token_file;
	a->so.assets = a->assets;
	a->so.ctl_endpoint = a->ctl;
	a->so.instance = feed->instance;
	rc = vw_server_create(&a->so, feed, &g_server);
	if (rc)
		return EXIT_FAIL;
	feed->wake = vw_server_wake;
	feed->wake_ctx = g_server;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	if (vw_feed_start(feed)) {
		vw_log("cannot start the feed thread");
		vw_server_destroy(g_server);
		return EXIT_FAIL;
	}
	print_address(a);
	vw_log("page from %s; control through %s", a->assets, a->ctl);
	rc = vw_server_run(g_server);
	vw_feed_stop(feed);
	vw_server_destroy(g_server);
	g_server = NULL;
	vw_log("stopped");
	return rc ? EXIT_FAIL : EXIT_OK;
}

int main(int argc, char **argv)
{
	static struct vw_feed feed;
	static struct vw_tokens tokens;
	static struct view_args a;
	int rc;

	a = (struct view_args){
	        .listen = VW_DEFAULT_LISTEN,
	        .so = {.max_message = 4096, .max_sessions = 16},
	        .feed = &feed,
	        .tokens = &tokens,
	};
	feed.enc = (struct vw_encode_opts){
	        .mode = VW_MODE_AUTO, .max_side = 1024, .deflate_min = 16384, .level = 1};
	feed.max_rate = 60;
	rc = parse_options(argc, argv, &a);
	if (rc == VIEW_GO_ON)
		rc = check_serving(&a);
	if (rc == VIEW_GO_ON)
		rc = resolve_instance(&a);
	if (rc == VIEW_GO_ON)
		rc = serve(&a);
	return rc;
}
