/* SPDX-License-Identifier: MIT */
/*
 * core/ns.c — the namespace (core/store.h): directory tables and names,
 * lookup, create (mkdir, mknod, symlink, create+open), unlink, rmdir,
 * rename, readdir, the path of an inode, cache-mode eviction of a key
 * (kv_ns_evict, through gc_ops), and the whole values of the ioctl puts
 * (staged, their SSD quota promised, published under a name in one step).
 * Recovery and salvage rebuild the tree with the kv_ns_* calls of
 * core/ns.h (not journaled), handed to them by core/store.c.
 *
 * Layer: below core/store.c (start, stop, callback tables), above
 * attributes (core/attr.h), writes (core/write.h: a new key's empty value
 * sealed, a publish sealed, waiting for room), the quota (core/quota.h: a
 * new key's record, a put's value, reservations of a key losing its name),
 * the tier, persistence (each change journaled) and the object model. It
 * calls nothing above it.
 *
 * Locks: ks_ns_lock (the tree: parents, names, tables, ki_nlink), then a
 * node's ki_lock inside it (dir_touch, drop_name, name_gone, a publish's
 * seal); ks_evict_lock alone, after both are let go (kv_ns_evict). The
 * whole order is in core/store_int.h.
 */
#include "core/store.h"
#include "core/attr.h"
#include "core/ns.h"
#include "core/persist.h"
#include "core/quota.h"
#include "core/store_int.h"
#include "core/tier.h"
#include "core/write.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define now kv_inode_now

uint64_t kv_ns_name_hash(const char *name, size_t len)
{
	return XXH3_64bits(name, len);
}

/* The counter of named nodes of ino's type: keys, directories, symlinks, FIFOs and sockets. */
static _Atomic uint64_t *name_count(struct kv_store *st, mode_t type)
{
	if (S_ISDIR(type))
		return &st->ks_dirs;
	if (S_ISREG(type))
		return &st->ks_keys;
	return S_ISLNK(type) ? &st->ks_symlinks : &st->ks_specials;
}

/* --- directory tables (ks_ns_lock held) --- */

static int check_len(size_t len)
{
	if (len == 0)
		return -ENOENT;
	if (len > KV_NAME_MAX)
		return -ENAMETOOLONG;
	return 0;
}

static int check_name(const char *name)
{
	return check_len(strlen(name));
}

static bool is_reserved(const struct kv_store *st, const struct kv_inode *dir, const char *name)
{
	return dir == st->ks_root && strcmp(name, KV_RESERVED_NAME) == 0;
}

/* dir's child `name`, whose hash is h, or NULL. */
static struct kv_inode *dir_find_h(const struct kv_inode *dir, const char *name, uint64_t h)
{
	struct kv_inode *c = dir->kd_table[h & (dir->kd_nbuckets - 1)];

	for (; c; c = c->ki_hnext)
		if (c->ki_hash == h && strcmp(c->ki_name, name) == 0)
			return c;
	return NULL;
}

static struct kv_inode *dir_find(const struct kv_inode *dir, const char *name)
{
	return dir_find_h(dir, name, kv_ns_name_hash(name, strlen(name)));
}

static void dir_grow(struct kv_inode *dir)
{
	uint32_t n = dir->kd_nbuckets * 2;
	struct kv_inode **t = calloc(n, sizeof(*t));

	if (!t)
		return; /* a longer chain is still correct */
	for (uint32_t b = 0; b < dir->kd_nbuckets; b++) {
		struct kv_inode *c = dir->kd_table[b];

		while (c) {
			struct kv_inode *next = c->ki_hnext;

			c->ki_hnext = t[c->ki_hash & (n - 1)];
			t[c->ki_hash & (n - 1)] = c;
			c = next;
		}
	}
	free(dir->kd_table);
	dir->kd_table = t;
	dir->kd_nbuckets = n;
}

/* Links ino into dir under its ki_name and ki_hash (which must be set). */
static void dir_insert(struct kv_inode *dir, struct kv_inode *ino)
{
	struct kv_inode **head;

	if (dir->kd_count >= dir->kd_nbuckets)
		dir_grow(dir);
	head = &dir->kd_table[ino->ki_hash & (dir->kd_nbuckets - 1)];
	ino->ki_hnext = *head;
	*head = ino;
	ino->ki_parent = dir;
	dir->kd_count++;
	if (S_ISDIR(ino->ki_type))
		atomic_fetch_add(&dir->ki_nlink, 1);
}

static void dir_remove(struct kv_inode *dir, struct kv_inode *ino)
{
	struct kv_inode **p = &dir->kd_table[ino->ki_hash & (dir->kd_nbuckets - 1)];

	while (*p != ino)
		p = &(*p)->ki_hnext;
	*p = ino->ki_hnext;
	ino->ki_hnext = NULL;
	ino->ki_parent = NULL;
	dir->kd_count--;
	if (S_ISDIR(ino->ki_type))
		atomic_fetch_sub(&dir->ki_nlink, 1);
}

/* Directory contents changed: bump its times. */
static void dir_touch(struct kv_inode *dir, const struct timespec *ts)
{
	pthread_rwlock_wrlock(&dir->ki_lock);
	dir->ki_mtime = dir->ki_ctime = *ts;
	pthread_rwlock_unlock(&dir->ki_lock);
}

/* A usable parent for a new name: a directory that still has its name. */
static int dir_check(const struct kv_inode *dir)
{
	if (!S_ISDIR(dir->ki_type))
		return -ENOTDIR;
	if (atomic_load(&dir->ki_nlink) == 0)
		return -ENOENT;
	return 0;
}

struct kv_inode *kv_ns_child(const struct kv_inode *dir, const char *name)
{
	return dir_find(dir, name);
}

int kv_store_lookup(struct kv_store *st, struct kv_inode *dir, const char *name,
		    struct kv_inode **out, struct kv_attr *attr)
{
	struct kv_inode *c;
	int err = check_name(name);

	if (err)
		return err;
	if (!S_ISDIR(dir->ki_type))
		return -ENOTDIR;
	pthread_rwlock_rdlock(&st->ks_ns_lock);
	c = dir_find(dir, name);
	if (c)
		kv_inode_get(c);
	pthread_rwlock_unlock(&st->ks_ns_lock);
	if (!c)
		return -ENOENT;
	kv_attr_fill(c, attr);
	*out = c;
	return 0;
}

/*
 * Creates a node named `name` in dir: link is a symlink's target (NULL for
 * other types). `opened` counts an open handle on a new regular file
 * (create); otherwise its empty value is sealed at once.
 */
static int new_node(struct kv_store *st, struct kv_inode *dir, const char *name, mode_t mode,
		    const char *link, const struct kv_cred *cred, bool opened,
		    struct kv_inode **out, struct kv_attr *attr)
{
	size_t len = strlen(name);
	uint64_t h = kv_ns_name_hash(name, len);
	struct kv_inode *ino;
	struct timespec ts;
	int err = check_len(len);

	if (err)
		return err;
	err = kv_inode_new(st, mode, cred, name, len, h, KV_INODE_OBJ, &ino);
	if (err)
		return err;
	/* One reference for the name, one for the caller (a kernel lookup). */
	atomic_init(&ino->ki_ref, 2);
	atomic_init(&ino->ki_nlink, S_ISDIR(mode) ? 2 : 1);
	if (link) {
		ino->ki_link = strdup(link);
		if (!ino->ki_link) {
			kv_inode_free(ino);
			return -ENOMEM;
		}
	}
	if (S_ISREG(mode)) { /* the SSD quota of its empty value's record */
		int64_t owed;

		struct owe_change ch = kv_quota_owe_of_write(ino->ki_obj, 0, 0, 0);

		do {
			owed = kv_quota_owe(st, NULL, ino->ki_obj, &ch);
			err = owed < 0 ? (int)owed : 0;
		} while (kv_write_retry_for_room(st, NULL, &err, 0));
		if (err) {
			kv_inode_free(ino);
			return err;
		}
		kv_quota_owe_set(st, ino->ki_obj, &ch);
	}
	if (opened) {
		ino->ki_nopen = 1;
		atomic_fetch_add(&ino->ki_ref, 1);
		atomic_fetch_add(&st->ks_open, 1);
	}

	pthread_rwlock_wrlock(&st->ks_ns_lock);
	err = dir_check(dir);
	if (!err && is_reserved(st, dir, name))
		err = -EPERM;
	if (!err && dir_find_h(dir, name, h))
		err = -EEXIST;
	if (err) {
		pthread_rwlock_unlock(&st->ks_ns_lock);
		if (opened)
			atomic_fetch_sub(&st->ks_open, 1);
		kv_inode_free(ino);
		return err;
	}
	dir_insert(dir, ino);
	atomic_fetch_add(name_count(st, mode), 1);
	ts = ino->ki_ctime;
	dir_touch(dir, &ts);
	if (S_ISDIR(mode))
		kv_persist_mkdir(st, ino);
	else if (!S_ISREG(mode))
		kv_persist_node(st, ino);
	pthread_rwlock_unlock(&st->ks_ns_lock);
	if (!opened && ino->ki_obj) {
		pthread_rwlock_wrlock(&ino->ki_lock);
		kv_write_settle(ino);
		pthread_rwlock_unlock(&ino->ki_lock);
	}
	kv_attr_fill(ino, attr);
	*out = ino;
	return 0;
}

/* Tells the kh_changed hook about a change that worked (err 0); returns err. */
static int changed(struct kv_store *st, int err, enum kv_store_change what, struct kv_inode *dir,
		   const char *name, struct kv_inode *dir2, const char *name2)
{
	if (!err && st->ks_hooks.kh_changed)
		st->ks_hooks.kh_changed(st->ks_hooks.kh_arg, what, dir, name, dir2, name2);
	return err;
}

int kv_store_mkdir(struct kv_store *st, struct kv_inode *dir, const char *name, mode_t mode,
		   const struct kv_cred *cred, struct kv_inode **out, struct kv_attr *attr)
{
	return changed(st,
		       new_node(st, dir, name, S_IFDIR | (mode & 07777), NULL, cred, false, out,
				attr),
		       KV_CHANGE_MKDIR, dir, name, NULL, NULL);
}

int kv_store_mknod(struct kv_store *st, struct kv_inode *dir, const char *name, mode_t mode,
		   const struct kv_cred *cred, struct kv_inode **out, struct kv_attr *attr)
{
	mode_t type = mode & S_IFMT;

	if (type == S_IFCHR || type == S_IFBLK)
		return -EPERM;
	if (type == 0)
		type = S_IFREG;
	if (type != S_IFREG && type != S_IFIFO && type != S_IFSOCK)
		return -EINVAL;
	return new_node(st, dir, name, type | (mode & 07777), NULL, cred, false, out, attr);
}

int kv_store_symlink(struct kv_store *st, struct kv_inode *dir, const char *name,
		     const char *target, const struct kv_cred *cred, struct kv_inode **out,
		     struct kv_attr *attr)
{
	size_t len = strnlen(target, KV_SYMLINK_MAX + 1);

	if (len == 0)
		return -ENOENT;
	if (len > KV_SYMLINK_MAX)
		return -ENAMETOOLONG;
	return changed(st, new_node(st, dir, name, S_IFLNK | 0777, target, cred, false, out, attr),
		       KV_CHANGE_SYMLINK, dir, name, NULL, NULL);
}

int kv_store_readlink(struct kv_store *st, struct kv_inode *ino, const char **target)
{
	if (!S_ISLNK(ino->ki_type))
		return -EINVAL;
	*target = ino->ki_link;
	return 0;
}

int kv_store_create_open(struct kv_store *st, struct kv_inode *dir, const char *name, mode_t mode,
			 const struct kv_cred *cred, struct kv_inode **out, struct kv_attr *attr)
{
	return new_node(st, dir, name, S_IFREG | (mode & 07777), NULL, cred, true, out, attr);
}

/* kv_ns_make with the name's length and hash. */
static int make_node(struct kv_store *st, struct kv_inode *dir, const char *name, size_t len,
		     uint64_t h, mode_t mode, const char *link, struct kv_inode **out)
{
	struct kv_cred root = {0};
	struct kv_inode *ino;
	int err = check_len(len);

	if (!err)
		err = kv_inode_new(st, (mode & S_IFMT) | (S_ISDIR(mode) ? 0755 : 0644), &root, name,
				   len, h, S_ISREG(mode) ? KV_INODE_NO_TIME : 0, &ino);
	if (err)
		return err;
	if (link) {
		ino->ki_link = strdup(link);
		if (!ino->ki_link) {
			kv_inode_free(ino);
			return -ENOMEM;
		}
	}
	atomic_init(&ino->ki_ref, 1); /* the name's */
	atomic_init(&ino->ki_nlink, S_ISDIR(mode) ? 2 : 1);
	dir_insert(dir, ino);
	atomic_fetch_add(name_count(st, mode), 1);
	*out = ino;
	return 0;
}

int kv_ns_make(struct kv_store *st, struct kv_inode *dir, const char *name, mode_t mode,
	       const char *link, struct kv_inode **out)
{
	size_t len = strlen(name);

	return make_node(st, dir, name, len, kv_ns_name_hash(name, len), mode, link, out);
}

int kv_ns_child_make(struct kv_store *st, struct kv_inode *dir, const char *name, size_t len,
		     mode_t mode, struct kv_inode **out)
{
	uint64_t h = kv_ns_name_hash(name, len);

	*out = dir_find_h(dir, name, h);
	return *out ? 0 : make_node(st, dir, name, len, h, mode, NULL, out);
}

/* Takes a name away from ino (ks_ns_lock held exclusive). */
static void drop_name(struct kv_store *st, struct kv_inode *dir, struct kv_inode *ino)
{
	dir_remove(dir, ino);
	/* One step under ki_lock: a concurrent write counts its growth or not at all. */
	pthread_rwlock_wrlock(&ino->ki_lock);
	if (S_ISREG(ino->ki_type))
		atomic_fetch_sub(&st->ks_bytes, kv_cur_size(ino));
	atomic_store(&ino->ki_nlink, 0);
	pthread_rwlock_unlock(&ino->ki_lock);
	atomic_fetch_sub(name_count(st, ino->ki_type), 1);
}

/*
 * A file lost its name for good (unlink, replaced by rename, evicted): its
 * durable record, if any, is dead space in its bucket. Open handles may
 * still read it: then its bucket is pinned (never dropped by compaction)
 * until the last close. ks_ns_lock held.
 */
static void name_gone(struct kv_store *st, struct kv_inode *ino)
{
	struct kv_bucket_set *bs;

	if (!S_ISREG(ino->ki_type))
		return;
	if (!st->ks_tier) { /* DRAM only: just the reservations (open, it keeps them) */
		pthread_rwlock_wrlock(&ino->ki_lock);
		if (!ino->ki_nopen)
			kv_quota_resv_drop(ino, 0, UINT64_MAX);
		pthread_rwlock_unlock(&ino->ki_lock);
		return;
	}
	bs = kv_tier_buckets(st->ks_tier);
	kv_tier_ra_drop(st->ks_tier, ino);
	pthread_rwlock_wrlock(&ino->ki_lock);
	kv_xmap_dead(bs, &ino->ki_map);
	for (uint32_t i = 0; i < kv_spill_n(ino); i++) /* not the borrowed: ki_map's */
		if (kv_xmap_at(ino->ki_spill, i)->xe_loc.kl_seq == ino->ki_spill->xm_seq)
			kv_bucket_dead(bs, &kv_xmap_at(ino->ki_spill, i)->xe_loc);
	if (ino->ki_nopen && !ino->ki_pinned) {
		kv_write_pin_records(ino, true);
		ino->ki_pinned = true;
	}
	if (!ino->ki_nopen) /* open, it keeps them until it is freed */
		kv_quota_resv_drop(ino, 0, UINT64_MAX);
	pthread_rwlock_unlock(&ino->ki_lock);
}

/* Journals the removal of ino's name (ks_ns_lock held). */
static void journal_del(struct kv_store *st, struct kv_inode *ino)
{
	char path[KV_JPATH_MAX];
	int len;

	if (!st->ks_journal)
		return;
	len = kv_inode_path(ino, path, sizeof(path));
	if (len > 0)
		kv_persist_del(st, path, len);
}

void kv_ns_unname(struct kv_store *st, struct kv_inode *dir, struct kv_inode *ino)
{
	drop_name(st, dir, ino);
	kv_inode_put(ino);
}

/* Takes name from dir; *gone (when not NULL) gets the inode that had it, referenced. */
static int remove_name(struct kv_store *st, struct kv_inode *dir, const char *name, bool want_dir,
		       struct kv_inode **gone)
{
	struct kv_inode *c;
	struct timespec ts;
	int err = check_name(name);

	if (err)
		return err;
	if (!S_ISDIR(dir->ki_type))
		return -ENOTDIR;
	pthread_rwlock_wrlock(&st->ks_ns_lock);
	c = dir_find(dir, name);
	if (is_reserved(st, dir, name))
		err = -EPERM;
	else if (!c)
		err = -ENOENT;
	else if (want_dir && !S_ISDIR(c->ki_type))
		err = -ENOTDIR;
	else if (!want_dir && S_ISDIR(c->ki_type))
		err = -EISDIR;
	else if (want_dir && c->kd_count)
		err = -ENOTEMPTY;
	if (err) {
		pthread_rwlock_unlock(&st->ks_ns_lock);
		return err;
	}
	journal_del(st, c);
	name_gone(st, c);
	drop_name(st, dir, c);
	now(&ts);
	dir_touch(dir, &ts);
	pthread_rwlock_unlock(&st->ks_ns_lock);

	pthread_rwlock_wrlock(&c->ki_lock);
	c->ki_ctime = ts;
	pthread_rwlock_unlock(&c->ki_lock);
	if (gone)
		*gone = c; /* the name's reference, now the caller's */
	else
		kv_inode_put(c);
	return 0;
}

/*
 * Cache mode's delete (kv_gc_ops.go_evict): takes ino's name exactly as unlink
 * would, if it still has one, no fd holds it open and it was not used
 * since `used`; then, its locks dropped, tells the eviction hook.
 */
int kv_ns_evict(struct kv_store *st, struct kv_inode *ino, uint64_t used, uint64_t *bytes)
{
	char name[KV_NAME_MAX + 1];
	struct kv_inode *dir;
	struct timespec ts;
	bool ok;

	pthread_rwlock_wrlock(&st->ks_ns_lock);
	dir = ino->ki_parent;
	pthread_rwlock_rdlock(&ino->ki_lock);
	ok = dir && atomic_load(&ino->ki_nlink) && ino->ki_nopen == 0 &&
	     atomic_load(&ino->ki_used) == used && ino->ki_map.xm_seq;
	/* What goes: its records, and the room promised to its unwritten extents. */
	*bytes = kv_xmap_bytes(&ino->ki_map) + kv_resv_count(ino->ki_resv) * KV_RESV_BYTES;
	pthread_rwlock_unlock(&ino->ki_lock);
	if (!ok) {
		pthread_rwlock_unlock(&st->ks_ns_lock);
		return -EBUSY;
	}
	journal_del(st, ino);
	name_gone(st, ino);
	snprintf(name, sizeof(name), "%s", ino->ki_name);
	drop_name(st, dir, ino);
	now(&ts);
	dir_touch(dir, &ts);
	kv_inode_get(dir); /* for the hook: an rmdir may take its name now */
	pthread_rwlock_unlock(&st->ks_ns_lock);
	kv_inode_put(ino); /* the name's reference */
	pthread_mutex_lock(&st->ks_evict_lock);
	if (st->ks_evicted)
		st->ks_evicted(st->ks_evicted_arg, dir, name);
	pthread_mutex_unlock(&st->ks_evict_lock);
	kv_inode_put(dir);
	return 0;
}

int kv_store_path_of(struct kv_store *st, struct kv_inode *ino, char **out)
{
	char *p = malloc(KV_JPATH_MAX + 1);
	const struct kv_inode *top = ino;
	int len;

	if (!p)
		return -ENOMEM;
	pthread_rwlock_rdlock(&st->ks_ns_lock);
	while (top->ki_parent)
		top = top->ki_parent;
	len = top == st->ks_root ? kv_inode_path(ino, p + 1, KV_JPATH_MAX) : -ENOENT;
	pthread_rwlock_unlock(&st->ks_ns_lock);
	if (len < 0) {
		free(p);
		return len;
	}
	p[0] = '/';
	*out = p;
	return 0;
}

int kv_store_unlink(struct kv_store *st, struct kv_inode *dir, const char *name)
{
	struct kv_inode *gone = NULL;
	int err = remove_name(st, dir, name, false, &gone);

	changed(st, err, KV_CHANGE_UNLINK, dir, name, gone, NULL);
	if (gone)
		kv_inode_put(gone);
	return err;
}

int kv_store_rmdir(struct kv_store *st, struct kv_inode *dir, const char *name)
{
	return changed(st, remove_name(st, dir, name, true, NULL), KV_CHANGE_RMDIR, dir, name, NULL,
		       NULL);
}

/* True when `dir` is `anc` or lies below it (ks_ns_lock held). */
static bool is_within(const struct kv_inode *dir, const struct kv_inode *anc)
{
	for (; dir; dir = dir->ki_parent)
		if (dir == anc)
			return true;
	return false;
}

static int rename_checks(struct kv_store *st, struct kv_inode *odir, const char *oname,
			 struct kv_inode *ndir, const char *nname, unsigned flags,
			 struct kv_inode **src, struct kv_inode **dst)
{
	int err;

	if ((err = dir_check(odir)) || (err = dir_check(ndir)))
		return err;
	if (is_reserved(st, odir, oname) || is_reserved(st, ndir, nname))
		return -EPERM;
	*src = dir_find(odir, oname);
	*dst = dir_find(ndir, nname);
	if (!*src)
		return -ENOENT;
	if (flags & RENAME_EXCHANGE) {
		if (!*dst)
			return -ENOENT;
		if (S_ISDIR((*dst)->ki_type) && is_within(odir, *dst))
			return -EINVAL;
	} else if (*dst && (flags & RENAME_NOREPLACE)) {
		return -EEXIST;
	}
	if (S_ISDIR((*src)->ki_type) && is_within(ndir, *src))
		return -EINVAL;
	if (*dst && *dst != *src && !(flags & RENAME_EXCHANGE)) {
		if (S_ISDIR((*src)->ki_type) && !S_ISDIR((*dst)->ki_type))
			return -ENOTDIR;
		if (!S_ISDIR((*src)->ki_type) && S_ISDIR((*dst)->ki_type))
			return -EISDIR;
		if (S_ISDIR((*dst)->ki_type) && (*dst)->kd_count)
			return -ENOTEMPTY;
	}
	return 0;
}

/* Gives ino (out of its directory) the malloc'ed name. */
static void name_set(struct kv_inode *ino, char *name)
{
	if (ino->ki_name != ino->ki_iname)
		free(ino->ki_name);
	ino->ki_name = name;
	ino->ki_hash = kv_ns_name_hash(name, strlen(name));
}

/*
 * Renames (ks_ns_lock held exclusive). Sets *victim to a file or directory
 * the rename took the name from (the caller drops its name reference after
 * unlocking), or NULL.
 */
static int do_rename(struct kv_store *st, struct kv_inode *odir, const char *oname,
		     struct kv_inode *ndir, const char *nname, unsigned flags,
		     struct kv_inode **victim)
{
	struct kv_inode *src, *dst;
	struct timespec ts;
	int err;

	*victim = NULL;
	err = rename_checks(st, odir, oname, ndir, nname, flags, &src, &dst);
	if (err || src == dst)
		return err;
	if (flags & RENAME_EXCHANGE) {
		char *sname = strdup(nname), *dname = strdup(oname);

		if (!sname || !dname) {
			free(sname);
			free(dname);
			return -ENOMEM;
		}
		dir_remove(odir, src);
		dir_remove(ndir, dst);
		name_set(src, sname);
		name_set(dst, dname);
		dir_insert(ndir, src);
		dir_insert(odir, dst);
	} else {
		char *name = strdup(nname);

		if (!name)
			return -ENOMEM;
		if (dst) {
			drop_name(st, ndir, dst);
			*victim = dst;
		}
		dir_remove(odir, src);
		name_set(src, name);
		dir_insert(ndir, src);
	}
	now(&ts);
	dir_touch(odir, &ts);
	if (ndir != odir)
		dir_touch(ndir, &ts);
	return 0;
}

int kv_ns_rename(struct kv_store *st, struct kv_inode *odir, const char *oname,
		 struct kv_inode *ndir, const char *nname, unsigned flags)
{
	struct kv_inode *victim;
	int err = do_rename(st, odir, oname, ndir, nname, flags, &victim);

	if (victim)
		kv_inode_put(victim);
	return err;
}

int kv_store_rename(struct kv_store *st, struct kv_inode *odir, const char *oname,
		    struct kv_inode *ndir, const char *nname, unsigned flags)
{
	char from[KV_JPATH_MAX], to[KV_JPATH_MAX];
	struct kv_inode *victim, *dst;
	int flen = 0, tlen = 0, err;

	if (flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE))
		return -EINVAL;
	if ((err = check_name(oname)) || (err = check_name(nname)))
		return err;
	pthread_rwlock_wrlock(&st->ks_ns_lock);
	if (st->ks_journal && !dir_check(odir) && !dir_check(ndir)) {
		flen = kv_inode_path(odir, from, sizeof(from));
		tlen = kv_inode_path(ndir, to, sizeof(to));
	}
	dst = S_ISDIR(ndir->ki_type) ? dir_find(ndir, nname) : NULL;
	err = do_rename(st, odir, oname, ndir, nname, flags, &victim);
	if (!err && flen >= 0 && tlen >= 0 && st->ks_journal) {
		flen = kv_inode_path_join(from, flen, oname, sizeof(from));
		tlen = kv_inode_path_join(to, tlen, nname, sizeof(to));
		if (flen > 0 && tlen > 0)
			kv_persist_rename(st, from, flen, to, tlen, flags);
	}
	if (victim && victim == dst)
		name_gone(st, victim);
	pthread_rwlock_unlock(&st->ks_ns_lock);
	if (victim)
		kv_inode_put(victim); /* its name's reference */
	return changed(st, err, KV_CHANGE_RENAME, odir, oname, ndir, nname);
}

/* --- whole values (ioctl puts) --- */

int kv_store_stage_new(struct kv_store *st, uint64_t len, struct kv_obj **out)
{
	struct kv_obj *obj;
	int err;

	if (len > KV_MAX_VALUE)
		return -EFBIG;
	err = kv_obj_new(st->ks_pool, &obj);
	if (err)
		return err;
	do
		err = kv_obj_alloc(obj, len);
	while (kv_write_retry_for_room(st, NULL, &err, len));
	if (err) {
		kv_obj_put(obj);
		return err;
	}
	*out = obj;
	return 0;
}

/* owe for change c of obj, a value to replace dir/name: on its durable bytes when it must. */
static int64_t owe_replacing(struct kv_store *st, struct kv_inode *dir, const char *name,
			     struct kv_obj *obj, const struct owe_change *c)
{
	int64_t owed = kv_quota_owe(st, NULL, obj, c);
	struct kv_inode *old;
	struct kv_attr a;

	if (owed != -EDQUOT || !dir || kv_store_lookup(st, dir, name, &old, &a))
		return owed;
	if (S_ISREG(old->ki_type)) {
		pthread_rwlock_wrlock(&old->ki_lock);
		owed = kv_quota_owe(st, old, obj, c);
		pthread_rwlock_unlock(&old->ki_lock);
	}
	kv_inode_put(old);
	return owed;
}

int kv_store_value_new(struct kv_store *st, uint64_t len, struct kv_inode *dir, const char *name,
		       struct kv_obj **out)
{
	struct owe_change ch;
	struct kv_obj *obj = NULL; /* set when err is 0: gcc cannot tell once owe is not inlined */
	int err = kv_store_stage_new(st, len, &obj);

	if (err)
		return err;
	ch = kv_quota_owe_of_write(obj, 0, len, len);
	do { /* its whole SSD quota, before anything is acknowledged */
		int64_t owed = owe_replacing(st, dir, name, obj, &ch);

		err = owed < 0 ? (int)owed : 0;
	} while (kv_write_retry_for_room(st, NULL, &err, len));
	if (err) {
		kv_obj_put(obj);
		return err;
	}
	kv_quota_owe_set(st, obj, &ch);
	*out = obj;
	return 0;
}

int kv_store_publish(struct kv_store *st, struct kv_inode *dir, const char *name,
		     struct kv_obj *obj, const struct kv_cred *cred, bool noreplace,
		     struct kv_inode **out)
{
	size_t len = strlen(name);
	uint64_t h = kv_ns_name_hash(name, len);
	struct kv_inode *ino, *old;
	struct timespec ts;
	int err = check_len(len);

	if (!err)
		err = kv_inode_new(st, S_IFREG | 0644, cred, name, len, h, 0, &ino);
	if (err) {
		kv_obj_put(obj);
		return err;
	}
	ino->ki_obj = obj;
	atomic_init(&ino->ki_ref, 1); /* the name's */
	atomic_init(&ino->ki_nlink, 1);

	pthread_rwlock_wrlock(&st->ks_ns_lock);
	err = dir_check(dir);
	old = err ? NULL : dir_find_h(dir, name, h);
	if (!err && is_reserved(st, dir, name))
		err = -EPERM;
	else if (old && S_ISDIR(old->ki_type))
		err = -EISDIR;
	else if (old && noreplace)
		err = -EEXIST;
	if (err) {
		pthread_rwlock_unlock(&st->ks_ns_lock);
		atomic_store(&ino->ki_nlink, 0);
		kv_inode_free(ino);
		return err;
	}
	/* As a rename over the old name: its record is dead, open handles keep its bytes. */
	if (old) {
		name_gone(st, old);
		drop_name(st, dir, old);
	}
	dir_insert(dir, ino);
	atomic_fetch_add(&st->ks_keys, 1);
	atomic_fetch_add(&st->ks_bytes, obj->ko_size);
	/* Named and sealed in one step under ks_ns_lock: no lookup sees it unsealed. */
	pthread_rwlock_wrlock(&ino->ki_lock);
	kv_write_seal(ino);
	ts = ino->ki_mtime;
	if (out) {
		kv_inode_get(ino);
		*out = ino;
	}
	pthread_rwlock_unlock(&ino->ki_lock);
	dir_touch(dir, &ts);
	pthread_rwlock_unlock(&st->ks_ns_lock);
	if (old)
		kv_inode_put(old); /* its name's reference */
	return old ? 1 : 0;
}

int kv_store_readdir(struct kv_store *st, struct kv_inode *dir, struct kv_dir_snap *snap)
{
	uint32_t n = 0;
	int err = 0;

	snap->kds_count = 0;
	snap->kds_ent = NULL;
	if (!S_ISDIR(dir->ki_type))
		return -ENOTDIR;
	pthread_rwlock_rdlock(&st->ks_ns_lock);
	if (dir->kd_count) {
		snap->kds_ent = calloc(dir->kd_count, sizeof(*snap->kds_ent));
		if (!snap->kds_ent) {
			err = -ENOMEM;
			goto out_unlock;
		}
	}
	for (uint32_t b = 0; b < dir->kd_nbuckets; b++) {
		for (struct kv_inode *c = dir->kd_table[b]; c; c = c->ki_hnext) {
			struct kv_dirent *e = &snap->kds_ent[n];

			e->kde_name = strdup(c->ki_name);
			if (!e->kde_name) {
				err = -ENOMEM;
				goto out_unlock;
			}
			e->kde_ino = c->ki_ino;
			e->kde_type = c->ki_type;
			n++;
		}
	}
out_unlock:
	pthread_rwlock_unlock(&st->ks_ns_lock);
	snap->kds_count = n;
	if (err)
		kv_dir_snap_free(snap);
	return err;
}

void kv_dir_snap_free(struct kv_dir_snap *snap)
{
	for (uint32_t i = 0; i < snap->kds_count; i++)
		free(snap->kds_ent[i].kde_name);
	free(snap->kds_ent);
	snap->kds_ent = NULL;
	snap->kds_count = 0;
}
