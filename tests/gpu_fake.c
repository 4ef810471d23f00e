/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * gpu_fake.c -- the pipeline's GPU bookkeeping without a GPU: this program
 * defines runtime/gpu.h's interface itself, on host memory, so the linker
 * takes it instead of gpu.o (or gpu_none.o) from libpmckpt.a, and runs
 * every GPU strategy through it under the sanitizers of make check.
 *
 * The stand-in: "device" pointers are host pointers; a stream's copies are
 * queued and run in order when the host waits for one of them (a stream
 * would have finished the earlier ones by then); a snapshot is queued too,
 * and taken, with every one queued before it (one stream, in order), when
 * a caller's stream-ordered wait names its event, a hash of it runs, or a
 * copy that waited for its event runs; a caller's stream-ordered wait for
 * jobs runs each stream's copies up to the last of those jobs' (their done
 * events).  Snapshot events count as recorded from the checkpoint's begin.  It checks
 * the contract the real one relies on, counting breaches: a copy started
 * before its ready (or snapshot) event was recorded, a stream's sub-copy
 * events reused while its copies are in flight, a copy landing outside the
 * region, a stream deleted with copies queued.  Device hashing: a put's
 * hashes are computed (as the kernel does, xxh3_warp.h) only when a writer
 * waits for them or a caller's stream-ordered wait names them, so a source
 * changed before that shows as a checkpoint that fails to verify; reading a
 * result not computed in this checkpoint, or hashing a chunk the kernel does
 * not take, is a breach.
 *
 * What only a GPU shows (tests/gpu_pipeline.c): real asynchrony, the
 * stream and event semantics, the snapshot kernel, DMA into the region.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>

#include "ckpt_util.h"
#include "xxh3_warp.h"
#include "../runtime/gpu.h"
#include "../runtime/internal.h"

/* ------------------------------------------------------------------ the stand-in */

static atomic_uint breaches;
static atomic_int fail_wait_in = -1; /* the n-th copy_wait from now fails (-EIO); -1: none */
static pthread_mutex_t first_lock = PTHREAD_MUTEX_INITIALIZER;
static char first_breach[256];

static void
breach(const char *what)
{
	if (atomic_fetch_add(&breaches, 1) == 0) {
		pthread_mutex_lock(&first_lock);
		snprintf(first_breach, sizeof(first_breach), "%s", what);
		pthread_mutex_unlock(&first_lock);
	}
}

#define MAX_STREAMS 64
#define FIFO PMCK_GPU_MAX_SUB

struct copy {
	char *dst;
	const char *src;
	size_t len;
	unsigned i;
	size_t job;     /* whose done event follows the job's last copy */
	int snap_event; /* the snapshot event it waited for; -1: a ready event */
};

struct pmck_gpu_stream {
	struct pmck_gpu *g;
	struct copy fifo[FIFO]; /* queued, not yet run, in stream order */
	unsigned head, n;
};

struct snap_chunk {
	char *dst;
	const char *src;
	size_t len;
	unsigned event;
};

struct hash_chunk {
	const void *src;
	size_t len, slot;
	unsigned event; /* the hashed event recorded after it */
	unsigned put;   /* the ready (G: snapshot) event it waited for */
};

struct pmck_gpu {
	pthread_mutex_t lock; /* everything below, and every stream's queue */
	char *base;
	size_t size;
	unsigned nevents;
	unsigned *ready, *snapped; /* times each event was recorded */
	char *snapshot;
	size_t snapshot_bytes, njobs;
	struct snap_chunk *snaps; /* queued snapshot copies: [snaps_done, nsnaps) not yet run */
	size_t nsnaps, snaps_cap, snaps_done;
	struct pmck_gpu_stream *streams[MAX_STREAMS];
	/* Device hashing: chunks queued [hash_done, hash_used) run in order when waited for */
	struct hash_chunk *hash_list;
	uint64_t *hash_results;
	unsigned *hash_gen, gen; /* the checkpoint (begin) that computed each result */
	size_t nhash, hash_used, hash_done;
};

static atomic_ulong gpu_hashed; /* chunks the stand-in hashed "on the GPU" */
static atomic_ulong hash_kernels; /* pmck__gpu_hash calls: kernels launched */
static atomic_ulong caller_done_waits; /* jobs' done events callers' streams waited for */
static atomic_int no_hash_kernel; /* as a GPU before sm_90: the hash kernel has no code */
/* While set (under the gpu's lock), a writer's hash_wait holds until its hashes have run. */
static int hold_hashes;
static struct pmck_gpu *open_gpu; /* the last one opened, while it is open */
static unsigned open_flags; /* the flags the last pmck__gpu_open was given */
static pthread_cond_t hashes_ran = PTHREAD_COND_INITIALIZER;
/* While set (under the gpu's lock), writers' copy_waits hold: their streams "stall". */
static int hold_copies;
static unsigned copies_held; /* copy_waits holding now */
/* While >= 0 (under the gpu's lock), the copy_wait of a stream with that job queued holds. */
static long hold_job = -1;
static size_t max_job_seen; /* the highest job a copy started for */
static pthread_cond_t copies_go = PTHREAD_COND_INITIALIZER;

int pmck__gpu_build_version(void) { return 0; }

int
pmck_gpu_available(int device)
{
	return device == 0 ? 0 : -ENODEV;
}

int
pmck__gpu_open(struct pma_region *r, int device, size_t snapshot_bytes, size_t ntensors,
		unsigned nlayers, size_t njobs, unsigned flags, struct pmck_gpu **out)
{
	struct pmck_gpu *g = calloc(1, sizeof(*g));

	(void)ntensors;
	open_flags = flags;
	*out = g;
	if (!g || device != 0)
		return device != 0 ? -ENODEV : -ENOMEM;
	pthread_mutex_init(&g->lock, NULL);
	g->base = pma_region_addr(r);
	g->size = pma_region_size(r);
	g->nevents = nlayers;
	g->ready = calloc(nlayers + 1, sizeof(*g->ready));
	g->snapped = calloc(nlayers + 1, sizeof(*g->snapped));
	g->snapshot_bytes = snapshot_bytes;
	g->snapshot = snapshot_bytes ? malloc(snapshot_bytes) : NULL;
	g->njobs = njobs;
	open_gpu = g;
	max_job_seen = 0; /* this pipeline's jobs only */
	return !g->ready || !g->snapped || (snapshot_bytes && !g->snapshot) ? -ENOMEM : 0;
}

void
pmck__gpu_close(struct pmck_gpu **gp)
{
	struct pmck_gpu *g = *gp;

	if (!g)
		return;
	if (open_gpu == g)
		open_gpu = NULL;
	free(g->ready);
	free(g->snapped);
	free(g->snapshot);
	free(g->snaps);
	free(g->hash_list);
	free(g->hash_results);
	free(g->hash_gen);
	pthread_mutex_destroy(&g->lock);
	free(g);
	*gp = NULL;
}

int
pmck__gpu_stream_new(struct pmck_gpu *g, struct pmck_gpu_stream **out)
{
	struct pmck_gpu_stream *ws = calloc(1, sizeof(*ws));

	*out = ws;
	if (!ws)
		return -ENOMEM;
	ws->g = g;
	pthread_mutex_lock(&g->lock);
	unsigned k = 0;
	while (k < MAX_STREAMS && g->streams[k])
		k++;
	if (k < MAX_STREAMS)
		g->streams[k] = ws;
	pthread_mutex_unlock(&g->lock);
	return k < MAX_STREAMS ? 0 : -ENOMEM;
}

void
pmck__gpu_stream_delete(struct pmck_gpu_stream **wsp)
{
	struct pmck_gpu_stream *ws = *wsp;

	if (!ws)
		return;
	pthread_mutex_lock(&ws->g->lock);
	if (ws->n)
		breach("a stream deleted with copies queued");
	for (unsigned k = 0; k < MAX_STREAMS; k++)
		if (ws->g->streams[k] == ws)
			ws->g->streams[k] = NULL;
	pthread_mutex_unlock(&ws->g->lock);
	free(ws);
	*wsp = NULL;
}

int
pmck__gpu_layer_ready(struct pmck_gpu *g, unsigned event, void *stream)
{
	(void)stream;
	if (event >= g->nevents)
		return -EINVAL;
	pthread_mutex_lock(&g->lock);
	g->ready[event]++;
	pthread_mutex_unlock(&g->lock);
	return 0;
}

/*
 * Takes the snapshots queued up to and including the last one recorded
 * with `event` (-1: all of them), in order (g->lock held).
 */
static void
run_snapshots_locked(struct pmck_gpu *g, int event)
{
	size_t end = event < 0 ? g->nsnaps : g->snaps_done;

	for (size_t k = g->snaps_done; event >= 0 && k < g->nsnaps; k++)
		if (g->snaps[k].event == (unsigned)event)
			end = k + 1;
	for (; g->snaps_done < end; g->snaps_done++) {
		const struct snap_chunk *c = &g->snaps[g->snaps_done];
		memcpy(c->dst, c->src, c->len);
	}
}

/* Runs the oldest queued copy of ws (g->lock held). */
static void
run_one_locked(struct pmck_gpu_stream *ws)
{
	struct copy *c = &ws->fifo[ws->head];

	if (c->snap_event >= 0)
		run_snapshots_locked(ws->g, c->snap_event); /* the copy waited for that snapshot */
	memcpy(c->dst, c->src, c->len);
	ws->head = (ws->head + 1) % FIFO;
	ws->n--;
}

/* Whether stream ws has a copy of `job` queued (the gpu's lock held). */
static int
stream_has_job_locked(struct pmck_gpu_stream *ws, size_t job)
{
	for (unsigned m = 0; m < ws->n; m++)
		if (ws->fifo[(ws->head + m) % FIFO].job == job)
			return 1;
	return 0;
}

int
pmck__gpu_copy_start(struct pmck_gpu_stream *ws, unsigned event, int from_snapshot,
		enum pmck_gpu_copy how, void *dst, const void *src, size_t len, size_t sub,
		size_t job, unsigned *nsub)
{
	struct pmck_gpu *g = ws->g;

	*nsub = 0;
	if (!sub || len > sub * PMCK_GPU_MAX_SUB || job >= g->njobs || event >= g->nevents)
		return -EINVAL;
	pthread_mutex_lock(&g->lock);
	max_job_seen = job > max_job_seen ? job : max_job_seen;
	if (!g->ready[event])
		breach("a copy started before its ready event was recorded");
	if (from_snapshot && (!g->snapped[event] || (const char *)src < g->snapshot ||
			(const char *)src + len > g->snapshot + g->snapshot_bytes))
		breach("a copy from the snapshot before it was taken, or outside it");
	if (how != PMCK_GPU_TO_HOST &&
	    ((char *)dst < g->base || (char *)dst + len > g->base + g->size))
		breach("a copy landing outside the region");
	if (ws->n)
		breach("a stream's sub-copy events reused while its copies are queued");
	for (size_t off = 0; off < len; off += sub) {
		struct copy *c = &ws->fifo[(ws->head + ws->n++) % FIFO];
		*c = (struct copy){(char *)dst + off, (const char *)src + off,
				len - off < sub ? len - off : sub, (*nsub)++, job,
				from_snapshot ? (int)event : -1};
	}
	pthread_mutex_unlock(&g->lock);
	return 0;
}

int
pmck__gpu_copy_wait(struct pmck_gpu_stream *ws, unsigned i)
{
	int n = atomic_load(&fail_wait_in);

	while (n >= 0 && !atomic_compare_exchange_weak(&fail_wait_in, &n, n - 1))
		;
	pthread_mutex_lock(&ws->g->lock);
	copies_held++;
	while (hold_copies || (hold_job >= 0 && stream_has_job_locked(ws, (size_t)hold_job)))
		pthread_cond_wait(&copies_go, &ws->g->lock);
	copies_held--;
	/* Everything queued up to and including sub-copy i (if still queued). */
	unsigned k = 0;
	while (k < ws->n && ws->fifo[(ws->head + k) % FIFO].i != i)
		k++;
	if (k < ws->n)
		for (unsigned m = 0; m <= k; m++)
			run_one_locked(ws);
	pthread_mutex_unlock(&ws->g->lock);
	return n == 0 ? -EIO : 0;
}

/* Runs the hash "kernels" queued up to and including event's (g->lock held). */
static void
run_hashes_locked(struct pmck_gpu *g, unsigned event)
{
	size_t end = g->hash_done;

	for (size_t k = g->hash_done; k < g->hash_used; k++)
		if (g->hash_list[k].event == event)
			end = k + 1;
	for (; g->hash_done < end; g->hash_done++) {
		const struct hash_chunk *c = &g->hash_list[g->hash_done];
		run_snapshots_locked(g, (int)c->put); /* G hashes its snapshot, after it is taken */
		g->hash_results[c->slot] = warp_hash(c->src, c->len, pmck__xxh3_secret());
		g->hash_gen[c->slot] = g->gen;
		atomic_fetch_add(&gpu_hashed, 1);
	}
	pthread_cond_broadcast(&hashes_ran);
}

/* Whether event's hashes are still queued (g->lock held). */
static int
hashes_pending_locked(const struct pmck_gpu *g, unsigned event)
{
	for (size_t k = g->hash_done; k < g->hash_used; k++)
		if (g->hash_list[k].event == event)
			return 1;
	return 0;
}

int
pmck__gpu_caller_wait(struct pmck_gpu *g, void *stream, int snapshot_event, int hash_event,
		size_t first, size_t n)
{
	(void)stream;
	pthread_mutex_lock(&g->lock);
	if (hash_event >= 0)
		run_hashes_locked(g, (unsigned)hash_event);
	if (snapshot_event >= 0 && ((unsigned)snapshot_event >= g->nevents ||
			!g->snapped[snapshot_event]))
		breach("a caller waiting for a snapshot never taken");
	if (snapshot_event >= 0)
		run_snapshots_locked(g, snapshot_event);
	if (first + n > g->njobs)
		breach("a caller waiting for jobs that do not exist");
	atomic_fetch_add(&caller_done_waits, n);
	/* Each stream, up to the last copy of one of the jobs: their done events. */
	for (unsigned k = 0; k < MAX_STREAMS; k++) {
		struct pmck_gpu_stream *ws = g->streams[k];
		unsigned last = 0;
		for (unsigned m = 0; ws && m < ws->n; m++) {
			size_t job = ws->fifo[(ws->head + m) % FIFO].job;
			if (job >= first && job < first + n)
				last = m + 1;
		}
		while (last--)
			run_one_locked(ws);
	}
	pthread_mutex_unlock(&g->lock);
	return 0;
}

int
pmck__gpu_host_alloc(struct pmck_gpu *g, size_t len, void **out)
{
	(void)g;
	*out = malloc(len);
	return *out ? 0 : -ENOMEM;
}

void
pmck__gpu_host_free(struct pmck_gpu *g, void *p)
{
	(void)g;
	free(p);
}

int
pmck__gpu_snapshot_begin(struct pmck_gpu *g)
{
	pthread_mutex_lock(&g->lock);
	g->nsnaps = g->snaps_done = 0; /* a failed checkpoint's snapshots are never taken */
	/* An event recorded by an earlier checkpoint has completed: waiting for it orders nothing. */
	memset(g->snapped, 0, (g->nevents + 1) * sizeof(*g->snapped));
	pthread_mutex_unlock(&g->lock);
	return 0;
}

const char *pmck__gpu_snapshot_base(const struct pmck_gpu *g) { return g->snapshot; }

int
pmck__gpu_snapshot(struct pmck_gpu *g, unsigned event, size_t n, const uint64_t *offs,
		const void *const *srcs, const size_t *lens)
{
	if (event >= g->nevents)
		return -EINVAL;
	pthread_mutex_lock(&g->lock);
	if (!g->ready[event])
		breach("a snapshot taken before its ready event was recorded");
	for (size_t i = 0; i < n; i++) {
		if (offs[i] + lens[i] > g->snapshot_bytes) {
			breach("a snapshot copy outside the snapshot");
			continue;
		}
		if (g->nsnaps == g->snaps_cap) {
			size_t cap = g->snaps_cap ? 2 * g->snaps_cap : 64;
			struct snap_chunk *more = realloc(g->snaps, cap * sizeof(*more));
			if (!more) {
				pthread_mutex_unlock(&g->lock);
				return -ENOMEM;
			}
			g->snaps = more;
			g->snaps_cap = cap;
		}
		g->snaps[g->nsnaps++] = (struct snap_chunk){g->snapshot + offs[i], srcs[i], lens[i],
				event};
	}
	g->snapped[event]++;
	pthread_mutex_unlock(&g->lock);
	return 0;
}

int
pmck__gpu_hash_open(struct pmck_gpu *g, size_t nchunks, unsigned nlayers)
{
	(void)nlayers;
	if (atomic_load(&no_hash_kernel))
		return pmck__err(-ENOTSUP, "hashing on the GPU: this build has no code for CUDA "
				"device %d (compute capability 8.0; built for 9.0 and later): "
				"PMCK_PIPELINE_GPU_HASH_HOST hashes on the host", 0);
	g->nhash = nchunks ? nchunks : 1;
	g->hash_list = calloc(g->nhash, sizeof(*g->hash_list));
	g->hash_results = calloc(g->nhash, sizeof(*g->hash_results));
	g->hash_gen = calloc(g->nhash, sizeof(*g->hash_gen));
	return g->hash_list && g->hash_results && g->hash_gen ? 0 : -ENOMEM;
}

int
pmck__gpu_hash_begin(struct pmck_gpu *g)
{
	pthread_mutex_lock(&g->lock);
	g->hash_used = g->hash_done = 0; /* a failed checkpoint's hashes are never run */
	g->gen++;
	pthread_mutex_unlock(&g->lock);
	return 0;
}

int
pmck__gpu_hash(struct pmck_gpu *g, unsigned event, unsigned hashed, int from_snapshot,
		size_t n, const void *const *srcs, const size_t *lens, const size_t *slots)
{
	if (event >= g->nevents || hashed >= g->nevents || n > g->nhash - g->hash_used)
		return -EINVAL;
	atomic_fetch_add(&hash_kernels, 1);
	pthread_mutex_lock(&g->lock);
	if (!(from_snapshot ? g->snapped[event] : g->ready[event]))
		breach("chunks hashed before their ready (or snapshot) event was recorded");
	for (size_t i = 0; i < n; i++) {
		if (!pmck__gpu_hashable(srcs[i], lens[i]) || lens[i] > PMCK_HASH_CHUNK ||
		    slots[i] >= g->nhash) {
			breach("a chunk the hash kernel does not take");
			continue;
		}
		g->hash_list[g->hash_used++] = (struct hash_chunk){srcs[i], lens[i], slots[i], hashed,
				event};
	}
	pthread_mutex_unlock(&g->lock);
	return 0;
}

int
pmck__gpu_hash_wait(struct pmck_gpu *g, unsigned event)
{
	if (event >= g->nevents)
		return -EINVAL;
	pthread_mutex_lock(&g->lock);
	while (hold_hashes && hashes_pending_locked(g, event))
		pthread_cond_wait(&hashes_ran, &g->lock);
	run_hashes_locked(g, event);
	pthread_mutex_unlock(&g->lock);
	return 0;
}

/* Sets a hold flag of the open stand-in (under its lock) and wakes who waits on it. */
static void
set_hold(int *flag, pthread_cond_t *wake, int on)
{
	struct pmck_gpu *g = open_gpu;

	pthread_mutex_lock(&g->lock);
	*flag = on;
	pthread_cond_broadcast(wake);
	pthread_mutex_unlock(&g->lock);
}

/* Holds writers' hash_waits (on), or lets them go on (off: their hashes then run). */
static void
hold_hash_waits(int on)
{
	set_hold(&hold_hashes, &hashes_ran, on);
}

/* Holds writers' copy_waits (on), or lets them go on (off). */
static void
hold_copy_waits(int on)
{
	set_hold(&hold_copies, &copies_go, on);
}

/*
 * Holds the copy_wait of the writer whose stream has `job` queued (job >= 0),
 * or lets it go on (-1).
 */
static void
hold_copy_of_job(long job)
{
	struct pmck_gpu *g = open_gpu;

	pthread_mutex_lock(&g->lock);
	hold_job = job;
	pthread_cond_broadcast(&copies_go);
	pthread_mutex_unlock(&g->lock);
}

/* Whether n writers hold in copy_wait. */
static int
copies_holding(unsigned n)
{
	struct pmck_gpu *g = open_gpu;

	pthread_mutex_lock(&g->lock);
	int yes = copies_held == n;
	pthread_mutex_unlock(&g->lock);
	return yes;
}

uint64_t
pmck__gpu_hash_result(const struct pmck_gpu *g, size_t slot)
{
	struct pmck_gpu *m = (struct pmck_gpu *)g;

	pthread_mutex_lock(&m->lock);
	if (slot >= g->nhash || g->hash_gen[slot] != g->gen)
		breach("a hash result read before its kernel ran in this checkpoint");
	uint64_t h = slot < g->nhash ? g->hash_results[slot] : 0;
	pthread_mutex_unlock(&m->lock);
	return h;
}

/* ------------------------------------------------------------------ the test */

#define LAYERS 6
#define PER_LAYER 3
#define N (LAYERS * PER_LAYER)

static struct pmck_tensor_desc descs[N];
static char names[N][32];
static size_t nbytes[N];
static uint8_t *dev[N];  /* the "device" tensors */
static uint8_t *want[N]; /* what the checkpoint must hold */

/* Tensor k of a layer: 9 MiB + 6 bytes (two pieces, two sub-copies each), 8 KiB, 3 bytes. */
static void
make_layout(void)
{
	for (size_t i = 0; i < N; i++) {
		unsigned k = i % PER_LAYER;
		snprintf(names[i], sizeof(names[i]), "l%zu.t%u", i / PER_LAYER, k);
		descs[i] = (struct pmck_tensor_desc){.name = names[i], .dtype = PMCK_DTYPE_U8,
				.ndim = 1, .layer = (uint32_t)(i / PER_LAYER) * 10};
		descs[i].shape[0] = nbytes[i] = k == 0 ? (9u << 20) + 6 : k == 1 ? 8192 : 3;
		dev[i] = malloc(nbytes[i]);
		want[i] = malloc(nbytes[i]);
	}
}

static void
fill(uint64_t step)
{
	for (size_t i = 0; i < N; i++) {
		fill_tensor(step, i, dev[i], nbytes[i]);
		memcpy(want[i], dev[i], nbytes[i]);
	}
}

static int
exact(struct pmck_store *s, uint64_t step)
{
	struct pmck_recovery rec;

	if (pmck_store_recover(s, &rec) || rec.step != step)
		return 0;
	for (size_t i = 0; i < N; i++)
		if (memcmp(pmck_store_tensor_data(s, i), want[i], nbytes[i]))
			return 0;
	return 1;
}

/* Every layer of checkpoint `step`, put as `how`: 0 in one call, 1 one by one, 2 in halves. */
static int
put_all(struct pmck_pipeline *p, int how)
{
	static const uint32_t order[LAYERS] = {30, 0, 50, 10, 40, 20};
	const void *const *srcs = (const void *const *)dev;
	int ret = 0;

	if (how == 0)
		return pmck_pipeline_put_layers_stream(p, order, LAYERS, srcs, NULL);
	if (how == 2) {
		ret = pmck_pipeline_put_layers_stream(p, order, LAYERS / 2, srcs, NULL);
		return ret ? ret : pmck_pipeline_put_layers_stream(p, order + LAYERS / 2,
				LAYERS - LAYERS / 2, srcs, NULL);
	}
	for (unsigned l = 0; l < LAYERS && !ret; l++)
		ret = pmck_pipeline_put_layer(p, order[l], srcs);
	return ret;
}

/* Checkpoint `step` of the current contents, its layers put as `how` (put_all), committed. */
static int
checkpoint(struct pmck_pipeline *p, uint64_t step, int how)
{
	int ret = pmck_pipeline_begin(p, step);
	if (!ret)
		ret = put_all(p, how);
	return ret ? ret : pmck_pipeline_wait(p);
}

/*
 * Device hashing: a checkpoint whose first tensor is put from an odd
 * address (a view at an odd offset) and whose second from an 8-aligned
 * one: the writers hash the first's chunks, the GPU the second's, and it
 * comes back bit-exact.
 */
static int
checkpoint_odd_source(struct pmck_pipeline *p, uint64_t step)
{
	uint8_t *odd = malloc(nbytes[0] + 1);
	const void *srcs[N];
	int ret = pmck_pipeline_begin(p, step);

	memcpy(odd + 1, dev[0], nbytes[0]);
	for (size_t i = 0; i < N; i++)
		srcs[i] = i ? dev[i] : odd + 1;
	for (unsigned l = 0; l < LAYERS && !ret; l++)
		ret = pmck_pipeline_put_layer(p, l * 10, srcs);
	if (!ret)
		ret = pmck_pipeline_wait(p);
	free(odd);
	return ret;
}

/* A store at path and a D (DMA) pipeline of `threads` writers with device hashing. */
static int
open_device_hashing(const char *path, unsigned threads, const char *what, struct pma_region **r,
		struct pma_pool **pool, struct pmck_store **s, struct pmck_pipeline **p)
{
	struct pmck_pipeline_opts o = {.threads = threads, .numa_node = -1,
			.source = PMCK_SOURCE_GPU_DIRECT};

	setenv("PMCK_GPU_HASH", "device", 1);
	if (open_store(path, 128 << 20, 0, "f", descs, N, r, pool, s) ||
	    pmck_pipeline_new(*s, &o, p)) {
		ok(0, "%s: set up: %s", what, pmck_errormsg());
		return -1;
	}
	return 0;
}

/*
 * Device hashing, D: the hash kernel reads the sources, so a caller's
 * stream-ordered wait for a layer must order after it too.  Layer 20 is put
 * alone, after the others are persisted; its writers (one per piece) are
 * held before its hashes run; the caller waits for the layer on its stream
 * and overwrites its sources; then the writers go on.  The checkpoint must
 * hold, and verify with, the values put.
 */
static void
test_hash_order(const char *path, uint64_t *step)
{
	struct pma_region *r;
	struct pma_pool *pool;
	struct pmck_store *s;
	struct pmck_pipeline *p;
	static const uint32_t others[] = {0, 10, 30, 40, 50}, last = 20;
	const void *const *srcs = (const void *const *)dev;

	if (open_device_hashing(path, 8, "hash order", &r, &pool, &s, &p))
		return;
	fill(++*step);
	int ret = pmck_pipeline_begin(p, *step);
	if (!ret)
		ret = pmck_pipeline_put_layers_stream(p, others, 5, srcs, NULL);
	for (unsigned l = 0; l < 5 && !ret; l++)
		ret = pmck_pipeline_wait_layer(p, others[l]);
	hold_hash_waits(1);
	if (!ret)
		ret = pmck_pipeline_put_layer(p, last, srcs);
	if (!ret)
		ret = pmck_pipeline_wait_layer_stream(p, last, NULL);
	for (size_t i = 2 * PER_LAYER; i < 3 * PER_LAYER && !ret; i++)
		memset(dev[i], 0xee, nbytes[i]);
	hold_hash_waits(0);
	if (!ret)
		ret = pmck_pipeline_wait(p);
	ok(!ret && exact(s, *step), "D (DMA), device hashing: sources overwritten right after "
			"wait_layer_stream, before the writers took the hashes: the checkpoint holds and "
			"verifies the values put (%s)", ret ? pmck_errormsg() : "");
	pmck_pipeline_delete(&p);
	close_store(&r, &pool, &s);
}

/*
 * Device hashing in several kernels: a put's chunks go to the GPU in runs
 * of whole layers, the first of 16 chunks and each next twice as large, so
 * that a writer waits only for the kernel of its own layer.  Every layer
 * put in one call (about 10 chunks each: kernels of layers 30 and 0, then
 * of the other four), one writer, held in the copy of layer 50's first
 * piece: layers 30 and 0 persist with 20 chunks hashed, not 60.  Then the
 * checkpoint completes bit-exact, every chunk hashed once.
 */
static void
test_hash_groups(const char *path, uint64_t *step)
{
	struct pma_region *r;
	struct pma_pool *pool;
	struct pmck_store *s;
	struct pmck_pipeline *p;

	if (open_device_hashing(path, 1, "hash groups", &r, &pool, &s, &p))
		return;
	fill(++*step);
	unsigned long before = atomic_load(&gpu_hashed), kernels = atomic_load(&hash_kernels);
	unsigned breached = atomic_load(&breaches);
	hold_copy_of_job(2 * 4); /* put_all's third layer (50): after two of 4 pieces each */
	int ret = pmck_pipeline_begin(p, *step);
	if (!ret)
		ret = put_all(p, 0);
	for (uint32_t layer = 0; layer <= 30 && !ret; layer += 30)
		ret = pmck_pipeline_wait_layer(p, layer);
	unsigned long first = atomic_load(&gpu_hashed) - before;
	hold_copy_of_job(-1);
	if (!ret)
		ret = pmck_pipeline_wait(p);
	unsigned long all = atomic_load(&gpu_hashed) - before;
	kernels = atomic_load(&hash_kernels) - kernels;
	breached = atomic_load(&breaches) - breached;
	ok(!ret && exact(s, *step) && first == 20 && all == 60 && kernels == 2 && !breached,
			"D (DMA), device hashing: the put's first kernel (layers 30 and 0, 20 chunks; "
			"then the other four, 40, twice the first's 16) is all its writer waited for "
			"(%lu chunks hashed then, %lu in all, %lu kernels, %u breaches), bit-exact (%s)",
			first, all, kernels, breached, ret ? pmck_errormsg() : "");
	pmck_pipeline_delete(&p);
	close_store(&r, &pool, &s);
}

/* Snapshots on wait: what test_snapshot_on_wait's releaser needs. */
struct releaser {
	pthread_t thread;
	struct pmck_pipeline *p;
};

/* Lets the held writers go on once a wait has taken its snapshot, a little later. */
static void *
release_after_snapshot(void *arg)
{
	struct releaser *rl = arg;
	struct pmck_pipeline_stats st;

	do {
		usleep(1000);
		pmck_pipeline_stats(rl->p, &st);
	} while (st.snapshot_on_wait_pieces == 0);
	usleep(20000);
	hold_copy_waits(0);
	return NULL;
}

/* The bytes of jobs (pieces of PIECE = 8 MiB) of a layer of make_layout, last job first. */
static const size_t layer_jobs[] = {3, 8192, (1u << 20) + 6, 8u << 20};

/*
 * Snapshots on wait (opts.snapshot_on_wait), strategy src, one writer.
 * The writer takes the first piece and its stream stalls (its copy_wait
 * holds), so every other piece is untaken when the caller waits for the
 * layers on its stream.  With room for the whole state (budget 0 here:
 * 64 MiB) those are snapshotted, in two waits (layers 50 and 10, then
 * all), and the caller overwrites every source at once: the checkpoint
 * must hold the values put.  With 12 MiB the last pieces in the queue are
 * snapshotted (layer 20, put last, then layer 40's pieces that fit), the
 * host waits for the writer to take the rest, and the sources are
 * overwritten as before.  Tensor 0 is put from an odd address, so device
 * hashing's split between writer and GPU must survive the move into the
 * snapshot (a breach otherwise).
 */
static void
test_snapshot_on_wait(const char *path, enum pmck_source src, uint64_t *step, int device_hash,
		size_t budget)
{
	struct pma_region *r;
	struct pma_pool *pool;
	struct pmck_store *s;
	struct pmck_pipeline *p;
	struct pmck_pipeline_opts o = {.threads = 1, .numa_node = -1, .source = src};
	/* The second wait lists every layer twice: each piece is snapshotted once. */
	static const uint32_t order[LAYERS] = {30, 0, 50, 10, 40, 20}, two[] = {50, 10},
			all[] = {0, 10, 20, 30, 40, 50, 50, 40, 30, 20, 10, 0};
	const void *srcs[N];
	uint8_t *odd = malloc(nbytes[0] + 1);
	char name[96];
	unsigned before = atomic_load(&breaches);

	snprintf(name, sizeof(name), "%s%s, snapshot on wait, %s", source_name(src),
			device_hash ? ", device hashing" : "", budget ? "12 MiB" : "room for all");
	setenv("PMCK_GPU_HASH", device_hash ? "device" : "host", 1);
	int ret = open_store(path, 128 << 20, 0, "f", descs, N, &r, &pool, &s);
	/* Room for all: the store's data size, the pieces' alignment being the pipeline's. */
	o.snapshot_on_wait = budget ? budget : ret ? 1 : pmck_store_data_size(s);
	if (ret || pmck_pipeline_new(s, &o, &p)) {
		ok(0, "%s: set up: %s", name, pmck_errormsg());
		free(odd);
		return;
	}
	fill(++*step);
	memcpy(odd + 1, dev[0], nbytes[0]);
	for (size_t i = 0; i < N; i++)
		srcs[i] = i ? dev[i] : odd + 1;
	hold_copy_waits(1);
	ret = pmck_pipeline_begin(p, *step);
	if (!ret)
		ret = pmck_pipeline_put_layers_stream(p, order, LAYERS, srcs, NULL);
	while (!ret && !copies_holding(1))
		usleep(1000); /* the writer has taken the first piece; its stream stalls */

	struct pmck_pipeline_stats st;
	size_t layer_bytes = 0, layer40 = 0, pieces_want = 0, bytes_want = 0;
	for (unsigned k = 0; k < 4; k++)
		layer_bytes += layer_jobs[k];
	if (!budget) {
		if (!ret)
			ret = pmck_pipeline_wait_layers_stream(p, two, 2, NULL);
		pmck_pipeline_stats(p, &st);
		ok(!ret && st.snapshot_on_wait_pieces == 8 &&
				st.snapshot_on_wait_bytes == 2 * layer_bytes,
				"%s: a wait for two layers snapshots their 8 untaken pieces (%llu, %llu "
				"bytes) %s", name, (unsigned long long)st.snapshot_on_wait_pieces,
				(unsigned long long)st.snapshot_on_wait_bytes, ret ? pmck_errormsg() : "");
		pieces_want = 4 * LAYERS - 1; /* all but the piece taken */
		bytes_want = LAYERS * layer_bytes - (8u << 20);
	} else {
		for (unsigned k = 0; k < 3; k++)
			layer40 += layer_jobs[k];
		pieces_want = 4 + 3; /* layer 20's, then layer 40's until its 8 MiB piece */
		bytes_want = layer_bytes + layer40;
	}
	struct releaser rl = {.p = p};
	int threaded = budget && !ret && !pthread_create(&rl.thread, NULL,
			release_after_snapshot, &rl);
	if (!ret)
		ret = pmck_pipeline_wait_layers_stream(p, all, 2 * LAYERS, NULL);
	if (threaded)
		pthread_join(rl.thread, NULL);
	pmck_pipeline_stats(p, &st);
	ok(!ret && st.snapshot_on_wait_pieces == pieces_want &&
			st.snapshot_on_wait_bytes == bytes_want, "%s: the wait for every layer "
			"snapshots %zu pieces, %zu bytes, the last queued first (%llu, %llu) %s",
			name, pieces_want, bytes_want,
			(unsigned long long)st.snapshot_on_wait_pieces,
			(unsigned long long)st.snapshot_on_wait_bytes, ret ? pmck_errormsg() : "");
	memset(odd + 1, 0xee, nbytes[0]);
	for (size_t i = 0; i < N; i++)
		memset(dev[i], 0xee, nbytes[i]);
	hold_copy_waits(0);
	if (!ret)
		ret = pmck_pipeline_wait(p);
	ok(!ret && exact(s, *step), "%s: every source overwritten right after the wait: the "
			"checkpoint holds the values put %s", name, ret ? pmck_errormsg() : "");
	fill(++*step);
	ret = checkpoint(p, *step, 1);
	ok(!ret && exact(s, *step), "%s: the next checkpoint, no wait, bit-exact", name);
	pmck_pipeline_delete(&p);
	close_store(&r, &pool, &s);
	free(odd);
	unsigned n = atomic_load(&breaches) - before;
	is_int(n, 0, "%s: no breach of the GPU contract%s%s", name, n ? ": " : "", n ? first_breach : "");
}

/*
 * Snapshots on wait with three writers running free: 6 checkpoints of
 * strategy src, each waited for at once on the caller's stream (every
 * layer, then some twice) and its sources overwritten: each bit-exact,
 * however many pieces the writers took before the wait (the count varies).
 */
static void
test_snapshot_on_wait_writers(const char *path, enum pmck_source src, uint64_t *step)
{
	struct pma_region *r;
	struct pma_pool *pool;
	struct pmck_store *s;
	struct pmck_pipeline *p;
	struct pmck_pipeline_opts o = {.threads = 3, .numa_node = -1, .source = src,
			.snapshot_on_wait = 20u << 20};
	static const uint32_t all[] = {50, 40, 30, 20, 10, 0, 20, 30};
	unsigned before = atomic_load(&breaches), exact_ones = 0;
	int ret;

	setenv("PMCK_GPU_HASH", "host", 1);
	if (open_store(path, 128 << 20, 0, "f", descs, N, &r, &pool, &s) ||
	    pmck_pipeline_new(s, &o, &p)) {
		ok(0, "%s, snapshot on wait, 3 writers: set up: %s", source_name(src),
				pmck_errormsg());
		return;
	}
	for (int k = 0; k < 6; k++) {
		fill(++*step);
		ret = pmck_pipeline_begin(p, *step);
		if (!ret)
			ret = put_all(p, k % 3);
		if (!ret)
			ret = pmck_pipeline_wait_layers_stream(p, all, 8, NULL);
		for (size_t i = 0; i < N && !ret; i++)
			memset(dev[i], 0xee, nbytes[i]);
		if (!ret)
			ret = pmck_pipeline_wait(p);
		exact_ones += !ret && exact(s, *step);
	}
	struct pmck_pipeline_stats st;
	pmck_pipeline_stats(p, &st);
	is_int(exact_ones, 6, "%s, snapshot on wait, 3 writers free: 6 checkpoints waited for "
			"at once and overwritten, each bit-exact (%llu pieces snapshotted in all)",
			source_name(src), (unsigned long long)st.snapshot_on_wait_pieces);
	pmck_pipeline_delete(&p);
	close_store(&r, &pool, &s);
	unsigned n = atomic_load(&breaches) - before;
	is_int(n, 0, "%s, snapshot on wait, 3 writers: no breach of the GPU contract%s%s",
			source_name(src), n ? ": " : "", n ? first_breach : "");
}

/* What snapshot_on_wait and wait_layers_stream refuse. */
static void
test_snapshot_on_wait_refused(const char *path)
{
	struct pma_region *r;
	struct pma_pool *pool;
	struct pmck_store *s;
	struct pmck_pipeline *p = NULL;
	static const enum pmck_source no[] = {PMCK_SOURCE_HOST, PMCK_SOURCE_GPU_SNAPSHOT};

	setenv("PMCK_GPU_HASH", "host", 1);
	if (open_store(path, 128 << 20, 0, "f", descs, N, &r, &pool, &s)) {
		ok(0, "refusals: set up: %s", pmck_errormsg());
		return;
	}
	for (unsigned k = 0; k < 2; k++) {
		struct pmck_pipeline_opts o = {.threads = 1, .source = no[k],
				.snapshot_on_wait = 1 << 20};
		int ret = pmck_pipeline_new(s, &o, &p);
		ok(ret == -EINVAL && !p && strstr(pmck_errormsg(), "snapshot_on_wait"),
				"snapshot_on_wait with %s refused: %s", source_name(no[k]),
				pmck_errormsg());
	}
	struct pmck_pipeline_opts o = {.threads = 1, .source = PMCK_SOURCE_GPU_DIRECT,
			.snapshot_on_wait = 64u << 20};
	static const uint32_t bad[] = {0, 7};
	uint64_t step = 1000;
	fill(step);
	int ret = pmck_pipeline_new(s, &o, &p);
	hold_copy_waits(1);
	if (!ret)
		ret = pmck_pipeline_begin(p, step);
	if (!ret)
		ret = put_all(p, 0);
	int bad_ret = ret ? ret : pmck_pipeline_wait_layers_stream(p, bad, 2, NULL);
	struct pmck_pipeline_stats st = {0};
	if (p)
		pmck_pipeline_stats(p, &st);
	ok(bad_ret == -EINVAL && strstr(pmck_errormsg(), "wait_layer(7)") &&
			st.snapshot_on_wait_pieces == 0, "wait_layers_stream naming an unknown "
			"layer: -EINVAL, nothing snapshotted: %s", pmck_errormsg());
	is_int(ret ? ret : pmck_pipeline_wait_layers_stream(p, NULL, 0, NULL), 0,
			"wait_layers_stream of no layer: 0");
	hold_copy_waits(0);
	if (!ret)
		ret = pmck_pipeline_wait(p);
	ok(!ret && exact(s, step), "the checkpoint then commits, bit-exact");
	pmck_pipeline_delete(&p);
	close_store(&r, &pool, &s);
}

/*
 * The hashing flags: both at once, or either with host sources, refused by
 * name; $PMCK_GPU_HASH, when set, overrides them both ways (seen by the
 * chunks the stand-in hashes "on the GPU").
 */
static void
test_hash_flags(const char *path, uint64_t *step)
{
	struct pma_region *r;
	struct pma_pool *pool;
	struct pmck_store *s;
	struct pmck_pipeline *p = NULL;
	const unsigned host = PMCK_PIPELINE_GPU_HASH_HOST, device = PMCK_PIPELINE_GPU_HASH_DEVICE;
	static const struct {
		enum pmck_source src;
		unsigned flags;
		const char *says;
	} bad[] = {
		{PMCK_SOURCE_GPU_DIRECT, PMCK_PIPELINE_GPU_HASH_HOST | PMCK_PIPELINE_GPU_HASH_DEVICE,
		 "together"},
		{PMCK_SOURCE_HOST, PMCK_PIPELINE_GPU_HASH_DEVICE, "_DEVICE is for GPU sources"},
		{PMCK_SOURCE_HOST, PMCK_PIPELINE_GPU_HASH_HOST, "_HOST is for GPU sources"},
		{PMCK_SOURCE_GPU_DIRECT, 1u << 7, "unknown pipeline flags 0x80"},
	};

	unsetenv("PMCK_GPU_HASH");
	if (open_store(path, 128 << 20, 0, "f", descs, N, &r, &pool, &s)) {
		ok(0, "hashing flags: set up: %s", pmck_errormsg());
		return;
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct pmck_pipeline_opts o = {.threads = 1, .source = bad[i].src,
				.flags = bad[i].flags};
		int ret = pmck_pipeline_new(s, &o, &p);
		ok(ret == -EINVAL && !p && strstr(pmck_errormsg(), bad[i].says),
				"flags %#x with %s sources refused: %s", bad[i].flags,
				source_name(bad[i].src), pmck_errormsg());
		pmck_pipeline_delete(&p);
	}
	static const struct {
		unsigned flags;
		const char *env;
		int on_gpu;
	} ways[] = {
		{PMCK_PIPELINE_GPU_HASH_DEVICE, "host", 0},
		{PMCK_PIPELINE_GPU_HASH_HOST, "device", 1},
		{0, "device", 1},
		{PMCK_PIPELINE_GPU_HASH_DEVICE, "", 1},
	};
	for (size_t i = 0; i < sizeof(ways) / sizeof(ways[0]); i++) {
		struct pmck_pipeline_opts o = {.threads = 2, .source = PMCK_SOURCE_GPU_DIRECT,
				.flags = ways[i].flags};
		setenv("PMCK_GPU_HASH", ways[i].env, 1);
		unsigned long before = atomic_load(&gpu_hashed);
		int ret = pmck_pipeline_new(s, &o, &p);
		fill(++*step);
		if (!ret)
			ret = checkpoint(p, *step, 0);
		unsigned long hashed = atomic_load(&gpu_hashed) - before;
		ok(!ret && exact(s, *step) && !hashed == !ways[i].on_gpu, "flags %s, "
				"PMCK_GPU_HASH='%s': hashed on the %s (%lu chunks by the \"GPU\"), "
				"bit-exact %s", ways[i].flags == device ? "_DEVICE" :
				ways[i].flags == host ? "_HOST" : "none", ways[i].env,
				ways[i].on_gpu ? "GPU" : "host", hashed, ret ? pmck_errormsg() : "");
		pmck_pipeline_delete(&p);
	}
	unsetenv("PMCK_GPU_HASH");

	/*
	 * A GPU this build has no kernel code for: hashing there is refused at
	 * the pipeline's making (not at every checkpoint's first hash), saying
	 * what to ask instead; the host's hashing works on it.
	 */
	atomic_store(&no_hash_kernel, 1);
	struct pmck_pipeline_opts od = {.threads = 2, .source = PMCK_SOURCE_GPU_DIRECT,
			.flags = PMCK_PIPELINE_GPU_HASH_DEVICE};
	int ret = pmck_pipeline_new(s, &od, &p);
	ok(ret == -ENOTSUP && !p && strstr(pmck_errormsg(), "no code for CUDA device") &&
			strstr(pmck_errormsg(), "PMCK_PIPELINE_GPU_HASH_HOST"), "a GPU without the "
			"hash kernel's code: hashing there refused when the pipeline is made: %s",
			pmck_errormsg());
	pmck_pipeline_delete(&p);
	od.flags = PMCK_PIPELINE_GPU_HASH_HOST;
	ret = pmck_pipeline_new(s, &od, &p);
	fill(++*step);
	if (!ret)
		ret = checkpoint(p, *step, 0);
	ok(!ret && exact(s, *step), "the same GPU, hashing on the host: bit-exact %s",
			ret ? pmck_errormsg() : "");
	pmck_pipeline_delete(&p);
	atomic_store(&no_hash_kernel, 0);
	close_store(&r, &pool, &s);
}

static void
test_source(const char *path, enum pmck_source src, uint64_t *step, int device_hash)
{
	struct pma_region *r;
	struct pma_pool *pool;
	struct pmck_store *s;
	struct pmck_pipeline *p;
	/* Hashing chosen by the flags (K asks for the host's, the default, by name). */
	struct pmck_pipeline_opts o = {.threads = 3, .numa_node = -1, .source = src,
			.flags = device_hash ? PMCK_PIPELINE_GPU_HASH_DEVICE :
				 src == PMCK_SOURCE_GPU_KERNEL ? PMCK_PIPELINE_GPU_HASH_HOST : 0};
	char name[64];
	unsigned before = atomic_load(&breaches);

	snprintf(name, sizeof(name), "%s%s", source_name(src), device_hash ? ", device hashing" : "");
	unsetenv("PMCK_GPU_HASH");

	if (open_store(path, 128 << 20, 0, "f", descs, N, &r, &pool, &s) ||
	    pmck_pipeline_new(s, &o, &p)) {
		ok(0, "%s: set up: %s", name, pmck_errormsg());
		return;
	}
	/* Three checkpoints, the layers put in one call, one by one, and in two calls. */
	int ret = 0, same = 1;
	for (int how = 0; how < 3 && !ret; how++) {
		fill(++*step);
		ret = checkpoint(p, *step, how);
		same &= !ret && exact(s, *step);
	}
	ok(!ret && same, "%s: three checkpoints (put_layers, put_layer, halves), each recovered "
			"bit-exact (%s)", name, ret ? pmck_errormsg() : "");
	/*
	 * Where the writers' time went: waiting for sub-copies and the tails
	 * after them are disjoint parts of running pieces; the wait for the
	 * GPU's hashes is part of the tail, and only with device hashing (not
	 * C, which hashes in its copy).
	 */
	struct pmck_pipeline_stats st;
	pmck_pipeline_stats(p, &st);
	int hashing = device_hash && src != PMCK_SOURCE_GPU_STAGED;
	ok(st.writer_busy_ns && st.writer_copy_wait_ns && st.writer_tail_ns && st.commit_ns &&
			st.writer_copy_wait_ns + st.writer_tail_ns <= st.writer_busy_ns &&
			st.writer_hash_wait_ns <= st.writer_tail_ns && !st.writer_hash_wait_ns == !hashing,
			"%s: writers' time: busy %llu ns, of it copy wait %llu, tail %llu (hash wait "
			"%llu); commits %llu", name, (unsigned long long)st.writer_busy_ns,
			(unsigned long long)st.writer_copy_wait_ns, (unsigned long long)st.writer_tail_ns,
			(unsigned long long)st.writer_hash_wait_ns, (unsigned long long)st.commit_ns);

	/* A stream-ordered wait for a layer, then its sources overwritten: the values put stay. */
	fill(++*step);
	ret = pmck_pipeline_begin(p, *step);
	if (!ret)
		ret = put_all(p, 0);
	if (!ret)
		ret = pmck_pipeline_wait_layer_stream(p, 20, NULL);
	for (size_t i = 2 * PER_LAYER; i < 3 * PER_LAYER && !ret; i++)
		memset(dev[i], 0xee, nbytes[i]);
	if (!ret)
		ret = pmck_pipeline_wait(p);
	ok(!ret && exact(s, *step), "%s: sources overwritten after wait_layer_stream: the "
			"checkpoint has the values put", name);

	/*
	 * Put in two halves (two ready events; G: two snapshots), then one
	 * stream-ordered wait for every layer, the first half's listed first,
	 * and every source overwritten: the values put stay (G: the wait is for
	 * the later snapshot, which the earlier one precedes).
	 */
	static const uint32_t halves_order[LAYERS] = {30, 0, 50, 10, 40, 20};
	fill(++*step);
	/*
	 * The checkpoint's last job (that of the checkpoints before) held in its
	 * writer's copy_wait, so that its layer, of 4 pieces, is still in flight
	 * when the wait is made: one done event per writer stands for all its
	 * jobs, since its stream runs them in order (4 waits, one per piece, fail).
	 */
	pthread_mutex_lock(&open_gpu->lock);
	long last_job = (long)max_job_seen;
	pthread_mutex_unlock(&open_gpu->lock);
	hold_copy_of_job(last_job);
	ret = pmck_pipeline_begin(p, *step);
	if (!ret)
		ret = put_all(p, 2);
	unsigned long waits = atomic_load(&caller_done_waits);
	if (!ret)
		ret = pmck_pipeline_wait_layers_stream(p, halves_order, LAYERS, NULL);
	waits = atomic_load(&caller_done_waits) - waits;
	hold_copy_of_job(-1);
	if (src == PMCK_SOURCE_GPU_SNAPSHOT)
		is_int((int)waits, 0, "%s: the caller's stream waits for no done event (the "
				"snapshot's)", name);
	else
		ok(waits >= 1 && waits <= o.threads, "%s: with a layer in flight, the caller's "
				"stream waits for %lu done events, at most one per writer (%u)", name,
				waits, o.threads);
	for (size_t i = 0; i < N && !ret; i++)
		memset(dev[i], 0xee, nbytes[i]);
	if (!ret)
		ret = pmck_pipeline_wait(p);
	ok(!ret && exact(s, *step), "%s: put in two calls, one wait_layers_stream for all, every "
			"source overwritten: the checkpoint has the values put %s", name,
			ret ? pmck_errormsg() : "");

	/* A copy that fails: the checkpoint aborts, nothing lands later, the next one commits. */
	uint64_t good = *step;
	fill(++*step);
	atomic_store(&fail_wait_in, 5);
	ret = checkpoint(p, *step, 0);
	atomic_store(&fail_wait_in, -1);
	is_int(ret, -EIO, "%s: a failed copy fails the checkpoint", name);
	struct pmck_recovery rec;
	ok(pmck_store_recover(s, &rec) == 0 && rec.step == good, "%s: the step before it is "
			"still the newest", name);
	fill(++*step);
	ret = checkpoint(p, *step, 1);
	ok(!ret && exact(s, *step), "%s: the next checkpoint commits, bit-exact", name);
	if (device_hash) {
		/*
		 * 10 chunks per layer go to the GPU (9 MiB of the first tensor and the
		 * 8 KiB one; the 6-byte and 3-byte rests are too short), less the 9 of
		 * the tensor put from an odd address, except for G, which hashes its
		 * snapshot (aligned); C hashes in its copy, never there.
		 */
		unsigned long want = src == PMCK_SOURCE_GPU_STAGED ? 0 :
				src == PMCK_SOURCE_GPU_SNAPSHOT ? 10 * LAYERS : 10 * LAYERS - 9;
		unsigned long hashed_before = atomic_load(&gpu_hashed);
		fill(++*step);
		ret = checkpoint_odd_source(p, *step);
		ok(!ret && exact(s, *step), "%s: a tensor put from an odd address (hashed by a "
				"writer) beside aligned ones, bit-exact", name);
		is_int((long)(atomic_load(&gpu_hashed) - hashed_before), (long)want,
				"%s: the chunks the kernel takes were hashed by the \"GPU\"", name);
	}
	pmck_pipeline_delete(&p);
	close_store(&r, &pool, &s);
	unsigned n = atomic_load(&breaches) - before;
	is_int(n, 0, "%s: no breach of the GPU contract%s%s", name, n ? ": " : "", n ? first_breach : "");
}

/* What each of two threads took from pmck__pace: interval begins, and when it returned. */
#define PACED 12
struct paced {
	uint64_t begin[PACED], back[PACED];
};

static void *
take_intervals(void *arg)
{
	struct paced *t = arg;

	for (unsigned i = 0; i < PACED; i++) {
		t->begin[i] = pmck__pace(2, 1u << 20);
		t->back[i] = pmck__now_ns();
	}
	return NULL;
}

static int
cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/*
 * $PMCK_GPU_RATE_GBPS (pace.c): the schedule gives two threads intervals that
 * never overlap and returns none before its begins; a bad value is refused
 * before the GPU path opens; a paced checkpoint commits bit-exact and cannot
 * have taken less than its bytes at the pace (all but its largest piece).
 */
static void
test_pace(const char *path, uint64_t *step)
{
	struct paced t[2];
	pthread_t th[2];
	int started = 0;
	for (int i = 0; i < 2; i++)
		started += !pthread_create(&th[i], NULL, take_intervals, &t[i]);
	for (int i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	uint64_t all[2 * PACED];
	int early = 0, overlap = 0;
	for (int i = 0; i < 2; i++)
		for (unsigned k = 0; k < PACED; k++) {
			all[i * PACED + k] = t[i].begin[k];
			early += t[i].back[k] < t[i].begin[k];
		}
	qsort(all, 2 * PACED, sizeof(all[0]), cmp_u64);
	for (unsigned k = 1; k < 2 * PACED; k++)
		overlap += all[k] - all[k - 1] < (1u << 20) / 2;
	ok(started == 2 && !early && !overlap, "pace: two threads, %d intervals of 1 MiB at 2 GB/s: "
			"none overlaps another (%d did), none returned before it began (%d did)",
			2 * PACED, overlap, early);

	struct pma_region *r;
	struct pma_pool *pool;
	struct pmck_store *s;
	struct pmck_pipeline *p = NULL;
	struct pmck_pipeline_opts o = {.threads = 3, .numa_node = -1,
			.source = PMCK_SOURCE_GPU_DIRECT};
	static const char *const bad[] = {"0", "1001", "2.5", "-3", "fast"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		setenv("PMCK_GPU_RATE_GBPS", bad[i], 1);
		open_flags = ~0u;
		int ret = open_store(path, 128 << 20, 0, "f", descs, N, &r, &pool, &s);
		if (!ret)
			ret = pmck_pipeline_new(s, &o, &p);
		ok(ret == -EINVAL && !p && open_flags == ~0u &&
				strstr(pmck_errormsg(), "PMCK_GPU_RATE_GBPS=") &&
				strstr(pmck_errormsg(), bad[i]) && strstr(pmck_errormsg(), "1 to 1000"),
				"PMCK_GPU_RATE_GBPS=%s refused before the GPU path opens: %s", bad[i],
				pmck_errormsg());
		pmck_pipeline_delete(&p);
		close_store(&r, &pool, &s);
	}

	setenv("PMCK_GPU_RATE_GBPS", "1", 1);
	unsigned before = atomic_load(&breaches);
	int ret = open_store(path, 128 << 20, 0, "f", descs, N, &r, &pool, &s);
	if (!ret)
		ret = pmck_pipeline_new(s, &o, &p);
	struct pmck_recovery rec;
	if (!ret && !pmck_store_recover(s, &rec) && rec.step > *step)
		*step = rec.step; /* after the tests that chose their own steps */
	/*
	 * Only the checkpoints are timed (not the fills and checks between them):
	 * each one's last interval begins no sooner than its bytes less that
	 * piece's (8 MiB at most) after it began.
	 */
	uint64_t bytes = 0, took = 0, least = 0, paced = pmck__pace_bytes();
	for (int k = 0; k < 4 && !ret; k++) {
		fill(++*step);
		uint64_t t0 = pmck__now_ns();
		ret = checkpoint(p, *step, k % 3);
		took += pmck__now_ns() - t0;
		ret = ret ? ret : exact(s, *step) ? 0 : -EBADMSG;
		for (size_t i = 0; i < N; i++)
			bytes += nbytes[i];
		least = bytes - (k + 1) * (8u << 20);
	}
	paced = pmck__pace_bytes() - paced;
	ok(!ret && paced == bytes && took >= least, "PMCK_GPU_RATE_GBPS=1: four checkpoints "
			"(%.1f MB, %.1f MB of it paced) bit-exact, in %.1f ms, not under the %.1f ms "
			"their pieces take at the pace%s%s", bytes / 1e6, paced / 1e6, took / 1e6,
			least / 1e6, ret ? ": " : "", ret ? pmck_errormsg() : "");
	pmck_pipeline_delete(&p);
	close_store(&r, &pool, &s);
	unsetenv("PMCK_GPU_RATE_GBPS");
	unsigned n = atomic_load(&breaches) - before;
	is_int(n, 0, "paced: no breach of the GPU contract%s%s", n ? ": " : "", n ? first_breach : "");
}

int
main(void)
{
	const char *path = scratch_path("gpu-fake");
	struct pma_region *r;
	struct pma_pool *pool;
	struct pmck_store *s;

	/* Some tests hold the writers: a pipeline that waits for a held one hangs; fail instead. */
	alarm(600);
	make_layout();
	unlink(path);
	if (open_store(path, 128 << 20, 1, "f", descs, N, &r, &pool, &s))
		return 1;
	close_store(&r, &pool, &s);
	uint64_t step = 0;
	for (int device_hash = 0; device_hash <= 1; device_hash++)
		for (enum pmck_source src = PMCK_SOURCE_GPU_DIRECT; src <= PMCK_SOURCE_GPU_SNAPSHOT;
		     src++)
			test_source(path, src, &step, device_hash);
	test_hash_order(path, &step);
	test_hash_groups(path, &step);
	for (enum pmck_source src = PMCK_SOURCE_GPU_DIRECT; src <= PMCK_SOURCE_GPU_STAGED; src++)
		for (int device_hash = 0; device_hash <= 1; device_hash++)
			for (size_t budget = 0; budget <= (12u << 20); budget += 12u << 20)
				if (!device_hash || src == PMCK_SOURCE_GPU_DIRECT)
					test_snapshot_on_wait(path, src, &step, device_hash, budget);
	for (enum pmck_source src = PMCK_SOURCE_GPU_DIRECT; src <= PMCK_SOURCE_GPU_STAGED; src++)
		test_snapshot_on_wait_writers(path, src, &step);
	test_snapshot_on_wait_refused(path);
	test_pace(path, &step);

	/* A mistyped PMCK_GPU_HASH is refused, saying what it takes. */
	struct pmck_pipeline *p = NULL;
	struct pmck_pipeline_opts o = {.threads = 1, .source = PMCK_SOURCE_GPU_DIRECT};
	setenv("PMCK_GPU_HASH", "gpu", 1);
	int ret = open_store(path, 128 << 20, 0, "f", descs, N, &r, &pool, &s);
	if (!ret)
		ret = pmck_pipeline_new(s, &o, &p);
	ok(ret == -EINVAL && !p && strstr(pmck_errormsg(), "PMCK_GPU_HASH=gpu") &&
			strstr(pmck_errormsg(), "'device'"), "PMCK_GPU_HASH=gpu refused: %s",
			pmck_errormsg());
	pmck_pipeline_delete(&p);
	close_store(&r, &pool, &s);
	unsetenv("PMCK_GPU_HASH");
	test_hash_flags(path, &step);

	/* PMCK_GPU_WAIT: the writers' events spin by default, block when asked; a typo is refused. */
	static const struct {
		const char *value; /* NULL: unset */
		int ret;
		unsigned flags;
	} waits[] = {{NULL, 0, 0}, {"spin", 0, 0}, {"block", 0, PMCK_GPU_BLOCKING_WAITS},
		     {"poll", -EINVAL, 0}};
	for (size_t i = 0; i < sizeof(waits) / sizeof(waits[0]); i++) {
		if (waits[i].value)
			setenv("PMCK_GPU_WAIT", waits[i].value, 1);
		else
			unsetenv("PMCK_GPU_WAIT");
		open_flags = ~0u;
		ret = open_store(path, 128 << 20, 0, "f", descs, N, &r, &pool, &s);
		if (!ret)
			ret = pmck_pipeline_new(s, &o, &p);
		if (waits[i].ret)
			ok(ret == waits[i].ret && !p && open_flags == ~0u &&
					strstr(pmck_errormsg(), "PMCK_GPU_WAIT=poll") &&
					strstr(pmck_errormsg(), "'block'"),
					"PMCK_GPU_WAIT=poll refused before the GPU path opens: %s",
					pmck_errormsg());
		else
			ok(ret == 0 && p && open_flags == waits[i].flags,
					"PMCK_GPU_WAIT %s: the GPU path opened with flags %#x",
					waits[i].value ? waits[i].value : "unset", open_flags);
		pmck_pipeline_delete(&p);
		close_store(&r, &pool, &s);
	}
	unsetenv("PMCK_GPU_WAIT");
	unlink(path);
	for (size_t i = 0; i < N; i++) {
		free(dev[i]);
		free(want[i]);
	}
	return done_testing();
}
