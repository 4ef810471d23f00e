/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * global.c -- one globally consistent step across ranks.
 *
 * Invariant: a rank begins step s+1 only after s is known to be committed
 * by every rank (the allreduce-min of the committed steps equals s).  A
 * rank's begin overwrites only its older slot, so every rank's two slots
 * always hold the newest globally committed step: recovery can always
 * agree on a step that every rank still has.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct pmck_global {
	struct pmck_store *store;
	struct pmck_collectives c;
	/*
	 * Serializes the agreement's state and the collectives that start and
	 * complete it: a pipeline starts it on its writer thread while the
	 * caller's thread may complete it (begin) or advance it (progress).
	 */
	pthread_mutex_t lock;
	int pending;          /* an agreement was started and not completed */
	/*
	 * With partner copies the agreement on a step starts only once its
	 * round has ended (pmck__global_offer, on the partner thread): the
	 * step is global only when every rank committed it and every partner
	 * copy of it is sealed.  Until then the pending agreement is deferred.
	 */
	int deferred;
	pthread_cond_t offered;
	uint64_t pending_step;
	uint64_t offer;       /* this rank's part: committed step + 1, else last_global + 1 */
	void *req;
	int64_t last_global;  /* newest step known committed everywhere, -1: none */
	int broken;           /* an agreement failed in the collectives: begin refuses until recover */
	struct pmck_partner *partner; /* partner copies (pmck_partner_new), NULL: none */
};

struct pmck_store *pmck__global_store(struct pmck_global *g) { return g->store; }
const struct pmck_collectives *pmck__global_coll(struct pmck_global *g) { return &g->c; }

void
pmck__global_set_partner(struct pmck_global *g, struct pmck_partner *p)
{
	pthread_mutex_lock(&g->lock);
	g->partner = p;
	pthread_mutex_unlock(&g->lock);
}

static int
reduce(struct pmck_global *g, uint64_t *v, enum pmck_reduce_op op)
{
	int ret = g->c.allreduce_u64(g->c.ctx, v, op);
	return ret ? pma__err(ret, "allreduce failed (%d)", ret) : 0;
}

int
pmck_global_new(struct pmck_store *s, const struct pmck_collectives *coll,
		struct pmck_global **out)
{
	if (!s || !coll || !coll->allreduce_u64 || !coll->barrier || !out || coll->size == 0 ||
	    coll->rank >= coll->size)
		return pma__err(-EINVAL, "pmck_global_new: store, collectives (allreduce, barrier, "
				"rank < size) and out are required");
	*out = NULL;
	struct pmck_global *g = calloc(1, sizeof(*g));
	if (!g)
		return pma__err(-ENOMEM, "out of memory");
	g->store = s;
	/* The members before allgather_u64 only: older programs pass the shorter struct. */
	memcpy(&g->c, coll, offsetof(struct pmck_collectives, allgather_u64));
	g->last_global = -1;
	pthread_mutex_init(&g->lock, NULL);
	pthread_cond_init(&g->offered, NULL);

	/* Every rank runs the same four reductions, whatever it finds: no rank can hang. */
	uint64_t size_min = coll->size, size_max = coll->size;
	uint64_t hash_min = pmck_store_layout_hash(s), hash_max = hash_min;
	int ret = reduce(g, &size_min, PMCK_REDUCE_MIN);
	if (!ret)
		ret = reduce(g, &size_max, PMCK_REDUCE_MAX);
	if (!ret)
		ret = reduce(g, &hash_min, PMCK_REDUCE_MIN);
	if (!ret)
		ret = reduce(g, &hash_max, PMCK_REDUCE_MAX);
	if (!ret && size_min != size_max)
		ret = pma__err(-EINVAL, "ranks disagree on the world size (%" PRIu64 " .. %" PRIu64 ")",
				size_min, size_max);
	else if (!ret && hash_min != hash_max)
		ret = pma__err(PMCK_E_LAYOUT, "ranks were started with different layouts (layout "
				"hashes %016" PRIx64 " .. %016" PRIx64 "; this rank %016" PRIx64 ")",
				hash_min, hash_max, pmck_store_layout_hash(s));
	if (ret) {
		pthread_mutex_destroy(&g->lock);
		pthread_cond_destroy(&g->offered);
		free(g);
		return ret;
	}
	/* From now on every commit of this store records the job's world size and rank. */
	s->world_tag = PMCK__WORLD_TAG(coll->size, coll->rank);
	*out = g;
	return 0;
}

void
pmck_global_delete(struct pmck_global **gp)
{
	if (!gp || !*gp)
		return;
	(*gp)->store->world_tag = 0;
	pthread_mutex_destroy(&(*gp)->lock);
	pthread_cond_destroy(&(*gp)->offered);
	free(*gp);
	*gp = NULL;
}

/*
 * Completes (or, unless wait, tries to) the agreement: did every rank commit
 * pending_step?  Called with g->lock held.
 */
static int
settle_locked(struct pmck_global *g, int wait)
{
	uint64_t v = g->offer;
	int ret;

	if (g->broken)
		return pma__err(-EIO, "an earlier agreement failed in the collectives, so whether step "
				"%" PRIu64 " is global is unknown: recover with pmck_global_recover",
				g->pending_step);
	if (!g->pending)
		return 0;
	if (g->deferred && !wait)
		return 0; /* its partner round is still running */
	while (g->deferred)
		pthread_cond_wait(&g->offered, &g->lock);
	if (g->broken)
		return pma__err(-EIO, "starting the agreement on step %" PRIu64 " failed: recover "
				"with pmck_global_recover", g->pending_step);
	v = g->offer;
	if (g->c.iallreduce_u64_start) {
		int done = 0;
		ret = g->c.iallreduce_u64_test(g->c.ctx, g->req, wait, &done, &v);
		if (!ret && !done) {
			if (!wait)
				return 0; /* still in flight */
			ret = -EIO;
		}
		if (ret)
			ret = pma__err(ret, "completing the agreement on step %" PRIu64 " failed",
					g->pending_step);
	} else {
		ret = reduce(g, &v, PMCK_REDUCE_MIN);
	}
	g->pending = 0;
	if (ret) {
		/* The outcome is unknown: beginning would risk the newest global step. */
		g->broken = 1;
		return ret;
	}
	if (v != g->pending_step + 1) {
		/*
		 * Some rank did not commit pending_step, so it is not global.  The
		 * slowest rank offered its last global step v - 1, which every
		 * rank holds (the invariant); unsealing the newer local slots
		 * durably makes the next begin overwrite them and keep it.  With
		 * no global step yet (v = 0) there is nothing to keep.
		 */
		int dret = v ? pmck_store_discard_after(g->store, v - 1) : 0;
		if (dret)
			g->broken = 1;
		/* The partner copies of the step too (its round has ended: it offered). */
		if (g->partner && v)
			pmck__partner_discard_after(g->partner, (int64_t)v - 1);
		g->last_global = (int64_t)v - 1;
		return pma__err(-EIO, "step %" PRIu64 " was not committed by every rank; %s",
				g->pending_step,
				dret ? "discarding it failed: recover with pmck_global_recover"
				     : "this rank discarded it, the next checkpoint may begin");
	}
	g->last_global = (int64_t)g->pending_step;
	return 0;
}

static int
settle(struct pmck_global *g, int wait)
{
	pthread_mutex_lock(&g->lock);
	int ret = settle_locked(g, wait);
	pthread_mutex_unlock(&g->lock);
	return ret;
}

int
pmck__global_complete(struct pmck_global *g)
{
	return settle(g, 1);
}

int
pmck_global_progress(struct pmck_global *g)
{
	return settle(g, 0);
}

int
pmck_global_begin(struct pmck_global *g, uint64_t step, struct pmck_ckpt **out)
{
	int ret = pmck__global_complete(g);
	return ret ? ret : pmck_store_begin(g->store, step, out);
}

/* Starts the non-blocking agreement on g->offer, if the collectives have one. */
static int
start_locked(struct pmck_global *g, uint64_t step)
{
	int ret = g->c.iallreduce_u64_start ?
		g->c.iallreduce_u64_start(g->c.ctx, g->offer, PMCK_REDUCE_MIN, &g->req) : 0;
	if (!ret)
		return 0;
	g->pending = 0;
	g->broken = 1;
	return pma__err(ret, "starting the agreement on step %" PRIu64 " failed", step);
}

int
pmck_global_note_commit(struct pmck_global *g, uint64_t step, int committed)
{
	int ret = 0;

	pthread_mutex_lock(&g->lock);
	if (g->pending) {
		ret = pma__err(-EINVAL, "the agreement on step %" PRIu64 " is still in flight: "
				"begin the next checkpoint first", g->pending_step);
		goto out;
	}
	/*
	 * A failed commit still takes part in the agreement (offering the
	 * last global step), so the other ranks learn that this step is not
	 * global.
	 */
	g->offer = committed ? step + 1 : (uint64_t)(g->last_global + 1);
	g->pending = 1;
	g->pending_step = step;
	if (g->partner) {
		/* Offered when its partner round has ended (pmck__global_offer). */
		g->deferred = 1;
		goto out;
	}
	ret = start_locked(g, step);
out:;
	struct pmck_partner *partner = g->deferred ? g->partner : NULL;
	pthread_mutex_unlock(&g->lock);
	/* Its partner copy, in the background (every rank runs every round, committed or not). */
	if (partner)
		ret = pmck__partner_submit(partner, step, committed);
	return ret;
}

void
pmck__global_offer(struct pmck_global *g, uint64_t step, int ok)
{
	pthread_mutex_lock(&g->lock);
	if (!ok)
		g->offer = (uint64_t)(g->last_global + 1);
	start_locked(g, step); /* a failure breaks g: the next begin reports it */
	g->deferred = 0;
	pthread_cond_broadcast(&g->offered);
	pthread_mutex_unlock(&g->lock);
}

int
pmck_global_commit(struct pmck_global *g, struct pmck_ckpt *c)
{
	uint64_t step = pmck_ckpt_step(c);
	int ret = pmck_ckpt_commit(c);
	int nret = pmck_global_note_commit(g, step, ret == 0);
	return ret ? ret : nret;
}

int
pmck_global_wait(struct pmck_global *g, int64_t *step)
{
	int ret = pmck__global_complete(g);
	if (step)
		*step = pmck_global_agreed(g);
	return ret;
}

int64_t
pmck_global_agreed(struct pmck_global *g)
{
	pthread_mutex_lock(&g->lock);
	int64_t v = g->last_global;
	pthread_mutex_unlock(&g->lock);
	return v;
}

/* ------------------------------------------------------------ recovery */

/* Encoded for an unsigned reduction: step + 1, 0 = nothing. */
#define NONE 0

struct candidates {
	int64_t local[2];  /* sealed steps of the slots, -1 none (or another world size's) */
	int64_t self[2];   /* steps of the partner tier's self store (every > 1), -1 none */
	int64_t partner[PMCK_PARTNER_KEEP_MAX]; /* steps this rank's holder verified for it */
	size_t npartner;
	struct pmck__steps shared;
	char *cand;        /* shared step i is a candidate */
	int have_shared;
	uint64_t gen;      /* generation of the candidates in shared */
};

static int
shared_file(const struct pmck_global *g, const char *dir, uint64_t step, char *path, size_t len)
{
	char leaf[64];
	snprintf(leaf, sizeof(leaf), "rank-%05u.safetensors", g->c.rank);
	return pmck__step_path(path, len, dir, step, leaf);
}

/* Where a rank loads the agreed step from (can_produce). */
enum { FROM_NONE = 0, FROM_LOCAL = 1, FROM_SHARED = 2, FROM_PARTNER = 3, FROM_SELF = 4 };

/*
 * Can this rank produce `step`: FROM_LOCAL from a verifying local slot,
 * FROM_SELF from its own verifying copy of a partner step (every > 1),
 * FROM_PARTNER from a copy its holder verified, FROM_SHARED from a
 * complete, verified shared file, FROM_NONE not (tiers in that order).  Every candidate it rejects is
 * listed (pmck_store_rejections); *damaged says that its shared file of
 * the step is missing or fails verification (the step is to be
 * quarantined).  local_why receives why a local slot of the step failed.
 */
static int
can_produce(struct pmck_global *g, const char *dir, const struct candidates *cd, uint64_t step,
		int *damaged, char *local_why, size_t why_len)
{
	struct pmck_recovery rec;
	char why[PMCK_REASON_MAX];
	size_t n0;

	*damaged = 0;
	for (unsigned k = 0; k < 2; k++) {
		if (cd->local[k] != (int64_t)step)
			continue;
		if (pmck__store_recover_step(g->store, step, &rec) == 0)
			return FROM_LOCAL;
		const struct pmck_rejection *r = pmck_store_rejections(g->store, &n0);
		snprintf(local_why, why_len, "%s", r && n0 ? r[n0 - 1].reason : pmck_errormsg());
	}
	for (unsigned k = 0; k < 2; k++)
		if (cd->self[k] == (int64_t)step && pmck__partner_self_check(g->partner, step) == 0)
			return FROM_SELF;
	for (size_t i = 0; i < cd->npartner; i++)
		if (cd->partner[i] == (int64_t)step)
			return FROM_PARTNER;
	for (size_t i = 0; cd->have_shared && i < cd->shared.n; i++) {
		if (cd->shared.step[i] != (int64_t)step || !cd->cand[i])
			continue;
		int bad = pmck__file_check(dir, step, g->c.rank, why, sizeof(why));
		if (bad == 0)
			return FROM_SHARED;
		*damaged = bad == 1;
		pmck__reject(g->store, g->c.rank, PMCK_TIER_SHARED, step, "%s", why);
	}
	return FROM_NONE;
}

/* Newest step below `below` (encoded) that this rank might produce; NONE if none. */
static uint64_t
newest_below(const struct candidates *cd, uint64_t below)
{
	uint64_t best = NONE;
	for (unsigned k = 0; k < 4; k++) {
		int64_t st = k < 2 ? cd->local[k] : cd->self[k - 2];
		if (st >= 0 && (uint64_t)st + 1 < below && (uint64_t)st + 1 > best)
			best = (uint64_t)st + 1;
	}
	for (size_t i = 0; i < cd->npartner; i++)
		if ((uint64_t)cd->partner[i] + 1 < below && (uint64_t)cd->partner[i] + 1 > best)
			best = (uint64_t)cd->partner[i] + 1;
	for (size_t i = 0; cd->have_shared && i < cd->shared.n; i++)
		if (cd->cand[i] && (uint64_t)cd->shared.step[i] + 1 < below &&
		    (uint64_t)cd->shared.step[i] + 1 > best)
			best = (uint64_t)cd->shared.step[i] + 1;
	return best;
}

/*
 * This rank's candidates, and the world size of the newest checkpoint it
 * sees if that is not this job's (0 if it is, or if none is recorded).
 * Newest: the newest sealed local slot whose world size is recorded;
 * failing that, the newest complete shared step of this layout by
 * (generation, step).  Shared candidates are the steps of this layout and
 * world size of the newest generation (the running lineage: an older run
 * with larger step numbers must not win over a newer one); local
 * candidates the slots not recorded with another world size.
 */
static unsigned
find_candidates(struct pmck_global *g, const char *dir, struct candidates *cd, uint64_t *nfound)
{
	unsigned size = g->c.size, foreign = 0, w;
	int64_t newest = -1;
	int recorded = 0;

	*nfound = 0;
	for (unsigned k = 0; k < 2; k++) {
		cd->local[k] = pmck_store_slot_step(g->store, k);
		if (cd->local[k] < 0)
			continue;
		++*nfound;
		int rec = pmck_store_slot_world(g->store, k, NULL, &w) == 0;
		if (cd->local[k] > newest) {
			newest = cd->local[k];
			recorded = rec;
			foreign = rec && w != size ? w : 0;
		}
		if (rec && w != size)
			cd->local[k] = -1;
	}
	cd->have_shared = dir && pmck__list_steps(dir, &cd->shared) == 0;
	if (!cd->have_shared)
		return foreign;
	size_t n = cd->shared.n;
	size_t *idx = malloc((n + 1) * sizeof(*idx));
	cd->cand = calloc(n + 1, 1);
	if (!idx || !cd->cand) {
		free(idx);
		free(cd->cand);
		cd->cand = NULL;
		pmck__free_steps(&cd->shared);
		cd->have_shared = 0;
		return foreign;
	}
	uint64_t hash = pmck_store_layout_hash(g->store);
	size_t m = pmck__order_ours(&cd->shared, hash, 0, idx);
	/* Quarantined steps were checkpoints too: their loss is not a fresh start. */
	*nfound += m + pmck__quarantine_count(dir);
	if (m && !recorded && cd->shared.m[idx[0]].world_size != size)
		foreign = cd->shared.m[idx[0]].world_size;
	m = pmck__order_ours(&cd->shared, hash, size, idx);
	cd->gen = m ? cd->shared.m[idx[0]].generation : 0;
	for (size_t k = 0; k < m && cd->shared.m[idx[k]].generation == cd->gen; k++)
		cd->cand[idx[k]] = 1;
	free(idx);
	return foreign;
}

/*
 * Rank 0, once every rank has loaded an older step (no rank reads this one
 * any more): moves damaged complete step `step` to DIR/quarantine, its
 * NOTE and rejection naming the first rank whose file is damaged.  That
 * rank's file is verified again here for the reason (rank 0 cannot ask).
 */
static void
quarantine(struct pmck_global *g, const char *dir, uint64_t step, unsigned rank)
{
	char why[PMCK_REASON_MAX] = "", moved[PATH_MAX];
	struct pmck_rejection *e;

	if (pmck__file_check(dir, step, rank, why, sizeof(why)) == 0)
		snprintf(why, sizeof(why), "rank %u could not load its file", rank);
	int q = pmck__quarantine_step(dir, step, why, moved, sizeof(moved));
	if (q == 0 && (e = pmck__reject(g->store, rank, PMCK_TIER_SHARED, step, "%s; moved to %s",
			why, moved)))
		e->quarantined = 1;
	else if (q && q != -ENOENT) /* -ENOENT: another recovery moved it first */
		pmck__reject(g->store, rank, PMCK_TIER_SHARED, step, "%s (not moved to quarantine: %s)",
				why, pmck_errormsg());
}

int
pmck_global_recover(struct pmck_global *g, const char *dir, struct pmck_global_recovery *out)
{
	struct candidates cd = {0};
	int ret = 0;

	memset(out, 0, sizeof(*out));
	/* Every rank completes a request in flight; its outcome no longer matters. */
	pmck__global_complete(g);
	pmck__reject_start(g->store, g->c.rank);
	pthread_mutex_lock(&g->lock);
	g->broken = 0;
	pthread_mutex_unlock(&g->lock);
	uint64_t found, foreign = find_candidates(g, dir, &cd, &found);
	pthread_mutex_lock(&g->lock);
	struct pmck_partner *partner = g->partner;
	pthread_mutex_unlock(&g->lock);
	/* Every rank with a partner tier (all or none): which copies do the holders verify? */
	if (partner && (ret = pmck__partner_offer(partner, cd.partner, &cd.npartner)) == 0)
		found += cd.npartner;
	cd.self[0] = cd.self[1] = -1;
	if (partner)
		pmck__partner_self_steps(partner, cd.self);
	found += (cd.self[0] >= 0) + (cd.self[1] >= 0);

	/*
	 * Before anything is loaded, discarded or removed: is the newest
	 * checkpoint any rank sees one of another world size?  Then every rank
	 * refuses (resharding is not pmckpt's business) and nothing changes.
	 * Also: did any rank see a candidate at all (for the error code)?
	 */
	uint64_t any_foreign = foreign;
	if (!ret)
		ret = reduce(g, &any_foreign, PMCK_REDUCE_MAX);
	if (!ret)
		ret = reduce(g, &found, PMCK_REDUCE_MAX);
	if (!ret && any_foreign)
		ret = pma__err(PMCK_E_WORLD_SIZE, "the newest checkpoint was written by %" PRIu64
				" ranks, this job has %u: not recovered (nothing changed; resharding "
				"is left to the caller)%s", any_foreign, g->c.size,
				foreign ? "" : " [seen by another rank]");

	/*
	 * Agree on the newest step every rank can produce: start from the
	 * min of the ranks' newest candidates; while some rank cannot produce
	 * the agreed step (its slot fails verification, say), every rank
	 * offers its newest candidate below it and the group tries again.
	 * All ranks run the same reductions in the same order.
	 */
	uint64_t agreed = newest_below(&cd, UINT64_MAX);
	int source = 0, damaged;
	char local_why[PMCK_REASON_MAX] = "";
	/* Damaged shared steps, each with the lowest rank whose file is damaged (+1). */
	size_t ndamaged = 0;
	uint64_t *dstep = calloc(cd.shared.n + 3, sizeof(*dstep)),
		 *drank = calloc(cd.shared.n + 3, sizeof(*drank));
	/* Without memory for the list, this rank (if rank 0) quarantines nothing: no other change. */
	size_t dcap = dstep && drank ? cd.shared.n + 2 : 0;
	if (!ret)
		ret = reduce(g, &agreed, PMCK_REDUCE_MIN);
	while (!ret && agreed != NONE) {
		local_why[0] = 0;
		source = can_produce(g, dir, &cd, agreed - 1, &damaged, local_why, sizeof(local_why));
		uint64_t all = source ? 1 : 0;
		if ((ret = reduce(g, &all, PMCK_REDUCE_MIN)) || all)
			break;
		/*
		 * Passed over: who could not produce it (for the ranks that could,
		 * whose candidate is rejected all the same), and whose shared file
		 * of it is damaged (rank 0 quarantines the step once all have loaded).
		 */
		uint64_t who = source ? UINT64_MAX : g->c.rank;
		uint64_t dmg = damaged ? UINT64_MAX - g->c.rank : 0;
		if ((ret = reduce(g, &who, PMCK_REDUCE_MIN)) || (ret = reduce(g, &dmg, PMCK_REDUCE_MAX)))
			break;
		if (source)
			pmck__reject(g->store, g->c.rank, source == FROM_LOCAL || source == FROM_SELF ?
					PMCK_TIER_LOCAL :
					source == FROM_PARTNER ? PMCK_TIER_PARTNER : PMCK_TIER_SHARED,
					agreed - 1, "rank %" PRIu64 " cannot produce it", who);
		if (dmg && ndamaged < dcap) {
			dstep[ndamaged] = agreed - 1;
			drank[ndamaged++] = UINT64_MAX - dmg;
		}
		uint64_t next = newest_below(&cd, agreed);
		if ((ret = reduce(g, &next, PMCK_REDUCE_MIN)))
			break;
		agreed = next;
	}
	/*
	 * Nothing agreed: name a rank that has nothing left at all, and the
	 * rank that held its partner copy (every rank reduces, so all can say it).
	 */
	uint64_t lost = UINT64_MAX;
	if (!ret && agreed == NONE && found && partner) {
		lost = newest_below(&cd, UINT64_MAX) == NONE ? g->c.rank : UINT64_MAX;
		ret = reduce(g, &lost, PMCK_REDUCE_MIN);
	}
	if (!ret && agreed == NONE && lost != UINT64_MAX)
		ret = pma__err(PMCK_E_NONE_USABLE, "rank %" PRIu64 " lost both its local store and its "
				"partner copy (held by rank %u)%s: no step can be produced by every rank",
				lost, pmck__partner_target_of(partner, (unsigned)lost),
				cd.have_shared ? ", and the shared directory has none of its files" :
				", and no shared directory was given");
	else if (!ret && agreed == NONE)
		ret = pma__err(found ? PMCK_E_NONE_USABLE : PMCK_E_NO_CHECKPOINT,
				"%s (rank %u has local steps %lld/%lld%s)", found ?
				"checkpoints exist but no step can be produced by every rank" :
				"nothing was saved: no rank has a checkpoint", g->c.rank,
				(long long)cd.local[0], (long long)cd.local[1],
				cd.have_shared ? " and the shared directory" : "");
	uint64_t step = agreed - 1;

	/* Load it: newer local slots were never global and are discarded first. */
	struct pmck_recovery rec;
	int agreed_ok = !ret; /* alike on every rank: the partner exchange below pairs */
	if (!ret)
		ret = pmck_store_discard_after(g->store, step);
	if (agreed_ok && partner) {
		/* Every rank takes part: holders send, owners that need it receive. */
		int pret = pmck__partner_restore(partner, !ret && source == FROM_PARTNER ? step + 1 : 0,
				step);
		if (!ret && pret)
			ret = pret;
	}
	/*
	 * The slot to load was verified by this recovery: a local one by
	 * can_produce, a received or copied one when it was sealed (against
	 * the checksums of the holder or of the own copy): adopted, not
	 * hashed again.
	 */
	if (!ret && source == FROM_PARTNER) {
		ret = pmck__store_adopt_step(g->store, step, &rec);
		out->tier = PMCK_TIER_PARTNER;
		snprintf(out->reason, sizeof(out->reason), "step %" PRIu64 " from the partner copy on "
				"rank %u (%.180s)", step, pmck__partner_target_of(partner, g->c.rank),
				local_why[0] ? local_why : "no local slot holds it");
	} else if (!ret && source == FROM_LOCAL) {
		ret = pmck__store_adopt_step(g->store, step, &rec);
		out->tier = PMCK_TIER_LOCAL;
		snprintf(out->reason, sizeof(out->reason), "step %" PRIu64 " from the local slot", step);
	} else if (!ret && source == FROM_SELF) {
		/* The slots moved on past the last partner step (a node was lost): its own copy. */
		if (!(ret = pmck__partner_self_restore(partner, step)))
			ret = pmck__store_adopt_step(g->store, step, &rec);
		out->tier = PMCK_TIER_LOCAL;
		snprintf(out->reason, sizeof(out->reason), "step %" PRIu64 " from this rank's own copy "
				"of its partner step (%.180s)", step, local_why[0] ? local_why :
				"no local slot holds it");
	} else if (!ret) {
		char path[PATH_MAX];
		if (!(ret = shared_file(g, dir, step, path, sizeof(path))) &&
		    !(ret = pmck__safetensors_import(g->store, path, step, 1)))
			ret = pmck__store_recover_step(g->store, step, &rec);
		out->tier = PMCK_TIER_SHARED;
		snprintf(out->reason, sizeof(out->reason), "step %" PRIu64 " from %.300s (%.180s)",
				step, path, local_why[0] ? local_why : "no local slot holds it");
	}
	/* Every rank reports whether it loaded; one failure fails all. */
	uint64_t ok = ret ? 0 : 1;
	int cret = reduce(g, &ok, PMCK_REDUCE_MIN);
	if (!ret && cret)
		ret = cret;
	else if (!ret && !ok)
		ret = pma__err(PMCK_E_NONE_USABLE, "another rank could not load step %" PRIu64, step);

	/*
	 * Rank 0 drops newer steps of this run from the shared directory: they
	 * are leftovers (incomplete, or complete steps of this lineage that
	 * some rank could not produce).  Another layout's or world size's
	 * steps, and older generations, are not this recovery's to remove.
	 */
	if (!ret && g->c.rank == 0 && cd.have_shared) {
		for (size_t k = 0; k < ndamaged; k++)
			quarantine(g, dir, dstep[k], (unsigned)drank[k]);
		/*
		 * A complete step newer than the agreed one that was not found
		 * damaged could not be read for a passing reason (-EIO, -EACCES):
		 * it stays, and is tried again by the next recovery.
		 */
		for (size_t i = 0; i < cd.shared.n; i++) {
			if (cd.shared.step[i] > (int64_t)step && !cd.shared.complete[i]) {
				char name[64];
				snprintf(name, sizeof(name), "step-%012" PRId64, cd.shared.step[i]);
				pmck__remove_step(dir, name);
			}
		}
	}
	if (cd.have_shared)
		pmck__free_steps(&cd.shared);
	free(cd.cand);
	free(dstep);
	free(drank);
	if (!ret) {
		int bret = g->c.barrier(g->c.ctx);
		if (bret)
			ret = pma__err(bret, "barrier failed");
	}
	if (!ret) {
		out->step = step;
		pthread_mutex_lock(&g->lock);
		g->last_global = (int64_t)step;
		pthread_mutex_unlock(&g->lock);
	}
	if (!ret && partner) {
		/*
		 * Every rank (the barrier passed everywhere): the holders that lost
		 * this rank's copy of the step (a replaced node's) get it again, in
		 * the background, before the round of the next step.
		 */
		int held = 0;
		for (size_t i = 0; i < cd.npartner; i++)
			held |= cd.partner[i] == (int64_t)step;
		pmck__partner_resend(partner, step, held);
	}
	return ret;
}
