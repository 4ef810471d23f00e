/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ns_state.c -- fuzzes the JSON node listing that `pmctl --state FILE`
 * reads (pma_ns_state_from_json, pmalloc/ns_state.c): every listing that
 * parses is read back record by record, written out again
 * (pma_ns_state_to_json, both forms) and parsed once more, asked for a
 * store's device (pma_ns_resolve) and planned against (pma_prov_plan_new).
 * A listing written by the library must parse, and give the same counts.
 */
#define FUZZ_NAME "ns_state"
#include "driver.h"

#include "pmalloc.h"
#include "pmalloc_ns.h"

static const char *const selectors[] = {"ckpt0", "namespace0.0", "dax0.0", "/dev/dax0.0",
	"region0", "region1"};

static void
read_back(const struct pma_ns_state *s)
{
	struct pma_ns_bus_info b;
	struct pma_ns_region_info r;
	struct pma_ns_info n;
	struct pma_ns_dax_info d;
	size_t nb = pma_ns_state_nbuses(s), nr = pma_ns_state_nregions(s);
	size_t nn = pma_ns_state_nnamespaces(s), nd = pma_ns_state_ndax(s);

	for (size_t i = 0; i < nb; i++)
		fuzz_assert(pma_ns_state_bus(s, i, &b) == 0, "bus %zu", i);
	for (size_t i = 0; i < nr; i++)
		fuzz_assert(pma_ns_state_region(s, i, &r) == 0, "region %zu", i);
	for (size_t i = 0; i < nn; i++)
		fuzz_assert(pma_ns_state_namespace(s, i, &n) == 0, "namespace %zu", i);
	for (size_t i = 0; i < nd; i++)
		fuzz_assert(pma_ns_state_dax(s, i, &d) == 0, "dax %zu", i);
	fuzz_assert(pma_ns_state_bus(s, nb, &b) == -ERANGE, "bus past the end");
	fuzz_assert(pma_ns_state_region(s, nr, &r) == -ERANGE, "region past the end");
	fuzz_assert(nr > 0 || pma_ns_state_absent_reason(s) != NULL, "no regions and no reason");
}

static void
fuzz_one(const uint8_t *data, size_t len)
{
	char *text = malloc(len + 1);
	if (!text)
		return;
	memcpy(text, data, len);
	text[len] = '\0';

	struct pma_ns_state *s = NULL;
	int rc = pma_ns_state_from_json(text, &s);
	free(text);
	fuzz_check_error(rc, pma_errormsg());
	if (rc) {
		fuzz_assert(s == NULL, "failed parse left a state");
		return;
	}
	read_back(s);

	for (unsigned flags = 0; flags < 4; flags++) {
		char *json = NULL;
		fuzz_assert(pma_ns_state_to_json(s, flags, &json) == 0, "to_json(%u)", flags);
		if (flags == 0) {
			/* The machine form is what --state reads: it must come back. */
			struct pma_ns_state *again = NULL;
			rc = pma_ns_state_from_json(json, &again);
			fuzz_assert(rc == 0, "own listing does not parse: %s\n%s", pma_errormsg(), json);
			fuzz_assert(pma_ns_state_nregions(again) == pma_ns_state_nregions(s) &&
					pma_ns_state_nnamespaces(again) == pma_ns_state_nnamespaces(s) &&
					pma_ns_state_ndax(again) == pma_ns_state_ndax(s),
					"own listing reads back with other counts (regions %zu/%zu, "
					"namespaces %zu/%zu, dax %zu/%zu):\n%s",
					pma_ns_state_nregions(again), pma_ns_state_nregions(s),
					pma_ns_state_nnamespaces(again), pma_ns_state_nnamespaces(s),
					pma_ns_state_ndax(again), pma_ns_state_ndax(s), json);
			pma_ns_state_free(&again);
		}
		free(json);
	}

	for (size_t i = 0; i < sizeof(selectors) / sizeof(*selectors); i++)
		for (int numa = -1; numa <= 0; numa++) {
			char path[64];
			rc = pma_ns_resolve(s, selectors[i], numa, path, sizeof(path));
			fuzz_check_error(rc, pma_errormsg());
			fuzz_assert(rc != 0 || !strncmp(path, "/dev/", 5), "resolved to '%s'", path);
		}

	struct pma_prov_spec *spec = NULL;
	if (pma_prov_spec_parse("namespace ckpt0 size=1G\nnamespace ckpt%d count=2 size=32M\n",
			NULL, &spec) == 0) {
		struct pma_prov_plan *plan = NULL;
		rc = pma_prov_plan_new(s, spec, PMA_NS_FORCE | PMA_NS_INIT_LABELS, &plan);
		fuzz_check_error(rc, pma_errormsg());
		pma_prov_plan_free(&plan);
		pma_prov_spec_free(&spec);
	}
	pma_ns_state_free(&s);
}

/* Listings as pma_ns_state_to_json writes them, from the tests' node descriptions. */
static void
fuzz_seeds(const char *dir)
{
	static const char *const nodes[] = {
		"{\"buses\":[{\"dev\":\"ndbus0\",\"provider\":\"ACPI.NFIT\",\"regions\":["
		"{\"dev\":\"region0\",\"size\":2147483648,\"align\":16777216,\"available_size\":"
		"1073741824,\"max_available_extent\":1073741824,\"type\":\"pmem\",\"numa_node\":0,"
		"\"namespaces\":[{\"dev\":\"namespace0.0\",\"mode\":\"devdax\",\"size\":1073741824,"
		"\"name\":\"ckpt0\",\"align\":2097152,\"chardev\":\"dax0.0\",\"in_use\":false}]},"
		"{\"dev\":\"region1\",\"size\":1073741824,\"align\":16777216,\"type\":\"pmem\","
		"\"numa_node\":1,\"labels\":\"none\",\"namespaces\":[{\"dev\":\"namespace1.0\","
		"\"mode\":\"raw\",\"size\":1073741824,\"blockdev\":\"pmem1\",\"in_use\":false}]}]}]}",
		"{\"buses\":[{\"dev\":\"ndbus0\",\"provider\":\"ACPI.NFIT\",\"regions\":["
		"{\"dev\":\"region0\",\"size\":1073610752,\"align\":16777216,\"available_size\":0,"
		"\"max_available_extent\":0,\"type\":\"pmem\",\"interleave_ways\":1,\"numa_node\":0,"
		"\"labels\":\"uninitialized\",\"namespaces\":[{\"dev\":\"namespace0.0\",\"mode\":"
		"\"raw\",\"size\":1073610752,\"blockdev\":\"pmem0\",\"in_use\":false}]}]}]}",
		"{\"buses\":[]}",
	};
	for (size_t i = 0; i < sizeof(nodes) / sizeof(*nodes); i++) {
		struct pma_ns_state *s = NULL;
		char *json = NULL, name[32];
		if (pma_ns_state_from_json(nodes[i], &s) || pma_ns_state_to_json(s, 0, &json)) {
			fprintf(stderr, "ns_state: seed %zu: %s\n", i, pma_errormsg());
			abort();
		}
		snprintf(name, sizeof(name), "node%zu", i);
		fuzz_seed_text(dir, name, json);
		free(json);
		pma_ns_state_free(&s);
	}
	fuzz_seed_text(dir, "sizes-as-strings", "{\"buses\":[{\"dev\":\"ndbus0\",\"regions\":["
			"{\"dev\":\"region0\",\"size\":\"2G\",\"align\":\"16M\",\"namespaces\":["
			"{\"dev\":\"namespace0.0\",\"mode\":\"devdax\",\"size\":\"1G\",\"name\":\"ckpt0\","
			"\"chardev\":\"dax0.0\"}]}]}],\"dax_devices\":[{\"chardev\":\"dax0.0\","
			"\"path\":\"/dev/dax0.0\",\"size\":1073741824,\"align\":2097152,\"numa_node\":0}]}");
	fuzz_seed_text(dir, "bad-human", "{\"buses\":[{\"dev\":\"ndbus0\",\"regions\":["
			"{\"dev\":\"region0\",\"size\":\"992.00 MiB\"}]}]}");
	fuzz_seed_text(dir, "bad-not-json", "{\"buses\":[");
}
