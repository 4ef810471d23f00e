/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * msr.c -- the global IIO LLC ways MSR (0xC8B), read only.
 *
 * A package-scope bitmask of the last-level-cache ways that DDIO may
 * allocate inbound writes into (two ways, 0x600, by default on Skylake-SP;
 * see docs/ddio.md).  Read through the msr driver, /dev/cpu/N/msr, from one
 * CPU of each package.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

#define MAX_CPUS 8192

static int
read_int(const char *path, int *v)
{
	FILE *f = fopen(path, "re");
	int ok;

	if (!f)
		return -1;
	ok = fscanf(f, "%d", v) == 1;
	fclose(f);
	return ok ? 0 : -1;
}

static int
read_msr(const char *dev, int cpu, uint32_t msr, uint64_t *v)
{
	char path[PATH_MAX + 32];
	int fd;
	ssize_t r;

	snprintf(path, sizeof(path), "%s/cpu/%d/msr", dev, cpu);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	r = pread(fd, v, sizeof(*v), msr);
	int e = errno;
	close(fd);
	if (r < 0)
		return -e;
	return r == (ssize_t)sizeof(*v) ? 0 : -EIO;
}

int
ddio_llc_ways_read(struct ddio_ctx *ctx, struct ddio_llc_ways *out, size_t max, size_t *n)
{
	char dir[PATH_MAX + 32], path[PATH_MAX + 32 + 320];
	DIR *d;
	struct dirent *e;
	size_t filled = 0;

	if (!ctx || !out || !n)
		return ddio__err(-EINVAL, "ddio_llc_ways_read: NULL argument");
	*n = 0;
	snprintf(dir, sizeof(dir), "%s/devices/system/cpu", ctx->sysfs);
	d = opendir(dir);
	if (!d)
		return ddio__err(-ENOENT, "cannot list CPUs in %s: %s", dir, strerror(errno));
	/* The lowest-numbered CPU of each package. */
	while ((e = readdir(d))) {
		int cpu, pkg, len = -1;
		if (sscanf(e->d_name, "cpu%d%n", &cpu, &len) != 1 || len != (int)strlen(e->d_name) ||
		    cpu < 0 || cpu >= MAX_CPUS)
			continue;
		snprintf(path, sizeof(path), "%s/%s/topology/physical_package_id", dir, e->d_name);
		if (read_int(path, &pkg))
			continue; /* offline CPUs have no topology */
		size_t i;
		for (i = 0; i < filled && out[i].package != pkg; i++)
			;
		if (i < filled) {
			if (cpu < out[i].cpu)
				out[i].cpu = cpu;
			continue;
		}
		if (filled == max)
			continue;
		out[filled++] = (struct ddio_llc_ways){.package = pkg, .cpu = cpu};
	}
	closedir(d);
	if (!filled)
		return ddio__err(-ENOENT, "no CPU with a physical_package_id under %s", dir);
	for (size_t i = 1; i < filled; i++) /* package order */
		for (size_t k = i; k > 0 && out[k - 1].package > out[k].package; k--) {
			struct ddio_llc_ways t = out[k];
			out[k] = out[k - 1];
			out[k - 1] = t;
		}
	for (size_t i = 0; i < filled; i++) {
		out[i].err = read_msr(ctx->dev, out[i].cpu, DDIO_MSR_IIO_LLC_WAYS, &out[i].value);
		out[i].ways = out[i].err ? 0 : (unsigned)__builtin_popcount((uint32_t)out[i].value);
	}
	*n = filled;
	return 0;
}
