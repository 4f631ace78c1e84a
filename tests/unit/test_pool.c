/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_pool.c — the DRAM staging pool (core/pool.h).
 *
 * Some tests lean on two properties of core/pool.c beyond the header: every
 * shard base is 2 MiB aligned (so a block is aligned to its own length), and
 * a pool under 8 MiB is one shard that hands out a fresh pool's pages in
 * address order. Each such test says so.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/pool.h"

#define MIB	     (1u << 20)
#define BIG_POOL     (64u * MIB) /* several shards on any machine with 2+ CPUs */
#define SMALL_POOL   (4u * MIB)	 /* one shard */
#define PAGES(bytes) ((bytes) / KV_PAGE_SIZE)

static struct kv_pool *pool_new(uint64_t size)
{
	struct kv_pool *pool = NULL;

	assert_int_equal(kv_pool_create(&pool, size, -1), 0);
	assert_non_null(pool);
	assert_int_equal(kv_pool_used(pool), 0);
	return pool;
}

static int cmp_ptr(const void *a, const void *b)
{
	uintptr_t x = (uintptr_t) * (void *const *)a, y = (uintptr_t) * (void *const *)b;

	return x < y ? -1 : x > y;
}

/* Allocates `len` blocks until -ENOSPC; returns how many, checking accounting each time. */
static size_t fill(struct kv_pool *pool, size_t len, void **blocks, size_t max)
{
	uint64_t used = kv_pool_used(pool);
	size_t n = 0;
	void *addr;
	int rc;

	while ((rc = kv_pool_alloc(pool, len, &addr)) == 0) {
		assert_true(n < max);
		assert_true(kv_pool_contains(pool, addr, len));
		blocks[n++] = addr;
		used += len;
		assert_int_equal(kv_pool_used(pool), used);
	}
	assert_int_equal(rc, -ENOSPC);
	assert_int_equal(kv_pool_used(pool), used);
	return n;
}

/* Frees n blocks of `len`, checking accounting after each. */
static void drain(struct kv_pool *pool, size_t len, void **blocks, size_t n)
{
	uint64_t used = kv_pool_used(pool);

	for (size_t i = 0; i < n; i++) {
		kv_pool_free(pool, blocks[i], len);
		used -= len;
		assert_int_equal(kv_pool_used(pool), used);
	}
}

static void test_create_args(void **state)
{
	struct kv_pool *pool = NULL;
	int node;

	(void)state;
	assert_int_equal(kv_pool_create(&pool, 0, -1), -EINVAL);
	assert_int_equal(kv_pool_create(&pool, KV_PAGE_SIZE - 1, -1), -EINVAL);
	assert_int_equal(kv_pool_create(&pool, SMALL_POOL, -2), -EINVAL);
	assert_int_equal(kv_pool_create(&pool, SMALL_POOL, 1 << 20), -EINVAL);
	assert_null(pool);

	assert_int_equal(kv_pool_create(&pool, 3 * KV_PAGE_SIZE + 100, -1), 0);
	assert_int_equal(kv_pool_size(pool), 3 * KV_PAGE_SIZE);
	assert_int_equal(kv_pool_used(pool), 0);
	node = kv_pool_node(pool);
	assert_true(node >= -1);
	kv_pool_destroy(pool);

	assert_int_equal(kv_pool_create(&pool, KV_PAGE_SIZE, 0), 0);
	assert_int_equal(kv_pool_size(pool), KV_PAGE_SIZE);
	kv_pool_destroy(pool);
}

static void test_alloc_bad_len(void **state)
{
	static const size_t bad[] = {0, 1, 2048, 3000, 8192 + 4096, 3 * MIB, 4 * MIB, SIZE_MAX};
	struct kv_pool *pool = pool_new(SMALL_POOL);
	void *addr = NULL;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(kv_pool_alloc(pool, bad[i], &addr), -EINVAL);
		assert_null(addr);
		assert_int_equal(kv_pool_used(pool), 0);
	}
	kv_pool_destroy(pool);
}

/* Alignment relies on 2 MiB aligned shard bases; see the top of the file. */
static void test_alignment_and_contents(void **state)
{
	enum { PER_SIZE = 3 };
	struct kv_pool *pool = pool_new(BIG_POOL);
	void *blocks[10][PER_SIZE];
	uint64_t used = 0;

	(void)state;
	for (unsigned o = 0; o < 10; o++) {
		size_t len = (size_t)KV_PAGE_SIZE << o;

		for (unsigned j = 0; j < PER_SIZE; j++) {
			unsigned char *b;

			assert_int_equal(kv_pool_alloc(pool, len, &blocks[o][j]), 0);
			b = blocks[o][j];
			used += len;
			assert_int_equal(kv_pool_used(pool), used);
			assert_int_equal((uintptr_t)b % KV_PAGE_SIZE, 0);
			assert_int_equal((uintptr_t)b % len, 0);
			assert_true(kv_pool_contains(pool, b, len));
			memset(b, (int)(o * PER_SIZE + j + 1), len);
		}
	}
	/* Every byte still holds its own block's pattern: the blocks are disjoint. */
	for (unsigned o = 0; o < 10; o++) {
		size_t len = (size_t)KV_PAGE_SIZE << o;

		for (unsigned j = 0; j < PER_SIZE; j++) {
			const unsigned char *b = blocks[o][j];

			for (size_t i = 0; i < len; i++)
				if (b[i] != o * PER_SIZE + j + 1)
					fail_msg("block %u/%u byte %zu overwritten", o, j, i);
			kv_pool_free(pool, blocks[o][j], len);
			used -= len;
			assert_int_equal(kv_pool_used(pool), used);
		}
	}
	assert_int_equal(kv_pool_used(pool), 0);
	kv_pool_destroy(pool);
}

static void test_exhaustion(void **state)
{
	struct kv_pool *pool = pool_new(BIG_POOL);
	size_t max = PAGES(BIG_POOL), n;
	void **blocks = calloc(max + 1, sizeof(*blocks));
	void *again;

	(void)state;
	assert_non_null(blocks);
	n = fill(pool, KV_PAGE_SIZE, blocks, max + 1);
	assert_int_equal(n, max);
	assert_int_equal(kv_pool_used(pool), kv_pool_size(pool));
	assert_int_equal(kv_pool_alloc(pool, KV_PAGE_SIZE, &again), -ENOSPC);
	assert_int_equal(kv_pool_alloc(pool, 2 * KV_PAGE_SIZE, &again), -ENOSPC);

	/* n distinct aligned pages inside a pool of n pages: they tile it. */
	qsort(blocks, n, sizeof(*blocks), cmp_ptr);
	for (size_t i = 1; i < n; i++)
		assert_int_equal((char *)blocks[i] - (char *)blocks[i - 1], KV_PAGE_SIZE);

	kv_pool_free(pool, blocks[n / 2], KV_PAGE_SIZE);
	assert_int_equal(kv_pool_used(pool), kv_pool_size(pool) - KV_PAGE_SIZE);
	assert_int_equal(kv_pool_alloc(pool, 2 * KV_PAGE_SIZE, &again), -ENOSPC);
	assert_int_equal(kv_pool_alloc(pool, KV_PAGE_SIZE, &again), 0);
	assert_ptr_equal(again, blocks[n / 2]);
	assert_int_equal(kv_pool_used(pool), kv_pool_size(pool));

	drain(pool, KV_PAGE_SIZE, blocks, n);
	free(blocks);
	kv_pool_destroy(pool);
}

/* Fill with single pages, free them in random order: everything merges back to 2 MiB blocks. */
static void test_merge(void **state)
{
	struct kv_pool *pool = pool_new(BIG_POOL);
	size_t max = PAGES(BIG_POOL), n;
	void **blocks = calloc(max, sizeof(*blocks));
	unsigned seed = 12345;

	(void)state;
	assert_non_null(blocks);
	n = fill(pool, KV_PAGE_SIZE, blocks, max);
	assert_int_equal(n, max);
	for (size_t i = n - 1; i > 0; i--) {
		size_t j = (size_t)rand_r(&seed) % (i + 1);
		void *t = blocks[i];

		blocks[i] = blocks[j];
		blocks[j] = t;
	}
	drain(pool, KV_PAGE_SIZE, blocks, n);
	assert_int_equal(kv_pool_used(pool), 0);

	n = fill(pool, KV_POOL_MAX_BLOCK, blocks, max);
	assert_int_equal(n, BIG_POOL / KV_POOL_MAX_BLOCK);
	assert_int_equal(kv_pool_alloc(pool, KV_PAGE_SIZE, &blocks[n]), -ENOSPC);
	drain(pool, KV_POOL_MAX_BLOCK, blocks, n);
	free(blocks);
	kv_pool_destroy(pool);
}

/* A size that is no multiple of 2 MiB starts as the maximal aligned blocks that tile it. */
static void test_odd_size(void **state)
{
	const uint64_t size = 5 * MIB + 3 * KV_PAGE_SIZE;
	static const size_t expect[][2] = {
	    {KV_POOL_MAX_BLOCK, 2}, {MIB, 1}, {2 * KV_PAGE_SIZE, 1}, {KV_PAGE_SIZE, 1}};
	struct kv_pool *pool = pool_new(size);
	size_t max = PAGES(size), n;
	void **blocks = calloc(max, sizeof(*blocks));
	void *addr;

	(void)state;
	assert_non_null(blocks);
	n = fill(pool, KV_PAGE_SIZE, blocks, max);
	assert_int_equal(n, max);
	drain(pool, KV_PAGE_SIZE, blocks, n);

	for (size_t i = 0; i < sizeof(expect) / sizeof(expect[0]); i++) {
		void *got[2];

		n = fill(pool, expect[i][0], got, 2);
		assert_int_equal(n, expect[i][1]);
	}
	assert_int_equal(kv_pool_used(pool), size);
	assert_int_equal(kv_pool_alloc(pool, KV_PAGE_SIZE, &addr), -ENOSPC);
	free(blocks);
	kv_pool_destroy(pool);
}

static void test_free_tail(void **state)
{
	const size_t len = 64 * 1024, tail = 36 * 1024;
	struct kv_pool *pool = pool_new(SMALL_POOL);
	void *blocks[2];
	char *b;

	(void)state;
	assert_int_equal(kv_pool_alloc(pool, len, (void **)&b), 0);
	assert_int_equal(kv_pool_used(pool), len);
	kv_pool_free(pool, b + len - tail, tail);
	assert_int_equal(kv_pool_used(pool), len - tail);
	/* The head is still ours: writable, and freeable in two odd pieces. */
	memset(b, 0x5a, len - tail);
	kv_pool_free(pool, b + 4 * KV_PAGE_SIZE, len - tail - 4 * KV_PAGE_SIZE);
	assert_int_equal(kv_pool_used(pool), 4 * KV_PAGE_SIZE);
	kv_pool_free(pool, b, 4 * KV_PAGE_SIZE);
	assert_int_equal(kv_pool_used(pool), 0);
	kv_pool_free(pool, b, 0);
	assert_int_equal(kv_pool_used(pool), 0);

	assert_int_equal(fill(pool, KV_POOL_MAX_BLOCK, blocks, 2), 2);
	drain(pool, KV_POOL_MAX_BLOCK, blocks, 2);
	kv_pool_destroy(pool);
}

/*
 * Reservations: what is promised is refused to plain allocations and
 * handed out only from the promise; a promise past the room is refused;
 * frees and unreserve give the room back.
 */
static void test_reserve(void **state)
{
	struct kv_pool *pool = pool_new(SMALL_POOL); /* 4 MiB */
	void *a, *b, *c;

	(void)state;
	assert_int_equal(kv_pool_reserve(pool, 3 * MIB, false), 0);
	assert_int_equal(kv_pool_reserved(pool), 3 * MIB);
	assert_int_equal(kv_pool_reserve(pool, 2 * MIB, false), -ENOSPC);
	assert_int_equal(kv_pool_alloc(pool, 2 * MIB, &a), -ENOSPC); /* only 1 MiB unpromised */
	assert_int_equal(kv_pool_alloc(pool, MIB, &a), 0);
	assert_int_equal(kv_pool_alloc(pool, KV_PAGE_SIZE, &c), -ENOSPC);
	assert_int_equal(kv_pool_alloc_reserved(pool, 2 * MIB, &b), 0);
	assert_int_equal(kv_pool_reserved(pool), MIB);
	assert_int_equal(kv_pool_used(pool), 3 * MIB);
	assert_int_equal(kv_pool_alloc(pool, KV_PAGE_SIZE, &c), -ENOSPC);
	kv_pool_unreserve(pool, MIB);
	assert_int_equal(kv_pool_reserved(pool), 0);
	assert_int_equal(kv_pool_alloc(pool, MIB, &c), 0);
	kv_pool_free(pool, a, MIB);
	kv_pool_free(pool, b, 2 * MIB);
	kv_pool_free(pool, c, MIB);
	assert_int_equal(kv_pool_used(pool), 0);
	assert_int_equal(kv_pool_reserve(pool, 4 * MIB, false), 0);
	kv_pool_unreserve(pool, 4 * MIB);
	assert_int_equal(kv_pool_alloc(pool, 2 * MIB, &a), 0);
	kv_pool_free(pool, a, 2 * MIB);
	kv_pool_destroy(pool);
}

/* Relies on a fresh one-shard pool handing out pages in address order. */
static void test_free_span_blocks(void **state)
{
	struct kv_pool *pool = pool_new(SMALL_POOL);
	size_t max = PAGES(SMALL_POOL);
	void **blocks = calloc(max, sizeof(*blocks));
	char *a, *b, *c;

	(void)state;
	assert_non_null(blocks);
	assert_int_equal(kv_pool_alloc(pool, KV_PAGE_SIZE, (void **)&a), 0);
	assert_int_equal(kv_pool_alloc(pool, KV_PAGE_SIZE, (void **)&b), 0);
	assert_int_equal(kv_pool_alloc(pool, 2 * KV_PAGE_SIZE, (void **)&c), 0);
	assert_ptr_equal(b, a + KV_PAGE_SIZE);
	assert_ptr_equal(c, a + 2 * KV_PAGE_SIZE);
	kv_pool_free(pool, a, 4 * KV_PAGE_SIZE);
	assert_int_equal(kv_pool_used(pool), 0);

	/* All pages, then everything but the first and last page as one range. */
	assert_int_equal(fill(pool, KV_PAGE_SIZE, blocks, max), max);
	qsort(blocks, max, sizeof(*blocks), cmp_ptr);
	kv_pool_free(pool, blocks[1], (max - 2) * KV_PAGE_SIZE);
	assert_int_equal(kv_pool_used(pool), 2 * KV_PAGE_SIZE);
	kv_pool_free(pool, blocks[max - 1], KV_PAGE_SIZE);
	kv_pool_free(pool, blocks[0], KV_PAGE_SIZE);
	assert_int_equal(kv_pool_used(pool), 0);
	assert_int_equal(fill(pool, KV_POOL_MAX_BLOCK, blocks, max), 2);
	drain(pool, KV_POOL_MAX_BLOCK, blocks, 2);
	free(blocks);
	kv_pool_destroy(pool);
}

/* One range over every 2 MiB block of a many-shard pool crosses every shard boundary. */
static void test_free_span_shards(void **state)
{
	struct kv_pool *pool = pool_new(BIG_POOL);
	size_t n, max = BIG_POOL / KV_POOL_MAX_BLOCK;
	void *blocks[BIG_POOL / KV_POOL_MAX_BLOCK];

	(void)state;
	n = fill(pool, KV_POOL_MAX_BLOCK, blocks, max);
	assert_int_equal(n, max);
	qsort(blocks, n, sizeof(*blocks), cmp_ptr);
	assert_int_equal((char *)blocks[n - 1] - (char *)blocks[0], BIG_POOL - KV_POOL_MAX_BLOCK);
	kv_pool_free(pool, blocks[0], BIG_POOL);
	assert_int_equal(kv_pool_used(pool), 0);
	assert_int_equal(fill(pool, KV_POOL_MAX_BLOCK, blocks, max), max);
	drain(pool, KV_POOL_MAX_BLOCK, blocks, max);
	kv_pool_destroy(pool);
}

static void test_contains(void **state)
{
	struct kv_pool *pool = pool_new(SMALL_POOL);
	void *blocks[2];
	uintptr_t lo;

	(void)state;
	assert_int_equal(fill(pool, KV_POOL_MAX_BLOCK, blocks, 2), 2);
	qsort(blocks, 2, sizeof(*blocks), cmp_ptr);
	lo = (uintptr_t)blocks[0];
	assert_true(kv_pool_contains(pool, (void *)lo, SMALL_POOL));
	assert_true(kv_pool_contains(pool, blocks[1], KV_POOL_MAX_BLOCK));
	assert_true(kv_pool_contains(pool, (void *)(lo + SMALL_POOL - 1), 1));
	assert_true(kv_pool_contains(pool, (void *)lo, 0));
	assert_false(kv_pool_contains(pool, (void *)lo, SMALL_POOL + 1));
	assert_false(kv_pool_contains(pool, (void *)(lo - 1), 1));
	assert_false(kv_pool_contains(pool, (void *)(lo - 1), 2));
	assert_false(kv_pool_contains(pool, (void *)(lo + SMALL_POOL), 1));
	assert_false(kv_pool_contains(pool, (void *)(lo + KV_PAGE_SIZE), SIZE_MAX));
	assert_false(kv_pool_contains(pool, (void *)(UINTPTR_MAX - 10), 100));
	assert_false(kv_pool_contains(pool, NULL, 1));
	drain(pool, KV_POOL_MAX_BLOCK, blocks, 2);
	kv_pool_destroy(pool);
}

/*
 * Threads. Each holds up to SLOTS blocks of random sizes, stamps every page
 * of a block with a tag unique to (thread, allocation, page) at both ends,
 * and checks the stamps before freeing: two blocks that overlap, or a block
 * handed out twice, break a stamp. Frees are sometimes split in two (tail
 * first) to exercise partial frees under contention. The worker cannot use
 * cmocka's asserts (they longjmp), so it counts failures.
 */
#define THREADS	    8
#define SLOTS	    24
#define OPS	    5000
#define THREAD_POOL (256u * MIB)

struct worker {
	struct kv_pool *w_pool;
	unsigned w_id;
	_Atomic unsigned *w_errors;
};

static uint64_t stamp(unsigned id, uint64_t seq, size_t page)
{
	return (uint64_t)id << 56 | seq << 20 | page;
}

static void stamp_block(char *b, size_t len, uint64_t tag)
{
	for (size_t p = 0; p < len / KV_PAGE_SIZE; p++) {
		uint64_t t = tag + p;

		memcpy(b + p * KV_PAGE_SIZE, &t, sizeof(t));
		memcpy(b + (p + 1) * KV_PAGE_SIZE - sizeof(t), &t, sizeof(t));
	}
}

static unsigned check_block(const char *b, size_t len, uint64_t tag)
{
	unsigned bad = 0;

	for (size_t p = 0; p < len / KV_PAGE_SIZE; p++) {
		uint64_t head, tail;

		memcpy(&head, b + p * KV_PAGE_SIZE, sizeof(head));
		memcpy(&tail, b + (p + 1) * KV_PAGE_SIZE - sizeof(tail), sizeof(tail));
		bad += head != tag + p || tail != tag + p;
	}
	return bad;
}

static void *worker_run(void *arg)
{
	struct worker *w = arg;
	struct {
		char *addr;
		size_t len;
		uint64_t tag;
	} slot[SLOTS] = {{0}};
	unsigned seed = 1 + 1000003u * w->w_id, errors = 0;

	for (uint64_t seq = 0; seq < OPS; seq++) {
		unsigned r = (unsigned)rand_r(&seed), i = r % SLOTS;
		unsigned order = (r >> 8) % 4 ? (r >> 12) % 4 : (r >> 12) % 10;

		if (slot[i].addr) {
			char *b = slot[i].addr;
			size_t len = slot[i].len, half = len / 2;

			errors += check_block(b, len, slot[i].tag);
			if (len > KV_PAGE_SIZE && (r >> 16) % 2) {
				kv_pool_free(w->w_pool, b + half, half);
				kv_pool_free(w->w_pool, b, half);
			} else {
				kv_pool_free(w->w_pool, b, len);
			}
			slot[i].addr = NULL;
			continue;
		}
		slot[i].len = (size_t)KV_PAGE_SIZE << order;
		switch (kv_pool_alloc(w->w_pool, slot[i].len, (void **)&slot[i].addr)) {
		case 0:
			break;
		case -ENOSPC: /* fragmentation; not what this test is about */
			slot[i].addr = NULL;
			continue;
		default:
			errors++;
			slot[i].addr = NULL;
			continue;
		}
		errors += (uintptr_t)slot[i].addr % slot[i].len != 0;
		errors += !kv_pool_contains(w->w_pool, slot[i].addr, slot[i].len);
		slot[i].tag = stamp(w->w_id, seq, 0);
		stamp_block(slot[i].addr, slot[i].len, slot[i].tag);
	}
	for (unsigned i = 0; i < SLOTS; i++) {
		if (!slot[i].addr)
			continue;
		errors += check_block(slot[i].addr, slot[i].len, slot[i].tag);
		kv_pool_free(w->w_pool, slot[i].addr, slot[i].len);
	}
	atomic_fetch_add(w->w_errors, errors);
	return NULL;
}

static void test_threads(void **state)
{
	struct kv_pool *pool = pool_new(THREAD_POOL);
	size_t max = THREAD_POOL / KV_POOL_MAX_BLOCK;
	void *blocks[THREAD_POOL / KV_POOL_MAX_BLOCK];
	struct worker w[THREADS];
	pthread_t tid[THREADS];
	_Atomic unsigned errors = 0;

	(void)state;
	for (unsigned i = 0; i < THREADS; i++) {
		w[i] = (struct worker){.w_pool = pool, .w_id = i, .w_errors = &errors};
		assert_int_equal(pthread_create(&tid[i], NULL, worker_run, &w[i]), 0);
	}
	for (unsigned i = 0; i < THREADS; i++)
		assert_int_equal(pthread_join(tid[i], NULL), 0);
	assert_int_equal(atomic_load(&errors), 0);
	assert_int_equal(kv_pool_used(pool), 0);
	/* Nothing leaked or split for good: every 2 MiB block is whole again. */
	assert_int_equal(fill(pool, KV_POOL_MAX_BLOCK, blocks, max), max);
	drain(pool, KV_POOL_MAX_BLOCK, blocks, max);
	kv_pool_destroy(pool);
}

/*
 * Accounting under contention on a full pool: threads on one shard allocate
 * pages until -ENOSPC, then give half back, checking that used never exceeds
 * size (free = size - used would wrap) even as a freed page is taken again
 * at once by another thread.
 */
#define FULL_THREADS 4
#define FULL_ROUNDS  1000

struct filler {
	struct kv_pool *f_pool;
	_Atomic unsigned *f_errors;
};

static void *filler_run(void *arg)
{
	struct filler *f = arg;
	uint64_t size = kv_pool_size(f->f_pool);
	size_t cap = PAGES(size), n = 0;
	void **held = malloc(cap * sizeof(*held));
	unsigned errors = 0;

	if (!held) {
		atomic_fetch_add(f->f_errors, 1);
		return NULL;
	}
	for (unsigned round = 0; round < FULL_ROUNDS; round++) {
		int rc = -ENOSPC;

		while (n < cap && (rc = kv_pool_alloc(f->f_pool, KV_PAGE_SIZE, &held[n])) == 0) {
			n++;
			errors += kv_pool_used(f->f_pool) > size;
		}
		errors += n < cap && rc != -ENOSPC;
		for (; n > cap / 8; n--) {
			kv_pool_free(f->f_pool, held[n - 1], KV_PAGE_SIZE);
			errors += kv_pool_used(f->f_pool) > size;
		}
	}
	for (; n > 0; n--)
		kv_pool_free(f->f_pool, held[n - 1], KV_PAGE_SIZE);
	free(held);
	atomic_fetch_add(f->f_errors, errors);
	return NULL;
}

static void test_threads_full(void **state)
{
	struct kv_pool *pool = pool_new(256 * KV_PAGE_SIZE);
	struct filler f[FULL_THREADS];
	pthread_t tid[FULL_THREADS];
	_Atomic unsigned errors = 0;

	(void)state;
	for (unsigned i = 0; i < FULL_THREADS; i++) {
		f[i] = (struct filler){.f_pool = pool, .f_errors = &errors};
		assert_int_equal(pthread_create(&tid[i], NULL, filler_run, &f[i]), 0);
	}
	for (unsigned i = 0; i < FULL_THREADS; i++)
		assert_int_equal(pthread_join(tid[i], NULL), 0);
	assert_int_equal(atomic_load(&errors), 0);
	assert_int_equal(kv_pool_used(pool), 0);
	kv_pool_destroy(pool);
}

/*
 * Misuse of kv_pool_free aborts instead of corrupting the free lists. Each
 * case runs in a child with stderr and core dumps off.
 */
enum misuse { DOUBLE_FREE, FREE_OVER_FREED_TAIL, UNALIGNED, OUTSIDE };

static void misuse_child(enum misuse what)
{
	struct kv_pool *pool;
	struct rlimit nocore = {0, 0};
	int devnull = open("/dev/null", O_WRONLY);
	char *b;

	setrlimit(RLIMIT_CORE, &nocore);
	if (devnull >= 0)
		dup2(devnull, STDERR_FILENO);
	if (kv_pool_create(&pool, SMALL_POOL, -1) ||
	    kv_pool_alloc(pool, 2 * KV_PAGE_SIZE, (void **)&b))
		_exit(2);
	switch (what) {
	case DOUBLE_FREE:
		kv_pool_free(pool, b, 2 * KV_PAGE_SIZE);
		kv_pool_free(pool, b, 2 * KV_PAGE_SIZE);
		break;
	case FREE_OVER_FREED_TAIL:
		kv_pool_free(pool, b + KV_PAGE_SIZE, KV_PAGE_SIZE);
		kv_pool_free(pool, b, 2 * KV_PAGE_SIZE);
		break;
	case UNALIGNED:
		kv_pool_free(pool, b + 512, KV_PAGE_SIZE);
		break;
	case OUTSIDE:
		kv_pool_free(pool, b + SMALL_POOL, KV_PAGE_SIZE);
		break;
	}
	_exit(0);
}

static void test_misuse_aborts(void **state)
{
	(void)state;
	for (int what = DOUBLE_FREE; what <= OUTSIDE; what++) {
		pid_t pid = fork();
		int status;

		assert_true(pid >= 0);
		if (pid == 0)
			misuse_child((enum misuse)what);
		assert_int_equal(waitpid(pid, &status, 0), pid);
		if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGABRT)
			fail_msg("misuse case %d: child status %#x, expected SIGABRT", what,
				 status);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_create_args),
	    cmocka_unit_test(test_alloc_bad_len),
	    cmocka_unit_test(test_alignment_and_contents),
	    cmocka_unit_test(test_exhaustion),
	    cmocka_unit_test(test_merge),
	    cmocka_unit_test(test_odd_size),
	    cmocka_unit_test(test_free_tail),
	    cmocka_unit_test(test_reserve),
	    cmocka_unit_test(test_free_span_blocks),
	    cmocka_unit_test(test_free_span_shards),
	    cmocka_unit_test(test_contains),
	    cmocka_unit_test(test_threads),
	    cmocka_unit_test(test_threads_full),
	    cmocka_unit_test(test_misuse_aborts),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
