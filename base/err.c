/* SPDX-License-Identifier: MIT */
/* Error text: one way to write a message beside a negative errno (base.h). */
#include <stdio.h>
#include <string.h>

#include "base/base.h"

int vr_err(char *err, size_t errlen, int code, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return code;
}

int vr_err_errno(char *err, size_t errlen, int code, const char *fmt, ...)
{
	va_list ap;
	size_t n;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
		n = strlen(err);
		if (n < errlen)
			snprintf(err + n, errlen - n, ": %s", strerror(code < 0 ? -code : code));
	}
	return code;
}

void vr_err_prefix(char *err, size_t errlen, const char *fmt, ...)
{
	char prefix[256], old[1024];
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(prefix, sizeof(prefix), fmt, ap);
	va_end(ap);
	snprintf(old, sizeof(old), "%s", err);
	snprintf(err, errlen, "%s: %s", prefix, old);
}
