/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * safetensors.c -- checkpoints as safetensors files: 8-byte little-endian
 * header length, a JSON header (json-c) naming each tensor's dtype, shape
 * and data_offsets, then the tensors' bytes, packed without holes.
 * pmckpt adds to "__metadata__" (string values only, as the format
 * requires): format, step, rank, world_size, layout_hash, one
 * "xxh3:<tensor>" checksum per tensor (pmck_tensor_checksum, hex) and one
 * "layout:<tensor>" = "<declaration index> <layer> <pmck_dtype>" per tensor,
 * from which pmck_safetensors_layout rebuilds the store's layout exactly.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "internal.h"

#define MAX_HEADER (100u << 20) /* the reference implementation's limit */
#define PROGRESS_EVERY (64u << 20)
/*
 * Writing a file: each WRITE_PIECE is written, its writeback started, the
 * piece WRITEBACK_LAG behind is waited for and then dropped from the page
 * cache (POSIX_FADV_DONTNEED), so the file holds at most about
 * WRITEBACK_LAG of page cache at any time and its pages are recycled
 * while the copy runs.  Measured (pmck-pipebench, 1.4 GB per checkpoint,
 * 2-vCPU VM, ext4 on virtio-blk): keeping the file cached made each copy
 * allocate 1.4 GB of fresh page cache, and with the balloon's free page
 * reporting those pages (freed seconds earlier by retention) were no
 * longer backed by the host, so write() spent 2-3.4 s of CPU faulting
 * them in: 0.54-0.64 GB/s, copies running into the next checkpoint and
 * stalling it (up to 70 ms).  Recycled pages: 0.33-0.40 s of CPU and
 * 1.9-2.0 GB/s for the copy, above write()+fsync of the same bytes.  A
 * smaller window recycles more (8/64 MiB: 1.55, 4/32: 1.88, 4/16: 2.03
 * GB/s); 4/32 keeps 8 pieces in flight for disks with more latency.
 */
#define WRITE_PIECE (4u << 20)
#define WRITEBACK_LAG (32u << 20)

int
pmck__fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int ret = 0;

	if (fd < 0)
		return pma__err(-errno, "open directory %s: %s", dir, strerror(errno));
	if (fsync(fd))
		ret = pma__err(-errno, "fsync directory %s: %s", dir, strerror(errno));
	close(fd);
	return ret;
}

static int
write_all_fd(int fd, const void *buf, size_t len, const char *path)
{
	for (size_t off = 0; off < len;) {
		ssize_t w = write(fd, (const char *)buf + off, len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return pma__err(w < 0 ? -errno : -EIO, "write %s: %s", path,
					w < 0 ? strerror(errno) : "short write");
		off += (size_t)w;
	}
	return 0;
}

/* Tensor indices in slot order: the file's data is packed in that order. */
static uint32_t *
slot_order(const struct pmck_store *s)
{
	uint32_t n = s->hdr->ntensors;
	uint32_t *o = malloc(n * sizeof(*o));

	if (!o)
		return NULL;
	for (uint32_t i = 0; i < n; i++)
		o[i] = i;
	/* insertion sort is fine for a presorted map; offsets are unique */
	for (uint32_t i = 1; i < n; i++)
		for (uint32_t k = i; k > 0 && s->tmap[o[k - 1]].offset > s->tmap[o[k]].offset; k--) {
			uint32_t t = o[k]; o[k] = o[k - 1]; o[k - 1] = t;
		}
	return o;
}

static char *
build_header(const struct pmck_store *s, unsigned k, uint64_t step, unsigned rank,
		unsigned world, const uint32_t *order, size_t *len)
{
	json_object *root = json_object_new_object();
	json_object *meta = json_object_new_object();
	char buf[64];

	json_object_object_add(meta, "format", json_object_new_string("pmckpt"));
	snprintf(buf, sizeof(buf), "%" PRIu64, step);
	json_object_object_add(meta, "step", json_object_new_string(buf));
	snprintf(buf, sizeof(buf), "%u", rank);
	json_object_object_add(meta, "rank", json_object_new_string(buf));
	snprintf(buf, sizeof(buf), "%u", world);
	json_object_object_add(meta, "world_size", json_object_new_string(buf));
	snprintf(buf, sizeof(buf), "%016" PRIx64, s->hdr->layout_hash);
	json_object_object_add(meta, "layout_hash", json_object_new_string(buf));
	json_object_object_add(meta, "checksum", json_object_new_string("xxh3-64 of 1 MiB chunk xxh3-64s"));

	uint64_t off = 0;
	for (uint32_t j = 0; j < s->hdr->ntensors; j++) {
		const struct tmap_entry *e = &s->tmap[order[j]];
		json_object *t = json_object_new_object();
		json_object *shape = json_object_new_array();
		json_object *offs = json_object_new_array();
		json_object_object_add(t, "dtype",
				json_object_new_string(pmck_dtype_name((enum pmck_dtype)e->dtype)));
		for (uint32_t d = 0; d < e->ndim; d++)
			json_object_array_add(shape, json_object_new_int64((int64_t)e->shape[d]));
		json_object_object_add(t, "shape", shape);
		json_object_array_add(offs, json_object_new_int64((int64_t)off));
		json_object_array_add(offs, json_object_new_int64((int64_t)(off + e->nbytes)));
		json_object_object_add(t, "data_offsets", offs);
		json_object_object_add(root, e->name, t);
		off += e->nbytes;
		char key[PMCK_NAME_MAX + 8];
		snprintf(key, sizeof(key), "xxh3:%s", e->name);
		snprintf(buf, sizeof(buf), "%016" PRIx64, s->csum[k][order[j]]);
		json_object_object_add(meta, key, json_object_new_string(buf));
		snprintf(key, sizeof(key), "layout:%s", e->name);
		snprintf(buf, sizeof(buf), "%u %u %u", order[j], e->layer, e->dtype);
		json_object_object_add(meta, key, json_object_new_string(buf));
	}
	json_object_object_add(root, "__metadata__", meta);
	const char *text = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN);
	size_t n = strlen(text);
	size_t padded = (n + 7) / 8 * 8; /* data starts 8-byte aligned; pad with spaces */
	char *h = malloc(padded + 1);
	if (h) {
		memcpy(h, text, n);
		memset(h + n, ' ', padded - n);
		h[padded] = 0;
		*len = padded;
	}
	json_object_put(root);
	return h;
}

/*
 * A write that ran out of space: the message gets what the file needed and
 * what the file system has for it, measured after the partial file was
 * removed, so the difference is what must be freed (or `keep` lowered).
 * statvfs's f_bavail ignores quotas (EDQUOT): it is said so.
 */
static int
no_space(int ret, const char *dir, uint64_t needed, uint64_t written,
		struct pmck_copyout_failure *why)
{
	char msg[768];
	struct statvfs sv;

	snprintf(msg, sizeof(msg), "%s", pma_errormsg());
	if (statvfs(dir, &sv))
		return pma__err(ret, "%s; the file needs %" PRIu64 " bytes (%" PRIu64 " were written); "
				"statvfs %s: %s", msg, needed, written, dir, strerror(errno));
	uint64_t avail = (uint64_t)sv.f_bavail * sv.f_frsize;
	if (why) {
		why->needed = needed;
		why->available = avail;
	}
	return pma__err(ret, "%s; the file needs %" PRIu64 " bytes (%.1f MiB), %" PRIu64 " bytes "
			"(%.1f MiB) are available there%s (the %" PRIu64 " written were removed)", msg,
			needed, needed / 1048576.0, avail, avail / 1048576.0,
			ret == -EDQUOT ? " before quotas" : "", written);
}

int
pmck__safetensors_write_slot(const struct pmck_store *s, unsigned k, uint64_t step,
		const char *path, unsigned rank, unsigned world_size, mode_t mode,
		void (*progress)(void *, uint64_t, uint64_t, uint64_t), void *arg, uint64_t *bytes,
		struct pmck_copyout_failure *why)
{
	char tmp[PATH_MAX], dir[PATH_MAX];
	uint32_t *order = slot_order(s);
	size_t hlen = 0;
	char *header = order ? build_header(s, k, step, rank, world_size, order, &hlen) : NULL;
	int fd = -1, ret;

	if (!header) {
		ret = pma__err(-ENOMEM, "out of memory");
		goto out;
	}
	char copy[PATH_MAX];
	snprintf(copy, sizeof(copy), "%s", path);
	snprintf(dir, sizeof(dir), "%s", dirname(copy)); /* dirname may modify its argument */
	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp)) {
		ret = pma__err(-ENAMETOOLONG, "path too long: %s", path);
		goto out;
	}
	fd = pmck__create_private(tmp, mode);
	if (fd < 0) {
		ret = fd;
		if (why)
			snprintf(why->path, sizeof(why->path), "%s", tmp);
		goto out;
	}
	uint64_t le = hlen; /* x86-64: already little-endian */
	uint64_t total = s->hdr->tensor_bytes, done = 0, next_report = PROGRESS_EVERY, waited = 0;
	if ((ret = write_all_fd(fd, &le, sizeof(le), tmp)) ||
	    (ret = write_all_fd(fd, header, hlen, tmp)))
		goto fail;
	for (uint32_t j = 0; j < s->hdr->ntensors; j++) {
		const struct tmap_entry *e = &s->tmap[order[j]];
		const char *src = s->data[k] + e->offset;
		for (uint64_t off = 0; off < e->nbytes; off += WRITE_PIECE) {
			size_t n = e->nbytes - off < WRITE_PIECE ? e->nbytes - off : WRITE_PIECE;
			if ((ret = write_all_fd(fd, src + off, n, tmp)))
				goto fail;
			done += n;
			/*
			 * Start writeback of what was just written, and wait for what
			 * was written up to WRITEBACK_LAG earlier: the disk works while
			 * we copy, dirty pages stay bounded, and the final fsync is
			 * short.  What was waited for is clean: drop it from the page
			 * cache (see WRITE_PIECE).  Durability still comes from the
			 * fsync below, which covers the whole file.
			 */
			uint64_t end = sizeof(le) + hlen + done;
			sync_file_range(fd, (off64_t)(end - n), (off64_t)n, SYNC_FILE_RANGE_WRITE);
			if (end > WRITEBACK_LAG) {
				uint64_t upto = end - WRITEBACK_LAG, from = waited & ~(uint64_t)4095;
				sync_file_range(fd, (off64_t)waited, (off64_t)(upto - waited),
						SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
						SYNC_FILE_RANGE_WAIT_AFTER);
				/* from the page the last range ended in: a partial page is kept */
				posix_fadvise(fd, (off_t)from, (off_t)(upto - from), POSIX_FADV_DONTNEED);
				waited = upto;
			}
			if (progress && done >= next_report) {
				progress(arg, step, done, total);
				next_report = done + PROGRESS_EVERY;
			}
		}
	}
	/* Durability order: file data, then the rename, then the directory entry. */
	if (fsync(fd)) {
		ret = pma__err(-errno, "fsync %s: %s", tmp, strerror(errno));
		goto fail;
	}
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED); /* the tail, and pages at range edges */
	close(fd);
	fd = -1;
	if (rename(tmp, path)) {
		ret = pma__err(-errno, "rename %s: %s", tmp, strerror(errno));
		goto fail;
	}
	if ((ret = pmck__fsync_dir(dir))) {
		if (why)
			snprintf(why->path, sizeof(why->path), "%s", dir);
		goto out;
	}
	if (progress)
		progress(arg, step, total, total);
	if (bytes)
		*bytes += sizeof(le) + hlen + total;
	goto out;
fail:;
	/* what reached the file (a failing write may have written part of its piece) */
	off_t written = fd >= 0 ? lseek(fd, 0, SEEK_CUR) : -1;
	if (fd >= 0)
		close(fd);
	unlink(tmp);
	if (why)
		snprintf(why->path, sizeof(why->path), "%s", tmp);
	if (ret == -ENOSPC || ret == -EDQUOT)
		ret = no_space(ret, dir, sizeof(le) + hlen + total,
				written >= 0 ? (uint64_t)written : sizeof(le) + hlen + done, why);
out:
	free(order);
	free(header);
	return ret;
}

int
pmck_safetensors_write(const struct pmck_store *s, const char *path, unsigned rank,
		unsigned world_size)
{
	if (s->readable_slot < 0)
		return pma__err(PMCK_E_NO_CHECKPOINT, "nothing recovered to write (call pmck_store_recover)");
	unsigned k = (unsigned)s->readable_slot;
	return pmck__safetensors_write_slot(s, k, s->slot[k]->step, path, rank,
			world_size ? world_size : 1, PMCK__MODE_FILE(0), NULL, NULL, NULL, NULL);
}

/* ------------------------------------------------------------ reading */

struct st_tensor {
	const char *name;
	enum pmck_dtype dtype;
	uint32_t ndim;
	uint64_t shape[PMCK_MAX_DIMS];
	uint64_t begin, end;
	uint64_t checksum;
	int has_checksum;
};

struct st_file {
	const char *path;
	int fd;
	uint8_t *map;
	size_t size;
	const uint8_t *data;   /* after the header */
	uint64_t data_size;
	json_object *root;
	struct st_tensor *t;
	size_t n;
	int is_pmckpt, has_step, has_layout;
	uint64_t layout_hash;
	struct pmck_file_info info;
};

static void
st_close(struct st_file *f)
{
	if (f->map && f->map != MAP_FAILED)
		munmap(f->map, f->size);
	if (f->fd >= 0)
		close(f->fd);
	json_object_put(f->root);
	free(f->t);
}

static int
parse_dtype(const char *name, enum pmck_dtype *d)
{
	for (int k = 1; k < PMCK_DTYPE_COUNT; k++)
		if (!strcmp(pmck_dtype_name((enum pmck_dtype)k), name)) {
			*d = (enum pmck_dtype)k;
			return 0;
		}
	return -1;
}

static int
cmp_begin(const void *a, const void *b)
{
	const struct st_tensor *x = a, *y = b;
	return x->begin < y->begin ? -1 : x->begin > y->begin;
}

#define BAD(f, ...) pma__err(PMCK_E_CORRUPT, "%s: " __VA_ARGS__)

static int
meta_u64(json_object *meta, const char *key, int base, uint64_t *v)
{
	json_object *o;
	if (!meta || !json_object_object_get_ex(meta, key, &o) || !json_object_is_type(o, json_type_string))
		return -1;
	char *end;
	errno = 0;
	*v = strtoull(json_object_get_string(o), &end, base);
	return errno || *end ? -1 : 0;
}

/*
 * Maps and validates a safetensors file; every offset is checked before
 * use.  Only a regular file is read (a fifo is not waited on: O_NONBLOCK);
 * a copy-out step's file (`shared`) is never read through a symbolic link.
 */
static int
st_open(const char *path, struct st_file *f, int shared)
{
	struct stat st;
	uint64_t hlen;

	memset(f, 0, sizeof(*f));
	f->path = path;
	f->fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | (shared ? O_NOFOLLOW : 0));
	if (f->fd < 0 && errno == ELOOP && shared)
		return pma__err(-ELOOP, "%s is a symbolic link: a copy-out file is not read through "
				"one", path);
	if (f->fd < 0)
		return pma__err(-errno, "open %s: %s", path, strerror(errno));
	if (fstat(f->fd, &st))
		return pma__err(-errno, "stat %s: %s", path, strerror(errno));
	if (!S_ISREG(st.st_mode))
		return pma__err(-EINVAL, "%s is not a regular file", path);
	f->size = (size_t)st.st_size;
	if (f->size < 8)
		return BAD(f, "%zu bytes: truncated (no header length)", path, f->size);
	f->map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, f->fd, 0);
	if (f->map == MAP_FAILED)
		return pma__err(-errno, "mmap %s: %s", path, strerror(errno));
	memcpy(&hlen, f->map, sizeof(hlen));
	if (hlen == 0 || hlen > MAX_HEADER || hlen > f->size - 8)
		return BAD(f, "header length %" PRIu64 " does not fit a %zu-byte file (truncated?)",
				path, hlen, f->size);
	f->data = f->map + 8 + hlen;
	f->data_size = f->size - 8 - hlen;

	struct json_tokener *tok = json_tokener_new();
	f->root = json_tokener_parse_ex(tok, (const char *)f->map + 8, (int)hlen);
	enum json_tokener_error jerr = json_tokener_get_error(tok);
	size_t end = json_tokener_get_parse_end(tok);
	json_tokener_free(tok);
	if (!f->root || !json_object_is_type(f->root, json_type_object) ||
	    jerr != json_tokener_success)
		return BAD(f, "header is not a JSON object", path);
	for (size_t i = end; i < hlen; i++) /* only padding may follow the object */
		if (f->map[8 + i] != ' ')
			return BAD(f, "bytes after the JSON header", path);

	json_object *meta = NULL;
	json_object_object_get_ex(f->root, "__metadata__", &meta);
	if (meta && !json_object_is_type(meta, json_type_object))
		return BAD(f, "__metadata__ is not an object", path);
	size_t count = (size_t)json_object_object_length(f->root) - (meta != NULL);
	f->t = calloc(count + 1, sizeof(*f->t));
	if (!f->t)
		return pma__err(-ENOMEM, "out of memory");
	json_object_object_foreach(f->root, key, val) {
		if (!strcmp(key, "__metadata__"))
			continue;
		struct st_tensor *t = &f->t[f->n++];
		json_object *dt, *shape, *offs;
		t->name = key;
		if (strlen(key) >= PMCK_NAME_MAX || !json_object_is_type(val, json_type_object) ||
		    !json_object_object_get_ex(val, "dtype", &dt) ||
		    !json_object_object_get_ex(val, "shape", &shape) ||
		    !json_object_object_get_ex(val, "data_offsets", &offs) ||
		    !json_object_is_type(shape, json_type_array) ||
		    !json_object_is_type(offs, json_type_array) || json_object_array_length(offs) != 2 ||
		    json_object_array_length(shape) > PMCK_MAX_DIMS)
			return BAD(f, "tensor '%s': malformed entry", path, key);
		if (!json_object_is_type(dt, json_type_string) ||
		    parse_dtype(json_object_get_string(dt), &t->dtype))
			return BAD(f, "tensor '%s': unknown dtype", path, key);
		uint64_t bytes = pmck_dtype_size(t->dtype);
		t->ndim = (uint32_t)json_object_array_length(shape);
		for (uint32_t d = 0; d < t->ndim; d++) {
			json_object *dim = json_object_array_get_idx(shape, d);
			int64_t v = json_object_get_int64(dim);
			if (!json_object_is_type(dim, json_type_int) || v < 0 ||
			    __builtin_mul_overflow(bytes, (uint64_t)v, &bytes))
				return BAD(f, "tensor '%s': bad shape", path, key);
			t->shape[d] = (uint64_t)v;
		}
		json_object *jb = json_object_array_get_idx(offs, 0), *je = json_object_array_get_idx(offs, 1);
		int64_t b = json_object_get_int64(jb);
		int64_t e = json_object_get_int64(je);
		if (!json_object_is_type(jb, json_type_int) || !json_object_is_type(je, json_type_int))
			return BAD(f, "tensor '%s': data_offsets are not integers", path, key);
		if (b < 0 || e < b || (uint64_t)e > f->data_size)
			return BAD(f, "tensor '%s': data_offsets [%" PRId64 ", %" PRId64 "] outside the "
					"%" PRIu64 " data bytes (truncated?)", path, key, b, e, f->data_size);
		if ((uint64_t)(e - b) != bytes)
			return BAD(f, "tensor '%s': %" PRId64 " bytes for a shape of %" PRIu64, path, key,
					e - b, bytes);
		t->begin = (uint64_t)b;
		t->end = (uint64_t)e;
		char ck[PMCK_NAME_MAX + 8];
		snprintf(ck, sizeof(ck), "xxh3:%s", key);
		t->has_checksum = meta_u64(meta, ck, 16, &t->checksum) == 0;
	}
	/* The format indexes the whole buffer: no holes, no overlaps. */
	struct st_tensor *sorted = malloc((f->n + 1) * sizeof(*sorted));
	if (!sorted)
		return pma__err(-ENOMEM, "out of memory");
	memcpy(sorted, f->t, f->n * sizeof(*sorted));
	qsort(sorted, f->n, sizeof(*sorted), cmp_begin);
	uint64_t cursor = 0;
	int ret = 0;
	for (size_t i = 0; i < f->n && !ret; i++) {
		if (sorted[i].begin != cursor)
			ret = BAD(f, "tensor '%s' starts at %" PRIu64 ", expected %" PRIu64
					" (hole or overlap)", path, sorted[i].name, sorted[i].begin, cursor);
		cursor = sorted[i].end;
	}
	free(sorted);
	if (!ret && cursor != f->data_size)
		ret = BAD(f, "%" PRIu64 " data bytes but tensors cover %" PRIu64, path, f->data_size,
				cursor);
	if (ret)
		return ret;

	/* A file that says it is pmckpt's must carry every checksum: a damaged entry is not "absent". */
	json_object *fmt = NULL;
	f->is_pmckpt = meta && json_object_object_get_ex(meta, "format", &fmt) &&
		       json_object_is_type(fmt, json_type_string) &&
		       !strcmp(json_object_get_string(fmt), "pmckpt");
	for (size_t i = 0; f->is_pmckpt && i < f->n; i++)
		if (!f->t[i].has_checksum)
			return BAD(f, "tensor '%s': missing or malformed xxh3 checksum in a pmckpt file",
					path, f->t[i].name);
	uint64_t v;
	f->has_step = meta_u64(meta, "step", 10, &v) == 0;
	f->has_layout = meta_u64(meta, "layout_hash", 16, &f->layout_hash) == 0;
	if (f->is_pmckpt && (!f->has_step || !f->has_layout))
		return BAD(f, "pmckpt file without a valid step or layout_hash", path);
	f->info.ntensors = f->n;
	f->info.data_bytes = f->data_size;
	f->info.step = meta_u64(meta, "step", 10, &v) == 0 ? v : 0;
	f->info.rank = meta_u64(meta, "rank", 10, &v) == 0 ? (unsigned)v : 0;
	f->info.world_size = meta_u64(meta, "world_size", 10, &v) == 0 ? (unsigned)v : 1;
	f->info.has_checksums = f->n > 0;
	for (size_t i = 0; i < f->n; i++)
		f->info.has_checksums &= f->t[i].has_checksum;
	return 0;
}

/* The chunk hashes of a file's tensors, made on several threads (st_verify_checksums). */
struct st_hashes {
	const struct st_file *f;
	uint64_t *first; /* tensor i's chunks: hash[first[i]] .. hash[first[i + 1] - 1] */
	uint64_t *hash;
};

static int
st_hash_piece(void *arg, uint32_t i, uint64_t off, uint64_t len)
{
	const struct st_hashes *h = arg;
	const uint8_t *p = h->f->data + h->f->t[i].begin;

	for (uint64_t pos = off; pos < off + len; pos += PMCK_HASH_CHUNK) {
		uint64_t n = off + len - pos < PMCK_HASH_CHUNK ? off + len - pos : PMCK_HASH_CHUNK;
		h->hash[h->first[i] + pos / PMCK_HASH_CHUNK] = pmck__hash(p + pos, n);
	}
	return 0;
}

/*
 * Checks every tensor of f that carries a checksum, its chunks hashed on up to
 * PMCK_MAX_WORKERS threads (the CPUs of its affinity) as recovery hashes a slot
 * (pmck__combine of a tensor's chunk hashes is pmck_tensor_checksum of its
 * bytes).  0, or PMCK_E_CORRUPT naming the first tensor in the header's order
 * that fails.
 */
static int
st_verify_checksums(const struct st_file *f)
{
	struct pmck_span *spans = calloc(f->n ? f->n : 1, sizeof(*spans));
	uint64_t *first = calloc(f->n + 1, sizeof(*first));
	struct st_hashes h = {f, first, NULL};
	int ret = 0;

	if (!spans || !first) {
		ret = pma__err(-ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < f->n; i++) {
		/* only the tensors with a checksum are hashed: the others are empty spans */
		uint64_t len = f->t[i].has_checksum ? f->t[i].end - f->t[i].begin : 0;
		spans[i] = (struct pmck_span){len, f->t[i].begin};
		first[i + 1] = first[i] + (len + PMCK_HASH_CHUNK - 1) / PMCK_HASH_CHUNK;
	}
	h.hash = malloc((first[f->n] ? first[f->n] : 1) * sizeof(*h.hash));
	if (!h.hash) {
		ret = pma__err(-ENOMEM, "out of memory");
		goto out;
	}
	/* nothing to hash (no checksums, or only empty tensors): no thread */
	if (first[f->n] &&
	    (ret = pmck__for_each_span_piece(spans, (uint32_t)f->n, 0, st_hash_piece, &h)))
		goto out;
	for (size_t i = 0; i < f->n; i++)
		if (f->t[i].has_checksum &&
		    pmck__combine(&h.hash[first[i]], first[i + 1] - first[i]) != f->t[i].checksum) {
			ret = pma__err(PMCK_E_CORRUPT, "%s: tensor '%s' fails its checksum", f->path,
					f->t[i].name);
			break;
		}
out:
	free(h.hash);
	free(first);
	free(spans);
	return ret;
}

int
pmck_safetensors_verify(const char *path, struct pmck_file_info *info)
{
	struct st_file f;
	int ret = st_open(path, &f, 0);

	if (!ret)
		ret = st_verify_checksums(&f);
	if (!ret && info)
		*info = f.info;
	st_close(&f);
	return ret;
}

int
pmck__safetensors_layout(const char *path, uint64_t *hash)
{
	struct st_file f;
	int ret = st_open(path, &f, 1); /* a copy-out step's rank-0 file */

	if (!ret && !f.has_layout)
		ret = pma__err(-ENOENT, "%s carries no layout_hash", path);
	if (!ret)
		*hash = f.layout_hash;
	st_close(&f);
	return ret;
}

static int
same_dtype(enum pmck_dtype a, enum pmck_dtype b)
{
	/* Opaque bytes are stored as "U8". */
	return a == b || ((a == PMCK_DTYPE_BYTES || a == PMCK_DTYPE_U8) &&
			  (b == PMCK_DTYPE_BYTES || b == PMCK_DTYPE_U8));
}

int
pmck_safetensors_import(struct pmck_store *s, const char *path, uint64_t step)
{
	return pmck__safetensors_import(s, path, step, 0);
}

int
pmck__safetensors_import(struct pmck_store *s, const char *path, uint64_t step, int exact_step)
{
	struct st_file f;
	struct pmck_ckpt *c = NULL;
	uint32_t n = s->hdr->ntensors;
	int64_t *map = NULL;
	const void **srcs = NULL; /* where each tensor of the store comes from in the file */
	int ret = st_open(path, &f, exact_step);

	if (ret)
		goto out;
	/* A step taken from a directory's name must agree with the file's own. */
	if (exact_step && f.has_step && step != f.info.step) {
		ret = pma__err(PMCK_E_CORRUPT, "%s says step %" PRIu64 ", expected %" PRIu64, path,
				f.info.step, step);
		goto out;
	}
	if (f.has_step)
		step = f.info.step;
	map = malloc(n * sizeof(*map));
	srcs = malloc(n * sizeof(*srcs));
	if (!map || !srcs) {
		ret = pma__err(-ENOMEM, "out of memory");
		goto out;
	}
	/* Every tensor of the store must come from the file, with its dtype and shape. */
	for (uint32_t i = 0; i < n && !ret; i++) {
		const struct tmap_entry *e = &s->tmap[i];
		map[i] = -1;
		for (size_t j = 0; j < f.n; j++)
			if (!strcmp(f.t[j].name, e->name))
				map[i] = (int64_t)j;
		if (map[i] < 0) {
			ret = pma__err(PMCK_E_LAYOUT, "%s has no tensor '%s'", path, e->name);
			break;
		}
		const struct st_tensor *t = &f.t[map[i]];
		srcs[i] = f.data + t->begin;
		if (!same_dtype(t->dtype, (enum pmck_dtype)e->dtype) || t->ndim != e->ndim ||
		    memcmp(t->shape, e->shape, e->ndim * sizeof(uint64_t)))
			ret = pma__err(PMCK_E_LAYOUT, "%s: tensor '%s' has another dtype or shape than "
					"the store's", path, e->name);
	}
	/* Names, dtypes and shapes agree; the hash also covers layers and order. */
	if (!ret && f.has_layout && f.layout_hash != s->hdr->layout_hash)
		ret = pma__err(PMCK_E_LAYOUT, "%s was written for layout %016" PRIx64 ", the store has "
				"%016" PRIx64, path, f.layout_hash, s->hdr->layout_hash);
	if (ret || (ret = pmck_store_begin(s, step, &c)))
		goto out;
	/* Every tensor copied and hashed on up to 8 threads, as recovery verifies a slot. */
	ret = pmck_ckpt_write_all(c, srcs, 0);
	/* Compare with the file's own checksums before publishing anything. */
	for (uint32_t i = 0; i < n && !ret; i++) {
		const struct st_tensor *t = &f.t[map[i]];
		uint64_t sum = pmck__combine(&s->chunk_hash[s->chunk_first[i]],
				s->chunk_first[i + 1] - s->chunk_first[i]);
		if (t->has_checksum && sum != t->checksum)
			ret = pma__err(PMCK_E_CORRUPT, "%s: tensor '%s' fails its checksum", path, t->name);
	}
	if (!ret)
		ret = pmck_ckpt_commit(c);
	if (ret)
		pmck_ckpt_abort(c);
out:
	if (ret && ret != -ENOMEM)
		pma__err_prefix(ret, "import");
	free(srcs);
	free(map);
	st_close(&f);
	return ret;
}

/* "<index> <layer> <dtype>" of a "layout:<name>" entry; 0, or -1 if absent or malformed. */
static int
meta_layout(json_object *meta, const char *name, unsigned *index, unsigned *layer,
		unsigned *dtype)
{
	char key[PMCK_NAME_MAX + 8];
	json_object *o;
	int used = 0;

	snprintf(key, sizeof(key), "layout:%s", name);
	if (!meta || !json_object_object_get_ex(meta, key, &o) ||
	    !json_object_is_type(o, json_type_string))
		return -1;
	const char *v = json_object_get_string(o);
	if (sscanf(v, "%u %u %u%n", index, layer, dtype, &used) != 3 || v[used])
		return -1;
	return 0;
}

int
pmck_safetensors_layout(const char *path, struct pmck_tensor_desc **out, size_t *count)
{
	struct st_file f;
	struct pmck_tensor_desc *d = NULL;
	char *names = NULL;
	int ret;

	if (!path || !out || !count)
		return pma__err(-EINVAL, "pmck_safetensors_layout: path, out and count are required");
	*out = NULL;
	*count = 0;
	if ((ret = st_open(path, &f, 0)))
		goto out;
	if (f.n == 0) {
		ret = pma__err(PMCK_E_LAYOUT, "%s holds no tensor", path);
		goto out;
	}
	json_object *meta = NULL;
	json_object_object_get_ex(f.root, "__metadata__", &meta);
	/* One block: the descriptors, then their names (they must outlive the file's JSON). */
	d = calloc(f.n, sizeof(*d) + PMCK_NAME_MAX);
	if (!d) {
		ret = pma__err(-ENOMEM, "out of memory");
		goto out;
	}
	names = (char *)(d + f.n);
	/* Data order: the order the tensors were placed in, i.e. by layer. */
	struct st_tensor *t = malloc(f.n * sizeof(*t));
	if (!t) {
		ret = pma__err(-ENOMEM, "out of memory");
		goto out;
	}
	memcpy(t, f.t, f.n * sizeof(*t));
	qsort(t, f.n, sizeof(*t), cmp_begin);
	size_t described = 0;
	for (size_t j = 0; j < f.n && !ret; j++) {
		unsigned index = (unsigned)j, layer = (unsigned)j, dtype = (unsigned)t[j].dtype;
		if (meta_layout(meta, t[j].name, &index, &layer, &dtype) == 0)
			described++;
		else
			index = (unsigned)j, layer = (unsigned)j, dtype = (unsigned)t[j].dtype;
		if (index >= f.n || d[index].name || !same_dtype((enum pmck_dtype)dtype, t[j].dtype)) {
			ret = pma__err(PMCK_E_CORRUPT, "%s: layout entry of tensor '%s' is inconsistent",
					path, t[j].name);
			break;
		}
		char *nm = names + index * PMCK_NAME_MAX;
		snprintf(nm, PMCK_NAME_MAX, "%s", t[j].name);
		d[index] = (struct pmck_tensor_desc){.name = nm, .dtype = (enum pmck_dtype)dtype,
				.ndim = t[j].ndim, .layer = layer};
		memcpy(d[index].shape, t[j].shape, sizeof(d[index].shape));
	}
	free(t);
	if (ret)
		goto out;
	if (described && described != f.n)
		ret = pma__err(PMCK_E_CORRUPT, "%s: %zu of %zu tensors have a layout entry", path,
				described, f.n);
	else if (!described && f.is_pmckpt)
		ret = pma__err(PMCK_E_LAYOUT, "%s was written by a pmckpt without layout entries: "
				"its layers are unknown; import it into a store made with the "
				"original layout", path);
	else if (f.has_layout && pmck__layout_hash(d, f.n) != f.layout_hash)
		ret = pma__err(PMCK_E_CORRUPT, "%s: the layout entries do not give its layout_hash "
				"%016" PRIx64, path, f.layout_hash);
out:
	if (ret) {
		free(d);
		d = NULL;
	} else {
		*out = d;
		*count = f.n;
	}
	st_close(&f);
	return ret;
}
