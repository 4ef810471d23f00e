/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ns_json.c -- listings and plans as JSON (json-c), in ndctl's style:
 * the field names of `ndctl list -BRN` and `daxctl list`, sizes in bytes
 * (or "992.00 MiB" strings with PMA_NS_JSON_HUMAN, like ndctl -u), node
 * numbers left out when the platform reports none.  A listing read back
 * with pma_ns_state_from_json() gives the same state, which is how plans
 * are tested against described nodes.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "pmalloc_ns.h"
#include "errmsg.h"
#include "ns_internal.h"

#define PRINT_FLAGS (JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE)

/* ----------------------------------------------------------- writing */

struct out {
	unsigned flags;
	int oom;
};

static void
put(struct out *o, json_object *obj, const char *key, json_object *val)
{
	if (!val) {
		o->oom = 1;
		return;
	}
	if (json_object_object_add(obj, key, val))
		o->oom = 1;
}

static void
put_str(struct out *o, json_object *obj, const char *key, const char *v)
{
	if (v)
		put(o, obj, key, json_object_new_string(v));
}

static void
put_size(struct out *o, json_object *obj, const char *key, uint64_t v)
{
	char buf[32];

	if (o->flags & PMA_NS_JSON_HUMAN)
		put(o, obj, key, json_object_new_string(pma_size_format(v, buf, sizeof(buf))));
	else
		put(o, obj, key, json_object_new_uint64(v)); /* exact: a u64 read back is the same u64 */
}

static void
put_node(struct out *o, json_object *obj, const char *key, int node)
{
	if (node >= 0)
		put(o, obj, key, json_object_new_int(node));
}

static json_object *
region_json(struct out *o, const struct pma_ns_state *s, const struct pma_ns_region_info *r)
{
	json_object *j = json_object_new_object(), *nss = json_object_new_array();

	if (!j || !nss) {
		json_object_put(j);
		json_object_put(nss);
		o->oom = 1;
		return NULL;
	}
	put_str(o, j, "dev", r->dev);
	put_size(o, j, "size", r->size);
	put_size(o, j, "align", r->align);
	put_size(o, j, "available_size", r->available_size);
	put_size(o, j, "max_available_extent", r->max_available_extent);
	put_str(o, j, "type", r->type);
	put(o, j, "interleave_ways", json_object_new_int((int)r->interleave_ways));
	put_node(o, j, "numa_node", r->numa_node);
	put_node(o, j, "target_node", r->target_node);
	put_str(o, j, "persistence_domain", r->persistence_domain);
	put_str(o, j, "labels", pma_ns_labels_name(r->labels));
	if (!r->enabled)
		put_str(o, j, "state", "disabled");
	if (r->readonly)
		put(o, j, "ro", json_object_new_boolean(1));
	for (size_t i = 0; i < s->nns; i++) {
		const struct pma_ns_info *n = &s->ns[i];
		if (!n->region || strcmp(n->region, r->dev) != 0)
			continue;
		json_object *jn = json_object_new_object();
		if (!jn || json_object_array_add(nss, jn)) {
			json_object_put(jn);
			o->oom = 1;
			break;
		}
		put_str(o, jn, "dev", n->dev);
		put_str(o, jn, "mode", pma_ns_mode_name(n->mode));
		put_size(o, jn, "size", n->size);
		put_str(o, jn, "uuid", n->uuid);
		put_str(o, jn, "name", n->name);
		if (n->align)
			put_size(o, jn, "align", n->align);
		put_str(o, jn, "chardev", n->chardev);
		put_str(o, jn, "blockdev", n->blockdev);
		put_node(o, jn, "numa_node", n->numa_node);
		put_node(o, jn, "target_node", n->target_node);
		if (!n->enabled)
			put_str(o, jn, "state", "disabled");
		put(o, jn, "in_use", json_object_new_boolean(n->in_use));
	}
	put(o, j, "namespaces", nss);
	return j;
}

static json_object *
dax_json(struct out *o, const struct pma_ns_state *s)
{
	json_object *arr = json_object_new_array();

	if (!arr) {
		o->oom = 1;
		return NULL;
	}
	for (size_t i = 0; i < s->ndax; i++) {
		const struct pma_ns_dax_info *d = &s->dax[i];
		json_object *j = json_object_new_object();
		if (!j || json_object_array_add(arr, j)) {
			json_object_put(j);
			o->oom = 1;
			break;
		}
		put_str(o, j, "chardev", d->dev);
		put_str(o, j, "path", d->path);
		put_size(o, j, "size", d->size);
		put_size(o, j, "align", d->align);
		put_node(o, j, "numa_node", d->numa_node);
		put_node(o, j, "target_node", d->target_node);
		put_str(o, j, "mode", d->mode);
		put_str(o, j, "region", d->region);
		put_str(o, j, "namespace", d->namespace);
		put(o, j, "in_use", json_object_new_boolean(d->in_use));
	}
	return arr;
}

static int
emit(json_object *root, struct out *o, char **json)
{
	*json = NULL;
	if (!o->oom) {
		const char *t = json_object_to_json_string_ext(root, PRINT_FLAGS);
		if (t)
			*json = strdup(t);
	}
	json_object_put(root);
	return *json ? 0 : pma_ns__err(-ENOMEM, "out of memory writing JSON");
}

int
pma_ns_state_to_json(const struct pma_ns_state *s, unsigned flags, char **json)
{
	struct out o = {.flags = flags};

	if (!s || !json)
		return pma_ns__err(-EINVAL, "pma_ns_state_to_json: state and json are required");
	if (flags & PMA_NS_JSON_DAX) {
		json_object *arr = dax_json(&o, s);
		if (!arr)
			return pma_ns__err(-ENOMEM, "out of memory writing JSON");
		return emit(arr, &o, json);
	}
	json_object *root = json_object_new_object(), *buses = json_object_new_array();
	if (!root || !buses) {
		json_object_put(root);
		json_object_put(buses);
		return pma_ns__err(-ENOMEM, "out of memory writing JSON");
	}
	put(&o, root, "buses", buses);
	for (size_t b = 0; b < s->nbus && !o.oom; b++) {
		json_object *jb = json_object_new_object(), *regs = json_object_new_array();
		if (!jb || !regs || json_object_array_add(buses, jb)) {
			json_object_put(jb);
			json_object_put(regs);
			o.oom = 1;
			break;
		}
		put_str(&o, jb, "dev", s->bus[b].dev);
		put_str(&o, jb, "provider", s->bus[b].provider);
		put(&o, jb, "regions", regs);
		for (size_t r = 0; r < s->nreg && !o.oom; r++) {
			if (!s->reg[r].bus || strcmp(s->reg[r].bus, s->bus[b].dev) != 0)
				continue;
			json_object *jr = region_json(&o, s, &s->reg[r]);
			if (jr && json_object_array_add(regs, jr)) {
				json_object_put(jr);
				o.oom = 1;
			}
		}
	}
	put(&o, root, "dax_devices", dax_json(&o, s));
	return emit(root, &o, json);
}

int
pma_prov_plan_to_json(const struct pma_prov_plan *p, unsigned flags, char **json)
{
	struct out o = {.flags = flags};
	struct pma_prov_action a;

	if (!p || !json)
		return pma_ns__err(-EINVAL, "pma_prov_plan_to_json: plan and json are required");
	json_object *root = json_object_new_object(), *arr = json_object_new_array();
	if (!root || !arr) {
		json_object_put(root);
		json_object_put(arr);
		return pma_ns__err(-ENOMEM, "out of memory writing JSON");
	}
	put(&o, root, "changes", json_object_new_int64((int64_t)pma_prov_plan_changes(p)));
	put(&o, root, "actions", arr);
	for (size_t i = 0; i < pma_prov_plan_nactions(p) && !o.oom; i++) {
		pma_prov_plan_action(p, i, &a);
		json_object *j = json_object_new_object();
		if (!j || json_object_array_add(arr, j)) {
			json_object_put(j);
			o.oom = 1;
			break;
		}
		put_str(&o, j, "action", pma_prov_op_name(a.op));
		put_str(&o, j, "name", a.name);
		put_str(&o, j, "region", a.region);
		put_str(&o, j, "dev", a.result_dev ? a.result_dev : a.dev);
		put_str(&o, j, "chardev", a.result_chardev);
		if (a.size)
			put_size(&o, j, "size", a.size);
		if (a.align)
			put_size(&o, j, "align", a.align);
		if (a.destructive)
			put(&o, j, "destructive", json_object_new_boolean(1));
		if (a.op != PMA_PROV_KEEP && a.op != PMA_PROV_UNMANAGED)
			put(&o, j, "done", json_object_new_boolean(a.done));
		put_str(&o, j, "what", a.what);
	}
	return emit(root, &o, json);
}

/* ----------------------------------------------------------- reading */

struct in {
	const char *where; /* for messages */
	int err;
};

static const char *
get_str(json_object *o, const char *key)
{
	json_object *v;

	if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
		return NULL;
	return json_object_get_string(v);
}

static uint64_t
get_u64(struct in *in, json_object *o, const char *key, uint64_t dflt)
{
	json_object *v;

	if (!json_object_object_get_ex(o, key, &v) || json_object_is_type(v, json_type_null))
		return dflt;
	if (json_object_is_type(v, json_type_string)) {
		uint64_t x;
		if (pma_size_parse(json_object_get_string(v), &x) == 0)
			return x;
	} else if (json_object_is_type(v, json_type_int) && json_object_get_int64(v) >= 0) {
		/* get_int64 saturates above INT64_MAX (still >= 0); get_uint64 has the value. */
		return json_object_get_uint64(v);
	}
	if (!in->err)
		in->err = pma_ns__err(-EINVAL, "%s: field \"%s\" is not a size", in->where, key);
	return dflt;
}

static int
get_int(json_object *o, const char *key, int dflt)
{
	json_object *v;

	if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_int))
		return dflt;
	return json_object_get_int(v);
}

static int
get_bool(json_object *o, const char *key, int dflt)
{
	json_object *v;

	if (!json_object_object_get_ex(o, key, &v))
		return dflt;
	return json_object_get_boolean(v);
}

static json_object *
get_array(json_object *o, const char *key)
{
	json_object *v;

	if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_array))
		return NULL;
	return v;
}

static enum pma_ns_mode
mode_of(const char *m)
{
	static const enum pma_ns_mode all[] = {PMA_NS_MODE_RAW, PMA_NS_MODE_FSDAX,
		PMA_NS_MODE_DEVDAX, PMA_NS_MODE_SECTOR};
	for (size_t i = 0; m && i < sizeof(all) / sizeof(all[0]); i++)
		if (strcmp(m, pma_ns_mode_name(all[i])) == 0)
			return all[i];
	if (m && (strcmp(m, "memory") == 0))
		return PMA_NS_MODE_FSDAX;
	if (m && (strcmp(m, "dax") == 0))
		return PMA_NS_MODE_DEVDAX;
	if (m && (strcmp(m, "safe") == 0))
		return PMA_NS_MODE_SECTOR;
	return PMA_NS_MODE_UNKNOWN;
}

static enum pma_ns_labels
labels_of(const char *l)
{
	if (l && strcmp(l, "none") == 0)
		return PMA_NS_LABELS_NONE;
	if (l && strcmp(l, "uninitialized") == 0)
		return PMA_NS_LABELS_UNINITIALIZED;
	return PMA_NS_LABELS_ACTIVE;
}

static int
read_region(struct in *in, struct pma_ns_state *s, json_object *jr, const char *bus, size_t idx)
{
	char where[96];
	struct pma_ns_region_info r = {0};

	if (!json_object_is_type(jr, json_type_object))
		return pma_ns__err(-EINVAL, "%s: region %zu is not an object", in->where, idx);
	r.dev = get_str(jr, "dev");
	if (!r.dev)
		return pma_ns__err(-EINVAL, "%s: region %zu has no \"dev\"", in->where, idx);
	/* Device names are unique on a node; the listing groups children by them. */
	if (pma_ns__region(s, r.dev))
		return pma_ns__err(-EINVAL, "%s: region %s is listed twice", in->where, r.dev);
	snprintf(where, sizeof(where), "%s", r.dev);
	const char *outer = in->where;
	in->where = where;
	r.bus = bus;
	r.type = get_str(jr, "type");
	if (!r.type)
		r.type = "pmem";
	r.size = get_u64(in, jr, "size", 0);
	r.align = get_u64(in, jr, "align", 0);
	r.available_size = get_u64(in, jr, "available_size", 0);
	r.max_available_extent = get_u64(in, jr, "max_available_extent", r.available_size);
	r.interleave_ways = (unsigned)get_int(jr, "interleave_ways", 1);
	r.numa_node = get_int(jr, "numa_node", -1);
	r.target_node = get_int(jr, "target_node", -1);
	r.persistence_domain = get_str(jr, "persistence_domain");
	r.labels = labels_of(get_str(jr, "labels"));
	const char *st = get_str(jr, "state");
	r.enabled = !(st && strcmp(st, "disabled") == 0);
	r.readonly = get_bool(jr, "ro", 0);
	int rc = in->err ? in->err : pma_ns__add_region(s, &r);
	json_object *nss = get_array(jr, "namespaces");
	for (size_t i = 0; !rc && nss && i < json_object_array_length(nss); i++) {
		json_object *jn = json_object_array_get_idx(nss, i);
		struct pma_ns_info n = {0};
		if (!json_object_is_type(jn, json_type_object) || !(n.dev = get_str(jn, "dev"))) {
			rc = pma_ns__err(-EINVAL, "%s: namespace %zu has no \"dev\"", where, i);
			break;
		}
		if (pma_ns__namespace(s, n.dev)) {
			rc = pma_ns__err(-EINVAL, "%s: namespace %s is listed twice", where, n.dev);
			break;
		}
		n.region = r.dev;
		n.mode = mode_of(get_str(jn, "mode"));
		n.size = get_u64(in, jn, "size", 0);
		n.align = get_u64(in, jn, "align", 0);
		n.uuid = get_str(jn, "uuid");
		n.name = get_str(jn, "name");
		n.chardev = get_str(jn, "chardev");
		n.blockdev = get_str(jn, "blockdev");
		n.numa_node = get_int(jn, "numa_node", r.numa_node);
		n.target_node = get_int(jn, "target_node", r.target_node);
		st = get_str(jn, "state");
		n.enabled = !(st && strcmp(st, "disabled") == 0);
		n.in_use = get_bool(jn, "in_use", 0);
		rc = in->err ? in->err : pma_ns__add_ns(s, &n);
	}
	in->where = outer;
	return rc;
}

int
pma_ns_state_from_json(const char *text, struct pma_ns_state **out)
{
	enum json_tokener_error jerr = json_tokener_success;
	struct pma_ns_state *s = NULL;
	struct in in = {.where = "listing"};
	int rc;

	if (!text || !out)
		return pma_ns__err(-EINVAL, "pma_ns_state_from_json: text and out are required");
	*out = NULL;
	json_object *root = json_tokener_parse_verbose(text, &jerr);
	if (!root)
		return pma_ns__err(-EINVAL, "not JSON: %s", json_tokener_error_desc(jerr));
	json_object *buses = NULL;
	if (json_object_is_type(root, json_type_object))
		buses = get_array(root, "buses");
	if (!buses) {
		json_object_put(root);
		return pma_ns__err(-EINVAL, "not a pmctl listing: expected an object with \"buses\"");
	}
	rc = pma_ns__state_new(&s);
	for (size_t b = 0; !rc && b < json_object_array_length(buses); b++) {
		json_object *jb = json_object_array_get_idx(buses, b);
		struct pma_ns_bus_info bi = {0};
		if (!json_object_is_type(jb, json_type_object)) {
			rc = pma_ns__err(-EINVAL, "bus %zu is not an object", b);
			break;
		}
		bi.dev = get_str(jb, "dev");
		bi.provider = get_str(jb, "provider");
		char fallback[32];
		if (!bi.dev) {
			snprintf(fallback, sizeof(fallback), "ndbus%zu", b);
			bi.dev = fallback;
		}
		for (size_t k = 0; k < s->nbus; k++)
			if (strcmp(s->bus[k].dev, bi.dev) == 0)
				rc = pma_ns__err(-EINVAL, "bus %s is listed twice", bi.dev);
		if (rc)
			break;
		rc = pma_ns__add_bus(s, &bi);
		const char *bname = rc ? NULL : s->bus[s->nbus - 1].dev;
		json_object *regs = get_array(jb, "regions");
		for (size_t r = 0; !rc && regs && r < json_object_array_length(regs); r++)
			rc = read_region(&in, s, json_object_array_get_idx(regs, r), bname, r);
	}
	json_object *daxs = get_array(root, "dax_devices");
	for (size_t i = 0; !rc && daxs && i < json_object_array_length(daxs); i++) {
		json_object *jd = json_object_array_get_idx(daxs, i);
		struct pma_ns_dax_info d = {0};
		char path[64];
		if (!json_object_is_type(jd, json_type_object) || !(d.dev = get_str(jd, "chardev"))) {
			rc = pma_ns__err(-EINVAL, "dax device %zu has no \"chardev\"", i);
			break;
		}
		for (size_t k = 0; k < s->ndax; k++)
			if (strcmp(s->dax[k].dev, d.dev) == 0)
				rc = pma_ns__err(-EINVAL, "dax device %s is listed twice", d.dev);
		if (rc)
			break;
		d.path = get_str(jd, "path");
		if (!d.path) {
			snprintf(path, sizeof(path), "/dev/%s", d.dev);
			d.path = path;
		}
		in.where = d.dev;
		d.size = get_u64(&in, jd, "size", 0);
		d.align = get_u64(&in, jd, "align", 0);
		d.numa_node = get_int(jd, "numa_node", -1);
		d.target_node = get_int(jd, "target_node", -1);
		d.mode = get_str(jd, "mode");
		d.region = get_str(jd, "region");
		d.namespace = get_str(jd, "namespace");
		d.in_use = get_bool(jd, "in_use", 0);
		rc = in.err ? in.err : pma_ns__add_dax(s, &d);
	}
	json_object_put(root);
	if (!rc)
		rc = pma_ns__finish(s);
	if (rc) {
		pma_ns_state_free(&s);
		return rc;
	}
	*out = s;
	return 0;
}
