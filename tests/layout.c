/* layout.c -- tensor placement, layout checks, open_or_create, find, and the checksum. */
#include <errno.h>
#include <stdint.h>
#include <xxhash.h>

#include "pmckpt.h"
#include "../runtime/internal.h" /* on-media store header and slot headers */
#include "tap.h"
#include "ckpt_util.h"

#define MiB ((uint64_t)1 << 20)

/* ------------------------------------------------------------ reference model */

static uint64_t
ref_nbytes(const struct pmck_tensor_desc *d)
{
	uint64_t b = pmck_dtype_size(d->dtype);
	for (uint32_t k = 0; k < d->ndim; k++)
		b *= d->shape[k];
	return b;
}

/* The checksum as documented: XXH3-64 over the little-endian XXH3-64 of each 1 MiB chunk. */
static uint64_t
ref_checksum(const void *data, uint64_t len)
{
	uint64_t nchunks = (len + PMCK_HASH_CHUNK - 1) / PMCK_HASH_CHUNK;
	uint8_t *le = malloc(nchunks * 8 + 1);
	for (uint64_t c = 0; c < nchunks; c++) {
		uint64_t off = c * PMCK_HASH_CHUNK;
		uint64_t n = len - off < PMCK_HASH_CHUNK ? len - off : PMCK_HASH_CHUNK;
		uint64_t h = XXH3_64bits((const char *)data + off, n);
		for (int b = 0; b < 8; b++)
			le[c * 8 + b] = (uint8_t)(h >> (8 * b));
	}
	uint64_t h = XXH3_64bits(le, nchunks * 8);
	free(le);
	return h;
}

/*
 * Checks the placement of store s against descs by the documented rule:
 * layer order, declaration order within a layer; >= 128 bytes on a 128-byte
 * boundary, smaller ones packed at element alignment; data_size the end
 * rounded up to 128.  Returns the number of problems (each diagnosed).
 */
static int
check_placement(const struct pmck_store *s, const struct pmck_tensor_desc *d, size_t n,
		const char *what)
{
	int bad = 0;
	size_t *order = malloc(n * sizeof(*order));
	size_t k = 0;
	uint32_t maxlayer = 0;

	for (size_t i = 0; i < n; i++)
		if (d[i].layer > maxlayer)
			maxlayer = d[i].layer;
	/* Stable order by layer: walk layers, then declarations. */
	for (uint64_t layer = 0; layer <= maxlayer; layer++)
		for (size_t i = 0; i < n; i++)
			if (d[i].layer == layer)
				order[k++] = i;

	if (pmck_store_ntensors(s) != n) {
		diag("%s: %zu tensors, expected %zu", what, pmck_store_ntensors(s), n);
		bad++;
	}
	uint64_t cursor = 0, total = 0;
	for (k = 0; k < n; k++) {
		size_t i = order[k];
		struct pmck_tensor_info ti;
		if (pmck_store_tensor(s, i, &ti)) {
			diag("%s: tensor %zu: %s", what, i, pma_errormsg());
			bad++;
			continue;
		}
		uint64_t nb = ref_nbytes(&d[i]);
		uint64_t align = nb >= PMCK_ALIGN ? PMCK_ALIGN : pmck_dtype_size(d[i].dtype);
		uint64_t want = (cursor + align - 1) / align * align;
		if (ti.nbytes != nb || ti.offset != want) {
			diag("%s: tensor %zu '%s' (layer %u, %llu bytes) at %llu size %llu; expected %llu",
					what, i, d[i].name, d[i].layer, (unsigned long long)nb,
					(unsigned long long)ti.offset, (unsigned long long)ti.nbytes,
					(unsigned long long)want);
			bad++;
		}
		if (nb >= PMCK_ALIGN && ti.offset % PMCK_ALIGN) {
			diag("%s: tensor '%s' of %llu bytes not 128-aligned", what, d[i].name,
					(unsigned long long)nb);
			bad++;
		}
		if (ti.offset % pmck_dtype_size(d[i].dtype)) {
			diag("%s: tensor '%s' not aligned to its element size", what, d[i].name);
			bad++;
		}
		/* Fields read back as declared. */
		if (strcmp(ti.name, d[i].name) || ti.dtype != d[i].dtype || ti.ndim != d[i].ndim ||
		    ti.layer != d[i].layer ||
		    memcmp(ti.shape, d[i].shape, d[i].ndim * sizeof(uint64_t))) {
			diag("%s: tensor %zu's description differs from its declaration", what, i);
			bad++;
		}
		cursor = ti.offset + ti.nbytes;
		total += nb;
	}
	/* No two non-empty tensors overlap (independent of the order computed above). */
	for (size_t i = 0; i < n; i++)
		for (size_t j = i + 1; j < n; j++) {
			struct pmck_tensor_info a, b;
			if (pmck_store_tensor(s, i, &a) || pmck_store_tensor(s, j, &b))
				continue;
			if (a.nbytes && b.nbytes && a.offset < b.offset + b.nbytes &&
			    b.offset < a.offset + a.nbytes) {
				diag("%s: '%s' and '%s' overlap", what, a.name, b.name);
				bad++;
			}
		}
	uint64_t ds = pmck_store_data_size(s);
	uint64_t want_ds = (cursor + PMCK_ALIGN - 1) / PMCK_ALIGN * PMCK_ALIGN;
	if (want_ds == 0)
		want_ds = PMCK_ALIGN;
	if (ds % PMCK_ALIGN || ds < cursor || ds != want_ds) {
		diag("%s: data_size %llu, tensors end at %llu (expected %llu)", what,
				(unsigned long long)ds, (unsigned long long)cursor,
				(unsigned long long)want_ds);
		bad++;
	}
	if (pmck_store_tensor_bytes(s) != total) {
		diag("%s: tensor_bytes %llu, expected %llu", what,
				(unsigned long long)pmck_store_tensor_bytes(s), (unsigned long long)total);
		bad++;
	}
	free(order);
	return bad;
}

/* ------------------------------------------------------------ the fixed layout */

static const struct pmck_tensor_desc L1[] = {
	{.name = "head.w", .dtype = PMCK_DTYPE_F32, .ndim = 2, .shape = {10, 100}, .layer = 3},
	{.name = "emb", .dtype = PMCK_DTYPE_BF16, .ndim = 1, .shape = {3}, .layer = 0},
	{.name = "l1.w", .dtype = PMCK_DTYPE_F32, .ndim = 2, .shape = {64, 3}, .layer = 1},
	{.name = "l1.b", .dtype = PMCK_DTYPE_F16, .ndim = 1, .shape = {7}, .layer = 1},
	{.name = "emb.scale", .dtype = PMCK_DTYPE_F64, .ndim = 0, .layer = 0},
	{.name = "l1.mask", .dtype = PMCK_DTYPE_BOOL, .ndim = 1, .shape = {5}, .layer = 1},
	{.name = "l1.g", .dtype = PMCK_DTYPE_I32, .ndim = 1, .shape = {3}, .layer = 1},
	{.name = "head.b", .dtype = PMCK_DTYPE_U8, .ndim = 1, .shape = {200}, .layer = 3},
	{.name = "l2.x", .dtype = PMCK_DTYPE_I64, .ndim = 1, .shape = {2}, .layer = 2},
	{.name = "big", .dtype = PMCK_DTYPE_F32, .ndim = 1, .shape = {300000}, .layer = 2},
	{.name = "empty", .dtype = PMCK_DTYPE_F32, .ndim = 1, .shape = {0}, .layer = 2},
	{.name = "l0.t", .dtype = PMCK_DTYPE_I16, .ndim = 1, .shape = {3}, .layer = 0},
};
#define NL1 (sizeof(L1) / sizeof(L1[0]))

/* Worked out by hand from the rule (see the comment beside each). */
static const uint64_t L1_offset[NL1] = {
	1201024, /* head.w: layer 3, 4000 B, after "empty" at 1201024 (already 128-aligned) */
	0,       /* emb: layer 0 first, 6 B */
	128,     /* l1.w: layer 1 first, 768 B, cursor 22 -> 128 */
	896,     /* l1.b: 14 B F16, right after l1.w */
	8,       /* emb.scale: 8 B F64, cursor 6 -> 8 */
	910,     /* l1.mask: 5 B BOOL, right after l1.b */
	916,     /* l1.g: 12 B I32, cursor 915 -> 916 */
	1205120, /* head.b: 200 B, cursor 1205024 -> 1205120 */
	928,     /* l2.x: 16 B I64, layer 2 first, cursor 928 */
	1024,    /* big: 1200000 B, cursor 944 -> 1024 */
	1201024, /* empty: 0 B F32, cursor 1201024 */
	16,      /* l0.t: 6 B I16, after emb.scale */
};
#define L1_DATA_SIZE 1205376 /* 1205320 rounded up to 128 */

static void
fill(uint8_t *p, uint64_t n, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
	for (uint64_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = (uint8_t)x;
	}
}

static void
test_fixed_layout(struct pma_pool *pool)
{
	struct pmck_store *s = NULL;

	is_int(pmck_store_create(pool, "fixed", L1, NL1, &s), 0, "create store with 12 tensors");
	if (!s)
		return;
	is_int(check_placement(s, L1, NL1, "fixed"), 0, "placement follows the rule");
	int exact = 1;
	for (size_t i = 0; i < NL1; i++) {
		struct pmck_tensor_info ti;
		pmck_store_tensor(s, i, &ti);
		if (ti.offset != L1_offset[i]) {
			exact = 0;
			diag("'%s' at %llu, worked out by hand: %llu", L1[i].name,
					(unsigned long long)ti.offset, (unsigned long long)L1_offset[i]);
		}
	}
	ok(exact, "offsets equal the ones worked out by hand");
	is_int(pmck_store_data_size(s), L1_DATA_SIZE, "data_size worked out by hand");
	is_int(pmck_store_tensor_bytes(s), 1205035, "tensor_bytes is the sum of the tensors");

	struct pmck_tensor_info ti;
	mark_errormsg();
	is_int(pmck_store_tensor(s, NL1, &ti), -ERANGE, "tensor index out of range is -ERANGE");
	ok(errormsg_fresh(), "with a message: %s", pma_errormsg());

	/* find */
	int found = 1;
	for (size_t i = 0; i < NL1; i++)
		if (pmck_store_find(s, L1[i].name) != (int64_t)i) {
			found = 0;
			diag("find '%s' gave %lld, expected %zu", L1[i].name,
					(long long)pmck_store_find(s, L1[i].name), i);
		}
	ok(found, "pmck_store_find gives every tensor's declaration index");
	mark_errormsg();
	is_int(pmck_store_find(s, "nope"), -ENOENT, "find of an unknown name is -ENOENT");
	ok(errormsg_fresh(), "with a message: %s", pma_errormsg());
	is_int(pmck_store_find(s, "l1"), -ENOENT, "find of a prefix is -ENOENT");
	is_int(pmck_store_find(s, "l1.w.x"), -ENOENT, "find of an extension is -ENOENT");
	is_int(pmck_store_find(s, ""), -ENOENT, "find of the empty name is -ENOENT");

	/* Same layout under another name: same hash; an equal-size variant: another hash. */
	struct pmck_store *s2 = NULL;
	is_int(pmck_store_create(pool, "fixed2", L1, NL1, &s2), 0, "second store, same layout");
	ok(s2 && pmck_store_layout_hash(s2) == pmck_store_layout_hash(s),
			"equal layouts have equal hashes");
	pmck_store_close(&s2);
	struct pmck_tensor_desc v[NL1];
	memcpy(v, L1, sizeof(v));
	v[6].dtype = PMCK_DTYPE_U32; /* same size, other dtype */
	is_int(pmck_store_create(pool, "fixed3", v, NL1, &s2), 0, "third store, one dtype changed");
	ok(s2 && pmck_store_layout_hash(s2) != pmck_store_layout_hash(s),
			"a different layout has a different hash");
	ok(s2 && check_placement(s2, v, NL1, "fixed3") == 0, "and the same placement rule");
	pmck_store_close(&s2);
	is_int(pmck_store_destroy(pool, "fixed2"), 0, "destroy fixed2");
	is_int(pmck_store_destroy(pool, "fixed3"), 0, "destroy fixed3");
	is_int(pmck_store_destroy(pool, "fixed3"), -ENOENT, "destroy twice is -ENOENT");
	is_int(pma_lookup(pool, "fixed3.data0", NULL, NULL), -ENOENT, "destroy freed the data");
	pmck_store_close(&s);
}

/* ------------------------------------------------------------ open_or_create */

static int
tensors_equal(const struct pmck_store *s, uint8_t **src)
{
	for (size_t i = 0; i < pmck_store_ntensors(s); i++) {
		struct pmck_tensor_info ti;
		pmck_store_tensor(s, i, &ti);
		const void *p = pmck_store_tensor_data(s, i);
		if (!p || memcmp(p, src[i], ti.nbytes))
			return 0;
	}
	return 1;
}

static void
test_open_or_create(const char *path, struct pma_region **rp, struct pma_pool **pp)
{
	struct pmck_store *s = NULL;
	struct pmck_ckpt *c;
	struct pmck_recovery rec;
	uint8_t *src[NL1];

	is_int(pmck_store_open_or_create(*pp, "oc", L1, NL1, &s), 0, "open_or_create creates");
	if (!s)
		return;
	uint64_t hash = pmck_store_layout_hash(s);
	for (size_t i = 0; i < NL1; i++) {
		struct pmck_tensor_info ti;
		pmck_store_tensor(s, i, &ti);
		src[i] = malloc(ti.nbytes + 1);
		fill(src[i], ti.nbytes, 500 + i);
	}
	is_int(pmck_store_begin(s, 5, &c), 0, "begin step 5");
	is_int(pmck_ckpt_write_all(c, (const void *const *)src, 2), 0, "write all");
	is_int(pmck_ckpt_commit(c), 0, "commit step 5");
	pmck_store_close(&s);

	/* Reopen the whole stack, then open_or_create with the same layout opens. */
	pma_pool_close(pp);
	pma_region_close(rp);
	if (pma_region_open(path, 0, 0, rp) || pma_pool_open(*rp, pp)) {
		ok(0, "reopen: %s", pma_errormsg());
		goto out;
	}
	is_int(pmck_store_open_or_create(*pp, "oc", L1, NL1, &s), 0, "open_or_create reopens");
	if (!s)
		goto out;
	ok(pmck_store_layout_hash(s) == hash, "with the same layout hash");
	is_int(pmck_store_recover(s, &rec), 0, "recover after open_or_create");
	is_int(rec.step, 5, "step 5 (it was opened, not re-created)");
	ok(tensors_equal(s, src), "tensors bit-exact");
	/* The slot's own addresses, unverified: the recovered slot's are the readable ones. */
	ok(pmck_store_slot_tensor_data(s, rec.slot, 1) == pmck_store_tensor_data(s, 1),
			"slot_tensor_data of the recovered slot is tensor_data");
	ok(pmck_store_slot_tensor_data(s, 1 - rec.slot, 1) != pmck_store_tensor_data(s, 1) &&
			pmck_store_slot_tensor_data(s, 1 - rec.slot, 1) != NULL,
			"the other slot's is another address");
	ok(!pmck_store_slot_tensor_data(s, 2, 0) && !pmck_store_slot_tensor_data(s, 0, NL1),
			"slot_tensor_data: NULL for a bad slot or index");
	pmck_store_close(&s);

	/* Every kind of different layout gives PMCK_E_LAYOUT and leaves everything as it was. */
	size_t size = pma_region_size(*rp);
	uint8_t *before = malloc(size);
	memcpy(before, pma_region_addr(*rp), size);

	struct pmck_tensor_desc v[NL1 + 1];
	const char *what[] = {"a shape", "a layer", "a dtype of equal size", "a name", "ndim (same size)",
		"one tensor fewer", "one tensor more", "two declarations swapped",
		"the shape of a packed tensor"};
	for (int k = 0; k < 9; k++) {
		size_t n = NL1;
		memcpy(v, L1, sizeof(L1));
		switch (k) {
		case 0: v[2].shape[1] = 4; break;
		case 1: v[3].layer = 2; break;
		case 2: v[9].dtype = PMCK_DTYPE_I32; break;
		case 3: v[5].name = "l1.mask2"; break;
		case 4: v[0].ndim = 1; v[0].shape[0] = 1000; v[0].shape[1] = 0; break;
		case 5: n = NL1 - 1; break;
		case 6: v[NL1] = (struct pmck_tensor_desc){.name = "extra", .dtype = PMCK_DTYPE_U8,
				.ndim = 1, .shape = {1}, .layer = 9};
			n = NL1 + 1; break;
		case 7: v[3] = L1[5]; v[5] = L1[3]; break;
		case 8: v[1].shape[0] = 4; break;
		}
		s = (struct pmck_store *)&v; /* must be reset to NULL on failure */
		mark_errormsg();
		int ret = pmck_store_open_or_create(*pp, "oc", v, n, &s);
		is_int(ret, PMCK_E_LAYOUT, "open_or_create with %s changed is PMCK_E_LAYOUT", what[k]);
		ok(s == NULL && errormsg_fresh(), "no store, message: %s", pma_errormsg());
		if (ret == 0)
			pmck_store_close(&s);
	}
	ok(memcmp(before, pma_region_addr(*rp), size) == 0, "the region is byte for byte unchanged");

	/* Shape entries beyond ndim are not part of the layout. */
	memcpy(v, L1, sizeof(L1));
	v[1].shape[3] = 99;
	v[4].shape[0] = 7; /* a scalar */
	is_int(pmck_store_open_or_create(*pp, "oc", v, NL1, &s), 0,
			"open_or_create ignores shape entries beyond ndim");
	pmck_store_close(&s);
	free(before);

	is_int(pmck_store_open(*pp, "oc", &s), 0, "the store still opens");
	if (s) {
		is_int(pmck_store_recover(s, &rec), 0, "and recovers");
		is_int(rec.step, 5, "step 5");
		ok(tensors_equal(s, src), "tensors bit-exact");
		pmck_store_close(&s);
	}
out:
	for (size_t i = 0; i < NL1; i++)
		free(src[i]);
}

/* ------------------------------------------------------------ invalid layouts */

static void
test_invalid(struct pma_pool *pool)
{
	struct pmck_tensor_desc v[NL1];
	struct pmck_store *s;
	char longname[PMCK_NAME_MAX + 1];
	size_t free0 = pma_pool_free_bytes(pool);

	memset(longname, 'x', PMCK_NAME_MAX);
	longname[PMCK_NAME_MAX] = '\0';
	const char *what[] = {"dtype PMCK_DTYPE_COUNT", "dtype -1", "ndim 9", "duplicate names",
		"empty name", "NULL name", "name of 128 bytes", "size overflowing 64 bits",
		"size above 2^56", "no tensors", "NULL descs"};
	for (int k = 0; k < 11; k++) {
		size_t n = NL1;
		const struct pmck_tensor_desc *d = v;
		memcpy(v, L1, sizeof(L1));
		switch (k) {
		case 0: v[4].dtype = PMCK_DTYPE_COUNT; break;
		case 1: v[4].dtype = (enum pmck_dtype)-1; break;
		case 2: v[7].ndim = PMCK_MAX_DIMS + 1; break;
		case 3: v[10].name = "l1.b"; break;
		case 4: v[6].name = ""; break;
		case 5: v[6].name = NULL; break;
		case 6: v[6].name = longname; break;
		case 7: v[8].ndim = 3; v[8].shape[0] = 1u << 30; v[8].shape[1] = 1u << 30;
			v[8].shape[2] = 1u << 30; break;
		case 8: v[8].ndim = 1; v[8].shape[0] = UINT64_C(1) << 55; break; /* 2^58 bytes */
		case 9: n = 0; break;
		case 10: d = NULL; break;
		}
		s = (struct pmck_store *)&v;
		mark_errormsg();
		int ret = pmck_store_create(pool, "bad", d, n, &s);
		is_int(ret, -EINVAL, "%s is -EINVAL", what[k]);
		ok(s == NULL && errormsg_fresh(), "no store, message: %s", pma_errormsg());
		if (ret == 0)
			pmck_store_destroy(pool, "bad");
		s = (struct pmck_store *)&v;
		ret = pmck_store_open_or_create(pool, "bad", d, n, &s);
		ok(ret == -EINVAL && s == NULL, "open_or_create: %s is -EINVAL too (%d)", what[k], ret);
		if (ret == 0)
			pmck_store_destroy(pool, "bad");
	}
	is_int(pma_lookup(pool, "bad.meta", NULL, NULL), -ENOENT, "no allocation left behind (meta)");
	is_int(pma_lookup(pool, "bad.data0", NULL, NULL), -ENOENT, "no allocation left behind (data0)");
	is_int(pma_pool_free_bytes(pool), free0, "pool free bytes unchanged");

	/* Limits that are allowed. */
	memcpy(v, L1, sizeof(L1));
	longname[PMCK_NAME_MAX - 1] = '\0';
	v[6].name = longname;
	v[7].ndim = PMCK_MAX_DIMS;
	for (int k = 0; k < PMCK_MAX_DIMS; k++)
		v[7].shape[k] = k < 3 ? 5 : 1;
	is_int(pmck_store_create(pool, "limits", v, NL1, &s), 0,
			"name of 127 bytes and 8 dimensions are accepted");
	if (s) {
		is_int(pmck_store_find(s, longname), 6, "the long name is found");
		struct pmck_tensor_info ti;
		pmck_store_tensor(s, 7, &ti);
		ok(ti.ndim == 8 && ti.nbytes == 125, "8 dimensions, 125 bytes");
		pmck_store_close(&s);
		pmck_store_destroy(pool, "limits");
	}

	/* Store names. */
	char sname[STORE_NAME_MAX + 1];
	memset(sname, 's', STORE_NAME_MAX);
	sname[STORE_NAME_MAX] = '\0';
	mark_errormsg();
	is_int(pmck_store_create(pool, "", L1, NL1, &s), -EINVAL, "empty store name is -EINVAL");
	ok(errormsg_fresh(), "with a message: %s", pma_errormsg());
	is_int(pmck_store_create(pool, sname, L1, NL1, &s), -EINVAL, "store name of 64 bytes is -EINVAL");
	is_int(pmck_store_open(pool, "nosuch", &s), -ENOENT, "opening a missing store is -ENOENT");

	/* Creating a store that exists. */
	is_int(pmck_store_create(pool, "dup", L1, 3, &s), 0, "create dup");
	pmck_store_close(&s);
	mark_errormsg();
	is_int(pmck_store_create(pool, "dup", L1, 3, &s), -EEXIST, "create it again is -EEXIST");
	ok(s == NULL && errormsg_fresh(), "with a message: %s", pma_errormsg());
	is_int(pmck_store_create(pool, "dup", L1, 4, &s), -EEXIST, "even with another layout");
	pmck_store_destroy(pool, "dup");
}

/* ------------------------------------------------------------ random layouts */

static uint64_t rng = 0x1234567887654321ull;

static void
test_random_layouts(struct pma_pool *pool)
{
	int failures = 0, made = 0;

	for (int t = 0; t < 60; t++) {
		struct pmck_tensor_desc d[40];
		char names[40][16];
		size_t n = 1 + xorshift64(&rng) % 40;
		for (size_t i = 0; i < n; i++) {
			snprintf(names[i], sizeof(names[i]), "t%zu", i);
			d[i] = (struct pmck_tensor_desc){.name = names[i]};
			d[i].dtype = (enum pmck_dtype)(xorshift64(&rng) % PMCK_DTYPE_COUNT);
			d[i].layer = (uint32_t)(xorshift64(&rng) % 6);
			d[i].ndim = (uint32_t)(xorshift64(&rng) % 4);
			for (uint32_t k = 0; k < d[i].ndim; k++) {
				uint64_t r = xorshift64(&rng) % 16;
				d[i].shape[k] = r == 0 ? 0 : r < 10 ? xorshift64(&rng) % 12 + 1 : xorshift64(&rng) % 200 + 1;
			}
			if (xorshift64(&rng) % 20 == 0) { /* sometimes a multi-chunk tensor */
				d[i].ndim = 1;
				d[i].shape[0] = (PMCK_HASH_CHUNK + xorshift64(&rng) % (2 * PMCK_HASH_CHUNK)) /
						pmck_dtype_size(d[i].dtype);
			}
		}
		struct pmck_store *s = NULL;
		char what[32];
		snprintf(what, sizeof(what), "random layout %d", t);
		int ret = pmck_store_create(pool, "rnd", d, n, &s);
		if (ret) {
			diag("%s: create: %s", what, pma_errormsg());
			failures++;
			continue;
		}
		made++;
		failures += check_placement(s, d, n, what) != 0;
		pmck_store_close(&s);
		pmck_store_destroy(pool, "rnd");
	}
	is_int(made, 60, "60 random layouts created");
	is_int(failures, 0, "all 60 placed by the rule, without overlap");
}

/* ------------------------------------------------------------ checksum */

static void
test_checksum(struct pma_pool *pool)
{
	static const uint64_t lens[] = {0, 1, 127, 128, 4096, MiB - 1, MiB, MiB + 1, 2 * MiB,
		3 * MiB + 12345};
	uint64_t maxlen = 3 * MiB + 12345;
	uint8_t *buf = malloc(maxlen);
	int same = 1;

	fill(buf, maxlen, 77);
	for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
		uint64_t a = pmck_tensor_checksum(buf, lens[k]), b = ref_checksum(buf, lens[k]);
		if (a != b) {
			same = 0;
			diag("len %llu: pmck_tensor_checksum %016llx, reference %016llx",
					(unsigned long long)lens[k], (unsigned long long)a, (unsigned long long)b);
		}
	}
	ok(same, "pmck_tensor_checksum equals the reference for 10 lengths (0 .. 3 MiB + 12345)");
	/* The reference discriminates: chunked is not the plain hash, and one bit matters. */
	ok(ref_checksum(buf, 2 * MiB) != XXH3_64bits(buf, 2 * MiB),
			"(a chunked checksum differs from plain XXH3 of the bytes)");
	uint64_t before = pmck_tensor_checksum(buf, 3 * MiB + 12345);
	buf[2 * MiB + 77] ^= 0x10;
	ok(pmck_tensor_checksum(buf, 3 * MiB + 12345) != before, "one flipped bit changes it");
	buf[2 * MiB + 77] ^= 0x10;

	/*
	 * The checksums recorded by commit, read from the store's metadata, equal
	 * the reference: for pmck_ckpt_write, write_range in odd pieces,
	 * write_all with 2 threads, and tensor_ptr + mark_written.
	 */
	struct pmck_tensor_desc d[] = {
		{.name = "w", .dtype = PMCK_DTYPE_F32, .ndim = 2, .shape = {1000, 801}, .layer = 0},
		{.name = "b", .dtype = PMCK_DTYPE_BF16, .ndim = 1, .shape = {33}, .layer = 0},
		{.name = "e", .dtype = PMCK_DTYPE_U8, .ndim = 1, .shape = {0}, .layer = 1},
		{.name = "m", .dtype = PMCK_DTYPE_U8, .ndim = 1, .shape = {MiB}, .layer = 1},
	};
	const size_t n = 4;
	struct pmck_store *s;
	if (pmck_store_create(pool, "ck", d, n, &s)) {
		ok(0, "create ck: %s", pma_errormsg());
		free(buf);
		return;
	}
	void *meta;
	pma_lookup(pool, "ck.meta", &meta, NULL);
	const struct store_hdr *h = meta;
	uint8_t *src[4];
	uint64_t nb[4];
	for (size_t i = 0; i < n; i++) {
		struct pmck_tensor_info ti;
		pmck_store_tensor(s, i, &ti);
		nb[i] = ti.nbytes;
		src[i] = malloc(nb[i] + 1);
	}
	const char *how[] = {"pmck_ckpt_write", "write_range in pieces", "write_all (2 threads)",
		"tensor_ptr + mark_written"};
	for (int mode = 0; mode < 4; mode++) {
		struct pmck_ckpt *c;
		struct pmck_recovery rec;
		uint64_t step = 10 + (uint64_t)mode;
		int wrote = 0;
		for (size_t i = 0; i < n; i++)
			fill(src[i], nb[i], step * 10 + i);
		if (pmck_store_begin(s, step, &c)) {
			ok(0, "begin: %s", pma_errormsg());
			continue;
		}
		unsigned slot = pmck_ckpt_slot(c);
		for (size_t i = 0; i < n; i++) {
			switch (mode) {
			case 0: wrote |= pmck_ckpt_write(c, i, src[i]); break;
			case 1: /* last piece first, then the middle, then the front */
				for (uint64_t off = (nb[i] ? (nb[i] - 1) / PMCK_HASH_CHUNK : 0) *
						PMCK_HASH_CHUNK;; off -= PMCK_HASH_CHUNK) {
					uint64_t len = nb[i] - off < PMCK_HASH_CHUNK ? nb[i] - off
						: PMCK_HASH_CHUNK;
					wrote |= pmck_ckpt_write_range(c, i, off, src[i] + off, len);
					if (off == 0)
						break;
				}
				break;
			case 3: {
				void *p = pmck_ckpt_tensor_ptr(c, i);
				if (!p) {
					wrote = -1;
					break;
				}
				memcpy(p, src[i], nb[i]);
				wrote |= pmck_ckpt_mark_written(c, i);
				break;
			}
			}
		}
		if (mode == 2)
			wrote = pmck_ckpt_write_all(c, (const void *const *)src, 2);
		is_int(wrote, 0, "step %llu: %s", (unsigned long long)step, how[mode]);
		is_int(pmck_ckpt_commit(c), 0, "commit step %llu", (unsigned long long)step);
		const uint64_t *csum = (const uint64_t *)((const char *)meta + h->csum_off) +
				(size_t)slot * h->ntensors;
		const struct slot_hdr *sh = (const struct slot_hdr *)((const char *)meta +
				SLOT_HDR_OFF + 64 * slot);
		int match = 1;
		for (size_t i = 0; i < n; i++)
			if (csum[i] != ref_checksum(src[i], nb[i])) {
				match = 0;
				diag("tensor '%s': recorded %016llx, reference %016llx", d[i].name,
						(unsigned long long)csum[i],
						(unsigned long long)ref_checksum(src[i], nb[i]));
			}
		ok(match, "recorded checksums equal the reference (%s)", how[mode]);
		ok(sh->seal == step + 1 && sh->step == step, "slot %u sealed with step %llu",
				slot, (unsigned long long)step);
		is_int(pmck_store_recover(s, &rec), 0, "recover");
		ok(rec.step == step && rec.slot == slot && !rec.rejected, "step %llu from slot %u",
				(unsigned long long)rec.step, rec.slot);
		ok(tensors_equal(s, src), "tensors bit-exact");
	}
	pmck_store_close(&s);
	for (size_t i = 0; i < n; i++)
		free(src[i]);
	free(buf);
}

int
main(void)
{
	char path[512];
	struct pma_region *r;
	struct pma_pool *pool;

	snprintf(path, sizeof(path), "%s", scratch_path("layout"));
	unlink(path);
	if (pma_region_open(path, 48 * MiB, PMA_REGION_CREATE, &r) || pma_pool_create(r, 0, &pool)) {
		diag("%s", pma_errormsg());
		unlink(path);
		return 1;
	}
	test_fixed_layout(pool);
	test_invalid(pool);
	test_random_layouts(pool);
	test_checksum(pool);
	test_open_or_create(path, &r, &pool);
	pma_pool_close(&pool);
	pma_region_close(&r);
	unlink(path);
	return done_testing();
}
