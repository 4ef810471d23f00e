/* SPDX-License-Identifier: BSD-3-Clause */
/* errmsg.c -- formatting of the thread-local error messages (see errmsg.h). */
#include <stdio.h>
#include <string.h>

#include "errmsg.h"

int
errmsg_vset(char *buf, int code, const char *fmt, va_list ap)
{
	vsnprintf(buf, ERRMSG_MAX, fmt, ap);
	return code;
}

int
errmsg_vprefix(char *buf, int code, const char *fmt, va_list ap)
{
	char old[ERRMSG_MAX];
	int len;

	memcpy(old, buf, sizeof(old));
	len = vsnprintf(buf, ERRMSG_MAX, fmt, ap);
	if (len >= 0 && len < ERRMSG_MAX)
		snprintf(buf + len, ERRMSG_MAX - (size_t)len, ": %.*s",
				(int)(ERRMSG_MAX - len), old);
	return code;
}
