/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_store.c — the store: namespace and object lifecycle
 * (core/store.h).
 *
 * Reference counting as the header defines it: kv_store_lookup, mkdir,
 * mknod and create_open each hand the caller one reference, which
 * kv_store_forget(…, n) drops; a name holds one; an open handle holds one.
 * Every test drops what it took, so kv_pool_used and ku_inodes tell exactly
 * when an inode and its value are freed, and ASan's leak checker catches the
 * rest.
 *
 * The threaded tests (label "concurrency") run under TSan too. Threads
 * never call cmocka's assertions (they longjmp); they count failures in
 * t_failures, which the main thread checks.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/store.h"

#define KIB	   (1024u)
#define MIB	   (1024u * 1024u)
#define PAGE_UP(x) (((uint64_t)(x) + KV_PAGE_SIZE - 1) / KV_PAGE_SIZE * KV_PAGE_SIZE)

static struct kv_cred cred;

/* ---- helpers ---- */

static struct kv_store *store_new(uint64_t mem)
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

static uint64_t used(struct kv_store *st)
{
	return kv_pool_used(kv_store_pool(st));
}

static struct kv_store_usage usage(struct kv_store *st)
{
	struct kv_store_usage u;

	kv_store_usage(st, &u);
	return u;
}

static struct kv_attr getattr(struct kv_store *st, struct kv_inode *ino)
{
	struct kv_attr a;

	memset(&a, 0xff, sizeof(a));
	assert_int_equal(kv_store_getattr(st, ino, &a), 0);
	return a;
}

static struct kv_inode *mkdir_ok(struct kv_store *st, struct kv_inode *dir, const char *name)
{
	struct kv_inode *ino = NULL;
	struct kv_attr a;

	assert_int_equal(kv_store_mkdir(st, dir, name, 0755, &cred, &ino, &a), 0);
	assert_non_null(ino);
	assert_true(S_ISDIR(a.ka_mode));
	return ino;
}

static struct kv_inode *mknod_ok(struct kv_store *st, struct kv_inode *dir, const char *name)
{
	struct kv_inode *ino = NULL;
	struct kv_attr a;

	assert_int_equal(kv_store_mknod(st, dir, name, 0644, &cred, &ino, &a), 0);
	assert_non_null(ino);
	assert_true(S_ISREG(a.ka_mode));
	return ino;
}

static struct kv_inode *lookup_ok(struct kv_store *st, struct kv_inode *dir, const char *name)
{
	struct kv_inode *ino = NULL;
	struct kv_attr a;

	assert_int_equal(kv_store_lookup(st, dir, name, &ino, &a), 0);
	assert_non_null(ino);
	assert_int_equal(a.ka_ino, kv_inode_ino(ino));
	return ino;
}

static int lookup_err(struct kv_store *st, struct kv_inode *dir, const char *name)
{
	struct kv_inode *ino = NULL;
	struct kv_attr a;
	int rc = kv_store_lookup(st, dir, name, &ino, &a);

	assert_true(rc < 0);
	assert_null(ino);
	return rc;
}

/* Looks name up, checks it is `want`, and drops the lookup again. */
static void check_name_is(struct kv_store *st, struct kv_inode *dir, const char *name,
			  struct kv_inode *want)
{
	struct kv_inode *ino = lookup_ok(st, dir, name);

	assert_ptr_equal(ino, want);
	kv_store_forget(st, ino, 1);
}

static uint8_t pat(uint64_t off, unsigned seed)
{
	uint64_t x = (off + 1) * 0x9E3779B97F4A7C15ull + seed * 0xBF58476D1CE4E5B9ull;

	return (uint8_t)(x >> 56);
}

static uint8_t *pat_buf(uint64_t off, uint64_t len, unsigned seed)
{
	uint8_t *buf = malloc(len ? len : 1);

	assert_non_null(buf);
	for (uint64_t i = 0; i < len; i++)
		buf[i] = pat(off + i, seed);
	return buf;
}

static void write_pat(struct kv_store *st, struct kv_inode *ino, uint64_t off, uint64_t len,
		      unsigned seed)
{
	uint8_t *buf = pat_buf(off, len, seed);

	assert_int_equal(kv_store_write(st, ino, off, buf, len), 0);
	free(buf);
}

/* A sealed file of len pattern bytes; the caller holds create's reference. */
static struct kv_inode *make_file(struct kv_store *st, struct kv_inode *dir, const char *name,
				  uint64_t len, unsigned seed)
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
static uint8_t *read_all(struct kv_store *st, struct kv_inode *ino, uint64_t *size)
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
static void check_value_z(struct kv_store *st, struct kv_inode *ino, uint64_t len, unsigned seed,
			  uint64_t zoff, uint64_t zlen)
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

static void check_value(struct kv_store *st, struct kv_inode *ino, uint64_t len, unsigned seed)
{
	check_value_z(st, ino, len, seed, 0, 0);
}

static void open_ok(struct kv_store *st, struct kv_inode *ino, int flags)
{
	assert_int_equal(kv_store_open(st, ino, flags), 0);
}

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

/* ---- namespace ---- */

static void test_create_lookup(void **state)
{
	struct kv_store *st = store_new(64 * MIB);
	struct kv_inode *root = kv_store_root(st), *d, *f, *g, *x = NULL;
	struct kv_cred other = {.kc_uid = 1234, .kc_gid = 5678};
	struct kv_store_usage u;
	struct kv_attr a;

	(void)state;
	a = getattr(st, root);
	assert_true(kv_inode_is_dir(root));
	assert_true(S_ISDIR(a.ka_mode));
	assert_int_equal(a.ka_nlink, 2);
	assert_int_equal(a.ka_ino, kv_inode_ino(root));

	/* Type bits in mode are ignored: the call decides. */
	assert_int_equal(kv_store_mkdir(st, root, "d", S_IFREG | 0750, &other, &d, &a), 0);
	assert_int_equal(a.ka_mode, S_IFDIR | 0750);
	assert_int_equal(a.ka_nlink, 2);
	assert_int_equal(a.ka_uid, 1234);
	assert_int_equal(a.ka_gid, 5678);
	assert_int_equal(a.ka_ino, kv_inode_ino(d));
	assert_int_not_equal(a.ka_ino, kv_inode_ino(root));
	assert_true(kv_inode_is_dir(d));
	assert_int_equal(getattr(st, root).ka_nlink, 3);

	/* mknod makes regular files, FIFOs and sockets; no directories, no devices. */
	assert_int_equal(kv_store_mknod(st, d, "f", S_IFDIR | 0640, &other, &f, &a), -EINVAL);
	assert_int_equal(kv_store_mknod(st, d, "f", S_IFCHR | 0640, &other, &f, &a), -EPERM);
	assert_int_equal(kv_store_mknod(st, d, "f", S_IFBLK | 0640, &other, &f, &a), -EPERM);
	assert_int_equal(kv_store_mknod(st, d, "f", S_IFREG | 0640, &other, &f, &a), 0);
	assert_int_equal(a.ka_mode, S_IFREG | 0640);
	assert_int_equal(a.ka_nlink, 1);
	assert_int_equal(a.ka_size, 0);
	assert_int_equal(a.ka_uid, 1234);
	assert_false(kv_inode_is_dir(f));
	assert_int_equal(getattr(st, d).ka_nlink, 2);

	assert_int_equal(kv_store_create_open(st, d, "g", 0600, &cred, &g, &a), 0);
	assert_int_equal(a.ka_mode, S_IFREG | 0600);
	assert_int_equal(a.ka_size, 0);
	assert_int_equal(usage(st).ku_open, 1);
	kv_store_release(st, g, O_WRONLY);
	assert_int_equal(usage(st).ku_open, 0);
	assert_int_not_equal(kv_inode_ino(f), kv_inode_ino(g));
	assert_int_not_equal(kv_inode_ino(f), kv_inode_ino(d));

	/* Lookups find the same inodes and report their attributes. */
	assert_int_equal(kv_store_lookup(st, root, "d", &x, &a), 0);
	assert_ptr_equal(x, d);
	assert_int_equal(a.ka_ino, kv_inode_ino(d));
	assert_int_equal(a.ka_mode, S_IFDIR | 0750);
	assert_int_equal(a.ka_nlink, 2);
	kv_store_forget(st, x, 1);
	check_name_is(st, d, "f", f);
	check_name_is(st, d, "g", g);

	assert_int_equal(lookup_err(st, d, "nope"), -ENOENT);
	assert_int_equal(lookup_err(st, root, "f"), -ENOENT);
	assert_int_equal(lookup_err(st, f, "x"), -ENOTDIR);

	/* A file is no directory to create in. */
	x = NULL;
	assert_int_equal(kv_store_mkdir(st, f, "x", 0755, &cred, &x, &a), -ENOTDIR);
	assert_int_equal(kv_store_mknod(st, f, "x", 0644, &cred, &x, &a), -ENOTDIR);
	assert_int_equal(kv_store_create_open(st, f, "x", 0644, &cred, &x, &a), -ENOTDIR);
	assert_null(x);

	/* Every kind of node collides with every kind of name. */
	assert_int_equal(kv_store_mkdir(st, root, "d", 0755, &cred, &x, &a), -EEXIST);
	assert_int_equal(kv_store_mknod(st, root, "d", 0644, &cred, &x, &a), -EEXIST);
	assert_int_equal(kv_store_create_open(st, root, "d", 0644, &cred, &x, &a), -EEXIST);
	assert_int_equal(kv_store_mkdir(st, d, "f", 0755, &cred, &x, &a), -EEXIST);
	assert_int_equal(kv_store_mknod(st, d, "f", 0644, &cred, &x, &a), -EEXIST);
	assert_int_equal(kv_store_create_open(st, d, "g", 0644, &cred, &x, &a), -EEXIST);
	assert_null(x);

	/* Failed calls leave no trace. */
	u = usage(st);
	assert_int_equal(u.ku_keys, 2);
	assert_int_equal(u.ku_dirs, 2);
	assert_int_equal(u.ku_open, 0);
	assert_int_equal(u.ku_inodes, 4);
	assert_int_equal(getattr(st, root).ka_nlink, 3);
	assert_int_equal(getattr(st, d).ka_nlink, 2);

	kv_store_forget(st, d, 1);
	kv_store_forget(st, f, 1);
	kv_store_forget(st, g, 1);
	kv_store_destroy(st);
}

static void test_name_rules(void **state)
{
	struct kv_store *st = store_new(64 * MIB);
	struct kv_inode *root = kv_store_root(st), *long_dir, *sub, *k1, *k2, *f, *x = NULL;
	char n255[KV_NAME_MAX + 1], n256[KV_NAME_MAX + 2];
	struct kv_store_usage u;
	struct kv_attr a;

	(void)state;
	memset(n255, 'a', KV_NAME_MAX);
	n255[KV_NAME_MAX] = '\0';
	memset(n256, 'b', KV_NAME_MAX + 1);
	n256[KV_NAME_MAX + 1] = '\0';
	assert_int_equal(strlen(n255), 255);
	assert_int_equal(strlen(n256), 256);

	long_dir = mkdir_ok(st, root, n255);
	check_name_is(st, root, n255, long_dir);
	f = mknod_ok(st, long_dir, n255);
	check_name_is(st, long_dir, n255, f);

	assert_int_equal(kv_store_mkdir(st, root, n256, 0755, &cred, &x, &a), -ENAMETOOLONG);
	assert_int_equal(kv_store_mknod(st, root, n256, 0644, &cred, &x, &a), -ENAMETOOLONG);
	assert_int_equal(kv_store_create_open(st, root, n256, 0644, &cred, &x, &a), -ENAMETOOLONG);
	assert_null(x);
	assert_int_equal(lookup_err(st, root, n256), -ENAMETOOLONG);
	assert_int_equal(kv_store_unlink(st, root, n256), -ENAMETOOLONG);
	assert_int_equal(kv_store_rmdir(st, root, n256), -ENAMETOOLONG);
	assert_int_equal(kv_store_rename(st, long_dir, n255, long_dir, n256, 0), -ENAMETOOLONG);
	assert_int_equal(kv_store_rename(st, root, n256, root, "x", 0), -ENAMETOOLONG);
	check_name_is(st, long_dir, n255, f);

	/* The control directory's name is reserved at the root only. */
	assert_int_equal(kv_store_mkdir(st, root, KV_RESERVED_NAME, 0755, &cred, &x, &a), -EPERM);
	assert_int_equal(kv_store_mknod(st, root, KV_RESERVED_NAME, 0644, &cred, &x, &a), -EPERM);
	assert_int_equal(kv_store_create_open(st, root, KV_RESERVED_NAME, 0644, &cred, &x, &a),
			 -EPERM);
	assert_null(x);
	assert_int_equal(lookup_err(st, root, KV_RESERVED_NAME), -ENOENT);
	assert_int_equal(kv_store_unlink(st, root, KV_RESERVED_NAME), -EPERM);
	assert_int_equal(kv_store_rmdir(st, root, KV_RESERVED_NAME), -EPERM);
	assert_int_equal(kv_store_rename(st, long_dir, n255, root, KV_RESERVED_NAME, 0), -EPERM);
	check_name_is(st, long_dir, n255, f);

	sub = mkdir_ok(st, root, "sub");
	k1 = mkdir_ok(st, sub, KV_RESERVED_NAME);
	check_name_is(st, sub, KV_RESERVED_NAME, k1);
	k2 = mknod_ok(st, long_dir, KV_RESERVED_NAME);
	check_name_is(st, long_dir, KV_RESERVED_NAME, k2);
	assert_int_equal(kv_store_rename(st, long_dir, KV_RESERVED_NAME, long_dir, "plain", 0), 0);
	assert_int_equal(kv_store_rename(st, long_dir, "plain", root, KV_RESERVED_NAME, 0), -EPERM);
	check_name_is(st, long_dir, "plain", k2);

	u = usage(st);
	assert_int_equal(u.ku_keys, 2);
	assert_int_equal(u.ku_dirs, 4);
	assert_int_equal(u.ku_open, 0);
	assert_int_equal(u.ku_inodes, 6);

	kv_store_forget(st, long_dir, 1);
	kv_store_forget(st, sub, 1);
	kv_store_forget(st, k1, 1);
	kv_store_forget(st, k2, 1);
	kv_store_forget(st, f, 1);
	kv_store_destroy(st);
}

static void test_unlink_rmdir(void **state)
{
	struct kv_store *st = store_new(64 * MIB);
	struct kv_inode *root = kv_store_root(st), *d, *f, *sub, *x = NULL;
	struct kv_store_usage u;
	struct kv_attr a;

	(void)state;
	d = mkdir_ok(st, root, "d");
	f = make_file(st, d, "f", 5000, 1);
	sub = mkdir_ok(st, d, "sub");

	assert_int_equal(kv_store_unlink(st, d, "sub"), -EISDIR);
	assert_int_equal(kv_store_rmdir(st, d, "f"), -ENOTDIR);
	assert_int_equal(kv_store_rmdir(st, root, "d"), -ENOTEMPTY);
	assert_int_equal(kv_store_unlink(st, root, "nope"), -ENOENT);
	assert_int_equal(kv_store_rmdir(st, root, "nope"), -ENOENT);
	check_name_is(st, d, "f", f);
	check_name_is(st, d, "sub", sub);
	check_name_is(st, root, "d", d);

	assert_int_equal(kv_store_unlink(st, d, "f"), 0);
	assert_int_equal(lookup_err(st, d, "f"), -ENOENT);
	assert_int_equal(kv_store_unlink(st, d, "f"), -ENOENT);
	a = getattr(st, f);
	assert_int_equal(a.ka_nlink, 0);
	check_value(st, f, 5000, 1);
	assert_int_equal(kv_store_rmdir(st, root, "d"), -ENOTEMPTY);

	assert_int_equal(kv_store_rmdir(st, d, "sub"), 0);
	assert_int_equal(getattr(st, sub).ka_nlink, 0);
	assert_int_equal(getattr(st, d).ka_nlink, 2);
	assert_int_equal(getattr(st, root).ka_nlink, 3);
	assert_int_equal(kv_store_rmdir(st, root, "d"), 0);
	assert_int_equal(getattr(st, root).ka_nlink, 2);
	assert_int_equal(lookup_err(st, root, "d"), -ENOENT);

	/* Nothing new can be made in a removed directory. */
	assert_int_equal(kv_store_mkdir(st, d, "late", 0755, &cred, &x, &a), -ENOENT);
	assert_int_equal(kv_store_mknod(st, d, "late", 0644, &cred, &x, &a), -ENOENT);
	assert_int_equal(kv_store_create_open(st, d, "late", 0644, &cred, &x, &a), -ENOENT);
	assert_null(x);

	u = usage(st);
	assert_int_equal(u.ku_keys, 0);
	assert_int_equal(u.ku_dirs, 1);
	assert_int_equal(u.ku_open, 0);
	assert_int_equal(u.ku_inodes, 4); /* still referenced */
	kv_store_forget(st, f, 1);
	kv_store_forget(st, sub, 1);
	kv_store_forget(st, d, 1);
	u = usage(st);
	assert_int_equal(u.ku_inodes, 1);
	assert_int_equal(u.ku_bytes, 0);
	assert_int_equal(used(st), 0);
	kv_store_destroy(st);
}

static void test_dir_nlink(void **state)
{
	struct kv_store *st = store_new(64 * MIB);
	struct kv_inode *root = kv_store_root(st), *a, *b, *ax, *ay, *bz, *f;

	(void)state;
	assert_int_equal(getattr(st, root).ka_nlink, 2);
	a = mkdir_ok(st, root, "a");
	b = mkdir_ok(st, root, "b");
	assert_int_equal(getattr(st, root).ka_nlink, 4);
	ax = mkdir_ok(st, a, "x");
	ay = mkdir_ok(st, a, "y");
	f = mknod_ok(st, a, "f");
	assert_int_equal(getattr(st, a).ka_nlink, 4);
	assert_int_equal(getattr(st, b).ka_nlink, 2);
	assert_int_equal(getattr(st, f).ka_nlink, 1);

	/* A subdirectory moving moves a link. Files never count. */
	assert_int_equal(kv_store_rename(st, a, "x", b, "x", 0), 0);
	assert_int_equal(getattr(st, a).ka_nlink, 3);
	assert_int_equal(getattr(st, b).ka_nlink, 3);
	assert_int_equal(kv_store_rename(st, a, "f", b, "f", 0), 0);
	assert_int_equal(getattr(st, a).ka_nlink, 3);
	assert_int_equal(getattr(st, b).ka_nlink, 3);

	/* A directory replacing an empty one in the same parent: one link fewer. */
	bz = mkdir_ok(st, b, "z");
	assert_int_equal(getattr(st, b).ka_nlink, 4);
	assert_int_equal(kv_store_rename(st, b, "x", b, "z", 0), 0);
	assert_int_equal(getattr(st, b).ka_nlink, 3);
	assert_int_equal(getattr(st, bz).ka_nlink, 0);
	check_name_is(st, b, "z", ax);

	assert_int_equal(kv_store_rmdir(st, a, "y"), 0);
	assert_int_equal(getattr(st, a).ka_nlink, 2);
	assert_int_equal(getattr(st, ax).ka_nlink, 2);
	assert_int_equal(getattr(st, root).ka_nlink, 4);

	kv_store_forget(st, a, 1);
	kv_store_forget(st, b, 1);
	kv_store_forget(st, ax, 1);
	kv_store_forget(st, ay, 1);
	kv_store_forget(st, bz, 1);
	kv_store_forget(st, f, 1);
	kv_store_destroy(st);
}

struct want_ent {
	char name[16];
	mode_t type;
	uint64_t ino;
	bool present;
	bool seen;
};

/* The snapshot lists exactly the present entries, each once, with its ino and type. */
static void check_snap(const struct kv_dir_snap *snap, struct want_ent *w, size_t n)
{
	uint32_t present = 0;

	for (size_t j = 0; j < n; j++) {
		w[j].seen = false;
		present += w[j].present;
	}
	assert_int_equal(snap->kds_count, present);
	for (uint32_t i = 0; i < snap->kds_count; i++) {
		const struct kv_dirent *e = &snap->kds_ent[i];
		size_t j;

		for (j = 0; j < n; j++)
			if (strcmp(w[j].name, e->kde_name) == 0)
				break;
		if (j == n)
			fail_msg("unexpected entry '%s'", e->kde_name);
		assert_true(w[j].present);
		assert_false(w[j].seen);
		w[j].seen = true;
		assert_int_equal(e->kde_ino, w[j].ino);
		assert_int_equal(e->kde_type, w[j].type);
	}
}

static void test_readdir(void **state)
{
	struct kv_store *st = store_new(64 * MIB);
	struct kv_inode *root = kv_store_root(st), *d, *e, *f;
	struct want_ent w[66];
	struct kv_dir_snap snap, old;

	(void)state;
	d = mkdir_ok(st, root, "d");
	for (size_t i = 0; i < 66; i++) {
		struct kv_inode *ino;

		if (i < 60) {
			snprintf(w[i].name, sizeof(w[i].name), "f%02zu", i);
			ino = mknod_ok(st, d, w[i].name);
			w[i].type = S_IFREG;
		} else {
			snprintf(w[i].name, sizeof(w[i].name), "s%zu", i);
			ino = mkdir_ok(st, d, w[i].name);
			w[i].type = S_IFDIR;
		}
		w[i].ino = kv_inode_ino(ino);
		w[i].present = true;
		kv_store_forget(st, ino, 1);
	}
	assert_int_equal(kv_store_readdir(st, d, &snap), 0);
	check_snap(&snap, w, 66);
	kv_dir_snap_free(&snap);
	assert_int_equal(snap.kds_count, 0);
	assert_null(snap.kds_ent);

	/* Remove a third; the snapshot taken before is unaffected. */
	assert_int_equal(kv_store_readdir(st, d, &old), 0);
	for (size_t i = 0; i < 66; i += 3) {
		if (w[i].type == S_IFDIR)
			assert_int_equal(kv_store_rmdir(st, d, w[i].name), 0);
		else
			assert_int_equal(kv_store_unlink(st, d, w[i].name), 0);
		w[i].present = false;
	}
	assert_int_equal(kv_store_rename(st, d, "f01", d, "renamed", 0), 0);
	strcpy(w[1].name, "renamed");
	assert_int_equal(kv_store_readdir(st, d, &snap), 0);
	check_snap(&snap, w, 66);
	kv_dir_snap_free(&snap);
	assert_int_equal(old.kds_count, 66);
	for (uint32_t i = 0; i < old.kds_count; i++)
		assert_true(old.kds_ent[i].kde_name[0] == 'f' || old.kds_ent[i].kde_name[0] == 's');
	kv_dir_snap_free(&old);

	/* Empty directories, the root, and a file. */
	e = mkdir_ok(st, root, "empty");
	assert_int_equal(kv_store_readdir(st, e, &snap), 0);
	assert_int_equal(snap.kds_count, 0);
	kv_dir_snap_free(&snap);
	assert_int_equal(kv_store_readdir(st, root, &snap), 0);
	assert_int_equal(snap.kds_count, 2);
	kv_dir_snap_free(&snap);
	f = lookup_ok(st, d, "f02");
	assert_int_equal(kv_store_readdir(st, f, &snap), -ENOTDIR);
	assert_int_equal(snap.kds_count, 0);
	kv_dir_snap_free(&snap);

	kv_store_forget(st, f, 1);
	kv_store_forget(st, e, 1);
	kv_store_forget(st, d, 1);
	kv_store_destroy(st);
}

/* ---- rename ---- */

static void test_rename_move(void **state)
{
	struct kv_store *st = store_new(64 * MIB);
	struct kv_inode *root = kv_store_root(st), *a, *b, *f;
	struct kv_dir_snap snap;

	(void)state;
	a = mkdir_ok(st, root, "a");
	b = mkdir_ok(st, root, "b");
	f = make_file(st, a, "f", 5000, 1);

	assert_int_equal(kv_store_rename(st, a, "f", a, "g", 0), 0);
	assert_int_equal(lookup_err(st, a, "f"), -ENOENT);
	check_name_is(st, a, "g", f);
	check_value(st, f, 5000, 1);

	assert_int_equal(kv_store_rename(st, a, "g", b, "h", 0), 0);
	assert_int_equal(lookup_err(st, a, "g"), -ENOENT);
	check_name_is(st, b, "h", f);
	assert_int_equal(kv_store_readdir(st, a, &snap), 0);
	assert_int_equal(snap.kds_count, 0);
	kv_dir_snap_free(&snap);
	assert_int_equal(kv_store_readdir(st, b, &snap), 0);
	assert_int_equal(snap.kds_count, 1);
	assert_string_equal(snap.kds_ent[0].kde_name, "h");
	kv_dir_snap_free(&snap);

	/* Onto itself: nothing happens. */
	assert_int_equal(kv_store_rename(st, b, "h", b, "h", 0), 0);
	check_name_is(st, b, "h", f);

	assert_int_equal(kv_store_rename(st, b, "nope", b, "x", 0), -ENOENT);
	assert_int_equal(kv_store_rename(st, b, "nope", b, "x", RENAME_NOREPLACE), -ENOENT);
	assert_int_equal(kv_store_rename(st, b, "h", b, "x", 1u << 2 /* RENAME_WHITEOUT */),
			 -EINVAL);
	check_name_is(st, b, "h", f);
	assert_int_equal(lookup_err(st, b, "x"), -ENOENT);

	assert_int_equal(usage(st).ku_keys, 1);
	assert_int_equal(usage(st).ku_dirs, 3);
	check_value(st, f, 5000, 1);
	kv_store_forget(st, a, 1);
	kv_store_forget(st, b, 1);
	kv_store_forget(st, f, 1);
	kv_store_destroy(st);
}

static void test_rename_replace_frees_victim(void **state)
{
	struct kv_store *st = store_new(64 * MIB);
	struct kv_inode *root = kv_store_root(st), *d, *src, *victim, *v2;
	uint64_t before;

	(void)state;
	d = mkdir_ok(st, root, "d");
	src = make_file(st, d, "src", 100000, 1);
	victim = make_file(st, d, "victim", 3 * MIB, 2);
	assert_int_equal(getattr(st, victim).ka_alloc, 3 * MIB);
	before = used(st);
	assert_int_equal(before, PAGE_UP(100000) + 3 * MIB);

	assert_int_equal(kv_store_rename(st, d, "src", d, "victim", 0), 0);
	assert_int_equal(lookup_err(st, d, "src"), -ENOENT);
	check_name_is(st, d, "victim", src);
	check_value(st, src, 100000, 1);
	assert_int_equal(usage(st).ku_keys, 1);

	/* Our lookup still holds the victim: readable, no name, memory kept. */
	assert_int_equal(getattr(st, victim).ka_nlink, 0);
	check_value(st, victim, 3 * MIB, 2);
	assert_int_equal(used(st), before);
	assert_int_equal(usage(st).ku_inodes, 4);
	kv_store_forget(st, victim, 1);
	assert_int_equal(used(st), before - 3 * MIB);
	assert_int_equal(usage(st).ku_inodes, 3);
	assert_int_equal(usage(st).ku_bytes, 100000);

	/* A victim held only by an open handle goes at its release. */
	v2 = make_file(st, d, "v2", MIB, 3);
	open_ok(st, v2, O_RDONLY);
	kv_store_forget(st, v2, 1);
	before = used(st);
	assert_int_equal(kv_store_rename(st, d, "victim", d, "v2", 0), 0);
	check_name_is(st, d, "v2", src);
	assert_int_equal(used(st), before);
	check_value(st, v2, MIB, 3);
	kv_store_release(st, v2, O_RDONLY);
	assert_int_equal(used(st), before - MIB);
	assert_int_equal(usage(st).ku_inodes, 3);

	kv_store_forget(st, src, 1);
	kv_store_forget(st, d, 1);
	kv_store_destroy(st);
}

static void test_rename_noreplace_exchange(void **state)
{
	struct kv_store *st = store_new(64 * MIB);
	struct kv_inode *root = kv_store_root(st), *d, *fa, *fb, *d1, *d2, *x, *y, *z, *p, *q, *r;

	(void)state;
	d = mkdir_ok(st, root, "d");
	fa = make_file(st, d, "a", 1000, 1);
	fb = make_file(st, d, "b", 2000, 2);

	assert_int_equal(kv_store_rename(st, d, "a", d, "b", RENAME_NOREPLACE), -EEXIST);
	check_name_is(st, d, "a", fa);
	check_name_is(st, d, "b", fb);
	assert_int_equal(kv_store_rename(st, d, "a", d, "c", RENAME_NOREPLACE), 0);
	check_name_is(st, d, "c", fa);
	assert_int_equal(lookup_err(st, d, "a"), -ENOENT);

	/* Exchange two files: the names swap, the values go with the inodes. */
	assert_int_equal(kv_store_rename(st, d, "c", d, "b", RENAME_EXCHANGE), 0);
	check_name_is(st, d, "c", fb);
	check_name_is(st, d, "b", fa);
	check_value(st, fa, 1000, 1);
	check_value(st, fb, 2000, 2);
	assert_int_equal(usage(st).ku_keys, 2);
	assert_int_equal(kv_store_rename(st, d, "c", d, "zz", RENAME_EXCHANGE), -ENOENT);
	assert_int_equal(kv_store_rename(st, d, "zz", d, "c", RENAME_EXCHANGE), -ENOENT);
	check_name_is(st, d, "c", fb);

	/* Exchange a file and a directory across directories: links follow the directory. */
	d1 = mkdir_ok(st, root, "d1");
	d2 = mkdir_ok(st, root, "d2");
	x = make_file(st, d1, "x", 10, 3);
	y = mkdir_ok(st, d2, "y");
	z = make_file(st, y, "z", 20, 4);
	assert_int_equal(getattr(st, d1).ka_nlink, 2);
	assert_int_equal(getattr(st, d2).ka_nlink, 3);
	assert_int_equal(kv_store_rename(st, d1, "x", d2, "y", RENAME_EXCHANGE), 0);
	check_name_is(st, d1, "x", y);
	check_name_is(st, d2, "y", x);
	check_name_is(st, y, "z", z);
	assert_int_equal(getattr(st, d1).ka_nlink, 3);
	assert_int_equal(getattr(st, d2).ka_nlink, 2);
	assert_int_equal(getattr(st, root).ka_nlink, 5);

	/* Exchange that would put a directory inside itself. */
	p = mkdir_ok(st, root, "p");
	q = mkdir_ok(st, p, "q");
	r = make_file(st, q, "r", 0, 0);
	assert_int_equal(kv_store_rename(st, root, "p", q, "r", RENAME_EXCHANGE), -EINVAL);
	assert_int_equal(kv_store_rename(st, q, "r", root, "p", RENAME_EXCHANGE), -EINVAL);
	check_name_is(st, root, "p", p);
	check_name_is(st, p, "q", q);
	check_name_is(st, q, "r", r);

	kv_store_forget(st, d, 1);
	kv_store_forget(st, fa, 1);
	kv_store_forget(st, fb, 1);
	kv_store_forget(st, d1, 1);
	kv_store_forget(st, d2, 1);
	kv_store_forget(st, x, 1);
	kv_store_forget(st, y, 1);
	kv_store_forget(st, z, 1);
	kv_store_forget(st, p, 1);
	kv_store_forget(st, q, 1);
	kv_store_forget(st, r, 1);
	kv_store_destroy(st);
}

static void test_rename_errors(void **state)
{
	struct kv_store *st = store_new(64 * MIB);
	struct kv_inode *root = kv_store_root(st), *a, *ab, *abc, *ne, *nef, *em, *f;
	struct kv_store_usage u;

	(void)state;
	a = mkdir_ok(st, root, "a");
	ab = mkdir_ok(st, a, "b");
	abc = mkdir_ok(st, ab, "c");
	ne = mkdir_ok(st, root, "ne");
	nef = mknod_ok(st, ne, "file");
	em = mkdir_ok(st, root, "em");
	f = make_file(st, root, "f", 10, 1);

	/* A directory into its own subtree. */
	assert_int_equal(kv_store_rename(st, root, "a", abc, "x", 0), -EINVAL);
	assert_int_equal(kv_store_rename(st, root, "a", a, "x", 0), -EINVAL);
	assert_int_equal(kv_store_rename(st, root, "a", ab, "a", 0), -EINVAL);
	assert_int_equal(kv_store_rename(st, root, "a", abc, "x", RENAME_NOREPLACE), -EINVAL);

	/* Type and emptiness of the target. */
	assert_int_equal(kv_store_rename(st, root, "em", root, "ne", 0), -ENOTEMPTY);
	assert_int_equal(kv_store_rename(st, root, "f", root, "em", 0), -EISDIR);
	assert_int_equal(kv_store_rename(st, root, "em", root, "f", 0), -ENOTDIR);
	assert_int_equal(kv_store_rename(st, ne, "file", root, "a", 0), -EISDIR);
	assert_int_equal(kv_store_rename(st, root, "a", ne, "file", 0), -ENOTDIR);

	check_name_is(st, root, "a", a);
	check_name_is(st, a, "b", ab);
	check_name_is(st, ab, "c", abc);
	check_name_is(st, root, "ne", ne);
	check_name_is(st, ne, "file", nef);
	check_name_is(st, root, "em", em);
	check_name_is(st, root, "f", f);
	u = usage(st);
	assert_int_equal(u.ku_keys, 2);
	assert_int_equal(u.ku_dirs, 6);
	assert_int_equal(getattr(st, root).ka_nlink, 5);

	/* A directory over an empty one replaces it, subtree and all. */
	assert_int_equal(kv_store_rename(st, root, "a", root, "em", 0), 0);
	check_name_is(st, root, "em", a);
	check_name_is(st, a, "b", ab);
	check_name_is(st, ab, "c", abc);
	assert_int_equal(lookup_err(st, root, "a"), -ENOENT);
	assert_int_equal(getattr(st, em).ka_nlink, 0);
	assert_int_equal(getattr(st, root).ka_nlink, 4);
	assert_int_equal(usage(st).ku_dirs, 5);
	assert_int_equal(usage(st).ku_inodes, 8);
	kv_store_forget(st, em, 1);
	assert_int_equal(usage(st).ku_inodes, 7);

	kv_store_forget(st, a, 1);
	kv_store_forget(st, ab, 1);
	kv_store_forget(st, abc, 1);
	kv_store_forget(st, ne, 1);
	kv_store_forget(st, nef, 1);
	kv_store_forget(st, f, 1);
	kv_store_destroy(st);
}

/* ---- usage and references ---- */

/*
 * Symlinks, FIFOs and sockets: metadata-only nodes with their type, mode,
 * size (a symlink's target length) and no value: no pool memory, no key,
 * no open/read/write/truncate; readdir types, renames (over each other,
 * exchange), unlink, and their own counters.
 */
static void test_nodes(void **state)
{
	struct kv_store *st = store_new(16 * MIB);
	struct kv_inode *root = kv_store_root(st), *l, *p, *s, *d, *x;
	char target[KV_SYMLINK_MAX + 2];
	struct iovec iov[4];
	struct kv_read_guard g;
	struct kv_dir_snap snap;
	struct kv_setattr sa = {.ksa_valid = KV_SET_SIZE, .ksa_size = 10};
	struct kv_attr a;
	const char *t;
	uint64_t bytes;

	(void)state;
	assert_int_equal(kv_store_symlink(st, root, "l", "some/where", &cred, &l, &a), 0);
	assert_int_equal(a.ka_mode, S_IFLNK | 0777);
	assert_int_equal(a.ka_size, 10);
	assert_int_equal(a.ka_alloc, 0);
	assert_int_equal(a.ka_nlink, 1);
	assert_int_equal(a.ka_tier, KV_TIER_NONE);
	assert_int_equal(kv_inode_type(l), S_IFLNK);
	assert_int_equal(kv_store_readlink(st, l, &t), 0);
	assert_string_equal(t, "some/where");
	assert_int_equal(kv_store_mknod(st, root, "p", S_IFIFO | 0640, &cred, &p, &a), 0);
	assert_int_equal(a.ka_mode, S_IFIFO | 0640);
	assert_int_equal(a.ka_size, 0);
	assert_int_equal(kv_store_mknod(st, root, "s", S_IFSOCK | 0600, &cred, &s, &a), 0);
	assert_int_equal(a.ka_mode, S_IFSOCK | 0600);
	assert_int_equal(kv_store_readlink(st, p, &t), -EINVAL);
	assert_int_equal(kv_store_readlink(st, root, &t), -EINVAL);
	assert_int_equal(used(st), 0);
	assert_int_equal(usage(st).ku_keys, 0);
	assert_int_equal(usage(st).ku_symlinks, 1);
	assert_int_equal(usage(st).ku_specials, 2);
	assert_int_equal(usage(st).ku_bytes, 0);

	/* No value to open, read, write, truncate or fallocate. */
	assert_int_equal(kv_store_open(st, l, O_RDONLY), -EINVAL);
	assert_int_equal(kv_store_open(st, p, O_WRONLY | O_TRUNC), -EINVAL);
	assert_int_equal(kv_store_read(st, s, 0, 10, iov, 4, &bytes, &g), -EINVAL);
	assert_int_equal(kv_store_write(st, p, 0, "x", 1), -EINVAL);
	assert_int_equal(kv_store_fallocate(st, l, 0, 0, 4096), -EINVAL);
	assert_int_equal(kv_store_setattr(st, p, &sa, &a), -EINVAL);
	/* Mode changes keep the type. */
	sa.ksa_valid = KV_SET_MODE;
	sa.ksa_mode = S_IFREG | 0604;
	assert_int_equal(kv_store_setattr(st, p, &sa, &a), 0);
	assert_int_equal(a.ka_mode, S_IFIFO | 0604);

	/* Errors: bad targets, taken names, the reserved name, devices. */
	assert_int_equal(kv_store_symlink(st, root, "e", "", &cred, &x, &a), -ENOENT);
	memset(target, 't', sizeof(target));
	target[KV_SYMLINK_MAX + 1] = '\0';
	assert_int_equal(kv_store_symlink(st, root, "e", target, &cred, &x, &a), -ENAMETOOLONG);
	target[KV_SYMLINK_MAX] = '\0';
	assert_int_equal(kv_store_symlink(st, root, "e", target, &cred, &x, &a), 0);
	assert_int_equal(a.ka_size, KV_SYMLINK_MAX);
	kv_store_forget(st, x, 1);
	assert_int_equal(kv_store_symlink(st, root, "l", "x", &cred, &x, &a), -EEXIST);
	assert_int_equal(kv_store_mknod(st, root, "l", S_IFIFO | 0600, &cred, &x, &a), -EEXIST);
	assert_int_equal(kv_store_symlink(st, root, KV_RESERVED_NAME, "x", &cred, &x, &a), -EPERM);
	assert_int_equal(kv_store_symlink(st, p, "x", "x", &cred, &x, &a), -ENOTDIR);
	assert_int_equal(kv_store_mknod(st, root, "c", S_IFCHR | 0600, &cred, &x, &a), -EPERM);
	assert_int_equal(lookup_err(st, root, "c"), -ENOENT);

	/* readdir types */
	assert_int_equal(kv_store_readdir(st, root, &snap), 0);
	assert_int_equal(snap.kds_count, 4);
	for (uint32_t i = 0; i < snap.kds_count; i++) {
		const char *n = snap.kds_ent[i].kde_name;
		mode_t want = !strcmp(n, "p") ? S_IFIFO : !strcmp(n, "s") ? S_IFSOCK : S_IFLNK;

		assert_int_equal(snap.kds_ent[i].kde_type, want);
	}
	kv_dir_snap_free(&snap);

	/* Renames: over a node, exchange with a directory, node over a directory. */
	assert_int_equal(kv_store_mkdir(st, root, "d", 0755, &cred, &d, &a), 0);
	assert_int_equal(kv_store_rename(st, root, "l", root, "p", RENAME_NOREPLACE), -EEXIST);
	assert_int_equal(kv_store_rename(st, root, "l", d, "l", 0), 0);
	check_name_is(st, d, "l", l);
	assert_int_equal(kv_store_rename(st, root, "p", root, "d", 0), -EISDIR);
	assert_int_equal(kv_store_rename(st, root, "d", root, "p", 0), -ENOTDIR);
	assert_int_equal(kv_store_rename(st, root, "d", root, "p", RENAME_EXCHANGE), 0);
	check_name_is(st, root, "d", p);
	check_name_is(st, root, "p", d);
	assert_int_equal(kv_store_rename(st, root, "s", root, "d", 0), 0);
	check_name_is(st, root, "d", s);
	assert_int_equal(getattr(st, p).ka_nlink, 0); /* replaced: no name left */
	assert_int_equal(usage(st).ku_specials, 1);
	assert_int_equal(kv_store_unlink(st, d, "l"), 0);
	assert_int_equal(kv_store_unlink(st, root, "e"), 0);
	assert_int_equal(kv_store_unlink(st, root, "d"), 0);
	assert_int_equal(kv_store_rmdir(st, root, "p"), 0);
	assert_int_equal(usage(st).ku_symlinks, 0);
	assert_int_equal(usage(st).ku_specials, 0);
	assert_int_equal(usage(st).ku_dirs, 1);
	/* Unnamed, the kernel's references keep them readable until forgotten. */
	assert_int_equal(kv_store_readlink(st, l, &t), 0);
	assert_string_equal(t, "some/where");
	kv_store_forget(st, l, 1);
	kv_store_forget(st, p, 1);
	kv_store_forget(st, s, 1);
	kv_store_forget(st, d, 1);
	assert_int_equal(usage(st).ku_inodes, 1);
	assert_int_equal(used(st), 0);
	kv_store_destroy(st);
}

static void test_usage(void **state)
{
	struct kv_store *st = store_new(64 * MIB);
	struct kv_inode *root = kv_store_root(st), *d, *s, *f[4];
	static const uint64_t sizes[4] = {0, 10, 5000, MIB};
	struct kv_store_usage u;
	struct kv_setattr sa = {.ksa_valid = KV_SET_SIZE, .ksa_size = 7};
	struct kv_attr a;

	(void)state;
	d = mkdir_ok(st, root, "d");
	s = mkdir_ok(st, d, "s");
	for (int i = 0; i < 4; i++) {
		char name[8];

		snprintf(name, sizeof(name), "f%d", i);
		f[i] = make_file(st, i < 2 ? d : s, name, sizes[i], (unsigned)i);
	}
	u = usage(st);
	assert_int_equal(u.ku_keys, 4);
	assert_int_equal(u.ku_dirs, 3);
	assert_int_equal(u.ku_open, 0);
	assert_int_equal(u.ku_bytes, 10 + 5000 + MIB);
	assert_int_equal(u.ku_inodes, 7);
	assert_int_equal(u.ku_last_seq, getattr(st, f[3]).ka_seq);
	assert_int_equal(used(st), 4096 + 8192 + MIB);

	open_ok(st, f[1], O_RDWR);
	open_ok(st, f[2], O_RDONLY);
	assert_int_equal(usage(st).ku_open, 2);
	write_pat(st, f[1], 0, 100, 9);
	assert_int_equal(usage(st).ku_bytes, 100 + 5000 + MIB);
	kv_store_release(st, f[1], O_RDWR);
	kv_store_release(st, f[2], O_RDONLY);
	assert_int_equal(usage(st).ku_open, 0);

	assert_int_equal(kv_store_setattr(st, f[3], &sa, &a), 0);
	assert_int_equal(usage(st).ku_bytes, 100 + 5000 + 7);
	assert_int_equal(usage(st).ku_last_seq, a.ka_seq);

	assert_int_equal(kv_store_unlink(st, s, "f2"), 0);
	assert_int_equal(usage(st).ku_keys, 3);
	kv_store_forget(st, f[2], 1);
	u = usage(st);
	assert_int_equal(u.ku_bytes, 100 + 7);
	assert_int_equal(u.ku_inodes, 6);

	for (int i = 0; i < 4; i++)
		if (i != 2)
			kv_store_forget(st, f[i], 1);
	kv_store_forget(st, s, 1);
	kv_store_forget(st, d, 1);
	kv_store_destroy(st);
}

/* Lookups take references that forget(n) drops; the name holds one of its own. */
static void test_references(void **state)
{
	struct kv_store *st = store_new(64 * MIB);
	struct kv_inode *root = kv_store_root(st), *f, *d, *g;

	(void)state;
	f = mknod_ok(st, root, "f");
	open_ok(st, f, O_WRONLY);
	write_pat(st, f, 0, 64 * KIB, 1);
	kv_store_release(st, f, O_WRONLY);
	for (int i = 0; i < 3; i++)
		assert_ptr_equal(lookup_ok(st, root, "f"), f);
	kv_store_forget(st, f, 4);
	assert_int_equal(usage(st).ku_inodes, 2);
	assert_int_equal(used(st), 64 * KIB);
	f = lookup_ok(st, root, "f");
	check_value(st, f, 64 * KIB, 1);
	assert_ptr_equal(lookup_ok(st, root, "f"), f);
	assert_int_equal(kv_store_unlink(st, root, "f"), 0);
	kv_store_forget(st, f, 1);
	assert_int_equal(usage(st).ku_inodes, 2);
	assert_int_equal(used(st), 64 * KIB);
	kv_store_forget(st, f, 1);
	assert_int_equal(usage(st).ku_inodes, 1);
	assert_int_equal(used(st), 0);

	/* Directories too. */
	d = mkdir_ok(st, root, "d");
	assert_ptr_equal(lookup_ok(st, root, "d"), d);
	assert_int_equal(kv_store_rmdir(st, root, "d"), 0);
	kv_store_forget(st, d, 1);
	assert_int_equal(usage(st).ku_inodes, 2);
	kv_store_forget(st, d, 1);
	assert_int_equal(usage(st).ku_inodes, 1);

	/* A transient reference keeps an inode just as well. */
	g = make_file(st, root, "g", 5000, 2);
	kv_inode_get(g);
	assert_int_equal(kv_store_unlink(st, root, "g"), 0);
	kv_store_forget(st, g, 1);
	assert_int_equal(usage(st).ku_inodes, 2);
	check_value(st, g, 5000, 2);
	kv_inode_put(g);
	assert_int_equal(usage(st).ku_inodes, 1);
	assert_int_equal(used(st), 0);
	kv_store_destroy(st);
}

/* ---- values: versions, sealing, copy-on-write ---- */

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

/* ---- threads ---- */

static atomic_uint t_failures;

#define T_CHECK(cond)                                                                              \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "%s:%d: thread check failed: %s\n", __FILE__, __LINE__,    \
				#cond);                                                            \
			atomic_fetch_add(&t_failures, 1);                                          \
		}                                                                                  \
	} while (0)

#define T_DIRS	    4
#define T_WORKERS   8
#define T_RENAMERS  2
#define T_READERS   2
#define T_ITERS	    240
#define T_KEEP	    10 /* workers keep every T_KEEP-th key */
#define T_HOT_SIZE  8192
#define T_HOT_ITERS 400

struct t_shared {
	struct kv_store *ts_st;
	struct kv_inode *ts_dirs[T_DIRS];
	struct kv_inode *ts_hot;
	atomic_bool ts_stop;
};

struct t_arg {
	struct t_shared *ta_sh;
	int ta_id;
};

/* Reads the whole value and checks it is `len` bytes of the pattern of seed. */
static void t_check_value(struct kv_store *st, struct kv_inode *ino, uint64_t len, unsigned seed)
{
	uint64_t off = 0;

	for (;;) {
		struct kv_read_guard g;
		struct iovec iov[8];
		uint64_t bytes = 0;
		int n = kv_store_read(st, ino, off, UINT64_MAX, iov, 8, &bytes, &g);

		T_CHECK(n >= 0);
		if (n < 0)
			return;
		for (int i = 0; i < n; i++) {
			const uint8_t *p = iov[i].iov_base;

			for (size_t j = 0; j < iov[i].iov_len; j++)
				if (p[j] != pat(off + j, seed)) {
					T_CHECK(p[j] == pat(off + j, seed));
					break;
				}
			off += iov[i].iov_len;
		}
		kv_read_done(&g);
		if (bytes == 0)
			break;
	}
	T_CHECK(off == len);
}

static void *t_worker(void *p)
{
	struct t_arg *ta = p;
	struct kv_store *st = ta->ta_sh->ts_st;
	uint8_t *buf = malloc(20000);

	T_CHECK(buf != NULL);
	for (int i = 0; buf && i < T_ITERS; i++) {
		struct kv_inode *dir = ta->ta_sh->ts_dirs[(ta->ta_id + i) % T_DIRS], *ino, *lk;
		unsigned seed = (unsigned)(ta->ta_id * 1000 + i);
		uint64_t len = 1 + ((unsigned)ta->ta_id * 7919u + (unsigned)i * 104729u) % 20000;
		struct kv_attr a;
		char name[32];

		snprintf(name, sizeof(name), "w%d-%d", ta->ta_id, i);
		for (uint64_t j = 0; j < len; j++)
			buf[j] = pat(j, seed);
		if (kv_store_create_open(st, dir, name, 0644, &cred, &ino, &a) != 0) {
			T_CHECK(!"create_open");
			continue;
		}
		T_CHECK(kv_store_write(st, ino, 0, buf, len / 2) == 0);
		T_CHECK(kv_store_write(st, ino, len / 2, buf + len / 2, len - len / 2) == 0);
		kv_store_release(st, ino, O_WRONLY);
		T_CHECK(kv_store_getattr(st, ino, &a) == 0);
		T_CHECK(a.ka_size == len);
		T_CHECK(a.ka_seq > 0);

		lk = NULL;
		if (kv_store_lookup(st, dir, name, &lk, &a) == 0) {
			T_CHECK(lk == ino);
			t_check_value(st, lk, len, seed);
			kv_store_forget(st, lk, 1);
		} else {
			T_CHECK(!"lookup of own file");
		}

		if (i % 3 == 0) {
			/* A new version over the same bytes. */
			T_CHECK(kv_store_open(st, ino, O_RDWR) == 0);
			T_CHECK(kv_store_write(st, ino, len / 3, buf + len / 3, len / 3 + 1) == 0);
			kv_store_release(st, ino, O_RDWR);
			t_check_value(st, ino, len, seed);
		}
		if (i % T_KEEP != 0) {
			T_CHECK(kv_store_unlink(st, dir, name) == 0);
			t_check_value(st, ino, len, seed);
		}
		kv_store_forget(st, ino, 1);
	}
	free(buf);
	return NULL;
}

/* Moves its own files and a directory of its own around the shared directories. */
static void *t_renamer(void *p)
{
	struct t_arg *ta = p;
	struct t_shared *sh = ta->ta_sh;
	struct kv_store *st = sh->ts_st;
	struct kv_inode *ino, *sub;
	char na[32], nb[32], nd[32];
	int da = 0, db = 1, dd = 2; /* where each lives now */
	unsigned seed_a = 500 + (unsigned)ta->ta_id, seed_b = 600 + (unsigned)ta->ta_id;
	uint8_t buf[3000];
	struct kv_attr a;

	snprintf(na, sizeof(na), "r%d-a", ta->ta_id);
	snprintf(nb, sizeof(nb), "r%d-b", ta->ta_id);
	snprintf(nd, sizeof(nd), "rd%d", ta->ta_id);
	for (int k = 0; k < 2; k++) {
		unsigned seed = k ? seed_b : seed_a;

		for (size_t j = 0; j < sizeof(buf); j++)
			buf[j] = pat(j, seed);
		T_CHECK(kv_store_create_open(st, sh->ts_dirs[k ? db : da], k ? nb : na, 0644, &cred,
					     &ino, &a) == 0);
		T_CHECK(kv_store_write(st, ino, 0, buf, sizeof(buf)) == 0);
		kv_store_release(st, ino, O_WRONLY);
		kv_store_forget(st, ino, 1);
	}
	T_CHECK(kv_store_mkdir(st, sh->ts_dirs[dd], nd, 0755, &cred, &sub, &a) == 0);
	T_CHECK(kv_store_mknod(st, sub, "inner", 0644, &cred, &ino, &a) == 0);
	kv_store_forget(st, ino, 1);

	for (int i = 0; i < 2 * T_ITERS; i++) {
		int to = (da + 1 + i % 3) % T_DIRS; /* never da */

		T_CHECK(kv_store_rename(st, sh->ts_dirs[da], na, sh->ts_dirs[to], na, 0) == 0);
		da = to;
		T_CHECK(kv_store_rename(st, sh->ts_dirs[da], na, sh->ts_dirs[db], nb,
					RENAME_NOREPLACE) == -EEXIST);
		if (i % 2 == 0) {
			unsigned t = seed_a;

			T_CHECK(kv_store_rename(st, sh->ts_dirs[da], na, sh->ts_dirs[db], nb,
						RENAME_EXCHANGE) == 0);
			seed_a = seed_b;
			seed_b = t;
		}
		to = (dd + 1) % T_DIRS;
		T_CHECK(kv_store_rename(st, sh->ts_dirs[dd], nd, sh->ts_dirs[to], nd, 0) == 0);
		dd = to;
		if (i % 16 == 0) {
			if (kv_store_lookup(st, sh->ts_dirs[da], na, &ino, &a) == 0) {
				t_check_value(st, ino, sizeof(buf), seed_a);
				kv_store_forget(st, ino, 1);
			} else {
				T_CHECK(!"lookup of own renamed file");
			}
			if (kv_store_lookup(st, sub, "inner", &ino, &a) == 0)
				kv_store_forget(st, ino, 1);
			else
				T_CHECK(!"lookup inside moved directory");
		}
	}
	T_CHECK(kv_store_unlink(st, sh->ts_dirs[da], na) == 0);
	T_CHECK(kv_store_unlink(st, sh->ts_dirs[db], nb) == 0);
	T_CHECK(kv_store_unlink(st, sub, "inner") == 0);
	T_CHECK(kv_store_rmdir(st, sh->ts_dirs[dd], nd) == 0);
	kv_store_forget(st, sub, 1);
	return NULL;
}

/* Rewrites the hot key whole, each version one repeated byte. */
static void *t_hot_writer(void *p)
{
	struct t_shared *sh = p;
	uint8_t buf[T_HOT_SIZE];

	for (int i = 0; i < T_HOT_ITERS; i++) {
		memset(buf, (uint8_t)(i + 1), sizeof(buf));
		T_CHECK(kv_store_open(sh->ts_st, sh->ts_hot, O_RDWR) == 0);
		T_CHECK(kv_store_write(sh->ts_st, sh->ts_hot, 0, buf, sizeof(buf)) == 0);
		kv_store_release(sh->ts_st, sh->ts_hot, O_RDWR);
	}
	return NULL;
}

/* Lists the shared directories, looks up what it sees, and reads the hot key. */
static void *t_reader(void *p)
{
	struct t_shared *sh = p;
	struct kv_store *st = sh->ts_st;

	while (!atomic_load(&sh->ts_stop)) {
		for (int d = 0; d < T_DIRS; d++) {
			struct kv_dir_snap snap;

			if (kv_store_readdir(st, sh->ts_dirs[d], &snap) != 0) {
				T_CHECK(!"readdir");
				continue;
			}
			for (uint32_t i = 0; i < snap.kds_count; i++) {
				const struct kv_dirent *e = &snap.kds_ent[i];
				struct kv_inode *ino;
				struct kv_attr a;
				int rc;

				T_CHECK(e->kde_name[0] == 'w' || e->kde_name[0] == 'r');
				T_CHECK(e->kde_type == S_IFREG || e->kde_type == S_IFDIR);
				if (i % 4)
					continue;
				rc = kv_store_lookup(st, sh->ts_dirs[d], e->kde_name, &ino, &a);
				T_CHECK(rc == 0 || rc == -ENOENT);
				if (rc == 0) {
					T_CHECK(a.ka_ino == e->kde_ino || e->kde_name[0] == 'r');
					kv_store_forget(st, ino, 1);
				}
			}
			kv_dir_snap_free(&snap);
		}
		for (int k = 0; k < 8; k++) {
			struct kv_read_guard g;
			struct iovec iov[8];
			uint64_t bytes;
			int n = kv_store_read(st, sh->ts_hot, 0, UINT64_MAX, iov, 8, &bytes, &g);
			uint8_t first = n > 0 ? *(uint8_t *)iov[0].iov_base : 0;

			T_CHECK(bytes == T_HOT_SIZE);
			for (int i = 0; i < n; i++)
				for (size_t j = 0; j < iov[i].iov_len; j++)
					if (((uint8_t *)iov[i].iov_base)[j] != first) {
						T_CHECK(!"torn version of the hot key");
						break;
					}
			kv_read_done(&g);
		}
	}
	return NULL;
}

static void test_threads(void **state)
{
	struct kv_store *st = store_new(64 * MIB);
	struct kv_inode *root = kv_store_root(st);
	pthread_t workers[T_WORKERS], renamers[T_RENAMERS], readers[T_READERS], hot;
	struct t_arg wa[T_WORKERS], ra[T_RENAMERS];
	struct t_shared sh = {.ts_st = st};
	uint8_t hotbuf[T_HOT_SIZE];
	uint32_t kept = 0;
	struct kv_store_usage u;

	(void)state;
	atomic_store(&t_failures, 0);
	atomic_init(&sh.ts_stop, false);
	for (int d = 0; d < T_DIRS; d++) {
		char name[8];

		snprintf(name, sizeof(name), "d%d", d);
		sh.ts_dirs[d] = mkdir_ok(st, root, name);
	}
	memset(hotbuf, 0, sizeof(hotbuf));
	sh.ts_hot = make_file(st, root, "hot", 0, 0);
	assert_int_equal(kv_store_write(st, sh.ts_hot, 0, hotbuf, sizeof(hotbuf)), 0);

	for (int i = 0; i < T_READERS; i++)
		assert_int_equal(pthread_create(&readers[i], NULL, t_reader, &sh), 0);
	assert_int_equal(pthread_create(&hot, NULL, t_hot_writer, &sh), 0);
	for (int i = 0; i < T_RENAMERS; i++) {
		ra[i] = (struct t_arg){.ta_sh = &sh, .ta_id = i};
		assert_int_equal(pthread_create(&renamers[i], NULL, t_renamer, &ra[i]), 0);
	}
	for (int i = 0; i < T_WORKERS; i++) {
		wa[i] = (struct t_arg){.ta_sh = &sh, .ta_id = i};
		assert_int_equal(pthread_create(&workers[i], NULL, t_worker, &wa[i]), 0);
	}
	for (int i = 0; i < T_WORKERS; i++)
		assert_int_equal(pthread_join(workers[i], NULL), 0);
	for (int i = 0; i < T_RENAMERS; i++)
		assert_int_equal(pthread_join(renamers[i], NULL), 0);
	assert_int_equal(pthread_join(hot, NULL), 0);
	atomic_store(&sh.ts_stop, true);
	for (int i = 0; i < T_READERS; i++)
		assert_int_equal(pthread_join(readers[i], NULL), 0);
	assert_int_equal(atomic_load(&t_failures), 0);

	/* What is left: the kept keys of every worker, and the hot key. */
	u = usage(st);
	assert_int_equal(u.ku_keys, T_WORKERS * (T_ITERS / T_KEEP) + 1);
	assert_int_equal(u.ku_dirs, 1 + T_DIRS);
	assert_int_equal(u.ku_open, 0);
	assert_int_equal(u.ku_inodes, 1 + T_DIRS + u.ku_keys);
	for (int d = 0; d < T_DIRS; d++) {
		struct kv_dir_snap snap;
		char name[8];

		assert_int_equal(getattr(st, sh.ts_dirs[d]).ka_nlink, 2);
		assert_int_equal(kv_store_readdir(st, sh.ts_dirs[d], &snap), 0);
		for (uint32_t i = 0; i < snap.kds_count; i++) {
			int w, it;

			assert_int_equal(sscanf(snap.kds_ent[i].kde_name, "w%d-%d", &w, &it), 2);
			assert_int_equal(it % T_KEEP, 0);
			assert_int_equal((w + it) % T_DIRS, d);
			assert_int_equal(
			    kv_store_unlink(st, sh.ts_dirs[d], snap.kds_ent[i].kde_name), 0);
			kept++;
		}
		kv_dir_snap_free(&snap);
		snprintf(name, sizeof(name), "d%d", d);
		assert_int_equal(kv_store_rmdir(st, root, name), 0);
		kv_store_forget(st, sh.ts_dirs[d], 1);
	}
	assert_int_equal(kept, T_WORKERS * (T_ITERS / T_KEEP));
	{
		uint64_t size;
		uint8_t *buf = read_all(st, sh.ts_hot, &size);

		assert_int_equal(size, T_HOT_SIZE);
		for (uint64_t i = 0; i < size; i++)
			assert_int_equal(buf[i], (uint8_t)T_HOT_ITERS);
		free(buf);
	}
	assert_int_equal(kv_store_unlink(st, root, "hot"), 0);
	kv_store_forget(st, sh.ts_hot, 1);

	u = usage(st);
	assert_int_equal(u.ku_keys, 0);
	assert_int_equal(u.ku_dirs, 1);
	assert_int_equal(u.ku_inodes, 1);
	assert_int_equal(u.ku_bytes, 0);
	assert_int_equal(used(st), 0);
	kv_store_destroy(st);
}

struct t_blocked {
	struct kv_store *tb_st;
	struct kv_inode *tb_ino;
	atomic_int tb_done;
};

static void *t_blocked_writer(void *p)
{
	struct t_blocked *tb = p;

	T_CHECK(kv_store_write(tb->tb_st, tb->tb_ino, 0, "Z", 1) == 0);
	atomic_store(&tb->tb_done, 1);
	return NULL;
}

/* A reader of an open version holds off writers until kv_read_done. */
static void test_read_guard_blocks_writer(void **state)
{
	struct kv_store *st = store_new(64 * MIB);
	struct kv_inode *f;
	struct t_blocked tb = {.tb_st = st};
	struct timespec nap = {.tv_nsec = 50 * 1000 * 1000};
	struct kv_read_guard g;
	struct iovec iov[4];
	uint64_t bytes;
	pthread_t t;
	uint8_t c;

	(void)state;
	atomic_store(&t_failures, 0);
	f = make_file(st, kv_store_root(st), "f", 1000, 1);
	open_ok(st, f, O_RDWR);
	assert_int_equal(kv_store_write(st, f, 0, "A", 1), 0);
	assert_int_equal(getattr(st, f).ka_seq, 0);

	assert_int_equal(kv_store_read(st, f, 0, 1, iov, 4, &bytes, &g), 1);
	assert_ptr_equal(g.krg_locked, f);
	tb.tb_ino = f;
	atomic_init(&tb.tb_done, 0);
	assert_int_equal(pthread_create(&t, NULL, t_blocked_writer, &tb), 0);
	nanosleep(&nap, NULL);
	assert_int_equal(atomic_load(&tb.tb_done), 0);
	c = *(uint8_t *)iov[0].iov_base;
	assert_int_equal(c, 'A');
	kv_read_done(&g);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(atomic_load(&tb.tb_done), 1);
	assert_int_equal(atomic_load(&t_failures), 0);
	kv_store_release(st, f, O_RDWR);
	{
		uint64_t size;
		uint8_t *buf = read_all(st, f, &size);

		assert_int_equal(size, 1000);
		assert_int_equal(buf[0], 'Z');
		for (uint64_t i = 1; i < size; i++)
			assert_int_equal(buf[i], pat(i, 1));
		free(buf);
	}

	kv_store_forget(st, f, 1);
	kv_store_destroy(st);
}

struct t_chmod {
	struct kv_store *tc_st;
	struct kv_inode *tc_dir, *tc_file;
};

static void *t_chmodder(void *p)
{
	struct t_chmod *tc = p;
	struct kv_setattr sa = {.ksa_valid = KV_SET_MODE};
	struct kv_attr a;

	for (int i = 0; i < 500; i++) {
		sa.ksa_mode = i & 1 ? 0700 : 0755;
		T_CHECK(kv_store_setattr(tc->tc_st, tc->tc_dir, &sa, &a) == 0);
		sa.ksa_mode = i & 1 ? 0600 : 0644;
		T_CHECK(kv_store_setattr(tc->tc_st, tc->tc_file, &sa, &a) == 0);
	}
	return NULL;
}

/*
 * chmod is an attribute change like any other: it may run while other
 * threads look up, list, open and read in the same directory and file
 * (store.h: ki_mode is guarded by ki_lock). Under TSan, any unlocked read of
 * ki_mode shows up here as a data race.
 */
static void test_chmod_while_looking_up(void **state)
{
	struct kv_store *st = store_new(64 * MIB);
	struct kv_inode *d, *f, *x;
	struct t_chmod tc = {.tc_st = st};
	struct kv_dir_snap snap;
	struct kv_attr a;
	pthread_t t;

	(void)state;
	atomic_store(&t_failures, 0);
	d = mkdir_ok(st, kv_store_root(st), "d");
	f = make_file(st, d, "f", 100, 1);
	tc.tc_dir = d;
	tc.tc_file = f;
	assert_int_equal(pthread_create(&t, NULL, t_chmodder, &tc), 0);
	for (int i = 0; i < 500; i++) {
		T_CHECK(kv_store_lookup(st, d, "nope", &x, &a) == -ENOENT);
		T_CHECK(kv_store_readdir(st, d, &snap) == 0 && snap.kds_count == 1);
		kv_dir_snap_free(&snap);
		T_CHECK(kv_store_open(st, f, O_RDONLY) == 0);
		t_check_value(st, f, 100, 1);
		kv_store_release(st, f, O_RDONLY);
	}
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(atomic_load(&t_failures), 0);
	kv_store_forget(st, f, 1);
	kv_store_forget(st, d, 1);
	kv_store_destroy(st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_create_lookup),
	    cmocka_unit_test(test_name_rules),
	    cmocka_unit_test(test_unlink_rmdir),
	    cmocka_unit_test(test_dir_nlink),
	    cmocka_unit_test(test_readdir),
	    cmocka_unit_test(test_rename_move),
	    cmocka_unit_test(test_rename_replace_frees_victim),
	    cmocka_unit_test(test_rename_noreplace_exchange),
	    cmocka_unit_test(test_rename_errors),
	    cmocka_unit_test(test_usage),
	    cmocka_unit_test(test_nodes),
	    cmocka_unit_test(test_references),
	    cmocka_unit_test(test_seal_on_release),
	    cmocka_unit_test(test_cow_read_guard),
	    cmocka_unit_test(test_cow_per_extent_guard),
	    cmocka_unit_test(test_open_unlink),
	    cmocka_unit_test(test_setattr),
	    cmocka_unit_test(test_open_trunc),
	    cmocka_unit_test(test_fallocate),
	    cmocka_unit_test(test_fallocate_pool_promise),
	    cmocka_unit_test(test_punch_seek),
	    cmocka_unit_test(test_enospc),
	    cmocka_unit_test(test_enospc_setattr_keeps_sealed),
	    cmocka_unit_test(test_enospc_fallocate_keeps_sealed),
	    cmocka_unit_test(test_threads),
	    cmocka_unit_test(test_read_guard_blocks_writer),
	    cmocka_unit_test(test_chmod_while_looking_up),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
