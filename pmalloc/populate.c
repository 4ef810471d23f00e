/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * populate.c -- populating the page tables of a mapping on a few threads
 * (see populate.h).  Faults on different ranges of one mapping are taken in
 * parallel: a 1 GiB tmpfs region whose pages fallocate had allocated took
 * 0.24 s on one thread of the 2-core dev VM and 0.12-0.13 s on two.  A
 * large region on a many-core node gains more (a 10 GB store's open).
 */
#include <errno.h>
#include <numa.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cpus.h"
#include "populate.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define POPULATE_MAX_THREADS 8
#define POPULATE_MIN_PIECE ((size_t)64 << 20) /* below: not worth a thread */
#define POPULATE_ALIGN ((size_t)2 << 20)      /* pieces start on huge-page boundaries */

struct populate_piece {
	char *addr;
	size_t len;
	unsigned flags;
	int error; /* 0, or the piece's -errno */
};

static void *
populate_piece(void *arg)
{
	struct populate_piece *p = arg;
	int write = !!(p->flags & PMA__POPULATE_WRITE);

	if (madvise(p->addr, p->len, write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ) == 0)
		return NULL;
	p->error = -errno;
	/*
	 * Only a kernel without the advice (before 5.14: EINVAL) gets the
	 * fallback, a no-op atomic write per page that faults it in writable;
	 * reads fault anyway.  Another error (no space behind a sparse file:
	 * EFAULT) is left to the writes that need the pages, not provoked here.
	 * Pages being allocated are never touched: the error goes back.
	 */
	if (p->error != -EINVAL || !write || (p->flags & PMA__POPULATE_ALLOCATE))
		return NULL;
	p->error = 0;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	for (size_t off = 0; off < p->len; off += page)
		__atomic_fetch_add(p->addr + off, 0, __ATOMIC_RELAXED);
	return NULL;
}

/*
 * The CPUs of the caller's affinity on the NUMA node it runs on, into *set
 * (1 on success, 0 if that cannot be told: one node, no libnuma support, a
 * mask larger than a cpu_set_t).  Pages a thread allocates come from its
 * own node by default; fallocate on the caller's thread would have taken
 * them all from the caller's.
 */
static int
caller_node_cpus(cpu_set_t *set)
{
	int cpu = sched_getcpu();

	if (cpu < 0 || numa_available() < 0 || numa_max_node() < 1 ||
	    sched_getaffinity(0, sizeof(*set), set))
		return 0;
	int node = numa_node_of_cpu(cpu);
	if (node < 0)
		return 0;
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, set) && numa_node_of_cpu(c) != node)
			CPU_CLR(c, set);
	return CPU_COUNT(set) > 0;
}

int
pma__populate(void *addr, size_t len, unsigned flags)
{
	struct populate_piece piece[POPULATE_MAX_THREADS];
	pthread_t tid[POPULATE_MAX_THREADS];
	int started[POPULATE_MAX_THREADS] = {0};
	size_t n = len / POPULATE_MIN_PIECE;
	cpu_set_t node_cpus;
	pthread_attr_t attr, *pattr = NULL;
	/* Allocating: on the caller's node's CPUs only, so that the pages stay on that node. */
	int on_node = (flags & PMA__POPULATE_ALLOCATE) && caller_node_cpus(&node_cpus);
	unsigned cpus = on_node ? (unsigned)CPU_COUNT(&node_cpus) : usable_cpus();

	if (n > cpus)
		n = cpus;
	if (n > POPULATE_MAX_THREADS)
		n = POPULATE_MAX_THREADS;
	if (n < 1)
		n = 1;
	/* n contiguous pieces, each boundary rounded up to POPULATE_ALIGN from addr */
	size_t per = (len / n + POPULATE_ALIGN - 1) & ~(POPULATE_ALIGN - 1);
	size_t off = 0;
	unsigned k = 0;
	for (; k < n && off < len; k++, off += per)
		piece[k] = (struct populate_piece){(char *)addr + off, len - off < per ? len - off : per,
						   flags, 0};
	if (on_node && k > 1 && pthread_attr_init(&attr) == 0) {
		pattr = &attr;
		if (pthread_attr_setaffinity_np(pattr, sizeof(node_cpus), &node_cpus)) {
			pthread_attr_destroy(pattr);
			pattr = NULL;
		}
	}
	/* piece 0 on this thread; a piece whose thread cannot start (pinned or not), too */
	for (unsigned i = 1; i < k; i++)
		started[i] = pthread_create(&tid[i], pattr, populate_piece, &piece[i]) == 0 ||
			     (pattr && pthread_create(&tid[i], NULL, populate_piece, &piece[i]) == 0);
	if (pattr)
		pthread_attr_destroy(pattr);
	populate_piece(&piece[0]);
	for (unsigned i = 1; i < k; i++) {
		if (started[i])
			pthread_join(tid[i], NULL);
		else
			populate_piece(&piece[i]);
	}
	int error = 0;
	for (unsigned i = 0; i < k && !error; i++)
		error = piece[i].error;
	return flags & PMA__POPULATE_ALLOCATE ? error : 0;
}
