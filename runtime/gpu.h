/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * gpu.h -- the runtime's internal interface to CUDA (runtime/gpu.cu), or
 * to its absence (runtime/gpu_none.c when built without CUDA).
 * Every call returns 0 or -ENODEV / -EIO with a message.
 */
#ifndef PMCK_GPU_H
#define PMCK_GPU_H 1

#include <stddef.h>
#include <stdint.h>

#include "pmckpt.h"
#include "xxh3_long.h"

struct pmck_gpu;
struct pmck_gpu_stream;

/* The CUDA runtime version the library was built against (CUDART_VERSION); 0: without CUDA. */
int pmck__gpu_build_version(void);

/*
 * Stream discipline (../shared/STYLE.md, docs/gpu.md): every copy runs on
 * a stream of the library's own, made cudaStreamNonBlocking, so it never
 * waits for the framework's work on the legacy default stream nor holds
 * it up.  A layer's copies wait on the GPU for the layer's ready event,
 * recorded on the caller's stream when the layer is put; a caller that
 * wants to change the sources waits, on its stream, for the copies' done
 * events.  The host waits only for what it must persist.
 */

/*
 * Maps the whole region into device `device`'s address space
 * (cudaHostRegister Mapped|Portable), and makes nlayers ready events and a
 * done event per job (njobs: the most jobs a checkpoint queues).  With
 * snapshot_bytes > 0 also reserves that much device memory, a snapshot
 * stream, nlayers snapshot events and copy lists for snapshots of at most
 * nsources sources in all per checkpoint (G: the tensors; snapshots on
 * wait: the jobs).  The calling thread's current device is left as it was.
 *
 * Events: a put of one or more layers uses one ready (and snapshot) event,
 * the one of its first layer's dense index; the pipeline remembers which
 * event each layer's copies wait for.
 *
 * flags: PMCK_GPU_BLOCKING_WAITS makes every event g and its writer streams
 * create cudaEventBlockingSync, so that a thread waiting for one (a writer
 * for its sub-copies or hashes) sleeps until the GPU signals it.  Without
 * it, with one context on a machine of many CPUs, the CUDA runtime spins:
 * each waiting writer keeps a CPU busy, beside the framework's threads.
 */
#define PMCK_GPU_BLOCKING_WAITS 1u
int pmck__gpu_open(struct pma_region *r, int device, size_t snapshot_bytes, size_t nsources,
		unsigned nlayers, size_t njobs, unsigned flags, struct pmck_gpu **out);
/* Unregisters the region and frees everything. */
void pmck__gpu_close(struct pmck_gpu **g);

/*
 * A writer thread's stream (non-blocking) with its events; makes g's
 * device current on the calling thread.  On failure *out may be set
 * anyway: pmck__gpu_stream_delete it.
 */
int pmck__gpu_stream_new(struct pmck_gpu *g, struct pmck_gpu_stream **out);
void pmck__gpu_stream_delete(struct pmck_gpu_stream **ws);

/*
 * Records ready event `event` on `stream` (a cudaStream_t of g's device;
 * NULL: its legacy default stream): the copies of the layers put run after
 * the work queued there so far.  Strategy G's snapshot stream waits for it
 * too.  Called on the caller's thread; its current device is restored.
 */
int pmck__gpu_layer_ready(struct pmck_gpu *g, unsigned event, void *stream);

/*
 * Bytes per sub-copy by default: a job's sub-copies are all in flight at
 * once, and each is hashed as it lands.  The DMA strategies (direct, and
 * the snapshot's copy out) take PMCK_GPU_SUB_DMA: in one sweep on an H200
 * (pmck-pipebench, 1/2/4/8 MiB) direct reached 0.95/0.99/1.01/1.00 of a
 * pinned D2H and the snapshot 0.91/0.94/0.95/0.95, while the copy kernel
 * fell from 0.98 at 2 MiB to 0.95 at 4.  $PMCK_GPU_SUB_MIB (1 to 8) sets
 * another size for the pipelines made from then on (pipeline.c).
 */
#define PMCK_GPU_SUB ((size_t)2 << 20)
#define PMCK_GPU_SUB_DMA ((size_t)4 << 20)
#define PMCK_GPU_MAX_SUB 8
/* Strategy G: the snapshot kernel's unit of work per thread block. */
#define PMCK_GPU_SNAP_PIECE ((size_t)1 << 20)

enum pmck_gpu_copy {
	PMCK_GPU_DMA,     /* into the region, by cudaMemcpyAsync through its device pointer */
	PMCK_GPU_KERNEL,  /* into the region, by the copy kernel (ends with a system fence) */
	PMCK_GPU_TO_HOST, /* into pinned host memory (strategy C's staging buffer) */
};

/*
 * Enqueues, on ws, the copy of len bytes of device memory at src to dst
 * (in the region, or a pinned host buffer for PMCK_GPU_TO_HOST) after
 * ready event `event` (from_snapshot: after that snapshot event; src is
 * then in the snapshot), in sub-copies of `sub` bytes, each followed by an
 * event; then records job's done event.  Returns at once; *nsub: the
 * sub-copies enqueued.  len <= sub * PMCK_GPU_MAX_SUB.
 */
int pmck__gpu_copy_start(struct pmck_gpu_stream *ws, unsigned event, int from_snapshot,
		enum pmck_gpu_copy how, void *dst, const void *src, size_t len, size_t sub,
		size_t job, unsigned *nsub);
/* Waits (host) until sub-copy i of the last copy_start has landed. */
int pmck__gpu_copy_wait(struct pmck_gpu_stream *ws, unsigned i);

/*
 * Makes `stream` (NULL: the legacy default stream) wait on the GPU for
 * jobs [first, first + n), with snapshot_event >= 0 for that snapshot
 * event, and with hash_event >= 0 for that hashed event (device hashing
 * of the sources: a kernel of a put): from then on work queued there may
 * change the sources.
 */
int pmck__gpu_caller_wait(struct pmck_gpu *g, void *stream, int snapshot_event, int hash_event,
		size_t first, size_t n);

/* Pinned host buffers for strategy C. */
int pmck__gpu_host_alloc(struct pmck_gpu *g, size_t len, void **out);
void pmck__gpu_host_free(struct pmck_gpu *g, void *p);

/*
 * At the begin of a checkpoint that may snapshot: the snapshot's copy lists are
 * reused from the start, once the last one has reached the device (at
 * once, unless a checkpoint failed before its writers copied from its
 * snapshot; an event never recorded is complete).
 */
int pmck__gpu_snapshot_begin(struct pmck_gpu *g);

/*
 * Strategy G, and snapshots on wait (a wait's untaken jobs, pipeline.c):
 * enqueues on the snapshot stream (after the ready events
 * waited for so far) the device-to-device copies of n sources, srcs[i] of
 * lens[i] bytes, into the snapshot buffer at offset offs[i]: the list, in
 * pieces of PMCK_GPU_SNAP_PIECE, is copied to the device and one kernel
 * copies every piece; then records snapshot event `event`.  A checkpoint
 * snapshots each source once at most (-EINVAL when its lists are full).
 * Called on the caller's thread; its current device is restored.
 */
int pmck__gpu_snapshot(struct pmck_gpu *g, unsigned event, size_t n, const uint64_t *offs,
		const void *const *srcs, const size_t *lens);

/* Strategy G: the snapshot buffer's device address (a tensor at offset o lands at + o). */
const char *pmck__gpu_snapshot_base(const struct pmck_gpu *g);

/*
 * Device hashing (PMCK_PIPELINE_GPU_HASH_DEVICE or $PMCK_GPU_HASH=device,
 * pipeline.c): the XXH3-64 of each hash chunk is computed on the GPU, from
 * the source (G: from the snapshot), by a few kernels per put, each over
 * whole layers (xxh3_long.h: a warp per chunk), instead of by a writer from
 * the bytes that landed.  The writers then only flush what lands.  A chunk
 * goes to the GPU if it takes XXH3's long path and starts 8-aligned; the
 * writers hash the others (a 4-byte tensor, a view at an odd offset) as
 * before.
 */
static inline int
pmck__gpu_hashable(const void *src, size_t len)
{
	return len >= PMCK_XXH3_LONG_MIN && (uintptr_t)src % 8 == 0;
}

/*
 * Makes room for device hashing: nchunks results (slot = the store's chunk
 * index), the chunk lists, and a hashed event per layer (nlayers: a
 * kernel is named by its first layer).  Once, after pmck__gpu_open.
 * -ENOTSUP if this build has no code of the hash kernel for the device
 * (a GPU before sm_90), where the copies by DMA still work.
 */
int pmck__gpu_hash_open(struct pmck_gpu *g, size_t nchunks, unsigned nlayers);

/*
 * At a checkpoint's begin: the lists and results are reused once the hash
 * kernels queued so far have run (at once, unless a checkpoint failed
 * before its writers waited for them).
 */
int pmck__gpu_hash_begin(struct pmck_gpu *g);

/*
 * Enqueues the hashes of n chunks, srcs[i] of lens[i] bytes (each
 * pmck__gpu_hashable), into result slots slots[i], after ready event
 * `event` (from_snapshot: after snapshot event `event`, the snapshot
 * copies), then records hashed event `hashed` (also with n == 0).  The
 * calls with the same `event` (a put's) run in order on one stream, so
 * their last hashed event stands for all of them.  Called on the caller's
 * thread; its current device is restored.
 */
int pmck__gpu_hash(struct pmck_gpu *g, unsigned event, unsigned hashed, int from_snapshot,
		size_t n, const void *const *srcs, const size_t *lens, const size_t *slots);

/* Waits (host) for hashed event `event`; the results of its call are then readable. */
int pmck__gpu_hash_wait(struct pmck_gpu *g, unsigned event);

/* The hash of result slot `slot`, once its kernel's hashed event has been waited for. */
uint64_t pmck__gpu_hash_result(const struct pmck_gpu *g, size_t slot);

#endif
