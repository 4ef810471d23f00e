/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * copyout.c -- asynchronous copy of committed checkpoints to a shared
 * directory, and retention of the newest K.
 *
 *   DIR/step-<12+ digits>/rank-<5 digits>.safetensors
 *   DIR/step-<...>/COMPLETE        written last: the step is whole
 *
 * A submitted slot is pinned (pmck__slot_pin) until its copy ends, so
 * begin never overwrites what the copier reads, and the copier only reads
 * sealed slots, never one being written.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define QUEUE 4

struct job {
	unsigned slot;
	uint64_t step;
};

struct pmck_copyout {
	struct pmck_store *store;
	struct pmck_copyout_opts o;
	char dir[PATH_MAX];
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct job queue[QUEUE];
	unsigned head, len;
	int busy, stop;
	struct pmck_copyout_failure fail; /* first failure not yet reported (fail.error 0: none) */
	uint64_t generation;   /* this run's, written into each COMPLETE (see clean) */
	struct pmck_copyout_stats stats;
};

/*
 * Retention of this job's lineage: the complete steps whose marker names
 * this store's layout and this world size (the rule is retention.c's).
 * This copier's generation is the largest in the directory for its
 * layout, so its own newest `keep` steps are never removed, whatever their
 * step numbers (a run restarting at step 1 next to an old run's 1339).
 * Steps of another layout or world size, and steps whose marker cannot be
 * read, are never touched here (pmck_copyout_clean, `pmckpt clean`,
 * applies the rule to every lineage; runtime/copyout_dir.c).  With
 * cleanup_all (start-up of a single rank: no writer is running) every
 * incomplete step goes, and the *.tmp files of kept steps (a re-copy of a
 * complete step killed halfway).
 */
static int
clean(struct pmck_copyout *c, int cleanup_all)
{
	struct pmck__retention r = {
		.keep = c->o.keep,
		.flags = cleanup_all ? PMCK__RETAIN_ALL_INCOMPLETE : 0,
		.layout_hash = pmck_store_layout_hash(c->store),
		.world_size = c->o.world_size,
		.generation = c->generation,
	};
	struct pmck__steps l;
	int ret = pmck__list_steps(c->dir, &l);
	if (ret)
		return ret;
	struct pmck__verdict *v = NULL;
	ret = pmck__retention_decide(&l, &r, &v);

	char name[64];
	for (size_t i = 0; i < l.n && !ret; i++) {
		snprintf(name, sizeof(name), "step-%012" PRId64, l.step[i]);
		if (v[i].fate == PMCK__KEEP && cleanup_all)
			ret = pmck__remove_tmp(c->dir, name);
		if (ret || (v[i].fate != PMCK__REMOVE && v[i].fate != PMCK__REMOVE_INCOMPLETE))
			continue;
		ret = pmck__remove_step(c->dir, name);
		if (!ret && v[i].fate == PMCK__REMOVE) {
			pthread_mutex_lock(&c->lock);
			c->stats.deleted++;
			pthread_mutex_unlock(&c->lock);
		}
	}
	free(v);
	pmck__free_steps(&l);
	return ret;
}

/* Sets c->generation: 1 + the largest generation of this layout's complete steps in DIR. */
static int
next_generation(struct pmck_copyout *c)
{
	struct pmck__steps l;
	uint64_t hash = pmck_store_layout_hash(c->store), max = 0;
	int ret = pmck__list_steps(c->dir, &l);

	if (ret)
		return ret;
	for (size_t i = 0; i < l.n; i++)
		if (pmck__step_ours(&l, i, hash, 0) && l.m[i].generation > max)
			max = l.m[i].generation;
	pmck__free_steps(&l);
	c->generation = max + 1;
	return 0;
}

/*
 * Rank 0 marks a step complete only when every rank's file exists: a file
 * appears under its final name only after its data was fsync'd (rename
 * after fsync, then the directory fsync'd by its writer), so existence
 * means durable.  No collective is needed on the copier thread.
 */
static int
await_ranks(struct pmck_copyout *c, uint64_t step)
{
	unsigned timeout = c->o.marker_timeout_ms ? c->o.marker_timeout_ms : 600000;
	char path[PATH_MAX], leaf[64];
	struct stat st;

	for (unsigned r = 1; r < c->o.world_size; r++) {
		snprintf(leaf, sizeof(leaf), "rank-%05u.safetensors", r);
		int ret = pmck__step_path(path, sizeof(path), c->dir, step, leaf);
		if (ret)
			return ret;
		for (unsigned waited = 0; stat(path, &st); waited += 10) {
			if (waited >= timeout)
				return pma__err(-ETIMEDOUT, "step %" PRIu64 ": rank %u's file did not "
						"appear within %u ms; step left incomplete", step, r, timeout);
			struct timespec d = {0, 10 * 1000000L};
			nanosleep(&d, NULL);
		}
	}
	return 0;
}

/*
 * After a failed copy of a step that passed the ownership check: its
 * partial files go, so that a full file system does not also fill up with
 * empty or half-written steps.  A step with COMPLETE was copied whole
 * before (a re-copy of the same step failed, the earlier file stands) and
 * stays.  With one rank the step is this copier's alone and goes
 * entirely; with several, other ranks may be writing into it, so only an
 * empty directory goes (the running clean takes the rest later).  The
 * failure's message is kept over those of the removal.
 */
static int
drop_failed(struct pmck_copyout *c, uint64_t step, const char *stepdir, int ret)
{
	struct pmck__marker m;
	char msg[1024], name[64];

	snprintf(msg, sizeof(msg), "%s", pma_errormsg());
	if (pmck__step_marker(c->dir, step, &m))
		;
	else if (c->o.world_size == 1) {
		snprintf(name, sizeof(name), "step-%012" PRIu64, step);
		pmck__remove_step(c->dir, name);
	} else if (rmdir(stepdir) == 0)
		pmck__fsync_dir(c->dir);
	return pma__err(ret, "%s", msg);
}

static int
copy_one(struct pmck_copyout *c, const struct job *j, struct pmck_copyout_failure *why)
{
	char stepdir[PATH_MAX], file[PATH_MAX], leaf[64];
	int group = !!(c->o.flags & PMCK_COPYOUT_GROUP);
	uint64_t bytes = 0;
	int ret;

	snprintf(leaf, sizeof(leaf), "rank-%05u.safetensors", c->o.rank);
	if ((ret = pmck__step_path(stepdir, sizeof(stepdir), c->dir, j->step, NULL)) ||
	    (ret = pmck__step_path(file, sizeof(file), c->dir, j->step, leaf)))
		return ret;
	/*
	 * A complete step of another layout or world size (another job's run
	 * in the same directory with the same step number) is never
	 * overwritten: that would destroy it, which only `pmckpt clean` may do.
	 */
	struct pmck__marker old;
	uint64_t hash = pmck_store_layout_hash(c->store);
	if (pmck__step_marker(c->dir, j->step, &old) &&
	    !(old.has_layout && old.layout_hash == hash && old.world_size == c->o.world_size)) {
		snprintf(why->path, sizeof(why->path), "%s", stepdir);
		return pma__err(-EEXIST, "step %" PRIu64 " in %s is another job's (layout %016" PRIx64
				"%s, world size %u; this store %016" PRIx64 ", %u): not overwritten; "
				"copy out to another directory or remove it with `pmckpt clean`",
				j->step, c->dir, old.layout_hash, old.has_layout ? "" : " unknown",
				old.world_size, hash, c->o.world_size);
	}
	snprintf(why->path, sizeof(why->path), "%s", stepdir);
	if (mkdir(stepdir, PMCK__MODE_DIR(group)) && errno != EEXIST)
		return pma__err(-errno, "mkdir %s: %s", stepdir, strerror(errno));
	if ((ret = pmck__fsync_dir(c->dir)))
		snprintf(why->path, sizeof(why->path), "%s", c->dir);
	if (!ret)
		ret = pmck__safetensors_write_slot(c->store, j->slot, j->step, file, c->o.rank,
				c->o.world_size, PMCK__MODE_FILE(group), c->o.progress,
				c->o.progress_arg, &bytes, why);
	if (!ret && c->o.rank == 0 && (ret = await_ranks(c, j->step)))
		snprintf(why->path, sizeof(why->path), "%s", stepdir);
	if (!ret && c->o.rank == 0) {
		struct pmck__marker m = {.layout_hash = pmck_store_layout_hash(c->store),
				.generation = c->generation, .world_size = c->o.world_size};
		/* (a path too long for why->path is cut: it only names the file) */
		if ((ret = pmck__write_marker(stepdir, j->step, &m, PMCK__MODE_FILE(group))) &&
		    snprintf(why->path, sizeof(why->path), "%s/" PMCK_MARKER, stepdir) < 0)
			why->path[0] = 0;
	}
	if (ret)
		ret = drop_failed(c, j->step, stepdir, ret);
	pthread_mutex_lock(&c->lock);
	c->stats.bytes += bytes;
	if (!ret) {
		c->stats.copied++;
		c->stats.last_step = j->step;
	}
	pthread_mutex_unlock(&c->lock);
	return ret;
}

static void *
copier(void *arg)
{
	struct pmck_copyout *c = arg;

	/*
	 * SCHED_BATCH: the same CPU share, but a wakeup never preempts the
	 * running thread.  Measured with pmck-pipebench on a 2-vCPU VM: a
	 * helper thread that preempts the training thread on waking costs it a
	 * whole time slice (2.7-5.4 ms instead of 0.6 ms per checkpoint; seen
	 * for the writer threads, gone when they run SCHED_BATCH).  The copier
	 * wakes at every commit while training runs, so it waits its turn
	 * instead.  Best effort: an unsupported policy changes nothing.
	 */
	struct sched_param sp = {0};
	pthread_setschedparam(pthread_self(), SCHED_BATCH, &sp);

	pthread_mutex_lock(&c->lock);
	for (;;) {
		while (!c->stop && c->len == 0)
			pthread_cond_wait(&c->cond, &c->lock);
		if (c->len == 0)
			break;
		struct job j = c->queue[c->head];
		c->busy = 1;
		pthread_mutex_unlock(&c->lock);

		struct pmck_copyout_failure why = {.step = j.step};
		uint64_t t0 = pmck__now_ns();
		int ret = copy_one(c, &j, &why);
		uint64_t copy_ns = pmck__now_ns() - t0;
		pmck__slot_unpin(c->store, j.slot);
		if (!ret && (ret = clean(c, 0)))
			snprintf(why.path, sizeof(why.path), "%s", c->dir);
		/* Before the job leaves the queue: a wait returns after the callback. */
		if (c->o.on_done)
			c->o.on_done(c->o.on_done_arg, j.step, ret);

		pthread_mutex_lock(&c->lock);
		c->stats.busy_ns += copy_ns;
		if (ret)
			c->stats.failed++;
		/* The first failure is kept whole: later ones (often its consequences) only count. */
		if (ret && !c->fail.error) {
			why.error = ret;
			snprintf(why.message, sizeof(why.message), "%s", pma_errormsg());
			c->fail = why;
		}
		c->head = (c->head + 1) % QUEUE;
		c->len--;
		c->busy = 0;
		pthread_cond_broadcast(&c->cond);
	}
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

int
pmck_copyout_new(struct pmck_store *s, const struct pmck_copyout_opts *opts,
		struct pmck_copyout **out)
{
	if (!s || !opts || !opts->dir || !*opts->dir || !out)
		return pma__err(-EINVAL, "pmck_copyout_new: store, opts->dir and out are required");
	*out = NULL;
	if (opts->world_size && opts->rank >= opts->world_size)
		return pma__err(-EINVAL, "rank %u of a world of %u", opts->rank, opts->world_size);
	if (opts->flags & ~(PMCK_COPYOUT_SHARED_DIR | PMCK_COPYOUT_GROUP))
		return pma__err(-EINVAL, "pmck_copyout_new: unknown flags %#x", opts->flags);
	struct pmck_copyout *c = calloc(1, sizeof(*c));
	if (!c)
		return pma__err(-ENOMEM, "out of memory");
	c->store = s;
	c->o = *opts;
	if (!c->o.keep)
		c->o.keep = 2;
	if (!c->o.world_size)
		c->o.world_size = 1;
	snprintf(c->dir, sizeof(c->dir), "%s", opts->dir);
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->cond, NULL);

	/*
	 * The directory and its parents (0700, 0750 for a group; undone below
	 * if this call fails); an existing one must be the caller's and closed
	 * to writers other than the owner, unless it is shared on purpose.
	 */
	char made[PATH_MAX] = "";
	unsigned dflags = PMCK_DIR_CREATE | (c->o.flags & PMCK_COPYOUT_GROUP ? PMCK_DIR_GROUP : 0) |
			  (c->o.flags & PMCK_COPYOUT_SHARED_DIR ? PMCK__DIR_UNCHECKED : 0);
	int ret = pmck__dir_ready(c->dir, dflags, "Use a directory of your own, or say that this "
			"one is shared on purpose (PMCK_COPYOUT_SHARED_DIR; Python: sharing='group')",
			made, sizeof(made));
	if (ret)
		pma__err_prefix(ret, "copy-out directory");
	/*
	 * Every rank derives the same generation: rank 0 writes the first
	 * marker of this run only after every rank's first file exists, i.e.
	 * after every rank's copier was opened and counted.
	 */
	if (!ret)
		ret = next_generation(c);
	/* Leftovers of a crash: only one rank cleans a shared step, and only when alone. */
	if (!ret && c->o.world_size == 1)
		ret = clean(c, 1);
	if (!ret && pthread_create(&c->thread, NULL, copier, c))
		ret = pma__err(-EAGAIN, "cannot start the copier thread");
	if (ret) {
		pmck__rmdir_made(c->dir, made);
		pthread_mutex_destroy(&c->lock);
		pthread_cond_destroy(&c->cond);
		free(c);
		return ret;
	}
	*out = c;
	return 0;
}

int
pmck_copyout_submit(struct pmck_copyout *c)
{
	struct pmck_store *s = c->store;
	int64_t st0 = pmck__sealed_step(s, 0), st1 = pmck__sealed_step(s, 1);
	unsigned slot = st1 > st0;
	int64_t step = slot ? st1 : st0;

	if (step < 0)
		return pma__err(PMCK_E_NO_CHECKPOINT, "nothing committed to copy out");
	pthread_mutex_lock(&c->lock);
	while (c->len == QUEUE)
		pthread_cond_wait(&c->cond, &c->lock);
	/* Pinned before the caller can begin again: the next begin targets the other slot anyway. */
	pmck__slot_pin(s, slot);
	c->queue[(c->head + c->len) % QUEUE] = (struct job){slot, (uint64_t)step};
	c->len++;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
	return 0;
}

int
pmck_copyout_check(struct pmck_copyout *c, unsigned flags, struct pmck_copyout_failure *out)
{
	struct pmck_copyout_failure f;

	if (flags & ~PMCK_COPYOUT_WAIT)
		return pma__err(-EINVAL, "pmck_copyout_check: unknown flags %#x", flags);
	pthread_mutex_lock(&c->lock);
	while ((flags & PMCK_COPYOUT_WAIT) && c->len)
		pthread_cond_wait(&c->cond, &c->lock);
	f = c->fail;
	c->fail.error = 0;
	pthread_mutex_unlock(&c->lock);
	if (!f.error)
		memset(&f, 0, sizeof(f));
	if (out)
		*out = f;
	/* The message was the copier thread's: the caller's thread gets it here. */
	return f.error ? pma__err(f.error, "%s", f.message) : 0;
}

int
pmck_copyout_wait(struct pmck_copyout *c)
{
	return pmck_copyout_check(c, PMCK_COPYOUT_WAIT, NULL);
}

void
pmck_copyout_stats(struct pmck_copyout *c, struct pmck_copyout_stats *st)
{
	pthread_mutex_lock(&c->lock);
	*st = c->stats;
	pthread_mutex_unlock(&c->lock);
}

void
pmck_copyout_delete(struct pmck_copyout **cp)
{
	struct pmck_copyout *c = cp ? *cp : NULL;

	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	c->stop = 1;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
	pthread_join(c->thread, NULL); /* queued copies finish; rank 0 waits for the others' files */
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->cond);
	free(c);
	*cp = NULL;
}

/* ------------------------------------------------- two-tier recovery */

/*
 * Reports shared step `step` rejected for `rank` (import failed with
 * `why`).  A file of the step that is missing or fails verification makes
 * it a damaged step: one of a single rank is moved to DIR/quarantine here
 * (no other rank reads it); one of several ranks is left for
 * pmck_global_recover, which can tell when no rank reads it any more.
 */
static void
reject_shared(struct pmck_store *s, const char *dir, uint64_t step, unsigned rank,
		unsigned world, const char *why)
{
	char dmg[PMCK_REASON_MAX], moved[PATH_MAX];
	struct pmck_rejection *e;

	if (rank >= world) {
		pmck__reject(s, rank, PMCK_TIER_SHARED, step, "a step of %u rank%s has no file for "
				"rank %u", world, world == 1 ? "" : "s", rank);
		return;
	}
	if (pmck__file_check(dir, step, rank, dmg, sizeof(dmg)) != 1) {
		pmck__reject(s, rank, PMCK_TIER_SHARED, step, "%s", why);
		return;
	}
	if (world > 1) {
		pmck__reject(s, rank, PMCK_TIER_SHARED, step, "%s (a step of %u ranks: left in "
				"place for pmck_global_recover)", dmg, world);
		return;
	}
	int q = pmck__quarantine_step(dir, step, dmg, moved, sizeof(moved));
	if (q == 0 && (e = pmck__reject(s, rank, PMCK_TIER_SHARED, step, "%s; moved to %s", dmg,
			moved)))
		e->quarantined = 1;
	else if (q)
		pmck__reject(s, rank, PMCK_TIER_SHARED, step, "%s (not moved to quarantine: %s)", dmg,
				pmck_errormsg());
}

int
pmck_recover_tiers(struct pmck_store *s, const char *shared_dir, unsigned rank,
		struct pmck_tier_recovery *out)
{
	struct pmck_recovery rec;
	char local_why[384];

	memset(out, 0, sizeof(*out));
	if (s->in_flight)
		return pma__err(-EBUSY, "store '%s': a checkpoint is in flight", s->name);
	pmck__reject_start(s, rank); /* each rejected slot and step is listed (pmck_store_rejections) */
	int ret = pmck__store_recover(s, &rec);
	if (ret == 0) {
		out->step = rec.step;
		out->tier = PMCK_TIER_LOCAL;
		snprintf(out->reason, sizeof(out->reason), rec.rejected ?
				"local store: step %llu verified (newer step %llu rejected: tensor '%s' "
				"fails its checksum)" : "local store: step %llu verified",
				(unsigned long long)rec.step, (unsigned long long)rec.rejected_step,
				rec.rejected_tensor);
		return 0;
	}
	/* Candidates existed (a sealed slot failed verification): data was lost, not never saved. */
	int had_candidates = ret == PMCK_E_NONE_USABLE;
	int nothing = had_candidates ? PMCK_E_NONE_USABLE : PMCK_E_NO_CHECKPOINT;
	snprintf(local_why, sizeof(local_why), "%s", pmck_errormsg());
	if (!shared_dir)
		return ret;

	struct pmck__steps l;
	if ((ret = pmck__list_steps(shared_dir, &l)))
		return pma__err_prefix(nothing, "no local checkpoint (%s); shared directory", local_why);
	size_t *idx = malloc((l.n + 1) * sizeof(*idx));
	if (!idx) {
		pmck__free_steps(&l);
		return pma__err(-ENOMEM, "out of memory");
	}
	/*
	 * Newest first by (generation, step) among the steps of this layout:
	 * a newer run's steps before an older run's, whatever their numbers.
	 * Steps of other layouts are not candidates (another job's).
	 */
	size_t n = pmck__order_ours(&l, pmck_store_layout_hash(s), 0, idx);
	char leaf[64], path[PATH_MAX], why[384] = "none complete of this layout";
	snprintf(leaf, sizeof(leaf), "rank-%05u.safetensors", rank);
	/* Quarantined steps were checkpoints too: their loss is not a fresh start. */
	size_t nq = pmck__quarantine_count(shared_dir);
	if (!n && nq)
		snprintf(why, sizeof(why), "none complete of this layout; %zu step%s in %s/"
				PMCK_QUARANTINE, nq, nq == 1 ? "" : "s", shared_dir);
	had_candidates |= n > 0 || nq > 0;
	ret = had_candidates ? PMCK_E_NONE_USABLE : PMCK_E_NO_CHECKPOINT;
	for (size_t k = 0; k < n; k++) {
		uint64_t step = (uint64_t)l.step[idx[k]];
		if (pmck__step_path(path, sizeof(path), shared_dir, step, leaf))
			continue;
		/* import checks every tensor against the file's checksums before committing it */
		if (pmck__safetensors_import(s, path, step, 1) == 0 &&
		    pmck__store_recover(s, &rec) == 0) {
			out->step = rec.step;
			out->tier = PMCK_TIER_SHARED;
			snprintf(out->path, sizeof(out->path), "%s", path);
			snprintf(out->reason, sizeof(out->reason), "no verified local checkpoint (%s): "
					"loaded step %llu from the shared directory", local_why,
					(unsigned long long)rec.step);
			ret = 0;
			break;
		}
		snprintf(why, sizeof(why), "%s", pmck_errormsg()); /* the newest failure, for the message */
		reject_shared(s, shared_dir, step, rank, l.m[idx[k]].world_size, why);
	}
	free(idx);
	pmck__free_steps(&l);
	if (ret == PMCK_E_NONE_USABLE)
		pma__err(ret, "checkpoints exist but none is usable: locally %s; no complete, verified "
				"step for rank %u in %s (%s)", local_why, rank, shared_dir, why);
	else if (ret)
		pma__err(ret, "no checkpoint: locally %s; none of this layout in %s (%s)", local_why,
				shared_dir, why);
	return ret;
}
