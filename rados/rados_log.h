/* SPDX-License-Identifier: MIT */
/*
 * rados/rados_log.h — the shared tier's change log: DATA_DIR/rados.log.
 *
 * The shared tier (rados/shared_queue.c) sends the node's changes to the cluster
 * in the background, in order. The log keeps the changes not yet sent, so
 * that a restart (clean, kill -9, or with the cluster down all along)
 * sends them at the next start instead of losing them. A change is
 * appended when it is queued (a write(2): it survives kill -9 at once, and
 * a power cut once fdatasync on kv_rlog_dup's descriptor returned: fsync(2)
 * does that), and the
 * sending thread appends how far it got.
 *
 * Format (little-endian, as ssd/format.h):
 *
 *   header   struct kv_file_head (ssd/fileio.h: KV_RLOG_MAGIC,
 *            KV_RLOG_VERSION), then the pool and the namespace (no NULs):
 *            whose changes these are. A log for another pool or namespace
 *            is not sent there: it is set aside (renamed rados.log.old).
 *   records  struct kv_rlog_rec, then rr_plen bytes of path and rr_plen2
 *            of the second path (RENAME's target), then the XXH3-64 of all
 *            of it (8 bytes). Records follow in id order. A torn or
 *            corrupt record ends the log (what follows it is not read).
 *
 *   kind     fields
 *   PUT      rr_seq, rr_size: the local version (its path is found at the
 *            next start: the key whose value has that sequence number)
 *   DEL      path
 *   MKDIR    path, rr_mode
 *   RMDIR    path
 *   RENAME   path -> path2
 *   DONE     rr_id: every change up to this id is in the cluster
 *   SYMLINK  path, its target in path2, rr_seq: owner uid << 32 | gid
 *   and every kind but PUT and DONE: rr_size, when it was made
 *   (CLOCK_REALTIME ns); DEL and RENAME also rr_node, rr_seq: the cluster
 *   version the key was a copy of here (rr_node 0: none known), and
 *   rr_mark: the store's last sequence number then
 *
 * The log shrinks to its header when nothing is left to send, and is
 * rewritten with only what is left when it grows past KV_RLOG_REWRITE with
 * most of it done. One writer at a time: the caller serialises every call
 * on one log.
 */
#ifndef KVFS_RADOS_RADOS_LOG_H
#define KVFS_RADOS_RADOS_LOG_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define KV_RLOG_NAME	  "rados.log"
#define KV_RLOG_MAGIC	  0x474f4c5253564b00ull /* "\0KVSRLOG" */
#define KV_RLOG_REC_MAGIC 0x43455251u		/* "QREC" */
#define KV_RLOG_VERSION	  2			/* 2: records carry rr_node and rr_mark */
#define KV_RLOG_REWRITE	  (64ull << 20) /* bytes of log that make a rewrite worth it */
#define KV_RLOG_SHRINK	  (1ull << 20)	/* bytes of log worth a truncate once nothing is left */
#define KV_RLOG_PATH_MAX  4096

enum kv_rlog_kind {
	KV_RLOG_PUT = 1,
	KV_RLOG_DEL,
	KV_RLOG_MKDIR,
	KV_RLOG_RMDIR,
	KV_RLOG_RENAME,
	KV_RLOG_DONE,
	KV_RLOG_SYMLINK,
	KV_RLOG_KIND_MAX = KV_RLOG_SYMLINK,
};

struct kv_rlog_rec {
	uint32_t rr_magic; /* KV_RLOG_REC_MAGIC */
	uint32_t rr_len;   /* of the whole record, sum included */
	uint64_t rr_id;	   /* the change's place in the queue, from 1 */
	uint8_t rr_kind;   /* enum kv_rlog_kind */
	uint8_t rr_pad;
	uint16_t rr_plen, rr_plen2;
	uint16_t rr_pad2;
	uint32_t rr_mode;
	uint32_t rr_pad3;
	uint64_t rr_seq, rr_size;
	uint64_t rr_node, rr_mark;
} __attribute__((packed));

/* A change, as appended and as read back. */
struct kv_rlog_change {
	uint64_t rc_id;
	enum kv_rlog_kind rc_kind; /* not DONE */
	uint64_t rc_seq, rc_size; /* PUT (SYMLINK: rc_seq, its owner; not PUT: rc_size, its time) */
	uint64_t rc_node;	  /* DEL, RENAME: with rc_seq, the version (0: none known) */
	uint64_t rc_mark;	  /* DEL, RENAME: the store's last sequence number then */
	uint32_t rc_mode;	   /* MKDIR */
	const char *rc_path, *rc_path2;
};

struct kv_rlog;

/*
 * Called by kv_rlog_open for each change not yet sent, in id order; c and
 * its paths are valid for the call only. Nonzero stops the reading and is
 * returned by kv_rlog_open.
 */
typedef int (*kv_rlog_each_fn)(void *arg, const struct kv_rlog_change *c);

/*
 * Opens (or creates) the log of pool and ns in directory dirfd, calls each
 * for every change in it not yet sent, and sets *last to the highest id it
 * holds (0 when none: ids go on from *last + 1). A log of another pool or
 * namespace is renamed rados.log.old (one line on stderr says how many
 * changes it held) and a new one is begun. Returns 0 and sets *out, or
 * -errno (the log cannot be read or made; -EINVAL: a name too long).
 */
int kv_rlog_open(int dirfd, const char *pool, const char *ns, kv_rlog_each_fn each, void *arg,
		 struct kv_rlog **out, uint64_t *last);

/* Appends a change. Returns 0 or -errno (the change is then not kept across a restart). */
int kv_rlog_append(struct kv_rlog *l, const struct kv_rlog_change *c);

/*
 * Records that every change up to id is sent. empty: none is left, and a
 * log past KV_RLOG_SHRINK shrinks to its header (a smaller one takes a
 * record: cheaper than a truncate each time the queue empties). Returns 0
 * or -errno.
 */
int kv_rlog_done(struct kv_rlog *l, uint64_t id, bool empty);

/* Bytes in the log now (header included). */
uint64_t kv_rlog_bytes(const struct kv_rlog *l);

/*
 * A rewrite: kv_rlog_rewrite_begin starts a new log beside the old one,
 * kv_rlog_rewrite_add puts a change left to send into it, and
 * kv_rlog_rewrite_end (ok) makes it durable and puts it in the old one's
 * place, or (!ok) drops it. Between begin and end, nothing else is called
 * on l. Each returns 0 or -errno; after an error the old log stays.
 */
int kv_rlog_rewrite_begin(struct kv_rlog *l);
int kv_rlog_rewrite_add(struct kv_rlog *l, const struct kv_rlog_change *c);
int kv_rlog_rewrite_end(struct kv_rlog *l, bool ok);

/*
 * A new descriptor of the log (close it after use): fdatasync(2) on it
 * makes what was appended so far durable, without the caller's lock held
 * (a rewrite meanwhile made its own log durable). Returns it or -errno.
 */
int kv_rlog_dup(const struct kv_rlog *l);

/* Closes the log (what is in it stays for the next start). NULL is fine. */
void kv_rlog_close(struct kv_rlog *l);

#endif
