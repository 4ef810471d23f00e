/*
 * partner.c -- partner copies without MPI: 4 ranks as threads on 2
 * "nodes" (each node a ramdisk directory of its own), joined by
 * in-process collectives with sendrecv.  The placement rule; rounds that
 * copy every step to a rank of the other node (synchronous commits and a
 * global pipeline); a lost node (its directory deleted) recovered from the
 * partners, bit-exact, without a shared directory; a partner copy
 * corrupted on purpose rejected, recovery falling to the shared tier or to
 * an older step; a rank and its partner both lost: the shared tier, or a
 * refusal on every rank naming both; the copies a replaced node lost sent
 * again by recovery, so that losing the other node next loses nothing.
 * Copies every 3rd step: a lost node's survivors come back from their
 * own copy of the last copied step (their slots have moved on), a damaged
 * one rejected for the older copy; `every` not alike refused everywhere.
 * (Kills and MPI: tests/mpi_partner.sh.)
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/stat.h>

#include "pmckpt.h"
#include "tap.h"
#include "inproc_coll.h"

#define RANKS 4
#define BYTES ((9u << 20) + 5) /* three pieces of a round, the last one short */
#define NODE(r) ((r) / 2)

static struct pmck_tensor_desc descs[] = {
	{.name = "a", .dtype = PMCK_DTYPE_U8, .ndim = 1, .shape = {BYTES}, .layer = 0},
	{.name = "b", .dtype = PMCK_DTYPE_F32, .ndim = 1, .shape = {1000}, .layer = 1},
};
static const size_t nbytes[] = {BYTES, 4000};
static char dir[512];

/* What one phase asks of every rank. */
struct phase {
	const char *shared;      /* recover from (and, if saving, copy out to) this directory */
	uint64_t save_from, save_to;
	int pipeline;            /* save through a global pipeline instead of begin/commit */
	unsigned every;          /* pmck_partner_opts.every */
	unsigned every_rank3;    /* rank 3's, if not 0 (pmck_partner_new must refuse) */
	uint64_t fail_rank3_at;  /* rank 3's commit of this step fails (not 0) */
};

struct rank {
	unsigned id;
	struct member m;
	const struct phase *ph;
	int ret_open, ret_partner, ret_recover, ret_save, ret_wait, exact;
	char partner_msg[512], recover_msg[512];
	struct pmck_global_recovery rec;
	struct pmck_partner_stats st;
	char rejections[2048];   /* every rejection's reason, one per line */
};

static struct world world;

static void
fill(uint8_t *p, size_t n, uint64_t step, unsigned rank, unsigned t)
{
	for (size_t k = 0; k < n; k++)
		p[k] = (uint8_t)(step * 7 + rank * 13 + t * 101 + k);
}

static int
exact(struct pmck_store *s, uint64_t step, unsigned rank)
{
	int good = 1;
	for (unsigned t = 0; t < 2 && good; t++) {
		uint8_t *want = malloc(nbytes[t]);
		const uint8_t *got = pmck_store_tensor_data(s, t);
		fill(want, nbytes[t], step, rank, t);
		good = got && memcmp(got, want, nbytes[t]) == 0;
		free(want);
	}
	return good;
}

static int
save(struct rank *r, struct pmck_store *s, struct pmck_global *g)
{
	uint8_t *src[2] = {malloc(nbytes[0]), malloc(nbytes[1])};
	struct pmck_copyout *co = NULL;
	struct pmck_copyout_opts co_opts = {.dir = r->ph->shared, .keep = 5, .rank = r->id,
			.world_size = RANKS};
	struct pmck_pipeline *p = NULL;
	int ret = r->ph->shared ? pmck_copyout_new(s, &co_opts, &co) : 0;
	struct pmck_pipeline_opts po = {.threads = 1, .global = g, .copyout = co};

	if (!ret && r->ph->pipeline)
		ret = pmck_pipeline_new(s, &po, &p);
	for (uint64_t step = r->ph->save_from; step <= r->ph->save_to && !ret; step++) {
		struct pmck_ckpt *c;
		if (p) {
			if ((ret = pmck_pipeline_begin(p, step)))
				break;
			/* begin waited for the previous checkpoint: the sources are free again */
			for (unsigned t = 0; t < 2 && !ret; t++) {
				fill(src[t], nbytes[t], step, r->id, t);
				ret = pmck_pipeline_put_layer(p, t, (const void *const *)src);
			}
			continue;
		}
		for (unsigned t = 0; t < 2; t++)
			fill(src[t], nbytes[t], step, r->id, t);
		if (r->id == 3 && step == r->ph->fail_rank3_at) {
			/* A commit that fails: the group learns that the step is not global. */
			if (!(ret = pmck_global_begin(g, step, &c))) {
				pmck_ckpt_abort(c);
				ret = pmck_global_note_commit(g, step, 0);
			}
			continue;
		}
		if (!(ret = pmck_global_begin(g, step, &c)) &&
		    !(ret = pmck_ckpt_write_all(c, (const void *const *)src, 1)))
			ret = pmck_global_commit(g, c);
		if (!ret && co)
			ret = pmck_copyout_submit(co);
	}
	if (p) {
		int wret = pmck_pipeline_wait(p);
		ret = ret ? ret : wret;
		pmck_pipeline_delete(&p);
	}
	int gret = pmck_global_wait(g, NULL);
	ret = ret ? ret : gret;
	if (co) {
		int cret = pmck_copyout_wait(co);
		ret = ret ? ret : cret;
		pmck_copyout_delete(&co);
	}
	free(src[0]);
	free(src[1]);
	return ret;
}

static void *
rank_main(void *arg)
{
	struct rank *r = arg;
	char name[32], nodedir[600];
	struct pmck_local l;
	struct pmck_global *g = NULL;
	struct pmck_partner *pt = NULL;

	r->m = (struct member){.w = &world};
	struct pmck_collectives coll = inproc_partner_collectives(&r->m, r->id);
	snprintf(name, sizeof(name), "rank%u", r->id);
	snprintf(nodedir, sizeof(nodedir), "%s/node%u", dir, NODE(r->id));
	struct pmck_local_opts lo = {.ramdisk_dir = nodedir, .store_name = name, .descs = descs,
			.ndescs = 2};
	struct pmck_partner_opts popts = {.node = NODE(r->id) + 100, .ramdisk_dir = nodedir,
			.store_name = name, .every = r->id == 3 && r->ph->every_rank3 ?
			r->ph->every_rank3 : r->ph->every};

	if ((r->ret_open = pmck_local_open(&lo, &l)) ||
	    (r->ret_open = pmck_global_new(l.store, &coll, &g))) {
		diag("rank %u: %s (the other ranks will wait for it)", r->id, pmck_errormsg());
		exit(1);
	}
	if ((r->ret_partner = pmck_partner_new(g, &coll, &popts, &pt))) {
		snprintf(r->partner_msg, sizeof(r->partner_msg), "%s", pmck_errormsg());
		pmck_global_delete(&g);
		pmck_local_close(&l);
		return NULL;
	}
	r->ret_recover = pmck_global_recover(g, r->ph->shared, &r->rec);
	snprintf(r->recover_msg, sizeof(r->recover_msg), "%s", r->ret_recover ? pmck_errormsg() : "");
	size_t n;
	const struct pmck_rejection *rej = pmck_store_rejections(l.store, &n);
	for (size_t i = 0; i < n; i++) {
		size_t used = strlen(r->rejections);
		snprintf(r->rejections + used, sizeof(r->rejections) - used, "%s\n", rej[i].reason);
	}
	r->exact = !r->ret_recover && exact(l.store, r->rec.step, r->id);
	if (r->ph->save_from <= r->ph->save_to)
		r->ret_save = save(r, l.store, g);
	r->ret_wait = pmck_partner_wait(pt);
	pmck_partner_stats(pt, &r->st);
	pmck_partner_delete(&pt);
	pmck_global_delete(&g);
	pmck_local_close(&l);
	return NULL;
}

static void
run_phase(struct rank *ranks, const struct phase *ph)
{
	pthread_t t[RANKS];

	memset(&world, 0, sizeof(world));
	pthread_mutex_init(&world.lock, NULL);
	pthread_cond_init(&world.cond, NULL);
	world.size = RANKS;
	for (unsigned i = 0; i < RANKS; i++) {
		ranks[i] = (struct rank){.id = i, .ph = ph};
		pthread_create(&t[i], NULL, rank_main, &ranks[i]);
	}
	for (unsigned i = 0; i < RANKS; i++)
		pthread_join(t[i], NULL);
	pthread_mutex_destroy(&world.lock);
	pthread_cond_destroy(&world.cond);
}

static void
sh(const char *fmt, const char *arg)
{
	char cmd[1200];
	snprintf(cmd, sizeof(cmd), fmt, arg, arg);
	if (system(cmd))
		diag("failed: %s", cmd);
}

/* A node is lost: its directory (its ranks' stores, the copies it held) is gone. */
static void
lose_node(unsigned node)
{
	char nodedir[600];
	snprintf(nodedir, sizeof(nodedir), "%s/node%u", dir, node);
	sh("rm -rf %s", nodedir);
}

/* Flips a byte of the newest step in store `name` of node `node`. */
static int
corrupt_newest(unsigned node, const char *name, uint64_t *step)
{
	char nodedir[600];
	struct pmck_local l;
	struct pmck_recovery rec;
	snprintf(nodedir, sizeof(nodedir), "%s/node%u", dir, node);
	struct pmck_local_opts lo = {.ramdisk_dir = nodedir, .store_name = name,
			.flags = PMCK_LOCAL_EXISTING};
	int ret = pmck_local_open(&lo, &l);
	if (ret)
		return ret;
	if (!(ret = pmck_store_recover(l.store, &rec))) {
		uint8_t *p = (uint8_t *)pmck_store_tensor_data(l.store, 0);
		p[BYTES / 2] ^= 0x40;
		*step = rec.step;
	}
	pmck_local_close(&l);
	return ret;
}

/* The steps sealed in store `name` of node `node` (-1: none). */
static void
store_steps(unsigned node, const char *name, int64_t st[2])
{
	char nodedir[600];
	struct pmck_local l;
	snprintf(nodedir, sizeof(nodedir), "%s/node%u", dir, node);
	struct pmck_local_opts lo = {.ramdisk_dir = nodedir, .store_name = name,
			.flags = PMCK_LOCAL_EXISTING};
	st[0] = st[1] = -1;
	if (pmck_local_open(&lo, &l) == 0) {
		st[0] = pmck_store_slot_step(l.store, 0);
		st[1] = pmck_store_slot_step(l.store, 1);
		pmck_local_close(&l);
	}
}

/* Flips a byte of the newest copy that rank 0 (node 0) holds for rank 2. */
static int
corrupt_held_copy_of_rank2(uint64_t *step)
{
	return corrupt_newest(0, "rank0.partner-of-2", step);
}

static void
test_placement(void)
{
	unsigned t[12];
	const uint64_t two_by_two[] = {5, 5, 9, 9};
	is_int(pmck_partner_place(two_by_two, 4, t), 0, "placement: 2 nodes of 2 ranks");
	ok(t[0] == 2 && t[1] == 3 && t[2] == 0 && t[3] == 1, "local rank i sends to local rank i of "
			"the other node (%u %u %u %u)", t[0], t[1], t[2], t[3]);

	/* 4 nodes of 3 ranks, interleaved rank numbers: every target on another node, one each. */
	const uint64_t four_by_three[] = {1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4};
	is_int(pmck_partner_place(four_by_three, 12, t), 0, "placement: 4 nodes of 3 ranks");
	int other = 1, once = 1, spread = 1;
	unsigned held[12] = {0};
	for (unsigned r = 0; r < 12; r++) {
		other &= four_by_three[t[r]] != four_by_three[r];
		held[t[r]]++;
	}
	for (unsigned r = 0; r < 12; r++)
		once &= held[r] == 1;
	/* Node 1 (ranks 0, 4, 8) sends to three different nodes. */
	spread = four_by_three[t[0]] != four_by_three[t[4]] && four_by_three[t[4]] !=
		 four_by_three[t[8]] && four_by_three[t[0]] != four_by_three[t[8]];
	ok(other && once && spread, "every copy on another node (%d), each rank holds one (%d), a "
			"node's ranks spread over the other nodes (%d)", other, once, spread);

	const uint64_t uneven[] = {0, 0, 0, 1, 1, 2};
	is_int(pmck_partner_place(uneven, 6, t), 0, "placement: nodes of 3, 2 and 1 ranks");
	other = 1;
	for (unsigned r = 0; r < 6; r++)
		other &= uneven[t[r]] != uneven[r];
	ok(other, "uneven nodes: every copy on another node");

	const uint64_t lopsided[] = {0, 0, 0, 1};
	is_int(pmck_partner_place(lopsided, 4, t), -EINVAL, "a node with more than half the ranks "
			"is refused");
	ok(strstr(pmck_errormsg(), "more than half") != NULL, "and says why: %s", pmck_errormsg());
	const uint64_t one[] = {3, 3};
	is_int(pmck_partner_place(one, 2, t), -EINVAL, "one node is refused");
	ok(strstr(pmck_errormsg(), "one node") != NULL, "and says why: %s", pmck_errormsg());
}

/* Copies every 3rd step, in a directory of their own. */
static void
test_every(struct rank *ranks)
{
	sh("rm -rf %s/node0 %s/node1", dir);

	/* 8. Steps 1..9: copy steps 1, 4, 7 (the first round, then every 3rd). */
	struct phase p8 = {.save_from = 1, .save_to = 9, .every = 3};
	run_phase(ranks, &p8);
	for (unsigned i = 0; i < RANKS; i++) {
		struct rank *r = &ranks[i];
		is_int(r->ret_save, 0, "every 3: rank %u: steps 1..9 saved", i);
		is_int(r->ret_wait, 0, "every 3: rank %u: every round succeeded", i);
		ok(r->st.sent == 3 && r->st.confirmed_step == 7 && r->st.received == 3 &&
		   r->st.held_step == 7 && r->st.self_step == 7 && r->st.rounds == 9,
				"every 3: rank %u: 9 rounds, steps 1, 4, 7 copied (sent %llu, confirmed "
				"%lld, held %lld, own copy %lld)", i, (unsigned long long)r->st.sent,
				(long long)r->st.confirmed_step, (long long)r->st.held_step,
				(long long)r->st.self_step);
		is_int(r->st.bytes_sent, 3ull * (BYTES + 4000), "every 3: rank %u: bytes sent", i);
	}

	/*
	 * 9. Node 1 lost.  Node 0's slots hold 8 and 9 (global, but never
	 * copied); step 7, the newest copied one, comes from their own copy
	 * and, for node 1's ranks, from the partners.  Then 8..10 through a
	 * pipeline: the resent 7 counts as a copy, so 10 is the next.
	 */
	lose_node(1);
	struct phase p9 = {.save_from = 8, .save_to = 10, .pipeline = 1, .every = 3};
	run_phase(ranks, &p9);
	for (unsigned i = 0; i < RANKS; i++) {
		struct rank *r = &ranks[i];
		is_int(r->ret_recover, 0, "every 3: rank %u: recovered after node 1 was lost", i);
		is_int(r->rec.step, 7, "every 3: rank %u: step 7, the newest copied global step", i);
		is_int(r->rec.tier, NODE(i) ? PMCK_TIER_PARTNER : PMCK_TIER_LOCAL,
				"every 3: rank %u: from its %s (%s)", i, NODE(i) ? "partner" :
				"own copy", r->rec.reason);
		ok(NODE(i) || strstr(r->rec.reason, "own copy of its partner step"),
				"every 3: rank %u: the reason says which copy", i);
		ok(r->exact, "every 3: rank %u: bit-exact", i);
		is_int(r->ret_save, 0, "every 3: rank %u: steps 8..10 saved", i);
		ok(r->ret_wait == 0 && r->st.confirmed_step == 10 && r->st.self_step == 10 &&
		   r->st.sent == (NODE(i) ? 1u : 2u), "every 3: rank %u: step 7 %s, then step 10 "
				"copied (sent %llu, confirmed %lld, own copy %lld)", i, NODE(i) ?
				"not resent (its holder on node 0 kept it)" :
				"resent to its replaced holder on node 1",
				(unsigned long long)r->st.sent, (long long)r->st.confirmed_step,
				(long long)r->st.self_step);
	}

	/* 10. A restart with nothing lost: step 10 from the slots; then 11, 12 (not copied). */
	struct phase p10 = {.save_from = 11, .save_to = 12, .every = 3};
	run_phase(ranks, &p10);
	for (unsigned i = 0; i < RANKS; i++) {
		struct rank *r = &ranks[i];
		ok(r->ret_recover == 0 && r->rec.step == 10 && r->rec.tier == PMCK_TIER_LOCAL &&
		   r->exact, "every 3: rank %u: a plain restart resumes step 10 from its slots (%s)",
				i, r->rec.reason);
		ok(r->ret_save == 0 && r->ret_wait == 0 && r->st.sent == 0 && r->st.rounds == 3,
				"every 3: rank %u: 10 already held everywhere, 11 and 12 not copied "
				"(sent %llu, rounds %llu)", i, (unsigned long long)r->st.sent,
				(unsigned long long)r->st.rounds);
	}

	/*
	 * 11. Node 0 lost, and rank 2's own copy of step 10 damaged: rejected,
	 * and every rank goes back to step 7, the older copy (rank 2 from its
	 * own copy of 7, node 0's ranks from the partners).
	 */
	lose_node(0);
	uint64_t bad = 0;
	is_int(corrupt_newest(1, "rank2.partner-self", &bad), 0, "a byte of rank 2's own copy "
			"flipped");
	is_int(bad, 10, "in its newest, step 10");
	struct phase p11 = {.save_from = 1, .save_to = 0, .every = 3};
	run_phase(ranks, &p11);
	for (unsigned i = 0; i < RANKS; i++) {
		struct rank *r = &ranks[i];
		ok(r->ret_recover == 0 && r->rec.step == 7 && r->exact, "every 3: rank %u: step 7, "
				"bit-exact (%s)", i, r->ret_recover ? r->recover_msg : r->rec.reason);
		is_int(r->rec.tier, NODE(i) ? PMCK_TIER_LOCAL : PMCK_TIER_PARTNER,
				"every 3: rank %u: from its %s", i, NODE(i) ? "own copy" : "partner");
	}
	ok(strstr(ranks[2].rejections, "own copy of its partner step") &&
	   strstr(ranks[2].rejections, "checksum"), "every 3: rank 2 lists its damaged own copy: %s",
			ranks[2].rejections);

	/*
	 * 13. A fresh job whose rank 3 fails to commit step 4, a copy step:
	 * not global, so the copies of it that others sealed (held, own) are
	 * dropped too, and a lost node comes back to step 1, the last copied
	 * global step.
	 */
	sh("rm -rf %s/node0 %s/node1", dir);
	struct phase p13 = {.save_from = 1, .save_to = 4, .every = 3, .fail_rank3_at = 4};
	run_phase(ranks, &p13);
	for (unsigned i = 0; i < RANKS; i++)
		is_int(ranks[i].ret_save, -EIO, "every 3: rank %u: step 4 is not global", i);
	int64_t held[2], own[2];
	store_steps(0, "rank0.partner-of-2", held);
	store_steps(0, "rank0.partner-self", own);
	ok(held[0] != 4 && held[1] != 4 && (held[0] == 1 || held[1] == 1), "every 3: rank 0 holds "
			"rank 2's copy of step 1, not of step 4 (%lld %lld)", (long long)held[0],
			(long long)held[1]);
	ok(own[0] != 4 && own[1] != 4 && (own[0] == 1 || own[1] == 1), "every 3: rank 0's own "
			"copies: step 1, not 4 (%lld %lld)", (long long)own[0], (long long)own[1]);
	lose_node(1);
	struct phase p14 = {.save_from = 1, .save_to = 0, .every = 3};
	run_phase(ranks, &p14);
	for (unsigned i = 0; i < RANKS; i++)
		ok(ranks[i].ret_recover == 0 && ranks[i].rec.step == 1 && ranks[i].exact,
				"every 3: rank %u: node 1 lost: step 1, bit-exact (%s)", i,
				ranks[i].ret_recover ? ranks[i].recover_msg : ranks[i].rec.reason);

	/* 12. `every` not alike: refused on every rank, nothing else happens. */
	struct phase p12 = {.save_from = 1, .save_to = 0, .every = 3, .every_rank3 = 2};
	run_phase(ranks, &p12);
	for (unsigned i = 0; i < RANKS; i++)
		ok(ranks[i].ret_partner == -EINVAL && strstr(ranks[i].partner_msg, "same on every rank"),
				"every 3 and 2: rank %u refuses: %s", i, ranks[i].partner_msg);
}

int
main(void)
{
	struct rank ranks[RANKS];
	char shared[600];

	test_placement();
	snprintf(dir, sizeof(dir), "%s", scratch_path("partner"));
	snprintf(shared, sizeof(shared), "%s/shared", dir);
	mkdir(dir, 0700);

	/* 1. A fresh job saves steps 1..6, each copied to the partner. */
	struct phase p1 = {.save_from = 1, .save_to = 6};
	run_phase(ranks, &p1);
	for (unsigned i = 0; i < RANKS; i++) {
		struct rank *r = &ranks[i];
		is_int(r->ret_recover, PMCK_E_NO_CHECKPOINT, "rank %u: a fresh start", i);
		is_int(r->ret_save, 0, "rank %u: steps 1..6 saved", i);
		is_int(r->ret_wait, 0, "rank %u: every round succeeded", i);
		is_int(r->st.target, (i + 2) % 4, "rank %u: its partner is on the other node", i);
		ok(r->st.confirmed_step == 6 && r->st.held_step == 6 && r->st.sent == 6 &&
		   r->st.received == 6, "rank %u: 6 copies sent and confirmed, 6 held (newest 6)", i);
		is_int(r->st.bytes_sent, 6ull * (BYTES + 4000), "rank %u: bytes sent", i);
	}

	/* 2. Node 1 is lost: its ranks get step 6 from their partners, no shared directory. */
	lose_node(1);
	struct phase p2 = {.shared = shared, .save_from = 7, .save_to = 8, .pipeline = 1};
	run_phase(ranks, &p2);
	for (unsigned i = 0; i < RANKS; i++) {
		struct rank *r = &ranks[i];
		is_int(r->ret_recover, 0, "rank %u: recovered after node 1 was lost", i);
		is_int(r->rec.step, 6, "rank %u: the newest global step, 6", i);
		is_int(r->rec.tier, NODE(i) ? PMCK_TIER_PARTNER : PMCK_TIER_LOCAL,
				"rank %u: from its %s (%s)", i, NODE(i) ? "partner" : "local store",
				r->rec.reason);
		ok(r->exact, "rank %u: bit-exact", i);
		is_int(r->ret_save, 0, "rank %u: steps 7, 8 through a global pipeline, copied out", i);
		ok(r->ret_wait == 0 && r->st.confirmed_step == 8, "rank %u: the pipeline's commits "
				"reach the partner (confirmed %lld)", i, (long long)r->st.confirmed_step);
	}

	/* 3. Node 1 lost again, and rank 2's newest partner copy damaged: the shared tier. */
	lose_node(1);
	uint64_t bad = 0;
	is_int(corrupt_held_copy_of_rank2(&bad), 0, "a byte of rank 2's partner copy flipped");
	is_int(bad, 8, "in its newest copy, step 8");
	struct phase p3 = {.shared = shared, .save_from = 1, .save_to = 0};
	run_phase(ranks, &p3);
	for (unsigned i = 0; i < RANKS; i++) {
		struct rank *r = &ranks[i];
		is_int(r->ret_recover, 0, "rank %u: recovered", i);
		is_int(r->rec.step, 8, "rank %u: step 8", i);
		ok(r->exact, "rank %u: bit-exact", i);
	}
	is_int(ranks[2].rec.tier, PMCK_TIER_SHARED, "rank 2: from the shared tier (%s)",
			ranks[2].rec.reason);
	is_int(ranks[3].rec.tier, PMCK_TIER_PARTNER, "rank 3: from its partner");
	ok(strstr(ranks[2].rejections, "partner copy on rank 0") &&
	   strstr(ranks[2].rejections, "checksum"), "rank 2 lists its rejected partner copy: %s",
			ranks[2].rejections);
	ok(strstr(ranks[0].rejections, "held here for rank 2") != NULL,
			"rank 0 lists the copy it holds as rejected: %s", ranks[0].rejections);
	/* The holders that lost a copy of step 8 (node 1's, and rank 0's damaged one) get it again. */
	for (unsigned i = 0; i < RANKS; i++)
		ok(ranks[i].ret_wait == 0 && ranks[i].st.sent == (i == 3 ? 0u : 1u) &&
		   ranks[i].st.confirmed_step == (i == 3 ? -1 : 8), "rank %u: step 8 %s (sent %llu, "
				"confirmed %lld)", i, i == 3 ? "not sent again: rank 1 still holds it" :
				"sent again to its holder after recovery", (unsigned long long)ranks[i].st.sent,
				(long long)ranks[i].st.confirmed_step);

	/* 4. The same without a shared directory: every rank on the older step 7. */
	lose_node(1);
	is_int(corrupt_held_copy_of_rank2(&bad), 0, "rank 2's resent copy of step 8 damaged again");
	struct phase p4 = {.save_from = 1, .save_to = 0};
	run_phase(ranks, &p4);
	for (unsigned i = 0; i < RANKS; i++) {
		struct rank *r = &ranks[i];
		is_int(r->ret_recover, 0, "rank %u: recovered without a shared directory", i);
		is_int(r->rec.step, 7, "rank %u: step 7, the newest every rank can produce", i);
		ok(r->exact, "rank %u: bit-exact", i);
	}
	is_int(ranks[2].rec.tier, PMCK_TIER_PARTNER, "rank 2: from its partner's older copy");

	/* 5. Rank 2 and the rank holding its copy both lost: refused on every rank, naming both. */
	lose_node(1);
	sh("rm -f %s/node0/pmckpt-rank0.partner-of-2.pool", dir);
	struct phase p5 = {.save_from = 1, .save_to = 0};
	run_phase(ranks, &p5);
	for (unsigned i = 0; i < RANKS; i++) {
		struct rank *r = &ranks[i];
		is_int(r->ret_recover, PMCK_E_NONE_USABLE, "rank %u: both copies of rank 2 lost: "
				"refused", i);
		ok(strstr(r->recover_msg, "rank 2 lost both") && strstr(r->recover_msg, "rank 0"),
				"rank %u: the message names both: %s", i, r->recover_msg);
	}

	/* 6. The same with the shared directory: the shared tier's step 8. */
	lose_node(1);
	sh("rm -f %s/node0/pmckpt-rank0.partner-of-2.pool", dir);
	struct phase p6 = {.shared = shared, .save_from = 1, .save_to = 0};
	run_phase(ranks, &p6);
	for (unsigned i = 0; i < RANKS; i++) {
		struct rank *r = &ranks[i];
		is_int(r->ret_recover, 0, "rank %u: recovered from the shared tier", i);
		is_int(r->rec.step, 8, "rank %u: step 8", i);
		ok(r->exact, "rank %u: bit-exact", i);
	}
	is_int(ranks[2].rec.tier, PMCK_TIER_SHARED, "rank 2: from the shared tier");

	/*
	 * 7. Right after node 1 was replaced (phase 6 only recovered), node 0
	 * is lost: its ranks' copies on node 1 exist only because recovery
	 * sent them again.  No shared directory.
	 */
	lose_node(0);
	struct phase p7 = {.save_from = 1, .save_to = 0};
	run_phase(ranks, &p7);
	for (unsigned i = 0; i < RANKS; i++) {
		struct rank *r = &ranks[i];
		is_int(r->ret_recover, 0, "rank %u: recovered after node 0 was lost too", i);
		is_int(r->rec.step, 8, "rank %u: step 8", i);
		is_int(r->rec.tier, NODE(i) ? PMCK_TIER_LOCAL : PMCK_TIER_PARTNER, "rank %u: from its "
				"%s (%s)", i, NODE(i) ? "local store" : "partner", r->rec.reason);
		ok(r->exact, "rank %u: bit-exact", i);
	}

	test_every(ranks);
	sh("rm -rf %s", dir);
	return done_testing();
}
