/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * sigbus.h -- what pmckpt and pmbench share to turn a SIGBUS in a mapped
 * region (a media error on PM, a file truncated under the mapping, a page
 * the file system could not back) into an error message naming the offset.
 *
 * The message builders are async-signal-safe (no stdio, no malloc): a
 * handler fills a stack buffer with them and write(2)s it.
 */
#ifndef PMCK_TOOL_SIGBUS_H
#define PMCK_TOOL_SIGBUS_H 1

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

/* Installs fn as the SA_SIGINFO handler of SIGBUS (process-wide); 0 or -1 (errno). */
int tool_sigbus_install(void (*fn)(int, siginfo_t *, void *));

/* Appends s to buf (len bytes) at `at`, leaving room for a NUL; the new length. */
size_t tool_sigsafe_put(char *buf, size_t at, size_t len, const char *s);

/* Appends v in decimal, or in hex with "0x" when hex; the new length. */
size_t tool_sigsafe_num(char *buf, size_t at, size_t len, uint64_t v, int hex);

#endif
