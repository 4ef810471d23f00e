/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * internal.h -- the on-media format of a store and the in-memory objects
 * shared by the runtime's files.  See docs/design.md for the byte map.
 */
#ifndef PMCK_INTERNAL_H
#define PMCK_INTERNAL_H 1

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "pmckpt.h"
#include "errmsg.h"       /* common/: pmck__err, pmck__err_prefix */
#include "pmtrace.h"      /* common/: persistence events of the trace build (make TRACE=1) */

/*
 * The runtime's files report failures with pma__err and pma__err_prefix, by
 * their names in libpmalloc; inside libpmckpt those are libpmckpt's own
 * writers into the same buffer (runtime/errmsg.c), since libpmalloc exports
 * no internal.  New code may call pmck__err directly.
 */
#define pma__err pmck__err
#define pma__err_prefix pmck__err_prefix

#define STORE_MAGIC "PMCKSTR"   /* 8 bytes with the NUL */
#define STORE_VERSION 1u
#define STORE_NAME_MAX 64       /* store names; allocation names add a suffix */
#define SLOT_HDR_OFF 256u       /* slot s's header at SLOT_HDR_OFF + 64 * s */
#define TMAP_OFF 512u

/* NAME.meta, offset 0.  Never changes after creation. */
struct store_hdr {
	char magic[8];
	uint32_t version;
	uint32_t ntensors;
	uint64_t data_size;    /* bytes of each slot's data region */
	uint64_t tensor_bytes; /* sum of the tensors' sizes */
	uint64_t layout_hash;
	uint64_t tmap_off;     /* TMAP_OFF */
	uint64_t csum_off;     /* slot s's checksums at csum_off + 8 * ntensors * s */
	uint64_t meta_size;
	uint64_t checksum;     /* XXH3-64 of the bytes before it and of the tensor map */
};

/*
 * One per slot, each in its own cache line.  seal == step + 1 says the slot
 * holds a complete checkpoint of `step`; 0 says it does not.  Keeping the
 * step twice lets recovery reject a seal damaged on media.  `world` is
 * written with the step (persist point 2 of commit); stores made before it
 * existed hold 0 there (the meta allocation is zeroed), read as "not
 * recorded".
 */
struct slot_hdr {
	uint64_t seal;
	uint64_t step;
	uint64_t world;        /* (world size << 32) | rank of the global job that committed it; 0: none */
	uint64_t reserved[5];
};

/* One tensor of the map, in declaration order (index = tensor index). */
struct tmap_entry {
	char name[PMCK_NAME_MAX];
	uint32_t dtype;
	uint32_t ndim;
	uint64_t shape[PMCK_MAX_DIMS];
	uint64_t offset; /* from the start of a slot's data region */
	uint64_t nbytes;
	uint32_t layer;
	uint32_t reserved0;
	uint64_t reserved[4];
};

_Static_assert(sizeof(struct store_hdr) <= SLOT_HDR_OFF, "store header fits");
_Static_assert(sizeof(struct slot_hdr) == 64, "slot header is a cache line");
_Static_assert(sizeof(struct tmap_entry) == 256, "tensor map entry is 256 bytes");

struct pmck_ckpt {
	struct pmck_store *store;
	unsigned slot;
	uint64_t step;
};

struct pmck_store {
	struct pma_pool *pool;
	struct pma_region *region;
	char name[STORE_NAME_MAX];
	struct store_hdr *hdr;
	struct slot_hdr *slot[2];
	struct tmap_entry *tmap;
	uint64_t *csum[2];
	char *data[2];
	uint64_t *chunk_first;      /* tensor i's chunks: chunk_hash[chunk_first[i] ..] */
	uint64_t *chunk_hash;       /* XXH3 of each chunk written in this checkpoint */
	_Atomic uint64_t *written;  /* bytes written per tensor in this checkpoint */
	size_t fused_block;         /* bytes hashed, then streamed, at a time */
	int readable_slot;          /* recovered slot, -1 if none */
	int bad[2];                 /* slot failed verification: holds nothing worth keeping */
	int verified;               /* recover ran (or the store is new): bad[] is known */
	int in_flight;
	uint64_t world_tag;         /* written into slot_hdr.world at commit (set by pmck_global_new) */
	/* The last recovery's rejected candidates (pmck_store_rejections), and whose they are. */
	struct pmck_rejection *rej;
	size_t nrej, rej_cap;
	unsigned rej_rank;
	struct pmck_ckpt ckpt;
	/* Slots being read by a copier: begin must not overwrite them (see pmck__slot_pin). */
	pthread_mutex_t pin_lock;
	pthread_cond_t pin_cond;
	unsigned pins[2];
};

/* layout.c */
int pmck__layout_check(const struct pmck_tensor_desc *d, size_t n, uint64_t *nbytes);

/*
 * pmck__mkdir_p -- makes dir and its missing parents (mode for each).  The
 * outermost directory it made goes to first_made ("" if none), for
 * pmck__rmdir_made to undo a failed call.  Errors: -errno, -ENOTDIR.
 */
int pmck__mkdir_p(const char *dir, mode_t mode, char *first_made, size_t first_size);
/* pmck__rmdir_made -- removes dir and its parents down to first_made, if empty. */
void pmck__rmdir_made(const char *dir, const char *first_made);
/*
 * pmck__dir_ready -- dir, checked as pmck_dir_check does (PMCK_DIR_CREATE,
 * PMCK_DIR_GROUP), unless PMCK__DIR_UNCHECKED (a directory shared on
 * purpose: only made if missing).  advice (may be NULL) ends a refusal's
 * message: what the caller's user can do (how to say the directory is
 * shared on purpose, say).
 * The outermost directory made goes to made ("" if none; removed again if
 * this call fails), for pmck__rmdir_made to undo a later failure.
 */
#define PMCK__DIR_UNCHECKED (1u << 16)
int pmck__dir_ready(const char *dir, unsigned flags, const char *advice, char *made,
		size_t made_size);
/*
 * pmck__create_private -- a new file at path with mode (before the umask),
 * for writing: a leftover at that name is removed first, then the file is
 * made with O_EXCL | O_NOFOLLOW, never through a link nor into another's
 * file.  Returns the descriptor or a negative error.
 */
int pmck__create_private(const char *path, mode_t mode);
/* Modes of what the runtime creates: private, or readable by the group (PMCK_COPYOUT_GROUP). */
#define PMCK__MODE_DIR(group) ((group) ? 0750 : 0700)
#define PMCK__MODE_FILE(group) ((group) ? 0640 : 0600)
/*
 * pmck__write_file_durably -- writes dir/name as a whole: a temporary name
 * (pmck__create_private, mode), fsync, rename, fsync of dir.  A crash leaves
 * the old file or the new one.
 */
int pmck__write_file_durably(const char *dir, const char *name, const char *text, size_t n,
		mode_t mode);
uint64_t pmck__layout_hash(const struct pmck_tensor_desc *d, size_t n);
/* pmck__layout_diff -- describes the first difference between s's layout and d[0..n). */
void pmck__layout_diff(const struct pmck_store *s, const struct pmck_tensor_desc *d, size_t n,
		char *buf, size_t len);
uint64_t pmck__layout_place(const struct pmck_tensor_desc *d, const uint64_t *nbytes,
		size_t n, uint64_t *offset);

/* commit.c: bytes [off, off+len) of tensor idx were stored into the slot by
 * someone else (a GPU); flush them and hash them.  Chunk-aligned like write_range. */
int pmck__ckpt_landed(struct pmck_ckpt *c, size_t idx, uint64_t off, uint64_t len);
/* Only the flush of such bytes (their hashes come later: pmck__ckpt_landed_hashed). */
void pmck__ckpt_flush_landed(struct pmck_ckpt *c, size_t idx, uint64_t off, uint64_t len);
/*
 * The rest for bytes already flushed: chunk k of the range takes hashes[k]
 * where given[k] (computed elsewhere from the same bytes: the GPU's device
 * hashing), else is hashed here from what landed; then counts them written.
 */
int pmck__ckpt_landed_hashed(struct pmck_ckpt *c, size_t idx, uint64_t off, uint64_t len,
		const uint64_t *hashes, const uint8_t *given);

/*
 * commit.c: pmck_ckpt_commit, refusing to seal (PMCK_E_CORRUPT, the
 * checkpoint aborted) unless every tensor's checksum equals expect[i]
 * (NULL: no comparison).  For copies received from elsewhere.
 */
int pmck__ckpt_commit_expect(struct pmck_ckpt *c, const uint64_t *expect);
/* commit.c: durably unseals slot k (a partner copy beyond `keep`). */
void pmck__slot_unseal(struct pmck_store *s, unsigned k);

/* commit.c: the slot the next begin writes, and the newest good step (-1: none). */
unsigned pmck__begin_target(struct pmck_store *s, int64_t *newest_step);
/* commit.c: keep slot k from being overwritten (counted), and release it. */
void pmck__slot_pin(struct pmck_store *s, unsigned k);
void pmck__slot_unpin(struct pmck_store *s, unsigned k);
int pmck__slot_pinned(struct pmck_store *s, unsigned k);

/*
 * safetensors.c: writes slot k (sealed, step) to path atomically; adds bytes
 * written; the file is created with mode (before the umask) by
 * pmck__create_private.  On failure the temporary file is gone, and `why` (may be NULL)
 * gets the path of the failing operation and, where space ran out, the
 * bytes needed and available (its error, step and message are the caller's).
 */
int pmck__safetensors_write_slot(const struct pmck_store *s, unsigned k, uint64_t step,
		const char *path, unsigned rank, unsigned world_size, mode_t mode,
		void (*progress)(void *, uint64_t, uint64_t, uint64_t), void *arg, uint64_t *bytes,
		struct pmck_copyout_failure *why);
/*
 * safetensors.c: pmck_safetensors_import; exact_step: a copy-out step's file,
 * whose own step must be `step` and which is not read through a symbolic link.
 */
int pmck__safetensors_import(struct pmck_store *s, const char *path, uint64_t step, int exact_step);
/*
 * safetensors.c: the layout hash in the __metadata__ of a copy-out step's
 * file (not read through a link); -ENOENT if it has none.
 */
int pmck__safetensors_layout(const char *path, uint64_t *hash);
/* safetensors.c: fsync of a directory, so a rename or unlink in it is durable. */
int pmck__fsync_dir(const char *dir);

/*
 * shared_dir.c: a shared directory's steps (directories named as
 * pmck__step_path names them), newest first by step number,
 * whether each is complete, and what its COMPLETE marker says.  A marker
 * written before generations existed has step and world_size only: its
 * generation is 0 and its layout hash is read from the step's rank-0 file
 * (has_layout 0 if that cannot be read).
 */
#define PMCK_MARKER "COMPLETE"
struct pmck__marker {
	uint64_t layout_hash;
	uint64_t generation;
	unsigned world_size;    /* 1 if not recorded; 0 if the marker is unreadable */
	int has_layout;         /* layout_hash known (recorded, or from the rank-0 file) */
	int readable;           /* the marker is a JSON object */
	int has_world, has_generation, recorded_layout; /* fields the marker records */
};
struct pmck__steps {
	int64_t *step;
	int *complete;
	struct pmck__marker *m; /* valid where complete */
	size_t n;
};
int pmck__list_steps(const char *dir, struct pmck__steps *l);
void pmck__free_steps(struct pmck__steps *l);
/* 1 and *m if DIR/step-<step> is complete, else 0. */
int pmck__step_marker(const char *dir, uint64_t step, struct pmck__marker *m);
/* Complete step i is this job's lineage: same layout and world size (0: any world size). */
int pmck__step_ours(const struct pmck__steps *l, size_t i, uint64_t layout_hash, unsigned world);
/*
 * Indices of the steps for which pmck__step_ours holds, newest first by
 * (generation, step), into idx (l->n entries); returns how many.
 */
size_t pmck__order_ours(const struct pmck__steps *l, uint64_t layout_hash, unsigned world,
		size_t *idx);
/* Writes DIR/step-<step>/COMPLETE atomically with the marker's fields. */
int pmck__write_marker(const char *stepdir, uint64_t step, const struct pmck__marker *m, mode_t mode);
/* DIR/step-<step>[/leaf] into buf; -ENAMETOOLONG. */
int pmck__step_path(char *buf, size_t len, const char *dir, uint64_t step, const char *leaf);
/* Removes DIR/<name> (a step directory), marker first, and fsyncs DIR. */
int pmck__remove_step(const char *dir, const char *name);
/* Removes the *.tmp leftovers of an interrupted write inside DIR/<name>. */
int pmck__remove_tmp(const char *dir, const char *name);
/* Is a file of a step directory such a leftover (name ends in ".tmp")? */
int pmck__is_tmp(const char *name);

/*
 * retention.c: which steps of a listing stay and which go, for the copier
 * (its own lineage) and pmck_copyout_clean (every lineage): *v receives one
 * verdict per step of l (l->n entries; the caller frees it).  -ENOMEM.
 */
#define PMCK__RETAIN_EVERY_LINEAGE 1u /* every (layout, world size); else the one named */
#define PMCK__RETAIN_ALL_INCOMPLETE 2u /* every incomplete step goes (no writer runs) */
struct pmck__retention {
	unsigned keep;        /* complete steps kept per lineage, at least 1 */
	unsigned flags;       /* PMCK__RETAIN_* */
	uint64_t layout_hash; /* the lineage, without PMCK__RETAIN_EVERY_LINEAGE */
	unsigned world_size;
	uint64_t generation;  /* the copier's: bounds which incomplete steps are leftovers */
};
enum pmck__fate {
	PMCK__LEAVE,             /* untouched: no known lineage, another lineage, or maybe in progress */
	PMCK__KEEP,              /* complete, among its lineage's newest `keep` */
	PMCK__REMOVE,            /* complete, older than its lineage's newest `keep` */
	PMCK__REMOVE_INCOMPLETE, /* no COMPLETE, a leftover */
};
struct pmck__verdict {
	enum pmck__fate fate;
	size_t lineage_pos;      /* KEEP, REMOVE: 0 for its lineage's newest */
};
int pmck__retention_decide(const struct pmck__steps *l, const struct pmck__retention *r,
		struct pmck__verdict **v);

/* Nanoseconds on the monotonic clock (the pipeline's and the copier's busy/wait times). */
static inline uint64_t
pmck__now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/*
 * pace.c: the GPU writers' copies out of the device paced to gbps GB/s
 * ($PMCK_GPU_RATE_GBPS, 1 to PMCK__PACE_MAX_GBPS, parsed by the pipeline) for
 * every pipeline of the process together.  pmck__pace takes the next free
 * interval of len / gbps on the process's one schedule, sleeps until it
 * begins, and returns when that is (CLOCK_MONOTONIC ns, as pmck__now_ns).
 * pmck__pace_bytes: the bytes of every interval taken so far (for tests).
 */
#define PMCK__PACE_MAX_GBPS 1000ul
uint64_t pmck__pace(unsigned gbps, uint64_t len);
uint64_t pmck__pace_bytes(void);

/* parallel.c: fn over every piece (chunk-aligned, slot order) of every tensor, on
 * `threads` threads (0: usable_cpus() of common/cpus.h; at most PMCK_MAX_WORKERS).  First error wins. */
#define PMCK_MAX_WORKERS 8
int pmck__for_each_piece(const struct pmck_store *s, unsigned threads,
		int (*fn)(void *arg, uint32_t tensor, uint64_t off, uint64_t len), void *arg);
/* The same over n runs of bytes other than a store's tensors (a file's): run i is
 * nbytes long and is taken in the order of its offset (where it lies in memory). */
struct pmck_span {
	uint64_t nbytes, offset;
};
int pmck__for_each_span_piece(const struct pmck_span *spans, uint32_t n, unsigned threads,
		int (*fn)(void *arg, uint32_t span, uint64_t off, uint64_t len), void *arg);

/* checksum.c */
uint64_t pmck__copy_hash(const struct pma_region *r, void *dst, const void *src,
		size_t len, size_t block);
uint64_t pmck__hash(const void *data, size_t len);
uint64_t pmck__hash_copy(void *dst, const void *src, size_t len);
uint64_t pmck__combine(const uint64_t *chunk_hashes, size_t n);
/* XXH3's default secret (XXH3_kSecret, PMCK_XXH3_SECRET_SIZE bytes), for device hashing (gpu.cu). */
const uint8_t *pmck__xxh3_secret(void);

static inline uint64_t
pmck__nchunks(uint64_t nbytes)
{
	return (nbytes + PMCK_HASH_CHUNK - 1) / PMCK_HASH_CHUNK;
}

/* A slot's sealed step, or -1 if it is not sealed (or its seal is damaged). */
static inline int64_t
pmck__sealed_step(const struct pmck_store *s, unsigned k)
{
	uint64_t seal = __atomic_load_n(&s->slot[k]->seal, __ATOMIC_ACQUIRE);

	if (seal == 0 || seal != s->slot[k]->step + 1 || seal > (uint64_t)INT64_MAX)
		return -1;
	return (int64_t)s->slot[k]->step;
}

#define PMCK__WORLD_TAG(size, rank) (((uint64_t)(size) << 32) | (uint32_t)(rank))
#define PMCK__TAG_SIZE(tag) ((unsigned)((tag) >> 32))
#define PMCK__TAG_RANK(tag) ((unsigned)((tag) & 0xffffffffu))

/*
 * recover.c: the rejection list.  A public recovery clears it and sets
 * whose candidates it tries (pmck__reject_start); the recoveries it calls
 * (pmck__store_recover, pmck__store_recover_step) only append to it.
 * pmck__reject appends one entry (dropped if out of memory) and returns it.
 */
void pmck__reject_start(struct pmck_store *s, unsigned rank);
struct pmck_rejection *pmck__reject(struct pmck_store *s, unsigned rank, enum pmck_tier tier,
		uint64_t step, const char *fmt, ...) __attribute__((format(printf, 5, 6)));
int pmck__store_recover(struct pmck_store *s, struct pmck_recovery *info);
/* pmck__store_recover, copying each tensor i of the slot it verifies to dst[i] (if not NULL). */
int pmck__store_recover_into(struct pmck_store *s, void *const *dst, struct pmck_recovery *info);
int pmck__store_recover_step(struct pmck_store *s, uint64_t step, struct pmck_recovery *info);
/*
 * recover.c: the slot sealed with `step` becomes the readable one without
 * being hashed again (PMCK_E_NO_CHECKPOINT if no slot holds it).  Only for a
 * slot this same recovery has verified: by pmck__store_recover_step, or by
 * sealing it with pmck__ckpt_commit_expect, whose checksums were computed
 * from the bytes as they were stored into the slot and matched the ones
 * expected.  Hashing it again would find what was just found.
 */
int pmck__store_adopt_step(struct pmck_store *s, uint64_t step, struct pmck_recovery *info);

/*
 * quarantine.c: a damaged complete step (see "Quarantine" in pmckpt.h).
 * pmck__file_check verifies rank's file of DIR/step-<step>: 0 if it
 * verifies; 1 and why if it is damaged (missing, truncated, a checksum);
 * -1 and why if it cannot be read now (not known to be damaged).
 * pmck__quarantine_count: the steps in DIR/quarantine (0 if none).
 * pmck__quarantine_step moves the step to DIR/quarantine with a NOTE
 * saying `what` (the path moved to in moved, may be NULL); -ENOENT if the
 * step is gone (another recovery moved it).
 */
int pmck__file_check(const char *dir, uint64_t step, unsigned rank, char *why, size_t len);
size_t pmck__quarantine_count(const char *dir);
int pmck__quarantine_step(const char *dir, uint64_t step, const char *what, char *moved,
		size_t len);
#define PMCK_QUARANTINE "quarantine"

/* Completes the agreement in flight (global.c): pmck_global_begin without the begin. */
int pmck__global_complete(struct pmck_global *g);

/*
 * global.c <-> partner.c.  A group's store and collectives, and the partner
 * tier attached to it (NULL: none; set by pmck_partner_new, cleared by
 * pmck_partner_delete).
 */
struct pmck_store *pmck__global_store(struct pmck_global *g);
const struct pmck_collectives *pmck__global_coll(struct pmck_global *g);
void pmck__global_set_partner(struct pmck_global *g, struct pmck_partner *p);
/*
 * global.c: starts the deferred agreement on `step` once its partner round
 * ended; ok: this rank committed it and the round succeeded (its copy
 * sealed by the target, the source's sealed here), else the step is not
 * offered as committed.
 */
void pmck__global_offer(struct pmck_global *g, uint64_t step, int ok);
/* partner.c: queues the round of `step` (committed: this rank sealed it); it then offers it. */
int pmck__partner_submit(struct pmck_partner *p, uint64_t step, int committed);
/*
 * partner.c, during pmck_global_recover (collective over the group): each
 * holder verifies the copies it holds and tells their owner; steps[] gets
 * the steps this rank's holder verified for it (*n of them, at most
 * PMCK_PARTNER_KEEP_MAX), and this store's rejections list what either
 * side rejected.
 */
int pmck__partner_offer(struct pmck_partner *p, int64_t *steps, size_t *n);
/*
 * partner.c, collective: every holder sends its owner the step the owner
 * asks for (need: step + 1, 0: nothing), straight into the owner's store,
 * sealed only with the holder's checksums.  Then every holder drops the
 * copies it holds newer than `agreed` (never global).
 */
int pmck__partner_restore(struct pmck_partner *p, uint64_t need, uint64_t agreed);
/*
 * partner.c, at the end of pmck_global_recover on every rank: queues a
 * round that sends the recovered `step` again to the holder unless it
 * still holds it (held), and into the self store unless it holds it.  A
 * replaced node's ranks hold nothing for their sources until this round:
 * without it, losing the other node next would lose a step that only the
 * replaced node had a copy of.
 */
void pmck__partner_resend(struct pmck_partner *p, uint64_t step, int held);
/*
 * partner.c: the group found `step` + 1 not global (some rank did not
 * commit it): held copies and self copies newer than `step` are unsealed,
 * as the store's own slots are.  Called by the agreement, between rounds.
 */
void pmck__partner_discard_after(struct pmck_partner *p, int64_t step);
/*
 * partner.c, during pmck_global_recover (every > 1): the steps in this
 * rank's self store (-1: none); whether `step` there verifies (0, else
 * PMCK_E_CORRUPT with a rejection on the rank's store); and copying it
 * into the rank's store (sealed only with the self copy's checksums).
 */
void pmck__partner_self_steps(const struct pmck_partner *p, int64_t step[2]);
int pmck__partner_self_check(struct pmck_partner *p, uint64_t step);
int pmck__partner_self_restore(struct pmck_partner *p, uint64_t step);
/* partner.c: the rank holding rank's copies (for messages). */
unsigned pmck__partner_target_of(const struct pmck_partner *p, unsigned rank);

#endif
