/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * safetensors.c -- fuzzes the safetensors reader (runtime/safetensors.c):
 * the input is written as a file and given to pmck_safetensors_verify,
 * pmck_safetensors_layout and pmck_safetensors_import (into a store of
 * the fixture's layout, fixture.h, that holds no checkpoint).
 *
 * Promises checked: the layout read from a file is one a store can be
 * made of (a store is created from it); a file that imports also
 * verifies, and the imported checkpoint is recovered and exports to a
 * file that verifies.
 */
#define FUZZ_NAME "safetensors"
#include "driver.h"

#include "fixture.h"

static struct fixture fx;
static char in_path[256], out_path[256];

static void
setup(void)
{
	fix_setup(&fx, "store", 0);
	snprintf(in_path, sizeof(in_path), "%s/in.safetensors", fuzz_dir());
	snprintf(out_path, sizeof(out_path), "%s/out.safetensors", fuzz_dir());
}

static void
fuzz_one(const uint8_t *data, size_t len)
{
	if (!fx.region)
		setup();
	fix_restore(&fx);
	fuzz_write_file(in_path, data, len);

	struct pmck_file_info info;
	int verified = pmck_safetensors_verify(in_path, &info);
	fuzz_check_error(verified, pmck_errormsg());
	fuzz_assert(verified <= 0, "verify returned %d", verified);

	struct pmck_tensor_desc *descs = NULL;
	size_t n = 0;
	int rc = pmck_safetensors_layout(in_path, &descs, &n);
	fuzz_check_error(rc, pmck_errormsg());
	if (rc == 0) {
		fuzz_assert(n > 0 && descs, "a layout of %zu tensors", n);
		/* The layout must be one a store can be made of: pmckpt create --from does so. */
		struct pmck_store *s2 = NULL;
		int c = pmck_store_create(fx.pool, "t", descs, n, &s2);
		fuzz_check_error(c, pmck_errormsg());
		fuzz_assert(c == 0 || c == -ENOSPC || c == -ENOMEM,
				"a layout read from a file makes no store: %d %s", c, pmck_errormsg());
		pmck_store_close(&s2);
		free(descs);
	}

	rc = pmck_safetensors_import(fx.s, in_path, 1);
	fuzz_check_error(rc, pmck_errormsg());
	if (rc == 0) {
		fuzz_assert(verified == 0, "imported a file that does not verify");
		struct pmck_recovery rec;
		rc = pmck_store_recover(fx.s, &rec);
		fuzz_assert(rc == 0, "import succeeded, recovery fails: %s", pmck_errormsg());
		rc = pmck_safetensors_write(fx.s, out_path, 0, 1);
		fuzz_assert(rc == 0, "export after import: %s", pmck_errormsg());
		rc = pmck_safetensors_verify(out_path, NULL);
		fuzz_assert(rc == 0, "re-export does not verify: %s", pmck_errormsg());
		unlink(out_path);
	}
	unlink(in_path);
}

static void
fuzz_seeds(const char *dir)
{
	char path[4096];
	struct fixture f;

	fix_setup(&f, "seed-store", 2);
	if (pmck_store_recover(f.s, NULL))
		abort();
	snprintf(path, sizeof(path), "%s/pmckpt-step6", dir);
	if (pmck_safetensors_write(f.s, path, 0, 1))
		abort();
	snprintf(path, sizeof(path), "%s/pmckpt-rank1-of-2", dir);
	if (pmck_safetensors_write(f.s, path, 1, 2))
		abort();
	pmck_store_close(&f.s);

	/* Written by another tool: no __metadata__, the fixture's tensors. */
	static const char foreign_hdr[] =
		"{\"emb\":{\"dtype\":\"F32\",\"shape\":[8,4],\"data_offsets\":[0,128]},"
		"\"w\":{\"dtype\":\"BF16\",\"shape\":[3,5],\"data_offsets\":[128,158]},"
		"\"step\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[158,166]}}";
	uint8_t buf[8 + sizeof(foreign_hdr) + 166];
	uint64_t hlen = sizeof(foreign_hdr) - 1;
	memcpy(buf, &hlen, 8);
	memcpy(buf + 8, foreign_hdr, hlen);
	memset(buf + 8 + hlen, 0x11, 166);
	fuzz_seed(dir, "foreign", buf, 8 + hlen + 166);
	fuzz_seed(dir, "bad-truncated", buf, 8 + hlen + 100);
	hlen = 1u << 30;
	memcpy(buf, &hlen, 8);
	fuzz_seed(dir, "bad-header-length", buf, 8 + sizeof(foreign_hdr) - 1 + 166);
	fuzz_seed(dir, "bad-short", "\x02\0\0\0\0\0\0\0{}", 10);
}
