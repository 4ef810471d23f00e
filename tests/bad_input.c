/*
 * bad_input.c -- damaged pool files: every open and recover gives a clear
 * error or a bit-exact committed checkpoint, never crashes, and a failed
 * call changes nothing in the file.
 *
 * A pool holds store "ck" with two committed steps (both slots sealed).
 * Its bytes are copied, and each case writes a damaged copy and runs
 * pma_region_open, pma_pool_open, pmck_store_open and pmck_store_recover
 * in a child process (so that a crash is reported, not fatal).
 *
 *   bad_input [--seed S] [--random N]
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <xxhash.h>

#include "pmckpt.h"
#include "../runtime/internal.h" /* on-media store header, slot headers, tensor map */
#include "tap.h"
#include "ckpt_util.h"

#define MiB ((size_t)1 << 20)
#define POOL_SIZE (4 * MiB)
#define STEP_OLD 3
#define STEP_NEW 7

/* Pool media layout (pmalloc/pool.c). */
#define HDR_VERSION_OFF 8
#define HDR_HDR_SIZE_OFF 12
#define HDR_UUID_OFF 16
#define HDR_POOL_SIZE_OFF 32
#define HDR_HEAP_OFF_OFF 56
#define HDR_CHECKSUM_OFF 72
#define TABLE_OFF 4096
#define ENTRY_SIZE 128
#define ENTRY_STATE 0
#define ENTRY_OFFSET 8
#define ENTRY_SIZE_F 16
#define ENTRY_ALIGN 24
#define ENTRY_NAME 32

static const struct pmck_tensor_desc layout[] = {
	{.name = "w", .dtype = PMCK_DTYPE_F32, .ndim = 2, .shape = {300, 500}, .layer = 0},
	{.name = "e", .dtype = PMCK_DTYPE_BF16, .ndim = 2, .shape = {64, 64}, .layer = 1},
	{.name = "b", .dtype = PMCK_DTYPE_F32, .ndim = 1, .shape = {7}, .layer = 1},
	{.name = "s", .dtype = PMCK_DTYPE_I64, .ndim = 0, .layer = 2},
};
#define NT 4

/* What the clean file looks like, found by reading it. */
static struct {
	uint8_t *bytes;
	size_t size;
	uint64_t meta_off, meta_size, data_off[2], data_size;
	int entry[3]; /* table entry index of ck.meta, ck.data0, ck.data1 */
	int nentries; /* live entries */
	unsigned new_slot;
	uint64_t toff[NT], tbytes[NT];
	uint8_t *want[2][NT]; /* [0]: STEP_OLD, [1]: STEP_NEW */
} img;

/* Result of one case, written by the child into shared memory. */
struct result {
	int stage; /* 0 all succeeded, 1 region, 2 pool, 3 store, 4 recover */
	int code;
	char msg[512];
	struct pmck_recovery rec;
	int exact; /* recovered tensors equal the committed contents of rec.step */
	int unchanged; /* file bytes after the calls equal the damaged copy */
};

static const char *stage_name[] = {"none", "pma_region_open", "pma_pool_open",
	"pmck_store_open", "pmck_store_recover"};

static char path[512];
static struct result *shared;
static int use_open_or_create; /* run_calls: pmck_store_open_or_create instead of pmck_store_open */

static void
fill(uint8_t *p, uint64_t n, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 12345;
	for (uint64_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = (uint8_t)(x >> 11);
	}
}

static int
write_file(const uint8_t *b, size_t n)
{
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		return -1;
	size_t done = 0;
	while (done < n) {
		ssize_t w = write(fd, b + done, n - done);
		if (w <= 0) {
			close(fd);
			return -1;
		}
		done += (size_t)w;
	}
	close(fd);
	return 0;
}

/* Reads the whole file; *n receives its size.  Caller frees. */
static uint8_t *
read_file(size_t *n)
{
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return NULL;
	off_t size = lseek(fd, 0, SEEK_END);
	uint8_t *b = malloc((size_t)size + 1);
	size_t done = 0;
	while (b && done < (size_t)size) {
		ssize_t r = pread(fd, b + done, (size_t)size - done, (off_t)done);
		if (r <= 0)
			break;
		done += (size_t)r;
	}
	close(fd);
	*n = done;
	return b;
}

static int
collect(const struct pma_alloc_info *info, void *arg)
{
	(void)arg;
	if (!strcmp(info->name, "ck.meta")) {
		img.meta_off = info->offset;
		img.meta_size = info->size;
	} else if (!strcmp(info->name, "ck.data0")) {
		img.data_off[0] = info->offset;
	} else if (!strcmp(info->name, "ck.data1")) {
		img.data_off[1] = info->offset;
	}
	return 0;
}

static int
commit_step(struct pmck_store *s, uint64_t step, int which)
{
	struct pmck_ckpt *c;
	int ret = pmck_store_begin(s, step, &c);
	if (ret)
		return ret;
	for (size_t i = 0; i < NT; i++)
		if ((ret = pmck_ckpt_write(c, i, img.want[which][i])))
			return ret;
	return pmck_ckpt_commit(c);
}

/* Builds the clean pool and reads back where everything lives. */
static int
make_original(void)
{
	struct pma_region *r;
	struct pma_pool *p;
	struct pmck_store *s;

	unlink(path);
	if (pma_region_open(path, POOL_SIZE, PMA_REGION_CREATE, &r))
		return -1;
	if (pma_pool_create(r, 0, &p) || pmck_store_create(p, "ck", layout, NT, &s))
		return -1;
	/* An unrelated allocation after the store, to have a third kind of entry. */
	void *x;
	if (pma_alloc(p, "other", 1000, 0, PMA_ALLOC_ZERO, &x))
		return -1;
	for (size_t i = 0; i < NT; i++) {
		struct pmck_tensor_info ti;
		pmck_store_tensor(s, i, &ti);
		img.toff[i] = ti.offset;
		img.tbytes[i] = ti.nbytes;
		for (int k = 0; k < 2; k++) {
			img.want[k][i] = malloc(ti.nbytes);
			fill(img.want[k][i], ti.nbytes, (k ? STEP_NEW : STEP_OLD) * 100 + i);
		}
	}
	img.data_size = pmck_store_data_size(s);
	if (commit_step(s, STEP_OLD, 0) || commit_step(s, STEP_NEW, 1))
		return -1;
	if (pma_pool_foreach(p, collect, NULL))
		return -1;
	pmck_store_close(&s);
	pma_pool_close(&p);
	pma_region_close(&r);

	img.bytes = read_file(&img.size);
	if (!img.bytes || img.size != POOL_SIZE)
		return -1;
	/* Table entries, by name. */
	for (int i = 0; i < 1024; i++) {
		const uint8_t *e = img.bytes + TABLE_OFF + (size_t)i * ENTRY_SIZE;
		uint64_t state;
		memcpy(&state, e, 8);
		if (!state)
			continue;
		img.nentries++;
		const char *name = (const char *)e + ENTRY_NAME;
		for (int k = 0; k < 3; k++)
			if (!strcmp(name, k == 0 ? "ck.meta" : k == 1 ? "ck.data0" : "ck.data1"))
				img.entry[k] = i;
	}
	/* The slot holding STEP_NEW. */
	const struct slot_hdr *sh = (const struct slot_hdr *)(img.bytes + img.meta_off + SLOT_HDR_OFF);
	img.new_slot = sh[1].step == STEP_NEW;
	if (sh[img.new_slot].seal != STEP_NEW + 1 || sh[!img.new_slot].seal != STEP_OLD + 1)
		return -1;
	return 0;
}

/* Runs the four calls on the damaged file in this process; fills *res. */
static void
run_calls(const uint8_t *damaged, size_t len, struct result *res)
{
	struct pma_region *r = NULL;
	struct pma_pool *p = NULL;
	struct pmck_store *s = NULL;

	memset(res, 0, sizeof(*res));
	if ((res->code = pma_region_open(path, 0, 0, &r))) {
		res->stage = 1;
	} else if ((res->code = pma_pool_open(r, &p))) {
		res->stage = 2;
	} else if ((res->code = use_open_or_create ?
				pmck_store_open_or_create(p, "ck", layout, NT, &s) :
				pmck_store_open(p, "ck", &s))) {
		res->stage = 3;
	} else if ((res->code = pmck_store_recover(s, &res->rec))) {
		res->stage = 4;
	} else {
		int k = res->rec.step == STEP_OLD ? 0 : res->rec.step == STEP_NEW ? 1 : -1;
		res->exact = k >= 0;
		for (size_t i = 0; k >= 0 && i < NT; i++) {
			const void *d = pmck_store_tensor_data(s, i);
			uint8_t *buf = malloc(img.tbytes[i] + 1);
			int rd = pmck_store_read(s, i, buf);
			if (!d || rd || memcmp(d, img.want[k][i], img.tbytes[i]) ||
			    memcmp(buf, img.want[k][i], img.tbytes[i]))
				res->exact = 0;
			free(buf);
		}
	}
	if (res->code)
		snprintf(res->msg, sizeof(res->msg), "%s", pma_errormsg());
	pmck_store_close(&s);
	pma_pool_close(&p);
	pma_region_close(&r);

	size_t n;
	uint8_t *after = read_file(&n);
	res->unchanged = after && n == len && !memcmp(after, damaged, len);
	free(after);
}

/*
 * Writes the damaged copy and runs the calls in a child.  Returns 0 when
 * the child finished (result in *res), else the signal or exit status
 * that ended it (negative for a signal).
 */
static int
run_case(const uint8_t *damaged, size_t len, struct result *res)
{
	if (write_file(damaged, len)) {
		diag("cannot write %s", path);
		return 1000;
	}
	memset(shared, 0, sizeof(*shared));
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0)
		return 1001;
	if (pid == 0) {
		run_calls(damaged, len, shared);
		_exit(0);
	}
	int status;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	*res = *shared;
	if (WIFSIGNALED(status))
		return -WTERMSIG(status);
	return WEXITSTATUS(status);
}

/* A case that must fail at `stage` with `code` (0: any negative code). */
static void
expect_error(const char *what, const uint8_t *damaged, size_t len, int stage, int code)
{
	struct result res;
	int st = run_case(damaged, len, &res);

	if (st) {
		ok(0, "%s: no crash (child ended with %s %d)", what, st < 0 ? "signal" : "status",
				st < 0 ? -st : st);
		return;
	}
	int good = res.stage == stage && (code ? res.code == code : res.code < 0);
	ok(good, "%s: %s fails with %d", what, stage_name[stage], code);
	if (!good)
		diag("  got: %s returned %d (%s)", stage_name[res.stage], res.code, res.msg);
	ok(res.msg[0] != '\0', "%s: message: %s", what, res.msg);
	ok(res.unchanged, "%s: the failed calls changed nothing in the file", what);
}

/* A case where recover succeeds with `step`; rejected: expected rec.rejected (-1: any). */
static void
expect_recover(const char *what, const uint8_t *damaged, size_t len, uint64_t step, int rejected,
		const char *rejected_tensor)
{
	struct result res;
	int st = run_case(damaged, len, &res);

	if (st) {
		ok(0, "%s: no crash (child ended with %s %d)", what, st < 0 ? "signal" : "status",
				st < 0 ? -st : st);
		return;
	}
	if (!ok(res.stage == 0, "%s: recover succeeds", what)) {
		diag("  %s returned %d (%s)", stage_name[res.stage], res.code, res.msg);
		return;
	}
	is_int(res.rec.step, step, "%s: recovered step %llu", what, (unsigned long long)step);
	ok(res.exact, "%s: tensors bit-exact", what);
	if (rejected >= 0)
		is_int(res.rec.rejected, rejected, "%s: rejected = %d", what, rejected);
	if (rejected == 1) {
		ok(res.rec.rejected_step == STEP_NEW && res.rec.rejected_slot == img.new_slot,
				"%s: rejected step %llu in slot %u", what,
				(unsigned long long)res.rec.rejected_step, res.rec.rejected_slot);
		ok(!strcmp(res.rec.rejected_tensor, rejected_tensor),
				"%s: rejected tensor '%s' (expected '%s')", what, res.rec.rejected_tensor,
				rejected_tensor);
	}
	ok(res.unchanged, "%s: recover changed nothing in the file", what);
}

static uint8_t *
copy(void)
{
	uint8_t *b = malloc(img.size);
	memcpy(b, img.bytes, img.size);
	return b;
}

static uint64_t
entry_off(int k)
{
	return TABLE_OFF + (uint64_t)img.entry[k] * ENTRY_SIZE;
}

static uint64_t
slot_hdr_off(unsigned slot)
{
	return img.meta_off + SLOT_HDR_OFF + 64 * slot;
}

static void
flip(uint8_t *b, uint64_t off)
{
	b[off] ^= 0xff;
}

static void
deterministic_cases(void)
{
	uint8_t *b;
	char what[128];

	/* The clean copy itself recovers the newest step. */
	b = copy();
	expect_recover("clean copy", b, img.size, STEP_NEW, 0, NULL);
	free(b);

	/* Truncation. */
	expect_error("truncated to half", img.bytes, img.size / 2, 2, PMA_E_TRUNCATED);
	expect_error("truncated to 4096 bytes", img.bytes, 4096, 2, PMA_E_TRUNCATED);
	expect_error("4096 bytes short", img.bytes, img.size - 4096, 2, PMA_E_TRUNCATED);
	{
		struct result res;
		int st = run_case(img.bytes, 100, &res);
		ok(st == 0 && ((res.stage == 1 && res.code < 0) ||
				(res.stage == 2 && res.code == PMA_E_TRUNCATED)),
				"truncated to 100 bytes: region or pool open fails (%s: %d)",
				stage_name[res.stage], res.code);
		ok(res.msg[0] != '\0', "truncated to 100 bytes: message: %s", res.msg);
		ok(res.unchanged, "truncated to 100 bytes: nothing changed");
	}
	expect_error("empty file", img.bytes, 0, 1, -EINVAL);

	/* Header. */
	b = calloc(1, img.size);
	expect_error("zeroed file", b, img.size, 2, PMA_E_NOT_POOL);
	free(b);
	b = copy();
	flip(b, 3);
	expect_error("flipped byte in the magic", b, img.size, 2, PMA_E_NOT_POOL);
	free(b);
	b = copy();
	b[HDR_VERSION_OFF] = 2;
	expect_error("version byte 2", b, img.size, 2, PMA_E_VERSION);
	free(b);
	b = copy();
	b[HDR_VERSION_OFF + 3] = 0x80;
	expect_error("version high byte", b, img.size, 2, PMA_E_VERSION);
	free(b);
	static const struct {
		const char *field;
		uint64_t off;
	} hdr[] = {
		{"hdr_size", HDR_HDR_SIZE_OFF}, {"uuid", HDR_UUID_OFF + 5},
		{"pool_size", HDR_POOL_SIZE_OFF + 2}, {"pool_size (high byte)", HDR_POOL_SIZE_OFF + 7},
		{"heap_off", HDR_HEAP_OFF_OFF + 1}, {"checksum", HDR_CHECKSUM_OFF + 4},
	};
	for (size_t k = 0; k < sizeof(hdr) / sizeof(hdr[0]); k++) {
		b = copy();
		flip(b, hdr[k].off);
		snprintf(what, sizeof(what), "flipped byte in the pool header's %s", hdr[k].field);
		expect_error(what, b, img.size, 2, PMA_E_CORRUPT);
		free(b);
	}

	/* Allocation table. */
	static const struct {
		const char *field;
		uint64_t off;
	} ent[] = {
		{"state", ENTRY_STATE + 1}, {"state (check)", ENTRY_STATE + 6},
		{"offset", ENTRY_OFFSET + 2}, {"size", ENTRY_SIZE_F + 0}, {"align", ENTRY_ALIGN + 1},
		{"name", ENTRY_NAME + 1}, {"name padding", ENTRY_NAME + 80},
	};
	for (int k = 0; k < 3; k++)
		for (size_t f = 0; f < sizeof(ent) / sizeof(ent[0]); f++) {
			b = copy();
			flip(b, entry_off(k) + ent[f].off);
			snprintf(what, sizeof(what), "flipped byte in the table entry of ck.%s: %s",
					k == 0 ? "meta" : k == 1 ? "data0" : "data1", ent[f].field);
			expect_error(what, b, img.size, 2, PMA_E_CORRUPT);
			free(b);
		}
	b = copy();
	b[TABLE_OFF + (uint64_t)(img.nentries + 3) * ENTRY_SIZE] = 0x4c;
	expect_error("stray state word in a free table entry", b, img.size, 2, PMA_E_CORRUPT);
	free(b);
	/* Two entries made to overlap, each with a valid check: ck.data1's offset moved onto data0. */
	b = copy();
	{
		uint8_t *e = b + entry_off(2);
		uint64_t off = img.data_off[0] + 128, state;
		memcpy(e + ENTRY_OFFSET, &off, 8);
		state = 0x4556494cu | (XXH3_64bits(e + 8, ENTRY_SIZE - 8) << 32);
		memcpy(e, &state, 8);
	}
	expect_error("two allocations overlapping (valid entry checks)", b, img.size, 2,
			PMA_E_CORRUPT);
	free(b);

	/* Store metadata. */
	static const struct {
		const char *field;
		uint64_t off;
		int code;
	} meta[] = {
		{"tensor 1's name", TMAP_OFF + 256 + 0, PMCK_E_CORRUPT},
		{"tensor 0's offset", TMAP_OFF + offsetof(struct tmap_entry, offset), PMCK_E_CORRUPT},
		{"tensor 3's nbytes", TMAP_OFF + 3 * 256 + offsetof(struct tmap_entry, nbytes),
			PMCK_E_CORRUPT},
		{"tensor 2's shape", TMAP_OFF + 2 * 256 + offsetof(struct tmap_entry, shape),
			PMCK_E_CORRUPT},
		{"tensor 2's layer", TMAP_OFF + 2 * 256 + offsetof(struct tmap_entry, layer),
			PMCK_E_CORRUPT},
		{"store header's data_size", offsetof(struct store_hdr, data_size), PMCK_E_CORRUPT},
		{"store header's layout_hash", offsetof(struct store_hdr, layout_hash) + 3,
			PMCK_E_CORRUPT},
		{"store header's checksum", offsetof(struct store_hdr, checksum), PMCK_E_CORRUPT},
		{"store header's ntensors", offsetof(struct store_hdr, ntensors), PMCK_E_CORRUPT},
		{"store header's ntensors (high byte)", offsetof(struct store_hdr, ntensors) + 3,
			PMCK_E_CORRUPT},
		{"store header's version", offsetof(struct store_hdr, version), PMCK_E_VERSION},
	};
	for (size_t k = 0; k < sizeof(meta) / sizeof(meta[0]); k++) {
		b = copy();
		flip(b, img.meta_off + meta[k].off);
		snprintf(what, sizeof(what), "flipped byte in the %s", meta[k].field);
		expect_error(what, b, img.size, 3, meta[k].code);
		free(b);
	}
	b = copy();
	flip(b, img.meta_off + 2);
	expect_error("flipped byte in the store magic", b, img.size, 3, 0);
	{
		/* A damaged magic is corruption, not an interrupted create: open_or_create must not re-create. */
		struct result res;
		use_open_or_create = 1;
		int st = run_case(b, img.size, &res);
		use_open_or_create = 0;
		ok(st == 0 && res.stage == 3 && res.code < 0 && res.unchanged,
				"flipped byte in the store magic: open_or_create fails and keeps the file "
				"(got %s: %d)", stage_name[res.stage], res.code);
	}
	free(b);

	/* Tensor data of the newest slot: recover falls back to the older step. */
	static const struct {
		size_t tensor;
		uint64_t at; /* byte in the tensor; ~0: last */
	} td[] = {{1, 0}, {1, 5000}, {3, 7}, {0, 599999}, {0, 1 << 20 >> 2}};
	for (size_t k = 0; k < sizeof(td) / sizeof(td[0]); k++) {
		b = copy();
		uint64_t at = td[k].at < img.tbytes[td[k].tensor] ? td[k].at : img.tbytes[td[k].tensor] - 1;
		b[img.data_off[img.new_slot] + img.toff[td[k].tensor] + at] ^= 0x01;
		snprintf(what, sizeof(what), "bit flipped in tensor '%s' byte %llu of the newest slot",
				layout[td[k].tensor].name, (unsigned long long)at);
		expect_recover(what, b, img.size, STEP_OLD, 1, layout[td[k].tensor].name);
		free(b);
	}
	/* A recorded checksum of the newest slot. */
	b = copy();
	{
		const struct store_hdr *h = (const struct store_hdr *)(img.bytes + img.meta_off);
		flip(b, img.meta_off + h->csum_off + 8 * (h->ntensors * img.new_slot + 2) + 3);
	}
	expect_recover("flipped byte in tensor 'b''s checksum of the newest slot", b, img.size,
			STEP_OLD, 1, "b");
	free(b);
	/* Padding between tensors is not covered, and must not matter. */
	b = copy();
	flip(b, img.data_off[img.new_slot] + img.tbytes[0] + 10);
	expect_recover("flipped byte in padding of the newest slot", b, img.size, STEP_NEW, 0, NULL);
	free(b);
	/* The older slot's data is never read while the newest verifies. */
	b = copy();
	flip(b, img.data_off[!img.new_slot] + img.toff[1] + 1);
	expect_recover("flipped byte in the older slot's data", b, img.size, STEP_NEW, 0, NULL);
	free(b);

	/* Seal and step words of the newest slot. */
	static const struct {
		const char *what;
		uint64_t off;
		int kind; /* 0 flip, 1 +1, 2 zero the word */
	} seal[] = {
		{"seal word flipped", 0, 0}, {"seal word high byte flipped", 7, 0},
		{"seal word off by one", 0, 1}, {"seal word zeroed", 0, 2},
		{"step word flipped", 8, 0}, {"step word off by one", 8, 1},
	};
	for (size_t k = 0; k < sizeof(seal) / sizeof(seal[0]); k++) {
		b = copy();
		uint8_t *w = b + slot_hdr_off(img.new_slot) + seal[k].off;
		if (seal[k].kind == 0) {
			*w ^= 0xff;
		} else {
			uint64_t v;
			memcpy(&v, w, 8);
			v = seal[k].kind == 1 ? v + 1 : 0;
			memcpy(w, &v, 8);
		}
		snprintf(what, sizeof(what), "newest slot: %s", seal[k].what);
		expect_recover(what, b, img.size, STEP_OLD, -1, NULL);
		free(b);
	}

	/* Both slots damaged: nothing verifies (checkpoints existed: not "never saved"). */
	b = copy();
	flip(b, img.data_off[0] + img.toff[2]);
	flip(b, img.data_off[1] + img.toff[2]);
	expect_error("data of both slots damaged", b, img.size, 4, PMCK_E_NONE_USABLE);
	free(b);
	b = copy();
	memset(b + slot_hdr_off(0), 0, 8);
	memset(b + slot_hdr_off(1), 0, 8);
	expect_error("both seals zeroed", b, img.size, 4, PMCK_E_NO_CHECKPOINT);
	free(b);
}

static uint64_t rng;

/* One random damage: returns a description in what. */
static void
damage(uint8_t *b, char *what, size_t wlen)
{
	uint64_t lo, hi;
	const char *where;
	switch (xorshift64(&rng) % 10) {
	case 0: case 1: lo = 0; hi = 128; where = "pool header"; break;
	case 2: case 3:
		lo = TABLE_OFF;
		hi = TABLE_OFF + (uint64_t)(img.nentries + 2) * ENTRY_SIZE;
		where = "table";
		break;
	case 4: case 5: lo = img.meta_off; hi = img.meta_off + img.meta_size; where = "store meta"; break;
	case 6: case 7: {
		unsigned k = (unsigned)(xorshift64(&rng) % 2);
		lo = img.data_off[k];
		hi = lo + img.data_size;
		where = k == img.new_slot ? "newest slot" : "older slot";
		break;
	}
	case 8: lo = img.meta_off + SLOT_HDR_OFF; hi = lo + 128; where = "slot headers"; break;
	default: lo = 0; hi = img.size; where = "anywhere"; break;
	}
	uint64_t off = lo + xorshift64(&rng) % (hi - lo);
	uint64_t len = 1;
	const char *how;
	switch (xorshift64(&rng) % 6) {
	case 0:
		how = "bit flip";
		b[off] ^= (uint8_t)(1u << (xorshift64(&rng) % 8));
		break;
	case 1: case 2:
		how = "random byte";
		{
			uint8_t v = (uint8_t)xorshift64(&rng);
			b[off] = v == b[off] ? (uint8_t)~v : v;
		}
		break;
	case 3:
		how = "run of random bytes";
		len = 2 + xorshift64(&rng) % 63;
		for (uint64_t i = 0; i < len && off + i < img.size; i++)
			b[off + i] = (uint8_t)xorshift64(&rng);
		break;
	case 4:
		how = "run of zeros";
		len = 2 + xorshift64(&rng) % 300;
		memset(b + off, 0, off + len <= img.size ? len : img.size - off);
		break;
	default:
		how = "run of 0xff";
		len = 2 + xorshift64(&rng) % 300;
		memset(b + off, 0xff, off + len <= img.size ? len : img.size - off);
		break;
	}
	size_t used = strlen(what);
	snprintf(what + used, wlen - used, "%s%s at %llu+%llu (%s)", used ? ", " : "", how,
			(unsigned long long)off, (unsigned long long)len, where);
}

static void
random_cases(int count, uint64_t seed)
{
	int crashed = 0, unclear = 0, inexact = 0, changed = 0;
	int errors = 0, recovered[2] = {0, 0};
	char what[512];
	uint8_t *b = malloc(img.size);

	for (int t = 0; t < count; t++) {
		memcpy(b, img.bytes, img.size);
		what[0] = '\0';
		int nd = 1 + (int)(xorshift64(&rng) % 3);
		for (int k = 0; k < nd; k++)
			damage(b, what, sizeof(what));
		struct result res;
		int st = run_case(b, img.size, &res);
		if (st) {
			crashed++;
			diag("random case %d (seed %llu): child ended with %s %d: %s", t,
					(unsigned long long)seed, st < 0 ? "signal" : "status",
					st < 0 ? -st : st, what);
			continue;
		}
		if (!res.unchanged) {
			changed++;
			diag("random case %d (seed %llu): the file changed: %s", t,
					(unsigned long long)seed, what);
		}
		if (res.stage) {
			errors++;
			if (res.code >= 0 || !res.msg[0]) {
				unclear++;
				diag("random case %d (seed %llu): %s returned %d with message '%s': %s", t,
						(unsigned long long)seed, stage_name[res.stage], res.code,
						res.msg, what);
			}
		} else if (!res.exact) {
			inexact++;
			diag("random case %d (seed %llu): recovered step %llu is not bit-exact a committed "
					"checkpoint: %s", t, (unsigned long long)seed,
					(unsigned long long)res.rec.step, what);
		} else {
			recovered[res.rec.step == STEP_NEW]++;
		}
	}
	free(b);
	diag("%d random cases: %d clear errors, %d recovered step %d, %d recovered step %d",
			count, errors, recovered[1], STEP_NEW, recovered[0], STEP_OLD);
	is_int(crashed, 0, "%d random corruptions: no crash", count);
	is_int(unclear, 0, "%d random corruptions: every error is negative with a message", count);
	is_int(inexact, 0, "%d random corruptions: every recovery is bit-exact a committed step", count);
	is_int(changed, 0, "%d random corruptions: no call changed the file", count);
	ok(errors > 0 && recovered[0] + recovered[1] > 0,
			"the random corruptions gave both errors (%d) and recoveries (%d)", errors,
			recovered[0] + recovered[1]);
}

int
main(int argc, char **argv)
{
	uint64_t seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 16);
	int count = 200;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--seed") && i + 1 < argc)
			seed = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--random") && i + 1 < argc)
			count = atoi(argv[++i]);
		else {
			fprintf(stderr, "usage: %s [--seed S] [--random N]\n", argv[0]);
			return 2;
		}
	}
	snprintf(path, sizeof(path), "%s", scratch_path("badinput"));
	shared = mmap(NULL, sizeof(*shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (shared == MAP_FAILED) {
		diag("mmap failed");
		return 1;
	}
	if (make_original()) {
		ok(0, "make the original pool: %s", pma_errormsg());
		unlink(path);
		return done_testing();
	}
	diag("pool of %zu bytes: ck.meta at %llu (+%llu), data0 at %llu, data1 at %llu, newest slot %u",
			img.size, (unsigned long long)img.meta_off, (unsigned long long)img.meta_size,
			(unsigned long long)img.data_off[0], (unsigned long long)img.data_off[1],
			img.new_slot);
	deterministic_cases();
	diag("random cases with seed %llu (reproduce with --seed %llu)", (unsigned long long)seed,
			(unsigned long long)seed);
	rng = seed ? seed : 1;
	random_cases(count, seed);

	unlink(path);
	for (int k = 0; k < 2; k++)
		for (size_t i = 0; i < NT; i++)
			free(img.want[k][i]);
	free(img.bytes);
	return done_testing();
}
