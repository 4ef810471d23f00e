/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * retention.c -- which steps of a copy-out directory stay and which go:
 * the one rule of the copier (runtime/copyout.c, its own lineage after
 * each copy and at start-up) and of pmck_copyout_clean
 * (runtime/copyout_dir.c, every lineage of a directory without a job).
 * Deciding only: the callers remove what is decided, and report it.
 *
 * A lineage is the complete steps of one (layout hash, world size), newest
 * first by (generation, step) (pmck__order_ours); its first `keep` stay
 * and the others go.  A complete step of no known lineage (unreadable
 * marker, or an older marker whose rank-0 file gives no layout) is left
 * alone, and so are other lineages' steps where one lineage is retained.
 *
 * Incomplete steps (no COMPLETE): every one goes where no writer can be
 * running (PMCK__RETAIN_ALL_INCOMPLETE: a single rank's copier starting,
 * `pmckpt clean`).  Otherwise only one older than the oldest kept step of
 * the retaining copier's own generation: that job has completed a newer
 * step, so every rank's copy of the older one has ended (each rank copies
 * in step order) and the step is a leftover of a failed copy; a newer or
 * unrelated one may be in progress elsewhere and stays.
 */
#include <errno.h>
#include <stdlib.h>

#include "internal.h"

/* Ranks the lineage (hash, world): v[j] of each of its steps says KEEP or REMOVE and where. */
static void
rank_lineage(const struct pmck__steps *l, uint64_t hash, unsigned world, unsigned keep,
		size_t *idx, struct pmck__verdict *v)
{
	size_t n = pmck__order_ours(l, hash, world, idx);

	for (size_t k = 0; k < n; k++)
		v[idx[k]] = (struct pmck__verdict){k < keep ? PMCK__KEEP : PMCK__REMOVE, k};
}

int
pmck__retention_decide(const struct pmck__steps *l, const struct pmck__retention *r,
		struct pmck__verdict **out)
{
	size_t *idx = malloc((l->n + 1) * sizeof(*idx));
	struct pmck__verdict *v = malloc((l->n + 1) * sizeof(*v));
	int64_t own_oldest = -1; /* oldest kept step of r->generation */

	*out = NULL;
	if (!idx || !v) {
		free(idx);
		free(v);
		return pma__err(-ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < l->n; i++)
		v[i] = (struct pmck__verdict){PMCK__LEAVE, 0};

	if (r->flags & PMCK__RETAIN_EVERY_LINEAGE) {
		/* Each lineage once, from its first step met. */
		for (size_t i = 0; i < l->n; i++)
			if (v[i].fate == PMCK__LEAVE && l->complete[i] && l->m[i].has_layout)
				rank_lineage(l, l->m[i].layout_hash, l->m[i].world_size, r->keep, idx, v);
	} else {
		rank_lineage(l, r->layout_hash, r->world_size, r->keep, idx, v);
		for (size_t i = 0; i < l->n; i++)
			if (v[i].fate == PMCK__KEEP && l->m[i].generation == r->generation &&
			    (own_oldest < 0 || l->step[i] < own_oldest))
				own_oldest = l->step[i];
	}

	for (size_t i = 0; i < l->n; i++)
		if (!l->complete[i] && ((r->flags & PMCK__RETAIN_ALL_INCOMPLETE) ||
					(own_oldest >= 0 && l->step[i] < own_oldest)))
			v[i].fate = PMCK__REMOVE_INCOMPLETE;
	free(idx);
	*out = v;
	return 0;
}
