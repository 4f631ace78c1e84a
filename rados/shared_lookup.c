/* SPDX-License-Identifier: MIT */
/*
 * rados/shared_lookup.c — kv_shared_lookup and kv_shared_readdir: before
 * a lookup or a listing, the local store is brought up to date with the
 * cluster (a key only the cluster has brought in, a copy the cluster
 * replaced or deleted replaced or removed, a symlink made).
 *
 * FUSE threads read the cluster (lookups, readdir) and change only the
 * local store, "quietly": kv_sh_quiet tells the hooks that the change comes
 * from the cluster and must not go back to it. Calls rados/shared_fetch.c,
 * rados/shared_dircache.c, rados/shared_known.c and
 * rados/shared_cluster.c.
 */
#include "rados/shared_int.h"

/* Removes a local copy the cluster no longer has (quietly). */
static void drop_local(struct kv_shared *sh, struct kv_inode *dir, const char *name, uint64_t ino)
{
	kv_sh_quiet = true;
	kv_store_unlink(sh->sh_st, dir, name);
	kv_sh_quiet = false;
	kv_sh_known_drop(sh, ino);
}

/*
 * Removes a directory brought in from the cluster that the cluster no
 * longer has, with the local copies below it; what was made or changed
 * here (not clean) stays, and so does the directory then. depth bounds
 * the walk.
 */
static void drop_tree(struct kv_shared *sh, struct kv_inode *parent, const char *name, int depth)
{
	struct kv_store *st = sh->sh_st;
	struct kv_dir_snap snap;
	struct kv_inode *dir;
	struct kv_attr a;
	struct known k;

	if (depth > 64 || kv_store_lookup(st, parent, name, &dir, &a))
		return;
	if (!S_ISDIR(a.ka_mode) || !kv_sh_known_get(sh, a.ka_ino, &k) || !k.kn_clean ||
	    kv_store_readdir(st, dir, &snap)) {
		kv_inode_put(dir);
		return;
	}
	for (uint32_t i = 0; i < snap.kds_count; i++) {
		const struct kv_dirent *d = &snap.kds_ent[i];
		struct kv_inode *c;
		struct kv_attr ca;

		if (S_ISDIR(d->kde_type)) {
			drop_tree(sh, dir, d->kde_name, depth + 1);
		} else if ((S_ISREG(d->kde_type) || S_ISLNK(d->kde_type)) &&
			   !kv_store_lookup(st, dir, d->kde_name, &c, &ca)) {
			kv_inode_put(c);
			if (kv_sh_known_of(sh, ca.ka_ino, ca.ka_seq, &k) && k.kn_clean)
				drop_local(sh, dir, d->kde_name, ca.ka_ino);
		}
	}
	kv_dir_snap_free(&snap);
	kv_inode_put(dir);
	kv_sh_quiet = true;
	if (!kv_store_rmdir(st, parent, name))
		kv_sh_known_drop(sh, a.ka_ino);
	kv_sh_quiet = false;
}

/* True when name in dir is a symlink to e's target (e: a SYMLINK entry). */
static bool same_link(struct kv_store *st, struct kv_inode *dir, const char *name,
		      const struct kv_rdent *e)
{
	struct kv_inode *ino;
	struct kv_attr a;
	const char *target;
	bool same;

	if (e->re_type != KV_RDENT_SYMLINK || kv_store_lookup(st, dir, name, &ino, &a))
		return false;
	same = !kv_store_readlink(st, ino, &target) && strlen(target) == e->re_size &&
	       !memcmp(target, e + 1, e->re_size);
	kv_inode_put(ino);
	return same;
}

/* Makes the cluster's symlink e as name in dir, a clean copy. */
static void bring_link(struct kv_shared *sh, struct kv_inode *dir, const char *name,
		       const struct kv_rdent *e)
{
	struct kv_cred cred = kv_sh_cred_of(e);
	char *target = strndup((const char *)(e + 1), e->re_size);
	struct kv_inode *l;
	struct kv_attr a;

	if (!target)
		return;
	kv_sh_quiet = true;
	if (!kv_store_symlink(sh->sh_st, dir, name, target, &cred, &l, &a)) {
		kv_sh_known_set(sh, a.ka_ino, a.ka_seq, true, 0, 0);
		kv_store_forget(sh->sh_st, l, 1);
	}
	kv_sh_quiet = false;
	free(target);
}

static int lookup_in(struct kv_shared *sh, struct kv_rados *r, struct kv_inode *dir,
		     const char *name)
{
	struct kv_store *st = sh->sh_st;
	char doid[KV_RADOS_OID_MAX], *dpath = NULL;
	int err = 0;

	if (!r || !atomic_load(&sh->sh_healthy) ||
	    !strncmp(name, FETCH_PREFIX, strlen(FETCH_PREFIX)))
		return 0; /* the local answer is all there is */
	for (int tries = 0; tries < 3; tries++) {
		struct kv_inode *ino = NULL;
		struct kv_attr a;
		struct known k = {0};
		struct kv_rdent *e = NULL;
		size_t elen;
		bool local = !kv_store_lookup(st, dir, name, &ino, &a), clean = false, have = false;

		if (local) {
			kv_inode_put(ino);
			have = kv_sh_known_of(sh, a.ka_ino, a.ka_seq, &k);
			clean = have && k.kn_clean;
			if (!S_ISREG(a.ka_mode) &&
			    !((S_ISDIR(a.ka_mode) || S_ISLNK(a.ka_mode)) && clean))
				break; /* made here, or not a key: not checked */
			if (have && mono_ns() - k.kn_checked_ns < sh->sh_ttl_ns)
				break; /* checked within the TTL */
		}
		/* The cluster is asked: only now the directory's path (a walk and a malloc). */
		if (!dpath) {
			if (kv_store_path_of(st, dir, &dpath))
				break;
			kv_sh_dir_oid_of(doid, dpath);
		}
		err = kv_sh_entry_lookup(sh, r, doid, name, have ? k.kn_checked_ns : 0, &e, &elen);
		if (err == -ENOENT) {
			err = 0;
			if (local && clean && S_ISDIR(a.ka_mode))
				drop_tree(sh, dir, name, 0); /* removed in the cluster */
			else if (local && clean)
				drop_local(sh, dir, name, a.ka_ino); /* deleted in the cluster */
			else if (local)
				kv_sh_known_set(sh, a.ka_ino, a.ka_seq, false, 0, 0);
			break;
		}
		if (err) {
			err = local ? 0 : -EIO; /* a local copy is served as it is */
			break;
		}
		if (local && clean && S_ISREG(a.ka_mode) && e->re_type != KV_RDENT_FILE) {
			drop_local(sh, dir, name, a.ka_ino); /* a directory or symlink there now */
			free(e);
			continue;
		} else if (local && S_ISDIR(a.ka_mode)) {
			kv_sh_known_set(sh, a.ka_ino, 0, true, 0, 0); /* still there */
		} else if (local && S_ISLNK(a.ka_mode)) {
			if (!same_link(st, dir, name, e)) {
				drop_local(sh, dir, name, a.ka_ino); /* replaced there */
				free(e);
				continue;
			}
			kv_sh_known_set(sh, a.ka_ino, a.ka_seq, true, 0, 0); /* still there */
		} else if (!local && e->re_type == KV_RDENT_DIR) {
			struct kv_inode *d;
			struct kv_cred cred = kv_sh_cred_of(e);

			kv_sh_quiet = true;
			if (!kv_store_mkdir(st, dir, name, e->re_mode & 07777, &cred, &d, &a)) {
				/* brought in: dropped when the cluster removes it */
				kv_sh_known_set(sh, a.ka_ino, 0, true, 0, 0);
				kv_store_forget(st, d, 1);
			}
			kv_sh_quiet = false;
		} else if (!local && e->re_type == KV_RDENT_SYMLINK) {
			bring_link(sh, dir, name, e);
		} else if (e->re_type == KV_RDENT_FILE) {
			int64_t lmtime =
			    local ? a.ka_mtime.tv_sec * 1000000000ll + a.ka_mtime.tv_nsec : 0;

			if (local && clean && kv_sh_same_version(e, k.kn_node, k.kn_rseq)) {
				kv_sh_known_set(sh, a.ka_ino, a.ka_seq, true, e->re_node,
						e->re_seq);
			} else if (local && e->re_node == sh->sh_node && e->re_seq == a.ka_seq) {
				/* ours, published before a restart */
				kv_sh_known_set(sh, a.ka_ino, a.ka_seq, true, e->re_node,
						e->re_seq);
			} else if (local && !clean && lmtime >= e->re_mtime_ns) {
				/* a newer local value: its put is queued (or, after a restart, is
				 * not: the next seal sends it) */
				kv_sh_known_set(sh, a.ka_ino, a.ka_seq, false, 0, 0);
			} else {
				err = kv_sh_fetch(sh, r, dir, name, e);
				if (err == -EAGAIN) {
					free(e);
					err = 0;
					continue; /* replaced meanwhile: read the entry again */
				}
				if (err && local)
					err = 0; /* the old copy stays */
				else if (err && err != -ENOSPC && err != -EIO)
					err = -EIO;
			}
		}
		free(e);
		break;
	}
	free(dpath);
	return err;
}

static int dirent_cmp(const void *a, const void *b)
{
	return strcmp(((const struct kv_dirent *)a)->kde_name,
		      ((const struct kv_dirent *)b)->kde_name);
}

static mode_t type_of(const struct kv_rdent *e)
{
	return e->re_type == KV_RDENT_DIR	? S_IFDIR
	       : e->re_type == KV_RDENT_SYMLINK ? S_IFLNK
						: S_IFREG;
}

static int readdir_in(struct kv_shared *sh, struct kv_rados *r, struct kv_inode *dir,
		      struct kv_dir_snap *snap)
{
	struct kv_store *st = sh->sh_st;
	struct dlist *dl;
	char doid[KV_RADOS_OID_MAX], *dpath = NULL;
	uint32_t keep = 0, local;
	int err = 0;

	if (!r || !atomic_load(&sh->sh_healthy) || kv_store_path_of(st, dir, &dpath))
		return 0;
	kv_sh_dir_oid_of(doid, dpath);
	free(dpath);
	dl = kv_sh_dlist_cached(sh, doid, 0);
	if (!dl) {
		err = kv_sh_dlist_fetch(sh, r, doid, 0, &dl);
		if (err)
			return err == -ENOMEM ? err : 0; /* unreachable: the local listing */
		if (dl->dl_n <= DC_MAX)
			kv_sh_dlist_set(sh, doid, dl);
	}
	/* Local copies of keys the cluster no longer has go; local-only keys stay. */
	for (uint32_t i = 0; i < snap->kds_count; i++) {
		struct kv_dirent *d = &snap->kds_ent[i];
		bool listed = kv_sh_dlist_find(dl, d->kde_name) != NULL;
		struct known k = {0};
		struct kv_inode *ino;
		struct kv_attr a;

		if (S_ISDIR(d->kde_type) && !listed && kv_sh_known_get(sh, d->kde_ino, &k) &&
		    k.kn_clean) {
			drop_tree(sh, dir, d->kde_name, 0);
			if (kv_store_lookup(st, dir, d->kde_name, &ino, &a)) {
				free(d->kde_name); /* gone */
				continue;
			}
			kv_inode_put(ino);
		}
		if ((S_ISREG(d->kde_type) || S_ISLNK(d->kde_type)) && !listed &&
		    !kv_store_lookup(st, dir, d->kde_name, &ino, &a)) {
			kv_inode_put(ino);
			if (kv_sh_known_of(sh, a.ka_ino, a.ka_seq, &k) && k.kn_clean) {
				drop_local(sh, dir, d->kde_name, a.ka_ino);
				free(d->kde_name);
				continue;
			}
		}
		if (!strncmp(d->kde_name, FETCH_PREFIX, strlen(FETCH_PREFIX))) {
			free(d->kde_name);
			continue;
		}
		snap->kds_ent[keep++] = *d;
	}
	snap->kds_count = keep;
	/* Names only the cluster has: listed with inode number 0 (a lookup brings them in). */
	local = snap->kds_count;
	if (local > 1) /* sorted, to find the local names in O(log n) */
		qsort(snap->kds_ent, local, sizeof(*snap->kds_ent), dirent_cmp);
	for (size_t i = 0; i < dl->dl_n && !err; i++) {
		const struct dl_ent *d = &dl->dl_ent[i];
		const struct kv_dirent key = {.kde_name = d->de_name};
		struct kv_dirent *ent;

		if (bsearch(&key, snap->kds_ent, local, sizeof(key), dirent_cmp))
			continue;
		ent = realloc(snap->kds_ent, (snap->kds_count + 1) * sizeof(*ent));
		if (!ent) {
			err = -ENOMEM;
			break;
		}
		snap->kds_ent = ent;
		ent[snap->kds_count].kde_name = strdup(d->de_name);
		if (!ent[snap->kds_count].kde_name) {
			err = -ENOMEM;
			break;
		}
		ent[snap->kds_count].kde_ino = 0;
		ent[snap->kds_count++].kde_type = type_of(d->de_e);
	}
	kv_sh_dlist_put(dl);
	return err;
}

int kv_shared_lookup(struct kv_shared *sh, struct kv_inode *dir, const char *name)
{
	struct conn *c = kv_sh_conn_get(sh);
	int err = c ? lookup_in(sh, c->c_r, dir, name) : 0;

	kv_sh_conn_put(c);
	return err;
}

int kv_shared_readdir(struct kv_shared *sh, struct kv_inode *dir, struct kv_dir_snap *snap)
{
	struct conn *c = kv_sh_conn_get(sh);
	int err = c ? readdir_in(sh, c->c_r, dir, snap) : 0;

	kv_sh_conn_put(c);
	return err;
}
