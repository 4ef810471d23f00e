/* SPDX-License-Identifier: BSD-3-Clause */
/* errmsg.c -- libddio's thread-local last-error message (pmem2_errormsg style). */
#include <stdarg.h>
#include <stdio.h>

#include "internal.h"

#define ERRMSG_MAX 512

static _Thread_local char last_error[ERRMSG_MAX];

const char *
ddio_errormsg(void)
{
	return last_error;
}

int
ddio__err(int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
	return code;
}
