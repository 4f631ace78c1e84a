/* SPDX-License-Identifier: MIT */
/*
 * core/readahead.h — read-ahead of values that are only on the SSD.
 *
 * Each read of a value only on the SSD (core/tier.c) goes to the disk
 * synchronously, so a sequential reader would wait for every piece in turn
 * and the disk would idle while the reply travels. This module keeps the
 * next pieces of a sequential stream being read in the background (libaio,
 * ssd/bucket.h kv_bucket_aread_*) into buffers of its own, which the next
 * reads consume instead of going to the disk.
 *
 * Streams. A stream is a key (an opaque pointer, the inode) and the end of
 * the furthest read in it. A read near that end (within KV_RA_SLACK: the
 * kernel may hand a stream's reads to several threads, a little out of
 * order) continues the stream; a read at offset 0 starts one; any other
 * read starts a candidate that reads ahead only once a second read
 * continues it, so random reads never read ahead. A key has at most
 * KV_RA_PER_KEY streams; at most KV_RA_STREAMS in all, the least recently
 * used one giving way to a new one. A stream's first plan starts right
 * after its first read; when the kernel already runs the next read too
 * (its own read-ahead in front of a buffered reader), that read goes to
 * the disk itself and the piece is wasted: at most an extent per stream
 * start, counted in rst_unused.
 *
 * Buffers. A buffer holds value bytes [start, start + len) of one bucket
 * record, named by its kv_loc (bucket, offset, sequence number, extent
 * index), and at most KV_RA_UNIT of them. A record is immutable, so a
 * buffer whose kv_loc is the one a reader finds in the key's current map
 * (under the inode's ki_lock) holds exactly the bytes that reader wants:
 * a buffer never has to be invalidated for correctness. It is dropped for
 * memory only: once its stream has moved past it, when the key's value
 * changes, loses its name, or its last handle closes (kv_ra_drop), when its
 * stream gives way to another, and when the module is destroyed. A read
 * ahead is at most `window` bytes past a stream's furthest read, and all
 * buffers together at most KV_RA_STREAMS windows.
 *
 * A buffer's checksums are verified once, by the first reader that
 * consumes it (with the checksums its map holds), before any byte is used;
 * a mismatch or an I/O error makes the buffer useless and the reader reads
 * from the disk itself (which counts and reports the error).
 *
 * Locks: kr_lock (one mutex per module) guards the streams, every
 * buffer's state, reference count and list links, the free list and the
 * buffer count. It comes below the store's locks (callers may hold a
 * ki_lock, shared or exclusive) and above only ssd/aio.c's leaf ka_lock
 * (kv_bucket_aread_done, asked under it): no I/O is waited for under it.
 * kr_cond goes with it (a buffer's read was started or ended). The
 * counters are atomics.
 *
 * Thread-safety: every function may be called from any thread, concurrently.
 */
#ifndef KVFS_CORE_READAHEAD_H
#define KVFS_CORE_READAHEAD_H

#include <stdbool.h>
#include <stdint.h>

#include "ssd/bucket.h"

/* The most one buffer holds: one extent. */
#define KV_RA_UNIT (2ull << 20)
/* How far from a stream's furthest read a read still continues it. */
#define KV_RA_SLACK   (4ull << 20)
#define KV_RA_STREAMS 8
#define KV_RA_PER_KEY 2
/* The largest window, 32 MiB, and so the most pieces one kv_ra_start is given. */
#define KV_RA_MAX_WINDOW (32ull << 20)
#define KV_RA_MAX_PIECES (KV_RA_MAX_WINDOW / KV_RA_UNIT + 1)

struct kv_ra;
struct kv_ra_buf;

/* A piece of a record to read ahead: value bytes [pp_off, pp_off + pp_len) of pp_loc. */
struct kv_ra_piece {
	struct kv_loc pp_loc;
	uint64_t pp_off, pp_len; /* record offsets: pp_off a chunk boundary, pp_len <= KV_RA_UNIT */
	uint64_t pp_vend;	 /* the value offset where the piece ends */
};

/* What kv_ra_note asks the caller to read ahead, for kv_ra_start. */
struct kv_ra_plan {
	uint64_t rp_from, rp_to; /* value bytes */
	unsigned rp_stream;	 /* which stream, and its generation: */
	uint64_t rp_gen;	 /* kv_ra_start does nothing if it has given way meanwhile */
};

/* Counters, sampled. */
struct kv_ra_stats {
	uint64_t rst_bytes;  /* bytes read ahead (reads completed) */
	uint64_t rst_hits;   /* record pieces reads took from read-ahead buffers */
	uint64_t rst_unused; /* bytes read ahead and dropped without a read taking any */
};

/*
 * Creates the module over bucket set bs. window: bytes kept read ahead of
 * each stream, at most KV_RA_MAX_WINDOW (0: none; every call is then a
 * no-op). Returns 0, -EINVAL (window too large) or -ENOMEM.
 */
int kv_ra_create(struct kv_ra **out, struct kv_bucket_set *bs, uint64_t window);

/* Waits for every read in flight and frees everything. No other call may run. */
void kv_ra_destroy(struct kv_ra *ra);

/*
 * Tells the module that a read of key's value (size bytes) covered
 * [off, off + len) (len > 0). When it continues a stream and more should
 * be read ahead, returns true and fills *plan: the value bytes to read
 * ahead now, past what already is, for kv_ra_start. False: nothing to do.
 */
bool kv_ra_note(struct kv_ra *ra, const void *key, uint64_t size, uint64_t off, uint64_t len,
		struct kv_ra_plan *plan);

/*
 * Starts reading the pieces p[0..n) (n <= KV_RA_MAX_PIECES) of the
 * records that hold plan's bytes into buffers of plan's stream; pieces a
 * buffer of the key already holds, and those past the memory bound, are
 * skipped. Call with the key's ki_lock held shared, as the map the pieces
 * come from needs.
 */
void kv_ra_start(struct kv_ra *ra, const void *key, const struct kv_ra_plan *plan,
		 const struct kv_ra_piece *p, unsigned n);

/*
 * Finds a buffer of key's streams holding record bytes [off, off + len) of
 * the record at loc, waits for its read, verifies it (the first time) with
 * csums, the record's chunk checksums, and returns it with a reference
 * (*data: record byte off in it). NULL when there is none or its read
 * failed: read from the disk.
 */
struct kv_ra_buf *kv_ra_take(struct kv_ra *ra, const void *key, const struct kv_loc *loc,
			     const uint64_t *csums, uint64_t off, uint64_t len, const char **data);

/* Drops a reference kv_ra_take gave (NULL is fine). */
void kv_ra_put(struct kv_ra_buf *b);

/* Forgets key's streams; their buffers go once no reader holds them (reads in flight, once done).
 */
void kv_ra_drop(struct kv_ra *ra, const void *key);

void kv_ra_stats(struct kv_ra *ra, struct kv_ra_stats *out);

#endif
