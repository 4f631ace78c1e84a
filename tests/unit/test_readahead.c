/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_readahead.c — read-ahead of values only on the SSD
 * (core/readahead.h), over a real bucket set in a temporary directory under
 * /tmp (the tests skip, saying so, where it takes no O_DIRECT files).
 *
 * A "value" here is NX extent records of 2 MiB (the last one shorter), its
 * bytes a pattern of (seed, byte position), so every byte a read-ahead
 * buffer hands out is compared with what the record holds. The tests play
 * the part of core/tier.c: they tell the module where a reader read
 * (kv_ra_note), cut the plan into record pieces as read_ahead() does, and
 * take pieces back (kv_ra_take) as read_piece() does. Nothing is timed.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/readahead.h"
#include "ssd/format.h"
#include "pattern.h"

#define KIB   1024ull
#define MIB   (1024ull * KIB)
#define NX    12 /* extents of a value */
#define LAST  (MIB + 4321)
#define SIZE  ((NX - 1) * KV_RA_UNIT + LAST)
#define CHUNK (1ull << KV_CHUNK_SHIFT)
#define NVAL  3 /* values, each its own key */

struct value {
	uint64_t v_seed;
	struct kv_loc v_loc[NX];
	uint64_t *v_csums[NX];
};

struct fix {
	char f_root[64];
	int f_dfd;
	struct kv_aio *f_aio;
	struct kv_bucket_set *f_bs;
	struct value f_val[NVAL];
};

static bool bytes_are(const void *data, uint64_t seed, uint64_t off, uint64_t len)
{
	uint8_t *want = malloc(len);
	bool same;

	assert_non_null(want);
	pattern(want, seed, off, len);
	same = memcmp(data, want, len) == 0;
	free(want);
	return same;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	return remove(path);
}

/* Appends value v (NX extent records) and loads its checksums. */
static void value_put(struct fix *f, struct value *v, uint64_t seed)
{
	struct kv_bucket_put p[NX];
	struct iovec iov[NX];
	char key[32];

	v->v_seed = seed;
	snprintf(key, sizeof(key), "v%" PRIu64, seed);
	for (unsigned k = 0; k < NX; k++) {
		uint64_t len = k == NX - 1 ? LAST : KV_RA_UNIT;
		void *buf = NULL;

		assert_int_equal(posix_memalign(&buf, KV_BLOCK, KV_RA_UNIT), 0);
		pattern(buf, seed, k * KV_RA_UNIT, len);
		iov[k] = (struct iovec){.iov_base = buf,
					.iov_len = (len + KV_BLOCK - 1) / KV_BLOCK * KV_BLOCK};
		p[k] = (struct kv_bucket_put){.bp_key = key,
					      .bp_key_len = (uint32_t)strlen(key),
					      .bp_seq = seed,
					      .bp_index = k,
					      .bp_flags = KV_REC_EXTENT,
					      .bp_len = len,
					      .bp_iov = &iov[k],
					      .bp_iovcnt = 1};
	}
	assert_int_equal(kv_bucket_append(f->f_bs, p, NX), 0);
	for (unsigned k = 0; k < NX; k++) {
		uint32_t n;

		assert_int_equal(p[k].bp_err, 0);
		v->v_loc[k] = p[k].bp_loc;
		kv_bucket_settle(f->f_bs, &v->v_loc[k]);
		assert_int_equal(kv_bucket_load_csums(f->f_bs, &v->v_loc[k], &v->v_csums[k], &n),
				 0);
		free(iov[k].iov_base);
	}
}

static int fix_setup(void **state)
{
	struct fix *f = calloc(1, sizeof(*f));
	struct kv_bucket_opts o = {
	    .bo_bucket_size = 64 * MIB, .bo_bucket_keys = 1000, .bo_cap = 1024 * MIB};
	char probe[96];
	int fd;

	if (!f)
		return -1;
	*state = f;
	strcpy(f->f_root, "/tmp/kvfs-ra-XXXXXX");
	if (!mkdtemp(f->f_root))
		return -1;
	snprintf(probe, sizeof(probe), "%s/probe", f->f_root);
	fd = open(probe, O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
	if (fd < 0)
		return 0; /* no O_DIRECT here: every test skips */
	close(fd);
	unlink(probe);
	f->f_dfd = open(f->f_root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (f->f_dfd < 0 || kv_aio_create(&f->f_aio, 64) ||
	    kv_bucket_open(&f->f_bs, f->f_dfd, &o, f->f_aio))
		return -1;
	for (unsigned i = 0; i < NVAL; i++)
		value_put(f, &f->f_val[i], 100 + i);
	return 0;
}

static int fix_teardown(void **state)
{
	struct fix *f = *state;
	int rc;

	for (unsigned i = 0; i < NVAL; i++)
		for (unsigned k = 0; k < NX; k++)
			free(f->f_val[i].v_csums[k]);
	if (f->f_bs)
		kv_bucket_close(f->f_bs);
	if (f->f_aio)
		kv_aio_destroy(f->f_aio);
	if (f->f_dfd > 0)
		close(f->f_dfd);
	rc = nftw(f->f_root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	free(f);
	return rc ? -1 : 0;
}

static struct fix *fix_of(void **state)
{
	struct fix *f = *state;

	if (!f->f_bs) {
		print_message("SKIP: %s takes no O_DIRECT files\n", f->f_root);
		skip();
	}
	return f;
}

static struct kv_ra *ra_new(struct fix *f, uint64_t window)
{
	struct kv_ra *ra = NULL;

	assert_int_equal(kv_ra_create(&ra, f->f_bs, window), 0);
	assert_non_null(ra);
	return ra;
}

static struct kv_ra_stats ra_stats(struct kv_ra *ra)
{
	struct kv_ra_stats s;

	kv_ra_stats(ra, &s);
	return s;
}

/*
 * A reader of value v read [off, off + len): tells the module and starts
 * what it plans, cut as core/tier.c read_ahead() cuts it. Returns the
 * pieces started (0: nothing planned).
 */
static unsigned reader_read(struct kv_ra *ra, const struct value *v, uint64_t off, uint64_t len)
{
	struct kv_ra_piece p[KV_RA_MAX_PIECES];
	struct kv_ra_plan plan;
	unsigned n = 0;

	if (!kv_ra_note(ra, v, SIZE, off, len, &plan))
		return 0;
	assert_true(plan.rp_from < plan.rp_to && plan.rp_to <= SIZE);
	for (uint64_t k = plan.rp_from / KV_RA_UNIT; k * KV_RA_UNIT < plan.rp_to; k++) {
		uint64_t base = k * KV_RA_UNIT, q = plan.rp_from > base ? plan.rp_from - base : 0;

		q -= q % CHUNK;
		assert_true(n < KV_RA_MAX_PIECES);
		p[n++] = (struct kv_ra_piece){.pp_loc = v->v_loc[k],
					      .pp_off = q,
					      .pp_len = v->v_loc[k].kl_len - q,
					      .pp_vend = base + v->v_loc[k].kl_len};
	}
	kv_ra_start(ra, v, &plan, p, n);
	return n;
}

/*
 * Takes value bytes [off, off + len) (within one extent) from the
 * read-ahead and checks them. Returns false when it had none.
 */
static bool take(struct kv_ra *ra, const struct value *v, uint64_t off, uint64_t len)
{
	uint64_t k = off / KV_RA_UNIT, in = off % KV_RA_UNIT;
	const char *data = NULL;
	struct kv_ra_buf *b;

	b = kv_ra_take(ra, v, &v->v_loc[k], v->v_csums[k], in, len, &data);
	if (!b)
		return false;
	if (len > v->v_loc[k].kl_len - in)
		len = v->v_loc[k].kl_len - in;
	assert_true(bytes_are(data, v->v_seed, off, len));
	kv_ra_put(b);
	return true;
}

/*
 * A sequential reader from offset 0 in 1 MiB reads: after its first read
 * every later one is served from the read-ahead, the bytes exact, and no
 * byte is read ahead twice or past the end.
 */
static void test_sequential(void **state)
{
	struct fix *f = fix_of(state);
	struct kv_ra *ra = ra_new(f, 8 * MIB);
	const struct value *v = &f->f_val[0];
	struct kv_ra_stats s;
	unsigned hits = 0, reads = 0;

	for (uint64_t off = 0; off < SIZE; off += MIB) {
		uint64_t len = SIZE - off < MIB ? SIZE - off : MIB;

		reads++;
		hits += take(ra, v, off, len);
		reader_read(ra, v, off, len);
	}
	assert_int_equal(hits, reads - 1); /* all but the first */
	s = ra_stats(ra);
	assert_int_equal(s.rst_hits, hits);
	assert_int_equal(s.rst_bytes, SIZE - MIB); /* all but the first read, once */
	kv_ra_destroy(ra);
}

/* Reads nowhere near each other, never at offset 0: nothing is read ahead. */
static void test_random(void **state)
{
	/* MiB: each read 5 MiB or more from the two before it, a stream's slack away */
	static const uint64_t at[] = {1, 11, 21, 6, 16, 1, 11, 21, 6, 16};
	struct fix *f = fix_of(state);
	struct kv_ra *ra = ra_new(f, 8 * MIB);
	const struct value *v = &f->f_val[1];
	struct kv_ra_stats s;

	for (unsigned i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
		assert_false(take(ra, v, at[i] * MIB + 4 * KIB, 4 * KIB));
		assert_int_equal(reader_read(ra, v, at[i] * MIB + 4 * KIB, 4 * KIB), 0);
	}
	s = ra_stats(ra);
	assert_int_equal(s.rst_bytes, 0);
	assert_int_equal(s.rst_hits, 0);
	kv_ra_destroy(ra);
}

/* A second read that continues the first (not at 0) starts the read-ahead. */
static void test_continued(void **state)
{
	struct fix *f = fix_of(state);
	struct kv_ra *ra = ra_new(f, 4 * MIB);
	const struct value *v = &f->f_val[2];

	assert_int_equal(reader_read(ra, v, 5 * MIB, 128 * KIB), 0);
	assert_true(reader_read(ra, v, 5 * MIB + 128 * KIB, 128 * KIB) > 0);
	assert_true(take(ra, v, 5 * MIB + 256 * KIB, 128 * KIB));
	assert_true(take(ra, v, 6 * MIB, 2 * MIB));
	assert_true(take(ra, v, 8 * MIB + 12345, 100));
	/* Another record at the same place (another sequence number): never its bytes. */
	{
		struct kv_loc other = v->v_loc[3];
		const char *data;

		other.kl_seq++;
		assert_null(kv_ra_take(ra, v, &other, v->v_csums[3], 0, 4096, &data));
	}
	/* Another key's reader finds nothing of this one's. */
	assert_null(kv_ra_take(ra, &f->f_val[0], &v->v_loc[3], v->v_csums[3], 0, 4096,
			       &(const char *){NULL}));
	kv_ra_destroy(ra);
}

/*
 * Dropping a key's streams with reads in flight (as a write, an unlink or a
 * last close does): nothing more is served, and the buffers come back
 * (ASan: no leak; the unused bytes are counted once their reads are done).
 */
static void test_drop(void **state)
{
	struct fix *f = fix_of(state);
	struct kv_ra *ra = ra_new(f, 16 * MIB);
	const struct value *v = &f->f_val[0];

	assert_true(reader_read(ra, v, 0, MIB) > 0);
	kv_ra_drop(ra, v);
	assert_false(take(ra, v, MIB, MIB));
	assert_false(take(ra, v, 4 * MIB, MIB));
	/* A buffer a reader holds outlives the drop. */
	assert_true(reader_read(ra, v, 0, MIB) > 0);
	{
		const char *data = NULL;
		struct kv_ra_buf *b = kv_ra_take(ra, v, &v->v_loc[1], v->v_csums[1], 0, MIB, &data);

		assert_non_null(b);
		kv_ra_drop(ra, v);
		assert_true(bytes_are(data, v->v_seed, KV_RA_UNIT, MIB));
		kv_ra_put(b);
	}
	kv_ra_destroy(ra); /* waits for the zombies */
}

/* --readahead=0: nothing, ever. */
static void test_off(void **state)
{
	struct fix *f = fix_of(state);
	struct kv_ra *ra = ra_new(f, 0);
	struct kv_ra_stats s;

	for (uint64_t off = 0; off < 8 * MIB; off += MIB) {
		assert_false(take(ra, &f->f_val[0], off, MIB));
		assert_int_equal(reader_read(ra, &f->f_val[0], off, MIB), 0);
	}
	s = ra_stats(ra);
	assert_int_equal(s.rst_bytes + s.rst_hits + s.rst_unused, 0);
	kv_ra_destroy(ra);
	assert_int_equal(kv_ra_create(&ra, f->f_bs, KV_RA_MAX_WINDOW + 1), -EINVAL);
}

/*
 * More streams than the module follows: each gives way to the next, least
 * recently used first, and a key never has more than KV_RA_PER_KEY. The
 * buffers stay bounded (ASan: all freed at the end).
 */
static void test_streams(void **state)
{
	struct fix *f = fix_of(state);
	struct kv_ra *ra = ra_new(f, 2 * MIB);
	struct value keys[KV_RA_STREAMS + 2];

	/* Distinct keys sharing the records of value 0. */
	for (unsigned i = 0; i < KV_RA_STREAMS + 2; i++) {
		keys[i] = f->f_val[0];
		assert_true(reader_read(ra, &keys[i], 0, MIB) > 0);
	}
	assert_false(take(ra, &keys[0], MIB, MIB)); /* the oldest gave way */
	assert_true(take(ra, &keys[KV_RA_STREAMS + 1], MIB, MIB));
	/* Three streams of one key: its first one gives way to its third. */
	assert_true(reader_read(ra, &keys[1], 0, MIB) > 0);
	assert_true(reader_read(ra, &keys[1], 16 * MIB, MIB) == 0);
	assert_true(reader_read(ra, &keys[1], 16 * MIB + MIB, MIB) > 0);
	assert_true(reader_read(ra, &keys[1], 8 * MIB, MIB) == 0);
	assert_false(take(ra, &keys[1], MIB, MIB));
	assert_true(take(ra, &keys[1], 18 * MIB, MIB));
	kv_ra_destroy(ra);
}

/* A damaged chunk: the buffer is useless, the reader reads the disk itself. */
static void test_damaged(void **state)
{
	struct fix *f = fix_of(state);
	struct kv_ra *ra = ra_new(f, 8 * MIB);
	const struct value *v = &f->f_val[1];
	uint64_t *bad = malloc((KV_RA_UNIT / CHUNK) * sizeof(*bad));

	assert_non_null(bad);
	memcpy(bad, v->v_csums[2], (KV_RA_UNIT / CHUNK) * sizeof(*bad));
	bad[1] ^= 1; /* as if the disk's bytes no longer matched */
	assert_true(reader_read(ra, v, 0, MIB) > 0);
	{
		const char *data;

		assert_null(kv_ra_take(ra, v, &v->v_loc[2], bad, 0, MIB, &data));
	}
	assert_false(take(ra, v, 2 * KV_RA_UNIT, MIB)); /* failed: gone for good */
	assert_true(take(ra, v, 3 * KV_RA_UNIT, MIB));
	free(bad);
	kv_ra_destroy(ra);
}

/* ---- threads ---- */

struct worker {
	struct fix *w_f;
	struct kv_ra *w_ra;
	const struct value *w_v;
	unsigned w_rounds;
	unsigned w_hits;
};

/* Reads its value sequentially, again and again, checking every byte it takes. */
static void *reader_main(void *arg)
{
	struct worker *w = arg;

	for (unsigned r = 0; r < w->w_rounds; r++)
		for (uint64_t off = 0; off < SIZE; off += 512 * KIB) {
			uint64_t len = SIZE - off < 512 * KIB ? SIZE - off : 512 * KIB;

			w->w_hits += take(w->w_ra, w->w_v, off, len);
			reader_read(w->w_ra, w->w_v, off, len);
		}
	return NULL;
}

/* Drops the readers' keys now and then, as writes and closes would. */
static void *dropper_main(void *arg)
{
	struct worker *w = arg;

	for (unsigned r = 0; r < w->w_rounds * 20; r++) {
		kv_ra_drop(w->w_ra, &w->w_f->f_val[r % NVAL]);
		usleep(500);
	}
	return NULL;
}

/*
 * Readers of three values, two of them of the same value, and a thread
 * dropping keys: every byte handed out is right (TSan: no race).
 */
static void test_threads(void **state)
{
	enum { NR = 4 };
	struct fix *f = fix_of(state);
	struct kv_ra *ra = ra_new(f, 6 * MIB);
	struct worker w[NR + 1];
	pthread_t th[NR + 1];

	for (unsigned i = 0; i <= NR; i++) {
		w[i] = (struct worker){
		    .w_f = f, .w_ra = ra, .w_v = &f->f_val[i % NVAL], .w_rounds = 4};
		assert_int_equal(
		    pthread_create(&th[i], NULL, i < NR ? reader_main : dropper_main, &w[i]), 0);
	}
	for (unsigned i = 0; i <= NR; i++)
		pthread_join(th[i], NULL);
	kv_ra_destroy(ra);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, fix_setup, fix_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    T(test_sequential), T(test_random),	 T(test_continued), T(test_drop),
	    T(test_off),	T(test_streams), T(test_damaged),   T(test_threads),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
