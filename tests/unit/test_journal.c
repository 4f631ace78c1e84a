/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_journal.c — the metadata journal and checkpoints
 * (ssd/journal.h).
 *
 * Every test runs in its own mkdtemp directory under /tmp, removed after.
 * The tests that tear or damage files lean on the record format of
 * ssd/format.h: records follow each other from offset 0, each
 * struct kv_jrec_head + struct kv_jrec_body + path + path2 (+ a PUT's
 * extent map), padded to 8. Version 1 records are written by hand.
 *
 * The journal tests use the commit thread (label "concurrency", run under
 * TSan too). Threads never call cmocka's assertions (they longjmp); they
 * count failures, which the main thread checks.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "ssd/format.h"
#include "ssd/journal.h"

#define DELAY_NS   (1000u * 1000u) /* 1 ms group-commit window */
#define NTYPES	   (KV_J__MAX - KV_J_MKDIR)
#define CKPT_BIG   100000u
#define GC_THREADS 8
#define GC_PER	   100
#define HEAD	   sizeof(struct kv_jrec_head)
#define BODY	   sizeof(struct kv_jrec_body)

static size_t pad8(size_t n)
{
	return (n + 7) & ~(size_t)7;
}

/* ---- the temporary data directory ---- */

struct tdir {
	char td_path[64];
	int td_fd;
};

static int dir_setup(void **state)
{
	struct tdir *d = calloc(1, sizeof(*d));

	if (!d)
		return -1;
	strcpy(d->td_path, "/tmp/kvfs-journal-XXXXXX");
	if (!mkdtemp(d->td_path)) {
		free(d);
		return -1;
	}
	d->td_fd = open(d->td_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (d->td_fd < 0) {
		rmdir(d->td_path);
		free(d);
		return -1;
	}
	*state = d;
	return 0;
}

static int dir_teardown(void **state)
{
	struct tdir *d = *state;
	struct dirent *de;
	DIR *dir = opendir(d->td_path);
	int rc = 0;

	if (!dir)
		return -1;
	while ((de = readdir(dir)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			rc |= unlinkat(d->td_fd, de->d_name, 0);
	closedir(dir);
	close(d->td_fd);
	rc |= rmdir(d->td_path);
	free(d);
	return rc ? -1 : 0;
}

static int dfd(void **state)
{
	return ((struct tdir *)*state)->td_fd;
}

/* ---- files ---- */

static char *jname(uint64_t gen)
{
	static char name[64];

	snprintf(name, sizeof(name), "journal.%" PRIu64, gen);
	return name;
}

static bool exists(int dirfd, const char *name)
{
	return faccessat(dirfd, name, F_OK, 0) == 0;
}

static size_t file_size(int dirfd, const char *name)
{
	struct stat st;

	assert_int_equal(fstatat(dirfd, name, &st, 0), 0);
	return (size_t)st.st_size;
}

/* Reads a whole file into a new buffer. */
static char *slurp(int dirfd, const char *name, size_t *len)
{
	size_t size = file_size(dirfd, name);
	char *buf = malloc(size ? size : 1);
	int fd = openat(dirfd, name, O_RDONLY);

	assert_non_null(buf);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, buf, size, 0), (ssize_t)size);
	close(fd);
	*len = size;
	return buf;
}

/* Replaces a file's contents with buf[0, len). */
static void spew(int dirfd, const char *name, const char *buf, size_t len)
{
	int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, buf, len), (ssize_t)len);
	close(fd);
}

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec / 1e9;
}

/* ---- entries ---- */

/* An entry and the storage its paths point into. */
struct tent {
	struct kv_jent t_e;
	char t_p1[KV_JPATH_MAX];
	char t_p2[KV_JPATH_MAX];
};

static void fill_path(char *p, uint32_t len, uint64_t salt)
{
	for (uint32_t k = 0; k < len; k++)
		p[k] = (char)(1 + (salt * 7 + k) % 255); /* any byte but NUL */
}

/*
 * Entry i of type `type`, every field set and distinct. Types that take no
 * path get one on even i; path2 is there for renames and every third i;
 * i == 7 carries two paths of KV_JPATH_MAX bytes.
 */
static void make_ent(struct tent *t, uint16_t type, uint64_t i)
{
	bool takes_path =
	    type <= KV_J_SETATTR || type == KV_J_MOVE || type == KV_J_NODE || i % 2 == 0;
	bool takes_path2 = type == KV_J_RENAME || i % 3 == 0;
	uint32_t len1 = i == 7 ? KV_JPATH_MAX : (uint32_t)(1 + i * 131 % 300);
	uint32_t len2 = i == 7 ? KV_JPATH_MAX : (uint32_t)(1 + i * 17 % 100);

	t->t_e = (struct kv_jent){
	    .je_type = type,
	    .je_flags = (uint32_t)(i * 3 + 1),
	    .je_mode = (uint32_t)(0100644 ^ i),
	    .je_uid = (uint32_t)(1000 + i),
	    .je_gid = (uint32_t)(2000 + i),
	    .je_atime_ns = -(int64_t)(i * 1000 + 1),
	    .je_mtime_ns = (int64_t)(i * 1000 + 2),
	    .je_ctime_ns = INT64_MAX - (int64_t)i,
	    .je_seq = UINT64_MAX - i,
	    .je_bucket = i * 11 + 5,
	    .je_off = i << 12,
	    .je_len = i * 4099 + 3,
	    .je_head_len = (uint32_t)(4096 * (i % 5 + 1)),
	    .je_gen = i + 77,
	    .je_next = (uint32_t)(i * 5 + 2), /* no map: je_flags of a PUT here is even */
	};
	if (takes_path) {
		fill_path(t->t_p1, len1, i);
		t->t_e.je_path = t->t_p1;
		t->t_e.je_path_len = len1;
	}
	if (takes_path2) {
		fill_path(t->t_p2, len2, i + 1000);
		t->t_e.je_path2 = t->t_p2;
		t->t_e.je_path2_len = len2;
	}
}

/* The type of entry i in a mixed sequence: every type in turn. */
static uint16_t mix_type(uint64_t i)
{
	return (uint16_t)(KV_J_MKDIR + i % NTYPES);
}

static size_t ent_size(const struct kv_jent *e)
{
	return pad8(sizeof(struct kv_jrec_head) + sizeof(struct kv_jrec_body) + e->je_path_len +
		    e->je_path2_len);
}

/*
 * Recomputes the checksum of the record at rec as ssd/format.h defines it:
 * XXH3-64 of the head, jh_csum zeroed, and the jh_len payload bytes.
 */
static uint64_t reseal(char *rec)
{
	struct kv_jrec_head h;

	memcpy(&h, rec, HEAD);
	h.jh_csum = 0;
	memcpy(rec, &h, HEAD);
	h.jh_csum = XXH3_64bits(rec, HEAD + h.jh_len);
	memcpy(rec, &h, HEAD);
	return h.jh_csum;
}

static void assert_ent_equal(const struct kv_jent *a, const struct kv_jent *b)
{
	assert_int_equal(a->je_type, b->je_type);
	assert_int_equal(a->je_flags, b->je_flags);
	assert_int_equal(a->je_mode, b->je_mode);
	assert_int_equal(a->je_uid, b->je_uid);
	assert_int_equal(a->je_gid, b->je_gid);
	assert_int_equal(a->je_atime_ns, b->je_atime_ns);
	assert_int_equal(a->je_mtime_ns, b->je_mtime_ns);
	assert_int_equal(a->je_ctime_ns, b->je_ctime_ns);
	assert_int_equal(a->je_seq, b->je_seq);
	assert_int_equal(a->je_bucket, b->je_bucket);
	assert_int_equal(a->je_off, b->je_off);
	assert_int_equal(a->je_len, b->je_len);
	assert_int_equal(a->je_head_len, b->je_head_len);
	assert_int_equal(a->je_gen, b->je_gen);
	assert_int_equal(a->je_path_len, b->je_path_len);
	assert_int_equal(a->je_path2_len, b->je_path2_len);
	assert_int_equal(a->je_next, b->je_next);
	assert_int_equal(a->je_ext == NULL, b->je_ext == NULL);
	if (a->je_ext)
		assert_memory_equal(a->je_ext, b->je_ext,
				    (size_t)a->je_next * sizeof(struct kv_jext));
	if (a->je_path_len)
		assert_memory_equal(a->je_path, b->je_path, a->je_path_len);
	if (a->je_path2_len)
		assert_memory_equal(a->je_path2, b->je_path2, a->je_path2_len);
}

/* ---- collecting what replay and load hand back ---- */

struct got {
	struct kv_jent g_e; /* paths point at copies owned here */
	uint64_t g_lsn;
};

struct log {
	struct got *l_v;
	size_t l_n;
	size_t l_cap;
	size_t l_stop_at; /* return 42 when the l_stop_at-th entry (1-based) arrives; 0: never */
};

/* A copy of a path, NULL only where the original pointer was. */
static char *dup_path(const char *p, uint32_t len)
{
	char *c;

	if (!p)
		return NULL;
	c = malloc(len + 1);
	assert_non_null(c);
	memcpy(c, p, len);
	return c;
}

static int collect(const struct kv_jent *e, uint64_t lsn, void *arg)
{
	struct log *l = arg;
	struct got *g;

	if (l->l_n == l->l_cap) {
		l->l_cap = l->l_cap ? 2 * l->l_cap : 64;
		l->l_v = realloc(l->l_v, l->l_cap * sizeof(*l->l_v));
		assert_non_null(l->l_v);
	}
	g = &l->l_v[l->l_n++];
	g->g_e = *e;
	g->g_e.je_path = dup_path(e->je_path, e->je_path_len);
	g->g_e.je_path2 = dup_path(e->je_path2, e->je_path2_len);
	g->g_e.je_ext = NULL;
	if (e->je_ext) {
		size_t n = (size_t)e->je_next * sizeof(struct kv_jext);
		void *ext = malloc(n);

		assert_non_null(ext);
		memcpy(ext, e->je_ext, n);
		g->g_e.je_ext = ext;
	}
	g->g_lsn = lsn;
	return l->l_n == l->l_stop_at ? 42 : 0;
}

static void log_reset(struct log *l)
{
	for (size_t i = 0; i < l->l_n; i++) {
		free((char *)l->l_v[i].g_e.je_path);
		free((char *)l->l_v[i].g_e.je_path2);
		free((void *)l->l_v[i].g_e.je_ext);
	}
	l->l_n = 0;
}

static void log_free(struct log *l)
{
	log_reset(l);
	free(l->l_v);
	*l = (struct log){.l_n = 0};
}

/* Replays from `from` into l (emptied first). Returns replay's return. */
static int replay(int dirfd, uint64_t from, struct log *l, uint64_t *last_gen, uint64_t *last_lsn)
{
	log_reset(l);
	return kv_journal_replay(dirfd, from, collect, l, last_gen, last_lsn);
}

/* Checks that l holds mixed entries first..first+n-1 with LSNs lsn0.. in order. */
static void assert_mix(const struct log *l, uint64_t first, uint64_t lsn0, size_t n)
{
	struct tent t;

	assert_int_equal(l->l_n, n);
	for (size_t k = 0; k < n; k++) {
		make_ent(&t, mix_type(first + k), first + k);
		assert_ent_equal(&l->l_v[k].g_e, &t.t_e);
		assert_int_equal(l->l_v[k].g_lsn, lsn0 + k);
	}
}

/*
 * Writes mixed entries first..first+n-1 to journal.<gen> with LSNs from
 * last_lsn + 1, and closes it. Fills end[k] (if not NULL) with the file
 * offset where entry k's record ends, counted from `base`.
 */
static void write_mix(int dirfd, uint64_t gen, uint64_t last_lsn, uint64_t first, size_t n,
		      size_t base, size_t *end)
{
	struct kv_journal *j = NULL;
	static struct tent t;
	uint64_t lsn;

	assert_int_equal(kv_journal_open(&j, dirfd, gen, last_lsn, DELAY_NS), 0);
	for (size_t k = 0; k < n; k++) {
		make_ent(&t, mix_type(first + k), first + k);
		assert_int_equal(kv_journal_append(j, &t.t_e, &lsn), 0);
		assert_int_equal(lsn, last_lsn + 1 + k);
		base += ent_size(&t.t_e);
		if (end)
			end[k] = base;
	}
	assert_int_equal(kv_journal_last_lsn(j), last_lsn + n);
	kv_journal_close(j);
}

/* ---- journal ---- */

/* Every type, every field, both paths up to KV_JPATH_MAX; LSNs go on after a reopen. */
static void test_roundtrip(void **state)
{
	int dirfd = dfd(state);
	const size_t n = 6 * NTYPES;
	struct log l = {.l_n = 0};
	uint64_t gen, lsn;
	size_t end[6 * NTYPES];

	write_mix(dirfd, 0, 0, 0, n, 0, end);
	assert_int_equal(file_size(dirfd, jname(0)), end[n - 1]);
	assert_int_equal(replay(dirfd, 0, &l, &gen, &lsn), 0);
	assert_mix(&l, 0, 1, n);
	assert_int_equal(gen, 0);
	assert_int_equal(lsn, n);
	assert_int_equal(file_size(dirfd, jname(0)), end[n - 1]);

	write_mix(dirfd, 0, n, n, 5, end[n - 1], NULL);
	assert_int_equal(replay(dirfd, 0, &l, &gen, &lsn), 0);
	assert_mix(&l, 0, 1, n + 5);
	assert_int_equal(lsn, n + 5);
	log_free(&l);
}

/* The bytes on disk, read with ssd/format.h alone. */
static void test_format(void **state)
{
	int dirfd = dfd(state);
	const size_t n = 2 * NTYPES;
	struct kv_jrec_head h;
	struct kv_jrec_body b;
	static struct tent t;
	size_t len, off = 0;
	uint64_t csum;
	char *buf;

	write_mix(dirfd, 0, 0, 0, n, 0, NULL);
	buf = slurp(dirfd, jname(0), &len);
	for (uint64_t i = 0; i < n; i++) {
		make_ent(&t, mix_type(i), i);
		assert_true(off + HEAD + BODY <= len);
		memcpy(&h, buf + off, HEAD);
		memcpy(&b, buf + off + HEAD, BODY);
		assert_int_equal(h.jh_magic, KV_JREC_MAGIC);
		assert_int_equal(h.jh_type, t.t_e.je_type);
		assert_int_equal(h.jh_version, KV_FORMAT_VERSION);
		assert_int_equal(h.jh_len, BODY + t.t_e.je_path_len + t.t_e.je_path2_len);
		assert_int_equal(h.jh_pad, 0);
		assert_int_equal(h.jh_lsn, i + 1);
		assert_int_equal(b.jb_seq, t.t_e.je_seq);
		assert_int_equal(b.jb_gen, t.t_e.je_gen);
		assert_int_equal(b.jb_path_len, t.t_e.je_path_len);
		assert_int_equal(b.jb_path2_len, t.t_e.je_path2_len);
		assert_int_equal(b.jb_next, t.t_e.je_next);
		assert_memory_equal(buf + off + HEAD + BODY, t.t_e.je_path, t.t_e.je_path_len);
		for (size_t k = HEAD + h.jh_len; k < ent_size(&t.t_e); k++)
			assert_int_equal(buf[off + k], 0);
		csum = h.jh_csum;
		assert_int_equal(reseal(buf + off), csum);
		off += ent_size(&t.t_e);
	}
	assert_int_equal(off, len);
	free(buf);
}

/* A non-zero return from fn stops the walk and comes back from replay. */
static void test_replay_fn_stops(void **state)
{
	int dirfd = dfd(state);
	struct log l = {.l_stop_at = 3};
	uint64_t gen, lsn;

	write_mix(dirfd, 0, 0, 0, 10, 0, NULL);
	assert_int_equal(replay(dirfd, 0, &l, &gen, &lsn), 42);
	assert_mix(&l, 0, 1, 3);
	log_free(&l);
}

static void test_no_journal(void **state)
{
	struct log l = {.l_n = 0};
	uint64_t gen = 99, lsn = 99;

	assert_int_equal(replay(dfd(state), 5, &l, &gen, &lsn), 0);
	assert_int_equal(l.l_n, 0);
	assert_int_equal(gen, 5);
	assert_int_equal(lsn, 0);
	log_free(&l);
}

static void test_append_einval(void **state)
{
	int dirfd = dfd(state);
	struct kv_journal *j = NULL;
	struct log l = {.l_n = 0};
	struct kv_jent bad[9];
	static struct tent t;
	uint64_t gen, lsn = 0;

	make_ent(&t, KV_J_RENAME, 1);
	for (size_t k = 0; k < 9; k++)
		bad[k] = t.t_e;
	bad[0].je_type = 0;
	bad[1].je_type = KV_J__MAX;
	bad[2].je_path_len = 0; /* a rename needs both paths */
	bad[3].je_path2_len = 0;
	bad[4].je_path_len = KV_JPATH_MAX + 1;
	bad[5].je_path2_len = KV_JPATH_MAX + 1;
	bad[6].je_path = NULL;
	bad[7].je_type = KV_J_MKDIR;
	bad[7].je_path_len = 0;
	bad[8].je_type = KV_J_PUT;
	bad[8].je_path2 = NULL;

	assert_int_equal(kv_journal_open(&j, dirfd, 0, 0, DELAY_NS), 0);
	for (size_t k = 0; k < 9; k++) {
		assert_int_equal(kv_journal_append(j, &bad[k], &lsn), -EINVAL);
		assert_int_equal(lsn, 0);
	}
	/* Every type but BUCKET, CKPT and CKPT_END needs a path (MOVE and NODE name theirs). */
	for (uint16_t type = KV_J_MKDIR; type < KV_J__MAX; type++) {
		bad[0] = t.t_e;
		bad[0].je_type = type;
		bad[0].je_path_len = 0;
		assert_int_equal(
		    kv_journal_append(j, &bad[0], &lsn),
		    type <= KV_J_SETATTR || type == KV_J_MOVE || type == KV_J_NODE ? -EINVAL : 0);
	}
	assert_int_equal(kv_journal_last_lsn(j), 3);
	assert_int_equal(kv_journal_append(j, &t.t_e, NULL), 0);
	assert_int_equal(kv_journal_last_lsn(j), 4);
	kv_journal_close(j);

	assert_int_equal(replay(dirfd, 0, &l, &gen, &lsn), 0);
	assert_int_equal(l.l_n, 4);
	assert_int_equal(l.l_v[0].g_e.je_type, KV_J_BUCKET);
	assert_int_equal(l.l_v[2].g_e.je_type, KV_J_CKPT_END);
	assert_int_equal(l.l_v[2].g_e.je_path_len, 0);
	assert_null(l.l_v[2].g_e.je_path);
	assert_ent_equal(&l.l_v[3].g_e, &t.t_e);
	log_free(&l);
}

/*
 * An unsynced append reaches the file within the commit delay; a sync does
 * not wait out a long delay, nor does close.
 */
static void test_commit_delay(void **state)
{
	int dirfd = dfd(state);
	struct kv_journal *j = NULL;
	struct log l = {.l_n = 0};
	static struct tent t;
	uint64_t gen, lsn;
	double t0;

	make_ent(&t, KV_J_PUT, 3);
	assert_int_equal(kv_journal_open(&j, dirfd, 0, 0, 10u * 1000 * 1000), 0);
	assert_int_equal(kv_journal_size(j), 0);
	assert_int_equal(kv_journal_append(j, &t.t_e, &lsn), 0);
	t0 = now_s();
	while (kv_journal_size(j) == 0 && now_s() - t0 < 10)
		usleep(1000);
	assert_int_equal(kv_journal_size(j), ent_size(&t.t_e));
	assert_int_equal(file_size(dirfd, jname(0)), ent_size(&t.t_e));
	assert_int_equal(kv_journal_sync(j, lsn), 0);
	kv_journal_close(j);

	assert_int_equal(kv_journal_open(&j, dirfd, 0, 1, 30ull * 1000 * 1000 * 1000), 0);
	assert_int_equal(kv_journal_size(j), ent_size(&t.t_e));
	t0 = now_s();
	assert_int_equal(kv_journal_append(j, &t.t_e, &lsn), 0);
	assert_int_equal(lsn, 2);
	usleep(50 * 1000); /* the commit thread is waiting out the delay now */
	assert_int_equal(kv_journal_sync(j, lsn), 0);
	assert_int_equal(file_size(dirfd, jname(0)), 2 * ent_size(&t.t_e));
	assert_int_equal(kv_journal_append(j, &t.t_e, &lsn), 0);
	assert_int_equal(kv_journal_sync(j, UINT64_MAX), 0); /* everything appended so far */
	assert_int_equal(kv_journal_size(j), 3 * ent_size(&t.t_e));
	assert_int_equal(kv_journal_append(j, &t.t_e, &lsn), 0);
	kv_journal_close(j);
	assert_true(now_s() - t0 < 10);

	assert_int_equal(replay(dirfd, 0, &l, &gen, &lsn), 0);
	assert_int_equal(l.l_n, 4);
	assert_int_equal(lsn, 4);
	log_free(&l);
}

struct gc_arg {
	struct kv_journal *ga_j;
	int ga_id;
	uint64_t ga_lsn[GC_PER]; /* the LSN each append got */
	atomic_int *ga_failures;
};

static void *gc_thread(void *p)
{
	struct gc_arg *a = p;
	char path[32];
	struct kv_jent e = {.je_type = KV_J_PUT, .je_path = path};

	for (int k = 0; k < GC_PER; k++) {
		e.je_path_len = (uint32_t)snprintf(path, sizeof(path), "t%d/k%d", a->ga_id, k);
		e.je_seq = (uint64_t)a->ga_id << 32 | (uint64_t)k;
		if (kv_journal_append(a->ga_j, &e, &a->ga_lsn[k]) ||
		    kv_journal_sync(a->ga_j, a->ga_lsn[k]))
			atomic_fetch_add(a->ga_failures, 1);
	}
	return NULL;
}

/* Many appenders syncing at once: every synced entry is in the file, in LSN order. */
static void test_group_commit(void **state)
{
	int dirfd = dfd(state);
	static struct gc_arg args[GC_THREADS];
	pthread_t th[GC_THREADS];
	struct kv_journal *j = NULL;
	struct log l = {.l_n = 0};
	atomic_int failures = 0;
	uint64_t gen, lsn, seq;
	char path[32];
	int id, k;

	assert_int_equal(kv_journal_open(&j, dirfd, 0, 0, DELAY_NS), 0);
	for (int i = 0; i < GC_THREADS; i++) {
		args[i] = (struct gc_arg){.ga_j = j, .ga_id = i, .ga_failures = &failures};
		assert_int_equal(pthread_create(&th[i], NULL, gc_thread, &args[i]), 0);
	}
	for (int i = 0; i < GC_THREADS; i++)
		pthread_join(th[i], NULL);
	assert_int_equal(atomic_load(&failures), 0);
	assert_int_equal(kv_journal_last_lsn(j), GC_THREADS * GC_PER);

	/* Everything was synced: the file holds it all before close. */
	assert_int_equal(replay(dirfd, 0, &l, &gen, &lsn), 0);
	assert_int_equal(lsn, GC_THREADS * GC_PER);
	assert_int_equal(l.l_n, GC_THREADS * GC_PER);
	for (size_t i = 0; i < l.l_n; i++) {
		assert_int_equal(l.l_v[i].g_lsn, i + 1);
		seq = l.l_v[i].g_e.je_seq;
		id = (int)(seq >> 32);
		k = (int)(seq & UINT32_MAX);
		assert_in_range(id, 0, GC_THREADS - 1);
		assert_in_range(k, 0, GC_PER - 1);
		assert_int_equal(args[id].ga_lsn[k], i + 1);
		snprintf(path, sizeof(path), "t%d/k%d", id, k);
		assert_int_equal(l.l_v[i].g_e.je_path_len, strlen(path));
		assert_memory_equal(l.l_v[i].g_e.je_path, path, strlen(path));
	}
	for (int i = 0; i < GC_THREADS; i++)
		for (k = 1; k < GC_PER; k++)
			assert_true(args[i].ga_lsn[k] > args[i].ga_lsn[k - 1]);
	kv_journal_close(j);
	log_free(&l);
}

/*
 * The newest file cut at every byte of its last record: replay returns the
 * records before it and truncates the file to where the last one ended.
 * Zeros after the last record (a size that got ahead of the data) too.
 */
static void test_torn_tail(void **state)
{
	int dirfd = dfd(state);
	const size_t n = 5;
	struct log l = {.l_n = 0};
	uint64_t gen, lsn;
	size_t end[5], len;
	char *orig;

	write_mix(dirfd, 0, 0, 0, n, 0, end);
	orig = slurp(dirfd, jname(0), &len);
	assert_int_equal(len, end[n - 1]);
	for (size_t cut = end[n - 2]; cut < end[n - 1]; cut++) {
		spew(dirfd, jname(0), orig, cut);
		assert_int_equal(replay(dirfd, 0, &l, &gen, &lsn), 0);
		assert_mix(&l, 0, 1, n - 1);
		assert_int_equal(lsn, n - 1);
		assert_int_equal(file_size(dirfd, jname(0)), end[n - 2]);
	}

	orig = realloc(orig, len + 4096);
	assert_non_null(orig);
	memset(orig + len, 0, 4096);
	spew(dirfd, jname(0), orig, len + 4096);
	assert_int_equal(replay(dirfd, 0, &l, &gen, &lsn), 0);
	assert_mix(&l, 0, 1, n);
	assert_int_equal(file_size(dirfd, jname(0)), len);

	/* The truncated file takes appends again. */
	write_mix(dirfd, 0, n, n, 2, len, NULL);
	assert_int_equal(replay(dirfd, 0, &l, &gen, &lsn), 0);
	assert_mix(&l, 0, 1, n + 2);
	free(orig);
	log_free(&l);
}

/*
 * A bit flipped in each byte of each record (head, body, paths, padding):
 * that record and those after it are not returned. In the last record it
 * is a torn tail (file truncated); before good records it is -EIO (file
 * left alone).
 */
static void test_bitflip(void **state)
{
	int dirfd = dfd(state);
	const size_t n = 4;
	struct log l = {.l_n = 0};
	uint64_t gen, lsn;
	size_t end[4], len, start;
	char *orig, *copy;

	write_mix(dirfd, 0, 0, 1, n, 0, end); /* entries 1..4: each has padding bytes */
	orig = slurp(dirfd, jname(0), &len);
	copy = malloc(len);
	assert_non_null(copy);
	for (size_t r = 0; r < n; r++) {
		start = r ? end[r - 1] : 0;
		for (size_t b = start; b < end[r]; b++) {
			memcpy(copy, orig, len);
			copy[b] ^= (char)(1u << (b % 8));
			spew(dirfd, jname(0), copy, len);
			if (r == n - 1) {
				assert_int_equal(replay(dirfd, 0, &l, &gen, &lsn), 0);
				assert_int_equal(file_size(dirfd, jname(0)), start);
			} else {
				assert_int_equal(replay(dirfd, 0, &l, &gen, &lsn), -EIO);
				assert_int_equal(file_size(dirfd, jname(0)), len);
			}
			assert_mix(&l, 1, 1, r);
		}
	}
	free(copy);
	free(orig);
	log_free(&l);
}

/*
 * Entries before and after a rotation replay across both files in order;
 * buffered ones went to the old file; drop_before removes older files.
 */
static void test_rotate(void **state)
{
	int dirfd = dfd(state);
	struct kv_journal *j = NULL;
	struct log l = {.l_n = 0};
	static struct tent t;
	uint64_t gen, lsn, new_gen = 0;

	assert_int_equal(kv_journal_open(&j, dirfd, 0, 0, 10u * 1000 * 1000), 0);
	for (uint64_t i = 0; i < 8; i++) {
		make_ent(&t, mix_type(i), i);
		assert_int_equal(kv_journal_append(j, &t.t_e, &lsn), 0);
		if (i == 4)
			assert_int_equal(kv_journal_sync(j, lsn), 0);
	}
	assert_int_equal(kv_journal_rotate(j, &new_gen), 0);
	assert_int_equal(new_gen, 1);
	assert_int_equal(kv_journal_size(j), 0);
	assert_true(exists(dirfd, jname(1)));
	assert_int_equal(file_size(dirfd, jname(1)), 0);

	/* Nothing is in flight: the files can be read while the journal is open. */
	assert_int_equal(replay(dirfd, 0, &l, &gen, &lsn), 0);
	assert_mix(&l, 0, 1, 8);
	assert_int_equal(gen, 1);
	assert_int_equal(lsn, 8);

	for (uint64_t i = 8; i < 12; i++) {
		make_ent(&t, mix_type(i), i);
		assert_int_equal(kv_journal_append(j, &t.t_e, &lsn), 0);
		assert_int_equal(lsn, i + 1);
	}
	assert_int_equal(kv_journal_sync(j, lsn), 0);
	assert_true(kv_journal_size(j) > 0);

	/* journal.2 already there: the rotation fails, appends carry on in journal.1. */
	spew(dirfd, jname(2), "", 0);
	assert_int_equal(kv_journal_rotate(j, &new_gen), -EEXIST);
	assert_int_equal(new_gen, 1);
	assert_int_equal(unlinkat(dirfd, jname(2), 0), 0);
	make_ent(&t, mix_type(12), 12);
	assert_int_equal(kv_journal_append(j, &t.t_e, &lsn), 0);
	kv_journal_close(j);

	assert_int_equal(replay(dirfd, 0, &l, &gen, &lsn), 0);
	assert_mix(&l, 0, 1, 13);
	assert_int_equal(gen, 1);
	assert_int_equal(lsn, 13);
	assert_int_equal(replay(dirfd, 1, &l, &gen, &lsn), 0);
	assert_mix(&l, 8, 9, 5);

	kv_journal_drop_before(dirfd, 1);
	assert_false(exists(dirfd, jname(0)));
	assert_true(exists(dirfd, jname(1)));
	assert_int_equal(replay(dirfd, 0, &l, &gen, &lsn), 0);
	assert_mix(&l, 8, 9, 5);
	assert_int_equal(gen, 1);

	/* Rotating twice more, then dropping all but the newest. */
	assert_int_equal(kv_journal_open(&j, dirfd, 1, 13, DELAY_NS), 0);
	assert_int_equal(kv_journal_rotate(j, &new_gen), 0);
	assert_int_equal(new_gen, 2);
	make_ent(&t, mix_type(13), 13);
	assert_int_equal(kv_journal_append(j, &t.t_e, &lsn), 0);
	assert_int_equal(kv_journal_rotate(j, &new_gen), 0);
	assert_int_equal(new_gen, 3);
	kv_journal_close(j);
	kv_journal_drop_before(dirfd, 3);
	assert_false(exists(dirfd, jname(1)));
	assert_false(exists(dirfd, jname(2)));
	assert_true(exists(dirfd, jname(3)));
	assert_int_equal(replay(dirfd, 0, &l, &gen, &lsn), 0);
	assert_int_equal(l.l_n, 0);
	assert_int_equal(gen, 3);
	assert_int_equal(lsn, 0);
	log_free(&l);
}

/*
 * Only canonical journal.<gen> names count; a missing generation between
 * two others, damage in an older one, or LSNs going back are -EIO.
 */
static void test_replay_generations(void **state)
{
	static const char *const junk[] = {"journal.x",
					   "journal.01",
					   "journal.1.tmp",
					   "journal.",
					   "journal.-1",
					   "journal.+3",
					   "journal.99999999999999999999"};
	int dirfd = dfd(state);
	struct log l = {.l_n = 0};
	uint64_t gen, lsn;
	size_t end0[3], len;
	char *orig;

	write_mix(dirfd, 0, 0, 0, 3, 0, end0);
	write_mix(dirfd, 1, 3, 3, 2, 0, NULL);
	write_mix(dirfd, 2, 5, 5, 2, 0, NULL);
	for (size_t k = 0; k < sizeof(junk) / sizeof(junk[0]); k++)
		spew(dirfd, junk[k], "garbage", 7);
	assert_int_equal(replay(dirfd, 0, &l, &gen, &lsn), 0);
	assert_mix(&l, 0, 1, 7);
	assert_int_equal(gen, 2);
	assert_int_equal(lsn, 7);
	assert_int_equal(replay(dirfd, 1, &l, &gen, &lsn), 0);
	assert_mix(&l, 3, 4, 4);
	assert_int_equal(replay(dirfd, 3, &l, &gen, &lsn), 0);
	assert_int_equal(l.l_n, 0);
	assert_int_equal(gen, 3);
	assert_int_equal(lsn, 0);

	/* A torn tail in an older generation is corruption: nothing is cut. */
	orig = slurp(dirfd, jname(0), &len);
	spew(dirfd, jname(0), orig, len - 1);
	assert_int_equal(replay(dirfd, 0, &l, &gen, &lsn), -EIO);
	assert_mix(&l, 0, 1, 2);
	assert_int_equal(file_size(dirfd, jname(0)), len - 1);
	orig[end0[1] + 40] ^= 1;
	spew(dirfd, jname(0), orig, len);
	assert_int_equal(replay(dirfd, 0, &l, &gen, &lsn), -EIO);
	assert_mix(&l, 0, 1, 2);
	orig[end0[1] + 40] ^= 1;
	spew(dirfd, jname(0), orig, len);
	assert_int_equal(replay(dirfd, 0, &l, &gen, &lsn), 0);
	assert_int_equal(l.l_n, 7);

	/* journal.1 missing. */
	assert_int_equal(renameat(dirfd, jname(1), dirfd, "saved"), 0);
	assert_int_equal(replay(dirfd, 0, &l, &gen, &lsn), -EIO);
	assert_mix(&l, 0, 1, 3);
	assert_int_equal(replay(dirfd, 2, &l, &gen, &lsn), 0);
	assert_mix(&l, 5, 6, 2);

	/* journal.1 again, but its first LSN repeats journal.0's last. */
	assert_int_equal(unlinkat(dirfd, "saved", 0), 0);
	write_mix(dirfd, 1, 2, 3, 2, 0, NULL);
	assert_int_equal(replay(dirfd, 0, &l, &gen, &lsn), -EIO);
	assert_mix(&l, 0, 1, 3);
	free(orig);
	log_free(&l);
}

/* ---- checkpoint ---- */

/* Checkpoint entry i: a directory every 100 entries, keys in it between. */
static void ckpt_ent(struct kv_jent *e, char *path, uint64_t i)
{
	uint64_t dir = i / 100;
	int len = i % 100 ? snprintf(path, 32, "d%" PRIu64 "/k%" PRIu64, dir, i)
			  : snprintf(path, 32, "d%" PRIu64, dir);

	*e = (struct kv_jent){
	    .je_type = i % 100 ? KV_J_PUT : KV_J_MKDIR,
	    .je_mode = i % 100 ? 0100644 : 040755,
	    .je_uid = (uint32_t)i,
	    .je_gid = 7,
	    .je_atime_ns = (int64_t)i * 3,
	    .je_mtime_ns = (int64_t)i * 5,
	    .je_ctime_ns = (int64_t)i * 7,
	    .je_path = path,
	    .je_path_len = (uint32_t)len,
	};
	if (i % 100) {
		e->je_seq = i + 1;
		e->je_bucket = i / 1000;
		e->je_off = (i % 1000) << 16;
		e->je_len = 60000 + i;
		e->je_head_len = 4096;
	}
}

struct producer {
	uint64_t g_i;
	uint64_t g_n;
	uint64_t g_bad_at; /* entry g_bad_at comes out as `g_bad`; UINT64_MAX: never */
	struct kv_jent g_bad;
	int g_fail_at_end; /* returned instead of 0 at the end */
	char g_path[32];
};

static int gen_next(struct kv_jent *e, void *arg)
{
	struct producer *g = arg;

	if (g->g_i == g->g_n)
		return g->g_fail_at_end;
	if (g->g_i == g->g_bad_at)
		*e = g->g_bad;
	else
		ckpt_ent(e, g->g_path, g->g_i);
	g->g_i++;
	return 1;
}

struct ckpt_check {
	uint64_t cc_n;
	char cc_path[32];
};

static int ckpt_verify(const struct kv_jent *e, uint64_t lsn, void *arg)
{
	struct ckpt_check *c = arg;
	struct kv_jent want;

	ckpt_ent(&want, c->cc_path, c->cc_n);
	assert_ent_equal(e, &want);
	assert_int_equal(lsn, c->cc_n + 1);
	c->cc_n++;
	return 0;
}

static int ckpt_count(const struct kv_jent *e, uint64_t lsn, void *arg)
{
	(void)e;
	(void)lsn;
	(*(uint64_t *)arg)++;
	return 0;
}

static struct producer producer_of(uint64_t n)
{
	return (struct producer){.g_n = n, .g_bad_at = UINT64_MAX};
}

/* 100,000 entries written and loaded back identical; prints the times. */
static void test_ckpt_big(void **state)
{
	int dirfd = dfd(state);
	struct producer g = producer_of(CKPT_BIG);
	struct ckpt_check c = {.cc_n = 0};
	uint64_t seq, bucket, gen, n = 0;
	double t0, t1, t2;

	t0 = now_s();
	assert_int_equal(kv_ckpt_write(dirfd, 123456, 789, 42, gen_next, &g), 0);
	t1 = now_s();
	assert_int_equal(kv_ckpt_load(dirfd, ckpt_count, &n, &seq, &bucket, &gen), 0);
	t2 = now_s();
	assert_int_equal(n, CKPT_BIG);
	assert_int_equal(seq, 123456);
	assert_int_equal(bucket, 789);
	assert_int_equal(gen, 42);
	assert_false(exists(dirfd, "checkpoint.tmp"));
	print_message("checkpoint of %u entries (%zu bytes): write %.3f s, load %.3f s\n", CKPT_BIG,
		      file_size(dirfd, "checkpoint"), t1 - t0, t2 - t1);

	seq = bucket = gen = 0;
	assert_int_equal(kv_ckpt_load(dirfd, ckpt_verify, &c, &seq, &bucket, &gen), 0);
	assert_int_equal(c.cc_n, CKPT_BIG);
	assert_int_equal(gen, 42);
}

/* The entries of test_ckpt_img: ckpt_ent's, with one large map at ic_big_at. */
struct img_check {
	uint64_t ic_n, ic_big_at;
	const struct kv_jent *ic_big;
	char ic_path[32];
};

static int img_verify(const struct kv_jent *e, uint64_t lsn, void *arg)
{
	struct img_check *c = arg;
	struct kv_jent want;

	assert_int_equal(lsn, c->ic_n + 1);
	if (c->ic_n == c->ic_big_at)
		assert_ent_equal(e, c->ic_big);
	else {
		ckpt_ent(&want, c->ic_path, c->ic_n < c->ic_big_at ? c->ic_n : c->ic_n - 1);
		assert_ent_equal(e, &want);
	}
	c->ic_n++;
	return 0;
}

/*
 * A checkpoint built as an image (kv_ckpt_img_*), with room reserved for
 * more than it gets and one entry (a 9 MiB map) larger than a chunk: it
 * loads back whole and in order; a bad entry is refused and leaves no
 * trace.
 */
static void test_ckpt_img(void **state)
{
	const uint32_t nx = (9u << 20) / sizeof(struct kv_jext);
	int dirfd = dfd(state);
	struct img_check c = {.ic_big_at = 1500};
	struct kv_jent e, big = {
			      .je_type = KV_J_PUT,
			      .je_flags = KV_JPUT_EXTENTS,
			      .je_mode = 0100600,
			      .je_seq = 99,
			      .je_len = 1ull << 40,
			      .je_next = nx,
			      .je_path = "big",
			      .je_path_len = 3,
			  };
	struct kv_ckpt_img *im;
	uint64_t seq, bucket, gen;
	char path[32], *x = malloc((size_t)nx * sizeof(struct kv_jext));

	assert_non_null(x);
	for (size_t i = 0; i < (size_t)nx * sizeof(struct kv_jext); i++)
		x[i] = (char)(i * 7 + i / 4093);
	big.je_ext = x;
	c.ic_big = &big;
	assert_int_equal(kv_ckpt_img_new(&im, 20u << 20), 0);
	for (uint64_t i = 0; i < 3000; i++) {
		if (i == c.ic_big_at) {
			assert_int_equal(kv_ckpt_img_add(im, &big), 0);
			e = (struct kv_jent){.je_type = KV_J_CKPT_END};
			assert_int_equal(kv_ckpt_img_add(im, &e), -EINVAL);
		}
		ckpt_ent(&e, path, i);
		assert_int_equal(kv_ckpt_img_add(im, &e), 0);
	}
	assert_int_equal(kv_ckpt_img_write(im, dirfd, 5, 6, 7), 0);
	kv_ckpt_img_free(im);
	assert_false(exists(dirfd, "checkpoint.tmp"));
	assert_int_equal(kv_ckpt_size(dirfd), file_size(dirfd, "checkpoint"));
	assert_int_equal(kv_ckpt_load(dirfd, img_verify, &c, &seq, &bucket, &gen), 0);
	assert_int_equal(c.ic_n, 3001);
	assert_int_equal(seq, 5);
	assert_int_equal(bucket, 6);
	assert_int_equal(gen, 7);
	free(x);
}

/* An empty checkpoint, a replaced one, and fn's return. */
static void test_ckpt_small(void **state)
{
	int dirfd = dfd(state);
	struct producer g = producer_of(0);
	struct ckpt_check c = {.cc_n = 0};
	uint64_t seq, bucket, gen;
	struct log l = {.l_stop_at = 2};

	assert_int_equal(kv_ckpt_write(dirfd, 1, 2, 3, gen_next, &g), 0);
	assert_int_equal(kv_ckpt_load(dirfd, ckpt_verify, &c, &seq, &bucket, &gen), 0);
	assert_int_equal(c.cc_n, 0);
	assert_int_equal(seq, 1);
	assert_int_equal(bucket, 2);
	assert_int_equal(gen, 3);

	g = producer_of(10);
	assert_int_equal(kv_ckpt_write(dirfd, 4, 5, 6, gen_next, &g), 0);
	assert_int_equal(kv_ckpt_load(dirfd, ckpt_verify, &c, &seq, &bucket, &gen), 0);
	assert_int_equal(c.cc_n, 10);
	assert_int_equal(gen, 6);
	assert_int_equal(kv_ckpt_load(dirfd, collect, &l, &seq, &bucket, &gen), 42);
	assert_int_equal(l.l_n, 2);
	log_free(&l);
}

static int ckpt_never(const struct kv_jent *e, uint64_t lsn, void *arg)
{
	(void)e;
	(void)lsn;
	(*(int *)arg)++;
	return 0;
}

static void assert_ckpt_eio(int dirfd)
{
	uint64_t seq, bucket, gen;
	int calls = 0;

	assert_int_equal(kv_ckpt_load(dirfd, ckpt_never, &calls, &seq, &bucket, &gen), -EIO);
	assert_int_equal(calls, 0);
}

/*
 * Damage anywhere is -EIO before fn sees anything: a bit flipped in any
 * byte, a cut at any byte (the END record lost), bytes after END.
 */
static void test_ckpt_damaged(void **state)
{
	int dirfd = dfd(state);
	struct producer g = producer_of(10);
	uint64_t seq, bucket, gen, n = 0;
	char *orig, *copy;
	size_t len;

	assert_int_equal(kv_ckpt_load(dirfd, ckpt_count, &n, &seq, &bucket, &gen), -ENOENT);
	assert_int_equal(n, 0);
	assert_int_equal(kv_ckpt_write(dirfd, 1, 2, 3, gen_next, &g), 0);
	orig = slurp(dirfd, "checkpoint", &len);
	copy = malloc(len + 8);
	assert_non_null(copy);

	for (size_t b = 0; b < len; b++) {
		memcpy(copy, orig, len);
		copy[b] ^= (char)(1u << (b % 8));
		spew(dirfd, "checkpoint", copy, len);
		assert_ckpt_eio(dirfd);
	}
	for (size_t cut = 0; cut < len; cut++) {
		spew(dirfd, "checkpoint", orig, cut);
		assert_ckpt_eio(dirfd);
	}
	memcpy(copy, orig, len);
	memset(copy + len, 0, 8);
	spew(dirfd, "checkpoint", copy, len + 8);
	assert_ckpt_eio(dirfd);

	spew(dirfd, "checkpoint", orig, len);
	assert_int_equal(kv_ckpt_load(dirfd, ckpt_count, &n, &seq, &bucket, &gen), 0);
	assert_int_equal(n, 10);
	free(copy);
	free(orig);
}

/* Offset of record k (0 = header) in a checkpoint image. */
static size_t ckpt_rec(const char *buf, size_t k)
{
	struct kv_jrec_head h;
	size_t off = 0;

	while (k--) {
		memcpy(&h, buf + off, HEAD);
		off += pad8(HEAD + h.jh_len);
	}
	return off;
}

/* Rewrites a field of record k and reseals it, so only the structure is wrong. */
static void ckpt_patch(int dirfd, const char *orig, size_t len, size_t k, size_t field,
		       uint64_t val, size_t width)
{
	char *copy = malloc(len);
	size_t off = ckpt_rec(orig, k);

	assert_non_null(copy);
	memcpy(copy, orig, len);
	memcpy(copy + off + field, &val, width);
	reseal(copy + off);
	spew(dirfd, "checkpoint", copy, len);
	free(copy);
}

/*
 * Records that pass their checksum but break the checkpoint's structure:
 * wrong END count, an index out of place, a second header, END too early.
 */
static void test_ckpt_structure(void **state)
{
	int dirfd = dfd(state);
	struct producer g = producer_of(10);
	const size_t end = 11; /* header, 10 entries, END */
	const size_t body_len = HEAD + offsetof(struct kv_jrec_body, jb_len);
	const size_t lsn = offsetof(struct kv_jrec_head, jh_lsn);
	const size_t type = offsetof(struct kv_jrec_head, jh_type);
	uint64_t seq, bucket, gen, n = 0;
	char *orig;
	size_t len;

	assert_int_equal(kv_ckpt_write(dirfd, 1, 2, 3, gen_next, &g), 0);
	orig = slurp(dirfd, "checkpoint", &len);
	assert_int_equal(ckpt_rec(orig, end + 1), len);

	ckpt_patch(dirfd, orig, len, end, body_len, 10, 8); /* the right count: loads */
	assert_int_equal(kv_ckpt_load(dirfd, ckpt_count, &n, &seq, &bucket, &gen), 0);
	assert_int_equal(n, 10);
	ckpt_patch(dirfd, orig, len, end, body_len, 9, 8);
	assert_ckpt_eio(dirfd);
	ckpt_patch(dirfd, orig, len, end, body_len, 11, 8);
	assert_ckpt_eio(dirfd);
	ckpt_patch(dirfd, orig, len, 0, lsn, 1, 8);
	assert_ckpt_eio(dirfd);
	ckpt_patch(dirfd, orig, len, 4, lsn, 5, 8);
	assert_ckpt_eio(dirfd);
	ckpt_patch(dirfd, orig, len, end, lsn, 12, 8);
	assert_ckpt_eio(dirfd);
	ckpt_patch(dirfd, orig, len, 4, type, KV_J_CKPT, 2);
	assert_ckpt_eio(dirfd);
	ckpt_patch(dirfd, orig, len, 0, type, KV_J_BUCKET, 2);
	assert_ckpt_eio(dirfd);
	ckpt_patch(dirfd, orig, len, 4, type, KV_J_CKPT_END, 2);
	assert_ckpt_eio(dirfd);
	free(orig);
}

/* A bad entry or a failing producer: the error comes back, the old checkpoint stays. */
static void test_ckpt_write_fails(void **state)
{
	int dirfd = dfd(state);
	struct ckpt_check c = {.cc_n = 0};
	struct producer g = producer_of(5);
	uint64_t seq, bucket, gen;
	static struct tent t;
	struct kv_jent bad[4];

	assert_int_equal(kv_ckpt_write(dirfd, 1, 2, 3, gen_next, &g), 0);
	make_ent(&t, KV_J_MKDIR, 1);
	for (size_t k = 0; k < 4; k++)
		bad[k] = t.t_e;
	bad[0].je_path_len = 0;
	bad[1].je_type = KV_J_CKPT;
	bad[2].je_type = KV_J_CKPT_END;
	bad[3].je_type = KV_J__MAX;
	for (size_t k = 0; k < 4; k++) {
		g = producer_of(50);
		g.g_bad_at = 20;
		g.g_bad = bad[k];
		assert_int_equal(kv_ckpt_write(dirfd, 7, 8, 9, gen_next, &g), -EINVAL);
		assert_false(exists(dirfd, "checkpoint.tmp"));
	}
	g = producer_of(50);
	g.g_fail_at_end = -ENOSPC;
	assert_int_equal(kv_ckpt_write(dirfd, 7, 8, 9, gen_next, &g), -ENOSPC);
	assert_false(exists(dirfd, "checkpoint.tmp"));

	assert_int_equal(kv_ckpt_load(dirfd, ckpt_verify, &c, &seq, &bucket, &gen), 0);
	assert_int_equal(c.cc_n, 5);
	assert_int_equal(seq, 1);
	assert_int_equal(bucket, 2);
	assert_int_equal(gen, 3);
}

/* ---- format version 2: extent maps, MOVE extent indexes, version 1 records ---- */

#define JEXT	sizeof(struct kv_jext)
#define BIG_EXT 200000u /* a map larger than the group-commit and checkpoint buffers */

/* Extent k of the map with this seed, every field distinct; the last one the manifest. */
static struct kv_jext jext_of(uint64_t seed, uint32_t k, uint32_t n)
{
	return (struct kv_jext){
	    .jx_bucket = seed * 1000003 + k,
	    .jx_off = (uint64_t)k << 21 | 4096,
	    .jx_seq = UINT64_MAX - seed - k,
	    .jx_index = k + 1 == n ? KV_MANIFEST_INDEX : k,
	    .jx_len = (2u << 20) - k % 4096,
	    .jx_head_len = 4096 * (1 + k % 3),
	    .jx_flags = k % 7 == 3 ? KV_JX_UNWRITTEN : 0,
	};
}

/* A map of n extents, packed as on disk (malloc'ed). */
static void *jmap(uint64_t seed, uint32_t n)
{
	char *m = malloc((size_t)n * JEXT);

	assert_non_null(m);
	for (uint32_t k = 0; k < n; k++) {
		struct kv_jext x = jext_of(seed, k, n);

		memcpy(m + (size_t)k * JEXT, &x, JEXT);
	}
	return m;
}

/* Checks every field of every extent of a decoded map (unaligned) against jext_of. */
static void assert_jmap(const struct kv_jent *e, uint64_t seed, uint32_t n)
{
	assert_int_equal(e->je_next, n);
	assert_non_null(e->je_ext);
	for (uint32_t k = 0; k < n; k++) {
		struct kv_jext got, want = jext_of(seed, k, n);

		memcpy(&got, (const char *)e->je_ext + (size_t)k * JEXT, JEXT);
		if (got.jx_bucket != want.jx_bucket || got.jx_off != want.jx_off ||
		    got.jx_seq != want.jx_seq || got.jx_index != want.jx_index ||
		    got.jx_len != want.jx_len || got.jx_head_len != want.jx_head_len ||
		    got.jx_flags != want.jx_flags)
			fail_msg("map %" PRIu64 ": extent %u differs", seed, k);
	}
}

/* What the extent tests write: entry k of a short sequence, its map in maps[k]. */
enum { XN = 7 };

static void xent(struct kv_jent *e, void **maps, size_t k)
{
	static const uint32_t counts[XN] = {3, 0, 0, BIG_EXT, 0, 1, 0};
	static const char *const paths[XN] = {"a/x", "a/x", "a/y", "big", "b", "c", "d"};

	*e = (struct kv_jent){
	    .je_type = KV_J_PUT,
	    .je_mode = 0100600,
	    .je_seq = 1000 + k,
	    .je_len = (uint64_t)(k + 1) << 30,
	    .je_path = paths[k],
	    .je_path_len = (uint32_t)strlen(paths[k]),
	};
	if (counts[k]) {
		e->je_flags = KV_JPUT_EXTENTS;
		e->je_next = counts[k];
		e->je_ext = maps[k];
	}
	switch (k) {
	case 1: /* a move of extent 5 */
		e->je_type = KV_J_MOVE;
		e->je_next = 5;
		e->je_bucket = 9;
		e->je_off = 8192;
		break;
	case 2: /* a move of a manifest */
		e->je_type = KV_J_MOVE;
		e->je_next = KV_MANIFEST_INDEX;
		break;
	case 4: /* a WHOLE put, as in version 1 */
		e->je_bucket = 3;
		e->je_off = 4096;
		e->je_head_len = 4096;
		break;
	case 6: /* a rename's flags are not a map's */
		e->je_type = KV_J_RENAME;
		e->je_flags = KV_JPUT_EXTENTS;
		e->je_path2 = "e";
		e->je_path2_len = 1;
		break;
	}
}

static void **xmaps(void)
{
	void **maps = calloc(XN, sizeof(*maps));
	struct kv_jent e;

	assert_non_null(maps);
	for (size_t k = 0; k < XN; k++) {
		xent(&e, maps, k);
		if (e.je_flags & KV_JPUT_EXTENTS && e.je_type == KV_J_PUT)
			maps[k] = jmap(k, e.je_next);
	}
	return maps;
}

static void xmaps_free(void **maps)
{
	for (size_t k = 0; k < XN; k++)
		free(maps[k]);
	free(maps);
}

/* Checks that got[0..XN) is the extent test's sequence. */
static void assert_xents(const struct got *got, void **maps)
{
	for (size_t k = 0; k < XN; k++) {
		struct kv_jent want;

		xent(&want, maps, k);
		assert_ent_equal(&got[k].g_e, &want);
		if (want.je_ext)
			assert_jmap(&got[k].g_e, k, want.je_next);
	}
}

/* The checkpoint producer of the extent test's sequence. */
struct xprod {
	void **xp_maps;
	size_t xp_k;
};

static int xckpt_next(struct kv_jent *e, void *arg)
{
	struct xprod *xp = arg;

	if (xp->xp_k == XN)
		return 0;
	xent(e, xp->xp_maps, xp->xp_k++);
	return 1;
}

/* Size of the record of the extent test's entry k. */
static size_t xent_size(void **maps, size_t k)
{
	struct kv_jent e;

	xent(&e, maps, k);
	return pad8(HEAD + BODY + e.je_path_len + e.je_path2_len +
		    (e.je_ext ? e.je_next * JEXT : 0));
}

/*
 * PUTs with extent maps (3 entries, one, and 200,000: larger than every
 * buffer), MOVEs with an extent index, a WHOLE PUT and a rename whose flags
 * look like KV_JPUT_EXTENTS: through the journal (one batch) and a
 * checkpoint, every field of every extent back; the bytes on disk as
 * ssd/format.h draws them.
 */
static void test_extent_maps(void **state)
{
	int dirfd = dfd(state);
	void **maps = xmaps();
	struct kv_journal *j = NULL;
	struct log l = {.l_n = 0};
	struct xprod xp;
	struct kv_jrec_head h;
	struct kv_jrec_body b;
	uint64_t gen, lsn, seq, bucket;
	size_t len, off = 0, want = 0;
	char *buf;

	assert_int_equal(kv_journal_open(&j, dirfd, 0, 0, 50 * DELAY_NS), 0);
	for (size_t k = 0; k < XN; k++) {
		struct kv_jent e;

		xent(&e, maps, k);
		assert_int_equal(kv_journal_append(j, &e, &lsn), 0);
		assert_int_equal(lsn, k + 1);
	}
	assert_int_equal(kv_journal_sync(j, XN), 0);
	/* The big batch's buffer went back; appends go on. */
	{
		static struct tent t;

		make_ent(&t, KV_J_MKDIR, 3);
		assert_int_equal(kv_journal_append(j, &t.t_e, &lsn), 0);
		assert_int_equal(kv_journal_sync(j, lsn), 0);
	}
	kv_journal_close(j);

	assert_int_equal(replay(dirfd, 0, &l, &gen, &lsn), 0);
	assert_int_equal(l.l_n, XN + 1);
	assert_int_equal(lsn, XN + 1);
	assert_xents(l.l_v, maps);

	buf = slurp(dirfd, jname(0), &len);
	for (size_t k = 0; k < XN; k++) {
		struct kv_jent e;
		size_t ext;

		xent(&e, maps, k);
		ext = e.je_ext ? (size_t)e.je_next * JEXT : 0;
		memcpy(&h, buf + off, HEAD);
		memcpy(&b, buf + off + HEAD, BODY);
		assert_int_equal(h.jh_version, 2);
		assert_int_equal(h.jh_len, BODY + e.je_path_len + e.je_path2_len + ext);
		assert_int_equal(b.jb_next, e.je_next);
		if (ext)
			assert_memory_equal(buf + off + HEAD + BODY + e.je_path_len, e.je_ext, ext);
		off += xent_size(maps, k);
	}
	free(buf);

	xp = (struct xprod){.xp_maps = maps};
	log_reset(&l);
	assert_int_equal(kv_ckpt_write(dirfd, 11, 12, 13, xckpt_next, &xp), 0);
	assert_int_equal(kv_ckpt_load(dirfd, collect, &l, &seq, &bucket, &gen), 0);
	assert_int_equal(l.l_n, XN);
	assert_int_equal(seq, 11);
	assert_int_equal(gen, 13);
	assert_xents(l.l_v, maps);
	for (size_t k = 0; k < XN; k++)
		want += xent_size(maps, k);
	assert_int_equal(file_size(dirfd, "checkpoint"), want + 2 * pad8(HEAD + BODY));
	log_free(&l);
	xmaps_free(maps);
}

/*
 * Writes at dst a record as version `version` wrote it: type, lsn, the body
 * b (its path lengths set), path and path2 after it, and n bytes of extent
 * map. Returns its size.
 */
static size_t hand_rec(char *dst, uint16_t version, uint16_t type, uint64_t lsn,
		       const struct kv_jrec_body *b, const char *path, const char *path2,
		       const void *map, size_t n)
{
	uint32_t len = (uint32_t)(BODY + b->jb_path_len + b->jb_path2_len + n);
	struct kv_jrec_head h = {
	    .jh_magic = KV_JREC_MAGIC,
	    .jh_type = type,
	    .jh_version = version,
	    .jh_len = len,
	    .jh_lsn = lsn,
	};
	size_t size = pad8(HEAD + len);

	memset(dst, 0, size);
	memcpy(dst, &h, HEAD);
	memcpy(dst + HEAD, b, BODY);
	memcpy(dst + HEAD + BODY, path, b->jb_path_len);
	memcpy(dst + HEAD + BODY + b->jb_path_len, path2, b->jb_path2_len);
	if (n)
		memcpy(dst + HEAD + BODY + b->jb_path_len + b->jb_path2_len, map, n);
	reseal(dst);
	return size;
}

/* Version 1 records (jb_next was jb_pad, 0) replay and load as they were written. */
static void test_v1_records(void **state)
{
	int dirfd = dfd(state);
	struct kv_jrec_body put = {
	    .jb_mode = 0100644,
	    .jb_seq = 77,
	    .jb_bucket = 3,
	    .jb_off = 8192,
	    .jb_len = 5000,
	    .jb_head_len = 4096,
	    .jb_path_len = 3,
	};
	struct kv_jrec_body mv = {.jb_seq = 77,
				  .jb_bucket = 4,
				  .jb_off = 4096,
				  .jb_len = 5000,
				  .jb_head_len = 4096,
				  .jb_path_len = 3};
	struct kv_jrec_body ren = {.jb_flags = 1, .jb_path_len = 3, .jb_path2_len = 2};
	struct kv_jrec_body ck = {.jb_seq = 100, .jb_bucket = 5, .jb_gen = 1};
	struct kv_jrec_body end = {.jb_len = 2};
	struct log l = {.l_n = 0};
	uint64_t gen, lsn, seq, bucket;
	char buf[4096];
	size_t len = 0, good;

	len += hand_rec(buf + len, 1, KV_J_PUT, 1, &put, "a/b", "", NULL, 0);
	len += hand_rec(buf + len, 1, KV_J_MOVE, 2, &mv, "a/b", "", NULL, 0);
	len += hand_rec(buf + len, 1, KV_J_RENAME, 3, &ren, "a/b", "cd", NULL, 0);
	spew(dirfd, jname(0), buf, len);
	assert_int_equal(replay(dirfd, 0, &l, &gen, &lsn), 0);
	assert_int_equal(l.l_n, 3);
	assert_int_equal(lsn, 3);
	assert_int_equal(l.l_v[0].g_e.je_type, KV_J_PUT);
	assert_int_equal(l.l_v[0].g_e.je_seq, 77);
	assert_int_equal(l.l_v[0].g_e.je_bucket, 3);
	assert_int_equal(l.l_v[0].g_e.je_off, 8192);
	assert_int_equal(l.l_v[0].g_e.je_len, 5000);
	assert_int_equal(l.l_v[0].g_e.je_head_len, 4096);
	assert_int_equal(l.l_v[0].g_e.je_mode, 0100644);
	assert_memory_equal(l.l_v[0].g_e.je_path, "a/b", 3);
	assert_int_equal(l.l_v[1].g_e.je_type, KV_J_MOVE);
	assert_int_equal(l.l_v[1].g_e.je_bucket, 4);
	assert_int_equal(l.l_v[2].g_e.je_flags, 1);
	assert_memory_equal(l.l_v[2].g_e.je_path2, "cd", 2);
	for (size_t k = 0; k < 3; k++) {
		assert_int_equal(l.l_v[k].g_e.je_next, 0);
		assert_null(l.l_v[k].g_e.je_ext);
	}

	/* Version 2 appends follow them in the same file. */
	{
		struct kv_journal *j = NULL;
		static struct tent t;

		make_ent(&t, KV_J_SETATTR, 4);
		assert_int_equal(kv_journal_open(&j, dirfd, 0, 3, DELAY_NS), 0);
		assert_int_equal(kv_journal_append(j, &t.t_e, &lsn), 0);
		assert_int_equal(lsn, 4);
		kv_journal_close(j);
		assert_int_equal(replay(dirfd, 0, &l, &gen, &lsn), 0);
		assert_int_equal(l.l_n, 4);
		assert_ent_equal(&l.l_v[3].g_e, &t.t_e);
	}

	/*
	 * Version 1 never had maps: a non-zero jb_pad, or a PUT with the flag,
	 * is damage (a torn tail here); nor is any other version read.
	 */
	good = len;
	{
		struct kv_jrec_body put1 = put, mv1 = mv, mv0 = mv;
		const struct {
			uint16_t version, type;
			const struct kv_jrec_body *b;
		} bad[] = {{1, KV_J_PUT, &put1}, {1, KV_J_MOVE, &mv1}, {3, KV_J_MOVE, &mv0}};

		put1.jb_flags = KV_JPUT_EXTENTS;
		mv1.jb_next = 1;
		mv0.jb_next = 0;
		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			len = good + hand_rec(buf + good, bad[i].version, bad[i].type, 4, bad[i].b,
					      "a/b", "", NULL, 0);
			spew(dirfd, jname(0), buf, len);
			assert_int_equal(replay(dirfd, 0, &l, &gen, &lsn), 0);
			assert_int_equal(l.l_n, 3);
			assert_int_equal(file_size(dirfd, jname(0)), good);
		}
	}

	/* A version 1 checkpoint loads. */
	len = hand_rec(buf, 1, KV_J_CKPT, 0, &ck, "", "", NULL, 0);
	len += hand_rec(buf + len, 1, KV_J_PUT, 1, &put, "a/b", "", NULL, 0);
	len += hand_rec(buf + len, 1, KV_J_RENAME, 2, &ren, "a/b", "cd", NULL, 0);
	len += hand_rec(buf + len, 1, KV_J_CKPT_END, 3, &end, "", "", NULL, 0);
	spew(dirfd, "checkpoint", buf, len);
	log_reset(&l);
	assert_int_equal(kv_ckpt_load(dirfd, collect, &l, &seq, &bucket, &gen), 0);
	assert_int_equal(seq, 100);
	assert_int_equal(bucket, 5);
	assert_int_equal(gen, 1);
	assert_int_equal(l.l_n, 2);
	assert_int_equal(l.l_v[0].g_e.je_bucket, 3);
	assert_null(l.l_v[0].g_e.je_ext);
	assert_memory_equal(l.l_v[1].g_e.je_path2, "cd", 2);
	log_free(&l);
}

/*
 * A map whose length does not add up is a damaged record: jb_next off by
 * one either way or 0, past KV_JEXT_MAX, the flag cleared, another type
 * with a PUT's map. Reseal'ed, so only the shape is wrong: last in the
 * file it is a torn tail, before a good record -EIO.
 */
static void test_extent_damaged(void **state)
{
	enum { N = 5 };
	int dirfd = dfd(state);
	void *map = jmap(1, N);
	struct kv_jrec_body put = {.jb_flags = KV_JPUT_EXTENTS,
				   .jb_len = 10 << 20,
				   .jb_seq = 9,
				   .jb_path_len = 1,
				   .jb_next = N};
	struct kv_jrec_body mk = {.jb_path_len = 1};
	struct log l = {.l_n = 0};
	uint64_t gen, lsn;
	size_t first, len, size, after;
	char *buf = calloc(1, 8192), *tmp = malloc(8192);
	struct {
		uint16_t type;
		uint32_t flags, next;
		size_t bytes;
	} bad[] = {
	    {KV_J_PUT, KV_JPUT_EXTENTS, N - 1, N * JEXT},
	    {KV_J_PUT, KV_JPUT_EXTENTS, N + 1, N * JEXT},
	    {KV_J_PUT, KV_JPUT_EXTENTS, 0, 0},
	    {KV_J_PUT, KV_JPUT_EXTENTS, 0, N * JEXT},
	    {KV_J_PUT, KV_JPUT_EXTENTS, KV_JEXT_MAX + 1, N * JEXT},
	    {KV_J_PUT, 0, N, N * JEXT},
	    {KV_J_MOVE, KV_JPUT_EXTENTS, N, N * JEXT},
	    {KV_J_SETATTR, 0, 0, 8},
	};

	assert_non_null(buf);
	assert_non_null(tmp);
	first = hand_rec(buf, 2, KV_J_MKDIR, 1, &mk, "m", "", NULL, 0);
	/* The good one first: it replays, with its map. */
	size = hand_rec(buf + first, 2, KV_J_PUT, 2, &put, "p", "", map, N * JEXT);
	spew(dirfd, jname(0), buf, first + size);
	assert_int_equal(replay(dirfd, 0, &l, &gen, &lsn), 0);
	assert_int_equal(l.l_n, 2);
	assert_jmap(&l.l_v[1].g_e, 1, N);
	for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
		struct kv_jrec_body b = put;

		b.jb_flags = bad[k].flags;
		b.jb_next = bad[k].next;
		size = hand_rec(buf + first, 2, bad[k].type, 2, &b, "p", "", map, bad[k].bytes);
		len = first + size;
		spew(dirfd, jname(0), buf, len);
		assert_int_equal(replay(dirfd, 0, &l, &gen, &lsn), 0);
		assert_int_equal(l.l_n, 1);
		assert_int_equal(file_size(dirfd, jname(0)), first);
		/* Followed by a good record: corruption. */
		after = hand_rec(tmp, 2, KV_J_MKDIR, 3, &mk, "n", "", NULL, 0);
		memcpy(buf + len, tmp, after);
		spew(dirfd, jname(0), buf, len + after);
		assert_int_equal(replay(dirfd, 0, &l, &gen, &lsn), -EIO);
		assert_int_equal(l.l_n, 1);
	}
	free(tmp);
	free(buf);
	free(map);
	log_free(&l);
}

/* A PUT that says it has a map must have one; the checkpoint writer refuses it too. */
static void test_extent_einval(void **state)
{
	int dirfd = dfd(state);
	void *map = jmap(2, 4);
	struct kv_journal *j = NULL;
	struct kv_jent e = {.je_type = KV_J_PUT,
			    .je_flags = KV_JPUT_EXTENTS,
			    .je_path = "p",
			    .je_path_len = 1,
			    .je_next = 4,
			    .je_ext = map};
	struct kv_jent bad[3];
	struct log l = {.l_n = 0};
	uint64_t gen, lsn = 0;

	for (size_t k = 0; k < 3; k++)
		bad[k] = e;
	bad[0].je_next = 0;
	bad[1].je_next = KV_JEXT_MAX + 1;
	bad[2].je_ext = NULL;
	assert_int_equal(kv_journal_open(&j, dirfd, 0, 0, DELAY_NS), 0);
	for (size_t k = 0; k < 3; k++) {
		struct producer g = producer_of(3);

		assert_int_equal(kv_journal_append(j, &bad[k], &lsn), -EINVAL);
		assert_int_equal(lsn, 0);
		g.g_bad_at = 1;
		g.g_bad = bad[k];
		assert_int_equal(kv_ckpt_write(dirfd, 1, 2, 3, gen_next, &g), -EINVAL);
		assert_false(exists(dirfd, "checkpoint"));
	}
	assert_int_equal(kv_journal_append(j, &e, &lsn), 0);
	assert_int_equal(lsn, 1);
	kv_journal_close(j);
	assert_int_equal(replay(dirfd, 0, &l, &gen, &lsn), 0);
	assert_int_equal(l.l_n, 1);
	assert_jmap(&l.l_v[0].g_e, 2, 4);
	log_free(&l);
	free(map);
}

#define T(f) cmocka_unit_test_setup_teardown(f, dir_setup, dir_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    T(test_roundtrip),
	    T(test_format),
	    T(test_replay_fn_stops),
	    T(test_no_journal),
	    T(test_append_einval),
	    T(test_commit_delay),
	    T(test_group_commit),
	    T(test_torn_tail),
	    T(test_bitflip),
	    T(test_rotate),
	    T(test_replay_generations),
	    T(test_ckpt_big),
	    T(test_ckpt_small),
	    T(test_ckpt_img),
	    T(test_ckpt_damaged),
	    T(test_ckpt_structure),
	    T(test_ckpt_write_fails),
	    T(test_extent_maps),
	    T(test_v1_records),
	    T(test_extent_damaged),
	    T(test_extent_einval),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
