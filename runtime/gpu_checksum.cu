/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * gpu_checksum.cu -- pmckpt's checksum of device memory, on the GPU: the
 * hash kernel (device hashing of the pipeline, gpu.cu, launches it too)
 * and pmck_gpu_hasher, with which a load verifies the copies it made to
 * the device (pmck_store_recover_given) instead of hashing the region on
 * the CPU.
 *
 * A hasher queues its kernels on a stream of its own (non-blocking), after
 * an event recorded on the caller's stream: it waits on the GPU for the
 * copies that fill the buffers, and the host waits only in
 * pmck_gpu_hasher_wait.  The chunk lists and the chunks' values live in
 * mapped pinned memory: the kernel reads the one and writes the other in
 * place, so a wait needs no copy back; the host then combines each
 * buffer's chunk values (pmck__combine), as pmck_tensor_checksum does.
 */
#include <stdlib.h>
#include <string.h>

#include "gpu_cuda.h"
#include "xxh3_short.h"
extern "C" {
/* checksum.c (internal.h is C only) */
const uint8_t *pmck__xxh3_secret(void);
uint64_t pmck__combine(const uint64_t *chunk_hashes, size_t n);
}

static size_t
nchunks(uint64_t len)
{
	return (size_t)((len + PMCK_HASH_CHUNK - 1) / PMCK_HASH_CHUNK);
}

/* XXH3's secret, passed to the hash kernel by value (kernel parameters live in constant memory). */
struct xxh3_secret {
	uint8_t b[PMCK_XXH3_SECRET_SIZE];
};

/*
 * Device hashing: a warp per chunk, in grid-stride order.  Each block of
 * 1 KiB is 128 words: thread t loads words t, t + 32, t + 64, t + 96
 * (four coalesced 256-byte loads), all of lane t % 8, and their sums are
 * combined by lane with three shuffles (xxh3_long.h says why that is XXH3);
 * every thread of a lane then holds that lane's accumulator.  The keys
 * depend on the thread only, so they are read from the secret once.  A
 * chunk of at most 240 bytes (a tensor's short last one) takes XXH3's
 * short path on one thread (xxh3_short.h).
 */
#define FULL_WARP 0xffffffffu

static __device__ __forceinline__ uint64_t
lane_sum(uint64_t prod, uint64_t plain)
{
	uint64_t x = prod + __shfl_xor_sync(FULL_WARP, plain, 1); /* lane ^ 1's words */
	x += __shfl_xor_sync(FULL_WARP, x, 8);
	return x + __shfl_xor_sync(FULL_WARP, x, 16);
}

__global__ void
hash_chunks(const struct pmck_hash_chunk *list, size_t n, struct xxh3_secret secret)
{
	const unsigned t = threadIdx.x % 32, lane = t % 8;
	const size_t warps = (size_t)gridDim.x * blockDim.x / 32;
	const uint8_t *sec = secret.b;
	uint64_t key[4];

	for (unsigned k = 0; k < 4; k++) /* word t + 32k: stripe t / 8 + 4k, lane */
		key[k] = pmck_xxh3_read64(sec + 8 * (t / 8 + 4 * k + lane));
	const uint64_t scramble = pmck_xxh3_read64(sec + PMCK_XXH3_SCRAMBLE_KEY + 8 * lane);
	const uint64_t last_key = pmck_xxh3_read64(sec + PMCK_XXH3_LAST_KEY + 8 * lane);

	for (size_t c = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; c < n; c += warps) {
		const uint64_t *p = list[c].src;
		const uint64_t len = list[c].len;
		if (len < PMCK_XXH3_LONG_MIN) { /* the whole warp takes this branch: one len */
			if (t == 0)
				*list[c].out = pmck_xxh3_short((const uint8_t *)p, len, sec);
			continue;
		}
		const uint64_t nb = pmck_xxh3_blocks(len);
		uint64_t acc = pmck_xxh3_init_acc(lane);
#pragma unroll 4
		for (uint64_t b = 0; b < nb; b++) {
			const uint64_t *w = p + b * PMCK_XXH3_WORDS + t;
			uint64_t w0 = w[0], w1 = w[32], w2 = w[64], w3 = w[96];
			uint64_t prod = pmck_xxh3_product_key(w0, key[0]) +
					pmck_xxh3_product_key(w1, key[1]) +
					pmck_xxh3_product_key(w2, key[2]) +
					pmck_xxh3_product_key(w3, key[3]);
			acc = pmck_xxh3_scramble_key(acc + lane_sum(prod, w0 + w1 + w2 + w3), scramble);
		}
		/* The partial block's stripes, unscrambled. */
		const uint64_t *w = p + nb * PMCK_XXH3_WORDS;
		unsigned nw = 8 * pmck_xxh3_tail_stripes(len);
		uint64_t prod = 0, plain = 0;
		for (unsigned k = 0; k < 4; k++)
			if (t + 32 * k < nw) {
				prod += pmck_xxh3_product_key(w[t + 32 * k], key[k]);
				plain += w[t + 32 * k];
			}
		acc += lane_sum(prod, plain);
		/* The last 64 bytes (any alignment), threads 0..7. */
		prod = plain = 0;
		if (t < 8) {
			plain = pmck_xxh3_read64((const uint8_t *)p + len - PMCK_XXH3_STRIPE + 8 * t);
			prod = pmck_xxh3_product_key(plain, last_key);
		}
		acc += lane_sum(prod, plain);
		uint64_t all[8];
		for (unsigned i = 0; i < 8; i++)
			all[i] = __shfl_sync(FULL_WARP, acc, i);
		if (t == 0)
			*list[c].out = pmck_xxh3_merge(all, len, sec);
	}
}

const void *
pmck__gpu_hash_kernel(void)
{
	return (const void *)hash_chunks;
}

int
pmck__gpu_hash_launch(const struct pmck_hash_chunk *list, size_t n, unsigned max_blocks,
		cudaStream_t stream)
{
	struct xxh3_secret secret;

	if (!n)
		return 0;
	if (!max_blocks) {
		int dev = 0, sms = 0;
		CUDA_TRY(cudaGetDevice(&dev));
		CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
		max_blocks = 2 * (sms > 0 ? (unsigned)sms : 1); /* 256 threads: 8 warps a block */
	}
	memcpy(secret.b, pmck__xxh3_secret(), sizeof(secret.b));
	size_t blocks = (n + 7) / 8 < max_blocks ? (n + 7) / 8 : max_blocks;
	LAUNCH(hash_chunks, (unsigned)blocks, 256, stream, list, n, secret);
	return 0;
}

/* ------------------------------------------------------------------ pmck_gpu_hasher */

struct pmck_gpu_hasher {
	int device;
	unsigned blocks;                /* the kernel's grid at most: two blocks per SM */
	cudaStream_t stream;            /* its own, non-blocking */
	cudaEvent_t after;              /* recorded on the caller's stream at each add */
	struct pmck_hash_chunk *list, *list_dev; /* mapped pinned: chunks queued since the wait */
	uint64_t *values, *values_dev;  /* mapped pinned: their XXH3 values */
	size_t cap, used;               /* chunks: room, queued */
	size_t *nchunks;                /* per buffer added since the wait: its chunks */
	size_t nbufs, bufs_cap;
	int failed;                     /* an add failed after queueing work: the next wait says so */
	int unsynced;                   /* work queued since the stream was last synchronised */
};

/* Waits for the hasher's stream; after it no kernel reads its lists. */
static int
sync_stream(struct pmck_gpu_hasher *h, const char *why)
{
	if (!h->unsynced)
		return 0;
	cudaError_t e = cudaStreamSynchronize(h->stream);
	if (e != cudaSuccess)
		return cuda_fail(e, why);
	h->unsynced = 0;
	return 0;
}

/* Room for `chunks` chunks; lists in use are first waited for, then carried over. */
static int
grow_chunks(struct pmck_gpu_hasher *h, size_t chunks)
{
	struct pmck_hash_chunk *list = NULL, *list_dev = NULL;
	uint64_t *values = NULL, *values_dev = NULL;
	size_t cap = h->cap ? h->cap : 1024;

	if (chunks > SIZE_MAX / 2 / sizeof(*list))
		return pmck__err(-ENOMEM, "pmck_gpu_hasher: room for %zu chunks is too much", chunks);
	while (cap < chunks)
		cap *= 2;
	cudaError_t e = cudaHostAlloc((void **)&list, cap * sizeof(*list),
			cudaHostAllocMapped | cudaHostAllocPortable);
	if (e == cudaSuccess)
		e = cudaHostAlloc((void **)&values, cap * sizeof(*values),
				cudaHostAllocMapped | cudaHostAllocPortable);
	if (e == cudaSuccess)
		e = cudaHostGetDevicePointer((void **)&list_dev, list, 0);
	if (e == cudaSuccess)
		e = cudaHostGetDevicePointer((void **)&values_dev, values, 0);
	int ret = e == cudaSuccess ? 0 : cuda_fail(e, "allocating the hasher's lists");
	if (!ret) /* the kernels queued so far read the old lists and write the old values */
		ret = sync_stream(h, "waiting for the hashes before making room");
	if (ret) {
		cudaFreeHost(list);
		cudaFreeHost(values);
		return ret;
	}
	/* The queued kernels have run: their values move, their list entries are done with. */
	if (h->used)
		memcpy(values, h->values, h->used * sizeof(*values));
	cudaFreeHost(h->list);
	cudaFreeHost(h->values);
	h->list = list;
	h->list_dev = list_dev;
	h->values = values;
	h->values_dev = values_dev;
	h->cap = cap;
	return 0;
}

static int
grow_bufs(struct pmck_gpu_hasher *h, size_t n)
{
	if (h->nbufs + n <= h->bufs_cap)
		return 0;
	size_t cap = h->bufs_cap ? h->bufs_cap : 256;
	while (cap < h->nbufs + n)
		cap *= 2;
	size_t *p = (size_t *)realloc(h->nchunks, cap * sizeof(*p));
	if (!p)
		return pmck__err(-ENOMEM, "out of memory");
	h->nchunks = p;
	h->bufs_cap = cap;
	return 0;
}

extern "C" int
pmck_gpu_hasher_new(int device, struct pmck_gpu_hasher **out)
{
	if (!out)
		return pmck__err(-EINVAL, "pmck_gpu_hasher_new: out is NULL");
	*out = NULL;
	int ret = pmck_gpu_available(device);
	if (ret)
		return ret;
	struct pmck_gpu_hasher *h = (struct pmck_gpu_hasher *)calloc(1, sizeof(*h));
	if (!h)
		return pmck__err(-ENOMEM, "out of memory");
	h->device = device;
	device_scope scope_(device);
	int sms = 0;
	cudaError_t e = scope_.err;
	if (e == cudaSuccess)
		e = cudaStreamCreateWithFlags(&h->stream, cudaStreamNonBlocking);
	if (e == cudaSuccess)
		e = cudaEventCreateWithFlags(&h->after, cudaEventDisableTiming);
	if (e == cudaSuccess)
		e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
	if (e != cudaSuccess)
		ret = cuda_fail(e, "making the hasher's stream and event");
	else
		ret = grow_chunks(h, 1);
	if (!ret) {
		/* Loaded now, not at the first add: a kernel's lazy load may synchronise the context. */
		cudaFuncAttributes attr;
		e = cudaFuncGetAttributes(&attr, pmck__gpu_hash_kernel());
		if (e != cudaSuccess)
			ret = cuda_fail(e, "loading the hash kernel");
	}
	if (ret) {
		pmck_gpu_hasher_delete(&h);
		return ret;
	}
	h->blocks = 2 * (sms > 0 ? (unsigned)sms : 1);
	*out = h;
	return 0;
}

extern "C" int
pmck_gpu_hasher_add(struct pmck_gpu_hasher *h, void *stream, size_t n, const void *const *srcs,
		const uint64_t *lens)
{
	if (!h || (n && (!srcs || !lens)))
		return pmck__err(-EINVAL, "pmck_gpu_hasher_add: %s", !h ? "no hasher" :
				"no buffers");
	if (h->failed)
		return pmck__err(-EIO, "pmck_gpu_hasher_add: an earlier add failed (CUDA): the "
				"next pmck_gpu_hasher_wait drops its queue");
	DEVICE_SCOPE(h);
	size_t chunks = 0;
	for (size_t i = 0; i < n; i++) {
		if (!lens[i])
			continue;
		cudaPointerAttributes a;
		cudaError_t e = cudaPointerGetAttributes(&a, srcs[i]);
		if (e != cudaSuccess)
			(void)cudaGetLastError(); /* an address CUDA does not know: said below */
		if ((uintptr_t)srcs[i] % 8 || e != cudaSuccess ||
		    (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged) ||
		    a.device != h->device)
			return pmck__err(-EINVAL, "pmck_gpu_hasher_add: buffer %zu at %p (%llu bytes) "
					"%s", i, srcs[i], (unsigned long long)lens[i],
					(uintptr_t)srcs[i] % 8 ? "does not start 8-byte aligned" :
					"is not device memory of the hasher's device");
		chunks += nchunks(lens[i]);
	}
	int ret = grow_bufs(h, n);
	if (!ret && h->used + chunks > h->cap)
		ret = grow_chunks(h, h->used + chunks);
	if (ret) {
		if (ret != -ENOMEM) /* the stream's state is unknown: the queue is lost */
			h->failed = ret;
		return ret;
	}
	size_t first = h->used;
	for (size_t i = 0; i < n; i++) {
		uint64_t len = lens[i];
		h->nchunks[h->nbufs + i] = nchunks(len);
		for (uint64_t off = 0; off < len; off += PMCK_HASH_CHUNK) {
			uint64_t c = len - off < PMCK_HASH_CHUNK ? len - off : PMCK_HASH_CHUNK;
			h->list[h->used] = {(const uint64_t *)((const char *)srcs[i] + off), c,
					h->values_dev + h->used};
			h->used++;
		}
	}
	/* On the GPU: after what the caller queued on its stream, its copies into the buffers. */
	cudaError_t e = cudaEventRecord(h->after, caller_stream(stream));
	if (e == cudaSuccess)
		e = cudaStreamWaitEvent(h->stream, h->after, 0);
	if (e == cudaSuccess)
		h->unsynced = 1; /* the stream may now wait for the caller's */
	ret = e == cudaSuccess ? pmck__gpu_hash_launch(h->list_dev + first, h->used - first,
			h->blocks, h->stream) : cuda_fail(e, "ordering the hashes after the caller's stream");
	if (ret) {
		h->used = first; /* no kernel of this call reads its entries */
		h->failed = ret;
		return ret;
	}
	h->nbufs += n;
	return 0;
}

extern "C" int
pmck_gpu_hasher_reserve(struct pmck_gpu_hasher *h, size_t chunks)
{
	if (!h)
		return pmck__err(-EINVAL, "pmck_gpu_hasher_reserve: no hasher");
	if (chunks <= h->cap)
		return 0;
	DEVICE_SCOPE(h);
	return grow_chunks(h, chunks);
}

extern "C" int
pmck_gpu_hasher_wait(struct pmck_gpu_hasher *h, uint64_t *out, size_t n)
{
	if (!h || (out && n != h->nbufs) || (!out && n))
		return pmck__err(-EINVAL, "pmck_gpu_hasher_wait: %s", !h ? "no hasher" :
				!out && n ? "no room for the checksums" : "not the number of buffers added");
	int ret;
	{
		/* Synchronised even if the device could not be made current: a stream is its device's. */
		device_scope scope_(h->device);
		ret = sync_stream(h, "waiting for the hashes");
		if (!ret && scope_.err != cudaSuccess)
			ret = cuda_fail(scope_.err, "making the hasher's device current");
	}
	if (!ret && h->failed)
		ret = pmck__err(-EIO, "pmck_gpu_hasher_wait: an add since the last wait failed "
				"(CUDA): its hashes and those before it are dropped");
	if (!ret && out)
		for (size_t i = 0, c = 0; i < h->nbufs; c += h->nchunks[i++])
			out[i] = pmck__combine(&h->values[c], h->nchunks[i]);
	/*
	 * Empty; the lists are reused only once the stream is synchronised
	 * (unsynced): after a failed synchronisation the adds refuse until a
	 * wait has synchronised it.
	 */
	h->used = h->nbufs = 0;
	h->failed = h->unsynced ? -EIO : 0;
	return ret;
}

extern "C" int
pmck_gpu_hasher_fill(void *hasher, uint64_t *csum, size_t n)
{
	return pmck_gpu_hasher_wait((struct pmck_gpu_hasher *)hasher, csum, n);
}

extern "C" void
pmck_gpu_hasher_delete(struct pmck_gpu_hasher **hp)
{
	struct pmck_gpu_hasher *h = hp ? *hp : NULL;

	if (!h)
		return;
	{
		device_scope scope_(h->device);
		if (h->stream) {
			cudaStreamSynchronize(h->stream); /* no kernel left reading the lists */
			cudaStreamDestroy(h->stream);
		}
		if (h->after)
			cudaEventDestroy(h->after);
		cudaFreeHost(h->list);
		cudaFreeHost(h->values);
		(void)cudaGetLastError();
	}
	free(h->nchunks);
	free(h);
	*hp = NULL;
}
