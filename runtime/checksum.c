/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * checksum.c -- XXH3 checksums, fused with the copy into the region.
 *
 * Hashing after copying reads every byte from DRAM twice, so each byte is
 * hashed while it is in L1 on its way to the region.  libxxhash's runtime
 * dispatch picks AVX2/AVX-512 on the CPU it runs on.
 *
 * A tensor's checksum is XXH3-64 over the little-endian XXH3-64 values of
 * its PMCK_HASH_CHUNK chunks, so disjoint chunks can be hashed by
 * different threads and still give one value.
 */
#include <immintrin.h>
#include <string.h>
#include <libpmem2.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>
#include <xxh_x86dispatch.h>

#include "internal.h"

#define NT_NODRAIN (PMEM2_F_MEM_NONTEMPORAL | PMEM2_F_MEM_NODRAIN)

uint64_t
pmck__hash(const void *data, size_t len)
{
	return XXH3_64bits_dispatch(data, len);
}

uint64_t
pmck__combine(const uint64_t *chunk_hashes, size_t n)
{
	/* x86-64 is little-endian: the array is already the canonical byte string. */
	return XXH3_64bits_dispatch(chunk_hashes, n * sizeof(*chunk_hashes));
}

uint64_t
pmck_tensor_checksum(const void *data, uint64_t len)
{
	XXH3_state_t outer; /* streams the chunk hashes: equal to pmck__combine over them */

	XXH3_64bits_reset(&outer);
	for (uint64_t off = 0; off < len; off += PMCK_HASH_CHUNK) {
		uint64_t clen = len - off < PMCK_HASH_CHUNK ? len - off : PMCK_HASH_CHUNK;
		uint64_t h = pmck__hash((const char *)data + off, clen);
		XXH3_64bits_update(&outer, &h, sizeof(h));
	}
	return XXH3_64bits_digest(&outer);
}

/*
 * Hash a block, then copy it while it is in L1: src is read from DRAM once.
 * Into the region r (non-temporal, not drained), or, with r NULL, into
 * ordinary memory.  XXH3's streaming form gives the one-shot value for
 * every length.  Without AVX-512, and for short lengths, pmck__copy_hash's.
 */
static uint64_t
copy_hash_blocks(const struct pma_region *r, void *dst, const void *src, size_t len,
		size_t block)
{
	XXH3_state_t state;

	XXH3_64bits_reset(&state);
	for (size_t off = 0; off < len; off += block) {
		size_t n = len - off < block ? len - off : block;
		XXH3_64bits_update_dispatch(&state, (const char *)src + off, n);
		if (r)
			pma_region_memcpy(r, (char *)dst + off, (const char *)src + off, n,
					NT_NODRAIN);
		else
			memcpy((char *)dst + off, (const char *)src + off, n);
	}
	return XXH3_64bits_digest(&state);
}

/*
 * pmck__hash_copy -- pmck__hash(src, len), with src copied to dst (ordinary
 * memory, not the region) on the way, in 16 KiB blocks (16-32 KiB copied
 * fastest: shared/notes/checksums.md).
 */
uint64_t
pmck__hash_copy(void *dst, const void *src, size_t len)
{
	return copy_hash_blocks(NULL, dst, src, len, 16 << 10);
}

/*
 * libxxhash once more, inline (XXH_INLINE_ALL renames its public API, so
 * the functions above keep the dispatching library), for its internal
 * AVX-512 stripe, scramble and merge functions.
 */
#define XXH_INLINE_ALL
#define XXH_ACC_ALIGN 64 /* what its AVX-512 functions assume */
#define XXH_DISPATCH_AVX512 1
#define XXH_TARGET_AVX512 __attribute__((target("avx512f")))
#include <xxhash.h>

const uint8_t *
pmck__xxh3_secret(void)
{
	return XXH3_kSecret;
}

#define STRIPES ((sizeof(XXH3_kSecret) - XXH_STRIPE_LEN) / XXH_SECRET_CONSUME_RATE)
#define BLOCK (STRIPES * XXH_STRIPE_LEN) /* XXH3's block: 16 stripes, 1 KiB */

/* XXH3_accumulate of libxxhash 0.8.1 (renamed in later versions, where its stripe function is not). */
__attribute__((target("avx512f"))) static inline void
accumulate(xxh_u64 *acc, const xxh_u8 *in, size_t nstripes)
{
	for (size_t i = 0; i < nstripes; i++)
		XXH3_accumulate_512_avx512(acc, in + i * XXH_STRIPE_LEN,
				XXH3_kSecret + i * XXH_SECRET_CONSUME_RATE);
}

/*
 * XXH3_64bits(src, len) for len > XXH3_MIDSIZE_MAX: libxxhash's own
 * functions in the order of its XXH3_hashLong_internal_loop.  Meanwhile
 * bytes [from, *to) go to dst by 64-byte non-temporal stores (dst + from
 * is 64-byte aligned; len - *to < 64 are left).
 *
 * One XXH3 block at a time: its 16 lines are loaded and streamed out in
 * one batch (as pmem2's AVX-512 memcpy does with 32, which keeps enough
 * cache misses in flight), then the block is hashed from L1.  Measured
 * slower: hashing before copying (-3%), 1..8-line groups (-3..-7%),
 * 2..4 KiB batches (-8..-12%), hashing from the loaded registers (-4%),
 * AVX2 stores or AVX2 hashing (-12..-15%); software prefetch gained nothing.
 */
__attribute__((target("avx512f"))) static uint64_t
copy_hash_avx512(char *dst, const char *src, size_t len, size_t from, size_t *to)
{
	XXH_ALIGN(64) xxh_u64 acc[XXH_ACC_NB] = XXH3_INIT_ACC;
	const xxh_u8 *in = (const xxh_u8 *)src, *secret = XXH3_kSecret;
	size_t nb = (len - 1) / BLOCK, off = from;

	for (size_t b = 0; b < nb; b++) {
		if (len - off >= BLOCK) { /* then [0, off + BLOCK) of src was loaded: block b too */
			__m512i x[STRIPES];
#pragma GCC unroll 16
			for (size_t i = 0; i < STRIPES; i++)
				x[i] = _mm512_loadu_si512(src + off + i * 64);
#pragma GCC unroll 16
			for (size_t i = 0; i < STRIPES; i++)
				_mm512_stream_si512((void *)(dst + off + i * 64), x[i]);
			off += BLOCK;
		}
		accumulate(acc, in + b * BLOCK, STRIPES);
		XXH3_scrambleAcc_avx512(acc, secret + sizeof(XXH3_kSecret) - XXH_STRIPE_LEN);
	}
	for (; len - off >= 64; off += 64)
		_mm512_stream_si512((void *)(dst + off), _mm512_loadu_si512(src + off));
	*to = off;

	accumulate(acc, in + nb * BLOCK, (len - 1 - nb * BLOCK) / XXH_STRIPE_LEN);
	XXH3_accumulate_512_avx512(acc, in + len - XXH_STRIPE_LEN,
			secret + sizeof(XXH3_kSecret) - XXH_STRIPE_LEN - XXH_SECRET_LASTACC_START);
	return XXH3_mergeAccs(acc, secret + XXH_SECRET_MERGEACCS_START, (xxh_u64)len * XXH_PRIME64_1);
}

/*
 * Copies len bytes to dst in the region with non-temporal stores and
 * returns XXH3_64bits of them.  pmck-bench (512 MiB, 2 threads, /dev/shm,
 * 2-core AVX-512 Xeon VM), commit_tput_vs_ntcopy, median (range): with
 * copy_hash_blocks 0.72 (0.69-0.75, 7 runs), with copy_hash_avx512 0.91
 * (0.87-0.97, 23 runs; the host is shared and noisy).
 * What is left: per core the copy is bound by cache misses in flight
 * (10 GB/s) and XXH3 in L1 runs at 47 GB/s; its ~100 vector ALU uops per
 * KiB hide only partly under the misses (dummy vector work of that size
 * costs about as much).
 */
uint64_t
pmck__copy_hash(const struct pma_region *r, void *dst, const void *src, size_t len,
		size_t block)
{
	size_t head = -(uintptr_t)dst & 63, to;

	if (len <= XXH3_MIDSIZE_MAX || !__builtin_cpu_supports("avx512f"))
		return copy_hash_blocks(r, dst, src, len, block);
	if (head)
		pma_region_memcpy(r, dst, src, head, NT_NODRAIN);
	uint64_t h = copy_hash_avx512(dst, src, len, head, &to);
	PMTRACE_NT_STORES((char *)dst + head, to - head); /* trace build: stores made without libpmem2 */
	if (to < len)
		pma_region_memcpy(r, (char *)dst + to, (const char *)src + to, len - to, NT_NODRAIN);
	/*
	 * Our non-temporal stores, fenced by the thread that issued them.
	 * Cache-line and byte granularity need no more: every caller drains
	 * before anything depends on the data (pmck_ckpt_commit before it
	 * persists checksums and seal, pipeline.c run_job after each piece).
	 * Page granularity also needs its msync.
	 */
	_mm_sfence();
	PMTRACE_SFENCE();
	if (pma_region_granularity(r) == PMA_GRANULARITY_PAGE)
		pma_region_flush(r, (char *)dst + head, to - head);
	return h;
}
