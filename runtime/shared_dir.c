/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * shared_dir.c -- the layout of a shared checkpoint directory:
 *
 *   DIR/step-<12+ digits>/rank-<5 digits>.safetensors
 *   DIR/step-<...>/COMPLETE        written last: the step is whole
 *
 * COMPLETE is one JSON object:
 *
 *   {"step": 42, "world_size": 4, "layout_hash": "<16 hex digits>", "generation": 3}
 *
 * The generation numbers the runs (copiers) that wrote into the directory
 * with one layout: a copier takes 1 + the largest generation it finds for
 * its layout.  Markers written before it existed hold step and world_size
 * only: generation 0, layout from the step's rank-0 file.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

/*
 * "step-000000000042" -> 42; -1 for other names.  Only the name the copier
 * writes for a step (pmck__step_path: at least 12 digits, zero-padded)
 * counts: every path is rebuilt from the number, so "step-42" or
 * "step-+42" would name another directory than the one listed.
 */
static int64_t
step_of(const char *name)
{
	char *end, canon[32];
	if (strncmp(name, "step-", 5) || name[5] < '0' || name[5] > '9')
		return -1;
	errno = 0;
	unsigned long long v = strtoull(name + 5, &end, 10);
	if (errno || *end || v > INT64_MAX)
		return -1;
	snprintf(canon, sizeof(canon), "step-%012llu", v);
	return strcmp(canon, name) ? -1 : (int64_t)v;
}

int
pmck__is_tmp(const char *name)
{
	size_t len = strlen(name);
	return len > 4 && !strcmp(name + len - 4, ".tmp");
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
json_u64(json_object *root, const char *key, uint64_t *v)
{
	json_object *o;
	if (!json_object_object_get_ex(root, key, &o) || !json_object_is_type(o, json_type_int) ||
	    json_object_get_int64(o) < 0)
		return -1;
	*v = (uint64_t)json_object_get_int64(o);
	return 0;
}

/*
 * What the COMPLETE marker at `path` says.  An unreadable marker leaves
 * has_layout 0: such a step belongs to no layout, so retention never
 * removes it (pmck_copyout_clean leaves it alone too).
 */
static void
read_marker(const char *dir, uint64_t step, const char *path, struct pmck__marker *m)
{
	/* Only a regular file, not through a link, and a fifo is not waited on. */
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	struct stat st;
	json_object *root = fd >= 0 && !fstat(fd, &st) && S_ISREG(st.st_mode) ?
			json_object_from_fd(fd) : NULL, *o;
	uint64_t v;
	char file[PATH_MAX];

	if (fd >= 0)
		close(fd);
	memset(m, 0, sizeof(*m));
	if (!root || !json_object_is_type(root, json_type_object)) {
		json_object_put(root);
		return;
	}
	m->readable = 1;
	m->has_world = json_u64(root, "world_size", &v) == 0 && v > 0 && v <= UINT32_MAX;
	m->world_size = m->has_world ? (unsigned)v : 1;
	m->has_generation = json_u64(root, "generation", &v) == 0;
	m->generation = m->has_generation ? v : 0;
	if (json_object_object_get_ex(root, "layout_hash", &o) && json_object_is_type(o, json_type_string)) {
		char *end;
		errno = 0;
		m->layout_hash = strtoull(json_object_get_string(o), &end, 16);
		m->has_layout = !errno && !*end && end != json_object_get_string(o);
		m->recorded_layout = m->has_layout;
	} else if (!pmck__step_path(file, sizeof(file), dir, step, "rank-00000.safetensors")) {
		/* A marker of an older pmckpt: every rank's file carries the layout hash. */
		m->has_layout = pmck__safetensors_layout(file, &m->layout_hash) == 0;
	}
	json_object_put(root);
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
		/* A file with a step's name is not a step: nothing to list or remove. */
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		if (de->d_type != DT_DIR && (de->d_type != DT_UNKNOWN || stat(path, &st) ||
		    !S_ISDIR(st.st_mode)))
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
	l->m = calloc(l->n + 1, sizeof(*l->m));
	if (!l->complete || !l->m) {
		pmck__free_steps(l);
		return pma__err(-ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < l->n; i++) {
		l->complete[i] = !pmck__step_path(path, sizeof(path), dir, (uint64_t)l->step[i], PMCK_MARKER) &&
				 stat(path, &st) == 0;
		if (l->complete[i])
			read_marker(dir, (uint64_t)l->step[i], path, &l->m[i]);
	}
	return 0;
}

int
pmck__step_marker(const char *dir, uint64_t step, struct pmck__marker *m)
{
	char path[PATH_MAX];
	struct stat st;

	memset(m, 0, sizeof(*m));
	if (pmck__step_path(path, sizeof(path), dir, step, PMCK_MARKER) || stat(path, &st))
		return 0;
	read_marker(dir, step, path, m);
	return 1;
}

int
pmck__step_ours(const struct pmck__steps *l, size_t i, uint64_t layout_hash, unsigned world)
{
	return l->complete[i] && l->m[i].has_layout && l->m[i].layout_hash == layout_hash &&
	       (!world || l->m[i].world_size == world);
}

/* Is step i newer than step j: (generation, step) compared in that order. */
static int
newer(const struct pmck__steps *l, size_t i, size_t j)
{
	if (l->m[i].generation != l->m[j].generation)
		return l->m[i].generation > l->m[j].generation;
	return l->step[i] > l->step[j];
}

size_t
pmck__order_ours(const struct pmck__steps *l, uint64_t layout_hash, unsigned world, size_t *idx)
{
	size_t n = 0;

	/* Insertion sort: the list is already ordered by step, so runs of one generation stay put. */
	for (size_t i = 0; i < l->n; i++) {
		if (!pmck__step_ours(l, i, layout_hash, world))
			continue;
		size_t k = n++;
		for (; k > 0 && newer(l, i, idx[k - 1]); k--)
			idx[k] = idx[k - 1];
		idx[k] = i;
	}
	return n;
}

int
pmck__write_marker(const char *stepdir, uint64_t step, const struct pmck__marker *m, mode_t mode)
{
	char text[192];
	int n = snprintf(text, sizeof(text), "{\"step\": %" PRIu64 ", \"world_size\": %u, "
			"\"layout_hash\": \"%016" PRIx64 "\", \"generation\": %" PRIu64 "}\n",
			step, m->world_size, m->layout_hash, m->generation);
	/* Durable before its name appears; from then on the step is complete for every reader. */
	return pmck__write_file_durably(stepdir, PMCK_MARKER, text, (size_t)n, mode);
}

void
pmck__free_steps(struct pmck__steps *l)
{
	free(l->step);
	free(l->complete);
	free(l->m);
	memset(l, 0, sizeof(*l));
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
		if (pmck__is_tmp(de->d_name)) {
			snprintf(file, sizeof(file), "%s/%s", path, de->d_name);
			removed += unlink(file) == 0;
		}
	}
	closedir(d);
	return removed ? pmck__fsync_dir(path) : 0;
}
