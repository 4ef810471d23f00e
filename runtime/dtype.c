/* SPDX-License-Identifier: BSD-3-Clause */
/* dtype.c -- element types, named as in safetensors. */
#include "pmckpt.h"

static const struct {
	const char *name;
	size_t size;
} dtypes[PMCK_DTYPE_COUNT] = {
	[PMCK_DTYPE_BYTES] = {"U8", 1},   [PMCK_DTYPE_BOOL] = {"BOOL", 1},
	[PMCK_DTYPE_U8] = {"U8", 1},      [PMCK_DTYPE_I8] = {"I8", 1},
	[PMCK_DTYPE_I16] = {"I16", 2},    [PMCK_DTYPE_U16] = {"U16", 2},
	[PMCK_DTYPE_F16] = {"F16", 2},    [PMCK_DTYPE_BF16] = {"BF16", 2},
	[PMCK_DTYPE_I32] = {"I32", 4},    [PMCK_DTYPE_U32] = {"U32", 4},
	[PMCK_DTYPE_F32] = {"F32", 4},    [PMCK_DTYPE_I64] = {"I64", 8},
	[PMCK_DTYPE_U64] = {"U64", 8},    [PMCK_DTYPE_F64] = {"F64", 8},
	[PMCK_DTYPE_F8_E4M3] = {"F8_E4M3", 1}, [PMCK_DTYPE_F8_E5M2] = {"F8_E5M2", 1},
};

size_t
pmck_dtype_size(enum pmck_dtype d)
{
	return (unsigned)d < PMCK_DTYPE_COUNT ? dtypes[d].size : 0;
}

const char *
pmck_dtype_name(enum pmck_dtype d)
{
	return (unsigned)d < PMCK_DTYPE_COUNT ? dtypes[d].name : NULL;
}
