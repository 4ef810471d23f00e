/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ns_change.c -- changing namespaces through libndctl: initialise a
 * region's labels, create a devdax namespace, reconfigure one to devdax,
 * destroy one.  The sequences are those of ndctl's own create-namespace,
 * destroy-namespace and init-labels (ndctl/namespace.c), done with the
 * library calls so that no ndctl binary is needed.
 *
 * Before anything is disabled, the namespace's device is checked for
 * users (ns_busy.c): the kernel would otherwise pull the memory from under
 * a process that maps it.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <daxctl/libdaxctl.h>
#include <ndctl/libndctl.h>
#include <linux/ndctl.h>

#include "pmalloc_ns.h"
#include "errmsg.h"
#include "ns_internal.h"

#define SZ_16M ((unsigned long long)16 << 20)
#define INFO_BLOCK 8192 /* the pfn/dax/btt info blocks sit in the first 8 KiB */

static struct ndctl_region *
find_region(struct ndctl_ctx *ctx, const char *dev)
{
	struct ndctl_bus *bus;
	struct ndctl_region *region;

	ndctl_bus_foreach(ctx, bus)
		ndctl_region_foreach(bus, region)
			if (strcmp(ndctl_region_get_devname(region), dev) == 0)
				return region;
	return NULL;
}

static struct ndctl_namespace *
find_namespace(struct ndctl_ctx *ctx, const char *dev)
{
	struct ndctl_bus *bus;
	struct ndctl_region *region;
	struct ndctl_namespace *ndns;

	ndctl_bus_foreach(ctx, bus)
		ndctl_region_foreach(bus, region)
			ndctl_namespace_foreach(region, ndns)
				if (strcmp(ndctl_namespace_get_devname(ndns), dev) == 0)
					return ndns;
	return NULL;
}

/* A version-4 uuid from the kernel's random pool. */
static int
random_uuid(uuid_t uu)
{
	size_t got = 0;

	while (got < 16) {
		ssize_t n = getrandom(uu + got, 16 - got, 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return pma_ns__err(-errno, "getrandom: %s", strerror(errno));
		}
		got += (size_t)n;
	}
	uu[6] = (unsigned char)((uu[6] & 0x0f) | 0x40);
	uu[8] = (unsigned char)((uu[8] & 0x3f) | 0x80);
	return 0;
}

/* The dax device that a namespace's dax claim exposes ("dax0.1"). */
static void
dax_chardev(struct ndctl_dax *dax, char *chardev)
{
	struct daxctl_region *dregion = dax ? ndctl_dax_get_daxctl_region(dax) : NULL;
	struct daxctl_dev *ddev;

	if (!chardev)
		return;
	chardev[0] = '\0';
	if (!dregion)
		return;
	daxctl_dev_foreach(dregion, ddev)
		if (daxctl_dev_get_size(ddev) > 0) {
			snprintf(chardev, PMA_NS_DEVNAME, "%s", daxctl_dev_get_devname(ddev));
			return;
		}
}

/* -EBUSY when a process uses the namespace's device (or it is mounted). */
static int
check_unused(struct ndctl_namespace *ndns)
{
	const char *devname = ndctl_namespace_get_devname(ndns);
	struct ndctl_dax *dax = ndctl_namespace_get_dax(ndns);
	struct ndctl_pfn *pfn = ndctl_namespace_get_pfn(ndns);
	struct ndctl_btt *btt = ndctl_namespace_get_btt(ndns);
	char node[PMA_NS_DEVNAME], path[PMA_NS_DEVNAME + 8];
	const char *blk = NULL;

	node[0] = '\0';
	if (dax && ndctl_dax_is_enabled(dax))
		dax_chardev(dax, node);
	else if (pfn && ndctl_pfn_is_enabled(pfn))
		blk = ndctl_pfn_get_block_device(pfn);
	else if (btt && ndctl_btt_is_enabled(btt))
		blk = ndctl_btt_get_block_device(btt);
	else if (ndctl_namespace_is_enabled(ndns))
		blk = ndctl_namespace_get_block_device(ndns);
	if (blk && *blk)
		snprintf(node, sizeof(node), "%s", blk);
	if (!node[0])
		return 0;
	snprintf(path, sizeof(path), "/dev/%s", node);
	int rc = pma_ns__dev_in_use(path);
	if (rc == 1)
		return pma_ns__err(-EBUSY, "%s (%s) is in use: a process has it open or mapped, or it "
				"is mounted; stop that first", devname, path);
	if (rc == -EACCES)
		return pma_ns__err(-EACCES, "cannot tell whether %s (%s) is in use: not allowed to "
				"read other processes' files (run as root)", devname, path);
	return 0;
}

/*
 * Clears the first 8 KiB (where a pfn, dax or btt info block lives) so
 * that the kernel does not find the old claim again, as ndctl does.
 */
static int
zero_info_block(struct ndctl_namespace *ndns)
{
	const char *devname = ndctl_namespace_get_devname(ndns);
	void *buf = NULL, *zero = NULL;
	char path[PMA_NS_DEVNAME + 8];
	int fd = -1, rc;

	if (ndctl_namespace_get_size(ndns) == 0)
		return 0;
	ndctl_namespace_set_raw_mode(ndns, 1);
	rc = ndctl_namespace_enable(ndns);
	if (rc < 0) {
		rc = pma_ns__err_lib(-ENXIO, "%s: cannot enable in raw mode to clear its info block",
				devname);
		goto out;
	}
	if (posix_memalign(&buf, 4096, INFO_BLOCK) || posix_memalign(&zero, 4096, INFO_BLOCK)) {
		rc = pma_ns__err(-ENOMEM, "out of memory");
		goto out;
	}
	memset(zero, 0, INFO_BLOCK);
	snprintf(path, sizeof(path), "/dev/%s", ndctl_namespace_get_block_device(ndns));
	fd = open(path, O_RDWR | O_DIRECT | O_EXCL | O_CLOEXEC);
	if (fd < 0) {
		rc = pma_ns__err(-errno, "%s: open %s to clear its info block: %s", devname, path,
				strerror(errno));
		goto out;
	}
	ssize_t n = pread(fd, buf, INFO_BLOCK, 0);
	rc = 0;
	if (n == INFO_BLOCK && memcmp(buf, zero, INFO_BLOCK) == 0)
		goto out;
	if (pwrite(fd, zero, INFO_BLOCK, 0) != INFO_BLOCK)
		rc = pma_ns__err(errno ? -errno : -EIO, "%s: clearing the info block on %s: %s",
				devname, path, strerror(errno ? errno : EIO));
	else if (fsync(fd))
		rc = pma_ns__err(-errno, "%s: fsync %s: %s", devname, path, strerror(errno));
out:
	if (fd >= 0)
		close(fd);
	free(buf);
	free(zero);
	ndctl_namespace_set_raw_mode(ndns, 0);
	ndctl_namespace_disable_invalidate(ndns);
	return rc;
}

/* Takes the namespace out of service so its mode can change: ndctl's prep_reconfig. */
static int
prepare(struct ndctl_namespace *ndns)
{
	const char *devname = ndctl_namespace_get_devname(ndns);
	struct ndctl_region *region = ndctl_namespace_get_region(ndns);
	int rc;

	if (ndctl_region_get_ro(region))
		return pma_ns__err(-EROFS, "%s: its region %s is read-only", devname,
				ndctl_region_get_devname(region));
	if ((rc = check_unused(ndns)))
		return rc;
	pma_ns__lib_msg_clear();
	rc = ndctl_namespace_disable_safe(ndns);
	if (rc < 0)
		return pma_ns__err_lib(rc == -EBUSY ? -EBUSY : -ENXIO, "%s: cannot disable it",
				devname);
	ndctl_namespace_set_enforce_mode(ndns, NDCTL_NS_MODE_RAW);
	return zero_info_block(ndns);
}

/* Puts a devdax claim with `align` on the (disabled, prepared) namespace: ndctl's setup_namespace. */
static int
setup_devdax(struct ndctl_region *region, struct ndctl_namespace *ndns, uint64_t align,
		char *chardev)
{
	const char *devname = ndctl_namespace_get_devname(ndns);
	unsigned long long res = ndctl_namespace_get_resource(ndns);
	struct ndctl_dax *dax = ndctl_region_get_dax_seed(region);
	uuid_t uu;
	int rc;

	if (!dax)
		return pma_ns__err_lib(-ENODEV, "%s: the kernel offers no devdax device on %s (is "
				"dax_pmem loaded?)", devname, ndctl_region_get_devname(region));
	if (res != ULLONG_MAX && res % SZ_16M)
		return pma_ns__err(-EINVAL, "%s: starts at %#llx, not 16 MiB aligned: devdax would be "
				"misaligned (adjust the region alignment)", devname, res);
	if ((rc = random_uuid(uu)))
		return rc;
	/* Not checked, as in ndctl: kernels before 4.13 lack the attribute. */
	ndctl_namespace_set_enforce_mode(ndns, NDCTL_NS_MODE_DEVDAX);
	pma_ns__lib_msg_clear();
	if ((rc = ndctl_dax_set_uuid(dax, uu)) ||
			(rc = ndctl_dax_set_location(dax, NDCTL_PFN_LOC_PMEM)) ||
			(rc = ndctl_dax_set_align(dax, (unsigned long)align)) ||
			(rc = ndctl_dax_set_namespace(dax, ndns)))
		return pma_ns__err_lib(rc == -EACCES || rc == -EPERM ? rc : -ENXIO, "%s: setting up "
				"its devdax claim (align %llu): %s", devname,
				(unsigned long long)align, strerror(-rc));
	rc = ndctl_dax_enable(dax);
	if (rc) {
		ndctl_dax_set_namespace(dax, NULL);
		return pma_ns__err_lib(-ENXIO, "%s: enabling devdax failed: %s", devname,
				strerror(rc < 0 ? -rc : EIO));
	}
	dax_chardev(dax, chardev);
	return 0;
}

int
pma_ns__create(struct ndctl_ctx *ctx, const char *rname, const char *name, uint64_t size,
		uint64_t align, char *dev, char *chardev)
{
	struct ndctl_region *region = find_region(ctx, rname);
	struct ndctl_namespace *ndns, *seed = NULL;
	uuid_t uu;
	int rc;

	if (!region)
		return pma_ns__err(-ENOENT, "no region %s (the node changed since it was read?)", rname);
	if (!ndctl_region_is_enabled(region))
		return pma_ns__err(-ENXIO, "%s is disabled", rname);
	if (ndctl_region_get_nstype(region) != ND_DEVICE_NAMESPACE_PMEM)
		return pma_ns__err(PMA_E_CONFLICT, "%s is label-less: it cannot hold a new namespace",
				rname);
	unsigned long long extent = ndctl_region_get_max_available_extent(region);
	if (extent == ULLONG_MAX)
		extent = ndctl_region_get_available_size(region);
	if (size > extent)
		return pma_ns__err(-ENOSPC, "%s has %llu bytes free in one piece, %llu needed", rname,
				extent, (unsigned long long)size);
	/* The idle namespace 0 if there is one, else the region's seed (as ndctl). */
	ndctl_namespace_foreach(region, ndns)
		if (ndctl_namespace_get_id(ndns) == 0 && ndctl_namespace_is_configuration_idle(ndns)) {
			seed = ndns;
			break;
		}
	if (!seed)
		seed = ndctl_region_get_namespace_seed(region);
	if (!seed || !ndctl_namespace_is_configuration_idle(seed))
		return pma_ns__err_lib(-ENOSPC, "%s offers no idle namespace to configure", rname);
	ndns = seed;
	if ((rc = random_uuid(uu)))
		return rc;
	pma_ns__lib_msg_clear();
	if ((rc = ndctl_namespace_set_uuid(ndns, uu)) ||
			(rc = ndctl_namespace_set_alt_name(ndns, name)) ||
			(rc = ndctl_namespace_set_size(ndns, size))) {
		rc = pma_ns__err_lib(rc == -EACCES || rc == -EPERM ? rc : -ENXIO, "%s: configuring "
				"%s (%s, %llu bytes): %s", rname, ndctl_namespace_get_devname(ndns),
				name, (unsigned long long)size, strerror(-rc));
		goto undo;
	}
	rc = setup_devdax(region, ndns, align, chardev);
	if (rc)
		goto undo;
	if (dev)
		snprintf(dev, PMA_NS_DEVNAME, "%s", ndctl_namespace_get_devname(ndns));
	return 0;
undo:
	/* As ndctl's autorecover: give the capacity back. */
	ndctl_namespace_set_enforce_mode(ndns, NDCTL_NS_MODE_RAW);
	ndctl_namespace_delete(ndns);
	return rc;
}

int
pma_ns__reconfigure(struct ndctl_ctx *ctx, const char *nsdev, const char *name, uint64_t align,
		char *chardev)
{
	struct ndctl_namespace *ndns = find_namespace(ctx, nsdev);
	int rc;

	if (!ndns)
		return pma_ns__err(-ENOENT, "no namespace %s (the node changed since it was read?)", nsdev);
	struct ndctl_region *region = ndctl_namespace_get_region(ndns);
	if ((rc = prepare(ndns)))
		return rc;
	if (name && ndctl_namespace_get_type(ndns) != ND_DEVICE_NAMESPACE_IO) {
		pma_ns__lib_msg_clear();
		rc = ndctl_namespace_set_alt_name(ndns, name);
		if (rc)
			return pma_ns__err_lib(-ENXIO, "%s: naming it %s: %s", nsdev, name, strerror(-rc));
	}
	return setup_devdax(region, ndns, align, chardev);
}

int
pma_ns__destroy(struct ndctl_ctx *ctx, const char *nsdev)
{
	struct ndctl_namespace *ndns = find_namespace(ctx, nsdev);
	int rc;

	if (!ndns)
		return pma_ns__err(-ENOENT, "no namespace %s", nsdev);
	if ((rc = prepare(ndns)))
		return rc;
	/* A labelled namespace gives its capacity back; a label-less one stays, raw. */
	if (ndctl_namespace_get_type(ndns) != ND_DEVICE_NAMESPACE_IO) {
		pma_ns__lib_msg_clear();
		rc = ndctl_namespace_delete(ndns);
		if (rc)
			return pma_ns__err_lib(-ENXIO, "%s: deleting it: %s", nsdev, strerror(-rc));
	}
	return 0;
}

int
pma_ns__init_labels(struct ndctl_ctx *ctx, const char *rname)
{
	struct ndctl_region *region = find_region(ctx, rname);
	struct ndctl_namespace *ndns;
	struct ndctl_dimm *dimm;
	unsigned count = 0, mappings;
	int rc;

	if (!region)
		return pma_ns__err(-ENOENT, "no region %s", rname);
	if (ndctl_region_get_nstype(region) == ND_DEVICE_NAMESPACE_PMEM)
		return 0; /* already labelled */
	mappings = ndctl_region_get_mappings(region);
	ndctl_dimm_foreach_in_region(region, dimm) {
		if (!ndctl_dimm_is_cmd_supported(dimm, ND_CMD_GET_CONFIG_SIZE) ||
				!ndctl_dimm_is_cmd_supported(dimm, ND_CMD_GET_CONFIG_DATA) ||
				!ndctl_dimm_is_cmd_supported(dimm, ND_CMD_SET_CONFIG_DATA))
			break;
		count++;
	}
	if (!mappings || count != mappings)
		return pma_ns__err(-ENODEV, "%s: its DIMMs have no label storage: it stays label-less",
				rname);
	ndctl_namespace_foreach(region, ndns)
		if ((rc = check_unused(ndns)))
			return rc;
	pma_ns__lib_msg_clear();
	rc = ndctl_region_disable_invalidate(region);
	if (rc)
		return pma_ns__err_lib(rc == -EBUSY ? -EBUSY : -ENXIO, "%s: cannot disable it to "
				"write labels", rname);
	ndctl_dimm_foreach_in_region(region, dimm)
		if (ndctl_dimm_is_active(dimm)) {
			ndctl_region_enable(region);
			return pma_ns__err(-EBUSY, "%s: DIMM %s is active in another region", rname,
					ndctl_dimm_get_devname(dimm));
		}
	enum ndctl_namespace_version v = NDCTL_NS_VERSION_1_2;
	rc = 0;
retry:
	ndctl_dimm_foreach_in_region(region, dimm) {
		struct ndctl_cmd *cmd = ndctl_dimm_read_label_index(dimm);
		if (!cmd) {
			rc = pma_ns__err_lib(-ENXIO, "%s: reading the label index of %s failed", rname,
					ndctl_dimm_get_devname(dimm));
			break;
		}
		int nlabels = ndctl_dimm_init_labels(dimm, v);
		ndctl_cmd_unref(cmd);
		if (nlabels < 0) {
			rc = pma_ns__err_lib(-ENXIO, "%s: writing the labels of %s failed", rname,
					ndctl_dimm_get_devname(dimm));
			break;
		}
		ndctl_dimm_disable(dimm);
		ndctl_dimm_enable(dimm);
		/* A kernel that does not take v1.2 labels gets v1.1 (the kernel keeps one free). */
		long avail = (long)ndctl_dimm_get_available_labels(dimm) + 1;
		if (nlabels != avail && v == NDCTL_NS_VERSION_1_2) {
			v = NDCTL_NS_VERSION_1_1;
			goto retry;
		}
	}
	int erc = ndctl_region_enable(region);
	if (rc)
		return rc;
	if (erc || ndctl_region_get_nstype(region) != ND_DEVICE_NAMESPACE_PMEM)
		return pma_ns__err_lib(-ENXIO, "%s: labels written but the region is not labelled "
				"after re-enabling it", rname);
	return 0;
}
