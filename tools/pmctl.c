/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * pmctl -- provision persistent memory for pmckpt: list NVDIMM regions,
 * namespaces and dax devices; create, reconfigure and destroy devdax
 * namespaces; converge the node to a description; print the device a
 * store should open.  Built on include/pmalloc_ns.h (libndctl/libdaxctl
 * underneath; the ndctl binary is not needed).
 *
 *   pmctl list        [--json] [--human] [--dax] [--state FILE]
 *   pmctl provision   [--config FILE] [--ns 'NAME key=value ...']...
 *                     [--name N --region R --numa N --size S|all --align 2M|1G
 *                      --count K --dev NS] [--init-labels] [--force]
 *                     [--dry-run] [--json] [--state FILE]
 *   pmctl create      --name N [--region R] [--numa N] [--size S|all] [--align A]
 *                     [--init-labels] [--json]
 *   pmctl reconfigure NAMESPACE [--align A] [--name N] [--force] [--json]
 *   pmctl destroy     NAMESPACE [--force]
 *   pmctl path        SELECTOR [--numa N | --gpu N | --pci BDF] [--state FILE]
 *
 * Exit status: 0 success (including "nothing to do"), 1 failure, with
 * "pmctl: <message>" on stderr, 2 usage error.  On a machine without
 * NVDIMMs, `list` says so on stderr and succeeds; every command that was
 * asked to change something fails.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pmalloc_ns.h"
#include "lib/toolutil.h"

static const char usage_text[] =
	"usage: pmctl <command> [options]\n"
	"\n"
	"  list        [--json] [--human] [--dax] [--state FILE]\n"
	"              buses, regions, namespaces (--dax: dax devices); JSON in ndctl's style\n"
	"  provision   [--config FILE] [--ns 'NAME key=value ...'] [--name N --region R\n"
	"              --numa N --size S|all --align 2M|1G --count K --dev NS]\n"
	"              [--init-labels] [--force] [--dry-run] [--json] [--state FILE]\n"
	"              converge the node to the description; a second run changes nothing\n"
	"  create      --name N [--region R] [--numa N] [--size S|all] [--align 2M|1G]\n"
	"              [--init-labels] [--json]      one devdax namespace (fails if N exists)\n"
	"  reconfigure NAMESPACE [--align A] [--name N] [--force] [--json]\n"
	"              make an existing namespace devdax (label-less namespace0.0 included)\n"
	"  destroy     NAMESPACE [--force]\n"
	"              refused while in use; a pmckpt pool or file system needs --force\n"
	"  path        SELECTOR [--numa N | --gpu N | --pci BDF] [--state FILE]\n"
	"              the /dev/daxX.Y of a namespace name, namespace, region or device\n"
	"\n"
	"Config file / --ns statements (see docs/provisioning.md):\n"
	"  namespace NAME [region=R] [numa=N] [size=S|all] [align=2M|1G] [count=K] [dev=NS]\n"
	"  init-labels REGION|all\n";

static void
usage(FILE *f)
{
	fputs(usage_text, f);
}

static const char *
sz(uint64_t v, char *buf)
{
	return pma_size_format(v, buf, 32);
}

/* Reads a whole file (a JSON listing). */
static char *
slurp(const char *path)
{
	FILE *f = fopen(path, "re");
	char *buf = NULL;
	size_t len = 0, cap = 0;

	if (!f)
		return NULL;
	for (;;) {
		if (len + 4096 + 1 > cap) {
			cap = cap ? 2 * cap : 16384;
			char *n = realloc(buf, cap);
			if (!n) {
				free(buf);
				fclose(f);
				errno = ENOMEM;
				return NULL;
			}
			buf = n;
		}
		size_t n = fread(buf + len, 1, 4096, f);
		len += n;
		if (n < 4096)
			break;
	}
	int err = ferror(f);
	fclose(f);
	if (err) {
		free(buf);
		errno = EIO;
		return NULL;
	}
	buf[len] = '\0';
	return buf;
}

/* The machine's state, or the described one of --state FILE. */
static int
get_state(const char *state_file, struct pma_ns_state **s)
{
	int rc;

	if (state_file) {
		char *text = slurp(state_file);
		if (!text)
			return tool_fail("%s: %s", state_file, strerror(errno));
		rc = pma_ns_state_from_json(text, s);
		free(text);
		if (rc)
			return tool_fail("%s: %s", state_file, pma_errormsg());
		return 0;
	}
	rc = pma_ns_state_read(s);
	if (rc)
		return tool_fail("%s", pma_errormsg());
	return 0;
}

static int
print_json(char *json)
{
	if (!json)
		return tool_fail("%s", pma_errormsg());
	puts(json);
	free(json);
	return 0;
}

/* ---------------------------------------------------------------- list */

static void
print_human(const struct pma_ns_state *s, int dax_only)
{
	char b1[32], b2[32], b3[32], b4[32];
	struct pma_ns_bus_info b;
	struct pma_ns_region_info r;
	struct pma_ns_info n;
	struct pma_ns_dax_info d;

	for (size_t i = 0; !dax_only && i < pma_ns_state_nbuses(s); i++) {
		pma_ns_state_bus(s, i, &b);
		printf("%s (%s)\n", b.dev, b.provider ? b.provider : "unknown provider");
		for (size_t j = 0; j < pma_ns_state_nregions(s); j++) {
			pma_ns_state_region(s, j, &r);
			if (!r.bus || strcmp(r.bus, b.dev) != 0)
				continue;
			printf("  %s  %s %s, %s free (largest piece %s), align %s, %u-way, "
					"NUMA node %d (target %d), persistence %s, labels %s%s%s\n",
					r.dev, sz(r.size, b1), r.type ? r.type : "?",
					sz(r.available_size, b2), sz(r.max_available_extent, b3),
					sz(r.align, b4), r.interleave_ways, r.numa_node, r.target_node,
					r.persistence_domain ? r.persistence_domain : "unknown",
					pma_ns_labels_name(r.labels), r.enabled ? "" : ", disabled",
					r.readonly ? ", read-only" : "");
			for (size_t k = 0; k < pma_ns_state_nnamespaces(s); k++) {
				pma_ns_state_namespace(s, k, &n);
				if (!n.region || strcmp(n.region, r.dev) != 0)
					continue;
				char dev[80] = "";
				if (n.chardev)
					snprintf(dev, sizeof(dev), "/dev/%s", n.chardev);
				else if (n.blockdev)
					snprintf(dev, sizeof(dev), "/dev/%s", n.blockdev);
				printf("    %-14s %-7s %12s", n.dev, pma_ns_mode_name(n.mode),
						sz(n.size, b1));
				if (n.align)
					printf("  align %s", sz(n.align, b2));
				printf("  %s%s%s%s%s%s\n", n.name ? "name " : "",
						n.name ? n.name : "", n.name ? "  " : "", dev,
						n.enabled ? "" : "  (disabled)",
						n.in_use ? "  (in use)" : "");
			}
		}
	}
	if (pma_ns_state_ndax(s))
		printf("%s", dax_only ? "" : "dax devices:\n");
	for (size_t i = 0; i < pma_ns_state_ndax(s); i++) {
		pma_ns_state_dax(s, i, &d);
		printf("%s%-14s %12s  align %s  NUMA node %d  %s", dax_only ? "" : "  ", d.path,
				sz(d.size, b1), sz(d.align, b2), d.numa_node,
				d.mode ? d.mode : "devdax");
		if (d.namespace)
			printf("  (%s on %s)", d.namespace, d.region ? d.region : "?");
		printf("%s\n", d.in_use ? "  (in use)" : "");
	}
}

static int
cmd_list(int argc, char **argv)
{
	static const struct option opts[] = {
		{"json", no_argument, NULL, 'j'},
		{"human", no_argument, NULL, 'u'},
		{"dax", no_argument, NULL, 'X'},
		{"state", required_argument, NULL, 'S'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int json = 0, c;
	unsigned flags = 0;
	const char *state_file = NULL;
	struct pma_ns_state *s = NULL;

	while ((c = getopt_long(argc, argv, "juXS:h", opts, NULL)) != -1) {
		switch (c) {
		case 'j': json = 1; break;
		case 'u': flags |= PMA_NS_JSON_HUMAN; break;
		case 'X': flags |= PMA_NS_JSON_DAX; break;
		case 'S': state_file = optarg; break;
		case 'h': usage(stdout); return 0;
		default: return tool_usage_error("list: unknown option");
		}
	}
	if (optind < argc)
		return tool_usage_error("list: unexpected argument '%s'", argv[optind]);
	if (get_state(state_file, &s))
		return 1;
	const char *absent = pma_ns_state_absent_reason(s);
	if (absent && pma_ns_state_ndax(s) == 0)
		fprintf(stderr, "pmctl: %s\n", absent);
	int rc = 0;
	if (json) {
		char *text = NULL;
		pma_ns_state_to_json(s, flags, &text);
		rc = print_json(text);
	} else {
		print_human(s, !!(flags & PMA_NS_JSON_DAX));
	}
	pma_ns_state_free(&s);
	return rc;
}

/* ----------------------------------------------------------- provision */

struct entry_opts {
	const char *name, *region, *numa, *size, *align, *count, *dev;
	int any;
};

/* The --name/--region/... flags as one namespace statement. */
static int
entry_to_spec(const struct entry_opts *e, struct pma_prov_spec *spec)
{
	char line[512];
	size_t l = 0;

	if (!e->any)
		return 0;
	l += (size_t)snprintf(line + l, sizeof(line) - l, "namespace");
#define KV(k, v)                                                                           \
	if ((v) && l < sizeof(line))                                                       \
		l += (size_t)snprintf(line + l, sizeof(line) - l, " %s%s", k, v);
	KV("name=", e->name)
	KV("region=", e->region)
	KV("numa=", e->numa)
	KV("size=", e->size)
	KV("align=", e->align)
	KV("count=", e->count)
	KV("dev=", e->dev)
#undef KV
	if (l >= sizeof(line))
		return tool_usage_error("namespace options too long");
	for (const char *p = line; *p; p++)
		if (*p == '#')
			return tool_usage_error("'#' is not allowed in a namespace option");
	if (pma_prov_spec_add_line(spec, line))
		return tool_fail("%s", pma_errormsg());
	return 0;
}

static void
print_plan(const struct pma_prov_plan *p, int applied)
{
	struct pma_prov_action a;

	for (size_t i = 0; i < pma_prov_plan_nactions(p); i++) {
		pma_prov_plan_action(p, i, &a);
		const char *tag = a.op == PMA_PROV_KEEP ? "ok" :
				a.op == PMA_PROV_UNMANAGED ? "--" :
				applied ? (a.done ? "done" : "NOT DONE") : "plan";
		printf("  [%s] %s", tag, a.what);
		if (a.done && (a.result_dev || a.result_chardev))
			printf(" -> %s%s%s", a.result_dev ? a.result_dev : "",
					a.result_chardev ? " /dev/" : "",
					a.result_chardev ? a.result_chardev : "");
		putchar('\n');
	}
}

/* Plans spec against the node (or --state) and applies it unless dry_run. */
static int
converge(const char *cmd, struct pma_prov_spec *spec, unsigned flags, int dry_run, int json,
		const char *state_file)
{
	struct pma_ns_state *s = NULL;
	struct pma_prov_plan *p = NULL;
	int rc;

	if (get_state(state_file, &s))
		return 1;
	if (pma_ns_state_nregions(s) == 0) {
		rc = tool_fail("%s: nothing changed: %s", cmd, pma_ns_state_absent_reason(s));
		pma_ns_state_free(&s);
		return rc;
	}
	rc = pma_prov_plan_new(s, spec, flags, &p);
	pma_ns_state_free(&s);
	if (rc)
		return tool_fail("%s: nothing changed: %s", cmd, pma_errormsg());
	size_t changes = pma_prov_plan_changes(p);
	int arc = 0;
	if (!dry_run && changes)
		arc = pma_prov_plan_apply(p);
	if (json) {
		char *text = NULL;
		pma_prov_plan_to_json(p, 0, &text);
		print_json(text);
	} else {
		print_plan(p, !dry_run);
	}
	if (arc) {
		rc = tool_fail("%s: %s", cmd, pma_errormsg());
	} else if (!changes) {
		if (!json)
			printf("pmctl %s: nothing to do: the node already matches the description\n",
					cmd);
	} else if (!json) {
		printf("pmctl %s: %zu change%s %s\n", cmd, changes, changes == 1 ? "" : "s",
				dry_run ? "planned (dry run: nothing changed)" : "applied");
	}
	pma_prov_plan_free(&p);
	return rc;
}

static int
parse_provision(int argc, char **argv, const char *cmd, int need_name)
{
	static const struct option opts[] = {
		{"config", required_argument, NULL, 'c'},
		{"ns", required_argument, NULL, 'N'},
		{"name", required_argument, NULL, 'n'},
		{"region", required_argument, NULL, 'r'},
		{"numa", required_argument, NULL, 'm'},
		{"size", required_argument, NULL, 's'},
		{"align", required_argument, NULL, 'a'},
		{"count", required_argument, NULL, 'k'},
		{"dev", required_argument, NULL, 'd'},
		{"init-labels", no_argument, NULL, 'L'},
		{"force", no_argument, NULL, 'f'},
		{"dry-run", no_argument, NULL, 'D'},
		{"json", no_argument, NULL, 'j'},
		{"state", required_argument, NULL, 'S'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct entry_opts e = {0};
	struct pma_prov_spec *spec = NULL;
	const char *config = NULL, *state_file = NULL;
	const char **lines = calloc((size_t)argc + 1, sizeof(*lines));
	size_t nlines = 0;
	unsigned flags = 0;
	int dry_run = 0, json = 0, c, rc;
	int create = strcmp(cmd, "create") == 0;

	if (!lines)
		return tool_fail("out of memory");
	optind = 1;
	while ((c = getopt_long(argc, argv, "c:N:n:r:m:s:a:k:d:LfDjS:h", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			if (create)
				goto bad;
			config = optarg;
			break;
		case 'N':
			if (create)
				goto bad;
			lines[nlines++] = optarg;
			break;
		case 'n': e.name = optarg; e.any = 1; break;
		case 'r': e.region = optarg; e.any = 1; break;
		case 'm': e.numa = optarg; e.any = 1; break;
		case 's': e.size = optarg; e.any = 1; break;
		case 'a': e.align = optarg; e.any = 1; break;
		case 'k':
			if (create)
				goto bad;
			e.count = optarg;
			e.any = 1;
			break;
		case 'd':
			if (create)
				goto bad;
			e.dev = optarg;
			e.any = 1;
			break;
		case 'L': flags |= PMA_NS_INIT_LABELS; break;
		case 'f': flags |= PMA_NS_FORCE; break;
		case 'D': dry_run = 1; break;
		case 'j': json = 1; break;
		case 'S': state_file = optarg; dry_run = 1; break;
		case 'h': usage(stdout); rc = 0; goto out;
		default:
		bad:
			rc = tool_usage_error("%s: unknown option", cmd);
			goto out;
		}
	}
	if (optind < argc) {
		rc = tool_usage_error("%s: unexpected argument '%s'", cmd, argv[optind]);
		goto out;
	}
	if (need_name && !e.name) {
		rc = tool_usage_error("%s: --name is required", cmd);
		goto out;
	}
	/* The config file first, then --ns statements, then the single-entry flags. */
	if (config ? pma_prov_spec_load(config, &spec) : pma_prov_spec_new(&spec)) {
		rc = tool_fail("%s: %s", cmd, pma_errormsg());
		goto out;
	}
	for (size_t i = 0; i < nlines; i++)
		if (pma_prov_spec_add_line(spec, lines[i])) {
			rc = tool_fail("%s: --ns '%s': %s", cmd, lines[i], pma_errormsg());
			goto out;
		}
	if ((rc = entry_to_spec(&e, spec)))
		goto out;
	if (pma_prov_spec_count(spec) == 0) {
		rc = tool_usage_error("%s: describe at least one namespace (--config, --ns or --name)",
				cmd);
		goto out;
	}
	if (create)
		flags |= PMA_NS_EXCLUSIVE;
	rc = converge(cmd, spec, flags, dry_run, json, state_file);
out:
	free(lines);
	pma_prov_spec_free(&spec);
	return rc;
}

/* --------------------------------------------------- reconfigure, destroy */

static int
cmd_reconfigure(int argc, char **argv)
{
	static const struct option opts[] = {
		{"align", required_argument, NULL, 'a'},
		{"name", required_argument, NULL, 'n'},
		{"force", no_argument, NULL, 'f'},
		{"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct pma_prov_spec *spec = NULL;
	struct pma_ns_state *s = NULL;
	struct pma_ns_info n;
	uint64_t align = 0;
	const char *name = NULL;
	unsigned flags = 0;
	int json = 0, c, rc;

	optind = 1;
	while ((c = getopt_long(argc, argv, "a:n:fjh", opts, NULL)) != -1) {
		switch (c) {
		case 'a':
			if (pma_size_parse(optarg, &align))
				return tool_usage_error("reconfigure: --align: %s", pma_errormsg());
			break;
		case 'n': name = optarg; break;
		case 'f': flags |= PMA_NS_FORCE; break;
		case 'j': json = 1; break;
		case 'h': usage(stdout); return 0;
		default: return tool_usage_error("reconfigure: unknown option");
		}
	}
	if (optind != argc - 1)
		return tool_usage_error("reconfigure: name one namespace (namespaceX.Y, its name or "
				"daxX.Y)");
	const char *target = argv[optind];
	if (get_state(NULL, &s))
		return 1;
	if (pma_ns_state_nregions(s) == 0) {
		rc = tool_fail("reconfigure: nothing changed: %s", pma_ns_state_absent_reason(s));
		goto out;
	}
	/* Accept the namespace's name or dax device as well as namespaceX.Y. */
	const char *dev = NULL;
	for (size_t i = 0; i < pma_ns_state_nnamespaces(s); i++) {
		pma_ns_state_namespace(s, i, &n);
		if (strcmp(n.dev, target) == 0 || (n.chardev && (strcmp(n.chardev, target) == 0 ||
				(strncmp(target, "/dev/", 5) == 0 &&
				strcmp(n.chardev, target + 5) == 0))) ||
				(n.name && strcmp(n.name, target) == 0)) {
			if (dev) {
				rc = tool_fail("reconfigure: '%s' names several namespaces: give "
						"namespaceX.Y", target);
				goto out;
			}
			dev = n.dev;
		}
	}
	if (!dev) {
		rc = tool_fail("reconfigure: no namespace '%s' (pmctl list shows them)", target);
		goto out;
	}
	struct pma_prov_ns want = {.name = name, .dev = dev, .align = align, .numa_node = -1};
	if (pma_prov_spec_new(&spec) || pma_prov_spec_add(spec, &want)) {
		rc = tool_fail("reconfigure: %s", pma_errormsg());
		goto out;
	}
	rc = converge("reconfigure", spec, flags, 0, json, NULL);
out:
	pma_prov_spec_free(&spec);
	pma_ns_state_free(&s);
	return rc;
}

static int
cmd_destroy(int argc, char **argv)
{
	static const struct option opts[] = {
		{"force", no_argument, NULL, 'f'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	unsigned flags = 0;
	int c;

	optind = 1;
	while ((c = getopt_long(argc, argv, "fh", opts, NULL)) != -1) {
		switch (c) {
		case 'f': flags |= PMA_NS_FORCE; break;
		case 'h': usage(stdout); return 0;
		default: return tool_usage_error("destroy: unknown option");
		}
	}
	if (optind != argc - 1)
		return tool_usage_error("destroy: name one namespace (namespaceX.Y, its name or daxX.Y)");
	if (pma_ns_destroy(argv[optind], flags))
		return tool_fail("destroy: nothing changed: %s", pma_errormsg());
	printf("pmctl destroy: %s destroyed\n", argv[optind]);
	return 0;
}

/* ---------------------------------------------------------------- path */

static int
cmd_path(int argc, char **argv)
{
	static const struct option opts[] = {
		{"numa", required_argument, NULL, 'm'},
		{"gpu", required_argument, NULL, 'g'},
		{"pci", required_argument, NULL, 'p'},
		{"state", required_argument, NULL, 'S'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *state_file = NULL, *gpu = NULL, *pci = NULL;
	int node = -1, c, nsel = 0;
	char bdf[16] = "", path[128], *end;
	struct pma_ns_state *s = NULL;

	optind = 1;
	while ((c = getopt_long(argc, argv, "m:g:p:S:h", opts, NULL)) != -1) {
		switch (c) {
		case 'm':
			node = (int)strtol(optarg, &end, 10);
			if (*end || node < 0)
				return tool_usage_error("path: --numa takes a node number");
			nsel++;
			break;
		case 'g': gpu = optarg; nsel++; break;
		case 'p': pci = optarg; nsel++; break;
		case 'S': state_file = optarg; break;
		case 'h': usage(stdout); return 0;
		default: return tool_usage_error("path: unknown option");
		}
	}
	if (nsel > 1)
		return tool_usage_error("path: give one of --numa, --gpu, --pci");
	if (optind != argc - 1)
		return tool_usage_error("path: give one selector (a namespace name, namespaceX.Y, "
				"regionN or daxX.Y)");
	if (gpu) {
		long g = strtol(gpu, &end, 10);
		if (*end || g < 0 || g > 4096)
			return tool_usage_error("path: --gpu takes a GPU number");
		if (pma_ns_gpu_numa_node((int)g, &node, bdf))
			return tool_fail("path: %s", pma_errormsg());
	}
	if (pci && pma_ns_pci_numa_node(pci, &node))
		return tool_fail("path: %s", pma_errormsg());
	if ((gpu || pci) && node < 0)
		fprintf(stderr, "pmctl: path: note: %s%s%s%s%s reports no NUMA node: any node "
				"will do\n", gpu ? "GPU " : "", gpu ? gpu : pci, bdf[0] ? " (" : "",
				bdf, bdf[0] ? ")" : "");
	if (get_state(state_file, &s))
		return 1;
	int rc = pma_ns_resolve(s, argv[optind], node, path, sizeof(path));
	pma_ns_state_free(&s);
	if (rc)
		return tool_fail("path: %s", pma_errormsg());
	puts(path);
	return 0;
}

int
main(int argc, char **argv)
{
	tool_init("pmctl", "(pmctl help for usage)\n");
	if (argc < 2)
		return usage(stderr), 2;
	const char *cmd = argv[1];
	argv++;
	argc--;
	if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
		usage(stdout);
		return 0;
	}
	if (strcmp(cmd, "list") == 0)
		return cmd_list(argc, argv);
	if (strcmp(cmd, "provision") == 0)
		return parse_provision(argc, argv, "provision", 0);
	if (strcmp(cmd, "create") == 0)
		return parse_provision(argc, argv, "create", 1);
	if (strcmp(cmd, "reconfigure") == 0)
		return cmd_reconfigure(argc, argv);
	if (strcmp(cmd, "destroy") == 0)
		return cmd_destroy(argc, argv);
	if (strcmp(cmd, "path") == 0)
		return cmd_path(argc, argv);
	return tool_usage_error("unknown command '%s'", cmd);
}
