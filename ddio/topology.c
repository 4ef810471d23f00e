/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * topology.c -- from a device to the PCIe root port it hangs off.
 *
 * sysfs places every PCI device below its parent bridge:
 *   /sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0
 *        host bridge       root port     device
 * and /sys/bus/pci/devices/<BDF> links to that directory.  The root port
 * is the ancestor whose parent is the host bridge (pciDDDD:BB).  Walking
 * the real path (not bus numbers) also works behind PCIe switches and in
 * VMD domains, where root ports sit below a "pci10000:80" host bridge.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* "DDDD:BB:DD.F" and nothing after it (port services are "...:pcie001"). */
static int
is_bdf_name(const char *name)
{
	unsigned d, b, s, f;
	int n = -1;

	return name[0] != '\0' && name[0] != '+' && name[0] != '-' &&
		sscanf(name, "%x:%x:%x.%x%n", &d, &b, &s, &f, &n) == 4 &&
		n == (int)strlen(name);
}

/* "pciDDDD:BB", a host bridge. */
static int
is_host_bridge_name(const char *name)
{
	unsigned d, b;
	int n = -1;

	return strncmp(name, "pci", 3) == 0 &&
		sscanf(name, "pci%x:%x%n", &d, &b, &n) == 2 && n == (int)strlen(name);
}

static const char *
base_of(const char *path)
{
	const char *s = strrchr(path, '/');

	return s ? s + 1 : path;
}

/* The parent of the real path `real` is a host bridge: `real` is a root-bus device. */
static int
parent_is_host_bridge(const char *real)
{
	char tmp[PATH_MAX];
	char *s;

	snprintf(tmp, sizeof(tmp), "%s", real);
	s = strrchr(tmp, '/');
	if (!s || s == tmp)
		return 0;
	*s = '\0';
	return is_host_bridge_name(base_of(tmp));
}

/* Walks up from the device directory `real` to the device below the host bridge. */
static int
walk_to_root(const char *real, const char *device, char root[16])
{
	char cur[PATH_MAX];

	snprintf(cur, sizeof(cur), "%s", real);
	for (;;) {
		char *slash = strrchr(cur, '/');
		if (!slash || slash == cur)
			break;
		const char *base = slash + 1;
		if (strlen(base) >= 16)
			break;
		char here[16];
		snprintf(here, sizeof(here), "%s", base);
		*slash = '\0';
		const char *parent = base_of(cur);
		if (is_host_bridge_name(parent)) {
			memcpy(root, here, sizeof(here));
			return 0;
		}
		if (!is_bdf_name(parent))
			break;
	}
	return ddio__err(DDIO_E_NO_ROOT_PORT, "PCI device %s is not below a PCI host bridge "
			"(sysfs path %s)", device, real);
}

int
ddio_port_find(struct ddio_ctx *ctx, const char *bdf, struct ddio_port **out)
{
	unsigned a[4];
	char name[32], link[PATH_MAX + 64], real[PATH_MAX], root[16];
	int ret;

	if (!ctx || !out)
		return ddio__err(-EINVAL, "ddio_port_find: NULL argument");
	if ((ret = ddio__bdf_parse(ctx, bdf, a)))
		return ret;
	snprintf(name, sizeof(name), "%04x:%02x:%02x.%x", a[0], a[1], a[2], a[3]);
	snprintf(link, sizeof(link), "%s/devices/%s", ctx->pcipath, name);
	if (!realpath(link, real)) {
		int e = errno;
		return ddio__err(-e, "no PCI device %s (%s: %s)", name, link, strerror(e));
	}
	if ((ret = walk_to_root(real, name, root)))
		return ret;
	return ddio__port_new(ctx, root, name, out);
}

int
ddio_port_find_dax(struct ddio_ctx *ctx, const char *dax, struct ddio_port **out)
{
	char link[PATH_MAX + 128], real[PATH_MAX], cur[PATH_MAX];
	const char *name;

	if (!ctx || !dax || !out)
		return ddio__err(-EINVAL, "ddio_port_find_dax: NULL argument");
	name = base_of(dax);
	if (strncmp(name, "dax", 3) != 0 || strlen(name) > 64)
		return ddio__err(-EINVAL, "'%s' is not a device-dax name (daxX.Y)", dax);
	snprintf(link, sizeof(link), "%s/bus/dax/devices/%s", ctx->sysfs, name);
	if (!realpath(link, real)) {
		snprintf(link, sizeof(link), "%s/class/dax/%s", ctx->sysfs, name);
		if (!realpath(link, real))
			return ddio__err(-ENOENT, "no device-dax %s in %s/bus/dax or %s/class/dax",
					name, ctx->sysfs, ctx->sysfs);
	}
	/* The nearest PCI device among the parents holds the memory, if any does. */
	snprintf(cur, sizeof(cur), "%s", real);
	for (char *s; (s = strrchr(cur, '/')) && s != cur;) {
		*s = '\0';
		if (is_bdf_name(base_of(cur)))
			return ddio_port_find(ctx, base_of(cur), out);
	}
	return ddio__err(DDIO_E_NO_ROOT_PORT, "%s is not below a PCI device (sysfs path %s): its "
			"memory is on the memory bus (an NVDIMM or CXL region), so no root port "
			"carries writes into it from the CPU; DDIO matters on the root port of the "
			"device writing into it: name that device (BDF or CUDA device)", name, real);
}

int
ddio_port_find_cuda(struct ddio_ctx *ctx, int cuda_device, struct ddio_port **out)
{
	char bdf[32];
	int ret = ddio_cuda_pci_bdf(cuda_device, bdf, sizeof(bdf));

	return ret ? ret : ddio_port_find(ctx, bdf, out);
}

static int
skip_dots(const struct dirent *e)
{
	return e->d_name[0] != '.';
}

int
ddio_port_foreach(struct ddio_ctx *ctx, int (*cb)(struct ddio_port *port, void *arg), void *arg)
{
	char dir[PATH_MAX + 16], link[PATH_MAX + 320], real[PATH_MAX];
	struct dirent **list;
	int n, ret = 0;

	if (!ctx || !cb)
		return ddio__err(-EINVAL, "ddio_port_foreach: NULL argument");
	snprintf(dir, sizeof(dir), "%s/devices", ctx->pcipath);
	n = scandir(dir, &list, skip_dots, alphasort);
	if (n < 0)
		return ddio__err(-errno, "cannot list %s: %s", dir, strerror(errno));
	for (int i = 0; i < n; i++) {
		const char *name = list[i]->d_name;
		struct ddio_port *p;

		if (ret || !is_bdf_name(name) || strlen(name) >= 16)
			continue;
		snprintf(link, sizeof(link), "%s/%s", dir, name);
		if (!realpath(link, real) || !parent_is_host_bridge(real))
			continue;
		int r = ddio__port_new(ctx, name, name, &p);
		if (r == DDIO_E_NO_ROOT_PORT)
			continue; /* an integrated device on the root bus */
		if (r) {
			ret = r;
			continue;
		}
		ret = cb(p, arg);
		ddio_port_delete(&p);
	}
	for (int i = 0; i < n; i++)
		free(list[i]);
	free(list);
	return ret;
}
