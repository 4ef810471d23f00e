/* SPDX-License-Identifier: BSD-3-Clause */
/* errmsg.h -- the thread-local last-error message shared by pmalloc and pmckpt. */
#ifndef PMA_ERRMSG_H
#define PMA_ERRMSG_H 1

/*
 * pma__err -- records a message for pma_errormsg() and returns code, so a
 * failure reads `return pma__err(-EINVAL, "...", ...);`.  Exported under
 * the private version node for libpmckpt; not part of the API.
 */
int pma__err(int code, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* pma__err_prefix -- prepends "prefix: " to the current message; returns code. */
int pma__err_prefix(int code, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#endif
