/* SPDX-License-Identifier: MIT */
/*
 * core/xmap.h — where a version of a value lives on the SSD: its extent map.
 *
 * A durable version (README "Extents") is a size and the bucket records of
 * its extents. A value of at most one extent (KV_EXTENT, 2 MiB) is one
 * WHOLE record at index 0; a larger one is one EXTENT record per extent
 * (xe_loc.kl_index: bytes [index * KV_EXTENT, ...), kl_seq: the extent's
 * birth sequence number) followed by its MANIFEST record (index
 * KV_MANIFEST_INDEX), which reads never touch and compaction moves like any
 * other record. Entries are sorted by index, so the manifest is last. An
 * extent with no record is a hole (zeros); a value of holes only is its
 * manifest alone.
 *
 * An extent's chunk checksums are read from its record head the first time
 * the extent is read (xe_csums), and kept: a compaction moves the record
 * byte for byte, so they stay right across a move.
 *
 * A map belongs to its inode and is guarded by the inode's ki_lock (core/
 * store_int.h): read it shared, change it (entries, checksums) exclusive.
 * The functions here take no lock.
 */
#ifndef KVFS_CORE_XMAP_H
#define KVFS_CORE_XMAP_H

#include <stdint.h>
#include <sys/uio.h>

#include "core/obj.h"
#include "ssd/bucket.h"
#include "ssd/format.h"

struct kv_xent {
	struct kv_loc xe_loc; /* the record */
	uint64_t *xe_csums;   /* its chunk checksums once read, else NULL */
};

struct kv_xmap {
	uint64_t xm_seq;  /* the version's sequence number; 0: no durable version */
	uint64_t xm_size; /* its length in bytes */
	uint32_t xm_n;	  /* records */
	union {
		struct kv_xent xm_one; /* xm_n == 1: the WHOLE record */
		struct {
			struct kv_xent *xm_e; /* xm_n > 1: malloc'ed, xm_n entries */
			uint64_t xm_alloc;    /* kv_xmap_alloc, kept by every change of them */
		};
	};
};

/* Entry i of m (i < xm_n). */
static inline struct kv_xent *kv_xmap_at(struct kv_xmap *m, uint32_t i)
{
	return m->xm_n == 1 ? &m->xm_one : &m->xm_e[i];
}

static inline const struct kv_xent *kv_xmap_cat(const struct kv_xmap *m, uint32_t i)
{
	return m->xm_n == 1 ? &m->xm_one : &m->xm_e[i];
}

/* Data extents of m: its entries without the manifest. */
uint32_t kv_xmap_nx(const struct kv_xmap *m);

/*
 * Sets an empty map to version seq of `size` bytes made of the records
 * locs[0..n) (sorted by kl_index; the manifest, if any, last). Returns 0 or
 * -ENOMEM (m stays empty).
 */
int kv_xmap_set(struct kv_xmap *m, uint64_t seq, uint64_t size, const struct kv_loc *locs,
		uint32_t n);

/* Frees what m holds and empties it. */
void kv_xmap_clear(struct kv_xmap *m);

/* The position of the record of extent `index` (or the manifest), or -1. */
int64_t kv_xmap_find(const struct kv_xmap *m, uint32_t index);

/* The entry of loc's extent index when it is the very record at loc, else NULL (m may be NULL). */
struct kv_xent *kv_xmap_holds(struct kv_xmap *m, const struct kv_loc *loc);

/*
 * Bytes of value m's data records hold, each rounded up to a page: what
 * st_blocks counts for them. O(1).
 */
uint64_t kv_xmap_alloc(const struct kv_xmap *m);

/* Bytes m's records take in their buckets. */
uint64_t kv_xmap_bytes(const struct kv_xmap *m);

/* Counts every record of m as dead. */
void kv_xmap_dead(struct kv_bucket_set *bs, const struct kv_xmap *m);

/* Pins or unpins the bucket of every record of m (a count per record). */
void kv_xmap_pin(struct kv_bucket_set *bs, const struct kv_xmap *m, bool pin);

/* True when every record of m lies inside an existing bucket. */
bool kv_xmap_valid(struct kv_bucket_set *bs, const struct kv_xmap *m);

/*
 * The data entries [*first, *end) that hold bytes of [off, off + len) (an
 * empty range when none do).
 */
void kv_xmap_range(const struct kv_xmap *m, uint64_t off, uint64_t len, uint32_t *first,
		   uint32_t *end);

/* Loads the chunk checksums of entries [first, end) that lack them. Returns 0, -EIO, -ENOMEM. */
int kv_xmap_load_csums(struct kv_bucket_set *bs, struct kv_xmap *m, uint32_t first, uint32_t end);

/*
 * Reads the whole value, verified, into the page-aligned pieces iov[0..n)
 * (round_up(xm_size, 4 KiB) bytes); holes read as zeros. Every entry's
 * checksums must be loaded. Returns 0, -EIO (a checksum, a read, a
 * missing bucket) or -ENOMEM.
 */
int kv_xmap_read_iov(struct kv_bucket_set *bs, const struct kv_xmap *m, const struct iovec *iov,
		     int n);

/*
 * Reads data entries [first, end), verified, into obj (open, not yet seen
 * by anyone else, at least as long as they reach): each extent they cover
 * gets memory (kv_obj_materialize) and their bytes; holes stay holes.
 * Every entry's checksums must be loaded. Returns 0, -EIO, -ENOSPC,
 * -ENOMEM.
 */
int kv_xmap_read_obj(struct kv_bucket_set *bs, const struct kv_xmap *m, uint32_t first,
		     uint32_t end, struct kv_obj *obj);

/* True when m is one WHOLE record (version 1: of any length). */
bool kv_xmap_whole(const struct kv_xmap *m);

/*
 * Adds the records of n new extent indexes, sorted, with their checksums
 * (m takes them), in one pass. Returns 0, or -EEXIST (an index m has) or
 * -ENOMEM, adding nothing.
 */
int kv_xmap_add(struct kv_xmap *m, const struct kv_loc *locs, uint64_t *const *csums, uint32_t n);

/*
 * Room for the chunk checksums of a record of len bytes (malloc'ed, what
 * kv_bucket_put.bp_csums and xe_csums hold), or NULL.
 */
uint64_t *kv_csums_new(uint64_t len);

/* A copy of the checksums csums of record l (kv_csums_new), or NULL: none, or no memory. */
uint64_t *kv_csums_dup(const struct kv_loc *l, const uint64_t *csums);

/* Removes entries [first, end), freeing their checksums. */
void kv_xmap_cut(struct kv_xmap *m, uint32_t first, uint32_t end);

#endif
