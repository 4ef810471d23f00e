/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * dirs.c -- directories the runtime makes for its files (ramdisk and
 * copy-out directories): made with their parents, and removed again, down
 * to the first one made, when the call that made them fails.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

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

int
pmck__write_file_durably(const char *dir, const char *name, const char *text, size_t n)
{
	char tmp[PATH_MAX + 16], path[PATH_MAX + 16];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", dir, name);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return pma__err(-errno, "create %s: %s", tmp, strerror(errno));
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
