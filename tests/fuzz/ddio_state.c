/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ddio_state.c -- fuzzes ddioctl's state file (ddio/statefile.c), the
 * record of prior register values that `ddioctl restore` returns to:
 * ddio_state_load on the input written as the file, then
 * ddio_state_forget of each port it lists (the file is rewritten, or
 * removed with its last record) and a load after each.
 */
#define FUZZ_NAME "ddio_state"
#include "driver.h"

#include "ddio.h"

static void
fuzz_one(const uint8_t *data, size_t len)
{
	static char path[256];
	if (!path[0])
		snprintf(path, sizeof(path), "%s/ddio.state", fuzz_dir());
	fuzz_write_file(path, data, len);

	struct ddio_saved *saved = NULL;
	size_t n = 0;
	int rc = ddio_state_load(path, &saved, &n);
	fuzz_check_error(rc, ddio_errormsg());
	if (rc) {
		fuzz_assert(rc == DDIO_E_STATE || rc == -ENOMEM || rc == -ENOENT,
				"load: unexpected error %d (%s)", rc, ddio_errormsg());
		return;
	}
	for (size_t i = 0; i < n; i++)
		fuzz_assert(memchr(saved[i].port, 0, sizeof(saved[i].port)) != NULL,
				"record %zu: port not terminated", i);

	/* Forget them one by one; what is left must still load, one record fewer. */
	for (size_t i = 0; i < n && i < 8; i++) {
		rc = ddio_state_forget(path, saved[i].port);
		fuzz_check_error(rc, ddio_errormsg());
		if (rc)
			break; /* a port recorded twice: the first forget took both, or -ENOENT */
		struct ddio_saved *left = NULL;
		size_t m = 0;
		rc = ddio_state_load(path, &left, &m);
		fuzz_assert(rc == 0 || (rc == -ENOENT && access(path, F_OK) != 0),
				"forget left an unreadable file: %d %s", rc, ddio_errormsg());
		fuzz_assert(rc != 0 || m < n - i, "forget removed nothing (%zu left of %zu)", m, n - i);
		free(left);
		if (rc)
			break;
	}
	free(saved);
	unlink(path);
}

static void
fuzz_seeds(const char *dir)
{
	static const char two[] =
		"{\"version\": 1, \"ports\": ["
		"{\"root_port\": \"0000:00:01.0\", \"vendor\": \"0x8086\", \"device\": \"0x2030\", "
		"\"offset\": \"0x180\", \"value\": \"0x000001d1\", \"mask\": \"0x00000088\", "
		"\"time\": 1700000000, \"recorded\": \"2023-11-14T22:13:20Z\"},"
		"{\"root_port\": \"0000:17:00.0\", \"vendor\": \"0x8086\", \"device\": \"0x347a\", "
		"\"offset\": \"0x180\", \"value\": \"0x00000151\", \"mask\": \"0x00000088\", "
		"\"time\": 1700000100, \"recorded\": \"2023-11-14T22:15:00Z\"}]}";
	char path[4096];

	fuzz_seed_text(dir, "two", two);
	/* The library's own writing: the file after forgetting one record. */
	snprintf(path, sizeof(path), "%s/one", dir);
	fuzz_write_file(path, two, strlen(two));
	if (ddio_state_forget(path, "0000:00:01.0")) {
		fprintf(stderr, "ddio_state: seed: %s\n", ddio_errormsg());
		abort();
	}
	snprintf(path, sizeof(path), "%s/one.lock", dir);
	unlink(path);
	fuzz_seed_text(dir, "empty-ports", "{\"version\": 1, \"ports\": []}");
	fuzz_seed_text(dir, "bad-version", "{\"version\": 2, \"ports\": []}");
	fuzz_seed_text(dir, "bad-value", "{\"version\": 1, \"ports\": [{\"root_port\": "
			"\"0000:00:01.0\", \"vendor\": \"0x8086\", \"device\": \"0x2030\", "
			"\"offset\": \"0x180\", \"value\": \"zz\", \"mask\": \"0x88\", \"time\": 1}]}");
}
