/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * gpu.c -- checkpoints from GPU memory through each pmck_pipeline strategy
 * (with CUDA and a GPU), and the DDIO state of the root ports involved.
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ddio.h"
#include "pmalloc.h"
#include "pmckpt.h"
#include "pmbench.h"
#include "lib/toolutil.h"
#ifdef PMCK_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

char gpu_reason[256] = "built without CUDA", gpu_ddio[16] = "unknown", gpu_port[16] = "unknown";
int gpu_used;
const char *const pmb_gpu_hash_names[2] = {"host", "device"};

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

#ifdef PMCK_HAVE_CUDA
void
pmb_run_gpu(void)
{
	static const struct { enum pmck_source src; const char *name; } strat[] = {
		{PMCK_SOURCE_GPU_DIRECT, "direct"}, {PMCK_SOURCE_GPU_KERNEL, "kernel"},
		{PMCK_SOURCE_GPU_STAGED, "staged"}, {PMCK_SOURCE_GPU_SNAPSHOT, "snapshot"},
	};
	cpu_set_t set;
	/* the CPUs this process may run on (a cpuset, a launcher's binding), as the binding's */
	long cpus = sched_getaffinity(0, sizeof(set), &set) ? sysconf(_SC_NPROCESSORS_ONLN) :
			CPU_COUNT(&set);
	struct pma_pool *pool;
	char why[512] = "";
	int dev = 0;
	uint64_t step = 0;

	if (pmck_gpu_available(0)) {
		snprintf(gpu_reason, sizeof(gpu_reason), "%s", pmck_errormsg());
		return;
	}
	/*
	 * The runs: each strategy hashed where --gpu-hash says
	 * (PMCK_PIPELINE_GPU_HASH_*), with the Python binding's writer counts for
	 * each: 12 hashing on the host, 4 when the GPU hashes (docs/gpu.md).  C
	 * hashes in its copy on the host either way: run with the host's only.
	 * $PMCK_GPU_HASH overrides the flags in the library: then only its
	 * hashing runs, so that no row is named for the other.
	 */
	struct gpu_run { size_t k; int device; } runs[8];
	int nruns = 0;
	const char *env = getenv("PMCK_GPU_HASH");
	if (env && *env && !opt.quiet)
		printf("# PMCK_GPU_HASH=%s overrides --gpu-hash: only that hashing runs\n", env);
	for (int hi = 0; hi < opt.ngpu_hashes; hi++) {
		int device = opt.gpu_hashes[hi] == 1;
		if (env && *env && device != !strcmp(env, "device"))
			continue;
		for (size_t k = 0; k < sizeof(strat) / sizeof(strat[0]); k++)
			if (!device || strat[k].src != PMCK_SOURCE_GPU_STAGED)
				runs[nruns++] = (struct gpu_run){k, device};
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
		for (int ri = 0; ri < nruns; ri++) {
			size_t k = runs[ri].k;
			int device = runs[ri].device;
			unsigned want = opt.gpu_threads ? opt.gpu_threads : device ? 4 : 12;
			unsigned gthreads = !opt.gpu_threads && cpus < (long)want ? (unsigned)cpus : want;
			struct pmck_pipeline *p;
			struct pmck_pipeline_opts o = {.threads = gthreads, .numa_node = -1,
					.source = strat[k].src, .cuda_device = 0,
					.flags = device ? PMCK_PIPELINE_GPU_HASH_DEVICE :
							  PMCK_PIPELINE_GPU_HASH_HOST};
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
			struct row *r = pmb_new_row();
			snprintf(r->op, sizeof(r->op), "write");
			snprintf(r->path, sizeof(r->path), "gpu");
			snprintf(r->method, sizeof(r->method), "%s%s", strat[k].name,
					device ? "+gpu-hash" : "");
			snprintf(r->layout, sizeof(r->layout), "separated");
			snprintf(r->align, sizeof(r->align), "align128");
			r->size = size;
			r->threads = gthreads;
			r->node = region_node;
			r->items = reps * n;
			r->bytes = reps * n * size;
			r->seconds = t1 - t0;
			r->gbps = r->bytes / r->seconds / 1e9;
			r->gbps_min = r->gbps_max = r->gbps; /* one measurement over every repeat */
			r->repeats = 1;
			snprintf(r->ddio, sizeof(r->ddio), "%s", gpu_ddio);
			snprintf(r->ddio_port, sizeof(r->ddio_port), "%s", gpu_port);
			snprintf(r->series, sizeof(r->series), "write gpu %s ddio=%s t%u n%d", r->method,
					r->ddio, r->threads, r->node);
			pmb_print_row(r);
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

void
pmb_ddio_of_dax(const char *path, char state[16], char port[16], char *why, size_t whylen)
{
	ddio_of(find_dax, path, state, port, why, whylen);
}
