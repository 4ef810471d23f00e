/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * reference.c -- the machine's limit in the same run, drawn on the plot as
 * a line: one thread copying 1 MiB blocks into the region with libc memcpy
 * (cached stores, nothing flushed) and with SSE2 streaming stores and an
 * sfence per block.  Neither goes through libpmem2 or pmckpt: they say what
 * the stores alone reach here, so that a curve above them is an error of
 * measurement and one far below them a cost of persistence.
 * (tools/pmbench-ref.c is a separate program with loops of its own, for
 * `make bench`'s cross-check.)
 */
#include <numa.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "pmalloc.h"
#include "pmbench.h"
#include "lib/toolutil.h"

double ref_memcpy_gbps, ref_nt_gbps;
size_t ref_size = 1u << 20;

#if defined(__x86_64__)
static void
nt_copy(char *dst, const char *src, size_t n)
{
	for (size_t i = 0; i < n; i += 64) {
		__m128i a = _mm_load_si128((const __m128i *)(src + i));
		__m128i b = _mm_load_si128((const __m128i *)(src + i + 16));
		__m128i c = _mm_load_si128((const __m128i *)(src + i + 32));
		__m128i d = _mm_load_si128((const __m128i *)(src + i + 48));
		_mm_stream_si128((__m128i *)(dst + i), a);
		_mm_stream_si128((__m128i *)(dst + i + 16), b);
		_mm_stream_si128((__m128i *)(dst + i + 32), c);
		_mm_stream_si128((__m128i *)(dst + i + 48), d);
	}
	_mm_sfence();
}
#endif

/* GB/s of copy() of ref_size blocks over the first half of the region, median of opt.repeat. */
static double
measure(int nt, char *src)
{
	char *base = pma_region_addr(region);
	size_t span = pma_region_size(region) / 2, off = 0;
	double g[MAXREP];

	for (unsigned r = 0; r <= opt.repeat; r++) { /* r == 0: warm-up */
		double t0 = tool_now(), t = t0, end = t0 + opt.time_ms / (r ? 1e3 : 4e3);
		uint64_t bytes = 0;
		while (t < end) {
#if defined(__x86_64__)
			if (nt)
				nt_copy(base + off, src, ref_size);
			else
#endif
				memcpy(base + off, src, ref_size);
			bytes += ref_size;
			off = off + 2 * ref_size > span ? 0 : off + ref_size;
			t = tool_now();
		}
		if (r)
			g[r - 1] = bytes / (t - t0) / 1e9;
	}
	return tool_median(g, opt.repeat);
}

static void
measure_both(char *src)
{
	sigjmp_buf jb;

	if (PMB_GUARD(jb))
		pmb_fault_die("measuring the reference", pmb_fault_offset());
	ref_memcpy_gbps = measure(0, src);
#if defined(__x86_64__)
	ref_nt_gbps = measure(1, src);
#endif
	pmb_fault_disarm();
}

void
pmb_run_reference(int node)
{
	char *src;

	if (pma_region_size(region) / 2 < 2 * ref_size)
		return;
	if (node >= 0 && numa_available() >= 0)
		numa_run_on_node(node);
	if (posix_memalign((void **)&src, 64, ref_size))
		die("reference", "out of memory");
	memset(src, 0x5c, ref_size);
	measure_both(src);
	free(src);
	if (node >= 0 && numa_available() >= 0)
		numa_run_on_node(-1);
	if (!opt.quiet)
		printf("pmbench: reference (no libpmem2, nothing flushed) 1 MiB blocks, 1 thread: memcpy "
				"%.3f GB/s, nt-store %.3f GB/s\n", ref_memcpy_gbps, ref_nt_gbps);
}
