/* SPDX-License-Identifier: MIT */
/*
 * volrecd logging: structured journald entries when stderr is connected to the journal (or the
 * service runs under systemd), plain "volrecd[instance]: level: message" lines on stderr otherwise.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

/* every entry carries the location of vrd_log's caller, not of this file */
#define SD_JOURNAL_SUPPRESS_LOCATION 1
#include <systemd/sd-daemon.h>
#include <systemd/sd-journal.h>

#include "daemon/internal.h"

static struct {
	pthread_mutex_t lock;
	char instance[CFG_NAME_MAX];
	int max_prio; /* highest syslog priority number printed */
	bool journal; /* send with sd_journal_send */
} logger = {
        .lock = PTHREAD_MUTEX_INITIALIZER,
        .instance = "",
        .max_prio = LOG_INFO,
};

static int level_prio(enum cfg_log_level level)
{
	switch (level) {
	case CFG_LOG_ERROR:
		return LOG_ERR;
	case CFG_LOG_WARNING:
		return LOG_WARNING;
	case CFG_LOG_DEBUG:
		return LOG_DEBUG;
	case CFG_LOG_INFO:
	default:
		return LOG_INFO;
	}
}

/* JOURNAL_STREAM=<dev>:<ino> names the stream systemd connected stderr to; it only counts while
 * stderr still is that stream (a child whose stderr was redirected must print plainly). */
static bool stderr_is_journal(void)
{
	const char *js = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;

	if (!js || sscanf(js, "%llu:%llu", &dev, &ino) != 2)
		return false;
	if (fstat(STDERR_FILENO, &st) < 0)
		return false;
	return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void vrd_log_init(const char *instance, enum cfg_log_level level)
{
	const char *force = getenv("VOLRECD_LOG");

	pthread_mutex_lock(&logger.lock);
	snprintf(logger.instance, sizeof(logger.instance), "%s", instance ? instance : "");
	logger.max_prio = level_prio(level);
	if (force && !strcmp(force, "stderr"))
		logger.journal = false;
	else if (force && !strcmp(force, "journal"))
		logger.journal = true;
	else
		logger.journal =
		        stderr_is_journal() || (sd_booted() > 0 && getenv("INVOCATION_ID") &&
		                                !isatty(2) && !getenv("JOURNAL_STREAM"));
	pthread_mutex_unlock(&logger.lock);
}

void vrd_log_set_level(enum cfg_log_level level)
{
	pthread_mutex_lock(&logger.lock);
	logger.max_prio = level_prio(level);
	pthread_mutex_unlock(&logger.lock);
}

void vrd_log_set_instance(const char *instance)
{
	pthread_mutex_lock(&logger.lock);
	snprintf(logger.instance, sizeof(logger.instance), "%s", instance);
	pthread_mutex_unlock(&logger.lock);
}

static const char *prio_name(int prio)
{
	static const char *const names[] = {
	        [LOG_EMERG] = "error", [LOG_ALERT] = "error",     [LOG_CRIT] = "error",
	        [LOG_ERR] = "error",   [LOG_WARNING] = "warning", [LOG_NOTICE] = "notice",
	        [LOG_INFO] = "info",   [LOG_DEBUG] = "debug",
	};

	return prio >= 0 && prio <= LOG_DEBUG ? names[prio] : "debug";
}

void vrd_log_at(const char *file, int line, const char *func, int prio, const char *event,
                const char *fmt, ...)
{
	char msg[2048], code_file[256], code_line[32];
	va_list ap;

	pthread_mutex_lock(&logger.lock);
	if (prio > logger.max_prio) {
		pthread_mutex_unlock(&logger.lock);
		return;
	}
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (logger.journal) {
		/* the caller's location, as sd_journal_send() records its own */
		snprintf(code_file, sizeof(code_file), "CODE_FILE=%s", file);
		snprintf(code_line, sizeof(code_line), "CODE_LINE=%d", line);
		/* without an event the list ends (NULL) where VOLREC_EVENT would be */
		sd_journal_send_with_location(
		        code_file, code_line, func, "MESSAGE=%s", msg, "PRIORITY=%d", prio,
		        "SYSLOG_IDENTIFIER=volrecd", "VOLREC_INSTANCE=%s", logger.instance,
		        event && *event ? "VOLREC_EVENT=%s" : NULL, event, NULL);
	} else {
		fprintf(stderr, "volrecd[%s]: %s: %s\n", logger.instance, prio_name(prio), msg);
	}
	pthread_mutex_unlock(&logger.lock);
}
