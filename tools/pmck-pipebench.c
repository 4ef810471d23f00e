/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * pmck-pipebench -- what training waits for per checkpoint, and the GPU path's bandwidth.
 *
 * Host path: a GPT-2-medium-shaped layer list (fp32), a training loop with a
 * synthetic compute delay per layer (sleep: the GPU would be computing),
 * checkpointing every step.  Stall = time the loop is blocked per checkpoint:
 *   async  pipeline (wait_layer + begin), layer-wise
 *   sync   begin + write_all + commit of the whole state
 *   write()+fsync of the same bytes to a file on disk
 * GPU path (when a device is present): full checkpoints from device memory
 * through each strategy (--gpu-threads writers, default 12), against cudaMemcpy
 * D2H of each tensor into ordinary pinned memory; for context also against the
 * same bytes as one copy, and against the copies into the registered region;
 * D and G again with device hashing (PMCK_PIPELINE_GPU_HASH_DEVICE) against
 * the same strategy hashing on the CPU.  Then what the CPU can hash: XXH3 of the slot
 * on the writers' thread count, and pmck_store_recover's verification; and
 * what the GPU can: pmck_gpu_hasher over the state in device memory (a
 * load's verification of its copies), against one pinned D2H copy.
 *
 * Output: `bench: NAME VALUE UNIT` and `ratio: NAME VALUE` lines; # for context.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "pmckpt.h"
#include "lib/toolutil.h"
#ifdef PMCK_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define MAX_T 512

static struct pmck_tensor_desc descs[MAX_T];
static char names[MAX_T][48];
static size_t nt;

static void
add(const char *name, uint32_t layer, uint64_t d0, uint64_t d1)
{
	snprintf(names[nt], sizeof(names[nt]), "%s", name);
	descs[nt] = (struct pmck_tensor_desc){.name = names[nt], .dtype = PMCK_DTYPE_F32,
			.ndim = d1 ? 2 : 1, .shape = {d0, d1}, .layer = layer};
	nt++;
}

/* GPT-2 medium: 24 blocks of d_model 1024; layer 0 = embeddings, 25 = final norm. */
static void
gpt2_layout(unsigned blocks)
{
	char n[48];
	add("wte", 0, 50257, 1024);
	add("wpe", 0, 1024, 1024);
	for (unsigned b = 0; b < blocks; b++) {
		static const struct { const char *n; uint64_t d0, d1; } t[] = {
			{"ln_1.w", 1024, 0}, {"ln_1.b", 1024, 0}, {"attn.c_attn.w", 1024, 3072},
			{"attn.c_attn.b", 3072, 0}, {"attn.c_proj.w", 1024, 1024}, {"attn.c_proj.b", 1024, 0},
			{"ln_2.w", 1024, 0}, {"ln_2.b", 1024, 0}, {"mlp.c_fc.w", 1024, 4096},
			{"mlp.c_fc.b", 4096, 0}, {"mlp.c_proj.w", 4096, 1024}, {"mlp.c_proj.b", 1024, 0},
		};
		for (unsigned k = 0; k < sizeof(t) / sizeof(t[0]); k++) {
			snprintf(n, sizeof(n), "h.%u.%s", b, t[k].n);
			add(n, b + 1, t[k].d0, t[k].d1);
		}
	}
	add("ln_f.w", blocks + 1, 1024, 0);
	add("ln_f.b", blocks + 1, 1024, 0);
}

static void
die(const char *what)
{
	fprintf(stderr, "pmck-pipebench: %s: %s\n", what, pmck_errormsg());
	exit(1);
}

static void
sleep_ms(double ms)
{
	struct timespec d = {(time_t)(ms / 1000), (long)((ms - (time_t)(ms / 1000) * 1000) * 1e6)};
	nanosleep(&d, NULL);
}

/* Where the writers' time went in the timed checkpoints (pmck_pipeline_stats). */
struct writer_time {
	double all;      /* the writers' time: threads x the checkpoints' durations, s */
	double busy, copy_wait, tail, hash_wait, commit; /* s */
	unsigned checkpoints;
};

#ifdef PMCK_HAVE_CUDA
/* Prints w's shares as bench lines named NAME_writer_*, NAME_commit_time. */
static void
print_writer_time(const char *name, const struct writer_time *w)
{
	if (w->all <= 0 || w->busy <= 0)
		return;
	printf("bench: %s_writer_idle_share %.3f fraction\n", name,
			1 - (w->busy + w->commit) / w->all);
	printf("bench: %s_writer_copy_wait_share %.3f fraction\n", name, w->copy_wait / w->busy);
	printf("bench: %s_writer_tail_share %.3f fraction\n", name, w->tail / w->busy);
	if (w->hash_wait > 0)
		printf("bench: %s_writer_hash_wait_share %.3f fraction\n", name,
				w->hash_wait / w->busy);
	printf("bench: %s_commit_time %.3f ms\n", name, w->commit / w->checkpoints * 1e3);
}
#endif

/*
 * Median time of a whole pipelined checkpoint with no compute between
 * layers (begin, put every layer, wait for the commit), over `reps` after
 * `warmup` untimed: what verifying the sources (PMCK_PIPELINE_VERIFY_SOURCES)
 * adds to save time, and the GPU strategies' bandwidth.  With wt, where the
 * writers' time went in those reps.
 */
static double
pipeline_save_time(struct pmck_store *s, void **src, uint32_t nlayers,
		const struct pmck_pipeline_opts *o, uint64_t *step, unsigned warmup, unsigned reps,
		struct writer_time *wt)
{
	struct pmck_pipeline *p;
	struct pmck_pipeline_stats st0 = {0}, st1;
	double t[64], sum = 0;

	if (pmck_pipeline_new(s, o, &p))
		die("pipeline");
	for (unsigned k = 0; k < warmup + reps; k++) {
		if (k == warmup)
			pmck_pipeline_stats(p, &st0);
		double t0 = tool_now();
		if (pmck_pipeline_begin(p, (*step)++))
			die("begin");
		for (uint32_t l = 0; l < nlayers; l++)
			if (pmck_pipeline_put_layer(p, l, (const void *const *)src))
				die("put_layer");
		if (pmck_pipeline_wait(p))
			die("pipeline wait");
		if (k >= warmup)
			sum += t[k - warmup] = tool_now() - t0;
	}
	pmck_pipeline_stats(p, &st1);
	pmck_pipeline_delete(&p);
	if (wt)
		*wt = (struct writer_time){
			.all = sum * (o->threads ? o->threads : 2),
			.busy = (st1.writer_busy_ns - st0.writer_busy_ns) * 1e-9,
			.copy_wait = (st1.writer_copy_wait_ns - st0.writer_copy_wait_ns) * 1e-9,
			.tail = (st1.writer_tail_ns - st0.writer_tail_ns) * 1e-9,
			.hash_wait = (st1.writer_hash_wait_ns - st0.writer_hash_wait_ns) * 1e-9,
			.commit = (st1.commit_ns - st0.commit_ns) * 1e-9, .checkpoints = reps};
	return tool_median(t, reps);
}

#ifdef PMCK_HAVE_CUDA
/*
 * What an optimizer's hook sees right after save_async: every layer put on
 * a stream, then at once a stream-ordered wait for all of them on it; the
 * time until that stream has passed the wait (the host's wait and the
 * stream's), and until the checkpoint is durable.  Medians of `reps`,
 * after a warm-up checkpoint.
 */
static void
hook_wait_time(struct pmck_store *s, void **src, uint32_t nlayers,
		const struct pmck_pipeline_opts *o, uint64_t *step, unsigned reps, double *freed,
		double *durable)
{
	struct pmck_pipeline *p;
	cudaStream_t stream;
	uint32_t *layers = calloc(nlayers, sizeof(*layers));
	double f[64], d[64];

	if (!layers || cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess)
		die("hook wait: stream");
	for (uint32_t l = 0; l < nlayers; l++)
		layers[l] = l;
	if (pmck_pipeline_new(s, o, &p))
		die("pipeline");
	for (unsigned k = 0; k < 1 + reps; k++) {
		double t0 = tool_now();
		if (pmck_pipeline_begin(p, (*step)++) ||
		    pmck_pipeline_put_layers_stream(p, layers, nlayers, (const void *const *)src,
				stream) ||
		    pmck_pipeline_wait_layers_stream(p, layers, nlayers, stream) ||
		    cudaStreamSynchronize(stream) != cudaSuccess)
			die("hook wait");
		double t1 = tool_now() - t0;
		if (pmck_pipeline_wait(p))
			die("pipeline wait");
		if (k) {
			f[k - 1] = t1;
			d[k - 1] = tool_now() - t0;
		}
	}
	pmck_pipeline_delete(&p);
	cudaStreamDestroy(stream);
	free(layers);
	*freed = tool_median(f, reps);
	*durable = tool_median(d, reps);
}
#endif

/* One checksum run: threads take 8 MiB pieces of the newest slot in turn. */
struct checksum_run {
	const char **ptr;
	const uint64_t *len;
	size_t npieces;
	atomic_size_t next;
	atomic_uint_fast64_t sink; /* the hashes, so that none is left uncomputed */
};

static void *
checksum_worker(void *arg)
{
	struct checksum_run *r = arg;
	uint64_t acc = 0;

	for (size_t k; (k = atomic_fetch_add(&r->next, 1)) < r->npieces;)
		acc ^= pmck_tensor_checksum(r->ptr[k], r->len[k]);
	atomic_fetch_xor(&r->sink, acc);
	return NULL;
}

/*
 * What the CPU side of the GPU path can hash: XXH3 (pmck_tensor_checksum)
 * over the newest slot's bytes on `threads` threads, as the writers hash
 * what lands, and pmck_store_recover, which verifies the slot on up to 8
 * threads (the CPUs it may run on) before a load may use it.  Medians of `reps`.
 */
static double
checksum_tput(struct pmck_store *s, uint64_t bytes, unsigned threads, unsigned reps)
{
	const uint64_t piece = (uint64_t)8 << 20;
	unsigned slot = pmck_store_slot_step(s, 0) >= pmck_store_slot_step(s, 1) ? 0 : 1;
	size_t n = 0, cap = bytes / piece + nt;
	const char **ptr = calloc(cap, sizeof(*ptr));
	uint64_t *len = calloc(cap, sizeof(*len));
	double t[64], v[64];
	pthread_t tid[64];

	if (!ptr || !len)
		die("out of memory");
	for (size_t i = 0; i < nt; i++) {
		struct pmck_tensor_info ti;
		pmck_store_tensor(s, i, &ti);
		for (uint64_t off = 0; off < ti.nbytes; off += piece, n++) {
			ptr[n] = (const char *)pmck_store_slot_tensor_data(s, slot, i) + off;
			len[n] = ti.nbytes - off < piece ? ti.nbytes - off : piece;
		}
	}
	for (unsigned k = 0; k < reps; k++) {
		struct checksum_run r = {.ptr = ptr, .len = len, .npieces = n};
		double t0 = tool_now();
		unsigned started = 0;
		for (; started < threads && started < 64; started++)
			if (pthread_create(&tid[started], NULL, checksum_worker, &r))
				break;
		if (!started)
			checksum_worker(&r);
		for (unsigned i = 0; i < started; i++)
			pthread_join(tid[i], NULL);
		t[k] = tool_now() - t0;
		struct pmck_recovery rec;
		t0 = tool_now();
		if (pmck_store_recover(s, &rec))
			die("recover");
		v[k] = tool_now() - t0;
	}
	free(ptr);
	free(len);
	double tput = bytes / tool_median(t, reps) / 1e9;
	printf("bench: cpu_checksum_%uthreads_tput %.2f GB/s\n", threads, tput);
	printf("bench: verify_slot_tput %.2f GB/s\n", bytes / tool_median(v, reps) / 1e9);
	printf("# XXH3 of the newest slot (%.1f MB) on %u threads, as the GPU writers hash what "
			"lands; verify_slot: pmck_store_recover on up to 8 threads, which a load waits for\n",
			bytes / 1e6, threads);
	return tput;
}

/* Seconds of pmck_safetensors_verify of path. */
static double
verify_seconds(const char *path)
{
	double t0 = tool_now();
	if (pmck_safetensors_verify(path, NULL))
		die("verify");
	return tool_now() - t0;
}

/* Seconds of one thread hashing the size bytes of path through a fresh mapping. */
static double
one_thread_checksum_seconds(const char *path, size_t size)
{
	double t0 = tool_now();
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	void *map = fd < 0 ? MAP_FAILED : mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (map == MAP_FAILED)
		die("mmap");
	volatile uint64_t sink = pmck_tensor_checksum(map, size);
	(void)sink;
	munmap(map, size);
	close(fd);
	return tool_now() - t0;
}

/*
 * A copy-out file's verification (pmck_safetensors_verify: every tensor's
 * chunks hashed on several threads, which a load from shared_dir or DCP's
 * reader waits for) against one thread hashing the same file's bytes through
 * a fresh mapping (the work of the verification before it ran on several
 * threads, without parsing the header).  The newest checkpoint, written to a
 * file in dir; one verification first, untimed (the write leaves the file out
 * of the page cache), then the two in turn, each first every other time.
 * Medians of `reps`.
 */
static void
file_verify_tput(struct pmck_store *s, const char *dir, unsigned reps)
{
	char path[600];
	double t[64], one[64];
	struct pmck_recovery rec;
	struct stat st;

	snprintf(path, sizeof(path), "%s/pmck-pipebench-%d.safetensors", dir, (int)getpid());
	if (pmck_store_recover(s, &rec) || pmck_safetensors_write(s, path, 0, 1) ||
	    stat(path, &st))
		die("copy-out file");
	if (reps > 64)
		reps = 64;
	verify_seconds(path);
	for (unsigned k = 0; k < reps; k++) {
		if (k % 2) {
			t[k] = verify_seconds(path);
			one[k] = one_thread_checksum_seconds(path, (size_t)st.st_size);
		} else {
			one[k] = one_thread_checksum_seconds(path, (size_t)st.st_size);
			t[k] = verify_seconds(path);
		}
	}
	unlink(path);
	double ours = st.st_size / tool_median(t, reps) / 1e9;
	double base = st.st_size / tool_median(one, reps) / 1e9;
	printf("bench: file_verify_tput %.2f GB/s\n", ours);
	printf("bench: file_checksum_one_thread_tput %.2f GB/s\n", base);
	printf("ratio: file_verify_tput_vs_one_thread %.3f\n", ours / base);
	printf("# a %.1f MB copy-out file: pmck_safetensors_verify against one thread hashing its "
			"bytes through a fresh mapping\n", st.st_size / 1e6);
}

#ifdef PMCK_HAVE_CUDA
/*
 * The GPU's checksums of the state in device memory (pmck_gpu_hasher, with
 * which a load verifies its copies where they land): bandwidth against the
 * link's, whether the hashes would keep up with the copies a load makes
 * (above 1 they do), and that they equal the host's.  The device tensors
 * are first filled with pseudo-random bytes (host[i] is overwritten with
 * them): the state's own bytes are uniform, which would hide a kernel that
 * takes words in the wrong order.
 */
static void
gpu_hasher_figures(const struct pmck_store *s, void *const *dsrc, void *const *host,
		size_t nt, double bytes, double one_copy_tput, unsigned steps, double *times)
{
	struct pmck_gpu_hasher *h;
	uint64_t *lens = calloc(nt, sizeof(*lens)), *out = calloc(nt, sizeof(*out));
	size_t chunks = 0, differ = 0;
	uint64_t seed = 0x2545f4914f6cdd1dull;

	if (pmck_gpu_hasher_new(0, &h)) {
		printf("# pmck_gpu_hasher: %s\n", pmck_errormsg());
		free(lens);
		free(out);
		return;
	}
	for (size_t i = 0; i < nt; i++) {
		struct pmck_tensor_info ti;
		pmck_store_tensor(s, i, &ti);
		lens[i] = ti.nbytes;
		chunks += (ti.nbytes + PMCK_HASH_CHUNK - 1) / PMCK_HASH_CHUNK;
		uint8_t *b = host[i];
		for (uint64_t off = 0; off < ti.nbytes; off += 8) {
			seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
			memcpy(b + off, &seed, ti.nbytes - off < 8 ? ti.nbytes - off : 8);
		}
		if (cudaMemcpy(dsrc[i], b, ti.nbytes, cudaMemcpyHostToDevice) != cudaSuccess)
			die("cudaMemcpy");
	}
	if (pmck_gpu_hasher_reserve(h, chunks))
		die("pmck_gpu_hasher_reserve");
	for (unsigned k = 0; k < steps; k++) {
		double t0 = tool_now();
		if (pmck_gpu_hasher_add(h, NULL, nt, (const void *const *)dsrc, lens) ||
		    pmck_gpu_hasher_wait(h, out, nt))
			die("pmck_gpu_hasher");
		times[k] = tool_now() - t0;
	}
	for (size_t i = 0; i < nt; i++)
		differ += out[i] != pmck_tensor_checksum(host[i], lens[i]);
	double tput = bytes / tool_median(times, steps) / 1e9;
	printf("bench: gpu_hasher_tput %.2f GB/s (%zu tensors, %zu of whose checksums differ from "
			"the host's)\n", tput, nt, differ);
	if (one_copy_tput > 0)
		printf("ratio: gpu_hasher_tput_vs_pinned_d2h_one_copy %.3f\n", tput / one_copy_tput);
	pmck_gpu_hasher_delete(&h);
	free(lens);
	free(out);
}
#endif

int
main(int argc, char **argv)
{
	/*
	 * 9 checkpointed steps: a checkpoint's stall on 2 cores is bimodal (0.6
	 * ms, or a few ms when a woken thread takes the training thread's CPU),
	 * and a median of 5 swung the copy-out stall ratio from 0.9 to 1.5.
	 */
	unsigned blocks = 24, threads = 2, steps = 9, every = 12;
	double compute_ms = 10;
	const char *dir = "/dev/shm", *disk = "/var/tmp";
	int gpu_only = 0;
	unsigned gpu_threads = 0; /* 0: 12 (Store's default), or the CPUs if fewer */

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--blocks") && i + 1 < argc) blocks = (unsigned)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = (unsigned)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = (unsigned)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--compute-ms") && i + 1 < argc) compute_ms = atof(argv[++i]);
		else if (!strcmp(argv[i], "--dir") && i + 1 < argc) dir = argv[++i];
		else if (!strcmp(argv[i], "--disk-dir") && i + 1 < argc) disk = argv[++i];
		else if (!strcmp(argv[i], "--gpu-only")) gpu_only = 1;
		else if (!strcmp(argv[i], "--every") && i + 1 < argc) every = (unsigned)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--gpu-threads") && i + 1 < argc)
			gpu_threads = (unsigned)atoi(argv[++i]);
		else {
			fprintf(stderr, "usage: pmck-pipebench [--blocks N] [--threads N] [--steps N] "
					"[--compute-ms MS] [--every N] [--dir DIR] [--disk-dir DIR] [--gpu-only] "
					"[--gpu-threads N]\n");
			return 2;
		}
	}
	/* --steps: each figure is a median over at most 64 runs (the arrays below). */
	if (blocks < 1 || blocks > 40 || threads < 1 || steps < 2 || steps > 64 || every < 1 ||
	    gpu_threads > 64) {
		fprintf(stderr, "pmck-pipebench: --blocks 1..40, --threads >= 1, --steps 2..64, "
				"--every >= 1, --gpu-threads 1..64\n");
		return 2;
	}
	gpt2_layout(blocks);
	uint32_t nlayers = blocks + 2;

	char path[512], file[512];
	snprintf(path, sizeof(path), "%s/pmck-pipebench-%d.pool", dir, (int)getpid());
	struct pma_region *r;
	struct pma_pool *pool;
	struct pmck_store *s;
	uint64_t bytes = 0;
	for (size_t i = 0; i < nt; i++)
		bytes += descs[i].shape[0] * (descs[i].ndim == 2 ? descs[i].shape[1] : 1) * 4;
	if (pma_region_open(path, 2 * bytes + (64 << 20), PMA_REGION_CREATE, &r) ||
	    pma_pool_create(r, 0, &pool) || pmck_store_create(pool, "bench", descs, nt, &s))
		die("creating the store");
	unlink(path); /* the mapping keeps it alive; nothing to clean up on exit */
	printf("# %zu tensors in %u layers, %.1f MB per checkpoint, %u writer threads, "
			"compute %.1f ms per layer, %u checkpointed steps, median per checkpoint\n",
			nt, nlayers, bytes / 1e6, threads, compute_ms, steps);

	void **src = calloc(nt, sizeof(*src));
	for (size_t i = 0; i < nt; i++) {
		struct pmck_tensor_info ti;
		pmck_store_tensor(s, i, &ti);
		src[i] = malloc(ti.nbytes);
		memset(src[i], (int)i, ti.nbytes);
	}
	double stall[64], t0;
	struct pmck_ckpt *c;
	if (steps > 64)
		steps = 64;

	if (!gpu_only) {
		/* Async: the loop waits only in begin and wait_layer. */
		struct pmck_pipeline *p;
		struct pmck_pipeline_opts o = {.threads = threads, .numa_node = -1};
		if (pmck_pipeline_new(s, &o, &p))
			die("pipeline");
		struct pmck_pipeline_stats st0, st1;
		for (unsigned step = 1; step <= steps + 1; step++) {
			pmck_pipeline_stats(p, &st0);
			for (uint32_t l = 0; l < nlayers; l++) {
				sleep_ms(compute_ms);
				if (pmck_pipeline_wait_layer(p, l))
					die("wait_layer");
				if (l == 0 && pmck_pipeline_begin(p, step) != 0)
					die("begin");
				if (pmck_pipeline_put_layer(p, l, (const void *const *)src))
					die("put_layer");
			}
			pmck_pipeline_stats(p, &st1);
			if (step > 1) /* the first step includes warming up both slots */
				stall[step - 2] = (st1.wait_ns - st0.wait_ns) * 1e-9;
		}
		if (pmck_pipeline_wait(p))
			die("pipeline wait");
		pmck_pipeline_delete(&p);
		double async_stall = tool_median(stall, steps);

		/* Save time with and without re-hashing the sources, alternating, medians. */
		uint64_t vstep = 500;
		double plain[9], verified[9];
		struct pmck_pipeline_opts plain_opts = {.threads = threads},
				verify_opts = {.threads = threads, .flags = PMCK_PIPELINE_VERIFY_SOURCES};
		for (unsigned k = 0; k < 9; k++) {
			plain[k] = pipeline_save_time(s, src, nlayers, &plain_opts, &vstep, 0, 1, NULL);
			verified[k] = pipeline_save_time(s, src, nlayers, &verify_opts, &vstep, 0, 1,
					NULL);
		}
		double save_plain = tool_median(plain, 9), save_verified = tool_median(verified, 9);

		/* Sync: the whole state written and committed while the loop waits. */
		for (unsigned step = 0; step < steps; step++) {
			t0 = tool_now();
			if (pmck_store_begin(s, 1000 + step, &c) ||
			    pmck_ckpt_write_all(c, (const void *const *)src, threads) || pmck_ckpt_commit(c))
				die("sync checkpoint");
			stall[step] = tool_now() - t0;
		}
		double sync_stall = tool_median(stall, steps);

		/* write()+fsync of the same bytes, as torch.save to a local disk would. */
		snprintf(file, sizeof(file), "%s/pmck-pipebench-%d.bin", disk, (int)getpid());
		for (unsigned step = 0; step < steps; step++) {
			t0 = tool_now();
			unlink(file); /* a new file each time, as copy-out writes */
			int fd = open(file, O_CREAT | O_TRUNC | O_WRONLY, 0600);
			if (fd < 0) {
				perror(file);
				return 1;
			}
			for (size_t i = 0; i < nt; i++) {
				struct pmck_tensor_info ti;
				pmck_store_tensor(s, i, &ti);
				for (uint64_t off = 0; off < ti.nbytes;) {
					ssize_t w = write(fd, (char *)src[i] + off, ti.nbytes - off);
					if (w <= 0) {
						perror("write");
						return 1;
					}
					off += (uint64_t)w;
				}
			}
			if (fsync(fd)) {
				perror("fsync");
				return 1;
			}
			close(fd);
			stall[step] = tool_now() - t0;
		}
		unlink(file);
		double wf_stall = tool_median(stall, steps);

		printf("bench: async_stall_time %.6f s\n", async_stall);
		printf("bench: pipeline_save_time %.6f s\n", save_plain);
		printf("bench: pipeline_save_time_verify_sources %.6f s\n", save_verified);
		printf("ratio: verify_sources_time_vs_plain %.3f\n", save_verified / save_plain);
		printf("bench: sync_commit_stall_time %.6f s\n", sync_stall);
		printf("bench: write_fsync_stall_time %.4f s\n", wf_stall);
		printf("ratio: async_stall_time_vs_write_fsync %.6f\n", async_stall / wf_stall);
		printf("ratio: async_stall_time_vs_sync_commit %.6f\n", async_stall / sync_stall);
		printf("# goal: async_stall_time_vs_write_fsync <= 0.05\n");

		/*
		 * Copy-out: the same loop, checkpointing every `every` steps, with and
		 * without the copier writing each checkpoint to disk-dir.  Stall here
		 * is all time spent in pmckpt calls (begin, wait_layer, put_layer).
		 */
		double with_stall = 0, without_stall = 0, copy_tput = 0;
		char shared[512];
		snprintf(shared, sizeof(shared), "%s/pmck-pipebench-%d.shared", disk, (int)getpid());
		for (int with = 0; with <= 1; with++) {
			struct pmck_copyout *co = NULL;
			struct pmck_copyout_opts co_opts = {.dir = shared, .keep = 1};
			if (with && pmck_copyout_new(s, &co_opts, &co))
				die("copy-out");
			struct pmck_pipeline_opts o2 = {.threads = threads, .numa_node = -1, .copyout = co};
			if (pmck_pipeline_new(s, &o2, &p))
				die("pipeline");
			static uint64_t cstep = 10000;
			unsigned n = 0;
			for (unsigned k = 0; k < (steps + 1) * every; k++) {
				double blocked = 0;
				int ckpt = k % every == 0;
				for (uint32_t l = 0; l < nlayers; l++) {
					sleep_ms(compute_ms);
					t0 = tool_now();
					if (pmck_pipeline_wait_layer(p, l))
						die("wait_layer");
					if (ckpt && l == 0 && pmck_pipeline_begin(p, ++cstep) != 0)
						die("begin");
					if (ckpt && pmck_pipeline_put_layer(p, l, (const void *const *)src))
						die("put_layer");
					blocked += tool_now() - t0;
				}
				if (ckpt && k) /* the first checkpoint warms up */
					stall[n++] = blocked;
			}
			if (pmck_pipeline_wait(p))
				die("pipeline wait");
			pmck_pipeline_delete(&p);
			if (with) {
				struct pmck_copyout_stats cs;
				if (pmck_copyout_wait(co))
					die("copy-out");
				pmck_copyout_stats(co, &cs);
				copy_tput = cs.bytes / (cs.busy_ns * 1e-9) / 1e9;
				pmck_copyout_delete(&co);
				with_stall = tool_median(stall, n);
				printf("# copy-out: %llu checkpoints, %.1f MB written, to %s\n",
						(unsigned long long)cs.copied, cs.bytes / 1e6, shared);
			} else {
				without_stall = tool_median(stall, n);
			}
		}
		char cmd[600];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", shared);
		if (system(cmd))
			fprintf(stderr, "pmck-pipebench: could not remove %s\n", shared);
		printf("bench: stall_without_copyout %.6f s\n", without_stall);
		printf("bench: stall_with_copyout %.6f s\n", with_stall);
		printf("bench: copyout_tput %.3f GB/s\n", copy_tput);
		printf("bench: write_fsync_tput %.3f GB/s\n", bytes / wf_stall / 1e9);
		printf("# write_fsync: the same bytes to a new file in %s (median of %u)\n", disk, steps);
		printf("ratio: stall_time_with_copyout_vs_without %.4f\n", with_stall / without_stall);
		printf("ratio: copyout_tput_vs_write_fsync %.4f\n", copy_tput / (bytes / wf_stall / 1e9));
		printf("# checkpoint every %u steps; goals: stall ratio <= 1.10, copy-out >= 0.9 of write+fsync\n",
				every);
		checksum_tput(s, bytes, threads, steps);
		file_verify_tput(s, disk, steps);
	}

#ifdef PMCK_HAVE_CUDA
	if (pmck_gpu_available(0)) {
		printf("# GPU path skipped: %s\n", pmck_errormsg());
	} else {
		struct cudaDeviceProp prop;
		cudaGetDeviceProperties(&prop, 0);
		printf("# GPU: %s; %zu tensors, %.1f MB from device memory per checkpoint\n",
				prop.name, nt, bytes / 1e6);
		void **dsrc = calloc(nt, sizeof(*dsrc));
		void *pinned;
		if (cudaHostAlloc(&pinned, bytes, cudaHostAllocDefault) != cudaSuccess)
			die("cudaHostAlloc");
		for (size_t i = 0; i < nt; i++) {
			struct pmck_tensor_info ti;
			pmck_store_tensor(s, i, &ti);
			if (cudaMalloc(&dsrc[i], ti.nbytes) != cudaSuccess ||
			    cudaMemcpy(dsrc[i], src[i], ti.nbytes, cudaMemcpyHostToDevice) != cudaSuccess)
				die("cudaMalloc");
		}
		/* Baseline: cudaMemcpy D2H of every tensor into ordinary pinned memory. */
		for (unsigned k = 0; k < steps; k++) {
			t0 = tool_now();
			uint64_t off = 0;
			for (size_t i = 0; i < nt; i++) {
				struct pmck_tensor_info ti;
				pmck_store_tensor(s, i, &ti);
				cudaMemcpy((char *)pinned + off, dsrc[i], ti.nbytes, cudaMemcpyDeviceToHost);
				off += ti.nbytes;
			}
			stall[k] = tool_now() - t0;
		}
		double pinned_tput = bytes / tool_median(stall, steps) / 1e9;
		printf("bench: pinned_d2h_tput %.2f GB/s\n", pinned_tput);
		/*
		 * Context: the same bytes as one copy from one device buffer (bench_gpu.py's
		 * other baseline): the link without a synchronisation per tensor.
		 */
		double one_copy_tput = 0;
		void *flat;
		if (cudaMalloc(&flat, bytes) == cudaSuccess) {
			cudaMemcpy(pinned, flat, bytes, cudaMemcpyDeviceToHost); /* first touch, untimed */
			for (unsigned k = 0; k < steps; k++) {
				t0 = tool_now();
				cudaMemcpy(pinned, flat, bytes, cudaMemcpyDeviceToHost);
				stall[k] = tool_now() - t0;
			}
			cudaFree(flat);
			one_copy_tput = bytes / tool_median(stall, steps) / 1e9;
			printf("bench: pinned_d2h_one_copy_tput %.2f GB/s\n", one_copy_tput);
		}
		/*
		 * Context, not a goal: the same copies into the region itself, registered
		 * as the pipelines register it, into the slot the next checkpoint
		 * overwrites: what the destination memory allows (a tmpfs file's 4 KiB
		 * pages here, not cudaHostAlloc's), pipeline aside.
		 */
		struct pma_region *reg = pmck_store_region(s);
		unsigned older = pmck_store_slot_step(s, 0) <= pmck_store_slot_step(s, 1) ? 0 : 1;
		double region_tput = 0;
		if (cudaHostRegister(pma_region_addr(reg), pma_region_size(reg),
				cudaHostRegisterMapped | cudaHostRegisterPortable) == cudaSuccess) {
			for (unsigned k = 0; k < steps; k++) {
				t0 = tool_now();
				for (size_t i = 0; i < nt; i++) {
					struct pmck_tensor_info ti;
					pmck_store_tensor(s, i, &ti);
					cudaMemcpy((void *)pmck_store_slot_tensor_data(s, older, i), dsrc[i],
							ti.nbytes, cudaMemcpyDeviceToHost);
				}
				stall[k] = tool_now() - t0;
			}
			cudaHostUnregister(pma_region_addr(reg));
			region_tput = bytes / tool_median(stall, steps) / 1e9;
			printf("bench: region_d2h_tput %.2f GB/s\n", region_tput);
		} else {
			printf("# region_d2h skipped: cudaHostRegister of the region failed\n");
		}

		static const struct { enum pmck_source src; const char *name; } strat[] = {
			{PMCK_SOURCE_GPU_DIRECT, "gpu_direct"}, {PMCK_SOURCE_GPU_KERNEL, "gpu_kernel"},
			{PMCK_SOURCE_GPU_STAGED, "gpu_staged"}, {PMCK_SOURCE_GPU_SNAPSHOT, "gpu_snapshot"},
		};
		long cpus = sysconf(_SC_NPROCESSORS_ONLN);
		unsigned gthreads = gpu_threads ? gpu_threads : cpus >= 12 ? 12 : (unsigned)cpus;
		double host_hash_tput[4];
		uint64_t gstep = 100000;
		for (unsigned k = 0; k < sizeof(strat) / sizeof(strat[0]); k++) {
			struct pmck_pipeline_opts o = {.threads = gthreads, .numa_node = -1,
					.source = strat[k].src, .flags = PMCK_PIPELINE_GPU_HASH_HOST};
			struct writer_time wt;
			double tput = host_hash_tput[k] = bytes / pipeline_save_time(s, dsrc, nlayers,
					&o, &gstep, 1, steps, &wt) / 1e9;
			printf("bench: %s_tput %.2f GB/s\n", strat[k].name, tput);
			print_writer_time(strat[k].name, &wt);
			printf("ratio: %s_tput_vs_pinned_d2h %.4f\n", strat[k].name, tput / pinned_tput);
			if (region_tput > 0)
				printf("ratio: %s_tput_vs_region_d2h %.4f\n", strat[k].name,
						tput / region_tput);
			if (one_copy_tput > 0)
				printf("ratio: %s_tput_vs_pinned_d2h_one_copy %.4f\n", strat[k].name,
						tput / one_copy_tput);
		}
		printf("# %u writer threads; GPU figures include the CPU's XXH3 checksums of every byte\n",
				gthreads);
		printf("# writer shares: idle (neither a piece nor a commit to run) of the writers' "
				"time; of their busy time, copy_wait (bytes crossing), tail (after a "
				"piece's last sub-copy landed: its flush and hash, no copy of that writer "
				"in flight), hash_wait (within the tail)\n");
		/*
		 * Device hashing (PMCK_PIPELINE_GPU_HASH_DEVICE): the GPU hashes the
		 * sources and the writers only flush, for D (DMA) and G, against the
		 * same strategy hashing on the CPU above, in this run.
		 */
		const char *hash_env = getenv("PMCK_GPU_HASH");
		if (hash_env && *hash_env)
			printf("# PMCK_GPU_HASH=%s is set: it decides the hashing of the runs above "
					"and below alike\n", hash_env);
		for (unsigned k = 0; k < sizeof(strat) / sizeof(strat[0]); k++) {
			if (strat[k].src != PMCK_SOURCE_GPU_DIRECT &&
			    strat[k].src != PMCK_SOURCE_GPU_SNAPSHOT)
				continue;
			struct pmck_pipeline_opts o = {.threads = gthreads, .numa_node = -1,
					.source = strat[k].src, .flags = PMCK_PIPELINE_GPU_HASH_DEVICE};
			struct writer_time wt;
			double tput = bytes / pipeline_save_time(s, dsrc, nlayers, &o, &gstep, 1,
					steps, &wt) / 1e9;
			printf("bench: %s_device_hash_tput %.2f GB/s\n", strat[k].name, tput);
			char dh[64];
			snprintf(dh, sizeof(dh), "%s_device_hash", strat[k].name);
			print_writer_time(dh, &wt);
			printf("ratio: %s_device_hash_vs_host_hash %.4f\n", strat[k].name,
					tput / host_hash_tput[k]);
			if (one_copy_tput > 0)
				printf("ratio: %s_device_hash_tput_vs_pinned_d2h_one_copy %.4f\n",
						strat[k].name, tput / one_copy_tput);
		}
		/*
		 * Snapshots on wait (opts.snapshot_on_wait, room for the whole state):
		 * how soon a hook's wait frees the caller's stream, and what it costs
		 * the save, against D (DMA) without it, in this run.
		 */
		double freed[2], durable[2];
		for (int sow = 0; sow <= 1; sow++) {
			struct pmck_pipeline_opts o = {.threads = gthreads, .numa_node = -1,
					.source = PMCK_SOURCE_GPU_DIRECT,
					.snapshot_on_wait = sow ? bytes : 0};
			hook_wait_time(s, dsrc, nlayers, &o, &gstep, steps, &freed[sow], &durable[sow]);
			const char *tag = sow ? "_snapshot_on_wait" : "";
			printf("bench: gpu_direct%s_hook_wait_time %.6f s\n", tag, freed[sow]);
			printf("bench: gpu_direct%s_hook_save_time %.6f s\n", tag, durable[sow]);
		}
		printf("ratio: gpu_direct_hook_wait_snapshot_on_wait_vs_plain %.4f\n",
				freed[1] / freed[0]);
		printf("ratio: gpu_direct_hook_save_time_snapshot_on_wait_vs_plain %.4f\n",
				durable[1] / durable[0]);
		printf("# hook wait: every layer put and at once waited for on one stream, until "
				"that stream has passed the wait (below 1: the optimizer starts sooner)\n");
		/*
		 * Whether the writers' hashing can keep up with the link: above 1 it
		 * can, in this run, on this many threads (the bytes GPU-landed, as
		 * the writers find them).
		 */
		double hash_tput = checksum_tput(s, bytes, gthreads, steps);
		if (one_copy_tput > 0)
			printf("ratio: cpu_checksum_tput_vs_pinned_d2h_one_copy %.3f\n",
					hash_tput / one_copy_tput);
		gpu_hasher_figures(s, dsrc, src, nt, bytes, one_copy_tput, steps, stall);
		printf("# goal: gpu_direct_tput_vs_pinned_d2h >= 0.8\n");
		for (size_t i = 0; i < nt; i++)
			cudaFree(dsrc[i]);
		cudaFreeHost(pinned);
		free(dsrc);
	}
#else
	printf("# GPU path skipped: built without CUDA\n");
#endif
	for (size_t i = 0; i < nt; i++)
		free(src[i]);
	free(src);
	pmck_store_close(&s);
	pma_pool_close(&pool);
	pma_region_close(&r);
	return 0;
}
