/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * pool_format.h -- the pool's media layout (see pool.c), shared by pool.c
 * (open, create, allocate) and pool_check.c (check, salvage).  Internal to
 * libpmalloc.
 */
#ifndef PMA_POOL_FORMAT_H
#define PMA_POOL_FORMAT_H 1

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <xxhash.h>

#include "pmalloc.h"

#define POOL_MAGIC "PMAPOOL"   /* 8 bytes with the NUL */
#define POOL_VERSION 1u
#define POOL_HDR_AREA 4096u
#define ENTRY_LIVE 0x4556494cu /* "LIVE" */
#define DEFAULT_MAX_ALLOCS 1024u
#define MAX_ALLOCS_LIMIT (1u << 20)

struct pool_hdr {
	char magic[8];
	uint32_t version;
	uint32_t hdr_size;
	uint8_t uuid[16];
	uint64_t pool_size;
	uint64_t table_off;
	uint64_t table_entries;
	uint64_t heap_off;
	uint64_t create_time_ns;
	uint64_t checksum; /* XXH3-64 of every byte before this field */
};

struct table_entry {
	uint64_t state; /* 0 free; ENTRY_LIVE | check << 32 live */
	uint64_t offset;
	uint64_t size;
	uint64_t align;
	char name[PMA_NAME_MAX];
};

_Static_assert(sizeof(struct table_entry) == 128, "table entry is 128 bytes");
_Static_assert(sizeof(struct pool_hdr) <= POOL_HDR_AREA, "header fits its page");

struct pma_pool {
	struct pma_region *region;
	char *base;
	struct pool_hdr *hdr;        /* the media's header, or `geom` when salvaged */
	struct table_entry *table;   /* the media's table, or a checked copy when salvaged */
	pthread_mutex_t lock;        /* serialises table changes and scans */
	int salvaged;                /* opened by pma_pool_salvage: read-only, never written */
	struct pool_hdr geom;        /* salvaged: the geometry used */
	struct table_entry *table_copy;
};

static inline uint64_t
pool_hdr_checksum(const struct pool_hdr *h)
{
	return XXH3_64bits(h, offsetof(struct pool_hdr, checksum));
}

static inline uint64_t
pool_entry_state(const struct table_entry *e)
{
	uint64_t check = XXH3_64bits(&e->offset,
			sizeof(*e) - offsetof(struct table_entry, offset));
	return ENTRY_LIVE | (check << 32);
}

static inline int
pool_is_pow2(uint64_t x)
{
	return x && !(x & (x - 1));
}

/* Receives each problem pma__pool_inspect finds (code, message). */
struct pool_problems {
	pma_problem_fn report; /* may be NULL */
	void *arg;
	int first;             /* code of the first problem, 0 if none */
	unsigned count;
	int stop_at_first;     /* pma_pool_open: the first problem is the error */
};

/*
 * pma__pool_inspect -- checks the header and every live table entry of the
 * pool on r, reporting each problem (pma_pool_open stops at the first).
 * *geom receives the geometry to read the pool with: the header's when it
 * is sound, else the default one when the table it implies holds valid
 * entries (*guessed = 1).  bad[i] is set for each entry that fails (bad
 * has geom->table_entries bytes, allocated here; NULL if no geometry).
 * Returns the code of the first problem, or 0.
 */
int pma__pool_inspect(struct pma_region *r, struct pool_problems *pr, struct pool_hdr *geom,
		int *guessed, uint8_t **bad) __attribute__((visibility("hidden")));

int pma__pool_new(struct pma_region *r, struct pma_pool **out)
	__attribute__((visibility("hidden")));

#endif
