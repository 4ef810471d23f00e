/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * pmbench-ref -- an independent reference for pmbench: copies BLOCK-byte
 * blocks into a shared file mapping with libc memcpy and with SSE2
 * streaming stores (an sfence per block), one thread, and prints the
 * bandwidth of each.  It shares no code with pmbench (no libpmem2, no
 * pmckpt, its own mapping and timing), so that `make bench` can check
 * pmbench's figures against it in the same run
 * (tools/pmbench-refcheck.sh prints ratio: pmbench_1MiB_vs_reference).
 *
 *   pmbench-ref [--file PATH] [--size BYTES] [--block BYTES] [--time-ms N] [--repeat N] [--msync]
 *
 * --msync: an msync(MS_SYNC) of each block after it is copied, which is what
 * persisting costs on a page-granularity mapping (a file not on PM: libpmem2
 * then persists with msync), so that pmbench on such a file is compared like
 * for like.
 * The file (default: one in /dev/shm, removed at the end) is allocated
 * with posix_fallocate and written whole before measuring.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "pmalloc.h"
#include "lib/toolutil.h"

static double
now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void
stream_copy(char *dst, const char *src, size_t n)
{
#if defined(__x86_64__)
	for (size_t i = 0; i < n; i += 64)
		for (size_t k = 0; k < 64; k += 16)
			_mm_stream_si128((__m128i *)(dst + i + k),
					_mm_load_si128((const __m128i *)(src + i + k)));
	_mm_sfence();
#else
	memcpy(dst, src, n);
#endif
}

static int
cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static int do_msync;

/* GB/s of copying blocks round the mapping for time_ms, median of `repeat` after a warm-up. */
static double
run(int nt, char *map, size_t size, const char *src, size_t block, unsigned time_ms, unsigned repeat)
{
	double g[100];
	size_t off = 0;

	for (unsigned r = 0; r <= repeat; r++) {
		double t0 = now(), t = t0, end = t0 + time_ms / (r ? 1e3 : 4e3);
		size_t bytes = 0;
		while (t < end) {
			if (nt)
				stream_copy(map + off, src, block);
			else
				memcpy(map + off, src, block);
			if (do_msync)
				msync(map + (off & ~(size_t)4095), block + (off & 4095), MS_SYNC);
			bytes += block;
			off = off + 2 * block > size ? 0 : off + block;
			t = now();
		}
		if (r)
			g[r - 1] = bytes / (t - t0) / 1e9;
	}
	qsort(g, repeat, sizeof(g[0]), cmp);
	return repeat % 2 ? g[repeat / 2] : (g[repeat / 2 - 1] + g[repeat / 2]) / 2;
}

int
main(int argc, char **argv)
{
	static const struct option lo[] = {
		{"file", required_argument, NULL, 'f'}, {"size", required_argument, NULL, 's'},
		{"block", required_argument, NULL, 'b'}, {"time-ms", required_argument, NULL, 't'},
		{"repeat", required_argument, NULL, 'r'}, {"msync", no_argument, NULL, 'm'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	char path[512] = "";
	uint64_t size = 64u << 20, block = 1u << 20;
	unsigned long time_ms = 200, repeat = 5;
	int c, made = 0, fd, e;
	char *map, *src;

	tool_init("pmbench-ref", "usage: pmbench-ref [--file PATH] [--size BYTES] [--block BYTES] "
			"[--time-ms N] [--repeat N] [--msync]\n");
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case 'f': snprintf(path, sizeof(path), "%s", optarg); break;
		case 's':
			if (pma_size_parse(optarg, &size) || size < (4u << 20))
				return tool_usage_error("--size '%s': expected a size of at least 4M", optarg);
			break;
		case 'b':
			if (pma_size_parse(optarg, &block) || block < 64 || block % 64 || block > (64u << 20))
				return tool_usage_error("--block '%s': expected a multiple of 64 from 64 to 64M",
						optarg);
			break;
		case 't':
			if (*optarg == '-' || tool_parse_uint(optarg, 1, 3600000, &time_ms))
				return tool_usage_error("--time-ms '%s': expected 1 to 3600000", optarg);
			break;
		case 'r':
			if (*optarg == '-' || tool_parse_uint(optarg, 1, 100, &repeat))
				return tool_usage_error("--repeat '%s': expected 1 to 100", optarg);
			break;
		case 'm': do_msync = 1; break;
		case 'h':
			printf("usage: pmbench-ref [--file PATH] [--size BYTES] [--block BYTES] "
					"[--time-ms N] [--repeat N] [--msync]\n");
			return 0;
		default: return tool_usage_error("unknown option");
		}
	}
	if (size < 4 * block)
		return tool_usage_error("--size must be at least 4 blocks");
	if (!path[0]) {
		snprintf(path, sizeof(path), "/dev/shm/pmbench-ref-%d", (int)getpid());
		made = 1;
	}
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return tool_fail("%s: %s", path, strerror(errno));
	if (made)
		unlink(path);
	if ((e = posix_fallocate(fd, 0, (off_t)size)))
		return tool_fail("allocate %llu bytes of %s: %s", (unsigned long long)size, path,
				strerror(e));
	map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (map == MAP_FAILED)
		return tool_fail("mmap %s: %s", path, strerror(errno));
	if (posix_memalign((void **)&src, 64, block))
		return tool_fail("out of memory");
	memset(src, 0x5c, block);
	memset(map, 0, size); /* no first touch in the measurement */
	double m = run(0, map, size, src, block, (unsigned)time_ms, (unsigned)repeat);
	double n = run(1, map, size, src, block, (unsigned)time_ms, (unsigned)repeat);
	printf("bench: reference_memcpy_%lluB %.3f GB/s\n", (unsigned long long)block, m);
	printf("bench: reference_ntstore_%lluB %.3f GB/s\n", (unsigned long long)block, n);
	munmap(map, size);
	free(src);
	return 0;
}
