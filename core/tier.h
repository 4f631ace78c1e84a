/* SPDX-License-Identifier: MIT */
/*
 * core/tier.h — the policy between the DRAM pool and the SSD buckets
 * (core/tier.c): offload, eviction from DRAM, spilling files larger than
 * DRAM, reads from the SSD, promotion, fsync and syncfs. The policy in
 * plain words opens core/tier.c.
 *
 * Layer: below the namespace (core/store.c, which creates it; core/write.c,
 * which queues sealed values; core/read.c, which reads through it), above
 * compaction (core/gc.h: an
 * offload the quota refuses runs an urgent pass), persistence
 * (core/persist.h: each put made durable is journaled, and a journal grown
 * past its bound is checkpointed) and the object model (core/inode.h). It
 * never calls the namespace: a read that must start over (the value came
 * into DRAM, or a newer version arrived) returns -EAGAIN to it. Locks:
 * kt_lock > kt_clock_lock, below ks_ns_lock and ki_lock (core/store_int.h).
 */
#ifndef KVFS_CORE_TIER_H
#define KVFS_CORE_TIER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

struct kv_store;
struct kv_store_usage;
struct kv_inode;
struct kv_obj;
struct kv_xmap;
struct kv_tier;
struct kv_bucket_set;
struct kv_read_guard;

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
 * loc copied under it). Fills iov/guard like kv_store_read. -EAGAIN, with
 * nothing held in guard: the value came into DRAM (promoted) or a newer
 * version arrived meanwhile, so the caller (kv_store_read) reads again.
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

#endif
