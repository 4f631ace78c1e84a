/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_bucket_recycle.c — buckets after they are written: dead
 * and live bytes and bucket ids (ssd/bucket_set.c), dropping buckets, and
 * their files kept as spares (ID.kvs) and written over by the next
 * compaction output (ssd/bucket_recycle.c, ssd/bucket_compact.c). The
 * fixture, values and file decoding are tests/unit/bucket_fixture.h.
 */
#include "bucket_fixture.h"

struct ids {
	unsigned i_n;
	uint64_t i_id[8];
};

static void collect_id(uint64_t id, void *arg)
{
	struct ids *ids = arg;

	if (ids->i_n < 8)
		ids->i_id[ids->i_n] = id;
	ids->i_n++;
}

/* Dead-byte accounting, live bytes at recovery, dropping buckets, bucket ids. */
static void test_dead_drop_ids(void **state)
{
	struct fix *f = fix_of(state);
	int dfd = ddir(f, "d");
	struct kv_bucket_set *bs = bs_open(f, dfd, BUCKET, 3, CAP);
	struct rec r[7];
	struct kv_bucket_stats s0, s1;
	struct ids ids = {0};
	uint64_t b1, b2, b1_size, *c;
	uint32_t nch;

	for (unsigned i = 0; i < 6; i++)
		rec_init(&r[i], 1 + i, 12, 10000 * (i + 1));
	append_ok(bs, r, 6); /* two buckets of three */
	b1 = r[0].r_loc.kl_bucket;
	b2 = r[3].r_loc.kl_bucket;
	assert_true(b2 > b1);

	assert_int_equal(stats(bs).bst_dead, 0);
	kv_bucket_dead(bs, &r[1].r_loc);
	assert_int_equal(stats(bs).bst_dead, kv_loc_size(&r[1].r_loc));
	kv_bucket_dead(bs, &r[4].r_loc);
	assert_int_equal(stats(bs).bst_dead, kv_loc_size(&r[1].r_loc) + kv_loc_size(&r[4].r_loc));
	{
		struct kv_loc nowhere = r[0].r_loc;

		nowhere.kl_bucket = 777;
		kv_bucket_dead(bs, &nowhere);
		assert_int_equal(stats(bs).bst_dead,
				 kv_loc_size(&r[1].r_loc) + kv_loc_size(&r[4].r_loc));
	}
	/* Dead records still read: their bucket is there until dropped. */
	value_ok(bs, &r[1]);

	/* Live bytes set at recovery: the rest of the bucket's records are dead. */
	kv_bucket_set_live(bs, b1, kv_loc_size(&r[0].r_loc));
	assert_int_equal(stats(bs).bst_dead, kv_loc_size(&r[1].r_loc) + kv_loc_size(&r[2].r_loc) +
						 kv_loc_size(&r[4].r_loc));
	kv_bucket_set_live(
	    bs, b1, kv_loc_size(&r[0].r_loc) + kv_loc_size(&r[1].r_loc) + kv_loc_size(&r[2].r_loc));
	assert_int_equal(stats(bs).bst_dead, kv_loc_size(&r[4].r_loc));

	/* Dropping a bucket removes its file, its bytes, its records. */
	s0 = stats(bs);
	b1_size = fsize(dfd, bname(b1));
	kv_bucket_drop(bs, b1);
	s1 = stats(bs);
	assert_int_equal(s1.bst_buckets, s0.bst_buckets - 1);
	assert_int_equal(s0.bst_used - s1.bst_used, b1_size);
	assert_int_equal(faccessat(dfd, bname(b1), F_OK, 0), -1);
	assert_false(kv_bucket_valid(bs, &r[0].r_loc));
	c = NULL;
	assert_int_equal(kv_bucket_load_csums(bs, &r[0].r_loc, &c, &nch), -ENOENT);
	{
		void *buf = NULL;
		char *data;
		uint64_t n, zero[2] = {0, 0};

		assert_int_equal(kv_bucket_read(bs, &r[0].r_loc, zero, 0, 1, &buf, &data, &n),
				 -ENOENT);
	}
	value_ok(bs, &r[3]);
	kv_bucket_drop(bs, 4242); /* no such bucket: nothing happens */
	assert_int_equal(stats(bs).bst_buckets, s1.bst_buckets);

	/* Ids: never below min_id again; each lists them. */
	assert_true(kv_bucket_next_id(bs) > b2);
	kv_bucket_min_id(bs, 100);
	assert_int_equal(kv_bucket_next_id(bs), 100);
	kv_bucket_min_id(bs, 50);
	assert_int_equal(kv_bucket_next_id(bs), 100);
	rec_init(&r[6], 7, 12, 10);
	append_ok(bs, r + 6, 1);
	assert_int_equal(r[6].r_loc.kl_bucket, 100);
	assert_true(kv_bucket_next_id(bs) > 100);
	kv_bucket_close(bs);
	bs = bs_open(f, dfd, BUCKET, 3, CAP);
	assert_true(kv_bucket_next_id(bs) > 100);
	kv_bucket_each(bs, collect_id, &ids);
	assert_int_equal(ids.i_n, 2);
	assert_int_equal(ids.i_id[0], b2);
	assert_int_equal(ids.i_id[1], 100);
	assert_int_equal(stats(bs).bst_buckets, 2);
	kv_bucket_close(bs);
	recs_free(r, 7);
	close(dfd);
}

/* A spare's file (ssd/bucket.c): ID.kvs. */
static const char *sname(uint64_t id)
{
	return bfile(id, "kvs");
}

static ino_t inode_of(int dirfd, const char *name)
{
	struct stat st;

	assert_int_equal(fstatat(dirfd, name, &st, 0), 0);
	return st.st_ino;
}

/*
 * Recycling (kv_bucket_recycle): a bucket dropped while on keeps its file
 * as a spare, ID.kvs; the next compaction output is written over that very
 * file and sealed at its own end, nothing of the old records left in it;
 * off removes the spares left. A crash image — a spare, and an output
 * just begun over one — reopens to the records that were there and no
 * old one of the spare's: the block after the new header is zeroed, so
 * the scan of the output left open stops there.
 */
static void test_recycle(void **state)
{
	struct fix *f = fix_of(state);
	int dfd = ddir(f, "d");
	struct kv_bucket_set *bs = bs_open(f, dfd, BUCKET, 3, CAP);
	struct rec r[9], *moved[3];
	struct kv_loc from[3], to[3];
	struct kv_compact *c;
	uint64_t b[3], out, len;
	char *image, name[64];
	ino_t ino;
	int errs[3], fd;

	for (unsigned i = 0; i < 9; i++)
		rec_init(&r[i], 60 + i, 12, 100 * KIB + i * 777);
	append_ok(bs, r, 9); /* three buckets of three */
	assert_int_equal(kv_bucket_seal_active(bs), 0);
	for (unsigned i = 0; i < 3; i++)
		b[i] = r[3 * i].r_loc.kl_bucket;

	/* b0 dropped while recycling: its file becomes a spare. */
	kv_bucket_recycle(bs, true);
	ino = inode_of(dfd, bname(b[0]));
	assert_int_equal(kv_bucket_drop(bs, b[0]), 0);
	assert_int_equal(faccessat(dfd, bname(b[0]), F_OK, 0), -1);
	assert_int_equal(inode_of(dfd, sname(b[0])), ino);
	assert_int_equal(stats(bs).bst_buckets, 2);

	/* b1's records copied into an output over it. */
	assert_int_equal(kv_compact_begin(bs, false, &c), 0);
	out = kv_compact_id(c);
	assert_int_equal(faccessat(dfd, sname(b[0]), F_OK, 0), -1);
	assert_int_equal(inode_of(dfd, bname(out)), ino);
	for (unsigned i = 0; i < 3; i++)
		from[i] = r[3 + i].r_loc;
	assert_int_equal(kv_compact_copy_many(c, from, to, errs, 3), 3);
	assert_int_equal(errs[0] | errs[1] | errs[2], 0);
	assert_true(kv_compact_recycled(c));
	assert_int_equal(kv_compact_commit(c), 0);
	for (unsigned i = 0; i < 3; i++) {
		r[3 + i].r_loc = to[i];
		moved[i] = &r[3 + i];
		value_ok(bs, &r[3 + i]);
	}
	check_sealed(dfd, out, moved, 3); /* and the file ends at its trailer */

	/* Off: the spares left go. */
	assert_int_equal(kv_bucket_drop(bs, b[1]), 0);
	assert_int_equal(faccessat(dfd, sname(b[1]), F_OK, 0), 0);
	kv_bucket_recycle(bs, false);
	assert_int_equal(faccessat(dfd, sname(b[1]), F_OK, 0), -1);
	assert_int_equal(kv_bucket_drop(bs, out), 0); /* not recycling: removed */
	assert_int_equal(faccessat(dfd, bname(out), F_OK, 0), -1);
	assert_int_equal(faccessat(dfd, sname(out), F_OK, 0), -1);

	/*
	 * A crash image: an output just begun over b2's file (b2's records,
	 * sealed, past the new header), and a spare, as the files were when
	 * the stop came (put back after the abort removed them).
	 */
	kv_bucket_recycle(bs, true);
	assert_int_equal(kv_bucket_drop(bs, b[2]), 0);
	assert_int_equal(kv_compact_begin(bs, false, &c), 0);
	out = kv_compact_id(c);
	image = slurp(dfd, bname(out), &len);
	assert_true(len > 3 * 100 * KIB);
	kv_compact_abort(c);
	kv_bucket_recycle(bs, false);
	fd = openat(dfd, bname(out), O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, image, len), (ssize_t)len);
	close(fd);
	snprintf(name, sizeof(name), "%s", sname(b[2]));
	fd = openat(dfd, name, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, image, len), (ssize_t)len);
	close(fd);
	/* and the same file still under the victim's name (its rename lost): another's header */
	fd = openat(dfd, bname(b[2]), O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, image, len), (ssize_t)len);
	close(fd);
	free(image);
	kv_bucket_close(bs);
	bs = bs_open(f, dfd, BUCKET, 3, CAP);
	assert_int_equal(faccessat(dfd, name, F_OK, 0), -1); /* the spare: removed */
	assert_int_equal(faccessat(dfd, bname(b[2]), F_OK, 0), -1); /* another's header: removed */
	assert_int_equal(stats(bs).bst_buckets, 1);		    /* the output alone */
	scan_is(bs, true, NULL, 0); /* the output: no record; b2's old ones not taken */
	kv_bucket_close(bs);
	recs_free(r, 9);
	close(dfd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    T(test_dead_drop_ids),
	    T(test_recycle),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
