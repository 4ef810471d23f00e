/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * owner.h -- who owns a file, and where a link points, in words, for the
 * messages that refuse a file or directory another user could read or
 * change (PMA_E_UNSAFE).  Compiled
 * into libpmalloc and libpmckpt (common/owner.c); nothing here is exported.
 */
#ifndef PMCKPT_COMMON_OWNER_H
#define PMCKPT_COMMON_OWNER_H 1

#include <stddef.h>
#include <sys/types.h>

#include "errmsg.h" /* ERRMSG_HIDDEN */

/* owner_describe -- "nobody (uid 65534)", or "uid 65534" for a uid without a name. */
void owner_describe(uid_t uid, char *buf, size_t len) ERRMSG_HIDDEN;

/* owner_link_describe -- "a symbolic link to TARGET" for the link at path ("a symbolic link" if unreadable). */
void owner_link_describe(const char *path, char *buf, size_t len) ERRMSG_HIDDEN;

#endif
