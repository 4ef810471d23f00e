/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * xxh3_warp.h -- XXH3-64 of a long input computed on the host the way the
 * GPU's hash kernel (runtime/gpu.cu) does, from runtime/xxh3_long.h's
 * pieces: 32 threads, 4 words of each 1 KiB block each, sums by lane.
 * tests/xxh3_long.c checks it against libxxhash; tests/gpu_fake.c hashes
 * with it where a GPU would.
 */
#ifndef PMCK_TEST_XXH3_WARP_H
#define PMCK_TEST_XXH3_WARP_H 1

#include <stdint.h>
#include <string.h>

#include "../runtime/xxh3_long.h"

#define WARP 32

/*
 * The sum each lane's accumulator gets from words [0, nwords) of a block:
 * thread t takes words t, t + 32, ...; all of them are of lane t % 8; its
 * products go to that lane, its words to lane ^ 1 (the kernel: a shuffle
 * with thread t ^ 1, then a sum over threads t, t ^ 8, t ^ 16, t ^ 24).
 */
static inline void
lane_sums(const uint64_t *words, unsigned nwords, unsigned key0, const uint8_t *secret,
		uint64_t sum[8])
{
	uint64_t prod[WARP] = {0}, plain[WARP] = {0};

	for (unsigned t = 0; t < WARP; t++)
		for (unsigned w = t; w < nwords; w += WARP) {
			prod[t] += pmck_xxh3_product_key(words[w], pmck_xxh3_read64(secret + key0 +
					8 * (w / 8 + w % 8)));
			plain[t] += words[w];
		}
	for (unsigned i = 0; i < 8; i++)
		sum[i] = 0;
	for (unsigned t = 0; t < WARP; t++)
		sum[t % 8] += prod[t] + plain[t ^ 1];
}

static inline uint64_t
warp_hash(const uint8_t *p, uint64_t len, const uint8_t *secret)
{
	uint64_t acc[8], sum[8], words[PMCK_XXH3_WORDS];
	uint64_t nb = pmck_xxh3_blocks(len);

	for (unsigned i = 0; i < 8; i++)
		acc[i] = pmck_xxh3_init_acc(i);
	for (uint64_t b = 0; b <= nb; b++) {
		unsigned n = b < nb ? PMCK_XXH3_WORDS : 8 * pmck_xxh3_tail_stripes(len);
		memcpy(words, p + b * PMCK_XXH3_BLOCK, 8 * n); /* the kernel: aligned loads */
		lane_sums(words, n, 0, secret, sum);
		for (unsigned i = 0; i < 8; i++) {
			acc[i] += sum[i];
			if (b < nb)
				acc[i] = pmck_xxh3_scramble_key(acc[i], pmck_xxh3_read64(secret +
						PMCK_XXH3_SCRAMBLE_KEY + 8 * i));
		}
	}
	/* The last 64 bytes, one more stripe against another key (threads 0..7). */
	for (unsigned i = 0; i < 8; i++)
		words[i] = pmck_xxh3_read64(p + len - PMCK_XXH3_STRIPE + 8 * i);
	lane_sums(words, 8, PMCK_XXH3_LAST_KEY, secret, sum);
	for (unsigned i = 0; i < 8; i++)
		acc[i] += sum[i];
	return pmck_xxh3_merge(acc, len, secret);
}

#endif
