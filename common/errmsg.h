/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * errmsg.h -- the libraries' thread-local last-error messages (pmem2_errormsg
 * style), written by one code (common/errmsg.c) into two buffers:
 *   - libpmalloc's (pmalloc/errmsg.c), read by pma_errormsg().  libpmckpt
 *     reports into the same buffer (runtime/errmsg.c): pmck_errormsg() is
 *     pma_errormsg(), and the message a failing pma_ call leaves there is
 *     what libpmckpt's pmck__err_prefix extends;
 *     libpmalloc_ns reports into it the same way (pmalloc/ns_errmsg.c);
 *   - libddio's (ddio/errmsg.c), read by ddio_errormsg().
 * Included as "errmsg.h" (the build sets -Icommon).  Nothing here is
 * exported from a shared library.
 */
#ifndef PMCKPT_COMMON_ERRMSG_H
#define PMCKPT_COMMON_ERRMSG_H 1

#include <stdarg.h>

#define ERRMSG_HIDDEN __attribute__((visibility("hidden")))

/* Bytes of each buffer, the NUL included. */
#define ERRMSG_MAX 512

/* errmsg_vset -- formats the message into buf (ERRMSG_MAX bytes); returns code. */
int errmsg_vset(char *buf, int code, const char *fmt, va_list ap) ERRMSG_HIDDEN;

/*
 * errmsg_vprefix -- turns buf's message M into "<formatted>: M" (truncated
 * to the buffer); returns code.
 */
int errmsg_vprefix(char *buf, int code, const char *fmt, va_list ap) ERRMSG_HIDDEN;

/*
 * ERRMSG_DEFINE_WRITERS(err, err_prefix, buffer) -- defines a library's two
 * writers, `int err(int code, const char *fmt, ...)` (the message, then
 * returns code) and `int err_prefix(int code, const char *fmt, ...)`
 * ("<formatted>: <message>"), writing into the ERRMSG_MAX-byte array that
 * the expression `buffer` yields.  Each library defines its own names with
 * it, so two static archives linked together never define one symbol
 * twice, and the code is written once (here).
 */
#define ERRMSG_DEFINE_WRITERS(err, err_prefix, buffer) \
	int \
	err(int code, const char *fmt, ...) \
	{ \
		va_list ap; \
		va_start(ap, fmt); \
		errmsg_vset((buffer), code, fmt, ap); \
		va_end(ap); \
		return code; \
	} \
	int \
	err_prefix(int code, const char *fmt, ...) \
	{ \
		va_list ap; \
		va_start(ap, fmt); \
		errmsg_vprefix((buffer), code, fmt, ap); \
		va_end(ap); \
		return code; \
	}

/*
 * libpmalloc's writers (pmalloc/errmsg.c): pma__err records a message for
 * pma_errormsg() and returns code, so a failure reads
 * `return pma__err(-EINVAL, "...", ...);`; pma__err_prefix prepends
 * "prefix: " to the current message.
 */
int pma__err(int code, const char *fmt, ...)
	__attribute__((format(printf, 2, 3))) ERRMSG_HIDDEN;
int pma__err_prefix(int code, const char *fmt, ...)
	__attribute__((format(printf, 2, 3))) ERRMSG_HIDDEN;

/*
 * libpmckpt's writers (runtime/errmsg.c): the same, into the same buffer
 * (the one pma_errormsg() returns), from inside libpmckpt.
 */
int pmck__err(int code, const char *fmt, ...)
	__attribute__((format(printf, 2, 3))) ERRMSG_HIDDEN;
int pmck__err_prefix(int code, const char *fmt, ...)
	__attribute__((format(printf, 2, 3))) ERRMSG_HIDDEN;

/*
 * libpmalloc_ns's writers (pmalloc/ns_errmsg.c): the same, into the same
 * buffer, from inside libpmalloc_ns (namespaces and provisioning).
 */
int pma_ns__err(int code, const char *fmt, ...)
	__attribute__((format(printf, 2, 3))) ERRMSG_HIDDEN;
int pma_ns__err_prefix(int code, const char *fmt, ...)
	__attribute__((format(printf, 2, 3))) ERRMSG_HIDDEN;

#endif
