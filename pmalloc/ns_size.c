/* SPDX-License-Identifier: BSD-3-Clause */
/* ns_size.c -- namespace sizes as people write them: "992M", "1G", "1.00 GiB". */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "pmalloc_ns.h"
#include "errmsg.h"

int
pma_ns_size_parse(const char *text, uint64_t *out)
{
	uint64_t v = 0;
	const char *p = text;
	unsigned shift = 0;

	if (!text || !out)
		return pma_ns__err(-EINVAL, "pma_ns_size_parse: text and out are required");
	if (*p < '0' || *p > '9')
		return pma_ns__err(-EINVAL, "'%s' is not a size (digits and K, M, G or T)", text);
	for (; *p >= '0' && *p <= '9'; p++) {
		if (v > (UINT64_MAX - 9) / 10)
			return pma_ns__err(-ERANGE, "size '%s' is too large", text);
		v = v * 10 + (uint64_t)(*p - '0');
	}
	switch (*p) {
	case 'k': case 'K': shift = 10; p++; break;
	case 'm': case 'M': shift = 20; p++; break;
	case 'g': case 'G': shift = 30; p++; break;
	case 't': case 'T': shift = 40; p++; break;
	default: break;
	}
	if (shift && (strcmp(p, "iB") == 0 || strcmp(p, "ib") == 0))
		p += 2;
	else if (*p == 'B' || *p == 'b')
		p++;
	if (*p)
		return pma_ns__err(-EINVAL, "'%s' is not a size (digits and K, M, G or T)", text);
	if (shift && v > (UINT64_MAX >> shift))
		return pma_ns__err(-ERANGE, "size '%s' is too large", text);
	*out = v << shift;
	return 0;
}

const char *
pma_ns_size_format(uint64_t bytes, char *buf, size_t len)
{
	static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
	unsigned u = 0;
	double v = (double)bytes;

	if (!buf || !len)
		return buf;
	while (v >= 1024.0 && u + 1 < sizeof(unit) / sizeof(unit[0])) {
		v /= 1024.0;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%llu B", (unsigned long long)bytes);
	else
		snprintf(buf, len, "%.2f %s", v, unit[u]);
	return buf;
}
