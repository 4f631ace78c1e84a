/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_store_fallocate.c — fallocate (core/fallocate.c):
 * reserved holes (unwritten extents, with and without KEEP_SIZE), punched
 * holes found again by SEEK_DATA and SEEK_HOLE (core/read.c), and the
 * pool keeping a reservation's promise. The store and the helpers are
 * tests/unit/store_fixture.h.
 */
#include <linux/falloc.h>

#include "store_fixture.h"

/* Punching holes and finding them: fallocate(PUNCH_HOLE | KEEP_SIZE), SEEK_DATA, SEEK_HOLE. */
static void test_punch_seek(void **state)
{
	struct kv_store *st = store_new(64 * MIB);
	struct kv_inode *root = kv_store_root(st), *f, *d;
	const int punch = FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE;
	uint64_t at = 0, used0;

	(void)state;
	f = make_file(st, root, "f", 9 * MIB, 1);
	d = mkdir_ok(st, root, "d");
	used0 = used(st);
	assert_int_equal(kv_store_seek(st, f, 0, SEEK_DATA, &at), 0);
	assert_int_equal(at, 0);
	assert_int_equal(kv_store_seek(st, f, 5, SEEK_HOLE, &at), 0);
	assert_int_equal(at, 9 * MIB); /* no hole before the end */
	assert_int_equal(kv_store_seek(st, f, 9 * MIB, SEEK_DATA, &at), -ENXIO);
	assert_int_equal(kv_store_seek(st, d, 0, SEEK_DATA, &at), -EISDIR);

	/* [1 MiB, 7 MiB): extents 1 and 2 go whole, 0 and 3 are zeroed in part. */
	assert_int_equal(kv_store_fallocate(st, f, punch, MIB, 6 * MIB), 0);
	check_value_z(st, f, 9 * MIB, 1, MIB, 6 * MIB);
	assert_int_equal(used(st), used0 - 4 * MIB);
	assert_int_equal(getattr(st, f).ka_alloc, used0 - 4 * MIB);
	assert_int_equal(kv_store_seek(st, f, 0, SEEK_HOLE, &at), 0);
	assert_int_equal(at, 2 * MIB);
	assert_int_equal(kv_store_seek(st, f, 3 * MIB, SEEK_HOLE, &at), 0);
	assert_int_equal(at, 3 * MIB);
	assert_int_equal(kv_store_seek(st, f, 2 * MIB + 5, SEEK_DATA, &at), 0);
	assert_int_equal(at, 6 * MIB);
	assert_int_equal(kv_store_seek(st, f, 6 * MIB + 5, SEEK_DATA, &at), 0);
	assert_int_equal(at, 6 * MIB + 5);
	/* Past the end it changes nothing, and the size stays. */
	assert_int_equal(kv_store_fallocate(st, f, punch, 20 * MIB, MIB), 0);
	assert_int_equal(getattr(st, f).ka_size, 9 * MIB);
	/* Truncate up: a hole to the new end, found as one. */
	{
		struct kv_setattr sa = {.ksa_valid = KV_SET_SIZE, .ksa_size = 1ull << 40};
		struct kv_attr a;

		assert_int_equal(kv_store_setattr(st, f, &sa, &a), 0);
		assert_int_equal(a.ka_size, 1ull << 40);
	}
	/* Only the old end's extent takes memory, to its end (zeros). */
	assert_int_equal(used(st), used0 - 3 * MIB);
	assert_int_equal(kv_store_seek(st, f, 9 * MIB, SEEK_HOLE, &at), 0);
	assert_int_equal(at, 10 * MIB);
	assert_int_equal(kv_store_seek(st, f, 10 * MIB, SEEK_DATA, &at), -ENXIO);

	kv_store_forget(st, f, 1);
	kv_store_forget(st, d, 1);
	kv_store_destroy(st);
}

static void test_fallocate(void **state)
{
	struct kv_store *st = store_new(64 * MIB);
	struct kv_inode *root = kv_store_root(st), *f, *d;
	uint64_t s1, s2;
	struct kv_attr a;

	(void)state;
	f = make_file(st, root, "f", 100, 1);
	d = mkdir_ok(st, root, "d");
	s1 = getattr(st, f).ka_seq;

	assert_int_equal(kv_store_fallocate(st, f, FALLOC_FL_PUNCH_HOLE, 0, 10), -EOPNOTSUPP);
	assert_int_equal(kv_store_fallocate(st, f, FALLOC_FL_ZERO_RANGE, 0, 10), -EOPNOTSUPP);
	assert_int_equal(kv_store_fallocate(st, d, 0, 0, 10), -EISDIR);
	check_value(st, f, 100, 1);

	/* Mode 0 extends with zeros: a new version, sealed as nobody has it open. */
	assert_int_equal(kv_store_fallocate(st, f, 0, 0, MIB), 0);
	a = getattr(st, f);
	assert_int_equal(a.ka_size, MIB);
	assert_int_equal(a.ka_alloc, MIB);
	s2 = a.ka_seq;
	assert_true(s2 > s1);
	check_value_z(st, f, MIB, 1, 100, UINT64_MAX);
	assert_int_equal(usage(st).ku_bytes, MIB);

	/* Inside the size: nothing to do. */
	assert_int_equal(kv_store_fallocate(st, f, 0, 4096, 8192), 0);
	assert_int_equal(getattr(st, f).ka_size, MIB);
	assert_int_equal(kv_store_fallocate(st, f, 0, MIB, 4096), 0);
	assert_int_equal(getattr(st, f).ka_size, MIB + 4096);
	check_value_z(st, f, MIB + 4096, 1, 100, UINT64_MAX);

	/*
	 * KEEP_SIZE past the end: extent 1, a hole, becomes unwritten — no
	 * memory, its room promised by the pool and counted as allocated.
	 */
	open_ok(st, f, O_RDWR);
	assert_int_equal(kv_store_fallocate(st, f, FALLOC_FL_KEEP_SIZE, 0, 4 * MIB), 0);
	a = getattr(st, f);
	assert_int_equal(a.ka_size, MIB + 4096);
	assert_int_equal(a.ka_alloc, PAGE_UP(MIB + 4096) + 2 * MIB);
	assert_int_equal(kv_pool_reserved(kv_store_pool(st)), 2 * MIB);
	write_pat(st, f, MIB + 4096, 10, 1);
	check_value_z(st, f, MIB + 4106, 1, 100, MIB + 4096 - 100);
	kv_store_release(st, f, O_RDWR);
	a = getattr(st, f);
	assert_int_equal(a.ka_alloc, PAGE_UP(MIB + 4106) + 2 * MIB);
	assert_int_equal(used(st), PAGE_UP(MIB + 4106));
	/* A write into it draws on the promise: its memory, zeroed, then the bytes. */
	open_ok(st, f, O_RDWR);
	write_pat(st, f, 3 * MIB, 10, 2);
	kv_store_release(st, f, O_RDWR);
	assert_int_equal(kv_pool_reserved(kv_store_pool(st)), 0);
	a = getattr(st, f);
	assert_int_equal(a.ka_size, 3 * MIB + 10);
	assert_int_equal(a.ka_alloc, 2 * MIB + PAGE_UP(MIB + 10));
	/* Truncated below it, the promise of an unwritten extent goes. */
	assert_int_equal(kv_store_fallocate(st, f, FALLOC_FL_KEEP_SIZE, 0, 8 * MIB), 0);
	assert_int_equal(kv_pool_reserved(kv_store_pool(st)), 4 * MIB);
	assert_int_equal(
	    kv_store_setattr(st, f, &(struct kv_setattr){.ksa_valid = KV_SET_SIZE, .ksa_size = MIB},
			     &a),
	    0);
	assert_int_equal(kv_pool_reserved(kv_store_pool(st)), 0);
	assert_int_equal(getattr(st, f).ka_alloc, MIB);

	kv_store_forget(st, f, 1);
	kv_store_forget(st, d, 1);
	kv_store_destroy(st);
}

/*
 * Without an SSD the pool keeps a reservation's promise through the cases
 * where it could slip: appends into a KEEP_SIZE extent in small pieces once
 * everything else is full (the first one takes the whole extent), and a
 * write that fails for room elsewhere after it drew on a promise (the
 * promise comes back).
 */
static void test_fallocate_pool_promise(void **state)
{
	struct kv_store *st = store_new(16 * MIB);
	struct kv_inode *root = kv_store_root(st), *f, *g;
	struct kv_pool *pool = kv_store_pool(st);
	uint8_t *chunk = pat_buf(0, 64 * KIB, 7), *big = pat_buf(0, 4 * MIB, 8);
	uint64_t size = 0;
	struct kv_attr a;

	(void)state;
	assert_int_equal(kv_store_create_open(st, root, "log", 0644, &cred, &f, &a), 0);
	assert_int_equal(kv_store_fallocate(st, f, FALLOC_FL_KEEP_SIZE, 0, 2 * MIB), 0);
	assert_int_equal(kv_pool_reserved(pool), 2 * MIB);
	write_pat(st, f, 0, 4 * KIB, 1); /* the first append takes the whole extent */
	assert_int_equal(kv_pool_reserved(pool), 0);
	/* Everything else full. */
	assert_int_equal(kv_store_create_open(st, root, "fill", 0644, &cred, &g, &a), 0);
	while (kv_store_write(st, g, size, chunk, 64 * KIB) == 0)
		size += 64 * KIB;
	/* The rest of the extent still takes its appends. */
	for (uint64_t off = 4 * KIB; off + 64 * KIB <= 2 * MIB; off += 64 * KIB)
		assert_int_equal(kv_store_write(st, f, off, chunk, 64 * KIB), 0);
	assert_int_equal(getattr(st, f).ka_size, 2 * MIB - 60 * KIB);
	kv_store_release(st, f, O_RDWR);
	kv_store_release(st, g, O_WRONLY);
	assert_int_equal(kv_store_unlink(st, root, "log"), 0);
	kv_store_forget(st, f, 1);

	/* A write past a promise into room nobody has fails, and the promise stays. */
	assert_int_equal(kv_store_create_open(st, root, "p", 0644, &cred, &f, &a), 0);
	assert_int_equal(kv_store_unlink(st, root, "fill"), 0);
	kv_store_forget(st, g, 1);
	assert_int_equal(kv_store_fallocate(st, f, FALLOC_FL_KEEP_SIZE, 0, 2 * MIB), 0);
	assert_int_equal(kv_store_create_open(st, root, "fill2", 0644, &cred, &g, &a), 0);
	size = 0;
	while (kv_store_write(st, g, size, chunk, 64 * KIB) == 0)
		size += 64 * KIB;
	assert_int_equal(kv_store_write(st, f, 0, big, 4 * MIB), -ENOSPC);
	assert_int_equal(kv_pool_reserved(pool), 2 * MIB);
	assert_int_equal(getattr(st, f).ka_size, 0);
	assert_int_equal(kv_store_write(st, f, 0, big, 2 * MIB), 0); /* what is promised */
	assert_int_equal(kv_pool_reserved(pool), 0);
	kv_store_release(st, f, O_RDWR);
	kv_store_release(st, g, O_WRONLY);
	kv_store_forget(st, f, 1);
	kv_store_forget(st, g, 1);
	free(chunk);
	free(big);
	kv_store_destroy(st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_fallocate),
	    cmocka_unit_test(test_fallocate_pool_promise),
	    cmocka_unit_test(test_punch_seek),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
