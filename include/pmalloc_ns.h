/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * pmalloc_ns.h -- provisioning persistent memory for pmckpt: list NVDIMM buses,
 * regions, namespaces and dax devices; create, reconfigure and destroy
 * devdax namespaces; converge a node to a declared layout; find the
 * /dev/daxX.Y a checkpoint store should open.  The library libpmalloc_ns
 * (pma_ns_* in pmalloc/ns_*.c, pma_prov_* in pmalloc/provision*.c), built on
 * libpmalloc: link -lpmalloc_ns -lpmalloc (pkg-config pmalloc_ns).  Formerly
 * pmctl.h, and part of libpmalloc.
 *
 * Everything that touches the machine goes through libndctl and libdaxctl
 * (the libraries behind the ndctl and daxctl commands), never through the
 * ndctl binary.
 *
 * The pieces, in the order an integrator meets them:
 *
 *   state   a snapshot of the node: pma_ns_state_read() takes it from the
 *           kernel, pma_ns_state_from_json() from a listing written
 *           earlier (or by hand: this is how planning is tested without
 *           hardware).  pma_ns_state_to_json() writes the listing.
 *   spec    the desired state: which namespaces, on which regions, how
 *           large, how aligned, under which names.  Built by calls
 *           (pma_prov_spec_add) or parsed from a small config file.
 *   plan    pma_prov_plan_new(state, spec) is a pure function: it
 *           compares the two and lists the actions that converge the node
 *           (keep, init-labels, create, reconfigure).  An empty list of
 *           changes means the node already matches.  It never plans the
 *           destruction of anything it was not told to change.
 *   apply   pma_prov_plan_apply() carries a plan out through libndctl.
 *
 * Errors: every function that can fail returns 0 (or a documented
 * non-negative value) or a negative code: a negated errno value or one of
 * the PMA_E_* codes, and leaves a description in the thread-local buffer
 * read by pma_errormsg().  When libndctl or libdaxctl explain a failure,
 * their message is part of it.  The library never prints and never exits.
 *
 * Codes used throughout:
 *   -ENODEV          no NVDIMM region on this machine (or none matching)
 *   -EINVAL          bad argument, size, alignment, name or config text
 *   -ENOENT          no such region / namespace / device
 *   -EBUSY           the namespace is open or mapped by a process, or mounted
 *   -EACCES, -EPERM  not allowed to change the configuration (run as root)
 *   -ENOSPC          the region has not enough contiguous free capacity
 *   PMA_E_CONFLICT   the description contradicts what exists; nothing changed
 *   PMA_E_REFUSED    the change would destroy data (a pmckpt pool, a file
 *                    system, another mode's namespace); PMA_NS_FORCE overrides
 *
 * Thread safety: objects are not shared between threads without a lock;
 * different objects may be used from different threads.  Changing the
 * NVDIMM configuration from two processes at once is not safe (as with
 * ndctl itself).
 */
#ifndef PMALLOC_NS_H
#define PMALLOC_NS_H 1

#include <stddef.h>
#include <stdint.h>

#include <pmalloc.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PMA_E_CONFLICT (-100201) /* description contradicts the node; nothing changed */
#define PMA_E_REFUSED  (-100202) /* would destroy data; PMA_NS_FORCE overrides */

/* Flags of the functions that change the configuration. */
#define PMA_NS_FORCE       (1u << 0) /* see PMA_E_REFUSED; never overrides -EBUSY */
#define PMA_NS_INIT_LABELS (1u << 1) /* may initialise labels on label-less regions */
#define PMA_NS_EXCLUSIVE   (1u << 2) /* planning: an existing namespace of a
                                        described name is an error (-EEXIST) */

#define PMA_NS_NAME_MAX 64           /* bytes of a namespace name, NUL included */
#define PMA_NS_ALIGN_2M ((uint64_t)2 << 20)
#define PMA_NS_ALIGN_1G ((uint64_t)1 << 30)
#define PMA_NS_MIN_SIZE ((uint64_t)16 << 20) /* the kernel's smallest namespace */

/* ------------------------------------------------------------ the state */

/* Operating mode of a namespace. */
enum pma_ns_mode {
	PMA_NS_MODE_RAW = 0, /* no info block: a plain /dev/pmemX */
	PMA_NS_MODE_FSDAX,   /* /dev/pmemX for a DAX file system */
	PMA_NS_MODE_DEVDAX,  /* a character device /dev/daxX.Y */
	PMA_NS_MODE_SECTOR,  /* /dev/pmemXs, block translation table */
	PMA_NS_MODE_UNKNOWN,
};

/* How a region stores its namespace configuration. */
enum pma_ns_labels {
	PMA_NS_LABELS_ACTIVE = 0,    /* labelled: named, several namespaces */
	PMA_NS_LABELS_UNINITIALIZED, /* its DIMMs have label storage, never
	                                initialised: label-less until then */
	PMA_NS_LABELS_NONE,          /* label-less for good: one namespace0.0
	                                covering the region, no name */
};

/* "raw", "fsdax", "devdax", "sector", "unknown". */
const char *pma_ns_mode_name(enum pma_ns_mode m);
/* "active", "uninitialized", "none". */
const char *pma_ns_labels_name(enum pma_ns_labels l);

/*
 * The records of a state.  Their strings belong to the state and live
 * until it is freed; a string that is unknown or absent is NULL.  Node
 * numbers are -1 when the platform does not report one.
 */
struct pma_ns_bus_info {
	const char *dev;      /* "ndbus0" */
	const char *provider; /* "ACPI.NFIT" */
};

struct pma_ns_region_info {
	const char *dev;               /* "region0" */
	const char *bus;               /* dev of its bus */
	const char *type;              /* "pmem" ("blk" regions cannot hold devdax) */
	uint64_t size;
	uint64_t available_size;       /* not yet allocated to namespaces */
	uint64_t max_available_extent; /* largest contiguous free range */
	uint64_t align;                /* namespace sizes are multiples of it; 0 unknown */
	unsigned interleave_ways;      /* DIMMs interleaved in the region */
	int numa_node;                 /* CPU node nearest to the memory */
	int target_node;               /* node the memory would appear as (kmem) */
	const char *persistence_domain; /* "cpu_cache" (eADR), "memory_controller"
	                                   (ADR), "none", "unknown" */
	enum pma_ns_labels labels;
	int enabled;
	int readonly;
};

struct pma_ns_info {
	const char *dev;      /* "namespace0.0" */
	const char *region;   /* dev of its region */
	enum pma_ns_mode mode;
	uint64_t size;        /* capacity taken from the region */
	uint64_t align;       /* fsdax/devdax: page size of the mapping; else 0 */
	const char *uuid;     /* labelled namespaces only */
	const char *name;     /* labelled namespaces only ("alt name") */
	const char *chardev;  /* devdax: "dax0.0" */
	const char *blockdev; /* raw/fsdax/sector: "pmem0", "pmem0s" */
	int numa_node;
	int target_node;
	int enabled;
	int in_use;           /* open or mapped by a process, or mounted */
};

struct pma_ns_dax_info {
	const char *dev;       /* "dax0.0" */
	const char *path;      /* "/dev/dax0.0" */
	const char *region;    /* NVDIMM region behind it, or NULL (hmem, CXL) */
	const char *namespace; /* namespace behind it, or NULL */
	uint64_t size;         /* bytes a mapping of the device covers */
	uint64_t align;        /* mappings and offsets are multiples of it */
	int numa_node;
	int target_node;
	const char *mode;      /* "devdax", or "system-ram" when onlined as memory */
	int in_use;
};

struct pma_ns_state;

/*
 * pma_ns_state_read -- takes a snapshot of this machine's NVDIMM
 * configuration through libndctl and libdaxctl.  Idle namespaces (size 0,
 * the kernel's seeds) and idle dax devices are left out.  A machine
 * without NVDIMMs gives an empty state, not an error: check
 * pma_ns_state_nregions() (pma_ns_state_absent_reason() says why).
 * *out is owned by the caller: pma_ns_state_free().
 * Errors: -ENOMEM, -ENXIO (libndctl could not start: its message is given).
 */
int pma_ns_state_read(struct pma_ns_state **out);

/*
 * pma_ns_state_from_json -- builds a state from the JSON that
 * pma_ns_state_to_json() writes without PMA_NS_JSON_HUMAN (sizes are
 * numbers, or "992M"-style strings; the rounded "992.00 MiB" strings of
 * the human form are refused).  Unknown fields are ignored, missing ones
 * take neutral defaults (a region is pmem, labelled, enabled; nodes -1).
 * Used to plan against a described node, and by the tests.
 * Errors: -EINVAL (not JSON, or not a listing: the message says where).
 */
int pma_ns_state_from_json(const char *text, struct pma_ns_state **out);

/* Flags of the *_to_json() functions. */
#define PMA_NS_JSON_HUMAN (1u << 0) /* sizes as "992.00 MiB" strings (ndctl -u) */
#define PMA_NS_JSON_DAX   (1u << 1) /* state: only the flat list of dax devices */

/*
 * pma_ns_state_to_json -- the listing, in ndctl's style (field names of
 * `ndctl list -BRN` / `daxctl list`):
 *   {"buses":[{"dev","provider","regions":[{"dev","size",...,"namespaces":[...]}]}],
 *    "dax_devices":[{"chardev","path","size","align","numa_node",...}]}
 * *json is a NUL-terminated string the caller frees with free().
 * Errors: -ENOMEM.
 */
int pma_ns_state_to_json(const struct pma_ns_state *s, unsigned flags, char **json);

/* pma_ns_state_free -- frees *s and sets it to NULL (NULL: no-op). */
void pma_ns_state_free(struct pma_ns_state **s);

/*
 * pma_ns_state_absent_reason -- NULL when the state has regions, else a
 * sentence saying why there are none ("no NVDIMM bus: ..."), owned by
 * the state.
 */
const char *pma_ns_state_absent_reason(const struct pma_ns_state *s);

/* Counts, and record i (0 <= i < count) copied into *info.  Errors: -ERANGE. */
size_t pma_ns_state_nbuses(const struct pma_ns_state *s);
size_t pma_ns_state_nregions(const struct pma_ns_state *s);
size_t pma_ns_state_nnamespaces(const struct pma_ns_state *s);
size_t pma_ns_state_ndax(const struct pma_ns_state *s);
int pma_ns_state_bus(const struct pma_ns_state *s, size_t i, struct pma_ns_bus_info *info);
int pma_ns_state_region(const struct pma_ns_state *s, size_t i, struct pma_ns_region_info *info);
int pma_ns_state_namespace(const struct pma_ns_state *s, size_t i, struct pma_ns_info *info);
int pma_ns_state_dax(const struct pma_ns_state *s, size_t i, struct pma_ns_dax_info *info);

/* ------------------------------------------------ finding a store's device */

/*
 * pma_ns_resolve -- finds the devdax device a store should open, in
 * state s.  `selector` is one of:
 *   a namespace name ("ckpt0"),
 *   a namespace ("namespace0.0"), a dax device ("dax0.0", "/dev/dax0.0"),
 *   a region ("region0": its only devdax namespace).
 * With numa_node >= 0 only devices whose region is on that node count
 * (names may repeat across regions: one per socket).  Writes
 * "/dev/daxX.Y" to path (len bytes).
 * Errors: -EINVAL (bad arguments, or several devices match: the message
 * lists them), -ENOENT (none matches; the message says what exists),
 * -ENODEV (no NVDIMM at all), -ENAMETOOLONG (len too small).
 */
int pma_ns_resolve(const struct pma_ns_state *s, const char *selector, int numa_node,
		char *path, size_t len);

/* pma_ns_dax_path -- pma_ns_resolve() on a fresh pma_ns_state_read(). */
int pma_ns_dax_path(const char *selector, int numa_node, char *path, size_t len);

/*
 * pma_ns_region_open -- opens the region of the device that
 * pma_ns_dax_path(selector, numa_node) finds, with pma_region_open(path,
 * 0, flags, out) (flags: PMA_REGION_NO_PREFAULT; CREATE is refused).
 * "Open the devdax namespace named ckpt0 on the NUMA node of GPU 0":
 *   pma_ns_gpu_numa_node(0, &node); pma_ns_region_open("ckpt0", node, 0, &r);
 * Errors: those of pma_ns_dax_path and pma_region_open.
 */
int pma_ns_region_open(const char *selector, int numa_node, unsigned flags,
		struct pma_region **out);

/*
 * pma_ns_pci_numa_node -- the NUMA node of PCI device `bdf`
 * ("0000:17:00.0" or "17:00.0"), from /sys/bus/pci/devices/BDF/numa_node;
 * *node is -1 when the platform reports no affinity.
 * Errors: -EINVAL (malformed BDF), -ENODEV (no such device).
 */
int pma_ns_pci_numa_node(const char *bdf, int *node);

/*
 * pma_ns_gpu_numa_node -- the NUMA node of GPU number `gpu`: the gpu-th
 * display or 3D controller (PCI class 0x0300/0x0302) in PCI bus order,
 * which is CUDA's numbering under CUDA_DEVICE_ORDER=PCI_BUS_ID (CUDA's
 * default order may differ: pass the BDF to pma_ns_pci_numa_node when in
 * doubt).  bdf (may be NULL, else 16 bytes) receives the device's address.
 * Errors: -EINVAL (gpu < 0), -ENODEV (fewer GPUs).
 */
int pma_ns_gpu_numa_node(int gpu, int *node, char *bdf);

/* ------------------------------------------------- the desired state */

/* One namespace of a description. */
struct pma_prov_ns {
	const char *name;   /* label name, [A-Za-z0-9._-], < PMA_NS_NAME_MAX bytes;
	                       may be NULL only with dev */
	const char *region; /* "region0"; NULL: any region (numa_node permitting) */
	int numa_node;      /* only regions on this node; -1: any */
	uint64_t size;      /* bytes taken from the region; 0: all it has free */
	uint64_t align;     /* PMA_NS_ALIGN_2M (0 means this) or PMA_NS_ALIGN_1G */
	const char *dev;    /* NULL: create a namespace.  "namespace0.0": take over
	                       this existing namespace and make it devdax (the
	                       only way on a label-less region) */
};

struct pma_prov_spec;

/* pma_prov_spec_new -- an empty description.  Errors: -ENOMEM. */
int pma_prov_spec_new(struct pma_prov_spec **out);

/*
 * pma_prov_spec_add -- appends a copy of *ns (strings copied).
 * Errors: -EINVAL (bad name or align; a size below 16 MiB or not a
 * multiple of the alignment; a size with dev=; a second entry of the same
 * name or device), -ENOMEM.
 */
int pma_prov_spec_add(struct pma_prov_spec *s, const struct pma_prov_ns *ns);

/*
 * pma_prov_spec_allow_init_labels -- lets the plan initialise labels on
 * `region` (NULL: on every region), as PMA_NS_INIT_LABELS does for all.
 * Errors: -ENOMEM.
 */
int pma_prov_spec_allow_init_labels(struct pma_prov_spec *s, const char *region);

/*
 * pma_prov_spec_parse -- parses a description.  One statement per line,
 * '#' starts a comment:
 *
 *   namespace NAME [region=R] [numa=N] [size=S|all] [align=2M|1G] [count=K] [dev=NS]
 *   init-labels REGION|all
 *
 * Sizes take K, M, G, T suffixes (powers of 1024).  With count=K > 1, NAME
 * holds one "%d", replaced by 0..K-1 ("ckpt%d" count=2: ckpt0, ckpt1).
 * NAME may be left out when dev= is given.  `origin` (a file name, may be
 * NULL) prefixes error messages: "prov.conf:3: unknown key 'sise'".
 * Errors: -EINVAL, -ENOMEM.
 */
int pma_prov_spec_parse(const char *text, const char *origin, struct pma_prov_spec **out);

/* pma_prov_spec_load -- reads the file at path and parses it.  Errors: those of parse, -errno of open/read. */
int pma_prov_spec_load(const char *path, struct pma_prov_spec **out);

/*
 * pma_prov_spec_add_line -- parses one statement (the syntax above) into
 * s; for command lines ("--ns 'ckpt0 size=1G'").  Errors: as parse.
 */
int pma_prov_spec_add_line(struct pma_prov_spec *s, const char *line);

/* Entries, after count expansion.  pma_prov_spec_get returns NULL for i >= count. */
size_t pma_prov_spec_count(const struct pma_prov_spec *s);
const struct pma_prov_ns *pma_prov_spec_get(const struct pma_prov_spec *s, size_t i);

/* pma_prov_spec_free -- frees *s and sets it to NULL. */
void pma_prov_spec_free(struct pma_prov_spec **s);

/* ----------------------------------------------------------- the plan */

enum pma_prov_op {
	PMA_PROV_KEEP = 0,     /* described namespace exists as described: no change */
	PMA_PROV_INIT_LABELS,  /* initialise the labels of a label-less region */
	PMA_PROV_CREATE,       /* create a named devdax namespace */
	PMA_PROV_RECONFIGURE,  /* make an existing namespace devdax */
	PMA_PROV_UNMANAGED,    /* existing namespace not described: left alone */
};

/* "keep", "init-labels", "create", "reconfigure", "unmanaged". */
const char *pma_prov_op_name(enum pma_prov_op op);

/* One action; strings belong to the plan. */
struct pma_prov_action {
	enum pma_prov_op op;
	const char *name;    /* described name (NULL for init-labels, unmanaged, or none) */
	const char *region;
	const char *dev;     /* existing namespace (keep, reconfigure, unmanaged) */
	uint64_t size;       /* size the namespace has or will have */
	uint64_t align;
	int destructive;     /* reconfigure/init-labels over a namespace that was
	                        not raw: allowed only with PMA_NS_FORCE */
	const char *what;    /* one line for people: "create devdax namespace ckpt0 on region0 ..." */
	/* After pma_prov_plan_apply(): */
	int done;            /* carried out */
	const char *result_dev;     /* namespace it made or changed */
	const char *result_chardev; /* "dax0.1" */
};

struct pma_prov_plan;

/*
 * pma_prov_plan_new -- compares the node (cur) with the description
 * (want) and lists the actions that make the node match: a pure function
 * of its arguments (no system calls).
 *
 * Matching: a described namespace with dev= is the namespace of that
 * device; otherwise it is the namespace carrying its name.  A match in
 * devdax mode, with the described alignment, the size (any size for
 * "all") and on a region the description allows, is kept.  A match that
 * differs is a conflict: the plan never resizes or re-modes a named
 * namespace (destroy it first).  Unmatched entries are created on the
 * region named, or else the first region (in name order) on the node with
 * enough contiguous free capacity; free capacity is booked as the plan
 * goes, so several entries on one region add up.  Label-less regions get
 * INIT_LABELS before their first creation when allowed (flags or
 * pma_prov_spec_allow_init_labels).  Namespaces not described appear as
 * UNMANAGED: they are never touched.
 *
 * flags: PMA_NS_FORCE (allow destructive actions), PMA_NS_INIT_LABELS,
 * PMA_NS_EXCLUSIVE.  *out (caller frees with pma_prov_plan_free) is set
 * only on success.
 * Errors: -ENODEV (the node has no NVDIMM region), PMA_E_CONFLICT,
 * PMA_E_REFUSED (needs PMA_NS_FORCE), -EBUSY (would change a namespace in
 * use), -ENOSPC, -EEXIST (PMA_NS_EXCLUSIVE), -EINVAL, -ENOMEM.  The
 * message names the described entry and what is in the way.
 */
int pma_prov_plan_new(const struct pma_ns_state *cur, const struct pma_prov_spec *want,
		unsigned flags, struct pma_prov_plan **out);

size_t pma_prov_plan_nactions(const struct pma_prov_plan *p);
/* pma_prov_plan_action -- copies action i into *a.  Errors: -ERANGE. */
int pma_prov_plan_action(const struct pma_prov_plan *p, size_t i, struct pma_prov_action *a);
/* Number of actions that change the node (init-labels, create, reconfigure). */
size_t pma_prov_plan_changes(const struct pma_prov_plan *p);

/*
 * pma_prov_plan_to_json -- {"changes":N,"actions":[{"action":"create",
 * "name":..,"region":..,"size":..,"align":..,"dev":..,"chardev":..,"done":..}]}.
 * *json: caller frees with free().  Errors: -ENOMEM.
 */
int pma_prov_plan_to_json(const struct pma_prov_plan *p, unsigned flags, char **json);

/*
 * pma_prov_plan_apply -- carries out the plan's changes in order through
 * libndctl, re-checking before each one that the namespace it changes is
 * not in use.  Each action records done / result_dev / result_chardev.
 * Stops at the first failure: earlier actions stay done (each is complete
 * by itself; a failed creation is rolled back as ndctl does).  Needs root.
 * Errors: -EBUSY, -EACCES/-EPERM, -ENXIO (kernel refused: libndctl's
 * message), -ENOENT (the node changed since the state was read).
 */
int pma_prov_plan_apply(struct pma_prov_plan *p);

/* pma_prov_plan_free -- frees *p and sets it to NULL. */
void pma_prov_plan_free(struct pma_prov_plan **p);

/* ------------------------------------------------- one-off operations */

/*
 * pma_ns_create -- creates the devdax namespace *ns on this machine now
 * (plan with PMA_NS_EXCLUSIVE and apply).  chardev (may be NULL, else
 * len bytes) receives "daxX.Y".  flags: PMA_NS_INIT_LABELS, PMA_NS_FORCE.
 * Errors: those of pma_prov_plan_new and pma_prov_plan_apply; -EEXIST.
 */
int pma_ns_create(const struct pma_prov_ns *ns, unsigned flags, char *chardev, size_t len);

/*
 * pma_ns_reconfigure -- makes the existing namespace `dev` (namespaceX.Y,
 * its name, or its daxX.Y) a devdax namespace with `align` (0: 2 MiB),
 * renaming it to `name` when not NULL (labelled regions only).  This is
 * how a label-less namespace0.0 becomes devdax.  A namespace already
 * devdax with that alignment is left as is (returns 0).  Reconfiguring a
 * namespace that is not raw destroys what it holds: PMA_NS_FORCE.
 * Errors: -ENOENT, -EBUSY, PMA_E_REFUSED, PMA_E_CONFLICT, and those of apply.
 */
int pma_ns_reconfigure(const char *dev, uint64_t align, const char *name, unsigned flags,
		char *chardev, size_t len);

/*
 * pma_ns_destroy -- destroys namespace `selector` (name, namespaceX.Y,
 * daxX.Y or /dev/daxX.Y): a labelled namespace is deleted and its
 * capacity returns to the region; a label-less namespace0.0 goes back to
 * raw mode (it cannot be deleted).  Always refused (-EBUSY) while it is
 * open or mapped by any process or mounted: the kernel would pull the
 * memory from under it.  Refused (PMA_E_REFUSED) without PMA_NS_FORCE when
 * it holds a pmckpt pool, or is fsdax or sector (a file system).
 * Errors: -ENODEV, -ENOENT, -EINVAL (ambiguous name: the message lists the
 * namespaces), -EBUSY, PMA_E_REFUSED, -EACCES, -ENXIO.
 */
int pma_ns_destroy(const char *selector, unsigned flags);

/* ---------------------------------------------------------------- sizes */

/*
 * pma_ns_size_parse, pma_ns_size_format -- pma_size_parse and
 * pma_size_format (include/pmalloc.h), under their earlier names; kept for
 * compatibility.  Since 0.1.0 they accept fractions ("1.5G") and a unit
 * followed by "i" alone ("1Gi"), as pma_size_parse does.
 */
int pma_ns_size_parse(const char *text, uint64_t *out);
const char *pma_ns_size_format(uint64_t bytes, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* PMCTL_H */
