/* SPDX-License-Identifier: MIT */
/*
 * core/store_int.h — the store's insides, shared by its parts:
 * store.c (namespace and values in DRAM), tier.c (offload to the SSD,
 * eviction from DRAM, reads from the SSD, fsync) and persist.c (journal,
 * checkpoint, recovery, fsck and salvage). Not for use outside core/.
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
 * core/shared.c's sh_lock (the RADOS tier's connection state) is a leaf
 * outside this order: never taken with any of these held, it takes none.
 * core/readahead.c's kr_lock comes below ki_lock, kt_lock and
 * kt_clock_lock (taken with any of them held, it takes none of them) and
 * above only ssd/aio.c's leaf ka_lock.
 */
#ifndef KVFS_CORE_STORE_INT_H
#define KVFS_CORE_STORE_INT_H

#include <stdlib.h>

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
				     ki_map (core/store.c, borrow): holes in ki_obj's memory,
				     their bytes are here; xm_seq is the version's sequence
				     number. Only while ki_obj is open, or sealed and not yet
				     durable */
	int ki_offload_err;   /* why the newest version could not be offloaded, or 0 */
	bool ki_pinned;	      /* deleted while open: ki_map's buckets are pinned until the last close */
	bool ki_resv_dirty;   /* its reservations changed, not its durable version: journal them
				 (resv_journal in core/store.c) */
	uint64_t ki_credit_seq, ki_credit; /* SSD quota promised to newer versions on the
					      strength of ki_map's bytes (which die once they
					      are durable) while ki_map.xm_seq was ki_credit_seq
					      (core/store.c, owe) */
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
	pthread_rwlock_t ks_ns_lock;
	_Atomic uint64_t ks_next_ino;
	_Atomic uint64_t ks_seq; /* the last sequence number handed out */
	_Atomic uint64_t ks_keys, ks_dirs, ks_open, ks_bytes, ks_inodes;
	_Atomic uint64_t ks_symlinks, ks_specials; /* named symlinks; named FIFOs and sockets */
	struct kv_tier *ks_tier;	/* NULL: DRAM only (no data directory, or --ssd-size=0) */
	struct kv_journal *ks_journal;	/* NULL with ks_tier */
	struct kv_gc *ks_gc;		/* compaction (core/gc.h); NULL with ks_tier */
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

/* --- store.c --- */

void kv_store_now(struct timespec *ts);
/* Seals an open version nobody has open any more (ki_lock held exclusive). */
void kv_store_settle(struct kv_inode *ino);
/* Writes ino's path (relative to the root) into buf; returns its length or -ENAMETOOLONG.
 * ks_ns_lock held. */
int kv_store_path(const struct kv_inode *ino, char *buf, size_t len);
/* Finds a child by name (ks_ns_lock held). */
struct kv_inode *kv_store_child(const struct kv_inode *dir, const char *name);
/*
 * Makes a node under dir without journaling (recovery; ks_ns_lock held
 * exclusive). link is a symlink's target (S_IFLNK), NULL for other types.
 * A regular file has no value in DRAM (ki_obj NULL): recovery finds it on
 * the SSD; its times are 0 until its PUT sets them (a key whose PUT does
 * not is dropped).
 */
int kv_store_make(struct kv_store *st, struct kv_inode *dir, const char *name, mode_t mode,
		  const char *link, struct kv_inode **out);
/*
 * dir's child `name` (len bytes, NUL-terminated), made like kv_store_make
 * (type `mode`, no link) when there is none; one hash of the name for
 * both. Recovery, ks_ns_lock held exclusive. Returns 0 or -errno.
 */
int kv_store_child_make(struct kv_store *st, struct kv_inode *dir, const char *name, size_t len,
			mode_t mode, struct kv_inode **out);
/* Takes a name away, without journaling (recovery; ks_ns_lock held exclusive). */
void kv_store_unname(struct kv_store *st, struct kv_inode *dir, struct kv_inode *ino);
/* Renames without journaling (recovery; ks_ns_lock held exclusive). */
int kv_store_rename_locked(struct kv_store *st, struct kv_inode *odir, const char *oname,
			   struct kv_inode *ndir, const char *nname, unsigned flags);

/* --- tier.c --- */

int kv_tier_create(struct kv_store *st, int datadir_fd, struct kv_tier **out);
/* Offloads everything still dirty, then stops the offloader. */
void kv_tier_flush_stop(struct kv_tier *t);
/* Starts the offloader thread (after recovery). */
void kv_tier_start(struct kv_tier *t);
void kv_tier_destroy(struct kv_tier *t);
struct kv_bucket_set *kv_tier_buckets(struct kv_tier *t);
/* Queues ino's sealed, dirty version for offload (ki_lock held). */
void kv_tier_enqueue(struct kv_tier *t, struct kv_inode *ino);
/* ino is being freed: takes it off the clock and the queue, and drops its read-ahead. */
void kv_tier_forget(struct kv_tier *t, struct kv_inode *ino);
/*
 * ino's value changed, it lost its name, or its last handle closed: its
 * read-ahead buffers go (core/readahead.h). Any lock may be held.
 */
void kv_tier_ra_drop(struct kv_tier *t, struct kv_inode *ino);
/* ino's value became clean and resident (ki_lock held): puts it on the clock. */
void kv_tier_clean(struct kv_tier *t, struct kv_inode *ino);
/*
 * The pool had no room for `bytes`: evicts clean values, or waits for the
 * offloader to make some clean or to spill files being written, up to a
 * bound. Call without any ki_lock. Returns 0 when it freed something
 * (retry), -ENOSPC when nothing can be.
 */
int kv_tier_make_room(struct kv_tier *t, uint64_t bytes);
/*
 * The SSD quota refused a promise (core/obj.h, "SSD quota owed"): when
 * values wait to be written, waits (up to the back-pressure bound) for
 * the offloader to finish a batch, since a value's promise is more than
 * its records take and placing them gives the rest back; else runs an
 * urgent compaction pass (dead space, or with --evict=lru old keys, give
 * room back). Call without any ki_lock. Returns 0 when room may have come
 * (retry), -ENOSPC when none did.
 */
int kv_tier_quota_room(struct kv_tier *t);
/*
 * ino's open version is longer than one extent (ki_lock held): puts it on
 * the spill list, so the offloader may send its complete extents to the
 * SSD when the pool runs short of room (a file can grow past the pool).
 */
void kv_tier_spillable(struct kv_tier *t, struct kv_inode *ino);
/* ino's last fd closed (ki_lock held, a reference of the caller's): off the spill list. */
void kv_tier_unspillable(struct kv_tier *t, struct kv_inode *ino);
/*
 * Reads [off, off + len) of ino's DRAM version obj, whose extents that are
 * holes in memory but have a record in map are read from the SSD: map is
 * ki_spill (obj open, or sealed and not yet durable: part of it spilled or
 * borrowed) or ki_map (obj partly in DRAM, ko_partial). ki_lock held
 * shared, map's checksums loaded or not; the bytes read go in guard's
 * buffers. Fills iov like kv_store_read. With ino (map is its ki_map, obj
 * its sealed version) the read takes part in ino's read-ahead; NULL: not.
 */
int kv_tier_read_mixed(struct kv_tier *t, const struct kv_inode *ino, const struct kv_obj *obj,
		       const struct kv_xmap *map, uint64_t off, uint64_t len, struct iovec *iov,
		       int maxiov, uint64_t *bytes, struct kv_read_guard *guard);
/*
 * Brings the extents of [off, off + len) of ino's clean value that are
 * only on the SSD into DRAM (ki_lock not held; core/tier.c, "Residency").
 * Returns 0 when the range is in DRAM afterwards, else -errno (-EAGAIN:
 * not a clean value, or another version arrived: read what is there).
 */
int kv_tier_promote(struct kv_tier *t, struct kv_inode *ino, uint64_t off, uint64_t len);
/*
 * Reads [off, off + len) of a value that is only on SSD (ki_lock not held;
 * loc copied under it). Fills iov/guard like kv_store_read.
 */
int kv_tier_read(struct kv_tier *t, struct kv_inode *ino, uint64_t off, uint64_t len,
		 struct iovec *iov, int maxiov, uint64_t *bytes, struct kv_read_guard *guard);
/*
 * Reads a value that is only on SSD, verified, straight into iov (4 KiB
 * aligned pieces covering len, a multiple of 4 KiB), with ki_lock held
 * shared across the read. -EAGAIN when the value is not (only) on the SSD
 * any more, is not len bytes, or reads promote it: use kv_tier_read.
 */
int kv_tier_read_direct(struct kv_tier *t, struct kv_inode *ino, const struct iovec *iov, int n,
			uint64_t len);
/*
 * Waits until every value sealed so far has been written (or failed to be)
 * and the journal is durable: syncfs. Returns the journal's sync result.
 */
int kv_tier_drain(struct kv_tier *t);
/*
 * Waits until ino's version with sequence number seq is durable (or failed,
 * or the key deleted); -EAGAIN when a newer version took its place before
 * (a change by another handle): it may never be written, wait for that one.
 */
int kv_tier_wait_durable(struct kv_tier *t, struct kv_inode *ino, uint64_t seq);
void kv_tier_usage(struct kv_tier *t, struct kv_store_usage *u);
/* Counts a read served from DRAM, or (ssd) one that read some of its bytes from the SSD. */
void kv_tier_hit(struct kv_tier *t, bool ssd);
/* Records how long recovery took, how many keys it brought back, how many it had to drop. */
void kv_tier_recovered(struct kv_tier *t, uint64_t ns, uint64_t keys, uint64_t lost);

/* --- persist.c --- */

/* Journals a namespace change (ks_ns_lock held). No-op without a journal. */
void kv_persist_mkdir(struct kv_store *st, struct kv_inode *dir);
/* Journals a new symlink, FIFO or socket (ks_ns_lock held). */
void kv_persist_node(struct kv_store *st, struct kv_inode *ino);
void kv_persist_del(struct kv_store *st, const char *path, int len);
void kv_persist_rename(struct kv_store *st, const char *from, int flen, const char *to, int tlen,
		       unsigned flags);
void kv_persist_setattr(struct kv_store *st, struct kv_inode *ino);
/* Journals where ino's value now lives (ks_ns_lock and ki_lock held). */
void kv_persist_put(struct kv_store *st, struct kv_inode *ino);
/*
 * Opens the tier (ks_tier) and loads checkpoint + journal into the (empty)
 * store. On failure ks_tier is set if it was opened.
 */
int kv_persist_recover(struct kv_store *st, int datadir_fd);
/*
 * Writes, in a thread of its own, the checkpoint recovery left due (it
 * replayed more than one journal file): call once the store serves.
 */
void kv_persist_start(struct kv_store *st);
/* Waits for kv_persist_start's checkpoint. Call before stopping the tier. */
void kv_persist_stop(struct kv_store *st);
/* Writes a checkpoint of the whole store and drops the journal before it. */
int kv_persist_checkpoint(struct kv_store *st);

#endif
