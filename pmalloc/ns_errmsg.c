/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ns_errmsg.c -- libpmalloc_ns's failures are reported into libpmalloc's
 * thread-local buffer, the one pma_errormsg() returns, as libpmckpt's are
 * (runtime/errmsg.c): a caller of pma_ns_* and pma_prov_* reads the message
 * with pma_errormsg(), and libpmalloc exports no internal for libpmalloc_ns.
 * Its own names (pma_ns__err, not pma__err), so that a program linking both
 * static archives gets no duplicate definition.
 */
#include "pmalloc.h"
#include "errmsg.h"

ERRMSG_DEFINE_WRITERS(pma_ns__err, pma_ns__err_prefix, (char *)pma_errormsg())
