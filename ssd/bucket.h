/* SPDX-License-Identifier: MIT */
/*
 * ssd/bucket.h — bucket files: packed, checksummed values on the SSD.
 *
 * A bucket set is the directory DATA_DIR/buckets. Values are appended as
 * records (ssd/format.h) to the one *active* bucket, with libaio and
 * O_DIRECT straight from the caller's page-aligned buffers, and made
 * durable with fdatasync before kv_bucket_append returns. The active bucket
 * is sealed (index block + trailer, truncated to size) when it reaches
 * bo_bucket_size bytes or bo_bucket_keys records; a value larger than a
 * bucket gets a bucket of its own. Writing never waits for more values:
 * the caller decides when to append (the flush delay lives in core/).
 *
 * Space: every record's bytes count against bo_cap (the quota) from the
 * moment it is appended until its bucket is removed; kv_bucket_append fails
 * a put with -ENOSPC that would cross it, touching nothing stored. Quota
 * reserved for unwritten extents (kv_bucket_reserve) is kept for the puts
 * that fill them. Records that die (deleted, overwritten) are counted as
 * dead bytes per bucket for compaction; kv_bucket_drop removes a bucket
 * file (the caller makes sure no live entry points into it).
 *
 * Reads come from the record's bytes with O_DIRECT, in whole 64 KiB
 * checksum chunks, and every chunk read is checked against the checksums in
 * the record head (kv_bucket_load_csums): a mismatch is -EIO, never data.
 *
 * Thread-safety: all functions may be called from any thread. bs_lock (a
 * mutex) guards the bucket table, the active bucket and the counters;
 * appends are serialised by bs_append_lock, taken before bs_lock and held
 * across the I/O so one appender at a time fills the active bucket.
 * Reads take bs_lock to find the bucket and count themselves in flight,
 * and again to count themselves out; the I/O runs unlocked.
 *
 * The implementation is split by job (ssd/bucket*.c, calls going down);
 * ssd/bucket_int.h draws the files' layers and what they share.
 */
#ifndef KVFS_SSD_BUCKET_H
#define KVFS_SSD_BUCKET_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "ssd/aio.h"

/*
 * Where a record lives on the SSD: one extent of one version of a key (or
 * a whole value, or a manifest: ssd/format.h, KV_REC_*).
 */
struct kv_loc {
	uint64_t kl_bucket;   /* 0: nowhere (bucket ids start at 1) */
	uint64_t kl_off;      /* the record's offset in its bucket file */
	uint64_t kl_len;      /* the record's value bytes */
	uint64_t kl_seq;      /* its sequence number (an extent's birth sequence number) */
	uint32_t kl_head_len; /* record head bytes: the value starts at kl_off + kl_head_len */
	uint32_t kl_index;    /* its extent index (rh_ext_index; KV_MANIFEST_INDEX for a manifest) */
};

/* True when a and b name the same record (place, sequence number, extent index). */
static inline bool kv_loc_eq(const struct kv_loc *a, const struct kv_loc *b)
{
	return a->kl_bucket == b->kl_bucket && a->kl_off == b->kl_off && a->kl_seq == b->kl_seq &&
	       a->kl_index == b->kl_index;
}

struct kv_bucket_opts {
	uint64_t bo_bucket_size; /* seal at this many bytes */
	uint32_t bo_bucket_keys; /* or at this many records */
	uint64_t bo_cap;	 /* quota: bytes all buckets may hold */
};

/* One value to append. */
struct kv_bucket_put {
	const char *bp_key; /* the key (path), for salvage */
	uint32_t bp_key_len;
	uint64_t bp_seq;
	uint32_t bp_index;	    /* the extent index (KV_MANIFEST_INDEX for a manifest) */
	uint16_t bp_flags;	    /* KV_REC_WHOLE, KV_REC_EXTENT or KV_REC_MANIFEST */
	uint64_t bp_len;	    /* value bytes */
	const struct iovec *bp_iov; /* page-aligned buffers holding at least round_up(len, 4K) */
	int bp_iovcnt;
	uint64_t *bp_csums;   /* NULL, or room for the record's chunk checksums (one per
				 1 << KV_CHUNK_SHIFT bytes of bp_len): filled when bp_err == 0 */
	uint64_t bp_fill;     /* in: quota reserved for this record (kv_bucket_reserve) that it
				 may take; out: 0 once placed (the reservation is used up),
				 unchanged when not placed (the caller still holds it) */
	bool bp_over;	      /* in: place it past the quota when bp_fill covers it (the last
				 resort of a promised record whose room compaction cannot give:
				 an overwrite counting on the version it replaces) */
	struct kv_loc bp_loc; /* out, when bp_err == 0 */
	int bp_err;	      /* out: 0, -ENOSPC (quota), or an I/O error */
};

/* A record found by a scan (kv_bucket_scan). */
struct kv_bucket_rec {
	struct kv_loc br_loc;
	const char *br_key; /* valid during the callback only */
	uint32_t br_key_len;
	uint16_t br_flags;   /* KV_REC_*: version 1 records read as KV_REC_WHOLE */
	const void *br_value; /* a KV_REC_MANIFEST record's value (br_loc.kl_len bytes, checked),
				 valid during the callback only; NULL for other records */
};

struct kv_bucket_stats {
	uint64_t bst_buckets; /* bucket files */
	uint64_t bst_used;    /* bytes of all bucket files (what counts against the cap) */
	uint64_t bst_dead;    /* bytes of dead records */
	uint64_t bst_cap;
	uint64_t bst_reserved;	  /* quota promised to unwritten extents */
	uint64_t bst_written;	  /* bytes written since start */
	uint64_t bst_read;	  /* bytes read since start */
	uint64_t bst_csum_errors; /* chunks that failed their checksum */
	uint64_t bst_truncated;	  /* buckets left open (by a crash) cut at their last good record */
};

struct kv_bucket_set;

/*
 * Opens DATA_DIR/buckets (creating it), loads every bucket file: a sealed
 * one by its trailer, an open one (left by a crash) by scanning its
 * records, cutting a torn tail at the first record whose head or value
 * fails its checksum and then sealing it. Files that are not buckets are
 * left alone. Appends go to a new bucket. Returns 0 or -errno.
 */
int kv_bucket_open(struct kv_bucket_set **out, int datadir_fd, const struct kv_bucket_opts *o,
		   struct kv_aio *aio);

/* Seals the active bucket and closes every file. */
void kv_bucket_close(struct kv_bucket_set *bs);

/*
 * Appends puts[0..n) as records, batched (several I/Os in flight), and
 * makes them durable. Sets each put's bp_err and bp_loc: the place of its
 * record, zero when none was placed. Every placed record, written or not,
 * must be settled (kv_bucket_settle) once its key holds bp_loc or never
 * will. Returns 0 when every put succeeded, else the first put's error.
 */
int kv_bucket_append(struct kv_bucket_set *bs, struct kv_bucket_put *puts, unsigned n);

/*
 * Says that the record at loc (a put kv_bucket_append gave a loc, whatever
 * its bp_err) is now held by its key, or never will be. Until every record
 * of a bucket is settled the bucket is busy: never a compaction victim,
 * never dropped, since a key may be about to point into it that a
 * compaction walking the keys would not see.
 */
void kv_bucket_settle(struct kv_bucket_set *bs, const struct kv_loc *loc);

/*
 * Reads and checks a record's head: magic, checksum, and that it matches
 * loc (sequence number, lengths, extent index). Returns its chunk checksums, malloc'ed
 * (*nchunks entries, free with free()). -EIO when damaged, -ENOENT when
 * loc's bucket does not exist.
 */
int kv_bucket_load_csums(struct kv_bucket_set *bs, const struct kv_loc *loc, uint64_t **csums,
			 uint32_t *nchunks);

/*
 * Reads value bytes [off, off + len) ∩ [0, kl_len), verified. The bytes
 * land in a 4 KiB-aligned buffer the call provides (*buf, give it back
 * with kv_bucket_read_free on the same thread); *data points at value byte
 * `off` inside it and *n is how many bytes there are (0 at or past the
 * end). Returns 0, -EIO on a checksum mismatch or I/O error, -ENOENT for a
 * missing bucket.
 */
int kv_bucket_read(struct kv_bucket_set *bs, const struct kv_loc *loc, const uint64_t *csums,
		   uint64_t off, uint64_t len, void **buf, char **data, uint64_t *n);

/* Gives back a buffer from kv_bucket_read (NULL is fine). */
void kv_bucket_read_free(void *buf);

/*
 * A read in the background (read-ahead, core/readahead.c): value bytes
 * [off, off + len) of a record, widened to whole checksum chunks, land in
 * a caller's buffer while the caller goes on. The read holds its own
 * descriptor of the bucket file (a dup), not the bucket: compaction may
 * drop the bucket meanwhile, and the bytes read are still the record's
 * (a record is never rewritten in place). Fields ba_* below the line are
 * the read's own.
 */
struct kv_bucket_aread {
	uint64_t ba_start; /* value offset of the first byte read (a chunk boundary) */
	uint64_t ba_len;   /* value bytes read from ba_start (0: nothing to read) */
	/* --- */
	int ba_fd; /* the dup, open from start to end; -1: none */
	struct kv_aio_op ba_op;
	struct iovec ba_iov;
	struct kv_aio_batch *ba_batch;
};

/*
 * Starts reading value bytes [off, off + len) ∩ [0, kl_len) of the record
 * at loc into buf (4 KiB aligned, room for len plus two chunks), which
 * then belongs to the read until kv_bucket_aread_end. Sets r->ba_start and
 * r->ba_len. Returns 0 (end the read with kv_bucket_aread_end, exactly
 * once), -ENOENT for a missing bucket, -EINVAL when the range is empty,
 * -EMFILE or -ENOMEM: then there is nothing to end.
 */
int kv_bucket_aread_start(struct kv_bucket_set *bs, const struct kv_loc *loc, uint64_t off,
			  uint64_t len, void *buf, struct kv_bucket_aread *r);

/* True when a started read has completed (kv_bucket_aread_end will not wait). */
bool kv_bucket_aread_done(struct kv_bucket_set *bs, struct kv_bucket_aread *r);

/*
 * Waits for a started read and ends it. With csums (the record's chunk
 * checksums) it verifies the bytes read, without counting a mismatch in
 * bst_csum_errors (whoever reads them again counts it). Returns 0, -EIO
 * (I/O error, short read, checksum mismatch).
 */
int kv_bucket_aread_end(struct kv_bucket_set *bs, struct kv_bucket_aread *r, const uint64_t *csums);

/*
 * Reads a whole value, verified, into page-aligned buffers covering
 * round_up(kl_len, 4K) bytes (the pool memory of a promoted value).
 * Returns 0, -EIO or -ENOENT.
 */
int kv_bucket_read_iov(struct kv_bucket_set *bs, const struct kv_loc *loc, const uint64_t *csums,
		       const struct iovec *iov, int iovcnt);

/*
 * Reservations: quota promised to the unwritten extents of values
 * (fallocate), so their first write cannot fail for lack of room. A put
 * takes the quota only from what nobody reserved, unless it fills a
 * reservation (bp_fill). kv_bucket_reserve promises `bytes` more when the
 * live bytes (all but dead records, which compaction gives back) plus
 * every reservation stay within the quota, else -ENOSPC; with force it
 * always does (recovery: what was promised before stays promised).
 * kv_bucket_unreserve takes back a promise nobody will fill.
 */
int kv_bucket_reserve(struct kv_bucket_set *bs, uint64_t bytes, bool force);
void kv_bucket_unreserve(struct kv_bucket_set *bs, uint64_t bytes);

/* Counts a record as dead (its key was deleted or got a newer durable value). */
void kv_bucket_dead(struct kv_bucket_set *bs, const struct kv_loc *loc);

/*
 * Calls fn for every record of every bucket, oldest bucket first, records
 * in file order, checking heads (for --fsck and --salvage, values too when
 * check_values). Returns 0 or fn's non-zero return; damaged records are
 * counted in *bad and skipped.
 */
int kv_bucket_scan(struct kv_bucket_set *bs, bool check_values,
		   int (*fn)(const struct kv_bucket_rec *r, void *arg), void *arg, uint64_t *bad);

/* True when loc lies inside an existing bucket's records. */
bool kv_bucket_valid(struct kv_bucket_set *bs, const struct kv_loc *loc);

/* True when bucket id exists, is not broken, and [off, end) lies inside its records. */
bool kv_bucket_holds(struct kv_bucket_set *bs, uint64_t id, uint64_t off, uint64_t end);

/* Sets how many bytes of a bucket's records are live (recovery); the rest are dead. */
void kv_bucket_set_live(struct kv_bucket_set *bs, uint64_t id, uint64_t live);

/*
 * Removes a bucket file whose records are all dead. New reads of it fail
 * with -ENOENT at once; the file goes when the reads in flight are done
 * (every read holds a reference on its bucket for its I/O). Returns 0,
 * -ENOENT (no such bucket) or -EBUSY: the active bucket, a compaction's
 * output, a pinned bucket, or one whose header is unreadable (kept for
 * salvage) is never removed.
 */
int kv_bucket_drop(struct kv_bucket_set *bs, uint64_t id);

/*
 * on: until called with off, the files of buckets dropped are kept (up to
 * two, renamed ID.kvs, outside the quota's count) for the next compaction
 * outputs to be written over, which spares a filesystem mounted with
 * `discard` trimming them and allocating the outputs' blocks again; off:
 * the spares left are removed. A start removes any a stop left.
 */
void kv_bucket_recycle(struct kv_bucket_set *bs, bool on);

/* How many more dropped buckets' files would be kept as spares now (0: not recycling). */
uint32_t kv_bucket_spare_room(struct kv_bucket_set *bs);

/*
 * Pins (pin) or unpins a bucket: a key deleted while open keeps reading
 * its record, so the bucket may not be dropped until the last close.
 */
void kv_bucket_pin(struct kv_bucket_set *bs, uint64_t id, bool pin);

/* What compaction needs to know of one bucket (kv_bucket_list). */
struct kv_bucket_info {
	uint64_t bi_id;
	uint64_t bi_size;      /* bytes of the file (what it counts against the quota) */
	uint64_t bi_records;   /* bytes of its records */
	uint64_t bi_dead;      /* bytes of its dead records */
	uint64_t bi_access_ns; /* last read or append, CLOCK_MONOTONIC (0: not since start) */
	uint64_t bi_dead_ns;   /* last time one of its records died, the same clock (0: none) */
	uint64_t bi_count;     /* records */
	bool bi_busy;	       /* not a candidate: open, active, pinned, broken or being written */
	bool bi_active;	       /* the bucket appends go to */
};

/* A snapshot of every bucket, by id (malloc'ed, *n entries). Returns 0 or -ENOMEM. */
int kv_bucket_list(struct kv_bucket_set *bs, struct kv_bucket_info **out, uint32_t *n);

/* Seals the active bucket (if it has records), so its dead records can be compacted. */
int kv_bucket_seal_active(struct kv_bucket_set *bs);

/*
 * Compaction output (ssd side of core/gc.c): a new bucket that live
 * records are copied into, never the active one. kv_compact_copy_many
 * reads the records at from[0..n), in order, as many as the output takes
 * (bo_bucket_size, bo_bucket_keys; a first record always fits), with their
 * reads in flight together; checks each (head, and every value chunk
 * against its checksum) and appends it byte for byte, so a copy keeps its
 * sequence number and chunk checksums. For each record taken, errs[i] is
 * 0 (to[i] set) or -EBADMSG: it could not be read or failed its checks,
 * and was not copied (counted in bst_csum_errors). Returns how many it
 * took — 0 when the output is full (commit it, begin another) — or
 * -ENOENT (a source bucket is gone), -EIO (writing the output failed),
 * -ENOMEM. Records are written through an 8 MiB staging buffer (a larger
 * one straight through, in pieces). With `yield`, foreground I/O keeps
 * priority: while kv_bucket_fg_active, the copy has at most 64 KiB in
 * flight; without, it moves 8 MiB at a time (for a pass that writers wait
 * on).
 * kv_compact_commit seals the output (index block, trailer, fdatasync; the
 * directory synced too, since the output is not synced when begun): its
 * records are durable when it returns 0; it frees c. kv_compact_abort
 * removes the output and frees c. The output counts against the quota from
 * the start, and may take it over the cap by up to one bucket.
 * One struct kv_compact is used by one thread at a time.
 */
struct kv_compact;

/*
 * True while foreground I/O uses the disk: a read or an append began in the
 * last 20 ms. Compaction makes way for it (smaller I/Os, later removals).
 */
bool kv_bucket_fg_active(struct kv_bucket_set *bs);

int kv_compact_begin(struct kv_bucket_set *bs, bool yield, struct kv_compact **out);
int kv_compact_copy_many(struct kv_compact *c, const struct kv_loc *from, struct kv_loc *to,
			 int *errs, unsigned n);
/* The output's bucket id and how many records it holds. */
uint64_t kv_compact_id(const struct kv_compact *c);
uint64_t kv_compact_records(const struct kv_compact *c);
/* Whether the output is written over a dropped bucket's file (kv_bucket_recycle). */
bool kv_compact_recycled(const struct kv_compact *c);
int kv_compact_commit(struct kv_compact *c);
void kv_compact_abort(struct kv_compact *c);

/* Never hands out a bucket id below `next` again (ids recorded in the metadata). */
void kv_bucket_min_id(struct kv_bucket_set *bs, uint64_t next);

/* The id the next new bucket will get. */
uint64_t kv_bucket_next_id(struct kv_bucket_set *bs);

/* Counters for the statistics. */
void kv_bucket_stats(struct kv_bucket_set *bs, struct kv_bucket_stats *st);

/* Calls fn(id, arg) for every bucket. */
void kv_bucket_each(struct kv_bucket_set *bs, void (*fn)(uint64_t id, void *arg), void *arg);

/* The record's bytes in its bucket (head + padded value). */
uint64_t kv_loc_size(const struct kv_loc *loc);

#endif
