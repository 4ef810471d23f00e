/* SPDX-License-Identifier: BSD-3-Clause */
/* internal.h -- what the files of libddio share; not part of the API. */
#ifndef DDIO_INTERNAL_H
#define DDIO_INTERNAL_H 1

#include <limits.h>
#include <stdint.h>

#include "ddio.h"

struct pci_access;
struct pci_dev;

struct ddio_ctx {
	struct pci_access *pacc;
	char sysfs[PATH_MAX];   /* "/sys" or a fake tree */
	char pcipath[PATH_MAX]; /* <sysfs>/bus/pci: libpci's sysfs.path */
	char dev[PATH_MAX];     /* "/dev" or a fake tree */
	int real_sysfs;         /* sysfs resolves to /sys: the kernel checks privileges */
};

/* A known root port (models.c). */
struct ddio_model {
	uint16_t vendor;
	uint16_t device;
	const char *generation;
	enum ddio_support support;
};

struct ddio_port {
	struct ddio_ctx *ctx;
	struct pci_dev *dev;  /* the root port */
	char bdf[16];
	char device_bdf[16];
	uint16_t vendor;
	uint16_t device;
	const struct ddio_model *model; /* NULL: not in the table */
	char name[128];       /* "" when libpci's ID database has none */
	char config[PATH_MAX + 64];
};

/*
 * errmsg.c (ERRMSG_DEFINE_WRITERS, common/errmsg.h): ddio__err records a
 * message for ddio_errormsg() and returns code; ddio__err_prefix prepends
 * "<formatted>: " to the current message.
 */
int ddio__err(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int ddio__err_prefix(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* models.c: the table entry for vendor:device, or NULL. */
const struct ddio_model *ddio__model_find(uint16_t vendor, uint16_t device);

/*
 * pciaccess.c: libpci behind guards.  libpci reports fatal errors through
 * a callback that must not return; ours jumps back into the guarded call,
 * which then fails with DDIO_E_PCI and libpci's message.
 */
int ddio__pci_open(struct ddio_ctx *ctx);
void ddio__pci_close(struct ddio_ctx *ctx);
int ddio__bdf_parse(struct ddio_ctx *ctx, const char *s, unsigned bdf[4]);
int ddio__pci_get(struct ddio_ctx *ctx, const unsigned bdf[4], struct pci_dev **out);
void ddio__pci_put(struct pci_dev *d);
/* Identity (from sysfs, as the kernel fixed it up) and class. */
int ddio__pci_ident(struct pci_dev *d, uint16_t *vendor, uint16_t *device, uint16_t *cls);
/* PCIe port type from the PCI Express capability; -ENOENT when none is readable. */
int ddio__pci_port_type(struct pci_dev *d);
int ddio__pci_read32(struct pci_dev *d, int pos, uint32_t *v);
int ddio__pci_write32(struct pci_dev *d, int pos, uint32_t v);
void ddio__pci_name(struct ddio_ctx *ctx, uint16_t vendor, uint16_t device, char *buf, size_t len);

/* port.c: makes the port object for root port `root` found from `device`. */
int ddio__port_new(struct ddio_ctx *ctx, const char *root, const char *device,
		struct ddio_port **out);

#endif
