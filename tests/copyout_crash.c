/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * copyout_crash.c -- kill -9 during copy-out at random moments.
 *
 * Each trial forks a child that opens a ramdisk store (pmck_local_open,
 * ~4 MiB of tensors), starts a copier to a directory on /var/tmp (keep 2)
 * and loops forever: commit step, report it on a pipe, submit it for
 * copy-out.  The parent SIGKILLs it after a random delay, then checks the
 * directory as a reader would see it:
 *
 *   - every step that has COMPLETE holds a rank file that verifies
 *     (pmck_safetensors_verify), of that step, bit-exact (its checksums are
 *     those of the step's deterministic contents): an incomplete copy is
 *     never shown as complete;
 *   - no complete step is newer than the last commit the child reported
 *     plus the one it may have committed without reporting;
 *   - the local store recovers a step no older than the last reported commit.
 *
 * Then it restarts the copier itself: pmck_copyout_new must leave no *.tmp
 * file and no step directory without COMPLETE, and copy-out resumes: a new
 * commit + submit produces a new complete, bit-exact step, with retention
 * keeping the newest 2.
 *
 *   copyout_crash [--trials N] [--seed S]
 */
#include <errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#include "pmckpt.h"
#include "tap.h"
#include "ckpt_util.h"
#include "copyout_util.h"

#define KEEP 2

static const struct pmck_tensor_desc layout[] = {
	{.name = "emb", .dtype = PMCK_DTYPE_F32, .ndim = 2, .shape = {1024, 768}, .layer = 0},
	{.name = "l1.w", .dtype = PMCK_DTYPE_BF16, .ndim = 2, .shape = {512, 1024}, .layer = 1},
	{.name = "l1.b", .dtype = PMCK_DTYPE_F32, .ndim = 1, .shape = {3}, .layer = 1},
	{.name = "head", .dtype = PMCK_DTYPE_U8, .ndim = 1, .shape = {100001}, .layer = 2},
	{.name = "step", .dtype = PMCK_DTYPE_I64, .ndim = 0, .layer = 2},
};
#define NT (sizeof(layout) / sizeof(layout[0]))

static const char *ramdisk, *shared;
static uint64_t newest_commit; /* newest step committed so far, by a child or the parent */

static int
open_local(struct pmck_local *l)
{
	struct pmck_local_opts o = {.ramdisk_dir = ramdisk, .store_name = "crash",
			.descs = layout, .ndescs = NT};
	return pmck_local_open(&o, l);
}

static void
child(int fd)
{
	struct pmck_local l;
	struct pmck_recovery rec;
	struct pmck_copyout *co;
	struct pmck_copyout_opts o = {.dir = shared, .keep = KEEP};
	uint64_t step = 1;

	if (open_local(&l)) {
		fprintf(stderr, "child: %s\n", pmck_errormsg());
		_exit(2);
	}
	if (pmck_store_recover(l.store, &rec) == 0)
		step = rec.step + 1;
	if (pmck_copyout_new(l.store, &o, &co)) {
		fprintf(stderr, "child: %s\n", pmck_errormsg());
		_exit(2);
	}
	uint8_t **src = make_srcs(layout, NT, step);
	for (;; step++) {
		fill_srcs(src, layout, NT, step);
		if (commit_step(l.store, src, NT, step)) {
			fprintf(stderr, "child: commit: %s\n", pmck_errormsg());
			_exit(3);
		}
		if (write(fd, &step, sizeof(step)) != sizeof(step))
			_exit(4);
		if (pmck_copyout_submit(co)) {
			fprintf(stderr, "child: submit: %s\n", pmck_errormsg());
			_exit(3);
		}
	}
}

struct tally {
	int bad_complete, ahead, lost, leftovers, not_resumed, trials;
	int seen_tmp, seen_incomplete, seen_complete;
};

static void
trial(int t, struct tally *y)
{
	int fds[2];
	char why[512], path[PATH_MAX];

	if (pipe(fds))
		return;
	pid_t pid = fork();
	if (pid == 0) {
		close(fds[0]);
		child(fds[1]);
	}
	close(fds[1]);
	uint64_t last = kill_child(pid, fds[0], 1000 + rand() % 60000, 0);
	y->trials++;
	if (last > newest_commit)
		newest_commit = last;

	/* The directory as left by the kill. */
	struct steps l;
	scan_steps(shared, &l);
	unsigned tmp = tree_tmp_files(shared);
	y->seen_tmp += tmp > 0;
	y->seen_incomplete += l.n > count_complete(&l);
	for (size_t i = 0; i < l.n; i++) {
		if (!l.complete[i])
			continue;
		y->seen_complete++;
		rank_file(path, sizeof(path), shared, l.step[i], 0);
		if (!file_holds(path, layout, NT, l.step[i], why, sizeof(why))) {
			y->bad_complete++;
			diag("trial %d: step %llu is complete but %s", t, (unsigned long long)l.step[i], why);
		}
		/* The child may have committed one more step than it reported. */
		if (l.step[i] > newest_commit + 1) {
			y->ahead++;
			diag("trial %d: complete step %llu, newest commit reported %llu", t,
					(unsigned long long)l.step[i], (unsigned long long)newest_commit);
		}
	}

	/* Restart: local recovery, then a new copier cleans up and copy-out resumes. */
	struct pmck_local loc;
	struct pmck_recovery rec;
	struct pmck_copyout *co;
	struct pmck_copyout_opts o = {.dir = shared, .keep = KEEP};
	if (open_local(&loc)) {
		y->lost++;
		diag("trial %d: reopen: %s", t, pmck_errormsg());
		return;
	}
	int r = pmck_store_recover(loc.store, &rec);
	if (r == PMCK_E_NO_CHECKPOINT && newest_commit == 0)
		rec.step = 0; /* killed before its first commit: nothing to recover yet */
	else if (r || rec.step < last || !store_holds(loc.store, layout, NT, rec.step)) {
		y->lost++;
		diag("trial %d: local recovery after commit %llu: %s", t, (unsigned long long)last,
				pmck_errormsg());
		pmck_local_close(&loc);
		return;
	}
	size_t before = count_complete(&l);
	if (pmck_copyout_new(loc.store, &o, &co)) {
		y->leftovers++;
		diag("trial %d: pmck_copyout_new: %s", t, pmck_errormsg());
		pmck_local_close(&loc);
		return;
	}
	scan_steps(shared, &l);
	tmp = tree_tmp_files(shared);
	if (tmp || l.n != count_complete(&l) || count_complete(&l) > KEEP) {
		y->leftovers++;
		diag("trial %d: after restart: %u *.tmp files, %zu steps, %zu complete", t, tmp, l.n,
				count_complete(&l));
	}
	before = count_complete(&l);
	uint8_t **src = make_srcs(layout, NT, rec.step + 1);
	int ret = commit_step(loc.store, src, NT, rec.step + 1);
	newest_commit = rec.step + 1;
	if (!ret)
		ret = pmck_copyout_submit(co);
	if (!ret)
		ret = pmck_copyout_wait(co);
	scan_steps(shared, &l);
	rank_file(path, sizeof(path), shared, rec.step + 1, 0);
	size_t want = before + 1 < KEEP ? before + 1 : KEEP;
	if (ret || l.n != want || count_complete(&l) != want || l.step[0] != rec.step + 1 ||
	    !file_holds(path, layout, NT, rec.step + 1, why, sizeof(why))) {
		y->not_resumed++;
		diag("trial %d: resume with step %llu: ret %d (%s), %zu steps (%zu complete), newest "
				"%llu, want %zu: %s", t, (unsigned long long)rec.step + 1, ret,
				ret ? pmck_errormsg() : "", l.n, count_complete(&l),
				(unsigned long long)(l.n ? l.step[0] : 0), want, why);
	}
	free_srcs(src, NT);
	pmck_copyout_delete(&co);
	pmck_local_close(&loc);
}

int
main(int argc, char **argv)
{
	int trials = 30;
	unsigned seed = (unsigned)time(NULL);
	struct tally y = {0};

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--trials") && i + 1 < argc)
			trials = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
			seed = (unsigned)strtoul(argv[++i], NULL, 10);
	}
	srand(seed);
	diag("seed %u, %d trials", seed, trials);
	char *rd = make_tmpdir("/dev/shm", "crash"), *sd = make_tmpdir("/var/tmp", "crash");
	char sh[PATH_MAX];
	fmtp(sh, sizeof(sh), "%s/shared", sd);
	ramdisk = rd;
	shared = sh;

	for (int t = 0; t < trials; t++)
		trial(t, &y);

	diag("after the kills: %d trials left *.tmp files, %d left incomplete steps, %d complete "
			"steps checked", y.seen_tmp, y.seen_incomplete, y.seen_complete);
	is_int(y.trials, trials, "%d trials ran", trials);
	is_int(y.bad_complete, 0, "after every kill, each step with COMPLETE holds a verified, "
			"bit-exact rank file of that step");
	is_int(y.ahead, 0, "no complete step is newer than what the child committed");
	is_int(y.lost, 0, "the local store recovers a step no older than the last reported commit");
	is_int(y.leftovers, 0, "a restarted copier leaves no *.tmp file and no incomplete step, and "
			"at most %d complete ones", KEEP);
	is_int(y.not_resumed, 0, "after each restart a new submit produces a new complete, bit-exact "
			"step, and retention keeps the newest %d", KEEP);
	ok(y.seen_complete > 0, "complete steps were seen after kills (%d)", y.seen_complete);

	rm_rf(rd);
	rm_rf(sd);
	free(rd);
	free(sd);
	return done_testing();
}
