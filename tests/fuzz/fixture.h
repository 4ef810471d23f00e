/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * fixture.h -- a small store the harnesses fuzz against (store, safetensors,
 * copyout_dir): a pool on a tmpfs region of fuzz_dir() holding store "s"
 * of three tensors, with `ncommits` checkpoints committed (steps 5, 6, ...).
 * fix_restore() puts the region back as the setup left it (the pool's
 * header and table, and the part of the heap in use) and opens the store
 * afresh, so every input starts from the same media and no state of an
 * earlier input is kept in memory.
 */
#ifndef PMCK_FUZZ_FIXTURE_H
#define PMCK_FUZZ_FIXTURE_H 1

#include "pmalloc.h"
#include "pmckpt.h"

#define FIX_REGION_SIZE ((2u << 20) + (64u << 10)) /* heap at 2 MiB, 64 KiB of it */
#define FIX_HEAD_BYTES 8192u                         /* pool header and table of 16 entries */

struct fixture {
	struct pma_region *region;
	struct pma_pool *pool;
	struct pmck_store *s;   /* "s", open */
	char *base;
	char *pristine;         /* the region's bytes after setup, up to used */
	size_t used;
};

static const struct pmck_tensor_desc fix_layout[] = {
	{"emb", PMCK_DTYPE_F32, 2, {8, 4}, 0},
	{"w", PMCK_DTYPE_BF16, 2, {3, 5}, 1},
	{"step", PMCK_DTYPE_I64, 0, {0}, 1},
};
#define FIX_NTENSORS 3u

/* Writes one checkpoint of `step` to s, with bytes derived from it. */
static __attribute__((unused)) int
fix_commit(struct pmck_store *s, uint64_t step)
{
	static uint8_t buf[FIX_NTENSORS][256];
	const void *srcs[FIX_NTENSORS];
	struct pmck_ckpt *c;

	for (unsigned t = 0; t < FIX_NTENSORS; t++) {
		memset(buf[t], (int)(step * 7 + t), sizeof(buf[t]));
		srcs[t] = buf[t];
	}
	if (pmck_store_begin(s, step, &c))
		return -1;
	if (pmck_ckpt_write_all(c, srcs, 1) || pmck_ckpt_commit(c)) {
		pmck_ckpt_abort(c);
		return -1;
	}
	return 0;
}

static void
fix_setup(struct fixture *f, const char *file, unsigned ncommits)
{
	char path[256];

	memset(f, 0, sizeof(*f));
	snprintf(path, sizeof(path), "%s/%s", fuzz_dir(), file);
	unlink(path);
	if (pma_region_open(path, FIX_REGION_SIZE, PMA_REGION_CREATE | PMA_REGION_NO_PREFAULT,
			&f->region) ||
	    pma_pool_create(f->region, 16, &f->pool) ||
	    pmck_store_create(f->pool, "s", fix_layout, FIX_NTENSORS, &f->s)) {
		fprintf(stderr, "%s: setup failed: %s\n", FUZZ_NAME, pma_errormsg());
		abort();
	}
	for (unsigned k = 0; k < ncommits; k++)
		if (fix_commit(f->s, 5 + k)) {
			fprintf(stderr, "%s: setup commit failed: %s\n", FUZZ_NAME, pma_errormsg());
			abort();
		}
	f->base = pma_region_addr(f->region);
	static const char *const names[] = {"s.meta", "s.data0", "s.data1"};
	for (unsigned k = 0; k < 3; k++) {
		void *addr;
		size_t size;
		if (pma_lookup(f->pool, names[k], &addr, &size))
			abort();
		size_t end = (size_t)((char *)addr - f->base) + size;
		if (end > f->used)
			f->used = end;
	}
	if (!(f->pristine = malloc(f->used)))
		abort();
	memcpy(f->pristine, f->base, f->used);
}

static __attribute__((unused)) void
fix_restore(struct fixture *f)
{
	pmck_store_close(&f->s);
	memcpy(f->base, f->pristine, FIX_HEAD_BYTES);
	memcpy(f->base + (2u << 20), f->pristine + (2u << 20), f->used - (2u << 20));
	if (pmck_store_open(f->pool, "s", &f->s)) {
		fprintf(stderr, "%s: reopen failed: %s\n", FUZZ_NAME, pma_errormsg());
		abort();
	}
}

#endif
