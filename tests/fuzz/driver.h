/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * driver.h -- the main() every fuzz harness shares (tests/fuzz/NAME.c).
 *
 * A harness defines
 *
 *   static void fuzz_one(const uint8_t *data, size_t len);
 *
 * which feeds one input to the library and abort()s on a broken promise
 * (a failure without a message, a result that contradicts another call);
 * memory errors are the sanitizers' and AFL's to catch.  It may set up
 * state once (regions, stores) on its first call: that runs in the process
 * that fuzzes, after AFL's fork server has forked it.
 *
 * Built by afl-clang-fast (which defines __AFL_FUZZ_TESTCASE_LEN) the
 * program is an AFL++ persistent-mode target reading its inputs from
 * shared memory.  Built by a plain compiler it replays inputs: every file
 * named on the command line, and every regular file of every directory
 * named there (sorted by name), each once; it prints how many it ran, and
 * fails when it ran none.  A crash or an abort is the failure.
 *
 * A harness also defines
 *
 *   static void fuzz_seeds(const char *dir);
 *
 * which writes its seed inputs into dir with the library's own writers
 * (`HARNESS --seeds DIR`, replay build only; `make fuzz-seeds`).
 *
 * fuzz_dir() is a directory of this process's own on tmpfs
 * (/dev/shm/pmck-fuzz-NAME-PID), made on first use and removed at exit;
 * AFL may run several instances of one harness at once.
 */
#ifndef PMCK_FUZZ_DRIVER_H
#define PMCK_FUZZ_DRIVER_H 1

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef FUZZ_NAME
#error "a harness defines FUZZ_NAME before including driver.h"
#endif

static void fuzz_one(const uint8_t *data, size_t len);
static void fuzz_seeds(const char *dir);

/* abort()s with a message: a promise of the library was broken. */
#define fuzz_assert(cond, ...) do { \
	if (!(cond)) { \
		fprintf(stderr, FUZZ_NAME ": %s:%d: assertion '%s' failed: ", __FILE__, __LINE__, \
				#cond); \
		fprintf(stderr, __VA_ARGS__); \
		fputc('\n', stderr); \
		abort(); \
	} \
} while (0)

/* A failed call (rc < 0) must say why: errors are codes plus a message. */
#define fuzz_check_error(rc, msg) \
	fuzz_assert((rc) >= 0 || ((msg) && *(msg)), "error %d without a message", (int)(rc))

static char fuzz__dir[128];

static __attribute__((unused)) void
fuzz__rm_tree(const char *path)
{
	DIR *d = opendir(path);
	if (d) {
		struct dirent *e;
		while ((e = readdir(d))) {
			if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
				continue;
			char sub[4096];
			snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
			fuzz__rm_tree(sub);
		}
		closedir(d);
		rmdir(path);
	} else {
		unlink(path);
	}
}

static __attribute__((unused)) void
fuzz__cleanup(void)
{
	if (fuzz__dir[0])
		fuzz__rm_tree(fuzz__dir);
}

/* This process's scratch directory on tmpfs. */
static __attribute__((unused)) const char *
fuzz_dir(void)
{
	if (!fuzz__dir[0]) {
		snprintf(fuzz__dir, sizeof(fuzz__dir), "/dev/shm/pmck-fuzz-%s-%ld", FUZZ_NAME,
				(long)getpid());
		fuzz__rm_tree(fuzz__dir);
		if (mkdir(fuzz__dir, 0700)) {
			perror(fuzz__dir);
			abort();
		}
		atexit(fuzz__cleanup);
	}
	return fuzz__dir;
}

/* Empties `path` (a directory of fuzz_dir()) and makes it again. */
static __attribute__((unused)) void
fuzz_fresh_dir(const char *path)
{
	fuzz__rm_tree(path);
	if (mkdir(path, 0700)) {
		perror(path);
		abort();
	}
}

/* Writes data to path (replacing it); aborts on failure. */
static __attribute__((unused)) void
fuzz_write_file(const char *path, const void *data, size_t len)
{
	FILE *f = fopen(path, "wb");
	if (!f || (len && fwrite(data, 1, len, f) != len) || fclose(f)) {
		perror(path);
		abort();
	}
}

/* Writes seed dir/name. */
static __attribute__((unused)) void
fuzz_seed(const char *dir, const char *name, const void *data, size_t len)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fuzz_write_file(path, data, len);
}

/*
 * Writes seed dir/name as the pool and store harnesses read it: the flag
 * byte, then len bytes of data.
 */
static __attribute__((unused)) void
fuzz_seed_flagged(const char *dir, const char *name, unsigned flags, const void *data, size_t len)
{
	uint8_t *buf = malloc(len + 1);
	if (!buf)
		abort();
	buf[0] = (uint8_t)flags;
	memcpy(buf + 1, data, len);
	fuzz_seed(dir, name, buf, len + 1);
	free(buf);
}

/* Writes seed dir/name from a string (its NUL left out). */
static __attribute__((unused)) void
fuzz_seed_text(const char *dir, const char *name, const char *text)
{
	fuzz_seed(dir, name, text, strlen(text));
}

#ifdef __AFL_FUZZ_TESTCASE_LEN

__AFL_FUZZ_INIT();

int
main(void)
{
	(void)fuzz_seeds;
	__AFL_INIT();
	const uint8_t *buf = __AFL_FUZZ_TESTCASE_BUF;
	while (__AFL_LOOP(10000))
		fuzz_one(buf, (size_t)__AFL_FUZZ_TESTCASE_LEN);
	return 0;
}

#else /* replay */

static int
fuzz__run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		perror(path);
		return -1;
	}
	size_t cap = 1 << 16, len = 0;
	uint8_t *data = malloc(cap);
	size_t n;
	while (data && (n = fread(data + len, 1, cap - len, f)) > 0) {
		len += n;
		if (len == cap) {
			uint8_t *bigger = realloc(data, cap * 2);
			if (!bigger) {
				free(data);
				data = NULL;
				break;
			}
			data = bigger;
			cap *= 2;
		}
	}
	fclose(f);
	if (!data) {
		fprintf(stderr, "%s: out of memory\n", path);
		return -1;
	}
	/* An exact-size copy, so that ASan sees a read past the input's end. */
	uint8_t *exact = malloc(len ? len : 1);
	if (!exact) {
		free(data);
		return -1;
	}
	memcpy(exact, data, len);
	free(data);
	if (getenv("FUZZ_VERBOSE"))
		fprintf(stderr, FUZZ_NAME ": %s (%zu bytes)\n", path, len);
	fuzz_one(exact, len);
	free(exact);
	return 0;
}

static int
fuzz__cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Runs every regular file of dir, by name; *count += how many. */
static int
fuzz__run_dir(const char *dir, unsigned *count)
{
	DIR *d = opendir(dir);
	if (!d) {
		perror(dir);
		return -1;
	}
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct dirent *e;
	int ret = 0;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 64;
			char **bigger = realloc(names, cap * sizeof(*names));
			if (!bigger) {
				ret = -1;
				break;
			}
			names = bigger;
		}
		if (!(names[n] = strdup(e->d_name))) {
			ret = -1;
			break;
		}
		n++;
	}
	closedir(d);
	if (n)
		qsort(names, n, sizeof(*names), fuzz__cmp_names);
	for (size_t i = 0; i < n; i++) {
		char path[4096];
		struct stat st;
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		if (!ret && !stat(path, &st) && S_ISREG(st.st_mode)) {
			if (fuzz__run_file(path))
				ret = -1;
			else
				(*count)++;
		}
		free(names[i]);
	}
	free(names);
	return ret;
}

int
main(int argc, char **argv)
{
	unsigned count = 0;
	int ret = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: %s FILE|DIR...  (replays fuzz inputs through %s)\n"
				"       %s --seeds DIR  (writes the seed inputs)\n",
				argv[0], FUZZ_NAME, argv[0]);
		return 2;
	}
	if (!strcmp(argv[1], "--seeds") && argc == 3) {
		fuzz_seeds(argv[2]);
		return 0;
	}
	for (int i = 1; i < argc && !ret; i++) {
		struct stat st;
		if (stat(argv[i], &st)) {
			perror(argv[i]);
			ret = -1;
		} else if (S_ISDIR(st.st_mode)) {
			ret = fuzz__run_dir(argv[i], &count);
		} else {
			ret = fuzz__run_file(argv[i]);
			count += !ret;
		}
	}
	printf("%s: %u inputs replayed\n", FUZZ_NAME, count);
	return ret || count == 0;
}

#endif
#endif
