/*
 * pool_check.c -- pma_pool_check reports every problem of a damaged pool
 * and writes nothing; pma_pool_salvage opens what survives, read-only:
 * with a header whose checksum fails, with the header page wiped, and
 * with one store's allocation entry damaged, the other stores still
 * recover bit-exact.  Plus the CLI: pmckpt check and pmckpt repair.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <json-c/json.h>
#include <xxhash.h>

#include "pmckpt.h"
#include "tap.h"
#include "ckpt_util.h"

#define MiB (1u << 20)
#define NT 2

static const struct pmck_tensor_desc layout[NT] = {
	{.name = "w", .dtype = PMCK_DTYPE_F32, .ndim = 2, .shape = {256, 1024}, .layer = 0},
	{.name = "b", .dtype = PMCK_DTYPE_F32, .ndim = 1, .shape = {1024}, .layer = 1},
};
static float w[256 * 1024], b[1024];

struct seen {
	unsigned n;
	int codes[64];
	char last[512];
};

static void
on_problem(void *arg, int code, const char *message)
{
	struct seen *s = arg;
	if (s->n < 64)
		s->codes[s->n] = code;
	s->n++;
	snprintf(s->last, sizeof(s->last), "%s", message);
	diag("problem %d: %s", code, message);
}

/* A pool with stores "a" (step 3) and "z" (step 7); returns the offset of "a.data0"'s table entry. */
static off_t
make_pool(const char *path)
{
	struct pma_region *r;
	struct pma_pool *pool;
	const void *src[NT] = {w, b};
	off_t entry = -1;

	unlink(path);
	if (pma_region_open(path, 16 * MiB, PMA_REGION_CREATE, &r) || pma_pool_create(r, 0, &pool))
		return -1;
	const char *names[2] = {"a", "z"};
	uint64_t steps[2] = {3, 7};
	for (int k = 0; k < 2; k++) {
		struct pmck_store *s;
		struct pmck_ckpt *c;
		for (size_t i = 0; i < 256 * 1024; i++)
			w[i] = (float)(i * (k + 1));
		b[0] = (float)steps[k];
		if (pmck_store_create(pool, names[k], layout, NT, &s) ||
		    pmck_store_begin(s, steps[k], &c) || pmck_ckpt_write_all(c, src, 1) ||
		    pmck_ckpt_commit(c))
			diag("%s", pmck_errormsg());
		pmck_store_close(&s);
	}
	/* The table entry naming a.data0 (the table starts at 4 KiB, 128 bytes an entry). */
	const char *base = pma_region_addr(r);
	for (off_t off = 4096; off < 2 * MiB; off += 128)
		if (!strcmp(base + off + 32, "a.data0"))
			entry = off;
	pma_pool_close(&pool);
	pma_region_close(&r);
	return entry;
}

/* Salvages the pool at path and recovers store name; its step, or -1 (message in diag). */
static long long
salvage_step(const char *path, const char *name, struct seen *seen, int *salvaged)
{
	struct pma_region *r;
	struct pma_pool *pool;
	struct pmck_store *s;
	struct pmck_recovery rec;
	long long step = -1;

	*salvaged = 0;
	if (pma_region_open(path, 0, PMA_REGION_RDONLY | PMA_REGION_NO_PREFAULT, &r))
		return -1;
	if (pma_pool_salvage(r, on_problem, seen, &pool) == 0) {
		*salvaged = 1;
		void *x;
		ok(pma_alloc(pool, "new", 4096, 0, 0, &x) == -EROFS, "a salvaged pool refuses "
				"allocation (-EROFS)");
		if (pmck_store_open(pool, name, &s) == 0) {
			if (pmck_store_recover(s, &rec) == 0)
				step = (long long)rec.step;
			pmck_store_close(&s);
		}
		if (step < 0)
			diag("store %s: %s", name, pmck_errormsg());
		pma_pool_close(&pool);
	}
	pma_region_close(&r);
	return step;
}

static int
check(const char *path, struct seen *seen)
{
	struct pma_region *r;
	if (pma_region_open(path, 0, PMA_REGION_RDONLY | PMA_REGION_NO_PREFAULT, &r))
		return -9999;
	int ret = pma_pool_check(r, on_problem, seen);
	pma_region_close(&r);
	return ret;
}

static int
run(const char *cmd)
{
	int rc = system(cmd);
	return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/*
 * Does pmckpt check's JSON report in file say consistent / salvaged as given,
 * with `problems` entries?  The report is printed when it does not.
 */
static int
json_report_is(const char *file, int consistent, int salvaged, size_t problems)
{
	json_object *d = json_object_from_file(file), *c, *s, *p;
	int yes = d && json_object_object_get_ex(d, "consistent", &c) &&
		json_object_object_get_ex(d, "salvaged", &s) &&
		json_object_object_get_ex(d, "problems", &p) &&
		json_object_get_boolean(c) == consistent && json_object_get_boolean(s) == salvaged &&
		json_object_is_type(p, json_type_array) && json_object_array_length(p) == problems;

	if (!yes)
		diag("%s: %s", file, d ? json_object_to_json_string(d) : "not JSON");
	json_object_put(d);
	return yes;
}

int
main(void)
{
	const char *path = scratch_path("check");
	const char *B = getenv("BUILD") ? getenv("BUILD") : "build";
	char cmd[2048], out[600];
	struct seen seen = {0};
	int salvaged;

	if (make_pool(path) < 0)
		return 1;
	is_int(check(path, &seen), 0, "a sound pool is consistent");
	is_int(seen.n, 0, "and no problem is reported");

	/* The header's checksum fails (a flipped byte of its creation time). */
	char x = 0x55;
	poke(path, 72, &x, 1);
	uint64_t h0 = file_hash(path);
	memset(&seen, 0, sizeof(seen));
	is_int(check(path, &seen), PMA_E_CORRUPT, "a damaged header: PMA_E_CORRUPT");
	ok(seen.n == 1 && strstr(seen.last, "checksum"), "one problem, named: %s", seen.last);
	ok(salvage_step(path, "a", &seen, &salvaged) == 3 && salvaged,
			"salvaged: store a recovers step 3");
	ok(salvage_step(path, "z", &seen, &salvaged) == 7, "and store z step 7");
	ok(file_hash(path) == h0, "check and salvage wrote nothing");

	/* The whole header page wiped: the default geometry finds the table. */
	make_pool(path);
	char zero[4096] = {0};
	poke(path, 0, zero, sizeof(zero));
	memset(&seen, 0, sizeof(seen));
	is_int(check(path, &seen), PMA_E_NOT_POOL, "a wiped header: PMA_E_NOT_POOL");
	ok(seen.n == 2 && strstr(seen.last, "default geometry"), "and the table is read with the "
			"default geometry: %s", seen.last);
	ok(salvage_step(path, "z", &seen, &salvaged) == 7, "salvaged: store z recovers step 7");

	/* One table entry damaged (a.data0's size): store a is lost, z survives. */
	off_t entry = make_pool(path);
	ok(entry > 0, "found a.data0's table entry");
	uint64_t huge = 1ull << 60;
	poke(path, entry + 16, &huge, sizeof(huge));
	memset(&seen, 0, sizeof(seen));
	is_int(check(path, &seen), PMA_E_CORRUPT, "a damaged table entry: PMA_E_CORRUPT");
	ok(seen.n == 1 && strstr(seen.last, "state word"), "naming the entry: %s", seen.last);
	ok(salvage_step(path, "a", &seen, &salvaged) < 0 && salvaged, "salvaged: store a, whose "
			"data allocation is gone, does not open");
	ok(salvage_step(path, "z", &seen, &salvaged) == 7, "store z recovers step 7");

	/* Not a pool at all: nothing to salvage. */
	make_pool(path);
	char junk[4096];
	memset(junk, 0x7f, sizeof(junk));
	for (off_t off = 0; off < 2 * MiB; off += sizeof(junk))
		poke(path, off, junk, sizeof(junk));
	memset(&seen, 0, sizeof(seen));
	is_int(check(path, &seen), PMA_E_NOT_POOL, "other data: PMA_E_NOT_POOL");
	ok(salvage_step(path, "z", &seen, &salvaged) < 0 && !salvaged, "and nothing is salvaged");

	/* The CLI: check exits 0 / 1, repair saves what verifies. */
	make_pool(path);
	snprintf(cmd, sizeof(cmd), "%s/pmckpt check --pool %s >/dev/null 2>&1", B, path);
	is_int(run(cmd), 0, "pmckpt check of a sound pool: exit 0");
	snprintf(out, sizeof(out), "%s.good", path);
	snprintf(cmd, sizeof(cmd), "%s/pmckpt export -q --pool %s --store z --out %s >/dev/null", B,
			path, out);
	is_int(run(cmd), 0, "export store z of the sound pool");
	poke(path, entry + 16, &huge, sizeof(huge));
	poke(path, 72, &x, 1);
	snprintf(cmd, sizeof(cmd), "%s/pmckpt check --pool %s --json >%s.json 2>/dev/null", B, path,
			path);
	is_int(run(cmd), 1, "pmckpt check of the damaged pool: exit 1");
	char report[4200];
	snprintf(report, sizeof(report), "%s.json", path);
	ok(json_report_is(report, 0, 1, 2), "its JSON: not consistent, salvaged, two problems");
	snprintf(cmd, sizeof(cmd), "rm -rf %s.rep && %s/pmckpt repair -q --pool %s --out %s.rep "
			">/dev/null 2>&1", path, B, path, path);
	is_int(run(cmd), 1, "pmckpt repair: exit 1 (store a had nothing that verifies)");
	snprintf(cmd, sizeof(cmd), "cmp -s %s.rep/z.safetensors %s && test ! -e %s.rep/a.safetensors",
			path, out, path);
	is_int(run(cmd), 0, "store z saved, bit-exact to its export from the sound pool");
	snprintf(cmd, sizeof(cmd), "rm -rf %s.rep %s.json %s", path, path, out);
	run(cmd);
	unlink(path);
	return done_testing();
}
