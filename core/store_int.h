/* SPDX-License-Identifier: MIT */
/*
 * core/store_int.h — the store's insides: struct kv_inode and struct
 * kv_store, the data every layer of the store reads, and the lock order
 * across those layers. Not for use outside core/. It declares no module's
 * functions: each has its header, top to bottom
 *
 *   core/store.h     the namespace: kv_store_*, in parts, top to bottom
 *                    core/store.c     start, stop, the callback tables
 *                    core/ns.c        directories, names (core/ns.h)
 *                    core/attr.c      getattr, setattr (core/attr.h)
 *                    core/fallocate.c fallocate, punch
 *                    core/write.c     writes, versions, sealing (core/write.h)
 *                    core/quota.c     the SSD quota, reserved extents
 *                                     (core/quota.h)
 *                    core/read.c      reads, seek (beside them: calls none)
 *   core/tier.h      offload, eviction, reads from the SSD, fsync (core/tier.c)
 *   core/gc.h        compaction, cache-mode eviction (core/gc.c)
 *   core/persist.h   journal, checkpoints, recovery, fsck, salvage (core/persist.c)
 *   core/inode.h     the object model: inodes, references, paths, read guards
 *
 * and calls only go down that list (gc.c and persist.c call neither each
 * other nor tier.c). What a lower one tells an upper one goes through a
 * callback table the upper one put here or passed down: ks_iops (struct
 * kv_inode_ops), struct kv_persist_ns, struct kv_gc_ops, ks_hooks.
 *
 * Lock order (see also core/store.h), outermost first:
 *   kg_pass_lock (core/gc.c: one compaction pass)  >
 *   ks_ns_lock  >  ki_lock  >  kt_lock (tier queue)  >  kt_clock_lock
 * and below all of them the bucket set's bs_append_lock > bs_lock and the
 * journal's own lock (ssd/). A compaction pass holds kg_pass_lock alone
 * when it starts, so the offloader (which calls kv_gc_make_room holding
 * nothing) and MNT/.kvfs/ctl may both run passes.
 * kt_clock_lock may also be taken while holding ki_lock; while holding
 * kt_clock_lock, a ki_lock is only ever *tried* (never waited for), so
 * eviction cannot deadlock with a writer.
 * ks_evict_lock (the eviction hook, kv_store_set_evicted) is taken with
 * none of ks_ns_lock, ki_lock or the tier's locks held (a pass's
 * kg_pass_lock may be), and held across the hook: the hook's own locks
 * (fs/notify.c's kn_lock) come below it, and it takes none of the store's.
 * rados/shared_int.h's sh_lock (the RADOS tier's connection state) is a leaf
 * outside this order: never taken with any of these held, it takes none.
 * core/readahead.c's kr_lock comes below ki_lock, kt_lock and
 * kt_clock_lock (taken with any of them held, it takes none of them) and
 * above only ssd/aio.c's leaf ka_lock.
 */
#ifndef KVFS_CORE_STORE_INT_H
#define KVFS_CORE_STORE_INT_H

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "core/inode.h"
#include "core/resv.h"
#include "core/store.h"
#include "core/xmap.h"
#include "ssd/bucket.h"
#include "ssd/journal.h"

struct kv_tier;
struct kv_gc;

/* Lock order and ownership of every field: see the comment in store.h. */
struct kv_inode {
	_Atomic uint64_t ki_ref;
	uint64_t ki_ino;
	mode_t ki_type; /* S_IFDIR, S_IFREG, or a metadata-only S_IFLNK, S_IFIFO, S_IFSOCK */
	struct kv_store *ki_store;
	union {
		char *ki_link;		 /* S_IFLNK: the target, NUL-terminated (immutable) */
		struct kv_resv *ki_resv; /* S_IFREG, under ki_lock: the reserved extents of
					    its newest version, NULL: none (core/resv.h) */
	};				 /* NULL for every other type */

	/* ks_ns_lock */
	struct kv_inode *ki_parent; /* NULL for the root and once unlinked */
	char *ki_name;		    /* ki_iname, or malloc'ed (a rename) */
	uint64_t ki_hash;
	struct kv_inode *ki_hnext;  /* chain in the parent's kd_table */
	_Atomic uint32_t ki_nlink;  /* written under ks_ns_lock, read anywhere */
	struct kv_inode **kd_table; /* directories: children by name hash */
	uint32_t kd_nbuckets;
	uint32_t kd_count;

	/* ki_lock */
	pthread_rwlock_t ki_lock;
	mode_t ki_mode;
	uid_t ki_uid;
	gid_t ki_gid;
	struct timespec ki_atime, ki_mtime, ki_ctime;
	struct kv_obj *ki_obj; /* regular files: the version in DRAM; NULL when only on SSD */
	uint32_t ki_nopen;
	struct kv_xmap ki_map; /* the newest durable version on SSD (xm_seq 0: none) */
	struct kv_xmap *ki_spill; /* NULL, or extents of ki_obj written to the SSD early (a file
				     larger than DRAM: core/tier.c, "Spill") or borrowed from
				     ki_map (core/write.c, borrow): holes in ki_obj's memory,
				     their bytes are here; xm_seq is the version's sequence
				     number. Only while ki_obj is open, or sealed and not yet
				     durable */
	int ki_offload_err;   /* why the newest version could not be offloaded, or 0 */
	bool ki_pinned;	      /* deleted while open: ki_map's buckets are pinned until the last close */
	bool ki_resv_dirty;   /* its reservations changed, not its durable version: journal them
				 (kv_quota_resv_journal in core/quota.c) */
	uint64_t ki_credit_seq, ki_credit; /* SSD quota promised to newer versions on the
					      strength of ki_map's bytes (which die once they
					      are durable) while ki_map.xm_seq was ki_credit_seq
					      (core/quota.c, kv_quota_owe) */
	_Atomic uint64_t ki_used; /* last read or write (CLOCK_MONOTONIC_COARSE ns): cache mode */

	/* kt_lock */
	bool ki_queued;		   /* on the offload queue */
	_Atomic bool ki_spillable; /* on the spill list (written under kt_lock, read anywhere) */
	bool ki_sdrop;		   /* last close while a spill round had the list: drop it */
	uint64_t ki_qbytes;	   /* what it counts in the backlog */
	struct kv_inode *ki_qnext;
	struct kv_inode *ki_snext; /* next on the spill list (core/tier.c, "Spill") */

	/* kt_clock_lock */
	struct kv_inode *ki_cprev, *ki_cnext; /* the clock of clean values (NULL: not on it) */
	bool ki_on_clock;
	_Atomic bool ki_referenced; /* read since the clock hand last passed */

	char ki_iname[]; /* the name it was made with, in the same allocation (immutable) */
};

struct kv_store {
	struct kv_pool *ks_pool;  /* immutable */
	struct kv_inode *ks_root; /* immutable */
	/* what the object model calls back (core/inode.h): set before the root is made */
	const struct kv_inode_ops *ks_iops;
	pthread_rwlock_t ks_ns_lock;
	_Atomic uint64_t ks_next_ino;
	_Atomic uint64_t ks_seq; /* the last sequence number handed out */
	_Atomic uint64_t ks_keys, ks_dirs, ks_open, ks_bytes, ks_inodes;
	_Atomic uint64_t ks_symlinks, ks_specials; /* named symlinks; named FIFOs and sockets */
	struct kv_tier *ks_tier;	/* NULL: DRAM only (no data directory, or --ssd-size=0) */
	struct kv_journal *ks_journal;	/* NULL with ks_tier */
	struct kv_gc *ks_gc;		/* compaction (core/gc.h); NULL with ks_tier */
	/* ks_tier's bucket set (kv_tier_buckets): set (by recovery) and cleared with ks_tier */
	struct kv_bucket_set *ks_buckets;
	pthread_mutex_t ks_ckpt_lock;	/* one checkpoint at a time (offloader, compactor); taken
					   before ks_ns_lock */
	pthread_t ks_ckpt_thread;	/* the checkpoint recovery left due (kv_persist_start) */
	bool ks_ckpt_due, ks_ckpt_started; /* set by kv_store_create, cleared by kv_persist_stop */
	const struct kv_config *ks_cfg; /* immutable */
	int ks_datadir_fd;		/* immutable: DATA_DIR, or -1 */
	_Atomic int ks_meta_err;	/* a journal entry was lost: fsync fails with it */
	uint64_t ks_resv_loaded;	/* recovery: reserved extents the checkpoint brought
					   before the bucket set was there to promise them */
	/* ks_evict_lock guards ks_evicted and ks_evicted_arg, and is held across their call */
	pthread_mutex_t ks_evict_lock;
	kv_store_evicted_fn ks_evicted; /* NULL: nobody to tell */
	struct kv_store_hooks ks_hooks; /* kv_store_set_hooks: before serving, then immutable */
	void *ks_evicted_arg;
};

/* Records in ino's spill (ki_lock held). */
static inline uint32_t kv_spill_n(const struct kv_inode *ino)
{
	return ino->ki_spill ? ino->ki_spill->xm_n : 0;
}

/* Frees ino's spill map, which holds nothing any more (ki_lock held exclusive). */
static inline void kv_spill_free(struct kv_inode *ino)
{
	if (ino->ki_spill)
		kv_xmap_clear(ino->ki_spill);
	free(ino->ki_spill);
	ino->ki_spill = NULL;
}

/* Stamps ino as used now (cache mode evicts the least recently used). */
static inline void kv_touch(struct kv_inode *ino)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	atomic_store_explicit(&ino->ki_used,
			      (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec,
			      memory_order_relaxed);
}

/* What a call about a value answers for a node that has none: -EISDIR or -EINVAL. */
static inline int kv_no_value(const struct kv_inode *ino)
{
	return S_ISDIR(ino->ki_type) ? -EISDIR : -EINVAL;
}

/* Whether [off, off + len) may be written to ino: 0, kv_no_value's error, or -EFBIG. */
static inline int kv_value_range(const struct kv_inode *ino, uint64_t off, uint64_t len)
{
	if (!S_ISREG(ino->ki_type))
		return kv_no_value(ino);
	return off > KV_MAX_VALUE || len > KV_MAX_VALUE - off ? -EFBIG : 0;
}

/* The size of a regular file's current value (ki_lock held). */
static inline uint64_t kv_cur_size(const struct kv_inode *ino)
{
	return ino->ki_obj ? ino->ki_obj->ko_size : ino->ki_map.xm_size;
}

#endif
