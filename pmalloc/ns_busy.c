/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ns_busy.c -- is a namespace's device in use, and does it hold a pmckpt
 * pool?  Destroying or reconfiguring a namespace pulls its memory from
 * under whoever maps it (the kernel unmaps it; the next access is a
 * SIGBUS), so every change first looks for users: processes holding the
 * device open or mapped (/proc/PID/fd, /proc/PID/maps), and for block
 * devices a mount (/proc/self/mountinfo) or a holder (device-mapper, md).
 * Looking changes nothing, so listings can do it too.  Processes in other
 * PID namespaces (containers) are not visible from here.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "pmalloc_ns.h"
#include "errmsg.h"
#include "ns_internal.h"

/* The first bytes of a pool header (docs/design.md, "Pool"). */
static const char pool_magic[8] = "PMAPOOL";

static int
fds_use(const char *pid, dev_t rdev, int *denied)
{
	char dir[300], link[600];
	struct dirent *e;
	struct stat st;
	int found = 0;

	snprintf(dir, sizeof(dir), "/proc/%s/fd", pid);
	DIR *d = opendir(dir);
	if (!d) {
		if (errno == EACCES || errno == EPERM)
			*denied = 1;
		return 0;
	}
	while (!found && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(link, sizeof(link), "%s/%s", dir, e->d_name);
		if (stat(link, &st) == 0 && (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) &&
				st.st_rdev == rdev)
			found = 1;
	}
	closedir(d);
	return found;
}

/* A mapping of the device shows its path (and the node's inode) in maps. */
static int
maps_use(const char *pid, const char *path, ino_t ino, int *denied)
{
	char file[300], line[1024];
	int found = 0;

	snprintf(file, sizeof(file), "/proc/%s/maps", pid);
	FILE *f = fopen(file, "re");
	if (!f) {
		if (errno == EACCES || errno == EPERM)
			*denied = 1;
		return 0;
	}
	while (!found && fgets(line, sizeof(line), f)) {
		unsigned long long inode;
		int off = 0;
		/* start-end perms offset dev inode path */
		if (sscanf(line, "%*s %*s %*s %*s %llu %n", &inode, &off) < 1 || !off)
			continue;
		char *p = line + off;
		p[strcspn(p, "\n")] = '\0';
		if (strcmp(p, path) == 0 && (ino_t)inode == ino)
			found = 1;
	}
	fclose(f);
	return found;
}

/* A block device carrying a mounted file system (any mount namespace we can see). */
static int
mounted(dev_t rdev)
{
	char line[4096];
	unsigned maj, min;
	int found = 0;
	FILE *f = fopen("/proc/self/mountinfo", "re");

	if (!f)
		return 0;
	while (!found && fgets(line, sizeof(line), f))
		if (sscanf(line, "%*d %*d %u:%u", &maj, &min) == 2 && maj == major(rdev) &&
				min == minor(rdev))
			found = 1;
	fclose(f);
	return found;
}

/* A block device claimed by another (device-mapper, md): /sys/dev/block/M:m/holders. */
static int
held(dev_t rdev)
{
	char dir[96];
	struct dirent *e;
	int found = 0;

	snprintf(dir, sizeof(dir), "/sys/dev/block/%u:%u/holders", major(rdev), minor(rdev));
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	while (!found && (e = readdir(d)))
		found = e->d_name[0] != '.';
	closedir(d);
	return found;
}

int
pma_ns__dev_in_use(const char *path)
{
	struct stat st;
	struct dirent *e;
	int denied = 0, found = 0;

	if (stat(path, &st) != 0)
		return -errno;
	if (!S_ISCHR(st.st_mode) && !S_ISBLK(st.st_mode))
		return -ENODEV;
	if (S_ISBLK(st.st_mode) && (mounted(st.st_rdev) || held(st.st_rdev)))
		return 1;
	DIR *d = opendir("/proc");
	if (!d)
		return -errno;
	while (!found && (e = readdir(d))) {
		if (!isdigit((unsigned char)e->d_name[0]))
			continue;
		found = fds_use(e->d_name, st.st_rdev, &denied) ||
				maps_use(e->d_name, path, st.st_ino, &denied);
	}
	closedir(d);
	if (found)
		return 1;
	return denied ? -EACCES : 0;
}

int
pma_ns__dax_holds_pool(const char *path, uint64_t align)
{
	size_t len = align ? (size_t)align : (size_t)2 << 20;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	void *p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
	int err = errno;
	close(fd);
	if (p == MAP_FAILED)
		return -err;
	int found = memcmp(p, pool_magic, sizeof(pool_magic)) == 0;
	munmap(p, len);
	return found;
}
