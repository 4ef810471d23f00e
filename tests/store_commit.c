/* store_commit.c -- the two-slot protocol: begin, write, commit, abort, recover. */
#include <errno.h>
#include <string.h>

#include "pmckpt.h"
#include "tap.h"

static void
fill(uint8_t *p, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)((seed * 131 + i * 7) >> 3);
}

int
main(void)
{
	const char *path = scratch_path("commit");
	struct pma_region *r;
	struct pma_pool *pool;
	struct pmck_store *s;
	struct pmck_ckpt *c;
	struct pmck_recovery rec;

	/* Big enough to span several hash chunks; small ones to be packed. */
	struct pmck_tensor_desc d[] = {
		/* 9.3 MB: more than one of recovery's 8 MiB pieces, so two threads may copy it */
		{.name = "emb", .dtype = PMCK_DTYPE_F32, .ndim = 2, .shape = {3000, 777}, .layer = 0},
		{.name = "l1.w", .dtype = PMCK_DTYPE_BF16, .ndim = 2, .shape = {64, 64}, .layer = 1},
		{.name = "l1.b", .dtype = PMCK_DTYPE_F32, .ndim = 1, .shape = {3}, .layer = 1},
		{.name = "step", .dtype = PMCK_DTYPE_I64, .ndim = 0, .layer = 2},
	};
	size_t n = sizeof(d) / sizeof(d[0]);
	uint8_t *src[4], *got;
	size_t bytes[4];


	unlink(path);
	if (pma_region_open(path, 64 << 20, PMA_REGION_CREATE, &r) || pma_pool_create(r, 0, &pool)) {
		diag("%s", pma_errormsg());
		return 1;
	}
	is_int(pmck_store_create(pool, "m", d, n, &s), 0, "create store");
	for (size_t i = 0; i < n; i++) {
		struct pmck_tensor_info ti;
		pmck_store_tensor(s, i, &ti);
		bytes[i] = ti.nbytes;
		src[i] = malloc(ti.nbytes);
	}
	got = malloc(bytes[0]);

	is_int(pmck_store_recover(s, &rec), PMCK_E_NO_CHECKPOINT, "empty store: nothing to recover");
	is_int(pmck_store_begin(s, 1, &c), 0, "begin step 1");
	is_int(pmck_store_begin(s, 2, &c), -EBUSY, "second begin while in flight is -EBUSY");
	for (size_t i = 0; i < n; i++)
		fill(src[i], bytes[i], 1 + i);
	for (size_t i = 0; i < n - 1; i++)
		pmck_ckpt_write(c, i, src[i]);
	is_int(pmck_ckpt_commit(c), -EINVAL, "commit with a tensor missing is refused");
	ok(strstr(pmck_errormsg(), "step") != NULL, "and names it: %s", pmck_errormsg());
	pmck_ckpt_write(c, n - 1, src[n - 1]);
	unsigned slot1 = pmck_ckpt_slot(c);
	is_int(pmck_ckpt_commit(c), 0, "commit step 1");

	is_int(pmck_ckpt_write(c, 0, src[0]), -EINVAL, "a committed handle is dead: write refused");
	is_int(pmck_ckpt_commit(c), -EINVAL, "... and commit refused");
	ok(pmck_ckpt_tensor_ptr(c, 0) == NULL, "... and tensor_ptr gives NULL");
	is_int(pmck_store_recover(s, &rec), 0, "recover");
	is_int(rec.step, 1, "recovered step 1");
	pmck_store_read(s, 0, got);
	ok(!memcmp(got, src[0], bytes[0]), "tensor 0 bit-exact");
	ok(!memcmp(pmck_store_tensor_data(s, 3), src[3], bytes[3]), "scalar bit-exact");

	/* Step 2 goes to the other slot; abort leaves step 1 readable. */
	is_int(pmck_store_begin(s, 1, &c), -EINVAL, "a step not after the newest is refused");
	is_int(pmck_store_begin(s, 2, &c), 0, "begin step 2");
	ok(pmck_ckpt_slot(c) != slot1, "step 2 targets the other slot");
	for (size_t i = 0; i < n; i++)
		fill(src[i], bytes[i], 100 + i);
	pmck_ckpt_write_all(c, (const void *const *)src, 2);
	pmck_ckpt_abort(c);
	is_int(pmck_ckpt_commit(c), -EINVAL, "an aborted handle cannot commit");
	is_int(pmck_store_recover(s, &rec), 0, "recover after abort");
	is_int(rec.step, 1, "still step 1 after abort");

	is_int(pmck_store_begin(s, 2, &c), 0, "begin step 2 again");
	is_int(pmck_ckpt_write_all(c, (const void *const *)src, 2), 0, "write_all with 2 threads");
	is_int(pmck_ckpt_commit(c), 0, "commit step 2");

	/* Reopen from scratch: the newest commit is found and verified. */
	pmck_store_close(&s);
	pma_pool_close(&pool);
	pma_region_close(&r);
	pma_region_open(path, 0, 0, &r);
	is_int(pma_pool_open(r, &pool), 0, "reopen pool");
	is_int(pmck_store_open(pool, "m", &s), 0, "reopen store");
	is_int(pmck_store_recover(s, &rec), 0, "recover after reopen");
	is_int(rec.step, 2, "step 2");
	int same = 1;
	for (size_t i = 0; i < n; i++)
		same &= !memcmp(pmck_store_tensor_data(s, i), src[i], bytes[i]);
	ok(same, "all tensors of step 2 bit-exact");
	ok(pmck_store_tensor_data(s, n) == NULL, "out-of-range tensor gives NULL");

	/* recover_into: verified and copied in one pass; NULL: verified, not copied. */
	uint8_t *dst[4], *want1[4];
	for (size_t i = 0; i < n; i++) {
		dst[i] = malloc(bytes[i]);
		memset(dst[i], 0xa5, bytes[i]);
		want1[i] = malloc(bytes[i]);
		fill(want1[i], bytes[i], 1 + i); /* step 1's bytes */
	}
	void *into[4] = {dst[0], dst[1], NULL, dst[3]};
	is_int(pmck_store_recover_into(s, NULL, &rec), -EINVAL, "recover_into without dst: -EINVAL");
	is_int(pmck_store_recover_into(s, into, &rec), 0, "recover_into");
	is_int(rec.step, 2, "step 2");
	ok(!memcmp(dst[0], src[0], bytes[0]) && !memcmp(dst[1], src[1], bytes[1]) &&
			!memcmp(dst[3], src[3], bytes[3]), "every destination holds step 2, bit-exact");
	ok(dst[2][0] == 0xa5 && dst[2][bytes[2] - 1] == 0xa5, "a NULL destination is left alone");
	ok(!memcmp(pmck_store_tensor_data(s, 2), src[2], bytes[2]),
			"and the checkpoint is readable as after recover");

	/* Step 2 damaged in its last piece: step 1 is verified and copied over it. */
	unsigned slot2 = rec.slot;
	uint8_t *bad = (uint8_t *)pmck_store_slot_tensor_data(s, slot2, 0) + bytes[0] - 5;
	*bad ^= 0x40;
	is_int(pmck_store_recover_into(s, into, &rec), 0, "recover_into, step 2 damaged");
	ok(rec.step == 1 && rec.rejected && rec.rejected_step == 2 &&
			!strcmp(rec.rejected_tensor, "emb"), "step 1, step 2 rejected at 'emb'");
	size_t nrej = 0;
	pmck_store_rejections(s, &nrej);
	is_int(nrej, 1, "one rejection listed");
	ok(!memcmp(dst[0], want1[0], bytes[0]) && !memcmp(dst[1], want1[1], bytes[1]) &&
			!memcmp(dst[3], want1[3], bytes[3]), "every destination holds step 1, bit-exact");

	/* Both slots damaged: nothing usable, said as by recover. */
	uint8_t *bad1 = (uint8_t *)pmck_store_slot_tensor_data(s, !slot2, 3);
	*bad1 ^= 1;
	is_int(pmck_store_recover_into(s, into, &rec), PMCK_E_NONE_USABLE,
			"both slots damaged: PMCK_E_NONE_USABLE");
	ok(pmck_store_tensor_data(s, 0) == NULL, "and nothing is readable");
	*bad1 ^= 1;
	*bad ^= 0x40;
	is_int(pmck_store_recover(s, &rec), 0, "repaired by hand: recover");
	is_int(rec.step, 2, "step 2 again");
	for (size_t i = 0; i < n; i++) {
		free(dst[i]);
		free(want1[i]);
	}

	pmck_store_close(&s);
	pma_pool_close(&pool);
	pma_region_close(&r);
	unlink(path);
	for (size_t i = 0; i < n; i++)
		free(src[i]);
	free(got);
	return done_testing();
}
