/* SPDX-License-Identifier: MIT */
#include "ssd/bucket.h"

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
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "ssd/fileio.h"
#include "ssd/format.h"

#define CHUNK	    (1ull << KV_CHUNK_SHIFT)
#define ROUND_UP(x) (((x) + KV_BLOCK - 1) / KV_BLOCK * KV_BLOCK)
/* Values are read from disk in pieces of at most this many bytes. */
#define READ_PIECE (4u << 20)
/* The longest KV_REC_EXTENT record value (ssd/format.h): one 2 MiB extent. */
#define EXTENT_MAX (2u << 20)

/*
 * Spares kept at most: an output takes one, and a pass drops about two
 * victims per output at a dead ratio of 0.5, one per output at 0. Each
 * is disk space outside the quota's count until the pass ends.
 */
#define SPARES_MAX 2

/* One record of the active bucket, kept to write its index block at seal. */
struct idx_rec {
	struct kv_idx_ent ir_ent;
	char *ir_key;
};

struct kv_bucket {
	uint64_t kb_id;	     /* immutable */
	int kb_fd;	     /* immutable: O_RDWR | O_DIRECT */
	uint16_t kb_version; /* immutable: bh_version (1 or 2), the shape of its index block */
	/* bs_lock, and bs_append_lock for the active bucket */
	uint64_t kb_end;     /* end of the last record (sealed: of the trailer) */
	uint64_t kb_rec_end; /* sealed: end of the last record, where the index starts */
	uint64_t kb_count;   /* records */
	uint64_t kb_dead;    /* bytes of dead records */
	bool kb_sealed;
	bool kb_broken;		/* unreadable header: kept for fsck, never read */
	bool kb_compacting;	/* the output of a compaction being written (struct kv_compact) */
	bool kb_recycled;	/* immutable: its file was a dropped bucket's (a spare) */
	uint32_t kb_readers;	/* reads in flight: a dropped bucket is freed when they are done */
	uint32_t kb_pins;	/* deleted keys still open with their record here: never dropped */
	uint32_t kb_unsettled;	/* appended records whose loc no key holds yet (kv_bucket_settle) */
	uint64_t kb_access_ns;	/* last read or append (CLOCK_MONOTONIC): how cold it is */
	uint64_t kb_dead_ns;	/* last kv_bucket_dead (CLOCK_MONOTONIC): still dying? */
	struct idx_rec *kb_idx; /* active bucket only */
	uint64_t kb_nidx, kb_maxidx;
	uint64_t kb_idx_bytes; /* active bucket: bytes its index block will take */
};

struct kv_bucket_set {
	int bs_dirfd;			/* immutable: DATA_DIR/buckets */
	struct kv_bucket_opts bs_opts;	/* immutable */
	struct kv_aio *bs_aio;		/* immutable */
	pthread_mutex_t bs_append_lock; /* one appender: guards bs_active's writing; bs_active
					   changes under both locks, so either reads it */
	pthread_mutex_t bs_lock;	/* guards bs_tab, bs_n, bs_next_id, bs_used, bs_reserved,
					   bs_pending, kb_* */
	pthread_cond_t bs_drained;	/* with bs_lock: a dropped bucket's last reader is done */
	struct kv_bucket **bs_tab;	/* sorted by id */
	uint32_t bs_n, bs_max;
	struct kv_bucket *bs_active;
	uint64_t bs_next_id;
	uint64_t bs_used;
	uint64_t bs_reserved; /* quota promised to unwritten extents (kv_bucket_reserve) */
	uint64_t bs_pending;  /* what the append between its quota check and its placing will
				 take (so a reservation never promises it twice) */
	_Atomic uint64_t bs_written, bs_read, bs_csum_errors, bs_truncated;
	_Atomic uint64_t bs_fg_ns; /* a foreground read or append last began (mono_ns) */
	/* A compaction's two staging buffers, kept between outputs (faulting 16 MiB in each
	   time cost more than the copying): taken and given back by atomic exchange. */
	_Atomic(char *) bs_stage;
	/*
	 * Spares (bs_lock): the files of buckets dropped while a compaction
	 * pass recycles (kv_bucket_recycle), renamed ID.kvs, open, for the
	 * pass's next outputs to overwrite. Removing a file makes a filesystem
	 * mounted with `discard` trim all its blocks, and allocating the next
	 * output's blocks costs again: an output written over a spare's
	 * allocated blocks does neither.
	 */
	struct spare {
		int sp_fd;
		uint64_t sp_id;
	} bs_spare[SPARES_MAX];
	uint32_t bs_nspare;
	bool bs_recycle;
};

uint64_t kv_loc_size(const struct kv_loc *loc)
{
	return loc->kl_head_len + ROUND_UP(loc->kl_len);
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void name_of(uint64_t id, char *buf, size_t len)
{
	snprintf(buf, len, "%016" PRIx64 ".kvb", id);
}

/* A spare's name: not a bucket's, so a start removes it (load_all). */
static void spare_name(uint64_t id, char *buf, size_t len)
{
	snprintf(buf, len, "%016" PRIx64 ".kvs", id);
}

/* A 4 KiB-aligned buffer; zeroed unless it is only going to be read into. */
static void *aligned_buf(size_t len, bool zero)
{
	void *p;

	if (posix_memalign(&p, KV_BLOCK, len ? len : KV_BLOCK))
		return NULL;
	if (zero)
		memset(p, 0, len);
	return p;
}

static void *aligned(size_t len)
{
	return aligned_buf(len, true);
}

/* --- the bucket table (bs_lock held) --- */

static struct kv_bucket *find(struct kv_bucket_set *bs, uint64_t id)
{
	uint32_t lo = 0, hi = bs->bs_n;

	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;

		if (bs->bs_tab[mid]->kb_id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < bs->bs_n && bs->bs_tab[lo]->kb_id == id ? bs->bs_tab[lo] : NULL;
}

static int insert(struct kv_bucket_set *bs, struct kv_bucket *b)
{
	uint32_t i;

	if (bs->bs_n == bs->bs_max) {
		uint32_t n = bs->bs_max ? bs->bs_max * 2 : 16;
		struct kv_bucket **t = realloc(bs->bs_tab, n * sizeof(*t));

		if (!t)
			return -ENOMEM;
		bs->bs_tab = t;
		bs->bs_max = n;
	}
	for (i = bs->bs_n; i > 0 && bs->bs_tab[i - 1]->kb_id > b->kb_id; i--)
		bs->bs_tab[i] = bs->bs_tab[i - 1];
	bs->bs_tab[i] = b;
	bs->bs_n++;
	if (b->kb_id >= bs->bs_next_id)
		bs->bs_next_id = b->kb_id + 1;
	return 0;
}

static void bucket_free(struct kv_bucket *b)
{
	for (uint64_t i = 0; i < b->kb_nidx; i++)
		free(b->kb_idx[i].ir_key);
	free(b->kb_idx);
	if (b->kb_fd >= 0)
		close(b->kb_fd);
	free(b);
}

/* --- checksums --- */

/*
 * The checksum of `len` bytes spread over iov from byte `skip`: straight
 * from the buffer when they lie in one iovec, else gathered into scratch
 * (CHUNK bytes).
 */
static uint64_t hash_iov(const struct iovec *iov, int cnt, uint64_t skip, uint64_t len,
			 char *scratch)
{
	uint64_t got = 0;

	for (int i = 0; i < cnt && got < len; i++) {
		uint64_t n = iov[i].iov_len;
		const char *p = iov[i].iov_base;

		if (skip >= n) {
			skip -= n;
			continue;
		}
		p += skip;
		n -= skip;
		skip = 0;
		if (got == 0 && n >= len)
			return XXH3_64bits(p, len);
		if (n > len - got)
			n = len - got;
		memcpy(scratch + got, p, n);
		got += n;
	}
	return XXH3_64bits(scratch, got);
}

/* Checksums of the chunks of a `len`-byte value held in iov. */
static int chunk_csums(const struct iovec *iov, int cnt, uint64_t len, uint64_t *out)
{
	char *scratch = malloc(CHUNK);

	if (!scratch)
		return -ENOMEM;
	for (uint64_t c = 0; c * CHUNK < len; c++) {
		uint64_t n = len - c * CHUNK < CHUNK ? len - c * CHUNK : CHUNK;

		out[c] = hash_iov(iov, cnt, c * CHUNK, n, scratch);
	}
	free(scratch);
	return 0;
}

/* Bytes of the head struct of a record of `version`: its key follows them. */
static size_t head_struct_len(uint16_t version)
{
	return version == 1 ? KV_REC_HEAD_V1 : sizeof(struct kv_rec_head);
}

/*
 * The head struct at buf (at least sizeof(struct kv_rec_head) bytes), of
 * either version, in one shape: a version 1 head (56 bytes) reads as
 * KV_REC_WHOLE, extent index 0. Everything but head_check sees heads
 * through this. Returns the bytes the struct takes on disk (where the key
 * starts).
 */
static size_t head_get(const void *buf, struct kv_rec_head *h)
{
	memcpy(h, buf, sizeof(*h));
	if (h->rh_version != 1)
		return sizeof(*h);
	h->rh_flags = KV_REC_WHOLE;
	h->rh_ext_index = 0;
	h->rh_pad2 = 0;
	return KV_REC_HEAD_V1;
}

/*
 * The head checksum: the head struct as on disk (slen bytes) with the
 * field zeroed, the key, the chunk checksums.
 */
static uint64_t head_csum(const void *head, size_t slen, const void *key, const void *csums)
{
	struct kv_rec_head c;
	XXH3_state_t st;

	memcpy(&c, head, slen);
	c.rh_head_csum = 0;
	XXH3_64bits_reset(&st);
	XXH3_64bits_update(&st, &c, slen);
	XXH3_64bits_update(&st, key, c.rh_key_len);
	XXH3_64bits_update(&st, csums, (size_t)c.rh_nchunks * 8);
	return XXH3_64bits_digest(&st);
}

/*
 * Whether a version 2 record may have these flags, extent index and value
 * length: exactly one KV_REC_* flag; a WHOLE record is extent 0, a
 * MANIFEST is KV_MANIFEST_INDEX, an EXTENT anything else and at most
 * EXTENT_MAX bytes. kv_bucket_append writes nothing else, head_check reads
 * nothing else.
 */
static bool rec_shape_ok(uint16_t flags, uint32_t index, uint64_t value_len)
{
	switch (flags) {
	case KV_REC_WHOLE:
		return index == 0;
	case KV_REC_EXTENT:
		return index != KV_MANIFEST_INDEX && value_len <= EXTENT_MAX;
	case KV_REC_MANIFEST:
		return index == KV_MANIFEST_INDEX;
	default:
		return false;
	}
}

/*
 * Checks a record head at the start of buf (buf_len bytes of it present,
 * at least one block): a version 1 head (flags 0, its 56-byte struct under
 * the checksum) or a version 2 one (rec_shape_ok, rh_pad2 0). Returns 0,
 * -EAGAIN when the head is longer than buf_len (read more), or -EIO when
 * it is not a valid head.
 */
static int head_check(const void *buf, uint64_t buf_len)
{
	struct kv_rec_head h;
	const char *key;

	memcpy(&h, buf, sizeof(h));
	if (h.rh_magic != KV_REC_MAGIC)
		return -EIO;
	if (h.rh_version == 1 ? h.rh_flags != 0
			      : h.rh_version != 2 || h.rh_pad2 ||
				    !rec_shape_ok(h.rh_flags, h.rh_ext_index, h.rh_value_len))
		return -EIO;
	if (h.rh_chunk_shift != KV_CHUNK_SHIFT || h.rh_key_len > 4096 ||
	    h.rh_nchunks != (h.rh_value_len + CHUNK - 1) / CHUNK ||
	    h.rh_head_len != kv_rec_head_len_v(h.rh_version, h.rh_key_len, h.rh_value_len))
		return -EIO;
	if (h.rh_head_len > buf_len)
		return -EAGAIN;
	key = (const char *)buf + head_struct_len(h.rh_version);
	if (head_csum(buf, head_struct_len(h.rh_version), key, key + h.rh_key_len) !=
		h.rh_head_csum ||
	    XXH3_64bits(key + h.rh_key_len, (size_t)h.rh_nchunks * 8) != h.rh_payload_csum)
		return -EIO;
	return 0;
}

/* Whether a checked head (head_get's shape) is the record loc names. */
static bool head_is(const struct kv_rec_head *h, const struct kv_loc *loc)
{
	return h->rh_seq == loc->kl_seq && h->rh_value_len == loc->kl_len &&
	       h->rh_head_len == loc->kl_head_len && h->rh_ext_index == loc->kl_index;
}

/* The chunk checksums of a checked head, copied out (8-byte aligned, malloc'ed) or NULL. */
static uint64_t *head_csums(const void *head)
{
	struct kv_rec_head h;
	size_t slen = head_get(head, &h);
	uint64_t *csums = malloc((size_t)h.rh_nchunks * 8 + 8);

	if (csums)
		memcpy(csums, (const char *)head + slen + h.rh_key_len, (size_t)h.rh_nchunks * 8);
	return csums;
}

/*
 * A read-ahead window over a bucket file, for a walk of its records in
 * file order (recovering a bucket a crash left open, --fsck, --salvage):
 * one RWIN_SIZE read serves the heads and values of many records, where
 * each record would take two synchronous 4 KiB O_DIRECT reads (64-byte
 * values: ~16,000 reads for a 64 MiB bucket, most of a restart after a
 * crash). Owned by one walk, on a bucket nothing else reads or writes.
 */
#define RWIN_SIZE (4u << 20)

struct rwin {
	char *rw_buf;	   /* RWIN_SIZE bytes, aligned; NULL: read directly */
	uint64_t rw_off;   /* the file offset of rw_buf[0] */
	uint64_t rw_len;   /* bytes of rw_buf read */
	uint64_t rw_limit; /* the window reads below this offset only (a block multiple) */
};

/*
 * Reads len bytes at off of b's file into buf: through w (NULL: none) when
 * they fit in it, else (or when reading the window fails: a bad block
 * beyond what is asked for must not fail it) with a read of their own.
 */
static int win_read(struct kv_bucket *b, struct rwin *w, void *buf, uint64_t len, uint64_t off)
{
	uint64_t start = off / KV_BLOCK * KV_BLOCK;

	if (!w || !w->rw_buf || off + len > w->rw_limit)
		return kv_prw_all(b->kb_fd, false, buf, len, off);
	if (off < w->rw_off || off + len > w->rw_off + w->rw_len) {
		uint64_t n = w->rw_limit - start < RWIN_SIZE ? w->rw_limit - start : RWIN_SIZE;

		w->rw_len = 0;
		if (off + len > start + n || kv_prw_all(b->kb_fd, false, w->rw_buf, n, start))
			return kv_prw_all(b->kb_fd, false, buf, len, off);
		w->rw_off = start;
		w->rw_len = n;
	}
	memcpy(buf, w->rw_buf + (off - w->rw_off), len);
	return 0;
}

/*
 * Reads the head of the record at `off` in b into a malloc'ed buffer.
 * Returns 0, -EIO for a damaged or missing head.
 */
static int read_head(struct kv_bucket_set *bs, struct kv_bucket *b, struct rwin *w, uint64_t off,
		     void **out)
{
	uint64_t len = KV_BLOCK;
	void *buf = NULL;
	int err;

	for (;;) {
		free(buf);
		buf = aligned(len);
		if (!buf)
			return -ENOMEM;
		err = win_read(b, w, buf, len, off);
		if (err)
			break;
		err = head_check(buf, len);
		if (err != -EAGAIN)
			break;
		len = ((const struct kv_rec_head *)buf)->rh_head_len;
	}
	if (err) {
		free(buf);
		return err == -ENOMEM ? err : -EIO;
	}
	*out = buf;
	return 0;
}

/* Checks `len` value bytes in buf (starting at chunk c0) against csums. */
static int verify(struct kv_bucket_set *bs, const char *buf, uint64_t len, uint64_t c0,
		  const uint64_t *csums)
{
	for (uint64_t done = 0, c = c0; done < len; c++) {
		uint64_t n = len - done < CHUNK ? len - done : CHUNK;

		if (XXH3_64bits(buf + done, n) != csums[c]) {
			if (bs)
				atomic_fetch_add(&bs->bs_csum_errors, 1);
			return -EIO;
		}
		done += n;
	}
	return 0;
}

/*
 * Read buffers. A FUSE worker reads a value piece, replies from the buffer
 * and frees it, over and over: each thread keeps one buffer (up to
 * READ_KEEP bytes) for the next read, so O_DIRECT never lands in freshly
 * mapped pages (a page fault per 4 KiB was a third of a read's cost).
 * Thread-local, so no lock; the buffer goes with its thread.
 */
#define READ_KEEP (4u << 20)

struct read_cache {
	void *rc_buf;
	size_t rc_len;
	bool rc_busy;
};

static pthread_key_t read_cache_key;
static pthread_once_t read_cache_once = PTHREAD_ONCE_INIT;

static void read_cache_free(void *arg)
{
	struct read_cache *rc = arg;

	free(rc->rc_buf);
	free(rc);
}

static void read_cache_init(void)
{
	pthread_key_create(&read_cache_key, read_cache_free);
}

static void *read_buf(size_t len)
{
	struct read_cache *rc;

	pthread_once(&read_cache_once, read_cache_init);
	rc = pthread_getspecific(read_cache_key);
	if (!rc && (rc = calloc(1, sizeof(*rc))) && pthread_setspecific(read_cache_key, rc)) {
		free(rc);
		rc = NULL;
	}
	if (!rc || rc->rc_busy || len > READ_KEEP)
		return aligned_buf(len, false);
	if (rc->rc_len < len) {
		free(rc->rc_buf);
		rc->rc_len = 0;
		rc->rc_buf = aligned_buf(len, false);
		if (!rc->rc_buf)
			return NULL;
		rc->rc_len = len;
	}
	rc->rc_busy = true;
	return rc->rc_buf;
}

void kv_bucket_read_free(void *buf)
{
	struct read_cache *rc;

	pthread_once(&read_cache_once, read_cache_init);
	rc = pthread_getspecific(read_cache_key);
	if (rc && buf && buf == rc->rc_buf)
		rc->rc_busy = false;
	else
		free(buf);
}

/*
 * Reads value bytes [off, off + len) of the record at loc in b, in whole
 * chunks, and verifies them (see kv_bucket_read).
 */
static int read_value(struct kv_bucket_set *bs, struct kv_bucket *b, struct rwin *w,
		      const struct kv_loc *loc, const uint64_t *csums, uint64_t off, uint64_t len,
		      void **buf, char **data, uint64_t *n)
{
	uint64_t c0, c1, start, bytes;
	int err;

	*buf = NULL;
	*n = 0;
	if (off >= loc->kl_len || len == 0)
		return 0;
	if (len > loc->kl_len - off)
		len = loc->kl_len - off;
	c0 = off / CHUNK;
	c1 = (off + len + CHUNK - 1) / CHUNK;
	start = c0 * CHUNK;
	bytes = (c1 * CHUNK < loc->kl_len ? c1 * CHUNK : loc->kl_len) - start;
	*buf = read_buf(ROUND_UP(bytes));
	if (!*buf)
		return -ENOMEM;
	err = win_read(b, w, *buf, ROUND_UP(bytes), loc->kl_off + loc->kl_head_len + start);
	if (!err)
		err = verify(bs, *buf, bytes, c0, csums);
	if (err) {
		kv_bucket_read_free(*buf);
		*buf = NULL;
		return err == -ENOMEM ? err : -EIO;
	}
	atomic_fetch_add(&bs->bs_read, ROUND_UP(bytes));
	*data = (char *)*buf + (off - start);
	*n = len;
	return 0;
}

/* --- opening --- */

/* Whether h is a whole header of this format: magic, version and checksum. */
static bool header_ok(const struct kv_bucket_hdr *h)
{
	struct kv_bucket_hdr c = *h;

	c.bh_csum = 0;
	return h->bh_magic == KV_BUCKET_MAGIC && h->bh_version == KV_FORMAT_VERSION &&
	       XXH3_64bits(&c, sizeof(c)) == h->bh_csum;
}

/* Fills the header of a new bucket of this id. */
static void header_fill(struct kv_bucket_hdr *h, uint64_t id)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	h->bh_magic = KV_BUCKET_MAGIC;
	h->bh_version = KV_FORMAT_VERSION;
	h->bh_id = id;
	h->bh_created_ns = ts.tv_sec * 1000000000ll + ts.tv_nsec;
	h->bh_csum = XXH3_64bits(h, sizeof(*h));
}

/*
 * Creates a new bucket file (header written and synced, directory synced).
 * Call without bs_lock: it takes it only for the id, so readers are not
 * held up by the syncs. prealloc 0 makes a compaction output: no
 * preallocation and no sync here (kv_compact_commit syncs the file and the
 * directory). Its file only grows by its own writes, header first, so a
 * crash leaves it empty (recovery removes it) or with its header, never a
 * large file without one (kv_compact_begin makes it a sparse one, its
 * header written); and as its writes fill that sparse file, it has no use
 * for preallocation. So an output costs one journal commit of the
 * filesystem, not three.
 */
static int bucket_create(struct kv_bucket_set *bs, uint64_t prealloc, struct kv_bucket **out)
{
	struct kv_bucket_hdr *h;
	struct kv_bucket *b;
	char name[32];
	int err;

	b = calloc(1, sizeof(*b));
	h = aligned(KV_BLOCK);
	if (!b || !h) {
		err = -ENOMEM;
		goto out_free;
	}
	pthread_mutex_lock(&bs->bs_lock);
	b->kb_id = bs->bs_next_id++;
	pthread_mutex_unlock(&bs->bs_lock);
	b->kb_version = KV_FORMAT_VERSION;
	name_of(b->kb_id, name, sizeof(name));
	b->kb_fd =
	    openat(bs->bs_dirfd, name, O_RDWR | O_CREAT | O_EXCL | O_DIRECT | O_CLOEXEC, 0600);
	if (b->kb_fd < 0) {
		err = -errno;
		goto out_free;
	}
	header_fill(h, b->kb_id);
	/*
	 * The header before the preallocation: a crash in between leaves a
	 * bucket with no records, or a file too short to be one (recovery
	 * removes both), never a large file without a header (kept for salvage,
	 * and damage to --fsck).
	 */
	err = kv_prw_all(b->kb_fd, true, h, KV_BLOCK, 0);
	if (!err && prealloc && fallocate(b->kb_fd, 0, 0, (off_t)prealloc) < 0 &&
	    errno != EOPNOTSUPP)
		err = -errno;
	if (!err && prealloc && (fdatasync(b->kb_fd) < 0 || fsync(bs->bs_dirfd) < 0))
		err = -errno;
	if (err)
		goto out_unlink;
	b->kb_end = KV_BLOCK;
	free(h);
	*out = b;
	return 0;

out_unlink:
	close(b->kb_fd);
	unlinkat(bs->bs_dirfd, name, 0);
out_free:
	free(h);
	free(b);
	return err;
}

/*
 * Makes a compaction output of a spare, if one is kept: the new header and
 * a zeroed block after it are written while the file still has the
 * spare's name, then it takes the new bucket's. A crash before the rename
 * leaves a spare (a start removes it); after, a bucket whose first record
 * is that zeroed block: no records, removed at start. Neither rename is
 * synced (a sync each cost a quarter of the copy rate): a file a stop
 * catches under a bucket's name with another bucket's header is removed
 * at start (load_bucket). The old records further on are overwritten as
 * the output fills, every write followed by a zeroed block (stage_flush,
 * copy_one), and cut off by the seal.
 * Returns 0, or -ENOENT (no spare) or another error (the spare removed):
 * the caller then creates a file.
 */
static int recycle_create(struct kv_bucket_set *bs, struct kv_bucket **out)
{
	char from[32], to[32];
	struct kv_bucket_hdr *h;
	struct kv_bucket *b;
	struct spare sp;
	int err;

	pthread_mutex_lock(&bs->bs_lock);
	if (!bs->bs_nspare) {
		pthread_mutex_unlock(&bs->bs_lock);
		return -ENOENT;
	}
	sp = bs->bs_spare[--bs->bs_nspare];
	pthread_mutex_unlock(&bs->bs_lock);
	spare_name(sp.sp_id, from, sizeof(from));
	b = calloc(1, sizeof(*b));
	h = aligned(2 * KV_BLOCK);
	err = b && h ? 0 : -ENOMEM;
	if (!err) {
		pthread_mutex_lock(&bs->bs_lock);
		b->kb_id = bs->bs_next_id++;
		pthread_mutex_unlock(&bs->bs_lock);
		name_of(b->kb_id, to, sizeof(to));
		header_fill(h, b->kb_id);
		err = kv_prw_all(sp.sp_fd, true, h, 2 * KV_BLOCK, 0);
	}
	if (!err && renameat(bs->bs_dirfd, from, bs->bs_dirfd, to) < 0)
		err = -errno;
	free(h);
	if (err) {
		close(sp.sp_fd);
		unlinkat(bs->bs_dirfd, from, 0);
		free(b);
		return err;
	}
	b->kb_fd = sp.sp_fd;
	b->kb_version = KV_FORMAT_VERSION;
	b->kb_end = KV_BLOCK;
	b->kb_recycled = true;
	*out = b;
	return 0;
}

/* Remembers a record (with its KV_REC_* flags) of the active bucket for its index block. */
static int idx_add(struct kv_bucket *b, const struct kv_loc *loc, uint16_t flags, const char *key,
		   uint32_t klen)
{
	struct idx_rec *r;

	if (b->kb_nidx == b->kb_maxidx) {
		uint64_t n = b->kb_maxidx ? b->kb_maxidx * 2 : 64;
		struct idx_rec *t = realloc(b->kb_idx, n * sizeof(*t));

		if (!t)
			return -ENOMEM;
		b->kb_idx = t;
		b->kb_maxidx = n;
	}
	r = &b->kb_idx[b->kb_nidx];
	r->ir_key = malloc(klen ? klen : 1);
	if (!r->ir_key)
		return -ENOMEM;
	memcpy(r->ir_key, key, klen);
	r->ir_ent = (struct kv_idx_ent){
	    .ie_off = loc->kl_off,
	    .ie_value_len = loc->kl_len,
	    .ie_seq = loc->kl_seq,
	    .ie_head_len = loc->kl_head_len,
	    .ie_key_len = klen,
	    .ie_ext_index = loc->kl_index,
	    .ie_flags = flags,
	};
	b->kb_nidx++;
	return 0;
}

/*
 * Seals b: writes its index block and trailer after the last record,
 * syncs, truncates the preallocated rest. Returns 0 or -errno.
 */
static int bucket_seal(struct kv_bucket_set *bs, struct kv_bucket *b)
{
	/* A version 1 bucket (recovered open) gets version 1 entries, the first 32 bytes. */
	size_t elen = b->kb_version == 1 ? offsetof(struct kv_idx_ent, ie_ext_index)
					 : sizeof(struct kv_idx_ent);
	uint64_t ilen = 0, off = 0, total;
	struct kv_bucket_trailer *t;
	char *buf;
	int err;

	for (uint64_t i = 0; i < b->kb_nidx; i++)
		ilen += elen + (b->kb_idx[i].ir_ent.ie_key_len + 7) / 8 * 8;
	total = ROUND_UP(ilen) + KV_BLOCK;
	buf = aligned(total);
	if (!buf)
		return -ENOMEM;
	for (uint64_t i = 0; i < b->kb_nidx; i++) {
		const struct idx_rec *r = &b->kb_idx[i];

		memcpy(buf + off, &r->ir_ent, elen);
		memcpy(buf + off + elen, r->ir_key, r->ir_ent.ie_key_len);
		off += elen + (r->ir_ent.ie_key_len + 7) / 8 * 8;
	}
	t = (struct kv_bucket_trailer *)(buf + total - KV_BLOCK);
	*t = (struct kv_bucket_trailer){
	    .bt_magic = KV_TRAILER_MAGIC,
	    .bt_id = b->kb_id,
	    .bt_index_off = b->kb_end,
	    .bt_index_len = ilen,
	    .bt_count = b->kb_count,
	    .bt_index_csum = XXH3_64bits(buf, ilen),
	};
	t->bt_csum = XXH3_64bits(t, sizeof(*t));
	err = kv_prw_all(b->kb_fd, true, buf, total, b->kb_end);
	free(buf);
	/* Cut to its end before the sync, so that the size the trailer is found by is durable. */
	if (!err &&
	    (ftruncate(b->kb_fd, (off_t)(b->kb_end + total)) < 0 || fdatasync(b->kb_fd) < 0))
		err = -errno;
	if (err)
		return err;
	pthread_mutex_lock(&bs->bs_lock);
	b->kb_rec_end = b->kb_end;
	b->kb_end += total;
	bs->bs_used += total;
	b->kb_sealed = true;
	pthread_mutex_unlock(&bs->bs_lock);
	for (uint64_t i = 0; i < b->kb_nidx; i++)
		free(b->kb_idx[i].ir_key);
	free(b->kb_idx);
	b->kb_idx = NULL;
	b->kb_nidx = b->kb_maxidx = 0;
	return 0;
}

/* Loads a sealed bucket's trailer. Returns 0, or -EIO when there is none. */
static int load_trailer(struct kv_bucket_set *bs, struct kv_bucket *b, uint64_t size)
{
	struct kv_bucket_trailer *t, c;
	int err;

	if (size < 2 * KV_BLOCK || size % KV_BLOCK)
		return -EIO;
	t = aligned(KV_BLOCK);
	if (!t)
		return -ENOMEM;
	err = kv_prw_all(b->kb_fd, false, t, KV_BLOCK, size - KV_BLOCK);
	c = *t;
	c.bt_csum = 0;
	if (!err && (t->bt_magic != KV_TRAILER_MAGIC || t->bt_id != b->kb_id ||
		     XXH3_64bits(&c, sizeof(c)) != t->bt_csum || t->bt_index_off > size))
		err = -EIO;
	if (!err) {
		b->kb_end = size;
		b->kb_rec_end = t->bt_index_off;
		b->kb_count = t->bt_count;
		b->kb_sealed = true;
	}
	free(t);
	return err;
}

/*
 * Checks every chunk of the value of the record at loc in b (head: its
 * checked head). With `out`, also returns the value (malloc'ed, kl_len
 * bytes, at least one). Returns 0, -EIO or -ENOMEM.
 */
static int check_value(struct kv_bucket_set *bs, struct kv_bucket *b, struct rwin *w,
		       const struct kv_loc *loc, const void *head, char **out)
{
	uint64_t *csums = head_csums(head);
	char *value = NULL;
	int err = csums ? 0 : -ENOMEM;

	if (!err && out) {
		value = malloc(loc->kl_len ? loc->kl_len : 1);
		err = value ? 0 : -ENOMEM;
	}
	for (uint64_t v = 0; !err && v < loc->kl_len; v += READ_PIECE) {
		void *buf;
		char *data;
		uint64_t n;

		err = read_value(bs, b, w, loc, csums, v, READ_PIECE, &buf, &data, &n);
		if (!err && value)
			memcpy(value + v, data, n);
		if (!err)
			kv_bucket_read_free(buf);
	}
	free(csums);
	if (err)
		free(value);
	else if (out)
		*out = value;
	return err;
}

/*
 * Walks the records of b from offset 4096 up to `limit`, checking heads
 * (and values when check_values) and calling fn for each good record. A bad
 * head ends the walk (nothing after it can be found); a bad value ends it
 * too when stop_at_bad (recovering an open bucket: a torn tail), else the
 * record is counted in *bad and skipped. Sets *end to the end of the last
 * record walked over.
 */
static int walk(struct kv_bucket_set *bs, struct kv_bucket *b, uint64_t limit, bool check_values,
		bool stop_at_bad, int (*fn)(const struct kv_bucket_rec *r, void *arg), void *arg,
		uint64_t *end, uint64_t *bad)
{
	/* Without its buffer (no memory), every read is its own. */
	struct rwin w = {.rw_buf = aligned_buf(RWIN_SIZE, false),
			 .rw_limit = limit / KV_BLOCK * KV_BLOCK};
	uint64_t off = KV_BLOCK;
	int ret = 0;

	while (!ret && off + KV_BLOCK <= limit) {
		struct kv_rec_head h;
		struct kv_bucket_rec r;
		char *manifest = NULL;
		void *head;
		size_t slen;
		int err;

		if (read_head(bs, b, &w, off, &head))
			break;
		slen = head_get(head, &h);
		r.br_loc = (struct kv_loc){.kl_bucket = b->kb_id,
					   .kl_off = off,
					   .kl_len = h.rh_value_len,
					   .kl_seq = h.rh_seq,
					   .kl_head_len = h.rh_head_len,
					   .kl_index = h.rh_ext_index};
		r.br_key = (const char *)head + slen;
		r.br_key_len = h.rh_key_len;
		r.br_flags = h.rh_flags;
		err = off + kv_loc_size(&r.br_loc) > limit ? -EIO : 0;
		/* A manifest is small, and what salvage rebuilds a value from: always read. */
		if (!err && h.rh_flags == KV_REC_MANIFEST)
			err = check_value(bs, b, &w, &r.br_loc, head, &manifest);
		else if (!err && check_values)
			err = check_value(bs, b, &w, &r.br_loc, head, NULL);
		r.br_value = manifest;
		if (err && (stop_at_bad || off + kv_loc_size(&r.br_loc) > limit)) {
			free(head);
			break;
		}
		if (err)
			(*bad)++;
		else if (fn)
			ret = fn(&r, arg);
		free(manifest);
		free(head);
		off += kv_loc_size(&r.br_loc);
	}
	free(w.rw_buf);
	*end = off;
	return ret;
}

/* Index callback: rebuilds the in-memory index of a bucket being recovered. */
static int walk_index(const struct kv_bucket_rec *r, void *arg)
{
	struct kv_bucket *b = arg;

	b->kb_count++;
	return idx_add(b, &r->br_loc, r->br_flags, r->br_key, r->br_key_len);
}

/* Loads one bucket file: sealed by its trailer; open by a scan, then sealed. */
static int load_bucket(struct kv_bucket_set *bs, const char *name, uint64_t id)
{
	struct kv_bucket_hdr *h = NULL;
	struct kv_bucket *b;
	struct stat st;
	uint64_t end;
	int err;

	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->kb_id = id;
	b->kb_fd = openat(bs->bs_dirfd, name, O_RDWR | O_DIRECT | O_CLOEXEC);
	if (b->kb_fd < 0 || fstat(b->kb_fd, &st) < 0) {
		err = -errno;
		goto out_free;
	}
	h = aligned(KV_BLOCK);
	err = h ? kv_prw_all(b->kb_fd, false, h, KV_BLOCK, 0) : -ENOMEM;
	if (err == -ENOMEM)
		goto out_close;
	if (!err && h->bh_id != id && header_ok(h)) {
		/*
		 * Another bucket's whole header: a spare caught between its two
		 * names by a stop (recycle_create; the renames are not synced).
		 * It was dropped, or never committed: nothing refers to it.
		 */
		fprintf(stderr,
			"kvfs: %s holds bucket %" PRIx64
			"'s header: a recycled file a stop caught; removed\n",
			name, h->bh_id);
		close(b->kb_fd);
		unlinkat(bs->bs_dirfd, name, 0);
		free(h);
		free(b);
		return 0;
	}
	b->kb_version = h->bh_version;
	if (err || h->bh_magic != KV_BUCKET_MAGIC || h->bh_id != id ||
	    (h->bh_version != 1 && h->bh_version != 2)) {
		b->kb_broken = true;
		b->kb_sealed = true;
		b->kb_end = (uint64_t)st.st_size;
	} else if (load_trailer(bs, b, (uint64_t)st.st_size)) {
		/* Left open by a crash: keep the good records, seal there. */
		uint64_t bad = 0;

		b->kb_count = 0;
		walk(bs, b, (uint64_t)st.st_size, true, true, walk_index, b, &end, &bad);
		atomic_fetch_add(&bs->bs_truncated, 1);
		b->kb_end = end;
		bs->bs_used += end; /* sealing adds the index block and trailer */
		err = bucket_seal(bs, b);
		if (err) {
			bs->bs_used -= end;
			goto out_free_idx;
		}
	} else {
		bs->bs_used += b->kb_end;
	}
	if (b->kb_broken)
		bs->bs_used += b->kb_end;
	free(h);
	return insert(bs, b);

out_free_idx:
	for (uint64_t i = 0; i < b->kb_nidx; i++)
		free(b->kb_idx[i].ir_key);
	free(b->kb_idx);
out_close:
	close(b->kb_fd);
out_free:
	free(h);
	free(b);
	return err;
}

static int load_all(struct kv_bucket_set *bs)
{
	/* A descriptor of its own: a dup would share (and move) the offset. */
	DIR *d = fdopendir(openat(bs->bs_dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
	struct dirent *de;
	int err = 0;

	if (!d)
		return -errno;
	while (!err && (de = readdir(d))) {
		char *end;
		uint64_t id = strtoull(de->d_name, &end, 16);

		if (end == de->d_name + 16 && strcmp(end, ".kvs") == 0) {
			unlinkat(bs->bs_dirfd, de->d_name, 0); /* a spare left by a stop */
			continue;
		}
		if (end != de->d_name + 16 || strcmp(end, ".kvb") != 0 || id == 0)
			continue;
		err = load_bucket(bs, de->d_name, id);
	}
	closedir(d);
	return err;
}

int kv_bucket_open(struct kv_bucket_set **out, int datadir_fd, const struct kv_bucket_opts *o,
		   struct kv_aio *aio)
{
	struct kv_bucket_set *bs = calloc(1, sizeof(*bs));
	int err;

	if (!bs)
		return -ENOMEM;
	bs->bs_opts = *o;
	bs->bs_aio = aio;
	bs->bs_next_id = 1;
	pthread_mutex_init(&bs->bs_lock, NULL);
	pthread_mutex_init(&bs->bs_append_lock, NULL);
	pthread_cond_init(&bs->bs_drained, NULL);
	if (mkdirat(datadir_fd, "buckets", 0700) < 0 && errno != EEXIST) {
		err = -errno;
		goto out_free;
	}
	bs->bs_dirfd = openat(datadir_fd, "buckets", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (bs->bs_dirfd < 0) {
		err = -errno;
		goto out_free;
	}
	err = load_all(bs);
	if (err)
		goto out_close;
	*out = bs;
	return 0;

out_close:
	for (uint32_t i = 0; i < bs->bs_n; i++)
		bucket_free(bs->bs_tab[i]);
	free(bs->bs_tab);
	close(bs->bs_dirfd);
out_free:
	pthread_mutex_destroy(&bs->bs_lock);
	pthread_mutex_destroy(&bs->bs_append_lock);
	pthread_cond_destroy(&bs->bs_drained);
	free(bs);
	return err;
}

void kv_bucket_close(struct kv_bucket_set *bs)
{
	kv_bucket_recycle(bs, false);
	pthread_mutex_lock(&bs->bs_append_lock);
	if (bs->bs_active && bs->bs_active->kb_count)
		bucket_seal(bs, bs->bs_active);
	pthread_mutex_unlock(&bs->bs_append_lock);
	for (uint32_t i = 0; i < bs->bs_n; i++)
		bucket_free(bs->bs_tab[i]);
	free(bs->bs_tab);
	free(atomic_load(&bs->bs_stage));
	close(bs->bs_dirfd);
	pthread_mutex_destroy(&bs->bs_lock);
	pthread_mutex_destroy(&bs->bs_append_lock);
	pthread_cond_destroy(&bs->bs_drained);
	free(bs);
}

/* --- appending --- */

/* Whether the active bucket b can take a record of `size` bytes (a first record always). */
static bool fits(struct kv_bucket_set *bs, const struct kv_bucket *b, uint64_t size)
{
	const struct kv_bucket_opts *o = &bs->bs_opts;

	return b && (b->kb_end + size <= o->bo_bucket_size || b->kb_count == 0) &&
	       b->kb_count < o->bo_bucket_keys;
}

/*
 * Makes room for a record of `size` bytes: returns the bucket to write it
 * to (the active one, or a new one, sealing the full one first), or NULL
 * with *err set. bs_append_lock held.
 */
static struct kv_bucket *room_for(struct kv_bucket_set *bs, uint64_t size, int *err)
{
	const struct kv_bucket_opts *o = &bs->bs_opts;
	struct kv_bucket *b = bs->bs_active, *nb = NULL;
	uint64_t prealloc;

	if (fits(bs, b, size))
		return b;
	if (b) {
		*err = bucket_seal(bs, b);
		if (*err)
			return NULL;
		pthread_mutex_lock(&bs->bs_lock);
		bs->bs_active = NULL;
		pthread_mutex_unlock(&bs->bs_lock);
	}
	prealloc = KV_BLOCK + size > o->bo_bucket_size ? KV_BLOCK + size : o->bo_bucket_size;
	*err = bucket_create(bs, prealloc, &nb);
	pthread_mutex_lock(&bs->bs_lock);
	if (!*err) {
		*err = insert(bs, nb);
		if (*err)
			bucket_free(nb);
		else
			bs->bs_used += KV_BLOCK;
	}
	if (!*err)
		bs->bs_active = nb;
	pthread_mutex_unlock(&bs->bs_lock);
	return *err ? NULL : nb;
}

/* What one put becomes: two writes, head then value. */
struct pending {
	struct kv_bucket *pd_b;
	unsigned pd_op, pd_nops; /* its ops in the batch: the head's, then the value's if any */
	void *pd_head;
	struct iovec pd_hiov;
	struct iovec *pd_viov;
	int pd_vcnt;
};

/* Builds the head block of a put, with its chunk checksums. */
static int build_head(struct kv_bucket_put *p, struct pending *pd)
{
	uint32_t head_len = kv_rec_head_len(p->bp_key_len, p->bp_len);
	struct kv_rec_head h = {
	    .rh_magic = KV_REC_MAGIC,
	    .rh_version = KV_FORMAT_VERSION,
	    .rh_flags = p->bp_flags,
	    .rh_ext_index = p->bp_index,
	    .rh_key_len = p->bp_key_len,
	    .rh_head_len = head_len,
	    .rh_value_len = p->bp_len,
	    .rh_seq = p->bp_seq,
	    .rh_chunk_shift = KV_CHUNK_SHIFT,
	    .rh_nchunks = (uint32_t)((p->bp_len + CHUNK - 1) / CHUNK),
	};
	char *buf = aligned(head_len), *key, *csums;
	int err;

	if (!buf)
		return -ENOMEM;
	key = buf + sizeof(h);
	csums = key + p->bp_key_len;
	memcpy(key, p->bp_key, p->bp_key_len);
	if (h.rh_nchunks) {
		uint64_t *tmp = malloc((size_t)h.rh_nchunks * 8);

		err = tmp ? chunk_csums(p->bp_iov, p->bp_iovcnt, p->bp_len, tmp) : -ENOMEM;
		if (err) {
			free(tmp);
			free(buf);
			return err;
		}
		memcpy(csums, tmp, (size_t)h.rh_nchunks * 8);
		if (p->bp_csums)
			memcpy(p->bp_csums, tmp, (size_t)h.rh_nchunks * 8);
		free(tmp);
	}
	h.rh_payload_csum = XXH3_64bits(csums, (size_t)h.rh_nchunks * 8);
	h.rh_head_csum = head_csum(&h, sizeof(h), key, csums);
	memcpy(buf, &h, sizeof(h));
	pd->pd_head = buf;
	pd->pd_hiov = (struct iovec){.iov_base = buf, .iov_len = head_len};
	return 0;
}

/* The value's iovecs trimmed to exactly round_up(len, 4K) bytes. */
static int value_iov(const struct kv_bucket_put *p, struct pending *pd)
{
	uint64_t want = ROUND_UP(p->bp_len);
	int n = 0;

	pd->pd_viov = calloc((size_t)p->bp_iovcnt + 1, sizeof(struct iovec));
	if (!pd->pd_viov)
		return -ENOMEM;
	for (int i = 0; i < p->bp_iovcnt && want; i++) {
		uint64_t l = p->bp_iov[i].iov_len < want ? p->bp_iov[i].iov_len : want;

		pd->pd_viov[n].iov_base = p->bp_iov[i].iov_base;
		pd->pd_viov[n].iov_len = l;
		want -= l;
		n++;
	}
	if (want)
		return -EINVAL;
	pd->pd_vcnt = n;
	return 0;
}

static uint64_t iov_bytes(const struct iovec *iov, int cnt)
{
	uint64_t n = 0;

	for (int i = 0; i < cnt; i++)
		n += iov[i].iov_len;
	return n;
}

/*
 * Writes the ops of puts [from, to) (ops [op0, nops)) and makes them
 * durable: one fdatasync per bucket written. Sets each put's bp_err.
 */
static void flush(struct kv_bucket_set *bs, struct kv_bucket_put *puts, struct pending *pd,
		  unsigned from, unsigned to, struct kv_aio_op *ops, unsigned op0, unsigned nops)
{
	if (nops > op0)
		kv_aio_run(bs->bs_aio, ops + op0, nops - op0);
	for (unsigned i = from; i < to; i++) {
		struct kv_bucket_put *p = &puts[i];
		bool synced = false;

		if (!pd[i].pd_b)
			continue;
		for (unsigned k = pd[i].pd_op; k < pd[i].pd_op + pd[i].pd_nops; k++)
			if (ops[k].kao_res !=
				(ssize_t)iov_bytes(ops[k].kao_iov, ops[k].kao_iovcnt) &&
			    !p->bp_err)
				p->bp_err = ops[k].kao_res < 0 ? (int)ops[k].kao_res : -ENOSPC;
		for (unsigned j = from; j < i; j++)
			synced |= pd[j].pd_b == pd[i].pd_b;
		if (!synced && fdatasync(pd[i].pd_b->kb_fd) < 0) {
			int err = -errno;

			for (unsigned j = i; j < to; j++)
				if (pd[j].pd_b == pd[i].pd_b && !puts[j].bp_err)
					puts[j].bp_err = err;
		}
		if (!p->bp_err)
			atomic_fetch_add(&bs->bs_written, kv_loc_size(&p->bp_loc));
	}
}

/* Bytes a record adds to its bucket's index block. */
static uint64_t idx_bytes(uint32_t key_len)
{
	return sizeof(struct kv_idx_ent) + (key_len + 7) / 8 * 8;
}

/*
 * Whether a record of `size` bytes may be written within the quota, with
 * every byte it will cost counted: its index entry, the seal (index block
 * and trailer) of the bucket it lands in, and, when it starts a new bucket,
 * the old one's seal and the new one's header. So the buckets stay within
 * bo_cap once sealed, not just while open.
 */
static bool within_quota(struct kv_bucket_set *bs, uint64_t size, uint32_t key_len, uint64_t *fill,
			 bool over)
{
	const struct kv_bucket *a = bs->bs_active;
	uint64_t need, cap = bs->bs_opts.bo_cap;
	bool ok;

	pthread_mutex_lock(&bs->bs_lock);
	if (fits(bs, a, size)) {
		need = size + ROUND_UP(a->kb_idx_bytes + idx_bytes(key_len)) + KV_BLOCK;
	} else {
		need = (a ? ROUND_UP(a->kb_idx_bytes) + KV_BLOCK : 0) + KV_BLOCK + size +
		       ROUND_UP(idx_bytes(key_len)) + KV_BLOCK;
	}
	/*
	 * What others reserved is not ours to take; what this record fills is.
	 * With `over`, a record promised all it needs (the active bucket's seal
	 * aside: kv_bucket_reserve leaves room for it) is placed whatever else
	 * the buckets hold.
	 */
	if (*fill > bs->bs_reserved)
		*fill = bs->bs_reserved; /* cannot happen: a fill is a reservation's */
	cap -= bs->bs_reserved - *fill < cap ? bs->bs_reserved - *fill : cap;
	ok = (bs->bs_used <= cap && need <= cap - bs->bs_used) ||
	     (over && *fill >= size + ROUND_UP(idx_bytes(key_len)) + 2 * KV_BLOCK);
	bs->bs_pending = ok ? need : 0;
	pthread_mutex_unlock(&bs->bs_lock);
	return ok;
}

int kv_bucket_reserve(struct kv_bucket_set *bs, uint64_t bytes, bool force)
{
	uint64_t live, dead = 0;
	int err = 0;

	pthread_mutex_lock(&bs->bs_lock);
	for (uint32_t i = 0; i < bs->bs_n; i++)
		dead += bs->bs_tab[i]->kb_dead;
	/* Live bytes, what an append has in flight, and the active bucket's seal to come. */
	live = bs->bs_used - (dead < bs->bs_used ? dead : bs->bs_used) + bs->bs_pending;
	if (bs->bs_active)
		live += ROUND_UP(bs->bs_active->kb_idx_bytes) + KV_BLOCK;
	if (!force && (live + bs->bs_reserved > bs->bs_opts.bo_cap ||
		       bytes > bs->bs_opts.bo_cap - live - bs->bs_reserved))
		err = -ENOSPC;
	else
		bs->bs_reserved += bytes;
	pthread_mutex_unlock(&bs->bs_lock);
	return err;
}

void kv_bucket_unreserve(struct kv_bucket_set *bs, uint64_t bytes)
{
	pthread_mutex_lock(&bs->bs_lock);
	bs->bs_reserved -= bytes < bs->bs_reserved ? bytes : bs->bs_reserved;
	pthread_mutex_unlock(&bs->bs_lock);
}

int kv_bucket_append(struct kv_bucket_set *bs, struct kv_bucket_put *puts, unsigned n)
{
	struct pending *pd = calloc(n ? n : 1, sizeof(*pd));
	struct kv_aio_op *ops = calloc(2 * (size_t)n + 1, sizeof(*ops));
	unsigned nops = 0, seg = 0, seg_op = 0;
	int first = 0;

	if (!pd || !ops) {
		free(pd);
		free(ops);
		for (unsigned i = 0; i < n; i++)
			puts[i].bp_err = -ENOMEM;
		return -ENOMEM;
	}
	atomic_store_explicit(&bs->bs_fg_ns, mono_ns(), memory_order_relaxed);
	pthread_mutex_lock(&bs->bs_append_lock);
	for (unsigned i = 0; i < n; i++) {
		struct kv_bucket_put *p = &puts[i];
		uint64_t size = kv_rec_size(p->bp_key_len, p->bp_len);
		struct kv_bucket *b;
		int err = 0;

		if (!rec_shape_ok(p->bp_flags, p->bp_index, p->bp_len)) {
			p->bp_err = -EINVAL;
			continue;
		}
		if (!within_quota(bs, size, p->bp_key_len, &p->bp_fill, p->bp_over)) {
			p->bp_err = -ENOSPC;
			continue;
		}
		/* A bucket is sealed only after its records are written. */
		if (!fits(bs, bs->bs_active, size)) {
			flush(bs, puts, pd, seg, i, ops, seg_op, nops);
			seg = i;
			seg_op = nops;
		}
		b = room_for(bs, size, &err);
		if (!err)
			err = build_head(p, &pd[i]);
		if (!err)
			err = value_iov(p, &pd[i]);
		p->bp_err = err;
		if (err)
			continue;
		p->bp_loc = (struct kv_loc){.kl_bucket = b->kb_id,
					    .kl_off = b->kb_end,
					    .kl_len = p->bp_len,
					    .kl_seq = p->bp_seq,
					    .kl_head_len = (uint32_t)pd[i].pd_hiov.iov_len,
					    .kl_index = p->bp_index};
		pd[i].pd_b = b;
		pd[i].pd_op = nops;
		ops[nops++] = (struct kv_aio_op){.kao_fd = b->kb_fd,
						 .kao_write = true,
						 .kao_off = b->kb_end,
						 .kao_iov = &pd[i].pd_hiov,
						 .kao_iovcnt = 1};
		if (pd[i].pd_vcnt) /* an empty value is all head */
			ops[nops++] =
			    (struct kv_aio_op){.kao_fd = b->kb_fd,
					       .kao_write = true,
					       .kao_off = b->kb_end + pd[i].pd_hiov.iov_len,
					       .kao_iov = pd[i].pd_viov,
					       .kao_iovcnt = pd[i].pd_vcnt};
		pd[i].pd_nops = nops - pd[i].pd_op;
		pthread_mutex_lock(&bs->bs_lock);
		b->kb_end += size;
		b->kb_count++;
		b->kb_idx_bytes += idx_bytes(p->bp_key_len);
		b->kb_access_ns = mono_ns();
		b->kb_unsettled++;
		bs->bs_used += size;
		bs->bs_pending = 0;
		bs->bs_reserved -= p->bp_fill; /* the quota it was promised is its now */
		p->bp_fill = 0;
		pthread_mutex_unlock(&bs->bs_lock);
		if (idx_add(b, &p->bp_loc, p->bp_flags, p->bp_key, p->bp_key_len))
			p->bp_err = -ENOMEM;
	}
	flush(bs, puts, pd, seg, n, ops, seg_op, nops);
	pthread_mutex_lock(&bs->bs_lock);
	bs->bs_pending = 0; /* a put that failed between its check and its placing */
	pthread_mutex_unlock(&bs->bs_lock);
	for (unsigned i = 0; i < n; i++) {
		if (puts[i].bp_err && !first)
			first = puts[i].bp_err;
		free(pd[i].pd_head);
		free(pd[i].pd_viov);
	}
	pthread_mutex_unlock(&bs->bs_append_lock);
	free(pd);
	free(ops);
	return first;
}

/* --- reading --- */

/*
 * Finds the bucket of loc, or NULL, and counts a read in flight on it:
 * kv_bucket_drop frees a bucket only once every such read is released.
 * now: a foreground read's time, which makes the bucket warm; 0 for
 * compaction's own reads, which leave its coldness alone.
 */
static struct kv_bucket *bucket_get(struct kv_bucket_set *bs, const struct kv_loc *loc,
				    uint64_t now)
{
	struct kv_bucket *b;

	pthread_mutex_lock(&bs->bs_lock);
	b = find(bs, loc->kl_bucket);
	if (b && (b->kb_broken || loc->kl_off + kv_loc_size(loc) > b->kb_end))
		b = NULL;
	if (b) {
		b->kb_readers++;
		if (now)
			b->kb_access_ns = now;
	}
	pthread_mutex_unlock(&bs->bs_lock);
	return b;
}

/* bucket_get for a foreground read: compaction yields to it (gc_io). */
static struct kv_bucket *fg_get(struct kv_bucket_set *bs, const struct kv_loc *loc)
{
	uint64_t now = mono_ns();

	atomic_store_explicit(&bs->bs_fg_ns, now, memory_order_relaxed);
	return bucket_get(bs, loc, now);
}

static void bucket_release(struct kv_bucket_set *bs, struct kv_bucket *b)
{
	pthread_mutex_lock(&bs->bs_lock);
	if (--b->kb_readers == 0)
		pthread_cond_broadcast(&bs->bs_drained);
	pthread_mutex_unlock(&bs->bs_lock);
}

bool kv_bucket_holds(struct kv_bucket_set *bs, uint64_t id, uint64_t off, uint64_t end)
{
	const struct kv_bucket *b;
	bool ok;

	if (off < KV_BLOCK)
		return false;
	/* bucket_get's test, without a read's bookkeeping: recovery asks for every key. */
	pthread_mutex_lock(&bs->bs_lock);
	b = find(bs, id);
	ok = b && !b->kb_broken && end <= b->kb_end;
	pthread_mutex_unlock(&bs->bs_lock);
	return ok;
}

bool kv_bucket_valid(struct kv_bucket_set *bs, const struct kv_loc *loc)
{
	return kv_bucket_holds(bs, loc->kl_bucket, loc->kl_off, loc->kl_off + kv_loc_size(loc));
}

int kv_bucket_load_csums(struct kv_bucket_set *bs, const struct kv_loc *loc, uint64_t **csums,
			 uint32_t *nchunks)
{
	struct kv_bucket *b = fg_get(bs, loc);
	struct kv_rec_head h;
	void *head;
	int err;

	if (!b)
		return -ENOENT;
	err = read_head(bs, b, NULL, loc->kl_off, &head);
	bucket_release(bs, b);
	if (err) {
		atomic_fetch_add(&bs->bs_csum_errors, 1);
		return err;
	}
	head_get(head, &h);
	if (!head_is(&h, loc)) {
		atomic_fetch_add(&bs->bs_csum_errors, 1);
		free(head);
		return -EIO;
	}
	*csums = head_csums(head);
	if (!*csums) {
		free(head);
		return -ENOMEM;
	}
	*nchunks = h.rh_nchunks;
	free(head);
	return 0;
}

int kv_bucket_read(struct kv_bucket_set *bs, const struct kv_loc *loc, const uint64_t *csums,
		   uint64_t off, uint64_t len, void **buf, char **data, uint64_t *n)
{
	struct kv_bucket *b = fg_get(bs, loc);
	int err;

	if (!b)
		return -ENOENT;
	err = read_value(bs, b, NULL, loc, csums, off, len, buf, data, n);
	bucket_release(bs, b);
	return err;
}

int kv_bucket_aread_start(struct kv_bucket_set *bs, const struct kv_loc *loc, uint64_t off,
			  uint64_t len, void *buf, struct kv_bucket_aread *r)
{
	struct kv_bucket *b;
	uint64_t c1;
	int err;

	r->ba_fd = -1;
	r->ba_len = 0;
	if (off >= loc->kl_len || len == 0)
		return -EINVAL;
	if (len > loc->kl_len - off)
		len = loc->kl_len - off;
	r->ba_start = off / CHUNK * CHUNK;
	c1 = (off + len + CHUNK - 1) / CHUNK * CHUNK;
	r->ba_len = (c1 < loc->kl_len ? c1 : loc->kl_len) - r->ba_start;
	b = fg_get(bs, loc);
	if (!b)
		return -ENOENT;
	r->ba_fd = fcntl(b->kb_fd, F_DUPFD_CLOEXEC, 0);
	err = r->ba_fd < 0 ? -errno : 0;
	bucket_release(bs, b);
	if (err)
		return err;
	r->ba_iov = (struct iovec){.iov_base = buf, .iov_len = ROUND_UP(r->ba_len)};
	r->ba_op = (struct kv_aio_op){.kao_fd = r->ba_fd,
				      .kao_off = loc->kl_off + loc->kl_head_len + r->ba_start,
				      .kao_iov = &r->ba_iov,
				      .kao_iovcnt = 1};
	err = kv_aio_start(bs->bs_aio, &r->ba_op, 1, &r->ba_batch);
	if (err) {
		close(r->ba_fd);
		r->ba_fd = -1;
	}
	return err;
}

bool kv_bucket_aread_done(struct kv_bucket_set *bs, struct kv_bucket_aread *r)
{
	return kv_aio_done(bs->bs_aio, r->ba_batch);
}

int kv_bucket_aread_end(struct kv_bucket_set *bs, struct kv_bucket_aread *r, const uint64_t *csums)
{
	int err = kv_aio_wait(bs->bs_aio, r->ba_batch);

	close(r->ba_fd);
	r->ba_fd = -1;
	if (err)
		return -EIO;
	atomic_fetch_add(&bs->bs_read, ROUND_UP(r->ba_len));
	if (csums && verify(NULL, r->ba_iov.iov_base, r->ba_len, r->ba_start / CHUNK, csums))
		return -EIO;
	return 0;
}

int kv_bucket_read_iov(struct kv_bucket_set *bs, const struct kv_loc *loc, const uint64_t *csums,
		       const struct iovec *iov, int iovcnt)
{
	struct kv_bucket *b = fg_get(bs, loc);
	struct kv_aio_op op;
	char *scratch;
	int err;

	if (!b)
		return -ENOENT;
	op = (struct kv_aio_op){.kao_fd = b->kb_fd,
				.kao_off = loc->kl_off + loc->kl_head_len,
				.kao_iov = iov,
				.kao_iovcnt = iovcnt};
	err = kv_aio_run(bs->bs_aio, &op, 1);
	bucket_release(bs, b);
	if (err)
		return -EIO;
	atomic_fetch_add(&bs->bs_read, ROUND_UP(loc->kl_len));
	scratch = malloc(CHUNK);
	if (!scratch)
		return -ENOMEM;
	for (uint64_t c = 0; !err && c * CHUNK < loc->kl_len; c++) {
		uint64_t n = loc->kl_len - c * CHUNK < CHUNK ? loc->kl_len - c * CHUNK : CHUNK;

		if (hash_iov(iov, iovcnt, c * CHUNK, n, scratch) != csums[c]) {
			atomic_fetch_add(&bs->bs_csum_errors, 1);
			err = -EIO;
		}
	}
	free(scratch);
	return err;
}

/* --- space --- */

void kv_bucket_dead(struct kv_bucket_set *bs, const struct kv_loc *loc)
{
	struct kv_bucket *b;

	pthread_mutex_lock(&bs->bs_lock);
	b = find(bs, loc->kl_bucket);
	if (b) {
		b->kb_dead += kv_loc_size(loc);
		b->kb_dead_ns = mono_ns();
	}
	pthread_mutex_unlock(&bs->bs_lock);
}

void kv_bucket_set_live(struct kv_bucket_set *bs, uint64_t id, uint64_t live)
{
	struct kv_bucket *b;

	pthread_mutex_lock(&bs->bs_lock);
	b = find(bs, id);
	if (b && b->kb_sealed && b->kb_rec_end >= KV_BLOCK + live)
		b->kb_dead = b->kb_rec_end - KV_BLOCK - live;
	pthread_mutex_unlock(&bs->bs_lock);
}

/*
 * Renames the file of b (dropped, drained) a spare and keeps it open, for
 * the next output, when there is room (bs_lock not held). Returns whether
 * it took the file (b's fd is then the spare's, or the file is gone).
 */
static bool spare_keep(struct kv_bucket_set *bs, struct kv_bucket *b, const char *name)
{
	char sname[32];
	bool kept;

	spare_name(b->kb_id, sname, sizeof(sname));
	if (renameat(bs->bs_dirfd, name, bs->bs_dirfd, sname) < 0)
		return false;
	pthread_mutex_lock(&bs->bs_lock);
	kept = bs->bs_recycle && bs->bs_nspare < SPARES_MAX;
	if (kept) {
		bs->bs_spare[bs->bs_nspare++] = (struct spare){b->kb_fd, b->kb_id};
		b->kb_fd = -1;
	}
	pthread_mutex_unlock(&bs->bs_lock);
	if (!kept)
		unlinkat(bs->bs_dirfd, sname, 0);
	return true;
}

/*
 * Takes b out of the table and waits until its reads are done (bs_lock
 * held; released while waiting), then removes its file, or keeps it a
 * spare while a pass recycles, and frees b with bs_lock dropped: unlinking
 * a large file takes a while, and readers of other buckets need bs_lock
 * meanwhile. Returns with bs_lock held.
 */
static void unlink_drained(struct kv_bucket_set *bs, struct kv_bucket *b)
{
	char name[32];
	bool spare;
	uint32_t i;

	for (i = 0; bs->bs_tab[i] != b; i++)
		;
	memmove(&bs->bs_tab[i], &bs->bs_tab[i + 1], (bs->bs_n - i - 1) * sizeof(b));
	bs->bs_n--;
	bs->bs_used -= b->kb_end;
	while (b->kb_readers)
		pthread_cond_wait(&bs->bs_drained, &bs->bs_lock);
	/* Not an output given up, nor a damaged file; at most twice a bucket's size. */
	spare = bs->bs_recycle && bs->bs_nspare < SPARES_MAX && !b->kb_compacting &&
		!b->kb_broken && b->kb_end <= 2 * bs->bs_opts.bo_bucket_size;
	pthread_mutex_unlock(&bs->bs_lock);
	name_of(b->kb_id, name, sizeof(name));
	if (!spare || !spare_keep(bs, b, name))
		unlinkat(bs->bs_dirfd, name, 0);
	bucket_free(b);
	pthread_mutex_lock(&bs->bs_lock);
}

uint32_t kv_bucket_spare_room(struct kv_bucket_set *bs)
{
	uint32_t n;

	pthread_mutex_lock(&bs->bs_lock);
	n = bs->bs_recycle ? SPARES_MAX - bs->bs_nspare : 0;
	pthread_mutex_unlock(&bs->bs_lock);
	return n;
}

void kv_bucket_recycle(struct kv_bucket_set *bs, bool on)
{
	struct spare sp[SPARES_MAX];
	uint32_t n = 0;

	pthread_mutex_lock(&bs->bs_lock);
	bs->bs_recycle = on;
	if (!on) {
		n = bs->bs_nspare;
		memcpy(sp, bs->bs_spare, n * sizeof(*sp));
		bs->bs_nspare = 0;
	}
	pthread_mutex_unlock(&bs->bs_lock);
	for (uint32_t i = 0; i < n; i++) {
		char name[32];

		close(sp[i].sp_fd);
		spare_name(sp[i].sp_id, name, sizeof(name));
		unlinkat(bs->bs_dirfd, name, 0);
	}
}

int kv_bucket_drop(struct kv_bucket_set *bs, uint64_t id)
{
	struct kv_bucket *b;
	int err = -ENOENT;

	pthread_mutex_lock(&bs->bs_append_lock);
	pthread_mutex_lock(&bs->bs_lock);
	b = find(bs, id);
	/*
	 * A bucket with an unreadable header may still hold records: keep it
	 * for salvage, unless it is too short to hold any (a crash while it
	 * was being created).
	 */
	if (b && (b == bs->bs_active || b->kb_pins || b->kb_unsettled || b->kb_compacting ||
		  (b->kb_broken && b->kb_end > KV_BLOCK)))
		err = -EBUSY;
	pthread_mutex_unlock(&bs->bs_append_lock);
	if (b && err != -EBUSY) {
		unlink_drained(bs, b);
		err = 0;
	}
	pthread_mutex_unlock(&bs->bs_lock);
	return err;
}

void kv_bucket_settle(struct kv_bucket_set *bs, const struct kv_loc *loc)
{
	struct kv_bucket *b;

	pthread_mutex_lock(&bs->bs_lock);
	b = find(bs, loc->kl_bucket);
	if (b && b->kb_unsettled)
		b->kb_unsettled--;
	pthread_mutex_unlock(&bs->bs_lock);
}

void kv_bucket_pin(struct kv_bucket_set *bs, uint64_t id, bool pin)
{
	struct kv_bucket *b;

	pthread_mutex_lock(&bs->bs_lock);
	b = find(bs, id);
	if (b && pin)
		b->kb_pins++;
	else if (b && b->kb_pins)
		b->kb_pins--;
	pthread_mutex_unlock(&bs->bs_lock);
}

int kv_bucket_list(struct kv_bucket_set *bs, struct kv_bucket_info **out, uint32_t *n)
{
	struct kv_bucket_info *a;

	pthread_mutex_lock(&bs->bs_lock);
	a = calloc(bs->bs_n ? bs->bs_n : 1, sizeof(*a));
	for (uint32_t i = 0; a && i < bs->bs_n; i++) {
		const struct kv_bucket *b = bs->bs_tab[i];

		a[i] = (struct kv_bucket_info){
		    .bi_id = b->kb_id,
		    .bi_size = b->kb_end,
		    .bi_records = (b->kb_sealed ? b->kb_rec_end : b->kb_end) - KV_BLOCK,
		    .bi_dead = b->kb_dead,
		    .bi_access_ns = b->kb_access_ns,
		    .bi_dead_ns = b->kb_dead_ns,
		    .bi_count = b->kb_count,
		    .bi_busy = !b->kb_sealed || b->kb_broken || b->kb_pins || b->kb_unsettled ||
			       b->kb_compacting || b == bs->bs_active,
		    .bi_active = b == bs->bs_active,
		};
	}
	*n = a ? bs->bs_n : 0;
	pthread_mutex_unlock(&bs->bs_lock);
	*out = a;
	return a ? 0 : -ENOMEM;
}

int kv_bucket_seal_active(struct kv_bucket_set *bs)
{
	int err = 0;

	pthread_mutex_lock(&bs->bs_append_lock);
	if (bs->bs_active && bs->bs_active->kb_count) {
		err = bucket_seal(bs, bs->bs_active);
		pthread_mutex_lock(&bs->bs_lock);
		if (!err)
			bs->bs_active = NULL;
		pthread_mutex_unlock(&bs->bs_lock);
	}
	pthread_mutex_unlock(&bs->bs_append_lock);
	return err;
}

void kv_bucket_min_id(struct kv_bucket_set *bs, uint64_t next)
{
	pthread_mutex_lock(&bs->bs_lock);
	if (bs->bs_next_id < next)
		bs->bs_next_id = next;
	pthread_mutex_unlock(&bs->bs_lock);
}

uint64_t kv_bucket_next_id(struct kv_bucket_set *bs)
{
	uint64_t id;

	pthread_mutex_lock(&bs->bs_lock);
	id = bs->bs_next_id;
	pthread_mutex_unlock(&bs->bs_lock);
	return id;
}

void kv_bucket_stats(struct kv_bucket_set *bs, struct kv_bucket_stats *st)
{
	pthread_mutex_lock(&bs->bs_lock);
	st->bst_buckets = bs->bs_n;
	st->bst_used = bs->bs_used;
	st->bst_reserved = bs->bs_reserved;
	st->bst_dead = 0;
	for (uint32_t i = 0; i < bs->bs_n; i++)
		st->bst_dead += bs->bs_tab[i]->kb_dead;
	pthread_mutex_unlock(&bs->bs_lock);
	st->bst_cap = bs->bs_opts.bo_cap;
	st->bst_written = atomic_load(&bs->bs_written);
	st->bst_read = atomic_load(&bs->bs_read);
	st->bst_csum_errors = atomic_load(&bs->bs_csum_errors);
	st->bst_truncated = atomic_load(&bs->bs_truncated);
}

void kv_bucket_each(struct kv_bucket_set *bs, void (*fn)(uint64_t id, void *arg), void *arg)
{
	uint64_t *ids;
	uint32_t n;

	pthread_mutex_lock(&bs->bs_lock);
	n = bs->bs_n;
	ids = malloc((n ? n : 1) * sizeof(*ids));
	for (uint32_t i = 0; ids && i < n; i++)
		ids[i] = bs->bs_tab[i]->kb_id;
	pthread_mutex_unlock(&bs->bs_lock);
	for (uint32_t i = 0; ids && i < n; i++)
		fn(ids[i], arg);
	free(ids);
}

int kv_bucket_scan(struct kv_bucket_set *bs, bool check_values,
		   int (*fn)(const struct kv_bucket_rec *r, void *arg), void *arg, uint64_t *bad)
{
	int ret = 0;

	*bad = 0;
	for (uint32_t i = 0; !ret; i++) {
		struct kv_bucket *b;
		uint64_t end;

		pthread_mutex_lock(&bs->bs_lock);
		b = i < bs->bs_n ? bs->bs_tab[i] : NULL;
		pthread_mutex_unlock(&bs->bs_lock);
		if (!b)
			break;
		if (b->kb_broken || !b->kb_sealed) {
			*bad += b->kb_broken;
			continue;
		}
		ret = walk(bs, b, b->kb_rec_end, check_values, false, fn, arg, &end, bad);
		/* A bad head hides the rest of the bucket's records. */
		if (!ret && end != b->kb_rec_end)
			(*bad)++;
	}
	return ret;
}

/* --- compaction: copying live records into a new bucket --- */

/*
 * The output is written through a staging buffer: each record is read
 * whole (head and value, one read), checked in the buffer, and the buffer
 * goes to the output in one write when full — a few large sequential I/Os
 * instead of four small ones per record. A record larger than the buffer
 * is copied in pieces, straight through.
 *
 * There are two such buffers. Unless the compaction yields (below), a
 * full one goes to the output in the background (libaio) while the
 * records of the next are read into the other: a disk that reads and
 * writes at once (most do, virtual ones too) copies at the pace of the
 * slower of the two instead of their sum. One write is in flight at most;
 * the next flush, the commit and the abort wait for it.
 */
#define STAGE (8u << 20)
/* A stage's buffer: STAGE bytes and the zeroed block that follows them in a recycled output. */
#define HALF (STAGE + KV_BLOCK)

/*
 * A compaction that yields to foreground I/O, while a foreground read or
 * append began in the last FG_QUIET_NS, has at most GC_IO bytes in flight
 * (one I/O of at most GC_IO, a record larger than that read in pieces):
 * a read that arrives meanwhile waits behind one small transfer, not
 * behind megabytes already queued in the device. Disks that serve one
 * request at a time (virtual disks often do) make that wait the whole
 * transfer: 64 KiB is about what a 4 KiB read costs itself, so a read's
 * latency at most doubles while one is in the way, where a 256 KiB
 * transfer tripled it. Otherwise (nothing else uses the disk, or writers
 * wait for the pass) it moves STAGE bytes at a time.
 */
#define GC_IO	    (64u << 10)
#define FG_QUIET_NS (20ull * 1000 * 1000)

struct kv_compact {
	struct kv_bucket_set *kc_bs;
	struct kv_bucket *kc_b; /* the output: in the table, kb_compacting, never bs_active */
	char *kc_mem;		/* 2 * HALF bytes, 4 KiB aligned: the two stages */
	char *kc_buf;		/* the stage being filled: a half of kc_mem */
	uint64_t kc_fill;	/* bytes staged, to go at kb_end - kc_fill */
	bool kc_yield;		/* small I/Os while foreground I/O goes on (gc_io) */
	/* the other half, on its way to the output until stage_wait */
	struct kv_aio_batch *kc_wr;
	struct kv_aio_op kc_wr_op;
	struct iovec kc_wr_iov;
};

/* Waits for the stage in flight, if any. Returns 0 or -EIO. */
static int stage_wait(struct kv_compact *c)
{
	int err = 0;

	if (c->kc_wr)
		err = kv_aio_wait(c->kc_bs->bs_aio, c->kc_wr) ? -EIO : 0;
	c->kc_wr = NULL;
	return err;
}

/* Frees c (no stage in flight), keeping its staging buffers for the next compaction. */
static void compact_free(struct kv_compact *c)
{
	free(atomic_exchange(&c->kc_bs->bs_stage, c->kc_mem));
	free(c);
}

/*
 * Gives an output at least its size ahead, sparse (kv_compact_begin says
 * why); a spare's larger file stays as it is. A failure costs nothing else.
 */
static void presize(int fd, uint64_t size)
{
	struct stat st;

	if (fstat(fd, &st) == 0 && (uint64_t)st.st_size >= size)
		return;
	if (ftruncate(fd, (off_t)size) < 0)
		return;
}

int kv_compact_begin(struct kv_bucket_set *bs, bool yield, struct kv_compact **out)
{
	struct kv_compact *c = calloc(1, sizeof(*c));
	struct kv_bucket *b = NULL;
	int err = -ENOMEM;

	if (!c)
		return -ENOMEM;
	c->kc_bs = bs;
	c->kc_yield = yield;
	c->kc_mem = atomic_exchange(&bs->bs_stage, NULL);
	if (!c->kc_mem)
		c->kc_mem = aligned_buf(2 * (size_t)HALF, false);
	if (!c->kc_mem)
		goto out_free;
	c->kc_buf = c->kc_mem;
	err = recycle_create(bs, &b);
	if (err)
		err = bucket_create(bs, 0, &b);
	/*
	 * The file at its full size at once, sparse: ext4 runs a direct write
	 * that extends a file synchronously, even through libaio, so a stage
	 * written in the background must land below the end (bucket_seal cuts
	 * the file to its records again; a crash leaves a bucket with no
	 * records, which recovery removes). Should it fail, the writes still
	 * go, one at a time: no error.
	 */
	if (!err)
		presize(b->kb_fd, bs->bs_opts.bo_bucket_size);
	pthread_mutex_lock(&bs->bs_lock);
	if (!err) {
		b->kb_compacting = true;
		b->kb_access_ns = mono_ns();
		err = insert(bs, b);
		if (err)
			bucket_free(b);
		else
			bs->bs_used += KV_BLOCK;
	}
	pthread_mutex_unlock(&bs->bs_lock);
	if (err)
		goto out_free;
	c->kc_b = b;
	*out = c;
	return 0;

out_free:
	compact_free(c);
	return err;
}

bool kv_bucket_fg_active(struct kv_bucket_set *bs)
{
	return mono_ns() - atomic_load_explicit(&bs->bs_fg_ns, memory_order_relaxed) < FG_QUIET_NS;
}

/* The most bytes compaction may have in flight now (see GC_IO). */
static uint64_t gc_io(const struct kv_compact *c)
{
	return c->kc_yield && kv_bucket_fg_active(c->kc_bs) ? GC_IO : STAGE;
}

/*
 * After a compaction's I/O of at most io bytes that began at t0: when it
 * was a yielding one (gc_io() was below STAGE) and foreground I/O goes on,
 * a pause twice as long as the I/O took. The disk and a CPU are then the
 * foreground's at least two thirds of the time, whatever the compaction
 * would take of them (its checksums and copies need a CPU too, and
 * two-core machines have none to spare). Measured (bench.sh gc), the pause
 * took the p99 of 4 KiB reads during a pass from 2-4x idle to about 1.5x;
 * once as long as the I/O left it nearer 1.6x.
 */
static void gc_pause(const struct kv_compact *c, uint64_t io, uint64_t t0)
{
	uint64_t ns;
	struct timespec ts;

	if (io >= STAGE || !kv_bucket_fg_active(c->kc_bs))
		return;
	ns = 2 * (mono_ns() - t0);
	ts = (struct timespec){.tv_sec = (time_t)(ns / 1000000000u),
			       .tv_nsec = (long)(ns % 1000000000u)};
	nanosleep(&ts, NULL);
}

/*
 * kv_prw_all() (synchronous pread/pwrite: the lowest latency for one I/O;
 * batches go through libaio) in pieces of at most gc_io() bytes, one at a
 * time.
 */
static int gc_rw(const struct kv_compact *c, int fd, bool write, void *buf, uint64_t len,
		 uint64_t off)
{
	uint64_t io;
	int err = 0;

	for (uint64_t done = 0; !err && done < len; done += io) {
		uint64_t t0 = mono_ns();

		io = gc_io(c);
		err = kv_prw_all(fd, write, (char *)buf + done, len - done < io ? len - done : io,
				 off + done);
		gc_pause(c, io, t0);
	}
	return err;
}

/*
 * Sends what is staged to the output: in the background, the stage
 * switching halves, unless `sync` or the compaction yields (gc_io), then
 * at once in gc_io() pieces. Either way after the stage in flight, which a
 * sync flush leaves none of. Returns 0 or -EIO (this stage's or the one
 * in flight's).
 */
static int stage_flush(struct kv_compact *c, bool sync)
{
	uint64_t at = c->kc_b->kb_end - c->kc_fill, len = c->kc_fill;
	int err = stage_wait(c);

	if (err || !c->kc_fill) {
		c->kc_fill = 0;
		return err;
	}
	if (c->kc_b->kb_recycled) { /* after the last record, no old one (recycle_create) */
		memset(c->kc_buf + len, 0, KV_BLOCK);
		len += KV_BLOCK;
	}
	if (sync || gc_io(c) < STAGE) {
		err = gc_rw(c, c->kc_b->kb_fd, true, c->kc_buf, len, at) ? -EIO : 0;
	} else {
		c->kc_wr_iov = (struct iovec){.iov_base = c->kc_buf, .iov_len = len};
		c->kc_wr_op = (struct kv_aio_op){.kao_fd = c->kc_b->kb_fd,
						 .kao_write = true,
						 .kao_off = at,
						 .kao_iov = &c->kc_wr_iov,
						 .kao_iovcnt = 1};
		err = kv_aio_start(c->kc_bs->bs_aio, &c->kc_wr_op, 1, &c->kc_wr) ? -EIO : 0;
		if (err)
			c->kc_wr = NULL;
		c->kc_buf = c->kc_buf == c->kc_mem ? c->kc_mem + HALF : c->kc_mem;
	}
	c->kc_fill = 0;
	return err;
}

/* Checks a whole record (head and value) in buf against `from`. Returns 0 or -EBADMSG. */
static int record_check(struct kv_bucket_set *bs, const char *buf, const struct kv_loc *from)
{
	struct kv_rec_head h;
	uint64_t *csums;
	int err = head_check(buf, from->kl_head_len);

	if (!err) {
		head_get(buf, &h);
		err = head_is(&h, from) ? 0 : -EIO;
	}
	if (err) {
		atomic_fetch_add(&bs->bs_csum_errors, 1);
		return -EBADMSG;
	}
	/* The checksums follow the key in the head: copied out, 8-byte aligned. */
	csums = head_csums(buf);
	if (!csums)
		return -ENOMEM;
	err = verify(bs, buf + from->kl_head_len, from->kl_len, 0, csums) ? -EBADMSG : 0;
	free(csums);
	return err;
}

/*
 * Copies a record larger than the staging buffer, piece by piece, checked
 * on the way. Sets *headp to its head (malloc'ed) on success.
 */
static int copy_large(struct kv_compact *c, struct kv_bucket *src, const struct kv_loc *from,
		      void **headp)
{
	struct kv_bucket_set *bs = c->kc_bs;
	struct kv_bucket *b = c->kc_b;
	uint64_t at = b->kb_end + from->kl_head_len, *csums;
	struct kv_rec_head h;
	void *head;
	int err;

	err = read_head(bs, src, NULL, from->kl_off, &head);
	if (err) {
		atomic_fetch_add(&bs->bs_csum_errors, 1);
		return err == -ENOMEM ? err : -EBADMSG;
	}
	head_get(head, &h);
	if (!head_is(&h, from)) {
		atomic_fetch_add(&bs->bs_csum_errors, 1);
		free(head);
		return -EBADMSG;
	}
	csums = head_csums(head);
	if (!csums) {
		free(head);
		return -ENOMEM;
	}
	/* Errors writing the output are -EIO; the record's own (unreadable, damaged) -EBADMSG. */
	err = gc_rw(c, b->kb_fd, true, head, from->kl_head_len, b->kb_end) ? -EIO : 0;
	for (uint64_t off = 0; !err && off < from->kl_len; off += STAGE) {
		uint64_t n = from->kl_len - off < STAGE ? from->kl_len - off : STAGE;

		if (gc_rw(c, src->kb_fd, false, c->kc_buf, ROUND_UP(n),
			  from->kl_off + from->kl_head_len + off) ||
		    verify(bs, c->kc_buf, n, off / CHUNK, csums))
			err = -EBADMSG;
		else if (gc_rw(c, b->kb_fd, true, c->kc_buf, ROUND_UP(n), at + off))
			err = -EIO;
	}
	free(csums);
	if (err)
		free(head);
	else
		*headp = head;
	return err;
}

/*
 * Takes a checked record at `rec` (its head at least) into the output's
 * index and counts; `staged`: its bytes wait in the stage to be written
 * (bs_lock not held).
 */
static int take(struct kv_compact *c, const char *rec, const struct kv_loc *from, struct kv_loc *to,
		bool staged)
{
	struct kv_bucket_set *bs = c->kc_bs;
	struct kv_bucket *b = c->kc_b;
	uint64_t size = kv_loc_size(from);
	struct kv_rec_head h;
	size_t slen = head_get(rec, &h);
	int err;

	*to = *from;
	to->kl_bucket = b->kb_id;
	to->kl_off = b->kb_end;
	err = idx_add(b, to, h.rh_flags, rec + slen, h.rh_key_len);
	if (err)
		return err;
	if (staged)
		c->kc_fill += size;
	pthread_mutex_lock(&bs->bs_lock);
	b->kb_end += size;
	b->kb_count++;
	b->kb_idx_bytes += idx_bytes(h.rh_key_len);
	bs->bs_used += size;
	pthread_mutex_unlock(&bs->bs_lock);
	return 0;
}

/*
 * Copies one record larger than the stage (kv_compact_copy_many copies the
 * others): 0, -EBADMSG, -ENOSPC (output full) or -errno.
 */
static int copy_one(struct kv_compact *c, const struct kv_loc *from, struct kv_loc *to)
{
	struct kv_bucket_set *bs = c->kc_bs;
	struct kv_bucket *b = c->kc_b, *src;
	uint64_t size = kv_loc_size(from);
	void *head = NULL;
	int err;

	if (b->kb_count && (b->kb_end + size > bs->bs_opts.bo_bucket_size ||
			    b->kb_count >= bs->bs_opts.bo_bucket_keys))
		return -ENOSPC;
	src = bucket_get(bs, from, 0);
	if (!src)
		return -ENOENT;
	/*
	 * The stage written first, and landed (a sync flush): its write may
	 * end with a zeroed block (a recycled output) where the record's head
	 * goes.
	 */
	err = stage_flush(c, true);
	if (!err)
		err = copy_large(c, src, from, &head);
	bucket_release(bs, src);
	if (!err && b->kb_recycled) { /* after the record, no old one (recycle_create) */
		memset(c->kc_buf, 0, KV_BLOCK); /* copy_large is done with the stage */
		if (gc_rw(c, b->kb_fd, true, c->kc_buf, KV_BLOCK, b->kb_end + size))
			err = -EIO;
	}
	if (!err)
		err = take(c, head, from, to, false);
	free(head);
	return err;
}

#define MANY 32 /* records read at once (gc_io() bytes at most, unless one is larger) */

int kv_compact_copy_many(struct kv_compact *c, const struct kv_loc *from, struct kv_loc *to,
			 int *errs, unsigned n)
{
	struct kv_bucket_set *bs = c->kc_bs;
	const struct kv_bucket_opts *o = &bs->bs_opts;
	struct kv_bucket *b = c->kc_b, *src[MANY];
	struct kv_aio_op ops[MANY];
	struct iovec iov[MANY];
	uint64_t end = b->kb_end, count = b->kb_count, fill = c->kc_fill, batch = 0, io = gc_io(c);
	unsigned k = 0;
	int err = 0;

	if (n && kv_loc_size(&from[0]) > STAGE) {
		err = copy_one(c, &from[0], &to[0]);
		errs[0] = err == -EBADMSG ? err : 0;
		return err == -ENOSPC ? 0 : err && err != -EBADMSG ? err : 1;
	}
	if (n && fill + kv_loc_size(&from[0]) > STAGE) {
		err = stage_flush(c, false);
		if (err)
			return err;
		fill = 0;
	}
	/* As many as fit the output and the staging buffer, read together. */
	while (k < n && k < MANY) {
		uint64_t size = kv_loc_size(&from[k]);

		if (size > STAGE || fill + size > STAGE || (k && batch + size > io) ||
		    (count && (end + size > o->bo_bucket_size || count >= o->bo_bucket_keys)))
			break;
		src[k] = bucket_get(bs, &from[k], 0);
		if (!src[k]) {
			err = -ENOENT;
			break;
		}
		iov[k] = (struct iovec){.iov_base = c->kc_buf + fill, .iov_len = size};
		ops[k] = (struct kv_aio_op){.kao_fd = src[k]->kb_fd,
					    .kao_off = from[k].kl_off,
					    .kao_iov = &iov[k],
					    .kao_iovcnt = 1};
		fill += size;
		batch += size;
		end += size;
		count++;
		k++;
	}
	if (k == 1 && !err && iov[0].iov_len > io) {
		/* Yielding: a record larger than an I/O is read in pieces, one at a time. */
		ops[0].kao_res = gc_rw(c, ops[0].kao_fd, false, iov[0].iov_base, iov[0].iov_len,
				       ops[0].kao_off)
				     ? -EIO
				     : (ssize_t)iov[0].iov_len;
	} else if (k && !err) {
		uint64_t t0 = mono_ns();

		err = kv_aio_run(bs->bs_aio, ops, k) == -ENOMEM ? -ENOMEM : 0;
		gc_pause(c, io, t0);
	}
	for (unsigned i = 0; i < k; i++)
		bucket_release(bs, src[i]);
	if (err)
		return err;
	/* Check each; the good ones move down over the gaps the damaged leave. */
	for (unsigned i = 0; i < k; i++) {
		char *rec = iov[i].iov_base, *at = c->kc_buf + c->kc_fill;

		errs[i] = ops[i].kao_res == (ssize_t)iov[i].iov_len
			      ? record_check(bs, rec, &from[i])
			      : -EBADMSG;
		if (ops[i].kao_res != (ssize_t)iov[i].iov_len)
			atomic_fetch_add(&bs->bs_csum_errors, 1);
		if (errs[i] == -ENOMEM)
			return -ENOMEM;
		if (errs[i])
			continue;
		if (at != rec)
			memmove(at, rec, iov[i].iov_len);
		err = take(c, at, &from[i], &to[i], true);
		if (err)
			return err;
	}
	return (int)k;
}

uint64_t kv_compact_id(const struct kv_compact *c)
{
	return c->kc_b->kb_id;
}

bool kv_compact_recycled(const struct kv_compact *c)
{
	return c->kc_b->kb_recycled;
}

uint64_t kv_compact_records(const struct kv_compact *c)
{
	return c->kc_b->kb_count;
}

int kv_compact_commit(struct kv_compact *c)
{
	struct kv_bucket_set *bs = c->kc_bs;
	int err = stage_flush(c, true);

	if (!err)
		err = bucket_seal(bs, c->kc_b);
	if (!err && fsync(bs->bs_dirfd) < 0) /* its name: bucket_create did not sync it */
		err = -errno;
	if (err)
		return err;
	pthread_mutex_lock(&bs->bs_lock);
	c->kc_b->kb_compacting = false;
	pthread_mutex_unlock(&bs->bs_lock);
	compact_free(c);
	return 0;
}

void kv_compact_abort(struct kv_compact *c)
{
	struct kv_bucket_set *bs = c->kc_bs;

	stage_wait(c); /* its buffer and the output's fd are the write's until it ends */
	pthread_mutex_lock(&bs->bs_lock);
	unlink_drained(bs, c->kc_b);
	pthread_mutex_unlock(&bs->bs_lock);
	compact_free(c);
}
