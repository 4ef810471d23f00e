/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ddio_fake.h -- a fake sysfs (and /dev) tree for the DDIO tests, built in
 * a temporary directory, plus helpers to run ddioctl on it.
 *
 *   sys/devices/pci0000:00/0000:00:00.0                 Intel host bridge (integrated)
 *                         /0000:00:01.0                 Intel 2030 root port (Skylake-SP)
 *                            /0000:01:00.0              NVIDIA H100
 *                         /0000:00:02.0                 Intel 2031 root port (Skylake-SP)
 *                            /0000:02:00.0              switch upstream port
 *                               /0000:03:08.0           switch downstream port
 *                                  /0000:04:00.0        NVIDIA A100 (+ dax1.0 below it)
 *                         /0000:00:03.0                 Intel 2032 root port, 256-byte config
 *                         /0000:00:1c.0                 Intel a190: a PCH root port, not IIO
 *                         /0000:00:1f.0                 ISA bridge (integrated)
 *              /pci0000:40/0000:40:01.1/0000:41:00.0    AMD root port, NVIDIA H100
 *              /pci0000:80/0000:80:02.0/0000:81:00.0    Intel 347a (Ice Lake-SP), ConnectX-5
 *              /pci0000:c0/0000:c0:01.0/0000:c1:00.0    QEMU root port (unknown), NVMe
 *              /platform/ACPI0012:00/ndbus0/region0/dax0.0/dax0.0   NVDIMM device-dax
 *   sys/bus/pci/devices/<BDF> -> ../../../devices/...
 *   sys/bus/dax/devices/dax{0,1}.0 -> ...
 *   sys/devices/system/cpu/cpu{0,1,2,3}/topology/physical_package_id  (0, 0, 1, 1)
 *   dev/cpu/0/msr   (MSR 0xC8B = 0x600; package 1's msr device is absent)
 *
 * Every config file is 4096 bytes (256 for 00:03.0): IDs at 0/2, class at
 * 9..11, header type at 0x0e, a PCI Express capability at 0x40 for PCIe
 * devices, perfctrlsts_0 at 0x180, and a byte pattern everywhere else so
 * that a stray write anywhere shows.
 */
#ifndef PMCK_DDIO_FAKE_H
#define PMCK_DDIO_FAKE_H 1

#include <errno.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define FAKE_CFG 4096

static char fake_root[256], fake_sysfs[300], fake_dev[300];
static const char *fake_prefix = ""; /* put before the ddioctl command (e.g. setpriv ...) */

struct fake_pci {
	const char *path;   /* below sys/devices */
	uint16_t vendor, device;
	uint32_t cls;       /* 24-bit class code */
	int pcie_type;      /* -1: no PCI Express capability */
	uint32_t reg;       /* perfctrlsts_0 */
	int cfg_size;
};

/* The initial perfctrlsts_0 values: DDIO on (bit 7 set, bit 3 clear), and partial (both clear). */
#define FAKE_SKX_REG 0x000001d1u
#define FAKE_SKX2_REG 0x00000151u
#define FAKE_AMD_REG 0x12345670u
#define FAKE_ICX_REG 0x000001d1u

static const struct fake_pci fake_devices[] = {
	{"pci0000:00/0000:00:00.0", 0x8086, 0x2020, 0x060000, -1, 0, FAKE_CFG},
	{"pci0000:00/0000:00:01.0", 0x8086, 0x2030, 0x060400, 4, FAKE_SKX_REG, FAKE_CFG},
	{"pci0000:00/0000:00:01.0/0000:01:00.0", 0x10de, 0x2330, 0x030200, 0, 0, FAKE_CFG},
	{"pci0000:00/0000:00:02.0", 0x8086, 0x2031, 0x060400, 4, FAKE_SKX2_REG, FAKE_CFG},
	{"pci0000:00/0000:00:02.0/0000:02:00.0", 0x10b5, 0x8747, 0x060400, 5, 0, FAKE_CFG},
	{"pci0000:00/0000:00:02.0/0000:02:00.0/0000:03:08.0", 0x10b5, 0x8747, 0x060400, 6, 0, FAKE_CFG},
	{"pci0000:00/0000:00:02.0/0000:02:00.0/0000:03:08.0/0000:04:00.0", 0x10de, 0x20b0, 0x030200, 0, 0, FAKE_CFG},
	{"pci0000:00/0000:00:03.0", 0x8086, 0x2032, 0x060400, 4, 0, 256},
	{"pci0000:00/0000:00:1c.0", 0x8086, 0xa190, 0x060400, 4, 0, FAKE_CFG},
	{"pci0000:00/0000:00:1f.0", 0x8086, 0xa1c1, 0x060100, -1, 0, FAKE_CFG},
	{"pci0000:40/0000:40:01.1", 0x1022, 0x1483, 0x060400, 4, FAKE_AMD_REG, FAKE_CFG},
	{"pci0000:40/0000:40:01.1/0000:41:00.0", 0x10de, 0x2330, 0x030200, 0, 0, FAKE_CFG},
	{"pci0000:80/0000:80:02.0", 0x8086, 0x347a, 0x060400, 4, FAKE_ICX_REG, FAKE_CFG},
	{"pci0000:80/0000:80:02.0/0000:81:00.0", 0x15b3, 0x1017, 0x020000, 0, 0, FAKE_CFG},
	{"pci0000:c0/0000:c0:01.0", 0x1b36, 0x000c, 0x060400, 4, 0, FAKE_CFG},
	{"pci0000:c0/0000:c0:01.0/0000:c1:00.0", 0x1b36, 0x0010, 0x010802, 0, 0, FAKE_CFG},
};
#define FAKE_NDEV (sizeof(fake_devices) / sizeof(fake_devices[0]))

static inline int
fake_mkdirs(const char *path)
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

static inline int
fake_write(const char *path, const void *data, size_t len)
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

static inline int
fake_printf(const char *path, const char *fmt, unsigned v)
{
	char b[32];
	int n = snprintf(b, sizeof(b), fmt, v);

	return fake_write(path, b, (size_t)n);
}

static inline const char *
fake_bdf_of(const char *path)
{
	const char *s = strrchr(path, '/');
	return s ? s + 1 : path;
}

static inline void
fake_config_bytes(const struct fake_pci *d, unsigned char *b)
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

static inline int
fake_link(const char *link, const char *target)
{
	return symlink(target, link);
}

/* fake_build -- creates the tree; 0 or -1 (with errno). */
static inline int
fake_build(void)
{
	char p[1024], t[1024];
	unsigned char cfg[FAKE_CFG];

	snprintf(fake_root, sizeof(fake_root), "/tmp/pmck-ddio-XXXXXX");
	if (!mkdtemp(fake_root) || chmod(fake_root, 0755))
		return -1;
	snprintf(fake_sysfs, sizeof(fake_sysfs), "%s/sys", fake_root);
	snprintf(fake_dev, sizeof(fake_dev), "%s/dev", fake_root);
	snprintf(p, sizeof(p), "%s/bus/pci/devices", fake_sysfs);
	if (fake_mkdirs(p))
		return -1;
	for (size_t i = 0; i < FAKE_NDEV; i++) {
		const struct fake_pci *d = &fake_devices[i];
		char dir[700];
		snprintf(dir, sizeof(dir), "%s/devices/%s", fake_sysfs, d->path);
		if (fake_mkdirs(dir))
			return -1;
		fake_config_bytes(d, cfg);
		snprintf(p, sizeof(p), "%s/config", dir);
		if (fake_write(p, cfg, (size_t)d->cfg_size))
			return -1;
		snprintf(p, sizeof(p), "%s/vendor", dir);
		if (fake_printf(p, "0x%04x\n", d->vendor))
			return -1;
		snprintf(p, sizeof(p), "%s/device", dir);
		if (fake_printf(p, "0x%04x\n", d->device))
			return -1;
		snprintf(p, sizeof(p), "%s/class", dir);
		if (fake_printf(p, "0x%06x\n", d->cls))
			return -1;
		snprintf(p, sizeof(p), "%s/bus/pci/devices/%s", fake_sysfs, fake_bdf_of(d->path));
		snprintf(t, sizeof(t), "../../../devices/%s", d->path);
		if (fake_link(p, t))
			return -1;
	}
	/* Device-dax: one on the memory bus (NVDIMM), one below a PCI device. */
	static const char *const dax[][2] = {
		{"dax0.0", "platform/ACPI0012:00/ndbus0/region0/dax0.0/dax0.0"},
		{"dax1.0", "pci0000:00/0000:00:02.0/0000:02:00.0/0000:03:08.0/0000:04:00.0/dax1.0/dax1.0"},
	};
	snprintf(p, sizeof(p), "%s/bus/dax/devices", fake_sysfs);
	if (fake_mkdirs(p))
		return -1;
	for (int i = 0; i < 2; i++) {
		snprintf(p, sizeof(p), "%s/devices/%s", fake_sysfs, dax[i][1]);
		if (fake_mkdirs(p))
			return -1;
		snprintf(p, sizeof(p), "%s/bus/dax/devices/%s", fake_sysfs, dax[i][0]);
		snprintf(t, sizeof(t), "../../../devices/%s", dax[i][1]);
		if (fake_link(p, t))
			return -1;
	}
	/* CPUs 0,1 in package 0 and 2,3 in package 1; only cpu0 has an msr device. */
	for (unsigned cpu = 0; cpu < 4; cpu++) {
		snprintf(p, sizeof(p), "%s/devices/system/cpu/cpu%u/topology", fake_sysfs, cpu);
		if (fake_mkdirs(p))
			return -1;
		snprintf(p, sizeof(p), "%s/devices/system/cpu/cpu%u/topology/physical_package_id",
				fake_sysfs, cpu);
		if (fake_printf(p, "%u\n", cpu / 2))
			return -1;
	}
	snprintf(p, sizeof(p), "%s/cpu/0", fake_dev);
	if (fake_mkdirs(p))
		return -1;
	unsigned char msr[0xC8B + 8] = {0};
	msr[0xC8B] = 0x00;
	msr[0xC8B + 1] = 0x06; /* 0x600: two ways */
	snprintf(p, sizeof(p), "%s/cpu/0/msr", fake_dev);
	return fake_write(p, msr, sizeof(msr));
}

static inline int
fake_rm(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

/* fake_remove -- deletes the tree (NULL-safe). */
static inline void
fake_remove(void)
{
	if (fake_root[0])
		nftw(fake_root, fake_rm, 16, FTW_DEPTH | FTW_PHYS);
	fake_root[0] = '\0';
}

/* fake_config -- the config file of device bdf ("0000:01:00.0"). */
static inline const char *
fake_config(const char *bdf)
{
	static char p[4][700];
	static int k;

	k = (k + 1) % 4;
	snprintf(p[k], sizeof(p[k]), "%s/bus/pci/devices/%s/config", fake_sysfs, bdf);
	return p[k];
}

/* fake_read -- reads a whole file (up to len bytes); its size or -1. */
static inline long
fake_read(const char *path, unsigned char *buf, size_t len)
{
	FILE *f = fopen(path, "r");
	size_t n;

	if (!f)
		return -1;
	n = fread(buf, 1, len, f);
	fclose(f);
	return (long)n;
}

/* fake_reg -- perfctrlsts_0 of bdf as the file holds it (0xffffffff if unreadable). */
static inline uint32_t
fake_reg(const char *bdf)
{
	unsigned char b[FAKE_CFG];

	if (fake_read(fake_config(bdf), b, sizeof(b)) < 0x184)
		return 0xffffffffu;
	return (uint32_t)b[0x180] | (uint32_t)b[0x181] << 8 | (uint32_t)b[0x182] << 16 |
		(uint32_t)b[0x183] << 24;
}

/* A snapshot of every config file, to prove what a command changed. */
struct fake_snap {
	unsigned char cfg[FAKE_NDEV][FAKE_CFG];
	long len[FAKE_NDEV];
};

static inline void
fake_snapshot(struct fake_snap *s)
{
	for (size_t i = 0; i < FAKE_NDEV; i++)
		s->len[i] = fake_read(fake_config(fake_bdf_of(fake_devices[i].path)), s->cfg[i], FAKE_CFG);
}

/*
 * fake_diff -- compares every config file with snapshot s.  Returns the
 * number of differing bytes outside device `bdf`'s bytes 0x180..0x183 (NULL:
 * anywhere), and in *mask the XOR of that dword (0 if bdf is NULL).
 */
static inline long
fake_diff(const struct fake_snap *s, const char *bdf, uint32_t *mask)
{
	struct fake_snap *now = malloc(sizeof(*now));
	long diff = 0;

	if (mask)
		*mask = 0;
	if (!now)
		return -1;
	fake_snapshot(now);
	for (size_t i = 0; i < FAKE_NDEV; i++) {
		int is_dev = bdf && strcmp(fake_bdf_of(fake_devices[i].path), bdf) == 0;
		if (now->len[i] != s->len[i]) {
			diff++;
			continue;
		}
		for (long k = 0; k < now->len[i]; k++) {
			unsigned char x = now->cfg[i][k] ^ s->cfg[i][k];
			if (!x)
				continue;
			if (is_dev && k >= 0x180 && k < 0x184 && mask)
				*mask |= (uint32_t)x << (8 * (k - 0x180));
			else
				diff++;
		}
	}
	free(now);
	return diff;
}

/* The ddioctl binary of this build. */
static inline const char *
fake_ddioctl(void)
{
	static char p[512];
	const char *b = getenv("BUILD");

	snprintf(p, sizeof(p), "%s/ddioctl", b && *b ? b : "build");
	return p;
}

/*
 * fake_run -- runs `ddioctl ARGS --sysfs <fake> --dev <fake>` through the
 * shell, stdout into out; the exit status.  With merge, stderr too, and the
 * text joined into one line (for TAP descriptions).
 */
static inline int __attribute__((format(printf, 4, 5)))
fake_run(char *out, size_t len, int merge, const char *fmt, ...)
{
	char args[2048], cmd[4096];
	va_list ap;
	FILE *p;
	size_t n = 0;
	int st;

	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof(cmd), "%s%s %s --sysfs %s --dev %s%s", fake_prefix, fake_ddioctl(), args,
			fake_sysfs, fake_dev, merge ? " 2>&1" : " 2>/dev/null");
	p = popen(cmd, "r");
	if (!p)
		return -1;
	while (n + 1 < len) {
		size_t r = fread(out + n, 1, len - 1 - n, p);
		if (!r)
			break;
		n += r;
	}
	out[n] = '\0';
	/* Merged text goes into TAP descriptions: one line. */
	while (merge && n > 0 && out[n - 1] == '\n')
		out[--n] = '\0';
	for (size_t i = 0; merge && i < n; i++)
		if (out[i] == '\n')
			out[i] = ' ';
	st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

#endif
