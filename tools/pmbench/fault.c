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
#include <string.h>
#include <unistd.h>

#include "pmalloc.h"
#include "pmbench.h"

static _Thread_local sigjmp_buf *armed;
static _Thread_local uintptr_t fault_addr;

/* Decimal v into b; the length. */
static size_t
utoa(char *b, uint64_t v)
{
	char d[24];
	size_t n = 0, k = 0;

	do {
		d[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	while (n)
		b[k++] = d[--n];
	return k;
}

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
	size_t n = 0;

	memcpy(b, pre, sizeof(pre) - 1);
	n += sizeof(pre) - 1;
	if (region && a >= base && a - base < pma_region_size(region)) {
		memcpy(b + n, in, sizeof(in) - 1);
		n += sizeof(in) - 1;
		n += utoa(b + n, a - base);
	} else {
		memcpy(b + n, out, sizeof(out) - 1);
		n += sizeof(out) - 1;
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
