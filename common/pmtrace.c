/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * pmtrace.c -- the persistence trace of the trace build (see pmtrace.h).
 * Compiled only with make TRACE=1.
 *
 * One lock serializes every record, so a trace is one order of events even
 * when writer threads persist beside the caller.  The shadow of a region is
 * what the trace has recorded of it so far: a fence compares the mapping
 * with it to find stores that no flush covered.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PMTRACE_NO_SITES
#include "pmtrace.h"

#define LINE 64u
#define PAGE 4096u
#define MAX_REGIONS 8
#define MAX_TRACED ((size_t)1 << 30) /* a bigger region is left out (its shadow would be) */

struct traced {
	char *addr;          /* NULL: slot free */
	size_t size;
	uint32_t id;
	char *shadow;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *out;
static int failed;       /* a write failed: the trace stops (the library must not fail) */
static uint32_t next_id;
static struct traced regions[MAX_REGIONS];
static __thread const char *site_file;
static __thread int site_line;

void
pmtrace_site(const char *file, int line)
{
	site_file = file;
	site_line = line;
}

int
pmtrace_dropped(void)
{
#ifdef PMTRACE_DROP_SITE
	char here[256];

	if (!site_file)
		return 0;
	snprintf(here, sizeof(here), "%s:%d", site_file, site_line);
	return strcmp(here, PMTRACE_DROP_SITE) == 0;
#else
	return 0;
#endif
}

static void
put(const void *p, size_t n)
{
	if (!failed && fwrite(p, 1, n, out) != n)
		failed = 1;
}

/* One record; the caller holds the lock.  Consumes this thread's site. */
static void
record(uint8_t kind, uint8_t flags, uint32_t region, uint64_t off, uint64_t len,
		const void *data, uint64_t data_len, const void *caller)
{
	char site[256];
	int n;

	if (!out || failed)
		return;
	if (site_file)
		n = snprintf(site, sizeof(site), "%s:%d", site_file, site_line);
	else if (caller)
		n = snprintf(site, sizeof(site), "%p", caller);
	else
		n = 0;
	if (n < 0 || n >= (int)sizeof(site))
		n = 0;
	struct pmtrace_rec r = {.kind = kind, .flags = flags, .site_len = (uint16_t)n,
		.region = region, .off = off, .len = len, .data_len = data_len,
		.tid = (uint64_t)gettid()};
	put(&r, sizeof(r));
	put(site, (size_t)n);
	if (data_len)
		put(data, data_len);
}

static struct traced *
find(const void *addr)
{
	for (unsigned i = 0; i < MAX_REGIONS; i++)
		if (regions[i].addr && (const char *)addr >= regions[i].addr &&
		    (const char *)addr < regions[i].addr + regions[i].size)
			return &regions[i];
	return NULL;
}

/* Opens the trace file on the first traced region (PMCK_TRACE set). */
static int
start(void)
{
	const char *path = getenv("PMCK_TRACE");
	char buf[4096];

	if (out)
		return 0;
	if (!path || !*path || failed)
		return -1;
	const char *p = strstr(path, "%p");
	if (p)
		snprintf(buf, sizeof(buf), "%.*s%d%s", (int)(p - path), path, (int)getpid(), p + 2);
	else
		snprintf(buf, sizeof(buf), "%s", path);
	out = fopen(buf, "we");
	if (!out)
		return -1;
	setvbuf(out, NULL, _IOFBF, 1 << 20);
	put(PMTRACE_MAGIC, 8);
	return 0;
}

void
pmtrace_region_open(const void *addr, size_t size, const char *path)
{
	pthread_mutex_lock(&lock);
	struct traced *t = NULL;
	for (unsigned i = 0; i < MAX_REGIONS && !t; i++)
		if (!regions[i].addr)
			t = &regions[i];
	if (t && size <= MAX_TRACED && start() == 0 && (t->shadow = malloc(size))) {
		t->addr = (char *)addr;
		t->size = size;
		t->id = next_id++;
		memcpy(t->shadow, addr, size);
		record(PMTRACE_REGION, 0, t->id, 0, size, path, strlen(path), NULL);
		/* The initial contents, sparse: the replay starts from zeros. */
		static const char zero[PAGE];
		for (size_t off = 0; off < size; off += PAGE) {
			size_t n = size - off < PAGE ? size - off : PAGE;
			if (memcmp(t->shadow + off, zero, n))
				record(PMTRACE_IMAGE, 0, t->id, off, n, t->shadow + off, n, NULL);
		}
		fflush(out);
	}
	pthread_mutex_unlock(&lock);
}

void
pmtrace_region_close(const void *addr)
{
	pthread_mutex_lock(&lock);
	struct traced *t = find(addr);
	if (t) {
		record(PMTRACE_CLOSE, 0, t->id, 0, 0, NULL, 0, NULL);
		fflush(out);
		free(t->shadow);
		memset(t, 0, sizeof(*t));
	}
	pthread_mutex_unlock(&lock);
}

void
pmtrace_flush(const void *addr, size_t len, int persist, const void *caller)
{
	pthread_mutex_lock(&lock);
	struct traced *t = find(addr);
	if (t && len) {
		/* A write-back takes whole cache lines, with every store made to them so far. */
		size_t from = ((size_t)((const char *)addr - t->addr)) & ~(size_t)(LINE - 1);
		size_t to = (size_t)((const char *)addr - t->addr) + len;
		to = (to + LINE - 1) & ~(size_t)(LINE - 1);
		if (to > t->size)
			to = t->size;
		memcpy(t->shadow + from, t->addr + from, to - from);
		record(persist ? PMTRACE_PERSIST : PMTRACE_FLUSH, 0, t->id, from, to - from,
				t->addr + from, to - from, caller);
	}
	pthread_mutex_unlock(&lock);
}

void
pmtrace_nt(const void *addr, size_t len, int temporal, const void *caller)
{
	pthread_mutex_lock(&lock);
	struct traced *t = find(addr);
	if (t && len) {
		size_t off = (size_t)((const char *)addr - t->addr);
		memcpy(t->shadow + off, addr, len);
		record(PMTRACE_NT, temporal ? PMTRACE_F_TEMPORAL : 0, t->id, off, len, addr, len,
				caller);
	}
	pthread_mutex_unlock(&lock);
}

void
pmtrace_memset(const void *addr, int c, size_t len, const void *caller)
{
	pthread_mutex_lock(&lock);
	struct traced *t = find(addr);
	if (t && len) {
		size_t off = (size_t)((const char *)addr - t->addr);
		unsigned char b = (unsigned char)c;
		memset(t->shadow + off, c, len);
		record(PMTRACE_MEMSET, 0, t->id, off, len, &b, 1, caller);
	}
	pthread_mutex_unlock(&lock);
}

/*
 * Stores that reached the mapping but no flush: the 8-byte words where the
 * mapping differs from the shadow, as runs of words.
 */
static void
record_unflushed(struct traced *t, const char *site, int site_n)
{
	for (size_t page = 0; page < t->size; page += PAGE) {
		size_t n = t->size - page < PAGE ? t->size - page : PAGE;
		if (!memcmp(t->addr + page, t->shadow + page, n))
			continue;
		size_t w = page, end = page + (n & ~(size_t)7); /* whole words (a region's tail is not) */
		while (w < end) {
			if (!memcmp(t->addr + w, t->shadow + w, 8)) {
				w += 8;
				continue;
			}
			size_t run = w;
			while (run < end && memcmp(t->addr + run, t->shadow + run, 8))
				run += 8;
			memcpy(t->shadow + w, t->addr + w, run - w);
			/* The fence's site names where the unflushed stores were found. */
			site_file = site;
			site_line = site_n;
			record(PMTRACE_STORE, 0, t->id, w, run - w, t->shadow + w, run - w, NULL);
			w = run;
		}
	}
}

void
pmtrace_fence(const void *caller)
{
	pthread_mutex_lock(&lock);
	const char *file = site_file;
	int line = site_line;
	for (unsigned i = 0; i < MAX_REGIONS; i++)
		if (regions[i].addr)
			record_unflushed(&regions[i], file, line);
	site_file = file;
	site_line = line;
	if (out)
		record(PMTRACE_FENCE, 0, 0, 0, 0, NULL, 0, caller);
	pthread_mutex_unlock(&lock);
}

void
pmtrace_mark(const void *data, size_t len)
{
	pthread_mutex_lock(&lock);
	site_file = NULL;
	if (out) {
		record(PMTRACE_MARK, 0, 0, 0, len, data, len, NULL);
		fflush(out);
	}
	pthread_mutex_unlock(&lock);
}
