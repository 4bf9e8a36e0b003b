/* SPDX-License-Identifier: MIT */
/*
 * volrecd statistics helpers: bounded windows of recent latency samples with percentiles, and a
 * small bounded JSON text builder for the status and event messages.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

uint64_t vrd_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t vrd_realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void vrd_lat_add(struct vrd_lat *lat, double ms)
{
	if (!(ms >= 0.0))
		ms = 0.0;
	lat->ms[lat->next] = (float)ms;
	lat->next = (lat->next + 1) % VRD_LAT_SAMPLES;
	if (lat->n < VRD_LAT_SAMPLES)
		lat->n++;
}

static int cmp_float(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;

	return (x > y) - (x < y);
}

/* Nearest-rank percentiles over the samples in the window; -1 when there are none. */
void vrd_lat_percentiles(const struct vrd_lat *lat, double *p50, double *p99)
{
	float tmp[VRD_LAT_SAMPLES];
	uint32_t n = lat->n;

	if (n == 0) {
		*p50 = -1.0;
		*p99 = -1.0;
		return;
	}
	memcpy(tmp, lat->ms, n * sizeof(float));
	qsort(tmp, n, sizeof(float), cmp_float);
	*p50 = tmp[(size_t)ceil(0.50 * n) - 1];
	*p99 = tmp[(size_t)ceil(0.99 * n) - 1];
}

void vrd_json_init(struct vrd_json *j, char *buf, size_t cap)
{
	j->buf = buf;
	j->cap = cap;
	j->len = 0;
	j->overflow = false;
	if (cap)
		buf[0] = '\0';
}

void vrd_json_raw(struct vrd_json *j, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (j->overflow)
		return;
	va_start(ap, fmt);
	n = vsnprintf(j->buf + j->len, j->cap - j->len, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= j->cap - j->len) {
		j->overflow = true;
		j->buf[j->len] = '\0';
		return;
	}
	j->len += (size_t)n;
}

/* A JSON string literal (quotes included) with the escapes RFC 8259 requires. */
void vrd_json_str(struct vrd_json *j, const char *s)
{
	vrd_json_raw(j, "\"");
	for (; s && *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			vrd_json_raw(j, "\\%c", c);
		else if (c == '\n')
			vrd_json_raw(j, "\\n");
		else if (c == '\t')
			vrd_json_raw(j, "\\t");
		else if (c < 0x20)
			vrd_json_raw(j, "\\u%04x", c);
		else
			vrd_json_raw(j, "%c", c);
	}
	vrd_json_raw(j, "\"");
}

/* A number, or null when it is not finite (JSON has no NaN). */
void vrd_json_num(struct vrd_json *j, double v)
{
	if (isfinite(v))
		vrd_json_raw(j, "%.6g", v);
	else
		vrd_json_raw(j, "null");
}
