/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * copyout_dir.c -- fuzzes what the runtime reads from a shared copy-out
 * directory (runtime/copyout_dir.c, shared_dir.c, quarantine.c, and the
 * shared tier of recovery in copyout.c): step directories, COMPLETE
 * markers, rank files, quarantine notes and leftovers.
 *
 * Input: a directory tree as records
 *
 *   @@ PATH\n CONTENT        (CONTENT up to the next "\n@@ " or the end)
 *
 * PATH is relative, of components made of [A-Za-z0-9._-] (no "." or "..",
 * at most 4 deep, else the record is skipped); a PATH ending in "/" makes a
 * directory.  The tree is made afresh in a tmpfs directory for each input.
 *
 * Then pmck_copyout_list, pmck_copyout_clean (dry run), pmck_recover_tiers
 * for a store of the fixture's layout that holds no checkpoint (so the
 * shared tier is read, and damaged steps quarantined), pmck_copyout_clean
 * keeping one step, and pmck_copyout_list again.  Promises checked: the
 * listing is in ascending step order with sorted files; recovery from the
 * shared tier loads a checkpoint that reads back and exports; after a clean
 * no incomplete step is left.
 */
#define FUZZ_NAME "copyout_dir"
#include "driver.h"

#include <fcntl.h>

#include "fixture.h"

#define MAX_RECORDS 48

static struct fixture fx;
static char tree[256];

static int
path_ok(const char *p, size_t len)
{
	int depth = 0;
	size_t comp = 0;

	if (len == 0 || len > 200)
		return 0;
	for (size_t i = 0; i < len; i++) {
		char c = p[i];
		if (c == '/') {
			if (comp == 0)
				return 0;
			if ((comp == 1 && p[i - 1] == '.') ||
			    (comp == 2 && p[i - 1] == '.' && p[i - 2] == '.'))
				return 0;
			comp = 0;
			if (++depth > 4)
				return 0;
			continue;
		}
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-'))
			return 0;
		comp++;
	}
	if (comp && ((comp == 1 && p[len - 1] == '.') ||
		     (comp == 2 && p[len - 1] == '.' && p[len - 2] == '.')))
		return 0;
	return 1;
}

/* mkdir -p of the directories in rel (all of it when dir_too, else up to its last '/'). */
static void
make_parents(const char *rel, int dir_too)
{
	char path[512];
	int n = snprintf(path, sizeof(path), "%s/%s", tree, rel);
	size_t base_len = strlen(tree) + 1;
	for (int i = (int)base_len; i < n; i++)
		if (path[i] == '/') {
			path[i] = '\0';
			mkdir(path, 0755);
			path[i] = '/';
		}
	if (dir_too)
		mkdir(path, 0755);
}

static void
build_tree(const uint8_t *data, size_t len)
{
	const char *p = (const char *)data, *end = p + len;
	unsigned records = 0;

	fuzz_fresh_dir(tree);
	if (len < 3 || memcmp(p, "@@ ", 3))
		return;
	p += 3;
	while (p < end && records++ < MAX_RECORDS) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		if (!nl)
			break;
		const char *content = nl + 1, *next = content, *stop = end;
		while ((next = memmem(next, (size_t)(end - next), "\n@@ ", 4))) {
			stop = next;
			break;
		}
		char rel[256];
		size_t plen = (size_t)(nl - p);
		if (path_ok(p, plen)) {
			memcpy(rel, p, plen);
			rel[plen] = '\0';
			if (rel[plen - 1] == '/') {
				make_parents(rel, 1);
			} else {
				make_parents(rel, 0);
				char path[512];
				snprintf(path, sizeof(path), "%s/%s", tree, rel);
				int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
				if (fd >= 0) {
					if (write(fd, content, (size_t)(stop - content)) < 0)
						(void)0; /* a directory of that name, etc.: the tree is what it is */
					close(fd);
				}
			}
		}
		if (stop == end)
			break;
		p = stop + 4;
	}
}

static void
check_listing(const struct pmck_copyout_listing *l)
{
	for (size_t i = 0; i < l->nsteps; i++) {
		const struct pmck_copyout_step *s = &l->steps[i];
		fuzz_assert(i == 0 || l->steps[i - 1].step < s->step, "steps out of order");
		fuzz_assert(s->name && !strncmp(s->name, "step-", 5), "step name '%s'", s->name);
		for (size_t k = 1; k < s->nfiles; k++)
			fuzz_assert(strcmp(s->files[k - 1].name, s->files[k].name) < 0,
					"files of %s out of order", s->name);
		fuzz_assert(s->marker_ok <= s->complete, "a marker read without COMPLETE");
	}
	for (size_t i = 0; i < l->nquarantined; i++)
		fuzz_assert(l->quarantined[i].name && l->quarantined[i].note, "quarantined %zu", i);
}

static int
on_clean(void *arg, const struct pmck_clean_event *ev)
{
	(void)arg;
	fuzz_assert(ev->step && (ev->action == PMCK_CLEAN_TEMPORARY) == (ev->file != NULL),
			"clean event %d", (int)ev->action);
	return 0;
}

static void
fuzz_one(const uint8_t *data, size_t len)
{
	if (!fx.region) {
		fix_setup(&fx, "store", 0);
		snprintf(tree, sizeof(tree), "%s/shared", fuzz_dir());
	}
	fix_restore(&fx);
	build_tree(data, len);

	struct pmck_copyout_listing *l = NULL;
	int rc = pmck_copyout_list(tree, &l);
	fuzz_check_error(rc, pmck_errormsg());
	fuzz_assert(rc == 0, "listing a directory: %s", pmck_errormsg());
	check_listing(l);
	pmck_copyout_listing_free(&l);

	rc = pmck_copyout_clean(tree, 1, PMCK_CLEAN_DRY_RUN, on_clean, NULL);
	fuzz_check_error(rc, pmck_errormsg());

	struct pmck_tier_recovery tr;
	rc = pmck_recover_tiers(fx.s, tree, 0, &tr);
	fuzz_check_error(rc, pmck_errormsg());
	if (rc == 0) {
		fuzz_assert(tr.tier == PMCK_TIER_SHARED, "a checkpoint in an empty store");
		uint8_t buf[256];
		for (size_t i = 0; i < FIX_NTENSORS; i++)
			fuzz_assert(pmck_store_read(fx.s, i, buf) == 0, "read of tensor %zu: %s", i,
					pmck_errormsg());
	}
	size_t nrej;
	const struct pmck_rejection *rej = pmck_store_rejections(fx.s, &nrej);
	for (size_t i = 0; i < nrej; i++)
		fuzz_assert(rej[i].reason[0], "rejection %zu without a reason", i);

	rc = pmck_copyout_clean(tree, 1, 0, on_clean, NULL);
	fuzz_check_error(rc, pmck_errormsg());
	int cleaned = rc == 0;
	rc = pmck_copyout_list(tree, &l);
	fuzz_assert(rc == 0, "listing after clean: %s", pmck_errormsg());
	check_listing(l);
	for (size_t i = 0; cleaned && i < l->nsteps; i++)
		fuzz_assert(l->steps[i].complete, "clean left incomplete %s", l->steps[i].name);
	pmck_copyout_listing_free(&l);
}

static int first_record;

/* Starts a record: the "\n" before "@@ " ends the previous one's content. */
static void
record(FILE *out, const char *rel, const char *slash)
{
	fprintf(out, "%s@@ %s%s\n", first_record ? "" : "\n", rel, slash);
	first_record = 0;
}

/* Appends root/rel as records (rel "": the whole tree). */
static void
serialise(FILE *out, const char *root, const char *rel)
{
	char path[4096];
	struct stat st;
	snprintf(path, sizeof(path), "%s%s%s", root, *rel ? "/" : "", rel);
	if (stat(path, &st))
		abort();
	if (S_ISDIR(st.st_mode)) {
		struct dirent **names;
		int n = scandir(path, &names, NULL, alphasort);
		if (n < 0)
			abort();
		if (*rel && n == 2)
			record(out, rel, "/");
		for (int i = 0; i < n; i++) {
			if (names[i]->d_name[0] != '.') {
				char sub[1024];
				snprintf(sub, sizeof(sub), "%s%s%s", rel, *rel ? "/" : "", names[i]->d_name);
				serialise(out, root, sub);
			}
			free(names[i]);
		}
		free(names);
		return;
	}
	record(out, rel, "");
	FILE *f = fopen(path, "rb");
	char buf[4096];
	size_t k;
	while (f && (k = fread(buf, 1, sizeof(buf), f)) > 0)
		fwrite(buf, 1, k, out);
	if (f)
		fclose(f);
}

static void
seed_tree(const char *dir, const char *name, const char *root)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *out = fopen(path, "wb");
	if (!out)
		abort();
	first_record = 1;
	serialise(out, root, "");
	fclose(out);
}

static void
fuzz_seeds(const char *dir)
{
	struct fixture f;
	char shared[512];
	struct pmck_copyout_opts o = {0};
	struct pmck_copyout *c;

	fix_setup(&f, "seed-store", 0);
	snprintf(shared, sizeof(shared), "%s/shared", fuzz_dir());
	o.dir = shared;
	o.keep = 3;
	if (pmck_copyout_new(f.s, &o, &c))
		abort();
	for (uint64_t step = 5; step <= 7; step++)
		if (fix_commit(f.s, step) || pmck_copyout_submit(c) || pmck_copyout_wait(c))
			abort();
	pmck_copyout_delete(&c);
	seed_tree(dir, "three-steps", shared);

	/* Leftovers: an incomplete step and a temporary file. */
	char path[1024];
	snprintf(path, sizeof(path), "%s/step-000000000008", shared);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/step-000000000008/rank-00000.safetensors.tmp", shared);
	fuzz_write_file(path, "partial", 7);
	snprintf(path, sizeof(path), "%s/step-000000000007/rank-00001.safetensors.tmp", shared);
	fuzz_write_file(path, "x", 1);
	seed_tree(dir, "leftovers", shared);

	/* Damaged newest step: recovery rejects it, quarantines it and loads step 6. */
	snprintf(path, sizeof(path), "%s/step-000000000007/rank-00000.safetensors", shared);
	if (truncate(path, 100))
		abort();
	seed_tree(dir, "damaged-newest", shared);

	/* An older marker without generation or layout hash; an unreadable marker. */
	fuzz_seed_text(dir, "old-marker",
			"@@ step-000000000001/COMPLETE\n{\"step\": 1, \"world_size\": 1}\n"
			"@@ step-000000000002/COMPLETE\nnot json\n"
			"@@ quarantine/step-000000000003-20240501T101500Z/NOTE\nrank 0: bad\n"
			"@@ step-42/\n");
	pmck_store_close(&f.s);
}
