/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_shared_log.c — what the shared tier keeps on the local
 * disk, and the names of its objects, without a cluster: the change log
 * (rados/rados_log.h): what it gives back after a reopen, a torn tail, a
 * corrupt record, another pool's log, shrinking and rewriting; the object
 * names (rados/rados_format.h); and the known versions
 * (rados/rados_known.h): set, forget, reopen, a torn tail, pruning,
 * rewriting, another pool's file. The real cluster is in
 * tests/integration/test_rados_tier.py and test_rados_shared.py.
 */
#include <errno.h>
#include <sys/stat.h>

#include "shared_fixture.h"
#include "rados/rados.h"
#include "ssd/fileio.h"
#include "rados/rados_format.h"
#include "rados/rados_known.h"
#include "rados/rados_log.h"

/* What kv_rlog_open gave back: the changes, their paths copied. */
struct got {
	unsigned n;
	struct kv_rlog_change c[8];
	char p[8][2][64];
};

static int got_one(void *arg, const struct kv_rlog_change *c)
{
	struct got *g = arg;

	if (g->n == 8)
		return -E2BIG;
	g->c[g->n] = *c;
	snprintf(g->p[g->n][0], 64, "%s", c->rc_path);
	snprintf(g->p[g->n][1], 64, "%s", c->rc_path2);
	g->n++;
	return 0;
}

static struct kv_rlog *reopen(int dirfd, const char *pool, struct got *g, uint64_t *last)
{
	struct kv_rlog *l = NULL;

	memset(g, 0, sizeof(*g));
	assert_int_equal(kv_rlog_open(dirfd, pool, "ns", got_one, g, &l, last), 0);
	return l;
}

/* Appends c under another id. */
static void append_as(struct kv_rlog *l, const struct kv_rlog_change *c, uint64_t id)
{
	struct kv_rlog_change x = *c;

	x.rc_id = id;
	assert_int_equal(kv_rlog_append(l, &x), 0);
}

static off_t log_size(int dirfd)
{
	struct stat sb;

	assert_int_equal(fstatat(dirfd, KV_RLOG_NAME, &sb, 0), 0);
	return sb.st_size;
}

static void test_log(void **state)
{
	const struct kv_rlog_change put = {
	    .rc_id = 1, .rc_kind = KV_RLOG_PUT, .rc_seq = 77, .rc_size = 5 << 20};
	const struct kv_rlog_change del = {.rc_id = 2,
					   .rc_kind = KV_RLOG_DEL,
					   .rc_path = "/a/k",
					   .rc_size = 1234567890123ull,
					   .rc_node = 0xabcdef,
					   .rc_seq = 99};
	const struct kv_rlog_change ln = {.rc_id = 6,
					  .rc_kind = KV_RLOG_SYMLINK,
					  .rc_path = "/d/l",
					  .rc_path2 = "../t",
					  .rc_seq = 1000ull << 32 | 100};
	const struct kv_rlog_change mv = {
	    .rc_id = 3, .rc_kind = KV_RLOG_RENAME, .rc_path = "/a/x", .rc_path2 = "/b/y"};
	const struct kv_rlog_change mk = {
	    .rc_id = 4, .rc_kind = KV_RLOG_MKDIR, .rc_path = "/d", .rc_mode = 0700};
	char dir[64], *longp = malloc(KV_RLOG_PATH_MAX + 2);
	struct kv_rlog *l;
	struct got g;
	uint64_t last;
	off_t head, full;
	int dirfd = scratch_dir(dir), fd;

	(void)state;
	l = reopen(dirfd, "pool", &g, &last);
	assert_int_equal(g.n, 0);
	assert_int_equal(last, 0);
	head = log_size(dirfd);
	assert_int_equal(kv_rlog_bytes(l), head);
	assert_int_equal(kv_rlog_append(l, &put), 0);
	assert_int_equal(kv_rlog_append(l, &del), 0);
	assert_int_equal(kv_rlog_done(l, 2, false), 0);
	assert_int_equal(kv_rlog_append(l, &mv), 0);
	assert_int_equal(kv_rlog_append(l, &mk), 0);
	memset(longp, 'p', KV_RLOG_PATH_MAX + 1);
	longp[KV_RLOG_PATH_MAX + 1] = '\0';
	{
		struct kv_rlog_change bad = del;

		bad.rc_path = longp;
		assert_int_equal(kv_rlog_append(l, &bad), -ENAMETOOLONG);
	}
	kv_rlog_close(l);

	/* only what follows the last DONE comes back, in order, whole */
	l = reopen(dirfd, "pool", &g, &last);
	assert_int_equal(last, 4);
	assert_int_equal(g.n, 2);
	assert_int_equal(g.c[0].rc_id, 3);
	assert_int_equal(g.c[0].rc_kind, KV_RLOG_RENAME);
	assert_string_equal(g.p[0][0], "/a/x");
	assert_string_equal(g.p[0][1], "/b/y");
	assert_int_equal(g.c[1].rc_kind, KV_RLOG_MKDIR);
	assert_int_equal(g.c[1].rc_mode, 0700);
	assert_string_equal(g.p[1][0], "/d");
	assert_string_equal(g.p[1][1], "");
	full = log_size(dirfd);
	kv_rlog_close(l);

	/* a torn tail (a power cut mid-append) is cut off, and appends follow the last record */
	fd = openat(dirfd, KV_RLOG_NAME, O_WRONLY | O_APPEND);
	assert_int_equal(write(fd, "QREC\x40\0\0\0garbage", 15), 15);
	close(fd);
	l = reopen(dirfd, "pool", &g, &last);
	assert_int_equal(g.n, 2);
	assert_int_equal(log_size(dirfd), full);
	append_as(l, &put, 5);
	kv_rlog_close(l);
	l = reopen(dirfd, "pool", &g, &last);
	assert_int_equal(g.n, 3);
	assert_int_equal(g.c[2].rc_id, 5);
	assert_int_equal(g.c[2].rc_kind, KV_RLOG_PUT);
	assert_int_equal(g.c[2].rc_seq, 77);
	assert_int_equal(g.c[2].rc_size, 5 << 20);
	kv_rlog_close(l);

	/* a corrupt record ends the log there */
	fd = openat(dirfd, KV_RLOG_NAME, O_WRONLY);
	assert_int_equal(pwrite(fd, "X", 1, full - 3), 1); /* in record 4's sum */
	close(fd);
	l = reopen(dirfd, "pool", &g, &last);
	assert_int_equal(g.n, 1);
	assert_int_equal(g.c[0].rc_id, 3);
	assert_int_equal(last, 3);

	/* a rewrite keeps only what it is given */
	assert_int_equal(kv_rlog_rewrite_begin(l), 0);
	assert_int_equal(kv_rlog_rewrite_add(l, &mk), 0);
	assert_int_equal(kv_rlog_rewrite_end(l, true), 0);
	assert_int_equal(kv_rlog_bytes(l), log_size(dirfd));
	assert_int_equal(kv_rlog_append(l, &ln), 0); /* appends go to the new log */
	assert_int_equal(kv_rlog_rewrite_begin(l), 0);
	assert_int_equal(kv_rlog_rewrite_end(l, false), 0); /* dropped: the log stays */
	assert_int_not_equal(faccessat(dirfd, KV_RLOG_NAME ".tmp", F_OK, 0), 0);
	kv_rlog_close(l);
	l = reopen(dirfd, "pool", &g, &last);
	assert_int_equal(g.n, 2);
	assert_int_equal(g.c[0].rc_id, 4);
	assert_int_equal(g.c[1].rc_id, 6);
	assert_int_equal(g.c[1].rc_kind, KV_RLOG_SYMLINK);
	assert_string_equal(g.p[1][0], "/d/l");
	assert_string_equal(g.p[1][1], "../t");
	assert_true(g.c[1].rc_seq == (1000ull << 32 | 100));

	/* a DEL's field (its time) comes back whole */
	append_as(l, &del, 7);
	kv_rlog_close(l);
	l = reopen(dirfd, "pool", &g, &last);
	assert_int_equal(g.n, 3);
	assert_int_equal(g.c[2].rc_kind, KV_RLOG_DEL);
	assert_true(g.c[2].rc_size == 1234567890123ull);
	assert_true(g.c[2].rc_node == 0xabcdef && g.c[2].rc_seq == 99);

	/* nothing left: a small log takes a DONE, a large one shrinks to its header */
	assert_int_equal(kv_rlog_done(l, 7, true), 0);
	assert_true(kv_rlog_bytes(l) > (uint64_t)head);
	for (uint64_t id = 10; kv_rlog_bytes(l) <= KV_RLOG_SHRINK; id++)
		append_as(l, &del, id);
	assert_int_equal(kv_rlog_done(l, 1u << 30, true), 0);
	assert_int_equal(log_size(dirfd), head);
	kv_rlog_close(l);
	l = reopen(dirfd, "pool", &g, &last);
	assert_int_equal(g.n, 0);
	assert_int_equal(kv_rlog_append(l, &mk), 0);
	kv_rlog_close(l);

	/* another pool's log: set aside, a new one begun */
	l = reopen(dirfd, "other", &g, &last);
	assert_int_equal(g.n, 0);
	assert_int_equal(log_size(dirfd), head + 5 - 4); /* "other" vs "pool" */
	assert_int_equal(faccessat(dirfd, KV_RLOG_NAME ".old", F_OK, 0), 0);
	kv_rlog_close(l);
	kv_rlog_close(NULL);
	free(longp);
	rm_dir(dirfd, dir);
}

/* Object names (rados/rados_format.h): fixed width, parsed back, nothing else parses. */
static void test_names(void **state)
{
	char oid[KV_RADOS_OID_MAX], d1[KV_RADOS_OID_MAX], d2[KV_RADOS_OID_MAX];
	uint64_t node, seq;
	uint32_t i;

	(void)state;
	kv_rados_data_oid(oid, 0x0123456789abcdefull, 42, 7);
	assert_string_equal(oid, "x.0123456789abcdef.000000000000002a.00000007");
	assert_true(kv_rados_parse_data_oid(oid, &node, &seq, &i));
	assert_true(node == 0x0123456789abcdefull && seq == 42 && i == 7);
	kv_rados_data_oid(oid, UINT64_MAX, UINT64_MAX, UINT32_MAX);
	assert_true(kv_rados_parse_data_oid(oid, &node, &seq, &i));
	assert_true(node == UINT64_MAX && seq == UINT64_MAX && i == UINT32_MAX);
	assert_false(kv_rados_parse_data_oid("x.0123456789abcdef.000000000000002a.0000007", &node,
					     &seq, &i));
	assert_false(kv_rados_parse_data_oid("x.0123456789ABCDEF.000000000000002a.00000007", &node,
					     &seq, &i));
	assert_false(kv_rados_parse_data_oid("d.0123456789abcdef0123456789abcdef", &node, &seq, &i));
	kv_rados_dir_oid(d1, "/", 1);
	kv_rados_dir_oid(d2, "/a", 2);
	assert_int_equal(strlen(d1), 2 + 32);
	assert_memory_equal(d1, "d.", 2);
	assert_string_not_equal(d1, d2);
	kv_rados_dir_oid(d2, "/ab", 2); /* only len bytes count */
	kv_rados_dir_oid(oid, "/a", 2);
	assert_string_equal(d2, oid);
}

static bool odd_live(void *arg, uint64_t seq)
{
	(void)arg;
	return seq % 2;
}

static void test_known(void **state)
{
	char dir[64];
	int dirfd = scratch_dir(dir), fd;
	struct kv_rknown *k = NULL;
	uint64_t node, rseq, max;
	off_t size;
	struct stat sb;

	(void)state;
	assert_int_equal(kv_rknown_open(dirfd, "pool", "ns", &k), 0);
	assert_int_equal(kv_rknown_count(k, &max), 0);
	assert_false(kv_rknown_get(k, 1, &node, &rseq));
	/* enough to grow the table a few times */
	for (uint64_t seq = 1; seq <= 5000; seq++)
		assert_int_equal(kv_rknown_set(k, seq, 100 + seq, 1000 + seq), 0);
	assert_int_equal(kv_rknown_set(k, 0, 1, 1), -EINVAL);
	assert_int_equal(kv_rknown_set(k, 7, 0, 0), 0); /* the cluster replaced it */
	assert_int_equal(kv_rknown_forget(k, 8), 0);
	assert_int_equal(kv_rknown_forget(k, 8), 0); /* not known: nothing */
	assert_int_equal(kv_rknown_count(k, &max), 4999);
	assert_int_equal(max, 5000);
	assert_true(kv_rknown_get(k, 4321, &node, &rseq));
	assert_true(node == 4421 && rseq == 5321);
	kv_rknown_close(k);

	/* reopened: the same, the last record of each version winning */
	assert_int_equal(kv_rknown_open(dirfd, "pool", "ns", &k), 0);
	assert_int_equal(kv_rknown_count(k, NULL), 4999);
	assert_true(kv_rknown_get(k, 7, &node, &rseq));
	assert_true(node == 0 && rseq == 0);
	assert_false(kv_rknown_get(k, 8, &node, &rseq));
	for (uint64_t seq = 1; seq <= 5000; seq++)
		if (seq != 7 && seq != 8) {
			assert_true(kv_rknown_get(k, seq, &node, &rseq));
			assert_true(node == 100 + seq && rseq == 1000 + seq);
		}
	kv_rknown_close(k);

	/* a torn tail goes; what came before stays */
	assert_int_equal(fstatat(dirfd, KV_RKNOWN_NAME, &sb, 0), 0);
	size = sb.st_size;
	fd = openat(dirfd, KV_RKNOWN_NAME, O_WRONLY | O_APPEND);
	assert_int_equal(write(fd, "torn record", 11), 11);
	close(fd);
	assert_int_equal(kv_rknown_open(dirfd, "pool", "ns", &k), 0);
	assert_int_equal(kv_rknown_count(k, NULL), 4999);
	assert_int_equal(fstatat(dirfd, KV_RKNOWN_NAME, &sb, 0), 0);
	assert_int_equal(sb.st_size, size);

	/* pruning: the versions no key has go (up to the bound), and the file is rewritten */
	assert_int_equal(kv_rknown_prune(k, 4000, odd_live, NULL), 2000 - 1); /* 8 went before */
	assert_int_equal(kv_rknown_count(k, NULL), 4999 - 1999);
	for (uint64_t seq = 1; seq <= 5000; seq++) { /* every survivor is still found */
		bool kept = seq != 8 && (seq % 2 || seq > 4000);

		assert_int_equal(kv_rknown_get(k, seq, &node, &rseq), kept);
		if (kept && seq != 7)
			assert_true(node == 100 + seq && rseq == 1000 + seq);
	}
	assert_int_equal(fstatat(dirfd, KV_RKNOWN_NAME, &sb, 0), 0);
	assert_int_equal(sb.st_size,
			 sizeof(struct kv_file_head) + 6 + 3000 * sizeof(struct kv_rknown_rec));
	/* forgetting most of it: the file shrinks by itself once it is mostly forgotten */
	for (uint64_t seq = 1; seq <= 5000; seq++)
		assert_int_equal(kv_rknown_forget(k, seq), 0);
	for (uint64_t seq = 10001; kv_rknown_count(k, NULL) < 40000; seq++) {
		assert_int_equal(kv_rknown_set(k, seq, 1, seq), 0);
		assert_int_equal(kv_rknown_forget(k, seq - 1), 0);
		assert_int_equal(kv_rknown_set(k, seq + 100000, 1, seq), 0);
	}
	kv_rknown_close(k);
	assert_int_equal(fstatat(dirfd, KV_RKNOWN_NAME, &sb, 0), 0);
	assert_true(sb.st_size <
		    (off_t)((2 * 40000 + KV_RKNOWN_SLACK + 1) * sizeof(struct kv_rknown_rec)));
	assert_int_equal(kv_rknown_open(dirfd, "pool", "ns", &k), 0);
	assert_int_equal(kv_rknown_count(k, NULL), 40000);
	kv_rknown_close(k);

	/* another pool's file: begun anew */
	assert_int_equal(kv_rknown_open(dirfd, "other", "ns", &k), 0);
	assert_int_equal(kv_rknown_count(k, NULL), 0);
	kv_rknown_close(k);
	kv_rknown_close(NULL);
	rm_dir(dirfd, dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_names),
	    cmocka_unit_test(test_log),
	    cmocka_unit_test(test_known),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
