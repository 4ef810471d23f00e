/* SPDX-License-Identifier: BSD-3-Clause */
/* errmsg.c -- libddio's thread-local last-error message (ddio_errormsg()). */
#include "internal.h"
#include "errmsg.h"

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
	errmsg_vset(last_error, code, fmt, ap);
	va_end(ap);
	return code;
}
