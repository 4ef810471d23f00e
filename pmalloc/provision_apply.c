/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * provision_apply.c -- carrying out a plan through libndctl, and the
 * one-off operations built on the same path: create one namespace,
 * reconfigure one, destroy one.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pmalloc_ns.h"
#include "errmsg.h"
#include "ns_internal.h"

int
pma_prov_plan_apply(struct pma_prov_plan *p)
{
	struct ndctl_ctx *ctx = NULL;
	int rc;

	if (!p)
		return pma_ns__err(-EINVAL, "pma_prov_plan_apply: plan is required");
	if (pma_prov_plan_changes(p) == 0)
		return 0;
	if ((rc = pma_ns__ctx_new(&ctx)))
		return rc;
	for (size_t i = 0; i < p->n && !rc; i++) {
		struct pma_prov_action *a = &p->act[i];
		char dev[PMA_NS_DEVNAME] = "", chardev[PMA_NS_DEVNAME] = "";

		if (a->done)
			continue;
		switch (a->op) {
		case PMA_PROV_INIT_LABELS:
			rc = pma_ns__init_labels(ctx, a->region);
			break;
		case PMA_PROV_CREATE:
			rc = pma_ns__create(ctx, a->region, a->name, a->size, a->align, dev, chardev);
			break;
		case PMA_PROV_RECONFIGURE:
			rc = pma_ns__reconfigure(ctx, a->dev, a->name, a->align, chardev);
			snprintf(dev, sizeof(dev), "%s", a->dev);
			break;
		default:
			continue;
		}
		if (rc) {
			rc = pma_ns__err_prefix(rc, "%s", a->what);
			break;
		}
		a->done = 1;
		a->result_dev = pma_ns__plan_str(p, dev[0] ? dev : NULL);
		a->result_chardev = pma_ns__plan_str(p, chardev[0] ? chardev : NULL);
		if (p->oom)
			rc = pma_ns__err(-ENOMEM, "out of memory");
	}
	pma_ns__ctx_free(&ctx);
	return rc;
}

/* The namespace `selector` names in s: device, dax device or (unique) name. */
static int
find_one(const struct pma_ns_state *s, const char *selector, const struct pma_ns_info **out)
{
	const struct pma_ns_info *n = pma_ns__namespace_of_dev(s, selector);
	char list[256] = "";
	size_t found = 0;

	if (n) {
		*out = n;
		return 0;
	}
	for (size_t i = 0; i < s->nns; i++) {
		if (!s->ns[i].name || strcmp(s->ns[i].name, selector) != 0)
			continue;
		if (found++ == 0)
			n = &s->ns[i];
		size_t l = strlen(list);
		snprintf(list + l, sizeof(list) - l, "%s%s on %s", l ? ", " : "", s->ns[i].dev,
				s->ns[i].region);
	}
	if (found > 1)
		return pma_ns__err(-EINVAL, "'%s' names %zu namespaces (%s): give the device "
				"(namespaceX.Y)", selector, found, list);
	if (!found) {
		for (size_t i = 0; i < s->nns; i++) {
			size_t l = strlen(list);
			snprintf(list + l, sizeof(list) - l, "%s%s%s%s%s", l ? ", " : "",
					s->ns[i].dev, s->ns[i].name ? " (" : "",
					s->ns[i].name ? s->ns[i].name : "", s->ns[i].name ? ")" : "");
		}
		return pma_ns__err(-ENOENT, "no namespace '%s' (namespaces: %s)", selector,
				list[0] ? list : "none");
	}
	*out = n;
	return 0;
}

/* Reads the state through ctx; -ENODEV when the machine has no NVDIMM region. */
static int
read_with(struct ndctl_ctx **ctx, struct pma_ns_state **s)
{
	int rc = pma_ns__state_new(s);

	if (!rc)
		rc = pma_ns__ctx_new(ctx);
	if (!rc)
		rc = pma_ns__state_fill(*ctx, *s);
	if (!rc && (*s)->nreg == 0)
		rc = pma_ns__err(-ENODEV, "%s", (*s)->absent);
	return rc;
}

int
pma_ns_destroy(const char *selector, unsigned flags)
{
	struct ndctl_ctx *ctx = NULL;
	struct pma_ns_state *s = NULL;
	const struct pma_ns_info *n = NULL;
	char path[PMA_NS_DEVNAME + 8];
	int rc;

	if (!selector || !*selector)
		return pma_ns__err(-EINVAL, "pma_ns_destroy: which namespace?");
	rc = read_with(&ctx, &s);
	if (!rc)
		rc = find_one(s, selector, &n);
	if (rc)
		goto out;
	if (n->in_use) {
		rc = pma_ns__err(-EBUSY, "%s (%s) is in use: a process has it open or mapped, or it is "
				"mounted; it cannot be destroyed while in use, force or not", n->dev,
				n->chardev ? n->chardev : n->blockdev ? n->blockdev : "no device");
		goto out;
	}
	if (!(flags & PMA_NS_FORCE)) {
		if (n->mode == PMA_NS_MODE_FSDAX || n->mode == PMA_NS_MODE_SECTOR) {
			rc = pma_ns__err(PMA_E_REFUSED, "%s is %s: it may hold a file system; pass force "
					"to destroy it", n->dev, pma_ns_mode_name(n->mode));
			goto out;
		}
		if (n->mode == PMA_NS_MODE_DEVDAX && n->chardev) {
			snprintf(path, sizeof(path), "/dev/%s", n->chardev);
			int pool = pma_ns__dax_holds_pool(path, n->align);
			if (pool == 1) {
				rc = pma_ns__err(PMA_E_REFUSED, "%s (%s) holds a pmckpt pool: destroying "
						"it loses every checkpoint in it; pass force to do "
						"it", n->dev, path);
				goto out;
			}
			if (pool < 0) {
				rc = pma_ns__err(PMA_E_REFUSED, "cannot tell whether %s (%s) holds a "
						"pmckpt pool (%s); pass force to destroy it anyway",
						n->dev, path, strerror(-pool));
				goto out;
			}
		}
	}
	rc = pma_ns__destroy(ctx, n->dev);
out:
	pma_ns_state_free(&s);
	pma_ns__ctx_free(&ctx);
	return rc;
}

/* Reads the node, plans spec with flags, applies; the first changing (or kept) action's chardev. */
static int
converge(struct pma_prov_spec *spec, unsigned flags, char *chardev, size_t len)
{
	struct pma_ns_state *s = NULL;
	struct pma_prov_plan *p = NULL;
	struct pma_prov_action a;
	int rc;

	rc = pma_ns_state_read(&s);
	if (!rc && s->nreg == 0)
		rc = pma_ns__err(-ENODEV, "%s", s->absent);
	if (!rc)
		rc = pma_prov_plan_new(s, spec, flags, &p);
	if (!rc)
		rc = pma_prov_plan_apply(p);
	if (!rc && chardev && len) {
		chardev[0] = '\0';
		for (size_t i = 0; i < p->n; i++) {
			pma_prov_plan_action(p, i, &a);
			const char *c = a.result_chardev;
			if (!c && a.op == PMA_PROV_KEEP) {
				const struct pma_ns_info *n = pma_ns__namespace(s, a.dev);
				c = n ? n->chardev : NULL;
			}
			if (c && (a.op != PMA_PROV_UNMANAGED && a.op != PMA_PROV_INIT_LABELS)) {
				if ((size_t)snprintf(chardev, len, "%s", c) >= len)
					rc = pma_ns__err(-ENAMETOOLONG, "%s does not fit in %zu bytes",
							c, len);
				break;
			}
		}
	}
	pma_prov_plan_free(&p);
	pma_ns_state_free(&s);
	return rc;
}

int
pma_ns_create(const struct pma_prov_ns *ns, unsigned flags, char *chardev, size_t len)
{
	struct pma_prov_spec *spec = NULL;
	int rc;

	if (!ns || !ns->name || ns->dev)
		return pma_ns__err(-EINVAL, "pma_ns_create: a named namespace without dev= is required");
	rc = pma_prov_spec_new(&spec);
	if (!rc)
		rc = pma_prov_spec_add(spec, ns);
	if (!rc)
		rc = converge(spec, flags | PMA_NS_EXCLUSIVE, chardev, len);
	pma_prov_spec_free(&spec);
	return rc;
}

int
pma_ns_reconfigure(const char *dev, uint64_t align, const char *name, unsigned flags,
		char *chardev, size_t len)
{
	struct pma_prov_spec *spec = NULL;
	struct pma_ns_state *s = NULL;
	const struct pma_ns_info *n = NULL;
	int rc;

	if (!dev || !*dev)
		return pma_ns__err(-EINVAL, "pma_ns_reconfigure: which namespace?");
	rc = pma_ns_state_read(&s);
	if (!rc && s->nreg == 0)
		rc = pma_ns__err(-ENODEV, "%s", s->absent);
	if (!rc)
		rc = find_one(s, dev, &n);
	if (!rc)
		rc = pma_prov_spec_new(&spec);
	if (!rc) {
		struct pma_prov_ns want = {
			.name = name, .dev = n->dev, .align = align, .numa_node = -1,
		};
		rc = pma_prov_spec_add(spec, &want);
	}
	pma_ns_state_free(&s);
	if (!rc)
		rc = converge(spec, flags & ~PMA_NS_EXCLUSIVE, chardev, len);
	pma_prov_spec_free(&spec);
	return rc;
}
