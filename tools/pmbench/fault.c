/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * fault.c -- a SIGBUS while pmbench touches its region becomes an error
 * naming the offset, not a signal death.
 *
 * A mapped file raises SIGBUS when a store reaches a page the file system
 * cannot back (a hole on a full file system, a file truncated under the
 * run) and on real PM when a load hits a poisoned line.  The thread that
 * touches the region arms a jump buffer of its own (thread-local); the
 * handler jumps back there with the faulting address.  A SIGBUS with no
 * armed buffer (not ours) gets the default action.
 */
#include <signal.h>
#include <stdint.h>
#include <string.h>

#include "pmalloc.h"
#include "pmbench.h"

static _Thread_local sigjmp_buf *armed;
static _Thread_local uintptr_t fault_addr;

static void
on_sigbus(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	if (!armed) {
		signal(sig, SIG_DFL);
		raise(sig);
		return;
	}
	sigjmp_buf *jb = armed;
	armed = NULL;
	fault_addr = (uintptr_t)si->si_addr;
	siglongjmp(*jb, 1);
}

void
pmb_fault_install(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_sigbus;
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGBUS, &sa, NULL);
}

void
pmb_fault_arm(sigjmp_buf *jb)
{
	armed = jb;
}

void
pmb_fault_disarm(void)
{
	armed = NULL;
}

/* The offset of the last fault of this thread in the region; -1 when outside it. */
long long
pmb_fault_offset(void)
{
	uintptr_t base = (uintptr_t)pma_region_addr(region);

	if (fault_addr < base || fault_addr >= base + pma_region_size(region))
		return -1;
	return (long long)(fault_addr - base);
}

void
pmb_fault_die(const char *during, long long off)
{
	if (off >= 0)
		dief(pma_region_path(region), "SIGBUS %s at offset %lld (0x%llx) of the region: the "
				"file system could not back that page (a sparse file on a full file system, "
				"or the file was truncated), or a media error on PM", during, off,
				(unsigned long long)off);
	dief(pma_region_path(region), "SIGBUS %s outside the region", during);
}
