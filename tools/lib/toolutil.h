/* SPDX-License-Identifier: BSD-3-Clause */
/* toolutil.h -- small helpers shared by the command-line tools and benchmarks (not a library API). */
#ifndef PMCK_TOOLUTIL_H
#define PMCK_TOOLUTIL_H 1

#include <stddef.h>
#include <stdint.h>

/* Seconds on the monotonic clock. */
double tool_now(void);

/* Median of v[0..n-1] (sorts v; the mean of the middle two when n is even); 0 when n is 0. */
double tool_median(double *v, size_t n);

/* "512M", "1.5GiB", "4096" -> bytes (K/M/G/T are powers of 1024); 0 or -1. */
int tool_parse_size(const char *s, uint64_t *out);

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
