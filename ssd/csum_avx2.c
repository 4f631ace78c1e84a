/* SPDX-License-Identifier: MIT */
/* XXH3 built for AVX2 (this file alone is compiled with -mavx2): see ssd/csum.h. */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <stddef.h>
#include <stdint.h>

uint64_t kv_csum_avx2(const void *buf, size_t len);

uint64_t kv_csum_avx2(const void *buf, size_t len)
{
	return XXH3_64bits(buf, len);
}
