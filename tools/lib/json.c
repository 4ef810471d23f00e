/* SPDX-License-Identifier: BSD-3-Clause */
/* json.c -- JSON output of the tools (see json.h). */
#include <stdio.h>

#include "json.h"

void
tool_json_print(json_object *o)
{
	printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY |
			JSON_C_TO_STRING_SPACED | JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(o);
}

json_object *
tool_json_u64(uint64_t v)
{
	/* json-c keeps uint64 exactly; every value pmckpt prints fits in int64 anyway */
	return json_object_new_uint64(v);
}

json_object *
tool_json_hex(uint32_t v, int width)
{
	char b[16];

	snprintf(b, sizeof(b), "0x%0*x", width, v);
	return json_object_new_string(b);
}
