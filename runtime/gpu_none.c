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

int
pmck__gpu_open(struct pma_region *r, int device, size_t snapshot_bytes, unsigned nlayers,
		struct pmck_gpu **out)
{
	(void)r, (void)device, (void)snapshot_bytes, (void)nlayers;
	*out = NULL;
	return no_cuda();
}

void pmck__gpu_close(struct pmck_gpu **g) { (void)g; }
int pmck__gpu_bind_thread(struct pmck_gpu *g) { (void)g; return no_cuda(); }

int
pmck__gpu_to_region(struct pmck_gpu *g, void *dst, const void *src, size_t len, int k)
{
	(void)g, (void)dst, (void)src, (void)len, (void)k;
	return no_cuda();
}

int
pmck__gpu_to_host(struct pmck_gpu *g, void *host, const void *src, size_t len)
{
	(void)g, (void)host, (void)src, (void)len;
	return no_cuda();
}

int pmck__gpu_host_alloc(struct pmck_gpu *g, size_t len, void **out)
{
	(void)g, (void)len;
	*out = NULL;
	return no_cuda();
}

void pmck__gpu_host_free(struct pmck_gpu *g, void *p) { (void)g, (void)p; }

int
pmck__gpu_snapshot(struct pmck_gpu *g, uint64_t off, const void *src, size_t len,
		const void **snap)
{
	(void)g, (void)off, (void)src, (void)len, (void)snap;
	return no_cuda();
}

int pmck__gpu_snapshot_mark(struct pmck_gpu *g, unsigned l) { (void)g, (void)l; return no_cuda(); }
int pmck__gpu_snapshot_wait(struct pmck_gpu *g, unsigned l) { (void)g, (void)l; return no_cuda(); }
