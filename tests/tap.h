/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tap.h -- a small Test Anything Protocol producer for the C tests.
 *
 *   plan(n);  ok(cond, "fmt", ...);  is_int(got, want, "name");
 *   skip_all("reason");  return done_testing();
 *
 * Plus helpers every test needs: a scratch path under /dev/shm that is
 * removed at exit.
 */
#ifndef PMCK_TAP_H
#define PMCK_TAP_H 1

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int tap_run, tap_failed, tap_planned;

static inline void
plan(int n)
{
	tap_planned = n;
	printf("1..%d\n", n);
	fflush(stdout);
}

static inline void
skip_all(const char *why)
{
	printf("1..0 # SKIP %s\n", why);
	exit(0);
}

static inline void
diag(const char *fmt, ...)
{
	va_list ap;

	printf("# ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

static inline int
ok(int cond, const char *fmt, ...)
{
	va_list ap;

	tap_run++;
	if (!cond)
		tap_failed++;
	printf("%sok %d - ", cond ? "" : "not ", tap_run);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	return cond;
}

/* skip -- one test this machine cannot run: "ok N # SKIP reason" (not a failure). */
static inline void
skip(const char *fmt, ...)
{
	va_list ap;

	tap_run++;
	printf("ok %d # SKIP ", tap_run);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

#define is_int(got, want, ...)                                                   \
	do {                                                                     \
		long long got_ = (long long)(got), want_ = (long long)(want);    \
		if (!ok(got_ == want_, __VA_ARGS__))                             \
			diag("  got %lld, expected %lld", got_, want_);          \
	} while (0)

static inline int
done_testing(void)
{
	if (!tap_planned)
		printf("1..%d\n", tap_run);
	return tap_failed ? 1 : 0;
}

/* scratch_path -- a per-test file name under /dev/shm (or $PMCK_TEST_DIR). */
static inline const char *
scratch_path(const char *tag)
{
	static char path[512];
	const char *dir = getenv("PMCK_TEST_DIR");

	snprintf(path, sizeof(path), "%s/pmck-test-%s-%d", dir ? dir : "/dev/shm", tag,
			(int)getpid());
	return path;
}

#endif
