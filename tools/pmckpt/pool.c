/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * pool.c -- pmckpt's commands on a pool: list --pool, verify --pool,
 * export, import.
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
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmd.h"

#define META_SUFFIX ".meta"

/* ----------------------------------------------------------------- pools */

/*
 * writable: import.  list, verify and export only read: they open the pool
 * read-only (a pool file the user cannot write, e.g. 0444, works; nothing
 * on it changes; other readers may run beside them, a writer may not) and
 * read only a part or read once, so no page tables are populated.
 */
int
pool_open(const char *path, int writable, struct pool_handle *h)
{
	int ret;

	memset(h, 0, sizeof(*h));
	ret = pma_region_open(path, 0, writable ? 0 : PMA_REGION_RDONLY | PMA_REGION_NO_PREFAULT,
			&h->region);
	if (!ret)
		fault_watch(h->region);
	if (!ret && (ret = pma_pool_open(h->region, &h->pool)))
		pma_region_close(&h->region);
	if (ret) {
		const char *m = pma_errormsg();
		return strstr(m, path) ? tool_fail("%s", m) : tool_fail("pool %s: %s", path, m);
	}
	return 0;
}

void
pool_close(struct pool_handle *h)
{
	pma_pool_close(&h->pool);
	pma_region_close(&h->region);
}

int
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

void
free_names(struct names *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
}

/* The pool (read-only) and the store of verify --pool and export; 0 or 1 (message printed). */
static int
store_open(const struct opts *o, struct pool_handle *h, struct pmck_store **s)
{
	int ret = pool_open(o->pool, 0, h);

	if (ret == 0 && pmck_store_open(h->pool, o->store, s)) {
		ret = tool_fail("%s: store '%s': %s", o->pool, o->store, pmck_errormsg());
		pool_close(h);
	}
	return ret;
}

static void
shape_text(const struct pmck_tensor_info *t, char *buf, size_t len)
{
	size_t o = (size_t)snprintf(buf, len, "[");
	for (uint32_t d = 0; d < t->ndim && o < len; d++)
		o += (size_t)snprintf(buf + o, len - o, "%s%" PRIu64, d ? ", " : "", t->shape[d]);
	if (o < len)
		tool_fmt(buf + o, len - o, "]");
}

/*
 * One store of `list --pool`; returns 0, or 1 if it cannot be opened (or,
 * with verify, holds no checkpoint that verifies).  Slots: the sealed step
 * of each (pmck_store_slot_step, no verification); with verify, recovery
 * marks the one it verified and any it rejected.
 */
int
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
			tool_fmt(why, sizeof(why), "%s", pmck_errormsg());
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
		tool_fmt(hash, sizeof(hash), "%016" PRIx64, pmck_store_layout_hash(s));
		json_object_object_add(o, "name", json_object_new_string(name));
		json_object_object_add(o, "ntensors", tool_json_u64(n));
		json_object_object_add(o, "tensor_bytes", tool_json_u64(pmck_store_tensor_bytes(s)));
		json_object_object_add(o, "slot_bytes", tool_json_u64(pmck_store_data_size(s)));
		json_object_object_add(o, "layout_hash", json_object_new_string(hash));
		json_object_object_add(o, "newest_step", newest >= 0 ? tool_json_u64((uint64_t)newest) : NULL);
		json_object *slots = json_object_new_array();
		for (unsigned k = 0; k < 2; k++) {
			json_object *so = json_object_new_object();
			json_object_object_add(so, "slot", tool_json_u64(k));
			json_object_object_add(so, "state", json_object_new_string(state[k]));
			json_object_object_add(so, "step", sealed[k] >= 0 ? tool_json_u64((uint64_t)sealed[k]) : NULL);
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
				json_object_object_add(ck, "step", tool_json_u64(rec.step));
				json_object_object_add(ck, "slot", tool_json_u64(rec.slot));
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
					json_object_array_add(sh, tool_json_u64(t.shape[d]));
				json_object_object_add(to, "shape", sh);
				json_object_object_add(to, "layer", tool_json_u64(t.layer));
				json_object_object_add(to, "offset", tool_json_u64(t.offset));
				json_object_object_add(to, "bytes", tool_json_u64(t.nbytes));
				json_object_array_add(ta, to);
			}
			json_object_object_add(o, "tensors", ta);
		}
		json_object_array_add(arr, o);
	} else {
		printf("store %s: %zu tensors, %s per checkpoint, slot %s, layout %016" PRIx64 "\n",
				name, n, tool_hsize_b(pmck_store_tensor_bytes(s), b1, sizeof(b1)),
				tool_hsize(pmck_store_data_size(s), b2, sizeof(b2)), pmck_store_layout_hash(s));
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

int
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
		return tool_fail("%s: out of memory", o->pool);
	}
	if (o->store) {
		size_t i;
		for (i = 0; i < l.n && strcmp(l.v[i], o->store); i++)
			;
		if (i == l.n) {
			free_names(&l);
			pool_close(&h);
			return tool_fail("%s: no store '%s'", o->pool, o->store);
		}
	}
	json_object *root = NULL, *arr = NULL;
	char b[32], b2[32];
	if (o->json) {
		root = json_object_new_object();
		arr = json_object_new_array();
		json_object_object_add(root, "pool", json_object_new_string(o->pool));
		json_object_object_add(root, "pool_bytes", tool_json_u64(pma_region_size(h.region)));
		json_object_object_add(root, "free_bytes", tool_json_u64(pma_pool_free_bytes(h.pool)));
	} else {
		printf("pool %s: %s, %s free, %zu store%s\n", o->pool,
				tool_hsize(pma_region_size(h.region), b, sizeof(b)),
				tool_hsize(pma_pool_free_bytes(h.pool), b2, sizeof(b2)), l.n,
				l.n == 1 ? "" : "s");
	}
	for (size_t i = 0; i < l.n; i++)
		if (!o->store || !strcmp(l.v[i], o->store))
			bad |= list_store(&h, o->pool, l.v[i], o->store || o->verbose, o->verify,
					o->json, arr, NULL);
	if (o->json) {
		json_object_object_add(root, "stores", arr);
		tool_json_print(root);
	}
	free_names(&l);
	pool_close(&h);
	return bad;
}

/* ---------------------------------------------------------------- verify */

int
cmd_verify_store(const struct opts *o)
{
	struct pool_handle h;
	struct pmck_store *s;
	struct pmck_recovery rec;
	int ret;

	if ((ret = store_open(o, &h, &s)))
		return ret;
	double t0 = tool_now();
	int r = pmck_store_recover(s, &rec);
	double dt = tool_now() - t0;
	char why[512] = "";
	if (r)
		tool_fmt(why, sizeof(why), "%s", pmck_errormsg());
	uint64_t bytes = pmck_store_tensor_bytes(s);
	if (o->json) {
		json_object *root = json_object_new_object(), *rj = NULL;
		json_object_object_add(root, "pool", json_object_new_string(o->pool));
		json_object_object_add(root, "store", json_object_new_string(o->store));
		json_object_object_add(root, "ok", json_object_new_boolean(r == 0));
		json_object_object_add(root, "step", r == 0 ? tool_json_u64(rec.step) : NULL);
		json_object_object_add(root, "slot", r == 0 ? tool_json_u64(rec.slot) : NULL);
		json_object_object_add(root, "tensor_bytes", tool_json_u64(bytes));
		if (rec.rejected) {
			rj = json_object_new_object();
			json_object_object_add(rj, "slot", tool_json_u64(rec.rejected_slot));
			json_object_object_add(rj, "step", tool_json_u64(rec.rejected_step));
			json_object_object_add(rj, "tensor", json_object_new_string(rec.rejected_tensor));
		}
		json_object_object_add(root, "rejected", rj);
		if (r)
			json_object_object_add(root, "error", json_object_new_string(why));
		tool_json_print(root);
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
	return r ? tool_fail("%s: %s", o->pool, why) : 0;
}

/* --------------------------------------------------------- export, import */

int
cmd_export(const struct opts *o)
{
	struct pool_handle h;
	struct pmck_store *s;
	struct pmck_recovery rec;
	struct stat st;
	char b[32];
	int ret;

	if (o->have_rank && o->rank >= (o->have_world ? o->world_size : 1))
		return tool_usage_error("--rank %llu needs --world-size above it", o->rank);
	if ((ret = store_open(o, &h, &s)))
		return ret;
	if (pmck_store_recover(s, &rec)) {
		ret = tool_fail("%s: %s", o->pool, pmck_errormsg());
		goto out;
	}
	uint64_t total = pmck_store_tensor_bytes(s);
	/* pmck_safetensors_write has no progress hook: report before and after. */
	if (!o->quiet)
		fprintf(stderr, "pmckpt: exporting step %" PRIu64 " of store '%s', %s, to %s\n",
				rec.step, o->store, tool_hsize_b(total, b, sizeof(b)), o->out);
	double t0 = tool_now();
	if (pmck_safetensors_write(s, o->out, (unsigned)o->rank,
			o->have_world ? (unsigned)o->world_size : 1)) {
		ret = tool_fail("%s", pmck_errormsg());
		goto out;
	}
	double dt = tool_now() - t0;
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
		json_object_object_add(root, "step", tool_json_u64(rec.step));
		json_object_object_add(root, "rank", tool_json_u64(o->rank));
		json_object_object_add(root, "world_size", tool_json_u64(o->have_world ? o->world_size : 1));
		json_object_object_add(root, "bytes", tool_json_u64(bytes));
		json_object_object_add(root, "tensor_bytes", tool_json_u64(total));
		json_object_object_add(root, "seconds", json_object_new_double(dt));
		tool_json_print(root);
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
			return tool_fail("%s: %s%s", o->pool, strerror(errno), errno == ENOENT ?
					" (--size S creates a pool file of S bytes)" : "");
		ret = pma_region_open(o->pool, o->size, PMA_REGION_CREATE, &h->region);
		made_file = !ret;
	} else if (o->have_size) {
		return tool_usage_error("--size creates a new pool file; %s exists", o->pool);
	} else {
		ret = pma_region_open(o->pool, 0, 0, &h->region);
	}
	if (!ret) {
		fault_watch(h->region);
		ret = pma_pool_open_or_create(h->region, 0, &h->pool, &created_pool);
	}
	if (ret) {
		ret = tool_fail("%s", pma_errormsg());
		goto undo;
	}
	if (created_pool && !o->quiet)
		fprintf(stderr, "pmckpt: created a pool on %s (%s)\n", o->pool,
				tool_hsize_b(pma_region_size(h->region), b, sizeof(b)));
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
		ret = tool_fail("%s: store '%s': %s", o->pool, o->store, pmck_errormsg());
		goto undo;
	}
	return 0;
undo:
	pool_close(h);
	if (made_file)
		unlink(o->pool);
	return ret;
}

int
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
		ret = tool_fail("%s: %s", o->pool, pmck_errormsg());
		goto out;
	}
	uint64_t step = o->have_step ? o->step : r == 0 ? rec.step + 1 : 1;
	if (pmck_safetensors_verify(o->file, &fi)) {
		ret = tool_fail("%s", pmck_errormsg());
		goto out;
	}
	if (!o->quiet)
		fprintf(stderr, "pmckpt: importing %s, %s, into store '%s'\n",
				o->file, tool_hsize_b(fi.data_bytes, b, sizeof(b)), o->store);
	double t0 = tool_now();
	if (pmck_safetensors_import(s, o->file, step)) {
		ret = tool_fail("%s", pmck_errormsg());
		goto out;
	}
	double dt = tool_now() - t0;
	if (pmck_store_recover(s, &rec)) {
		ret = tool_fail("%s: after the import: %s", o->pool, pmck_errormsg());
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
		json_object_object_add(root, "step", tool_json_u64(rec.step));
		json_object_object_add(root, "slot", tool_json_u64(rec.slot));
		json_object_object_add(root, "bytes", tool_json_u64(fi.data_bytes));
		json_object_object_add(root, "checksums", json_object_new_boolean(fi.has_checksums));
		json_object_object_add(root, "seconds", json_object_new_double(dt));
		tool_json_print(root);
	} else {
		printf("imported %s into store %s as step %" PRIu64 " (slot %u)\n", o->file, o->store,
				rec.step, rec.slot);
	}
out:
	pmck_store_close(&s);
	pool_close(&h);
	return ret;
}
