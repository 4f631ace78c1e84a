/* SPDX-License-Identifier: MIT */
/*
 * core/quota.h — the room promised to changes (core/quota.c; not for use
 * outside core/): the SSD quota a change owes, the room of reserved
 * extents. Called by writes, fallocate, attributes, the namespace and
 * core/store.c.
 */
#ifndef KVFS_CORE_QUOTA_H
#define KVFS_CORE_QUOTA_H

#include "core/store_int.h"

/* What a record owes beyond its bytes: the longest key's head, its index entry, a bucket's seal. */
#define OWE_OVER (KV_RESV_BYTES - KV_EXTENT)

/*
 * A change to a version, as the SSD quota sees it (core/obj.h, "SSD quota
 * owed"): it takes the size from oc_old to oc_size and leaves new bytes in
 * the extents of up to two ranges (a punch keeps two partial extents).
 */
struct owe_range {
	uint64_t or_off, or_end;
};

struct owe_change {
	uint64_t oc_old, oc_size;
	unsigned oc_n;
	struct owe_range oc_r[2];
};

/*
 * Promises the SSD quota that change c of obj adds; once it is made, the
 * caller gives that to obj (kv_quota_owe_set), or, if it fails, back to the bucket
 * set (unowe). An overwrite (ino, ki_lock held exclusive) may count on the
 * bytes of the durable version it replaces, which die once it is placed:
 * so overwrites go on at a full quota, the buckets passing it by at most
 * what compaction then reclaims. Returns the bytes promised, or -EDQUOT.
 */
int64_t kv_quota_owe(struct kv_store *st, struct kv_inode *ino, struct kv_obj *obj,
		     const struct owe_change *c);
/* Gives obj the quota owe promised for change c, now made. */
void kv_quota_owe_set(struct kv_store *st, struct kv_obj *obj, const struct owe_change *c);
/* Gives back what owe promised for a change that failed. */
void kv_quota_unowe(struct kv_store *st, int64_t owed);
/* The change of obj that writes [off, end) and leaves the size at size. */
struct owe_change kv_quota_owe_of_write(const struct kv_obj *obj, uint64_t off, uint64_t end,
					uint64_t size);
/* Takes back the promise of n reserved extents (none to take back once the tier is gone). */
void kv_quota_unpromise(struct kv_store *st, uint64_t n);
/*
 * Bytes of ino's reserved extents that hold no data yet: unwritten,
 * allocated all the same. O(the smaller of its reserved extents and its
 * extents up to the last with data).
 */
uint64_t kv_quota_unwritten_bytes(const struct kv_inode *ino);
/*
 * Reserves the extents of [k0, k1) that hold no data and are not reserved
 * yet (ki_lock held exclusive): their quota first, then the set. Returns
 * 0, -EDQUOT (the SSD cannot promise the room) or -ENOMEM (nothing
 * reserved that was not before, or the ranges added before it ran out).
 */
int kv_quota_resv_take(struct kv_inode *ino, uint64_t k0, uint64_t k1);
/* Takes back the reservations of extents [k0, k1). Returns 0 or -ENOMEM (nothing taken). */
int kv_quota_resv_drop(struct kv_inode *ino, uint64_t k0, uint64_t k1);
/*
 * ino's reservations changed without a new version (they were `before`
 * extents; ki_lock held exclusive): they are journaled with the durable
 * version by kv_quota_resv_journal once ki_lock is let go — unless a newer
 * version's offload will.
 */
void kv_quota_resv_persist(struct kv_inode *ino, uint64_t before);
/*
 * Journals ino's changed reservations (no lock held: it takes ks_ns_lock,
 * for the key's path, and ki_lock, in that order — never held across a
 * change that may read the SSD).
 */
void kv_quota_resv_journal(struct kv_store *st, struct kv_inode *ino);

#endif
