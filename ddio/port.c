/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * port.c -- a root port's DDIO register: read, plan a change, apply it.
 *
 * A change is planned first (read, compute, nothing written) so that a
 * dry run shows exactly the configuration write that would be made, and
 * the caller can record the prior value durably before applying it.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <pci/pci.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"

#define INTEL 0x8086
#define CLASS_PCI_BRIDGE 0x0604

int
ddio__port_new(struct ddio_ctx *ctx, const char *root, const char *device, struct ddio_port **out)
{
	struct ddio_port *p;
	unsigned bdf[4];
	uint16_t cls;
	int ret, type;

	if ((ret = ddio__bdf_parse(ctx, root, bdf)))
		return ret;
	p = calloc(1, sizeof(*p));
	if (!p)
		return ddio__err(-ENOMEM, "out of memory");
	p->ctx = ctx;
	snprintf(p->bdf, sizeof(p->bdf), "%s", root);
	snprintf(p->device_bdf, sizeof(p->device_bdf), "%s", device);
	snprintf(p->config, sizeof(p->config), "%s/devices/%s/config", ctx->pcipath, root);
	if ((ret = ddio__pci_get(ctx, bdf, &p->dev)))
		goto fail;
	ddio__pci_ident(p->dev, &p->vendor, &p->device, &cls);
	if (cls != CLASS_PCI_BRIDGE) {
		if (strcmp(root, device) == 0)
			ret = ddio__err(DDIO_E_NO_ROOT_PORT, "%s (%04x:%04x, class %04x) sits on a root "
					"bus: an integrated device, with no PCIe root port above it",
					device, p->vendor, p->device, cls);
		else
			ret = ddio__err(DDIO_E_NO_ROOT_PORT, "%s, the device below the host bridge "
					"above %s, is not a PCI bridge (class %04x)", root, device, cls);
		goto fail;
	}
	type = ddio__pci_port_type(p->dev);
	if (type < 0 && type != -ENOENT) {
		ret = type;
		goto fail;
	}
	if (type >= 0 && type != PCI_EXP_TYPE_ROOT_PORT) {
		ret = ddio__err(DDIO_E_NO_ROOT_PORT, "%s is a PCIe port of type %d, not a root port (%d)",
				root, type, PCI_EXP_TYPE_ROOT_PORT);
		goto fail;
	}
	p->model = ddio__model_find(p->vendor, p->device);
	ddio__pci_name(ctx, p->vendor, p->device, p->name, sizeof(p->name));
	*out = p;
	return 0;
fail:
	ddio_port_delete(&p);
	return ret;
}

void
ddio_port_delete(struct ddio_port **p)
{
	if (!p || !*p)
		return;
	ddio__pci_put((*p)->dev);
	free(*p);
	*p = NULL;
}

const char *ddio_port_bdf(const struct ddio_port *p) { return p->bdf; }
const char *ddio_port_device_bdf(const struct ddio_port *p) { return p->device_bdf; }
uint16_t ddio_port_vendor(const struct ddio_port *p) { return p->vendor; }
uint16_t ddio_port_device(const struct ddio_port *p) { return p->device; }
const char *ddio_port_generation(const struct ddio_port *p) { return p->model ? p->model->generation : NULL; }
const char *ddio_port_name(const struct ddio_port *p) { return p->name[0] ? p->name : NULL; }

enum ddio_support
ddio_port_support(const struct ddio_port *p)
{
	return p->model ? p->model->support : DDIO_SUPPORT_UNKNOWN;
}

/* Refuses what DDIO_FORCE must be given for, saying why. */
static int
check_supported(const struct ddio_port *p)
{
	if (p->vendor != INTEL)
		return ddio__err(DDIO_E_UNSUPPORTED, "root port %s is not an Intel device (%04x:%04x): "
				"DDIO is an Intel Xeon feature and offset 0x%x means something else "
				"here; refusing without --force", p->bdf, p->vendor, p->device,
				DDIO_PERFCTRLSTS_0);
	if (!p->model)
		return ddio__err(DDIO_E_UNSUPPORTED, "root port %s (%04x:%04x) is not a recognised "
				"Intel Xeon IIO root port (see docs/ddio.md); refusing without --force",
				p->bdf, p->vendor, p->device);
	if (p->model->support != DDIO_SUPPORT_VERIFIED)
		return ddio__err(DDIO_E_UNSUPPORTED, "root port %s (%04x:%04x) is an %s IIO root port, "
				"but the layout of perfctrlsts_0 at 0x%x is not verified for %s "
				"(docs/ddio.md); refusing without --force", p->bdf, p->vendor,
				p->device, p->model->generation, DDIO_PERFCTRLSTS_0,
				p->model->generation);
	return 0;
}

int
ddio_port_read(struct ddio_port *p, uint32_t *value, enum ddio_state *state)
{
	struct stat st;
	uint32_t v;
	int ret;

	if (!p || !value)
		return ddio__err(-EINVAL, "ddio_port_read: NULL argument");
	if (stat(p->config, &st))
		return ddio__err(-errno, "cannot stat %s: %s", p->config, strerror(errno));
	if (st.st_size < DDIO_PERFCTRLSTS_0 + 4)
		return ddio__err(-ENXIO, "configuration space of %s is %lld bytes: offset 0x%x lies "
				"beyond it (no extended configuration access)", p->bdf,
				(long long)st.st_size, DDIO_PERFCTRLSTS_0);
	if ((ret = ddio__pci_read32(p->dev, DDIO_PERFCTRLSTS_0, &v)))
		return ret;
	*value = v;
	if (state)
		*state = ddio_port_support(p) == DDIO_SUPPORT_UNKNOWN ? DDIO_STATE_UNKNOWN :
			ddio_state_of(v);
	return 0;
}

int
ddio_port_plan(struct ddio_port *p, int enable, unsigned flags, struct ddio_change *out)
{
	uint32_t v;
	int ret;

	if (!p || !out)
		return ddio__err(-EINVAL, "ddio_port_plan: NULL argument");
	if (!(flags & DDIO_FORCE) && (ret = check_supported(p)))
		return ret;
	if ((ret = ddio_port_read(p, &v, NULL)))
		return ret;
	memset(out, 0, sizeof(*out));
	snprintf(out->port, sizeof(out->port), "%s", p->bdf);
	out->offset = DDIO_PERFCTRLSTS_0;
	out->before = v;
	if (enable)
		out->after = (v | DDIO_USE_ALLOCATING_FLOW_WR) & ~DDIO_NOSNOOPOPWREN;
	else
		out->after = (v & ~DDIO_USE_ALLOCATING_FLOW_WR) | DDIO_NOSNOOPOPWREN;
	return 0;
}

static int
has_cap_sys_admin(void)
{
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
	struct __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3];

	if (syscall(SYS_capget, &h, d))
		return 0;
	return (d[CAP_TO_INDEX(CAP_SYS_ADMIN)].effective & CAP_TO_MASK(CAP_SYS_ADMIN)) != 0;
}

int
ddio_port_check_write(const struct ddio_port *p)
{
	int fd;

	if (!p)
		return ddio__err(-EINVAL, "ddio_port_check_write: NULL argument");
	/* The kernel refuses config writes without CAP_SYS_ADMIN even to root-owned 0600 files. */
	if (p->ctx->real_sysfs && !has_cap_sys_admin())
		return ddio__err(-EPERM, "writing the configuration space of %s needs CAP_SYS_ADMIN "
				"(run as root)", p->bdf);
	fd = open(p->config, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		return ddio__err(-e, "cannot open %s for writing: %s (changing DDIO needs root)",
				p->config, strerror(e));
	}
	close(fd);
	return 0;
}

int
ddio_port_apply(struct ddio_port *p, const struct ddio_change *c, unsigned flags)
{
	uint32_t now, back;
	int ret;

	if (!p || !c)
		return ddio__err(-EINVAL, "ddio_port_apply: NULL argument");
	if (strcmp(c->port, p->bdf) != 0 || c->offset != DDIO_PERFCTRLSTS_0)
		return ddio__err(-EINVAL, "the change is for %s offset 0x%x, not for %s offset 0x%x",
				c->port, c->offset, p->bdf, DDIO_PERFCTRLSTS_0);
	if ((c->before ^ c->after) & ~DDIO_BITS)
		return ddio__err(-EINVAL, "the change 0x%08x -> 0x%08x touches bits other than 7 and 3",
				c->before, c->after);
	if (c->before == c->after)
		return 0;
	if (!(flags & DDIO_FORCE) && (ret = check_supported(p)))
		return ret;
	if ((ret = ddio_port_check_write(p)) || (ret = ddio_port_read(p, &now, NULL)))
		return ret;
	if (now != c->before)
		return ddio__err(DDIO_E_CHANGED, "perfctrlsts_0 of %s is 0x%08x, not 0x%08x as planned: "
				"it changed meanwhile; plan again", p->bdf, now, c->before);
	if ((ret = ddio__pci_write32(p->dev, DDIO_PERFCTRLSTS_0, c->after)))
		return ret;
	if ((ret = ddio_port_read(p, &back, NULL)))
		return ret;
	if (back != c->after) {
		/* The register did not take the value: leave it as it was. */
		int undo = ddio__pci_write32(p->dev, DDIO_PERFCTRLSTS_0, c->before);
		return ddio__err(DDIO_E_VERIFY, "wrote 0x%08x to perfctrlsts_0 of %s but read back "
				"0x%08x; %s 0x%08x", c->after, p->bdf, back,
				undo ? "could not write back" : "wrote back", c->before);
	}
	return 0;
}

int
ddio_port_plan_restore(struct ddio_port *p, const struct ddio_saved *s, unsigned flags,
		struct ddio_change *out)
{
	uint32_t v, mask;
	int ret;

	if (!p || !s || !out)
		return ddio__err(-EINVAL, "ddio_port_plan_restore: NULL argument");
	if (strcmp(s->port, p->bdf) != 0 || s->offset != DDIO_PERFCTRLSTS_0)
		return ddio__err(DDIO_E_STATE, "the record is for %s offset 0x%x, not for %s",
				s->port, s->offset, p->bdf);
	if (!(flags & DDIO_FORCE) && (s->vendor != p->vendor || s->device != p->device))
		return ddio__err(DDIO_E_STATE, "the record for %s was made for a %04x:%04x device, but "
				"%s is now %04x:%04x: not restoring without --force", s->port,
				s->vendor, s->device, p->bdf, p->vendor, p->device);
	if ((ret = ddio_port_read(p, &v, NULL)))
		return ret;
	mask = s->mask & DDIO_BITS; /* never more than the DDIO bits, whatever the file says */
	memset(out, 0, sizeof(*out));
	snprintf(out->port, sizeof(out->port), "%s", p->bdf);
	out->offset = DDIO_PERFCTRLSTS_0;
	out->before = v;
	out->after = (v & ~mask) | (s->value & mask);
	return 0;
}
