/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * lock.c -- one writer or any number of readers per region, as PMDK does
 * for its pools: flock(2) on the file or device, taken without blocking.
 *
 * flock rather than fcntl (POSIX) locks: a POSIX lock belongs to the
 * process and is dropped when *any* descriptor of the file is closed (a
 * second pma_region_open of the same path, or a tool reading the pool's
 * magic with open/close, would silently unlock it).  A flock lock belongs
 * to the open file description: it ends when the last descriptor of it is
 * closed, which the kernel also does for a process that is killed, so a
 * SIGKILLed holder never leaves a stale lock.
 *
 * flock does not say who holds a lock.  Like lslocks, we look for the
 * file's device and inode in /proc/locks, whose entries carry the pid of
 * the process that took each lock.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "pmalloc.h"
#include "errmsg.h"
#include "lock.h"

#define MAX_HOLDERS 4

/* "pid 1234 (python3)", "pid 1234 (this process)". */
static void
describe_pid(int pid, char *buf, size_t len)
{
	char path[64], comm[32] = "";

	if (pid == (int)getpid()) {
		snprintf(buf, len, "pid %d (this process)", pid);
		return;
	}
	snprintf(path, sizeof(path), "/proc/%d/comm", pid);
	FILE *f = fopen(path, "re");
	if (f) {
		if (fgets(comm, sizeof(comm), f))
			comm[strcspn(comm, "\n")] = 0;
		fclose(f);
	}
	if (comm[0])
		snprintf(buf, len, "pid %d (%s)", pid, comm);
	else
		snprintf(buf, len, "pid %d", pid);
}

/*
 * Who holds flock locks on fd's file: "for writing by pid 1234 (python3)",
 * "for reading by pid 12 (pmckpt), pid 13 (pmckpt)", or "" if /proc/locks
 * names nobody (not mounted, or the holder is in another pid namespace).
 */
static void
describe_holders(int fd, char *buf, size_t len)
{
	struct stat st;
	char line[256], mode[16] = "";
	int pids[MAX_HOLDERS], n = 0;

	buf[0] = 0;
	if (fstat(fd, &st))
		return;
	FILE *f = fopen("/proc/locks", "re");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f) && n < MAX_HOLDERS) {
		char type[16], adv[16], m[16];
		unsigned maj, min;
		unsigned long ino;
		int pid;
		/* "1: FLOCK  ADVISORY  WRITE 1234 00:1b:5678 0 EOF"; waiters have "->" after "1:". */
		if (sscanf(line, "%*d: %15s %15s %15s %d %x:%x:%lu", type, adv, m, &pid, &maj, &min,
				&ino) != 7 || strcmp(type, "FLOCK") || pid <= 0)
			continue;
		if (maj != major(st.st_dev) || min != minor(st.st_dev) || ino != (unsigned long)st.st_ino)
			continue;
		int seen = 0;
		for (int i = 0; i < n; i++)
			seen |= pids[i] == pid;
		if (seen)
			continue;
		pids[n++] = pid;
		snprintf(mode, sizeof(mode), "%s", m);
	}
	fclose(f);
	if (!n)
		return;
	size_t o = (size_t)snprintf(buf, len, "for %s by ",
			!strcmp(mode, "WRITE") ? "writing" : "reading");
	for (int i = 0; i < n && o < len; i++) {
		char who[64];
		describe_pid(pids[i], who, sizeof(who));
		o += (size_t)snprintf(buf + o, len - o, "%s%s", i ? ", " : "", who);
	}
}

int
pma__lock(int fd, const char *path, int exclusive)
{
	int ret;

	do
		ret = flock(fd, (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB);
	while (ret && errno == EINTR);
	if (ret == 0)
		return 0;
	if (errno != EWOULDBLOCK)
		return pma__err(-errno, "lock %s: %s", path, strerror(errno));

	char who[256];
	describe_holders(fd, who, sizeof(who));
	/* The message names the pid, so a user knows which job to stop. */
	return pma__err(PMA_E_BUSY, "cannot open %s for %s: it is held %s (one writer or any "
			"number of readers at a time)", path, exclusive ? "writing" : "reading",
			who[0] ? who : "by another process");
}
