/*
 * store_lock.c -- one writer or any number of readers per pool: a second
 * writer, a reader beside a writer and a writer beside readers are refused
 * with PMA_E_BUSY and a message naming the holder's pid; a SIGKILLed
 * holder leaves no stale lock; fork shares the lock, exec does not.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "ckpt_util.h"

#define NT 2
static const struct pmck_tensor_desc layout[NT] = {
	{.name = "w", .dtype = PMCK_DTYPE_F32, .ndim = 2, .shape = {256, 1024}, .layer = 0},
	{.name = "b", .dtype = PMCK_DTYPE_F32, .ndim = 1, .shape = {1024}, .layer = 1},
};
static const char *path;

/* A child process holding the region open (flags) until released or killed. */
struct holder {
	pid_t pid;
	int release_fd;
	int rc; /* what its pma_region_open returned */
};

static int
holder_start(struct holder *h, unsigned flags)
{
	int up[2], down[2];

	h->pid = -1;
	h->rc = INT_MIN;
	if (pipe(up) || pipe(down))
		return h->rc;
	fflush(stdout);
	h->pid = fork();
	if (h->pid == 0) {
		struct pma_region *r = NULL;
		char c;
		close(up[0]);
		close(down[1]);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		int rc = pma_region_open(path, 0, flags | PMA_REGION_NO_PREFAULT, &r);
		if (write(up[1], &rc, sizeof(rc)) != sizeof(rc))
			_exit(3);
		while (read(down[0], &c, 1) > 0)
			;
		pma_region_close(&r);
		_exit(0);
	}
	close(up[1]);
	close(down[0]);
	h->release_fd = down[1];
	if (h->pid < 0 || read(up[0], &h->rc, sizeof(h->rc)) != sizeof(h->rc))
		h->rc = INT_MIN;
	close(up[0]);
	return h->rc;
}

/* Lets the holder close the region and exit; sig: kill it with sig instead. */
static void
holder_end(struct holder *h, int sig)
{
	if (h->pid <= 0)
		return;
	if (sig)
		kill(h->pid, sig);
	close(h->release_fd);
	waitpid(h->pid, NULL, 0);
	h->pid = -1;
}

/* The last message names the pid as "pid N". */
static int
names_pid(pid_t pid)
{
	char want[32];
	snprintf(want, sizeof(want), "pid %d", (int)pid);
	return strstr(pma_errormsg(), want) != NULL;
}

/* A fresh open (flags) in this process: its return code, region closed again. */
static int
try_open(unsigned flags)
{
	struct pma_region *r = NULL;
	mark_errormsg();
	int rc = pma_region_open(path, 0, flags | PMA_REGION_NO_PREFAULT, &r);
	pma_region_close(&r);
	return rc;
}

static void
setup(void)
{
	struct pma_region *r;
	struct pma_pool *pool;
	struct pmck_store *s;
	struct pmck_ckpt *c;
	uint8_t *src[NT];

	unlink(path);
	if (open_store(path, 16 << 20, 1, "m", layout, NT, &r, &pool, &s) ||
	    pmck_store_begin(s, 1, &c)) {
		diag("setup: %s", pmck_errormsg());
		exit(1);
	}
	for (size_t i = 0; i < NT; i++) {
		struct pmck_tensor_info ti;
		pmck_store_tensor(s, i, &ti);
		src[i] = malloc(ti.nbytes);
		fill_tensor(1, i, src[i], ti.nbytes);
		pmck_ckpt_write(c, i, src[i]);
		free(src[i]);
	}
	ok(pmck_ckpt_commit(c) == 0, "setup: a pool with store 'm' holding step 1");
	close_store(&r, &pool, &s);
}

static void
test_two_writers(void)
{
	struct holder h;
	struct pma_region *r = NULL;
	struct pma_pool *pool = NULL;
	struct pmck_store *s = NULL;
	struct pmck_recovery rec;

	is_int(holder_start(&h, 0), 0, "writer A (a child) opens the pool for writing");
	is_int(try_open(0), PMA_E_BUSY, "a second writer is refused with PMA_E_BUSY");
	ok(errormsg_fresh() && strstr(pma_errormsg(), path) && names_pid(h.pid),
			"the message names the path and A's pid %d: %s", (int)h.pid, pma_errormsg());
	ok(strstr(pma_errormsg(), "for writing") != NULL, "and says A holds it for writing");
	is_int(try_open(PMA_REGION_RDONLY), PMA_E_BUSY, "a reader beside writer A is refused");
	ok(names_pid(h.pid), "naming A: %s", pma_errormsg());

	/* A whole job opening the same store: pmck_local_open. */
	struct pmck_local_opts lo = {.pm_path = path, .store_name = "m", .descs = layout,
		.ndescs = NT};
	struct pmck_local l;
	mark_errormsg();
	is_int(pmck_local_open(&lo, &l), PMA_E_BUSY, "pmck_local_open of A's store: PMA_E_BUSY");
	ok(errormsg_fresh() && names_pid(h.pid), "naming A: %s", pma_errormsg());

	holder_end(&h, SIGKILL);
	is_int(try_open(0), 0, "after kill -9 of A a new writer opens: no stale lock");
	if (open_store(path, 0, 0, "m", layout, NT, &r, &pool, &s) == 0) {
		int rc = pmck_store_recover(s, &rec);
		ok(rc == 0 && rec.step == 1, "and recovers step 1 (%d, step %llu)", rc,
				(unsigned long long)rec.step);
	} else {
		ok(0, "and recovers step 1 (open failed)");
	}
	close_store(&r, &pool, &s);

	is_int(holder_start(&h, 0), 0, "writer B opens");
	holder_end(&h, 0);
	is_int(try_open(0), 0, "after B closed normally a new writer opens");
}

static void
test_same_process(void)
{
	struct pma_region *r = NULL;

	is_int(pma_region_open(path, 0, 0, &r), 0, "this process opens the pool for writing");
	is_int(try_open(0), PMA_E_BUSY, "a second open in the same process is refused too");
	ok(names_pid(getpid()) && strstr(pma_errormsg(), "this process"),
			"naming this process: %s", pma_errormsg());
	pma_region_close(&r);
	is_int(try_open(0), 0, "after the close it opens");
}

static void
test_readers(void)
{
	struct holder h;
	struct pma_region *r = NULL;

	is_int(holder_start(&h, PMA_REGION_RDONLY), 0, "reader C (a child) opens read-only");
	is_int(pma_region_open(path, 0, PMA_REGION_RDONLY, &r), 0,
			"a second reader (this process) opens beside C");
	is_int(try_open(0), PMA_E_BUSY, "a writer beside readers is refused");
	ok(names_pid(h.pid) && strstr(pma_errormsg(), "for reading"),
			"naming reader C %d, for reading: %s", (int)h.pid, pma_errormsg());
	holder_end(&h, 0);
	is_int(try_open(0), PMA_E_BUSY, "still refused while this process reads");
	ok(names_pid(getpid()), "naming this process: %s", pma_errormsg());
	pma_region_close(&r);
	is_int(try_open(0), 0, "no reader left: a writer opens");
}

/*
 * fork() shares the open file description, and so the lock: a child's
 * close does not release the parent's lock, and the lock lasts while
 * either still has it.
 */
static void
test_fork(void)
{
	struct pma_region *r = NULL;
	struct holder h;
	int status;

	is_int(pma_region_open(path, 0, PMA_REGION_NO_PREFAULT, &r), 0, "parent opens for writing");
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		/* The inherited copy: closing it must not unlock the parent. */
		pma_region_close(&r);
		struct pma_region *r2 = NULL;
		int rc = pma_region_open(path, 0, PMA_REGION_NO_PREFAULT, &r2);
		_exit(rc == PMA_E_BUSY ? 0 : 1);
	}
	waitpid(pid, &status, 0);
	ok(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			"a forked child cannot open the pool anew while the parent holds it");
	is_int(holder_start(&h, 0), PMA_E_BUSY,
			"after that child closed its inherited copy, the parent still holds the lock");
	holder_end(&h, 0);

	/* The other way round: the parent closes, a forked child keeps the lock. */
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		pause();
		_exit(0);
	}
	pma_region_close(&r);
	is_int(try_open(0), PMA_E_BUSY, "parent closed, but its forked child still shares the lock");
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	is_int(try_open(0), 0, "once that child is gone the pool opens");

	/* exec: O_CLOEXEC keeps the lock out of an exec'd program. */
	is_int(pma_region_open(path, 0, PMA_REGION_NO_PREFAULT, &r), 0, "parent opens again");
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		execl("/bin/sleep", "sleep", "30", (char *)NULL);
		_exit(127);
	}
	/*
	 * Until the child has exec'd it shares the lock (fork): wait for the exec
	 * (its /proc/PID/exe is sleep's), up to 10 s on a loaded machine.
	 */
	char exe_link[64], exe[256];
	snprintf(exe_link, sizeof(exe_link), "/proc/%d/exe", (int)pid);
	for (int i = 0; i < 1000; i++) {
		ssize_t n = readlink(exe_link, exe, sizeof(exe) - 1);
		exe[n > 0 ? n : 0] = 0;
		if (strstr(exe, "sleep"))
			break;
		usleep(10000);
	}
	pma_region_close(&r);
	int rc = try_open(0);
	is_int(rc, 0, "a program exec'd by the holder does not keep the lock (O_CLOEXEC)");
	if (rc)
		diag("%s", pma_errormsg());
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

int
main(void)
{
	path = scratch_path("lock");
	if (access("/proc/locks", R_OK))
		skip_all("/proc/locks is not readable: holders cannot be named");
	setup();
	test_two_writers();
	test_same_process();
	test_readers();
	test_fork();
	unlink(path);
	return done_testing();
}
