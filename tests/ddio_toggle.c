/*
 * ddio_toggle.c -- `ddioctl disable/enable/restore` change exactly bits 7 and 3 of
 * perfctrlsts_0, record the prior value first, and restore puts it back (fake sysfs tree).
 */
#include <json-c/json.h>

#include "ddio.h"
#include "ddio_fake.h"
#include "tap.h"

#define GPU "0000:01:00.0"   /* behind PORT, perfctrlsts_0 0x1d1: DDIO on */
#define PORT "0000:00:01.0"
#define PORT2 "0000:00:02.0" /* above dax1.0, perfctrlsts_0 0x151: partial */

static char out[65536], state[700];

/* The value the state file records for port, or -1. */
static long long
recorded(const char *port)
{
	json_object *top = json_object_from_file(state), *ports, *v;
	long long r = -1;

	if (top && json_object_object_get_ex(top, "ports", &ports))
		for (size_t i = 0; i < json_object_array_length(ports); i++) {
			json_object *e = json_object_array_get_idx(ports, i);
			if (json_object_object_get_ex(e, "root_port", &v) &&
			    !strcmp(json_object_get_string(v), port) &&
			    json_object_object_get_ex(e, "value", &v))
				r = strtoll(json_object_get_string(v), NULL, 0);
		}
	json_object_put(top);
	return r;
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
	snprintf(state, sizeof(state), "%s/var/lib/pmckpt/ddio.state", fake_root);
	fake_snapshot(snap);

	/* A dry run shows the write and does nothing. */
	rc = fake_run(out, sizeof(out), 1, "disable --device " GPU " --dry-run --state-file %s", state);
	is_int(rc, 0, "disable --dry-run exits 0");
	ok(strstr(out, "would write 0x00000159 to config offset 0x180") &&
			strstr(out, "setpci -s " PORT " 180.L=00000159"),
			"dry run shows the exact write: %s", out);
	is_int(fake_diff(snap, NULL, NULL), 0, "dry run changed no byte");
	ok(access(state, F_OK) != 0, "dry run recorded nothing");

	/* Disable: bit 7 cleared, bit 3 set, nothing else. */
	rc = fake_run(out, sizeof(out), 1, "disable --device " GPU " --state-file %s", state);
	is_int(rc, 0, "disable exits 0");
	ok(strstr(out, "DDIO on -> off") != NULL, "says on -> off: %s", out);
	is_int(fake_reg(PORT), 0x159, "perfctrlsts_0 0x1d1 -> 0x159");
	is_int(fake_diff(snap, PORT, &mask), 0, "no other byte of any config file changed");
	is_int(mask, DDIO_BITS, "exactly bits 7 and 3 changed");
	is_int(recorded(PORT), FAKE_SKX_REG, "the state file holds the prior value 0x1d1");

	rc = fake_run(out, sizeof(out), 1, "disable --device " GPU " --state-file %s", state);
	ok(rc == 0 && strstr(out, "already"), "disable again: nothing to write: %s", out);
	is_int(fake_reg(PORT), 0x159, "  register unchanged");

	/* Enable reverses it. */
	rc = fake_run(out, sizeof(out), 0, "enable --device " GPU " --json --state-file %s", state);
	json_object *top = json_tokener_parse(out), *ch = NULL, *f;
	is_int(rc, 0, "enable --json exits 0");
	ok(top && json_object_object_get_ex(top, "changes", &ch) && json_object_array_length(ch) == 1,
			"enable --json lists one change");
	ch = ch ? json_object_array_get_idx(ch, 0) : NULL;
	ok(ch && json_object_object_get_ex(ch, "before", &f) && !strcmp(json_object_get_string(f), "0x00000159") &&
			json_object_object_get_ex(ch, "after", &f) && !strcmp(json_object_get_string(f), "0x000001d1") &&
			json_object_object_get_ex(ch, "written", &f) && json_object_get_boolean(f),
			"  0x00000159 -> 0x000001d1, written");
	json_object_put(top);
	is_int(fake_reg(PORT), 0x1d1, "enable sets bit 7 and clears bit 3: 0x1d1");
	is_int(fake_diff(snap, NULL, NULL), 0, "every byte is as at the start");
	is_int(recorded(PORT), FAKE_SKX_REG, "the record stays until restore");

	/* Restore returns to the first prior value, which enable does not. */
	rc = fake_run(out, sizeof(out), 1, "disable --dax /dev/dax1.0 --state-file %s", state);
	ok(rc == 0 && fake_reg(PORT2) == 0x159, "dax1.0's root port: 0x151 (partial) -> 0x159: %s", out);
	is_int(fake_diff(snap, PORT2, &mask), 0, "  no other byte changed");
	is_int(mask, DDIO_NOSNOOPOPWREN, "  only bit 3 had to change");
	fake_run(out, sizeof(out), 1, "enable --dax /dev/dax1.0 --state-file %s", state);
	is_int(fake_reg(PORT2), 0x1d1, "enable: 0x159 -> 0x1d1");
	is_int(recorded(PORT2), FAKE_SKX2_REG, "the state file holds the first prior value 0x151");

	rc = fake_run(out, sizeof(out), 1, "restore --device " PORT2 " --dry-run --state-file %s", state);
	ok(rc == 0 && strstr(out, "would write 0x00000151"), "restore --dry-run shows the write: %s", out);
	is_int(fake_reg(PORT2), 0x1d1, "  and writes nothing");

	rc = fake_run(out, sizeof(out), 1, "restore --dax dax1.0 --state-file %s", state);
	is_int(rc, 0, "restore --dax dax1.0 exits 0");
	is_int(fake_reg(PORT2), FAKE_SKX2_REG, "restore puts 0x151 back");
	ok(recorded(PORT2) == -1 && recorded(PORT) == FAKE_SKX_REG,
			"only that port's record is gone");
	rc = fake_run(out, sizeof(out), 1, "restore --state-file %s", state);
	is_int(rc, 0, "restore of the rest exits 0");
	is_int(fake_diff(snap, NULL, NULL), 0, "every config file is as it was at the start");
	ok(access(state, F_OK) != 0, "no record left: the state file is gone");
	rc = fake_run(out, sizeof(out), 1, "restore --state-file %s", state);
	ok(rc == 0 && strstr(out, "nothing was changed"), "restore with nothing recorded: exit 0: %s", out);

	free(snap);
	fake_remove();
	return done_testing();
}
