/*
 * mpi_partner.c -- one rank of the partner-copy kill trials (driven by
 * tests/mpi_partner.sh): 4 ranks as 2 "nodes" of this machine (ranks 0, 1
 * and 2, 3), each node a ramdisk directory of its own, no shared directory.
 *
 *   mpi_partner run DIR [N]      checkpoint every step with partner copies of every N-th
 *                                (default 1), forever; rank 0 appends to DIR/global.log
 *                                each step a lost node must come back to: with N = 1 each
 *                                globally agreed step, else each agreed step that was copied
 *   mpi_partner recover DIR [N]  agree, load, check bit-exact; print "rank R step S tier T ok|bad"
 */
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pmckpt.h"
#include "pmckpt_mpi.h"

#define NT 3

static struct pmck_tensor_desc descs[NT] = {
	{.name = "emb", .dtype = PMCK_DTYPE_F32, .ndim = 2, .shape = {1024, 1100}, .layer = 0},
	{.name = "w", .dtype = PMCK_DTYPE_BF16, .ndim = 2, .shape = {256, 256}, .layer = 1},
	{.name = "step", .dtype = PMCK_DTYPE_I64, .ndim = 0, .layer = 2},
};
static uint8_t *buf[NT];
static size_t nbytes[NT];

static void
fill(unsigned rank, uint64_t step)
{
	for (size_t i = 0; i < NT; i++)
		for (size_t k = 0; k < nbytes[i]; k++)
			buf[i][k] = (uint8_t)((step * 2654435761u + rank * 40503u + i * 131u + k) >> 1);
}

static void
die(unsigned rank, const char *what)
{
	fprintf(stderr, "rank %u: %s: %s\n", rank, what, pmck_errormsg());
	MPI_Abort(MPI_COMM_WORLD, 1);
	exit(1);
}

static const char *
tier_name(enum pmck_tier t)
{
	return t == PMCK_TIER_LOCAL ? "local" : t == PMCK_TIER_PARTNER ? "partner" : "shared";
}

int
main(int argc, char **argv)
{
	static MPI_Comm world;
	struct pmck_collectives coll;
	struct pmck_local l;
	struct pmck_global *g;
	struct pmck_partner *pt;
	char ramdisk[600], name[32], path[700];
	int provided;

	if (argc != 3 && argc != 4)
		return 2;
	unsigned every = argc == 4 ? (unsigned)atoi(argv[3]) : 1;
	MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
	world = MPI_COMM_WORLD;
	pmck_mpi_collectives(&world, &coll);
	unsigned rank = coll.rank;
	const char *mode = argv[1], *dir = argv[2];
	if (provided != MPI_THREAD_MULTIPLE)
		die(rank, "MPI_THREAD_MULTIPLE is not provided");

	for (size_t i = 0; i < NT; i++) {
		nbytes[i] = pmck_dtype_size(descs[i].dtype);
		for (uint32_t d = 0; d < descs[i].ndim; d++)
			nbytes[i] *= descs[i].shape[d];
		buf[i] = malloc(nbytes[i]);
	}
	/* Two nodes of this machine; on a cluster: pmck_mpi_node(MPI_COMM_WORLD, &node). */
	uint64_t node = rank / 2;
	snprintf(ramdisk, sizeof(ramdisk), "%s/node%" PRIu64, dir, node);
	snprintf(name, sizeof(name), "rank%u", rank);
	struct pmck_local_opts lo = {.ramdisk_dir = ramdisk, .store_name = name, .descs = descs,
			.ndescs = NT};
	struct pmck_partner_opts po = {.node = node, .ramdisk_dir = ramdisk, .store_name = name,
			.every = every};
	if (pmck_local_open(&lo, &l))
		die(rank, "open");
	if (pmck_global_new(l.store, &coll, &g))
		die(rank, "global_new");
	if (pmck_partner_new(g, &coll, &po, &pt))
		die(rank, "partner_new");

	struct pmck_global_recovery gr;
	int ret = pmck_global_recover(g, NULL, &gr);
	if (!strcmp(mode, "recover")) {
		int exact = 0;
		if (ret == 0) {
			fill(rank, gr.step);
			exact = 1;
			for (size_t i = 0; i < NT; i++)
				exact &= !memcmp(pmck_store_tensor_data(l.store, i), buf[i], nbytes[i]);
			/* "own": the local tier's own copy of a partner step (every > 1) */
			printf("rank %u step %" PRIu64 " tier %s %s\n", rank, gr.step,
					strstr(gr.reason, "own copy") ? "own" : tier_name(gr.tier),
					exact ? "ok" : "bad");
		} else {
			printf("rank %u none: %s\n", rank, pmck_errormsg());
		}
		fflush(stdout);
		pmck_partner_delete(&pt);
		pmck_global_delete(&g);
		pmck_local_close(&l);
		MPI_Finalize();
		return ret == 0 && !exact;
	}
	if (ret && ret != PMCK_E_NO_CHECKPOINT)
		die(rank, "recover");
	uint64_t step = ret ? 1 : gr.step + 1;
	/*
	 * With every > 1: a step is promised to a lost node once it is agreed
	 * and rank 0's copy of it was confirmed, past the recovered step (a
	 * step resent by recovery is promised only once the next copy step,
	 * queued behind it, is agreed).
	 */
	int64_t recovered = ret ? -1 : (int64_t)gr.step, promised = -1;

	snprintf(path, sizeof(path), "%s/pid.%u", dir, rank);
	FILE *pf = fopen(path, "w");
	if (pf) {
		fprintf(pf, "%d\n", (int)getpid());
		fclose(pf);
	}
	snprintf(path, sizeof(path), "%s/global.log", dir);
	int logfd = rank == 0 ? open(path, O_WRONLY | O_CREAT | O_APPEND, 0644) : -1;
	for (;; step++) {
		struct pmck_ckpt *c;
		int64_t agreed;
		if (pmck_global_begin(g, step, &c))
			die(rank, "begin");
		/* begin completed the previous agreement: report it (rank 0), durably */
		pmck_global_wait(g, &agreed);
		int64_t log_step = agreed;
		if (every > 1) {
			struct pmck_partner_stats st;
			pmck_partner_stats(pt, &st);
			log_step = -1;
			if (st.confirmed_step > recovered && st.confirmed_step <= agreed &&
			    st.confirmed_step > promised)
				log_step = promised = st.confirmed_step;
		}
		if (logfd >= 0 && log_step >= 0) {
			char line[32];
			int len = snprintf(line, sizeof(line), "%" PRId64 "\n", log_step);
			if (write(logfd, line, (size_t)len) != len || fsync(logfd))
				die(rank, "global.log");
		}
		fill(rank, step);
		for (size_t i = 0; i < NT; i++)
			if (pmck_ckpt_write(c, i, buf[i]))
				die(rank, "write");
		if (pmck_global_commit(g, c))
			die(rank, "commit");
	}
}
