/* pool.c -- pmalloc unit tests: create/open, alignment, names, lookup, free, ENOSPC, foreach. */
#include <errno.h>
#include <stdint.h>

#include "pmalloc.h"
#include "tap.h"
#include "ckpt_util.h"

#define MiB ((size_t)1 << 20)

static uint64_t
off_of(struct pma_pool *p, const void *addr)
{
	return (uint64_t)((const char *)addr - (const char *)pma_region_addr(pma_pool_region(p)));
}

struct listing {
	int n;
	char names[32][PMA_NAME_MAX];
	uint64_t offset[32], size[32], align[32];
	int stop_at; /* return 7 at this call (1-based); 0: never */
};

static int
collect(const struct pma_alloc_info *info, void *arg)
{
	struct listing *l = arg;

	if (l->n < 32) {
		snprintf(l->names[l->n], PMA_NAME_MAX, "%s", info->name);
		l->offset[l->n] = info->offset;
		l->size[l->n] = info->size;
		l->align[l->n] = info->align;
	}
	l->n++;
	return l->stop_at && l->n == l->stop_at ? 7 : 0;
}

static void
test_alignment_and_names(const char *path)
{
	struct pma_region *r;
	struct pma_pool *p;
	void *a;

	unlink(path);
	if (pma_region_open(path, 32 * MiB, PMA_REGION_CREATE, &r)) {
		ok(0, "create region: %s", pma_errormsg());
		return;
	}
	is_int(pma_pool_create(r, 0, &p), 0, "create pool over 32 MiB");

	/* Odd sizes: every allocation starts on a 128-byte boundary. */
	static const size_t sizes[] = {1, 7, 100, 127, 128, 129, 1000, 4095, 4097, 65537};
	int aligned = 1, allocated = 1;
	uint64_t prev_end = 0;
	int packed = 1;
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		char name[32];
		snprintf(name, sizeof(name), "small%zu", i);
		if (pma_alloc(p, name, sizes[i], 0, 0, &a)) {
			allocated = 0;
			diag("alloc %s: %s", name, pma_errormsg());
			continue;
		}
		uint64_t off = off_of(p, a);
		if (off % PMA_MIN_ALIGN || (uintptr_t)a % PMA_MIN_ALIGN) {
			aligned = 0;
			diag("%s (%zu bytes) at offset %llu", name, sizes[i], (unsigned long long)off);
		}
		/* First fit on an empty heap: each lands right after the previous, rounded to 128. */
		if (prev_end && off != (prev_end + 127) / 128 * 128) {
			packed = 0;
			diag("%s at %llu, previous ended at %llu", name, (unsigned long long)off,
					(unsigned long long)prev_end);
		}
		prev_end = off + sizes[i];
	}
	ok(allocated, "ten small allocations of odd sizes");
	ok(aligned, "every small allocation is 128-byte aligned");
	ok(packed, "small allocations are placed first-fit, back to back at 128-byte steps");

	/* Large allocations get 2 MiB alignment even though the cursor is not there. */
	is_int(pma_alloc(p, "large", 2 * MiB, 0, 0, &a), 0, "2 MiB allocation");
	ok(off_of(p, a) % PMA_LARGE_ALIGN == 0, "2 MiB allocation is 2 MiB aligned (offset %llu)",
			(unsigned long long)off_of(p, a));
	is_int(pma_alloc(p, "tiny-after-large", 8, 0, 0, &a), 0, "small allocation after it");
	is_int(pma_alloc(p, "large2", 3 * MiB + 5, 0, 0, &a), 0, "3 MiB + 5 allocation");
	uint64_t large2_end = off_of(p, a) + 3 * MiB + 5;
	ok(off_of(p, a) % PMA_LARGE_ALIGN == 0, "3 MiB + 5 allocation is 2 MiB aligned (offset %llu)",
			(unsigned long long)off_of(p, a));
	is_int(pma_alloc(p, "almost-large", 2 * MiB - 128, 0, 0, &a), 0, "2 MiB - 128 allocation");
	is_int(off_of(p, a), (large2_end + 127) / 128 * 128,
			"just under 2 MiB: 128-byte aligned right after the previous one");

	/* An explicit alignment is honoured: put the cursor off a 4 KiB boundary first. */
	is_int(pma_alloc(p, "nudge", 200, 0, 0, &a), 0, "nudge allocation");
	ok(off_of(p, a) % 4096 != 0, "cursor is off a 4096 boundary (offset %llu)",
			(unsigned long long)off_of(p, a));
	is_int(pma_alloc(p, "page", 300, 4096, 0, &a), 0, "allocation with align 4096");
	ok(off_of(p, a) % 4096 == 0, "align 4096 honoured (offset %llu)",
			(unsigned long long)off_of(p, a));
	is_int(pma_alloc(p, "a64k", 10, 65536, 0, &a), 0, "allocation with align 64 KiB");
	ok(off_of(p, a) % 65536 == 0, "align 65536 honoured (offset %llu)",
			(unsigned long long)off_of(p, a));
	is_int(pma_alloc(p, "a16", 10, 16, 0, &a), 0, "align 16 (below the minimum)");
	ok(off_of(p, a) % PMA_MIN_ALIGN == 0, "align 16 still gives 128-byte alignment");

	/* The listing reports the effective alignment. */
	struct listing l = {0};
	pma_pool_foreach(p, collect, &l);
	int align_ok = 1;
	for (int i = 0; i < l.n && i < 32; i++) {
		uint64_t want = !strcmp(l.names[i], "page") ? 4096 : !strcmp(l.names[i], "a64k") ? 65536 :
				l.size[i] >= PMA_LARGE_SIZE ? PMA_LARGE_ALIGN : PMA_MIN_ALIGN;
		if (l.align[i] != want || l.offset[i] % l.align[i]) {
			align_ok = 0;
			diag("%s: align %llu (want %llu), offset %llu", l.names[i],
					(unsigned long long)l.align[i], (unsigned long long)want,
					(unsigned long long)l.offset[i]);
		}
	}
	ok(align_ok, "foreach reports each allocation's effective alignment");

	/* Bad arguments. */
	mark_errormsg();
	is_int(pma_alloc(p, "badalign", 64, 3, 0, &a), -EINVAL, "align 3 is -EINVAL");
	ok(errormsg_fresh(), "with a message: %s", pma_errormsg());
	mark_errormsg();
	is_int(pma_alloc(p, "zero", 0, 0, 0, &a), -EINVAL, "size 0 is -EINVAL");
	ok(errormsg_fresh(), "with a message: %s", pma_errormsg());
	mark_errormsg();
	is_int(pma_alloc(p, "", 64, 0, 0, &a), -EINVAL, "empty name is -EINVAL");
	ok(errormsg_fresh(), "with a message: %s", pma_errormsg());

	char longname[PMA_NAME_MAX + 1];
	memset(longname, 'n', PMA_NAME_MAX);
	longname[PMA_NAME_MAX] = '\0';
	mark_errormsg();
	is_int(pma_alloc(p, longname, 64, 0, 0, &a), -EINVAL, "name of %d bytes is -EINVAL",
			PMA_NAME_MAX);
	ok(errormsg_fresh(), "with a message: %s", pma_errormsg());
	longname[PMA_NAME_MAX - 1] = '\0'; /* 95 bytes + NUL = PMA_NAME_MAX: the longest allowed */
	is_int(pma_alloc(p, longname, 64, 0, 0, &a), 0, "name of %d bytes is accepted",
			PMA_NAME_MAX - 1);
	void *found = NULL;
	size_t fsize = 0;
	is_int(pma_lookup(p, longname, &found, &fsize), 0, "longest name found by lookup");
	ok(found == a && fsize == 64, "with its address and size");

	mark_errormsg();
	is_int(pma_alloc(p, "small3", 64, 0, 0, &a), -EEXIST, "duplicate name is -EEXIST");
	ok(errormsg_fresh() && strstr(pma_errormsg(), "small3"), "message names it: %s",
			pma_errormsg());
	is_int(pma_alloc(p, "small", 64, 0, 0, &a), 0, "a prefix of an existing name is distinct");

	pma_pool_close(&p);
	ok(p == NULL, "close clears the pointer");
	pma_region_close(&r);
	unlink(path);
}

static void
test_persistence(const char *path)
{
	struct pma_region *r;
	struct pma_pool *p;
	void *a, *b, *c;
	uint8_t uuid[16], zero[16] = {0};

	unlink(path);
	if (pma_region_open(path, 16 * MiB, PMA_REGION_CREATE, &r)) {
		ok(0, "create region: %s", pma_errormsg());
		return;
	}
	is_int(pma_pool_create(r, 0, &p), 0, "create pool");
	memcpy(uuid, pma_pool_uuid(p), 16);
	ok(memcmp(uuid, zero, 16) != 0, "uuid is not zero");
	ok(pma_pool_region(p) == r, "pool reports its region");

	size_t free0 = pma_pool_free_bytes(p);
	ok(free0 > 0 && free0 < 16 * MiB, "free bytes %zu of a 16 MiB pool", free0);
	is_int(pma_alloc(p, "alpha", 1000, 0, 0, &a), 0, "alloc alpha");
	size_t free1 = pma_pool_free_bytes(p);
	is_int(free0 - free1, 1000, "free bytes decrease by alpha's size");
	is_int(pma_alloc(p, "beta", 3 * MiB, 0, 0, &b), 0, "alloc beta");
	size_t free2 = pma_pool_free_bytes(p);
	is_int(free1 - free2, 3 * MiB, "free bytes decrease by beta's size");
	is_int(pma_alloc(p, "gamma", 4096, 0, 0, &c), 0, "alloc gamma");
	memset(a, 0xa1, 1000);
	memset(b, 0xb2, 3 * MiB);
	memset(c, 0xc3, 4096);
	pma_region_persist(r, a, 1000);
	pma_region_persist(r, b, 3 * MiB);
	pma_region_persist(r, c, 4096);
	uint64_t oa = off_of(p, a), ob = off_of(p, b), oc = off_of(p, c);

	pma_pool_close(&p);
	pma_region_close(&r);

	is_int(pma_region_open(path, 0, 0, &r), 0, "reopen region");
	is_int(pma_pool_open(r, &p), 0, "reopen pool");
	if (!p) {
		pma_region_close(&r);
		return;
	}
	ok(memcmp(pma_pool_uuid(p), uuid, 16) == 0, "uuid stable across reopen");
	is_int(pma_pool_free_bytes(p), free2 - 4096, "free bytes stable across reopen");
	void *x = NULL;
	size_t xs = 0;
	is_int(pma_lookup(p, "alpha", &x, &xs), 0, "lookup alpha after reopen");
	ok(x && off_of(p, x) == oa && xs == 1000, "alpha at the same offset with its size");
	ok(x && ((uint8_t *)x)[0] == 0xa1 && ((uint8_t *)x)[999] == 0xa1, "alpha's bytes survived");
	is_int(pma_lookup(p, "beta", &x, &xs), 0, "lookup beta after reopen");
	ok(x && off_of(p, x) == ob && xs == 3 * MiB, "beta at the same offset with its size");
	ok(x && ((uint8_t *)x)[3 * MiB - 1] == 0xb2, "beta's bytes survived");
	is_int(pma_lookup(p, "gamma", NULL, NULL), 0, "lookup with NULL outputs");
	is_int(pma_lookup(p, "delta", &x, &xs), -ENOENT, "lookup of a missing name is -ENOENT");

	/* Free, then lookup fails; the space is reused first-fit. */
	is_int(pma_free(p, "alpha"), 0, "free alpha");
	is_int(pma_lookup(p, "alpha", NULL, NULL), -ENOENT, "alpha gone after free");
	is_int(pma_free(p, "alpha"), -ENOENT, "second free is -ENOENT");
	is_int(pma_pool_free_bytes(p), free2 - 4096 + 1000, "free bytes grow back by alpha's size");
	is_int(pma_alloc(p, "alpha2", 900, 0, 0, &x), 0, "alloc alpha2 (fits alpha's gap)");
	is_int(off_of(p, x), oa, "alpha2 reuses alpha's space");
	is_int(pma_free(p, "gamma"), 0, "free gamma");

	pma_pool_close(&p);
	pma_region_close(&r);
	is_int(pma_region_open(path, 0, 0, &r), 0, "reopen region again");
	is_int(pma_pool_open(r, &p), 0, "reopen pool again");
	if (p) {
		is_int(pma_lookup(p, "alpha", NULL, NULL), -ENOENT, "free of alpha is durable");
		is_int(pma_lookup(p, "gamma", NULL, NULL), -ENOENT, "free of gamma is durable");
		is_int(pma_lookup(p, "alpha2", &x, NULL), 0, "alpha2 is durable");
		ok(x && off_of(p, x) == oa, "at alpha's old offset");
		is_int(pma_alloc(p, "gamma2", 4096, 0, 0, &x), 0, "alloc gamma2");
		is_int(off_of(p, x), oc, "gamma2 reuses gamma's space");
		pma_pool_close(&p);
	}
	pma_region_close(&r);

	/* A second pool gets another uuid. */
	is_int(pma_region_open(path, 0, 0, &r), 0, "reopen for re-creation");
	is_int(pma_pool_create(r, 0, &p), 0, "create a new pool over the old one");
	if (p) {
		ok(memcmp(pma_pool_uuid(p), uuid, 16) != 0, "new pool, new uuid");
		is_int(pma_lookup(p, "beta", NULL, NULL), -ENOENT, "re-created pool is empty");
		is_int(pma_pool_free_bytes(p), free0, "and all free");
		pma_pool_close(&p);
	}
	pma_region_close(&r);
	unlink(path);
}

static void
test_full(const char *path)
{
	struct pma_region *r;
	struct pma_pool *p;
	void *a;

	unlink(path);
	if (pma_region_open(path, 8 * MiB, PMA_REGION_CREATE, &r)) {
		ok(0, "create region: %s", pma_errormsg());
		return;
	}
	/* Heap full. */
	is_int(pma_pool_create(r, 0, &p), 0, "create pool over 8 MiB");
	size_t free0 = pma_pool_free_bytes(p);
	mark_errormsg();
	is_int(pma_alloc(p, "huge", free0 + 1, 0, 0, &a), -ENOSPC, "more than the heap is -ENOSPC");
	ok(errormsg_fresh(), "with a message: %s", pma_errormsg());
	is_int(pma_alloc(p, "whole", free0, 0, 0, &a), 0, "exactly the heap fits");
	mark_errormsg();
	is_int(pma_alloc(p, "one", 1, 0, 0, &a), -ENOSPC, "then one byte more is -ENOSPC");
	ok(errormsg_fresh(), "with a message: %s", pma_errormsg());
	is_int(pma_pool_free_bytes(p), 0, "no free bytes left");
	is_int(pma_free(p, "whole"), 0, "free it");
	is_int(pma_alloc(p, "one", 1, 0, 0, &a), 0, "one byte fits again");

	/* Fill with 1 MiB pieces until full; -ENOSPC must come, and nothing overlaps. */
	int n = 0, ret;
	char name[32];
	do {
		snprintf(name, sizeof(name), "piece%d", n);
		ret = pma_alloc(p, name, MiB, 0, 0, &a);
		if (!ret)
			memset(a, n, MiB);
	} while (!ret && ++n < 100);
	is_int(ret, -ENOSPC, "filling with 1 MiB pieces ends in -ENOSPC after %d", n);
	ok(n >= 4 && n < 100, "%d pieces fit", n);
	int intact = 1;
	for (int i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "piece%d", i);
		if (pma_lookup(p, name, &a, NULL) || ((uint8_t *)a)[0] != (uint8_t)i ||
		    ((uint8_t *)a)[MiB - 1] != (uint8_t)i)
			intact = 0;
	}
	ok(intact, "every piece holds its own bytes (no overlap)");
	pma_pool_close(&p);

	/* Table full with a small max_allocs. */
	is_int(pma_pool_create(r, 4, &p), 0, "create pool with max_allocs 4");
	int made = 1;
	for (int i = 0; i < 4; i++) {
		snprintf(name, sizeof(name), "t%d", i);
		made &= pma_alloc(p, name, 128, 0, 0, &a) == 0;
	}
	ok(made, "4 allocations fit the table");
	mark_errormsg();
	is_int(pma_alloc(p, "t4", 128, 0, 0, &a), -ENOSPC, "a fifth is -ENOSPC (table full)");
	ok(errormsg_fresh(), "with a message: %s", pma_errormsg());
	ok(pma_pool_free_bytes(p) > MiB, "although the heap has room");
	is_int(pma_free(p, "t2"), 0, "free one");
	is_int(pma_alloc(p, "t4", 128, 0, 0, &a), 0, "then the fifth fits");
	pma_pool_close(&p);
	pma_region_close(&r);
	is_int(pma_region_open(path, 0, 0, &r), 0, "reopen");
	is_int(pma_pool_open(r, &p), 0, "reopen pool with 4 entries");
	if (p) {
		is_int(pma_alloc(p, "t5", 128, 0, 0, &a), -ENOSPC, "table still full after reopen");
		is_int(pma_lookup(p, "t4", NULL, NULL), 0, "t4 there");
		is_int(pma_lookup(p, "t2", NULL, NULL), -ENOENT, "t2 not there");
		pma_pool_close(&p);
	}

	/* Bad max_allocs and a region too small for its table. */
	mark_errormsg();
	is_int(pma_pool_create(r, (1u << 20) + 1, &p), -EINVAL, "max_allocs above the limit is -EINVAL");
	ok(pma_errormsg()[0] != '\0', "with a message: %s", pma_errormsg());
	is_int(pma_pool_create(r, 1u << 20, &p), -ENOSPC,
			"a table of 2^20 entries does not fit 8 MiB: -ENOSPC");
	ok(pma_errormsg()[0] != '\0', "with a message: %s", pma_errormsg());
	pma_region_close(&r);
	unlink(path);
}

static void
test_zero_and_foreach(const char *path)
{
	struct pma_region *r;
	struct pma_pool *p;
	void *a, *b, *c, *d, *e;

	unlink(path);
	if (pma_region_open(path, 16 * MiB, PMA_REGION_CREATE, &r)) {
		ok(0, "create region: %s", pma_errormsg());
		return;
	}
	is_int(pma_pool_create(r, 0, &p), 0, "create pool");

	/* Dirty bytes, freed, then reallocated with PMA_ALLOC_ZERO at the same place. */
	const size_t zn = 300000;
	is_int(pma_alloc(p, "dirty", zn, 0, 0, &a), 0, "alloc dirty");
	memset(a, 0xee, zn);
	pma_region_persist(r, a, zn);
	is_int(pma_free(p, "dirty"), 0, "free dirty");
	is_int(pma_alloc(p, "clean", zn, 0, PMA_ALLOC_ZERO, &b), 0, "alloc with PMA_ALLOC_ZERO");
	ok(a == b, "over the dirty bytes");
	size_t nonzero = 0;
	for (size_t i = 0; i < zn; i++)
		nonzero += ((uint8_t *)b)[i] != 0;
	is_int(nonzero, 0, "all %zu bytes zero", zn);
	is_int(pma_free(p, "clean"), 0, "free clean");

	/*
	 * Make table order differ from offset order: a, b, c in entries 0..2;
	 * free a and b; d (too big for the gap) takes entry 0 at the end; e
	 * (small) takes entry 1 in the gap at the start.
	 */
	is_int(pma_alloc(p, "a", 1000, 0, 0, &a), 0, "alloc a");
	is_int(pma_alloc(p, "b", 1000, 0, 0, &b), 0, "alloc b");
	is_int(pma_alloc(p, "c", 1000, 0, 0, &c), 0, "alloc c");
	is_int(pma_free(p, "a"), 0, "free a");
	is_int(pma_free(p, "b"), 0, "free b");
	is_int(pma_alloc(p, "d", 5000, 0, 0, &d), 0, "alloc d (too big for the gap)");
	is_int(pma_alloc(p, "e", 500, 0, 0, &e), 0, "alloc e (fits the gap)");
	ok(e == a, "e takes a's place");
	ok((char *)d > (char *)c, "d placed after c");

	struct listing l = {0};
	is_int(pma_pool_foreach(p, collect, &l), 0, "foreach returns 0");
	is_int(l.n, 3, "three live allocations");
	ok(l.n == 3 && !strcmp(l.names[0], "e") && !strcmp(l.names[1], "c") &&
			!strcmp(l.names[2], "d"), "listed in offset order: %s %s %s",
			l.names[0], l.names[1], l.names[2]);
	int ordered = 1;
	for (int i = 1; i < l.n && i < 32; i++)
		ordered &= l.offset[i - 1] + l.size[i - 1] <= l.offset[i];
	ok(ordered, "offsets increasing, no overlap");
	ok(l.n == 3 && l.offset[0] == off_of(p, e) && l.size[0] == 500 &&
			l.offset[1] == off_of(p, c) && l.size[1] == 1000 &&
			l.offset[2] == off_of(p, d) && l.size[2] == 5000,
			"offsets and sizes match the allocations");

	struct listing stop = {.stop_at = 2};
	is_int(pma_pool_foreach(p, collect, &stop), 7, "a non-zero callback value stops and is returned");
	is_int(stop.n, 2, "after two calls");

	pma_pool_close(&p);
	pma_region_close(&r);
	is_int(pma_region_open(path, 0, 0, &r), 0, "reopen");
	is_int(pma_pool_open(r, &p), 0, "reopen pool");
	if (p) {
		struct listing l2 = {0};
		pma_pool_foreach(p, collect, &l2);
		ok(l2.n == 3 && !strcmp(l2.names[0], "e") && !strcmp(l2.names[1], "c") &&
				!strcmp(l2.names[2], "d") && l2.offset[0] == l.offset[0] &&
				l2.offset[2] == l.offset[2], "same listing after reopen");
		pma_pool_close(&p);
	}
	pma_region_close(&r);
	unlink(path);
}

static void
test_open_errors(const char *path)
{
	struct pma_region *r;
	struct pma_pool *p = NULL;

	unlink(path);
	is_int(pma_region_open(path, 4 * MiB, PMA_REGION_CREATE, &r), 0, "create 4 MiB region");
	is_int(pma_pool_open(r, &p), PMA_E_NOT_POOL, "open of a fresh (zero) file is PMA_E_NOT_POOL");
	ok(p == NULL, "and gives no pool");
	ok(pma_errormsg()[0] != '\0', "with a message: %s", pma_errormsg());
	is_int(pma_pool_create(r, 0, &p), 0, "4 MiB is enough for a default pool");
	pma_pool_close(&p);
	pma_region_close(&r);
	unlink(path);

	is_int(pma_region_open(path, 2 * MiB, PMA_REGION_CREATE, &r), 0, "create 2 MiB region");
	mark_errormsg();
	is_int(pma_pool_create(r, 8, &p), -ENOSPC, "2 MiB cannot hold header, table and heap: -ENOSPC");
	ok(errormsg_fresh(), "with a message: %s", pma_errormsg());
	ok(p == NULL, "and gives no pool");
	is_int(pma_pool_open(r, &p), PMA_E_NOT_POOL, "a failed create leaves no pool");
	pma_region_close(&r);
	unlink(path);

	is_int(pma_region_open(path, 4 * MiB, PMA_REGION_CREATE, &r), 0, "create 4 MiB region");
	is_int(pma_pool_create(r, 20000, &p), -ENOSPC, "a 20000-entry table leaves no heap in 4 MiB");
	is_int(pma_pool_create(r, 8, &p), 0, "but a pool with 8 entries fits");
	pma_pool_close(&p);
	pma_region_close(&r);
	unlink(path);
}

int
main(void)
{
	char path[512];

	snprintf(path, sizeof(path), "%s", scratch_path("pool"));
	test_alignment_and_names(path);
	test_persistence(path);
	test_full(path);
	test_zero_and_foreach(path);
	test_open_errors(path);
	unlink(path);
	return done_testing();
}
