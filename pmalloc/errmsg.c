/* SPDX-License-Identifier: BSD-3-Clause */
/* errmsg.c -- thread-local error messages (pmem2_errormsg style). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "pmalloc.h"
#include "errmsg.h"

#define ERRMSG_MAX 512

static _Thread_local char last_error[ERRMSG_MAX];

const char *
pma_errormsg(void)
{
	return last_error;
}

int
pma__err(int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
	return code;
}

int
pma__err_prefix(int code, const char *fmt, ...)
{
	char old[ERRMSG_MAX];
	va_list ap;
	int len;

	memcpy(old, last_error, sizeof(old));
	va_start(ap, fmt);
	len = vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
	if (len >= 0 && (size_t)len < sizeof(last_error))
		snprintf(last_error + len, sizeof(last_error) - (size_t)len, ": %.*s",
				(int)(sizeof(last_error) - (size_t)len), old);
	return code;
}
