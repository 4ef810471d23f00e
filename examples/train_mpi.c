/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * train_mpi.c -- every MPI rank trains its shard and checkpoints it with a
 * global pipeline: a step counts only once every rank committed it, and a
 * restart brings all ranks back to the same step (docs/multirank.md).
 *
 *   mpirun -np 2 train_mpi RAMDISK_DIR SHARED_DIR [STEPS]
 *
 * Each rank keeps its store in RAMDISK_DIR/pmckpt-rankR.pool (node-local)
 * and copies every checkpoint to SHARED_DIR/step-N/rank-R.safetensors; rank
 * 0 marks a step COMPLETE once all ranks' files are there.  Run it again
 * to resume at the newest step that every rank can load.
 * Build: mpicc train_mpi.c $(pkg-config --cflags --libs pmckpt_mpi)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pmckpt_mpi.h>

static const struct pmck_tensor_desc layout[] = {
	{.name = "emb.weight", .dtype = PMCK_DTYPE_F32, .ndim = 2, .shape = {512, 64}, .layer = 0},
	{.name = "h.0.weight", .dtype = PMCK_DTYPE_F32, .ndim = 2, .shape = {64, 64}, .layer = 1},
	{.name = "head.weight", .dtype = PMCK_DTYPE_F32, .ndim = 2, .shape = {64, 512}, .layer = 2},
	{.name = "train.step", .dtype = PMCK_DTYPE_I64, .ndim = 0, .layer = 2},
};
#define NT (sizeof(layout) / sizeof(layout[0]))
#define LAYERS 3

static unsigned rank;
static uint8_t *param[NT];
static size_t nbytes[NT];

static void
fail(const char *what)
{
	fprintf(stderr, "train_mpi: rank %u: %s: %s\n", rank, what, pmck_errormsg());
	MPI_Abort(MPI_COMM_WORLD, 1);
}

/* Tensor i's bytes on this rank after `step` (a function of both, to check a recovery). */
static void
fill(size_t i, uint64_t step, uint8_t *dst)
{
	if (layout[i].dtype == PMCK_DTYPE_I64) {
		int64_t s = (int64_t)step;
		memcpy(dst, &s, sizeof(s));
		return;
	}
	for (size_t k = 0; k < nbytes[i]; k++)
		dst[k] = (uint8_t)((step * 2654435761u + rank * 97u + i * 40503u + k) >> 3);
}

static void
update_layer(uint32_t layer, uint64_t step)
{
	for (size_t i = 0; i < NT; i++)
		if (layout[i].layer == layer)
			fill(i, step, param[i]);
}

int
main(int argc, char **argv)
{
	static MPI_Comm world; /* the collectives keep a pointer to it */
	struct pmck_collectives coll;
	struct pmck_local local;
	struct pmck_global *g;
	struct pmck_global_recovery rec;
	struct pmck_copyout *co;
	struct pmck_pipeline *pipe;
	char name[32];
	uint64_t first = 1;
	int provided;

	/* The pipeline's writer thread starts the agreement: MPI_THREAD_SERIALIZED. */
	MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
	world = MPI_COMM_WORLD;
	if (provided < MPI_THREAD_SERIALIZED || pmck_mpi_collectives(&world, &coll))
		fail("MPI_THREAD_SERIALIZED or pmck_mpi_collectives");
	rank = coll.rank;
	if (argc < 3) {
		if (rank == 0)
			fprintf(stderr, "usage: train_mpi RAMDISK_DIR SHARED_DIR [STEPS]\n");
		MPI_Finalize();
		return 2;
	}
	uint64_t steps = argc > 3 ? strtoull(argv[3], NULL, 0) : 4;
	for (size_t i = 0; i < NT; i++) {
		nbytes[i] = pmck_dtype_size(layout[i].dtype);
		for (uint32_t d = 0; d < layout[i].ndim; d++)
			nbytes[i] *= layout[i].shape[d];
		if (!(param[i] = malloc(nbytes[i])))
			fail("malloc");
	}

	snprintf(name, sizeof(name), "rank%u", rank);
	struct pmck_local_opts lo = {.ramdisk_dir = argv[1], .store_name = name,
			.descs = layout, .ndescs = NT};
	if (pmck_local_open(&lo, &local))
		fail("pmck_local_open");
	struct pmck_copyout_opts cpo = {.dir = argv[2], .keep = 3, .rank = rank,
			.world_size = coll.size};
	if (pmck_copyout_new(local.store, &cpo, &co))
		fail("pmck_copyout_new");
	/* Collective: same world size and layout on every rank, or an error on all. */
	if (pmck_global_new(local.store, &coll, &g))
		fail("pmck_global_new");

	/* Every rank on the newest step all ranks can load, from its slot or shared file. */
	int ret = pmck_global_recover(g, argv[2], &rec);
	if (ret == 0) {
		int same = 1;
		for (size_t i = 0; i < NT; i++) {
			uint8_t want[nbytes[i]];
			if (pmck_store_read(local.store, i, param[i]))
				fail("pmck_store_read");
			fill(i, rec.step, want);
			same &= !memcmp(want, param[i], nbytes[i]);
		}
		if (!same)
			fail("recovered contents differ");
		printf("rank %u: resumed at step %llu from the %s tier; contents verified\n", rank,
				(unsigned long long)rec.step,
				rec.tier == PMCK_TIER_LOCAL ? "local" : "shared");
		first = rec.step + 1;
	} else if (ret == PMCK_E_NO_CHECKPOINT) {
		printf("rank %u: no checkpoint: starting at step 1\n", rank);
	} else {
		/* Refused (another world size, data lost): leave no store this attempt made. */
		fprintf(stderr, "train_mpi: rank %u: %s\n", rank, pmck_errormsg());
		pmck_copyout_delete(&co);
		pmck_global_delete(&g);
		pmck_local_discard(&local);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}

	/* A global pipeline: begin completes the previous step's agreement first. */
	struct pmck_pipeline_opts po = {.threads = 2, .numa_node = -1,
			.on_busy = PMCK_BUSY_WAIT, .copyout = co, .global = g};
	if (pmck_pipeline_new(local.store, &po, &pipe))
		fail("pmck_pipeline_new");
	for (uint64_t step = first; step < first + steps; step++) {
		/* (forward, backward, gradient allreduce; pmck_global_progress(g) now and then) */
		if (pmck_pipeline_begin(pipe, step) < 0)
			fail("pmck_pipeline_begin");
		for (uint32_t j = 0; j < LAYERS; j++) {
			if (pmck_pipeline_wait_layer(pipe, j))
				fail("pmck_pipeline_wait_layer");
			update_layer(j, step);
			if (pmck_pipeline_put_layer(pipe, j, (const void *const *)param) < 0)
				fail("pmck_pipeline_put_layer");
		}
	}
	int64_t agreed;
	if (pmck_pipeline_wait(pipe) || pmck_global_wait(g, &agreed))
		fail("pmck_pipeline_wait / pmck_global_wait");
	if (pmck_copyout_wait(co))
		fail("pmck_copyout_wait");
	printf("rank %u: trained steps %llu..%llu; globally committed step %lld\n", rank,
			(unsigned long long)first, (unsigned long long)(first + steps - 1),
			(long long)agreed);

	pmck_pipeline_delete(&pipe);
	pmck_copyout_delete(&co);
	pmck_global_delete(&g);
	pmck_local_close(&local);
	for (size_t i = 0; i < NT; i++)
		free(param[i]);
	MPI_Finalize();
	return 0;
}
