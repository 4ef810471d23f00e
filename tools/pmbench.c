/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * pmbench -- write and read bandwidth of a persistent-memory region, for hardware evaluation.
 *
 * Writes items of one transfer size into a region (devdax, fsdax file or plain
 * file) through the pmckpt API, each item made durable before the next
 * (as a checkpoint persists tensor by tensor), varying:
 *   size       64 B .. 64 MiB
 *   alignment  aligned128: items start on 128-byte boundaries;
 *              misaligned: 8 bytes past them
 *   layout     separated: data contiguous, a 64-byte metadata record per item
 *                         in a metadata area of its own (pmckpt's layout);
 *              interleaved: each record written just before its data, packed
 *                         (a serialised dictionary, the paper's Fig. 11 baseline)
 *   threads, NUMA node (threads and source buffers bound there)
 *   method     nt: non-temporal copies; temporal: cached stores + CLWB flush;
 *              both followed by a drain per item
 * and reads (recovery): memcpy out of the region, or the checksum pmckpt
 * verifies.  With CUDA and a GPU, checkpoints from device memory through each
 * pmck_pipeline GPU strategy, with the DDIO state of the GPU's root port.
 *
 * Output: PREFIX.csv, PREFIX.json and PREFIX.svg (bandwidth against size, one
 * line per configuration), and a line per measurement on stdout.  See
 * docs/evaluation.md.
 */
#include <errno.h>
#include <getopt.h>
#include <json-c/json.h>
#include <libpmem2.h>
#include <math.h>
#include <numa.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ddio.h"
#include "pmckpt.h"
#include "lib/toolutil.h"
#ifdef PMCK_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define MAXV 64            /* entries of a list option */
#define META 64            /* separated layout: bytes of a metadata record */
#define DICT_REC 40        /* interleaved layout: bytes of a record before each item */
#define META_AREA (256u << 10) /* separated layout: per-thread metadata area */
#define MISALIGN 8

enum op { OP_WRITE, OP_READ };
enum method { M_NT, M_TEMPORAL, M_MEMCPY, M_CHECKSUM };
enum layout { L_SEPARATED, L_INTERLEAVED };

static const char *const method_names[] = {"nt", "temporal", "memcpy", "checksum"};
static const char *const layout_names[] = {"separated", "interleaved"};

struct list {
	size_t v[MAXV];
	int n;
};

static struct {
	const char *region, *out;
	size_t region_size;
	struct list sizes, threads, nodes, gpu_sizes;
	int methods[4], nmethods, layouts[2], nlayouts, aligns[2], naligns, rmethods[2], nrmethods;
	unsigned time_ms;
	int read, gpu, keep, quiet, overwrite;
} opt;

/* One measured configuration: a row of the CSV. */
struct row {
	char op[8], path[8], method[16], layout[16], align[16];
	size_t size;
	unsigned threads;
	int node;
	uint64_t items, bytes;
	double seconds, gbps;
	char ddio[16], ddio_port[16], series[128];
};

static struct row *rows;
static size_t nrows, cap_rows;
static struct pma_region *region;
static char region_kind[16], granularity[16], region_ddio[16] = "unknown",
	region_ddio_port[16] = "unknown";
static int region_node;

static void
die(const char *what, const char *why)
{
	fprintf(stderr, "pmbench: %s: %s\n", what, why);
	exit(1);
}

/* ------------------------------------------------------------- options */

static void
parse_list(const char *what, const char *s, struct list *l, int sizes)
{
	char buf[1024], *save, *tok;

	snprintf(buf, sizeof(buf), "%s", s);
	l->n = 0;
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		size_t v;
		char *end;
		if (l->n == MAXV)
			die(what, "too many values");
		if (sizes ? tool_parse_size(tok, &v) : (v = strtoul(tok, &end, 10), *end != '\0' || end == tok))
			die(what, "malformed value");
		l->v[l->n++] = v;
	}
	if (!l->n)
		die(what, "empty list");
}

/* Parses a list of names into indexes of `names`. */
static int
parse_names(const char *what, const char *s, const char *const *names, int nnames, int *out)
{
	char buf[256], *save, *tok;
	int n = 0;

	snprintf(buf, sizeof(buf), "%s", s);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		int k;
		for (k = 0; k < nnames && strcmp(tok, names[k]); k++)
			;
		if (k == nnames || n == nnames)
			die(what, tok);
		out[n++] = k;
	}
	if (!n)
		die(what, "empty list");
	return n;
}

static void
sizes_pow4(struct list *l, size_t lo, size_t hi)
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
		"  --size BYTES       size of a region pmbench creates (default 128M)\n"
		"  --out PREFIX       writes PREFIX.csv, PREFIX.json, PREFIX.svg (default pmbench)\n"
		"  --sizes LIST       transfer sizes, e.g. 64,4K,256K,4M (default; --full: 64 .. 64M)\n"
		"  --threads LIST     thread counts (default 1; --full: 1,2,4,.. up to the CPUs)\n"
		"  --nodes LIST|all   NUMA nodes to run on (default: the region's node)\n"
		"  --methods LIST     nt,temporal    --layouts LIST  separated,interleaved\n"
		"  --aligns LIST      aligned,misaligned    --read-methods LIST  memcpy,checksum\n"
		"  --time-ms N        measured time per configuration (default 30; --full: 200)\n"
		"  --gpu-sizes LIST   tensor sizes for the GPU strategies (default 1M,16M)\n"
		"  --full             the full sweep (minutes); later options override it\n"
		"  --overwrite        run on a region that holds a pmckpt pool (destroys it)\n"
		"  --no-read, --no-gpu, --keep (keep a created region), --quiet\n");
}

static void
parse_args(int argc, char **argv)
{
	static const char *const align_names[] = {"aligned", "misaligned"};
	static const struct option lo[] = {
		{"region", required_argument, NULL, 'r'}, {"size", required_argument, NULL, 'S'},
		{"out", required_argument, NULL, 'o'}, {"sizes", required_argument, NULL, 's'},
		{"threads", required_argument, NULL, 't'}, {"nodes", required_argument, NULL, 'N'},
		{"methods", required_argument, NULL, 'm'}, {"layouts", required_argument, NULL, 'l'},
		{"aligns", required_argument, NULL, 'a'}, {"read-methods", required_argument, NULL, 'R'},
		{"time-ms", required_argument, NULL, 'T'}, {"gpu-sizes", required_argument, NULL, 'g'},
		{"full", no_argument, NULL, 'F'}, {"no-read", no_argument, NULL, '1'},
		{"no-gpu", no_argument, NULL, '2'}, {"keep", no_argument, NULL, 'k'},
		{"quiet", no_argument, NULL, 'q'}, {"overwrite", no_argument, NULL, 'O'},
		{"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0},
	};
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	int c, all_nodes = 0;

	opt.out = "pmbench";
	opt.region_size = 128u << 20;
	opt.time_ms = 30;
	opt.read = opt.gpu = 1;
	opt.sizes = (struct list){.v = {64, 4096, 256 << 10, 4 << 20}, .n = 4};
	opt.threads = (struct list){.v = {1}, .n = 1};
	opt.gpu_sizes = (struct list){.v = {1 << 20, 16 << 20}, .n = 2};
	opt.nmethods = 2, opt.methods[0] = M_NT, opt.methods[1] = M_TEMPORAL;
	opt.nlayouts = 2, opt.layouts[0] = L_SEPARATED, opt.layouts[1] = L_INTERLEAVED;
	opt.naligns = 2, opt.aligns[0] = 0, opt.aligns[1] = 1;
	opt.nrmethods = 2, opt.rmethods[0] = M_MEMCPY, opt.rmethods[1] = M_CHECKSUM;
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case 'r': opt.region = optarg; break;
		case 'S': if (tool_parse_size(optarg, &opt.region_size)) die("--size", optarg); break;
		case 'o': opt.out = optarg; break;
		case 's': parse_list("--sizes", optarg, &opt.sizes, 1); break;
		case 't': parse_list("--threads", optarg, &opt.threads, 0); break;
		case 'N':
			all_nodes = !strcmp(optarg, "all");
			if (!all_nodes)
				parse_list("--nodes", optarg, &opt.nodes, 0);
			break;
		case 'm': opt.nmethods = parse_names("--methods", optarg, method_names, 2, opt.methods); break;
		case 'l': opt.nlayouts = parse_names("--layouts", optarg, layout_names, 2, opt.layouts); break;
		case 'a': opt.naligns = parse_names("--aligns", optarg, align_names, 2, opt.aligns); break;
		case 'R': {
			int v[2];
			opt.nrmethods = parse_names("--read-methods", optarg, method_names + 2, 2, v);
			for (int i = 0; i < opt.nrmethods; i++)
				opt.rmethods[i] = v[i] + 2;
			break;
		}
		case 'T': opt.time_ms = (unsigned)strtoul(optarg, NULL, 10); break;
		case 'g': parse_list("--gpu-sizes", optarg, &opt.gpu_sizes, 1); break;
		case 'F':
			sizes_pow4(&opt.sizes, 64, 64 << 20);
			opt.threads.n = 0;
			for (long t = 1; t <= cpus && opt.threads.n < MAXV; t *= 2)
				opt.threads.v[opt.threads.n++] = (size_t)t;
			all_nodes = 1;
			opt.time_ms = 200;
			opt.gpu_sizes = (struct list){.v = {1 << 20, 4 << 20, 16 << 20, 64 << 20}, .n = 4};
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
		usage(stderr);
		exit(2);
	}
	if (opt.time_ms < 1)
		die("--time-ms", "must be at least 1");
	for (int i = 0; i < opt.sizes.n; i++)
		if (opt.sizes.v[i] < 1 || opt.sizes.v[i] > (64u << 20))
			die("--sizes", "sizes are 1 byte .. 64 MiB");
	for (int i = 0; i < opt.threads.n; i++)
		if (opt.threads.v[i] < 1 || opt.threads.v[i] > 1024)
			die("--threads", "1 .. 1024");
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
	for (int i = 0; i < opt.nodes.n; i++)
		if ((int)opt.nodes.v[i] > numa_max_node())
			die("--nodes", "no such node");
}

/* --------------------------------------------------------- CPU measurement */

struct cfg {
	enum op op;
	enum method method;
	enum layout layout;
	int misalign;
	size_t size;
	unsigned threads;
	int node;
};

struct worker {
	pthread_t tid;
	const struct cfg *c;
	pthread_barrier_t *bar;
	char *base;       /* this thread's partition of the region */
	size_t part;
	uint64_t items, bytes;
	double seconds;
	int err;
};

static volatile uint64_t sink;

/* Writes (or reads) one item at position k of the partition; returns the next position. */
struct cursor {
	size_t data, meta, dict; /* offsets in the partition */
	uint64_t k;
};

static void
one_item(struct worker *w, struct cursor *cur, char *src, char *rec)
{
	const struct cfg *c = w->c;
	size_t mis = c->misalign ? MISALIGN : 0;
	char *dst;

	if (c->op == OP_READ) {
		size_t stride = (c->size + 127) & ~(size_t)127;
		if (cur->data + stride > w->part)
			cur->data = META_AREA;
		dst = w->base + cur->data;
		if (c->method == M_MEMCPY)
			memcpy(src, dst, c->size);
		else
			sink += pmck_tensor_checksum(dst, c->size);
		cur->data += stride;
		return;
	}
	unsigned flags = c->method == M_NT ?
		PMEM2_F_MEM_NONTEMPORAL | PMEM2_F_MEM_NODRAIN :
		PMEM2_F_MEM_TEMPORAL | PMEM2_F_MEM_NOFLUSH | PMEM2_F_MEM_NODRAIN;
	memcpy(rec, &cur->k, sizeof(cur->k)); /* the record names the item */
	if (c->layout == L_SEPARATED) {
		size_t stride = (c->size + mis + 127) & ~(size_t)127;
		if (cur->data + stride > w->part)
			cur->data = META_AREA;
		if (cur->meta + META > META_AREA)
			cur->meta = 0;
		dst = w->base + cur->data + mis;
		char *m = w->base + cur->meta;
		pma_region_memcpy(region, dst, src, c->size, flags);
		pma_region_memcpy(region, m, rec, META, flags);
		if (c->method == M_TEMPORAL) {
			pma_region_flush(region, dst, c->size);
			pma_region_flush(region, m, META);
		}
		cur->data += stride;
		cur->meta += META;
	} else {
		if (cur->dict + DICT_REC + c->size > w->part)
			cur->dict = mis;
		char *r = w->base + cur->dict;
		dst = r + DICT_REC;
		pma_region_memcpy(region, r, rec, DICT_REC, flags);
		pma_region_memcpy(region, dst, src, c->size, flags);
		if (c->method == M_TEMPORAL)
			pma_region_flush(region, r, DICT_REC + c->size);
		cur->dict += DICT_REC + c->size;
	}
	pma_region_drain(region); /* the item is durable before the next */
	cur->k++;
}

static void *
worker_main(void *arg)
{
	struct worker *w = arg;
	const struct cfg *c = w->c;
	size_t blen = c->size + 64;
	char *src = NULL, rec[META];
	struct cursor cur = {.data = META_AREA, .meta = 0, .dict = c->misalign ? MISALIGN : 0};
	double warm = opt.time_ms / 4e3, t0, end;
	unsigned every = c->size < 4096 ? 16 : 1;

	if (c->node >= 0 && numa_available() >= 0) {
		numa_run_on_node(c->node);
		src = numa_alloc_onnode(blen, c->node);
	} else {
		src = malloc(blen);
	}
	if (!src)
		w->err = ENOMEM;
	else
		for (size_t i = 0; i < blen; i++)
			src[i] = (char)(i * 131 + 7);
	memset(rec, 0x5a, sizeof(rec));
	/* Warm up alone, then measure together. */
	for (end = tool_now() + warm; !w->err && tool_now() < end;)
		for (unsigned i = 0; i < every; i++)
			one_item(w, &cur, src, rec);
	pthread_barrier_wait(w->bar);
	t0 = tool_now();
	end = t0 + opt.time_ms / 1e3;
	double t = t0;
	while (!w->err && t < end) {
		for (unsigned i = 0; i < every; i++) {
			one_item(w, &cur, src, rec);
			w->items++;
		}
		t = tool_now();
	}
	w->seconds = t - t0;
	w->bytes = w->items * c->size;
	if (src) {
		if (c->node >= 0 && numa_available() >= 0)
			numa_free(src, blen);
		else
			free(src);
	}
	return NULL;
}

static struct row *
new_row(void)
{
	if (nrows == cap_rows) {
		cap_rows = cap_rows ? 2 * cap_rows : 64;
		rows = realloc(rows, cap_rows * sizeof(*rows));
		if (!rows)
			die("rows", "out of memory");
	}
	memset(&rows[nrows], 0, sizeof(rows[0]));
	return &rows[nrows++];
}

static void
print_row(const struct row *r)
{
	if (!opt.quiet)
		printf("pmbench: %-5s %-3s %-9s %-11s %-10s %9zu B  %2u thr  node %d  ddio %-7s %8.3f GB/s\n",
				r->op, r->path, r->method, r->layout, r->align, r->size, r->threads,
				r->node, r->ddio, r->gbps);
	fflush(stdout);
}

static void
run_cpu(const struct cfg *c)
{
	size_t part = (pma_region_size(region) / c->threads) & ~(size_t)4095;
	size_t need = META_AREA + 2 * (c->size + DICT_REC + 256);
	struct worker *w;
	pthread_barrier_t bar;
	struct row *r;
	double secs = 0;
	uint64_t bytes = 0, items = 0;

	if (part < need) {
		if (!opt.quiet)
			printf("# skipped %zu B x %u threads: the region (%zu B) is too small\n", c->size,
					c->threads, pma_region_size(region));
		return;
	}
	w = calloc(c->threads, sizeof(*w));
	if (!w || pthread_barrier_init(&bar, NULL, c->threads))
		die("threads", "out of memory");
	for (unsigned t = 0; t < c->threads; t++) {
		w[t] = (struct worker){.c = c, .bar = &bar, .part = part,
				.base = (char *)pma_region_addr(region) + t * part};
		if (pthread_create(&w[t].tid, NULL, worker_main, &w[t]))
			die("pthread_create", strerror(errno));
	}
	for (unsigned t = 0; t < c->threads; t++) {
		pthread_join(w[t].tid, NULL);
		if (w[t].err)
			die("worker", strerror(w[t].err));
		bytes += w[t].bytes;
		items += w[t].items;
		if (w[t].seconds > secs)
			secs = w[t].seconds;
	}
	pthread_barrier_destroy(&bar);
	free(w);

	r = new_row();
	snprintf(r->op, sizeof(r->op), "%s", c->op == OP_WRITE ? "write" : "read");
	snprintf(r->path, sizeof(r->path), "cpu");
	snprintf(r->method, sizeof(r->method), "%s", method_names[c->method]);
	snprintf(r->layout, sizeof(r->layout), "%s", layout_names[c->layout]);
	snprintf(r->align, sizeof(r->align), "%s", c->misalign ? "misaligned" : "aligned128");
	r->size = c->size;
	r->threads = c->threads;
	r->node = c->node >= 0 ? c->node : region_node;
	r->items = items;
	r->bytes = bytes;
	r->seconds = secs;
	r->gbps = secs > 0 ? bytes / secs / 1e9 : 0;
	snprintf(r->ddio, sizeof(r->ddio), "%s", region_ddio);
	snprintf(r->ddio_port, sizeof(r->ddio_port), "%s", region_ddio_port);
	snprintf(r->series, sizeof(r->series), "%s cpu %s %s %s t%u n%d", r->op, r->method, r->layout,
			r->align, r->threads, r->node);
	print_row(r);
}

/* ------------------------------------------------------------ DDIO state */

/* The DDIO state of port (found by find()), or "unknown", and the port's address. */
static void
ddio_of(int (*find)(struct ddio_ctx *, const void *, struct ddio_port **), const void *arg,
		char state[16], char port[16], char *why, size_t whylen)
{
	struct ddio_ctx *ctx = NULL;
	struct ddio_port *p = NULL;
	enum ddio_state st;
	uint32_t v;

	snprintf(state, 16, "unknown");
	snprintf(port, 16, "unknown");
	if (ddio_ctx_new(NULL, NULL, &ctx) || find(ctx, arg, &p)) {
		snprintf(why, whylen, "%s", ddio_errormsg());
		ddio_ctx_delete(&ctx);
		return;
	}
	snprintf(port, 16, "%s", ddio_port_bdf(p));
	if (ddio_port_read(p, &v, &st))
		snprintf(why, whylen, "%s", ddio_errormsg());
	else
		snprintf(state, 16, "%s", ddio_state_name(st));
	ddio_port_delete(&p);
	ddio_ctx_delete(&ctx);
}

static int
find_dax(struct ddio_ctx *ctx, const void *path, struct ddio_port **p)
{
	return ddio_port_find_dax(ctx, path, p);
}

#ifdef PMCK_HAVE_CUDA
static int
find_cuda(struct ddio_ctx *ctx, const void *dev, struct ddio_port **p)
{
	return ddio_port_find_cuda(ctx, *(const int *)dev, p);
}
#endif

/* ------------------------------------------------------------- GPU path */

static char gpu_reason[256] = "built without CUDA", gpu_ddio[16] = "unknown", gpu_port[16] = "unknown";
static int gpu_used;

#ifdef PMCK_HAVE_CUDA
static void
run_gpu(void)
{
	static const struct { enum pmck_source src; const char *name; } strat[] = {
		{PMCK_SOURCE_GPU_DIRECT, "direct"}, {PMCK_SOURCE_GPU_KERNEL, "kernel"},
		{PMCK_SOURCE_GPU_STAGED, "staged"}, {PMCK_SOURCE_GPU_SNAPSHOT, "snapshot"},
	};
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned gthreads = cpus >= 8 ? 8 : (unsigned)cpus;
	struct pma_pool *pool;
	char why[512] = "";
	int dev = 0;
	uint64_t step = 0;

	if (pmck_gpu_available(0)) {
		snprintf(gpu_reason, sizeof(gpu_reason), "%s", pmck_errormsg());
		return;
	}
	ddio_of(find_cuda, &dev, gpu_ddio, gpu_port, why, sizeof(why));
	if (!opt.quiet && why[0])
		printf("# DDIO state of the GPU's root port unknown: %s\n", why);
	if (pma_pool_create(region, 0, &pool))
		die("pool on the region", pma_errormsg());
	gpu_used = 1;
	for (int si = 0; si < opt.gpu_sizes.n; si++) {
		size_t size = opt.gpu_sizes.v[si] & ~(size_t)127;
		size_t budget = pma_region_size(region) / 3;
		size_t n = budget / (size + 4096);
		if (n > 64)
			n = 64;
		if (size < 128 || n < 2) {
			if (!opt.quiet)
				printf("# GPU: skipped tensors of %zu B: the region is too small\n", size);
			continue;
		}
		struct pmck_tensor_desc *d = calloc(n, sizeof(*d));
		char (*names)[32] = calloc(n, sizeof(*names));
		const void **srcs = calloc(n, sizeof(*srcs));
		char *dbuf;
		struct pmck_store *s;
		if (!d || !names || !srcs)
			die("GPU", "out of memory");
		for (size_t i = 0; i < n; i++) {
			snprintf(names[i], sizeof(names[i]), "t%zu", i);
			d[i] = (struct pmck_tensor_desc){.name = names[i], .dtype = PMCK_DTYPE_BYTES,
					.ndim = 1, .shape = {size}, .layer = (uint32_t)i};
		}
		if (pmck_store_create(pool, "pmbench", d, n, &s))
			die("GPU store", pmck_errormsg());
		if (cudaMalloc((void **)&dbuf, n * size) != cudaSuccess ||
		    cudaMemset(dbuf, 0x3c, n * size) != cudaSuccess)
			die("cudaMalloc", "failed");
		for (size_t i = 0; i < n; i++)
			srcs[i] = dbuf + i * size;
		for (size_t k = 0; k < sizeof(strat) / sizeof(strat[0]); k++) {
			struct pmck_pipeline *p;
			struct pmck_pipeline_opts o = {.threads = gthreads, .numa_node = -1,
					.source = strat[k].src, .cuda_device = 0};
			double t0 = 0, t1;
			uint64_t reps = 0;
			if (pmck_pipeline_new(s, &o, &p))
				die(strat[k].name, pmck_errormsg());
			/* The first checkpoint warms up; then as many as fit in the time, at least 2. */
			for (int warm = 1;; warm = 0) {
				if (pmck_pipeline_begin(p, ++step))
					die("begin", pmck_errormsg());
				for (uint32_t l = 0; l < n; l++)
					if (pmck_pipeline_put_layer(p, l, srcs))
						die("put_layer", pmck_errormsg());
				if (pmck_pipeline_wait(p))
					die("wait", pmck_errormsg());
				t1 = tool_now();
				if (warm) {
					t0 = t1;
					continue;
				}
				reps++;
				if (reps >= 2 && t1 - t0 >= opt.time_ms / 1e3)
					break;
			}
			pmck_pipeline_delete(&p);
			struct row *r = new_row();
			snprintf(r->op, sizeof(r->op), "write");
			snprintf(r->path, sizeof(r->path), "gpu");
			snprintf(r->method, sizeof(r->method), "%s", strat[k].name);
			snprintf(r->layout, sizeof(r->layout), "separated");
			snprintf(r->align, sizeof(r->align), "aligned128");
			r->size = size;
			r->threads = gthreads;
			r->node = region_node;
			r->items = reps * n;
			r->bytes = reps * n * size;
			r->seconds = t1 - t0;
			r->gbps = r->bytes / r->seconds / 1e9;
			snprintf(r->ddio, sizeof(r->ddio), "%s", gpu_ddio);
			snprintf(r->ddio_port, sizeof(r->ddio_port), "%s", gpu_port);
			snprintf(r->series, sizeof(r->series), "write gpu %s ddio=%s t%u n%d", r->method,
					r->ddio, r->threads, r->node);
			print_row(r);
		}
		cudaFree(dbuf);
		pmck_store_close(&s);
		if (pmck_store_destroy(pool, "pmbench"))
			die("GPU store", pmck_errormsg());
		free(d);
		free(names);
		free(srcs);
	}
	pma_pool_close(&pool);
	/* Unformat the pool pmbench made, so the region does not look like a checkpoint store. */
	pma_region_memset(region, pma_region_addr(region), 0, 4096, 0);
	gpu_reason[0] = '\0';
}
#endif

/* ------------------------------------------------------------- output */

static FILE *
open_out(const char *ext, char *path, size_t len)
{
	FILE *f;

	snprintf(path, len, "%s.%s", opt.out, ext);
	f = fopen(path, "w");
	if (!f)
		die(path, strerror(errno));
	return f;
}

static void
close_out(FILE *f, const char *path)
{
	if (ferror(f) | fclose(f))
		die(path, "write failed");
}

static void
write_csv(void)
{
	char path[1024];
	FILE *f = open_out("csv", path, sizeof(path));

	fprintf(f, "op,path,method,layout,align,size_bytes,threads,numa_node,region_kind,granularity,"
			"ddio,ddio_port,items,bytes,seconds,gbps,series\n");
	for (size_t i = 0; i < nrows; i++) {
		const struct row *r = &rows[i];
		fprintf(f, "%s,%s,%s,%s,%s,%zu,%u,%d,%s,%s,%s,%s,%llu,%llu,%.6f,%.4f,%s\n", r->op, r->path,
				r->method, r->layout, r->align, r->size, r->threads, r->node, region_kind,
				granularity, r->ddio, r->ddio_port, (unsigned long long)r->items,
				(unsigned long long)r->bytes, r->seconds, r->gbps, r->series);
	}
	close_out(f, path);
}

static json_object *
json_list(const struct list *l)
{
	json_object *a = json_object_new_array();
	for (int i = 0; i < l->n; i++)
		json_object_array_add(a, json_object_new_int64((int64_t)l->v[i]));
	return a;
}

static void
write_json(const char *started)
{
	char path[1024], host[256] = "";
	json_object *top = json_object_new_object(), *o, *res = json_object_new_array();
	FILE *f;

	gethostname(host, sizeof(host) - 1);
	json_object_object_add(top, "tool", json_object_new_string("pmbench"));
	json_object_object_add(top, "format_version", json_object_new_int(1));
	json_object_object_add(top, "started", json_object_new_string(started));
	o = json_object_new_object();
	json_object_object_add(o, "hostname", json_object_new_string(host));
	json_object_object_add(o, "cpus", json_object_new_int((int)sysconf(_SC_NPROCESSORS_ONLN)));
	json_object_object_add(o, "numa_nodes",
			json_object_new_int(numa_available() >= 0 ? numa_max_node() + 1 : 1));
	json_object_object_add(top, "host", o);
	o = json_object_new_object();
	json_object_object_add(o, "path", json_object_new_string(pma_region_path(region)));
	json_object_object_add(o, "kind", json_object_new_string(region_kind));
	json_object_object_add(o, "size", json_object_new_int64((int64_t)pma_region_size(region)));
	json_object_object_add(o, "granularity", json_object_new_string(granularity));
	json_object_object_add(o, "numa_node", json_object_new_int(region_node));
	json_object_object_add(o, "ddio", json_object_new_string(region_ddio));
	json_object_object_add(o, "ddio_port", json_object_new_string(region_ddio_port));
	json_object_object_add(top, "region", o);
	o = json_object_new_object();
	json_object_object_add(o, "time_ms", json_object_new_int((int)opt.time_ms));
	json_object_object_add(o, "sizes", json_list(&opt.sizes));
	json_object_object_add(o, "threads", json_list(&opt.threads));
	json_object_object_add(o, "gpu_sizes", json_list(&opt.gpu_sizes));
	json_object_object_add(o, "meta_record_bytes", json_object_new_int(META));
	json_object_object_add(o, "dict_record_bytes", json_object_new_int(DICT_REC));
	json_object_object_add(o, "misalign_bytes", json_object_new_int(MISALIGN));
	json_object_object_add(top, "params", o);
	o = json_object_new_object();
	json_object_object_add(o, "measured", json_object_new_boolean(gpu_used));
	if (!gpu_used)
		json_object_object_add(o, "reason", json_object_new_string(gpu_reason));
	json_object_object_add(o, "ddio", json_object_new_string(gpu_ddio));
	json_object_object_add(o, "ddio_port", json_object_new_string(gpu_port));
	json_object_object_add(top, "gpu", o);
	for (size_t i = 0; i < nrows; i++) {
		const struct row *r = &rows[i];
		o = json_object_new_object();
		json_object_object_add(o, "op", json_object_new_string(r->op));
		json_object_object_add(o, "path", json_object_new_string(r->path));
		json_object_object_add(o, "method", json_object_new_string(r->method));
		json_object_object_add(o, "layout", json_object_new_string(r->layout));
		json_object_object_add(o, "align", json_object_new_string(r->align));
		json_object_object_add(o, "size_bytes", json_object_new_int64((int64_t)r->size));
		json_object_object_add(o, "threads", json_object_new_int((int)r->threads));
		json_object_object_add(o, "numa_node", json_object_new_int(r->node));
		json_object_object_add(o, "region_kind", json_object_new_string(region_kind));
		json_object_object_add(o, "granularity", json_object_new_string(granularity));
		json_object_object_add(o, "ddio", json_object_new_string(r->ddio));
		json_object_object_add(o, "ddio_port", json_object_new_string(r->ddio_port));
		json_object_object_add(o, "items", json_object_new_int64((int64_t)r->items));
		json_object_object_add(o, "bytes", json_object_new_int64((int64_t)r->bytes));
		json_object_object_add(o, "seconds", json_object_new_double(r->seconds));
		json_object_object_add(o, "gbps", json_object_new_double(r->gbps));
		json_object_object_add(o, "series", json_object_new_string(r->series));
		json_object_array_add(res, o);
	}
	json_object_object_add(top, "results", res);
	f = open_out("json", path, sizeof(path));
	fprintf(f, "%s\n", json_object_to_json_string_ext(top, JSON_C_TO_STRING_PRETTY |
			JSON_C_TO_STRING_SPACED | JSON_C_TO_STRING_NOSLASHESCAPE));
	close_out(f, path);
	json_object_put(top);
}

/* ------------------------------------------------------------------ plot */

static void
size_label(size_t s, char *b, size_t len)
{
	if (s >= (1u << 20) && s % (1u << 20) == 0)
		snprintf(b, len, "%zuM", s >> 20);
	else if (s >= 1024 && s % 1024 == 0)
		snprintf(b, len, "%zuK", s >> 10);
	else
		snprintf(b, len, "%zu", s);
}

static void
xml_text(FILE *f, const char *s)
{
	for (; *s; s++)
		switch (*s) {
		case '<': fputs("&lt;", f); break;
		case '>': fputs("&gt;", f); break;
		case '&': fputs("&amp;", f); break;
		default: fputc(*s, f);
		}
}

/* A "nice" axis maximum and tick step above v. */
static double
nice_step(double v)
{
	double e = pow(10, floor(log10(v))), m = v / e;
	return (m <= 1 ? 0.2 : m <= 2 ? 0.5 : m <= 5 ? 1 : 2) * e;
}

/* The distinct series of rows of `op`, in order of appearance; their number. */
static int
collect_series(const char *op, const char **series)
{
	int n = 0;

	for (size_t i = 0; i < nrows; i++) {
		int seen = 0;
		if (strcmp(rows[i].op, op))
			continue;
		for (int k = 0; k < n && !seen; k++)
			seen = !strcmp(series[k], rows[i].series);
		if (!seen)
			series[n++] = rows[i].series;
	}
	return n;
}

/*
 * One panel per op (write, read): bandwidth (GB/s, linear) against transfer
 * size (log2), one polyline per series, legend to the right.
 */
static void
write_svg(void)
{
	static const char *const colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
			"#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
	static const char *const dashes[] = {"", "6,3", "2,2", "8,3,2,3"};
	const char *ops[] = {"write", "read"};
	const int W = 1100, PW = 640, PH = 340, ML = 70, MT = 50, LEG = 16;
	char path[1024], lab[32];
	FILE *f = open_out("svg", path, sizeof(path));
	int y0 = 0, heights[2], total = 40;

	const char **series = calloc(nrows + 1, sizeof(*series));
	int nser[2];
	if (!series)
		die("plot", "out of memory");
	for (int o = 0; o < 2; o++) {
		int n = nser[o] = collect_series(ops[o], series);
		heights[o] = n ? (PH + 60 > n * LEG + 20 ? PH + 60 : n * LEG + 20) + MT : 0;
		total += heights[o];
	}
	fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
			"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
			"font-family=\"sans-serif\" font-size=\"12\">\n"
			"<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
			"<text x=\"%d\" y=\"24\" font-size=\"15\">pmbench: ", W, total, ML);
	xml_text(f, pma_region_path(region));
	fprintf(f, " (%s, %s granularity, node %d)</text>\n", region_kind, granularity, region_node);
	y0 = 30;
	for (int o = 0; o < 2; o++) {
		if (!nser[o])
			continue;
		int n = collect_series(ops[o], series);
		size_t smin = SIZE_MAX, smax = 0;
		double gmax = 0, gmin = INFINITY;
		for (size_t i = 0; i < nrows; i++) {
			if (strcmp(rows[i].op, ops[o]))
				continue;
			smin = rows[i].size < smin ? rows[i].size : smin;
			smax = rows[i].size > smax ? rows[i].size : smax;
			gmax = rows[i].gbps > gmax ? rows[i].gbps : gmax;
			if (rows[i].gbps > 0 && rows[i].gbps < gmin)
				gmin = rows[i].gbps;
		}
		double lx0 = log2((double)smin), lx1 = log2((double)smax);
		if (lx1 - lx0 < 1)
			lx0 -= 0.5, lx1 += 0.5;
		/* Bandwidths spanning more than two decades get a log axis, else small sizes vanish. */
		int logy = gmin > 0 && gmax / gmin > 100;
		double step = nice_step(gmax > 0 ? gmax : 1), ymax, ly0 = 0, ly1 = 1;
		if (logy) {
			ly0 = floor(log10(gmin));
			ly1 = ceil(log10(gmax));
			ymax = pow(10, ly1);
		} else {
			ymax = ceil((gmax > 0 ? gmax : 1) * 1.05 / step) * step;
		}
		int px = ML, py = y0 + MT;
#define X(s) (px + (log2((double)(s)) - lx0) / (lx1 - lx0) * PW)
#define Y(g) (logy ? py + PH - (log10((g) > 0 ? (g) : pow(10, ly0)) - ly0) / (ly1 - ly0) * PH : \
		py + PH - (g) / ymax * PH)
		fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"14\">%s bandwidth</text>\n", px, py - 12,
				ops[o]);
		fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#444\"/>\n",
				px, py, PW, PH);
		for (double e = ly0, g = 0; logy ? e <= ly1 + 1e-9 : g <= ymax + 1e-9;
				e += 1, g += step) {
			double v = logy ? pow(10, e) : g;
			fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>"
					"<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
					px, Y(v), px + PW, Y(v), px - 6, Y(v) + 4, v);
		}
		for (int e = (int)ceil(lx0); e <= (int)floor(lx1); e++) {
			if (e % 2 && lx1 - lx0 > 12)
				continue;
			size_label((size_t)1 << e, lab, sizeof(lab));
			fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#eee\"/>"
					"<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n",
					X((size_t)1 << e), py, X((size_t)1 << e), py + PH, X((size_t)1 << e),
					py + PH + 16, lab);
		}
		fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">transfer size (bytes, log scale)"
				"</text>\n", px + PW / 2, py + PH + 36);
		fprintf(f, "<text transform=\"translate(%d,%d) rotate(-90)\" text-anchor=\"middle\">GB/s%s"
				"</text>\n", px - 48, py + PH / 2, logy ? " (log scale)" : "");
		for (int k = 0; k < n; k++) {
			const char *col = colors[k % 10], *dash = dashes[(k / 10) % 4];
			fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s%s%s points=\"",
					col, dash[0] ? " stroke-dasharray=\"" : "", dash, dash[0] ? "\"" : "");
			/* Points in size order (rows are in run order, sizes may repeat per series once). */
			size_t last = 0;
			for (;;) {
				size_t best = SIZE_MAX, bi = 0;
				for (size_t i = 0; i < nrows; i++)
					if (!strcmp(rows[i].op, ops[o]) && !strcmp(rows[i].series, series[k]) &&
					    rows[i].size > last && rows[i].size < best)
						best = rows[i].size, bi = i;
				if (best == SIZE_MAX)
					break;
				fprintf(f, "%.1f,%.1f ", X(rows[bi].size), Y(rows[bi].gbps));
				last = best;
			}
			fprintf(f, "\"/>\n");
			for (size_t i = 0; i < nrows; i++)
				if (!strcmp(rows[i].op, ops[o]) && !strcmp(rows[i].series, series[k]))
					fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\"/>\n",
							X(rows[i].size), Y(rows[i].gbps), col);
			int ly = py + k * LEG;
			fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\"%s%s%s/>"
					"<text x=\"%d\" y=\"%d\">", px + PW + 20, ly + 4, px + PW + 44, ly + 4, col,
					dash[0] ? " stroke-dasharray=\"" : "", dash, dash[0] ? "\"" : "",
					px + PW + 50, ly + 8);
			xml_text(f, series[k]);
			fprintf(f, "</text>\n");
		}
#undef X
#undef Y
		y0 += heights[o];
	}
	fprintf(f, "</svg>\n");
	free(series);
	close_out(f, path);
}

/* ------------------------------------------------------------------ main */

int
main(int argc, char **argv)
{
	char created[512] = "", started[32], why[512] = "";
	time_t t0 = time(NULL);
	struct tm tm;

	parse_args(argc, argv);
	gmtime_r(&t0, &tm);
	strftime(started, sizeof(started), "%Y-%m-%dT%H:%M:%SZ", &tm);
	if (!opt.region) {
		snprintf(created, sizeof(created), "/dev/shm/pmbench-%d.region", (int)getpid());
		opt.region = created;
	} else if (access(opt.region, F_OK) != 0) {
		snprintf(created, sizeof(created), "%s", opt.region);
	}
	if (pma_region_open(opt.region, created[0] ? opt.region_size : 0,
			created[0] ? PMA_REGION_CREATE : 0, &region))
		die(opt.region, pma_errormsg());
	if (created[0] && !opt.keep)
		unlink(created); /* the mapping keeps it while we run */
	if (!created[0] && !opt.overwrite) {
		struct pma_pool *existing;
		if (pma_pool_open(region, &existing) == 0) {
			pma_pool_close(&existing);
			die(opt.region, "holds a pmckpt pool, which pmbench would overwrite; "
					"pass --overwrite to destroy it");
		}
	}
	snprintf(region_kind, sizeof(region_kind), "%s",
			pma_region_kind(region) == PMA_REGION_DEVDAX ? "devdax" : "file");
	snprintf(granularity, sizeof(granularity), "%s",
			pma_granularity_name(pma_region_granularity(region)));
	region_node = pma_region_numa_node(region);
	if (pma_region_kind(region) == PMA_REGION_DEVDAX) {
		ddio_of(find_dax, opt.region, region_ddio, region_ddio_port, why, sizeof(why));
		if (!opt.quiet && why[0])
			printf("# DDIO state of the region's root port unknown: %s\n", why);
	}
	if (!opt.nodes.n) {
		opt.nodes = (struct list){.v = {(size_t)region_node}, .n = 1};
	}
	if (!opt.quiet)
		printf("# pmbench: region %s (%s, %zu MiB, %s granularity, NUMA node %d), %u ms per "
				"configuration%s\n", pma_region_path(region), region_kind,
				pma_region_size(region) >> 20, granularity, region_node, opt.time_ms,
				numa_available() < 0 ? "; no NUMA support: threads not bound" : "");

	for (int ni = 0; ni < opt.nodes.n; ni++)
		for (int ti = 0; ti < opt.threads.n; ti++) {
			int node = numa_available() < 0 ? -1 : (int)opt.nodes.v[ni];
			for (int mi = 0; mi < opt.nmethods; mi++)
				for (int li = 0; li < opt.nlayouts; li++)
					for (int ai = 0; ai < opt.naligns; ai++)
						for (int si = 0; si < opt.sizes.n; si++) {
							struct cfg c = {OP_WRITE, opt.methods[mi], opt.layouts[li],
									opt.aligns[ai], opt.sizes.v[si],
									(unsigned)opt.threads.v[ti], node};
							run_cpu(&c);
						}
			for (int ri = 0; opt.read && ri < opt.nrmethods; ri++)
				for (int si = 0; si < opt.sizes.n; si++) {
					struct cfg c = {OP_READ, opt.rmethods[ri], L_SEPARATED, 0, opt.sizes.v[si],
							(unsigned)opt.threads.v[ti], node};
					run_cpu(&c);
				}
		}
#ifdef PMCK_HAVE_CUDA
	if (opt.gpu)
		run_gpu();
	else
		snprintf(gpu_reason, sizeof(gpu_reason), "--no-gpu");
#else
	if (!opt.gpu)
		snprintf(gpu_reason, sizeof(gpu_reason), "--no-gpu");
#endif
	if (!opt.quiet && !gpu_used)
		printf("# GPU path not measured: %s\n", gpu_reason);
	if (!nrows)
		die("nothing measured", "every configuration was skipped (region too small?)");
	write_csv();
	write_json(started);
	write_svg();
	printf("pmbench: %zu measurements in %s.csv, %s.json, %s.svg\n", nrows, opt.out, opt.out, opt.out);
	pma_region_close(&region);
	free(rows);
	return 0;
}
