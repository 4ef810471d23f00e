/* SPDX-License-Identifier: BSD-3-Clause */
/* context.c -- a libddio context: libpci opened on a sysfs tree (real or fake). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

static int
set_path(char *dst, size_t len, const char *what, const char *src)
{
	int n = snprintf(dst, len, "%s", src);

	if (n < 0 || (size_t)n >= len)
		return ddio__err(-ENAMETOOLONG, "%s path too long: %s", what, src);
	/* Trailing slashes would make the walk's "parent" test miss. */
	for (size_t l = strlen(dst); l > 1 && dst[l - 1] == '/'; l--)
		dst[l - 1] = '\0';
	return 0;
}

int
ddio_ctx_new(const char *sysfs_root, const char *dev_root, struct ddio_ctx **out)
{
	struct ddio_ctx *ctx;
	char devices[PATH_MAX + 16], real[PATH_MAX];
	int ret;

	if (!out)
		return ddio__err(-EINVAL, "ddio_ctx_new: out is NULL");
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return ddio__err(-ENOMEM, "out of memory");
	if ((ret = set_path(ctx->sysfs, sizeof(ctx->sysfs), "sysfs", sysfs_root ? sysfs_root : "/sys")) ||
	    (ret = set_path(ctx->dev, sizeof(ctx->dev), "dev", dev_root ? dev_root : "/dev")))
		goto fail;
	if (snprintf(ctx->pcipath, sizeof(ctx->pcipath), "%s/bus/pci", ctx->sysfs) >=
			(int)sizeof(ctx->pcipath)) {
		ret = ddio__err(-ENAMETOOLONG, "sysfs path too long: %s", ctx->sysfs);
		goto fail;
	}
	snprintf(devices, sizeof(devices), "%s/devices", ctx->pcipath);
	if (access(devices, R_OK | X_OK)) {
		ret = ddio__err(-errno, "cannot read %s: %s", devices, strerror(errno));
		goto fail;
	}
	ctx->real_sysfs = realpath(ctx->sysfs, real) && strcmp(real, "/sys") == 0;
	if ((ret = ddio__pci_open(ctx)))
		goto fail;
	*out = ctx;
	return 0;
fail:
	ddio__pci_close(ctx);
	free(ctx);
	return ret;
}

void
ddio_ctx_delete(struct ddio_ctx **ctx)
{
	if (!ctx || !*ctx)
		return;
	ddio__pci_close(*ctx);
	free(*ctx);
	*ctx = NULL;
}
