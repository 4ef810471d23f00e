/*
 * crash_kill.c -- crash consistency under SIGKILL at random moments.
 *
 * Each trial forks a child that opens (or creates) a pool and store in a
 * /dev/shm file, recovers, and then writes checkpoints of strictly
 * increasing steps forever, reporting on a pipe: 'R' the step it
 * recovered, 'B' a step about to begin, 'P' a step about to commit, 'C' a
 * step whose commit returned.  The parent kills it with SIGKILL after a
 * random delay (or right after a chosen message), or, since a commit lasts
 * only about a microsecond, the child kills itself from a watchdog thread
 * timed to land around a commit's seal.  The parent then reopens the file
 * and recovers.  Every trial must recover a checkpoint no older than the last
 * reported commit (and no older than the previous trial's), one that was
 * begun, and bit-exact: tensor contents are a function of (step, tensor,
 * byte).  Trials continue on the same file; now and then one starts fresh.
 *
 *   crash_kill [--trials N] [--seed S] [--soak]
 *
 * --soak prints a final line "soak: N passed, L lost" and exits non-zero
 * when L > 0 (L: trials whose recovered checkpoint was older than the last
 * reported commit, missing, or not bit-exact).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>

#include "pmckpt.h"
#include "tap.h"
#include "ckpt_util.h"

#define MiB ((size_t)1 << 20)
#define POOL_SIZE (16 * MiB)
#define NONE UINT64_MAX

static const struct pmck_tensor_desc layout[] = {
	/* 3.3 MiB: four hash chunks, the last one short. */
	{.name = "emb", .dtype = PMCK_DTYPE_F32, .ndim = 2, .shape = {1024, 850}, .layer = 0},
	{.name = "l1.w", .dtype = PMCK_DTYPE_BF16, .ndim = 2, .shape = {512, 300}, .layer = 1},
	{.name = "l1.b", .dtype = PMCK_DTYPE_F32, .ndim = 1, .shape = {3}, .layer = 1},
	{.name = "l1.g", .dtype = PMCK_DTYPE_F16, .ndim = 1, .shape = {5}, .layer = 1},
	{.name = "step", .dtype = PMCK_DTYPE_I64, .ndim = 0, .layer = 2},
	{.name = "head", .dtype = PMCK_DTYPE_U8, .ndim = 1, .shape = {100001}, .layer = 3},
	{.name = "flag", .dtype = PMCK_DTYPE_BOOL, .ndim = 1, .shape = {3}, .layer = 3},
	{.name = "l2.w", .dtype = PMCK_DTYPE_F32, .ndim = 2, .shape = {512, 513}, .layer = 2},
};
#define NT (sizeof(layout) / sizeof(layout[0]))

static uint64_t tbytes[NT];

static inline void
cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static uint64_t
rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* ------------------------------------------------------------------ child */

struct msg {
	/* 'R' recovered (step; NONE: nothing), 'B' begin, 'P' commit next, 'C' committed, 'E' error */
	uint8_t type;
	uint8_t pad[3];
	int32_t code;
	uint64_t step;
};

static int child_fd;

static void
report(uint8_t type, uint64_t step, int code)
{
	struct msg m = {.type = type, .code = code, .step = step};
	if (write(child_fd, &m, sizeof(m)) != (ssize_t)sizeof(m))
		_exit(4);
}

static void
fail(const char *what, int code)
{
	fprintf(stderr, "crash_kill child: %s: %d: %s\n", what, code, pma_errormsg());
	report('E', 0, code);
	_exit(3);
}

struct piece {
	size_t t;
	uint64_t off, len;
};

/* Writes every tensor of the in-flight checkpoint from src, in one of several ways. */
static void
write_tensors(struct pmck_ckpt *c, uint8_t **src, uint64_t *rs, int mode)
{
	int ret = 0;
	size_t order[NT];

	for (size_t i = 0; i < NT; i++)
		order[i] = i;
	for (size_t i = NT - 1; i > 0; i--) {
		size_t j = rnd(rs) % (i + 1), t = order[i];
		order[i] = order[j];
		order[j] = t;
	}
	switch (mode) {
	case 0: /* pmck_ckpt_write, tensors in random order */
		for (size_t k = 0; k < NT && !ret; k++)
			ret = pmck_ckpt_write(c, order[k], src[order[k]]);
		break;
	case 1: /* write_range in pieces of 1..2 chunks, pieces shuffled */
	case 3: { /* mixed: large tensors by ranges, small ones whole */
		struct piece piece[64];
		size_t np = 0;
		for (size_t i = 0; i < NT; i++) {
			if (mode == 3 && tbytes[i] <= PMCK_HASH_CHUNK) {
				piece[np++] = (struct piece){i, 0, tbytes[i]};
				continue;
			}
			uint64_t off = 0;
			do {
				uint64_t len = (1 + rnd(rs) % 2) * PMCK_HASH_CHUNK;
				if (len > tbytes[i] - off)
					len = tbytes[i] - off;
				piece[np++] = (struct piece){i, off, len};
				off += len;
			} while (off < tbytes[i]);
		}
		for (size_t i = np - 1; i > 0; i--) {
			size_t j = rnd(rs) % (i + 1);
			struct piece t = piece[i];
			piece[i] = piece[j];
			piece[j] = t;
		}
		for (size_t k = 0; k < np && !ret; k++) {
			if (mode == 3 && piece[k].off == 0 && piece[k].len == tbytes[piece[k].t])
				ret = pmck_ckpt_write(c, piece[k].t, src[piece[k].t]);
			else
				ret = pmck_ckpt_write_range(c, piece[k].t, piece[k].off,
						src[piece[k].t] + piece[k].off, piece[k].len);
		}
		break;
	}
	default: /* write_all with 2 threads */
		ret = pmck_ckpt_write_all(c, (const void *const *)src, 2);
		break;
	}
	if (ret)
		fail("write", ret);
}

/*
 * Self-kill around commit: a commit takes about a microsecond on tmpfs,
 * far less than the parent's wake-up latency.  So in some trials a
 * watchdog thread in the child sends SIGKILL to its own process as soon
 * as commit number `selfkill_k` is about to start, and the main thread
 * waits selfkill_ns before calling that commit: the signal's latency then
 * decides where it lands (the parent tunes selfkill_ns to land around the
 * seal).
 */
static int selfkill_k;            /* 0: off */
static uint64_t selfkill_ns;
static _Atomic int commits_started;

static uint64_t
now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void *
selfkill_thread(void *arg)
{
	(void)arg;
	while (atomic_load(&commits_started) < selfkill_k)
		cpu_relax();
	kill(getpid(), SIGKILL);
	return NULL;
}

static void
child_main(const char *path, uint64_t seed)
{
	struct pma_region *r;
	struct pma_pool *p;
	struct pmck_store *s;
	struct pmck_ckpt *c;
	struct pmck_recovery rec;
	uint64_t rs = seed | 1;
	int ret;

	if ((ret = pma_region_open(path, POOL_SIZE, PMA_REGION_CREATE, &r)))
		fail("pma_region_open", ret);
	ret = pma_pool_open(r, &p);
	if (ret == PMA_E_NOT_POOL)
		ret = pma_pool_create(r, 0, &p);
	if (ret)
		fail("pma_pool_open/create", ret);
	if ((ret = pmck_store_open_or_create(p, "ck", layout, NT, &s)))
		fail("pmck_store_open_or_create", ret);
	uint64_t step;
	ret = pmck_store_recover(s, &rec);
	if (ret == 0)
		step = rec.step;
	else if (ret == PMCK_E_NO_CHECKPOINT)
		step = 0;
	else
		fail("pmck_store_recover", ret);
	report('R', ret ? NONE : step, 0);

	uint8_t *src[NT];
	for (size_t i = 0; i < NT; i++)
		src[i] = malloc(tbytes[i] + 1);
	pthread_t killer;
	if (selfkill_k) {
		/* Main thread and watchdog on two different allowed CPUs, for a steady signal latency. */
		cpu_set_t allowed, set;
		int cpu[2], found = 0;
		if (pthread_create(&killer, NULL, selfkill_thread, NULL))
			fail("pthread_create", -EAGAIN);
		if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0)
			for (int i = 0; i < CPU_SETSIZE && found < 2; i++)
				if (CPU_ISSET(i, &allowed))
					cpu[found++] = i;
		if (found == 2) {
			CPU_ZERO(&set);
			CPU_SET(cpu[0], &set);
			pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
			CPU_ZERO(&set);
			CPU_SET(cpu[1], &set);
			pthread_setaffinity_np(killer, sizeof(set), &set);
		}
	}
	for (;;) {
		step += 1 + (rnd(&rs) % 4 == 0 ? rnd(&rs) % 3 : 0); /* strictly increasing, gaps too */
		for (size_t i = 0; i < NT; i++)
			fill_tensor(step, i, src[i], tbytes[i]);
		int mode = (int)(rnd(&rs) % 4);
		if (rnd(&rs) % 12 == 0) {
			/* An aborted attempt first: garbage in some tensors, then abort. */
			report('B', step, 0);
			if ((ret = pmck_store_begin(s, step, &c)))
				fail("pmck_store_begin (to abort)", ret);
			memset(src[0], 0x5a, tbytes[0] / 2);
			if ((ret = pmck_ckpt_write(c, 0, src[0])))
				fail("write (to abort)", ret);
			pmck_ckpt_abort(c);
			fill_tensor(step, 0, src[0], tbytes[0]);
		}
		report('B', step, 0);
		if ((ret = pmck_store_begin(s, step, &c)))
			fail("pmck_store_begin", ret);
		write_tensors(c, src, &rs, mode);
		int nth = atomic_fetch_add(&commits_started, 1) + 1;
		report('P', step, 0);
		if (nth == selfkill_k) {
			uint64_t until = now_ns() + selfkill_ns;
			while (now_ns() < until)
				cpu_relax();
		}
		if ((ret = pmck_ckpt_commit(c)))
			fail("pmck_ckpt_commit", ret);
		report('C', step, 0);
	}
}

/* ----------------------------------------------------------------- parent */

struct trial {
	int n;
	uint64_t kind;       /* 0..99: which kill strategy */
	int selfkill;
	uint64_t seed;
	const char *how;     /* kill strategy */
	long delay_us;
	uint64_t child_recovered; /* 'R': NONE = nothing, or never reported */
	int got_r;
	uint64_t first_begun, last_begun, last_commit; /* NONE if none */
	int commits, begins;
	int child_error, child_code;
	uint8_t last_type; /* type of the last message before the kill (0: none) */
	int selfkill_k, npre;  /* self-kill at the k-th 'P'; 'P' messages seen */
	uint64_t selfkill_step; /* the step of the k-th 'P' (NONE: not reached) */
	uint64_t *begun; /* every 'B' step */
	size_t nbegun, capbegun;
};

static void
note(struct trial *t, const struct msg *m)
{
	t->last_type = m->type;
	switch (m->type) {
	case 'R':
		t->got_r = 1;
		t->child_recovered = m->step;
		break;
	case 'B':
		if (t->nbegun == t->capbegun) {
			t->capbegun = t->capbegun ? 2 * t->capbegun : 64;
			t->begun = realloc(t->begun, t->capbegun * sizeof(*t->begun));
		}
		t->begun[t->nbegun++] = m->step;
		if (t->first_begun == NONE)
			t->first_begun = m->step;
		t->last_begun = m->step;
		t->begins++;
		break;
	case 'P':
		if (++t->npre == t->selfkill_k)
			t->selfkill_step = m->step;
		break;
	case 'C':
		t->last_commit = m->step;
		t->commits++;
		break;
	case 'E':
		t->child_error = 1;
		t->child_code = m->code;
		break;
	}
}

/* Reads whole messages from fd; 1 if one was read, 0 at EOF, -1 on timeout. */
static int
read_msg(int fd, struct msg *m, int timeout_ms)
{
	size_t got = 0;
	while (got < sizeof(*m)) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		int pr = poll(&pfd, 1, timeout_ms);
		if (pr == 0)
			return -1;
		if (pr < 0) {
			if (errno == EINTR)
				continue;
			return 0;
		}
		ssize_t n = read(fd, (char *)m + got, sizeof(*m) - got);
		if (n == 0)
			return 0;
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return 0;
		}
		got += (size_t)n;
	}
	return 1;
}

static void
spin_us(long us)
{
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	do
		clock_gettime(CLOCK_MONOTONIC, &b);
	while ((b.tv_sec - a.tv_sec) * 1000000L + (b.tv_nsec - a.tv_nsec) / 1000 < us);
}

static void
sleep_us(long us)
{
	struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000};
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static int
was_begun(const struct trial *t, uint64_t step)
{
	for (size_t i = 0; i < t->nbegun; i++)
		if (t->begun[i] == step)
			return 1;
	return 0;
}

/* A step for messages: its number, or "none" for NONE.  Four buffers in rotation. */
static const char *
stepstr(uint64_t step)
{
	static char buf[4][24];
	static int k;
	k = (k + 1) % 4;
	if (step == NONE)
		return "none";
	snprintf(buf[k], sizeof(buf[k]), "%" PRIu64, step);
	return buf[k];
}

static char path[512];
static uint8_t *expect_buf;
/*
 * The wait before the k-th commit at which the self-kill lands as its seal
 * does: a running median of outcomes (the k-th 'P' step recovered or not),
 * so that self-kills cluster around the seal.
 */
static double selfkill_target_ns = 2000;

enum verdict { PASS, LOST, FAIL };

/*
 * Reopens the file and recovers; checks the trial's outcome.  *prev is the
 * step the previous trial recovered (NONE: none on this file), updated.
 * *reset asks the caller to start the next trial on a fresh file.
 */
static enum verdict
check(struct trial *t, uint64_t *prev, int *reset, char *why, size_t wlen)
{
	struct pma_region *r = NULL;
	struct pma_pool *p = NULL;
	struct pmck_store *s = NULL;
	struct pmck_recovery rec;
	enum verdict v = PASS;
	int ret, stage;

	why[0] = '\0';
	*reset = 0;
	if ((ret = pma_region_open(path, 0, 0, &r)))
		stage = 1;
	else if ((ret = pma_pool_open(r, &p)))
		stage = 2;
	else if ((ret = pmck_store_open(p, "ck", &s)))
		stage = 3;
	else if ((ret = pmck_store_recover(s, &rec)))
		stage = 4;
	else
		stage = 0;

	if (stage) {
		/* No checkpoint: fine only when none was ever committed on this file. */
		static const char *what[] = {"", "region open", "pool open", "store open", "recover"};
		int benign = (stage == 1 && (ret == -ENOENT || ret == -EINVAL)) ||
			(stage == 2 && ret == PMA_E_NOT_POOL) || (stage == 3 && ret == -ENOENT) ||
			(stage == 4 && ret == PMCK_E_NO_CHECKPOINT);
		if (t->last_commit != NONE || *prev != NONE) {
			v = LOST;
			snprintf(why, wlen, "%s failed (%d: %s) although step %" PRIu64 " was %s",
					what[stage], ret, pma_errormsg(),
					t->last_commit != NONE ? t->last_commit : *prev,
					t->last_commit != NONE ? "reported committed" : "recovered before");
		} else if (!benign) {
			v = FAIL;
			snprintf(why, wlen, "%s failed with %d (%s) on a file without checkpoints",
					what[stage], ret, pma_errormsg());
		}
		if (stage <= 2)
			*reset = 1; /* no usable pool: start over */
		*prev = NONE;
		goto out;
	}

	/* A checkpoint was recovered. */
	if (t->last_commit != NONE && rec.step < t->last_commit) {
		v = LOST;
		snprintf(why, wlen, "recovered step %" PRIu64 " is older than the last reported commit %"
				PRIu64, rec.step, t->last_commit);
	} else if (*prev != NONE && rec.step < *prev) {
		v = LOST;
		snprintf(why, wlen, "recovered step %" PRIu64 " is older than the previous trial's %"
				PRIu64, rec.step, *prev);
	} else if (rec.step != *prev && !was_begun(t, rec.step)) {
		v = FAIL;
		snprintf(why, wlen, "recovered step %" PRIu64 " was never begun (previous %s, "
				"begun %s..%s)", rec.step, stepstr(*prev), stepstr(t->first_begun),
				stepstr(t->last_begun));
	}
	if (v == PASS) {
		for (size_t i = 0; i < NT; i++) {
			const uint8_t *d = pmck_store_tensor_data(s, i);
			fill_tensor(rec.step, i, expect_buf, tbytes[i]);
			if (!d || memcmp(d, expect_buf, tbytes[i])) {
				uint64_t at = 0;
				while (d && at < tbytes[i] && d[at] == expect_buf[at])
					at++;
				v = LOST;
				snprintf(why, wlen, "recovered step %" PRIu64 ": tensor '%s' differs at byte %"
						PRIu64 " of %" PRIu64, rec.step, layout[i].name, at, tbytes[i]);
				break;
			}
		}
	}
	if (v == PASS && rec.rejected) {
		/* Kills never damage bytes: a sealed slot must always verify. */
		v = FAIL;
		snprintf(why, wlen, "recovered step %" PRIu64 ", but sealed step %" PRIu64
				" in slot %u was rejected at tensor '%s'", rec.step, rec.rejected_step,
				rec.rejected_slot, rec.rejected_tensor);
	}
	*prev = rec.step;
out:
	pmck_store_close(&s);
	pma_pool_close(&p);
	pma_region_close(&r);
	return v;
}

/* Runs one trial: fork, kill, collect the child's reports. */
static int
run_child(struct trial *t, uint64_t *ps)
{
	int fds[2];

	if (pipe(fds))
		return -1;
	/* Chosen before the fork: the child needs the self-kill settings. */
	t->kind = rnd(ps) % 100;
	t->selfkill = t->kind >= 70;
	selfkill_k = t->selfkill ? 1 + (int)(rnd(ps) % 3) : 0;
	t->selfkill_k = selfkill_k;
	/* Around the estimated moment the seal lands (see main), +- 0.6 us. */
	double d = selfkill_target_ns + (double)(rnd(ps) % 1201) - 600.0;
	selfkill_ns = d > 0 ? (uint64_t)d : 0;
	if (t->selfkill) {
		t->how = "by itself around a commit";
		t->delay_us = (long)selfkill_ns;
	}
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	if (pid < 0) {
		close(fds[0]);
		close(fds[1]);
		return -1;
	}
	if (pid == 0) {
		close(fds[0]);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		child_fd = fds[1];
		child_main(path, t->seed);
		_exit(5);
	}
	close(fds[1]);

	struct msg m;
	int status, reaped = 0;
	if (t->selfkill) {
		/*
		 * The child kills itself around a commit.  Wait without reading,
		 * so that its reports do not wake this process in the middle of
		 * its timing; kill it if it does not die within 10 s.
		 */
		for (int ms = 0; ms < 10000 && !reaped; ms++) {
			pid_t w = waitpid(pid, &status, WNOHANG);
			if (w == pid)
				reaped = 1;
			else
				sleep_us(1000);
		}
	} else if (t->kind < 12) {
		/* During startup: open, create, recover, the first checkpoint. */
		t->how = "early, after a delay";
		t->delay_us = (long)(rnd(ps) % 3000);
		sleep_us(t->delay_us);
	} else if (t->kind < 50) {
		t->how = "after a delay";
		t->delay_us = (long)(rnd(ps) % 30000);
		sleep_us(t->delay_us);
	} else {
		/* Right after the k-th message of one type, plus a short spin. */
		static const char types[] = "BPPC";
		uint8_t want = (uint8_t)types[rnd(ps) % 4];
		int k = 1 + (int)(rnd(ps) % 4), seen = 0, rr;
		t->how = want == 'B' ? "after a begin report" :
			want == 'P' ? "after a pre-commit report" : "after a commit report";
		t->delay_us = (long)(rnd(ps) % (want == 'C' ? 2000 : 300));
		while ((rr = read_msg(fds[0], &m, 10000)) == 1) {
			note(t, &m);
			if (m.type == want && ++seen == k)
				break;
		}
		if (rr == 1)
			spin_us(t->delay_us);
	}
	if (!reaped)
		kill(pid, SIGKILL); /* the child is not reaped yet: pid is still ours */
	while (read_msg(fds[0], &m, 10000) == 1)
		note(t, &m);
	close(fds[0]);
	while (!reaped && waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (!(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL))
		t->child_error = t->child_error ? t->child_error : 2;
	return 0;
}

int
main(int argc, char **argv)
{
	uint64_t seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
	int trials = 200, soak = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--trials") && i + 1 < argc)
			trials = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
			seed = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--soak"))
			soak = 1;
		else {
			fprintf(stderr, "usage: %s [--trials N] [--seed S] [--soak]\n", argv[0]);
			return 2;
		}
	}
	signal(SIGPIPE, SIG_IGN);
	snprintf(path, sizeof(path), "%s", scratch_path("crashkill"));
	unlink(path);
	diag("seed %" PRIu64 " (reproduce the choices with --seed %" PRIu64 "), %d trials on %s",
			seed, seed, trials, path);

	uint64_t maxbytes = 0;
	for (size_t i = 0; i < NT; i++) {
		tbytes[i] = pmck_dtype_size(layout[i].dtype);
		for (uint32_t k = 0; k < layout[i].ndim; k++)
			tbytes[i] *= layout[i].shape[k];
		if (tbytes[i] > maxbytes)
			maxbytes = tbytes[i];
	}
	expect_buf = malloc(maxbytes);

	uint64_t ps = mix64(seed) | 1, prev = NONE;
	int passed = 0, lost = 0, failed = 0, reset = 1, fresh = 0;
	int with_commits = 0, total_commits = 0, none_reported = 0;
	int selfkill_after = 0, selfkill_before = 0;
	int phase[5] = {0}; /* killed: before 'R', after 'R', after 'B', after 'P', after 'C' */
	for (int n = 0; n < trials; n++) {
		if (reset || rnd(&ps) % 20 == 0) {
			unlink(path);
			prev = NONE;
			fresh++;
		}
		struct trial t = {.n = n, .seed = mix64(seed ^ (uint64_t)n * 0x9e37ull),
			.child_recovered = NONE, .first_begun = NONE, .last_begun = NONE,
			.last_commit = NONE, .selfkill_step = NONE};
		char why[768];
		enum verdict v;
		if (run_child(&t, &ps)) {
			v = FAIL;
			snprintf(why, sizeof(why), "fork or pipe failed: %s", strerror(errno));
			reset = 1;
		} else {
			uint64_t before = prev;
			v = check(&t, &prev, &reset, why, sizeof(why));
			if (v == PASS && t.child_error) {
				v = FAIL;
				snprintf(why, sizeof(why), "the child failed on its own (code %d; see stderr)",
						t.child_code);
			} else if (v == PASS && t.got_r && t.child_recovered != before) {
				v = FAIL;
				snprintf(why, sizeof(why), "the child recovered step %s at start, "
						"the previous trial %s", stepstr(t.child_recovered),
						stepstr(before));
			}
		}
		phase[t.last_type == 'R' ? 1 : t.last_type == 'B' ? 2 : t.last_type == 'P' ? 3 :
			t.last_type == 'C' ? 4 : 0]++;
		if (t.selfkill && t.selfkill_step != NONE && v == PASS) {
			int landed_after = prev != NONE && prev >= t.selfkill_step;
			/* Landed after the seal: the commit came too early; wait longer next time. */
			selfkill_target_ns += landed_after ? 100 : -100;
			if (selfkill_target_ns < 0)
				selfkill_target_ns = 0;
			if (selfkill_target_ns > 100000)
				selfkill_target_ns = 100000;
			selfkill_after += landed_after;
			selfkill_before += !landed_after;
		}
		with_commits += t.commits > 0;
		none_reported += t.commits == 0;
		total_commits += t.commits;
		if (v == PASS)
			passed++;
		else if (v == LOST)
			lost++;
		else
			failed++;
		if (!ok(v == PASS, "trial %d: killed %s (%ld %s): %d begun, %d committed, recovered %s",
				n, t.how, t.delay_us, t.selfkill ? "ns wait" : "us", t.begins, t.commits,
				stepstr(prev)))
			diag("trial %d (seed %" PRIu64 ", trial seed %" PRIu64 ") %s: %s; begun steps "
					"%s..%s, last reported commit %s, child recovered %s at start",
					n, seed, t.seed, v == LOST ? "LOST" : "FAILED", why,
					stepstr(t.first_begun), stepstr(t.last_begun),
					stepstr(t.last_commit), stepstr(t.child_recovered));
		if (v != PASS) {
			reset = 1; /* a broken file would fail every later trial */
			prev = NONE;
		}
		free(t.begun);
	}
	diag("%d trials: %d passed, %d lost, %d failed otherwise; %d fresh files; "
			"%d trials with commits (%d commits), %d without", trials, passed, lost, failed,
			fresh, with_commits, total_commits, none_reported);
	diag("self-kills around a commit: %d before its seal, %d after; delay estimate %.0f ns",
			selfkill_before, selfkill_after, selfkill_target_ns);
	diag("killed: %d while opening/recovering, %d before the first begin, %d in begin or writes, "
			"%d in commit, %d between a commit and the next begin", phase[0], phase[1],
			phase[2], phase[3], phase[4]);
	unlink(path);
	free(expect_buf);
	int rc = done_testing();
	if (soak) {
		printf("soak: %d passed, %d lost\n", passed, lost);
		fflush(stdout);
		return lost > 0 || rc ? 1 : 0;
	}
	return rc;
}
