/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * recovery_report.c -- what global recovery tells the application (issue
 * #24, "Reporting"), with 3 ranks as threads (tests/inproc_coll.h):
 *
 *   - 3 ranks checkpoint steps 1..3 with copy-out.
 *   - Rank 1's slot of step 3 fails its checksum: every rank loads step 3,
 *     rank 1 from the shared directory, its reason naming the failed slot
 *     and tensor (not "no local copy"), and pmck_store_rejections on rank 1
 *     lists {rank 1, LOCAL, step 3, "local slot K failed its checksum
 *     (tensor 'w')"}; the other ranks reject nothing.
 *   - Rank 2's slot of step 3 fails too, and its file of the COMPLETE step
 *     3 is truncated: every rank loads step 2; rank 2 lists both rejected
 *     candidates, ranks 0 and 1 list step 3 as passed over ("rank 2 cannot
 *     produce it"), and rank 0 has moved step 3 to DIR/quarantine (NOTE
 *     naming the file, the original gone, nothing deleted) and lists it
 *     with quarantined = 1.  pmck_copyout_list reports the quarantined step.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/stat.h>

#include "pmckpt.h"
#include "tap.h"
#include "inproc_coll.h"
#include "copyout_util.h"

#define RANKS 3
#define BYTES (1u << 16)
#define MAXREJ 8

static struct pmck_tensor_desc desc = {.name = "w", .dtype = PMCK_DTYPE_U8, .ndim = 1,
		.shape = {BYTES}};
static char ramdisk[PATH_MAX], shared[PATH_MAX + 16];

struct rank {
	unsigned id;
	struct member m;
	int write;           /* phase: checkpoint steps 1..3 (else recover) */
	int damage;          /* before recovery, flip a byte of the slot holding step 3 */
	/* results */
	int ret, ret_copy;
	uint64_t step;
	enum pmck_tier tier;
	char reason[512];
	size_t nrej;
	struct pmck_rejection rej[MAXREJ];
};

/* Flips one byte of the slot of l's store that holds `step`. */
static void
damage_slot(struct pmck_local *l, const char *store, uint64_t step)
{
	char name[64];
	void *data;

	for (unsigned k = 0; k < 2; k++) {
		if (pmck_store_slot_step(l->store, k) != (int64_t)step)
			continue;
		fmtp(name, sizeof(name), "%s.data%u", store, k);
		if (pma_lookup(l->pool, name, &data, NULL) == 0)
			((volatile uint8_t *)data)[100] ^= 0x40;
	}
}

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

	snprintf(name, sizeof(name), "rr%u", r->id);
	if ((r->ret = pmck_local_open(&lo, &l)) || (r->ret = pmck_global_new(l.store, &coll, &g))) {
		diag("rank %u: %s", r->id, pmck_errormsg());
		exit(1); /* the others would wait for this rank */
	}
	if (r->write) {
		inproc_save_steps(l.store, g, shared, r->id, RANKS, 3, BYTES, &r->ret, &r->ret_copy);
	} else {
		struct pmck_global_recovery gr;
		if (r->damage)
			damage_slot(&l, name, 3);
		r->ret = pmck_global_recover(g, shared, &gr);
		r->step = gr.step;
		r->tier = gr.tier;
		snprintf(r->reason, sizeof(r->reason), "%s", r->ret ? pmck_errormsg() : gr.reason);
		const struct pmck_rejection *rj = pmck_store_rejections(l.store, &r->nrej);
		for (size_t i = 0; i < r->nrej && i < MAXREJ; i++)
			r->rej[i] = rj[i];
	}
	pmck_global_delete(&g);
	pmck_local_close(&l);
	return NULL;
}

static void
run_world(struct rank *ranks, int write, unsigned damaged_mask)
{
	static struct world w;
	pthread_t t[RANKS];

	memset(&w, 0, sizeof(w));
	pthread_mutex_init(&w.lock, NULL);
	pthread_cond_init(&w.cond, NULL);
	w.size = RANKS;
	for (unsigned i = 0; i < RANKS; i++) {
		ranks[i] = (struct rank){.id = i, .write = write, .damage = (damaged_mask >> i) & 1};
		ranks[i].m.w = &w;
		pthread_create(&t[i], NULL, rank_main, &ranks[i]);
	}
	for (unsigned i = 0; i < RANKS; i++)
		pthread_join(t[i], NULL);
	pthread_mutex_destroy(&w.lock);
	pthread_cond_destroy(&w.cond);
}

/* The rejection of rank r's list for (tier, step) whose reason contains text, or NULL. */
static const struct pmck_rejection *
find_rej(const struct rank *r, enum pmck_tier tier, uint64_t step, const char *text)
{
	for (size_t i = 0; i < r->nrej && i < MAXREJ; i++)
		if (r->rej[i].tier == tier && r->rej[i].step == step && strstr(r->rej[i].reason, text))
			return &r->rej[i];
	for (size_t i = 0; i < r->nrej && i < MAXREJ; i++)
		diag("rank %u: rejection %zu: rank %u tier %d step %llu: %s", r->id, i,
				r->rej[i].rank, (int)r->rej[i].tier,
				(unsigned long long)r->rej[i].step, r->rej[i].reason);
	return NULL;
}

/* The one entry of DIR/quarantine into path ("" if there is not exactly one). */
static int
quarantined(char *path, size_t len)
{
	char q[PATH_MAX + 32];
	struct dirent *de;
	int n = 0;

	fmtp(q, sizeof(q), "%s/quarantine", shared);
	path[0] = 0;
	DIR *d = opendir(q);
	while (d && (de = readdir(d)))
		if (de->d_name[0] != '.' && n++ == 0)
			fmtp(path, len, "%s/%s", q, de->d_name);
	if (d)
		closedir(d);
	return n;
}

int
main(void)
{
	struct rank ranks[RANKS];
	char path[PATH_MAX], qpath[PATH_MAX + 64], note[2048];
	struct stat st;

	snprintf(ramdisk, sizeof(ramdisk), "%s", scratch_path("rreport"));
	snprintf(shared, sizeof(shared), "%s/shared", ramdisk);
	mkdir(ramdisk, 0755);

	run_world(ranks, 1, 0);
	int good = 1;
	for (unsigned i = 0; i < RANKS; i++)
		good &= !ranks[i].ret && !ranks[i].ret_copy;
	if (!ok(good, "3 ranks checkpoint steps 1..3 and copy them out")) {
		rm_rf(ramdisk);
		return done_testing();
	}

	/* A flipped byte in rank 1's newest slot. */
	run_world(ranks, 0, 1u << 1);
	for (unsigned i = 0; i < RANKS; i++)
		ok(ranks[i].ret == 0 && ranks[i].step == 3, "rank %u: step 3 (%d: %s)", i,
				ranks[i].ret, ranks[i].reason);
	struct rank *r1 = &ranks[1];
	is_int(r1->tier, PMCK_TIER_SHARED, "rank 1 loaded it from the shared directory");
	ok(strstr(r1->reason, "failed its checksum (tensor 'w')") &&
			!strstr(r1->reason, "no local copy"),
			"rank 1's reason is the true one: \"%s\"", r1->reason);
	const struct pmck_rejection *e = find_rej(r1, PMCK_TIER_LOCAL, 3,
			"failed its checksum (tensor 'w')");
	ok(e && e->rank == 1 && !e->quarantined, "rank 1 lists its rejected slot: \"%s\"",
			e ? e->reason : "(none)");
	is_int(r1->nrej, 1, "... and nothing else");
	is_int(ranks[0].nrej + ranks[2].nrej, 0, "ranks 0 and 2 rejected nothing");

	/* Rank 2: its slot of step 3 damaged, and its file of the COMPLETE step 3 truncated. */
	rank_file(path, sizeof(path), shared, 3, 2);
	off_t half = stat(path, &st) == 0 ? st.st_size / 2 : 0;
	ok(half > 0 && truncate(path, half) == 0, "rank 2's file of step 3 truncated to %lld bytes",
			(long long)half);
	run_world(ranks, 0, 1u << 2);
	for (unsigned i = 0; i < RANKS; i++)
		ok(ranks[i].ret == 0 && ranks[i].step == 2, "rank %u: step 2 (%d: %s)", i,
				ranks[i].ret, ranks[i].reason);
	struct rank *r2 = &ranks[2];
	ok(find_rej(r2, PMCK_TIER_LOCAL, 3, "failed its checksum (tensor 'w')") != NULL,
			"rank 2 lists its rejected slot");
	e = find_rej(r2, PMCK_TIER_SHARED, 3, "rank-00002.safetensors");
	ok(e && e->rank == 2, "rank 2 lists its rejected file: \"%s\"", e ? e->reason : "(none)");
	e = find_rej(&ranks[1], PMCK_TIER_LOCAL, 3, "rank 2 cannot produce it");
	ok(e && e->rank == 1, "rank 1 lists step 3 as passed over: \"%s\"", e ? e->reason : "(none)");
	e = find_rej(&ranks[0], PMCK_TIER_SHARED, 3, "moved to");
	ok(e && e->quarantined && e->rank == 2 && strstr(e->reason, "rank-00002.safetensors"),
			"rank 0 lists the quarantined step: \"%s\"", e ? e->reason : "(none)");

	fmtp(path, sizeof(path), "%s/step-%012d", shared, 3);
	ok(stat(path, &st) && errno == ENOENT, "step 3 is gone from %s", shared);
	is_int(quarantined(qpath, sizeof(qpath)), 1, "one step in quarantine: %s", qpath);
	ok(strstr(qpath, "/quarantine/step-000000000003-") != NULL, "named after step 3");
	fmtp(path, sizeof(path), "%s/rank-00000.safetensors", qpath);
	ok(stat(path, &st) == 0, "its files are kept");
	fmtp(path, sizeof(path), "%s/COMPLETE", qpath);
	ok(stat(path, &st) == 0, "with its marker");
	fmtp(path, sizeof(path), "%s/NOTE", qpath);
	FILE *f = fopen(path, "r");
	size_t n = f ? fread(note, 1, sizeof(note) - 1, f) : 0;
	note[n] = 0;
	if (f)
		fclose(f);
	ok(strstr(note, "step 3") && strstr(note, "rank-00002.safetensors") && strstr(note, "when: "),
			"NOTE says what failed and when:\n%s", note);

	struct pmck_copyout_listing *ls = NULL;
	is_int(pmck_copyout_list(shared, &ls), 0, "pmck_copyout_list");
	ok(ls && ls->nquarantined == 1 && ls->quarantined[0].step == 3 &&
			strstr(ls->quarantined[0].note, "rank-00002"),
			"it lists the quarantined step (%zu)", ls ? ls->nquarantined : 0);
	int steps_ok = ls != NULL;
	for (size_t i = 0; ls && i < ls->nsteps; i++)
		steps_ok &= ls->steps[i].step != 3;
	ok(steps_ok, "and not as a step");
	pmck_copyout_listing_free(&ls);

	rm_rf(ramdisk);
	return done_testing();
}
