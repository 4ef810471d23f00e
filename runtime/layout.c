/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * layout.c -- checking a declared layout, hashing it, and placing its
 * tensors in a slot's data region.
 *
 * Placement: tensors in layer order (declaration order within a layer), so
 * that a checkpoint fed layer by layer streams through the region front to
 * back.  A tensor of PMCK_ALIGN (128) bytes or more starts on a 128-byte
 * boundary; smaller ones are packed right after the previous tensor at
 * their element alignment.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "internal.h"

static int
cmp_name(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int
pmck__layout_check(const struct pmck_tensor_desc *d, size_t n, uint64_t *nbytes)
{
	if (!d || n == 0)
		return pma__err(-EINVAL, "a layout needs at least one tensor");
	if (n > UINT32_MAX)
		return pma__err(-EINVAL, "%zu tensors: too many", n);
	for (size_t i = 0; i < n; i++) {
		const char *name = d[i].name;
		if (!name || !*name || strlen(name) >= PMCK_NAME_MAX)
			return pma__err(-EINVAL, "tensor %zu: name must be 1..%d bytes", i,
					PMCK_NAME_MAX - 1);
		size_t esize = pmck_dtype_size(d[i].dtype);
		if (!esize)
			return pma__err(-EINVAL, "tensor '%s': unknown dtype %d", name, (int)d[i].dtype);
		if (d[i].ndim > PMCK_MAX_DIMS)
			return pma__err(-EINVAL, "tensor '%s': %u dimensions, at most %d", name,
					d[i].ndim, PMCK_MAX_DIMS);
		uint64_t bytes = esize;
		for (uint32_t k = 0; k < d[i].ndim; k++)
			if (__builtin_mul_overflow(bytes, d[i].shape[k], &bytes) ||
			    bytes > (UINT64_C(1) << 56))
				return pma__err(-EINVAL, "tensor '%s': size overflows", name);
		nbytes[i] = bytes;
	}
	/* Names are unique: sort them and compare neighbours. */
	const char **names = malloc(n * sizeof(*names));
	if (!names)
		return pma__err(-ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++)
		names[i] = d[i].name;
	qsort(names, n, sizeof(*names), cmp_name);
	int ret = 0;
	for (size_t i = 1; i < n && !ret; i++)
		if (!strcmp(names[i - 1], names[i]))
			ret = pma__err(-EINVAL, "tensor name '%s' appears twice", names[i]);
	free(names);
	return ret;
}

uint64_t
pmck__layout_hash(const struct pmck_tensor_desc *d, size_t n)
{
	XXH3_state_t st;

	XXH3_64bits_reset(&st);
	for (size_t i = 0; i < n; i++) {
		uint64_t fields[3 + PMCK_MAX_DIMS] = {(uint64_t)d[i].dtype, d[i].ndim, d[i].layer};
		memcpy(&fields[3], d[i].shape, d[i].ndim * sizeof(uint64_t));
		XXH3_64bits_update(&st, d[i].name, strlen(d[i].name) + 1);
		XXH3_64bits_update(&st, fields, (3 + d[i].ndim) * sizeof(uint64_t));
	}
	return XXH3_64bits_digest(&st);
}

struct order {
	uint32_t layer;
	size_t index;
};

static int
cmp_order(const void *a, const void *b)
{
	const struct order *x = a, *y = b;
	if (x->layer != y->layer)
		return x->layer < y->layer ? -1 : 1;
	return x->index < y->index ? -1 : x->index > y->index;
}

uint64_t
pmck__layout_place(const struct pmck_tensor_desc *d, const uint64_t *nbytes, size_t n,
		uint64_t *offset)
{
	struct order *o = malloc(n * sizeof(*o));
	uint64_t cursor = 0;

	if (!o)
		return 0;
	for (size_t i = 0; i < n; i++)
		o[i] = (struct order){d[i].layer, i};
	qsort(o, n, sizeof(*o), cmp_order); /* index breaks ties: a stable sort */
	for (size_t k = 0; k < n; k++) {
		size_t i = o[k].index;
		uint64_t align = nbytes[i] >= PMCK_ALIGN ? PMCK_ALIGN : pmck_dtype_size(d[i].dtype);
		cursor = (cursor + align - 1) / align * align;
		offset[i] = cursor;
		cursor += nbytes[i];
	}
	free(o);
	cursor = (cursor + PMCK_ALIGN - 1) / PMCK_ALIGN * PMCK_ALIGN;
	return cursor ? cursor : PMCK_ALIGN;
}

/* "F32[64, 16] layer 3" for messages. */
static void
desc_text(uint32_t dtype, uint32_t ndim, const uint64_t *shape, uint32_t layer, char *buf,
		size_t len)
{
	size_t k = (size_t)snprintf(buf, len, "%s[", pmck_dtype_name((enum pmck_dtype)dtype));
	for (uint32_t d = 0; d < ndim && k < len; d++)
		k += (size_t)snprintf(buf + k, len - k, "%s%llu", d ? ", " : "",
				(unsigned long long)shape[d]);
	if (k < len)
		snprintf(buf + k, len - k, "] layer %u", layer);
}

void
pmck__layout_diff(const struct pmck_store *s, const struct pmck_tensor_desc *d, size_t n,
		char *buf, size_t len)
{
	uint32_t have = s->hdr->ntensors;
	char a[160], b[160];

	for (size_t i = 0; i < n && i < have; i++) {
		const struct tmap_entry *e = &s->tmap[i];
		if (strcmp(e->name, d[i].name)) {
			snprintf(buf, len, "tensor %zu is '%s' in the store, '%s' asked for", i, e->name,
					d[i].name);
			return;
		}
		if (e->dtype != (uint32_t)d[i].dtype || e->ndim != d[i].ndim || e->layer != d[i].layer ||
		    memcmp(e->shape, d[i].shape, e->ndim * sizeof(uint64_t))) {
			desc_text(e->dtype, e->ndim, e->shape, e->layer, a, sizeof(a));
			desc_text((uint32_t)d[i].dtype, d[i].ndim, d[i].shape, d[i].layer, b, sizeof(b));
			snprintf(buf, len, "tensor '%s' is %s in the store, %s asked for", e->name, a, b);
			return;
		}
	}
	if (have != n)
		snprintf(buf, len, "the store has %u tensors, %zu asked for (first %s: '%s')", have, n,
				have > n ? "extra in the store" : "missing from the store",
				have > n ? s->tmap[n].name : d[have].name);
	else
		snprintf(buf, len, "the layouts hash differently but no field differs");
}
