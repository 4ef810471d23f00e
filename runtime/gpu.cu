/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * gpu.cu -- the GPU -> PM path through CUDA unified virtual addressing.
 *
 * The whole region is registered with cudaHostRegister(Mapped|Portable),
 * which pins its pages and gives the GPU a device pointer to them.  A
 * copy from device memory to that pointer travels over PCIe straight into
 * the region's memory; the host then flushes the range (the writes may sit
 * in the LLC when DDIO is on) and drains.
 *
 * Streams: every copy runs on a non-blocking stream of the library's own
 * (one per writer thread, one for snapshots), ordered after the caller's
 * work by events, never by a device synchronisation (see gpu.h).
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
	cudaEvent_t *ready;    /* per layer: recorded on the caller's stream at put_layer */
	cudaEvent_t *done;     /* per job: its copy has read its source */
	unsigned nready;
	size_t ndone;
	char *snapshot;        /* strategy G: spare device memory, one slot's size */
	cudaStream_t snap_stream;
	cudaEvent_t *snapped;  /* per layer: its snapshot copies are done */
	unsigned nsnapped;
};

struct pmck_gpu_stream {
	struct pmck_gpu *g;
	cudaStream_t stream;
	cudaEvent_t sub[PMCK_GPU_MAX_SUB];
	unsigned nsub;
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

/*
 * Makes `device` current for a scope and restores the caller's device at
 * its end: calls made on the caller's thread (put_layer, its waits) must
 * not change which device the framework's next call lands on.
 */
struct device_scope {
	int prev = -1;
	bool changed = false;
	cudaError_t err;
	explicit device_scope(int device)
	{
		err = cudaGetDevice(&prev);
		if (err == cudaSuccess && prev != device) {
			err = cudaSetDevice(device);
			changed = err == cudaSuccess;
		}
	}
	~device_scope()
	{
		if (changed)
			cudaSetDevice(prev);
	}
};

#define DEVICE_SCOPE(g) device_scope scope_((g)->device); CUDA_TRY(scope_.err)

static cudaStream_t
caller_stream(void *stream)
{
	return stream ? (cudaStream_t)stream : cudaStreamLegacy;
}

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

static int
make_events(cudaEvent_t **ev, size_t want, size_t *made)
{
	*ev = (cudaEvent_t *)calloc(want ? want : 1, sizeof(**ev));
	if (!*ev)
		return pmck__err(-ENOMEM, "out of memory");
	for (; *made < want; ++*made)
		CUDA_TRY(cudaEventCreateWithFlags(&(*ev)[*made], cudaEventDisableTiming));
	return 0;
}

static int
open_locked(struct pmck_gpu *g, size_t snapshot_bytes, unsigned nlayers, size_t njobs)
{
	CUDA_TRY(cudaHostRegister(g->host_base, g->size,
			cudaHostRegisterMapped | cudaHostRegisterPortable));
	g->registered = 1;
	void *dev;
	CUDA_TRY(cudaHostGetDevicePointer(&dev, g->host_base, 0));
	g->dev_base = (char *)dev;
	size_t made = 0;
	int ret = make_events(&g->ready, nlayers, &made);
	g->nready = (unsigned)made;
	if (ret)
		return ret;
	made = 0;
	ret = make_events(&g->done, njobs, &made);
	g->ndone = made;
	if (ret || !snapshot_bytes)
		return ret;
	CUDA_TRY(cudaMalloc((void **)&g->snapshot, snapshot_bytes));
	CUDA_TRY(cudaStreamCreateWithFlags(&g->snap_stream, cudaStreamNonBlocking));
	made = 0;
	ret = make_events(&g->snapped, nlayers, &made);
	g->nsnapped = (unsigned)made;
	return ret;
}

extern "C" int
pmck__gpu_open(struct pma_region *r, int device, size_t snapshot_bytes, unsigned nlayers,
		size_t njobs, struct pmck_gpu **out)
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
	DEVICE_SCOPE(g);
	return open_locked(g, snapshot_bytes, nlayers, njobs);
}

extern "C" void
pmck__gpu_close(struct pmck_gpu **gp)
{
	struct pmck_gpu *g = gp ? *gp : NULL;

	if (!g)
		return;
	{
		device_scope scope(g->device);
		for (unsigned l = 0; l < g->nready; l++)
			cudaEventDestroy(g->ready[l]);
		for (size_t j = 0; j < g->ndone; j++)
			cudaEventDestroy(g->done[j]);
		for (unsigned l = 0; l < g->nsnapped; l++)
			cudaEventDestroy(g->snapped[l]);
		if (g->snap_stream)
			cudaStreamDestroy(g->snap_stream);
		cudaFree(g->snapshot);
		if (g->registered)
			cudaHostUnregister(g->host_base);
	}
	free(g->ready);
	free(g->done);
	free(g->snapped);
	free(g);
	*gp = NULL;
}

extern "C" int
pmck__gpu_stream_new(struct pmck_gpu *g, struct pmck_gpu_stream **out)
{
	struct pmck_gpu_stream *ws = (struct pmck_gpu_stream *)calloc(1, sizeof(*ws));

	*out = ws;
	if (!ws)
		return pmck__err(-ENOMEM, "out of memory");
	ws->g = g;
	CUDA_TRY(cudaSetDevice(g->device)); /* a writer thread of the library: its device for good */
	CUDA_TRY(cudaStreamCreateWithFlags(&ws->stream, cudaStreamNonBlocking));
	for (; ws->nsub < PMCK_GPU_MAX_SUB; ws->nsub++)
		CUDA_TRY(cudaEventCreateWithFlags(&ws->sub[ws->nsub], cudaEventDisableTiming));
	return 0;
}

extern "C" void
pmck__gpu_stream_delete(struct pmck_gpu_stream **wsp)
{
	struct pmck_gpu_stream *ws = wsp ? *wsp : NULL;

	if (!ws)
		return;
	for (unsigned i = 0; i < ws->nsub; i++)
		cudaEventDestroy(ws->sub[i]);
	if (ws->stream)
		cudaStreamDestroy(ws->stream);
	free(ws);
	*wsp = NULL;
}

extern "C" int
pmck__gpu_layer_ready(struct pmck_gpu *g, unsigned layer, void *stream)
{
	DEVICE_SCOPE(g);
	CUDA_TRY(cudaEventRecord(g->ready[layer], caller_stream(stream)));
	if (g->snap_stream)
		CUDA_TRY(cudaStreamWaitEvent(g->snap_stream, g->ready[layer], 0));
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

static int
enqueue_copy(struct pmck_gpu_stream *ws, enum pmck_gpu_copy how, char *dst, const char *src,
		size_t len)
{
	struct pmck_gpu *g = ws->g;

	if (how == PMCK_GPU_TO_HOST) {
		CUDA_TRY(cudaMemcpyAsync(dst, src, len, cudaMemcpyDeviceToHost, ws->stream));
		return 0;
	}
	char *ddst = g->dev_base + (dst - g->host_base);
	if (how == PMCK_GPU_KERNEL && (uintptr_t)ddst % 16 == 0 && (uintptr_t)src % 16 == 0) {
		size_t words = len / 16, tail = len - words * 16;
		copy_to_host_memory<<<264, 512, 0, ws->stream>>>((uint4 *)ddst, (const uint4 *)src,
				words, ddst + words * 16, src + words * 16, tail);
		CUDA_TRY(cudaGetLastError());
	} else {
		CUDA_TRY(cudaMemcpyAsync(ddst, src, len, cudaMemcpyDeviceToDevice, ws->stream));
	}
	return 0;
}

extern "C" int
pmck__gpu_copy_start(struct pmck_gpu_stream *ws, unsigned layer, int from_snapshot,
		enum pmck_gpu_copy how, void *dst, const void *src, size_t len, size_t sub,
		size_t job, unsigned *nsub)
{
	struct pmck_gpu *g = ws->g;

	*nsub = 0;
	if (!sub || len > sub * PMCK_GPU_MAX_SUB || job >= g->ndone || layer >= g->nready)
		return pmck__err(-EINVAL, "GPU path: a copy of %zu bytes (job %zu, layer %u)", len,
				job, layer);
	/* On the GPU: after the work that produced the sources (or their snapshot). */
	CUDA_TRY(cudaStreamWaitEvent(ws->stream, from_snapshot ? g->snapped[layer] :
			g->ready[layer], 0));
	for (size_t off = 0; off < len; off += sub) {
		size_t n = len - off < sub ? len - off : sub;
		int ret = enqueue_copy(ws, how, (char *)dst + off, (const char *)src + off, n);
		if (ret)
			return ret;
		CUDA_TRY(cudaEventRecord(ws->sub[*nsub], ws->stream));
		++*nsub;
	}
	/* The source has been read once this fires (a caller's stream may then change it). */
	CUDA_TRY(cudaEventRecord(g->done[job], ws->stream));
	return 0;
}

extern "C" int
pmck__gpu_copy_wait(struct pmck_gpu_stream *ws, unsigned i)
{
	CUDA_TRY(cudaEventSynchronize(ws->sub[i]));
	return 0;
}

extern "C" int
pmck__gpu_caller_wait(struct pmck_gpu *g, void *stream, int snapshot_layer, size_t first,
		size_t n)
{
	DEVICE_SCOPE(g);
	cudaStream_t s = caller_stream(stream);
	if (snapshot_layer >= 0) {
		CUDA_TRY(cudaStreamWaitEvent(s, g->snapped[snapshot_layer], 0));
		return 0;
	}
	for (size_t j = first; j < first + n && j < g->ndone; j++)
		CUDA_TRY(cudaStreamWaitEvent(s, g->done[j], 0));
	return 0;
}

extern "C" int
pmck__gpu_host_alloc(struct pmck_gpu *g, size_t len, void **out)
{
	DEVICE_SCOPE(g);
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
pmck__gpu_snapshot_layer(struct pmck_gpu *g, unsigned layer, size_t n, const uint64_t *offs,
		const void *const *srcs, const size_t *lens, void **dsts)
{
	DEVICE_SCOPE(g);
	for (size_t i = 0; i < n; i++)
		dsts[i] = g->snapshot + offs[i];
	if (n > 1) {
		/*
		 * One call for the layer's copies, not one each: a GPT-2 medium state
		 * is 1175 tensors, snapshotted on the caller's thread at every save.
		 * The sources are read in stream order, after the layer's ready event.
		 */
		cudaMemcpyAttributes attr = {};
		size_t first = 0;
		attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
		CUDA_TRY(cudaMemcpyBatchAsync(dsts, srcs, lens, n, &attr, &first, 1, g->snap_stream));
	} else if (n == 1) {
		CUDA_TRY(cudaMemcpyAsync(dsts[0], srcs[0], lens[0], cudaMemcpyDeviceToDevice,
				g->snap_stream));
	}
	CUDA_TRY(cudaEventRecord(g->snapped[layer], g->snap_stream));
	return 0;
}
