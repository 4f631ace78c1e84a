/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/store_fixture.h — what the tests of the store
 * (tests/unit/test_store_*.c, core/store.h) share: a store on DRAM alone
 * (store_new, no data directory), the caller's credentials, and helpers
 * that make directories and files, look names up, write and read pattern
 * values and check them, and take the pool's pages.
 *
 * Reference counting as the header defines it: kv_store_lookup, mkdir,
 * mknod and create_open each hand the caller one reference, which
 * kv_store_forget(…, n) drops; a name holds one; an open handle holds one.
 * Every test drops what it took, so kv_pool_used and ku_inodes tell exactly
 * when an inode and its value are freed, and ASan's leak checker catches the
 * rest.
 *
 * The helpers are static inline: each test program includes this header
 * once and uses some of them.
 */
#ifndef KVFS_TESTS_STORE_FIXTURE_H
#define KVFS_TESTS_STORE_FIXTURE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/store.h"

#define KIB	   (1024u)
#define MIB	   (1024u * 1024u)
#define PAGE_UP(x) (((uint64_t)(x) + KV_PAGE_SIZE - 1) / KV_PAGE_SIZE * KV_PAGE_SIZE)

static struct kv_cred cred;

/* ---- helpers ---- */

static inline struct kv_store *store_new(uint64_t mem)
{
	struct kv_config cfg;
	struct kv_store *st = NULL;
	struct kv_store_usage u;

	kv_config_defaults(&cfg);
	cfg.kc_mem_size = mem;
	cfg.kc_numa_node = -1;
	assert_int_equal(kv_store_create(&st, &cfg, -1), 0);
	assert_non_null(st);
	assert_int_equal(kv_pool_used(kv_store_pool(st)), 0);
	kv_store_usage(st, &u);
	assert_int_equal(u.ku_keys, 0);
	assert_int_equal(u.ku_dirs, 1);
	assert_int_equal(u.ku_inodes, 1);
	cred.kc_uid = getuid();
	cred.kc_gid = getgid();
	return st;
}

static inline uint64_t used(struct kv_store *st)
{
	return kv_pool_used(kv_store_pool(st));
}

static inline struct kv_store_usage usage(struct kv_store *st)
{
	struct kv_store_usage u;

	kv_store_usage(st, &u);
	return u;
}

static inline struct kv_attr getattr(struct kv_store *st, struct kv_inode *ino)
{
	struct kv_attr a;

	memset(&a, 0xff, sizeof(a));
	assert_int_equal(kv_store_getattr(st, ino, &a), 0);
	return a;
}

static inline struct kv_inode *mkdir_ok(struct kv_store *st, struct kv_inode *dir, const char *name)
{
	struct kv_inode *ino = NULL;
	struct kv_attr a;

	assert_int_equal(kv_store_mkdir(st, dir, name, 0755, &cred, &ino, &a), 0);
	assert_non_null(ino);
	assert_true(S_ISDIR(a.ka_mode));
	return ino;
}

static inline struct kv_inode *mknod_ok(struct kv_store *st, struct kv_inode *dir, const char *name)
{
	struct kv_inode *ino = NULL;
	struct kv_attr a;

	assert_int_equal(kv_store_mknod(st, dir, name, 0644, &cred, &ino, &a), 0);
	assert_non_null(ino);
	assert_true(S_ISREG(a.ka_mode));
	return ino;
}

static inline struct kv_inode *lookup_ok(struct kv_store *st, struct kv_inode *dir,
					 const char *name)
{
	struct kv_inode *ino = NULL;
	struct kv_attr a;

	assert_int_equal(kv_store_lookup(st, dir, name, &ino, &a), 0);
	assert_non_null(ino);
	assert_int_equal(a.ka_ino, kv_inode_ino(ino));
	return ino;
}

static inline int lookup_err(struct kv_store *st, struct kv_inode *dir, const char *name)
{
	struct kv_inode *ino = NULL;
	struct kv_attr a;
	int rc = kv_store_lookup(st, dir, name, &ino, &a);

	assert_true(rc < 0);
	assert_null(ino);
	return rc;
}

static inline uint8_t pat(uint64_t off, unsigned seed)
{
	uint64_t x = (off + 1) * 0x9E3779B97F4A7C15ull + seed * 0xBF58476D1CE4E5B9ull;

	return (uint8_t)(x >> 56);
}

static inline uint8_t *pat_buf(uint64_t off, uint64_t len, unsigned seed)
{
	uint8_t *buf = malloc(len ? len : 1);

	assert_non_null(buf);
	for (uint64_t i = 0; i < len; i++)
		buf[i] = pat(off + i, seed);
	return buf;
}

static inline void write_pat(struct kv_store *st, struct kv_inode *ino, uint64_t off, uint64_t len,
			     unsigned seed)
{
	uint8_t *buf = pat_buf(off, len, seed);

	assert_int_equal(kv_store_write(st, ino, off, buf, len), 0);
	free(buf);
}

/* A sealed file of len pattern bytes; the caller holds create's reference. */
static inline struct kv_inode *make_file(struct kv_store *st, struct kv_inode *dir,
					 const char *name, uint64_t len, unsigned seed)
{
	struct kv_inode *ino = NULL;
	struct kv_attr a;

	assert_int_equal(kv_store_create_open(st, dir, name, 0644, &cred, &ino, &a), 0);
	assert_int_equal(a.ka_size, 0);
	assert_int_equal(a.ka_seq, 0);
	if (len)
		write_pat(st, ino, 0, len, seed);
	kv_store_release(st, ino, O_WRONLY);
	a = getattr(st, ino);
	assert_int_equal(a.ka_size, len);
	assert_true(a.ka_seq > 0);
	return ino;
}

/* Reads the whole current value (all of it, through several kv_store_read calls). */
static inline uint8_t *read_all(struct kv_store *st, struct kv_inode *ino, uint64_t *size)
{
	uint64_t cap = 4096, off = 0;
	uint8_t *buf = malloc(cap);

	assert_non_null(buf);
	for (;;) {
		struct kv_read_guard g;
		struct iovec iov[8];
		uint64_t bytes = 0;
		int n = kv_store_read(st, ino, off, 1 * MIB, iov, 8, &bytes, &g);

		assert_true(n >= 0 && n <= 8);
		if (off + bytes > cap) {
			cap = (off + bytes) * 2;
			buf = realloc(buf, cap);
			assert_non_null(buf);
		}
		for (int i = 0; i < n; i++) {
			memcpy(buf + off, iov[i].iov_base, iov[i].iov_len);
			off += iov[i].iov_len;
		}
		kv_read_done(&g);
		if (bytes == 0)
			break;
	}
	*size = off;
	return buf;
}

/*
 * Checks the value: `len` bytes, the pattern of `seed` except [zoff, zoff +
 * zlen), which must be zeros.
 */
static inline void check_value_z(struct kv_store *st, struct kv_inode *ino, uint64_t len,
				 unsigned seed, uint64_t zoff, uint64_t zlen)
{
	uint64_t size;
	uint8_t *buf = read_all(st, ino, &size);

	assert_int_equal(size, len);
	assert_int_equal(getattr(st, ino).ka_size, len);
	for (uint64_t i = 0; i < len; i++) {
		uint8_t want = i >= zoff && i - zoff < zlen ? 0 : pat(i, seed);

		if (buf[i] != want)
			fail_msg("byte %llu: %#x, want %#x", (unsigned long long)i, buf[i], want);
	}
	free(buf);
}

static inline void check_value(struct kv_store *st, struct kv_inode *ino, uint64_t len,
			       unsigned seed)
{
	check_value_z(st, ino, len, seed, 0, 0);
}

static inline void open_ok(struct kv_store *st, struct kv_inode *ino, int flags)
{
	assert_int_equal(kv_store_open(st, ino, flags), 0);
}

#endif
