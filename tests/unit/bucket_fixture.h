/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/bucket_fixture.h — what the tests of the bucket files
 * (tests/unit/test_bucket_*.c, ssd/bucket.h) share: the temporary
 * directory each test runs in, real O_DIRECT files under /tmp (a test
 * skips, saying so, where it does not take O_DIRECT), and the helpers
 * that write, read, decode, damage and scan bucket files.
 *
 * Values are a pattern derived from (seed, byte position), so every byte
 * read back is compared with what was meant to be there. Records go in and
 * out through the public API; the sealed files are also decoded here
 * against the layout drawn in ssd/format.h (header, record heads with
 * their chunk checksums, index block, trailer), and damaged or torn on
 * purpose with plain buffered writes, as a crash or a bad disk would.
 *
 * The helpers are static inline: each test program includes this header
 * once and uses some of them.
 */
#ifndef KVFS_TESTS_BUCKET_FIXTURE_H
#define KVFS_TESTS_BUCKET_FIXTURE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "ssd/aio.h"
#include "ssd/bucket.h"
#include "ssd/format.h"
#include "pattern.h"

#define KIB	  1024u
#define MIB	  (1024u * KIB)
#define BUCKET	  (1u * MIB)
#define CAP	  (256ull * MIB)
#define CHUNK	  (1ull << KV_CHUNK_SHIFT)
#define UP4K(x)	  (((uint64_t)(x) + KV_BLOCK - 1) / KV_BLOCK * KV_BLOCK)
#define PAD8(x)	  (((uint64_t)(x) + 7) / 8 * 8)
#define MAXREC	  256
#define PADBYTE	  0xa5 /* what a value buffer holds past the value's end */
#define AIO_DEPTH 64

/* ---- the temporary directory ---- */

struct fix {
	char f_root[64]; /* /tmp/kvfs-bucket-XXXXXX, removed at the end */
	struct kv_aio *f_aio;
};

static inline int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	return remove(path);
}

static inline int fix_setup(void **state)
{
	struct fix *f = calloc(1, sizeof(*f));
	char probe[96];
	int fd;

	if (!f)
		return -1;
	strcpy(f->f_root, "/tmp/kvfs-bucket-XXXXXX");
	if (!mkdtemp(f->f_root)) {
		free(f);
		return -1;
	}
	snprintf(probe, sizeof(probe), "%s/probe", f->f_root);
	fd = open(probe, O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
	if (fd >= 0) {
		close(fd);
		unlink(probe);
	}
	if (fd >= 0 && kv_aio_create(&f->f_aio, AIO_DEPTH) != 0)
		f->f_aio = NULL;
	*state = f;
	return 0;
}

static inline int fix_teardown(void **state)
{
	struct fix *f = *state;
	int rc = nftw(f->f_root, rm_one, 16, FTW_DEPTH | FTW_PHYS);

	if (f->f_aio)
		kv_aio_destroy(f->f_aio);
	free(f);
	return rc ? -1 : 0;
}

/* The fixture, skipping the test (loudly) where /tmp cannot do O_DIRECT or AIO. */
static inline struct fix *fix_of(void **state)
{
	struct fix *f = *state;

	if (!f->f_aio) {
		print_message("SKIP: %s takes no O_DIRECT files, or no AIO context\n", f->f_root);
		skip();
	}
	return f;
}

/* Makes (or opens) the data directory f_root/name; returns its fd. */
static inline int ddir(struct fix *f, const char *name)
{
	char path[128];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", f->f_root, name);
	assert_true(mkdir(path, 0700) == 0 || errno == EEXIST);
	fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(fd >= 0);
	return fd;
}

/* ---- values ---- */

/* Checks that data[0, n) is value bytes [off, off + n) of `seed`. */
static inline void expect_bytes(const void *data, uint64_t seed, uint64_t off, uint64_t n)
{
	uint8_t *want = malloc(n ? n : 1);

	assert_non_null(want);
	pattern(want, seed, off, n);
	if (n && memcmp(data, want, n) != 0) {
		uint64_t i = 0;

		while (((const uint8_t *)data)[i] == want[i])
			i++;
		free(want);
		fail_msg("value %" PRIu64 ": byte %" PRIu64 " differs", seed, off + i);
	}
	free(want);
}

/* A value in a page-aligned buffer, padded past its end with PADBYTE. */
struct val {
	void *v_buf;
	uint64_t v_len, v_seed;
	struct iovec v_iov;
};

static inline void val_init(struct val *v, uint64_t len, uint64_t seed)
{
	uint64_t cap = len ? UP4K(len) : KV_BLOCK;

	assert_int_equal(posix_memalign(&v->v_buf, KV_BLOCK, cap), 0);
	memset(v->v_buf, PADBYTE, cap);
	pattern(v->v_buf, seed, 0, len);
	v->v_len = len;
	v->v_seed = seed;
	v->v_iov = (struct iovec){.iov_base = v->v_buf, .iov_len = cap};
}

static inline void val_free(struct val *v)
{
	free(v->v_buf);
	v->v_buf = NULL;
}

/* One record this test wrote: what went in and where it landed. */
struct rec {
	char r_key[KV_BLOCK + 1];
	uint32_t r_klen;
	struct val r_val;
	struct kv_loc r_loc;
	uint16_t r_flags; /* KV_REC_* (rec_init: WHOLE) */
	uint32_t r_index; /* its extent index (rec_init: 0) */
};

/* A key of klen bytes, distinct per seed. */
static inline void key_init(struct rec *r, uint64_t seed, uint32_t klen)
{
	char tag[32];
	int n = snprintf(tag, sizeof(tag), "k%" PRIu64 "/", seed);

	for (uint32_t i = 0; i < klen; i++)
		r->r_key[i] = i < (uint32_t)n ? tag[i] : (char)('a' + (seed + i) % 26);
	r->r_key[klen] = '\0';
	r->r_klen = klen;
}

static inline void rec_init(struct rec *r, uint64_t seed, uint32_t klen, uint64_t len)
{
	memset(&r->r_loc, 0, sizeof(r->r_loc));
	r->r_flags = KV_REC_WHOLE;
	r->r_index = 0;
	key_init(r, seed, klen);
	val_init(&r->r_val, len, seed);
}

static inline void put_of(struct kv_bucket_put *p, const struct rec *r)
{
	*p = (struct kv_bucket_put){
	    .bp_key = r->r_key,
	    .bp_key_len = r->r_klen,
	    .bp_seq = r->r_val.v_seed,
	    .bp_index = r->r_index,
	    .bp_flags = r->r_flags,
	    .bp_len = r->r_val.v_len,
	    .bp_iov = &r->r_val.v_iov,
	    .bp_iovcnt = 1,
	    .bp_err = 12345,
	};
}

/*
 * Appends recs[0..n) in one batch, all expected to succeed; checks each
 * loc against what the header promises and keeps it in r_loc.
 */
static inline void append_ok(struct kv_bucket_set *bs, struct rec *recs, unsigned n)
{
	struct kv_bucket_put *p = calloc(n, sizeof(*p));

	assert_non_null(p);
	for (unsigned i = 0; i < n; i++)
		put_of(&p[i], &recs[i]);
	assert_int_equal(kv_bucket_append(bs, p, n), 0);
	for (unsigned i = 0; i < n; i++) {
		const struct kv_loc *l = &p[i].bp_loc;

		assert_int_equal(p[i].bp_err, 0);
		assert_true(l->kl_bucket >= 1);
		assert_true(l->kl_off >= KV_BLOCK);
		assert_int_equal(l->kl_off % KV_BLOCK, 0);
		assert_int_equal(l->kl_len, recs[i].r_val.v_len);
		assert_int_equal(l->kl_seq, recs[i].r_val.v_seed);
		assert_int_equal(l->kl_index, recs[i].r_index);
		assert_int_equal(l->kl_head_len, kv_rec_head_len(recs[i].r_klen, l->kl_len));
		assert_int_equal(kv_loc_size(l), kv_rec_size(recs[i].r_klen, l->kl_len));
		assert_true(kv_bucket_valid(bs, l));
		recs[i].r_loc = *l;
		kv_bucket_settle(bs, l); /* as the store does once the key holds it */
	}
	free(p);
}

static inline void recs_free(struct rec *recs, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		val_free(&recs[i].r_val);
}

/* ---- reading ---- */

static inline uint64_t *csums_ok(struct kv_bucket_set *bs, const struct kv_loc *l)
{
	uint64_t *c = NULL;
	uint32_t n = 12345;

	assert_int_equal(kv_bucket_load_csums(bs, l, &c, &n), 0);
	assert_non_null(c);
	assert_int_equal(n, (l->kl_len + CHUNK - 1) / CHUNK);
	return c;
}

/* Reads value bytes [off, off + len) of r and checks them. */
static inline void read_ok(struct kv_bucket_set *bs, const struct rec *r, const uint64_t *c,
			   uint64_t off, uint64_t len)
{
	uint64_t vlen = r->r_val.v_len, want, n = 12345;
	void *buf = NULL;
	char *data = NULL;

	want = off >= vlen ? 0 : (len < vlen - off ? len : vlen - off);
	assert_int_equal(kv_bucket_read(bs, &r->r_loc, c, off, len, &buf, &data, &n), 0);
	assert_int_equal(n, want);
	if (want) {
		assert_non_null(buf);
		assert_int_equal((uintptr_t)buf % KV_BLOCK, 0);
		assert_true(data >= (char *)buf);
		expect_bytes(data, r->r_val.v_seed, off, n);
	}
	kv_bucket_read_free(buf);
}

/* Reads the whole value of r into page-aligned buffers split in three, and checks it. */
static inline void read_iov_ok(struct kv_bucket_set *bs, const struct rec *r, const uint64_t *c)
{
	uint64_t len = r->r_val.v_len, cap = UP4K(len), cut1, cut2;
	struct iovec iov[3];
	int cnt = 0;
	char *buf = NULL;

	assert_true(len > 0);
	assert_int_equal(posix_memalign((void **)&buf, KV_BLOCK, cap), 0);
	memset(buf, 0, cap);
	cut1 = cap > KV_BLOCK ? KV_BLOCK : cap;
	cut2 = cap > cut1 + CHUNK ? cut1 + CHUNK : cap;
	iov[cnt++] = (struct iovec){.iov_base = buf, .iov_len = cut1};
	if (cut2 > cut1)
		iov[cnt++] = (struct iovec){.iov_base = buf + cut1, .iov_len = cut2 - cut1};
	if (cap > cut2)
		iov[cnt++] = (struct iovec){.iov_base = buf + cut2, .iov_len = cap - cut2};
	assert_int_equal(kv_bucket_read_iov(bs, &r->r_loc, c, iov, cnt), 0);
	expect_bytes(buf, r->r_val.v_seed, 0, len);
	free(buf);
}

/* Loads r's checksums and reads its whole value both ways. */
static inline void value_ok(struct kv_bucket_set *bs, const struct rec *r)
{
	uint64_t *c = csums_ok(bs, &r->r_loc);

	read_ok(bs, r, c, 0, r->r_val.v_len);
	if (r->r_val.v_len)
		read_iov_ok(bs, r, c);
	free(c);
}

static inline struct kv_bucket_stats stats(struct kv_bucket_set *bs)
{
	struct kv_bucket_stats s;

	memset(&s, 0xff, sizeof(s));
	kv_bucket_stats(bs, &s);
	return s;
}

/* ---- the files ---- */

/* The path of bucket id's file (ext "kvb") or of its spare (ext "kvs"), in a static buffer. */
static inline const char *bfile(uint64_t id, const char *ext)
{
	static char name[64];

	snprintf(name, sizeof(name), "buckets/%016" PRIx64 ".%s", id, ext);
	return name;
}

static inline const char *bname(uint64_t id)
{
	return bfile(id, "kvb");
}

static inline uint64_t fsize(int dirfd, const char *name)
{
	struct stat st;

	assert_int_equal(fstatat(dirfd, name, &st, 0), 0);
	return (uint64_t)st.st_size;
}

/* Reads a whole file. */
static inline char *slurp(int dirfd, const char *name, uint64_t *len)
{
	uint64_t size = fsize(dirfd, name);
	char *buf = malloc(size ? size : 1);
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);

	assert_non_null(buf);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, buf, size, 0), (ssize_t)size);
	close(fd);
	*len = size;
	return buf;
}

/* Overwrites len bytes at off of a file with buf (buffered, then synced). */
static inline void poke(int dirfd, const char *name, uint64_t off, const void *buf, uint64_t len)
{
	int fd = openat(dirfd, name, O_WRONLY | O_CLOEXEC);

	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, buf, len, (off_t)off), (ssize_t)len);
	assert_int_equal(fdatasync(fd), 0);
	close(fd);
}

static inline uint8_t peek_byte(int dirfd, const char *name, uint64_t off)
{
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
	uint8_t b;

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &b, 1, (off_t)off), 1);
	close(fd);
	return b;
}

static inline void flip(int dirfd, const char *name, uint64_t off)
{
	uint8_t b = peek_byte(dirfd, name, off) ^ 0x01;

	poke(dirfd, name, off, &b, 1);
}

/* Sum of the sizes of the bucket files (what the quota is about). */
static inline uint64_t files_bytes(int dirfd, uint64_t *count)
{
	int fd = openat(dirfd, "buckets", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	uint64_t sum = 0, n = 0;
	struct dirent *de;
	DIR *d;

	assert_true(fd >= 0);
	d = fdopendir(fd);
	assert_non_null(d);
	while ((de = readdir(d))) {
		char name[300], *end;
		uint64_t id = strtoull(de->d_name, &end, 16);

		/* What a bucket file's name looks like (format.h): 16 hex digits, id >= 1. */
		if (end != de->d_name + 16 || strcmp(end, ".kvb") || id == 0)
			continue;
		snprintf(name, sizeof(name), "buckets/%s", de->d_name);
		sum += fsize(dirfd, name);
		n++;
	}
	closedir(d);
	if (count)
		*count = n;
	return sum;
}

/*
 * Decodes a sealed bucket file against ssd/format.h: header, each record
 * head (every field, the key, the chunk checksums of the value it must
 * hold), the index block and the trailer, and that the file ends at the
 * trailer. recs[0..n) are the records of bucket `id`, in file order.
 */
static inline void check_sealed(int dirfd, uint64_t id, struct rec **recs, unsigned n)
{
	uint64_t size, off = KV_BLOCK, ioff = 0, ilen = 0;
	char *f = slurp(dirfd, bname(id), &size);
	struct kv_bucket_hdr h;
	struct kv_bucket_trailer t;
	struct stat st;

	assert_true(size >= 2 * KV_BLOCK);
	assert_int_equal(size % KV_BLOCK, 0);
	memcpy(&h, f, sizeof(h));
	assert_int_equal(h.bh_magic, KV_BUCKET_MAGIC);
	assert_int_equal(h.bh_version, KV_FORMAT_VERSION);
	assert_int_equal(h.bh_id, id);
	{
		struct kv_bucket_hdr c = h;

		c.bh_csum = 0;
		assert_int_equal(XXH3_64bits(&c, sizeof(c)), h.bh_csum);
	}
	for (unsigned i = 0; i < n; i++) {
		const struct rec *r = recs[i];
		uint64_t vlen = r->r_val.v_len, nch = (vlen + CHUNK - 1) / CHUNK;
		struct kv_rec_head rh, c;
		const char *key, *cs;
		char *v = malloc(vlen ? vlen : 1);

		assert_non_null(v);
		assert_int_equal(r->r_loc.kl_bucket, id);
		assert_int_equal(r->r_loc.kl_off, off);
		memcpy(&rh, f + off, sizeof(rh));
		assert_int_equal(rh.rh_magic, KV_REC_MAGIC);
		assert_int_equal(rh.rh_version, KV_FORMAT_VERSION);
		assert_int_equal(rh.rh_flags, r->r_flags);
		assert_int_equal(rh.rh_ext_index, r->r_index);
		assert_int_equal(rh.rh_pad2, 0);
		assert_int_equal(rh.rh_key_len, r->r_klen);
		assert_int_equal(rh.rh_head_len, kv_rec_head_len(r->r_klen, vlen));
		assert_int_equal(rh.rh_value_len, vlen);
		assert_int_equal(rh.rh_seq, r->r_val.v_seed);
		assert_int_equal(rh.rh_chunk_shift, KV_CHUNK_SHIFT);
		assert_int_equal(rh.rh_nchunks, nch);
		key = f + off + sizeof(rh);
		cs = key + rh.rh_key_len;
		assert_memory_equal(key, r->r_key, r->r_klen);
		pattern(v, r->r_val.v_seed, 0, vlen);
		for (uint64_t k = 0; k < nch; k++) {
			uint64_t clen = vlen - k * CHUNK < CHUNK ? vlen - k * CHUNK : CHUNK;
			uint64_t want = XXH3_64bits(v + k * CHUNK, clen), got;

			memcpy(&got, cs + k * 8, 8);
			assert_int_equal(got, want);
		}
		for (const char *z = cs + nch * 8; z < f + off + rh.rh_head_len; z++)
			assert_int_equal(*z, 0);
		assert_int_equal(rh.rh_payload_csum, XXH3_64bits(cs, nch * 8));
		c = rh;
		c.rh_head_csum = 0;
		{
			XXH3_state_t *s = XXH3_createState();

			assert_non_null(s);
			XXH3_64bits_reset(s);
			XXH3_64bits_update(s, &c, sizeof(c));
			XXH3_64bits_update(s, key, rh.rh_key_len);
			XXH3_64bits_update(s, cs, nch * 8);
			assert_int_equal(XXH3_64bits_digest(s), rh.rh_head_csum);
			XXH3_freeState(s);
		}
		assert_memory_equal(f + off + rh.rh_head_len, v, vlen);
		free(v);
		off += kv_rec_size(r->r_klen, vlen);
		ilen += sizeof(struct kv_idx_ent) + PAD8(r->r_klen);
	}
	memcpy(&t, f + size - KV_BLOCK, sizeof(t));
	assert_int_equal(t.bt_magic, KV_TRAILER_MAGIC);
	assert_int_equal(t.bt_id, id);
	assert_int_equal(t.bt_index_off, off);
	assert_int_equal(t.bt_index_len, ilen);
	assert_int_equal(t.bt_count, n);
	assert_int_equal(t.bt_index_csum, XXH3_64bits(f + off, ilen));
	{
		struct kv_bucket_trailer c = t;

		c.bt_csum = 0;
		assert_int_equal(XXH3_64bits(&c, sizeof(c)), t.bt_csum);
	}
	/* The file ends with the trailer: nothing preallocated is left. */
	assert_int_equal(size, off + UP4K(ilen) + KV_BLOCK);
	assert_int_equal(fstatat(dirfd, bname(id), &st, 0), 0);
	assert_true((uint64_t)st.st_blocks * 512 <= size + 2 * KV_BLOCK);
	for (unsigned i = 0; i < n; i++) {
		struct kv_idx_ent e;

		memcpy(&e, f + off + ioff, sizeof(e));
		assert_int_equal(e.ie_off, recs[i]->r_loc.kl_off);
		assert_int_equal(e.ie_value_len, recs[i]->r_val.v_len);
		assert_int_equal(e.ie_seq, recs[i]->r_val.v_seed);
		assert_int_equal(e.ie_head_len, recs[i]->r_loc.kl_head_len);
		assert_int_equal(e.ie_key_len, recs[i]->r_klen);
		assert_int_equal(e.ie_ext_index, recs[i]->r_index);
		assert_int_equal(e.ie_flags, recs[i]->r_flags);
		assert_memory_equal(f + off + ioff + sizeof(e), recs[i]->r_key, recs[i]->r_klen);
		ioff += sizeof(e) + PAD8(recs[i]->r_klen);
	}
	free(f);
}

/* Checks every bucket of recs[0..n) (in append order) as check_sealed does. */
static inline void check_all_sealed(int dirfd, struct rec *recs, unsigned n)
{
	struct rec *group[MAXREC];

	for (unsigned i = 0; i < n;) {
		unsigned k = 0;
		uint64_t id = recs[i].r_loc.kl_bucket;

		while (i < n && recs[i].r_loc.kl_bucket == id)
			group[k++] = &recs[i++];
		check_sealed(dirfd, id, group, k);
	}
}

/* ---- scanning ---- */

struct seen {
	unsigned s_n;
	struct {
		struct kv_loc sr_loc;
		char sr_key[KV_BLOCK + 1];
		uint32_t sr_klen;
		uint16_t sr_flags;
		bool sr_value; /* br_value was set */
	} s_r[MAXREC];
};

static inline int seen_add(const struct kv_bucket_rec *r, void *arg)
{
	struct seen *s = arg;

	if (s->s_n == MAXREC || r->br_key_len > KV_BLOCK)
		return -E2BIG;
	s->s_r[s->s_n].sr_loc = r->br_loc;
	memcpy(s->s_r[s->s_n].sr_key, r->br_key, r->br_key_len);
	s->s_r[s->s_n].sr_klen = r->br_key_len;
	s->s_r[s->s_n].sr_flags = r->br_flags;
	s->s_r[s->s_n].sr_value = r->br_value != NULL;
	/* A manifest's value comes checked, whole. */
	if (r->br_flags == KV_REC_MANIFEST)
		expect_bytes(r->br_value, r->br_loc.kl_seq, 0, r->br_loc.kl_len);
	s->s_n++;
	return 0;
}

/* Scans bs and checks it lists exactly recs[0..n) (in append order), with bad == 0. */
static inline void scan_is(struct kv_bucket_set *bs, bool check_values, struct rec *recs,
			   unsigned n)
{
	struct seen *s = calloc(1, sizeof(*s));
	uint64_t bad = 12345;

	assert_non_null(s);
	assert_int_equal(kv_bucket_scan(bs, check_values, seen_add, s, &bad), 0);
	assert_int_equal(bad, 0);
	assert_int_equal(s->s_n, n);
	for (unsigned i = 0; i < n; i++) {
		assert_int_equal(s->s_r[i].sr_loc.kl_bucket, recs[i].r_loc.kl_bucket);
		assert_int_equal(s->s_r[i].sr_loc.kl_off, recs[i].r_loc.kl_off);
		assert_int_equal(s->s_r[i].sr_loc.kl_len, recs[i].r_val.v_len);
		assert_int_equal(s->s_r[i].sr_loc.kl_seq, recs[i].r_val.v_seed);
		assert_int_equal(s->s_r[i].sr_loc.kl_head_len, recs[i].r_loc.kl_head_len);
		assert_int_equal(s->s_r[i].sr_loc.kl_index, recs[i].r_index);
		assert_int_equal(s->s_r[i].sr_flags, recs[i].r_flags);
		assert_int_equal(s->s_r[i].sr_value, recs[i].r_flags == KV_REC_MANIFEST);
		assert_int_equal(s->s_r[i].sr_klen, recs[i].r_klen);
		assert_memory_equal(s->s_r[i].sr_key, recs[i].r_key, recs[i].r_klen);
	}
	free(s);
}

static inline struct kv_bucket_set *bs_open(struct fix *f, int dirfd, uint64_t bsize, uint32_t keys,
					    uint64_t cap)
{
	struct kv_bucket_opts o = {.bo_bucket_size = bsize, .bo_bucket_keys = keys, .bo_cap = cap};
	struct kv_bucket_set *bs = NULL;

	assert_int_equal(kv_bucket_open(&bs, dirfd, &o, f->f_aio), 0);
	assert_non_null(bs);
	return bs;
}

static inline struct kv_bucket_set *bs_default(struct fix *f, int dirfd)
{
	return bs_open(f, dirfd, BUCKET, 100000, CAP);
}

/* ---- format version 2: extents and manifests ---- */

/* Sets r to be a record of KV_REC_* `flags` at extent `index`. */
static inline void rec_shape(struct rec *r, uint16_t flags, uint32_t index)
{
	r->r_flags = flags;
	r->r_index = index;
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, fix_setup, fix_teardown)

#endif
