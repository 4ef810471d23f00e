/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ddio_sim.h -- a fake sysfs (and /dev) tree of a named platform, for trying
 * ddioctl and evaluation scripts without the hardware (`ddioctl --simulate
 * DIR --platform NAME`) and for the DDIO tests (tests/ddio_fake.h).
 *
 * Platforms (tool_ddio_sim_platforms lists them):
 *   skylake-sp  Intel Xeon Scalable (Skylake-SP) root ports 2030/2031/2032, a PCH
 *               port, an H100 and an A100 behind a switch with a device-dax below it,
 *               a device-dax NVDIMM; 4 CPUs in 2 packages, MSR 0xC8B readable on cpu0
 *   icelake-sp  an Intel Ice Lake-SP root port (347a) with a ConnectX-5
 *   amd-epyc    an AMD root port (1022:1483) with an H100; no msr device
 *   qemu        a QEMU root port (1b36:000c) with an NVMe drive
 *   mixed       all of these in one tree (what the tests use)
 * Each has the NVDIMM device-dax dax0.0.  Config files are 4096 bytes (256 for
 * 00:03.0): IDs at 0/2, class at 9..11, header type at 0x0e, a PCI Express
 * capability at 0x40 for PCIe devices, perfctrlsts_0 at 0x180, a byte
 * pattern everywhere else so that a stray write anywhere shows.
 */
#ifndef PMCK_TOOL_DDIO_SIM_H
#define PMCK_TOOL_DDIO_SIM_H 1

#include <stddef.h>
#include <stdint.h>

#define TOOL_DDIO_SIM_CFG 4096

struct tool_ddio_sim_pci {
	const char *path;   /* below sys/devices */
	uint16_t vendor, device;
	uint32_t cls;       /* 24-bit class code */
	int pcie_type;      /* -1: no PCI Express capability */
	uint32_t reg;       /* perfctrlsts_0 */
	int cfg_size;
};

/* The initial perfctrlsts_0 values: DDIO on (bit 7 set, bit 3 clear), and partial (both clear). */
#define TOOL_DDIO_SIM_SKX_REG 0x000001d1u
#define TOOL_DDIO_SIM_SKX2_REG 0x00000151u
#define TOOL_DDIO_SIM_AMD_REG 0x12345670u
#define TOOL_DDIO_SIM_ICX_REG 0x000001d1u

/* The names of the platforms, "skylake-sp, icelake-sp, ..." (for messages). */
const char *tool_ddio_sim_platforms(void);

/* The PCI devices of a platform; NULL (and *n 0) for an unknown name. */
const struct tool_ddio_sim_pci *tool_ddio_sim_devices(const char *platform, size_t *n);

/*
 * Builds ROOT/sys and ROOT/dev for the platform (ROOT and its parents are
 * made if missing; ROOT must not hold a sys/ already).  0, or -1 with errno set (EINVAL: unknown platform; EEXIST:
 * ROOT/sys exists).
 */
int tool_ddio_sim_build(const char *root, const char *platform);

#endif
