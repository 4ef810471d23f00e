/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * pmck-mpibench -- what training waits for per checkpoint with the global
 * agreement, per rank.  Run by `make bench` as mpirun -np 1 and -np 4 (same
 * per-rank size) and compared by tools/mpi/mpibench.sh.
 *
 *   pmck-mpibench [MIB [STEPS [COMPUTE_MS [sync|pipeline]]]]
 *
 * Each step: compute (sleep), then a checkpoint through the multi-rank
 * protocol.  sync: pmck_global_begin (completes the previous step's
 * agreement), write, pmck_global_commit (starts this step's agreement).
 * pipeline: pmck_pipeline_begin (the same completion) and put_layer on a
 * global pipeline; its writer writes, commits and starts the agreement in
 * the background.  Prints (rank 0) "stall S begin B" in seconds, medians
 * over steps: stall is what the training thread waited (sync: begin +
 * write + commit; pipeline: begin + put), begin the part in the begin call.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pmckpt.h"
#include "../lib/toolutil.h"
#include "pmckpt_mpi.h"

int
main(int argc, char **argv)
{
	static MPI_Comm world;
	struct pmck_collectives coll;
	int provided;
	size_t mib = argc > 1 ? (size_t)atoi(argv[1]) : 16;
	unsigned steps = argc > 2 ? (unsigned)atoi(argv[2]) : 20;
	double compute_ms = argc > 3 ? atof(argv[3]) : 100;
	int pipelined = argc > 4 && strcmp(argv[4], "pipeline") == 0;

	/* A global pipeline calls MPI from its writer thread too, one call at a time. */
	MPI_Init_thread(&argc, &argv, pipelined ? MPI_THREAD_SERIALIZED : MPI_THREAD_FUNNELED,
			&provided);
	if (pipelined && provided < MPI_THREAD_SERIALIZED) {
		fprintf(stderr, "this MPI does not provide MPI_THREAD_SERIALIZED\n");
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	world = MPI_COMM_WORLD;
	pmck_mpi_collectives(&world, &coll);
	char name[32], dir[64];
	snprintf(name, sizeof(name), "bench%u", coll.rank);
	snprintf(dir, sizeof(dir), "/dev/shm/pmck-mpibench-%u", coll.size);
	struct pmck_tensor_desc d = {.name = "state", .dtype = PMCK_DTYPE_U8, .ndim = 1,
			.shape = {mib << 20}};
	struct pmck_local_opts lo = {.ramdisk_dir = dir, .store_name = name, .descs = &d, .ndescs = 1};
	struct pmck_local l;
	struct pmck_global *g;
	if (pmck_local_open(&lo, &l) || pmck_global_new(l.store, &coll, &g)) {
		fprintf(stderr, "rank %u: %s\n", coll.rank, pmck_errormsg());
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	uint8_t *src = malloc(mib << 20);
	memset(src, (int)coll.rank, mib << 20);
	double *stall = calloc(steps, sizeof(double)), *agree = calloc(steps, sizeof(double));
	struct pmck_global_recovery gr;
	uint64_t first = pmck_global_recover(g, NULL, &gr) == 0 ? gr.step + 1 : 1;
	struct pmck_pipeline *pipe = NULL;
	struct pmck_pipeline_opts po = {.threads = 1, .numa_node = -1, .global = g};
	if (pipelined && pmck_pipeline_new(l.store, &po, &pipe)) {
		fprintf(stderr, "rank %u: %s\n", coll.rank, pmck_errormsg());
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	for (unsigned k = 0; k <= steps; k++) {
		/* compute, polling the agreement every 10 ms as a per-layer loop would */
		for (double t = 0; t < compute_ms; t += 10) {
			struct timespec c = {0, (long)((compute_ms - t < 10 ? compute_ms - t : 10) * 1e6)};
			nanosleep(&c, NULL);
			pmck_global_progress(g);
		}
		struct pmck_ckpt *ck;
		double t0 = tool_now(), t1;
		if (pipe) {
			const void *srcs[1] = {src};
			if (pmck_pipeline_begin(pipe, first + k))
				MPI_Abort(MPI_COMM_WORLD, 1);
			t1 = tool_now();
			if (pmck_pipeline_put_layer(pipe, 0, srcs))
				MPI_Abort(MPI_COMM_WORLD, 1);
		} else {
			if (pmck_global_begin(g, first + k, &ck))
				MPI_Abort(MPI_COMM_WORLD, 1);
			t1 = tool_now();
			if (pmck_ckpt_write_all(ck, (const void *const *)&src, 1) ||
			    pmck_global_commit(g, ck))
				MPI_Abort(MPI_COMM_WORLD, 1);
		}
		if (k) { /* step 0 warms up */
			stall[k - 1] = tool_now() - t0;
			agree[k - 1] = t1 - t0; /* begin: completing the previous agreement + unsealing */
		}
	}
	if (coll.rank == 0)
		printf("stall %.6f begin %.6f\n", tool_median(stall, steps), tool_median(agree, steps));
	if (pipe && pmck_pipeline_wait(pipe))
		MPI_Abort(MPI_COMM_WORLD, 1);
	pmck_pipeline_delete(&pipe);
	pmck_global_delete(&g);
	pmck_local_close(&l);
	char cmd[128];
	MPI_Barrier(MPI_COMM_WORLD);
	if (coll.rank == 0) {
		snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
		if (system(cmd))
			fprintf(stderr, "cannot remove %s\n", dir);
	}
	free(src);
	free(stall);
	free(agree);
	MPI_Finalize();
	return 0;
}
