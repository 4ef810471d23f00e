/*
 * gpu_pipeline.c -- the GPU -> PM path: for each strategy (D by DMA, D by
 * copy kernel, C staged, G snapshot) a bit-exact round trip, layer
 * ordering, and recovery of a GPU-written checkpoint after kill -9; and
 * the stream contract (pmckpt.h, "GPU sources and streams"): copies
 * ordered after the producer's stream without a synchronisation, not
 * held up by work queued later on the legacy default stream, and a
 * stream-ordered wait_layer after which that stream may overwrite the
 * sources; several layers put in one call from unaligned views; snapshots
 * on wait (opts.snapshot_on_wait) that free the sources before the
 * writers reach them.  All of
 * it twice: with the writers hashing what lands, and with the GPU hashing
 * the sources ($PMCK_GPU_HASH=device; the crash trials: half).  Skips
 * without CUDA or without a device; never passes without running.
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <unistd.h>
#include <sys/wait.h>
#include <time.h>

#include "pmckpt.h"
#include "tap.h"
#include "ckpt_util.h"

#ifndef PMCK_HAVE_CUDA
int
main(void)
{
	skip_all("built without CUDA");
}
#else
#include <cuda_runtime_api.h>

#define LAYERS 4
#define PER_LAYER 4
#define N (LAYERS * PER_LAYER)

static struct pmck_tensor_desc descs[N];
static int device_hash; /* $PMCK_GPU_HASH=device for the pipelines made (main sets it) */
static char names[N][32];
static size_t nbytes[N];
static uint8_t *host[N];
static void *dev[N];

static void
make_layout(void)
{
	for (size_t i = 0; i < N; i++) {
		unsigned k = i % PER_LAYER;
		snprintf(names[i], sizeof(names[i]), "l%zu.t%u", i / PER_LAYER, k);
		descs[i] = (struct pmck_tensor_desc){.name = names[i], .dtype = PMCK_DTYPE_BF16,
				.ndim = 1, .layer = (uint32_t)(i / PER_LAYER)};
		/*
		 * 20 MiB + 6 bytes (pieces with an odd tail), 8 KiB, 1 element, and
		 * 3402 bytes (device hashing: 3 blocks, 5 stripes and a last stripe
		 * at an odd offset)
		 */
		descs[i].shape[0] = k == 0 ? (10u << 20) + 3 : k == 1 ? 4096 : k == 2 ? 1 : 1701;
		nbytes[i] = descs[i].shape[0] * 2;
		host[i] = malloc(nbytes[i]);
	}
}

static void
fill(uint64_t step)
{
	for (size_t i = 0; i < N; i++)
		for (size_t k = 0; k < nbytes[i]; k++)
			host[i][k] = (uint8_t)((step * 7919 + i * 131 + k * 17) >> 2);
}

static int
upload(void)
{
	for (size_t i = 0; i < N; i++)
		if (cudaMemcpy(dev[i], host[i], nbytes[i], cudaMemcpyHostToDevice) != cudaSuccess)
			return -1;
	return 0;
}

/* The strategy's name, and the hashing's when on the device. */
static const char *
name_of(enum pmck_source src)
{
	static char buf[64];
	snprintf(buf, sizeof(buf), "%s%s", source_name(src), device_hash ? ", device hashing" : "");
	return buf;
}

/* This test's store: a 192 MiB region, store "g", the layout above. */
static int
open_test_store(const char *path, int create, struct pma_region **r, struct pma_pool **pool,
		struct pmck_store **s)
{
	return open_store(path, 192 << 20, create, "g", descs, N, r, pool, s);
}

static int
exact(struct pmck_store *s, uint64_t step)
{
	fill(step);
	for (size_t i = 0; i < N; i++)
		if (memcmp(pmck_store_tensor_data(s, i), host[i], nbytes[i]))
			return 0;
	return 1;
}

/* Runs checkpoints from device memory; reports each commit on fd (if >= 0). */
static int
gpu_checkpoints(const char *path, enum pmck_source src, uint64_t first, uint64_t last, int fd)
{
	struct pma_region *r;
	struct pma_pool *pool;
	struct pmck_store *s;
	struct pmck_pipeline *p;
	struct pmck_pipeline_opts o = {.threads = 2, .numa_node = -1, .source = src};
	int ret;

	if (open_test_store(path, 0, &r, &pool, &s))
		return -1;
	if ((ret = pmck_pipeline_new(s, &o, &p))) {
		diag("%s: %s", name_of(src), pmck_errormsg());
		close_store(&r, &pool, &s);
		return ret;
	}
	for (uint64_t step = first; step <= last && !ret; step++) {
		fill(step);
		for (unsigned l = 0; l < LAYERS; l++)
			pmck_pipeline_wait_layer(p, l);
		if (upload())
			ret = -EIO;
		if (!ret)
			ret = pmck_pipeline_begin(p, step);
		for (unsigned l = 0; l < LAYERS && !ret; l++)
			ret = pmck_pipeline_put_layer(p, l, (const void *const *)dev);
		if (!ret)
			ret = pmck_pipeline_wait(p);
		if (!ret && fd >= 0 && write(fd, &step, sizeof(step)) != sizeof(step))
			ret = -EIO;
	}
	if (ret)
		diag("%s: %s", name_of(src), pmck_errormsg());
	pmck_pipeline_delete(&p);
	close_store(&r, &pool, &s);
	return ret;
}

static int
alloc_device(void)
{
	for (size_t i = 0; i < N; i++)
		if (cudaMalloc(&dev[i], nbytes[i]) != cudaSuccess)
			return -1;
	return 0;
}

/* A stream stalled on the host: CUDA runs it when the stream reaches it. */
struct stall {
	unsigned ms;
	atomic_int done;
};

static void
stall_fn(void *arg)
{
	struct stall *st = arg;
	usleep(st->ms * 1000u);
	atomic_store(&st->done, 1);
}

/* Whether every tensor of the store's newest checkpoint is `byte` throughout. */
static int
all_bytes(struct pmck_store *s, uint8_t byte)
{
	for (size_t i = 0; i < N; i++) {
		const uint8_t *d = pmck_store_tensor_data(s, i);
		for (size_t k = 0; k < nbytes[i]; k++)
			if (d[k] != byte)
				return 0;
	}
	return 1;
}

/* The open store's newest checkpoint is `step`, every byte `byte` (nothing in flight). */
static int
newest_is(struct pmck_store *s, uint64_t step, uint8_t byte)
{
	struct pmck_recovery rec;
	return pmck_store_recover(s, &rec) == 0 && rec.step == step && all_bytes(s, byte);
}

/* Begins `step` and puts every layer: ready on `stream`, or through put_layer if NULL. */
static int
begin_put_all(struct pmck_pipeline *p, uint64_t step, cudaStream_t stream)
{
	int ret = pmck_pipeline_begin(p, step);
	for (unsigned l = 0; l < LAYERS && !ret; l++)
		ret = stream ? pmck_pipeline_put_layer_stream(p, l, (const void *const *)dev, stream) :
			pmck_pipeline_put_layer(p, l, (const void *const *)dev);
	return ret;
}

/*
 * The store, a pipeline of strategy src (2 writers; 1 with snapshot_on_wait
 * bytes for snapshots on wait) and a non-blocking side stream.
 */
struct rig {
	struct pma_region *r;
	struct pma_pool *pool;
	struct pmck_store *s;
	struct pmck_pipeline *p;
	cudaStream_t side;
};

static int
rig_open(struct rig *g, const char *path, enum pmck_source src, size_t snapshot_on_wait)
{
	struct pmck_pipeline_opts o = {.threads = snapshot_on_wait ? 1 : 2, .numa_node = -1,
			.source = src, .snapshot_on_wait = snapshot_on_wait};

	*g = (struct rig){0};
	if (open_test_store(path, 0, &g->r, &g->pool, &g->s))
		return -1;
	if (cudaStreamCreateWithFlags(&g->side, cudaStreamNonBlocking) != cudaSuccess ||
	    pmck_pipeline_new(g->s, &o, &g->p)) {
		ok(0, "%s: set up: %s", name_of(src), pmck_errormsg());
		if (g->side)
			cudaStreamDestroy(g->side);
		close_store(&g->r, &g->pool, &g->s);
		return -1;
	}
	return 0;
}

static void
rig_close(struct rig *g)
{
	cudaStreamSynchronize(g->side);
	cudaStreamDestroy(g->side);
	pmck_pipeline_delete(&g->p);
	close_store(&g->r, &g->pool, &g->s);
}

/* The stream contract, for strategy src (pmckpt.h, "GPU sources and streams"). */
static void
test_streams(const char *path, enum pmck_source src, uint64_t step)
{
	struct rig g;
	const char *name = name_of(src);
	int ret;

	if (rig_open(&g, path, src, 0))
		return;
	struct pmck_store *s = g.s;
	struct pmck_pipeline *p = g.p;
	cudaStream_t side = g.side;

	/* 1. Sources written on a side stream, 300 ms late; put at once, no synchronisation. */
	struct stall late = {.ms = 300};
	cudaLaunchHostFunc(side, stall_fn, &late);
	for (size_t i = 0; i < N; i++)
		cudaMemsetAsync(dev[i], 0x5a, nbytes[i], side);
	ret = begin_put_all(p, ++step, side);
	ok(!ret && !atomic_load(&late.done), "%s: put_layer_stream returns before the side "
			"stream's writes ran", name);
	ret = ret ? ret : pmck_pipeline_wait(p);
	is_int(ret, 0, "%s: committed", name);
	ok(newest_is(s, step, 0x5a), "%s: the checkpoint holds the side stream's values: its "
			"copies waited for them on the GPU", name);

	/* 2. Work queued on the legacy default stream after the put does not hold it up. */
	struct stall busy = {.ms = 2000};
	ret = begin_put_all(p, ++step, NULL);
	cudaLaunchHostFunc(cudaStreamLegacy, stall_fn, &busy);
	ret = ret ? ret : pmck_pipeline_wait(p);
	ok(!ret && !atomic_load(&busy.done), "%s: committed while the legacy default stream was "
			"still busy (2 s queued after the put)", name);
	cudaStreamSynchronize(cudaStreamLegacy);

	/*
	 * 3. Stream-ordered wait: the side stream waits for the layer's copies
	 * on the GPU, then overwrites the sources; the copies (held back 300
	 * ms behind the ready event) still read the values put.  Whether the
	 * host waited is not asserted: a writer enqueues its next piece once
	 * its current one landed, so a layer of more pieces than writers waits
	 * on the host for the earlier ones (pmckpt.h); only G never does.
	 */
	struct stall hold = {.ms = 300};
	cudaLaunchHostFunc(side, stall_fn, &hold);
	ret = begin_put_all(p, ++step, side);
	for (unsigned l = 0; l < LAYERS && !ret; l++) {
		ret = pmck_pipeline_wait_layer_stream(p, l, side);
		for (size_t i = l * PER_LAYER; i < (l + 1) * PER_LAYER && !ret; i++)
			cudaMemsetAsync(dev[i], 0xee, nbytes[i], side);
	}
	is_int(ret, 0, "%s: wait_layer_stream of every layer", name);
	diag("%s: wait_layer_stream returned %s the held-back copies ran", name,
			atomic_load(&hold.done) ? "after" : "before");
	ret = ret ? ret : pmck_pipeline_wait(p);
	is_int(ret, 0, "%s: committed", name);
	ok(newest_is(s, step, 0x5a), "%s: the sources overwritten after wait_layer_stream on "
			"the same stream: the checkpoint has the values put", name);
	rig_close(&g);
}

/*
 * Snapshots on wait (D, D by kernel, C): sources written on the side
 * stream 300 ms late, every layer put, and at once a stream-ordered wait
 * for all of them on that stream, which then overwrites the sources.  One
 * writer has taken a piece at most, whose copy waits for the 300 ms, so
 * the wait snapshots the rest on the GPU and returns without waiting for a
 * landing; the checkpoint must hold the values put.
 */
static void
test_snapshot_on_wait(const char *path, enum pmck_source src, uint64_t step)
{
	static const uint32_t all[LAYERS] = {0, 1, 2, 3};
	char name[96];
	struct rig g;
	size_t total = 0;

	for (size_t i = 0; i < N; i++)
		total += nbytes[i];
	snprintf(name, sizeof(name), "%s, snapshot on wait", name_of(src));
	if (rig_open(&g, path, src, total)) /* the pipeline adds the pieces' alignment */
		return;
	struct stall late = {.ms = 300};
	cudaLaunchHostFunc(g.side, stall_fn, &late);
	for (size_t i = 0; i < N; i++)
		cudaMemsetAsync(dev[i], 0x5a, nbytes[i], g.side);
	int ret = begin_put_all(g.p, ++step, g.side);
	if (!ret)
		ret = pmck_pipeline_wait_layers_stream(g.p, all, LAYERS, g.side);
	int early = !atomic_load(&late.done);
	for (size_t i = 0; i < N && !ret; i++)
		cudaMemsetAsync(dev[i], 0xee, nbytes[i], g.side);
	struct pmck_pipeline_stats st;
	pmck_pipeline_stats(g.p, &st);
	ok(!ret && early && st.snapshot_on_wait_pieces > 0, "%s: wait_layers_stream of every "
			"layer returns before the sources are written, having snapshotted %llu "
			"pieces (%llu bytes) %s", name, (unsigned long long)st.snapshot_on_wait_pieces,
			(unsigned long long)st.snapshot_on_wait_bytes, ret ? pmck_errormsg() : "");
	ret = ret ? ret : pmck_pipeline_wait(g.p);
	is_int(ret, 0, "%s: committed", name);
	ok(newest_is(g.s, step, 0x5a), "%s: the sources overwritten right after the wait on the "
			"same stream: the checkpoint has the values put", name);
	rig_close(&g);
}

/*
 * pmck_pipeline_put_layers_stream: every layer in one call (one ready event;
 * G: one snapshot kernel), in a shuffled order, from views at odd offsets
 * (4-, 2- and 2-byte aligned: the snapshot kernel's narrower copies), written
 * 300 ms late on a side stream; then a stream-ordered wait for one layer
 * after which the side stream overwrites its sources.
 */
static void
test_put_layers(const char *path, enum pmck_source src, uint64_t step)
{
	static const uint32_t order[LAYERS] = {2, 0, 3, 1};
	static const size_t skew[PER_LAYER] = {4, 2, 6, 0};
	struct rig g;
	char *base[N] = {0};
	const void *view[N];
	const char *name = name_of(src);
	int ret = 0;

	for (size_t i = 0; i < N && !ret; i++) {
		ret = cudaMalloc((void **)&base[i], nbytes[i] + 16) != cudaSuccess;
		view[i] = base[i] + skew[i % PER_LAYER];
	}
	fill(step);
	if (ret || upload()) {
		ok(0, "%s: put_layers: device buffers", name);
		ret = -1;
	} else {
		ret = rig_open(&g, path, src, 0);
	}
	if (ret) {
		for (size_t i = 0; i < N; i++)
			cudaFree(base[i]);
		return;
	}
	struct pmck_store *s = g.s;
	struct pmck_pipeline *p = g.p;
	cudaStream_t side = g.side;
	struct stall late = {.ms = 300};
	cudaLaunchHostFunc(side, stall_fn, &late);
	for (size_t i = 0; i < N; i++)
		cudaMemcpyAsync((void *)view[i], dev[i], nbytes[i], cudaMemcpyDeviceToDevice, side);
	ret = pmck_pipeline_begin(p, step);
	ret = ret ? ret : pmck_pipeline_put_layers_stream(p, order, LAYERS, view, side);
	ok(!ret && !atomic_load(&late.done), "%s: put_layers_stream of %d layers returns before "
			"the side stream's writes ran", name, LAYERS);
	ret = ret ? ret : pmck_pipeline_wait_layer_stream(p, order[0], side);
	for (size_t i = order[0] * PER_LAYER; i < (order[0] + 1) * PER_LAYER && !ret; i++)
		cudaMemsetAsync((void *)view[i], 0xee, nbytes[i], side);
	ret = ret ? ret : pmck_pipeline_wait(p);
	is_int(ret, 0, "%s: committed (%s)", name, ret ? pmck_errormsg() : "");
	struct pmck_recovery rec;
	ok(pmck_store_recover(s, &rec) == 0 && rec.step == step && exact(s, step),
			"%s: every tensor bit-exact from the odd views, the layer overwritten after "
			"its stream-ordered wait included", name);
	rig_close(&g);
	for (size_t i = 0; i < N; i++)
		cudaFree(base[i]);
}

/* Before the parent touches CUDA: children that use it are forked from a clean process. */
static void
test_crash(const char *path, int trials)
{
	struct pma_region *r;
	struct pma_pool *pool;
	struct pmck_store *s;
	struct pmck_recovery rec;
	int bad = 0, recovered = 0;

	for (int t = 0; t < trials; t++) {
		int fds[2];
		if (pipe(fds))
			break;
		pid_t pid = fork();
		if (pid == 0) {
			close(fds[0]);
			open_test_store(path, 0, &r, &pool, &s);
			uint64_t first = pmck_store_recover(s, &rec) == 0 ? rec.step + 1 : 1;
			close_store(&r, &pool, &s);
			if (alloc_device())
				_exit(2);
			if (t & 4) /* the second half with device hashing */
				setenv("PMCK_GPU_HASH", "device", 1);
			gpu_checkpoints(path, PMCK_SOURCE_GPU_DIRECT + t % 4, first, first + 1000, fds[1]);
			_exit(3);
		}
		close(fds[1]);
		uint64_t step, last = 0;
		/* Let the child start CUDA and commit at least once, then kill it at random. */
		if (read(fds[0], &step, sizeof(step)) == sizeof(step))
			last = step;
		last = kill_child(pid, fds[0], rand() % 50000, last);
		open_test_store(path, 0, &r, &pool, &s);
		if (pmck_store_recover(s, &rec) == 0 && rec.step >= last && exact(s, rec.step)) {
			recovered++;
		} else {
			bad++;
			diag("trial %d: last commit %llu, recovered %llu: %s", t,
					(unsigned long long)last, (unsigned long long)rec.step, pmck_errormsg());
		}
		close_store(&r, &pool, &s);
	}
	is_int(bad, 0, "%d kills during GPU checkpoints: all recovered bit-exact, never older than "
			"the last commit (%d)", trials, recovered);
}

int
main(void)
{
	const char *path = scratch_path("gpu");
	struct pma_region *r;
	struct pma_pool *pool;
	struct pmck_store *s;
	struct pmck_recovery rec;

	/* Probe in a child: CUDA must not be initialised in the parent before fork. */
	pid_t probe = fork();
	if (probe == 0)
		_exit(pmck_gpu_available(0) ? 1 : 0);
	int status;
	waitpid(probe, &status, 0);
	if (!WIFEXITED(status) || WEXITSTATUS(status)) {
		pmck_gpu_available(0);
		skip_all(pmck_errormsg());
	}
	srand((unsigned)time(NULL));
	make_layout();
	unlink(path);
	if (open_test_store(path, 1, &r, &pool, &s))
		return 1;
	close_store(&r, &pool, &s);
	test_crash(path, 8);

	if (alloc_device())
		return 1;
	uint64_t step = 1000000;
	/* Each strategy with the writers hashing what lands, then with the GPU hashing the sources. */
	for (int dh = 0; dh <= 1; dh++)
	for (enum pmck_source src = PMCK_SOURCE_GPU_DIRECT; src <= PMCK_SOURCE_GPU_SNAPSHOT; src++) {
		device_hash = dh;
		setenv("PMCK_GPU_HASH", dh ? "device" : "host", 1);
		step += 10;
		is_int(gpu_checkpoints(path, src, step, step + 2, -1), 0, "%s: three checkpoints",
				name_of(src));
		open_test_store(path, 0, &r, &pool, &s);
		is_int(pmck_store_recover(s, &rec), 0, "%s: recover", name_of(src));
		is_int(rec.step, step + 2, "%s: newest step", name_of(src));
		ok(exact(s, step + 2), "%s: every tensor bit-exact", name_of(src));
		close_store(&r, &pool, &s);
		test_streams(path, src, step + 2);
		test_put_layers(path, src, step + 6);
		if (src != PMCK_SOURCE_GPU_SNAPSHOT)
			test_snapshot_on_wait(path, src, step + 7);
		step += 3;
	}
	unlink(path);
	return done_testing();
}
#endif
