/* SPDX-License-Identifier: MIT */
/*
 * core/write.c — writes and versions (core/store.h): the copy-on-write
 * step (a sealed value copied, loaded from the SSD, or its records
 * borrowed), installing or abandoning the new version, sealing it
 * (at the last close, at fsync, for a publish) and queueing it for the
 * SSD, bringing spilled extents back (unspill), truncate (set_size),
 * write, open and release, fsync, and the retry when the pool or the SSD
 * had no room.
 *
 * Layer: below the namespace (core/ns.c), attributes (core/attr.c) and
 * fallocate (core/fallocate.c), which call its kv_write_* helpers
 * (core/write.h); above the quota (core/quota.h), the tier, persistence
 * and the object model. It calls nothing above it.
 *
 * Locks: ki_lock (exclusive) for a change, let go before waiting for room
 * (kv_write_retry_for_room); kv_quota_resv_journal after it, taking
 * ks_ns_lock > ki_lock. The whole order is in core/store_int.h.
 */
#include "core/store.h"
#include "core/persist.h"
#include "core/quota.h"
#include "core/store_int.h"
#include "core/tier.h"
#include "core/write.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#define now kv_inode_now

/*
 * Pins or unpins the buckets of every record ino's versions hold (durable
 * and spilled): a file deleted while open keeps reading them (ki_lock held
 * exclusive, or the inode dying).
 */
void kv_write_pin_records(struct kv_inode *ino, bool pin)
{
	struct kv_bucket_set *bs = kv_tier_buckets(ino->ki_store->ks_tier);

	kv_xmap_pin(bs, &ino->ki_map, pin);
	if (ino->ki_spill)
		kv_xmap_pin(bs, ino->ki_spill, pin);
}

/*
 * Copies the first `keep` bytes of a value that is only on SSD into a new
 * open object (ki_lock held exclusive): reads the extents that hold them.
 * Returns 0, -ENOSPC or -EIO.
 */
static int load_prefix(struct kv_inode *ino, uint64_t keep, struct kv_obj **out)
{
	struct kv_store *st = ino->ki_store;
	struct kv_bucket_set *bs = kv_tier_buckets(st->ks_tier);
	struct kv_xmap *m = &ino->ki_map;
	struct kv_obj *obj;
	uint64_t len = keep;
	uint32_t first, end;
	int err;

	kv_xmap_range(m, 0, keep, &first, &end);
	/* The object first holds the extents read whole, then is cut to keep. */
	if (end) {
		const struct kv_loc *l = &kv_xmap_at(m, end - 1)->xe_loc;
		uint64_t reach = ((uint64_t)l->kl_index << KV_EXTENT_SHIFT) + l->kl_len;

		len = reach > keep ? reach : keep;
	}
	err = kv_obj_new(st->ks_pool, &obj);
	if (err)
		return err;
	err = kv_obj_truncate(obj, len);
	if (!err)
		err = kv_xmap_load_csums(bs, m, first, end);
	if (!err)
		err = kv_xmap_read_obj(bs, m, first, end, obj);
	if (!err)
		err = kv_obj_truncate(obj, keep);
	if (err)
		goto out_put;
	*out = obj;
	return 0;

out_put:
	kv_obj_put(obj);
	return err;
}

/*
 * The copy-on-write step for a value of extents on the SSD, not (all) in
 * DRAM: a new open version of `keep` bytes that shares the extents `base`
 * (the clean version partly in DRAM, or NULL) has in memory, and whose
 * other extents are holes in memory *borrowed* in ki_spill — the durable
 * version's records, which it shares (their birth sequence numbers are
 * older than the new version's) — so a change reads back only the extents
 * it touches (unspill), and the seal writes only those (ki_lock held
 * exclusive). The caller installs it, or abandons it (which lets the
 * borrowed records go). Returns 0, -ENOMEM, -ENOSPC, -EIO.
 */
static int borrow(struct kv_inode *ino, uint64_t keep, struct kv_obj *base, struct kv_obj **out)
{
	struct kv_store *st = ino->ki_store;
	struct kv_bucket_set *bs = kv_tier_buckets(st->ks_tier);
	struct kv_xmap *m = &ino->ki_map, *sp;
	struct kv_loc *locs = NULL;
	uint64_t **csums = NULL;
	uint32_t first, end, n = 0;
	struct kv_obj *obj = NULL;
	int err = 0;

	kv_xmap_range(m, 0, keep, &first, &end);
	for (uint32_t i = first; !err && i < end; i++)
		if (!base || !kv_obj_has_data(base, kv_xmap_cat(m, i)->xe_loc.kl_index))
			err = kv_xmap_load_csums(bs, m, i, i + 1);
	if (!err && !ino->ki_spill) {
		ino->ki_spill = calloc(1, sizeof(*ino->ki_spill));
		err = ino->ki_spill ? 0 : -ENOMEM;
	}
	if (!err)
		err = base ? kv_obj_clone(base, keep, &obj) : kv_obj_new(st->ks_pool, &obj);
	if (!err && !base)
		err = kv_obj_truncate(obj, keep); /* holes: no memory */
	sp = ino->ki_spill;
	if (!err) {
		locs = malloc((end - first + 1) * sizeof(*locs));
		csums = calloc(end - first + 1, sizeof(*csums));
		err = locs && csums ? 0 : -ENOMEM;
	}
	/* The records of the extents not in memory, each with its own copy of the checksums. */
	for (uint32_t i = first; !err && i < end; i++) {
		const struct kv_xent *x = kv_xmap_cat(m, i);

		if (base && kv_obj_has_data(base, x->xe_loc.kl_index))
			continue;
		locs[n] = x->xe_loc;
		csums[n] = kv_csums_dup(&x->xe_loc, x->xe_csums);
		err = csums[n++] ? 0 : -ENOMEM;
	}
	if (!err) {
		sp->xm_seq = atomic_fetch_add(&st->ks_seq, 1) + 1;
		sp->xm_size = UINT64_MAX;
		err = kv_xmap_add(sp, locs, csums, n);
	}
	for (uint32_t i = 0; err && csums && i < n; i++)
		free(csums[i]); /* not taken by the map */
	free(locs);
	free(csums);
	if (err) {
		kv_spill_free(ino); /* held nothing before (writable): no map of sequence 0 stays */
		if (obj)
			kv_obj_put(obj);
		return err;
	}
	if (ino->ki_pinned) /* deleted while open: its records' buckets stay, as
			       kv_write_pin_records */
		kv_xmap_pin(bs, sp, true);
	*out = obj;
	return 0;
}

/*
 * Returns in *out the version of a regular file to modify (ki_lock held
 * exclusive): the current one while it is open, else a copy-on-write copy
 * of its first `keep` bytes (from DRAM, or from the SSD when the value is
 * only there), not yet installed, so a change that fails leaves the file
 * exactly as it was. Returns 0, -ENOSPC or -EIO.
 */
int kv_write_writable(struct kv_inode *ino, uint64_t keep, struct kv_obj **out)
{
	struct kv_obj *cur = ino->ki_obj;

	if (cur && !cur->ko_sealed) {
		*out = cur;
		return 0;
	}
	/* Part of it is on the SSD, not yet durable: wait for it, unless it failed. */
	if (cur && kv_spill_n(ino))
		return ino->ki_offload_err == -ENOSPC ? -EDQUOT
		       : ino->ki_offload_err	      ? ino->ki_offload_err
						      : -EINPROGRESS;
	if (cur && (!cur->ko_partial || keep == 0))
		return kv_obj_clone(cur, keep, out);
	if (keep == 0 || ino->ki_map.xm_size == 0)
		return kv_obj_new(ino->ki_store->ks_pool, out);
	if (!kv_xmap_whole(&ino->ki_map)) /* partly in DRAM (cur), or not at all */
		return borrow(ino, keep < ino->ki_map.xm_size ? keep : ino->ki_map.xm_size, cur,
			      out);
	return load_prefix(ino, keep < ino->ki_map.xm_size ? keep : ino->ki_map.xm_size, out);
}

/*
 * Makes obj (from kv_write_writable(), now changed) the current version, accounts
 * the size change, and stamps mtime and ctime (ki_lock held exclusive).
 */
static void install(struct kv_inode *ino, struct kv_obj *obj, uint64_t old_size)
{
	struct kv_store *st = ino->ki_store;

	if (obj != ino->ki_obj) {
		if (ino->ki_obj)
			kv_obj_put(ino->ki_obj);
		ino->ki_obj = obj;
	}
	if (st->ks_tier) /* what was read ahead is another version's */
		kv_tier_ra_drop(st->ks_tier, ino);
	ino->ki_offload_err = 0;
	kv_touch(ino);
	/* namespace.bytes counts keys with a name only. */
	if (atomic_load(&ino->ki_nlink) && obj->ko_size > old_size)
		atomic_fetch_add(&st->ks_bytes, obj->ko_size - old_size);
	else if (atomic_load(&ino->ki_nlink))
		atomic_fetch_sub(&st->ks_bytes, old_size - obj->ko_size);
	now(&ino->ki_mtime);
	ino->ki_ctime = ino->ki_mtime;
}

/*
 * Drops a version kv_write_writable() made when the change to it failed, and the
 * records it borrowed (ki_map still holds them: none dies).
 */
static void abandon(struct kv_inode *ino, struct kv_obj *obj)
{
	if (obj != ino->ki_obj) {
		kv_obj_put(obj);
		if (ino->ki_pinned && ino->ki_spill)
			kv_xmap_pin(kv_tier_buckets(ino->ki_store->ks_tier), ino->ki_spill, false);
		kv_spill_free(ino);
	}
}

/* Seals the open version (ki_lock held exclusive) and queues it for the SSD. */
void kv_write_seal(struct kv_inode *ino)
{
	struct kv_store *st = ino->ki_store;

	/* A version that spilled took its sequence number then. */
	if (ino->ki_spill && !ino->ki_spill->xm_n)
		kv_spill_free(ino);
	kv_obj_seal(ino->ki_obj, ino->ki_spill ? ino->ki_spill->xm_seq
					       : atomic_fetch_add(&st->ks_seq, 1) + 1);
	if (st->ks_tier)
		kv_tier_enqueue(st->ks_tier, ino);
	if (st->ks_hooks.kh_sealed && atomic_load(&ino->ki_nlink))
		st->ks_hooks.kh_sealed(st->ks_hooks.kh_arg, ino, ino->ki_obj->ko_seq,
				       ino->ki_obj->ko_size);
}

/* Seals an open version nobody has open any more (ki_lock held exclusive). */
void kv_write_settle(struct kv_inode *ino)
{
	struct kv_obj *obj = ino->ki_obj;

	if (ino->ki_nopen == 0 && obj && !obj->ko_sealed)
		kv_write_seal(ino);
}

/*
 * Ends a change made to version obj (from kv_write_writable()): with err it is
 * dropped (abandon), else it becomes the current one (install), sealed
 * unless someone has the file open (settle). Returns err.
 */
int kv_write_conclude(struct kv_inode *ino, struct kv_obj *obj, uint64_t old, int err)
{
	if (err) {
		abandon(ino, obj);
		return err;
	}
	install(ino, obj, old);
	kv_write_settle(ino);
	return 0;
}

/*
 * Before the open version obj changes bytes [from, to) (to UINT64_MAX: up
 * to its end): its spilled extents there come back into memory, or, wholly
 * at or past `cut` (the new size of a truncate; UINT64_MAX otherwise), are
 * let go. Their records die (ki_lock held exclusive). Returns 0, -ENOSPC
 * or -EIO (what came back so far stays back: the bytes are the same).
 */
int kv_write_unspill(struct kv_inode *ino, struct kv_obj *obj, uint64_t from, uint64_t to,
		     uint64_t cut)
{
	struct kv_bucket_set *bs;
	struct kv_xmap *sp = ino->ki_spill;
	uint32_t first, end, i;
	int err = 0;

	if (!sp || !sp->xm_n || from >= to)
		return 0;
	bs = kv_tier_buckets(ino->ki_store->ks_tier);
	sp->xm_size = UINT64_MAX; /* the range lookup clips to it */
	kv_xmap_range(sp, from, to - from, &first, &end);
	for (i = first; !err && i < end; i++) {
		struct kv_xent *x = kv_xmap_at(sp, i);
		uint64_t base = (uint64_t)x->xe_loc.kl_index << KV_EXTENT_SHIFT;

		if (base < cut && base < obj->ko_size) {
			/* The record may reach past a size cut short (truncate): read it whole. */
			uint64_t size = obj->ko_size, reach = base + x->xe_loc.kl_len;

			err = reach > size ? kv_obj_truncate(obj, reach) : 0;
			if (!err)
				err = kv_xmap_read_obj(bs, sp, i, i + 1, obj);
			if (reach > size)
				kv_obj_truncate(obj, size); /* shrinking never fails */
		}
		if (err)
			break;
		/*
		 * Dead now: unless deleted while open, which counted it already, or
		 * borrowed from the durable version (an older birth sequence number),
		 * which still holds it.
		 */
		if (ino->ki_pinned)
			kv_bucket_pin(bs, x->xe_loc.kl_bucket, false);
		else if (x->xe_loc.kl_seq == sp->xm_seq)
			kv_bucket_dead(bs, &x->xe_loc);
	}
	kv_xmap_cut(sp, first, i);
	return err;
}

/* Sets the size of a regular file (ki_lock held exclusive). */
int kv_write_set_size(struct kv_inode *ino, uint64_t size)
{
	uint64_t old = kv_cur_size(ino), resv = kv_resv_count(ino->ki_resv);
	struct owe_change ch;
	struct kv_obj *obj;
	int64_t owed;
	int err;

	/*
	 * Reserved extents past the end go, as ext4 frees the blocks past it
	 * (truncating to the size drops a KEEP_SIZE fallocate); never fails:
	 * no range splits.
	 */
	if (size <= old)
		kv_quota_resv_drop(ino, (size + KV_EXTENT - 1) >> KV_EXTENT_SHIFT, UINT64_MAX);
	if (size == old && (!ino->ki_obj || ino->ki_obj->ko_sealed)) {
		kv_quota_resv_persist(ino, resv);
		return 0;
	}
	err = kv_write_writable(ino, size, &obj);
	if (err)
		return err;
	/* A new version: its record, and the extent the new end cuts or fills. */
	ch = (struct owe_change){.oc_old = old, .oc_size = size, .oc_n = 1, .oc_r = {{size, size}}};
	owed = kv_quota_owe(ino->ki_store, ino, obj, &ch);
	err = owed < 0 ? (int)owed : 0;
	/* The extent of the smaller end, and all past it. */
	if (!err)
		err = kv_write_unspill(ino, obj, (size < old ? size : old) & ~(KV_EXTENT - 1),
				       UINT64_MAX, size);
	if (!err)
		err = kv_obj_truncate(obj, size);
	if (err) {
		kv_quota_unowe(ino->ki_store, owed);
		abandon(ino, obj);
		return err;
	}
	kv_quota_owe_set(ino->ki_store, obj, &ch);
	install(ino, obj, old);
	return 0;
}

/*
 * True when a change that failed with *errp should be tried again: the
 * pool was full and the tier made room (evicted clean values, or waited for
 * the offloader to make some clean or to spill files being written). Call
 * without ki_lock. -EDQUOT, inside the store's files, is a refusal for
 * lack of room on the SSD (or in the whole store), not in the pool: never
 * retried, it reaches the caller as -ENOSPC.
 */
bool kv_write_retry_for_room(struct kv_store *st, struct kv_inode *ino, int *errp, uint64_t bytes)
{
	uint64_t pool = kv_pool_size(st->ks_pool), seq = 0;
	int err = *errp;

	if (err == -EDQUOT) { /* no room on the SSD: the offload or compaction may give some */
		if (st->ks_tier && kv_tier_quota_room(st->ks_tier) == 0)
			return true;
		*errp = -ENOSPC;
		return false;
	}
	if (err == -EINPROGRESS) { /* a spilled version on its way to the SSD: wait for it */
		pthread_rwlock_rdlock(&ino->ki_lock);
		if (ino->ki_obj)
			seq = ino->ki_obj->ko_seq;
		pthread_rwlock_unlock(&ino->ki_lock);
		err = kv_tier_wait_durable(st->ks_tier, ino, seq);
		if (err && err != -EAGAIN) { /* it failed: so does the change */
			*errp = err;
			return false;
		}
		return true; /* durable, or replaced: look again */
	}
	if (err != -ENOSPC || !st->ks_tier)
		return false;
	/* Asking for more than the pool would empty the DRAM cache for nothing. */
	return bytes <= pool && kv_tier_make_room(st->ks_tier, bytes) == 0;
}

/* --- file contents --- */

int kv_store_open(struct kv_store *st, struct kv_inode *ino, int flags)
{
	int err;

	if (!S_ISREG(ino->ki_type))
		return kv_no_value(ino);
	do {
		pthread_rwlock_wrlock(&ino->ki_lock);
		err = (flags & O_TRUNC) ? kv_write_set_size(ino, 0) : 0;
		if (!err) {
			ino->ki_nopen++;
			kv_inode_get(ino);
			atomic_fetch_add(&st->ks_open, 1);
		}
		pthread_rwlock_unlock(&ino->ki_lock);
	} while (kv_write_retry_for_room(st, ino, &err, KV_PAGE_SIZE));
	if (!err && (flags & O_TRUNC))
		kv_quota_resv_journal(st, ino);
	return err;
}

void kv_store_release(struct kv_store *st, struct kv_inode *ino, int flags)
{
	pthread_rwlock_wrlock(&ino->ki_lock);
	ino->ki_nopen--;
	if (ino->ki_nopen == 0 && ino->ki_pinned) {
		kv_write_pin_records(ino, false);
		ino->ki_pinned = false;
	}
	kv_write_settle(ino);
	if (ino->ki_nopen == 0 && st->ks_tier) {
		kv_tier_unspillable(st->ks_tier, ino);
		kv_tier_ra_drop(st->ks_tier, ino);
	}
	pthread_rwlock_unlock(&ino->ki_lock);
	atomic_fetch_sub(&st->ks_open, 1);
	kv_inode_put(ino);
}

/* Reserved extents one write fills at most (a FUSE write is at most 1 MiB: two). */
#define FILL_MAX 16

/*
 * Without an SSD tier, the reserved extents [off, end) touches take their
 * memory from the pool's promise before it is written (ki_lock held
 * exclusive; obj the version being written, grown to end first): whole
 * zeroed extents of its own, so the write neither fails for room there
 * nor copies a shared block. With a tier the offload fills them
 * (core/tier.c). Returns how many it filled, their indexes in k.
 */
static unsigned fill_reserved(struct kv_inode *ino, struct kv_obj *obj, uint64_t off, uint64_t end,
			      uint64_t *k)
{
	unsigned n = 0;

	for (uint64_t x = off >> KV_EXTENT_SHIFT;
	     ino->ki_resv && n < FILL_MAX && x << KV_EXTENT_SHIFT < end; x++) {
		if (!kv_resv_has(ino->ki_resv, (uint32_t)x) || kv_obj_has_data(obj, x) ||
		    kv_obj_fill_reserved(obj, x))
			continue; /* not reserved, or no blocks: written as any other */
		kv_resv_cut(&ino->ki_resv, (uint32_t)x, (uint32_t)x + 1); /* no split: a hole */
		k[n++] = x;
	}
	return n;
}

/*
 * The write that filled extents k[0..n) failed: those whose memory goes
 * with its undo (all of a copy about to be dropped, keep 0; those at or
 * past keep, the old size, of the open version cut back to it) are
 * promised and reserved again, before their memory is freed.
 */
static void unfill(struct kv_inode *ino, const uint64_t *k, unsigned n, uint64_t keep)
{
	struct kv_pool *pool = ino->ki_store->ks_pool;

	for (unsigned i = 0; i < n; i++) {
		if (k[i] << KV_EXTENT_SHIFT < keep)
			continue; /* stays in the open version, zeros */
		kv_pool_reserve(pool, KV_EXTENT, true);
		if (kv_resv_add(&ino->ki_resv, (uint32_t)k[i], (uint32_t)k[i] + 1))
			kv_pool_unreserve(pool, KV_EXTENT);
	}
}

static int write_locked(struct kv_inode *ino, uint64_t off, const void *buf, size_t len)
{
	uint64_t old = kv_cur_size(ino), filled[FILL_MAX];
	struct owe_change ch;
	struct kv_obj *obj;
	int64_t owed;
	unsigned nfill = 0;
	int err;

	/* A write that covers the whole value need not copy it. */
	err = kv_write_writable(ino, off == 0 && len >= old ? 0 : old, &obj);
	if (err)
		return err;
	/* What it writes, and the extent of the old end if it writes past it. */
	err = kv_write_unspill(ino, obj, off < old ? off : old & ~(KV_EXTENT - 1), off + len,
			       UINT64_MAX);
	if (!err && ino->ki_resv && !ino->ki_store->ks_tier) {
		if (off + len > old) /* reserved extents past the end: the size first */
			err = kv_obj_truncate(obj, off + len);
		if (!err)
			nfill = fill_reserved(ino, obj, off, off + len, filled);
	}
	/* The SSD quota of what it changes (the extent of the old end too, if it writes past it). */
	ch = kv_quota_owe_of_write(obj, off, off + len,
				   off + len > obj->ko_size ? off + len : obj->ko_size);
	owed = err ? 0 : kv_quota_owe(ino->ki_store, ino, obj, &ch);
	if (owed < 0)
		err = (int)owed;
	if (!err)
		err = kv_obj_write(obj, off, buf, len);
	if (!err)
		kv_quota_owe_set(ino->ki_store, obj, &ch);
	else
		kv_quota_unowe(ino->ki_store, owed);
	if (err)
		unfill(ino, filled, nfill, obj == ino->ki_obj ? old : 0);
	if (err && obj == ino->ki_obj && obj->ko_size != old)
		kv_obj_truncate(obj, old); /* the open version itself: as it was */
	return kv_write_conclude(ino, obj, old, err);
}

int kv_store_write(struct kv_store *st, struct kv_inode *ino, uint64_t off, const void *buf,
		   size_t len)
{
	int err;

	err = kv_value_range(ino, off, len);
	if (err)
		return err;
	do {
		pthread_rwlock_wrlock(&ino->ki_lock);
		err = write_locked(ino, off, buf, len);
		/* Past one extent, an open file may spill (core/tier.c, "Spill"). */
		if (st->ks_tier && ino->ki_obj && !ino->ki_obj->ko_sealed &&
		    ino->ki_obj->ko_size > KV_EXTENT)
			kv_tier_spillable(st->ks_tier, ino);
		pthread_rwlock_unlock(&ino->ki_lock);
	} while (kv_write_retry_for_room(st, ino, &err, len));
	return err;
}

int kv_store_fsync(struct kv_store *st, struct kv_inode *ino)
{
	uint64_t seq = 0;
	int err;

	if (!S_ISREG(ino->ki_type) && !st->ks_tier)
		return 0;
	/* libfuse 3.14 does not pass syncfs on: fsync of the root stands in for it. */
	if (ino == st->ks_root)
		return kv_tier_drain(st->ks_tier);
	if (!S_ISREG(ino->ki_type))
		return kv_tier_wait_durable(st->ks_tier, ino, 0);
	do {
		pthread_rwlock_wrlock(&ino->ki_lock);
		/*
		 * fsync is a put: the bytes written so far become a sealed version
		 * — unless the file has no name any more: nothing of it can become
		 * durable, and an open version keeps spilling (a temporary file
		 * written with O_SYNC, as stress-ng's iomix does). A change through
		 * another handle (a truncate by path) may replace that version
		 * before it is written, with one left open: seal that one and wait
		 * for it instead, as it holds these bytes too.
		 */
		if (ino->ki_obj && !ino->ki_obj->ko_sealed && atomic_load(&ino->ki_nlink))
			kv_write_seal(ino);
		seq = ino->ki_obj ? ino->ki_obj->ko_seq : 0;
		pthread_rwlock_unlock(&ino->ki_lock);
		err = st->ks_tier ? kv_tier_wait_durable(st->ks_tier, ino, seq) : 0;
	} while (err == -EAGAIN);
	return err;
}
