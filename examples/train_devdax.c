/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * train_devdax.c -- a store straight on a devdax device, the layers below
 * pmck_local_open: region, pool, store, and synchronous checkpoints.
 *
 *   train_devdax PATH [STEPS]
 *
 * PATH is a devdax device (/dev/dax0.0, made by `pmctl provision`) or a
 * file standing in for one; a file that does not exist is created with the
 * size this layout needs.  A blank region (a new device or file, all
 * zeros) is formatted; a pool is opened; anything else is refused
 * (PMA_E_NOT_POOL) and left untouched.  Each run recovers the newest
 * checkpoint, checks it, and writes STEPS more.
 * Build: cc train_devdax.c $(pkg-config --cflags --libs pmckpt)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pmckpt.h>

static const struct pmck_tensor_desc layout[] = {
	{.name = "emb.weight", .dtype = PMCK_DTYPE_BF16, .ndim = 2, .shape = {2048, 128}, .layer = 0},
	{.name = "h.0.weight", .dtype = PMCK_DTYPE_F32, .ndim = 2, .shape = {128, 512}, .layer = 1},
	{.name = "h.0.bias", .dtype = PMCK_DTYPE_F32, .ndim = 1, .shape = {512}, .layer = 1},
	{.name = "train.step", .dtype = PMCK_DTYPE_I64, .ndim = 0, .layer = 2},
};
#define NT (sizeof(layout) / sizeof(layout[0]))

static uint8_t *param[NT];
static size_t nbytes[NT];

static void
fail(const char *what)
{
	fprintf(stderr, "train_devdax: %s: %s\n", what, pmck_errormsg());
	exit(1);
}

/* Tensor i's bytes after `step`: a function of the step, to check a recovery bit for bit. */
static void
fill(size_t i, uint64_t step, uint8_t *dst)
{
	if (layout[i].dtype == PMCK_DTYPE_I64) {
		int64_t s = (int64_t)step;
		memcpy(dst, &s, sizeof(s));
		return;
	}
	for (size_t k = 0; k < nbytes[i]; k++)
		dst[k] = (uint8_t)((step * 2654435761u + i * 40503u + k) >> 3);
}

int
main(int argc, char **argv)
{
	struct pma_region *region;
	struct pma_pool *pool;
	struct pmck_store *store;
	struct pmck_recovery rec;
	uint64_t size, next = 1;
	int created;

	if (argc < 2) {
		fprintf(stderr, "usage: train_devdax PATH [STEPS]\n");
		return 2;
	}
	uint64_t steps = argc > 2 ? strtoull(argv[2], NULL, 0) : 3;
	for (size_t i = 0; i < NT; i++) {
		nbytes[i] = pmck_dtype_size(layout[i].dtype);
		for (uint32_t d = 0; d < layout[i].ndim; d++)
			nbytes[i] *= layout[i].shape[d];
		if (!(param[i] = malloc(nbytes[i])))
			return 1;
	}

	/*
	 * The region: a device is mapped whole; a file is created (CREATE)
	 * with the bytes one pool with this store needs.  A missing name
	 * directly in /dev is never created: devices come from provisioning.
	 */
	if (pmck_local_pool_size(layout, NT, &size))
		fail("pmck_local_pool_size");
	int in_dev = !strncmp(argv[1], "/dev/", 5) && !strchr(argv[1] + 5, '/');
	unsigned flags = in_dev ? 0 : PMA_REGION_CREATE;
	if (pma_region_open(argv[1], size, flags, &region))
		fail("pma_region_open");
	printf("region %s: %s, %zu bytes, %s granularity, NUMA node %d\n", argv[1],
			pma_region_kind(region) == PMA_REGION_DEVDAX ? "devdax" : "file",
			pma_region_size(region),
			pma_granularity_name(pma_region_granularity(region)),
			pma_region_numa_node(region));

	/* The pool: opened, or formatted only if the region is blank. */
	if (pma_pool_open_or_create(region, 0, &pool, &created))
		fail("pma_pool_open_or_create");
	printf("pool: %s, %zu bytes free\n", created ? "formatted a blank region" :
			"opened the existing pool", pma_pool_free_bytes(pool));

	/* The store: created with this layout, or opened if it has the same one. */
	if (pmck_store_open_or_create(pool, "model", layout, NT, &store))
		fail("pmck_store_open_or_create");

	/* Recovery: the newest checkpoint whose checksums verify. */
	int ret = pmck_store_recover(store, &rec);
	if (ret == 0) {
		for (size_t i = 0; i < NT; i++) {
			uint8_t *want = malloc(nbytes[i]);
			if (!want || pmck_store_read(store, i, param[i]))
				fail("pmck_store_read");
			fill(i, rec.step, want);
			if (memcmp(want, param[i], nbytes[i])) {
				fprintf(stderr, "train_devdax: step %llu: tensor %s differs\n",
						(unsigned long long)rec.step, layout[i].name);
				return 1;
			}
			free(want);
		}
		printf("recovered step %llu from slot %u%s; contents verified\n",
				(unsigned long long)rec.step, rec.slot,
				rec.rejected ? " (a newer slot failed verification)" : "");
		next = rec.step + 1;
	} else if (ret == PMCK_E_NO_CHECKPOINT) {
		printf("no checkpoint yet: starting at step 1\n");
	} else {
		fail("pmck_store_recover");
	}

	/*
	 * Synchronous checkpoints: begin picks the slot not holding the newest
	 * checkpoint, write copies each tensor (non-temporal, checksummed),
	 * commit makes it durable and seals it with one 8-byte store.  A crash
	 * anywhere before the seal leaves the previous checkpoint intact.
	 */
	for (uint64_t step = next; step < next + steps; step++) {
		struct pmck_ckpt *c;
		for (size_t i = 0; i < NT; i++)
			fill(i, step, param[i]); /* (training would update these) */
		if (pmck_store_begin(store, step, &c))
			fail("pmck_store_begin");
		for (size_t i = 0; i < NT; i++)
			if (pmck_ckpt_write(c, i, param[i])) {
				pmck_ckpt_abort(c);
				fail("pmck_ckpt_write");
			}
		unsigned slot = pmck_ckpt_slot(c);
		if (pmck_ckpt_commit(c)) {
			pmck_ckpt_abort(c);
			fail("pmck_ckpt_commit");
		}
		printf("step %llu: committed to slot %u (%llu bytes)\n", (unsigned long long)step,
				slot, (unsigned long long)pmck_store_tensor_bytes(store));
	}

	pmck_store_close(&store);
	pma_pool_close(&pool);
	pma_region_close(&region);
	for (size_t i = 0; i < NT; i++)
		free(param[i]);
	return 0;
}
