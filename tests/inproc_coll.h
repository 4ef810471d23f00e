/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * inproc_coll.h -- pmckpt collectives between threads of one process
 * (ranks as threads), for the multi-rank tests without MPI.  A struct
 * world is one group of `size` ranks; each rank has a struct member.
 * Reductions are matched by their sequence number per rank, so every rank
 * must issue them in the same order (as MPI requires).
 */
#ifndef PMCK_INPROC_COLL_H
#define PMCK_INPROC_COLL_H 1

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pmckpt.h"

#define ROUNDS 64 /* reductions that may be in flight at once, per world */

struct round {
	uint64_t acc;
	unsigned arrived, left; /* contributions; ranks that have not read the result */
};

#define MAX_RANKS 8 /* ranks of a world that uses sendrecv */

/* A message from one rank to another, posted by sendrecv until its receiver took it. */
struct mailbox {
	const void *buf;
	size_t len;
	int full;
};

struct world {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct round round[ROUNDS];
	int fail_tests; /* completing a reduction fails (a dead peer, say) */
	unsigned size;  /* ranks in this world */
	struct mailbox box[MAX_RANKS][MAX_RANKS]; /* [from][to] */
};

struct member {
	struct world *w;
	uint64_t seq; /* this rank's next reduction: every rank issues them in one order */
	unsigned rank; /* for sendrecv (inproc_partner_collectives sets it) */
};

static inline int
iar_start(void *ctx, uint64_t v, enum pmck_reduce_op op, void **req)
{
	struct member *m = ctx;
	uint64_t seq = m->seq++;
	struct round *r = &m->w->round[seq % ROUNDS];

	pthread_mutex_lock(&m->w->lock);
	if (r->arrived == 0)
		r->acc = v;
	else
		r->acc = op == PMCK_REDUCE_MIN ? (v < r->acc ? v : r->acc) : (v > r->acc ? v : r->acc);
	if (++r->arrived == m->w->size)
		r->left = m->w->size;
	pthread_cond_broadcast(&m->w->cond);
	pthread_mutex_unlock(&m->w->lock);
	*req = (void *)(uintptr_t)seq;
	return 0;
}

static inline int
iar_test(void *ctx, void *req, int wait, int *done, uint64_t *result)
{
	struct member *m = ctx;
	struct round *r = &m->w->round[(uintptr_t)req % ROUNDS];
	int ret = 0;

	pthread_mutex_lock(&m->w->lock);
	while (wait && r->arrived < m->w->size)
		pthread_cond_wait(&m->w->cond, &m->w->lock);
	*done = r->arrived == m->w->size;
	if (*done) {
		*result = r->acc;
		if (--r->left == 0)
			r->arrived = 0;
		if (m->w->fail_tests)
			ret = -EPIPE;
	}
	pthread_mutex_unlock(&m->w->lock);
	return ret;
}

static inline int
allreduce(void *ctx, uint64_t *v, enum pmck_reduce_op op)
{
	void *req;
	int done;

	iar_start(ctx, *v, op, &req);
	return iar_test(ctx, req, 1, &done, v);
}

static inline int
barrier(void *ctx)
{
	uint64_t v = 0;
	return allreduce(ctx, &v, PMCK_REDUCE_MIN);
}

/*
 * sendrecv: posts the send, takes the receive (its length must be what was
 * sent: -EPROTO otherwise, as a truncated MPI receive), then waits until
 * the send was taken.  A half of length 0 is skipped.
 */
static inline int
inproc_sendrecv(void *ctx, unsigned dst, const void *sbuf, size_t slen, unsigned src, void *rbuf,
		size_t rlen)
{
	struct member *m = ctx;
	struct world *w = m->w;
	struct mailbox *out = &w->box[m->rank][dst], *in = &w->box[src][m->rank];
	int ret = 0;

	pthread_mutex_lock(&w->lock);
	if (slen) {
		while (out->full)
			pthread_cond_wait(&w->cond, &w->lock);
		*out = (struct mailbox){sbuf, slen, 1};
		pthread_cond_broadcast(&w->cond);
	}
	if (rlen) {
		while (!in->full)
			pthread_cond_wait(&w->cond, &w->lock);
		if (in->len != rlen)
			ret = -EPROTO;
		else
			memcpy(rbuf, in->buf, rlen);
		in->full = 0;
		pthread_cond_broadcast(&w->cond);
	}
	while (slen && out->full && out->buf == sbuf)
		pthread_cond_wait(&w->cond, &w->lock);
	pthread_mutex_unlock(&w->lock);
	return ret;
}

/* The collectives of member m of a world. */
static inline struct pmck_collectives
inproc_collectives(struct member *m, unsigned rank)
{
	return (struct pmck_collectives){.ctx = m, .rank = rank, .size = m->w->size,
			.allreduce_u64 = allreduce, .barrier = barrier,
			.iallreduce_u64_start = iar_start, .iallreduce_u64_test = iar_test};
}

/* The collectives of member m, with sendrecv for partner copies (no allgather: the fallback). */
static inline struct pmck_collectives
inproc_partner_collectives(struct member *m, unsigned rank)
{
	struct pmck_collectives c = inproc_collectives(m, rank);
	m->rank = rank;
	c.sendrecv = inproc_sendrecv;
	return c;
}

/*
 * inproc_save_steps -- what a rank of the multi-rank tests writes: global
 * steps 1..steps of its one tensor (`bytes` bytes, all step * 7 + rank),
 * each copied out to `shared` (keep 5, as rank `rank` of `world`).
 * *ret: the first failure of the store and global calls, *ret_copy: of the
 * copy-out calls.
 */
static inline void
inproc_save_steps(struct pmck_store *s, struct pmck_global *g, const char *shared,
		unsigned rank, unsigned world, uint64_t steps, size_t bytes, int *ret,
		int *ret_copy)
{
	uint8_t *src = malloc(bytes);
	struct pmck_copyout *co = NULL;
	struct pmck_copyout_opts o = {.dir = shared, .keep = 5, .rank = rank, .world_size = world};

	*ret = src ? 0 : -ENOMEM;
	*ret_copy = *ret ? 0 : pmck_copyout_new(s, &o, &co);
	for (uint64_t step = 1; step <= steps && !*ret && !*ret_copy; step++) {
		struct pmck_ckpt *c;
		memset(src, (int)(step * 7 + rank), bytes);
		if (!(*ret = pmck_global_begin(g, step, &c)) && !(*ret = pmck_ckpt_write(c, 0, src)))
			*ret = pmck_global_commit(g, c);
		if (!*ret)
			*ret_copy = pmck_copyout_submit(co);
	}
	if (!*ret)
		*ret = pmck_global_wait(g, NULL);
	if (co && !*ret_copy)
		*ret_copy = pmck_copyout_wait(co);
	pmck_copyout_delete(&co);
	free(src);
}

#endif
