/* SPDX-License-Identifier: BSD-3-Clause */
/* options.c -- pmbench's command line: every value range-checked, the valid ones in the error. */
#include <getopt.h>
#include <numa.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pmbench.h"
#include "pmalloc.h"
#include "lib/toolutil.h"

struct pmb_opts opt;

/* A list of sizes (or plain integers) in [lo, hi]; empty entries are refused. */
static void
parse_list(const char *what, const char *s, struct pmb_list *l, int sizes, uint64_t lo, uint64_t hi)
{
	char buf[1024], *p = buf, *tok;
	char range[96];

	if (sizes) {
		char a[16], b[16];
		tool_fmt(range, sizeof(range), "sizes from %s to %s (suffix K, M, G: powers of 1024)",
				tool_hsize(lo, a, sizeof(a)), tool_hsize(hi, b, sizeof(b)));
	} else {
		tool_fmt(range, sizeof(range), "integers from %llu to %llu", (unsigned long long)lo,
				(unsigned long long)hi);
	}
	if (strlen(s) >= sizeof(buf))
		dief(what, "list too long (%zu characters, %zu at most)", strlen(s), sizeof(buf) - 1);
	snprintf(buf, sizeof(buf), "%s", s);
	l->n = 0;
	while ((tok = strsep(&p, ",")) != NULL) {
		uint64_t v;
		unsigned long u;
		if (!*tok)
			dief(what, "'%s' has an empty entry; expected a comma-separated list of %s", s, range);
		if (l->n == MAXV)
			dief(what, "more than %d values", MAXV);
		if (sizes ? pma_size_parse(tok, &v) : (*tok == '-' || *tok == '+' ||
				tool_parse_uint(tok, 0, ~0ul, &u) || ((v = u), 0)))
			dief(what, "'%s' is not a number; expected %s", tok, range);
		if (v < lo || v > hi)
			dief(what, "'%s' is out of range; expected %s", tok, range);
		l->v[l->n++] = (size_t)v;
	}
}

/* Parses a list of names into indexes of `names`; the valid ones are in the error. */
static int
parse_names(const char *what, const char *s, const char *const *names, int nnames, int *out)
{
	char buf[256], *p = buf, *tok, valid[128] = "";
	int n = 0;

	for (int k = 0; k < nnames; k++)
		tool_fmt(valid + strlen(valid), sizeof(valid) - strlen(valid), "%s%s", k ? ", " : "",
				names[k]);
	snprintf(buf, sizeof(buf), "%s", s);
	while ((tok = strsep(&p, ",")) != NULL) {
		int k;
		for (k = 0; k < nnames && strcmp(tok, names[k]); k++)
			;
		if (k == nnames)
			dief(what, "unknown '%s'; valid: %s", tok, valid);
		for (int i = 0; i < n; i++)
			if (out[i] == k)
				dief(what, "'%s' given twice", tok);
		out[n++] = k;
	}
	return n;
}

const char *
pmb_align_name(const struct pmb_align *a, char *buf, size_t len)
{
	if (a->offset)
		tool_fmt(buf, len, "align%u+%u", a->align, a->offset);
	else
		tool_fmt(buf, len, "align%u", a->align);
	return buf;
}

/*
 * --aligns: N (a power of two, 8 .. 4096: items start on N-byte boundaries),
 * +K (K bytes past 128-byte boundaries, 1 .. 127), N+K (K bytes past
 * N-byte boundaries, K < N), and the former names aligned (128) and
 * misaligned (+8).
 */
static void
parse_aligns(const char *s)
{
	static const char valid[] = "expected a power of two from 8 to 4096 (64, 128, 256, 4096), "
			"+K (K bytes past a 128-byte boundary, K 1..127), N+K (K < N), aligned (=128) or "
			"misaligned (=+8)";
	char buf[512], *p = buf, *tok;

	snprintf(buf, sizeof(buf), "%s", s);
	opt.naligns = 0;
	while ((tok = strsep(&p, ",")) != NULL) {
		struct pmb_align a = {128, 0};
		unsigned long n = 128, k = 0;
		char *plus = strchr(tok, '+');

		if (!*tok)
			dief("--aligns", "'%s' has an empty entry; %s", s, valid);
		if (opt.naligns == MAXV)
			dief("--aligns", "more than %d values", MAXV);
		if (!strcmp(tok, "aligned")) {
			n = 128;
		} else if (!strcmp(tok, "misaligned")) {
			k = 8;
		} else {
			if (plus)
				*plus = '\0';
			if ((*tok && (*tok == '-' || tool_parse_uint(tok, 8, 4096, &n) || (n & (n - 1)))) ||
			    (plus && (plus[1] == '-' || tool_parse_uint(plus + 1, 1, 4095, &k) || k >= n))) {
				if (plus)
					*plus = '+';
				dief("--aligns", "'%s': %s", tok, valid);
			}
		}
		a.align = (unsigned)n;
		a.offset = (unsigned)k;
		for (int i = 0; i < opt.naligns; i++)
			if (opt.aligns[i].align == a.align && opt.aligns[i].offset == a.offset)
				dief("--aligns", "'%s' given twice", tok);
		opt.aligns[opt.naligns++] = a;
	}
}

static void
sizes_pow4(struct pmb_list *l, size_t lo, size_t hi)
{
	l->n = 0;
	for (size_t s = lo; s <= hi && l->n < MAXV; s *= 4)
		l->v[l->n++] = s;
}

static void
usage(FILE *f)
{
	fprintf(f,
		"usage: pmbench [options]\n"
		"  --region PATH      devdax device, fsdax file or file (default: a file in /dev/shm,\n"
		"                     created and removed); its contents are overwritten\n"
		"  --size BYTES       size of a region pmbench creates (default 128M; 2M .. 16T)\n"
		"  --out PREFIX       writes PREFIX.csv, PREFIX.json, PREFIX.svg, PREFIX.latency.csv\n"
		"                     (default pmbench); checked before anything is measured\n"
		"  --sizes LIST       transfer sizes, 1 .. 64M, e.g. 64,4K,256K,4M (default; --full:\n"
		"                     64 .. 64M)\n"
		"  --threads LIST     thread counts, 1 .. 1024 (default 1; --full: 1,2,4,.. up to the CPUs)\n"
		"  --nodes LIST|all   NUMA nodes to run on (default: the region's node)\n"
		"  --methods LIST     nt,temporal    --layouts LIST  separated,interleaved\n"
		"  --aligns LIST      powers of two 8 .. 4096 and +K offsets past 128 B, N+K past N B\n"
		"                     (default 128,+8)    --read-methods LIST  memcpy,checksum\n"
		"  --time-ms N        measured time per configuration and repeat, 1 .. 3600000\n"
		"                     (default 30; --full: 200)\n"
		"  --repeat N         measurements per configuration after the warm-up, 1 .. %d\n"
		"                     (default 1; --full: 3): min / median / max per row\n"
		"  --lat-sizes LIST   item sizes of the write+persist latency percentiles, 8 .. 64K\n"
		"                     (default 64,256,1K,4K)    --no-latency: none\n"
		"  --gpu-sizes LIST   tensor sizes for the GPU strategies, 128 .. 1G (default 1M,16M)\n"
		"  --gpu-hash LIST    where the GPU strategies' checksums are computed: host (the\n"
		"                     writers), device (the GPU) (default host,device)\n"
		"  --gpu-threads N    the GPU strategies' writers, 1 .. 64 (default: 12 hashing on\n"
		"                     the host, 4 on the device, at most the CPUs)\n"
		"  --full             the full sweep (minutes); later options override it\n"
		"  --overwrite        run on a region that holds a pmckpt pool (destroys it)\n"
		"  --no-prewrite      do not write the whole region before measuring (default: it is\n"
		"                     written once, so that no first touch reaches a measurement)\n"
		"  --no-read, --no-gpu, --keep (keep a created region), --quiet\n", MAXREP);
}

void
pmb_parse_args(int argc, char **argv)
{
	static const struct option lo[] = {
		{"region", required_argument, NULL, 'r'}, {"size", required_argument, NULL, 'S'},
		{"out", required_argument, NULL, 'o'}, {"sizes", required_argument, NULL, 's'},
		{"threads", required_argument, NULL, 't'}, {"nodes", required_argument, NULL, 'N'},
		{"methods", required_argument, NULL, 'm'}, {"layouts", required_argument, NULL, 'l'},
		{"aligns", required_argument, NULL, 'a'}, {"read-methods", required_argument, NULL, 'R'},
		{"time-ms", required_argument, NULL, 'T'}, {"gpu-sizes", required_argument, NULL, 'g'},
		{"gpu-hash", required_argument, NULL, 'H'}, {"gpu-threads", required_argument, NULL, 'W'},
		{"repeat", required_argument, NULL, 'P'}, {"lat-sizes", required_argument, NULL, 'L'},
		{"no-latency", no_argument, NULL, '3'}, {"no-prewrite", no_argument, NULL, '4'},
		{"full", no_argument, NULL, 'F'}, {"no-read", no_argument, NULL, '1'},
		{"no-gpu", no_argument, NULL, '2'}, {"keep", no_argument, NULL, 'k'},
		{"quiet", no_argument, NULL, 'q'}, {"overwrite", no_argument, NULL, 'O'},
		{"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0},
	};
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	int c, all_nodes = 0;
	unsigned long u;
	uint64_t v;

	opt.argc = argc;
	opt.argv = argv;
	opt.out = "pmbench";
	opt.region_size = 128u << 20;
	opt.time_ms = 30;
	opt.repeat = 1;
	opt.read = opt.gpu = opt.latency = opt.prewrite = 1;
	opt.sizes = (struct pmb_list){.v = {64, 4096, 256 << 10, 4 << 20}, .n = 4};
	opt.threads = (struct pmb_list){.v = {1}, .n = 1};
	opt.gpu_sizes = (struct pmb_list){.v = {1 << 20, 16 << 20}, .n = 2};
	opt.lat_sizes = (struct pmb_list){.v = {64, 256, 1024, 4096}, .n = 4};
	opt.nmethods = 2, opt.methods[0] = M_NT, opt.methods[1] = M_TEMPORAL;
	opt.nlayouts = 2, opt.layouts[0] = L_SEPARATED, opt.layouts[1] = L_INTERLEAVED;
	opt.naligns = 2, opt.aligns[0] = (struct pmb_align){128, 0};
	opt.aligns[1] = (struct pmb_align){128, 8};
	opt.nrmethods = 2, opt.rmethods[0] = M_MEMCPY, opt.rmethods[1] = M_CHECKSUM;
	opt.ngpu_hashes = 2, opt.gpu_hashes[0] = 0, opt.gpu_hashes[1] = 1;
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case 'r': opt.region = optarg; break;
		case 'S':
			if (pma_size_parse(optarg, &v) || v < (2u << 20) || v > ((uint64_t)16 << 40))
				dief("--size", "'%s': expected a size from 2 MiB to 16 TiB (suffix K, M, G, T)",
						optarg);
			opt.region_size = (size_t)v;
			break;
		case 'o':
			if (!*optarg)
				die("--out", "empty prefix");
			opt.out = optarg;
			break;
		case 's': parse_list("--sizes", optarg, &opt.sizes, 1, 1, 64u << 20); break;
		case 't': parse_list("--threads", optarg, &opt.threads, 0, 1, 1024); break;
		case 'N':
			all_nodes = !strcmp(optarg, "all");
			if (!all_nodes)
				parse_list("--nodes", optarg, &opt.nodes, 0, 0,
						numa_available() >= 0 ? (uint64_t)numa_max_node() : 0);
			break;
		case 'm':
			opt.nmethods = parse_names("--methods", optarg, pmb_method_names, 2, opt.methods);
			break;
		case 'l':
			opt.nlayouts = parse_names("--layouts", optarg, pmb_layout_names, 2, opt.layouts);
			break;
		case 'a': parse_aligns(optarg); break;
		case 'R': {
			int r[2];
			opt.nrmethods = parse_names("--read-methods", optarg, pmb_method_names + 2, 2, r);
			for (int i = 0; i < opt.nrmethods; i++)
				opt.rmethods[i] = r[i] + 2;
			break;
		}
		case 'T':
			if (*optarg == '-' || *optarg == '+' || tool_parse_uint(optarg, 1, 3600000, &u))
				dief("--time-ms", "'%s': expected milliseconds from 1 to 3600000", optarg);
			opt.time_ms = (unsigned)u;
			break;
		case 'P':
			if (*optarg == '-' || *optarg == '+' || tool_parse_uint(optarg, 1, MAXREP, &u))
				dief("--repeat", "'%s': expected a count from 1 to %d", optarg, MAXREP);
			opt.repeat = (unsigned)u;
			break;
		case 'g': parse_list("--gpu-sizes", optarg, &opt.gpu_sizes, 1, 128, 1u << 30); break;
		case 'H':
			opt.ngpu_hashes = parse_names("--gpu-hash", optarg, pmb_gpu_hash_names, 2,
					opt.gpu_hashes);
			break;
		case 'W':
			if (*optarg == '-' || *optarg == '+' || tool_parse_uint(optarg, 1, 64, &u))
				dief("--gpu-threads", "'%s': expected a count from 1 to 64", optarg);
			opt.gpu_threads = (unsigned)u;
			break;
		case 'L': parse_list("--lat-sizes", optarg, &opt.lat_sizes, 1, 8, 64u << 10); break;
		case '3': opt.latency = 0; break;
		case '4': opt.prewrite = 0; break;
		case 'F':
			sizes_pow4(&opt.sizes, 64, 64 << 20);
			opt.threads.n = 0;
			for (long t = 1; t <= cpus && opt.threads.n < MAXV; t *= 2)
				opt.threads.v[opt.threads.n++] = (size_t)t;
			all_nodes = 1;
			opt.time_ms = 200;
			opt.repeat = 3;
			opt.gpu_sizes = (struct pmb_list){.v = {1 << 20, 4 << 20, 16 << 20, 64 << 20}, .n = 4};
			break;
		case '1': opt.read = 0; break;
		case '2': opt.gpu = 0; break;
		case 'k': opt.keep = 1; break;
		case 'q': opt.quiet = 1; break;
		case 'O': opt.overwrite = 1; break;
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); exit(2);
		}
	}
	if (optind != argc) {
		fprintf(stderr, "pmbench: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		exit(2);
	}
	if (all_nodes) {
		opt.nodes.n = 0;
		if (numa_available() >= 0)
			for (int n = 0; n <= numa_max_node() && opt.nodes.n < MAXV; n++) {
				struct bitmask *b = numa_allocate_cpumask();
				if (numa_node_to_cpus(n, b) == 0 && numa_bitmask_weight(b) > 0)
					opt.nodes.v[opt.nodes.n++] = (size_t)n;
				numa_free_cpumask(b);
			}
	}
	if (opt.nodes.n && numa_available() < 0)
		die("--nodes", "libnuma reports no NUMA support here");
}
