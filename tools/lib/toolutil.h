/* SPDX-License-Identifier: BSD-3-Clause */
/* toolutil.h -- small helpers shared by the command-line tools and benchmarks (not a library API). */
#ifndef PMCK_TOOLUTIL_H
#define PMCK_TOOLUTIL_H 1

#include <stddef.h>
#include <stdint.h>

/*
 * Messages of a tool: tool_init names the program ("pmckpt") and what a
 * usage error prints after its message (the usage text, or a hint such as
 * "(pmctl help for usage)\n"); call it first in main.
 */
void tool_init(const char *prog, const char *usage_hint);

/* "PROG: message" on stderr; returns 1, the exit status of a failure. */
int tool_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* "PROG: message" and the usage hint on stderr; returns 2, the exit status of a usage error. */
int tool_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* snprintf that truncates silently (paths and messages are reported, not parsed). */
void tool_fmt(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Human-readable size: "1.69 MiB", "8 bytes". */
const char *tool_hsize(uint64_t b, char *buf, size_t len);

/* The same with the bytes: "1.66 MiB (1738501 bytes)", or "8 bytes" below 1 KiB. */
const char *tool_hsize_b(uint64_t b, char *buf, size_t len);

/* Seconds on the monotonic clock. */
double tool_now(void);

/* Median of v[0..n-1] (sorts v; the mean of the middle two when n is even); 0 when n is 0. */
double tool_median(double *v, size_t n);

/* A decimal integer in [lo, hi]; 0 or -1. */
int tool_parse_uint(const char *s, unsigned long lo, unsigned long hi, unsigned long *out);

/* MemAvailable from /proc/meminfo in bytes (0 if unknown). */
uint64_t tool_mem_available(void);

struct pmck_store;

/*
 * One whole checkpoint: pmck_store_begin(step), pmck_ckpt_write_all from
 * srcs with `threads` threads, pmck_ckpt_commit.  *secs receives the time
 * it took, *slot (may be NULL) the slot written.  On failure the
 * checkpoint is aborted, "PROG: ... step N: message" goes to stderr and
 * the library's error is returned.
 */
int tool_checkpoint(const char *prog, struct pmck_store *s, uint64_t step,
		const void *const *srcs, unsigned threads, double *secs, unsigned *slot);

#endif
