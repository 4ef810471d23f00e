/*
 * pmctl_nohw.c -- a machine without NVDIMMs: every library call and every
 * pmctl command says so clearly; listing succeeds, changes fail, nothing
 * crashes.  Also pmctl's argument checking, and planning against a
 * described node (--state) from the command line.  Skipped on a machine
 * that has NVDIMM regions (the VM test covers that).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/wait.h>

#include "pmalloc_ns.h"
#include "tap.h"

static char pmctl[512];
static char out[16384];

/* Runs pmctl with args (NULL-terminated); stdout+stderr in out; the exit status or -1. */
static int
run(const char *const *args)
{
	const char *argv[32];
	int fds[2];
	size_t n = 0;

	argv[0] = pmctl;
	for (size_t i = 0; args[i] && i < 30; i++)
		argv[i + 1] = args[i];
	for (n = 0; args[n]; n++)
		;
	argv[n + 1] = NULL;
	if (pipe(fds))
		return -1;
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		dup2(fds[1], 1);
		dup2(fds[1], 2);
		close(fds[0]);
		execv(pmctl, (char *const *)argv);
		_exit(127);
	}
	close(fds[1]);
	size_t len = 0;
	ssize_t r;
	while ((r = read(fds[0], out + len, sizeof(out) - 1 - len)) > 0)
		len += (size_t)r;
	out[len] = '\0';
	close(fds[0]);
	int status;
	waitpid(pid, &status, 0);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return WEXITSTATUS(status);
}

#define RUN(...) run((const char *const[]){__VA_ARGS__, NULL})

/* ok() on a condition about the last output, which is shown (as comments) on failure. */
static void
about_out(int cond, const char *what)
{
	if (ok(cond, "%s", what))
		return;
	for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n"))
		diag("  %s", line);
}

static void
library(void)
{
	struct pma_ns_state *s = NULL;
	struct pma_region *r = NULL;
	char path[64];
	int node;

	is_int(pma_ns_state_read(&s), 0, "reading the state succeeds without NVDIMMs");
	ok(s && pma_ns_state_nregions(s) == 0 && pma_ns_state_absent_reason(s),
			"no regions, and why: %s", s ? pma_ns_state_absent_reason(s) : "");
	char *json = NULL;
	ok(s && pma_ns_state_to_json(s, 0, &json) == 0 && strstr(json, "\"buses\":["),
			"an empty listing as JSON");
	free(json);
	pma_ns_state_free(&s);
	is_int(pma_ns_dax_path("ckpt0", -1, path, sizeof(path)), -ENODEV,
			"resolving a name: -ENODEV (%s)", pma_errormsg());
	is_int(pma_ns_region_open("ckpt0", 0, 0, &r), -ENODEV, "opening by name: -ENODEV");
	ok(r == NULL, "no region");
	is_int(pma_ns_region_open("ckpt0", 0, PMA_REGION_CREATE, &r), -EINVAL,
			"CREATE makes no sense for a dax device: -EINVAL");
	is_int(pma_ns_destroy("ckpt0", 0), -ENODEV, "destroy: -ENODEV (%s)", pma_errormsg());
	is_int(pma_ns_destroy(NULL, 0), -EINVAL, "destroy NULL: -EINVAL");
	struct pma_prov_ns ns = {.name = "ckpt0", .numa_node = -1};
	is_int(pma_ns_create(&ns, 0, path, sizeof(path)), -ENODEV, "create: -ENODEV (%s)",
			pma_errormsg());
	is_int(pma_ns_create(NULL, 0, NULL, 0), -EINVAL, "create NULL: -EINVAL");
	is_int(pma_ns_reconfigure("namespace0.0", 0, NULL, 0, NULL, 0), -ENODEV,
			"reconfigure: -ENODEV");
	is_int(pma_ns_pci_numa_node("bogus", &node), -EINVAL, "a malformed PCI address: -EINVAL");
	is_int(pma_ns_pci_numa_node("0000:17:00.9", &node), -EINVAL, "function 9: -EINVAL");
	is_int(pma_ns_pci_numa_node("ffff:ff:1f.7", &node), -ENODEV, "an absent device: -ENODEV");
	is_int(pma_ns_gpu_numa_node(-1, &node, NULL), -EINVAL, "GPU -1: -EINVAL");
	is_int(pma_ns_gpu_numa_node(4000, &node, NULL), -ENODEV, "GPU 4000: -ENODEV (%s)",
			pma_errormsg());
	/* Any PCI device's node reads back as sysfs has it. */
	FILE *f = popen("ls /sys/bus/pci/devices 2>/dev/null | head -1", "r");
	char bdf[64] = "";
	if (f && fgets(bdf, sizeof(bdf), f))
		bdf[strcspn(bdf, "\n")] = '\0';
	if (f)
		pclose(f);
	if (bdf[0]) {
		char sys[160];
		int want = -1;
		snprintf(sys, sizeof(sys), "/sys/bus/pci/devices/%s/numa_node", bdf);
		FILE *g = fopen(sys, "r");
		if (g) {
			if (fscanf(g, "%d", &want) != 1)
				want = -1;
			fclose(g);
		}
		node = -7;
		is_int(pma_ns_pci_numa_node(bdf, &node), 0, "PCI device %s", bdf);
		is_int(node, want < 0 ? -1 : want, "its node as sysfs says");
	}
}

static void
cli(void)
{
	char st[512], conf[512];
	int fd;

	snprintf(st, sizeof(st), "%s", scratch_path("pmctl-state"));
	snprintf(conf, sizeof(conf), "%s", scratch_path("pmctl-conf"));

	is_int(RUN("list"), 0, "pmctl list succeeds");
	about_out(strstr(out, "no NVDIMM") || strstr(out, "no persistent memory"), "and says why");
	is_int(RUN("list", "--json"), 0, "pmctl list --json succeeds");
	about_out(strstr(out, "\"buses\":[") != NULL, "an empty listing");
	is_int(RUN("list", "--dax", "--json"), 0, "pmctl list --dax --json succeeds");
	is_int(RUN("provision", "--name", "ckpt0", "--size", "1G"), 1, "provision fails");
	about_out(strstr(out, "nothing changed") && strstr(out, "no NVDIMM"), "and says so");
	is_int(RUN("create", "--name", "ckpt0"), 1, "create fails");
	is_int(RUN("destroy", "ckpt0"), 1, "destroy fails");
	about_out(strstr(out, "no NVDIMM") != NULL, "and says so");
	is_int(RUN("destroy", "--force", "ckpt0"), 1, "destroy --force fails too");
	is_int(RUN("reconfigure", "namespace0.0"), 1, "reconfigure fails");
	is_int(RUN("path", "ckpt0"), 1, "path fails");
	about_out(strstr(out, "no NVDIMM") != NULL, "and says why");

	/* Usage errors: exit 2. */
	is_int(run((const char *const[]){NULL}), 2, "no command: 2");
	is_int(RUN("frobnicate"), 2, "an unknown command: 2");
	is_int(RUN("list", "--bogus"), 2, "an unknown option: 2");
	is_int(RUN("provision"), 2, "provision without a description: 2");
	is_int(RUN("create", "--size", "1G"), 2, "create without --name: 2");
	is_int(RUN("create", "--name", "a", "--dev", "namespace0.0"), 2, "create --dev: 2");
	is_int(RUN("destroy"), 2, "destroy without a namespace: 2");
	is_int(RUN("path", "a", "--numa", "0", "--gpu", "0"), 2, "path with two node options: 2");
	is_int(RUN("path", "a", "--numa", "x"), 2, "path --numa x: 2");
	is_int(RUN("reconfigure", "a", "--align", "huge"), 2, "reconfigure --align huge: 2");
	is_int(RUN("help"), 0, "help: 0");
	about_out(strstr(out, "provision") != NULL, "help lists the commands");
	is_int(RUN("provision", "--name", "bad/name"), 1, "a bad name: 1");
	about_out(strstr(out, "bad namespace name") != NULL, "explained");
	is_int(RUN("provision", "--config", "/nonexistent/prov.conf"), 1, "a missing config: 1");

	/* Planning against a described node from the command line. */
	static const char node[] =
		"{\"buses\":[{\"dev\":\"ndbus0\",\"regions\":[{\"dev\":\"region0\","
		"\"size\":1073610752,\"align\":16777216,\"available_size\":1056964608,"
		"\"max_available_extent\":1056964608,\"numa_node\":0,\"namespaces\":[{"
		"\"dev\":\"namespace0.0\",\"mode\":\"devdax\",\"size\":520093696,\"name\":\"ckpt0\","
		"\"align\":2097152,\"chardev\":\"dax0.0\"}]}]}]}";
	fd = open(st, O_CREAT | O_TRUNC | O_WRONLY, 0600);
	ok(fd >= 0 && write(fd, node, strlen(node)) == (ssize_t)strlen(node), "a described node");
	close(fd);
	fd = open(conf, O_CREAT | O_TRUNC | O_WRONLY, 0600);
	static const char text[] = "namespace ckpt0 size=496M\nnamespace ckpt1 size=496M\n";
	ok(fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text), "a config file");
	close(fd);
	is_int(RUN("provision", "--config", conf, "--state", st), 0, "provision --state plans");
	about_out(strstr(out, "ckpt1: create") && strstr(out, "[ok] ckpt0") &&
			strstr(out, "1 change planned (dry run"), "keep ckpt0, create ckpt1, dry run");
	is_int(RUN("provision", "--ns", "ckpt0 size=496M", "--state", st), 0,
			"only what exists");
	about_out(strstr(out, "nothing to do") != NULL, "nothing to do");
	is_int(RUN("provision", "--ns", "ckpt0 size=992M", "--state", st, "--json"), 1,
			"a conflict fails");
	about_out(strstr(out, "resize") != NULL, "and explains");
	is_int(RUN("provision", "--config", conf, "--state", st, "--json"), 0, "JSON plan");
	about_out(strstr(out, "\"changes\":1") != NULL, "one change in JSON");
	is_int(RUN("list", "--state", st), 0, "list --state");
	about_out(strstr(out, "namespace0.0") && strstr(out, "ckpt0"), "shows the described node");
	is_int(RUN("path", "ckpt0", "--state", st), 0, "path --state");
	about_out(strcmp(out, "/dev/dax0.0\n") == 0, "prints /dev/dax0.0");
	is_int(RUN("path", "ckpt0", "--numa", "1", "--state", st), 1, "not on node 1");
	unlink(st);
	unlink(conf);
}

int
main(void)
{
	struct pma_ns_state *s = NULL;
	const char *b = getenv("BUILD");

	if (pma_ns_state_read(&s) == 0 && pma_ns_state_nregions(s) > 0) {
		pma_ns_state_free(&s);
		skip_all("this machine has NVDIMM regions (the no-NVDIMM paths need none)");
	}
	pma_ns_state_free(&s);
	snprintf(pmctl, sizeof(pmctl), "%s/pmctl", b ? b : "build");
	library();
	if (access(pmctl, X_OK) == 0)
		cli();
	else
		diag("%s not built: command-line checks skipped", pmctl);
	return done_testing();
}
