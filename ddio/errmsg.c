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

ERRMSG_DEFINE_WRITERS(ddio__err, ddio__err_prefix, last_error)
