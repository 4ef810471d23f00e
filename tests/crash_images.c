/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * crash_images.c -- power failure, not only kill -9: the images a crash on
 * persistent memory could leave, replayed from a persistence trace.
 *
 * Built only in the trace build (make TRACE=1, build/trace), where every
 * persistence primitive records an event (common/pmtrace.h).  A child runs
 * a short workload -- pool create, alloc and free, store create, begin /
 * write / commit, an abort, pmck_store_discard_after, the pipeline's layer
 * writes with the commit on the last layer, global steps -- with
 * PMCK_TRACE set, and marks before and after each call what a recovery
 * may find (struct oracle).  The parent replays the trace into crash
 * images (crash_replay.h) and opens each through the normal path:
 * pma_region_open, pma_pool_open, pma_pool_check, pmck_store_open,
 * pmck_store_recover.  An image is consistent when the recovered
 * checkpoint verifies, holds exactly the bytes of its step, and is the
 * newest whose commit had returned or the one being committed, and no
 * sealed slot fails its checksums (see check_image).
 *
 * Fault builds (CRASH_FAULT, see the Makefile) run the same and pass only
 * if the checker finds inconsistent images.
 *
 *   crash_images [--images N] [--min N] [--seed S] [--keep] [--trace FILE] [--dump]
 * --dump lists the trace's events (as diagnostics) before replaying it.
 */
#include <limits.h>
#include <sys/wait.h>
#include <time.h>

#include "crash_replay.h"

#ifndef PMCK_TRACE
#error "crash_images needs the trace build: make TRACE=1 trace-tests"
#endif

#define POOL_SIZE ((size_t)4 << 20)
#define NONE INT64_MIN

/* ------------------------------------------------------------ the oracle */

#define ORACLE_MAGIC 0x4f52434cu
struct oracle {
	uint32_t magic;
	int32_t pool_absent_ok;  /* before pma_pool_create returned */
	int32_t store_absent_ok; /* before pmck_store_create returned */
	int32_t scratch;         /* allocation SCRATCH: 0 absent, 1 present, 2 either */
	int64_t accept[2];       /* recoverable steps (-1: no checkpoint; NONE: unused) */
	int64_t global_from;     /* steps from here record world size 1, rank 0 */
	char what[48];           /* what the workload is doing */
};

static struct pmck_tensor_desc descs[] = {
	{.name = "emb", .dtype = PMCK_DTYPE_F32, .ndim = 2, .shape = {40, 33}, .layer = 0},
	{.name = "l1.w", .dtype = PMCK_DTYPE_BF16, .ndim = 2, .shape = {16, 16}, .layer = 1},
	{.name = "l1.b", .dtype = PMCK_DTYPE_F32, .ndim = 1, .shape = {3}, .layer = 1},
	{.name = "step", .dtype = PMCK_DTYPE_I64, .ndim = 0, .layer = 2},
};
#define NT (sizeof(descs) / sizeof(descs[0]))
/* Longer than the 32 name bytes in the first line of its table entry: the entry spans two lines. */
#define SCRATCH "scratch-allocation-whose-name-spans-two-cache-lines"
#define NLAYERS 3

static const char *img_path;  /* the image file the replay writes and check_image opens */

/* ----------------------------------------------------------- the workload */

static void
mark(struct oracle *o, const char *fmt, ...)
{
	va_list ap;

	o->magic = ORACLE_MAGIC;
	va_start(ap, fmt);
	vsnprintf(o->what, sizeof(o->what), fmt, ap);
	va_end(ap);
	pmtrace_mark(o, sizeof(*o));
}

static int
fail(const char *what)
{
	fprintf(stderr, "crash_images workload: %s: %s\n", what, pma_errormsg());
	return 1;
}

struct work {
	struct oracle o;
	uint8_t *src[NT];
	uint64_t bytes[NT];
};

static void
fill_step(struct work *w, uint64_t step)
{
	for (size_t i = 0; i < NT; i++)
		fill_tensor(step, i, w->src[i], w->bytes[i]);
}

static void
on_commit(void *arg, uint64_t step, int result)
{
	struct work *w = arg;

	if (result == 0) { /* the pipeline's commit has returned, on its writer thread */
		w->o.accept[0] = (int64_t)step;
		w->o.accept[1] = NONE;
		mark(&w->o, "pipeline step %" PRIu64 " committed", step);
	}
}

static int
coll_allreduce(void *ctx, uint64_t *v, enum pmck_reduce_op op)
{
	(void)ctx, (void)v, (void)op;
	return 0; /* one rank: the value is the result */
}

static int
coll_barrier(void *ctx)
{
	(void)ctx;
	return 0;
}

/* One checkpoint of `step` by begin / write / commit; how = 0 write_all, 1 each, 2 in place. */
static int
plain_step(struct work *w, struct pmck_store *s, uint64_t step, int how, struct pmck_global *g)
{
	struct pmck_ckpt *c;

	fill_step(w, step);
	w->o.accept[1] = (int64_t)step;
	mark(&w->o, "%s step %" PRIu64, g ? "global" : "commit", step);
	if (g ? pmck_global_begin(g, step, &c) : pmck_store_begin(s, step, &c))
		return fail("begin");
	for (size_t i = 0; i < NT; i++) {
		int ret;
		if (how == 0 && i == 0)
			ret = pmck_ckpt_write_all(c, (const void *const *)w->src, 1);
		else if (how == 0)
			ret = 0;
		else if (how == 2 && i != 0) { /* stored in place (as a GPU would), then flushed */
			memcpy(pmck_ckpt_tensor_ptr(c, i), w->src[i], w->bytes[i]);
			ret = pmck_ckpt_mark_written(c, i);
		} else
			ret = pmck_ckpt_write(c, i, w->src[i]);
		if (ret)
			return fail("write");
	}
	if (g ? pmck_global_commit(g, c) : pmck_ckpt_commit(c))
		return fail("commit");
	w->o.accept[0] = (int64_t)step;
	w->o.accept[1] = NONE;
	mark(&w->o, "step %" PRIu64 " committed", step);
	return 0;
}

static int
workload(const char *path)
{
	struct work w = {.o = {.pool_absent_ok = 1, .store_absent_ok = 1, .scratch = 0,
		.accept = {-1, NONE}, .global_from = INT64_MAX}};
	struct pma_region *r;
	struct pma_pool *pool;
	struct pmck_store *s;
	struct pmck_ckpt *c;
	void *a;

	unlink(path);
	if (pma_region_open(path, POOL_SIZE, PMA_REGION_CREATE, &r))
		return fail("region");
	mark(&w.o, "pool create");
	if (pma_pool_create(r, 16, &pool))
		return fail("pool create");
	w.o.pool_absent_ok = 0;
	w.o.scratch = 2;
	mark(&w.o, "alloc");
	if (pma_alloc(pool, SCRATCH, 4096, 0, PMA_ALLOC_ZERO, &a))
		return fail("alloc");
	w.o.scratch = 1;
	mark(&w.o, "store create");
	if (pmck_store_create(pool, "m", descs, NT, &s))
		return fail("store create");
	w.o.store_absent_ok = 0;
	w.o.scratch = 2;
	mark(&w.o, "free");
	if (pma_free(pool, SCRATCH))
		return fail("free");
	w.o.scratch = 0;
	for (size_t i = 0; i < NT; i++) {
		struct pmck_tensor_info ti;
		pmck_store_tensor(s, i, &ti);
		w.bytes[i] = ti.nbytes;
		w.src[i] = malloc(ti.nbytes);
	}

	/* Steps 1-3 by begin / write / commit, three ways of writing. */
	for (uint64_t step = 1; step <= 3; step++)
		if (plain_step(&w, s, step, (int)(step - 1), NULL))
			return 1;

	/* An aborted step 4: its slot (step 2's) loses its seal, step 3 stays. */
	w.o.accept[0] = 3;
	mark(&w.o, "aborted step 4");
	if (pmck_store_begin(s, 4, &c) || pmck_ckpt_write(c, 0, w.src[0]))
		return fail("begin 4");
	pmck_ckpt_abort(c);

	/* Step 4 again, then discard it: steps 3 or 4 during, 3 after. */
	if (plain_step(&w, s, 4, 1, NULL))
		return 1;
	w.o.accept[0] = 4;
	w.o.accept[1] = 3;
	mark(&w.o, "discard after 3");
	if (pmck_store_discard_after(s, 3))
		return fail("discard");
	w.o.accept[0] = 3;
	w.o.accept[1] = NONE;
	mark(&w.o, "discarded");

	/* Steps 5-6 through the pipeline: layer by layer, committed on the writer thread. */
	struct pmck_pipeline *p;
	struct pmck_pipeline_opts po = {.threads = 1, .on_commit = on_commit, .on_commit_arg = &w};
	if (pmck_pipeline_new(s, &po, &p))
		return fail("pipeline");
	for (uint64_t step = 5; step <= 6; step++) {
		for (uint32_t l = 0; l < NLAYERS; l++)
			if (pmck_pipeline_wait_layer(p, l))
				return fail("wait_layer");
		fill_step(&w, step);
		w.o.accept[1] = (int64_t)step;
		mark(&w.o, "pipeline step %" PRIu64, step);
		if (pmck_pipeline_begin(p, step))
			return fail("pipeline begin");
		for (uint32_t l = 0; l < NLAYERS; l++)
			if (pmck_pipeline_put_layer(p, l, (const void *const *)w.src))
				return fail("put_layer");
		if (pmck_pipeline_wait(p))
			return fail("pipeline wait");
	}
	pmck_pipeline_delete(&p);

	/* Steps 7-8 as global steps of a one-rank job: the slot records world size and rank. */
	struct pmck_global *g;
	struct pmck_collectives coll = {.rank = 0, .size = 1, .allreduce_u64 = coll_allreduce,
		.barrier = coll_barrier};
	if (pmck_global_new(s, &coll, &g))
		return fail("global");
	w.o.global_from = 7;
	for (uint64_t step = 7; step <= 8; step++)
		if (plain_step(&w, s, step, step == 7 ? 0 : 2, g))
			return 1;
	pmck_global_delete(&g);
	mark(&w.o, "closed");
	pmck_store_close(&s);
	pma_pool_close(&pool);
	pma_region_close(&r);
	for (size_t i = 0; i < NT; i++)
		free(w.src[i]);
	return 0;
}

static int
expect_step(const struct oracle *o, int64_t step)
{
	return o->accept[0] == step || o->accept[1] == step;
}

/* Opens the image as a restarted job would and says what is wrong with it ("" if nothing). */
static void
check_image(const struct oracle *o, char *why, size_t len)
{
	struct pma_region *r = NULL;
	struct pma_pool *p = NULL;
	struct pmck_store *s = NULL;
	struct pmck_recovery rec;
	int ret;

	why[0] = 0;
	if ((ret = pma_region_open(img_path, 0, PMA_REGION_NO_PREFAULT, &r))) {
		snprintf(why, len, "region open: %s", pma_errormsg());
		return;
	}
	ret = pma_pool_open(r, &p);
	if (ret == PMA_E_NOT_POOL && o->pool_absent_ok)
		goto out;
	if (ret) {
		snprintf(why, len, "pool open: %s", pma_errormsg());
		goto out;
	}
	if ((ret = pma_pool_check(r, NULL, NULL))) {
		snprintf(why, len, "pool check: %d", ret);
		goto out;
	}
	ret = pma_lookup(p, SCRATCH, NULL, NULL);
	if ((ret == 0 && o->scratch == 0) || (ret == -ENOENT && o->scratch == 1) ||
	    (ret && ret != -ENOENT)) {
		snprintf(why, len, "allocation 'scratch' %s", ret ? "missing" : "present");
		goto out;
	}
	ret = pmck_store_open(p, "m", &s);
	if (ret == -ENOENT && o->store_absent_ok)
		goto out;
	if (ret) {
		snprintf(why, len, "store open: %s", pma_errormsg());
		goto out;
	}
	ret = pmck_store_recover(s, &rec);
	size_t nrej;
	const struct pmck_rejection *rej = pmck_store_rejections(s, &nrej);
	if (nrej) {
		snprintf(why, len, "torn checkpoint: step %" PRIu64 " sealed but %s", rej[0].step,
				rej[0].reason);
		goto out;
	}
	if (ret == PMCK_E_NO_CHECKPOINT) {
		if (!expect_step(o, -1))
			snprintf(why, len, "no checkpoint recovered");
		goto out;
	}
	if (ret) {
		snprintf(why, len, "recover: %s", pma_errormsg());
		goto out;
	}
	if (!expect_step(o, (int64_t)rec.step)) {
		snprintf(why, len, "recovered step %" PRIu64, rec.step);
		goto out;
	}
	uint8_t buf[8192];
	for (size_t i = 0; i < NT; i++) {
		struct pmck_tensor_info ti;
		pmck_store_tensor(s, i, &ti);
		fill_tensor(rec.step, i, buf, ti.nbytes);
		if (memcmp(pmck_store_tensor_data(s, i), buf, ti.nbytes)) {
			snprintf(why, len, "step %" PRIu64 ": tensor '%s' holds other bytes", rec.step,
					ti.name);
			goto out;
		}
	}
	unsigned rank = 9, world = 9;
	ret = pmck_store_slot_world(s, rec.slot, &rank, &world);
	if ((int64_t)rec.step >= o->global_from ? ret || rank != 0 || world != 1 : ret != -ENOENT) {
		snprintf(why, len, "step %" PRIu64 ": world size %s", rec.step,
				ret ? "not recorded" : "recorded");
		goto out;
	}
	/* The other slot, if sealed, must be whole too: a torn sealed slot is never allowed. */
	unsigned other = !rec.slot;
	int64_t ostep = pmck_store_slot_step(s, other);
	if (ostep < 0)
		goto out;
	if ((ret = pmck_store_recover_step(s, (uint64_t)ostep, NULL))) {
		snprintf(why, len, "torn checkpoint: slot %u sealed with step %" PRId64 ": %s", other,
				ostep, pma_errormsg());
		goto out;
	}
	for (size_t i = 0; i < NT; i++) {
		struct pmck_tensor_info ti;
		pmck_store_tensor(s, i, &ti);
		fill_tensor((uint64_t)ostep, i, buf, ti.nbytes);
		if (memcmp(pmck_store_tensor_data(s, i), buf, ti.nbytes)) {
			snprintf(why, len, "slot %u, step %" PRId64 ": tensor '%s' holds other bytes",
					other, ostep, ti.name);
			goto out;
		}
	}
out:
	pmck_store_close(&s);
	pma_pool_close(&p);
	pma_region_close(&r);
}

/* crash_check: the marker is the workload's oracle; why names what it was doing. */
static void
check_marker(const void *m, size_t len, char *why, size_t n)
{
	struct oracle o;
	char w[512];

	why[0] = 0;
	if (len != sizeof(o)) {
		snprintf(why, n, "a marker of %zu bytes is not an oracle", len);
		return;
	}
	memcpy(&o, m, sizeof(o));
	check_image(&o, w, sizeof(w));
	if (w[0])
		snprintf(why, n, "during '%s': %s", o.what, w);
}

/* --------------------------------------------------------------------- main */

int
main(int argc, char **argv)
{
#ifdef CRASH_FAULT
	const char *fault = CRASH_FAULT;
	uint64_t target = 3000, min_images = 1000;
#else
	const char *fault = NULL;
	uint64_t target = 14000, min_images = 10000;
#endif
	const char *trace_arg = NULL;
	int keep = 0, dump = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--images") && i + 1 < argc)
			target = strtoull(argv[++i], NULL, 0), min_images = target * 2 / 3;
		else if (!strcmp(argv[i], "--min") && i + 1 < argc)
			min_images = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
			rng = strtoull(argv[++i], NULL, 0) | 1;
		else if (!strcmp(argv[i], "--keep"))
			keep = 1;
		else if (!strcmp(argv[i], "--dump"))
			dump = 1;
		else if (!strcmp(argv[i], "--trace") && i + 1 < argc)
			trace_arg = argv[++i];
		else {
			fprintf(stderr, "usage: %s [--images N] [--min N] [--seed S] [--keep] "
					"[--trace FILE] [--dump]\n", argv[0]);
			return 2;
		}
	}
	st.target = target;
	unsetenv("PMCK_TRACE"); /* this process opens images: only the workload is traced */
	plan(5);

	char work_path[512], trace_path[512], ipath[512];
	snprintf(work_path, sizeof(work_path), "%s", scratch_path("crash-work"));
	snprintf(trace_path, sizeof(trace_path), "%s", trace_arg ? trace_arg : scratch_path("crash-trace"));
	snprintf(ipath, sizeof(ipath), "%s", scratch_path("crash-image"));
	img_path = ipath;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);

	if (!trace_arg) {
		fflush(stdout);
		pid_t pid = fork();
		if (pid == 0) {
			setenv("PMCK_TRACE", trace_path, 1);
			int ret = workload(work_path);
			unlink(work_path);
			exit(ret);
		}
		int status = 0;
		waitpid(pid, &status, 0);
		ok(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the workload ran in the trace build");
	} else {
		ok(1, "replaying %s", trace_arg);
	}
	crash_check = check_marker;
	int ret = load_trace(trace_path, &size);
	if (!ok(ret == 0 && size == POOL_SIZE, "its trace: %zu events over one region of %zu bytes",
			nev, size)) {
		if (!keep && !trace_arg)
			unlink(trace_path);
		return done_testing();
	}
	for (size_t i = 0; dump && i < nev; i++) {
		const struct event *e = &ev[i];
		struct oracle o;
		if (e->h.kind == PMTRACE_MARK && e->h.len == sizeof(o)) {
			memcpy(&o, e->data, sizeof(o));
			diag("%5zu mark '%s'", i, o.what);
		} else
			diag("%5zu %-15s %8" PRIu64 " +%-7" PRIu64 " tid %" PRIu64 " %.*s", i,
					kind_name(e->h.kind), e->h.off, e->h.len, e->h.tid,
					(int)e->h.site_len, e->site);
	}

	if ((ret = crash_map_image(img_path))) {
		diag("image file %s: %s", img_path, strerror(-ret));
		return 1;
	}

	replay(0);
	replay(1);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;

	char summary[256];
	snprintf(summary, sizeof(summary), "crash-images%s%s%s: %" PRIu64 " images, %" PRIu64
			" fence points, %" PRIu64 " inconsistent", fault ? " (fault build " : "",
			fault ? fault : "", fault ? ")" : "", st.images, st.fences, st.inconsistent);
	diag("%" PRIu64 " crash points, %" PRIu64 " duplicate images skipped, %" PRIu64
			" unflushed 8-byte words found at fences, %.1f s", st.points, st.dups,
			st.unflushed_words, secs);
	ok(st.fences > 0 && st.fences_seen == st.fences,
			"every fence point gave images (%" PRIu64 " of %" PRIu64 ")", st.fences_seen,
			st.fences);
	ok(st.images >= min_images, "%" PRIu64 " distinct images (at least %" PRIu64 ")",
			st.images, min_images);
	if (fault) {
		for (unsigned k = 0; k < nfault_sites; k++)
			diag("caught after: %s", fault_sites[k]);
		ok(st.inconsistent > 0, "the checker catches the fault build '%s': %" PRIu64
				" of %" PRIu64 " images inconsistent", fault, st.inconsistent, st.images);
	} else {
		ok(st.inconsistent == 0, "every image consistent (%" PRIu64 " inconsistent)",
				st.inconsistent);
	}
	printf("%s\n", summary);
	fprintf(stderr, "%s\n", summary);
	munmap(img, size);
	unlink(img_path);
	if (!keep && !trace_arg)
		unlink(trace_path);
	else if (keep)
		diag("trace kept: %s", trace_path);
	return done_testing();
}
