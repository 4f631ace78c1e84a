/* SPDX-License-Identifier: MIT */
/*
 * ssd/bucket_int.h — what the bucket files (ssd/bucket*.c) share: struct
 * kv_bucket and struct kv_bucket_set with their locks, small helpers, and
 * each file's functions that the files above it call (prefixed kv_bkt_).
 * Not for use outside ssd/: the contract is ssd/bucket.h.
 *
 * The files, each calling only those below it (scripts/check_cycles.py):
 *
 *   bucket.c                          open, close
 *   bucket_append.c  bucket_read.c  bucket_compact.c  bucket_scan.c
 *   bucket_recycle.c                  drop, spares
 *   bucket_set.c  bucket_seal.c  bucket_io.c
 *   bucket_format.c                   heads, header, trailer, checksums
 *
 * Lock order: bs_append_lock > bs_lock; bs_drained is waited on with
 * bs_lock. Neither is held while calling out of ssd/.
 */
#ifndef KVFS_SSD_BUCKET_INT_H
#define KVFS_SSD_BUCKET_INT_H

#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ssd/bucket.h"
#include "ssd/format.h"

#define CHUNK	    (1ull << KV_CHUNK_SHIFT)
#define ROUND_UP(x) (((x) + KV_BLOCK - 1) / KV_BLOCK * KV_BLOCK)

/*
 * Spares kept at most: an output takes one, and a pass drops about two
 * victims per output at a dead ratio of 0.5, one per output at 0. Each
 * is disk space outside the quota's count until the pass ends.
 */
#define SPARES_MAX 2

/* One record of the active bucket, kept to write its index block at seal. */
struct kv_bkt_idx_rec {
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
	bool kb_broken;	       /* unreadable header: kept for fsck, never read */
	bool kb_compacting;    /* the output of a compaction being written (struct kv_compact) */
	bool kb_recycled;      /* immutable: its file was a dropped bucket's (a spare) */
	uint32_t kb_readers;   /* reads in flight: a dropped bucket is freed when they are done */
	uint32_t kb_pins;      /* deleted keys still open with their record here: never dropped */
	uint32_t kb_unsettled; /* appended records whose loc no key holds yet (kv_bucket_settle) */
	uint64_t kb_access_ns; /* last read or append (CLOCK_MONOTONIC): how cold it is */
	uint64_t kb_dead_ns;   /* last kv_bucket_dead (CLOCK_MONOTONIC): still dying? */
	struct kv_bkt_idx_rec *kb_idx; /* active bucket only */
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
	_Atomic uint64_t bs_fg_ns; /* a foreground read or append last began (kv_bkt_mono_ns) */
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
	struct kv_bkt_spare {
		int sp_fd;
		uint64_t sp_id;
	} bs_spare[SPARES_MAX];
	uint32_t bs_nspare;
	bool bs_recycle;
};

static inline uint64_t kv_bkt_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void kv_bkt_name(uint64_t id, char *buf, size_t len)
{
	snprintf(buf, len, "%016" PRIx64 ".kvb", id);
}

/* A spare's name: not a bucket's, so a start removes it (kv_bkt_load_all). */
static inline void kv_bkt_spare_name(uint64_t id, char *buf, size_t len)
{
	snprintf(buf, len, "%016" PRIx64 ".kvs", id);
}

/* A 4 KiB-aligned buffer; zeroed unless it is only going to be read into. */
static inline void *kv_bkt_aligned_buf(size_t len, bool zero)
{
	void *p;

	if (posix_memalign(&p, KV_BLOCK, len ? len : KV_BLOCK))
		return NULL;
	if (zero)
		memset(p, 0, len);
	return p;
}

static inline void *kv_bkt_aligned(size_t len)
{
	return kv_bkt_aligned_buf(len, true);
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

struct kv_bkt_rwin {
	char *rw_buf;	   /* RWIN_SIZE bytes, aligned; NULL: read directly */
	uint64_t rw_off;   /* the file offset of rw_buf[0] */
	uint64_t rw_len;   /* bytes of rw_buf read */
	uint64_t rw_limit; /* the window reads below this offset only (a block multiple) */
};

/* --- bucket_format.c: the format, buffers only --- */

uint64_t kv_bkt_hash_iov(const struct iovec *iov, int cnt, uint64_t skip, uint64_t len,
			 char *scratch);
size_t kv_bkt_head_get(const void *buf, struct kv_rec_head *h);
bool kv_bkt_rec_shape_ok(uint16_t flags, uint32_t index, uint64_t value_len);
int kv_bkt_head_check(const void *buf, uint64_t buf_len);
bool kv_bkt_head_is(const struct kv_rec_head *h, const struct kv_loc *loc);
uint64_t *kv_bkt_head_csums(const void *head);
uint64_t kv_bkt_idx_bytes(uint32_t key_len);
bool kv_bkt_header_ok(const struct kv_bucket_hdr *h);
void kv_bkt_header_fill(struct kv_bucket_hdr *h, uint64_t id);
int kv_bkt_head_build(struct kv_bucket_put *p, struct iovec *head);
uint64_t kv_bkt_index_len(const struct kv_bkt_idx_rec *idx, uint64_t n, uint16_t version);
void kv_bkt_index_encode(char *buf, const struct kv_bkt_idx_rec *idx, uint64_t n, uint16_t version);
void kv_bkt_trailer_fill(struct kv_bucket_trailer *t, uint64_t id, uint64_t index_off,
			 const void *index, uint64_t index_len, uint64_t count);
bool kv_bkt_trailer_ok(const struct kv_bucket_trailer *t, uint64_t id, uint64_t size);

/* --- bucket_io.c: checked reads of one bucket file --- */

int kv_bkt_read_head(struct kv_bucket_set *bs, struct kv_bucket *b, struct kv_bkt_rwin *w,
		     uint64_t off, void **out);
int kv_bkt_verify(struct kv_bucket_set *bs, const char *buf, uint64_t len, uint64_t c0,
		  const uint64_t *csums);
int kv_bkt_read_value(struct kv_bucket_set *bs, struct kv_bucket *b, struct kv_bkt_rwin *w,
		      const struct kv_loc *loc, const uint64_t *csums, uint64_t off, uint64_t len,
		      void **buf, char **data, uint64_t *n);

/* --- bucket_set.c: the table (bs_lock held for find and insert), creating, holding --- */

struct kv_bucket *kv_bkt_find(struct kv_bucket_set *bs, uint64_t id);
int kv_bkt_insert(struct kv_bucket_set *bs, struct kv_bucket *b);
void kv_bkt_free(struct kv_bucket *b);
int kv_bkt_create(struct kv_bucket_set *bs, uint64_t prealloc, struct kv_bucket **out);
struct kv_bucket *kv_bkt_get(struct kv_bucket_set *bs, const struct kv_loc *loc, uint64_t now);
void kv_bkt_release(struct kv_bucket_set *bs, struct kv_bucket *b);

/* --- bucket_seal.c: the index kept for the seal, the seal --- */

int kv_bkt_idx_add(struct kv_bucket *b, const struct kv_loc *loc, uint16_t flags, const char *key,
		   uint32_t klen);
int kv_bkt_seal(struct kv_bucket_set *bs, struct kv_bucket *b);

/* --- bucket_recycle.c: removal and spares --- */

int kv_bkt_recycle_create(struct kv_bucket_set *bs, struct kv_bucket **out);
void kv_bkt_unlink_drained(struct kv_bucket_set *bs, struct kv_bucket *b);

/* --- bucket_scan.c: loading the set --- */

int kv_bkt_load_all(struct kv_bucket_set *bs);

#endif
