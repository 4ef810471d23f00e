/* SPDX-License-Identifier: BSD-3-Clause */
/* populate.h -- populating a mapping's page tables on a few threads (see populate.c). */
#ifndef PMA_POPULATE_H
#define PMA_POPULATE_H 1

#include <stddef.h>

/*
 * pma__populate -- populates the page tables of [addr, addr + len) (addr
 * page-aligned) for writing, or for reading when `write` is 0, contents
 * unchanged: madvise(MADV_POPULATE_WRITE / _READ), on up to 8 threads of
 * its own (the caller's CPUs by affinity, one per 64 MiB at least), joined
 * before it returns.  Best effort: a range the kernel will not populate is
 * left to fault when used.  Internal to libpmalloc.
 */
void pma__populate(void *addr, size_t len, int write)
	__attribute__((visibility("hidden")));

#endif
