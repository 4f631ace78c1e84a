/* SPDX-License-Identifier: MIT */
/*
 * ssd/csum.h — the checksum of value bytes: XXH3-64, computed with the
 * widest vector unit the CPU has. Debian's libxxhash is built for the
 * x86-64 baseline (SSE2, ~6 GB/s here); the AVX2 build of the same function
 * is about twice as fast, and checksums are most of the CPU an offload or
 * a verified read costs. The value is the same either way (XXH3 is
 * defined bit for bit), so records written on one machine verify on any.
 */
#ifndef KVFS_SSD_CSUM_H
#define KVFS_SSD_CSUM_H

#include <stddef.h>
#include <stdint.h>

/* XXH3_64bits(buf, len). Thread-safe. */
uint64_t kv_csum(const void *buf, size_t len);

#endif
