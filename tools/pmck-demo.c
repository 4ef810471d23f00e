/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * pmck-demo -- a synthetic training loop that checkpoints a GPT-2-medium
 * shaped model to a pmckpt store, then crashes a training process in the
 * middle of a checkpoint and recovers.
 *
 *   pmck-demo [--steps N] [--every K] [--path FILE] [--layers L] [--threads N]
 *             [--seed S] [--keep]
 *
 * 1. Train N steps, checkpointing every K: each step changes a window of
 *    every tensor deterministically, so the parameters of any step can be
 *    regenerated from scratch.
 * 2. Fork a child that goes on training and checkpointing; it reports on a
 *    pipe when it begins and ends each checkpoint.  The parent SIGKILLs it
 *    at a random moment inside its first or second checkpoint.
 * 3. Reopen region, pool and store, recover (verifying every checksum),
 *    and compare the recovered tensors bit for bit with the regenerated
 *    parameters of the recovered step.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pmalloc.h"
#include "pmckpt.h"
#include "lib/toolutil.h"


#define MiB ((uint64_t)1 << 20)
#define GB 1e9
#define STORE "gpt2-medium"
#define D_MODEL 1024
#define N_CTX 1024
#define VOCAB 50257

/* Rows of the token embedding (--vocab): smaller for slow machines such as a TCG guest. */
static unsigned long vocab = VOCAB;
#define MAX_LAYERS 24
#define WINDOW 1024 /* fp32 words changed per tensor per step */
#define CHILD_MAX_STEPS 1000

/* ------------------------------------------------------------ utilities */

static uint64_t
mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xBF58476D1CE4E5B9ull;
	x ^= x >> 27;
	x *= 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

static int
dir_is_tmpfs(const char *dir)
{
	struct statfs sf;
	return !statfs(dir, &sf) && (unsigned long)sf.f_type == 0x01021994ul;
}

/* -------------------------------------------------------------- cleanup */

static char cleanup_path[PATH_MAX];
static volatile pid_t child_pid;

static void
on_signal(int sig)
{
	if (child_pid > 0)
		kill(child_pid, SIGKILL);
	if (cleanup_path[0])
		unlink(cleanup_path);
	signal(sig, SIG_DFL);
	raise(sig);
}

/* ---------------------------------------------------------------- model */

struct model {
	struct pmck_tensor_desc *d;
	char (*names)[48];
	size_t n;
	unsigned layers;
	uint64_t params;  /* fp32 parameters */
	int64_t step_idx; /* the I64 "train.step" tensor */
	/* Filled once the store exists: */
	char *buf;        /* host copy, laid out like a slot */
	uint64_t *off, *nbytes;
	const void **srcs;
	uint64_t data_size, tensor_bytes;
};

static void
add(struct model *m, const char *name, enum pmck_dtype dt, uint32_t layer, uint32_t ndim,
		uint64_t d0, uint64_t d1)
{
	size_t i = m->n++;

	snprintf(m->names[i], sizeof(m->names[i]), "%s", name);
	m->d[i] = (struct pmck_tensor_desc){.name = m->names[i], .dtype = dt, .ndim = ndim,
			.shape = {d0, d1}, .layer = layer};
	if (dt == PMCK_DTYPE_F32)
		m->params += (ndim > 0 ? d0 : 1) * (ndim > 1 ? d1 : 1);
}

static uint64_t
layer_params(void)
{
	return 12ull * D_MODEL * D_MODEL + 13ull * D_MODEL;
}

static uint64_t
fixed_params(void)
{
	return (uint64_t)vocab * D_MODEL + (uint64_t)N_CTX * D_MODEL + 2 * D_MODEL;
}

/* GPT-2 medium's state dict (HF names, Conv1D shapes), with `layers` blocks. */
static int
build_model(struct model *m, unsigned layers)
{
	static const struct {
		const char *name;
		unsigned r, c; /* in units of D_MODEL; c == 0: a vector */
	} blk[] = {
		{"ln_1.weight", 1, 0}, {"ln_1.bias", 1, 0},
		{"attn.c_attn.weight", 1, 3}, {"attn.c_attn.bias", 3, 0},
		{"attn.c_proj.weight", 1, 1}, {"attn.c_proj.bias", 1, 0},
		{"ln_2.weight", 1, 0}, {"ln_2.bias", 1, 0},
		{"mlp.c_fc.weight", 1, 4}, {"mlp.c_fc.bias", 4, 0},
		{"mlp.c_proj.weight", 4, 1}, {"mlp.c_proj.bias", 1, 0},
	};
	size_t cap = 2 + (size_t)layers * 12 + 2 + 1;
	char nm[48];

	m->layers = layers;
	m->d = calloc(cap, sizeof(*m->d));
	m->names = calloc(cap, sizeof(*m->names));
	if (!m->d || !m->names)
		return -ENOMEM;
	add(m, "wte.weight", PMCK_DTYPE_F32, 0, 2, vocab, D_MODEL);
	add(m, "wpe.weight", PMCK_DTYPE_F32, 0, 2, N_CTX, D_MODEL);
	for (unsigned l = 0; l < layers; l++)
		for (unsigned k = 0; k < sizeof(blk) / sizeof(blk[0]); k++) {
			snprintf(nm, sizeof(nm), "h.%u.%s", l, blk[k].name);
			if (blk[k].c)
				add(m, nm, PMCK_DTYPE_F32, l + 1, 2, blk[k].r * D_MODEL,
						blk[k].c * D_MODEL);
			else
				add(m, nm, PMCK_DTYPE_F32, l + 1, 1, blk[k].r * D_MODEL, 0);
		}
	add(m, "ln_f.weight", PMCK_DTYPE_F32, layers + 1, 1, D_MODEL, 0);
	add(m, "ln_f.bias", PMCK_DTYPE_F32, layers + 1, 1, D_MODEL, 0);
	m->step_idx = (int64_t)m->n;
	add(m, "train.step", PMCK_DTYPE_I64, layers + 1, 0, 0, 0);
	return 0;
}

static void
free_model(struct model *m)
{
	free(m->d);
	free(m->names);
	free(m->buf);
	free(m->off);
	free(m->nbytes);
	free(m->srcs);
}

/* Binds the host buffer to the store's placement (one buffer laid out like a slot). */
static int
attach_buffer(struct model *m, const struct pmck_store *s)
{
	m->data_size = pmck_store_data_size(s);
	m->tensor_bytes = pmck_store_tensor_bytes(s);
	m->off = calloc(m->n, sizeof(*m->off));
	m->nbytes = calloc(m->n, sizeof(*m->nbytes));
	m->srcs = calloc(m->n, sizeof(*m->srcs));
	if (!m->off || !m->nbytes || !m->srcs || posix_memalign((void **)&m->buf, 2 * MiB,
			m->data_size))
		return -ENOMEM;
	/* Transparent huge pages: first touch of 4 KiB pages is slow, and so are TLB misses. */
	madvise(m->buf, m->data_size, MADV_HUGEPAGE);
	for (size_t i = 0; i < m->n; i++) {
		struct pmck_tensor_info ti;
		pmck_store_tensor(s, i, &ti);
		m->off[i] = ti.offset;
		m->nbytes[i] = ti.nbytes;
		m->srcs[i] = m->buf + ti.offset;
	}
	return 0;
}

/* Step 0: deterministic weight-like fp32 values (|x| in [2^-7, 2^-6)), step counter 0. */
static void
init_params(struct model *m)
{
	memset(m->buf, 0, m->data_size);
	for (size_t i = 0; i < m->n; i++) {
		if ((int64_t)i == m->step_idx)
			continue;
		uint32_t *w = (uint32_t *)(m->buf + m->off[i]);
		uint64_t nw = m->nbytes[i] / 4, x = mix64(i + 1);
		for (uint64_t k = 0; k + 1 < nw; k += 2) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			w[k] = ((uint32_t)x & 0x807FFFFFu) | 0x3C000000u;
			w[k + 1] = ((uint32_t)(x >> 32) & 0x807FFFFFu) | 0x3C000000u;
		}
		if (nw % 2)
			w[nw - 1] = ((uint32_t)x & 0x807FFFFFu) | 0x3C000000u;
	}
}

/*
 * One "training" step: an SGD-like update p -= lr * g of a window of
 * WINDOW words of every tensor, the window and g drawn from (step, tensor).
 * Cheap, and a function of the previous parameters and the step only.
 */
static void
train_step(struct model *m, uint64_t step)
{
	const float lr = 1e-3f;

	for (size_t i = 0; i < m->n; i++) {
		if ((int64_t)i == m->step_idx) {
			int64_t v = (int64_t)step;
			memcpy(m->buf + m->off[i], &v, sizeof(v));
			continue;
		}
		float *p = (float *)(m->buf + m->off[i]);
		uint64_t nw = m->nbytes[i] / 4, x = mix64(step * 0x100000001B3ull + i);
		uint64_t win = nw < WINDOW ? nw : WINDOW;
		uint64_t start = nw > win ? x % (nw - win + 1) : 0;
		for (uint64_t k = 0; k < win; k++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			float g = (float)(int32_t)(uint32_t)x * (1.0f / 2147483648.0f);
			p[start + k] -= lr * g;
		}
	}
}

/* The parameters after `step` steps, from scratch. */
static void
regenerate(struct model *m, uint64_t step)
{
	init_params(m);
	for (uint64_t s = 1; s <= step; s++)
		train_step(m, s);
}

/* ----------------------------------------------------------- checkpoint */

/* ------------------------------------------------------- crash and child */

struct msg {
	char kind; /* 'B' began, 'C' committed, 'E' error */
	uint64_t step;
};

static void
send_msg(int fd, char kind, uint64_t step)
{
	struct msg m = {kind, step};
	ssize_t w;

	do
		w = write(fd, &m, sizeof(m));
	while (w < 0 && errno == EINTR);
}

/* The child: keep training and checkpointing until killed. */
static void __attribute__((noreturn))
child_main(int fd, struct pmck_store *s, struct model *m, struct pma_region *r,
		uint64_t first_step, unsigned every, unsigned threads)
{
	/*
	 * fork() gives the child no page-table entries for the shared region:
	 * populate them, as pma_region_open does for a freshly started process.
	 */
	pma_region_prefault(r);
	for (uint64_t step = first_step; step < first_step + CHILD_MAX_STEPS; step++) {
		train_step(m, step);
		if (step % every)
			continue;
		double secs;
		unsigned slot;
		send_msg(fd, 'B', step);
		if (tool_checkpoint("pmck-demo", s, step, m->srcs, threads, &secs, &slot)) {
			send_msg(fd, 'E', step);
			_exit(3);
		}
		send_msg(fd, 'C', step);
	}
	_exit(0);
}

/* ------------------------------------------------------------------ main */

static const char usage_text[] =
	"usage: pmck-demo [--steps N] [--every K] [--path FILE] [--layers L] [--vocab V]\n"
	"                 [--threads N] [--seed S] [--keep]\n"
	"  --steps    training steps before the crash test (default 20)\n"
	"  --every    checkpoint every K steps (default 5)\n"
	"  --path     pool file (default /dev/shm/pmckpt-UID/pmck-demo.pool, in your own\n"
	"             0700 directory), or a devdax device\n"
	"             (/dev/daxX.Y): a blank one is formatted, a pool made by pmckpt\n"
	"             create is used (the demo's store is added, then removed)\n"
	"  --layers   transformer blocks, 0..24 (default 24: GPT-2 medium)\n"
	"  --vocab    rows of the token embedding, 1..50257 (default 50257)\n"
	"  --threads  checkpoint threads (default: online CPUs, at most 8)\n"
	"  --seed     seed of the crash timing (default: random)\n"
	"  --keep     keep the pool file\n";

/*
 * A device (devdax) is never removed: its pool is opened, or formatted if
 * the device is blank (pma_pool_open_or_create refuses other data), and an
 * earlier run's store is destroyed so its space counts as free.
 */
static int
open_device_pool(const char *path, struct pma_region **r, struct pma_pool **pool)
{
	int created = 0;

	if (pma_region_open(path, 0, 0, r) ||
	    pma_pool_open_or_create(*r, 0, pool, &created)) {
		fprintf(stderr, "pmck-demo: %s\n", pma_errormsg());
		pma_region_close(r);
		return -1;
	}
	if (created)
		printf("formatted a pool on the blank device %s\n", path);
	if (!pma_lookup(*pool, STORE ".meta", NULL, NULL)) {
		if (pmck_store_destroy(*pool, STORE)) {
			fprintf(stderr, "pmck-demo: %s: %s\n", path, pmck_errormsg());
			pma_pool_close(pool);
			pma_region_close(r);
			return -1;
		}
		printf("removed the store '%s' left on %s by an earlier run\n", STORE, path);
	}
	return 0;
}

/* Refuses to replace a file that is not a pool made by this demo. */
static int
remove_old_pool(const char *path)
{
	struct stat st;
	struct pma_region *r = NULL;
	struct pma_pool *p = NULL;
	int ours, opened;

	if (lstat(path, &st)) /* a link is not followed: pma_region_open refuses it below */
		return errno == ENOENT ? 0 : -errno;
	opened = !pma_region_open(path, 0, PMA_REGION_NO_PREFAULT | PMA_REGION_NOFOLLOW, &r);
	ours = opened && !pma_pool_open(r, &p) && !pma_lookup(p, STORE ".meta", NULL, NULL);
	pma_pool_close(&p);
	pma_region_close(&r);
	if (!ours) {
		/* Another user's file or a link: the region's refusal says whose, or where to. */
		fprintf(stderr, "pmck-demo: %s exists and is not a pmck-demo pool%s%s; remove it or "
				"pass --path\n", path, opened ? "" : ": ", opened ? "" : pma_errormsg());
		return -EEXIST;
	}
	if (unlink(path)) {
		fprintf(stderr, "pmck-demo: remove %s: %s\n", path, strerror(errno));
		return -errno;
	}
	printf("replaced the pool left at %s by an earlier run\n", path);
	return 0;
}

int
main(int argc, char **argv)
{
	unsigned long steps = 20, every = 5, layers = MAX_LAYERS, threads = 0, seed = 0;
	int keep = 0, have_seed = 0, rc = 1;
	char default_path[PATH_MAX];
	const char *path = NULL;

	tool_init("pmck-demo", usage_text);
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		int bad = 0;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			fputs(usage_text, stdout);
			return 0;
		} else if (!strcmp(a, "--keep")) {
			keep = 1;
			continue;
		} else if (!v) {
			bad = 1;
		} else if (!strcmp(a, "--steps")) {
			bad = tool_parse_uint(v, 1, 1000000, &steps);
		} else if (!strcmp(a, "--every")) {
			bad = tool_parse_uint(v, 1, 1000000, &every);
		} else if (!strcmp(a, "--vocab")) {
			bad = tool_parse_uint(v, 1, VOCAB, &vocab);
		} else if (!strcmp(a, "--layers")) {
			bad = tool_parse_uint(v, 0, MAX_LAYERS, &layers);
		} else if (!strcmp(a, "--threads")) {
			bad = tool_parse_uint(v, 1, 8, &threads);
		} else if (!strcmp(a, "--seed")) {
			bad = tool_parse_uint(v, 0, ULONG_MAX, &seed);
			have_seed = 1;
		} else if (!strcmp(a, "--path")) {
			bad = !*v;
			path = v;
		} else {
			bad = 1;
		}
		if (bad)
			return tool_usage_error("bad option or value: %s %s", a, v ? v : "");
		i++;
	}
	/*
	 * The default pool lives in the caller's own ramdisk directory (made
	 * 0700 if missing, refused if another user could write there), never
	 * under a predictable name in the world-writable /dev/shm itself.
	 */
	if (!path) {
		char dir[PATH_MAX - 32];
		if (pmck_local_default_dir(dir, sizeof(dir)) || pmck_dir_check(dir, PMCK_DIR_CREATE)) {
			fprintf(stderr, "pmck-demo: %s\n", pmck_errormsg());
			return 1;
		}
		snprintf(default_path, sizeof(default_path), "%s/pmck-demo.pool", dir);
		path = default_path;
	}
	if (steps < every) {
		fprintf(stderr, "pmck-demo: --steps %lu < --every %lu: no checkpoint before the "
				"crash test\n", steps, every);
		return 2;
	}
	if (!have_seed && getrandom(&seed, sizeof(seed), 0) != sizeof(seed))
		seed = (unsigned long)time(NULL) ^ (unsigned long)getpid();
	if (threads == 0) {
		long cpus = sysconf(_SC_NPROCESSORS_ONLN);
		threads = cpus < 1 ? 1 : cpus > 8 ? 8 : (unsigned long)cpus;
	}

	struct model m = {0};
	struct pma_region *r = NULL;
	struct pma_pool *pool = NULL;
	struct pmck_store *s = NULL;
	int ret, pfd[2] = {-1, -1};
	double *ck_times = NULL;
	unsigned nck = 0;

	struct stat pst;
	int device = stat(path, &pst) == 0 && S_ISCHR(pst.st_mode);
	char dirbuf[PATH_MAX];
	snprintf(dirbuf, sizeof(dirbuf), "%s", path);
	const char *dir = device ? path : dirname(dirbuf);
	uint64_t fs_free, mem = tool_mem_available();
	int tmpfs = 0;

	if (device) {
		/* The device's pool: what its heap has free is the room (region = 2 MiB header + heap). */
		if (open_device_pool(path, &r, &pool))
			return 1;
		fs_free = pma_pool_free_bytes(pool) + 66 * MiB;
	} else {
		/* An earlier run's pool goes first: its space counts as free. */
		if (remove_old_pool(path))
			return 1;
		struct statvfs vfs;
		if (statvfs(dir, &vfs)) {
			fprintf(stderr, "pmck-demo: %s: %s\n", dir, strerror(errno));
			return 1;
		}
		fs_free = (uint64_t)vfs.f_bavail * vfs.f_frsize;
		tmpfs = dir_is_tmpfs(dir);
	}

	/* ---------------------------------------------- space and layers */
	unsigned long want = layers;
	for (;; layers--) {
		uint64_t slot = 4 * (fixed_params() + layers * layer_params()) + 64 * 1024;
		uint64_t region = 2 * MiB + 2 * ((slot + 2 * MiB - 1) / (2 * MiB) * (2 * MiB)) + 4 * MiB;
		uint64_t need_fs = region + 64 * MiB;
		uint64_t need_mem = (tmpfs ? region : 0) + slot + 256 * MiB;
		/* Leaves a fifth of the available memory to whoever shares the machine. */
		if (need_fs <= fs_free && (!mem || need_mem <= mem / 5 * 4))
			break;
		if (layers == 0) {
			fprintf(stderr, "pmck-demo: not enough room even without transformer blocks: "
					"%s has %llu MiB free, MemAvailable %llu MiB\n", dir,
					(unsigned long long)(fs_free / MiB), (unsigned long long)(mem / MiB));
			goto out;
		}
	}
	if (build_model(&m, (unsigned)layers)) {
		fprintf(stderr, "pmck-demo: out of memory\n");
		goto out;
	}
	uint64_t slot_bound = 4 * m.params + 8 + m.n * PMCK_ALIGN + PMCK_ALIGN;
	uint64_t region_size = 2 * MiB + 2 * ((slot_bound + 2 * MiB - 1) / (2 * MiB) * (2 * MiB))
			+ 4 * MiB;

	snprintf(cleanup_path, sizeof(cleanup_path), "%s", keep || device ? "" : path);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGHUP, on_signal);
	signal(SIGPIPE, on_signal);

	double t0 = tool_now();
	if ((!device && ((ret = pma_region_open(path, region_size,
					PMA_REGION_CREATE | PMA_REGION_NOFOLLOW, &r)) ||
			 (ret = pma_pool_create(r, 0, &pool)))) ||
	    (ret = pmck_store_create(pool, STORE, m.d, m.n, &s))) {
		fprintf(stderr, "pmck-demo: creating the store in %s: %s\n", path, pmck_errormsg());
		goto out;
	}
	double t_create = tool_now() - t0;
	if (attach_buffer(&m, s)) {
		fprintf(stderr, "pmck-demo: cannot allocate %llu bytes of parameters\n",
				(unsigned long long)pmck_store_data_size(s));
		goto out;
	}

	printf("pmck-demo: GPT-2 medium shape, %u of 24 layers, %zu tensors, %.1fM fp32 params = "
			"%.2f GB per checkpoint\n", m.layers, m.n, (double)m.params / 1e6,
			(double)m.tensor_bytes / GB);
	if (m.layers != want)
		printf("  scaled down from %lu layers: %s has %llu MiB free, MemAvailable %llu MiB "
				"(2 slots + host copy needed)\n", want, dir,
				(unsigned long long)(fs_free / MiB), (unsigned long long)(mem / MiB));
	printf("pool %s: %.2f GB (%s, %s granularity), created and prefaulted in %.2f s; "
			"%lu threads\n", path, (double)pma_region_size(r) / GB,
			device ? "devdax" : tmpfs ? "tmpfs" : "file",
			pma_granularity_name(pma_region_granularity(r)), t_create, threads);

	t0 = tool_now();
	init_params(&m);
	printf("initial parameters generated in %.2f s\n", tool_now() - t0);

	/* ------------------------------------------------------ training */
	ck_times = calloc(steps / every + 1, sizeof(double));
	if (!ck_times) {
		fprintf(stderr, "pmck-demo: out of memory\n");
		goto out;
	}
	printf("training %lu steps, checkpoint every %lu:\n", steps, every);
	uint64_t last_ckpt = 0;
	for (uint64_t step = 1; step <= steps; step++) {
		train_step(&m, step);
		if (step % every)
			continue;
		unsigned slot;
		if (tool_checkpoint("pmck-demo", s, step, m.srcs, (unsigned)threads, &ck_times[nck], &slot))
			goto out;
		printf("  step %4llu  checkpoint %.2f GB in %.3f s = %5.2f GB/s  (slot %u)\n",
				(unsigned long long)step, (double)m.tensor_bytes / GB, ck_times[nck],
				(double)m.tensor_bytes / ck_times[nck] / GB, slot);
		nck++;
		last_ckpt = step;
	}
	double typical;
	{
		double tmp[nck];
		memcpy(tmp, ck_times, sizeof(tmp));
		for (unsigned i = 1; i < nck; i++)
			for (unsigned j = i; j > 0 && tmp[j - 1] > tmp[j]; j--) {
				double x = tmp[j];
				tmp[j] = tmp[j - 1];
				tmp[j - 1] = x;
			}
		typical = tmp[nck / 2];
	}

	/* --------------------------------------------------------- crash */
	uint64_t rnd = mix64(seed);
	unsigned target = 1 + (unsigned)(rnd & 1);           /* child's 1st or 2nd checkpoint */
	/* Not too close to the end: the parent's wake-up competes with the child's writers. */
	double frac = 0.05 + 0.8 * (double)(mix64(rnd) >> 11) / 9007199254740992.0;
	printf("crash test (seed %lu): a child continues from step %llu; it is killed %.0f%% into "
			"its checkpoint #%u\n", seed, (unsigned long long)steps + 1, frac * 100, target);
	if (pipe(pfd)) {
		fprintf(stderr, "pmck-demo: pipe: %s\n", strerror(errno));
		goto out;
	}
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	if (pid < 0) {
		fprintf(stderr, "pmck-demo: fork: %s\n", strerror(errno));
		goto out;
	}
	if (pid == 0) {
		close(pfd[0]);
		child_main(pfd[1], s, &m, r, steps + 1, (unsigned)every, (unsigned)threads);
	}
	child_pid = pid;
	close(pfd[1]);
	pfd[1] = -1;

	uint64_t began = 0, committed = last_ckpt, killed_in = 0;
	unsigned nbegan = 0;
	int child_error = 0;
	double t_kill_delay = 0;
	struct msg msg;
	while (!killed_in) {
		ssize_t n = read(pfd[0], &msg, sizeof(msg));
		if (n < 0 && errno == EINTR)
			continue;
		if (n != sizeof(msg))
			break; /* the child died on its own */
		if (msg.kind == 'C') {
			committed = msg.step;
			continue;
		}
		if (msg.kind == 'E') {
			child_error = 1;
			break;
		}
		began = msg.step;
		if (++nbegan < target)
			continue;
		/* Inside checkpoint #target: wait a fraction of a typical checkpoint, then kill. */
		double t_b = tool_now();
		double delay = frac * typical;
		struct timespec ts = {(time_t)delay, (long)((delay - (double)(time_t)delay) * 1e9)};
		while (nanosleep(&ts, &ts) && errno == EINTR)
			;
		kill(pid, SIGKILL);
		t_kill_delay = tool_now() - t_b;
		killed_in = began;
	}
	if (!killed_in)
		kill(pid, SIGKILL); /* it reported an error or closed the pipe: do not wait on it */
	int status;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	child_pid = 0;
	/* What the child managed to report before dying. */
	ssize_t n;
	while ((n = read(pfd[0], &msg, sizeof(msg))) == sizeof(msg) || (n < 0 && errno == EINTR))
		if (n > 0 && msg.kind == 'C')
			committed = msg.step;
	close(pfd[0]);
	pfd[0] = -1;
	if (child_error || !killed_in || !WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) {
		fprintf(stderr, "pmck-demo: the child %s before the planned kill (wait status %#x)\n",
				child_error ? "failed to checkpoint" : "stopped reporting", status);
		goto out;
	}
	int mid_write = committed < killed_in;
	printf("  child began checkpoint of step %llu, SIGKILLed %.1f ms later (typical checkpoint "
			"%.1f ms): %s\n", (unsigned long long)killed_in, t_kill_delay * 1e3, typical * 1e3,
			mid_write ? "killed mid-checkpoint" : "the checkpoint had already committed");
	printf("  last checkpoint the child reported committed: step %llu\n",
			(unsigned long long)committed);

	/* ------------------------------------------------------ recovery */
	pmck_store_close(&s);
	pma_pool_close(&pool);
	pma_region_close(&r);
	printf("recovery:\n");
	t0 = tool_now();
	if ((ret = pma_region_open(path, 0, 0, &r)) || (ret = pma_pool_open(r, &pool)) ||
	    (ret = pmck_store_open(pool, STORE, &s))) {
		fprintf(stderr, "pmck-demo: reopening %s: %s\n", path, pmck_errormsg());
		goto out;
	}
	double t_open = tool_now() - t0;
	struct pmck_recovery rec;
	t0 = tool_now();
	ret = pmck_store_recover(s, &rec);
	double t_rec = tool_now() - t0;
	if (ret) {
		fprintf(stderr, "pmck-demo: recover: %s%s\n", pmck_errormsg(),
				ret == PMCK_E_NONE_USABLE ? " (checkpoints were committed but none "
				"verifies: data lost)" : "");
		printf("FAIL\n");
		goto out;
	}
	printf("  reopen region+pool+store %.1f ms (prefaulting %.2f GB); recover+verify %.1f ms "
			"= %.2f GB/s\n", t_open * 1e3, (double)pma_region_size(r) / GB, t_rec * 1e3,
			(double)m.tensor_bytes / t_rec / GB);
	printf("  recovered step %llu from slot %u\n", (unsigned long long)rec.step, rec.slot);
	if (rec.rejected)
		printf("  newer slot rejected: yes, slot %u (step %llu) failed at tensor '%s'\n",
				rec.rejected_slot, (unsigned long long)rec.rejected_step, rec.rejected_tensor);
	else if (mid_write && rec.step != killed_in)
		printf("  newer slot rejected: no (the checkpoint of step %llu was never sealed, so "
				"recovery ignored it)\n", (unsigned long long)killed_in);
	else
		printf("  newer slot rejected: no\n");

	/* The kill may land after the commit returned but before 'C' was sent. */
	int step_ok = rec.step == committed || (mid_write && rec.step == killed_in);
	printf("  expected step %llu%s: %s\n", (unsigned long long)committed,
			mid_write ? "" : " (committed before the kill)", step_ok ? "ok" : "MISMATCH");
	if (rec.step == killed_in && mid_write)
		printf("  (the kill landed between the commit and the child's report)\n");

	/* ------------------------------------------------------- verify */
	t0 = tool_now();
	regenerate(&m, rec.step);
	double t_regen = tool_now() - t0;
	size_t bad = 0;
	const char *first_bad = NULL;
	for (size_t i = 0; i < m.n; i++) {
		const void *got = pmck_store_tensor_data(s, i);
		if (!got || memcmp(got, m.srcs[i], m.nbytes[i])) {
			if (!first_bad)
				first_bad = m.names[i];
			bad++;
		}
	}
	int64_t step_val;
	memcpy(&step_val, pmck_store_tensor_data(s, (size_t)m.step_idx), sizeof(step_val));
	printf("verify: regenerated step %llu in %.2f s; %zu tensors (%.2f GB) compared, %zu differ%s%s;"
			" train.step = %lld\n", (unsigned long long)rec.step, t_regen, m.n,
			(double)m.tensor_bytes / GB, bad, first_bad ? ", first: " : "",
			first_bad ? first_bad : "", (long long)step_val);
	if (bad || !step_ok || step_val != (int64_t)rec.step) {
		printf("FAIL\n");
		goto out;
	}
	printf("PASS: step %llu recovered bit-exact after a SIGKILL %s\n",
			(unsigned long long)rec.step,
			mid_write && rec.step != killed_in ? "in the middle of a checkpoint" :
			"right after a checkpoint");
	if (keep)
		printf("kept %s\n", path);
	rc = 0;
out:
	fflush(stdout);
	if (pfd[0] >= 0)
		close(pfd[0]);
	if (pfd[1] >= 0)
		close(pfd[1]);
	pmck_store_close(&s);
	/* A device keeps its pool; the demo's store goes unless --keep. */
	if (device && !keep && pool && pmck_store_destroy(pool, STORE) && !rc)
		fprintf(stderr, "pmck-demo: removing the store from %s: %s\n", path, pmck_errormsg());
	pma_pool_close(&pool);
	pma_region_close(&r);
	if (!keep && cleanup_path[0])
		unlink(path);
	free(ck_times);
	free_model(&m);
	return rc;
}
