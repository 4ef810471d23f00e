/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * errmsg.c -- libpmckpt's failures are reported into libpmalloc's
 * thread-local buffer, the one pma_errormsg() returns, so that
 * pmck_errormsg() and pma_errormsg() read the same message and a failing
 * pma_ call's message is there for pmck__err_prefix to extend.  The buffer
 * is reached through the public pma_errormsg() (it is a writable
 * ERRMSG_MAX-byte array of libpmalloc's, built from the same common/errmsg.h),
 * so libpmalloc exports no internal for libpmckpt.
 */
#include "pmalloc.h"
#include "errmsg.h"

ERRMSG_DEFINE_WRITERS(pmck__err, pmck__err_prefix, (char *)pma_errormsg())
