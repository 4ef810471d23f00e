/* SPDX-License-Identifier: BSD-3-Clause */
/* json.h -- JSON output of the tools (json-c): one document on stdout, stable field names. */
#ifndef PMCK_TOOL_JSON_H
#define PMCK_TOOL_JSON_H 1

#include <json-c/json.h>
#include <stdint.h>

/* Prints o pretty-printed (slashes not escaped) and a newline on stdout, then releases o. */
void tool_json_print(json_object *o);

/* A uint64 value: json-c keeps it exactly. */
json_object *tool_json_u64(uint64_t v);

/* v as a hexadecimal string of at least width digits, "0x" first ("0x8086"). */
json_object *tool_json_hex(uint32_t v, int width);

#endif
