/* SPDX-License-Identifier: MIT */
/*
 * ssd/journal.h — the metadata journal and checkpoints.
 *
 * Everything kvfs keeps on disk that is not bucket data is a stream of
 * entries (struct kv_jent): directories, symlinks, FIFOs and sockets
 * made, values put (where a key's value lives), deletes (tombstones),
 * renames, attribute changes, and the moves of values by compaction
 * (core/gc.c). The same entries, in the same checksummed record format
 * (ssd/format.h), make up both files:
 *
 *   journal.<gen>   append-only, group-committed: appenders copy their
 *                   entry into a buffer and get its LSN (log sequence
 *                   number, 1, 2, ... across generations); a commit thread
 *                   writes the buffer and fdatasyncs it, within
 *                   `commit_delay_ns` of the first append, and
 *                   kv_journal_sync(lsn) waits until that LSN is durable.
 *   checkpoint      a snapshot: a KV_J_CKPT header entry (first), then the
 *                   entries that rebuild the whole namespace, then a
 *                   KV_J_CKPT_END entry (last) — written as checkpoint.tmp,
 *                   fsynced, renamed over `checkpoint`, directory fsynced.
 *
 * Rotation: kv_journal_rotate() starts journal.<gen+1> and returns its
 * gen; the caller writes a checkpoint naming that gen (every entry appended
 * before the rotation is in the snapshot), and then calls
 * kv_journal_drop_before(gen) to delete older journal files. Recovery loads
 * the checkpoint and replays every journal.<g> with g >= its gen, in order.
 *
 * A torn tail (a record cut short or failing its checksum at the end of the
 * newest journal file) ends replay; the file is truncated to the last good
 * record. A bad record followed by good ones, or in an older generation, is
 * corruption: replay stops and reports -EIO (the salvage mode rebuilds from
 * the buckets instead).
 *
 * Thread-safety: kv_journal_append/sync/rotate may be called from any
 * thread. Replay and checkpoint functions are used single-threaded at start.
 */
#ifndef KVFS_SSD_JOURNAL_H
#define KVFS_SSD_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum kv_jtype {
	KV_J_MKDIR = 1, /* je_path, attributes */
	KV_J_PUT,	/* je_path, attributes, value location (je_bucket .. je_seq), or with
			   KV_JPUT_EXTENTS in je_flags the map at je_ext (ssd/format.h) */
	KV_J_DEL,	/* je_path: unlink or rmdir (a tombstone) */
	KV_J_RENAME,	/* je_path -> je_path2, je_flags: 0, RENAME_NOREPLACE, RENAME_EXCHANGE */
	KV_J_SETATTR,	/* je_path, attributes (mode, uid, gid, times) */
	KV_J_BUCKET,	/* checkpoint only: bucket je_bucket, je_len bytes long, je_flags sealed */
	KV_J_CKPT,	/* checkpoint header: je_seq next sequence number, je_bucket next bucket id,
			   je_gen */
	KV_J_CKPT_END,	/* checkpoint trailer: je_len = number of entries before it */
	KV_J_MOVE,	/* compaction moved je_path's record of extent je_next with birth
			   sequence number je_seq to je_bucket/je_off (je_len, je_head_len
			   unchanged); replay applies it only while the key's extent je_next
			   still has that sequence number and length */
	KV_J_NODE,	/* je_path, attributes with the type bits in je_mode: a symlink
			   (S_IFLNK, je_path2 its target), FIFO (S_IFIFO) or socket (S_IFSOCK) */
	KV_J__MAX,
};

/*
 * One entry. Which fields matter depends on je_type (above); the others
 * are written as zero. Paths are relative to the mount root, without a
 * leading '/', not NUL-terminated on disk (je_path_len bytes, at most
 * KV_JPATH_MAX).
 */
struct kv_jent {
	uint16_t je_type;
	uint32_t je_flags;
	uint32_t je_mode;
	uint32_t je_uid;
	uint32_t je_gid;
	int64_t je_atime_ns;
	int64_t je_mtime_ns;
	int64_t je_ctime_ns;
	uint64_t je_seq;      /* KV_J_PUT: the value's sequence number */
	uint64_t je_bucket;   /* KV_J_PUT: bucket id */
	uint64_t je_off;      /* KV_J_PUT: record offset in the bucket */
	uint64_t je_len;      /* KV_J_PUT: value length */
	uint32_t je_head_len; /* KV_J_PUT: bytes of the record head (the value starts there) */
	uint64_t je_gen;      /* KV_J_CKPT: the journal generation that follows */
	uint32_t je_next;     /* KV_J_PUT with KV_JPUT_EXTENTS: entries at je_ext (at most
				 KV_JEXT_MAX); KV_J_MOVE: the extent index */
	const void *je_ext;   /* KV_J_PUT: je_next struct kv_jext, packed; decoded, it points
				 into the record, unaligned: read each with memcpy */
	const char *je_path;
	uint32_t je_path_len;
	const char *je_path2;
	uint32_t je_path2_len;
};

#define KV_JPATH_MAX 4096
#define KV_JEXT_MAX  ((1u << 23) + 1) /* a 16 TiB value's extents and its manifest */

struct kv_journal;

/*
 * Opens journal.<gen> in dirfd for appending (creating it if missing),
 * with LSNs continuing after `last_lsn`, and starts the commit thread.
 * Returns 0 or -errno.
 */
int kv_journal_open(struct kv_journal **out, int dirfd, uint64_t gen, uint64_t last_lsn,
		    uint64_t commit_delay_ns);

/* Commits what is buffered, stops the thread, closes. */
void kv_journal_close(struct kv_journal *j);

/*
 * Appends an entry; sets *lsn (may be NULL). Does not wait for the disk.
 * Returns 0, -EINVAL for a bad entry (type, path length), or the error that
 * made the journal fail (it stays failed: later appends return it too).
 */
int kv_journal_append(struct kv_journal *j, const struct kv_jent *e, uint64_t *lsn);

/* Waits until every entry up to `lsn` is durable. Returns 0 or the commit's -errno. */
int kv_journal_sync(struct kv_journal *j, uint64_t lsn);

/* The last LSN handed out. */
uint64_t kv_journal_last_lsn(struct kv_journal *j);

/* Bytes in the current generation's file: for deciding when to checkpoint. */
uint64_t kv_journal_size(struct kv_journal *j);

/*
 * Commits, then switches appends to journal.<gen+1> (fsynced empty file).
 * Appenders are held off during the switch: call it while the state the
 * checkpoint will capture is frozen. Sets *new_gen. Returns 0 or -errno.
 */
int kv_journal_rotate(struct kv_journal *j, uint64_t *new_gen);

/* Deletes journal.<g> for every g < gen. */
void kv_journal_drop_before(int dirfd, uint64_t gen);

/* Called for each entry in order; a non-zero return stops the walk and is returned. */
typedef int (*kv_jent_fn)(const struct kv_jent *e, uint64_t lsn, void *arg);

/*
 * Replays journal.<g> for every g >= from_gen, oldest first, calling fn for
 * each good entry. Truncates a torn tail of the newest file. Sets *last_gen
 * (from_gen when there is no file) and *last_lsn (0 when no entries).
 * Returns 0, -EIO for corruption before the tail, or fn's return.
 */
int kv_journal_replay(int dirfd, uint64_t from_gen, kv_jent_fn fn, void *arg, uint64_t *last_gen,
		      uint64_t *last_lsn);

/* Produces the checkpoint's entries: returns 1 and fills *e while there are more, 0 at the end. */
typedef int (*kv_ckpt_next_fn)(struct kv_jent *e, void *arg);

/*
 * Writes a checkpoint: header (KV_J_CKPT with next_seq, next_bucket, gen),
 * the entries from `next`, then KV_J_CKPT_END; atomically replaces
 * `checkpoint`. Returns 0 or -errno (the old checkpoint stays).
 */
int kv_ckpt_write(int dirfd, uint64_t next_seq, uint64_t next_bucket, uint64_t gen,
		  kv_ckpt_next_fn next, void *arg);

/*
 * A checkpoint image built in memory, for a caller that must hold its
 * state still while the entries are taken: adding an entry only encodes
 * it (no I/O, and no page faults in the `reserve` bytes made ready by
 * kv_ckpt_img_new), and the image is written after, when nothing is held.
 * Not thread-safe: one image, one thread.
 */
struct kv_ckpt_img;

/*
 * A new, empty image, with `reserve` bytes allocated and faulted in now
 * (an estimate: more are allocated as entries need them). Returns 0 or
 * -ENOMEM.
 */
int kv_ckpt_img_new(struct kv_ckpt_img **out, size_t reserve);

/* Adds an entry. Returns 0, -EINVAL (a bad entry, or a header's or trailer's type) or -ENOMEM. */
int kv_ckpt_img_add(struct kv_ckpt_img *im, const struct kv_jent *e);

/*
 * Writes the image as `checkpoint` (header with next_seq, next_bucket and
 * gen, the entries added, trailer), as kv_ckpt_write. Returns 0 or -errno.
 */
int kv_ckpt_img_write(struct kv_ckpt_img *im, int dirfd, uint64_t next_seq, uint64_t next_bucket,
		      uint64_t gen);

/* Frees an image (NULL: nothing). */
void kv_ckpt_img_free(struct kv_ckpt_img *im);

/* The size of `checkpoint` in bytes, 0 when there is none: an estimate of the next one. */
uint64_t kv_ckpt_size(int dirfd);

/*
 * Loads `checkpoint`: checks every record and that it ends with a
 * KV_J_CKPT_END counting the entries, then calls fn for each entry between
 * header and trailer. Sets the header's values. Returns 0, -ENOENT when
 * there is no checkpoint, -EIO when it is damaged (nothing is called then),
 * or fn's return.
 */
int kv_ckpt_load(int dirfd, kv_jent_fn fn, void *arg, uint64_t *next_seq, uint64_t *next_bucket,
		 uint64_t *gen);

#endif
