/* SPDX-License-Identifier: MIT */
/*
 * rados/rados_names.c — the names of the shared tier's objects
 * (rados/rados_format.h). Built with or without librados: --rados-gc's
 * parsing and the tests use them too.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

#include "rados/rados.h"

void kv_rados_data_oid(char *oid, uint64_t node, uint64_t seq, uint32_t i)
{
	snprintf(oid, KV_RADOS_OID_MAX, "x.%016" PRIx64 ".%016" PRIx64 ".%08" PRIx32, node, seq, i);
}

void kv_rados_dir_oid(char *oid, const char *path, size_t len)
{
	XXH128_hash_t h = XXH3_128bits(path, len);

	snprintf(oid, KV_RADOS_OID_MAX, "d.%016" PRIx64 "%016" PRIx64, h.high64, h.low64);
}

/* Parses exactly `digits` lower-case hex digits at s into *out. */
static bool hex_at(const char *s, int digits, uint64_t *out)
{
	uint64_t v = 0;

	for (int k = 0; k < digits; k++) {
		char c = s[k];

		if (c >= '0' && c <= '9')
			v = v << 4 | (uint64_t)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v = v << 4 | (uint64_t)(c - 'a' + 10);
		else
			return false;
	}
	*out = v;
	return true;
}

bool kv_rados_parse_data_oid(const char *oid, uint64_t *node, uint64_t *seq, uint32_t *i)
{
	uint64_t idx;

	/* "x." 16 "." 16 "." 8 */
	if (strlen(oid) != 2 + 16 + 1 + 16 + 1 + 8 || oid[0] != 'x' || oid[1] != '.' ||
	    oid[18] != '.' || oid[35] != '.')
		return false;
	if (!hex_at(oid + 2, 16, node) || !hex_at(oid + 19, 16, seq) || !hex_at(oid + 36, 8, &idx))
		return false;
	*i = (uint32_t)idx;
	return true;
}
