/* ddio_topology.c -- libddio finds the PCIe root port a device hangs off (fake sysfs tree). */
#include <errno.h>

#include "ddio.h"
#include "ddio_fake.h"
#include "tap.h"

static struct ddio_ctx *ctx;

/* Finds the root port of bdf; checks the port and its support level. */
static void
expect_port(const char *bdf, const char *root, enum ddio_support support, const char *gen)
{
	struct ddio_port *p = NULL;
	int ret = ddio_port_find(ctx, bdf, &p);

	if (!ok(ret == 0 && p, "%s: found a root port", bdf)) {
		diag("  %d: %s", ret, ddio_errormsg());
		return;
	}
	ok(strcmp(ddio_port_bdf(p), root) == 0, "%s hangs off %s (got %s)", bdf, root, ddio_port_bdf(p));
	ok(ddio_port_support(p) == support, "%s is %s (got %s)", root, ddio_support_name(support),
			ddio_support_name(ddio_port_support(p)));
	ok(gen ? ddio_port_generation(p) && strcmp(ddio_port_generation(p), gen) == 0 :
			ddio_port_generation(p) == NULL,
			"%s generation %s", root, gen ? gen : "(none)");
	ddio_port_delete(&p);
	ok(p == NULL, "delete clears the pointer");
}

static int
count_port(struct ddio_port *p, void *arg)
{
	char *list = arg;

	strcat(list, ddio_port_bdf(p));
	strcat(list, " ");
	return 0;
}

int
main(void)
{
	struct ddio_port *p = NULL;
	char list[512] = "", path[700], bdf[32];

	if (fake_build()) {
		diag("cannot build the fake tree: %s", strerror(errno));
		fake_remove();
		return 1;
	}
	is_int(ddio_ctx_new("/nonexistent-sysfs", NULL, &ctx), -ENOENT, "a tree without bus/pci is -ENOENT");
	is_int(ddio_ctx_new(fake_sysfs, fake_dev, &ctx), 0, "context on the fake tree");

	expect_port("0000:01:00.0", "0000:00:01.0", DDIO_SUPPORT_VERIFIED, "Skylake-SP/Cascade Lake");
	expect_port("01:00.0", "0000:00:01.0", DDIO_SUPPORT_VERIFIED, "Skylake-SP/Cascade Lake");
	expect_port("0000:00:01.0", "0000:00:01.0", DDIO_SUPPORT_VERIFIED, "Skylake-SP/Cascade Lake");
	expect_port("0000:04:00.0", "0000:00:02.0", DDIO_SUPPORT_VERIFIED, "Skylake-SP/Cascade Lake");
	expect_port("0000:41:00.0", "0000:40:01.1", DDIO_SUPPORT_UNKNOWN, NULL);
	expect_port("0000:81:00.0", "0000:80:02.0", DDIO_SUPPORT_UNVERIFIED, "Ice Lake-SP");
	expect_port("0000:c1:00.0", "0000:c0:01.0", DDIO_SUPPORT_UNKNOWN, NULL);
	expect_port("0000:00:1c.0", "0000:00:1c.0", DDIO_SUPPORT_UNKNOWN, NULL);

	is_int(ddio_port_find(ctx, "0000:00:00.0", &p), DDIO_E_NO_ROOT_PORT,
			"a host bridge device on the root bus has no root port");
	ok(strstr(ddio_errormsg(), "integrated") != NULL, "  and says why: %s", ddio_errormsg());
	is_int(ddio_port_find(ctx, "0000:00:1f.0", &p), DDIO_E_NO_ROOT_PORT,
			"an integrated ISA bridge has no root port");
	is_int(ddio_port_find(ctx, "0000:00:09.0", &p), -ENOENT, "a missing device is -ENOENT");
	is_int(ddio_port_find(ctx, "zz:00.0", &p), -EINVAL, "a malformed address is -EINVAL");
	is_int(ddio_port_find(ctx, "00:01", &p), -EINVAL, "an address without function is -EINVAL");

	is_int(ddio_port_find_dax(ctx, "/dev/dax1.0", &p), 0, "dax1.0 below a PCI device");
	ok(p && strcmp(ddio_port_bdf(p), "0000:00:02.0") == 0 &&
			strcmp(ddio_port_device_bdf(p), "0000:04:00.0") == 0,
			"  resolves to 0000:04:00.0 behind root port 0000:00:02.0");
	ddio_port_delete(&p);
	is_int(ddio_port_find_dax(ctx, "dax0.0", &p), DDIO_E_NO_ROOT_PORT,
			"dax0.0 on an NVDIMM region has no root port");
	ok(strstr(ddio_errormsg(), "memory bus") != NULL, "  and says why: %s", ddio_errormsg());
	is_int(ddio_port_find_dax(ctx, "/dev/dax9.9", &p), -ENOENT, "a missing dax device is -ENOENT");
	is_int(ddio_port_find_dax(ctx, "/dev/pmem0", &p), -EINVAL, "a non-dax name is -EINVAL");

	is_int(ddio_port_foreach(ctx, count_port, list), 0, "foreach over root ports");
	ok(strcmp(list, "0000:00:01.0 0000:00:02.0 0000:00:03.0 0000:00:1c.0 0000:40:01.1 "
			"0000:80:02.0 0000:c0:01.0 ") == 0, "  lists exactly the seven root ports: %s", list);

	int ret = ddio_cuda_pci_bdf(0, bdf, sizeof(bdf));
#ifdef PMCK_HAVE_CUDA
	ok(ret == 0 || ret == -ENODEV, "CUDA build: device 0 resolves or is -ENODEV (%d: %s)", ret,
			ret ? ddio_errormsg() : bdf);
#else
	is_int(ret, -ENOTSUP, "built without CUDA: --cuda is -ENOTSUP");
	ok(strstr(ddio_errormsg(), "built without CUDA") != NULL, "  and says so: %s", ddio_errormsg());
#endif

	/* libpci's fatal errors (here: the root port lacks its vendor attribute) fail the call, not the process. */
	snprintf(path, sizeof(path), "%s/bus/pci/devices/0000:c0:01.0/vendor", fake_sysfs);
	unlink(path);
	is_int(ddio_port_find(ctx, "0000:c1:00.0", &p), DDIO_E_PCI,
			"a libpci fatal error becomes DDIO_E_PCI");
	ok(strstr(ddio_errormsg(), "vendor") != NULL, "  with libpci's message: %s", ddio_errormsg());

	ddio_ctx_delete(&ctx);
	ok(ctx == NULL, "context deleted");
	fake_remove();
	return done_testing();
}
