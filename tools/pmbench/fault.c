/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * fault.c -- a SIGBUS while pmbench touches its region becomes an error
 * naming the offset, not a signal death.
 *
 * A mapped file raises SIGBUS when a store reaches a page the file system
 * cannot back (a hole on a full file system, a file truncated under the
 * run) and on real PM when a load hits a poisoned line.  The thread that
 * touches the region arms a jump buffer of its own (thread-local); the
 * handler jumps back there with the faulting address.  A SIGBUS in a thread
 * with no armed buffer (the library's GPU pipeline threads) is reported
 * from the handler with async-signal-safe calls, and the process exits 1.
 */
#include <signal.h>
#include <stdint.h>
#include <unistd.h>

#include "pmalloc.h"
#include "pmbench.h"
#include "lib/sigbus.h"

static _Thread_local sigjmp_buf *armed;
static _Thread_local uintptr_t fault_addr;

/*
 * A fault in a thread with nothing armed (a library thread of the GPU
 * pipeline): reported with async-signal-safe calls, then exit status 1.
 */
static void
report_unarmed(uintptr_t a)
{
	static const char pre[] = "pmbench: SIGBUS in a thread pmbench does not guard, ",
		in[] = "at offset ", out[] = "outside the region",
		post[] = ": a page the file system could not back, a truncated file, or a media error\n";
	uintptr_t base = region ? (uintptr_t)pma_region_addr(region) : 0;
	char b[256];
	size_t n = tool_sigsafe_put(b, 0, sizeof(b), pre);

	if (region && a >= base && a - base < pma_region_size(region)) {
		n = tool_sigsafe_put(b, n, sizeof(b), in);
		n = tool_sigsafe_num(b, n, sizeof(b), a - base, 0);
	} else {
		n = tool_sigsafe_put(b, n, sizeof(b), out);
	}
	if (write(STDERR_FILENO, b, n) < 0 || write(STDERR_FILENO, post, sizeof(post) - 1) < 0)
		_exit(1);
	_exit(1);
}

static void
on_sigbus(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)uc;
	if (!armed)
		report_unarmed((uintptr_t)si->si_addr);
	sigjmp_buf *jb = armed;
	armed = NULL;
	fault_addr = (uintptr_t)si->si_addr;
	siglongjmp(*jb, 1);
}

void
pmb_fault_install(void)
{
	tool_sigbus_install(on_sigbus);
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
