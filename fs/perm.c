/* SPDX-License-Identifier: MIT */
/*
 * fs/perm.c — permission checks in the daemon, for a mount only its owner
 * may use (fs/fs.h, "permissions", says when and why).
 */
#include "fs/fs.h"
#include "core/perm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The open flag execve() passes (the kernel's __FMODE_EXEC): the file must be executable. */
#define OPEN_EXEC 0x20
/* Supplementary groups read at most (a caller in more is checked against these). */
#define MAX_GROUPS 64

/* kv_cred's kc_in_group for a FUSE request: its supplementary groups, read from /proc. */
static bool in_group(void *arg, gid_t gid)
{
	gid_t list[MAX_GROUPS];
	int n = fuse_req_getgroups(arg, MAX_GROUPS, list);

	for (int i = 0; i < n && i < MAX_GROUPS; i++)
		if (list[i] == gid)
			return true;
	return false;
}

struct kv_cred kv_fs_cred(fuse_req_t req)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);

	return (struct kv_cred){
	    .kc_uid = ctx->uid, .kc_gid = ctx->gid, .kc_in_group = in_group, .kc_arg = (void *)req};
}

static int allowed(fuse_req_t req, const struct kv_attr *a, int mask)
{
	struct kv_cred c = kv_fs_cred(req);

	return kv_may(&c, a, mask);
}

/* The attributes permissions are checked against: a control node's are fixed (fs/ctl.c). */
static void attr_of(struct kv_fs *fs, fuse_ino_t ino, struct kv_attr *a)
{
	struct fuse_entry_param e;

	if (!kv_ctl_is(ino)) {
		kv_store_getattr(fs->kf_store, kv_fs_inode(fs, ino), a);
		return;
	}
	kv_ctl_entry(fs, ino, &e);
	*a = (struct kv_attr){
	    .ka_mode = e.attr.st_mode, .ka_uid = e.attr.st_uid, .ka_gid = e.attr.st_gid};
}

int kv_fs_perm(fuse_req_t req, fuse_ino_t ino, int mask)
{
	struct kv_fs *fs = fuse_req_userdata(req);
	struct kv_attr a;

	if (!fs->kf_own_perms || !mask)
		return 0;
	attr_of(fs, ino, &a);
	return allowed(req, &a, mask);
}

int kv_fs_perm_open(fuse_req_t req, fuse_ino_t ino, int flags)
{
	int acc = flags & O_ACCMODE;
	int mask = (acc == O_RDONLY || acc == O_RDWR ? R_OK : 0) |
		   (acc == O_WRONLY || acc == O_RDWR || (flags & O_TRUNC) ? W_OK : 0) |
		   (flags & OPEN_EXEC ? X_OK : 0);

	return kv_fs_perm(req, ino, mask);
}

/*
 * Whether the caller may take the name `name` away from `dir` (unlink,
 * rmdir, rename): write and search permission on dir and, when dir is
 * sticky, ownership of dir or of the node (or root). The node's
 * attributes are looked up when the sticky bit needs them or `want` asks;
 * *have says whether *v holds them.
 */
static int may_delete(fuse_req_t req, fuse_ino_t dir, const char *name, bool want,
		      struct kv_attr *v, bool *have)
{
	struct kv_fs *fs = fuse_req_userdata(req);
	struct kv_cred c = kv_fs_cred(req);
	struct kv_inode *ino;
	struct kv_attr d;
	int err;

	*have = false;
	attr_of(fs, dir, &d);
	err = kv_may(&c, &d, W_OK | X_OK);
	if (err || !(kv_sticky_for(&c, &d) || want) ||
	    kv_store_lookup(fs->kf_store, kv_fs_inode(fs, dir), name, &ino, v))
		return err; /* a name that is not there: the operation says so */
	kv_inode_put(ino);
	*have = true;
	return kv_may_take(&c, &d, v);
}

int kv_fs_perm_delete(fuse_req_t req, fuse_ino_t dir, const char *name)
{
	struct kv_fs *fs = fuse_req_userdata(req);
	struct kv_attr v;
	bool have;

	if (!fs->kf_own_perms)
		return 0;
	return may_delete(req, dir, name, false, &v, &have);
}

int kv_fs_perm_rename(fuse_req_t req, fuse_ino_t dir, const char *name, fuse_ino_t newdir,
		      const char *newname)
{
	struct kv_fs *fs = fuse_req_userdata(req);
	struct kv_attr v, t;
	bool have, have_t;
	int err;

	if (!fs->kf_own_perms)
		return 0;
	err = may_delete(req, dir, name, dir != newdir, &v, &have);
	if (!err)
		err = may_delete(req, newdir, newname, false, &t, &have_t);
	/* A directory that moves to another parent has its ".." rewritten. */
	if (!err && have && S_ISDIR(v.ka_mode) && dir != newdir)
		err = allowed(req, &v, W_OK);
	return err;
}

int kv_fs_perm_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		       const struct fuse_file_info *fi)
{
	struct kv_fs *fs = fuse_req_userdata(req);
	struct kv_cred c = kv_fs_cred(req);
	bool owner;
	struct kv_attr a;

	if (!fs->kf_own_perms || kv_ctl_is(ino))
		return 0;
	attr_of(fs, ino, &a);
	owner = c.kc_uid == 0 || c.kc_uid == a.ka_uid;
	/* chown: root only; the owner may give the file to a group it is in. */
	if ((to_set & FUSE_SET_ATTR_UID) && attr->st_uid != a.ka_uid && c.kc_uid != 0)
		return -EPERM;
	if ((to_set & FUSE_SET_ATTR_GID) && attr->st_gid != a.ka_gid &&
	    !(c.kc_uid == 0 || (c.kc_uid == a.ka_uid && kv_in_group(&c, attr->st_gid))))
		return -EPERM;
	if (to_set & FUSE_SET_ATTR_MODE) {
		/* Anyone who may write may drop set-user-ID and set-group-ID (a write does). */
		if (!owner &&
		    (attr->st_mode & 07777) != (a.ka_mode & 07777 & ~(mode_t)(S_ISUID | S_ISGID)))
			return -EPERM;
		/* Set-group-ID stays only for a member of the file's group (as chmod(2)). */
		if (c.kc_uid != 0 && !S_ISDIR(a.ka_mode) &&
		    !kv_in_group(&c, to_set & FUSE_SET_ATTR_GID ? attr->st_gid : a.ka_gid))
			attr->st_mode &= ~(mode_t)S_ISGID;
	}
	/* Times: explicit ones the owner sets; "now" also anyone who may write. */
	if (!owner && (to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME))) {
		bool given =
		    ((to_set & FUSE_SET_ATTR_ATIME) && !(to_set & FUSE_SET_ATTR_ATIME_NOW)) ||
		    ((to_set & FUSE_SET_ATTR_MTIME) && !(to_set & FUSE_SET_ATTR_MTIME_NOW));

		if (given)
			return -EPERM;
		if (allowed(req, &a, W_OK))
			return -EACCES;
	}
	/* truncate(2) by name; ftruncate(2) was checked when its fd was opened. */
	if ((to_set & FUSE_SET_ATTR_SIZE) && !fi)
		return allowed(req, &a, W_OK);
	return 0;
}
