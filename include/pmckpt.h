/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * pmckpt.h -- two-slot checkpoint stores on persistent memory.
 *
 * A store lives in a pmalloc pool under a name.  Its layout (the tensors,
 * their dtypes, shapes and layers) is declared once at creation, like a
 * cached save plan.  On media a store is three allocations:
 *
 *   NAME.meta   header, tensor map (name, dtype, shape, layer, offset,
 *               size), and per slot: a seal word, the step and one
 *               checksum per tensor;
 *   NAME.data0  slot 0's tensor data, tensors contiguous in layer order;
 *   NAME.data1  slot 1's tensor data, same placement.
 *
 * Every tensor of 128 bytes or more starts on a 128-byte boundary; smaller
 * ones are packed after each other at their element alignment.
 *
 * A checkpoint is written into the slot that does not hold the newest
 * complete checkpoint (pmck_store_begin), tensor by tensor
 * (pmck_ckpt_write: a non-temporal copy fused with its XXH3 checksum) and
 * published by pmck_ckpt_commit with one atomic 8-byte store, so that a
 * crash at any moment leaves the previous complete checkpoint intact.
 * pmck_store_recover returns the newest checkpoint whose checksums verify.
 *
 * Errors: negative errno values or PMCK_E_* codes; pma_errormsg() /
 * pmck_errormsg() describe the last failure of the calling thread.
 *
 * Sharing: a store is as shared as its region (pma_region_open): one
 * process writes it, or any number read it.  A second writer fails to open
 * the region with PMA_E_BUSY.  On a read-only region (PMA_REGION_RDONLY)
 * a store opens, recovers and reads; every change (create, begin,
 * discard, destroy, import) fails with -EROFS.
 *
 * Thread safety: one checkpoint may be in flight per store.  Writes of
 * different tensors (or of disjoint chunk-aligned ranges of one tensor) of
 * the in-flight checkpoint may run concurrently; begin, commit, abort,
 * recover and close must not run concurrently with anything else on the
 * same store.
 */
#ifndef PMCKPT_H
#define PMCKPT_H 1

#include <stddef.h>
#include <stdint.h>

#include <pmalloc.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PMCK_E_NO_CHECKPOINT (-100101) /* nothing was ever saved here (a fresh start) */
#define PMCK_E_LAYOUT        (-100102) /* store exists with another layout */
#define PMCK_E_CORRUPT       (-100103) /* store metadata fails its checks */
#define PMCK_E_VERSION       (-100104) /* store of an unsupported version */
/*
 * Recovery found checkpoints (a sealed slot, a complete step of this
 * layout) but rejected every one of them: data was lost, and starting from
 * scratch is a decision for the caller, unlike PMCK_E_NO_CHECKPOINT.
 */
#define PMCK_E_NONE_USABLE   (-100105)
/*
 * The checkpoints to recover were written by a job of another world size:
 * refused (resharding is the Python/DCP layer's business).
 */
#define PMCK_E_WORLD_SIZE    (-100106)
#define PMCK_E_SOURCE_CHANGED (-100120) /* a source changed while it was written (torn) */

/* pmck_errormsg -- same buffer as pma_errormsg(): the calling thread's last failure. */
const char *pmck_errormsg(void);

/* Element types; names as in safetensors ("F32", "BF16", ...). */
enum pmck_dtype {
	PMCK_DTYPE_BYTES = 0, /* opaque bytes ("U8" in safetensors) */
	PMCK_DTYPE_BOOL,
	PMCK_DTYPE_U8,
	PMCK_DTYPE_I8,
	PMCK_DTYPE_I16,
	PMCK_DTYPE_U16,
	PMCK_DTYPE_F16,
	PMCK_DTYPE_BF16,
	PMCK_DTYPE_I32,
	PMCK_DTYPE_U32,
	PMCK_DTYPE_F32,
	PMCK_DTYPE_I64,
	PMCK_DTYPE_U64,
	PMCK_DTYPE_F64,
	PMCK_DTYPE_F8_E4M3,
	PMCK_DTYPE_F8_E5M2,
	PMCK_DTYPE_COUNT
};

/* Bytes per element (0 for an out-of-range dtype). */
size_t pmck_dtype_size(enum pmck_dtype d);
/* "F32", "BF16", ...; NULL for an out-of-range dtype. */
const char *pmck_dtype_name(enum pmck_dtype d);

#define PMCK_NAME_MAX 128 /* bytes of a tensor name, NUL included */
#define PMCK_MAX_DIMS 8
#define PMCK_ALIGN 128    /* placement boundary of tensors >= 128 bytes */
#define PMCK_HASH_CHUNK ((size_t)1 << 20) /* see pmck_ckpt_write_range */

/* One tensor of a layout, as declared by the caller. */
struct pmck_tensor_desc {
	const char *name;      /* unique in the layout, < PMCK_NAME_MAX bytes */
	enum pmck_dtype dtype;
	uint32_t ndim;         /* 0 (scalar) .. PMCK_MAX_DIMS */
	uint64_t shape[PMCK_MAX_DIMS];
	uint32_t layer;        /* tensors are placed by layer, then declaration order */
};

/* One tensor as placed in a store (read back with pmck_store_tensor). */
struct pmck_tensor_info {
	const char *name;
	enum pmck_dtype dtype;
	uint32_t ndim;
	uint64_t shape[PMCK_MAX_DIMS];
	uint32_t layer;
	uint64_t offset; /* from the start of a slot's data region */
	uint64_t nbytes;
};

struct pmck_store;
struct pmck_ckpt;

/*
 * pmck_store_create -- creates the store `name` in pool p with the layout
 * descs[0..n-1], placing the tensors (see the top of this file).  Both
 * slots start empty.  The tensor map is durable before the store becomes
 * visible under its name.
 * Errors: -EINVAL (empty layout, bad name, dtype, shape or duplicate tensor
 * name), -EEXIST (a store of that name exists), -ENOSPC, -ENOMEM, -EROFS
 * (read-only region).
 */
int pmck_store_create(struct pma_pool *p, const char *name,
		const struct pmck_tensor_desc *descs, size_t n,
		struct pmck_store **out);

/*
 * pmck_store_open -- opens the existing store `name`, checking its header
 * and tensor map.  Errors: -ENOENT, PMCK_E_CORRUPT, PMCK_E_VERSION, -ENOMEM.
 */
int pmck_store_open(struct pma_pool *p, const char *name, struct pmck_store **out);

/*
 * pmck_store_open_or_create -- opens `name` if it exists and its layout
 * equals descs (else PMCK_E_LAYOUT, and the store is left untouched), or
 * creates it.  Errors: those of open and create.
 */
int pmck_store_open_or_create(struct pma_pool *p, const char *name,
		const struct pmck_tensor_desc *descs, size_t n,
		struct pmck_store **out);

/* pmck_store_close -- frees *s (aborting an in-flight checkpoint) and sets it to NULL. */
void pmck_store_close(struct pmck_store **s);

/*
 * pmck_store_destroy -- frees the store's allocations in the pool.  The
 * meta allocation goes first, so a crash leaves no half store visible.
 * Errors: -ENOENT, -EROFS (read-only region).
 */
int pmck_store_destroy(struct pma_pool *p, const char *name);

size_t pmck_store_ntensors(const struct pmck_store *s);
/* Bytes of one slot's data region (tensor bytes plus alignment padding). */
uint64_t pmck_store_data_size(const struct pmck_store *s);
/* Sum of the tensors' bytes. */
uint64_t pmck_store_tensor_bytes(const struct pmck_store *s);
/* 64-bit hash of the layout; equal layouts have equal hashes. */
uint64_t pmck_store_layout_hash(const struct pmck_store *s);
struct pma_region *pmck_store_region(const struct pmck_store *s);

/* pmck_store_tensor -- fills *info for tensor idx.  Errors: -ERANGE. */
int pmck_store_tensor(const struct pmck_store *s, size_t idx,
		struct pmck_tensor_info *info);
/* pmck_store_find -- index of the tensor called name, or -ENOENT. */
int64_t pmck_store_find(const struct pmck_store *s, const char *name);

/* ------------------------------------------------------------ writing */

/*
 * pmck_store_begin -- starts checkpoint `step` in the slot that does not
 * hold the newest complete checkpoint, and first invalidates that slot
 * durably (its seal is cleared) so that a crash while it is being
 * overwritten can never make it look complete.  step must be larger than
 * the newest committed step and below INT64_MAX.
 * *out belongs to the store; it ends with commit or abort.
 * Errors: -EBUSY (a checkpoint is in flight), -EINVAL (step), -EROFS
 * (read-only region).
 */
int pmck_store_begin(struct pmck_store *s, uint64_t step, struct pmck_ckpt **out);

/*
 * pmck_ckpt_write -- copies all bytes of tensor idx from src (nbytes as
 * placed) into the slot with non-temporal stores, computing its checksum
 * on the way.  Durable at commit.  Errors: -ERANGE.
 */
int pmck_ckpt_write(struct pmck_ckpt *c, size_t idx, const void *src);

/*
 * pmck_ckpt_write_range -- like pmck_ckpt_write for bytes
 * [off, off+len) of tensor idx.  off must be a multiple of PMCK_HASH_CHUNK,
 * and len too unless the range ends the tensor: the checksum of a tensor is
 * built from one XXH3-64 per chunk (see docs/design.md), which lets several
 * threads write one tensor.  Ranges must not overlap; a tensor is complete
 * when all its bytes were written.  Errors: -ERANGE, -EINVAL (alignment).
 */
int pmck_ckpt_write_range(struct pmck_ckpt *c, size_t idx, uint64_t off,
		const void *src, uint64_t len);

/*
 * pmck_ckpt_write_all -- writes every tensor, srcs[i] for tensor i, with
 * `threads` threads (0: the CPUs of the caller's affinity, at most 8)
 * splitting large tensors by chunks.  Errors: those of pmck_ckpt_write_range (the
 * message is the failing worker's).
 */
int pmck_ckpt_write_all(struct pmck_ckpt *c, const void *const *srcs,
		unsigned threads);

/*
 * pmck_ckpt_tensor_ptr -- the address of tensor idx in the slot being
 * written, for writers that store directly (a GPU through a mapped
 * pointer).  After the bytes are in place, pmck_ckpt_mark_written makes
 * them durable and computes the checksum by reading them back.
 * Errors: NULL / -ERANGE.
 */
void *pmck_ckpt_tensor_ptr(struct pmck_ckpt *c, size_t idx);
int pmck_ckpt_mark_written(struct pmck_ckpt *c, size_t idx);

/* The step and slot of the checkpoint being written. */
uint64_t pmck_ckpt_step(const struct pmck_ckpt *c);
unsigned pmck_ckpt_slot(const struct pmck_ckpt *c);

/*
 * pmck_ckpt_commit -- publishes the checkpoint: (1) drains the tensor data
 * to durability, (2) writes and persists the step and the checksums,
 * (3) stores the slot's seal word (one aligned 8-byte store) and persists
 * it.  After commit or abort the handle is dead: every pmck_ckpt_* call on
 * it returns -EINVAL (NULL for tensor_ptr).  When it returns 0 the checkpoint survives any crash.  On error the
 * checkpoint stays in flight (abort it).
 * Errors: -EINVAL (a tensor was not fully written; the message names it).
 */
int pmck_ckpt_commit(struct pmck_ckpt *c);

/* pmck_ckpt_abort -- drops the in-flight checkpoint; the other slot is untouched. */
void pmck_ckpt_abort(struct pmck_ckpt *c);

/* ------------------------------------------------------------ reading */

/* What recovery found; filled by pmck_store_recover. */
struct pmck_recovery {
	uint64_t step;          /* step of the recovered checkpoint */
	unsigned slot;          /* its slot (0 or 1) */
	int rejected;           /* 1 if a newer sealed slot failed verification */
	unsigned rejected_slot;
	uint64_t rejected_step;
	char rejected_tensor[PMCK_NAME_MAX]; /* first tensor whose checksum failed */
};

/*
 * pmck_store_recover -- finds the newest sealed slot whose tensors all
 * match their checksums and makes it the store's readable checkpoint.  A
 * newer slot that fails verification is reported in *info (may be NULL)
 * and will be overwritten by the next begin.  Recovery writes nothing to
 * the region (a rejected slot is remembered in memory only), so it works
 * on a read-only region too.
 * Every slot it rejects is listed by pmck_store_rejections (below).
 * Errors: PMCK_E_NO_CHECKPOINT (no slot is sealed: nothing was ever
 * committed), PMCK_E_NONE_USABLE (sealed slots exist but none verifies:
 * data was lost), -EBUSY (a checkpoint is in flight).
 */
int pmck_store_recover(struct pmck_store *s, struct pmck_recovery *info);

/*
 * pmck_store_recover_into -- pmck_store_recover, copying the checkpoint out
 * as it is verified: each chunk of tensor i is hashed and then copied to
 * dst[i] while it is in the cache, on the caller's CPUs (up to 8), so
 * that the slot is read once rather than twice (recover, then
 * pmck_store_read).
 * dst: one entry per tensor of the store, in index order (pmck_store_find):
 * memory the caller owns, of the tensor's nbytes (ordinary memory, not this
 * store's region), or NULL for a tensor to verify without copying.  When
 * the newest sealed slot fails, the older one is verified and copied over
 * the same buffers.  On success dst[i] holds tensor i of the recovered
 * checkpoint, as pmck_store_read would give it; after an error the
 * buffers' contents are unspecified, so give it memory no one reads until
 * it returns 0 (new buffers, not a live copy of the state).  Otherwise as
 * pmck_store_recover: *info, the rejections, the readable checkpoint.
 * Errors: those of pmck_store_recover; -EINVAL (dst NULL).
 */
int pmck_store_recover_into(struct pmck_store *s, void *const *dst, struct pmck_recovery *info);

/*
 * Checksums the caller computed from its own copy of one slot's tensors,
 * for pmck_store_recover_given: a load onto a GPU copies the newest slot's
 * tensors to the device and hashes the copies there (pmck_gpu_hasher),
 * so the CPU need not read those bytes of the region at all.
 */
struct pmck_given_checksums {
	unsigned slot;      /* the slot the bytes were copied from (0 or 1) */
	uint64_t step;      /* the step that slot was sealed with when they were copied */
	size_t n;           /* how many tensors */
	const size_t *idx;  /* their indexes (pmck_store_find), each once */
	/*
	 * csum[j]: pmck_tensor_checksum of the copy of tensor idx[j], in the
	 * caller's memory.  With fill NULL the caller has filled it; else
	 * recovery calls fill(arg, csum, n) exactly once if it verifies that
	 * slot (n > 0), after hashing the slot's other tensors on the CPU (so
	 * that its pass overlaps the caller's copies and hashes), also where
	 * it then uses none of the values; never if it does not reach that
	 * slot (so the caller waits for its own hashes then).
	 * pmck_gpu_hasher_fill fits, with the hasher as arg.  fill returning
	 * nonzero: the checksums are not used, and recovery hashes those
	 * tensors of the region itself.
	 */
	uint64_t *csum;
	int (*fill)(void *arg, uint64_t *csum, size_t n);
	void *arg;
};

/*
 * pmck_store_recover_given -- pmck_store_recover_into (dst may be NULL:
 * pmck_store_recover), with the checksums of some tensors of one slot
 * given (*given), not computed from the region: when recovery verifies
 * slot given->slot, still sealed with given->step, each of those tensors
 * is compared with given->csum[j] instead of being hashed (one with a dst
 * of its own is hashed while copied, as by pmck_store_recover_into, and
 * its given value is not used).  A given checksum that differs
 * from the stored one rejects the slot, as a failed hash would.  The
 * other slot, and that slot once sealed with another step, are verified
 * in full.  The caller vouches that its copies were taken from that slot
 * after its seal; the region's own bytes of those tensors are not read,
 * so damage that reached them after the copy shows at the next recovery
 * that hashes them, not at this one.
 * Errors: those of pmck_store_recover; -EINVAL (given NULL, a slot other
 * than 0 or 1, an index out of range or given twice, csum or idx NULL
 * with n > 0).
 */
int pmck_store_recover_given(struct pmck_store *s, void *const *dst,
		const struct pmck_given_checksums *given, struct pmck_recovery *info);

/*
 * pmck_store_tensor_data -- read-only address of tensor idx in the
 * recovered checkpoint; NULL before a successful recover or for a bad idx.
 * Valid until the second begin after recover (the first writes the other slot).
 */
const void *pmck_store_tensor_data(const struct pmck_store *s, size_t idx);

/* pmck_store_read -- copies tensor idx of the recovered checkpoint to dst. Errors: -ERANGE, PMCK_E_NO_CHECKPOINT. */
int pmck_store_read(const struct pmck_store *s, size_t idx, void *dst);

/* ----------------------------------------------- asynchronous pipeline */

/*
 * A pipeline writes checkpoints of a store layer by layer in the
 * background, so that training waits only for the layer it is about to
 * update:
 *
 *   for each step:
 *       forward + backward
 *       for each layer j (in update order):
 *           pmck_pipeline_wait_layer(p, j);    previous checkpoint's copy of j is persisted
 *           update layer j's parameters
 *           if checkpointing this step:
 *               (before the first layer) pmck_pipeline_begin(p, step)
 *               pmck_pipeline_put_layer(p, j, srcs);    queued, returns at once
 *
 * Layer writes run FIFO on `threads` writer threads bound to the region's
 * NUMA node.  The checkpoint commits (on a writer thread) as soon as its
 * last layer is persisted.  Sources may be host memory, or GPU memory
 * through one of the GPU strategies (see docs/gpu.md).
 */
struct pmck_pipeline;
struct pmck_copyout;

/* What pmck_pipeline_begin does while the previous checkpoint is still being written. */
enum pmck_busy_policy {
	PMCK_BUSY_WAIT = 0, /* block until it has committed */
	PMCK_BUSY_SKIP = 1, /* skip this checkpoint: begin returns PMCK_SKIPPED */
};

/* Where put_layer's sources live and how they reach the region. */
enum pmck_source {
	PMCK_SOURCE_HOST = 0,   /* host memory: fused copy + checksum on the CPU */
	PMCK_SOURCE_GPU_DIRECT, /* D: device memory -> PM through the mapped pointer (DMA) */
	PMCK_SOURCE_GPU_KERNEL, /* D, by a copy kernel: 128-byte chunks, __threadfence_system */
	PMCK_SOURCE_GPU_STAGED, /* C: device -> pinned DRAM -> CPU non-temporal copy to PM */
	PMCK_SOURCE_GPU_SNAPSHOT, /* G: copy into spare GPU memory, then drain to PM (DMA) */
};

/*
 * What a pipeline reports after each checkpoint it finished (see
 * on_commit): the step, and 0 if it committed or the negative code of the
 * failure (the pipeline's error, also returned by the next begin).
 */
typedef void (*pmck_commit_fn)(void *arg, uint64_t step, int result);

/* The numa_node of a pipeline pinned to node n (0 means the default). */
#define PMCK_NUMA_NODE(n) ((int)(n) + 1)

/* Options of pmck_pipeline_new; a zero-filled struct means every default. */
struct pmck_pipeline_opts {
	unsigned threads;     /* writer threads; 0: 2 */
	/*
	 * Node the writers run on: 0 (or -1, the older spelling) the region's
	 * node; PMCK_NUMA_NODE(n) node n.
	 */
	int numa_node;
	enum pmck_busy_policy on_busy;
	enum pmck_source source;
	int cuda_device;      /* GPU sources: the CUDA device of the sources */
	struct pmck_copyout *copyout; /* if set, each commit is submitted for copy-out */
	/*
	 * If set, the checkpoints are global (see "multi-rank" below): begin
	 * first completes the previous step's agreement, and the writer that
	 * commits starts the agreement on its step.  The collectives are then
	 * called from the writer threads too, one at a time (MPI needs
	 * MPI_THREAD_SERIALIZED).  Requires PMCK_BUSY_WAIT: ranks skipping
	 * different steps could not agree.
	 */
	struct pmck_global *global;
	/*
	 * If set, called on the writer thread that finished each checkpoint,
	 * right after its commit (or failure) and its copy-out submission,
	 * before a waiting begin or wait_layer is woken: a training loop
	 * learns of each durable step without polling pmck_pipeline_stats.
	 * It must return quickly and must not call pmck_pipeline_* on this
	 * pipeline (it may write to an eventfd, signal a condition, log).
	 */
	pmck_commit_fn on_commit;
	void *on_commit_arg;
	unsigned flags;       /* PMCK_PIPELINE_* below; 0: none */
	/*
	 * GPU sources: the CUDA stream (a cudaStream_t of cuda_device) that
	 * produces the sources, for pmck_pipeline_put_layer; NULL: the device's
	 * legacy default stream.  See "GPU sources and streams" below.  (New,
	 * last: callers built against the shorter struct must be rebuilt.)
	 */
	void *cuda_stream;
	/*
	 * GPU sources D (both) and C: device memory, in bytes, for snapshots
	 * taken on demand by pmck_pipeline_wait_layers_stream; 0: none.  The
	 * pieces of the layers waited for that no writer has taken yet are
	 * copied on the GPU (device to device, after their put's ready event)
	 * into this memory, the writers copy them out from there, and the
	 * caller's stream waits only for that copy instead of the host waiting
	 * for the writers to reach them: an optimizer step right after a
	 * checkpoint no longer waits for the state to cross PCIe.  The pieces
	 * last in the queue go first; what does not fit is waited for as
	 * without it.  Reserved by pmck_pipeline_new (cudaMalloc), with under
	 * 512 bytes more per piece for alignment (so pmck_store_data_size
	 * holds every piece), and reused by every checkpoint; -EINVAL with
	 * host sources or with G (which snapshots every layer at its put,
	 * into memory as large as the store's data).  (New, last: see
	 * cuda_stream.)
	 */
	size_t snapshot_on_wait;
};

/*
 * Flag of pmck_pipeline_opts: after every piece of a layer is copied,
 * the writers hash the layer's sources again and compare them with what
 * was written, before wait_layer returns.  A source changed meanwhile (a
 * tensor updated without waiting for its layer) fails the checkpoint with
 * PMCK_E_SOURCE_CHANGED naming the tensor: it is not committed, and the
 * previous one stays the newest.  It catches every change made to a piece
 * after it was copied and before the layer was verified; a change made
 * before a piece was copied is caught only if that piece changes again.
 * Host sources only (GPU sources are not re-read).  It reads every source
 * byte twice: its cost is measured by pmck-pipebench
 * (ratio: verify_sources_time_vs_plain), hence off by default.
 */
#define PMCK_PIPELINE_VERIFY_SOURCES (1u << 0)

/*
 * Flags of pmck_pipeline_opts for GPU sources: where the checksums of the
 * pieces (XXH3-64 of each 1 MiB chunk, pmck_tensor_checksum's) are
 * computed.  At most one of them; neither: the library's default, the host.
 *
 * PMCK_PIPELINE_GPU_HASH_HOST: each writer hashes its pieces where they
 * landed in the region, once they have landed.  What is hashed is what the
 * region holds; the cost is CPU time per byte on the writers (about 6.6 GB/s
 * a writer on the H200's host: docs/gpu.md), which the training thread
 * feels, and a save keeps up with PCIe only with about 12 writers.
 *
 * PMCK_PIPELINE_GPU_HASH_DEVICE: the GPU hashes the sources, by kernels
 * queued on streams of the library's own after the put's ready event (G:
 * after its snapshot, which they hash); the writers only wait, flush and
 * drain.  What is hashed is what the copies read (the
 * region's bytes are hashed by the next recovery that verifies them).  Its
 * cost is SM time beside the training's kernels.  With 4 writers it saved
 * as fast as 12 writers hashing on the host, and kept training at batch 8
 * at 0.92 of no checkpoints against 0.62 (the H200, docs/gpu.md).  The
 * staged source (C) keeps hashing in its fused copy on the host, which
 * reads the bytes anyway.  The kernels are built for sm_90 and later: on
 * an older GPU, where the DMA copies still work, pmck_pipeline_new
 * refuses it (-ENOTSUP).
 *
 * Both flags: -EINVAL; either with host sources: -EINVAL.  The environment
 * variable PMCK_GPU_HASH ("host" or "device"), when set, overrides both,
 * for experiments on a program that cannot be changed.
 */
#define PMCK_PIPELINE_GPU_HASH_HOST (1u << 1)
#define PMCK_PIPELINE_GPU_HASH_DEVICE (1u << 2)

#define PMCK_SKIPPED 1 /* positive: pmck_pipeline_begin skipped this checkpoint */

/*
 * pmck_pipeline_new -- starts the writer threads for store s (which must
 * outlive the pipeline; no other writer may use it meanwhile).  opts may be
 * NULL (host sources, 2 threads, wait when busy).  GPU sources register the
 * whole region with cudaHostRegister (Mapped|Portable).  They copy in
 * sub-copies of 4 MiB (direct, snapshot) or 2 MiB (kernel, staged); the
 * environment variable PMCK_GPU_SUB_MIB (a whole number from 1 to 8) sets
 * another size, for tuning (docs/gpu.md).  Where the pieces are hashed:
 * PMCK_PIPELINE_GPU_HASH_* above.  A writer waiting for its copies polls
 * (the CUDA runtime's choice on a machine of many CPUs);
 * PMCK_GPU_WAIT=block has it sleep until they land instead (slower on the
 * one H100 machine that compared them: docs/gpu.md).  PMCK_GPU_RATE_GBPS (a
 * whole number from 1 to 1000) paces the copies out of the device, every
 * GPU pipeline of the process together, to about that many GB/s: each piece
 * (8 MiB at most) waits for its turn before it is enqueued; an experiment,
 * unpaced by default (docs/gpu.md).  For tests, PMCK_TEST_COMMIT_DELAY_MS (0
 * to 10000) holds each commit back that many milliseconds, so that
 * checkpoints commit late.  Errors: -EINVAL (unknown flags, both hashing
 * flags, a hashing flag with host sources; also a bad PMCK_GPU_SUB_MIB,
 * PMCK_GPU_HASH, PMCK_GPU_WAIT, PMCK_GPU_RATE_GBPS or
 * PMCK_TEST_COMMIT_DELAY_MS, named in the message), -ENOMEM (host memory,
 * or device or pinned memory from CUDA; for the snapshot strategy's or
 * snapshot_on_wait's buffer the message gives the bytes asked and free),
 * -EAGAIN (threads), -ENODEV (GPU path unavailable: built without CUDA, no
 * driver or no device; the message says which), -ENOTSUP (hashing on a GPU
 * this build has no kernel code for: before sm_90), -EIO from CUDA.
 */
int pmck_pipeline_new(struct pmck_store *s, const struct pmck_pipeline_opts *opts,
		struct pmck_pipeline **out);

/*
 * pmck_pipeline_delete -- waits for the checkpoint in flight, stops the
 * writers, unregisters GPU mappings, frees *p and sets it to NULL.
 */
void pmck_pipeline_delete(struct pmck_pipeline **p);

/*
 * pmck_pipeline_begin -- starts checkpoint `step`.  If the previous one is
 * still being written: waits (PMCK_BUSY_WAIT), or returns PMCK_SKIPPED
 * (PMCK_BUSY_SKIP), after which put_layer calls until the next begin are
 * answered PMCK_SKIPPED and ignored.  Errors: those of pmck_store_begin;
 * -EINVAL if the checkpoint in flight still lacks layers (it can never
 * complete); with opts.global, those of pmck_global_begin.  A failure of
 * the previous checkpoint is reported by pmck_pipeline_wait and
 * pmck_pipeline_wait_layer, not here.
 */
int pmck_pipeline_begin(struct pmck_pipeline *p, uint64_t step);

/*
 * pmck_pipeline_put_layer -- queues every tensor of `layer` for writing;
 * srcs[i] is the source of tensor i (entries of other layers are not read;
 * GPU strategies take device pointers).  Returns at once.  The sources
 * must stay unchanged until pmck_pipeline_wait_layer(p, layer) returns
 * (GPU sources: or, stream-ordered, see "GPU sources and streams" below).
 * Each layer is put once per checkpoint; the checkpoint commits after its
 * last layer is persisted.  Returns PMCK_SKIPPED while the checkpoint is
 * skipped.  Errors: -EINVAL (no checkpoint begun, layer unknown or already
 * put), GPU errors (-EIO) from strategy G's snapshot copy.
 */
int pmck_pipeline_put_layer(struct pmck_pipeline *p, uint32_t layer, const void *const *srcs);

/*
 * GPU sources and streams.  The library copies on CUDA streams of its own,
 * made cudaStreamNonBlocking (one per writer thread, one for strategy G's
 * snapshots and those on wait): they never wait for unrelated work on the
 * legacy default stream, nor hold it up, and the library never
 * synchronises the device.
 *  - Ready: a source must be complete on `cuda_stream` (the stream given
 *    to put_layer_stream, else opts.cuda_stream, NULL: the legacy default
 *    stream) when the layer is put: put_layer records an event there and
 *    the layer's copies wait for it on the GPU.  Work queued on that stream
 *    before the call is included, so a caller need not synchronise; work
 *    producing the sources on another stream must be ordered before the
 *    put (an event, as between any two CUDA streams).
 *  - Changing a source again: after pmck_pipeline_wait_layer (the host
 *    waits until the layer is persisted), or, stream-ordered, after
 *    pmck_pipeline_wait_layer_stream(p, layer, s) (or _wait_layers_stream):
 *    work queued on s from then on runs after the layer's copies have read
 *    their sources (G: after its snapshot; with opts.snapshot_on_wait,
 *    after the snapshot taken by the wait of what no writer had taken),
 *    while the host goes on.  Work on other streams must be ordered after
 *    s by the caller.
 *  - Persistence stays the host's: the commit follows only once every
 *    byte has landed in the region and is flushed and drained.
 */

/*
 * pmck_pipeline_put_layer_stream -- pmck_pipeline_put_layer whose GPU
 * sources are ready on cuda_stream (a cudaStream_t of opts.cuda_device;
 * NULL: the legacy default stream).  Host sources ignore it.  Errors: those
 * of pmck_pipeline_put_layer, and -EIO from recording the event.  The
 * calling thread's current CUDA device is left as it was.
 */
int pmck_pipeline_put_layer_stream(struct pmck_pipeline *p, uint32_t layer,
		const void *const *srcs, void *cuda_stream);

/*
 * pmck_pipeline_put_layers_stream -- pmck_pipeline_put_layer_stream of
 * layers[0], layers[1], ... layers[n - 1] (queued in that order) in one
 * call: a state of hundreds of layers put by a binding (Python's
 * save_async) costs one crossing into the library instead of one per
 * layer, and on the GPU one event on cuda_stream for all of them (strategy
 * G: one snapshot kernel for all their tensors, rather than copies per
 * layer).  The layers' copies then wait for that one event, and
 * pmck_pipeline_wait_layer_stream of any of them (G) for the whole
 * snapshot.  All or nothing on bad input: -EINVAL, and no layer put, if
 * no checkpoint is begun or a layer has no tensor, is put already or is
 * listed twice.  PMCK_SKIPPED if the checkpoint is skipped; -EIO from
 * CUDA fails the checkpoint (its layers count as put; pmck_pipeline_wait
 * returns the error).  n == 0 puts nothing.
 */
int pmck_pipeline_put_layers_stream(struct pmck_pipeline *p, const uint32_t *layers, size_t n,
		const void *const *srcs, void *cuda_stream);

/*
 * pmck_pipeline_wait_layer -- blocks until no queued or running write
 * reads the sources of `layer`: every byte of it is persisted in the
 * region (made durable: drained or flushed), so it may be modified.
 * Returns at once if the layer has nothing in flight.  Returns the
 * checkpoint's error if writing it failed.
 */
int pmck_pipeline_wait_layer(struct pmck_pipeline *p, uint32_t layer);

/*
 * pmck_pipeline_wait_layer_stream -- for GPU sources, the stream-ordered
 * wait_layer: blocks only until every copy of `layer` is enqueued (not
 * landed), then makes cuda_stream (NULL: the legacy default stream) wait
 * on the GPU for them, so that work queued there afterwards may change
 * the layer's sources.  A writer enqueues its next piece once its current
 * one has landed, so when more pieces are queued before the layer's than
 * there are writers, the host still waits for those to land (strategy G
 * never waits: its snapshot is enqueued by put_layer; with
 * opts.snapshot_on_wait the pieces no writer has taken are snapshotted
 * instead, see pmck_pipeline_wait_layers_stream).  Persisting goes on in
 * the background; a failure is reported by a later wait.  Host sources:
 * pmck_pipeline_wait_layer.
 * Errors: -EINVAL (layer unknown), the checkpoint's error if it already
 * failed, -EIO from CUDA.  The caller's current device is left as it was.
 */
int pmck_pipeline_wait_layer_stream(struct pmck_pipeline *p, uint32_t layer, void *cuda_stream);

/*
 * pmck_pipeline_wait_layers_stream -- pmck_pipeline_wait_layer_stream of
 * layers[0 .. n) in one call (a binding's optimizer hook waits for every
 * layer of the state it updates: one crossing into the library, not one
 * per layer).  With opts.snapshot_on_wait, the pieces of these layers
 * that no writer has taken yet are snapshotted on the GPU first, as much
 * of them as that memory holds, the pieces last in the queue first; the
 * host then waits only until the other pieces are enqueued, and
 * cuda_stream waits on the GPU for their copies and for the snapshot.
 * Host sources: pmck_pipeline_wait_layer of each.  Errors: -EINVAL (no
 * list, or a layer unknown: nothing waited for), the checkpoint's error
 * if it already failed, -EIO from CUDA (the checkpoint then fails).  The
 * caller's current device is left as it was.
 */
int pmck_pipeline_wait_layers_stream(struct pmck_pipeline *p, const uint32_t *layers, size_t n,
		void *cuda_stream);

/*
 * pmck_pipeline_wait -- blocks until the checkpoint in flight has
 * committed (or failed: its error is returned, and the store's previous
 * checkpoint is intact).  0 if nothing is in flight.
 */
int pmck_pipeline_wait(struct pmck_pipeline *p);

/*
 * pmck_pipeline_busy -- 1 while a checkpoint is in flight (begun, and not
 * yet committed or failed), else 0; never blocks for it.  Once it says 0,
 * pmck_pipeline_wait returns the checkpoint's result at once, and nothing
 * reads the sources any more: a binding polls it to release them without
 * waiting.  A checkpoint missing some of its layers stays in flight.
 */
int pmck_pipeline_busy(struct pmck_pipeline *p);

/* Counters since pmck_pipeline_new. */
struct pmck_pipeline_stats {
	uint64_t committed;     /* checkpoints committed */
	uint64_t skipped;       /* begins that returned PMCK_SKIPPED */
	uint64_t last_step;     /* step of the last commit (valid if committed) */
	uint64_t wait_ns;       /* time callers spent blocked in begin and wait_layer */
	/*
	 * GPU sources: bytes copied by snapshots on demand (opts.snapshot_on_wait),
	 * and pieces.  (New, last: callers built against the shorter struct must
	 * be rebuilt.)
	 */
	uint64_t snapshot_on_wait_bytes, snapshot_on_wait_pieces;
	/*
	 * Where the writers' time goes, summed over the writers (new, last, as
	 * above).  busy: running pieces (copy, flush, hash, drain).  GPU
	 * sources, parts of busy: copy_wait, waiting for sub-copies to land (a
	 * piece's bytes crossing PCIe, and for its first sub-copy whatever the
	 * copy waits for on the GPU first: the caller's work before the put, G's
	 * snapshot); tail, from the piece's last sub-copy landing to the piece's
	 * end (flushing and hashing what landed last, device hashing's wait
	 * included, and the drain), the time a writer has no copy in flight;
	 * hash_wait, waiting for the GPU's hashes of the piece
	 * (PMCK_GPU_HASH=device).  commit: the commits' time (metadata,
	 * checksums, the slot made the newest), on the thread that ends each
	 * checkpoint (a writer; the caller's put if nothing was left to copy),
	 * not part of busy.  Per checkpoint, 1 - (busy + commit) / (threads *
	 * its duration) is the share of the writers' time with nothing to run.
	 */
	uint64_t writer_busy_ns, writer_copy_wait_ns, writer_tail_ns, writer_hash_wait_ns;
	uint64_t commit_ns;
};
void pmck_pipeline_stats(struct pmck_pipeline *p, struct pmck_pipeline_stats *st);

/*
 * pmck_gpu_available -- 0 if the GPU path can be used with CUDA device
 * `device`; -ENODEV otherwise, with the reason in pmck_errormsg() ("built
 * without CUDA", "no CUDA driver", "no CUDA device").
 */
int pmck_gpu_available(int device);

/*
 * pmck_gpu_hasher -- pmckpt's checksum (pmck_tensor_checksum) of buffers
 * in device memory, computed by the GPU: XXH3-64 of each PMCK_HASH_CHUNK
 * chunk, a warp per chunk, on a stream of the hasher's own (made
 * cudaStreamNonBlocking), the chunks' values then combined on the host.
 * For a load that verifies its copies where they landed
 * (pmck_store_recover_given).  One thread at a time per hasher.
 */
struct pmck_gpu_hasher;

/*
 * pmck_gpu_hasher_new -- a hasher for CUDA device `device`: a stream, an
 * event and pinned, mapped lists (grown as needed).  The calling thread's
 * current device is left as it was.  The caller owns *out
 * (pmck_gpu_hasher_delete).
 * Errors: -ENODEV (built without CUDA, no driver or no such device), -ENOMEM, -EIO.
 */
int pmck_gpu_hasher_new(int device, struct pmck_gpu_hasher **out);

/*
 * pmck_gpu_hasher_add -- queues the checksums of n buffers of the hasher's
 * device, srcs[i] of lens[i] bytes (device memory, each starting 8-byte
 * aligned; a buffer of 0 bytes may be anything), on the hasher's stream
 * after the work queued so far on `stream` (a cudaStream_t of that device;
 * NULL: its legacy default stream), such as the caller's copies into them:
 * the host does not wait.  The buffers must not change, nor be freed,
 * until pmck_gpu_hasher_wait returns.  Their checksums are the next n
 * values that pmck_gpu_hasher_wait gives, in this order.
 * For a queue longer than the room the hasher has, this call makes more,
 * as pmck_gpu_hasher_reserve does (it waits for the hashes queued so far,
 * which wait for the caller's stream): reserving before queueing the copies
 * keeps that wait out of their way.
 * Errors (nothing of this call is queued): -EINVAL (h NULL, srcs or lens
 * NULL with n > 0, a buffer not 8-aligned or not device memory of the
 * hasher's device), -ENOMEM; -EIO (CUDA failed, here or in an earlier add
 * since the last wait: the buffers added since that wait are lost, and
 * the next wait returns -EIO).
 */
int pmck_gpu_hasher_add(struct pmck_gpu_hasher *h, void *stream, size_t n,
		const void *const *srcs, const uint64_t *lens);

/*
 * pmck_gpu_hasher_reserve -- makes room for `chunks` chunks queued between
 * two waits (a buffer of len bytes takes ceil(len / PMCK_HASH_CHUNK)), so
 * that no add before the next wait has to make room.  Making room waits
 * (host) for the hashes queued so far, and allocates pinned memory
 * (cudaHostAlloc, cudaFreeHost), which may wait for the whole device: call
 * it before queueing work that should not wait, and keep the hasher.
 * Errors: -EINVAL (h NULL), -ENOMEM, -EIO.
 */
int pmck_gpu_hasher_reserve(struct pmck_gpu_hasher *h, size_t chunks);

/*
 * pmck_gpu_hasher_wait -- waits (host) for the hashes queued since the last
 * wait and stores their checksums in out[0..n), in the order added; n must
 * be how many buffers were added.  out NULL (with n 0): waits and drops them.
 * Afterwards the hasher is empty, also after an error other than -EINVAL.
 * Errors: -EINVAL (h NULL, or n not the buffers added: nothing waited for
 * nor dropped), -EIO (CUDA failed, now or in an add since the last wait).
 */
int pmck_gpu_hasher_wait(struct pmck_gpu_hasher *h, uint64_t *out, size_t n);

/* pmck_gpu_hasher_fill -- pmck_gpu_hasher_wait(hasher, csum, n), in the shape of pmck_given_checksums.fill. */
int pmck_gpu_hasher_fill(void *hasher, uint64_t *csum, size_t n);

/* pmck_gpu_hasher_delete -- waits for what is queued, frees *h and sets it NULL; NULL is fine. */
void pmck_gpu_hasher_delete(struct pmck_gpu_hasher **h);

/* What this library was built with (pmck_build_info). */
struct pmck_build_info {
	const char *version; /* pmckpt's version, "0.1.0" */
	/*
	 * The CUDA runtime it was built against and links statically
	 * (CUDART_VERSION: 13000 is 13.0); 0: built without CUDA, so CUDA
	 * tensors reach it through host memory only (pmck_gpu_available says why).
	 */
	int cuda;
	const char *pmem2;   /* libpmem2's version when it was built (pkg-config); "" if unknown */
};

/* pmck_build_info -- fills *out (static strings, owned by the library).  Never fails. */
void pmck_build_info(struct pmck_build_info *out);

/* ------------------------------------------- local backend selection */

/* Where pmck_local_open put the store. */
enum pmck_backend {
	PMCK_BACKEND_DEVDAX = 0, /* a devdax device */
	PMCK_BACKEND_FSDAX = 1,  /* a file with byte or cache-line granularity (DAX) */
	PMCK_BACKEND_RAMDISK = 2,/* no PM: a file in node-local memory (tmpfs) or on disk */
};

struct pmck_local_opts {
	const char *pm_path;      /* devdax device or file on fsdax; NULL: no PM, use the ramdisk */
	const char *ramdisk_dir;  /* directory for the fallback file (made 0700 if missing); NULL: the
	                             caller's own, /dev/shm/pmckpt-<uid> (pmck_local_default_dir) */
	const char *store_name;   /* NULL: "default" */
	const struct pmck_tensor_desc *descs; /* the layout (required but with PMCK_LOCAL_EXISTING) */
	size_t ndescs;
	/*
	 * Bytes of a pm_path file that does not exist yet, which is then
	 * created (0600); 0: pmck_local_pool_size() of the layout.  Ignored
	 * when the file or device exists.  A missing name directly in /dev is never
	 * created (a devdax device comes from provisioning: pmctl).
	 */
	uint64_t pm_size;
	unsigned flags;           /* PMCK_LOCAL_* */
};

/* Flags of struct pmck_local_opts. */
#define PMCK_LOCAL_RDONLY (1u << 0) /* open the existing store read-only (PMA_REGION_RDONLY) */
#define PMCK_LOCAL_EXISTING (1u << 1) /* open the existing store for writing; create nothing */
/* ramdisk_dir is shared on purpose (by a group): its owner and mode are not checked */
#define PMCK_LOCAL_SHARED_DIR (1u << 2)
/*
 * The region is not prefaulted: its first writes pay the page faults.  For a
 * store written later and off the critical path (the partner copies a rank
 * holds, written by the partner thread), so that an open during a restart
 * does not populate memory nobody waits for.
 */
#define PMCK_LOCAL_NO_PREFAULT (1u << 3)

/* A region, its pool and one store, opened together. */
struct pmck_local {
	struct pma_region *region;
	struct pma_pool *pool;
	struct pmck_store *store;
	enum pmck_backend backend;
	char path[4096];          /* what was mapped */
	char description[4608];   /* one line saying which backend and why */
	int created;              /* 1: the pool was formatted by this open (blank medium) */
	int made_file;            /* 1: this open created the file at `path` */
};

/*
 * pmck_local_open -- opens (or creates) the store on PM when pm_path is
 * given, else on a ramdisk file <ramdisk_dir>/pmckpt-<store>.pool sized
 * for two slots of the layout, with the same two-slot protocol; fills
 * *out, whose `description` says which backend was chosen and why (a
 * pm_path without DAX granularity is used, and reported as a ramdisk-like
 * page-granularity backend).  A missing pm_path file is created with
 * opts->pm_size bytes.  The pool is opened with pma_pool_open_or_create:
 * formatted only when the region is blank (out->created says so), never
 * over other data or a damaged pool.  Directories (ramdisk_dir) are made
 * with their parents, 0700.  On failure nothing this call created is left.
 *
 * Privacy of the ramdisk tier: a node's ramdisk is shared by its users, and
 * whoever can write a pool file can change a checkpoint without the
 * checksums telling (XXH3 is not keyed).  So the directory, the default one
 * or ramdisk_dir, is checked as pmck_dir_check does (it must be the
 * caller's, not a symbolic link, and not writable by group or others:
 * PMA_E_UNSAFE otherwise, naming its owner and mode), for opening what
 * exists too; PMCK_LOCAL_SHARED_DIR skips that for a ramdisk_dir shared on
 * purpose (never for the default).  The pool file is created 0600 with
 * O_EXCL, never opened through a symbolic link, and an existing one owned
 * by another user (or with other hard links) is refused, not formatted or
 * written (PMA_E_UNSAFE).  A pm_path file must be the caller's too when it
 * is opened for writing; a device keeps its own ownership.  The
 * directory's parents are trusted: /dev/shm is sticky, so no other user can
 * rename or replace /dev/shm/pmckpt-<uid>.  The
 * region is locked for writing (pma_region_open): a second process
 * opening the same store fails with PMA_E_BUSY.
 * With PMCK_LOCAL_RDONLY nothing is created or written: the file, pool and
 * store must exist (-ENOENT otherwise) with this layout; the region is
 * mapped read-only under a shared lock, and recover and read work.
 * With PMCK_LOCAL_EXISTING nothing is created (no directory, file, pool or
 * store) and the store opens for writing as pmck_store_open does: -ENOENT
 * for a missing file or store, PMA_E_NOT_POOL for a region without a pool
 * (a ramdisk file left blank or short by an interrupted creation is such a
 * region, and is left as it is); descs may be NULL, for the store's own
 * layout (else it must be this layout: PMCK_E_LAYOUT).  The region is not
 * prefaulted (pma_region_prefault before writing, if page faults matter).
 * With PMCK_LOCAL_NO_PREFAULT a created or opened region is not prefaulted
 * either.  Other flags: -EINVAL.
 * Errors: PMA_E_UNSAFE (see above); those of pma_region_open (PMA_E_BUSY), pma_pool_open_or_create
 * (PMA_E_NOT_POOL for other data, PMA_E_CORRUPT, PMA_E_TRUNCATED) and
 * pmck_store_open_or_create (PMCK_E_LAYOUT for another layout); -ENOENT
 * for a missing device directly in /dev.
 */
int pmck_local_open(const struct pmck_local_opts *opts, struct pmck_local *out);

/*
 * pmck_local_pool_size -- the bytes of a region that holds one pool with
 * one store of this layout (two slots, tensor map, alignment slack): the
 * size pmck_local_open gives a new file.  Errors: those of the layout check.
 */
int pmck_local_pool_size(const struct pmck_tensor_desc *descs, size_t n, uint64_t *size);

/*
 * pmck_local_default_dir -- writes the ramdisk directory used when
 * ramdisk_dir is NULL into buf: "/dev/shm/pmckpt-<uid>" for the effective
 * uid, one per user.  Errors: -EINVAL (buf NULL), -ENAMETOOLONG (len too short).
 */
int pmck_local_default_dir(char *buf, size_t len);

/* Flags of pmck_dir_check. */
#define PMCK_DIR_CREATE (1u << 0) /* make dir (and missing parents) if it does not exist */
#define PMCK_DIR_GROUP  (1u << 1) /* with PMCK_DIR_CREATE: make it 0750 instead of 0700 */

/*
 * pmck_dir_check -- 0 if dir is a place for checkpoints that no other
 * user can change: a directory (not a symbolic link to one) owned by the
 * effective user and not writable by its group or others.  The directory
 * is opened without following a link and examined through that
 * descriptor.  With PMCK_DIR_CREATE a missing dir is made, 0700 (0750 with
 * PMCK_DIR_GROUP; modes before the umask), with its missing parents.
 * pmck_local_open and pmck_copyout_new check their directories this way;
 * a caller that reads a copy-out directory without a copier
 * (pmck_recover_tiers, pmck_global_recover) may check it first.  Errors:
 * PMA_E_UNSAFE (the message names the path, its owner and mode, and what
 * to do), -ENOENT (missing, without PMCK_DIR_CREATE), -EINVAL, -errno.
 */
int pmck_dir_check(const char *dir, unsigned flags);

/* pmck_local_close -- closes store, pool and region of *l. */
void pmck_local_close(struct pmck_local *l);

/*
 * pmck_local_discard -- closes *l like pmck_local_close and, if the open
 * created the file (made_file), removes it again: for a job that opened its
 * store and was then refused (pmck_global_recover: PMCK_E_WORLD_SIZE, a
 * layout mismatch), so that the refused attempt leaves nothing behind.  A
 * device, or a file that existed before, is left as it is.
 */
void pmck_local_discard(struct pmck_local *l);

/* ---------------------------------------------------------- copy-out */

/*
 * Copy-out writes each committed checkpoint, in the background, to a
 * directory on a shared file system as one safetensors file per rank:
 *
 *   DIR/step-000000000042/rank-00000.safetensors   (tensors, and in
 *       __metadata__: step, rank, world size, layout hash, checksums)
 *   DIR/step-000000000042/COMPLETE                 (marker: the step is whole;
 *       JSON with step, world_size, layout_hash and generation)
 *
 * Every file is written under a temporary name, fsync'd, renamed, and its
 * directory fsync'd; a step exists for readers only once COMPLETE does.
 *
 * Runs: several jobs may share a directory.  A copier's generation is 1 +
 * the largest generation recorded for its layout in DIR (markers without
 * one count as 0); "newest" orders the steps of one layout and world size
 * by (generation, step), so a run restarted at step 1 is newer than an
 * older run's step 1339.  Retention keeps the newest `keep` complete steps
 * of the store's layout and world size and deletes the older ones (copier
 * thread, after each copy); steps of another layout or world size, or
 * with an unreadable marker, are never deleted by a copier (only
 * pmck_copyout_clean, `pmckpt clean`, applies retention to every lineage),
 * and a copy onto such a complete step is
 * refused (-EEXIST).  Leftovers of a crash (temporary files, steps without
 * COMPLETE) are removed when a single-rank copier starts; while running,
 * an incomplete step older than the oldest kept step of the copier's own
 * run is removed.
 *
 * While a slot is being copied, pmck_store_begin does not overwrite it:
 * it waits (or, in a pipeline with PMCK_BUSY_SKIP, the checkpoint is
 * skipped).
 */
struct pmck_copyout;

struct pmck_copyout_opts {
	const char *dir;     /* shared directory (made with its parents if missing) */
	unsigned keep;       /* complete steps to keep; 0: 2 */
	unsigned rank;       /* this process's rank */
	unsigned world_size; /* ranks per step; 0: 1.  Rank 0 writes COMPLETE once all ranks' files exist */
	unsigned marker_timeout_ms; /* rank 0's wait for the other ranks' files; 0: 600000 */
	/* Called on the copier thread every ~64 MiB and at the end (may be NULL). */
	void (*progress)(void *arg, uint64_t step, uint64_t done, uint64_t total);
	void *progress_arg;
	/*
	 * If set, called on the copier thread once each copy has ended (with
	 * its retention), with the step and 0 or the negative code of its
	 * failure; on failure pmck_errormsg() on that thread describes it (see
	 * pmck_copyout_check), and the failure is also kept for check and
	 * wait.  It must return quickly and must not call pmck_copyout_* on
	 * this copier (it may log, set a flag, write to an eventfd).
	 */
	void (*on_done)(void *arg, uint64_t step, int result);
	void *on_done_arg;
	unsigned flags;      /* PMCK_COPYOUT_* (new, last: rebuild callers that pass the struct) */
};

/*
 * Flags of struct pmck_copyout_opts.  Without them, the copier makes dir
 * (if missing) and every step directory 0700, its files 0600 (modes before
 * the umask), and refuses a dir that is a symbolic link, is owned by
 * another user, or can be written by its group or others (PMA_E_UNSAFE):
 * whoever can write there can replace a checkpoint, and its checksums
 * (XXH3, not keyed) would not tell.  Files are created with O_EXCL, never
 * through a link.
 */
#define PMCK_COPYOUT_SHARED_DIR (1u << 0) /* dir is shared on purpose: its owner and mode are not checked */
#define PMCK_COPYOUT_GROUP      (1u << 1) /* what the copier makes is group-readable: 0750 dirs, 0640 files */

/*
 * pmck_copyout_new -- starts the copier for store s (which must outlive
 * it), takes the next generation for its layout and cleans the
 * directory's leftovers.  Every rank of a job opens its copier before it
 * copies its first step, so all derive the same generation (rank 0 writes
 * the first marker only after every rank's first file exists).  Errors:
 * -EINVAL, PMA_E_UNSAFE (dir is not private: see the flags above),
 * -errno of mkdir/opendir, -ENOMEM, -EAGAIN; directories it made are
 * removed again when it fails.
 */
int pmck_copyout_new(struct pmck_store *s, const struct pmck_copyout_opts *opts,
		struct pmck_copyout **out);

/*
 * pmck_copyout_submit -- queues the store's newest committed checkpoint
 * for copy-out and returns at once.  Its slot is protected from being
 * overwritten until the copy ends.  Errors: PMCK_E_NO_CHECKPOINT.  An
 * earlier copy's failure is not returned here (a pipeline submits from
 * its writers, and its checkpoint did commit): see pmck_copyout_check.
 */
int pmck_copyout_submit(struct pmck_copyout *c);

/*
 * Failures.  A copy that fails (a full file system, say) leaves the local
 * checkpoint as it is: training goes on and the copier goes on with the
 * next submitted steps, each tried afresh (space may have been freed).
 * The failed step's files, temporary ones included, are removed, and its
 * directory too unless it holds COMPLETE (an earlier copy of the same
 * step, which stays whole) or, with several ranks, other ranks' files;
 * the newest complete steps are kept as they were (retention runs only
 * after a copy succeeded).
 *
 * The first failure not yet reported is kept with its message (later ones
 * only count, in pmck_copyout_stats.failed) until pmck_copyout_check or
 * pmck_copyout_wait reports it, once; on_done learns of every one as it
 * happens.  The message names the operation, the path and the errno text;
 * where space ran out (ENOSPC, EDQUOT) also the bytes the file needed and
 * those available to it (statvfs, with the partial file removed).
 */
struct pmck_copyout_failure {
	int error;            /* negative code; 0: no failure */
	uint64_t step;        /* the step whose copy failed */
	uint64_t needed;      /* space failures: bytes the file needed; else 0 */
	uint64_t available;   /* space failures: bytes available to it (statvfs f_bavail); else 0 */
	char path[4096];      /* the file or directory of the failing operation */
	char message[1024];   /* what pmck_errormsg() said on the copier thread */
};

#define PMCK_COPYOUT_WAIT 1u /* pmck_copyout_check: wait for every submitted copy first */

/*
 * pmck_copyout_check -- reports the first copy-out failure not reported
 * yet and takes it (neither a later check nor wait reports it again);
 * with PMCK_COPYOUT_WAIT it first waits as pmck_copyout_wait does, else it
 * returns at once (a training loop calls it before each submit).  Returns
 * the failure's code, 0 if none.  out (may be NULL) is filled, out->error
 * 0 if none.  On failure the calling thread's pmck_errormsg() is the
 * failure's message.  Errors: those of pmck_copyout_wait; -EINVAL (flags).
 */
int pmck_copyout_check(struct pmck_copyout *c, unsigned flags, struct pmck_copyout_failure *out);

/*
 * pmck_copyout_wait -- waits until every submitted copy has ended; returns
 * the first failure not yet reported (0 if none; see pmck_copyout_check,
 * which this is with PMCK_COPYOUT_WAIT and no out), and sets the calling
 * thread's pmck_errormsg() to its message: -EEXIST for a step number held
 * by another job's complete step, -ETIMEDOUT (rank 0: a rank's file did
 * not appear), -ENOSPC / -EDQUOT (no space: see above), -errno of the
 * other file operations.
 */
int pmck_copyout_wait(struct pmck_copyout *c);

/* pmck_copyout_delete -- waits for queued copies, stops the copier, frees *c, sets it NULL. */
void pmck_copyout_delete(struct pmck_copyout **c);

/* Counters since pmck_copyout_new. */
struct pmck_copyout_stats {
	uint64_t copied;      /* steps written and published */
	uint64_t bytes;       /* bytes written */
	uint64_t deleted;     /* old steps removed by retention */
	uint64_t last_step;   /* newest step copied (valid if copied) */
	uint64_t busy_ns;     /* time spent writing, syncing and publishing files (not deleting) */
	uint64_t failed;      /* copies that failed (each step once) */
};
void pmck_copyout_stats(struct pmck_copyout *c, struct pmck_copyout_stats *st);

/*
 * Quarantine.  A complete step whose file for some rank fails verification
 * (a checksum, a truncated or missing file) is never loaded and never
 * deleted silently: the recovery that found the damage moves it to
 *
 *   DIR/quarantine/step-<12 digits>-<UTC time>[-k]/   the step as it was
 *       NOTE          what failed (rank, file, reason), when, and who moved it
 *
 * durably: NOTE is written into the step (fsync'd, renamed, the step
 * directory fsync'd), then the step directory is renamed into
 * DIR/quarantine, and both DIR/quarantine and DIR are fsync'd.  A crash
 * before the rename leaves a step with a NOTE that the next recovery finds
 * damaged again.  DIR/quarantine is not a step: retention, copiers,
 * pmck_copyout_clean and recovery never look inside it; pmck_copyout_list
 * lists it; only a person deletes it.
 *
 * Copy-out directories without a running job: what is in one, and
 * retention by the copier's rules.  These are the library's reading of the
 * layout above (which names are steps, what a marker says, which lineage a
 * step belongs to); tools use them rather than parsing DIR themselves.
 *
 * A step is a directory DIR/step-<digits> whose name is the one the copier
 * writes (at least 12 digits, zero-padded); other names are not steps.
 */

/* One file of a step directory. */
struct pmck_copyout_file {
	const char *name;     /* file name inside the step directory */
	int rank;             /* N of rank-N.safetensors, else -1 */
	int temporary;        /* a *.tmp leftover of an interrupted write */
	uint64_t bytes;       /* st_size */
};

/* One step and what its COMPLETE marker says. */
struct pmck_copyout_step {
	uint64_t step;
	const char *name;     /* "step-000000000042" */
	int complete;         /* COMPLETE exists */
	int marker_ok;        /* complete, and the marker is a JSON object (else "unreadable") */
	/* Whether the marker records each field; older pmckpt versions wrote fewer. */
	int has_world_size, has_layout_hash, has_generation;
	unsigned world_size;  /* recorded; 1 if not recorded; 0 if the marker is unreadable */
	/*
	 * The step's layout hash: recorded in the marker, or for an older
	 * marker read from the step's rank-00000 file; layout_known says
	 * whether it is either.  A complete step without a known layout belongs
	 * to no lineage (see pmck_copyout_clean).
	 */
	int layout_known;
	uint64_t layout_hash;
	uint64_t generation;  /* recorded; 0 if not recorded */
	uint64_t bytes;       /* sum of its files' bytes */
	size_t nfiles;
	const struct pmck_copyout_file *files; /* sorted by name */
};

/* A damaged complete step that recovery moved to DIR/quarantine/<name> (see "Quarantine"). */
struct pmck_quarantined {
	uint64_t step;
	const char *name;     /* "step-000000000042-20240501T101500Z" */
	const char *note;     /* text of its NOTE file ("" if unreadable) */
};

struct pmck_copyout_listing {
	const char *dir;
	uint64_t bytes;       /* sum of every step's bytes */
	size_t nsteps;
	const struct pmck_copyout_step *steps; /* ascending step numbers */
	/* Appended: the library allocates the listing, so older callers are unaffected. */
	size_t nquarantined;
	const struct pmck_quarantined *quarantined; /* DIR/quarantine, sorted by name */
};

/*
 * pmck_copyout_list -- the steps of copy-out directory `dir`, their files
 * and markers, as the copier and recovery see them.  Reads only.  On
 * success *out is one allocation (strings and arrays included) that the
 * caller frees with pmck_copyout_listing_free; on failure *out is NULL.
 * A step removed while being listed shows up with fewer files (or none).
 * Errors: -errno of opendir(dir) (-ENOENT, -ENOTDIR, -EACCES), -ENOMEM.
 */
int pmck_copyout_list(const char *dir, struct pmck_copyout_listing **out);

/* pmck_copyout_listing_free -- frees *l (may be NULL) and sets it NULL. */
void pmck_copyout_listing_free(struct pmck_copyout_listing **l);

#define PMCK_CLEAN_DRY_RUN 1u /* decide and report, remove nothing */

enum pmck_clean_action {
	PMCK_CLEAN_KEPT,      /* complete, among the newest `keep` of its lineage */
	PMCK_CLEAN_REMOVED,   /* complete, older than its lineage's newest `keep`: removed */
	PMCK_CLEAN_INCOMPLETE,/* no COMPLETE marker: removed */
	PMCK_CLEAN_TEMPORARY, /* a *.tmp file inside a kept step (`file`): removed */
	PMCK_CLEAN_UNKNOWN,   /* complete, lineage unknown (unreadable marker, or an older
	                         marker whose rank-00000 file gives no layout): left alone */
};

/* One decision of pmck_copyout_clean. */
struct pmck_clean_event {
	enum pmck_clean_action action;
	const struct pmck_copyout_step *step;  /* the step (valid during the call only) */
	const struct pmck_copyout_file *file;  /* PMCK_CLEAN_TEMPORARY: the file; else NULL */
	/* KEPT and REMOVED: position in the lineage, 0 for its newest step. */
	size_t lineage_pos;
};

/*
 * pmck_copyout_clean -- retention of copy-out directory `dir` without a
 * running job, by the copier's rules applied to every lineage: the
 * complete steps are grouped by (layout hash, world size); within each
 * lineage the newest `keep` by (generation, step) are kept and the older
 * ones removed, so a restarted run's low step numbers win over an older
 * run's higher ones.  Every incomplete step is removed, and every *.tmp
 * file inside a kept step.  Complete steps whose lineage cannot be told
 * are left alone.  Removal is durable and crash-safe as the copier's: a
 * step's marker goes first (fsync'd), then its files, the directory and
 * an fsync of `dir`.
 *
 * No copier may write to `dir` meanwhile (an incomplete step may be one
 * being written).
 *
 * Steps are visited newest step number first; for each, the TEMPORARY
 * events of its files come before its own event.  `report` (may be NULL)
 * is called once per decision, after the removal it reports succeeded
 * (with PMCK_CLEAN_DRY_RUN, instead of it); a non-zero return stops the
 * clean and is returned.  Errors: -EINVAL (keep 0, unknown flags),
 * those of pmck_copyout_list, -errno of a removal (the clean stops there;
 * what was reported before is done).
 */
int pmck_copyout_clean(const char *dir, unsigned keep, unsigned flags,
		int (*report)(void *arg, const struct pmck_clean_event *ev), void *arg);

/* ------------------------------------------------------- safetensors */

/*
 * pmck_safetensors_write -- writes the store's recovered checkpoint (see
 * pmck_store_recover) to `path` in safetensors format, atomically
 * (temporary name, fsync, rename, fsync of the directory).  Errors:
 * PMCK_E_NO_CHECKPOINT, -errno of the file operations.
 */
int pmck_safetensors_write(const struct pmck_store *s, const char *path, unsigned rank,
		unsigned world_size);

/* What a safetensors file written by pmckpt says about itself. */
struct pmck_file_info {
	uint64_t step;
	unsigned rank, world_size;
	uint64_t ntensors;
	uint64_t data_bytes;
	int has_checksums;    /* written by pmckpt: per-tensor checksums in __metadata__ */
};

/*
 * pmck_safetensors_verify -- parses `path` (header, offsets, dtypes,
 * shapes, file size) and, when it carries pmckpt checksums, checks every
 * tensor against them, hashing on up to 8 threads (the caller's CPUs by
 * affinity; pieces of 8 chunks, as pmck_store_recover does; threads of its
 * own, joined before it returns).  *info may be NULL.  Errors:
 * PMCK_E_CORRUPT with the reason (truncated, bad header, offsets outside
 * the data, checksum mismatch naming the first failing tensor in the
 * header's order), -errno of open/read, -ENOMEM.
 */
int pmck_safetensors_verify(const char *path, struct pmck_file_info *info);

/*
 * pmck_safetensors_import -- loads `path` into the store as checkpoint
 * `step` (the file's own step if it has one, else the step argument):
 * begin, every tensor written on up to 8 threads (pmck_ckpt_write_all), its
 * checksums compared with the file's, commit.  Tensors are matched by name and
 * must have the store's dtype and shape; every tensor of the store must be
 * present.  A file written by another tool (no checksums) is accepted.
 * A file of pmckpt's own must match the store's layout hash.
 * Errors: PMCK_E_LAYOUT (missing tensor, other dtype or shape, other layout hash),
 * PMCK_E_CORRUPT, those of begin and commit.
 */
int pmck_safetensors_import(struct pmck_store *s, const char *path, uint64_t step);

/*
 * pmck_safetensors_layout -- the layout of the store a safetensors file
 * came from, to create a store it can be imported into: names, dtypes,
 * shapes and layers in declaration order, from the file's "layout:" entries
 * (checked against its layout_hash).  A file not written by pmckpt gets
 * one layer per tensor in data order.  On success *descs is one malloc'd
 * block (names included) that the caller frees with free(); *n is its
 * length.  Errors: those of pmck_safetensors_verify's parsing,
 * PMCK_E_LAYOUT (no tensor; a pmckpt file from a version without layout
 * entries), PMCK_E_CORRUPT (inconsistent entries), -ENOMEM.
 */
int pmck_safetensors_layout(const char *path, struct pmck_tensor_desc **descs, size_t *n);

/* ------------------------------------------------- two-tier recovery */

enum pmck_tier {
	PMCK_TIER_LOCAL = 0,   /* this rank's own store (PM or ramdisk) */
	PMCK_TIER_SHARED = 1,  /* its file in the copy-out directory */
	PMCK_TIER_PARTNER = 2, /* its partner copy, held by a rank on another node (pmck_partner_new) */
};

/*
 * Rejections.  Every recovery (pmck_store_recover, pmck_store_recover_step,
 * pmck_recover_tiers, pmck_global_recover) lists each candidate it
 * rejected, in the order it tried them, so that the caller can say what
 * was lost and why even when an older checkpoint (or another tier) was
 * loaded in its place, and when nothing could be loaded at all.
 *
 * A candidate is a sealed local slot, or a complete step of the store's
 * layout in the shared directory.  reason says what failed, e.g.
 *   "local slot 1 failed its checksum (tensor 'emb')"
 *   "shared file .../rank-00001.safetensors: truncated (...)"
 *   "rank-00001.safetensors is missing from the complete step"
 *   "rank 2 cannot produce it" (pmck_global_recover: the group passed over
 *       a step this rank could load)
 * and, when the recovery moved the damaged shared step aside, ends with
 * "; moved to DIR/quarantine/..." (quarantined is then 1; see
 * "Quarantine" under copy-out).
 *
 * The list belongs to the store: it is read through pmck_store_rejections,
 * not bound into struct pmck_recovery, struct pmck_tier_recovery or struct
 * pmck_global_recovery, whose layouts are unchanged, so that programs
 * built against older headers keep working.
 */
#define PMCK_REASON_MAX 384 /* bytes of a rejection's reason, NUL included */

struct pmck_rejection {
	unsigned rank;          /* whose candidate: this rank, or the rank named (global) */
	enum pmck_tier tier;    /* a local slot, or a shared step's file */
	uint64_t step;
	int quarantined;        /* 1: this recovery moved the shared step to DIR/quarantine */
	char reason[PMCK_REASON_MAX];
};

/*
 * pmck_store_rejections -- the candidates the last recovery run on s
 * rejected (*n of them, may be 0), in the order they were rejected.  The
 * array belongs to the store; it stays valid until the next recovery on s
 * or pmck_store_close.  The rank of a local rejection is the one given to
 * pmck_recover_tiers, or the group's rank (pmck_global_new), else 0.
 * Returns NULL (and *n 0) when nothing was rejected.
 */
const struct pmck_rejection *pmck_store_rejections(const struct pmck_store *s, size_t *n);

struct pmck_tier_recovery {
	uint64_t step;
	enum pmck_tier tier;
	char path[4096];     /* the file loaded, for PMCK_TIER_SHARED */
	char reason[512];    /* why this tier was chosen */
};

/*
 * pmck_recover_tiers -- recovers the newest verified checkpoint of the
 * local store; if there is none (the ramdisk was lost, the node replaced),
 * imports the newest complete step of the store's layout in `shared_dir`
 * (by generation, then step: see copy-out) whose file for `rank`
 * verifies, trying older ones when one fails; steps of other layouts are
 * not considered.  Fills *out with the step, the tier and the reason;
 * every rejected local slot and shared step is listed by
 * pmck_store_rejections.  A complete step of one rank whose file fails
 * verification (or is missing) is moved to DIR/quarantine (see
 * "Quarantine"); a step of several ranks is left in place and reported:
 * this call sees one rank only, and pmck_global_recover moves it once the
 * group agrees.  Afterwards the checkpoint is readable through
 * pmck_store_tensor_data either way.
 * Errors: PMCK_E_NO_CHECKPOINT (no sealed slot and no complete step of
 * this layout: nothing was saved), PMCK_E_NONE_USABLE (there were such
 * checkpoints, and every one was rejected).
 */
int pmck_recover_tiers(struct pmck_store *s, const char *shared_dir, unsigned rank,
		struct pmck_tier_recovery *out);

/* ------------------------------------------------------ slot control */

/*
 * pmck_store_slot_step -- the step sealed in slot k (0 or 1), or -1 if the
 * slot holds no complete checkpoint.  Reads the seal only: no verification.
 */
int64_t pmck_store_slot_step(const struct pmck_store *s, unsigned k);

/*
 * pmck_store_slot_tensor_data -- read-only address of tensor idx in slot k
 * (0 or 1), whatever that slot holds: NOT verified, and valid only while no
 * checkpoint is in flight (a begin may be writing either slot).  For a
 * reader that overlaps its copies out of the newest sealed slot with
 * pmck_store_recover's verification, and keeps what it copied only if
 * recovery then makes that same slot readable (pmck_recovery.slot, with the
 * step pmck_store_slot_step read before): a load that reaches its
 * destination at the speed of the copy alone.  NULL for a bad k or idx.
 */
const void *pmck_store_slot_tensor_data(const struct pmck_store *s, unsigned k, size_t idx);

/*
 * pmck_store_slot_world -- the world size and rank of the global job
 * (pmck_global_new) that committed slot k, as recorded with its step.
 * rank and world_size may be NULL.  Reads the slot header only.
 * Errors: -ENOENT (the slot holds no complete checkpoint, or it was
 * committed outside a global job or before pmckpt recorded it), -ERANGE.
 */
int pmck_store_slot_world(const struct pmck_store *s, unsigned k, unsigned *rank,
		unsigned *world_size);

/*
 * pmck_store_recover_step -- like pmck_store_recover, for the slot sealed
 * with `step` (not necessarily the newest).  Errors: PMCK_E_NO_CHECKPOINT
 * (no slot holds step), PMCK_E_NONE_USABLE (it fails verification), -EBUSY.
 */
int pmck_store_recover_step(struct pmck_store *s, uint64_t step, struct pmck_recovery *info);

/*
 * pmck_store_discard_after -- durably unseals every slot whose step is
 * larger than `step` (a checkpoint that the other ranks never committed),
 * so that the next begin overwrites it and keeps `step`.  Errors: -EBUSY,
 * -EROFS (read-only region).
 */
int pmck_store_discard_after(struct pmck_store *s, uint64_t step);

/* ------------------------------------------------------- multi-rank */

/*
 * A global checkpoint of step s exists when every rank has committed s in
 * its own store.  Each rank may begin s+1 only once s is known to be
 * globally committed, so every rank's two slots always hold the newest
 * globally agreed step (see docs/multirank.md).  The agreement is an
 * allreduce-min of the committed step, started at local commit and
 * completed before the next begin, off the critical path.
 *
 * The collectives are the caller's (MPI: libpmckpt_mpi; torch.distributed:
 * the Python binding).  Every call below is collective: all ranks call it
 * in the same order.
 */
enum pmck_reduce_op { PMCK_REDUCE_MIN = 0, PMCK_REDUCE_MAX = 1 };

struct pmck_collectives {
	void *ctx;
	unsigned rank, size;
	/* In-place allreduce of one 64-bit unsigned integer; 0 or a negative error. */
	int (*allreduce_u64)(void *ctx, uint64_t *value, enum pmck_reduce_op op);
	int (*barrier)(void *ctx);
	/*
	 * Optional non-blocking allreduce (NULL: the agreement runs as a
	 * blocking allreduce at the next begin).  start returns a request;
	 * test sets *done (blocking until done if `wait`), and the result.
	 */
	int (*iallreduce_u64_start)(void *ctx, uint64_t value, enum pmck_reduce_op op, void **req);
	int (*iallreduce_u64_test)(void *ctx, void *req, int wait, int *done, uint64_t *result);
	/*
	 * The members below serve partner copies and are read by
	 * pmck_partner_new alone (pmck_global_new reads the struct only up to
	 * here, so programs built against the older, shorter struct keep
	 * working).  Leave them NULL without partner copies.
	 *
	 * Optional allgather: all[r] receives rank r's value (size entries).
	 * NULL: pmck_partner_new gathers with `size` allreduce-max calls.
	 */
	int (*allgather_u64)(void *ctx, uint64_t value, uint64_t *all);
	/*
	 * Required for partner copies: sends slen bytes of sbuf to rank dst
	 * while receiving rlen bytes from rank src into rbuf, returning when
	 * both are done; 0 or a negative error.  A half of length 0 is
	 * skipped, and pmckpt then makes the peer skip the matching half too.
	 * It is called from pmckpt's partner thread (and, during
	 * pmck_global_recover, from the caller's), concurrently with the
	 * reductions above on other threads: MPI needs MPI_THREAD_MULTIPLE
	 * (libpmckpt_mpi leaves it NULL below that), torch.distributed a
	 * group of its own.
	 */
	int (*sendrecv)(void *ctx, unsigned dst, const void *sbuf, size_t slen, unsigned src,
			void *rbuf, size_t rlen);
};

struct pmck_global;

/*
 * pmck_global_new -- ties store s (outliving *out) to the group described
 * by coll (copied).  Checks, collectively, that every rank has the same
 * world size and the same layout hash: a mismatch fails on every rank
 * with PMCK_E_LAYOUT or -EINVAL and a message, never a hang.
 */
int pmck_global_new(struct pmck_store *s, const struct pmck_collectives *coll,
		struct pmck_global **out);
void pmck_global_delete(struct pmck_global **g);

/*
 * pmck_global_begin -- completes the previous checkpoint's agreement (it
 * has usually finished in the background), then pmck_store_begin.
 * Errors: -EIO if the previous step was not committed by every rank: this
 * rank then has durably discarded it, and the next begin proceeds (keeping
 * the older, global step); -EIO whenever the collectives failed before
 * (the outcome is unknown: only pmck_global_recover clears that); those of
 * pmck_store_begin and the collectives.
 */
int pmck_global_begin(struct pmck_global *g, uint64_t step, struct pmck_ckpt **out);

/*
 * pmck_global_commit -- pmck_ckpt_commit, then starts the agreement on its
 * step (also when the commit failed: the other ranks learn it is not
 * global).  Returns the commit's error, else the agreement's.
 */
int pmck_global_commit(struct pmck_global *g, struct pmck_ckpt *c);

/*
 * pmck_global_note_commit -- starts the agreement on `step`, which this
 * rank committed (committed != 0) or failed to commit some other way, e.g.
 * on a pipeline's writer thread (struct pmck_pipeline_opts.global does this
 * itself).  Thread-safe against begin, progress and wait.  Errors:
 * -EINVAL if the previous agreement was not completed (by a begin or
 * wait), those of the collectives.
 */
int pmck_global_note_commit(struct pmck_global *g, uint64_t step, int committed);

/*
 * pmck_global_agreed -- the newest step known to be committed by every
 * rank, -1 if none; does not complete an agreement in flight.  Not
 * collective.
 */
int64_t pmck_global_agreed(struct pmck_global *g);

/*
 * pmck_global_progress -- lets the agreement in flight advance without
 * blocking (MPI makes progress only inside MPI calls): call it now and
 * then during compute, e.g. once per layer.  Returns 0, or the agreement's
 * error.  Not collective.
 */
int pmck_global_progress(struct pmck_global *g);

/*
 * pmck_global_wait -- completes the agreement in flight; *step (may be
 * NULL) receives the newest globally committed step (-1: none yet).
 */
int pmck_global_wait(struct pmck_global *g, int64_t *step);

/* What pmck_global_recover agreed on. */
struct pmck_global_recovery {
	uint64_t step;         /* the step every rank loaded */
	enum pmck_tier tier;   /* where this rank loaded it from */
	char reason[512];
};

/*
 * pmck_global_recover -- agrees with all ranks on the newest step that
 * every rank can produce (allreduce-min over each rank's newest verified
 * step, local slots first, then complete steps in shared_dir, which may be
 * NULL), loads it on every rank (from the local slot, or this rank's file
 * in shared_dir, e.g. after a node was replaced), discards local slots of
 * newer steps, and (rank 0) removes newer, incomplete steps from
 * shared_dir.  out->reason says where the step came from and why (a local
 * slot that failed verification is named, not taken for "no local copy").
 * With a partner tier (pmck_partner_new) the copies that each rank's
 * partner verified are candidates too, tried after the local slots and
 * before shared_dir; a rank that needs one receives it into its store
 * (out->tier PMCK_TIER_PARTNER), and every holder drops the copies it
 * holds newer than the agreed step.  When no step can be agreed and some
 * rank has nothing left, the message names it and the rank that held its
 * partner copy.
 *
 * Rejections (pmck_store_rejections on the group's store): each rank lists
 * its own rejected candidates, and every step the group passed over that
 * this rank could have loaded ("rank R cannot produce it").  A complete
 * shared step that some rank needed and found damaged (its file fails
 * verification, is truncated or missing) is moved to DIR/quarantine by
 * rank 0 once every rank has loaded the agreed step (so no rank reads it
 * any more), and listed on rank 0 with quarantined = 1; it is never
 * removed.
 *
 * World size: every commit of a store tied to a group records the group's
 * size and this rank (pmck_store_slot_world), and copy-out's markers record
 * it too.  If the newest checkpoint any rank sees (its newest local slot
 * with a recorded world size, else the newest complete shared step of its
 * layout) was written by another world size, every rank fails with
 * PMCK_E_WORLD_SIZE naming both sizes, before anything is loaded,
 * discarded or removed.  Candidates are local slots not recorded with
 * another world size and the shared steps of this layout and world size of
 * their newest generation; rank 0 removes only newer incomplete steps
 * (newer complete ones found damaged are quarantined, see above).
 * Errors (on every rank alike): PMCK_E_WORLD_SIZE; PMCK_E_NO_CHECKPOINT
 * when no rank has any checkpoint; PMCK_E_NONE_USABLE when some rank has
 * one but no step can be produced by every rank; those of the collectives.
 */
int pmck_global_recover(struct pmck_global *g, const char *shared_dir,
		struct pmck_global_recovery *out);

/* ---------------------------------------------------- partner copies */

/*
 * A lost node takes its ramdisk or PM with it.  Partner copies keep each
 * rank's checkpoint also in the memory of a rank on another node, sent in
 * the background through the job's own transport (the collectives'
 * sendrecv), so that a replacement node recovers the newest step from the
 * partners, without a shared file system.
 *
 * Placement: every rank says which node it is on (pmck_partner_opts.node:
 * from the launcher, e.g. pmck_mpi_node, LOCAL_WORLD_SIZE, or explicit).
 * Nodes are numbered by their lowest rank, ranks within a node by rank.
 * When all k >= 2 nodes have the same number of ranks, local rank i of
 * node n sends to local rank i of node (n + 1 + i mod (k - 1)) mod k: a
 * node's ranks spread their copies over the other nodes, and every rank
 * holds exactly one partner copy.  Otherwise the ranks, listed node by
 * node, send to the rank `largest node size` places further along (a
 * cyclic shift, so still one each), which leaves every node when no node
 * holds more than half of the ranks; else pmck_partner_new fails on every
 * rank.  The rule depends on the node grouping alone: a job restarted with
 * the same grouping finds its copies where it left them.
 *
 * A round: each step, right after its commit (pmck_global_commit,
 * pmck_global_note_commit, or a global pipeline's writer), the committed
 * slot is pinned (begin does not overwrite it) and queued; the partner
 * thread sends it to the target and,
 * at the same time, receives the source's step into a two-slot store it
 * holds for the source, <dir>/pmckpt-<name>.partner-of-<R>.pool (in the
 * next of ceil(keep / 2) stores; the newest `keep` copies stay sealed).
 * The receiver writes the data straight into its slot, flushes it, and
 * seals it only if every tensor's checksum equals the sender's committed
 * one; it then confirms to the sender.  Every rank runs every round, also
 * when its own commit failed (it then sends nothing for that step), so
 * the sendrecv calls always pair.  The group's agreement on the step
 * starts when its round has ended, and counts the step as committed only
 * where the round succeeded: so a step is global only when every rank
 * committed it and every partner copy of it is sealed, and every rank's
 * two local slots keep the newest such step (docs/multirank.md).  A round
 * that takes longer than a training step delays the next begin.
 *
 * Recovery (pmck_global_recover with a partner attached): each holder
 * verifies the copies it holds and tells their owner which steps verify;
 * those are candidates of the owner's, tried after its local slots and
 * before the shared directory.  A rank that loads from its partner
 * receives the step into its own store (checksums compared before the
 * seal), and out->tier says PMCK_TIER_PARTNER.
 */
struct pmck_partner;

struct pmck_partner_opts {
	/* This rank's node: ranks with equal values share a node (hostname hash, launcher rank). */
	uint64_t node;
	/*
	 * Where this rank keeps the copies it holds for others: a ramdisk
	 * directory (NULL: the caller's own, /dev/shm/pmckpt-<uid>), or PM
	 * through pm_dir, a directory on fsdax.  Checked and made as for
	 * pmck_local_open (private unless PMCK_LOCAL_SHARED_DIR in flags).
	 */
	const char *ramdisk_dir;
	const char *pm_dir;
	const char *store_name; /* this rank's store name, for the file names; NULL: "default" */
	/*
	 * 0 or 1: every step is copied.  N > 1: every N-th round is (the
	 * first after pmck_partner_new, then every N-th; a step resent by
	 * recovery counts as one); the rounds between only offer their step.
	 * A copied step also goes into this rank's self store,
	 * pmckpt-<store_name>.partner-self.pool beside the held copies (two
	 * states more), so that a lost node's survivors still hold it when
	 * their two slots have moved on.  A lost node then comes back to the
	 * newest global step that was copied; a kill without a lost node to
	 * the newest global step, as always.
	 */
	unsigned every;
	unsigned keep;          /* newest copies kept per partner, 1..PMCK_PARTNER_KEEP_MAX; 0: 2 */
	unsigned flags;         /* PMCK_LOCAL_SHARED_DIR */
};
#define PMCK_PARTNER_KEEP_MAX 8

/* Counters of a partner tier since pmck_partner_new. */
struct pmck_partner_stats {
	uint64_t rounds;        /* rounds run */
	uint64_t sent;          /* copies of this rank's steps the target sealed (confirmed) */
	int64_t confirmed_step; /* newest of them, -1: none */
	uint64_t received;      /* copies sealed for the source */
	int64_t held_step;      /* newest of them, -1: none */
	uint64_t rejected;      /* copies received that failed the sender's checksums (not sealed) */
	uint64_t bytes_sent, bytes_received;
	uint64_t busy_ns;       /* time the partner thread spent in rounds */
	unsigned target, source;/* the ranks this one sends to and holds copies of */
	int64_t self_step;      /* every > 1: newest step in this rank's self store, -1: none */
};

/*
 * pmck_partner_new -- gives the group g a partner tier (collective: every
 * rank of g calls it, after pmck_global_new and before
 * pmck_global_recover).  coll: the collectives given to pmck_global_new,
 * with sendrecv (and optionally allgather_u64) filled in; copied.  Gathers the ranks' nodes, places the copies (see
 * above; every rank computes the same placement), opens or creates the
 * stores this rank holds for its source, with g's layout, and starts the
 * partner thread.  From then on g's commits start rounds and
 * pmck_global_recover tries the partner tier.  g must outlive *out.
 * Errors (on every rank alike where they come from the placement):
 * -EINVAL (all ranks on one node; a node with more than half the ranks;
 * bad options; `every` not the same on every rank; collectives without sendrecv), those of pmck_local_open for
 * the held stores (PMA_E_UNSAFE, PMCK_E_LAYOUT, PMA_E_BUSY) and of the
 * collectives.
 */
int pmck_partner_new(struct pmck_global *g, const struct pmck_collectives *coll,
		const struct pmck_partner_opts *opts, struct pmck_partner **out);

/*
 * pmck_partner_delete -- waits for the queued rounds (they need the
 * peers: every rank deletes its tier at the same point), stops the thread,
 * closes the held stores and detaches the tier from its group.
 */
void pmck_partner_delete(struct pmck_partner **p);

/*
 * pmck_partner_wait -- waits until every queued round has ended; returns
 * the first failure since the last check (and clears it), or 0.  A failed
 * round loses one copy, not the local checkpoint: the next round sends
 * the next step.  Errors: the round's, e.g. the transport's, or
 * PMCK_E_CORRUPT (a received copy failed the sender's checksums).
 */
int pmck_partner_wait(struct pmck_partner *p);

void pmck_partner_stats(struct pmck_partner *p, struct pmck_partner_stats *st);

/*
 * pmck_partner_place -- the placement rule on its own: target[r] for
 * every rank r of a job whose rank r is on node[r] (n ranks).  Errors:
 * -EINVAL with a message (one node; a node with more than half the ranks).
 */
int pmck_partner_place(const uint64_t *node, unsigned n, unsigned *target);

/*
 * pmck_tensor_checksum -- the checksum pmckpt stores for len bytes:
 * XXH3-64 over the little-endian XXH3-64 values of each PMCK_HASH_CHUNK
 * chunk (the last one may be short).
 */
uint64_t pmck_tensor_checksum(const void *data, uint64_t len);

#ifdef __cplusplus
}
#endif
#endif /* PMCKPT_H */
