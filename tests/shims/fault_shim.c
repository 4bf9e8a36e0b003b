/* SPDX-License-Identifier: MIT */
/*
 * libvolrec_fault_shim.so: a test shim that injects failures on command, so the daemon's
 * fault handling (retry, back-off, degraded status, recovery) can be tested for real.
 * Data: every A-scan is the same fixed spectrum (three reflectors), paced at the rate.
 * args (all optional): fail_open, fail_configure, fail_start, fail_stop, exclusive (bool: open()
 * fails with -EBUSY while another handle is open, like a device one process holds); stall_stop_ms M
 * (stop() blocks M ms, like a driver that ignores every deadline); fail_every N and
 * timeout_every N (every Nth acquire fails with -EIO / times out); stall_ms M with
 * stall_after N (acquire N+1 blocks M ms, once); control_file PATH (see docs/shim.md: "ok",
 * "error N", "timeout N", "stall MS [N]", "hold", "return V [N]", "flags F [N]",
 * "timestamp T [N]", read before every acquire);
 * device_hex and text_hex (bytes in hex, e.g. "ff 41": the info device string, and a suffix
 * of every error text, so that texts that are not UTF-8 can be tested); crash_after N with
 * crash_signal SEGV or ABRT (default SEGV): acquire N+1 kills the process with that signal, as
 * a driver crashing in-process would.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <volrec/shim.h>

#include "base/base.h"
#include "sources/shim_args.h"
#include "sources/shim_common.h"

#define CONTROL_MAX 256

struct fault_shim {
	struct shim_err
	        err; /* first (shim_strerror); err.suffix: text_hex, appended to every error text */
	bool fail_configure, fail_start, fail_stop;
	uint64_t fail_every, timeout_every, stall_ms, stall_after, stall_stop_ms;
	uint64_t crash_after; /* acquire() calls before the crash (0: none) */
	int crash_signal;     /* SIGSEGV or SIGABRT */
	char control[SHIM_ARG_VAL_MAX];
	struct volrec_shim_geometry geo;
	void *ascan; /* one A-scan of samples */
	size_t ascan_bytes;
	struct vr_pacer pace;
	bool configured, started;
	uint64_t calls;      /* acquire() calls */
	struct shim_pos pos; /* of the next B-scan */
	bool pend; /* set_scan_offset came in the middle of an epoch: applies at the next one */
	uint64_t pend_epoch;
	bool stalled_once;
	bool exclusive; /* holds the one exclusive open */
};
SHIM_HANDLE_CHECK(struct fault_shim);

/* The control file's state, one for the process (under ctl_mu): a shim that the daemon reopens
 * after faults goes on with the command in progress rather than arming it again. */
static struct fault_ctl {
	char path[SHIM_ARG_VAL_MAX];
	char last_cmd[CONTROL_MAX];
	struct timespec last_mtime;
	uint64_t pend_errors, pend_timeouts, pend_stalls, pend_stall_ms, pend_returns;
	uint64_t pend_flags_n, pend_flags; /* "flags F [N]": meta.flags of the next N B-scans */
	uint64_t pend_ts_n, pend_ts;       /* "timestamp T [N]": their meta.timestamp_ns */
	long long pend_value; /* "return V": what acquire() returns, buffer untouched */
	bool pend_hold;       /* "hold": the next acquire blocks until the next command */
	uint64_t gen;         /* commands read so far */
} ctl;
static pthread_mutex_t ctl_mu = PTHREAD_MUTEX_INITIALIZER;
static bool exclusive_held; /* under ctl_mu */

/* Decode hex bytes ("ff 41" or "ff41") into out (NUL-terminated); -EINVAL when malformed. */
static int unhex(const char *hex, char *out, size_t outlen)
{
	size_t n = 0;
	unsigned v;

	while (*hex) {
		if (*hex == ' ') {
			hex++;
			continue;
		}
		if (n + 1 >= outlen || sscanf(hex, "%2x", &v) != 1 || !hex[1] || v == 0)
			return -EINVAL;
		out[n++] = (char)v;
		hex += 2;
	}
	out[n] = 0;
	return 0;
}

static int shim_open(const char *args_yaml, struct volrec_shim_info *info, void **handle)
{
	struct fault_shim *s;
	struct shim_args args;
	bool fail_open = false;
	char err[448], device_hex[256] = "", text_hex[128] = "", device[128] = "";
	char crash_signal[8] = "SEGV";
	int rc;

	s = calloc(1, sizeof(*s));
	if (!s)
		return shim_open_fail(-ENOMEM, "fault shim: out of memory");
	const struct shim_arg_spec spec[] = {
	        {"fail_open", .flag = &fail_open},
	        {"fail_configure", .flag = &s->fail_configure},
	        {"fail_start", .flag = &s->fail_start},
	        {"fail_stop", .flag = &s->fail_stop},
	        {"exclusive", .flag = &s->exclusive},
	        {"stall_stop_ms", .u64 = &s->stall_stop_ms, .max = 3600000},
	        {"fail_every", .u64 = &s->fail_every, .max = UINT32_MAX},
	        {"timeout_every", .u64 = &s->timeout_every, .max = UINT32_MAX},
	        {"stall_ms", .u64 = &s->stall_ms, .max = 3600000},
	        {"stall_after", .u64 = &s->stall_after, .max = UINT32_MAX},
	        {"control_file", .str = s->control, .max = sizeof(s->control)},
	        {"device_hex", .str = device_hex, .max = sizeof(device_hex)},
	        {"text_hex", .str = text_hex, .max = sizeof(text_hex)},
	        {"crash_after", .u64 = &s->crash_after, .max = UINT32_MAX},
	        {"crash_signal", .str = crash_signal, .max = sizeof(crash_signal)},
	};
	rc = shim_args_parse(args_yaml, 0, &args, err, sizeof(err));
	if (!rc)
		rc = shim_args_get(&args, spec, VR_ARRAY_SIZE(spec), err, sizeof(err));
	if (!rc && (unhex(device_hex, device, sizeof(device)) ||
	            unhex(text_hex, s->err.suffix, sizeof(s->err.suffix)))) {
		rc = vr_err(err, sizeof(err), -EINVAL,
		            "device_hex, text_hex: pairs of hex digits, not 00");
	}
	if (!rc) {
		s->crash_signal = !strcmp(crash_signal, "SEGV")   ? SIGSEGV
		                  : !strcmp(crash_signal, "ABRT") ? SIGABRT
		                                                  : 0;
		if (!s->crash_signal)
			rc = vr_err(err, sizeof(err), -EINVAL,
			            "crash_signal: SEGV or ABRT, not '%s'", crash_signal);
	}
	if (!rc)
		rc = shim_args_check_unused(&args, spec, VR_ARRAY_SIZE(spec), err, sizeof(err));
	if (!rc && fail_open)
		rc = vr_err(err, sizeof(err), -EIO, "open failed on request (fail_open: true)");
	if (!rc && s->exclusive) {
		pthread_mutex_lock(&ctl_mu);
		if (exclusive_held) {
			rc = vr_err(err, sizeof(err), -EBUSY,
			            "device busy: another handle has it open "
			            "(exclusive: true)");
		}
		exclusive_held = true;
		pthread_mutex_unlock(&ctl_mu);
		if (rc)
			s->exclusive = false; /* not ours to give back */
	}
	if (rc) {
		free(s);
		return shim_open_fail(rc, "fault shim: %s", err);
	}
	snprintf(info->name, sizeof(info->name), "fault-shim");
	snprintf(info->version, sizeof(info->version), "%s", VOLREC_VERSION);
	if (device[0])
		snprintf(info->device, sizeof(info->device), "%s", device);
	else
		snprintf(info->device, sizeof(info->device), "fault injection%s%.90s",
		         s->control[0] ? ", control file " : "", s->control);
	*handle = s;
	return 0;
}

/* A fixed spectrum: DC envelope plus three reflectors, quantized to the sample type. */
static int make_ascan(struct fault_shim *s)
{
	const uint32_t K = s->geo.samples_per_ascan;
	size_t ss = s->geo.sample_type == VOLREC_SAMPLE_F32 ? 4 : 2;

	s->ascan_bytes = (size_t)K * ss;
	s->ascan = malloc(s->ascan_bytes);
	if (!s->ascan)
		return -ENOMEM;
	for (uint32_t i = 0; i < K; i++) {
		double e = (i - (K - 1) / 2.0) / (0.3 * K), env = exp(-0.5 * e * e);
		double v = 20000 * env *
		           (1 + 0.05 * cos(2 * M_PI * i * 0.1) + 0.03 * cos(2 * M_PI * i * 0.2) +
		            0.02 * cos(2 * M_PI * i * 0.3));
		if (s->geo.sample_type == VOLREC_SAMPLE_U16) {
			uint16_t q = (uint16_t)lround(v);
			memcpy((uint8_t *)s->ascan + 2 * i, &q, 2);
		} else if (s->geo.sample_type == VOLREC_SAMPLE_I16) {
			int16_t q = (int16_t)lround(v - 16384);
			memcpy((uint8_t *)s->ascan + 2 * i, &q, 2);
		} else {
			float f = (float)v;
			memcpy((uint8_t *)s->ascan + 4 * i, &f, 4);
		}
	}
	return 0;
}

static int shim_configure(void *h, const struct volrec_shim_geometry *g)
{
	struct fault_shim *s = h;

	if (s->fail_configure)
		return shim_fail(&s->err, -EINVAL,
		                 "fault shim: configure failed on request (fail_configure: "
		                 "true)");
	if (g->sample_type > VOLREC_SAMPLE_F32 || !g->samples_per_ascan || !g->ascans_per_bscan ||
	    !g->bscans_per_volume)
		return shim_fail(&s->err, -EINVAL, "fault shim: cannot deliver this geometry");
	free(s->ascan);
	s->geo = *g;
	if (make_ascan(s))
		return shim_fail(&s->err, -ENOMEM, "fault shim: out of memory");
	shim_pacer_init(&s->pace, g);
	s->configured = true;
	return 0;
}

static int shim_set_scan_offset(void *h, uint64_t epoch, uint32_t ox, uint32_t oy)
{
	struct fault_shim *s = h;

	if (ox >= s->geo.stride_x || oy >= s->geo.stride_y)
		return shim_fail(&s->err, -EINVAL,
		                 "fault shim: offset (%u, %u) outside stride [%u, %u]", ox, oy,
		                 s->geo.stride_x, s->geo.stride_y);
	/* the epoch told applies from its first B-scan: in the middle of an epoch (after a
	 * failed acquire) the rest of the current one comes first */
	s->pend = true;
	s->pend_epoch = epoch;
	return 0;
}

static int shim_start(void *h)
{
	struct fault_shim *s = h;

	if (!s->configured)
		return shim_fail(&s->err, -EINVAL, "fault shim: start() before configure()");
	if (s->fail_start)
		return shim_fail(&s->err, -EIO,
		                 "fault shim: start failed on request (fail_start: true)");
	vr_pacer_start(&s->pace);
	s->started = true;
	return 0;
}

/* Read the control file; a changed content or mtime (re)arms its command. ctl_mu held. */
static int poll_control(struct fault_shim *s)
{
	struct fault_ctl *c = &ctl;

	char buf[CONTROL_MAX];
	struct stat st;
	ssize_t n;
	int fd;

	if (!s->control[0])
		return 0;
	if (strcmp(c->path, s->control)) { /* another file: nothing of the last one holds */
		memset(c, 0, sizeof(*c));
		snprintf(c->path, sizeof(c->path), "%s", s->control);
	}
	fd = open(s->control, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0; /* no file: no command */
	if (fstat(fd, &st) < 0) {
		close(fd);
		return 0;
	}
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n < 0)
		return 0;
	buf[n] = 0;
	buf[strcspn(buf, "\n")] = 0;
	if (!strcmp(buf, c->last_cmd) && st.st_mtim.tv_sec == c->last_mtime.tv_sec &&
	    st.st_mtim.tv_nsec == c->last_mtime.tv_nsec)
		return 0;
	snprintf(c->last_cmd, sizeof(c->last_cmd), "%s", buf);
	c->last_mtime = st.st_mtim;
	c->gen++;
	c->pend_hold = false;

	unsigned long long a = 1, b = 1;
	long long v = 0;
	char word[16] = "";
	int got = sscanf(buf, "%15s %llu %llu", word, &a, &b);
	if (got <= 0 || !strcmp(word, "ok")) {
		c->pend_errors = c->pend_timeouts = c->pend_stalls = c->pend_returns = 0;
		c->pend_flags_n = c->pend_ts_n = 0;
	} else if (!strcmp(word, "return") && (got = sscanf(buf, "%*s %lld %llu", &v, &b)) >= 1) {
		c->pend_value = v;
		c->pend_returns = got >= 2 ? b : 1;
	} else if (!strcmp(word, "error")) {
		c->pend_errors = got >= 2 ? a : 1;
	} else if (!strcmp(word, "timeout")) {
		c->pend_timeouts = got >= 2 ? a : 1;
	} else if (!strcmp(word, "flags") && got >= 2) {
		c->pend_flags = a;
		c->pend_flags_n = got >= 3 ? b : 1;
	} else if (!strcmp(word, "timestamp") && got >= 2) {
		c->pend_ts = a;
		c->pend_ts_n = got >= 3 ? b : 1;
	} else if (!strcmp(word, "stall") && got >= 2) {
		c->pend_stall_ms = a;
		c->pend_stalls = got >= 3 ? b : 1;
	} else if (!strcmp(word, "hold") && got == 1) {
		c->pend_hold = true;
	} else {
		return shim_fail(&s->err, -EINVAL,
		                 "fault shim: control file %s: unknown command '%s' (ok, error N, "
		                 "timeout N, stall MS [N], hold, return V [N], flags F [N], "
		                 "timestamp T [N])",
		                 s->control, buf);
	}
	return 0;
}

static int shim_acquire(void *h, void *buf, size_t size, int timeout_ms,
                        struct volrec_shim_meta *meta)
{
	struct fault_shim *s = h;
	uint64_t due;
	size_t need;
	int rc;

	if (!s->started)
		return shim_fail(&s->err, -EINVAL, "fault shim: acquire() before start()");
	need = s->ascan_bytes * s->geo.ascans_per_bscan;
	if (size < need)
		return shim_fail(&s->err, -EINVAL,
		                 "fault shim: buffer of %zu bytes, a B-scan is %zu", size, need);
	s->calls++;
	if (s->crash_after && s->calls > s->crash_after)
		raise(s->crash_signal); /* a driver crashing inside the daemon */
	/* the control file's command: what this acquire does, decided under ctl_mu */
	uint64_t stall_ms = 0, left = 0, flags = 0, ts = 0;
	bool set_flags = false, set_ts = false;
	long long value = 0;
	enum { CTL_NONE, CTL_RETURN, CTL_ERROR, CTL_TIMEOUT } what = CTL_NONE;
	pthread_mutex_lock(&ctl_mu);
	rc = poll_control(s);
	if (rc == 0 && ctl.pend_returns) {
		ctl.pend_returns--;
		what = CTL_RETURN;
		value = ctl.pend_value;
	} else if (rc == 0 && ctl.pend_errors) {
		left = --ctl.pend_errors;
		what = CTL_ERROR;
	} else if (rc == 0 && ctl.pend_timeouts) {
		ctl.pend_timeouts--;
		what = CTL_TIMEOUT;
	} else if (rc == 0 && ctl.pend_stalls) {
		ctl.pend_stalls--;
		stall_ms = ctl.pend_stall_ms;
	} else if (rc == 0 && ctl.pend_hold) {
		/* a hung driver until the test writes its next command: no time to guess */
		const uint64_t gen = ctl.gen;
		ctl.pend_hold = false;
		while (rc == 0 && ctl.gen == gen) {
			pthread_mutex_unlock(&ctl_mu);
			vr_sleep_ns(10 * 1000000ull);
			pthread_mutex_lock(&ctl_mu);
			rc = poll_control(s);
		}
	}
	if (rc == 0 && what == CTL_NONE && ctl.pend_flags_n) {
		ctl.pend_flags_n--;
		flags = ctl.pend_flags;
		set_flags = true;
	}
	if (rc == 0 && what == CTL_NONE && ctl.pend_ts_n) {
		ctl.pend_ts_n--;
		ts = ctl.pend_ts;
		set_ts = true;
	}
	pthread_mutex_unlock(&ctl_mu);
	if (rc)
		return rc;
	if (what == CTL_RETURN) /* a broken driver: returns what it was told, buffer untouched */
		return (int)value;
	if (what == CTL_ERROR)
		return shim_fail(&s->err, -EIO,
		                 "fault shim: injected error (control file; %llu more)",
		                 (unsigned long long)left);
	if (what == CTL_TIMEOUT) {
		vr_sleep_ns((timeout_ms > 0 ? (uint64_t)timeout_ms : 0) * 1000000ull);
		return -ETIMEDOUT;
	}
	if (stall_ms)
		vr_sleep_ns(stall_ms * 1000000ull); /* a hung driver: ignores timeout_ms */
	if (s->fail_every && s->calls % s->fail_every == 0)
		return shim_fail(&s->err, -EIO,
		                 "fault shim: injected error (fail_every: %llu, call %llu)",
		                 (unsigned long long)s->fail_every, (unsigned long long)s->calls);
	if (s->timeout_every && s->calls % s->timeout_every == 0) {
		vr_sleep_ns((timeout_ms > 0 ? (uint64_t)timeout_ms : 0) * 1000000ull);
		return -ETIMEDOUT;
	}
	if (s->stall_ms && !s->stalled_once && s->pace.n == s->stall_after) {
		s->stalled_once = true;
		vr_sleep_ns(s->stall_ms * 1000000ull);
	}
	rc = vr_pacer_due(&s->pace, timeout_ms, &due);
	if (rc)
		return rc;
	if (due)
		vr_sleep_until_ns(due);
	for (uint32_t a = 0; a < s->geo.ascans_per_bscan; a++)
		memcpy((uint8_t *)buf + a * s->ascan_bytes, s->ascan, s->ascan_bytes);
	if (s->pos.b == 0 && s->pend) {
		s->pos.epoch = s->pend_epoch;
		s->pend = false;
	}
	vr_pacer_done(&s->pace);
	shim_pos_deliver(&s->pos, &s->geo, meta);
	if (set_flags)
		meta->flags = (uint32_t)flags;
	if (set_ts)
		meta->timestamp_ns = ts;
	return 0;
}

static int shim_stop(void *h)
{
	struct fault_shim *s = h;
	s->started = false;
	if (s->stall_stop_ms) {
		struct timespec ts = {.tv_sec = (time_t)(s->stall_stop_ms / 1000),
		                      .tv_nsec = (long)(s->stall_stop_ms % 1000) * 1000000L};

		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
	}
	if (s->fail_stop)
		return shim_fail(&s->err, -EIO,
		                 "fault shim: stop failed on request (fail_stop: true)");
	return 0;
}

static void shim_close(void *h)
{
	struct fault_shim *s = h;

	if (!s)
		return;
	if (s->exclusive) {
		pthread_mutex_lock(&ctl_mu);
		exclusive_held = false;
		pthread_mutex_unlock(&ctl_mu);
	}
	free(s->ascan);
	free(s);
}

const struct volrec_shim_ops shim_ops = {SHIM_OPS_BASE};
