/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ddio_fake.h -- a fake sysfs (and /dev) tree for the DDIO tests, built in
 * a temporary directory by the builder ddioctl --simulate uses
 * (tools/lib/ddio_sim.c, platform "mixed"), plus helpers to run ddioctl on it.
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

#include "lib/ddio_sim.h"

#define FAKE_CFG TOOL_DDIO_SIM_CFG
#define FAKE_NDEV 16 /* devices of the "mixed" platform (fake_build checks) */

static char fake_root[256], fake_sysfs[300], fake_dev[300];
static const char *fake_prefix = ""; /* put before the ddioctl command (e.g. setpriv ...) */
static const struct tool_ddio_sim_pci *fake_devices;

/* The initial perfctrlsts_0 values: DDIO on (bit 7 set, bit 3 clear), and partial (both clear). */
#define FAKE_SKX_REG TOOL_DDIO_SIM_SKX_REG
#define FAKE_SKX2_REG TOOL_DDIO_SIM_SKX2_REG
#define FAKE_AMD_REG TOOL_DDIO_SIM_AMD_REG
#define FAKE_ICX_REG TOOL_DDIO_SIM_ICX_REG

static inline const char *
fake_bdf_of(const char *path)
{
	const char *s = strrchr(path, '/');
	return s ? s + 1 : path;
}

/* fake_build -- creates the tree; 0 or -1 (with errno). */
static inline int
fake_build(void)
{
	size_t n;

	snprintf(fake_root, sizeof(fake_root), "/tmp/pmck-ddio-XXXXXX");
	if (!mkdtemp(fake_root) || chmod(fake_root, 0755))
		return -1;
	snprintf(fake_sysfs, sizeof(fake_sysfs), "%s/sys", fake_root);
	snprintf(fake_dev, sizeof(fake_dev), "%s/dev", fake_root);
	fake_devices = tool_ddio_sim_devices("mixed", &n);
	if (!fake_devices || n != FAKE_NDEV) {
		errno = EINVAL;
		return -1;
	}
	return tool_ddio_sim_build(fake_root, "mixed");
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
