/*
 * pmctl_store.c -- a checkpoint store on a region found the way an
 * integrator finds it (pma_ns_region_open: by namespace name, region or
 * device): commit, recover bit-exact after a power-off, survive kill -9.
 *
 *   pmctl_store                               self-test on a /dev/shm file (make check)
 *   pmctl_store --dev SEL [--numa N] --commit STEP   commits STEP-1, then STEP
 *   pmctl_store --dev SEL [--numa N] --recover STEP  newest checkpoint must be STEP, bit-exact
 *   pmctl_store --dev SEL [--numa N] --crash N [--seed S]   N kill -9 trials
 *   pmctl_store --dev SEL --hold              maps the region, prints "holding", waits
 *
 * The --dev modes are what the NVDIMM VM test (tests/vm/guest.sh) runs on
 * /dev/daxX.Y; without arguments the same code runs on a tmpfs file.
 * Tensor contents are a function of (step, tensor, byte), so a recovered
 * checkpoint is checked bit for bit.  Output is TAP.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <sys/wait.h>
#include <time.h>

#include "pmckpt.h"
#include "pmalloc_ns.h"
#include "tap.h"
#include "ckpt_util.h"

#define MiB ((size_t)1 << 20)
#define STORE "pmctl-test"

static const struct pmck_tensor_desc layout[] = {
	{.name = "emb", .dtype = PMCK_DTYPE_F32, .ndim = 2, .shape = {1024, 1024}, .layer = 0},
	{.name = "l1.w", .dtype = PMCK_DTYPE_BF16, .ndim = 2, .shape = {512, 1000}, .layer = 1},
	{.name = "l1.b", .dtype = PMCK_DTYPE_F32, .ndim = 1, .shape = {1000}, .layer = 1},
	{.name = "head", .dtype = PMCK_DTYPE_U8, .ndim = 1, .shape = {100001}, .layer = 2},
};
#define NT (sizeof(layout) / sizeof(layout[0]))

/* Where the region comes from: a selector for pma_ns_region_open, or a file. */
static const char *selector;
static int numa = -1;
static const char *file_path; /* self-test */

struct handle {
	struct pma_region *r;
	struct pma_pool *pool;
	struct pmck_store *s;
	uint8_t *buf[NT];
	uint64_t bytes[NT];
};

static void
close_handle(struct handle *h)
{
	pmck_store_close(&h->s);
	pma_pool_close(&h->pool);
	pma_region_close(&h->r);
	for (size_t i = 0; i < NT; i++) {
		free(h->buf[i]);
		h->buf[i] = NULL;
	}
}

/* Opens region, pool (created if there is none) and store; 0 or an error (message in pma_errormsg). */
static int
open_handle(struct handle *h)
{
	int rc;

	memset(h, 0, sizeof(*h));
	if (file_path)
		rc = pma_region_open(file_path, 64 * MiB, PMA_REGION_CREATE, &h->r);
	else
		rc = pma_ns_region_open(selector, numa, 0, &h->r);
	if (rc)
		return rc;
	rc = pma_pool_open(h->r, &h->pool);
	if (rc == PMA_E_NOT_POOL)
		rc = pma_pool_create(h->r, 0, &h->pool);
	if (!rc)
		rc = pmck_store_open_or_create(h->pool, STORE, layout, NT, &h->s);
	for (size_t i = 0; !rc && i < NT; i++) {
		struct pmck_tensor_info ti;
		rc = pmck_store_tensor(h->s, i, &ti);
		h->bytes[i] = ti.nbytes;
		if (!rc && !(h->buf[i] = malloc(ti.nbytes)))
			rc = -ENOMEM;
	}
	if (rc)
		close_handle(h);
	return rc;
}

static int
commit(struct handle *h, uint64_t step)
{
	struct pmck_ckpt *c;
	int rc = pmck_store_begin(h->s, step, &c);

	for (size_t i = 0; !rc && i < NT; i++) {
		fill_tensor(step, i, h->buf[i], h->bytes[i]);
		rc = pmck_ckpt_write(c, i, h->buf[i]);
	}
	if (!rc)
		rc = pmck_ckpt_commit(c);
	else if (c)
		pmck_ckpt_abort(c);
	return rc;
}

/* 1 when the recovered checkpoint holds exactly step's contents. */
static int
bit_exact(struct handle *h, uint64_t step)
{
	for (size_t i = 0; i < NT; i++) {
		const uint8_t *got = pmck_store_tensor_data(h->s, i);
		fill_tensor(step, i, h->buf[i], h->bytes[i]);
		if (!got || memcmp(got, h->buf[i], h->bytes[i]) != 0) {
			diag("tensor %s differs from step %" PRIu64, layout[i].name, step);
			return 0;
		}
	}
	return 1;
}

static const char *
where(void)
{
	return file_path ? file_path : selector;
}

static void
do_commit(uint64_t step)
{
	struct handle h;
	int rc = open_handle(&h);

	if (!ok(rc == 0, "open a store on %s", where())) {
		diag("%d: %s", rc, pma_errormsg());
		return;
	}
	diag("region %s: %zu bytes, %s granularity, NUMA node %d", pma_region_path(h.r),
			pma_region_size(h.r), pma_granularity_name(pma_region_granularity(h.r)),
			pma_region_numa_node(h.r));
	ok(pma_region_kind(h.r) == (file_path ? PMA_REGION_FILE : PMA_REGION_DEVDAX),
			"the region is a %s", file_path ? "file" : "devdax device");
	rc = step > 1 ? commit(&h, step - 1) : 0;
	if (!rc)
		rc = commit(&h, step);
	if (!ok(rc == 0, "commit checkpoints %" PRIu64 " and %" PRIu64, step - 1, step))
		diag("%d: %s", rc, pmck_errormsg());
	close_handle(&h);
}

static void
do_recover(uint64_t step)
{
	struct handle h;
	struct pmck_recovery rec;
	int rc = open_handle(&h);

	if (!ok(rc == 0, "reopen the store on %s", where())) {
		diag("%d: %s", rc, pma_errormsg());
		return;
	}
	rc = pmck_store_recover(h.s, &rec);
	if (!ok(rc == 0 && rec.step == step, "recover checkpoint %" PRIu64, step))
		diag("rc %d, step %" PRIu64 ": %s", rc, rc ? 0 : rec.step, pmck_errormsg());
	else
		ok(bit_exact(&h, step), "checkpoint %" PRIu64 " is bit-exact", step);
	close_handle(&h);
}

/* The child of a crash trial: commits increasing steps forever, reporting each on fd. */
static void __attribute__((noreturn))
crash_child(int fd)
{
	struct handle h;
	struct pmck_recovery rec;
	uint64_t step = 1;

	if (open_handle(&h))
		_exit(3);
	if (pmck_store_recover(h.s, &rec) == 0)
		step = rec.step + 1;
	for (;; step++) {
		if (commit(&h, step))
			_exit(4);
		if (write(fd, &step, sizeof(step)) != (ssize_t)sizeof(step))
			_exit(5);
	}
}

static void
do_crash(unsigned trials, uint64_t seed)
{
	uint64_t floor = 0, commits = 0;

	for (unsigned t = 0; t < trials; t++) {
		int fds[2];
		if (pipe(fds)) {
			ok(0, "pipe: %s", strerror(errno));
			return;
		}
		fflush(stdout);
		pid_t pid = fork();
		if (pid == 0) {
			close(fds[0]);
			crash_child(fds[1]);
		}
		close(fds[1]);
		/*
		 * Kill after 100..600 ms: under emulation (TCG) the child needs about
		 * 100 ms to start and recover, and a commit takes tens of ms.
		 */
		seed = mix64(seed + t);
		struct timespec ts = {0, (long)(100 + seed % 500) * 1000000L};
		nanosleep(&ts, NULL);
		kill(pid, SIGKILL);
		int status;
		waitpid(pid, &status, 0);
		uint64_t step, last = 0;
		while (read(fds[0], &step, sizeof(step)) == (ssize_t)sizeof(step))
			last = step, commits++;
		close(fds[0]);
		if (WIFEXITED(status)) {
			ok(0, "trial %u: child exited %d before the kill", t, WEXITSTATUS(status));
			continue;
		}
		if (last > floor)
			floor = last;
		struct handle h;
		struct pmck_recovery rec;
		int rc = open_handle(&h);
		if (rc) {
			ok(0, "trial %u: reopen: %s", t, pma_errormsg());
			continue;
		}
		rc = pmck_store_recover(h.s, &rec);
		if (rc == PMCK_E_NO_CHECKPOINT && floor == 0) {
			ok(1, "trial %u: killed before the first commit, nothing to recover", t);
		} else if (rc) {
			ok(0, "trial %u: recover: %d %s", t, rc, pmck_errormsg());
		} else {
			int exact = bit_exact(&h, rec.step);
			ok(rec.step >= floor && exact, "trial %u: recovered step %" PRIu64
					" (last commit seen %" PRIu64 "), bit-exact", t, rec.step, last);
			if (rec.step > floor)
				floor = rec.step;
		}
		close_handle(&h);
	}
	diag("%" PRIu64 " commits seen over %u trials", commits, trials);
}

static void
do_hold(void)
{
	struct pma_region *r = NULL;
	int rc = file_path ? pma_region_open(file_path, 64 * MiB, PMA_REGION_CREATE, &r) :
			pma_ns_region_open(selector, numa, 0, &r);

	if (rc) {
		printf("cannot open %s: %s\n", where(), pma_errormsg());
		exit(1);
	}
	printf("holding %s\n", pma_region_path(r));
	fflush(stdout);
	for (;;)
		pause();
}

int
main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"dev", required_argument, NULL, 'd'},
		{"numa", required_argument, NULL, 'm'},
		{"commit", required_argument, NULL, 'c'},
		{"recover", required_argument, NULL, 'r'},
		{"crash", required_argument, NULL, 'k'},
		{"seed", required_argument, NULL, 's'},
		{"hold", no_argument, NULL, 'H'},
		{NULL, 0, NULL, 0},
	};
	uint64_t commit_step = 0, recover_step = 0, seed = (uint64_t)time(NULL);
	unsigned crash = 0;
	int hold = 0, c;

	while ((c = getopt_long(argc, argv, "d:m:c:r:k:s:H", opts, NULL)) != -1) {
		switch (c) {
		case 'd': selector = optarg; break;
		case 'm': numa = atoi(optarg); break;
		case 'c': commit_step = strtoull(optarg, NULL, 10); break;
		case 'r': recover_step = strtoull(optarg, NULL, 10); break;
		case 'k': crash = (unsigned)atoi(optarg); break;
		case 's': seed = strtoull(optarg, NULL, 10); break;
		case 'H': hold = 1; break;
		default:
			fprintf(stderr, "usage: pmctl_store [--dev SEL [--numa N] (--commit STEP | "
					"--recover STEP | --crash N [--seed S] | --hold)]\n");
			return 2;
		}
	}
	if (!selector) {
		/* Self-test: the same steps on a tmpfs file, "power-off" being a close. */
		file_path = scratch_path("pmctl-store");
		unlink(file_path);
		do_commit(8);
		do_recover(8);
		do_crash(6, seed);
		unlink(file_path);
		return done_testing();
	}
	if (hold)
		do_hold();
	diag("seed %" PRIu64, seed);
	if (commit_step)
		do_commit(commit_step);
	if (recover_step)
		do_recover(recover_step);
	if (crash)
		do_crash(crash, seed);
	return done_testing();
}
