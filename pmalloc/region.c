/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * region.c -- mapping a devdax device, an fsdax file or a plain file with
 * libpmem2, and the persistence functions of that mapping.
 */
#include <errno.h>
#include <fcntl.h>
#include <libpmem2.h>
#include <linux/magic.h>
#include <numaif.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "pmalloc.h"
#include "errmsg.h"
#include "lock.h"
#include "owner.h"
#include "populate.h"
#define PMTRACE_NO_SITES /* this file defines the functions the sites call */
#include "pmtrace.h"

struct pma_region {
	char *path;
	int fd;
	enum pma_region_kind kind;
	enum pma_granularity granularity;
	int numa_node;
	int rdonly;     /* PMA_REGION_RDONLY: O_RDONLY, mapped PROT_READ, shared lock */
	struct pmem2_map *map;
	void *addr;
	size_t size;
	/* libpmem2's functions for this mapping, fetched once (no per-call checks). */
	pmem2_persist_fn persist;
	pmem2_flush_fn flush;
	pmem2_drain_fn drain;
	pmem2_memcpy_fn memcpy;
	pmem2_memset_fn memset;
};

/* Is fd a file on tmpfs (a ramdisk, /dev/shm)? */
static int
on_tmpfs(int fd)
{
	struct statfs sf;

	return !fstatfs(fd, &sf) && sf.f_type == TMPFS_MAGIC;
}

/*
 * An existing regular file opened for writing gets its blocks reserved
 * (posix_fallocate keeps the data): a sparse file (made by truncate, or
 * by a file system without fallocate) on a file system without room then
 * fails here with ENOSPC, instead of killing the process with SIGBUS on
 * the first store to a hole.  Not for devices, and a file system that
 * cannot fallocate keeps the old behaviour.  A tmpfs file in which
 * SEEK_HOLE finds no hole before the end is left as it is, since fallocate
 * would only walk its pages (38-44 ms per GiB on the 2-core dev VM, at every
 * restart from a ramdisk; SEEK_HOLE 13-15 ms).  tmpfs reports a page that
 * fallocate reserved but nothing wrote as a hole, which only costs that
 * fallocate.  Only tmpfs: a file system without SEEK_HOLE of its own calls
 * the whole file data.  (st_blocks cannot tell: tmpfs counts pages past the
 * end there too.)  Returns fd or a negative error (fd closed).
 */
static int
reserve_existing(int fd, const char *path)
{
	struct stat st;
	int ret;

	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_size == 0)
		return fd;
	if (on_tmpfs(fd) && lseek(fd, 0, SEEK_HOLE) >= st.st_size)
		return fd;
	ret = posix_fallocate(fd, 0, st.st_size);
	if (ret == 0 || ret == EOPNOTSUPP || ret == EINVAL)
		return fd;
	close(fd);
	return pma__err(-ret, "allocate the %lld bytes of %s: %s%s", (long long)st.st_size, path,
			strerror(ret), ret == ENOSPC ? " (a sparse file on a file system without room; "
			"mapping it would end in SIGBUS)" : "");
}

/*
 * A regular file opened for writing must be the caller's alone: owned by
 * the effective user and reachable by this one name.  Otherwise its owner
 * (or whoever holds the other name) could read what is written there and
 * change it, and the unkeyed checksums would not tell: another user's file
 * planted under a store's name in a shared directory is refused before
 * anything is locked, sized or written.  Devices keep their own ownership
 * (a devdax device is granted to a user by its group or a udev rule).
 */
static int
check_own_file(int fd, const char *path)
{
	struct stat st;
	char who[128], me[128];

	if (fstat(fd, &st))
		return pma__err(-errno, "stat %s: %s", path, strerror(errno));
	if (!S_ISREG(st.st_mode))
		return 0;
	if (st.st_uid != geteuid()) {
		owner_describe(st.st_uid, who, sizeof(who));
		owner_describe(geteuid(), me, sizeof(me));
		return pma__err(PMA_E_UNSAFE, "%s is owned by %s and you are %s: refused, nothing "
				"written (its owner could read and change a checkpoint written there); "
				"remove it, or use another path", path, who, me);
	}
	if (st.st_nlink > 1)
		return pma__err(PMA_E_UNSAFE, "%s has %lu hard links: refused, nothing written "
				"(another name of the file may be another user's); remove it, or use "
				"another path", path, (unsigned long)st.st_nlink);
	return 0;
}

/* open(2) with the flags of pma_region_open; a symbolic link refused by PMA_REGION_NOFOLLOW says so. */
static int
open_path(const char *path, int oflags, unsigned flags, int *fd)
{
	char link[300];

	*fd = open(path, oflags | O_CLOEXEC | (flags & PMA_REGION_NOFOLLOW ? O_NOFOLLOW : 0), 0600);
	if (*fd >= 0 || errno != ELOOP || !(flags & PMA_REGION_NOFOLLOW))
		return 0;
	owner_link_describe(path, link, sizeof(link));
	return pma__err(PMA_E_UNSAFE, "%s is %s: refused, not followed (whoever made it chooses "
			"what would be written); remove it", path, link);
}

/*
 * Locks fd, opened by path, and checks that the file still has a name: an
 * opener that failed may have removed it (unlink, then close) between our
 * open and our lock, and a pool formatted into a file without a name would
 * be lost.  Then -EAGAIN with *removed set: the caller opens path again.
 * *st: the locked file's stat.
 */
static int
lock_named(int fd, const char *path, int exclusive, struct stat *st, int *removed)
{
	int ret = pma__lock(fd, path, exclusive);

	if (ret)
		return ret;
	if (fstat(fd, st))
		return pma__err(-errno, "stat %s: %s", path, strerror(errno));
	if (st->st_nlink > 0)
		return 0;
	*removed = 1;
	return pma__err(-EAGAIN, "%s was removed while it was being opened", path);
}

/*
 * Opens path (O_CLOEXEC: an exec'd program must not inherit the lock) and
 * locks it before anything else, so that only the lock holder ever sizes
 * a file or maps it.  *allocate: a new tmpfs file was only sized, and the
 * caller allocates its pages by populating the mapping (allocate_pages).
 * *removed: see lock_named.
 */
static int
open_or_create_once(const char *path, size_t size, unsigned flags, int *created, int *allocate,
		int *removed)
{
	struct stat st;
	int rdonly = !!(flags & PMA_REGION_RDONLY);
	int fd;
	int ret;

	*created = *allocate = *removed = 0;
	if ((ret = open_path(path, rdonly ? O_RDONLY : O_RDWR, flags, &fd)))
		return ret;
	if (fd < 0 && errno != ENOENT)
		return pma__err(-errno, "open %s%s: %s", path, rdonly ? " (read-only)" : "",
				strerror(errno));
	if (fd >= 0 && !rdonly && (ret = check_own_file(fd, path))) {
		close(fd);
		return ret;
	}
	if (fd >= 0 && (ret = lock_named(fd, path, !rdonly, &st, removed))) {
		close(fd);
		return ret;
	}
	/*
	 * An empty regular file is what a creation killed between open and
	 * fallocate leaves: with CREATE it is sized like a new one.  (One killed
	 * while its tmpfs pages were being allocated has its size and some of
	 * its pages: it is an existing file, whose holes reserve_existing fills.)
	 */
	if (fd >= 0 && (!(flags & PMA_REGION_CREATE) || !S_ISREG(st.st_mode) || st.st_size != 0))
		return rdonly ? fd : reserve_existing(fd, path);
	if (!(flags & PMA_REGION_CREATE))
		return pma__err(-ENOENT, "%s does not exist (create it or pass a size)", path);
	if (size == 0) {
		if (fd >= 0)
			close(fd);
		return pma__err(-EINVAL, "cannot create %s with size 0", path);
	}
	if (fd < 0) {
		/* O_EXCL: never through a link, never another's file created meanwhile. */
		if ((ret = open_path(path, O_RDWR | O_CREAT | O_EXCL, flags, &fd)))
			return ret;
		if (fd < 0)
			return pma__err(-errno, "create %s: %s", path, strerror(errno));
		/*
		 * Another process may have opened and locked the new file before
		 * us: it sizes the file then, and we must not unlink it.
		 */
		if ((ret = lock_named(fd, path, 1, &st, removed))) {
			close(fd);
			return ret;
		}
		/* ... or it did so, and closed it, before our lock: the file is its, as it left it. */
		if (st.st_size != 0)
			return reserve_existing(fd, path);
	}
	*created = 1;
	/*
	 * Reserve the blocks now so that a full file system fails here, not on
	 * a page fault later.  On tmpfs a prefaulted open allocates them by
	 * populating the mapping instead, on several threads where fallocate
	 * takes one (allocate_pages), with the same refusal when there is no room.
	 */
	if (!(flags & PMA_REGION_NO_PREFAULT) && on_tmpfs(fd)) {
		*allocate = 1;
		ret = ftruncate(fd, (off_t)size) ? errno : 0;
	} else {
		ret = posix_fallocate(fd, 0, (off_t)size);
	}
	if (ret == EOPNOTSUPP || ret == EINVAL)
		ret = ftruncate(fd, (off_t)size) ? errno : 0;
	if (ret) {
		unlink(path); /* before the lock ends: an opener that locks it later sees it removed */
		close(fd);
		return pma__err(-ret, "allocate %zu bytes for %s: %s", size, path, strerror(ret));
	}
	return fd;
}

/* open_or_create_once, again while the file it opened is removed under it (a few times). */
static int
open_or_create(const char *path, size_t size, unsigned flags, int *created, int *allocate)
{
	int removed = 0;
	int ret;

	for (int tries = 0; tries < 4; tries++) {
		ret = open_or_create_once(path, size, flags, created, allocate, &removed);
		if (!removed)
			break;
	}
	return ret;
}

static int
map_with_pmem2(struct pma_region *r)
{
	struct pmem2_config *cfg = NULL;
	struct pmem2_source *src = NULL;
	int ret;

	ret = pmem2_config_new(&cfg);
	if (ret)
		goto fail;
	/*
	 * Ask for the weakest guarantee so that every medium maps; the
	 * effective granularity tells us what the mapping really offers.
	 */
	ret = pmem2_config_set_required_store_granularity(cfg, PMEM2_GRANULARITY_PAGE);
	if (ret)
		goto fail;
	/* A read-only descriptor can only be mapped PROT_READ; a stray store then faults. */
	if (r->rdonly && (ret = pmem2_config_set_protection(cfg, PMEM2_PROT_READ)))
		goto fail;
	ret = pmem2_source_from_fd(&src, r->fd);
	if (ret)
		goto fail;
	ret = pmem2_map_new(&r->map, cfg, src);
	if (ret)
		goto fail;

	if (pmem2_source_numa_node(src, &r->numa_node))
		r->numa_node = -1;
	pmem2_source_delete(&src);
	pmem2_config_delete(&cfg);

	r->addr = pmem2_map_get_address(r->map);
	r->size = pmem2_map_get_size(r->map);
	switch (pmem2_map_get_store_granularity(r->map)) {
	case PMEM2_GRANULARITY_BYTE: r->granularity = PMA_GRANULARITY_BYTE; break;
	case PMEM2_GRANULARITY_CACHE_LINE: r->granularity = PMA_GRANULARITY_CACHE_LINE; break;
	default: r->granularity = PMA_GRANULARITY_PAGE; break;
	}
	r->persist = pmem2_get_persist_fn(r->map);
	r->flush = pmem2_get_flush_fn(r->map);
	r->drain = pmem2_get_drain_fn(r->map);
	r->memcpy = pmem2_get_memcpy_fn(r->map);
	r->memset = pmem2_get_memset_fn(r->map);
	return 0;
fail:
	/*
	 * libpmem2 leaves its message empty for some refusals (a character
	 * device that is not device-dax, such as /dev/null): say why ourselves.
	 */
	if (pmem2_errormsg()[0])
		pma__err(-ENOTSUP, "libpmem2 cannot map %s: %s", r->path, pmem2_errormsg());
	else
		pma__err(-ENOTSUP, "libpmem2 cannot map %s: %s (libpmem2 error %d%s%s)", r->path,
				r->kind == PMA_REGION_DEVDAX ? "a character device that is not device-dax" :
				"not a regular file or device-dax", ret, ret < 0 && ret > -4096 ? ": " : "",
				ret < 0 && ret > -4096 ? strerror(-ret) : "");
	if (ret == -ENOMEM)
		pma__err(-ENOMEM, "libpmem2 cannot map %s: out of memory", r->path);
	pmem2_source_delete(&src);
	pmem2_config_delete(&cfg);
	return ret == -ENOMEM ? -ENOMEM : -ENOTSUP;
}

/*
 * The node of a file's memory: ask the kernel which node holds the first
 * page (a tmpfs file's pages are placed by the memory policy).
 */
static int
node_of_pages(const void *addr)
{
	int node = -1;

	if (get_mempolicy(&node, NULL, 0, (void *)addr, MPOL_F_NODE | MPOL_F_ADDR) || node < 0)
		return 0;
	return node;
}

/*
 * Populate the page tables for writing without changing the contents.
 * First touch of a fresh /dev/shm gigabyte ran at 0.33 GB/s against 20 GB/s
 * warm, so this belongs at open time, not in the first checkpoint; on
 * several threads (populate.c), since an open before a restart's import is
 * on the critical path.
 */
void
pma_region_prefault(const struct pma_region *r)
{
	/* read-only: best effort, reads fault anyway */
	pma__populate(r->addr, r->size, r->rdonly ? 0 : PMA__POPULATE_WRITE);
}

/*
 * The pages of a new tmpfs file, allocated by populating its whole mapping
 * for writing on several threads (populate.c; those of the caller's NUMA
 * node, where fallocate would have put them): the same work as fallocate
 * followed by the prefault, but in parallel.  1 GiB on the 2-core dev VM:
 * 0.29 s against 0.38 s (fallocate on one thread, then the prefault on
 * two).  No room for a page is -ENOSPC here, as from fallocate, never a
 * SIGBUS: nothing is touched.  Where the advice itself is refused (a
 * kernel before 5.14: EINVAL; a seccomp filter: ENOSYS, EPERM), fallocate
 * and the prefault do it as before.
 */
static int
allocate_pages(struct pma_region *r)
{
	int ret = pma__populate(r->addr, r->size, PMA__POPULATE_WRITE | PMA__POPULATE_ALLOCATE);

	if (ret && ret != -EFAULT && ret != -ENOMEM && ret != -EINTR && ret != -EHWPOISON) {
		ret = -posix_fallocate(r->fd, 0, (off_t)r->size);
		if (!ret)
			pma_region_prefault(r);
	}
	if (ret == -EFAULT) /* the kernel would have raised SIGBUS: no page to be had */
		ret = -ENOSPC;
	return ret ? pma__err(ret, "allocate %zu bytes for %s: %s", r->size, r->path,
			      strerror(-ret)) : 0;
}

int
pma_region_open(const char *path, size_t size, unsigned flags, struct pma_region **out)
{
	struct stat st;
	int created, allocate;
	int ret;

	if (!path || !*path || !out)
		return pma__err(-EINVAL, "pma_region_open: path and out are required");
	*out = NULL;
	if ((flags & PMA_REGION_RDONLY) && (flags & PMA_REGION_CREATE))
		return pma__err(-EINVAL, "pma_region_open %s: PMA_REGION_CREATE and "
				"PMA_REGION_RDONLY exclude each other", path);

	struct pma_region *r = calloc(1, sizeof(*r));
	if (!r || !(r->path = strdup(path))) {
		free(r);
		return pma__err(-ENOMEM, "out of memory");
	}
	r->rdonly = !!(flags & PMA_REGION_RDONLY);
	r->fd = open_or_create(path, size, flags, &created, &allocate);
	if (r->fd < 0) {
		ret = r->fd;
		goto fail;
	}
	if (fstat(r->fd, &st)) {
		ret = pma__err(-errno, "stat %s: %s", path, strerror(errno));
		goto fail;
	}
	if (S_ISCHR(st.st_mode)) {
		r->kind = PMA_REGION_DEVDAX;
	} else if (S_ISREG(st.st_mode)) {
		r->kind = PMA_REGION_FILE;
		if (st.st_size == 0) {
			ret = pma__err(-EINVAL, "%s is empty: nothing to map", path);
			goto fail;
		}
	} else {
		ret = pma__err(-EINVAL, "%s is neither a regular file nor a dax device", path);
		goto fail;
	}

	ret = map_with_pmem2(r);
	if (ret)
		goto fail;
	if (r->size < size) {
		ret = pma__err(-ENOSPC, "%s has %zu bytes, %zu needed", path, r->size, size);
		goto fail;
	}
	if (allocate) {
		if ((ret = allocate_pages(r)))
			goto fail;
	} else if (!(flags & PMA_REGION_NO_PREFAULT)) {
		pma_region_prefault(r);
	}
	if (r->numa_node < 0)
		r->numa_node = node_of_pages(r->addr);
	if (!r->rdonly)
		pmtrace_region_open(r->addr, r->size, r->path);
	*out = r;
	return 0;
fail:
	if (created)
		unlink(path);
	pma_region_close(&r);
	return ret;
}

void
pma_region_close(struct pma_region **rp)
{
	struct pma_region *r = rp ? *rp : NULL;

	if (!r)
		return;
	if (r->map) {
		pmtrace_region_close(r->addr);
		pmem2_map_delete(&r->map);
	}
	/*
	 * close, never flock(LOCK_UN): a child forked after the open shares
	 * the lock, and an unlock by either would end it for both.  The lock
	 * ends with the last descriptor of this open file description.
	 */
	if (r->fd >= 0)
		close(r->fd);
	free(r->path);
	free(r);
	*rp = NULL;
}

void *pma_region_addr(const struct pma_region *r) { return r->addr; }
size_t pma_region_size(const struct pma_region *r) { return r->size; }
const char *pma_region_path(const struct pma_region *r) { return r->path; }
enum pma_granularity pma_region_granularity(const struct pma_region *r) { return r->granularity; }
enum pma_region_kind pma_region_kind(const struct pma_region *r) { return r->kind; }
int pma_region_rdonly(const struct pma_region *r) { return r->rdonly; }
int pma_region_numa_node(const struct pma_region *r) { return r->numa_node; }

const char *
pma_granularity_name(enum pma_granularity g)
{
	switch (g) {
	case PMA_GRANULARITY_BYTE: return "byte";
	case PMA_GRANULARITY_CACHE_LINE: return "cache-line";
	case PMA_GRANULARITY_PAGE: return "page";
	}
	return "unknown";
}

/*
 * The persistence functions: libpmem2's, and in the trace build (make
 * TRACE=1) an event of common/pmtrace.c after each, with the call site
 * (pmtrace.h) or the caller's address.  In every other build the pmtrace_
 * calls are empty inline functions.
 */
void
pma_region_persist(const struct pma_region *r, const void *addr, size_t len)
{
	if (pmtrace_dropped()) { /* fault build: this site's flush is dropped, its drain kept */
		r->drain();
	} else {
		r->persist(addr, len);
		pmtrace_flush(addr, len, 1, __builtin_return_address(0));
	}
	pmtrace_fence(__builtin_return_address(0));
	pmtrace_site(NULL, 0);
}

void
pma_region_flush(const struct pma_region *r, const void *addr, size_t len)
{
	if (!pmtrace_dropped()) { /* fault build: this site's flush is dropped */
		r->flush(addr, len);
		pmtrace_flush(addr, len, 0, __builtin_return_address(0));
	}
	pmtrace_site(NULL, 0);
}

void
pma_region_drain(const struct pma_region *r)
{
	r->drain();
	pmtrace_fence(__builtin_return_address(0));
	pmtrace_site(NULL, 0);
}

void
pma_region_memcpy(const struct pma_region *r, void *dst, const void *src, size_t len,
		unsigned flags)
{
	r->memcpy(dst, src, len, flags);
	pmtrace_nt(dst, len, !(flags & PMEM2_F_MEM_NONTEMPORAL), __builtin_return_address(0));
	if (!(flags & PMEM2_F_MEM_NODRAIN))
		pmtrace_fence(__builtin_return_address(0));
	pmtrace_site(NULL, 0);
}

void
pma_region_memset(const struct pma_region *r, void *dst, int c, size_t len, unsigned flags)
{
	r->memset(dst, c, len, flags);
	pmtrace_memset(dst, c, len, __builtin_return_address(0));
	if (!(flags & PMEM2_F_MEM_NODRAIN))
		pmtrace_fence(__builtin_return_address(0));
	pmtrace_site(NULL, 0);
}
