/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/pattern.h — the unit tests' value bytes: byte j of the value
 * with a seed is byte j % 8 of mix(seed * FNV prime + j / 8), so any range of
 * any value can be made, or checked, without the rest.
 */
#ifndef KVFS_TESTS_PATTERN_H
#define KVFS_TESTS_PATTERN_H

#include <stdint.h>

/* splitmix64's finalizer. */
static inline uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* Value bytes [off, off + len) of the value with this seed, into buf. */
static inline void pattern(void *buf, uint64_t seed, uint64_t off, uint64_t len)
{
	uint8_t *p = buf;

	for (uint64_t i = 0; i < len; i++) {
		uint64_t j = off + i;

		p[i] = (uint8_t)(mix(seed * 0x100000001b3ull + j / 8) >> (8 * (j % 8)));
	}
}

#endif
