/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * errmsg.c -- libpmalloc's thread-local last-error message: the buffer
 * pma_errormsg() returns (and pmck_errormsg(): libpmckpt writes into it too).
 */
#include "pmalloc.h"
#include "errmsg.h"

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
	errmsg_vset(last_error, code, fmt, ap);
	va_end(ap);
	return code;
}

int
pma__err_prefix(int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	errmsg_vprefix(last_error, code, fmt, ap);
	va_end(ap);
	return code;
}
