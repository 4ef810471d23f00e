/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * pace.c -- $PMCK_GPU_RATE_GBPS: the GPU writers' copies out of the device
 * paced to about that many GB/s, for every pipeline of the process together.
 *
 * An experiment (docs/gpu.md): training whose kernels are launched while a
 * checkpoint crosses PCIe ran its forward+backward 14-20 ms a step longer on
 * the H100s, for a reason not yet known; whether the same bytes spread over
 * the step cost less than at the link's full speed is what this lets a lent
 * GPU measure.  The link is the process's, whichever store copies (a
 * GradientLog's whole states and records are several pipelines), so there is
 * one schedule: before a writer enqueues a piece of len bytes it takes the
 * next free interval of len / rate on it, and sleeps until that interval
 * begins.  An idle link is not made up for later: an interval never begins
 * before the moment it is taken.  The intervals never overlap; the copies
 * may, where the GPU reaches the work a layer's copies wait for after several
 * of its pieces were enqueued (they then start together).
 */
#include <errno.h>
#include <stdatomic.h>
#include <time.h>

#include "internal.h"

/*
 * When the next interval may begin (CLOCK_MONOTONIC ns).  Global and mutable
 * for the reason above (one schedule per process); taken by compare-and-swap,
 * so a writer never blocks another to take its interval.
 */
static _Atomic uint64_t next_free_ns;
/* The bytes of every interval taken so far (tests: which copies were paced). */
static _Atomic uint64_t taken_bytes;

uint64_t
pmck__pace_bytes(void)
{
	return atomic_load(&taken_bytes);
}

uint64_t
pmck__pace(unsigned gbps, uint64_t len)
{
	uint64_t cost = len / gbps; /* 1 GB/s is one byte a nanosecond */
	uint64_t now = pmck__now_ns();
	uint64_t begin, taken = atomic_load(&next_free_ns);

	do
		begin = taken > now ? taken : now;
	while (!atomic_compare_exchange_weak(&next_free_ns, &taken, begin + cost));
	atomic_fetch_add(&taken_bytes, len);
	if (begin > now) {
		struct timespec at = {(time_t)(begin / 1000000000u), (long)(begin % 1000000000u)};
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL) == EINTR)
			;
	}
	return begin;
}
