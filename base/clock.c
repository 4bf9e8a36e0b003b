/* SPDX-License-Identifier: MIT */
/* The one clock helper of volrec and the pacing of sources on it (base.h). */
#include <errno.h>
#include <string.h>

#include "base/base.h"

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
		/* a period beyond VR_PACER_MAX_NS (the rate may be any positive double) is that
		 * long: the schedule's sums stay far from overflowing */
		double per = 1e9 / rate + 0.5, slack = per * (double)slack_items;

		p->period_ns = per >= VR_PACER_MAX_NS ? VR_PACER_MAX_NS : (uint64_t)per;
		if (!p->period_ns)
			p->period_ns = 1;
		p->slack_ns =
		        slack >= VR_PACER_MAX_NS ? VR_PACER_MAX_NS : slack_items * p->period_ns;
	}
}

/* The due time of item n + 1, saturated (a period of VR_PACER_MAX_NS after many items). */
static uint64_t pacer_next(const struct vr_pacer *p)
{
	uint64_t k = p->n + 1;

	if (k > (UINT64_MAX / 4 - p->t0) / p->period_ns)
		return UINT64_MAX / 4;
	return p->t0 + k * p->period_ns;
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
	t = pacer_next(p);
	if (now > t + p->slack_ns) {
		/* far behind (the consumer stalled): restart the schedule (one period back
		 * at most: then the item is due now however many came before) */
		p->t0 = now - p->period_ns;
		p->n = 0;
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
	due = pacer_next(p);
	now = vr_now_ns(CLOCK_MONOTONIC);
	return due > now ? due - now : 0;
}
