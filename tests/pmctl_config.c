/* pmctl_config.c -- provisioning descriptions: sizes, the config syntax, count expansion, errors. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>

#include "pmalloc_ns.h"
#include "tap.h"

#define MiB ((uint64_t)1 << 20)
#define GiB ((uint64_t)1 << 30)

/* pma_ns_size_parse and pma_ns_size_format are libpmalloc's pma_size_* (tests/sizes.c) under old names. */
static void
sizes(void)
{
	static const char *const texts[] = {"992M", "1G", "2MiB", "4096", "1.5G", "16k", "12Q", "1 G", ""};
	uint64_t v, w;
	char a[32], b[32];

	for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
		int r = pma_size_parse(texts[i], &v);
		is_int(pma_ns_size_parse(texts[i], &w), r, "pma_ns_size_parse('%s') returns %d as "
				"pma_size_parse does", texts[i], r);
		ok(r || v == w, "... and the same %llu bytes", (unsigned long long)w);
	}
	is_int(pma_ns_size_parse(NULL, &v), -EINVAL, "NULL text: -EINVAL");
	ok(strcmp(pma_ns_size_format(1073610752, a, sizeof(a)),
			pma_size_format(1073610752, b, sizeof(b))) == 0,
			"pma_ns_size_format is pma_size_format: '%s'", a);
}

static void
parse_good(void)
{
	static const char text[] =
		"# provisioning for a two-socket node\n"
		"\n"
		"namespace ckpt%d count=2 numa=0 size=496M align=2M   # two on node 0\n"
		"  namespace big region=region1 size=all align=1G\n"
		"namespace dev=namespace2.0\n"
		"namespace name=plain\n"
		"init-labels region1\n";
	struct pma_prov_spec *s = NULL;
	const struct pma_prov_ns *e;

	is_int(pma_prov_spec_parse(text, "prov.conf", &s), 0, "a description parses: %s",
			pma_errormsg());
	if (!s)
		return;
	is_int(pma_prov_spec_count(s), 5, "five namespaces after count expansion");
	e = pma_prov_spec_get(s, 0);
	ok(e && strcmp(e->name, "ckpt0") == 0 && e->numa_node == 0 && e->size == 496 * MiB &&
			e->align == 2 * MiB && !e->region && !e->dev, "ckpt%%d -> ckpt0, node 0, 496M, 2M");
	e = pma_prov_spec_get(s, 1);
	ok(e && strcmp(e->name, "ckpt1") == 0, "... and ckpt1");
	e = pma_prov_spec_get(s, 2);
	ok(e && strcmp(e->name, "big") == 0 && strcmp(e->region, "region1") == 0 && e->size == 0 &&
			e->align == GiB && e->numa_node == -1, "big: region1, all, 1G");
	e = pma_prov_spec_get(s, 3);
	ok(e && !e->name && strcmp(e->dev, "namespace2.0") == 0 && e->align == 2 * MiB,
			"dev= without a name, default align 2M");
	e = pma_prov_spec_get(s, 4);
	ok(e && strcmp(e->name, "plain") == 0 && e->size == 0, "name= form, size all by default");
	ok(pma_prov_spec_get(s, 5) == NULL, "get past the end is NULL");
	pma_prov_spec_free(&s);
	ok(s == NULL, "free clears the pointer");
	pma_prov_spec_free(&s);
}

static void
parse_bad(void)
{
	static const struct {
		const char *text, *says;
	} bad[] = {
		{"namespace ckpt0 sise=1G\n", "prov.conf:1: unknown key 'sise'"},
		{"\n\nnamespace ckpt0 size=1Q\n", "prov.conf:3:"},
		{"namespace ckpt count=2\n", "needs a name with %d"},
		{"namespace ckpt%d size=1G\n", "no count="},
		{"namespace a%d%d count=2\n", "one %d"},
		{"namespace ckpt0\nnamespace ckpt0\n", "described twice"},
		{"namespace ckpt0 align=4K\n", "not supported"},
		{"namespace ckpt0 size=8M\n", "minimum"},
		{"namespace ckpt0 size=1500M align=1G\n", "not a multiple"},
		{"namespace ckpt0 size=0\n", "size=all"},
		{"namespace dev=namespace0.0 size=1G\n", "whole"},
		{"namespace dev=namespace0.0 count=2 name=x%d\n", "no count="},
		{"namespace\n", "needs a name"},
		{"namespace a b\n", "two names"},
		{"namespace a name=b\n", "two names"},
		{"namespace a numa=-3\n", "numa="},
		{"namespace a count=0 \n", "count="},
		{"namespace a region=\n", "needs a value"},
		{"namespace bad/name\n", "bad namespace name"},
		{"namespace 0123456789012345678901234567890123456789012345678901234567890123\n",
			"bad namespace name"},
		{"volume ckpt0\n", "unknown statement 'volume'"},
		{"init-labels\n", "one region"},
		{"init-labels a b\n", "one region"},
	};
	struct pma_prov_spec *s = NULL;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc = pma_prov_spec_parse(bad[i].text, "prov.conf", &s);
		ok(rc == -EINVAL && s == NULL && strstr(pma_errormsg(), bad[i].says),
				"refused: %s", pma_errormsg());
		if (rc != -EINVAL || !strstr(pma_errormsg(), bad[i].says))
			diag("  text %s  rc %d, expected -EINVAL and '%s'", bad[i].text, rc,
					bad[i].says);
	}
	is_int(pma_prov_spec_parse(NULL, NULL, &s), -EINVAL, "NULL text: -EINVAL");
	is_int(pma_prov_spec_parse("namespace x sise=1\n", NULL, &s), -EINVAL, "no origin");
	ok(strncmp(pma_errormsg(), "line 1: ", 8) == 0, "messages say the line: %s", pma_errormsg());
}

static void
lines_and_calls(void)
{
	struct pma_prov_spec *s = NULL;

	is_int(pma_prov_spec_new(&s), 0, "an empty description");
	is_int(pma_prov_spec_count(s), 0, "has nothing");
	is_int(pma_prov_spec_add_line(s, "ckpt0 size=1G region=region0"), 0,
			"a command-line statement without 'namespace'");
	is_int(pma_prov_spec_add_line(s, "namespace ckpt1 size=1G # comment"), 0,
			"... and with it, and a comment");
	is_int(pma_prov_spec_add_line(s, "init-labels all"), 0, "init-labels all");
	is_int(pma_prov_spec_add_line(s, "ckpt0 size=2G"), -EINVAL, "a second ckpt0 is refused");
	is_int(pma_prov_spec_count(s), 2, "two entries");
	struct pma_prov_ns ns = {.numa_node = -1};
	is_int(pma_prov_spec_add(s, &ns), -EINVAL, "neither name nor dev: -EINVAL (%s)",
			pma_errormsg());
	ns.name = "x";
	ns.numa_node = -2;
	is_int(pma_prov_spec_add(s, &ns), -EINVAL, "numa -2: -EINVAL");
	ns.numa_node = 1;
	ns.size = 3 * GiB;
	ns.align = GiB;
	is_int(pma_prov_spec_add(s, &ns), 0, "x: 3G on node 1, 1G aligned");
	const struct pma_prov_ns *e = pma_prov_spec_get(s, 2);
	ok(e && e->name != ns.name && strcmp(e->name, "x") == 0, "the name is copied");
	is_int(pma_prov_spec_allow_init_labels(s, "region3"), 0, "allow init-labels on region3");
	is_int(pma_prov_spec_add(NULL, &ns), -EINVAL, "NULL spec: -EINVAL");
	pma_prov_spec_free(&s);
}

static void
files(void)
{
	const char *path = scratch_path("pmctl-config");
	struct pma_prov_spec *s = NULL;
	int fd;

	unlink(path);
	is_int(pma_prov_spec_load(path, &s), -ENOENT, "a missing file: -ENOENT");
	fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
	static const char two[] = "namespace ckpt0 size=1G\nnamespace ckpt1 siz=1G\n";
	ok(fd >= 0 && write(fd, two, strlen(two)) == (ssize_t)strlen(two), "write a config file");
	close(fd);
	is_int(pma_prov_spec_load(path, &s), -EINVAL, "an error in it: -EINVAL");
	ok(strstr(pma_errormsg(), path) && strstr(pma_errormsg(), ":2:"),
			"the message names file and line: %s", pma_errormsg());
	fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
	ok(fd >= 0 && write(fd, "namespace a\0b\n", 14) == 14, "write a binary file");
	close(fd);
	is_int(pma_prov_spec_load(path, &s), -EINVAL, "binary data: -EINVAL");
	fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
	ok(fd >= 0 && write(fd, "namespace ckpt0 size=1G\n", 24) == 24, "write a good file");
	close(fd);
	is_int(pma_prov_spec_load(path, &s), 0, "it loads");
	is_int(pma_prov_spec_count(s), 1, "one entry");
	pma_prov_spec_free(&s);
	unlink(path);
}

int
main(void)
{
	sizes();
	parse_good();
	parse_bad();
	lines_and_calls();
	files();
	return done_testing();
}
