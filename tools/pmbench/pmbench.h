/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * pmbench.h -- what the files of the pmbench tool share: the options, the
 * measured rows, the region and the run's reference figures.
 *
 *   main.c      the run: output files, the region and its preparation, the sweep
 *   options.c   the command line, every value range-checked
 *   measure.c   CPU write and read bandwidth (worker threads, repeats)
 *   latency.c   write+persist latency percentiles of small items
 *   reference.c the machine limit of the same run: plain memcpy and nt-store loops
 *   fault.c     SIGBUS during a measurement -> an error with the region offset
 *   gpu.c       the GPU strategies and the DDIO state of root ports
 *   describe.c  the machine and run description (CPU, kernel, versions, NUMA)
 *   output.c    CSV, JSON
 *   plot.c      the SVG plot (small multiples)
 */
#ifndef PMBENCH_H
#define PMBENCH_H 1

#include <json-c/json.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define MAXV 64            /* entries of a list option */
#define MAXREP 100         /* --repeat at most */
#define META 64            /* separated layout: bytes of a metadata record */
#define DICT_REC 40        /* interleaved layout: bytes of a record before each item */
#define META_AREA (256u << 10) /* separated layout: per-thread metadata area */

enum op { OP_WRITE, OP_READ };
enum method { M_NT, M_TEMPORAL, M_MEMCPY, M_CHECKSUM };
enum layout { L_SEPARATED, L_INTERLEAVED };

extern const char *const pmb_method_names[4];
extern const char *const pmb_layout_names[2];

struct pmb_list {
	size_t v[MAXV];
	int n;
};

/* An alignment: items start `offset` bytes past a multiple of `align` (a power of two). */
struct pmb_align {
	unsigned align, offset;
};

struct pmb_opts {
	const char *region, *out;
	size_t region_size;
	struct pmb_list sizes, threads, nodes, gpu_sizes, lat_sizes;
	int methods[2], nmethods, layouts[2], nlayouts, rmethods[2], nrmethods;
	int gpu_hashes[2], ngpu_hashes; /* indexes of pmb_gpu_hash_names */
	unsigned gpu_threads;           /* 0: per hashing, as the Python binding's Store */
	struct pmb_align aligns[MAXV];
	int naligns;
	unsigned time_ms, repeat;
	int read, gpu, keep, quiet, overwrite, latency, prewrite;
	int argc;
	char **argv;
};
extern struct pmb_opts opt;

/* One measured configuration: a row of the CSV. gbps is the median of the repeats. */
struct row {
	char op[8], path[8], method[24], layout[16], align[24];
	size_t size;
	unsigned threads;
	int node;
	uint64_t items, bytes;
	double seconds, gbps, gbps_min, gbps_max;
	unsigned repeats;
	char ddio[16], ddio_port[16], series[128];
};

/* Write+persist latency of one method and item size, in nanoseconds. */
struct lat_row {
	char method[16];
	size_t size;
	int node;
	uint64_t ops;
	double min, p50, p99, p999, max, mean;
};

extern struct row *rows;
extern size_t nrows;
extern struct lat_row lat_rows[2 * MAXV];
extern size_t nlat;
extern struct pma_region *region;
extern char region_kind[16], granularity[16], region_ddio[16], region_ddio_port[16];
extern int region_node;
extern char gpu_reason[256], gpu_ddio[16], gpu_port[16];
extern const char *const pmb_gpu_hash_names[2]; /* "host", "device" */
extern int gpu_used;
/* The machine limit measured in the same run (reference.c), GB/s; 0 when not measured. */
extern double ref_memcpy_gbps, ref_nt_gbps;
extern size_t ref_size;

/* "pmbench: what: why" on stderr, exit 1. */
void die(const char *what, const char *why) __attribute__((noreturn));
/* The same with a formatted reason. */
void dief(const char *what, const char *fmt, ...) __attribute__((noreturn, format(printf, 2, 3)));

void pmb_parse_args(int argc, char **argv);
const char *pmb_align_name(const struct pmb_align *a, char *buf, size_t len);

struct row *pmb_new_row(void);
void pmb_print_row(const struct row *r);

struct cfg {
	enum op op;
	enum method method;
	enum layout layout;
	struct pmb_align align;
	size_t size;
	unsigned threads;
	int node;
};
void pmb_run_cpu(const struct cfg *c);
void pmb_run_latency(enum method m, size_t size, int node);
void pmb_run_reference(int node);
#ifdef PMCK_HAVE_CUDA
void pmb_run_gpu(void);
#endif

/* DDIO state of the root port of a device-dax path; "unknown" and why otherwise. */
void pmb_ddio_of_dax(const char *path, char state[16], char port[16], char *why, size_t whylen);

/*
 * SIGBUS guard (fault.c): pmb_fault_install once; then in the thread that
 * touches the region, PMB_GUARD(jb) returns 0 when armed and again non-zero
 * after a SIGBUS in that thread, whose offset in the region pmb_fault_offset
 * gives.  pmb_fault_disarm() before jb goes out of scope.
 */
#include <setjmp.h>
void pmb_fault_install(void);
void pmb_fault_arm(sigjmp_buf *jb);
void pmb_fault_disarm(void);
long long pmb_fault_offset(void);
#define PMB_GUARD(jb) (sigsetjmp(jb, 1) ? 1 : (pmb_fault_arm(&(jb)), 0))
/* The report of a fault at offset off (noreturn). */
void pmb_fault_die(const char *during, long long off) __attribute__((noreturn));

/* The run's description (describe.c): a JSON object, owned by the caller. */
json_object *pmb_describe(const char *started);

/* Output files, opened before measuring (output.c). */
void pmb_out_open(void);
void pmb_write_csv(json_object *desc);
void pmb_write_json(json_object *desc);
void pmb_write_latency_csv(void);
void pmb_out_finish(void);
FILE *pmb_out_svg(void);

void pmb_write_svg(FILE *f);

#endif
