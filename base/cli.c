/* SPDX-License-Identifier: MIT */
/*
 * Command lines (base.h): strict option values, and the usage errors that the main() of every
 * program and subcommand prints the same way.
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

int vr_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	unsigned long long v;
	char *end;

	if (!s || !isdigit((unsigned char)*s)) /* no sign, no leading space */
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v < min || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

int vr_parse_ordinals(const char *s, unsigned max, int *out, unsigned max_n, unsigned *n)
{
	unsigned k = 0;

	if (!s || !*s)
		return -EINVAL;
	for (const char *p = s;;) {
		char item[24];
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		uint64_t v;

		if (k == max_n || len == 0 || len >= sizeof(item))
			return -EINVAL;
		memcpy(item, p, len);
		item[len] = '\0';
		if (vr_parse_u64(item, 0, max, &v))
			return -EINVAL;
		out[k++] = (int)v;
		if (!comma)
			break;
		p = comma + 1;
	}
	*n = k;
	return 0;
}

int vr_parse_seconds(const char *s, bool zero, double *out)
{
	char *end;
	double v;

	/* a decimal number: no leading space or sign, no hexadecimal, inf or nan (strtod takes
	 * them all) */
	if (!s || !(isdigit((unsigned char)*s) || *s == '.') || strpbrk(s, "xX"))
		return -EINVAL;
	errno = 0;
	v = strtod(s, &end);
	if (errno || *end || !isfinite(v) || v < 0 || (v == 0 && !zero) || v > VR_SECONDS_MAX)
		return -EINVAL;
	*out = v;
	return 0;
}

int vr_cli_u64(const char *prog, const char *opt, const char *arg, uint64_t min, uint64_t max,
               const char *need, uint64_t *out)
{
	if (!vr_parse_u64(arg, min, max, out))
		return 0;
	fprintf(stderr, "%s: %s %s: need %s\n", prog, opt, arg, need);
	return -EINVAL;
}

int vr_cli_seconds(const char *prog, const char *opt, const char *arg, bool zero, double *out)
{
	if (!vr_parse_seconds(arg, zero, out))
		return 0;
	fprintf(stderr, "%s: %s %s: need a decimal number of seconds %s 0 and at most %.0f\n", prog,
	        opt, arg, zero ? ">=" : ">", VR_SECONDS_MAX);
	return -EINVAL;
}

int vr_cli_usage(void (*usage)(FILE *f), int opt)
{
	usage(opt == 'h' ? stdout : stderr);
	return opt == 'h' ? 0 : 2;
}

int vr_cli_args_done(const char *prog, int argc, char **argv)
{
	if (optind >= argc)
		return 0;
	fprintf(stderr, "%s: unexpected argument '%s'\n", prog, argv[optind]);
	return -EINVAL;
}
