/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * pciaccess.c -- configuration space through pciutils' libpci.
 *
 * libpci reads the tree under its "sysfs.path" parameter (method
 * linux-sysfs): <path>/devices/DDDD:BB:DD.F/{config,vendor,device,class}.
 * Its fatal-error callback must not return and by default prints and
 * exits, which a library may not do: every call into libpci here runs
 * under a guard (setjmp) that the callback jumps back to, so the call
 * fails with DDIO_E_PCI and libpci's message instead.  Warnings are kept
 * as the message of the next failure, never printed.
 */
#include <errno.h>
#include <pci/pci.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static _Thread_local jmp_buf *guard;
static _Thread_local char pci_msg[256];

static void __attribute__((noreturn, format(printf, 1, 2)))
on_error(char *msg, ...)
{
	va_list ap;

	va_start(ap, msg);
	vsnprintf(pci_msg, sizeof(pci_msg), msg, ap);
	va_end(ap);
	if (guard)
		longjmp(*guard, 1);
	abort(); /* a libpci call outside a guard: a bug here, not a user error */
}

static void __attribute__((format(printf, 1, 2)))
on_warning(char *msg, ...)
{
	va_list ap;

	va_start(ap, msg);
	vsnprintf(pci_msg, sizeof(pci_msg), msg, ap);
	va_end(ap);
}

static void __attribute__((format(printf, 1, 2)))
on_debug(char *msg, ...)
{
	(void)msg;
}

/*
 * GUARDED(fail) -- the rest of the block runs with libpci's fatal errors
 * caught; on one, `fail` runs (it must return).  Only locals set before the
 * guard are used after a jump.
 */
#define GUARDED(fail)                                                            \
	jmp_buf jb_;                                                             \
	jmp_buf *saved_ = guard;                                                 \
	if (setjmp(jb_)) {                                                       \
		guard = saved_;                                                  \
		fail;                                                            \
	}                                                                        \
	guard = &jb_
#define UNGUARD() (guard = saved_)

int
ddio__pci_open(struct ddio_ctx *ctx)
{
	struct pci_access *a = pci_alloc();

	if (!a)
		return ddio__err(-ENOMEM, "libpci: out of memory");
	a->error = on_error;
	a->warning = on_warning;
	a->debug = on_debug;
	a->method = PCI_ACCESS_SYS_BUS_PCI;
	ctx->pacc = a;
	pci_msg[0] = '\0';
	GUARDED(return ddio__err(DDIO_E_PCI, "libpci: %s", pci_msg));
	if (pci_set_param(a, "sysfs.path", ctx->pcipath)) {
		UNGUARD();
		return ddio__err(DDIO_E_PCI, "libpci has no sysfs.path parameter");
	}
	pci_init(a);
	UNGUARD();
	return 0;
}

void
ddio__pci_close(struct ddio_ctx *ctx)
{
	if (!ctx->pacc)
		return;
	GUARDED(ctx->pacc = NULL; return);
	pci_cleanup(ctx->pacc);
	UNGUARD();
	ctx->pacc = NULL;
}

int
ddio__bdf_parse(struct ddio_ctx *ctx, const char *s, unsigned bdf[4])
{
	struct pci_filter f;
	char tmp[64];
	char *e;

	if (!s || !*s || strlen(s) >= sizeof(tmp) || strchr(s, '*'))
		return ddio__err(-EINVAL, "malformed PCI address '%s': want DDDD:BB:DD.F",
				s ? s : "(null)");
	snprintf(tmp, sizeof(tmp), "%s", s);
	GUARDED(return ddio__err(DDIO_E_PCI, "libpci: %s", pci_msg));
	pci_filter_init(ctx->pacc, &f);
	e = pci_filter_parse_slot(&f, tmp);
	UNGUARD();
	if (e)
		return ddio__err(-EINVAL, "malformed PCI address '%s': %s", s, e);
	if (f.bus < 0 || f.slot < 0 || f.func < 0)
		return ddio__err(-EINVAL, "PCI address '%s' lacks the bus, device or function", s);
	bdf[0] = f.domain < 0 ? 0 : (unsigned)f.domain;
	bdf[1] = (unsigned)f.bus;
	bdf[2] = (unsigned)f.slot;
	bdf[3] = (unsigned)f.func;
	return 0;
}

int
ddio__pci_get(struct ddio_ctx *ctx, const unsigned bdf[4], struct pci_dev **out)
{
	struct pci_dev *volatile d = NULL;

	pci_msg[0] = '\0';
	GUARDED({
		if (d)
			ddio__pci_put(d);
		return ddio__err(DDIO_E_PCI, "libpci: %s", pci_msg);
	});
	d = pci_get_dev(ctx->pacc, (int)bdf[0], (int)bdf[1], (int)bdf[2], (int)bdf[3]);
	if (d)
		pci_fill_info(d, PCI_FILL_IDENT | PCI_FILL_CLASS);
	UNGUARD();
	if (!d)
		return ddio__err(-ENOMEM, "libpci: out of memory");
	*out = d;
	return 0;
}

void
ddio__pci_put(struct pci_dev *d)
{
	if (!d)
		return;
	GUARDED(return);
	pci_free_dev(d);
	UNGUARD();
}

int
ddio__pci_ident(struct pci_dev *d, uint16_t *vendor, uint16_t *device, uint16_t *cls)
{
	*vendor = d->vendor_id;
	*device = d->device_id;
	*cls = d->device_class;
	return 0;
}

int
ddio__pci_port_type(struct pci_dev *d)
{
	volatile int type = -ENOENT;

	pci_msg[0] = '\0';
	GUARDED(return ddio__err(DDIO_E_PCI, "libpci: %s", pci_msg));
	pci_fill_info(d, PCI_FILL_CAPS);
	struct pci_cap *cap = pci_find_cap(d, PCI_CAP_ID_EXP, PCI_CAP_NORMAL);
	if (cap) {
		u8 b[2];
		if (pci_read_block(d, (int)cap->addr + PCI_EXP_FLAGS, b, 2))
			type = ((b[0] | b[1] << 8) & PCI_EXP_FLAGS_TYPE) >> 4;
	}
	UNGUARD();
	return type;
}

int
ddio__pci_read32(struct pci_dev *d, int pos, uint32_t *v)
{
	u8 b[4];
	volatile int ok;

	pci_msg[0] = '\0';
	GUARDED(return ddio__err(DDIO_E_PCI, "libpci: %s", pci_msg));
	ok = pci_read_block(d, pos, b, 4);
	UNGUARD();
	if (!ok)
		return ddio__err(-EACCES, "reading 4 bytes at config offset 0x%x of %04x:%02x:%02x.%d "
				"came back short%s%s (reading past byte 64 needs CAP_SYS_ADMIN)",
				pos, d->domain, d->bus, d->dev, d->func, pci_msg[0] ? ": " : "", pci_msg);
	*v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
	return 0;
}

int
ddio__pci_write32(struct pci_dev *d, int pos, uint32_t v)
{
	u8 b[4] = {(u8)v, (u8)(v >> 8), (u8)(v >> 16), (u8)(v >> 24)};
	volatile int ok;

	pci_msg[0] = '\0';
	GUARDED(return ddio__err(DDIO_E_PCI, "libpci: %s", pci_msg));
	ok = pci_write_block(d, pos, b, 4);
	UNGUARD();
	if (!ok)
		return ddio__err(DDIO_E_PCI, "writing config offset 0x%x of %04x:%02x:%02x.%d failed: %s",
				pos, d->domain, d->bus, d->dev, d->func,
				pci_msg[0] ? pci_msg : "libpci gave no reason");
	return 0;
}

void
ddio__pci_name(struct ddio_ctx *ctx, uint16_t vendor, uint16_t device, char *buf, size_t len)
{
	char tmp[128];
	char *volatile name = NULL;

	buf[0] = '\0';
	GUARDED(return);
	/*
	 * pci.ids only: libpci 3.9 leaks its udev context when the udev hwdb is
	 * missing (containers), and pci.ids has the root ports' names anyway.
	 */
	name = pci_lookup_name(ctx->pacc, tmp, sizeof(tmp),
			PCI_LOOKUP_DEVICE | PCI_LOOKUP_NO_NUMBERS | PCI_LOOKUP_NO_HWDB, vendor, device);
	UNGUARD();
	if (name)
		snprintf(buf, len, "%s", name);
}
