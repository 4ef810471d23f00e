/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * gpu_hasher.c -- pmck_gpu_hasher on a real device: its checksums equal
 * pmck_tensor_checksum of the same bytes for every kind of length (empty,
 * XXH3's short path whole and as a tensor's last chunk, chunk multiples,
 * many chunks), in the order added over several adds; it hashes after the
 * copies queued on the caller's stream; its lists grow with adds queued;
 * bad input is refused with nothing queued.  The recovery that uses it is
 * tested on the host (tests/recover_given.c, bindings' test_store.py).
 * Skips without CUDA or a device.
 */
#include <errno.h>

#include "ckpt_util.h"

#ifndef PMCK_HAVE_CUDA
int
main(void)
{
	skip_all("built without CUDA");
}
#else
#include <cuda_runtime_api.h>

#define BIG ((size_t)64 << 20)

/* Adds n buffers and waits; returns how many checksums differ from want (n on an error). */
static long
differ(struct pmck_gpu_hasher *h, void *stream, size_t n, const void *const *src,
		const uint64_t *len, const uint64_t *want, long *first)
{
	uint64_t *got = calloc(n ? n : 1, sizeof(*got));
	long bad = 0;

	*first = -1;
	if (pmck_gpu_hasher_add(h, stream, n, src, len) || pmck_gpu_hasher_wait(h, got, n)) {
		diag("%s", pmck_errormsg());
		free(got);
		return (long)n;
	}
	for (size_t i = 0; i < n; i++)
		if (got[i] != want[i] && bad++ == 0)
			*first = (long)len[i];
	free(got);
	return bad;
}

int
main(void)
{
	struct pmck_gpu_hasher *h = NULL;

	if (pmck_gpu_available(0))
		skip_all(pmck_errormsg());
	plan(15);
	is_int(pmck_gpu_hasher_new(0, &h), 0, "a hasher on device 0");
	if (!h)
		return done_testing();

	uint8_t *host, *dev;
	if (cudaMallocHost((void **)&host, BIG) != cudaSuccess ||
	    cudaMalloc((void **)&dev, BIG) != cudaSuccess) {
		diag("buffers");
		return 1;
	}
	uint64_t seed = 0x9e3779b97f4a7c15ull;
	for (size_t i = 0; i < BIG / 8; i++) {
		uint64_t v = xorshift64(&seed);
		memcpy(host + 8 * i, &v, 8);
	}
	cudaMemcpy(dev, host, BIG, cudaMemcpyHostToDevice);

	enum { MOST = 3000 };
	const void **src = calloc(MOST, sizeof(*src));
	uint64_t *len = calloc(MOST, sizeof(*len)), *want = calloc(MOST, sizeof(*want));
	size_t n = 0;
	long first, bad;

	/* Every length 0..300 at its own 8-aligned start; then around and beyond a chunk. */
	for (uint64_t l = 0; l <= 300; l++, n++) {
		size_t at = (l * 40) % 65536;
		src[n] = dev + at;
		len[n] = l;
		want[n] = pmck_tensor_checksum(host + at, l);
	}
	static const uint64_t more[] = {PMCK_HASH_CHUNK - 8, PMCK_HASH_CHUNK, PMCK_HASH_CHUNK + 1,
			PMCK_HASH_CHUNK + 100, PMCK_HASH_CHUNK + 240, PMCK_HASH_CHUNK + 241,
			3 * PMCK_HASH_CHUNK + 17, BIG - 64};
	for (size_t k = 0; k < sizeof(more) / sizeof(more[0]); k++, n++) {
		src[n] = dev + 8 * k;
		len[n] = more[k];
		want[n] = pmck_tensor_checksum(host + 8 * k, more[k]);
	}
	bad = differ(h, NULL, n, src, len, want, &first);
	ok(bad == 0, "%zu buffers of 0 to 300 bytes, around a chunk and of 64 MiB: each as "
			"pmck_tensor_checksum (%ld differ; first of %ld bytes)", n, bad, first);

	/* Several adds, one wait: in the order added. */
	uint64_t got[3] = {0};
	const void *s3[] = {dev + 64, dev + 128, dev};
	uint64_t l3[] = {5000, 100, 2 * PMCK_HASH_CHUNK};
	ok(!pmck_gpu_hasher_add(h, NULL, 2, s3, l3) && !pmck_gpu_hasher_add(h, NULL, 1, s3 + 2, l3 + 2) &&
			!pmck_gpu_hasher_wait(h, got, 3) &&
			got[0] == pmck_tensor_checksum(host + 64, 5000) &&
			got[1] == pmck_tensor_checksum(host + 128, 100) &&
			got[2] == pmck_tensor_checksum(host, 2 * PMCK_HASH_CHUNK),
			"two adds, one wait: three checksums in order");

	/* The wrong count: refused, nothing consumed; the right one then. */
	ok(!pmck_gpu_hasher_add(h, NULL, 2, s3, l3), "add two");
	is_int(pmck_gpu_hasher_wait(h, got, 3), -EINVAL, "a wait for three: -EINVAL");
	ok(!pmck_gpu_hasher_wait(h, got, 2) && got[1] == pmck_tensor_checksum(host + 128, 100),
			"the wait for two gives them");

	/* Bad buffers: refused, nothing queued. */
	const void *odd[] = {dev + 4};
	uint64_t l1[] = {4096};
	mark_errormsg();
	is_int(pmck_gpu_hasher_add(h, NULL, 1, odd, l1), -EINVAL, "a buffer not 8-aligned: -EINVAL");
	ok(errormsg_fresh(), "said: %s", pmck_errormsg());
	const void *hostbuf[] = {want};
	is_int(pmck_gpu_hasher_add(h, NULL, 1, hostbuf, l1), -EINVAL, "host memory: -EINVAL");
	is_int(pmck_gpu_hasher_wait(h, got, 0), 0, "and nothing was queued (a wait for none)");

	/* After the caller's copies: new bytes copied on a stream, hashed after them. */
	cudaStream_t st;
	cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
	for (size_t i = 0; i < BIG; i += 4096)
		host[i] ^= 0x5a;
	uint64_t lbig = BIG, wbig = pmck_tensor_checksum(host, BIG);
	const void *sbig[] = {dev};
	cudaMemcpyAsync(dev, host, BIG, cudaMemcpyHostToDevice, st);
	bad = differ(h, st, 1, sbig, &lbig, &wbig, &first);
	ok(bad == 0, "64 MiB copied on a non-blocking stream, hashed after it: the new bytes");
	cudaStreamDestroy(st);

	/* Lists grown while adds are queued: 2 x 1500 one-chunk buffers, then one wait; then reserved. */
	for (size_t i = 0; i < MOST; i++) {
		src[i] = dev + 256 * (i % 1000);
		len[i] = 256 + i % 8;
		want[i] = pmck_tensor_checksum(host + 256 * (i % 1000), len[i]);
	}
	uint64_t *all = calloc(MOST, sizeof(*all));
	int rc = pmck_gpu_hasher_add(h, NULL, MOST / 2, src, len);
	rc = rc ? rc : pmck_gpu_hasher_add(h, NULL, MOST / 2, src + MOST / 2, len + MOST / 2);
	rc = rc ? rc : pmck_gpu_hasher_wait(h, all, MOST);
	bad = 0;
	for (size_t i = 0; !rc && i < MOST; i++)
		bad += all[i] != want[i];
	ok(!rc && bad == 0, "%d buffers over two adds, the lists grown between (%ld differ)", MOST, bad);
	memset(all, 0, MOST * sizeof(*all));
	rc = pmck_gpu_hasher_reserve(h, 4 * MOST);
	rc = rc ? rc : pmck_gpu_hasher_add(h, NULL, MOST, src, len);
	rc = rc ? rc : pmck_gpu_hasher_wait(h, all, MOST);
	bad = 0;
	for (size_t i = 0; !rc && i < MOST; i++)
		bad += all[i] != want[i];
	ok(!rc && bad == 0, "room reserved for %d chunks, then %d buffers (%ld differ)", 4 * MOST,
			MOST, bad);

	/* Dropped: queued, then a wait without room; the hasher is empty after it. */
	ok(!pmck_gpu_hasher_add(h, NULL, 2, s3, l3) && !pmck_gpu_hasher_wait(h, NULL, 0) &&
			!pmck_gpu_hasher_wait(h, got, 0), "two queued, dropped by a wait without room: "
			"then none is queued");
	is_int(pmck_gpu_hasher_reserve(NULL, 1), -EINVAL, "reserve without a hasher: -EINVAL");

	/* Deleted with work queued (the sanitizers and CUDA see what it leaves). */
	pmck_gpu_hasher_add(h, NULL, 1, sbig, &lbig);
	pmck_gpu_hasher_delete(&h);

	free(all);
	free(src);
	free(len);
	free(want);
	cudaFree(dev);
	cudaFreeHost(host);
	return done_testing();
}
#endif
