/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * copyout_dir.c -- a copy-out directory without a running job
 * (pmck_copyout_list, pmck_copyout_clean; issues #21, #22, #24).
 *
 *   - listing: complete and incomplete steps, files with ranks, sizes and
 *     temporary leftovers, markers of every format (recorded fields, an
 *     older marker whose layout comes from its rank-00000 file, one whose
 *     layout cannot be told, an unreadable one); names that are not steps
 *     are not listed.
 *   - clean per lineage: an old run of layout A (steps 1337..1339) and a new
 *     run of layout B (1..3) with keep 2 keep two of each; a same-layout
 *     restart at lower step numbers (higher generation) keeps the new
 *     run's steps; another world size is its own lineage.
 *   - a dry run reports the same decisions and changes nothing.
 *   - temporary files of kept steps and incomplete steps are removed,
 *     steps of unknown lineage are left alone and reported, an older
 *     marker (generation 0) ranks below a recorded generation.
 *   - errors: keep 0, unknown flags, a missing directory; a report that
 *     returns non-zero stops the clean.
 *
 * Markers are written by hand in the documented format (include/pmckpt.h);
 * the one rank file whose layout is read is a real one (pmck_safetensors_write).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>

#include "pmckpt.h"
#include "tap.h"
#include "copyout_util.h"

static const struct pmck_tensor_desc layout[] = {
	{.name = "w", .dtype = PMCK_DTYPE_F32, .ndim = 2, .shape = {16, 10}, .layer = 0},
	{.name = "step", .dtype = PMCK_DTYPE_I64, .ndim = 0, .layer = 1},
};
#define N (sizeof(layout) / sizeof(layout[0]))

static void
put_file(const char *dir, uint64_t step, const char *leaf, const char *text)
{
	char p[PATH_MAX];
	fmtp(p, sizeof(p), "%s/step-%012" PRIu64, dir, step);
	mkdir(p, 0755);
	if (!leaf)
		return;
	fmtp(p, sizeof(p), "%s/step-%012" PRIu64 "/%s", dir, step, leaf);
	FILE *f = fopen(p, "w");
	if (!f || fputs(text, f) < 0 || fclose(f)) {
		printf("Bail out! write %s: %s\n", p, strerror(errno));
		exit(1);
	}
}

/* A complete step of lineage (layout, world) and generation gen: a rank file per rank. */
static void
put_step(const char *dir, uint64_t step, const char *layout_hex, unsigned world, unsigned gen)
{
	char m[256], leaf[64];
	for (unsigned r = 0; r < world; r++) {
		fmtp(leaf, sizeof(leaf), "rank-%05u.safetensors", r);
		put_file(dir, step, leaf, "data");
	}
	fmtp(m, sizeof(m), "{\"step\": %" PRIu64 ", \"world_size\": %u, \"layout_hash\": \"%s\", "
			"\"generation\": %u}\n", step, world, layout_hex, gen);
	put_file(dir, step, "COMPLETE", m);
}

static int
exists(const char *dir, uint64_t step, const char *leaf)
{
	char p[PATH_MAX];
	struct stat st;
	if (leaf)
		fmtp(p, sizeof(p), "%s/step-%012" PRIu64 "/%s", dir, step, leaf);
	else
		fmtp(p, sizeof(p), "%s/step-%012" PRIu64, dir, step);
	return stat(p, &st) == 0;
}

/* The step numbers present in dir, ascending, as "1,2,3". */
static void
present(const char *dir, char *buf, size_t len)
{
	struct pmck_copyout_listing *l;
	size_t o = 0;
	buf[0] = 0;
	if (pmck_copyout_list(dir, &l))
		return;
	for (size_t i = 0; i < l->nsteps && o < len; i++)
		o += (size_t)snprintf(buf + o, len - o, "%s%" PRIu64, i ? "," : "", l->steps[i].step);
	pmck_copyout_listing_free(&l);
}

/* What a clean reported, one string per action: "K:3,2 R:1 I:6 T:5/x.tmp U:7". */
struct log {
	char kept[256], removed[256], incomplete[256], tmp[256], unknown[256];
	unsigned events, stop_after;
	size_t pos_of_first_removed;
};

static void
add(char *s, size_t len, const char *what)
{
	size_t o = strlen(s);
	snprintf(s + o, len - o, "%s%s", o ? "," : "", what);
}

static int
record(void *arg, const struct pmck_clean_event *ev)
{
	struct log *g = arg;
	char w[320];
	fmtp(w, sizeof(w), "%" PRIu64, ev->step->step);
	switch (ev->action) {
	case PMCK_CLEAN_KEPT: add(g->kept, sizeof(g->kept), w); break;
	case PMCK_CLEAN_REMOVED:
		if (!g->removed[0])
			g->pos_of_first_removed = ev->lineage_pos;
		add(g->removed, sizeof(g->removed), w);
		break;
	case PMCK_CLEAN_INCOMPLETE: add(g->incomplete, sizeof(g->incomplete), w); break;
	case PMCK_CLEAN_TEMPORARY:
		fmtp(w, sizeof(w), "%" PRIu64 "/%s", ev->step->step, ev->file->name);
		add(g->tmp, sizeof(g->tmp), w);
		break;
	case PMCK_CLEAN_UNKNOWN: add(g->unknown, sizeof(g->unknown), w); break;
	}
	g->events++;
	return g->stop_after && g->events == g->stop_after ? -ECANCELED : 0;
}

static void
is_str(const char *got, const char *want, const char *name)
{
	if (!ok(!strcmp(got, want), "%s", name))
		diag("got '%s', expected '%s'", got, want);
}

static int
clean(const char *dir, unsigned keep, unsigned flags, struct log *g)
{
	memset(g, 0, sizeof(*g));
	int ret = pmck_copyout_clean(dir, keep, flags, record, g);
	if (ret)
		diag("clean: %s", pmck_errormsg());
	return ret;
}

/* A real rank file of `layout` at step 8, for an older marker whose layout is read from it. */
static uint64_t
real_rank_file(const char *rd, const char *path)
{
	struct pmck_local_opts lo = {.ramdisk_dir = rd, .store_name = "dirtest", .descs = layout,
			.ndescs = N};
	struct pmck_local l;
	struct pmck_recovery rec;
	if (pmck_local_open(&lo, &l)) {
		printf("Bail out! local open: %s\n", pmck_errormsg());
		exit(1);
	}
	uint8_t **src = make_srcs(layout, N, 8);
	if (commit_step(l.store, src, N, 8) || pmck_store_recover(l.store, &rec) ||
	    pmck_safetensors_write(l.store, path, 0, 1)) {
		printf("Bail out! rank file: %s\n", pmck_errormsg());
		exit(1);
	}
	uint64_t h = pmck_store_layout_hash(l.store);
	free_srcs(src, N);
	pmck_local_close(&l);
	return h;
}

static void
test_listing(const char *dir, const char *rd, uint64_t *real_hash)
{
	char p[PATH_MAX], hex[32];

	put_step(dir, 5, "00000000000000aa", 2, 3);
	put_file(dir, 5, "rank-00001.safetensors.tmp", "partial");
	put_file(dir, 6, "rank-00000.safetensors.tmp", "abc");          /* incomplete */
	put_file(dir, 7, "rank-00000.safetensors", "data");
	put_file(dir, 7, "COMPLETE", "{\"step\": 7, \"world_si");        /* unreadable */
	put_file(dir, 8, "COMPLETE", "{\"step\": 8, \"world_size\": 1}"); /* older pmckpt */
	fmtp(p, sizeof(p), "%s/step-%012d/rank-00000.safetensors", dir, 8);
	*real_hash = real_rank_file(rd, p);
	put_file(dir, 9, "rank-00000.safetensors", "no header");
	put_file(dir, 9, "COMPLETE", "{\"step\": 9}");                   /* layout unknown */
	fmtp(hex, sizeof(hex), "%016" PRIx64, *real_hash);
	put_step(dir, 4, hex, 1, 1);                                     /* the same lineage as 8 */
	/* Not steps: a non-canonical name, a file with a step's name, other files. */
	fmtp(p, sizeof(p), "%s/step-11", dir);
	mkdir(p, 0755);
	fmtp(p, sizeof(p), "%s/step-000000000012", dir);
	fclose(fopen(p, "w"));
	fmtp(p, sizeof(p), "%s/notes.txt", dir);
	fclose(fopen(p, "w"));

	struct pmck_copyout_listing *l = (void *)1;
	int ret = pmck_copyout_list(dir, &l);
	if (!ok(ret == 0 && l, "pmck_copyout_list")) {
		diag("%s", pmck_errormsg());
		return;
	}
	is_int(l->nsteps, 6, "six steps: 4..9; step-11, a file step-000000000012 and notes.txt are not steps");
	uint64_t sum = 0;
	for (size_t i = 0; i < l->nsteps; i++) {
		is_int(l->steps[i].step, 4 + i, "steps ascending: %zu", i);
		sum += l->steps[i].bytes;
	}
	is_int(l->bytes, sum, "listing bytes = sum of the steps'");
	is_str(l->dir, dir, "listing names its directory");

	const struct pmck_copyout_step *s5 = &l->steps[1], *s6 = &l->steps[2], *s7 = &l->steps[3],
			*s8 = &l->steps[4], *s9 = &l->steps[5];
	ok(s5->complete && s5->marker_ok && s5->has_world_size && s5->has_layout_hash &&
	   s5->has_generation && s5->world_size == 2 && s5->layout_known &&
	   s5->layout_hash == 0xaa && s5->generation == 3,
	   "step 5: complete, marker fields recorded (world size 2, layout aa, generation 3)");
	is_str(s5->name, "step-000000000005", "step 5's directory name");
	ok(s5->nfiles == 4 && !strcmp(s5->files[0].name, "COMPLETE") && s5->files[0].rank == -1 &&
	   s5->files[1].rank == 0 && !s5->files[1].temporary && s5->files[2].rank == 1 &&
	   !strcmp(s5->files[3].name, "rank-00001.safetensors.tmp") && s5->files[3].temporary &&
	   s5->files[3].rank == -1 && s5->files[3].bytes == 7,
	   "step 5's files sorted by name: marker, rank 0, rank 1, a temporary file of 7 bytes");
	uint64_t fsum = 0;
	for (size_t k = 0; k < s5->nfiles; k++)
		fsum += s5->files[k].bytes;
	is_int(s5->bytes, fsum, "step bytes = sum of its files'");
	ok(!s6->complete && !s6->marker_ok && s6->world_size == 0 && !s6->layout_known &&
	   s6->nfiles == 1 && s6->files[0].temporary && s6->bytes == 3,
	   "step 6: incomplete, one temporary file, no marker fields");
	ok(s7->complete && !s7->marker_ok && s7->world_size == 0 && !s7->layout_known,
	   "step 7: complete, unreadable marker");
	ok(s8->complete && s8->marker_ok && s8->has_world_size && !s8->has_layout_hash &&
	   !s8->has_generation && s8->layout_known && s8->layout_hash == *real_hash &&
	   s8->generation == 0 && s8->world_size == 1,
	   "step 8, older marker: layout read from its rank-00000 file, generation 0 (not recorded)");
	ok(s9->complete && s9->marker_ok && !s9->has_world_size && s9->world_size == 1 &&
	   !s9->layout_known && !s9->has_generation,
	   "step 9, marker with step only: world size 1 (not recorded), layout unknown");
	pmck_copyout_listing_free(&l);
	ok(l == NULL, "pmck_copyout_listing_free sets the pointer NULL");
	pmck_copyout_listing_free(&l);
	pmck_copyout_listing_free(NULL);
}

static void
test_clean_mixed(const char *dir)
{
	struct log g;
	char before[256], after[256];

	/* Dry run first: the same report, nothing changes. */
	present(dir, before, sizeof(before));
	uint64_t bytes = tree_bytes(dir);
	is_int(clean(dir, 1, PMCK_CLEAN_DRY_RUN, &g), 0, "dry run");
	present(dir, after, sizeof(after));
	ok(!strcmp(before, after) && tree_bytes(dir) == bytes && exists(dir, 5,
	   "rank-00001.safetensors.tmp"), "dry run removes nothing (steps %s, same bytes)", after);
	is_str(g.kept, "5,4", "dry run: would keep 5 (lineage aa/2) and 4 (generation 1 of its lineage)");
	is_str(g.removed, "8", "dry run: would remove 8 (generation 0, older than 4 in its lineage)");

	is_int(clean(dir, 1, 0, &g), 0, "clean keep 1");
	is_str(g.kept, "5,4", "kept 5 and 4");
	is_str(g.removed, "8", "removed 8: an older marker ranks below a recorded generation");
	is_int(g.pos_of_first_removed, 1, "step 8 is position 1 of its lineage");
	is_str(g.incomplete, "6", "removed incomplete 6");
	is_str(g.tmp, "5/rank-00001.safetensors.tmp", "removed the temporary file of kept step 5");
	is_str(g.unknown, "9,7", "left 9 (layout unknown) and 7 (unreadable marker), newest first");
	present(dir, after, sizeof(after));
	is_str(after, "4,5,7,9", "steps 4, 5, 7, 9 remain");
	ok(!exists(dir, 5, "rank-00001.safetensors.tmp") && exists(dir, 5, "rank-00001.safetensors") &&
	   exists(dir, 5, "COMPLETE"), "step 5 keeps its marker and rank files, loses the *.tmp");
	ok(exists(dir, 7, "COMPLETE") && exists(dir, 7, "rank-00000.safetensors") &&
	   exists(dir, 9, "rank-00000.safetensors"), "steps of unknown lineage untouched");
	ok(!exists(dir, 6, NULL) && !exists(dir, 8, NULL), "steps 6 and 8 are gone, directories included");
}

/* An old run of layout A at 1337..1339, a new run of layout B at 1..3. */
static void
test_clean_two_layouts(const char *dir)
{
	struct log g;
	char left[256];

	for (unsigned s = 1337; s <= 1339; s++)
		put_step(dir, s, "00000000000000aa", 1, 1);
	for (unsigned s = 1; s <= 3; s++)
		put_step(dir, s, "00000000000000bb", 1, 1);
	is_int(clean(dir, 2, 0, &g), 0, "two layouts, keep 2");
	is_str(g.kept, "1339,1338,3,2", "keeps two of each layout (not 1337..1339 and nothing of B)");
	is_str(g.removed, "1337,1", "removes the oldest of each");
	present(dir, left, sizeof(left));
	is_str(left, "2,3,1338,1339", "the new run's steps 2 and 3 survive");
}

/* A same-layout restart: generation 2 at steps 1..3 next to generation 1 at 1337..1339. */
static void
test_clean_restart(const char *dir)
{
	struct log g;
	char left[256];

	for (unsigned s = 1337; s <= 1339; s++)
		put_step(dir, s, "00000000000000aa", 1, 1);
	for (unsigned s = 1; s <= 3; s++)
		put_step(dir, s, "00000000000000aa", 1, 2);
	put_step(dir, 50, "00000000000000aa", 2, 1); /* another world size: its own lineage */
	is_int(clean(dir, 2, 0, &g), 0, "same-layout restart, keep 2");
	is_str(g.kept, "50,3,2", "keeps the new run's 3 and 2 (generation 2) and the world-size-2 step");
	is_str(g.removed, "1339,1338,1337,1", "removes the old run's steps and the new run's oldest");
	present(dir, left, sizeof(left));
	is_str(left, "2,3,50", "only 2, 3 and 50 remain");
}

static void
test_errors(const char *dir, const char *base)
{
	struct log g = {0};
	struct pmck_copyout_listing *l = (void *)1;
	char missing[PATH_MAX];

	is_int(pmck_copyout_clean(dir, 0, 0, record, &g), -EINVAL, "keep 0: -EINVAL");
	is_int(pmck_copyout_clean(dir, 1, 0x80, record, &g), -EINVAL, "unknown flags: -EINVAL");
	fmtp(missing, sizeof(missing), "%s/nosuch", base);
	is_int(pmck_copyout_list(missing, &l), -ENOENT, "list of a missing directory: -ENOENT");
	ok(l == NULL, "... and *out is NULL");
	ok(strstr(pmck_errormsg(), "nosuch") != NULL, "... the message names it");
	is_int(pmck_copyout_clean(missing, 1, 0, NULL, NULL), -ENOENT, "clean of a missing directory: -ENOENT");

	/* A report that returns non-zero stops the clean there. */
	for (unsigned s = 1; s <= 3; s++)
		put_step(dir, s, "00000000000000cc", 1, 1);
	memset(&g, 0, sizeof(g));
	g.stop_after = 1;
	is_int(pmck_copyout_clean(dir, 1, 0, record, &g), -ECANCELED, "the report's non-zero return is returned");
	ok(exists(dir, 2, NULL) && exists(dir, 1, NULL), "and nothing after the first decision was done");
	is_int(pmck_copyout_clean(dir, 1, 0, NULL, NULL), 0, "report may be NULL");
	ok(!exists(dir, 2, NULL) && !exists(dir, 1, NULL) && exists(dir, 3, NULL), "keep 1 left step 3 only");
}

int
main(void)
{
	char *rd = make_tmpdir("/dev/shm", "cdir-rd"), *base = make_tmpdir("/var/tmp", "cdir");
	char d1[PATH_MAX], d2[PATH_MAX], d3[PATH_MAX], d4[PATH_MAX];
	uint64_t real_hash;

	fmtp(d1, sizeof(d1), "%s/mixed", base);
	fmtp(d2, sizeof(d2), "%s/layouts", base);
	fmtp(d3, sizeof(d3), "%s/restart", base);
	fmtp(d4, sizeof(d4), "%s/errors", base);
	mkdir(d1, 0755), mkdir(d2, 0755), mkdir(d3, 0755), mkdir(d4, 0755);

	test_listing(d1, rd, &real_hash);
	test_clean_mixed(d1);
	test_clean_two_layouts(d2);
	test_clean_restart(d3);
	test_errors(d4, base);

	rm_rf(rd);
	rm_rf(base);
	free(rd);
	free(base);
	return done_testing();
}
