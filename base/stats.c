/* SPDX-License-Identifier: MIT */
/* The one percentile of volrec: nearest rank over sorted samples (base.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

double vr_percentile(double *v, size_t n, double p)
{
	double r = ceil(p / 100.0 * (double)n);
	size_t i = r < 1.0 ? 0 : (size_t)r - 1;

	if (n == 0)
		return NAN;
	qsort(v, n, sizeof(*v), cmp_double);
	return v[i < n ? i : n - 1];
}

void vr_window_add(struct vr_window *w, double x)
{
	if (!(x >= 0.0))
		x = 0.0;
	w->v[w->next] = (float)x;
	w->next = (w->next + 1) % VR_WINDOW_SAMPLES;
	if (w->n < VR_WINDOW_SAMPLES)
		w->n++;
}

void vr_window_percentiles(const struct vr_window *w, const double *p, double *out, size_t k)
{
	double tmp[VR_WINDOW_SAMPLES];
	size_t i;

	for (i = 0; i < w->n; i++)
		tmp[i] = w->v[i];
	for (i = 0; i < k; i++)
		out[i] = vr_percentile(tmp, w->n, p[i]); /* sorts tmp once, then finds it sorted */
}
