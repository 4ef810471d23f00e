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
};

struct rank {
	unsigned id;
	struct member m;
	const struct phase *ph;
	int ret_open, ret_partner, ret_recover, ret_save, ret_wait, exact;
	char recover_msg[512];
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
			.store_name = name};

	if ((r->ret_open = pmck_local_open(&lo, &l)) ||
	    (r->ret_open = pmck_global_new(l.store, &coll, &g))) {
		diag("rank %u: %s (the other ranks will wait for it)", r->id, pmck_errormsg());
		exit(1);
	}
	if ((r->ret_partner = pmck_partner_new(g, &coll, &popts, &pt))) {
		diag("rank %u: %s", r->id, pmck_errormsg());
		exit(1);
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

/* Flips a byte of the newest copy that rank 0 (node 0) holds for rank 2. */
static int
corrupt_held_copy_of_rank2(uint64_t *step)
{
	char nodedir[600];
	struct pmck_local l;
	struct pmck_recovery rec;
	snprintf(nodedir, sizeof(nodedir), "%s/node0", dir);
	struct pmck_local_opts lo = {.ramdisk_dir = nodedir, .store_name = "rank0.partner-of-2",
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

	sh("rm -rf %s", dir);
	return done_testing();
}
