/* SPDX-License-Identifier: MIT */
/*
 * core/resv.h — reserved extents: the SSD quota fallocate holds for a
 * value's unwritten extents.
 *
 * fallocate (mode 0 or KEEP_SIZE) makes the holes of a range *unwritten*:
 * they still read as zeros and take no memory and no record, but the quota
 * of one extent record each (KV_RESV_BYTES) is promised to them in the
 * bucket set (kv_bucket_reserve), so their first write cannot fail for
 * lack of room, as on ext4 and xfs. An extent stays reserved until a
 * record of it is placed on the SSD (the offload or a spill of its bytes
 * fills the reservation: kv_bucket_put.bp_fill), or until it is punched,
 * truncated away or its key deleted (the promise is taken back). While
 * reserved and not yet written it counts in st_blocks.
 *
 * A set is the sorted, disjoint, non-adjacent ranges of extent indexes a
 * key's newest version holds reserved (core/store_int.h, ki_resv); it is
 * journaled with the key's durable map (KV_JX_UNWRITTEN entries of a PUT:
 * ssd/format.h) and rebuilt by recovery. Guarded by the inode's ki_lock;
 * the functions here take no lock.
 */
#ifndef KVFS_CORE_RESV_H
#define KVFS_CORE_RESV_H

#include <stdbool.h>
#include <stdint.h>

#include "core/obj.h"
#include "ssd/format.h"
#include "ssd/journal.h"

/*
 * Quota promised per reserved extent: the most one extent's record can
 * take (the longest key's head, its index entry, and a bucket seal and
 * header should it start a new bucket).
 */
#define KV_RESV_BYTES (kv_rec_size(KV_JPATH_MAX, KV_EXTENT) + 4 * KV_BLOCK)

struct kv_xrange {
	uint32_t xr_first, xr_end; /* extents [xr_first, xr_end) */
};

struct kv_resv {
	uint32_t rv_n, rv_max;
	uint64_t rv_count;	/* extents in all ranges */
	struct kv_xrange *rv_r; /* rv_n ranges, sorted */
};

/* Adds extents [first, end) (none of them in the set yet). Returns 0 or -ENOMEM. */
int kv_resv_add(struct kv_resv **rv, uint32_t first, uint32_t end);

/*
 * Removes extents [first, end) ∩ the set; frees the set when it empties.
 * Returns how many were in it, or -ENOMEM (a range would have to split:
 * nothing removed).
 */
int64_t kv_resv_cut(struct kv_resv **rv, uint32_t first, uint32_t end);

/* True when extent k is in the set (rv may be NULL). */
bool kv_resv_has(const struct kv_resv *rv, uint32_t k);

/* Extents in the set (rv may be NULL). */
static inline uint64_t kv_resv_count(const struct kv_resv *rv)
{
	return rv ? rv->rv_count : 0;
}

/* Frees the set. */
void kv_resv_free(struct kv_resv *rv);

#endif
