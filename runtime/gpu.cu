/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * gpu.cu -- the GPU -> PM path through CUDA unified virtual addressing.
 *
 * The whole region is registered with cudaHostRegister(Mapped|Portable),
 * which pins its pages and gives the GPU a device pointer to them.  A
 * copy from device memory to that pointer travels over PCIe straight into
 * the region's memory; the host then flushes the range (the writes may sit
 * in the LLC when DDIO is on) and drains.
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <stdlib.h>

extern "C" {
#include "pmckpt.h"
#include "errmsg.h"
#include "gpu.h"
}

struct pmck_gpu {
	int device;
	char *host_base;
	size_t size;
	char *dev_base;        /* the region as the GPU sees it */
	int registered;
	char *snapshot;        /* strategy G: spare device memory, one slot's size */
	cudaStream_t snap_stream;
	cudaEvent_t *events;   /* one per layer: its snapshot copies are done */
	unsigned nlayers;
};

static int
cuda_fail(cudaError_t e, const char *what)
{
	int code = e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ||
			e == cudaErrorInvalidDevice || e == cudaErrorInitializationError ?
			-ENODEV : -EIO;
	return pmck__err(code, "GPU path: %s failed: %s (%s)", what, cudaGetErrorName(e),
			cudaGetErrorString(e));
}

#define CUDA_TRY(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) return cuda_fail(e_, #call); } while (0)

extern "C" int
pmck__gpu_build_version(void)
{
	return CUDART_VERSION;
}

extern "C" int
pmck_gpu_available(int device)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);

	if (e != cudaSuccess)
		return pmck__err(-ENODEV, "GPU path unavailable: %s (%s)",
				e == cudaErrorInsufficientDriver ? "no CUDA driver" :
				e == cudaErrorNoDevice ? "no CUDA device" : cudaGetErrorName(e),
				cudaGetErrorString(e));
	if (device < 0 || device >= n)
		return pmck__err(-ENODEV, "GPU path unavailable: no CUDA device %d (%d present)", device, n);
	return 0;
}

extern "C" int
pmck__gpu_open(struct pma_region *r, int device, size_t snapshot_bytes, unsigned nlayers,
		struct pmck_gpu **out)
{
	int ret = pmck_gpu_available(device);

	*out = NULL;
	if (ret)
		return ret;
	struct pmck_gpu *g = (struct pmck_gpu *)calloc(1, sizeof(*g));
	if (!g)
		return pmck__err(-ENOMEM, "out of memory");
	g->device = device;
	g->host_base = (char *)pma_region_addr(r);
	g->size = pma_region_size(r);
	*out = g;

	CUDA_TRY(cudaSetDevice(device));
	CUDA_TRY(cudaHostRegister(g->host_base, g->size,
			cudaHostRegisterMapped | cudaHostRegisterPortable));
	g->registered = 1;
	void *dev;
	CUDA_TRY(cudaHostGetDevicePointer(&dev, g->host_base, 0));
	g->dev_base = (char *)dev;
	if (snapshot_bytes) {
		CUDA_TRY(cudaMalloc((void **)&g->snapshot, snapshot_bytes));
		CUDA_TRY(cudaStreamCreateWithFlags(&g->snap_stream, cudaStreamNonBlocking));
		g->events = (cudaEvent_t *)calloc(nlayers, sizeof(*g->events));
		if (!g->events)
			return pmck__err(-ENOMEM, "out of memory");
		for (; g->nlayers < nlayers; g->nlayers++)
			CUDA_TRY(cudaEventCreateWithFlags(&g->events[g->nlayers], cudaEventDisableTiming));
	}
	return 0;
}

extern "C" void
pmck__gpu_close(struct pmck_gpu **gp)
{
	struct pmck_gpu *g = gp ? *gp : NULL;

	if (!g)
		return;
	cudaSetDevice(g->device);
	for (unsigned l = 0; l < g->nlayers; l++)
		cudaEventDestroy(g->events[l]);
	free(g->events);
	if (g->snap_stream)
		cudaStreamDestroy(g->snap_stream);
	cudaFree(g->snapshot);
	if (g->registered)
		cudaHostUnregister(g->host_base);
	free(g);
	*gp = NULL;
}

extern "C" int
pmck__gpu_bind_thread(struct pmck_gpu *g)
{
	CUDA_TRY(cudaSetDevice(g->device));
	return 0;
}

/*
 * Strategy D by kernel: each thread stores 16-byte words, so a warp writes
 * 512 contiguous bytes (four 128-byte PCIe-friendly chunks) per iteration;
 * the system-scope fence orders the writes before the kernel's completion
 * is visible to the host.
 */
__global__ void
copy_to_host_memory(uint4 *dst, const uint4 *src, size_t words, char *dst_tail,
		const char *src_tail, size_t tail)
{
	size_t stride = (size_t)gridDim.x * blockDim.x;
	size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;

	for (size_t k = i; k < words; k += stride)
		dst[k] = src[k];
	for (size_t k = i; k < tail; k += stride)
		dst_tail[k] = src_tail[k];
	__threadfence_system();
}

extern "C" int
pmck__gpu_to_region(struct pmck_gpu *g, void *dst, const void *src, size_t len, int use_kernel)
{
	char *ddst = g->dev_base + ((char *)dst - g->host_base);

	if (len == 0)
		return 0;
	if (use_kernel && ((uintptr_t)ddst % 16 == 0) && ((uintptr_t)src % 16 == 0)) {
		size_t words = len / 16;
		size_t tail = len - words * 16;
		copy_to_host_memory<<<264, 512, 0, cudaStreamPerThread>>>((uint4 *)ddst,
				(const uint4 *)src, words, ddst + words * 16,
				(const char *)src + words * 16, tail);
		CUDA_TRY(cudaGetLastError());
	} else {
		CUDA_TRY(cudaMemcpyAsync(ddst, src, len, cudaMemcpyDeviceToDevice, cudaStreamPerThread));
	}
	CUDA_TRY(cudaStreamSynchronize(cudaStreamPerThread));
	return 0;
}

extern "C" int
pmck__gpu_to_host(struct pmck_gpu *g, void *host, const void *src, size_t len)
{
	(void)g;
	CUDA_TRY(cudaMemcpyAsync(host, src, len, cudaMemcpyDeviceToHost, cudaStreamPerThread));
	CUDA_TRY(cudaStreamSynchronize(cudaStreamPerThread));
	return 0;
}

extern "C" int
pmck__gpu_host_alloc(struct pmck_gpu *g, size_t len, void **out)
{
	(void)g;
	CUDA_TRY(cudaHostAlloc(out, len, cudaHostAllocPortable));
	return 0;
}

extern "C" void
pmck__gpu_host_free(struct pmck_gpu *g, void *p)
{
	(void)g;
	cudaFreeHost(p);
}

extern "C" int
pmck__gpu_snapshot(struct pmck_gpu *g, uint64_t off, const void *src, size_t len,
		const void **snap)
{
	*snap = g->snapshot + off;
	CUDA_TRY(cudaMemcpyAsync(g->snapshot + off, src, len, cudaMemcpyDeviceToDevice,
			g->snap_stream));
	return 0;
}

extern "C" int
pmck__gpu_snapshot_mark(struct pmck_gpu *g, unsigned layer)
{
	CUDA_TRY(cudaEventRecord(g->events[layer], g->snap_stream));
	return 0;
}

extern "C" int
pmck__gpu_snapshot_wait(struct pmck_gpu *g, unsigned layer)
{
	CUDA_TRY(cudaEventSynchronize(g->events[layer]));
	return 0;
}
