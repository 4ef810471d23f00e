/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ddioctl -- show and switch Intel DDIO on the PCIe root port of a device.
 *
 *   ddioctl status  [DEVICE] [--json]
 *   ddioctl disable DEVICE [--dry-run] [--force] [--json] [--state-file PATH]
 *   ddioctl enable  DEVICE [--dry-run] [--force] [--json] [--state-file PATH]
 *   ddioctl restore [DEVICE] [--dry-run] [--force] [--json] [--state-file PATH]
 *   ddioctl --simulate DIR --platform NAME [--json]
 *
 *   DEVICE: --device BDF | --cuda N | --dax /dev/daxX.Y
 *
 * status is read-only; without a device it lists every root port.  Every
 * change records the register's prior value in the state file first, and
 * restore puts the recorded bits back.  --simulate builds a fake sysfs tree
 * of a named platform to try the others on (--sysfs DIR/sys --dev DIR/dev).
 * With --json every outcome is one JSON document on stdout, errors
 * included: {"error": MESSAGE, "code": N}.  See docs/ddio.md.
 */
#include <errno.h>
#include <getopt.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddio.h"
#include "lib/ddio_sim.h"
#include "lib/json.h"

#define DEFAULT_STATE "/var/lib/pmckpt/ddio.state"

struct opts {
	const char *cmd;
	const char *bdf, *dax, *sysfs, *dev, *state;
	int cuda; /* -1: none */
	int json, dry_run, force;
};

static void
usage(FILE *f)
{
	fprintf(f,
		"usage: ddioctl status  [DEVICE] [--json]\n"
		"       ddioctl disable DEVICE [--dry-run] [--force] [--json] [--state-file PATH]\n"
		"       ddioctl enable  DEVICE [--dry-run] [--force] [--json] [--state-file PATH]\n"
		"       ddioctl restore [DEVICE] [--dry-run] [--force] [--json] [--state-file PATH]\n"
		"       ddioctl --simulate DIR --platform NAME [--json]\n"
		"DEVICE: --device BDF | --cuda N | --dax /dev/daxX.Y (DDIO is set on its PCIe root port)\n"
		"  --dry-run     show the exact configuration write; write nothing\n"
		"  --force       act on root ports that are not verified Intel Xeon IIO ports\n"
		"  --json        JSON output, errors too ({\"error\": ..., \"code\": N})\n"
		"  --state-file  where prior values are kept (default " DEFAULT_STATE ")\n"
		"  --sysfs PATH, --dev PATH   use a sysfs / dev tree other than /sys, /dev (tests)\n"
		"  --simulate DIR --platform NAME   build a fake tree of a platform in DIR (DIR/sys,\n"
		"                DIR/dev) to try ddioctl on: skylake-sp, icelake-sp, amd-epyc, qemu, mixed\n");
}

static int json_mode; /* --json: errors are JSON documents on stdout too */

/*
 * Reports a failure: "ddioctl: WHAT: message" on stderr and, with --json,
 * {"error": "WHAT: message", "code": CODE} on stdout (CODE: the library's
 * negative error code, or the exit status of a usage error).  Returns 1.
 */
static int
fail_msg(const char *what, const char *msg, int code)
{
	char b[1024];

	snprintf(b, sizeof(b), "%s%s%s", what ? what : "", what ? ": " : "", msg);
	fprintf(stderr, "ddioctl: %s\n", b);
	if (json_mode) {
		json_object *o = json_object_new_object();
		json_object_object_add(o, "error", json_object_new_string(b));
		json_object_object_add(o, "code", json_object_new_int(code));
		printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY |
				JSON_C_TO_STRING_SPACED | JSON_C_TO_STRING_NOSLASHESCAPE));
		json_object_put(o);
	}
	return 1;
}

static int
fail(const char *what, int code)
{
	return fail_msg(what, ddio_errormsg(), code);
}

/* A usage error (exit status 2), as JSON too with --json. */
static int
usage_fail(const char *msg)
{
	fail_msg(NULL, msg, 2);
	return 2;
}

static void
print_json(json_object *o)
{
	printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
			JSON_C_TO_STRING_NOSLASHESCAPE));
}

/* Resolves DEVICE to its root port; 0 and *p NULL when no device was named. */
static int
find(struct ddio_ctx *ctx, const struct opts *o, struct ddio_port **p)
{
	*p = NULL;
	if (o->bdf)
		return ddio_port_find(ctx, o->bdf, p);
	if (o->dax)
		return ddio_port_find_dax(ctx, o->dax, p);
	if (o->cuda >= 0)
		return ddio_port_find_cuda(ctx, o->cuda, p);
	return 0;
}

/* ---------------------------------------------------------------- status */

static json_object *
port_json(struct ddio_port *p)
{
	json_object *j = json_object_new_object();
	uint32_t v;
	enum ddio_state st;

	json_object_object_add(j, "dev", json_object_new_string(ddio_port_device_bdf(p)));
	json_object_object_add(j, "root_port", json_object_new_string(ddio_port_bdf(p)));
	json_object_object_add(j, "vendor_id", tool_json_hex(ddio_port_vendor(p), 4));
	json_object_object_add(j, "device_id", tool_json_hex(ddio_port_device(p), 4));
	if (ddio_port_name(p))
		json_object_object_add(j, "name", json_object_new_string(ddio_port_name(p)));
	if (ddio_port_generation(p))
		json_object_object_add(j, "generation", json_object_new_string(ddio_port_generation(p)));
	json_object_object_add(j, "support",
			json_object_new_string(ddio_support_name(ddio_port_support(p))));
	if (ddio_port_read(p, &v, &st)) {
		json_object_object_add(j, "ddio", json_object_new_string("unknown"));
		json_object_object_add(j, "error", json_object_new_string(ddio_errormsg()));
		return j;
	}
	json_object_object_add(j, "perfctrlsts_0", tool_json_hex(v, 8));
	json_object_object_add(j, "use_allocating_flow_wr",
			json_object_new_int(!!(v & DDIO_USE_ALLOCATING_FLOW_WR)));
	json_object_object_add(j, "nosnoopopwren", json_object_new_int(!!(v & DDIO_NOSNOOPOPWREN)));
	json_object_object_add(j, "ddio", json_object_new_string(ddio_state_name(st)));
	return j;
}

static void
port_text(json_object *j)
{
	json_object *f;
#define S(k) (json_object_object_get_ex(j, k, &f) ? json_object_get_string(f) : NULL)
	const char *gen = S("generation"), *name = S("name");
	printf("%s -> root port %s [%s:%s] %s%s%s (%s)\n", S("dev"), S("root_port"),
			S("vendor_id") + 2, S("device_id") + 2, gen ? gen : "unrecognised",
			name ? ", " : "", name ? name : "", S("support"));
	if (S("error"))
		printf("  perfctrlsts_0 unreadable: %s\n", S("error"));
	else
		printf("  perfctrlsts_0 (0x%x) = %s: Use_Allocating_Flow_Wr=%s NoSnoopOpWrEn=%s -> DDIO %s\n",
				DDIO_PERFCTRLSTS_0, S("perfctrlsts_0"), S("use_allocating_flow_wr"),
				S("nosnoopopwren"), S("ddio"));
#undef S
}

static int
collect(struct ddio_port *p, void *arg)
{
	json_object_array_add(arg, port_json(p));
	return 0;
}

/* The CPU's vendor: "intel", "amd" or "unknown" (hints depend on it: DDIO is Intel's). */
static const char *cpu_vendor = "unknown";

static int
count_vendor(struct ddio_port *p, void *arg)
{
	int *n = arg;
	if (ddio_port_vendor(p) == 0x8086)
		n[0]++;
	else if (ddio_port_vendor(p) == 0x1022 || ddio_port_vendor(p) == 0x1d94)
		n[1]++;
	return 0;
}

/*
 * The host's CPU vendor from /proc/cpuinfo; in a tree given by --sysfs (a
 * simulation), from its root ports: Intel if any is Intel's, AMD if any is
 * AMD's (or Hygon's).
 */
static const char *
vendor_of(struct ddio_ctx *ctx, const char *sysfs)
{
	if (!sysfs) {
		char line[256];
		const char *v = "unknown";
		FILE *f = fopen("/proc/cpuinfo", "r");
		while (f && fgets(line, sizeof(line), f))
			if (!strncmp(line, "vendor_id", 9)) {
				v = strstr(line, "GenuineIntel") ? "intel" :
					strstr(line, "AuthenticAMD") || strstr(line, "HygonGenuine") ? "amd" :
					"unknown";
				break;
			}
		if (f)
			fclose(f);
		return v;
	}
	int n[2] = {0, 0};
	ddio_port_foreach(ctx, count_vendor, n);
	return n[0] ? "intel" : n[1] ? "amd" : "unknown";
}

static const char *
msr_reason(int err)
{
	if (!strcmp(cpu_vendor, "amd"))
		return "not applicable: MSR 0xc8b (IIO LLC ways) and DDIO are Intel Xeon features; this is "
			"an AMD CPU, which has neither";
	switch (err) {
	case -ENOENT: case -ENODEV: case -ENXIO:
		return !strcmp(cpu_vendor, "intel") ? "no msr device (modprobe msr)" :
			"no msr device (on an Intel Xeon: modprobe msr; other CPUs have no DDIO)";
	case -EACCES: case -EPERM: return "permission denied (reading MSRs needs root)";
	case -EIO: return "MSR 0xc8b cannot be read (not an Intel Xeon?)";
	default: return strerror(-err);
	}
}

static json_object *
llc_ways_json(struct ddio_ctx *ctx, json_object *top)
{
	struct ddio_llc_ways w[256];
	size_t n;
	json_object *a;

	if (ddio_llc_ways_read(ctx, w, 256, &n)) {
		json_object_object_add(top, "iio_llc_ways_error", json_object_new_string(ddio_errormsg()));
		return NULL;
	}
	a = json_object_new_array();
	for (size_t i = 0; i < n; i++) {
		json_object *e = json_object_new_object();
		char b[24];
		json_object_object_add(e, "package", json_object_new_int(w[i].package));
		json_object_object_add(e, "cpu", json_object_new_int(w[i].cpu));
		json_object_object_add(e, "msr", tool_json_hex(DDIO_MSR_IIO_LLC_WAYS, 3));
		if (w[i].err) {
			json_object_object_add(e, "error", json_object_new_string(msr_reason(w[i].err)));
		} else {
			snprintf(b, sizeof(b), "0x%llx", (unsigned long long)w[i].value);
			json_object_object_add(e, "value", json_object_new_string(b));
			json_object_object_add(e, "ways", json_object_new_int((int)w[i].ways));
		}
		json_object_array_add(a, e);
	}
	json_object_object_add(top, "iio_llc_ways", a);
	return a;
}

static int
cmd_status(struct ddio_ctx *ctx, const struct opts *o)
{
	json_object *top = json_object_new_object(), *ports = json_object_new_array(), *f;
	struct ddio_port *p;
	int ret = find(ctx, o, &p);

	if (ret) {
		fail("status", ret);
		json_object_put(top);
		json_object_put(ports);
		return 1;
	}
	if (p) {
		json_object_array_add(ports, port_json(p));
		ddio_port_delete(&p);
	} else if ((ret = ddio_port_foreach(ctx, collect, ports))) {
		fail("listing root ports", ret);
		json_object_put(top);
		json_object_put(ports);
		return 1;
	}
	json_object_object_add(top, "root_ports", ports);
	json_object_object_add(top, "cpu_vendor", json_object_new_string(cpu_vendor));
	if (!strcmp(cpu_vendor, "amd"))
		json_object_object_add(top, "note", json_object_new_string(
				"DDIO is an Intel Xeon feature: on this AMD CPU there is no DDIO to read or "
				"switch, and ddioctl's results do not apply"));
	json_object *ways = llc_ways_json(ctx, top);
	if (o->json) {
		print_json(top);
	} else {
		size_t n = json_object_array_length(ports);
		if (json_object_object_get_ex(top, "note", &f))
			printf("note: %s\n", json_object_get_string(f));
		if (!n)
			printf("no PCIe root ports found\n");
		for (size_t i = 0; i < n; i++)
			port_text(json_object_array_get_idx(ports, i));
		if (!ways) {
			json_object_object_get_ex(top, "iio_llc_ways_error", &f);
			printf("IIO LLC ways (MSR 0xc8b): %s\n", json_object_get_string(f));
		}
		for (size_t i = 0; ways && i < json_object_array_length(ways); i++) {
			json_object *e = json_object_array_get_idx(ways, i), *v, *g;
			json_object_object_get_ex(e, "package", &g);
			if (json_object_object_get_ex(e, "error", &v)) {
				printf("IIO LLC ways (MSR 0xc8b), package %d: %s\n", json_object_get_int(g),
						json_object_get_string(v));
			} else {
				json_object *w;
				json_object_object_get_ex(e, "value", &v);
				json_object_object_get_ex(e, "ways", &w);
				printf("IIO LLC ways (MSR 0xc8b), package %d: %s (%d ways)\n",
						json_object_get_int(g), json_object_get_string(v),
						json_object_get_int(w));
			}
		}
	}
	json_object_put(top);
	return 0;
}

/* --------------------------------------------------------------- changes */

/* Reports one change (done or, with --dry-run, planned). */
static json_object *
change_json(const char *action, struct ddio_port *p, const struct ddio_change *c,
		const struct opts *o, int written)
{
	json_object *j = json_object_new_object();
	char setpci[96];

	snprintf(setpci, sizeof(setpci), "setpci -s %s %x.L=%08x", c->port, c->offset, c->after);
	json_object_object_add(j, "dev", json_object_new_string(ddio_port_device_bdf(p)));
	json_object_object_add(j, "root_port", json_object_new_string(c->port));
	json_object_object_add(j, "action", json_object_new_string(action));
	json_object_object_add(j, "offset", tool_json_hex(c->offset, 3));
	json_object_object_add(j, "before", tool_json_hex(c->before, 8));
	json_object_object_add(j, "after", tool_json_hex(c->after, 8));
	json_object_object_add(j, "ddio_before", json_object_new_string(ddio_state_name(ddio_state_of(c->before))));
	json_object_object_add(j, "ddio_after", json_object_new_string(ddio_state_name(ddio_state_of(c->after))));
	json_object_object_add(j, "dry_run", json_object_new_boolean(o->dry_run));
	json_object_object_add(j, "written", json_object_new_boolean(written));
	json_object_object_add(j, "state_file", json_object_new_string(o->state));
	if (c->before != c->after)
		json_object_object_add(j, "setpci", json_object_new_string(setpci));
	if (!o->json) {
		if (c->before == c->after)
			printf("%s: root port %s: perfctrlsts_0 is already 0x%08x (DDIO %s); nothing to write\n",
					action, c->port, c->before, ddio_state_name(ddio_state_of(c->before)));
		else if (!written)
			printf("%s: dry run: would write 0x%08x to config offset 0x%x (perfctrlsts_0) of "
					"root port %s, now 0x%08x (DDIO %s -> %s); as a command: %s\n",
					action, c->after, c->offset, c->port, c->before,
					ddio_state_name(ddio_state_of(c->before)),
					ddio_state_name(ddio_state_of(c->after)), setpci);
		else
			printf("%s: root port %s: perfctrlsts_0 0x%08x -> 0x%08x, DDIO %s -> %s "
					"(%s %s)\n", action, c->port, c->before, c->after,
					ddio_state_name(ddio_state_of(c->before)),
					ddio_state_name(ddio_state_of(c->after)),
					strcmp(action, "restore") ? "prior value kept in" : "record removed from",
					o->state);
	}
	return j;
}

static int
cmd_change(struct ddio_ctx *ctx, const struct opts *o, int enable)
{
	const char *action = enable ? "enable" : "disable";
	unsigned flags = o->force ? DDIO_FORCE : 0;
	struct ddio_port *p;
	struct ddio_change c;
	json_object *top, *arr;
	int written = 0, ret;

	if ((ret = find(ctx, o, &p))) {
		fail(action, ret);
		return 1;
	}
	if ((ret = ddio_port_plan(p, enable, flags, &c))) {
		fail(action, ret);
		ddio_port_delete(&p);
		return 1;
	}
	if (!o->dry_run && c.before != c.after) {
		/* Refuse before recording anything, then make the record durable, then write. */
		if ((ret = ddio_port_check_write(p)) || (ret = ddio_state_record(o->state, p, &c)) ||
		    (ret = ddio_port_apply(p, &c, flags))) {
			fail(action, ret);
			ddio_port_delete(&p);
			return 1;
		}
		written = 1;
	}
	top = json_object_new_object();
	arr = json_object_new_array();
	json_object_array_add(arr, change_json(action, p, &c, o, written));
	json_object_object_add(top, "changes", arr);
	if (o->json)
		print_json(top);
	else if (o->dry_run && c.before != c.after)
		printf("%s: dry run: would first record 0x%08x for %s in %s; %s\n", action, c.before,
				c.port, o->state, ddio_port_check_write(p) ?
				ddio_errormsg() : "this process may write the register");
	json_object_put(top);
	ddio_port_delete(&p);
	return 0;
}

/* One port's restore failed: on stderr, and with --json as an entry of the changes. */
static void
restore_error(json_object *arr, const char *port, int code)
{
	fprintf(stderr, "ddioctl: restore %s: %s\n", port, ddio_errormsg());
	if (json_mode) {
		json_object *e = json_object_new_object();
		json_object_object_add(e, "root_port", json_object_new_string(port));
		json_object_object_add(e, "action", json_object_new_string("restore"));
		json_object_object_add(e, "error", json_object_new_string(ddio_errormsg()));
		json_object_object_add(e, "code", json_object_new_int(code));
		json_object_array_add(arr, e);
	}
}

static int
cmd_restore(struct ddio_ctx *ctx, const struct opts *o)
{
	struct ddio_saved *s;
	struct ddio_port *only;
	size_t n;
	int ret, failed = 0, done = 0;
	json_object *top, *arr;

	if ((ret = find(ctx, o, &only))) {
		fail("restore", ret);
		return 1;
	}
	ret = ddio_state_load(o->state, &s, &n);
	if (ret == -ENOENT) {
		if (o->json)
			printf("{ \"changes\": [ ] }\n");
		else
			printf("restore: %s\n", ddio_errormsg());
		ddio_port_delete(&only);
		return 0;
	}
	if (ret) {
		fail("restore", ret);
		ddio_port_delete(&only);
		return 1;
	}
	top = json_object_new_object();
	arr = json_object_new_array();
	for (size_t i = 0; i < n; i++) {
		struct ddio_port *p;
		struct ddio_change c;
		int written = 0;

		if (only && strcmp(s[i].port, ddio_port_bdf(only)) != 0)
			continue;
		done++;
		/* The record proves this port was changed; its identity is checked by the plan. */
		if ((ret = ddio_port_find(ctx, s[i].port, &p))) {
			restore_error(arr, s[i].port, ret);
			failed = 1;
			continue;
		}
		if ((ret = ddio_port_plan_restore(p, &s[i], o->force ? DDIO_FORCE : 0, &c))) {
			restore_error(arr, s[i].port, ret);
			failed = 1;
			ddio_port_delete(&p);
			continue;
		}
		if (!o->dry_run) {
			if ((ret = ddio_port_apply(p, &c, DDIO_FORCE)) ||
			    (ret = ddio_state_forget(o->state, s[i].port))) {
				restore_error(arr, s[i].port, ret);
				failed = 1;
				ddio_port_delete(&p);
				continue;
			}
			written = c.before != c.after;
		}
		json_object_array_add(arr, change_json("restore", p, &c, o, written));
		ddio_port_delete(&p);
	}
	if (only && !done && !o->json)
		printf("restore: %s has no record in %s\n", ddio_port_bdf(only), o->state);
	json_object_object_add(top, "changes", arr);
	if (failed)
		json_object_object_add(top, "error", json_object_new_string(
				"one or more root ports could not be restored (see changes)"));
	if (o->json)
		print_json(top);
	json_object_put(top);
	free(s);
	ddio_port_delete(&only);
	return failed;
}

/* ------------------------------------------------------------ simulate */

/* Builds DIR/sys and DIR/dev of a named platform (tools/lib/ddio_sim.c). */
static int
cmd_simulate(const char *dir, const char *platform)
{
	char sys[1024], dev[1024], msg[1200];

	if (!tool_ddio_sim_devices(platform, &(size_t){0})) {
		snprintf(msg, sizeof(msg), "--platform '%s': unknown; platforms: %s", platform,
				tool_ddio_sim_platforms());
		return usage_fail(msg);
	}
	if (tool_ddio_sim_build(dir, platform)) {
		int e = errno;
		snprintf(msg, sizeof(msg), "--simulate %s: %s%s", dir, strerror(e),
				e == EEXIST ? " (it already holds a sys/ tree)" : "");
		return fail_msg(NULL, msg, -e);
	}
	snprintf(sys, sizeof(sys), "%s/sys", dir);
	snprintf(dev, sizeof(dev), "%s/dev", dir);
	if (json_mode) {
		json_object *o = json_object_new_object();
		json_object_object_add(o, "platform", json_object_new_string(platform));
		json_object_object_add(o, "sysfs", json_object_new_string(sys));
		json_object_object_add(o, "dev", json_object_new_string(dev));
		print_json(o);
		json_object_put(o);
	} else {
		printf("simulated %s platform in %s; try:\n  ddioctl status --sysfs %s --dev %s\n",
				platform, dir, sys, dev);
	}
	return 0;
}

int
main(int argc, char **argv)
{
	static const struct option lo[] = {
		{"device", required_argument, NULL, 'd'}, {"cuda", required_argument, NULL, 'c'},
		{"dax", required_argument, NULL, 'x'}, {"json", no_argument, NULL, 'j'},
		{"dry-run", no_argument, NULL, 'n'}, {"force", no_argument, NULL, 'f'},
		{"state-file", required_argument, NULL, 's'}, {"sysfs", required_argument, NULL, 'S'},
		{"dev", required_argument, NULL, 'D'}, {"simulate", required_argument, NULL, 'M'},
		{"platform", required_argument, NULL, 'P'}, {"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct opts o = {.cuda = -1, .state = DEFAULT_STATE};
	struct ddio_ctx *ctx;
	const char *simulate = NULL, *platform = NULL;
	char msg[256];
	int c, named = 0, ret;

	/* --json anywhere on the line: even a usage error is a JSON document then. */
	for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
		if (!strcmp(argv[i], "--json"))
			json_mode = 1;
	opterr = !json_mode;
	while ((c = getopt_long(argc, argv, "d:c:x:jnfs:h", lo, NULL)) != -1) {
		switch (c) {
		case 'd': o.bdf = optarg; named++; break;
		case 'x': o.dax = optarg; named++; break;
		case 'c': {
			char *end;
			long v = strtol(optarg, &end, 10);
			if (*optarg == '\0' || *end || v < 0 || v > 1023)
				return usage_fail("--cuda takes a CUDA device number (0 .. 1023)");
			o.cuda = (int)v;
			named++;
			break;
		}
		case 'j': o.json = 1; break;
		case 'n': o.dry_run = 1; break;
		case 'f': o.force = 1; break;
		case 's': o.state = optarg; break;
		case 'S': o.sysfs = optarg; break;
		case 'D': o.dev = optarg; break;
		case 'M': simulate = optarg; break;
		case 'P': platform = optarg; break;
		case 'h': usage(stdout); return 0;
		default:
			if (json_mode)
				return usage_fail("unknown option or missing argument (ddioctl --help)");
			usage(stderr);
			return 2;
		}
	}
	if (simulate || platform) {
		if (!simulate || !platform || optind != argc) {
			snprintf(msg, sizeof(msg), "--simulate DIR --platform NAME, nothing else (platforms: %s)",
					tool_ddio_sim_platforms());
			return usage_fail(msg);
		}
		return cmd_simulate(simulate, platform);
	}
	if (optind != argc - 1 || named > 1) {
		if (json_mode)
			return usage_fail(optind == argc ? "name a command: status, disable, enable, restore" :
					named > 1 ? "name one device" : "one command at a time");
		usage(stderr);
		return 2;
	}
	o.cmd = argv[optind];
	if (strcmp(o.cmd, "status") && strcmp(o.cmd, "disable") && strcmp(o.cmd, "enable") &&
	    strcmp(o.cmd, "restore")) {
		snprintf(msg, sizeof(msg), "unknown command '%s' (status, disable, enable, restore)", o.cmd);
		if (json_mode)
			return usage_fail(msg);
		fprintf(stderr, "ddioctl: unknown command '%s'\n", o.cmd);
		usage(stderr);
		return 2;
	}
	if (!named && (!strcmp(o.cmd, "disable") || !strcmp(o.cmd, "enable"))) {
		snprintf(msg, sizeof(msg), "%s: name a device (--device BDF, --cuda N or --dax /dev/daxX.Y)",
				o.cmd);
		return usage_fail(msg);
	}
	if ((ret = ddio_ctx_new(o.sysfs, o.dev, &ctx)))
		return fail(NULL, ret);
	cpu_vendor = vendor_of(ctx, o.sysfs);
	if (!strcmp(o.cmd, "status"))
		ret = cmd_status(ctx, &o);
	else if (!strcmp(o.cmd, "restore"))
		ret = cmd_restore(ctx, &o);
	else
		ret = cmd_change(ctx, &o, !strcmp(o.cmd, "enable"));
	ddio_ctx_delete(&ctx);
	return ret;
}
