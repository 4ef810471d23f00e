/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * cpus.h -- how many threads a library call may start: the CPUs the caller
 * may run on.  Compiled into libpmalloc and libpmckpt (common/cpus.c);
 * nothing here is exported.
 */
#ifndef PMCKPT_COMMON_CPUS_H
#define PMCKPT_COMMON_CPUS_H 1

#include "errmsg.h" /* ERRMSG_HIDDEN */

/*
 * usable_cpus -- the CPUs of the calling thread's affinity, which an MPI
 * launcher's binding or a container's cpuset narrows (8 ranks of a 16-core
 * node bound to 2 cores each would otherwise start 8 threads each); the
 * online CPUs if the mask cannot be read (more CPUs than a cpu_set_t
 * holds).  At least 1.
 */
unsigned usable_cpus(void) ERRMSG_HIDDEN;

#endif
