/* SPDX-License-Identifier: MIT */
/*
 * fs/ops.c — the FUSE low-level operations.
 *
 * Each handler resolves node ids, calls core/, replies, and counts the
 * operation in the stats (latency from arrival to reply). Errors from core/
 * are -errno and are turned into fuse_reply_err() here and only here.
 *
 * File handles: a regular file's fh is only a unique odd tag (the node id
 * names the inode, whose open count core/ keeps); a directory's fh is a
 * struct fs_handle holding a snapshot of its entries, taken at opendir and
 * retaken when a reader seeks back to 0; a readable control file's fh is
 * its rendered contents, the command file's a tag of its own. Whatever it
 * is, fs/ioctl.c ties the regions registered through an open file to its
 * fh (unique while that file is open), and each release lets go of them.
 *
 * Page cache: regular files are opened with keep_cache, since every change
 * to a file reaches the store through this same kernel, which keeps its
 * cache in step. Reads are answered with fuse_reply_iov() straight from the
 * pool's memory: no copy in the daemon.
 */
#include "fs/fs.h"
#include "fs/uring.h"
#include "rados/shared.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define MAX_IO (1u << 20)
/* A 1 MiB read over pages of separate extents needs at most this many iovecs. */
#define READ_IOV   (MAX_IO / KV_PAGE_SIZE + 2)
#define SEQ_XATTR  "user.kvfs.seq"
#define TIER_XATTR "user.kvfs.tier"

/*
 * A handle with memory of its own (fi->fh is its address), on fs->kf_open
 * from its open to its release: a directory's snapshot of its entries, or
 * an open .kvfs/stats or config's rendering.
 */
struct fs_handle {
	struct fs_handle *h_prev, *h_next; /* kf_open_lock */
	bool h_dir;
	union {
		struct {
			struct kv_dir_snap dh_snap;
			bool dh_valid;
		}; /* h_dir */
		struct {
			char *ch_buf;
			size_t ch_len;
		};
	};
};

static struct fs_handle *handle_new(struct kv_fs *fs, bool dir)
{
	struct fs_handle *h = calloc(1, sizeof(*h));

	if (!h)
		return NULL;
	h->h_dir = dir;
	pthread_mutex_lock(&fs->kf_open_lock);
	h->h_next = fs->kf_open;
	if (h->h_next)
		h->h_next->h_prev = h;
	fs->kf_open = h;
	pthread_mutex_unlock(&fs->kf_open_lock);
	return h;
}

static void handle_free(struct kv_fs *fs, struct fs_handle *h)
{
	pthread_mutex_lock(&fs->kf_open_lock);
	if (h->h_prev)
		h->h_prev->h_next = h->h_next;
	else
		fs->kf_open = h->h_next;
	if (h->h_next)
		h->h_next->h_prev = h->h_prev;
	pthread_mutex_unlock(&fs->kf_open_lock);
	if (h->h_dir)
		kv_dir_snap_free(&h->dh_snap);
	else
		free(h->ch_buf);
	free(h);
}

void kv_fs_close_all(struct kv_fs *fs)
{
	while (fs->kf_open)
		handle_free(fs, fs->kf_open);
}

static struct kv_fs *fs_of(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static void done(fuse_req_t req, enum kv_op op, uint64_t t0, uint64_t bytes, int err)
{
	kv_stats_op(&fs_of(req)->kf_stats, op, t0, bytes, err);
}

/* Replies with -err and counts it. */
static void reply_err(fuse_req_t req, enum kv_op op, uint64_t t0, int err)
{
	done(req, op, t0, 0, err);
	fuse_reply_err(req, -err);
}

static void to_stat(const struct kv_attr *a, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = a->ka_ino;
	st->st_mode = a->ka_mode;
	st->st_nlink = a->ka_nlink;
	st->st_uid = a->ka_uid;
	st->st_gid = a->ka_gid;
	st->st_size = (off_t)a->ka_size;
	st->st_blksize = KV_PAGE_SIZE;
	st->st_blocks = (blkcnt_t)(a->ka_alloc / 512);
	st->st_atim = a->ka_atime;
	st->st_mtim = a->ka_mtime;
	st->st_ctim = a->ka_ctime;
}

/*
 * Seconds the kernel may keep names and attributes: KV_FS_TIMEOUT, or the
 * shared tier's --rados-cache-ttl when shorter (names change elsewhere).
 */
static double cache_timeout(const struct kv_fs *fs)
{
	double ttl = fs->kf_cfg->kc_rados_cache_ttl_ns / 1e9;

	return fs->kf_shared && ttl < KV_FS_TIMEOUT ? ttl : KV_FS_TIMEOUT;
}

/* With --rados-sync, a namespace change returns once the cluster has it (or after the timeout). */
static void shared_sync(struct kv_fs *fs)
{
	if (fs->kf_shared && kv_shared_sync_on(fs->kf_shared))
		kv_shared_sync(fs->kf_shared);
}

static void to_entry(struct kv_fs *fs, struct kv_inode *ino, const struct kv_attr *a,
		     struct fuse_entry_param *e)
{
	memset(e, 0, sizeof(*e));
	e->ino = kv_fs_nodeid(fs, ino);
	e->attr_timeout = cache_timeout(fs);
	e->entry_timeout = cache_timeout(fs);
	to_stat(a, &e->attr);
}

static void kv_init(void *userdata, struct fuse_conn_info *conn)
{
	struct kv_fs *fs = userdata;

	conn->max_write = MAX_IO;
	conn->max_readahead = MAX_IO;
	conn->max_background = 2 * fs->kf_cfg->kc_threads;
	conn->congestion_threshold = conn->max_background * 3 / 4;
	if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC)
		conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
	/* A symlink's target never changes: the kernel may keep it in its page cache. */
	if (conn->capable & FUSE_CAP_CACHE_SYMLINKS)
		conn->want |= FUSE_CAP_CACHE_SYMLINKS;
	conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
	/*
	 * Every directory listing is a READDIRPLUS, not just the first: the
	 * names and attributes it returns fill the kernel's caches, so a
	 * tree walk (rm -rf, find, du) costs one request per directory page
	 * instead of a LOOKUP and a GETATTR per name. The attributes are in
	 * memory: a plus costs the daemon next to nothing.
	 */
	if (conn->capable & FUSE_CAP_READDIRPLUS)
		conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
}

static void kv_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	uint64_t t0 = kv_now_ns();
	struct kv_fs *fs = fs_of(req);
	struct fuse_entry_param e;
	struct kv_inode *ino;
	struct kv_attr a;
	int err;

	if (kv_ctl_is(parent)) {
		fuse_ino_t id = parent == KV_CTL_DIR ? kv_ctl_lookup(name) : 0;

		if (id && (err = kv_fs_perm(req, parent, X_OK)))
			return reply_err(req, KV_OP_LOOKUP, t0, err);
		if (!id)
			return reply_err(req, KV_OP_LOOKUP, t0,
					 parent == KV_CTL_DIR ? -ENOENT : -ENOTDIR);
		kv_ctl_entry(fs, id, &e);
		done(req, KV_OP_LOOKUP, t0, 0, 0);
		fuse_reply_entry(req, &e);
		return;
	}
	err = kv_fs_perm(req, parent, X_OK);
	if (err)
		return reply_err(req, KV_OP_LOOKUP, t0, err);
	if (parent == FUSE_ROOT_ID && !strcmp(name, KV_RESERVED_NAME)) {
		kv_ctl_entry(fs, KV_CTL_DIR, &e);
		done(req, KV_OP_LOOKUP, t0, 0, 0);
		fuse_reply_entry(req, &e);
		return;
	}
	/* The shared tier first: it may bring the name in, or drop a stale copy. */
	err = fs->kf_shared ? kv_shared_lookup(fs->kf_shared, kv_fs_inode(fs, parent), name) : 0;
	if (!err)
		err = kv_store_lookup(fs->kf_store, kv_fs_inode(fs, parent), name, &ino, &a);
	if (err)
		return reply_err(req, KV_OP_LOOKUP, t0, err);
	to_entry(fs, ino, &a, &e);
	done(req, KV_OP_LOOKUP, t0, 0, 0);
	if (fuse_reply_entry(req, &e))
		kv_store_forget(fs->kf_store, ino, 1);
}

static void forget_one(struct kv_fs *fs, fuse_ino_t ino, uint64_t n)
{
	if (ino == FUSE_ROOT_ID || kv_ctl_is(ino))
		return;
	kv_store_forget(fs->kf_store, kv_fs_inode(fs, ino), n);
}

static void kv_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	forget_one(fs_of(req), ino, nlookup);
	fuse_reply_none(req);
}

static void kv_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	for (size_t i = 0; i < count; i++)
		forget_one(fs_of(req), forgets[i].ino, forgets[i].nlookup);
	fuse_reply_none(req);
}

static void kv_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	uint64_t t0 = kv_now_ns();
	struct kv_fs *fs = fs_of(req);
	struct fuse_entry_param e;
	struct kv_attr a;
	struct stat st;

	if (kv_ctl_is(ino)) {
		kv_ctl_entry(fs, ino, &e);
		done(req, KV_OP_GETATTR, t0, 0, 0);
		fuse_reply_attr(req, &e.attr, cache_timeout(fs));
		return;
	}
	kv_store_getattr(fs->kf_store, kv_fs_inode(fs, ino), &a);
	to_stat(&a, &st);
	done(req, KV_OP_GETATTR, t0, 0, 0);
	fuse_reply_attr(req, &st, cache_timeout(fs));
}

static void kv_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		       struct fuse_file_info *fi)
{
	uint64_t t0 = kv_now_ns();
	struct kv_fs *fs = fs_of(req);
	struct kv_setattr sa = {0};
	struct kv_attr a;
	struct stat st;
	int err;

	if (kv_ctl_is(ino))
		return reply_err(req, KV_OP_SETATTR, t0, -EPERM);
	err = kv_fs_perm_setattr(req, ino, attr, to_set, fi);
	if (err)
		return reply_err(req, KV_OP_SETATTR, t0, err);
	if (to_set & FUSE_SET_ATTR_MODE) {
		sa.ksa_valid |= KV_SET_MODE;
		sa.ksa_mode = attr->st_mode;
	}
	if (to_set & FUSE_SET_ATTR_UID) {
		sa.ksa_valid |= KV_SET_UID;
		sa.ksa_uid = attr->st_uid;
	}
	if (to_set & FUSE_SET_ATTR_GID) {
		sa.ksa_valid |= KV_SET_GID;
		sa.ksa_gid = attr->st_gid;
	}
	if (to_set & FUSE_SET_ATTR_SIZE) {
		sa.ksa_valid |= KV_SET_SIZE;
		sa.ksa_size = (uint64_t)attr->st_size;
	}
	if (to_set & FUSE_SET_ATTR_ATIME) {
		sa.ksa_valid |= KV_SET_ATIME;
		sa.ksa_atime = attr->st_atim;
	}
	if (to_set & FUSE_SET_ATTR_ATIME_NOW)
		sa.ksa_valid |= KV_SET_ATIME | KV_SET_ATIME_NOW;
	if (to_set & FUSE_SET_ATTR_MTIME) {
		sa.ksa_valid |= KV_SET_MTIME;
		sa.ksa_mtime = attr->st_mtim;
	}
	if (to_set & FUSE_SET_ATTR_MTIME_NOW)
		sa.ksa_valid |= KV_SET_MTIME | KV_SET_MTIME_NOW;
	err = kv_store_setattr(fs->kf_store, kv_fs_inode(fs, ino), &sa, &a);
	if (err)
		return reply_err(req, KV_OP_SETATTR, t0, err);
	to_stat(&a, &st);
	done(req, KV_OP_SETATTR, t0, 0, 0);
	fuse_reply_attr(req, &st, cache_timeout(fs));
}

/* Replies to a call that made a new node: an entry, or an error. */
static void reply_new(fuse_req_t req, enum kv_op op, uint64_t t0, int err, struct kv_inode *ino,
		      const struct kv_attr *a)
{
	struct kv_fs *fs = fs_of(req);
	struct fuse_entry_param e;

	if (err)
		return reply_err(req, op, t0, err);
	to_entry(fs, ino, a, &e);
	done(req, op, t0, 0, 0);
	if (fuse_reply_entry(req, &e))
		kv_store_forget(fs->kf_store, ino, 1);
}

static void kv_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	uint64_t t0 = kv_now_ns();
	struct kv_fs *fs = fs_of(req);
	struct kv_cred c = kv_fs_cred(req);
	struct kv_inode *ino = NULL;
	struct kv_attr a;
	int err;

	if (kv_ctl_is(parent))
		return reply_err(req, KV_OP_MKDIR, t0, -EPERM);
	err = kv_fs_perm(req, parent, W_OK | X_OK);
	if (err)
		return reply_err(req, KV_OP_MKDIR, t0, err);
	err = kv_store_mkdir(fs->kf_store, kv_fs_inode(fs, parent), name, mode, &c, &ino, &a);
	if (!err)
		shared_sync(fs);
	reply_new(req, KV_OP_MKDIR, t0, err, ino, &a);
}

/*
 * A regular file, a FIFO or a socket (bind() of a Unix socket comes here).
 * The kernel runs FIFOs and sockets itself: opening one never reaches the
 * daemon. Device nodes are refused (core/store.h says why).
 */
static void kv_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	enum kv_op op = S_ISREG(mode) ? KV_OP_CREATE : KV_OP_MKNOD;
	uint64_t t0 = kv_now_ns();
	struct kv_fs *fs = fs_of(req);
	struct kv_cred c = kv_fs_cred(req);
	struct kv_inode *ino = NULL;
	struct kv_attr a;
	int err;

	if (kv_ctl_is(parent))
		return reply_err(req, op, t0, -EPERM);
	err = kv_fs_perm(req, parent, W_OK | X_OK);
	if (err)
		return reply_err(req, op, t0, err);
	err = kv_store_mknod(fs->kf_store, kv_fs_inode(fs, parent), name, mode, &c, &ino, &a);
	reply_new(req, op, t0, err, ino, &a);
}

static void kv_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	uint64_t t0 = kv_now_ns();
	struct kv_fs *fs = fs_of(req);
	struct kv_cred c = kv_fs_cred(req);
	struct kv_inode *ino = NULL;
	struct kv_attr a;
	int err;

	if (kv_ctl_is(parent))
		return reply_err(req, KV_OP_SYMLINK, t0, -EPERM);
	err = kv_fs_perm(req, parent, W_OK | X_OK);
	if (err)
		return reply_err(req, KV_OP_SYMLINK, t0, err);
	err = kv_store_symlink(fs->kf_store, kv_fs_inode(fs, parent), name, link, &c, &ino, &a);
	if (!err)
		shared_sync(fs);
	reply_new(req, KV_OP_SYMLINK, t0, err, ino, &a);
}

static void kv_readlink(fuse_req_t req, fuse_ino_t ino)
{
	uint64_t t0 = kv_now_ns();
	const char *target;
	int err = -EINVAL;

	if (!kv_ctl_is(ino))
		err =
		    kv_store_readlink(fs_of(req)->kf_store, kv_fs_inode(fs_of(req), ino), &target);
	if (err)
		return reply_err(req, KV_OP_READLINK, t0, err);
	done(req, KV_OP_READLINK, t0, 0, 0);
	fuse_reply_readlink(req, target);
}

/* A key has exactly one name: no hard links (core/store.h). */
static void kv_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	reply_err(req, KV_OP_OTHER, kv_now_ns(), -EPERM);
}

static void kv_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	uint64_t t0 = kv_now_ns();
	struct kv_fs *fs = fs_of(req);
	int err = -EPERM;

	if (!kv_ctl_is(parent))
		err = kv_fs_perm_delete(req, parent, name);
	if (!err)
		err = kv_store_unlink(fs->kf_store, kv_fs_inode(fs, parent), name);
	if (err)
		return reply_err(req, KV_OP_UNLINK, t0, err);
	shared_sync(fs);
	done(req, KV_OP_UNLINK, t0, 0, 0);
	fuse_reply_err(req, 0);
}

/* A directory that holds keys only the shared tier has is not empty: -ENOTEMPTY. */
static int shared_rmdir_check(struct kv_fs *fs, fuse_ino_t parent, const char *name)
{
	struct kv_dir_snap snap = {0};
	struct kv_inode *dir;
	struct kv_attr a;
	int err;

	if (!fs->kf_shared ||
	    kv_store_lookup(fs->kf_store, kv_fs_inode(fs, parent), name, &dir, &a))
		return 0; /* the rmdir says why */
	err = kv_store_readdir(fs->kf_store, dir, &snap);
	if (!err && !snap.kds_count)
		err = kv_shared_readdir(fs->kf_shared, dir, &snap);
	if (!err && snap.kds_count)
		err = -ENOTEMPTY;
	kv_dir_snap_free(&snap);
	kv_inode_put(dir);
	return err == -ENOTDIR ? 0 : err;
}

static void kv_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	uint64_t t0 = kv_now_ns();
	struct kv_fs *fs = fs_of(req);
	int err = -EPERM;

	if (!kv_ctl_is(parent))
		err = kv_fs_perm_delete(req, parent, name);
	if (!err)
		err = shared_rmdir_check(fs, parent, name);
	if (!err)
		err = kv_store_rmdir(fs->kf_store, kv_fs_inode(fs, parent), name);
	if (err)
		return reply_err(req, KV_OP_RMDIR, t0, err);
	shared_sync(fs);
	done(req, KV_OP_RMDIR, t0, 0, 0);
	fuse_reply_err(req, 0);
}

/*
 * The shared tier names directories by their path (rados/rados_format.h):
 * renaming one, or exchanging two names, would move every key below in
 * the cluster. Refused with -EXDEV, as between filesystems: mv copies and
 * deletes instead.
 */
static int shared_rename_check(struct kv_fs *fs, fuse_ino_t parent, const char *name,
			       unsigned flags)
{
	struct kv_inode *ino;
	struct kv_attr a;

	if (!fs->kf_shared)
		return 0;
	if (flags & RENAME_EXCHANGE)
		return -EXDEV;
	if (kv_store_lookup(fs->kf_store, kv_fs_inode(fs, parent), name, &ino, &a))
		return 0; /* the rename says why */
	kv_inode_put(ino);
	return S_ISDIR(a.ka_mode) ? -EXDEV : 0;
}

static void kv_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
		      const char *newname, unsigned int flags)
{
	uint64_t t0 = kv_now_ns();
	struct kv_fs *fs = fs_of(req);
	int err = -EPERM;

	if (!kv_ctl_is(parent) && !kv_ctl_is(newparent))
		err = kv_fs_perm_rename(req, parent, name, newparent, newname);
	if (!err)
		err = shared_rename_check(fs, parent, name, flags);
	if (!err)
		err = kv_store_rename(fs->kf_store, kv_fs_inode(fs, parent), name,
				      kv_fs_inode(fs, newparent), newname, flags);
	if (err)
		return reply_err(req, KV_OP_RENAME, t0, err);
	shared_sync(fs);
	done(req, KV_OP_RENAME, t0, 0, 0);
	fuse_reply_err(req, 0);
}

/*
 * Tags of open handles that have no memory of their own (regular files,
 * the command file), for fs/ioctl.c: unique, and odd, so never a handle's
 * address.
 */
static uint64_t new_tag(void)
{
	static _Atomic uint64_t next_tag;

	return atomic_fetch_add_explicit(&next_tag, 1, memory_order_relaxed) * 2 + 1;
}

/*
 * Regular files' open flags. FLUSH (sent when close(2) is called) is asked
 * for only with --rados-sync, on handles open for writing: kv_flush then
 * makes close-to-open hold across nodes.
 */
static void set_open_flags(struct kv_fs *fs, struct fuse_file_info *fi)
{
	fi->fh = new_tag();
	fi->keep_cache = 1;
	fi->noflush = !(fs->kf_shared && kv_shared_sync_on(fs->kf_shared) &&
			(fi->flags & O_ACCMODE) != O_RDONLY);
	fi->direct_io = 0;
}

static void kv_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		      struct fuse_file_info *fi)
{
	uint64_t t0 = kv_now_ns();
	struct kv_fs *fs = fs_of(req);
	struct kv_cred c = kv_fs_cred(req);
	struct fuse_entry_param e;
	struct kv_inode *ino;
	struct kv_attr a;
	int err = -EPERM;

	if (!kv_ctl_is(parent))
		err = kv_fs_perm(req, parent, W_OK | X_OK);
	if (!err)
		err = kv_store_create_open(fs->kf_store, kv_fs_inode(fs, parent), name, mode, &c,
					   &ino, &a);
	if (err)
		return reply_err(req, KV_OP_CREATE, t0, err);
	to_entry(fs, ino, &a, &e);
	set_open_flags(fs, fi);
	done(req, KV_OP_CREATE, t0, 0, 0);
	if (fuse_reply_create(req, &e, fi)) {
		kv_store_release(fs->kf_store, ino, fi->flags);
		kv_store_forget(fs->kf_store, ino, 1);
	}
}

static void ctl_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi, uint64_t t0)
{
	struct fs_handle *h;
	int err;

	if (ino == KV_CTL_CMD) { /* write-only commands: no handle, a tag */
		err = kv_ctl_cmd_open(fs_of(req), fuse_req_ctx(req)->uid, fi->flags);
		if (err)
			return reply_err(req, KV_OP_OPEN, t0, err);
		fi->fh = new_tag();
		fi->direct_io = 1;
		done(req, KV_OP_OPEN, t0, 0, 0);
		fuse_reply_open(req, fi);
		return;
	}
	if ((fi->flags & O_ACCMODE) != O_RDONLY)
		return reply_err(req, KV_OP_OPEN, t0, -EACCES);
	h = handle_new(fs_of(req), false);
	if (!h)
		return reply_err(req, KV_OP_OPEN, t0, -ENOMEM);
	err = kv_ctl_render(fs_of(req), ino, &h->ch_buf, &h->ch_len);
	if (err) {
		handle_free(fs_of(req), h);
		return reply_err(req, KV_OP_OPEN, t0, err);
	}
	fi->fh = (uintptr_t)h;
	fi->direct_io = 1;
	fi->noflush = 1;
	done(req, KV_OP_OPEN, t0, 0, 0);
	if (fuse_reply_open(req, fi))
		handle_free(fs_of(req), h);
}

static void kv_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	uint64_t t0 = kv_now_ns();
	struct kv_fs *fs = fs_of(req);
	struct kv_inode *inode;
	int err;

	if (kv_ctl_is(ino))
		return ctl_open(req, ino, fi, t0);
	inode = kv_fs_inode(fs, ino);
	err = kv_fs_perm_open(req, ino, fi->flags);
	if (!err)
		err = kv_store_open(fs->kf_store, inode, fi->flags);
	if (err)
		return reply_err(req, KV_OP_OPEN, t0, err);
	set_open_flags(fs, fi);
	done(req, KV_OP_OPEN, t0, 0, 0);
	if (fuse_reply_open(req, fi))
		kv_store_release(fs->kf_store, inode, fi->flags);
}

static void ctl_read(fuse_req_t req, size_t size, off_t off, struct fuse_file_info *fi, uint64_t t0)
{
	struct fs_handle *h = (struct fs_handle *)(uintptr_t)fi->fh;
	size_t start = (size_t)off < h->ch_len ? (size_t)off : h->ch_len;
	size_t n = h->ch_len - start < size ? h->ch_len - start : size;
	/*
	 * The reply is sent from a copy: once the kernel has it, the reader may
	 * close and its release free the handle before this thread returns
	 * (ASan, which checks writev's buffers after the call, would see that).
	 */
	char *copy = malloc(n ? n : 1);

	if (!copy)
		return reply_err(req, KV_OP_READ, t0, -ENOMEM);
	memcpy(copy, h->ch_buf + start, n);
	done(req, KV_OP_READ, t0, n, 0);
	fuse_reply_buf(req, copy, n);
	free(copy);
}

/*
 * Over io_uring (fs/uring.h): a read of a whole value that is only on the
 * SSD goes from the bucket straight into the ring entry's payload buffer
 * (O_DIRECT), the reply's only copy being the kernel's. True when it
 * replied; false to read as usual (not a ring request, the value in DRAM
 * too or of another size).
 */
static bool read_in_place(fuse_req_t req, fuse_ino_t ino, size_t size, uint64_t t0)
{
	struct kv_fs *fs = fs_of(req);
	struct iovec to = {.iov_base = kv_uring_payload(size), .iov_len = size};
	int err;

	if (!to.iov_base)
		return false;
	err = kv_store_read_direct(fs->kf_store, kv_fs_inode(fs, ino), &to, 1, size);
	if (err == -EAGAIN)
		return false;
	if (err) {
		reply_err(req, KV_OP_READ, t0, err);
		return true;
	}
	done(req, KV_OP_READ, t0, size, 0);
	fuse_reply_buf(req, to.iov_base, size);
	return true;
}

static void kv_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	uint64_t t0 = kv_now_ns();
	struct kv_fs *fs = fs_of(req);
	struct iovec iov[READ_IOV];
	struct kv_read_guard g;
	uint64_t bytes;
	int n;

	if (kv_ctl_is(ino))
		return ctl_read(req, size, off, fi, t0);
	if (off == 0 && size && read_in_place(req, ino, size, t0))
		return;
	n = kv_store_read(fs->kf_store, kv_fs_inode(fs, ino), (uint64_t)off, size, iov, READ_IOV,
			  &bytes, &g);
	if (n < 0)
		return reply_err(req, KV_OP_READ, t0, n);
	done(req, KV_OP_READ, t0, bytes, 0);
	fuse_reply_iov(req, iov, n);
	kv_read_done(&g);
}

static void kv_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	uint64_t t0 = kv_now_ns();
	struct kv_fs *fs = fs_of(req);
	int err = -EBADF;

	if (ino == KV_CTL_CMD)
		err = kv_ctl_cmd(fs, buf, size);
	else if (!kv_ctl_is(ino))
		err = kv_store_write(fs->kf_store, kv_fs_inode(fs, ino), (uint64_t)off, buf, size);
	if (err)
		return reply_err(req, KV_OP_WRITE, t0, err);
	done(req, KV_OP_WRITE, t0, size, 0);
	fuse_reply_write(req, size);
}

/*
 * close(2) of a handle open for writing, with --rados-sync (set_open_flags):
 * the release that would seal the value comes after close returns, so the
 * bytes so far are put here (as fsync does) and close returns once the
 * cluster has them (EIO after --rados-timeout, as fsync).
 */
static void kv_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	uint64_t t0 = kv_now_ns();
	struct kv_fs *fs = fs_of(req);
	int err = 0;

	if (!kv_ctl_is(ino) && fs->kf_shared && kv_shared_sync_on(fs->kf_shared)) {
		err = kv_store_fsync(fs->kf_store, kv_fs_inode(fs, ino));
		if (!err)
			err = kv_shared_sync(fs->kf_shared);
	}
	if (err)
		return reply_err(req, KV_OP_FLUSH, t0, err);
	done(req, KV_OP_FLUSH, t0, 0, 0);
	fuse_reply_err(req, 0);
}

static void kv_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	uint64_t t0 = kv_now_ns();
	struct kv_fs *fs = fs_of(req);

	if (kv_ctl_is(ino)) {
		if (ino != KV_CTL_CMD) /* the command file's fh is a tag */
			handle_free(fs, (struct fs_handle *)(uintptr_t)fi->fh);
	} else {
		kv_store_release(fs->kf_store, kv_fs_inode(fs, ino), fi->flags);
	}
	kv_fs_ioctl_release(fs, fi->fh);
	done(req, KV_OP_RELEASE, t0, 0, 0);
	fuse_reply_err(req, 0);
}

/* Returns when the file's bytes so far, and the metadata that finds them, are on the SSD. */
static void kv_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	uint64_t t0 = kv_now_ns();
	struct kv_fs *fs = fs_of(req);
	int err = 0;

	if (!kv_ctl_is(ino))
		err = kv_store_fsync(fs->kf_store, kv_fs_inode(fs, ino));
	/* the seal queued its put: the queue's log is made durable too (--rados-sync: sent) */
	if (!err && !kv_ctl_is(ino) && fs->kf_shared && !kv_shared_sync_on(fs->kf_shared))
		err = kv_shared_persist(fs->kf_shared);
	/* --rados-sync: and in the cluster */
	if (!err && !kv_ctl_is(ino) && fs->kf_shared && kv_shared_sync_on(fs->kf_shared))
		err = kv_shared_sync(fs->kf_shared);
	if (err)
		return reply_err(req, KV_OP_FSYNC, t0, err);
	done(req, KV_OP_FSYNC, t0, 0, 0);
	fuse_reply_err(req, 0);
}

static void kv_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	kv_fsync(req, ino, datasync, fi);
}

static void kv_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	uint64_t t0 = kv_now_ns();
	int err = kv_fs_perm(req, ino, R_OK);
	struct fs_handle *h;

	if (err)
		return reply_err(req, KV_OP_OPENDIR, t0, err);
	h = handle_new(fs_of(req), true);
	if (!h)
		return reply_err(req, KV_OP_OPENDIR, t0, -ENOMEM);
	fi->fh = (uintptr_t)h;
	done(req, KV_OP_OPENDIR, t0, 0, 0);
	if (fuse_reply_open(req, fi))
		handle_free(fs_of(req), h);
}

/* Number of entries before the snapshot: ".", ".." and, at the root, ".kvfs". */
static unsigned dir_fixed(fuse_ino_t ino)
{
	return ino == FUSE_ROOT_ID ? 3 : 2;
}

/*
 * Adds the entry at position i (directory offset i + 1) to buf. For plus,
 * looks the name up (taking a kernel reference); returns 0 and sets *skip
 * when the name has gone meanwhile. Returns the bytes the entry needs.
 */
static size_t add_entry(fuse_req_t req, fuse_ino_t dino, struct fs_handle *h, unsigned i,
			bool plus, char *buf, size_t rem, bool *skip)
{
	struct kv_fs *fs = fs_of(req);
	struct fuse_entry_param e = {0};
	unsigned fixed = dir_fixed(dino);
	const char *name;
	struct kv_inode *ino = NULL;
	struct kv_attr a;
	size_t need;

	*skip = false;
	if (i < fixed) {
		/* ".", ".." (no lookup: the kernel resolves them) and ".kvfs". */
		name = i == 0 ? "." : i == 1 ? ".." : KV_RESERVED_NAME;
		if (i == 2)
			kv_ctl_entry(fs, KV_CTL_DIR, &e);
		else
			e.attr.st_mode = S_IFDIR;
	} else if (dino == KV_CTL_DIR) {
		name = kv_ctl_names[i - fixed];
		kv_ctl_entry(fs, kv_ctl_lookup(name), &e);
	} else {
		const struct kv_dirent *d = &h->dh_snap.kds_ent[i - fixed];

		name = d->kde_name;
		e.attr.st_ino = d->kde_ino;
		e.attr.st_mode = d->kde_type;
		if (!d->kde_ino) {
			/* a name only the shared tier has: listed without attributes (nodeid 0
			 * tells the kernel to look it up when used) */
			e.attr.st_ino = (uint64_t)1 << 63 | i;
		} else if (plus) {
			if (kv_store_lookup(fs->kf_store, kv_fs_inode(fs, dino), name, &ino, &a)) {
				*skip = true;
				return 0;
			}
			to_entry(fs, ino, &a, &e);
		}
	}
	if (plus)
		need = fuse_add_direntry_plus(req, buf, rem, name, &e, i + 1);
	else
		need = fuse_add_direntry(req, buf, rem, name, &e.attr, i + 1);
	if (need > rem && ino)
		kv_store_forget(fs->kf_store, ino, 1);
	return need;
}

static unsigned dir_count(fuse_ino_t ino, const struct fs_handle *h)
{
	if (ino == KV_CTL_DIR)
		return 2 + (KV_CTL__END - KV_CTL_STATS); /* ".", "..", the control files */
	return dir_fixed(ino) + h->dh_snap.kds_count;
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi, bool plus)
{
	uint64_t t0 = kv_now_ns();
	struct kv_fs *fs = fs_of(req);
	struct fs_handle *h = (struct fs_handle *)(uintptr_t)fi->fh;
	size_t used = 0;
	char *buf;
	int err;

	if (!kv_ctl_is(ino) && (off == 0 || !h->dh_valid)) {
		kv_dir_snap_free(&h->dh_snap);
		err = kv_store_readdir(fs->kf_store, kv_fs_inode(fs, ino), &h->dh_snap);
		if (!err && fs->kf_shared)
			err = kv_shared_readdir(fs->kf_shared, kv_fs_inode(fs, ino), &h->dh_snap);
		if (err)
			return reply_err(req, KV_OP_READDIR, t0, err);
		h->dh_valid = true;
	}
	buf = malloc(size);
	if (!buf)
		return reply_err(req, KV_OP_READDIR, t0, -ENOMEM);
	for (unsigned i = (unsigned)off; i < dir_count(ino, h); i++) {
		bool skip;
		size_t need = add_entry(req, ino, h, i, plus, buf + used, size - used, &skip);

		if (skip)
			continue;
		if (need > size - used)
			break;
		used += need;
	}
	done(req, KV_OP_READDIR, t0, 0, 0);
	fuse_reply_buf(req, buf, used);
	free(buf);
}

static void kv_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, fi, false);
}

static void kv_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			   struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, fi, true);
}

static void kv_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	kv_fs_ioctl_release(fs_of(req), fi->fh);
	handle_free(fs_of(req), (struct fs_handle *)(uintptr_t)fi->fh);
	fuse_reply_err(req, 0);
}

static void kv_statfs(fuse_req_t req, fuse_ino_t ino)
{
	uint64_t t0 = kv_now_ns();
	struct kv_fs *fs = fs_of(req);
	struct kv_pool *pool = kv_store_pool(fs->kf_store);
	struct kv_store_usage u;
	struct statvfs sv = {0};
	uint64_t size = kv_pool_size(pool), used = kv_pool_used(pool) + kv_pool_reserved(pool);

	kv_store_usage(fs->kf_store, &u);
	/* DRAM and SSD together: the pool, plus the SSD quota and what is used (or reserved) of it.
	 */
	if (u.ku_ssd) {
		uint64_t ssd = u.ku_ssd_used + u.ku_ssd_reserved;

		size += u.ku_ssd_cap;
		used += ssd < u.ku_ssd_cap ? ssd : u.ku_ssd_cap;
	}
	sv.f_bsize = KV_PAGE_SIZE;
	sv.f_frsize = KV_PAGE_SIZE;
	sv.f_blocks = size / KV_PAGE_SIZE;
	sv.f_bfree = (size - used) / KV_PAGE_SIZE;
	sv.f_bavail = sv.f_bfree;
	/* Inodes cost heap, not pool: report as many as the pool has pages. */
	sv.f_files = sv.f_blocks > u.ku_inodes ? sv.f_blocks : u.ku_inodes;
	sv.f_ffree = sv.f_files - u.ku_inodes;
	sv.f_favail = sv.f_ffree;
	sv.f_namemax = KV_NAME_MAX;
	done(req, KV_OP_STATFS, t0, 0, 0);
	fuse_reply_statfs(req, &sv);
}

static void kv_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence,
		     struct fuse_file_info *fi)
{
	uint64_t t0 = kv_now_ns(), at = 0;
	struct kv_fs *fs = fs_of(req);
	int err = -EINVAL;

	(void)fi;
	if (off >= 0 && (whence == SEEK_DATA || whence == SEEK_HOLE))
		err = kv_ctl_is(ino) ? -ENXIO
				     : kv_store_seek(fs->kf_store, kv_fs_inode(fs, ino),
						     (uint64_t)off, whence, &at);
	if (err)
		return reply_err(req, KV_OP_LSEEK, t0, err);
	done(req, KV_OP_LSEEK, t0, 0, 0);
	fuse_reply_lseek(req, (off_t)at);
}

static void kv_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
			 struct fuse_file_info *fi)
{
	uint64_t t0 = kv_now_ns();
	struct kv_fs *fs = fs_of(req);
	int err = -EBADF;

	if (off < 0 || len <= 0)
		err = -EINVAL;
	else if (!kv_ctl_is(ino))
		err = kv_store_fallocate(fs->kf_store, kv_fs_inode(fs, ino), mode, (uint64_t)off,
					 (uint64_t)len);
	if (err)
		return reply_err(req, KV_OP_FALLOCATE, t0, err);
	done(req, KV_OP_FALLOCATE, t0, 0, 0);
	fuse_reply_err(req, 0);
}

/*
 * The value of one of kvfs's attributes of a regular file: user.kvfs.seq
 * (its sealed value's sequence number) or user.kvfs.tier (dram, ssd,
 * dram+ssd or partly-dram+ssd). Returns its length, or -ENODATA.
 */
static int xattr_value(struct kv_fs *fs, fuse_ino_t ino, const char *name, char *buf, size_t len)
{
	static const char *const tiers[] = {[KV_TIER_DRAM] = "dram",
					    [KV_TIER_SSD] = "ssd",
					    [KV_TIER_BOTH] = "dram+ssd",
					    [KV_TIER_PART] = "partly-dram+ssd"};
	struct kv_attr a;

	if (kv_ctl_is(ino))
		return -ENODATA;
	kv_store_getattr(fs->kf_store, kv_fs_inode(fs, ino), &a);
	if (!S_ISREG(a.ka_mode))
		return -ENODATA;
	if (!strcmp(name, SEQ_XATTR) && a.ka_seq)
		return snprintf(buf, len, "%llu", (unsigned long long)a.ka_seq);
	if (!strcmp(name, TIER_XATTR) && a.ka_tier != KV_TIER_NONE)
		return snprintf(buf, len, "%s", tiers[a.ka_tier]);
	return -ENODATA;
}

static void kv_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	uint64_t t0 = kv_now_ns();
	char val[32];
	int n = -ENODATA;

	n = xattr_value(fs_of(req), ino, name, val, sizeof(val));
	if (n < 0)
		return reply_err(req, KV_OP_GETXATTR, t0, n);
	if (size && size < (size_t)n)
		return reply_err(req, KV_OP_GETXATTR, t0, -ERANGE);
	done(req, KV_OP_GETXATTR, t0, 0, 0);
	if (size)
		fuse_reply_buf(req, val, (size_t)n);
	else
		fuse_reply_xattr(req, (size_t)n);
}

/* Lists those of user.kvfs.seq and user.kvfs.tier that the node has. */
static void kv_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	static const char *const names[] = {SEQ_XATTR, TIER_XATTR};
	uint64_t t0 = kv_now_ns();
	char list[64], val[32];
	size_t n = 0;

	for (unsigned i = 0; i < 2; i++) {
		if (xattr_value(fs_of(req), ino, names[i], val, sizeof(val)) < 0)
			continue;
		memcpy(list + n, names[i], strlen(names[i]) + 1);
		n += strlen(names[i]) + 1;
	}
	if (size && size < n)
		return reply_err(req, KV_OP_LISTXATTR, t0, -ERANGE);
	done(req, KV_OP_LISTXATTR, t0, 0, 0);
	if (size)
		fuse_reply_buf(req, list, n);
	else
		fuse_reply_xattr(req, n);
}

/* kvfs keeps no user-set attributes; its own are read-only. */
static void kv_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
			size_t size, int flags)
{
	reply_err(req, KV_OP_SETXATTR, kv_now_ns(), -ENOTSUP);
}

static void kv_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	reply_err(req, KV_OP_SETXATTR, kv_now_ns(),
		  strcmp(name, SEQ_XATTR) && strcmp(name, TIER_XATTR) ? -ENODATA : -ENOTSUP);
}

/* access(2) and chdir(2): asked only when the daemon checks permissions (fs/fs.h). */
static void kv_access(fuse_req_t req, fuse_ino_t ino, int mask)
{
	uint64_t t0 = kv_now_ns();
	int err = kv_fs_perm(req, ino, mask & (R_OK | W_OK | X_OK));

	if (err)
		return reply_err(req, KV_OP_OTHER, t0, err);
	done(req, KV_OP_OTHER, t0, 0, 0);
	fuse_reply_err(req, 0);
}

const struct fuse_lowlevel_ops kv_fs_ops = {
    .init = kv_init,
    .lookup = kv_lookup,
    .forget = kv_forget,
    .forget_multi = kv_forget_multi,
    .getattr = kv_getattr,
    .setattr = kv_setattr,
    .mknod = kv_mknod,
    .mkdir = kv_mkdir,
    .symlink = kv_symlink,
    .readlink = kv_readlink,
    .link = kv_link,
    .unlink = kv_unlink,
    .rmdir = kv_rmdir,
    .rename = kv_rename,
    .create = kv_create,
    .open = kv_open,
    .read = kv_read,
    .write = kv_write,
    .flush = kv_flush,
    .release = kv_release,
    .fsync = kv_fsync,
    .fsyncdir = kv_fsyncdir,
    .opendir = kv_opendir,
    .readdir = kv_readdir,
    .readdirplus = kv_readdirplus,
    .releasedir = kv_releasedir,
    .statfs = kv_statfs,
    .fallocate = kv_fallocate,
    .lseek = kv_lseek,
    .getxattr = kv_getxattr,
    .listxattr = kv_listxattr,
    .setxattr = kv_setxattr,
    .removexattr = kv_removexattr,
    .access = kv_access,
    .ioctl = kv_fs_ioctl,
};
