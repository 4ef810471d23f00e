/* sizes.c -- pma_size_parse and pma_size_format: the one size syntax of the library and the tools. */
#include <errno.h>
#include <stdint.h>

#include "pmalloc.h"
#include "tap.h"

#define KiB ((uint64_t)1 << 10)
#define MiB ((uint64_t)1 << 20)
#define GiB ((uint64_t)1 << 30)
#define TiB ((uint64_t)1 << 40)

int
main(void)
{
	static const struct {
		const char *text;
		uint64_t want;
	} good[] = {
		{"4096", 4096}, {"0", 0}, {"512B", 512}, {"512b", 512},
		{"992M", 992 * MiB}, {"1G", GiB}, {"1T", TiB}, {"16k", 16 * KiB},
		{"2MiB", 2 * MiB}, {"3gib", 3 * GiB}, {"3GIB", 3 * GiB}, {"1Gi", GiB}, {"8GB", 8 * GiB},
		/* fractions: exact, a fraction of a byte rounded down */
		{"1.5G", GiB + GiB / 2}, {"1.5GiB", GiB + GiB / 2}, {"0.5K", 512}, {"0.3K", 307},
		{"1.5", 1}, {"0.25T", TiB / 4}, {"2.000000000000000001T", 2 * TiB},
		{"0.999999999999999999K", 1023},
		{"18446744073709551615", UINT64_MAX},
	};
	static const char *const bad[] = {
		"", "M", "12Q", "-1", "+1G", " 1G", "1G ", "1 G", "0x10", "1e3", "1GG", "1.", ".5G",
		"1.5.1G", "1iB", "1Bi", "1KBB", "nan", "inf", "1.0000000000000000000G",
	};
	uint64_t v;
	char buf[32];

	plan((int)(2 * (sizeof(good) / sizeof(good[0])) + sizeof(bad) / sizeof(bad[0])) + 9);
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		v = 12345;
		is_int(pma_size_parse(good[i].text, &v), 0, "size '%s' parses", good[i].text);
		ok(v == good[i].want, "'%s' is %llu bytes (got %llu)", good[i].text,
				(unsigned long long)good[i].want, (unsigned long long)v);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		v = 12345;
		is_int(pma_size_parse(bad[i], &v), -EINVAL, "size '%s' is refused: %s", bad[i],
				pma_errormsg());
	}
	v = 12345;
	is_int(pma_size_parse("18446744073709551616", &v), -ERANGE, "2^64: -ERANGE");
	is_int(pma_size_parse("99999999999999999999", &v), -ERANGE, "overflowing digits: -ERANGE");
	is_int(pma_size_parse("16777216T", &v), -ERANGE, "overflowing unit: -ERANGE");
	is_int(pma_size_parse("16777215.999999999999999999T", &v), 0,
			"just below 2^64 with a fraction parses");
	ok(v == 16777215 * TiB + TiB - 1, "... to 2^64 - 1");
	is_int(pma_size_parse(NULL, &v), -EINVAL, "NULL text: -EINVAL");
	ok(strcmp(pma_size_format(0, buf, sizeof(buf)), "0 B") == 0, "0 formats as '%s'", buf);
	ok(strcmp(pma_size_format(992 * MiB, buf, sizeof(buf)), "992.00 MiB") == 0,
			"992 MiB formats as '%s'", buf);
	ok(strcmp(pma_size_format(1073610752, buf, sizeof(buf)), "1023.88 MiB") == 0,
			"QEMU's 1 GiB-minus-labels region formats as '%s'", buf);
	return done_testing();
}
