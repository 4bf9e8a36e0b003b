/* SPDX-License-Identifier: MIT */
/*
 * src_open / src_close: dispatch to the synth, replay and shim openers; the pacing clock and
 * error-text helpers the built-in sources share.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "internal.h"

int src_fail(struct src_common *c, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->msg, sizeof(c->msg), fmt, ap);
	va_end(ap);
	c->msg_code = code;
	return code;
}

int src_err(char *err, size_t errlen, int rc, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return rc;
}

const char *src_sample_name(uint32_t t)
{
	switch (t) {
	case VOLREC_SAMPLE_U16:
		return "u16";
	case VOLREC_SAMPLE_I16:
		return "i16";
	case VOLREC_SAMPLE_F32:
		return "f32";
	case VOLREC_SAMPLE_U12P:
		return "u12p";
	case VOLREC_SAMPLE_U12GV:
		return "u12gv";
	default:
		return "unknown";
	}
}

uint64_t src_now_ns(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_until(uint64_t t)
{
	struct timespec ts = {.tv_sec = (time_t)(t / 1000000000ull),
	                      .tv_nsec = (long)(t % 1000000000ull)};

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

void src_pacer_init(struct src_pacer *p, double rate, uint64_t slack_items)
{
	memset(p, 0, sizeof(*p));
	p->paced = rate > 0;
	if (p->paced) {
		p->period = (uint64_t)(1e9 / rate + 0.5);
		if (!p->period)
			p->period = 1;
		p->slack = slack_items * p->period;
	}
}

void src_pacer_start(struct src_pacer *p)
{
	p->t0 = src_now_ns(CLOCK_MONOTONIC);
	p->n = 0;
}

uint64_t src_pacer_due_in(const struct src_pacer *p)
{
	if (!p->paced)
		return 0;
	uint64_t due = p->t0 + (p->n + 1) * p->period, now = src_now_ns(CLOCK_MONOTONIC);
	return due > now ? due - now : 0;
}

int src_pacer_wait(struct src_pacer *p, int timeout_ms)
{
	uint64_t now, due;

	if (!p->paced)
		return 0;
	now = src_now_ns(CLOCK_MONOTONIC);
	due = p->t0 + (p->n + 1) * p->period;
	if (now > due + p->slack) {
		/* far behind (the consumer stalled): restart the schedule instead of bursting */
		p->t0 = now - (p->n + 1) * p->period;
		return 0;
	}
	if (due <= now)
		return 0;
	if (timeout_ms >= 0 && due - now > (uint64_t)timeout_ms * 1000000ull) {
		sleep_until(now + (uint64_t)timeout_ms * 1000000ull);
		return -ETIMEDOUT;
	}
	sleep_until(due);
	return 0;
}

void src_pacer_done(struct src_pacer *p)
{
	p->n++;
}

void src_geometry_from_config(struct volrec_shim_geometry *g, const struct vr_config *cfg,
                              unsigned flags)
{
	memset(g, 0, sizeof(*g));
	g->samples_per_ascan = cfg->geometry.samples_per_ascan;
	g->ascans_per_bscan = cfg->geometry.ascans_per_bscan;
	g->bscans_per_volume = cfg->geometry.bscans_per_volume;
	switch (cfg->geometry.sample_type) {
	case CFG_SAMPLE_U16:
		g->sample_type = VOLREC_SAMPLE_U16;
		break;
	case CFG_SAMPLE_I16:
		g->sample_type = VOLREC_SAMPLE_I16;
		break;
	case CFG_SAMPLE_U12P:
		g->sample_type = VOLREC_SAMPLE_U12P;
		break;
	case CFG_SAMPLE_U12GV:
		g->sample_type = VOLREC_SAMPLE_U12GV;
		break;
	default:
		g->sample_type = VOLREC_SAMPLE_F32;
		break;
	}
	g->stride_x = cfg->geometry.stride[0];
	g->stride_y = cfg->geometry.stride[1];
	g->bidirectional = cfg->geometry.bidirectional;
	g->flags = (flags & SRC_DROP_MARKS) ? VOLREC_SHIM_GEOMETRY_MARKS : 0;
	g->rate = (flags & SRC_UNPACED) ? 0 : cfg->source.rate;
}

int src_open(const struct vr_config *cfg, unsigned flags, struct src_source *src, char *err,
             size_t errlen)
{
	struct src_source s;
	int rc;

	memset(&s, 0, sizeof(s));
	if (flags & ~(SRC_UNPACED | SRC_NO_LOOP | SRC_DROP_MARKS))
		return src_err(err, errlen, -EINVAL, "src_open: unknown flags 0x%x", flags);
	switch (cfg->source.type) {
	case CFG_SOURCE_SYNTH:
		rc = src_synth_open(cfg, flags, &s, err, errlen);
		break;
	case CFG_SOURCE_REPLAY:
		rc = src_replay_open(cfg, flags, &s, err, errlen);
		break;
	case CFG_SOURCE_SHIM:
		rc = src_shim_open(cfg, flags, &s, err, errlen);
		break;
	default:
		rc = src_err(err, errlen, -EINVAL, "source.type: unknown source %d",
		             (int)cfg->source.type);
		break;
	}
	if (rc)
		return rc;
	*src = s;
	return 0;
}

void src_close(struct src_source *src)
{
	if (!src || !src->ops)
		return;
	if (src->handle) {
		/* the built-in and wrapped ops know whether they were started */
		struct src_common *c = src->handle;
		if (c->started)
			src->ops->stop(src->handle);
		src->ops->close(src->handle);
	}
	if (src->dl)
		dlclose(src->dl);
	memset(src, 0, sizeof(*src));
}

const char *src_strerror(const struct src_source *src, int code)
{
	const char *t = NULL;

	if (src && src->ops && src->ops->strerror)
		t = src->ops->strerror(src->handle, code);
	return t ? t : strerror(code < 0 ? -code : code);
}
