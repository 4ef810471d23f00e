/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * shared_dir.c -- the layout of a shared checkpoint directory:
 *
 *   DIR/step-<12+ digits>/rank-<5 digits>.safetensors
 *   DIR/step-<...>/COMPLETE        written last: the step is whole
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

/* "step-000000000042" -> 42; -1 for other names. */
static int64_t
step_of(const char *name)
{
	char *end;
	if (strncmp(name, "step-", 5) || !name[5])
		return -1;
	errno = 0;
	unsigned long long v = strtoull(name + 5, &end, 10);
	return errno || *end || v > INT64_MAX ? -1 : (int64_t)v;
}

int
pmck__step_path(char *buf, size_t len, const char *dir, uint64_t step, const char *leaf)
{
	int n = leaf ? snprintf(buf, len, "%s/step-%012" PRIu64 "/%s", dir, step, leaf)
		     : snprintf(buf, len, "%s/step-%012" PRIu64, dir, step);
	return n < 0 || (size_t)n >= len ? pma__err(-ENAMETOOLONG, "path too long under %s", dir) : 0;
}

/* Removes a step directory and what is in it, then makes that durable. */
int
pmck__remove_step(const char *dir, const char *name)
{
	char path[PATH_MAX], file[PATH_MAX + 512];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	DIR *d = opendir(path);
	if (d) {
		struct dirent *de;
		/* The marker goes first: a crash halfway leaves an incomplete step, never a broken complete one. */
		snprintf(file, sizeof(file), "%s/" PMCK_MARKER, path);
		if (unlink(file) == 0)
			pmck__fsync_dir(path); /* the marker's removal is durable before any file goes */
		while ((de = readdir(d)))
			if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
				snprintf(file, sizeof(file), "%s/%s", path, de->d_name);
				unlink(file);
			}
		closedir(d);
	}
	if (rmdir(path) && errno != ENOENT)
		return pma__err(-errno, "remove %s: %s", path, strerror(errno));
	return pmck__fsync_dir(dir);
}

static int
cmp_desc(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x > y ? -1 : x < y;
}

/* The steps in dir, newest first, each with whether its marker exists. */
int
pmck__list_steps(const char *dir, struct pmck__steps *l)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	size_t cap = 16;
	char path[PATH_MAX];
	struct stat st;

	memset(l, 0, sizeof(*l));
	if (!d)
		return pma__err(-errno, "open %s: %s", dir, strerror(errno));
	l->step = malloc(cap * sizeof(*l->step));
	while (l->step && (de = readdir(d))) {
		int64_t s = step_of(de->d_name);
		if (s < 0)
			continue;
		if (l->n == cap)
			l->step = realloc(l->step, (cap *= 2) * sizeof(*l->step));
		if (l->step)
			l->step[l->n++] = s;
	}
	closedir(d);
	if (!l->step)
		return pma__err(-ENOMEM, "out of memory");
	qsort(l->step, l->n, sizeof(*l->step), cmp_desc);
	l->complete = calloc(l->n + 1, sizeof(*l->complete));
	if (!l->complete)
		return pma__err(-ENOMEM, "out of memory");
	for (size_t i = 0; i < l->n; i++)
		l->complete[i] = !pmck__step_path(path, sizeof(path), dir, (uint64_t)l->step[i], PMCK_MARKER) &&
				 stat(path, &st) == 0;
	return 0;
}

void
pmck__free_steps(struct pmck__steps *l)
{
	free(l->step);
	free(l->complete);
}


int
pmck__remove_tmp(const char *dir, const char *name)
{
	char path[PATH_MAX], file[PATH_MAX + 512];
	int removed = 0;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	DIR *d = opendir(path);
	if (!d)
		return 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		size_t len = strlen(de->d_name);
		if (len > 4 && !strcmp(de->d_name + len - 4, ".tmp")) {
			snprintf(file, sizeof(file), "%s/%s", path, de->d_name);
			removed += unlink(file) == 0;
		}
	}
	closedir(d);
	return removed ? pmck__fsync_dir(path) : 0;
}
