/*
 * local_existing.c -- pmck_local_open with PMCK_LOCAL_EXISTING opens what
 * exists and creates nothing: no directory, file, pool or store; a blank
 * ramdisk file (an interrupted creation) is reported and left as it is; the
 * store's own layout is used without descs, a given one is checked; the
 * store opens for writing.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>

#include "pmckpt.h"
#include "tap.h"

#define NT 2
static const struct pmck_tensor_desc layout[NT] = {
	{.name = "w", .dtype = PMCK_DTYPE_F32, .ndim = 2, .shape = {64, 64}, .layer = 0},
	{.name = "b", .dtype = PMCK_DTYPE_F32, .ndim = 1, .shape = {64}, .layer = 1},
};
static const struct pmck_tensor_desc other[1] = {
	{.name = "w", .dtype = PMCK_DTYPE_F32, .ndim = 1, .shape = {7}, .layer = 0},
};

static int
exists(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0;
}

static off_t
size_of(const char *p)
{
	struct stat st;
	return stat(p, &st) ? -1 : st.st_size;
}

int
main(void)
{
	char dir[600], file[700], pm[700];
	struct pmck_local l;
	struct pmck_local_opts o = {.store_name = "ex", .flags = PMCK_LOCAL_EXISTING};
	int rc;

	snprintf(dir, sizeof(dir), "%s", scratch_path("local-existing"));
	snprintf(file, sizeof(file), "%s/pmckpt-ex.pool", dir);
	snprintf(pm, sizeof(pm), "%s.pm", dir);
	o.ramdisk_dir = dir;

	/* Nothing there: -ENOENT, and neither the directory nor the file appears. */
	is_int(pmck_local_open(&o, &l), -ENOENT, "no directory: -ENOENT (%s)", pma_errormsg());
	ok(!exists(dir), "no directory was made");
	ok(mkdir(dir, 0700) == 0, "directory made by the test");
	is_int(pmck_local_open(&o, &l), -ENOENT, "no file: -ENOENT");
	ok(!exists(file), "no file was made");

	/* A blank file (a creation killed before the pool's magic): reported, left alone. */
	int fd = open(file, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
	ok(fd >= 0, "empty file made");
	if (fd >= 0)
		close(fd);
	is_int(pmck_local_open(&o, &l), PMA_E_NOT_POOL, "empty file: PMA_E_NOT_POOL (%s)",
			pma_errormsg());
	ok(size_of(file) == 0, "the empty file is left as it was");
	ok(truncate(file, 1 << 20) == 0, "file of 1 MiB of zeros");
	is_int(pmck_local_open(&o, &l), PMA_E_NOT_POOL, "zero magic: PMA_E_NOT_POOL");
	ok(size_of(file) == 1 << 20, "the blank file is left as it was");
	unlink(file);

	/* A store made by a creating open; then opened without a layout, for writing. */
	struct pmck_local_opts c = {.ramdisk_dir = dir, .store_name = "ex", .descs = layout,
				    .ndescs = NT};
	is_int(pmck_local_open(&c, &l), 0, "creating open makes the store");
	pmck_local_close(&l);
	is_int(pmck_local_open(&o, &l), 0, "existing store opens without a layout");
	is_int(l.created, 0, "created is 0");
	is_int(l.made_file, 0, "made_file is 0");
	ok(l.store && pmck_store_ntensors(l.store) == NT, "the store's own layout (%zu tensors)",
			l.store ? pmck_store_ntensors(l.store) : 0);
	struct pmck_ckpt *ck;
	rc = l.store ? pmck_store_begin(l.store, 5, &ck) : -1;
	is_int(rc, 0, "and it is writable: begin");
	if (rc == 0) {
		pmck_ckpt_abort(ck);
	}
	pmck_local_close(&l);

	/* A given layout is checked; another store name is -ENOENT, and is not created. */
	o.descs = other;
	o.ndescs = 1;
	is_int(pmck_local_open(&o, &l), PMCK_E_LAYOUT, "another layout: PMCK_E_LAYOUT");
	o.descs = layout;
	o.ndescs = NT;
	is_int(pmck_local_open(&o, &l), 0, "the same layout opens");
	pmck_local_close(&l);
	o.store_name = "absent";
	snprintf(file, sizeof(file), "%s/pmckpt-absent.pool", dir);
	is_int(pmck_local_open(&o, &l), -ENOENT, "no such store file: -ENOENT");
	ok(!exists(file), "and no file was made");

	/* PM path: a missing file is not created; a pool without the store gives -ENOENT. */
	struct pmck_local_opts p = {.pm_path = pm, .store_name = "ex", .flags = PMCK_LOCAL_EXISTING};
	is_int(pmck_local_open(&p, &l), -ENOENT, "missing pm_path: -ENOENT");
	ok(!exists(pm), "pm_path was not created");
	struct pmck_local_opts pc = {.pm_path = pm, .store_name = "other", .descs = layout,
				     .ndescs = NT, .pm_size = 16 << 20};
	is_int(pmck_local_open(&pc, &l), 0, "a pool with store 'other' at pm_path");
	pmck_local_close(&l);
	is_int(pmck_local_open(&p, &l), -ENOENT, "store 'ex' is not in it: -ENOENT");
	p.store_name = "other";
	is_int(pmck_local_open(&p, &l), 0, "store 'other' opens");
	pmck_local_close(&l);

	/* Flags it does not know, and a missing layout without EXISTING: -EINVAL. */
	p.flags = 1u << 7;
	is_int(pmck_local_open(&p, &l), -EINVAL, "unknown flag: -EINVAL");
	p.flags = 0;
	is_int(pmck_local_open(&p, &l), -EINVAL, "no layout without PMCK_LOCAL_EXISTING: -EINVAL");

	unlink(pm);
	snprintf(file, sizeof(file), "%s/pmckpt-ex.pool", dir);
	unlink(file);
	rmdir(dir);
	return done_testing();
}
