/* SPDX-License-Identifier: MIT */
/*
 * core/quota.c — the room promised to changes (core/quota.h): the SSD quota
 * each change of a version owes before it is acknowledged (kv_quota_owe,
 * core/obj.h "SSD quota owed"), the room of reserved extents (fallocate's
 * unwritten extents, core/resv.h) promised by the bucket set or the pool,
 * and the journaling of reservations that changed without a new version.
 *
 * Layer: the bottom of the namespace's parts, called by writes
 * (core/write.c), fallocate, attributes, the namespace and core/store.c;
 * it calls only the tier (its bucket set), persistence, the pool and the
 * object model.
 *
 * Locks: its callers hold ki_lock (exclusive) but for
 * kv_quota_resv_journal, which takes ks_ns_lock (shared) > ki_lock; the
 * bucket set's and the pool's locks below them (core/store_int.h).
 */
#include "core/store.h"
#include "core/persist.h"
#include "core/quota.h"
#include "core/store_int.h"
#include "core/tier.h"

#include <errno.h>
#include <stdlib.h>

/*
 * Promises the room of n reserved extents (core/resv.h): the SSD quota of
 * one record each with a tier, else one extent of the pool each. Returns 0
 * or -EDQUOT.
 */
static int promise(struct kv_store *st, uint64_t n)
{
	if (st->ks_tier)
		return kv_bucket_reserve(kv_tier_buckets(st->ks_tier), n * KV_RESV_BYTES, false)
			   ? -EDQUOT
			   : 0;
	return kv_pool_reserve(st->ks_pool, n * KV_EXTENT, false) ? -EDQUOT : 0;
}

/*
 * Promises the SSD quota that change c of obj adds; once it is made, the
 * caller gives that to obj (kv_quota_owe_set), or, if it fails, back to the bucket
 * set (unowe). An overwrite (ino, ki_lock held exclusive) may count on the
 * bytes of the durable version it replaces, which die once it is placed:
 * so overwrites go on at a full quota, the buckets passing it by at most
 * what compaction then reclaims. Returns the bytes promised, or -EDQUOT.
 */
int64_t kv_quota_owe(struct kv_store *st, struct kv_inode *ino, struct kv_obj *obj,
		     const struct owe_change *c)
{
	struct kv_bucket_set *bs = st->ks_tier ? kv_tier_buckets(st->ks_tier) : NULL;
	uint64_t need = 0, size, credit;

	for (unsigned i = 0; bs && i < c->oc_n; i++)
		need += kv_obj_owe_need(obj, c->oc_old, c->oc_size, c->oc_r[i].or_off,
					c->oc_r[i].or_end, OWE_OVER, i == 0);
	if (!need || kv_bucket_reserve(bs, need, false) == 0)
		return (int64_t)need;
	if (!ino || !ino->ki_map.xm_seq)
		return -EDQUOT;
	if (ino->ki_credit_seq != ino->ki_map.xm_seq) {
		ino->ki_credit_seq = ino->ki_map.xm_seq;
		ino->ki_credit = 0;
	}
	/* What the durable version's records would have owed: about what they take. */
	size = ino->ki_map.xm_size;
	credit = (size + KV_PAGE_SIZE - 1) / KV_PAGE_SIZE * KV_PAGE_SIZE +
		 ((size + KV_EXTENT - 1) / KV_EXTENT + 1) * OWE_OVER;
	if (credit < ino->ki_credit || need > credit - ino->ki_credit)
		return -EDQUOT;
	ino->ki_credit += need;
	kv_bucket_reserve(bs, need, true);
	return (int64_t)need;
}

/* Gives obj the quota owe promised for change c, now made. */
void kv_quota_owe_set(struct kv_store *st, struct kv_obj *obj, const struct owe_change *c)
{
	for (unsigned i = 0; st->ks_tier && i < c->oc_n; i++)
		kv_obj_owe_set(obj, c->oc_old, c->oc_r[i].or_off, c->oc_r[i].or_end, OWE_OVER,
			       i == 0);
}

/* Gives back what owe promised for a change that failed. */
void kv_quota_unowe(struct kv_store *st, int64_t owed)
{
	if (owed > 0)
		kv_bucket_unreserve(kv_tier_buckets(st->ks_tier), (uint64_t)owed);
}

/* The change of obj that writes [off, end) and leaves the size at size. */
struct owe_change kv_quota_owe_of_write(const struct kv_obj *obj, uint64_t off, uint64_t end,
					uint64_t size)
{
	return (struct owe_change){.oc_old = obj->ko_size,
				   .oc_size = size,
				   .oc_n = 1,
				   .oc_r = {{off, end}}};
}

/* Takes back the promise of n reserved extents (none to take back once the tier is gone). */
void kv_quota_unpromise(struct kv_store *st, uint64_t n)
{
	if (!n)
		return;
	if (st->ks_tier)
		kv_bucket_unreserve(kv_tier_buckets(st->ks_tier), n * KV_RESV_BYTES);
	else if (st->ks_datadir_fd < 0 || !st->ks_cfg->kc_ssd_size) /* DRAM only */
		kv_pool_unreserve(st->ks_pool, n * KV_EXTENT);
}

/* --- reserved extents (core/resv.h; ki_lock held) --- */

/* True when m has a record with bytes of extent k. */
static bool map_has(const struct kv_xmap *m, uint64_t k)
{
	int64_t at;

	if (!m->xm_seq && !m->xm_n)
		return false;
	if (kv_xmap_whole(m)) /* one record, however long (version 1) */
		return k << KV_EXTENT_SHIFT < m->xm_one.xe_loc.kl_len;
	at = kv_xmap_find(m, (uint32_t)k);
	return at >= 0 && kv_xmap_cat(m, (uint32_t)at)->xe_loc.kl_len > 0;
}

/* True when extent k of ino's newest version has data: in DRAM, spilled, borrowed or on the SSD. */
static bool has_data(const struct kv_inode *ino, uint64_t k)
{
	const struct kv_obj *o = ino->ki_obj;

	if (!o)
		return map_has(&ino->ki_map, k);
	if (kv_obj_has_data(o, k))
		return true;
	if (kv_spill_n(ino))
		return map_has(ino->ki_spill, k);
	return o->ko_partial && map_has(&ino->ki_map, k);
}

/* One past the last extent of ino's newest version that may hold data. */
static uint64_t data_span(const struct kv_inode *ino)
{
	const struct kv_obj *o = ino->ki_obj;
	const struct kv_xmap *maps[2] = {!o || o->ko_partial ? &ino->ki_map : NULL,
					 kv_spill_n(ino) ? ino->ki_spill : NULL};
	uint64_t n = o ? o->ko_nx : 0;

	for (int i = 0; i < 2; i++) {
		uint32_t nx = maps[i] ? kv_xmap_nx(maps[i]) : 0;
		const struct kv_loc *l = nx ? &kv_xmap_cat(maps[i], nx - 1)->xe_loc : NULL;
		uint64_t end = !l ? 0
			       : kv_xmap_whole(maps[i])
				   ? (l->kl_len + KV_EXTENT - 1) >> KV_EXTENT_SHIFT
				   : (uint64_t)l->kl_index + 1;

		n = end > n ? end : n;
	}
	return n;
}

/*
 * Bytes of ino's reserved extents that hold no data yet: unwritten,
 * allocated all the same. O(the smaller of its reserved extents and its
 * extents up to the last with data).
 */
uint64_t kv_quota_unwritten_bytes(const struct kv_inode *ino)
{
	const struct kv_resv *rv = S_ISREG(ino->ki_type) ? ino->ki_resv : NULL;
	uint64_t n = 0, span;

	if (!rv)
		return 0;
	span = data_span(ino);
	if (rv->rv_count <= span) {
		for (uint32_t i = 0; i < rv->rv_n; i++)
			for (uint64_t k = rv->rv_r[i].xr_first; k < rv->rv_r[i].xr_end; k++)
				n += !has_data(ino, k);
	} else {
		n = rv->rv_count; /* all, but those with data */
		for (uint64_t k = 0; k < span; k++)
			n -= has_data(ino, k) && kv_resv_has(rv, (uint32_t)k);
	}
	return n << KV_EXTENT_SHIFT;
}

/* True when extent k of ino could be reserved: no data, not reserved. */
static bool reservable(const struct kv_inode *ino, uint64_t k)
{
	return !has_data(ino, k) && !kv_resv_has(ino->ki_resv, (uint32_t)k);
}

/*
 * Reserves the extents of [k0, k1) that hold no data and are not reserved
 * yet (ki_lock held exclusive): their quota first, then the set. Returns
 * 0, -EDQUOT (the SSD cannot promise the room) or -ENOMEM (nothing
 * reserved that was not before, or the ranges added before it ran out).
 */
int kv_quota_resv_take(struct kv_inode *ino, uint64_t k0, uint64_t k1)
{
	uint64_t n = 0, k, e;
	int err = 0;

	for (k = k0; k < k1; k++)
		n += reservable(ino, k);
	if (!n)
		return 0;
	if (promise(ino->ki_store, n))
		return -EDQUOT;
	for (k = k0; k < k1 && !err; k = e) {
		for (e = k; e < k1 && reservable(ino, e); e++)
			;
		err = kv_resv_add(&ino->ki_resv, (uint32_t)k, (uint32_t)e);
		if (!err)
			n -= e - k;
		e += e == k; /* past one that has data or a reservation */
	}
	kv_quota_unpromise(ino->ki_store, n); /* what could not be added */
	return err;
}

/* Takes back the reservations of extents [k0, k1). Returns 0 or -ENOMEM (nothing taken). */
int kv_quota_resv_drop(struct kv_inode *ino, uint64_t k0, uint64_t k1)
{
	struct kv_store *st = ino->ki_store;
	uint32_t hi = k1 < UINT32_MAX ? (uint32_t)k1 : UINT32_MAX;
	int64_t n;

	if (!ino->ki_resv || k0 >= hi)
		return 0;
	n = kv_resv_cut(&ino->ki_resv, (uint32_t)k0, hi);
	if (n > 0)
		kv_quota_unpromise(st, (uint64_t)n);
	return n < 0 ? (int)n : 0;
}

/* True when ino's version in DRAM (if any) is its durable one: nothing to offload. */
static bool durable_now(const struct kv_inode *ino)
{
	const struct kv_obj *o = ino->ki_obj;

	return ino->ki_map.xm_seq && (!o || (o->ko_sealed && o->ko_seq == ino->ki_map.xm_seq));
}

/*
 * ino's reservations changed without a new version (they were `before`
 * extents; ki_lock held exclusive): they are journaled with the durable
 * version by kv_quota_resv_journal once ki_lock is let go — unless a newer
 * version's offload will.
 */
void kv_quota_resv_persist(struct kv_inode *ino, uint64_t before)
{
	if (kv_resv_count(ino->ki_resv) != before && durable_now(ino))
		ino->ki_resv_dirty = true;
}

/*
 * Journals ino's changed reservations (no lock held: it takes ks_ns_lock,
 * for the key's path, and ki_lock, in that order — never held across a
 * change that may read the SSD).
 */
void kv_quota_resv_journal(struct kv_store *st, struct kv_inode *ino)
{
	if (!st->ks_journal)
		return;
	pthread_rwlock_rdlock(&st->ks_ns_lock);
	pthread_rwlock_wrlock(&ino->ki_lock);
	if (ino->ki_resv_dirty && durable_now(ino))
		kv_persist_put(st, ino);
	ino->ki_resv_dirty = false;
	pthread_rwlock_unlock(&ino->ki_lock);
	pthread_rwlock_unlock(&st->ks_ns_lock);
}
