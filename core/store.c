/* SPDX-License-Identifier: MIT */
/*
 * core/store.c — the store's start and stop, and the callback tables it
 * passes down (core/store.h): kv_store_create (the pool, the root,
 * recovery, the tier, compaction, the checkpoint thread) and
 * kv_store_destroy, fsck and salvage, the counters (kv_store_usage), the
 * hooks (kv_store_set_hooks, kv_store_set_evicted) and compaction's entry
 * points (kv_store_gc).
 *
 * Layer: the top of the store's layers. It calls the namespace
 * (core/ns.h) and the parts below it: writes (core/write.h), the quota
 * (core/quota.h), the tier (core/tier.h), compaction (core/gc.h),
 * persistence (core/persist.h) and the object model (core/inode.h); none of
 * them calls it. What the lower layers need of the namespace they get
 * through the callback tables made here: inode_ops (what an inode's last
 * reference releases), persist_ns (recovery and salvage rebuilding the
 * tree, opening the tier) and gc_ops (cache-mode eviction, checkpoints
 * after a pass).
 *
 * The namespace's operations live by job, top to bottom (each calls only
 * those below it):
 *   core/ns.c         directories and names: lookup, create, rename, unlink,
 *                     readdir, cache-mode eviction, the ioctl puts' publish
 *   core/attr.c       attributes: getattr, setattr
 *   core/fallocate.c  fallocate and punch
 *   core/read.c       reads, O_DIRECT reads, SEEK_DATA/SEEK_HOLE
 *   core/write.c      writes, copy-on-write versions, truncate, sealing,
 *                     open and release, fsync, waiting for room
 *   core/quota.c      the SSD quota promised to each change, reserved extents
 *
 * Locks: it takes ks_evict_lock alone (kv_store_set_evicted); the others,
 * ks_ckpt_lock (checkpoints) > ks_ns_lock > ki_lock and the tier's and the
 * buckets' below them, are taken in the layers it calls. The whole order,
 * across the layers, is in core/store_int.h.
 */
#include "core/store.h"
#include "core/gc.h"
#include "core/ns.h"
#include "core/persist.h"
#include "core/quota.h"
#include "core/store_int.h"
#include "core/tier.h"
#include "core/write.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct kv_inode *kv_store_root(struct kv_store *st)
{
	return st->ks_root;
}

struct kv_pool *kv_store_pool(struct kv_store *st)
{
	return st->ks_pool;
}

void kv_store_usage(struct kv_store *st, struct kv_store_usage *u)
{
	memset(u, 0, sizeof(*u));
	if (st->ks_tier)
		kv_tier_usage(st->ks_tier, u);
	u->ku_keys = atomic_load(&st->ks_keys);
	u->ku_dirs = atomic_load(&st->ks_dirs);
	u->ku_symlinks = atomic_load(&st->ks_symlinks);
	u->ku_specials = atomic_load(&st->ks_specials);
	u->ku_open = atomic_load(&st->ks_open);
	u->ku_bytes = atomic_load(&st->ks_bytes);
	u->ku_last_seq = kv_store_last_seq(st);
	u->ku_inodes = atomic_load(&st->ks_inodes);
}

uint64_t kv_store_last_seq(struct kv_store *st)
{
	return atomic_load(&st->ks_seq);
}

/*
 * What ino's last reference releases in the layers above the object model
 * (struct kv_inode_ops): its place in the tier, its pinned records, its
 * bytes in the count of named keys, the promise of its reserved extents.
 */
static void inode_release(struct kv_inode *ino)
{
	struct kv_store *st = ino->ki_store;

	if (st->ks_tier)
		kv_tier_forget(st->ks_tier, ino);
	if (st->ks_tier && ino->ki_pinned)
		kv_write_pin_records(ino, false);
	if (atomic_load(&ino->ki_nlink) && S_ISREG(ino->ki_type))
		atomic_fetch_sub(&st->ks_bytes, kv_cur_size(ino));
	if (S_ISREG(ino->ki_type))
		kv_quota_unpromise(st,
				   kv_resv_count(ino->ki_resv)); /* what it still holds reserved */
}

/* What the object model calls back (core/inode.h). */
static const struct kv_inode_ops inode_ops = {
    .io_release = inode_release,
};

void kv_store_forget(struct kv_store *st, struct kv_inode *ino, uint64_t n)
{
	(void)st;
	kv_inode_put_many(ino, n);
}

static void tree_free(struct kv_inode *dir);

/* What the compactor calls back (core/gc.h). */
static const struct kv_gc_ops gc_ops = {
    .go_evict = kv_ns_evict,
    .go_checkpoint = kv_persist_checkpoint,
};

/* Opens the SSD tier for recovery (struct kv_persist_ns, pn_open_tier). */
static int open_tier(struct kv_store *st, int datadir_fd, struct kv_tier **tier,
		     struct kv_bucket_set **bs)
{
	int err = kv_tier_create(st, datadir_fd, tier);

	if (!err)
		*bs = kv_tier_buckets(*tier);
	return err;
}

/* What recovery and salvage call to rebuild the namespace (core/persist.h). */
static const struct kv_persist_ns persist_ns = {
    .pn_child = kv_ns_child,
    .pn_make = kv_ns_make,
    .pn_child_make = kv_ns_child_make,
    .pn_unname = kv_ns_unname,
    .pn_rename = kv_ns_rename,
    .pn_open_tier = open_tier,
};

int kv_store_create(struct kv_store **out, const struct kv_config *cfg, int datadir_fd)
{
	struct kv_cred cred = {.kc_uid = getuid(), .kc_gid = getgid()};
	struct kv_store *st = calloc(1, sizeof(*st));
	int err;

	if (!st)
		return -ENOMEM;
	err = kv_pool_create(&st->ks_pool, cfg->kc_mem_size, cfg->kc_numa_node);
	if (err)
		goto out_free;
	err = -ENOMEM;
	if (pthread_rwlock_init(&st->ks_ns_lock, NULL))
		goto out_pool;
	pthread_mutex_init(&st->ks_ckpt_lock, NULL);
	pthread_mutex_init(&st->ks_evict_lock, NULL);
	atomic_init(&st->ks_next_ino, 1);
	st->ks_iops = &inode_ops;
	err =
	    kv_inode_new(st, S_IFDIR | 0755, &cred, "", 0, kv_ns_name_hash("", 0), 0, &st->ks_root);
	if (err)
		goto out_lock;
	atomic_init(&st->ks_root->ki_ref, 1);
	atomic_init(&st->ks_root->ki_nlink, 2);
	atomic_init(&st->ks_dirs, 1);
	st->ks_cfg = cfg;
	st->ks_datadir_fd = datadir_fd;
	if (datadir_fd >= 0 && cfg->kc_ssd_size > 0) {
		struct kv_persist_recovered rec;

		err = kv_persist_recover(st, datadir_fd, &persist_ns, &rec);
		if (err && !st->ks_tier)
			goto out_root;
		if (err)
			goto out_tier;
		kv_tier_recovered(st->ks_tier, rec.pr_ns, rec.pr_keys, rec.pr_lost);
		err = kv_gc_create(st, st->ks_buckets, &gc_ops, &st->ks_gc);
		if (err)
			goto out_tier;
		kv_tier_start(st->ks_tier);
		kv_gc_start(st->ks_gc);
		kv_persist_start(st);
	}
	*out = st;
	return 0;

out_tier:
	if (st->ks_journal)
		kv_journal_close(st->ks_journal);
	kv_tier_destroy(st->ks_tier);
	st->ks_tier = NULL;
	st->ks_buckets = NULL;
out_root:
	tree_free(st->ks_root);
out_lock:
	pthread_mutex_destroy(&st->ks_evict_lock);
	pthread_mutex_destroy(&st->ks_ckpt_lock);
	pthread_rwlock_destroy(&st->ks_ns_lock);
out_pool:
	kv_pool_destroy(st->ks_pool);
out_free:
	free(st);
	return err;
}

/* Frees a subtree whatever its references: only at destroy. */
static void tree_free(struct kv_inode *dir)
{
	for (uint32_t b = 0; dir->kd_table && b < dir->kd_nbuckets; b++) {
		struct kv_inode *c = dir->kd_table[b];

		while (c) {
			struct kv_inode *next = c->ki_hnext;

			if (S_ISDIR(c->ki_type))
				tree_free(c);
			else
				kv_inode_free(c);
			c = next;
		}
	}
	kv_inode_free(dir);
}

/* Counts keys whose newest value is not durable (ks_ns_lock held). */
static uint64_t count_dirty(struct kv_inode *dir)
{
	uint64_t n = 0;

	for (uint32_t b = 0; b < dir->kd_nbuckets; b++) {
		for (struct kv_inode *c = dir->kd_table[b]; c; c = c->ki_hnext) {
			if (S_ISDIR(c->ki_type))
				n += count_dirty(c);
			else if (c->ki_obj && c->ki_obj->ko_seq != c->ki_map.xm_seq)
				n++;
		}
	}
	return n;
}

uint64_t kv_store_destroy(struct kv_store *st)
{
	uint64_t lost = 0;

	if (st->ks_tier) {
		kv_persist_stop(st);
		/* The offloader may still need compaction for room: passes run in its thread. */
		kv_gc_stop(st->ks_gc);
		kv_tier_flush_stop(st->ks_tier);
		lost = count_dirty(st->ks_root);
		kv_persist_checkpoint(st);
		kv_gc_destroy(st->ks_gc);
		st->ks_gc = NULL;
		kv_journal_close(st->ks_journal);
		kv_tier_destroy(st->ks_tier);
		st->ks_tier = NULL;
		st->ks_buckets = NULL;
	}
	tree_free(st->ks_root);
	pthread_mutex_destroy(&st->ks_evict_lock);
	pthread_mutex_destroy(&st->ks_ckpt_lock);
	pthread_rwlock_destroy(&st->ks_ns_lock);
	kv_pool_destroy(st->ks_pool);
	free(st);
	return lost;
}

int kv_store_fsck(const struct kv_config *cfg, int datadir_fd, FILE *out)
{
	struct kv_config c = *cfg;
	struct kv_store_usage u;
	struct kv_store *st;
	uint64_t bad;
	int err;

	c.kc_mem_size = 16u << 20;
	c.kc_ssd_size = UINT64_MAX;
	c.kc_gc = false;
	err = kv_store_create(&st, &c, datadir_fd);
	if (err) {
		fprintf(out, "fsck: cannot recover the data directory: %s\nfsck: DAMAGED\n",
			strerror(-err));
		return 1;
	}
	kv_store_usage(st, &u);
	bad = kv_persist_fsck(st, &u, out);
	kv_store_destroy(st);
	fprintf(out, "fsck: %s\n", bad ? "DAMAGED" : "clean");
	return bad ? 1 : 0;
}

int kv_store_salvage(const struct kv_config *cfg, int datadir_fd, FILE *out)
{
	struct kv_config c = *cfg;
	struct kv_store *st;
	int err;

	c.kc_mem_size = 16u << 20;
	err = kv_store_create(&st, &c, -1);
	if (err)
		return err;
	err = kv_persist_salvage(st, &persist_ns, datadir_fd, out);
	kv_store_destroy(st);
	return err;
}

void kv_store_set_evicted(struct kv_store *st, kv_store_evicted_fn fn, void *arg)
{
	pthread_mutex_lock(&st->ks_evict_lock);
	st->ks_evicted = fn;
	st->ks_evicted_arg = arg;
	pthread_mutex_unlock(&st->ks_evict_lock);
}

void kv_store_set_hooks(struct kv_store *st, const struct kv_store_hooks *h)
{
	if (h)
		st->ks_hooks = *h;
	else
		memset(&st->ks_hooks, 0, sizeof(st->ks_hooks));
}

int kv_store_gc(struct kv_store *st)
{
	return st->ks_gc ? kv_gc_run(st->ks_gc) : 0;
}

bool kv_store_gc_stats(struct kv_store *st, struct kv_gc_stats *out)
{
	if (st->ks_gc)
		kv_gc_stats(st->ks_gc, out);
	return st->ks_gc != NULL;
}
