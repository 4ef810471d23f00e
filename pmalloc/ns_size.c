/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ns_size.c -- pma_ns_size_parse and pma_ns_size_format, the earlier names
 * of libpmalloc's pma_size_parse and pma_size_format (pmalloc/size.c), kept
 * in libpmalloc_ns's ABI for programs that call them.
 */
#include "pmalloc.h"
#include "pmalloc_ns.h"

int
pma_ns_size_parse(const char *text, uint64_t *out)
{
	return pma_size_parse(text, out);
}

const char *
pma_ns_size_format(uint64_t bytes, char *buf, size_t len)
{
	return pma_size_format(bytes, buf, len);
}
