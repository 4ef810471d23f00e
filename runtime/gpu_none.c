/* SPDX-License-Identifier: BSD-3-Clause */
/* gpu_none.c -- the GPU path of a build without CUDA: every entry reports it. */
#include <errno.h>

#include "internal.h"
#include "gpu.h"

static int
no_cuda(void)
{
	return pma__err(-ENODEV, "GPU path unavailable: pmckpt was built without CUDA "
			"(rebuild with nvcc on PATH or CUDA=1)");
}

int pmck_gpu_available(int device) { (void)device; return no_cuda(); }

int pmck__gpu_build_version(void) { return 0; }

/* pmck__gpu_open fails, so no pipeline reaches the others: they report it all the same. */
int
pmck__gpu_open(struct pma_region *r, int device, size_t snapshot_bytes, size_t nsources,
		unsigned nlayers, size_t njobs, unsigned flags, struct pmck_gpu **out)
{
	(void)r, (void)device, (void)snapshot_bytes, (void)nsources, (void)nlayers, (void)njobs;
	(void)flags;
	*out = NULL;
	return no_cuda();
}

void pmck__gpu_close(struct pmck_gpu **g) { (void)g; }

int
pmck__gpu_stream_new(struct pmck_gpu *g, struct pmck_gpu_stream **out)
{
	(void)g;
	*out = NULL;
	return no_cuda();
}

void pmck__gpu_stream_delete(struct pmck_gpu_stream **ws) { (void)ws; }

int
pmck__gpu_layer_ready(struct pmck_gpu *g, unsigned event, void *stream)
{
	(void)g, (void)event, (void)stream;
	return no_cuda();
}

int
pmck__gpu_copy_start(struct pmck_gpu_stream *ws, unsigned event, int from_snapshot,
		enum pmck_gpu_copy how, void *dst, const void *src, size_t len, size_t sub,
		size_t job, unsigned *nsub)
{
	(void)ws, (void)event, (void)from_snapshot, (void)how, (void)dst, (void)src;
	(void)len, (void)sub, (void)job;
	*nsub = 0;
	return no_cuda();
}

int
pmck__gpu_copy_wait(struct pmck_gpu_stream *ws, unsigned i)
{
	(void)ws, (void)i;
	return no_cuda();
}

int
pmck__gpu_caller_wait(struct pmck_gpu *g, void *stream, int snapshot_event, int hash_event,
		size_t first, size_t n)
{
	(void)g, (void)stream, (void)snapshot_event, (void)hash_event, (void)first, (void)n;
	return no_cuda();
}

int pmck__gpu_host_alloc(struct pmck_gpu *g, size_t len, void **out)
{
	(void)g, (void)len;
	*out = NULL;
	return no_cuda();
}

void pmck__gpu_host_free(struct pmck_gpu *g, void *p) { (void)g, (void)p; }

int pmck__gpu_snapshot_begin(struct pmck_gpu *g) { (void)g; return no_cuda(); }

int
pmck__gpu_snapshot(struct pmck_gpu *g, unsigned event, size_t n, const uint64_t *offs,
		const void *const *srcs, const size_t *lens)
{
	(void)g, (void)event, (void)n, (void)offs, (void)srcs, (void)lens;
	return no_cuda();
}

const char *pmck__gpu_snapshot_base(const struct pmck_gpu *g) { (void)g; return NULL; }

int
pmck__gpu_hash_open(struct pmck_gpu *g, size_t nchunks, unsigned nlayers)
{
	(void)g, (void)nchunks, (void)nlayers;
	return no_cuda();
}

int pmck__gpu_hash_begin(struct pmck_gpu *g) { (void)g; return no_cuda(); }

int
pmck__gpu_hash(struct pmck_gpu *g, unsigned event, unsigned hashed, int from_snapshot,
		size_t n, const void *const *srcs, const size_t *lens, const size_t *slots)
{
	(void)g, (void)event, (void)hashed, (void)from_snapshot, (void)n, (void)srcs, (void)lens;
	(void)slots;
	return no_cuda();
}

int pmck__gpu_hash_wait(struct pmck_gpu *g, unsigned event) { (void)g, (void)event; return no_cuda(); }

uint64_t pmck__gpu_hash_result(const struct pmck_gpu *g, size_t slot) { (void)g, (void)slot; return 0; }

/* pmck_gpu_hasher (gpu_checksum.cu): none is made, so the others see no hasher. */
int
pmck_gpu_hasher_new(int device, struct pmck_gpu_hasher **out)
{
	(void)device;
	if (out)
		*out = NULL;
	return no_cuda();
}

int
pmck_gpu_hasher_add(struct pmck_gpu_hasher *h, void *stream, size_t n, const void *const *srcs,
		const uint64_t *lens)
{
	(void)h, (void)stream, (void)n, (void)srcs, (void)lens;
	return no_cuda();
}

int pmck_gpu_hasher_reserve(struct pmck_gpu_hasher *h, size_t chunks) { (void)h, (void)chunks; return no_cuda(); }

int pmck_gpu_hasher_wait(struct pmck_gpu_hasher *h, uint64_t *out, size_t n) { (void)h, (void)out, (void)n; return no_cuda(); }

int pmck_gpu_hasher_fill(void *hasher, uint64_t *csum, size_t n) { (void)hasher, (void)csum, (void)n; return no_cuda(); }

void pmck_gpu_hasher_delete(struct pmck_gpu_hasher **h) { if (h) *h = NULL; }
