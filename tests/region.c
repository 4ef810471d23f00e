/* region.c -- mapping a file region: create, reopen, granularity, persistence calls. */
#include <errno.h>
#include <fcntl.h>
#include <libpmem2.h>
#include <sys/stat.h>

#include "pmalloc.h"
#include "tap.h"

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
	return done_testing();
}
