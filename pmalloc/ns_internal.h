/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ns_internal.h -- what the provisioning files (ns_*.c, ndctl.c,
 * provision*.c) share: the state object's layout, its builders, the
 * libndctl context with its messages captured, and the in-use checks.
 * Not installed; pma_ns__ names stay local to libpmalloc (version script).
 */
#ifndef PMA_NS_INTERNAL_H
#define PMA_NS_INTERNAL_H 1

#include <stddef.h>
#include <stdint.h>

#include "pmalloc_ns.h"

struct pma_ns_state {
	char *absent; /* why there are no regions, or NULL */
	struct pma_ns_bus_info *bus;
	struct pma_ns_region_info *reg;
	struct pma_ns_info *ns;
	struct pma_ns_dax_info *dax;
	size_t nbus, nreg, nns, ndax;
	size_t capbus, capreg, capns, capdax;
	char **strs; /* every string the records point to */
	size_t nstrs, capstrs;
	int oom;     /* a copy failed: the builder reports -ENOMEM at the end */
};

/* The plan (provision.c builds it, provision_apply.c carries it out). */
struct pma_prov_plan {
	struct pma_prov_action *act;
	size_t n, cap;
	char **strs; /* every string the actions point to */
	size_t nstrs, capstrs;
	int oom;
};
/* A copy of v owned by the plan (NULL for NULL; sets p->oom on failure). */
const char *pma_ns__plan_str(struct pma_prov_plan *p, const char *v);

/* ns_state.c */
int pma_ns__state_new(struct pma_ns_state **out);
/* A copy of v owned by s (NULL for NULL; sets s->oom on failure). */
const char *pma_ns__str(struct pma_ns_state *s, const char *v);
/* Append copies of the records (strings copied).  Errors: -ENOMEM. */
int pma_ns__add_bus(struct pma_ns_state *s, const struct pma_ns_bus_info *b);
int pma_ns__add_region(struct pma_ns_state *s, const struct pma_ns_region_info *r);
int pma_ns__add_ns(struct pma_ns_state *s, const struct pma_ns_info *n);
int pma_ns__add_dax(struct pma_ns_state *s, const struct pma_ns_dax_info *d);
int pma_ns__set_absent(struct pma_ns_state *s, const char *why);
/* Sorts records in name order ("region2" before "region10"); -ENOMEM if a copy failed. */
int pma_ns__finish(struct pma_ns_state *s);
/* Natural order of device names: "region2" < "region10". */
int pma_ns__devcmp(const char *a, const char *b);
const struct pma_ns_region_info *pma_ns__region(const struct pma_ns_state *s, const char *dev);
const struct pma_ns_info *pma_ns__namespace(const struct pma_ns_state *s, const char *dev);
/* The namespace behind "namespaceX.Y", "daxX.Y" or "/dev/daxX.Y"; NULL if none. */
const struct pma_ns_info *pma_ns__namespace_of_dev(const struct pma_ns_state *s, const char *dev);

/* ndctl.c: a libndctl context whose log goes to a thread-local buffer. */
struct ndctl_ctx;
int pma_ns__ctx_new(struct ndctl_ctx **out);
void pma_ns__ctx_free(struct ndctl_ctx **ctx);
/* libndctl/libdaxctl's last error message on this thread ("" if none). */
const char *pma_ns__lib_msg(void);
void pma_ns__lib_msg_clear(void);
/* Records a failure with libndctl's explanation appended when it gave one. */
int pma_ns__err_lib(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Fills a state from the live ctx. */
int pma_ns__state_fill(struct ndctl_ctx *ctx, struct pma_ns_state *s);

/* provision_config.c: whether the description lets the plan initialise labels on region r. */
int pma_ns__spec_init_allowed(const struct pma_prov_spec *s, const char *r);

/*
 * ns_change.c: changes through libndctl.  dev and chardev (may be NULL)
 * receive the namespace and dax device names (PMA_NS_DEVNAME bytes).
 */
#define PMA_NS_DEVNAME 64
int pma_ns__init_labels(struct ndctl_ctx *ctx, const char *region);
int pma_ns__create(struct ndctl_ctx *ctx, const char *region, const char *name, uint64_t size,
		uint64_t align, char *dev, char *chardev);
int pma_ns__reconfigure(struct ndctl_ctx *ctx, const char *nsdev, const char *name,
		uint64_t align, char *chardev);
int pma_ns__destroy(struct ndctl_ctx *ctx, const char *nsdev);

/* ns_busy.c */
/*
 * 1 if a process has `path` (a device node) open or mapped, or it is a
 * block device that is mounted or claimed; 0 if not; negative errno if it
 * cannot be told (-EACCES without the right to read other processes).
 */
int pma_ns__dev_in_use(const char *path);
/* 1 if the devdax device at path starts with a pmckpt pool header, 0 if not, <0 error. */
int pma_ns__dax_holds_pool(const char *path, uint64_t align);

#endif
