/* SPDX-License-Identifier: MIT */
/*
 * rados/shared_fetch.c — bringing a value in from the cluster (FUSE
 * threads): its objects read several in flight, each checked against the
 * entry's checksum, stored as a local key "quietly" (kv_sh_quiet: the
 * hooks do not send it back) and remembered as a copy in the known table;
 * and a batch's prefetch of the one-object values only the cluster has,
 * all in flight at once. Calls rados/shared_dircache.c,
 * rados/shared_known.c and rados/shared_cluster.c.
 */
#include "rados/shared_int.h"

/*
 * Reads data objects [first, first + n) of version e (sums after it) into
 * bufs (lens[i] bytes each) and checks each against its sum. -EAGAIN when
 * one is missing (the version was replaced meanwhile), -EIO when one does
 * not match, the cluster's errors.
 */
/* Checks an object read against its entry's sum; a mismatch is logged and counted. */
static bool sum_ok(struct kv_shared *sh, const char *oid, const void *buf, size_t len, uint64_t sum)
{
	if (XXH3_64bits(buf, len) == sum)
		return true;
	fprintf(stderr, "kvfs: rados: object %s does not match its checksum\n", oid);
	atomic_fetch_add(&sh->sh_errors, 1);
	return false;
}

static int read_objects(struct kv_shared *sh, struct kv_rados *r, const struct kv_rdent *e,
			uint64_t first, unsigned n, void *const *bufs, const size_t *lens)
{
	const uint64_t *sums = (const uint64_t *)(e + 1);
	char oids[IO_BATCH][KV_RADOS_OID_MAX];
	const char *op[IO_BATCH];
	uint64_t t0 = kv_now_ns(), bytes = 0;
	int err;

	for (unsigned i = 0; i < n; i++) {
		kv_rados_data_oid(oids[i], e->re_node, e->re_seq, (uint32_t)(first + i));
		op[i] = oids[i];
		bytes += lens[i];
	}
	err = kv_sh_counted(sh, t0, kv_rados_get_many(r, n, op, bufs, lens), "read data");
	if (err)
		return err == -ENOENT ? -EAGAIN : err;
	for (unsigned i = 0; i < n; i++)
		if (!sum_ok(sh, oids[i], bufs[i], lens[i], sums[first + i]))
			return -EIO;
	atomic_fetch_add(&sh->sh_objects_read, n);
	atomic_fetch_add(&sh->sh_bytes_read, bytes);
	return 0;
}

/*
 * A value that fits a quarter of the pool: read straight into a new value's
 * memory (each data object is one extent) and published over the name in
 * one step (kv_store_publish), so nobody here sees it partly. *out: the
 * new inode, referenced.
 */
static int fetch_whole(struct kv_shared *sh, struct kv_rados *r, struct kv_inode *dir,
		       const char *name, const struct kv_rdent *e, struct kv_inode **out)
{
	struct kv_store *st = sh->sh_st;
	struct kv_cred cred = kv_sh_cred_of(e);
	void *bounce[IO_BATCH] = {0};
	struct kv_obj *obj = NULL;
	int err = kv_store_value_new(st, e->re_size, dir, name, &obj);

	for (uint64_t first = 0; !err && first < e->re_nobj; first += IO_BATCH) {
		unsigned n = kv_sh_batch_of(e, first);
		void *bufs[IO_BATCH];
		size_t lens[IO_BATCH];

		for (unsigned i = 0; i < n && !err; i++) {
			struct iovec iov;
			uint64_t got = 0;

			lens[i] = kv_sh_object_len(e, first + i);
			kv_obj_iov(obj, (first + i) * e->re_extent, lens[i], &iov, 1, &got);
			bufs[i] = got == lens[i] ? iov.iov_base : bounce[i];
			if (!bufs[i] && !(bufs[i] = bounce[i] = malloc(e->re_extent)))
				err = -ENOMEM;
		}
		if (!err)
			err = read_objects(sh, r, e, first, n, bufs, lens);
		for (unsigned i = 0; i < n && !err; i++) /* an extent in pieces: copied */
			for (uint64_t off = 0; bufs[i] == bounce[i] && off < lens[i];) {
				struct iovec iov;
				uint64_t got = 0;

				kv_obj_iov(obj, (first + i) * e->re_extent + off, lens[i] - off,
					   &iov, 1, &got);
				memcpy(iov.iov_base, (char *)bufs[i] + off, got);
				off += got;
			}
	}
	for (unsigned i = 0; i < IO_BATCH; i++)
		free(bounce[i]);
	if (err) {
		if (obj)
			kv_obj_put(obj);
		return err;
	}
	err = kv_store_publish(st, dir, name, obj, &cred, false, out);
	return err < 0 ? err : 0;
}

/*
 * A larger value: streamed through a new file under a temporary name
 * (writes spill to the SSD as any large file's do), then renamed over the
 * name. *out: the new inode, referenced.
 */
static int fetch_stream(struct kv_shared *sh, struct kv_rados *r, struct kv_inode *dir,
			const char *name, const struct kv_rdent *e, struct kv_inode **out)
{
	struct kv_store *st = sh->sh_st;
	struct kv_cred cred = kv_sh_cred_of(e);
	void *bufs[IO_BATCH] = {0};
	struct kv_inode *ino;
	struct kv_attr a;
	char tmp[64];
	int err;

	snprintf(tmp, sizeof(tmp), FETCH_PREFIX "%016" PRIx64 ".%" PRIu64, sh->sh_node,
		 atomic_fetch_add(&sh->sh_fetch_seq, 1));
	err = kv_store_create_open(st, dir, tmp, e->re_mode & 07777, &cred, &ino, &a);
	if (err)
		return err;
	for (uint64_t first = 0; !err && first < e->re_nobj; first += IO_BATCH) {
		unsigned n = kv_sh_batch_of(e, first);
		size_t lens[IO_BATCH];

		for (unsigned i = 0; i < n && !err; i++) {
			lens[i] = kv_sh_object_len(e, first + i);
			if (!bufs[i] && !(bufs[i] = malloc(e->re_extent)))
				err = -ENOMEM;
		}
		if (!err)
			err = read_objects(sh, r, e, first, n, bufs, lens);
		for (unsigned i = 0; i < n && !err; i++)
			err = kv_store_write(st, ino, (first + i) * e->re_extent, bufs[i], lens[i]);
	}
	kv_store_release(st, ino, O_WRONLY);
	for (unsigned i = 0; i < IO_BATCH; i++)
		free(bufs[i]);
	if (!err)
		err = kv_store_rename(st, dir, tmp, dir, name, 0);
	if (err) {
		kv_store_unlink(st, dir, tmp);
		kv_store_forget(st, ino, 1);
		return err;
	}
	*out = ino; /* create_open's reference */
	return 0;
}

/*
 * A value brought in (ino, referenced: dropped here) takes its entry's
 * mode and mtime and is known as a copy of e's version (kv_sh_quiet set).
 */
static void adopt(struct kv_shared *sh, struct kv_inode *ino, const struct kv_rdent *e)
{
	struct kv_setattr sa = {.ksa_valid = KV_SET_MTIME | KV_SET_MODE,
				.ksa_mode = e->re_mode & 07777,
				.ksa_mtime = {.tv_sec = e->re_mtime_ns / 1000000000,
					      .tv_nsec = e->re_mtime_ns % 1000000000}};
	struct kv_attr a;

	if (kv_store_setattr(sh->sh_st, ino, &sa, &a))
		kv_store_getattr(sh->sh_st, ino, &a);
	kv_sh_known_set(sh, a.ka_ino, a.ka_seq, true, e->re_node, e->re_seq);
	atomic_fetch_add(&sh->sh_hits, 1);
	kv_inode_put(ino);
}

/*
 * Brings cluster version e (a FILE entry) in as the value of `name` in dir,
 * quietly, with the entry's mode and mtime, and records it as a clean copy
 * of that version. -EAGAIN when the version was replaced meanwhile.
 */
int kv_sh_fetch(struct kv_shared *sh, struct kv_rados *r, struct kv_inode *dir, const char *name,
		const struct kv_rdent *e)
{
	struct kv_store *st = sh->sh_st;
	struct kv_inode *ino = NULL;
	int err;

	kv_sh_quiet = true;
	if (e->re_size <= kv_pool_size(kv_store_pool(st)) / 4)
		err = fetch_whole(sh, r, dir, name, e, &ino);
	else
		err = fetch_stream(sh, r, dir, name, e, &ino);
	if (!err)
		adopt(sh, ino, e);
	kv_sh_quiet = false;
	return err;
}

/* A key prefetch_in brings in: its entry (in the listing) and its new value. */
struct pf_key {
	const char *pk_name;
	const struct kv_rdent *pk_e;
	struct kv_obj *pk_obj;
	void *pk_buf; /* the value's one piece */
};

/* Reads the m values of k all in flight, checks and publishes them; drops the rest. */
static void pf_flush(struct kv_shared *sh, struct kv_rados *r, struct kv_inode *dir,
		     struct pf_key *k, unsigned m)
{
	char oids[KV_SHARED_PREFETCH_MAX][KV_RADOS_OID_MAX];
	const char *op[KV_SHARED_PREFETCH_MAX];
	void *bufs[KV_SHARED_PREFETCH_MAX];
	size_t lens[KV_SHARED_PREFETCH_MAX];
	uint64_t t0 = kv_now_ns(), bytes = 0;
	int err;

	for (unsigned i = 0; i < m; i++) {
		kv_rados_data_oid(oids[i], k[i].pk_e->re_node, k[i].pk_e->re_seq, 0);
		op[i] = oids[i];
		bufs[i] = k[i].pk_buf;
		lens[i] = k[i].pk_e->re_size;
		bytes += lens[i];
	}
	err = kv_sh_counted(sh, t0, kv_rados_get_many(r, m, op, bufs, lens), "read data");
	if (!err) {
		atomic_fetch_add(&sh->sh_objects_read, m);
		atomic_fetch_add(&sh->sh_bytes_read, bytes);
	}
	kv_sh_quiet = true;
	for (unsigned i = 0; i < m; i++) {
		const uint64_t *sums = (const uint64_t *)(k[i].pk_e + 1);
		struct kv_cred cred = kv_sh_cred_of(k[i].pk_e);
		struct kv_inode *ino;

		if (err || !sum_ok(sh, oids[i], bufs[i], lens[i], sums[0])) {
			kv_obj_put(k[i].pk_obj); /* its lookup reads it again, and reports */
			continue;
		}
		/* noreplace: a name made here meanwhile is newer */
		if (kv_store_publish(sh->sh_st, dir, k[i].pk_name, k[i].pk_obj, &cred, true,
				     &ino) >= 0) {
			adopt(sh, ino, k[i].pk_e);
			atomic_fetch_add(&sh->sh_prefetched, 1);
		}
	}
	kv_sh_quiet = false;
}

/*
 * kv_shared_prefetch for names in dir: the one-object values the listing
 * of dir names and the node does not have are read all in flight, in
 * groups of at most KV_SHARED_PREFETCH_MAX values and a quarter of the
 * pool, checked and published as fetch_whole does. The first value the
 * pool has no room for ends it. Anything it leaves (larger values, a
 * directory too large to list, errors) the lookups that follow bring in.
 */
static void prefetch_in(struct kv_shared *sh, struct kv_rados *r, struct kv_inode *dir,
			const char *const *names, unsigned n)
{
	struct kv_store *st = sh->sh_st;
	uint64_t quarter = kv_pool_size(kv_store_pool(st)) / 4, bytes = 0;
	char doid[KV_RADOS_OID_MAX], *dpath = NULL;
	struct pf_key k[KV_SHARED_PREFETCH_MAX];
	struct dlist *dl;
	unsigned m = 0, missing = 0;

	/* Keys here already are their lookups' to check: no listing read for a batch of them. */
	for (unsigned i = 0; i < n && missing < 2; i++) {
		struct kv_inode *ino;
		struct kv_attr a;

		if (kv_store_lookup(st, dir, names[i], &ino, &a))
			missing++;
		else
			kv_inode_put(ino);
	}
	if (missing < 2 || kv_store_path_of(st, dir, &dpath))
		return;
	kv_sh_dir_oid_of(doid, dpath);
	free(dpath);
	if (kv_sh_big_dir(sh, doid, false))
		return;
	dl = kv_sh_dlist_cached(sh, doid, 0);
	if (!dl) {
		int err = kv_sh_dlist_fetch(sh, r, doid, DC_MAX, &dl);

		if (err == -E2BIG)
			kv_sh_big_dir(sh, doid, true);
		if (err)
			return; /* too large to keep, or unreachable: each lookup asks */
		kv_sh_dlist_set(sh, doid, dl);
	}
	for (unsigned i = 0; i < n; i++) {
		const struct dl_ent *d = kv_sh_dlist_find(dl, names[i]);
		struct kv_inode *ino;
		struct kv_attr a;
		struct kv_obj *obj = NULL;
		struct iovec iov;
		uint64_t got = 0;

		if (!d || d->de_e->re_type != KV_RDENT_FILE || d->de_e->re_nobj != 1 ||
		    d->de_e->re_size > quarter)
			continue;
		if (!kv_store_lookup(st, dir, names[i], &ino, &a)) {
			kv_inode_put(ino); /* here already: its lookup checks it */
			continue;
		}
		if (m == KV_SHARED_PREFETCH_MAX || bytes + d->de_e->re_size > quarter) {
			pf_flush(sh, r, dir, k, m);
			m = 0;
			bytes = 0;
		}
		if (kv_store_value_new(st, d->de_e->re_size, NULL, NULL, &obj))
			break; /* the pool is full: the lookups wait for room, one by one */
		kv_obj_iov(obj, 0, d->de_e->re_size, &iov, 1, &got);
		if (got != d->de_e->re_size) { /* not one piece */
			kv_obj_put(obj);
			continue;
		}
		k[m++] = (struct pf_key){
		    .pk_name = names[i], .pk_e = d->de_e, .pk_obj = obj, .pk_buf = iov.iov_base};
		bytes += got;
	}
	if (m)
		pf_flush(sh, r, dir, k, m);
	kv_sh_dlist_put(dl);
}

void kv_shared_prefetch(struct kv_shared *sh, struct kv_inode *dir, const char *const *names,
			unsigned n)
{
	struct conn *c;

	if (n < 2 || !atomic_load(&sh->sh_healthy))
		return;
	c = kv_sh_conn_get(sh);
	if (c)
		prefetch_in(sh, c->c_r, dir, names, n);
	kv_sh_conn_put(c);
}
