/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_store_threads.c — the store under threads (label
 * "concurrency", run under TSan too): workers, renamers, a hot writer and
 * readers over shared directories (core/ns.c, core/write.c, core/read.c),
 * a read guard holding off writers (core/read.c), and chmod while others
 * look up (core/attr.c). The store and the helpers are
 * tests/unit/store_fixture.h.
 *
 * Threads never call cmocka's assertions (they longjmp); they count
 * failures in t_failures, which the main thread checks.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#include "store_fixture.h"

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
	    cmocka_unit_test(test_threads),
	    cmocka_unit_test(test_read_guard_blocks_writer),
	    cmocka_unit_test(test_chmod_while_looking_up),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
