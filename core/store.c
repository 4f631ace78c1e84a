/* SPDX-License-Identifier: MIT */
/*
 * core/store.c — the namespace (core/store.h): directories and names,
 * attributes, writes and copy-on-write versions, sealing, reads, the
 * SSD quota promised to each change, and the store's start and stop.
 *
 * Layer: the top of the store's layers. It calls down into the tier
 * (core/tier.h), compaction (core/gc.h), persistence (core/persist.h) and
 * the object model (core/inode.h), and none of them calls it: what they
 * need of it they get through the callback tables it passes down, made
 * here: inode_ops (what an inode's last reference releases), persist_ns
 * (recovery and salvage rebuilding the tree, opening the tier) and gc_ops
 * (cache-mode eviction, checkpoints after a pass).
 *
 * Locks: ks_ns_lock > ki_lock, and the tier's and the buckets' below
 * them; the whole order, across the layers, is in core/store_int.h.
 */
#include "core/store.h"
#include "core/gc.h"
#include "core/persist.h"
#include "core/store_int.h"
#include "core/tier.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#define now kv_inode_now

/* Stamps ino as used now (cache mode evicts the least recently used). */
static void touch(struct kv_inode *ino)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	atomic_store_explicit(&ino->ki_used,
			      (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec,
			      memory_order_relaxed);
}

static uint64_t name_hash(const char *name, size_t len)
{
	return XXH3_64bits(name, len);
}

/* The counter of named nodes of ino's type: keys, directories, symlinks, FIFOs and sockets. */
static _Atomic uint64_t *name_count(struct kv_store *st, mode_t type)
{
	if (S_ISDIR(type))
		return &st->ks_dirs;
	if (S_ISREG(type))
		return &st->ks_keys;
	return S_ISLNK(type) ? &st->ks_symlinks : &st->ks_specials;
}

/* What a call about a value answers for a node that has none: -EISDIR or -EINVAL. */
static int no_value(const struct kv_inode *ino)
{
	return S_ISDIR(ino->ki_type) ? -EISDIR : -EINVAL;
}

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

/* The size of a regular file's current value (ki_lock held). */
static uint64_t cur_size(const struct kv_inode *ino)
{
	return ino->ki_obj ? ino->ki_obj->ko_size : ino->ki_map.xm_size;
}

/*
 * Pins or unpins the buckets of every record ino's versions hold (durable
 * and spilled): a file deleted while open keeps reading them (ki_lock held
 * exclusive, or the inode dying).
 */
static void pin_records(struct kv_inode *ino, bool pin)
{
	struct kv_bucket_set *bs = kv_tier_buckets(ino->ki_store->ks_tier);

	kv_xmap_pin(bs, &ino->ki_map, pin);
	if (ino->ki_spill)
		kv_xmap_pin(bs, ino->ki_spill, pin);
}

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
 * caller gives that to obj (owe_set), or, if it fails, back to the bucket
 * set (unowe). An overwrite (ino, ki_lock held exclusive) may count on the
 * bytes of the durable version it replaces, which die once it is placed:
 * so overwrites go on at a full quota, the buckets passing it by at most
 * what compaction then reclaims. Returns the bytes promised, or -EDQUOT.
 */
static int64_t owe(struct kv_store *st, struct kv_inode *ino, struct kv_obj *obj,
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
static void owe_set(struct kv_store *st, struct kv_obj *obj, const struct owe_change *c)
{
	for (unsigned i = 0; st->ks_tier && i < c->oc_n; i++)
		kv_obj_owe_set(obj, c->oc_old, c->oc_r[i].or_off, c->oc_r[i].or_end, OWE_OVER,
			       i == 0);
}

/* Gives back what owe promised for a change that failed. */
static void unowe(struct kv_store *st, int64_t owed)
{
	if (owed > 0)
		kv_bucket_unreserve(kv_tier_buckets(st->ks_tier), (uint64_t)owed);
}

/* The change of obj that writes [off, end) and leaves the size at size. */
static struct owe_change owe_of_write(const struct kv_obj *obj, uint64_t off, uint64_t end,
				      uint64_t size)
{
	return (struct owe_change){.oc_old = obj->ko_size,
				   .oc_size = size,
				   .oc_n = 1,
				   .oc_r = {{off, end}}};
}

/* Takes back the promise of n reserved extents (none to take back once the tier is gone). */
static void unpromise(struct kv_store *st, uint64_t n)
{
	if (!n)
		return;
	if (st->ks_tier)
		kv_bucket_unreserve(kv_tier_buckets(st->ks_tier), n * KV_RESV_BYTES);
	else if (st->ks_datadir_fd < 0 || !st->ks_cfg->kc_ssd_size) /* DRAM only */
		kv_pool_unreserve(st->ks_pool, n * KV_EXTENT);
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
		pin_records(ino, false);
	if (atomic_load(&ino->ki_nlink) && S_ISREG(ino->ki_type))
		atomic_fetch_sub(&st->ks_bytes, cur_size(ino));
	if (S_ISREG(ino->ki_type))
		unpromise(st, kv_resv_count(ino->ki_resv)); /* what it still holds reserved */
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

static int evict_key(struct kv_store *st, struct kv_inode *ino, uint64_t used, uint64_t *bytes);

/* What the compactor calls back (core/gc.h). */
static const struct kv_gc_ops gc_ops = {
    .go_evict = evict_key,
    .go_checkpoint = kv_persist_checkpoint,
};

/* Recovery's and salvage's changes to the tree (struct kv_persist_ns): not journaled. */
static struct kv_inode *ns_child(const struct kv_inode *dir, const char *name);
static int ns_make(struct kv_store *st, struct kv_inode *dir, const char *name, mode_t mode,
		   const char *link, struct kv_inode **out);
static int ns_child_make(struct kv_store *st, struct kv_inode *dir, const char *name, size_t len,
			 mode_t mode, struct kv_inode **out);
static void ns_unname(struct kv_store *st, struct kv_inode *dir, struct kv_inode *ino);
static int ns_rename(struct kv_store *st, struct kv_inode *odir, const char *oname,
		     struct kv_inode *ndir, const char *nname, unsigned flags);

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
    .pn_child = ns_child,
    .pn_make = ns_make,
    .pn_child_make = ns_child_make,
    .pn_unname = ns_unname,
    .pn_rename = ns_rename,
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
	err = kv_inode_new(st, S_IFDIR | 0755, &cred, "", 0, name_hash("", 0), 0, &st->ks_root);
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
		err = kv_gc_create(st, kv_tier_buckets(st->ks_tier), &gc_ops, &st->ks_gc);
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

/* --- directory tables (ks_ns_lock held) --- */

static int check_len(size_t len)
{
	if (len == 0)
		return -ENOENT;
	if (len > KV_NAME_MAX)
		return -ENAMETOOLONG;
	return 0;
}

static int check_name(const char *name)
{
	return check_len(strlen(name));
}

static bool is_reserved(const struct kv_store *st, const struct kv_inode *dir, const char *name)
{
	return dir == st->ks_root && strcmp(name, KV_RESERVED_NAME) == 0;
}

/* dir's child `name`, whose hash is h, or NULL. */
static struct kv_inode *dir_find_h(const struct kv_inode *dir, const char *name, uint64_t h)
{
	struct kv_inode *c = dir->kd_table[h & (dir->kd_nbuckets - 1)];

	for (; c; c = c->ki_hnext)
		if (c->ki_hash == h && strcmp(c->ki_name, name) == 0)
			return c;
	return NULL;
}

static struct kv_inode *dir_find(const struct kv_inode *dir, const char *name)
{
	return dir_find_h(dir, name, name_hash(name, strlen(name)));
}

static void dir_grow(struct kv_inode *dir)
{
	uint32_t n = dir->kd_nbuckets * 2;
	struct kv_inode **t = calloc(n, sizeof(*t));

	if (!t)
		return; /* a longer chain is still correct */
	for (uint32_t b = 0; b < dir->kd_nbuckets; b++) {
		struct kv_inode *c = dir->kd_table[b];

		while (c) {
			struct kv_inode *next = c->ki_hnext;

			c->ki_hnext = t[c->ki_hash & (n - 1)];
			t[c->ki_hash & (n - 1)] = c;
			c = next;
		}
	}
	free(dir->kd_table);
	dir->kd_table = t;
	dir->kd_nbuckets = n;
}

/* Links ino into dir under its ki_name and ki_hash (which must be set). */
static void dir_insert(struct kv_inode *dir, struct kv_inode *ino)
{
	struct kv_inode **head;

	if (dir->kd_count >= dir->kd_nbuckets)
		dir_grow(dir);
	head = &dir->kd_table[ino->ki_hash & (dir->kd_nbuckets - 1)];
	ino->ki_hnext = *head;
	*head = ino;
	ino->ki_parent = dir;
	dir->kd_count++;
	if (S_ISDIR(ino->ki_type))
		atomic_fetch_add(&dir->ki_nlink, 1);
}

static void dir_remove(struct kv_inode *dir, struct kv_inode *ino)
{
	struct kv_inode **p = &dir->kd_table[ino->ki_hash & (dir->kd_nbuckets - 1)];

	while (*p != ino)
		p = &(*p)->ki_hnext;
	*p = ino->ki_hnext;
	ino->ki_hnext = NULL;
	ino->ki_parent = NULL;
	dir->kd_count--;
	if (S_ISDIR(ino->ki_type))
		atomic_fetch_sub(&dir->ki_nlink, 1);
}

/* Directory contents changed: bump its times. */
static void dir_touch(struct kv_inode *dir, const struct timespec *ts)
{
	pthread_rwlock_wrlock(&dir->ki_lock);
	dir->ki_mtime = dir->ki_ctime = *ts;
	pthread_rwlock_unlock(&dir->ki_lock);
}

/* A usable parent for a new name: a directory that still has its name. */
static int dir_check(const struct kv_inode *dir)
{
	if (!S_ISDIR(dir->ki_type))
		return -ENOTDIR;
	if (atomic_load(&dir->ki_nlink) == 0)
		return -ENOENT;
	return 0;
}

static struct kv_inode *ns_child(const struct kv_inode *dir, const char *name)
{
	return dir_find(dir, name);
}

/* --- attributes --- */

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
static uint64_t unwritten_bytes(const struct kv_inode *ino)
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
static int resv_take(struct kv_inode *ino, uint64_t k0, uint64_t k1)
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
	unpromise(ino->ki_store, n); /* what could not be added */
	return err;
}

/* Takes back the reservations of extents [k0, k1). Returns 0 or -ENOMEM (nothing taken). */
static int resv_drop(struct kv_inode *ino, uint64_t k0, uint64_t k1)
{
	struct kv_store *st = ino->ki_store;
	uint32_t hi = k1 < UINT32_MAX ? (uint32_t)k1 : UINT32_MAX;
	int64_t n;

	if (!ino->ki_resv || k0 >= hi)
		return 0;
	n = kv_resv_cut(&ino->ki_resv, (uint32_t)k0, hi);
	if (n > 0)
		unpromise(st, (uint64_t)n);
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
 * version by resv_journal once ki_lock is let go — unless a newer
 * version's offload will.
 */
static void resv_persist(struct kv_inode *ino, uint64_t before)
{
	if (kv_resv_count(ino->ki_resv) != before && durable_now(ino))
		ino->ki_resv_dirty = true;
}

/*
 * Journals ino's changed reservations (no lock held: it takes ks_ns_lock,
 * for the key's path, and ki_lock, in that order — never held across a
 * change that may read the SSD).
 */
static void resv_journal(struct kv_store *st, struct kv_inode *ino)
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

static void fill_attr(struct kv_inode *ino, struct kv_attr *a)
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
	a->ka_alloc += unwritten_bytes(ino);
	pthread_rwlock_unlock(&ino->ki_lock);
}

int kv_store_getattr(struct kv_store *st, struct kv_inode *ino, struct kv_attr *attr)
{
	fill_attr(ino, attr);
	return 0;
}

int kv_store_lookup(struct kv_store *st, struct kv_inode *dir, const char *name,
		    struct kv_inode **out, struct kv_attr *attr)
{
	struct kv_inode *c;
	int err = check_name(name);

	if (err)
		return err;
	if (!S_ISDIR(dir->ki_type))
		return -ENOTDIR;
	pthread_rwlock_rdlock(&st->ks_ns_lock);
	c = dir_find(dir, name);
	if (c)
		kv_inode_get(c);
	pthread_rwlock_unlock(&st->ks_ns_lock);
	if (!c)
		return -ENOENT;
	fill_attr(c, attr);
	*out = c;
	return 0;
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
	if (ino->ki_pinned) /* deleted while open: its records' buckets stay, as pin_records */
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
static int writable(struct kv_inode *ino, uint64_t keep, struct kv_obj **out)
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
 * Makes obj (from writable(), now changed) the current version, accounts
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
	touch(ino);
	/* namespace.bytes counts keys with a name only. */
	if (atomic_load(&ino->ki_nlink) && obj->ko_size > old_size)
		atomic_fetch_add(&st->ks_bytes, obj->ko_size - old_size);
	else if (atomic_load(&ino->ki_nlink))
		atomic_fetch_sub(&st->ks_bytes, old_size - obj->ko_size);
	now(&ino->ki_mtime);
	ino->ki_ctime = ino->ki_mtime;
}

/*
 * Drops a version writable() made when the change to it failed, and the
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
static void seal(struct kv_inode *ino)
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
static void settle(struct kv_inode *ino)
{
	struct kv_obj *obj = ino->ki_obj;

	if (ino->ki_nopen == 0 && obj && !obj->ko_sealed)
		seal(ino);
}

/*
 * Ends a change made to version obj (from writable()): with err it is
 * dropped (abandon), else it becomes the current one (install), sealed
 * unless someone has the file open (settle). Returns err.
 */
static int conclude(struct kv_inode *ino, struct kv_obj *obj, uint64_t old, int err)
{
	if (err) {
		abandon(ino, obj);
		return err;
	}
	install(ino, obj, old);
	settle(ino);
	return 0;
}

/*
 * Before the open version obj changes bytes [from, to) (to UINT64_MAX: up
 * to its end): its spilled extents there come back into memory, or, wholly
 * at or past `cut` (the new size of a truncate; UINT64_MAX otherwise), are
 * let go. Their records die (ki_lock held exclusive). Returns 0, -ENOSPC
 * or -EIO (what came back so far stays back: the bytes are the same).
 */
static int unspill(struct kv_inode *ino, struct kv_obj *obj, uint64_t from, uint64_t to,
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
static int set_size(struct kv_inode *ino, uint64_t size)
{
	uint64_t old = cur_size(ino), resv = kv_resv_count(ino->ki_resv);
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
		resv_drop(ino, (size + KV_EXTENT - 1) >> KV_EXTENT_SHIFT, UINT64_MAX);
	if (size == old && (!ino->ki_obj || ino->ki_obj->ko_sealed)) {
		resv_persist(ino, resv);
		return 0;
	}
	err = writable(ino, size, &obj);
	if (err)
		return err;
	/* A new version: its record, and the extent the new end cuts or fills. */
	ch = (struct owe_change){.oc_old = old, .oc_size = size, .oc_n = 1, .oc_r = {{size, size}}};
	owed = owe(ino->ki_store, ino, obj, &ch);
	err = owed < 0 ? (int)owed : 0;
	/* The extent of the smaller end, and all past it. */
	if (!err)
		err = unspill(ino, obj, (size < old ? size : old) & ~(KV_EXTENT - 1), UINT64_MAX,
			      size);
	if (!err)
		err = kv_obj_truncate(obj, size);
	if (err) {
		unowe(ino->ki_store, owed);
		abandon(ino, obj);
		return err;
	}
	owe_set(ino->ki_store, obj, &ch);
	install(ino, obj, old);
	return 0;
}

/*
 * True when a change that failed with *errp should be tried again: the
 * pool was full and the tier made room (evicted clean values, or waited for
 * the offloader to make some clean or to spill files being written). Call
 * without ki_lock. -EDQUOT, inside this file, is a refusal for lack of room
 * on the SSD (or in the whole store), not in the pool: never retried, it
 * reaches the caller as -ENOSPC.
 */
static bool retry_for_room(struct kv_store *st, struct kv_inode *ino, int *errp, uint64_t bytes)
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

static int setattr_locked(struct kv_inode *ino, const struct kv_setattr *sa)
{
	unsigned v = sa->ksa_valid;
	struct timespec ts;
	int err;

	now(&ts);
	if (v & KV_SET_SIZE) {
		err = set_size(ino, sa->ksa_size);
		if (err)
			return err;
		settle(ino);
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
		return no_value(ino);
	if ((sa->ksa_valid & KV_SET_SIZE) && sa->ksa_size > KV_MAX_VALUE)
		return -EFBIG;
	do {
		pthread_rwlock_wrlock(&ino->ki_lock);
		err = setattr_locked(ino, sa);
		pthread_rwlock_unlock(&ino->ki_lock);
	} while (retry_for_room(st, ino, &err, sa->ksa_size));
	if (!err && (sa->ksa_valid & KV_SET_SIZE))
		resv_journal(st, ino);
	if (err)
		return err;
	if (st->ks_journal && (sa->ksa_valid & ~KV_SET_SIZE)) {
		pthread_rwlock_rdlock(&st->ks_ns_lock);
		kv_persist_setattr(st, ino);
		pthread_rwlock_unlock(&st->ks_ns_lock);
	}
	fill_attr(ino, attr);
	return 0;
}

/*
 * Creates a node named `name` in dir: link is a symlink's target (NULL for
 * other types). `opened` counts an open handle on a new regular file
 * (create); otherwise its empty value is sealed at once.
 */
static int new_node(struct kv_store *st, struct kv_inode *dir, const char *name, mode_t mode,
		    const char *link, const struct kv_cred *cred, bool opened,
		    struct kv_inode **out, struct kv_attr *attr)
{
	size_t len = strlen(name);
	uint64_t h = name_hash(name, len);
	struct kv_inode *ino;
	struct timespec ts;
	int err = check_len(len);

	if (err)
		return err;
	err = kv_inode_new(st, mode, cred, name, len, h, KV_INODE_OBJ, &ino);
	if (err)
		return err;
	/* One reference for the name, one for the caller (a kernel lookup). */
	atomic_init(&ino->ki_ref, 2);
	atomic_init(&ino->ki_nlink, S_ISDIR(mode) ? 2 : 1);
	if (link) {
		ino->ki_link = strdup(link);
		if (!ino->ki_link) {
			kv_inode_free(ino);
			return -ENOMEM;
		}
	}
	if (S_ISREG(mode)) { /* the SSD quota of its empty value's record */
		int64_t owed;

		struct owe_change ch = owe_of_write(ino->ki_obj, 0, 0, 0);

		do {
			owed = owe(st, NULL, ino->ki_obj, &ch);
			err = owed < 0 ? (int)owed : 0;
		} while (retry_for_room(st, NULL, &err, 0));
		if (err) {
			kv_inode_free(ino);
			return err;
		}
		owe_set(st, ino->ki_obj, &ch);
	}
	if (opened) {
		ino->ki_nopen = 1;
		atomic_fetch_add(&ino->ki_ref, 1);
		atomic_fetch_add(&st->ks_open, 1);
	}

	pthread_rwlock_wrlock(&st->ks_ns_lock);
	err = dir_check(dir);
	if (!err && is_reserved(st, dir, name))
		err = -EPERM;
	if (!err && dir_find_h(dir, name, h))
		err = -EEXIST;
	if (err) {
		pthread_rwlock_unlock(&st->ks_ns_lock);
		if (opened)
			atomic_fetch_sub(&st->ks_open, 1);
		kv_inode_free(ino);
		return err;
	}
	dir_insert(dir, ino);
	atomic_fetch_add(name_count(st, mode), 1);
	ts = ino->ki_ctime;
	dir_touch(dir, &ts);
	if (S_ISDIR(mode))
		kv_persist_mkdir(st, ino);
	else if (!S_ISREG(mode))
		kv_persist_node(st, ino);
	pthread_rwlock_unlock(&st->ks_ns_lock);
	if (!opened && ino->ki_obj) {
		pthread_rwlock_wrlock(&ino->ki_lock);
		settle(ino);
		pthread_rwlock_unlock(&ino->ki_lock);
	}
	fill_attr(ino, attr);
	*out = ino;
	return 0;
}

/* Tells the kh_changed hook about a change that worked (err 0); returns err. */
static int changed(struct kv_store *st, int err, enum kv_store_change what, struct kv_inode *dir,
		   const char *name, struct kv_inode *dir2, const char *name2)
{
	if (!err && st->ks_hooks.kh_changed)
		st->ks_hooks.kh_changed(st->ks_hooks.kh_arg, what, dir, name, dir2, name2);
	return err;
}

int kv_store_mkdir(struct kv_store *st, struct kv_inode *dir, const char *name, mode_t mode,
		   const struct kv_cred *cred, struct kv_inode **out, struct kv_attr *attr)
{
	return changed(st,
		       new_node(st, dir, name, S_IFDIR | (mode & 07777), NULL, cred, false, out,
				attr),
		       KV_CHANGE_MKDIR, dir, name, NULL, NULL);
}

int kv_store_mknod(struct kv_store *st, struct kv_inode *dir, const char *name, mode_t mode,
		   const struct kv_cred *cred, struct kv_inode **out, struct kv_attr *attr)
{
	mode_t type = mode & S_IFMT;

	if (type == S_IFCHR || type == S_IFBLK)
		return -EPERM;
	if (type == 0)
		type = S_IFREG;
	if (type != S_IFREG && type != S_IFIFO && type != S_IFSOCK)
		return -EINVAL;
	return new_node(st, dir, name, type | (mode & 07777), NULL, cred, false, out, attr);
}

int kv_store_symlink(struct kv_store *st, struct kv_inode *dir, const char *name,
		     const char *target, const struct kv_cred *cred, struct kv_inode **out,
		     struct kv_attr *attr)
{
	size_t len = strnlen(target, KV_SYMLINK_MAX + 1);

	if (len == 0)
		return -ENOENT;
	if (len > KV_SYMLINK_MAX)
		return -ENAMETOOLONG;
	return changed(st, new_node(st, dir, name, S_IFLNK | 0777, target, cred, false, out, attr),
		       KV_CHANGE_SYMLINK, dir, name, NULL, NULL);
}

int kv_store_readlink(struct kv_store *st, struct kv_inode *ino, const char **target)
{
	if (!S_ISLNK(ino->ki_type))
		return -EINVAL;
	*target = ino->ki_link;
	return 0;
}

int kv_store_create_open(struct kv_store *st, struct kv_inode *dir, const char *name, mode_t mode,
			 const struct kv_cred *cred, struct kv_inode **out, struct kv_attr *attr)
{
	return new_node(st, dir, name, S_IFREG | (mode & 07777), NULL, cred, true, out, attr);
}

/* ns_make with the name's length and hash. */
static int make_node(struct kv_store *st, struct kv_inode *dir, const char *name, size_t len,
		     uint64_t h, mode_t mode, const char *link, struct kv_inode **out)
{
	struct kv_cred root = {0};
	struct kv_inode *ino;
	int err = check_len(len);

	if (!err)
		err = kv_inode_new(st, (mode & S_IFMT) | (S_ISDIR(mode) ? 0755 : 0644), &root, name,
				   len, h, S_ISREG(mode) ? KV_INODE_NO_TIME : 0, &ino);
	if (err)
		return err;
	if (link) {
		ino->ki_link = strdup(link);
		if (!ino->ki_link) {
			kv_inode_free(ino);
			return -ENOMEM;
		}
	}
	atomic_init(&ino->ki_ref, 1); /* the name's */
	atomic_init(&ino->ki_nlink, S_ISDIR(mode) ? 2 : 1);
	dir_insert(dir, ino);
	atomic_fetch_add(name_count(st, mode), 1);
	*out = ino;
	return 0;
}

static int ns_make(struct kv_store *st, struct kv_inode *dir, const char *name, mode_t mode,
		   const char *link, struct kv_inode **out)
{
	size_t len = strlen(name);

	return make_node(st, dir, name, len, name_hash(name, len), mode, link, out);
}

static int ns_child_make(struct kv_store *st, struct kv_inode *dir, const char *name, size_t len,
			 mode_t mode, struct kv_inode **out)
{
	uint64_t h = name_hash(name, len);

	*out = dir_find_h(dir, name, h);
	return *out ? 0 : make_node(st, dir, name, len, h, mode, NULL, out);
}

/* Takes a name away from ino (ks_ns_lock held exclusive). */
static void drop_name(struct kv_store *st, struct kv_inode *dir, struct kv_inode *ino)
{
	dir_remove(dir, ino);
	/* One step under ki_lock: a concurrent write counts its growth or not at all. */
	pthread_rwlock_wrlock(&ino->ki_lock);
	if (S_ISREG(ino->ki_type))
		atomic_fetch_sub(&st->ks_bytes, cur_size(ino));
	atomic_store(&ino->ki_nlink, 0);
	pthread_rwlock_unlock(&ino->ki_lock);
	atomic_fetch_sub(name_count(st, ino->ki_type), 1);
}

/*
 * A file lost its name for good (unlink, replaced by rename, evicted): its
 * durable record, if any, is dead space in its bucket. Open handles may
 * still read it: then its bucket is pinned (never dropped by compaction)
 * until the last close. ks_ns_lock held.
 */
static void name_gone(struct kv_store *st, struct kv_inode *ino)
{
	struct kv_bucket_set *bs;

	if (!S_ISREG(ino->ki_type))
		return;
	if (!st->ks_tier) { /* DRAM only: just the reservations (open, it keeps them) */
		pthread_rwlock_wrlock(&ino->ki_lock);
		if (!ino->ki_nopen)
			resv_drop(ino, 0, UINT64_MAX);
		pthread_rwlock_unlock(&ino->ki_lock);
		return;
	}
	bs = kv_tier_buckets(st->ks_tier);
	kv_tier_ra_drop(st->ks_tier, ino);
	pthread_rwlock_wrlock(&ino->ki_lock);
	kv_xmap_dead(bs, &ino->ki_map);
	for (uint32_t i = 0; i < kv_spill_n(ino); i++) /* not the borrowed: ki_map's */
		if (kv_xmap_at(ino->ki_spill, i)->xe_loc.kl_seq == ino->ki_spill->xm_seq)
			kv_bucket_dead(bs, &kv_xmap_at(ino->ki_spill, i)->xe_loc);
	if (ino->ki_nopen && !ino->ki_pinned) {
		pin_records(ino, true);
		ino->ki_pinned = true;
	}
	if (!ino->ki_nopen) /* open, it keeps them until it is freed */
		resv_drop(ino, 0, UINT64_MAX);
	pthread_rwlock_unlock(&ino->ki_lock);
}

/* Journals the removal of ino's name (ks_ns_lock held). */
static void journal_del(struct kv_store *st, struct kv_inode *ino)
{
	char path[KV_JPATH_MAX];
	int len;

	if (!st->ks_journal)
		return;
	len = kv_inode_path(ino, path, sizeof(path));
	if (len > 0)
		kv_persist_del(st, path, len);
}

static void ns_unname(struct kv_store *st, struct kv_inode *dir, struct kv_inode *ino)
{
	drop_name(st, dir, ino);
	kv_inode_put(ino);
}

/* Takes name from dir; *gone (when not NULL) gets the inode that had it, referenced. */
static int remove_name(struct kv_store *st, struct kv_inode *dir, const char *name, bool want_dir,
		       struct kv_inode **gone)
{
	struct kv_inode *c;
	struct timespec ts;
	int err = check_name(name);

	if (err)
		return err;
	if (!S_ISDIR(dir->ki_type))
		return -ENOTDIR;
	pthread_rwlock_wrlock(&st->ks_ns_lock);
	c = dir_find(dir, name);
	if (is_reserved(st, dir, name))
		err = -EPERM;
	else if (!c)
		err = -ENOENT;
	else if (want_dir && !S_ISDIR(c->ki_type))
		err = -ENOTDIR;
	else if (!want_dir && S_ISDIR(c->ki_type))
		err = -EISDIR;
	else if (want_dir && c->kd_count)
		err = -ENOTEMPTY;
	if (err) {
		pthread_rwlock_unlock(&st->ks_ns_lock);
		return err;
	}
	journal_del(st, c);
	name_gone(st, c);
	drop_name(st, dir, c);
	now(&ts);
	dir_touch(dir, &ts);
	pthread_rwlock_unlock(&st->ks_ns_lock);

	pthread_rwlock_wrlock(&c->ki_lock);
	c->ki_ctime = ts;
	pthread_rwlock_unlock(&c->ki_lock);
	if (gone)
		*gone = c; /* the name's reference, now the caller's */
	else
		kv_inode_put(c);
	return 0;
}

/*
 * Cache mode's delete (kv_gc_ops.go_evict): takes ino's name exactly as unlink
 * would, if it still has one, no fd holds it open and it was not used
 * since `used`; then, its locks dropped, tells the eviction hook.
 */
static int evict_key(struct kv_store *st, struct kv_inode *ino, uint64_t used, uint64_t *bytes)
{
	char name[KV_NAME_MAX + 1];
	struct kv_inode *dir;
	struct timespec ts;
	bool ok;

	pthread_rwlock_wrlock(&st->ks_ns_lock);
	dir = ino->ki_parent;
	pthread_rwlock_rdlock(&ino->ki_lock);
	ok = dir && atomic_load(&ino->ki_nlink) && ino->ki_nopen == 0 &&
	     atomic_load(&ino->ki_used) == used && ino->ki_map.xm_seq;
	/* What goes: its records, and the room promised to its unwritten extents. */
	*bytes = kv_xmap_bytes(&ino->ki_map) + kv_resv_count(ino->ki_resv) * KV_RESV_BYTES;
	pthread_rwlock_unlock(&ino->ki_lock);
	if (!ok) {
		pthread_rwlock_unlock(&st->ks_ns_lock);
		return -EBUSY;
	}
	journal_del(st, ino);
	name_gone(st, ino);
	snprintf(name, sizeof(name), "%s", ino->ki_name);
	drop_name(st, dir, ino);
	now(&ts);
	dir_touch(dir, &ts);
	kv_inode_get(dir); /* for the hook: an rmdir may take its name now */
	pthread_rwlock_unlock(&st->ks_ns_lock);
	kv_inode_put(ino); /* the name's reference */
	pthread_mutex_lock(&st->ks_evict_lock);
	if (st->ks_evicted)
		st->ks_evicted(st->ks_evicted_arg, dir, name);
	pthread_mutex_unlock(&st->ks_evict_lock);
	kv_inode_put(dir);
	return 0;
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

int kv_store_path_of(struct kv_store *st, struct kv_inode *ino, char **out)
{
	char *p = malloc(KV_JPATH_MAX + 1);
	const struct kv_inode *top = ino;
	int len;

	if (!p)
		return -ENOMEM;
	pthread_rwlock_rdlock(&st->ks_ns_lock);
	while (top->ki_parent)
		top = top->ki_parent;
	len = top == st->ks_root ? kv_inode_path(ino, p + 1, KV_JPATH_MAX) : -ENOENT;
	pthread_rwlock_unlock(&st->ks_ns_lock);
	if (len < 0) {
		free(p);
		return len;
	}
	p[0] = '/';
	*out = p;
	return 0;
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

int kv_store_unlink(struct kv_store *st, struct kv_inode *dir, const char *name)
{
	struct kv_inode *gone = NULL;
	int err = remove_name(st, dir, name, false, &gone);

	changed(st, err, KV_CHANGE_UNLINK, dir, name, gone, NULL);
	if (gone)
		kv_inode_put(gone);
	return err;
}

int kv_store_rmdir(struct kv_store *st, struct kv_inode *dir, const char *name)
{
	return changed(st, remove_name(st, dir, name, true, NULL), KV_CHANGE_RMDIR, dir, name, NULL,
		       NULL);
}

/* True when `dir` is `anc` or lies below it (ks_ns_lock held). */
static bool is_within(const struct kv_inode *dir, const struct kv_inode *anc)
{
	for (; dir; dir = dir->ki_parent)
		if (dir == anc)
			return true;
	return false;
}

static int rename_checks(struct kv_store *st, struct kv_inode *odir, const char *oname,
			 struct kv_inode *ndir, const char *nname, unsigned flags,
			 struct kv_inode **src, struct kv_inode **dst)
{
	int err;

	if ((err = dir_check(odir)) || (err = dir_check(ndir)))
		return err;
	if (is_reserved(st, odir, oname) || is_reserved(st, ndir, nname))
		return -EPERM;
	*src = dir_find(odir, oname);
	*dst = dir_find(ndir, nname);
	if (!*src)
		return -ENOENT;
	if (flags & RENAME_EXCHANGE) {
		if (!*dst)
			return -ENOENT;
		if (S_ISDIR((*dst)->ki_type) && is_within(odir, *dst))
			return -EINVAL;
	} else if (*dst && (flags & RENAME_NOREPLACE)) {
		return -EEXIST;
	}
	if (S_ISDIR((*src)->ki_type) && is_within(ndir, *src))
		return -EINVAL;
	if (*dst && *dst != *src && !(flags & RENAME_EXCHANGE)) {
		if (S_ISDIR((*src)->ki_type) && !S_ISDIR((*dst)->ki_type))
			return -ENOTDIR;
		if (!S_ISDIR((*src)->ki_type) && S_ISDIR((*dst)->ki_type))
			return -EISDIR;
		if (S_ISDIR((*dst)->ki_type) && (*dst)->kd_count)
			return -ENOTEMPTY;
	}
	return 0;
}

/* Gives ino (out of its directory) the malloc'ed name. */
static void name_set(struct kv_inode *ino, char *name)
{
	if (ino->ki_name != ino->ki_iname)
		free(ino->ki_name);
	ino->ki_name = name;
	ino->ki_hash = name_hash(name, strlen(name));
}

/*
 * Renames (ks_ns_lock held exclusive). Sets *victim to a file or directory
 * the rename took the name from (the caller drops its name reference after
 * unlocking), or NULL.
 */
static int do_rename(struct kv_store *st, struct kv_inode *odir, const char *oname,
		     struct kv_inode *ndir, const char *nname, unsigned flags,
		     struct kv_inode **victim)
{
	struct kv_inode *src, *dst;
	struct timespec ts;
	int err;

	*victim = NULL;
	err = rename_checks(st, odir, oname, ndir, nname, flags, &src, &dst);
	if (err || src == dst)
		return err;
	if (flags & RENAME_EXCHANGE) {
		char *sname = strdup(nname), *dname = strdup(oname);

		if (!sname || !dname) {
			free(sname);
			free(dname);
			return -ENOMEM;
		}
		dir_remove(odir, src);
		dir_remove(ndir, dst);
		name_set(src, sname);
		name_set(dst, dname);
		dir_insert(ndir, src);
		dir_insert(odir, dst);
	} else {
		char *name = strdup(nname);

		if (!name)
			return -ENOMEM;
		if (dst) {
			drop_name(st, ndir, dst);
			*victim = dst;
		}
		dir_remove(odir, src);
		name_set(src, name);
		dir_insert(ndir, src);
	}
	now(&ts);
	dir_touch(odir, &ts);
	if (ndir != odir)
		dir_touch(ndir, &ts);
	return 0;
}

static int ns_rename(struct kv_store *st, struct kv_inode *odir, const char *oname,
		     struct kv_inode *ndir, const char *nname, unsigned flags)
{
	struct kv_inode *victim;
	int err = do_rename(st, odir, oname, ndir, nname, flags, &victim);

	if (victim)
		kv_inode_put(victim);
	return err;
}

int kv_store_rename(struct kv_store *st, struct kv_inode *odir, const char *oname,
		    struct kv_inode *ndir, const char *nname, unsigned flags)
{
	char from[KV_JPATH_MAX], to[KV_JPATH_MAX];
	struct kv_inode *victim, *dst;
	int flen = 0, tlen = 0, err;

	if (flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE))
		return -EINVAL;
	if ((err = check_name(oname)) || (err = check_name(nname)))
		return err;
	pthread_rwlock_wrlock(&st->ks_ns_lock);
	if (st->ks_journal && !dir_check(odir) && !dir_check(ndir)) {
		flen = kv_inode_path(odir, from, sizeof(from));
		tlen = kv_inode_path(ndir, to, sizeof(to));
	}
	dst = S_ISDIR(ndir->ki_type) ? dir_find(ndir, nname) : NULL;
	err = do_rename(st, odir, oname, ndir, nname, flags, &victim);
	if (!err && flen >= 0 && tlen >= 0 && st->ks_journal) {
		flen = kv_inode_path_join(from, flen, oname, sizeof(from));
		tlen = kv_inode_path_join(to, tlen, nname, sizeof(to));
		if (flen > 0 && tlen > 0)
			kv_persist_rename(st, from, flen, to, tlen, flags);
	}
	if (victim && victim == dst)
		name_gone(st, victim);
	pthread_rwlock_unlock(&st->ks_ns_lock);
	if (victim)
		kv_inode_put(victim); /* its name's reference */
	return changed(st, err, KV_CHANGE_RENAME, odir, oname, ndir, nname);
}

/* --- whole values (ioctl puts) --- */

int kv_store_stage_new(struct kv_store *st, uint64_t len, struct kv_obj **out)
{
	struct kv_obj *obj;
	int err;

	if (len > KV_MAX_VALUE)
		return -EFBIG;
	err = kv_obj_new(st->ks_pool, &obj);
	if (err)
		return err;
	do
		err = kv_obj_alloc(obj, len);
	while (retry_for_room(st, NULL, &err, len));
	if (err) {
		kv_obj_put(obj);
		return err;
	}
	*out = obj;
	return 0;
}

/* owe for change c of obj, a value to replace dir/name: on its durable bytes when it must. */
static int64_t owe_replacing(struct kv_store *st, struct kv_inode *dir, const char *name,
			     struct kv_obj *obj, const struct owe_change *c)
{
	int64_t owed = owe(st, NULL, obj, c);
	struct kv_inode *old;
	struct kv_attr a;

	if (owed != -EDQUOT || !dir || kv_store_lookup(st, dir, name, &old, &a))
		return owed;
	if (S_ISREG(old->ki_type)) {
		pthread_rwlock_wrlock(&old->ki_lock);
		owed = owe(st, old, obj, c);
		pthread_rwlock_unlock(&old->ki_lock);
	}
	kv_inode_put(old);
	return owed;
}

int kv_store_value_new(struct kv_store *st, uint64_t len, struct kv_inode *dir, const char *name,
		       struct kv_obj **out)
{
	struct owe_change ch;
	struct kv_obj *obj;
	int err = kv_store_stage_new(st, len, &obj);

	if (err)
		return err;
	ch = owe_of_write(obj, 0, len, len);
	do { /* its whole SSD quota, before anything is acknowledged */
		int64_t owed = owe_replacing(st, dir, name, obj, &ch);

		err = owed < 0 ? (int)owed : 0;
	} while (retry_for_room(st, NULL, &err, len));
	if (err) {
		kv_obj_put(obj);
		return err;
	}
	owe_set(st, obj, &ch);
	*out = obj;
	return 0;
}

int kv_store_publish(struct kv_store *st, struct kv_inode *dir, const char *name,
		     struct kv_obj *obj, const struct kv_cred *cred, bool noreplace,
		     struct kv_inode **out)
{
	size_t len = strlen(name);
	uint64_t h = name_hash(name, len);
	struct kv_inode *ino, *old;
	struct timespec ts;
	int err = check_len(len);

	if (!err)
		err = kv_inode_new(st, S_IFREG | 0644, cred, name, len, h, 0, &ino);
	if (err) {
		kv_obj_put(obj);
		return err;
	}
	ino->ki_obj = obj;
	atomic_init(&ino->ki_ref, 1); /* the name's */
	atomic_init(&ino->ki_nlink, 1);

	pthread_rwlock_wrlock(&st->ks_ns_lock);
	err = dir_check(dir);
	old = err ? NULL : dir_find_h(dir, name, h);
	if (!err && is_reserved(st, dir, name))
		err = -EPERM;
	else if (old && S_ISDIR(old->ki_type))
		err = -EISDIR;
	else if (old && noreplace)
		err = -EEXIST;
	if (err) {
		pthread_rwlock_unlock(&st->ks_ns_lock);
		atomic_store(&ino->ki_nlink, 0);
		kv_inode_free(ino);
		return err;
	}
	/* As a rename over the old name: its record is dead, open handles keep its bytes. */
	if (old) {
		name_gone(st, old);
		drop_name(st, dir, old);
	}
	dir_insert(dir, ino);
	atomic_fetch_add(&st->ks_keys, 1);
	atomic_fetch_add(&st->ks_bytes, obj->ko_size);
	/* Named and sealed in one step under ks_ns_lock: no lookup sees it unsealed. */
	pthread_rwlock_wrlock(&ino->ki_lock);
	seal(ino);
	ts = ino->ki_mtime;
	if (out) {
		kv_inode_get(ino);
		*out = ino;
	}
	pthread_rwlock_unlock(&ino->ki_lock);
	dir_touch(dir, &ts);
	pthread_rwlock_unlock(&st->ks_ns_lock);
	if (old)
		kv_inode_put(old); /* its name's reference */
	return old ? 1 : 0;
}

/* --- file contents --- */

int kv_store_open(struct kv_store *st, struct kv_inode *ino, int flags)
{
	int err;

	if (!S_ISREG(ino->ki_type))
		return no_value(ino);
	do {
		pthread_rwlock_wrlock(&ino->ki_lock);
		err = (flags & O_TRUNC) ? set_size(ino, 0) : 0;
		if (!err) {
			ino->ki_nopen++;
			kv_inode_get(ino);
			atomic_fetch_add(&st->ks_open, 1);
		}
		pthread_rwlock_unlock(&ino->ki_lock);
	} while (retry_for_room(st, ino, &err, KV_PAGE_SIZE));
	if (!err && (flags & O_TRUNC))
		resv_journal(st, ino);
	return err;
}

void kv_store_release(struct kv_store *st, struct kv_inode *ino, int flags)
{
	pthread_rwlock_wrlock(&ino->ki_lock);
	ino->ki_nopen--;
	if (ino->ki_nopen == 0 && ino->ki_pinned) {
		pin_records(ino, false);
		ino->ki_pinned = false;
	}
	settle(ino);
	if (ino->ki_nopen == 0 && st->ks_tier) {
		kv_tier_unspillable(st->ks_tier, ino);
		kv_tier_ra_drop(st->ks_tier, ino);
	}
	pthread_rwlock_unlock(&ino->ki_lock);
	atomic_fetch_sub(&st->ks_open, 1);
	kv_inode_put(ino);
}

static int read_value(struct kv_store *st, struct kv_inode *ino, uint64_t off, uint64_t len,
		      struct iovec *iov, int maxiov, uint64_t *bytes, struct kv_read_guard *guard)
{
	struct kv_obj *obj;
	int n;

again:
	touch(ino);
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
		return no_value(ino);
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
	uint64_t old = cur_size(ino), filled[FILL_MAX];
	struct owe_change ch;
	struct kv_obj *obj;
	int64_t owed;
	unsigned nfill = 0;
	int err;

	/* A write that covers the whole value need not copy it. */
	err = writable(ino, off == 0 && len >= old ? 0 : old, &obj);
	if (err)
		return err;
	/* What it writes, and the extent of the old end if it writes past it. */
	err = unspill(ino, obj, off < old ? off : old & ~(KV_EXTENT - 1), off + len, UINT64_MAX);
	if (!err && ino->ki_resv && !ino->ki_store->ks_tier) {
		if (off + len > old) /* reserved extents past the end: the size first */
			err = kv_obj_truncate(obj, off + len);
		if (!err)
			nfill = fill_reserved(ino, obj, off, off + len, filled);
	}
	/* The SSD quota of what it changes (the extent of the old end too, if it writes past it). */
	ch = owe_of_write(obj, off, off + len, off + len > obj->ko_size ? off + len : obj->ko_size);
	owed = err ? 0 : owe(ino->ki_store, ino, obj, &ch);
	if (owed < 0)
		err = (int)owed;
	if (!err)
		err = kv_obj_write(obj, off, buf, len);
	if (!err)
		owe_set(ino->ki_store, obj, &ch);
	else
		unowe(ino->ki_store, owed);
	if (err)
		unfill(ino, filled, nfill, obj == ino->ki_obj ? old : 0);
	if (err && obj == ino->ki_obj && obj->ko_size != old)
		kv_obj_truncate(obj, old); /* the open version itself: as it was */
	return conclude(ino, obj, old, err);
}

int kv_store_write(struct kv_store *st, struct kv_inode *ino, uint64_t off, const void *buf,
		   size_t len)
{
	int err;

	if (!S_ISREG(ino->ki_type))
		return no_value(ino);
	if (off > KV_MAX_VALUE || len > KV_MAX_VALUE - off)
		return -EFBIG;
	do {
		pthread_rwlock_wrlock(&ino->ki_lock);
		err = write_locked(ino, off, buf, len);
		/* Past one extent, an open file may spill (core/tier.c, "Spill"). */
		if (st->ks_tier && ino->ki_obj && !ino->ki_obj->ko_sealed &&
		    ino->ki_obj->ko_size > KV_EXTENT)
			kv_tier_spillable(st->ks_tier, ino);
		pthread_rwlock_unlock(&ino->ki_lock);
	} while (retry_for_room(st, ino, &err, len));
	return err;
}

/*
 * fallocate(PUNCH_HOLE | KEEP_SIZE) under ki_lock (exclusive): [off, end)
 * reads as zeros, whole extents of it become holes and give back their
 * reservations, as ext4 deallocates them.
 */
static int punch_locked(struct kv_inode *ino, uint64_t off, uint64_t end)
{
	uint64_t old = cur_size(ino), resv = kv_resv_count(ino->ki_resv), last;
	struct owe_change ch;
	struct kv_obj *obj;
	int64_t owed;
	int err = 0;

	err = resv_drop(ino, (off + KV_EXTENT - 1) >> KV_EXTENT_SHIFT, end >> KV_EXTENT_SHIFT);
	if (err)
		return err;
	if (off >= old) {
		resv_persist(ino, resv);
		return 0;
	}
	err = writable(ino, old, &obj);
	if (err)
		return err;
	err = unspill(ino, obj, off, end, UINT64_MAX);
	/* A new version: its record, and the extents it cuts into but keeps. */
	ch = (struct owe_change){.oc_old = old, .oc_size = old, .oc_n = 1, .oc_r = {{off, off}}};
	last = end < old ? end : old;
	if (off & (KV_EXTENT - 1) && kv_obj_has_data(obj, off >> KV_EXTENT_SHIFT))
		ch.oc_r[0].or_end = off + 1;
	if (last & (KV_EXTENT - 1) && (last - 1) >> KV_EXTENT_SHIFT != off >> KV_EXTENT_SHIFT &&
	    kv_obj_has_data(obj, (last - 1) >> KV_EXTENT_SHIFT))
		ch.oc_r[ch.oc_n++] = (struct owe_range){last - 1, last};
	owed = err ? 0 : owe(ino->ki_store, ino, obj, &ch);
	if (owed < 0)
		err = (int)owed;
	if (!err)
		err = kv_obj_punch(obj, off, end - off);
	if (!err)
		owe_set(ino->ki_store, obj, &ch);
	else
		unowe(ino->ki_store, owed);
	return conclude(ino, obj, old, err);
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
	uint64_t old = cur_size(ino), resv = kv_resv_count(ino->ki_resv);
	uint64_t size = (mode & FALLOC_FL_KEEP_SIZE) || end <= old ? old : end;
	struct owe_change ch;
	struct kv_obj *obj;
	int64_t owed;
	int err;

	if (mode & FALLOC_FL_PUNCH_HOLE)
		return punch_locked(ino, off, end);
	err = resv_take(ino, off >> KV_EXTENT_SHIFT, (end + KV_EXTENT - 1) >> KV_EXTENT_SHIFT);
	if (err)
		return err;
	if (size == old) {
		resv_persist(ino, resv);
		return 0;
	}
	err = writable(ino, old, &obj);
	if (err)
		return err;
	err = unspill(ino, obj, old & ~(KV_EXTENT - 1), UINT64_MAX, UINT64_MAX);
	/* A new version: its record, and the extent of the old end it fills. */
	ch = (struct owe_change){.oc_old = old, .oc_size = size, .oc_n = 1, .oc_r = {{size, size}}};
	owed = err ? 0 : owe(ino->ki_store, ino, obj, &ch);
	if (owed < 0)
		err = (int)owed;
	if (!err)
		err = kv_obj_reserve(obj, size, false);
	if (!err)
		owe_set(ino->ki_store, obj, &ch);
	else
		unowe(ino->ki_store, owed);
	return conclude(ino, obj, old, err);
}

int kv_store_fallocate(struct kv_store *st, struct kv_inode *ino, int mode, uint64_t off,
		       uint64_t len)
{
	int err;

	if (mode & ~(FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE))
		return -EOPNOTSUPP;
	if ((mode & FALLOC_FL_PUNCH_HOLE) && !(mode & FALLOC_FL_KEEP_SIZE))
		return -EOPNOTSUPP; /* as on Linux: a punch never changes the size */
	if (!S_ISREG(ino->ki_type))
		return no_value(ino);
	if (off > KV_MAX_VALUE || len > KV_MAX_VALUE - off)
		return -EFBIG;
	do {
		pthread_rwlock_wrlock(&ino->ki_lock);
		err = fallocate_locked(ino, mode, off, off + len);
		pthread_rwlock_unlock(&ino->ki_lock);
	} while (retry_for_room(st, ino, &err, len));
	resv_journal(st, ino); /* even on failure: a punch may have given some back */
	return err;
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
		return no_value(ino);
	pthread_rwlock_rdlock(&ino->ki_lock);
	size = cur_size(ino);
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
			seal(ino);
		seq = ino->ki_obj ? ino->ki_obj->ko_seq : 0;
		pthread_rwlock_unlock(&ino->ki_lock);
		err = st->ks_tier ? kv_tier_wait_durable(st->ks_tier, ino, seq) : 0;
	} while (err == -EAGAIN);
	return err;
}

int kv_store_readdir(struct kv_store *st, struct kv_inode *dir, struct kv_dir_snap *snap)
{
	uint32_t n = 0;
	int err = 0;

	snap->kds_count = 0;
	snap->kds_ent = NULL;
	if (!S_ISDIR(dir->ki_type))
		return -ENOTDIR;
	pthread_rwlock_rdlock(&st->ks_ns_lock);
	if (dir->kd_count) {
		snap->kds_ent = calloc(dir->kd_count, sizeof(*snap->kds_ent));
		if (!snap->kds_ent) {
			err = -ENOMEM;
			goto out_unlock;
		}
	}
	for (uint32_t b = 0; b < dir->kd_nbuckets; b++) {
		for (struct kv_inode *c = dir->kd_table[b]; c; c = c->ki_hnext) {
			struct kv_dirent *e = &snap->kds_ent[n];

			e->kde_name = strdup(c->ki_name);
			if (!e->kde_name) {
				err = -ENOMEM;
				goto out_unlock;
			}
			e->kde_ino = c->ki_ino;
			e->kde_type = c->ki_type;
			n++;
		}
	}
out_unlock:
	pthread_rwlock_unlock(&st->ks_ns_lock);
	snap->kds_count = n;
	if (err)
		kv_dir_snap_free(snap);
	return err;
}

void kv_dir_snap_free(struct kv_dir_snap *snap)
{
	for (uint32_t i = 0; i < snap->kds_count; i++)
		free(snap->kds_ent[i].kde_name);
	free(snap->kds_ent);
	snap->kds_ent = NULL;
	snap->kds_count = 0;
}
