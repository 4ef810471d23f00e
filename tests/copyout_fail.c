/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * copyout_fail.c -- copy-out onto a file system that runs out of space.
 *
 * A small tmpfs (8 MiB, mounted here: needs root, else SKIP) is the shared
 * directory; the store (ramdisk) holds ~3 MiB.  Step 1 fits and is copied.
 * A filler file then leaves ~1 MiB free, and steps 2 and 3 do not fit:
 *
 *   - on_done reports each, on the copier thread, with -ENOSPC and a
 *     message that names the cause, the file and the sizes;
 *   - pmck_copyout_check reports the first failure (step 2) once, with
 *     errno, path, bytes needed and available, and sets the caller's
 *     pmck_errormsg() to it (not a stale message of this thread); the
 *     later one only counts (stats.failed);
 *   - no step-2/step-3 directory and no *.tmp file is left; step 1 stays
 *     complete and verifies; the local store holds step 3;
 *   - with the filler gone, step 4 is copied (the copier went on trying).
 *
 * The mount is made and removed by a parent process, so that it is
 * unmounted whatever happens to the test.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <sys/wait.h>

#include "pmckpt.h"
#include "tap.h"
#include "copyout_util.h"

static const struct pmck_tensor_desc layout[] = {
	{.name = "w", .dtype = PMCK_DTYPE_F32, .ndim = 2, .shape = {768, 1024}, .layer = 0},
	{.name = "step", .dtype = PMCK_DTYPE_I64, .ndim = 0, .layer = 1},
};
#define NT (sizeof(layout) / sizeof(layout[0]))

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	uint64_t step;
	int result;
	char msg[512];
} done[16];
static unsigned ndone;

static void
on_done(void *arg, uint64_t step, int result)
{
	(void)arg;
	pthread_mutex_lock(&lock);
	if (ndone < 16) {
		done[ndone].step = step;
		done[ndone].result = result;
		fmtp(done[ndone].msg, sizeof(done[ndone].msg), "%s", result ? pmck_errormsg() : "");
		ndone++;
	}
	pthread_mutex_unlock(&lock);
}

static int
step_dir_exists(const char *dir, uint64_t step)
{
	char path[PATH_MAX];
	struct stat st;

	fmtp(path, sizeof(path), "%s/step-%012" PRIu64, dir, step);
	return stat(path, &st) == 0;
}

static int
complete_and_holds(const char *dir, uint64_t step)
{
	char path[PATH_MAX], why[512];
	struct stat st;

	fmtp(path, sizeof(path), "%s/step-%012" PRIu64 "/COMPLETE", dir, step);
	if (stat(path, &st))
		return 0;
	rank_file(path, sizeof(path), dir, step, 0);
	if (!file_holds(path, layout, NT, step, why, sizeof(why))) {
		diag("step %llu: %s", (unsigned long long)step, why);
		return 0;
	}
	return 1;
}

static int
run(const char *shared, const char *ramdisk)
{
	struct pmck_local l;
	struct pmck_local_opts lo = {.ramdisk_dir = ramdisk, .store_name = "cofail",
			.descs = layout, .ndescs = NT};
	struct pmck_copyout *co;
	struct pmck_copyout_opts o = {.dir = shared, .keep = 2, .on_done = on_done};
	struct pmck_copyout_failure f;
	struct pmck_copyout_stats st;
	char filler[PATH_MAX];

	plan(23);
	if (pmck_local_open(&lo, &l)) {
		diag("pmck_local_open: %s", pmck_errormsg());
		return 1;
	}
	uint8_t **src = make_srcs(layout, NT, 1);
	ok(pmck_copyout_new(l.store, &o, &co) == 0, "copier opened on the tmpfs");

	/* Step 1 fits. */
	ok(commit_step(l.store, src, NT, 1) == 0 && pmck_copyout_submit(co) == 0 &&
	   pmck_copyout_check(co, PMCK_COPYOUT_WAIT, &f) == 0 && f.error == 0,
	   "step 1 copied (check reports no failure)");

	/* Leave about 1 MiB free: the next step (3 MiB) does not fit. */
	struct statvfs sv;
	statvfs(shared, &sv);
	uint64_t avail = (uint64_t)sv.f_bavail * sv.f_frsize;
	fmtp(filler, sizeof(filler), "%s/filler", shared);
	int fd = open(filler, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	ok(fd >= 0 && posix_fallocate(fd, 0, (off_t)(avail - (1u << 20))) == 0,
	   "filler leaves 1 MiB of %llu bytes free", (unsigned long long)avail);
	close(fd);

	for (uint64_t step = 2; step <= 3; step++) {
		fill_srcs(src, layout, NT, step);
		if (commit_step(l.store, src, NT, step) || pmck_copyout_submit(co))
			diag("step %llu: %s", (unsigned long long)step, pmck_errormsg());
	}
	/* A stale message on this thread, as in the report of the bug. */
	struct pmck_copyout_listing *none;
	pmck_copyout_list("/nonexistent/pmck-cofail", &none);
	int ret = pmck_copyout_check(co, PMCK_COPYOUT_WAIT, &f);
	const char *msg = pmck_errormsg();
	is_int(ret, -ENOSPC, "check reports -ENOSPC");
	is_int(f.error, -ENOSPC, "failure.error is -ENOSPC");
	is_int(f.step, 2, "the first failure (step 2) is the one kept");
	ok(strstr(f.path, "step-000000000002/rank-00000.safetensors") != NULL,
	   "failure.path names the file: %s", f.path);
	ok(f.needed > 3u << 20 && f.available < f.needed && f.available > (1u << 19),
	   "needed %llu > available %llu bytes", (unsigned long long)f.needed,
	   (unsigned long long)f.available);
	ok(strstr(f.message, "No space left on device") && strstr(f.message, f.path) &&
	   strstr(f.message, "needs") && strstr(f.message, "available"),
	   "message names cause, path and sizes: %s", f.message);
	ok(!strcmp(msg, f.message), "pmck_errormsg() of the checking thread is that message");
	ok(pmck_copyout_check(co, 0, &f) == 0 && f.error == 0, "reported once");

	pthread_mutex_lock(&lock);
	ok(ndone == 3 && done[0].step == 1 && done[0].result == 0, "on_done: step 1 succeeded");
	ok(ndone == 3 && done[1].step == 2 && done[1].result == -ENOSPC &&
	   strstr(done[1].msg, "No space left on device"), "on_done: step 2 failed: %s",
	   done[1].msg);
	ok(ndone == 3 && done[2].step == 3 && done[2].result == -ENOSPC,
	   "on_done: step 3 failed too (the copier went on trying)");
	pthread_mutex_unlock(&lock);
	pmck_copyout_stats(co, &st);
	ok(st.copied == 1 && st.failed == 2, "stats: 1 copied, 2 failed (%llu, %llu)",
	   (unsigned long long)st.copied, (unsigned long long)st.failed);

	ok(!step_dir_exists(shared, 2) && !step_dir_exists(shared, 3),
	   "no partial step-2 / step-3 directory left");
	is_int(tree_tmp_files(shared), 0, "no temporary file left");
	ok(complete_and_holds(shared, 1), "step 1 is still complete and verifies");
	struct pmck_recovery rec;
	ok(pmck_store_recover(l.store, &rec) == 0 && rec.step == 3 &&
	   store_holds(l.store, layout, NT, 3), "the local store holds step 3");

	/* Space freed: the next copy succeeds. */
	unlink(filler);
	fill_srcs(src, layout, NT, 4);
	ok(commit_step(l.store, src, NT, 4) == 0 && pmck_copyout_submit(co) == 0 &&
	   pmck_copyout_wait(co) == 0, "with space freed, step 4 is copied");
	ok(complete_and_holds(shared, 4) && complete_and_holds(shared, 1),
	   "steps 4 and 1 complete (keep 2)");
	pmck_copyout_stats(co, &st);
	ok(st.copied == 2 && st.failed == 2, "stats: 2 copied, 2 failed");
	is_int(pmck_copyout_check(co, 2, NULL), -EINVAL, "check refuses unknown flags");

	pmck_copyout_delete(&co);
	free_srcs(src, NT);
	pmck_local_discard(&l);
	return done_testing();
}

int
main(void)
{
	char *shared = make_tmpdir("/var/tmp", "cofail");
	char *ramdisk = make_tmpdir("/dev/shm", "cofail");

	if (mount("tmpfs", shared, "tmpfs", 0, "size=8M,mode=0700")) {
		char why[256];
		fmtp(why, sizeof(why), "mount -t tmpfs -o size=8M on %s: %s (needs root)", shared,
				strerror(errno));
		rmdir(shared);
		rmdir(ramdisk);
		skip_all(why);
	}
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0)
		_exit(run(shared, ramdisk));
	int status = 1;
	waitpid(pid, &status, 0);
	if (umount2(shared, MNT_DETACH))
		printf("# umount %s: %s\n", shared, strerror(errno));
	rmdir(shared);
	rm_rf(ramdisk);
	free(shared);
	free(ramdisk);
	if (!WIFEXITED(status)) {
		printf("not ok - the test process died (status %d)\n", status);
		return 1;
	}
	return WEXITSTATUS(status);
}
