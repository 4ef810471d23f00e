/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * copyout_helper.c -- a helper program for tests/copyout_roundtrip.sh and
 * tests/pmckpt_cli.sh (run by prove with no arguments, it skips).
 *
 *   copyout_helper write RAMDISK STORE SHARED|- FROM TO KEEP RANK WORLD
 *       opens (or creates) store STORE on the ramdisk file
 *       RAMDISK/pmckpt-STORE.pool (pmck_local_open), commits steps FROM..TO
 *       with the contents of tests/copyout_util.h and, unless SHARED is "-",
 *       copies each out to SHARED (pmck_copyout, keep KEEP, rank RANK of
 *       WORLD); prints the local backend's description
 *   copyout_helper expect STEP
 *       prints JSON: the layout and each tensor's expected pmckpt checksum at STEP
 *   copyout_helper check RAMDISK STORE STEP
 *       exit 0 if the store recovers STEP with exactly its contents
 *   copyout_helper import RAMDISK STORE FILE STEP
 *       pmck_safetensors_import, then prints the recovered step
 *   copyout_helper mkstore POOL NAME
 *       adds an empty store NAME (two small tensors) to the pool file POOL
 *   copyout_helper damage RAMDISK STORE SLOT
 *       flips a byte of tensor "emb" in slot SLOT of the store
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pmckpt.h"
#include "copyout_util.h"

/* Every dtype; declared out of layer order so the slot (and file) order differs. */
static const struct pmck_tensor_desc layout[] = {
	{.name = "emb", .dtype = PMCK_DTYPE_F32, .ndim = 2, .shape = {512, 700}, .layer = 0},
	{.name = "h.1.w", .dtype = PMCK_DTYPE_BF16, .ndim = 2, .shape = {256, 300}, .layer = 2},
	{.name = "h.0.w", .dtype = PMCK_DTYPE_F16, .ndim = 2, .shape = {128, 96}, .layer = 1},
	{.name = "h.0.b", .dtype = PMCK_DTYPE_F32, .ndim = 1, .shape = {3}, .layer = 1},
	{.name = "h.0.g", .dtype = PMCK_DTYPE_F16, .ndim = 1, .shape = {5}, .layer = 1},
	{.name = "step", .dtype = PMCK_DTYPE_I64, .ndim = 0, .layer = 3},
	{.name = "mask", .dtype = PMCK_DTYPE_BOOL, .ndim = 1, .shape = {7}, .layer = 3},
	{.name = "head", .dtype = PMCK_DTYPE_U8, .ndim = 1, .shape = {100001}, .layer = 3},
	{.name = "blob", .dtype = PMCK_DTYPE_BYTES, .ndim = 1, .shape = {33}, .layer = 3},
	{.name = "h.1.d", .dtype = PMCK_DTYPE_F64, .ndim = 2, .shape = {100, 33}, .layer = 2},
	{.name = "ids", .dtype = PMCK_DTYPE_I32, .ndim = 3, .shape = {2, 3, 4}, .layer = 2},
	{.name = "u32", .dtype = PMCK_DTYPE_U32, .ndim = 1, .shape = {11}, .layer = 2},
	{.name = "i16", .dtype = PMCK_DTYPE_I16, .ndim = 1, .shape = {13}, .layer = 2},
	{.name = "u16", .dtype = PMCK_DTYPE_U16, .ndim = 2, .shape = {3, 5}, .layer = 2},
	{.name = "i8", .dtype = PMCK_DTYPE_I8, .ndim = 1, .shape = {9}, .layer = 0},
	{.name = "u64", .dtype = PMCK_DTYPE_U64, .ndim = 1, .shape = {2}, .layer = 0},
	{.name = "q8a", .dtype = PMCK_DTYPE_F8_E4M3, .ndim = 1, .shape = {17}, .layer = 3},
	{.name = "q8b", .dtype = PMCK_DTYPE_F8_E5M2, .ndim = 2, .shape = {4, 4}, .layer = 3},
	{.name = "empty", .dtype = PMCK_DTYPE_F32, .ndim = 2, .shape = {0, 8}, .layer = 3},
};
#define NT (sizeof(layout) / sizeof(layout[0]))

static int
die(const char *what)
{
	fprintf(stderr, "copyout_helper: %s: %s\n", what, pmck_errormsg());
	return 1;
}

static unsigned long long
num(const char *s)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);
	if (*end) {
		fprintf(stderr, "copyout_helper: not a number: %s\n", s);
		exit(2);
	}
	return v;
}

static int
open_local(const char *ramdisk, const char *store, struct pmck_local *l)
{
	struct pmck_local_opts o = {.ramdisk_dir = ramdisk, .store_name = store,
			.descs = layout, .ndescs = NT};
	return pmck_local_open(&o, l);
}

static int
do_write(char **a)
{
	struct pmck_local l;
	struct pmck_copyout *co = NULL;
	uint64_t from = num(a[3]), to = num(a[4]);

	if (open_local(a[0], a[1], &l))
		return die("pmck_local_open");
	printf("%s\n", l.description);
	if (strcmp(a[2], "-")) {
		struct pmck_copyout_opts o = {.dir = a[2], .keep = (unsigned)num(a[5]),
				.rank = (unsigned)num(a[6]), .world_size = (unsigned)num(a[7])};
		if (pmck_copyout_new(l.store, &o, &co))
			return die("pmck_copyout_new");
	}
	uint8_t **src = make_srcs(layout, NT, from);
	int ret = 0;
	for (uint64_t step = from; step <= to && !ret; step++) {
		fill_srcs(src, layout, NT, step);
		if (commit_step(l.store, src, NT, step))
			ret = die("commit");
		else if (co && pmck_copyout_submit(co))
			ret = die("pmck_copyout_submit");
	}
	if (co && pmck_copyout_wait(co) && !ret)
		ret = die("copy-out");
	pmck_copyout_delete(&co);
	free_srcs(src, NT);
	pmck_local_close(&l);
	return ret;
}

static int
do_expect(char **a)
{
	uint64_t step = num(a[0]);

	printf("{\"step\": %llu, \"tensors\": [", (unsigned long long)step);
	for (size_t i = 0; i < NT; i++) {
		uint64_t b = desc_bytes(&layout[i]);
		uint8_t *buf = malloc(b ? b : 1);
		gen_tensor(step, i, buf, b);
		printf("%s\n {\"index\": %zu, \"name\": \"%s\", \"dtype\": \"%s\", \"shape\": [", i ? "," : "",
				i, layout[i].name, pmck_dtype_name(layout[i].dtype));
		for (uint32_t d = 0; d < layout[i].ndim; d++)
			printf("%s%llu", d ? ", " : "", (unsigned long long)layout[i].shape[d]);
		printf("], \"nbytes\": %llu, \"layer\": %u, \"xxh3\": \"%016llx\"}", (unsigned long long)b,
				layout[i].layer, (unsigned long long)pmck_tensor_checksum(buf, b));
		free(buf);
	}
	printf("]}\n");
	return 0;
}

static int
do_check(char **a)
{
	struct pmck_local l;
	struct pmck_recovery rec;
	uint64_t step = num(a[2]);
	int ret = 0;

	if (open_local(a[0], a[1], &l))
		return die("pmck_local_open");
	if (pmck_store_recover(l.store, &rec))
		ret = die("recover");
	else if (rec.step != step || !store_holds(l.store, layout, NT, step)) {
		fprintf(stderr, "copyout_helper: store holds step %llu, %s the contents of step %llu\n",
				(unsigned long long)rec.step,
				store_holds(l.store, layout, NT, step) ? "with" : "not with",
				(unsigned long long)step);
		ret = 1;
	}
	pmck_local_close(&l);
	return ret;
}

static int
do_import(char **a)
{
	struct pmck_local l;
	struct pmck_recovery rec;
	int ret = 0;

	if (open_local(a[0], a[1], &l))
		return die("pmck_local_open");
	if (pmck_safetensors_import(l.store, a[2], num(a[3])))
		ret = die("pmck_safetensors_import");
	else if (pmck_store_recover(l.store, &rec))
		ret = die("recover");
	else
		printf("%llu\n", (unsigned long long)rec.step);
	pmck_local_close(&l);
	return ret;
}

static int
do_mkstore(char **a)
{
	static const struct pmck_tensor_desc small[] = {
		{.name = "w", .dtype = PMCK_DTYPE_F32, .ndim = 1, .shape = {1000}, .layer = 0},
		{.name = "b", .dtype = PMCK_DTYPE_F32, .ndim = 0, .layer = 1},
	};
	struct pma_region *r;
	struct pma_pool *p;
	struct pmck_store *s;
	int ret = 0;

	if (pma_region_open(a[0], 0, 0, &r))
		return die("pma_region_open");
	if (pma_pool_open(r, &p))
		ret = die("pma_pool_open");
	else if (pmck_store_create(p, a[1], small, 2, &s))
		ret = die("pmck_store_create");
	else
		pmck_store_close(&s);
	pma_pool_close(&p);
	pma_region_close(&r);
	return ret;
}

static int
do_damage(char **a)
{
	struct pmck_local l;
	struct pmck_tensor_info t;
	char name[128];
	void *data;
	int ret = 0;

	if (open_local(a[0], a[1], &l))
		return die("pmck_local_open");
	fmtp(name, sizeof(name), "%s.data%llu", a[1], num(a[2]));
	if (pma_lookup(l.pool, name, &data, NULL) || pmck_store_tensor(l.store, 0, &t))
		ret = die("lookup");
	else
		((volatile uint8_t *)data)[t.offset + 12345] ^= 0x08;
	pmck_local_close(&l);
	return ret;
}

int
main(int argc, char **argv)
{
	static const struct {
		const char *name;
		int nargs;
		int (*fn)(char **);
	} cmd[] = {
		{"write", 8, do_write}, {"expect", 1, do_expect}, {"check", 3, do_check},
		{"import", 4, do_import}, {"mkstore", 2, do_mkstore}, {"damage", 3, do_damage},
	};

	if (argc < 2) {
		printf("1..0 # SKIP helper program of copyout_roundtrip.sh and pmckpt_cli.sh\n");
		return 0;
	}
	for (size_t i = 0; i < sizeof(cmd) / sizeof(cmd[0]); i++)
		if (!strcmp(argv[1], cmd[i].name)) {
			if (argc - 2 != cmd[i].nargs) {
				fprintf(stderr, "copyout_helper %s: %d arguments expected\n", cmd[i].name,
						cmd[i].nargs);
				return 2;
			}
			return cmd[i].fn(argv + 2);
		}
	fprintf(stderr, "copyout_helper: unknown command %s\n", argv[1]);
	return 2;
}
