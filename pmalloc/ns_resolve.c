/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ns_resolve.c -- which /dev/daxX.Y a store opens: by namespace name
 * (optionally on a NUMA node), by namespace, region or device, and the
 * NUMA node of a PCI device or GPU to ask for ("the namespace named ckpt0
 * on the node of GPU 0").
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pmalloc_ns.h"
#include "errmsg.h"
#include "ns_internal.h"

static int
node_of(const struct pma_ns_state *s, const struct pma_ns_info *n)
{
	const struct pma_ns_region_info *r = pma_ns__region(s, n->region);

	if (r && r->numa_node >= 0)
		return r->numa_node;
	return n->numa_node;
}

static int
put_path(const char *dev, char *path, size_t len)
{
	int n = snprintf(path, len, "/dev/%s", dev);

	if (n < 0 || (size_t)n >= len)
		return pma_ns__err(-ENAMETOOLONG, "/dev/%s does not fit in %zu bytes", dev, len);
	return 0;
}

/* Appends "dev (name) on region, node N" to list. */
static void
describe(const struct pma_ns_state *s, const struct pma_ns_info *n, char *list, size_t len)
{
	size_t l = strlen(list);

	snprintf(list + l, len - l, "%s%s%s%s%s on %s node %d (%s)", l ? ", " : "", n->dev,
			n->name ? " '" : "", n->name ? n->name : "", n->name ? "'" : "",
			n->region, node_of(s, n), n->chardev ? n->chardev : pma_ns_mode_name(n->mode));
}

int
pma_ns_resolve(const struct pma_ns_state *s, const char *selector, int numa_node, char *path,
		size_t len)
{
	char list[512] = "";
	const struct pma_ns_info *hit = NULL;
	size_t nhit = 0;

	if (!s || !selector || !*selector || !path || !len || numa_node < -1)
		return pma_ns__err(-EINVAL, "pma_ns_resolve: state, selector and path are required");
	if (!s->nreg && !s->ndax)
		return pma_ns__err(-ENODEV, "no devdax device for '%s': %s", selector,
				s->absent ? s->absent : "no NVDIMM region");
	const char *sel = strncmp(selector, "/dev/", 5) == 0 ? selector + 5 : selector;

	/* A dax device, named directly. */
	for (size_t i = 0; i < s->ndax; i++) {
		const struct pma_ns_dax_info *d = &s->dax[i];
		if (strcmp(d->dev, sel) != 0)
			continue;
		if (numa_node >= 0 && d->numa_node >= 0 && d->numa_node != numa_node)
			return pma_ns__err(-ENOENT, "%s is on NUMA node %d, not %d", d->dev, d->numa_node,
					numa_node);
		return put_path(d->dev, path, len);
	}
	/* A namespace, named by its device. */
	const struct pma_ns_info *n = pma_ns__namespace(s, sel);
	if (n) {
		if (n->mode != PMA_NS_MODE_DEVDAX || !n->chardev)
			return pma_ns__err(-ENOENT, "%s is %s, not devdax: no /dev/dax device to open",
					n->dev, pma_ns_mode_name(n->mode));
		if (numa_node >= 0 && node_of(s, n) >= 0 && node_of(s, n) != numa_node)
			return pma_ns__err(-ENOENT, "%s is on NUMA node %d, not %d", n->dev,
					node_of(s, n), numa_node);
		return put_path(n->chardev, path, len);
	}
	/* A region: its only devdax namespace. */
	int by_region = pma_ns__region(s, sel) != NULL;
	for (size_t i = 0; i < s->nns; i++) {
		n = &s->ns[i];
		if (by_region ? strcmp(n->region, sel) != 0 : (!n->name || strcmp(n->name, sel) != 0))
			continue;
		if (n->mode != PMA_NS_MODE_DEVDAX || !n->chardev ||
				(numa_node >= 0 && node_of(s, n) != numa_node)) {
			describe(s, n, list, sizeof(list)); /* for the message if nothing fits */
			continue;
		}
		if (nhit++ == 0)
			hit = n;
	}
	if (nhit == 1)
		return put_path(hit->chardev, path, len);
	if (nhit > 1) {
		list[0] = '\0';
		for (size_t i = 0; i < s->nns; i++) {
			n = &s->ns[i];
			if ((by_region ? strcmp(n->region, sel) == 0 :
					(n->name && strcmp(n->name, sel) == 0)) &&
					n->mode == PMA_NS_MODE_DEVDAX && n->chardev &&
					(numa_node < 0 || node_of(s, n) == numa_node))
				describe(s, n, list, sizeof(list));
		}
		return pma_ns__err(-EINVAL, "'%s'%s matches %zu devdax namespaces: %s; name one "
				"(or give a NUMA node)", selector, by_region ? " (a region)" : "",
				nhit, list);
	}
	char node[48] = "";
	if (numa_node >= 0)
		snprintf(node, sizeof(node), " on NUMA node %d", numa_node);
	if (list[0])
		return pma_ns__err(-ENOENT, "no devdax namespace '%s'%s; what there is: %s", selector,
				node, list);
	return pma_ns__err(-ENOENT, "no devdax namespace, region or device '%s'%s", selector, node);
}

int
pma_ns_dax_path(const char *selector, int numa_node, char *path, size_t len)
{
	struct pma_ns_state *s = NULL;
	int rc = pma_ns_state_read(&s);

	if (!rc)
		rc = pma_ns_resolve(s, selector, numa_node, path, len);
	pma_ns_state_free(&s);
	return rc;
}

int
pma_ns_region_open(const char *selector, int numa_node, unsigned flags,
		struct pma_region **out)
{
	char path[128];
	int rc;

	if (!out)
		return pma_ns__err(-EINVAL, "pma_ns_region_open: out is required");
	*out = NULL;
	if (flags & PMA_REGION_CREATE)
		return pma_ns__err(-EINVAL, "pma_ns_region_open: a dax device cannot be created "
				"(PMA_REGION_CREATE)");
	rc = pma_ns_dax_path(selector, numa_node, path, sizeof(path));
	if (rc)
		return rc;
	return pma_region_open(path, 0, flags, out);
}

/* Normalises "17:00.0" / "0000:17:00.0" into out ("0000:17:00.0"); 0 or -EINVAL. */
static int
normalize_bdf(const char *bdf, char out[16])
{
	unsigned dom = 0, bus, dev, fn;
	int n = 0;

	if (!bdf)
		return -EINVAL;
	for (const char *p = bdf; *p; p++)
		if (!isxdigit((unsigned char)*p) && *p != ':' && *p != '.')
			return -EINVAL;
	if (sscanf(bdf, "%x:%x:%x.%x%n", &dom, &bus, &dev, &fn, &n) == 4 && !bdf[n]) {
		/* domain given */
	} else if (n = 0, sscanf(bdf, "%x:%x.%x%n", &bus, &dev, &fn, &n) == 3 && !bdf[n]) {
		dom = 0;
	} else {
		return -EINVAL;
	}
	if (dom > 0xffff || bus > 0xff || dev > 0x1f || fn > 7)
		return -EINVAL;
	snprintf(out, 16, "%04x:%02x:%02x.%x", dom, bus, dev, fn);
	return 0;
}

static int
read_sys_int(const char *path, long *v, int base)
{
	FILE *f = fopen(path, "re");
	char buf[64];

	if (!f)
		return -errno;
	int ok = fgets(buf, sizeof(buf), f) != NULL;
	fclose(f);
	if (!ok)
		return -EIO;
	char *end;
	*v = strtol(buf, &end, base);
	return end == buf ? -EIO : 0;
}

int
pma_ns_pci_numa_node(const char *bdf, int *node)
{
	char norm[16], path[96];
	long v;

	if (!node)
		return pma_ns__err(-EINVAL, "pma_ns_pci_numa_node: node is required");
	if (normalize_bdf(bdf, norm))
		return pma_ns__err(-EINVAL, "'%s' is not a PCI address (like 0000:17:00.0)",
				bdf ? bdf : "(null)");
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/numa_node", norm);
	int rc = read_sys_int(path, &v, 10);
	if (rc == -ENOENT)
		return pma_ns__err(-ENODEV, "no PCI device %s", norm);
	if (rc)
		return pma_ns__err(rc, "%s: %s", path, strerror(-rc));
	*node = v < 0 ? -1 : (int)v;
	return 0;
}

static int
cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int
pma_ns_gpu_numa_node(int gpu, int *node, char *bdf)
{
	char *gpus[256];
	size_t n = 0;
	struct dirent *e;
	int rc;

	if (gpu < 0 || !node)
		return pma_ns__err(-EINVAL, "pma_ns_gpu_numa_node: a GPU number >= 0 and node are "
				"required");
	DIR *d = opendir("/sys/bus/pci/devices");
	if (!d)
		return pma_ns__err(-ENODEV, "no PCI devices visible (/sys/bus/pci/devices): no GPU %d",
				gpu);
	while ((e = readdir(d)) && n < sizeof(gpus) / sizeof(gpus[0])) {
		char path[300];
		long cls;
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/class", e->d_name);
		if (read_sys_int(path, &cls, 16))
			continue;
		/* 0x0300xx VGA, 0x0302xx 3D controller (data-centre GPUs). */
		if ((cls >> 8) != 0x0300 && (cls >> 8) != 0x0302)
			continue;
		if (!(gpus[n] = strdup(e->d_name)))
			break;
		n++;
	}
	closedir(d);
	qsort(gpus, n, sizeof(gpus[0]), cmp_str);
	if ((size_t)gpu >= n)
		rc = pma_ns__err(-ENODEV, "no GPU %d: %zu display/3D controller%s on the PCI bus", gpu,
				n, n == 1 ? "" : "s");
	else {
		rc = pma_ns_pci_numa_node(gpus[gpu], node);
		if (!rc && bdf)
			snprintf(bdf, 16, "%s", gpus[gpu]);
	}
	for (size_t i = 0; i < n; i++)
		free(gpus[i]);
	return rc;
}
