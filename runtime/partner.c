/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * partner.c -- partner copies: each rank's committed steps also kept in
 * the memory of a rank on another node (see "partner copies" in pmckpt.h
 * and docs/multirank.md).
 *
 * A round of step s runs on every rank's partner thread, in step order:
 *   1. header: sendrecv(target, mine, source, theirs): step, whether data
 *      follows (the sender committed s), layout hash, the sender's
 *      committed checksums;
 *   2. data: per tensor, pieces of PIECE bytes, sendrecv(target, my slot,
 *      source, the held store's slot); what arrives is flushed and hashed
 *      as it lands;
 *   3. seal: commit of the held store, refused unless every checksum
 *      equals the sender's (pmck__ckpt_commit_expect);
 *   4. status: sendrecv(source, what became of its copy, target, what
 *      became of mine).
 * Both halves of every sendrecv are sized from what both sides know (the
 * layout, the header), so they always pair; a receiver that cannot keep a
 * copy still takes its bytes (into a scratch piece) and says so in step 4.
 *
 * With `every` N > 1 only every N-th round moves data (a copy step; every
 * rank counts the same rounds, so all agree which), the others only offer
 * their step.  A copy step also goes, piece by piece as it is sent, into
 * the rank's self store (<name>.partner-self): the two local slots rotate
 * on, and a survivor of a lost node must still hold the step the partners
 * hold for the lost ranks.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define PIECE (4u * PMCK_HASH_CHUNK) /* bytes per sendrecv: chunk-aligned for hashing as it lands */
#define QUEUE 4
#define ROUND_MAGIC 0x31545250434b4d50ull /* "PMCKPRT1" */
#define NO_RANK UINT_MAX

struct job {
	uint64_t step;
	int committed;  /* this rank sealed the step (what it offers) */
	int copy;       /* the round moves data (every N-th step, or resent), else it only offers */
	int send;       /* data follows for the holder (resent: only if the holder lacks it) */
	int self;       /* the step also goes into the self store */
	int pinned;     /* slot is pinned until the round ends */
	unsigned slot;
	int resend;     /* a copy sent again after recovery: the step is global already */
};

struct held {
	struct pmck_local l;
	int open;
};

struct pmck_partner {
	struct pmck_global *g;
	struct pmck_store *store;   /* this rank's own */
	struct pmck_collectives c;
	unsigned keep, nheld;
	unsigned every;             /* a copy step every `every` rounds */
	unsigned since;             /* rounds queued since the last copy step, mod every */
	unsigned target, source;
	struct held held[(PMCK_PARTNER_KEEP_MAX + 1) / 2]; /* copies of the source's steps */
	struct held self;           /* every > 1: this rank's own copy steps, outside its slots */
	uint64_t *expect;           /* scratch: the sender's checksums (round header) */
	size_t hdr_words;
	uint64_t *hdr_out, *hdr_in;
	char *scratch;              /* a piece received that cannot be kept */

	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct job queue[QUEUE];
	unsigned head, len;
	int busy, stop;
	int prefaulted;             /* held and own copies populated (partner thread only) */
	int fail;                   /* first failure not yet reported */
	_Atomic int broken;         /* a sendrecv failed: the pairs are out of step, no more rounds */
	unsigned *targets;          /* every rank's target (for messages) */
	char failmsg[512];
	struct pmck_partner_stats stats;
};

/* ------------------------------------------------------------ placement */

struct member {
	uint64_t node;
	unsigned rank;
};

static int
by_node(const void *a, const void *b)
{
	const struct member *x = a, *y = b;
	if (x->node != y->node)
		return x->node < y->node ? -1 : 1;
	return x->rank < y->rank ? -1 : x->rank > y->rank;
}

int
pmck_partner_place(const uint64_t *node, unsigned n, unsigned *target)
{
	if (!node || !target || n == 0)
		return pma__err(-EINVAL, "pmck_partner_place: nodes, a rank count and target are "
				"required");
	struct member *m = malloc(n * sizeof(*m));
	unsigned *start = malloc((n + 1) * sizeof(*start)); /* node g: m[start[g] .. start[g+1]) */
	if (!m || !start) {
		free(m);
		free(start);
		return pma__err(-ENOMEM, "out of memory");
	}
	for (unsigned r = 0; r < n; r++)
		m[r] = (struct member){node[r], r};
	qsort(m, n, sizeof(*m), by_node);
	unsigned k = 0, largest = 0, equal = 1;
	for (unsigned j = 0; j < n; j++)
		if (j == 0 || m[j].node != m[j - 1].node)
			start[k++] = j;
	start[k] = n;
	for (unsigned g = 0; g < k; g++) {
		unsigned size = start[g + 1] - start[g];
		largest = size > largest ? size : largest;
		equal &= size == start[1] - start[0];
	}
	int ret = 0;
	if (k < 2) {
		ret = pma__err(-EINVAL, "all %u ranks are on one node (%" PRIu64 "): a partner copy "
				"must live on another node, or it is lost with the node", n, node[0]);
	} else if (equal) {
		/* Local rank i of node g -> local rank i of node g + 1 + i mod (k - 1). */
		unsigned size = start[1];
		for (unsigned g = 0; g < k; g++)
			for (unsigned i = 0; i < size; i++)
				target[m[start[g] + i].rank] = m[start[(g + 1 + i % (k - 1)) % k] + i].rank;
	} else if (largest > n - largest) {
		ret = pma__err(-EINVAL, "a node holds %u of the %u ranks, more than half: not every "
				"rank can have a partner on another node", largest, n);
	} else {
		/* Node by node, `largest` places further along: never the same node. */
		for (unsigned j = 0; j < n; j++)
			target[m[j].rank] = m[(j + largest) % n].rank;
	}
	free(m);
	free(start);
	return ret;
}

/* ------------------------------------------------------------- opening */

static int
gather(struct pmck_partner *p, uint64_t value, uint64_t *all)
{
	int ret;

	if (p->c.allgather_u64)
		return p->c.allgather_u64(p->c.ctx, value, all);
	for (unsigned r = 0; r < p->c.size; r++) {
		all[r] = r == p->c.rank ? value : 0;
		if ((ret = p->c.allreduce_u64(p->c.ctx, &all[r], PMCK_REDUCE_MAX)))
			return ret;
	}
	return 0;
}

/* One store of copies, pmckpt-<name>.pool in the tier's directory, with the layout d[0..n). */
static int
open_copy_store(const struct pmck_partner_opts *o, const char *name,
		const struct pmck_tensor_desc *d, size_t n, struct held *h)
{
	char path[PATH_MAX];
	/*
	 * Not prefaulted: the partner thread writes these in the background, and
	 * populating them at open would lengthen a restart (pmck_partner_new
	 * runs before recovery) by the time it takes to zero their pages.
	 */
	struct pmck_local_opts lo = {.ramdisk_dir = o->ramdisk_dir, .store_name = name,
			.descs = d, .ndescs = n,
			.flags = (o->flags & PMCK_LOCAL_SHARED_DIR) | PMCK_LOCAL_NO_PREFAULT};
	if (o->pm_dir) {
		if (snprintf(path, sizeof(path), "%s/pmckpt-%s.pool", o->pm_dir, name) >=
		    (int)sizeof(path))
			return pma__err(-ENAMETOOLONG, "pm_dir '%s' is too long", o->pm_dir);
		lo.pm_path = path;
	}
	int ret = pmck_local_open(&lo, &h->l);
	h->open = ret == 0;
	return ret;
}

/*
 * The held stores, pmckpt-<name>.partner-of-<source>[.<j>].pool, and with
 * every > 1 the self store, pmckpt-<name>.partner-self.pool: the group's layout.
 */
static int
open_held(struct pmck_partner *p, const struct pmck_partner_opts *o)
{
	size_t n = pmck_store_ntensors(p->store);
	struct pmck_tensor_desc *d = calloc(n ? n : 1, sizeof(*d));
	const char *base = o->store_name ? o->store_name : "default";
	char name[STORE_NAME_MAX];
	int ret = d ? 0 : pma__err(-ENOMEM, "out of memory");

	for (size_t i = 0; !ret && i < n; i++) {
		struct pmck_tensor_info ti;
		pmck_store_tensor(p->store, i, &ti);
		d[i] = (struct pmck_tensor_desc){.name = ti.name, .dtype = ti.dtype, .ndim = ti.ndim,
				.layer = ti.layer};
		memcpy(d[i].shape, ti.shape, sizeof(d[i].shape));
	}
	for (unsigned j = 0; !ret && j <= p->nheld; j++) {
		int self = j == p->nheld;
		if (self && p->every < 2)
			break;
		int len = self ? snprintf(name, sizeof(name), "%s.partner-self", base) :
			p->nheld == 1 ?
			snprintf(name, sizeof(name), "%s.partner-of-%u", base, p->source) :
			snprintf(name, sizeof(name), "%s.partner-of-%u.%u", base, p->source, j);
		if (len < 0 || (size_t)len >= sizeof(name)) {
			ret = pma__err(-ENAMETOOLONG, "store name '%s' is too long for its partner "
					"copies (%d of %zu bytes)", base, len, sizeof(name) - 1);
			break;
		}
		if ((ret = open_copy_store(o, name, d, n, self ? &p->self : &p->held[j])) && self)
			pma__err_prefix(ret, "this rank's own copy of its partner steps");
		else if (ret)
			pma__err_prefix(ret, "the partner copies this rank holds for rank %u", p->source);
	}
	free(d);
	return ret;
}

static void *partner_thread(void *arg);

/* The newest step sealed in a held store, -1: none. */
static int64_t
held_newest(const struct pmck_store *h)
{
	int64_t a = pmck_store_slot_step(h, 0), b = pmck_store_slot_step(h, 1);
	return a > b ? a : b;
}

static void
release(struct pmck_partner *p)
{
	for (unsigned j = 0; j < p->nheld; j++)
		if (p->held[j].open)
			pmck_local_close(&p->held[j].l);
	if (p->self.open)
		pmck_local_close(&p->self.l);
	free(p->hdr_out);
	free(p->hdr_in);
	free(p->scratch);
	free(p->targets);
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->cond);
	free(p);
}

int
pmck_partner_new(struct pmck_global *g, const struct pmck_collectives *c,
		const struct pmck_partner_opts *o, struct pmck_partner **out)
{
	if (!g || !c || !o || !out)
		return pma__err(-EINVAL, "pmck_partner_new: group, collectives, opts and out are "
				"required");
	*out = NULL;
	const struct pmck_collectives *gc = pmck__global_coll(g);
	if (c->rank != gc->rank || c->size != gc->size || !c->allreduce_u64)
		return pma__err(-EINVAL, "pmck_partner_new: the collectives (rank %u of %u) are not "
				"the group's (rank %u of %u)", c->rank, c->size, gc->rank, gc->size);
	if (o->keep > PMCK_PARTNER_KEEP_MAX || (o->flags & ~PMCK_LOCAL_SHARED_DIR))
		return pma__err(-EINVAL, "pmck_partner_new: keep %u (1..%u) or flags %#x", o->keep,
				PMCK_PARTNER_KEEP_MAX, o->flags);
	/*
	 * Checks that could differ between ranks fail collectively below (the
	 * node gather still runs), so that no rank is left waiting.
	 */
	struct pmck_partner *p = calloc(1, sizeof(*p));
	uint64_t *nodes = calloc(c->size, sizeof(*nodes));
	unsigned *target = calloc(c->size, sizeof(*target));
	if (!p || !nodes || !target) {
		free(p);
		free(nodes);
		free(target);
		return pma__err(-ENOMEM, "out of memory");
	}
	p->g = g;
	p->store = pmck__global_store(g);
	p->c = *c;
	p->keep = o->keep ? o->keep : 2;
	p->nheld = (p->keep + 1) / 2;
	p->every = o->every ? o->every : 1;
	p->stats.confirmed_step = p->stats.held_step = p->stats.self_step = -1;
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->cond, NULL);

	int ret = gather(p, o->node, nodes);
	if (ret)
		ret = pma__err(ret, "gathering the ranks' nodes failed (%d)", ret);
	if (!ret)
		ret = pmck_partner_place(nodes, c->size, target);
	if (!ret) {
		p->target = target[c->rank];
		for (unsigned r = 0; r < c->size; r++)
			if (target[r] == c->rank)
				p->source = r;
		p->stats.target = p->target;
		p->stats.source = p->source;
	}
	/* Every rank: is sendrecv there, and could it open what it holds? */
	uint64_t bad = ret ? 0 : !c->sendrecv ? 1 : 0;
	if (!ret && !bad && (ret = open_held(p, o)))
		bad = 2;
	if (!ret || bad) {
		uint64_t any = bad;
		int rret = c->allreduce_u64(c->ctx, &any, PMCK_REDUCE_MAX);
		if (rret)
			ret = ret ? ret : pma__err(rret, "allreduce failed (%d)", rret);
		else if (bad == 1)
			ret = pma__err(-EINVAL, "partner copies need the collectives' sendrecv (MPI: "
					"MPI_Init_thread with MPI_THREAD_MULTIPLE)");
		else if (!ret && any)
			ret = pma__err(-EIO, "another rank could not set up its partner copies");
	}
	/* Every rank counts the same rounds as copy steps only with the same `every`. */
	uint64_t most = p->every, least = ~(uint64_t)p->every;
	if (!ret && !(ret = c->allreduce_u64(c->ctx, &most, PMCK_REDUCE_MAX)) &&
	    !(ret = c->allreduce_u64(c->ctx, &least, PMCK_REDUCE_MAX)) && most != ~least)
		ret = pma__err(-EINVAL, "the ranks copy every %" PRIu64 " to every %" PRIu64 " steps: "
				"`every` must be the same on every rank", ~least, most);
	else if (ret && ret != -EINVAL)
		ret = pma__err(ret, "allreduce failed (%d)", ret);
	size_t n = pmck_store_ntensors(p->store);
	p->hdr_words = 7 + n;
	if (!ret && (!(p->hdr_out = calloc(p->hdr_words, 8)) || !(p->hdr_in = calloc(p->hdr_words, 8)) ||
		     !(p->scratch = malloc(PIECE))))
		ret = pma__err(-ENOMEM, "out of memory");
	if (!ret && pthread_create(&p->thread, NULL, partner_thread, p))
		ret = pma__err(-EAGAIN, "cannot start the partner thread");
	free(nodes);
	p->targets = target;
	if (ret) {
		release(p);
		return ret;
	}
	for (unsigned j = 0; j < p->nheld; j++)
		if (held_newest(p->held[j].l.store) > p->stats.held_step)
			p->stats.held_step = held_newest(p->held[j].l.store);
	if (p->self.open)
		p->stats.self_step = held_newest(p->self.l.store);
	pmck__global_set_partner(g, p);
	*out = p;
	return 0;
}

void
pmck_partner_delete(struct pmck_partner **pp)
{
	struct pmck_partner *p = pp ? *pp : NULL;

	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stop = 1;
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
	pthread_join(p->thread, NULL); /* queued rounds run: the peers expect them */
	pmck__global_set_partner(p->g, NULL);
	release(p);
	*pp = NULL;
}

unsigned
pmck__partner_target_of(const struct pmck_partner *p, unsigned rank)
{
	return p->targets[rank];
}

/* --------------------------------------------------------------- rounds */

/* Does the self store hold `step` sealed? */
static int
self_holds(const struct pmck_partner *p, uint64_t step)
{
	return p->self.open && (pmck_store_slot_step(p->self.l.store, 0) == (int64_t)step ||
				pmck_store_slot_step(p->self.l.store, 1) == (int64_t)step);
}

/*
 * Queues the round of `step`.  A copy step (every `every`-th round, and a
 * resent step) moves data: send: for the holder; self: into the self
 * store; the slot it is read from stays pinned until the round ends.
 * Other rounds only offer the step, in order behind the rounds before it.
 */
static void
queue_round(struct pmck_partner *p, uint64_t step, int committed, int send, int self, int resend)
{
	struct pmck_store *s = p->store;
	int slot = -1;
	pthread_mutex_lock(&p->lock);
	while (p->len == QUEUE)
		pthread_cond_wait(&p->cond, &p->lock);
	/* Every rank queues the same rounds in the same order: they agree on the copy steps. */
	int copy = resend || p->since == 0;
	p->since = resend ? 1 % p->every : (p->since + 1) % p->every;
	for (unsigned k = 0; copy && (send || self) && k < 2; k++)
		if (pmck__sealed_step(s, k) == (int64_t)step)
			slot = (int)k;
	/* Pinned before the caller can begin again: the next begin targets the other slot. */
	if (slot >= 0)
		pmck__slot_pin(s, (unsigned)slot);
	p->queue[(p->head + p->len) % QUEUE] = (struct job){.step = step,
			.committed = committed && (!copy || slot >= 0), .copy = copy,
			.send = send && slot >= 0, .self = self && p->self.open && slot >= 0,
			.pinned = slot >= 0, .slot = slot >= 0 ? (unsigned)slot : 0, .resend = resend};
	p->len++;
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
}

int
pmck__partner_submit(struct pmck_partner *p, uint64_t step, int committed)
{
	queue_round(p, step, committed, committed, committed, 0);
	return 0;
}

void
pmck__partner_resend(struct pmck_partner *p, uint64_t step, int held)
{
	/* The partner thread is idle (recovery): the self store can be read here. */
	queue_round(p, step, 1, !held, !self_holds(p, step), 1);
}

static int
xfer(struct pmck_partner *p, unsigned dst, const void *sbuf, size_t slen, unsigned src,
		void *rbuf, size_t rlen)
{
	int ret = p->c.sendrecv(p->c.ctx, dst, sbuf, slen, src, rbuf, rlen);
	if (!ret)
		return 0;
	p->broken = 1;
	return pma__err(ret, "sendrecv (to rank %u, from rank %u) failed (%d)", dst, src, ret);
}

/* The round header of slot k's step (have: data follows). */
static void
fill_header(struct pmck_partner *p, const struct pmck_store *s, uint64_t step, int have,
		unsigned k)
{
	size_t n = pmck_store_ntensors(s);
	uint64_t *h = p->hdr_out;
	h[0] = ROUND_MAGIC;
	h[1] = step;
	h[2] = (uint64_t)have;
	h[3] = pmck_store_layout_hash(s);
	h[4] = pmck_store_tensor_bytes(s);
	h[5] = have ? s->slot[k]->world : 0;
	h[6] = n;
	for (size_t i = 0; i < n; i++)
		h[7 + i] = have ? s->csum[k][i] : 0;
}

static int
check_header(struct pmck_partner *p, const uint64_t *h, uint64_t step, unsigned from)
{
	const struct pmck_store *s = p->store;
	if (h[0] != ROUND_MAGIC || h[6] != pmck_store_ntensors(s) || h[3] != pmck_store_layout_hash(s) ||
	    h[4] != pmck_store_tensor_bytes(s))
		return pma__err(PMCK_E_LAYOUT, "rank %u's partner header does not match this "
				"store's layout (hash %016" PRIx64 ", this %016" PRIx64 ")", from, h[3],
				pmck_store_layout_hash(s));
	if (h[1] != step)
		return pma__err(-EPROTO, "rank %u sent step %" PRIu64 " for the round of step %" PRIu64,
				from, h[1], step);
	return 0;
}

/* The held store that receives the next copy: the one whose newest step is oldest. */
static struct pmck_store *
next_held(struct pmck_partner *p)
{
	unsigned best = 0;
	int64_t best_step = INT64_MAX;
	for (unsigned j = 0; j < p->nheld; j++) {
		int64_t newest = held_newest(p->held[j].l.store);
		if (newest < best_step) {
			best_step = newest;
			best = j;
		}
	}
	return p->held[best].l.store;
}

/* Keeps the newest `keep` sealed copies across the held stores, and none newer than `upto`. */
static void
trim_held(struct pmck_partner *p, int64_t upto)
{
	for (;;) {
		unsigned count = 0, oj = 0, ok = 0;
		int64_t oldest = INT64_MAX;
		for (unsigned j = 0; j < p->nheld; j++) {
			struct pmck_store *h = p->held[j].l.store;
			for (unsigned k = 0; k < 2; k++) {
				int64_t st = pmck_store_slot_step(h, k);
				if (st < 0)
					continue;
				if (st > upto) {
					pmck__slot_unseal(h, k);
					continue;
				}
				count++;
				if (st < oldest) {
					oldest = st;
					oj = j;
					ok = k;
				}
			}
		}
		if (count <= p->keep)
			return;
		pmck__slot_unseal(p->held[oj].l.store, ok);
	}
}

/* Unseals the self store's slots newer than `upto` (never global). */
static void
trim_self(struct pmck_partner *p, int64_t upto)
{
	for (unsigned k = 0; p->self.open && k < 2; k++)
		if (pmck_store_slot_step(p->self.l.store, k) > upto)
			pmck__slot_unseal(p->self.l.store, k);
}

/*
 * Sends what the header in hdr_out promised from slot k of s to `dst`
 * while receiving what hdr_in promised from `src` into *into (NULL: into
 * scratch, dropped).  *into becomes NULL if writing it fails midway.  Each
 * piece of slot k also goes into *self (may be NULL), as it is sent; a
 * failure there aborts *self, sets it NULL and leaves its code in *self_ret.
 */
static int
move_data(struct pmck_partner *p, const struct pmck_store *s, unsigned k, unsigned dst,
		struct pmck_ckpt **into, unsigned src, struct pmck_ckpt **self, int *self_ret,
		uint64_t *sent, uint64_t *received)
{
	int send = p->hdr_out[2] != 0, recv = p->hdr_in[2] != 0;
	size_t n = pmck_store_ntensors(s);
	int ret = 0;

	for (size_t i = 0; i < n && !ret; i++) {
		struct pmck_tensor_info ti;
		pmck_store_tensor(s, i, &ti);
		const char *from = s->data[k] + ti.offset;
		char *to = *into ? pmck_ckpt_tensor_ptr(*into, i) : NULL;
		for (uint64_t off = 0; off < ti.nbytes && !ret; off += PIECE) {
			size_t len = ti.nbytes - off < PIECE ? ti.nbytes - off : PIECE;
			ret = xfer(p, dst, from + off, send ? len : 0, src,
					to ? to + off : p->scratch, recv ? len : 0);
			if (!ret && recv && to)
				pmck__ckpt_landed(*into, i, off, len);
			/* Copied and hashed while the piece is still in the cache. */
			if (!ret && self && *self &&
			    (*self_ret = pmck_ckpt_write_range(*self, i, off, from + off, len))) {
				pmck_ckpt_abort(*self);
				*self = NULL;
			}
			*sent += send && !ret ? len : 0;
			*received += recv && !ret ? len : 0;
		}
	}
	return ret;
}

/*
 * One round (see the top of the file).  *confirmed: the target sealed this
 * rank's copy; *kept: this rank sealed its source's; *self_kept: the self store sealed the step.
 */
static int
run_round(struct pmck_partner *p, const struct job *j, int *confirmed, int *kept, int *self_kept,
		uint64_t *sent, uint64_t *received)
{
	struct pmck_store *s = p->store;
	struct pmck_ckpt *c = NULL, *mine = NULL;
	int ret, keep_ret = 0, self_ret = 0;

	*confirmed = *kept = 0;
	if (!j->copy)
		return 0; /* between copy steps: nothing moves, the step is offered as committed */
	fill_header(p, s, j->step, j->send, j->slot);
	if ((ret = xfer(p, p->target, p->hdr_out, p->hdr_words * 8, p->source, p->hdr_in,
			p->hdr_words * 8)))
		return ret;
	if ((ret = check_header(p, p->hdr_in, j->step, p->source))) {
		/* The data halves could not be sized alike: the round (and the tier) stops here. */
		return ret;
	}
	if (p->hdr_in[2]) {
		/* Copies newer than this step are leftovers of a run that recovered to an older one. */
		trim_held(p, (int64_t)j->step - 1);
		struct pmck_store *h = next_held(p);
		/* The copy records the sender's world size and rank, as its own slot does. */
		h->world_tag = p->hdr_in[5];
		if ((keep_ret = pmck_store_begin(h, j->step, &c)))
			c = NULL;
	}
	if (j->self) {
		struct pmck_store *h = p->self.l.store;
		trim_self(p, (int64_t)j->step - 1);
		h->world_tag = s->slot[j->slot]->world;
		if ((self_ret = pmck_store_begin(h, j->step, &mine)))
			mine = NULL;
	}
	ret = move_data(p, s, j->slot, p->target, &c, p->source, &mine, &self_ret, sent, received);
	if (!ret && c) {
		/* Persist point: the copy is sealed only if it is what the sender committed. */
		if (!(keep_ret = pmck__ckpt_commit_expect(c, &p->hdr_in[7]))) {
			*kept = 1;
			trim_held(p, INT64_MAX);
		}
	} else if (c) {
		pmck_ckpt_abort(c);
	}
	/*
	 * Persist point: the self copy is sealed only if it equals the
	 * committed slot; the step is offered (and can become global) only
	 * after this, so once it is global every survivor of a lost node
	 * holds it here, whatever its two slots have moved on to.
	 */
	if (!ret && mine)
		self_ret = pmck__ckpt_commit_expect(mine, s->csum[j->slot]);
	else if (mine)
		pmck_ckpt_abort(mine);
	/* Status: to the source what became of its copy, from the target what became of ours. */
	uint64_t status = 0, theirs = p->hdr_in[2] ? (*kept ? 1 : 2) : 0;
	if (!ret)
		ret = xfer(p, p->source, &theirs, sizeof(theirs), p->target, &status, sizeof(status));
	if (!ret)
		*confirmed = j->send && status == 1;
	if (!ret && keep_ret)
		ret = pma__err(keep_ret, "the partner copy of rank %u's step %" PRIu64 " was not kept: "
				"%s", p->source, j->step, pmck_errormsg());
	if (!ret && j->send && status != 1)
		ret = pma__err(-EIO, "rank %u did not keep this rank's copy of step %" PRIu64 " (%s)",
				p->target, j->step, status == 2 ? "it failed there" : "nothing arrived");
	if (!ret && self_ret)
		ret = pma__err(self_ret, "this rank's own copy of step %" PRIu64 " was not kept: %s",
				j->step, pmck_errormsg());
	*self_kept = j->self && !ret;
	return ret;
}

static void *
partner_thread(void *arg)
{
	struct pmck_partner *p = arg;

	/* As the copier: a wakeup waits its turn instead of preempting training (copyout.c). */
	struct sched_param sp = {0};
	pthread_setschedparam(pthread_self(), SCHED_BATCH, &sp);

	pthread_mutex_lock(&p->lock);
	for (;;) {
		while (!p->stop && p->len == 0)
			pthread_cond_wait(&p->cond, &p->lock);
		if (p->len == 0)
			break;
		struct job j = p->queue[p->head];
		p->busy = 1;
		pthread_mutex_unlock(&p->lock);

		/*
		 * The held and own copies were opened without prefaulting (a restart
		 * does not wait for them): their page tables are populated here,
		 * before the first round, in the background, and not counted as the
		 * round's time.
		 */
		if (!p->prefaulted) {
			for (unsigned k = 0; k < p->nheld; k++)
				if (p->held[k].open)
					pma_region_prefault(p->held[k].l.region);
			if (p->self.open)
				pma_region_prefault(p->self.l.region);
			p->prefaulted = 1;
		}
		int confirmed = 0, kept = 0, self_kept = 0, ret;
		uint64_t sent = 0, received = 0, t0 = pmck__now_ns();
		/* After a transport failure the pairs are out of step: no more rounds. */
		int broken = p->broken;
		ret = broken && j.copy ? -EPIPE :
			run_round(p, &j, &confirmed, &kept, &self_kept, &sent, &received);
		if (ret == PMCK_E_LAYOUT || ret == -EPROTO)
			p->broken = 1; /* the halves could not be sized alike */
		if (j.pinned)
			pmck__slot_unpin(p->store, j.slot);
		/*
		 * Now the group may agree on the step: it is global only if every
		 * rank committed it and every copy of it is sealed, so each
		 * survivor of a lost node still holds (locally) the step the
		 * partners hold for the lost ranks.  A resent step is global
		 * already: no agreement waits for it.
		 */
		if (!j.resend)
			pmck__global_offer(p->g, j.step, j.committed && ret == 0);

		pthread_mutex_lock(&p->lock);
		p->stats.rounds++;
		p->stats.busy_ns += pmck__now_ns() - t0;
		p->stats.bytes_sent += sent;
		p->stats.bytes_received += received;
		if (confirmed) {
			p->stats.sent++;
			p->stats.confirmed_step = (int64_t)j.step;
		}
		if (kept) {
			p->stats.received++;
			p->stats.held_step = (int64_t)j.step;
		}
		if (self_kept)
			p->stats.self_step = (int64_t)j.step;
		if (ret == PMCK_E_CORRUPT)
			p->stats.rejected++;
		if (ret && !p->fail && !broken) {
			p->fail = ret;
			snprintf(p->failmsg, sizeof(p->failmsg), "round of step %" PRIu64 ": %s", j.step,
					ret == -EPIPE ? "an earlier round failed in the transport" :
					pmck_errormsg());
		}
		p->head = (p->head + 1) % QUEUE;
		p->len--;
		p->busy = 0;
		pthread_cond_broadcast(&p->cond);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

int
pmck_partner_wait(struct pmck_partner *p)
{
	pthread_mutex_lock(&p->lock);
	while (p->len)
		pthread_cond_wait(&p->cond, &p->lock);
	int ret = p->fail;
	char msg[sizeof(p->failmsg)];
	memcpy(msg, p->failmsg, sizeof(msg));
	p->fail = 0;
	pthread_mutex_unlock(&p->lock);
	/* The message was the partner thread's: the caller's thread gets it here. */
	return ret ? pma__err(ret, "%s", msg) : 0;
}

void
pmck_partner_stats(struct pmck_partner *p, struct pmck_partner_stats *st)
{
	pthread_mutex_lock(&p->lock);
	*st = p->stats;
	pthread_mutex_unlock(&p->lock);
}

/* ------------------------------------------------------------- recovery */

/* What a holder tells the owner of the copies it holds. */
struct offer {
	uint64_t n;
	uint64_t step[PMCK_PARTNER_KEEP_MAX + 2];
	uint64_t rejected;              /* copies that failed verification */
	uint64_t rej_step;
	char reason[PMCK_REASON_MAX];   /* the first one's reason */
};

int
pmck__partner_offer(struct pmck_partner *p, int64_t *steps, size_t *n)
{
	struct offer mine = {0}, theirs = {0};
	struct pmck_recovery rec;
	int ret;

	*n = 0;
	/* The partner thread is idle: recovery runs before any commit of this run. */
	for (unsigned j = 0; j < p->nheld; j++) {
		struct pmck_store *h = p->held[j].l.store;
		for (unsigned k = 0; k < 2; k++) {
			int64_t st = pmck_store_slot_step(h, k);
			if (st < 0)
				continue;
			pmck__reject_start(h, p->source);
			if (pmck__store_recover_step(h, (uint64_t)st, &rec) == 0) {
				if (mine.n < PMCK_PARTNER_KEEP_MAX + 2)
					mine.step[mine.n++] = (uint64_t)st;
				continue;
			}
			size_t nr;
			const struct pmck_rejection *r = pmck_store_rejections(h, &nr);
			const char *why = r && nr ? r[nr - 1].reason : pmck_errormsg();
			if (!strncmp(why, "local ", 6)) /* "local slot 1 failed ...": a held store's slot */
				why += 6;
			pmck__reject(p->store, p->source, PMCK_TIER_PARTNER, (uint64_t)st,
					"partner copy held here for rank %u: %s", p->source, why);
			if (!mine.rejected++) {
				mine.rej_step = (uint64_t)st;
				snprintf(mine.reason, sizeof(mine.reason), "%s", why);
			}
		}
	}
	if ((ret = xfer(p, p->source, &mine, sizeof(mine), p->target, &theirs, sizeof(theirs))))
		return ret;
	if (theirs.rejected)
		pmck__reject(p->store, p->c.rank, PMCK_TIER_PARTNER, theirs.rej_step,
				"partner copy on rank %u: %.300s%s", p->target, theirs.reason,
				theirs.rejected > 1 ? " (and more)" : "");
	for (uint64_t i = 0; i < theirs.n && i < PMCK_PARTNER_KEEP_MAX; i++)
		steps[(*n)++] = (int64_t)theirs.step[i];
	return 0;
}

int
pmck__partner_restore(struct pmck_partner *p, uint64_t need, uint64_t agreed)
{
	uint64_t asked = 0;
	struct pmck_store *s = p->store, *from = NULL;
	unsigned slot = 0;
	int ret;

	/* Who needs what: this rank asks its target, and learns what its source asks of it. */
	if ((ret = xfer(p, p->target, &need, sizeof(need), p->source, &asked, sizeof(asked))))
		return ret;
	for (unsigned j = 0; asked && j < p->nheld && !from; j++)
		for (unsigned k = 0; k < 2 && !from; k++)
			if (pmck_store_slot_step(p->held[j].l.store, k) == (int64_t)asked - 1) {
				from = p->held[j].l.store;
				slot = k;
			}
	/* The header says whether data follows: a holder that lost the copy meanwhile sends none. */
	if (from)
		fill_header(p, from, asked - 1, 1, slot);
	else
		fill_header(p, s, asked ? asked - 1 : 0, 0, 0);
	int64_t dummy_step = need ? (int64_t)need - 1 : 0;
	if ((ret = xfer(p, p->source, p->hdr_out, p->hdr_words * 8, p->target, p->hdr_in,
			p->hdr_words * 8)))
		return ret;
	int hret = need ? check_header(p, p->hdr_in, (uint64_t)dummy_step, p->target) : 0;
	if (!need)
		p->hdr_in[2] = 0; /* nothing was asked: nothing can follow */
	struct pmck_ckpt *c = NULL;
	int bret = 0;
	if (!hret && need && p->hdr_in[2] && (bret = pmck_store_begin(s, need - 1, &c)))
		c = NULL;
	uint64_t sent = 0, received = 0;
	/* Directions are reversed here: data flows from holder (this rank, to source) to owner. */
	ret = move_data(p, from ? from : s, slot, p->source, &c, p->target, NULL, NULL, &sent,
			&received);
	int cret = 0;
	if (!ret && c)
		/* Persist point: the owner's slot is sealed only with the holder's checksums. */
		cret = pmck__ckpt_commit_expect(c, &p->hdr_in[7]);
	else if (c)
		pmck_ckpt_abort(c);
	/* Copies newer than the agreed step were never global: dropped durably. */
	trim_held(p, (int64_t)agreed);
	trim_self(p, (int64_t)agreed);
	if (ret)
		return ret;
	if (need && hret)
		return hret;
	if (need && !p->hdr_in[2])
		return pma__err(PMCK_E_NONE_USABLE, "rank %u no longer holds this rank's step %" PRIu64,
				p->target, need - 1);
	if (bret || cret)
		return pma__err(bret ? bret : cret, "receiving step %" PRIu64 " from partner rank %u: %s",
				need - 1, p->target, pmck_errormsg());
	return 0;
}

void
pmck__partner_discard_after(struct pmck_partner *p, int64_t step)
{
	trim_held(p, step);
	trim_self(p, step);
}

void
pmck__partner_self_steps(const struct pmck_partner *p, int64_t step[2])
{
	for (unsigned k = 0; k < 2; k++)
		step[k] = p->self.open ? pmck_store_slot_step(p->self.l.store, k) : -1;
}

int
pmck__partner_self_check(struct pmck_partner *p, uint64_t step)
{
	struct pmck_store *h = p->self.l.store;
	struct pmck_recovery rec;
	size_t nr;

	pmck__reject_start(h, p->c.rank);
	if (pmck__store_recover_step(h, step, &rec) == 0)
		return 0;
	const struct pmck_rejection *r = pmck_store_rejections(h, &nr);
	const char *why = r && nr ? r[nr - 1].reason : pmck_errormsg();
	if (!strncmp(why, "local ", 6)) /* "local slot 1 failed ...": the self store's slot */
		why += 6;
	pmck__reject(p->store, p->c.rank, PMCK_TIER_LOCAL, step,
			"this rank's own copy of its partner step: %s", why);
	return PMCK_E_CORRUPT;
}

int
pmck__partner_self_restore(struct pmck_partner *p, uint64_t step)
{
	struct pmck_store *h = p->self.l.store, *s = p->store;
	struct pmck_ckpt *c;
	int k = pmck_store_slot_step(h, 0) == (int64_t)step ? 0 :
		pmck_store_slot_step(h, 1) == (int64_t)step ? 1 : -1;
	if (k < 0)
		return pma__err(PMCK_E_NONE_USABLE, "this rank's own copy of step %" PRIu64 " is gone",
				step);
	int ret = pmck_store_begin(s, step, &c);
	for (size_t i = 0; !ret && i < pmck_store_ntensors(s); i++) {
		struct pmck_tensor_info ti;
		pmck_store_tensor(h, i, &ti);
		ret = pmck_ckpt_write_range(c, i, 0, h->data[k] + ti.offset, ti.nbytes);
	}
	/* Persist point: the slot is sealed only with the checksums the self copy was sealed with. */
	if (!ret)
		return pmck__ckpt_commit_expect(c, h->csum[k]);
	if (c)
		pmck_ckpt_abort(c);
	return ret;
}
