/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_bucket_read.c — the checked reads (ssd/bucket_read.c,
 * ssd/bucket_io.c): ranges that start, end and cross chunk boundaries, a
 * damaged value byte or record head (-EIO, never data, counted), and the
 * background reads of read-ahead (kv_bucket_aread_*). The fixture, values
 * and file decoding are tests/unit/bucket_fixture.h.
 */
#include "bucket_fixture.h"

/* kv_bucket_read over ranges that start, end and cross chunk boundaries, and past the end. */
static void test_read_ranges(void **state)
{
	struct fix *f = fix_of(state);
	int dfd = ddir(f, "d");
	struct kv_bucket_set *bs = bs_default(f, dfd);
	struct rec r[3];
	static const struct {
		uint64_t off, len;
	} rg[] = {
	    {0, 1},
	    {0, 0},
	    {1, 0},
	    {0, 65536},
	    {0, 65537},
	    {65535, 1},
	    {65535, 2},
	    {65536, 65536},
	    {65537, 4095},
	    {100, 200000},
	    {131071, 131074},
	    {1, 299998},
	    {1, 299999},
	    {4095, 1},
	    {4096, 4096},
	    {262143, 37857},
	    {262144, 100000},
	    {299999, 10},
	    {300000, 1},
	    {300001, 100},
	    {400000, 5},
	    {0, UINT64_MAX},
	    {12345, UINT64_MAX},
	    {UINT64_MAX - 1, 1},
	    {65536 * 4, 65536},
	};
	uint64_t read0, *c;

	rec_init(&r[0], 1, 10, 300000);
	rec_init(&r[1], 2, 11, 65537);
	rec_init(&r[2], 3, 12, 1);
	append_ok(bs, r, 3);
	for (unsigned k = 0; k < 3; k++) {
		c = csums_ok(bs, &r[k].r_loc);
		for (unsigned i = 0; i < sizeof(rg) / sizeof(rg[0]); i++)
			read_ok(bs, &r[k], c, rg[i].off, rg[i].len);
		/* Every 4 KiB-aligned and odd start, in 20 KiB windows. */
		for (uint64_t off = 0; off < r[k].r_val.v_len + 8192; off += 12289)
			read_ok(bs, &r[k], c, off, 20 * KIB + off % 7);
		read_iov_ok(bs, &r[k], c);
		free(c);
	}

	/* What a read cost: whole 4 KiB-rounded chunks. */
	c = csums_ok(bs, &r[0].r_loc);
	read0 = stats(bs).bst_read;
	read_ok(bs, &r[0], c, 70000, 10);
	assert_int_equal(stats(bs).bst_read - read0, CHUNK);
	read0 = stats(bs).bst_read;
	read_ok(bs, &r[0], c, 299999, 1);
	assert_int_equal(stats(bs).bst_read - read0, UP4K(300000 - 4 * CHUNK));
	read0 = stats(bs).bst_read;
	read_ok(bs, &r[0], c, 300000, 1);
	assert_int_equal(stats(bs).bst_read - read0, 0);

	/* A loc in no bucket, or outside its bucket's records. */
	{
		struct kv_loc l = r[0].r_loc;
		void *buf = NULL;
		char *data;
		uint64_t n, *c2;
		uint32_t nch;

		l.kl_bucket = 999;
		assert_false(kv_bucket_valid(bs, &l));
		assert_int_equal(kv_bucket_load_csums(bs, &l, &c2, &nch), -ENOENT);
		assert_int_equal(kv_bucket_read(bs, &l, c, 0, 10, &buf, &data, &n), -ENOENT);
		l = r[0].r_loc;
		l.kl_off = 0;
		assert_false(kv_bucket_valid(bs, &l));
		l = r[2].r_loc;
		l.kl_off += 64 * BUCKET;
		assert_false(kv_bucket_valid(bs, &l));
		/* A loc that does not match the record's head: seq, length, head length. */
		l = r[0].r_loc;
		l.kl_seq++;
		assert_int_equal(kv_bucket_load_csums(bs, &l, &c2, &nch), -EIO);
		l = r[0].r_loc;
		l.kl_len--;
		assert_int_equal(kv_bucket_load_csums(bs, &l, &c2, &nch), -EIO);
		l = r[1].r_loc;
		l.kl_off = r[0].r_loc.kl_off;
		assert_int_equal(kv_bucket_load_csums(bs, &l, &c2, &nch), -EIO);
	}
	free(c);
	kv_bucket_close(bs);
	recs_free(r, 3);
	close(dfd);
}

/*
 * A flipped value byte: reads of the chunk holding it are -EIO (never
 * data), other chunks read fine, each failure is counted.
 */
static void test_corrupt_value(void **state)
{
	struct fix *f = fix_of(state);
	int dfd = ddir(f, "d");
	struct kv_bucket_set *bs = bs_default(f, dfd);
	struct rec r[3];
	uint64_t *c, e0, bad, n;
	void *buf;
	char *data;
	struct seen *sn = calloc(1, sizeof(*sn));

	assert_non_null(sn);
	rec_init(&r[0], 1, 10, 20000);
	rec_init(&r[1], 2, 10, 300000);
	rec_init(&r[2], 3, 10, 5000);
	append_ok(bs, r, 3);
	kv_bucket_close(bs);
	/* Value byte 70000 of r[1]: chunk 1. */
	flip(dfd, bname(r[1].r_loc.kl_bucket), r[1].r_loc.kl_off + r[1].r_loc.kl_head_len + 70000);
	bs = bs_default(f, dfd);

	c = csums_ok(bs, &r[1].r_loc); /* the head is fine */
	e0 = stats(bs).bst_csum_errors;
	read_ok(bs, &r[1], c, 0, CHUNK);
	read_ok(bs, &r[1], c, 2 * CHUNK, 300000);
	read_ok(bs, &r[1], c, CHUNK - 100, 100);
	assert_int_equal(stats(bs).bst_csum_errors, e0);
	static const struct {
		uint64_t off, len;
	} bad_rg[] = {{70000, 1}, {CHUNK, 1}, {0, 300000}, {CHUNK - 1, 2}, {131071, 1}};
	for (unsigned i = 0; i < sizeof(bad_rg) / sizeof(bad_rg[0]); i++) {
		buf = NULL;
		n = 12345;
		assert_int_equal(kv_bucket_read(bs, &r[1].r_loc, c, bad_rg[i].off, bad_rg[i].len,
						&buf, &data, &n),
				 -EIO);
		assert_int_equal(stats(bs).bst_csum_errors, e0 + i + 1);
	}
	e0 = stats(bs).bst_csum_errors;
	{
		uint64_t cap = UP4K(300000);
		struct iovec iov;
		char *b = NULL;

		assert_int_equal(posix_memalign((void **)&b, KV_BLOCK, cap), 0);
		iov = (struct iovec){.iov_base = b, .iov_len = cap};
		assert_int_equal(kv_bucket_read_iov(bs, &r[1].r_loc, c, &iov, 1), -EIO);
		free(b);
	}
	assert_int_equal(stats(bs).bst_csum_errors, e0 + 1);
	free(c);
	/* Its neighbours are untouched. */
	value_ok(bs, &r[0]);
	value_ok(bs, &r[2]);

	/* A scan that checks values skips the damaged record and counts it. */
	assert_int_equal(kv_bucket_scan(bs, true, seen_add, sn, &bad), 0);
	assert_int_equal(bad, 1);
	assert_int_equal(sn->s_n, 2);
	assert_int_equal(sn->s_r[0].sr_loc.kl_seq, 1);
	assert_int_equal(sn->s_r[1].sr_loc.kl_seq, 3);
	sn->s_n = 0;
	assert_int_equal(kv_bucket_scan(bs, false, seen_add, sn, &bad), 0);
	assert_int_equal(bad, 0);
	assert_int_equal(sn->s_n, 3);
	kv_bucket_close(bs);
	free(sn);
	recs_free(r, 3);
	close(dfd);
}

/*
 * A flipped byte in any field of a record head, in its key or in its
 * chunk checksums: kv_bucket_load_csums refuses it with -EIO and counts it;
 * restored, it loads again.
 */
static void test_corrupt_head(void **state)
{
	static const struct {
		const char *what;
		size_t off;
	} fields[] = {
	    {"rh_magic", offsetof(struct kv_rec_head, rh_magic)},
	    {"rh_magic+3", offsetof(struct kv_rec_head, rh_magic) + 3},
	    {"rh_version", offsetof(struct kv_rec_head, rh_version)},
	    {"rh_flags", offsetof(struct kv_rec_head, rh_flags)},
	    {"rh_key_len", offsetof(struct kv_rec_head, rh_key_len)},
	    {"rh_key_len+1", offsetof(struct kv_rec_head, rh_key_len) + 1},
	    {"rh_head_len", offsetof(struct kv_rec_head, rh_head_len)},
	    {"rh_head_len+1", offsetof(struct kv_rec_head, rh_head_len) + 1},
	    {"rh_value_len", offsetof(struct kv_rec_head, rh_value_len)},
	    {"rh_value_len+2", offsetof(struct kv_rec_head, rh_value_len) + 2},
	    {"rh_value_len+7", offsetof(struct kv_rec_head, rh_value_len) + 7},
	    {"rh_seq", offsetof(struct kv_rec_head, rh_seq)},
	    {"rh_seq+7", offsetof(struct kv_rec_head, rh_seq) + 7},
	    {"rh_chunk_shift", offsetof(struct kv_rec_head, rh_chunk_shift)},
	    {"rh_nchunks", offsetof(struct kv_rec_head, rh_nchunks)},
	    {"rh_payload_csum", offsetof(struct kv_rec_head, rh_payload_csum)},
	    {"rh_payload_csum+7", offsetof(struct kv_rec_head, rh_payload_csum) + 7},
	    {"rh_head_csum", offsetof(struct kv_rec_head, rh_head_csum)},
	    {"rh_head_csum+4", offsetof(struct kv_rec_head, rh_head_csum) + 4},
	    {"key[0]", sizeof(struct kv_rec_head)},
	    {"key[last]", sizeof(struct kv_rec_head) + 20 - 1},
	    {"csum[0]", sizeof(struct kv_rec_head) + 20},
	    {"csum[2]+5", sizeof(struct kv_rec_head) + 20 + 2 * 8 + 5},
	    {"csum[last]+7", sizeof(struct kv_rec_head) + 20 + 5 * 8 - 1},
	};
	struct fix *f = fix_of(state);
	int dfd = ddir(f, "d");
	struct kv_bucket_set *bs = bs_default(f, dfd);
	struct rec r[3];
	const char *name;
	uint64_t base, e0, *c;
	uint32_t nch;

	rec_init(&r[0], 1, 20, 1000);
	rec_init(&r[1], 2, 20, 300000); /* 5 chunk checksums */
	rec_init(&r[2], 3, 20, 1000);
	append_ok(bs, r, 3);
	kv_bucket_close(bs);
	bs = bs_default(f, dfd);
	name = bname(r[1].r_loc.kl_bucket);
	base = r[1].r_loc.kl_off;
	for (unsigned i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
		e0 = stats(bs).bst_csum_errors;
		flip(dfd, name, base + fields[i].off);
		c = NULL;
		if (kv_bucket_load_csums(bs, &r[1].r_loc, &c, &nch) != -EIO)
			fail_msg("a flipped byte in %s was not noticed", fields[i].what);
		assert_null(c);
		assert_int_equal(stats(bs).bst_csum_errors, e0 + 1);
		value_ok(bs, &r[0]);
		value_ok(bs, &r[2]);
		flip(dfd, name, base + fields[i].off);
		value_ok(bs, &r[1]);
	}

	/* A damaged head in a sealed bucket hides the rest of it from a scan. */
	flip(dfd, name, base + offsetof(struct kv_rec_head, rh_seq));
	{
		struct seen *sn = calloc(1, sizeof(*sn));
		uint64_t bad = 0;

		assert_non_null(sn);
		assert_int_equal(kv_bucket_scan(bs, false, seen_add, sn, &bad), 0);
		assert_true(bad >= 1);
		assert_int_equal(sn->s_n, 1);
		assert_int_equal(sn->s_r[0].sr_loc.kl_seq, 1);
		free(sn);
	}
	kv_bucket_close(bs);
	recs_free(r, 3);
	close(dfd);
}

/* Reads [off, off + len) of r in the background (kv_bucket_aread_*) and checks the bytes. */
static void aread_ok(struct kv_bucket_set *bs, const struct rec *r, const uint64_t *c, uint64_t off,
		     uint64_t len)
{
	uint64_t want = len < r->r_val.v_len - off ? len : r->r_val.v_len - off;
	struct kv_bucket_aread a;
	void *buf = NULL;

	assert_int_equal(posix_memalign(&buf, KV_BLOCK, UP4K(len) + 2 * CHUNK), 0);
	assert_int_equal(kv_bucket_aread_start(bs, &r->r_loc, off, len, buf, &a), 0);
	assert_int_equal(a.ba_start % CHUNK, 0);
	assert_true(a.ba_start <= off && off + want <= a.ba_start + a.ba_len);
	assert_true(a.ba_start + a.ba_len <= r->r_val.v_len);
	assert_int_equal(kv_bucket_aread_end(bs, &a, c), 0);
	expect_bytes((char *)buf + (off - a.ba_start), r->r_val.v_seed, off, want);
	free(buf);
}

/*
 * Background reads of record pieces (read-ahead): the bytes, chunk
 * widening, a bucket dropped while the read is in flight (the read keeps
 * its own descriptor), a damaged chunk (-EIO, not counted: whoever reads
 * it again counts it), and the refusals.
 */
static void test_aread(void **state)
{
	struct fix *f = fix_of(state);
	int dfd = ddir(f, "d");
	struct kv_bucket_set *bs = bs_open(f, dfd, 8 * MIB, 100000, CAP);
	struct kv_bucket_stats s0, s1;
	struct kv_bucket_aread a;
	struct rec r[3];
	uint64_t *c[3];
	void *buf = NULL;

	rec_init(&r[0], 21, 9, 3 * MIB + 5); /* one WHOLE record longer than an extent */
	rec_init(&r[1], 22, 9, 2 * MIB);
	rec_shape(&r[1], KV_REC_EXTENT, 4);
	rec_init(&r[2], 23, 9, 100 * KIB + 1);
	append_ok(bs, r, 3);
	for (unsigned i = 0; i < 3; i++)
		c[i] = csums_ok(bs, &r[i].r_loc);
	aread_ok(bs, &r[0], c[0], 0, 2 * MIB);
	aread_ok(bs, &r[0], c[0], 2 * MIB, 2 * MIB); /* to the record's end */
	aread_ok(bs, &r[0], c[0], 12345, 70 * KIB);  /* widened to whole chunks */
	aread_ok(bs, &r[1], c[1], 1 * MIB, 1 * MIB);
	aread_ok(bs, &r[2], c[2], 0, 2 * MIB);
	aread_ok(bs, &r[2], c[2], 100 * KIB, 1);

	assert_int_equal(posix_memalign(&buf, KV_BLOCK, 2 * MIB + 2 * CHUNK), 0);
	assert_int_equal(kv_bucket_aread_start(bs, &r[2].r_loc, r[2].r_val.v_len, 10, buf, &a),
			 -EINVAL);
	assert_int_equal(kv_bucket_aread_start(bs, &r[2].r_loc, 0, 0, buf, &a), -EINVAL);

	/* Dropped while the read is in flight: the read still gets the record's bytes. */
	assert_int_equal(kv_bucket_seal_active(bs), 0);
	assert_int_equal(kv_bucket_aread_start(bs, &r[1].r_loc, 0, 2 * MIB, buf, &a), 0);
	assert_int_equal(kv_bucket_drop(bs, r[1].r_loc.kl_bucket), 0);
	while (!kv_bucket_aread_done(bs, &a))
		usleep(100);
	assert_int_equal(kv_bucket_aread_end(bs, &a, c[1]), 0);
	expect_bytes((char *)buf, r[1].r_val.v_seed, 0, 2 * MIB);
	assert_int_equal(kv_bucket_aread_start(bs, &r[1].r_loc, 0, 2 * MIB, buf, &a), -ENOENT);
	kv_bucket_close(bs);

	/* A damaged chunk: -EIO, and bst_csum_errors left to the read that reports it. */
	val_free(&r[1].r_val);
	rec_init(&r[1], 24, 9, 1 * MIB);
	bs = bs_open(f, dfd, 8 * MIB, 100000, CAP);
	append_ok(bs, &r[1], 1);
	free(c[1]);
	c[1] = csums_ok(bs, &r[1].r_loc);
	kv_bucket_close(bs);
	flip(dfd, bname(r[1].r_loc.kl_bucket), r[1].r_loc.kl_off + r[1].r_loc.kl_head_len + 3);
	bs = bs_open(f, dfd, 8 * MIB, 100000, CAP);
	s0 = stats(bs);
	assert_int_equal(kv_bucket_aread_start(bs, &r[1].r_loc, 0, 1 * MIB, buf, &a), 0);
	assert_int_equal(kv_bucket_aread_end(bs, &a, c[1]), -EIO);
	s1 = stats(bs);
	assert_int_equal(s1.bst_csum_errors, s0.bst_csum_errors);
	kv_bucket_close(bs);
	free(buf);
	for (unsigned i = 0; i < 3; i++)
		free(c[i]);
	recs_free(r, 3);
	close(dfd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    T(test_read_ranges),
	    T(test_corrupt_value),
	    T(test_corrupt_head),
	    T(test_aread),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
