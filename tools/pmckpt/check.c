/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * check.c -- pmckpt check and repair: is a pool consistent and does every
 * store verify; save what verifies from a damaged one (pma_pool_check,
 * pma_pool_salvage).
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cmd.h"

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
		return tool_fail("%s", pma_errormsg());
	fault_watch(h->region);
	*consistent = pma_pool_check(h->region, on_problem, pr) == 0;
	if (*consistent && !pma_pool_open(h->region, &h->pool))
		return 0;
	/* Problems were reported once already: the salvage reports nothing new. */
	if (pma_pool_salvage(h->region, NULL, NULL, &h->pool)) {
		int ret = tool_fail("%s: nothing can be salvaged: %s", path, pma_errormsg());
		pma_region_close(&h->region);
		return ret;
	}
	*salvaged = 1;
	return 0;
}

/* pmempool check's role: is the pool consistent, and does every store's newest checkpoint verify? */
int
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
		ret = tool_fail("%s: out of memory", o->pool);
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
		tool_json_print(root);
	} else {
		printf("%s: %s%s; %zu store%s%s\n", o->pool,
				consistent ? "pool consistent" : "pool NOT consistent",
				salvaged ? " (read as salvaged)" : "", l.n, l.n == 1 ? "" : "s",
				damaged ? ", some with damaged or unusable checkpoints" : "");
	}
	free_names(&l);
	pool_close(&h);
	if (!ok && !ret)
		ret = tool_fail("%s is not consistent (pmckpt repair --out DIR saves what verifies)",
				o->pool);
	return ret;
}

/* Recovers what verifies: each store's newest verified checkpoint, exported to DIR/<store>.safetensors. */
int
cmd_repair(const struct opts *o)
{
	struct problems pr = {.json = 0, .quiet = o->quiet, .to_stderr = 1};
	struct pool_handle h;
	struct names l = {0};
	int salvaged, consistent, lost = 0, ret;
	char path[PATH_MAX];
	json_object *root = NULL, *arr = NULL;

	if (mkdir(o->out, 0700) && errno != EEXIST) /* checkpoints are private: 0700, as the runtime's */
		return tool_fail("mkdir %s: %s", o->out, strerror(errno));
	if ((ret = open_for_check(o->pool, &pr, &h, &salvaged, &consistent)))
		return ret;
	if (pma_pool_foreach(h.pool, collect_store, &l)) {
		pool_close(&h);
		return tool_fail("%s: out of memory", o->pool);
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
		tool_fmt(path, sizeof(path), "%s/%s.safetensors", o->out, l.v[i]);
		if (pmck_store_open(h.pool, l.v[i], &s) || pmck_store_recover(s, &rec) ||
		    pmck_safetensors_write(s, path, 0, 1))
			tool_fmt(why, sizeof(why), "%s", pmck_errormsg());
		else
			saved = 1;
		lost |= !saved;
		if (o->json) {
			json_object *so = json_object_new_object();
			json_object_object_add(so, "store", json_object_new_string(l.v[i]));
			json_object_object_add(so, "saved", json_object_new_boolean(saved));
			if (saved) {
				json_object_object_add(so, "file", json_object_new_string(path));
				json_object_object_add(so, "step", tool_json_u64(rec.step));
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
		tool_json_print(root);
	}
	free_names(&l);
	pool_close(&h);
	return lost ? tool_fail("%s: some stores had nothing that verifies", o->pool) : 0;
}
