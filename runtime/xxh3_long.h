/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * xxh3_long.h -- XXH3-64's path for inputs longer than 240 bytes (seed 0,
 * the default secret), cut into the pieces a GPU warp computes in parallel,
 * for device hashing of the GPU path (gpu.cu) and its tests on the host.
 *
 * libxxhash (0.8.x, whose XXH3 output is frozen) stays the reference: the
 * host never hashes with this file, and tests/xxh3_long.c checks that the
 * decomposition below gives XXH3_64bits() for every length class.
 *
 * XXH3 on a long input keeps eight 64-bit accumulators.  Each 64-byte
 * stripe adds, for each of its eight 8-byte words w (lane i):
 *   acc[i]     += lo32(w ^ key) * hi32(w ^ key)   key: secret at 8 * (stripe + i)
 *   acc[i ^ 1] += w
 * and after each 1 KiB block (16 stripes) every accumulator is scrambled.
 * Within a block the additions commute (mod 2^64), so the 128 words of a
 * block can be taken by 32 threads, 4 each, and their sums combined: lane i's
 * sum is the products of lane i's words plus the words of lane i ^ 1.  The
 * blocks stay in order: the scramble is what is sequential.  After the
 * last whole block come the stripes of the partial block (unscrambled), the
 * input's last 64 bytes as one more stripe against the secret at 121, and
 * the merge of the accumulators with the length.
 *
 * Every function takes the secret (XXH3_kSecret, 192 bytes) by pointer:
 * the host passes libxxhash's own array, the device a copy of it.
 */
#ifndef PMCK_XXH3_LONG_H
#define PMCK_XXH3_LONG_H 1

#include <stdint.h>

#ifdef __CUDACC__
#define PMCK_XXH3_FN static __host__ __device__ __forceinline__
#else
#define PMCK_XXH3_FN static inline
#endif

#define PMCK_XXH3_LONG_MIN 241    /* XXH3's other paths take inputs up to 240 bytes */
#define PMCK_XXH3_STRIPE 64
#define PMCK_XXH3_BLOCK 1024      /* 16 stripes; the secret is 192 bytes */
#define PMCK_XXH3_SECRET_SIZE 192
#define PMCK_XXH3_WORDS 128       /* 8-byte words per block */
#define PMCK_XXH3_SCRAMBLE_KEY (PMCK_XXH3_SECRET_SIZE - PMCK_XXH3_STRIPE)       /* 128 */
#define PMCK_XXH3_LAST_KEY (PMCK_XXH3_SECRET_SIZE - PMCK_XXH3_STRIPE - 7)       /* 121 */
#define PMCK_XXH3_MERGE_KEY 11

/* libxxhash's XXH_PRIME32_1 and XXH_PRIME64_1; the accumulators start at XXH3_INIT_ACC. */
#define PMCK_XXH3_PRIME32_1 0x9E3779B1U
#define PMCK_XXH3_PRIME64_1 0x9E3779B185EBCA87ULL

PMCK_XXH3_FN uint64_t
pmck_xxh3_init_acc(unsigned lane)
{
	/* XXH3_INIT_ACC: PRIME32_3, PRIME64_1..4, PRIME32_2, PRIME64_5, PRIME32_1 */
	switch (lane & 7) {
	case 0: return 0xC2B2AE3DU;
	case 1: return 0x9E3779B185EBCA87ULL;
	case 2: return 0xC2B2AE3D27D4EB4FULL;
	case 3: return 0x165667B19E3779F9ULL;
	case 4: return 0x85EBCA77C2B2AE63ULL;
	case 5: return 0x85EBCA77U;
	case 6: return 0x27D4EB2F165667C5ULL;
	default: return 0x9E3779B1U;
	}
}

/* 8 little-endian bytes at p, any alignment (the secret's keys at 121 and 11 are not aligned). */
PMCK_XXH3_FN uint64_t
pmck_xxh3_read64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int k = 7; k >= 0; k--)
		v = v << 8 | p[k];
	return v;
}

/*
 * What word w of a stripe adds to its own lane's accumulator, against its
 * key: the secret at 8 * (s + i) for word i of stripe s (the last stripe's:
 * at PMCK_XXH3_LAST_KEY + 8 * i).
 */
PMCK_XXH3_FN uint64_t
pmck_xxh3_product_key(uint64_t w, uint64_t key)
{
	uint64_t dk = w ^ key;
	return (uint64_t)(uint32_t)dk * (dk >> 32);
}

/* Lane i's accumulator scrambled after a block: key at PMCK_XXH3_SCRAMBLE_KEY + 8 * i. */
PMCK_XXH3_FN uint64_t
pmck_xxh3_scramble_key(uint64_t acc, uint64_t key)
{
	acc ^= acc >> 47;
	acc ^= key;
	return acc * PMCK_XXH3_PRIME32_1;
}

/* Whole blocks, and the stripes of the partial block that follow them. */
PMCK_XXH3_FN uint64_t
pmck_xxh3_blocks(uint64_t len)
{
	return (len - 1) / PMCK_XXH3_BLOCK;
}

PMCK_XXH3_FN unsigned
pmck_xxh3_tail_stripes(uint64_t len)
{
	return (unsigned)(((len - 1) - PMCK_XXH3_BLOCK * pmck_xxh3_blocks(len)) / PMCK_XXH3_STRIPE);
}

/* The 64x64 -> 128-bit product, its halves xor-ed (XXH3_mul128_fold64). */
PMCK_XXH3_FN uint64_t
pmck_xxh3_fold64(uint64_t a, uint64_t b)
{
#ifdef __CUDA_ARCH__
	return (a * b) ^ __umul64hi(a, b);
#else
	unsigned __int128 p = (unsigned __int128)a * b;
	return (uint64_t)p ^ (uint64_t)(p >> 64);
#endif
}

/* The final value from the eight accumulators and the input's length. */
PMCK_XXH3_FN uint64_t
pmck_xxh3_merge(const uint64_t acc[8], uint64_t len, const uint8_t *secret)
{
	uint64_t h = len * PMCK_XXH3_PRIME64_1;
	for (unsigned i = 0; i < 4; i++) {
		const uint8_t *key = secret + PMCK_XXH3_MERGE_KEY + 16 * i;
		h += pmck_xxh3_fold64(acc[2 * i] ^ pmck_xxh3_read64(key),
				acc[2 * i + 1] ^ pmck_xxh3_read64(key + 8));
	}
	/* XXH3_avalanche */
	h ^= h >> 37;
	h *= 0x165667919E3779F9ULL;
	return h ^ (h >> 32);
}

#endif
