/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * pmck-bench -- checkpoint throughput against baselines measured in the
 * same run, on the same bytes.
 *
 *   pmck-bench [--size BYTES] [--threads N] [--reps N] [--dir DIR] [--disk-dir DIR]
 *
 * The bytes are a GPT-2-medium-like layer list (embeddings, then per layer
 * layernorms, attention and MLP weights and biases, then a few tiny
 * tensors) whose width is scaled so that the tensors add up to --size.
 *
 * Measured, each after warm-up, --reps times, reporting the median:
 *   ntcopy       non-temporal copy of the bytes into another prefaulted
 *                region by the same number of threads: the copy limit
 *   commit       pmck_store_begin + pmck_ckpt_write_all + pmck_ckpt_commit
 *   recover      pmck_store_recover (verifies every checksum of a slot)
 *   pmemobj_tx   one libpmemobj transaction: add_range over the
 *                destination, memcpy, commit
 *   write_fsync  open, write() every tensor, fsync, close, on a disk
 *   region_open  pma_region_open creating a region of the store's size
 *                (on tmpfs its pages allocated by populating the mapping
 *                on several threads; elsewhere fallocate, then that), what
 *                a restart pays before its import, against two baselines
 *                run in turn: the creation without prefault (fallocate,
 *                one thread in the kernel), then pma_region_prefault
 *                populating the allocated pages on several threads; and
 *                that creation, then one madvise(MADV_POPULATE_WRITE) on
 *                the calling thread
 *
 * Output contract on stdout: "bench: NAME VALUE UNIT", "ratio: NAME VALUE"
 * (ours over a baseline), and context lines starting with '#'.
 */
#include <errno.h>
#include <fcntl.h>
#include <libpmem2.h>
#include <libpmemobj.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "pmalloc.h"
#include "pmckpt.h"
#include "lib/toolutil.h"

#define MiB ((uint64_t)1 << 20)
#define GB 1e9
#define NCTX 1024        /* position embedding rows */
#define NLAYERS 24       /* GPT-2 medium */
#define GPT2_VOCAB 50257
#define PIECE (8 * PMCK_HASH_CHUNK) /* ntcopy piece: as pmck_ckpt_write_all */
#define TMPFS_MAGIC_ 0x01021994

/* ------------------------------------------------------------ utilities */

struct timing {
	double *t;
	unsigned n;
};

static double
median(struct timing *tm)
{
	return tool_median(tm->t, tm->n);
}

/* The 1-minute load average: the machine may be shared. */
static double
loadavg(void)
{
	FILE *f = fopen("/proc/loadavg", "r");
	double l = -1;

	if (f) {
		if (fscanf(f, "%lf", &l) != 1)
			l = -1;
		fclose(f);
	}
	return l;
}

static void
cpu_model(char *buf, size_t len)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[512];

	snprintf(buf, len, "unknown CPU");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		char *colon = strchr(line, ':');
		if (!strncmp(line, "model name", 10) && colon) {
			colon++;
			colon += strspn(colon, " \t");
			colon[strcspn(colon, "\n")] = 0;
			snprintf(buf, len, "%s", colon);
			break;
		}
	}
	fclose(f);
}

static const char *
fs_name(const char *dir)
{
	struct statfs sf;

	if (statfs(dir, &sf))
		return "unknown";
	switch ((unsigned long)sf.f_type) {
	case TMPFS_MAGIC_: return "tmpfs";
	case 0xEF53: return "ext4";
	case 0x58465342: return "xfs";
	case 0x9123683E: return "btrfs";
	case 0x794c7630: return "overlayfs";
	case 0x2FC12FC1: return "zfs";
	case 0x6969: return "nfs";
	case 0x858458f6: return "ramfs";
	default: return "other";
	}
}

/* Deterministic pseudo-random fp32 values of weight-like magnitude. */
static void
fill_weights(void *buf, uint64_t nbytes, uint64_t seed)
{
	uint32_t *w = buf;
	uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;

	for (uint64_t i = 0; i < nbytes / 4; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		/* sign, exponent 2^-7..2^-6 region, random mantissa */
		w[i] = ((uint32_t)x & 0x807FFFFFu) | 0x3C000000u;
	}
	for (uint64_t i = nbytes / 4 * 4; i < nbytes; i++)
		((uint8_t *)buf)[i] = (uint8_t)(seed + i);
}

/* Files to remove when interrupted (async-signal-safe unlink/rmdir only); 4 is a directory. */
static char cleanup_path[5][PATH_MAX];

static void
on_signal(int sig)
{
	for (unsigned i = 0; i < 4; i++)
		if (cleanup_path[i][0])
			unlink(cleanup_path[i]);
	if (cleanup_path[4][0])
		rmdir(cleanup_path[4]);
	signal(sig, SIG_DFL);
	raise(sig);
}

static void
track(unsigned slot, const char *path)
{
	snprintf(cleanup_path[slot], sizeof(cleanup_path[slot]), "%s", path ? path : "");
}

/* How region_open_seconds makes a region. */
enum region_making {
	MAKE_BY_OPEN,               /* pma_region_open(CREATE): what pmckpt does */
	MAKE_FALLOCATE_FIRST,       /* CREATE | NO_PREFAULT (fallocate), pma_region_prefault */
	MAKE_FALLOCATE_ONE_THREAD,  /* CREATE | NO_PREFAULT (fallocate), one madvise here */
	MAKE_KINDS
};

/* Creates a region of `size` at `path` as `how` says and closes it again, timing it. */
static int
region_open_seconds(const char *path, size_t size, enum region_making how, double *secs)
{
	struct pma_region *r;
	int ret;

	unlink(path);
	double t0 = tool_now();
	ret = pma_region_open(path, size, PMA_REGION_CREATE |
			(how == MAKE_BY_OPEN ? 0 : PMA_REGION_NO_PREFAULT), &r);
	if (ret) {
		fprintf(stderr, "pmck-bench: region %s: %s\n", path, pmck_errormsg());
		return ret;
	}
	if (how == MAKE_FALLOCATE_FIRST)
		pma_region_prefault(r);
	if (how == MAKE_FALLOCATE_ONE_THREAD &&
	    madvise(pma_region_addr(r), pma_region_size(r), 23 /* MADV_POPULATE_WRITE */)) {
		ret = -errno;
		fprintf(stderr, "pmck-bench: MADV_POPULATE_WRITE of %s: %s\n", path, strerror(errno));
		pma_region_close(&r);
		return ret;
	}
	*secs = tool_now() - t0;
	pma_region_close(&r);
	unlink(path);
	return 0;
}

/* --------------------------------------------------------------- layout */

struct layout {
	struct pmck_tensor_desc *d;
	char (*names)[64];
	size_t n, cap;
	unsigned d_model;
	uint64_t vocab;
	uint64_t bytes;
};

static void
add(struct layout *l, const char *name, enum pmck_dtype dt, uint32_t layer, uint32_t ndim,
		uint64_t d0, uint64_t d1)
{
	size_t i = l->n++;

	snprintf(l->names[i], sizeof(l->names[i]), "%s", name);
	l->d[i] = (struct pmck_tensor_desc){.name = l->names[i], .dtype = dt, .ndim = ndim,
			.shape = {d0, d1}, .layer = layer};
	l->bytes += pmck_dtype_size(dt) * (ndim > 0 ? d0 : 1) * (ndim > 1 ? d1 : 1);
}

/* fp32 parameters of the transformer blocks, positions and final layernorm. */
static uint64_t
fixed_params(uint64_t d)
{
	return NLAYERS * (12 * d * d + 13 * d) + NCTX * d + 2 * d;
}

#define TINY_BYTES (8 + 32 + 4 + 4)

/*
 * A GPT-2-medium-shaped list whose tensors add up to about `size` bytes:
 * the widest d_model (a multiple of 64, or of 8 when small) that leaves
 * room for at least GPT-2's vocabulary, then the vocabulary rows take the
 * remainder.
 */
static int
build_layout(struct layout *l, uint64_t size)
{
	uint64_t floats = (size - TINY_BYTES) / 4, d = 8;

	for (uint64_t c = 8; c <= 65536; c += c >= 128 ? 64 : 8)
		if (fixed_params(c) + GPT2_VOCAB * c <= floats)
			d = c;
	if (fixed_params(d) + d > floats)
		return -1;
	l->d_model = (unsigned)d;
	l->vocab = (floats - fixed_params(d)) / d;
	l->cap = 2 + NLAYERS * 12 + 2 + 4;
	l->d = calloc(l->cap, sizeof(*l->d));
	l->names = calloc(l->cap, sizeof(*l->names));
	if (!l->d || !l->names)
		return -1;

	char nm[64];
	add(l, "wte.weight", PMCK_DTYPE_F32, 0, 2, l->vocab, d);
	add(l, "wpe.weight", PMCK_DTYPE_F32, 0, 2, NCTX, d);
	for (unsigned i = 0; i < NLAYERS; i++) {
		static const struct {
			const char *name;
			unsigned r, c; /* shape in units of d; c == 0: a vector of r*d */
		} t[] = {
			{"ln_1.weight", 1, 0}, {"ln_1.bias", 1, 0},
			{"attn.c_attn.weight", 1, 3}, {"attn.c_attn.bias", 3, 0},
			{"attn.c_proj.weight", 1, 1}, {"attn.c_proj.bias", 1, 0},
			{"ln_2.weight", 1, 0}, {"ln_2.bias", 1, 0},
			{"mlp.c_fc.weight", 1, 4}, {"mlp.c_fc.bias", 4, 0},
			{"mlp.c_proj.weight", 4, 1}, {"mlp.c_proj.bias", 1, 0},
		};
		for (unsigned k = 0; k < sizeof(t) / sizeof(t[0]); k++) {
			snprintf(nm, sizeof(nm), "h.%u.%s", i, t[k].name);
			if (t[k].c)
				add(l, nm, PMCK_DTYPE_F32, i + 1, 2, t[k].r * d, t[k].c * d);
			else
				add(l, nm, PMCK_DTYPE_F32, i + 1, 1, t[k].r * d, 0);
		}
	}
	add(l, "ln_f.weight", PMCK_DTYPE_F32, NLAYERS + 1, 1, d, 0);
	add(l, "ln_f.bias", PMCK_DTYPE_F32, NLAYERS + 1, 1, d, 0);
	/* Training state: tiny tensors packed at the end. */
	add(l, "train.step", PMCK_DTYPE_I64, NLAYERS + 2, 0, 0, 0);
	add(l, "train.rng_state", PMCK_DTYPE_U64, NLAYERS + 2, 1, 4, 0);
	add(l, "train.lr", PMCK_DTYPE_F32, NLAYERS + 2, 0, 0, 0);
	add(l, "train.loss_scale", PMCK_DTYPE_F32, NLAYERS + 2, 0, 0, 0);
	return 0;
}

static void
free_layout(struct layout *l)
{
	free(l->d);
	free(l->names);
}

/* --------------------------------------------------------------- ntcopy */

struct ntcopy {
	const struct pma_region *r;
	char *dst;
	const char *src;
	uint64_t len;
	atomic_uint_fast64_t next;
};

static void *
ntcopy_worker(void *arg)
{
	struct ntcopy *c = arg;
	uint64_t off;

	while ((off = atomic_fetch_add(&c->next, PIECE)) < c->len) {
		uint64_t n = c->len - off < PIECE ? c->len - off : PIECE;
		pma_region_memcpy(c->r, c->dst + off, c->src + off, n,
				PMEM2_F_MEM_NONTEMPORAL | PMEM2_F_MEM_NODRAIN);
	}
	return NULL;
}

/* The same structure as pmck_ckpt_write_all: threads started per call, pieces of 8 MiB. */
static int
ntcopy_run(const struct pma_region *r, void *dst, const void *src, uint64_t len,
		unsigned threads, double *secs)
{
	struct ntcopy c = {.r = r, .dst = dst, .src = src, .len = len};
	pthread_t tid[8];
	unsigned started = 0;
	double t0 = tool_now();

	atomic_init(&c.next, 0);
	for (; started + 1 < threads; started++)
		if (pthread_create(&tid[started], NULL, ntcopy_worker, &c))
			break;
	ntcopy_worker(&c);
	for (unsigned t = 0; t < started; t++)
		pthread_join(tid[t], NULL);
	pma_region_drain(r);
	*secs = tool_now() - t0;
	return started + 1 == threads ? 0 : -EAGAIN;
}

/* --------------------------------------------------------------- commit */

/* ------------------------------------------------------------ pmemobj tx */

struct pobj {
	PMEMobjpool *pop;
	PMEMoid *oid;
	size_t *len;
	size_t n;
};

static int
pobj_setup(struct pobj *p, const char *path, uint64_t bytes, uint64_t poolsize)
{
	size_t maxa = PMEMOBJ_MAX_ALLOC_SIZE / 2;

	p->pop = pmemobj_create(path, "pmck-bench", poolsize, 0600);
	if (!p->pop) {
		fprintf(stderr, "pmck-bench: pmemobj_create %s (%llu bytes): %s\n", path,
				(unsigned long long)poolsize, pmemobj_errormsg());
		return -1;
	}
	p->n = (size_t)((bytes + maxa - 1) / maxa);
	p->oid = calloc(p->n, sizeof(*p->oid));
	p->len = calloc(p->n, sizeof(*p->len));
	if (!p->oid || !p->len) {
		fprintf(stderr, "pmck-bench: out of memory\n");
		return -1;
	}
	for (size_t i = 0; i < p->n; i++) {
		p->len[i] = bytes - i * maxa < maxa ? bytes - i * maxa : maxa;
		if (pmemobj_alloc(p->pop, &p->oid[i], p->len[i], 0, NULL, NULL)) {
			fprintf(stderr, "pmck-bench: pmemobj_alloc of %zu bytes: %s\n", p->len[i],
					pmemobj_errormsg());
			return -1;
		}
	}
	return 0;
}

static void
pobj_teardown(struct pobj *p)
{
	if (p->pop) {
		for (size_t i = 0; i < p->n; i++)
			if (!OID_IS_NULL(p->oid[i]))
				pmemobj_free(&p->oid[i]);
		pmemobj_close(p->pop);
	}
	free(p->oid);
	free(p->len);
	*p = (struct pobj){0};
}

static int
pobj_tx(struct pobj *p, const char *src, double *secs)
{
	double t0 = tool_now();

	if (pmemobj_tx_begin(p->pop, NULL, TX_PARAM_NONE)) {
		fprintf(stderr, "pmck-bench: pmemobj_tx_begin: %s\n", pmemobj_errormsg());
		pmemobj_tx_end();
		return -1;
	}
	size_t off = 0;
	for (size_t i = 0; i < p->n; i++) {
		if (pmemobj_tx_add_range(p->oid[i], 0, p->len[i])) {
			fprintf(stderr, "pmck-bench: pmemobj_tx_add_range of %zu bytes: %s\n",
					p->len[i], pmemobj_errormsg());
			pmemobj_tx_end(); /* the failure aborted the transaction */
			return -1;
		}
		memcpy(pmemobj_direct(p->oid[i]), src + off, p->len[i]);
		off += p->len[i];
	}
	pmemobj_tx_commit();
	int ret = pmemobj_tx_end();
	*secs = tool_now() - t0;
	if (ret) {
		fprintf(stderr, "pmck-bench: pmemobj transaction failed: %s\n", pmemobj_errormsg());
		return -1;
	}
	return 0;
}

/* ----------------------------------------------------------- write+fsync */

static int
write_fsync(const char *path, const struct layout *l, const void *const *srcs, double *secs)
{
	double t0 = tool_now();
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	if (fd < 0) {
		fprintf(stderr, "pmck-bench: create %s: %s\n", path, strerror(errno));
		return -1;
	}
	for (size_t i = 0; i < l->n; i++) {
		uint64_t nbytes = pmck_dtype_size(l->d[i].dtype);
		for (uint32_t k = 0; k < l->d[i].ndim; k++)
			nbytes *= l->d[i].shape[k];
		const char *p = srcs[i];
		while (nbytes) {
			ssize_t w = write(fd, p, nbytes > (1u << 30) ? (1u << 30) : nbytes);
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0) {
				fprintf(stderr, "pmck-bench: write %s: %s\n", path,
						w < 0 ? strerror(errno) : "short write");
				close(fd);
				return -1;
			}
			p += w;
			nbytes -= (uint64_t)w;
		}
	}
	if (fsync(fd)) {
		fprintf(stderr, "pmck-bench: fsync %s: %s\n", path, strerror(errno));
		close(fd);
		return -1;
	}
	if (close(fd)) {
		fprintf(stderr, "pmck-bench: close %s: %s\n", path, strerror(errno));
		return -1;
	}
	*secs = tool_now() - t0;
	return 0;
}

/* ------------------------------------------------------------------ main */

static const char usage_text[] =
	"usage: pmck-bench [--size BYTES[K|M|G]] [--threads N] [--reps N] [--dir DIR]\n"
	"                  [--disk-dir DIR]\n"
	"  --size      tensor bytes (default 512M)\n"
	"  --threads   threads of the commit and the copy baseline (default: online CPUs, max 8)\n"
	"  --reps      timed repetitions per measurement, median reported (default 15)\n"
	"  --dir       directory for the persistent-memory files (default /dev/shm)\n"
	"  --disk-dir  directory for the write()+fsync baseline (default: new dir in /var/tmp)\n";

static void
report_times(const char *what, struct timing *tm, double med)
{
	printf("# %-11s median %8.2f ms  min %8.2f  max %8.2f  (%u reps)\n", what, med * 1e3,
			tm->t[0] * 1e3, tm->t[tm->n - 1] * 1e3, tm->n);
}

int
main(int argc, char **argv)
{
	uint64_t size = 512 * MiB;
	/*
	 * 15 repetitions: on a shared 2-core VM single commits and copies vary
	 * by +-5%, and medians of 5 put commit_tput_vs_ntcopy anywhere in
	 * 0.86-0.93 for the same code; medians of 15 gave 0.90-0.91.
	 */
	unsigned threads = 0, reps = 15;
	unsigned long n;
	const char *dir = "/dev/shm", *disk_dir = NULL;
	int rc = 1;

	tool_init("pmck-bench", usage_text);
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		int bad = 0;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			fputs(usage_text, stdout);
			return 0;
		} else if (!v) {
			bad = 1;
		} else if (!strcmp(a, "--size")) {
			bad = pma_size_parse(v, &size) || size < MiB;
		} else if (!strcmp(a, "--threads")) {
			bad = tool_parse_uint(v, 1, 1024, &n);
			threads = (unsigned)n;
		} else if (!strcmp(a, "--reps")) {
			bad = tool_parse_uint(v, 1, 1000, &n);
			reps = (unsigned)n;
		} else if (!strcmp(a, "--dir")) {
			dir = v;
		} else if (!strcmp(a, "--disk-dir")) {
			disk_dir = v;
		} else {
			bad = 1;
		}
		if (bad)
			return tool_usage_error("bad option or value: %s %s", a, v ? v : "");
		i++;
	}
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	if (cpus < 1)
		cpus = 1;
	unsigned threads_asked = threads;
	if (threads == 0)
		threads = cpus > 8 ? 8 : (unsigned)cpus;
	if (threads > 8)
		threads = 8;

	/* Everything that must be released at the end. */
	struct layout lay = {0};
	struct pma_region *sr = NULL, *nr = NULL;
	struct pma_pool *pool = NULL;
	struct pmck_store *store = NULL;
	struct pobj po = {0};
	char *src = NULL;
	const void **srcs = NULL;
	char store_path[PATH_MAX], nt_path[PATH_MAX], obj_path[PATH_MAX], disk_path[PATH_MAX];
	char made_dir[PATH_MAX] = "";
	struct timing t_nt = {0}, t_ck = {0}, t_rec = {0}, t_obj = {0}, t_disk = {0};
	struct timing t_open[MAKE_KINDS] = {{0}};

	snprintf(store_path, sizeof(store_path), "%s/pmck-bench-%d.store", dir, (int)getpid());
	snprintf(nt_path, sizeof(nt_path), "%s/pmck-bench-%d.ntcopy", dir, (int)getpid());
	snprintf(obj_path, sizeof(obj_path), "%s/pmck-bench-%d.pmemobj", dir, (int)getpid());
	if (!disk_dir) {
		snprintf(made_dir, sizeof(made_dir), "/var/tmp/pmck-bench.XXXXXX");
		if (!mkdtemp(made_dir)) {
			fprintf(stderr, "pmck-bench: mkdtemp %s: %s\n", made_dir, strerror(errno));
			return 1;
		}
		disk_dir = made_dir;
		track(4, made_dir);
	}
	snprintf(disk_path, sizeof(disk_path), "%s/pmck-bench-%d.data", disk_dir, (int)getpid());
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGHUP, on_signal);
	signal(SIGPIPE, on_signal);

	/*
	 * Space: on `dir` the store (2 slots) and the ntcopy file (same size)
	 * live together, then the pmemobj pool (~2.5x) alone; in memory the
	 * source buffer comes on top of those (tmpfs is memory).
	 */
	uint64_t asked = size;
	struct statvfs vfs;
	if (statvfs(dir, &vfs)) {
		fprintf(stderr, "pmck-bench: %s: %s\n", dir, strerror(errno));
		goto out;
	}
	uint64_t dir_free = (uint64_t)vfs.f_bavail * vfs.f_frsize;
	uint64_t mem_free = tool_mem_available();
	int dir_is_tmpfs = !strcmp(fs_name(dir), "tmpfs");
	uint64_t slack = 64 * MiB;
	uint64_t fit = dir_free > slack ? (dir_free - slack) / 42 * 10 : 0;
	uint64_t mem_need_x10 = dir_is_tmpfs ? 53 : 13;
	if (mem_free) {
		/* Leave a fifth of the available memory to whoever shares the machine. */
		uint64_t usable = mem_free / 5 * 4;
		uint64_t mfit = usable > 4 * slack ? (usable - 4 * slack) / mem_need_x10 * 10 : 0;
		if (mfit < fit)
			fit = mfit;
	}
	if (size > fit) {
		size = fit / MiB * MiB;
		if (size < MiB) {
			fprintf(stderr, "pmck-bench: not enough space: %s has %llu MiB free, "
					"MemAvailable %llu MiB\n", dir, (unsigned long long)(dir_free / MiB),
					(unsigned long long)(mem_free / MiB));
			goto out;
		}
	}

	if (build_layout(&lay, size)) {
		fprintf(stderr, "pmck-bench: cannot build a layout of %llu bytes\n",
				(unsigned long long)size);
		goto out;
	}

	/* ------------------------------------------------ the store */
	uint64_t data_bound = lay.bytes + lay.n * PMCK_ALIGN + PMCK_ALIGN;
	uint64_t round2m = (data_bound + 2 * MiB - 1) / (2 * MiB) * (2 * MiB);
	uint64_t region_size = 2 * MiB + 2 * round2m + 4 * MiB;
	int ret;

	unlink(store_path);
	track(0, store_path);
	if ((ret = pma_region_open(store_path, region_size, PMA_REGION_CREATE, &sr)) ||
	    (ret = pma_pool_create(sr, 0, &pool)) ||
	    (ret = pmck_store_create(pool, "bench", lay.d, lay.n, &store))) {
		fprintf(stderr, "pmck-bench: store on %s: %s\n", store_path, pmck_errormsg());
		goto out;
	}
	uint64_t data_size = pmck_store_data_size(store);
	uint64_t tbytes = pmck_store_tensor_bytes(store);

	/* Source: one buffer laid out like a slot, so that ntcopy moves the same bytes. */
	if (posix_memalign((void **)&src, 2 * MiB, data_size) ||
	    !(srcs = calloc(lay.n, sizeof(*srcs)))) {
		fprintf(stderr, "pmck-bench: cannot allocate %llu bytes of source tensors\n",
				(unsigned long long)data_size);
		goto out;
	}
	madvise(src, data_size, MADV_HUGEPAGE);
	memset(src, 0, data_size);
	for (size_t i = 0; i < lay.n; i++) {
		struct pmck_tensor_info ti;
		pmck_store_tensor(store, i, &ti);
		srcs[i] = src + ti.offset;
		fill_weights(src + ti.offset, ti.nbytes, i + 1);
	}

	/* --------------------------------------------------- context */
	char cpu[256];
	struct utsname un;
	cpu_model(cpu, sizeof(cpu));
	uname(&un);
	printf("# pmck-bench: %s, %ld online CPUs, Linux %s, MemAvailable %.1f GiB, "
			"load average %.2f\n", cpu, cpus, un.release, (double)mem_free / (1 << 30),
			loadavg());
	if (size != asked)
		printf("# scaled down: asked for %llu MiB of tensors, %s has %llu MiB free and "
				"MemAvailable is %llu MiB; using %llu MiB\n",
				(unsigned long long)(asked / MiB), dir, (unsigned long long)(dir_free / MiB),
				(unsigned long long)(mem_free / MiB), (unsigned long long)(size / MiB));
	printf("# tensors: %zu (GPT-2-medium-like: %u layers, d_model %u, vocab %llu, fp32 + 4 tiny),"
			" %llu bytes (%.1f MiB); slot data region %llu bytes\n", lay.n, NLAYERS,
			lay.d_model, (unsigned long long)lay.vocab, (unsigned long long)tbytes,
			(double)tbytes / MiB, (unsigned long long)data_size);
	printf("# threads: %u for commit and ntcopy%s; pmemobj tx and write+fsync are single-threaded;"
			" sources in anonymous memory (THP advised)\n",
			threads, threads_asked > 8 ? " (capped at 8)" : "");
	printf("# reps: %u timed per measurement after warm-up (commit: one per slot); "
			"reporting the MEDIAN; GB/s = 1e9 bytes/s\n", reps);
	printf("# dir: %s (%s, %s granularity); disk-dir: %s (%s)\n", dir, fs_name(dir),
			pma_granularity_name(pma_region_granularity(sr)), disk_dir, fs_name(disk_dir));
	if (!strcmp(fs_name(disk_dir), "tmpfs") || !strcmp(fs_name(disk_dir), "ramfs"))
		printf("# warning: disk-dir is in memory; write_fsync is not a disk baseline\n");
	fflush(stdout);

	/* ----------------------------------- region open, prefaulted, alternated */
	track(1, nt_path);
	for (unsigned m = 0; m < MAKE_KINDS; m++)
		if (!(t_open[m].t = calloc(reps, sizeof(double)))) {
			fprintf(stderr, "pmck-bench: out of memory\n");
			goto out;
		}
	for (unsigned k = 0; k < reps; k++)
		for (unsigned i = 0; i < MAKE_KINDS; i++) {
			unsigned m = (i + k) % MAKE_KINDS; /* each first in turn */
			struct timing *tm = &t_open[m];
			if (region_open_seconds(nt_path, pma_region_size(sr), m, &tm->t[tm->n]))
				goto out;
			tm->n++;
		}

	/* ------------------------------------- ntcopy and commit, interleaved */
	unlink(nt_path);
	if ((ret = pma_region_open(nt_path, pma_region_size(sr), PMA_REGION_CREATE, &nr))) {
		fprintf(stderr, "pmck-bench: ntcopy region %s: %s\n", nt_path, pmck_errormsg());
		goto out;
	}
	char *nt_dst = (char *)pma_region_addr(nr) + 2 * MiB;
	t_nt.t = calloc(reps, sizeof(double));
	t_ck.t = calloc(reps, sizeof(double));
	t_rec.t = calloc(reps, sizeof(double));
	t_obj.t = calloc(reps, sizeof(double));
	t_disk.t = calloc(reps, sizeof(double));
	if (!t_nt.t || !t_ck.t || !t_rec.t || !t_obj.t || !t_disk.t) {
		fprintf(stderr, "pmck-bench: out of memory\n");
		goto out;
	}
	uint64_t step = 0;
	double secs;
	if (ntcopy_run(nr, nt_dst, src, data_size, threads, &secs) ||
	    tool_checkpoint("pmck-bench", store, ++step, srcs, threads, &secs, NULL) ||
	    tool_checkpoint("pmck-bench", store, ++step, srcs, threads, &secs, NULL)) {
		fprintf(stderr, "pmck-bench: warm-up failed\n");
		goto out;
	}
	for (unsigned k = 0; k < reps; k++) {
		if (ntcopy_run(nr, nt_dst, src, data_size, threads, &t_nt.t[t_nt.n])) {
			fprintf(stderr, "pmck-bench: ntcopy: cannot start %u threads\n", threads);
			goto out;
		}
		t_nt.n++;
		if (tool_checkpoint("pmck-bench", store, ++step, srcs, threads, &t_ck.t[t_ck.n], NULL))
			goto out;
		t_ck.n++;
	}
	pma_region_close(&nr);
	unlink(nt_path);
	track(1, NULL);

	/* ----------------------------------------------------- recovery */
	struct pmck_recovery rec;
	for (unsigned k = 0; k < reps; k++) {
		double t0 = tool_now();
		if ((ret = pmck_store_recover(store, &rec))) {
			fprintf(stderr, "pmck-bench: recover: %s\n", pmck_errormsg());
			goto out;
		}
		t_rec.t[t_rec.n++] = tool_now() - t0;
		if (rec.step != step || rec.rejected) {
			fprintf(stderr, "pmck-bench: recovered step %llu (rejected %d), expected %llu\n",
					(unsigned long long)rec.step, rec.rejected, (unsigned long long)step);
			goto out;
		}
	}
	if (memcmp(pmck_store_tensor_data(store, 0), srcs[0], 4096)) {
		fprintf(stderr, "pmck-bench: recovered data differs from the source\n");
		goto out;
	}
	pmck_store_close(&store);
	pma_pool_close(&pool);
	pma_region_close(&sr);
	unlink(store_path);
	track(0, NULL);

	/* --------------------------------------------------- pmemobj tx */
	uint64_t poolsize = data_size / 2 * 5 + 64 * MiB;
	if (poolsize < PMEMOBJ_MIN_POOL)
		poolsize = PMEMOBJ_MIN_POOL;
	unlink(obj_path);
	track(2, obj_path);
	if (pobj_setup(&po, obj_path, data_size, poolsize) || pobj_tx(&po, src, &secs))
		goto out;
	for (unsigned k = 0; k < reps; k++) {
		if (pobj_tx(&po, src, &t_obj.t[t_obj.n]))
			goto out;
		t_obj.n++;
	}
	if (memcmp(pmemobj_direct(po.oid[0]), src, 4096)) {
		fprintf(stderr, "pmck-bench: pmemobj destination differs from the source\n");
		goto out;
	}
	pobj_teardown(&po);
	unlink(obj_path);
	track(2, NULL);

	/* -------------------------------------------------- write+fsync */
	track(3, disk_path);
	if (write_fsync(disk_path, &lay, srcs, &secs))
		goto out;
	for (unsigned k = 0; k < reps; k++) {
		if (write_fsync(disk_path, &lay, srcs, &t_disk.t[t_disk.n]))
			goto out;
		t_disk.n++;
	}
	unlink(disk_path);
	track(3, NULL);

	/* ------------------------------------------------------ results */
	double m_nt = median(&t_nt), m_ck = median(&t_ck), m_rec = median(&t_rec);
	double m_obj = median(&t_obj), m_disk = median(&t_disk);
	printf("# load average at the end: %.2f (figures are noisy when others use the CPUs)\n",
			loadavg());
	report_times("ntcopy", &t_nt, m_nt);
	report_times("commit", &t_ck, m_ck);
	report_times("recover", &t_rec, m_rec);
	report_times("pmemobj_tx", &t_obj, m_obj);
	report_times("write_fsync", &t_disk, m_disk);
	double m_open = median(&t_open[MAKE_BY_OPEN]);
	double m_openf = median(&t_open[MAKE_FALLOCATE_FIRST]);
	double m_open1 = median(&t_open[MAKE_FALLOCATE_ONE_THREAD]);
	report_times("region_open", &t_open[MAKE_BY_OPEN], m_open);
	report_times("region_open_fallocate_first", &t_open[MAKE_FALLOCATE_FIRST], m_openf);
	report_times("region_open_1thread", &t_open[MAKE_FALLOCATE_ONE_THREAD], m_open1);
	double nt = (double)data_size / m_nt / GB, ck = (double)tbytes / m_ck / GB;
	double rcv = (double)tbytes / m_rec / GB, obj = (double)data_size / m_obj / GB;
	double disk = (double)tbytes / m_disk / GB;
	printf("bench: ntcopy_tput %.2f GB/s\n", nt);
	printf("bench: commit_tput %.2f GB/s\n", ck);
	printf("bench: recover_tput %.2f GB/s\n", rcv);
	printf("bench: pmemobj_tx_tput %.2f GB/s\n", obj);
	printf("bench: write_fsync_tput %.2f GB/s\n", disk);
	printf("bench: region_open_ms %.1f ms\n", m_open * 1e3);
	printf("bench: region_open_fallocate_first_ms %.1f ms\n", m_openf * 1e3);
	printf("bench: region_open_one_thread_populate_ms %.1f ms\n", m_open1 * 1e3);
	printf("ratio: commit_tput_vs_ntcopy %.3f\n", ck / nt);
	printf("ratio: region_open_time_vs_one_thread_populate %.3f\n", m_openf / m_open1);
	/* Elsewhere pma_region_open itself fallocates first: the same thing twice. */
	if (!strcmp(fs_name(dir), "tmpfs"))
		printf("ratio: region_create_time_vs_fallocate_first %.3f\n", m_open / m_openf);
	else
		printf("# region_create_time_vs_fallocate_first: not on tmpfs (%s), where the open "
		       "fallocates too\n", fs_name(dir));
	printf("ratio: commit_tput_vs_pmemobj_tx %.2f\n", ck / obj);
	printf("ratio: commit_tput_vs_write_fsync %.2f\n", ck / disk);
	printf("# goal: commit_tput_vs_ntcopy >= 0.9: %s\n", ck / nt >= 0.9 ? "met" : "NOT met");
	printf("# goal: commit_tput_vs_pmemobj_tx >= 5: %s\n", ck / obj >= 5 ? "met" : "NOT met");
	rc = 0;
out:
	fflush(stdout);
	pobj_teardown(&po);
	pmck_store_close(&store);
	pma_pool_close(&pool);
	pma_region_close(&sr);
	pma_region_close(&nr);
	unlink(store_path);
	unlink(nt_path);
	unlink(obj_path);
	unlink(disk_path);
	if (made_dir[0])
		rmdir(made_dir);
	free(src);
	free(srcs);
	free(t_nt.t);
	free(t_ck.t);
	free(t_rec.t);
	free(t_obj.t);
	free(t_disk.t);
	for (unsigned m = 0; m < MAKE_KINDS; m++)
		free(t_open[m].t);
	free_layout(&lay);
	return rc;
}
