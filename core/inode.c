/* SPDX-License-Identifier: MIT */
/*
 * core/inode.c — the object model: making and freeing inodes, their
 * reference counts, their paths, and read guards (core/inode.h).
 *
 * Layer: the bottom of core/'s daemon layers. It calls only the values
 * (core/obj.h, core/xmap.h, core/resv.h), the read-ahead buffers a guard
 * holds (core/readahead.h) and ssd/bucket.h; what the layers above must do
 * when an inode goes, they said in ks_iops (struct kv_inode_ops), which
 * the namespace set before the first inode was made.
 *
 * Locks: this file takes none of its own. kv_inode_path walks ki_parent
 * and ki_name under the caller's ks_ns_lock; kv_read_done drops the
 * ki_lock a guard holds; an inode freed has no reference left, so nobody
 * else can reach it (the namespace took its name away under ks_ns_lock
 * before its last reference went). The lock order across the layers is in
 * core/store_int.h.
 */
#include "core/inode.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/readahead.h"
#include "core/store_int.h"
#include "ssd/bucket.h"

void kv_inode_now(struct timespec *ts)
{
	clock_gettime(CLOCK_REALTIME, ts);
}

bool kv_inode_is_dir(const struct kv_inode *ino)
{
	return S_ISDIR(ino->ki_type);
}

mode_t kv_inode_type(const struct kv_inode *ino)
{
	return ino->ki_type;
}

uint64_t kv_inode_ino(const struct kv_inode *ino)
{
	return ino->ki_ino;
}

int kv_inode_new(struct kv_store *st, mode_t mode, const struct kv_cred *cred, const char *name,
		 size_t len, uint64_t h, unsigned flags, struct kv_inode **out)
{
	struct kv_inode *ino = calloc(1, sizeof(*ino) + len + 1);
	int err = -ENOMEM;

	if (!ino)
		return -ENOMEM;
	memcpy(ino->ki_iname, name, len);
	ino->ki_name = ino->ki_iname;
	ino->ki_hash = h;
	if (pthread_rwlock_init(&ino->ki_lock, NULL))
		goto out_free;
	if (S_ISDIR(mode)) {
		ino->kd_nbuckets = 8;
		ino->kd_table = calloc(ino->kd_nbuckets, sizeof(*ino->kd_table));
		if (!ino->kd_table)
			goto out_lock;
	} else if (S_ISREG(mode) && (flags & KV_INODE_OBJ)) {
		err = kv_obj_new(st->ks_pool, &ino->ki_obj);
		if (err)
			goto out_lock;
	}
	atomic_init(&ino->ki_ref, 0);
	ino->ki_ino = atomic_fetch_add(&st->ks_next_ino, 1);
	ino->ki_store = st;
	ino->ki_type = mode & S_IFMT;
	ino->ki_mode = mode;
	ino->ki_uid = cred->kc_uid;
	ino->ki_gid = cred->kc_gid;
	if (!(flags & KV_INODE_NO_TIME)) {
		kv_inode_now(&ino->ki_mtime);
		ino->ki_atime = ino->ki_ctime = ino->ki_mtime;
	}
	atomic_fetch_add(&st->ks_inodes, 1);
	*out = ino;
	return 0;

out_lock:
	pthread_rwlock_destroy(&ino->ki_lock);
out_free:
	free(ino);
	return err;
}

void kv_inode_free(struct kv_inode *ino)
{
	struct kv_store *st = ino->ki_store;

	st->ks_iops->io_release(ino);
	if (ino->ki_obj)
		kv_obj_put(ino->ki_obj);
	kv_xmap_clear(&ino->ki_map);
	kv_spill_free(ino);
	if (S_ISREG(ino->ki_type))
		kv_resv_free(ino->ki_resv);
	else
		free(ino->ki_link);
	atomic_fetch_sub(&st->ks_inodes, 1);
	pthread_rwlock_destroy(&ino->ki_lock);
	free(ino->kd_table);
	if (ino->ki_name != ino->ki_iname)
		free(ino->ki_name);
	free(ino);
}

void kv_inode_get(struct kv_inode *ino)
{
	atomic_fetch_add_explicit(&ino->ki_ref, 1, memory_order_relaxed);
}

void kv_inode_put(struct kv_inode *ino)
{
	if (atomic_fetch_sub_explicit(&ino->ki_ref, 1, memory_order_acq_rel) == 1)
		kv_inode_free(ino);
}

void kv_inode_put_many(struct kv_inode *ino, uint64_t n)
{
	if (atomic_fetch_sub_explicit(&ino->ki_ref, n, memory_order_acq_rel) == n)
		kv_inode_free(ino);
}

int kv_inode_path_join(char *buf, int len, const char *name, size_t size)
{
	size_t nlen = strlen(name), at = (size_t)len + (len ? 1 : 0);

	if (at + nlen >= size)
		return -ENAMETOOLONG;
	if (len)
		buf[len] = '/';
	memcpy(buf + at, name, nlen + 1);
	return (int)(at + nlen);
}

int kv_inode_path(const struct kv_inode *ino, char *buf, size_t len)
{
	const struct kv_inode *chain[KV_JPATH_MAX / 2];
	int depth = 0, n = 0;

	for (; ino && ino->ki_parent; ino = ino->ki_parent) {
		if (depth == (int)(sizeof(chain) / sizeof(chain[0])))
			return -ENAMETOOLONG;
		chain[depth++] = ino;
	}
	buf[0] = '\0';
	while (depth-- > 0) {
		n = kv_inode_path_join(buf, n, chain[depth]->ki_name, len);
		if (n < 0)
			return n;
	}
	return n;
}

void kv_read_done(struct kv_read_guard *guard)
{
	if (guard->krg_locked)
		pthread_rwlock_unlock(&guard->krg_locked->ki_lock);
	if (guard->krg_obj)
		kv_obj_put(guard->krg_obj);
	for (int i = 0; i < KV_READ_EXTENTS; i++) {
		kv_bucket_read_free(guard->krg_buf[i]);
		kv_ra_put(guard->krg_ra[i]);
	}
}
