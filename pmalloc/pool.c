/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * pool.c -- a crash-consistent pool of named allocations on a region.
 *
 * Media layout (all little-endian, offsets from the start of the region):
 *
 *   0        struct pool_hdr (one 4 KiB page)
 *   4096     allocation table: table_entries x struct table_entry (128 B)
 *   heap_off heap, up to pool_size (heap_off is 2 MiB aligned)
 *
 * The table is the whole allocator state: an entry is live when its state
 * word holds ENTRY_LIVE and the check of its fields.  Allocation writes the
 * entry's fields, persists them, then publishes the entry with one aligned
 * 8-byte store of the state word; free clears that word.  Both are atomic
 * on every persistence domain PMDK supports, so a crash can never leave a
 * half-made allocation or a leak-by-corruption; at worst an unpublished
 * entry holds stale fields, which nobody reads.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <xxhash.h>

#include "pmalloc.h"
#include "errmsg.h"
#include "pool_format.h"
#include "pmtrace.h" /* the trace build (make TRACE=1) names each persist's call site */

static uint64_t
align_up(uint64_t x, uint64_t a)
{
	return (x + a - 1) & ~(a - 1);
}

int
pma__pool_new(struct pma_region *r, struct pma_pool **out)
{
	struct pma_pool *p = calloc(1, sizeof(*p));

	if (!p)
		return pma__err(-ENOMEM, "out of memory");
	pthread_mutex_init(&p->lock, NULL);
	p->region = r;
	p->base = pma_region_addr(r);
	p->hdr = (struct pool_hdr *)p->base;
	*out = p;
	return 0;
}

int
pma_pool_create(struct pma_region *r, unsigned max_allocs, struct pma_pool **out)
{
	if (!r || !out)
		return pma__err(-EINVAL, "pma_pool_create: region and out are required");
	*out = NULL;
	if (pma_region_rdonly(r))
		return pma__err(-EROFS, "cannot create a pool on %s: opened read-only",
				pma_region_path(r));
	if (max_allocs == 0)
		max_allocs = DEFAULT_MAX_ALLOCS;
	if (max_allocs > MAX_ALLOCS_LIMIT)
		return pma__err(-EINVAL, "max_allocs %u exceeds %u", max_allocs, MAX_ALLOCS_LIMIT);

	uint64_t table_off = POOL_HDR_AREA;
	uint64_t heap_off = align_up(table_off + (uint64_t)max_allocs * sizeof(struct table_entry),
			PMA_LARGE_ALIGN);
	size_t size = pma_region_size(r);
	if (size < heap_off + PMA_MIN_ALIGN)
		return pma__err(-ENOSPC, "region of %zu bytes is too small for a pool "
				"(%llu bytes of metadata)", size, (unsigned long long)heap_off);

	struct pma_pool *p;
	int ret = pma__pool_new(r, &p);
	if (ret)
		return ret;

	/*
	 * Persist point 1: the magic is cleared first, so that a crash from
	 * here on leaves "not a pool" rather than an old header over a new table.
	 */
	memset(p->hdr->magic, 0, sizeof(p->hdr->magic));
	pma_region_persist(r, p->hdr->magic, sizeof(p->hdr->magic));

	/* Persist point 2: an empty table (all state words zero) and the header fields. */
	p->table = (struct table_entry *)(p->base + table_off);
	pma_region_memset(r, p->table, 0, heap_off - table_off, 0);

	struct pool_hdr h = {0};
	h.version = POOL_VERSION;
	h.hdr_size = sizeof(h);
	if (getrandom(h.uuid, sizeof(h.uuid), 0) != sizeof(h.uuid)) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		memcpy(h.uuid, &ts, sizeof(ts) < sizeof(h.uuid) ? sizeof(ts) : sizeof(h.uuid));
	}
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	h.create_time_ns = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
	h.pool_size = size;
	h.table_off = table_off;
	h.table_entries = max_allocs;
	h.heap_off = heap_off;
	memcpy(h.magic, POOL_MAGIC, sizeof(h.magic));
	h.checksum = pool_hdr_checksum(&h); /* covers the magic as it will be */
	memset(h.magic, 0, sizeof(h.magic));
	pma_region_memcpy(r, p->hdr, &h, sizeof(h), 0);

	/* Persist point 3: the magic, last; only now is the pool visible. */
	memcpy(p->hdr->magic, POOL_MAGIC, sizeof(p->hdr->magic));
	pma_region_persist(r, p->hdr->magic, sizeof(p->hdr->magic));
	*out = p;
	return 0;
}

static int
cmp_entry_offset(const void *a, const void *b)
{
	const struct table_entry *x = *(const struct table_entry *const *)a;
	const struct table_entry *y = *(const struct table_entry *const *)b;
	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Collects the live entries sorted by offset; caller frees *out. */
static int
live_entries(const struct pma_pool *p, struct table_entry ***out, size_t *count)
{
	uint64_t n = p->hdr->table_entries;
	struct table_entry **v = malloc((size_t)n * sizeof(*v) + 1);
	size_t k = 0;

	if (!v)
		return pma__err(-ENOMEM, "out of memory");
	for (uint64_t i = 0; i < n; i++)
		if (p->table[i].state)
			v[k++] = &p->table[i];
	qsort(v, k, sizeof(*v), cmp_entry_offset);
	*out = v;
	*count = k;
	return 0;
}

int
pma_pool_open(struct pma_region *r, struct pma_pool **out)
{
	if (!r || !out)
		return pma__err(-EINVAL, "pma_pool_open: region and out are required");
	*out = NULL;

	/* Every check of header and table lives in pool_check.c; here the first failure is the error. */
	struct pool_problems pr = {.stop_at_first = 1};
	struct pool_hdr geom;
	uint8_t *bad = NULL;
	int guessed;
	int ret = pma__pool_inspect(r, &pr, &geom, &guessed, &bad);
	free(bad);
	if (ret)
		return ret;

	struct pma_pool *p;
	if ((ret = pma__pool_new(r, &p)))
		return ret;
	p->table = (struct table_entry *)(p->base + p->hdr->table_off);
	*out = p;
	return 0;
}

void
pma_pool_close(struct pma_pool **pp)
{
	if (!pp || !*pp)
		return;
	pthread_mutex_destroy(&(*pp)->lock);
	free((*pp)->table_copy);
	free(*pp);
	*pp = NULL;
}

struct pma_region *pma_pool_region(const struct pma_pool *p) { return p->region; }
const uint8_t *pma_pool_uuid(const struct pma_pool *p) { return p->hdr->uuid; }

static struct table_entry *
find_locked(struct pma_pool *p, const char *name)
{
	for (uint64_t i = 0; i < p->hdr->table_entries; i++)
		if (p->table[i].state && !strcmp(p->table[i].name, name))
			return &p->table[i];
	return NULL;
}

size_t
pma_pool_free_bytes(const struct pma_pool *cp)
{
	struct pma_pool *p = (struct pma_pool *)cp;
	uint64_t used = 0;

	pthread_mutex_lock(&p->lock);
	for (uint64_t i = 0; i < p->hdr->table_entries; i++)
		if (p->table[i].state)
			used += p->table[i].size;
	pthread_mutex_unlock(&p->lock);
	return (size_t)(p->hdr->pool_size - p->hdr->heap_off - used);
}

/* First fit over the gaps between live allocations; 0 or -ENOSPC. */
static int
place_locked(struct pma_pool *p, uint64_t size, uint64_t align, uint64_t *offset)
{
	struct table_entry **v;
	size_t k;
	int ret = live_entries(p, &v, &k);

	if (ret)
		return ret;
	uint64_t cursor = p->hdr->heap_off;
	ret = -ENOSPC;
	for (size_t i = 0; i <= k; i++) {
		uint64_t start = align_up(cursor, align);
		uint64_t end = i < k ? v[i]->offset : p->hdr->pool_size;
		if (start <= end && end - start >= size) {
			*offset = start;
			ret = 0;
			break;
		}
		if (i < k)
			cursor = v[i]->offset + v[i]->size;
	}
	free(v);
	return ret;
}

int
pma_alloc(struct pma_pool *p, const char *name, size_t size, size_t align,
		unsigned flags, void **addr)
{
	if (!p || !name || !addr)
		return pma__err(-EINVAL, "pma_alloc: pool, name and addr are required");
	if (pma_region_rdonly(p->region) || p->salvaged)
		return pma__err(-EROFS, "cannot allocate '%s': pool %s is open read-only%s", name,
				pma_region_path(p->region), p->salvaged ? " (salvaged)" : "");
	size_t len = strlen(name);
	if (len == 0 || len >= PMA_NAME_MAX)
		return pma__err(-EINVAL, "allocation name must be 1..%d bytes", PMA_NAME_MAX - 1);
	if (size == 0)
		return pma__err(-EINVAL, "allocation '%s' of size 0", name);
	if (align && !pool_is_pow2(align))
		return pma__err(-EINVAL, "alignment %zu is not a power of two", align);
	if (align < PMA_MIN_ALIGN)
		align = PMA_MIN_ALIGN;
	if (size >= PMA_LARGE_SIZE && align < PMA_LARGE_ALIGN)
		align = PMA_LARGE_ALIGN;

	pthread_mutex_lock(&p->lock);
	int ret;
	struct table_entry *e = NULL;
	uint64_t offset;

	if (find_locked(p, name)) {
		ret = pma__err(-EEXIST, "allocation '%s' exists", name);
		goto out;
	}
	for (uint64_t i = 0; i < p->hdr->table_entries && !e; i++)
		if (!p->table[i].state)
			e = &p->table[i];
	if (!e) {
		ret = pma__err(-ENOSPC, "allocation table full (%llu entries)",
				(unsigned long long)p->hdr->table_entries);
		goto out;
	}
	if ((ret = place_locked(p, size, align, &offset))) {
		if (ret == -ENOSPC)
			pma__err(ret, "no free space for '%s' (%zu bytes, align %zu; %zu free in all)",
					name, size, align, (size_t)(p->hdr->pool_size - p->hdr->heap_off));
		goto out;
	}
	if (flags & PMA_ALLOC_ZERO)
		pma_region_memset(p->region, p->base + offset, 0, size, 0);

	/* Persist point 1: the entry's fields, while its state word is still 0 (free). */
	e->offset = offset;
	e->size = size;
	e->align = align;
	memset(e->name, 0, sizeof(e->name));
	memcpy(e->name, name, len);
	pma_region_persist(p->region, e, sizeof(*e));

	/* Persist point 2: publish with one aligned 8-byte store; the allocation exists from here. */
	__atomic_store_n(&e->state, pool_entry_state(e), __ATOMIC_RELEASE);
	pma_region_persist(p->region, &e->state, sizeof(e->state));
	*addr = p->base + offset;
out:
	pthread_mutex_unlock(&p->lock);
	return ret;
}

int
pma_lookup(struct pma_pool *p, const char *name, void **addr, size_t *size)
{
	if (!p || !name)
		return pma__err(-EINVAL, "pma_lookup: pool and name are required");
	pthread_mutex_lock(&p->lock);
	struct table_entry *e = find_locked(p, name);
	if (e) {
		if (addr)
			*addr = p->base + e->offset;
		if (size)
			*size = e->size;
	}
	pthread_mutex_unlock(&p->lock);
	return e ? 0 : pma__err(-ENOENT, "no allocation named '%s'", name);
}

int
pma_free(struct pma_pool *p, const char *name)
{
	if (!p || !name)
		return pma__err(-EINVAL, "pma_free: pool and name are required");
	if (pma_region_rdonly(p->region) || p->salvaged)
		return pma__err(-EROFS, "cannot free '%s': pool %s is open read-only%s", name,
				pma_region_path(p->region), p->salvaged ? " (salvaged)" : "");
	pthread_mutex_lock(&p->lock);
	struct table_entry *e = find_locked(p, name);
	if (e) {
		/* Persist point: one 8-byte store frees the allocation durably. */
		__atomic_store_n(&e->state, 0, __ATOMIC_RELEASE);
		pma_region_persist(p->region, &e->state, sizeof(e->state));
	}
	pthread_mutex_unlock(&p->lock);
	return e ? 0 : pma__err(-ENOENT, "no allocation named '%s'", name);
}

int
pma_pool_foreach(struct pma_pool *p, int (*cb)(const struct pma_alloc_info *, void *),
		void *arg)
{
	struct table_entry **v;
	size_t k;
	int ret;

	pthread_mutex_lock(&p->lock);
	ret = live_entries(p, &v, &k);
	pthread_mutex_unlock(&p->lock);
	if (ret)
		return ret;
	for (size_t i = 0; i < k && !ret; i++) {
		struct pma_alloc_info info = {
			.name = v[i]->name, .offset = v[i]->offset,
			.size = v[i]->size, .align = v[i]->align,
		};
		ret = cb(&info, arg);
	}
	free(v);
	return ret;
}

/*
 * The bytes a pool's header and default allocation table occupy: a region
 * is blank when all of them are zero.  A pool whose header page was wiped
 * still has a table here, so it is never taken for blank.
 */
#define BLANK_PROBE_BYTES (2u << 20)

/* Names what region bytes hold when they are neither blank nor a pool (for messages). */
static void
describe_contents(const unsigned char *b, size_t size, char *out, size_t outsz)
{
	size_t i;

	if (size >= 1082 && b[1080] == 0x53 && b[1081] == 0xef)
		snprintf(out, outsz, "an ext2/3/4 file system");
	else if (size >= 4 && !memcmp(b, "XFSB", 4))
		snprintf(out, outsz, "an XFS file system");
	else if (size >= 8 && (!memcmp(b, "PMEMOBJ", 7) || !memcmp(b, "PMEMBLK", 7) ||
			!memcmp(b, "PMEMLOG", 7)))
		snprintf(out, outsz, "a PMDK pool (%.7s)", (const char *)b);
	else {
		for (i = 0; i < size && !b[i]; i++)
			;
		snprintf(out, outsz, "other data (first non-zero byte at offset %zu)", i);
	}
}

int
pma_region_is_blank(const struct pma_region *r)
{
	const unsigned char *b = pma_region_addr(r);
	size_t n = pma_region_size(r) < BLANK_PROBE_BYTES ? pma_region_size(r) : BLANK_PROBE_BYTES;

	/* Word at a time: 2 MiB of a fresh devdax compares in well under a millisecond. */
	size_t i = 0;
	for (; i + sizeof(uint64_t) <= n; i += sizeof(uint64_t)) {
		uint64_t w;
		memcpy(&w, b + i, sizeof(w));
		if (w)
			return 0;
	}
	for (; i < n; i++)
		if (b[i])
			return 0;
	return 1;
}

int
pma_pool_open_or_create(struct pma_region *r, unsigned max_allocs, struct pma_pool **out,
		int *created)
{
	if (!r || !out)
		return pma__err(-EINVAL, "pma_pool_open_or_create: region and out are required");
	*out = NULL;
	if (created)
		*created = 0;

	int ret = pma_pool_open(r, out);
	if (ret != PMA_E_NOT_POOL)
		return ret; /* a pool, or one that failed its checks: never formatted here */
	if (!pma_region_is_blank(r)) {
		char what[96];
		describe_contents(pma_region_addr(r), pma_region_size(r), what, sizeof(what));
		return pma__err(PMA_E_NOT_POOL, "%s holds %s, not a pmalloc pool; refusing to "
				"format it (pmckpt create --force formats it)", pma_region_path(r),
				what);
	}
	/* Blank: a new file or a device nobody formatted.  Nothing is lost by creating. */
	if ((ret = pma_pool_create(r, max_allocs, out)))
		return ret;
	if (created)
		*created = 1;
	return 0;
}
