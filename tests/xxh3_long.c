/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * xxh3_long.c -- runtime/xxh3_long.h, the pieces of XXH3-64 that the GPU's
 * hash kernel (runtime/gpu.cu) computes, put together on the host the way a
 * warp does (xxh3_warp.h), against the runtime's checksum (libxxhash):
 * every length from 241 to 5000 bytes, and lengths around blocks and up to
 * PMCK_HASH_CHUNK; and runtime/xxh3_short.h, XXH3-64 of up to 240 bytes as
 * one GPU thread computes it, for every length from 0 to 240 at each start
 * modulo 8.  What only a GPU shows, the kernel's shuffles and memory,
 * tests/gpu_pipeline.c and tests/gpu_hash.c check.
 */
#include <stdint.h>

#include "tap.h"
#include "../runtime/internal.h"
#include "xxh3_warp.h"
#include "../runtime/xxh3_short.h"

int
main(void)
{
	const size_t cap = PMCK_HASH_CHUNK + 64;
	const uint8_t *secret = pmck__xxh3_secret();
	uint8_t *buf = aligned_alloc(64, cap);
	static const uint64_t big[] = {1023 + 241, 2047, 2048, 2049, 4095, 4096, 4097, 65535, 65536,
			65537, 100003, PMCK_HASH_CHUNK - 1, PMCK_HASH_CHUNK - 64, PMCK_HASH_CHUNK};
	long bad = 0, first_bad = -1;

	plan(6);
	srand(7);
	for (size_t i = 0; i < cap; i++)
		buf[i] = (uint8_t)(rand() >> 5);
	for (uint64_t len = PMCK_XXH3_LONG_MIN; len <= 5000; len++)
		if (warp_hash(buf, len, secret) != pmck__hash(buf, len) && bad++ == 0)
			first_bad = (long)len;
	ok(bad == 0, "every length from %d to 5000 bytes hashes as libxxhash's XXH3_64bits "
			"(%ld differ; first at %ld)", PMCK_XXH3_LONG_MIN, bad, first_bad);
	bad = 0;
	for (size_t k = 0; k < sizeof(big) / sizeof(big[0]); k++)
		for (size_t off = 0; off <= 32; off += 8) /* 8-aligned starts, as the kernel takes */
			if (warp_hash(buf + off, big[k], secret) != pmck__hash(buf + off, big[k]) &&
			    bad++ == 0)
				first_bad = (long)big[k];
	ok(bad == 0, "lengths around blocks and up to a hash chunk, 8-aligned starts (%ld differ; "
			"first at %ld)", bad, first_bad);
	bad = 0;
	for (uint64_t len = 0; len <= PMCK_XXH3_MIDSIZE_MAX; len++)
		for (size_t off = 0; off < 8; off++) /* the short path takes any alignment */
			if (pmck_xxh3_short(buf + off, len, secret) != pmck__hash(buf + off, len) &&
			    bad++ == 0)
				first_bad = (long)len;
	ok(bad == 0, "every length from 0 to %d bytes, each start modulo 8, hashes as "
			"libxxhash's XXH3_64bits (%ld differ; first at %ld)", PMCK_XXH3_MIDSIZE_MAX, bad,
			first_bad);
	memset(buf, 0, cap);
	bad = 0;
	for (uint64_t len = 0; len <= PMCK_XXH3_MIDSIZE_MAX; len++)
		if (pmck_xxh3_short(buf, len, secret) != pmck__hash(buf, len) && bad++ == 0)
			first_bad = (long)len;
	ok(bad == 0, "zeros of every short length (%ld differ; first at %ld)", bad, first_bad);
	ok(warp_hash(buf, PMCK_HASH_CHUNK, secret) == pmck__hash(buf, PMCK_HASH_CHUNK),
			"a chunk of zeros");
	/* One flipped bit anywhere changes the value (the test itself can fail). */
	uint64_t before = warp_hash(buf, 5000, secret);
	buf[4999] ^= 1;
	ok(warp_hash(buf, 5000, secret) != before && warp_hash(buf, 5000, secret) ==
			pmck__hash(buf, 5000), "a flipped last bit changes the value, as libxxhash's");
	free(buf);
	return done_testing();
}
