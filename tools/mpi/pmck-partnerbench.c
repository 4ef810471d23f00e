/*
 * pmck-partnerbench.c -- partner copies measured under mpirun: 4 ranks as 2
 * "nodes" (ranks 0, 1 and 2, 3), MIB MiB per rank (tools/mpi/partnerbench.sh).
 *
 *   pmck-partnerbench MIB STEPS COMPUTE_MS RAMDISK SHARED
 *
 * 1. Training stall: STEPS synchronous global checkpoints (begin + write +
 *    commit) with COMPUTE_MS of compute between them, each copied out,
 *    without and then with partner copies; the rounds run during compute.
 *    Rank 0's median.
 * 2. A lost node: node 1's ranks delete their ramdisk directory; every
 *    rank recovers, once from the partners (no shared directory) and twice
 *    from the copy-out under SHARED (no partner tier), as a restarted job
 *    would: first with SHARED's files dropped from the page cache, as a
 *    replacement node finds them, then warm.  Times from the open to a
 *    loaded store, the slowest rank.
 *    The same with a copy every 4th step only (`every`): "stall4"; and
 *    without and with partner copies while the host waits through compute
 *    (usleep), as it does on a GPU's training step: "stall_idle".
 * 3. Rounds alone: STEPS checkpoints with no compute between them, so that
 *    nothing else runs during a round (begin waits for the previous one);
 *    the bytes the rounds sent per second of round, against plain
 *    MPI_Sendrecv of the same bytes in the same pieces.
 * Rank 0 prints "stall NONE PARTNER", "stall4 PARTNER_EVERY4",
 * "recovery PARTNER SHARED_COLD SHARED_WARM" (seconds), "bytes SENT_PER_S", "transport
 * BYTES_PER_S", each line for the script to turn into bench: lines.
 */
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pmckpt.h"
#include "pmckpt_mpi.h"

static MPI_Comm world;
static struct pmck_collectives coll;
static struct pmck_tensor_desc desc = {.name = "w", .dtype = PMCK_DTYPE_U8, .ndim = 1};
static char ramdisk[600], shared[600], name[32];

static double
now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void
die(const char *what)
{
	fprintf(stderr, "rank %u: %s: %s\n", coll.rank, what, pmck_errormsg());
	MPI_Abort(MPI_COMM_WORLD, 1);
	exit(1);
}

static int
cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* busy: the CPU computes (a CPU-bound step); else the host waits, as on a GPU's step. */
static void
compute(unsigned ms, int busy)
{
	double end = now() + ms / 1e3;
	if (!busy)
		usleep(ms * 1000u);
	while (busy && now() < end)
		;
}

struct job {
	struct pmck_local l;
	struct pmck_global *g;
	struct pmck_partner *p;
};

/* partner: 0 none, else partner copies of every `partner`-th step. */
static void
open_job(struct job *j, unsigned partner, uint64_t node)
{
	struct pmck_local_opts lo = {.ramdisk_dir = ramdisk, .store_name = name, .descs = &desc,
			.ndescs = 1};
	struct pmck_partner_opts po = {.node = node, .ramdisk_dir = ramdisk, .store_name = name,
			.every = partner};
	j->p = NULL;
	if (pmck_local_open(&lo, &j->l) || pmck_global_new(j->l.store, &coll, &j->g) ||
	    (partner && pmck_partner_new(j->g, &coll, &po, &j->p)))
		die("open");
}

static void
close_job(struct job *j)
{
	pmck_partner_delete(&j->p);
	pmck_global_delete(&j->g);
	pmck_local_close(&j->l);
}

/* Median seconds training waits per checkpoint, steps first..first+n-1. */
static double
train(struct job *j, uint8_t *src, uint64_t first, unsigned n, unsigned compute_ms, int busy,
		struct pmck_copyout *co)
{
	double *t = malloc(n * sizeof(*t));
	for (unsigned i = 0; i < n; i++) {
		struct pmck_ckpt *c;
		compute(compute_ms, busy);
		memset(src, (int)(first + i), (size_t)desc.shape[0]);
		double t0 = now();
		if (pmck_global_begin(j->g, first + i, &c) || pmck_ckpt_write(c, 0, src) ||
		    pmck_global_commit(j->g, c))
			die("checkpoint");
		t[i] = now() - t0;
		if (co && pmck_copyout_submit(co))
			die("copy-out");
	}
	if (pmck_global_wait(j->g, NULL) || (j->p && pmck_partner_wait(j->p)))
		die("wait");
	qsort(t, n, sizeof(*t), cmp);
	double med = t[n / 2];
	free(t);
	return med;
}

/* Drops a file's pages from the page cache (the copy-out fsynced it: they are clean). */
static int
evict(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)st, (void)ftw;
	int fd = type == FTW_F ? open(path, O_RDONLY) : -1;
	if (fd >= 0) {
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
		close(fd);
	}
	return 0;
}

/*
 * Slowest rank's seconds from open to a recovered store, node 1 having lost
 * its ramdisk directory (its stores and the copies it held).  cold: node 1
 * is a replacement, whose page cache holds none of the shared files.
 */
static double
recover_lost_node(unsigned partner, uint64_t node, const char *dir, int cold, enum pmck_tier *tier)
{
	struct job j;
	struct pmck_global_recovery rec;
	char cmd[800];
	MPI_Barrier(world);
	if (node == 1) {
		snprintf(cmd, sizeof(cmd), "rm -rf %s", ramdisk);
		if (system(cmd))
			die("rm");
		if (cold && dir && coll.rank == 2)
			nftw(dir, evict, 16, FTW_PHYS);
	}
	MPI_Barrier(world);
	double t0 = now();
	open_job(&j, partner, node);
	if (pmck_global_recover(j.g, dir, &rec))
		die("recover");
	double t = now() - t0, slowest;
	*tier = rec.tier;
	MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, world);
	close_job(&j);
	return slowest;
}

static double
transport(uint8_t *a, uint8_t *b, size_t bytes, unsigned target, unsigned source)
{
	const size_t piece = 4u << 20;
	MPI_Barrier(world);
	double t0 = now();
	for (size_t off = 0; off < bytes; off += piece) {
		int len = (int)(bytes - off < piece ? bytes - off : piece);
		MPI_Sendrecv(a + off, len, MPI_BYTE, (int)target, 7, b + off, len, MPI_BYTE,
				(int)source, 7, world, MPI_STATUS_IGNORE);
	}
	return bytes / (now() - t0);
}

int
main(int argc, char **argv)
{
	int provided;
	MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
	world = MPI_COMM_WORLD;
	pmck_mpi_collectives(&world, &coll);
	if (argc != 6 || coll.size != 4 || provided != MPI_THREAD_MULTIPLE) {
		fprintf(stderr, "usage: mpirun -np 4 pmck-partnerbench MIB STEPS COMPUTE_MS RAMDISK SHARED "
				"(MPI_THREAD_MULTIPLE)\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	size_t bytes = (size_t)atoi(argv[1]) << 20;
	unsigned steps = (unsigned)atoi(argv[2]), compute_ms = (unsigned)atoi(argv[3]);
	uint64_t node = coll.rank / 2;
	desc.shape[0] = bytes;
	snprintf(ramdisk, sizeof(ramdisk), "%s/node%" PRIu64, argv[4], node);
	snprintf(shared, sizeof(shared), "%s", argv[5]);
	snprintf(name, sizeof(name), "rank%u", coll.rank);
	uint8_t *src = malloc(bytes), *other = malloc(bytes);
	memset(other, 1, bytes);

	/*
	 * 1. Stall, without and with partner copies (separate stores: separate
	 * files), both copying out every step to the shared directory; the
	 * second run's copies are what the lost node recovers from below.
	 */
	struct job j;
	struct pmck_global_recovery rec;
	struct pmck_partner_stats st;
	struct pmck_copyout *co;
	struct pmck_copyout_opts coo = {.dir = shared, .keep = 2, .rank = coll.rank, .world_size = 4};
	double stall[5];
	/* Busy compute: none, every step, every 4th; a waiting host: none, every step. */
	const unsigned every[5] = {0, 4, 0, 1, 1}; /* the last run's copies are recovered below */
	const int busy[5] = {1, 1, 0, 0, 1};
	for (int run = 0; run < 5; run++) {
		snprintf(name, sizeof(name), every[run] ? "rank%u-p" : "rank%u", coll.rank);
		open_job(&j, every[run], node);
		pmck_global_recover(j.g, NULL, &rec);
		if (pmck_copyout_new(j.l.store, &coo, &co))
			die("copy-out");
		stall[run] = train(&j, src, 1 + run * steps, steps, compute_ms, busy[run], co);
		if (pmck_copyout_wait(co))
			die("copy-out");
		pmck_copyout_delete(&co);
		close_job(&j);
	}
	double none = stall[0], with = stall[4], with4 = stall[1];

	/* 3. Rounds alone (a store of their own, so that the one recovered below stays). */
	snprintf(name, sizeof(name), "rank%u-r", coll.rank);
	open_job(&j, 1, node);
	pmck_global_recover(j.g, NULL, &rec);
	train(&j, src, 1, steps, 0, 0, NULL);
	pmck_partner_stats(j.p, &st);
	close_job(&j);
	snprintf(name, sizeof(name), "rank%u-p", coll.rank);

	/*
	 * 2. Node 1 lost: from the partners, then (lost again) from the shared
	 * directory, its files read cold (a replacement node), then warm.
	 */
	enum pmck_tier t1, t2, t3;
	double from_partner = recover_lost_node(1, node, NULL, 0, &t1);
	double from_shared = recover_lost_node(0, node, shared, 1, &t2);
	double from_shared_warm = recover_lost_node(0, node, shared, 0, &t3);
	double tput = transport(src, other, bytes, st.target, st.source);
	double partner_tput = st.busy_ns ? st.bytes_sent / (st.busy_ns / 1e9) : 0;
	if (coll.rank == 0) {
		printf("stall %.9f %.9f\n", none, with);
		printf("stall4 %.9f\n", with4);
		printf("stall_idle %.9f %.9f\n", stall[2], stall[3]);
		printf("recovery %.6f %.6f %.6f\n", from_partner, from_shared, from_shared_warm);
		printf("bytes %.0f\n", partner_tput);
		printf("transport %.0f\n", tput);
	}
	if (node == 1 && (t1 != PMCK_TIER_PARTNER || t2 != PMCK_TIER_SHARED || t3 != PMCK_TIER_SHARED))
		fprintf(stderr, "rank %u: recovered from tiers %d, %d and %d, not partner and shared\n",
				coll.rank, t1, t2, t3);
	MPI_Finalize();
	return 0;
}
