/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * global_world.c -- world size recorded and checked (issue #24), and the
 * recovery codes, with ranks as threads (tests/inproc_coll.h).
 *
 *   - 4 ranks checkpoint steps 1..3 with copy-out: every slot records its
 *     rank and the world size 4, every COMPLETE the world size 4.
 *   - 2 ranks on the same stores, 2 ranks on empty stores (only the shared
 *     steps), and 5 ranks (the 4 stores plus an empty one): recovery fails
 *     on every rank with PMCK_E_WORLD_SIZE naming both sizes, and changes
 *     nothing (local slots and the shared directory as before).
 *   - 4 ranks again: step 3, from the local slots.
 *   - nothing anywhere: PMCK_E_NO_CHECKPOINT on every rank; shared steps
 *     of this world size that one rank cannot produce (its files removed,
 *     no local store): PMCK_E_NONE_USABLE on every rank.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/stat.h>

#include "pmckpt.h"
#include "tap.h"
#include "inproc_coll.h"
#include "copyout_util.h"

#define MAXR 5
#define BYTES (1u << 16)

static struct pmck_tensor_desc desc = {.name = "w", .dtype = PMCK_DTYPE_U8, .ndim = 1,
		.shape = {BYTES}};
static char ramdisk[PATH_MAX], shared[PATH_MAX + 16];

enum phase { WRITE, RECOVER };

struct rank {
	unsigned id;
	struct member m;
	enum phase phase;
	const char *prefix;  /* store name prefix */
	const char *dir;     /* shared directory for recovery (may be NULL) */
	/* results */
	int ret_open, ret, ret_copy;
	int64_t slots[2];
	unsigned slot_rank[2], slot_world[2];
	int slot_world_ret[2];
	uint64_t step;
	char msg[512];
};

static void *
rank_main(void *arg)
{
	struct rank *r = arg;
	char name[32];
	struct pmck_local l;
	struct pmck_global *g = NULL;
	struct pmck_collectives coll = inproc_collectives(&r->m, r->id);
	struct pmck_local_opts lo = {.ramdisk_dir = ramdisk, .store_name = name, .descs = &desc,
			.ndescs = 1};

	snprintf(name, sizeof(name), "%s%u", r->prefix, r->id);
	if ((r->ret_open = pmck_local_open(&lo, &l)) ||
	    (r->ret_open = pmck_global_new(l.store, &coll, &g))) {
		snprintf(r->msg, sizeof(r->msg), "%s", pmck_errormsg());
		exit(1); /* the others would wait for this rank */
	}
	if (r->phase == WRITE) {
		inproc_save_steps(l.store, g, shared, r->id, coll.size, 3, BYTES, &r->ret, &r->ret_copy);
	} else {
		struct pmck_global_recovery gr;
		r->ret = pmck_global_recover(g, r->dir, &gr);
		r->step = gr.step;
		snprintf(r->msg, sizeof(r->msg), "%s", r->ret ? pmck_errormsg() : gr.reason);
	}
	for (unsigned k = 0; k < 2; k++) {
		r->slots[k] = pmck_store_slot_step(l.store, k);
		r->slot_world_ret[k] = pmck_store_slot_world(l.store, k, &r->slot_rank[k],
				&r->slot_world[k]);
	}
	pmck_global_delete(&g);
	pmck_local_close(&l);
	return NULL;
}

/* Runs `n` ranks (threads) of one phase to the end. */
static void
run_world(struct rank *ranks, unsigned n, enum phase phase, const char *prefix, const char *dir)
{
	static struct world w;
	pthread_t t[MAXR];

	memset(&w, 0, sizeof(w));
	pthread_mutex_init(&w.lock, NULL);
	pthread_cond_init(&w.cond, NULL);
	w.size = n;
	for (unsigned i = 0; i < n; i++) {
		ranks[i] = (struct rank){.id = i, .phase = phase, .prefix = prefix, .dir = dir};
		ranks[i].m.w = &w;
		pthread_create(&t[i], NULL, rank_main, &ranks[i]);
	}
	for (unsigned i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	pthread_mutex_destroy(&w.lock);
	pthread_cond_destroy(&w.cond);
}

/* The shared directory as one string of names and sizes: to see that nothing changed. */
static void
snapshot(const char *dir, char *buf, size_t len)
{
	struct steps l;
	size_t at = 0;
	buf[0] = 0;
	if (scan_steps(dir, &l))
		return;
	for (size_t i = 0; i < l.n && at < len; i++)
		at += (size_t)snprintf(buf + at, len - at, "%llu%s/%llu ",
				(unsigned long long)l.step[i], l.complete[i] ? "c" : "i",
				(unsigned long long)tree_bytes(dir));
}

/* Every rank of the phase failed with code `want`, its message containing `text`. */
static void
all_fail(const struct rank *ranks, unsigned n, int want, const char *text, const char *what)
{
	int good = 1;
	for (unsigned i = 0; i < n; i++) {
		if (ranks[i].ret != want || (text && !strstr(ranks[i].msg, text))) {
			good = 0;
			diag("rank %u: %d: %s", i, ranks[i].ret, ranks[i].msg);
		}
	}
	ok(good, "%s: every rank fails with %d (%s)", what, want, ranks[0].msg);
}

int
main(void)
{
	struct rank ranks[MAXR];
	char before[4096], after[4096], path[PATH_MAX];
	int64_t slots[4][2];

	snprintf(ramdisk, sizeof(ramdisk), "%s", scratch_path("gworld"));
	snprintf(shared, sizeof(shared), "%s/shared", ramdisk);
	mkdir(ramdisk, 0755);

	/* 4 ranks write steps 1..3 and copy them out. */
	run_world(ranks, 4, WRITE, "wr", NULL);
	int good = 1, recorded = 1;
	for (unsigned i = 0; i < 4; i++) {
		good &= !ranks[i].ret && !ranks[i].ret_copy;
		for (unsigned k = 0; k < 2; k++) {
			slots[i][k] = ranks[i].slots[k];
			recorded &= ranks[i].slot_world_ret[k] == 0 && ranks[i].slot_world[k] == 4 &&
				    ranks[i].slot_rank[k] == i;
		}
	}
	if (!ok(good, "4 ranks: steps 1..3 committed globally and copied out"))
		return done_testing();
	ok(recorded, "every slot of every rank records its rank and world size 4");
	ok((slots[0][0] == 3 || slots[0][1] == 3), "rank 0 holds step 3");
	char text[256] = "";
	fmtp(path, sizeof(path), "%s/step-%012d/COMPLETE", shared, 3);
	FILE *f = fopen(path, "r");
	if (f) {
		if (!fgets(text, sizeof(text), f))
			text[0] = 0;
		fclose(f);
	}
	ok(strstr(text, "\"world_size\": 4") != NULL, "step 3's COMPLETE records world size 4: %s",
			text);
	snapshot(shared, before, sizeof(before));

	/* 4 -> 2 with the stores: refused everywhere, nothing changed. */
	run_world(ranks, 2, RECOVER, "wr", shared);
	all_fail(ranks, 2, PMCK_E_WORLD_SIZE, "written by 4 ranks, this job has 2",
			"4 -> 2 (local slots and shared steps)");
	int same = 1;
	for (unsigned i = 0; i < 2; i++)
		for (unsigned k = 0; k < 2; k++)
			same &= ranks[i].slots[k] == slots[i][k] && ranks[i].slot_world[k] == 4;
	ok(same, "4 -> 2: the local slots are unchanged (still world size 4)");
	snapshot(shared, after, sizeof(after));
	ok(!strcmp(before, after), "4 -> 2: the shared directory is unchanged");

	/* 4 -> 2 with empty stores: the shared steps alone decide. */
	run_world(ranks, 2, RECOVER, "fresh", shared);
	all_fail(ranks, 2, PMCK_E_WORLD_SIZE, "written by 4 ranks, this job has 2",
			"4 -> 2 (shared steps only)");
	same = ranks[0].slots[0] < 0 && ranks[0].slots[1] < 0;
	ok(same, "4 -> 2: nothing was imported into the empty stores");
	snapshot(shared, after, sizeof(after));
	ok(!strcmp(before, after), "4 -> 2: the shared directory is unchanged");

	/* 4 -> 5: rank 4 has an empty store; the others' newest is of 4 ranks. */
	run_world(ranks, 5, RECOVER, "wr", shared);
	all_fail(ranks, 5, PMCK_E_WORLD_SIZE, "written by 4 ranks, this job has 5", "4 -> 5");
	same = 1;
	for (unsigned i = 0; i < 4; i++)
		for (unsigned k = 0; k < 2; k++)
			same &= ranks[i].slots[k] == slots[i][k];
	ok(same, "4 -> 5: the local slots are unchanged");
	snapshot(shared, after, sizeof(after));
	ok(!strcmp(before, after), "4 -> 5: the shared directory is unchanged");

	/* 4 ranks again: step 3 from the local slots. */
	run_world(ranks, 4, RECOVER, "wr", shared);
	good = 1;
	for (unsigned i = 0; i < 4; i++) {
		good &= ranks[i].ret == 0 && ranks[i].step == 3;
		if (ranks[i].ret)
			diag("rank %u: %s", i, ranks[i].msg);
	}
	ok(good, "4 ranks again: every rank recovers step 3");

	/* Nothing saved anywhere: PMCK_E_NO_CHECKPOINT (a fresh start). */
	run_world(ranks, 3, RECOVER, "none", NULL);
	all_fail(ranks, 3, PMCK_E_NO_CHECKPOINT, "nothing was saved", "3 empty stores, no directory");

	/* Steps exist but rank 2 can produce none: PMCK_E_NONE_USABLE. */
	int removed = 0;
	for (int s = 1; s <= 3; s++) {
		rank_file(path, sizeof(path), shared, (uint64_t)s, 2);
		removed += unlink(path) == 0;
	}
	is_int(removed, 3, "rank 2's shared files removed");
	run_world(ranks, 4, RECOVER, "lost", shared);
	all_fail(ranks, 4, PMCK_E_NONE_USABLE, "checkpoints exist",
			"4 empty stores, rank 2's files gone");

	rm_rf(ramdisk);
	return done_testing();
}
