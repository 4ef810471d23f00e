/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * output.c -- PREFIX.csv, PREFIX.json, PREFIX.latency.csv and PREFIX.svg.
 * They are opened (created) before anything is measured, so that a bad
 * --out fails in a moment rather than after the sweep; a run that fails
 * removes them again.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pmalloc.h"
#include "pmbench.h"
#include "lib/toolutil.h"

enum { F_CSV, F_JSON, F_LAT, F_SVG, NF };
static const char *const ext[NF] = {"csv", "json", "latency.csv", "svg"};
static FILE *files[NF];
static char paths[NF][1024];
static int finished;

static void
remove_unfinished(void)
{
	if (finished)
		return;
	for (int i = 0; i < NF; i++) {
		if (files[i])
			fclose(files[i]);
		files[i] = NULL;
		if (paths[i][0])
			unlink(paths[i]);
	}
}

void
pmb_out_open(void)
{
	for (int i = 0; i < NF; i++) {
		if ((size_t)snprintf(paths[i], sizeof(paths[i]), "%s.%s", opt.out, ext[i]) >= sizeof(paths[i]))
			die("--out", "prefix too long");
		files[i] = fopen(paths[i], "w");
		if (!files[i]) {
			int e = errno;
			char bad[1024];
			snprintf(bad, sizeof(bad), "%s", paths[i]);
			paths[i][0] = '\0'; /* not ours: left alone */
			remove_unfinished();
			dief("--out", "cannot write %s: %s (checked before measuring; nothing was run)",
					bad, strerror(e));
		}
	}
	atexit(remove_unfinished);
}

static void
close_out(int i)
{
	FILE *f = files[i];

	files[i] = NULL;
	if (ferror(f) | fclose(f))
		dief(paths[i], "write failed: %s", strerror(errno));
}

FILE *
pmb_out_svg(void)
{
	return files[F_SVG];
}

void
pmb_out_finish(void)
{
	close_out(F_SVG);
	finished = 1;
}

/* "# key: value" lines of o, nested keys joined by dots, arrays as JSON. */
static void
comment_lines(FILE *f, const char *prefix, json_object *o)
{
	json_object_object_foreach(o, k, v) {
		char key[256];
		tool_fmt(key, sizeof(key), "%s%s%s", prefix, *prefix ? "." : "", k);
		if (json_object_is_type(v, json_type_object))
			comment_lines(f, key, v);
		else
			fprintf(f, "# %s: %s\n", key, json_object_is_type(v, json_type_string) ?
					json_object_get_string(v) :
					json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN |
							JSON_C_TO_STRING_NOSLASHESCAPE));
	}
}

static json_object *
region_json(void)
{
	json_object *o = json_object_new_object();
	json_object_object_add(o, "path", json_object_new_string(pma_region_path(region)));
	json_object_object_add(o, "kind", json_object_new_string(region_kind));
	json_object_object_add(o, "size", json_object_new_int64((int64_t)pma_region_size(region)));
	json_object_object_add(o, "granularity", json_object_new_string(granularity));
	json_object_object_add(o, "numa_node", json_object_new_int(region_node));
	json_object_object_add(o, "ddio", json_object_new_string(region_ddio));
	json_object_object_add(o, "ddio_port", json_object_new_string(region_ddio_port));
	json_object_object_add(o, "prewritten", json_object_new_boolean(opt.prewrite));
	return o;
}

static json_object *
reference_json(void)
{
	json_object *o = json_object_new_object();
	json_object_object_add(o, "block_bytes", json_object_new_int64((int64_t)ref_size));
	json_object_object_add(o, "threads", json_object_new_int(1));
	json_object_object_add(o, "memcpy_gbps", json_object_new_double(ref_memcpy_gbps));
	json_object_object_add(o, "nt_store_gbps", json_object_new_double(ref_nt_gbps));
	return o;
}

static json_object *
gpu_json(void)
{
	json_object *o = json_object_new_object();
	json_object_object_add(o, "measured", json_object_new_boolean(gpu_used));
	if (!gpu_used)
		json_object_object_add(o, "reason", json_object_new_string(gpu_reason));
	json_object_object_add(o, "ddio", json_object_new_string(gpu_ddio));
	json_object_object_add(o, "ddio_port", json_object_new_string(gpu_port));
	return o;
}

/* The description, the region, the reference and the GPU path: one object (the CSV's # lines). */
static json_object *
context(json_object *desc)
{
	json_object *c = NULL;

	json_object_deep_copy(desc, &c, NULL);
	json_object_object_add(c, "region", region_json());
	json_object_object_add(c, "reference", reference_json());
	json_object_object_add(c, "gpu", gpu_json());
	return c;
}

void
pmb_write_csv(json_object *desc)
{
	FILE *f = files[F_CSV];
	json_object *c = context(desc);

	comment_lines(f, "", c);
	json_object_put(c);
	fprintf(f, "op,path,method,layout,align,size_bytes,threads,numa_node,region_kind,granularity,"
			"ddio,ddio_port,items,bytes,seconds,gbps,series,repeats,gbps_min,gbps_max\n");
	for (size_t i = 0; i < nrows; i++) {
		const struct row *r = &rows[i];
		fprintf(f, "%s,%s,%s,%s,%s,%zu,%u,%d,%s,%s,%s,%s,%llu,%llu,%.6f,%.4f,%s,%u,%.4f,%.4f\n",
				r->op, r->path, r->method, r->layout, r->align, r->size, r->threads, r->node,
				region_kind, granularity, r->ddio, r->ddio_port, (unsigned long long)r->items,
				(unsigned long long)r->bytes, r->seconds, r->gbps, r->series, r->repeats,
				r->gbps_min, r->gbps_max);
	}
	close_out(F_CSV);
}

void
pmb_write_latency_csv(void)
{
	FILE *f = files[F_LAT];

	fprintf(f, "# write+persist latency of one item on one thread, ns (see %s.json)\n", opt.out);
	fprintf(f, "method,size_bytes,numa_node,ops,min_ns,p50_ns,p99_ns,p999_ns,max_ns,mean_ns\n");
	for (size_t i = 0; i < nlat; i++) {
		const struct lat_row *l = &lat_rows[i];
		fprintf(f, "%s,%zu,%d,%llu,%.0f,%.0f,%.0f,%.0f,%.0f,%.1f\n", l->method, l->size, l->node,
				(unsigned long long)l->ops, l->min, l->p50, l->p99, l->p999, l->max, l->mean);
	}
	close_out(F_LAT);
}

void
pmb_write_json(json_object *desc)
{
	json_object *top = context(desc), *res = json_object_new_array(), *lat = json_object_new_array();

	for (size_t i = 0; i < nrows; i++) {
		const struct row *r = &rows[i];
		json_object *o = json_object_new_object();
		json_object_object_add(o, "op", json_object_new_string(r->op));
		json_object_object_add(o, "path", json_object_new_string(r->path));
		json_object_object_add(o, "method", json_object_new_string(r->method));
		json_object_object_add(o, "layout", json_object_new_string(r->layout));
		json_object_object_add(o, "align", json_object_new_string(r->align));
		json_object_object_add(o, "size_bytes", json_object_new_int64((int64_t)r->size));
		json_object_object_add(o, "threads", json_object_new_int((int)r->threads));
		json_object_object_add(o, "numa_node", json_object_new_int(r->node));
		json_object_object_add(o, "region_kind", json_object_new_string(region_kind));
		json_object_object_add(o, "granularity", json_object_new_string(granularity));
		json_object_object_add(o, "ddio", json_object_new_string(r->ddio));
		json_object_object_add(o, "ddio_port", json_object_new_string(r->ddio_port));
		json_object_object_add(o, "items", json_object_new_int64((int64_t)r->items));
		json_object_object_add(o, "bytes", json_object_new_int64((int64_t)r->bytes));
		json_object_object_add(o, "seconds", json_object_new_double(r->seconds));
		json_object_object_add(o, "gbps", json_object_new_double(r->gbps));
		json_object_object_add(o, "series", json_object_new_string(r->series));
		json_object_object_add(o, "repeats", json_object_new_int((int)r->repeats));
		json_object_object_add(o, "gbps_min", json_object_new_double(r->gbps_min));
		json_object_object_add(o, "gbps_max", json_object_new_double(r->gbps_max));
		json_object_array_add(res, o);
	}
	json_object_object_add(top, "results", res);
	for (size_t i = 0; i < nlat; i++) {
		const struct lat_row *l = &lat_rows[i];
		json_object *o = json_object_new_object();
		json_object_object_add(o, "method", json_object_new_string(l->method));
		json_object_object_add(o, "size_bytes", json_object_new_int64((int64_t)l->size));
		json_object_object_add(o, "numa_node", json_object_new_int(l->node));
		json_object_object_add(o, "ops", json_object_new_int64((int64_t)l->ops));
		json_object_object_add(o, "min_ns", json_object_new_double(l->min));
		json_object_object_add(o, "p50_ns", json_object_new_double(l->p50));
		json_object_object_add(o, "p99_ns", json_object_new_double(l->p99));
		json_object_object_add(o, "p999_ns", json_object_new_double(l->p999));
		json_object_object_add(o, "max_ns", json_object_new_double(l->max));
		json_object_object_add(o, "mean_ns", json_object_new_double(l->mean));
		json_object_array_add(lat, o);
	}
	json_object_object_add(top, "latency", lat);
	fprintf(files[F_JSON], "%s\n", json_object_to_json_string_ext(top, JSON_C_TO_STRING_PRETTY |
			JSON_C_TO_STRING_SPACED | JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(top);
	close_out(F_JSON);
}
