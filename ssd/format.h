/* SPDX-License-Identifier: MIT */
/*
 * ssd/format.h — every on-disk structure of kvfs.
 *
 * All integers are little-endian (the structs are written as they are in
 * memory; a static_assert below refuses big-endian builds). Checksums are
 * XXH3-64 (xxhash), computed with the checksum field itself set to zero.
 *
 * The data directory:
 *
 *   DATA_DIR/
 *     LOCK                 flock'ed by the running daemon, holds its pid
 *     checkpoint           newest snapshot of the metadata (journal records)
 *     journal.<gen>        metadata journal generations (gen in decimal)
 *     buckets/<id>.kvb     bucket files (id: 16 hex digits)
 *
 * A bucket file (append-only; every offset and length a multiple of 4 KiB):
 *
 *   0        +--------------------------------------------+
 *            | struct kv_bucket_hdr, zero-padded to 4 KiB |
 *   4096     +--------------------------------------------+
 *            | record 0 head:                             |
 *            |   struct kv_rec_head                       |
 *            |   key (rh_key_len bytes)                   |
 *            |   chunk checksums (rh_nchunks x u64)        |
 *            |   zero padding to rh_head_len (4 KiB mult) |
 *            +--------------------------------------------+
 *            | record 0 value (rh_value_len bytes),       |
 *            |   padded to a multiple of 4 KiB            |
 *            +--------------------------------------------+
 *            | record 1 head ...                          |
 *            +--------------------------------------------+
 *            | ...                                        |
 *   sealed:  +--------------------------------------------+ bt_index_off
 *            | index block: struct kv_idx_ent per record, |
 *            |   each followed by its key, 8-byte padded; |
 *            |   zero padding to 4 KiB                    |
 *            +--------------------------------------------+
 *            | struct kv_bucket_trailer, padded to 4 KiB  | (file ends here)
 *            +--------------------------------------------+
 *
 * An open (unsealed) bucket is preallocated to its full size with
 * fallocate: after its last record come zeros, which no record head
 * matches. Sealing writes the index block and trailer right after the last
 * record, syncs, and truncates the file to the trailer's end.
 *
 * Values are checked in chunks of 1 << rh_chunk_shift bytes (64 KiB): chunk
 * i's checksum covers value bytes [i << shift, min((i + 1) << shift, len)),
 * so a read of any aligned range can be verified without reading the whole
 * value. rh_payload_csum is the checksum of the chunk checksum array.
 *
 * The journal and the checkpoint are sequences of records, each a struct
 * kv_jrec_head followed by jh_len payload bytes (struct kv_jrec_body, then
 * path, then path2), padded to 8 bytes. They are written with ordinary
 * buffered I/O and fdatasync. jh_type is enum kv_jtype (ssd/journal.h):
 *
 *   1 MKDIR  2 PUT  3 DEL  4 RENAME  5 SETATTR  6 BUCKET  7 CKPT  8 CKPT_END
 *   9 MOVE   path, jb_next (extent index), jb_seq, new jb_bucket/jb_off,
 *            jb_len/jb_head_len: a record compaction copied; replay applies
 *            it only while the key's extent jb_next (its WHOLE record, or
 *            its MANIFEST at KV_MANIFEST_INDEX) still has birth sequence
 *            number jb_seq and length jb_len (else a newer put or a delete
 *            came after it, and the move is void)
 *  10 NODE  path, jb_mode with its type bits (S_IFLNK, S_IFIFO, S_IFSOCK),
 *            attributes, and for a symlink its target as path2: a node
 *            with no value. Added without a version change: a data
 *            directory written before it reads as it did, one that holds
 *            a NODE record needs a kvfs that knows it (an older one
 *            refuses it as a damaged record)
 *
 * Versions. Version 2 (extents, README "Extents") writes a 64-byte record
 * head with rh_flags and rh_ext_index, 40-byte index entries and journal
 * records with KV_JPUT_EXTENTS maps and MOVE extent indexes; bucket files,
 * records and journal records carry their version, and version 1 ones
 * (a value is one WHOLE record) are read as they were written.
 *
 * A compaction never changes a record: it copies head and value byte for
 * byte into a new bucket, so the copy keeps its key, sequence number and
 * checksums. The old bucket is removed only once the MOVE entries and every
 * tombstone of its keys are durable; a crash before that leaves it as an
 * orphan (no key points into it) that recovery deletes.
 */
#ifndef KVFS_SSD_FORMAT_H
#define KVFS_SSD_FORMAT_H

#include <assert.h>
#include <stdint.h>

#define KV_BLOCK 4096u

#define KV_BUCKET_MAGIC	  0x314b4342534656b4ull /* "\xb4VFSBCK1" */
#define KV_TRAILER_MAGIC  0x31525442534656b4ull /* "\xb4VFSBTR1" */
#define KV_REC_MAGIC	  0x31524b56u		/* "VKR1" */
#define KV_JREC_MAGIC	  0x314a4b56u		/* "VKJ1" */
#define KV_FORMAT_VERSION 2 /* what is written; version 1 stays readable (below) */
#define KV_CHUNK_SHIFT	  16  /* 64 KiB checksum chunks */

/* First 4 KiB of a bucket file. */
struct kv_bucket_hdr {
	uint64_t bh_magic;   /* KV_BUCKET_MAGIC */
	uint32_t bh_version; /* KV_FORMAT_VERSION */
	uint32_t bh_pad;
	uint64_t bh_id;	       /* the id in the file name */
	int64_t bh_created_ns; /* CLOCK_REALTIME at creation */
	uint64_t bh_csum;
};

/*
 * Record flags (rh_flags, ie_flags): what a record's value is.
 *   WHOLE     the whole value of version rh_seq: extent 0 of a value of at
 *             most one extent, rh_value_len bytes long
 *   EXTENT    extent rh_ext_index (bytes [index * 2 MiB, ...)) of a value
 *             of more than one extent, whose birth sequence number is
 *             rh_seq; rh_value_len <= 2 MiB
 *   MANIFEST  the map of version rh_seq of a value that is not WHOLE
 *             (struct kv_manifest), so --salvage can rebuild it without
 *             the journal; rh_ext_index is KV_MANIFEST_INDEX
 */
#define KV_REC_WHOLE	  0x1
#define KV_REC_EXTENT	  0x2
#define KV_REC_MANIFEST	  0x4
#define KV_MANIFEST_INDEX 0xffffffffu

/*
 * The start of every record head. A version 1 record (rh_version 1) is the
 * first 56 bytes of it (no rh_ext_index, no rh_pad2, rh_flags 0): a WHOLE
 * value at extent 0; its head length counts 56 bytes of struct.
 */
struct kv_rec_head {
	uint32_t rh_magic;    /* KV_REC_MAGIC */
	uint16_t rh_version;  /* KV_FORMAT_VERSION */
	uint16_t rh_flags;    /* exactly one of KV_REC_* */
	uint32_t rh_key_len;  /* bytes of key following this struct */
	uint32_t rh_head_len; /* bytes of the head, 4 KiB multiple: the value starts here */
	uint64_t rh_value_len;
	uint64_t rh_seq;	  /* the put's sequence number */
	uint32_t rh_chunk_shift;  /* KV_CHUNK_SHIFT */
	uint32_t rh_nchunks;	  /* ceil(value_len / chunk) */
	uint64_t rh_payload_csum; /* XXH3 of the chunk checksum array */
	uint64_t rh_head_csum;	  /* XXH3 of this struct (field zeroed), key and chunk checksums */
	uint32_t rh_ext_index;	  /* version 2: the extent index (KV_REC_EXTENT), else 0 */
	uint32_t rh_pad2;	  /* version 2: 0 */
};
#define KV_REC_HEAD_V1 56u /* bytes of a version 1 head struct */

/*
 * A MANIFEST record's value: the header, then mf_count entries sorted by
 * me_index (holes are absent).
 */
struct kv_manifest {
	uint64_t mf_size; /* the value's length in bytes */
	uint64_t mf_seq;  /* the version's sequence number */
	uint32_t mf_count;
	uint32_t mf_pad;
};
struct kv_manifest_ent {
	uint64_t me_seq; /* the extent's birth sequence number */
	uint32_t me_index;
	uint32_t me_len;
};

/*
 * One index block entry; its key follows, then zero padding to 8 bytes. A
 * version 1 bucket's entries are the first 32 bytes (no ie_ext_index, no
 * ie_flags).
 */
struct kv_idx_ent {
	uint64_t ie_off; /* the record's offset in the bucket */
	uint64_t ie_value_len;
	uint64_t ie_seq;
	uint32_t ie_head_len;
	uint32_t ie_key_len;
	uint32_t ie_ext_index; /* rh_ext_index */
	uint32_t ie_flags;     /* rh_flags */
};

/* The last 4 KiB of a sealed bucket. */
struct kv_bucket_trailer {
	uint64_t bt_magic; /* KV_TRAILER_MAGIC */
	uint64_t bt_id;
	uint64_t bt_index_off;	/* where the index block starts (= end of the last record) */
	uint64_t bt_index_len;	/* bytes of index entries (without padding) */
	uint64_t bt_count;	/* records */
	uint64_t bt_index_csum; /* XXH3 of the index entries */
	uint64_t bt_csum;	/* XXH3 of this struct, field zeroed */
};

/* Journal / checkpoint record head. */
struct kv_jrec_head {
	uint32_t jh_magic; /* KV_JREC_MAGIC */
	uint16_t jh_type;  /* enum kv_jtype */
	uint16_t jh_version;
	uint32_t jh_len; /* payload bytes (before padding) */
	uint32_t jh_pad;
	uint64_t jh_lsn;  /* log sequence number (checkpoint: index in the file) */
	uint64_t jh_csum; /* XXH3 of this head (field zeroed) and the payload */
};

/* Journal record payload: fixed part, then path, then path2. */
struct kv_jrec_body {
	uint32_t jb_flags;
	uint32_t jb_mode;
	uint32_t jb_uid;
	uint32_t jb_gid;
	int64_t jb_atime_ns;
	int64_t jb_mtime_ns;
	int64_t jb_ctime_ns;
	uint64_t jb_seq;
	uint64_t jb_bucket;
	uint64_t jb_off;
	uint64_t jb_len;
	uint64_t jb_gen;
	uint32_t jb_head_len;
	uint32_t jb_path_len;
	uint32_t jb_path2_len;
	uint32_t jb_next; /* PUT with KV_JPUT_EXTENTS: kv_jext entries after the paths;
			     MOVE: the extent index moved (version 1: 0) */
};

/*
 * A PUT entry's value is either WHOLE — one record, named by jb_bucket,
 * jb_off, jb_len (the value's size), jb_head_len, jb_seq, as in version 1
 * — or, with KV_JPUT_EXTENTS in jb_flags, a map: jb_len the size, jb_seq
 * the version's sequence number, and jb_next struct kv_jext after the path:
 * the records sorted by jx_index, the MANIFEST record last (jx_index
 * KV_MANIFEST_INDEX) — or the one WHOLE record (index 0, jx_len the size)
 * — then the key's reserved extents (core/resv.h), sorted ranges flagged
 * KV_JX_UNWRITTEN: jx_index the first extent, jx_off how many, every other
 * field 0.
 *
 *   | rec 0 | rec 3 | ... | MANIFEST | UNWRITTEN 5 (+10) | UNWRITTEN 20 (+4) |
 */
#define KV_JPUT_EXTENTS 0x1
#define KV_JX_UNWRITTEN 0x1 /* reserved, no record (jx_bucket 0) */
struct kv_jext {
	uint64_t jx_bucket;
	uint64_t jx_off;
	uint64_t jx_seq; /* birth sequence number: the record's rh_seq */
	uint32_t jx_index;
	uint32_t jx_len; /* the record's value bytes */
	uint32_t jx_head_len;
	uint32_t jx_flags; /* KV_JX_* */
};

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "kvfs's on-disk format is little-endian");
static_assert(sizeof(struct kv_bucket_hdr) == 40, "bucket header size");
static_assert(sizeof(struct kv_rec_head) == 64, "record head size");
static_assert(sizeof(struct kv_manifest) == 24, "manifest header size");
static_assert(sizeof(struct kv_manifest_ent) == 16, "manifest entry size");
static_assert(sizeof(struct kv_idx_ent) == 40, "index entry size");
static_assert(sizeof(struct kv_jext) == 40, "journal extent size");
static_assert(sizeof(struct kv_bucket_trailer) == 56, "trailer size");
static_assert(sizeof(struct kv_jrec_head) == 32, "journal record head size");
static_assert(sizeof(struct kv_jrec_body) == 96, "journal record body size");

/* Bytes of a record head (of format `version`) holding a key of key_len and a value of value_len. */
static inline uint32_t kv_rec_head_len_v(unsigned version, uint32_t key_len, uint64_t value_len)
{
	uint64_t nchunks = (value_len + (1u << KV_CHUNK_SHIFT) - 1) >> KV_CHUNK_SHIFT;
	uint64_t n = (version == 1 ? KV_REC_HEAD_V1 : sizeof(struct kv_rec_head)) + key_len +
		     nchunks * 8;

	return (uint32_t)((n + KV_BLOCK - 1) / KV_BLOCK * KV_BLOCK);
}

/* Bytes of a record head written today. */
static inline uint32_t kv_rec_head_len(uint32_t key_len, uint64_t value_len)
{
	return kv_rec_head_len_v(KV_FORMAT_VERSION, key_len, value_len);
}

/* Bytes a record takes in its bucket. */
static inline uint64_t kv_rec_size(uint32_t key_len, uint64_t value_len)
{
	return kv_rec_head_len(key_len, value_len) +
	       (value_len + KV_BLOCK - 1) / KV_BLOCK * KV_BLOCK;
}

#endif
