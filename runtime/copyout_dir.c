/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * copyout_dir.c -- a copy-out directory without a running job: listing
 * (pmck_copyout_list) and retention of every lineage (pmck_copyout_clean).
 *
 * Both are built on shared_dir.c's reading of the directory
 * (pmck__list_steps: which names are steps, what a marker says) and on the
 * copier's order (pmck__order_ours: newest first by (generation, step)
 * within a layout and world size), so that the tool, the copier and
 * recovery agree on every rule.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "internal.h"

/* A file as found, before the listing is packed into one block. */
struct found {
	char name[NAME_MAX + 1];
	uint64_t bytes;
};

struct found_step {
	struct found *f;
	size_t n;
};

static int
cmp_found(const void *a, const void *b)
{
	return strcmp(((const struct found *)a)->name, ((const struct found *)b)->name);
}

/* rank-00003.safetensors -> 3; -1 for other names. */
static int
rank_of(const char *name)
{
	unsigned r;
	int n = 0;

	if (sscanf(name, "rank-%u.safetensors%n", &r, &n) == 1 && name[n] == 0 && r <= INT_MAX &&
	    name[5] >= '0' && name[5] <= '9')
		return (int)r;
	return -1;
}

/* The files of DIR/<name> sorted by name; none if it vanished meanwhile. */
static int
scan_step(const char *dir, const char *name, struct found_step *fs)
{
	char path[PATH_MAX], file[PATH_MAX + NAME_MAX + 2];
	size_t cap = 0;
	struct dirent *de;
	struct stat st;

	memset(fs, 0, sizeof(*fs));
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	DIR *d = opendir(path);
	if (!d)
		return 0;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		snprintf(file, sizeof(file), "%s/%s", path, de->d_name);
		if (lstat(file, &st))
			continue; /* removed meanwhile */
		if (fs->n == cap) {
			struct found *f = realloc(fs->f, (cap = cap ? 2 * cap : 8) * sizeof(*f));
			if (!f) {
				closedir(d);
				return pma__err(-ENOMEM, "out of memory");
			}
			fs->f = f;
		}
		snprintf(fs->f[fs->n].name, sizeof(fs->f[fs->n].name), "%s", de->d_name);
		fs->f[fs->n++].bytes = (uint64_t)st.st_size;
	}
	closedir(d);
	if (fs->n)
		qsort(fs->f, fs->n, sizeof(*fs->f), cmp_found);
	return 0;
}

/* What DIR/quarantine holds: steps moved aside by recovery (see quarantine.c). */
struct found_q {
	char name[NAME_MAX + 1];
	uint64_t step;
	char *note;
};

static int
cmp_q(const void *a, const void *b)
{
	return strcmp(((const struct found_q *)a)->name, ((const struct found_q *)b)->name);
}

/* Its NOTE, at most 4 KiB ("" if unreadable). */
static char *
read_note(const char *path)
{
	char *buf = calloc(1, 4097);
	FILE *f = buf ? fopen(path, "r") : NULL;
	if (f) {
		size_t n = fread(buf, 1, 4096, f);
		buf[n] = 0;
		fclose(f);
	}
	return buf;
}

/* The entries DIR/quarantine/step-<digits>-..., sorted by name; none if it does not exist. */
static int
scan_quarantine(const char *dir, struct found_q **out, size_t *n)
{
	char path[PATH_MAX], file[PATH_MAX + NAME_MAX + 8];
	size_t cap = 0;
	struct dirent *de;

	*out = NULL;
	*n = 0;
	snprintf(path, sizeof(path), "%s/" PMCK_QUARANTINE, dir);
	DIR *d = opendir(path);
	if (!d)
		return 0;
	while ((de = readdir(d))) {
		char *end;
		if (strncmp(de->d_name, "step-", 5) || de->d_name[5] < '0' || de->d_name[5] > '9')
			continue;
		uint64_t step = strtoull(de->d_name + 5, &end, 10);
		if (*n == cap) {
			struct found_q *q = realloc(*out, (cap = cap ? 2 * cap : 4) * sizeof(*q));
			if (!q) {
				closedir(d);
				return pma__err(-ENOMEM, "out of memory");
			}
			*out = q;
		}
		struct found_q *q = &(*out)[(*n)++];
		snprintf(q->name, sizeof(q->name), "%s", de->d_name);
		q->step = step;
		snprintf(file, sizeof(file), "%s/%s/NOTE", path, de->d_name);
		if (!(q->note = read_note(file))) {
			closedir(d);
			return pma__err(-ENOMEM, "out of memory");
		}
	}
	closedir(d);
	if (*n)
		qsort(*out, *n, sizeof(**out), cmp_q);
	return 0;
}

/* Copies s into the string area at *p and returns where it went. */
static const char *
put_str(char **p, const char *s)
{
	size_t n = strlen(s) + 1;
	char *at = *p;
	memcpy(at, s, n);
	*p += n;
	return at;
}

/*
 * The listing of dir, and the pmck__steps it was made from (l, newest
 * first): listing step j is l's step l->n - 1 - j.
 */
static int
list_dir(const char *dir, struct pmck__steps *l, struct pmck_copyout_listing **out)
{
	struct found_step *fs = NULL;
	struct found_q *fq = NULL;
	size_t nfiles = 0, strbytes = strlen(dir) + 1, nq = 0;
	char name[64];
	int ret;

	*out = NULL;
	if ((ret = pmck__list_steps(dir, l)))
		return ret;
	if (!(fs = calloc(l->n + 1, sizeof(*fs)))) {
		ret = pma__err(-ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < l->n; i++) {
		snprintf(name, sizeof(name), "step-%012" PRId64, l->step[i]);
		if ((ret = scan_step(dir, name, &fs[i])))
			goto out;
		nfiles += fs[i].n;
		strbytes += strlen(name) + 1;
		for (size_t k = 0; k < fs[i].n; k++)
			strbytes += strlen(fs[i].f[k].name) + 1;
	}

	if ((ret = scan_quarantine(dir, &fq, &nq)))
		goto out;
	for (size_t k = 0; k < nq; k++)
		strbytes += strlen(fq[k].name) + strlen(fq[k].note) + 2;

	/* One block: the listing, its steps, their files, quarantined steps, then every string. */
	size_t size = sizeof(**out) + l->n * sizeof(struct pmck_copyout_step) +
		      nfiles * sizeof(struct pmck_copyout_file) +
		      nq * sizeof(struct pmck_quarantined) + strbytes;
	char *block = calloc(1, size);
	if (!block) {
		ret = pma__err(-ENOMEM, "out of memory");
		goto out;
	}
	struct pmck_copyout_listing *ls = (void *)block;
	struct pmck_copyout_step *steps = (void *)(ls + 1);
	struct pmck_copyout_file *files = (void *)(steps + l->n);
	struct pmck_quarantined *quar = (void *)(files + nfiles);
	char *str = (char *)(quar + nq);

	ls->dir = put_str(&str, dir);
	ls->nsteps = l->n;
	ls->steps = steps;
	for (size_t j = 0; j < l->n; j++) {
		size_t i = l->n - 1 - j;
		const struct pmck__marker *m = &l->m[i];
		struct pmck_copyout_step *s = &steps[j];

		snprintf(name, sizeof(name), "step-%012" PRId64, l->step[i]);
		s->step = (uint64_t)l->step[i];
		s->name = put_str(&str, name);
		s->complete = l->complete[i];
		if (s->complete) {
			s->marker_ok = m->readable;
			s->has_world_size = m->has_world;
			s->has_layout_hash = m->recorded_layout;
			s->has_generation = m->has_generation;
			s->world_size = m->world_size;
			s->layout_known = m->has_layout;
			s->layout_hash = m->layout_hash;
			s->generation = m->generation;
		}
		s->files = files;
		s->nfiles = fs[i].n;
		for (size_t k = 0; k < fs[i].n; k++, files++) {
			files->name = put_str(&str, fs[i].f[k].name);
			files->rank = rank_of(files->name);
			files->temporary = pmck__is_tmp(files->name);
			files->bytes = fs[i].f[k].bytes;
			s->bytes += files->bytes;
		}
		ls->bytes += s->bytes;
	}
	ls->nquarantined = nq;
	ls->quarantined = quar;
	for (size_t k = 0; k < nq; k++) {
		quar[k].step = fq[k].step;
		quar[k].name = put_str(&str, fq[k].name);
		quar[k].note = put_str(&str, fq[k].note);
	}
	*out = ls;
out:
	for (size_t k = 0; k < nq; k++)
		free(fq[k].note);
	free(fq);
	for (size_t i = 0; fs && i < l->n; i++)
		free(fs[i].f);
	free(fs);
	if (ret)
		pmck__free_steps(l);
	return ret;
}

int
pmck_copyout_list(const char *dir, struct pmck_copyout_listing **out)
{
	struct pmck__steps l;

	if (!out)
		return pma__err(-EINVAL, "pmck_copyout_list: out is required");
	*out = NULL;
	if (!dir || !*dir)
		return pma__err(-EINVAL, "pmck_copyout_list: dir is required");
	int ret = list_dir(dir, &l, out);
	if (!ret)
		pmck__free_steps(&l);
	return ret;
}

void
pmck_copyout_listing_free(struct pmck_copyout_listing **l)
{
	if (!l)
		return;
	free(*l);
	*l = NULL;
}

/*
 * Retention per lineage: retention.c's rule (the copier's), for every
 * lineage in the directory instead of one, and for every incomplete step
 * (no job is running).
 */
int
pmck_copyout_clean(const char *dir, unsigned keep, unsigned flags,
		int (*report)(void *arg, const struct pmck_clean_event *ev), void *arg)
{
	static const enum pmck_clean_action action[] = {
		[PMCK__LEAVE] = PMCK_CLEAN_UNKNOWN,
		[PMCK__KEEP] = PMCK_CLEAN_KEPT,
		[PMCK__REMOVE] = PMCK_CLEAN_REMOVED,
		[PMCK__REMOVE_INCOMPLETE] = PMCK_CLEAN_INCOMPLETE,
	};
	struct pmck__retention r = {
		.keep = keep,
		.flags = PMCK__RETAIN_EVERY_LINEAGE | PMCK__RETAIN_ALL_INCOMPLETE,
	};
	struct pmck_copyout_listing *ls;
	struct pmck__steps l;
	int dry = flags & PMCK_CLEAN_DRY_RUN, ret;

	if (!dir || !*dir)
		return pma__err(-EINVAL, "pmck_copyout_clean: dir is required");
	if (!keep)
		return pma__err(-EINVAL, "pmck_copyout_clean: keep 0 would remove every step");
	if (flags & ~PMCK_CLEAN_DRY_RUN)
		return pma__err(-EINVAL, "pmck_copyout_clean: unknown flags %#x", flags);
	if ((ret = list_dir(dir, &l, &ls)))
		return ret;

	struct pmck__verdict *v = NULL;
	ret = pmck__retention_decide(&l, &r, &v);

	for (size_t i = 0; i < l.n && !ret; i++) {
		const struct pmck_copyout_step *s = &ls->steps[l.n - 1 - i];
		struct pmck_clean_event ev = {action[v[i].fate], s, NULL, v[i].lineage_pos};

		if (v[i].fate == PMCK__KEEP) {
			/* A kept step's *.tmp files: a re-copy of it killed halfway. */
			if (!dry && (ret = pmck__remove_tmp(dir, s->name)))
				break;
			for (size_t k = 0; k < s->nfiles && report && !ret; k++)
				if (s->files[k].temporary) {
					struct pmck_clean_event t = {PMCK_CLEAN_TEMPORARY, s,
							&s->files[k], v[i].lineage_pos};
					ret = report(arg, &t);
				}
			if (ret)
				break;
		}
		if (!dry && (v[i].fate == PMCK__REMOVE || v[i].fate == PMCK__REMOVE_INCOMPLETE) &&
		    (ret = pmck__remove_step(dir, s->name)))
			break;
		if (report)
			ret = report(arg, &ev);
	}
	free(v);
	pmck__free_steps(&l);
	pmck_copyout_listing_free(&ls);
	return ret;
}
