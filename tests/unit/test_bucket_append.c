/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_bucket_append.c — placing records (ssd/bucket_append.c):
 * values of awkward sizes and the files they make once sealed, sealing by
 * the number of records (bo_bucket_keys), the quota (bo_cap) and the
 * reservations an append may fill. The fixture, values and file decoding
 * are tests/unit/bucket_fixture.h.
 */
#include "bucket_fixture.h"

/*
 * Values of awkward sizes, one larger than a bucket: where they land, that
 * they read back whole, and the files they make once sealed.
 */
static void test_append_sizes(void **state)
{
	static const uint64_t sizes[] = {0,	1,     4095,   4096,
					 65536, 65537, 300000, BUCKET + BUCKET / 2};
	const unsigned n1 = sizeof(sizes) / sizeof(sizes[0]);
	struct fix *f = fix_of(state);
	int dfd = ddir(f, "d");
	struct rec *r = calloc(n1 + 2, sizeof(*r));
	struct kv_bucket_set *bs = bs_default(f, dfd);
	struct kv_bucket_stats s;
	uint64_t written = 0;

	assert_non_null(r);
	s = stats(bs);
	assert_int_equal(s.bst_buckets, 0);
	assert_int_equal(s.bst_used, 0);
	assert_int_equal(s.bst_cap, CAP);
	for (unsigned i = 0; i < n1; i++)
		rec_init(&r[i], 100 + i, 5 + i * 7, sizes[i]);
	/* The big value's key is as long as a key can be: a two-block head. */
	key_init(&r[n1 - 1], 100 + n1 - 1, KV_BLOCK);
	rec_init(&r[n1], 200, 9, 4096);
	rec_init(&r[n1 + 1], 201, 0, 100);

	append_ok(bs, r, n1);
	append_ok(bs, r + n1, 2);
	assert_int_equal(r[n1 - 1].r_loc.kl_head_len, 2 * KV_BLOCK);

	/* The first seven share a bucket, packed one after another from 4 KiB. */
	assert_int_equal(r[0].r_loc.kl_off, KV_BLOCK);
	for (unsigned i = 1; i < n1 - 1; i++) {
		assert_int_equal(r[i].r_loc.kl_bucket, r[0].r_loc.kl_bucket);
		assert_int_equal(r[i].r_loc.kl_off,
				 r[i - 1].r_loc.kl_off + kv_loc_size(&r[i - 1].r_loc));
	}
	/* The big one has a bucket of its own; what follows it, another one. */
	assert_true(r[n1 - 1].r_loc.kl_bucket > r[0].r_loc.kl_bucket);
	assert_int_equal(r[n1 - 1].r_loc.kl_off, KV_BLOCK);
	assert_true(r[n1].r_loc.kl_bucket > r[n1 - 1].r_loc.kl_bucket);
	assert_int_equal(r[n1].r_loc.kl_off, KV_BLOCK);
	assert_int_equal(r[n1 + 1].r_loc.kl_bucket, r[n1].r_loc.kl_bucket);
	assert_int_equal(r[n1 + 1].r_loc.kl_off, KV_BLOCK + kv_loc_size(&r[n1].r_loc));

	s = stats(bs);
	assert_int_equal(s.bst_buckets, 3);
	for (unsigned i = 0; i < n1 + 2; i++)
		written += kv_loc_size(&r[i].r_loc);
	assert_true(s.bst_written >= written);
	assert_int_equal(s.bst_read, 0);
	assert_int_equal(s.bst_csum_errors, 0);
	assert_int_equal(s.bst_dead, 0);
	assert_true(s.bst_used >= written + 3 * KV_BLOCK);

	/* Read back from the live set: the first two buckets sealed, the last still open. */
	for (unsigned i = 0; i < n1 + 2; i++)
		value_ok(bs, &r[i]);
	{
		uint64_t vbytes = 0;

		for (unsigned i = 0; i < n1 + 2; i++)
			vbytes += 2 * r[i].r_val.v_len; /* read, then read_iov */
		assert_true(stats(bs).bst_read >= vbytes);
	}
	check_sealed(dfd, r[0].r_loc.kl_bucket,
		     (struct rec *[]){&r[0], &r[1], &r[2], &r[3], &r[4], &r[5], &r[6]}, 7);
	check_sealed(dfd, r[n1 - 1].r_loc.kl_bucket, (struct rec *[]){&r[n1 - 1]}, 1);
	kv_bucket_close(bs);

	/* Closing sealed the last one; everything loads again by its trailer. */
	check_all_sealed(dfd, r, n1 + 2);
	bs = bs_default(f, dfd);
	s = stats(bs);
	assert_int_equal(s.bst_buckets, 3);
	assert_int_equal(s.bst_truncated, 0);
	assert_int_equal(s.bst_written, 0);
	assert_int_equal(s.bst_used, files_bytes(dfd, NULL));
	for (unsigned i = 0; i < n1 + 2; i++) {
		assert_true(kv_bucket_valid(bs, &r[i].r_loc));
		value_ok(bs, &r[i]);
	}
	scan_is(bs, false, r, n1 + 2);
	scan_is(bs, true, r, n1 + 2);
	kv_bucket_close(bs);
	recs_free(r, n1 + 2);
	free(r);
	close(dfd);
}

/* bo_bucket_keys seals a bucket by its number of records. */
static void test_bucket_keys(void **state)
{
	enum { N = 10 };
	struct fix *f = fix_of(state);
	int dfd = ddir(f, "d");
	struct kv_bucket_set *bs = bs_open(f, dfd, BUCKET, 4, CAP);
	struct rec r[N];

	for (unsigned i = 0; i < N; i++)
		rec_init(&r[i], 10 + i, 6, 1 + i);
	append_ok(bs, r, N);
	for (unsigned i = 0; i < N; i++)
		assert_int_equal(r[i].r_loc.kl_bucket, r[(i / 4) * 4].r_loc.kl_bucket);
	assert_true(r[4].r_loc.kl_bucket > r[0].r_loc.kl_bucket);
	assert_true(r[8].r_loc.kl_bucket > r[4].r_loc.kl_bucket);
	assert_int_equal(stats(bs).bst_buckets, 3);
	kv_bucket_close(bs);
	check_all_sealed(dfd, r, N);
	bs = bs_open(f, dfd, BUCKET, 4, CAP);
	scan_is(bs, true, r, N);
	kv_bucket_close(bs);
	recs_free(r, N);
	close(dfd);
}

/* A listing of the bucket directory: names and sizes. */
static char *listing(int dirfd)
{
	int fd = openat(dirfd, "buckets", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	size_t cap = 4096, len = 0;
	char *out = calloc(1, cap), *names[64];
	unsigned n = 0;
	struct dirent *de;
	DIR *d;

	assert_non_null(out);
	assert_true(fd >= 0);
	d = fdopendir(fd);
	assert_non_null(d);
	while ((de = readdir(d)))
		if (de->d_name[0] != '.' && n < 64)
			names[n++] = strdup(de->d_name);
	closedir(d);
	for (unsigned i = 0; i < n; i++)
		for (unsigned j = i + 1; j < n; j++)
			if (strcmp(names[j], names[i]) < 0) {
				char *t = names[i];

				names[i] = names[j];
				names[j] = t;
			}
	for (unsigned i = 0; i < n; i++) {
		char name[300];

		snprintf(name, sizeof(name), "buckets/%s", names[i]);
		len += (size_t)snprintf(out + len, cap - len, "%s %" PRIu64 "\n", names[i],
					fsize(dirfd, name));
		free(names[i]);
	}
	return out;
}

/*
 * The quota: a put that would cross bo_cap gets -ENOSPC and changes
 * nothing — no bytes, no bucket, no counter — while the puts around it in
 * the same batch go through.
 */
static void test_quota(void **state)
{
	struct fix *f = fix_of(state);
	int dfd = ddir(f, "d");
	const uint64_t cap = 4 * MIB;
	struct kv_bucket_set *bs = bs_open(f, dfd, BUCKET, 100000, cap);
	struct kv_bucket_stats s0, s1;
	struct kv_bucket_put p[3];
	struct rec r[40], big, tiny[2];
	unsigned n = 0;
	char *l0, *l1;
	int rc;

	for (unsigned i = 0; i < 20; i++)
		rec_init(&r[i], 1 + i, 8, 100 * KIB);
	append_ok(bs, r, 20);
	n = 20;

	/* [fits, would cross, fits] */
	rec_init(&tiny[0], 100, 8, 1);
	rec_init(&big, 101, 8, 3 * MIB);
	rec_init(&tiny[1], 102, 8, 1);
	put_of(&p[0], &tiny[0]);
	put_of(&p[1], &big);
	put_of(&p[2], &tiny[1]);
	s0 = stats(bs);
	assert_int_equal(kv_bucket_append(bs, p, 3), -ENOSPC);
	assert_int_equal(p[0].bp_err, 0);
	assert_int_equal(p[1].bp_err, -ENOSPC);
	assert_int_equal(p[2].bp_err, 0);
	tiny[0].r_loc = p[0].bp_loc;
	tiny[1].r_loc = p[2].bp_loc;
	s1 = stats(bs);
	assert_int_equal(s1.bst_buckets, s0.bst_buckets);
	assert_int_equal(s1.bst_written - s0.bst_written,
			 kv_loc_size(&p[0].bp_loc) + kv_loc_size(&p[2].bp_loc));
	assert_int_equal(s1.bst_used - s0.bst_used,
			 kv_loc_size(&p[0].bp_loc) + kv_loc_size(&p[2].bp_loc));
	assert_int_equal(p[2].bp_loc.kl_off, p[0].bp_loc.kl_off + kv_loc_size(&p[0].bp_loc));
	value_ok(bs, &tiny[0]);
	value_ok(bs, &tiny[1]);
	val_free(&big.r_val);

	/* Fill up one put at a time; the one that does not fit changes nothing. */
	for (;;) {
		struct kv_bucket_put q;

		assert_true(n < 40);
		rec_init(&r[n], 200 + n, 8, 100 * KIB);
		put_of(&q, &r[n]);
		s0 = stats(bs);
		l0 = listing(dfd);
		rc = kv_bucket_append(bs, &q, 1);
		if (rc == 0) {
			r[n].r_loc = q.bp_loc;
			n++;
			free(l0);
			continue;
		}
		assert_int_equal(rc, -ENOSPC);
		assert_int_equal(q.bp_err, -ENOSPC);
		s1 = stats(bs);
		l1 = listing(dfd);
		assert_string_equal(l0, l1);
		assert_memory_equal(&s0, &s1, sizeof(s0));
		assert_true(s1.bst_used + kv_rec_size(8, 100 * KIB) > cap);
		free(l0);
		free(l1);
		val_free(&r[n].r_val);
		break;
	}
	assert_true(n > 20);
	for (unsigned i = 0; i < n; i++)
		value_ok(bs, &r[i]);
	kv_bucket_close(bs);

	/* The refused value left no record. */
	bs = bs_open(f, dfd, BUCKET, 100000, cap);
	{
		struct seen *sn = calloc(1, sizeof(*sn));
		uint64_t bad;

		assert_non_null(sn);
		assert_int_equal(kv_bucket_scan(bs, true, seen_add, sn, &bad), 0);
		assert_int_equal(bad, 0);
		assert_int_equal(sn->s_n, n + 2);
		for (unsigned i = 0; i < sn->s_n; i++)
			assert_int_not_equal(sn->s_r[i].sr_loc.kl_seq, 101);
		free(sn);
	}
	kv_bucket_close(bs);
	recs_free(r, n);
	recs_free(tiny, 2);
	close(dfd);
}

/*
 * Reservations: what kv_bucket_reserve promised is not the quota's for
 * other puts; a put that fills a reservation (bp_fill) may take it and
 * uses it up once placed; a refused put keeps its fill; unreserve gives
 * it back; a promise beyond the quota is refused unless forced.
 */
static void test_reserve(void **state)
{
	struct fix *f = fix_of(state);
	int dfd = ddir(f, "d");
	const uint64_t cap = 8 * MIB, resv = 4 * MIB;
	struct kv_bucket_set *bs = bs_open(f, dfd, BUCKET, 100000, cap);
	struct kv_bucket_put q;
	struct rec r[3];

	assert_int_equal(kv_bucket_reserve(bs, 9 * MIB, false), -ENOSPC);
	assert_int_equal(stats(bs).bst_reserved, 0);
	assert_int_equal(kv_bucket_reserve(bs, resv, false), 0);
	assert_int_equal(stats(bs).bst_reserved, resv);
	assert_int_equal(kv_bucket_reserve(bs, 5 * MIB, false), -ENOSPC); /* 4 + 5 > 8 */

	/* 4 MiB unreserved: 3 MiB fit, another 1 MiB do not (record heads, seals). */
	rec_init(&r[0], 1, 8, 3 * MIB);
	append_ok(bs, r, 1);
	rec_init(&r[1], 2, 8, 1 * MIB);
	put_of(&q, &r[1]);
	assert_int_equal(kv_bucket_append(bs, &q, 1), -ENOSPC);
	assert_int_equal(q.bp_err, -ENOSPC);
	/* The same put filling a reservation goes through, and uses it up. */
	put_of(&q, &r[1]);
	q.bp_fill = 2 * MIB;
	assert_int_equal(kv_bucket_append(bs, &q, 1), 0);
	assert_int_equal(q.bp_fill, 0);
	r[1].r_loc = q.bp_loc;
	assert_int_equal(stats(bs).bst_reserved, resv - 2 * MIB);
	/* A fill too small for what is left refuses, and keeps its fill. */
	rec_init(&r[2], 3, 8, 4 * MIB);
	put_of(&q, &r[2]);
	q.bp_fill = 1 * MIB;
	assert_int_equal(kv_bucket_append(bs, &q, 1), -ENOSPC);
	assert_int_equal(q.bp_fill, 1 * MIB);
	assert_int_equal(stats(bs).bst_reserved, resv - 2 * MIB);
	kv_bucket_unreserve(bs, resv - 2 * MIB);
	assert_int_equal(stats(bs).bst_reserved, 0);
	/* Recovery's promise is kept whatever the room. */
	assert_int_equal(kv_bucket_reserve(bs, 2 * cap, true), 0);
	assert_int_equal(stats(bs).bst_reserved, 2 * cap);
	kv_bucket_unreserve(bs, 2 * cap);
	value_ok(bs, &r[0]);
	value_ok(bs, &r[1]);
	val_free(&r[2].r_val);
	kv_bucket_close(bs);
	recs_free(r, 2);
	close(dfd);
}

/*
 * The quota bounds what the bucket files hold: whatever the cap (swept
 * across a bucket boundary, 4 KiB apart), filling up never leaves
 * bst_used above bst_cap, nor the sealed files above the cap.
 */
static void test_quota_bound(void **state)
{
	enum { N = 40 };
	struct fix *f = fix_of(state);
	struct rec *r = calloc(N, sizeof(*r));

	assert_non_null(r);
	for (unsigned i = 0; i < N; i++)
		rec_init(&r[i], 1 + i, 8, 12 * KIB);
	for (uint64_t cap = 200 * KIB; cap <= 300 * KIB; cap += 4 * KIB) {
		char name[32];
		int dfd;
		struct kv_bucket_set *bs;
		struct kv_bucket_put p[N];
		struct kv_bucket_stats s;
		uint64_t files;
		unsigned ok = 0;

		snprintf(name, sizeof(name), "cap%" PRIu64, cap);
		dfd = ddir(f, name);
		bs = bs_open(f, dfd, 64 * KIB, 100000, cap);
		for (unsigned i = 0; i < N; i++)
			put_of(&p[i], &r[i]);
		assert_int_equal(kv_bucket_append(bs, p, N), -ENOSPC);
		for (unsigned i = 0; i < N; i++) {
			assert_true(p[i].bp_err == 0 || p[i].bp_err == -ENOSPC);
			ok += p[i].bp_err == 0;
		}
		assert_true(ok > 0);
		s = stats(bs);
		kv_bucket_close(bs);
		files = files_bytes(dfd, NULL);
		close(dfd);
		if (s.bst_used > s.bst_cap || files > cap) {
			recs_free(r, N);
			free(r);
			fail_msg("cap %" PRIu64 ": %u puts of %u taken, then bst_used %" PRIu64
				 ", and after close the bucket files hold %" PRIu64 " bytes",
				 cap, ok, N, s.bst_used, files);
		}
	}
	recs_free(r, N);
	free(r);
}

/*
 * The same bound with long keys (paths are keys, up to 4 KiB): a bucket's
 * index block then weighs about as much as its records, and it too is
 * bucket-file bytes the quota must cover.
 */
static void test_quota_bound_long_keys(void **state)
{
	enum { N = 400 };
	struct fix *f = fix_of(state);
	int dfd = ddir(f, "d");
	const uint64_t cap = 3 * MIB / 2;
	struct kv_bucket_set *bs = bs_open(f, dfd, BUCKET, 100000, cap);
	struct rec *r = calloc(N, sizeof(*r));
	struct kv_bucket_put *p = calloc(N, sizeof(*p));
	struct kv_bucket_stats s;
	uint64_t files;
	unsigned ok = 0;

	assert_non_null(r);
	assert_non_null(p);
	for (unsigned i = 0; i < N; i++) {
		rec_init(&r[i], 1 + i, 4000, 0);
		put_of(&p[i], &r[i]);
	}
	assert_int_equal(kv_bucket_append(bs, p, N), -ENOSPC);
	for (unsigned i = 0; i < N; i++)
		ok += p[i].bp_err == 0;
	s = stats(bs);
	kv_bucket_close(bs);
	files = files_bytes(dfd, NULL);
	close(dfd);
	recs_free(r, N);
	free(r);
	free(p);
	assert_true(ok > 0);
	if (s.bst_used > s.bst_cap || files > cap)
		fail_msg("cap %" PRIu64 ": %u puts taken, then bst_used %" PRIu64
			 ", and after close the bucket files hold %" PRIu64 " bytes",
			 cap, ok, s.bst_used, files);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    T(test_append_sizes),
	    T(test_bucket_keys),
	    T(test_quota),
	    T(test_reserve),
	    T(test_quota_bound),
	    T(test_quota_bound_long_keys),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
