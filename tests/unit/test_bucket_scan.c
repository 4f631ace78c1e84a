/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_bucket_scan.c — opening a set and walking its buckets
 * (ssd/bucket_scan.c, ssd/bucket_seal.c, ssd/bucket.c): buckets sealed at
 * close as ssd/format.h draws them, reopened and scanned; a crash with a
 * bucket open (its copy torn at many places, cut at the last good record
 * and sealed at open), and sealed buckets with a damaged trailer or
 * header. The fixture, values and file decoding are
 * tests/unit/bucket_fixture.h.
 *
 * A crash is simulated without killing anything: the bucket files are
 * copied while the set is still open (its active bucket unsealed and
 * preallocated), and the copy is opened as a data directory of its own.
 */
#include "bucket_fixture.h"

static void zero_range(int dirfd, const char *name, uint64_t off, uint64_t len)
{
	char *z = calloc(1, len);

	assert_non_null(z);
	poke(dirfd, name, off, z, len);
	free(z);
}

static void cut(int dirfd, const char *name, uint64_t size)
{
	int fd = openat(dirfd, name, O_WRONLY | O_CLOEXEC);

	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)size), 0);
	close(fd);
}

/* Copies every file of src/buckets into dst/buckets (as a crash would leave them). */
static void copy_buckets(int src, int dst)
{
	int sfd = openat(src, "buckets", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d;
	struct dirent *de;

	assert_true(sfd >= 0);
	assert_true(mkdirat(dst, "buckets", 0700) == 0 || errno == EEXIST);
	d = fdopendir(sfd);
	assert_non_null(d);
	while ((de = readdir(d))) {
		char name[300];
		uint64_t len;
		char *buf;
		int fd;

		if (de->d_name[0] == '.')
			continue;
		snprintf(name, sizeof(name), "buckets/%s", de->d_name);
		buf = slurp(src, name, &len);
		fd = openat(dst, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		assert_true(fd >= 0);
		assert_int_equal(write(fd, buf, len), (ssize_t)len);
		assert_int_equal(fsync(fd), 0);
		close(fd);
		free(buf);
	}
	closedir(d);
}

/*
 * Many records over several buckets, appended in batches some of which
 * span a bucket boundary: after close every bucket is sealed and laid out
 * as format.h draws it; after reopen scan lists every record, the reads
 * are exact, files that are not buckets were left alone, and appends go
 * to a new bucket.
 */
static void test_seal_reopen_scan(void **state)
{
	enum { N = 60 };
	struct fix *f = fix_of(state);
	int dfd = ddir(f, "d");
	struct rec *r = calloc(N + 1, sizeof(*r));
	struct kv_bucket_set *bs;
	struct kv_bucket_stats s;
	uint64_t files, max_id = 0, next;
	static const char notes[] = "not a bucket";

	assert_non_null(r);
	bs = bs_default(f, dfd);
	/* Strangers in the directory. */
	for (const char *const *nm =
		 (const char *const[]){"buckets/notes.txt", "buckets/0000000000000000.kvb",
				       "buckets/00000000000000zz.kvb", NULL};
	     *nm; nm++) {
		int fd = openat(dfd, *nm, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

		assert_true(fd >= 0);
		assert_int_equal(write(fd, notes, sizeof(notes)), (ssize_t)sizeof(notes));
		close(fd);
	}
	for (unsigned i = 0; i < N; i++)
		rec_init(&r[i], 1000 + i, 1 + (i * 37) % 300, (i * 7919ull * 13) % (200 * KIB));
	for (unsigned i = 0; i < N;) {
		unsigned n = 1 + i % 9;

		if (i + n > N)
			n = N - i;
		append_ok(bs, r + i, n);
		i += n;
	}
	for (unsigned i = 1; i < N; i++) {
		if (r[i].r_loc.kl_bucket == r[i - 1].r_loc.kl_bucket) {
			assert_int_equal(r[i].r_loc.kl_off,
					 r[i - 1].r_loc.kl_off + kv_loc_size(&r[i - 1].r_loc));
		} else {
			/* A bucket is full: the next record would not have fit. */
			assert_true(r[i].r_loc.kl_bucket > r[i - 1].r_loc.kl_bucket);
			assert_int_equal(r[i].r_loc.kl_off, KV_BLOCK);
			assert_true(r[i - 1].r_loc.kl_off + kv_loc_size(&r[i - 1].r_loc) +
					kv_loc_size(&r[i].r_loc) >
				    BUCKET);
		}
		assert_true(r[i].r_loc.kl_off + kv_loc_size(&r[i].r_loc) <= BUCKET);
	}
	max_id = r[N - 1].r_loc.kl_bucket;
	assert_true(max_id >= 4);
	assert_true(kv_bucket_next_id(bs) > max_id);
	kv_bucket_close(bs);

	check_all_sealed(dfd, r, N);
	bs = bs_default(f, dfd);
	s = stats(bs);
	assert_int_equal(s.bst_buckets, max_id - r[0].r_loc.kl_bucket + 1);
	assert_int_equal(s.bst_used, files_bytes(dfd, &files));
	assert_int_equal(files, s.bst_buckets);
	assert_int_equal(s.bst_truncated, 0);
	assert_int_equal(s.bst_dead, 0);
	assert_int_equal(s.bst_written, 0);
	assert_int_equal(s.bst_read, 0);
	scan_is(bs, false, r, N);
	scan_is(bs, true, r, N);
	for (unsigned i = 0; i < N; i++)
		value_ok(bs, &r[i]);
	next = kv_bucket_next_id(bs);
	assert_true(next > max_id);
	/* A new append starts a new bucket, however much room the last one had. */
	rec_init(&r[N], 5000, 8, 10);
	append_ok(bs, r + N, 1);
	assert_true(r[N].r_loc.kl_bucket >= next);
	assert_int_equal(r[N].r_loc.kl_off, KV_BLOCK);
	kv_bucket_close(bs);
	check_sealed(dfd, r[N].r_loc.kl_bucket, (struct rec *[]){&r[N]}, 1);
	for (const char *const *nm =
		 (const char *const[]){"buckets/notes.txt", "buckets/0000000000000000.kvb",
				       "buckets/00000000000000zz.kvb", NULL};
	     *nm; nm++) {
		uint64_t len;
		char *buf = slurp(dfd, *nm, &len);

		assert_int_equal(len, sizeof(notes));
		assert_memory_equal(buf, notes, sizeof(notes));
		free(buf);
	}
	recs_free(r, N + 1);
	free(r);
	close(dfd);
}

/* How a tear is made in the copy of an open bucket. */
enum tear_kind { ZERO_TO_END, ZERO_BLOCK, TRUNCATE };

struct tear {
	const char *t_what;
	enum tear_kind t_kind;
	unsigned t_rec; /* the record torn: 2 (last) or 1 */
	uint64_t t_off; /* bytes into that record (its head starts at 0) */
};

/*
 * A crash with a bucket open: its files copied right after an append,
 * before close, then the last record (or the one before) torn in the copy
 * at many places of its head and value, by zeroing and by truncating.
 * Reopening cuts the bucket at the last good record, seals it there
 * (trailer, nothing past it) and counts the cut.
 */
static void test_torn_tail(void **state)
{
	const uint64_t H = KV_BLOCK; /* the head length of every record here */
	static const struct tear tears[] = {
	    {"nothing torn", ZERO_TO_END, 3, 0},
	    {"head block zeroed", ZERO_BLOCK, 2, 0},
	    {"from head byte 0", ZERO_TO_END, 2, 0},
	    {"from head byte 1", ZERO_TO_END, 2, 1},
	    {"from the seq", ZERO_TO_END, 2, offsetof(struct kv_rec_head, rh_seq)},
	    {"from the head csum", ZERO_TO_END, 2, offsetof(struct kv_rec_head, rh_head_csum)},
	    {"from the key", ZERO_TO_END, 2, sizeof(struct kv_rec_head) + 3},
	    {"from the csums", ZERO_TO_END, 2, sizeof(struct kv_rec_head) + 16 + 8},
	    {"from value byte 0", ZERO_TO_END, 2, H},
	    {"from value byte 512", ZERO_TO_END, 2, H + 512},
	    {"from chunk 1", ZERO_TO_END, 2, H + CHUNK},
	    {"from mid chunk 3", ZERO_TO_END, 2, H + 3 * CHUNK + 5000},
	    {"last value block", ZERO_TO_END, 2, H + UP4K(300000) - KV_BLOCK},
	    {"value block 2 only", ZERO_BLOCK, 2, H + 2 * KV_BLOCK},
	    {"chunk 4 block only", ZERO_BLOCK, 2, H + 4 * CHUNK},
	    {"cut at the record", TRUNCATE, 2, 0},
	    {"cut in the head", TRUNCATE, 2, 512},
	    {"cut after the head", TRUNCATE, 2, H},
	    {"cut in the value", TRUNCATE, 2, H + CHUNK + 4096},
	    {"cut mid-sector", TRUNCATE, 2, H + 2 * CHUNK + 100},
	    {"cut one block short", TRUNCATE, 2, H + UP4K(300000) - KV_BLOCK},
	    {"middle record's value", ZERO_BLOCK, 1, H + KV_BLOCK},
	    {"middle record's head", ZERO_TO_END, 1, 8},
	};
	struct fix *f = fix_of(state);
	int live = ddir(f, "live"), crash = ddir(f, "crash");
	struct kv_bucket_set *bs = bs_default(f, live);
	struct rec r[4];
	uint64_t id;

	rec_init(&r[0], 1, 16, 100 * KIB);
	rec_init(&r[1], 2, 16, 70000);
	rec_init(&r[2], 3, 16, 300000);
	append_ok(bs, r, 1);
	append_ok(bs, r + 1, 1);
	append_ok(bs, r + 2, 1);
	id = r[0].r_loc.kl_bucket;
	assert_int_equal(r[2].r_loc.kl_bucket, id);
	assert_int_equal(r[2].r_loc.kl_head_len, H);
	/* The crash: a copy while the bucket is open. */
	copy_buckets(live, crash);
	kv_bucket_close(bs);
	assert_true(fsize(crash, bname(id)) >= BUCKET); /* preallocated, unsealed */

	for (unsigned i = 0; i < sizeof(tears) / sizeof(tears[0]); i++) {
		const struct tear *t = &tears[i];
		unsigned keep = t->t_rec;
		char dname[32];
		int dfd;
		uint64_t at = t->t_rec < 3 ? r[t->t_rec].r_loc.kl_off + t->t_off : 0;
		struct rec *group[3] = {&r[0], &r[1], &r[2]};
		struct kv_bucket_stats s;

		print_message("tear: %s\n", t->t_what);
		snprintf(dname, sizeof(dname), "t%u", i);
		dfd = ddir(f, dname);
		copy_buckets(crash, dfd);
		if (t->t_rec < 3 && t->t_kind == ZERO_TO_END)
			zero_range(dfd, bname(id), at,
				   r[2].r_loc.kl_off + kv_loc_size(&r[2].r_loc) - at);
		else if (t->t_rec < 3 && t->t_kind == ZERO_BLOCK)
			zero_range(dfd, bname(id), at, KV_BLOCK);
		else if (t->t_rec < 3)
			cut(dfd, bname(id), at);

		bs = bs_default(f, dfd);
		s = stats(bs);
		assert_int_equal(s.bst_buckets, 1);
		assert_true(s.bst_truncated >= 1);
		scan_is(bs, true, r, keep);
		for (unsigned k = 0; k < keep; k++)
			value_ok(bs, &r[k]);
		for (unsigned k = keep; k < 3; k++)
			assert_false(kv_bucket_valid(bs, &r[k].r_loc));
		/* Sealed where it was cut: appends go elsewhere. */
		rec_init(&r[3], 50, 5, 4096);
		append_ok(bs, r + 3, 1);
		assert_true(r[3].r_loc.kl_bucket > id);
		kv_bucket_close(bs);
		check_sealed(dfd, id, group, keep);
		/* And the next start finds it sealed: nothing more to cut. */
		bs = bs_default(f, dfd);
		assert_int_equal(stats(bs).bst_truncated, 0);
		{
			struct rec *after = calloc(4, sizeof(*after));

			assert_non_null(after);
			memcpy(after, r, keep * sizeof(*after));
			after[keep] = r[3];
			scan_is(bs, true, after, keep + 1);
			free(after);
		}
		value_ok(bs, &r[3]);
		val_free(&r[3].r_val);
		kv_bucket_close(bs);
		close(dfd);
	}
	recs_free(r, 3);
	close(live);
	close(crash);
}

/*
 * An open bucket far larger than the read-ahead window a recovery walk
 * reads it through (4 MiB): records of many sizes, some across a window's
 * end, one larger than a window. Reopened whole, every record is found and
 * reads back; with a block of a record in the third window zeroed, the
 * bucket is cut right before that record, and everything before it is
 * found.
 */
#define NWIN 40

static void test_torn_tail_windows(void **state)
{
	struct fix *f = fix_of(state);
	int live = ddir(f, "live"), crash = ddir(f, "crash");
	struct kv_bucket_set *bs = bs_open(f, live, 64 * MIB, 100000, CAP);
	struct rec r[NWIN];
	unsigned torn = NWIN;
	uint64_t id;

	for (unsigned i = 0; i < NWIN; i++) {
		uint64_t len = i == 7	    ? 5 * MIB + 7
			       : i % 4 == 3 ? MIB + 4096 * i + 1
					    : 9000 * i + 13;

		rec_init(&r[i], 700 + i, 8 + i, len);
		append_ok(bs, r + i, 1);
	}
	id = r[0].r_loc.kl_bucket;
	assert_int_equal(r[NWIN - 1].r_loc.kl_bucket, id);
	assert_true(r[NWIN - 1].r_loc.kl_off > 12 * MIB);
	copy_buckets(live, crash); /* the crash: open, preallocated */
	kv_bucket_close(bs);

	for (int tear = 0; tear < 2; tear++) {
		int dfd = ddir(f, tear ? "torn" : "whole");

		copy_buckets(crash, dfd);
		if (tear) {
			for (torn = 0; r[torn].r_loc.kl_off < 9 * MIB; torn++)
				;
			zero_range(dfd, bname(id), r[torn].r_loc.kl_off + r[torn].r_loc.kl_head_len,
				   KV_BLOCK);
		}
		bs = bs_default(f, dfd);
		assert_int_equal(stats(bs).bst_truncated, 1);
		scan_is(bs, true, r, torn);
		for (unsigned k = 0; k < torn; k++)
			value_ok(bs, &r[k]);
		for (unsigned k = torn; k < NWIN; k++)
			assert_false(kv_bucket_valid(bs, &r[k].r_loc));
		kv_bucket_close(bs);
		close(dfd);
	}
	recs_free(r, NWIN);
	close(live);
	close(crash);
}

/*
 * bst_used is the bytes of all bucket files, also for a bucket that was
 * recovered (cut and sealed) at open.
 */
static void test_recovered_used(void **state)
{
	struct fix *f = fix_of(state);
	int live = ddir(f, "live"), crash = ddir(f, "crash");
	struct kv_bucket_set *bs = bs_default(f, live);
	uint64_t used, files;
	struct rec r[2];

	rec_init(&r[0], 1, 16, 10000);
	rec_init(&r[1], 2, 16, 20000);
	append_ok(bs, r, 2);
	copy_buckets(live, crash);
	kv_bucket_close(bs);

	/* The clean shutdown: sealed at close, loaded by trailer. */
	bs = bs_default(f, live);
	assert_int_equal(stats(bs).bst_used, files_bytes(live, NULL));
	kv_bucket_close(bs);

	/* The crash: an open bucket, sealed at open. */
	bs = bs_default(f, crash);
	assert_true(stats(bs).bst_truncated >= 1);
	scan_is(bs, true, r, 2);
	used = stats(bs).bst_used;
	files = files_bytes(crash, NULL);
	kv_bucket_close(bs);
	recs_free(r, 2);
	close(live);
	close(crash);
	if (used != files)
		fail_msg("bst_used %" PRIu64
			 " after recovering an open bucket, its file has %" PRIu64 " bytes",
			 used, files);
}

/*
 * A sealed bucket whose trailer is damaged is recovered like an open one
 * (by its records, then sealed again); one whose header is damaged is kept
 * but never read, and a scan counts it as bad.
 */
static void test_damaged_trailer_header(void **state)
{
	struct fix *f = fix_of(state);
	int dfd = ddir(f, "d");
	struct kv_bucket_set *bs = bs_open(f, dfd, BUCKET, 3, CAP);
	struct rec r[6];
	struct rec *g1[3] = {&r[0], &r[1], &r[2]};
	uint64_t b1, b2, size2, bad = 0;
	struct seen *sn = calloc(1, sizeof(*sn));

	assert_non_null(sn);
	for (unsigned i = 0; i < 6; i++)
		rec_init(&r[i], 1 + i, 10, 5000 + i * 70000);
	append_ok(bs, r, 6); /* two buckets of three */
	kv_bucket_close(bs);
	b1 = r[0].r_loc.kl_bucket;
	b2 = r[3].r_loc.kl_bucket;
	size2 = fsize(dfd, bname(b2));
	flip(dfd, bname(b1),
	     fsize(dfd, bname(b1)) - KV_BLOCK + offsetof(struct kv_bucket_trailer, bt_count));
	flip(dfd, bname(b2), offsetof(struct kv_bucket_hdr, bh_id));

	bs = bs_open(f, dfd, BUCKET, 3, CAP);
	assert_int_equal(stats(bs).bst_buckets, 2);
	assert_true(stats(bs).bst_truncated >= 1);
	for (unsigned i = 0; i < 3; i++)
		value_ok(bs, &r[i]);
	for (unsigned i = 3; i < 6; i++)
		assert_false(kv_bucket_valid(bs, &r[i].r_loc));
	assert_int_equal(kv_bucket_scan(bs, true, seen_add, sn, &bad), 0);
	assert_int_equal(sn->s_n, 3);
	assert_true(bad >= 1);
	kv_bucket_close(bs);
	check_sealed(dfd, b1, g1, 3);
	assert_int_equal(fsize(dfd, bname(b2)), size2); /* left alone */
	free(sn);
	recs_free(r, 6);
	close(dfd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    T(test_seal_reopen_scan),
	    T(test_torn_tail),
	    T(test_torn_tail_windows),
	    T(test_recovered_used),
	    T(test_damaged_trailer_header),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
