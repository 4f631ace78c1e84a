/* SPDX-License-Identifier: MIT */
/*
 * core/read.c — reads (core/store.h): a value's bytes from DRAM, the SSD
 * (core/tier.h) or both, handed out as iovecs held by a read guard; O_DIRECT
 * reads straight from the buckets; SEEK_DATA and SEEK_HOLE.
 *
 * Layer: below the namespace, beside writes: it calls the tier
 * (core/tier.h), the object model (core/inode.h, core/obj.h) and nothing
 * else of the store's; nobody in the store calls it.
 *
 * Locks: ki_lock (shared), let go before the tier promotes or reads from
 * the SSD, or held by the read guard (krg_locked) over an open version;
 * the tier's locks below it (core/store_int.h).
 */
#include "core/store.h"
#include "core/store_int.h"
#include "core/tier.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

static int read_value(struct kv_store *st, struct kv_inode *ino, uint64_t off, uint64_t len,
		      struct iovec *iov, int maxiov, uint64_t *bytes, struct kv_read_guard *guard)
{
	struct kv_obj *obj;
	int n;

again:
	kv_touch(ino);
	pthread_rwlock_rdlock(&ino->ki_lock);
	obj = ino->ki_obj;
	/* Partly in DRAM: the extents read come in first, when reads promote. */
	if (obj && obj->ko_partial && st->ks_cfg->kc_promote) {
		pthread_rwlock_unlock(&ino->ki_lock);
		kv_tier_promote(st->ks_tier, ino, off, len);
		pthread_rwlock_rdlock(&ino->ki_lock);
		obj = ino->ki_obj;
	}
	if (!obj) {
		pthread_rwlock_unlock(&ino->ki_lock);
		n = kv_tier_read(st->ks_tier, ino, off, len, iov, maxiov, bytes, guard);
		if (n == -EAGAIN) /* promoted, or a newer version: read what is there now */
			goto again;
		return n;
	}
	kv_obj_get(obj);
	atomic_store_explicit(&ino->ki_referenced, true, memory_order_relaxed);
	guard->krg_obj = obj;
	guard->krg_size = obj->ko_size;
	guard->krg_seq = obj->ko_seq;
	if (obj->ko_sealed && !kv_spill_n(ino) && !obj->ko_partial) {
		pthread_rwlock_unlock(&ino->ki_lock);
		n = kv_obj_iov(obj, off, len, iov, maxiov, bytes);
	} else if (obj->ko_partial) {
		/* Sealed: once read, the bytes stay put (memory held, SSD bytes copied). */
		n = kv_tier_read_mixed(st->ks_tier, ino, obj, &ino->ki_map, off, len, iov, maxiov,
				       bytes, guard);
		pthread_rwlock_unlock(&ino->ki_lock);
	} else {
		guard->krg_locked = ino;
		n = kv_spill_n(ino) ? kv_tier_read_mixed(st->ks_tier, NULL, obj, ino->ki_spill, off,
							 len, iov, maxiov, bytes, guard)
				    : kv_obj_iov(obj, off, len, iov, maxiov, bytes);
	}
	if (st->ks_tier && n >= 0)
		kv_tier_hit(st->ks_tier, guard->krg_buf[0] || guard->krg_ra[0]);
	return n;
}

int kv_store_read(struct kv_store *st, struct kv_inode *ino, uint64_t off, uint64_t len,
		  struct iovec *iov, int maxiov, uint64_t *bytes, struct kv_read_guard *guard)
{
	int n;

	if (!S_ISREG(ino->ki_type))
		return kv_no_value(ino);
	memset(guard, 0, sizeof(*guard));
	n = read_value(st, ino, off, len, iov, maxiov, bytes, guard);
	if (n < 0) { /* nothing to reply with: nothing held */
		kv_read_done(guard);
		memset(guard, 0, sizeof(*guard));
	}
	return n;
}

int kv_store_read_direct(struct kv_store *st, struct kv_inode *ino, const struct iovec *iov, int n,
			 uint64_t len)
{
	if (!st->ks_tier || !S_ISREG(ino->ki_type) || len % KV_PAGE_SIZE)
		return -EAGAIN;
	return kv_tier_read_direct(st->ks_tier, ino, iov, n, len);
}

/* The first extent at or after k with a record in m, or UINT64_MAX. */
static uint64_t map_next(const struct kv_xmap *m, uint64_t k)
{
	uint32_t first, end;

	kv_xmap_range(m, k << KV_EXTENT_SHIFT, UINT64_MAX, &first, &end);
	if (first == end)
		return UINT64_MAX;
	return kv_xmap_whole(m) ? k : kv_xmap_cat(m, first)->xe_loc.kl_index;
}

/*
 * The first extent at or after k with data, or UINT64_MAX (ki_lock held):
 * in memory, spilled or borrowed (ki_spill), or only on the SSD.
 */
static uint64_t next_data(const struct kv_inode *ino, uint64_t k)
{
	const struct kv_obj *o = ino->ki_obj;
	uint64_t in_mem = UINT64_MAX, other = UINT64_MAX;

	if (!o)
		return map_next(&ino->ki_map, k);
	for (uint64_t i = k; i < o->ko_nx; i++)
		if (kv_obj_has_data(o, i)) {
			in_mem = i;
			break;
		}
	if (kv_spill_n(ino))
		other = map_next(ino->ki_spill, k);
	else if (o->ko_partial)
		other = map_next(&ino->ki_map, k);
	return in_mem < other ? in_mem : other;
}

int kv_store_seek(struct kv_store *st, struct kv_inode *ino, uint64_t off, int whence,
		  uint64_t *out)
{
	uint64_t size, k;
	int err = 0;

	if (!S_ISREG(ino->ki_type))
		return kv_no_value(ino);
	pthread_rwlock_rdlock(&ino->ki_lock);
	size = kv_cur_size(ino);
	k = off >> KV_EXTENT_SHIFT;
	if (off >= size) {
		err = -ENXIO;
	} else if (whence == SEEK_DATA) {
		k = next_data(ino, k);
		if (k == UINT64_MAX || (k << KV_EXTENT_SHIFT) >= size)
			err = -ENXIO;
		else
			*out = (k << KV_EXTENT_SHIFT) > off ? k << KV_EXTENT_SHIFT : off;
	} else { /* SEEK_HOLE: the end of the run of data extents from off on */
		while ((k << KV_EXTENT_SHIFT) < size && next_data(ino, k) == k)
			k++;
		*out = (k << KV_EXTENT_SHIFT) > size	? size
		       : (k << KV_EXTENT_SHIFT) > off ? k << KV_EXTENT_SHIFT
						      : off;
	}
	pthread_rwlock_unlock(&ino->ki_lock);
	return err;
}
