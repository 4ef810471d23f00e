/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * pmckpt -- list, verify, export, import and clean checkpoints, in the
 * stores of a pool and in a copy-out directory (see include/pmckpt.h).
 *
 *   pmckpt list   --pool FILE [--store NAME] [--verbose] [--verify]
 *   pmckpt list   --dir DIR
 *   pmckpt verify --pool FILE --store NAME
 *   pmckpt verify --file F.safetensors
 *   pmckpt verify --dir DIR
 *   pmckpt export --pool FILE --store NAME --out F.safetensors [--rank R --world-size W]
 *   pmckpt import --pool FILE --store NAME --file F.safetensors [--step N] [--size S]
 *   pmckpt clean  --dir DIR --keep K [--dry-run]
 *   pmckpt create --pool PATH [--size S] [--force]
 *   pmckpt check  --pool FILE
 *   pmckpt repair --pool FILE --out DIR
 *
 * Every subcommand takes --json: one JSON document on stdout with stable
 * field names, sizes in bytes.  Human-readable text otherwise.  Exit status
 * 0 on success, 1 on failure (with "pmckpt: <message>" on stderr), 2 on a
 * usage error.
 *
 * Pools: list, verify and export open them read-only (PMA_REGION_RDONLY),
 * so they work on a pool file the user may only read; import opens it for
 * writing.  A pool that a job has open for writing is refused (the message
 * names the job's pid): a pool is written by one process at a time.
 *
 * Slots: `list --pool` reads each slot's seal (pmck_store_slot_step),
 * without verifying; with --verify it also recovers every store (verifying
 * its newest sealed slot, and the older one if that fails) and marks the
 * slot it verified and any it rejected.
 *
 * Directories: `list --dir`, `verify --dir` and `clean` see a copy-out
 * directory through the library (pmck_copyout_list, pmck_copyout_clean),
 * which owns its rules: which names are steps, what a COMPLETE marker
 * says, which lineage (layout hash and world size) a step belongs to.
 * `clean` is the copier's retention applied to every lineage: in each, the
 * newest K complete steps by (generation, step) stay and the older ones
 * go, so a run restarted at step 1 keeps its steps next to an older run's
 * 1339; every incomplete step and the temporary files of kept steps go
 * too, and steps whose lineage cannot be told (unreadable marker) are left
 * alone and reported.  Like the copier's start-up, it assumes no copier is
 * writing to DIR meanwhile.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "pmalloc.h"
#include "pmckpt.h"
#include "lib/toolutil.h"

#define META_SUFFIX ".meta"

static const char usage_text[] =
	"usage: pmckpt <command> [options]\n"
	"\n"
	"  list   --pool FILE [--store NAME] [--verbose] [--verify]\n"
	"                                                  stores of a pool, their slots'\n"
	"                                                  sealed steps (--verify: recover)\n"
	"  list   --dir DIR                                steps of a copy-out directory\n"
	"  verify --pool FILE --store NAME                 recover (verify) a store\n"
	"  verify --file F.safetensors                     check a file (and its checksums)\n"
	"  verify --dir DIR                                check every complete step's files\n"
	"  export --pool FILE --store NAME --out F.safetensors [--rank R] [--world-size W]\n"
	"                                                  write the recovered checkpoint\n"
	"  import --pool FILE --store NAME --file F.safetensors [--step N] [--size S]\n"
	"                                                  load a file as a new checkpoint\n"
	"                                                  (creates a missing store from the\n"
	"                                                  file's layout, and the pool on a\n"
	"                                                  blank device or a new file of S bytes)\n"
	"  clean  --dir DIR --keep K [--dry-run]           keep the newest K complete steps of\n"
	"                                                  each run lineage (layout, world size),\n"
	"                                                  remove the others and leftovers\n"
	"                                                  (no copier may write to DIR meanwhile)\n"
	"  check  --pool FILE                              is the pool consistent, and does\n"
	"                                                  every store's checkpoint verify\n"
	"                                                  (exit 1 if not; reads only)\n"
	"  repair --pool FILE --out DIR                    save what verifies: each store's\n"
	"                                                  newest verified checkpoint as\n"
	"                                                  DIR/STORE.safetensors (reads the\n"
	"                                                  pool only, salvaging a damaged one)\n"
	"  create --pool PATH [--size S] [--force]        a pool on a devdax device, an fsdax\n"
	"                                                  file or a new file of S bytes (512M,\n"
	"                                                  8G); refuses a pool, a file system or\n"
	"                                                  other data there unless --force\n"
	"\n"
	"Every command takes --json (output as JSON, sizes in bytes) and -q/--quiet (no\n"
	"progress on stderr).  Exit status: 0 success, 1 failure, 2 usage error.\n";

/* -------------------------------------------------------------- options */

struct opts {
	const char *cmd;
	const char *pool, *store, *dir, *file, *out;
	unsigned long long keep, step, rank, world_size;
	uint64_t size;
	int have_keep, have_step, have_rank, have_world, have_size;
	int json, verbose, verify, dry_run, quiet, force;
};

static int
usage_error(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "pmckpt: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n%s", usage_text);
	return 2;
}

static int
fail(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "pmckpt: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	return 1;
}

/* snprintf that truncates silently (paths and messages are reported, not parsed). */
static void __attribute__((format(printf, 3, 4)))
fmt(char *buf, size_t len, const char *f, ...)
{
	va_list ap;

	va_start(ap, f);
	vsnprintf(buf, len, f, ap);
	va_end(ap);
}

static int
parse_u64(const char *s, unsigned long long max, unsigned long long *v)
{
	char *end;

	if (!s || !*s || *s == '-' || *s == '+')
		return -1;
	errno = 0;
	*v = strtoull(s, &end, 10);
	return errno || *end || *v > max ? -1 : 0;
}

/* Human-readable size: "1.69 MiB". */
static const char *
hsize(uint64_t b, char *buf, size_t len)
{
	static const char *unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB"};
	double v = (double)b;
	unsigned u = 0;

	while (v >= 1024 && u + 1 < sizeof(unit) / sizeof(unit[0])) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		fmt(buf, len, "%" PRIu64 " bytes", b);
	else
		fmt(buf, len, "%.2f %s", v, unit[u]);
	return buf;
}

/* "1.66 MiB (1738501 bytes)", or "8 bytes" below 1 KiB. */
static const char *
hsize_b(uint64_t b, char *buf, size_t len)
{
	char h[32];
	if (b < 1024)
		fmt(buf, len, "%" PRIu64 " bytes", b);
	else
		fmt(buf, len, "%s (%" PRIu64 " bytes)", hsize(b, h, sizeof(h)), b);
	return buf;
}

static void
print_json(json_object *o)
{
	printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY |
			JSON_C_TO_STRING_SPACED | JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(o);
}

static json_object *
ju64(uint64_t v)
{
	/* json-c keeps uint64 exactly; every value here fits in int64 anyway */
	return json_object_new_uint64(v);
}

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ----------------------------------------------------------------- pools */

struct pool_handle {
	struct pma_region *region;
	struct pma_pool *pool;
};

/*
 * writable: import.  list, verify and export only read: they open the pool
 * read-only (a pool file the user cannot write, e.g. 0444, works; nothing
 * on it changes; other readers may run beside them, a writer may not) and
 * read only a part or read once, so no page tables are populated.
 */
static int
pool_open(const char *path, int writable, struct pool_handle *h)
{
	int ret;

	memset(h, 0, sizeof(*h));
	ret = pma_region_open(path, 0, writable ? 0 : PMA_REGION_RDONLY | PMA_REGION_NO_PREFAULT,
			&h->region);
	if (!ret && (ret = pma_pool_open(h->region, &h->pool)))
		pma_region_close(&h->region);
	if (ret) {
		const char *m = pma_errormsg();
		return strstr(m, path) ? fail("%s", m) : fail("pool %s: %s", path, m);
	}
	return 0;
}

static void
pool_close(struct pool_handle *h)
{
	pma_pool_close(&h->pool);
	pma_region_close(&h->region);
}

struct names {
	char **v;
	size_t n, cap;
};

static int
collect_store(const struct pma_alloc_info *info, void *arg)
{
	struct names *l = arg;
	size_t len = strlen(info->name), sl = strlen(META_SUFFIX);

	if (len <= sl || strcmp(info->name + len - sl, META_SUFFIX))
		return 0;
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 8;
		char **v = realloc(l->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	if (!(l->v[l->n] = strndup(info->name, len - sl)))
		return -ENOMEM;
	l->n++;
	return 0;
}

static void
free_names(struct names *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
}

static int
store_open(struct pool_handle *h, const char *pool, const char *name, struct pmck_store **s)
{
	if (pmck_store_open(h->pool, name, s))
		return fail("%s: store '%s': %s", pool, name, pmck_errormsg());
	return 0;
}

static void
shape_text(const struct pmck_tensor_info *t, char *buf, size_t len)
{
	size_t o = (size_t)snprintf(buf, len, "[");
	for (uint32_t d = 0; d < t->ndim && o < len; d++)
		o += (size_t)snprintf(buf + o, len - o, "%s%" PRIu64, d ? ", " : "", t->shape[d]);
	if (o < len)
		fmt(buf + o, len - o, "]");
}

/*
 * One store of `list --pool`; returns 0, or 1 if it cannot be opened (or,
 * with verify, holds no checkpoint that verifies).  Slots: the sealed step
 * of each (pmck_store_slot_step, no verification); with verify, recovery
 * marks the one it verified and any it rejected.
 */
static int
list_store(struct pool_handle *h, const char *pool, const char *name, int tensors, int verify,
		int json, json_object *arr, int *damaged)
{
	struct pmck_store *s = NULL;
	struct pmck_recovery rec = {0};
	char b1[48], b2[32];

	if (pmck_store_open(h->pool, name, &s)) {
		const char *msg = pmck_errormsg();
		if (json) {
			json_object *o = json_object_new_object();
			json_object_object_add(o, "name", json_object_new_string(name));
			json_object_object_add(o, "error", json_object_new_string(msg));
			json_object_array_add(arr, o);
		} else {
			printf("store %s: cannot open: %s\n", name, msg);
		}
		fprintf(stderr, "pmckpt: %s: store '%s': %s\n", pool, name, msg);
		if (damaged)
			*damaged = 1;
		return 1;
	}
	size_t n = pmck_store_ntensors(s);
	int64_t sealed[2] = {pmck_store_slot_step(s, 0), pmck_store_slot_step(s, 1)};
	const char *state[2];
	for (unsigned k = 0; k < 2; k++)
		state[k] = sealed[k] < 0 ? "empty" : "sealed";
	int64_t newest = sealed[0] > sealed[1] ? sealed[0] : sealed[1];

	int ret = 0;
	char why[512] = "";
	if (verify) {
		ret = pmck_store_recover(s, &rec);
		if (ret)
			fmt(why, sizeof(why), "%s", pmck_errormsg());
		if (ret == 0)
			state[rec.slot] = "verified";
		for (unsigned k = 0; k < 2; k++)
			/* recovery verifies sealed slots newest first until one passes */
			if (sealed[k] >= 0 && ((rec.rejected && k == rec.rejected_slot) ||
					(ret && ret != -EBUSY)))
				state[k] = "rejected";
	}

	if (json) {
		json_object *o = json_object_new_object();
		char hash[32];
		fmt(hash, sizeof(hash), "%016" PRIx64, pmck_store_layout_hash(s));
		json_object_object_add(o, "name", json_object_new_string(name));
		json_object_object_add(o, "ntensors", ju64(n));
		json_object_object_add(o, "tensor_bytes", ju64(pmck_store_tensor_bytes(s)));
		json_object_object_add(o, "slot_bytes", ju64(pmck_store_data_size(s)));
		json_object_object_add(o, "layout_hash", json_object_new_string(hash));
		json_object_object_add(o, "newest_step", newest >= 0 ? ju64((uint64_t)newest) : NULL);
		json_object *slots = json_object_new_array();
		for (unsigned k = 0; k < 2; k++) {
			json_object *so = json_object_new_object();
			json_object_object_add(so, "slot", ju64(k));
			json_object_object_add(so, "state", json_object_new_string(state[k]));
			json_object_object_add(so, "step", sealed[k] >= 0 ? ju64((uint64_t)sealed[k]) : NULL);
			if (rec.rejected && k == rec.rejected_slot)
				json_object_object_add(so, "failed_tensor",
						json_object_new_string(rec.rejected_tensor));
			json_object_array_add(slots, so);
		}
		json_object_object_add(o, "slots", slots);
		json_object_object_add(o, "verified", json_object_new_boolean(verify));
		if (verify) {
			json_object *ck = NULL;
			if (ret == 0) {
				ck = json_object_new_object();
				json_object_object_add(ck, "step", ju64(rec.step));
				json_object_object_add(ck, "slot", ju64(rec.slot));
			}
			json_object_object_add(o, "checkpoint", ck);
			if (ret)
				json_object_object_add(o, "error", json_object_new_string(why));
		}
		if (tensors) {
			json_object *ta = json_object_new_array();
			for (size_t i = 0; i < n; i++) {
				struct pmck_tensor_info t;
				pmck_store_tensor(s, i, &t);
				json_object *to = json_object_new_object(), *sh = json_object_new_array();
				json_object_object_add(to, "name", json_object_new_string(t.name));
				json_object_object_add(to, "dtype",
						json_object_new_string(pmck_dtype_name(t.dtype)));
				for (uint32_t d = 0; d < t.ndim; d++)
					json_object_array_add(sh, ju64(t.shape[d]));
				json_object_object_add(to, "shape", sh);
				json_object_object_add(to, "layer", ju64(t.layer));
				json_object_object_add(to, "offset", ju64(t.offset));
				json_object_object_add(to, "bytes", ju64(t.nbytes));
				json_object_array_add(ta, to);
			}
			json_object_object_add(o, "tensors", ta);
		}
		json_object_array_add(arr, o);
	} else {
		printf("store %s: %zu tensors, %s per checkpoint, slot %s, layout %016" PRIx64 "\n",
				name, n, hsize_b(pmck_store_tensor_bytes(s), b1, sizeof(b1)),
				hsize(pmck_store_data_size(s), b2, sizeof(b2)), pmck_store_layout_hash(s));
		if (verify && ret == 0)
			printf("  checkpoint: step %" PRIu64 " (slot %u, verified)\n", rec.step, rec.slot);
		else if (verify)
			printf("  checkpoint: none (%s)\n", why);
		for (unsigned k = 0; k < 2; k++) {
			if (sealed[k] < 0) {
				printf("  slot %u: empty\n", k);
				continue;
			}
			printf("  slot %u: step %" PRId64 ", sealed", k, sealed[k]);
			if (!strcmp(state[k], "verified"))
				printf(", verified\n");
			else if (!strcmp(state[k], "rejected") && rec.rejected && k == rec.rejected_slot)
				printf(", REJECTED: tensor '%s' fails its checksum\n", rec.rejected_tensor);
			else if (!strcmp(state[k], "rejected"))
				printf(", REJECTED: fails verification\n");
			else
				printf("%s\n", verify ? " (older, not checked)" : "");
		}
		if (tensors) {
			printf("  %-32s %-8s %-20s %5s %12s %12s\n", "tensor", "dtype", "shape", "layer",
					"offset", "bytes");
			for (size_t i = 0; i < n; i++) {
				struct pmck_tensor_info t;
				char sh[160];
				pmck_store_tensor(s, i, &t);
				shape_text(&t, sh, sizeof(sh));
				printf("  %-32s %-8s %-20s %5u %12" PRIu64 " %12" PRIu64 "\n", t.name,
						pmck_dtype_name(t.dtype), sh, t.layer, t.offset, t.nbytes);
			}
		}
	}
	pmck_store_close(&s);
	if (damaged && verify && (rec.rejected || (ret && newest >= 0)))
		*damaged = 1;
	/* A store that was never checkpointed is not a failure; sealed slots that all fail are. */
	if (verify && ret && newest >= 0) {
		fprintf(stderr, "pmckpt: %s: %s\n", pool, why);
		return 1;
	}
	return 0;
}

static int
cmd_list_pool(const struct opts *o)
{
	struct pool_handle h;
	struct names l = {0};
	int ret, bad = 0;

	if ((ret = pool_open(o->pool, 0, &h)))
		return ret;
	if ((ret = pma_pool_foreach(h.pool, collect_store, &l))) {
		free_names(&l);
		pool_close(&h);
		return fail("%s: out of memory", o->pool);
	}
	if (o->store) {
		size_t i;
		for (i = 0; i < l.n && strcmp(l.v[i], o->store); i++)
			;
		if (i == l.n) {
			free_names(&l);
			pool_close(&h);
			return fail("%s: no store '%s'", o->pool, o->store);
		}
	}
	json_object *root = NULL, *arr = NULL;
	char b[32], b2[32];
	if (o->json) {
		root = json_object_new_object();
		arr = json_object_new_array();
		json_object_object_add(root, "pool", json_object_new_string(o->pool));
		json_object_object_add(root, "pool_bytes", ju64(pma_region_size(h.region)));
		json_object_object_add(root, "free_bytes", ju64(pma_pool_free_bytes(h.pool)));
	} else {
		printf("pool %s: %s, %s free, %zu store%s\n", o->pool,
				hsize(pma_region_size(h.region), b, sizeof(b)),
				hsize(pma_pool_free_bytes(h.pool), b2, sizeof(b2)), l.n,
				l.n == 1 ? "" : "s");
	}
	for (size_t i = 0; i < l.n; i++)
		if (!o->store || !strcmp(l.v[i], o->store))
			bad |= list_store(&h, o->pool, l.v[i], o->store || o->verbose, o->verify,
					o->json, arr, NULL);
	if (o->json) {
		json_object_object_add(root, "stores", arr);
		print_json(root);
	}
	free_names(&l);
	pool_close(&h);
	return bad;
}

/* --------------------------------------------------- copy-out directories */

/* "lineage" of a step: its layout hash and world size, the unit of retention. */
static void
lineage_text(const struct pmck_copyout_step *s, char *buf, size_t len)
{
	fmt(buf, len, "%016" PRIx64 "/%u", s->layout_hash, s->world_size);
}

static size_t
count_complete(const struct pmck_copyout_listing *l)
{
	size_t c = 0;
	for (size_t i = 0; i < l->nsteps; i++)
		c += l->steps[i].complete;
	return c;
}

/* The quarantined steps of a listing: JSON array, or one line each (the NOTE's "what failed"). */
static json_object *
quarantine_json(const struct pmck_copyout_listing *l)
{
	json_object *qa = json_object_new_array();
	for (size_t i = 0; i < l->nquarantined; i++) {
		json_object *qo = json_object_new_object();
		json_object_object_add(qo, "step", ju64(l->quarantined[i].step));
		json_object_object_add(qo, "name", json_object_new_string(l->quarantined[i].name));
		json_object_object_add(qo, "note", json_object_new_string(l->quarantined[i].note));
		json_object_array_add(qa, qo);
	}
	return qa;
}

static void
quarantine_print(const struct pmck_copyout_listing *l)
{
	for (size_t i = 0; i < l->nquarantined; i++) {
		const char *what = strstr(l->quarantined[i].note, "what failed: ");
		int n = what ? (int)strcspn(what + 13, "\n") : 0;
		printf("quarantined step %" PRIu64 ": %s/quarantine/%s%s%.*s\n", l->quarantined[i].step,
				l->dir, l->quarantined[i].name, what ? ": " : "", n, what ? what + 13 : "");
	}
}

static int
list_dir(const char *dir, struct pmck_copyout_listing **l)
{
	return pmck_copyout_list(dir, l) ? fail("%s", pmck_errormsg()) : 0;
}

static int
cmd_list_dir(const struct opts *o)
{
	struct pmck_copyout_listing *l;
	char b[32], lin[48];
	int ret = list_dir(o->dir, &l);

	if (ret)
		return ret;
	if (o->json) {
		json_object *root = json_object_new_object(), *arr = json_object_new_array();
		json_object_object_add(root, "dir", json_object_new_string(o->dir));
		json_object_object_add(root, "bytes", ju64(l->bytes));
		for (size_t i = 0; i < l->nsteps; i++) {
			const struct pmck_copyout_step *s = &l->steps[i];
			json_object *so = json_object_new_object(), *fa = json_object_new_array();
			json_object_object_add(so, "step", ju64(s->step));
			json_object_object_add(so, "name", json_object_new_string(s->name));
			json_object_object_add(so, "complete", json_object_new_boolean(s->complete));
			if (s->complete)
				json_object_object_add(so, "marker_ok", json_object_new_boolean(s->marker_ok));
			json_object_object_add(so, "world_size",
					s->world_size > 0 ? ju64(s->world_size) : NULL);
			fmt(b, sizeof(b), "%016" PRIx64, s->layout_hash);
			json_object_object_add(so, "layout_hash", s->layout_known ?
					json_object_new_string(b) : NULL);
			if (s->layout_known)
				json_object_object_add(so, "layout_hash_recorded",
						json_object_new_boolean(s->has_layout_hash));
			json_object_object_add(so, "generation", s->marker_ok ? ju64(s->generation) : NULL);
			lineage_text(s, lin, sizeof(lin));
			json_object_object_add(so, "lineage", s->layout_known ?
					json_object_new_string(lin) : NULL);
			json_object_object_add(so, "bytes", ju64(s->bytes));
			for (size_t k = 0; k < s->nfiles; k++) {
				const struct pmck_copyout_file *f = &s->files[k];
				json_object *fo = json_object_new_object();
				json_object_object_add(fo, "name", json_object_new_string(f->name));
				json_object_object_add(fo, "rank", f->rank >= 0 ? ju64((uint64_t)f->rank) : NULL);
				json_object_object_add(fo, "bytes", ju64(f->bytes));
				json_object_object_add(fo, "temporary", json_object_new_boolean(f->temporary));
				json_object_array_add(fa, fo);
			}
			json_object_object_add(so, "files", fa);
			json_object_array_add(arr, so);
		}
		json_object_object_add(root, "steps", arr);
		json_object_object_add(root, "quarantined", quarantine_json(l));
		print_json(root);
	} else {
		printf("dir %s: %zu step%s (%zu complete), %s\n", o->dir, l->nsteps,
				l->nsteps == 1 ? "" : "s", count_complete(l), hsize_b(l->bytes, b, sizeof(b)));
		for (size_t i = 0; i < l->nsteps; i++) {
			const struct pmck_copyout_step *s = &l->steps[i];
			printf("step %" PRIu64 ": %s", s->step, s->complete ? "complete" : "INCOMPLETE");
			if (s->marker_ok && s->layout_known)
				printf(", world size %u, layout %016" PRIx64 "%s, generation %" PRIu64,
						s->world_size, s->layout_hash,
						s->has_layout_hash ? "" : " (from rank 0's file)", s->generation);
			else if (s->marker_ok)
				printf(", world size %u, layout unknown, generation %" PRIu64,
						s->world_size, s->generation);
			else if (s->complete)
				printf(", unreadable marker");
			printf(", %zu file%s, %s\n", s->nfiles, s->nfiles == 1 ? "" : "s",
					hsize(s->bytes, b, sizeof(b)));
			for (size_t k = 0; k < s->nfiles; k++) {
				const struct pmck_copyout_file *f = &s->files[k];
				printf("  %-32s %14" PRIu64 " bytes%s\n", f->name, f->bytes,
						f->temporary ? "  (temporary: leftover of a copy)" : "");
			}
		}
		quarantine_print(l);
	}
	pmck_copyout_listing_free(&l);
	return 0;
}

/* ---------------------------------------------------------------- verify */

static int
cmd_verify_store(const struct opts *o)
{
	struct pool_handle h;
	struct pmck_store *s;
	struct pmck_recovery rec;
	int ret;

	if ((ret = pool_open(o->pool, 0, &h)))
		return ret;
	if ((ret = store_open(&h, o->pool, o->store, &s))) {
		pool_close(&h);
		return ret;
	}
	double t0 = now_s();
	int r = pmck_store_recover(s, &rec);
	double dt = now_s() - t0;
	char why[512] = "";
	if (r)
		fmt(why, sizeof(why), "%s", pmck_errormsg());
	uint64_t bytes = pmck_store_tensor_bytes(s);
	if (o->json) {
		json_object *root = json_object_new_object(), *rj = NULL;
		json_object_object_add(root, "pool", json_object_new_string(o->pool));
		json_object_object_add(root, "store", json_object_new_string(o->store));
		json_object_object_add(root, "ok", json_object_new_boolean(r == 0));
		json_object_object_add(root, "step", r == 0 ? ju64(rec.step) : NULL);
		json_object_object_add(root, "slot", r == 0 ? ju64(rec.slot) : NULL);
		json_object_object_add(root, "tensor_bytes", ju64(bytes));
		if (rec.rejected) {
			rj = json_object_new_object();
			json_object_object_add(rj, "slot", ju64(rec.rejected_slot));
			json_object_object_add(rj, "step", ju64(rec.rejected_step));
			json_object_object_add(rj, "tensor", json_object_new_string(rec.rejected_tensor));
		}
		json_object_object_add(root, "rejected", rj);
		if (r)
			json_object_object_add(root, "error", json_object_new_string(why));
		print_json(root);
	} else {
		if (r == 0)
			printf("store %s: step %" PRIu64 " verified (slot %u, %" PRIu64 " bytes in %.3f s)\n",
					o->store, rec.step, rec.slot, bytes, dt);
		if (rec.rejected)
			printf("store %s: slot %u (step %" PRIu64 ") REJECTED: tensor '%s' fails its "
					"checksum; the next checkpoint overwrites it\n", o->store,
					rec.rejected_slot, rec.rejected_step, rec.rejected_tensor);
	}
	pmck_store_close(&s);
	pool_close(&h);
	return r ? fail("%s: %s", o->pool, why) : 0;
}

static json_object *
file_info_json(const char *path, int r, const struct pmck_file_info *fi, const char *why)
{
	json_object *o = json_object_new_object();
	json_object_object_add(o, "file", json_object_new_string(path));
	json_object_object_add(o, "ok", json_object_new_boolean(r == 0));
	if (r == 0) {
		json_object_object_add(o, "step", ju64(fi->step));
		json_object_object_add(o, "rank", ju64(fi->rank));
		json_object_object_add(o, "world_size", ju64(fi->world_size));
		json_object_object_add(o, "ntensors", ju64(fi->ntensors));
		json_object_object_add(o, "data_bytes", ju64(fi->data_bytes));
		json_object_object_add(o, "checksums", json_object_new_boolean(fi->has_checksums));
	} else {
		json_object_object_add(o, "error", json_object_new_string(why));
	}
	return o;
}

static void
file_info_text(const char *path, int r, const struct pmck_file_info *fi, const char *why,
		const char *indent)
{
	char b[32];
	if (r) {
		printf("%s%s: FAILED: %s\n", indent, path, why);
		return;
	}
	if (fi->has_checksums)
		printf("%s%s: ok: step %" PRIu64 ", rank %u of %u, %" PRIu64 " tensors, %s, "
				"checksums verified\n", indent, path, fi->step, fi->rank, fi->world_size,
				fi->ntensors, hsize(fi->data_bytes, b, sizeof(b)));
	else
		printf("%s%s: ok: %" PRIu64 " tensors, %s; no pmckpt checksums for every tensor: "
				"structure checked only\n", indent, path, fi->ntensors,
				hsize(fi->data_bytes, b, sizeof(b)));
}

static int
cmd_verify_file(const struct opts *o)
{
	struct pmck_file_info fi;
	char why[1024] = "";
	int r = pmck_safetensors_verify(o->file, &fi);

	if (r)
		fmt(why, sizeof(why), "%s", pmck_errormsg());
	if (o->json)
		print_json(file_info_json(o->file, r, &fi, why));
	else
		file_info_text(o->file, r, &fi, why, "");
	return r ? fail("%s", why) : 0;
}

static int
cmd_verify_dir(const struct opts *o)
{
	struct pmck_copyout_listing *l;
	char path[PATH_MAX * 2], first[1024] = "";
	int ret = list_dir(o->dir, &l), bad = 0;
	size_t checked = 0;

	if (ret)
		return ret;
	json_object *root = NULL, *arr = NULL;
	if (o->json) {
		root = json_object_new_object();
		arr = json_object_new_array();
		json_object_object_add(root, "dir", json_object_new_string(o->dir));
	}
	for (size_t i = 0; i < l->nsteps; i++) {
		const struct pmck_copyout_step *s = &l->steps[i];
		json_object *so = NULL, *fa = NULL;
		char err[768] = "";
		if (o->json) {
			so = json_object_new_object();
			fa = json_object_new_array();
			json_object_object_add(so, "step", ju64(s->step));
			json_object_object_add(so, "complete", json_object_new_boolean(s->complete));
		} else {
			printf("step %" PRIu64 ": %s\n", s->step, s->complete ? "complete" :
					"incomplete: not checked");
		}
		if (s->complete) {
			checked++;
			if (!s->marker_ok)
				fmt(err, sizeof(err), "%s/%s: unreadable COMPLETE marker", o->dir,
						s->name);
			/* Every rank of the world must have its file. */
			for (unsigned r = 0; !err[0] && r < s->world_size; r++) {
				size_t k;
				for (k = 0; k < s->nfiles && s->files[k].rank != (int)r; k++)
					;
				if (k == s->nfiles)
					fmt(err, sizeof(err), "%s/%s: no file for rank %u of %u", o->dir,
							s->name, r, s->world_size);
			}
			for (size_t k = 0; k < s->nfiles; k++) {
				const struct pmck_copyout_file *f = &s->files[k];
				struct pmck_file_info fi;
				char why[1024] = "";
				if (f->rank < 0)
					continue;
				fmt(path, sizeof(path), "%s/%s/%s", o->dir, s->name, f->name);
				int r = pmck_safetensors_verify(path, &fi);
				if (r)
					fmt(why, sizeof(why), "%s", pmck_errormsg());
				else if (fi.has_checksums && fi.step != s->step) {
					r = 1;
					fmt(why, sizeof(why), "%s: holds step %" PRIu64 ", not %" PRIu64,
							path, fi.step, s->step);
				}
				if (r && !err[0])
					fmt(err, sizeof(err), "%s", why);
				if (o->json)
					json_object_array_add(fa, file_info_json(path, r, &fi, why));
				else
					file_info_text(path, r, &fi, why, "  ");
			}
			if (err[0]) {
				bad++;
				if (!first[0])
					fmt(first, sizeof(first), "%s", err);
				if (!o->json)
					printf("  step %" PRIu64 " FAILED: %s\n", s->step, err);
			}
		}
		if (o->json) {
			json_object_object_add(so, "ok", json_object_new_boolean(!err[0]));
			if (err[0])
				json_object_object_add(so, "error", json_object_new_string(err));
			json_object_object_add(so, "files", fa);
			json_object_array_add(arr, so);
		}
	}
	if (!checked && !first[0])
		fmt(first, sizeof(first), "%s: no complete step", o->dir);
	if (o->json) {
		json_object_object_add(root, "ok", json_object_new_boolean(!first[0]));
		json_object_object_add(root, "complete_steps", ju64(checked));
		json_object_object_add(root, "failed_steps", ju64((uint64_t)bad));
		json_object_object_add(root, "steps", arr);
		json_object_object_add(root, "quarantined", quarantine_json(l));
		print_json(root);
	} else {
		if (!first[0])
			printf("%s: %zu complete step%s verified\n", o->dir, checked,
					checked == 1 ? "" : "s");
		quarantine_print(l); /* moved aside by recovery: not verified, listed */
	}
	pmck_copyout_listing_free(&l);
	if (first[0])
		return bad > 1 ? fail("%s (and %d more failed steps)", first, bad - 1) : fail("%s", first);
	return 0;
}

/* --------------------------------------------------------- export, import */

static int
cmd_export(const struct opts *o)
{
	struct pool_handle h;
	struct pmck_store *s;
	struct pmck_recovery rec;
	struct stat st;
	char b[32];
	int ret;

	if (o->have_rank && o->rank >= (o->have_world ? o->world_size : 1))
		return usage_error("--rank %llu needs --world-size above it", o->rank);
	if ((ret = pool_open(o->pool, 0, &h)))
		return ret;
	if ((ret = store_open(&h, o->pool, o->store, &s))) {
		pool_close(&h);
		return ret;
	}
	if (pmck_store_recover(s, &rec)) {
		ret = fail("%s: %s", o->pool, pmck_errormsg());
		goto out;
	}
	uint64_t total = pmck_store_tensor_bytes(s);
	/* pmck_safetensors_write has no progress hook: report before and after. */
	if (!o->quiet)
		fprintf(stderr, "pmckpt: exporting step %" PRIu64 " of store '%s', %s, to %s\n",
				rec.step, o->store, hsize_b(total, b, sizeof(b)), o->out);
	double t0 = now_s();
	if (pmck_safetensors_write(s, o->out, (unsigned)o->rank,
			o->have_world ? (unsigned)o->world_size : 1)) {
		ret = fail("%s", pmck_errormsg());
		goto out;
	}
	double dt = now_s() - t0;
	uint64_t bytes = stat(o->out, &st) == 0 ? (uint64_t)st.st_size : total;
	double gbps = dt > 0 ? (double)bytes / dt / 1e9 : 0;
	if (!o->quiet)
		fprintf(stderr, "pmckpt: wrote %" PRIu64 " bytes in %.3f s (%.2f GB/s)\n", bytes, dt,
				gbps);
	if (o->json) {
		json_object *root = json_object_new_object();
		json_object_object_add(root, "pool", json_object_new_string(o->pool));
		json_object_object_add(root, "store", json_object_new_string(o->store));
		json_object_object_add(root, "file", json_object_new_string(o->out));
		json_object_object_add(root, "step", ju64(rec.step));
		json_object_object_add(root, "rank", ju64(o->rank));
		json_object_object_add(root, "world_size", ju64(o->have_world ? o->world_size : 1));
		json_object_object_add(root, "bytes", ju64(bytes));
		json_object_object_add(root, "tensor_bytes", ju64(total));
		json_object_object_add(root, "seconds", json_object_new_double(dt));
		print_json(root);
	} else {
		printf("exported step %" PRIu64 " of store %s to %s (%" PRIu64 " bytes)\n", rec.step,
				o->store, o->out, bytes);
	}
out:
	pmck_store_close(&s);
	pool_close(&h);
	return ret;
}

/*
 * The pool and store an import writes to, made when missing: the pool on a
 * blank device or a new file of --size bytes (pma_pool_open_or_create
 * never formats other data), the store with the file's own layout.
 */
static int
import_target(const struct opts *o, struct pool_handle *h, struct pmck_store **s)
{
	struct stat st;
	int made_file = 0, created_pool = 0, ret;
	char b[32];

	memset(h, 0, sizeof(*h));
	if (stat(o->pool, &st)) {
		if (errno != ENOENT || !o->have_size)
			return fail("%s: %s%s", o->pool, strerror(errno), errno == ENOENT ?
					" (--size S creates a pool file of S bytes)" : "");
		ret = pma_region_open(o->pool, o->size, PMA_REGION_CREATE, &h->region);
		made_file = !ret;
	} else if (o->have_size) {
		return usage_error("--size creates a new pool file; %s exists", o->pool);
	} else {
		ret = pma_region_open(o->pool, 0, 0, &h->region);
	}
	if (!ret)
		ret = pma_pool_open_or_create(h->region, 0, &h->pool, &created_pool);
	if (ret) {
		ret = fail("%s", pma_errormsg());
		goto undo;
	}
	if (created_pool && !o->quiet)
		fprintf(stderr, "pmckpt: created a pool on %s (%s)\n", o->pool,
				hsize_b(pma_region_size(h->region), b, sizeof(b)));
	ret = pmck_store_open(h->pool, o->store, s);
	if (ret == -ENOENT) {
		struct pmck_tensor_desc *d;
		size_t n;
		if ((ret = pmck_safetensors_layout(o->file, &d, &n)) == 0) {
			ret = pmck_store_create(h->pool, o->store, d, n, s);
			free(d);
		}
		if (!ret && !o->quiet)
			fprintf(stderr, "pmckpt: created store '%s' with the layout of %s (%zu "
					"tensors)\n", o->store, o->file, n);
	}
	if (ret) {
		ret = fail("%s: store '%s': %s", o->pool, o->store, pmck_errormsg());
		goto undo;
	}
	return 0;
undo:
	pool_close(h);
	if (made_file)
		unlink(o->pool);
	return ret;
}

static int
cmd_import(const struct opts *o)
{
	struct pool_handle h;
	struct pmck_store *s;
	struct pmck_recovery rec;
	struct pmck_file_info fi;
	char b[32];
	int ret;

	if ((ret = import_target(o, &h, &s)))
		return ret;
	/* The file's own step wins (pmck_safetensors_import); else --step, else newest + 1. */
	/* Importing over slots that all fail verification is a repair: allowed. */
	int r = pmck_store_recover(s, &rec);
	if (r && r != PMCK_E_NO_CHECKPOINT && r != PMCK_E_NONE_USABLE) {
		ret = fail("%s: %s", o->pool, pmck_errormsg());
		goto out;
	}
	uint64_t step = o->have_step ? o->step : r == 0 ? rec.step + 1 : 1;
	if (pmck_safetensors_verify(o->file, &fi)) {
		ret = fail("%s", pmck_errormsg());
		goto out;
	}
	if (!o->quiet)
		fprintf(stderr, "pmckpt: importing %s, %s, into store '%s'\n",
				o->file, hsize_b(fi.data_bytes, b, sizeof(b)), o->store);
	double t0 = now_s();
	if (pmck_safetensors_import(s, o->file, step)) {
		ret = fail("%s", pmck_errormsg());
		goto out;
	}
	double dt = now_s() - t0;
	if (pmck_store_recover(s, &rec)) {
		ret = fail("%s: after the import: %s", o->pool, pmck_errormsg());
		goto out;
	}
	if (!o->quiet)
		fprintf(stderr, "pmckpt: imported %" PRIu64 " bytes in %.3f s (%.2f GB/s)\n",
				fi.data_bytes, dt, dt > 0 ? (double)fi.data_bytes / dt / 1e9 : 0.0);
	if (o->json) {
		json_object *root = json_object_new_object();
		json_object_object_add(root, "pool", json_object_new_string(o->pool));
		json_object_object_add(root, "store", json_object_new_string(o->store));
		json_object_object_add(root, "file", json_object_new_string(o->file));
		json_object_object_add(root, "step", ju64(rec.step));
		json_object_object_add(root, "slot", ju64(rec.slot));
		json_object_object_add(root, "bytes", ju64(fi.data_bytes));
		json_object_object_add(root, "checksums", json_object_new_boolean(fi.has_checksums));
		json_object_object_add(root, "seconds", json_object_new_double(dt));
		print_json(root);
	} else {
		printf("imported %s into store %s as step %" PRIu64 " (slot %u)\n", o->file, o->store,
				rec.step, rec.slot);
	}
out:
	pmck_store_close(&s);
	pool_close(&h);
	return ret;
}

/* ----------------------------------------------------------------- clean */

struct clean_out {
	const struct opts *o;
	json_object *kept, *removed, *files, *left;
	uint64_t freed;
	unsigned nkept, nleft;
};

/* One decision of pmck_copyout_clean, printed or added to the JSON document. */
static int
clean_report(void *arg, const struct pmck_clean_event *ev)
{
	struct clean_out *c = arg;
	const struct opts *o = c->o;
	const struct pmck_copyout_step *s = ev->step;
	const char *verb = o->dry_run ? "would remove" : "removed";
	char b[32], lin[48], fp[PATH_MAX * 2];
	json_object *so;

	lineage_text(s, lin, sizeof(lin));
	switch (ev->action) {
	case PMCK_CLEAN_TEMPORARY:
		fmt(fp, sizeof(fp), "%s/%s/%s", o->dir, s->name, ev->file->name);
		c->freed += ev->file->bytes;
		if (!o->json) {
			printf("%s %s (temporary, %" PRIu64 " bytes)\n", verb, fp, ev->file->bytes);
			break;
		}
		so = json_object_new_object();
		json_object_object_add(so, "file", json_object_new_string(fp));
		json_object_object_add(so, "step", ju64(s->step));
		json_object_object_add(so, "bytes", ju64(ev->file->bytes));
		json_object_array_add(c->files, so);
		break;
	case PMCK_CLEAN_KEPT:
		c->nkept++;
		if (o->json)
			json_object_array_add(c->kept, ju64(s->step));
		else
			printf("kept step %" PRIu64 " (%s, lineage %s, generation %" PRIu64 ")\n",
					s->step, hsize(s->bytes, b, sizeof(b)), lin, s->generation);
		break;
	case PMCK_CLEAN_REMOVED:
	case PMCK_CLEAN_INCOMPLETE:
		c->freed += s->bytes;
		if (!o->json) {
			if (ev->action == PMCK_CLEAN_REMOVED)
				printf("%s step %" PRIu64 " (complete, beyond --keep %llu of lineage %s, "
						"generation %" PRIu64 ", %s)\n", verb, s->step, o->keep, lin,
						s->generation, hsize(s->bytes, b, sizeof(b)));
			else
				printf("%s step %" PRIu64 " (incomplete, %s)\n", verb, s->step,
						hsize(s->bytes, b, sizeof(b)));
			break;
		}
		so = json_object_new_object();
		json_object_object_add(so, "step", ju64(s->step));
		json_object_object_add(so, "name", json_object_new_string(s->name));
		json_object_object_add(so, "complete", json_object_new_boolean(s->complete));
		json_object_object_add(so, "lineage", s->complete ? json_object_new_string(lin) : NULL);
		json_object_object_add(so, "generation", s->complete ? ju64(s->generation) : NULL);
		json_object_object_add(so, "bytes", ju64(s->bytes));
		json_object_array_add(c->removed, so);
		break;
	case PMCK_CLEAN_UNKNOWN:
		c->nleft++;
		if (!o->json) {
			printf("left step %" PRIu64 " (%s: lineage unknown, not removed)\n", s->step,
					s->marker_ok ? "no layout hash in its marker or rank 0's file" :
					"unreadable COMPLETE marker");
			break;
		}
		so = json_object_new_object();
		json_object_object_add(so, "step", ju64(s->step));
		json_object_object_add(so, "name", json_object_new_string(s->name));
		json_object_object_add(so, "marker_ok", json_object_new_boolean(s->marker_ok));
		json_object_object_add(so, "bytes", ju64(s->bytes));
		json_object_array_add(c->left, so);
		break;
	}
	return 0;
}

/* Retention per lineage, by the library's rules (pmck_copyout_clean). */
static int
cmd_clean(const struct opts *o)
{
	struct clean_out c = {.o = o};
	char err[1024] = "", b[32];

	if (o->json) {
		c.kept = json_object_new_array();
		c.removed = json_object_new_array();
		c.files = json_object_new_array();
		c.left = json_object_new_array();
	}
	if (pmck_copyout_clean(o->dir, (unsigned)o->keep, o->dry_run ? PMCK_CLEAN_DRY_RUN : 0,
			clean_report, &c))
		fmt(err, sizeof(err), "%s", pmck_errormsg());
	if (o->json) {
		json_object *root = json_object_new_object();
		json_object_object_add(root, "dir", json_object_new_string(o->dir));
		json_object_object_add(root, "keep", ju64(o->keep));
		json_object_object_add(root, "dry_run", json_object_new_boolean(o->dry_run));
		json_object_object_add(root, "ok", json_object_new_boolean(!err[0]));
		json_object_object_add(root, "kept", c.kept);
		json_object_object_add(root, "removed", c.removed);
		json_object_object_add(root, "removed_files", c.files);
		json_object_object_add(root, "left", c.left);
		json_object_object_add(root, "freed_bytes", ju64(c.freed));
		if (err[0])
			json_object_object_add(root, "error", json_object_new_string(err));
		print_json(root);
	} else if (!err[0]) {
		printf("%s: kept %u complete step%s", o->dir, c.nkept, c.nkept == 1 ? "" : "s");
		if (c.nleft)
			printf(", left %u of unknown lineage", c.nleft);
		printf(", %s %s\n", o->dry_run ? "would free" : "freed", hsize_b(c.freed, b, sizeof(b)));
	}
	return err[0] ? fail("%s", err) : 0;
}

/* -------------------------------------------------------- check, repair */

/* Problems of a pool as pma_pool_check / pma_pool_salvage report them. */
struct problems {
	json_object *arr; /* --json */
	unsigned n;
	int quiet, json, to_stderr;
};

static void
on_problem(void *arg, int code, const char *message)
{
	struct problems *p = arg;

	p->n++;
	if (p->json) {
		json_object *o = json_object_new_object();
		json_object_object_add(o, "code", json_object_new_int(code));
		json_object_object_add(o, "message", json_object_new_string(message));
		json_object_array_add(p->arr, o);
	} else if (p->to_stderr) {
		if (!p->quiet)
			fprintf(stderr, "pmckpt: %s\n", message);
	} else {
		printf("  problem: %s\n", message);
	}
}

/*
 * The pool of a check or repair: opened read-only, as it is when sound,
 * else what pma_pool_salvage can read of it (*salvaged = 1).
 */
static int
open_for_check(const char *path, struct problems *pr, struct pool_handle *h, int *salvaged,
		int *consistent)
{
	memset(h, 0, sizeof(*h));
	*salvaged = 0;
	if (pma_region_open(path, 0, PMA_REGION_RDONLY | PMA_REGION_NO_PREFAULT, &h->region))
		return fail("%s", pma_errormsg());
	*consistent = pma_pool_check(h->region, on_problem, pr) == 0;
	if (*consistent && !pma_pool_open(h->region, &h->pool))
		return 0;
	/* Problems were reported once already: the salvage reports nothing new. */
	if (pma_pool_salvage(h->region, NULL, NULL, &h->pool)) {
		int ret = fail("%s: nothing can be salvaged: %s", path, pma_errormsg());
		pma_region_close(&h->region);
		return ret;
	}
	*salvaged = 1;
	return 0;
}

/* pmempool check's role: is the pool consistent, and does every store's newest checkpoint verify? */
static int
cmd_check(const struct opts *o)
{
	struct problems pr = {.json = o->json, .quiet = o->quiet};
	struct pool_handle h;
	struct names l = {0};
	int salvaged, consistent, damaged = 0, ret;
	json_object *root = NULL, *stores = NULL;

	if (o->json) {
		root = json_object_new_object();
		pr.arr = json_object_new_array();
		stores = json_object_new_array();
	} else {
		printf("pool %s:\n", o->pool);
	}
	if ((ret = open_for_check(o->pool, &pr, &h, &salvaged, &consistent))) {
		json_object_put(root);
		json_object_put(pr.arr);
		json_object_put(stores);
		return ret;
	}
	if (pma_pool_foreach(h.pool, collect_store, &l))
		ret = fail("%s: out of memory", o->pool);
	for (size_t i = 0; i < l.n && !ret; i++)
		list_store(&h, o->pool, l.v[i], 0, 1, o->json, stores, &damaged);
	int ok = consistent && !damaged && !ret;
	if (o->json) {
		json_object_object_add(root, "pool", json_object_new_string(o->pool));
		json_object_object_add(root, "consistent", json_object_new_boolean(ok));
		json_object_object_add(root, "pool_consistent", json_object_new_boolean(consistent));
		json_object_object_add(root, "salvaged", json_object_new_boolean(salvaged));
		json_object_object_add(root, "problems", pr.arr);
		json_object_object_add(root, "stores", stores);
		print_json(root);
	} else {
		printf("%s: %s%s; %zu store%s%s\n", o->pool,
				consistent ? "pool consistent" : "pool NOT consistent",
				salvaged ? " (read as salvaged)" : "", l.n, l.n == 1 ? "" : "s",
				damaged ? ", some with damaged or unusable checkpoints" : "");
	}
	free_names(&l);
	pool_close(&h);
	if (!ok && !ret)
		ret = fail("%s is not consistent (pmckpt repair --out DIR saves what verifies)",
				o->pool);
	return ret;
}

/* Recovers what verifies: each store's newest verified checkpoint, exported to DIR/<store>.safetensors. */
static int
cmd_repair(const struct opts *o)
{
	struct problems pr = {.json = 0, .quiet = o->quiet, .to_stderr = 1};
	struct pool_handle h;
	struct names l = {0};
	int salvaged, consistent, lost = 0, ret;
	char path[PATH_MAX];
	json_object *root = NULL, *arr = NULL;

	if (mkdir(o->out, 0755) && errno != EEXIST)
		return fail("mkdir %s: %s", o->out, strerror(errno));
	if ((ret = open_for_check(o->pool, &pr, &h, &salvaged, &consistent)))
		return ret;
	if (pma_pool_foreach(h.pool, collect_store, &l)) {
		pool_close(&h);
		return fail("%s: out of memory", o->pool);
	}
	if (o->json) {
		root = json_object_new_object();
		arr = json_object_new_array();
	}
	for (size_t i = 0; i < l.n; i++) {
		struct pmck_store *s = NULL;
		struct pmck_recovery rec = {0};
		char why[512] = "";
		int saved = 0;
		fmt(path, sizeof(path), "%s/%s.safetensors", o->out, l.v[i]);
		if (pmck_store_open(h.pool, l.v[i], &s) || pmck_store_recover(s, &rec) ||
		    pmck_safetensors_write(s, path, 0, 1))
			fmt(why, sizeof(why), "%s", pmck_errormsg());
		else
			saved = 1;
		lost |= !saved;
		if (o->json) {
			json_object *so = json_object_new_object();
			json_object_object_add(so, "store", json_object_new_string(l.v[i]));
			json_object_object_add(so, "saved", json_object_new_boolean(saved));
			if (saved) {
				json_object_object_add(so, "file", json_object_new_string(path));
				json_object_object_add(so, "step", ju64(rec.step));
			} else {
				json_object_object_add(so, "error", json_object_new_string(why));
			}
			json_object_array_add(arr, so);
		} else if (saved) {
			printf("store %s: step %" PRIu64 " verified, saved to %s\n", l.v[i], rec.step,
					path);
		} else {
			printf("store %s: nothing saved: %s\n", l.v[i], why);
		}
		pmck_store_close(&s);
	}
	if (o->json) {
		json_object_object_add(root, "pool", json_object_new_string(o->pool));
		json_object_object_add(root, "pool_consistent", json_object_new_boolean(consistent));
		json_object_object_add(root, "salvaged", json_object_new_boolean(salvaged));
		json_object_object_add(root, "stores", arr);
		print_json(root);
	}
	free_names(&l);
	pool_close(&h);
	return lost ? fail("%s: some stores had nothing that verifies", o->pool) : 0;
}

/* ---------------------------------------------------------------- create */

static int
count_stores(const struct pma_alloc_info *info, void *arg)
{
	size_t len = strlen(info->name), sl = strlen(META_SUFFIX);
	if (len > sl && !strcmp(info->name + len - sl, META_SUFFIX))
		++*(unsigned *)arg;
	return 0;
}

/*
 * A pool where there is none (pmempool create's role): a new file of
 * --size bytes, or an existing device or file, formatted only if blank
 * unless --force.
 */
static int
cmd_create(const struct opts *o)
{
	struct pool_handle h = {0};
	struct stat st;
	int made_file = 0, created = 0, ret;
	char what[512] = "", b[32];

	if (stat(o->pool, &st) == 0) {
		if (o->have_size && (!S_ISREG(st.st_mode) || (uint64_t)st.st_size != o->size))
			return usage_error("%s exists (%s): --size only sizes a new file", o->pool,
					S_ISREG(st.st_mode) ? hsize_b((uint64_t)st.st_size, b, sizeof(b))
							    : "a device");
		ret = pma_region_open(o->pool, 0, 0, &h.region);
	} else if (errno != ENOENT) {
		return fail("%s: %s", o->pool, strerror(errno));
	} else if (!strncmp(o->pool, "/dev/", 5) && !strchr(o->pool + 5, '/')) {
		return fail("%s does not exist: no such device (pmctl provision creates devdax "
				"namespaces, pmctl list shows them)", o->pool);
	} else if (!o->have_size) {
		return usage_error("%s does not exist: --size S creates a file of S bytes", o->pool);
	} else {
		ret = pma_region_open(o->pool, o->size, PMA_REGION_CREATE, &h.region);
		made_file = !ret;
	}
	if (ret)
		return fail("%s", pma_errormsg());

	ret = pma_pool_open_or_create(h.region, 0, &h.pool, &created);
	if (ret == 0 && !created) {
		unsigned stores = 0;
		pma_pool_foreach(h.pool, count_stores, &stores);
		snprintf(what, sizeof(what), "a pmalloc pool with %u store%s", stores,
				stores == 1 ? "" : "s");
		pma_pool_close(&h.pool);
		ret = PMA_E_NOT_POOL; /* treated like any other content below */
		if (!o->force) {
			ret = fail("%s already holds %s; --force formats it, destroying them", o->pool,
					what);
			goto out;
		}
	} else if (ret) {
		snprintf(what, sizeof(what), "%s", pma_errormsg());
		if (!o->force) {
			ret = fail(strstr(what, "--force") ? "%s" : "%s (--force formats it, destroying "
					"what is there)", what);
			goto out;
		}
	}
	if (ret) { /* --force */
		if ((ret = pma_pool_create(h.region, 0, &h.pool))) {
			ret = fail("%s", pma_errormsg());
			goto out;
		}
		if (!o->quiet)
			fprintf(stderr, "pmckpt: --force: formatted over what was there (%s)\n", what);
	}
	size_t heap = pma_pool_free_bytes(h.pool);
	const char *kind = pma_region_kind(h.region) == PMA_REGION_DEVDAX ? "devdax" : "file";
	const char *gran = pma_granularity_name(pma_region_granularity(h.region));
	if (o->json) {
		json_object *root = json_object_new_object();
		json_object_object_add(root, "pool", json_object_new_string(o->pool));
		json_object_object_add(root, "kind", json_object_new_string(kind));
		json_object_object_add(root, "granularity", json_object_new_string(gran));
		json_object_object_add(root, "size", ju64(pma_region_size(h.region)));
		json_object_object_add(root, "free", ju64(heap));
		json_object_object_add(root, "new_file", json_object_new_boolean(made_file));
		if (what[0])
			json_object_object_add(root, "formatted_over", json_object_new_string(what));
		print_json(root);
	} else {
		printf("created a pool on %s %s: %s, %s granularity, %s free for stores\n", kind,
				o->pool, hsize_b(pma_region_size(h.region), b, sizeof(b)), gran,
				hsize(heap, what, sizeof(what)));
	}
	ret = 0;
out:
	pool_close(&h);
	if (ret && made_file)
		unlink(o->pool);
	return ret;
}

/* ------------------------------------------------------------------ main */

enum { OPT_POOL = 256, OPT_STORE, OPT_DIR, OPT_FILE, OPT_OUT, OPT_KEEP, OPT_STEP, OPT_RANK,
	OPT_WORLD, OPT_JSON, OPT_DRY, OPT_VERIFY, OPT_SIZE, OPT_FORCE };

int
main(int argc, char **argv)
{
	static const struct option lo[] = {
		{"pool", required_argument, NULL, OPT_POOL},
		{"store", required_argument, NULL, OPT_STORE},
		{"dir", required_argument, NULL, OPT_DIR},
		{"file", required_argument, NULL, OPT_FILE},
		{"out", required_argument, NULL, OPT_OUT},
		{"keep", required_argument, NULL, OPT_KEEP},
		{"step", required_argument, NULL, OPT_STEP},
		{"rank", required_argument, NULL, OPT_RANK},
		{"world-size", required_argument, NULL, OPT_WORLD},
		{"json", no_argument, NULL, OPT_JSON},
		{"dry-run", no_argument, NULL, OPT_DRY},
		{"verify", no_argument, NULL, OPT_VERIFY},
		{"size", required_argument, NULL, OPT_SIZE},
		{"force", no_argument, NULL, OPT_FORCE},
		{"verbose", no_argument, NULL, 'v'},
		{"quiet", no_argument, NULL, 'q'},
		{"help", no_argument, NULL, 'h'},
		{0, 0, 0, 0},
	};
	struct opts o = {0};
	int c;

	if (argc < 2)
		return usage_error("no command given");
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
		fputs(usage_text, stdout);
		return 0;
	}
	o.cmd = argv[1];
	if (strcmp(o.cmd, "list") && strcmp(o.cmd, "verify") && strcmp(o.cmd, "export") &&
	    strcmp(o.cmd, "import") && strcmp(o.cmd, "clean") && strcmp(o.cmd, "create") &&
	    strcmp(o.cmd, "check") && strcmp(o.cmd, "repair"))
		return usage_error("unknown command '%s'", o.cmd);

	optind = 2;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":vqh", lo, NULL)) != -1) {
		switch (c) {
		case OPT_POOL: o.pool = optarg; break;
		case OPT_STORE: o.store = optarg; break;
		case OPT_DIR: o.dir = optarg; break;
		case OPT_FILE: o.file = optarg; break;
		case OPT_OUT: o.out = optarg; break;
		case OPT_KEEP:
			if (parse_u64(optarg, UINT32_MAX, &o.keep) || o.keep == 0)
				return usage_error("--keep wants a number of steps of at least 1, not '%s'",
						optarg);
			o.have_keep = 1;
			break;
		case OPT_STEP:
			if (parse_u64(optarg, INT64_MAX - 1, &o.step))
				return usage_error("--step wants a step number, not '%s'", optarg);
			o.have_step = 1;
			break;
		case OPT_RANK:
			if (parse_u64(optarg, UINT32_MAX, &o.rank))
				return usage_error("--rank wants a number, not '%s'", optarg);
			o.have_rank = 1;
			break;
		case OPT_WORLD:
			if (parse_u64(optarg, UINT32_MAX, &o.world_size) || o.world_size == 0)
				return usage_error("--world-size wants a number of at least 1, not '%s'",
						optarg);
			o.have_world = 1;
			break;
		case OPT_SIZE:
			if (tool_parse_size(optarg, &o.size) || o.size == 0)
				return usage_error("--size wants a size such as 512M, 8G or 1073741824, "
						"not '%s'", optarg);
			o.have_size = 1;
			break;
		case OPT_FORCE: o.force = 1; break;
		case OPT_JSON: o.json = 1; break;
		case OPT_DRY: o.dry_run = 1; break;
		case OPT_VERIFY: o.verify = 1; break;
		case 'v': o.verbose = 1; break;
		case 'q': o.quiet = 1; break;
		case 'h': fputs(usage_text, stdout); return 0;
		case ':': return usage_error("option '%s' needs a value", argv[optind - 1]);
		default: return usage_error("unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind < argc)
		return usage_error("unexpected argument '%s'", argv[optind]);

	/* Which options each form takes. */
	int where = !!o.pool + !!o.dir + !!o.file;
	if (!strcmp(o.cmd, "create")) {
		if (!o.pool || o.dir || o.file || o.store || o.out || o.have_keep || o.have_step ||
		    o.have_rank || o.have_world || o.dry_run || o.verbose || o.verify)
			return usage_error("create takes --pool PATH [--size S] [--force]");
		return cmd_create(&o);
	}
	if (!strcmp(o.cmd, "check") || !strcmp(o.cmd, "repair")) {
		int repair = !strcmp(o.cmd, "repair");
		if (!o.pool || o.dir || o.file || o.store || (!repair && o.out) || (repair && !o.out) ||
		    o.have_keep || o.have_step || o.have_rank || o.have_world || o.dry_run ||
		    o.verbose || o.verify || o.force || o.have_size)
			return usage_error(repair ? "repair takes --pool FILE --out DIR" :
					"check takes --pool FILE");
		return repair ? cmd_repair(&o) : cmd_check(&o);
	}
	if (o.force)
		return usage_error("--force is an option of create");
	if (o.have_size && strcmp(o.cmd, "import"))
		return usage_error("--size is an option of create and import");
	int extra_export = o.out || o.have_rank || o.have_world;
	if (!strcmp(o.cmd, "list")) {
		if (where != 1 || o.file)
			return usage_error("list wants one of --pool FILE or --dir DIR");
		if (o.dir && (o.store || o.verbose || o.verify))
			return usage_error("list --dir takes no --store, --verbose or --verify");
		if (extra_export || o.have_keep || o.have_step || o.dry_run)
			return usage_error("list takes only --pool [--store] [--verbose] [--verify] or --dir");
		return o.pool ? cmd_list_pool(&o) : cmd_list_dir(&o);
	}
	if (o.verbose || o.verify)
		return usage_error("--verbose and --verify are options of list --pool");
	if (!strcmp(o.cmd, "verify")) {
		if (where != 1)
			return usage_error("verify wants one of --pool FILE --store NAME, --file F or --dir DIR");
		if (o.pool && !o.store)
			return usage_error("verify --pool needs --store NAME");
		if (!o.pool && o.store)
			return usage_error("--store goes with --pool");
		if (extra_export || o.have_keep || o.have_step || o.dry_run)
			return usage_error("verify takes no --out, --rank, --world-size, --keep, --step "
					"or --dry-run");
		return o.pool ? cmd_verify_store(&o) : o.file ? cmd_verify_file(&o) : cmd_verify_dir(&o);
	}
	if (!strcmp(o.cmd, "export")) {
		if (!o.pool || !o.store || !o.out)
			return usage_error("export needs --pool FILE --store NAME --out F.safetensors");
		if (o.dir || o.file || o.have_keep || o.have_step || o.dry_run)
			return usage_error("export takes only --pool, --store, --out, --rank, --world-size");
		return cmd_export(&o);
	}
	if (!strcmp(o.cmd, "import")) {
		if (!o.pool || !o.store || !o.file)
			return usage_error("import needs --pool FILE --store NAME --file F.safetensors");
		if (o.dir || extra_export || o.have_keep || o.dry_run)
			return usage_error("import takes only --pool, --store, --file, --step");
		return cmd_import(&o);
	}
	/* clean */
	if (!o.dir || !o.have_keep)
		return usage_error("clean needs --dir DIR --keep K");
	if (o.pool || o.file || o.store || extra_export || o.have_step)
		return usage_error("clean takes only --dir, --keep, --dry-run");
	return cmd_clean(&o);
}
