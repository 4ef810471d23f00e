/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * plot.c -- PREFIX.svg: small multiples, hand-written SVG (no plotting
 * dependency).
 *
 * One panel per dimension that varies (method, layout, alignment, threads,
 * NUMA node; for reads method, threads, node; GPU rows by strategy): the
 * lines of a panel are the values of that dimension, every other dimension
 * held at the first configuration run, so that a panel has a handful of
 * lines with a legend that stays readable.  Bandwidth (GB/s) against
 * transfer size (log2); error bars from min to max of the repeats; the
 * machine limit of the same run (memcpy and nt-store reference loops) as
 * horizontal lines on the write panels.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pmalloc.h"
#include "pmbench.h"

enum dim { D_METHOD, D_LAYOUT, D_ALIGN, D_THREADS, D_NODE, ND };
static const char *const dim_names[ND] = {"method", "layout", "alignment", "threads", "NUMA node"};

static const char *const colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
		"#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};
static const char *const dashes[] = {"", "7,3", "2,2", "9,3,2,3"};

enum { W = 900, PW = 540, PH = 230, ML = 70, MT = 46, PANEL_H = PH + 96 };

static void
dimval(const struct row *r, enum dim d, char *b, size_t len)
{
	switch (d) {
	case D_METHOD: snprintf(b, len, "%s", r->method); break;
	case D_LAYOUT: snprintf(b, len, "%s", r->layout); break;
	case D_ALIGN: snprintf(b, len, "%s", r->align); break;
	case D_THREADS: snprintf(b, len, "%u thread%s", r->threads, r->threads == 1 ? "" : "s"); break;
	default: snprintf(b, len, "node %d", r->node); break;
	}
}

static int
same_dim(const struct row *a, const struct row *b, enum dim d)
{
	char x[32], y[32];
	dimval(a, d, x, sizeof(x));
	dimval(b, d, y, sizeof(y));
	return !strcmp(x, y);
}

/* Rows of a class: op and path. */
static int
in_class(const struct row *r, const char *op, const char *path)
{
	return !strcmp(r->op, op) && !strcmp(r->path, path);
}

static void
size_label(size_t s, char *b, size_t len)
{
	if (s >= (1u << 20) && s % (1u << 20) == 0)
		snprintf(b, len, "%zuM", s >> 20);
	else if (s >= 1024 && s % 1024 == 0)
		snprintf(b, len, "%zuK", s >> 10);
	else
		snprintf(b, len, "%zu", s);
}

static void
xml_text(FILE *f, const char *s)
{
	for (; *s; s++)
		switch (*s) {
		case '<': fputs("&lt;", f); break;
		case '>': fputs("&gt;", f); break;
		case '&': fputs("&amp;", f); break;
		default: fputc(*s, f);
		}
}

static double
nice_step(double v)
{
	double e = pow(10, floor(log10(v))), m = v / e;
	return (m <= 1 ? 0.2 : m <= 2 ? 0.5 : m <= 5 ? 1 : 2) * e;
}

struct panel {
	const char *op, *path;
	enum dim by;     /* lines: values of this dimension */
	int all;         /* no dimension varies: every row of the class */
	const struct row *base;
	char title[256];
};

/* Does row i belong to the panel: its class, and every dimension but `by` as the base? */
static int
in_panel(const struct panel *p, size_t i)
{
	const struct row *r = &rows[i];
	if (!in_class(r, p->op, p->path))
		return 0;
	if (p->all)
		return 1;
	for (int d = 0; d < ND; d++)
		if (d != (int)p->by && !same_dim(r, p->base, (enum dim)d))
			return 0;
	return 1;
}

/* The value that names row i's line in the panel: its series, or its value of `by`. */
static void
line_label(const struct panel *p, size_t i, char *v, size_t len)
{
	if (p->all)
		snprintf(v, len, "%.31s", rows[i].series);
	else
		dimval(&rows[i], p->by, v, len);
}

static void
draw_panel(FILE *f, const struct panel *p, int y0, int reference)
{
	char vals[16][32], lab[32];
	int nv = 0, px = ML, py = y0 + MT;
	size_t smin = SIZE_MAX, smax = 0;
	double gmax = 0, gmin = INFINITY;

	for (size_t i = 0; i < nrows; i++) {
		char v[32];
		int k;
		if (!in_panel(p, i))
			continue;
		line_label(p, i, v, sizeof(v));
		for (k = 0; k < nv && strcmp(vals[k], v); k++)
			;
		if (k == nv && nv < 16)
			snprintf(vals[nv++], sizeof(vals[0]), "%s", v);
		smin = rows[i].size < smin ? rows[i].size : smin;
		smax = rows[i].size > smax ? rows[i].size : smax;
		double hi = rows[i].gbps_max > rows[i].gbps ? rows[i].gbps_max : rows[i].gbps;
		double lo = rows[i].gbps_min > 0 && rows[i].gbps_min < rows[i].gbps ? rows[i].gbps_min :
				rows[i].gbps;
		gmax = hi > gmax ? hi : gmax;
		if (lo > 0 && lo < gmin)
			gmin = lo;
	}
	if (reference) {
		double refs[2] = {ref_memcpy_gbps, ref_nt_gbps};
		for (int k = 0; k < 2; k++)
			if (refs[k] > gmax)
				gmax = refs[k];
	}
	double lx0 = log2((double)smin), lx1 = log2((double)smax);
	if (lx1 - lx0 < 1)
		lx0 -= 0.5, lx1 += 0.5;
	/* Bandwidths spanning more than two decades get a log axis, else small sizes vanish. */
	int logy = gmin > 0 && gmax / gmin > 100;
	double step = nice_step(gmax > 0 ? gmax : 1), ymax, ly0 = 0, ly1 = 1;
	if (logy) {
		ly0 = floor(log10(gmin));
		ly1 = ceil(log10(gmax));
		ymax = pow(10, ly1);
	} else {
		ymax = ceil((gmax > 0 ? gmax : 1) * 1.05 / step) * step;
	}
#define X(s) (px + (log2((double)(s)) - lx0) / (lx1 - lx0) * PW)
#define Y(g) (logy ? py + PH - (log10((g) > 0 ? (g) : pow(10, ly0)) - ly0) / (ly1 - ly0) * PH : \
		py + PH - (g) / ymax * PH)
	fprintf(f, "<g class=\"panel\" data-op=\"%s\" data-path=\"%s\" data-by=\"%s\">\n", p->op, p->path,
			p->all ? "series" : dim_names[p->by]);
	fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"14\">", px, py - 12);
	xml_text(f, p->title);
	fprintf(f, "</text>\n<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" "
			"stroke=\"#444\"/>\n", px, py, PW, PH);
	for (double e = ly0, g = 0; logy ? e <= ly1 + 1e-9 : g <= ymax + 1e-9; e += 1, g += step) {
		double v = logy ? pow(10, e) : g;
		fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>"
				"<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
				px, Y(v), px + PW, Y(v), px - 6, Y(v) + 4, v);
	}
	for (int e = (int)ceil(lx0); e <= (int)floor(lx1); e++) {
		if (e % 2 && lx1 - lx0 > 12)
			continue;
		size_label((size_t)1 << e, lab, sizeof(lab));
		fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#eee\"/>"
				"<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n",
				X((size_t)1 << e), py, X((size_t)1 << e), py + PH, X((size_t)1 << e),
				py + PH + 16, lab);
	}
	fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">transfer size (bytes, log scale)"
			"</text>\n", px + PW / 2, py + PH + 34);
	fprintf(f, "<text transform=\"translate(%d,%d) rotate(-90)\" text-anchor=\"middle\">GB/s%s"
			"</text>\n", px - 48, py + PH / 2, logy ? " (log scale)" : "");
	int leg = 0;
	for (int k = 0; k < nv; k++, leg++) {
		const char *col = colors[k % 10], *dash = dashes[k % 4];
		char ds[40] = "";
		if (dash[0])
			snprintf(ds, sizeof(ds), " stroke-dasharray=\"%s\"", dash);
		fprintf(f, "<polyline class=\"series\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s "
				"points=\"", col, ds);
		size_t last = 0;
		for (;;) { /* points in size order */
			size_t best = SIZE_MAX, bi = 0;
			for (size_t i = 0; i < nrows; i++) {
				char v[32];
				if (!in_panel(p, i) || rows[i].size <= last || rows[i].size >= best)
					continue;
				if (p->all)
					snprintf(v, sizeof(v), "%.31s", rows[i].series);
				else
					dimval(&rows[i], p->by, v, sizeof(v));
				if (!strcmp(v, vals[k]))
					best = rows[i].size, bi = i;
			}
			if (best == SIZE_MAX)
				break;
			fprintf(f, "%.1f,%.1f ", X(rows[bi].size), Y(rows[bi].gbps));
			last = best;
		}
		fprintf(f, "\"/>\n");
		for (size_t i = 0; i < nrows; i++) {
			char v[32];
			if (!in_panel(p, i))
				continue;
			line_label(p, i, v, sizeof(v));
			if (strcmp(v, vals[k]))
				continue;
			double x = X(rows[i].size);
			if (rows[i].repeats > 1)
				fprintf(f, "<path class=\"errorbar\" d=\"M%.1f,%.1fV%.1fM%.1f,%.1fH%.1fM%.1f,%.1fH%.1f\" "
						"stroke=\"%s\" fill=\"none\"/>\n", x, Y(rows[i].gbps_min),
						Y(rows[i].gbps_max), x - 3, Y(rows[i].gbps_min), x + 3, x - 3,
						Y(rows[i].gbps_max), x + 3, col);
			fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\"/>\n", x,
					Y(rows[i].gbps), col);
		}
		int ly = py + 6 + leg * 16;
		fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\"%s/>"
				"<text class=\"legend\" x=\"%d\" y=\"%d\">", px + PW + 16, ly, px + PW + 44, ly,
				col, ds, px + PW + 50, ly + 4);
		xml_text(f, vals[k]);
		fprintf(f, "</text>\n");
	}
	if (reference) {
		static const char *const names[2] = {"memcpy reference", "nt-store reference"};
		double refs[2] = {ref_memcpy_gbps, ref_nt_gbps};
		for (int k = 0; k < 2; k++, leg++) {
			if (!(refs[k] > 0))
				continue;
			const char *col = k ? "#000" : "#888";
			int ly = py + 6 + leg * 16;
			fprintf(f, "<line class=\"reference\" x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" "
					"stroke=\"%s\" stroke-width=\"1.5\" stroke-dasharray=\"4,4\"/>\n",
					px, Y(refs[k]), px + PW, Y(refs[k]), col);
			fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"1.5\" "
					"stroke-dasharray=\"4,4\"/><text class=\"legend\" x=\"%d\" y=\"%d\">%s "
					"%.1f GB/s</text>\n", px + PW + 16, ly, px + PW + 44, ly, col,
					px + PW + 50, ly + 4, names[k], refs[k]);
		}
	}
	if (!p->all)
		fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"#555\">others as the first "
				"configuration</text>\n", px + PW + 16, py + PH);
	fprintf(f, "</g>\n");
#undef X
#undef Y
}

/* The panels of a class of rows: one per varying dimension among `dims`, or one of all rows. */
static int
class_panels(struct panel *out, const char *op, const char *path, const enum dim *dims, int nd)
{
	const struct row *base = NULL;
	int n = 0;

	for (size_t i = 0; i < nrows && !base; i++)
		if (in_class(&rows[i], op, path))
			base = &rows[i];
	if (!base)
		return 0;
	for (int k = 0; k < nd; k++) {
		int varies = 0;
		for (size_t i = 0; i < nrows && !varies; i++)
			varies = in_class(&rows[i], op, path) && !same_dim(&rows[i], base, dims[k]);
		if (!varies)
			continue;
		struct panel *p = &out[n++];
		char fixed[160] = "";
		size_t len = 0;
		*p = (struct panel){.op = op, .path = path, .by = dims[k], .base = base};
		for (int d = 0; d < ND; d++) {
			char v[32];
			if (d == (int)dims[k])
				continue;
			dimval(base, (enum dim)d, v, sizeof(v));
			len += (size_t)snprintf(fixed + len, sizeof(fixed) - len, "%s%s", len ? ", " : "", v);
			if (len >= sizeof(fixed))
				len = sizeof(fixed) - 1;
		}
		snprintf(p->title, sizeof(p->title), "%s %s bandwidth by %s (%s)", path, op,
				dim_names[dims[k]], fixed);
	}
	if (!n) {
		out[n] = (struct panel){.op = op, .path = path, .all = 1, .base = base};
		snprintf(out[n].title, sizeof(out[n].title), "%s %s bandwidth", path, op);
		n++;
	}
	return n;
}

void
pmb_write_svg(FILE *f)
{
	static const enum dim wdims[] = {D_METHOD, D_LAYOUT, D_ALIGN, D_THREADS, D_NODE};
	static const enum dim rdims[] = {D_METHOD, D_THREADS, D_NODE};
	static const enum dim gdims[] = {D_METHOD};
	struct panel p[16];
	int n = 0, y0 = 34;

	n += class_panels(p + n, "write", "cpu", wdims, 5);
	n += class_panels(p + n, "read", "cpu", rdims, 3);
	n += class_panels(p + n, "write", "gpu", gdims, 1);
	fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
			"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
			"font-family=\"sans-serif\" font-size=\"12\">\n"
			"<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
			"<text x=\"%d\" y=\"24\" font-size=\"15\">pmbench: ", W, 40 + n * PANEL_H, ML);
	xml_text(f, pma_region_path(region));
	fprintf(f, " (%s, %s granularity, node %d; median of %u, bars min..max)</text>\n", region_kind,
			granularity, region_node, opt.repeat);
	for (int k = 0; k < n; k++, y0 += PANEL_H)
		draw_panel(f, &p[k], y0, !strcmp(p[k].op, "write") && !strcmp(p[k].path, "cpu"));
	fprintf(f, "</svg>\n");
}
