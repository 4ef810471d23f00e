/* SPDX-License-Identifier: BSD-3-Clause */
/* lock.h -- one writer or any number of readers per region (see lock.c). */
#ifndef PMA_LOCK_H
#define PMA_LOCK_H 1

/*
 * pma__lock -- takes flock(2) on fd without blocking: exclusive for a
 * writer, shared for a reader.  0, PMA_E_BUSY naming path and the holders'
 * pids, or -errno.  Internal to libpmalloc.
 */
int pma__lock(int fd, const char *path, int exclusive)
	__attribute__((visibility("hidden")));

#endif
