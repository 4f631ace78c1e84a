/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_obj.c — values (core/obj.h).
 *
 * Every test mirrors the object in a plain byte array (struct model) and
 * compares the two byte for byte; memory is checked through ko_cap, the
 * extent list and kv_pool_used, which must agree at every step.
 *
 * Two tests lean on core/pool.c beyond its header, and say so: a pool under
 * 8 MiB is one shard, and a pool whose free pages are all isolated single
 * pages can only hand out single pages.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/obj.h"

#define KIB	   (1024u)
#define MIB	   (1024u * 1024u)
#define PAGE_UP(x) (((uint64_t)(x) + KV_PAGE_SIZE - 1) / KV_PAGE_SIZE * KV_PAGE_SIZE)

/* The expected contents of an object. */
struct model {
	uint8_t *m_buf;
	uint64_t m_size;
	uint64_t m_cap; /* bytes allocated at m_buf */
};

static struct kv_pool *pool_new(uint64_t size)
{
	struct kv_pool *pool = NULL;

	assert_int_equal(kv_pool_create(&pool, size, -1), 0);
	assert_non_null(pool);
	assert_int_equal(kv_pool_used(pool), 0);
	return pool;
}

static struct kv_obj *obj_new(struct kv_pool *pool)
{
	struct kv_obj *obj = NULL;

	assert_int_equal(kv_obj_new(pool, &obj), 0);
	assert_non_null(obj);
	return obj;
}

/* A byte that depends on its offset and a seed and repeats at no power of two. */
static uint8_t pat(uint64_t off, unsigned seed)
{
	uint64_t x = (off + 1) * 0x9E3779B97F4A7C15ull + seed * 0xBF58476D1CE4E5B9ull;

	return (uint8_t)(x >> 56);
}

static void pat_fill(uint8_t *buf, uint64_t off, uint64_t len, unsigned seed)
{
	for (uint64_t i = 0; i < len; i++)
		buf[i] = pat(off + i, seed);
}

static void model_reserve(struct model *m, uint64_t size)
{
	uint64_t cap = m->m_cap * 2 > size ? m->m_cap * 2 : size;

	if (size <= m->m_cap)
		return;
	m->m_buf = realloc(m->m_buf, cap);
	assert_non_null(m->m_buf);
	memset(m->m_buf + m->m_cap, 0, cap - m->m_cap);
	m->m_cap = cap;
}

static void model_write(struct model *m, uint64_t off, const uint8_t *buf, uint64_t len)
{
	if (len == 0)
		return;
	model_reserve(m, off + len);
	if (off > m->m_size)
		memset(m->m_buf + m->m_size, 0, off - m->m_size);
	memcpy(m->m_buf + off, buf, len);
	if (off + len > m->m_size)
		m->m_size = off + len;
}

static void model_truncate(struct model *m, uint64_t size)
{
	model_reserve(m, size);
	if (size > m->m_size)
		memset(m->m_buf + m->m_size, 0, size - m->m_size);
	m->m_size = size;
}

static void model_free(struct model *m)
{
	free(m->m_buf);
	memset(m, 0, sizeof(*m));
}

/* Writes a pattern to both the object and the model. */
static void write_pat(struct kv_obj *obj, struct model *m, uint64_t off, uint64_t len,
		      unsigned seed)
{
	uint8_t *buf = malloc(len ? len : 1);

	assert_non_null(buf);
	pat_fill(buf, off, len, seed);
	assert_int_equal(kv_obj_write(obj, off, buf, len), 0);
	model_write(m, off, buf, len);
	free(buf);
	assert_int_equal(obj->ko_size, m->m_size);
}

/*
 * The object's memory as one flat list of pieces in logical order (its
 * extents' segments), the view the checks below work on.
 */
struct flat_seg {
	uint64_t ke_off;
	void *ke_addr;
	uint32_t ke_len;
};

/* Segments of the extents with memory (holes have none). */
static uint32_t nflat(const struct kv_obj *obj)
{
	uint32_t n = 0;

	for (uint32_t k = 0; k < obj->ko_nx; k++)
		n += obj->ko_x[k] ? obj->ko_x[k]->xb_nseg : 0;
	return n;
}

static struct flat_seg flat(const struct kv_obj *obj, uint32_t i)
{
	for (uint32_t k = 0; k < obj->ko_nx; k++) {
		const struct kv_xblk *b = obj->ko_x[k];

		if (!b)
			continue;
		if (i < b->xb_nseg)
			return (struct flat_seg){
			    .ke_off = (uint64_t)k * KV_EXTENT + b->xb_seg[i].ks_off,
			    .ke_addr = b->xb_seg[i].ks_addr,
			    .ke_len = b->xb_seg[i].ks_len,
			};
		i -= b->xb_nseg;
	}
	fail();
	return (struct flat_seg){0};
}

/*
 * The extent list is what obj.h says it is: a present extent's segments
 * fill it from 0, page aligned, page multiples, covering its bytes below
 * the size; no extent lies past the size; the last slot is not a hole;
 * the capacities sum to ko_cap.
 */
static void check_extents(const struct kv_obj *obj)
{
	uint64_t cap = 0;

	assert_true(obj->ko_nx <= obj->ko_maxx);
	if (obj->ko_nx)
		assert_non_null(obj->ko_x[obj->ko_nx - 1]);
	for (uint32_t k = 0; k < obj->ko_nx; k++) {
		const struct kv_xblk *b = obj->ko_x[k];
		uint64_t base = (uint64_t)k * KV_EXTENT;
		uint64_t valid = obj->ko_size <= base ? 0
				 : obj->ko_size - base < KV_EXTENT ? obj->ko_size - base
								    : KV_EXTENT;
		uint32_t in = 0;

		if (!b)
			continue;
		assert_true(base < PAGE_UP(obj->ko_size));
		assert_true(atomic_load(&b->xb_ref) >= 1);
		assert_true(b->xb_cap > 0 && b->xb_cap <= KV_EXTENT);
		assert_true(b->xb_cap >= PAGE_UP(valid));
		for (uint32_t i = 0; i < b->xb_nseg; i++) {
			assert_int_equal(b->xb_seg[i].ks_off, in);
			assert_int_equal((uintptr_t)b->xb_seg[i].ks_addr % KV_PAGE_SIZE, 0);
			assert_int_equal(b->xb_seg[i].ks_len % KV_PAGE_SIZE, 0);
			assert_true(b->xb_seg[i].ks_len > 0);
			assert_true(kv_pool_contains(obj->ko_pool, b->xb_seg[i].ks_addr,
						     b->xb_seg[i].ks_len));
			in += b->xb_seg[i].ks_len;
		}
		assert_int_equal(in, b->xb_cap);
		cap += b->xb_cap;
	}
	assert_int_equal(cap, obj->ko_cap);
}

/* Reads [off, off + len) and compares it with the model. */
static void check_range(const struct kv_obj *obj, const struct model *m, uint64_t off, uint64_t len)
{
	uint64_t want = off >= m->m_size ? 0 : (len < m->m_size - off ? len : m->m_size - off);
	uint8_t *buf = malloc(len ? len : 1);

	assert_non_null(buf);
	memset(buf, 0x5a, len);
	assert_int_equal(kv_obj_read(obj, off, buf, len), want);
	if (want)
		assert_memory_equal(buf, m->m_buf + off, want);
	for (uint64_t i = want; i < len; i++)
		assert_int_equal(buf[i], 0x5a);
	free(buf);
}

static void check_all(const struct kv_obj *obj, const struct model *m)
{
	assert_int_equal(obj->ko_size, m->m_size);
	check_extents(obj);
	check_range(obj, m, 0, m->m_size);
}

/* Reads a few bytes each side of every extent boundary inside the value. */
static void check_boundaries(const struct kv_obj *obj, const struct model *m)
{
	for (uint32_t i = 1; i < nflat(obj); i++) {
		uint64_t b = flat(obj, i).ke_off;

		if (b >= m->m_size)
			break;
		check_range(obj, m, b - 1, 2);
		check_range(obj, m, b - 7, 300);
		check_range(obj, m, b, 1);
	}
}

/* Fills pool pages with a non-zero byte and gives them back, so reused pages are dirty. */
static void dirty_pool(struct kv_pool *pool, uint64_t bytes, uint8_t byte)
{
	struct kv_obj *obj = obj_new(pool);
	uint64_t used = kv_pool_used(pool);
	uint8_t *buf = malloc(bytes);

	assert_non_null(buf);
	memset(buf, byte, bytes);
	assert_int_equal(kv_obj_write(obj, 0, buf, bytes), 0);
	kv_obj_put(obj);
	free(buf);
	assert_int_equal(kv_pool_used(pool), used);
}

static void test_new_empty(void **state)
{
	struct kv_pool *pool = pool_new(4 * MIB);
	struct kv_obj *obj = obj_new(pool);
	struct iovec iov[4];
	uint64_t bytes = 123;
	uint8_t buf[8] = {0};

	(void)state;
	assert_int_equal(atomic_load(&obj->ko_ref), 1);
	assert_false(obj->ko_sealed);
	assert_int_equal(obj->ko_seq, 0);
	assert_int_equal(obj->ko_size, 0);
	assert_int_equal(obj->ko_cap, 0);
	assert_int_equal(nflat(obj), 0);
	assert_ptr_equal(obj->ko_pool, pool);
	assert_int_equal(kv_obj_read(obj, 0, buf, sizeof(buf)), 0);
	assert_int_equal(kv_obj_iov(obj, 0, 100, iov, 4, &bytes), 0);
	assert_int_equal(bytes, 0);
	assert_int_equal(kv_pool_used(pool), 0);
	kv_obj_put(obj);
	assert_int_equal(kv_pool_used(pool), 0);
	kv_pool_destroy(pool);
}

/* One write of each shape into a fresh object, read back whole and in pieces. */
static void test_write_read_shapes(void **state)
{
	static const struct {
		uint64_t off, len;
	} shapes[] = {
	    {0, 1},
	    {1, 1},
	    {4095, 1},
	    {4095, 2},
	    {4096, 4096},
	    {0, 4097},
	    {5000, 70000},
	    {0, 2 * MIB},
	    {2 * MIB - 3, 10},
	    {0, 3 * MIB + 17},
	    {123456, 5 * MIB + 789},
	};
	struct kv_pool *pool = pool_new(32 * MIB);

	(void)state;
	for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
		struct kv_obj *obj = obj_new(pool);
		struct model m = {0};

		write_pat(obj, &m, shapes[i].off, shapes[i].len, (unsigned)i);
		assert_int_equal(obj->ko_size, shapes[i].off + shapes[i].len);
		assert_int_equal(kv_pool_used(pool), obj->ko_cap);
		check_all(obj, &m);
		check_boundaries(obj, &m);
		check_range(obj, &m, shapes[i].off, shapes[i].len);
		check_range(obj, &m, shapes[i].off + shapes[i].len / 2, shapes[i].len);
		check_range(obj, &m, m.m_size - 1, 1);
		check_range(obj, &m, m.m_size, 10);
		check_range(obj, &m, m.m_size + 4096, 10);
		kv_obj_put(obj);
		model_free(&m);
		assert_int_equal(kv_pool_used(pool), 0);
	}
	kv_pool_destroy(pool);
}

/* Sequential writes in odd-sized pieces, overwrites across extents, and reads across them. */
static void test_write_sequential_and_overwrite(void **state)
{
	static const uint64_t chunk[] = {1, 4095, 4097, 65537, 12345, MIB + 3, 777};
	struct kv_pool *pool = pool_new(32 * MIB);
	struct kv_obj *obj = obj_new(pool);
	struct model m = {0};
	uint64_t off = 0;

	(void)state;
	for (unsigned i = 0; off < 6 * MIB + 123; i++) {
		uint64_t len = chunk[i % (sizeof(chunk) / sizeof(chunk[0]))];

		if (off + len > 6 * MIB + 123)
			len = 6 * MIB + 123 - off;
		write_pat(obj, &m, off, len, 1);
		off += len;
		assert_int_equal(kv_pool_used(pool), obj->ko_cap);
	}
	assert_int_equal(obj->ko_size, 6 * MIB + 123);
	assert_true(nflat(obj) > 1);
	check_all(obj, &m);
	check_boundaries(obj, &m);

	/* Overwrites that straddle every extent boundary, then a larger one. */
	for (uint32_t i = 1; i < nflat(obj); i++) {
		uint64_t b = flat(obj, i).ke_off;

		if (b + 50 <= m.m_size)
			write_pat(obj, &m, b - 50, 100, 100 + i);
	}
	write_pat(obj, &m, 3, 4 * MIB + 1, 7);
	assert_int_equal(obj->ko_size, 6 * MIB + 123);
	check_all(obj, &m);
	check_boundaries(obj, &m);
	for (uint64_t o = 0; o < m.m_size; o += 333333)
		check_range(obj, &m, o, 100000);

	kv_obj_put(obj);
	model_free(&m);
	assert_int_equal(kv_pool_used(pool), 0);
	kv_pool_destroy(pool);
}

/* A write past the end reads as zeros in between, also over reused dirty pages. */
static void test_write_past_end_zero_fills(void **state)
{
	struct kv_pool *pool = pool_new(16 * MIB);
	struct kv_obj *obj;
	struct model m = {0};

	(void)state;
	dirty_pool(pool, 8 * MIB, 0xaa);
	obj = obj_new(pool);
	write_pat(obj, &m, 300000, 1, 1);
	assert_int_equal(obj->ko_size, 300001);
	check_all(obj, &m);
	write_pat(obj, &m, 2 * MIB + 5, 10, 2);
	assert_int_equal(obj->ko_size, 2 * MIB + 15);
	check_all(obj, &m);
	kv_obj_put(obj);
	model_free(&m);

	/* The gap lies inside capacity that still holds old bytes of this object. */
	obj = obj_new(pool);
	write_pat(obj, &m, 0, 8192, 3);
	assert_int_equal(kv_obj_truncate(obj, 10), 0);
	model_truncate(&m, 10);
	write_pat(obj, &m, 4000, 3, 4);
	check_all(obj, &m);
	write_pat(obj, &m, 9000, 1, 5);
	check_all(obj, &m);

	/* The gap lies inside reserved, never written capacity made of dirty pages. */
	assert_int_equal(kv_obj_reserve(obj, 4 * MIB, true), 0);
	assert_int_equal(obj->ko_size, 9001);
	write_pat(obj, &m, 3 * MIB, 2, 6);
	check_all(obj, &m);
	kv_obj_put(obj);
	model_free(&m);
	assert_int_equal(kv_pool_used(pool), 0);
	kv_pool_destroy(pool);
}

/* Truncating frees memory past the new end; growing again reads zeros, never old bytes. */
static void test_truncate_down_up(void **state)
{
	struct kv_pool *pool = pool_new(16 * MIB);
	struct kv_obj *obj = obj_new(pool);
	struct model m = {0};

	(void)state;
	write_pat(obj, &m, 0, 3 * KV_PAGE_SIZE + 100, 1);
	assert_int_equal(kv_obj_truncate(obj, 100), 0);
	model_truncate(&m, 100);
	assert_int_equal(obj->ko_size, 100);
	assert_int_equal(obj->ko_cap, KV_PAGE_SIZE);
	assert_int_equal(kv_pool_used(pool), KV_PAGE_SIZE);
	check_all(obj, &m);

	/* The freed pages go to someone else, who dirties them and gives them back. */
	dirty_pool(pool, 64 * KIB, 0xbb);

	assert_int_equal(kv_obj_truncate(obj, 20000), 0);
	model_truncate(&m, 20000);
	assert_int_equal(obj->ko_size, 20000);
	assert_true(obj->ko_cap >= PAGE_UP(20000));
	assert_int_equal(kv_pool_used(pool), obj->ko_cap);
	check_all(obj, &m);

	/* Down and up inside one page: the tail of the kept page must be zeroed too. */
	write_pat(obj, &m, 0, 4096, 2);
	assert_int_equal(kv_obj_truncate(obj, 10), 0);
	model_truncate(&m, 10);
	assert_int_equal(obj->ko_cap, KV_PAGE_SIZE);
	assert_int_equal(kv_obj_truncate(obj, 4096), 0);
	model_truncate(&m, 4096);
	assert_int_equal(obj->ko_cap, KV_PAGE_SIZE);
	check_all(obj, &m);

	/* Same size: nothing changes. */
	assert_int_equal(kv_obj_truncate(obj, 4096), 0);
	check_all(obj, &m);

	/* A multi-MiB value cut in the middle of an extent. */
	write_pat(obj, &m, 0, 5 * MIB + 1, 3);
	assert_int_equal(kv_obj_truncate(obj, 2 * MIB + 4097), 0);
	model_truncate(&m, 2 * MIB + 4097);
	assert_int_equal(obj->ko_cap, PAGE_UP(2 * MIB + 4097));
	assert_int_equal(kv_pool_used(pool), PAGE_UP(2 * MIB + 4097));
	check_all(obj, &m);
	dirty_pool(pool, 4 * MIB, 0xcc);
	assert_int_equal(kv_obj_truncate(obj, 5 * MIB), 0);
	model_truncate(&m, 5 * MIB);
	check_all(obj, &m);
	check_boundaries(obj, &m);

	/* To zero: every page goes back. Then up again: all zeros. */
	assert_int_equal(kv_obj_truncate(obj, 0), 0);
	model_truncate(&m, 0);
	assert_int_equal(obj->ko_cap, 0);
	assert_int_equal(nflat(obj), 0);
	assert_int_equal(kv_pool_used(pool), 0);
	dirty_pool(pool, MIB, 0xdd);
	assert_int_equal(kv_obj_truncate(obj, 5000), 0);
	model_truncate(&m, 5000);
	check_all(obj, &m);

	kv_obj_put(obj);
	model_free(&m);
	assert_int_equal(kv_pool_used(pool), 0);
	kv_pool_destroy(pool);
}

/* fallocate mode 0: unwritten bytes read as zeros and take no memory until written. */
static void test_reserve(void **state)
{
	struct kv_pool *pool = pool_new(16 * MIB);
	struct kv_obj *obj;
	struct model m = {0};

	(void)state;
	dirty_pool(pool, 8 * MIB, 0xee);
	obj = obj_new(pool);

	/* keep_size: nothing at all. */
	assert_int_equal(kv_obj_reserve(obj, MIB, true), 0);
	assert_int_equal(obj->ko_size, 0);
	assert_int_equal(obj->ko_cap, 0);
	check_all(obj, &m);

	/* Without keep_size the size grows, the new bytes are zeros, no memory. */
	assert_int_equal(kv_obj_reserve(obj, 5 * MIB + 1, false), 0);
	model_truncate(&m, 5 * MIB + 1);
	assert_int_equal(obj->ko_size, 5 * MIB + 1);
	assert_int_equal(obj->ko_cap, 0);
	assert_int_equal(kv_pool_used(pool), 0);
	check_all(obj, &m);
	check_range(obj, &m, 2 * MIB - 100, 300);

	/* Writing into it takes memory for the extent written only. */
	write_pat(obj, &m, 3 * MIB + 5, 5000, 1);
	assert_int_equal(obj->ko_cap, KV_EXTENT);
	assert_int_equal(kv_pool_used(pool), KV_EXTENT);
	check_all(obj, &m);

	/* Reserving below the size never shrinks it. */
	assert_int_equal(kv_obj_reserve(obj, 50, false), 0);
	assert_int_equal(obj->ko_size, 5 * MIB + 1);
	check_all(obj, &m);

	/* keep_size past the end: size and bytes stay; truncating into it reads zeros. */
	assert_int_equal(kv_obj_reserve(obj, 9 * MIB, true), 0);
	assert_int_equal(obj->ko_size, 5 * MIB + 1);
	assert_int_equal(kv_obj_truncate(obj, 9 * MIB), 0);
	model_truncate(&m, 9 * MIB);
	check_all(obj, &m);
	kv_obj_seal(obj, 1);
	assert_int_equal(obj->ko_cap, KV_EXTENT);
	check_all(obj, &m);

	/* Past the largest value: EFBIG. */
	assert_int_equal(kv_obj_reserve(obj, KV_MAX_VALUE + 1, true), -EFBIG);

	kv_obj_put(obj);
	model_free(&m);
	assert_int_equal(kv_pool_used(pool), 0);
	kv_pool_destroy(pool);
}

/* Holes: a write far past the end, truncate up, punching, clones of sparse values. */
static void test_holes(void **state)
{
	struct kv_pool *pool = pool_new(32 * MIB);
	struct kv_obj *obj = obj_new(pool), *c = NULL;
	struct model m = {0};
	struct iovec iov[8];
	uint64_t bytes;

	(void)state;
	dirty_pool(pool, 16 * MIB, 0x77);
	/* 4 KiB at 1 TiB: one extent of memory; everything before reads zeros. */
	write_pat(obj, &m, 0, 3000, 1);
	assert_int_equal(kv_obj_write(obj, (1ull << 40) + 5, "hello", 5), 0);
	assert_int_equal(obj->ko_size, (1ull << 40) + 10);
	assert_int_equal(kv_pool_used(pool), obj->ko_cap);
	assert_true(obj->ko_cap <= KV_EXTENT + 4096);
	assert_true(kv_obj_has_data(obj, 0));
	assert_false(kv_obj_has_data(obj, 1));
	assert_true(kv_obj_has_data(obj, (1ull << 40) >> KV_EXTENT_SHIFT));
	assert_int_equal(kv_obj_iov(obj, 3000 - 10, 20, iov, 8, &bytes), 1);
	assert_int_equal(bytes, 20);
	assert_int_equal(kv_obj_iov(obj, 5 * MIB, 3 * MIB, iov, 8, &bytes), 2);
	assert_int_equal(bytes, 3 * MIB);
	for (int i = 0; i < 2; i++)
		for (size_t j = 0; j < iov[i].iov_len; j += 4093)
			assert_int_equal(((const char *)iov[i].iov_base)[j], 0);
	{
		char buf[16];

		assert_int_equal(kv_obj_read(obj, (1ull << 40), buf, 16), 10);
		assert_memory_equal(buf, "\0\0\0\0\0hello", 10);
		assert_int_equal(kv_obj_read(obj, 2999, buf, 2), 2);
		assert_int_equal(buf[1], 0);
	}
	kv_obj_put(obj);
	model_free(&m);
	assert_int_equal(kv_pool_used(pool), 0);

	/* Truncate up costs nothing past the old end's extent. */
	obj = obj_new(pool);
	write_pat(obj, &m, 0, 3 * MIB, 2);
	assert_int_equal(kv_obj_truncate(obj, 20 * MIB), 0);
	model_truncate(&m, 20 * MIB);
	assert_int_equal(obj->ko_cap, 2 * KV_EXTENT);
	check_range(obj, &m, 0, 20 * MIB);
	/* A write into a hole below the end: zeros around it inside its extent. */
	write_pat(obj, &m, 9 * MIB + 77, 100, 3);
	assert_int_equal(obj->ko_cap, 3 * KV_EXTENT);
	check_range(obj, &m, 0, 20 * MIB);
	assert_int_equal(kv_obj_truncate(obj, 20 * MIB), 0);
	check_all(obj, &m);

	/* Punch: whole extents go, partial ones are zeroed. */
	assert_int_equal(kv_obj_punch(obj, MIB, 9 * MIB), 0);
	memset(m.m_buf + MIB, 0, 9 * MIB);
	assert_int_equal(obj->ko_cap, KV_EXTENT); /* extent 0 stays, 1..4 go */
	assert_false(kv_obj_has_data(obj, 4));
	check_all(obj, &m);
	/* Punching past the end changes nothing past it. */
	assert_int_equal(kv_obj_punch(obj, 19 * MIB, 10 * MIB), 0);
	assert_int_equal(obj->ko_size, 20 * MIB);
	check_all(obj, &m);

	/* A clone shares the extents and the holes; writes into it do not show in the source. */
	kv_obj_seal(obj, 1);
	assert_int_equal(kv_obj_clone(obj, 15 * MIB, &c), 0);
	assert_int_equal(c->ko_size, 15 * MIB);
	assert_int_equal(kv_obj_write(c, 12 * MIB, "x", 1), 0);
	check_all(obj, &m);
	{
		char b = 1;

		assert_int_equal(kv_obj_read(c, 12 * MIB, &b, 1), 1);
		assert_int_equal(b, 'x');
		assert_int_equal(kv_obj_read(c, 12 * MIB + 1, &b, 1), 1);
		assert_int_equal(b, 0);
	}
	kv_obj_put(c);
	kv_obj_put(obj);
	model_free(&m);
	assert_int_equal(kv_pool_used(pool), 0);
	kv_pool_destroy(pool);
}

/* Sealing trims to the size rounded up to a page: less than a page of waste. */
static void test_seal_trims(void **state)
{
	static const uint64_t sizes[] = {0,	  1,	   10,		4095,	      4096,
					 4097,	  65536,   65537,	100000,	      MIB - 1,
					 MIB + 1, 2 * MIB, 2 * MIB + 1, 5 * MIB + 123};
	struct kv_pool *pool = pool_new(32 * MIB);

	(void)state;
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		for (int chunked = 0; chunked < 2; chunked++) {
			struct kv_obj *obj = obj_new(pool);
			struct model m = {0};
			uint64_t size = sizes[i], waste;

			if (chunked) {
				for (uint64_t off = 0; off < size; off += 10000)
					write_pat(obj, &m, off,
						  size - off < 10000 ? size - off : 10000,
						  (unsigned)i);
			} else if (size) {
				write_pat(obj, &m, 0, size, (unsigned)i);
			}
			kv_obj_seal(obj, 1000 + i);
			assert_true(obj->ko_sealed);
			assert_int_equal(obj->ko_seq, 1000 + i);
			assert_int_equal(obj->ko_size, size);
			assert_int_equal(obj->ko_cap, PAGE_UP(size));
			assert_int_equal(kv_pool_used(pool), PAGE_UP(size));
			waste = obj->ko_cap - size;
			assert_true(waste < KV_PAGE_SIZE);
			if (size >= 64 * KIB)
				assert_true(waste * 8 < size);
			check_all(obj, &m);
			check_boundaries(obj, &m);
			kv_obj_put(obj);
			model_free(&m);
			assert_int_equal(kv_pool_used(pool), 0);
		}
	}
	kv_pool_destroy(pool);
}

static void test_seal_small_value_pins_one_page(void **state)
{
	struct kv_pool *pool = pool_new(4 * MIB);
	struct kv_obj *obj = obj_new(pool);
	uint8_t buf[10];

	(void)state;
	memcpy(buf, "0123456789", 10);
	assert_int_equal(kv_obj_reserve(obj, 64 * KIB, true), 0);
	assert_int_equal(kv_obj_write(obj, 0, buf, 10), 0);
	kv_obj_seal(obj, 7);
	assert_int_equal(obj->ko_cap, 4096);
	assert_int_equal(nflat(obj), 1);
	assert_int_equal(kv_pool_used(pool), 4096);
	memset(buf, 0, sizeof(buf));
	assert_int_equal(kv_obj_read(obj, 0, buf, 100), 10);
	assert_memory_equal(buf, "0123456789", 10);
	kv_obj_put(obj);
	assert_int_equal(kv_pool_used(pool), 0);
	kv_pool_destroy(pool);
}

static void test_clone(void **state)
{
	static const uint64_t lens[] = {0, 1, 1000, 4096, 300 * KIB - 1, 300 * KIB, 10 * MIB};
	struct kv_pool *pool = pool_new(32 * MIB);
	struct kv_obj *src = obj_new(pool);
	struct model ms = {0};

	(void)state;
	write_pat(src, &ms, 0, 300 * KIB, 1);
	for (int sealed = 0; sealed < 2; sealed++) {
		if (sealed)
			kv_obj_seal(src, 5);
		for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
			uint64_t before = kv_pool_used(pool), want;
			struct kv_obj *c = NULL;
			struct model mc = {0};

			assert_int_equal(kv_obj_clone(src, lens[i], &c), 0);
			assert_non_null(c);
			assert_ptr_not_equal(c, src);
			want = lens[i] < ms.m_size ? lens[i] : ms.m_size;
			assert_int_equal(atomic_load(&c->ko_ref), 1);
			assert_false(c->ko_sealed);
			assert_int_equal(c->ko_seq, 0);
			assert_int_equal(c->ko_size, want);
			/* Whole extents are shared; one cut short is copied up to the cut. */
			assert_int_equal(kv_pool_used(pool),
					 before + (want == ms.m_size ? 0 : PAGE_UP(want)));
			model_write(&mc, 0, ms.m_buf, want);
			check_all(c, &mc);

			/* The clone is a separate copy: writing it leaves the source alone. */
			write_pat(c, &mc, 0, want ? want / 2 + 1 : 1, 99);
			write_pat(c, &mc, mc.m_size + 100, 5000, 98);
			assert_int_equal(kv_obj_truncate(c, 3), 0);
			model_truncate(&mc, 3);
			check_all(c, &mc);
			check_all(src, &ms);
			kv_obj_put(c);
			model_free(&mc);
			assert_int_equal(kv_pool_used(pool), before);
		}
	}

	/* And the clone outlives its source. */
	{
		struct kv_obj *c = NULL;

		assert_int_equal(kv_obj_clone(src, UINT64_MAX, &c), 0);
		kv_obj_put(src);
		assert_int_equal(kv_pool_used(pool), c->ko_cap);
		check_all(c, &ms);
		kv_obj_put(c);
	}
	model_free(&ms);
	assert_int_equal(kv_pool_used(pool), 0);
	kv_pool_destroy(pool);
}

/*
 * Copy-on-write per extent: a clone of a sealed 10 MiB value shares its five
 * extents; a 4 KiB write copies exactly the one extent it lands in (pool
 * memory and kv_obj_cow_bytes grow by KV_EXTENT), a write across a boundary
 * copies two, a second write into a copied extent copies nothing, and the
 * source keeps its bytes throughout.
 */
static void test_cow_per_extent(void **state)
{
	struct kv_pool *pool = pool_new(32 * MIB);
	struct kv_obj *src = obj_new(pool), *c = NULL;
	struct model ms = {0}, mc = {0};
	uint64_t used, cow;

	(void)state;
	write_pat(src, &ms, 0, 5 * KV_EXTENT, 1);
	kv_obj_seal(src, 9);
	assert_int_equal(src->ko_nx, 5);
	used = kv_pool_used(pool);
	assert_int_equal(used, 5 * KV_EXTENT);

	assert_int_equal(kv_obj_clone(src, UINT64_MAX, &c), 0);
	model_write(&mc, 0, ms.m_buf, ms.m_size);
	assert_int_equal(kv_pool_used(pool), used);
	for (uint32_t k = 0; k < 5; k++) {
		assert_ptr_equal(c->ko_x[k], src->ko_x[k]);
		assert_int_equal(atomic_load(&c->ko_x[k]->xb_ref), 2);
	}

	cow = kv_obj_cow_bytes();
	write_pat(c, &mc, 2 * KV_EXTENT + 100, 4096, 2);
	assert_int_equal(kv_obj_cow_bytes() - cow, KV_EXTENT);
	assert_int_equal(kv_pool_used(pool), used + KV_EXTENT);
	assert_ptr_not_equal(c->ko_x[2], src->ko_x[2]);
	for (uint32_t k = 0; k < 5; k++)
		if (k != 2)
			assert_ptr_equal(c->ko_x[k], src->ko_x[k]);

	/* Across the boundary of extents 0 and 1: two copies. */
	write_pat(c, &mc, KV_EXTENT - 10, 20, 3);
	assert_int_equal(kv_obj_cow_bytes() - cow, 3 * KV_EXTENT);
	assert_int_equal(kv_pool_used(pool), used + 3 * KV_EXTENT);

	/* Already the clone's own: no copy. */
	write_pat(c, &mc, 2 * KV_EXTENT, 50000, 4);
	assert_int_equal(kv_obj_cow_bytes() - cow, 3 * KV_EXTENT);

	/* Growing past a full last extent starts a new one: no copy. */
	write_pat(c, &mc, 5 * KV_EXTENT + 7, 10, 5);
	assert_int_equal(kv_obj_cow_bytes() - cow, 3 * KV_EXTENT);
	assert_ptr_equal(c->ko_x[4], src->ko_x[4]);
	check_all(c, &mc);
	check_boundaries(c, &mc);
	check_all(src, &ms);

	/* Truncating the clone down lets go of its share of the extents past the cut. */
	assert_int_equal(kv_obj_truncate(c, KV_EXTENT + 5), 0);
	model_truncate(&mc, KV_EXTENT + 5);
	check_all(c, &mc);
	check_all(src, &ms);
	kv_obj_seal(c, 10);
	kv_obj_put(src);
	/* Extent 1 is the clone's own copy (written above): sealing trimmed it. */
	assert_int_equal(kv_pool_used(pool), KV_EXTENT + PAGE_UP(5));
	check_all(c, &mc);
	kv_obj_put(c);
	assert_int_equal(kv_pool_used(pool), 0);
	model_free(&ms);
	model_free(&mc);
	kv_pool_destroy(pool);
}

/*
 * Random operations on a chain of versions that share extents: the open
 * version is written, truncated, reserved and cloned; sealed versions are
 * kept (as readers would) and dropped at random. After every step every
 * live version matches its own model byte for byte, so a write into a
 * shared extent can never leak into another version; at the end every
 * page is back in the pool.
 */
static void test_cow_random_versions(void **state)
{
	enum { MAXV = 5 };
	struct kv_pool *pool = pool_new(128 * MIB);
	struct kv_obj *cur = obj_new(pool), *old[MAXV] = {0};
	struct model mcur = {0}, mold[MAXV] = {{0}};
	unsigned rnd = 12345;

	(void)state;
	for (int step = 0; step < 200; step++) {
		uint64_t a, b;
		unsigned op;

		rnd = rnd * 1103515245u + 12345u;
		op = (rnd >> 16) % 10;
		rnd = rnd * 1103515245u + 12345u;
		a = ((uint64_t)(rnd >> 8) * 7919) % (5 * MIB);
		rnd = rnd * 1103515245u + 12345u;
		b = (rnd >> 8) % (op < 4 ? 40000 : MIB) + 1;
		if (op < 6) {
			write_pat(cur, &mcur, a, b, step);
		} else if (op == 6) {
			assert_int_equal(kv_obj_truncate(cur, a), 0);
			model_truncate(&mcur, a);
		} else if (op == 7) {
			bool keep = b & 1;

			assert_int_equal(kv_obj_reserve(cur, a + b, keep), 0);
			if (!keep && a + b > mcur.m_size)
				model_truncate(&mcur, a + b);
		} else {
			/* Seal, keep the sealed version in a free slot (or drop one), clone. */
			struct kv_obj *next = NULL;
			struct model mnext = {0};
			uint64_t len = op == 8 ? UINT64_MAX : a;
			int slot = (int)(b % MAXV);

			kv_obj_seal(cur, (uint64_t)step + 1);
			assert_int_equal(kv_obj_clone(cur, len, &next), 0);
			model_write(&mnext, 0, mcur.m_buf, len < mcur.m_size ? len : mcur.m_size);
			if (old[slot]) {
				kv_obj_put(old[slot]);
				model_free(&mold[slot]);
			}
			old[slot] = cur;
			mold[slot] = mcur;
			cur = next;
			mcur = mnext;
		}
		check_all(cur, &mcur);
		for (int v = 0; v < MAXV; v++)
			if (old[v] && (step % 4 == 0 || op >= 8))
				check_all(old[v], &mold[v]);
	}
	check_boundaries(cur, &mcur);
	for (int v = 0; v < MAXV; v++)
		if (old[v]) {
			kv_obj_put(old[v]);
			model_free(&mold[v]);
		}
	check_all(cur, &mcur);
	kv_obj_put(cur);
	model_free(&mcur);
	assert_int_equal(kv_pool_used(pool), 0);
	kv_pool_destroy(pool);
}

static void test_refcount(void **state)
{
	struct kv_pool *pool = pool_new(16 * MIB);
	struct kv_obj *obj = obj_new(pool);
	struct model m = {0};
	uint64_t used;

	(void)state;
	write_pat(obj, &m, 0, 3 * MIB + 5, 1);
	kv_obj_seal(obj, 1);
	used = kv_pool_used(pool);
	assert_int_equal(used, PAGE_UP(3 * MIB + 5));
	kv_obj_get(obj);
	kv_obj_get(obj);
	assert_int_equal(atomic_load(&obj->ko_ref), 3);
	kv_obj_put(obj);
	assert_int_equal(atomic_load(&obj->ko_ref), 2);
	assert_int_equal(kv_pool_used(pool), used);
	kv_obj_put(obj);
	assert_int_equal(atomic_load(&obj->ko_ref), 1);
	assert_int_equal(kv_pool_used(pool), used);
	check_all(obj, &m);
	kv_obj_put(obj);
	assert_int_equal(kv_pool_used(pool), 0);
	model_free(&m);
	kv_pool_destroy(pool);
}

/* Takes every free page of the pool in single-page blocks; returns how many. */
static size_t grab_all_pages(struct kv_pool *pool, void **pages, size_t max)
{
	size_t n = 0;
	void *addr;

	while (kv_pool_alloc(pool, KV_PAGE_SIZE, &addr) == 0) {
		assert_true(n < max);
		pages[n++] = addr;
	}
	assert_int_equal(kv_pool_used(pool), kv_pool_size(pool));
	return n;
}

static void test_enospc(void **state)
{
	/* One shard (pool under 8 MiB). */
	struct kv_pool *pool = pool_new(MIB);
	struct kv_obj *obj = obj_new(pool), *other = obj_new(pool), sentinel, *c = &sentinel;
	static void *pages[256];
	struct model m = {0};
	uint8_t *big = calloc(1, 2 * MIB);
	uint64_t cap, used;
	size_t n;

	(void)state;
	assert_non_null(big);

	/* A write that cannot fit: nothing written, spare capacity returned. */
	write_pat(obj, &m, 0, 100 * KIB, 1);
	assert_int_equal(kv_obj_write(obj, 100 * KIB, big, 2 * MIB), -ENOSPC);
	assert_int_equal(obj->ko_size, 100 * KIB);
	assert_int_equal(obj->ko_cap, 100 * KIB);
	assert_int_equal(kv_pool_used(pool), 100 * KIB);
	check_all(obj, &m);
	assert_int_equal(kv_obj_write(obj, 50 * KIB, big, MIB), -ENOSPC);
	assert_int_equal(obj->ko_size, 100 * KIB);
	check_all(obj, &m);

	/* Fill the pool to the last page with another object. */
	assert_int_equal(kv_obj_alloc(other, MIB - 100 * KIB), 0);
	assert_int_equal(kv_pool_used(pool), MIB);
	assert_int_equal(kv_obj_write(obj, 100 * KIB, "x", 1), -ENOSPC);
	assert_int_equal(kv_obj_truncate(obj, 100 * KIB + 1), -ENOSPC);
	assert_int_equal(kv_obj_reserve(obj, 100 * KIB + 1, false), -ENOSPC);
	assert_int_equal(kv_obj_reserve(obj, 100 * KIB + 1, true), 0); /* unwritten: no memory */
	assert_int_equal(kv_obj_clone(obj, 1, &c), -ENOSPC);
	assert_ptr_equal(c, &sentinel);
	assert_int_equal(obj->ko_size, 100 * KIB);
	assert_int_equal(obj->ko_cap, 100 * KIB);
	assert_int_equal(kv_pool_used(pool), MIB);
	check_all(obj, &m);

	/* Writes and truncates inside the capacity need no memory. */
	write_pat(obj, &m, 10, 5000, 2);
	assert_int_equal(kv_obj_truncate(obj, 100 * KIB - 1), 0);
	model_truncate(&m, 100 * KIB - 1);
	write_pat(obj, &m, 100 * KIB - 1, 1, 3);
	check_all(obj, &m);

	/* Room again: the same write now succeeds. */
	kv_obj_put(other);
	write_pat(obj, &m, 100 * KIB, 2000, 4);
	check_all(obj, &m);

	/* Truncate, reserve and clone fail whole, with the object as it was. */
	cap = obj->ko_cap;
	used = kv_pool_used(pool);
	assert_int_equal(kv_obj_truncate(obj, 2 * MIB), -ENOSPC);
	assert_int_equal(kv_obj_reserve(obj, 2 * MIB, true), 0); /* unwritten: no memory */
	assert_int_equal(kv_obj_reserve(obj, 2 * MIB, false), -ENOSPC);
	assert_int_equal(obj->ko_cap, cap);
	assert_int_equal(kv_pool_used(pool), used);
	check_all(obj, &m);

	/*
	 * With the pool full, a whole clone still works (it shares every
	 * extent), a cut one does not (it copies the extent it cuts), and a
	 * write into the clone fails whole: it would have to copy its extent.
	 */
	n = grab_all_pages(pool, pages, 256);
	assert_int_equal(kv_obj_clone(obj, 1000, &c), -ENOSPC);
	assert_ptr_equal(c, &sentinel);
	assert_int_equal(kv_obj_clone(obj, UINT64_MAX, &c), 0);
	assert_int_equal(kv_pool_used(pool), used + n * KV_PAGE_SIZE);
	assert_int_equal(kv_obj_write(c, 10, "y", 1), -ENOSPC);
	assert_int_equal(c->ko_size, m.m_size);
	check_all(c, &m);
	check_all(obj, &m);
	kv_obj_put(c);
	for (size_t i = 0; i < n; i++)
		kv_pool_free(pool, pages[i], KV_PAGE_SIZE);
	assert_int_equal(kv_pool_used(pool), used);

	kv_obj_put(obj);
	model_free(&m);
	free(big);
	assert_int_equal(kv_pool_used(pool), 0);
	kv_pool_destroy(pool);
}

/*
 * Checks iovecs against the extent list: each lies in one extent, in order,
 * one per extent (kv_obj_iov does not merge extents that happen to be
 * adjacent in memory, so maxiov counts extents).
 */
static void check_iov(const struct kv_obj *obj, const struct model *m, uint64_t off, uint64_t len,
		      int maxiov)
{
	struct iovec iov[64];
	uint64_t bytes = 999, end, pos = off, want = 0;
	uint32_t e;
	int n, expect = 0;

	assert_true(maxiov <= 64);
	end = off >= m->m_size ? off : (len < m->m_size - off ? off + len : m->m_size);
	/* Expected: one iovec per extent overlapping [off, end), up to maxiov. */
	for (e = 0; e < nflat(obj) && expect < maxiov; e++) {
		const struct flat_seg fx = flat(obj, e), *x = &fx;
		uint64_t lo = x->ke_off > off ? x->ke_off : off;
		uint64_t hi = x->ke_off + x->ke_len < end ? x->ke_off + x->ke_len : end;

		if (lo < hi) {
			expect++;
			want += hi - lo;
		}
	}
	n = kv_obj_iov(obj, off, len, iov, maxiov, &bytes);
	assert_int_equal(n, expect);
	assert_int_equal(bytes, want);
	for (int i = 0; i < n; i++) {
		uint32_t k = 0;

		while (k + 1 < nflat(obj) && flat(obj, k + 1).ke_off <= pos)
			k++;
		assert_ptr_equal(iov[i].iov_base,
				 (char *)flat(obj, k).ke_addr + (pos - flat(obj, k).ke_off));
		assert_true(iov[i].iov_len > 0);
		assert_true(pos + iov[i].iov_len <= flat(obj, k).ke_off + flat(obj, k).ke_len);
		assert_memory_equal(iov[i].iov_base, m->m_buf + pos, iov[i].iov_len);
		pos += iov[i].iov_len;
	}
	assert_int_equal(pos - off, bytes);
}

static void test_iov(void **state)
{
	struct kv_pool *pool = pool_new(32 * MIB);
	struct kv_obj *obj = obj_new(pool);
	struct model m = {0};
	struct iovec iov[4];
	uint64_t bytes, size;

	(void)state;
	/* Small pieces first, so the value spans extents of several sizes. */
	for (uint64_t off = 0; off < 5 * MIB + 3; off += 4096)
		write_pat(obj, &m, off, 5 * MIB + 3 - off < 4096 ? 5 * MIB + 3 - off : 4096, 1);
	size = m.m_size;
	assert_true(nflat(obj) >= 4);
	check_extents(obj);

	check_iov(obj, &m, 0, size, 64);
	check_iov(obj, &m, 0, UINT64_MAX, 64);
	for (int maxiov = 1; maxiov <= 4; maxiov++) {
		check_iov(obj, &m, 0, size, maxiov);
		check_iov(obj, &m, 1, size, maxiov);
		check_iov(obj, &m, flat(obj, 1).ke_off - 1, size, maxiov);
		check_iov(obj, &m, flat(obj, 2).ke_off + 17, 3 * MIB, maxiov);
	}
	/* maxiov 1 stops at the end of the first extent. */
	assert_int_equal(kv_obj_iov(obj, 0, size, iov, 1, &bytes), 1);
	assert_int_equal(bytes, flat(obj, 0).ke_len);
	assert_int_equal(iov[0].iov_len, flat(obj, 0).ke_len);
	assert_int_equal(kv_obj_iov(obj, 5, size, iov, 1, &bytes), 1);
	assert_int_equal(bytes, flat(obj, 0).ke_len - 5);

	/* Inside one extent: one iovec of exactly len. */
	assert_int_equal(kv_obj_iov(obj, 100, 200, iov, 4, &bytes), 1);
	assert_int_equal(bytes, 200);
	assert_ptr_equal(iov[0].iov_base, (char *)flat(obj, 0).ke_addr + 100);
	assert_int_equal(iov[0].iov_len, 200);

	/* Ranges at and past the end, empty ranges, no room for iovecs. */
	bytes = 1;
	assert_int_equal(kv_obj_iov(obj, size, 10, iov, 4, &bytes), 0);
	assert_int_equal(bytes, 0);
	bytes = 1;
	assert_int_equal(kv_obj_iov(obj, size + MIB, 10, iov, 4, &bytes), 0);
	assert_int_equal(bytes, 0);
	bytes = 1;
	assert_int_equal(kv_obj_iov(obj, UINT64_MAX, UINT64_MAX, iov, 4, &bytes), 0);
	assert_int_equal(bytes, 0);
	bytes = 1;
	assert_int_equal(kv_obj_iov(obj, 10, 0, iov, 4, &bytes), 0);
	assert_int_equal(bytes, 0);
	bytes = 1;
	assert_int_equal(kv_obj_iov(obj, 10, 10, iov, 0, &bytes), 0);
	assert_int_equal(bytes, 0);
	check_iov(obj, &m, size - 3, 100, 4);
	check_iov(obj, &m, size - 1, UINT64_MAX, 4);

	/* The same after sealing, which trims the last extent. */
	kv_obj_seal(obj, 1);
	check_extents(obj);
	check_iov(obj, &m, 0, size, 64);
	check_iov(obj, &m, size - 5000, 10000, 2);
	for (int maxiov = 1; maxiov <= 3; maxiov++)
		check_iov(obj, &m, 12345, size, maxiov);

	kv_obj_put(obj);
	model_free(&m);
	assert_int_equal(kv_pool_used(pool), 0);
	kv_pool_destroy(pool);
}

/*
 * A value of many single-page extents: kv_obj_read must cross more extents
 * than it describes with one kv_obj_iov call. Leans on core/pool.c: when
 * every free page is isolated (its buddy taken), only single pages can be
 * handed out.
 */
static void test_read_many_extents(void **state)
{
	struct kv_pool *pool = pool_new(MIB);
	static void *pages[256];
	struct kv_obj *obj;
	struct model m = {0};
	struct iovec iov[64];
	uint64_t bytes;
	size_t n;

	(void)state;
	n = grab_all_pages(pool, pages, 256);
	assert_int_equal(n, 256);
	for (size_t i = 0; i < n; i++) {
		uintptr_t pg = ((uintptr_t)pages[i] / KV_PAGE_SIZE);

		if (pg % 2 == 0) {
			kv_pool_free(pool, pages[i], KV_PAGE_SIZE);
			pages[i] = NULL;
		}
	}
	assert_int_equal(kv_pool_used(pool), 128 * KV_PAGE_SIZE);

	obj = obj_new(pool);
	write_pat(obj, &m, 0, 40 * KV_PAGE_SIZE - 7, 1);
	assert_int_equal(nflat(obj), 40);
	check_all(obj, &m);
	check_boundaries(obj, &m);
	check_range(obj, &m, 3, 35 * KV_PAGE_SIZE);
	check_range(obj, &m, 17 * KV_PAGE_SIZE - 1, MIB);
	check_iov(obj, &m, 0, UINT64_MAX, 64);
	assert_int_equal(kv_obj_iov(obj, 0, UINT64_MAX, iov, 16, &bytes), 16);
	assert_int_equal(bytes, 16 * KV_PAGE_SIZE);

	/* Grow past what is free: fails, the 40 pages stay and the rest is returned. */
	assert_int_equal(kv_obj_write(obj, 200 * KV_PAGE_SIZE, "x", 1), -ENOSPC);
	assert_int_equal(nflat(obj), 40);
	assert_int_equal(kv_pool_used(pool), 168 * KV_PAGE_SIZE);
	check_all(obj, &m);

	kv_obj_seal(obj, 1);
	check_all(obj, &m);
	kv_obj_put(obj);
	model_free(&m);
	for (size_t i = 0; i < n; i++)
		if (pages[i])
			kv_pool_free(pool, pages[i], KV_PAGE_SIZE);
	assert_int_equal(kv_pool_used(pool), 0);
	kv_pool_destroy(pool);
}

/*
 * Record tags (kv_obj_extent_rec): a clone shares them with the blocks;
 * every change to an extent's bytes clears its tag (the copy a shared
 * extent gets, an in-place write, a punch, growth of the last extent);
 * a cut or a seal keeps it.
 */
static void test_record_tags(void **state)
{
	struct kv_pool *pool = pool_new(32 * MIB);
	struct kv_obj *a = obj_new(pool), *b, *c;
	struct model m = {0};

	(void)state;
	write_pat(a, &m, 0, 4 * KV_EXTENT + 5000, 3);
	kv_obj_seal(a, 7);
	for (uint64_t k = 0; k < 5; k++) {
		assert_int_equal(kv_obj_extent_rec(a, k), 0);
		kv_obj_tag_extent(a, k, 7 + k);
	}
	assert_int_equal(kv_obj_extent_rec(a, 9), 0); /* past the end: a hole */
	assert_int_equal(kv_obj_clone(a, UINT64_MAX, &b), 0);
	for (uint64_t k = 0; k < 5; k++)
		assert_int_equal(kv_obj_extent_rec(b, k), 7 + k);
	/* A write into a shared extent: b's copy has no tag, a's block keeps it. */
	assert_int_equal(kv_obj_write(b, KV_EXTENT + 10, "x", 1), 0);
	assert_int_equal(kv_obj_extent_rec(b, 1), 0);
	assert_int_equal(kv_obj_extent_rec(a, 1), 8);
	/* Once b alone holds the blocks, writes go in place: the tag goes too. */
	kv_obj_put(a);
	assert_int_equal(kv_obj_write(b, 2 * KV_EXTENT, "y", 1), 0);
	assert_int_equal(kv_obj_extent_rec(b, 2), 0);
	assert_int_equal(kv_obj_punch(b, 10, 100), 0);
	assert_int_equal(kv_obj_extent_rec(b, 0), 0);
	/* A cut keeps the last extent's tag; growing it back clears it. */
	assert_int_equal(kv_obj_truncate(b, 4 * KV_EXTENT + 100), 0);
	assert_int_equal(kv_obj_extent_rec(b, 4), 11);
	kv_obj_seal(b, 20);
	assert_int_equal(kv_obj_extent_rec(b, 4), 11);
	assert_int_equal(kv_obj_extent_rec(b, 3), 10);
	assert_int_equal(kv_obj_clone(b, UINT64_MAX, &c), 0);
	assert_int_equal(kv_obj_truncate(c, 4 * KV_EXTENT + 200), 0);
	assert_int_equal(kv_obj_extent_rec(c, 4), 0);
	assert_int_equal(kv_obj_extent_rec(b, 4), 11);
	/* A clone that cuts an extent short copies it: no tag. */
	kv_obj_put(c);
	assert_int_equal(kv_obj_clone(b, 3 * KV_EXTENT + 10, &c), 0);
	assert_int_equal(kv_obj_extent_rec(c, 3), 0);
	assert_int_equal(kv_obj_extent_rec(c, 1), 0);
	kv_obj_put(c);
	kv_obj_put(b);
	model_free(&m);
	assert_int_equal(kv_pool_used(pool), 0);
	kv_pool_destroy(pool);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_new_empty),
	    cmocka_unit_test(test_write_read_shapes),
	    cmocka_unit_test(test_write_sequential_and_overwrite),
	    cmocka_unit_test(test_write_past_end_zero_fills),
	    cmocka_unit_test(test_truncate_down_up),
	    cmocka_unit_test(test_reserve),
	    cmocka_unit_test(test_holes),
	    cmocka_unit_test(test_seal_trims),
	    cmocka_unit_test(test_seal_small_value_pins_one_page),
	    cmocka_unit_test(test_clone),
	    cmocka_unit_test(test_cow_per_extent),
	    cmocka_unit_test(test_cow_random_versions),
	    cmocka_unit_test(test_refcount),
	    cmocka_unit_test(test_enospc),
	    cmocka_unit_test(test_iov),
	    cmocka_unit_test(test_read_many_extents),
	    cmocka_unit_test(test_record_tags),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
