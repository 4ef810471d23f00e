/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * commit.c -- the two-slot commit protocol.
 *
 *   begin    clear the target slot's seal and persist it   (slot now invalid)
 *   write    non-temporal copies into the target slot      (not yet drained)
 *   commit   1. drain: every tensor byte is durable
 *            2. write step and checksums, persist them
 *            3. store seal = step + 1 (aligned 8 bytes), persist it
 *
 * The target is never the slot holding the newest complete checkpoint, so
 * until step 3 is durable recovery finds that checkpoint untouched, and
 * after it finds the new one whole: steps 1 and 2 are durable before the
 * seal can be.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

int
pmck_store_begin(struct pmck_store *s, uint64_t step, struct pmck_ckpt **out)
{
	if (!s || !out)
		return pma__err(-EINVAL, "pmck_store_begin: store and out are required");
	if (s->in_flight)
		return pma__err(-EBUSY, "store '%s': checkpoint of step %llu is still in flight",
				s->name, (unsigned long long)s->ckpt.step);
	if (step >= (uint64_t)INT64_MAX)
		return pma__err(-EINVAL, "step %llu is too large", (unsigned long long)step);
	if (pma_region_rdonly(s->region))
		return pma__err(-EROFS, "store '%s': cannot write a checkpoint, %s is open read-only",
				s->name, pma_region_path(s->region));

	/*
	 * Overwriting "the other slot" is only safe if the newest sealed slot
	 * really verifies; otherwise the other one may be the only good
	 * checkpoint.  So the first begin after open verifies, once.
	 */
	if (!s->verified) {
		/* Appends to the rejections of a recovery that called begin (an import), never clears them. */
		int ret = pmck__store_recover(s, NULL);
		if (ret && ret != PMCK_E_NO_CHECKPOINT)
			return ret;
	}
	int64_t newest;
	unsigned target = pmck__begin_target(s, &newest);
	if (newest >= 0 && step <= (uint64_t)newest)
		return pma__err(-EINVAL, "step %llu is not after the newest checkpoint (step %lld)",
				(unsigned long long)step, (long long)newest);

	/* A copier may be reading the target (an older checkpoint): wait until it is done. */
	pthread_mutex_lock(&s->pin_lock);
	while (s->pins[target])
		pthread_cond_wait(&s->pin_cond, &s->pin_lock);
	pthread_mutex_unlock(&s->pin_lock);

	/*
	 * Persist point: the target loses its seal before any of its bytes
	 * change, so a crash while it is overwritten cannot make it look
	 * complete.
	 */
	__atomic_store_n(&s->slot[target]->seal, 0, __ATOMIC_RELEASE);
	pma_region_persist(s->region, &s->slot[target]->seal, sizeof(uint64_t));
	if ((int)target == s->readable_slot)
		s->readable_slot = -1;
	s->bad[target] = 0;

	for (uint32_t i = 0; i < s->hdr->ntensors; i++)
		atomic_store_explicit(&s->written[i], 0, memory_order_relaxed);
	s->ckpt = (struct pmck_ckpt){.store = s, .slot = target, .step = step};
	s->in_flight = 1;
	*out = &s->ckpt;
	return 0;
}

/* A handle is usable from begin until commit or abort. */
static int
check_live(const struct pmck_ckpt *c)
{
	if (!c || !c->store || !c->store->in_flight || c != &c->store->ckpt)
		return pma__err(-EINVAL, "checkpoint handle used after commit or abort");
	return 0;
}

unsigned
pmck__begin_target(struct pmck_store *s, int64_t *newest_step)
{
	/* A slot that failed verification holds nothing worth keeping. */
	int64_t st[2];
	for (unsigned k = 0; k < 2; k++)
		st[k] = s->bad[k] ? -1 : pmck__sealed_step(s, k);
	unsigned newest = st[1] > st[0];
	*newest_step = st[newest];
	return st[newest] >= 0 ? !newest : 0;
}

void
pmck__slot_pin(struct pmck_store *s, unsigned k)
{
	pthread_mutex_lock(&s->pin_lock);
	s->pins[k]++;
	pthread_mutex_unlock(&s->pin_lock);
}

void
pmck__slot_unpin(struct pmck_store *s, unsigned k)
{
	pthread_mutex_lock(&s->pin_lock);
	if (--s->pins[k] == 0)
		pthread_cond_broadcast(&s->pin_cond);
	pthread_mutex_unlock(&s->pin_lock);
}

int
pmck__slot_pinned(struct pmck_store *s, unsigned k)
{
	pthread_mutex_lock(&s->pin_lock);
	int pinned = s->pins[k] != 0;
	pthread_mutex_unlock(&s->pin_lock);
	return pinned;
}

uint64_t pmck_ckpt_step(const struct pmck_ckpt *c) { return c->step; }
unsigned pmck_ckpt_slot(const struct pmck_ckpt *c) { return c->slot; }

/* The map entry of tensor idx of a live checkpoint, or NULL with the error in *ret. */
static const struct tmap_entry *
live_tensor(const struct pmck_ckpt *c, size_t idx, int *ret)
{
	if ((*ret = check_live(c)))
		return NULL;
	if (idx >= c->store->hdr->ntensors) {
		*ret = pma__err(-ERANGE, "tensor index %zu out of range (%u tensors)", idx,
				c->store->hdr->ntensors);
		return NULL;
	}
	return &c->store->tmap[idx];
}

int
pmck_ckpt_write_range(struct pmck_ckpt *c, size_t idx, uint64_t off, const void *src,
		uint64_t len)
{
	int ret;
	const struct tmap_entry *e = live_tensor(c, idx, &ret);
	if (!e)
		return ret;
	struct pmck_store *s = c->store;
	if (off > e->nbytes || len > e->nbytes - off)
		return pma__err(-ERANGE, "tensor '%s': range %llu+%llu beyond its %llu bytes",
				e->name, (unsigned long long)off, (unsigned long long)len,
				(unsigned long long)e->nbytes);
	if (off % PMCK_HASH_CHUNK || (len % PMCK_HASH_CHUNK && off + len != e->nbytes))
		return pma__err(-EINVAL, "tensor '%s': range %llu+%llu is not chunk-aligned",
				e->name, (unsigned long long)off, (unsigned long long)len);

	char *dst = s->data[c->slot] + e->offset;
	uint64_t *hash = &s->chunk_hash[s->chunk_first[idx]];
	for (uint64_t pos = off; pos < off + len; pos += PMCK_HASH_CHUNK) {
		uint64_t n = off + len - pos < PMCK_HASH_CHUNK ? off + len - pos : PMCK_HASH_CHUNK;
		hash[pos / PMCK_HASH_CHUNK] = pmck__copy_hash(s->region, dst + pos,
				(const char *)src + (pos - off), n, s->fused_block);
	}
	atomic_fetch_add_explicit(&s->written[idx], len, memory_order_release);
	return 0;
}

int
pmck_ckpt_write(struct pmck_ckpt *c, size_t idx, const void *src)
{
	int ret;
	const struct tmap_entry *e = live_tensor(c, idx, &ret);
	return e ? pmck_ckpt_write_range(c, idx, 0, src, e->nbytes) : ret;
}

void *
pmck_ckpt_tensor_ptr(struct pmck_ckpt *c, size_t idx)
{
	int ret;
	const struct tmap_entry *e = live_tensor(c, idx, &ret);
	return e ? c->store->data[c->slot] + e->offset : NULL;
}

int
pmck__ckpt_landed(struct pmck_ckpt *c, size_t idx, uint64_t off, uint64_t len)
{
	pmck__ckpt_flush_landed(c, idx, off, len);
	return pmck__ckpt_landed_hashed(c, idx, off, len, NULL, NULL);
}

void
pmck__ckpt_flush_landed(struct pmck_ckpt *c, size_t idx, uint64_t off, uint64_t len)
{
	struct pmck_store *s = c->store;

	/* Flushed now (the bytes may sit in the CPU cache, e.g. after DDIO), drained by the caller or commit. */
	pma_region_flush(s->region, s->data[c->slot] + s->tmap[idx].offset + off, len);
}

int
pmck__ckpt_landed_hashed(struct pmck_ckpt *c, size_t idx, uint64_t off, uint64_t len,
		const uint64_t *hashes, const uint8_t *given)
{
	struct pmck_store *s = c->store;
	const char *p = s->data[c->slot] + s->tmap[idx].offset;
	uint64_t *hash = &s->chunk_hash[s->chunk_first[idx]];

	for (uint64_t pos = off, k = 0; pos < off + len; pos += PMCK_HASH_CHUNK, k++) {
		uint64_t n = off + len - pos < PMCK_HASH_CHUNK ? off + len - pos : PMCK_HASH_CHUNK;
		hash[pos / PMCK_HASH_CHUNK] = given && given[k] ? hashes[k] : pmck__hash(p + pos, n);
	}
	atomic_fetch_add_explicit(&s->written[idx], len, memory_order_release);
	return 0;
}

int
pmck_ckpt_mark_written(struct pmck_ckpt *c, size_t idx)
{
	int ret;
	const struct tmap_entry *e = live_tensor(c, idx, &ret);
	if (!e)
		return ret;
	atomic_store_explicit(&c->store->written[idx], 0, memory_order_relaxed);
	return pmck__ckpt_landed(c, idx, 0, e->nbytes);
}

/* ------------------------------------------------- pmck_ckpt_write_all */

struct write_all {
	struct pmck_ckpt *ckpt;
	const void *const *srcs;
};

static int
write_piece(void *arg, uint32_t tensor, uint64_t off, uint64_t len)
{
	struct write_all *w = arg;
	int ret = pmck_ckpt_write_range(w->ckpt, tensor, off, (const char *)w->srcs[tensor] + off,
			len);
	/*
	 * A fence orders only its own thread's non-temporal stores: each worker
	 * drains its piece, so that the commit's drain (persist point 1) does not
	 * rely on the join to complete the other threads' (one fence per 8 MiB).
	 */
	pma_region_drain(w->ckpt->store->region);
	return ret;
}

int
pmck_ckpt_write_all(struct pmck_ckpt *c, const void *const *srcs, unsigned threads)
{
	struct write_all w = {c, srcs};
	int ret = check_live(c);

	if (ret)
		return ret;
	ret = pmck__for_each_piece(c->store, threads, write_piece, &w);
	return ret ? pma__err_prefix(ret, "write_all") : 0;
}

/* ------------------------------------------------------------- commit */

int
pmck_ckpt_commit(struct pmck_ckpt *c)
{
	return pmck__ckpt_commit_expect(c, NULL);
}

int
pmck__ckpt_commit_expect(struct pmck_ckpt *c, const uint64_t *expect)
{
	int ret = check_live(c);
	if (ret)
		return ret;
	struct pmck_store *s = c->store;
	uint32_t n = s->hdr->ntensors;
	struct slot_hdr *slot = s->slot[c->slot];
	uint64_t *csum = s->csum[c->slot];

	for (uint32_t i = 0; i < n; i++) {
		uint64_t w = atomic_load_explicit(&s->written[i], memory_order_acquire);
		if (w != s->tmap[i].nbytes)
			return pma__err(-EINVAL, "cannot commit step %llu: tensor '%s' has %llu of %llu "
					"bytes written", (unsigned long long)c->step, s->tmap[i].name,
					(unsigned long long)w, (unsigned long long)s->tmap[i].nbytes);
	}
#ifndef PMCK_TRACE_FAULT_SEAL_EARLY
	/* Persist point 1: wait for every non-temporal store and flush of the tensor data. */
	pma_region_drain(s->region);
#endif

	/*
	 * Persist point 2: the step, the world size and rank of the job (0
	 * outside a global job) and one checksum per tensor, still unsealed:
	 * the seal (point 3) covers them all.
	 */
	for (uint32_t i = 0; i < n; i++) {
		csum[i] = pmck__combine(&s->chunk_hash[s->chunk_first[i]],
				s->chunk_first[i + 1] - s->chunk_first[i]);
		/* A copy from elsewhere (a partner) is sealed only if it is what was sent. */
		if (expect && csum[i] != expect[i]) {
			s->in_flight = 0; /* aborted: the slot stays unsealed since begin */
			return pma__err(PMCK_E_CORRUPT, "step %llu: tensor '%s' arrived with checksum "
					"%016llx, the sender committed %016llx: not sealed",
					(unsigned long long)c->step, s->tmap[i].name,
					(unsigned long long)csum[i], (unsigned long long)expect[i]);
		}
	}
	slot->step = c->step;
	slot->world = s->world_tag;
#ifdef PMCK_TRACE_FAULT_SEAL_EARLY
	/*
	 * A fault of the trace build, which tests/crash_images must catch:
	 * checksums, step and seal flushed with the data still undrained, and
	 * one drain for all, so the seal can be durable before the data.
	 */
	pma_region_flush(s->region, csum, (size_t)n * sizeof(*csum));
	pma_region_flush(s->region, &slot->step, sizeof(slot->step) + sizeof(slot->world));
	__atomic_store_n(&slot->seal, c->step + 1, __ATOMIC_RELEASE);
	pma_region_flush(s->region, &slot->seal, sizeof(slot->seal));
	pma_region_drain(s->region);
	s->in_flight = 0;
	return 0;
#endif
	pma_region_persist(s->region, csum, (size_t)n * sizeof(*csum));
	pma_region_persist(s->region, &slot->step, sizeof(slot->step) + sizeof(slot->world));

	/*
	 * Persist point 3: the seal, one aligned 8-byte store.  Before it is
	 * durable recovery uses the other slot; after, this one, whose data
	 * and checksums are already durable (points 1 and 2).
	 */
	__atomic_store_n(&slot->seal, c->step + 1, __ATOMIC_RELEASE);
	pma_region_persist(s->region, &slot->seal, sizeof(slot->seal));
	s->in_flight = 0;
	return 0;
}

void
pmck__slot_unseal(struct pmck_store *s, unsigned k)
{
	/* Persist point: the slot no longer counts as a checkpoint (as begin's first step). */
	__atomic_store_n(&s->slot[k]->seal, 0, __ATOMIC_RELEASE);
	pma_region_persist(s->region, &s->slot[k]->seal, sizeof(uint64_t));
	if ((int)k == s->readable_slot)
		s->readable_slot = -1;
}

void
pmck_ckpt_abort(struct pmck_ckpt *c)
{
	/* The target's seal is already 0; the other slot was never touched. */
	if (c && c->store)
		c->store->in_flight = 0;
}
