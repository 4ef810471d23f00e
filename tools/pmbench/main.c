/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * pmbench -- write and read bandwidth of a persistent-memory region, for hardware evaluation.
 *
 * Writes items of one transfer size into a region (devdax, fsdax file or plain
 * file) through the pmckpt API, each item made durable before the next
 * (as a checkpoint persists tensor by tensor), varying:
 *   size       1 B .. 64 MiB
 *   alignment  items start on N-byte boundaries (N a power of two, 8 .. 4096),
 *              or K bytes past them (+K)
 *   layout     separated: data contiguous, a 64-byte metadata record per item
 *                         in a metadata area of its own (pmckpt's layout);
 *              interleaved: each record written just before its data, packed
 *                         (a serialised dictionary, the paper's Fig. 11 baseline)
 *   threads, NUMA node (threads and source buffers bound there)
 *   method     nt: non-temporal copies; temporal: cached stores + CLWB flush;
 *              both followed by a drain per item
 * and reads (recovery): memcpy out of the region, or the checksum pmckpt
 * verifies; the latency percentiles of small write+persist operations; a
 * reference of plain memcpy / nt-store loops (the machine's limit).  With
 * CUDA and a GPU, checkpoints from device memory through each
 * pmck_pipeline GPU strategy, with the DDIO state of the GPU's root port.
 *
 * Every configuration is warmed up, then measured --repeat times (min,
 * median, max).  The region is written whole before the first measurement,
 * so that no first touch is measured.
 *
 * Output: PREFIX.csv, PREFIX.json, PREFIX.latency.csv and PREFIX.svg (small
 * multiples of bandwidth against size), and a line per measurement on
 * stdout.  See docs/evaluation.md.
 */
#include <errno.h>
#include <libpmem2.h>
#include <numa.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "pmalloc.h"
#include "pmbench.h"
#include "lib/toolutil.h"

struct pma_region *region;
char region_kind[16], granularity[16], region_ddio[16] = "unknown", region_ddio_port[16] = "unknown";
int region_node;

void
die(const char *what, const char *why)
{
	fprintf(stderr, "pmbench: %s: %s\n", what, why);
	exit(1);
}

void
dief(const char *what, const char *fmt, ...)
{
	char b[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(b, sizeof(b), fmt, ap);
	va_end(ap);
	die(what, b);
}

/*
 * Writes the whole region once (non-temporal, drained), so that neither a
 * first-touch page fault nor a page the file system cannot back reaches a
 * measurement: the latter is a SIGBUS here, reported with its offset.
 * (pma_region_open has already reserved a file's blocks: a full file system
 * fails there with ENOSPC.)
 */
static void
prepare_region(void)
{
	char *base = pma_region_addr(region);
	size_t size = pma_region_size(region), chunk = 64u << 20;
	double t0 = tool_now();
	sigjmp_buf jb;

	if (PMB_GUARD(jb))
		pmb_fault_die("preparing (writing) the region", pmb_fault_offset());
	for (size_t off = 0; off < size; off += chunk)
		pma_region_memset(region, base + off, 0, size - off < chunk ? size - off : chunk,
				PMEM2_F_MEM_NONTEMPORAL | PMEM2_F_MEM_NODRAIN);
	/* Benchmark data, nothing recovers it: the drain only ends the preparation. */
	pma_region_drain(region);
	pmb_fault_disarm();
	if (!opt.quiet)
		printf("# region prepared: %zu MiB written in %.2f s before measuring\n", size >> 20,
				tool_now() - t0);
}

static void
open_region(void)
{
	static char created[512];
	char why[512] = "";

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
	if (pma_region_size(region) < (2u << 20))
		dief(opt.region, "%zu bytes: pmbench needs a region of at least 2 MiB",
				pma_region_size(region));
	snprintf(region_kind, sizeof(region_kind), "%s",
			pma_region_kind(region) == PMA_REGION_DEVDAX ? "devdax" : "file");
	snprintf(granularity, sizeof(granularity), "%s",
			pma_granularity_name(pma_region_granularity(region)));
	region_node = pma_region_numa_node(region);
	if (pma_region_kind(region) == PMA_REGION_DEVDAX) {
		pmb_ddio_of_dax(opt.region, region_ddio, region_ddio_port, why, sizeof(why));
		if (!opt.quiet && why[0])
			printf("# DDIO state of the region's root port unknown: %s\n", why);
	}
}

int
main(int argc, char **argv)
{
	char started[32];
	time_t t0 = time(NULL);
	struct tm tm;

	tool_init("pmbench", "(pmbench --help for usage)\n");
	pmb_parse_args(argc, argv);
	gmtime_r(&t0, &tm);
	strftime(started, sizeof(started), "%Y-%m-%dT%H:%M:%SZ", &tm);
	pmb_out_open(); /* a bad --out fails now, before any measurement */
	pmb_fault_install();
	open_region();
	if (!opt.nodes.n)
		opt.nodes = (struct pmb_list){.v = {(size_t)region_node}, .n = 1};
	if (!opt.quiet)
		printf("# pmbench: region %s (%s, %zu MiB, %s granularity, NUMA node %d), %u ms per "
				"configuration, %u repeat%s after a warm-up%s\n", pma_region_path(region),
				region_kind, pma_region_size(region) >> 20, granularity, region_node,
				opt.time_ms, opt.repeat, opt.repeat == 1 ? "" : "s",
				numa_available() < 0 ? "; no NUMA support: threads not bound" : "");
	if (opt.prewrite)
		prepare_region();

	int node0 = numa_available() < 0 ? -1 : (int)opt.nodes.v[0];
	pmb_run_reference(node0);
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
							pmb_run_cpu(&c);
						}
			for (int ri = 0; opt.read && ri < opt.nrmethods; ri++)
				for (int si = 0; si < opt.sizes.n; si++) {
					struct cfg c = {OP_READ, opt.rmethods[ri], L_SEPARATED, {128, 0},
							opt.sizes.v[si], (unsigned)opt.threads.v[ti], node};
					pmb_run_cpu(&c);
				}
		}
	for (int mi = 0; opt.latency && mi < opt.nmethods; mi++)
		for (int si = 0; si < opt.lat_sizes.n; si++)
			pmb_run_latency(opt.methods[mi], opt.lat_sizes.v[si], node0);
#ifdef PMCK_HAVE_CUDA
	if (opt.gpu)
		pmb_run_gpu();
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
	json_object *desc = pmb_describe(started);
	pmb_write_csv(desc);
	pmb_write_json(desc);
	pmb_write_latency_csv();
	pmb_write_svg(pmb_out_svg());
	pmb_out_finish();
	json_object_put(desc);
	printf("pmbench: %zu measurements in %s.csv, %s.json, %s.latency.csv, %s.svg\n", nrows, opt.out,
			opt.out, opt.out, opt.out);
	pma_region_close(&region);
	free(rows);
	return 0;
}
