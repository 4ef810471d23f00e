/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * measure.c -- CPU write and read bandwidth of the region: worker threads,
 * each on a partition of its own, warm up alone, then measure together,
 * opt.repeat times.  Nothing mutable is shared between workers: each has
 * its cursor, its source buffer and its checksum accumulator.
 */
#include <errno.h>
#include <libpmem2.h>
#include <numa.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pmalloc.h"
#include "pmckpt.h"
#include "pmbench.h"
#include "lib/toolutil.h"

const char *const pmb_method_names[4] = {"nt", "temporal", "memcpy", "checksum"};
const char *const pmb_layout_names[2] = {"separated", "interleaved"};

struct row *rows;
size_t nrows;
static size_t cap_rows;

struct worker {
	pthread_t tid;
	const struct cfg *c;
	pthread_barrier_t *bar;
	char *base;       /* this thread's partition of the region */
	size_t part;
	uint64_t items[MAXREP];
	double seconds[MAXREP];
	uint64_t sink;    /* checksums read, so that they are computed; per thread */
	volatile unsigned passed; /* barriers passed: after a SIGBUS, the rest are still met */
	int err;
	long long fault;  /* offset of a SIGBUS in the region, when err is EFAULT */
};

/* Where the next item goes, as offsets in the partition. */
struct cursor {
	size_t data, meta, dict;
	uint64_t k;
};

static size_t
round_up(size_t v, size_t a)
{
	return (v + a - 1) & ~(a - 1);
}

static void
one_item(struct worker *w, struct cursor *cur, char *src, char *rec)
{
	const struct cfg *c = w->c;
	size_t off = c->align.offset, al = c->align.align;
	char *dst;

	if (c->op == OP_READ) {
		size_t stride = round_up(c->size, 128);
		if (cur->data + stride > w->part)
			cur->data = META_AREA;
		dst = w->base + cur->data;
		if (c->method == M_MEMCPY)
			memcpy(src, dst, c->size);
		else
			w->sink += pmck_tensor_checksum(dst, c->size);
		cur->data += stride;
		return;
	}
	unsigned flags = c->method == M_NT ?
		PMEM2_F_MEM_NONTEMPORAL | PMEM2_F_MEM_NODRAIN :
		PMEM2_F_MEM_TEMPORAL | PMEM2_F_MEM_NOFLUSH | PMEM2_F_MEM_NODRAIN;
	memcpy(rec, &cur->k, sizeof(cur->k)); /* the record names the item */
	if (c->layout == L_SEPARATED) {
		/* Items start `off` bytes past a multiple of `al` (META_AREA is 4 KiB-aligned). */
		size_t stride = round_up(c->size + off, al);
		if (cur->data + stride > w->part)
			cur->data = META_AREA;
		if (cur->meta + META > META_AREA)
			cur->meta = 0;
		dst = w->base + cur->data + off;
		char *m = w->base + cur->meta;
		pma_region_memcpy(region, dst, src, c->size, flags);
		pma_region_memcpy(region, m, rec, META, flags);
		if (c->method == M_TEMPORAL) {
			pma_region_flush(region, dst, c->size);
			pma_region_flush(region, m, META);
		}
		cur->data += stride;
		cur->meta += META;
	} else {
		/* Packed records, the first `off` bytes into the partition (alignment is lost). */
		if (cur->dict + DICT_REC + c->size > w->part)
			cur->dict = off;
		char *r = w->base + cur->dict;
		dst = r + DICT_REC;
		pma_region_memcpy(region, r, rec, DICT_REC, flags);
		pma_region_memcpy(region, dst, src, c->size, flags);
		if (c->method == M_TEMPORAL)
			pma_region_flush(region, r, DICT_REC + c->size);
		cur->dict += DICT_REC + c->size;
	}
	/* Benchmark data, nothing recovers it: the drain only makes each item durable before the next, as a checkpoint does. */
	pma_region_drain(region);
	cur->k++;
}

/* Warm up alone, then measure together, opt.repeat times; a SIGBUS ends it with w->err. */
static void
measure_all(struct worker *w, char *src, char *rec)
{
	const struct cfg *c = w->c;
	struct cursor cur = {.data = META_AREA, .meta = 0, .dict = c->align.offset};
	unsigned every = c->size < 4096 ? 16 : 1;
	double end;
	sigjmp_buf jb;

	if (PMB_GUARD(jb)) {
		/* Stop measuring, but still meet the other threads at every barrier. */
		w->err = EFAULT;
		w->fault = pmb_fault_offset();
		while (w->passed < opt.repeat) {
			pthread_barrier_wait(w->bar);
			w->passed++;
		}
		return;
	}
	for (end = tool_now() + opt.time_ms / 4e3; tool_now() < end;)
		for (unsigned i = 0; i < every; i++)
			one_item(w, &cur, src, rec);
	for (unsigned r = 0; r < opt.repeat; r++) {
		pthread_barrier_wait(w->bar);
		w->passed++;
		double t0 = tool_now(), t = t0;
		uint64_t items = 0;
		end = t0 + opt.time_ms / 1e3;
		while (t < end) {
			for (unsigned i = 0; i < every; i++)
				one_item(w, &cur, src, rec);
			items += every;
			t = tool_now();
		}
		w->items[r] = items;
		w->seconds[r] = t - t0;
	}
	pmb_fault_disarm();
}

static void *
worker_main(void *arg)
{
	struct worker *w = arg;
	const struct cfg *c = w->c;
	size_t blen = c->size + 64;
	char *src = NULL, rec[META];
	int onnode = c->node >= 0 && numa_available() >= 0;

	if (onnode) {
		numa_run_on_node(c->node);
		src = numa_alloc_onnode(blen, c->node);
	} else {
		src = malloc(blen);
	}
	if (!src) {
		/* Meet the others at every barrier all the same. */
		w->err = ENOMEM;
		for (unsigned r = 0; r < opt.repeat; r++)
			pthread_barrier_wait(w->bar);
		return NULL;
	}
	for (size_t i = 0; i < blen; i++)
		src[i] = (char)(i * 131 + 7);
	memset(rec, 0x5a, sizeof(rec));
	measure_all(w, src, rec);
	if (onnode)
		numa_free(src, blen);
	else
		free(src);
	return NULL;
}

struct row *
pmb_new_row(void)
{
	if (nrows == cap_rows) {
		cap_rows = cap_rows ? 2 * cap_rows : 64;
		rows = realloc(rows, cap_rows * sizeof(*rows));
		if (!rows)
			die("rows", "out of memory");
	}
	memset(&rows[nrows], 0, sizeof(rows[0]));
	return &rows[nrows++];
}

void
pmb_print_row(const struct row *r)
{
	if (!opt.quiet) {
		printf("pmbench: %-5s %-3s %-9s %-11s %-12s %9zu B  %2u thr  node %d  ddio %-7s %8.3f GB/s",
				r->op, r->path, r->method, r->layout, r->align, r->size, r->threads,
				r->node, r->ddio, r->gbps);
		if (r->repeats > 1)
			printf("  (min %.3f, max %.3f, %u repeats)", r->gbps_min, r->gbps_max, r->repeats);
		printf("\n");
	}
	fflush(stdout);
}

void
pmb_run_cpu(const struct cfg *c)
{
	size_t part = (pma_region_size(region) / c->threads) & ~(size_t)4095;
	size_t need = META_AREA + 2 * (round_up(c->size + c->align.offset, c->align.align) + DICT_REC + 256);
	struct worker *w;
	pthread_barrier_t bar;
	struct row *r;
	double secs = 0, g[MAXREP];
	uint64_t bytes = 0, items = 0;
	char an[24];

	if (part < need) {
		if (!opt.quiet)
			printf("# skipped %zu B x %u threads: the region (%zu B) is too small\n", c->size,
					c->threads, pma_region_size(region));
		return;
	}
	w = calloc(c->threads, sizeof(*w));
	if (!w || pthread_barrier_init(&bar, NULL, c->threads))
		die("threads", "out of memory");
	for (unsigned t = 0; t < c->threads; t++) {
		w[t] = (struct worker){.c = c, .bar = &bar, .part = part,
				.base = (char *)pma_region_addr(region) + t * part};
		if (pthread_create(&w[t].tid, NULL, worker_main, &w[t]))
			die("pthread_create", strerror(errno));
	}
	for (unsigned t = 0; t < c->threads; t++)
		pthread_join(w[t].tid, NULL);
	for (unsigned t = 0; t < c->threads; t++) {
		if (w[t].err == EFAULT)
			pmb_fault_die(c->op == OP_WRITE ? "writing" : "reading", w[t].fault);
		if (w[t].err)
			die("worker", strerror(w[t].err));
	}
	/* Per repeat: the bytes of all threads over the longest thread's time. */
	for (unsigned rep = 0; rep < opt.repeat; rep++) {
		uint64_t b = 0;
		double s = 0;
		for (unsigned t = 0; t < c->threads; t++) {
			b += w[t].items[rep] * c->size;
			items += w[t].items[rep];
			if (w[t].seconds[rep] > s)
				s = w[t].seconds[rep];
		}
		bytes += b;
		secs += s;
		g[rep] = s > 0 ? b / s / 1e9 : 0;
	}
	pthread_barrier_destroy(&bar);
	free(w);

	r = pmb_new_row();
	snprintf(r->op, sizeof(r->op), "%s", c->op == OP_WRITE ? "write" : "read");
	snprintf(r->path, sizeof(r->path), "cpu");
	snprintf(r->method, sizeof(r->method), "%s", pmb_method_names[c->method]);
	snprintf(r->layout, sizeof(r->layout), "%s", pmb_layout_names[c->layout]);
	snprintf(r->align, sizeof(r->align), "%s", pmb_align_name(&c->align, an, sizeof(an)));
	r->size = c->size;
	r->threads = c->threads;
	r->node = c->node >= 0 ? c->node : region_node;
	r->items = items;
	r->bytes = bytes;
	r->seconds = secs;
	r->repeats = opt.repeat;
	r->gbps_min = r->gbps_max = g[0];
	for (unsigned rep = 1; rep < opt.repeat; rep++) {
		r->gbps_min = g[rep] < r->gbps_min ? g[rep] : r->gbps_min;
		r->gbps_max = g[rep] > r->gbps_max ? g[rep] : r->gbps_max;
	}
	r->gbps = tool_median(g, opt.repeat);
	snprintf(r->ddio, sizeof(r->ddio), "%s", region_ddio);
	snprintf(r->ddio_port, sizeof(r->ddio_port), "%s", region_ddio_port);
	snprintf(r->series, sizeof(r->series), "%s cpu %s %s %s t%u n%d", r->op, r->method, r->layout,
			r->align, r->threads, r->node);
	pmb_print_row(r);
}
