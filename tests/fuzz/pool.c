/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * pool.c -- fuzzes the pool header and allocation table (pmalloc/pool.c,
 * pool_check.c) as they lie on a region.
 *
 * Input: one flag byte, then the region's first bytes (header page and
 * table; the rest of the region is zero).  Flags ask the harness to
 * recompute checksums after placing the bytes, so that the fuzzer gets past
 * them to the checks behind: FIX_HDR the header's, FIX_ENTRIES the check
 * word of every entry whose state says live.
 *
 * Then pma_pool_check, pma_pool_open and pma_pool_salvage on the region.
 * Promises checked: check and open agree (a pool opens exactly when the
 * check finds nothing); every allocation listed lies inside the region and
 * is found by name; an opened pool takes an allocation and a free and still
 * checks clean; salvage succeeds on any pool that opens.
 */
#define FUZZ_NAME "pool"
#include "driver.h"

#include "pmalloc.h"
#include "pool_format.h"

#define REGION_SIZE ((2u << 20) + (64u << 10)) /* heap at 2 MiB, 64 KiB of it */
#define FIX_HDR     1u
#define FIX_ENTRIES 2u

static struct pma_region *region;
static char *base;

static void
open_region(void)
{
	char path[256];
	snprintf(path, sizeof(path), "%s/pool", fuzz_dir());
	int rc = pma_region_open(path, REGION_SIZE, PMA_REGION_CREATE | PMA_REGION_NO_PREFAULT,
			&region);
	if (rc) {
		fprintf(stderr, "pool: cannot open the region: %s\n", pma_errormsg());
		abort();
	}
	base = pma_region_addr(region);
}

static void
problem(void *arg, int code, const char *message)
{
	(void)arg;
	fuzz_assert(code < 0 && message && *message, "problem %d without a message", code);
}

struct listing {
	struct pma_pool *pool;
	unsigned n;
};

static int
each(const struct pma_alloc_info *a, void *arg)
{
	struct listing *l = arg;
	void *addr;
	size_t size;

	fuzz_assert(a->name && memchr(a->name, 0, PMA_NAME_MAX), "name not terminated");
	fuzz_assert(a->offset <= REGION_SIZE && a->size <= REGION_SIZE - a->offset,
			"'%s' [%llu, +%llu) lies outside the region of %u bytes", a->name,
			(unsigned long long)a->offset, (unsigned long long)a->size, REGION_SIZE);
	int rc = pma_lookup(l->pool, a->name, &addr, &size);
	fuzz_assert(rc == 0, "listed '%s' not found: %s", a->name, pma_errormsg());
	fuzz_assert((char *)addr >= base && size <= REGION_SIZE &&
			(size_t)((char *)addr - base) <= REGION_SIZE - size,
			"lookup of '%s' points outside the region", a->name);
	l->n++;
	return 0;
}

static void
fix_checksums(unsigned flags)
{
	struct pool_hdr *h = (struct pool_hdr *)base;
	if (flags & FIX_ENTRIES) {
		/* The library reads the table only at POOL_HDR_AREA (it refuses
		 * any other table_off): the live entries there, as many as fit. */
		uint64_t n = (REGION_SIZE - POOL_HDR_AREA) / sizeof(struct table_entry);
		struct table_entry *t = (struct table_entry *)(base + POOL_HDR_AREA);
		for (uint64_t i = 0; i < n; i++)
			if ((uint32_t)t[i].state == ENTRY_LIVE)
				t[i].state = pool_entry_state(&t[i]);
	}
	if (flags & FIX_HDR)
		h->checksum = pool_hdr_checksum(h);
}

static void
fuzz_one(const uint8_t *data, size_t len)
{
	if (!region)
		open_region();
	memset(base, 0, REGION_SIZE);
	if (len == 0)
		return;
	unsigned flags = data[0];
	size_t n = len - 1 < REGION_SIZE ? len - 1 : REGION_SIZE;
	memcpy(base, data + 1, n);
	fix_checksums(flags);

	int check = pma_pool_check(region, problem, NULL);
	fuzz_check_error(check, pma_errormsg());

	struct pma_pool *p = NULL;
	int rc = pma_pool_open(region, &p);
	fuzz_check_error(rc, pma_errormsg());
	fuzz_assert((rc == 0) == (check == 0), "pma_pool_open gives %d, pma_pool_check %d (%s)",
			rc, check, pma_errormsg());
	if (rc == 0) {
		struct listing l = {p, 0};
		fuzz_assert(pma_pool_foreach(p, each, &l) == 0, "foreach");
		fuzz_assert(pma_pool_free_bytes(p) <= REGION_SIZE, "free bytes beyond the region");
		/* A pool that opens takes changes and stays consistent. */
		void *addr;
		int a = pma_alloc(p, "fuzz-new", 4096, 0, PMA_ALLOC_ZERO, &addr);
		fuzz_check_error(a, pma_errormsg());
		fuzz_assert(a == 0 || a == -ENOSPC || a == -EEXIST, "alloc: %d %s", a, pma_errormsg());
		if (a == 0) {
			fuzz_assert((char *)addr >= base && (char *)addr - base <= REGION_SIZE - 4096,
					"allocation outside the region");
			rc = pma_pool_check(region, problem, NULL);
			fuzz_assert(rc == 0, "inconsistent after an allocation: %s", pma_errormsg());
			fuzz_assert(pma_free(p, "fuzz-new") == 0, "free: %s", pma_errormsg());
		}
		rc = pma_pool_check(region, problem, NULL);
		fuzz_assert(rc == 0, "inconsistent after alloc and free: %s", pma_errormsg());
		pma_pool_close(&p);
	}

	rc = pma_pool_salvage(region, problem, NULL, &p);
	fuzz_check_error(rc, pma_errormsg());
	fuzz_assert(check != 0 || rc == 0, "a sound pool does not salvage: %s", pma_errormsg());
	if (rc == 0) {
		struct listing l = {p, 0};
		fuzz_assert(pma_pool_foreach(p, each, &l) == 0, "foreach (salvaged)");
		void *addr;
		fuzz_assert(pma_alloc(p, "fuzz-new", 128, 0, 0, &addr) == -EROFS,
				"a salvaged pool took an allocation");
		pma_pool_close(&p);
	}
}

/* Writes the flag byte and the region's header page and table of `entries`. */
static void
seed_region(const char *dir, const char *name, unsigned flags, unsigned entries)
{
	fuzz_seed_flagged(dir, name, flags, base,
			POOL_HDR_AREA + (size_t)entries * sizeof(struct table_entry));
}

static void
fuzz_seeds(const char *dir)
{
	struct pma_pool *p;
	void *a;

	open_region();
	memset(base, 0, REGION_SIZE);
	seed_region(dir, "blank", 0, 4);
	if (pma_pool_create(region, 16, &p))
		abort();
	seed_region(dir, "empty16", 0, 16);
	if (pma_alloc(p, "store.meta", 5000, 0, PMA_ALLOC_ZERO, &a) ||
	    pma_alloc(p, "store.data0", 20000, 4096, 0, &a) ||
	    pma_alloc(p, "store.data1", 20000, 4096, 0, &a) ||
	    pma_alloc(p, "x", 128, 0, 0, &a))
		abort();
	seed_region(dir, "four", 0, 16);
	seed_region(dir, "four-fix", FIX_HDR | FIX_ENTRIES, 16);
	if (pma_free(p, "store.data0"))
		abort();
	seed_region(dir, "freed", 0, 16);
	pma_pool_close(&p);
	/* Damaged: a wiped header over a good table (salvage guesses the geometry). */
	memset(base, 0, sizeof(struct pool_hdr));
	seed_region(dir, "bad-wiped-header", 0, 16);
	memset(base, 0, REGION_SIZE);
	if (pma_pool_create(region, 1, &p))
		abort();
	if (pma_alloc(p, "only", 256, 0, 0, &a))
		abort();
	pma_pool_close(&p);
	seed_region(dir, "one", 0, 1);
	base[8] = 2; /* version 2 */
	seed_region(dir, "bad-version", 0, 1);
	seed_region(dir, "version-fix", FIX_HDR, 1);
}
