/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * store.c -- creating, opening and describing a store: its header and
 * tensor map in NAME.meta, its two data regions NAME.data0 / NAME.data1.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "internal.h"

const char *
pmck_errormsg(void)
{
	return pma_errormsg();
}

static int
alloc_name(char *buf, size_t len, const char *store, const char *suffix)
{
	if (!store || !*store || strlen(store) >= STORE_NAME_MAX)
		return pma__err(-EINVAL, "store name must be 1..%d bytes", STORE_NAME_MAX - 1);
	snprintf(buf, len, "%s.%s", store, suffix);
	return 0;
}

static uint64_t
static_checksum(const struct store_hdr *h, const struct tmap_entry *tmap, uint64_t n)
{
	XXH3_state_t st;

	XXH3_64bits_reset(&st);
	XXH3_64bits_update(&st, h, offsetof(struct store_hdr, checksum));
	XXH3_64bits_update(&st, tmap, n * sizeof(*tmap));
	return XXH3_64bits_digest(&st);
}

/* Builds the in-memory store over already validated media. */
static int
store_attach(struct pma_pool *p, const char *name, char *meta, char *data0, char *data1,
		struct pmck_store **out)
{
	struct pmck_store *s = calloc(1, sizeof(*s));
	if (!s)
		return pma__err(-ENOMEM, "out of memory");
	s->pool = p;
	s->region = pma_pool_region(p);
	snprintf(s->name, sizeof(s->name), "%s", name);
	s->hdr = (struct store_hdr *)meta;
	for (unsigned k = 0; k < 2; k++) {
		s->slot[k] = (struct slot_hdr *)(meta + SLOT_HDR_OFF + 64 * k);
		s->csum[k] = (uint64_t *)(meta + s->hdr->csum_off) + (size_t)k * s->hdr->ntensors;
	}
	s->tmap = (struct tmap_entry *)(meta + s->hdr->tmap_off);
	s->data[0] = data0;
	s->data[1] = data1;
	s->readable_slot = -1;
	pthread_mutex_init(&s->pin_lock, NULL);
	pthread_cond_init(&s->pin_cond, NULL);
	/*
	 * Hash a block, then stream it out while it is still in the cache.
	 * Measured on this project's 2-core machine: 256 KiB blocks amortise
	 * the per-call msync of page-granularity mappings (tmpfs); 32 KiB
	 * suit real PM, whose copies take no system call.
	 */
	s->fused_block = pma_region_granularity(s->region) == PMA_GRANULARITY_PAGE ?
			256 << 10 : 32 << 10;

	size_t n = s->hdr->ntensors;
	uint64_t chunks = 0;
	s->chunk_first = malloc((n + 1) * sizeof(*s->chunk_first));
	s->written = calloc(n, sizeof(*s->written));
	if (s->chunk_first && s->written) {
		for (size_t i = 0; i < n; i++) {
			s->chunk_first[i] = chunks;
			chunks += pmck__nchunks(s->tmap[i].nbytes);
		}
		s->chunk_first[n] = chunks;
		s->chunk_hash = malloc((chunks + 1) * sizeof(*s->chunk_hash));
	}
	if (!s->chunk_hash) {
		pmck_store_close(&s);
		return pma__err(-ENOMEM, "out of memory");
	}
	*out = s;
	return 0;
}

/* Frees what an interrupted create or destroy left behind. */
static void
free_leftovers(struct pma_pool *p, const char *name)
{
	static const char *const suffix[] = {"meta", "data0", "data1"};
	char an[PMA_NAME_MAX];

	for (unsigned k = 0; k < 3; k++) {
		alloc_name(an, sizeof(an), name, suffix[k]);
		pma_free(p, an); /* -ENOENT is the normal case */
	}
}

/*
 * The tensor map must be the one pmck_store_create writes for the layout it
 * describes: valid names (unique), dtypes and shapes, each tensor's size and
 * place as the layout's placement gives them, and the header's sizes and
 * layout hash those of that layout.  The checksum alone does not promise it
 * (a map damaged by a bug before it was checksummed, or a crafted one), and
 * everything after open trusts these fields: exports name dtypes and shapes,
 * commits write nbytes at offset.
 */
static int
check_tmap(const char *name, const struct store_hdr *h, const struct tmap_entry *tmap)
{
	size_t n = h->ntensors;
	struct pmck_tensor_desc *d = malloc(n * sizeof(*d) + 1);
	uint64_t *nbytes = malloc(n * sizeof(*nbytes) + 1);
	uint64_t *offset = malloc(n * sizeof(*offset) + 1);
	uint64_t total = 0;
	int ret = 0;

	if (!d || !nbytes || !offset) {
		ret = pma__err(-ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		d[i] = (struct pmck_tensor_desc){.name = tmap[i].name, .ndim = tmap[i].ndim,
						 .layer = tmap[i].layer};
		d[i].dtype = tmap[i].dtype < PMCK_DTYPE_COUNT ? (enum pmck_dtype)tmap[i].dtype
							       : PMCK_DTYPE_COUNT;
		memcpy(d[i].shape, tmap[i].shape, sizeof(d[i].shape));
	}
	if (pmck__layout_check(d, n, nbytes)) {
		ret = pma__err_prefix(PMCK_E_CORRUPT, "store '%s': tensor map", name);
		goto out;
	}
	uint64_t data_size = pmck__layout_place(d, nbytes, n, offset);
	if (!data_size) {
		ret = pma__err(-ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < n && !ret; i++) {
		total += nbytes[i];
		if (tmap[i].nbytes != nbytes[i] || tmap[i].offset != offset[i])
			ret = pma__err(PMCK_E_CORRUPT, "store '%s': tensor '%s' lies at %llu (%llu "
					"bytes), where its layout places %llu (%llu bytes)", name,
					tmap[i].name, (unsigned long long)tmap[i].offset,
					(unsigned long long)tmap[i].nbytes, (unsigned long long)offset[i],
					(unsigned long long)nbytes[i]);
	}
	if (!ret && (h->data_size != data_size || h->tensor_bytes != total))
		ret = pma__err(PMCK_E_CORRUPT, "store '%s': header sizes (%llu data, %llu tensor "
				"bytes) are not those of its tensor map (%llu, %llu)", name,
				(unsigned long long)h->data_size, (unsigned long long)h->tensor_bytes,
				(unsigned long long)data_size, (unsigned long long)total);
	if (!ret && h->layout_hash != pmck__layout_hash(d, n))
		ret = pma__err(PMCK_E_CORRUPT, "store '%s': layout hash does not match its tensor map",
				name);
out:
	free(d);
	free(nbytes);
	free(offset);
	return ret;
}

/* Checks that meta holds a complete store header; 0, -ENOENT (unfinished) or an error. */
static int
check_meta(const char *name, const char *meta, size_t meta_size, uint64_t data_size[2])
{
	const struct store_hdr *h = (const struct store_hdr *)meta;

	if (meta_size < TMAP_OFF)
		return pma__err(PMCK_E_CORRUPT, "store '%s': metadata of %zu bytes is too small",
				name, meta_size);
	static const char zero[sizeof(h->magic)];
	/* meta is allocated zeroed: an all-zero magic is a create that never finished. */
	if (!memcmp(h->magic, zero, sizeof(zero)))
		return pma__err(-ENOENT, "store '%s' was never completed (interrupted create)", name);
	if (memcmp(h->magic, STORE_MAGIC, sizeof(h->magic)))
		return pma__err(PMCK_E_CORRUPT, "store '%s': bad magic in its metadata", name);
	if (h->version != STORE_VERSION)
		return pma__err(PMCK_E_VERSION, "store '%s' has version %u; this library reads %u",
				name, h->version, STORE_VERSION);
	uint64_t n = h->ntensors;
	if (n == 0 || h->tmap_off != TMAP_OFF ||
	    h->csum_off != TMAP_OFF + n * sizeof(struct tmap_entry) ||
	    h->meta_size != h->csum_off + 2 * n * sizeof(uint64_t) || h->meta_size > meta_size)
		return pma__err(PMCK_E_CORRUPT, "store '%s': header fields are inconsistent", name);
	const struct tmap_entry *tmap = (const struct tmap_entry *)(meta + TMAP_OFF);
	if (static_checksum(h, tmap, n) != h->checksum)
		return pma__err(PMCK_E_CORRUPT, "store '%s': header or tensor map checksum mismatch",
				name);
	if (h->data_size > data_size[0] || h->data_size > data_size[1])
		return pma__err(PMCK_E_CORRUPT, "store '%s': data regions smaller than %llu bytes",
				name, (unsigned long long)h->data_size);
	for (uint64_t i = 0; i < n; i++)
		if (tmap[i].nbytes > h->data_size || tmap[i].offset > h->data_size - tmap[i].nbytes ||
		    !memchr(tmap[i].name, 0, sizeof(tmap[i].name)))
			return pma__err(PMCK_E_CORRUPT, "store '%s': tensor %llu lies outside the data "
					"region", name, (unsigned long long)i);
	return check_tmap(name, h, tmap);
}

int
pmck_store_open(struct pma_pool *p, const char *name, struct pmck_store **out)
{
	static const char *const suffix[] = {"meta", "data0", "data1"};
	char an[PMA_NAME_MAX];
	void *addr[3];
	size_t size[3];
	int ret;

	if (!p || !out)
		return pma__err(-EINVAL, "pmck_store_open: pool and out are required");
	*out = NULL;
	for (unsigned k = 0; k < 3; k++) {
		if ((ret = alloc_name(an, sizeof(an), name, suffix[k])))
			return ret;
		if ((ret = pma_lookup(p, an, &addr[k], &size[k])))
			return ret == -ENOENT ? pma__err(-ENOENT, "no store named '%s' in the pool", name)
					      : ret;
	}
	uint64_t data_size[2] = {size[1], size[2]};
	if ((ret = check_meta(name, addr[0], size[0], data_size)))
		return ret;
	return store_attach(p, name, addr[0], addr[1], addr[2], out);
}

int
pmck_store_create(struct pma_pool *p, const char *name, const struct pmck_tensor_desc *descs,
		size_t n, struct pmck_store **out)
{
	char meta_name[PMA_NAME_MAX], an[PMA_NAME_MAX];
	void *meta, *data[2];
	int ret;

	if (!p || !out)
		return pma__err(-EINVAL, "pmck_store_create: pool and out are required");
	*out = NULL;
	if (pma_region_rdonly(pma_pool_region(p)))
		return pma__err(-EROFS, "cannot create store '%s': %s is open read-only",
				name ? name : "", pma_region_path(pma_pool_region(p)));
	if ((ret = alloc_name(meta_name, sizeof(meta_name), name, "meta")))
		return ret;

	struct pmck_store *existing;
	ret = pmck_store_open(p, name, &existing);
	if (ret == 0) {
		pmck_store_close(&existing);
		return pma__err(-EEXIST, "a store named '%s' exists", name);
	}
	if (ret != -ENOENT)
		return ret;

	uint64_t *nbytes = malloc(n * sizeof(*nbytes) + 1);
	uint64_t *offset = malloc(n * sizeof(*offset) + 1);
	if (!nbytes || !offset) {
		ret = pma__err(-ENOMEM, "out of memory");
		goto out;
	}
	if ((ret = pmck__layout_check(descs, n, nbytes)))
		goto out;
	uint64_t data_size = pmck__layout_place(descs, nbytes, n, offset);
	if (!data_size) {
		ret = pma__err(-ENOMEM, "out of memory");
		goto out;
	}
	free_leftovers(p, name);

	/*
	 * Order: both data regions, then the zeroed meta (seals 0: no slot
	 * complete), then header and map, then the magic.  Until the magic is
	 * persisted the store does not exist; create cleans up such leftovers.
	 */
	uint64_t csum_off = TMAP_OFF + n * sizeof(struct tmap_entry);
	uint64_t meta_size = csum_off + 2 * n * sizeof(uint64_t);
	for (unsigned k = 0; k < 2; k++) {
		alloc_name(an, sizeof(an), name, k ? "data1" : "data0");
		if ((ret = pma_alloc(p, an, data_size, 0, 0, &data[k])))
			goto fail;
	}
	if ((ret = pma_alloc(p, meta_name, meta_size, 0, PMA_ALLOC_ZERO, &meta)))
		goto fail;

	struct store_hdr *h = meta;
	struct tmap_entry *tmap = (struct tmap_entry *)((char *)meta + TMAP_OFF);
	for (size_t i = 0; i < n; i++) {
		struct tmap_entry *e = &tmap[i];
		snprintf(e->name, sizeof(e->name), "%s", descs[i].name);
		e->dtype = (uint32_t)descs[i].dtype;
		e->ndim = descs[i].ndim;
		memcpy(e->shape, descs[i].shape, descs[i].ndim * sizeof(uint64_t));
		e->offset = offset[i];
		e->nbytes = nbytes[i];
		e->layer = descs[i].layer;
	}
	h->version = STORE_VERSION;
	h->ntensors = (uint32_t)n;
	h->data_size = data_size;
	h->layout_hash = pmck__layout_hash(descs, n);
	h->tmap_off = TMAP_OFF;
	h->csum_off = csum_off;
	h->meta_size = meta_size;
	for (size_t i = 0; i < n; i++)
		h->tensor_bytes += nbytes[i];
	memcpy(h->magic, STORE_MAGIC, sizeof(h->magic));
	h->checksum = static_checksum(h, tmap, n);
	memset(h->magic, 0, sizeof(h->magic));
	/* Persist point 1: header fields and tensor map, magic still zero. */
	pma_region_persist(pma_pool_region(p), meta, csum_off);
	/* Persist point 2: the magic; from here the store exists. */
	memcpy(h->magic, STORE_MAGIC, sizeof(h->magic));
	pma_region_persist(pma_pool_region(p), h->magic, sizeof(h->magic));

	ret = store_attach(p, name, meta, data[0], data[1], out);
	if (!ret)
		(*out)->verified = 1; /* both slots empty: nothing to verify */
	goto out;
fail:
	pma__err_prefix(ret, "creating store '%s'", name);
	free_leftovers(p, name);
out:
	free(nbytes);
	free(offset);
	return ret;
}

int
pmck_store_open_or_create(struct pma_pool *p, const char *name,
		const struct pmck_tensor_desc *descs, size_t n, struct pmck_store **out)
{
	int ret = pmck_store_open(p, name, out);

	if (ret == -ENOENT)
		return pmck_store_create(p, name, descs, n, out);
	if (ret)
		return ret;
	uint64_t *nbytes = malloc(n * sizeof(*nbytes) + 1);
	if (!nbytes)
		ret = pma__err(-ENOMEM, "out of memory");
	else if (!(ret = pmck__layout_check(descs, n, nbytes)) &&
		 ((*out)->hdr->ntensors != n ||
		  (*out)->hdr->layout_hash != pmck__layout_hash(descs, n))) {
		char why[512];
		pmck__layout_diff(*out, descs, n, why, sizeof(why));
		ret = pma__err(PMCK_E_LAYOUT, "store '%s' exists with another layout: %s", name, why);
	}
	free(nbytes);
	if (ret)
		pmck_store_close(out);
	return ret;
}

void
pmck_store_close(struct pmck_store **sp)
{
	struct pmck_store *s = sp ? *sp : NULL;

	if (!s)
		return;
	if (s->in_flight)
		pmck_ckpt_abort(&s->ckpt);
	pthread_mutex_destroy(&s->pin_lock);
	pthread_cond_destroy(&s->pin_cond);
	free(s->chunk_first);
	free(s->chunk_hash);
	free((void *)s->written);
	free(s->rej);
	free(s);
	*sp = NULL;
}

int
pmck_store_destroy(struct pma_pool *p, const char *name)
{
	char an[PMA_NAME_MAX];
	int ret;

	if ((ret = alloc_name(an, sizeof(an), name, "meta")))
		return ret;
	if (pma_lookup(p, an, NULL, NULL))
		return pma__err(-ENOENT, "no store named '%s' in the pool", name);
	if (pma_region_rdonly(pma_pool_region(p)))
		return pma__err(-EROFS, "cannot destroy store '%s': %s is open read-only", name,
				pma_region_path(pma_pool_region(p)));
	free_leftovers(p, name); /* meta first: a crash after it leaves only free-able data */
	return 0;
}

size_t pmck_store_ntensors(const struct pmck_store *s) { return s->hdr->ntensors; }
uint64_t pmck_store_data_size(const struct pmck_store *s) { return s->hdr->data_size; }
uint64_t pmck_store_tensor_bytes(const struct pmck_store *s) { return s->hdr->tensor_bytes; }
uint64_t pmck_store_layout_hash(const struct pmck_store *s) { return s->hdr->layout_hash; }
struct pma_region *pmck_store_region(const struct pmck_store *s) { return s->region; }

int
pmck_store_tensor(const struct pmck_store *s, size_t idx, struct pmck_tensor_info *info)
{
	if (idx >= s->hdr->ntensors)
		return pma__err(-ERANGE, "tensor index %zu out of range (%u tensors)", idx,
				s->hdr->ntensors);
	const struct tmap_entry *e = &s->tmap[idx];
	*info = (struct pmck_tensor_info){
		.name = e->name, .dtype = (enum pmck_dtype)e->dtype, .ndim = e->ndim,
		.layer = e->layer, .offset = e->offset, .nbytes = e->nbytes,
	};
	memcpy(info->shape, e->shape, sizeof(info->shape));
	return 0;
}

int64_t
pmck_store_find(const struct pmck_store *s, const char *name)
{
	for (uint32_t i = 0; i < s->hdr->ntensors; i++)
		if (!strcmp(s->tmap[i].name, name))
			return i;
	return pma__err(-ENOENT, "no tensor named '%s' in store '%s'", name, s->name);
}
