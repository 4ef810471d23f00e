/*
 * region.c -- mapping a file region: create, reopen, granularity,
 * persistence calls, and the prefault's page tables (populated on several
 * threads in pieces: every page of an odd-sized region, with one CPU or
 * more).
 */
#include <errno.h>
#include <fcntl.h>
#include <libpmem2.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "pmalloc.h"
#include "tap.h"

/* The bytes of the mapping at addr that have page-table entries (its Rss in smaps). */
static size_t
mapped_bytes(const void *addr)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512];
	int in = 0;
	size_t kb = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2)
			in = lo == (unsigned long)addr;
		else if (in && sscanf(line, "Rss: %zu kB", &kb) == 1)
			break;
	}
	fclose(f);
	return kb << 10;
}

/* The bytes of path's file that the file system holds (st_blocks). */
static size_t
allocated_bytes(const char *path)
{
	struct stat st;

	return stat(path, &st) ? 0 : (size_t)st.st_blocks * 512;
}

/* An odd-sized region (a tail after the last 2 MiB boundary) is populated
 * whole, by the open and by pma_region_prefault, read-only too; a new one
 * is allocated whole, prefaulted or not (on tmpfs the prefault allocates). */
static void
prefault_covers_all(const char *path, const char *how)
{
	size_t size = (200 << 20) + (12 << 10);
	struct pma_region *r = NULL;

	unlink(path);
	is_int(pma_region_open(path, size, PMA_REGION_CREATE | PMA_REGION_NO_PREFAULT, &r), 0,
			"%s: create %zu bytes, no prefault", how, size);
	ok(allocated_bytes(path) >= size, "%s: allocated all the same (%zu)", how,
			allocated_bytes(path));
	pma_region_close(&r);
	unlink(path);
	is_int(pma_region_open(path, size, PMA_REGION_CREATE, &r), 0, "%s: create %zu bytes",
			how, size);
	ok(allocated_bytes(path) >= size, "%s: the open allocated all %zu bytes (%zu)", how, size,
			allocated_bytes(path));
	ok(r && mapped_bytes(pma_region_addr(r)) == size, "%s: the open populated all %zu bytes (%zu)",
			how, size, r ? mapped_bytes(pma_region_addr(r)) : 0);
	pma_region_close(&r);
	is_int(pma_region_open(path, 0, PMA_REGION_NO_PREFAULT, &r), 0, "%s: reopen, no prefault", how);
	ok(r && mapped_bytes(pma_region_addr(r)) < size / 2, "%s: not populated (%zu)", how,
			r ? mapped_bytes(pma_region_addr(r)) : 0);
	if (r)
		pma_region_prefault(r);
	ok(r && mapped_bytes(pma_region_addr(r)) == size, "%s: pma_region_prefault populated all (%zu)",
			how, r ? mapped_bytes(pma_region_addr(r)) : 0);
	pma_region_close(&r);
	is_int(pma_region_open(path, 0, PMA_REGION_RDONLY, &r), 0, "%s: reopen read-only", how);
	/* Before Linux 5.14 there is no MADV_POPULATE_READ, and reads just fault. */
	if (r && madvise(pma_region_addr(r), 4096, 22 /* MADV_POPULATE_READ */) && errno == EINVAL)
		skip("%s: this kernel cannot populate for reading", how);
	else
		ok(r && mapped_bytes(pma_region_addr(r)) == size, "%s: populated for reading (%zu)",
				how, r ? mapped_bytes(pma_region_addr(r)) : 0);
	pma_region_close(&r);
	unlink(path);
}

int
main(void)
{
	const char *path = scratch_path("region");
	struct pma_region *r = NULL;
	size_t size = 8 << 20;


	unlink(path);
	is_int(pma_region_open(path, size, 0, &r), -ENOENT, "missing file without CREATE is -ENOENT");
	ok(strstr(pma_errormsg(), path) != NULL, "message names the path: %s", pma_errormsg());
	is_int(pma_region_open(path, 0, PMA_REGION_CREATE, &r), -EINVAL, "create with size 0 is -EINVAL");

	is_int(pma_region_open(path, size, PMA_REGION_CREATE, &r), 0, "create %zu bytes", size);
	ok(r && pma_region_size(r) == size, "size is %zu", r ? pma_region_size(r) : 0);
	ok(r && pma_region_granularity(r) == PMA_GRANULARITY_PAGE,
			"tmpfs maps with page granularity (%s)",
			r ? pma_granularity_name(pma_region_granularity(r)) : "?");
	ok(r && pma_region_kind(r) == PMA_REGION_FILE, "a file region");
	ok(r && pma_region_numa_node(r) >= 0, "numa node %d", r ? pma_region_numa_node(r) : -1);

	char msg[] = "persistent hello";
	char *base = pma_region_addr(r);
	pma_region_memcpy(r, base + 4096, msg, sizeof(msg), PMEM2_F_MEM_NONTEMPORAL);
	pma_region_memset(r, base + 8192, 0x5a, 64, 0);
	pma_region_persist(r, base, 1);
	pma_region_close(&r);
	ok(r == NULL, "close clears the pointer");

	is_int(pma_region_open(path, 0, 0, &r), 0, "reopen existing");
	ok(r && memcmp((char *)pma_region_addr(r) + 4096, msg, sizeof(msg)) == 0,
			"bytes survive close and reopen");
	ok(r && ((unsigned char *)pma_region_addr(r))[8192 + 63] == 0x5a, "memset reached the file");
	pma_region_close(&r);

	is_int(pma_region_open(path, size * 2, 0, &r), -ENOSPC, "smaller than asked is -ENOSPC");
	unlink(path);

	cpu_set_t all, one;
	prefault_covers_all(path, "every CPU");
	if (sched_getaffinity(0, sizeof(all), &all) == 0) {
		CPU_ZERO(&one);
		for (int c = 0; c < CPU_SETSIZE; c++)
			if (CPU_ISSET(c, &all)) {
				CPU_SET(c, &one);
				break;
			}
		if (sched_setaffinity(0, sizeof(one), &one) == 0) {
			prefault_covers_all(path, "one CPU");
			sched_setaffinity(0, sizeof(all), &all);
		}
	}
	return done_testing();
}
