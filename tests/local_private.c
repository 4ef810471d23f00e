/*
 * local_private.c -- the ramdisk tier against another local user (issue
 * #32).  User nobody plants, under the names a job of root's uses, a file,
 * a symbolic link to a blank file, a directory of its own, a link in place
 * of the directory; root makes the directory 0777.  Each time the job
 * refuses with PMA_E_UNSAFE, its message names the cause, and what was
 * planted is left byte for byte as it was.  Also: the modes of what a save
 * and a copy-out make (private, and with PMCK_COPYOUT_GROUP), the opt-outs
 * for a directory shared on purpose (which keep the file checks), a
 * pm_path file of another user's, and two users on one node, neither of
 * whom can open the other's default store.
 *
 * Needs root, to act as other users: it runs in a mount namespace of its
 * own, where /dev/shm is a fresh tmpfs, so the node's real default
 * directories (/dev/shm/pmckpt-UID) are never touched.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pmckpt.h"
#include "tap.h"
#include "copyout_util.h"

#define NOBODY 65534u
#define OTHER 65533u /* a second unprivileged user (no passwd entry needed) */
#define PLANT_BYTES (32u << 20)
#define TARGET_BYTES (64u << 20)

#define NT 2
static const struct pmck_tensor_desc layout[NT] = {
	{.name = "w", .dtype = PMCK_DTYPE_F32, .ndim = 2, .shape = {64, 64}, .layer = 0},
	{.name = "b", .dtype = PMCK_DTYPE_F32, .ndim = 1, .shape = {64}, .layer = 1},
};

/* ------------------------------------------------------------ as another user */

/* Runs fn(arg) in a child as uid (gid nogroup); returns its exit status (0: it succeeded). */
static int
as_user(uid_t uid, int (*fn)(const void *), const void *arg)
{
	pid_t pid = fork();
	if (pid == 0) {
		if (setgroups(0, NULL) || setresgid(NOBODY, NOBODY, NOBODY) ||
		    setresuid(uid, uid, uid))
			_exit(100);
		umask(022);
		_exit(fn(arg));
	}
	int st;
	if (pid < 0 || waitpid(pid, &st, 0) != pid)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* A file of n zero bytes, made by the caller with mode. */
static int
zeros(const char *path, size_t n, mode_t mode)
{
	int fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, mode);
	int bad = fd < 0 || ftruncate(fd, (off_t)n) || fchmod(fd, mode);
	if (fd >= 0)
		close(fd);
	return bad;
}

struct plant {
	const char *dir;     /* made first (0777) if set */
	const char *file;    /* a blank file of PLANT_BYTES, mode 0666, if set */
	const char *link;    /* a symbolic link to `to`, if set */
	const char *to;
};

static int
do_plant(const void *arg)
{
	const struct plant *p = arg;
	if (p->dir && (mkdir(p->dir, 0777) || chmod(p->dir, 0777)))
		return 1;
	if (p->file && zeros(p->file, PLANT_BYTES, 0666))
		return 2;
	if (p->link && symlink(p->to, p->link))
		return 3;
	return 0;
}

/* Is path a file of n zero bytes owned by uid with mode? */
static int
still_blank(const char *path, size_t n, uid_t uid, mode_t mode)
{
	struct stat st;
	if (lstat(path, &st) || !S_ISREG(st.st_mode) || (size_t)st.st_size != n ||
	    st.st_uid != uid || (st.st_mode & 07777) != mode)
		return 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	static char buf[1 << 16];
	int zero = fd >= 0;
	ssize_t got;
	while (zero && (got = read(fd, buf, sizeof(buf))) > 0)
		for (ssize_t i = 0; i < got && zero; i++)
			zero = buf[i] == 0;
	if (fd >= 0)
		close(fd);
	return zero;
}

static mode_t
mode_of(const char *path)
{
	struct stat st;
	return lstat(path, &st) ? (mode_t)-1 : st.st_mode & 07777;
}

static int
is_dir_empty(const char *path)
{
	char cmd[PATH_MAX + 32];
	snprintf(cmd, sizeof(cmd), "test -z \"$(ls -A '%s')\"", path);
	return system(cmd) == 0;
}

/* ------------------------------------------------------------ the job */

/* A job's save: open (creating) the store, commit one checkpoint, close.  Returns its code. */
static int
job(const char *ramdisk, const char *pm, unsigned flags)
{
	static float w[64 * 64], b[64];
	static uint64_t step; /* each save a newer step */
	const void *srcs[NT] = {w, b};
	struct pmck_local_opts o = {.ramdisk_dir = ramdisk, .pm_path = pm, .store_name = "victim",
				    .descs = layout, .ndescs = NT, .flags = flags};
	struct pmck_local l;
	struct pmck_ckpt *c;
	int ret = pmck_local_open(&o, &l);
	if (ret)
		return ret;
	if (!(ret = pmck_store_begin(l.store, ++step, &c)) && !(ret = pmck_ckpt_write_all(c, srcs, 1)))
		ret = pmck_ckpt_commit(c);
	pmck_local_close(&l);
	return ret;
}

/* Opening what exists (EXISTING or RDONLY): its code. */
static int
job_open(const char *ramdisk, unsigned flags)
{
	struct pmck_local_opts o = {.ramdisk_dir = ramdisk, .store_name = "victim", .descs = layout,
				    .ndescs = NT, .flags = flags};
	struct pmck_local l;
	int ret = pmck_local_open(&o, &l);
	if (!ret)
		pmck_local_close(&l);
	return ret;
}

static int
says(const char *what)
{
	return strstr(pmck_errormsg(), what) != NULL;
}

/* ------------------------------------------------------------ two users */

static int
own_default_store(const void *arg)
{
	(void)arg;
	return job(NULL, NULL, 0) ? 1 : 0;
}

/* As one user: every way of opening the other's default store fails, and its file cannot be read. */
static int
cannot_open_other(const void *arg)
{
	const char *dir = arg;
	char file[PATH_MAX];
	snprintf(file, sizeof(file), "%s/pmckpt-victim.pool", dir);
	int fd = open(file, O_RDONLY | O_CLOEXEC);
	if (fd >= 0)
		return 1;
	if (job(dir, NULL, 0) == 0 || job_open(dir, PMCK_LOCAL_EXISTING) == 0 ||
	    job_open(dir, PMCK_LOCAL_RDONLY) == 0)
		return 2;
	struct pma_region *r;
	if (pma_region_open(file, 0, PMA_REGION_RDONLY, &r) == 0)
		return 3;
	return 0;
}

/* ------------------------------------------------------------ main */

int
main(void)
{
	if (geteuid() != 0)
		skip_all("needs root: it plants files as other users (nobody)");
	/*
	 * Private mounts first, so that the tmpfs never propagates out of this
	 * namespace: the whole tree, or (in a chroot, whose root is no mount
	 * point) the /dev/shm mount the new one is stacked on.
	 */
	if (unshare(CLONE_NEWNS) || (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) &&
				     mount(NULL, "/dev/shm", NULL, MS_PRIVATE, NULL)) ||
	    mount("tmpfs", "/dev/shm", "tmpfs", 0, "mode=1777,size=512m"))
		skip_all("needs a mount namespace of its own (unshare, mount tmpfs on /dev/shm)");
	umask(022);

	char d0[256], pool[300], buf[700];
	is_int(pmck_local_default_dir(d0, sizeof(d0)), 0, "default directory: %s", d0);
	ok(!strcmp(d0, "/dev/shm/pmckpt-0"), "root's is /dev/shm/pmckpt-0");
	snprintf(pool, sizeof(pool), "%s/pmckpt-victim.pool", d0);

	/* A fresh node: the job makes its own directory, 0700, and its pool, 0600. */
	is_int(job(NULL, NULL, 0), 0, "a save on a fresh node succeeds");
	ok(mode_of(d0) == 0700, "the default directory is made 0700 (%04o)", mode_of(d0));
	ok(mode_of(pool) == 0600, "the pool file is made 0600 (%04o)", mode_of(pool));
	rm_rf(d0);

	/* 1. nobody makes the default directory, with a blank pool file in it. */
	struct plant dir_and_file = {.dir = d0, .file = pool};
	is_int(as_user(NOBODY, do_plant, &dir_and_file), 0, "nobody plants %s (0777) and a blank "
			"pool file (0666) in it", d0);
	is_int(job(NULL, NULL, 0), PMA_E_UNSAFE, "the job refuses: %s", pmck_errormsg());
	ok(says("owned by nobody (uid 65534) and you are root (uid 0)") && says("0777"),
			"the message names the directory's owner and mode");
	is_int(job_open(NULL, PMCK_LOCAL_EXISTING), PMA_E_UNSAFE, "opening what exists refuses too");
	is_int(job_open(NULL, PMCK_LOCAL_RDONLY), PMA_E_UNSAFE, "and so does a read-only open");
	ok(still_blank(pool, PLANT_BYTES, NOBODY, 0666), "the planted file is unchanged");
	rm_rf(d0);

	/* 2. nobody makes the default directory a link to a directory of its own. */
	struct plant nobody_dir = {.dir = "/dev/shm/nobody-dir"};
	struct plant dir_link = {.link = d0, .to = "/dev/shm/nobody-dir"};
	is_int(as_user(NOBODY, do_plant, &nobody_dir) | as_user(NOBODY, do_plant, &dir_link), 0,
			"nobody makes %s a link to its directory", d0);
	is_int(job(NULL, NULL, 0), PMA_E_UNSAFE, "the job refuses: %s", pmck_errormsg());
	ok(says("symbolic link to /dev/shm/nobody-dir"), "the message says it is a link, and to where");
	ok(is_dir_empty("/dev/shm/nobody-dir"), "nothing was written into the link's target");
	unlink(d0);
	/* A link to a directory of root's own is not followed either. */
	ok(mkdir("/dev/shm/root-dir", 0700) == 0 && symlink("/dev/shm/root-dir", d0) == 0,
			"the default directory as a link to a 0700 directory of root's");
	is_int(job(NULL, NULL, 0), PMA_E_UNSAFE, "refused: a link is never the directory (%s)",
			pmck_errormsg());
	ok(is_dir_empty("/dev/shm/root-dir"), "and nothing was written there");
	unlink(d0);

	/* 3. The job's own directory, made 0777 (nobody cannot chmod it; a careless admin can). */
	is_int(job(NULL, NULL, 0), 0, "a save makes the directory and the store");
	char before[320];
	snprintf(before, sizeof(before), "%s.before", pool);
	snprintf(buf, sizeof(buf), "cp %s %s", pool, before);
	ok(system(buf) == 0 && chmod(d0, 0777) == 0, "the directory made mode 0777");
	is_int(job(NULL, NULL, 0), PMA_E_UNSAFE, "the next save refuses: %s", pmck_errormsg());
	ok(says("mode 0777") && says("every user"), "the message names the mode and who can write");
	is_int(job_open(NULL, PMCK_LOCAL_EXISTING), PMA_E_UNSAFE, "a load refuses it too");
	snprintf(buf, sizeof(buf), "cmp -s %s %s", pool, before);
	ok(system(buf) == 0, "the store is unchanged");
	ok(chmod(d0, 0770) == 0, "mode 0770");
	is_int(job(NULL, NULL, 0), PMA_E_UNSAFE, "group-writable: refused (%s)", pmck_errormsg());
	ok(chmod(d0, 0755) == 0, "mode 0755");
	is_int(job(NULL, NULL, 0), 0, "0755 (others may read, not write): the save succeeds");
	rm_rf(d0);
	unlink(before);

	/*
	 * 4. /dev/shm itself (mode 1777): refused as a ramdisk directory unless
	 * shared on purpose; then the file checks still hold.
	 */
	char shm_pool[] = "/dev/shm/pmckpt-victim.pool";
	is_int(job("/dev/shm", NULL, 0), PMA_E_UNSAFE, "ramdisk=/dev/shm refused: %s",
			pmck_errormsg());
	ok(says("1777") && says("PMCK_LOCAL_SHARED_DIR"), "the message says how to opt out");
	ok(access(shm_pool, F_OK) != 0, "and no file was made");
	struct plant file_in_shm = {.file = shm_pool};
	is_int(as_user(NOBODY, do_plant, &file_in_shm), 0, "nobody plants %s (0666)", shm_pool);
	is_int(job("/dev/shm", NULL, PMCK_LOCAL_SHARED_DIR), PMA_E_UNSAFE,
			"shared on purpose: the planted file is refused (%s)", pmck_errormsg());
	ok(says("owned by nobody (uid 65534)"), "the message names the file's owner");
	ok(still_blank(shm_pool, PLANT_BYTES, NOBODY, 0666), "the planted file is unchanged");
	unlink(shm_pool);

	ok(zeros("/dev/shm/root-dir/blank", TARGET_BYTES, 0600) == 0,
			"a blank 64 MiB file of root's, that the job could write");
	struct plant link_in_shm = {.link = shm_pool, .to = "/dev/shm/root-dir/blank"};
	is_int(as_user(NOBODY, do_plant, &link_in_shm), 0, "nobody links %s to it", shm_pool);
	is_int(job("/dev/shm", NULL, PMCK_LOCAL_SHARED_DIR), PMA_E_UNSAFE,
			"the link is refused, not followed (%s)", pmck_errormsg());
	ok(says("symbolic link"), "the message says it is a link");
	ok(still_blank("/dev/shm/root-dir/blank", TARGET_BYTES, 0, 0600), "its target is unchanged");
	unlink(shm_pool);
	ok(link("/dev/shm/root-dir/blank", shm_pool) == 0, "a hard link to it under the pool's name");
	is_int(job("/dev/shm", NULL, PMCK_LOCAL_SHARED_DIR), PMA_E_UNSAFE,
			"a file with two links is refused (%s)", pmck_errormsg());
	ok(still_blank("/dev/shm/root-dir/blank", TARGET_BYTES, 0, 0600), "its target is unchanged");
	unlink(shm_pool);
	is_int(job("/dev/shm", NULL, PMCK_LOCAL_SHARED_DIR), 0,
			"shared on purpose, nothing planted: the save succeeds");
	ok(mode_of(shm_pool) == 0600, "its pool file is 0600 (%04o)", mode_of(shm_pool));
	unlink(shm_pool);

	/* 5. A PM file (pm_path) of another user's is refused for writing. */
	char pm[] = "/dev/shm/nobody-dir/pm.pool";
	struct plant pm_file = {.file = pm};
	is_int(as_user(NOBODY, do_plant, &pm_file), 0, "nobody's blank file %s", pm);
	is_int(job(NULL, pm, 0), PMA_E_UNSAFE, "pm_path of nobody's: refused (%s)", pmck_errormsg());
	ok(still_blank(pm, PLANT_BYTES, NOBODY, 0666), "and left unchanged");

	/* 6. Copy-out: the directory's checks, the opt-out, and the modes of what it makes. */
	struct pmck_local_opts lo = {.store_name = "co", .descs = layout, .ndescs = NT};
	struct pmck_local l;
	is_int(pmck_local_open(&lo, &l), 0, "a store for copy-out");
	static float w[64 * 64], b[64];
	const void *srcs[NT] = {w, b};
	struct pmck_ckpt *c;
	ok(!pmck_store_begin(l.store, 7, &c) && !pmck_ckpt_write_all(c, srcs, 1) &&
			!pmck_ckpt_commit(c), "step 7 committed");
	struct pmck_copyout *co;
	struct pmck_copyout_opts cop = {.dir = "/dev/shm/nobody-dir", .keep = 2};
	is_int(pmck_copyout_new(l.store, &cop, &co), PMA_E_UNSAFE,
			"copy-out into nobody's directory refused: %s", pmck_errormsg());
	ok(says("copy-out directory") && says("nobody"), "the message names it and its owner");
	cop.flags = PMCK_COPYOUT_SHARED_DIR;
	is_int(pmck_copyout_new(l.store, &cop, &co), 0, "accepted with PMCK_COPYOUT_SHARED_DIR");
	pmck_copyout_delete(&co);
	cop.flags = 0x80;
	is_int(pmck_copyout_new(l.store, &cop, &co), -EINVAL, "unknown flags: -EINVAL");
	ok(symlink("/dev/shm/root-dir", "/dev/shm/co-link") == 0, "a link to a directory of root's");
	cop = (struct pmck_copyout_opts){.dir = "/dev/shm/co-link", .keep = 2};
	is_int(pmck_copyout_new(l.store, &cop, &co), PMA_E_UNSAFE, "a link as copy-out directory "
			"refused (%s)", pmck_errormsg());

	const char *modes[2][2] = {{"/dev/shm/co-private", "private"}, {"/dev/shm/co-group", "group"}};
	for (int g = 0; g < 2; g++) {
		const char *dir = modes[g][0];
		cop = (struct pmck_copyout_opts){.dir = dir, .keep = 2,
						 .flags = g ? PMCK_COPYOUT_GROUP : 0};
		mode_t dm = g ? 0750 : 0700, fm = g ? 0640 : 0600;
		int ret = pmck_copyout_new(l.store, &cop, &co);
		if (!ok(ret == 0, "%s copy-out into a new directory", modes[g][1])) {
			diag("%s", pmck_errormsg());
			continue;
		}
		ok(!pmck_copyout_submit(co) && !pmck_copyout_wait(co), "step 7 copied out");
		pmck_copyout_delete(&co);
		char step[PATH_MAX], f[PATH_MAX + 64];
		snprintf(step, sizeof(step), "%s/step-000000000007", dir);
		ok(mode_of(dir) == dm, "%s: the directory is %04o (%04o)", modes[g][1], dm, mode_of(dir));
		ok(mode_of(step) == dm, "%s: the step directory is %04o (%04o)", modes[g][1], dm,
				mode_of(step));
		snprintf(f, sizeof(f), "%s/rank-00000.safetensors", step);
		ok(mode_of(f) == fm, "%s: the rank's file is %04o (%04o)", modes[g][1], fm, mode_of(f));
		snprintf(f, sizeof(f), "%s/COMPLETE", step);
		ok(mode_of(f) == fm, "%s: COMPLETE is %04o (%04o)", modes[g][1], fm, mode_of(f));
	}
	/* A link left as a temporary file's name is removed, never written through. */
	ok(mkdir("/dev/shm/co-private/step-000000000008", 0700) == 0 &&
	   symlink("/dev/shm/root-dir/blank", "/dev/shm/co-private/step-000000000008/"
		   "rank-00000.safetensors.tmp") == 0, "a link in place of step 8's temporary file");
	ok(!pmck_store_begin(l.store, 8, &c) && !pmck_ckpt_write_all(c, srcs, 1) &&
			!pmck_ckpt_commit(c), "step 8 committed");
	cop = (struct pmck_copyout_opts){.dir = "/dev/shm/co-private", .keep = 2};
	ok(pmck_copyout_new(l.store, &cop, &co) == 0 && !pmck_copyout_submit(co) &&
			!pmck_copyout_wait(co), "step 8 copied out");
	pmck_copyout_delete(&co);
	ok(still_blank("/dev/shm/root-dir/blank", TARGET_BYTES, 0, 0600), "the link's target is "
			"unchanged");
	/* A marker is not read through a link: the step's marker counts as unreadable. */
	ok(rename("/dev/shm/co-private/step-000000000008/COMPLETE", "/dev/shm/root-dir/marker") == 0 &&
	   symlink("/dev/shm/root-dir/marker", "/dev/shm/co-private/step-000000000008/COMPLETE") == 0,
			"step 8's COMPLETE replaced by a link to the same marker");
	struct pmck_copyout_listing *ls = NULL;
	ok(pmck_copyout_list("/dev/shm/co-private", &ls) == 0 && ls->nsteps == 2 &&
	   ls->steps[1].step == 8 && !ls->steps[1].marker_ok && ls->steps[0].marker_ok,
			"listed: step 7's marker read, step 8's (a link) unreadable");
	pmck_copyout_listing_free(&ls);
	pmck_local_close(&l);

	/* 7. Two users on one node, each with a default store: neither opens the other's. */
	is_int(as_user(NOBODY, own_default_store, NULL), 0, "nobody saves into its default store");
	is_int(as_user(OTHER, own_default_store, NULL), 0, "uid %u saves into its default store", OTHER);
	ok(mode_of("/dev/shm/pmckpt-65534") == 0700 && mode_of("/dev/shm/pmckpt-65533") == 0700,
			"each default directory is 0700");
	is_int(as_user(NOBODY, cannot_open_other, "/dev/shm/pmckpt-65533"), 0,
			"nobody can neither read, open, load nor write uid %u's store", OTHER);
	is_int(as_user(OTHER, cannot_open_other, "/dev/shm/pmckpt-65534"), 0,
			"uid %u can neither read, open, load nor write nobody's store", OTHER);
	return done_testing();
}
