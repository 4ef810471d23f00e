/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * local.c -- choosing the node-local backend: PM when a device or DAX file
 * is given, otherwise a ramdisk file with the same two-slot protocol.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

/* Pool bytes for two slots of the layout, their metadata and alignment slack. */
int
pmck_local_pool_size(const struct pmck_tensor_desc *d, size_t n, uint64_t *size)
{
	if (!d || !size)
		return pma__err(-EINVAL, "pmck_local_pool_size: layout and size are required");
	uint64_t *nbytes = malloc(n * sizeof(*nbytes) + 1);
	uint64_t *offset = malloc(n * sizeof(*offset) + 1);
	int ret = nbytes && offset ? pmck__layout_check(d, n, nbytes)
				   : pma__err(-ENOMEM, "out of memory");
	if (!ret) {
		uint64_t data = pmck__layout_place(d, nbytes, n, offset);
		uint64_t slot = (data + PMA_LARGE_ALIGN - 1) / PMA_LARGE_ALIGN * PMA_LARGE_ALIGN;
		uint64_t meta = TMAP_OFF + n * (sizeof(struct tmap_entry) + 16);
		/* pool header + table (2 MiB), two slots, metadata, alignment of each allocation */
		*size = 2 * slot + meta + 8 * (uint64_t)PMA_LARGE_ALIGN;
	}
	free(nbytes);
	free(offset);
	return ret;
}

int
pmck_local_default_dir(char *buf, size_t len)
{
	if (!buf)
		return pma__err(-EINVAL, "pmck_local_default_dir: a buffer is required");
	int n = snprintf(buf, len, "/dev/shm/pmckpt-%u", (unsigned)geteuid());
	if (n < 0 || (size_t)n >= len)
		return pma__err(-ENAMETOOLONG, "pmck_local_default_dir: a buffer of %zu bytes is too "
				"short", len);
	return 0;
}

/*
 * Does the file start with a pool's magic? (read, not mapped: it may be too
 * short to map).  Only a regular file reached without a link counts; a fifo
 * is not waited on (O_NONBLOCK).
 */
static int
holds_pool_magic(const char *path)
{
	char magic[8] = {0};
	struct stat st;
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);

	if (fd < 0)
		return 0;
	ssize_t n = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? read(fd, magic, sizeof(magic)) : 0;
	close(fd);
	return n == (ssize_t)sizeof(magic) && !memcmp(magic, "PMAPOOL", sizeof(magic));
}

/* Is there anything at path, a link included? */
static int
exists(const char *path)
{
	struct stat st;
	return lstat(path, &st) == 0;
}

/* Is path a regular file of the caller's, not a link, with one name (what pma_region_open accepts)? */
static int
own_file(const char *path)
{
	struct stat st;
	return lstat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
	       st.st_nlink == 1;
}

/*
 * The ramdisk directory: the caller's (PMCK_LOCAL_SHARED_DIR: anyone's) or
 * the per-user default, and the pool file in it.  Checked as pmck_dir_check
 * does unless shared on purpose, and made 0700 if missing when `create`
 * (the outermost directory made goes to made, for undoing a failure).
 */
static int
ramdisk_dir(const struct pmck_local_opts *o, const char *name, int create, struct pmck_local *l,
		char *dir, size_t dir_size, char *made, size_t made_size)
{
	int ret = 0;

	if (!o->ramdisk_dir)
		ret = pmck_local_default_dir(dir, dir_size);
	else if (snprintf(dir, dir_size, "%s", o->ramdisk_dir) >= (int)dir_size)
		ret = pma__err(-ENAMETOOLONG, "ramdisk directory name too long");
	if (ret)
		return ret;
	if (snprintf(l->path, sizeof(l->path), "%s/pmckpt-%s.pool", dir, name) >=
	    (int)sizeof(l->path))
		return pma__err(-ENAMETOOLONG, "ramdisk path too long");
	unsigned flags = (create ? PMCK_DIR_CREATE : 0) |
			 (o->ramdisk_dir && (o->flags & PMCK_LOCAL_SHARED_DIR) ? PMCK__DIR_UNCHECKED : 0);
	ret = pmck__dir_ready(dir, flags, o->ramdisk_dir ? "Use a directory of your own, or say "
			"that this one is shared on purpose (PMCK_LOCAL_SHARED_DIR; Python: "
			"sharing='group')" : "Remove it (pmckpt makes it again, 0700 and yours), or give "
			"a ramdisk directory of your own", made, made_size);
	/* Opening what exists, in a directory that does not: the file's open says -ENOENT. */
	if (ret == -ENOENT && !create)
		ret = 0;
	return ret ? pma__err_prefix(ret, "ramdisk directory") : 0;
}

/* Are the first 8 bytes (a pool's magic) all zero? */
static int
zero_magic(const struct pma_region *r)
{
	static const char zero[8];
	return pma_region_size(r) >= sizeof(zero) && !memcmp(pma_region_addr(r), zero, sizeof(zero));
}

/* Opening what exists: the store must exist with this layout (open_or_create would create it). */
static int
local_open_existing(struct pma_pool *p, const char *name, const struct pmck_tensor_desc *descs,
		size_t n, struct pmck_store **out)
{
	int ret = pmck_store_open(p, name, out);

	if (ret)
		return ret;
	/* It exists: open_or_create only opens it and checks the layout. */
	pmck_store_close(out);
	return pmck_store_open_or_create(p, name, descs, n, out);
}

/* Is path a name directly in /dev, where devices appear and files are never made? */
static int
in_dev(const char *path)
{
	const char *slash = strrchr(path, '/');
	return slash && slash - path == 4 && !strncmp(path, "/dev", 4);
}

/* The PM path: an existing device or file, or a new file of pm_size bytes. */
static int
open_pm(const struct pmck_local_opts *o, uint64_t layout_size, struct pmck_local *l, int *made)
{
	const unsigned rflags = o->flags & PMCK_LOCAL_NO_PREFAULT ? PMA_REGION_NO_PREFAULT : 0;
	int ret = pma_region_open(o->pm_path, 0, rflags, &l->region);

	if (ret != -ENOENT)
		return ret;
	if (in_dev(o->pm_path))
		return pma__err(-ENOENT, "%s does not exist: no such device (pmctl provision "
				"creates devdax namespaces, pmctl list shows them)", o->pm_path);
	uint64_t size = o->pm_size ? o->pm_size : layout_size;
	if ((ret = pma_region_open(o->pm_path, (size_t)size, PMA_REGION_CREATE | rflags, &l->region)))
		return ret;
	*made = 1;
	return 0;
}

/*
 * The ramdisk path: DIR/pmckpt-NAME.pool, sized for the layout.  The file
 * is never reached through a link (PMA_REGION_NOFOLLOW), and one that
 * exists must be the caller's (pma_region_open refuses another's).
 */
static int
open_ramdisk(const struct pmck_local_opts *o, const char *name, uint64_t size,
		struct pmck_local *l, int *made, char *dir, size_t dir_size, char *dir_made,
		size_t dir_made_size)
{
	const unsigned rflags = PMA_REGION_CREATE | PMA_REGION_NOFOLLOW |
				(o->flags & PMCK_LOCAL_NO_PREFAULT ? PMA_REGION_NO_PREFAULT : 0);
	int ret;

	if ((ret = ramdisk_dir(o, name, 1, l, dir, dir_size, dir_made, dir_made_size)))
		return ret;
	int existed = exists(l->path);
	/*
	 * A file holding a pool is opened as it is: a truncated pool is then
	 * reported as such (PMA_E_TRUNCATED), and a store of another, larger
	 * layout as PMCK_E_LAYOUT, not as a file too small for this layout.
	 */
	ret = pma_region_open(l->path, holds_pool_magic(l->path) ? 0 : (size_t)size, rflags,
			&l->region);
	/*
	 * A creation killed before the pool was formatted leaves a short or
	 * blank file: it is ours (our name, our directory) and holds no pool,
	 * so nothing is lost by making it again.
	 */
	if ((ret == -ENOSPC || ret == -EINVAL) && !holds_pool_magic(l->path)) {
		unlink(l->path);
		existed = 0;
		ret = pma_region_open(l->path, (size_t)size, rflags, &l->region);
	}
	/* Ours to remove on failure only if this open made it (another opener's file never is). */
	*made = !existed && ret == 0;
	return ret;
}

static void
describe_backend(const struct pmck_local_opts *o, struct pmck_local *l)
{
	enum pma_granularity g = pma_region_granularity(l->region);

	if (pma_region_kind(l->region) == PMA_REGION_DEVDAX) {
		l->backend = PMCK_BACKEND_DEVDAX;
		snprintf(l->description, sizeof(l->description), "PM: devdax %s (%s granularity)",
				l->path, pma_granularity_name(g));
	} else if (g != PMA_GRANULARITY_PAGE) {
		l->backend = PMCK_BACKEND_FSDAX;
		snprintf(l->description, sizeof(l->description), "PM: fsdax file %s (%s granularity)",
				l->path, pma_granularity_name(g));
	} else {
		l->backend = PMCK_BACKEND_RAMDISK;
		snprintf(l->description, sizeof(l->description), o->pm_path ?
				"no PM: %s is not DAX-mapped (page granularity); used like a ramdisk, "
				"durable only by msync" :
				"no PM given: ramdisk fallback %s (page granularity); copy-out to a "
				"shared file system keeps checkpoints beyond this node", l->path);
	}
}

int
pmck_local_open(const struct pmck_local_opts *o, struct pmck_local *l)
{
	const char *name = o && o->store_name ? o->store_name : "default";
	char dir[PATH_MAX] = "", dir_made[PATH_MAX] = "";
	uint64_t size;
	int made = 0;
	int ret;

	if (!o || !l)
		return pma__err(-EINVAL, "pmck_local_open: opts and out are required");
	if (o->flags & ~(PMCK_LOCAL_RDONLY | PMCK_LOCAL_EXISTING | PMCK_LOCAL_SHARED_DIR |
			 PMCK_LOCAL_NO_PREFAULT))
		return pma__err(-EINVAL, "pmck_local_open: unknown flags %#x", o->flags);
	if (!o->descs && !(o->flags & PMCK_LOCAL_EXISTING))
		return pma__err(-EINVAL, "pmck_local_open: a layout is required unless "
				"PMCK_LOCAL_EXISTING opens the store's own");
	memset(l, 0, sizeof(*l));
	if (o->descs && (ret = pmck_local_pool_size(o->descs, o->ndescs, &size)))
		return ret;

	int rdonly = !!(o->flags & PMCK_LOCAL_RDONLY);
	int existing = rdonly || (o->flags & PMCK_LOCAL_EXISTING); /* create nothing */
	unsigned rflags = (rdonly ? PMA_REGION_RDONLY : 0) |
			  (o->flags & PMCK_LOCAL_EXISTING ? PMA_REGION_NO_PREFAULT : 0);
	if (o->pm_path) {
		snprintf(l->path, sizeof(l->path), "%s", o->pm_path);
		ret = existing ? pma_region_open(o->pm_path, 0, rflags, &l->region)
			       : open_pm(o, size, l, &made);
	} else if (existing) {
		/*
		 * Opening what exists creates nothing: no directory, no file, no
		 * pool, no store.  The directory is checked as for creating: a
		 * checkpoint someone else could have written is not loaded.
		 */
		if ((ret = ramdisk_dir(o, name, 0, l, dir, sizeof(dir), NULL, 0)))
			return ret;
		if ((o->flags & PMCK_LOCAL_EXISTING) && own_file(l->path) && !holds_pool_magic(l->path))
			/* It may be too short to map: what a creation killed before the pool's magic leaves. */
			ret = pma__err(PMA_E_NOT_POOL, "%s holds no pool yet (a creation interrupted "
					"before the pool was formatted: an open that creates formats it)",
					l->path);
		else /* a link or another's file: refused here, and the message says why */
			ret = pma_region_open(l->path, 0, rflags | PMA_REGION_NOFOLLOW |
					PMA_REGION_NO_PREFAULT, &l->region);
	} else {
		ret = open_ramdisk(o, name, size, l, &made, dir, sizeof(dir), dir_made,
				sizeof(dir_made));
	}
	if (!ret) {
		describe_backend(o, l);
		/* Format only what is blank: never a medium holding something else. */
		ret = existing ? pma_pool_open(l->region, &l->pool)
			       : pma_pool_open_or_create(l->region, 0, &l->pool, &l->created);
		/*
		 * Our own ramdisk file (our name, our directory) whose pool magic is
		 * still zero: a creation killed before its last persist point (the
		 * magic is cleared first and written last).  It holds no pool, and
		 * the region's lock is ours: formatting it again loses nothing.
		 */
		if (ret == PMA_E_NOT_POOL && !existing && !o->pm_path && zero_magic(l->region) &&
		    (ret = pma_pool_create(l->region, 0, &l->pool)) == 0)
			l->created = 1;
	}
	if (!ret && existing)
		ret = o->descs ? local_open_existing(l->pool, name, o->descs, o->ndescs, &l->store)
			       : pmck_store_open(l->pool, name, &l->store);
	else if (!ret)
		ret = pmck_store_open_or_create(l->pool, name, o->descs, o->ndescs, &l->store);
	l->made_file = made;
	if (ret) {
		pmck_local_close(l);
		/* Nothing this call made is left behind: not the file, not its directories. */
		if (made)
			unlink(l->path);
		if (!o->pm_path)
			pmck__rmdir_made(dir, dir_made);
		/* Messages from the region already name the path; others get it once. */
		if (!strstr(pma_errormsg(), l->path))
			pma__err_prefix(ret, "%s", l->path);
		return ret;
	}
	return 0;
}

void
pmck_local_close(struct pmck_local *l)
{
	if (!l)
		return;
	pmck_store_close(&l->store);
	pma_pool_close(&l->pool);
	pma_region_close(&l->region);
}

void
pmck_local_discard(struct pmck_local *l)
{
	if (!l)
		return;
	pmck_local_close(l);
	if (l->made_file && l->path[0])
		unlink(l->path);
	l->made_file = 0;
}
