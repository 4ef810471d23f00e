/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * parallel.c -- running a function over every piece of every tensor of a
 * store (or of other runs of bytes: a copy-out file's tensors) on a few
 * threads: used to write a whole checkpoint and to verify one, and to
 * import or verify a file.  Pieces are multiples of PMCK_HASH_CHUNK, taken
 * in slot (or file) order so that memory streams front to back.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "cpus.h"
#include "internal.h"

struct run {
	int (*fn)(void *arg, uint32_t tensor, uint64_t off, uint64_t len);
	void *arg;
	struct pmck_piece *pieces;
	size_t npieces;
	atomic_size_t next;
	atomic_int error;
	pthread_mutex_t msg_lock;
	char msg[256]; /* the first failing worker's message (messages are thread-local) */
};

struct pmck_piece {
	uint32_t tensor;
	uint64_t off, len, slot_off;
};

static void *
worker(void *arg)
{
	struct run *r = arg;
	size_t j;

	while ((j = atomic_fetch_add(&r->next, 1)) < r->npieces &&
	       !atomic_load_explicit(&r->error, memory_order_relaxed)) {
		const struct pmck_piece *pc = &r->pieces[j];
		int ret = r->fn(r->arg, pc->tensor, pc->off, pc->len);
		int expected = 0;
		if (ret && atomic_compare_exchange_strong(&r->error, &expected, ret)) {
			pthread_mutex_lock(&r->msg_lock);
			snprintf(r->msg, sizeof(r->msg), "%s", pma_errormsg());
			pthread_mutex_unlock(&r->msg_lock);
		}
	}
	return NULL;
}

static int
cmp_slot_off(const void *a, const void *b)
{
	const struct pmck_piece *x = a, *y = b;
	return x->slot_off < y->slot_off ? -1 : x->slot_off > y->slot_off;
}

int
pmck__for_each_piece(const struct pmck_store *s, unsigned threads,
		int (*fn)(void *arg, uint32_t tensor, uint64_t off, uint64_t len), void *arg)
{
	uint32_t n = s->hdr->ntensors;
	struct pmck_span *spans = malloc((n ? n : 1) * sizeof(*spans));

	if (!spans)
		return pma__err(-ENOMEM, "out of memory");
	for (uint32_t i = 0; i < n; i++)
		spans[i] = (struct pmck_span){s->tmap[i].nbytes, s->tmap[i].offset};
	int ret = pmck__for_each_span_piece(spans, n, threads, fn, arg);
	free(spans);
	return ret;
}

int
pmck__for_each_span_piece(const struct pmck_span *spans, uint32_t n, unsigned threads,
		int (*fn)(void *arg, uint32_t span, uint64_t off, uint64_t len), void *arg)
{
	/* Pieces of 8 chunks: big enough to stream, small enough to balance threads. */
	const uint64_t piece = 8 * PMCK_HASH_CHUNK;
	struct run r = {.fn = fn, .arg = arg, .msg_lock = PTHREAD_MUTEX_INITIALIZER};

	if (threads == 0)
		threads = usable_cpus();
	if (threads > PMCK_MAX_WORKERS)
		threads = PMCK_MAX_WORKERS;
	size_t total = 0;
	for (uint32_t i = 0; i < n; i++)
		total += spans[i].nbytes ? (spans[i].nbytes + piece - 1) / piece : 1;
	r.pieces = malloc((total ? total : 1) * sizeof(*r.pieces));
	if (!r.pieces)
		return pma__err(-ENOMEM, "out of memory");
	for (uint32_t i = 0; i < n; i++) {
		uint64_t off = 0;
		do {
			uint64_t len = spans[i].nbytes - off < piece ? spans[i].nbytes - off : piece;
			r.pieces[r.npieces++] = (struct pmck_piece){i, off, len, spans[i].offset + off};
			off += len;
		} while (off < spans[i].nbytes);
	}
	qsort(r.pieces, r.npieces, sizeof(*r.pieces), cmp_slot_off);
	if (threads > r.npieces) /* no thread started for nothing: a small store or file */
		threads = r.npieces ? (unsigned)r.npieces : 1;

	pthread_t tid[PMCK_MAX_WORKERS];
	unsigned started = 0;
	for (; started + 1 < threads; started++)
		if (pthread_create(&tid[started], NULL, worker, &r))
			break; /* fewer helpers; the caller still works */
	worker(&r);
	for (unsigned t = 0; t < started; t++)
		pthread_join(tid[t], NULL);
	free(r.pieces);
	int ret = atomic_load(&r.error);
	return ret ? pma__err(ret, "%s", r.msg) : 0;
}
