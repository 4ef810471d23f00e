/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * provision.c -- planning: given what the node has (a state) and what it
 * should have (a description), the list of actions that converge it.  A
 * pure function of its arguments, so that every decision can be tested
 * against described nodes without hardware.
 *
 * The rules, in the order they are applied:
 *  1. Each described namespace is matched: by device when it says dev=,
 *     else by name.  A match as described is kept; a match that differs is
 *     a conflict (named namespaces are never resized or re-moded), except
 *     that a dev= entry is reconfigured to devdax: naming the device is
 *     the instruction to change it.
 *  2. Unmatched entries are created, on the named region or the first
 *     region (name order) on the node with room; capacity is booked as the
 *     plan goes.  Label-less regions are initialised first when allowed.
 *  3. Everything else is listed as unmanaged and never touched.
 * Whatever would lose data (a namespace that is not raw being
 * reconfigured, or labels initialised over one) needs PMA_NS_FORCE, and a
 * namespace in use is never changed.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pmalloc_ns.h"
#include "errmsg.h"
#include "ns_internal.h"

const char *
pma_prov_op_name(enum pma_prov_op op)
{
	switch (op) {
	case PMA_PROV_KEEP: return "keep";
	case PMA_PROV_INIT_LABELS: return "init-labels";
	case PMA_PROV_CREATE: return "create";
	case PMA_PROV_RECONFIGURE: return "reconfigure";
	case PMA_PROV_UNMANAGED: return "unmanaged";
	}
	return "unknown";
}

const char *
pma_ns__plan_str(struct pma_prov_plan *p, const char *v)
{
	if (!v)
		return NULL;
	if (p->nstrs == p->capstrs) {
		size_t cap = p->capstrs ? 2 * p->capstrs : 32;
		char **n = realloc(p->strs, cap * sizeof(*n));
		if (!n) {
			p->oom = 1;
			return NULL;
		}
		p->strs = n;
		p->capstrs = cap;
	}
	char *c = strdup(v);
	if (!c) {
		p->oom = 1;
		return NULL;
	}
	p->strs[p->nstrs++] = c;
	return c;
}

void
pma_prov_plan_free(struct pma_prov_plan **pp)
{
	struct pma_prov_plan *p = pp ? *pp : NULL;

	if (!p)
		return;
	for (size_t i = 0; i < p->nstrs; i++)
		free(p->strs[i]);
	free(p->strs);
	free(p->act);
	free(p);
	*pp = NULL;
}

size_t pma_prov_plan_nactions(const struct pma_prov_plan *p) { return p ? p->n : 0; }

int
pma_prov_plan_action(const struct pma_prov_plan *p, size_t i, struct pma_prov_action *a)
{
	if (!p || !a)
		return pma_ns__err(-EINVAL, "pma_prov_plan_action: plan and action are required");
	if (i >= p->n)
		return pma_ns__err(-ERANGE, "no action %zu (%zu planned)", i, p->n);
	*a = p->act[i];
	return 0;
}

size_t
pma_prov_plan_changes(const struct pma_prov_plan *p)
{
	size_t n = 0;

	for (size_t i = 0; p && i < p->n; i++)
		if (p->act[i].op != PMA_PROV_KEEP && p->act[i].op != PMA_PROV_UNMANAGED)
			n++;
	return n;
}

/* ---------------------------------------------------------- planning */

/* What the plan has booked on a region so far. */
struct booking {
	const struct pma_ns_region_info *r;
	uint64_t avail, extent;
	enum pma_ns_labels labels;
	int init_planned;
	int ns0_claimed; /* its label-less namespace is taken over by a dev= entry */
};

struct planner {
	const struct pma_ns_state *cur;
	const struct pma_prov_spec *want;
	unsigned flags;
	struct pma_prov_plan *plan;
	struct booking *book;  /* one per region of cur */
	char *claimed;         /* one per namespace of cur */
	char *replaced;        /* namespaces that init-labels will remove */
};

static int
add_action(struct planner *pl, const struct pma_prov_action *a, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int
add_action(struct planner *pl, const struct pma_prov_action *a, const char *fmt, ...)
{
	struct pma_prov_plan *p = pl->plan;
	char what[512];
	va_list ap;

	if (p->n == p->cap) {
		size_t cap = p->cap ? 2 * p->cap : 8;
		struct pma_prov_action *n = realloc(p->act, cap * sizeof(*n));
		if (!n)
			return pma_ns__err(-ENOMEM, "out of memory");
		p->act = n;
		p->cap = cap;
	}
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	struct pma_prov_action *d = &p->act[p->n++];
	*d = *a;
	d->name = pma_ns__plan_str(p, a->name);
	d->region = pma_ns__plan_str(p, a->region);
	d->dev = pma_ns__plan_str(p, a->dev);
	d->what = pma_ns__plan_str(p, what);
	d->done = 0;
	d->result_dev = d->result_chardev = NULL;
	return p->oom ? pma_ns__err(-ENOMEM, "out of memory") : 0;
}

static const char *
fmt_size(uint64_t v, char *buf)
{
	return pma_size_format(v, buf, 32);
}

static uint64_t
gcd64(uint64_t a, uint64_t b)
{
	while (b) {
		uint64_t t = a % b;
		a = b;
		b = t;
	}
	return a;
}

/* The multiple every namespace size on region r must be, for alignment a. */
static uint64_t
granule(const struct pma_ns_region_info *r, uint64_t align)
{
	uint64_t ways = r->interleave_ways ? r->interleave_ways : 1;
	uint64_t g = align * ways;
	uint64_t ra = r->align ? r->align : 1;
	return g / gcd64(g, ra) * ra;
}

static const char *
label(const struct pma_prov_ns *e)
{
	return e->name ? e->name : e->dev;
}

static size_t
ns_index(const struct pma_ns_state *s, const struct pma_ns_info *n)
{
	return (size_t)(n - s->ns);
}

static struct booking *
booking_of(struct planner *pl, const char *region)
{
	for (size_t i = 0; region && i < pl->cur->nreg; i++)
		if (strcmp(pl->book[i].r->dev, region) == 0)
			return &pl->book[i];
	return NULL;
}

/* Does namespace n sit where entry e allows (region, node)? */
static int
place_ok(const struct pma_prov_ns *e, const struct pma_ns_info *n,
		const struct pma_ns_region_info *r)
{
	if (e->region && strcmp(e->region, n->region) != 0)
		return 0;
	return e->numa_node < 0 || (r && r->numa_node == e->numa_node);
}

/* place_ok, as 0 or a conflict that says why not. */
static int
check_place(const struct pma_prov_ns *e, const struct pma_ns_info *n,
		const struct pma_ns_region_info *r)
{
	if (e->region && strcmp(e->region, n->region) != 0)
		return pma_ns__err(PMA_E_CONFLICT, "%s: %s is on %s, the description puts it on %s",
				label(e), n->dev, n->region, e->region);
	if (e->numa_node >= 0 && r && r->numa_node != e->numa_node)
		return pma_ns__err(PMA_E_CONFLICT, "%s: %s is on %s, NUMA node %d; the description "
				"wants node %d", label(e), n->dev, n->region, r->numa_node,
				e->numa_node);
	return 0;
}

/* Rule 1 for an entry with dev=: keep or reconfigure that namespace. */
static int
plan_dev(struct planner *pl, const struct pma_prov_ns *e)
{
	const struct pma_ns_info *n = pma_ns__namespace_of_dev(pl->cur, e->dev);
	char b1[32], b2[32];
	int rc;

	if (!n)
		return pma_ns__err(-ENOENT, "%s: no namespace %s on this node", label(e), e->dev);
	const struct pma_ns_region_info *r = pma_ns__region(pl->cur, n->region);
	struct booking *bk = booking_of(pl, n->region);
	if ((rc = check_place(e, n, r)))
		return rc;
	if (pl->claimed[ns_index(pl->cur, n)])
		return pma_ns__err(PMA_E_CONFLICT, "%s: %s is described twice", label(e), n->dev);
	pl->claimed[ns_index(pl->cur, n)] = 1;
	if (r && r->labels != PMA_NS_LABELS_ACTIVE && bk)
		bk->ns0_claimed = 1;
	if (e->name && r && r->labels != PMA_NS_LABELS_ACTIVE)
		return pma_ns__err(PMA_E_CONFLICT, "%s: %s is on %s, which is label-less: its namespace "
				"cannot carry a name; leave the name out (open it by region or "
				"device)%s", label(e), n->dev, n->region,
				r->labels == PMA_NS_LABELS_UNINITIALIZED ?
				", or initialise labels and create a named namespace instead" : "");
	struct pma_prov_action a = {
		.name = e->name, .region = n->region, .dev = n->dev, .size = n->size,
		.align = e->align,
	};
	int keep = n->mode == PMA_NS_MODE_DEVDAX && n->align == e->align;
	int renamed = e->name && (!n->name || strcmp(n->name, e->name) != 0);
	if (keep && renamed)
		return pma_ns__err(PMA_E_CONFLICT, "%s: %s is named '%s', not '%s': pmctl does not "
				"rename namespaces in use as described", label(e), n->dev,
				n->name ? n->name : "", e->name);
	if (keep) {
		a.op = PMA_PROV_KEEP;
		return add_action(pl, &a, "%s: %s on %s is devdax, align %s%s%s: no change",
				label(e), n->dev, n->region, fmt_size(n->align, b1),
				n->chardev ? ", /dev/" : "", n->chardev ? n->chardev : "");
	}
	if (n->in_use)
		return pma_ns__err(-EBUSY, "%s: %s is in use (open, mapped or mounted): it cannot be "
				"reconfigured now", label(e), n->dev);
	if (r && n->size % granule(r, e->align)) {
		uint64_t g = granule(r, e->align);
		return pma_ns__err(PMA_E_CONFLICT, "%s: %s%s has %s (%llu bytes), not a multiple of "
				"%s (region alignment and namespace alignment): the kernel would "
				"refuse devdax on it%s", label(e),
				r->labels != PMA_NS_LABELS_ACTIVE ? "label-less " : "", n->dev,
				fmt_size(n->size, b1), (unsigned long long)n->size, fmt_size(g, b2),
				r->labels == PMA_NS_LABELS_UNINITIALIZED ?
				"; the region's DIMMs have label storage: initialise "
				"labels and create named namespaces instead" : "");
	}
	a.op = PMA_PROV_RECONFIGURE;
	a.destructive = n->mode != PMA_NS_MODE_RAW;
	if (a.destructive && !(pl->flags & PMA_NS_FORCE))
		return pma_ns__err(PMA_E_REFUSED, "%s: %s is %s%s%s: making it devdax destroys what it "
				"holds; pass force to do it", label(e), n->dev,
				pma_ns_mode_name(n->mode),
				n->mode == PMA_NS_MODE_DEVDAX ? " with align " : "",
				n->mode == PMA_NS_MODE_DEVDAX ? fmt_size(n->align, b1) : "");
	return add_action(pl, &a, "%s: reconfigure %s on %s from %s to devdax, align %s%s",
			label(e), n->dev, n->region, pma_ns_mode_name(n->mode),
			fmt_size(e->align, b2), a.destructive ? " (destroys its contents)" : "");
}

/*
 * Rule 1 for a named entry: 1 when matched (kept), 0 when it must be
 * created, negative on conflict.
 */
static int
plan_named(struct planner *pl, const struct pma_prov_ns *e)
{
	const struct pma_ns_info *match = NULL, *elsewhere = NULL;
	char b1[32], b2[32], b3[32], b4[32];
	int rc;

	for (size_t i = 0; i < pl->cur->nns; i++) {
		const struct pma_ns_info *n = &pl->cur->ns[i];
		if (!n->name || strcmp(n->name, e->name) != 0)
			continue;
		if (!place_ok(e, n, pma_ns__region(pl->cur, n->region))) {
			elsewhere = n;
			continue;
		}
		if (match)
			return pma_ns__err(PMA_E_CONFLICT, "%s: several namespaces carry this name "
					"(%s, %s): give region= or numa=", e->name, match->dev,
					n->dev);
		match = n;
	}
	if (!match && elsewhere)
		/* A namespace of that name where the description does not allow it. */
		return check_place(e, elsewhere, pma_ns__region(pl->cur, elsewhere->region));
	if (!match)
		return 0;
	if (pl->flags & PMA_NS_EXCLUSIVE)
		return pma_ns__err(-EEXIST, "%s: a namespace of this name exists (%s on %s)", e->name,
				match->dev, match->region);
	if (pl->claimed[ns_index(pl->cur, match)])
		return pma_ns__err(PMA_E_CONFLICT, "%s: %s is described twice", e->name, match->dev);
	pl->claimed[ns_index(pl->cur, match)] = 1;
	if (match->mode != PMA_NS_MODE_DEVDAX || match->align != e->align ||
			(e->size && match->size != e->size))
		return pma_ns__err(PMA_E_CONFLICT, "%s: exists as %s on %s, %s, %s%s%s; the "
				"description wants devdax, %s, align %s. pmctl does not resize or "
				"re-mode a named namespace: destroy it first (pmctl destroy %s) or "
				"change the description", e->name, match->dev, match->region,
				pma_ns_mode_name(match->mode), fmt_size(match->size, b1),
				match->align ? ", align " : "",
				match->align ? fmt_size(match->align, b2) : "",
				e->size ? fmt_size(e->size, b3) : "all free capacity",
				fmt_size(e->align, b4), e->name);
	struct pma_prov_action a = {
		.op = PMA_PROV_KEEP, .name = e->name, .region = match->region, .dev = match->dev,
		.size = match->size, .align = match->align,
	};
	rc = add_action(pl, &a, "%s: present as %s on %s (devdax, %s, align %s%s%s): no change",
			e->name, match->dev, match->region, fmt_size(match->size, b1),
			fmt_size(match->align, b2), match->chardev ? ", /dev/" : "",
			match->chardev ? match->chardev : "");
	return rc ? rc : 1;
}

/* The raw label-less namespace of a region that init-labels would remove, or NULL. */
static const struct pma_ns_info *
labelless_ns(const struct pma_ns_state *s, const char *region)
{
	for (size_t i = 0; i < s->nns; i++)
		if (s->ns[i].region && strcmp(s->ns[i].region, region) == 0)
			return &s->ns[i];
	return NULL;
}

/* Can entry e be created on booking bk?  Fills *size; 0, or why not (negative). */
static int
fits(struct planner *pl, const struct pma_prov_ns *e, struct booking *bk, uint64_t *size,
		int quiet)
{
	const struct pma_ns_region_info *r = bk->r;
	char b1[32], b2[32], b3[32];

	if (!r->type || strcmp(r->type, "pmem") != 0)
		return quiet ? -ENODEV : pma_ns__err(-ENODEV, "%s: %s is a %s region: devdax needs "
				"pmem", label(e), r->dev, r->type ? r->type : "unknown");
	if (!r->enabled || r->readonly)
		return quiet ? -ENODEV : pma_ns__err(-ENODEV, "%s: %s is %s", label(e), r->dev,
				r->readonly ? "read-only" : "disabled");
	if (bk->labels == PMA_NS_LABELS_NONE)
		return quiet ? -ENODEV : pma_ns__err(PMA_E_CONFLICT, "%s: %s is label-less (its DIMMs "
				"have no label storage): it holds one namespace, namespace0.0, "
				"which cannot be named or divided; describe it with "
				"dev=namespace0.0 and no name", label(e), r->dev);
	if (bk->labels == PMA_NS_LABELS_UNINITIALIZED) {
		if (!(pl->flags & PMA_NS_INIT_LABELS) && !pma_ns__spec_init_allowed(pl->want, r->dev))
			return quiet ? -ENODEV : pma_ns__err(PMA_E_CONFLICT, "%s: %s has no namespace "
					"labels yet (label-less), and named namespaces need them: "
					"allow init-labels for it (pmctl provision --init-labels)",
					label(e), r->dev);
		if (bk->ns0_claimed)
			return quiet ? -ENODEV : pma_ns__err(PMA_E_CONFLICT, "%s: %s is label-less and "
					"its namespace is taken over by a dev= entry: no room for "
					"named namespaces", label(e), r->dev);
		const struct pma_ns_info *n0 = labelless_ns(pl->cur, r->dev);
		if (n0 && n0->in_use)
			return quiet ? -EBUSY : pma_ns__err(-EBUSY, "%s: initialising labels on %s "
					"would remove %s, which is in use", label(e), r->dev,
					n0->dev);
		if (n0 && n0->mode != PMA_NS_MODE_RAW && !(pl->flags & PMA_NS_FORCE))
			return quiet ? PMA_E_REFUSED : pma_ns__err(PMA_E_REFUSED, "%s: initialising "
					"labels on %s would remove %s, a %s namespace: pass force",
					label(e), r->dev, n0->dev, pma_ns_mode_name(n0->mode));
	}
	uint64_t g = granule(r, e->align);
	uint64_t room = bk->extent;
	if (e->size == 0) {
		*size = room / g * g;
		if (*size < PMA_NS_MIN_SIZE || *size < g)
			return quiet ? -ENOSPC : pma_ns__err(-ENOSPC, "%s: %s has %s free in one piece: "
					"too little for a namespace", label(e), r->dev,
					fmt_size(room, b1));
		return 0;
	}
	if (e->size % g) {
		char b4[32], b5[32];
		return quiet ? -EINVAL : pma_ns__err(-EINVAL, "%s: size %s is not a multiple of %s "
				"on %s (region alignment %s, %u-way interleave, align %s): "
				"did you mean %s?", label(e), fmt_size(e->size, b1),
				fmt_size(g, b2), r->dev, fmt_size(r->align, b3),
				r->interleave_ways ? r->interleave_ways : 1,
				fmt_size(e->align, b4),
				fmt_size(e->size / g ? e->size / g * g : g, b5));
	}
	if (e->size > room)
		return quiet ? -ENOSPC : pma_ns__err(-ENOSPC, "%s: %s has %s free in one piece, %s "
				"needed", label(e), r->dev, fmt_size(room, b1),
				fmt_size(e->size, b2));
	*size = e->size;
	return 0;
}

/* Rule 2: create entry e. */
static int
plan_create(struct planner *pl, const struct pma_prov_ns *e)
{
	struct booking *bk = NULL;
	uint64_t size = 0;
	char b1[32], b2[32];
	int rc;

	if (e->region) {
		bk = booking_of(pl, e->region);
		if (!bk)
			return pma_ns__err(-ENOENT, "%s: no region %s on this node", e->name, e->region);
		if (e->numa_node >= 0 && bk->r->numa_node != e->numa_node)
			return pma_ns__err(PMA_E_CONFLICT, "%s: %s is on NUMA node %d, the description "
					"wants node %d", e->name, e->region, bk->r->numa_node,
					e->numa_node);
		if ((rc = fits(pl, e, bk, &size, 0)))
			return rc;
	} else {
		/* Labelled regions first: initialising labels only when nothing else fits. */
		size_t on_node = 0;
		for (int pass = 0; pass < 2 && !bk; pass++)
			for (size_t i = 0; i < pl->cur->nreg && !bk; i++) {
				struct booking *b = &pl->book[i];
				if (e->numa_node >= 0 && b->r->numa_node != e->numa_node)
					continue;
				if (pass == 0)
					on_node++;
				if ((b->labels == PMA_NS_LABELS_ACTIVE) != (pass == 0))
					continue;
				if (fits(pl, e, b, &size, 1) == 0)
					bk = b;
			}
		if (!on_node)
			return pma_ns__err(-ENODEV, "%s: no NVDIMM region on NUMA node %d", e->name,
					e->numa_node);
		if (!bk) {
			/* Explain with the first region of the node. */
			for (size_t i = 0; i < pl->cur->nreg; i++) {
				struct booking *b = &pl->book[i];
				if (e->numa_node >= 0 && b->r->numa_node != e->numa_node)
					continue;
				rc = fits(pl, e, b, &size, 0);
				if (!rc)
					rc = pma_ns__err(-ENOSPC, "%s: no room", e->name);
				if (on_node == 1)
					return rc;
				return pma_ns__err_prefix(rc, "%s: none of the %zu regions%s can hold "
						"it; the first says", e->name, on_node,
						e->numa_node >= 0 ? " on that node" : "");
			}
		}
	}
	const struct pma_ns_region_info *r = bk->r;
	if (bk->labels == PMA_NS_LABELS_UNINITIALIZED && !bk->init_planned) {
		const struct pma_ns_info *n0 = labelless_ns(pl->cur, r->dev);
		struct pma_prov_action a = {
			.op = PMA_PROV_INIT_LABELS, .region = r->dev, .dev = n0 ? n0->dev : NULL,
			.destructive = n0 && n0->mode != PMA_NS_MODE_RAW,
		};
		rc = add_action(pl, &a, "%s: initialise namespace labels (label-less until now%s%s%s "
				"goes away; its bytes are not erased)", r->dev, n0 ? "; " : "",
				n0 ? n0->dev : "", n0 ? (n0->mode == PMA_NS_MODE_RAW ?
				", raw and unused," : ", unused,") : "");
		if (rc)
			return rc;
		if (n0)
			pl->replaced[ns_index(pl->cur, n0)] = 1;
		bk->init_planned = 1;
		bk->labels = PMA_NS_LABELS_ACTIVE;
		/* Recompute the size now that the whole region is free. */
		if ((rc = fits(pl, e, bk, &size, 0)))
			return rc;
	}
	bk->extent -= size;
	bk->avail = bk->avail > size ? bk->avail - size : 0;
	if (bk->extent > bk->avail)
		bk->extent = bk->avail;
	struct pma_prov_action a = {
		.op = PMA_PROV_CREATE, .name = e->name, .region = r->dev, .size = size,
		.align = e->align,
	};
	char node[32] = "";
	if (r->numa_node >= 0)
		snprintf(node, sizeof(node), " (NUMA node %d)", r->numa_node);
	return add_action(pl, &a, "%s: create devdax namespace on %s%s, %s, align %s", e->name,
			r->dev, node, fmt_size(size, b1), fmt_size(e->align, b2));
}

int
pma_prov_plan_new(const struct pma_ns_state *cur, const struct pma_prov_spec *want,
		unsigned flags, struct pma_prov_plan **out)
{
	struct planner pl = {.cur = cur, .want = want, .flags = flags};
	char b1[32];
	int rc = 0;

	if (!cur || !want || !out)
		return pma_ns__err(-EINVAL, "pma_prov_plan_new: state, description and out are required");
	*out = NULL;
	if (cur->nreg == 0)
		return pma_ns__err(-ENODEV, "nothing to provision: %s",
				cur->absent ? cur->absent : "no NVDIMM region on this machine");
	if (pma_prov_spec_count(want) == 0)
		return pma_ns__err(-EINVAL, "the description lists no namespace");
	pl.plan = calloc(1, sizeof(*pl.plan));
	pl.book = calloc(cur->nreg, sizeof(*pl.book));
	pl.claimed = calloc(cur->nns + 1, 1);
	pl.replaced = calloc(cur->nns + 1, 1);
	if (!pl.plan || !pl.book || !pl.claimed || !pl.replaced) {
		rc = pma_ns__err(-ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < cur->nreg; i++) {
		struct booking *b = &pl.book[i];
		b->r = &cur->reg[i];
		b->labels = b->r->labels;
		if (b->labels == PMA_NS_LABELS_ACTIVE) {
			b->avail = b->r->available_size;
			b->extent = b->r->max_available_extent;
		} else {
			/* Once labelled, the whole region is free (the label-less view goes). */
			b->avail = b->extent = b->r->size;
		}
	}
	/* Rule 1 first for every entry, so that creations see what is claimed. */
	size_t n = pma_prov_spec_count(want);
	char *create = calloc(n + 1, 1);
	if (!create) {
		rc = pma_ns__err(-ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < n && !rc; i++) {
		const struct pma_prov_ns *e = pma_prov_spec_get(want, i);
		if (e->dev) {
			rc = plan_dev(&pl, e);
		} else {
			rc = plan_named(&pl, e);
			if (rc == 0)
				create[i] = 1;
			else if (rc == 1)
				rc = 0;
		}
	}
	for (size_t i = 0; i < n && !rc; i++)
		if (create[i])
			rc = plan_create(&pl, pma_prov_spec_get(want, i));
	free(create);
	for (size_t i = 0; i < cur->nns && !rc; i++) {
		const struct pma_ns_info *ns = &cur->ns[i];
		if (pl.claimed[i] || pl.replaced[i])
			continue;
		struct pma_prov_action a = {
			.op = PMA_PROV_UNMANAGED, .name = ns->name, .region = ns->region,
			.dev = ns->dev, .size = ns->size, .align = ns->align,
		};
		rc = add_action(&pl, &a, "%s%s%s%s on %s (%s, %s): not described, left alone",
				ns->dev, ns->name ? " (" : "", ns->name ? ns->name : "",
				ns->name ? ")" : "", ns->region, pma_ns_mode_name(ns->mode),
				fmt_size(ns->size, b1));
	}
out:
	free(pl.book);
	free(pl.claimed);
	free(pl.replaced);
	if (rc) {
		pma_prov_plan_free(&pl.plan);
		return rc;
	}
	*out = pl.plan;
	return 0;
}
