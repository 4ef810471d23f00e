/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * copyout_pipeline.c -- the asynchronous pipeline with copy-out
 * (pmck_pipeline_opts.copyout): every commit is submitted, and a begin
 * whose target slot the copier still reads waits (PMCK_BUSY_WAIT) or is
 * skipped (PMCK_BUSY_SKIP).
 *
 * The copier is held deterministically, without timing: the progress
 * callback (called on the copier thread at the end of each file, while the
 * slot is still pinned) blocks on a gate the test opens.
 *
 *   1. WAIT, steps 1..5: complete steps 5 and 4 in the directory, bit-exact.
 *   2. SKIP, copier held inside step 1's copy: begin(2) proceeds (other
 *      slot), begin(3) targets step 1's slot and returns PMCK_SKIPPED, its
 *      put_layer calls too; after the gate opens begin(4) proceeds.  Steps
 *      1, 2, 4 are copied, step 3 never exists; skipped + committed = begins.
 *   3. WAIT, copier held inside a copy: the begin that targets its slot
 *      returns only after that copy ended (its step is counted as copied).
 *   4. SKIP with a larger state copied to /var/tmp, no gate: whatever the
 *      timing, skipped + committed = begins, and the newest complete step is
 *      the last committed one, bit-exact.
 */
#include <errno.h>
#include <pthread.h>
#include <time.h>

#include "pmckpt.h"
#include "tap.h"
#include "copyout_util.h"

#define LAYERS 4
#define MAXT 16

static struct pmck_tensor_desc descs[MAXT];
static char names[MAXT][32];
static size_t nt;

/* Per layer: a matrix of `big` bytes (F32) and a 3-element bias. */
static void
make_layout(uint64_t big)
{
	nt = 0;
	for (unsigned l = 0; l < LAYERS; l++) {
		fmtp(names[nt], sizeof(names[nt]), "h.%u.w", l);
		descs[nt] = (struct pmck_tensor_desc){.name = names[nt], .dtype = PMCK_DTYPE_F32,
				.ndim = 2, .shape = {big / 4 / 256, 256}, .layer = l};
		nt++;
		fmtp(names[nt], sizeof(names[nt]), "h.%u.b", l);
		descs[nt] = (struct pmck_tensor_desc){.name = names[nt], .dtype = PMCK_DTYPE_F32,
				.ndim = 1, .shape = {3}, .layer = l};
		nt++;
	}
}

/* ------------------------------------------------------------- the gate */

static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static uint64_t gate_step; /* hold the copier at the end of this step's copy (0: never) */
static int gate_closed, gate_entered;

static void
on_progress(void *arg, uint64_t step, uint64_t done, uint64_t total)
{
	(void)arg;
	pthread_mutex_lock(&gate_lock);
	if (step == gate_step && done == total) {
		gate_entered = 1;
		pthread_cond_broadcast(&gate_cond);
		while (gate_closed)
			pthread_cond_wait(&gate_cond, &gate_lock);
	}
	pthread_mutex_unlock(&gate_lock);
}

static void
gate_close(uint64_t step)
{
	pthread_mutex_lock(&gate_lock);
	gate_step = step;
	gate_closed = 1;
	gate_entered = 0;
	pthread_mutex_unlock(&gate_lock);
}

/* Blocks until the copier is held at the gate. */
static void
gate_wait_entered(void)
{
	pthread_mutex_lock(&gate_lock);
	while (!gate_entered)
		pthread_cond_wait(&gate_cond, &gate_lock);
	pthread_mutex_unlock(&gate_lock);
}

static void
gate_open(void)
{
	pthread_mutex_lock(&gate_lock);
	gate_closed = 0;
	pthread_cond_broadcast(&gate_cond);
	pthread_mutex_unlock(&gate_lock);
}

static void *
open_later(void *arg)
{
	struct timespec d = {0, 50 * 1000 * 1000};
	(void)arg;
	nanosleep(&d, NULL);
	gate_open();
	return NULL;
}

/* ---------------------------------------------------------- checkpoints */

/* Puts every layer of `step` (after begin returned 0); returns the first put result. */
static int
put_all(struct pmck_pipeline *p, uint8_t **src, uint64_t step)
{
	int ret = 0;
	for (unsigned l = 0; l < LAYERS; l++) {
		int r = pmck_pipeline_wait_layer(p, l);
		for (size_t i = 0; i < nt; i++)
			if (descs[i].layer == l)
				gen_tensor(step, i, src[i], desc_bytes(&descs[i]));
		if (!r)
			r = pmck_pipeline_put_layer(p, l, (const void *const *)src);
		if (r && !ret)
			ret = r;
	}
	return ret;
}

static int
checkpoint(struct pmck_pipeline *p, uint8_t **src, uint64_t step)
{
	int ret = pmck_pipeline_begin(p, step);
	if (ret)
		return ret;
	if ((ret = put_all(p, src, step)))
		return ret;
	return pmck_pipeline_wait(p);
}

static int
complete_steps_are(const char *dir, const uint64_t *want, size_t n)
{
	struct steps l;
	char path[PATH_MAX], why[256];
	if (scan_steps(dir, &l) || l.n != n || count_complete(&l) != n)
		return 0;
	for (size_t i = 0; i < n; i++) {
		rank_file(path, sizeof(path), dir, want[i], 0);
		if (l.step[i] != want[i] || !file_holds(path, descs, nt, want[i], why, sizeof(why))) {
			diag("step %llu: %s", (unsigned long long)want[i], why);
			return 0;
		}
	}
	return 1;
}

struct env {
	struct pmck_local l;
	struct pmck_copyout *co;
	struct pmck_pipeline *p;
	uint8_t **src;
	char dir[PATH_MAX];
};

static int
setup(struct env *e, const char *rd, const char *store, const char *dir,
		enum pmck_busy_policy policy)
{
	struct pmck_local_opts lo = {.ramdisk_dir = rd, .store_name = store, .descs = descs,
			.ndescs = nt};
	memset(e, 0, sizeof(*e));
	fmtp(e->dir, sizeof(e->dir), "%s", dir);
	struct pmck_copyout_opts co = {.dir = dir, .keep = 2, .progress = on_progress};
	if (pmck_local_open(&lo, &e->l) || pmck_copyout_new(e->l.store, &co, &e->co)) {
		diag("setup: %s", pmck_errormsg());
		return -1;
	}
	struct pmck_pipeline_opts po = {.threads = 2, .numa_node = -1, .on_busy = policy,
			.copyout = e->co};
	if (pmck_pipeline_new(e->l.store, &po, &e->p)) {
		diag("pipeline: %s", pmck_errormsg());
		return -1;
	}
	e->src = make_srcs(descs, nt, 0);
	return 0;
}

static void
teardown(struct env *e)
{
	pmck_pipeline_delete(&e->p);
	pmck_copyout_delete(&e->co);
	pmck_local_close(&e->l);
	free_srcs(e->src, nt);
}

int
main(void)
{
	char *rd = make_tmpdir("/dev/shm", "pipe"), *sd = make_tmpdir("/var/tmp", "pipe");
	char dir[PATH_MAX];
	struct env e;
	struct pmck_pipeline_stats ps;
	struct pmck_copyout_stats cs;
	struct pmck_recovery rec;

	/* 1. WAIT: every checkpoint goes out. */
	make_layout(2u << 20);
	fmtp(dir, sizeof(dir), "%s/wait", sd);
	if (setup(&e, rd, "wait", dir, PMCK_BUSY_WAIT))
		skip_all("setup failed");
	int errs = 0;
	for (uint64_t s = 1; s <= 5; s++)
		errs += checkpoint(e.p, e.src, s) != 0;
	is_int(errs, 0, "WAIT: steps 1..5 committed through the pipeline");
	is_int(pmck_copyout_wait(e.co), 0, "all copies succeeded");
	pmck_pipeline_stats(e.p, &ps);
	pmck_copyout_stats(e.co, &cs);
	is_int(ps.committed, 5, "pipeline: 5 committed");
	is_int(cs.copied, 5, "copier: 5 copied");
	uint64_t w54[] = {5, 4};
	ok(complete_steps_are(dir, w54, 2), "complete steps 5 and 4, bit-exact");
	ok(pmck_store_recover(e.l.store, &rec) == 0 && rec.step == 5 &&
			store_holds(e.l.store, descs, nt, 5), "the local store recovers step 5, bit-exact");
	teardown(&e);

	/* 2. SKIP while the copier holds the target slot (held at the gate). */
	fmtp(dir, sizeof(dir), "%s/skip", sd);
	if (setup(&e, rd, "skip", dir, PMCK_BUSY_SKIP))
		skip_all("setup failed");
	gate_close(1);
	is_int(checkpoint(e.p, e.src, 1), 0, "SKIP: step 1 committed and submitted");
	gate_wait_entered();
	ok(1, "the copier is held inside step 1's copy (its slot pinned)");
	is_int(checkpoint(e.p, e.src, 2), 0, "step 2 goes to the other slot");
	is_int(pmck_pipeline_begin(e.p, 3), PMCK_SKIPPED,
			"begin(3) targets step 1's slot, still being copied: PMCK_SKIPPED");
	is_int(put_all(e.p, e.src, 3), PMCK_SKIPPED, "put_layer of the skipped step: PMCK_SKIPPED");
	is_int(pmck_pipeline_wait(e.p), 0, "wait: nothing in flight");
	gate_open();
	is_int(pmck_copyout_wait(e.co), 0, "copies of steps 1 and 2 succeeded");
	is_int(checkpoint(e.p, e.src, 4), 0, "after the copy, begin(4) proceeds");
	is_int(pmck_copyout_wait(e.co), 0, "copy of step 4 succeeded");
	pmck_pipeline_stats(e.p, &ps);
	pmck_copyout_stats(e.co, &cs);
	is_int(ps.skipped, 1, "pipeline: 1 skipped");
	is_int(ps.committed, 3, "pipeline: 3 committed");
	is_int(ps.skipped + ps.committed, 4, "skipped + committed = 4 begins");
	is_int(cs.copied, 3, "copier: 3 copied");
	uint64_t w42[] = {4, 2};
	ok(complete_steps_are(dir, w42, 2), "complete steps 4 and 2, bit-exact; no step 3");
	ok(pmck_store_recover(e.l.store, &rec) == 0 && rec.step == 4 &&
			store_holds(e.l.store, descs, nt, 4), "the local store recovers step 4");

	/* 3. WAIT while held: begin returns only after the copy of its target ended. */
	teardown(&e);
	fmtp(dir, sizeof(dir), "%s/wait2", sd);
	if (setup(&e, rd, "wait2", dir, PMCK_BUSY_WAIT))
		skip_all("setup failed");
	gate_close(11);
	is_int(checkpoint(e.p, e.src, 11), 0, "WAIT: step 11 committed, its copy held");
	gate_wait_entered();
	is_int(checkpoint(e.p, e.src, 12), 0, "step 12 goes to the other slot");
	pthread_t opener;
	pthread_create(&opener, NULL, open_later, NULL);
	int r13 = pmck_pipeline_begin(e.p, 13);
	pmck_copyout_stats(e.co, &cs);
	is_int(r13, 0, "begin(13), whose target step 11 is being copied, succeeds");
	ok(cs.copied >= 1 && cs.last_step >= 11, "... only after step 11's copy ended (copied %llu, "
			"last %llu)", (unsigned long long)cs.copied, (unsigned long long)cs.last_step);
	is_int(put_all(e.p, e.src, 13), 0, "step 13's layers put");
	is_int(pmck_pipeline_wait(e.p), 0, "step 13 committed");
	pthread_join(opener, NULL);
	is_int(pmck_copyout_wait(e.co), 0, "copies succeeded");
	uint64_t w1312[] = {13, 12};
	ok(complete_steps_are(dir, w1312, 2), "complete steps 13 and 12, bit-exact");
	teardown(&e);

	/* 4. SKIP with a larger state, no gate: consistency whatever the timing. */
	gate_close(0);
	gate_open();
	make_layout(8u << 20);
	fmtp(dir, sizeof(dir), "%s/big", sd);
	if (setup(&e, rd, "big", dir, PMCK_BUSY_SKIP))
		skip_all("setup failed");
	int begins = 0, bad = 0;
	for (uint64_t s = 1; s <= 12; s++) {
		begins++;
		int r = pmck_pipeline_begin(e.p, s);
		if (r == PMCK_SKIPPED) {
			bad += put_all(e.p, e.src, s) != PMCK_SKIPPED;
			continue;
		}
		bad += r != 0 || put_all(e.p, e.src, s) != 0;
		/* no pmck_pipeline_wait: the next begin may find this one, or its copy, busy */
	}
	bad += pmck_pipeline_wait(e.p) != 0;
	bad += pmck_copyout_wait(e.co) != 0;
	pmck_pipeline_stats(e.p, &ps);
	pmck_copyout_stats(e.co, &cs);
	diag("larger state: %llu of %d begins skipped", (unsigned long long)ps.skipped, begins);
	is_int(bad, 0, "SKIP, 4 x 8 MiB: every begin and put answered 0 or PMCK_SKIPPED as a pair");
	is_int(ps.skipped + ps.committed, begins, "skipped + committed = begins (%d)", begins);
	is_int(cs.copied, ps.committed, "every committed step was copied out");
	struct steps l;
	scan_steps(dir, &l);
	char path[PATH_MAX], why[256] = "";
	rank_file(path, sizeof(path), dir, ps.last_step, 0);
	if (!ok(l.n >= 1 && l.complete[0] && l.step[0] == ps.last_step &&
			file_holds(path, descs, nt, ps.last_step, why, sizeof(why)),
			"the newest complete step is the last committed one (%llu), bit-exact",
			(unsigned long long)ps.last_step))
		diag("%s", why);
	teardown(&e);

	rm_rf(rd);
	rm_rf(sd);
	free(rd);
	free(sd);
	return done_testing();
}
