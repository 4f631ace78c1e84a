/* SPDX-License-Identifier: MIT */
/*
 * core/store.h — the store: a namespace of keys over versioned values.
 *
 * Every regular file is one key; its path is the key. Directories group
 * keys. An inode holds the file's current value (struct kv_obj); a write to
 * a sealed value swaps in a copy-on-write version, so readers of the old
 * version are never disturbed. A file is sealed at its last close, when its
 * value gets the next global sequence number.
 *
 * Lifetime. An inode carries one reference count, ki_ref, made of:
 * one for its directory entry while it has a name, one per kernel lookup
 * (FUSE nlookup, dropped by kv_store_forget), one per open handle, and
 * transient ones taken by the store itself. At zero — no name, no kernel
 * reference, no open handle — it is freed with its value. So an unlinked
 * or renamed-over file stays readable through the handles opened before.
 *
 * Locks, in the order they are taken:
 *   1. ks_ns_lock (rwlock, one per store): the tree. Guards every
 *      directory's child table (kd_*), every inode's ki_parent, ki_name and
 *      ki_nlink, and the reserved-name rules. Lookups take it shared,
 *      namespace changes exclusive.
 *   2. ki_lock (rwlock, one per inode): the inode's contents. Guards
 *      ki_obj (which version is current, and the bytes of an open one),
 *      ki_mode, ki_uid, ki_gid, ki_atime, ki_mtime, ki_ctime and
 *      ki_nopen. Never held while taking ks_ns_lock.
 * ki_ino, ki_type (the S_IFMT bits) and ki_store are immutable; ki_nlink,
 * ki_ref and the store's counters are atomics.
 *
 * Symlinks, FIFOs and sockets are metadata-only nodes: a name, attributes
 * and, for a symlink, its target (ki_link, immutable from creation). They
 * hold no value, no bucket record and no pool memory, so the tier,
 * compaction and cache-mode eviction never see them; the journal and the
 * checkpoint carry them (KV_J_NODE). They are not keys: the key count, the
 * batch ioctls and salvage (which knows only bucket records) leave them
 * out. The kernel follows symlinks (readlink) and runs FIFOs and sockets
 * itself; the store only names them. Device nodes and hard links are
 * refused with -EPERM: a key has exactly one name and one place in the
 * namespace, so a second name (a hard link) or a node whose contents live
 * in a driver would break that rule.
 *
 * A sealed value is immutable, so a reader that took a reference to it
 * (kv_store_read) reads without any lock; a reader of an open value holds
 * ki_lock shared until its reply is sent (struct kv_read_guard).
 *
 * Every function returns 0 or a negative errno.
 */
#ifndef KVFS_CORE_STORE_H
#define KVFS_CORE_STORE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

#include "core/config.h"
#include "core/inode.h" /* the object model: kv_inode_get/put, struct kv_read_guard */
#include "core/obj.h"
#include "core/pool.h"

#define KV_NAME_MAX 255
/* The name reserved at the root for the control directory. */
#define KV_RESERVED_NAME ".kvfs"
/* The longest symlink target: PATH_MAX bytes with the NUL, as Linux allows. */
#define KV_SYMLINK_MAX 4095

struct kv_store;
struct kv_inode;

/* Where a value lives (xattr user.kvfs.tier). */
enum kv_tier_kind {
	KV_TIER_NONE, /* a directory */
	KV_TIER_DRAM, /* only in DRAM: open, or not yet offloaded */
	KV_TIER_SSD,  /* only on SSD */
	KV_TIER_BOTH, /* durable on SSD, and a clean copy in DRAM */
	KV_TIER_PART, /* durable on SSD, and a clean copy of some of its extents in DRAM */
};

/* What getattr reports. */
struct kv_attr {
	uint64_t ka_ino;
	mode_t ka_mode;
	nlink_t ka_nlink;
	uid_t ka_uid;
	gid_t ka_gid;
	uint64_t ka_size;
	uint64_t ka_alloc; /* bytes of pool memory the value holds */
	uint64_t ka_seq;   /* sequence number of the sealed value, 0 while open */
	enum kv_tier_kind ka_tier;
	struct timespec ka_atime, ka_mtime, ka_ctime;
};

/* Which fields of struct kv_setattr to apply. */
enum {
	KV_SET_MODE = 1 << 0,
	KV_SET_UID = 1 << 1,
	KV_SET_GID = 1 << 2,
	KV_SET_SIZE = 1 << 3,
	KV_SET_ATIME = 1 << 4,
	KV_SET_MTIME = 1 << 5,
	KV_SET_ATIME_NOW = 1 << 6,
	KV_SET_MTIME_NOW = 1 << 7,
};

struct kv_setattr {
	unsigned ksa_valid; /* KV_SET_* */
	mode_t ksa_mode;
	uid_t ksa_uid;
	gid_t ksa_gid;
	uint64_t ksa_size;
	struct timespec ksa_atime, ksa_mtime;
};

/*
 * Who is asking: a new inode takes kc_uid and kc_gid. Permission checks
 * (core/perm.h) also ask kc_in_group(kc_arg, gid) whether a supplementary
 * group is the caller's; NULL: the caller has none.
 */
struct kv_cred {
	uid_t kc_uid;
	gid_t kc_gid;
	bool (*kc_in_group)(void *arg, gid_t gid);
	void *kc_arg;
};

/* One entry of a directory snapshot (kv_store_readdir). */
struct kv_dirent {
	uint64_t kde_ino;
	mode_t kde_type; /* the S_IFMT bits: S_IFDIR, S_IFREG, S_IFLNK, S_IFIFO or S_IFSOCK */
	char *kde_name;
};

struct kv_dir_snap {
	uint32_t kds_count;
	struct kv_dirent *kds_ent;
};

/* The store's counters, sampled for statistics. */
struct kv_store_usage {
	uint64_t ku_keys; /* regular files with a name */
	uint64_t ku_dirs; /* directories, the root included */
	uint64_t ku_symlinks;
	uint64_t ku_specials; /* FIFOs and sockets */
	uint64_t ku_open;
	uint64_t ku_bytes;
	uint64_t ku_last_seq;
	uint64_t ku_inodes;
	/* the SSD tier (all 0 without one) */
	bool ku_ssd;
	uint64_t ku_ssd_used, ku_ssd_cap, ku_ssd_dead, ku_buckets;
	uint64_t ku_ssd_reserved; /* quota promised to unwritten extents (fallocate) */
	uint64_t ku_ssd_written, ku_ssd_read, ku_csum_errors;
	uint64_t ku_backlog_keys, ku_backlog_bytes;
	uint64_t ku_dram_hits, ku_ssd_hits, ku_evictions, ku_promotions;
	uint64_t ku_spilled; /* bytes of files being written sent to the SSD early (spills) */
	uint64_t ku_shared;  /* bytes of records new versions shared with older ones, not written */
	uint64_t ku_offload_errors;
	uint64_t ku_prefetch_bytes; /* bytes read ahead for sequential readers (core/readahead.h) */
	uint64_t ku_prefetch_hits;  /* record pieces reads took from read-ahead buffers */
	uint64_t ku_prefetch_unused; /* bytes read ahead and dropped unused */
	uint64_t ku_recovery_ns, ku_recovered_keys, ku_torn_buckets;
	uint64_t ku_lost_keys; /* keys recovery dropped: their record is missing or unreadable */
};

/*
 * Creates a store with its pool. With a data directory (datadir_fd >= 0)
 * and cfg->kc_ssd_size > 0 it also opens the SSD tier there and recovers
 * what it holds: checkpoint, journal, bucket tails. cfg must outlive the
 * store. Returns 0, -ENOMEM, the pool's error, or the recovery's.
 */
int kv_store_create(struct kv_store **out, const struct kv_config *cfg, int datadir_fd);

/*
 * Offloads every dirty value, writes a checkpoint, and frees everything.
 * No other call may run concurrently or after. Returns how many keys had
 * a newest value that could not be made durable (the SSD was full, or an
 * I/O error): those are lost with the DRAM. 0 without an SSD tier.
 */
uint64_t kv_store_destroy(struct kv_store *st);

struct kv_inode *kv_store_root(struct kv_store *st);
struct kv_pool *kv_store_pool(struct kv_store *st);
void kv_store_usage(struct kv_store *st, struct kv_store_usage *u);
/* The last sequence number handed out (ku_last_seq alone, without the tier's counts). */
uint64_t kv_store_last_seq(struct kv_store *st);

/*
 * --fsck: recovers DATA_DIR as a start would (cutting torn tails, removing
 * orphan buckets), then reads and checks every record and every key's
 * value, and reports to `out`. Returns 0 when nothing is damaged, 1 when
 * something is, or -errno when it could not look.
 */
int kv_store_fsck(const struct kv_config *cfg, int datadir_fd, FILE *out);

/*
 * --salvage: rebuilds the metadata from the bucket records alone (the
 * newest record of each key wins; deletes since the records were written
 * are lost, so deleted keys may come back) and replaces checkpoint and
 * journal. Returns 0 or -errno.
 */
int kv_store_salvage(const struct kv_config *cfg, int datadir_fd, FILE *out);

/* Drops n kernel lookup references. */
void kv_store_forget(struct kv_store *st, struct kv_inode *ino, uint64_t n);

/*
 * Finds name in dir. On success takes a reference on the child, sets *out
 * and fills *attr. -ENOENT, -ENOTDIR, -ENAMETOOLONG.
 */
int kv_store_lookup(struct kv_store *st, struct kv_inode *dir, const char *name,
		    struct kv_inode **out, struct kv_attr *attr);

int kv_store_getattr(struct kv_store *st, struct kv_inode *ino, struct kv_attr *attr);

/*
 * Applies the fields named in sa->ksa_valid. A size change on a sealed value
 * makes a new version (copy-on-write of the kept prefix). -ENOSPC, -EISDIR
 * for a size change on a directory, -EFBIG for a size past KV_MAX_VALUE
 * (16 TiB, core/obj.h).
 */
int kv_store_setattr(struct kv_store *st, struct kv_inode *ino, const struct kv_setattr *sa,
		     struct kv_attr *attr);

/*
 * Creates a directory (mkdir) or a node (mknod), owned by cred, with mode
 * (umask already applied by the caller). mkdir ignores mode's type bits;
 * mknod makes an empty regular file for S_IFREG (or no type bits), a FIFO
 * for S_IFIFO, a socket for S_IFSOCK, and refuses device nodes (S_IFCHR,
 * S_IFBLK) with -EPERM, any other type with -EINVAL. Takes a reference on
 * the new inode. -EEXIST, -ENAMETOOLONG, -ENOTDIR, -EPERM for the reserved
 * name at the root, -ENOENT when dir was removed.
 */
int kv_store_mkdir(struct kv_store *st, struct kv_inode *dir, const char *name, mode_t mode,
		   const struct kv_cred *cred, struct kv_inode **out, struct kv_attr *attr);
int kv_store_mknod(struct kv_store *st, struct kv_inode *dir, const char *name, mode_t mode,
		   const struct kv_cred *cred, struct kv_inode **out, struct kv_attr *attr);

/*
 * Creates a regular file and opens it in one step (FUSE create): as
 * kv_store_mknod, and counts an open handle as kv_store_open does.
 */
int kv_store_create_open(struct kv_store *st, struct kv_inode *dir, const char *name, mode_t mode,
			 const struct kv_cred *cred, struct kv_inode **out, struct kv_attr *attr);

/*
 * Creates a symlink to target (1..KV_SYMLINK_MAX bytes, stored as given,
 * never resolved by the store), mode 0777, owned by cred; journaled like
 * mkdir. Takes a reference on the new inode. -ENOENT for an empty target,
 * -ENAMETOOLONG, and the errors of kv_store_mkdir.
 */
int kv_store_symlink(struct kv_store *st, struct kv_inode *dir, const char *name,
		     const char *target, const struct kv_cred *cred, struct kv_inode **out,
		     struct kv_attr *attr);

/*
 * Sets *target to a symlink's target, valid while the caller holds a
 * reference on ino (it never changes). -EINVAL when ino is not a symlink.
 */
int kv_store_readlink(struct kv_store *st, struct kv_inode *ino, const char **target);

/* Removes a non-directory's name. -ENOENT, -EISDIR, -EPERM for the reserved name. */
int kv_store_unlink(struct kv_store *st, struct kv_inode *dir, const char *name);

/* Removes an empty directory. -ENOENT, -ENOTDIR, -ENOTEMPTY. */
int kv_store_rmdir(struct kv_store *st, struct kv_inode *dir, const char *name);

/*
 * Renames atomically. flags: 0 (replace a file, or an empty directory),
 * RENAME_NOREPLACE (-EEXIST if the target exists), RENAME_EXCHANGE (swap;
 * -ENOENT if either is missing). -EINVAL for moving a directory into
 * itself, -ENOTEMPTY, -EISDIR/-ENOTDIR for a type mismatch.
 */
int kv_store_rename(struct kv_store *st, struct kv_inode *odir, const char *oname,
		    struct kv_inode *ndir, const char *nname, unsigned flags);

/*
 * Opens a regular file: counts an open handle (taking a reference). With
 * O_TRUNC, the value is emptied as a new version. Pair with kv_store_release.
 * -EISDIR, -EINVAL for a symlink, FIFO or socket (the kernel opens those
 * itself and never asks).
 */
int kv_store_open(struct kv_store *st, struct kv_inode *ino, int flags);

/*
 * Closes a handle; the last close seals the value (giving it the next
 * sequence number) if it is open. Drops the handle's reference.
 */
void kv_store_release(struct kv_store *st, struct kv_inode *ino, int flags);

/*
 * Describes up to len bytes at off as iovecs into the current version and
 * fills *guard; the caller replies and then calls kv_read_done(). Returns
 * the number of iovecs (0 at or past the end) and sets *bytes. Fewer bytes
 * than asked before the end only when maxiov runs out, or when the value
 * is read from the SSD and the range spans more than KV_READ_EXTENTS
 * extents (a read of at most 8 MiB never does).
 */
int kv_store_read(struct kv_store *st, struct kv_inode *ino, uint64_t off, uint64_t len,
		  struct iovec *iov, int maxiov, uint64_t *bytes, struct kv_read_guard *guard);

/*
 * When the file's current value lives only on the SSD and is len bytes (a
 * multiple of 4 KiB), reads it, verified, straight into iov: n pieces of
 * memory aligned to 4 KiB, covering len (O_DIRECT lands there, no bounce
 * buffer). A checksum mismatch leaves unverified bytes there and returns
 * -EIO. Returns 0, or -EAGAIN when the value is (also) in DRAM, has
 * another size, or reads promote it: read it with kv_store_read then.
 */
int kv_store_read_direct(struct kv_store *st, struct kv_inode *ino, const struct iovec *iov, int n,
			 uint64_t len);

/*
 * Writes len bytes at off; a write to a sealed value makes a new version
 * first. Returns 0, -ENOSPC (pool full; nothing written), -EISDIR, -EFBIG
 * when it would end past KV_MAX_VALUE (nothing written).
 */
int kv_store_write(struct kv_store *st, struct kv_inode *ino, uint64_t off, const void *buf,
		   size_t len);

/*
 * Makes the file durable: its bytes so far become a sealed version (a put),
 * and the call returns once that version and the metadata that finds it
 * are on the SSD. A directory: waits for the journal. The mount's root:
 * everything sealed so far, values and journal (what syncfs would do,
 * which libfuse 3.14 does not pass on). Without an SSD tier a file's
 * version is sealed and 0 returned at once. Returns 0, -ENOSPC when the
 * SSD is full, -EIO.
 */
int kv_store_fsync(struct kv_store *st, struct kv_inode *ino);

/*
 * Makes an open, unnamed value of len bytes for kv_store_publish, its
 * bytes not yet written: the caller fills all of them (kv_obj_iov) first.
 * Its room in the pool and on the SSD (README "SSD full") is taken now,
 * waiting for room as a write does. dir and name (dir may be NULL) say
 * where it is meant to go: at a full quota it may count on the durable
 * bytes of the key it replaces there, as an overwrite does. Returns 0,
 * -ENOSPC, -ENOMEM, or -EFBIG past KV_MAX_VALUE.
 */
int kv_store_value_new(struct kv_store *st, uint64_t len, struct kv_inode *dir, const char *name,
		       struct kv_obj **out);

/*
 * Pool memory for len bytes in transit (a get's staging), in the shape of
 * a value (kv_obj_iov) but never stored: nothing is promised on the SSD.
 * Waits for room in the pool as a write does. Returns as kv_store_value_new.
 */
int kv_store_stage_new(struct kv_store *st, uint64_t len, struct kv_obj **out);

/*
 * Stores obj (from kv_store_value_new, filled) as the value of a new
 * regular file `name` in dir, owned by cred, mode 0644, exactly as writing
 * a temporary file and renaming it over `name` would: the value is sealed
 * with the next sequence number and queued for the SSD; a file that had
 * the name loses it (its open handles keep its bytes, its SSD record
 * becomes dead space). The file appears named and sealed at once. Takes
 * over the caller's reference to obj, also on failure. With out, takes a
 * reference on the new inode for the caller (kv_inode_put) and sets *out.
 * Returns 0 for a
 * new name, 1 when it replaced a file, or -EEXIST (noreplace
 * and the name exists), -EISDIR (a directory has it), -ENOENT or -ENOTDIR
 * (dir), -EPERM (the reserved name), -ENAMETOOLONG.
 */
int kv_store_publish(struct kv_store *st, struct kv_inode *dir, const char *name,
		     struct kv_obj *obj, const struct kv_cred *cred, bool noreplace,
		     struct kv_inode **out);

/*
 * fallocate: mode 0 or FALLOC_FL_KEEP_SIZE (the bytes become unwritten:
 * zeros, no memory until written), FALLOC_FL_PUNCH_HOLE | KEEP_SIZE (the
 * range reads as zeros, whole extents of it free). -EOPNOTSUPP for other
 * modes, -ENOSPC, -EFBIG past KV_MAX_VALUE.
 */
int kv_store_fallocate(struct kv_store *st, struct kv_inode *ino, int mode, uint64_t off,
		       uint64_t len);

/*
 * lseek SEEK_DATA / SEEK_HOLE (whence) from off, with extent (2 MiB)
 * granularity: holes and unwritten extents are holes, the end of the file
 * is a hole. Sets *out. -ENXIO at or past the end (and for SEEK_DATA when
 * only holes follow).
 */
int kv_store_seek(struct kv_store *st, struct kv_inode *ino, uint64_t off, int whence,
		  uint64_t *out);

/* Takes a snapshot of a directory's entries (without "." and ".."). */
int kv_store_readdir(struct kv_store *st, struct kv_inode *dir, struct kv_dir_snap *snap);
void kv_dir_snap_free(struct kv_dir_snap *snap);

/* --- compaction (core/gc.h) --- */

/*
 * Told after cache mode evicted a key (core/gc.h): `name` is gone from
 * `dir`, as after an unlink nobody asked for, so whoever caches names (the
 * daemon: the kernel's dentries) can drop it. Called from the thread
 * running the compaction pass, with no ks_ns_lock, ki_lock or tier lock
 * held (the pass's kg_pass_lock is) and the hook's own ks_evict_lock held
 * across the call. dir is referenced, and name valid, for the call only.
 * The hook must return soon, must not wait for anything a FUSE request or
 * a pass may hold, and must not call the store: copy and queue.
 */
typedef void (*kv_store_evicted_fn)(void *arg, struct kv_inode *dir, const char *name);

/*
 * Sets the eviction hook (fn NULL: none, as after kv_store_create).
 * Thread-safe; when it returns, no call of the previous hook is running or
 * will start, so its arg may be freed.
 */
void kv_store_set_evicted(struct kv_store *st, kv_store_evicted_fn fn, void *arg);

/*
 * Hooks for the shared tier (rados/shared.h), set before the store serves
 * (kv_store_set_hooks, not thread-safe; NULL members: none).
 *
 * kh_sealed: a named file's value was sealed (its last close, fsync, a
 * publish); it has sequence number seq and size bytes. Called with the
 * inode's ki_lock held exclusive and maybe ks_ns_lock: the hook must take
 * no lock of the store, call nothing of it but kv_inode_get, and return at
 * once (copy and queue).
 *
 * kh_changed: a caller of kv_store_mkdir, _symlink, _unlink, _rmdir or
 * _rename (never recovery, cache mode or compaction) changed the
 * namespace: `name` in `dir` (and, for a rename, its new place `name2` in
 * `dir2`; for an unlink, dir2 is the inode that lost the name, name2
 * NULL). Called after the change, in the caller's thread, with no lock of
 * the store held; dir and dir2 are referenced for the call. The hook may
 * call the store.
 */
enum kv_store_change {
	KV_CHANGE_MKDIR,
	KV_CHANGE_SYMLINK,
	KV_CHANGE_UNLINK,
	KV_CHANGE_RMDIR,
	KV_CHANGE_RENAME
};

struct kv_store_hooks {
	void (*kh_sealed)(void *arg, struct kv_inode *ino, uint64_t seq, uint64_t size);
	void (*kh_changed)(void *arg, enum kv_store_change what, struct kv_inode *dir,
			   const char *name, struct kv_inode *dir2, const char *name2);
	void *kh_arg;
};

/* Sets the hooks (copied); NULL: none. Before the store serves. */
void kv_store_set_hooks(struct kv_store *st, const struct kv_store_hooks *h);

/*
 * Sets *out to ino's path from the root ("/" for the root, "/a/b"),
 * malloc'ed. -ENOENT when ino, or a directory above it, has no name.
 */
int kv_store_path_of(struct kv_store *st, struct kv_inode *ino, char **out);

struct kv_gc_stats;

/*
 * Runs one full compaction pass over every bucket with a dead byte and
 * returns when it is done (MNT/.kvfs/ctl `gc`). 0 at once without an SSD
 * tier. Returns 0 or -errno.
 */
int kv_store_gc(struct kv_store *st);

/* The compactor's counters; false (and nothing filled) without an SSD tier. */
bool kv_store_gc_stats(struct kv_store *st, struct kv_gc_stats *out);

#endif
