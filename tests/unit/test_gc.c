/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_gc.c — compaction (core/gc.h): victim selection, the
 * revalidation of keys changed between copy and switch, replay of a move
 * made void by a later put, and (label "concurrency", run under TSan too)
 * threads changing keys while passes run back to back, checked against a
 * model. Stores live on real O_DIRECT files under /tmp.
 *
 * Threads never call cmocka's assertions (they longjmp): they count
 * failures, which the main thread checks.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/gc.h"
#include "core/store.h"
#include "core/store_int.h"
#include "ssd/aio.h"
#include "ssd/bucket.h"

#define KIB	  1024u
#define MIB	  (1024u * KIB)
#define MAXIOV	  64
#define VAL	  (64 * KIB)
#define NTHREADS  3
#define NKEYS	  12
#define STRESS_NS (1500ull * 1000 * 1000)

static struct kv_cred cred;

/* ---- victim selection ---- */

static struct kv_bucket_info bi(uint64_t id, uint64_t records, uint64_t dead, uint64_t access)
{
	return (struct kv_bucket_info){.bi_id = id,
				       .bi_size = records + 8 * KIB,
				       .bi_records = records,
				       .bi_dead = dead,
				       .bi_access_ns = access};
}

static void test_select(void **state)
{
	struct kv_bucket_info info[6];
	uint64_t ids[6];
	struct kv_gc_policy p = {.gp_dead_ratio = 0.25,
				 .gp_high_watermark = 0.9,
				 .gp_max = 2,
				 .gp_used = 50,
				 .gp_cap = 100};
	uint32_t n;

	(void)state;
	/* By ratio, coldest first, at most gp_max; busy and clean buckets never. */
	info[0] = bi(1, 1000, 100, 10); /* 10%: below the ratio */
	info[1] = bi(2, 1000, 300, 50); /* 30%, warm */
	info[2] = bi(3, 1000, 900, 40); /* 90%, warmer than 4 */
	info[3] = bi(4, 1000, 250, 20); /* 25%, the coldest above the ratio */
	info[4] = bi(5, 1000, 1000, 5); /* all dead and coldest, but busy */
	info[4].bi_busy = true;
	info[5] = bi(6, 1000, 0, 1); /* nothing dead */
	n = kv_gc_select(info, 6, &p, ids);
	assert_int_equal(n, 2);
	assert_int_equal(ids[0], 4);
	assert_int_equal(ids[1], 3);

	/* More room per pass: the third by coldness. */
	p.gp_max = 4;
	n = kv_gc_select(info, 6, &p, ids);
	assert_int_equal(n, 3);
	assert_int_equal(ids[2], 2);

	/* Above the high watermark: the deadest, whatever their ratio. */
	p.gp_max = 3;
	p.gp_used = 95;
	n = kv_gc_select(info, 6, &p, ids);
	assert_int_equal(n, 3);
	assert_int_equal(ids[0], 3);
	assert_int_equal(ids[1], 2);
	assert_int_equal(ids[2], 4);
	p.gp_max = 4;
	n = kv_gc_select(info, 6, &p, ids);
	assert_int_equal(n, 4);
	assert_int_equal(ids[3], 1); /* 10% dead: taken when urgent */

	/* Urgent by request, at the same use. */
	p.gp_used = 10;
	p.gp_urgent = true;
	p.gp_max = 1;
	n = kv_gc_select(info, 6, &p, ids);
	assert_int_equal(n, 1);
	assert_int_equal(ids[0], 3);

	/* A full pass: every bucket with a dead byte that is not busy, no limit. */
	p.gp_urgent = false;
	p.gp_all = true;
	n = kv_gc_select(info, 6, &p, ids);
	assert_int_equal(n, 4);

	/* Nothing to choose from. */
	assert_int_equal(kv_gc_select(info, 0, &p, ids), 0);
}

/* Dying buckets (a record died less than gp_settle_ns ago) wait, by ratio only. */
static void test_select_dying(void **state)
{
	struct kv_bucket_info info[4];
	uint64_t ids[4];
	struct kv_gc_policy p = {.gp_dead_ratio = 0.25,
				 .gp_high_watermark = 0.9,
				 .gp_max = 4,
				 .gp_used = 50,
				 .gp_cap = 100,
				 .gp_now = 10000,
				 .gp_settle_ns = 1000,
				 .gp_settle = true};
	uint32_t n;

	(void)state;
	info[0] = bi(1, 1000, 500, 10);
	info[0].bi_dead_ns = 9500; /* dying */
	info[1] = bi(2, 1000, 500, 20);
	info[1].bi_dead_ns = 8000; /* settled */
	info[2] = bi(3, 1000, 1000, 30);
	info[2].bi_dead_ns = 9900; /* dying, but nothing left to copy */
	info[3] = bi(4, 1000, 100, 40);
	info[3].bi_dead_ns = 9900; /* dying, below the ratio anyway */
	n = kv_gc_select(info, 4, &p, ids);
	assert_int_equal(n, 2);
	assert_int_equal(ids[0], 2);
	assert_int_equal(ids[1], 3);
	assert_int_equal(p.gp_dying, 1);

	/* Waited long enough: taken, still counted. */
	p.gp_settle = false;
	p.gp_dying = 0;
	n = kv_gc_select(info, 4, &p, ids);
	assert_int_equal(n, 3);
	assert_int_equal(ids[0], 1);
	assert_int_equal(p.gp_dying, 1);

	/* Urgent and forced passes never wait. */
	p.gp_settle = true;
	p.gp_urgent = true;
	n = kv_gc_select(info, 4, &p, ids);
	assert_int_equal(n, 4);
	p.gp_urgent = false;
	p.gp_all = true;
	n = kv_gc_select(info, 4, &p, ids);
	assert_int_equal(n, 4);
}

/* ---- a store on a temporary data directory ---- */

struct fix {
	char f_root[64];
	struct kv_config f_cfg;
	int f_dirfd;
};

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	return remove(path);
}

static int fix_setup(void **state)
{
	struct fix *f = calloc(1, sizeof(*f));
	char probe[96];
	int fd;

	if (!f)
		return -1;
	strcpy(f->f_root, "/tmp/kvfs-gc-XXXXXX");
	if (!mkdtemp(f->f_root)) {
		free(f);
		return -1;
	}
	kv_config_defaults(&f->f_cfg);
	f->f_cfg.kc_mem_size = 16 * MIB;
	f->f_cfg.kc_ssd_size = 256 * MIB;
	f->f_cfg.kc_ssd_size_auto = false;
	f->f_cfg.kc_bucket_size = 1 * MIB;
	f->f_cfg.kc_flush_delay_ns = 1000 * 1000;
	f->f_cfg.kc_gc = false; /* the tests run the passes */
	cred.kc_uid = getuid();
	cred.kc_gid = getgid();
	f->f_dirfd = open(f->f_root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	snprintf(probe, sizeof(probe), "%s/probe", f->f_root);
	fd = open(probe, O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
	if (fd >= 0) {
		close(fd);
		unlink(probe);
	} else {
		close(f->f_dirfd);
		f->f_dirfd = -1;
	}
	*state = f;
	return 0;
}

static int fix_teardown(void **state)
{
	struct fix *f = *state;
	int rc;

	if (f->f_dirfd >= 0)
		close(f->f_dirfd);
	rc = nftw(f->f_root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	free(f);
	return rc ? -1 : 0;
}

static struct kv_store *store_open(void **state)
{
	struct fix *f = *state;
	struct kv_store *st = NULL;

	if (f->f_dirfd < 0) {
		print_message("SKIP: %s takes no O_DIRECT files\n", f->f_root);
		skip();
	}
	assert_int_equal(kv_store_create(&st, &f->f_cfg, f->f_dirfd), 0);
	return st;
}

static void fill(char *buf, size_t len, unsigned seed)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = (char)(seed * 31 + i * 7 + (i >> 9));
}

/* Puts name (at the root, or dir/name) = seed's bytes of len, fsynced. */
static int put_in(struct kv_store *st, struct kv_inode *dir, const char *name, size_t len,
		  unsigned seed)
{
	struct kv_inode *ino;
	struct kv_attr a;
	char *buf = malloc(len);
	int err;

	if (!buf)
		return -ENOMEM;
	fill(buf, len, seed);
	err = kv_store_lookup(st, dir, name, &ino, &a);
	if (err == -ENOENT)
		err = kv_store_create_open(st, dir, name, 0644, &cred, &ino, &a);
	else if (!err && (err = kv_store_open(st, ino, O_WRONLY | O_TRUNC)))
		kv_store_forget(st, ino, 1);
	if (!err) {
		err = kv_store_write(st, ino, 0, buf, len);
		if (!err)
			err = kv_store_fsync(st, ino);
		kv_store_release(st, ino, O_WRONLY);
		kv_store_forget(st, ino, 1);
	}
	free(buf);
	return err;
}

/* 0 when dir/name holds seed's len bytes; -EBADMSG when they differ; -errno. */
static int check_in(struct kv_store *st, struct kv_inode *dir, const char *name, size_t len,
		    unsigned seed)
{
	char *want = malloc(len), *got = malloc(len + 1);
	struct kv_inode *ino;
	struct kv_attr a;
	uint64_t off = 0;
	int err = want && got ? kv_store_lookup(st, dir, name, &ino, &a) : -ENOMEM;

	if (!err) {
		fill(want, len, seed);
		while (!err) {
			struct iovec iov[MAXIOV];
			struct kv_read_guard g;
			uint64_t bytes;
			int n = kv_store_read(st, ino, off, 256 * KIB, iov, MAXIOV, &bytes, &g);

			if (n < 0) {
				err = n;
				break;
			}
			for (int i = 0; i < n && off + iov[i].iov_len <= len + 1; i++) {
				memcpy(got + off, iov[i].iov_base, iov[i].iov_len);
				off += iov[i].iov_len;
			}
			kv_read_done(&g);
			if (bytes == 0 || off > len)
				break;
		}
		kv_store_forget(st, ino, 1);
		if (!err && (off != len || memcmp(want, got, len)))
			err = -EBADMSG;
	}
	free(want);
	free(got);
	return err;
}

static int put(struct kv_store *st, const char *name, size_t len, unsigned seed)
{
	return put_in(st, kv_store_root(st), name, len, seed);
}

static int check(struct kv_store *st, const char *name, size_t len, unsigned seed)
{
	return check_in(st, kv_store_root(st), name, len, seed);
}

static uint64_t bucket_files(struct fix *f)
{
	char path[96];
	struct dirent *de;
	uint64_t n = 0;
	DIR *d;

	snprintf(path, sizeof(path), "%s/buckets", f->f_root);
	d = opendir(path);
	assert_non_null(d);
	while ((de = readdir(d)))
		n += strstr(de->d_name, ".kvb") != NULL;
	closedir(d);
	return n;
}

/* ---- revalidation between copy and switch ---- */

struct change {
	struct kv_store *ch_st;
	int ch_calls, ch_err;
};

/* At KV_GC_AFTER_COPY: delete a, rename b to b2, rewrite c; d stays. */
static void change_keys(enum kv_gc_point p, void *arg)
{
	struct change *ch = arg;
	struct kv_store *st = ch->ch_st;
	struct kv_inode *root = kv_store_root(st);

	if (p != KV_GC_AFTER_COPY || ch->ch_calls++)
		return;
	if (!ch->ch_err)
		ch->ch_err = kv_store_unlink(st, root, "a");
	if (!ch->ch_err)
		ch->ch_err = kv_store_rename(st, root, "b", root, "b2", 0);
	if (!ch->ch_err)
		ch->ch_err = put(st, "c", VAL, 33);
}

static void test_revalidation(void **state)
{
	struct fix *f = *state;
	struct kv_store *st = store_open(state);
	struct change ch = {.ch_st = st};
	struct kv_gc_stats g;
	struct kv_store_usage u;

	assert_int_equal(put(st, "a", VAL, 1), 0);
	assert_int_equal(put(st, "b", VAL, 2), 0);
	assert_int_equal(put(st, "c", VAL, 3), 0);
	assert_int_equal(put(st, "d", VAL, 4), 0);
	assert_int_equal(put(st, "x", VAL, 5), 0);
	assert_int_equal(kv_store_unlink(st, kv_store_root(st), "x"), 0);
	kv_gc_set_hook(st->ks_gc, change_keys, &ch);
	assert_int_equal(kv_store_gc(st), 0);
	kv_gc_set_hook(st->ks_gc, NULL, NULL);
	/* The pass ran in this thread: SCHED_IDLE while it copied, not after. */
	assert_int_equal(sched_getscheduler(0), SCHED_OTHER);
	assert_int_equal(ch.ch_calls, 1);
	assert_int_equal(ch.ch_err, 0);
	assert_true(kv_store_gc_stats(st, &g));
	/* a (deleted) and c (rewritten) were copied but not switched; b2 and d were. */
	assert_int_equal(g.gs_skips, 2);
	assert_int_equal(g.gs_compacted, 1);
	assert_true(g.gs_rewritten >= 2 * VAL && g.gs_rewritten < 3 * VAL);
	assert_int_equal(check(st, "a", VAL, 1), -ENOENT);
	assert_int_equal(check(st, "b", VAL, 2), -ENOENT);
	assert_int_equal(check(st, "b2", VAL, 2), 0);
	assert_int_equal(check(st, "c", VAL, 33), 0);
	assert_int_equal(check(st, "d", VAL, 4), 0);
	/* The skipped copies are dead space of the new bucket: the next pass takes them. */
	assert_int_equal(kv_store_gc(st), 0);
	kv_store_usage(st, &u);
	assert_int_equal(u.ku_ssd_dead, 0);
	assert_int_equal(kv_store_destroy(st), 0);

	st = store_open(state);
	assert_int_equal(check(st, "a", VAL, 1), -ENOENT);
	assert_int_equal(check(st, "b2", VAL, 2), 0);
	assert_int_equal(check(st, "c", VAL, 33), 0);
	assert_int_equal(check(st, "d", VAL, 4), 0);
	kv_store_usage(st, &u);
	assert_int_equal(u.ku_ssd_dead, 0);
	assert_int_equal(u.ku_lost_keys, 0);
	assert_int_equal(bucket_files(f), u.ku_buckets);
	assert_int_equal(kv_store_destroy(st), 0);
}

/* ---- replay of a move that a later put made void ---- */

static uint64_t seq_of(struct kv_store *st, const char *name)
{
	struct kv_inode *ino;
	struct kv_attr a;

	assert_int_equal(kv_store_lookup(st, kv_store_root(st), name, &ino, &a), 0);
	kv_store_forget(st, ino, 1);
	return a.ka_seq;
}

/* The newest journal generation in the data directory. */
static uint64_t last_gen(int dirfd)
{
	DIR *d = fdopendir(openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
	struct dirent *de;
	uint64_t max = 0;

	assert_non_null(d);
	while ((de = readdir(d)))
		if (!strncmp(de->d_name, "journal.", 8) && strtoull(de->d_name + 8, NULL, 10) > max)
			max = strtoull(de->d_name + 8, NULL, 10);
	closedir(d);
	return max;
}

static void append_move(int dirfd, const char *path, uint64_t seq, uint64_t bucket, uint64_t off,
			uint64_t len, uint32_t head_len)
{
	struct kv_journal *j;
	struct kv_jent e = {.je_type = KV_J_MOVE,
			    .je_seq = seq,
			    .je_bucket = bucket,
			    .je_off = off,
			    .je_len = len,
			    .je_head_len = head_len,
			    .je_path = path,
			    .je_path_len = (uint32_t)strlen(path)};
	uint64_t lsn;

	assert_int_equal(kv_journal_open(&j, dirfd, last_gen(dirfd), 0, 1000), 0);
	assert_int_equal(kv_journal_append(j, &e, &lsn), 0);
	assert_int_equal(kv_journal_sync(j, lsn), 0);
	kv_journal_close(j);
}

static void test_replay_void_move(void **state)
{
	struct fix *f = *state;
	struct kv_store *st = store_open(state);
	struct kv_loc old;
	struct kv_inode *ino;
	struct kv_attr a;
	uint64_t s1;

	assert_int_equal(put(st, "k", VAL, 1), 0);
	s1 = seq_of(st, "k");
	assert_int_equal(kv_store_lookup(st, kv_store_root(st), "k", &ino, &a), 0);
	old = ino->ki_map.xm_one.xe_loc;
	kv_store_forget(st, ino, 1);
	assert_int_equal(put(st, "k", VAL, 2), 0);
	assert_true(seq_of(st, "k") > s1);
	assert_int_equal(kv_store_destroy(st), 0);

	/* After the checkpoint: a move of the old value (its record still on disk). */
	append_move(f->f_dirfd, "k", s1, old.kl_bucket, old.kl_off, old.kl_len, old.kl_head_len);
	st = store_open(state);
	assert_int_equal(check(st, "k", VAL, 2), 0);
	assert_true(seq_of(st, "k") > s1);

	assert_int_equal(kv_store_destroy(st), 0);
}

/* ---- a dropped bucket outlives the reads in flight on it ---- */

struct reader {
	struct kv_bucket_set *rd_bs;
	struct kv_loc rd_loc;
	uint64_t *rd_csums;
	const char *rd_want;
	_Atomic int rd_ok;
	int rd_gone, rd_bad;
};

/* Reads until the bucket is gone: every read is whole and exact, or -ENOENT. */
static void *read_loop(void *arg)
{
	struct reader *r = arg;

	for (;;) {
		void *buf;
		char *data;
		uint64_t n;
		int err =
		    kv_bucket_read(r->rd_bs, &r->rd_loc, r->rd_csums, 0, VAL, &buf, &data, &n);

		if (err == -ENOENT) {
			r->rd_gone++;
			break;
		}
		if (err || n != VAL || memcmp(data, r->rd_want, VAL))
			r->rd_bad++;
		else
			r->rd_ok++;
		kv_bucket_read_free(buf);
	}
	return NULL;
}

/* Whether kv_bucket_list calls bucket id busy (not a candidate). */
static bool busy(struct kv_bucket_set *bs, uint64_t id)
{
	struct kv_bucket_info *info;
	bool found = false, b = false;
	uint32_t n;

	assert_int_equal(kv_bucket_list(bs, &info, &n), 0);
	for (uint32_t i = 0; i < n; i++)
		if (info[i].bi_id == id) {
			found = true;
			b = info[i].bi_busy;
		}
	free(info);
	assert_true(found);
	return b;
}

static void test_drop_waits_for_reads(void **state)
{
	struct fix *f = *state;
	struct kv_bucket_opts o = {.bo_bucket_size = MIB, .bo_bucket_keys = 64, .bo_cap = 64 * MIB};
	struct reader r[4];
	pthread_t th[4];
	struct kv_bucket_set *bs;
	struct kv_aio *aio;
	struct kv_bucket_put p;
	struct iovec iov;
	uint32_t nchunks;
	char *val = NULL;

	if (f->f_dirfd < 0)
		skip();
	assert_int_equal(posix_memalign((void **)&val, 4096, VAL), 0);
	fill(val, VAL, 9);
	assert_int_equal(kv_aio_create(&aio, 16), 0);
	assert_int_equal(kv_bucket_open(&bs, f->f_dirfd, &o, aio), 0);
	iov = (struct iovec){.iov_base = val, .iov_len = VAL};
	p = (struct kv_bucket_put){.bp_key = "k",
				   .bp_key_len = 1,
				   .bp_seq = 1,
				   .bp_flags = KV_REC_WHOLE,
				   .bp_len = VAL,
				   .bp_iov = &iov,
				   .bp_iovcnt = 1};
	assert_int_equal(kv_bucket_append(bs, &p, 1), 0);
	/* The active bucket is never dropped: seal it first. */
	assert_int_equal(kv_bucket_drop(bs, p.bp_loc.kl_bucket), -EBUSY);
	assert_int_equal(kv_bucket_seal_active(bs), 0);
	/*
	 * Nor one with a record no key holds yet: the store installs a loc
	 * after the append returns, and a compaction walking the keys in
	 * between would not see it.
	 */
	assert_true(busy(bs, p.bp_loc.kl_bucket));
	assert_int_equal(kv_bucket_drop(bs, p.bp_loc.kl_bucket), -EBUSY);
	kv_bucket_settle(bs, &p.bp_loc);
	assert_false(busy(bs, p.bp_loc.kl_bucket));
	/* Nor a pinned one. */
	kv_bucket_pin(bs, p.bp_loc.kl_bucket, true);
	assert_int_equal(kv_bucket_drop(bs, p.bp_loc.kl_bucket), -EBUSY);
	kv_bucket_pin(bs, p.bp_loc.kl_bucket, false);
	for (int i = 0; i < 4; i++) {
		r[i] = (struct reader){.rd_bs = bs, .rd_loc = p.bp_loc, .rd_want = val};
		assert_int_equal(kv_bucket_load_csums(bs, &p.bp_loc, &r[i].rd_csums, &nchunks), 0);
		assert_int_equal(pthread_create(&th[i], NULL, read_loop, &r[i]), 0);
	}
	/* Every reader is reading when the drop comes: it waits for them. */
	for (int i = 0; i < 4; i++)
		while (atomic_load(&r[i].rd_ok) == 0)
			sched_yield();
	assert_int_equal(kv_bucket_drop(bs, p.bp_loc.kl_bucket), 0);
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(r[i].rd_bad, 0);
		assert_int_equal(r[i].rd_gone, 1);
		free(r[i].rd_csums);
	}
	assert_int_equal(kv_bucket_drop(bs, p.bp_loc.kl_bucket), -ENOENT);
	kv_bucket_close(bs);
	kv_aio_destroy(aio);
	free(val);
}

/* ---- threads changing keys while passes run ---- */

struct model {
	unsigned m_seed[NKEYS]; /* 0: absent */
	size_t m_len[NKEYS];
};

struct worker {
	struct kv_store *w_st;
	struct kv_inode *w_dir;
	struct model w_model;
	unsigned w_id;
	int w_fail;
	_Atomic bool *w_stop;
};

static void *work(void *arg)
{
	struct worker *w = arg;
	unsigned r = w->w_id * 7919 + 1, gen = w->w_id << 16;
	char name[16], name2[16];

	while (!atomic_load(w->w_stop)) {
		unsigned k, k2, op;
		int err = 0;

		r = r * 1103515245 + 12345;
		k = (r >> 8) % NKEYS;
		op = (r >> 20) % 10;
		snprintf(name, sizeof(name), "k%u", k);
		if (op < 4) {
			size_t len = (size_t)((r >> 4) % 3 + 1) * 24 * KIB;

			err = put_in(w->w_st, w->w_dir, name, len, ++gen);
			w->w_model.m_seed[k] = gen;
			w->w_model.m_len[k] = len;
		} else if (op < 7) {
			err = check_in(w->w_st, w->w_dir, name, w->w_model.m_len[k],
				       w->w_model.m_seed[k]);
			if (!w->w_model.m_seed[k] && err == -ENOENT)
				err = 0;
		} else if (op < 8) {
			err = kv_store_unlink(w->w_st, w->w_dir, name);
			if (!w->w_model.m_seed[k] && err == -ENOENT)
				err = 0;
			w->w_model.m_seed[k] = 0;
		} else if (w->w_model.m_seed[k]) {
			k2 = (r >> 12) % NKEYS;
			snprintf(name2, sizeof(name2), "k%u", k2);
			err = kv_store_rename(w->w_st, w->w_dir, name, w->w_dir, name2, 0);
			if (k2 != k) {
				w->w_model.m_seed[k2] = w->w_model.m_seed[k];
				w->w_model.m_len[k2] = w->w_model.m_len[k];
				w->w_model.m_seed[k] = 0;
			}
		}
		if (err)
			w->w_fail++;
	}
	return NULL;
}

struct collector {
	struct kv_store *c_st;
	_Atomic bool *c_stop;
	int c_fail;
	_Atomic int c_passes;
};

static void *collect(void *arg)
{
	struct collector *c = arg;

	while (!atomic_load(c->c_stop)) {
		if (kv_store_gc(c->c_st))
			c->c_fail++;
		c->c_passes++;
	}
	return NULL;
}

static void check_models(struct kv_store *st, struct worker *w)
{
	for (unsigned t = 0; t < NTHREADS; t++) {
		for (unsigned k = 0; k < NKEYS; k++) {
			char name[16];
			int err;

			snprintf(name, sizeof(name), "k%u", k);
			err = check_in(st, w[t].w_dir, name, w[t].w_model.m_len[k],
				       w[t].w_model.m_seed[k]);
			assert_int_equal(err, w[t].w_model.m_seed[k] ? 0 : -ENOENT);
		}
	}
}

static void test_threads(void **state)
{
	struct kv_store *st = store_open(state);
	struct worker w[NTHREADS];
	struct collector c = {.c_st = st};
	pthread_t th[NTHREADS + 1];
	_Atomic bool stop = false;
	struct timespec t0, now;
	struct kv_gc_stats g;
	struct kv_attr a;

	c.c_stop = &stop;
	for (unsigned t = 0; t < NTHREADS; t++) {
		char name[16];

		memset(&w[t], 0, sizeof(w[t]));
		w[t].w_st = st;
		w[t].w_id = t + 1;
		w[t].w_stop = &stop;
		snprintf(name, sizeof(name), "t%u", t);
		assert_int_equal(
		    kv_store_mkdir(st, kv_store_root(st), name, 0755, &cred, &w[t].w_dir, &a), 0);
		assert_int_equal(pthread_create(&th[t], NULL, work, &w[t]), 0);
	}
	assert_int_equal(pthread_create(&th[NTHREADS], NULL, collect, &c), 0);
	/* At least STRESS_NS, and until compaction has done some work (slow under TSan). */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		uint64_t ns;

		usleep(50 * 1000);
		clock_gettime(CLOCK_MONOTONIC, &now);
		ns = (uint64_t)(now.tv_sec - t0.tv_sec) * 1000000000ull + (uint64_t)now.tv_nsec -
		     (uint64_t)t0.tv_nsec;
		assert_true(kv_store_gc_stats(st, &g));
		if (ns >= STRESS_NS && atomic_load(&c.c_passes) > 1 &&
		    g.gs_compacted + g.gs_dropped > 0)
			break;
		assert_true(ns < 60ull * 1000 * 1000 * 1000); /* no progress in a minute */
	}
	atomic_store(&stop, true);
	for (unsigned t = 0; t <= NTHREADS; t++)
		pthread_join(th[t], NULL);
	for (unsigned t = 0; t < NTHREADS; t++)
		assert_int_equal(w[t].w_fail, 0);
	assert_int_equal(c.c_fail, 0);
	assert_true(c.c_passes > 1);
	assert_true(kv_store_gc_stats(st, &g));
	assert_true(g.gs_compacted + g.gs_dropped > 0);
	check_models(st, w);
	assert_int_equal(kv_store_gc(st), 0);
	check_models(st, w);
	for (unsigned t = 0; t < NTHREADS; t++)
		kv_store_forget(st, w[t].w_dir, 1);
	assert_int_equal(kv_store_destroy(st), 0);

	st = store_open(state);
	for (unsigned t = 0; t < NTHREADS; t++) {
		char name[16];

		snprintf(name, sizeof(name), "t%u", t);
		assert_int_equal(kv_store_lookup(st, kv_store_root(st), name, &w[t].w_dir, &a), 0);
	}
	check_models(st, w);
	for (unsigned t = 0; t < NTHREADS; t++)
		kv_store_forget(st, w[t].w_dir, 1);
	assert_int_equal(kv_store_destroy(st), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_select),
	    cmocka_unit_test(test_select_dying),
	    cmocka_unit_test_setup_teardown(test_revalidation, fix_setup, fix_teardown),
	    cmocka_unit_test_setup_teardown(test_replay_void_move, fix_setup, fix_teardown),
	    cmocka_unit_test_setup_teardown(test_drop_waits_for_reads, fix_setup, fix_teardown),
	    cmocka_unit_test_setup_teardown(test_threads, fix_setup, fix_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
