/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * gpu_hash.c -- the GPU's hash kernel (runtime/gpu.cu, device hashing)
 * against the host's checksum (libxxhash) on a real device: every length
 * from 241 to 3000 bytes at 8-aligned starts, lengths around blocks and up
 * to PMCK_HASH_CHUNK, one launch of thousands of chunks and launches of a
 * few, in random result slots; and a flipped byte on the device changes
 * its chunk's value.  tests/xxh3_long.c checks the same arithmetic on the
 * host; this is what only a GPU shows (the shuffles, the loads, the
 * results written into host memory).  Skips without CUDA or a device.
 */
#include <errno.h>

#include "tap.h"
#include "pmalloc.h"
#include "../runtime/internal.h"
#include "../runtime/gpu.h"

#ifndef PMCK_HAVE_CUDA
int
main(void)
{
	skip_all("built without CUDA");
}
#else
#include <cuda_runtime_api.h>

#define BUF (PMCK_HASH_CHUNK + 4096)

struct run {
	size_t n;
	const void **src;
	size_t *len, *slot;
	uint64_t *want;
};

/* Hashes the run's chunks on the GPU (one launch); returns how many differ from want. */
static long
differ(struct pmck_gpu *g, struct run *r, unsigned event, long *first)
{
	*first = -1;
	if (pmck__gpu_hash_begin(g) || pmck__gpu_layer_ready(g, event, NULL) ||
	    pmck__gpu_hash(g, event, event, 0, r->n, r->src, r->len, r->slot) ||
	    pmck__gpu_hash_wait(g, event)) {
		diag("%s", pmck_errormsg());
		return (long)r->n;
	}
	long bad = 0;
	for (size_t i = 0; i < r->n; i++)
		if (pmck__gpu_hash_result(g, r->slot[i]) != r->want[i] && bad++ == 0)
			*first = (long)r->len[i];
	return bad;
}

int
main(void)
{
	const char *path = scratch_path("gpu-hash");
	struct pma_region *reg;
	struct pmck_gpu *g;

	if (pmck_gpu_available(0))
		skip_all(pmck_errormsg());
	plan(5);
	if (pma_region_open(path, 8 << 20, PMA_REGION_CREATE, &reg)) {
		diag("%s", pma_errormsg());
		return 1;
	}
	unlink(path);
	const size_t most = 6000;
	if (pmck__gpu_open(reg, 0, 0, 0, 4, 1, 0, &g) || pmck__gpu_hash_open(g, most, 4)) {
		diag("%s", pmck_errormsg());
		return 1;
	}
	uint8_t *host = malloc(BUF), *dev;
	srand(11);
	for (size_t i = 0; i < BUF; i++)
		host[i] = (uint8_t)(rand() >> 7);
	if (cudaMalloc((void **)&dev, BUF) != cudaSuccess ||
	    cudaMemcpy(dev, host, BUF, cudaMemcpyHostToDevice) != cudaSuccess) {
		diag("device buffer");
		return 1;
	}
	struct run r = {0, calloc(most, sizeof(void *)), calloc(most, sizeof(size_t)),
			calloc(most, sizeof(size_t)), calloc(most, sizeof(uint64_t))};
	long first;

	/* Every length from 241 to 3000, each at its own 8-aligned start, slots reversed. */
	for (size_t len = 241; len <= 3000; len++, r.n++) {
		size_t at = (len * 8) % 4096;
		r.src[r.n] = dev + at;
		r.len[r.n] = len;
		r.slot[r.n] = most - 1 - r.n;
		r.want[r.n] = pmck__hash(host + at, len);
	}
	long bad = differ(g, &r, 0, &first);
	ok(bad == 0, "%zu chunks of 241 to 3000 bytes in one launch hash as libxxhash's XXH3 (%ld "
			"differ; first of %ld bytes)", r.n, bad, first);

	/* Around blocks and up to a chunk, a few per launch, two launches on other events. */
	static const size_t big[] = {1023, 1024, 1025, 2047 + 241, 4096 + 7, 65536, 65543,
			PMCK_HASH_CHUNK - 7, PMCK_HASH_CHUNK - 1024, PMCK_HASH_CHUNK};
	const size_t nbig = sizeof(big) / sizeof(big[0]);
	bad = 0;
	for (unsigned half = 0; half < 2; half++) {
		r.n = 0;
		for (size_t k = half; k < nbig; k += 2, r.n++) {
			size_t at = 8 * k;
			r.src[r.n] = dev + at;
			r.len[r.n] = big[k];
			r.slot[r.n] = 17 * k + half;
			r.want[r.n] = pmck__hash(host + at, big[k]);
		}
		bad += differ(g, &r, 1 + half, &first);
	}
	ok(bad == 0, "lengths around blocks and up to a hash chunk (%ld differ; first of %ld "
			"bytes)", bad, first);

	/* Many whole chunks at once: a grid of more warps than the GPU runs at a time. */
	r.n = 0;
	uint64_t whole = pmck__hash(host, PMCK_HASH_CHUNK);
	for (; r.n < most; r.n++) {
		r.src[r.n] = dev;
		r.len[r.n] = PMCK_HASH_CHUNK;
		r.slot[r.n] = r.n;
		r.want[r.n] = whole;
	}
	bad = differ(g, &r, 3, &first);
	ok(bad == 0, "%zu whole chunks in one launch (%ld differ)", r.n, bad);

	/* A byte flipped on the device: that chunk's value changes, as the host's does. */
	uint8_t flip = host[500] ^ 0x40;
	cudaMemcpy(dev + 500, &flip, 1, cudaMemcpyHostToDevice);
	r.n = 1;
	r.src[0] = dev;
	r.len[0] = 4096;
	r.slot[0] = 0;
	r.want[0] = pmck__hash(host, 4096);
	bad = differ(g, &r, 0, &first);
	ok(bad == 1, "a byte flipped on the device changes its chunk's value");
	host[500] = flip;
	r.want[0] = pmck__hash(host, 4096);
	ok(differ(g, &r, 0, &first) == 0, "and it is the host's value of the flipped bytes");

	cudaFree(dev);
	pmck__gpu_close(&g);
	pma_region_close(&reg);
	free(host);
	free(r.src);
	free(r.len);
	free(r.slot);
	free(r.want);
	return done_testing();
}
#endif
