/* SPDX-License-Identifier: MIT */
/*
 * fs/fs.h — the FUSE daemon's shared state and its parts.
 *
 * The daemon serves the FUSE low-level API on a multithreaded loop. Node ids
 * are the addresses of struct kv_inode (the kernel's lookup count keeps each
 * alive, see core/store.h), except FUSE_ROOT_ID for the root and the small
 * fixed ids of the control nodes under MNT/.kvfs (fs/ctl.c). Handlers call
 * core/ and translate its -errno into a reply once, at the edge.
 */
#ifndef KVFS_FS_FS_H
#define KVFS_FS_FS_H

#define FUSE_USE_VERSION 312
#include <pthread.h>
#include <fuse_lowlevel.h>
#include <stdbool.h>

#include "core/config.h"
#include "core/stats.h"
#include "core/store.h"

struct kv_region_table;
struct kv_shared;
struct kv_uring;

struct kv_fs {
	struct kv_config *kf_cfg; /* immutable while mounted */
	struct kv_store *kf_store;
	struct kv_stats kf_stats;
	struct timespec kf_mounted; /* immutable: times of the control nodes */
	/* the ioctl path (fs/ioctl.c); immutable while mounted */
	struct kv_region_table *kf_regions; /* client memory registered by ioctls */
	struct fuse_session *kf_se;	    /* for entry invalidations; NULL before mounting */
	int kf_trace_fd;		    /* --trace=FILE, opened O_APPEND; -1 when off */
	int kf_ready_fd; /* without -f: the pipe the waiting parent reads (fs/main.c); -1 */
	/* kf_open_lock guards kf_open: the open handles with memory of their own (directories'
	 * snapshots, .kvfs/stats and config's renderings), freed at their release or, for those
	 * the kernel never released, at the end (fs/ops.c). */
	pthread_mutex_t kf_open_lock;
	struct fs_handle *kf_open;
	/* cache mode's evicted names, told to the kernel (fs/notify.c); NULL when not mounted */
	struct kv_fs_notify *kf_notify;
	/* the shared tier on RADOS (rados/shared.h); NULL when off. Immutable while mounted */
	struct kv_shared *kf_shared;
	/* the daemon checks permissions, not the kernel (fs/perm.c); immutable */
	bool kf_own_perms;
	/* FUSE over io_uring (fs/uring.h); NULL with --uring=off. Set before the session serves */
	struct kv_uring *kf_uring;
};

/* The node id of a store inode: its address, FUSE_ROOT_ID for the root. */
static inline fuse_ino_t kv_fs_nodeid(struct kv_fs *fs, struct kv_inode *ino)
{
	return ino == kv_store_root(fs->kf_store) ? FUSE_ROOT_ID : (fuse_ino_t)(uintptr_t)ino;
}

/* The store inode of a node id (not a control node's): kv_fs_nodeid's inverse. */
static inline struct kv_inode *kv_fs_inode(struct kv_fs *fs, fuse_ino_t ino)
{
	return ino == FUSE_ROOT_ID ? kv_store_root(fs->kf_store)
				   : (struct kv_inode *)(uintptr_t)ino;
}

/*
 * Frees the handles still open when the session ended: a close just before
 * an unmount may have its release dropped by the kernel.
 */
void kv_fs_close_all(struct kv_fs *fs);

/* The operations table; userdata is the struct kv_fs. */
extern const struct fuse_lowlevel_ops kv_fs_ops;

/* Seconds the kernel may cache entries and attributes: every change goes through it. */
#define KV_FS_TIMEOUT 1.0

/* --- control nodes (fs/ctl.c) --- */

/* Node ids of the control nodes: below any heap address. */
enum {
	KV_CTL_DIR = 2, /* MNT/.kvfs */
	KV_CTL_STATS,	/* MNT/.kvfs/stats */
	KV_CTL_CONFIG,	/* MNT/.kvfs/config */
	KV_CTL_CMD,	/* MNT/.kvfs/ctl: write-only commands (fs/ctl.c) */
	KV_CTL_METRICS, /* MNT/.kvfs/metrics: Prometheus text (fs/metrics.h) */
	KV_CTL__END,
};

static inline bool kv_ctl_is(fuse_ino_t ino)
{
	return ino >= KV_CTL_DIR && ino < KV_CTL__END;
}

/* Fills the entry of a control node. */
void kv_ctl_entry(const struct kv_fs *fs, fuse_ino_t ino, struct fuse_entry_param *e);

/* Looks `name` up in the control directory. Returns the node id, or 0. */
fuse_ino_t kv_ctl_lookup(const char *name);

/* Renders a control file's contents into a malloc'ed buffer. Returns 0 or -errno. */
int kv_ctl_render(struct kv_fs *fs, fuse_ino_t ino, char **buf, size_t *len);

/*
 * MNT/.kvfs/ctl: opening it for writing is for root and the mount's owner
 * only (-EACCES otherwise, and for any read access). Each write is one
 * command; `gc` (a trailing newline allowed) runs a full compaction pass
 * and the write returns when it is done. Returns 0, -EINVAL for an unknown
 * command, or the command's -errno.
 */
int kv_ctl_cmd_open(struct kv_fs *fs, uid_t uid, int flags);
int kv_ctl_cmd(struct kv_fs *fs, const char *buf, size_t len);

/* The names in the control directory, NULL-terminated, in readdir order. */
extern const char *const kv_ctl_names[];

/* --- invalidations of evicted names (fs/notify.c) --- */

struct kv_fs_notify;

/*
 * Starts the thread that tells the kernel about evicted names, on the
 * mounted session se; conn is the mount's device number (its fusectl
 * connection). Install kv_fs_notify_evicted with the result as the store's
 * eviction hook. Returns 0, -ENOMEM or pthread_create's -errno.
 */
int kv_fs_notify_start(struct kv_fs *fs, struct fuse_session *se, unsigned long conn,
		       struct kv_fs_notify **out);

/*
 * The store's eviction hook (kv_store_evicted_fn; arg: the notifier):
 * queues (dir, name) for the thread, never waiting on the kernel. A name
 * that cannot be queued (out of memory, a long backlog, stopping) is
 * counted as dropped: the kernel keeps it until its entry times out.
 */
void kv_fs_notify_evicted(void *arg, struct kv_inode *dir, const char *name);

/* Names sent to the kernel, and names dropped untold, so far. */
void kv_fs_notify_counts(struct kv_fs_notify *n, uint64_t *sent, uint64_t *dropped);

/*
 * Stops the thread once the FUSE loop has ended and the eviction hook is
 * cleared: drops what is queued, waits for a send in flight, aborting the
 * connection if it waits too long (fs/notify.c, "Stopping"). Returns true
 * when the thread is gone and n freed; false when it is still in the
 * kernel: then n and the session are left to it, and the caller must not
 * destroy the session.
 */
bool kv_fs_notify_stop(struct kv_fs_notify *n);

/* --- permissions (fs/perm.c) --- */

/*
 * Who checks permissions. A mount that other users may use (allow_other,
 * allow_root) leaves them to the kernel (default_permissions): it checks
 * every step of every path against the attributes it caches. A mount only
 * its owner may use (the kernel refuses every other caller) checks them
 * here instead, with kf_own_perms set, because default_permissions costs
 * a round trip per name change: the kernel forgets a directory's
 * attributes whenever a name in it changes, and asks for them again
 * before the next create or unlink there, so rm -rf or a stream of puts
 * took two requests per key instead of one. Callers are all the owner
 * then (root, for a mount by root), so what the checks keep is a user's
 * protection from their own mistakes: a read-only file stays unwritable,
 * a read-only directory unchanged. One difference from the kernel's own:
 * search permission is checked when a name is looked up, not again while
 * the kernel keeps the name (KV_FS_TIMEOUT).
 *
 * Each returns 0 when kf_own_perms is off or the caller may, else -EACCES
 * or -EPERM, as the system call would. mask: R_OK | W_OK | X_OK.
 */
int kv_fs_perm(fuse_req_t req, fuse_ino_t ino, int mask);
/* The caller of req as core/perm.h asks: ids, and its supplementary groups from /proc. */
struct kv_cred kv_fs_cred(fuse_req_t req);
/* Opening with open(2)'s flags: read, write (O_TRUNC too) or execute. */
int kv_fs_perm_open(fuse_req_t req, fuse_ino_t ino, int flags);
/* unlink and rmdir of name in dir: write and search on dir, and the sticky bit. */
int kv_fs_perm_delete(fuse_req_t req, fuse_ino_t dir, const char *name);
/* rename: kv_fs_perm_delete on both names; a directory that changes parent needs write. */
int kv_fs_perm_rename(fuse_req_t req, fuse_ino_t dir, const char *name, fuse_ino_t newdir,
		      const char *newname);
/*
 * setattr: chmod by the owner (dropping set-group-ID for a non-member),
 * chown by root (the owner may change the group to one of its own), times
 * by the owner (or "now" by a writer), truncate by name with write
 * permission. May clear S_ISGID in attr->st_mode.
 */
int kv_fs_perm_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		       const struct fuse_file_info *fi);

/* --- ioctls (fs/ioctl.c) --- */

/* The FUSE ioctl handler: the commands of include/kvfs/kvfs_ioctl.h. */
void kv_fs_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg,
		 struct fuse_file_info *fi, unsigned flags, const void *in_buf, size_t in_bufsz,
		 size_t out_bufsz);

/* The open file with handle fh was closed for good: drops what was registered through it. */
void kv_fs_ioctl_release(struct kv_fs *fs, uint64_t fh);

#endif
