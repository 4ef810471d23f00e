/* SPDX-License-Identifier: BSD-3-Clause */
/* cpus.c -- the CPUs a library call may use (see cpus.h). */
#include <sched.h>
#include <unistd.h>

#include "cpus.h"

unsigned
usable_cpus(void)
{
	cpu_set_t set;

	if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
		return (unsigned)CPU_COUNT(&set);
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	return cpus < 1 ? 1 : (unsigned)cpus;
}
