/* SPDX-License-Identifier: MIT */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "ssd/csum.h"

#if defined(__x86_64__)
/* ssd/csum_avx2.c, compiled with -mavx2. */
uint64_t kv_csum_avx2(const void *buf, size_t len);
#endif

uint64_t kv_csum(const void *buf, size_t len)
{
#if defined(__x86_64__)
	if (__builtin_cpu_supports("avx2"))
		return kv_csum_avx2(buf, len);
#endif
	return XXH3_64bits(buf, len);
}
