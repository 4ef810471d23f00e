/*
 * copy_hash.c -- the fused copy (runtime/checksum.c) against libxxhash:
 * pmck__copy_hash must copy exactly len bytes and return XXH3_64bits of
 * them, for every length up to 5000 and sizes around block and chunk
 * boundaries, every destination alignment within a cache line (the kernel
 * streams whole lines and leaves head and tail to pmem2) and many source
 * alignments, without touching a byte outside [dst, dst + len).  It uses
 * libxxhash's internal stripe functions, so this also catches a libxxhash
 * whose internals no longer match its XXH3_64bits.
 */
#include <stdint.h>
#include <xxhash.h>

#include "pmalloc.h"
#include "tap.h"
#include "../runtime/internal.h"

#define CAP (4u << 20)
#define GUARD 64

int
main(void)
{
	const char *path = scratch_path("copy-hash");
	struct pma_region *r;
	static const size_t big[] = {4096, 4097, 65535, 65536, 65600, (1 << 20) - 1, 1 << 20,
			(1 << 20) + 1, 1000000, 3 * 1024 * 1024 + 17};
	long cases[2] = {0, 0}, bad[2] = {0, 0};

	plan(2);
	if (pma_region_open(path, CAP, PMA_REGION_CREATE, &r)) {
		diag("%s", pma_errormsg());
		return 1;
	}
	unlink(path);
	char *region = pma_region_addr(r);
	char *src = malloc(CAP);
	srand(42);
	for (size_t i = 0; i < CAP; i++)
		src[i] = (char)(rand() >> 3);

	for (int pass = 0; pass < 2; pass++) {
		size_t n = pass == 0 ? 5000 : sizeof(big) / sizeof(big[0]);
		for (size_t k = 0; k < n; k++) {
			size_t len = pass == 0 ? k : big[k];
			for (size_t da = 0; da < 64; da += pass == 0 && len % 7 ? 13 : 1) {
				size_t sa = (da * 7 + len) % 64;
				char *d = region + 4096 + da;
				const char *s = src + 128 + sa;
				memset(d - GUARD, 0x5a, len + 2 * GUARD);
				uint64_t h = pmck__copy_hash(r, d, s, len, 32 << 10);
				int wrong = h != XXH3_64bits(s, len) || memcmp(d, s, len);
				for (int g = 0; g < GUARD && !wrong; g++)
					wrong = (unsigned char)d[-1 - g] != 0x5a ||
						(unsigned char)d[len + g] != 0x5a;
				cases[pass]++;
				if (wrong && bad[pass]++ < 5)
					diag("len %zu, dst alignment %zu, src alignment %zu: wrong", len, da, sa);
			}
		}
	}
	ok(bad[0] == 0, "lengths 0..4999, many alignments: copy and XXH3 exact (%ld cases, %ld wrong)",
			cases[0], bad[0]);
	ok(bad[1] == 0, "block and chunk sizes up to 3 MiB, all 64 alignments (%ld cases, %ld wrong)",
			cases[1], bad[1]);
	pma_region_close(&r);
	free(src);
	return done_testing();
}
