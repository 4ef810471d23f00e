/* SPDX-License-Identifier: BSD-3-Clause */
/* populate.h -- populating a mapping's page tables on a few threads (see populate.c). */
#ifndef PMA_POPULATE_H
#define PMA_POPULATE_H 1

#include <stddef.h>

/* How pma__populate populates (flags). */
#define PMA__POPULATE_WRITE    (1u << 0) /* writable (else for reading) */
#define PMA__POPULATE_ALLOCATE (1u << 1) /* the pages are being allocated: report, never touch */

/*
 * pma__populate -- populates the page tables of [addr, addr + len) (addr
 * page-aligned) for writing (PMA__POPULATE_WRITE), or for reading, contents
 * unchanged: madvise(MADV_POPULATE_WRITE / _READ), on up to 8 threads of
 * its own (the caller's CPUs by affinity, one per 64 MiB at least), joined
 * before it returns.
 *
 * Without PMA__POPULATE_ALLOCATE it is best effort and returns 0: a range
 * the kernel will not populate is left to fault when used, and a kernel
 * without the advice (before 5.14) gets a no-op write per page instead.
 *
 * With PMA__POPULATE_ALLOCATE (a tmpfs file whose pages nothing has
 * allocated yet) nothing is ever touched, since a touch of a page the file
 * system has no room for raises SIGBUS; the first failure is returned:
 * -EFAULT (no room: the kernel would have raised SIGBUS), -ENOMEM, -EINTR,
 * -EHWPOISON, or another -errno when the advice itself is refused (-EINVAL:
 * a kernel without it; the caller allocates otherwise).  Pages populated
 * before a failure stay allocated.  The threads then run on the CPUs of the
 * caller's NUMA node (within its affinity), so that the pages come from
 * that node as they would from fallocate on the caller's thread.  Internal
 * to libpmalloc.
 */
int pma__populate(void *addr, size_t len, unsigned flags)
	__attribute__((visibility("hidden")));

#endif
