/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * fault.c -- a SIGBUS in pmckpt becomes an error naming the pool and the
 * offset, exit status 1, instead of a death by signal.
 *
 * A mapped pool raises SIGBUS when a load hits a poisoned line on real PM
 * (a media error; libpmem2 and PMDK raise it too) or a page the file no
 * longer has (truncated under us).  pma_region_open reserves a writable
 * file's blocks (fills its holes), so a full file system fails there, not
 * here.  The command cannot go on after such a fault (the library's state
 * is mid-operation): the handler reports it with async-signal-safe calls
 * and exits.
 */
#include <signal.h>
#include <stdint.h>
#include <unistd.h>

#include "cmd.h"
#include "lib/sigbus.h"

static const char *volatile watched_path;
static volatile uintptr_t watched_base;
static volatile size_t watched_size;

static void
on_sigbus(int sig, siginfo_t *si, void *uc)
{
	char b[512];
	size_t n = 0;
	uintptr_t a = (uintptr_t)si->si_addr, base = watched_base;

	(void)sig;
	(void)uc;
	n = tool_sigsafe_put(b, n, sizeof(b), "pmckpt: SIGBUS ");
	if (watched_path && a >= base && a - base < watched_size) {
		n = tool_sigsafe_put(b, n, sizeof(b), "reading ");
		n = tool_sigsafe_put(b, n, sizeof(b), watched_path);
		n = tool_sigsafe_put(b, n, sizeof(b), " at offset ");
		n = tool_sigsafe_num(b, n, sizeof(b), a - base, 0);
		n = tool_sigsafe_put(b, n, sizeof(b), " (");
		n = tool_sigsafe_num(b, n, sizeof(b), a - base, 1);
		n = tool_sigsafe_put(b, n, sizeof(b), "): a media error on PM, or the file was truncated under "
				"pmckpt or its file system could not back the page\n");
	} else {
		n = tool_sigsafe_put(b, n, sizeof(b), "at address ");
		n = tool_sigsafe_num(b, n, sizeof(b), a, 1);
		n = tool_sigsafe_put(b, n, sizeof(b), ", outside the pool's mapping\n");
	}
	if (write(STDERR_FILENO, b, n) < 0)
		_exit(1);
	_exit(1);
}

void
fault_install(void)
{
	tool_sigbus_install(on_sigbus);
}

void
fault_watch(const struct pma_region *r)
{
	watched_base = (uintptr_t)pma_region_addr(r);
	watched_size = pma_region_size(r);
	watched_path = pma_region_path(r);
}
