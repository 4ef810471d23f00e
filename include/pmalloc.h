/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * pmalloc.h -- persistent memory regions and a crash-consistent pool of
 * named allocations.
 *
 * A *region* is a mapping of a devdax device (/dev/daxX.Y), a file on an
 * fsdax file system, or a plain file (tmpfs, ramdisk, disk: emulation),
 * made with PMDK's libpmem2.  The region reports what its mapping
 * guarantees (store granularity) and hands out libpmem2's persistence
 * functions.
 *
 * A *pool* lives on a region: a header (magic, version, uuid, size,
 * checksum), a table of named allocations and a heap.  Every change to the
 * table is published by one aligned 8-byte store, so a crash leaves each
 * allocation either fully present or absent.
 *
 * Errors: every function that can fail returns 0 or a negative code, either
 * a negated errno value or one of the PMA_E_* codes below, and leaves a
 * description of the failure in a thread-local buffer read by
 * pma_errormsg().  The library never prints and never exits.
 *
 * Thread safety: a region is immutable after opening and may be used from
 * any thread.  Pool calls are serialised by a lock inside the pool.
 *
 * Sharing between processes: a region is open for writing by one process
 * at a time, or for reading (PMA_REGION_RDONLY) by any number; see
 * pma_region_open.  Pools and stores on it inherit this.
 */
#ifndef PMALLOC_H
#define PMALLOC_H 1

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes beyond errno (all negative). */
#define PMA_E_NOT_POOL   (-100001) /* no pool magic: not a pool, or zeroed */
#define PMA_E_VERSION    (-100002) /* pool written by an unsupported version */
#define PMA_E_CORRUPT    (-100003) /* checksum or consistency check failed */
#define PMA_E_TRUNCATED  (-100004) /* region smaller than the pool it holds */
#define PMA_E_BUSY       (-100005) /* region locked by another open (see pma_region_open) */
#define PMA_E_UNSAFE     (-100006) /* a file or directory another user could read or change */

/*
 * pma_errormsg -- describes the last failure of a pma_ or pmck_ call made
 * by this thread.  The string is owned by the library and valid until the
 * next failing call on the same thread.
 */
const char *pma_errormsg(void);

/* ---------------------------------------------------------------- regions */

struct pma_region;

/* What a CPU store needs before it is durable on this mapping. */
enum pma_granularity {
	PMA_GRANULARITY_BYTE = 0,       /* eADR: visible = durable */
	PMA_GRANULARITY_CACHE_LINE = 1, /* ADR: flush cache lines, then fence */
	PMA_GRANULARITY_PAGE = 2,       /* no PM: msync/fsync the pages */
};

/* What backs the region. */
enum pma_region_kind {
	PMA_REGION_DEVDAX = 0, /* a character device /dev/daxX.Y */
	PMA_REGION_FILE = 1,   /* a regular file (fsdax, tmpfs, disk) */
};

/* Flags of pma_region_open(). */
#define PMA_REGION_CREATE      (1u << 0) /* create the file if missing */
#define PMA_REGION_NO_PREFAULT (1u << 1) /* skip populating page tables */
#define PMA_REGION_RDONLY      (1u << 2) /* open O_RDONLY, map read-only, shared lock */
#define PMA_REGION_NOFOLLOW    (1u << 3) /* refuse a symbolic link as the last component */

/*
 * pma_region_open -- maps path read-write with libpmem2, or read-only
 * with PMA_REGION_RDONLY.
 *
 * With PMA_REGION_CREATE and no file at path, a regular file of `size`
 * bytes is created (0600).  An existing file or device is mapped whole;
 * `size` is then only a lower bound (0: any size).  The blocks of a regular
 * file opened for writing, new or existing, are reserved with
 * posix_fallocate (an existing file's data are kept): a sparse file on a
 * file system without room fails here with -ENOSPC rather than raising
 * SIGBUS at the first store into a hole (file systems without fallocate
 * are mapped as before).  On tmpfs a new file opened without
 * PMA_REGION_NO_PREFAULT gets its pages by the prefault instead, on
 * several threads of the caller's NUMA node, with the same -ENOSPC (and
 * the file removed) when they do not fit; an existing tmpfs file with no
 * hole (SEEK_HOLE) is left as it is.  A media error on real PM still
 * raises SIGBUS in the thread that touches the poisoned line, as with
 * PMDK: the library does not catch signals.  Unless
 * PMA_REGION_NO_PREFAULT is given, the page tables of the whole mapping are
 * populated for writing before this returns (madvise MADV_POPULATE_WRITE),
 * so the first checkpoint does not pay page faults; contents are unchanged.
 *
 * Locking (like PMDK's pools): the file or device is locked with
 * flock(2) before anything is read or sized, without waiting: an exclusive
 * lock for a read-write open, a shared one with PMA_REGION_RDONLY.  So a
 * second writer, or a reader beside a writer, or a writer beside readers,
 * fails with PMA_E_BUSY, and the message names the path and the holders'
 * pids (found in /proc/locks; "held by another process" when they cannot be
 * found there).  This applies within one process too: every open is a new
 * holder.  The kernel drops the lock when the last descriptor of the open
 * closes, also when the holder is killed, so a crash never leaves a stale
 * lock.  The descriptor is O_CLOEXEC (a program exec'd by the holder does
 * not hold the lock), but a child created by fork() shares it until both
 * have closed the region or exited; such a child uses the parent's region
 * and cannot open the path anew while the parent holds it.
 *
 * Ownership: a regular file opened for writing must be the caller's own,
 * owned by the effective user and with one link; another user's file (one
 * planted under a store's name in a shared directory, say) is refused with
 * PMA_E_UNSAFE, and the message names its owner, before anything is
 * locked, sized or written.  Devices keep their own ownership: a devdax
 * device granted to a user (its group, a udev rule) opens as before.
 * PMA_REGION_NOFOLLOW: a symbolic link as the last component of path is
 * refused with PMA_E_UNSAFE (O_NOFOLLOW) instead of being followed; links
 * in the components before it are followed.  A new file is always created
 * with O_EXCL, so creating never follows a link, dangling or not.
 *
 * PMA_REGION_RDONLY: the file is opened O_RDONLY (so a file the caller may
 * read but not write can be opened) and mapped PROT_READ: a store into the
 * mapping faults.  Pools and stores on such a region refuse every change
 * with -EROFS; pma_pool_open, pmck_store_open and pmck_store_recover work.
 * Cannot be combined with PMA_REGION_CREATE.
 *
 * On success *out owns the mapping and the descriptor; release it with
 * pma_region_close().
 *
 * Errors: -EINVAL (bad arguments, CREATE with RDONLY), -ENOENT (no file and
 * no CREATE), PMA_E_BUSY (locked by another open), PMA_E_UNSAFE (another
 * user's file opened for writing, a file with other hard links, a link
 * refused by PMA_REGION_NOFOLLOW), -ENOSPC (existing
 * region smaller than size, or a file whose blocks the file system cannot
 * reserve), other -errno from open (-EACCES: not
 * writable; try PMA_REGION_RDONLY), flock, ftruncate or fallocate, or
 * from allocating a new tmpfs file's pages (-ENOMEM: a memory cgroup's
 * limit; -EINTR: a fatal signal; -EHWPOISON), -EAGAIN (the file was
 * removed by another opener's failed creation, four times over),
 * -ENOTSUP when libpmem2 cannot map it (the message says why, also where
 * libpmem2 gives no reason: "a character device that is not device-dax").
 */
int pma_region_open(const char *path, size_t size, unsigned flags,
		struct pma_region **out);

/*
 * pma_region_prefault -- populates the page tables of the whole mapping
 * for writing (contents unchanged), as pma_region_open does.  Useful in a
 * process forked after the open, whose page tables start empty.  On a
 * read-only region it populates them for reading, where the kernel can.
 */
void pma_region_prefault(const struct pma_region *r);

/*
 * pma_region_close -- unmaps and frees *r and sets it to NULL (NULL: no-op).
 * Closing the descriptor releases the lock, unless a forked child still
 * holds a copy of it (see pma_region_open).
 */
void pma_region_close(struct pma_region **r);

void *pma_region_addr(const struct pma_region *r);
size_t pma_region_size(const struct pma_region *r);
const char *pma_region_path(const struct pma_region *r);
enum pma_granularity pma_region_granularity(const struct pma_region *r);
enum pma_region_kind pma_region_kind(const struct pma_region *r);
/* 1 if opened with PMA_REGION_RDONLY, else 0. */
int pma_region_rdonly(const struct pma_region *r);
/* "byte", "cache-line" or "page". */
const char *pma_granularity_name(enum pma_granularity g);

/*
 * pma_region_numa_node -- the NUMA node of the region's memory: the node
 * of the NVDIMM region for devdax/fsdax, else the node holding the file's
 * first page (tmpfs), else 0.  Never fails.
 */
int pma_region_numa_node(const struct pma_region *r);

/*
 * Persistence, all through libpmem2's functions for this mapping.
 *
 * pma_region_persist -- makes [addr, addr+len) durable (flush + drain).
 * pma_region_flush   -- starts writing [addr, addr+len) back; needs a drain.
 * pma_region_drain   -- waits for earlier flushes and non-temporal copies.
 * pma_region_memcpy  -- copies len bytes to dst in the region; flags are
 *   libpmem2's PMEM2_F_MEM_* (NONTEMPORAL, NODRAIN, ...).  Without NODRAIN
 *   the bytes are durable when it returns.
 * pma_region_memset  -- the same, storing c.
 * The addresses must lie inside the region.
 */
void pma_region_persist(const struct pma_region *r, const void *addr, size_t len);
void pma_region_flush(const struct pma_region *r, const void *addr, size_t len);
void pma_region_drain(const struct pma_region *r);
void pma_region_memcpy(const struct pma_region *r, void *dst, const void *src,
		size_t len, unsigned flags);
/* pma_region_memset -- like pma_region_memcpy, filling len bytes with c. */
void pma_region_memset(const struct pma_region *r, void *dst, int c, size_t len,
		unsigned flags);

/* ------------------------------------------------------------------ pools */

struct pma_pool;

#define PMA_NAME_MAX 96         /* bytes of an allocation name, NUL included */
#define PMA_MIN_ALIGN 128       /* every allocation starts on this boundary */
#define PMA_LARGE_SIZE (2u << 20) /* allocations this big get ... */
#define PMA_LARGE_ALIGN (2u << 20) /* ... at least this alignment */

/* Flags of pma_alloc(). */
#define PMA_ALLOC_ZERO (1u << 0) /* zero the bytes (persisted) before publishing */

/*
 * pma_pool_create -- formats a new pool over the whole region, destroying
 * what was there.  `max_allocs` bounds the number of live allocations
 * (0: 1024).  The header's magic is written and persisted last, so a crash
 * during creation leaves no pool rather than a broken one.
 * *out refers to r, which must outlive it.
 * Errors: -EINVAL, -EROFS (r is read-only), -ENOSPC (region too small),
 * -ENOMEM.
 */
int pma_pool_create(struct pma_region *r, unsigned max_allocs,
		struct pma_pool **out);

/*
 * pma_pool_open -- opens the pool on r after checking the header (magic,
 * version, size, checksum) and every allocation-table entry.
 * Errors: PMA_E_NOT_POOL, PMA_E_VERSION, PMA_E_TRUNCATED, PMA_E_CORRUPT,
 * -ENOMEM.  Nothing on the region is changed by a failed open, nor by
 * opening at all.  On a read-only region (PMA_REGION_RDONLY) the pool is
 * read-only: lookups and listings work, pma_alloc and pma_free fail with
 * -EROFS.
 */
int pma_pool_open(struct pma_region *r, struct pma_pool **out);

/*
 * pma_pool_open_or_create -- the one call to open a pool that may not exist
 * yet.  Opens the pool on r as pma_pool_open does; only when r is blank (see
 * pma_region_is_blank: a new file, a device nobody formatted) formats a new
 * pool as pma_pool_create(r, max_allocs) does.  *created (may be NULL) is set
 * to 1 when it formatted, else 0, so a caller that expected its data can
 * tell a blank medium from a recovered one.
 *
 * It never formats anything else: a region holding other data (a file
 * system, another program's pool, random bytes) gives PMA_E_NOT_POOL with a
 * message naming what was found; a damaged pool PMA_E_CORRUPT; a truncated
 * one PMA_E_TRUNCATED; another version PMA_E_VERSION.  Then nothing on the
 * region is changed; `pmckpt check` reports a damaged pool and `pmckpt
 * create --force` formats deliberately.
 * Errors: those above, and those of pma_pool_create.
 */
int pma_pool_open_or_create(struct pma_region *r, unsigned max_allocs,
		struct pma_pool **out, int *created);

/*
 * pma_region_is_blank -- 1 if the bytes where a pool keeps its header and
 * default allocation table (the first 2 MiB, or the whole region if
 * smaller) are all zero, else 0.  Reads only.
 */
int pma_region_is_blank(const struct pma_region *r);

/* Receives one problem found by pma_pool_check or pma_pool_salvage. */
typedef void (*pma_problem_fn)(void *arg, int code, const char *message);

/*
 * pma_pool_check -- pmempool check's role: inspects the pool on r (header,
 * every allocation-table entry, overlaps, duplicate names) without
 * stopping at the first problem, calling report (may be NULL) once per
 * problem with its code and a message.  Reads only.  Returns 0 when the
 * pool is consistent, else the code of the first problem (PMA_E_NOT_POOL,
 * PMA_E_VERSION, PMA_E_CORRUPT, PMA_E_TRUNCATED), or -EINVAL, -ENOMEM.
 */
int pma_pool_check(struct pma_region *r, pma_problem_fn report, void *arg);

/*
 * pma_pool_salvage -- opens what survives of a damaged pool, to recover
 * the data that still verifies: the header's geometry when it is sound
 * (even if its checksum fails), else the default geometry when the table
 * found there holds valid entries (a wiped header); allocation entries
 * that fail their checks, overlap or repeat a name are left out.  Each
 * problem goes to report as in pma_pool_check.  The pool is read-only:
 * pma_alloc and pma_free return -EROFS, and nothing on r is written.  On a
 * sound pool it opens like pma_pool_open, read-only.
 * Errors: the code of the first problem when no table could be read
 * (PMA_E_NOT_POOL, PMA_E_VERSION, PMA_E_TRUNCATED), -EINVAL, -ENOMEM.
 */
int pma_pool_salvage(struct pma_region *r, pma_problem_fn report, void *arg,
		struct pma_pool **out);

/* pma_pool_close -- frees *p (not the region) and sets it to NULL. */
void pma_pool_close(struct pma_pool **p);

struct pma_region *pma_pool_region(const struct pma_pool *p);
/* The pool's 16-byte uuid, made at creation. */
const uint8_t *pma_pool_uuid(const struct pma_pool *p);
/* Bytes of heap not used by any allocation (fragmentation not counted). */
size_t pma_pool_free_bytes(const struct pma_pool *p);

/*
 * pma_alloc -- reserves `size` bytes under `name` (unique in the pool) and
 * returns their address in *addr.  The alignment is the largest of `align`
 * (0 or a power of two), PMA_MIN_ALIGN and, for size >= PMA_LARGE_SIZE,
 * PMA_LARGE_ALIGN.  Contents are undefined unless PMA_ALLOC_ZERO.
 * The allocation is durable when this returns; a crash before that leaves
 * no trace of it.
 * Errors: -EINVAL (empty or too long name, bad align, size 0), -EEXIST,
 * -ENOSPC (no gap large enough or table full), -EROFS (read-only pool).
 */
int pma_alloc(struct pma_pool *p, const char *name, size_t size,
		size_t align, unsigned flags, void **addr);

/*
 * pma_lookup -- finds the allocation `name`; *addr and *size (either may be
 * NULL) receive its address and size.  Errors: -ENOENT.
 */
int pma_lookup(struct pma_pool *p, const char *name, void **addr, size_t *size);

/* pma_free -- releases `name` durably.  Errors: -ENOENT, -EROFS (read-only pool). */
int pma_free(struct pma_pool *p, const char *name);

/* One live allocation, as listed by pma_pool_foreach(). */
struct pma_alloc_info {
	const char *name;
	uint64_t offset; /* from the start of the region */
	uint64_t size;
	uint64_t align;
};

/*
 * pma_pool_foreach -- calls cb for every allocation in offset order; stops
 * and returns cb's value when it is non-zero.  cb must not call pma_alloc
 * or pma_free on this pool.
 */
int pma_pool_foreach(struct pma_pool *p,
		int (*cb)(const struct pma_alloc_info *info, void *arg), void *arg);

/* ------------------------------------------------------------------ sizes */

/*
 * pma_size_parse -- a size as people write it into bytes: "4096", "992M",
 * "1G", "2MiB", "1.5G", "3gib", "512B".  The text is digits, optionally a
 * decimal point and at most 18 more digits, then optionally a unit K, M,
 * G or T (powers of 1024, any case) which may be followed by "i", "iB" or
 * "B" (any case); a bare "B" means bytes.  A fraction of a byte is rounded
 * down ("1.5" is 1, "0.3K" is 307).  Nothing else is accepted: no sign,
 * space, exponent or hexadecimal.  Every tool and config text of the
 * project reads sizes with this call.
 * Errors: -EINVAL (not such a text, or NULL), -ERANGE (more than 2^64 - 1).
 */
int pma_size_parse(const char *text, uint64_t *out);

/*
 * pma_size_format -- bytes as "992.00 MiB" (two decimals and a binary
 * unit; "512 B" below 1 KiB) into buf (len bytes, truncated); returns buf.
 */
const char *pma_size_format(uint64_t bytes, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* PMALLOC_H */
