/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_batch.c — the batch store operations (core/batch.h) on a
 * DRAM-only store (and gets of SSD-only values on one with a data
 * directory): name validation, put/get/lookup/remove and their errors,
 * rename-over semantics of a put (open handles keep the old bytes, counters
 * stay exact), values still being written, failed copies that publish
 * nothing, and (label "concurrency", also under TSan) gets and lookups
 * racing puts of the same keys.
 *
 * A key's memory here is a plain buffer behind km_copy (and, for copies
 * left in flight, behind km_copy_start with a copy that lands only when
 * waited for).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <ftw.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/batch.h"

struct buf_mem {
	char *bm_buf;
	int bm_fail_at; /* km_copy fails when asked for bytes at or past this offset (-1: never) */
};

static int buf_copy(void *arg, bool to_store, uint64_t off, const struct iovec *iov, int n)
{
	struct buf_mem *m = arg;
	uint64_t len = 0;

	for (int i = 0; i < n; i++)
		len += iov[i].iov_len;
	if (m->bm_fail_at >= 0 && off + len > (uint64_t)m->bm_fail_at)
		return -EIO;
	for (int i = 0; i < n; i++) {
		if (to_store)
			memcpy(iov[i].iov_base, m->bm_buf + off, iov[i].iov_len);
		else
			memcpy(m->bm_buf + off, iov[i].iov_base, iov[i].iov_len);
		off += iov[i].iov_len;
	}
	return 0;
}

static struct kv_config cfg;

static struct kv_store *store_new(uint64_t mem)
{
	struct kv_store *st = NULL;

	kv_config_defaults(&cfg);
	cfg.kc_mem_size = mem;
	assert_int_equal(kv_store_create(&st, &cfg, -1), 0);
	return st;
}

static struct kv_batch batch(struct kv_store *st)
{
	return (struct kv_batch){
	    .kb_st = st,
	    .kb_dir = kv_store_root(st),
	    .kb_cred = {getuid(), getgid()},
	};
}

static struct kv_batch_mem mem_of(struct buf_mem *m, uint64_t len)
{
	return (struct kv_batch_mem){.km_len = len, .km_copy = buf_copy, .km_arg = m};
}

static int64_t put(struct kv_batch *b, const char *name, const char *data, uint64_t len,
		   unsigned flags)
{
	struct buf_mem m = {(char *)data, -1};
	struct kv_batch_mem km = mem_of(&m, len);
	struct kv_key_info ki;

	return kv_batch_put(b, name, strlen(name), flags, &km, &ki);
}

static int64_t get(struct kv_batch *b, const char *name, char *out, uint64_t len,
		   struct kv_key_info *ki)
{
	struct buf_mem m = {out, -1};
	struct kv_batch_mem km = mem_of(&m, len);

	return kv_batch_get(b, name, strlen(name), &km, ki);
}

static int64_t lookup(struct kv_batch *b, const char *name, struct kv_key_info *ki)
{
	return kv_batch_lookup(b, name, strlen(name), ki);
}

static void test_name_check(void **state)
{
	static const struct {
		const char *name;
		bool root;
		int want;
	} cases[] = {
	    {"a", true, 0},
	    {"a/b/c", true, 0},
	    {".kvfsx", true, 0},
	    {"x/.kvfs", true, 0},
	    {".kvfs", false, 0},
	    {"..a", true, 0},
	    {"", true, -EINVAL},
	    {"/a", true, -EINVAL},
	    {"a/", true, -EINVAL},
	    {"a//b", true, -EINVAL},
	    {".", true, -EINVAL},
	    {"..", true, -EINVAL},
	    {"a/../b", true, -EINVAL},
	    {"a/./b", true, -EINVAL},
	    {".kvfs", true, -EINVAL},
	    {".kvfs/stats", true, -EINVAL},
	};
	char name[KV_BATCH_PATH_MAX + 2];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		assert_int_equal(
		    kv_batch_name_check(cases[i].name, strlen(cases[i].name), cases[i].root),
		    cases[i].want);
	assert_int_equal(kv_batch_name_check("a\0b", 3, true), -EINVAL);
	memset(name, 'n', sizeof(name));
	assert_int_equal(kv_batch_name_check(name, KV_NAME_MAX, true), 0);
	assert_int_equal(kv_batch_name_check(name, KV_NAME_MAX + 1, true), -ENAMETOOLONG);
	for (int i = 200; i < KV_BATCH_PATH_MAX; i += 201)
		name[i] = '/';
	assert_int_equal(kv_batch_name_check(name, KV_BATCH_PATH_MAX, true), 0);
	assert_int_equal(kv_batch_name_check(name, KV_BATCH_PATH_MAX + 1, true), -ENAMETOOLONG);
}

static void test_put_get_lookup(void **state)
{
	struct kv_store *st = store_new(64 << 20);
	struct kv_batch b = batch(st);
	char data[10000], out[10000];
	struct kv_key_info ki;
	struct kv_store_usage u;

	(void)state;
	for (int i = 0; i < 10000; i++)
		data[i] = (char)(i * 13);
	assert_int_equal(put(&b, "m/tp0/k", data, 10000, 0), -ENOENT);
	assert_int_equal(put(&b, "m/tp0/k", data, 10000, KV_BATCH_MKDIR), 10000);
	assert_int_equal(put(&b, "m/tp0/k2", data, 5000, 0), 5000);
	assert_int_equal(put(&b, "m/tp0/k/x", data, 5000, KV_BATCH_MKDIR), -ENOTDIR);
	assert_int_equal(put(&b, "m/tp0", data, 5000, 0), -EISDIR);
	assert_int_equal(put(&b, ".kvfs", data, 5000, 0), -EINVAL);
	kv_store_usage(st, &u);
	assert_int_equal(u.ku_keys, 2);
	assert_int_equal(u.ku_dirs, 3);
	assert_int_equal(u.ku_bytes, 15000);

	assert_int_equal(lookup(&b, "m/tp0/k", &ki), 10000);
	assert_int_equal(ki.kki_size, 10000);
	assert_int_equal(ki.kki_flags, KV_BK_PRESENT | KV_BK_SEALED | KV_BK_DRAM);
	assert_int_equal(lookup(&b, "m/tp0/nope", &ki), -ENOENT);
	assert_int_equal(ki.kki_flags, 0);
	assert_int_equal(lookup(&b, "m/nope/k", &ki), -ENOENT);
	assert_int_equal(lookup(&b, "m/tp0", &ki), -EISDIR);
	assert_int_equal(ki.kki_flags, KV_BK_PRESENT | KV_BK_DIR);

	memset(out, 0, sizeof(out));
	assert_int_equal(get(&b, "m/tp0/k", out, 10000, &ki), 10000);
	assert_memory_equal(out, data, 10000);
	assert_int_equal(get(&b, "m/tp0/k", out, 9999, &ki), -EMSGSIZE);
	assert_int_equal(ki.kki_size, 10000);
	assert_int_equal(get(&b, "m/tp0/nope", out, 10000, &ki), -ENOENT);

	/* Relative to a subdirectory. */
	{
		struct kv_inode *m, *tp0;
		struct kv_attr a;

		assert_int_equal(kv_store_lookup(st, kv_store_root(st), "m", &m, &a), 0);
		assert_int_equal(kv_store_lookup(st, m, "tp0", &tp0, &a), 0);
		b.kb_dir = tp0;
		assert_int_equal(get(&b, "k2", out, 5000, &ki), 5000);
		assert_memory_equal(out, data, 5000);
		assert_int_equal(put(&b, ".kvfs", data, 10, 0), 10); /* reserved at the root only */
		b.kb_dir = kv_store_root(st);
		kv_store_forget(st, tp0, 1);
		kv_store_forget(st, m, 1);
	}
	kv_store_destroy(st);
}

/* A put replaces a key as rename() over it would. */
static void test_replace(void **state)
{
	struct kv_store *st = store_new(64 << 20);
	struct kv_batch b = batch(st);
	char v1[8192], v2[3000], out[8192];
	struct kv_inode *old, *cur;
	struct kv_attr a;
	struct kv_read_guard g;
	struct iovec iov[8];
	struct kv_key_info ki;
	struct kv_store_usage u;
	uint64_t bytes, seq1;
	int n;

	(void)state;
	memset(v1, 1, sizeof(v1));
	memset(v2, 2, sizeof(v2));
	assert_int_equal(put(&b, "k", v1, sizeof(v1), 0), (int64_t)sizeof(v1));
	assert_int_equal(kv_store_lookup(st, kv_store_root(st), "k", &old, &a), 0);
	seq1 = a.ka_seq;
	assert_true(seq1 > 0);
	assert_int_equal(kv_store_open(st, old, O_RDONLY), 0);

	assert_int_equal(put(&b, "k", v2, sizeof(v2), KV_BATCH_NOREPLACE), -EEXIST);
	assert_int_equal(put(&b, "k", v2, sizeof(v2), 0), (int64_t)sizeof(v2));
	kv_store_usage(st, &u);
	assert_int_equal(u.ku_keys, 1);
	assert_int_equal(u.ku_bytes, sizeof(v2));
	assert_int_equal(lookup(&b, "k", &ki), (int64_t)sizeof(v2));
	assert_int_equal(get(&b, "k", out, sizeof(v2), &ki), (int64_t)sizeof(v2));
	assert_memory_equal(out, v2, sizeof(v2));
	assert_int_equal(kv_store_lookup(st, kv_store_root(st), "k", &cur, &a), 0);
	assert_true(a.ka_seq > seq1);
	assert_ptr_not_equal(cur, old);
	kv_store_forget(st, cur, 1);

	/* The handle opened before still reads the old bytes. */
	n = kv_store_read(st, old, 0, sizeof(v1), iov, 8, &bytes, &g);
	assert_true(n > 0);
	assert_int_equal(bytes, sizeof(v1));
	assert_memory_equal(iov[0].iov_base, v1, iov[0].iov_len);
	kv_read_done(&g);
	kv_store_release(st, old, O_RDONLY);
	kv_store_forget(st, old, 1);
	kv_store_destroy(st);
}

/* A key still being written is neither counted nor served. */
static void test_open_value(void **state)
{
	struct kv_store *st = store_new(64 << 20);
	struct kv_batch b = batch(st);
	struct kv_cred c = {.kc_uid = getuid(), .kc_gid = getgid()};
	struct kv_inode *ino;
	struct kv_attr a;
	struct kv_key_info ki;
	char out[100];

	(void)state;
	assert_int_equal(kv_store_create_open(st, kv_store_root(st), "w", 0644, &c, &ino, &a), 0);
	assert_int_equal(kv_store_write(st, ino, 0, "hello", 5), 0);
	assert_int_equal(lookup(&b, "w", &ki), -EBUSY);
	assert_int_equal(ki.kki_flags & (KV_BK_PRESENT | KV_BK_SEALED), KV_BK_PRESENT);
	assert_int_equal(get(&b, "w", out, 5, &ki), -EBUSY);
	kv_store_release(st, ino, O_WRONLY);
	assert_int_equal(lookup(&b, "w", &ki), 5);
	assert_int_equal(get(&b, "w", out, 5, &ki), 5);
	assert_memory_equal(out, "hello", 5);
	kv_store_forget(st, ino, 1);
	kv_store_destroy(st);
}

/* A copy that fails, or a pool too small, publishes nothing and leaks nothing. */
static void test_failed_put(void **state)
{
	struct kv_store *st = store_new(8 << 20);
	struct kv_batch b = batch(st);
	char *data = calloc(1, 16 << 20);
	struct buf_mem m = {data, 1 << 20};
	struct kv_batch_mem km = mem_of(&m, 4 << 20);
	struct kv_key_info ki;

	(void)state;
	assert_int_equal(kv_batch_put(&b, "k", 1, 0, &km, &ki), -EIO);
	assert_int_equal(lookup(&b, "k", &ki), -ENOENT);
	assert_int_equal(kv_pool_used(kv_store_pool(st)), 0);
	assert_int_equal(put(&b, "k", data, 16 << 20, 0), -ENOSPC);
	assert_int_equal(lookup(&b, "k", &ki), -ENOENT);
	assert_int_equal(kv_pool_used(kv_store_pool(st)), 0);
	assert_int_equal(put(&b, "k", data, 1 << 20, 0), 1 << 20);
	free(data);
	kv_store_destroy(st);
}

static void test_remove(void **state)
{
	struct kv_store *st = store_new(64 << 20);
	struct kv_batch b = batch(st);
	struct kv_store_usage u;
	struct kv_key_info ki;
	char name[64];

	(void)state;
	for (int i = 0; i < 20; i++) {
		snprintf(name, sizeof(name), "p/%c/%c/k%d", 'a' + i % 2, 'x' + i % 3, i);
		assert_int_equal(put(&b, name, "v", 1, KV_BATCH_MKDIR), 1);
	}
	assert_int_equal(put(&b, "top", "v", 1, 0), 1);
	assert_int_equal(kv_batch_remove(&b, "top", 3, false), 1);
	assert_int_equal(kv_batch_remove(&b, "top", 3, false), -ENOENT);
	assert_int_equal(kv_batch_remove(&b, "p/a", 3, false), -EISDIR);
	assert_int_equal(kv_batch_remove(&b, "p/a", 3, true), 10);
	assert_int_equal(lookup(&b, "p/a", &ki), -ENOENT);
	assert_int_equal(kv_batch_remove(&b, "p", 1, true), 10);
	assert_int_equal(kv_batch_remove(&b, ".kvfs", 5, true), -EINVAL);
	kv_store_usage(st, &u);
	assert_int_equal(u.ku_keys, 0);
	assert_int_equal(u.ku_dirs, 1);
	assert_int_equal(kv_pool_used(kv_store_pool(st)), 0);
	kv_store_destroy(st);
}

/* Makes a symlink (target != NULL) or a node of mode under dir. */
static void node(struct kv_store *st, struct kv_inode *dir, const char *name, const char *target,
		 mode_t mode)
{
	struct kv_cred c = {.kc_uid = getuid(), .kc_gid = getgid()};
	struct kv_inode *ino;
	struct kv_attr a;

	if (target)
		assert_int_equal(kv_store_symlink(st, dir, name, target, &c, &ino, &a), 0);
	else
		assert_int_equal(kv_store_mknod(st, dir, name, mode, &c, &ino, &a), 0);
	kv_store_forget(st, ino, 1);
}

/*
 * Symlinks, FIFOs and sockets are names, not keys: lookup and get say
 * -EINVAL (present), a symlink is never followed (as a directory it is
 * -ENOTDIR), a put replaces one, remove (and rm -rf) takes them away,
 * counting no key.
 */
static void test_nodes(void **state)
{
	struct kv_store *st = store_new(64 << 20);
	struct kv_batch b = batch(st);
	struct kv_inode *root = kv_store_root(st), *d;
	struct kv_store_usage u;
	struct kv_key_info ki;
	struct kv_attr a;
	char out[8];

	(void)state;
	assert_int_equal(put(&b, "dir/k", "v", 1, KV_BATCH_MKDIR), 1);
	assert_int_equal(kv_store_lookup(st, root, "dir", &d, &a), 0);
	node(st, root, "link", "dir", 0);
	node(st, root, "fifo", NULL, S_IFIFO | 0644);
	node(st, d, "sock", NULL, S_IFSOCK | 0644);
	node(st, d, "l2", "k", 0);
	assert_int_equal(lookup(&b, "link", &ki), -EINVAL);
	assert_int_equal(ki.kki_flags, KV_BK_PRESENT);
	assert_int_equal(lookup(&b, "fifo", &ki), -EINVAL);
	assert_int_equal(lookup(&b, "dir/sock", &ki), -EINVAL);
	assert_int_equal(get(&b, "dir/l2", out, 1, &ki), -EINVAL);
	assert_int_equal(lookup(&b, "link/k", &ki), -ENOTDIR);
	assert_int_equal(put(&b, "link/new", "v", 1, KV_BATCH_MKDIR), -ENOTDIR);
	assert_int_equal(lookup(&b, "dir/k", &ki), 1);
	/* A put over a node: -EEXIST with noreplace, else it takes the name. */
	assert_int_equal(put(&b, "fifo", "v", 1, KV_BATCH_NOREPLACE), -EEXIST);
	assert_int_equal(put(&b, "fifo", "vv", 2, 0), 2);
	assert_int_equal(get(&b, "fifo", out, 2, &ki), 2);
	assert_memory_equal(out, "vv", 2);
	kv_store_usage(st, &u);
	assert_int_equal(u.ku_keys, 2);
	assert_int_equal(u.ku_symlinks, 2);
	assert_int_equal(u.ku_specials, 1);
	/* Removing a node removes no key; rm -rf counts the keys alone. */
	assert_int_equal(kv_batch_remove(&b, "link", 4, false), 0);
	assert_int_equal(lookup(&b, "link", &ki), -ENOENT);
	assert_int_equal(kv_batch_remove(&b, "dir", 3, true), 1);
	kv_store_usage(st, &u);
	assert_int_equal(u.ku_keys, 1);
	assert_int_equal(u.ku_dirs, 1);
	assert_int_equal(u.ku_symlinks, 0);
	assert_int_equal(u.ku_specials, 0);
	kv_store_forget(st, d, 1);
	kv_store_destroy(st);
}

/* --- racing puts (label concurrency) --- */

#define RVAL  (256u << 10)
#define RITER 300

struct race {
	struct kv_store *st;
	char *va, *vb;
	_Atomic bool done;
	_Atomic int failures;
};

static void *race_put(void *arg)
{
	struct race *r = arg;
	struct kv_batch b = batch(r->st);
	char name[32];

	for (int i = 0; i < RITER; i++) {
		snprintf(name, sizeof(name), "fresh%d", i);
		if (put(&b, "x", i % 2 ? r->vb : r->va, RVAL, 0) != RVAL ||
		    put(&b, name, r->va, RVAL, 0) != RVAL)
			r->failures++;
	}
	r->done = true;
	return NULL;
}

static void *race_read(void *arg)
{
	struct race *r = arg;
	struct kv_batch b = batch(r->st);
	struct kv_key_info ki;
	char *out = malloc(RVAL), name[32];

	while (!r->done) {
		int64_t n = get(&b, "x", out, RVAL, &ki);

		if (n == RVAL && memcmp(out, r->va, RVAL) && memcmp(out, r->vb, RVAL))
			r->failures++; /* a mix of two versions */
		else if (n != RVAL && n != -ENOENT)
			r->failures++;
		for (int i = 0; i < RITER; i++) {
			snprintf(name, sizeof(name), "fresh%d", i);
			n = lookup(&b, name, &ki);
			if (n == -ENOENT)
				break;
			if (n != RVAL) /* a counted key is complete */
				r->failures++;
		}
	}
	free(out);
	return NULL;
}

static void test_race(void **state)
{
	struct race r = {.st = store_new(256 << 20)};
	pthread_t w, rd[2];

	(void)state;
	r.va = malloc(RVAL);
	r.vb = malloc(RVAL);
	memset(r.va, 0xa, RVAL);
	memset(r.vb, 0xb, RVAL);
	pthread_create(&rd[0], NULL, race_read, &r);
	pthread_create(&rd[1], NULL, race_read, &r);
	pthread_create(&w, NULL, race_put, &r);
	pthread_join(w, NULL);
	pthread_join(rd[0], NULL);
	pthread_join(rd[1], NULL);
	assert_int_equal(r.failures, 0);
	free(r.va);
	free(r.vb);
	kv_store_destroy(r.st);
}

/* A copy to or from a device, stood in for: it lands when waited for, or fails then. */
struct flight {
	struct iovec fl_src[64]; /* the store's memory, which must still hold the version */
	int fl_n;
	char *fl_dst; /* the device's memory */
	int fl_err;
	int fl_started, fl_copies;
	bool fl_now;	  /* km_copy_start copies at once (nothing in flight) */
	bool fl_to_store; /* the copy in flight is a put's */
};

static int flight_wait(void *arg)
{
	struct flight *fl = arg;
	char *p = fl->fl_dst;

	for (int i = 0; i < fl->fl_n && !(fl->fl_to_store && fl->fl_err); i++) {
		if (fl->fl_to_store)
			memcpy(fl->fl_src[i].iov_base, p, fl->fl_src[i].iov_len);
		else
			memcpy(p, fl->fl_src[i].iov_base, fl->fl_src[i].iov_len);
		p += fl->fl_src[i].iov_len;
	}
	return fl->fl_err;
}

static int flight_start(void *arg, bool to_store, const struct iovec *iov, int n,
			struct kv_batch_wait *w)
{
	struct flight *fl = arg;

	fl->fl_started++;
	assert_true(n <= 64);
	memcpy(fl->fl_src, iov, (size_t)n * sizeof(*iov)); /* what the device would reach later */
	fl->fl_n = n;
	fl->fl_to_store = to_store;
	if (fl->fl_now)
		return flight_wait(fl);
	*w = (struct kv_batch_wait){flight_wait, fl};
	return 0;
}

static int flight_copy(void *arg, bool to_store, uint64_t off, const struct iovec *iov, int n)
{
	struct flight *fl = arg;

	fl->fl_copies++;
	for (int i = 0; i < n; i++) {
		memcpy(fl->fl_dst + off, iov[i].iov_base, iov[i].iov_len);
		off += iov[i].iov_len;
	}
	return 0;
}

struct retired {
	uint64_t key[2 * KV_BATCH_INFLIGHT];
	int err[2 * KV_BATCH_INFLIGHT], n;
};

static void on_retire(void *arg, uint64_t key, int err)
{
	struct retired *r = arg;

	assert_true(r->n < 2 * KV_BATCH_INFLIGHT);
	r->key[r->n] = key;
	r->err[r->n++] = err;
}

/* Whether every slot of kb_inflight is busy, or (busy false) none is. */
static bool all_slots(const struct kv_batch *b, bool busy)
{
	for (int i = 0; i < KV_BATCH_INFLIGHT; i++)
		if (b->kb_inflight[i].bi_busy != busy)
			return false;
	return true;
}

/*
 * Gets whose copy is still in flight when kv_batch_get returns: the version
 * they copy from stays pinned (a put replacing the key meanwhile changes
 * nothing for them), at most KV_BATCH_INFLIGHT are in flight and at most
 * an eighth of the pool in bytes, kv_batch_retire waits for the oldest
 * beyond those unless told all, reports each key with its copy's error; a
 * copy that lands at once is not made twice.
 */
static void test_copy_in_flight(void **state)
{
	enum { LEN = 64 << 10, N = KV_BATCH_INFLIGHT, BIG = 3 << 20 };
	struct kv_store *st = store_new(64 << 20); /* in flight: 8 MiB at most */
	struct kv_batch b = batch(st);
	char *v0 = malloc(LEN), *v1 = malloc(LEN), *out[N], *big = malloc(BIG);
	struct flight f[N];
	struct kv_batch_mem m[N];
	struct retired r = {0};
	struct kv_key_info ki;

	(void)state;
	memset(v0, 'a', LEN);
	memset(v1, 'b', LEN);
	for (int i = 0; i < N; i++) {
		out[i] = calloc(1, BIG);
		f[i] = (struct flight){.fl_dst = out[i], .fl_err = i == N - 1 ? -EIO : 0};
		m[i] = (struct kv_batch_mem){.km_len = LEN,
					     .km_copy = flight_copy,
					     .km_copy_start = flight_start,
					     .km_arg = &f[i]};
	}
	assert_int_equal(put(&b, "k0", v0, LEN, 0), LEN);
	assert_int_equal(put(&b, "k1", v1, LEN, 0), LEN);
	b.kb_key = 0;
	assert_int_equal(kv_batch_get(&b, "k0", 2, &m[0], &ki), LEN);
	assert_int_equal(put(&b, "k0", v1, LEN, 0), LEN); /* replaced while in flight */
	for (int i = 1; i < N; i++) {
		kv_batch_retire(&b, false, on_retire, &r);
		assert_int_equal(r.n, 0); /* a slot is still free */
		b.kb_key = (uint64_t)i;
		assert_int_equal(kv_batch_get(&b, "k1", 2, &m[i], &ki), LEN);
	}
	assert_true(all_slots(&b, true));
	kv_batch_retire(&b, false, on_retire, &r);
	assert_int_equal(r.n, 1);
	assert_int_equal(r.key[0], 0);
	assert_int_equal(r.err[0], 0);
	assert_memory_equal(out[0], v0, LEN); /* the version pinned at the get */
	kv_batch_retire(&b, true, on_retire, &r);
	assert_int_equal(r.n, N);
	for (int i = 1; i < N; i++) {
		assert_int_equal(r.key[i], i); /* oldest first */
		assert_int_equal(r.err[i], i == N - 1 ? -EIO : 0);
		if (i < N - 1)
			assert_memory_equal(out[i], v1, LEN);
	}
	assert_true(all_slots(&b, false));
	for (int i = 0; i < N; i++)
		assert_int_equal(f[i].fl_copies, 0);

	/* Bytes: 3 MiB values, an eighth of the 64 MiB pool in flight at most. */
	r.n = 0;
	memset(big, 'c', BIG);
	assert_int_equal(put(&b, "big", big, BIG, 0), BIG);
	for (int i = 0; i < 3; i++) {
		f[i] = (struct flight){.fl_dst = out[i]};
		m[i].km_len = BIG;
		b.kb_key = (uint64_t)i;
		assert_int_equal(kv_batch_get(&b, "big", 3, &m[i], &ki), BIG);
		kv_batch_retire(&b, false, on_retire, &r);
		assert_int_equal(r.n, i == 2 ? 1 : 0); /* 9 MiB in flight: the oldest waited for */
	}
	assert_int_equal(r.key[0], 0);
	assert_memory_equal(out[0], big, BIG);
	kv_batch_retire(&b, true, on_retire, &r);
	assert_int_equal(r.n, 3);
	assert_memory_equal(out[2], big, BIG);

	/* Landing at once: done, and not copied a second time. */
	r.n = 0;
	f[0] = (struct flight){.fl_dst = out[0], .fl_now = true};
	m[0].km_len = LEN;
	memset(out[0], 0, LEN);
	assert_int_equal(kv_batch_get(&b, "k0", 2, &m[0], &ki), LEN);
	assert_memory_equal(out[0], v1, LEN);
	assert_int_equal(f[0].fl_started, 1);
	assert_int_equal(f[0].fl_copies, 0);
	assert_true(all_slots(&b, false));
	kv_batch_retire(&b, true, on_retire, &r);
	assert_int_equal(r.n, 0);
	free(v0);
	free(v1);
	free(big);
	for (int i = 0; i < N; i++)
		free(out[i]);
	kv_store_destroy(st);
}

/*
 * Puts whose copy from the device is still in flight when kv_batch_put
 * returns: the key appears only once the copy has landed (retired), puts
 * of one name publish in the order they were made, a copy that fails
 * publishes nothing and frees its memory, a publication that fails
 * (NOREPLACE) is reported at retirement, and a copy that lands at once is
 * published at once.
 */
static void test_put_in_flight(void **state)
{
	enum { LEN = 64 << 10 };
	struct kv_store *st = store_new(64 << 20);
	struct kv_batch b = batch(st);
	char *v0 = malloc(LEN), *v1 = malloc(LEN), *out = malloc(LEN);
	struct flight f0 = {.fl_dst = v0}, f1 = {.fl_dst = v1};
	struct kv_batch_mem m0 = {
	    .km_len = LEN, .km_copy = flight_copy, .km_copy_start = flight_start, .km_arg = &f0};
	struct kv_batch_mem m1 = m0, m[KV_BATCH_INFLIGHT];
	struct flight fl[KV_BATCH_INFLIGHT];
	struct retired r = {0};
	struct kv_key_info ki;

	(void)state;
	m1.km_arg = &f1;
	memset(v0, 'a', LEN);
	memset(v1, 'b', LEN);
	b.kb_key = 0;
	assert_int_equal(kv_batch_put(&b, "k", 1, 0, &m0, &ki), LEN);
	assert_int_equal(lookup(&b, "k", &ki), -ENOENT); /* not landed: not there */
	b.kb_key = 1;
	assert_int_equal(kv_batch_put(&b, "k", 1, 0, &m1, &ki), LEN);
	/* more puts, of other names, until every slot is busy */
	for (int i = 2; i < KV_BATCH_INFLIGHT; i++) {
		char name[8];

		kv_batch_retire(&b, false, on_retire, &r);
		assert_int_equal(r.n, 0); /* a slot is still free */
		snprintf(name, sizeof(name), "p%d", i);
		fl[i] = (struct flight){.fl_dst = v1};
		m[i] = m1;
		m[i].km_arg = &fl[i];
		b.kb_key = (uint64_t)i;
		assert_int_equal(kv_batch_put(&b, name, strlen(name), 0, &m[i], &ki), LEN);
	}
	assert_true(all_slots(&b, true));
	assert_int_equal(lookup(&b, "k", &ki), -ENOENT);
	kv_batch_retire(&b, false, on_retire, &r);
	assert_int_equal(r.n, 1);
	assert_int_equal(r.key[0], 0);
	assert_int_equal(r.err[0], 0);
	assert_int_equal(get(&b, "k", out, LEN, &ki), LEN);
	assert_memory_equal(out, v0, LEN);
	assert_int_equal(lookup(&b, "p2", &ki), -ENOENT); /* not waited for yet */
	kv_batch_retire(&b, true, on_retire, &r);
	assert_int_equal(r.n, KV_BATCH_INFLIGHT);
	for (int i = 1; i < KV_BATCH_INFLIGHT; i++)
		assert_int_equal(r.key[i], i); /* oldest first */
	assert_int_equal(get(&b, "k", out, LEN, &ki), LEN);
	assert_memory_equal(out, v1, LEN); /* the later put wins */
	assert_int_equal(get(&b, "p2", out, LEN, &ki), LEN);
	assert_memory_equal(out, v1, LEN);
	assert_int_equal(f0.fl_copies + f1.fl_copies, 0);
	for (int i = 2; i < KV_BATCH_INFLIGHT; i++) {
		char name[8];

		snprintf(name, sizeof(name), "p%d", i);
		assert_int_equal(kv_batch_remove(&b, name, strlen(name), false), 1);
	}

	/* a failed copy: no key, no memory held; a refused publication: reported */
	r.n = 0;
	f0 = (struct flight){.fl_dst = v0, .fl_err = -EIO};
	b.kb_key = 2;
	assert_int_equal(kv_batch_put(&b, "bad", 3, 0, &m0, &ki), LEN);
	b.kb_key = 3;
	assert_int_equal(kv_batch_put(&b, "k", 1, KV_BATCH_NOREPLACE, &m1, &ki), LEN);
	kv_batch_retire(&b, true, on_retire, &r);
	assert_int_equal(r.n, 2);
	assert_int_equal(r.key[0], 2);
	assert_int_equal(r.err[0], -EIO);
	assert_int_equal(r.key[1], 3);
	assert_int_equal(r.err[1], -EEXIST);
	assert_int_equal(lookup(&b, "bad", &ki), -ENOENT);
	assert_int_equal(kv_pool_used(kv_store_pool(st)), LEN); /* "k" alone */

	/* landing at once: published before the call returns, copied once */
	f0 = (struct flight){.fl_dst = v0, .fl_now = true};
	assert_int_equal(kv_batch_put(&b, "now", 3, 0, &m0, &ki), LEN);
	assert_true(all_slots(&b, false));
	assert_int_equal(get(&b, "now", out, LEN, &ki), LEN);
	assert_memory_equal(out, v0, LEN);
	assert_int_equal(f0.fl_started, 1);
	assert_int_equal(f0.fl_copies, 0);

	/*
	 * A put of a name still in flight, then one of the same name that
	 * lands at once: the earlier lands (and publishes) first, so the
	 * later one wins; the one in flight is reported at retirement.
	 */
	r.n = 0;
	f1 = (struct flight){.fl_dst = v1};
	b.kb_key = 4;
	assert_int_equal(kv_batch_put(&b, "now", 3, 0, &m1, &ki), LEN);
	f0 = (struct flight){.fl_dst = v0, .fl_now = true};
	b.kb_key = 5;
	assert_int_equal(kv_batch_put(&b, "now", 3, 0, &m0, &ki), LEN);
	kv_batch_retire(&b, true, on_retire, &r);
	assert_int_equal(r.n, 1);
	assert_int_equal(r.key[0], 4);
	assert_int_equal(r.err[0], 0);
	assert_int_equal(get(&b, "now", out, LEN, &ki), LEN);
	assert_memory_equal(out, v0, LEN);
	assert_int_equal(f0.fl_started, 1);
	assert_int_equal(f0.fl_copies, 0);
	free(v0);
	free(v1);
	free(out);
	kv_store_destroy(st);
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
}

/*
 * Gets of SSD-only values into memory reached only through a copy in
 * flight (a device): each is read into pool staging and copied from
 * there in flight; the staging goes back to the pool when the copy is
 * retired; with every slot busy, or a size O_DIRECT cannot read whole, a
 * get takes the usual way. Every byte lands.
 */
static void test_get_staged(void **state)
{
	enum { LEN = 64 << 10, ODD = LEN + 5 };
	char root[] = "/tmp/kvfs-batch-XXXXXX", *v[4], *out[4];
	const uint64_t lens[4] = {LEN, LEN, LEN, ODD};
	struct flight fl[4], flx[KV_BATCH_INFLIGHT];
	struct kv_batch_mem m[4], mx[KV_BATCH_INFLIGHT];
	char *outx[KV_BATCH_INFLIGHT];
	struct kv_key_info ki;
	struct retired r = {0};
	struct kv_store *st;
	struct kv_batch b;
	int dfd, probe;

	(void)state;
	assert_non_null(mkdtemp(root));
	dfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(dfd >= 0);
	probe = openat(dfd, "probe", O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
	if (probe < 0) {
		close(dfd);
		rmdir(root);
		print_message("SKIP: %s takes no O_DIRECT files\n", root);
		skip();
	}
	close(probe);
	unlinkat(dfd, "probe", 0);
	kv_config_defaults(&cfg);
	cfg.kc_mem_size = 32 << 20;
	cfg.kc_ssd_size = 1ull << 30;
	cfg.kc_ssd_size_auto = false;
	cfg.kc_bucket_size = 4 << 20;
	assert_int_equal(kv_store_create(&st, &cfg, dfd), 0);
	b = batch(st);
	for (int i = 0; i < 4; i++) {
		char name[4] = {'k', (char)('0' + i)};

		v[i] = malloc(lens[i]);
		out[i] = calloc(1, lens[i]);
		for (uint64_t j = 0; j < lens[i]; j++)
			v[i][j] = (char)(i * 37 + j * 7 + (j >> 10));
		assert_int_equal(put(&b, name, v[i], lens[i], 0), (int64_t)lens[i]);
		fl[i] = (struct flight){.fl_dst = out[i]};
		m[i] = (struct kv_batch_mem){.km_len = lens[i],
					     .km_copy = flight_copy,
					     .km_copy_start = flight_start,
					     .km_arg = &fl[i]};
	}
	kv_store_destroy(st); /* the values now live only in their buckets */
	assert_int_equal(kv_store_create(&st, &cfg, dfd), 0);
	b = batch(st);
	assert_int_equal(lookup(&b, "k0", &ki), LEN);
	assert_int_equal(ki.kki_flags & (KV_BK_DRAM | KV_BK_SSD), KV_BK_SSD);

	b.kb_key = 0;
	assert_int_equal(kv_batch_get(&b, "k0", 2, &m[0], &ki), LEN);
	assert_true(b.kb_inflight[0].bi_busy && b.kb_inflight[0].bi_obj &&
		    !b.kb_inflight[0].bi_ino);
	assert_int_equal(kv_pool_used(kv_store_pool(st)), LEN); /* the staging */
	b.kb_key = 1;
	assert_int_equal(kv_batch_get(&b, "k1", 2, &m[1], &ki), LEN);
	assert_int_equal(ki.kki_flags & (KV_BK_DRAM | KV_BK_SSD), KV_BK_SSD);
	for (int i = 2; i < KV_BATCH_INFLIGHT; i++) { /* k1 again, until every slot is busy */
		outx[i] = calloc(1, LEN);
		flx[i] = (struct flight){.fl_dst = outx[i]};
		mx[i] = m[1];
		mx[i].km_arg = &flx[i];
		b.kb_key = (uint64_t)i;
		assert_int_equal(kv_batch_get(&b, "k1", 2, &mx[i], &ki), LEN);
		assert_true(b.kb_inflight[i].bi_busy && b.kb_inflight[i].bi_obj);
	}
	assert_int_equal(kv_pool_used(kv_store_pool(st)), KV_BATCH_INFLIGHT * LEN);
	b.kb_key = KV_BATCH_INFLIGHT; /* every slot busy: read and copied at once */
	assert_int_equal(kv_batch_get(&b, "k2", 2, &m[2], &ki), LEN);
	assert_int_equal(fl[2].fl_started + fl[2].fl_copies, 1);
	assert_memory_equal(out[2], v[2], LEN);
	assert_int_equal(fl[0].fl_copies + fl[1].fl_copies, 0);
	kv_batch_retire(&b, true, on_retire, &r);
	assert_int_equal(r.n, KV_BATCH_INFLIGHT);
	for (int i = 0; i < KV_BATCH_INFLIGHT; i++)
		assert_int_equal(r.err[i], 0);
	assert_int_equal(kv_pool_used(kv_store_pool(st)), 0);
	for (int i = 0; i < 3; i++)
		assert_memory_equal(out[i], v[i], LEN);
	for (int i = 2; i < KV_BATCH_INFLIGHT; i++) {
		assert_memory_equal(outx[i], v[1], LEN);
		free(outx[i]);
	}
	r.n = 0;
	b.kb_key = 3; /* not a multiple of 4 KiB: the whole value read, its version pinned */
	assert_int_equal(kv_batch_get(&b, "k3", 2, &m[3], &ki), ODD);
	assert_true(!b.kb_inflight[0].bi_busy || b.kb_inflight[0].bi_ino);
	kv_batch_retire(&b, true, on_retire, &r);
	assert_int_equal(r.n, 1); /* in flight, from the version it pinned */
	assert_memory_equal(out[3], v[3], ODD);
	kv_store_destroy(st);
	for (int i = 0; i < 4; i++) {
		free(v[i]);
		free(out[i]);
	}
	close(dfd);
	assert_int_equal(nftw(root, rm_one, 8, FTW_DEPTH | FTW_PHYS), 0);
}

/* Sets the mode, owner and group of the node at path (from the root). */
static void set_owner(struct kv_store *st, const char *path, mode_t mode, uid_t uid, gid_t gid)
{
	struct kv_setattr sa = {.ksa_valid = KV_SET_MODE | KV_SET_UID | KV_SET_GID,
				.ksa_mode = mode,
				.ksa_uid = uid,
				.ksa_gid = gid};
	struct kv_inode *dir = kv_store_root(st), *ino;
	char buf[256], *p = buf, *slash;
	struct kv_attr a;

	snprintf(buf, sizeof(buf), "%s", path);
	kv_inode_get(dir);
	for (;;) {
		slash = strchr(p, '/');
		if (slash)
			*slash = '\0';
		assert_int_equal(kv_store_lookup(st, dir, p, &ino, &a), 0);
		kv_inode_put(dir);
		dir = ino;
		if (!slash)
			break;
		p = slash + 1;
	}
	assert_int_equal(kv_store_setattr(st, ino, &sa, &a), 0);
	kv_inode_put(ino);
}

static bool in_999(void *arg, gid_t gid)
{
	(*(int *)arg)++;
	return gid == 999;
}

/*
 * A batch is checked as the system calls on its paths would be: search
 * permission on every directory, read to get, write on the directory to
 * put or remove, the sticky bit, group and others' bits. Root passes.
 */
static void test_permissions(void **state)
{
	struct kv_store *st = store_new(64 << 20);
	struct kv_batch b = batch(st), u = batch(st);
	struct kv_key_info ki;
	struct kv_attr a;
	int asked = 0, left;
	char out[8];

	(void)state;
	u.kb_cred = (struct kv_cred){.kc_uid = 1234, .kc_gid = 5678, .kc_in_group = in_999,
				     .kc_arg = &asked};
	assert_int_equal(put(&b, "pub/k600", "secret", 6, KV_BATCH_MKDIR), 6);
	assert_int_equal(put(&b, "pub/k644", "public", 6, 0), 6);
	assert_int_equal(put(&b, "pub/g640", "group1", 6, 0), 6);
	assert_int_equal(put(&b, "pub/g604", "group2", 6, 0), 6);
	assert_int_equal(put(&b, "pub/s640", "group3", 6, 0), 6);
	assert_int_equal(put(&b, "priv/k", "hidden", 6, KV_BATCH_MKDIR), 6);
	assert_int_equal(put(&b, "tmp/roots", "roots!", 6, KV_BATCH_MKDIR), 6);
	set_owner(st, "pub/k600", 0600, 0, 0);
	set_owner(st, "pub/g640", 0640, 0, 5678);
	set_owner(st, "pub/g604", 0604, 0, 5678);
	set_owner(st, "pub/s640", 0640, 0, 999);
	set_owner(st, "priv", 0700, 0, 0);
	set_owner(st, "tmp", 01777, 0, 0);

	/* reading: search on the path, read on the key; stat needs no read */
	assert_int_equal(lookup(&u, "pub/k600", &ki), 6);
	assert_int_equal(get(&u, "pub/k600", out, 6, &ki), -EACCES);
	assert_int_equal(get(&b, "pub/k600", out, 6, &ki), 6);
	assert_int_equal(get(&u, "pub/k644", out, 6, &ki), 6);
	assert_memory_equal(out, "public", 6);
	assert_int_equal(lookup(&u, "priv/k", &ki), -EACCES);
	assert_int_equal(get(&u, "priv/k", out, 6, &ki), -EACCES);
	/* the group's bits for a member, even where the others' allow more */
	assert_int_equal(get(&u, "pub/g640", out, 6, &ki), 6);
	assert_int_equal(get(&u, "pub/g604", out, 6, &ki), -EACCES);
	assert_int_equal(asked, 0); /* the primary group decided */
	assert_int_equal(get(&u, "pub/s640", out, 6, &ki), 6);
	assert_memory_equal(out, "group3", 6);
	assert_int_equal(asked, 1);

	/* writing: the directory's write bit, also for a directory a put would make */
	assert_int_equal(put(&u, "pub/new", "x", 1, 0), -EACCES);
	assert_int_equal(put(&u, "pub/k644", "x", 1, 0), -EACCES);
	assert_int_equal(put(&u, "pub/d/new", "x", 1, KV_BATCH_MKDIR), -EACCES);
	assert_int_equal(lookup(&b, "pub/d", &ki), -ENOENT);
	assert_int_equal(kv_batch_remove(&u, "pub/k644", 8, false), -EACCES);
	assert_int_equal(kv_batch_remove(&u, "pub", 3, true), -EACCES);
	assert_int_equal(lookup(&b, "pub/k644", &ki), 6);

	/* a sticky directory: anyone may add, only owners take away or replace */
	assert_int_equal(put(&u, "tmp/mine", "mine", 4, 0), 4);
	assert_int_equal(put(&u, "tmp/mine", "mine2", 5, 0), 5);
	assert_int_equal(put(&u, "tmp/roots", "x", 1, 0), -EPERM);
	assert_int_equal(kv_batch_remove(&u, "tmp/roots", 9, false), -EPERM);
	assert_int_equal(get(&b, "tmp/roots", out, 6, &ki), 6);
	assert_memory_equal(out, "roots!", 6);
	assert_int_equal(kv_batch_remove(&u, "tmp/mine", 8, false), 1);
	assert_int_equal(kv_batch_remove(&b, "tmp/roots", 9, false), 1);

	/* rm -rf stops at a directory it may not empty, and says so */
	assert_int_equal(put(&u, "tmp/tree/ro/k", "k", 1, KV_BATCH_MKDIR), 1);
	assert_int_equal(put(&u, "tmp/tree/rw/k", "k", 1, KV_BATCH_MKDIR), 1);
	set_owner(st, "tmp/tree/ro", 0555, 1234, 5678);
	assert_int_equal(kv_batch_remove(&u, "tmp/tree", 8, true), -EACCES);
	assert_int_equal(lookup(&b, "tmp/tree/ro/k", &ki), 1);
	set_owner(st, "tmp/tree/ro", 0755, 1234, 5678);
	left = lookup(&b, "tmp/tree/rw/k", &ki) == 1 ? 2 : 1; /* rw/ may have gone first */
	assert_int_equal(kv_batch_remove(&u, "tmp/tree", 8, true), left);
	assert_int_equal(lookup(&b, "tmp/tree", &ki), -ENOENT);

	/* names start at the batch's directory, which needs search too */
	assert_int_equal(kv_store_lookup(st, kv_store_root(st), "priv", &u.kb_dir, &a), 0);
	assert_int_equal(lookup(&u, "k", &ki), -EACCES);
	b.kb_dir = u.kb_dir;
	assert_int_equal(lookup(&b, "k", &ki), 6);
	kv_inode_put(u.kb_dir);
	kv_store_destroy(st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_name_check),	   cmocka_unit_test(test_put_get_lookup),
	    cmocka_unit_test(test_replace),	   cmocka_unit_test(test_open_value),
	    cmocka_unit_test(test_failed_put),	   cmocka_unit_test(test_remove),
	    cmocka_unit_test(test_nodes),	   cmocka_unit_test(test_race),
	    cmocka_unit_test(test_copy_in_flight), cmocka_unit_test(test_put_in_flight),
	    cmocka_unit_test(test_get_staged),	   cmocka_unit_test(test_permissions),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
