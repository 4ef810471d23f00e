/*
 * local_prefault.c -- pmck_local_open populates a store's page tables when
 * it opens or creates it, unless PMCK_LOCAL_NO_PREFAULT says not to (the
 * partner copies a rank holds: written later, in the background).  Measured
 * as the mapping's resident set in /proc/self/smaps, on a ramdisk file and
 * on a pm_path file; a store opened without prefaulting still commits and
 * recovers its checkpoint.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pmckpt.h"
#include "tap.h"

#define MIB (1u << 20)
static const struct pmck_tensor_desc layout[1] = {
	{.name = "w", .dtype = PMCK_DTYPE_U8, .ndim = 1, .shape = {16 * MIB}, .layer = 0},
};

/* Resident bytes of the mapping that starts at addr (its smaps "Rss:"), -1 if not found. */
static long long
resident(const void *addr)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512];
	int in = 0;
	long long kb = -1;

	while (f && fgets(line, sizeof(line), f)) {
		uintptr_t lo, hi;
		/* A mapping's header, "lo-hi perms ...", or one of its fields, "Name: value". */
		if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR, &lo, &hi) == 2) {
			in = lo == (uintptr_t)addr;
			continue;
		}
		if (in && sscanf(line, "Rss: %lld kB", &kb) == 1)
			break;
	}
	if (f)
		fclose(f);
	return kb < 0 ? -1 : kb * 1024;
}

/* Opens the store (o), checks its resident set against `prefaulted`, and round-trips `step`. */
static void
check(struct pmck_local_opts *o, int prefaulted, uint64_t step, const char *what)
{
	struct pmck_local l;
	struct pmck_ckpt *c;
	struct pmck_recovery rec;

	int ret = pmck_local_open(o, &l);
	if (!ok(ret == 0, "%s: opened", what)) {
		diag("%d: %s", ret, pma_errormsg());
		return;
	}
	size_t size = pma_region_size(l.region);
	long long rss = resident(pma_region_addr(l.region));
	if (prefaulted)
		ok(rss >= (long long)(size * 9 / 10), "%s: prefaulted (%lld of %zu bytes resident)",
				what, rss, size);
	else
		ok(rss >= 0 && rss <= (long long)(size / 10), "%s: not prefaulted (%lld of %zu bytes "
				"resident)", what, rss, size);
	uint8_t *src = malloc(16 * MIB);
	for (size_t i = 0; i < 16 * MIB; i++)
		src[i] = (uint8_t)(i * 7 + (i >> 20) + step);
	ret = pmck_store_begin(l.store, step, &c);
	if (!ret)
		ret = pmck_ckpt_write(c, 0, src);
	if (!ret)
		ret = pmck_ckpt_commit(c);
	is_int(ret, 0, "%s: step %" PRIu64 " committed", what, step);
	ok(pmck_store_recover(l.store, &rec) == 0 && rec.step == step &&
	   !memcmp(pmck_store_tensor_data(l.store, 0), src, 16 * MIB),
			"%s: step %" PRIu64 " recovered bit-exact", what, step);
	free(src);
	pmck_local_close(&l);
}

int
main(void)
{
	char dir[600], pm[700];
	snprintf(dir, sizeof(dir), "%s", scratch_path("local-prefault"));
	snprintf(pm, sizeof(pm), "%s.pm", dir);

	struct pmck_local_opts o = {.ramdisk_dir = dir, .store_name = "pf", .descs = layout,
			.ndescs = 1};
	check(&o, 1, 1, "ramdisk, created");
	check(&o, 1, 2, "ramdisk, opened");
	o.store_name = "npf";
	o.flags = PMCK_LOCAL_NO_PREFAULT;
	check(&o, 0, 1, "ramdisk, created with NO_PREFAULT");
	check(&o, 0, 2, "ramdisk, opened with NO_PREFAULT");

	struct pmck_local_opts p = {.pm_path = pm, .store_name = "pf", .descs = layout,
			.ndescs = 1, .flags = PMCK_LOCAL_NO_PREFAULT};
	check(&p, 0, 1, "pm_path, created with NO_PREFAULT");
	p.flags = 0;
	check(&p, 1, 2, "pm_path, opened");

	char file[700];
	snprintf(file, sizeof(file), "%s/pmckpt-pf.pool", dir);
	unlink(file);
	snprintf(file, sizeof(file), "%s/pmckpt-npf.pool", dir);
	unlink(file);
	rmdir(dir);
	unlink(pm);
	return done_testing();
}
