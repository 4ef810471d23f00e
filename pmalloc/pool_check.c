/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * pool_check.c -- checking a pool's header and allocation table (every
 * open does), reporting every problem (pma_pool_check, pmempool check's
 * role), and opening what survives of a damaged pool read-only
 * (pma_pool_salvage), so that the stores whose allocations are intact can
 * still be recovered and exported.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pmalloc.h"
#include "errmsg.h"
#include "pool_format.h"

#define MAX_REPORTED_ENTRIES 32 /* per-entry problems reported before a summary */

/* Records one problem: its code, the message (pma_errormsg when it is the error), the report. */
static int __attribute__((format(printf, 3, 4)))
problem(struct pool_problems *pr, int code, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (!pr->first) {
		pr->first = code;
		pma__err(code, "%s", msg);
	}
	pr->count++;
	if (pr->report)
		pr->report(pr->arg, code, msg);
	return code;
}

/* The geometry pma_pool_create gives a region with the default table. */
static void
default_geometry(struct pool_hdr *g, size_t size)
{
	memset(g, 0, sizeof(*g));
	g->table_off = POOL_HDR_AREA;
	g->table_entries = DEFAULT_MAX_ALLOCS;
	g->heap_off = 2u << 20; /* align_up(4096 + 1024 * 128, PMA_LARGE_ALIGN) */
	g->pool_size = size;
}

static int
geometry_sound(const struct pool_hdr *h, size_t size)
{
	return h->table_off == POOL_HDR_AREA && h->table_entries > 0 &&
	       h->table_entries <= MAX_ALLOCS_LIMIT &&
	       h->heap_off >= h->table_off + h->table_entries * sizeof(struct table_entry) &&
	       h->heap_off <= h->pool_size && h->heap_off <= size;
}

/* Does a live entry at index i of the table under geometry g check out? */
static int
entry_sound(const struct table_entry *e, const struct pool_hdr *g)
{
	return e->state == pool_entry_state(e) && memchr(e->name, 0, sizeof(e->name)) &&
	       e->name[0] && pool_is_pow2(e->align) && e->offset % e->align == 0 &&
	       e->offset >= g->heap_off && e->size && e->size <= g->pool_size &&
	       e->offset <= g->pool_size - e->size;
}

static int
cmp_offset(const void *a, const void *b)
{
	const struct table_entry *x = *(const struct table_entry *const *)a;
	const struct table_entry *y = *(const struct table_entry *const *)b;
	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Entries, overlaps, duplicate names: each bad entry marked in bad[]. */
static int
inspect_table(const char *base, const struct pool_hdr *g, struct pool_problems *pr, uint8_t *bad)
{
	const struct table_entry *t = (const struct table_entry *)(base + g->table_off);
	unsigned reported = 0;
	size_t k = 0;

	for (uint64_t i = 0; i < g->table_entries; i++) {
		const struct table_entry *e = &t[i];
		if (!e->state || entry_sound(e, g))
			continue;
		bad[i] = 1;
		if (reported++ >= MAX_REPORTED_ENTRIES && !pr->stop_at_first)
			continue;
		if (e->state != pool_entry_state(e))
			problem(pr, PMA_E_CORRUPT, "allocation table entry %llu: state word %#llx does "
					"not match its fields", (unsigned long long)i,
					(unsigned long long)e->state);
		else
			problem(pr, PMA_E_CORRUPT, "allocation table entry %llu is inconsistent "
					"(offset %llu size %llu align %llu)", (unsigned long long)i,
					(unsigned long long)e->offset, (unsigned long long)e->size,
					(unsigned long long)e->align);
		if (pr->stop_at_first)
			return pr->first;
	}
	if (reported > MAX_REPORTED_ENTRIES)
		problem(pr, PMA_E_CORRUPT, "%u more inconsistent allocation table entries",
				reported - MAX_REPORTED_ENTRIES);

	/* Live allocations must not overlap and names must be unique: the later one goes. */
	const struct table_entry **v = malloc((size_t)g->table_entries * sizeof(*v) + 1);
	if (!v)
		return pma__err(-ENOMEM, "out of memory");
	for (uint64_t i = 0; i < g->table_entries; i++)
		if (t[i].state && !bad[i])
			v[k++] = &t[i];
	qsort(v, k, sizeof(*v), cmp_offset);
	for (size_t i = 1; i < k; i++) {
		if (v[i - 1]->offset + v[i - 1]->size > v[i]->offset) {
			bad[v[i] - t] = 1;
			problem(pr, PMA_E_CORRUPT, "allocations '%s' and '%s' overlap", v[i - 1]->name,
					v[i]->name);
			if (pr->stop_at_first)
				break;
		}
	}
	for (size_t i = 0; i < k && !(pr->stop_at_first && pr->first); i++)
		for (size_t j = i + 1; j < k; j++)
			if (!bad[v[j] - t] && !strcmp(v[i]->name, v[j]->name)) {
				bad[v[j] - t] = 1;
				problem(pr, PMA_E_CORRUPT, "allocation name '%s' appears twice",
						v[i]->name);
				break;
			}
	free(v);
	return pr->first;
}

/* A table that holds at least one sound entry under geometry g. */
static int
table_plausible(const char *base, const struct pool_hdr *g, size_t size)
{
	const struct table_entry *t = (const struct table_entry *)(base + g->table_off);

	if (g->table_off + g->table_entries * sizeof(struct table_entry) > size)
		return 0;
	for (uint64_t i = 0; i < g->table_entries; i++)
		if (t[i].state && entry_sound(&t[i], g))
			return 1;
	return 0;
}

int
pma__pool_inspect(struct pma_region *r, struct pool_problems *pr, struct pool_hdr *geom,
		int *guessed, uint8_t **bad)
{
	const struct pool_hdr *h = pma_region_addr(r);
	const char *base = pma_region_addr(r);
	size_t size = pma_region_size(r);
	const char *path = pma_region_path(r);

	*bad = NULL;
	*guessed = 0;
	if (size < POOL_HDR_AREA)
		return problem(pr, PMA_E_TRUNCATED, "%s: %zu bytes cannot hold a pool header", path,
				size);
	int sound = 0;
	if (memcmp(h->magic, POOL_MAGIC, sizeof(h->magic))) {
		problem(pr, PMA_E_NOT_POOL, "%s: no pool header (bad magic): not a pmalloc pool, or "
				"its header was zeroed", path);
	} else if (h->version != POOL_VERSION) {
		/* Another version's layout is not ours to interpret, even to salvage. */
		return problem(pr, PMA_E_VERSION, "%s: pool version %u, this library reads version "
				"%u", path, h->version, POOL_VERSION);
	} else if (h->hdr_size != sizeof(*h) || pool_hdr_checksum(h) != h->checksum) {
		problem(pr, PMA_E_CORRUPT, "%s: pool header checksum mismatch", path);
		sound = geometry_sound(h, size) && h->pool_size <= size;
	} else if (h->pool_size > size) {
		problem(pr, PMA_E_TRUNCATED, "%s: pool of %llu bytes but only %zu mapped (file "
				"truncated?)", path, (unsigned long long)h->pool_size, size);
		sound = geometry_sound(h, size);
	} else if (!geometry_sound(h, size)) {
		problem(pr, PMA_E_CORRUPT, "%s: pool header fields are inconsistent", path);
	} else {
		sound = 1;
	}
	if (pr->stop_at_first && pr->first)
		return pr->first;

	/* The geometry to read the table with: the header's, else the default one, if it fits. */
	if (sound) {
		*geom = *h;
		if (geom->pool_size > size)
			geom->pool_size = size; /* truncated: only what is mapped can be read */
	} else {
		default_geometry(geom, size);
		if (!table_plausible(base, geom, size))
			return pr->first; /* nothing recognisable to read */
		*guessed = 1;
		problem(pr, pr->first, "%s: reading the allocation table with the default geometry "
				"(%llu entries, heap at %llu)", path,
				(unsigned long long)geom->table_entries,
				(unsigned long long)geom->heap_off);
	}
	*bad = calloc((size_t)geom->table_entries + 1, 1);
	if (!*bad)
		return pma__err(-ENOMEM, "out of memory");
	int ret = inspect_table(base, geom, pr, *bad);
	if (ret && pr->stop_at_first)
		pma__err_prefix(ret, "%s", path);
	return ret;
}

int
pma_pool_check(struct pma_region *r, pma_problem_fn report, void *arg)
{
	if (!r)
		return pma__err(-EINVAL, "pma_pool_check: region is required");
	struct pool_problems pr = {.report = report, .arg = arg};
	struct pool_hdr geom;
	uint8_t *bad = NULL;
	int guessed;
	int ret = pma__pool_inspect(r, &pr, &geom, &guessed, &bad);
	free(bad);
	return ret;
}

int
pma_pool_salvage(struct pma_region *r, pma_problem_fn report, void *arg, struct pma_pool **out)
{
	if (!r || !out)
		return pma__err(-EINVAL, "pma_pool_salvage: region and out are required");
	*out = NULL;
	struct pool_problems pr = {.report = report, .arg = arg};
	struct pool_hdr geom;
	uint8_t *bad = NULL;
	int guessed;
	int ret = pma__pool_inspect(r, &pr, &geom, &guessed, &bad);
	if (!bad) /* no table to read: not a pool, another version, or nothing left */
		return ret ? ret : pma__err(-ENOMEM, "out of memory");

	struct pma_pool *p;
	if ((ret = pma__pool_new(r, &p))) {
		free(bad);
		return ret;
	}
	/* A private copy of geometry and table without the bad entries: nothing is ever written. */
	p->salvaged = 1;
	p->geom = geom;
	p->hdr = &p->geom;
	p->table_copy = malloc((size_t)geom.table_entries * sizeof(struct table_entry));
	if (!p->table_copy) {
		free(bad);
		pma_pool_close(&p);
		return pma__err(-ENOMEM, "out of memory");
	}
	memcpy(p->table_copy, (const char *)pma_region_addr(r) + geom.table_off,
			(size_t)geom.table_entries * sizeof(struct table_entry));
	for (uint64_t i = 0; i < geom.table_entries; i++)
		if (bad[i])
			memset(&p->table_copy[i], 0, sizeof(p->table_copy[i]));
	p->table = p->table_copy;
	free(bad);
	*out = p;
	return 0;
}
