/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_bucket_format.c — the kinds of record and the format
 * versions (ssd/bucket_format.c): EXTENT, MANIFEST and WHOLE records with
 * their extent indexes through heads, index block, reads and scans; puts
 * that are not one kind of record; a loc naming another extent; and
 * version 1 buckets, written here by hand, that load, read, scan and
 * compact into version 2. The fixture, values and file decoding are
 * tests/unit/bucket_fixture.h.
 */
#include "bucket_fixture.h"

/*
 * EXTENT records with their indexes, a MANIFEST and a WHOLE value: heads,
 * index block, reads and scans carry flags and indexes, and a scan hands
 * over the manifest's value (checked) even without check_values.
 */
static void test_extents(void **state)
{
	enum { N = 6 };
	struct fix *f = fix_of(state);
	int dfd = ddir(f, "d");
	struct kv_bucket_set *bs = bs_open(f, dfd, 8 * MIB, 100000, CAP);
	struct rec r[N];

	rec_init(&r[0], 11, 9, 2 * MIB);
	rec_shape(&r[0], KV_REC_EXTENT, 0);
	rec_init(&r[1], 12, 9, 300 * KIB + 5);
	rec_shape(&r[1], KV_REC_EXTENT, 1);
	rec_init(&r[2], 13, 9, 1);
	rec_shape(&r[2], KV_REC_EXTENT, 7);
	rec_init(&r[3], 14, 9, sizeof(struct kv_manifest) + 3 * sizeof(struct kv_manifest_ent));
	rec_shape(&r[3], KV_REC_MANIFEST, KV_MANIFEST_INDEX);
	rec_init(&r[4], 15, 20, 100 * KIB);
	rec_init(&r[5], 16, 9, 150 * KIB); /* a manifest larger than a chunk */
	rec_shape(&r[5], KV_REC_MANIFEST, KV_MANIFEST_INDEX);
	append_ok(bs, r, 3);
	append_ok(bs, r + 3, N - 3);
	for (unsigned i = 0; i < N; i++)
		value_ok(bs, &r[i]);
	assert_int_equal(kv_bucket_seal_active(bs), 0);
	scan_is(bs, false, r, N);
	kv_bucket_close(bs);
	check_all_sealed(dfd, r, N);

	bs = bs_open(f, dfd, 8 * MIB, 100000, CAP);
	scan_is(bs, false, r, N);
	scan_is(bs, true, r, N);
	for (unsigned i = 0; i < N; i++)
		value_ok(bs, &r[i]);
	kv_bucket_close(bs);

	/* A damaged manifest is a damaged record, checked values or not. */
	flip(dfd, bname(r[3].r_loc.kl_bucket), r[3].r_loc.kl_off + r[3].r_loc.kl_head_len + 4);
	bs = bs_open(f, dfd, 8 * MIB, 100000, CAP);
	for (int cv = 0; cv < 2; cv++) {
		struct seen *s = calloc(1, sizeof(*s));
		uint64_t bad = 0;

		assert_non_null(s);
		assert_int_equal(kv_bucket_scan(bs, cv, seen_add, s, &bad), 0);
		assert_int_equal(bad, 1);
		assert_int_equal(s->s_n, N - 1);
		assert_int_equal(s->s_r[3].sr_loc.kl_off, r[4].r_loc.kl_off);
		free(s);
	}
	kv_bucket_close(bs);
	recs_free(r, N);
	close(dfd);
}

/* A loc naming the right record but another extent index is damaged, never data. */
static void test_wrong_index(void **state)
{
	struct fix *f = fix_of(state);
	int dfd = ddir(f, "d");
	struct kv_bucket_set *bs = bs_default(f, dfd);
	struct kv_compact *c;
	struct rec r[3];
	struct kv_loc l, to;
	uint64_t *cs = NULL, before;
	uint32_t n = 0;
	int err = 0;

	rec_init(&r[0], 21, 8, 70 * KIB);
	rec_shape(&r[0], KV_REC_EXTENT, 3);
	rec_init(&r[1], 22, 8, 100);
	rec_shape(&r[1], KV_REC_MANIFEST, KV_MANIFEST_INDEX);
	rec_init(&r[2], 23, 8, 100);
	append_ok(bs, r, 3);
	assert_int_equal(kv_bucket_seal_active(bs), 0);
	for (unsigned i = 0; i < 3; i++) {
		static const uint32_t other[3] = {4, 0, 1};

		l = r[i].r_loc;
		l.kl_index = other[i];
		before = stats(bs).bst_csum_errors;
		assert_int_equal(kv_bucket_load_csums(bs, &l, &cs, &n), -EIO);
		assert_int_equal(stats(bs).bst_csum_errors, before + 1);
		assert_int_equal(kv_compact_begin(bs, false, &c), 0);
		assert_int_equal(kv_compact_copy_many(c, &l, &to, &err, 1), 1);
		assert_int_equal(err, -EBADMSG);
		assert_int_equal(kv_compact_records(c), 0);
		kv_compact_abort(c);
		value_ok(bs, &r[i]);
	}
	kv_bucket_close(bs);
	recs_free(r, 3);
	close(dfd);
}

/* Puts that are not exactly one kind of record are refused, touching nothing. */
static void test_bad_flags(void **state)
{
	static const struct {
		uint16_t flags;
		uint32_t index;
		uint64_t len;
	} bad[] = {
	    {0, 0, 10},
	    {KV_REC_WHOLE | KV_REC_EXTENT, 0, 10},
	    {KV_REC_EXTENT | KV_REC_MANIFEST, KV_MANIFEST_INDEX, 10},
	    {0x8, 0, 10},
	    {KV_REC_WHOLE, 3, 10},
	    {KV_REC_MANIFEST, 0, 10},
	    {KV_REC_EXTENT, KV_MANIFEST_INDEX, 10},
	    {KV_REC_EXTENT, 1, 2 * MIB + 1},
	};
	enum { NB = sizeof(bad) / sizeof(bad[0]) };
	struct fix *f = fix_of(state);
	int dfd = ddir(f, "d");
	struct kv_bucket_set *bs = bs_default(f, dfd);
	struct kv_bucket_put p[NB + 1];
	struct kv_bucket_stats s;
	struct rec r[NB + 1];

	for (unsigned i = 0; i < NB; i++) {
		rec_init(&r[i], 30 + i, 8, bad[i].len);
		rec_shape(&r[i], bad[i].flags, bad[i].index);
		put_of(&p[i], &r[i]);
	}
	rec_init(&r[NB], 99, 8, 10);
	put_of(&p[NB], &r[NB]);
	assert_int_equal(kv_bucket_append(bs, p, NB + 1), -EINVAL);
	for (unsigned i = 0; i < NB; i++) {
		assert_int_equal(p[i].bp_err, -EINVAL);
		assert_int_equal(p[i].bp_loc.kl_bucket, 0);
	}
	assert_int_equal(p[NB].bp_err, 0);
	kv_bucket_settle(bs, &p[NB].bp_loc);
	r[NB].r_loc = p[NB].bp_loc;
	s = stats(bs);
	assert_int_equal(s.bst_used, KV_BLOCK + kv_loc_size(&r[NB].r_loc));
	value_ok(bs, &r[NB]);
	kv_bucket_close(bs);
	check_sealed(dfd, r[NB].r_loc.kl_bucket, (struct rec *[]){&r[NB]}, 1);
	recs_free(r, NB + 1);
	close(dfd);
}

/*
 * Writes by hand, as version 1 wrote them, bucket file `id` holding the
 * one record r (a 56-byte head in a version 1 bucket): sealed, with a
 * version 1 index block (32-byte entries) and trailer, or left open (a
 * crash), zeros after the record. Sets r's loc. Returns the file's size.
 */
static uint64_t write_v1_bucket(int dirfd, uint64_t id, struct rec *r, bool sealed)
{
	const size_t elen = offsetof(struct kv_idx_ent, ie_ext_index);
	uint64_t vlen = r->r_val.v_len, nch = (vlen + CHUNK - 1) / CHUNK;
	uint32_t hlen = kv_rec_head_len_v(1, r->r_klen, vlen);
	uint64_t rec_end = KV_BLOCK + hlen + UP4K(vlen), ilen = elen + PAD8(r->r_klen);
	uint64_t size = sealed ? rec_end + UP4K(ilen) + KV_BLOCK : rec_end + 64 * KIB;
	char *file = calloc(1, size), *key, *cs;
	struct kv_bucket_hdr h = {
	    .bh_magic = KV_BUCKET_MAGIC, .bh_version = 1, .bh_id = id, .bh_created_ns = 1};
	struct kv_rec_head rh = {
	    .rh_magic = KV_REC_MAGIC,
	    .rh_version = 1,
	    .rh_key_len = r->r_klen,
	    .rh_head_len = hlen,
	    .rh_value_len = vlen,
	    .rh_seq = r->r_val.v_seed,
	    .rh_chunk_shift = KV_CHUNK_SHIFT,
	    .rh_nchunks = (uint32_t)nch,
	};
	XXH3_state_t *st = XXH3_createState();
	int fd;

	assert_non_null(file);
	assert_non_null(st);
	assert_int_equal(hlen % KV_BLOCK, 0);
	h.bh_csum = XXH3_64bits(&h, sizeof(h));
	memcpy(file, &h, sizeof(h));
	key = file + KV_BLOCK + KV_REC_HEAD_V1;
	cs = key + r->r_klen;
	memcpy(key, r->r_key, r->r_klen);
	for (uint64_t k = 0; k < nch; k++) {
		uint64_t clen = vlen - k * CHUNK < CHUNK ? vlen - k * CHUNK : CHUNK;
		uint64_t c = XXH3_64bits((char *)r->r_val.v_buf + k * CHUNK, clen);

		memcpy(cs + k * 8, &c, 8);
	}
	rh.rh_payload_csum = XXH3_64bits(cs, nch * 8);
	XXH3_64bits_reset(st);
	XXH3_64bits_update(st, &rh, KV_REC_HEAD_V1); /* rh_head_csum still 0 */
	XXH3_64bits_update(st, key, r->r_klen);
	XXH3_64bits_update(st, cs, nch * 8);
	rh.rh_head_csum = XXH3_64bits_digest(st);
	XXH3_freeState(st);
	memcpy(file + KV_BLOCK, &rh, KV_REC_HEAD_V1);
	memcpy(file + KV_BLOCK + hlen, r->r_val.v_buf, vlen);
	if (sealed) {
		struct kv_idx_ent e = {
		    .ie_off = KV_BLOCK,
		    .ie_value_len = vlen,
		    .ie_seq = rh.rh_seq,
		    .ie_head_len = hlen,
		    .ie_key_len = r->r_klen,
		};
		struct kv_bucket_trailer t = {
		    .bt_magic = KV_TRAILER_MAGIC,
		    .bt_id = id,
		    .bt_index_off = rec_end,
		    .bt_index_len = ilen,
		    .bt_count = 1,
		};

		memcpy(file + rec_end, &e, elen);
		memcpy(file + rec_end + elen, r->r_key, r->r_klen);
		t.bt_index_csum = XXH3_64bits(file + rec_end, ilen);
		t.bt_csum = XXH3_64bits(&t, sizeof(t));
		memcpy(file + size - KV_BLOCK, &t, sizeof(t));
	}
	assert_true(mkdirat(dirfd, "buckets", 0700) == 0 || errno == EEXIST);
	fd = openat(dirfd, bname(id), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, file, size), (ssize_t)size);
	assert_int_equal(fsync(fd), 0);
	close(fd);
	free(file);
	r->r_loc = (struct kv_loc){.kl_bucket = id,
				   .kl_off = KV_BLOCK,
				   .kl_len = vlen,
				   .kl_seq = rh.rh_seq,
				   .kl_head_len = hlen};
	return size;
}

/*
 * Version 1 buckets, sealed and open, load; their records read, scan as
 * WHOLE at index 0 and compact into a version 2 bucket byte for byte.
 */
static void test_v1_compat(void **state)
{
	struct fix *f = fix_of(state);
	int dfd = ddir(f, "d");
	struct kv_bucket_set *bs;
	struct kv_bucket_trailer t;
	struct kv_compact *c;
	struct kv_loc to[2];
	struct kv_idx_ent e;
	struct rec r[3];
	uint64_t sealed_size, len, olen;
	char *src, *out;
	int errs[2];

	rec_init(&r[0], 41, 33, 150 * KIB); /* three chunks */
	rec_init(&r[1], 42, 4050, 5);	    /* a head of two blocks */
	sealed_size = write_v1_bucket(dfd, 1, &r[0], true);
	write_v1_bucket(dfd, 2, &r[1], false);
	assert_int_equal(r[1].r_loc.kl_head_len, 2 * KV_BLOCK);

	bs = bs_default(f, dfd);
	assert_int_equal(stats(bs).bst_truncated, 1);
	assert_int_equal(fsize(dfd, bname(1)), sealed_size);
	for (unsigned i = 0; i < 2; i++) {
		assert_true(kv_bucket_valid(bs, &r[i].r_loc));
		value_ok(bs, &r[i]);
	}
	scan_is(bs, false, r, 2);
	scan_is(bs, true, r, 2);
	/* The open one was sealed as version 1: 32-byte index entries. */
	src = slurp(dfd, bname(2), &len);
	memcpy(&t, src + len - KV_BLOCK, sizeof(t));
	assert_int_equal(t.bt_index_len, offsetof(struct kv_idx_ent, ie_ext_index) + PAD8(4050));
	assert_int_equal(t.bt_count, 1);
	free(src);

	/* Compaction copies them as they are, into a version 2 bucket. */
	assert_int_equal(kv_compact_begin(bs, false, &c), 0);
	assert_int_equal(
	    kv_compact_copy_many(c, (struct kv_loc[]){r[0].r_loc, r[1].r_loc}, to, errs, 2), 2);
	assert_int_equal(errs[0], 0);
	assert_int_equal(errs[1], 0);
	assert_int_equal(kv_compact_commit(c), 0);
	for (unsigned i = 0; i < 2; i++) {
		char *a, *b;
		uint64_t n = kv_loc_size(&r[i].r_loc);

		assert_int_equal(to[i].kl_len, r[i].r_loc.kl_len);
		assert_int_equal(to[i].kl_seq, r[i].r_loc.kl_seq);
		assert_int_equal(to[i].kl_head_len, r[i].r_loc.kl_head_len);
		assert_int_equal(to[i].kl_index, 0);
		src = slurp(dfd, bname(r[i].r_loc.kl_bucket), &len);
		out = slurp(dfd, bname(to[i].kl_bucket), &olen);
		a = src + r[i].r_loc.kl_off;
		b = out + to[i].kl_off;
		assert_memory_equal(a, b, n);
		free(src);
		free(out);
		r[i].r_loc = to[i];
		value_ok(bs, &r[i]);
	}
	/* The output's index block is version 2's, with the records' flags and indexes. */
	out = slurp(dfd, bname(to[0].kl_bucket), &olen);
	memcpy(&t, out + olen - KV_BLOCK, sizeof(t));
	assert_int_equal(t.bt_count, 2);
	assert_int_equal(t.bt_index_len, 2 * sizeof(e) + PAD8(33) + PAD8(4050));
	memcpy(&e, out + t.bt_index_off, sizeof(e));
	assert_int_equal(e.ie_flags, KV_REC_WHOLE);
	assert_int_equal(e.ie_ext_index, 0);
	assert_int_equal(e.ie_head_len, r[0].r_loc.kl_head_len);
	free(out);
	/* A version 2 record lands after them, and everything scans. */
	rec_init(&r[2], 43, 8, 10);
	append_ok(bs, &r[2], 1);
	kv_bucket_close(bs);
	bs = bs_default(f, dfd);
	{
		struct seen *s = calloc(1, sizeof(*s));
		uint64_t bad = 1;

		assert_non_null(s);
		assert_int_equal(kv_bucket_scan(bs, true, seen_add, s, &bad), 0);
		assert_int_equal(bad, 0);
		assert_int_equal(s->s_n, 5); /* the originals, their copies, the new one */
		for (unsigned i = 0; i < s->s_n; i++) {
			assert_int_equal(s->s_r[i].sr_flags, KV_REC_WHOLE);
			assert_int_equal(s->s_r[i].sr_loc.kl_index, 0);
			assert_false(s->s_r[i].sr_value);
		}
		free(s);
	}
	for (unsigned i = 0; i < 3; i++)
		value_ok(bs, &r[i]);
	kv_bucket_close(bs);
	recs_free(r, 3);
	close(dfd);
}

/* A version 1 head with flags set, or a bucket of an unknown version, is not read as data. */
static void test_v1_damaged(void **state)
{
	struct fix *f = fix_of(state);
	int dfd = ddir(f, "d");
	struct kv_bucket_set *bs;
	struct kv_bucket_stats s;
	uint64_t *cs = NULL, bad = 0;
	uint32_t n;
	uint16_t flags = KV_REC_WHOLE;
	uint32_t v3 = 3;
	struct rec r[2];

	rec_init(&r[0], 51, 8, 10);
	rec_init(&r[1], 52, 8, 10);
	write_v1_bucket(dfd, 1, &r[0], true);
	write_v1_bucket(dfd, 2, &r[1], true);
	/* Flags in a version 1 head (the checksum does not matter: the shape is refused first). */
	poke(dfd, bname(1), KV_BLOCK + offsetof(struct kv_rec_head, rh_flags), &flags, 2);
	poke(dfd, bname(2), offsetof(struct kv_bucket_hdr, bh_version), &v3, 4);
	bs = bs_default(f, dfd);
	assert_int_equal(kv_bucket_load_csums(bs, &r[0].r_loc, &cs, &n), -EIO);
	assert_int_equal(kv_bucket_load_csums(bs, &r[1].r_loc, &cs, &n), -ENOENT);
	assert_int_equal(kv_bucket_scan(bs, false, NULL, NULL, &bad), 0);
	assert_int_equal(bad, 2); /* the bad head, the unknown bucket */
	s = stats(bs);
	assert_int_equal(s.bst_buckets, 2);
	assert_int_equal(kv_bucket_drop(bs, 2), -EBUSY); /* kept for salvage */
	kv_bucket_close(bs);
	recs_free(r, 2);
	close(dfd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    T(test_extents),
	    T(test_wrong_index),
	    T(test_bad_flags),
	    T(test_v1_compat),
	    T(test_v1_damaged),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
