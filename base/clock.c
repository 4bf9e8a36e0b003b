/* SPDX-License-Identifier: MIT */
/* The one clock helper of volrec and the pacing of sources on it (base.h). */
#include <errno.h>
#include <string.h>

#include "base.h"

uint64_t vr_now_ns(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void vr_sleep_ns(uint64_t ns)
{
	struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull),
	                      .tv_nsec = (long)(ns % 1000000000ull)};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

void vr_sleep_until_ns(uint64_t t)
{
	struct timespec ts = {.tv_sec = (time_t)(t / 1000000000ull),
	                      .tv_nsec = (long)(t % 1000000000ull)};

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

void vr_pacer_init(struct vr_pacer *p, double rate, uint64_t slack_items)
{
	memset(p, 0, sizeof(*p));
	if (rate > 0) {
		p->period_ns = (uint64_t)(1e9 / rate + 0.5);
		if (!p->period_ns)
			p->period_ns = 1;
		p->slack_ns = slack_items * p->period_ns;
	}
}

void vr_pacer_start(struct vr_pacer *p)
{
	p->t0 = vr_now_ns(CLOCK_MONOTONIC);
	p->n = 0;
}

int vr_pacer_due(struct vr_pacer *p, int timeout_ms, uint64_t *due)
{
	uint64_t now, t;

	*due = 0;
	if (!p->period_ns)
		return 0;
	now = vr_now_ns(CLOCK_MONOTONIC);
	t = p->t0 + (p->n + 1) * p->period_ns;
	if (now > t + p->slack_ns) {
		/* far behind (the consumer stalled): restart the schedule */
		p->t0 = now - (p->n + 1) * p->period_ns;
		t = now;
	}
	if (timeout_ms >= 0 && t > now + (uint64_t)timeout_ms * 1000000ull) {
		vr_sleep_until_ns(now + (uint64_t)timeout_ms * 1000000ull);
		return -ETIMEDOUT;
	}
	*due = t;
	return 0;
}

int vr_pacer_wait(struct vr_pacer *p, int timeout_ms)
{
	uint64_t due;
	int rc = vr_pacer_due(p, timeout_ms, &due);

	if (!rc && due)
		vr_sleep_until_ns(due);
	return rc;
}

uint64_t vr_pacer_due_in(const struct vr_pacer *p)
{
	uint64_t due, now;

	if (!p->period_ns)
		return 0;
	due = p->t0 + (p->n + 1) * p->period_ns;
	now = vr_now_ns(CLOCK_MONOTONIC);
	return due > now ? due - now : 0;
}
