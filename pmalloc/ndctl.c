/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ndctl.c -- reading the node's NVDIMM configuration through libndctl and
 * libdaxctl: buses, regions, namespaces, dax devices.  Also the library
 * context every provisioning call uses, whose log (libndctl prints to
 * stderr by default) is captured instead, so that its explanation of a
 * failure can be part of pma_errormsg().
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include <daxctl/libdaxctl.h>
#include <ndctl/libndctl.h>
#include <linux/ndctl.h>

#include "pmalloc_ns.h"
#include "errmsg.h"
#include "ns_internal.h"

static _Thread_local char lib_msg[384];

static void
capture(const char *format, va_list args)
{
	vsnprintf(lib_msg, sizeof(lib_msg), format, args);
	size_t n = strlen(lib_msg);
	while (n && (lib_msg[n - 1] == '\n' || lib_msg[n - 1] == ' '))
		lib_msg[--n] = '\0';
}

static void
log_ndctl(struct ndctl_ctx *ctx, int priority, const char *file, int line, const char *fn,
		const char *format, va_list args)
{
	(void)ctx, (void)file, (void)line, (void)fn;
	if (priority <= LOG_ERR)
		capture(format, args);
}

static void
log_daxctl(struct daxctl_ctx *ctx, int priority, const char *file, int line, const char *fn,
		const char *format, va_list args)
{
	(void)ctx, (void)file, (void)line, (void)fn;
	if (priority <= LOG_ERR)
		capture(format, args);
}

const char *pma_ns__lib_msg(void) { return lib_msg; }
void pma_ns__lib_msg_clear(void) { lib_msg[0] = '\0'; }

int
pma_ns__err_lib(int code, const char *fmt, ...)
{
	char buf[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (lib_msg[0])
		return pma_ns__err(code, "%s (libndctl: %s)", buf, lib_msg);
	return pma_ns__err(code, "%s", buf);
}

int
pma_ns__ctx_new(struct ndctl_ctx **out)
{
	struct ndctl_ctx *ctx = NULL;
	int rc = ndctl_new(&ctx);

	*out = NULL;
	if (rc < 0 || !ctx)
		return pma_ns__err(-ENXIO, "libndctl could not start: %s", strerror(rc < 0 ? -rc : ENOMEM));
	ndctl_set_log_fn(ctx, log_ndctl);
	struct daxctl_ctx *dctx = ndctl_get_daxctl_ctx(ctx);
	if (dctx)
		daxctl_set_log_fn(dctx, log_daxctl);
	pma_ns__lib_msg_clear();
	*out = ctx;
	return 0;
}

void
pma_ns__ctx_free(struct ndctl_ctx **ctx)
{
	if (ctx && *ctx) {
		ndctl_unref(*ctx);
		*ctx = NULL;
	}
}

static const char *
persistence_name(enum ndctl_persistence_domain d)
{
	switch (d) {
	case PERSISTENCE_CPU_CACHE: return "cpu_cache";
	case PERSISTENCE_MEM_CTRL: return "memory_controller";
	case PERSISTENCE_NONE: return "none";
	default: return "unknown";
	}
}

/*
 * A label-less region whose DIMMs all can store labels (the config-area
 * commands) becomes labelled once they are initialised; otherwise it stays
 * label-less for good.
 */
static enum pma_ns_labels
region_labels(struct ndctl_region *region)
{
	struct ndctl_dimm *dimm;
	unsigned capable = 0;

	if (ndctl_region_get_nstype(region) != ND_DEVICE_NAMESPACE_IO)
		return PMA_NS_LABELS_ACTIVE;
	if (ndctl_region_get_mappings(region) == 0)
		return PMA_NS_LABELS_NONE;
	ndctl_dimm_foreach_in_region(region, dimm) {
		if (!ndctl_dimm_is_cmd_supported(dimm, ND_CMD_GET_CONFIG_SIZE) ||
				!ndctl_dimm_is_cmd_supported(dimm, ND_CMD_GET_CONFIG_DATA) ||
				!ndctl_dimm_is_cmd_supported(dimm, ND_CMD_SET_CONFIG_DATA))
			return PMA_NS_LABELS_NONE;
		capable++;
	}
	return capable == ndctl_region_get_mappings(region) ? PMA_NS_LABELS_UNINITIALIZED :
			PMA_NS_LABELS_NONE;
}

static enum pma_ns_mode
ns_mode(struct ndctl_namespace *ndns)
{
	switch (ndctl_namespace_get_mode(ndns)) {
	case NDCTL_NS_MODE_FSDAX: return PMA_NS_MODE_FSDAX;
	case NDCTL_NS_MODE_DEVDAX: return PMA_NS_MODE_DEVDAX;
	case NDCTL_NS_MODE_SECTOR: return PMA_NS_MODE_SECTOR;
	case NDCTL_NS_MODE_RAW: return PMA_NS_MODE_RAW;
	default: return PMA_NS_MODE_UNKNOWN;
	}
}

static void
uuid_text(const unsigned char u[16], char out[37])
{
	static const char hex[] = "0123456789abcdef";
	char *p = out;

	for (int i = 0; i < 16; i++) {
		if (i == 4 || i == 6 || i == 8 || i == 10)
			*p++ = '-';
		*p++ = hex[u[i] >> 4];
		*p++ = hex[u[i] & 15];
	}
	*p = '\0';
}

static int
read_int_file(const char *path, int dflt)
{
	FILE *f = fopen(path, "re");
	int v;

	if (!f)
		return dflt;
	if (fscanf(f, "%d", &v) != 1)
		v = dflt;
	fclose(f);
	return v;
}

static int
add_daxdev(struct pma_ns_state *s, struct daxctl_dev *dev, const char *region,
		const char *ns, int numa_node)
{
	struct pma_ns_dax_info d = {0};
	char path[64], sys[128];
	const char *name = daxctl_dev_get_devname(dev);

	if (!name || daxctl_dev_get_size(dev) == 0)
		return 0; /* the region's seed: nothing to map */
	for (size_t i = 0; i < s->ndax; i++)
		if (strcmp(s->dax[i].dev, name) == 0)
			return 0;
	snprintf(path, sizeof(path), "/dev/%s", name);
	if (numa_node < 0) {
		snprintf(sys, sizeof(sys), "/sys/bus/dax/devices/%s/numa_node", name);
		numa_node = read_int_file(sys, -1);
	}
	d.dev = name;
	d.path = path;
	d.region = region;
	d.namespace = ns;
	d.size = daxctl_dev_get_size(dev);
	d.align = daxctl_dev_get_align(dev);
	if (d.align == 0 || d.align == ULONG_MAX)
		d.align = 0;
	d.numa_node = numa_node;
	d.target_node = daxctl_dev_get_target_node(dev);
	d.mode = daxctl_dev_get_memory(dev) && daxctl_dev_has_online_memory(dev) ?
			"system-ram" : "devdax";
	d.in_use = pma_ns__dev_in_use(path) == 1;
	return pma_ns__add_dax(s, &d);
}

static int
add_namespace(struct pma_ns_state *s, struct ndctl_namespace *ndns, const char *region)
{
	struct pma_ns_info n = {0};
	struct ndctl_dax *dax = ndctl_namespace_get_dax(ndns);
	struct ndctl_pfn *pfn = ndctl_namespace_get_pfn(ndns);
	struct ndctl_btt *btt = ndctl_namespace_get_btt(ndns);
	struct daxctl_region *dregion = NULL;
	struct daxctl_dev *ddev = NULL;
	unsigned char uu[16];
	char uuid[37], path[64];
	int rc;

	if (ndctl_namespace_get_size(ndns) == 0)
		return 0; /* idle seed */
	n.dev = ndctl_namespace_get_devname(ndns);
	n.region = region;
	n.mode = ns_mode(ndns);
	n.size = ndctl_namespace_get_size(ndns);
	/* A namespace claimed by a dax, pfn or btt device is active, not itself enabled. */
	n.enabled = ndctl_namespace_is_active(ndns);
	n.numa_node = ndctl_namespace_get_numa_node(ndns);
	n.target_node = ndctl_namespace_get_target_node(ndns);
	memset(uu, 0, sizeof(uu));
	ndctl_namespace_get_uuid(ndns, uu);
	static const unsigned char zero[16];
	if (memcmp(uu, zero, sizeof(uu)) != 0) {
		uuid_text(uu, uuid);
		n.uuid = uuid;
	}
	n.name = ndctl_namespace_get_alt_name(ndns);
	if (n.name && !*n.name)
		n.name = NULL;
	if (dax && ndctl_dax_is_enabled(dax)) {
		n.align = ndctl_dax_get_align(dax);
		dregion = ndctl_dax_get_daxctl_region(dax);
		if (dregion)
			daxctl_dev_foreach(dregion, ddev)
				if (daxctl_dev_get_size(ddev) > 0)
					break;
		if (ddev)
			n.chardev = daxctl_dev_get_devname(ddev);
	} else if (pfn && ndctl_pfn_is_enabled(pfn)) {
		n.align = ndctl_pfn_get_align(pfn);
		n.blockdev = ndctl_pfn_get_block_device(pfn);
	} else if (btt && ndctl_btt_is_enabled(btt)) {
		n.blockdev = ndctl_btt_get_block_device(btt);
	} else {
		n.blockdev = ndctl_namespace_get_block_device(ndns);
	}
	if (n.blockdev && !*n.blockdev)
		n.blockdev = NULL;
	if (n.chardev) {
		snprintf(path, sizeof(path), "/dev/%s", n.chardev);
		n.in_use = pma_ns__dev_in_use(path) == 1;
	} else if (n.blockdev) {
		snprintf(path, sizeof(path), "/dev/%s", n.blockdev);
		n.in_use = pma_ns__dev_in_use(path) == 1;
	}
	rc = pma_ns__add_ns(s, &n);
	if (rc)
		return rc;
	if (dregion) {
		const char *nsname = s->ns[s->nns - 1].dev;
		daxctl_dev_foreach(dregion, ddev) {
			rc = add_daxdev(s, ddev, region, nsname, n.numa_node);
			if (rc)
				return rc;
		}
	}
	return 0;
}

static int
add_region(struct pma_ns_state *s, struct ndctl_region *region, const char *bus)
{
	struct pma_ns_region_info r = {0};
	struct ndctl_namespace *ndns;
	int rc;

	r.dev = ndctl_region_get_devname(region);
	r.bus = bus;
	r.type = ndctl_region_get_type_name(region);
	r.size = ndctl_region_get_size(region);
	r.available_size = ndctl_region_get_available_size(region);
	r.max_available_extent = ndctl_region_get_max_available_extent(region);
	if (r.available_size == ULLONG_MAX)
		r.available_size = 0;
	if (r.max_available_extent == ULLONG_MAX)
		r.max_available_extent = r.available_size;
	unsigned long align = ndctl_region_get_align(region);
	r.align = align == ULONG_MAX ? 0 : align;
	r.interleave_ways = ndctl_region_get_interleave_ways(region);
	r.numa_node = ndctl_region_get_numa_node(region);
	r.target_node = ndctl_region_get_target_node(region);
	r.persistence_domain = persistence_name(ndctl_region_get_persistence_domain(region));
	r.labels = region_labels(region);
	r.enabled = ndctl_region_is_enabled(region) > 0;
	r.readonly = ndctl_region_get_ro(region) > 0;
	rc = pma_ns__add_region(s, &r);
	if (rc)
		return rc;
	const char *rname = s->reg[s->nreg - 1].dev;
	ndctl_namespace_foreach(region, ndns) {
		rc = add_namespace(s, ndns, rname);
		if (rc)
			return rc;
	}
	return 0;
}

int
pma_ns__state_fill(struct ndctl_ctx *ctx, struct pma_ns_state *s)
{
	struct ndctl_bus *bus;
	struct ndctl_region *region;
	struct daxctl_region *dregion;
	struct daxctl_dev *ddev;
	int rc;

	if (access("/sys/bus/nd", F_OK) != 0) {
		rc = pma_ns__set_absent(s, "no NVDIMM support: the libnvdimm driver is not loaded "
				"(no /sys/bus/nd), so this machine shows no persistent memory");
		if (rc)
			return rc;
	}
	ndctl_bus_foreach(ctx, bus) {
		struct pma_ns_bus_info b = {
			.dev = ndctl_bus_get_devname(bus),
			.provider = ndctl_bus_get_provider(bus),
		};
		rc = pma_ns__add_bus(s, &b);
		if (rc)
			return rc;
		const char *bname = s->bus[s->nbus - 1].dev;
		ndctl_region_foreach(bus, region) {
			rc = add_region(s, region, bname);
			if (rc)
				return rc;
		}
	}
	/* Dax devices that no NVDIMM namespace backs (soft-reserved memory, CXL). */
	struct daxctl_ctx *dctx = ndctl_get_daxctl_ctx(ctx);
	if (dctx)
		daxctl_region_foreach(dctx, dregion)
			daxctl_dev_foreach(dregion, ddev) {
				rc = add_daxdev(s, ddev, NULL, NULL, -1);
				if (rc)
					return rc;
			}
	return pma_ns__finish(s);
}

int
pma_ns_state_read(struct pma_ns_state **out)
{
	struct ndctl_ctx *ctx = NULL;
	struct pma_ns_state *s = NULL;
	int rc;

	if (!out)
		return pma_ns__err(-EINVAL, "pma_ns_state_read: out is required");
	*out = NULL;
	rc = pma_ns__state_new(&s);
	if (rc)
		return rc;
	rc = pma_ns__ctx_new(&ctx);
	if (rc == 0)
		rc = pma_ns__state_fill(ctx, s);
	pma_ns__ctx_free(&ctx);
	if (rc) {
		pma_ns_state_free(&s);
		return rc;
	}
	*out = s;
	return 0;
}
