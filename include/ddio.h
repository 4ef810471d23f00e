/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ddio.h -- Intel DDIO (Data Direct I/O) control on a PCIe root port.
 *
 * With DDIO on, inbound PCIe writes (a GPU copying a checkpoint into
 * persistent memory) are allocated into the last-level cache instead of
 * going to memory; they reach the persistence domain only when evicted or
 * flushed.  LightCheck measured GPU -> PM writes at 3.5 GB/s with DDIO on
 * and 11.5 GB/s with it off.  DDIO is switched per root port on Intel Xeon
 * Scalable processors by the IIO root port register perfctrlsts_0
 * (configuration space offset 0x180):
 *
 *   bit 7  Use_Allocating_Flow_Wr  1: allocating (DDIO) writes
 *   bit 3  NoSnoopOpWrEn           1: no-snoop optimised writes
 *
 * Disabling clears bit 7 and sets bit 3; enabling does the reverse.  No
 * other bit is ever changed.  Register sources, the root ports this library
 * recognises and what was tested (fake sysfs trees only) are in
 * docs/ddio.md.
 *
 * The library finds the root port a device hangs off by walking its sysfs
 * parents, reads and writes configuration space through pciutils' libpci
 * (method linux-sysfs, so a fake sysfs tree can stand in for /sys in
 * tests), keeps the prior register values in a state file so that a
 * change can be undone, and reads the global IIO LLC ways MSR (0xC8B).
 *
 * Errors: every function that can fail returns 0 or a negative code, a
 * negated errno value or one of the DDIO_E_* codes below, and leaves a
 * description of the failure in a thread-local buffer read by
 * ddio_errormsg().  The library never prints and never exits.
 *
 * Thread safety: a context (and the ports found through it) may be used
 * by one thread at a time; libpci's access object is not thread safe.
 */
#ifndef DDIO_H
#define DDIO_H 1

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes beyond errno (all negative). */
#define DDIO_E_NO_ROOT_PORT  (-100201) /* the device has no PCIe root port above it */
#define DDIO_E_UNSUPPORTED   (-100202) /* root port not recognised / layout unverified; needs DDIO_FORCE */
#define DDIO_E_VERIFY        (-100203) /* the register read back differs from what was written */
#define DDIO_E_CHANGED       (-100204) /* the register changed between planning and writing */
#define DDIO_E_STATE         (-100205) /* state file unreadable, malformed, or for another device */
#define DDIO_E_PCI           (-100206) /* libpci failed (its message is in ddio_errormsg) */

/* The register and its bits (see the top of this file). */
#define DDIO_PERFCTRLSTS_0          0x180
#define DDIO_USE_ALLOCATING_FLOW_WR (1u << 7)
#define DDIO_NOSNOOPOPWREN          (1u << 3)
#define DDIO_BITS (DDIO_USE_ALLOCATING_FLOW_WR | DDIO_NOSNOOPOPWREN)
/* The global IIO LLC ways MSR: which LLC ways inbound writes may allocate into. */
#define DDIO_MSR_IIO_LLC_WAYS       0xC8B

/* Flags of ddio_port_plan(), ddio_port_plan_restore() and ddio_port_apply(). */
#define DDIO_FORCE (1u << 0) /* act on unrecognised or unverified root ports */

/*
 * ddio_errormsg -- describes the last failure of a ddio_ call made by this
 * thread.  The string is owned by the library and valid until the next
 * failing call on the same thread.
 */
const char *ddio_errormsg(void);

/* --------------------------------------------------------------- context */

struct ddio_ctx;

/*
 * ddio_ctx_new -- opens libpci on the sysfs tree under `sysfs_root` (NULL:
 * "/sys"; libpci reads <sysfs_root>/bus/pci) and remembers `dev_root`
 * (NULL: "/dev") for the MSR devices <dev_root>/cpu/N/msr.  Both may name a
 * fake tree built by a test.  *out owns the libpci access object; release
 * it with ddio_ctx_delete().
 * Errors: -ENOENT (no <sysfs_root>/bus/pci/devices), -ENOMEM, DDIO_E_PCI.
 */
int ddio_ctx_new(const char *sysfs_root, const char *dev_root, struct ddio_ctx **out);

/* ddio_ctx_delete -- frees *ctx and sets it to NULL (NULL: no-op).  Ports found through it must be deleted first. */
void ddio_ctx_delete(struct ddio_ctx **ctx);

/* ------------------------------------------------------------ root ports */

struct ddio_port;

/* How far the library trusts its knowledge of a root port. */
enum ddio_support {
	DDIO_SUPPORT_VERIFIED = 0,   /* Intel Xeon IIO root port; register layout from a datasheet */
	DDIO_SUPPORT_UNVERIFIED = 1, /* Intel Xeon IIO root port; layout at 0x180 not verified */
	DDIO_SUPPORT_UNKNOWN = 2,    /* any other root port (other vendors, unknown IDs) */
};

/* DDIO as the register bits say. */
enum ddio_state {
	DDIO_STATE_UNKNOWN = -1, /* unreadable, or not an Intel IIO root port */
	DDIO_STATE_OFF = 0,      /* bit 7 clear, bit 3 set */
	DDIO_STATE_ON = 1,       /* bit 7 set */
	DDIO_STATE_PARTIAL = 2,  /* bit 7 clear, bit 3 clear: allocating flows off, no-snoop writes not enabled */
};

/*
 * ddio_port_find -- finds the PCIe root port above the PCI device `bdf`
 * ("DDDD:BB:DD.F" or "BB:DD.F"): resolves <sysfs>/bus/pci/devices/<bdf>
 * and walks up its sysfs parents to the PCI device directly below a host
 * bridge (pciDDDD:BB), which must be a PCI-to-PCI bridge.  A root port
 * given itself is its own root port.  The device's identity and the root
 * port's identity are read at once; the register is not read here.
 * *out belongs to the caller (ddio_port_delete) and refers to ctx.
 * Errors: -EINVAL (malformed BDF), -ENOENT (no such device),
 * DDIO_E_NO_ROOT_PORT (the device sits on a root bus, or not below a host
 * bridge), DDIO_E_PCI, -ENOMEM.
 */
int ddio_port_find(struct ddio_ctx *ctx, const char *bdf, struct ddio_port **out);

/*
 * ddio_port_find_dax -- like ddio_port_find for the device-dax device
 * `dax` ("/dev/daxX.Y" or "daxX.Y"): resolves <sysfs>/bus/dax/devices/daxX.Y
 * (or <sysfs>/class/dax/daxX.Y) and uses the nearest PCI device among its
 * sysfs parents.  Persistent memory on the memory bus (NVDIMM regions,
 * also CXL regions, which sysfs places under an ACPI platform device) has
 * none: DDIO then applies to the root port of the device writing into the
 * region (ddio_port_find / ddio_port_find_cuda), and this says so.
 * Errors: -EINVAL, -ENOENT, DDIO_E_NO_ROOT_PORT, those of ddio_port_find.
 */
int ddio_port_find_dax(struct ddio_ctx *ctx, const char *dax, struct ddio_port **out);

/*
 * ddio_cuda_pci_bdf -- writes the PCI address ("DDDD:BB:DD.F", lower case)
 * of CUDA device `cuda_device` into buf (at least 16 bytes), from
 * cudaDeviceGetPCIBusId.  Errors: -ENOTSUP (built without CUDA), -ENODEV
 * (no driver or no such device; the message has CUDA's reason), -EINVAL.
 */
int ddio_cuda_pci_bdf(int cuda_device, char *buf, size_t len);

/* ddio_port_find_cuda -- ddio_port_find for the GPU used by CUDA device `cuda_device`. */
int ddio_port_find_cuda(struct ddio_ctx *ctx, int cuda_device, struct ddio_port **out);

/*
 * ddio_port_foreach -- calls cb for every PCIe root port in the tree (every
 * bridge directly below a host bridge), in BDF order; stops and returns
 * cb's value when it is non-zero.  The port passed to cb is valid only
 * during the call.  Errors: -ENOENT, -ENOMEM, DDIO_E_PCI.
 */
int ddio_port_foreach(struct ddio_ctx *ctx,
		int (*cb)(struct ddio_port *port, void *arg), void *arg);

/* ddio_port_delete -- frees *p and sets it to NULL (NULL: no-op). */
void ddio_port_delete(struct ddio_port **p);

/* The root port's address "DDDD:BB:DD.F" (owned by p). */
const char *ddio_port_bdf(const struct ddio_port *p);
/* The device the port was found from (the port itself for foreach and root ports). */
const char *ddio_port_device_bdf(const struct ddio_port *p);
uint16_t ddio_port_vendor(const struct ddio_port *p);
uint16_t ddio_port_device(const struct ddio_port *p);
enum ddio_support ddio_port_support(const struct ddio_port *p);
/* "Skylake-SP/Cascade Lake", "Ice Lake-SP", "Sapphire Rapids", or NULL when unknown. */
const char *ddio_port_generation(const struct ddio_port *p);
/* The name from libpci's ID database, or NULL when it has none. */
const char *ddio_port_name(const struct ddio_port *p);
/* "verified", "unverified", "unknown". */
const char *ddio_support_name(enum ddio_support s);
/* "on", "off", "partial", "unknown". */
const char *ddio_state_name(enum ddio_state s);

/*
 * ddio_port_read -- reads perfctrlsts_0 (read-only) into *value and, if
 * state is not NULL, interprets it: for a port of DDIO_SUPPORT_UNKNOWN
 * *state is DDIO_STATE_UNKNOWN (the bits mean nothing there).
 * Errors: -ENXIO (the configuration space is shorter than 0x184 bytes: no
 * extended configuration access), -EACCES (the read came back short:
 * reading past byte 64 of configuration space needs CAP_SYS_ADMIN),
 * DDIO_E_PCI.
 */
int ddio_port_read(struct ddio_port *p, uint32_t *value, enum ddio_state *state);

/* ddio_state_of -- the state the register value v means (bits only). */
enum ddio_state ddio_state_of(uint32_t v);

/* One planned write of perfctrlsts_0. */
struct ddio_change {
	char port[16];     /* "DDDD:BB:DD.F" */
	unsigned offset;   /* DDIO_PERFCTRLSTS_0 */
	uint32_t before;   /* the value read while planning */
	uint32_t after;    /* the value to write; equal to before: nothing to do */
};

/*
 * ddio_port_plan -- reads the register and computes the write that turns
 * DDIO on (enable != 0: set bit 7, clear bit 3) or off (clear bit 7, set
 * bit 3), changing no other bit.  Nothing is written: a dry run prints
 * *out.  Without DDIO_FORCE, ports not DDIO_SUPPORT_VERIFIED are refused.
 * Errors: DDIO_E_UNSUPPORTED (the message says why: vendor, unknown
 * device ID, or unverified layout), those of ddio_port_read.
 */
int ddio_port_plan(struct ddio_port *p, int enable, unsigned flags, struct ddio_change *out);

/*
 * ddio_port_check_write -- 0 if this process may write the port's
 * configuration space: the config file opens for writing and, on the real
 * /sys, the process has CAP_SYS_ADMIN (the kernel's condition).  Nothing
 * is written.  Errors: -EPERM, -EACCES, other -errno from open.
 */
int ddio_port_check_write(const struct ddio_port *p);

/*
 * ddio_port_apply -- performs a planned change: checks the privilege
 * (ddio_port_check_write), re-reads the register (it must still equal
 * c->before), writes c->after as one 32-bit configuration write and reads
 * it back.  If the read-back differs, the old value is written back and
 * DDIO_E_VERIFY is returned.  A change with before == after writes nothing.
 * Record the prior value first (ddio_state_record) so it can be restored.
 * Errors: -EPERM/-EACCES, DDIO_E_CHANGED, DDIO_E_VERIFY, DDIO_E_PCI,
 * DDIO_E_UNSUPPORTED (as for ddio_port_plan), -EINVAL (c is for another port).
 */
int ddio_port_apply(struct ddio_port *p, const struct ddio_change *c, unsigned flags);

/* ----------------------------------------------------------- state file */

/* One recorded prior value. */
struct ddio_saved {
	char port[16];     /* root port "DDDD:BB:DD.F" */
	uint16_t vendor;   /* its identity when recorded */
	uint16_t device;
	unsigned offset;   /* DDIO_PERFCTRLSTS_0 */
	uint32_t value;    /* the register before the first change */
	uint32_t mask;     /* the bits changes may touch (DDIO_BITS) */
	int64_t time;      /* seconds since the epoch of the recording */
};

/*
 * ddio_state_record -- records c->before for c's port in the JSON state
 * file at `path` (created with its directory, 0644), unless that port
 * already has a record: the first prior value is the one to return to.
 * The file is replaced atomically (written to a temporary file, fsynced,
 * renamed, directory fsynced) under an exclusive lock on <path>.lock, so
 * the record is durable before the caller writes the register.
 * Errors: -errno from the file system, DDIO_E_STATE (an existing file is
 * malformed), -ENOMEM.
 */
int ddio_state_record(const char *path, const struct ddio_port *p, const struct ddio_change *c);

/*
 * ddio_state_load -- reads every record of the state file.  *out (free()
 * it) receives *n records; a missing file gives -ENOENT.
 * Errors: -ENOENT, DDIO_E_STATE, -errno, -ENOMEM.
 */
int ddio_state_load(const char *path, struct ddio_saved **out, size_t *n);

/*
 * ddio_state_forget -- removes the record of root port `port`; the file is
 * removed when no record is left.  Errors: -ENOENT (no such record or
 * file), DDIO_E_STATE, -errno.
 */
int ddio_state_forget(const char *path, const char *port);

/*
 * ddio_port_plan_restore -- plans the write that puts the recorded bits
 * (s->mask) of s->value back, keeping the register's other bits as they
 * are now.  The port must be s->port and, unless DDIO_FORCE, have the
 * recorded vendor and device IDs.  Nothing is written.
 * Errors: DDIO_E_STATE (another port, or the IDs differ), those of
 * ddio_port_read.
 */
int ddio_port_plan_restore(struct ddio_port *p, const struct ddio_saved *s,
		unsigned flags, struct ddio_change *out);

/* ------------------------------------------------------ IIO LLC ways MSR */

/* The IIO LLC ways MSR of one package, as read from one of its CPUs. */
struct ddio_llc_ways {
	int package;    /* physical_package_id */
	int cpu;        /* the CPU whose msr device was read */
	int err;        /* 0, or why the read failed (-ENOENT: no msr driver, -EACCES, -EIO: no such MSR) */
	uint64_t value; /* the MSR, when err == 0 */
	unsigned ways;  /* bits set in value's low 32 bits: the LLC ways inbound writes may allocate into */
};

/*
 * ddio_llc_ways_read -- reads MSR 0xC8B (read-only) through
 * <dev_root>/cpu/N/msr for the lowest-numbered CPU of each package listed
 * under <sysfs_root>/devices/system/cpu, up to `max` packages, in package
 * order.  *n receives the number of entries filled; a package whose MSR
 * cannot be read has its err set, which is not a failure of the call.
 * Errors: -ENOENT (no CPUs in sysfs), -EINVAL.
 */
int ddio_llc_ways_read(struct ddio_ctx *ctx, struct ddio_llc_ways *out, size_t max, size_t *n);

#ifdef __cplusplus
}
#endif
#endif /* DDIO_H */
