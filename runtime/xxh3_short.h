/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * xxh3_short.h -- XXH3-64 of inputs up to 240 bytes (seed 0, the default
 * secret), for the GPU's hash kernel (gpu_checksum.cu), which takes the
 * short chunks that end a tensor (a tensor's last chunk may be as short as
 * 1 byte) where xxh3_long.h takes the others.  One thread computes it.
 *
 * libxxhash (0.8.x, whose XXH3 output is frozen) stays the reference: the
 * host never hashes with this file, and tests/xxh3_long.c checks it
 * against XXH3_64bits() for every length from 0 to 240 at every offset
 * modulo 8.  The arithmetic is XXH3's len_0to16, len_17to128 and
 * len_129to240 with seed 0.
 */
#ifndef PMCK_XXH3_SHORT_H
#define PMCK_XXH3_SHORT_H 1

#include <stdint.h>

#include "xxh3_long.h"

#define PMCK_XXH3_MIDSIZE_MAX 240
#define PMCK_XXH3_SECRET_SIZE_MIN 136 /* XXH3_SECRET_SIZE_MIN */

/* libxxhash's primes that only the short paths use. */
#define PMCK_XXH3_PRIME64_2 0xC2B2AE3D27D4EB4FULL
#define PMCK_XXH3_PRIME64_3 0x165667B19E3779F9ULL

/* 4 little-endian bytes at p, any alignment. */
PMCK_XXH3_FN uint32_t
pmck_xxh3_read32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

PMCK_XXH3_FN uint64_t
pmck_xxh3_rotl64(uint64_t x, unsigned r)
{
	return x << r | x >> (64 - r);
}

PMCK_XXH3_FN uint64_t
pmck_xxh3_swap64(uint64_t x)
{
	uint64_t y = 0;
	for (int k = 0; k < 8; k++, x >>= 8)
		y = y << 8 | (x & 0xff);
	return y;
}

/* XXH3_avalanche */
PMCK_XXH3_FN uint64_t
pmck_xxh3_avalanche(uint64_t h)
{
	h ^= h >> 37;
	h *= 0x165667919E3779F9ULL;
	return h ^ (h >> 32);
}

/* XXH64_avalanche */
PMCK_XXH3_FN uint64_t
pmck_xxh64_avalanche(uint64_t h)
{
	h ^= h >> 33;
	h *= PMCK_XXH3_PRIME64_2;
	h ^= h >> 29;
	h *= PMCK_XXH3_PRIME64_3;
	return h ^ (h >> 32);
}

/* XXH3_rrmxmx */
PMCK_XXH3_FN uint64_t
pmck_xxh3_rrmxmx(uint64_t h, uint64_t len)
{
	h ^= pmck_xxh3_rotl64(h, 49) ^ pmck_xxh3_rotl64(h, 24);
	h *= 0x9FB21C651E98DF25ULL;
	h ^= (h >> 35) + len;
	h *= 0x9FB21C651E98DF25ULL;
	return h ^ (h >> 28);
}

/* XXH3_mix16B with seed 0: 16 bytes of input against 16 of the secret. */
PMCK_XXH3_FN uint64_t
pmck_xxh3_mix16(const uint8_t *in, const uint8_t *key)
{
	return pmck_xxh3_fold64(pmck_xxh3_read64(in) ^ pmck_xxh3_read64(key),
			pmck_xxh3_read64(in + 8) ^ pmck_xxh3_read64(key + 8));
}

/* XXH3_len_0to16_64b */
PMCK_XXH3_FN uint64_t
pmck_xxh3_upto16(const uint8_t *in, uint64_t len, const uint8_t *secret)
{
	if (len > 8) {
		uint64_t lo = pmck_xxh3_read64(in) ^
				(pmck_xxh3_read64(secret + 24) ^ pmck_xxh3_read64(secret + 32));
		uint64_t hi = pmck_xxh3_read64(in + len - 8) ^
				(pmck_xxh3_read64(secret + 40) ^ pmck_xxh3_read64(secret + 48));
		return pmck_xxh3_avalanche(len + pmck_xxh3_swap64(lo) + hi +
				pmck_xxh3_fold64(lo, hi));
	}
	if (len >= 4) {
		uint64_t in64 = pmck_xxh3_read32(in + len - 4) + ((uint64_t)pmck_xxh3_read32(in) << 32);
		uint64_t bitflip = pmck_xxh3_read64(secret + 8) ^ pmck_xxh3_read64(secret + 16);
		return pmck_xxh3_rrmxmx(in64 ^ bitflip, len);
	}
	if (len) {
		uint32_t combined = (uint32_t)in[0] << 16 | (uint32_t)in[len >> 1] << 24 |
				(uint32_t)in[len - 1] | (uint32_t)len << 8;
		uint64_t bitflip = pmck_xxh3_read32(secret) ^ pmck_xxh3_read32(secret + 4);
		return pmck_xxh64_avalanche(combined ^ bitflip);
	}
	return pmck_xxh64_avalanche(pmck_xxh3_read64(secret + 56) ^ pmck_xxh3_read64(secret + 64));
}

/* XXH3_len_17to128_64b */
PMCK_XXH3_FN uint64_t
pmck_xxh3_upto128(const uint8_t *in, uint64_t len, const uint8_t *secret)
{
	uint64_t acc = len * PMCK_XXH3_PRIME64_1;
	/* pairs from both ends: (0, len - 16), (16, len - 32), ... as many as len needs */
	unsigned pairs = len > 96 ? 4 : len > 64 ? 3 : len > 32 ? 2 : 1;
	for (unsigned i = 0; i < pairs; i++) {
		acc += pmck_xxh3_mix16(in + 16 * i, secret + 32 * i);
		acc += pmck_xxh3_mix16(in + len - 16 * (i + 1), secret + 32 * i + 16);
	}
	return pmck_xxh3_avalanche(acc);
}

/* XXH3_len_129to240_64b */
PMCK_XXH3_FN uint64_t
pmck_xxh3_upto240(const uint8_t *in, uint64_t len, const uint8_t *secret)
{
	uint64_t acc = len * PMCK_XXH3_PRIME64_1;
	unsigned rounds = (unsigned)(len / 16);
	for (unsigned i = 0; i < 8; i++)
		acc += pmck_xxh3_mix16(in + 16 * i, secret + 16 * i);
	acc = pmck_xxh3_avalanche(acc);
	for (unsigned i = 8; i < rounds; i++) /* XXH3_MIDSIZE_STARTOFFSET: 3 */
		acc += pmck_xxh3_mix16(in + 16 * i, secret + 16 * (i - 8) + 3);
	/* the last 16 bytes, XXH3_MIDSIZE_LASTOFFSET: 17 */
	acc += pmck_xxh3_mix16(in + len - 16, secret + PMCK_XXH3_SECRET_SIZE_MIN - 17);
	return pmck_xxh3_avalanche(acc);
}

/* XXH3_64bits(in, len) for len <= PMCK_XXH3_MIDSIZE_MAX: any alignment. */
PMCK_XXH3_FN uint64_t
pmck_xxh3_short(const uint8_t *in, uint64_t len, const uint8_t *secret)
{
	if (len <= 16)
		return pmck_xxh3_upto16(in, len, secret);
	if (len <= 128)
		return pmck_xxh3_upto128(in, len, secret);
	return pmck_xxh3_upto240(in, len, secret);
}

#endif
