/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * provision.c -- fuzzes the provisioning description (pmalloc/provision_config.c):
 * a `pmctl provision --config FILE` file through pma_prov_spec_parse, the
 * same text line by line as `--ns` statements through
 * pma_prov_spec_add_line, and every description that parses planned
 * (pma_prov_plan_new, pmalloc/provision.c) against a fixed node of two
 * regions, as `pmctl provision --dry-run --state` does.
 */
#define FUZZ_NAME "provision"
#include "driver.h"

#include "pmalloc.h"
#include "pmalloc_ns.h"

/* Two regions: a labelled one with a devdax ckpt0, a label-less one with a raw namespace. */
static const char node_json[] =
	"{\"buses\":[{\"dev\":\"ndbus0\",\"provider\":\"ACPI.NFIT\",\"regions\":["
	"{\"dev\":\"region0\",\"size\":2147483648,\"align\":16777216,\"available_size\":1073741824,"
	"\"max_available_extent\":1073741824,\"type\":\"pmem\",\"numa_node\":0,\"namespaces\":["
	"{\"dev\":\"namespace0.0\",\"mode\":\"devdax\",\"size\":1073741824,\"name\":\"ckpt0\","
	"\"align\":2097152,\"chardev\":\"dax0.0\",\"in_use\":false}]},"
	"{\"dev\":\"region1\",\"size\":1073741824,\"align\":16777216,\"available_size\":0,"
	"\"max_available_extent\":0,\"type\":\"pmem\",\"numa_node\":1,\"labels\":\"none\","
	"\"namespaces\":[{\"dev\":\"namespace1.0\",\"mode\":\"raw\",\"size\":1073741824,"
	"\"blockdev\":\"pmem1\",\"in_use\":false}]}]}]}";

static struct pma_ns_state *node;

/* Looks at every entry of a parsed description, and plans it. */
static void
use_spec(struct pma_prov_spec *spec)
{
	size_t n = pma_prov_spec_count(spec);
	for (size_t i = 0; i < n; i++) {
		const struct pma_prov_ns *ns = pma_prov_spec_get(spec, i);
		fuzz_assert(ns != NULL, "entry %zu of %zu missing", i, n);
	}
	fuzz_assert(pma_prov_spec_get(spec, n) == NULL, "entry past the end");

	static const unsigned flags[] = {0, PMA_NS_FORCE | PMA_NS_INIT_LABELS};
	for (unsigned f = 0; f < 2; f++) {
		struct pma_prov_plan *plan = NULL;
		int rc = pma_prov_plan_new(node, spec, flags[f], &plan);
		fuzz_check_error(rc, pma_errormsg());
		if (rc)
			continue;
		size_t na = pma_prov_plan_nactions(plan);
		for (size_t i = 0; i < na; i++) {
			struct pma_prov_action a;
			fuzz_assert(pma_prov_plan_action(plan, i, &a) == 0, "action %zu", i);
			fuzz_assert(a.what && *a.what, "action %zu says nothing", i);
		}
		fuzz_assert(pma_prov_plan_changes(plan) <= na, "more changes than actions");
		char *json = NULL;
		fuzz_assert(pma_prov_plan_to_json(plan, 0, &json) == 0, "plan to JSON");
		free(json);
		pma_prov_plan_free(&plan);
	}
}

static void
fuzz_one(const uint8_t *data, size_t len)
{
	if (!node && pma_ns_state_from_json(node_json, &node)) {
		fprintf(stderr, "provision: the fixed node does not parse: %s\n", pma_errormsg());
		abort();
	}
	char *text = malloc(len + 1);
	if (!text)
		return;
	memcpy(text, data, len);
	text[len] = '\0';

	/* As a config file. */
	struct pma_prov_spec *spec = NULL;
	int rc = pma_prov_spec_parse(text, "fuzz.conf", &spec);
	fuzz_check_error(rc, pma_errormsg());
	fuzz_assert(rc <= 0, "parse returned %d", rc);
	if (rc == 0) {
		use_spec(spec);
		pma_prov_spec_free(&spec);
	}
	fuzz_assert(spec == NULL, "spec_free left the pointer");

	/* As --ns statements, one per line (pmctl passes each argument whole). */
	if (pma_prov_spec_new(&spec))
		abort();
	int lines_ok = 1;
	for (char *line = text, *next; line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		rc = pma_prov_spec_add_line(spec, line);
		fuzz_check_error(rc, pma_errormsg());
		lines_ok &= rc == 0;
	}
	if (lines_ok)
		use_spec(spec);
	pma_prov_spec_free(&spec);
	free(text);
}

static void
fuzz_seeds(const char *dir)
{
	fuzz_seed_text(dir, "one", "namespace ckpt0 size=1G\n");
	fuzz_seed_text(dir, "full",
			"# checkpoint namespaces, one per socket\n"
			"init-labels region1\n"
			"namespace ckpt%d region=region0 numa=0 size=32M align=2M count=2\n"
			"namespace big region=region1 size=all align=1G\n"
			"namespace dev=namespace0.0\n");
	fuzz_seed_text(dir, "keep", "namespace ckpt0 region=region0 size=1G align=2M\n");
	fuzz_seed_text(dir, "init-all", "init-labels all\nnamespace n size=512M\n");
	fuzz_seed_text(dir, "bad-key", "namespace ckpt0 sise=1G\n");
	fuzz_seed_text(dir, "bad-size", "namespace ckpt0 size=1Q count=0\n");
}
