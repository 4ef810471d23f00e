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

ERRMSG_DEFINE_WRITERS(pma__err, pma__err_prefix, last_error)
