/* SPDX-License-Identifier: MIT */
/*
 * core/attr.c — attributes (core/store.h): what getattr shows (size,
 * allocation with unwritten extents, sequence number, tier) and setattr
 * (mode, owner, times; a size change is a truncate, core/write.h), journaled.
 *
 * Layer: below the namespace (core/ns.c, which fills a lookup's and a
 * create's attributes with kv_attr_fill), above writes (core/write.h) and
 * the quota (core/quota.h). It calls nothing above it.
 *
 * Locks: ki_lock; ks_ns_lock (shared) to journal a setattr, after ki_lock
 * is let go.
 */
#include "core/store.h"
#include "core/attr.h"
#include "core/persist.h"
#include "core/quota.h"
#include "core/store_int.h"
#include "core/write.h"

#include <errno.h>
#include <string.h>

#define now kv_inode_now

void kv_attr_fill(struct kv_inode *ino, struct kv_attr *a)
{
	pthread_rwlock_rdlock(&ino->ki_lock);
	a->ka_ino = ino->ki_ino;
	a->ka_mode = ino->ki_mode;
	a->ka_nlink = atomic_load(&ino->ki_nlink);
	a->ka_uid = ino->ki_uid;
	a->ka_gid = ino->ki_gid;
	a->ka_atime = ino->ki_atime;
	a->ka_mtime = ino->ki_mtime;
	a->ka_ctime = ino->ki_ctime;
	a->ka_tier = KV_TIER_NONE;
	if (S_ISDIR(ino->ki_type)) {
		a->ka_size = 4096;
		a->ka_alloc = 0;
		a->ka_seq = 0;
	} else if (!S_ISREG(ino->ki_type)) {
		/* Metadata only: a symlink's size is its target's length, as lstat reports. */
		a->ka_size = ino->ki_link ? strlen(ino->ki_link) : 0;
		a->ka_alloc = 0;
		a->ka_seq = 0;
	} else if (ino->ki_obj && !ino->ki_obj->ko_partial) {
		const struct kv_obj *o = ino->ki_obj;

		a->ka_size = o->ko_size;
		/* Spilled or borrowed extents are allocated too, on the SSD. */
		a->ka_alloc = o->ko_cap + (ino->ki_spill ? kv_xmap_alloc(ino->ki_spill) : 0);
		a->ka_seq = o->ko_sealed ? o->ko_seq : 0;
		a->ka_tier =
		    o->ko_sealed && ino->ki_map.xm_seq == o->ko_seq ? KV_TIER_BOTH : KV_TIER_DRAM;
	} else {
		a->ka_size = ino->ki_map.xm_size;
		a->ka_alloc = kv_xmap_alloc(&ino->ki_map);
		a->ka_seq = ino->ki_map.xm_seq;
		a->ka_tier = ino->ki_obj ? KV_TIER_PART : KV_TIER_SSD;
	}
	a->ka_alloc += kv_quota_unwritten_bytes(ino);
	pthread_rwlock_unlock(&ino->ki_lock);
}

int kv_store_getattr(struct kv_store *st, struct kv_inode *ino, struct kv_attr *attr)
{
	kv_attr_fill(ino, attr);
	return 0;
}

static int setattr_locked(struct kv_inode *ino, const struct kv_setattr *sa)
{
	unsigned v = sa->ksa_valid;
	struct timespec ts;
	int err;

	now(&ts);
	if (v & KV_SET_SIZE) {
		err = kv_write_set_size(ino, sa->ksa_size);
		if (err)
			return err;
		kv_write_settle(ino);
	}
	if (v & KV_SET_MODE)
		ino->ki_mode = ino->ki_type | (sa->ksa_mode & 07777);
	if (v & KV_SET_UID)
		ino->ki_uid = sa->ksa_uid;
	if (v & KV_SET_GID)
		ino->ki_gid = sa->ksa_gid;
	if (v & KV_SET_ATIME)
		ino->ki_atime = (v & KV_SET_ATIME_NOW) ? ts : sa->ksa_atime;
	if (v & KV_SET_MTIME)
		ino->ki_mtime = (v & KV_SET_MTIME_NOW) ? ts : sa->ksa_mtime;
	ino->ki_ctime = ts;
	return 0;
}

int kv_store_setattr(struct kv_store *st, struct kv_inode *ino, const struct kv_setattr *sa,
		     struct kv_attr *attr)
{
	int err;

	if ((sa->ksa_valid & KV_SET_SIZE) && !S_ISREG(ino->ki_type))
		return kv_no_value(ino);
	if ((sa->ksa_valid & KV_SET_SIZE) && sa->ksa_size > KV_MAX_VALUE)
		return -EFBIG;
	do {
		pthread_rwlock_wrlock(&ino->ki_lock);
		err = setattr_locked(ino, sa);
		pthread_rwlock_unlock(&ino->ki_lock);
	} while (kv_write_retry_for_room(st, ino, &err, sa->ksa_size));
	if (!err && (sa->ksa_valid & KV_SET_SIZE))
		kv_quota_resv_journal(st, ino);
	if (err)
		return err;
	if (st->ks_journal && (sa->ksa_valid & ~KV_SET_SIZE)) {
		pthread_rwlock_rdlock(&st->ks_ns_lock);
		kv_persist_setattr(st, ino);
		pthread_rwlock_unlock(&st->ks_ns_lock);
	}
	kv_attr_fill(ino, attr);
	return 0;
}
