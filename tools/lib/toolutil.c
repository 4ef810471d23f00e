/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * toolutil.c -- helpers shared by the tools: messages, human sizes, clocks,
 * medians, option parsing, meminfo, a checkpoint.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "pmckpt.h"
#include "toolutil.h"

static const char *tool_prog = "tool";
static const char *tool_usage_hint = "";

void
tool_init(const char *prog, const char *usage_hint)
{
	tool_prog = prog;
	tool_usage_hint = usage_hint ? usage_hint : "";
}

static void
tool_vmsg(const char *fmt, va_list ap)
{
	fprintf(stderr, "%s: ", tool_prog);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

int
tool_fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	tool_vmsg(fmt, ap);
	va_end(ap);
	return 1;
}

int
tool_usage_error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	tool_vmsg(fmt, ap);
	va_end(ap);
	fputs(tool_usage_hint, stderr);
	return 2;
}

void
tool_fmt(char *buf, size_t len, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, len, fmt, ap);
	va_end(ap);
}

const char *
tool_hsize(uint64_t b, char *buf, size_t len)
{
	static const char *unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB"};
	double v = (double)b;
	unsigned u = 0;

	while (v >= 1024 && u + 1 < sizeof(unit) / sizeof(unit[0])) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		tool_fmt(buf, len, "%" PRIu64 " bytes", b);
	else
		tool_fmt(buf, len, "%.2f %s", v, unit[u]);
	return buf;
}

const char *
tool_hsize_b(uint64_t b, char *buf, size_t len)
{
	char h[32];

	if (b < 1024)
		tool_fmt(buf, len, "%" PRIu64 " bytes", b);
	else
		tool_fmt(buf, len, "%s (%" PRIu64 " bytes)", tool_hsize(b, h, sizeof(h)), b);
	return buf;
}

double
tool_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

double
tool_median(double *v, size_t n)
{
	if (n == 0)
		return 0;
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int
tool_parse_uint(const char *s, unsigned long lo, unsigned long hi, unsigned long *out)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);

	if (errno || end == s || *end || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

uint64_t
tool_mem_available(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[256];
	unsigned long long kb = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
			break;
	fclose(f);
	return (uint64_t)kb << 10;
}

int
tool_checkpoint(const char *prog, struct pmck_store *s, uint64_t step,
		const void *const *srcs, unsigned threads, double *secs, unsigned *slot)
{
	struct pmck_ckpt *c;
	double t0 = tool_now();
	int ret = pmck_store_begin(s, step, &c);

	if (ret) {
		fprintf(stderr, "%s: begin of step %llu: %s\n", prog, (unsigned long long)step,
				pmck_errormsg());
		return ret;
	}
	if (slot)
		*slot = pmck_ckpt_slot(c);
	if ((ret = pmck_ckpt_write_all(c, srcs, threads)) || (ret = pmck_ckpt_commit(c))) {
		fprintf(stderr, "%s: checkpoint of step %llu: %s\n", prog, (unsigned long long)step,
				pmck_errormsg());
		pmck_ckpt_abort(c);
		return ret;
	}
	*secs = tool_now() - t0;
	return 0;
}
