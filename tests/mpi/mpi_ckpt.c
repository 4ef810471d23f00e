/*
 * mpi_ckpt.c -- one rank of the multi-rank tests (driven by tests/mpi_multirank.sh).
 *
 *   mpi_ckpt run DIR        checkpoint forever: global begin/commit + copy-out to DIR/shared;
 *                           rank 0 appends each globally agreed step to DIR/global.log
 *   mpi_ckpt recover DIR    agree, load, check bit-exact; print "rank R step S tier T ok|bad"
 *   mpi_ckpt mismatch DIR   ranks with different layouts: every rank must get a clear error
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pmckpt.h"
#include "pmckpt_mpi.h"

#define NT 4

static struct pmck_tensor_desc descs[NT + 1] = {
	{.name = "emb", .dtype = PMCK_DTYPE_F32, .ndim = 2, .shape = {512, 600}, .layer = 0},
	{.name = "w", .dtype = PMCK_DTYPE_BF16, .ndim = 2, .shape = {256, 256}, .layer = 1},
	{.name = "b", .dtype = PMCK_DTYPE_F32, .ndim = 1, .shape = {7}, .layer = 1},
	{.name = "step", .dtype = PMCK_DTYPE_I64, .ndim = 0, .layer = 2},
	{.name = "extra", .dtype = PMCK_DTYPE_F32, .ndim = 1, .shape = {16}, .layer = 3},
};
static uint8_t *buf[NT + 1];
static size_t nbytes[NT + 1];

static void
fill(unsigned rank, uint64_t step, size_t n)
{
	for (size_t i = 0; i < n; i++)
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

int
main(int argc, char **argv)
{
	static MPI_Comm world;
	struct pmck_collectives coll;
	struct pmck_local l;
	struct pmck_global *g;
	char ramdisk[600], shared[600], name[32], path[700];
	int provided;

	if (argc != 3)
		return 2;
	MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
	world = MPI_COMM_WORLD;
	pmck_mpi_collectives(&world, &coll);
	unsigned rank = coll.rank;
	const char *mode = argv[1], *dir = argv[2];
	size_t n = NT + (!strcmp(mode, "mismatch") && rank == 1); /* rank 1 declares one more tensor */

	for (size_t i = 0; i < n; i++) {
		nbytes[i] = pmck_dtype_size(descs[i].dtype);
		for (uint32_t d = 0; d < descs[i].ndim; d++)
			nbytes[i] *= descs[i].shape[d];
		buf[i] = malloc(nbytes[i]);
	}
	snprintf(ramdisk, sizeof(ramdisk), "%s/ramdisk", dir);
	snprintf(shared, sizeof(shared), "%s/shared", dir);
	snprintf(name, sizeof(name), "rank%u", rank);
	struct pmck_local_opts lo = {.ramdisk_dir = ramdisk, .store_name = name, .descs = descs,
			.ndescs = n};
	if (!strcmp(mode, "mismatch"))
		snprintf(name, sizeof(name), "mm%u", rank);
	if (pmck_local_open(&lo, &l))
		die(rank, "open");

	int ret = pmck_global_new(l.store, &coll, &g);
	if (!strcmp(mode, "mismatch")) {
		/* Every rank must fail, with a message, and nobody may hang. */
		printf("rank %u mismatch %s: %s\n", rank, ret == PMCK_E_LAYOUT ? "ok" : "bad",
				pmck_errormsg());
		pmck_local_close(&l);
		MPI_Finalize();
		return ret == PMCK_E_LAYOUT ? 0 : 1;
	}
	if (ret)
		die(rank, "global_new");

	struct pmck_global_recovery gr;
	ret = pmck_global_recover(g, shared, &gr);
	if (!strcmp(mode, "recover")) {
		int exact = 0;
		if (ret == 0) {
			fill(rank, gr.step, n);
			exact = 1;
			for (size_t i = 0; i < n; i++)
				exact &= !memcmp(pmck_store_tensor_data(l.store, i), buf[i], nbytes[i]);
			printf("rank %u step %" PRIu64 " tier %s %s\n", rank, gr.step,
					gr.tier == PMCK_TIER_LOCAL ? "local" : "shared", exact ? "ok" : "bad");
		} else {
			printf("rank %u none: %s\n", rank, pmck_errormsg());
		}
		fflush(stdout);
		pmck_global_delete(&g);
		/* Refused: a store this attempt created goes again (a 5th rank's new file). */
		if (ret == PMCK_E_WORLD_SIZE)
			pmck_local_discard(&l);
		else
			pmck_local_close(&l);
		MPI_Finalize();
		return ret == 0 && !exact;
	}
	if (ret && ret != PMCK_E_NO_CHECKPOINT)
		die(rank, "recover");
	uint64_t step = ret ? 1 : gr.step + 1;

	/* run: the driver kills us; our pid lets it pick one rank. */
	snprintf(path, sizeof(path), "%s/pid.%u", dir, rank);
	FILE *pf = fopen(path, "w");
	if (pf) {
		fprintf(pf, "%d\n", (int)getpid());
		fclose(pf);
	}
	struct pmck_copyout *co;
	struct pmck_copyout_opts coo = {.dir = shared, .keep = 2, .rank = rank,
			.world_size = coll.size};
	if (pmck_copyout_new(l.store, &coo, &co))
		die(rank, "copyout");
	snprintf(path, sizeof(path), "%s/global.log", dir);
	int logfd = rank == 0 ? open(path, O_WRONLY | O_CREAT | O_APPEND, 0644) : -1;
	for (;; step++) {
		struct pmck_ckpt *c;
		int64_t agreed;
		if (pmck_global_begin(g, step, &c))
			die(rank, "begin");
		/* begin completed the previous agreement: report it (rank 0), durably */
		pmck_global_wait(g, &agreed);
		if (logfd >= 0 && agreed >= 0) {
			char line[32];
			int len = snprintf(line, sizeof(line), "%" PRId64 "\n", agreed);
			if (write(logfd, line, (size_t)len) != len || fsync(logfd))
				die(rank, "global.log");
		}
		fill(rank, step, n);
		for (size_t i = 0; i < n; i++)
			if (pmck_ckpt_write(c, i, buf[i]))
				die(rank, "write");
		if (pmck_global_commit(g, c))
			die(rank, "commit");
		if (step % 3 == 0 && pmck_copyout_submit(co))
			die(rank, "copy-out");
	}
}
