/* ddio_status.c -- `ddioctl status` reports DDIO and the IIO LLC ways, and writes nothing. */
#include <json-c/json.h>

#include "ddio.h"
#include "ddio_fake.h"
#include "tap.h"

static char out[65536];

static const char *
str(json_object *o, const char *key)
{
	json_object *f;
	return json_object_object_get_ex(o, key, &f) ? json_object_get_string(f) : NULL;
}

static int
streq(const char *a, const char *b)
{
	return a && b && strcmp(a, b) == 0;
}

/* The root_ports entry for root port bdf, or NULL. */
static json_object *
port_of(json_object *top, const char *bdf)
{
	json_object *ports;

	if (!top || !json_object_object_get_ex(top, "root_ports", &ports))
		return NULL;
	for (size_t i = 0; i < json_object_array_length(ports); i++)
		if (streq(str(json_object_array_get_idx(ports, i), "root_port"), bdf))
			return json_object_array_get_idx(ports, i);
	return NULL;
}

int
main(void)
{
	struct fake_snap *snap = malloc(sizeof(*snap));
	json_object *top, *p, *ways, *w;
	int rc;

	if (!snap || fake_build()) {
		diag("cannot build the fake tree: %s", strerror(errno));
		fake_remove();
		return 1;
	}
	fake_snapshot(snap);

	/* One device, JSON. */
	rc = fake_run(out, sizeof(out), 0, "status --device 0000:01:00.0 --json");
	is_int(rc, 0, "status --device --json exits 0");
	top = json_tokener_parse(out);
	ok(top != NULL, "the output is JSON");
	p = port_of(top, "0000:00:01.0");
	ok(p != NULL, "it has the GPU's root port 0000:00:01.0");
	ok(streq(str(p, "dev"), "0000:01:00.0"), "dev is the GPU");
	ok(streq(str(p, "vendor_id"), "0x8086") && streq(str(p, "device_id"), "0x2030"), "IDs 8086:2030");
	ok(streq(str(p, "generation"), "Skylake-SP/Cascade Lake") && streq(str(p, "support"), "verified"),
			"Skylake-SP/Cascade Lake, verified");
	ok(streq(str(p, "perfctrlsts_0"), "0x000001d1"), "perfctrlsts_0 0x000001d1 (%s)", str(p, "perfctrlsts_0"));
	ok(streq(str(p, "use_allocating_flow_wr"), "1") && streq(str(p, "nosnoopopwren"), "0"),
			"bits decoded: Use_Allocating_Flow_Wr 1, NoSnoopOpWrEn 0");
	ok(streq(str(p, "ddio"), "on"), "DDIO on");
	ok(json_object_object_get_ex(top, "iio_llc_ways", &ways) && json_object_array_length(ways) == 2,
			"IIO LLC ways for two packages");
	w = ways ? json_object_array_get_idx(ways, 0) : NULL;
	ok(w && streq(str(w, "package"), "0") && streq(str(w, "cpu"), "0") && streq(str(w, "value"), "0x600") &&
			streq(str(w, "ways"), "2"), "package 0: MSR 0xc8b = 0x600, 2 ways");
	w = ways ? json_object_array_get_idx(ways, 1) : NULL;
	ok(w && streq(str(w, "cpu"), "2") && str(w, "error") && !str(w, "value"),
			"package 1 (cpu2, no msr device): an error, no value: %s", w ? str(w, "error") : "?");
	json_object_put(top);

	/* Every root port. */
	rc = fake_run(out, sizeof(out), 0, "status --json");
	top = json_tokener_parse(out);
	is_int(rc, 0, "status without a device exits 0");
	ok(top && json_object_array_length(json_object_object_get(top, "root_ports")) == 7,
			"lists the seven root ports");
	p = port_of(top, "0000:40:01.1");
	ok(p && streq(str(p, "support"), "unknown") && streq(str(p, "ddio"), "unknown") &&
			streq(str(p, "perfctrlsts_0"), "0x12345670"),
			"AMD root port: raw value shown, DDIO unknown");
	p = port_of(top, "0000:80:02.0");
	ok(p && streq(str(p, "support"), "unverified") && streq(str(p, "ddio"), "on"),
			"Ice Lake-SP root port: unverified, bits decoded");
	p = port_of(top, "0000:00:03.0");
	ok(p && streq(str(p, "ddio"), "unknown") && str(p, "error") && strstr(str(p, "error"), "256 bytes"),
			"a 256-byte config space: an error, not a value (%s)", p ? str(p, "error") : "?");
	json_object_put(top);

	/* Text, and other ways to name the device. */
	rc = fake_run(out, sizeof(out), 0, "status --dax /dev/dax1.0");
	ok(rc == 0 && strstr(out, "0000:04:00.0 -> root port 0000:00:02.0") &&
			strstr(out, "= 0x00000151") && strstr(out, "DDIO partial"),
			"text status of dax1.0 names its root port, the value and DDIO partial");
	rc = fake_run(out, sizeof(out), 1, "status --dax /dev/dax0.0");
	ok(rc == 1 && strstr(out, "memory bus"), "dax0.0 (NVDIMM): exit 1 and why");
	rc = fake_run(out, sizeof(out), 1, "status --device 0000:00:1f.0");
	ok(rc == 1 && strstr(out, "integrated"), "an integrated device: exit 1 and why");
	/* Without CUDA or a GPU the error names CUDA; with one, its address is not in the fake tree. */
	rc = fake_run(out, sizeof(out), 1, "status --cuda 0");
	ok(rc == 1 && (strstr(out, "CUDA") || strstr(out, "no PCI device")),
			"--cuda 0 on the fake tree: exit 1 and why: %s", out);
	rc = fake_run(out, sizeof(out), 1, "status --device 01:00.0 --dax dax1.0");
	is_int(rc, 2, "two devices named is a usage error");

	is_int(fake_diff(snap, NULL, NULL), 0, "status changed no byte of any config file");
	free(snap);
	fake_remove();
	return done_testing();
}
