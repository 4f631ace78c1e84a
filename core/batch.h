/* SPDX-License-Identifier: MIT */
/*
 * core/batch.h — the store operations behind the batch ioctls: lookup,
 * put, get and remove of one key named by a relative path, with the
 * value's bytes moved through a caller-supplied copier instead of a
 * buffer. fs/ioctl.c decodes a batch and calls these once per key.
 *
 * The contract, per key:
 *   lookup  counts sealed values only: a key still being written is -EBUSY.
 *   put     builds the whole value in unnamed pool memory, then publishes
 *           it as a rename over the name would (kv_store_publish): nobody
 *           sees the key, or its new bytes, before the copy is complete.
 *           With km_copy_start the copy may finish after the call returns:
 *           the value is published when it has landed (kv_batch_retire),
 *           in the order the puts were made.
 *   get     pins one sealed version (a DRAM object reference, or one read
 *           of the SSD record) and copies only from it: never a mix of two
 *           versions. With km_copy_start the copy may finish after the
 *           call returns (kv_batch_retire), the version pinned until then.
 *           The value's size must equal the memory's length. An SSD-only
 *           value is read straight into the memory when the daemon maps
 *           it; else, for a copy in flight (a device), into staging taken
 *           from the pool, which is pinned for the device's DMA, so one
 *           key's SSD read overlaps the previous key's copy. A large
 *           SSD-only value is otherwise read in pieces, its sequence
 *           number checked before and after, so no buffer needs its
 *           whole size.
 *   remove  is unlink, or rm -rf of a directory with `recursive`.
 *
 * Symlinks, FIFOs and sockets are names, not keys. Names are never resolved
 * through a symlink: one as a directory component is -ENOTDIR. As the last
 * component, lookup and get answer -EINVAL (with KV_BK_PRESENT: the name is
 * taken), a put replaces it as a rename over it would, and remove unlinks
 * it without counting it as a key.
 *
 * Names are paths relative to kb_dir: components of 1..KV_NAME_MAX bytes
 * separated by single '/', no "." or "..", no NUL, at most
 * KV_BATCH_PATH_MAX bytes, and not the reserved name as the first
 * component at the root. Parents must be directories and exist (a put may
 * create them).
 *
 * Locks: none of its own. Each call takes the store's locks through the
 * store's API, one key at a time, and calls km_copy with no store lock
 * held; kb_changed and kb_remote's calls are made with none held either.
 */
#ifndef KVFS_CORE_BATCH_H
#define KVFS_CORE_BATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "core/stats.h"
#include "core/store.h"

#define KV_BATCH_PATH_MAX 1024

/* What the batch learnt about a key (kki_flags). */
enum {
	KV_BK_PRESENT = 1 << 0,
	KV_BK_SEALED = 1 << 1,
	KV_BK_DIR = 1 << 2,
	KV_BK_DRAM = 1 << 3,
	KV_BK_SSD = 1 << 4,
};

struct kv_key_info {
	uint64_t kki_size; /* the value's size, when known */
	unsigned kki_flags;
};

/* Put flags. */
enum {
	KV_BATCH_NOREPLACE = 1 << 0, /* an existing key fails with -EEXIST */
	KV_BATCH_MKDIR = 1 << 1,     /* create missing parent directories */
};

/* How to wait for a copy in flight: bw_wait(bw_arg), once; NULL: nothing to wait for. */
struct kv_batch_wait {
	int (*bw_wait)(void *arg);
	void *bw_arg;
};

/*
 * A key's memory outside the store: km_len bytes, reached through km_copy,
 * which copies between its bytes [off, off + total of iov) and the daemon
 * memory iov: into iov when to_store, else from iov. Returns 0 or -errno.
 */
struct kv_batch_mem {
	uint64_t km_len;
	int (*km_copy)(void *arg, bool to_store, uint64_t off, const struct iovec *iov, int n);
	/*
	 * Optional: fills iov (room for max) with daemon addresses of the key's
	 * memory, in order, when all of it is directly addressable and aligned
	 * to 4 KiB (address and length); returns how many, or 0 when not. A
	 * get of an SSD-only value then reads into it with no bounce buffer.
	 */
	int (*km_direct)(void *arg, struct iovec *iov, int max);
	/*
	 * Optional: as km_copy of the whole value (off 0), but the copy may
	 * still be in flight on return (device memory); *w says how to wait
	 * for it (bw_wait NULL: it is done). On an error nothing is in flight.
	 */
	int (*km_copy_start)(void *arg, bool to_store, const struct iovec *iov, int n,
			     struct kv_batch_wait *w);
	void *km_arg;
};

/*
 * Keys in flight at most per batch, and their bytes (or an eighth of the
 * pool, if less): past those, kv_batch_retire waits for the oldest (a
 * put's value and a staged get's staging are pool memory until then).
 */
#define KV_BATCH_INFLIGHT	8
#define KV_BATCH_INFLIGHT_BYTES (64ull << 20)

/*
 * A put or get whose copy is still in flight, until kv_batch_retire. A get
 * keeps the version it copies from (guard and inode) or, read from the
 * SSD into pool staging, that staging (obj); a put keeps the value being
 * filled (obj) and where to publish it (dir, name).
 */
struct kv_batch_inflight {
	struct kv_batch_wait bi_wait;
	uint64_t bi_key;   /* kb_key when it started */
	uint64_t bi_bytes; /* the value's */
	bool bi_landed;	   /* waited for and let go of (land): only its result is left */
	int bi_err;	   /* with bi_landed: the result to report */
	bool bi_busy;
	struct kv_read_guard bi_guard; /* get of a pinned version */
	struct kv_inode *bi_ino;       /* get of a pinned version */
	struct kv_obj *bi_obj;	       /* put: the value; staged get: the staging */
	struct kv_inode *bi_dir;       /* put: a reference on the parent; NULL for a get */
	bool bi_noreplace;	       /* put: KV_BATCH_NOREPLACE */
	char bi_name[KV_NAME_MAX + 1]; /* put: the last component */
};

/*
 * A tier above the store that may know names the store does not hold yet
 * (the shared tier, rados/shared.h): the batch asks it before it looks a
 * name up, through this table, so core/ calls nothing of it. The caller
 * fills it (fs/ioctl.c); NULL members: none. Both are called with no lock
 * of the store held, in the thread serving the batch, with dir referenced
 * (and the names valid) for the call only; both may call the store.
 *
 * br_lookup: before each kv_store_lookup of name in dir (each directory of
 * a path as it is walked, the last component of a lookup, get or remove,
 * and the name a put in a sticky directory would replace): brings the
 * store up to date for that name. Returns 0 (then look it up in the
 * store), or -errno, which the batch reports as the lookup's own (-EIO:
 * the name is not here and the tier does not answer), except in a put's
 * sticky check, where an error means no name to check (the put goes on).
 *
 * br_prefetch: before the gets of a batch (kv_batch_prefetch), once per
 * run of consecutive valid names in the same directory dir, n >= 1 last
 * components: may bring those keys in together. Best effort: what it does
 * not bring in, br_lookup does. Never called when there are fewer than two
 * names in the batch.
 */
struct kv_batch_remote {
	int (*br_lookup)(void *arg, struct kv_inode *dir, const char *name);
	void (*br_prefetch)(void *arg, struct kv_inode *dir, const char *const *names, unsigned n);
	void *br_arg;
};

/* One batch's context: where names start, who asks, and where time went. */
struct kv_batch {
	struct kv_store *kb_st;
	struct kv_batch_remote kb_remote; /* asked before each lookup; zero: none */
	struct kv_inode *kb_dir;	  /* a directory; the caller holds a reference */
	struct kv_cred kb_cred;		  /* who asks: checked, and owner of what a put creates */
	uint64_t kb_ns[KV_STAGE__COUNT];  /* accumulated per stage, in ns */
	uint64_t kb_direct;		  /* gets read from the SSD straight into client memory */
	/*
	 * A name in dir was replaced (gone NULL) or removed (gone: the inode it
	 * named, still referenced during the call): drop cached entries. May
	 * be NULL. A removed tree reports every name in it, children first.
	 */
	void (*kb_changed)(void *arg, struct kv_inode *dir, const char *name,
			   struct kv_inode *gone);
	void *kb_arg;
	/*
	 * Puts and gets with km_copy_start: the caller's index of the key
	 * being served, and up to KV_BATCH_INFLIGHT keys in flight, so the
	 * next keys' lookups, SSD reads and pool allocations overlap the
	 * earlier keys' copies to or from the device, and a batch waits
	 * about once per KV_BATCH_INFLIGHT keys. The caller retires them
	 * (kv_batch_retire) after each key and at the end of the batch.
	 */
	uint64_t kb_key;
	struct kv_batch_inflight kb_inflight[KV_BATCH_INFLIGHT];
};

/* Checks a name (len bytes, not NUL-terminated). Returns 0, -EINVAL or -ENAMETOOLONG. */
int kv_batch_name_check(const char *name, size_t len, bool at_root);

/*
 * Every operation checks the caller (kb_cred) as the system calls on the
 * same paths would (core/perm.h): search permission on kb_dir and each
 * directory of the name, read permission on a key to get it, write
 * permission on the directory a put or remove changes (and on one a put
 * creates), and the sticky bit. -EACCES or -EPERM otherwise.
 */

/*
 * Returns the value's size, or -ENOENT, -EBUSY (still being written), -EISDIR, -ENOTDIR,
 * -EINVAL (a symlink, FIFO or socket), -EACCES.
 */
int64_t kv_batch_lookup(struct kv_batch *b, const char *name, size_t len, struct kv_key_info *ki);

/*
 * Stores m's km_len bytes (> 0) as the key's new value. flags: KV_BATCH_*.
 * Returns the bytes stored, or -ENOSPC, -EEXIST, -EISDIR, -ENOENT,
 * -ENOTDIR, -EACCES, -EPERM, or km_copy's error.
 */
int64_t kv_batch_put(struct kv_batch *b, const char *name, size_t len, unsigned flags,
		     const struct kv_batch_mem *m, struct kv_key_info *ki);

/*
 * Before the gets of a batch of n keys (names[i], lens[i] bytes; invalid
 * ones are passed over): with kb_remote's br_prefetch (the shared tier),
 * the keys only it has are brought in together, one br_prefetch per run
 * of keys in the same directory, rather than one after the other by each
 * get. Nothing when n < 2.
 */
void kv_batch_prefetch(struct kv_batch *b, const char *const *names, const size_t *lens,
		       unsigned n);

/*
 * Copies the key's sealed value into m. Returns the bytes copied, or
 * -ENOENT, -EBUSY, -EISDIR, -EINVAL (not a regular file), -EMSGSIZE
 * (ki->kki_size differs from m->km_len), -EACCES, -EIO, or km_copy's error.
 */
int64_t kv_batch_get(struct kv_batch *b, const char *name, size_t len, const struct kv_batch_mem *m,
		     struct kv_key_info *ki);

/*
 * Waits for keys in flight, oldest first: all of them, or (not `all`) as
 * many as leave a slot free and at most KV_BATCH_INFLIGHT_BYTES (or an
 * eighth of the pool) in flight. Publishes each put whose copy landed and
 * lets go of what they held. done(arg, key, err) is called for each, with
 * err 0, the copy's error or the publication's (the key then failed).
 */
void kv_batch_retire(struct kv_batch *b, bool all, void (*done)(void *arg, uint64_t key, int err),
		     void *arg);

/*
 * Removes a key (or a symlink, FIFO or socket: 0 keys), or with recursive
 * a directory and all below it. Returns the number of keys removed, or
 * -ENOENT, -EISDIR (a directory without recursive), -ENOTEMPTY (a
 * directory kept filling while it was emptied), -EACCES, -EPERM (rm -rf
 * stops at what the caller may not remove: what it may stays removed).
 */
int64_t kv_batch_remove(struct kv_batch *b, const char *name, size_t len, bool recursive);

#endif
