/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_bucket.c — bucket files (ssd/bucket.h), on real O_DIRECT
 * files in a temporary directory under /tmp (the tests skip, saying so,
 * where it does not take O_DIRECT).
 *
 * Values are a pattern derived from (seed, byte position), so every byte
 * read back is compared with what was meant to be there. Records go in and
 * out through the public API; the sealed files are also decoded here
 * against the layout drawn in ssd/format.h (header, record heads with
 * their chunk checksums, index block, trailer), and damaged or torn on
 * purpose with plain buffered writes, as a crash or a bad disk would.
 *
 * A crash is simulated without killing anything: the bucket files are
 * copied while the set is still open (its active bucket unsealed and
 * preallocated), and the copy is opened as a data directory of its own.
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

static int fix_teardown(void **state)
{
	struct fix *f = *state;
	int rc = nftw(f->f_root, rm_one, 16, FTW_DEPTH | FTW_PHYS);

	if (f->f_aio)
		kv_aio_destroy(f->f_aio);
	free(f);
	return rc ? -1 : 0;
}

/* The fixture, skipping the test (loudly) where /tmp cannot do O_DIRECT or AIO. */
static struct fix *fix_of(void **state)
{
	struct fix *f = *state;

	if (!f->f_aio) {
		print_message("SKIP: %s takes no O_DIRECT files, or no AIO context\n", f->f_root);
		skip();
	}
	return f;
}

/* Makes (or opens) the data directory f_root/name; returns its fd. */
static int ddir(struct fix *f, const char *name)
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
static void expect_bytes(const void *data, uint64_t seed, uint64_t off, uint64_t n)
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

static void val_init(struct val *v, uint64_t len, uint64_t seed)
{
	uint64_t cap = len ? UP4K(len) : KV_BLOCK;

	assert_int_equal(posix_memalign(&v->v_buf, KV_BLOCK, cap), 0);
	memset(v->v_buf, PADBYTE, cap);
	pattern(v->v_buf, seed, 0, len);
	v->v_len = len;
	v->v_seed = seed;
	v->v_iov = (struct iovec){.iov_base = v->v_buf, .iov_len = cap};
}

static void val_free(struct val *v)
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
static void key_init(struct rec *r, uint64_t seed, uint32_t klen)
{
	char tag[32];
	int n = snprintf(tag, sizeof(tag), "k%" PRIu64 "/", seed);

	for (uint32_t i = 0; i < klen; i++)
		r->r_key[i] = i < (uint32_t)n ? tag[i] : (char)('a' + (seed + i) % 26);
	r->r_key[klen] = '\0';
	r->r_klen = klen;
}

static void rec_init(struct rec *r, uint64_t seed, uint32_t klen, uint64_t len)
{
	memset(&r->r_loc, 0, sizeof(r->r_loc));
	r->r_flags = KV_REC_WHOLE;
	r->r_index = 0;
	key_init(r, seed, klen);
	val_init(&r->r_val, len, seed);
}

static void put_of(struct kv_bucket_put *p, const struct rec *r)
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
static void append_ok(struct kv_bucket_set *bs, struct rec *recs, unsigned n)
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

static void recs_free(struct rec *recs, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		val_free(&recs[i].r_val);
}

/* ---- reading ---- */

static uint64_t *csums_ok(struct kv_bucket_set *bs, const struct kv_loc *l)
{
	uint64_t *c = NULL;
	uint32_t n = 12345;

	assert_int_equal(kv_bucket_load_csums(bs, l, &c, &n), 0);
	assert_non_null(c);
	assert_int_equal(n, (l->kl_len + CHUNK - 1) / CHUNK);
	return c;
}

/* Reads value bytes [off, off + len) of r and checks them. */
static void read_ok(struct kv_bucket_set *bs, const struct rec *r, const uint64_t *c, uint64_t off,
		    uint64_t len)
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
static void read_iov_ok(struct kv_bucket_set *bs, const struct rec *r, const uint64_t *c)
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
static void value_ok(struct kv_bucket_set *bs, const struct rec *r)
{
	uint64_t *c = csums_ok(bs, &r->r_loc);

	read_ok(bs, r, c, 0, r->r_val.v_len);
	if (r->r_val.v_len)
		read_iov_ok(bs, r, c);
	free(c);
}

static struct kv_bucket_stats stats(struct kv_bucket_set *bs)
{
	struct kv_bucket_stats s;

	memset(&s, 0xff, sizeof(s));
	kv_bucket_stats(bs, &s);
	return s;
}

/* ---- the files ---- */

/* The path of bucket id's file (ext "kvb") or of its spare (ext "kvs"), in a static buffer. */
static const char *bfile(uint64_t id, const char *ext)
{
	static char name[64];

	snprintf(name, sizeof(name), "buckets/%016" PRIx64 ".%s", id, ext);
	return name;
}

static const char *bname(uint64_t id)
{
	return bfile(id, "kvb");
}

static uint64_t fsize(int dirfd, const char *name)
{
	struct stat st;

	assert_int_equal(fstatat(dirfd, name, &st, 0), 0);
	return (uint64_t)st.st_size;
}

/* Reads a whole file. */
static char *slurp(int dirfd, const char *name, uint64_t *len)
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
static void poke(int dirfd, const char *name, uint64_t off, const void *buf, uint64_t len)
{
	int fd = openat(dirfd, name, O_WRONLY | O_CLOEXEC);

	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, buf, len, (off_t)off), (ssize_t)len);
	assert_int_equal(fdatasync(fd), 0);
	close(fd);
}

static uint8_t peek_byte(int dirfd, const char *name, uint64_t off)
{
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
	uint8_t b;

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &b, 1, (off_t)off), 1);
	close(fd);
	return b;
}

static void flip(int dirfd, const char *name, uint64_t off)
{
	uint8_t b = peek_byte(dirfd, name, off) ^ 0x01;

	poke(dirfd, name, off, &b, 1);
}

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

/* Sum of the sizes of the bucket files (what the quota is about). */
static uint64_t files_bytes(int dirfd, uint64_t *count)
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
static void check_sealed(int dirfd, uint64_t id, struct rec **recs, unsigned n)
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
static void check_all_sealed(int dirfd, struct rec *recs, unsigned n)
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

static int seen_add(const struct kv_bucket_rec *r, void *arg)
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
static void scan_is(struct kv_bucket_set *bs, bool check_values, struct rec *recs, unsigned n)
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

static struct kv_bucket_set *bs_open(struct fix *f, int dirfd, uint64_t bsize, uint32_t keys,
				     uint64_t cap)
{
	struct kv_bucket_opts o = {.bo_bucket_size = bsize, .bo_bucket_keys = keys, .bo_cap = cap};
	struct kv_bucket_set *bs = NULL;

	assert_int_equal(kv_bucket_open(&bs, dirfd, &o, f->f_aio), 0);
	assert_non_null(bs);
	return bs;
}

static struct kv_bucket_set *bs_default(struct fix *f, int dirfd)
{
	return bs_open(f, dirfd, BUCKET, 100000, CAP);
}

/* ---- tests ---- */

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

/* ---- format version 2: extents and manifests ---- */

/* Sets r to be a record of KV_REC_* `flags` at extent `index`. */
static void rec_shape(struct rec *r, uint16_t flags, uint32_t index)
{
	r->r_flags = flags;
	r->r_index = index;
}

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

#define T(fn) cmocka_unit_test_setup_teardown(fn, fix_setup, fix_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    T(test_append_sizes),
	    T(test_read_ranges),
	    T(test_seal_reopen_scan),
	    T(test_bucket_keys),
	    T(test_quota),
	    T(test_reserve),
	    T(test_quota_bound),
	    T(test_quota_bound_long_keys),
	    T(test_corrupt_value),
	    T(test_corrupt_head),
	    T(test_torn_tail),
	    T(test_torn_tail_windows),
	    T(test_recovered_used),
	    T(test_damaged_trailer_header),
	    T(test_dead_drop_ids),
	    T(test_extents),
	    T(test_wrong_index),
	    T(test_bad_flags),
	    T(test_v1_compat),
	    T(test_v1_damaged),
	    T(test_aread),
	    T(test_recycle),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
