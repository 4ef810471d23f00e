/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * latency.c -- the latency of one small write made durable: a copy into
 * the region (non-temporal, or cached stores and a flush) and a drain,
 * timed one by one with clock_gettime on one thread, for opt.time_ms after
 * a warm-up of a quarter of that.  Percentiles p50, p99, p99.9 (the
 * figures MLC users look at first) over every operation.
 */
#include <libpmem2.h>
#include <numa.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pmalloc.h"
#include "pmbench.h"
#include "lib/toolutil.h"

#define MAXOPS (4u << 20)

struct lat_row lat_rows[2 * MAXV];
size_t nlat;

static double
now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double
pct(const double *v, size_t n, double p)
{
	size_t i = (size_t)(p * (double)(n - 1) + 0.5);
	return v[i < n ? i : n - 1];
}

/* Times write+persist operations of size bytes into ns[]; their number. */
static size_t
timed_ops(enum method m, size_t size, const char *src, double *ns)
{
	size_t span = pma_region_size(region) / 2, stride = (size + 127) & ~(size_t)127, off = 0, n = 0;
	unsigned flags = m == M_NT ? PMEM2_F_MEM_NONTEMPORAL | PMEM2_F_MEM_NODRAIN :
			PMEM2_F_MEM_TEMPORAL | PMEM2_F_MEM_NOFLUSH | PMEM2_F_MEM_NODRAIN;
	char *base = pma_region_addr(region);
	sigjmp_buf jb;

	if (PMB_GUARD(jb))
		pmb_fault_die("measuring latency", pmb_fault_offset());
	for (int warm = 1; warm >= 0; warm--) {
		double end = now_ns() + opt.time_ms * (warm ? 0.25e6 : 1e6), t0, t1 = 0;
		while (n < MAXOPS && t1 < end) {
			char *dst = base + off;
			t0 = now_ns();
			pma_region_memcpy(region, dst, src, size, flags);
			if (m == M_TEMPORAL)
				pma_region_flush(region, dst, size);
			/* Benchmark data: the drain ends the operation timed, as a checkpoint's item. */
			pma_region_drain(region);
			t1 = now_ns();
			if (!warm)
				ns[n++] = t1 - t0;
			off = off + 2 * stride > span ? 0 : off + stride;
		}
	}
	pmb_fault_disarm();
	return n;
}

void
pmb_run_latency(enum method m, size_t size, int node)
{
	size_t span = pma_region_size(region) / 2, stride = (size + 127) & ~(size_t)127;
	char *src = malloc(size);
	double *ns = malloc(MAXOPS * sizeof(*ns));
	size_t n = 0;
	double sum = 0;

	if (!src || !ns)
		die("latency", "out of memory");
	if (span < stride * 2) {
		free(src);
		free(ns);
		return;
	}
	if (node >= 0 && numa_available() >= 0)
		numa_run_on_node(node);
	memset(src, 0x3c, size);
	n = timed_ops(m, size, src, ns);
	if (node >= 0 && numa_available() >= 0)
		numa_run_on_node(-1);
	qsort(ns, n, sizeof(*ns), cmp_double);
	for (size_t i = 0; i < n; i++)
		sum += ns[i];
	struct lat_row *l = &lat_rows[nlat++];
	snprintf(l->method, sizeof(l->method), "%s", pmb_method_names[m]);
	l->size = size;
	l->node = node >= 0 ? node : region_node;
	l->ops = n;
	l->min = n ? ns[0] : 0;
	l->p50 = n ? pct(ns, n, 0.5) : 0;
	l->p99 = n ? pct(ns, n, 0.99) : 0;
	l->p999 = n ? pct(ns, n, 0.999) : 0;
	l->max = n ? ns[n - 1] : 0;
	l->mean = n ? sum / (double)n : 0;
	free(src);
	free(ns);
	if (!opt.quiet)
		printf("pmbench: latency %-9s %6zu B  node %d  p50 %.0f ns  p99 %.0f ns  p99.9 %.0f ns  "
				"(%llu ops)\n", l->method, size, l->node, l->p50, l->p99, l->p999,
				(unsigned long long)n);
	printf("bench: pmbench_persist_p50_%s_%zuB %.0f ns\n", l->method, size, l->p50);
	printf("bench: pmbench_persist_p99_%s_%zuB %.0f ns\n", l->method, size, l->p99);
	printf("bench: pmbench_persist_p999_%s_%zuB %.0f ns\n", l->method, size, l->p999);
	fflush(stdout);
}
