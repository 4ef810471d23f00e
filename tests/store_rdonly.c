/*
 * store_rdonly.c -- read-only opens (PMA_REGION_RDONLY, PMCK_LOCAL_RDONLY):
 * a pool file the user may read but not write opens, lists and recovers;
 * every change is refused with -EROFS; nothing on the file changes, also
 * when recovery rejects a damaged slot; a store into the mapping faults.
 * The unwritable case runs as user nobody when started as root (root
 * ignores file permissions), else on a chmod 0444 file of our own.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "ckpt_util.h"

#define NT 3
static const struct pmck_tensor_desc layout[NT] = {
	{.name = "emb", .dtype = PMCK_DTYPE_F32, .ndim = 2, .shape = {600, 1000}, .layer = 0},
	{.name = "w", .dtype = PMCK_DTYPE_BF16, .ndim = 2, .shape = {64, 64}, .layer = 1},
	{.name = "b", .dtype = PMCK_DTYPE_F32, .ndim = 1, .shape = {3}, .layer = 1},
};
static const char *path;
static size_t file_size;

static uint8_t *
read_file(void)
{
	uint8_t *b = malloc(file_size);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	size_t got = 0;
	ssize_t n = 0;

	while (b && fd >= 0 && got < file_size && (n = read(fd, b + got, file_size - got)) > 0)
		got += (size_t)n;
	if (fd >= 0)
		close(fd);
	if (got != file_size) {
		free(b);
		return NULL;
	}
	return b;
}

/* Commits steps 1..last (contents: fill_tensor) into a new pool at path. */
static int
setup(uint64_t last)
{
	struct pma_region *r;
	struct pma_pool *pool;
	struct pmck_store *s;
	struct pmck_ckpt *c;

	unlink(path);
	if (open_store(path, 16 << 20, 1, "m", layout, NT, &r, &pool, &s))
		return -1;
	for (uint64_t step = 1; step <= last; step++) {
		if (pmck_store_begin(s, step, &c))
			return -1;
		for (size_t i = 0; i < NT; i++) {
			struct pmck_tensor_info ti;
			pmck_store_tensor(s, i, &ti);
			uint8_t *b = malloc(ti.nbytes);
			fill_tensor(step, i, b, ti.nbytes);
			pmck_ckpt_write(c, i, b);
			free(b);
		}
		if (pmck_ckpt_commit(c))
			return -1;
	}
	file_size = pma_region_size(r);
	close_store(&r, &pool, &s);
	return 0;
}

/* Does the recovered checkpoint of s hold the contents of `step`? */
static int
holds_step(struct pmck_store *s, uint64_t step)
{
	int same = 1;
	for (size_t i = 0; i < NT && same; i++) {
		struct pmck_tensor_info ti;
		pmck_store_tensor(s, i, &ti);
		uint8_t *b = malloc(ti.nbytes);
		fill_tensor(step, i, b, ti.nbytes);
		const void *got = pmck_store_tensor_data(s, i);
		same = got && !memcmp(got, b, ti.nbytes);
		free(b);
	}
	return same;
}

static void
test_refusals(void)
{
	struct pma_region *r = NULL;
	struct pma_pool *pool = NULL;
	struct pmck_store *s = NULL;
	struct pmck_ckpt *c;
	struct pmck_recovery rec;
	void *addr;
	uint8_t *before = read_file();

	mark_errormsg();
	is_int(pma_region_open(path, 1 << 20, PMA_REGION_CREATE | PMA_REGION_RDONLY, &r), -EINVAL,
			"CREATE with RDONLY is -EINVAL");
	ok(errormsg_fresh(), "with a message: %s", pma_errormsg());

	is_int(pma_region_open(path, 0, PMA_REGION_RDONLY, &r), 0, "read-only open");
	ok(r && pma_region_rdonly(r) == 1, "pma_region_rdonly says so");
	is_int(pma_pool_open(r, &pool), 0, "the pool opens on it");
	mark_errormsg();
	is_int(pma_alloc(pool, "x", 4096, 0, 0, &addr), -EROFS, "pma_alloc: -EROFS");
	ok(errormsg_fresh() && strstr(pma_errormsg(), "read-only"), "message: %s", pma_errormsg());
	mark_errormsg();
	is_int(pma_free(pool, "m.data0"), -EROFS, "pma_free: -EROFS");
	ok(errormsg_fresh(), "message: %s", pma_errormsg());
	struct pma_pool *p2 = NULL;
	is_int(pma_pool_create(r, 0, &p2), -EROFS, "pma_pool_create: -EROFS");
	is_int(pma_lookup(pool, "m.meta", NULL, NULL), 0, "lookups work");
	is_int(pmck_store_create(pool, "n", layout, NT, &s), -EROFS, "pmck_store_create: -EROFS");
	is_int(pmck_store_open(pool, "m", &s), 0, "the store opens");
	is_int(pmck_store_recover(s, &rec), 0, "and recovers");
	ok(rec.step == 2 && holds_step(s, 2), "step 2, bit-exact (step %llu)",
			(unsigned long long)rec.step);
	mark_errormsg();
	is_int(pmck_store_begin(s, 3, &c), -EROFS, "pmck_store_begin: -EROFS");
	ok(errormsg_fresh() && strstr(pma_errormsg(), path), "naming the file: %s", pma_errormsg());
	is_int(pmck_store_discard_after(s, 0), -EROFS, "pmck_store_discard_after: -EROFS");
	is_int(pmck_store_destroy(pool, "m"), -EROFS, "pmck_store_destroy: -EROFS");
	pmck_store_close(&s);

	/* The mapping itself is read-only: a stray store faults instead of reaching the file. */
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		/* The kernel's verdict, not a sanitizer's handler (which would exit 1 instead). */
		signal(SIGSEGV, SIG_DFL);
		signal(SIGBUS, SIG_DFL);
		((volatile char *)pma_region_addr(r))[100] = 1;
		_exit(0);
	}
	int status;
	waitpid(pid, &status, 0);
	ok(WIFSIGNALED(status) && (WTERMSIG(status) == SIGSEGV || WTERMSIG(status) == SIGBUS),
			"a store into the read-only mapping faults");
	pma_pool_close(&pool);
	pma_region_close(&r);

	uint8_t *after = read_file();
	ok(before && after && !memcmp(before, after, file_size), "the file is unchanged, byte for byte");
	free(before);
	free(after);
}

/* Damages tensor 0 of step 2's slot (as a writer), then recovers read-only. */
static void
test_rejected_slot(void)
{
	struct pma_region *r = NULL;
	struct pma_pool *pool = NULL;
	struct pmck_store *s = NULL;
	struct pmck_recovery rec;

	if (open_store(path, 0, 0, "m", layout, NT, &r, &pool, &s) ||
	    pmck_store_recover(s, &rec)) {
		ok(0, "damage step 2: %s", pmck_errormsg());
		return;
	}
	char *p = (char *)pmck_store_tensor_data(s, 0);
	p[12345] ^= 0x40;
	pma_region_persist(r, p + 12345, 1);
	close_store(&r, &pool, &s);

	uint8_t *before = read_file();
	int good = 0;
	for (int round = 0; round < 2; round++) {
		if (pma_region_open(path, 0, PMA_REGION_RDONLY, &r) || pma_pool_open(r, &pool) ||
		    pmck_store_open(pool, "m", &s))
			break;
		int rc = pmck_store_recover(s, &rec);
		good += rc == 0 && rec.step == 1 && rec.rejected && rec.rejected_step == 2 &&
			!strcmp(rec.rejected_tensor, "emb") && holds_step(s, 1);
		close_store(&r, &pool, &s);
	}
	is_int(good, 2, "read-only recovery rejects damaged step 2 and returns step 1, twice "
			"(nothing marked on media)");
	uint8_t *after = read_file();
	ok(before && after && !memcmp(before, after, file_size),
			"rejecting a slot wrote nothing to the file");
	free(before);
	free(after);
}

static void
test_local(void)
{
	struct pmck_local l;
	struct pmck_recovery rec;
	struct pmck_ckpt *c;
	struct pmck_local_opts o = {.pm_path = path, .store_name = "m", .descs = layout,
		.ndescs = NT, .flags = PMCK_LOCAL_RDONLY};

	is_int(pmck_local_open(&o, &l), 0, "pmck_local_open with PMCK_LOCAL_RDONLY");
	if (l.store) {
		ok(pmck_store_recover(l.store, &rec) == 0 && rec.step == 1, "recovers step 1");
		is_int(pmck_store_begin(l.store, 5, &c), -EROFS, "begin: -EROFS");
		pmck_local_close(&l);
	}
	o.store_name = "absent";
	is_int(pmck_local_open(&o, &l), -ENOENT, "a missing store is -ENOENT, not created");

	char dir[512];
	snprintf(dir, sizeof(dir), "%s.dir", path);
	struct pmck_local_opts rd = {.ramdisk_dir = dir, .store_name = "m", .descs = layout,
		.ndescs = NT, .flags = PMCK_LOCAL_RDONLY};
	struct stat st;
	is_int(pmck_local_open(&rd, &l), -ENOENT, "read-only ramdisk store that does not exist: -ENOENT");
	ok(stat(dir, &st) && errno == ENOENT, "and its directory was not created");
}

/* What the unprivileged child saw. */
struct unpriv {
	int skipped;
	char why[200];
	int rw_rc, ro_rc, pool_rc, store_rc, rec_rc;
	uint64_t step;
	int exact;
};

static void
unpriv_child(struct unpriv *u)
{
	struct pma_region *r = NULL;
	struct pma_pool *pool = NULL;
	struct pmck_store *s = NULL;
	struct pmck_recovery rec;

	if (geteuid() == 0) {
		struct passwd *pw = getpwnam("nobody");
		if (!pw || setgroups(0, NULL) || setgid(pw->pw_gid) || setuid(pw->pw_uid)) {
			u->skipped = 1;
			snprintf(u->why, sizeof(u->why), "cannot become user nobody: %s",
					pw ? strerror(errno) : "no such user");
			return;
		}
	}
	if (access(path, R_OK)) {
		u->skipped = 1;
		snprintf(u->why, sizeof(u->why), "uid %d cannot read %s (directory permissions?)",
				(int)geteuid(), path);
		return;
	}
	u->rw_rc = pma_region_open(path, 0, 0, &r);
	pma_region_close(&r);
	u->ro_rc = pma_region_open(path, 0, PMA_REGION_RDONLY, &r);
	if (!u->ro_rc && !(u->pool_rc = pma_pool_open(r, &pool)) &&
	    !(u->store_rc = pmck_store_open(pool, "m", &s)) &&
	    !(u->rec_rc = pmck_store_recover(s, &rec))) {
		u->step = rec.step;
		u->exact = holds_step(s, rec.step);
	}
	close_store(&r, &pool, &s);
}

static void
test_unwritable(void)
{
	struct unpriv *u = calloc(1, sizeof(*u));
	int fds[2];

	if (chmod(path, 0444) || pipe(fds)) {
		ok(0, "chmod 0444 %s: %s", path, strerror(errno));
		return;
	}
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		close(fds[0]);
		unpriv_child(u);
		_exit(write(fds[1], u, sizeof(*u)) == sizeof(*u) ? 0 : 1);
	}
	close(fds[1]);
	int got = read(fds[0], u, sizeof(*u)) == sizeof(*u);
	close(fds[0]);
	waitpid(pid, NULL, 0);
	if (!got) {
		ok(0, "the unprivileged child reported nothing");
	} else if (u->skipped) {
		skip("%s", u->why);
		skip("%s", u->why);
	} else {
		diag("as uid %s, on a 0444 file:", geteuid() == 0 ? "nobody" : "this user");
		is_int(u->rw_rc, -EACCES, "opening it for writing is -EACCES");
		ok(u->ro_rc == 0 && u->pool_rc == 0 && u->store_rc == 0 && u->rec_rc == 0 &&
				u->step == 1 && u->exact,
				"read-only: region %d, pool %d, store %d, recover %d, step %llu, "
				"bit-exact %d", u->ro_rc, u->pool_rc, u->store_rc, u->rec_rc,
				(unsigned long long)u->step, u->exact);
	}
	chmod(path, 0600);
	free(u);
}

int
main(void)
{
	path = scratch_path("rdonly");
	if (setup(2)) {
		diag("setup: %s", pmck_errormsg());
		return 1;
	}
	test_refusals();
	test_rejected_slot();
	test_local();
	test_unwritable();
	unlink(path);
	return done_testing();
}
