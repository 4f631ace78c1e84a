/* SPDX-License-Identifier: MIT */
/*
 * core/inode.h — the object model: inodes, their reference counts and
 * read guards (core/inode.c).
 *
 * Layer. The bottom of the store's layers, above only the values
 * (core/obj.h, core/xmap.h, core/resv.h), the read-ahead buffers, the pool
 * and ssd/: every core module may call it, it calls none of them. From the
 * top down (core/store_int.h):
 *
 *   core/store.c     the namespace (kv_store_*): start, stop, callback tables,
 *                    and its parts: ns.c > attr.c > fallocate.c > write.c >
 *                    quota.c, read.c (core/store_int.h)
 *   core/tier.c      offload, eviction, reads from the SSD, fsync
 *   core/gc.c        compaction and cache-mode eviction  } side by side:
 *   core/persist.c   journal, checkpoints, recovery...    } neither calls the other
 *   core/inode.c     this: inode lifetime, paths, read guards
 *
 * A lower module that must tell an upper one something does it through a
 * callback table the upper one passes down: the namespace gives this one
 * struct kv_inode_ops (what an inode's last reference releases above),
 * persistence struct kv_persist_ns (core/persist.h: recovery rebuilding
 * the namespace), compaction struct kv_gc_ops (core/gc.h).
 *
 * Lifetime. An inode carries one reference count, ki_ref (core/store.h
 * says who holds its units). At zero it is freed with its value: first
 * ks_iops->io_release gives back what the layers above hold for it, then
 * its memory goes. The fields of struct kv_inode and struct kv_store, and
 * which lock guards each, are in core/store_int.h; the lock order across
 * the layers is there too.
 *
 * A read guard (struct kv_read_guard) is what a reader holds between
 * kv_store_read and the end of its reply: a reference to the version read
 * and, while that version is open, its inode's ki_lock shared; the buffers
 * the bytes read from the SSD sit in. kv_read_done releases it all.
 */
#ifndef KVFS_CORE_INODE_H
#define KVFS_CORE_INODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

struct kv_store;
struct kv_inode;
struct kv_cred;
struct kv_obj;
struct kv_ra_buf;

/*
 * Held by a reader between kv_store_read and the end of its reply: a
 * reference to the version read and, when that version is still open, the
 * inode's ki_lock shared. krg_size and krg_seq name the version read, the
 * whole of it, however few of its bytes one read covers.
 */
#define KV_READ_EXTENTS 5 /* extents one read from the SSD covers: 8 MiB at any offset */
struct kv_read_guard {
	struct kv_obj *krg_obj;		/* the DRAM version read, or NULL */
	struct kv_inode *krg_locked;	/* NULL when the version was sealed */
	uint64_t krg_size;		/* the version's size */
	uint64_t krg_seq;		/* its sequence number: 0 while open */
	void *krg_buf[KV_READ_EXTENTS]; /* bytes read from the SSD, one buffer per extent */
	struct kv_ra_buf *krg_ra[KV_READ_EXTENTS]; /* or read ahead: a reference to the buffer
						      (core/readahead.h); both NULL in slot 0:
						      nothing came from the SSD */
};

/* Takes and drops a reference on an inode (one unit of nlookup, or transient). Any lock held. */
void kv_inode_get(struct kv_inode *ino);
void kv_inode_put(struct kv_inode *ino);

/* Releases what a read holds (struct kv_read_guard), after its reply. */
void kv_read_done(struct kv_read_guard *guard);

/* True for directories. Immutable. */
bool kv_inode_is_dir(const struct kv_inode *ino);
/* The S_IFMT bits of ino's type. Immutable. */
mode_t kv_inode_type(const struct kv_inode *ino);
uint64_t kv_inode_ino(const struct kv_inode *ino);

/* --- for core/ only --- */

/*
 * What the object model calls back, passed down by the namespace
 * (core/store.c) in ks_iops before the first inode is made; immutable
 * after.
 */
struct kv_inode_ops {
	/*
	 * ino's last reference is gone, or the store frees it whole at
	 * destroy: gives back what the layers above hold for it (the tier's
	 * queue, clock and read-ahead, its pinned bucket records, the quota
	 * promised to its reserved extents, its bytes in ks_bytes) before the
	 * object model frees its value and memory. None of the store's locks
	 * held.
	 */
	void (*io_release)(struct kv_inode *ino);
};

/* Flags of kv_inode_new. */
enum {
	KV_INODE_OBJ = 1,     /* a regular file gets an empty value in DRAM */
	KV_INODE_NO_TIME = 2, /* times left 0: the caller sets them (recovery's keys) */
};

/*
 * A new inode of st (no reference, no name in any directory yet) named
 * `name` (len bytes, its hash h), kept in the same allocation (ki_iname),
 * owned by cred. A regular file has no value in DRAM without KV_INODE_OBJ
 * (a recovered key's is on the SSD; a put brings its own). Returns 0,
 * -ENOMEM or the pool's error.
 */
int kv_inode_new(struct kv_store *st, mode_t mode, const struct kv_cred *cred, const char *name,
		 size_t len, uint64_t h, unsigned flags, struct kv_inode **out);

/* Frees ino whatever its references (an inode never named, or the store's at destroy). */
void kv_inode_free(struct kv_inode *ino);

/* Drops n references at once (the kernel's lookups, kv_store_forget). */
void kv_inode_put_many(struct kv_inode *ino, uint64_t n);

/*
 * Writes ino's path (relative to the root) into buf; returns its length or
 * -ENAMETOOLONG. ks_ns_lock held.
 */
int kv_inode_path(const struct kv_inode *ino, char *buf, size_t len);

/*
 * Appends "/name" (or "name" at the root: len 0) to a path of len bytes in
 * buf (size bytes). Returns the new length or -ENAMETOOLONG.
 */
int kv_inode_path_join(char *buf, int len, const char *name, size_t size);

/* The wall-clock time an inode's times are stamped with. */
void kv_inode_now(struct timespec *ts);

#endif
