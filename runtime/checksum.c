/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * checksum.c -- XXH3 checksums, fused with the copy into the region.
 *
 * Hashing after copying reads every byte from DRAM twice.  Instead each
 * block is hashed first (which pulls it into the cache) and then streamed
 * to the region with non-temporal stores from the cache.  libxxhash's
 * runtime dispatch picks AVX2/AVX-512 on the CPU it runs on.
 *
 * A tensor's checksum is XXH3-64 over the little-endian XXH3-64 values of
 * its PMCK_HASH_CHUNK chunks, so disjoint chunks can be hashed by
 * different threads and still give one value.
 */
#include <libpmem2.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>
#include <xxh_x86dispatch.h>

#include "internal.h"

uint64_t
pmck__hash(const void *data, size_t len)
{
	return XXH3_64bits_dispatch(data, len);
}

uint64_t
pmck__copy_hash(const struct pma_region *r, void *dst, const void *src, size_t len,
		size_t block)
{
	XXH3_state_t state;

	XXH3_64bits_reset(&state);
	for (size_t off = 0; off < len; off += block) {
		size_t n = len - off < block ? len - off : block;
		XXH3_64bits_update_dispatch(&state, (const char *)src + off, n);
		/* No drain here: pmck_ckpt_commit drains once for the whole checkpoint. */
		pma_region_memcpy(r, (char *)dst + off, (const char *)src + off, n,
				PMEM2_F_MEM_NONTEMPORAL | PMEM2_F_MEM_NODRAIN);
	}
	return XXH3_64bits_digest(&state);
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
