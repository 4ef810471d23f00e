/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * pmctl.h -- the former name of pmalloc_ns.h (libpmalloc_ns's namespaces and
 * provisioning, pma_ns_* and pma_prov_*), kept for one release so that
 * `#include <pmctl.h>` still builds.  Include <pmalloc_ns.h> instead.
 */
#ifndef PMCTL_H
#define PMCTL_H 1

#include "pmalloc_ns.h"

#endif
