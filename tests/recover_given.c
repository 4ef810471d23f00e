/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * recover_given.c -- pmck_store_recover_given: a recovery that takes some
 * tensors' checksums from the caller (a load's copies, hashed on the GPU)
 * instead of hashing them in the region.  Here the caller's checksums are
 * pmck_tensor_checksum over host copies, as pmck_gpu_hasher computes them
 * over device copies (tests/gpu_hasher.c checks that equality on a GPU).
 */
#include <errno.h>
#include <string.h>

#include "ckpt_util.h"

enum { NT = 5 };

static struct pmck_store *s;
static size_t bytes[NT];
static unsigned fill_calls;
static int fill_ret;
static uint64_t fill_with[NT];

/* A pmck_given_checksums.fill: counts its calls, then gives fill_with or fails with fill_ret. */
static int
fill_counted(void *arg, uint64_t *csum, size_t n)
{
	fill_calls++;
	if (arg != &fill_calls)
		return -EFAULT;
	if (fill_ret)
		return fill_ret;
	memcpy(csum, fill_with, n * sizeof(*csum));
	return 0;
}

/* The checksums of step `step`'s tensors idx[0..n), from the bytes the writer wrote. */
static void
checksums_of(uint64_t step, const size_t *idx, size_t n, uint64_t *out)
{
	for (size_t j = 0; j < n; j++) {
		uint8_t *b = malloc(bytes[idx[j]] ? bytes[idx[j]] : 1);
		fill_tensor(step, idx[j], b, bytes[idx[j]]);
		out[j] = pmck_tensor_checksum(b, bytes[idx[j]]);
		free(b);
	}
}

/* TAP's Bail out!: the rest cannot run. */
static void
bail(const char *what)
{
	printf("Bail out! %s: %s\n", what, pmck_errormsg());
	exit(1);
}

static void
commit_step(uint64_t step)
{
	struct pmck_ckpt *c;
	void *src[NT];

	if (pmck_store_begin(s, step, &c))
		bail("begin");
	for (size_t i = 0; i < NT; i++) {
		src[i] = malloc(bytes[i] ? bytes[i] : 1);
		fill_tensor(step, i, src[i], bytes[i]);
	}
	if (pmck_ckpt_write_all(c, (const void *const *)src, 1) || pmck_ckpt_commit(c))
		bail("commit");
	for (size_t i = 0; i < NT; i++)
		free(src[i]);
}

/* The slot that holds `step`. */
static unsigned
slot_of(uint64_t step)
{
	return pmck_store_slot_step(s, 0) == (int64_t)step ? 0 : 1;
}

int
main(void)
{
	const char *path = scratch_path("recover_given");
	struct pma_region *r;
	struct pma_pool *pool;
	struct pmck_recovery rec;
	/* Several chunks, one ending in a short chunk (100 bytes), small ones, a scalar. */
	struct pmck_tensor_desc d[NT] = {
		{.name = "emb", .dtype = PMCK_DTYPE_F32, .ndim = 2, .shape = {3000, 777}, .layer = 0},
		{.name = "odd", .dtype = PMCK_DTYPE_U8, .ndim = 1, .shape = {(1 << 20) + 100}, .layer = 1},
		{.name = "l1.w", .dtype = PMCK_DTYPE_BF16, .ndim = 2, .shape = {64, 64}, .layer = 1},
		{.name = "l1.b", .dtype = PMCK_DTYPE_F32, .ndim = 1, .shape = {3}, .layer = 2},
		{.name = "step", .dtype = PMCK_DTYPE_I64, .ndim = 0, .layer = 2},
	};
	const size_t gpu[] = {0, 1, 2, 3}; /* the tensors a load would copy to a GPU */
	const size_t ng = sizeof(gpu) / sizeof(gpu[0]);
	uint64_t csum[NT];

	plan(39);
	unlink(path);
	if (open_store(path, 64 << 20, 1, "m", d, NT, &r, &pool, &s))
		bail("cannot make the store");
	for (size_t i = 0; i < NT; i++) {
		struct pmck_tensor_info ti;
		pmck_store_tensor(s, i, &ti);
		bytes[i] = ti.nbytes;
	}
	commit_step(1);
	commit_step(2);
	const unsigned k2 = slot_of(2), k1 = slot_of(1);

	/* Bad input: refused, nothing recovered, a message of its own. */
	struct pmck_given_checksums g = {.slot = k2, .step = 2, .n = ng, .idx = gpu, .csum = csum};
	size_t twice[] = {0, 0}, out_of_range[] = {NT};
	struct pmck_given_checksums bad = g;
	mark_errormsg();
	is_int(pmck_store_recover_given(s, NULL, NULL, &rec), -EINVAL, "no checksums: -EINVAL");
	ok(errormsg_fresh(), "and says so: %s", pmck_errormsg());
	bad.slot = 2;
	is_int(pmck_store_recover_given(s, NULL, &bad, &rec), -EINVAL, "slot 2: -EINVAL");
	bad = g;
	bad.idx = twice;
	bad.n = 2;
	mark_errormsg();
	is_int(pmck_store_recover_given(s, NULL, &bad, &rec), -EINVAL, "an index given twice: -EINVAL");
	ok(errormsg_fresh() && strstr(pmck_errormsg(), "twice"), "named: %s", pmck_errormsg());
	bad.idx = out_of_range;
	bad.n = 1;
	is_int(pmck_store_recover_given(s, NULL, &bad, &rec), -EINVAL, "an index out of range: -EINVAL");
	bad.idx = NULL;
	is_int(pmck_store_recover_given(s, NULL, &bad, &rec), -EINVAL, "no indexes: -EINVAL");
	ok(pmck_store_tensor_data(s, 0) == NULL, "nothing readable after the refusals");

	/* The right checksums: step 2, nothing rejected. */
	checksums_of(2, gpu, ng, csum);
	is_int(pmck_store_recover_given(s, NULL, &g, &rec), 0, "recover_given, the copies' checksums");
	ok(rec.step == 2 && rec.slot == k2 && !rec.rejected, "step 2, nothing rejected");

	/* Those tensors' bytes in the region are not read: damage there goes unseen... */
	uint8_t *emb2 = (uint8_t *)pmck_store_slot_tensor_data(s, k2, 0);
	emb2[12345] ^= 0x10;
	is_int(pmck_store_recover_given(s, NULL, &g, &rec), 0,
			"the region's 'emb' damaged after the copy: recover_given");
	ok(rec.step == 2 && !rec.rejected, "takes the copy's checksum: step 2");
	/* ...by this recovery; a full one hashes them. */
	is_int(pmck_store_recover(s, &rec), 0, "recover");
	ok(rec.step == 1 && rec.rejected && !strcmp(rec.rejected_tensor, "emb"),
			"hashes the region: step 2 rejected at 'emb', step 1 loaded");
	emb2[12345] ^= 0x10;

	/* A copy whose checksum differs (damaged on its way): the slot is rejected. */
	csum[1] ^= 1;
	is_int(pmck_store_recover_given(s, NULL, &g, &rec), 0, "a copy's checksum differs");
	ok(rec.step == 1 && rec.rejected && rec.rejected_step == 2 &&
			!strcmp(rec.rejected_tensor, "odd"), "step 2 rejected at 'odd', step 1 loaded");
	size_t nrej = 0;
	const struct pmck_rejection *rj = pmck_store_rejections(s, &nrej);
	ok(nrej == 1 && rj && strstr(rj[0].reason, "'odd'"), "one rejection, naming 'odd': %s",
			nrej ? rj[0].reason : "none");

	/* Given for another step than the slot holds: not used (the slot is hashed). */
	g.step = 3;
	is_int(pmck_store_recover_given(s, NULL, &g, &rec), 0, "checksums of step 3 for step 2's slot");
	ok(rec.step == 2 && !rec.rejected, "ignored: step 2 verified in the region");
	g.step = 2;
	csum[1] ^= 1;

	/* fill: called once, when the slot is reached, with the arg given. */
	memcpy(fill_with, csum, sizeof(csum));
	uint64_t room[NT] = {0};
	struct pmck_given_checksums gf = g;
	gf.csum = room;
	gf.fill = fill_counted;
	gf.arg = &fill_calls;
	fill_calls = 0;
	is_int(pmck_store_recover_given(s, NULL, &gf, &rec), 0, "recover_given with fill");
	ok(rec.step == 2 && fill_calls == 1 && room[0] == csum[0], "step 2, fill called once (%u)",
			fill_calls);
	/* A fill that fails: the region's bytes are hashed instead, damage and all. */
	fill_calls = 0;
	fill_ret = -EIO;
	emb2[7] ^= 0x01;
	is_int(pmck_store_recover_given(s, NULL, &gf, &rec), 0, "fill fails, 'emb' damaged in the region");
	ok(fill_calls == 1 && rec.step == 1 && rec.rejected && !strcmp(rec.rejected_tensor, "emb"),
			"the region hashed: step 2 rejected at 'emb'");
	emb2[7] ^= 0x01;
	fill_ret = 0;
	/* The slot rejected by a tensor the CPU hashes: fill still called, once. */
	uint8_t *step2 = (uint8_t *)pmck_store_slot_tensor_data(s, k2, 4);
	step2[3] ^= 0x08;
	fill_calls = 0;
	is_int(pmck_store_recover_given(s, NULL, &gf, &rec), 0, "'step' damaged in the given slot");
	ok(fill_calls == 1 && rec.step == 1 && !strcmp(rec.rejected_tensor, "step"),
			"rejected at 'step', step 1; fill called once (%u)", fill_calls);
	step2[3] ^= 0x08;
	/* The given slot never reached (the newest verifies): fill is not called. */
	fill_calls = 0;
	gf.slot = k1;
	gf.step = 1;
	is_int(pmck_store_recover_given(s, NULL, &gf, &rec), 0, "given for the older slot");
	ok(rec.step == 2 && fill_calls == 0, "step 2 from the newest; fill not called (%u)", fill_calls);

	/* With destinations: a given tensor with a dst of its own is hashed while copied. */
	void *dst[NT] = {0};
	uint8_t *want[NT];
	for (size_t i = 0; i < NT; i++) {
		dst[i] = malloc(bytes[i] ? bytes[i] : 1);
		want[i] = malloc(bytes[i] ? bytes[i] : 1);
		fill_tensor(2, i, want[i], bytes[i]);
	}
	void *into[NT] = {NULL, dst[1], NULL, NULL, dst[4]};
	csum[1] ^= 1; /* wrong, but 'odd' has a dst: not used */
	is_int(pmck_store_recover_given(s, into, &g, &rec), 0, "recover_given with destinations");
	ok(rec.step == 2 && !rec.rejected && !memcmp(dst[1], want[1], bytes[1]) &&
			!memcmp(dst[4], want[4], bytes[4]),
			"step 2; 'odd' hashed and copied despite its wrong given value; 'step' copied");
	csum[1] ^= 1;
	/* fill with every given tensor copied to a dst: still called once (its hashes waited for), its values unused. */
	void *all_dst[NT] = {dst[0], dst[1], dst[2], dst[3], NULL};
	for (size_t j = 0; j < NT; j++)
		fill_with[j] = ~csum[j < ng ? j : 0]; /* wrong, every one */
	gf = g;
	gf.csum = room;
	gf.fill = fill_counted;
	gf.arg = &fill_calls;
	fill_calls = 0;
	is_int(pmck_store_recover_given(s, all_dst, &gf, &rec), 0,
			"fill, every given tensor with a dst of its own");
	ok(rec.step == 2 && !rec.rejected && fill_calls == 1 && !memcmp(dst[0], want[0], bytes[0]),
			"fill called once (%u), its wrong values unused: step 2, copied", fill_calls);

	/* Both slots bad: the newest hashed and damaged, the older given and wrong. */
	emb2[99] ^= 0x80;
	struct pmck_given_checksums g1 = {.slot = k1, .step = 1, .n = ng, .idx = gpu, .csum = csum};
	checksums_of(1, gpu, ng, csum);
	csum[3] ^= 1;
	is_int(pmck_store_recover_given(s, NULL, &g1, &rec), PMCK_E_NONE_USABLE,
			"newest damaged, the older's copy of 'l1.b' wrong: PMCK_E_NONE_USABLE");
	rj = pmck_store_rejections(s, &nrej);
	ok(nrej == 2 && strstr(rj[0].reason, "'emb'") && strstr(rj[1].reason, "'l1.b'"),
			"both rejected, each naming its tensor");
	csum[3] ^= 1;
	is_int(pmck_store_recover_given(s, NULL, &g1, &rec), 0, "the older's copies right");
	ok(rec.step == 1 && rec.rejected && rec.rejected_step == 2, "step 1, step 2 rejected");
	emb2[99] ^= 0x80;

	/* No tensor given: a plain recovery. */
	struct pmck_given_checksums none = {.slot = k2, .step = 2};
	is_int(pmck_store_recover_given(s, NULL, &none, &rec), 0, "nothing given");
	ok(rec.step == 2 && !rec.rejected, "step 2, hashed in the region");

	/* A short last chunk and a scalar, given: their copies' checksums stand. */
	const size_t small[] = {1, 4};
	uint64_t cs[2];
	checksums_of(2, small, 2, cs);
	struct pmck_given_checksums gs = {.slot = k2, .step = 2, .n = 2, .idx = small, .csum = cs};
	cs[1] ^= 1;
	is_int(pmck_store_recover_given(s, NULL, &gs, &rec), 0, "the scalar's copy wrong");
	ok(rec.step == 1 && !strcmp(rec.rejected_tensor, "step"), "step 2 rejected at 'step'");

	for (size_t i = 0; i < NT; i++) {
		free(dst[i]);
		free(want[i]);
	}
	close_store(&r, &pool, &s);
	unlink(path);
	return done_testing();
}
