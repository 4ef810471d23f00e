/* SPDX-License-Identifier: BSD-3-Clause */
/* ddio_sim.c -- builds the fake sysfs tree of a named platform (see ddio_sim.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/ddio_sim.h"

#define CFG TOOL_DDIO_SIM_CFG

/* Every device, each tagged with the platform it belongs to. */
static const struct {
	const char *platform;
	struct tool_ddio_sim_pci d;
} all[] = {
	{"skylake-sp", {"pci0000:00/0000:00:00.0", 0x8086, 0x2020, 0x060000, -1, 0, CFG}},
	{"skylake-sp", {"pci0000:00/0000:00:01.0", 0x8086, 0x2030, 0x060400, 4, TOOL_DDIO_SIM_SKX_REG, CFG}},
	{"skylake-sp", {"pci0000:00/0000:00:01.0/0000:01:00.0", 0x10de, 0x2330, 0x030200, 0, 0, CFG}},
	{"skylake-sp", {"pci0000:00/0000:00:02.0", 0x8086, 0x2031, 0x060400, 4, TOOL_DDIO_SIM_SKX2_REG, CFG}},
	{"skylake-sp", {"pci0000:00/0000:00:02.0/0000:02:00.0", 0x10b5, 0x8747, 0x060400, 5, 0, CFG}},
	{"skylake-sp", {"pci0000:00/0000:00:02.0/0000:02:00.0/0000:03:08.0", 0x10b5, 0x8747, 0x060400, 6, 0, CFG}},
	{"skylake-sp", {"pci0000:00/0000:00:02.0/0000:02:00.0/0000:03:08.0/0000:04:00.0", 0x10de, 0x20b0,
			0x030200, 0, 0, CFG}},
	{"skylake-sp", {"pci0000:00/0000:00:03.0", 0x8086, 0x2032, 0x060400, 4, 0, 256}},
	{"skylake-sp", {"pci0000:00/0000:00:1c.0", 0x8086, 0xa190, 0x060400, 4, 0, CFG}},
	{"skylake-sp", {"pci0000:00/0000:00:1f.0", 0x8086, 0xa1c1, 0x060100, -1, 0, CFG}},
	{"amd-epyc", {"pci0000:40/0000:40:01.1", 0x1022, 0x1483, 0x060400, 4, TOOL_DDIO_SIM_AMD_REG, CFG}},
	{"amd-epyc", {"pci0000:40/0000:40:01.1/0000:41:00.0", 0x10de, 0x2330, 0x030200, 0, 0, CFG}},
	{"icelake-sp", {"pci0000:80/0000:80:02.0", 0x8086, 0x347a, 0x060400, 4, TOOL_DDIO_SIM_ICX_REG, CFG}},
	{"icelake-sp", {"pci0000:80/0000:80:02.0/0000:81:00.0", 0x15b3, 0x1017, 0x020000, 0, 0, CFG}},
	{"qemu", {"pci0000:c0/0000:c0:01.0", 0x1b36, 0x000c, 0x060400, 4, 0, CFG}},
	{"qemu", {"pci0000:c0/0000:c0:01.0/0000:c1:00.0", 0x1b36, 0x0010, 0x010802, 0, 0, CFG}},
};
#define NALL (sizeof(all) / sizeof(all[0]))
static const char *const names[] = {"skylake-sp", "icelake-sp", "amd-epyc", "qemu", "mixed"};

const char *
tool_ddio_sim_platforms(void)
{
	return "skylake-sp, icelake-sp, amd-epyc, qemu, mixed";
}

static int
known(const char *platform)
{
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcmp(platform, names[i]))
			return 1;
	return 0;
}

static int
member(const char *platform, size_t i)
{
	return !strcmp(platform, "mixed") || !strcmp(platform, all[i].platform);
}

const struct tool_ddio_sim_pci *
tool_ddio_sim_devices(const char *platform, size_t *n)
{
	static struct tool_ddio_sim_pci out[NALL];

	*n = 0;
	if (!known(platform))
		return NULL;
	for (size_t i = 0; i < NALL; i++)
		if (member(platform, i))
			out[(*n)++] = all[i].d;
	return out;
}

static int
mkdirs(const char *path)
{
	char tmp[1024];

	snprintf(tmp, sizeof(tmp), "%s", path);
	for (char *p = tmp + 1; *p; p++)
		if (*p == '/') {
			*p = '\0';
			if (mkdir(tmp, 0755) && errno != EEXIST)
				return -1;
			*p = '/';
		}
	return mkdir(tmp, 0755) && errno != EEXIST ? -1 : 0;
}

static int
write_file(const char *path, const void *data, size_t len)
{
	FILE *f = fopen(path, "w");

	if (!f)
		return -1;
	if (fwrite(data, 1, len, f) != len) {
		fclose(f);
		return -1;
	}
	return fclose(f);
}

static int
write_num(const char *path, const char *fmt, unsigned v)
{
	char b[32];
	int n = snprintf(b, sizeof(b), fmt, v);

	return write_file(path, b, (size_t)n);
}

static const char *
bdf_of(const char *path)
{
	const char *s = strrchr(path, '/');
	return s ? s + 1 : path;
}

static void
config_bytes(const struct tool_ddio_sim_pci *d, unsigned char *b)
{
	for (int i = 0; i < d->cfg_size; i++)
		b[i] = (unsigned char)(i * 37 + 11);
	memset(b, 0, 0x40);
	b[0] = (unsigned char)d->vendor;
	b[1] = (unsigned char)(d->vendor >> 8);
	b[2] = (unsigned char)d->device;
	b[3] = (unsigned char)(d->device >> 8);
	b[8] = 1; /* revision */
	b[9] = (unsigned char)d->cls;
	b[10] = (unsigned char)(d->cls >> 8);
	b[11] = (unsigned char)(d->cls >> 16);
	b[0x0e] = (d->cls >> 8) == 0x0604 ? 1 : 0;
	if (d->pcie_type >= 0) {
		b[6] = 0x10; /* status: capability list */
		b[0x34] = 0x40;
		b[0x40] = 0x10; /* PCI Express */
		b[0x41] = 0x00; /* last capability */
		b[0x42] = (unsigned char)(2 | d->pcie_type << 4);
		b[0x43] = 0;
	}
	if (d->cfg_size >= 0x184)
		for (int i = 0; i < 4; i++)
			b[0x180 + i] = (unsigned char)(d->reg >> (8 * i));
}

int
tool_ddio_sim_build(const char *root, const char *platform)
{
	char sys[600], dev[600], p[1024], t[1024];
	unsigned char cfg[CFG];
	struct stat st;
	int intel = !strcmp(platform, "mixed") || !strcmp(platform, "skylake-sp") ||
		!strcmp(platform, "icelake-sp");

	if (!known(platform)) {
		errno = EINVAL;
		return -1;
	}
	if (mkdirs(root))
		return -1;
	snprintf(sys, sizeof(sys), "%s/sys", root);
	snprintf(dev, sizeof(dev), "%s/dev", root);
	if (stat(sys, &st) == 0) {
		errno = EEXIST;
		return -1;
	}
	snprintf(p, sizeof(p), "%s/bus/pci/devices", sys);
	if (mkdirs(p))
		return -1;
	for (size_t i = 0; i < NALL; i++) {
		const struct tool_ddio_sim_pci *d = &all[i].d;
		char dir[800];
		if (!member(platform, i))
			continue;
		snprintf(dir, sizeof(dir), "%s/devices/%s", sys, d->path);
		if (mkdirs(dir))
			return -1;
		config_bytes(d, cfg);
		snprintf(p, sizeof(p), "%s/config", dir);
		if (write_file(p, cfg, (size_t)d->cfg_size))
			return -1;
		snprintf(p, sizeof(p), "%s/vendor", dir);
		if (write_num(p, "0x%04x\n", d->vendor))
			return -1;
		snprintf(p, sizeof(p), "%s/device", dir);
		if (write_num(p, "0x%04x\n", d->device))
			return -1;
		snprintf(p, sizeof(p), "%s/class", dir);
		if (write_num(p, "0x%06x\n", d->cls))
			return -1;
		snprintf(p, sizeof(p), "%s/bus/pci/devices/%s", sys, bdf_of(d->path));
		snprintf(t, sizeof(t), "../../../devices/%s", d->path);
		if (symlink(t, p))
			return -1;
	}
	/* Device-dax: one on the memory bus (NVDIMM); one below a PCI device (Skylake-SP's A100 switch). */
	static const char *const dax[][2] = {
		{"dax0.0", "platform/ACPI0012:00/ndbus0/region0/dax0.0/dax0.0"},
		{"dax1.0", "pci0000:00/0000:00:02.0/0000:02:00.0/0000:03:08.0/0000:04:00.0/dax1.0/dax1.0"},
	};
	snprintf(p, sizeof(p), "%s/bus/dax/devices", sys);
	if (mkdirs(p))
		return -1;
	for (int i = 0; i < 2; i++) {
		if (i == 1 && strcmp(platform, "mixed") && strcmp(platform, "skylake-sp"))
			continue;
		snprintf(p, sizeof(p), "%s/devices/%s", sys, dax[i][1]);
		if (mkdirs(p))
			return -1;
		snprintf(p, sizeof(p), "%s/bus/dax/devices/%s", sys, dax[i][0]);
		snprintf(t, sizeof(t), "../../../devices/%s", dax[i][1]);
		if (symlink(t, p))
			return -1;
	}
	/* CPUs 0,1 in package 0 and 2,3 in package 1; on Intel only cpu0 has an msr device. */
	for (unsigned cpu = 0; cpu < 4; cpu++) {
		snprintf(p, sizeof(p), "%s/devices/system/cpu/cpu%u/topology", sys, cpu);
		if (mkdirs(p))
			return -1;
		snprintf(p, sizeof(p), "%s/devices/system/cpu/cpu%u/topology/physical_package_id", sys, cpu);
		if (write_num(p, "%u\n", cpu / 2))
			return -1;
	}
	if (mkdirs(dev))
		return -1;
	if (!intel)
		return 0;
	snprintf(p, sizeof(p), "%s/cpu/0", dev);
	if (mkdirs(p))
		return -1;
	unsigned char msr[0xC8B + 8] = {0};
	msr[0xC8B] = 0x00;
	msr[0xC8B + 1] = 0x06; /* 0x600: two ways */
	snprintf(p, sizeof(p), "%s/cpu/0/msr", dev);
	return write_file(p, msr, sizeof(msr));
}
