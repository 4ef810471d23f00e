/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * pipeline.c -- asynchronous, layer-wise checkpoint writing.
 *
 * put_layer splits each tensor of a layer into pieces of PIECE bytes and
 * queues them (FIFO).  Writer threads take pieces, copy them into the
 * slot (CPU fused copy + checksum, or from a GPU), then drain, so that a
 * layer's pending count reaches zero only after its bytes are durable.
 * The writer that finishes the last piece of the last layer commits.
 *
 * With PMCK_PIPELINE_VERIFY_SOURCES, the writer that finishes a layer's
 * last copy queues one verify job per piece of the layer at the front of
 * the queue; the layer is done (wait_layer returns) once they have
 * compared each piece's source with the chunk hashes of what was copied.
 *
 * Lock order: p->lock only; store calls run outside it except begin.
 */
#include <errno.h>
#include <numa.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "gpu.h"

#define PIECE (8 * PMCK_HASH_CHUNK)
#define MAX_THREADS 64
#define NO_WRITER UINT8_MAX
/* Device hashing: chunks in a put's first hash kernel; each next one takes twice as many. */
#define HASH_GROUP_FIRST 16
_Static_assert(PIECE <= PMCK_GPU_SUB * PMCK_GPU_MAX_SUB, "a GPU job's sub-copies");
_Static_assert(PMCK_GPU_SUB_DMA % PMCK_HASH_CHUNK == 0 && PMCK_GPU_SUB_DMA <= PIECE,
		"DMA sub-copies land hash-chunk aligned, within a piece");
_Static_assert(PMCK_GPU_SUB % PMCK_HASH_CHUNK == 0, "sub-copies land hash-chunk aligned");
_Static_assert(PIECE <= PMCK_HASH_CHUNK * PMCK_GPU_MAX_SUB, "$PMCK_GPU_SUB_MIB=1 fits a piece");
_Static_assert(PMCK_HASH_CHUNK == (size_t)1 << 20, "$PMCK_GPU_SUB_MIB counts hash chunks");

struct job {
	uint32_t tensor;
	uint32_t layer; /* dense index */
	uint64_t off, len;
	const void *src; /* bytes [off, off+len) of the tensor start here */
	int verify;      /* compare the source with what was copied, do not copy */
	uint32_t seq;    /* the checkpoint's n-th copy job (GPU: its done event) */
	/* GPU: copies from the snapshot after snapshot event `snapped`; -1: from src after ready */
	int32_t snapped;
};

struct pmck_pipeline {
	struct pmck_store *store;
	struct pmck_pipeline_opts opts;
	struct pmck_gpu *gpu;
	size_t gpu_sub;        /* bytes per sub-copy of a GPU job (gpu.h) */
	unsigned commit_delay_ms; /* $PMCK_TEST_COMMIT_DELAY_MS: tests hold commits back */
	int gpu_hash;          /* the GPU hashes (all but C; gpu.h): gpu_hash_mode */
	unsigned pace_gbps;    /* $PMCK_GPU_RATE_GBPS: GPU pieces paced (pace.c), 0: not */
	pthread_mutex_t lock;
	pthread_cond_t work;   /* workers: a job is queued, or stop */
	pthread_cond_t done;   /* callers: a layer or the checkpoint finished */
	pthread_t threads[MAX_THREADS];
	struct bitmask *cpus;  /* the writers' CPUs (the region's node), NULL: anywhere */
	void *staging[MAX_THREADS]; /* strategy C: one pinned buffer per writer */
	unsigned nthreads;
	int stop;

	uint32_t nlayers;
	uint32_t *layer_id;      /* sorted distinct layer numbers */
	uint32_t *tensor_layer;  /* tensor -> dense layer index */
	/* Layer ix's tensors, in tensor order: layer_tensor[layer_tstart[ix] .. layer_tstart[ix + 1]] */
	uint32_t *layer_tstart, *layer_tensor;
	/*
	 * Strategy G: one put's snapshot copies, batched (room for every tensor).
	 * Snapshots on wait (opts.snapshot_on_wait): one wait's, room for every job.
	 */
	uint64_t *snap_off;
	const void **snap_src;
	size_t *snap_len;
	uint32_t *put_ix;        /* the dense indices of a put's layers (room for every layer) */
	/* Device hashing: one put's chunks for the GPU to hash (room for every chunk) */
	const void **hash_src;
	size_t *hash_len, *hash_slot;
	/*
	 * Device hashing: a put's chunks go to the GPU as a run of kernels,
	 * each over whole layers (hash_group_end: where each ends in hash_src;
	 * hash_group_event: its hashed event, the dense index of its first
	 * layer), so that a writer waits only for the kernel of its own layer.
	 * layer_hash_event: the hashed event of the kernel that took the layer.
	 */
	size_t *hash_group_end;
	uint32_t *hash_group_event, *layer_hash_event;

	struct job *queue;       /* ring of qcap jobs: one checkpoint at most (twice, verifying) */
	size_t qcap, qhead, qlen;
	int verify;              /* PMCK_PIPELINE_VERIFY_SOURCES on host sources */
	struct job *vjobs;       /* this checkpoint's copy jobs in put order, to verify */
	size_t nvjobs;
	size_t *layer_vfirst;    /* layer's jobs: vjobs[layer_vfirst[l] ..] */
	uint64_t *layer_copies;  /* copy jobs queued or running per layer */

	struct pmck_ckpt *ckpt;
	int active;              /* begun and neither committed nor failed */
	int skipping;            /* begin returned PMCK_SKIPPED */
	uint8_t *layer_put;
	uint64_t *layer_pending; /* pieces queued or running per layer */
	/* GPU sources: layer's jobs are seq layer_first .. + layer_njobs; layer_started enqueued */
	uint32_t *layer_first, *layer_njobs, *layer_started;
	uint32_t *layer_event;   /* GPU sources: the ready/snapshot event of the layer's put */
	/*
	 * GPU sources: job seq's copies were enqueued by writer job_writer[seq]
	 * (NO_WRITER: none were) on its stream.  Writers take jobs from the
	 * queue in seq order, so each stream runs its jobs in seq order: a
	 * caller's stream waits only for each writer's highest seq among the
	 * jobs it needs (wait_layers_stream).
	 */
	uint8_t *job_writer;
	/*
	 * Snapshots on wait: the layer's first layer_direct jobs read the source;
	 * the others (a suffix) were snapshotted by a wait.  snapshot_used bytes
	 * of the memory are taken in this checkpoint; last_snapped: the snapshot
	 * event recorded last (-1: none yet), which a caller's stream waits for.
	 */
	uint32_t *layer_direct;
	size_t snapshot_room;    /* opts.snapshot_on_wait and the pieces' alignment */
	size_t snapshot_used;
	int last_snapped;
	uint32_t nseq;           /* copy jobs queued in this checkpoint */
	uint32_t layers_put;
	uint64_t outstanding;
	int error;               /* first failure of the checkpoint in flight */
	char errmsg[512];        /* its message (written on a writer thread, whose buffer is its own) */
	int result;              /* outcome of the last finished checkpoint */
	struct pmck_pipeline_stats stats;
};

/*
 * libnuma fills its node-to-CPUs cache without a lock on first use, so
 * threads asking at once leak (or lose) entries: ask under this lock, once
 * per pipeline, and let the writers only apply the answer.
 */
static pthread_mutex_t numa_lock = PTHREAD_MUTEX_INITIALIZER;

static struct bitmask *
node_cpus(int node)
{
	if (node < 0 || numa_available() < 0)
		return NULL;
	struct bitmask *cpus = numa_allocate_cpumask();
	pthread_mutex_lock(&numa_lock);
	int ret = numa_node_to_cpus(node, cpus);
	pthread_mutex_unlock(&numa_lock);
	if (ret || numa_bitmask_weight(cpus) == 0) {
		numa_free_cpumask(cpus);
		return NULL;
	}
	return cpus;
}

static int
is_gpu(const struct pmck_pipeline *p)
{
	return p->opts.source != PMCK_SOURCE_HOST;
}

/*
 * Hashes a piece's source again, chunk by chunk as the copy did, and
 * compares with the hashes of what was copied (the commit's checksums are
 * made from them).  Runs on a writer thread after the layer's last copy.
 */
static int
verify_piece(struct pmck_pipeline *p, const struct job *j)
{
	struct pmck_store *s = p->store;
	const uint64_t *hash = &s->chunk_hash[s->chunk_first[j->tensor]];

	for (uint64_t pos = 0; pos < j->len; pos += PMCK_HASH_CHUNK) {
		uint64_t n = j->len - pos < PMCK_HASH_CHUNK ? j->len - pos : PMCK_HASH_CHUNK;
		if (pmck__hash((const char *)j->src + pos, n) != hash[(j->off + pos) / PMCK_HASH_CHUNK])
			return pma__err(PMCK_E_SOURCE_CHANGED, "tensor '%s' changed while its "
					"checkpoint was written (bytes %llu..%llu differ from what "
					"was copied): step %llu is not committed; update a tensor "
					"only after wait_layer of its layer", s->tmap[j->tensor].name,
					(unsigned long long)(j->off + pos),
					(unsigned long long)(j->off + pos + n),
					(unsigned long long)pmck_ckpt_step(p->ckpt));
	}
	return 0;
}

static void fail_locked(struct pmck_pipeline *p, int ret);

/*
 * A GPU job that reads its source has its copies enqueued by writer `self`
 * (NO_WRITER: nothing was, or never will be): stream-ordered waiters may
 * order after it.  (A job reading a snapshot is waited for through the
 * snapshot's event.)  Lock held.
 */
static void
job_started_locked(struct pmck_pipeline *p, const struct job *j, unsigned self)
{
	p->job_writer[j->seq] = (uint8_t)self;
	if (j->snapped < 0 && ++p->layer_started[j->layer] == p->layer_direct[j->layer])
		pthread_cond_broadcast(&p->done);
}

/*
 * As job_started_locked, after copy_start returned ret: a failure is the
 * checkpoint's before the job counts as started, so that no waiter orders
 * after copies that were not all enqueued.
 */
static void
job_started(struct pmck_pipeline *p, const struct job *j, unsigned self, int ret)
{
	pthread_mutex_lock(&p->lock);
	fail_locked(p, ret);
	job_started_locked(p, j, ret ? NO_WRITER : self);
	pthread_mutex_unlock(&p->lock);
}

/* A writer's clock for the piece it runs (pmck_pipeline_stats' writer_*). */
struct writer_clock {
	uint64_t copy_wait_ns, hash_wait_ns;
	uint64_t landed_ns; /* when its last sub-copy landed (0: none did) */
};

/*
 * Device hashing: once the hash kernel of the piece's layer is done, its chunks
 * that the GPU hashed (pmck__gpu_hashable, decided on the same address as
 * at the put) take its results; the others are hashed from what landed.
 */
static int
take_gpu_hashes(struct pmck_pipeline *p, const struct job *j, struct writer_clock *clk)
{
	uint64_t hashes[PIECE / PMCK_HASH_CHUNK];
	uint8_t given[PIECE / PMCK_HASH_CHUNK];
	size_t slot = p->store->chunk_first[j->tensor] + j->off / PMCK_HASH_CHUNK;
	uint64_t t0 = pmck__now_ns();
	int ret = pmck__gpu_hash_wait(p->gpu, p->layer_hash_event[j->layer]);

	clk->hash_wait_ns += pmck__now_ns() - t0;

	if (ret)
		return ret;
	for (uint64_t pos = 0, k = 0; pos < j->len; pos += PMCK_HASH_CHUNK, k++) {
		uint64_t n = j->len - pos < PMCK_HASH_CHUNK ? j->len - pos : PMCK_HASH_CHUNK;
		given[k] = (uint8_t)pmck__gpu_hashable((const char *)j->src + pos, n);
		hashes[k] = given[k] ? pmck__gpu_hash_result(p->gpu, slot + k) : 0;
	}
	return pmck__ckpt_landed_hashed(p->ckpt, j->tensor, j->off, j->len, hashes, given);
}

/*
 * A piece from device memory: its sub-copies are enqueued at once on this
 * writer's stream, after the layer's ready event (the caller's work that
 * produced the sources), and each is flushed and hashed as it lands while
 * the next ones are still crossing PCIe.  Strategy C lands in the writer's
 * pinned buffer and is copied on by the fused copy; G copies from the
 * layer's snapshot, after its snapshot event.
 */
static int
run_gpu_job(struct pmck_pipeline *p, const struct job *j, unsigned self,
		struct pmck_gpu_stream *ws, struct writer_clock *clk)
{
	struct pmck_ckpt *c = p->ckpt;
	int staged = p->opts.source == PMCK_SOURCE_GPU_STAGED;
	enum pmck_gpu_copy how = staged ? PMCK_GPU_TO_HOST :
		p->opts.source == PMCK_SOURCE_GPU_KERNEL ? PMCK_GPU_KERNEL : PMCK_GPU_DMA;
	char *dst = staged ? p->staging[self] : (char *)pmck_ckpt_tensor_ptr(c, j->tensor) + j->off;
	unsigned nsub = 0;
	int ret = pmck__gpu_copy_start(ws, j->snapped >= 0 ? (unsigned)j->snapped :
			p->layer_event[j->layer], j->snapped >= 0, how, dst, j->src, j->len,
			p->gpu_sub, j->seq, &nsub);

	job_started(p, j, self, ret);
	for (unsigned i = 0; i < nsub && !ret; i++) {
		uint64_t off = (uint64_t)i * p->gpu_sub;
		uint64_t n = j->len - off < p->gpu_sub ? j->len - off : p->gpu_sub;
		uint64_t t0 = pmck__now_ns();
		if ((ret = pmck__gpu_copy_wait(ws, i)))
			break;
		clk->landed_ns = pmck__now_ns();
		clk->copy_wait_ns += clk->landed_ns - t0;
		if (staged)
			ret = pmck_ckpt_write_range(c, j->tensor, j->off + off, dst + off, n);
		else if (p->gpu_hash)
			pmck__ckpt_flush_landed(c, j->tensor, j->off + off, n); /* hashed on the GPU */
		else
			ret = pmck__ckpt_landed(c, j->tensor, j->off + off, n);
	}
	if (!ret && p->gpu_hash)
		ret = take_gpu_hashes(p, j, clk);
	/* After a failure no copy of this job may still be landing when the slot is reused. */
	if (ret && nsub)
		pmck__gpu_copy_wait(ws, nsub - 1); /* the stream runs in order: the last one is all */
	return ret;
}

/* Copies one piece into the slot and makes it durable; runs on a writer thread. */
static int
run_job(struct pmck_pipeline *p, const struct job *j, unsigned self, struct pmck_gpu_stream *ws,
		struct writer_clock *clk)
{
	int ret;

	if (j->verify)
		return verify_piece(p, j);
	if (p->opts.source == PMCK_SOURCE_HOST)
		ret = pmck_ckpt_write_range(p->ckpt, j->tensor, j->off, j->src, j->len);
	else
		ret = run_gpu_job(p, j, self, ws, clk);
	/* Persist point: this thread's non-temporal stores and flushes of the piece are durable. */
	pma_region_drain(p->store->region);
	return ret;
}

static void finish_locked(struct pmck_pipeline *p);
static void queue_verify_locked(struct pmck_pipeline *p, uint32_t layer);

/*
 * The checkpoint in flight fails with ret (the first failure counts), and
 * its message, this thread's, is kept for every later caller.  Lock held.
 */
static void
fail_locked(struct pmck_pipeline *p, int ret)
{
	if (!ret || p->error)
		return;
	p->error = ret;
	snprintf(p->errmsg, sizeof(p->errmsg), "%s", pma_errormsg());
}

static void *
writer(void *arg)
{
	struct pmck_pipeline *p = arg;
	unsigned self;

	pthread_mutex_lock(&p->lock);
	for (self = 0; self < p->nthreads && !pthread_equal(p->threads[self], pthread_self()); self++)
		;
	pthread_mutex_unlock(&p->lock);
	if (p->cpus)
		numa_sched_setaffinity(0, p->cpus); /* best effort: a single-node box needs nothing */
	/* GPU sources: a non-blocking stream of this writer's own (gpu.h). */
	struct pmck_gpu_stream *ws = NULL;
	int bind_err = is_gpu(p) ? pmck__gpu_stream_new(p->gpu, &ws) : 0;
	/*
	 * SCHED_BATCH: the same CPU share, but a writer woken by put_layer never
	 * preempts the training thread that woke it.  Measured on the 2-vCPU VM
	 * (pmck-pipebench): 30-50% of checkpoints stalled 2.7-5.4 ms in
	 * put_layer instead of 0.6 ms, waiting out a writer's time slice; with
	 * SCHED_BATCH writers 36 of 36 stayed at 0.5-1.0 ms.  Best effort.
	 */
	struct sched_param batch = {0};
	pthread_setschedparam(pthread_self(), SCHED_BATCH, &batch);

	pthread_mutex_lock(&p->lock);
	for (;;) {
		while (!p->stop && p->qlen == 0)
			pthread_cond_wait(&p->work, &p->lock);
		if (p->qlen == 0)
			break; /* stop, and nothing left */
		struct job j = p->queue[p->qhead];
		p->qhead = (p->qhead + 1) % p->qcap;
		p->qlen--;
		int skip = p->error != 0;
		pthread_mutex_unlock(&p->lock);

		/*
		 * $PMCK_GPU_RATE_GBPS: the piece first waits for its interval on the
		 * process's schedule of copies out of the device (pace.c); not busy
		 * time.  The checkpoint may have failed meanwhile: asked again after.
		 */
		if (p->pace_gbps && j.len && !bind_err && !skip) {
			pmck__pace(p->pace_gbps, j.len);
			pthread_mutex_lock(&p->lock);
			skip = p->error != 0;
			pthread_mutex_unlock(&p->lock);
		}
		struct writer_clock clk = {0};
		uint64_t t0 = pmck__now_ns();
		int ret = bind_err ? bind_err : skip ? 0 : run_job(p, &j, self, ws, &clk);
		uint64_t t1 = pmck__now_ns();

		pthread_mutex_lock(&p->lock);
		if (!bind_err && !skip) {
			p->stats.writer_busy_ns += t1 - t0;
			p->stats.writer_copy_wait_ns += clk.copy_wait_ns;
			p->stats.writer_hash_wait_ns += clk.hash_wait_ns;
			p->stats.writer_tail_ns += clk.landed_ns ? t1 - clk.landed_ns : 0;
		}
		if (is_gpu(p) && (bind_err || skip))
			job_started_locked(p, &j, NO_WRITER); /* nothing enqueued: nothing to order after */
		fail_locked(p, ret);
		if (p->verify && !j.verify && --p->layer_copies[j.layer] == 0)
			queue_verify_locked(p, j.layer);
		p->outstanding--;
		if (--p->layer_pending[j.layer] == 0)
			pthread_cond_broadcast(&p->done);
		if (p->outstanding == 0 && p->layers_put == p->nlayers)
			finish_locked(p);
	}
	pthread_mutex_unlock(&p->lock);
	pmck__gpu_stream_delete(&ws);
	return NULL;
}

/*
 * The last piece has landed: commit (or abort after a failure).  Called with
 * the lock held; commit runs without it, and nothing else touches the
 * checkpoint meanwhile because all its pieces are done and begin waits
 * for `active` to clear.
 */
static void
finish_locked(struct pmck_pipeline *p)
{
	int ret = p->error;
	uint64_t step = pmck_ckpt_step(p->ckpt);
	int committed = 0;

	pthread_mutex_unlock(&p->lock);
	if (p->commit_delay_ms) {
		struct timespec d = {p->commit_delay_ms / 1000, (p->commit_delay_ms % 1000) * 1000000L};
		while (nanosleep(&d, &d) && errno == EINTR)
			;
	}
	uint64_t commit_ns = 0;
	if (!ret) {
		uint64_t t0 = pmck__now_ns();
		committed = !(ret = pmck_ckpt_commit(p->ckpt));
		commit_ns = pmck__now_ns() - t0;
	}
	if (ret)
		pmck_ckpt_abort(p->ckpt);
	else if (p->opts.copyout)
		ret = pmck_copyout_submit(p->opts.copyout); /* pins the new slot, returns at once */
	if (p->opts.global) {
		/*
		 * Start the agreement right at the local commit, off the training
		 * thread; begin completes it before touching the older slot.
		 * A failed commit takes part too, offering the last global step.
		 */
		int gret = pmck_global_note_commit(p->opts.global, step, committed);
		if (gret && !ret)
			ret = gret;
	}
	/* Before anyone waiting in begin is woken: the callback sees steps in order. */
	if (p->opts.on_commit)
		p->opts.on_commit(p->opts.on_commit_arg, step, ret);
	pthread_mutex_lock(&p->lock);
	if (ret && !p->error)
		snprintf(p->errmsg, sizeof(p->errmsg), "%s", pma_errormsg());
	if (committed) {
		p->stats.committed++;
		p->stats.last_step = step;
	}
	p->stats.commit_ns += commit_ns;
	p->result = ret;
	p->error = ret;
	p->active = 0;
	pthread_cond_broadcast(&p->done);
}

static int
layer_index(const struct pmck_pipeline *p, uint32_t layer)
{
	uint32_t lo = 0, hi = p->nlayers;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (p->layer_id[mid] < layer)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < p->nlayers && p->layer_id[lo] == layer ? (int)lo : -1;
}

static int
cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

/* Distinct layers, the tensor -> layer map and the queue size. */
static int
index_layers(struct pmck_pipeline *p)
{
	size_t n = pmck_store_ntensors(p->store);
	struct pmck_tensor_info ti;

	p->layer_id = malloc(n * sizeof(*p->layer_id));
	p->tensor_layer = malloc(n * sizeof(*p->tensor_layer));
	if (!p->layer_id || !p->tensor_layer)
		return pma__err(-ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		pmck_store_tensor(p->store, i, &ti);
		p->layer_id[i] = ti.layer;
		p->qcap += ti.nbytes ? (ti.nbytes + PIECE - 1) / PIECE : 1;
	}
	qsort(p->layer_id, n, sizeof(*p->layer_id), cmp_u32);
	for (size_t i = 0; i < n; i++)
		if (i == 0 || p->layer_id[i] != p->layer_id[p->nlayers - 1])
			p->layer_id[p->nlayers++] = p->layer_id[i];
	/*
	 * put_layer queues a layer's tensors from this index, not by a scan of
	 * all tensors: a GPT-2 state has 1175 tensors in 444 layers, put one by
	 * one on every checkpoint.
	 */
	p->layer_tstart = calloc(p->nlayers + 1, sizeof(*p->layer_tstart));
	p->layer_tensor = malloc((n ? n : 1) * sizeof(*p->layer_tensor));
	if (!p->layer_tstart || !p->layer_tensor)
		return pma__err(-ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		pmck_store_tensor(p->store, i, &ti);
		p->tensor_layer[i] = (uint32_t)layer_index(p, ti.layer);
		p->layer_tstart[p->tensor_layer[i]]++;
	}
	/* Counts into ends, then each layer filled backwards from its end down to its start. */
	for (uint32_t l = 1; l < p->nlayers; l++)
		p->layer_tstart[l] += p->layer_tstart[l - 1];
	p->layer_tstart[p->nlayers] = (uint32_t)n;
	for (size_t i = n; i-- > 0;)
		p->layer_tensor[--p->layer_tstart[p->tensor_layer[i]]] = (uint32_t)i;
	if (p->verify) {
		p->vjobs = malloc(p->qcap * sizeof(*p->vjobs));
		p->layer_vfirst = calloc(p->nlayers, sizeof(*p->layer_vfirst));
		p->layer_copies = calloc(p->nlayers, sizeof(*p->layer_copies));
		if (!p->vjobs || !p->layer_vfirst || !p->layer_copies)
			return pma__err(-ENOMEM, "out of memory");
		p->qcap *= 2; /* a layer's verify jobs may be queued beside every copy job */
	}
	p->queue = malloc(p->qcap * sizeof(*p->queue));
	p->layer_put = calloc(p->nlayers, 1);
	p->layer_pending = calloc(p->nlayers, sizeof(*p->layer_pending));
	p->layer_first = calloc(p->nlayers, sizeof(*p->layer_first));
	p->layer_njobs = calloc(p->nlayers, sizeof(*p->layer_njobs));
	p->layer_started = calloc(p->nlayers, sizeof(*p->layer_started));
	p->layer_event = calloc(p->nlayers, sizeof(*p->layer_event));
	p->layer_direct = calloc(p->nlayers, sizeof(*p->layer_direct));
	p->put_ix = calloc(p->nlayers ? p->nlayers : 1, sizeof(*p->put_ix));
	if (!p->queue || !p->layer_put || !p->layer_pending || !p->layer_first || !p->layer_njobs ||
	    !p->layer_started || !p->layer_event || !p->layer_direct || !p->put_ix)
		return pma__err(-ENOMEM, "out of memory");
	return 0;
}

/*
 * A whole number from lo to hi in environment variable `name`: *v, or 0 when
 * it is unset or empty; anything else is -EINVAL, the message naming the
 * variable, its value and what it takes ("<what> is a whole number of <unit>
 * from lo to hi<tail>").
 */
static int
env_whole(const char *name, const char *what, const char *unit, unsigned long lo,
		unsigned long hi, const char *tail, unsigned long *v)
{
	const char *e = getenv(name);
	char *end;

	*v = 0;
	if (!e || !*e)
		return 0;
	errno = 0;
	unsigned long n = strtoul(e, &end, 10);
	if (errno || *end || *e == '-' || n < lo || n > hi)
		return pma__err(-EINVAL, "%s=%s: %s is a whole number of %s from %lu to %lu%s",
				name, e, what, unit, lo, hi, tail);
	*v = n;
	return 0;
}

/*
 * The sub-copy size: PMCK_GPU_SUB_DMA for the DMA strategies, PMCK_GPU_SUB for
 * the others (gpu.h says why), or $PMCK_GPU_SUB_MIB whole MiB (1 to 8), for tuning.
 */
static int
gpu_sub_size(enum pmck_source source, size_t *sub)
{
	unsigned long mib;
	int ret = env_whole("PMCK_GPU_SUB_MIB", "the GPU sub-copy size", "MiB", 1,
			PIECE / PMCK_HASH_CHUNK, "", &mib);

	*sub = mib ? mib * PMCK_HASH_CHUNK : source == PMCK_SOURCE_GPU_DIRECT ||
			source == PMCK_SOURCE_GPU_SNAPSHOT ? PMCK_GPU_SUB_DMA : PMCK_GPU_SUB;
	return ret;
}

/*
 * $PMCK_TEST_COMMIT_DELAY_MS, for tests (0 to 10000, default 0): each commit
 * waits that long first, so that a checkpoint is still in flight when the
 * next begins (the window of late commits that crash tests aim their kills at).
 */
static int
test_commit_delay(unsigned *ms)
{
	unsigned long v;
	int ret = env_whole("PMCK_TEST_COMMIT_DELAY_MS", "a test's delay before each commit",
			"milliseconds", 0, 10000, "", &v);

	*ms = (unsigned)v;
	return ret;
}

/*
 * $PMCK_GPU_RATE_GBPS (1 to PMCK__PACE_MAX_GBPS; unset: 0, not paced): the
 * GPU writers' pieces paced for the whole process (pace.c).
 */
static int
gpu_pace(unsigned *gbps)
{
	unsigned long v;
	int ret = env_whole("PMCK_GPU_RATE_GBPS", "the GPU copies' pace", "GB/s", 1,
			PMCK__PACE_MAX_GBPS, " (unset: as fast as they go)", &v);

	*gbps = (unsigned)v;
	return ret;
}

/*
 * An environment variable that names one of two settings: *second is 0 when
 * `name` is unset, empty or `first` (the default), 1 when it is `second`;
 * anything else is -EINVAL, its message saying what each value does (help).
 */
static int
env_either(const char *name, const char *first, const char *second, const char *help,
		int *is_second)
{
	const char *e = getenv(name);

	*is_second = 0;
	if (!e || !*e || !strcmp(e, first))
		return 0;
	if (strcmp(e, second))
		return pma__err(-EINVAL, "%s=%s: %s", name, e, help);
	*is_second = 1;
	return 0;
}

/*
 * Where the pieces are hashed: opts.flags' PMCK_PIPELINE_GPU_HASH_HOST (the
 * writers hash the bytes that landed) or _DEVICE (the GPU hashes the
 * sources, gpu.h), neither the host; $PMCK_GPU_HASH ("host" or "device"),
 * when set, decides instead.  C keeps hashing in its fused copy into the
 * region, which reads the bytes anyway.
 */
static int
gpu_hash_mode(const struct pmck_pipeline_opts *o, int *device)
{
	const char *e = getenv("PMCK_GPU_HASH");
	int ret = 0;

	if (e && *e)
		ret = env_either("PMCK_GPU_HASH", "host", "device", "'host' (the writers hash "
				"what lands) or 'device' (the GPU hashes the sources)", device);
	else
		*device = !!(o->flags & PMCK_PIPELINE_GPU_HASH_DEVICE);
	*device = *device && o->source != PMCK_SOURCE_GPU_STAGED;
	return ret;
}

/*
 * $PMCK_GPU_WAIT: how a writer waits for its copies (and hashes) to land:
 * "spin" (the default, the CUDA runtime's own choice with one context on a
 * machine of many CPUs: each waiting writer keeps a CPU busy) or "block" (it
 * sleeps until the GPU signals, cudaEventBlockingSync).  Sleeping was slower
 * on the one H100 machine that compared them, in training too (docs/gpu.md):
 * kept for hosts short of CPUs.
 */
static int
gpu_wait_flags(unsigned *flags)
{
	int block;
	int ret = env_either("PMCK_GPU_WAIT", "spin", "block", "'spin' (a writer polls for its "
			"copies, the default) or 'block' (it sleeps until they land)", &block);

	*flags = block ? PMCK_GPU_BLOCKING_WAITS : 0;
	return ret;
}

static int
open_gpu_hash(struct pmck_pipeline *p)
{
	struct pmck_store *s = p->store;
	size_t nchunks = s->chunk_first[pmck_store_ntensors(s)];
	int ret = pmck__gpu_hash_open(p->gpu, nchunks, p->nlayers);

	if (ret)
		return ret;
	p->hash_src = malloc((nchunks ? nchunks : 1) * sizeof(*p->hash_src));
	p->hash_len = malloc((nchunks ? nchunks : 1) * sizeof(*p->hash_len));
	p->hash_slot = malloc((nchunks ? nchunks : 1) * sizeof(*p->hash_slot));
	p->hash_group_end = malloc(p->nlayers * sizeof(*p->hash_group_end));
	p->hash_group_event = malloc(p->nlayers * sizeof(*p->hash_group_event));
	p->layer_hash_event = calloc(p->nlayers, sizeof(*p->layer_hash_event));
	if (!p->hash_src || !p->hash_len || !p->hash_slot || !p->hash_group_end ||
	    !p->hash_group_event || !p->layer_hash_event)
		return pma__err(-ENOMEM, "out of memory");
	return 0;
}

static int
open_gpu(struct pmck_pipeline *p)
{
	int whole = p->opts.source == PMCK_SOURCE_GPU_SNAPSHOT;
	/*
	 * On wait: the bytes asked for, and each piece's alignment (under 512
	 * bytes, snapshot_untaken_locked), so that the store's data size holds
	 * every piece.
	 */
	if (p->opts.snapshot_on_wait > SIZE_MAX - 512 * p->qcap)
		return pma__err(-EINVAL, "snapshot_on_wait of %zu bytes: more than memory can hold",
				p->opts.snapshot_on_wait);
	p->snapshot_room = p->opts.snapshot_on_wait ? p->opts.snapshot_on_wait + 512 * p->qcap : 0;
	size_t snapshot = whole ? pmck_store_data_size(p->store) : p->snapshot_room;
	unsigned flags;
	int ret = gpu_sub_size(p->opts.source, &p->gpu_sub);
	if (!ret)
		ret = gpu_hash_mode(&p->opts, &p->gpu_hash);
	if (!ret)
		ret = gpu_wait_flags(&flags);
	if (!ret)
		ret = gpu_pace(&p->pace_gbps);
	if (ret)
		return ret;
	/* G snapshots whole tensors, a wait whole jobs: the most of either at once. */
	size_t most = whole ? pmck_store_ntensors(p->store) : p->qcap;
	ret = pmck__gpu_open(pmck_store_region(p->store), p->opts.cuda_device, snapshot,
			most, p->nlayers, p->qcap, flags, &p->gpu);
	p->job_writer = malloc(p->qcap ? p->qcap : 1);
	if (!ret && !p->job_writer)
		ret = pma__err(-ENOMEM, "out of memory");
	if (!ret && p->gpu_hash)
		ret = open_gpu_hash(p);

	for (unsigned t = 0; !ret && t < p->nthreads && p->opts.source == PMCK_SOURCE_GPU_STAGED; t++)
		ret = pmck__gpu_host_alloc(p->gpu, PIECE, &p->staging[t]);
	if (ret || !snapshot)
		return ret;
	most = most ? most : 1;
	p->snap_off = malloc(most * sizeof(*p->snap_off));
	p->snap_src = malloc(most * sizeof(*p->snap_src));
	p->snap_len = malloc(most * sizeof(*p->snap_len));
	if (!p->snap_off || !p->snap_src || !p->snap_len)
		return pma__err(-ENOMEM, "out of memory");
	return 0;
}

int
pmck_pipeline_new(struct pmck_store *s, const struct pmck_pipeline_opts *opts,
		struct pmck_pipeline **out)
{
	struct pmck_pipeline_opts o = {.threads = 2};
	int ret;

	if (!s || !out)
		return pma__err(-EINVAL, "pmck_pipeline_new: store and out are required");
	*out = NULL;
	if (opts)
		o = *opts;
	if (o.threads == 0)
		o.threads = 2;
	if (o.threads > MAX_THREADS)
		return pma__err(-EINVAL, "%u writer threads: at most %d", o.threads, MAX_THREADS);
	if ((unsigned)o.on_busy > PMCK_BUSY_SKIP || (unsigned)o.source > PMCK_SOURCE_GPU_SNAPSHOT)
		return pma__err(-EINVAL, "unknown busy policy or source");
	const unsigned hash_flags = PMCK_PIPELINE_GPU_HASH_HOST | PMCK_PIPELINE_GPU_HASH_DEVICE;
	if (o.flags & ~(PMCK_PIPELINE_VERIFY_SOURCES | hash_flags))
		return pma__err(-EINVAL, "unknown pipeline flags %#x",
				o.flags & ~(PMCK_PIPELINE_VERIFY_SOURCES | hash_flags));
	if ((o.flags & hash_flags) == hash_flags)
		return pma__err(-EINVAL, "PMCK_PIPELINE_GPU_HASH_HOST and _DEVICE together: "
				"the pieces are hashed in one place");
	if ((o.flags & hash_flags) && o.source == PMCK_SOURCE_HOST)
		return pma__err(-EINVAL, "PMCK_PIPELINE_GPU_HASH_%s is for GPU sources: host "
				"sources are hashed by the writers' copies",
				o.flags & PMCK_PIPELINE_GPU_HASH_HOST ? "HOST" : "DEVICE");
	if (o.snapshot_on_wait && (o.source == PMCK_SOURCE_HOST ||
			o.source == PMCK_SOURCE_GPU_SNAPSHOT))
		return pma__err(-EINVAL, "snapshot_on_wait is for GPU sources read in place "
				"(direct, kernel, staged): %s", o.source == PMCK_SOURCE_HOST ?
				"host sources are not on a GPU" :
				"the snapshot strategy already snapshots every layer");
	if (o.global && o.on_busy == PMCK_BUSY_SKIP)
		return pma__err(-EINVAL, "a global pipeline cannot skip busy checkpoints: ranks would "
				"skip different steps and never agree (use PMCK_BUSY_WAIT)");
	/* 0 (or the older -1): the region's node; PMCK_NUMA_NODE(n) is n + 1. */
	o.numa_node = o.numa_node <= 0 ? pma_region_numa_node(pmck_store_region(s))
				       : o.numa_node - 1;

	unsigned commit_delay_ms;
	if ((ret = test_commit_delay(&commit_delay_ms)))
		return ret;

	struct pmck_pipeline *p = calloc(1, sizeof(*p));
	if (!p)
		return pma__err(-ENOMEM, "out of memory");
	p->store = s;
	p->opts = o;
	p->commit_delay_ms = commit_delay_ms;
	p->nthreads = o.threads;
	p->verify = (o.flags & PMCK_PIPELINE_VERIFY_SOURCES) && o.source == PMCK_SOURCE_HOST;
	p->cpus = node_cpus(o.numa_node);
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->work, NULL);
	pthread_cond_init(&p->done, NULL);
	if ((ret = index_layers(p)) || (is_gpu(p) && (ret = open_gpu(p)))) {
		p->nthreads = 0;
		pmck_pipeline_delete(&p);
		return ret;
	}
	pthread_mutex_lock(&p->lock); /* writers look themselves up in p->threads */
	for (unsigned t = 0; t < p->nthreads; t++) {
		if (pthread_create(&p->threads[t], NULL, writer, p)) {
			p->nthreads = t;
			pthread_mutex_unlock(&p->lock);
			pmck_pipeline_delete(&p);
			return pma__err(-EAGAIN, "cannot start writer thread %u", t);
		}
	}
	pthread_mutex_unlock(&p->lock);
	*out = p;
	return 0;
}

/* Waits (lock held) while cond; adds the time to the stall counter. */
#define WAIT_WHILE(p, cond)                                                     \
	do {                                                                    \
		if (cond) {                                                     \
			uint64_t t0_ = pmck__now_ns();                                \
			while (cond)                                            \
				pthread_cond_wait(&(p)->done, &(p)->lock);      \
			(p)->stats.wait_ns += pmck__now_ns() - t0_;                   \
		}                                                               \
	} while (0)

int
pmck_pipeline_begin(struct pmck_pipeline *p, uint64_t step)
{
	int ret;

	pthread_mutex_lock(&p->lock);
	if (p->active && p->layers_put < p->nlayers) {
		ret = pma__err(-EINVAL, "checkpoint of step %llu still lacks %u of %u layers",
				(unsigned long long)pmck_ckpt_step(p->ckpt),
				p->nlayers - p->layers_put, p->nlayers);
		goto out;
	}
	int64_t newest;
	if (p->opts.on_busy == PMCK_BUSY_SKIP &&
	    (p->active || pmck__slot_pinned(p->store, pmck__begin_target(p->store, &newest)))) {
		p->skipping = 1;
		p->stats.skipped++;
		ret = PMCK_SKIPPED;
		goto out;
	}
	WAIT_WHILE(p, p->active);
	p->skipping = 0;
	/* The previous step must be global before its older slot is overwritten. */
	if (p->opts.global && (ret = pmck__global_complete(p->opts.global)))
		goto out;
	if ((p->opts.source == PMCK_SOURCE_GPU_SNAPSHOT || p->opts.snapshot_on_wait) &&
	    (ret = pmck__gpu_snapshot_begin(p->gpu)))
		goto out;
	if (p->gpu_hash && (ret = pmck__gpu_hash_begin(p->gpu)))
		goto out;
	if ((ret = pmck_store_begin(p->store, step, &p->ckpt)))
		goto out;
	memset(p->layer_put, 0, p->nlayers);
	memset(p->layer_njobs, 0, p->nlayers * sizeof(*p->layer_njobs));
	memset(p->layer_started, 0, p->nlayers * sizeof(*p->layer_started));
	memset(p->layer_direct, 0, p->nlayers * sizeof(*p->layer_direct));
	p->nseq = 0;
	p->snapshot_used = 0; /* every job of the last checkpoint is done: no copy reads it */
	p->last_snapped = -1;
	p->layers_put = 0;
	p->nvjobs = 0;
	p->outstanding = 0;
	p->error = 0;
	p->active = 1;
out:
	pthread_mutex_unlock(&p->lock);
	return ret;
}

static void
push_locked(struct pmck_pipeline *p, struct job j)
{
	p->queue[(p->qhead + p->qlen) % p->qcap] = j;
	p->qlen++;
	p->layer_pending[j.layer]++;
	p->outstanding++;
	if (p->verify) {
		p->layer_copies[j.layer]++;
		p->vjobs[p->nvjobs++] = j;
	}
}

/*
 * A layer's copies are done: its verify jobs go to the front of the queue
 * (its wait_layer is the next thing training waits for), in reverse so
 * that they run in put order.
 */
static void
queue_verify_locked(struct pmck_pipeline *p, uint32_t layer)
{
	size_t first = p->layer_vfirst[layer], end = first;

	while (end < p->nvjobs && p->vjobs[end].layer == layer)
		end++;
	for (size_t k = end; k-- > first;) {
		struct job v = p->vjobs[k];
		v.verify = 1;
		p->qhead = (p->qhead + p->qcap - 1) % p->qcap;
		p->queue[p->qhead] = v;
		p->qlen++;
		p->layer_pending[layer]++;
		p->outstanding++;
	}
	pthread_cond_broadcast(&p->work);
}

int
pmck_pipeline_put_layer(struct pmck_pipeline *p, uint32_t layer, const void *const *srcs)
{
	return pmck_pipeline_put_layer_stream(p, layer, srcs, p->opts.cuda_stream);
}

int
pmck_pipeline_put_layer_stream(struct pmck_pipeline *p, uint32_t layer, const void *const *srcs,
		void *cuda_stream)
{
	return pmck_pipeline_put_layers_stream(p, &layer, 1, srcs, cuda_stream);
}

/*
 * Whether layers[0 .. n) may be put now: a checkpoint begun, each layer one
 * of the store's, not put yet, and named once.  Fills p->put_ix with their
 * dense indices; marks nothing on return.
 */
static int
check_layers_locked(struct pmck_pipeline *p, const uint32_t *layers, size_t n)
{
	int ret = 0;
	size_t i;

	if (!p->active)
		return pma__err(-EINVAL, "put_layer(%u): no checkpoint begun", n ? layers[0] : 0);
	for (i = 0; i < n && !ret; i++) {
		int ix = layer_index(p, layers[i]);
		if (ix < 0)
			ret = pma__err(-EINVAL, "put_layer(%u): no tensor has this layer", layers[i]);
		else if (p->layer_put[ix])
			ret = pma__err(-EINVAL, p->layer_put[ix] == 2 ?
					"put_layers: layer %u is listed twice" :
					"put_layer(%u): layer already put in this checkpoint", layers[i]);
		else
			p->layer_put[p->put_ix[i] = (uint32_t)ix] = 2; /* seen in this list */
	}
	while (i-- > 0)
		if (p->layer_put[p->put_ix[i]] == 2)
			p->layer_put[p->put_ix[i]] = 0;
	return ret;
}

int
pmck_pipeline_put_layers_stream(struct pmck_pipeline *p, const uint32_t *layers, size_t n,
		const void *const *srcs, void *cuda_stream)
{
	int ret = 0;

	if (n && !layers)
		return pma__err(-EINVAL, "put_layers: %zu layers and no list", n);
	pthread_mutex_lock(&p->lock);
	if (p->skipping) {
		ret = PMCK_SKIPPED;
		goto out;
	}
	if ((ret = check_layers_locked(p, layers, n)) || n == 0)
		goto out;
	/*
	 * GPU sources: one ready event on the caller's stream for every layer of
	 * the put (that of the first), so their copies, or G's snapshot of them,
	 * come after the caller's work so far.
	 */
	unsigned event = p->put_ix[0];
	if (is_gpu(p))
		ret = pmck__gpu_layer_ready(p->gpu, event, cuda_stream);
	int snapshot = p->opts.source == PMCK_SOURCE_GPU_SNAPSHOT;
	const char *snap = snapshot ? pmck__gpu_snapshot_base(p->gpu) : NULL;
	size_t nsnap = 0, nhash = 0;
	/* Device hashing: kernel ngroups takes chunks group_start.. (group_open: it has a layer) */
	size_t ngroups = 0, group_start = 0, group_chunks = HASH_GROUP_FIRST;
	int group_open = 0;
	for (size_t l = 0; l < n; l++) {
		uint32_t ix = p->put_ix[l];
		p->layer_event[ix] = event;
		if (p->gpu_hash && !group_open) {
			p->hash_group_event[ngroups] = ix;
			group_open = 1;
		}
		if (p->gpu_hash)
			p->layer_hash_event[ix] = p->hash_group_event[ngroups];
		if (p->verify)
			p->layer_vfirst[ix] = p->nvjobs;
		p->layer_first[ix] = p->nseq;
		for (uint32_t t = p->layer_tstart[ix]; t < p->layer_tstart[ix + 1] && !ret; t++) {
			size_t i = p->layer_tensor[t];
			struct pmck_tensor_info ti;
			pmck_store_tensor(p->store, i, &ti);
			/* G: the writers copy from the tensor's place in the snapshot. */
			const char *base = srcs[i];
			if (snapshot && ti.nbytes) {
				base = snap + ti.offset;
				p->snap_off[nsnap] = ti.offset;
				p->snap_src[nsnap] = srcs[i];
				p->snap_len[nsnap++] = ti.nbytes;
			}
			uint64_t off = 0;
			do {
				uint64_t len = ti.nbytes - off < PIECE ? ti.nbytes - off : PIECE;
				push_locked(p, (struct job){(uint32_t)i, ix, off, len, base + off, 0,
						p->nseq++, snapshot ? (int32_t)event : -1});
				p->layer_njobs[ix]++;
				off += len;
			} while (off < ti.nbytes);
			for (off = 0; p->gpu_hash && off < ti.nbytes; off += PMCK_HASH_CHUNK) {
				uint64_t len = ti.nbytes - off < PMCK_HASH_CHUNK ? ti.nbytes - off :
						PMCK_HASH_CHUNK;
				if (!pmck__gpu_hashable(base + off, len))
					continue; /* a writer hashes it (take_gpu_hashes) */
				p->hash_src[nhash] = base + off;
				p->hash_len[nhash] = len;
				p->hash_slot[nhash++] = p->store->chunk_first[i] + off / PMCK_HASH_CHUNK;
			}
		}
		p->layer_direct[ix] = p->layer_njobs[ix];
		p->layer_put[ix] = 1;
		p->layers_put++;
		/* A kernel ends with a layer, once it has its chunks (or the put's layers end). */
		if (p->gpu_hash && (nhash - group_start >= group_chunks || l + 1 == n)) {
			p->hash_group_end[ngroups++] = group_start = nhash;
			group_chunks *= 2;
			group_open = 0;
		}
	}
	/*
	 * G: all the put's tensors into the snapshot, one kernel, and its event
	 * recorded before any writer can take a piece (the lock is held).
	 */
	if (snapshot && !ret)
		ret = pmck__gpu_snapshot(p->gpu, event, nsnap, p->snap_off, p->snap_src, p->snap_len);
	/*
	 * Device hashing: the put's chunks (G: of the snapshot, after it), in
	 * kernels of HASH_GROUP_FIRST chunks and then each twice the one before,
	 * in order on one stream: the first pieces' hashes are ready at once,
	 * and the later kernels run while the earlier pieces cross PCIe.
	 */
	for (size_t k = 0, first = 0; p->gpu_hash && k < ngroups && !ret; k++) {
		ret = pmck__gpu_hash(p->gpu, event, p->hash_group_event[k], snapshot,
				p->hash_group_end[k] - first, p->hash_src + first, p->hash_len + first,
				p->hash_slot + first);
		first = p->hash_group_end[k];
	}
	fail_locked(p, ret); /* the checkpoint will abort; queued pieces are skipped */
	if (p->outstanding == 0 && p->layers_put == p->nlayers)
		finish_locked(p); /* only empty tensors, or a failure before any queueing */
	pthread_cond_broadcast(&p->work);
out:
	pthread_mutex_unlock(&p->lock);
	return ret;
}

int
pmck_pipeline_wait_layer(struct pmck_pipeline *p, uint32_t layer)
{
	int ix = layer_index(p, layer);
	int ret;

	if (ix < 0)
		return pma__err(-EINVAL, "wait_layer(%u): no tensor has this layer", layer);
	pthread_mutex_lock(&p->lock);
	WAIT_WHILE(p, p->layer_pending[ix] > 0);
	ret = p->error;
	if (ret)
		pma__err(ret, "checkpoint failed: %s", p->errmsg);
	pthread_mutex_unlock(&p->lock);
	return ret;
}

/* A stretch of one layer's jobs that no writer has taken yet, by seq. */
struct untaken {
	uint32_t ix, first, end;
};

static int
cmp_untaken_last_first(const void *a, const void *b)
{
	uint32_t x = ((const struct untaken *)a)->first, y = ((const struct untaken *)b)->first;
	return x > y ? -1 : x < y;
}

/*
 * Snapshot on wait (opts.snapshot_on_wait): the untaken jobs that read the
 * sources of the layers ix[0 .. n) are copied on the GPU into the snapshot
 * memory, the jobs last in the queue first, as many as fit, and retargeted
 * to read the copy after its event.  Each layer's snapshotted jobs stay a
 * suffix of its jobs (layer_direct).  Lock held; writers take jobs under it,
 * so none takes a job between its retargeting and the snapshot's enqueue.
 */
static int
snapshot_untaken_locked(struct pmck_pipeline *p, const uint32_t *ix, size_t n)
{
	if (!p->active || p->error || p->qlen == 0)
		return p->error;
	struct untaken *u = malloc((n ? n : 1) * sizeof(*u));
	if (!u)
		return pma__err(-ENOMEM, "out of memory");
	/* A GPU pipeline queues copy jobs only, in seq order: the head's seq is the first untaken. */
	uint32_t head = p->queue[p->qhead].seq;
	size_t nu = 0;
	for (size_t k = 0; k < n; k++) {
		uint32_t l = ix[k], end = p->layer_first[l] + p->layer_direct[l];
		uint32_t first = p->layer_first[l] > head ? p->layer_first[l] : head;
		if (p->layer_put[l] == 1 && first < end)
			u[nu++] = (struct untaken){l, first, end};
	}
	qsort(u, nu, sizeof(*u), cmp_untaken_last_first);

	const char *base = pmck__gpu_snapshot_base(p->gpu);
	size_t nsnap = 0, bytes = 0;
	int full = 0;
	for (size_t k = 0; k < nu && !full; k++) {
		for (uint32_t seq = u[k].end; seq-- > u[k].first;) {
			struct job *j = &p->queue[(p->qhead + (seq - head)) % p->qcap];
			if (j->snapped >= 0)
				continue; /* the layer is listed twice: taken by its first stretch */
			/*
			 * The copy keeps the source's address modulo 256: the same
			 * alignment for the snapshot kernel, the DMA, and device
			 * hashing's choice of chunks (made on the source's address
			 * at the put, and again by the writer on what it reads).
			 */
			size_t off = ((p->snapshot_used + 255) & ~(size_t)255) +
					((uintptr_t)j->src & 255);
			if (off + j->len > p->snapshot_room) {
				full = 1;
				break;
			}
			p->snap_off[nsnap] = off;
			p->snap_src[nsnap] = j->src;
			p->snap_len[nsnap++] = j->len;
			j->src = base + off;
			/*
			 * The event of the put of the first layer snapshotted: recorded
			 * as ready, and the snapshot stream waits for every put's
			 * ready event.  Recorded again by a later wait, it stands for
			 * that later snapshot, which the one stream runs after this one.
			 */
			j->snapped = (int32_t)p->layer_event[u[0].ix];
			p->snapshot_used = off + j->len;
			p->layer_direct[u[k].ix] = seq - p->layer_first[u[k].ix];
			bytes += j->len;
		}
	}
	int ret = 0;
	if (nsnap) {
		pthread_cond_broadcast(&p->done); /* fewer jobs to wait for: other waiters look again */
		unsigned event = p->layer_event[u[0].ix];
		ret = pmck__gpu_snapshot(p->gpu, event, nsnap, p->snap_off, p->snap_src, p->snap_len);
		if (ret) {
			fail_locked(p, ret); /* the retargeted jobs are skipped: the checkpoint fails */
		} else {
			p->last_snapped = (int)event;
			p->stats.snapshot_on_wait_bytes += bytes;
			p->stats.snapshot_on_wait_pieces += nsnap;
		}
	}
	free(u);
	return ret;
}

int
pmck_pipeline_wait_layers_stream(struct pmck_pipeline *p, const uint32_t *layers, size_t n,
		void *cuda_stream)
{
	int ret = 0;

	if (n && !layers)
		return pma__err(-EINVAL, "wait_layers: %zu layers and no list", n);
	/*
	 * What the caller's stream waits for, taken under the lock and waited
	 * for outside it: hash events (one per distinct kernel), and per writer
	 * the last of its jobs that read these layers' sources (-1: none).
	 */
	uint32_t *ix = malloc((n ? n : 1) * sizeof(*ix));
	int *hash = malloc((n ? n : 1) * sizeof(*hash));
	int64_t last_job[MAX_THREADS];
	for (unsigned wr = 0; wr < MAX_THREADS; wr++)
		last_job[wr] = -1;
	if (!ix || !hash) {
		free(ix);
		free(hash);
		return pma__err(-ENOMEM, "out of memory");
	}
	for (size_t k = 0; k < n && !ret; k++) {
		int l = layer_index(p, layers[k]);
		if (l < 0)
			ret = pma__err(-EINVAL, "wait_layer(%u): no tensor has this layer", layers[k]);
		ix[k] = (uint32_t)l;
	}
	if (ret || !is_gpu(p)) {
		for (size_t k = 0; k < n && !ret; k++)
			ret = pmck_pipeline_wait_layer(p, layers[k]);
		goto out;
	}
	pthread_mutex_lock(&p->lock);
	int snapshot = p->opts.source == PMCK_SOURCE_GPU_SNAPSHOT;
	if (p->opts.snapshot_on_wait)
		snapshot_untaken_locked(p, ix, n); /* a failure is the checkpoint's: below */
	size_t nw = 0, nhash = 0;
	int last_hash = -1, snapped = -1;
	uint32_t latest = 0; /* G: the layer put last */
	for (size_t k = 0; k < n; k++) {
		uint32_t l = ix[k];
		/* The host waits only until the copies reading the sources are enqueued. */
		if (!snapshot)
			WAIT_WHILE(p, p->layer_started[l] < p->layer_direct[l] && !p->error);
		if (p->layer_pending[l] == 0)
			continue; /* persisted already */
		nw++;
		/* D with device hashing: the hash kernel reads the sources too (G: the snapshot). */
		int h = p->gpu_hash && !snapshot ? (int)p->layer_hash_event[l] : -1;
		if (h >= 0 && h != last_hash)
			hash[nhash++] = last_hash = h;
		for (uint32_t seq = p->layer_first[l]; !snapshot && seq < p->layer_first[l] +
				p->layer_direct[l]; seq++) {
			unsigned wr = p->job_writer[seq];
			if (wr != NO_WRITER && (int64_t)seq > last_job[wr])
				last_job[wr] = seq;
		}
		/*
		 * One snapshot event covers every one recorded before it: the
		 * snapshot stream runs in order.  G: that of the put of the layer
		 * put last; on wait: the last snapshot, if one of these is in it.
		 */
		if (snapshot && (nw == 1 || p->layer_first[l] > p->layer_first[latest]))
			latest = l;
		if (!snapshot && p->layer_direct[l] < p->layer_njobs[l])
			snapped = p->last_snapped;
	}
	if (snapshot && nw)
		snapped = (int)p->layer_event[latest];
	ret = p->error;
	if (ret)
		pma__err(ret, "checkpoint failed: %s", p->errmsg);
	unsigned nthreads = p->nthreads;
	pthread_mutex_unlock(&p->lock);
	if (!ret && snapped >= 0)
		ret = pmck__gpu_caller_wait(p->gpu, cuda_stream, snapped, -1, 0, 0);
	for (size_t k = 0; k < nhash && !ret; k++)
		ret = pmck__gpu_caller_wait(p->gpu, cuda_stream, -1, hash[k], 0, 0);
	/*
	 * Each writer's stream runs its jobs in seq order, so its last job's
	 * done event stands for all of them: one wait per writer, not one per
	 * piece (~1500 for GPT-2 medium with AdamW).
	 */
	for (unsigned wr = 0; wr < nthreads && !ret; wr++)
		if (last_job[wr] >= 0)
			ret = pmck__gpu_caller_wait(p->gpu, cuda_stream, -1, -1,
					(size_t)last_job[wr], 1);
out:
	free(ix);
	free(hash);
	return ret;
}

int
pmck_pipeline_wait_layer_stream(struct pmck_pipeline *p, uint32_t layer, void *cuda_stream)
{
	return pmck_pipeline_wait_layers_stream(p, &layer, 1, cuda_stream);
}

int
pmck_pipeline_wait(struct pmck_pipeline *p)
{
	int ret;

	pthread_mutex_lock(&p->lock);
	if (p->active && p->layers_put < p->nlayers) {
		ret = pma__err(-EINVAL, "checkpoint of step %llu lacks %u of %u layers: it cannot "
				"complete", (unsigned long long)pmck_ckpt_step(p->ckpt),
				p->nlayers - p->layers_put, p->nlayers);
	} else {
		WAIT_WHILE(p, p->active);
		ret = p->result;
		if (ret)
			pma__err(ret, "checkpoint failed: %s", p->errmsg);
	}
	pthread_mutex_unlock(&p->lock);
	return ret;
}

int
pmck_pipeline_busy(struct pmck_pipeline *p)
{
	pthread_mutex_lock(&p->lock);
	int busy = p->active != 0;
	pthread_mutex_unlock(&p->lock);
	return busy;
}

void
pmck_pipeline_stats(struct pmck_pipeline *p, struct pmck_pipeline_stats *st)
{
	pthread_mutex_lock(&p->lock);
	*st = p->stats;
	pthread_mutex_unlock(&p->lock);
}

void
pmck_pipeline_delete(struct pmck_pipeline **pp)
{
	struct pmck_pipeline *p = pp ? *pp : NULL;

	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	/* A checkpoint with layers missing can never commit: drop it once its pieces are done. */
	WAIT_WHILE(p, p->outstanding > 0 || (p->active && p->layers_put == p->nlayers));
	if (p->active) {
		pmck_ckpt_abort(p->ckpt);
		p->active = 0;
	}
	p->stop = 1;
	pthread_cond_broadcast(&p->work);
	pthread_mutex_unlock(&p->lock);
	for (unsigned t = 0; t < p->nthreads; t++)
		pthread_join(p->threads[t], NULL);
	for (unsigned t = 0; t < MAX_THREADS; t++)
		if (p->staging[t])
			pmck__gpu_host_free(p->gpu, p->staging[t]);
	pmck__gpu_close(&p->gpu);
	pthread_cond_destroy(&p->work);
	pthread_cond_destroy(&p->done);
	pthread_mutex_destroy(&p->lock);
	if (p->cpus)
		numa_free_cpumask(p->cpus);
	free(p->queue);
	free(p->vjobs);
	free(p->layer_vfirst);
	free(p->layer_copies);
	free(p->layer_put);
	free(p->layer_pending);
	free(p->layer_first);
	free(p->layer_event);
	free(p->layer_direct);
	free(p->job_writer);
	free(p->layer_njobs);
	free(p->layer_started);
	free(p->layer_id);
	free(p->tensor_layer);
	free(p->layer_tstart);
	free(p->layer_tensor);
	free(p->snap_off);
	free(p->snap_src);
	free(p->snap_len);
	free(p->put_ix);
	free(p->hash_src);
	free(p->hash_len);
	free(p->hash_slot);
	free(p->hash_group_end);
	free(p->hash_group_event);
	free(p->layer_hash_event);
	free(p);
	*pp = NULL;
}
