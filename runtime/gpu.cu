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
#include <stdlib.h>
#include <string.h>

#include "gpu_cuda.h"
extern "C" {
#include "gpu.h"
}

#define HASH_STREAMS 4 /* puts hashed side by side: a put's kernels go to event % 4 */

struct pmck_gpu {
	int device;
	unsigned event_flags;  /* cudaEventDisableTiming, | cudaEventBlockingSync (gpu.h) */
	char *host_base;
	size_t size;
	char *dev_base;        /* the region as the GPU sees it */
	int registered;
	/* Events indexed by the first layer of a put (a put of several layers shares one) */
	cudaEvent_t *ready;    /* recorded on the caller's stream at the put */
	cudaEvent_t *done;     /* per job: its copy has read its source */
	unsigned nready;
	size_t ndone;
	char *snapshot;        /* strategy G: spare device memory, one slot's size */
	cudaStream_t snap_stream;
	cudaEvent_t *snapped;  /* the put's snapshot copies are done */
	unsigned nsnapped;
	/* Strategy G's copy lists: filled on the host, copied to the device, read by the kernel */
	struct snap_copy *copies_host; /* pinned */
	struct snap_copy *copies_dev;
	size_t ncopies, copies_used;   /* room, and used by this checkpoint's snapshots */
	cudaEvent_t copies_read;       /* the last list copied to the device */
	int snap_blocks;               /* the snapshot kernel's grid: 4 blocks per SM */
	/* Device hashing (pmck__gpu_hash_open): lists and results in mapped pinned memory */
	struct pmck_hash_chunk *hash_list, *hash_list_dev;
	uint64_t *hash_results, *hash_results_dev;
	size_t nhash, hash_used;       /* room, and used by this checkpoint's puts */
	cudaStream_t hash_stream[HASH_STREAMS];
	cudaEvent_t *hashed;           /* per hash kernel (its first layer): it is done */
	unsigned nhashed;
	int hash_blocks;               /* the hash kernel's grid at most: 16 warps per SM */
};

/* One piece of a snapshot: at most PMCK_GPU_SNAP_PIECE bytes, one thread block's work. */
struct snap_copy {
	const char *src;
	char *dst;
	size_t len;
};

struct pmck_gpu_stream {
	struct pmck_gpu *g;
	cudaStream_t stream;
	cudaEvent_t sub[PMCK_GPU_MAX_SUB];
	unsigned nsub;
};

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
make_events(const struct pmck_gpu *g, cudaEvent_t **ev, size_t want, size_t *made)
{
	*ev = (cudaEvent_t *)calloc(want ? want : 1, sizeof(**ev));
	if (!*ev)
		return pmck__err(-ENOMEM, "out of memory");
	for (; *made < want; ++*made)
		CUDA_TRY(cudaEventCreateWithFlags(&(*ev)[*made], g->event_flags));
	return 0;
}

static int preload_kernels(void);

static int
open_locked(struct pmck_gpu *g, size_t snapshot_bytes, size_t nsources, unsigned nlayers,
		size_t njobs)
{
	int ret = preload_kernels();
	if (ret)
		return ret;
	CUDA_TRY(cudaHostRegister(g->host_base, g->size,
			cudaHostRegisterMapped | cudaHostRegisterPortable));
	g->registered = 1;
	void *dev;
	CUDA_TRY(cudaHostGetDevicePointer(&dev, g->host_base, 0));
	g->dev_base = (char *)dev;
	size_t made = 0;
	ret = make_events(g, &g->ready, nlayers, &made);
	g->nready = (unsigned)made;
	if (ret)
		return ret;
	made = 0;
	ret = make_events(g, &g->done, njobs, &made);
	g->ndone = made;
	if (ret || !snapshot_bytes)
		return ret;
	cudaError_t e = cudaMalloc((void **)&g->snapshot, snapshot_bytes);
	if (e != cudaSuccess) {
		size_t free_bytes = 0, total = 0;
		(void)cudaGetLastError();
		(void)cudaMemGetInfo(&free_bytes, &total);
		return pmck__err(e == cudaErrorMemoryAllocation ? -ENOMEM : -EIO,
				"GPU path: %zu bytes of device memory for snapshots (the snapshot "
				"strategy, or snapshot_on_wait): %s; %zu of %zu bytes free",
				snapshot_bytes, cudaGetErrorString(e), free_bytes, total);
	}
	CUDA_TRY(cudaStreamCreateWithFlags(&g->snap_stream, cudaStreamNonBlocking));
	/* Each source in pieces of PMCK_GPU_SNAP_PIECE: at most one more piece than whole ones. */
	g->ncopies = snapshot_bytes / PMCK_GPU_SNAP_PIECE + nsources;
	CUDA_TRY(cudaHostAlloc((void **)&g->copies_host, g->ncopies * sizeof(struct snap_copy),
			cudaHostAllocPortable));
	CUDA_TRY(cudaMalloc((void **)&g->copies_dev, g->ncopies * sizeof(struct snap_copy)));
	CUDA_TRY(cudaEventCreateWithFlags(&g->copies_read, g->event_flags));
	int sms = 0;
	CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, g->device));
	g->snap_blocks = 4 * (sms > 0 ? sms : 1);
	made = 0;
	ret = make_events(g, &g->snapped, nlayers, &made);
	g->nsnapped = (unsigned)made;
	return ret;
}

extern "C" int
pmck__gpu_open(struct pma_region *r, int device, size_t snapshot_bytes, size_t nsources,
		unsigned nlayers, size_t njobs, unsigned flags, struct pmck_gpu **out)
{
	int ret = pmck_gpu_available(device);

	*out = NULL;
	if (ret)
		return ret;
	struct pmck_gpu *g = (struct pmck_gpu *)calloc(1, sizeof(*g));
	if (!g)
		return pmck__err(-ENOMEM, "out of memory");
	g->device = device;
	g->event_flags = cudaEventDisableTiming |
			(flags & PMCK_GPU_BLOCKING_WAITS ? cudaEventBlockingSync : 0);
	g->host_base = (char *)pma_region_addr(r);
	g->size = pma_region_size(r);
	*out = g;
	DEVICE_SCOPE(g);
	return open_locked(g, snapshot_bytes, nsources, nlayers, njobs);
}

extern "C" void
pmck__gpu_close(struct pmck_gpu **gp)
{
	struct pmck_gpu *g = gp ? *gp : NULL;

	if (!g)
		return;
	{
		device_scope scope(g->device);
		/*
		 * A failed checkpoint's writers skip their jobs and never wait for
		 * its snapshot or hash kernels, which may still read the lists and
		 * write the buffers freed below: they end first.
		 */
		if (g->snap_stream)
			cudaStreamSynchronize(g->snap_stream);
		for (unsigned k = 0; k < HASH_STREAMS; k++)
			if (g->hash_stream[k])
				cudaStreamSynchronize(g->hash_stream[k]);
		for (unsigned l = 0; l < g->nready; l++)
			cudaEventDestroy(g->ready[l]);
		for (size_t j = 0; j < g->ndone; j++)
			cudaEventDestroy(g->done[j]);
		for (unsigned l = 0; l < g->nsnapped; l++)
			cudaEventDestroy(g->snapped[l]);
		if (g->snap_stream)
			cudaStreamDestroy(g->snap_stream);
		if (g->copies_read)
			cudaEventDestroy(g->copies_read);
		for (unsigned l = 0; l < g->nhashed; l++)
			cudaEventDestroy(g->hashed[l]);
		for (unsigned k = 0; k < HASH_STREAMS; k++)
			if (g->hash_stream[k])
				cudaStreamDestroy(g->hash_stream[k]);
		cudaFreeHost(g->hash_list);
		cudaFreeHost(g->hash_results);
		cudaFreeHost(g->copies_host);
		cudaFree(g->copies_dev);
		cudaFree(g->snapshot);
		if (g->registered)
			cudaHostUnregister(g->host_base);
	}
	free(g->ready);
	free(g->done);
	free(g->snapped);
	free(g->hashed);
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
		CUDA_TRY(cudaEventCreateWithFlags(&ws->sub[ws->nsub], g->event_flags));
	return 0;
}

extern "C" void
pmck__gpu_stream_delete(struct pmck_gpu_stream **wsp)
{
	struct pmck_gpu_stream *ws = wsp ? *wsp : NULL;

	if (!ws)
		return;
	/* Normally idle: copies still in flight (after an error) end before the region goes. */
	if (ws->stream)
		cudaStreamSynchronize(ws->stream);
	for (unsigned i = 0; i < ws->nsub; i++)
		cudaEventDestroy(ws->sub[i]);
	if (ws->stream)
		cudaStreamDestroy(ws->stream);
	free(ws);
	*wsp = NULL;
}

extern "C" int
pmck__gpu_layer_ready(struct pmck_gpu *g, unsigned event, void *stream)
{
	DEVICE_SCOPE(g);
	CUDA_TRY(cudaEventRecord(g->ready[event], caller_stream(stream)));
	if (g->snap_stream)
		CUDA_TRY(cudaStreamWaitEvent(g->snap_stream, g->ready[event], 0));
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
		LAUNCH(copy_to_host_memory, 264, 512, ws->stream, (uint4 *)ddst,
				(const uint4 *)src, words, ddst + words * 16, src + words * 16, tail);
	} else {
		CUDA_TRY(cudaMemcpyAsync(ddst, src, len, cudaMemcpyDeviceToDevice, ws->stream));
	}
	return 0;
}

extern "C" int
pmck__gpu_copy_start(struct pmck_gpu_stream *ws, unsigned event, int from_snapshot,
		enum pmck_gpu_copy how, void *dst, const void *src, size_t len, size_t sub,
		size_t job, unsigned *nsub)
{
	struct pmck_gpu *g = ws->g;

	*nsub = 0;
	if (!sub || len > sub * PMCK_GPU_MAX_SUB || job >= g->ndone || event >= g->nready)
		return pmck__err(-EINVAL, "GPU path: a copy of %zu bytes (job %zu, event %u)", len,
				job, event);
	/* On the GPU: after the work that produced the sources (or their snapshot). */
	CUDA_TRY(cudaStreamWaitEvent(ws->stream, from_snapshot ? g->snapped[event] :
			g->ready[event], 0));
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
pmck__gpu_caller_wait(struct pmck_gpu *g, void *stream, int snapshot_event, int hash_event,
		size_t first, size_t n)
{
	DEVICE_SCOPE(g);
	cudaStream_t s = caller_stream(stream);
	if (hash_event >= 0 && (unsigned)hash_event < g->nhashed)
		CUDA_TRY(cudaStreamWaitEvent(s, g->hashed[hash_event], 0));
	if (snapshot_event >= 0)
		CUDA_TRY(cudaStreamWaitEvent(s, g->snapped[snapshot_event], 0));
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

/*
 * Strategy G's snapshot: each thread block copies whole pieces of the list,
 * 16-byte words four at a time where source and destination allow it (a
 * tensor's storage and the snapshot's offsets are 16-aligned, views may not
 * be), else 4-byte words, else bytes.
 */
__global__ void
copy_snapshot_pieces(const struct snap_copy *__restrict__ list, size_t n)
{
	for (size_t i = blockIdx.x; i < n; i += gridDim.x) {
		const char *src = list[i].src;
		char *dst = list[i].dst;
		size_t len = list[i].len, step = blockDim.x, k = threadIdx.x, done = 0;
		uintptr_t align = (uintptr_t)src | (uintptr_t)dst;
		if (align % 16 == 0) {
			const uint4 *s = (const uint4 *)src;
			uint4 *d = (uint4 *)dst;
			size_t words = len / 16;
			for (; k + 3 * step < words; k += 4 * step) {
				uint4 a = s[k], b = s[k + step], c = s[k + 2 * step], e = s[k + 3 * step];
				d[k] = a;
				d[k + step] = b;
				d[k + 2 * step] = c;
				d[k + 3 * step] = e;
			}
			for (; k < words; k += step)
				d[k] = s[k];
			done = words * 16;
		} else if (align % 4 == 0) {
			const uint32_t *s = (const uint32_t *)src;
			uint32_t *d = (uint32_t *)dst;
			size_t words = len / 4;
			for (; k < words; k += step)
				d[k] = s[k];
			done = words * 4;
		}
		for (k = done + threadIdx.x; k < len; k += step)
			dst[k] = src[k];
	}
}

extern "C" int
pmck__gpu_snapshot_begin(struct pmck_gpu *g)
{
	DEVICE_SCOPE(g);
	/* Normally long done: the last checkpoint's writers copied from its snapshot. */
	CUDA_TRY(cudaEventSynchronize(g->copies_read));
	g->copies_used = 0;
	return 0;
}

extern "C" const char *
pmck__gpu_snapshot_base(const struct pmck_gpu *g)
{
	return g->snapshot;
}

extern "C" int
pmck__gpu_snapshot(struct pmck_gpu *g, unsigned event, size_t n, const uint64_t *offs,
		const void *const *srcs, const size_t *lens)
{
	size_t first = g->copies_used, end = first;

	if (event >= g->nsnapped)
		return pmck__err(-EINVAL, "GPU path: snapshot event %u of %u", event, g->nsnapped);
	for (size_t i = 0; i < n; i++) {
		for (size_t off = 0; off < lens[i]; off += PMCK_GPU_SNAP_PIECE) {
			if (end == g->ncopies)
				return pmck__err(-EINVAL, "GPU path: snapshot lists full (%zu pieces): "
						"a source snapshotted twice in one checkpoint?", g->ncopies);
			size_t len = lens[i] - off < PMCK_GPU_SNAP_PIECE ? lens[i] - off :
					PMCK_GPU_SNAP_PIECE;
			g->copies_host[end++] = {(const char *)srcs[i] + off,
					g->snapshot + offs[i] + off, len};
		}
	}
	DEVICE_SCOPE(g);
	g->copies_used = end;
	if (end > first) {
		/*
		 * Two calls and a launch for the whole list, whatever its length.
		 * A GPT-2 medium state is 1175 tensors in 443 layers: with a
		 * cudaMemcpyBatchAsync per layer, the checkpoint call every 10th
		 * step (state_dict() and save_async) took 40 ms on the training
		 * thread (H100, docs/gpu.md), with this 16 ms.  The list's part
		 * of the pinned buffer is not rewritten before copies_read
		 * (snapshot_begin); the sources are read in stream order, after
		 * the ready events already waited for.
		 */
		CUDA_TRY(cudaMemcpyAsync(g->copies_dev + first, g->copies_host + first,
				(end - first) * sizeof(struct snap_copy), cudaMemcpyHostToDevice,
				g->snap_stream));
		CUDA_TRY(cudaEventRecord(g->copies_read, g->snap_stream));
		size_t blocks = end - first < (size_t)g->snap_blocks ? end - first :
				(size_t)g->snap_blocks;
		LAUNCH(copy_snapshot_pieces, (unsigned)blocks, 512, g->snap_stream,
				g->copies_dev + first, end - first);
	}
	CUDA_TRY(cudaEventRecord(g->snapped[event], g->snap_stream));
	return 0;
}

/*
 * Loads this library's kernels into the current device's context.  CUDA
 * loads a kernel at its first launch (lazy loading, Linux's default since
 * CUDA 12.2), and that load may synchronise the context: the first snapshot
 * of a process waited for all the work queued on the GPU, the framework's
 * included (on an H200, a snapshot on wait held up behind 300 ms of a side
 * stream's work; tests/gpu_pipeline.c).  Called at open, which registers
 * the region and allocates anyway, so no later copy, snapshot or hash waits
 * for it.  Once per process and device the driver does the work; after it
 * each call only looks the kernels up.
 */
static int
preload_kernels(void)
{
	const void *kernels[] = {(const void *)copy_to_host_memory,
			(const void *)copy_snapshot_pieces, pmck__gpu_hash_kernel()};
	for (size_t i = 0; i < sizeof(kernels) / sizeof(kernels[0]); i++) {
		cudaFuncAttributes attr;
		cudaError_t e = cudaFuncGetAttributes(&attr, kernels[i]);
		/*
		 * A GPU this build has no code for (before sm_90): the copies
		 * by DMA still work there, and a launch says so itself.
		 */
		if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidDeviceFunction) {
			(void)cudaGetLastError();
			continue;
		}
		if (e != cudaSuccess)
			return cuda_fail(e, "cudaFuncGetAttributes (loading the library's kernels)");
	}
	return 0;
}

extern "C" int
pmck__gpu_hash_open(struct pmck_gpu *g, size_t nchunks, unsigned nlayers)
{
	DEVICE_SCOPE(g);
	/*
	 * Without the kernel's code for this device (a GPU before sm_90, which
	 * preload_kernels lets the DMA copies run on), every hash would fail at
	 * its launch, and so every checkpoint: refused now, by name.
	 */
	cudaFuncAttributes attr;
	cudaError_t e = cudaFuncGetAttributes(&attr, pmck__gpu_hash_kernel());
	if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidDeviceFunction) {
		int major = 0, minor = 0;
		(void)cudaGetLastError();
		(void)cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, g->device);
		(void)cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, g->device);
		return pmck__err(-ENOTSUP, "hashing on the GPU: this build has no code for CUDA "
				"device %d (compute capability %d.%d; built for 9.0 and later): "
				"PMCK_PIPELINE_GPU_HASH_HOST hashes on the host", g->device, major,
				minor);
	}
	if (e != cudaSuccess)
		return cuda_fail(e, "cudaFuncGetAttributes (the hash kernel)");
	g->nhash = nchunks ? nchunks : 1;
	CUDA_TRY(cudaHostAlloc((void **)&g->hash_list, g->nhash * sizeof(*g->hash_list),
			cudaHostAllocMapped | cudaHostAllocPortable));
	CUDA_TRY(cudaHostGetDevicePointer((void **)&g->hash_list_dev, g->hash_list, 0));
	CUDA_TRY(cudaHostAlloc((void **)&g->hash_results, g->nhash * sizeof(*g->hash_results),
			cudaHostAllocMapped | cudaHostAllocPortable));
	CUDA_TRY(cudaHostGetDevicePointer((void **)&g->hash_results_dev, g->hash_results, 0));
	for (unsigned k = 0; k < HASH_STREAMS; k++)
		CUDA_TRY(cudaStreamCreateWithFlags(&g->hash_stream[k], cudaStreamNonBlocking));
	int sms = 0;
	CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, g->device));
	g->hash_blocks = 2 * (sms > 0 ? sms : 1); /* 256 threads: 8 warps a block */
	size_t made = 0;
	int ret = make_events(g, &g->hashed, nlayers, &made);
	g->nhashed = (unsigned)made;
	return ret;
}

extern "C" int
pmck__gpu_hash_begin(struct pmck_gpu *g)
{
	DEVICE_SCOPE(g);
	/* Normally long done: the last checkpoint's writers waited for every put's hashes. */
	for (unsigned k = 0; k < HASH_STREAMS; k++)
		CUDA_TRY(cudaStreamSynchronize(g->hash_stream[k]));
	g->hash_used = 0;
	return 0;
}

extern "C" int
pmck__gpu_hash(struct pmck_gpu *g, unsigned event, unsigned hashed, int from_snapshot,
		size_t n, const void *const *srcs, const size_t *lens, const size_t *slots)
{
	size_t first = g->hash_used;

	if (event >= g->nhashed || hashed >= g->nhashed || n > g->nhash - first)
		return pmck__err(-EINVAL, "GPU path: %zu chunks to hash at events %u, %u (%zu of "
				"%zu used): a tensor put twice in one checkpoint?", n, event, hashed,
				first, g->nhash);
	for (size_t i = 0; i < n; i++) {
		if (slots[i] >= g->nhash)
			return pmck__err(-EINVAL, "GPU path: chunk %zu to hash in slot %zu of %zu", i,
					slots[i], g->nhash);
		g->hash_list[first + i] = {(const uint64_t *)srcs[i], lens[i],
				g->hash_results_dev + slots[i]};
	}
	DEVICE_SCOPE(g);
	g->hash_used += n;
	cudaStream_t st = g->hash_stream[event % HASH_STREAMS];
	/* On the GPU: after the work that produced the sources (G: after their snapshot). */
	CUDA_TRY(cudaStreamWaitEvent(st, from_snapshot ? g->snapped[event] : g->ready[event], 0));
	if (n) {
		int ret = pmck__gpu_hash_launch(g->hash_list_dev + first, n, (unsigned)g->hash_blocks,
				st);
		if (ret)
			return ret;
	}
	CUDA_TRY(cudaEventRecord(g->hashed[hashed], st));
	return 0;
}

extern "C" int
pmck__gpu_hash_wait(struct pmck_gpu *g, unsigned event)
{
	if (event >= g->nhashed)
		return pmck__err(-EINVAL, "GPU path: hashed event %u of %u", event, g->nhashed);
	CUDA_TRY(cudaEventSynchronize(g->hashed[event]));
	return 0;
}

extern "C" uint64_t
pmck__gpu_hash_result(const struct pmck_gpu *g, size_t slot)
{
	return g->hash_results[slot];
}
