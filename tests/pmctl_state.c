/*
 * pmctl_state.c -- listings without hardware: a JSON listing read back
 * into a state and written again (round trip), the records, human sizes,
 * the dax-device listing, malformed input, and finding the device a store
 * opens (by name, NUMA node, namespace, region, device).
 */
#include <errno.h>
#include <stdint.h>

#include "pmalloc_ns.h"
#include "tap.h"

/* Two regions on two nodes: ckpt0 on both, a second devdax and an fsdax namespace on region0. */
static const char listing[] =
	"{\"buses\":[{\"dev\":\"ndbus0\",\"provider\":\"ACPI.NFIT\",\"regions\":["
	"{\"dev\":\"region0\",\"size\":4294967296,\"align\":16777216,\"available_size\":0,"
	"\"max_available_extent\":0,\"type\":\"pmem\",\"interleave_ways\":2,\"numa_node\":0,"
	"\"target_node\":2,\"persistence_domain\":\"memory_controller\",\"labels\":\"active\","
	"\"namespaces\":["
	"{\"dev\":\"namespace0.0\",\"mode\":\"devdax\",\"size\":2147483648,"
	"\"uuid\":\"b99efd21-05a4-42c6-a4b4-703c8e045f48\",\"name\":\"ckpt0\",\"align\":2097152,"
	"\"chardev\":\"dax0.0\",\"numa_node\":0,\"target_node\":2,\"in_use\":true},"
	"{\"dev\":\"namespace0.1\",\"mode\":\"devdax\",\"size\":1073741824,\"name\":\"spare\","
	"\"align\":1073741824,\"chardev\":\"dax0.1\",\"numa_node\":0,\"target_node\":2,\"in_use\":false},"
	"{\"dev\":\"namespace0.2\",\"mode\":\"fsdax\",\"size\":1073741824,\"name\":\"fs\","
	"\"align\":2097152,\"blockdev\":\"pmem0.2\",\"numa_node\":0,\"target_node\":2,\"state\":\"disabled\","
	"\"in_use\":false}]},"
	"{\"dev\":\"region1\",\"size\":4294967296,\"align\":16777216,\"available_size\":2147483648,"
	"\"max_available_extent\":2147483648,\"type\":\"pmem\",\"interleave_ways\":2,\"numa_node\":1,"
	"\"target_node\":3,\"persistence_domain\":\"cpu_cache\",\"labels\":\"active\","
	"\"namespaces\":["
	"{\"dev\":\"namespace1.0\",\"mode\":\"devdax\",\"size\":2147483648,\"name\":\"ckpt0\","
	"\"align\":2097152,\"chardev\":\"dax1.0\",\"numa_node\":1,\"target_node\":3,\"in_use\":false}]}"
	"]}],"
	"\"dax_devices\":["
	"{\"chardev\":\"dax0.0\",\"path\":\"/dev/dax0.0\",\"size\":2111832064,\"align\":2097152,"
	"\"numa_node\":0,\"target_node\":2,\"mode\":\"devdax\",\"region\":\"region0\","
	"\"namespace\":\"namespace0.0\",\"in_use\":true},"
	"{\"chardev\":\"dax0.1\",\"path\":\"/dev/dax0.1\",\"size\":1056964608,\"align\":1073741824,"
	"\"numa_node\":0,\"target_node\":2,\"mode\":\"devdax\",\"region\":\"region0\","
	"\"namespace\":\"namespace0.1\",\"in_use\":false},"
	"{\"chardev\":\"dax1.0\",\"path\":\"/dev/dax1.0\",\"size\":2111832064,\"align\":2097152,"
	"\"numa_node\":1,\"target_node\":3,\"mode\":\"devdax\",\"region\":\"region1\","
	"\"namespace\":\"namespace1.0\",\"in_use\":false},"
	"{\"chardev\":\"dax9.0\",\"path\":\"/dev/dax9.0\",\"size\":1073741824,\"align\":2097152,"
	"\"numa_node\":1,\"mode\":\"devdax\",\"in_use\":false}]}";

static void
records(struct pma_ns_state *s)
{
	struct pma_ns_bus_info b;
	struct pma_ns_region_info r;
	struct pma_ns_info n;
	struct pma_ns_dax_info d;

	is_int(pma_ns_state_nbuses(s), 1, "one bus");
	is_int(pma_ns_state_nregions(s), 2, "two regions");
	is_int(pma_ns_state_nnamespaces(s), 4, "four namespaces");
	is_int(pma_ns_state_ndax(s), 4, "four dax devices");
	ok(pma_ns_state_absent_reason(s) == NULL, "no 'absent' reason when there are regions");
	ok(pma_ns_state_bus(s, 0, &b) == 0 && strcmp(b.provider, "ACPI.NFIT") == 0, "bus provider");
	ok(pma_ns_state_region(s, 1, &r) == 0 && strcmp(r.dev, "region1") == 0 &&
			r.numa_node == 1 && r.target_node == 3 && r.interleave_ways == 2 &&
			r.available_size == 2147483648ull && r.align == 16777216 &&
			strcmp(r.persistence_domain, "cpu_cache") == 0 &&
			r.labels == PMA_NS_LABELS_ACTIVE && r.enabled && !r.readonly, "region1's fields");
	ok(pma_ns_state_namespace(s, 0, &n) == 0 && strcmp(n.dev, "namespace0.0") == 0 &&
			n.mode == PMA_NS_MODE_DEVDAX && strcmp(n.name, "ckpt0") == 0 &&
			strcmp(n.chardev, "dax0.0") == 0 && n.align == 2097152 && n.in_use &&
			strcmp(n.uuid, "b99efd21-05a4-42c6-a4b4-703c8e045f48") == 0 && n.enabled,
			"namespace0.0's fields");
	ok(pma_ns_state_namespace(s, 2, &n) == 0 && n.mode == PMA_NS_MODE_FSDAX && !n.enabled &&
			strcmp(n.blockdev, "pmem0.2") == 0 && !n.chardev && !n.uuid,
			"namespace0.2: fsdax, disabled, no uuid");
	ok(pma_ns_state_dax(s, 3, &d) == 0 && strcmp(d.dev, "dax9.0") == 0 && !d.region &&
			!d.namespace && d.numa_node == 1 && d.target_node == -1,
			"a dax device without a namespace (hmem)");
	is_int(pma_ns_state_region(s, 2, &r), -ERANGE, "region 2 of 2: -ERANGE");
	is_int(pma_ns_state_namespace(s, 9, &n), -ERANGE, "namespace 9: -ERANGE");
	is_int(pma_ns_state_dax(NULL, 0, &d), -EINVAL, "NULL state: -EINVAL");
}

static void
json(struct pma_ns_state *s)
{
	struct pma_ns_state *again = NULL;
	char *one = NULL, *two = NULL, *human = NULL, *dax = NULL;

	is_int(pma_ns_state_to_json(s, 0, &one), 0, "write the listing");
	ok(one && strstr(one, "\"dev\":\"region0\"") && strstr(one, "\"chardev\":\"dax0.0\"") &&
			strstr(one, "\"persistence_domain\":\"memory_controller\"") &&
			strstr(one, "\"path\":\"/dev/dax0.0\""),
			"ndctl-style field names, slashes not escaped");
	is_int(pma_ns_state_from_json(one, &again), 0, "read it back");
	is_int(pma_ns_state_to_json(again, 0, &two), 0, "write it again");
	ok(one && two && strcmp(one, two) == 0, "the round trip is exact");
	is_int(pma_ns_state_to_json(s, PMA_NS_JSON_HUMAN, &human), 0, "human sizes");
	ok(human && strstr(human, "\"size\":\"4.00 GiB\"") && strstr(human, "\"align\":\"2.00 MiB\""),
			"sizes as strings, like ndctl -u");
	pma_ns_state_free(&again);
	is_int(pma_ns_state_from_json(human, &again), -EINVAL,
			"human sizes are rounded: not taken as a state (%s)", pma_errormsg());
	is_int(pma_ns_state_to_json(s, PMA_NS_JSON_DAX, &dax), 0, "dax devices only");
	ok(dax && dax[0] == '[' && strstr(dax, "\"chardev\":\"dax9.0\"") && !strstr(dax, "buses"),
			"a flat array, like daxctl list");
	free(one);
	free(two);
	free(human);
	free(dax);
	pma_ns_state_free(&again);
}

static void
malformed(void)
{
	static const struct {
		const char *text, *says;
	} bad[] = {
		{"", "not JSON"},
		{"{\"buses\":[", "not JSON"},
		{"[]", "not a pmctl listing"},
		{"{\"regions\":[]}", "not a pmctl listing"},
		{"{\"buses\":[7]}", "bus 0"},
		{"{\"buses\":[{\"regions\":[{\"size\":1}]}]}", "no \"dev\""},
		{"{\"buses\":[{\"regions\":[{\"dev\":\"region0\",\"size\":\"big\"}]}]}", "not a size"},
		{"{\"buses\":[{\"regions\":[{\"dev\":\"region0\",\"namespaces\":[{\"mode\":\"raw\"}]}]}]}",
			"no \"dev\""},
		{"{\"buses\":[],\"dax_devices\":[{\"size\":1}]}", "chardev"},
	};
	struct pma_ns_state *s = NULL;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc = pma_ns_state_from_json(bad[i].text, &s);
		ok(rc == -EINVAL && !s && strstr(pma_errormsg(), bad[i].says), "refused: %s",
				pma_errormsg());
	}
	is_int(pma_ns_state_from_json(NULL, &s), -EINVAL, "NULL text: -EINVAL");
	is_int(pma_ns_state_from_json("{\"buses\":[]}", &s), 0, "no buses is a node without NVDIMMs");
	ok(s && pma_ns_state_absent_reason(s) && strstr(pma_ns_state_absent_reason(s), "no NVDIMM"),
			"which says why: %s", s ? pma_ns_state_absent_reason(s) : "");
	pma_ns_state_free(&s);
	ok(strcmp(pma_ns_mode_name(PMA_NS_MODE_DEVDAX), "devdax") == 0 &&
			strcmp(pma_ns_mode_name(PMA_NS_MODE_UNKNOWN), "unknown") == 0 &&
			strcmp(pma_ns_labels_name(PMA_NS_LABELS_UNINITIALIZED), "uninitialized") == 0,
			"mode and label names");
}

static void
resolve(struct pma_ns_state *s)
{
	static const struct {
		const char *sel;
		int node;
		const char *path; /* NULL: an error */
		int code;
		const char *says;
	} cases[] = {
		{"ckpt0", 0, "/dev/dax0.0", 0, NULL},
		{"ckpt0", 1, "/dev/dax1.0", 0, NULL},
		{"ckpt0", -1, NULL, -EINVAL, "matches 2"},
		{"ckpt0", 5, NULL, -ENOENT, "node 5"},
		{"spare", -1, "/dev/dax0.1", 0, NULL},
		{"namespace1.0", -1, "/dev/dax1.0", 0, NULL},
		{"namespace1.0", 0, NULL, -ENOENT, "node 1"},
		{"dax0.1", -1, "/dev/dax0.1", 0, NULL},
		{"/dev/dax1.0", -1, "/dev/dax1.0", 0, NULL},
		{"dax9.0", -1, "/dev/dax9.0", 0, NULL},
		{"region1", -1, "/dev/dax1.0", 0, NULL},
		{"region0", -1, NULL, -EINVAL, "name one"},
		{"fs", -1, NULL, -ENOENT, "fsdax"},
		{"namespace0.2", -1, NULL, -ENOENT, "not devdax"},
		{"nothing", -1, NULL, -ENOENT, "nothing"},
	};
	char path[64];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		path[0] = '\0';
		int rc = pma_ns_resolve(s, cases[i].sel, cases[i].node, path, sizeof(path));
		if (cases[i].path)
			ok(rc == 0 && strcmp(path, cases[i].path) == 0, "'%s' on node %d is %s (%s)",
					cases[i].sel, cases[i].node, cases[i].path, rc ? pma_errormsg() : path);
		else
			ok(rc == cases[i].code && strstr(pma_errormsg(), cases[i].says),
					"'%s' on node %d: %s", cases[i].sel, cases[i].node, pma_errormsg());
	}
	is_int(pma_ns_resolve(s, "spare", -1, path, 8), -ENAMETOOLONG, "a short buffer: -ENAMETOOLONG");
	is_int(pma_ns_resolve(s, "", -1, path, sizeof(path)), -EINVAL, "an empty selector: -EINVAL");
	is_int(pma_ns_resolve(s, "ckpt0", -2, path, sizeof(path)), -EINVAL, "node -2: -EINVAL");
	struct pma_ns_state *empty = NULL;
	pma_ns_state_from_json("{\"buses\":[]}", &empty);
	is_int(pma_ns_resolve(empty, "ckpt0", -1, path, sizeof(path)), -ENODEV,
			"on a node without NVDIMMs: -ENODEV (%s)", pma_errormsg());
	pma_ns_state_free(&empty);
}

int
main(void)
{
	struct pma_ns_state *s = NULL;

	is_int(pma_ns_state_from_json(listing, &s), 0, "a listing of two regions parses: %s",
			pma_errormsg());
	if (!s)
		return done_testing();
	records(s);
	json(s);
	malformed();
	resolve(s);
	pma_ns_state_free(&s);
	ok(s == NULL, "free clears the pointer");
	return done_testing();
}
