/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ns_state.c -- the snapshot of a node's NVDIMM configuration: records of
 * buses, regions, namespaces and dax devices, however they were obtained
 * (libndctl in ndctl.c, a JSON listing in ns_json.c).
 */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pmalloc_ns.h"
#include "errmsg.h"
#include "ns_internal.h"

const char *
pma_ns_mode_name(enum pma_ns_mode m)
{
	switch (m) {
	case PMA_NS_MODE_RAW: return "raw";
	case PMA_NS_MODE_FSDAX: return "fsdax";
	case PMA_NS_MODE_DEVDAX: return "devdax";
	case PMA_NS_MODE_SECTOR: return "sector";
	case PMA_NS_MODE_UNKNOWN: break;
	}
	return "unknown";
}

const char *
pma_ns_labels_name(enum pma_ns_labels l)
{
	switch (l) {
	case PMA_NS_LABELS_ACTIVE: return "active";
	case PMA_NS_LABELS_UNINITIALIZED: return "uninitialized";
	case PMA_NS_LABELS_NONE: return "none";
	}
	return "unknown";
}

int
pma_ns__state_new(struct pma_ns_state **out)
{
	*out = calloc(1, sizeof(**out));
	if (!*out)
		return pma_ns__err(-ENOMEM, "out of memory");
	return 0;
}

void
pma_ns_state_free(struct pma_ns_state **sp)
{
	struct pma_ns_state *s = sp ? *sp : NULL;

	if (!s)
		return;
	for (size_t i = 0; i < s->nstrs; i++)
		free(s->strs[i]);
	free(s->strs);
	free(s->absent);
	free(s->bus);
	free(s->reg);
	free(s->ns);
	free(s->dax);
	free(s);
	*sp = NULL;
}

const char *
pma_ns__str(struct pma_ns_state *s, const char *v)
{
	if (!v)
		return NULL;
	if (s->nstrs == s->capstrs) {
		size_t cap = s->capstrs ? 2 * s->capstrs : 32;
		char **n = realloc(s->strs, cap * sizeof(*n));
		if (!n) {
			s->oom = 1;
			return NULL;
		}
		s->strs = n;
		s->capstrs = cap;
	}
	char *c = strdup(v);
	if (!c) {
		s->oom = 1;
		return NULL;
	}
	s->strs[s->nstrs++] = c;
	return c;
}

/* Makes room for one more record of `size` bytes in *arr. */
static int
grow(void **arr, size_t *n, size_t *cap, size_t size)
{
	if (*n < *cap)
		return 0;
	size_t c = *cap ? 2 * *cap : 8;
	void *a = realloc(*arr, c * size);
	if (!a)
		return pma_ns__err(-ENOMEM, "out of memory");
	*arr = a;
	*cap = c;
	return 0;
}

int
pma_ns__add_bus(struct pma_ns_state *s, const struct pma_ns_bus_info *b)
{
	if (grow((void **)&s->bus, &s->nbus, &s->capbus, sizeof(*b)))
		return -ENOMEM;
	struct pma_ns_bus_info *d = &s->bus[s->nbus++];
	*d = *b;
	d->dev = pma_ns__str(s, b->dev);
	d->provider = pma_ns__str(s, b->provider);
	return s->oom ? pma_ns__err(-ENOMEM, "out of memory") : 0;
}

int
pma_ns__add_region(struct pma_ns_state *s, const struct pma_ns_region_info *r)
{
	if (grow((void **)&s->reg, &s->nreg, &s->capreg, sizeof(*r)))
		return -ENOMEM;
	struct pma_ns_region_info *d = &s->reg[s->nreg++];
	*d = *r;
	d->dev = pma_ns__str(s, r->dev);
	d->bus = pma_ns__str(s, r->bus);
	d->type = pma_ns__str(s, r->type);
	d->persistence_domain = pma_ns__str(s, r->persistence_domain);
	return s->oom ? pma_ns__err(-ENOMEM, "out of memory") : 0;
}

int
pma_ns__add_ns(struct pma_ns_state *s, const struct pma_ns_info *n)
{
	if (grow((void **)&s->ns, &s->nns, &s->capns, sizeof(*n)))
		return -ENOMEM;
	struct pma_ns_info *d = &s->ns[s->nns++];
	*d = *n;
	d->dev = pma_ns__str(s, n->dev);
	d->region = pma_ns__str(s, n->region);
	d->uuid = pma_ns__str(s, n->uuid);
	d->name = pma_ns__str(s, n->name);
	d->chardev = pma_ns__str(s, n->chardev);
	d->blockdev = pma_ns__str(s, n->blockdev);
	return s->oom ? pma_ns__err(-ENOMEM, "out of memory") : 0;
}

int
pma_ns__add_dax(struct pma_ns_state *s, const struct pma_ns_dax_info *x)
{
	if (grow((void **)&s->dax, &s->ndax, &s->capdax, sizeof(*x)))
		return -ENOMEM;
	struct pma_ns_dax_info *d = &s->dax[s->ndax++];
	*d = *x;
	d->dev = pma_ns__str(s, x->dev);
	d->path = pma_ns__str(s, x->path);
	d->region = pma_ns__str(s, x->region);
	d->namespace = pma_ns__str(s, x->namespace);
	d->mode = pma_ns__str(s, x->mode);
	return s->oom ? pma_ns__err(-ENOMEM, "out of memory") : 0;
}

int
pma_ns__set_absent(struct pma_ns_state *s, const char *why)
{
	free(s->absent);
	s->absent = why ? strdup(why) : NULL;
	if (why && !s->absent)
		return pma_ns__err(-ENOMEM, "out of memory");
	return 0;
}

int
pma_ns__devcmp(const char *a, const char *b)
{
	if (!a || !b)
		return a ? 1 : b ? -1 : 0;
	while (*a && *b) {
		if (isdigit((unsigned char)*a) && isdigit((unsigned char)*b)) {
			char *ea, *eb;
			unsigned long long x = strtoull(a, &ea, 10), y = strtoull(b, &eb, 10);
			if (x != y)
				return x < y ? -1 : 1;
			a = ea;
			b = eb;
			continue;
		}
		if (*a != *b)
			return (unsigned char)*a < (unsigned char)*b ? -1 : 1;
		a++;
		b++;
	}
	return *a ? 1 : *b ? -1 : 0;
}

static int cmp_bus(const void *x, const void *y)
{
	return pma_ns__devcmp(((const struct pma_ns_bus_info *)x)->dev,
			((const struct pma_ns_bus_info *)y)->dev);
}
static int cmp_reg(const void *x, const void *y)
{
	return pma_ns__devcmp(((const struct pma_ns_region_info *)x)->dev,
			((const struct pma_ns_region_info *)y)->dev);
}
static int cmp_ns(const void *x, const void *y)
{
	return pma_ns__devcmp(((const struct pma_ns_info *)x)->dev,
			((const struct pma_ns_info *)y)->dev);
}
static int cmp_dax(const void *x, const void *y)
{
	return pma_ns__devcmp(((const struct pma_ns_dax_info *)x)->dev,
			((const struct pma_ns_dax_info *)y)->dev);
}

int
pma_ns__finish(struct pma_ns_state *s)
{
	if (s->oom)
		return pma_ns__err(-ENOMEM, "out of memory");
	if (s->nbus)
		qsort(s->bus, s->nbus, sizeof(*s->bus), cmp_bus);
	if (s->nreg)
		qsort(s->reg, s->nreg, sizeof(*s->reg), cmp_reg);
	if (s->nns)
		qsort(s->ns, s->nns, sizeof(*s->ns), cmp_ns);
	if (s->ndax)
		qsort(s->dax, s->ndax, sizeof(*s->dax), cmp_dax);
	if (!s->nreg && !s->absent)
		return pma_ns__set_absent(s, s->nbus ?
				"the NVDIMM buses have no regions (no persistent memory configured)" :
				"no NVDIMM bus: this machine has no persistent memory visible to Linux");
	if (s->nreg)
		return pma_ns__set_absent(s, NULL);
	return 0;
}

const struct pma_ns_region_info *
pma_ns__region(const struct pma_ns_state *s, const char *dev)
{
	for (size_t i = 0; dev && i < s->nreg; i++)
		if (s->reg[i].dev && strcmp(s->reg[i].dev, dev) == 0)
			return &s->reg[i];
	return NULL;
}

const struct pma_ns_info *
pma_ns__namespace(const struct pma_ns_state *s, const char *dev)
{
	for (size_t i = 0; dev && i < s->nns; i++)
		if (s->ns[i].dev && strcmp(s->ns[i].dev, dev) == 0)
			return &s->ns[i];
	return NULL;
}

const struct pma_ns_info *
pma_ns__namespace_of_dev(const struct pma_ns_state *s, const char *dev)
{
	if (!dev)
		return NULL;
	if (strncmp(dev, "/dev/", 5) == 0)
		dev += 5;
	const struct pma_ns_info *n = pma_ns__namespace(s, dev);
	if (n)
		return n;
	for (size_t i = 0; i < s->nns; i++)
		if ((s->ns[i].chardev && strcmp(s->ns[i].chardev, dev) == 0) ||
				(s->ns[i].blockdev && strcmp(s->ns[i].blockdev, dev) == 0))
			return &s->ns[i];
	return NULL;
}

const char *
pma_ns_state_absent_reason(const struct pma_ns_state *s)
{
	return s ? s->absent : "no state";
}

size_t pma_ns_state_nbuses(const struct pma_ns_state *s) { return s ? s->nbus : 0; }
size_t pma_ns_state_nregions(const struct pma_ns_state *s) { return s ? s->nreg : 0; }
size_t pma_ns_state_nnamespaces(const struct pma_ns_state *s) { return s ? s->nns : 0; }
size_t pma_ns_state_ndax(const struct pma_ns_state *s) { return s ? s->ndax : 0; }

#define GETTER(fn, type, arr, cnt, what)                                              \
	int fn(const struct pma_ns_state *s, size_t i, type *info)                    \
	{                                                                             \
		if (!s || !info)                                                      \
			return pma_ns__err(-EINVAL, #fn ": state and info are required"); \
		if (i >= s->cnt)                                                      \
			return pma_ns__err(-ERANGE, "no " what " %zu (%zu listed)", i, s->cnt); \
		*info = s->arr[i];                                                    \
		return 0;                                                             \
	}

GETTER(pma_ns_state_bus, struct pma_ns_bus_info, bus, nbus, "bus")
GETTER(pma_ns_state_region, struct pma_ns_region_info, reg, nreg, "region")
GETTER(pma_ns_state_namespace, struct pma_ns_info, ns, nns, "namespace")
GETTER(pma_ns_state_dax, struct pma_ns_dax_info, dax, ndax, "dax device")
