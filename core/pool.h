/* SPDX-License-Identifier: MIT */
/*
 * core/pool.h — the DRAM staging pool.
 *
 * The pool is one anonymous mapping of `size` bytes bound to a NUMA node
 * (libnuma; on a machine with one node, or where libnuma reports no NUMA, it
 * is plain memory). It hands out *blocks*: runs of 4 KiB pages whose length
 * is a power of two between KV_PAGE_SIZE and KV_POOL_MAX_BLOCK, aligned to
 * at least KV_PAGE_SIZE, so a block can be the buffer of an O_DIRECT read or
 * write or of a DMA without a bounce copy.
 *
 * Values are not one block each: core/obj.c builds a value from a list of
 * blocks (the binary decomposition of its page count), so a value wastes
 * less than one page and a 10-byte value pins exactly one 4 KiB page.
 *
 * Inside, the mapping is split into shards, each a buddy allocator with its
 * own lock; a thread starts at the shard of the CPU it runs on and moves on
 * to the next one when its shard has no block of the size asked for, so
 * threads on different CPUs rarely contend. Allocation and free cost
 * O(log(KV_POOL_MAX_BLOCK / KV_PAGE_SIZE)) per shard visited.
 *
 * Accounting is exact and lock-free to read: used + free == size at every
 * moment a reader can observe (both are derived from one atomic counter).
 *
 * Thread-safety: every function may be called from any thread, except
 * kv_pool_destroy, which must be the last call.
 */
#ifndef KVFS_CORE_POOL_H
#define KVFS_CORE_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KV_PAGE_SIZE	  4096u
#define KV_POOL_MAX_BLOCK (2u << 20) /* 2 MiB: the largest block the pool hands out */

struct kv_pool;

/*
 * Creates a pool of `size` bytes (rounded down to a multiple of KV_PAGE_SIZE;
 * at least one page) on NUMA node `numa_node`, or on the node of the calling
 * thread when `numa_node` is -1. Its pages are faulted in on first use
 * until kv_pool_fill. Returns 0, -EINVAL for a size under one page or a
 * node that does not exist, or -ENOMEM when the mapping fails.
 */
int kv_pool_create(struct kv_pool **out, uint64_t size, int numa_node);

/*
 * Starts a background thread that faults the whole pool in (transparent
 * huge pages where the kernel gives them), so writers never stall on
 * first-touch faults: a staging pool is meant to be resident. The daemon
 * calls it once the mount serves: on a few cores it would slow recovery
 * down. Call at most once, from the thread that created the pool (or
 * one ordered after it); kv_pool_destroy stops that thread.
 */
void kv_pool_fill(struct kv_pool *pool);

/* Unmaps the pool. Blocks still allocated become invalid. */
void kv_pool_destroy(struct kv_pool *pool);

/*
 * Allocates one block of `len` bytes: a power of two, KV_PAGE_SIZE <= len <=
 * KV_POOL_MAX_BLOCK. The block is aligned to min(len, shard alignment), and
 * always to KV_PAGE_SIZE. Its contents are unspecified.
 * Returns 0 and sets *addr, -EINVAL for a bad len, or -ENOSPC when no shard
 * has a free block of that size (a smaller one may still be free), or when
 * it would take room reserved (kv_pool_reserve).
 */
int kv_pool_alloc(struct kv_pool *pool, size_t len, void **addr);

/*
 * Reservations: room promised to unwritten extents (core/resv.h) of a
 * store without an SSD, so their first write cannot fail for lack of it.
 * kv_pool_reserve promises `bytes` when used + reserved + bytes stays
 * within the size, else -ENOSPC (with force, always: a promise given back
 * while its memory is still held, about to be freed); kv_pool_alloc then
 * refuses what would eat into the promises, and kv_pool_alloc_reserved
 * allocates from them (the caller holds at least len promised; -ENOSPC
 * only when no block that large is free, the promise kept), and
 * kv_pool_free_reserved frees such a block back into the promise.
 * kv_pool_unreserve takes back a promise nobody will allocate from.
 */
int kv_pool_reserve(struct kv_pool *pool, uint64_t bytes, bool force);
void kv_pool_unreserve(struct kv_pool *pool, uint64_t bytes);
int kv_pool_alloc_reserved(struct kv_pool *pool, size_t len, void **addr);
void kv_pool_free_reserved(struct kv_pool *pool, void *addr, size_t len);

/* Bytes promised and not yet allocated. */
uint64_t kv_pool_reserved(const struct kv_pool *pool);

/*
 * SSD quota owed to blocks' bytes (core/obj.h, kv_obj_owe_need): the tier
 * sets fn once it can take quota back (NULL: none to take back, as before
 * the tier starts and after it ends), and kv_pool_owed_release hands fn
 * what a freed block still owed. fn is called from any thread, with any of
 * the store's locks held: it takes only the bucket set's own lock.
 */
void kv_pool_set_owed_hook(struct kv_pool *pool, void (*fn)(void *arg, uint64_t bytes), void *arg);
void kv_pool_owed_release(struct kv_pool *pool, uint64_t bytes);

/*
 * Returns pages to the pool. [addr, addr + len) must be page aligned and lie
 * wholly inside memory this pool handed out and has not taken back; it may
 * be a whole block, a tail of one, or span several blocks that were handed
 * out back to back (the pool splits the range into aligned power-of-two
 * pieces and frees each, merging buddies). len == 0 is a no-op.
 */
void kv_pool_free(struct kv_pool *pool, void *addr, size_t len);

/* Bytes the pool manages (what `df` shows as its size). */
uint64_t kv_pool_size(const struct kv_pool *pool);

/* Bytes handed out and not returned. */
uint64_t kv_pool_used(const struct kv_pool *pool);

/* The pool's first byte: [base, base + kv_pool_size) is all of its memory (to pin it). */
void *kv_pool_base(const struct kv_pool *pool);

/* The NUMA node the pool's memory is bound to, or -1 when not bound. */
int kv_pool_node(const struct kv_pool *pool);

/* True when [addr, addr + len) lies inside the pool's mapping. */
int kv_pool_contains(const struct kv_pool *pool, const void *addr, size_t len);

#endif
