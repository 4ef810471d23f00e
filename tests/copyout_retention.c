/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * copyout_retention.c -- retention of the newest K complete steps.
 *
 * keep = 2 and 10 checkpoints (steps 100..109, all with three digits: the
 * step is written as text into the header and the COMPLETE marker, so the
 * file sizes are equal only for equally long step numbers): after each one
 * exactly the newest two complete steps remain (names asserted), no
 * incomplete step, and from the second checkpoint on the directory's bytes
 * (sum of st_size) stay constant.  Counters and the progress callback agree.
 *
 * Then the rules for incomplete steps: while running, an incomplete step
 * older than the oldest kept one is removed, a newer one (another writer
 * may be filling it) is kept; a restarted copier removes every incomplete
 * step; entries that are not step directories are never touched.  keep = 0
 * means 2, keep = 1 keeps one.
 */
#include <errno.h>
#include <fcntl.h>
#include <time.h>

#include "pmckpt.h"
#include "tap.h"
#include "copyout_util.h"

static const struct pmck_tensor_desc layout[] = {
	{.name = "emb", .dtype = PMCK_DTYPE_F32, .ndim = 2, .shape = {600, 700}, .layer = 0},
	{.name = "l1.w", .dtype = PMCK_DTYPE_BF16, .ndim = 2, .shape = {300, 256}, .layer = 1},
	{.name = "l1.b", .dtype = PMCK_DTYPE_F32, .ndim = 1, .shape = {5}, .layer = 1},
	{.name = "step", .dtype = PMCK_DTYPE_I64, .ndim = 0, .layer = 2},
};
#define NT (sizeof(layout) / sizeof(layout[0]))

struct progress {
	unsigned calls, final, bad;
	uint64_t last_step;
};

static void
on_progress(void *arg, uint64_t step, uint64_t done, uint64_t total)
{
	struct progress *p = arg;
	p->calls++;
	if (done > total || step < p->last_step)
		p->bad++;
	if (done == total)
		p->final++;
	p->last_step = step;
}

/* The complete steps are exactly want[0..n-1] (newest first) and nothing is incomplete. */
static int
steps_are(const char *dir, const uint64_t *want, size_t n, int incomplete_ok)
{
	struct steps l;
	size_t k = 0;

	if (scan_steps(dir, &l))
		return 0;
	for (size_t i = 0; i < l.n; i++) {
		if (!l.complete[i]) {
			if (!incomplete_ok)
				return 0;
			continue;
		}
		if (k >= n || l.step[i] != want[k])
			return 0;
		k++;
	}
	return k == n;
}

static void
show(const char *dir)
{
	struct steps l;
	scan_steps(dir, &l);
	for (size_t i = 0; i < l.n; i++)
		diag("  step %llu%s", (unsigned long long)l.step[i], l.complete[i] ? "" : " (incomplete)");
}

static void
touch(const char *dir, const char *sub, const char *file)
{
	char p[PATH_MAX];
	fmtp(p, sizeof(p), "%s/%s", dir, sub);
	mkdir(p, 0755);
	if (file) {
		fmtp(p, sizeof(p), "%s/%s/%s", dir, sub, file);
		int fd = open(p, O_WRONLY | O_CREAT, 0644);
		if (fd >= 0) {
			if (write(fd, "partial", 7) != 7)
				diag("short write to %s", p);
			close(fd);
		}
	}
}

static int
exists(const char *dir, const char *sub)
{
	char p[PATH_MAX];
	struct stat st;
	fmtp(p, sizeof(p), "%s/%s", dir, sub);
	return stat(p, &st) == 0;
}

static int
copy_step(struct pmck_store *s, struct pmck_copyout *co, uint8_t **src, uint64_t step)
{
	fill_srcs(src, layout, NT, step);
	int ret = commit_step(s, src, NT, step);
	if (!ret)
		ret = pmck_copyout_submit(co);
	if (!ret)
		ret = pmck_copyout_wait(co);
	if (ret)
		diag("step %llu: %s", (unsigned long long)step, pmck_errormsg());
	return ret;
}

int
main(void)
{
	char *rd = make_tmpdir("/dev/shm", "ret"), *sd = make_tmpdir("/var/tmp", "ret");
	char dir[PATH_MAX];
	struct pmck_local l;
	struct pmck_copyout *co;
	struct pmck_copyout_stats st;
	struct progress prog = {0};

	fmtp(dir, sizeof(dir), "%s/shared", sd);
	struct pmck_local_opts lo = {.ramdisk_dir = rd, .store_name = "ret", .descs = layout,
			.ndescs = NT};
	if (pmck_local_open(&lo, &l))
		skip_all(pmck_errormsg());
	uint8_t **src = make_srcs(layout, NT, 0);
	struct pmck_copyout_opts o = {.dir = dir, .keep = 2, .progress = on_progress,
			.progress_arg = &prog};
	is_int(pmck_copyout_new(l.store, &o, &co), 0, "copier with keep 2 (creates %s)", dir);

	int names_ok = 1, errors = 0, constant = 1;
	uint64_t bytes[10] = {0};
	for (unsigned i = 0; i < 10; i++) {
		uint64_t step = 100 + i;
		errors += copy_step(l.store, co, src, step) != 0;
		uint64_t want[2] = {step, step - 1};
		if (!steps_are(dir, want, i == 0 ? 1 : 2, 0)) {
			names_ok = 0;
			diag("after step %llu:", (unsigned long long)step);
			show(dir);
		}
		bytes[i] = tree_bytes(dir);
		if (i >= 2 && bytes[i] != bytes[1]) {
			constant = 0;
			diag("after step %llu: %llu bytes, after the 2nd checkpoint %llu",
					(unsigned long long)step, (unsigned long long)bytes[i],
					(unsigned long long)bytes[1]);
		}
	}
	is_int(errors, 0, "10 checkpoints committed and copied out");
	ok(names_ok, "after each checkpoint exactly the newest 2 complete steps remain "
			"(step-000000000100 alone, then the last two), nothing incomplete");
	ok(bytes[1] == 2 * bytes[0], "the 2nd checkpoint doubles the directory's bytes (%llu -> %llu)",
			(unsigned long long)bytes[0], (unsigned long long)bytes[1]);
	ok(constant, "from the 2nd checkpoint on the directory's bytes stay at %llu",
			(unsigned long long)bytes[1]);
	uint64_t want_end[2] = {109, 108};
	ok(steps_are(dir, want_end, 2, 0) && exists(dir, "step-000000000109/rank-00000.safetensors") &&
			exists(dir, "step-000000000108/rank-00000.safetensors"),
			"steps 109 and 108 remain, each with its rank file");
	char why[256] = "", path[PATH_MAX];
	rank_file(path, sizeof(path), dir, 109, 0);
	if (!ok(file_holds(path, layout, NT, 109, why, sizeof(why)), "step 109's file is bit-exact"))
		diag("%s", why);

	pmck_copyout_stats(co, &st);
	is_int(st.copied, 10, "stats: 10 copied");
	is_int(st.deleted, 8, "stats: 8 deleted by retention");
	is_int(st.last_step, 109, "stats: last step 109");
	struct stat fst;
	stat(path, &fst);
	is_int(st.bytes, 10 * (uint64_t)fst.st_size, "stats: bytes = 10 rank files of %lld bytes",
			(long long)fst.st_size);
	is_int(prog.final, 10, "progress: one final call (done == total) per copy");
	is_int(prog.bad, 0, "progress: done never above total, steps in order");

	/* Incomplete steps while running: older ones go, newer ones (in progress elsewhere) stay. */
	touch(dir, "step-000000000001", "rank-00000.safetensors.tmp");
	touch(dir, "step-000000009999", "rank-00000.safetensors.tmp");
	touch(dir, "step-abc", NULL);
	touch(dir, "notes", "README");
	is_int(copy_step(l.store, co, src, 110), 0, "step 110 copied");
	uint64_t want110[2] = {110, 109};
	ok(steps_are(dir, want110, 2, 1), "complete steps 110 and 109");
	ok(!exists(dir, "step-000000000001"), "an incomplete step older than the kept ones is removed");
	ok(exists(dir, "step-000000009999/rank-00000.safetensors.tmp"),
			"an incomplete step newer than the kept ones is left alone while running");
	pmck_copyout_stats(co, &st);
	is_int(st.deleted, 9, "stats: 9 deleted (incomplete steps are not counted)");
	pmck_copyout_delete(&co);
	ok(co == NULL, "pmck_copyout_delete clears the pointer");

	/* A restart removes every incomplete step; other entries survive. */
	o.keep = 0;
	is_int(pmck_copyout_new(l.store, &o, &co), 0, "copier restarted with keep 0 (means 2)");
	ok(!exists(dir, "step-000000009999"), "the restart removed the incomplete newer step");
	ok(steps_are(dir, want110, 2, 0), "the complete steps 110 and 109 are untouched");
	ok(exists(dir, "step-abc") && exists(dir, "notes/README"),
			"entries that are not step directories are not touched");
	is_int(copy_step(l.store, co, src, 111), 0, "step 111 copied");
	uint64_t want111[2] = {111, 110};
	ok(steps_are(dir, want111, 2, 0), "keep 0 kept 2: steps 111 and 110");
	pmck_copyout_delete(&co);

	o.keep = 1;
	is_int(pmck_copyout_new(l.store, &o, &co), 0, "copier with keep 1");
	is_int(copy_step(l.store, co, src, 112), 0, "step 112 copied");
	uint64_t want112[1] = {112};
	ok(steps_are(dir, want112, 1, 0), "keep 1: only step 112 remains");
	pmck_copyout_delete(&co);

	/* Errors. */
	struct pmck_copyout_opts bad = {.dir = dir, .rank = 2, .world_size = 2};
	is_int(pmck_copyout_new(l.store, &bad, &co), -EINVAL, "rank 2 of 2 is refused: %s",
			pmck_errormsg());
	fmtp(path, sizeof(path), "%s/notes/README", dir);
	struct pmck_copyout_opts file_dir = {.dir = path};
	ok(pmck_copyout_new(l.store, &file_dir, &co) < 0, "a file as directory is refused: %s",
			pmck_errormsg());

	free_srcs(src, NT);
	pmck_local_close(&l);
	rm_rf(rd);
	rm_rf(sd);
	free(rd);
	free(sd);
	return done_testing();
}
