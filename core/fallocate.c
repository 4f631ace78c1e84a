/* SPDX-License-Identifier: MIT */
/*
 * core/fallocate.c — fallocate (core/store.h): mode 0 and KEEP_SIZE
 * reserve the holes of a range (unwritten extents, their room promised:
 * core/quota.h), PUNCH_HOLE makes whole extents holes and gives their
 * reservations back, each a new version as a write is.
 *
 * Layer: below the namespace, above writes (core/write.h: the version to
 * change, unspill, conclude, waiting for room) and the quota
 * (core/quota.h). Nothing but the FUSE layer calls it.
 *
 * Locks: ki_lock (exclusive) for the change; then, let go,
 * kv_quota_resv_journal takes ks_ns_lock > ki_lock (core/store_int.h).
 */
#include "core/store.h"
#include "core/quota.h"
#include "core/store_int.h"
#include "core/write.h"

#include <errno.h>
#include <linux/falloc.h>

/*
 * fallocate(PUNCH_HOLE | KEEP_SIZE) under ki_lock (exclusive): [off, end)
 * reads as zeros, whole extents of it become holes and give back their
 * reservations, as ext4 deallocates them.
 */
static int punch_locked(struct kv_inode *ino, uint64_t off, uint64_t end)
{
	uint64_t old = kv_cur_size(ino), resv = kv_resv_count(ino->ki_resv), last;
	struct owe_change ch;
	struct kv_obj *obj;
	int64_t owed;
	int err = 0;

	err = kv_quota_resv_drop(ino, (off + KV_EXTENT - 1) >> KV_EXTENT_SHIFT,
				 end >> KV_EXTENT_SHIFT);
	if (err)
		return err;
	if (off >= old) {
		kv_quota_resv_persist(ino, resv);
		return 0;
	}
	err = kv_write_writable(ino, old, &obj);
	if (err)
		return err;
	err = kv_write_unspill(ino, obj, off, end, UINT64_MAX);
	/* A new version: its record, and the extents it cuts into but keeps. */
	ch = (struct owe_change){.oc_old = old, .oc_size = old, .oc_n = 1, .oc_r = {{off, off}}};
	last = end < old ? end : old;
	if (off & (KV_EXTENT - 1) && kv_obj_has_data(obj, off >> KV_EXTENT_SHIFT))
		ch.oc_r[0].or_end = off + 1;
	if (last & (KV_EXTENT - 1) && (last - 1) >> KV_EXTENT_SHIFT != off >> KV_EXTENT_SHIFT &&
	    kv_obj_has_data(obj, (last - 1) >> KV_EXTENT_SHIFT))
		ch.oc_r[ch.oc_n++] = (struct owe_range){last - 1, last};
	owed = err ? 0 : kv_quota_owe(ino->ki_store, ino, obj, &ch);
	if (owed < 0)
		err = (int)owed;
	if (!err)
		err = kv_obj_punch(obj, off, end - off);
	if (!err)
		kv_quota_owe_set(ino->ki_store, obj, &ch);
	else
		kv_quota_unowe(ino->ki_store, owed);
	return kv_write_conclude(ino, obj, old, err);
}

/*
 * fallocate mode 0 or KEEP_SIZE under ks_ns_lock (shared) and ki_lock
 * (exclusive): the holes of [off, end) become unwritten — reserved, their
 * room promised (core/resv.h), zeros, no memory. Mode 0 past the end
 * makes [old end, end) part of the value. Returns 0, -EDQUOT (no room to
 * promise), -ENOSPC, -EFBIG or -ENOMEM.
 */
static int fallocate_locked(struct kv_inode *ino, int mode, uint64_t off, uint64_t end)
{
	uint64_t old = kv_cur_size(ino), resv = kv_resv_count(ino->ki_resv);
	uint64_t size = (mode & FALLOC_FL_KEEP_SIZE) || end <= old ? old : end;
	struct owe_change ch;
	struct kv_obj *obj;
	int64_t owed;
	int err;

	if (mode & FALLOC_FL_PUNCH_HOLE)
		return punch_locked(ino, off, end);
	err = kv_quota_resv_take(ino, off >> KV_EXTENT_SHIFT,
				 (end + KV_EXTENT - 1) >> KV_EXTENT_SHIFT);
	if (err)
		return err;
	if (size == old) {
		kv_quota_resv_persist(ino, resv);
		return 0;
	}
	err = kv_write_writable(ino, old, &obj);
	if (err)
		return err;
	err = kv_write_unspill(ino, obj, old & ~(KV_EXTENT - 1), UINT64_MAX, UINT64_MAX);
	/* A new version: its record, and the extent of the old end it fills. */
	ch = (struct owe_change){.oc_old = old, .oc_size = size, .oc_n = 1, .oc_r = {{size, size}}};
	owed = err ? 0 : kv_quota_owe(ino->ki_store, ino, obj, &ch);
	if (owed < 0)
		err = (int)owed;
	if (!err)
		err = kv_obj_reserve(obj, size, false);
	if (!err)
		kv_quota_owe_set(ino->ki_store, obj, &ch);
	else
		kv_quota_unowe(ino->ki_store, owed);
	return kv_write_conclude(ino, obj, old, err);
}

int kv_store_fallocate(struct kv_store *st, struct kv_inode *ino, int mode, uint64_t off,
		       uint64_t len)
{
	int err;

	if (mode & ~(FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE))
		return -EOPNOTSUPP;
	if ((mode & FALLOC_FL_PUNCH_HOLE) && !(mode & FALLOC_FL_KEEP_SIZE))
		return -EOPNOTSUPP; /* as on Linux: a punch never changes the size */
	err = kv_value_range(ino, off, len);
	if (err)
		return err;
	do {
		pthread_rwlock_wrlock(&ino->ki_lock);
		err = fallocate_locked(ino, mode, off, off + len);
		pthread_rwlock_unlock(&ino->ki_lock);
	} while (kv_write_retry_for_room(st, ino, &err, len));
	kv_quota_resv_journal(st, ino); /* even on failure: a punch may have given some back */
	return err;
}
