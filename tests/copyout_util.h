/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * copyout_util.h -- shared by the copy-out, safetensors and two-tier
 * recovery tests: deterministic tensor contents, scratch directories and a
 * view of a copy-out directory that uses only its documented layout
 * (DIR/step-<digits>/rank-<5 digits>.safetensors, DIR/step-<...>/COMPLETE).
 *
 * Contents: word k (32-bit, little-endian) of tensor t at step s is
 *   (k * 2654435761 + (t + 1) * 16777619 + s * 2654435769) mod 2^32,
 * the tensor's bytes being the first nbytes bytes of those words.
 * tests/copyout_roundtrip.sh recomputes the same formula in Python.
 */
#ifndef PMCK_COPYOUT_UTIL_H
#define PMCK_COPYOUT_UTIL_H 1

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pmckpt.h"

/* snprintf without truncation warnings: test paths are short, and a long one just fails. */
static inline void __attribute__((format(printf, 3, 4)))
fmtp(char *buf, size_t len, const char *f, ...)
{
	va_list ap;

	va_start(ap, f);
	vsnprintf(buf, len, f, ap);
	va_end(ap);
}

static inline void
gen_tensor(uint64_t step, size_t t, uint8_t *buf, uint64_t n)
{
	uint32_t base = (uint32_t)((t + 1) * 16777619u + step * 2654435769u);
	uint64_t k = 0;

	for (; (k + 1) * 4 <= n; k++) {
		uint32_t w = (uint32_t)(k * 2654435761u) + base;
		memcpy(buf + k * 4, &w, 4);
	}
	if (k * 4 < n) {
		uint32_t w = (uint32_t)(k * 2654435761u) + base;
		memcpy(buf + k * 4, &w, n - k * 4);
	}
}

/* Bytes of a tensor described by d. */
static inline uint64_t
desc_bytes(const struct pmck_tensor_desc *d)
{
	uint64_t n = pmck_dtype_size(d->dtype);
	for (uint32_t i = 0; i < d->ndim; i++)
		n *= d->shape[i];
	return n;
}

/* Sources for every tensor of a layout at `step` (free with free_srcs). */
static inline uint8_t **
make_srcs(const struct pmck_tensor_desc *d, size_t n, uint64_t step)
{
	uint8_t **src = calloc(n, sizeof(*src));
	for (size_t i = 0; src && i < n; i++) {
		uint64_t b = desc_bytes(&d[i]);
		src[i] = malloc(b ? b : 1);
		if (!src[i])
			abort();
		gen_tensor(step, i, src[i], b);
	}
	return src;
}

static inline void
fill_srcs(uint8_t **src, const struct pmck_tensor_desc *d, size_t n, uint64_t step)
{
	for (size_t i = 0; i < n; i++)
		gen_tensor(step, i, src[i], desc_bytes(&d[i]));
}

static inline void
free_srcs(uint8_t **src, size_t n)
{
	for (size_t i = 0; src && i < n; i++)
		free(src[i]);
	free(src);
}

/* One checkpoint of `step` written and committed synchronously. */
static inline int
commit_step(struct pmck_store *s, uint8_t **src, size_t n, uint64_t step)
{
	struct pmck_ckpt *c;
	int ret = pmck_store_begin(s, step, &c);
	for (size_t i = 0; i < n && !ret; i++)
		ret = pmck_ckpt_write(c, i, src[i]);
	if (!ret)
		ret = pmck_ckpt_commit(c);
	else
		pmck_ckpt_abort(c);
	return ret;
}

/* Does the store's recovered checkpoint hold exactly the contents of `step`? */
static inline int
store_holds(const struct pmck_store *s, const struct pmck_tensor_desc *d, size_t n,
		uint64_t step)
{
	int same = 1;
	for (size_t i = 0; i < n && same; i++) {
		uint64_t b = desc_bytes(&d[i]);
		uint8_t *want = malloc(b ? b : 1);
		const void *got = pmck_store_tensor_data(s, i);
		gen_tensor(step, i, want, b);
		same = got && !memcmp(got, want, b);
		free(want);
	}
	return same;
}

/* ------------------------------------------------------- scratch dirs */

/* A fresh directory "<base>/pmck-h5-<tag>-XXXXXX" (base: /dev/shm or /var/tmp). */
static inline char *
make_tmpdir(const char *base, const char *tag)
{
	char *p = malloc(PATH_MAX);
	fmtp(p, PATH_MAX, "%s/pmck-h5-%s-XXXXXX", base, tag);
	if (!mkdtemp(p)) {
		fprintf(stderr, "mkdtemp %s: %s\n", p, strerror(errno));
		exit(1);
	}
	return p;
}

static inline int
rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	remove(path);
	return 0;
}

static inline void
rm_rf(const char *path)
{
	nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static uint64_t tree_bytes_sum;
static unsigned tree_tmp_count;

static inline int
sum_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)ftw;
	if (flag == FTW_F) {
		tree_bytes_sum += (uint64_t)st->st_size;
		size_t l = strlen(path);
		if (l > 4 && !strcmp(path + l - 4, ".tmp"))
			tree_tmp_count++;
	}
	return 0;
}

/* Sum of st_size of every regular file under path. */
static inline uint64_t
tree_bytes(const char *path)
{
	tree_bytes_sum = 0;
	tree_tmp_count = 0;
	nftw(path, sum_one, 16, FTW_PHYS);
	return tree_bytes_sum;
}

/* Files named *.tmp under path. */
static inline unsigned
tree_tmp_files(const char *path)
{
	tree_bytes(path);
	return tree_tmp_count;
}

/* ------------------------------------------------ copy-out directories */

struct steps {
	uint64_t step[256];
	int complete[256];
	size_t n;
};

static inline int
cmp_u64_desc(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x > y ? -1 : x < y;
}

/* The step directories of dir, newest first, each with whether COMPLETE exists. */
static inline int
scan_steps(const char *dir, struct steps *l)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	char path[PATH_MAX];
	struct stat st;

	memset(l, 0, sizeof(*l));
	if (!d)
		return -errno;
	while ((de = readdir(d)) && l->n < 256) {
		char *end;
		if (strncmp(de->d_name, "step-", 5) || !de->d_name[5])
			continue;
		unsigned long long v = strtoull(de->d_name + 5, &end, 10);
		if (*end)
			continue;
		l->step[l->n++] = v;
	}
	closedir(d);
	qsort(l->step, l->n, sizeof(l->step[0]), cmp_u64_desc);
	for (size_t i = 0; i < l->n; i++) {
		fmtp(path, sizeof(path), "%s/step-%012" PRIu64 "/COMPLETE", dir, l->step[i]);
		l->complete[i] = stat(path, &st) == 0;
	}
	return 0;
}

static inline size_t
count_complete(const struct steps *l)
{
	size_t c = 0;
	for (size_t i = 0; i < l->n; i++)
		c += l->complete[i];
	return c;
}

static inline void
rank_file(char *buf, size_t len, const char *dir, uint64_t step, unsigned rank)
{
	fmtp(buf, len, "%s/step-%012" PRIu64 "/rank-%05u.safetensors", dir, step, rank);
}

/*
 * The "xxh3:<name>" checksum the file's __metadata__ gives for tensor
 * `name` (parsed independently of the library, with json-c).  0 on success.
 */
static inline int
file_checksum(const char *path, const char *name, uint64_t *sum)
{
	FILE *f = fopen(path, "rb");
	uint64_t hlen;
	int ret = -1;

	if (!f)
		return -1;
	if (fread(&hlen, 8, 1, f) == 1 && hlen < (64u << 20)) {
		char *h = malloc(hlen + 1);
		if (h && fread(h, 1, hlen, f) == hlen) {
			h[hlen] = 0;
			json_object *root = json_tokener_parse(h), *meta, *v;
			char key[PMCK_NAME_MAX + 8];
			fmtp(key, sizeof(key), "xxh3:%s", name);
			if (root && json_object_object_get_ex(root, "__metadata__", &meta) &&
			    json_object_object_get_ex(meta, key, &v) &&
			    json_object_is_type(v, json_type_string)) {
				*sum = strtoull(json_object_get_string(v), NULL, 16);
				ret = 0;
			}
			json_object_put(root);
		}
		free(h);
	}
	fclose(f);
	return ret;
}

/*
 * Does the file at path hold the contents of `step` of the layout, bit for
 * bit?  It must verify (pmck_safetensors_verify: its data matches its
 * checksums), carry `step`, and every tensor's checksum must equal the one
 * of the expected contents.
 */
static inline int
file_holds(const char *path, const struct pmck_tensor_desc *d, size_t n, uint64_t step,
		char *why, size_t whylen)
{
	struct pmck_file_info fi;

	if (pmck_safetensors_verify(path, &fi)) {
		fmtp(why, whylen, "verify: %s", pmck_errormsg());
		return 0;
	}
	if (fi.step != step || !fi.has_checksums || fi.ntensors != n) {
		fmtp(why, whylen, "file says step %" PRIu64 ", checksums %d, %" PRIu64 " tensors",
				fi.step, fi.has_checksums, fi.ntensors);
		return 0;
	}
	for (size_t i = 0; i < n; i++) {
		uint64_t b = desc_bytes(&d[i]), sum;
		uint8_t *want = malloc(b ? b : 1);
		gen_tensor(step, i, want, b);
		uint64_t expect = pmck_tensor_checksum(want, b);
		free(want);
		if (file_checksum(path, d[i].name, &sum) || sum != expect) {
			fmtp(why, whylen, "tensor '%s': not the contents of step %" PRIu64, d[i].name,
					step);
			return 0;
		}
	}
	return 1;
}

#endif
