/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * retention_runs.c -- retention and recovery across runs sharing one
 * copy-out directory (issue #22).
 *
 *   - An old run of layout A left steps 1337..1339; a fresh run of layout B
 *     starts at step 1 with keep = 3: after each copy its own newest (up to
 *     3) steps remain, and A's steps are untouched (not counted, not
 *     deleted).
 *   - Steps of layout A with another world size, and A's steps whose
 *     marker is in the old format (step and world_size only; the layout is
 *     read from the rank file), are left alone by B as well.
 *   - A same-layout restart from a lower step (a new run of A at step 1):
 *     its markers carry the next generation, its own steps survive and
 *     replace the older run's steps oldest first (keep = 3), while A's
 *     other-world-size step stays; its copy of step 3, where B's complete
 *     step 3 lies, is refused (-EEXIST) and B's step stays intact.
 *   - pmck_recover_tiers into an empty store of A picks the newest run's
 *     step (generation first), not the numerically largest step.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>

#include "pmckpt.h"
#include "tap.h"
#include "copyout_util.h"

#define bail_out(why) do { printf("Bail out! %s\n", why); exit(1); } while (0)

static int
is_str(const char *got, const char *want, const char *name)
{
	if (!ok(!strcmp(got, want), "%s", name))
		diag("got '%s', expected '%s'", got, want);
	return !strcmp(got, want);
}

static const struct pmck_tensor_desc layout_a[] = {
	{.name = "w", .dtype = PMCK_DTYPE_F32, .ndim = 2, .shape = {64, 100}, .layer = 0},
	{.name = "step", .dtype = PMCK_DTYPE_I64, .ndim = 0, .layer = 1},
};
static const struct pmck_tensor_desc layout_b[] = {
	{.name = "w", .dtype = PMCK_DTYPE_F32, .ndim = 2, .shape = {64, 101}, .layer = 0},
	{.name = "b", .dtype = PMCK_DTYPE_F32, .ndim = 1, .shape = {7}, .layer = 0},
};
#define NA (sizeof(layout_a) / sizeof(layout_a[0]))
#define NB (sizeof(layout_b) / sizeof(layout_b[0]))

struct run {
	struct pmck_local l;
	struct pmck_copyout *co;
	const struct pmck_tensor_desc *d;
	size_t n;
	uint8_t **src;
};

static int
run_open(struct run *r, const char *rd, const char *name, const struct pmck_tensor_desc *d,
		size_t n, const char *dir, unsigned keep)
{
	struct pmck_local_opts lo = {.ramdisk_dir = rd, .store_name = name, .descs = d, .ndescs = n};
	memset(r, 0, sizeof(*r));
	r->d = d;
	r->n = n;
	if (pmck_local_open(&lo, &r->l))
		return -1;
	r->src = make_srcs(d, n, 0);
	struct pmck_copyout_opts o = {.dir = dir, .keep = keep};
	if (pmck_copyout_new(r->l.store, &o, &r->co)) {
		diag("copyout: %s", pmck_errormsg());
		return -1;
	}
	return 0;
}

static void
run_close(struct run *r)
{
	pmck_copyout_delete(&r->co);
	free_srcs(r->src, r->n);
	pmck_local_close(&r->l);
}

static int
copy_step(struct run *r, uint64_t step)
{
	fill_srcs(r->src, r->d, r->n, step);
	int ret = commit_step(r->l.store, r->src, r->n, step);
	if (!ret)
		ret = pmck_copyout_submit(r->co);
	if (!ret)
		ret = pmck_copyout_wait(r->co);
	if (ret)
		diag("step %llu: %s", (unsigned long long)step, pmck_errormsg());
	return ret;
}

static int
complete(const char *dir, uint64_t step)
{
	char p[PATH_MAX];
	struct stat st;
	fmtp(p, sizeof(p), "%s/step-%012" PRIu64 "/COMPLETE", dir, step);
	return stat(p, &st) == 0;
}

/* The marker's text, or "" */
static void
marker(const char *dir, uint64_t step, char *buf, size_t len)
{
	char p[PATH_MAX];
	fmtp(p, sizeof(p), "%s/step-%012" PRIu64 "/COMPLETE", dir, step);
	buf[0] = 0;
	int fd = open(p, O_RDONLY);
	if (fd < 0)
		return;
	ssize_t n = read(fd, buf, len - 1);
	buf[n > 0 ? n : 0] = 0;
	close(fd);
}

static long long
marker_generation(const char *dir, uint64_t step)
{
	char text[256];
	long long g;
	marker(dir, step, text, sizeof(text));
	const char *at = strstr(text, "\"generation\":");
	return at && sscanf(at, "\"generation\": %lld", &g) == 1 ? g : -1;
}

/* Writes DIR/step-S/COMPLETE with `text` (a marker of another world size or an older pmckpt). */
static int
put_marker(const char *dir, uint64_t step, const char *text)
{
	char p[PATH_MAX];
	fmtp(p, sizeof(p), "%s/step-%012" PRIu64 "/COMPLETE", dir, step);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		return -1;
	int ok = write(fd, text, strlen(text)) == (ssize_t)strlen(text);
	close(fd);
	return ok ? 0 : -1;
}

/* Complete steps in dir, ascending, as "1 2 3" into buf. */
static const char *
listing(const char *dir, char *buf, size_t len)
{
	struct steps l;
	size_t at = 0;
	buf[0] = 0;
	if (scan_steps(dir, &l))
		return "(unreadable)";
	for (size_t i = l.n; i-- > 0;)
		if (l.complete[i] && at < len)
			at += (size_t)snprintf(buf + at, len - at, "%s%llu", at ? " " : "",
					(unsigned long long)l.step[i]);
	return buf;
}

int
main(void)
{
	char *rd = make_tmpdir("/dev/shm", "rr"), *sd = make_tmpdir("/var/tmp", "rr");
	char dir[PATH_MAX], seen[512];
	struct run a, b;
	struct pmck_copyout_stats st;

	fmtp(dir, sizeof(dir), "%s/shared", sd);

	/* The old run of layout A: steps 1337..1339 (keep 3). */
	if (run_open(&a, rd, "ra", layout_a, NA, dir, 3))
		skip_all(pmck_errormsg());
	int errors = 0;
	for (uint64_t s = 1337; s <= 1339; s++)
		errors += copy_step(&a, s) != 0;
	is_int(errors, 0, "old run (layout A): steps 1337..1339 copied out");
	is_int(marker_generation(dir, 1339), 1, "its markers carry generation 1 (an empty directory)");
	run_close(&a);

	/* Another world size's step of layout A (5000), and an old-format marker (1336). */
	char path[PATH_MAX], src[PATH_MAX];
	fmtp(src, sizeof(src), "%s/step-%012d/rank-00000.safetensors", dir, 1339);
	int planted = 0;
	for (unsigned k = 0; k < 2; k++) {
		uint64_t s = k ? 1336 : 5000;
		fmtp(path, sizeof(path), "%s/step-%012" PRIu64, dir, s);
		mkdir(path, 0755);
		fmtp(path, sizeof(path), "%s/step-%012" PRIu64 "/rank-00000.safetensors", dir, s);
		planted += link(src, path) == 0;
	}
	char text[256];
	uint64_t ha = 0;
	{
		struct pmck_local_opts lo = {.ramdisk_dir = rd, .store_name = "ra", .descs = layout_a,
				.ndescs = NA};
		struct pmck_local l;
		if (!pmck_local_open(&lo, &l)) {
			ha = pmck_store_layout_hash(l.store);
			pmck_local_close(&l);
		}
	}
	fmtp(text, sizeof(text), "{\"step\": 5000, \"world_size\": 2, \"layout_hash\": \"%016" PRIx64
			"\", \"generation\": 1}\n", ha);
	planted += put_marker(dir, 5000, text) == 0;
	planted += put_marker(dir, 1336, "{\"step\": 1336, \"world_size\": 1}\n") == 0;
	is_int(planted, 4, "planted step 5000 (layout A, world size 2) and 1336 (old-format marker)");

	/* A fresh run of layout B from step 1, keep 3. */
	if (run_open(&b, rd, "rb", layout_b, NB, dir, 3))
		bail_out(pmck_errormsg());
	int survive = 1, untouched = 1;
	for (uint64_t s = 1; s <= 5; s++) {
		errors += copy_step(&b, s) != 0;
		for (uint64_t k = s > 3 ? s - 2 : 1; k <= s; k++)
			survive &= complete(dir, k);
		for (uint64_t k = 1336; k <= 1339; k++)
			untouched &= complete(dir, k);
		untouched &= complete(dir, 5000);
		if (!survive || !untouched)
			diag("after step %llu: %s", (unsigned long long)s, listing(dir, seen, sizeof(seen)));
	}
	is_int(errors, 0, "new run (layout B): steps 1..5 copied out");
	ok(survive, "after each copy the new run's own newest steps (up to 3) are complete");
	ok(untouched, "layout A's steps 1336..1339 and 5000 are untouched throughout");
	ok(!complete(dir, 1) && !complete(dir, 2), "the new run's steps 1 and 2 went to its keep 3");
	is_str(listing(dir, seen, sizeof(seen)), "3 4 5 1336 1337 1338 1339 5000",
			"the directory holds B's 3..5 and all of A's steps");
	pmck_copyout_stats(b.co, &st);
	is_int(st.deleted, 2, "stats: 2 deleted (B's own steps 1 and 2 only)");
	is_int(marker_generation(dir, 5), 1, "B's markers carry generation 1 (its layout's first run)");
	marker(dir, 5, text, sizeof(text));
	char hb[32];
	fmtp(hb, sizeof(hb), "%016" PRIx64, pmck_store_layout_hash(b.l.store));
	ok(strstr(text, hb) && strstr(text, "\"world_size\": 1"),
			"the marker names the layout hash and the world size: %s", text);
	run_close(&b);

	/* A same-layout restart of A from a lower step. */
	if (run_open(&a, rd, "ra2", layout_a, NA, dir, 3))
		bail_out(pmck_errormsg());
	errors = 0;
	int own = 1, replaced = 1;
	for (uint64_t s = 1; s <= 2; s++) {
		errors += copy_step(&a, s) != 0;
		for (uint64_t k = 1; k <= s; k++)
			own &= complete(dir, k);
		/* keep 3: s own steps plus the newest 3 - s of the older run (1339, 1338, ...) */
		for (uint64_t k = 1336; k <= 1339; k++)
			replaced &= complete(dir, k) == (k >= 1337 + s);
		if (!own || !replaced)
			diag("after step %llu: %s", (unsigned long long)s, listing(dir, seen, sizeof(seen)));
	}
	is_int(errors, 0, "restart of layout A at step 1: steps 1 and 2 copied out");
	is_int(marker_generation(dir, 1), 2, "its markers carry generation 2 (1 + the largest of A)");
	ok(own, "its own steps are never deleted although numerically the smallest");
	ok(replaced, "each copy replaced the oldest steps of the older run (1336, with its "
			"old-format marker, among them)");
	/* Step 3 is B's: A's copy of its own step 3 must not overwrite it. */
	fill_srcs(a.src, layout_a, NA, 3);
	int cret = commit_step(a.l.store, a.src, NA, 3);
	if (!cret)
		cret = pmck_copyout_submit(a.co);
	if (!cret)
		cret = pmck_copyout_wait(a.co);
	is_int(cret, -EEXIST, "copying A's step 3 onto B's complete step 3 is refused (-EEXIST)");
	rank_file(path, sizeof(path), dir, 3, 0);
	char why[256] = "";
	ok(file_holds(path, layout_b, NB, 3, why, sizeof(why)) &&
			marker_generation(dir, 3) == 1, "B's step 3 is intact %s", why);
	/* B's 3..5 are another layout's; A's 5000 another world size's. */
	is_str(listing(dir, seen, sizeof(seen)), "1 2 3 4 5 1339 5000",
			"left: A's new 1 and 2 with the older run's newest 1339 (keep 3), B's 3..5, "
			"A's world-2 step 5000");
	run_close(&a);

	/* Recovery into an empty store of A: generation 2's newest step, not 5000 or 1339. */
	struct pmck_local_opts lo = {.ramdisk_dir = rd, .store_name = "ra3", .descs = layout_a,
			.ndescs = NA};
	struct pmck_local l;
	struct pmck_tier_recovery tr;
	if (pmck_local_open(&lo, &l))
		bail_out(pmck_errormsg());
	int rret = pmck_recover_tiers(l.store, dir, 0, &tr);
	is_int(rret, 0, "pmck_recover_tiers into an empty store of A: %s",
			rret ? pmck_errormsg() : tr.reason);
	is_int(tr.step, 2, "it loaded step 2, the newest of the newest run (not 5000: world size 2)");
	ok(tr.tier == PMCK_TIER_SHARED && store_holds(l.store, layout_a, NA, 2),
			"from the shared tier, bit-exact");
	pmck_local_close(&l);

	/* An empty store of a third layout finds nothing of its own: a fresh start. */
	static const struct pmck_tensor_desc layout_c[] = {
		{.name = "c", .dtype = PMCK_DTYPE_U8, .ndim = 1, .shape = {9}, .layer = 0},
	};
	struct pmck_local_opts lc = {.ramdisk_dir = rd, .store_name = "rc", .descs = layout_c,
			.ndescs = 1};
	if (pmck_local_open(&lc, &l))
		bail_out(pmck_errormsg());
	is_int(pmck_recover_tiers(l.store, dir, 0, &tr), PMCK_E_NO_CHECKPOINT,
			"another layout's empty store: PMCK_E_NO_CHECKPOINT, not another job's steps (%s)",
			pmck_errormsg());
	pmck_local_close(&l);

	rm_rf(rd);
	rm_rf(sd);
	free(rd);
	free(sd);
	return done_testing();
}
