/*
 * ddio_refuse.c -- ddioctl refuses, and writes nothing, where it should: root ports
 * that are not Intel, unrecognised or unverified (unless --force), no privilege to
 * write config space, no writable state file, a state file for another device.
 */
#include <json-c/json.h>

#include "ddio.h"
#include "ddio_fake.h"
#include "tap.h"

static char out[65536], state[700];

/* Runs ddioctl; checks it refused (exit 1, message containing why) and changed nothing. */
static void
refused(const struct fake_snap *snap, const char *why, const char *args)
{
	int rc = fake_run(out, sizeof(out), 1, "%s --state-file %s", args, state);

	ok(rc == 1 && strstr(out, why), "%s: refused (exit %d): %s", args, rc, out);
	is_int(fake_diff(snap, NULL, NULL), 0, "  no config byte changed");
	ok(access(state, F_OK) != 0, "  nothing recorded");
}

static int
write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	if (!f)
		return -1;
	fputs(text, f);
	return fclose(f);
}

int
main(void)
{
	struct fake_snap *snap = malloc(sizeof(*snap));
	uint32_t mask;
	int rc;

	if (!snap || fake_build()) {
		diag("cannot build the fake tree: %s", strerror(errno));
		fake_remove();
		return 1;
	}
	snprintf(state, sizeof(state), "%s/ddio.state", fake_root);
	fake_snapshot(snap);

	/* Not Intel, unrecognised, unverified. */
	refused(snap, "not an Intel device", "disable --device 0000:41:00.0");
	refused(snap, "not an Intel device", "disable --device 0000:41:00.0 --dry-run");
	refused(snap, "not an Intel device", "enable --device 0000:c1:00.0");
	refused(snap, "not a recognised Intel Xeon IIO root port", "disable --device 0000:00:1c.0");
	refused(snap, "not verified for Ice Lake-SP", "disable --device 0000:81:00.0");

	/* --force acts, on the DDIO bits only, and is restorable. */
	rc = fake_run(out, sizeof(out), 1, "disable --device 0000:41:00.0 --force --state-file %s", state);
	is_int(rc, 0, "--force disables on the AMD root port");
	is_int(fake_reg("0000:40:01.1"), FAKE_AMD_REG | DDIO_NOSNOOPOPWREN, "  0x12345670 -> 0x12345678");
	ok(fake_diff(snap, "0000:40:01.1", &mask) == 0 && mask == DDIO_NOSNOOPOPWREN, "  only bit 3 changed");
	rc = fake_run(out, sizeof(out), 1, "restore --state-file %s", state);
	ok(rc == 0 && fake_diff(snap, NULL, NULL) == 0 && access(state, F_OK) != 0,
			"restore undoes the forced change");
	rc = fake_run(out, sizeof(out), 1, "disable --device 0000:81:00.0 --force --dry-run --state-file %s", state);
	ok(rc == 0 && strstr(out, "180.L=00000159"), "--force --dry-run on Ice Lake-SP shows the write");
	is_int(fake_diff(snap, NULL, NULL), 0, "  and writes nothing");

	/* No privilege to write configuration space. */
	if (geteuid() == 0) {
		char cmd[1024];
		snprintf(cmd, sizeof(cmd), "setpriv --reuid=65534 --regid=65534 --clear-groups test -x %s "
				"2>/dev/null", fake_ddioctl());
		if (system(cmd) == 0) {
			fake_prefix = "setpriv --reuid=65534 --regid=65534 --clear-groups ";
			refused(snap, "for writing", "disable --device 0000:01:00.0");
			fake_prefix = "";
		} else {
			ok(1, "# SKIP setpriv missing, or user 65534 cannot run %s", fake_ddioctl());
		}
	} else {
		chmod(fake_config("0000:00:01.0"), 0444);
		refused(snap, "for writing", "disable --device 0000:01:00.0");
		chmod(fake_config("0000:00:01.0"), 0644);
	}

	/* The prior value cannot be recorded: no change. */
	rc = fake_run(out, sizeof(out), 1, "disable --device 0000:01:00.0 --state-file /proc/pmck-ddio/state");
	ok(rc == 1 && strstr(out, "/proc/pmck-ddio"), "an unwritable state file: refused: %s", out);
	is_int(fake_diff(snap, NULL, NULL), 0, "  no config byte changed");

	/* A record made for another device (8086:2031) is not restored onto 8086:2030. */
	write_text(state, "{\"version\": 1, \"ports\": [{\"root_port\": \"0000:00:01.0\", \"vendor\": \"0x8086\", "
			"\"device\": \"0x2031\", \"offset\": \"0x180\", \"value\": \"0x00000151\", "
			"\"mask\": \"0x00000088\", \"time\": 0}]}\n");
	rc = fake_run(out, sizeof(out), 1, "restore --state-file %s", state);
	ok(rc == 1 && strstr(out, "not restoring without --force"), "restore onto another device: refused: %s", out);
	ok(fake_diff(snap, NULL, NULL) == 0 && access(state, F_OK) == 0, "  nothing written, record kept");
	rc = fake_run(out, sizeof(out), 1, "restore --force --state-file %s", state);
	ok(rc == 0 && fake_reg("0000:00:01.0") == 0x151 && access(state, F_OK) != 0,
			"restore --force applies the recorded bits (0x1d1 -> 0x151)");
	ok(fake_diff(snap, "0000:00:01.0", &mask) == 0 && mask == 0x80, "  bit 7 only, here");
	write_text(state, "{\"version\": 1, \"ports\": [{\"root_port\": \"0000:00:01.0\", \"vendor\": \"0x8086\", "
			"\"device\": \"0x2030\", \"offset\": \"0x180\", \"value\": \"0x000001d1\", "
			"\"mask\": \"0x00000088\", \"time\": 0}]}\n");
	fake_run(out, sizeof(out), 1, "restore --state-file %s", state);
	is_int(fake_diff(snap, NULL, NULL), 0, "back to the start");

	write_text(state, "not json");
	rc = fake_run(out, sizeof(out), 1, "restore --state-file %s", state);
	ok(rc == 1 && strstr(out, "not valid JSON"), "a malformed state file: refused: %s", out);
	unlink(state);

	/* Library level: the register changed between plan and write; foreign bits. */
	struct ddio_ctx *ctx;
	struct ddio_port *p;
	struct ddio_change c;
	if (ddio_ctx_new(fake_sysfs, fake_dev, &ctx) == 0 && ddio_port_find(ctx, "01:00.0", &p) == 0) {
		is_int(ddio_port_plan(p, 0, 0, &c), 0, "plan a disable");
		FILE *f = fopen(fake_config("0000:00:01.0"), "r+");
		unsigned char b = 0x55;
		fseek(f, 0x181, SEEK_SET);
		fwrite(&b, 1, 1, f);
		fclose(f);
		is_int(ddio_port_apply(p, &c, 0), DDIO_E_CHANGED, "a register changed since planning: DDIO_E_CHANGED");
		is_int(fake_reg("0000:00:01.0"), 0x55d1, "  nothing written");
		c.after ^= 0x100;
		is_int(ddio_port_apply(p, &c, 0), -EINVAL, "a change of other bits: -EINVAL");
		ddio_port_delete(&p);
		ddio_ctx_delete(&ctx);
	} else {
		ok(0, "library context: %s", ddio_errormsg());
	}

	rc = fake_run(out, sizeof(out), 1, "disable");
	is_int(rc, 2, "disable without a device: usage error");
	rc = fake_run(out, sizeof(out), 1, "frobnicate --device 01:00.0");
	is_int(rc, 2, "an unknown command: usage error");
	free(snap);
	fake_remove();
	return done_testing();
}
