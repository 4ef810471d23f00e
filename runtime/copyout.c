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
	int error;             /* first failure since the last wait */
	struct pmck_copyout_stats stats;
};

static uint64_t
now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/*
 * Keeps the newest `keep` complete steps; removes older complete steps and
 * any incomplete step older than the oldest one kept.  With cleanup_all,
 * every incomplete step goes (start-up: no writer is running).
 */
static int
clean(struct pmck_copyout *c, int cleanup_all)
{
	struct pmck__steps l;
	int ret = pmck__list_steps(c->dir, &l);
	unsigned kept = 0;
	char name[64];

	for (size_t i = 0; i < l.n && !ret; i++) {
		int drop = l.complete[i] ? kept >= c->o.keep : cleanup_all || kept >= c->o.keep;
		snprintf(name, sizeof(name), "step-%012" PRId64, l.step[i]);
		if (l.complete[i] && !drop) {
			kept++;
			if (cleanup_all) /* a re-copy of a complete step killed halfway */
				ret = pmck__remove_tmp(c->dir, name);
		}
		if (!drop)
			continue;
		ret = pmck__remove_step(c->dir, name);
		if (!ret && l.complete[i]) {
			pthread_mutex_lock(&c->lock);
			c->stats.deleted++;
			pthread_mutex_unlock(&c->lock);
		}
	}
	pmck__free_steps(&l);
	return ret;
}

/* Writes the marker of a step atomically: temporary name, fsync, rename, fsync dir. */
static int
write_marker(const char *stepdir, uint64_t step, unsigned world)
{
	char tmp[PATH_MAX + 32], path[PATH_MAX + 32], text[128];
	snprintf(path, sizeof(path), "%s/" PMCK_MARKER, stepdir);
	snprintf(tmp, sizeof(tmp), "%s/." PMCK_MARKER ".tmp", stepdir);
	int n = snprintf(text, sizeof(text), "{\"step\": %" PRIu64 ", \"world_size\": %u}\n", step, world);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return pma__err(-errno, "create %s: %s", tmp, strerror(errno));
	int ok = write(fd, text, (size_t)n) == n && fsync(fd) == 0;
	int err = errno;
	close(fd);
	if (!ok || rename(tmp, path)) {
		err = ok ? errno : err;
		unlink(tmp);
		return pma__err(-err, "write %s: %s", path, strerror(err));
	}
	return pmck__fsync_dir(stepdir);
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

static int
copy_one(struct pmck_copyout *c, const struct job *j)
{
	char stepdir[PATH_MAX], file[PATH_MAX], leaf[64];
	uint64_t bytes = 0;
	int ret;

	snprintf(leaf, sizeof(leaf), "rank-%05u.safetensors", c->o.rank);
	if ((ret = pmck__step_path(stepdir, sizeof(stepdir), c->dir, j->step, NULL)) ||
	    (ret = pmck__step_path(file, sizeof(file), c->dir, j->step, leaf)))
		return ret;
	if (mkdir(stepdir, 0755) && errno != EEXIST)
		return pma__err(-errno, "mkdir %s: %s", stepdir, strerror(errno));
	if ((ret = pmck__fsync_dir(c->dir)))
		return ret;
	ret = pmck__safetensors_write_slot(c->store, j->slot, j->step, file, c->o.rank,
			c->o.world_size, c->o.progress, c->o.progress_arg, &bytes);
	if (!ret && c->o.rank == 0)
		ret = await_ranks(c, j->step);
	if (!ret && c->o.rank == 0)
		ret = write_marker(stepdir, j->step, c->o.world_size);
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

		uint64_t t0 = now_ns();
		int ret = copy_one(c, &j);
		uint64_t copy_ns = now_ns() - t0;
		pmck__slot_unpin(c->store, j.slot);
		if (!ret)
			ret = clean(c, 0);

		pthread_mutex_lock(&c->lock);
		c->stats.busy_ns += copy_ns;
		if (ret && !c->error)
			c->error = ret;
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

	int ret = 0;
	if (mkdir(c->dir, 0755) && errno != EEXIST)
		ret = pma__err(-errno, "mkdir %s: %s", c->dir, strerror(errno));
	/* Leftovers of a crash: only one rank cleans a shared step, and only when alone. */
	if (!ret && c->o.world_size == 1)
		ret = clean(c, 1);
	if (!ret && pthread_create(&c->thread, NULL, copier, c))
		ret = pma__err(-EAGAIN, "cannot start the copier thread");
	if (ret) {
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
pmck_copyout_wait(struct pmck_copyout *c)
{
	pthread_mutex_lock(&c->lock);
	while (c->len)
		pthread_cond_wait(&c->cond, &c->lock);
	int ret = c->error;
	c->error = 0;
	pthread_mutex_unlock(&c->lock);
	return ret;
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

int
pmck_recover_tiers(struct pmck_store *s, const char *shared_dir, unsigned rank,
		struct pmck_tier_recovery *out)
{
	struct pmck_recovery rec;
	char local_why[384];
	int ret = pmck_store_recover(s, &rec);

	memset(out, 0, sizeof(*out));
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
	snprintf(local_why, sizeof(local_why), "%s", pmck_errormsg());
	if (!shared_dir)
		return ret;

	struct pmck__steps l;
	if ((ret = pmck__list_steps(shared_dir, &l)))
		return pma__err_prefix(PMCK_E_NO_CHECKPOINT, "no local checkpoint (%s); shared "
				"directory", local_why);
	char leaf[64], path[PATH_MAX], why[384] = "none complete";
	snprintf(leaf, sizeof(leaf), "rank-%05u.safetensors", rank);
	ret = PMCK_E_NO_CHECKPOINT;
	for (size_t i = 0; i < l.n; i++) {
		if (!l.complete[i] || pmck__step_path(path, sizeof(path), shared_dir, (uint64_t)l.step[i], leaf))
			continue;
		/* import checks every tensor against the file's checksums before committing it */
		if (pmck__safetensors_import(s, path, (uint64_t)l.step[i], 1) == 0 &&
		    pmck_store_recover(s, &rec) == 0) {
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
	}
	pmck__free_steps(&l);
	if (ret)
		pma__err(ret, "no checkpoint: locally %s; no complete, verified step for rank %u in "
				"%s (%s)", local_why, rank, shared_dir, why);
	return ret;
}
