/* SPDX-License-Identifier: MIT */
/*
 * rados/shared_publish.c — applying one change to the cluster (the thread
 * only): a put (the data objects, then the entry's compare-and-set), a
 * delete, a rename, a mkdir, an rmdir, a symlink, by the protocols drawn
 * in rados/rados_format.h. Small puts have their objects written at once.
 * Calls rados/shared_dircache.c, rados/shared_known.c and
 * rados/shared_cluster.c.
 */
#include "rados/shared_int.h"

static bool dir_known(struct kv_shared *sh, uint64_t h)
{
	/* Forgotten every 10 s: another node may have removed one meanwhile. */
	if (mono_ns() - sh->sh_dirs_since_ns > 10000000000ull) {
		sh->sh_ndirs = 0;
		sh->sh_dirs_since_ns = mono_ns();
	}
	for (size_t i = 0; i < sh->sh_ndirs; i++)
		if (sh->sh_dirs[i] == h)
			return true;
	return false;
}

static void dir_remember(struct kv_shared *sh, uint64_t h)
{
	if (sh->sh_ndirs == sh->sh_cap_dirs) {
		size_t cap = sh->sh_cap_dirs ? sh->sh_cap_dirs * 2 : 64;
		uint64_t *d = cap > 65536 ? NULL : realloc(sh->sh_dirs, cap * sizeof(*d));

		if (!d) { /* forget them all: they are only asked again */
			sh->sh_ndirs = 0;
			return;
		}
		sh->sh_dirs = d;
		sh->sh_cap_dirs = cap;
	}
	sh->sh_dirs[sh->sh_ndirs++] = h;
}

/*
 * Makes sure every directory of path ("/a/b": "a" in "/", "b" in "/a") has
 * its entry in the cluster: creates the missing ones. An entry that exists
 * is left as it is (another node made the directory, or a file has the
 * name: the put below then lands in a directory nobody can reach, which
 * --rados-gc reports).
 */
static int make_dirs(struct kv_shared *sh, struct kv_rados *r, const char *path, mode_t mode)
{
	const struct kv_rdent d = {.re_magic = KV_RDENT_MAGIC,
				   .re_format = KV_RDENT_FORMAT,
				   .re_type = KV_RDENT_DIR,
				   .re_mode = mode & 07777};
	size_t len = strlen(path);

	for (size_t end = 1; end <= len; end++) {
		char parent[KV_RADOS_OID_MAX], *sub, *pp;
		const char *name;
		uint64_t h, t0;
		int err;

		if (end < len && path[end] != '/')
			continue;
		h = XXH3_64bits(path, end);
		if (dir_known(sh, h))
			continue;
		sub = strndup(path, end);
		if (!sub)
			return -ENOMEM;
		pp = kv_sh_parent_of(sub, &name);
		if (!pp) {
			free(sub);
			return -ENOMEM;
		}
		kv_sh_dir_oid_of(parent, pp);
		t0 = kv_now_ns();
		err = kv_sh_counted(sh, t0,
				    kv_rados_omap_cas(r, parent, name, NULL, 0, &d, sizeof(d), pp),
				    "make directory");
		if (!err)
			kv_sh_dlist_set(sh, parent, NULL);
		free(pp);
		free(sub);
		if (err && err != -ECANCELED) /* -ECANCELED: it is there */
			return err;
		dir_remember(sh, h);
	}
	return 0;
}

/*
 * Sets the entry of path to ent (elen bytes) by compare-and-set, unless the
 * entry holds a newer version (by mtime, then node): *lost. *old gets the
 * FILE entry replaced (malloc'ed), if any.
 */
static int set_entry(struct kv_shared *sh, struct kv_rados *r, const char *path,
		     const struct kv_rdent *ent, size_t elen, bool *lost, struct kv_rdent **old)
{
	char doid[KV_RADOS_OID_MAX];
	const char *name;
	char *pp = kv_sh_entry_place(path, &name, doid);
	int err = -ECANCELED;

	*lost = false;
	*old = NULL;
	if (!pp)
		return -ENOMEM;
	for (int tries = 0; tries < CAS_TRIES && err == -ECANCELED; tries++) {
		struct kv_rdent *cur = NULL;
		size_t clen = 0;
		uint64_t t0;

		err = kv_sh_entry_get(sh, r, doid, name, &cur, &clen);
		if (err == -ENOENT)
			cur = NULL, clen = 0, err = 0;
		if (err)
			break;
		if (cur && cur->re_type != ent->re_type) {
			/* a directory has the name there, or a file where we made a directory */
			err = ent->re_type == KV_RDENT_DIR ? 0 : -EEXIST;
			free(cur);
			break;
		}
		if (cur && ent->re_type == KV_RDENT_FILE &&
		    (kv_sh_same_version(cur, ent->re_node, ent->re_seq) ||
		     cur->re_mtime_ns > ent->re_mtime_ns ||
		     (cur->re_mtime_ns == ent->re_mtime_ns && cur->re_node > ent->re_node))) {
			*lost = !kv_sh_same_version(cur, ent->re_node, ent->re_seq);
			free(cur);
			break;
		}
		t0 = kv_now_ns();
		err = kv_sh_counted(
		    sh, t0, kv_rados_omap_cas(r, doid, name, cur, clen, ent, elen, pp), "publish");
		if (!err)
			kv_sh_dlist_set(sh, doid,
					NULL); /* our own listings do not hide our change */
		if (!err && cur && cur->re_type == KV_RDENT_FILE)
			*old = cur;
		else
			free(cur);
	}
	free(pp);
	return err;
}

/*
 * Reads bytes [off, off + len) of ino's current value into buf. Returns 0,
 * -ESTALE when the value is not version seq any more, or the read's error.
 */
static int read_local(struct kv_store *st, struct kv_inode *ino, uint64_t seq, uint64_t off,
		      uint64_t len, char *buf)
{
	while (len) {
		struct iovec iov[64];
		struct kv_read_guard g;
		struct kv_attr a;
		uint64_t got = 0;
		int n = kv_store_read(st, ino, off, len, iov, 64, &got, &g);

		if (n < 0)
			return n;
		for (int i = 0; i < n; i++) {
			memcpy(buf, iov[i].iov_base, iov[i].iov_len);
			buf += iov[i].iov_len;
		}
		kv_read_done(&g);
		kv_store_getattr(st, ino, &a);
		if (a.ka_seq != seq)
			return -ESTALE; /* a newer value came: its own put follows */
		if (!got)
			return -ESTALE; /* cut shorter: a newer value */
		off += got;
		len -= got;
	}
	return 0;
}

/* A put on its way: the entry being built and the bytes of its objects. */
struct put_job {
	struct change *pj_ch;
	struct kv_rdent *pj_ent; /* sums after it */
	size_t pj_elen;
	uint64_t pj_nobj;
	bool pj_skip; /* nothing to send: replaced, deleted, or there already */
};

static void job_free(struct put_job *j)
{
	free(j->pj_ent);
	j->pj_ent = NULL;
}

/* Checks that ch is still worth sending and makes its entry. */
static int put_start(struct kv_shared *sh, struct change *ch, struct put_job *j)
{
	struct kv_attr a;
	struct known k;

	*j = (struct put_job){.pj_ch = ch};
	j->pj_nobj = (ch->ch_size + KV_RADOS_EXTENT - 1) / KV_RADOS_EXTENT;
	if (!ch->ch_ino) { /* from the log, and no key has that version now */
		j->pj_skip = true;
		return 0;
	}
	kv_store_getattr(sh->sh_st, ch->ch_ino, &a);
	if (a.ka_seq != ch->ch_seq || a.ka_nlink == 0 ||
	    (kv_sh_known_of(sh, a.ka_ino, ch->ch_seq, &k) && k.kn_clean)) {
		j->pj_skip = true; /* replaced (its own put follows), deleted, or there already */
		return 0;
	}
	if (j->pj_nobj > KV_RDENT_MAX_OBJ)
		return -EFBIG;
	j->pj_elen = sizeof(*j->pj_ent) + 8 * j->pj_nobj;
	j->pj_ent = calloc(1, j->pj_elen);
	if (!j->pj_ent)
		return -ENOMEM;
	*j->pj_ent = (struct kv_rdent){.re_magic = KV_RDENT_MAGIC,
				       .re_format = KV_RDENT_FORMAT,
				       .re_type = KV_RDENT_FILE,
				       .re_extent = KV_RADOS_EXTENT,
				       .re_size = ch->ch_size,
				       .re_node = sh->sh_node,
				       .re_seq = ch->ch_seq,
				       .re_nobj = (uint32_t)j->pj_nobj};
	return 0;
}

/*
 * Reads objects [first, first + n) of job j's value into bufs (allocated
 * when NULL) and fills their oids, lens and sums. -ESTALE: not that version
 * any more.
 */
static int put_read(struct kv_shared *sh, struct put_job *j, uint64_t first, unsigned n,
		    char (*oids)[KV_RADOS_OID_MAX], char **bufs, size_t *lens)
{
	uint64_t *sums = (uint64_t *)(j->pj_ent + 1);

	for (unsigned i = 0; i < n; i++) {
		uint64_t off = (first + i) * KV_RADOS_EXTENT;
		int err;

		lens[i] = kv_sh_object_len(j->pj_ent, first + i);
		if (!bufs[i] && !(bufs[i] = malloc(KV_RADOS_EXTENT)))
			return -ENOMEM;
		err = read_local(sh->sh_st, j->pj_ch->ch_ino, j->pj_ch->ch_seq, off, lens[i],
				 bufs[i]);
		if (err)
			return err;
		sums[first + i] = XXH3_64bits(bufs[i], lens[i]);
		kv_rados_data_oid(oids[i], sh->sh_node, j->pj_ch->ch_seq, (uint32_t)(first + i));
	}
	return 0;
}

/* Writes n objects (all in flight) and counts them. */
static int put_objects(struct kv_shared *sh, struct kv_rados *r, unsigned n,
		       char (*oids)[KV_RADOS_OID_MAX], char **bufs, const size_t *lens)
{
	const char *op[SMALL_PUTS > IO_BATCH ? SMALL_PUTS : IO_BATCH];
	const void *bp[SMALL_PUTS > IO_BATCH ? SMALL_PUTS : IO_BATCH];
	uint64_t t0 = kv_now_ns(), bytes = 0;
	int err;

	for (unsigned i = 0; i < n; i++) {
		op[i] = oids[i];
		bp[i] = bufs[i];
		bytes += lens[i];
	}
	err = kv_sh_counted(sh, t0, kv_rados_put_many(r, n, op, bp, lens), "write data");
	if (!err) {
		atomic_fetch_add(&sh->sh_objects_written, n);
		atomic_fetch_add(&sh->sh_bytes_written, bytes);
	}
	return err;
}

/*
 * Publishes job j's entry once its objects are in the cluster: a last check
 * that the version is still current, its directories, then the
 * compare-and-set. On -ESTALE (not current any more) its objects go.
 */
static int put_finish(struct kv_shared *sh, struct kv_rados *r, struct put_job *j)
{
	struct change *ch = j->pj_ch;
	struct kv_rdent *ent = j->pj_ent, *old = NULL;
	struct kv_attr a;
	char *path = NULL, *dir;
	bool lost;
	int err;

	kv_store_getattr(sh->sh_st, ch->ch_ino, &a);
	if (a.ka_seq != ch->ch_seq || a.ka_nlink == 0) {
		kv_sh_remove_objects(sh, r,
				     ent); /* not this version any more: what it wrote goes */
		return 0;
	}
	err = kv_store_path_of(sh->sh_st, ch->ch_ino, &path);
	if (err)
		return err == -ENOENT ? 0 : err; /* no path: deleted meanwhile */
	ent->re_mode = a.ka_mode & 07777;
	ent->re_uid = a.ka_uid;
	ent->re_gid = a.ka_gid;
	ent->re_mtime_ns = a.ka_mtime.tv_sec * 1000000000ll + a.ka_mtime.tv_nsec;
	dir = strndup(path, strrchr(path, '/') - path);
	err = dir ? make_dirs(sh, r, dir, 0755) : -ENOMEM;
	free(dir);
	if (!err && sh->sh_pause_ms) /* tests: a window between the data and the entry */
		usleep(sh->sh_pause_ms * 1000);
	if (!err)
		err = set_entry(sh, r, path, ent, j->pj_elen, &lost, &old);
	if (!err) {
		/* lost: a newer value is there; the next lookup brings it in */
		kv_sh_known_set(sh, a.ka_ino, ch->ch_seq, true, lost ? 0 : sh->sh_node,
				lost ? 0 : ch->ch_seq);
		atomic_fetch_add(&sh->sh_puts, 1);
		if (lost)
			kv_sh_remove_objects(sh, r, ent);
	} else if (err == -EEXIST) {
		fprintf(stderr, "kvfs: rados: '%s' is not a file in the cluster: not shared\n",
			path);
		kv_sh_remove_objects(sh, r, ent);
	}
	if (old)
		kv_sh_remove_objects(sh, r, old);
	free(old);
	free(path);
	return err;
}

/* Writes version ch's objects, IO_BATCH at a time, and then its entry. */
static int apply_put(struct kv_shared *sh, struct kv_rados *r, struct change *ch)
{
	char oids[IO_BATCH][KV_RADOS_OID_MAX], *bufs[IO_BATCH] = {0};
	size_t lens[IO_BATCH];
	struct put_job j;
	int err = put_start(sh, ch, &j);

	for (uint64_t first = 0; !err && !j.pj_skip && first < j.pj_nobj; first += IO_BATCH) {
		unsigned n = kv_sh_batch_of(j.pj_ent, first);

		err = put_read(sh, &j, first, n, oids, bufs, lens);
		if (!err)
			err = put_objects(sh, r, n, oids, bufs, lens);
	}
	if (!err && !j.pj_skip)
		err = put_finish(sh, r, &j);
	else if (err == -ESTALE) {
		kv_sh_remove_objects(sh, r, j.pj_ent);
		err = 0;
	}
	for (unsigned i = 0; i < IO_BATCH; i++)
		free(bufs[i]);
	job_free(&j);
	return err;
}

/*
 * Small puts (one object at most each), the first n changes of the queue
 * (at most SMALL_PUTS): their objects are written all in flight at once,
 * then their entries in queue order. Returns how many of them are done
 * (the first one failing for good counts as done; the worker reports
 * *errp); a transient *errp keeps the rest queued.
 */
unsigned kv_sh_apply_small_puts(struct kv_shared *sh, struct kv_rados *r, struct change **chs,
				unsigned n, int *errp)
{
	struct put_job jobs[SMALL_PUTS];
	char oids[SMALL_PUTS][KV_RADOS_OID_MAX], *bufs[SMALL_PUTS] = {0};
	size_t lens[SMALL_PUTS];
	unsigned got = 0, nobj = 0, done = 0;
	int err = 0;

	for (; got < n; got++) {
		struct put_job *j = &jobs[got];
		int e = put_start(sh, chs[got], j);

		if (!e && !j->pj_skip && j->pj_nobj) {
			e = put_read(sh, j, 0, 1, &oids[nobj], &bufs[nobj], &lens[nobj]);
			if (!e)
				nobj++;
		}
		if (e == -ESTALE) {
			j->pj_skip = true;
			e = 0;
		}
		if (e) {
			job_free(j);
			if (!got)
				err =
				    e; /* the head's own; a later one waits its turn at the head */
			break;
		}
	}
	if (!err && nobj)
		err = put_objects(sh, r, nobj, oids, bufs, lens);
	for (unsigned i = 0; !err && i < got; i++, done++)
		if (!jobs[i].pj_skip)
			err = put_finish(sh, r, &jobs[i]);
	if (err && !kv_sh_transient(err))
		done++; /* that one failed for good */
	for (unsigned i = 0; i < got; i++)
		job_free(&jobs[i]);
	for (unsigned i = 0; i < SMALL_PUTS; i++)
		free(bufs[i]);
	*errp = err;
	return done;
}

/* True when directory path's object lists a name (or cannot be read). */
static bool dir_has_names(struct kv_shared *sh, struct kv_rados *r, const char *path)
{
	char doid[KV_RADOS_OID_MAX];
	struct dlist *dl = NULL;
	bool any;
	int err;

	kv_sh_dir_oid_of(doid, path);
	err = kv_sh_dlist_fetch(sh, r, doid, 1, &dl);
	if (err == -ENOENT)
		return false;
	any = err || dl->dl_n;
	if (dl)
		kv_sh_dlist_put(dl);
	return any;
}

/*
 * Whether a delete or rename made here (ch) applies to the entry cur: it
 * does to a version of this node made before the change (its sequence
 * number is at most ch_mark: a key made again after a delete has a larger
 * one), and to the version the key was a copy of here; to another node's
 * version only when no version was known here (a key made here, its put
 * lost to a newer one) and it is older than the change (by mtime, as
 * between two puts). So a delete never removes what was written after the
 * key was seen here, and one read back from the log (it may have reached
 * the cluster before the stop) is harmless.
 */
static bool change_applies(const struct kv_shared *sh, const struct change *ch,
			   const struct kv_rdent *cur)
{
	if (cur->re_type == KV_RDENT_DIR ||
	    (ch->ch_vnode && kv_sh_same_version(cur, ch->ch_vnode, ch->ch_vseq)))
		return true;
	if (cur->re_type == KV_RDENT_FILE && cur->re_node == sh->sh_node)
		return cur->re_seq <= ch->ch_mark;
	return !ch->ch_vnode && cur->re_mtime_ns <= ch->ch_time_ns;
}

/*
 * Removes the entry of path (of type want: a FILE takes a SYMLINK too),
 * for change ch, then its objects, or the directory object. A directory
 * that lists a name (another node put one there since) stays.
 */
static int apply_remove(struct kv_shared *sh, struct kv_rados *r, const char *path,
			enum kv_rdent_type want, const struct change *ch)
{
	char doid[KV_RADOS_OID_MAX];
	const char *name;
	char *pp = kv_sh_entry_place(path, &name, doid);
	int err = -ECANCELED;

	if (!pp)
		return -ENOMEM;
	for (int tries = 0; tries < CAS_TRIES && err == -ECANCELED; tries++) {
		struct kv_rdent *cur = NULL;
		size_t clen = 0;
		uint64_t t0;

		err = kv_sh_entry_get(sh, r, doid, name, &cur, &clen);
		if (err == -ENOENT) {
			err = 0;
			break;
		}
		if (err)
			break;
		if ((cur->re_type != want &&
		     !(want == KV_RDENT_FILE && cur->re_type == KV_RDENT_SYMLINK)) ||
		    !change_applies(sh, ch, cur) ||
		    (want == KV_RDENT_DIR && dir_has_names(sh, r, path))) {
			/* another node put something else there since */
			free(cur);
			break;
		}
		t0 = kv_now_ns();
		err = kv_sh_counted(
		    sh, t0, kv_rados_omap_cas(r, doid, name, cur, clen, NULL, 0, NULL), "delete");
		if (!err) {
			kv_sh_dlist_set(sh, doid, NULL);
			atomic_fetch_add(&sh->sh_deletes, 1);
			kv_sh_remove_objects(sh, r, cur);
		}
		free(cur);
	}
	if (!err && want == KV_RDENT_DIR) {
		uint64_t t0 = kv_now_ns();

		kv_sh_dir_oid_of(doid, path);
		/* Its entry is gone; the object goes too (a put racing this leaves it for gc). */
		kv_sh_counted(sh, t0, kv_rados_remove(r, doid), "remove directory");
		sh->sh_ndirs = 0; /* it, or one below, may come back: ask again */
	}
	free(pp);
	return err;
}

/*
 * Moves the entry of a file or symlink from path to path2 (replacing what
 * path2 held), for change ch (change_applies).
 */
static int apply_rename(struct kv_shared *sh, struct kv_rados *r, const char *path,
			const char *path2, const struct change *ch)
{
	char doid[KV_RADOS_OID_MAX];
	const char *name;
	char *pp = kv_sh_entry_place(path, &name, doid);
	struct kv_rdent *cur = NULL, *old = NULL;
	size_t clen = 0;
	bool lost;
	int err;

	if (!pp)
		return -ENOMEM;
	err = kv_sh_entry_get(sh, r, doid, name, &cur, &clen);
	if (err == -ENOENT || (!err && cur->re_type == KV_RDENT_DIR) ||
	    (!err && !change_applies(sh, ch, cur))) {
		/* not there yet (its put, queued after, uses the new name), a directory, or
		 * made since by another node */
		free(cur);
		free(pp);
		return 0;
	}
	if (!err) {
		char *dir = strndup(path2, strrchr(path2, '/') - path2);

		err = dir ? make_dirs(sh, r, *dir ? dir : "/", 0755) : -ENOMEM;
		free(dir);
	}
	if (!err) {
		/* The same version under the new name: a newer mtime so that it wins there. */
		err = set_entry(sh, r, path2, cur, clen, &lost, &old);
		if (!err && old && !kv_sh_same_version(old, cur->re_node, cur->re_seq))
			kv_sh_remove_objects(sh, r, old);
	}
	if (!err) {
		uint64_t t0 = kv_now_ns();

		err = kv_sh_counted(
		    sh, t0, kv_rados_omap_cas(r, doid, name, cur, clen, NULL, 0, NULL), "rename");
		kv_sh_dlist_set(sh, doid, NULL);
		if (err == -ECANCELED)
			err = 0; /* changed there since: that change wins */
	}
	free(old);
	free(cur);
	free(pp);
	return err;
}

/* Publishes symlink ch: its entry carries the target; no data objects. */
static int apply_symlink(struct kv_shared *sh, struct kv_rados *r, struct change *ch)
{
	size_t tlen = strlen(ch->ch_path2);
	struct kv_rdent *ent = calloc(1, sizeof(*ent) + tlen), *old = NULL;
	char *dir = strndup(ch->ch_path, strrchr(ch->ch_path, '/') - ch->ch_path);
	bool lost;
	int err = ent && dir ? 0 : -ENOMEM;

	if (!err)
		err = make_dirs(sh, r, *dir ? dir : "/", 0755);
	if (!err) {
		*ent = (struct kv_rdent){.re_magic = KV_RDENT_MAGIC,
					 .re_format = KV_RDENT_FORMAT,
					 .re_type = KV_RDENT_SYMLINK,
					 .re_mode = 0777,
					 .re_uid = (uint32_t)(ch->ch_seq >> 32),
					 .re_gid = (uint32_t)ch->ch_seq,
					 .re_size = tlen,
					 .re_mtime_ns = ch->ch_time_ns};
		memcpy(ent + 1, ch->ch_path2, tlen);
		err = set_entry(sh, r, ch->ch_path, ent, sizeof(*ent) + tlen, &lost, &old);
	}
	if (err == -EEXIST) {
		fprintf(stderr, "kvfs: rados: '%s' is not a symlink in the cluster: not shared\n",
			ch->ch_path);
	} else if (!err && ch->ch_ino) { /* the cluster's now: removed when it is removed there */
		struct kv_attr a;

		kv_store_getattr(sh->sh_st, ch->ch_ino, &a);
		if (a.ka_nlink)
			kv_sh_known_set(sh, a.ka_ino, a.ka_seq, true, 0, 0);
	}
	free(old);
	free(ent);
	free(dir);
	return err;
}

int kv_sh_apply(struct kv_shared *sh, struct kv_rados *r, struct change *ch)
{
	switch (ch->ch_kind) {
	case CH_PUT:
		return apply_put(sh, r, ch);
	case CH_DEL:
		return apply_remove(sh, r, ch->ch_path, KV_RDENT_FILE, ch);
	case CH_RMDIR:
		return apply_remove(sh, r, ch->ch_path, KV_RDENT_DIR, ch);
	case CH_MKDIR:
		return make_dirs(sh, r, ch->ch_path, ch->ch_mode);
	case CH_RENAME:
		return apply_rename(sh, r, ch->ch_path, ch->ch_path2, ch);
	case CH_SYMLINK:
		return apply_symlink(sh, r, ch);
	}
	return 0;
}
