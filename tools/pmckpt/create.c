/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * create.c -- pmckpt create: a pool where there is none (pmempool create's
 * role), refusing to format over a pool or other data unless --force.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmd.h"

/*
 * A pool where there is none (pmempool create's role): a new file of
 * --size bytes, or an existing device or file, formatted only if blank
 * unless --force.
 */
int
cmd_create(const struct opts *o)
{
	struct pool_handle h = {0};
	struct stat st;
	int made_file = 0, created = 0, ret;
	char what[512] = "", b[32];

	if (stat(o->pool, &st) == 0) {
		if (o->have_size && (!S_ISREG(st.st_mode) || (uint64_t)st.st_size != o->size))
			return tool_usage_error("%s exists (%s): --size only sizes a new file", o->pool,
					S_ISREG(st.st_mode) ? tool_hsize_b((uint64_t)st.st_size, b, sizeof(b))
							    : "a device");
		ret = pma_region_open(o->pool, 0, 0, &h.region);
	} else if (errno != ENOENT) {
		return tool_fail("%s: %s", o->pool, strerror(errno));
	} else if (!strncmp(o->pool, "/dev/", 5) && !strchr(o->pool + 5, '/')) {
		return tool_fail("%s does not exist: no such device (pmctl provision creates devdax "
				"namespaces, pmctl list shows them)", o->pool);
	} else if (!o->have_size) {
		return tool_usage_error("%s does not exist: --size S creates a file of S bytes", o->pool);
	} else {
		ret = pma_region_open(o->pool, o->size, PMA_REGION_CREATE, &h.region);
		made_file = !ret;
	}
	if (ret)
		return tool_fail("%s", pma_errormsg());
	fault_watch(h.region);

	/* `what` names what was there already: nothing, a pool, or what the refusal says. */
	ret = pma_pool_open_or_create(h.region, 0, &h.pool, &created);
	if (ret == 0 && !created) {
		struct names l = {0};
		pma_pool_foreach(h.pool, collect_store, &l);
		snprintf(what, sizeof(what), "a pmalloc pool with %zu store%s", l.n,
				l.n == 1 ? "" : "s");
		free_names(&l);
		pma_pool_close(&h.pool);
		if (!o->force) {
			ret = tool_fail("%s already holds %s; --force formats it, destroying them", o->pool,
					what);
			goto out;
		}
	} else if (ret) {
		snprintf(what, sizeof(what), "%s", pma_errormsg());
		if (!o->force) {
			ret = tool_fail(strstr(what, "--force") ? "%s" : "%s (--force formats it, destroying "
					"what is there)", what);
			goto out;
		}
	}
	if (what[0]) { /* --force */
		if ((ret = pma_pool_create(h.region, 0, &h.pool))) {
			ret = tool_fail("%s", pma_errormsg());
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
		json_object_object_add(root, "size", tool_json_u64(pma_region_size(h.region)));
		json_object_object_add(root, "free", tool_json_u64(heap));
		json_object_object_add(root, "new_file", json_object_new_boolean(made_file));
		if (what[0])
			json_object_object_add(root, "formatted_over", json_object_new_string(what));
		tool_json_print(root);
	} else {
		printf("created a pool on %s %s: %s, %s granularity, %s free for stores\n", kind,
				o->pool, tool_hsize_b(pma_region_size(h.region), b, sizeof(b)), gran,
				tool_hsize(heap, what, sizeof(what)));
	}
	ret = 0;
out:
	pool_close(&h);
	if (ret && made_file)
		unlink(o->pool);
	return ret;
}
