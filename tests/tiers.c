/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tiers.c -- two-tier recovery (pmck_recover_tiers): the local ramdisk
 * store first, the shared copy-out directory when the local store has
 * nothing that verifies.
 *
 *   - ramdisk intact: tier LOCAL, newest step, bit-exact;
 *   - newest local slot damaged: LOCAL, the older step, reason names the
 *     rejected step and tensor;
 *   - ramdisk file deleted: tier SHARED with the newest complete step,
 *     bit-exact, path of the file loaded, and a reason that gives the local
 *     failure; afterwards the checkpoint is local again;
 *   - newest step incomplete and the next one corrupt: SHARED falls back to
 *     the newest complete step whose file verifies;
 *   - nothing anywhere: PMCK_E_NO_CHECKPOINT with both tiers' reasons;
 *     steps of this layout but no file of the rank: PMCK_E_NONE_USABLE;
 *   - both local slots damaged while the shared directory holds only older
 *     steps: SHARED with the newest complete step.
 * Each rejected candidate is listed by pmck_store_rejections with its
 * true reason (issue #24): a damaged slot names its tensor; the corrupt
 * step 3 of a COMPLETE step is moved to DIR/quarantine with a NOTE, not
 * deleted.
 */
#include <errno.h>
#include <fcntl.h>

#include "pmckpt.h"
#include "tap.h"
#include "copyout_util.h"

static const struct pmck_tensor_desc layout[] = {
	{.name = "emb", .dtype = PMCK_DTYPE_F32, .ndim = 2, .shape = {512, 1000}, .layer = 0},
	{.name = "l1.w", .dtype = PMCK_DTYPE_BF16, .ndim = 2, .shape = {256, 256}, .layer = 1},
	{.name = "l1.b", .dtype = PMCK_DTYPE_F32, .ndim = 1, .shape = {7}, .layer = 1},
	{.name = "step", .dtype = PMCK_DTYPE_I64, .ndim = 0, .layer = 2},
};
#define NT (sizeof(layout) / sizeof(layout[0]))
#define STORE "tiers"

static char *rd, *sd;
static char pool_path[PATH_MAX];

static int
open_local(struct pmck_local *l)
{
	struct pmck_local_opts o = {.ramdisk_dir = rd, .store_name = STORE, .descs = layout,
			.ndescs = NT};
	int ret = pmck_local_open(&o, l);
	if (ret)
		diag("pmck_local_open: %s", pmck_errormsg());
	return ret;
}

/* Commits steps from..to, copying each out to dir (NULL: no copy-out). */
static int
make_steps(struct pmck_local *l, const char *dir, unsigned keep, uint64_t from, uint64_t to)
{
	struct pmck_copyout *co = NULL;
	struct pmck_copyout_opts o = {.dir = dir, .keep = keep};
	uint8_t **src = make_srcs(layout, NT, from);
	int ret = dir ? pmck_copyout_new(l->store, &o, &co) : 0;

	for (uint64_t s = from; s <= to && !ret; s++) {
		fill_srcs(src, layout, NT, s);
		ret = commit_step(l->store, src, NT, s);
		if (!ret && co)
			ret = pmck_copyout_submit(co);
		if (!ret && co)
			ret = pmck_copyout_wait(co);
	}
	if (ret)
		diag("make_steps: %s", pmck_errormsg());
	pmck_copyout_delete(&co);
	free_srcs(src, NT);
	return ret;
}

/* Flips one byte of slot k's copy of tensor 0 in the pool. */
static void
damage_slot(struct pmck_local *l, unsigned k)
{
	char name[64];
	void *data;
	fmtp(name, sizeof(name), STORE ".data%u", k);
	if (pma_lookup(l->pool, name, &data, NULL) == 0)
		((volatile uint8_t *)data)[1000] ^= 0x40;
	else
		diag("no allocation %s", name);
}

/* Flips one byte near the end of a file (in the data of its last tensor). */
static void
damage_file(const char *path)
{
	int fd = open(path, O_RDWR);
	struct stat st;
	uint8_t b;
	if (fd < 0 || fstat(fd, &st) || pread(fd, &b, 1, st.st_size - 100) != 1) {
		diag("cannot damage %s", path);
		if (fd >= 0)
			close(fd);
		return;
	}
	b ^= 0x01;
	if (pwrite(fd, &b, 1, st.st_size - 100) != 1)
		diag("cannot damage %s", path);
	close(fd);
}

/* Is there a rejection of (tier, step) whose reason contains text?  Lists them if not. */
static const struct pmck_rejection *
rejected(const struct pmck_store *s, enum pmck_tier tier, uint64_t step, const char *text)
{
	size_t n;
	const struct pmck_rejection *r = pmck_store_rejections(s, &n);
	for (size_t i = 0; i < n; i++)
		if (r[i].tier == tier && r[i].step == step && strstr(r[i].reason, text))
			return &r[i];
	for (size_t i = 0; i < n; i++)
		diag("rejection %zu: rank %u tier %d step %llu: %s", i, r[i].rank, (int)r[i].tier,
				(unsigned long long)r[i].step, r[i].reason);
	return NULL;
}

static void
lose_ramdisk(struct pmck_local *l)
{
	pmck_local_close(l);
	ok(unlink(pool_path) == 0, "ramdisk file %s deleted", pool_path);
}

int
main(void)
{
	struct pmck_local l;
	struct pmck_tier_recovery tr;
	struct pmck_recovery rec;
	char dir[PATH_MAX], path[PATH_MAX];

	rd = make_tmpdir("/dev/shm", "tiers");
	sd = make_tmpdir("/var/tmp", "tiers");
	fmtp(dir, sizeof(dir), "%s/shared", sd);
	fmtp(pool_path, sizeof(pool_path), "%s/pmckpt-" STORE ".pool", rd);

	if (open_local(&l))
		skip_all("no local store");
	is_int(make_steps(&l, dir, 3, 1, 4), 0, "steps 1..4 committed and copied out (keep 3)");
	pmck_local_close(&l);

	/* 1. The ramdisk is intact. */
	open_local(&l);
	is_int(pmck_recover_tiers(l.store, dir, 0, &tr), 0, "intact ramdisk: recovered");
	is_int(tr.tier, PMCK_TIER_LOCAL, "tier LOCAL");
	is_int(tr.step, 4, "step 4");
	ok(strstr(tr.reason, "local") != NULL, "reason: \"%s\"", tr.reason);
	ok(tr.path[0] == 0, "no file loaded");
	ok(store_holds(l.store, layout, NT, 4), "bit-exact contents of step 4");

	/* 2. The newest local slot is damaged: the older local step, still LOCAL. */
	pmck_store_recover(l.store, &rec);
	damage_slot(&l, rec.slot);
	is_int(pmck_recover_tiers(l.store, dir, 0, &tr), 0, "newest local slot damaged: recovered");
	is_int(tr.tier, PMCK_TIER_LOCAL, "tier LOCAL");
	is_int(tr.step, 3, "step 3, the older local slot");
	ok(strstr(tr.reason, "rejected") && strstr(tr.reason, "'emb'") && strstr(tr.reason, "4"),
			"reason names the rejected step and tensor: \"%s\"", tr.reason);
	ok(store_holds(l.store, layout, NT, 3), "bit-exact contents of step 3");
	const struct pmck_rejection *e = rejected(l.store, PMCK_TIER_LOCAL, 4,
			"failed its checksum (tensor 'emb')");
	ok(e && e->rank == 0 && !e->quarantined, "rejection listed: \"%s\"", e ? e->reason : "");

	/* 3. The ramdisk file is gone: the newest complete step from the shared directory. */
	lose_ramdisk(&l);
	open_local(&l);
	is_int(l.backend, PMCK_BACKEND_RAMDISK, "a fresh ramdisk store: %s", l.description);
	is_int(pmck_recover_tiers(l.store, dir, 0, &tr), 0, "ramdisk lost: recovered");
	is_int(tr.tier, PMCK_TIER_SHARED, "tier SHARED");
	is_int(tr.step, 4, "step 4, the newest complete step");
	rank_file(path, sizeof(path), dir, 4, 0);
	ok(!strcmp(tr.path, path), "loaded %s", tr.path);
	ok(strstr(tr.reason, "no verified local checkpoint") &&
			strstr(tr.reason, "holds no complete checkpoint"),
			"reason gives the local failure: \"%s\"", tr.reason);
	ok(store_holds(l.store, layout, NT, 4), "bit-exact contents of step 4");
	is_int(pmck_store_recover(l.store, &rec), 0, "the imported step is a local checkpoint now");
	is_int(rec.step, 4, "... of step 4");
	is_int(pmck_recover_tiers(l.store, dir, 0, &tr), 0, "recover_tiers again");
	is_int(tr.tier, PMCK_TIER_LOCAL, "... finds it locally");

	/* 4. Newest step incomplete, the next one corrupt: fall back to step 2. */
	lose_ramdisk(&l);
	char marker[PATH_MAX];
	fmtp(marker, sizeof(marker), "%s/step-000000000004/COMPLETE", dir);
	ok(unlink(marker) == 0, "step 4 made incomplete (its rank file is still valid)");
	rank_file(path, sizeof(path), dir, 3, 0);
	damage_file(path);
	ok(pmck_safetensors_verify(path, NULL) == PMCK_E_CORRUPT, "step 3's file damaged: %s",
			pmck_errormsg());
	open_local(&l);
	is_int(pmck_recover_tiers(l.store, dir, 0, &tr), 0, "recovered");
	is_int(tr.tier, PMCK_TIER_SHARED, "tier SHARED");
	is_int(tr.step, 2, "step 2: the incomplete step 4 and the corrupt step 3 are passed over");
	ok(store_holds(l.store, layout, NT, 2), "bit-exact contents of step 2");
	e = rejected(l.store, PMCK_TIER_SHARED, 3, "fails its checksum");
	ok(e && e->quarantined && strstr(e->reason, "/quarantine/step-000000000003-"),
			"corrupt step 3 rejected and quarantined: \"%s\"", e ? e->reason : "");
	fmtp(path, sizeof(path), "%s/step-000000000003", dir);
	struct stat st;
	ok(stat(path, &st) && errno == ENOENT, "step 3 is gone from the shared directory");
	if (e && strstr(e->reason, "moved to ")) {
		fmtp(path, sizeof(path), "%s/NOTE", strstr(e->reason, "moved to ") + 9);
		ok(stat(path, &st) == 0 && st.st_size > 0, "%s written", path);
		ok((st.st_mode & 07777) == 0600, "NOTE is 0600 (%04o)", st.st_mode & 07777);
		fmtp(path, sizeof(path), "%s/quarantine", dir);
		ok(lstat(path, &st) == 0 && (st.st_mode & 07777) == 0700,
				"DIR/quarantine is made 0700 (%04o)", st.st_mode & 07777);
	} else {
		ok(0, "no quarantine path");
	}
	is_int(pmck_recover_tiers(l.store, dir, 0, &tr), 0, "recovered again (locally)");
	struct pmck_copyout_listing *ls = NULL;
	ok(pmck_copyout_list(dir, &ls) == 0 && ls->nquarantined == 1 &&
			ls->quarantined[0].step == 3, "pmck_copyout_list reports it");
	pmck_copyout_listing_free(&ls);

	/* 5. Nothing usable in either tier. */
	lose_ramdisk(&l);
	char empty[PATH_MAX];
	fmtp(empty, sizeof(empty), "%s/empty", sd);
	mkdir(empty, 0755);
	open_local(&l);
	is_int(pmck_recover_tiers(l.store, empty, 0, &tr), PMCK_E_NO_CHECKPOINT,
			"empty shared directory: PMCK_E_NO_CHECKPOINT");
	const char *m = pmck_errormsg();
	ok(strstr(m, "holds no complete checkpoint") && strstr(m, empty),
			"message gives both tiers: \"%s\"", m);
	is_int(pmck_recover_tiers(l.store, NULL, 0, &tr), PMCK_E_NO_CHECKPOINT,
			"no shared directory: PMCK_E_NO_CHECKPOINT (%s)", pmck_errormsg());
	fmtp(path, sizeof(path), "%s/missing", sd);
	is_int(pmck_recover_tiers(l.store, path, 0, &tr), PMCK_E_NO_CHECKPOINT,
			"missing shared directory: PMCK_E_NO_CHECKPOINT (%s)", pmck_errormsg());
	is_int(pmck_recover_tiers(l.store, dir, 1, &tr), PMCK_E_NONE_USABLE,
			"steps of this layout, but no files of rank 1: PMCK_E_NONE_USABLE (%s)", pmck_errormsg());

	/* 6. Both local slots damaged (steps 3, 4), the shared directory holds steps 1, 2. */
	lose_ramdisk(&l);
	char older[PATH_MAX];
	fmtp(older, sizeof(older), "%s/older", sd);
	open_local(&l);
	is_int(make_steps(&l, older, 2, 1, 2), 0, "steps 1, 2 committed and copied out");
	is_int(make_steps(&l, NULL, 2, 3, 4), 0, "steps 3, 4 committed, not copied out");
	damage_slot(&l, 0);
	damage_slot(&l, 1);
	pmck_local_close(&l);
	open_local(&l);
	int ret = pmck_recover_tiers(l.store, older, 0, &tr);
	if (ret)
		diag("pmck_recover_tiers: %s", pmck_errormsg());
	/* Both damaged slots are marked bad, so the import may begin an older step. */
	ok(ret == 0 && tr.tier == PMCK_TIER_SHARED && tr.step == 2, "both local slots damaged, shared steps older: SHARED step 2 (got %d, tier %d, "
			"step %llu)", ret, (int)tr.tier, (unsigned long long)tr.step);
	ok(rejected(l.store, PMCK_TIER_LOCAL, 4, "failed its checksum (tensor 'emb')") &&
			rejected(l.store, PMCK_TIER_LOCAL, 3, "failed its checksum (tensor 'emb')"),
			"both damaged slots listed with the true reason");
	ok(strstr(tr.reason, "fails its checksum") || strstr(tr.reason, "no checkpoint verifies"),
			"reason: \"%s\"", tr.reason);

	pmck_local_close(&l);
	rm_rf(rd);
	rm_rf(sd);
	free(rd);
	free(sd);
	return done_testing();
}
