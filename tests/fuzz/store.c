/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * store.c -- fuzzes a store's metadata (runtime/store.c, recover.c,
 * commit.c): the header, the two slot headers (seals, steps, world tags),
 * the tensor map and the checksums, as they lie in the NAME.meta
 * allocation of a sound pool.
 *
 * Set up once: a pool with store "s" of three tensors and two committed
 * checkpoints (steps 5 and 6).  Input: one flag byte, then the bytes of
 * s.meta (the rest of it keeps the store's own bytes).  FIX_STATIC asks
 * the harness to recompute the header's checksum over the header and the
 * tensor map after placing the bytes, so that the fuzzer reaches the
 * checks behind it.  Each input starts from the pristine pool.
 *
 * Then pmck_store_open and, when it opens, every tensor's description,
 * the slots' steps, pmck_store_recover, reads of the recovered tensors,
 * export (pmck_safetensors_write) and a new checkpoint.  Promises checked:
 * every tensor lies inside the data region; a recovered checkpoint exports
 * to a file that verifies; a committed checkpoint is the one recovered next.
 */
#define FUZZ_NAME "store"
#include "driver.h"

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "pmalloc.h"
#include "pmckpt.h"
#include "internal.h"

#include "fixture.h"

#define FIX_STATIC 1u

static struct fixture fx;
static char *meta;           /* s.meta in the region */
static size_t meta_size;
static char export_path[256];

static void
setup(void)
{
	void *addr;

	fix_setup(&fx, "store", 2);
	pmck_store_close(&fx.s); /* each input opens it */
	if (pma_lookup(fx.pool, "s.meta", &addr, &meta_size))
		abort();
	meta = addr;
	snprintf(export_path, sizeof(export_path), "%s/export.safetensors", fuzz_dir());
}

/* The pristine pool, the store closed. */
static void
restore(void)
{
	fix_restore(&fx);
	pmck_store_close(&fx.s);
}

static void
fix_static(void)
{
	struct store_hdr *h = (struct store_hdr *)meta;
	uint64_t n = h->ntensors;
	if (TMAP_OFF + n * sizeof(struct tmap_entry) > meta_size)
		return;
	/* As store.c's static_checksum: the header before its checksum, then the map. */
	XXH3_state_t st;
	XXH3_64bits_reset(&st);
	XXH3_64bits_update(&st, h, offsetof(struct store_hdr, checksum));
	XXH3_64bits_update(&st, meta + TMAP_OFF, n * sizeof(struct tmap_entry));
	h->checksum = XXH3_64bits_digest(&st);
}

static void
use_store(struct pmck_store *s)
{
	size_t n = pmck_store_ntensors(s);
	uint64_t data_size = pmck_store_data_size(s);
	uint64_t max_bytes = 0;

	for (size_t i = 0; i < n; i++) {
		struct pmck_tensor_info ti;
		int rc = pmck_store_tensor(s, i, &ti);
		fuzz_check_error(rc, pmck_errormsg());
		if (rc)
			continue;
		fuzz_assert(ti.name && strlen(ti.name) < PMCK_NAME_MAX, "tensor %zu: name", i);
		fuzz_assert(ti.nbytes <= data_size && ti.offset <= data_size - ti.nbytes,
				"tensor %zu [%llu, +%llu) outside the data region of %llu", i,
				(unsigned long long)ti.offset, (unsigned long long)ti.nbytes,
				(unsigned long long)data_size);
		int64_t f = pmck_store_find(s, ti.name);
		fuzz_assert(f >= 0 && (size_t)f <= i, "tensor %zu '%s' found at %lld", i, ti.name,
				(long long)f);
		if (ti.nbytes > max_bytes)
			max_bytes = ti.nbytes;
	}
	for (unsigned k = 0; k < 2; k++) {
		unsigned rank, world;
		(void)pmck_store_slot_step(s, k);
		int rc = pmck_store_slot_world(s, k, &rank, &world);
		fuzz_check_error(rc, pmck_errormsg());
	}

	struct pmck_recovery info;
	int rc = pmck_store_recover(s, &info);
	fuzz_check_error(rc, pmck_errormsg());
	uint8_t *buf = malloc(max_bytes + 1);
	if (!buf)
		return;
	if (rc == 0) {
		fuzz_assert(info.slot < 2 && pmck_store_slot_step(s, info.slot) == (int64_t)info.step,
				"recovered step %llu of slot %u, which holds %lld",
				(unsigned long long)info.step, info.slot,
				(long long)pmck_store_slot_step(s, info.slot));
		for (size_t i = 0; i < n; i++) {
			int r = pmck_store_read(s, i, buf);
			fuzz_assert(r == 0, "read of recovered tensor %zu: %s", i, pmck_errormsg());
		}
		rc = pmck_safetensors_write(s, export_path, 0, 1);
		fuzz_check_error(rc, pmck_errormsg());
		if (rc == 0) {
			struct pmck_file_info fi;
			rc = pmck_safetensors_verify(export_path, &fi);
			fuzz_assert(rc == 0, "the export of a recovered checkpoint does not verify: %s",
					pmck_errormsg());
			fuzz_assert(fi.step == info.step && fi.ntensors == n, "export says step %llu, "
					"%llu tensors", (unsigned long long)fi.step,
					(unsigned long long)fi.ntensors);
			unlink(export_path);
		}
	}

	/* A new checkpoint on top of what recovery found. */
	uint64_t step = rc == 0 ? info.step + 1 : 1;
	if (step > 1000000)
		step = 1000000 + (step & 1);
	struct pmck_ckpt *c;
	rc = pmck_store_begin(s, step, &c);
	fuzz_check_error(rc, pmck_errormsg());
	if (rc == 0) {
		memset(buf, 0x5a, max_bytes);
		for (size_t i = 0; i < n && rc == 0; i++)
			rc = pmck_ckpt_write(c, i, buf);
		fuzz_check_error(rc, pmck_errormsg());
		if (rc == 0)
			rc = pmck_ckpt_commit(c);
		fuzz_check_error(rc, pmck_errormsg());
		if (rc) {
			pmck_ckpt_abort(c);
		} else {
			rc = pmck_store_recover(s, &info);
			fuzz_assert(rc == 0 && info.step == step, "committed step %llu, recovered %d "
					"(step %llu): %s", (unsigned long long)step, rc,
					(unsigned long long)info.step, pmck_errormsg());
		}
	}
	free(buf);
}

static void
fuzz_one(const uint8_t *data, size_t len)
{
	if (!meta)
		setup();
	restore();
	if (len == 0)
		return;
	size_t n = len - 1 < meta_size ? len - 1 : meta_size;
	memcpy(meta, data + 1, n);
	if (data[0] & FIX_STATIC)
		fix_static();

	struct pmck_store *s = NULL;
	int rc = pmck_store_open(fx.pool, "s", &s);
	fuzz_check_error(rc, pmck_errormsg());
	if (rc == 0) {
		use_store(s);
		pmck_store_close(&s);
	}
}

static void
seed_meta(const char *dir, const char *name, unsigned flags)
{
	fuzz_seed_flagged(dir, name, flags, meta, meta_size);
}

static void
fuzz_seeds(const char *dir)
{
	setup();
	seed_meta(dir, "two-slots", 0);
	seed_meta(dir, "two-slots-fix", FIX_STATIC);
	struct slot_hdr *slot1 = (struct slot_hdr *)(meta + SLOT_HDR_OFF + 64);
	slot1->seal = 0; /* slot 1 unsealed: one checkpoint */
	seed_meta(dir, "one-slot", 0);
	memset(meta + SLOT_HDR_OFF, 0, 128); /* never committed */
	seed_meta(dir, "empty", 0);
	restore();
	((struct store_hdr *)meta)->ntensors = 2; /* map and checksum disagree */
	seed_meta(dir, "bad-ntensors", 0);
	seed_meta(dir, "ntensors-fix", FIX_STATIC);
	restore();
	((uint64_t *)(meta + ((struct store_hdr *)meta)->csum_off))[0] ^= 1; /* slot 0 damaged */
	seed_meta(dir, "bad-csum", 0);
	restore();
	memset(meta, 0, 8); /* interrupted create */
	seed_meta(dir, "no-magic", 0);
}
