/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ckpt_util.h -- helpers shared by the tests that write and recover
 * checkpoints: deterministic contents, a small random generator, the
 * "was the error message set by this call" check, opening a region, pool
 * and store in one call, killing a child that reports its commits, and
 * reading (hash) or changing (poke) a file's bytes behind the library.
 */
#ifndef PMCK_CKPT_UTIL_H
#define PMCK_CKPT_UTIL_H 1

#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "pmalloc.h"
#include "pmckpt.h"
#include "tap.h"

/* splitmix64's finaliser: a well-mixed function of x. */
static inline uint64_t
mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* The contents of tensor t at `step`: a function of (step, tensor, byte index). */
static inline void
fill_tensor(uint64_t step, size_t t, uint8_t *buf, uint64_t n)
{
	uint64_t base = mix64(step * 0x100000001b3ull ^ ((uint64_t)t << 56));
	uint64_t w = 0;

	for (; (w + 1) * 8 <= n; w++) {
		uint64_t v = mix64(base + w);
		memcpy(buf + w * 8, &v, 8);
	}
	if (w * 8 < n) {
		uint64_t v = mix64(base + w);
		memcpy(buf + w * 8, &v, n - w * 8);
	}
}

/* A pipeline source's name, as docs/gpu.md gives it. */
static inline const char *
source_name(enum pmck_source src)
{
	static const char *const n[] = {"host", "D (DMA)", "D (kernel)", "C (staged)", "G (snapshot)"};
	return (unsigned)src < sizeof(n) / sizeof(n[0]) ? n[src] : "?";
}

/* xorshift64: *state must not be 0. */
static inline uint64_t
xorshift64(uint64_t *state)
{
	*state ^= *state << 13;
	*state ^= *state >> 7;
	*state ^= *state << 17;
	return *state;
}

/* Plants a marker message: a failing call must replace it with its own. */
static inline void
mark_errormsg(void)
{
	struct pma_region *r;

	pma_region_open("/nonexistent-dir/#marker#", 0, 0, &r);
}

static inline int
errormsg_fresh(void)
{
	const char *m = pma_errormsg();
	return m[0] != '\0' && strstr(m, "#marker#") == NULL;
}

/*
 * Opens (create: creates) a region of `size` bytes at path, its pool and
 * store `name` with the layout descs[0..n); -1 with a diagnostic on failure.
 */
static inline int
open_store(const char *path, size_t size, int create, const char *name,
		const struct pmck_tensor_desc *descs, size_t n, struct pma_region **r,
		struct pma_pool **pool, struct pmck_store **s)
{
	if (pma_region_open(path, size, create ? PMA_REGION_CREATE : 0, r) ||
	    (create ? pma_pool_create(*r, 0, pool) : pma_pool_open(*r, pool)) ||
	    pmck_store_open_or_create(*pool, name, descs, n, s)) {
		diag("%s", pmck_errormsg());
		return -1;
	}
	return 0;
}

static inline void
close_store(struct pma_region **r, struct pma_pool **pool, struct pmck_store **s)
{
	pmck_store_close(s);
	pma_pool_close(pool);
	pma_region_close(r);
}

/*
 * Kills child `pid` with SIGKILL after delay_us, reaps it, and reads the
 * steps it wrote to fd (one uint64_t per commit) until EOF; closes fd.
 * Returns the last step read, or `last` if none.
 */
static inline uint64_t
kill_child(pid_t pid, int fd, long delay_us, uint64_t last)
{
	struct timespec d = {delay_us / 1000000, (delay_us % 1000000) * 1000L};
	uint64_t step;

	nanosleep(&d, NULL);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	while (read(fd, &step, sizeof(step)) == (ssize_t)sizeof(step))
		last = step;
	close(fd);
	return last;
}

/* XXH3 of the whole file (0 if unreadable): "left as it was" checked byte for byte. */
static inline uint64_t
file_hash(const char *path)
{
	int fd = open(path, O_RDONLY);
	struct stat st;
	uint64_t h = 0;

	if (fd < 0)
		return 0;
	if (fstat(fd, &st) == 0) {
		char *buf = malloc((size_t)st.st_size + 1);
		if (buf && read(fd, buf, (size_t)st.st_size) == st.st_size)
			h = XXH3_64bits(buf, (size_t)st.st_size);
		free(buf);
	}
	close(fd);
	return h;
}

/* Writes n bytes at off into path, behind the library's back (damage for a test). */
static inline void
poke(const char *path, off_t off, const void *bytes, size_t n)
{
	int fd = open(path, O_RDWR);
	if (fd < 0 || pwrite(fd, bytes, n, off) != (ssize_t)n)
		diag("cannot write %s at %lld", path, (long long)off);
	if (fd >= 0)
		close(fd);
}

#endif
