/* SPDX-License-Identifier: MIT */
/*
 * core/write.h — writes' and versions' calls for the layers above them
 * (core/write.c; not for use outside core/): the namespace, attributes,
 * fallocate and core/store.c. The store's API is core/store.h.
 */
#ifndef KVFS_CORE_WRITE_H
#define KVFS_CORE_WRITE_H

#include "core/store_int.h"

/*
 * Pins or unpins the buckets of every record ino's versions hold (durable
 * and spilled): a file deleted while open keeps reading them (ki_lock held
 * exclusive, or the inode dying).
 */
void kv_write_pin_records(struct kv_inode *ino, bool pin);
/*
 * Returns in *out the version of a regular file to modify (ki_lock held
 * exclusive): the current one while it is open, else a copy-on-write copy
 * of its first `keep` bytes (from DRAM, or from the SSD when the value is
 * only there), not yet installed, so a change that fails leaves the file
 * exactly as it was. Returns 0, -ENOSPC or -EIO.
 */
int kv_write_writable(struct kv_inode *ino, uint64_t keep, struct kv_obj **out);
/* Seals the open version (ki_lock held exclusive) and queues it for the SSD. */
void kv_write_seal(struct kv_inode *ino);
/* Seals an open version nobody has open any more (ki_lock held exclusive). */
void kv_write_settle(struct kv_inode *ino);
/*
 * Ends a change made to version obj (from kv_write_writable()): with err it is
 * dropped (abandon), else it becomes the current one (install), sealed
 * unless someone has the file open (settle). Returns err.
 */
int kv_write_conclude(struct kv_inode *ino, struct kv_obj *obj, uint64_t old, int err);
/*
 * Before the open version obj changes bytes [from, to) (to UINT64_MAX: up
 * to its end): its spilled extents there come back into memory, or, wholly
 * at or past `cut` (the new size of a truncate; UINT64_MAX otherwise), are
 * let go. Their records die (ki_lock held exclusive). Returns 0, -ENOSPC
 * or -EIO (what came back so far stays back: the bytes are the same).
 */
int kv_write_unspill(struct kv_inode *ino, struct kv_obj *obj, uint64_t from, uint64_t to,
		     uint64_t cut);
/* Sets the size of a regular file (ki_lock held exclusive). */
int kv_write_set_size(struct kv_inode *ino, uint64_t size);
/*
 * True when a change that failed with *errp should be tried again: the
 * pool was full and the tier made room (evicted clean values, or waited for
 * the offloader to make some clean or to spill files being written). Call
 * without ki_lock. -EDQUOT, inside the store's files, is a refusal for
 * lack of room on the SSD (or in the whole store), not in the pool: never
 * retried, it reaches the caller as -ENOSPC.
 */
bool kv_write_retry_for_room(struct kv_store *st, struct kv_inode *ino, int *errp, uint64_t bytes);

#endif
