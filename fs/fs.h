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
	/* kf_ctl_lock guards kf_ctl_open: the open handles of .kvfs/stats and config, freed at
	 * their release or, for those the kernel never released, at the end (fs/ops.c). */
	pthread_mutex_t kf_ctl_lock;
	struct ctl_handle *kf_ctl_open;
};

/* Frees the control-file handles still open when the session ended. */
void kv_fs_ctl_close_all(struct kv_fs *fs);

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

/* --- ioctls (fs/ioctl.c) --- */

/* The FUSE ioctl handler: the commands of include/kvfs/kvfs_ioctl.h. */
void kv_fs_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg,
		 struct fuse_file_info *fi, unsigned flags, const void *in_buf, size_t in_bufsz,
		 size_t out_bufsz);

/* The open file with handle fh was closed for good: drops what was registered through it. */
void kv_fs_ioctl_release(struct kv_fs *fs, uint64_t fh);

#endif
