/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * describe.c -- what a result needs to be read later: the machine (CPU
 * model, microcode, kernel), the versions (pmbench, libpmem2), where the
 * region and the threads were (NUMA), the command line and every
 * parameter, including the lists of methods, layouts and alignments run.
 */
#include <numa.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "pmalloc.h"
#include "pmbench.h"
#include "lib/toolutil.h"

#ifndef PMCK_VERSION
#define PMCK_VERSION "unknown"
#endif
#ifndef PMBENCH_PMEM2_VERSION
#define PMBENCH_PMEM2_VERSION "unknown"
#endif

/* The value of the first "key : value" line of /proc/cpuinfo; "unknown" if none. */
static json_object *
cpuinfo(const char *key)
{
	char line[512], val[256] = "unknown";
	FILE *f = fopen("/proc/cpuinfo", "r");
	size_t kl = strlen(key);

	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, key, kl) && (line[kl] == ' ' || line[kl] == '\t' || line[kl] == ':')) {
			char *v = strchr(line, ':');
			if (!v)
				continue;
			for (v++; *v == ' '; v++)
				;
			v[strcspn(v, "\n")] = '\0';
			snprintf(val, sizeof(val), "%s", v);
			break;
		}
	if (f)
		fclose(f);
	return json_object_new_string(val);
}

static json_object *
size_list(const struct pmb_list *l)
{
	json_object *a = json_object_new_array();
	for (int i = 0; i < l->n; i++)
		json_object_array_add(a, json_object_new_int64((int64_t)l->v[i]));
	return a;
}

static json_object *
name_list(const int *v, int n, const char *const *names)
{
	json_object *a = json_object_new_array();
	for (int i = 0; i < n; i++)
		json_object_array_add(a, json_object_new_string(names[v[i]]));
	return a;
}

/* The command line as a shell would take it back: words with odd characters single-quoted. */
static json_object *
command_line(void)
{
	char buf[4096] = "";
	size_t len = 0;

	for (int i = 0; i < opt.argc && len < sizeof(buf) - 8; i++) {
		const char *a = opt.argv[i];
		int plain = *a && strspn(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
				"0123456789-_./,=+:@%") == strlen(a);
		len += (size_t)snprintf(buf + len, sizeof(buf) - len, "%s%s", i ? " " : "",
				plain ? "" : "'");
		for (; *a && len < sizeof(buf) - 8; a++)
			len += (size_t)(*a == '\'' ? snprintf(buf + len, sizeof(buf) - len, "'\\''") :
					snprintf(buf + len, sizeof(buf) - len, "%c", *a));
		if (!plain)
			len += (size_t)snprintf(buf + len, sizeof(buf) - len, "'");
	}
	return json_object_new_string(buf);
}

json_object *
pmb_describe(const char *started)
{
	json_object *top = json_object_new_object(), *o, *a;
	struct utsname u;
	char host[256] = "", b[32];

	json_object_object_add(top, "tool", json_object_new_string("pmbench"));
	json_object_object_add(top, "format_version", json_object_new_int(2));
	json_object_object_add(top, "started", json_object_new_string(started));
	json_object_object_add(top, "command_line", command_line());

	gethostname(host, sizeof(host) - 1);
	o = json_object_new_object();
	json_object_object_add(o, "hostname", json_object_new_string(host));
	json_object_object_add(o, "cpu_model", cpuinfo("model name"));
	json_object_object_add(o, "microcode", cpuinfo("microcode"));
	json_object_object_add(o, "cpus", json_object_new_int((int)sysconf(_SC_NPROCESSORS_ONLN)));
	json_object_object_add(o, "numa_nodes",
			json_object_new_int(numa_available() >= 0 ? numa_max_node() + 1 : 1));
	if (uname(&u) == 0) {
		char k[400];
		tool_fmt(k, sizeof(k), "%s %s %s %s", u.sysname, u.release, u.version, u.machine);
		json_object_object_add(o, "kernel", json_object_new_string(k));
	}
	json_object_object_add(top, "host", o);

	o = json_object_new_object();
	json_object_object_add(o, "pmbench", json_object_new_string(PMCK_VERSION));
	json_object_object_add(o, "libpmem2", json_object_new_string(PMBENCH_PMEM2_VERSION));
	json_object_object_add(top, "versions", o);

	/* Where memory and threads were: the region's node, the nodes threads ran on, their CPUs. */
	o = json_object_new_object();
	json_object_object_add(o, "region_node", json_object_new_int(region_node));
	json_object_object_add(o, "thread_nodes", size_list(&opt.nodes));
	json_object_object_add(o, "threads_bound", json_object_new_boolean(numa_available() >= 0));
	a = json_object_new_object();
	for (int n = 0; numa_available() >= 0 && n <= numa_max_node(); n++) {
		struct bitmask *m = numa_allocate_cpumask();
		char list[512] = "";
		size_t len = 0;
		if (numa_node_to_cpus(n, m) == 0)
			for (unsigned c = 0; c < m->size && len < sizeof(list) - 12; c++)
				if (numa_bitmask_isbitset(m, c))
					len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%u",
							len ? "," : "", c);
		numa_free_cpumask(m);
		snprintf(b, sizeof(b), "%d", n);
		json_object_object_add(a, b, json_object_new_string(list));
	}
	json_object_object_add(o, "node_cpus", a);
	json_object_object_add(top, "numa", o);

	o = json_object_new_object();
	json_object_object_add(o, "region_arg", json_object_new_string(opt.region ? opt.region : ""));
	json_object_object_add(o, "region_size_created", json_object_new_int64((int64_t)opt.region_size));
	json_object_object_add(o, "out", json_object_new_string(opt.out));
	json_object_object_add(o, "time_ms", json_object_new_int((int)opt.time_ms));
	json_object_object_add(o, "repeat", json_object_new_int((int)opt.repeat));
	json_object_object_add(o, "warmup_ms", json_object_new_double(opt.time_ms / 4.0));
	json_object_object_add(o, "sizes", size_list(&opt.sizes));
	json_object_object_add(o, "threads", size_list(&opt.threads));
	json_object_object_add(o, "nodes", size_list(&opt.nodes));
	json_object_object_add(o, "methods", name_list(opt.methods, opt.nmethods, pmb_method_names));
	json_object_object_add(o, "layouts", name_list(opt.layouts, opt.nlayouts, pmb_layout_names));
	a = json_object_new_array();
	for (int i = 0; i < opt.naligns; i++) {
		char n[24];
		json_object_array_add(a, json_object_new_string(pmb_align_name(&opt.aligns[i], n, sizeof(n))));
	}
	json_object_object_add(o, "aligns", a);
	json_object_object_add(o, "read", json_object_new_boolean(opt.read));
	json_object_object_add(o, "read_methods", opt.read ?
			name_list(opt.rmethods, opt.nrmethods, pmb_method_names) : json_object_new_array());
	json_object_object_add(o, "latency", json_object_new_boolean(opt.latency));
	json_object_object_add(o, "lat_sizes", size_list(&opt.lat_sizes));
	json_object_object_add(o, "gpu", json_object_new_boolean(opt.gpu));
	json_object_object_add(o, "gpu_sizes", size_list(&opt.gpu_sizes));
	json_object_object_add(o, "gpu_hash", name_list(opt.gpu_hashes, opt.ngpu_hashes,
			pmb_gpu_hash_names));
	json_object_object_add(o, "gpu_threads", json_object_new_int((int)opt.gpu_threads));
	/* $PMCK_GPU_HASH overrides gpu_hash in the library (gpu.c runs only its hashing) */
	const char *hash_env = getenv("PMCK_GPU_HASH");
	json_object_object_add(o, "gpu_hash_env", hash_env && *hash_env ?
			json_object_new_string(hash_env) : NULL);
	json_object_object_add(o, "prewrite", json_object_new_boolean(opt.prewrite));
	json_object_object_add(o, "overwrite", json_object_new_boolean(opt.overwrite));
	json_object_object_add(o, "meta_record_bytes", json_object_new_int(META));
	json_object_object_add(o, "dict_record_bytes", json_object_new_int(DICT_REC));
	json_object_object_add(o, "meta_area_bytes", json_object_new_int(META_AREA));
	json_object_object_add(o, "reference_block_bytes", json_object_new_int64((int64_t)ref_size));
	json_object_object_add(top, "params", o);
	return top;
}
