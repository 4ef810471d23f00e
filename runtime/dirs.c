/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * dirs.c -- directories the runtime makes for its files (ramdisk and
 * copy-out directories): made with their parents, and removed again, down
 * to the first one made, when the call that made them fails; checked to be
 * the caller's own and closed to other users before a file goes into them;
 * and files written whole into them.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "owner.h"

int
pmck__mkdir_p(const char *dir, mode_t mode, char *first_made, size_t first_size)
{
	char path[PATH_MAX];
	struct stat st;

	if (first_made && first_size)
		first_made[0] = '\0';
	if (snprintf(path, sizeof(path), "%s", dir) >= (int)sizeof(path))
		return pma__err(-ENAMETOOLONG, "directory name too long: %s", dir);
	/* Walk down from the root; every missing component is made (like mkdir -p). */
	for (char *p = path + 1;; p++) {
		if (*p != '/' && *p != '\0')
			continue;
		char c = *p;
		*p = '\0';
		if (mkdir(path, mode) == 0) {
			if (first_made && first_size && !first_made[0])
				snprintf(first_made, first_size, "%s", path);
		} else if (errno != EEXIST) {
			int err = errno;
			pmck__rmdir_made(path, first_made);
			return pma__err(-err, "mkdir %s: %s", path, strerror(err));
		} else if (stat(path, &st) == 0 && !S_ISDIR(st.st_mode)) {
			pmck__rmdir_made(path, first_made);
			return pma__err(-ENOTDIR, "%s exists and is not a directory", path);
		}
		*p = c;
		if (c == '\0')
			return 0;
		while (p[1] == '/')
			p++;
	}
}

void
pmck__rmdir_made(const char *dir, const char *first_made)
{
	char path[PATH_MAX];

	if (!first_made || !first_made[0])
		return;
	size_t keep = strlen(first_made);
	if (snprintf(path, sizeof(path), "%s", dir) >= (int)sizeof(path) ||
	    strncmp(path, first_made, keep) || (path[keep] != '/' && path[keep] != '\0'))
		return;
	/* Innermost first; rmdir leaves any directory that is not empty. */
	for (;;) {
		size_t len = strlen(path);
		while (len > keep && path[len - 1] == '/')
			path[--len] = '\0';
		/* A component that is missing or no directory (the one that failed) is skipped. */
		if ((rmdir(path) && errno != ENOENT && errno != ENOTDIR) || len <= keep)
			return;
		char *slash = strrchr(path, '/');
		if (!slash)
			return;
		*slash = '\0';
	}
}

/*
 * What makes dir unsafe to keep checkpoints in, into why ("" if nothing):
 * a symbolic link, no directory, another owner, write access for group or
 * others.  Returns 0, or -errno when dir cannot be looked at (-ENOENT).
 * The directory is opened without following a link and looked at through
 * that descriptor, so a link cannot pass for the directory it points to.
 */
static int
dir_problem(const char *dir, struct stat *st, char *why, size_t len)
{
	char link[300], who[128], me[128];
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

	why[0] = '\0';
	if (fd >= 0) {
		int bad = fstat(fd, st) ? errno : 0;
		close(fd);
		if (bad)
			return pma__err(-bad, "stat %s: %s", dir, strerror(bad));
	} else if (errno != ELOOP && errno != ENOTDIR) {
		return pma__err(-errno, "%s: %s", dir, strerror(errno));
	} else if (lstat(dir, st)) {
		return pma__err(-errno, "%s: %s", dir, strerror(errno));
	}
	/* Names are looked up (NSS) only for a refusal that shows them. */
	if (S_ISLNK(st->st_mode)) {
		owner_link_describe(dir, link, sizeof(link));
		snprintf(why, len, "is %s (not followed: whoever made it chooses where checkpoints "
				"would go)", link);
	} else if (!S_ISDIR(st->st_mode)) {
		owner_describe(st->st_uid, who, sizeof(who));
		snprintf(why, len, "is not a directory (owner %s, mode %04o)", who,
				(unsigned)(st->st_mode & 07777));
	} else if (st->st_uid != geteuid()) {
		owner_describe(st->st_uid, who, sizeof(who));
		owner_describe(geteuid(), me, sizeof(me));
		snprintf(why, len, "is owned by %s and you are %s, mode %04o: its owner could "
				"read and replace checkpoints in it", who, me,
				(unsigned)(st->st_mode & 07777));
	} else if (st->st_mode & (S_IWGRP | S_IWOTH)) {
		snprintf(why, len, "has mode %04o: %s can write in it, and so replace checkpoints",
				(unsigned)(st->st_mode & 07777),
				(st->st_mode & S_IWGRP) && (st->st_mode & S_IWOTH) ? "its group and every "
				"user" : st->st_mode & S_IWOTH ? "every user" : "its group");
	}
	return 0;
}

int
pmck__dir_ready(const char *dir, unsigned flags, const char *advice, char *made, size_t made_size)
{
	mode_t mode = PMCK__MODE_DIR(flags & PMCK_DIR_GROUP);
	char why[512];
	struct stat st;
	int ret = 0;

	if (made && made_size)
		made[0] = '\0';
	if (flags & PMCK__DIR_UNCHECKED)
		return flags & PMCK_DIR_CREATE ? pmck__mkdir_p(dir, mode, made, made_size) : 0;
	ret = dir_problem(dir, &st, why, sizeof(why));
	if (ret == -ENOENT && (flags & PMCK_DIR_CREATE)) {
		/* Made here, 0700 (0750 for a group): the caller's own, as the check below confirms. */
		ret = pmck__mkdir_p(dir, mode, made, made_size);
		if (!ret)
			ret = dir_problem(dir, &st, why, sizeof(why));
	}
	if (!ret && why[0])
		ret = pma__err(PMA_E_UNSAFE, "%s %s; refused, nothing written.  %s", dir, why,
				advice ? advice : "Use a directory of your own");
	if (ret && made)
		pmck__rmdir_made(dir, made);
	return ret;
}

int
pmck_dir_check(const char *dir, unsigned flags)
{
	if (!dir || !*dir)
		return pma__err(-EINVAL, "pmck_dir_check: a directory is required");
	if (flags & ~(PMCK_DIR_CREATE | PMCK_DIR_GROUP))
		return pma__err(-EINVAL, "pmck_dir_check: unknown flags %#x", flags);
	return pmck__dir_ready(dir, flags, NULL, NULL, 0);
}

int
pmck__create_private(const char *path, mode_t mode)
{
	/*
	 * A leftover of an interrupted write goes first (ours, or refused
	 * below); then O_EXCL: the name is made here, never reached through a
	 * link or taken over from a file someone else put there.
	 */
	if (unlink(path) && errno != ENOENT)
		return pma__err(-errno, "remove the leftover %s: %s", path, strerror(errno));
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
	if (fd < 0)
		return pma__err(-errno, "create %s: %s", path, strerror(errno));
	return fd;
}

int
pmck__write_file_durably(const char *dir, const char *name, const char *text, size_t n,
		mode_t mode)
{
	char tmp[PATH_MAX + 16], path[PATH_MAX + 16];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", dir, name);
	int fd = pmck__create_private(tmp, mode);
	if (fd < 0)
		return fd;
	/* The bytes are durable (fsync) before the name appears (rename), and the name after. */
	int ok = write(fd, text, n) == (ssize_t)n && fsync(fd) == 0;
	int err = errno;
	close(fd);
	if (!ok || rename(tmp, path)) {
		err = ok ? errno : err;
		unlink(tmp);
		return pma__err(-err, "write %s: %s", path, strerror(err));
	}
	return pmck__fsync_dir(dir);
}
