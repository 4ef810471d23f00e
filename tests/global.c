/*
 * global.c -- the multi-rank agreement without MPI: ranks are threads of
 * this process, each with its own ramdisk store, joined by in-process
 * collectives.  A step that one rank failed to commit is refused at the
 * next begin and discarded, keeping the older global step; a global
 * pipeline starts the agreement on its writer and completes it at begin;
 * failed collectives make begin refuse until recovery; a skipping global
 * pipeline is refused.  (Kills and real MPI: tests/mpi_multirank.sh.)
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>

#include "pmckpt.h"
#include "tap.h"
#include "inproc_coll.h"

#define RANKS 3
#define BYTES (3u << 20)

/* ------------------------------------------------------------ ranks */

static struct world world = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, {{0}}, 0, RANKS,
		{{{0}}}};
static struct pmck_tensor_desc desc = {.name = "w", .dtype = PMCK_DTYPE_U8, .ndim = 1,
		.shape = {BYTES}};
static char dir[512];

struct rank {
	unsigned id;
	struct member m;
	struct pmck_local local;
	struct pmck_global *g;
	uint8_t *src;
	/* results, asserted by the main thread */
	int ret_new, ret_fail_begin, ret_retry_begin, ret_skip_pipe, ret_pipe, ret_broken[2];
	int ret_recover;
	int64_t agreed_after_sync, agreed_after_fail, agreed_after_pipe, slots_after_fail[2];
	int64_t recovered;
};

/* Rank 0 makes completed reductions fail (or not) while all ranks wait in barriers. */
static void
set_failing(struct rank *r, int fail)
{
	barrier(&r->m);
	if (r->id == 0) {
		pthread_mutex_lock(&world.lock);
		world.fail_tests = fail;
		pthread_mutex_unlock(&world.lock);
	}
	barrier(&r->m);
}

/* A synchronous global checkpoint of `step`; fail_commit aborts it instead of committing. */
static int
checkpoint(struct rank *r, uint64_t step, int fail_commit)
{
	struct pmck_ckpt *c;
	int ret = pmck_global_begin(r->g, step, &c);

	if (ret)
		return ret;
	memset(r->src, (int)(step * 7 + r->id), BYTES);
	if ((ret = pmck_ckpt_write_all(c, (const void *const *)&r->src, 1)))
		return ret;
	if (!fail_commit)
		return pmck_global_commit(r->g, c);
	pmck_ckpt_abort(c); /* as if the commit failed (a full device, say) */
	return pmck_global_note_commit(r->g, step, 0);
}

static void *
rank_main(void *arg)
{
	struct rank *r = arg;
	char name[32];
	struct pmck_collectives coll = {.ctx = &r->m, .rank = r->id, .size = RANKS,
			.allreduce_u64 = allreduce, .barrier = barrier,
			.iallreduce_u64_start = iar_start, .iallreduce_u64_test = iar_test};
	struct pmck_local_opts lo = {.ramdisk_dir = dir, .store_name = name, .descs = &desc,
			.ndescs = 1};

	snprintf(name, sizeof(name), "rank%u", r->id);
	r->m.w = &world;
	r->src = malloc(BYTES);
	if ((r->ret_new = pmck_local_open(&lo, &r->local)) ||
	    (r->ret_new = pmck_global_new(r->local.store, &coll, &r->g))) {
		diag("rank %u: %s (the other ranks will wait for it)", r->id, pmck_errormsg());
		exit(1);
	}

	/* Steps 1 and 2 on every rank: 2 is global once begin(3) completed its agreement. */
	checkpoint(r, 1, 0);
	checkpoint(r, 2, 0);
	pmck_global_wait(r->g, &r->agreed_after_sync);

	/* Rank 1 fails step 3: no rank may keep it, step 2 must survive step 4. */
	checkpoint(r, 3, r->id == 1);
	struct pmck_ckpt *c;
	r->ret_fail_begin = pmck_global_begin(r->g, 4, &c);
	r->agreed_after_fail = pmck_global_agreed(r->g);
	for (unsigned k = 0; k < 2; k++)
		r->slots_after_fail[k] = pmck_store_slot_step(r->local.store, k);
	r->ret_retry_begin = checkpoint(r, 4, 0);

	/* A global pipeline: skipping is refused; steps 5..9 agree in the background. */
	struct pmck_pipeline *p = NULL;
	struct pmck_pipeline_opts po = {.threads = 1, .numa_node = -1, .global = r->g,
			.on_busy = PMCK_BUSY_SKIP};
	r->ret_skip_pipe = pmck_pipeline_new(r->local.store, &po, &p);
	po.on_busy = PMCK_BUSY_WAIT;
	if (!(r->ret_pipe = pmck_pipeline_new(r->local.store, &po, &p))) {
		for (uint64_t step = 5; step <= 9 && !r->ret_pipe; step++) {
			const void *srcs[1] = {r->src};
			if ((r->ret_pipe = pmck_pipeline_begin(p, step)))
				break;
			/* begin waited for the previous checkpoint: src is free again */
			memset(r->src, (int)(step * 7 + r->id), BYTES);
			r->ret_pipe = pmck_pipeline_put_layer(p, 0, srcs);
		}
		if (!r->ret_pipe)
			r->ret_pipe = pmck_pipeline_wait(p);
		pmck_pipeline_delete(&p);
		pmck_global_wait(r->g, &r->agreed_after_pipe);
	}

	/*
	 * The collectives break: begin refuses (twice) until recovery.  Rank 0
	 * flips the switch between barriers (whose own results do not matter),
	 * so that no rank is still completing an earlier agreement.
	 */
	checkpoint(r, 10, 0);
	set_failing(r, 1);
	r->ret_broken[0] = pmck_global_begin(r->g, 11, &c);
	r->ret_broken[1] = pmck_global_begin(r->g, 11, &c);
	set_failing(r, 0);
	struct pmck_global_recovery gr;
	r->ret_recover = pmck_global_recover(r->g, NULL, &gr);
	r->recovered = r->ret_recover ? -1 : (int64_t)gr.step;

	pmck_global_delete(&r->g);
	pmck_local_close(&r->local);
	free(r->src);
	return NULL;
}

int
main(void)
{
	struct rank ranks[RANKS];
	pthread_t t[RANKS];

	snprintf(dir, sizeof(dir), "%s", scratch_path("global"));
	for (unsigned i = 0; i < RANKS; i++) {
		ranks[i] = (struct rank){.id = i};
		pthread_create(&t[i], NULL, rank_main, &ranks[i]);
	}
	for (unsigned i = 0; i < RANKS; i++)
		pthread_join(t[i], NULL);

	for (unsigned i = 0; i < RANKS; i++) {
		struct rank *r = &ranks[i];
		if (!ok(r->ret_new == 0, "rank %u: store and global group open", i)) {
			diag("%d", r->ret_new);
			continue;
		}
		is_int(r->agreed_after_sync, 2, "rank %u: step 2 is global after it was agreed", i);
		is_int(r->ret_fail_begin, -EIO, "rank %u: begin after a step rank 1 failed is refused", i);
		is_int(r->agreed_after_fail, 2, "rank %u: the global step stays 2", i);
		int64_t lo = r->slots_after_fail[0] < r->slots_after_fail[1] ? r->slots_after_fail[0]
				: r->slots_after_fail[1];
		int64_t hi = r->slots_after_fail[0] ^ r->slots_after_fail[1] ^ lo;
		ok(hi == 2 && lo < 2, "rank %u: step 3 discarded, step 2 kept (slots %lld, %lld)", i,
				(long long)r->slots_after_fail[0], (long long)r->slots_after_fail[1]);
		is_int(r->ret_retry_begin, 0, "rank %u: the next checkpoint (4) goes through", i);
		is_int(r->ret_skip_pipe, -EINVAL, "rank %u: a skipping global pipeline is refused", i);
		is_int(r->ret_pipe, 0, "rank %u: global pipeline, steps 5..9", i);
		is_int(r->agreed_after_pipe, 9, "rank %u: the pipeline's last step is global", i);
		is_int(r->ret_broken[0], -EPIPE, "rank %u: a failed collective fails begin", i);
		is_int(r->ret_broken[1], -EIO, "rank %u: and begin keeps refusing", i);
		is_int(r->ret_recover, 0, "rank %u: recovery clears it", i);
		is_int(r->recovered, 10, "rank %u: recovered step 10, the newest every rank has", i);
	}
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd))
		diag("cannot remove %s", dir);
	return done_testing();
}
