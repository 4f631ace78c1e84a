/* SPDX-License-Identifier: MIT */
/*
 * core/pool.c — the DRAM staging pool: sharded buddy allocators over one
 * NUMA-bound anonymous mapping. The contract is in core/pool.h.
 *
 * Layout. The mapping starts on a KV_POOL_MAX_BLOCK (2 MiB) boundary: we map
 * 2 MiB - 4 KiB more than asked and unmap the slack at both ends. Shard i
 * covers pages [i * kp_shard_pages, (i + 1) * kp_shard_pages), the last shard
 * also takes the remainder. kp_shard_pages is a multiple of 512 pages (2 MiB),
 * so every shard base is 2 MiB aligned too, and a block of order k, aligned
 * to 2^k pages inside its shard, is aligned to its own length in memory. No
 * block ever crosses a 2 MiB boundary, hence never a shard boundary.
 *
 * Buddy state. All metadata lives in side arrays indexed by page, never in
 * the pool's pages, which belong to the caller (they may hold data, be
 * madvised away, or be registered for DMA):
 *   ks_state[p]  KV_PG_FREE | order when p is the first page of a free block,
 *                0 otherwise (allocated pages and the inner pages of free
 *                blocks);
 *   ks_next[p], ks_prev[p]  the links of free-block heads in the doubly
 *                linked free list of their order, KV_PG_NIL terminated.
 * So "is the buddy of this block free and whole?" is one byte compare, and
 * taking the buddy off its list is O(1): merge on free and split on alloc
 * both cost O(KV_POOL_ORDERS). Free also reads one state byte per page it
 * returns, to catch a double free before it corrupts the lists.
 *
 * Shard sizes need not be powers of two: a shard starts as the maximal
 * aligned power-of-two blocks that tile it (exactly what freeing the whole
 * shard page by page would leave).
 */
#include "core/pool.h"

#include <errno.h>
#include <numa.h>
#include <numaif.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define KV_PAGE_SHIFT	    12
#define KV_POOL_MAX_ORDER   9 /* 2^9 pages = 2 MiB */
#define KV_POOL_ORDERS	    (KV_POOL_MAX_ORDER + 1)
#define KV_POOL_MAX_SHARDS  16
#define KV_POOL_MIN_SHARD   (8u << 20) /* a pool is split only into shards this big */
#define KV_POOL_BLOCK_PAGES (1u << KV_POOL_MAX_ORDER)

#define KV_PG_FREE 0x80u /* ks_state: head of a free block; low bits hold its order */
#define KV_PG_NIL  UINT32_MAX

_Static_assert(KV_POOL_MAX_BLOCK == KV_PAGE_SIZE << KV_POOL_MAX_ORDER, "order table");
_Static_assert(KV_PAGE_SIZE == 1u << KV_PAGE_SHIFT, "page shift");

/*
 * One buddy allocator. ks_base and ks_npages are immutable after creation.
 * ks_lock guards ks_free, ks_state, ks_next and ks_prev (the whole free-list
 * structure of this shard); it is a leaf lock: no other lock is taken while
 * it is held, and a thread holds at most one shard lock at a time.
 * ks_avail mirrors which of ks_free[] are non-empty (bit k for order k). It is
 * written only under ks_lock and read without it, as a hint that lets
 * kv_pool_alloc pass over a shard that has nothing to offer without locking
 * it; a stale read only makes an allocation skip a shard that gained a block
 * concurrently, as if the allocation had come first.
 */
struct kv_pool_shard {
	_Alignas(64) pthread_mutex_t ks_lock;
	_Atomic uint32_t ks_avail;
	uint32_t ks_npages;
	char *ks_base;
	uint32_t ks_free[KV_POOL_ORDERS];
	uint8_t *ks_state;
	uint32_t *ks_next;
	uint32_t *ks_prev;
};

/*
 * Everything but kp_used, kp_reserved and kp_committed is immutable between
 * kv_pool_create and kv_pool_destroy. kp_used is the accounting counter, in
 * relaxed atomics: alloc adds after it took a block under its shard lock,
 * free subtracts before it drops the lock. So the subtraction for a page
 * comes before the addition of whoever takes it next (lock order plus
 * coherence of one atomic), and a reader never sees used above size.
 * Reservations (kv_pool_reserve) are admitted on kp_committed alone: used,
 * plus reserved, plus what allocations admitted but not yet taken; every
 * admission is one atomic add checked against the size (and undone when
 * over), so what is promised is never handed to anyone else.
 */
struct kv_pool {
	char *kp_base;
	uint64_t kp_size;
	uint64_t kp_shard_pages;
	unsigned kp_nshards;
	int kp_node;
	_Atomic uint64_t kp_used;
	_Atomic uint64_t kp_reserved;  /* promised (kv_pool_reserve), not yet allocated */
	_Atomic uint64_t kp_committed; /* used + reserved + admitted allocations */
	struct kv_pool_shard *kp_shards;
	uint8_t *kp_state;	/* backing store of every shard's ks_state */
	uint32_t *kp_links;	/* backing store of every shard's ks_next and ks_prev */
	pthread_t kp_filler;	/* faults the pool in, see pool_fill */
	bool kp_filler_started; /* set by kv_pool_fill, read by kv_pool_destroy (one thread) */
	_Atomic bool kp_stop;	/* asks the filler to end early */
	/* kv_pool_set_owed_hook: set while no block owes quota (tier start and end) */
	void (*kp_owed_fn)(void *arg, uint64_t bytes);
	void *kp_owed_arg;
};

/* Reports a caller bug that would corrupt the free lists, and aborts. */
__attribute__((noreturn)) static void pool_bug(const char *what, const void *addr, size_t len)
{
	fprintf(stderr, "kv_pool_free: %s: addr %p len %zu\n", what, addr, len);
	abort();
}

static unsigned floor_log2(uint64_t v)
{
	return 63u - (unsigned)__builtin_clzll(v);
}

static void list_push(struct kv_pool_shard *s, uint32_t p, unsigned order)
{
	uint32_t head = s->ks_free[order];

	s->ks_state[p] = (uint8_t)(KV_PG_FREE | order);
	s->ks_prev[p] = KV_PG_NIL;
	s->ks_next[p] = head;
	if (head != KV_PG_NIL)
		s->ks_prev[head] = p;
	s->ks_free[order] = p;
}

static void list_remove(struct kv_pool_shard *s, uint32_t p, unsigned order)
{
	uint32_t next = s->ks_next[p], prev = s->ks_prev[p];

	if (prev != KV_PG_NIL)
		s->ks_next[prev] = next;
	else
		s->ks_free[order] = next;
	if (next != KV_PG_NIL)
		s->ks_prev[next] = prev;
	s->ks_state[p] = 0;
}

/* Republishes the non-empty-list hint. Caller holds ks_lock. */
static void shard_publish_avail(struct kv_pool_shard *s)
{
	uint32_t mask = 0;

	for (unsigned k = 0; k < KV_POOL_ORDERS; k++)
		if (s->ks_free[k] != KV_PG_NIL)
			mask |= 1u << k;
	atomic_store_explicit(&s->ks_avail, mask, memory_order_relaxed);
}

/*
 * True when the block of 2^order pages at p overlaps a free block: one that
 * holds page p (it starts at p rounded down to its own order) or one that
 * starts after p, inside the block. Caller holds ks_lock. Costs one byte
 * read per page freed, against the 4 KiB the page holds.
 */
static bool shard_block_overlaps_free(const struct kv_pool_shard *s, uint32_t p, unsigned order)
{
	unsigned heads = 0;

	for (unsigned k = 0; k < KV_POOL_ORDERS; k++) {
		uint8_t st = s->ks_state[p & ~((1u << k) - 1)];

		if ((st & KV_PG_FREE) && (st & ~KV_PG_FREE) >= k)
			return true;
	}
	for (uint32_t i = 1; i < 1u << order; i++)
		heads |= s->ks_state[p + i];
	return heads & KV_PG_FREE;
}

/*
 * Frees the block of 2^order pages at shard page p (aligned to its size),
 * merging it with its buddy while the buddy is free and of the same order.
 * Caller holds ks_lock.
 */
static void shard_free_block(struct kv_pool_shard *s, uint32_t p, unsigned order)
{
	while (order < KV_POOL_MAX_ORDER) {
		uint32_t buddy = p ^ (1u << order);

		if ((uint64_t)buddy + (1u << order) > s->ks_npages)
			break;
		if (s->ks_state[buddy] != (KV_PG_FREE | order))
			break;
		list_remove(s, buddy, order);
		p &= ~(1u << order);
		order++;
	}
	list_push(s, p, order);
}

/* Takes a block of 2^order pages from shard s. Returns 0 or -ENOSPC. */
static int shard_alloc(struct kv_pool_shard *s, unsigned order, uint32_t *page)
{
	unsigned k = order;
	uint32_t p;

	pthread_mutex_lock(&s->ks_lock);
	while (k < KV_POOL_ORDERS && s->ks_free[k] == KV_PG_NIL)
		k++;
	if (k == KV_POOL_ORDERS) {
		pthread_mutex_unlock(&s->ks_lock);
		return -ENOSPC;
	}
	p = s->ks_free[k];
	list_remove(s, p, k);
	while (k > order) {
		k--;
		list_push(s, p + (1u << k), k);
	}
	shard_publish_avail(s);
	pthread_mutex_unlock(&s->ks_lock);
	*page = p;
	return 0;
}

/* Seeds shard s with the maximal aligned power-of-two blocks covering it. */
static void shard_seed(struct kv_pool_shard *s)
{
	uint32_t p = 0;

	while (p < s->ks_npages) {
		unsigned order = floor_log2(s->ks_npages - p);

		if (order > KV_POOL_MAX_ORDER)
			order = KV_POOL_MAX_ORDER;
		if (p && (unsigned)__builtin_ctz(p) < order)
			order = (unsigned)__builtin_ctz(p);
		list_push(s, p, order);
		p += 1u << order;
	}
	shard_publish_avail(s);
}

/*
 * Picks the shard count: one per two CPUs' worth of parallelism up to
 * KV_POOL_MAX_SHARDS, but never shards under KV_POOL_MIN_SHARD.
 */
static unsigned pool_nshards(uint64_t size)
{
	long ncpu = sysconf(_SC_NPROCESSORS_CONF);
	uint64_t want = ncpu > 0 ? 2 * (uint64_t)ncpu : 1;
	uint64_t fit = size / KV_POOL_MIN_SHARD;

	if (want > KV_POOL_MAX_SHARDS)
		want = KV_POOL_MAX_SHARDS;
	if (want > fit)
		want = fit;
	return want ? (unsigned)want : 1;
}

/*
 * Resolves the node to bind to: *node is the node, or -1 when the pool is not
 * to be bound (libnuma reports no NUMA, the machine has a single node, or the
 * calling thread's node is unknown or not one this task may allocate on).
 * Without NUMA only node 0 exists. Returns 0, or -EINVAL for a node that does
 * not exist or that this task may not allocate on (its cpuset's mems).
 */
static int pool_pick_node(int want, int *node)
{
	bool numa = numa_available() >= 0;
	int max = numa ? numa_max_node() : 0;

	if (want < -1 || want > max)
		return -EINVAL;
	if (numa && want >= 0 && !numa_bitmask_isbitset(numa_all_nodes_ptr, (unsigned)want))
		return -EINVAL;
	*node = -1;
	if (!numa || numa_num_configured_nodes() < 2)
		return 0;
	if (want == -1) {
		int cpu = sched_getcpu();

		want = cpu >= 0 ? numa_node_of_cpu(cpu) : -1;
		if (want >= 0 && !numa_bitmask_isbitset(numa_all_nodes_ptr, (unsigned)want))
			want = -1;
	}
	*node = want;
	return 0;
}

/* Binds [base, base + size) to node. Returns 0 or -errno. */
static int pool_bind(char *base, uint64_t size, int node)
{
	struct bitmask *mask = numa_allocate_nodemask();
	int err = 0;

	if (!mask)
		return -ENOMEM;
	numa_bitmask_setbit(mask, (unsigned)node);
	if (mbind(base, size, MPOL_BIND, mask->maskp, mask->size + 1, 0) < 0)
		err = -errno;
	numa_free_nodemask(mask);
	return err;
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
/*
 * madvise holds the process's mmap lock (shared) for a whole chunk, and a
 * thread that maps memory (a FUSE worker's stack, a heap growing) waits
 * for it: where fresh memory is slow to fault (a VM's host hands it back
 * late), 64 MiB took ~0.2 s and held the mount's first reply that long.
 */
#define FILL_CHUNK (2u << 20)

/*
 * The filler thread: faults the whole pool in, FILL_CHUNK at a time, once
 * kv_pool_fill starts it, so writers do not pay a page fault (and, with huge pages, a
 * compaction stall) on first touch: measured, it takes the p90 of a 1 MiB
 * FUSE write from ~4.7 ms to ~0.15 ms. A staging pool is meant to be
 * resident (and is pinned for DMA when CUDA is present). It only faults in
 * pages, never writes their contents, so it runs alongside allocations.
 * Kernels without MADV_POPULATE_WRITE (before 5.14) just fault on demand.
 */
static void *pool_fill(void *arg)
{
	struct kv_pool *pool = arg;

	for (uint64_t off = 0; off < pool->kp_size && !atomic_load(&pool->kp_stop);
	     off += FILL_CHUNK) {
		uint64_t n = pool->kp_size - off < FILL_CHUNK ? pool->kp_size - off : FILL_CHUNK;

		if (madvise(pool->kp_base + off, n, MADV_POPULATE_WRITE) < 0 && errno == EINVAL)
			break;
	}
	return NULL;
}

/* Maps `size` bytes starting on a KV_POOL_MAX_BLOCK boundary. Returns 0 or -ENOMEM. */
static int pool_map(uint64_t size, char **base)
{
	size_t slack = KV_POOL_MAX_BLOCK - KV_PAGE_SIZE;
	size_t len, head, tail;
	char *map;

	if (size > SIZE_MAX - slack)
		return -ENOMEM;
	len = size + slack;
	map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		   -1, 0);
	if (map == MAP_FAILED)
		return -ENOMEM;
	head = (KV_POOL_MAX_BLOCK - (uintptr_t)map % KV_POOL_MAX_BLOCK) % KV_POOL_MAX_BLOCK;
	tail = slack - head;
	if (head)
		munmap(map, head);
	if (tail)
		munmap(map + head + size, tail);
	*base = map + head;
	/*
	 * Transparent huge pages: values are written in large pieces, and one
	 * 2 MiB fault costs far less than 512 small ones. Only a hint.
	 */
	madvise(*base, size, MADV_HUGEPAGE);
	return 0;
}

/* Allocates the shard array and the per-page side arrays, and seeds every shard. */
static int pool_init_shards(struct kv_pool *pool)
{
	uint64_t npages = pool->kp_size / KV_PAGE_SIZE;
	uint64_t last = npages - (pool->kp_nshards - 1) * pool->kp_shard_pages;
	size_t bytes = sizeof(*pool->kp_shards) * pool->kp_nshards;
	void *shards;
	unsigned i;
	int err;

	if (last >= KV_PG_NIL || npages > SIZE_MAX / (2 * sizeof(uint32_t)))
		return -ENOMEM;
	if (posix_memalign(&shards, _Alignof(struct kv_pool_shard), bytes))
		return -ENOMEM;
	memset(shards, 0, bytes);
	pool->kp_shards = shards;
	err = -ENOMEM;
	pool->kp_state = calloc(npages, 1);
	if (!pool->kp_state)
		goto out_free_shards;
	pool->kp_links = malloc(npages * 2 * sizeof(uint32_t));
	if (!pool->kp_links)
		goto out_free_state;

	for (i = 0; i < pool->kp_nshards; i++) {
		struct kv_pool_shard *s = &pool->kp_shards[i];
		uint64_t first = i * pool->kp_shard_pages;

		err = -pthread_mutex_init(&s->ks_lock, NULL);
		if (err)
			goto out_destroy_locks;
		s->ks_npages = (uint32_t)(i + 1 == pool->kp_nshards ? last : pool->kp_shard_pages);
		s->ks_base = pool->kp_base + first * KV_PAGE_SIZE;
		s->ks_state = pool->kp_state + first;
		s->ks_next = pool->kp_links + first;
		s->ks_prev = pool->kp_links + npages + first;
		for (unsigned k = 0; k < KV_POOL_ORDERS; k++)
			s->ks_free[k] = KV_PG_NIL;
		shard_seed(s);
	}
	return 0;

out_destroy_locks:
	while (i--)
		pthread_mutex_destroy(&pool->kp_shards[i].ks_lock);
	free(pool->kp_links);
out_free_state:
	free(pool->kp_state);
out_free_shards:
	free(pool->kp_shards);
	return err;
}

int kv_pool_create(struct kv_pool **out, uint64_t size, int numa_node)
{
	struct kv_pool *pool;
	int err;

	size -= size % KV_PAGE_SIZE;
	if (size == 0)
		return -EINVAL;
	pool = calloc(1, sizeof(*pool));
	if (!pool)
		return -ENOMEM;
	err = pool_pick_node(numa_node, &pool->kp_node);
	if (err)
		goto out_free_pool;
	err = pool_map(size, &pool->kp_base);
	if (err)
		goto out_free_pool;
	if (pool->kp_node >= 0) {
		err = pool_bind(pool->kp_base, size, pool->kp_node);
		if (err)
			goto out_unmap;
	}
	pool->kp_size = size;
	pool->kp_nshards = pool_nshards(size);
	pool->kp_shard_pages = size / KV_PAGE_SIZE;
	if (pool->kp_nshards > 1)
		pool->kp_shard_pages = size / KV_PAGE_SIZE / pool->kp_nshards /
				       KV_POOL_BLOCK_PAGES * KV_POOL_BLOCK_PAGES;
	atomic_init(&pool->kp_used, 0);
	atomic_init(&pool->kp_reserved, 0);
	atomic_init(&pool->kp_committed, 0);
	err = pool_init_shards(pool);
	if (err)
		goto out_unmap;
	atomic_init(&pool->kp_stop, false);
	*out = pool;
	return 0;

out_unmap:
	munmap(pool->kp_base, size);
out_free_pool:
	free(pool);
	return err;
}

void kv_pool_fill(struct kv_pool *pool)
{
	pool->kp_filler_started = pthread_create(&pool->kp_filler, NULL, pool_fill, pool) == 0;
}

void kv_pool_destroy(struct kv_pool *pool)
{
	if (!pool)
		return;
	if (pool->kp_filler_started) {
		atomic_store(&pool->kp_stop, true);
		pthread_join(pool->kp_filler, NULL);
	}
	for (unsigned i = 0; i < pool->kp_nshards; i++)
		pthread_mutex_destroy(&pool->kp_shards[i].ks_lock);
	munmap(pool->kp_base, pool->kp_size);
	free(pool->kp_links);
	free(pool->kp_state);
	free(pool->kp_shards);
	free(pool);
}

/* Admits `bytes` more committed when they fit the size. */
static bool admit(struct kv_pool *pool, uint64_t bytes)
{
	if (atomic_fetch_add(&pool->kp_committed, bytes) + bytes <= pool->kp_size)
		return true;
	atomic_fetch_sub(&pool->kp_committed, bytes);
	return false;
}

int kv_pool_reserve(struct kv_pool *pool, uint64_t bytes, bool force)
{
	if (force)
		atomic_fetch_add(&pool->kp_committed, bytes);
	else if (!admit(pool, bytes))
		return -ENOSPC;
	atomic_fetch_add(&pool->kp_reserved, bytes);
	return 0;
}

void kv_pool_unreserve(struct kv_pool *pool, uint64_t bytes)
{
	atomic_fetch_sub(&pool->kp_reserved, bytes);
	atomic_fetch_sub(&pool->kp_committed, bytes);
}

uint64_t kv_pool_reserved(const struct kv_pool *pool)
{
	return atomic_load_explicit(&pool->kp_reserved, memory_order_relaxed);
}

/* One block, admitted already (committed counts it). */
static int take(struct kv_pool *pool, size_t len, void **addr)
{
	unsigned order, start, i;
	int cpu;

	order = floor_log2(len) - KV_PAGE_SHIFT;
	cpu = sched_getcpu();
	start = cpu >= 0 ? (unsigned)cpu % pool->kp_nshards : 0;
	for (i = 0; i < pool->kp_nshards; i++) {
		struct kv_pool_shard *s = &pool->kp_shards[(start + i) % pool->kp_nshards];
		uint32_t avail = atomic_load_explicit(&s->ks_avail, memory_order_relaxed);
		uint32_t page;

		if (!(avail >> order))
			continue;
		if (shard_alloc(s, order, &page) == 0) {
			atomic_fetch_add_explicit(&pool->kp_used, len, memory_order_relaxed);
			*addr = s->ks_base + (size_t)page * KV_PAGE_SIZE;
			return 0;
		}
	}
	return -ENOSPC;
}

int kv_pool_alloc(struct kv_pool *pool, size_t len, void **addr)
{
	if (len < KV_PAGE_SIZE || len > KV_POOL_MAX_BLOCK || (len & (len - 1)))
		return -EINVAL;
	if (!admit(pool, len))
		return -ENOSPC;
	if (take(pool, len, addr)) {
		atomic_fetch_sub(&pool->kp_committed, len);
		return -ENOSPC;
	}
	return 0;
}

void kv_pool_free_reserved(struct kv_pool *pool, void *addr, size_t len)
{
	/* Promised again first, so the room is never free to others in between. */
	atomic_fetch_add(&pool->kp_committed, len);
	atomic_fetch_add(&pool->kp_reserved, len);
	kv_pool_free(pool, addr, len);
}

int kv_pool_alloc_reserved(struct kv_pool *pool, size_t len, void **addr)
{
	if (len < KV_PAGE_SIZE || len > KV_POOL_MAX_BLOCK || (len & (len - 1)))
		return -EINVAL;
	if (take(pool, len, addr))
		return -ENOSPC;
	atomic_fetch_sub(&pool->kp_reserved, len); /* committed already counts it */
	return 0;
}

/* Ends a run of frees in shard s: publishes the hint, accounts, unlocks. */
static void shard_unlock_freed(struct kv_pool *pool, struct kv_pool_shard *s, uint64_t bytes)
{
	shard_publish_avail(s);
	atomic_fetch_sub_explicit(&pool->kp_used, bytes, memory_order_relaxed);
	atomic_fetch_sub(&pool->kp_committed, bytes);
	pthread_mutex_unlock(&s->ks_lock);
}

/*
 * Frees [addr, addr + len) as a run of maximal pieces: each piece is a power
 * of two of at most 2 MiB, aligned to its size relative to the pool base
 * (which is 2 MiB aligned, like every shard base), so a piece lies in one
 * shard and is a valid buddy block there. A run that crosses from one shard
 * into the next (two blocks handed out back to back across the boundary)
 * simply moves to the next shard's lock; only one shard lock is held at a
 * time. A piece that overlaps a free block is a double free: abort rather
 * than corrupt the free lists.
 */
void kv_pool_free(struct kv_pool *pool, void *addr, size_t len)
{
	struct kv_pool_shard *held = NULL;
	uint64_t gp, npages, run = 0;

	if (len == 0)
		return;
	if (((uintptr_t)addr | len) % KV_PAGE_SIZE || !kv_pool_contains(pool, addr, len))
		pool_bug("range not page aligned or outside the pool", addr, len);
	gp = (uint64_t)((char *)addr - pool->kp_base) / KV_PAGE_SIZE;
	npages = len / KV_PAGE_SIZE;
	while (npages) {
		unsigned order = floor_log2(npages);
		uint64_t si = gp / pool->kp_shard_pages;
		struct kv_pool_shard *s;
		uint32_t p;

		if (order > KV_POOL_MAX_ORDER)
			order = KV_POOL_MAX_ORDER;
		if (gp && (unsigned)__builtin_ctzll(gp) < order)
			order = (unsigned)__builtin_ctzll(gp);
		if (si >= pool->kp_nshards)
			si = pool->kp_nshards - 1;
		s = &pool->kp_shards[si];
		p = (uint32_t)(gp - si * pool->kp_shard_pages);
		if (s != held) {
			if (held)
				shard_unlock_freed(pool, held, run);
			pthread_mutex_lock(&s->ks_lock);
			held = s;
			run = 0;
		}
		if (shard_block_overlaps_free(s, p, order)) {
			pthread_mutex_unlock(&s->ks_lock);
			pool_bug("double free", s->ks_base + (size_t)p * KV_PAGE_SIZE,
				 (size_t)KV_PAGE_SIZE << order);
		}
		shard_free_block(s, p, order);
		gp += 1u << order;
		npages -= 1u << order;
		run += (uint64_t)KV_PAGE_SIZE << order;
	}
	shard_unlock_freed(pool, held, run);
}

uint64_t kv_pool_size(const struct kv_pool *pool)
{
	return pool->kp_size;
}

uint64_t kv_pool_used(const struct kv_pool *pool)
{
	return atomic_load_explicit(&pool->kp_used, memory_order_relaxed);
}

void *kv_pool_base(const struct kv_pool *pool)
{
	return pool->kp_base;
}

int kv_pool_node(const struct kv_pool *pool)
{
	return pool->kp_node;
}

int kv_pool_contains(const struct kv_pool *pool, const void *addr, size_t len)
{
	uintptr_t a = (uintptr_t)addr, base = (uintptr_t)pool->kp_base;

	return a >= base && len <= pool->kp_size && a - base <= pool->kp_size - len;
}

void kv_pool_set_owed_hook(struct kv_pool *pool, void (*fn)(void *arg, uint64_t bytes), void *arg)
{
	pool->kp_owed_arg = arg;
	pool->kp_owed_fn = fn;
}

void kv_pool_owed_release(struct kv_pool *pool, uint64_t bytes)
{
	if (bytes && pool->kp_owed_fn)
		pool->kp_owed_fn(pool->kp_owed_arg, bytes);
}
