/* SPDX-License-Identifier: BSD-3-Clause */
/* recover.c -- finding the newest checkpoint whose checksums verify, and reading it. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct verify {
	const struct pmck_store *s;
	unsigned slot;
	void *const *dst; /* NULL, or where each tensor goes as it is hashed (NULL: nowhere) */
};

/*
 * Hashes the chunks of one piece into the store's chunk-hash array; copies
 * them to the tensor's destination on the way, if it has one.
 */
static int
hash_piece(void *arg, uint32_t tensor, uint64_t off, uint64_t len)
{
	const struct verify *v = arg;
	const struct pmck_store *s = v->s;
	const char *p = s->data[v->slot] + s->tmap[tensor].offset;
	char *to = v->dst ? v->dst[tensor] : NULL;
	uint64_t *hash = &s->chunk_hash[s->chunk_first[tensor]];

	for (uint64_t pos = off; pos < off + len; pos += PMCK_HASH_CHUNK) {
		uint64_t n = off + len - pos < PMCK_HASH_CHUNK ? off + len - pos : PMCK_HASH_CHUNK;
		hash[pos / PMCK_HASH_CHUNK] = to ? pmck__hash_copy(to + pos, p + pos, n) :
				pmck__hash(p + pos, n);
	}
	return 0;
}

/*
 * Hashes (and with dst copies) the tensors of slot k whose span is not
 * empty, on up to 8 threads, the caller's CPUs.
 */
static int
hash_spans(const struct pmck_store *s, unsigned k, void *const *dst,
		const struct pmck_span *spans)
{
	struct verify v = {s, k, dst};

	return pmck__for_each_span_piece(spans, s->hdr->ntensors, 0, hash_piece, &v);
}

/*
 * Index of the first tensor of slot k whose checksum fails, or -1.  The
 * chunks are hashed on up to 8 threads, the caller's CPUs (and copied to
 * dst, see struct verify); the chunk-hash array is free because no
 * checkpoint is in flight.  given (NULL: none; the caller checked that it
 * is slot k's): its tensors without a dst are compared with the caller's
 * checksums instead, fetched (fill) once the others are hashed.  fill is
 * called once whenever given names tensors, whatever happens here, so
 * that the caller's hashes are always waited for.
 */
static int64_t
verify_slot(const struct pmck_store *s, unsigned k, void *const *dst,
		const struct pmck_given_checksums *given)
{
	const uint32_t n = s->hdr->ntensors;
	struct pmck_span *spans = calloc(n ? n : 1, sizeof(*spans));
	size_t *from = given ? calloc(n ? n : 1, sizeof(*from)) : NULL; /* j + 1 of a given tensor */
	int64_t bad = 0; /* cannot hash (out of memory): do not trust the slot */
	size_t ngiven = 0;
	const int fill = given && given->n && given->fill;

	if (!spans || (given && !from)) {
		if (fill)
			given->fill(given->arg, given->csum, given->n); /* waited for, not used */
		goto out;
	}
	for (size_t j = 0; given && j < given->n; j++)
		if (!dst || !dst[given->idx[j]]) { /* with a dst: hashed while copied */
			from[given->idx[j]] = j + 1;
			ngiven++;
		}
	for (uint32_t i = 0; i < n; i++)
		spans[i] = (struct pmck_span){from && from[i] ? 0 : s->tmap[i].nbytes,
				s->tmap[i].offset};
	int hashed = hash_spans(s, k, dst, spans);
	int filled = fill ? given->fill(given->arg, given->csum, given->n) : 0;
	if (hashed)
		goto out;
	if (ngiven && filled != 0) {
		/* The caller's checksums are not to be had: the region's bytes, hashed here. */
		for (uint32_t i = 0; i < n; i++)
			spans[i].nbytes = from[i] ? s->tmap[i].nbytes : 0;
		if (hash_spans(s, k, dst, spans))
			goto out;
		memset(from, 0, n * sizeof(*from));
	}
	bad = -1;
	for (uint32_t i = 0; i < n; i++) {
		uint64_t sum = from && from[i] ? given->csum[from[i] - 1] :
				pmck__combine(&s->chunk_hash[s->chunk_first[i]],
						s->chunk_first[i + 1] - s->chunk_first[i]);
		if (sum != s->csum[k][i]) {
			bad = i;
			break;
		}
	}
out:
	free(spans);
	free(from);
	return bad;
}

static int recover_newest(struct pmck_store *s, void *const *dst,
		const struct pmck_given_checksums *given, struct pmck_recovery *info);

void
pmck__reject_start(struct pmck_store *s, unsigned rank)
{
	s->nrej = 0;
	s->rej_rank = rank;
}

struct pmck_rejection *
pmck__reject(struct pmck_store *s, unsigned rank, enum pmck_tier tier, uint64_t step,
		const char *fmt, ...)
{
	char reason[PMCK_REASON_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(reason, sizeof(reason), fmt, ap);
	va_end(ap);
	/* A slot verified twice in one recovery (recover_step, then begin's check) is one rejection. */
	for (size_t i = 0; i < s->nrej; i++)
		if (s->rej[i].rank == rank && s->rej[i].tier == tier && s->rej[i].step == step &&
		    !strcmp(s->rej[i].reason, reason))
			return &s->rej[i];
	if (s->nrej == s->rej_cap) {
		size_t cap = s->rej_cap ? 2 * s->rej_cap : 4;
		struct pmck_rejection *r = realloc(s->rej, cap * sizeof(*r));
		if (!r)
			return NULL; /* the report is lost, the recovery goes on */
		s->rej = r;
		s->rej_cap = cap;
	}
	struct pmck_rejection *e = &s->rej[s->nrej++];

	memset(e, 0, sizeof(*e));
	e->rank = rank;
	e->tier = tier;
	e->step = step;
	memcpy(e->reason, reason, sizeof(reason));
	return e;
}

const struct pmck_rejection *
pmck_store_rejections(const struct pmck_store *s, size_t *n)
{
	if (n)
		*n = s && s->nrej ? s->nrej : 0;
	return s && s->nrej ? s->rej : NULL;
}

int
pmck_store_recover(struct pmck_store *s, struct pmck_recovery *info)
{
	if (s->in_flight)
		return pma__err(-EBUSY, "store '%s': a checkpoint is in flight", s->name);
	pmck__reject_start(s, s->world_tag ? PMCK__TAG_RANK(s->world_tag) : 0);
	return pmck__store_recover(s, info);
}

int
pmck_store_recover_into(struct pmck_store *s, void *const *dst, struct pmck_recovery *info)
{
	if (!dst)
		return pma__err(-EINVAL, "store '%s': recover_into without destinations", s->name);
	if (s->in_flight)
		return pma__err(-EBUSY, "store '%s': a checkpoint is in flight", s->name);
	pmck__reject_start(s, s->world_tag ? PMCK__TAG_RANK(s->world_tag) : 0);
	return pmck__store_recover_into(s, dst, info);
}

int
pmck_store_recover_given(struct pmck_store *s, void *const *dst,
		const struct pmck_given_checksums *given, struct pmck_recovery *info)
{
	if (!given || given->slot > 1 || (given->n && (!given->idx || !given->csum)))
		return pma__err(-EINVAL, "store '%s': recover_given %s", s->name,
				!given ? "without checksums" : given->slot > 1 ?
				"names a slot other than 0 and 1" : "without indexes or checksums");
	if (s->in_flight)
		return pma__err(-EBUSY, "store '%s': a checkpoint is in flight", s->name);
	unsigned char *seen = calloc(s->hdr->ntensors ? s->hdr->ntensors : 1, 1);
	if (!seen)
		return pma__err(-ENOMEM, "out of memory");
	for (size_t j = 0; j < given->n; j++) {
		size_t i = given->idx[j];
		if (i >= s->hdr->ntensors || seen[i]) {
			free(seen);
			return pma__err(-EINVAL, "store '%s': recover_given names tensor index %zu %s",
					s->name, i, i >= s->hdr->ntensors ? "out of range" : "twice");
		}
		seen[i] = 1;
	}
	free(seen);
	pmck__reject_start(s, s->world_tag ? PMCK__TAG_RANK(s->world_tag) : 0);
	return recover_newest(s, dst, given, info);
}

int
pmck__store_recover(struct pmck_store *s, struct pmck_recovery *info)
{
	return pmck__store_recover_into(s, NULL, info);
}

int
pmck__store_recover_into(struct pmck_store *s, void *const *dst, struct pmck_recovery *info)
{
	return recover_newest(s, dst, NULL, info);
}

/* The newest sealed slot that verifies becomes readable (pmck_store_recover_given's terms). */
static int
recover_newest(struct pmck_store *s, void *const *dst, const struct pmck_given_checksums *given,
		struct pmck_recovery *info)
{
	struct pmck_recovery r = {0};

	if (s->in_flight)
		return pma__err(-EBUSY, "store '%s': a checkpoint is in flight", s->name);
	s->readable_slot = -1;
	s->bad[0] = s->bad[1] = 0;
	s->verified = 1;

	/* Candidates, newest first; a seal must agree with the step stored beside it. */
	int64_t st[2];
	for (unsigned k = 0; k < 2; k++)
		st[k] = pmck__sealed_step(s, k);
	unsigned order[2] = {st[1] > st[0], !(st[1] > st[0])};
	for (unsigned o = 0; o < 2; o++) {
		unsigned k = order[o];
		if (st[k] < 0)
			continue;
		/* A failing slot leaves dst with some of its bytes: the next one overwrites all. */
		int64_t bad = verify_slot(s, k, dst, given && given->slot == k &&
				(uint64_t)st[k] == given->step ? given : NULL);
		if (bad < 0) {
			s->readable_slot = (int)k;
			r.step = (uint64_t)st[k];
			r.slot = k;
			break;
		}
		if (!r.rejected) {
			r.rejected = 1;
			r.rejected_slot = k;
			r.rejected_step = (uint64_t)st[k];
			snprintf(r.rejected_tensor, sizeof(r.rejected_tensor), "%s", s->tmap[bad].name);
		}
		pmck__reject(s, s->rej_rank, PMCK_TIER_LOCAL, (uint64_t)st[k],
				"local slot %u failed its checksum (tensor '%s')", k, s->tmap[bad].name);
		/*
		 * In memory only, never on media: recovery writes nothing, so it
		 * also runs on a read-only region (pmckpt list --verify).
		 */
		s->bad[k] = 1; /* every failing slot: begin must never keep one over a good one */
	}
	if (info)
		*info = r;
	if (s->readable_slot < 0) {
		if (r.rejected)
			return pma__err(PMCK_E_NONE_USABLE, "store '%s': no checkpoint verifies "
					"(step %llu fails at tensor '%s')", s->name,
					(unsigned long long)r.rejected_step, r.rejected_tensor);
		return pma__err(PMCK_E_NO_CHECKPOINT, "store '%s' holds no complete checkpoint",
				s->name);
	}
	return 0;
}

int64_t
pmck_store_slot_step(const struct pmck_store *s, unsigned k)
{
	return k < 2 ? pmck__sealed_step(s, k) : -1;
}

const void *
pmck_store_slot_tensor_data(const struct pmck_store *s, unsigned k, size_t idx)
{
	if (k > 1 || idx >= s->hdr->ntensors)
		return NULL;
	return s->data[k] + s->tmap[idx].offset;
}

int
pmck_store_slot_world(const struct pmck_store *s, unsigned k, unsigned *rank, unsigned *world_size)
{
	if (k > 1)
		return pma__err(-ERANGE, "slot %u: a store has slots 0 and 1", k);
	uint64_t tag = s->slot[k]->world;
	if (pmck__sealed_step(s, k) < 0 || PMCK__TAG_SIZE(tag) == 0)
		return pma__err(-ENOENT, "store '%s': slot %u %s", s->name, k,
				pmck__sealed_step(s, k) < 0 ? "holds no complete checkpoint"
							    : "records no world size");
	if (rank)
		*rank = PMCK__TAG_RANK(tag);
	if (world_size)
		*world_size = PMCK__TAG_SIZE(tag);
	return 0;
}

int
pmck_store_recover_step(struct pmck_store *s, uint64_t step, struct pmck_recovery *info)
{
	if (s->in_flight)
		return pma__err(-EBUSY, "store '%s': a checkpoint is in flight", s->name);
	pmck__reject_start(s, s->world_tag ? PMCK__TAG_RANK(s->world_tag) : 0);
	return pmck__store_recover_step(s, step, info);
}

/*
 * The slot sealed with `step` becomes the readable one: hashed first if
 * `verify` (pmck__store_recover_step), else adopted as verified by this
 * same recovery (pmck__store_adopt_step).
 */
static int
load_step(struct pmck_store *s, uint64_t step, int verify, struct pmck_recovery *info)
{
	if (s->in_flight)
		return pma__err(-EBUSY, "store '%s': a checkpoint is in flight", s->name);
	for (unsigned k = 0; k < 2; k++) {
		if (pmck__sealed_step(s, k) != (int64_t)step)
			continue;
		int64_t bad = verify ? verify_slot(s, k, NULL, NULL) : -1;
		if (bad >= 0) {
			pmck__reject(s, s->rej_rank, PMCK_TIER_LOCAL, step,
					"local slot %u failed its checksum (tensor '%s')", k,
					s->tmap[bad].name);
			return pma__err(PMCK_E_NONE_USABLE, "store '%s': step %llu fails at tensor "
					"'%s'", s->name, (unsigned long long)step, s->tmap[bad].name);
		}
		s->readable_slot = (int)k;
		s->verified = 1;
		if (info)
			*info = (struct pmck_recovery){.step = step, .slot = k};
		return 0;
	}
	return pma__err(PMCK_E_NO_CHECKPOINT, "store '%s' holds no step %llu", s->name,
			(unsigned long long)step);
}

int
pmck__store_recover_step(struct pmck_store *s, uint64_t step, struct pmck_recovery *info)
{
	return load_step(s, step, 1, info);
}

int
pmck__store_adopt_step(struct pmck_store *s, uint64_t step, struct pmck_recovery *info)
{
	return load_step(s, step, 0, info);
}

int
pmck_store_discard_after(struct pmck_store *s, uint64_t step)
{
	if (s->in_flight)
		return pma__err(-EBUSY, "store '%s': a checkpoint is in flight", s->name);
	if (pma_region_rdonly(s->region))
		return pma__err(-EROFS, "store '%s': cannot discard steps, %s is open read-only",
				s->name, pma_region_path(s->region));
	for (unsigned k = 0; k < 2; k++) {
		if (pmck__sealed_step(s, k) <= (int64_t)step)
			continue;
		/* Persist point: unsealed, the slot is free for the next begin. */
		__atomic_store_n(&s->slot[k]->seal, 0, __ATOMIC_RELEASE);
		pma_region_persist(s->region, &s->slot[k]->seal, sizeof(uint64_t));
		if ((int)k == s->readable_slot)
			s->readable_slot = -1;
	}
	return 0;
}

const void *
pmck_store_tensor_data(const struct pmck_store *s, size_t idx)
{
	if (s->readable_slot < 0 || idx >= s->hdr->ntensors)
		return NULL;
	return s->data[s->readable_slot] + s->tmap[idx].offset;
}

int
pmck_store_read(const struct pmck_store *s, size_t idx, void *dst)
{
	if (idx >= s->hdr->ntensors)
		return pma__err(-ERANGE, "tensor index %zu out of range", idx);
	if (s->readable_slot < 0)
		return pma__err(PMCK_E_NO_CHECKPOINT, "store '%s': nothing recovered", s->name);
	memcpy(dst, s->data[s->readable_slot] + s->tmap[idx].offset, s->tmap[idx].nbytes);
	return 0;
}
