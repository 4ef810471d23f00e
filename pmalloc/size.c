/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * size.c -- sizes as people write them ("992M", "1.5GiB", "4096") and as
 * they read them ("992.00 MiB"): the one parser of the project, for the
 * library's own texts (provisioning configs) and every tool's options.
 */
#include <errno.h>
#include <stdio.h>

#include "pmalloc.h"
#include "errmsg.h"

#define MAX_DECIMALS 18 /* 10^18 and twice a remainder below it fit in 64 bits */

static int
digit(char c)
{
	return c >= '0' && c <= '9';
}

/* floor(frac / 10^ndec * 2^shift) exactly: binary long division of frac by 10^ndec. */
static uint64_t
fraction_bytes(uint64_t frac, uint64_t denom, unsigned shift)
{
	uint64_t q = 0;

	for (unsigned i = 0; i < shift; i++) {
		frac *= 2;
		q = 2 * q + (frac >= denom);
		if (frac >= denom)
			frac -= denom;
	}
	return q;
}

int
pma_size_parse(const char *text, uint64_t *out)
{
	static const char bad[] = "'%s' is not a size (digits, an optional fraction, "
				  "then K, M, G or T with an optional i, iB or B)";
	uint64_t v = 0, frac = 0, denom = 1;
	const char *p = text;
	unsigned shift = 0, ndec = 0;

	if (!text || !out)
		return pma__err(-EINVAL, "pma_size_parse: text and out are required");
	if (!digit(*p))
		return pma__err(-EINVAL, bad, text);
	for (; digit(*p); p++) {
		uint64_t d = (uint64_t)(*p - '0');
		if (v > UINT64_MAX / 10 || (v == UINT64_MAX / 10 && d > UINT64_MAX % 10))
			return pma__err(-ERANGE, "size '%s' is too large", text);
		v = v * 10 + d;
	}
	if (*p == '.') {
		if (!digit(*++p))
			return pma__err(-EINVAL, bad, text);
		for (; digit(*p); p++) {
			if (++ndec > MAX_DECIMALS)
				return pma__err(-EINVAL, "size '%s' has more than %d decimals", text,
						MAX_DECIMALS);
			frac = frac * 10 + (uint64_t)(*p - '0');
			denom *= 10;
		}
	}
	switch (*p) {
	case 'k': case 'K': shift = 10; p++; break;
	case 'm': case 'M': shift = 20; p++; break;
	case 'g': case 'G': shift = 30; p++; break;
	case 't': case 'T': shift = 40; p++; break;
	default: break;
	}
	if (shift && (*p == 'i' || *p == 'I'))
		p++;
	if (*p == 'b' || *p == 'B')
		p++;
	if (*p)
		return pma__err(-EINVAL, bad, text);
	if (v > (UINT64_MAX >> shift))
		return pma__err(-ERANGE, "size '%s' is too large", text);
	uint64_t whole = v << shift, part = fraction_bytes(frac, denom, shift);
	if (whole > UINT64_MAX - part)
		return pma__err(-ERANGE, "size '%s' is too large", text);
	*out = whole + part;
	return 0;
}

const char *
pma_size_format(uint64_t bytes, char *buf, size_t len)
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
