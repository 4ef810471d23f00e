/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * train_single.c -- one process training a small model and checkpointing it
 * with pmckpt's asynchronous pipeline, copying every checkpoint out to a
 * shared directory (the newest 3 kept), and resuming after a restart from
 * the local store or, when that is gone, from the shared directory.
 *
 *   train_single RAMDISK_DIR SHARED_DIR [STEPS]
 *
 * Run it twice: the second run resumes where the first stopped.  Delete
 * RAMDISK_DIR/pmckpt-train_single.pool in between (a lost node) and the
 * next run resumes from SHARED_DIR.  Walked through in docs/c-api.md.
 * Build: cc train_single.c $(pkg-config --cflags --libs pmckpt)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pmckpt.h>

/* The model: 3 layers, updated and checkpointed in this order. */
static const struct pmck_tensor_desc layout[] = {
	{.name = "emb.weight", .dtype = PMCK_DTYPE_F32, .ndim = 2, .shape = {1024, 64}, .layer = 0},
	{.name = "h.0.weight", .dtype = PMCK_DTYPE_F32, .ndim = 2, .shape = {64, 64}, .layer = 1},
	{.name = "h.0.bias", .dtype = PMCK_DTYPE_F32, .ndim = 1, .shape = {64}, .layer = 1},
	{.name = "head.weight", .dtype = PMCK_DTYPE_F32, .ndim = 2, .shape = {64, 1024}, .layer = 2},
	{.name = "train.step", .dtype = PMCK_DTYPE_I64, .ndim = 0, .layer = 2},
};
#define NT (sizeof(layout) / sizeof(layout[0]))
#define LAYERS 3

static void *param[NT];  /* the training state, in host memory */
static size_t nbytes[NT];

static void
fail(const char *what)
{
	fprintf(stderr, "train_single: %s: %s\n", what, pmck_errormsg());
	exit(1);
}

/*
 * Tensor i's values after `step`: a function of the step alone, so that a
 * resumed run can check bit for bit what it recovered.
 */
static void
fill(size_t i, uint64_t step, void *dst)
{
	if (layout[i].dtype == PMCK_DTYPE_I64) {
		*(int64_t *)dst = (int64_t)step;
		return;
	}
	for (size_t k = 0; k < nbytes[i] / sizeof(float); k++)
		((float *)dst)[k] = (float)((step * 7919 + i * 104729 + k) % 65536) / 65536.0f;
}

/* Stands in for the optimizer: updates the parameters of one layer. */
static void
update_layer(uint32_t layer, uint64_t step)
{
	for (size_t i = 0; i < NT; i++)
		if (layout[i].layer == layer)
			fill(i, step, param[i]);
}

/* 1 if every tensor holds its values after `step`. */
static int
state_is(uint64_t step)
{
	int same = 1;
	for (size_t i = 0; i < NT && same; i++) {
		void *want = malloc(nbytes[i]);
		if (!want)
			return 0;
		fill(i, step, want);
		same = !memcmp(want, param[i], nbytes[i]);
		free(want);
	}
	return same;
}

int
main(int argc, char **argv)
{
	struct pmck_local local;
	struct pmck_copyout *co;
	struct pmck_pipeline *pipe;
	struct pmck_tier_recovery tr;
	uint64_t first = 1;

	if (argc < 3) {
		fprintf(stderr, "usage: train_single RAMDISK_DIR SHARED_DIR [STEPS]\n");
		return 2;
	}
	uint64_t steps = argc > 3 ? strtoull(argv[3], NULL, 0) : 5;
	for (size_t i = 0; i < NT; i++) {
		nbytes[i] = pmck_dtype_size(layout[i].dtype);
		for (uint32_t d = 0; d < layout[i].ndim; d++)
			nbytes[i] *= layout[i].shape[d];
		if (!(param[i] = malloc(nbytes[i])))
			return 1;
	}

	/* The local tier: a pool file in RAMDISK_DIR (or PM, with .pm_path). */
	struct pmck_local_opts lo = {.ramdisk_dir = argv[1], .store_name = "train_single",
			.descs = layout, .ndescs = NT};
	if (pmck_local_open(&lo, &local))
		fail("pmck_local_open");
	printf("local store: %s%s\n", local.description, local.created ? " (new pool)" : "");

	/* The shared tier: every committed checkpoint copied to SHARED_DIR, newest 3 kept. */
	struct pmck_copyout_opts cpo = {.dir = argv[2], .keep = 3};
	if (pmck_copyout_new(local.store, &cpo, &co))
		fail("pmck_copyout_new");

	/* Restart: the newest verified checkpoint, local first, then shared. */
	int ret = pmck_recover_tiers(local.store, argv[2], 0, &tr);
	if (ret == 0) {
		for (size_t i = 0; i < NT; i++)
			if (pmck_store_read(local.store, i, param[i]))
				fail("pmck_store_read");
		if (!state_is(tr.step)) {
			fprintf(stderr, "train_single: step %llu: contents differ\n",
					(unsigned long long)tr.step);
			return 1;
		}
		printf("resumed at step %llu from the %s tier (%s); contents verified\n",
				(unsigned long long)tr.step,
				tr.tier == PMCK_TIER_LOCAL ? "local" : "shared", tr.reason);
		first = tr.step + 1;
	} else if (ret == PMCK_E_NO_CHECKPOINT) {
		printf("no checkpoint in either tier: starting at step 1\n");
		for (uint32_t j = 0; j < LAYERS; j++)
			update_layer(j, 0);
	} else {
		fail("pmck_recover_tiers");
	}

	/* Writer threads; each commit is handed to the copier by the pipeline itself. */
	struct pmck_pipeline_opts po = {.threads = 2, .numa_node = -1,
			.on_busy = PMCK_BUSY_WAIT, .copyout = co};
	if (pmck_pipeline_new(local.store, &po, &pipe))
		fail("pmck_pipeline_new");

	for (uint64_t step = first; step < first + steps; step++) {
		/* (forward and backward would run here) */
		if (pmck_pipeline_begin(pipe, step) < 0)
			fail("pmck_pipeline_begin");
		for (uint32_t j = 0; j < LAYERS; j++) {
			/* The previous checkpoint may still read layer j: wait for it. */
			if (pmck_pipeline_wait_layer(pipe, j))
				fail("pmck_pipeline_wait_layer");
			update_layer(j, step);
			if (pmck_pipeline_put_layer(pipe, j, (const void *const *)param) < 0)
				fail("pmck_pipeline_put_layer");
		}
		printf("step %llu: trained, checkpoint queued\n", (unsigned long long)step);
	}

	/* The last checkpoint: committed (and submitted), then copied out. */
	if (pmck_pipeline_wait(pipe))
		fail("pmck_pipeline_wait");
	if (pmck_copyout_wait(co))
		fail("pmck_copyout_wait");
	struct pmck_pipeline_stats ps;
	struct pmck_copyout_stats cs;
	pmck_pipeline_stats(pipe, &ps);
	pmck_copyout_stats(co, &cs);
	printf("committed %llu checkpoints (last step %llu), training waited %.3f ms\n",
			(unsigned long long)ps.committed, (unsigned long long)ps.last_step,
			ps.wait_ns / 1e6);
	printf("copied out %llu steps to %s (%llu bytes), deleted %llu older ones (keep 3)\n",
			(unsigned long long)cs.copied, argv[2], (unsigned long long)cs.bytes,
			(unsigned long long)cs.deleted);

	/* Pipeline before copier (the pipeline submits to it), then the store. */
	pmck_pipeline_delete(&pipe);
	pmck_copyout_delete(&co);
	printf("local pool: %s\n", local.path);
	pmck_local_close(&local);
	for (size_t i = 0; i < NT; i++)
		free(param[i]);
	return 0;
}
