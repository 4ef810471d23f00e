/* SPDX-License-Identifier: BSD-3-Clause */
/* cmd.h -- what the files of the pmckpt tool share: options, an open pool, its store names, the commands. */
#ifndef PMCKPT_CMD_H
#define PMCKPT_CMD_H 1

#include <json-c/json.h>
#include <stdint.h>

#include "pmalloc.h"
#include "pmckpt.h"
#include "lib/json.h"
#include "lib/toolutil.h"

/* The command line (main.c); every command reads only the options its form takes. */
struct opts {
	const char *cmd;
	const char *pool, *store, *dir, *file, *out;
	unsigned long long keep, step, rank, world_size;
	uint64_t size;
	int have_keep, have_step, have_rank, have_world, have_size;
	int json, verbose, verify, dry_run, quiet, force;
};

/* An open pool (pool.c). */
struct pool_handle {
	struct pma_region *region;
	struct pma_pool *pool;
};

/* writable: import; 0: read-only, as list, verify and export open it.  0 or 1 (message printed). */
int pool_open(const char *path, int writable, struct pool_handle *h);

/* fault.c: a SIGBUS reports the pool and offset and exits 1 (install once, watch each region). */
void fault_install(void);
void fault_watch(const struct pma_region *r);
void pool_close(struct pool_handle *h);

/* The names of a pool's stores: collect_store is a pma_pool_foreach callback (-ENOMEM). */
struct names {
	char **v;
	size_t n, cap;
};
int collect_store(const struct pma_alloc_info *info, void *arg);
void free_names(struct names *l);

/*
 * One store of `list --pool` (and of check): printed, or added to arr with
 * json; 0, or 1 if it cannot be opened or, with verify, holds no checkpoint
 * that verifies.  *damaged (may be NULL) is set when it is unusable.
 */
int list_store(struct pool_handle *h, const char *pool, const char *name, int tensors, int verify,
		int json, json_object *arr, int *damaged);

/* The commands: each returns the exit status (0, 1 failure, 2 usage error). */
int cmd_list_pool(const struct opts *o);	/* pool.c */
int cmd_verify_store(const struct opts *o);
int cmd_export(const struct opts *o);
int cmd_import(const struct opts *o);
int cmd_create(const struct opts *o);		/* create.c */
int cmd_list_dir(const struct opts *o);		/* dir.c */
int cmd_verify_file(const struct opts *o);
int cmd_verify_dir(const struct opts *o);
int cmd_clean(const struct opts *o);
int cmd_check(const struct opts *o);		/* check.c */
int cmd_repair(const struct opts *o);

#endif
