/*
 * pmctl_plan.c -- idempotence planning without hardware: described nodes
 * (JSON listings, as pmctl list --json writes them) and descriptions in,
 * the planned actions out.
 */
#include <errno.h>
#include <stdint.h>

#include "pmalloc_ns.h"
#include "tap.h"

#define MiB ((uint64_t)1 << 20)
#define GiB ((uint64_t)1 << 30)

/* A labelled, empty 1008 MiB region on node 0, with 16 MiB region alignment. */
#define R0_EMPTY "{\"dev\":\"region0\",\"size\":1073610752,\"align\":16777216," \
	"\"available_size\":1056964608,\"max_available_extent\":1056964608,\"type\":\"pmem\"," \
	"\"interleave_ways\":1,\"numa_node\":0,\"labels\":\"active\",\"namespaces\":[]}"
/* The same on node 1, 4 GiB. */
#define R1_EMPTY "{\"dev\":\"region1\",\"size\":4294967296,\"align\":16777216," \
	"\"available_size\":4294967296,\"max_available_extent\":4294967296,\"type\":\"pmem\"," \
	"\"interleave_ways\":1,\"numa_node\":1,\"labels\":\"active\",\"namespaces\":[]}"

/* region0 with ckpt0 (devdax, 496 MiB, 2 MiB) and an undescribed fsdax namespace. */
#define R0_CKPT0(mode, align, inuse) "{\"dev\":\"region0\",\"size\":1073610752," \
	"\"align\":16777216,\"available_size\":16777216,\"max_available_extent\":16777216," \
	"\"type\":\"pmem\",\"interleave_ways\":1,\"numa_node\":0,\"labels\":\"active\"," \
	"\"namespaces\":[{\"dev\":\"namespace0.0\",\"mode\":\"" mode "\",\"size\":520093696," \
	"\"uuid\":\"b99efd21-05a4-42c6-a4b4-703c8e045f48\",\"name\":\"ckpt0\",\"align\":" align "," \
	"\"chardev\":\"dax0.0\",\"in_use\":" inuse "}," \
	"{\"dev\":\"namespace0.1\",\"mode\":\"fsdax\",\"size\":520093696,\"name\":\"scratch\"," \
	"\"align\":2097152,\"blockdev\":\"pmem0.1\",\"in_use\":true}]}"

/* Label-less region0 (labels: none or uninitialized) with its namespace0.0. */
#define R0_LABELLESS(labels, mode, align, inuse) "{\"dev\":\"region0\",\"size\":1073741824," \
	"\"align\":16777216,\"available_size\":0,\"max_available_extent\":0,\"type\":\"pmem\"," \
	"\"interleave_ways\":1,\"numa_node\":0,\"labels\":\"" labels "\",\"namespaces\":[" \
	"{\"dev\":\"namespace0.0\",\"mode\":\"" mode "\",\"size\":1073741824,\"align\":" align "," \
	"\"blockdev\":\"pmem0\",\"in_use\":" inuse "}]}"
/* QEMU's DIMM with label-size=128K before init-labels: 1023.88 MiB, not 16 MiB-aligned. */
#define R0_QEMU_LABELS "{\"dev\":\"region0\",\"size\":1073610752,\"align\":16777216," \
	"\"available_size\":0,\"max_available_extent\":0,\"type\":\"pmem\",\"interleave_ways\":1," \
	"\"numa_node\":0,\"labels\":\"uninitialized\",\"namespaces\":[{\"dev\":\"namespace0.0\"," \
	"\"mode\":\"raw\",\"size\":1073610752,\"blockdev\":\"pmem0\",\"in_use\":false}]}"

static struct pma_ns_state *
node(const char *regions)
{
	char json[8192];
	struct pma_ns_state *s = NULL;

	snprintf(json, sizeof(json),
			"{\"buses\":[{\"dev\":\"ndbus0\",\"provider\":\"ACPI.NFIT\",\"regions\":[%s]}]}",
			regions);
	if (pma_ns_state_from_json(json, &s))
		diag("fixture does not parse: %s", pma_errormsg());
	return s;
}

static struct pma_prov_spec *
want(const char *text)
{
	struct pma_prov_spec *w = NULL;

	if (pma_prov_spec_parse(text, "test", &w))
		diag("description does not parse: %s", pma_errormsg());
	return w;
}

/* Plans text against regions; returns the code, *out the plan (caller frees). */
static int
plan_(const char *regions, const char *text, unsigned flags, struct pma_prov_plan **out)
{
	struct pma_ns_state *s = node(regions);
	struct pma_prov_spec *w = want(text);
	int rc = pma_prov_plan_new(s, w, flags, out);

	pma_prov_spec_free(&w);
	pma_ns_state_free(&s);
	return rc;
}

static struct pma_prov_action
act(const struct pma_prov_plan *p, size_t i)
{
	struct pma_prov_action a;

	memset(&a, 0, sizeof(a));
	a.op = (enum pma_prov_op)-1;
	if (p)
		pma_prov_plan_action(p, i, &a);
	return a;
}

/* Expect a refusal: code and a part of the message. */
static void
refused(const char *regions, const char *text, unsigned flags, int code, const char *says,
		const char *what)
{
	struct pma_prov_plan *p = NULL;
	int rc = plan_(regions, text, flags, &p);

	ok(rc == code && !p && strstr(pma_errormsg(), says), "%s: %s", what, pma_errormsg());
	if (rc != code || !strstr(pma_errormsg(), says))
		diag("  got %d, expected %d and '%s'", rc, code, says);
	pma_prov_plan_free(&p);
}

static void
creation(void)
{
	struct pma_prov_plan *p = NULL;
	struct pma_prov_action a;

	is_int(plan_(R0_EMPTY, "namespace ckpt0 region=region0 size=496M\n", 0, &p), 0,
			"one namespace on an empty labelled region");
	is_int(pma_prov_plan_nactions(p), 1, "one action");
	is_int(pma_prov_plan_changes(p), 1, "one change");
	a = act(p, 0);
	ok(a.op == PMA_PROV_CREATE && strcmp(a.name, "ckpt0") == 0 && strcmp(a.region, "region0") == 0
			&& a.size == 496 * MiB && a.align == 2 * MiB && !a.done && !a.destructive,
			"create ckpt0 on region0, 496M, 2M: %s", a.what);
	char *json = NULL;
	is_int(pma_prov_plan_to_json(p, 0, &json), 0, "plan as JSON");
	ok(json && strstr(json, "\"changes\":1") && strstr(json, "\"action\":\"create\"") &&
			strstr(json, "\"size\":520093696") && strstr(json, "\"done\":false"),
			"the JSON has the change");
	free(json);
	is_int(pma_prov_plan_to_json(p, PMA_NS_JSON_HUMAN, &json), 0, "plan as human JSON");
	ok(json && strstr(json, "\"size\":\"496.00 MiB\""), "sizes as strings");
	free(json);
	pma_prov_plan_free(&p);

	is_int(plan_(R0_EMPTY, "namespace ckpt%d count=2 size=496M\n", 0, &p), 0,
			"two of 496M in 1008M");
	ok(pma_prov_plan_changes(p) == 2 && act(p, 1).op == PMA_PROV_CREATE &&
			strcmp(act(p, 1).name, "ckpt1") == 0, "both created, in order");
	pma_prov_plan_free(&p);
	refused(R0_EMPTY, "namespace ckpt%d count=3 size=496M region=region0\n", 0, -ENOSPC,
			"ckpt2", "a third does not fit: capacity is booked as the plan goes");

	is_int(plan_(R0_EMPTY, "namespace all\n", 0, &p), 0, "size=all");
	ok(act(p, 0).size == 1008 * MiB, "takes the whole free extent (%llu)",
			(unsigned long long)act(p, 0).size);
	pma_prov_plan_free(&p);

	is_int(plan_(R0_EMPTY "," R1_EMPTY, "namespace ckpt0 numa=1 size=1G\n", 0, &p), 0,
			"numa=1");
	ok(strcmp(act(p, 0).region, "region1") == 0, "lands on region1 (node 1)");
	pma_prov_plan_free(&p);
	is_int(plan_(R0_EMPTY "," R1_EMPTY, "namespace ckpt0 size=2G\n", 0, &p), 0,
			"2G, any region");
	ok(strcmp(act(p, 0).region, "region1") == 0, "the first region with room: region1");
	pma_prov_plan_free(&p);
	refused(R0_EMPTY "," R1_EMPTY, "namespace ckpt0 numa=7\n", 0, -ENODEV, "node 7",
			"no region on node 7");
	refused(R0_EMPTY, "namespace ckpt0 region=region9\n", 0, -ENOENT, "region9",
			"an unknown region");
	refused(R0_EMPTY, "namespace ckpt0 region=region0 numa=1\n", 0, PMA_E_CONFLICT, "node",
			"region and node disagree");
	refused(R0_EMPTY, "namespace ckpt0 size=24M\n", 0, -EINVAL, "did you mean",
			"a size off the 16 MiB region alignment");
	refused(R0_EMPTY, "namespace ckpt0 size=2G region=region0\n", 0, -ENOSPC, "needed",
			"larger than the free extent");
	refused(R0_EMPTY, "namespace ckpt0 size=1G align=1G\n", 0, -ENOSPC, "",
			"1G-aligned 1G does not fit in 1008M");
}

static void
convergence(void)
{
	struct pma_prov_plan *p = NULL;
	struct pma_prov_action a;
	const char *both = "namespace ckpt0 size=496M region=region0\n";

	is_int(plan_(R0_CKPT0("devdax", "2097152", "false"), both, 0, &p), 0,
			"the node already has ckpt0 as described");
	is_int(pma_prov_plan_changes(p), 0, "no changes");
	a = act(p, 0);
	ok(a.op == PMA_PROV_KEEP && strcmp(a.dev, "namespace0.0") == 0, "keep: %s", a.what);
	a = act(p, 1);
	ok(a.op == PMA_PROV_UNMANAGED && strcmp(a.dev, "namespace0.1") == 0,
			"the undescribed fsdax namespace is left alone: %s", a.what);
	is_int(pma_prov_plan_apply(p), 0, "applying a plan without changes does nothing");
	pma_prov_plan_free(&p);

	is_int(plan_(R0_CKPT0("devdax", "2097152", "true"), both, 0, &p), 0,
			"in use makes no difference when nothing changes");
	pma_prov_plan_free(&p);
	is_int(plan_(R0_CKPT0("devdax", "2097152", "false"), "namespace ckpt0\n", 0, &p), 0,
			"size=all: an existing ckpt0 of any size matches");
	is_int(pma_prov_plan_changes(p), 0, "no changes");
	pma_prov_plan_free(&p);

	refused(R0_CKPT0("fsdax", "2097152", "false"), both, 0, PMA_E_CONFLICT, "destroy it first",
			"ckpt0 exists as fsdax: never re-moded");
	refused(R0_CKPT0("devdax", "1073741824", "false"), both, 0, PMA_E_CONFLICT, "align",
			"ckpt0 with another alignment");
	refused(R0_CKPT0("devdax", "2097152", "false"), "namespace ckpt0 size=512M\n", 0,
			PMA_E_CONFLICT, "resize", "ckpt0 of another size: never resized");
	refused(R0_CKPT0("devdax", "2097152", "false"), both, PMA_NS_EXCLUSIVE, -EEXIST, "exists",
			"exclusive (pmctl create) refuses an existing name");
	refused(R0_CKPT0("devdax", "2097152", "false") "," R1_EMPTY,
			"namespace ckpt0 region=region1 size=496M\n", 0, PMA_E_CONFLICT, "region0",
			"ckpt0 exists on another region than described");
	refused(R0_CKPT0("devdax", "2097152", "false"),
			"namespace ckpt0 size=496M\nnamespace dev=namespace0.0\n", 0, PMA_E_CONFLICT,
			"twice", "one namespace described twice");

	/* Described by name on two regions: ambiguous unless placed. */
	static const char two[] = "{\"dev\":\"region0\",\"size\":2147483648,\"align\":16777216,"
		"\"numa_node\":0,\"namespaces\":[{\"dev\":\"namespace0.0\",\"mode\":\"devdax\","
		"\"size\":1073741824,\"name\":\"ckpt0\",\"align\":2097152,\"chardev\":\"dax0.0\"}]},"
		"{\"dev\":\"region1\",\"size\":2147483648,\"align\":16777216,\"numa_node\":1,"
		"\"namespaces\":[{\"dev\":\"namespace1.0\",\"mode\":\"devdax\",\"size\":1073741824,"
		"\"name\":\"ckpt0\",\"align\":2097152,\"chardev\":\"dax1.0\"}]}";
	refused(two, "namespace ckpt0 size=1G\n", 0, PMA_E_CONFLICT, "several",
			"a name on two regions is ambiguous");
	is_int(plan_(two, "namespace ckpt0 size=1G numa=1\n", 0, &p), 0, "... unless numa= says which");
	a = act(p, 0);
	ok(a.op == PMA_PROV_KEEP && strcmp(a.dev, "namespace1.0") == 0, "keeps namespace1.0");
	ok(act(p, 1).op == PMA_PROV_UNMANAGED, "and leaves namespace0.0 alone");
	pma_prov_plan_free(&p);
}

static void
labels(void)
{
	struct pma_prov_plan *p = NULL;
	struct pma_prov_spec *w = NULL;
	struct pma_ns_state *s = NULL;
	const char *uninit = R0_LABELLESS("uninitialized", "raw", "0", "false");

	refused(uninit, "namespace ckpt0 size=496M\n", 0, PMA_E_CONFLICT, "init-labels",
			"a label-less region is not initialised unless allowed");
	is_int(plan_(uninit, "namespace ckpt0 size=496M\n", PMA_NS_INIT_LABELS, &p), 0,
			"allowed by flag");
	ok(pma_prov_plan_changes(p) == 2 && act(p, 0).op == PMA_PROV_INIT_LABELS &&
			act(p, 1).op == PMA_PROV_CREATE && !act(p, 0).destructive,
			"init-labels, then create: %s", act(p, 0).what);
	is_int(pma_prov_plan_nactions(p), 2, "namespace0.0 goes away, not listed as unmanaged");
	pma_prov_plan_free(&p);
	is_int(plan_(uninit, "init-labels region0\nnamespace ckpt0 size=496M\n", 0, &p), 0,
			"allowed by the description");
	pma_prov_plan_free(&p);
	refused(uninit, "init-labels region1\nnamespace ckpt0 size=496M\n", 0, PMA_E_CONFLICT,
			"init-labels", "allowed for another region only");
	is_int(plan_(uninit, "namespace ckpt0\n", PMA_NS_INIT_LABELS, &p), 0, "size=all after init");
	ok(act(p, 1).size == GiB, "the whole region once labelled (%llu)",
			(unsigned long long)act(p, 1).size);
	pma_prov_plan_free(&p);
	refused(R0_LABELLESS("uninitialized", "fsdax", "2097152", "false"),
			"namespace ckpt0 size=496M\n", PMA_NS_INIT_LABELS, PMA_E_REFUSED, "force",
			"init-labels over an fsdax namespace0.0 needs force");
	is_int(plan_(R0_LABELLESS("uninitialized", "fsdax", "2097152", "false"),
			"namespace ckpt0 size=496M\n", PMA_NS_INIT_LABELS | PMA_NS_FORCE, &p), 0,
			"... and gets it");
	ok(act(p, 0).destructive, "marked destructive");
	pma_prov_plan_free(&p);
	refused(R0_LABELLESS("uninitialized", "raw", "0", "true"), "namespace ckpt0 size=496M\n",
			PMA_NS_INIT_LABELS | PMA_NS_FORCE, -EBUSY, "in use",
			"never over a namespace in use, force or not");

	/* Labelled regions are preferred: no label initialisation when not needed. */
	is_int(plan_(R0_LABELLESS("uninitialized", "raw", "0", "false") "," R1_EMPTY,
			"namespace ckpt0 size=1G\n", PMA_NS_INIT_LABELS, &p), 0, "two candidates");
	ok(pma_prov_plan_changes(p) == 1 && strcmp(act(p, 0).region, "region1") == 0,
			"the labelled region1 is used");
	pma_prov_plan_free(&p);

	/* The plan is a pure function: same inputs, same plan, inputs untouched. */
	s = node(uninit);
	w = want("namespace ckpt0 size=496M\n");
	char *j1 = NULL, *j2 = NULL, *before = NULL, *after = NULL;
	pma_ns_state_to_json(s, 0, &before);
	pma_prov_plan_new(s, w, PMA_NS_INIT_LABELS, &p);
	pma_prov_plan_to_json(p, 0, &j1);
	pma_prov_plan_free(&p);
	pma_prov_plan_new(s, w, PMA_NS_INIT_LABELS, &p);
	pma_prov_plan_to_json(p, 0, &j2);
	pma_ns_state_to_json(s, 0, &after);
	ok(j1 && j2 && strcmp(j1, j2) == 0, "planning twice gives the same plan");
	ok(before && after && strcmp(before, after) == 0, "the state is not modified");
	free(j1);
	free(j2);
	free(before);
	free(after);
	pma_prov_plan_free(&p);
	pma_prov_spec_free(&w);
	pma_ns_state_free(&s);
}

static void
labelless(void)
{
	struct pma_prov_plan *p = NULL;
	const char *raw = R0_LABELLESS("none", "raw", "0", "false");

	refused(raw, "namespace ckpt0\n", PMA_NS_INIT_LABELS, PMA_E_CONFLICT, "dev=namespace0.0",
			"named namespaces cannot exist on a region without label storage");
	is_int(plan_(raw, "namespace dev=namespace0.0\n", 0, &p), 0, "take over namespace0.0");
	ok(pma_prov_plan_changes(p) == 1 && act(p, 0).op == PMA_PROV_RECONFIGURE &&
			!act(p, 0).destructive && act(p, 0).align == 2 * MiB,
			"reconfigure a raw namespace0.0: %s", act(p, 0).what);
	pma_prov_plan_free(&p);
	is_int(plan_(R0_LABELLESS("none", "devdax", "2097152", "false"),
			"namespace dev=namespace0.0\n", 0, &p), 0, "already devdax");
	ok(pma_prov_plan_changes(p) == 0 && act(p, 0).op == PMA_PROV_KEEP, "kept: %s",
			act(p, 0).what);
	pma_prov_plan_free(&p);
	is_int(plan_(R0_LABELLESS("none", "devdax", "2097152", "false"),
			"namespace dev=dax0.0\n", 0, &p), -ENOENT,
			"dev= names a namespace or its device (dax0.0 is not listed here)");
	pma_prov_plan_free(&p);
	refused(R0_LABELLESS("none", "devdax", "2097152", "false"),
			"namespace dev=namespace0.0 align=1G\n", 0, PMA_E_REFUSED, "force",
			"another alignment destroys the contents: force");
	refused(R0_LABELLESS("none", "fsdax", "2097152", "false"), "namespace dev=namespace0.0\n",
			0, PMA_E_REFUSED, "force", "fsdax to devdax: force");
	is_int(plan_(R0_LABELLESS("none", "fsdax", "2097152", "false"),
			"namespace dev=namespace0.0\n", PMA_NS_FORCE, &p), 0, "... with force");
	ok(act(p, 0).destructive, "destructive");
	pma_prov_plan_free(&p);
	refused(R0_LABELLESS("none", "fsdax", "2097152", "true"), "namespace dev=namespace0.0\n",
			PMA_NS_FORCE, -EBUSY, "in use", "mounted: never");
	refused(raw, "namespace ckpt0 dev=namespace0.0\n", 0, PMA_E_CONFLICT, "label-less",
			"a name cannot be stored on a label-less region");
	refused(raw, "namespace dev=namespace7.0\n", 0, -ENOENT, "namespace7.0", "no such namespace");
	refused(raw, "namespace dev=namespace0.0 region=region1\n", 0, PMA_E_CONFLICT, "region1",
			"dev on another region than described");
	refused(R0_QEMU_LABELS, "namespace dev=namespace0.0\n", 0, PMA_E_CONFLICT, "labels",
			"QEMU's label-less view is not 16 MiB-sized: explained");
	refused(R0_CKPT0("devdax", "2097152", "false"), "namespace ckpt0 dev=namespace0.0 align=1G\n",
			PMA_NS_FORCE, PMA_E_CONFLICT, "not a multiple",
			"496 MiB cannot become 1 GiB-aligned devdax");
}

static void
edges(void)
{
	struct pma_prov_plan *p = NULL;
	struct pma_ns_state *s = NULL;
	struct pma_prov_spec *w = want("namespace ckpt0\n");

	is_int(pma_ns_state_from_json("{\"buses\":[]}", &s), 0, "a node without NVDIMMs");
	is_int(pma_prov_plan_new(s, w, 0, &p), -ENODEV, "plan: -ENODEV (%s)", pma_errormsg());
	ok(p == NULL, "no plan");
	pma_ns_state_free(&s);
	s = node(R0_EMPTY);
	pma_prov_spec_free(&w);
	pma_prov_spec_new(&w);
	is_int(pma_prov_plan_new(s, w, 0, &p), -EINVAL, "an empty description: -EINVAL");
	is_int(pma_prov_plan_new(NULL, w, 0, &p), -EINVAL, "NULL state: -EINVAL");
	pma_prov_spec_free(&w);
	pma_ns_state_free(&s);
	refused("{\"dev\":\"region0\",\"size\":4294967296,\"align\":16777216,"
			"\"available_size\":4294967296,\"max_available_extent\":4294967296,"
			"\"interleave_ways\":2,\"numa_node\":0}",
			"namespace ckpt0 size=1G align=1G\n", 0, -EINVAL, "2-way",
			"a 2-way interleave with 1G alignment needs multiples of 2G");
	refused("{\"dev\":\"region0\",\"size\":4294967296,\"align\":16777216,"
			"\"available_size\":4294967296,\"max_available_extent\":4294967296,"
			"\"numa_node\":0,\"ro\":true}", "namespace ckpt0 size=1G\n", 0, -ENODEV,
			"read-only", "a read-only region");
	refused("{\"dev\":\"region0\",\"type\":\"blk\",\"size\":4294967296,"
			"\"available_size\":4294967296,\"numa_node\":0}",
			"namespace ckpt0 size=1G\n", 0, -ENODEV, "blk", "a blk region");
	is_int(pma_prov_plan_action(NULL, 0, NULL), -EINVAL, "action of NULL: -EINVAL");
	is_int(plan_(R0_EMPTY, "namespace ckpt0 size=496M\n", 0, &p), 0, "a plan");
	struct pma_prov_action a;
	is_int(pma_prov_plan_action(p, 5, &a), -ERANGE, "action 5 of 1: -ERANGE");
	pma_prov_plan_free(&p);
	ok(strcmp(pma_prov_op_name(PMA_PROV_INIT_LABELS), "init-labels") == 0 &&
			strcmp(pma_prov_op_name(PMA_PROV_UNMANAGED), "unmanaged") == 0, "op names");
}

int
main(void)
{
	creation();
	convergence();
	labels();
	labelless();
	edges();
	return done_testing();
}
