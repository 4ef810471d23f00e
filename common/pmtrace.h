/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * pmtrace.h -- the persistence trace of the trace build (make TRACE=1).
 *
 * Every persistence primitive of libpmalloc and libpmckpt goes through
 * pma_region_persist/flush/drain/memcpy/memset (pmalloc/region.c), which
 * call libpmem2's functions for the mapping; the only other durable writes
 * are the AVX-512 non-temporal stores of runtime/checksum.c.  In the trace
 * build (-DPMCK_TRACE) each of them also records an event here, with the
 * bytes it makes durable and its call site, into the file named by the
 * environment variable PMCK_TRACE (read when a region is opened for
 * writing; "%p" in it is replaced by the process id).  tests/crash_images
 * replays such a trace into the images a power failure could leave.
 *
 * Plain CPU stores into the mapping are not intercepted.  A flush records
 * the bytes of its whole cache lines as they are when it runs (what the
 * write-back makes durable); at every fence the mapping is compared with a
 * shadow of everything recorded so far, and each difference (a store that
 * no flush covered) is recorded as an unflushed store.
 *
 * In every other build the hooks below are empty inline functions: no
 * code, no state.  Nothing here is exported from a shared library; the
 * trace build is meant for static linking (its tests), where one copy of
 * the trace state exists.
 */
#ifndef PMCKPT_COMMON_PMTRACE_H
#define PMCKPT_COMMON_PMTRACE_H 1

#include <stddef.h>
#include <stdint.h>

#include "pmalloc.h"

/* ------------------------------------------------------------ the file */

#define PMTRACE_MAGIC "PMCKTRC1"  /* 8 bytes, then records until the end */

enum pmtrace_kind {
	PMTRACE_REGION = 1,  /* a region opened for writing: len = size, data = path */
	PMTRACE_IMAGE = 2,   /* its initial contents: a non-zero page at off (data) */
	PMTRACE_STORE = 3,   /* stored, never flushed: data; its site is the fence that found it */
	PMTRACE_FLUSH = 4,   /* whole cache lines written back: data as flushed */
	PMTRACE_PERSIST = 5, /* the flush of a persist (a FENCE follows): data */
	PMTRACE_NT = 6,      /* a non-temporal or flushed copy of data */
	PMTRACE_MEMSET = 7,  /* the same, filling len bytes with data[0] */
	PMTRACE_FENCE = 8,   /* drain: earlier flushes and NT stores are durable */
	PMTRACE_MARK = 9,    /* a caller's marker (pmtrace_mark): data */
	PMTRACE_CLOSE = 10,  /* the region was closed */
};

/* One record; site_len bytes of "file:line" and data_len bytes follow. */
struct pmtrace_rec {
	uint8_t kind;
	uint8_t flags;       /* PMTRACE_F_* */
	uint16_t site_len;
	uint32_t region;     /* 0, 1, ...: in the order of REGION records */
	uint64_t off;        /* from the start of the region */
	uint64_t len;        /* bytes of the range */
	uint64_t data_len;
	uint64_t tid;        /* the recording thread (gettid) */
};

#define PMTRACE_F_TEMPORAL 1 /* NT: a copy by cached stores and flushes */

#ifdef PMCK_TRACE
/* ------------------------------------------------- hooks of the trace build */

void pmtrace_region_open(const void *addr, size_t size, const char *path)
	__attribute__((visibility("hidden")));
void pmtrace_region_close(const void *addr) __attribute__((visibility("hidden")));
/*
 * The call site of this thread's next events (set by the macros below,
 * cleared with NULL by the function they call when it is done).
 */
void pmtrace_site(const char *file, int line) __attribute__((visibility("hidden")));
void pmtrace_flush(const void *addr, size_t len, int persist, const void *caller)
	__attribute__((visibility("hidden")));
void pmtrace_nt(const void *addr, size_t len, int temporal, const void *caller)
	__attribute__((visibility("hidden")));
void pmtrace_memset(const void *addr, int c, size_t len, const void *caller)
	__attribute__((visibility("hidden")));
void pmtrace_fence(const void *caller) __attribute__((visibility("hidden")));
/*
 * pmtrace_dropped -- 1 if this thread's pending call site is the one the
 * fault build drops (-DPMTRACE_DROP_SITE="\"file:line\""): its flush is
 * then neither done nor recorded.  Always 0 without that define.
 */
int pmtrace_dropped(void) __attribute__((visibility("hidden")));
/* pmtrace_mark -- records len bytes of the caller's (a test's) own. */
void pmtrace_mark(const void *data, size_t len) __attribute__((visibility("hidden")));

/*
 * Inside the libraries (not in region.c, which defines the functions),
 * each call of a persistence function names its call site first.
 */
#ifndef PMTRACE_NO_SITES
#define PMTRACE_AT(call) (pmtrace_site(__FILE__, __LINE__), (call))
#define pma_region_persist(r, a, n) PMTRACE_AT((pma_region_persist)(r, a, n))
#define pma_region_flush(r, a, n) PMTRACE_AT((pma_region_flush)(r, a, n))
#define pma_region_drain(r) PMTRACE_AT((pma_region_drain)(r))
#define pma_region_memcpy(r, d, s, n, f) PMTRACE_AT((pma_region_memcpy)(r, d, s, n, f))
#define pma_region_memset(r, d, c, n, f) PMTRACE_AT((pma_region_memset)(r, d, c, n, f))
#endif
/* Non-temporal stores made without libpmem2 (runtime/checksum.c), and their fence. */
#define PMTRACE_NT_STORES(a, n) \
	(pmtrace_site(__FILE__, __LINE__), pmtrace_nt((a), (n), 0, NULL), pmtrace_site(NULL, 0))
#define PMTRACE_SFENCE() \
	(pmtrace_site(__FILE__, __LINE__), pmtrace_fence(NULL), pmtrace_site(NULL, 0))

#else
/* ----------------------------------------------- every other build: nothing */

static inline void pmtrace_region_open(const void *a, size_t n, const char *p)
{ (void)a; (void)n; (void)p; }
static inline void pmtrace_region_close(const void *a) { (void)a; }
static inline void pmtrace_site(const char *f, int l) { (void)f; (void)l; }
static inline void pmtrace_flush(const void *a, size_t n, int p, const void *c)
{ (void)a; (void)n; (void)p; (void)c; }
static inline void pmtrace_nt(const void *a, size_t n, int t, const void *c)
{ (void)a; (void)n; (void)t; (void)c; }
static inline void pmtrace_memset(const void *a, int x, size_t n, const void *c)
{ (void)a; (void)x; (void)n; (void)c; }
static inline void pmtrace_fence(const void *c) { (void)c; }
static inline int pmtrace_dropped(void) { return 0; }
#define PMTRACE_NT_STORES(a, n) ((void)0)
#define PMTRACE_SFENCE() ((void)0)
#endif

#endif
