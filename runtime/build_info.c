/* SPDX-License-Identifier: BSD-3-Clause */
/* build_info.c -- what this library was built with (pmck_build_info). */
#include "pmckpt.h"
#include "gpu.h"

#ifndef PMCK_VERSION
#define PMCK_VERSION "unknown"
#endif
#ifndef PMCK_PMEM2_VERSION
#define PMCK_PMEM2_VERSION ""
#endif

void
pmck_build_info(struct pmck_build_info *out)
{
	out->version = PMCK_VERSION;
	out->cuda = pmck__gpu_build_version();
	out->pmem2 = PMCK_PMEM2_VERSION;
}
