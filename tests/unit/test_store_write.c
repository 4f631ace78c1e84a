/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_store_write.c — values and their versions (core/write.c,
 * core/attr.c): sealing at the last release, copy-on-write (per extent)
 * while a read guard holds the old version, open files unlinked, setattr
 * and O_TRUNC (a size change is a truncate), and a change that fails for
 * want of memory leaving the file as it was. The store and the helpers are
 * tests/unit/store_fixture.h.
 */
#include <time.h>

#include "store_fixture.h"

/* Takes every free page of the pool in single pages; returns how many. */
static size_t grab_all_pages(struct kv_pool *pool, void ***pages)
{
	size_t n = 0, max = kv_pool_size(pool) / KV_PAGE_SIZE;
	void *addr;

	*pages = calloc(max, sizeof(**pages));
	assert_non_null(*pages);
	while (kv_pool_alloc(pool, KV_PAGE_SIZE, &addr) == 0) {
		assert_true(n < max);
		(*pages)[n++] = addr;
	}
	assert_int_equal(kv_pool_used(pool), kv_pool_size(pool));
	return n;
}

static void free_pages(struct kv_pool *pool, void **pages, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (pages[i])
			kv_pool_free(pool, pages[i], KV_PAGE_SIZE);
	free(pages);
}

static void test_seal_on_release(void **state)
{
	struct kv_store *st = store_new(64 * MIB);
	struct kv_inode *root = kv_store_root(st), *k;
	uint64_t s1, s2, s3, size;
	struct kv_attr a;
	uint8_t *buf;

	(void)state;
	assert_int_equal(kv_store_create_open(st, root, "k", 0644, &cred, &k, &a), 0);
	assert_int_equal(a.ka_seq, 0);
	assert_int_equal(usage(st).ku_open, 1);
	assert_int_equal(kv_store_write(st, k, 0, "0123456789", 10), 0);
	a = getattr(st, k);
	assert_int_equal(a.ka_seq, 0);
	assert_int_equal(a.ka_size, 10);
	kv_store_release(st, k, O_WRONLY);
	a = getattr(st, k);
	s1 = a.ka_seq;
	assert_true(s1 > 0);
	assert_int_equal(a.ka_alloc, 4096);
	assert_int_equal(used(st), 4096);
	assert_int_equal(usage(st).ku_last_seq, s1);
	assert_int_equal(usage(st).ku_open, 0);

	/* Opening and closing without writing makes no version. */
	open_ok(st, k, O_RDONLY);
	kv_store_release(st, k, O_RDONLY);
	open_ok(st, k, O_RDWR);
	assert_int_equal(getattr(st, k).ka_seq, s1);
	kv_store_release(st, k, O_RDWR);
	assert_int_equal(getattr(st, k).ka_seq, s1);

	/* A write makes an open version; the release seals it with a later number. */
	open_ok(st, k, O_RDWR);
	assert_int_equal(kv_store_write(st, k, 8, "abcde", 5), 0);
	assert_int_equal(getattr(st, k).ka_seq, 0);
	kv_store_release(st, k, O_RDWR);
	s2 = getattr(st, k).ka_seq;
	assert_true(s2 > s1);
	buf = read_all(st, k, &size);
	assert_int_equal(size, 13);
	assert_memory_equal(buf, "01234567abcde", 13);
	free(buf);

	/* Only the last of several handles seals. */
	open_ok(st, k, O_RDWR);
	open_ok(st, k, O_RDONLY);
	assert_int_equal(kv_store_write(st, k, 0, "X", 1), 0);
	kv_store_release(st, k, O_RDWR);
	assert_int_equal(getattr(st, k).ka_seq, 0);
	kv_store_release(st, k, O_RDONLY);
	s3 = getattr(st, k).ka_seq;
	assert_true(s3 > s2);
	assert_int_equal(usage(st).ku_last_seq, s3);
	assert_int_equal(used(st), 4096);

	kv_store_forget(st, k, 1);
	kv_store_destroy(st);
}

/* Gathers the bytes iovecs describe. */
static uint8_t *gather(const struct iovec *iov, int n, uint64_t bytes)
{
	uint8_t *buf = malloc(bytes ? bytes : 1), *p = buf;

	assert_non_null(buf);
	for (int i = 0; i < n; i++) {
		memcpy(p, iov[i].iov_base, iov[i].iov_len);
		p += iov[i].iov_len;
	}
	assert_int_equal((uint64_t)(p - buf), bytes);
	return buf;
}

static void check_guard(const struct iovec *iov, int n, uint64_t bytes, uint64_t len, unsigned seed)
{
	uint8_t *got = gather(iov, n, bytes), *want = pat_buf(0, len, seed);

	assert_int_equal(bytes, len);
	assert_memory_equal(got, want, len);
	free(got);
	free(want);
}

/*
 * Copy-on-write per extent while a read guard holds the old version: each
 * small write copies the one extent it lands in (pool.cow_bytes), the
 * other extents stay shared, the guard keeps reading the old bytes, and
 * the copies' old extents go back to the pool when the guard is done.
 */
static void test_cow_per_extent_guard(void **state)
{
	struct kv_store *st = store_new(64 * MIB);
	struct kv_inode *root = kv_store_root(st), *k;
	struct kv_read_guard g;
	struct iovec iov[64];
	uint64_t bytes, size, cow;
	uint8_t *buf;
	int n;

	(void)state;
	k = make_file(st, root, "k", 5 * KV_EXTENT, 1);
	assert_int_equal(used(st), 5 * KV_EXTENT);
	n = kv_store_read(st, k, 0, UINT64_MAX, iov, 64, &bytes, &g);
	check_guard(iov, n, bytes, 5 * KV_EXTENT, 1);

	cow = kv_obj_cow_bytes();
	open_ok(st, k, O_WRONLY);
	assert_int_equal(kv_store_write(st, k, KV_EXTENT + 10, "AAAA", 4), 0);
	assert_int_equal(kv_store_write(st, k, 3 * KV_EXTENT + 20, "BBBB", 4), 0);
	assert_int_equal(kv_store_write(st, k, 3 * KV_EXTENT + 30, "CCCC", 4), 0);
	kv_store_release(st, k, O_WRONLY);
	assert_int_equal(kv_obj_cow_bytes() - cow, 2 * KV_EXTENT);
	assert_int_equal(used(st), 7 * KV_EXTENT);
	check_guard(iov, n, bytes, 5 * KV_EXTENT, 1);
	kv_read_done(&g);
	assert_int_equal(used(st), 5 * KV_EXTENT);

	buf = read_all(st, k, &size);
	assert_int_equal(size, 5 * KV_EXTENT);
	memcpy(buf + KV_EXTENT + 10, "____", 4);
	memcpy(buf + 3 * KV_EXTENT + 20, "____", 4);
	memcpy(buf + 3 * KV_EXTENT + 30, "____", 4);
	for (uint64_t i = 0; i < size; i++)
		if (buf[i] != '_')
			assert_int_equal(buf[i], pat(i, 1));
	free(buf);
	buf = read_all(st, k, &size);
	assert_memory_equal(buf + KV_EXTENT + 10, "AAAA", 4);
	assert_memory_equal(buf + 3 * KV_EXTENT + 20, "BBBB", 4);
	assert_memory_equal(buf + 3 * KV_EXTENT + 30, "CCCC", 4);
	free(buf);
	assert_int_equal(kv_store_unlink(st, root, "k"), 0);
	kv_store_forget(st, k, 1);
	assert_int_equal(used(st), 0);
	kv_store_destroy(st);
}

static void test_cow_read_guard(void **state)
{
	struct kv_store *st = store_new(64 * MIB);
	struct kv_inode *root = kv_store_root(st), *k;
	struct kv_setattr sa = {.ksa_valid = KV_SET_SIZE, .ksa_size = 10};
	struct kv_read_guard g;
	struct iovec iov[64];
	uint64_t bytes, s1, s2, size;
	struct kv_attr a;
	uint8_t *buf;
	int n;

	(void)state;
	k = make_file(st, root, "k", 200000, 1);
	s1 = getattr(st, k).ka_seq;

	/* A guard on a sealed version holds no lock. */
	n = kv_store_read(st, k, 0, UINT64_MAX, iov, 64, &bytes, &g);
	assert_true(n > 0);
	assert_null(g.krg_locked);
	assert_non_null(g.krg_obj);
	check_guard(iov, n, bytes, 200000, 1);

	/* A small write makes a new version; the guard still sees the old one. */
	open_ok(st, k, O_WRONLY);
	assert_int_equal(kv_store_write(st, k, 1000, "XXXXX", 5), 0);
	kv_store_release(st, k, O_WRONLY);
	s2 = getattr(st, k).ka_seq;
	assert_true(s2 > s1);
	check_guard(iov, n, bytes, 200000, 1);
	assert_int_equal(used(st), 2 * PAGE_UP(200000));
	kv_read_done(&g);
	assert_int_equal(used(st), PAGE_UP(200000));
	buf = read_all(st, k, &size);
	assert_int_equal(size, 200000);
	for (uint64_t i = 0; i < size; i++)
		assert_int_equal(buf[i], i >= 1000 && i < 1005 ? 'X' : pat(i, 1));
	free(buf);

	/* A whole overwrite while a guard is held. */
	n = kv_store_read(st, k, 0, UINT64_MAX, iov, 64, &bytes, &g);
	open_ok(st, k, O_RDWR);
	write_pat(st, k, 0, 300000, 2);
	kv_store_release(st, k, O_RDWR);
	assert_true(getattr(st, k).ka_seq > s2);
	assert_int_equal(bytes, 200000);
	buf = gather(iov, n, bytes);
	for (uint64_t i = 0; i < bytes; i++)
		assert_int_equal(buf[i], i >= 1000 && i < 1005 ? 'X' : pat(i, 1));
	free(buf);
	kv_read_done(&g);
	check_value(st, k, 300000, 2);
	assert_int_equal(used(st), PAGE_UP(300000));

	/* A truncate while a guard is held. */
	n = kv_store_read(st, k, 0, UINT64_MAX, iov, 64, &bytes, &g);
	assert_int_equal(kv_store_setattr(st, k, &sa, &a), 0);
	assert_int_equal(a.ka_size, 10);
	check_guard(iov, n, bytes, 300000, 2);
	kv_read_done(&g);
	check_value(st, k, 10, 2);
	assert_int_equal(used(st), 4096);

	/* Reads at and past the end. */
	bytes = 1;
	assert_int_equal(kv_store_read(st, k, 10, 5, iov, 64, &bytes, &g), 0);
	assert_int_equal(bytes, 0);
	kv_read_done(&g);
	assert_int_equal(kv_store_read(st, k, 3, 100, iov, 64, &bytes, &g), 1);
	assert_int_equal(bytes, 7);
	kv_read_done(&g);

	assert_int_equal(kv_store_unlink(st, root, "k"), 0);
	kv_store_forget(st, k, 1);
	assert_int_equal(used(st), 0);
	kv_store_destroy(st);
}

static void test_open_unlink(void **state)
{
	struct kv_store *st = store_new(64 * MIB);
	struct kv_inode *root = kv_store_root(st), *f, *g, *h;
	struct kv_attr a;

	(void)state;
	/* Created open, unlinked while open: the handle and the lookup keep it. */
	assert_int_equal(kv_store_create_open(st, root, "f", 0644, &cred, &f, &a), 0);
	write_pat(st, f, 0, MIB, 1);
	assert_int_equal(kv_store_unlink(st, root, "f"), 0);
	assert_int_equal(lookup_err(st, root, "f"), -ENOENT);
	assert_int_equal(usage(st).ku_keys, 0);
	check_value(st, f, MIB, 1);
	write_pat(st, f, MIB, 10, 1);
	check_value(st, f, MIB + 10, 1);
	assert_true(used(st) >= PAGE_UP(MIB + 10));
	kv_store_release(st, f, O_WRONLY);
	a = getattr(st, f);
	assert_true(a.ka_seq > 0);
	assert_int_equal(a.ka_nlink, 0);
	assert_int_equal(used(st), PAGE_UP(MIB + 10));
	assert_int_equal(usage(st).ku_inodes, 2);
	check_value(st, f, MIB + 10, 1);
	kv_store_forget(st, f, 1);
	assert_int_equal(used(st), 0);
	assert_int_equal(usage(st).ku_inodes, 1);
	assert_int_equal(usage(st).ku_bytes, 0);

	/* Several lookups: freed at the forget that drops the last. */
	g = mknod_ok(st, root, "g");
	assert_ptr_equal(lookup_ok(st, root, "g"), g);
	assert_ptr_equal(lookup_ok(st, root, "g"), g);
	open_ok(st, g, O_RDWR);
	write_pat(st, g, 0, 64 * KIB, 2);
	assert_int_equal(kv_store_unlink(st, root, "g"), 0);
	kv_store_release(st, g, O_RDWR);
	assert_int_equal(used(st), 64 * KIB);
	kv_store_forget(st, g, 2);
	assert_int_equal(used(st), 64 * KIB);
	check_value(st, g, 64 * KIB, 2);
	kv_store_forget(st, g, 1);
	assert_int_equal(used(st), 0);
	assert_int_equal(usage(st).ku_inodes, 1);

	/* No lookup left, only a handle: freed at the release. */
	h = make_file(st, root, "h", 5000, 3);
	kv_store_forget(st, h, 1);
	h = lookup_ok(st, root, "h");
	open_ok(st, h, O_RDONLY);
	kv_store_forget(st, h, 1);
	assert_int_equal(kv_store_unlink(st, root, "h"), 0);
	assert_int_equal(used(st), 8192);
	check_value(st, h, 5000, 3);
	kv_store_release(st, h, O_RDONLY);
	assert_int_equal(used(st), 0);
	assert_int_equal(usage(st).ku_inodes, 1);
	kv_store_destroy(st);
}

static void test_setattr(void **state)
{
	struct kv_store *st = store_new(64 * MIB);
	struct kv_inode *root = kv_store_root(st), *f, *d;
	struct timespec t1 = {.tv_sec = 1000000000, .tv_nsec = 123},
			t2 = {.tv_sec = 1100000000, .tv_nsec = 456}, before;
	struct kv_setattr sa = {0};
	uint64_t s1, s2, s3;
	struct kv_attr a;

	(void)state;
	f = make_file(st, root, "f", 10000, 1);
	d = mkdir_ok(st, root, "d");
	s1 = getattr(st, f).ka_seq;

	/* Truncating a sealed value makes a new sealed version. */
	sa.ksa_valid = KV_SET_SIZE;
	sa.ksa_size = 100;
	assert_int_equal(kv_store_setattr(st, f, &sa, &a), 0);
	assert_int_equal(a.ka_size, 100);
	s2 = a.ka_seq;
	assert_true(s2 > s1);
	assert_int_equal(a.ka_alloc, 4096);
	assert_int_equal(used(st), 4096);
	check_value(st, f, 100, 1);
	assert_int_equal(usage(st).ku_bytes, 100);

	sa.ksa_size = 50000;
	assert_int_equal(kv_store_setattr(st, f, &sa, &a), 0);
	assert_int_equal(a.ka_size, 50000);
	s3 = a.ka_seq;
	assert_true(s3 > s2);
	check_value_z(st, f, 50000, 1, 100, UINT64_MAX);
	assert_int_equal(usage(st).ku_bytes, 50000);
	assert_int_equal(used(st), PAGE_UP(50000));

	/* While open, the new version waits for the release to be sealed. */
	open_ok(st, f, O_RDWR);
	sa.ksa_size = 10;
	assert_int_equal(kv_store_setattr(st, f, &sa, &a), 0);
	assert_int_equal(a.ka_size, 10);
	assert_int_equal(a.ka_seq, 0);
	kv_store_release(st, f, O_RDWR);
	assert_true(getattr(st, f).ka_seq > s3);
	check_value(st, f, 10, 1);

	sa.ksa_size = 0;
	assert_int_equal(kv_store_setattr(st, d, &sa, &a), -EISDIR);

	/* Mode keeps the type bits; owner and times as given. */
	sa.ksa_valid = KV_SET_MODE | KV_SET_UID | KV_SET_GID;
	sa.ksa_mode = S_IFDIR | 0600;
	sa.ksa_uid = 42;
	sa.ksa_gid = 43;
	assert_int_equal(kv_store_setattr(st, f, &sa, &a), 0);
	assert_int_equal(a.ka_mode, S_IFREG | 0600);
	assert_int_equal(a.ka_uid, 42);
	assert_int_equal(a.ka_gid, 43);
	assert_int_equal(a.ka_size, 10);
	sa.ksa_mode = S_IFREG | 01777;
	assert_int_equal(kv_store_setattr(st, d, &sa, &a), 0);
	assert_int_equal(a.ka_mode, S_IFDIR | 01777);
	assert_true(kv_inode_is_dir(d));

	sa.ksa_valid = KV_SET_ATIME | KV_SET_MTIME;
	sa.ksa_atime = t1;
	sa.ksa_mtime = t2;
	assert_int_equal(kv_store_setattr(st, f, &sa, &a), 0);
	assert_int_equal(a.ka_atime.tv_sec, t1.tv_sec);
	assert_int_equal(a.ka_atime.tv_nsec, t1.tv_nsec);
	assert_int_equal(a.ka_mtime.tv_sec, t2.tv_sec);
	assert_int_equal(a.ka_mtime.tv_nsec, t2.tv_nsec);
	a = getattr(st, f);
	assert_int_equal(a.ka_atime.tv_sec, t1.tv_sec);
	assert_int_equal(a.ka_mtime.tv_sec, t2.tv_sec);

	clock_gettime(CLOCK_REALTIME, &before);
	sa.ksa_valid = KV_SET_ATIME | KV_SET_ATIME_NOW | KV_SET_MTIME | KV_SET_MTIME_NOW;
	assert_int_equal(kv_store_setattr(st, f, &sa, &a), 0);
	assert_true(a.ka_atime.tv_sec >= before.tv_sec);
	assert_true(a.ka_mtime.tv_sec >= before.tv_sec);
	assert_true(a.ka_atime.tv_sec < before.tv_sec + 60);

	kv_store_forget(st, f, 1);
	kv_store_forget(st, d, 1);
	kv_store_destroy(st);
}

static void test_open_trunc(void **state)
{
	struct kv_store *st = store_new(64 * MIB);
	struct kv_inode *root = kv_store_root(st), *f, *d;
	uint64_t s1;
	struct kv_attr a;

	(void)state;
	f = make_file(st, root, "f", 5000, 1);
	d = mkdir_ok(st, root, "d");
	s1 = getattr(st, f).ka_seq;

	open_ok(st, f, O_WRONLY | O_TRUNC);
	assert_int_equal(getattr(st, f).ka_size, 0);
	assert_int_equal(usage(st).ku_bytes, 0);
	assert_int_equal(used(st), 0);
	kv_store_release(st, f, O_WRONLY | O_TRUNC);
	a = getattr(st, f);
	assert_int_equal(a.ka_size, 0);
	assert_int_equal(a.ka_alloc, 0);
	assert_true(a.ka_seq > s1);
	check_value(st, f, 0, 1);

	write_pat(st, f, 0, 3000, 2);
	open_ok(st, f, O_RDWR | O_TRUNC);
	write_pat(st, f, 0, 3, 3);
	kv_store_release(st, f, O_RDWR | O_TRUNC);
	check_value(st, f, 3, 3);

	/* O_TRUNC empties whatever the access mode. */
	s1 = getattr(st, f).ka_seq;
	open_ok(st, f, O_RDONLY | O_TRUNC);
	assert_int_equal(getattr(st, f).ka_size, 0);
	kv_store_release(st, f, O_RDONLY | O_TRUNC);
	assert_true(getattr(st, f).ka_seq > s1);
	check_value(st, f, 0, 3);

	assert_int_equal(kv_store_open(st, d, O_RDONLY), -EISDIR);
	assert_int_equal(usage(st).ku_open, 0);
	kv_store_forget(st, f, 1);
	kv_store_forget(st, d, 1);
	kv_store_destroy(st);
}

static void test_enospc(void **state)
{
	struct kv_store *st = store_new(4 * MIB);
	struct kv_inode *root = kv_store_root(st), *a, *b;
	uint64_t size = 0, sa, pool_size = kv_pool_size(kv_store_pool(st));
	uint8_t *chunk = pat_buf(0, 64 * KIB, 5);
	struct kv_attr at;
	int rc;

	(void)state;
	assert_int_equal(kv_store_create_open(st, root, "a", 0644, &cred, &a, &at), 0);
	while ((rc = kv_store_write(st, a, size, chunk, 64 * KIB)) == 0)
		size += 64 * KIB;
	assert_int_equal(rc, -ENOSPC);
	assert_true(size > 0);
	assert_true(size <= pool_size);
	assert_int_equal(getattr(st, a).ka_size, size);
	kv_store_release(st, a, O_WRONLY);
	sa = getattr(st, a).ka_seq;
	assert_int_equal(used(st), size);
	assert_true(pool_size - size < 64 * KIB);

	/* Nothing written anywhere. */
	assert_int_equal(kv_store_create_open(st, root, "b", 0644, &cred, &b, &at), 0);
	assert_int_equal(kv_store_write(st, b, 0, chunk, 64 * KIB), -ENOSPC);
	assert_int_equal(getattr(st, b).ka_size, 0);

	/* A sealed value cannot be copied for writing either: it stays as it was. */
	open_ok(st, a, O_RDWR);
	assert_int_equal(kv_store_write(st, a, 0, "x", 1), -ENOSPC);
	at = getattr(st, a);
	assert_int_equal(at.ka_seq, sa);
	assert_int_equal(at.ka_size, size);
	kv_store_release(st, a, O_RDWR);
	assert_int_equal(getattr(st, a).ka_seq, sa);
	for (uint64_t off = 0; off < size; off += 64 * KIB) {
		uint8_t buf[64];
		struct kv_read_guard g;
		struct iovec iov[1];
		uint64_t bytes;

		assert_int_equal(kv_store_read(st, a, off, 64, iov, 1, &bytes, &g), 1);
		assert_int_equal(bytes, 64);
		memcpy(buf, iov[0].iov_base, 64);
		kv_read_done(&g);
		assert_memory_equal(buf, chunk, 64);
	}

	/* Unlinking the big value frees its memory: now writes succeed. */
	assert_int_equal(kv_store_unlink(st, root, "a"), 0);
	kv_store_forget(st, a, 1);
	assert_int_equal(used(st), 0);
	for (uint64_t off = 0; off < MIB; off += 64 * KIB)
		assert_int_equal(kv_store_write(st, b, off, chunk, 64 * KIB), 0);
	kv_store_release(st, b, O_WRONLY);
	assert_int_equal(getattr(st, b).ka_size, MIB);
	assert_int_equal(used(st), MIB);

	kv_store_forget(st, b, 1);
	free(chunk);
	kv_store_destroy(st);
}

/*
 * A truncate that fails for want of memory leaves the file as it was: same
 * size, same bytes, and still the sealed version it was (a closed file's
 * value is sealed).
 */
static void test_enospc_setattr_keeps_sealed(void **state)
{
	struct kv_store *st = store_new(4 * MIB);
	struct kv_pool *pool = kv_store_pool(st);
	struct kv_inode *root = kv_store_root(st), *f;
	struct kv_setattr sa = {.ksa_valid = KV_SET_SIZE, .ksa_size = MIB};
	struct kv_attr a, before;
	void **pages;
	size_t n;
	int rc;

	(void)state;
	f = make_file(st, root, "f", 4096, 1);
	before = getattr(st, f);
	n = grab_all_pages(pool, &pages);
	kv_pool_free(pool, pages[--n], KV_PAGE_SIZE); /* room for one page, not a MiB */

	rc = kv_store_setattr(st, f, &sa, &a);
	a = getattr(st, f);
	check_value(st, f, 4096, 1);
	free_pages(pool, pages, n);
	kv_store_forget(st, f, 1);
	kv_store_destroy(st);

	assert_int_equal(rc, -ENOSPC);
	assert_int_equal(a.ka_size, 4096);
	assert_int_equal(a.ka_alloc, 4096);
	assert_int_equal(a.ka_seq, before.ka_seq);
}

/* The same for fallocate. */
static void test_enospc_fallocate_keeps_sealed(void **state)
{
	struct kv_store *st = store_new(4 * MIB);
	struct kv_pool *pool = kv_store_pool(st);
	struct kv_inode *root = kv_store_root(st), *f;
	struct kv_attr a, before;
	void **pages;
	size_t n;
	int rc;

	(void)state;
	f = make_file(st, root, "f", 4096, 1);
	before = getattr(st, f);
	n = grab_all_pages(pool, &pages);
	kv_pool_free(pool, pages[--n], KV_PAGE_SIZE);

	rc = kv_store_fallocate(st, f, 0, 0, MIB);
	a = getattr(st, f);
	check_value(st, f, 4096, 1);
	free_pages(pool, pages, n);
	kv_store_forget(st, f, 1);
	kv_store_destroy(st);

	assert_int_equal(rc, -ENOSPC);
	assert_int_equal(a.ka_size, 4096);
	assert_int_equal(a.ka_alloc, 4096);
	assert_int_equal(a.ka_seq, before.ka_seq);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_seal_on_release),
	    cmocka_unit_test(test_cow_read_guard),
	    cmocka_unit_test(test_cow_per_extent_guard),
	    cmocka_unit_test(test_open_unlink),
	    cmocka_unit_test(test_setattr),
	    cmocka_unit_test(test_open_trunc),
	    cmocka_unit_test(test_enospc),
	    cmocka_unit_test(test_enospc_setattr_keeps_sealed),
	    cmocka_unit_test(test_enospc_fallocate_keeps_sealed),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
