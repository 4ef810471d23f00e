/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * crash_replay.h -- replaying a persistence trace (common/pmtrace.h) into
 * the images a power failure could leave, under ADR: a store is durable
 * only once flushed (or stored non-temporally) and fenced.
 *
 * The replay keeps the durable image and, per 64-byte line, the versions
 * written since the last fence (and stores never flushed, until a flushed
 * and fenced version of the same words supersedes them).  A crash point is
 * after every event; its images are the durable state plus: none of the
 * pending lines, all, each line alone and all but one (up to
 * EACH_LINE_MAX lines), every combination when there are at most
 * EXHAUSTIVE_MAX, and random ones up to a budget -- line by line (a line
 * takes a prefix of its versions, in order), torn (each 8-byte word its
 * own prefix), eADR (every cached store, some non-temporal lines).  Each
 * image is written into a mapped file (only the lines that differ from the
 * durable state), checked by the test's crash_check with the last marker
 * the workload recorded, and the lines put back.  Identical images
 * (same durable state, lines and marker) are checked once.
 *
 * Use: load_trace, crash_map_image, then replay(0) (plans the budget) and
 * replay(1) (checks); the figures are in st.
 */
#ifndef PMCK_CRASH_REPLAY_H
#define PMCK_CRASH_REPLAY_H 1

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sys/mman.h>
#include <sys/stat.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "ckpt_util.h"
#include "pmtrace.h"

#define LINE 64u
#define WORDS 8u
#define EXHAUSTIVE_MAX 256   /* enumerate every subset up to this many images */
#define EACH_LINE_MAX 64     /* each line alone and all but one, up to this many lines */
#define REPORT_MAX 6

/* -------------------------------------------------------------- the trace */

struct event {
	struct pmtrace_rec h;
	const char *site;
	const uint8_t *data;
};

static struct event *ev;
static size_t nev;

static int
load_trace(const char *path, size_t *region_size)
{
	int fd = open(path, O_RDONLY);
	struct stat st;

	if (fd < 0 || fstat(fd, &st))
		return -1;
	uint8_t *buf = malloc((size_t)st.st_size + 1);
	size_t have = 0;
	while (buf && have < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + have, (size_t)st.st_size - have);
		if (n <= 0)
			break;
		have += (size_t)n;
	}
	close(fd);
	if (!buf || have < 8 || memcmp(buf, PMTRACE_MAGIC, 8))
		return -1;
	size_t cap = 1024, pos = 8;
	int regions = 0;
	ev = malloc(cap * sizeof(*ev));
	while (pos + sizeof(struct pmtrace_rec) <= have) {
		struct event e;
		memcpy(&e.h, buf + pos, sizeof(e.h));
		pos += sizeof(e.h);
		if (pos + e.h.site_len + e.h.data_len > have)
			return -1;
		e.site = (const char *)buf + pos;
		e.data = buf + pos + e.h.site_len;
		pos += e.h.site_len + e.h.data_len;
		if (e.h.kind == PMTRACE_REGION) {
			regions++;
			*region_size = e.h.len;
		}
		if (e.h.region != 0 || regions > 1)
			return -2; /* the workload maps one region */
		if (nev == cap)
			ev = realloc(ev, (cap *= 2) * sizeof(*ev));
		ev[nev++] = e;
	}
	return pos == have && regions == 1 ? 0 : -1;
}

static const char *
kind_name(unsigned k)
{
	static const char *const names[] = {"?", "region", "image", "unflushed store", "flush",
		"persist", "nt copy", "memset", "fence", "mark", "close"};
	return k < sizeof(names) / sizeof(names[0]) ? names[k] : "?";
}

/* ------------------------------------------------------------- the replay */

/* A version of a cache line: the words it writes, durable at the next fence or never. */
struct ver {
	uint64_t seq;
	uint32_t line;
	uint8_t mask;
	uint8_t unflushed;
	uint8_t nt;          /* a non-temporal store: volatile until a fence even under eADR */
	uint64_t w[WORDS];
};

static size_t size, nlines;
static uint8_t *dur;     /* the durable image */
static uint8_t *vis;     /* every byte the trace has written */
static uint8_t *img;     /* the image file, mapped; equal to dur between checks */
static uint64_t dur_hash;
static struct ver *pend;
static size_t npend, pend_cap;

static void
add_versions(const struct event *e, int unflushed, int nt)
{
	uint64_t from = e->h.off, to = e->h.off + e->h.len;

	for (uint64_t l = from / LINE; l * LINE < to; l++) {
		struct ver v = {.seq = (uint64_t)(e - ev), .line = (uint32_t)l,
			.unflushed = (uint8_t)unflushed, .nt = (uint8_t)nt};
		for (unsigned k = 0; k < WORDS; k++) {
			uint64_t a = l * LINE + k * 8;
			if (a + 8 > from && a < to)
				v.mask |= (uint8_t)(1u << k);
		}
		memcpy(v.w, vis + l * LINE, LINE);
		if (npend == pend_cap)
			pend = realloc(pend, (pend_cap = pend_cap ? 2 * pend_cap : 4096) * sizeof(*pend));
		pend[npend++] = v;
	}
}

static int
cmp_line_seq(const void *a, const void *b)
{
	const struct ver *x = a, *y = b;
	if (x->line != y->line)
		return x->line < y->line ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* The fence: every flushed version becomes durable; unflushed words it covers are gone. */
static void
fence(void)
{
	if (npend)
		qsort(pend, npend, sizeof(*pend), cmp_line_seq);
	size_t keep = 0;
	for (size_t i = 0; i < npend;) {
		size_t j = i;
		while (j < npend && pend[j].line == pend[i].line)
			j++;
		uint8_t *d = dur + (size_t)pend[i].line * LINE;
		for (size_t k = i; k < j; k++) {
			if (pend[k].unflushed)
				continue;
			for (unsigned x = 0; x < WORDS; x++)
				if (pend[k].mask & (1u << x))
					memcpy(d + x * 8, &pend[k].w[x], 8);
			/* An older unflushed store to these words can no longer reach media. */
			for (size_t u = i; u < k; u++)
				if (pend[u].unflushed)
					pend[u].mask &= (uint8_t)~pend[k].mask;
		}
		memcpy(img + (size_t)pend[i].line * LINE, d, LINE);
		for (size_t k = i; k < j; k++)
			if (pend[k].unflushed && pend[k].mask)
				pend[keep++] = pend[k];
		i = j;
	}
	npend = keep;
	/* pend stays ordered by line, then seq: what the crash points need */
	dur_hash = XXH3_64bits(dur, size);
}

/* The lines a crash can change, with the versions that change something, in order. */
struct pline {
	uint32_t line;
	uint32_t first, n;   /* kept[first .. first+n) */
};
static struct pline *pl;
static size_t npl, pl_cap;
static const struct ver **kept;
static size_t kept_cap;

static void
pending_lines(void)
{
	struct ver *sorted = pend;
	if (npend)
		qsort(sorted, npend, sizeof(*sorted), cmp_line_seq);
	npl = 0;
	if (kept_cap < npend + 1)
		kept = realloc(kept, (kept_cap = npend + 1) * sizeof(*kept));
	size_t nk = 0;
	for (size_t i = 0; i < npend;) {
		size_t j = i;
		while (j < npend && sorted[j].line == sorted[i].line)
			j++;
		uint64_t cur[WORDS];
		memcpy(cur, dur + (size_t)sorted[i].line * LINE, LINE);
		size_t first = nk;
		for (size_t k = i; k < j; k++) {
			int changes = 0;
			for (unsigned x = 0; x < WORDS; x++)
				if ((sorted[k].mask & (1u << x)) && cur[x] != sorted[k].w[x]) {
					changes = 1;
					cur[x] = sorted[k].w[x];
				}
			if (changes)
				kept[nk++] = &sorted[k];
		}
		if (nk > first) {
			if (npl == pl_cap)
				pl = realloc(pl, (pl_cap = pl_cap ? 2 * pl_cap : 256) * sizeof(*pl));
			pl[npl++] = (struct pline){sorted[i].line, (uint32_t)first, (uint32_t)(nk - first)};
		}
		i = j;
	}
}

/* ------------------------------------------------------------- the checks */

struct stats {
	uint64_t images, inconsistent, dups, points, fences, fences_seen, unflushed_words;
	uint64_t target, budget;
} st;

/* Seen images: (durable hash, chosen lines, marker), open addressing. */
static uint64_t *seen;
static size_t seen_cap, nseen;

static int
seen_add(uint64_t key)
{
	if (!key)
		key = 1;
	if (2 * (nseen + 1) > seen_cap) {
		size_t old = seen_cap;
		uint64_t *o = seen;
		seen_cap = old ? 2 * old : 1 << 16;
		seen = calloc(seen_cap, sizeof(*seen));
		nseen = 0;
		for (size_t i = 0; i < old; i++)
			if (o[i])
				seen_add(o[i]);
		free(o);
	}
	for (size_t i = key & (seen_cap - 1);; i = (i + 1) & (seen_cap - 1)) {
		if (seen[i] == key)
			return 0;
		if (!seen[i]) {
			seen[i] = key;
			nseen++;
			return 1;
		}
	}
}

/*
 * What the test checks an image against: the last marker before the crash
 * point (its bytes, NULL before the first), into why ("" if consistent).
 */
typedef void (*crash_check_fn)(const void *marker, size_t len, char *why, size_t n);
static crash_check_fn crash_check;
static uint8_t marker[1024];
static size_t marker_len;
static int have_marker;
static size_t marker_seq;
static size_t point_event;   /* the event after which the crash happens */
static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t *choice;     /* per pending line: versions applied (line-wise images) */
static uint8_t *torn;        /* per pending line: 1 if its words were chosen one by one */
static char fault_sites[8][160];
static unsigned nfault_sites;

/* Writes the chosen lines into the image, checks it, puts the durable lines back. */
static void
try_image(const char *how)
{
	XXH3_state_t h;
	uint64_t key[2] = {dur_hash, marker_seq};

	XXH3_64bits_reset(&h);
	XXH3_64bits_update(&h, key, sizeof(key));
	for (size_t j = 0; j < npl; j++) {
		uint64_t line[WORDS];
		uint8_t *dst = img + (size_t)pl[j].line * LINE;
		memcpy(line, dur + (size_t)pl[j].line * LINE, LINE);
		for (unsigned x = 0; x < WORDS; x++) {
			/* torn: each 8-byte word its own number of versions, up to the line's */
			uint32_t upto = torn[j] ? (uint32_t)(xorshift64(&rng) % (choice[j] + 1)) : choice[j];
			for (uint32_t k = 0; k < upto; k++)
				if (kept[pl[j].first + k]->mask & (1u << x))
					line[x] = kept[pl[j].first + k]->w[x];
		}
		memcpy(dst, line, LINE);
		if (memcmp(line, dur + (size_t)pl[j].line * LINE, LINE)) {
			XXH3_64bits_update(&h, &pl[j].line, sizeof(pl[j].line));
			XXH3_64bits_update(&h, line, LINE);
		}
	}
	if (seen_add(XXH3_64bits_digest(&h))) {
		char why[512];
		crash_check(marker, marker_len, why, sizeof(why));
		st.images++;
		if (why[0]) {
			const struct event *e = &ev[point_event];
			char site[160];
			if (e->h.site_len)
				snprintf(site, sizeof(site), "%s at %.*s", kind_name(e->h.kind),
						(int)e->h.site_len, e->site);
			else
				snprintf(site, sizeof(site), "%s", kind_name(e->h.kind));
			if (st.inconsistent++ < REPORT_MAX)
				diag("inconsistent image (%s, %zu lines pending) after event %zu (%s) %s",
						how, npl, point_event, site, why);
			unsigned k;
			for (k = 0; k < nfault_sites && strcmp(fault_sites[k], site); k++)
				;
			if (k == nfault_sites && k < 8)
				snprintf(fault_sites[nfault_sites++], sizeof(fault_sites[0]), "%s", site);
		}
	} else {
		st.dups++;
	}
	for (size_t j = 0; j < npl; j++)
		memcpy(img + (size_t)pl[j].line * LINE, dur + (size_t)pl[j].line * LINE, LINE);
}

static void
set_all(uint32_t pick_all)
{
	for (size_t j = 0; j < npl; j++) {
		choice[j] = pick_all ? pl[j].n : 0;
		torn[j] = 0;
	}
}

/* How many line-wise images this crash point has (capped). */
static uint64_t
combinations(void)
{
	uint64_t e = 1;
	for (size_t j = 0; j < npl && e <= EXHAUSTIVE_MAX; j++)
		e *= pl[j].n + 1;
	return e;
}

/* The images of one crash point; with check 0 only counts what it would try. */
static uint64_t
crash_point(int check)
{
	pending_lines();
	if (!check)
		return combinations();
	if (!have_marker)
		return 0;
	choice = realloc(choice, (npl + 1) * sizeof(*choice));
	torn = realloc(torn, npl + 1);
	st.points++;
	uint64_t e = combinations();
	if (e <= EXHAUSTIVE_MAX) { /* every subset, line by line */
		set_all(0);
		for (uint64_t i = 0; i < e; i++) {
			try_image(i == 0 ? "none" : "subset");
			for (size_t j = 0; j < npl; j++) {
				if (++choice[j] <= pl[j].n)
					break;
				choice[j] = 0;
			}
		}
		return e;
	}
	set_all(0);
	try_image("none");
	set_all(1);
	try_image("all");
	uint64_t done = 2;
	if (npl <= EACH_LINE_MAX) {
		for (size_t j = 0; j < npl; j++) {
			set_all(0);
			choice[j] = pl[j].n;
			try_image("one line");
			set_all(1);
			choice[j] = 0;
			try_image("all lines but one");
			done += 2;
		}
	}
	for (; done < st.budget; done++) {
		/* 0-1 line by line, 2 torn, 3 eADR: every cached store, some NT lines */
		int mode = (int)(xorshift64(&rng) % 4);
		for (size_t j = 0; j < npl; j++) {
			choice[j] = (uint32_t)(xorshift64(&rng) % (pl[j].n + 1));
			torn[j] = mode == 2 && (xorshift64(&rng) & 1);
			if (mode == 3 && !kept[pl[j].first + pl[j].n - 1]->nt)
				choice[j] = pl[j].n;
		}
		try_image(mode == 2 ? "random, torn words" : mode == 3 ? "eADR" : "random lines");
	}
	return done;
}

/*
 * Replays the trace; at every crash point (after each event) builds its
 * images, or with check 0 only counts them (for the budget).
 */
static uint64_t
replay(int check)
{
	uint64_t planned = 0, big = 0;

	memset(dur, 0, size);
	memset(vis, 0, size);
	memset(img, 0, size);
	npend = 0;
	have_marker = 0;
	dur_hash = XXH3_64bits(dur, size);
	for (size_t i = 0; i < nev; i++) {
		const struct event *e = &ev[i];
		int point = 1;
		switch (e->h.kind) {
		case PMTRACE_IMAGE:
			memcpy(dur + e->h.off, e->data, e->h.len);
			memcpy(vis + e->h.off, e->data, e->h.len);
			memcpy(img + e->h.off, e->data, e->h.len);
			dur_hash = XXH3_64bits(dur, size);
			point = 0;
			break;
		case PMTRACE_STORE:
			st.unflushed_words += check ? e->h.len / 8 : 0;
			__attribute__((fallthrough));
		case PMTRACE_FLUSH:
		case PMTRACE_PERSIST:
		case PMTRACE_NT:
			memcpy(vis + e->h.off, e->data, e->h.len);
			add_versions(e, e->h.kind == PMTRACE_STORE, e->h.kind == PMTRACE_NT &&
					!(e->h.flags & PMTRACE_F_TEMPORAL));
			break;
		case PMTRACE_MEMSET:
			memset(vis + e->h.off, e->data[0], e->h.len);
			add_versions(e, 0, 1);
			break;
		case PMTRACE_FENCE:
			fence();
			st.fences += check;
			break;
		case PMTRACE_MARK:
			if (e->h.len <= sizeof(marker)) {
				memcpy(marker, e->data, e->h.len);
				marker_len = e->h.len;
				have_marker = 1;
				marker_seq = i;
			}
			break;
		default:
			point = 0;
		}
		if (!point)
			continue;
		point_event = i;
		if (!check) {
			uint64_t n = crash_point(0);
			if (n <= EXHAUSTIVE_MAX)
				planned += n;
			else
				big++;
		} else {
			uint64_t before = st.images + st.dups;
			crash_point(1);
			/* A fence point: the crash just before this fence, all its epoch pending. */
			if (i + 1 < nev && ev[i + 1].h.kind == PMTRACE_FENCE && st.images + st.dups > before)
				st.fences_seen++;
		}
	}
	if (!check)
		st.budget = big && st.target > planned ? (st.target - planned) / big + 2 : 8;
	return planned;
}


/* Creates the image file at path (size bytes, zero) and maps it; 0 or -errno. */
static int
crash_map_image(const char *path)
{
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);

	if (fd < 0 || ftruncate(fd, (off_t)size) ||
	    (img = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
		int err = -errno;
		if (fd >= 0)
			close(fd);
		img = NULL;
		return err;
	}
	close(fd);
	nlines = size / LINE;
	dur = malloc(size);
	vis = malloc(size);
	return dur && vis ? 0 : -ENOMEM;
}

#endif
