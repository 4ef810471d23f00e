/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * pmckpt -- list, verify, export, import and clean checkpoints, in the
 * stores of a pool and in a copy-out directory (see include/pmckpt.h).
 *
 *   pmckpt list   --pool FILE [--store NAME] [--verbose] [--verify]
 *   pmckpt list   --dir DIR
 *   pmckpt verify --pool FILE --store NAME
 *   pmckpt verify --file F.safetensors
 *   pmckpt verify --dir DIR
 *   pmckpt export --pool FILE --store NAME --out F.safetensors [--rank R --world-size W]
 *   pmckpt import --pool FILE --store NAME --file F.safetensors [--step N] [--size S]
 *   pmckpt clean  --dir DIR --keep K [--dry-run]
 *   pmckpt create --pool PATH [--size S] [--force]
 *   pmckpt check  --pool FILE
 *   pmckpt repair --pool FILE --out DIR
 *
 * Every subcommand takes --json: one JSON document on stdout with stable
 * field names, sizes in bytes.  Human-readable text otherwise.  Exit status
 * 0 on success, 1 on failure (with "pmckpt: <message>" on stderr), 2 on a
 * usage error.
 *
 * A SIGBUS (a media error on PM, a pool file truncated under us) is reported
 * with the pool and offset, exit status 1 (fault.c).
 *
 * The commands live in pool.c, create.c, dir.c and check.c; this file parses the
 * options, checks which each form takes and dispatches.
 */
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"

static const char usage_text[] =
	"usage: pmckpt <command> [options]\n"
	"\n"
	"  list   --pool FILE [--store NAME] [--verbose] [--verify]\n"
	"                                                  stores of a pool, their slots'\n"
	"                                                  sealed steps (--verify: recover)\n"
	"  list   --dir DIR                                steps of a copy-out directory\n"
	"  verify --pool FILE --store NAME                 recover (verify) a store\n"
	"  verify --file F.safetensors                     check a file (and its checksums)\n"
	"  verify --dir DIR                                check every complete step's files\n"
	"  export --pool FILE --store NAME --out F.safetensors [--rank R] [--world-size W]\n"
	"                                                  write the recovered checkpoint\n"
	"  import --pool FILE --store NAME --file F.safetensors [--step N] [--size S]\n"
	"                                                  load a file as a new checkpoint\n"
	"                                                  (creates a missing store from the\n"
	"                                                  file's layout, and the pool on a\n"
	"                                                  blank device or a new file of S bytes)\n"
	"  clean  --dir DIR --keep K [--dry-run]           keep the newest K complete steps of\n"
	"                                                  each run lineage (layout, world size),\n"
	"                                                  remove the others and leftovers\n"
	"                                                  (no copier may write to DIR meanwhile)\n"
	"  check  --pool FILE                              is the pool consistent, and does\n"
	"                                                  every store's checkpoint verify\n"
	"                                                  (exit 1 if not; reads only)\n"
	"  repair --pool FILE --out DIR                    save what verifies: each store's\n"
	"                                                  newest verified checkpoint as\n"
	"                                                  DIR/STORE.safetensors (reads the\n"
	"                                                  pool only, salvaging a damaged one)\n"
	"  create --pool PATH [--size S] [--force]        a pool on a devdax device, an fsdax\n"
	"                                                  file or a new file of S bytes (512M,\n"
	"                                                  8G); refuses a pool, a file system or\n"
	"                                                  other data there unless --force\n"
	"\n"
	"Every command takes --json (output as JSON, sizes in bytes) and -q/--quiet (no\n"
	"progress on stderr).  Exit status: 0 success, 1 failure, 2 usage error.\n";

static int
parse_u64(const char *s, unsigned long long max, unsigned long long *v)
{
	char *end;

	if (!s || !*s || *s == '-' || *s == '+')
		return -1;
	errno = 0;
	*v = strtoull(s, &end, 10);
	return errno || *end || *v > max ? -1 : 0;
}

/* ------------------------------------------------------------------ main */

enum { OPT_POOL = 256, OPT_STORE, OPT_DIR, OPT_FILE, OPT_OUT, OPT_KEEP, OPT_STEP, OPT_RANK,
	OPT_WORLD, OPT_JSON, OPT_DRY, OPT_VERIFY, OPT_SIZE, OPT_FORCE };

int
main(int argc, char **argv)
{
	static const struct option lo[] = {
		{"pool", required_argument, NULL, OPT_POOL},
		{"store", required_argument, NULL, OPT_STORE},
		{"dir", required_argument, NULL, OPT_DIR},
		{"file", required_argument, NULL, OPT_FILE},
		{"out", required_argument, NULL, OPT_OUT},
		{"keep", required_argument, NULL, OPT_KEEP},
		{"step", required_argument, NULL, OPT_STEP},
		{"rank", required_argument, NULL, OPT_RANK},
		{"world-size", required_argument, NULL, OPT_WORLD},
		{"json", no_argument, NULL, OPT_JSON},
		{"dry-run", no_argument, NULL, OPT_DRY},
		{"verify", no_argument, NULL, OPT_VERIFY},
		{"size", required_argument, NULL, OPT_SIZE},
		{"force", no_argument, NULL, OPT_FORCE},
		{"verbose", no_argument, NULL, 'v'},
		{"quiet", no_argument, NULL, 'q'},
		{"help", no_argument, NULL, 'h'},
		{0, 0, 0, 0},
	};
	struct opts o = {0};
	int c;

	tool_init("pmckpt", usage_text);
	fault_install();
	if (argc < 2)
		return tool_usage_error("no command given");
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
		fputs(usage_text, stdout);
		return 0;
	}
	o.cmd = argv[1];
	if (strcmp(o.cmd, "list") && strcmp(o.cmd, "verify") && strcmp(o.cmd, "export") &&
	    strcmp(o.cmd, "import") && strcmp(o.cmd, "clean") && strcmp(o.cmd, "create") &&
	    strcmp(o.cmd, "check") && strcmp(o.cmd, "repair"))
		return tool_usage_error("unknown command '%s'", o.cmd);

	optind = 2;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":vqh", lo, NULL)) != -1) {
		switch (c) {
		case OPT_POOL: o.pool = optarg; break;
		case OPT_STORE: o.store = optarg; break;
		case OPT_DIR: o.dir = optarg; break;
		case OPT_FILE: o.file = optarg; break;
		case OPT_OUT: o.out = optarg; break;
		case OPT_KEEP:
			if (parse_u64(optarg, UINT32_MAX, &o.keep) || o.keep == 0)
				return tool_usage_error("--keep wants a number of steps of at least 1, not '%s'",
						optarg);
			o.have_keep = 1;
			break;
		case OPT_STEP:
			if (parse_u64(optarg, INT64_MAX - 1, &o.step))
				return tool_usage_error("--step wants a step number, not '%s'", optarg);
			o.have_step = 1;
			break;
		case OPT_RANK:
			if (parse_u64(optarg, UINT32_MAX, &o.rank))
				return tool_usage_error("--rank wants a number, not '%s'", optarg);
			o.have_rank = 1;
			break;
		case OPT_WORLD:
			if (parse_u64(optarg, UINT32_MAX, &o.world_size) || o.world_size == 0)
				return tool_usage_error("--world-size wants a number of at least 1, not '%s'",
						optarg);
			o.have_world = 1;
			break;
		case OPT_SIZE:
			if (pma_size_parse(optarg, &o.size) || o.size == 0)
				return tool_usage_error("--size wants a size such as 512M, 8G or 1073741824, "
						"not '%s'", optarg);
			o.have_size = 1;
			break;
		case OPT_FORCE: o.force = 1; break;
		case OPT_JSON: o.json = 1; break;
		case OPT_DRY: o.dry_run = 1; break;
		case OPT_VERIFY: o.verify = 1; break;
		case 'v': o.verbose = 1; break;
		case 'q': o.quiet = 1; break;
		case 'h': fputs(usage_text, stdout); return 0;
		case ':': return tool_usage_error("option '%s' needs a value", argv[optind - 1]);
		default: return tool_usage_error("unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind < argc)
		return tool_usage_error("unexpected argument '%s'", argv[optind]);

	/* Which options each form takes. */
	int where = !!o.pool + !!o.dir + !!o.file;
	if (!strcmp(o.cmd, "create")) {
		if (!o.pool || o.dir || o.file || o.store || o.out || o.have_keep || o.have_step ||
		    o.have_rank || o.have_world || o.dry_run || o.verbose || o.verify)
			return tool_usage_error("create takes --pool PATH [--size S] [--force]");
		return cmd_create(&o);
	}
	if (!strcmp(o.cmd, "check") || !strcmp(o.cmd, "repair")) {
		int repair = !strcmp(o.cmd, "repair");
		if (!o.pool || o.dir || o.file || o.store || (!repair && o.out) || (repair && !o.out) ||
		    o.have_keep || o.have_step || o.have_rank || o.have_world || o.dry_run ||
		    o.verbose || o.verify || o.force || o.have_size)
			return tool_usage_error(repair ? "repair takes --pool FILE --out DIR" :
					"check takes --pool FILE");
		return repair ? cmd_repair(&o) : cmd_check(&o);
	}
	if (o.force)
		return tool_usage_error("--force is an option of create");
	if (o.have_size && strcmp(o.cmd, "import"))
		return tool_usage_error("--size is an option of create and import");
	int extra_export = o.out || o.have_rank || o.have_world;
	if (!strcmp(o.cmd, "list")) {
		if (where != 1 || o.file)
			return tool_usage_error("list wants one of --pool FILE or --dir DIR");
		if (o.dir && (o.store || o.verbose || o.verify))
			return tool_usage_error("list --dir takes no --store, --verbose or --verify");
		if (extra_export || o.have_keep || o.have_step || o.dry_run)
			return tool_usage_error("list takes only --pool [--store] [--verbose] [--verify] or --dir");
		return o.pool ? cmd_list_pool(&o) : cmd_list_dir(&o);
	}
	if (o.verbose || o.verify)
		return tool_usage_error("--verbose and --verify are options of list --pool");
	if (!strcmp(o.cmd, "verify")) {
		if (where != 1)
			return tool_usage_error("verify wants one of --pool FILE --store NAME, --file F or --dir DIR");
		if (o.pool && !o.store)
			return tool_usage_error("verify --pool needs --store NAME");
		if (!o.pool && o.store)
			return tool_usage_error("--store goes with --pool");
		if (extra_export || o.have_keep || o.have_step || o.dry_run)
			return tool_usage_error("verify takes no --out, --rank, --world-size, --keep, --step "
					"or --dry-run");
		return o.pool ? cmd_verify_store(&o) : o.file ? cmd_verify_file(&o) : cmd_verify_dir(&o);
	}
	if (!strcmp(o.cmd, "export")) {
		if (!o.pool || !o.store || !o.out)
			return tool_usage_error("export needs --pool FILE --store NAME --out F.safetensors");
		if (o.dir || o.file || o.have_keep || o.have_step || o.dry_run)
			return tool_usage_error("export takes only --pool, --store, --out, --rank, --world-size");
		return cmd_export(&o);
	}
	if (!strcmp(o.cmd, "import")) {
		if (!o.pool || !o.store || !o.file)
			return tool_usage_error("import needs --pool FILE --store NAME --file F.safetensors");
		if (o.dir || extra_export || o.have_keep || o.dry_run)
			return tool_usage_error("import takes only --pool, --store, --file, --step");
		return cmd_import(&o);
	}
	/* clean */
	if (!o.dir || !o.have_keep)
		return tool_usage_error("clean needs --dir DIR --keep K");
	if (o.pool || o.file || o.store || extra_export || o.have_step)
		return tool_usage_error("clean takes only --dir, --keep, --dry-run");
	return cmd_clean(&o);
}
