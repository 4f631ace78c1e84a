/* SPDX-License-Identifier: MIT */
/*
 * core/persist.c — the store's metadata on disk: what goes in the journal,
 * checkpoints of the whole namespace, recovery at start, and the offline
 * --fsck and --salvage modes.
 *
 * Journal entries are appended while the namespace lock is held (shared
 * or exclusive, as the change itself holds it), so their order is the
 * order of the changes. Paths are resolved at append time: a PUT names the
 * key where it lives *when its value became durable*, after any rename.
 *
 * Symlinks, FIFOs and sockets are one NODE entry each, made when they are
 * (under ks_ns_lock, like MKDIR) and written again by every checkpoint: the
 * type bits in je_mode, a symlink's target in je_path2. They have no PUT.
 *
 * Replay applies entries by path, forgivingly: an entry about a name that
 * is not there (its value never became durable) changes nothing. A key's
 * value is only ever replaced by one with a higher sequence number.
 *
 * Layer (core/persist.h): below the namespace and the tier, beside
 * compaction, above the object model (core/inode.h) and ssd/. Replay and
 * salvage change the tree only through the struct kv_persist_ns the
 * namespace passed down (the directory tables are its own), and recovery
 * opens the tier through it on a thread of its own while the checkpoint
 * loads; --fsck and --salvage get a store the namespace made for them
 * (kv_store_fsck, kv_store_salvage in core/store.c).
 *
 * Locks, outermost first: ks_ckpt_lock (one checkpoint at a time) >
 * ks_ns_lock (exclusive while a checkpoint snapshots the tree and during
 * replay; journal entries are appended under the lock the change holds) >
 * ki_lock (shared, to encode one inode) > the journal's own lock (ssd/).
 * The whole order is in core/store_int.h.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/persist.h"
#include "core/stats.h"
#include "core/store_int.h"

/* Nanoseconds since the epoch, clamped to what 64 bits hold (years 1678..2262). */
static int64_t ns_of(const struct timespec *ts)
{
	if (ts->tv_sec >= INT64_MAX / 1000000000 - 1)
		return INT64_MAX;
	if (ts->tv_sec <= INT64_MIN / 1000000000 + 1)
		return INT64_MIN;
	return ts->tv_sec * 1000000000ll + ts->tv_nsec;
}

/* The inverse, flooring, so times before 1970 keep 0 <= tv_nsec < 10^9. */
static struct timespec ts_of(int64_t ns)
{
	int64_t sec = ns / 1000000000, rem = ns % 1000000000;

	if (rem < 0) {
		sec--;
		rem += 1000000000;
	}
	return (struct timespec){.tv_sec = sec, .tv_nsec = rem};
}

/* Fills the attribute fields of e from ino (ki_lock held). */
static void attrs_to(const struct kv_inode *ino, struct kv_jent *e)
{
	e->je_mode = ino->ki_mode;
	e->je_uid = ino->ki_uid;
	e->je_gid = ino->ki_gid;
	e->je_atime_ns = ns_of(&ino->ki_atime);
	e->je_mtime_ns = ns_of(&ino->ki_mtime);
	e->je_ctime_ns = ns_of(&ino->ki_ctime);
}

static void attrs_from(struct kv_inode *ino, const struct kv_jent *e)
{
	ino->ki_mode = ino->ki_type | (e->je_mode & 07777);
	ino->ki_uid = e->je_uid;
	ino->ki_gid = e->je_gid;
	ino->ki_atime = ts_of(e->je_atime_ns);
	ino->ki_mtime = ts_of(e->je_mtime_ns);
	ino->ki_ctime = ts_of(e->je_ctime_ns);
}

/*
 * Appends an entry. One that cannot be appended (out of memory, a failed
 * journal) is remembered in ks_meta_err: every later fsync returns it,
 * since the metadata it would promise is not all there.
 */
static void append(struct kv_store *st, const struct kv_jent *e)
{
	int err = kv_journal_append(st->ks_journal, e, NULL);

	if (err)
		atomic_store(&st->ks_meta_err, err);
}

/* The root's name in entries, which need a non-empty path. */
#define ROOT_PATH "."

/* ino's path, "." for the root; or <= 0 when it has none (unlinked). */
static int root_path(struct kv_store *st, const struct kv_inode *ino, char *buf, size_t len)
{
	if (ino == st->ks_root)
		return snprintf(buf, len, ROOT_PATH);
	return kv_inode_path(ino, buf, len);
}

static bool is_root_path(const struct kv_jent *e)
{
	return e->je_path_len == 1 && e->je_path[0] == '.';
}

void kv_persist_mkdir(struct kv_store *st, struct kv_inode *dir)
{
	char path[KV_JPATH_MAX];
	struct kv_jent e = {.je_type = KV_J_MKDIR};
	int len;

	if (!st->ks_journal)
		return;
	len = kv_inode_path(dir, path, sizeof(path));
	if (len <= 0)
		return;
	pthread_rwlock_rdlock(&dir->ki_lock);
	attrs_to(dir, &e);
	pthread_rwlock_unlock(&dir->ki_lock);
	e.je_path = path;
	e.je_path_len = (uint32_t)len;
	append(st, &e);
}

/* A NODE entry for ino, its path in path (size bytes). Returns 0, or -ENOENT when unnamed. */
static int node_entry(const struct kv_inode *ino, char *path, size_t size, struct kv_jent *e)
{
	int len = kv_inode_path(ino, path, size);

	if (len <= 0)
		return -ENOENT;
	memset(e, 0, sizeof(*e));
	e->je_type = KV_J_NODE;
	attrs_to(ino, e);
	e->je_path = path;
	e->je_path_len = (uint32_t)len;
	if (ino->ki_link) {
		e->je_path2 = ino->ki_link;
		e->je_path2_len = (uint32_t)strlen(ino->ki_link);
	}
	return 0;
}

void kv_persist_node(struct kv_store *st, struct kv_inode *ino)
{
	char path[KV_JPATH_MAX];
	struct kv_jent e;

	if (!st->ks_journal)
		return;
	pthread_rwlock_rdlock(&ino->ki_lock);
	if (!node_entry(ino, path, sizeof(path), &e))
		append(st, &e);
	pthread_rwlock_unlock(&ino->ki_lock);
}

void kv_persist_del(struct kv_store *st, const char *path, int len)
{
	struct kv_jent e = {.je_type = KV_J_DEL, .je_path = path, .je_path_len = (uint32_t)len};

	if (st->ks_journal)
		append(st, &e);
}

void kv_persist_rename(struct kv_store *st, const char *from, int flen, const char *to, int tlen,
		       unsigned flags)
{
	struct kv_jent e = {
	    .je_type = KV_J_RENAME,
	    .je_flags = flags,
	    .je_path = from,
	    .je_path_len = (uint32_t)flen,
	    .je_path2 = to,
	    .je_path2_len = (uint32_t)tlen,
	};

	if (st->ks_journal)
		append(st, &e);
}

void kv_persist_setattr(struct kv_store *st, struct kv_inode *ino)
{
	char path[KV_JPATH_MAX];
	struct kv_jent e = {.je_type = KV_J_SETATTR};
	int len;

	if (!st->ks_journal)
		return;
	len = root_path(st, ino, path, sizeof(path));
	if (len <= 0)
		return;
	e.je_path = path;
	e.je_path_len = (uint32_t)len;
	/* Held across the append: a PUT with newer times cannot slip in between. */
	pthread_rwlock_rdlock(&ino->ki_lock);
	attrs_to(ino, &e);
	append(st, &e);
	pthread_rwlock_unlock(&ino->ki_lock);
}

/* A record's place as a journal map entry. */
static struct kv_jext jext_of(const struct kv_loc *l)
{
	return (struct kv_jext){
	    .jx_bucket = l->kl_bucket,
	    .jx_off = l->kl_off,
	    .jx_seq = l->kl_seq,
	    .jx_index = l->kl_index,
	    .jx_len = (uint32_t)l->kl_len,
	    .jx_head_len = l->kl_head_len,
	};
}

/*
 * A PUT entry for ino's durable value (ks_ns_lock and ki_lock held): a
 * WHOLE value as in format version 1, any other with its map packed at
 * je_ext (malloc'ed: the caller frees it), then its reserved extents
 * (core/resv.h) as KV_JX_UNWRITTEN ranges — a WHOLE value that has some is
 * written as a map of its one record. Returns 0, -ENOENT or -ENOMEM.
 */
static int put_entry(const struct kv_inode *ino, char *path, size_t size, struct kv_jent *e)
{
	const struct kv_xmap *m = &ino->ki_map;
	const struct kv_resv *rv = ino->ki_resv;
	uint32_t nr = rv ? rv->rv_n : 0;
	int len = kv_inode_path(ino, path, size);

	if (len <= 0)
		return -ENOENT;
	memset(e, 0, sizeof(*e));
	e->je_type = KV_J_PUT;
	attrs_to(ino, e);
	e->je_seq = m->xm_seq;
	e->je_len = m->xm_size;
	e->je_path = path;
	e->je_path_len = (uint32_t)len;
	/* A version 1 WHOLE record past 4 GiB has no jext: its reservations are not kept. */
	if ((uint64_t)m->xm_n + nr > KV_JEXT_MAX || (kv_xmap_whole(m) && m->xm_size > UINT32_MAX))
		nr = 0;
	if (kv_xmap_whole(m) && !nr) {
		e->je_bucket = m->xm_one.xe_loc.kl_bucket;
		e->je_off = m->xm_one.xe_loc.kl_off;
		e->je_head_len = m->xm_one.xe_loc.kl_head_len;
	} else {
		char *x = malloc(((size_t)m->xm_n + nr) * sizeof(struct kv_jext));

		if (!x)
			return -ENOMEM;
		for (uint32_t i = 0; i < m->xm_n; i++) {
			struct kv_jext jx = jext_of(&kv_xmap_cat(m, i)->xe_loc);

			memcpy(x + i * sizeof(jx), &jx, sizeof(jx));
		}
		for (uint32_t i = 0; i < nr; i++) {
			struct kv_jext jx = {
			    .jx_off = rv->rv_r[i].xr_end - rv->rv_r[i].xr_first,
			    .jx_index = rv->rv_r[i].xr_first,
			    .jx_flags = KV_JX_UNWRITTEN,
			};

			memcpy(x + (m->xm_n + i) * sizeof(jx), &jx, sizeof(jx));
		}
		e->je_flags = KV_JPUT_EXTENTS;
		e->je_next = m->xm_n + nr;
		e->je_ext = x;
	}
	return 0;
}

void kv_persist_put(struct kv_store *st, struct kv_inode *ino)
{
	char path[KV_JPATH_MAX];
	struct kv_jent e;
	int err;

	if (!st->ks_journal)
		return;
	err = put_entry(ino, path, sizeof(path), &e);
	if (!err)
		append(st, &e);
	else if (err == -ENOMEM)
		atomic_store(&st->ks_meta_err, err);
	if (!err)
		free((void *)e.je_ext);
}

/* --- replay --- */

/*
 * What the keys hold in each bucket (recovery): live bytes, and the span of
 * their records, sorted by bucket id. Filled by check_key, or while the
 * checkpoint loads and the journal replays (rp_live): a key's records are
 * all valid if each bucket's span is (live_checked), so a start need not
 * visit every key again. A key replaced or removed by replay takes its
 * bytes back (live_unkey); the span stays as wide, which only makes
 * live_checked fail (and every key be visited) more often.
 */
struct live_bucket {
	uint64_t lb_id, lb_bytes;
	uint64_t lb_lo, lb_hi; /* the records' span: [lowest offset, highest end) */
};

struct live {
	struct live_bucket *lv_b;
	size_t lv_n, lv_max;
	size_t lv_last; /* where the last key's record went: keys come by bucket */
	uint64_t lv_keys, lv_lost;
	bool lv_inexact; /* a record not counted (no memory), or a key gone uncounted */
	struct kv_bucket_set *lv_bs;
	const struct kv_persist_ns *lv_ns; /* check_key takes the names of keys lost with it */
};

/* The position of bucket id in lv_b, or where it would go. */
static size_t live_at(const struct live *lv, uint64_t id)
{
	size_t lo = 0, hi = lv->lv_n;

	if (lv->lv_last < lv->lv_n && lv->lv_b[lv->lv_last].lb_id == id)
		return lv->lv_last;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (lv->lv_b[mid].lb_id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Counts record l: a binary search at most, every key of millions asks. */
static void live_add(struct live *lv, const struct kv_loc *l)
{
	size_t i = live_at(lv, l->kl_bucket);
	uint64_t size = kv_loc_size(l);
	struct live_bucket *b;

	if (i == lv->lv_n || lv->lv_b[i].lb_id != l->kl_bucket) {
		if (lv->lv_n == lv->lv_max) {
			size_t n = lv->lv_max ? lv->lv_max * 2 : 64;

			b = realloc(lv->lv_b, n * sizeof(*b));
			if (!b) {
				lv->lv_inexact = true;
				return;
			}
			lv->lv_b = b;
			lv->lv_max = n;
		}
		memmove(lv->lv_b + i + 1, lv->lv_b + i, (lv->lv_n - i) * sizeof(*b));
		lv->lv_b[i] = (struct live_bucket){
		    .lb_id = l->kl_bucket, .lb_lo = l->kl_off, .lb_hi = l->kl_off + size};
		lv->lv_n++;
	}
	lv->lv_last = i;
	b = &lv->lv_b[i];
	b->lb_bytes += size;
	if (l->kl_off < b->lb_lo)
		b->lb_lo = l->kl_off;
	if (l->kl_off + size > b->lb_hi)
		b->lb_hi = l->kl_off + size;
}

/* Counts the records of a key's map. */
static void live_key(struct live *lv, const struct kv_xmap *m)
{
	lv->lv_keys++;
	for (uint32_t i = 0; i < m->xm_n; i++)
		live_add(lv, &kv_xmap_cat(m, i)->xe_loc);
}

/* Takes back record l, counted before. */
static void live_sub(struct live *lv, const struct kv_loc *l)
{
	size_t i = live_at(lv, l->kl_bucket);
	uint64_t size = kv_loc_size(l);

	if (i == lv->lv_n || lv->lv_b[i].lb_id != l->kl_bucket || lv->lv_b[i].lb_bytes < size)
		lv->lv_inexact = true; /* not counted: cannot be */
	else
		lv->lv_b[i].lb_bytes -= size;
}

/* Takes back a key's map, counted before (a key replaced or removed). */
static void live_unkey(struct live *lv, const struct kv_xmap *m)
{
	if (!m->xm_seq)
		return; /* never counted */
	lv->lv_keys--;
	for (uint32_t i = 0; i < m->xm_n; i++)
		live_sub(lv, &kv_xmap_cat(m, i)->xe_loc);
}

/*
 * True when the counts the checkpoint load made stand for every key of
 * st (a regular file each, one map each) and every bucket holds the span
 * of records the keys name there: then every key is valid (check_key).
 */
static bool live_checked(const struct live *lv, struct kv_store *st)
{
	if (lv->lv_inexact || lv->lv_keys != atomic_load(&st->ks_keys))
		return false;
	for (size_t i = 0; i < lv->lv_n; i++)
		if (lv->lv_b[i].lb_bytes && /* else no key names it any more */
		    !kv_bucket_holds(lv->lv_bs, lv->lv_b[i].lb_id, lv->lv_b[i].lb_lo,
				     lv->lv_b[i].lb_hi))
			return false;
	return true;
}

/*
 * Where entries are applied (checkpoint, journal, salvage), with the
 * directory the last path led to: a checkpoint lists a directory's keys
 * together, so most paths resolve without a walk from the root. rp_dir is
 * forgotten (NULL) after any entry that may remove or move a directory
 * (DEL, RENAME); nothing else does during recovery. ks_ns_lock held
 * exclusive.
 */
struct replay {
	struct kv_store *rp_st;
	/* the namespace's calls (core/persist.h) */
	const struct kv_persist_ns *rp_ns;
	uint64_t rp_n;		 /* journal entries replayed */
	struct live *rp_live;	 /* the keys' records are counted here (NULL: salvage) */
	struct kv_inode *rp_dir; /* the directory at rp_path, or NULL */
	uint32_t rp_len;	 /* rp_path's length, the '/' ending it included */
	char rp_path[KV_JPATH_MAX + 1];
};

/*
 * Resolves the directory holding the last component of `path` (len bytes),
 * making missing directories when `make`. Sets *name to the last
 * component (NUL-terminated copy in buf), *nlen to its length. ks_ns_lock
 * held exclusive.
 */
static struct kv_inode *walk_to_parent(struct replay *rp, const char *path, uint32_t len, bool make,
				       char *buf, const char **name, size_t *nlen)
{
	struct kv_store *st = rp->rp_st;
	struct kv_inode *dir = st->ks_root;
	const char *last = memrchr(path, '/', len);
	uint32_t plen = last ? (uint32_t)(last - path) + 1 : 0;
	char *p, *slash;

	memcpy(buf, path, len);
	buf[len] = '\0';
	*name = buf + plen;
	*nlen = len - plen;
	if (!*nlen || memchr(buf, '\0', len))
		return NULL;
	if (!plen)
		return dir;
	if (rp->rp_dir && plen == rp->rp_len && !memcmp(path, rp->rp_path, plen))
		return rp->rp_dir;
	for (p = buf; (slash = strchr(p, '/')); p = slash + 1) {
		struct kv_inode *c;

		*slash = '\0';
		if (make ? rp->rp_ns->pn_child_make(st, dir, p, (size_t)(slash - p), S_IFDIR, &c)
			 : !(c = rp->rp_ns->pn_child(dir, p)))
			return NULL;
		if (!S_ISDIR(c->ki_type))
			return NULL;
		dir = c;
	}
	rp->rp_dir = dir;
	rp->rp_len = plen;
	memcpy(rp->rp_path, path, plen);
	return dir;
}

/*
 * The reserved extents of a PUT entry's jext entries [from, je_next), checked:
 * KV_JX_UNWRITTEN ranges (jx_index the first extent, jx_off how many), sorted,
 * apart, below the largest value's extent count. Returns 0, -EINVAL or
 * -ENOMEM; *out is NULL when there are none.
 */
static int resv_of(const struct kv_jent *e, uint32_t from, struct kv_resv **out)
{
	uint64_t last = 0;
	int err = 0;

	*out = NULL;
	for (uint32_t i = from; !err && i < e->je_next; i++) {
		struct kv_jext jx;

		memcpy(&jx, (const char *)e->je_ext + (size_t)i * sizeof(jx), sizeof(jx));
		if (jx.jx_bucket || jx.jx_flags != KV_JX_UNWRITTEN || !jx.jx_off ||
		    jx.jx_index < last || jx.jx_index > (KV_MAX_VALUE >> KV_EXTENT_SHIFT) ||
		    jx.jx_off > (KV_MAX_VALUE >> KV_EXTENT_SHIFT) - (uint64_t)jx.jx_index)
			err = -EINVAL;
		else
			err = kv_resv_add(out, jx.jx_index, jx.jx_index + (uint32_t)jx.jx_off);
		last = (uint64_t)jx.jx_index + jx.jx_off + 1;
	}
	if (err) {
		kv_resv_free(*out);
		*out = NULL;
	}
	return err;
}

/*
 * The map a PUT entry names, checked: extents sorted by index, each at
 * most one extent long and inside the size, the manifest (if any) last —
 * or the one WHOLE record — then its reserved extents (resv_of, into
 * *resv; reservations that fail their checks are left out, the map kept).
 * Returns 0, -EINVAL (the entry is ignored) or -ENOMEM.
 */
static int map_of(const struct kv_jent *e, struct kv_xmap *m, struct kv_resv **resv)
{
	struct kv_loc one = {
	    .kl_bucket = e->je_bucket,
	    .kl_off = e->je_off,
	    .kl_len = e->je_len,
	    .kl_seq = e->je_seq,
	    .kl_head_len = e->je_head_len,
	};
	struct kv_loc *locs;
	uint32_t n = 0;
	bool whole;
	int err = 0;

	*resv = NULL;
	if (!(e->je_flags & KV_JPUT_EXTENTS))
		return e->je_len <= KV_MAX_VALUE ? kv_xmap_set(m, e->je_seq, e->je_len, &one, 1)
						 : -EINVAL;
	if (!e->je_next || !e->je_ext || e->je_len > KV_MAX_VALUE)
		return -EINVAL;
	while (n < e->je_next) { /* the records; the reserved extents follow */
		struct kv_jext jx;

		memcpy(&jx, (const char *)e->je_ext + (size_t)n * sizeof(jx), sizeof(jx));
		if (jx.jx_flags & KV_JX_UNWRITTEN)
			break;
		n++;
	}
	if (!n)
		return -EINVAL;
	locs = malloc((size_t)n * sizeof(*locs));
	if (!locs)
		return -ENOMEM;
	for (uint32_t i = 0; !err && i < n; i++) {
		struct kv_jext jx;
		bool manifest;

		memcpy(&jx, (const char *)e->je_ext + (size_t)i * sizeof(jx), sizeof(jx));
		manifest = jx.jx_index == KV_MANIFEST_INDEX;
		whole = n == 1 && !jx.jx_index && jx.jx_len == e->je_len;
		if (!jx.jx_bucket || jx.jx_flags || (i && jx.jx_index <= locs[i - 1].kl_index) ||
		    (manifest != (i + 1 == n) && !whole) ||
		    (!manifest && !whole &&
		     (jx.jx_len > KV_EXTENT ||
		      ((uint64_t)jx.jx_index << KV_EXTENT_SHIFT) + jx.jx_len > e->je_len)))
			err = -EINVAL;
		locs[i] = (struct kv_loc){
		    .kl_bucket = jx.jx_bucket,
		    .kl_off = jx.jx_off,
		    .kl_len = jx.jx_len,
		    .kl_seq = jx.jx_seq,
		    .kl_head_len = jx.jx_head_len,
		    .kl_index = jx.jx_index,
		}; /* jext_of's inverse */
	}
	if (!err && resv_of(e, n, resv) == -ENOMEM)
		err = -ENOMEM;
	if (!err) {
		err = kv_xmap_set(m, e->je_seq, e->je_len, locs, n);
		if (err) {
			kv_resv_free(*resv);
			*resv = NULL;
		}
	}
	free(locs);
	return err;
}

/*
 * Sets a replayed key's reserved extents, and what the bucket set holds for
 * them; before there is one (the checkpoint loads while the bucket set
 * opens), ks_resv_loaded counts them, promised at once when it is there
 * (kv_persist_recover). --salvage's store never has one.
 */
static void set_resv(struct kv_store *st, struct kv_inode *f, struct kv_resv *rv)
{
	struct kv_bucket_set *bs = st->ks_buckets;

	if (bs && f->ki_resv)
		kv_bucket_unreserve(bs, kv_resv_count(f->ki_resv) * KV_RESV_BYTES);
	else if (f->ki_resv)
		st->ks_resv_loaded -= kv_resv_count(f->ki_resv);
	kv_resv_free(f->ki_resv);
	f->ki_resv = rv;
	if (bs && rv)
		kv_bucket_reserve(bs, kv_resv_count(rv) * KV_RESV_BYTES, true);
	else if (rv)
		st->ks_resv_loaded += kv_resv_count(rv);
}

/*
 * Sets where a replayed key's value lives and its reserved extents, if
 * newer than what it has; the same version again brings newer
 * reservations only (a fallocate of a durable value).
 */
static void apply_put(struct kv_store *st, struct live *lv, struct kv_inode *f,
		      const struct kv_jent *e)
{
	struct kv_resv *rv;
	struct kv_xmap m;

	if (e->je_seq < f->ki_map.xm_seq || map_of(e, &m, &rv))
		return;
	set_resv(st, f, rv);
	if (e->je_seq == f->ki_map.xm_seq) {
		kv_xmap_clear(&m);
		return;
	}
	atomic_fetch_sub(&st->ks_bytes, f->ki_map.xm_size);
	atomic_fetch_add(&st->ks_bytes, e->je_len);
	if (lv) {
		live_unkey(lv, &f->ki_map);
		live_key(lv, &m);
	}
	kv_xmap_clear(&f->ki_map);
	f->ki_map = m;
	attrs_from(f, e);
	if (e->je_seq > atomic_load(&st->ks_seq))
		atomic_store(&st->ks_seq, e->je_seq);
}

/* Removes a replayed name, a directory with whatever it still holds, uncounting its keys. */
static void apply_del(struct replay *rp, struct kv_inode *dir, struct kv_inode *c)
{
	struct live *lv = rp->rp_live;

	while (S_ISDIR(c->ki_type) && c->kd_count) {
		for (uint32_t b = 0; b < c->kd_nbuckets; b++)
			if (c->kd_table[b]) {
				apply_del(rp, c, c->kd_table[b]);
				break;
			}
	}
	if (lv && S_ISREG(c->ki_type))
		live_unkey(lv, &c->ki_map);
	rp->rp_ns->pn_unname(rp->rp_st, dir, c);
}

/*
 * Makes the symlink, FIFO or socket of a NODE entry at dir/name, replacing a
 * non-directory of another type or target that holds the name.
 */
static void apply_node(struct replay *rp, struct kv_inode *dir, const char *name,
		       const struct kv_jent *e)
{
	const struct kv_persist_ns *ns = rp->rp_ns;
	struct kv_store *st = rp->rp_st;
	mode_t type = e->je_mode & S_IFMT;
	char target[KV_JPATH_MAX + 1];
	struct kv_inode *c = ns->pn_child(dir, name);

	if (type != S_IFLNK && type != S_IFIFO && type != S_IFSOCK)
		return;
	target[0] = '\0';
	if (type == S_IFLNK) {
		if (!e->je_path2_len || e->je_path2_len > KV_SYMLINK_MAX)
			return;
		memcpy(target, e->je_path2, e->je_path2_len);
		target[e->je_path2_len] = '\0';
	}
	if (c && S_ISDIR(c->ki_type))
		return;
	if (c && (c->ki_type != type || (c->ki_link && strcmp(c->ki_link, target)))) {
		ns->pn_unname(st, dir, c);
		c = NULL;
	}
	if (!c && ns->pn_make(st, dir, name, type, type == S_IFLNK ? target : NULL, &c))
		return;
	attrs_from(c, e);
}

/*
 * Moves one record of a replayed key, only onto the very record moved: the
 * extent je_next must still have birth sequence number je_seq and length
 * je_len (a later put or delete voids the move).
 */
static void apply_move(struct live *lv, struct kv_inode *f, const struct kv_jent *e)
{
	int64_t at = f->ki_map.xm_seq ? kv_xmap_find(&f->ki_map, e->je_next) : -1;
	struct kv_loc *l;

	if (at < 0)
		return;
	l = &kv_xmap_at(&f->ki_map, (uint32_t)at)->xe_loc;
	if (l->kl_seq == e->je_seq && l->kl_len == e->je_len) {
		if (lv)
			live_sub(lv, l);
		l->kl_bucket = e->je_bucket;
		l->kl_off = e->je_off;
		if (lv)
			live_add(lv, l);
	}
}

/* Applies one journal or checkpoint entry to rp (recovery: ks_ns_lock held exclusive). */
static int apply(const struct kv_jent *e, uint64_t lsn, void *arg)
{
	struct replay *rp = arg;
	struct kv_store *st = rp->rp_st;
	const struct kv_persist_ns *ns = rp->rp_ns;
	char buf[KV_JPATH_MAX + 1], buf2[KV_JPATH_MAX + 1];
	const char *name, *name2;
	struct kv_inode *dir, *dir2, *c;
	size_t nlen, nlen2;

	(void)lsn;
	if (is_root_path(e)) {
		if (e->je_type == KV_J_MKDIR || e->je_type == KV_J_SETATTR)
			attrs_from(st->ks_root, e);
		return 0;
	}
	switch (e->je_type) {
	case KV_J_MKDIR:
	case KV_J_PUT:
		dir = walk_to_parent(rp, e->je_path, e->je_path_len, true, buf, &name, &nlen);
		if (!dir || ns->pn_child_make(st, dir, name, nlen,
					      e->je_type == KV_J_MKDIR ? S_IFDIR : S_IFREG, &c))
			return 0;
		if (e->je_type == KV_J_MKDIR && S_ISDIR(c->ki_type))
			attrs_from(c, e);
		else if (e->je_type == KV_J_PUT && S_ISREG(c->ki_type))
			apply_put(st, rp->rp_live, c, e);
		return 0;
	case KV_J_NODE:
		dir = walk_to_parent(rp, e->je_path, e->je_path_len, true, buf, &name, &nlen);
		if (dir && rp->rp_live && ns->pn_child(dir, name))
			rp->rp_live->lv_inexact = true; /* it may replace a key counted */
		if (dir)
			apply_node(rp, dir, name, e);
		return 0;
	case KV_J_DEL:
		dir = walk_to_parent(rp, e->je_path, e->je_path_len, false, buf, &name, &nlen);
		c = dir ? ns->pn_child(dir, name) : NULL;
		if (c)
			apply_del(rp, dir, c);
		rp->rp_dir = NULL; /* it may have been below c */
		return 0;
	case KV_J_RENAME:
		dir = walk_to_parent(rp, e->je_path, e->je_path_len, false, buf, &name, &nlen);
		dir2 = walk_to_parent(rp, e->je_path2, e->je_path2_len, true, buf2, &name2, &nlen2);
		c = dir2 ? ns->pn_child(dir2, name2) : NULL;
		if (rp->rp_live && c && !S_ISDIR(c->ki_type) && !(e->je_flags & RENAME_EXCHANGE))
			rp->rp_live->lv_inexact = true; /* it may replace a key counted */
		if (dir && dir2)
			ns->pn_rename(st, dir, name, dir2, name2, e->je_flags);
		rp->rp_dir = NULL; /* it may have moved or replaced a directory */
		return 0;
	case KV_J_SETATTR:
		dir = walk_to_parent(rp, e->je_path, e->je_path_len, false, buf, &name, &nlen);
		c = dir ? ns->pn_child(dir, name) : NULL;
		if (c)
			attrs_from(c, e);
		return 0;
	case KV_J_MOVE:
		/* Only onto the very value moved: a later put or delete voids it. */
		dir = walk_to_parent(rp, e->je_path, e->je_path_len, false, buf, &name, &nlen);
		c = dir ? ns->pn_child(dir, name) : NULL;
		if (c && S_ISREG(c->ki_type))
			apply_move(rp->rp_live, c, e);
		return 0;
	default:
		return 0;
	}
}

/* --- walking the tree (ks_ns_lock held) --- */

typedef void (*visit_fn)(struct kv_store *st, struct kv_inode *dir, struct kv_inode *ino,
			 void *arg);

/* Calls fn for every node below dir, parents before children. */
static void visit(struct kv_store *st, struct kv_inode *dir, visit_fn fn, void *arg)
{
	for (uint32_t b = 0; b < dir->kd_nbuckets; b++) {
		struct kv_inode *c = dir->kd_table[b];

		while (c) {
			/* fn may take a file's name away, freeing it: read c first. */
			struct kv_inode *next = c->ki_hnext;
			bool isdir = S_ISDIR(c->ki_type);

			fn(st, dir, c, arg);
			if (isdir && c->ki_parent == dir)
				visit(st, c, fn, arg);
			c = next;
		}
	}
}

/* apply(), counting the journal entries replayed. */
static int apply_counted(const struct kv_jent *e, uint64_t lsn, void *arg)
{
	struct replay *rp = arg;

	rp->rp_n++;
	return apply(e, lsn, rp);
}

/* Drops keys whose record is not on disk; sums the live bytes of the rest. */
static void check_key(struct kv_store *st, struct kv_inode *dir, struct kv_inode *ino, void *arg)
{
	struct live *lv = arg;

	if (!S_ISREG(ino->ki_type))
		return; /* metadata only: nothing on disk to check */
	if (!ino->ki_map.xm_seq || !kv_xmap_valid(lv->lv_bs, &ino->ki_map)) {
		lv->lv_lost++;
		lv->lv_ns->pn_unname(st, dir, ino);
		return;
	}
	live_key(lv, &ino->ki_map);
}

static void drop_orphan(uint64_t id, void *arg)
{
	struct live *lv = arg;
	size_t i = live_at(lv, id);

	if (i < lv->lv_n && lv->lv_b[i].lb_id == id && lv->lv_b[i].lb_bytes)
		kv_bucket_set_live(lv->lv_bs, id, lv->lv_b[i].lb_bytes);
	else
		kv_bucket_drop(lv->lv_bs, id);
}

/* The tier, opened while the checkpoint loads: reading every bucket's trailer is I/O. */
struct opener {
	struct kv_store *op_st;
	int op_datadir_fd;
	const struct kv_persist_ns *op_ns;
	struct kv_tier *op_tier;
	struct kv_bucket_set *op_bs;
	int op_err;
};

static void *open_tier(void *arg)
{
	struct opener *op = arg;

	op->op_err =
	    op->op_ns->pn_open_tier(op->op_st, op->op_datadir_fd, &op->op_tier, &op->op_bs);
	return NULL;
}

/*
 * Recovery. The checkpoint only names things (MKDIR, PUT, NODE: no entry
 * removes or moves one), so it loads into the tree while another thread
 * opens the bucket set (ns->pn_open_tier); ks_tier and ks_buckets stay
 * NULL until both are done, and nothing the load calls looks at them then.
 * The journal, which removes and renames, is replayed after, with the tier
 * there.
 */
int kv_persist_recover(struct kv_store *st, int datadir_fd, const struct kv_persist_ns *ns,
		       struct kv_persist_recovered *rec)
{
	uint64_t t0 = kv_now_ns(), next_seq = 1, next_bucket = 1, gen = 0, last_gen, last_lsn;
	struct opener op = {.op_st = st, .op_datadir_fd = datadir_fd, .op_ns = ns};
	struct live lv = {.lv_ns = ns};
	struct replay rp = {.rp_st = st, .rp_ns = ns, .rp_live = &lv};
	struct kv_bucket_set *bs;
	bool have_ckpt, opening;
	pthread_t opener;
	int err;

	opening = pthread_create(&opener, NULL, open_tier, &op) == 0;
	pthread_rwlock_wrlock(&st->ks_ns_lock);
	err = kv_ckpt_load(datadir_fd, apply, &rp, &next_seq, &next_bucket, &gen);
	pthread_rwlock_unlock(&st->ks_ns_lock);
	if (opening)
		pthread_join(opener, NULL);
	else
		open_tier(&op);
	if (op.op_err)
		return op.op_err;
	st->ks_tier = op.op_tier;
	bs = lv.lv_bs = st->ks_buckets = op.op_bs;
	kv_bucket_reserve(bs, st->ks_resv_loaded * KV_RESV_BYTES, true); /* the checkpoint's */
	have_ckpt = !err;
	if (err == -ENOENT)
		err = 0;
	pthread_rwlock_wrlock(&st->ks_ns_lock);
	if (!err)
		err = kv_journal_replay(datadir_fd, gen, apply_counted, &rp, &last_gen, &last_lsn);
	if (!err && (!have_ckpt || !live_checked(&lv, st))) {
		/* Keys may be gone, replaced or invalid: check each one. */
		free(lv.lv_b);
		lv = (struct live){.lv_bs = bs, .lv_ns = ns};
		visit(st, st->ks_root, check_key, &lv);
	}
	if (!err) {
		kv_bucket_each(bs, drop_orphan, &lv);
		kv_bucket_min_id(bs, next_bucket);
		if (next_seq > atomic_load(&st->ks_seq) + 1)
			atomic_store(&st->ks_seq, next_seq - 1);
	}
	pthread_rwlock_unlock(&st->ks_ns_lock);
	free(lv.lv_b);
	if (err)
		return err;
	err = kv_journal_open(&st->ks_journal, datadir_fd, last_gen, last_lsn,
			      st->ks_cfg->kc_flush_delay_ns);
	if (err)
		return err;
	/*
	 * Without a checkpoint, or with keys dropped, a new one is written
	 * here: the next start must not meet the names of records that are
	 * gone (a new bucket could take a dropped one's id). Otherwise the
	 * checkpoint read and the journal replayed onto it say what the
	 * namespace is, and the journal goes on from its replayed tail, like
	 * between any two checkpoints: one journal file is what the usual
	 * rule (a checkpoint once the journal outgrows CHECKPOINT_BYTES,
	 * core/tier.c) lets a crash leave anyway, so it stays, and a start
	 * after a crash writes no checkpoint — a snapshot of millions of keys
	 * would compete with the mount for the CPUs and for memory just as
	 * it starts to serve. Several journal files (a crash between a
	 * rotation and its checkpoint) are more than that rule allows: their
	 * checkpoint is written by kv_persist_start once the mount serves.
	 */
	if (!have_ckpt || lv.lv_lost)
		err = kv_persist_checkpoint(st);
	else if (last_gen != gen)
		st->ks_ckpt_due = true;
	*rec = (struct kv_persist_recovered){
	    .pr_ns = kv_now_ns() - t0, .pr_keys = lv.lv_keys, .pr_lost = lv.lv_lost};
	return err;
}

static void *checkpoint_main(void *arg)
{
	/* A failure loses nothing: the journal still holds it all, the next checkpoint retries. */
	kv_persist_checkpoint(arg);
	return NULL;
}

void kv_persist_start(struct kv_store *st)
{
	if (!st->ks_ckpt_due)
		return;
	st->ks_ckpt_started = pthread_create(&st->ks_ckpt_thread, NULL, checkpoint_main, st) == 0;
	if (!st->ks_ckpt_started)
		kv_persist_checkpoint(st);
}

void kv_persist_stop(struct kv_store *st)
{
	if (st->ks_ckpt_started)
		pthread_join(st->ks_ckpt_thread, NULL);
	st->ks_ckpt_started = st->ks_ckpt_due = false;
}

/* --- checkpoints --- */

/*
 * The namespace as a checkpoint image, taken under ks_ns_lock: each node's
 * entry is encoded into the image at once (kv_ckpt_img_add), so nothing of
 * an inode is kept past the lock, and nothing but the image is allocated.
 */
struct snap {
	struct kv_ckpt_img *sn_img;
	int sn_err; /* the first entry that could not be added: the image misses it */
};

static void snap_add(struct kv_store *st, struct kv_inode *dir, struct kv_inode *ino, void *arg)
{
	struct snap *sn = arg;
	char path[KV_JPATH_MAX];
	struct kv_jent e = {0};
	int err = -ENOENT; /* nothing to add */

	pthread_rwlock_rdlock(&ino->ki_lock);
	if (S_ISDIR(ino->ki_type)) {
		int len = root_path(st, ino, path, sizeof(path));

		e.je_type = KV_J_MKDIR;
		attrs_to(ino, &e);
		e.je_path = path;
		e.je_path_len = (uint32_t)len;
		err = len > 0 ? 0 : -ENOENT;
	} else if (!S_ISREG(ino->ki_type)) {
		err = node_entry(ino, path, sizeof(path), &e);
	} else if (ino->ki_map.xm_seq) {
		err = put_entry(ino, path, sizeof(path), &e);
	}
	if (!err)
		err = kv_ckpt_img_add(sn->sn_img, &e);
	pthread_rwlock_unlock(&ino->ki_lock);
	free((void *)e.je_ext);
	/* A key without its entry would be lost: the checkpoint fails instead. */
	if (err && err != -ENOENT && !sn->sn_err)
		sn->sn_err = err;
}

/* Snapshots the whole namespace into sn_img, the root first (ks_ns_lock held). */
static void snapshot(struct kv_store *st, struct snap *sn)
{
	snap_add(st, NULL, st->ks_root, sn);
	visit(st, st->ks_root, snap_add, sn);
}

/*
 * The image is made ready before the namespace is frozen, as large as the
 * last checkpoint and the journal since (what it names comes from one or
 * the other): so the snapshot only walks and encodes, and does not wait
 * for fresh memory (on a VM whose host takes freed pages back, faulting
 * 130 MB in took longer than the walk). Keys the image had no room for are
 * encoded into memory allocated under the lock.
 */
int kv_persist_checkpoint(struct kv_store *st)
{
	struct snap sn = {0};
	uint64_t gen, next_seq, next_bucket, guess;
	int err;

	if (!st->ks_journal)
		return 0;
	guess = kv_ckpt_size(st->ks_datadir_fd) + kv_journal_size(st->ks_journal);
	err = kv_ckpt_img_new(&sn.sn_img, (size_t)guess);
	if (err)
		return err;
	pthread_mutex_lock(&st->ks_ckpt_lock);
	/* Frozen: no namespace change and no PUT can slip between rotation and snapshot. */
	pthread_rwlock_wrlock(&st->ks_ns_lock);
	err = kv_journal_rotate(st->ks_journal, &gen);
	if (!err)
		snapshot(st, &sn);
	next_seq = atomic_load(&st->ks_seq) + 1;
	next_bucket = kv_bucket_next_id(st->ks_buckets);
	pthread_rwlock_unlock(&st->ks_ns_lock);
	if (!err)
		err = sn.sn_err;
	if (!err)
		err = kv_ckpt_img_write(sn.sn_img, st->ks_datadir_fd, next_seq, next_bucket, gen);
	if (!err)
		kv_journal_drop_before(st->ks_datadir_fd, gen);
	pthread_mutex_unlock(&st->ks_ckpt_lock);
	kv_ckpt_img_free(sn.sn_img);
	return err;
}

/* --- offline: fsck and salvage --- */

struct fsck {
	struct kv_bucket_set *fk_bs;
	FILE *fk_out;
	uint64_t fk_keys, fk_bad_keys, fk_bytes;
};

/* Reads and checks one record, every chunk against its checksum. */
static int fsck_rec(struct kv_bucket_set *bs, const struct kv_loc *loc)
{
	uint64_t *csums = NULL;
	uint32_t nchunks;
	int err = kv_bucket_load_csums(bs, loc, &csums, &nchunks);

	for (uint64_t off = 0; !err && off < loc->kl_len; off += 4u << 20) {
		void *buf;
		char *data;
		uint64_t n;

		err = kv_bucket_read(bs, loc, csums, off, 4u << 20, &buf, &data, &n);
		if (!err)
			kv_bucket_read_free(buf);
	}
	free(csums);
	return err;
}

/* Reads and checks one key's whole value: every record of its map. */
static void fsck_key(struct kv_store *st, struct kv_inode *dir, struct kv_inode *ino, void *arg)
{
	struct fsck *fk = arg;
	int err = 0;

	if (!S_ISREG(ino->ki_type))
		return; /* directories and metadata-only nodes: nothing on disk to read */
	fk->fk_keys++;
	for (uint32_t i = 0; !err && i < ino->ki_map.xm_n; i++)
		err = fsck_rec(fk->fk_bs, &kv_xmap_at(&ino->ki_map, i)->xe_loc);
	if (err) {
		char path[KV_JPATH_MAX];

		fk->fk_bad_keys++;
		if (kv_inode_path(ino, path, sizeof(path)) > 0)
			fprintf(fk->fk_out, "damaged: %s (%s)\n", path, strerror(-err));
	} else {
		fk->fk_bytes += ino->ki_map.xm_size;
	}
}

/* One line per bucket: its size, live and dead bytes (compaction's view). */
static void fsck_buckets(struct kv_bucket_set *bs, FILE *out)
{
	struct kv_bucket_info *info;
	uint32_t n;

	if (kv_bucket_list(bs, &info, &n))
		return;
	for (uint32_t i = 0; i < n; i++)
		fprintf(out,
			"fsck: bucket %016" PRIx64 ": %" PRIu64 " bytes, %" PRIu64
			" records, %" PRIu64 " record bytes, %" PRIu64 " dead (%.1f%%)\n",
			info[i].bi_id, info[i].bi_size, info[i].bi_count, info[i].bi_records,
			info[i].bi_dead,
			info[i].bi_records
			    ? 100.0 * (double)info[i].bi_dead / (double)info[i].bi_records
			    : 0.0);
	free(info);
}

static int count_rec(const struct kv_bucket_rec *r, void *arg)
{
	(*(uint64_t *)arg)++;
	return 0;
}

uint64_t kv_persist_fsck(struct kv_store *st, const struct kv_store_usage *u, FILE *out)
{
	struct fsck fk = {.fk_out = out, .fk_bs = st->ks_buckets};
	uint64_t records = 0, bad = 0;

	kv_bucket_scan(fk.fk_bs, true, count_rec, &records, &bad);
	pthread_rwlock_rdlock(&st->ks_ns_lock);
	visit(st, st->ks_root, fsck_key, &fk);
	pthread_rwlock_unlock(&st->ks_ns_lock);
	fprintf(out,
		"fsck: recovery %.3f s, %" PRIu64 " keys, %" PRIu64 " directories\n"
		"fsck: %" PRIu64 " buckets, %" PRIu64 " bytes, %" PRIu64 " dead; %" PRIu64
		" open buckets cut at their last good record\n"
		"fsck: %" PRIu64 " records checked, %" PRIu64 " damaged\n"
		"fsck: %" PRIu64 " keys read back (%" PRIu64 " bytes), %" PRIu64 " damaged\n"
		"fsck: %" PRIu64 " keys dropped: the metadata points at records not there\n"
		"fsck: %" PRIu64 " symlinks, %" PRIu64 " FIFOs and sockets (metadata only)\n",
		u->ku_recovery_ns / 1e9, u->ku_keys, u->ku_dirs - 1, u->ku_buckets, u->ku_ssd_used,
		u->ku_ssd_dead, u->ku_torn_buckets, records, bad, fk.fk_keys, fk.fk_bytes,
		fk.fk_bad_keys, u->ku_lost_keys, u->ku_symlinks, u->ku_specials);
	fsck_buckets(fk.fk_bs, out);
	return bad + fk.fk_bad_keys + u->ku_lost_keys;
}

/*
 * Salvage. Every WHOLE record becomes a PUT of its key, the newest winning;
 * so does every MANIFEST whose extent records are all found, sound and of
 * the lengths it names. EXTENT records are gathered during the scan and
 * manifests resolved after it, by birth sequence number and extent index
 * alone: sequence numbers are the store's, unique to a version, and a
 * version may share the records of one made under an older name (renamed
 * since). A spilled extent written again in one version leaves two records
 * of that number and index: the one placed last (highest bucket and
 * offset) is taken, the one its manifest names unless compaction moved the
 * earlier one into a newer bucket before it was replaced (README, Limits).
 */
struct sv_ext {
	struct kv_loc se_loc;
};

struct sv_man {
	char *sm_key;
	uint32_t sm_key_len;
	struct kv_loc sm_loc;
	void *sm_value; /* the manifest (sm_loc.kl_len bytes) */
};

struct salvage {
	struct kv_store *sv_st;
	const struct kv_persist_ns *sv_ns;
	struct sv_ext *sv_ext;
	size_t sv_next, sv_maxext;
	struct sv_man *sv_man;
	size_t sv_nman, sv_maxman;
	int sv_err;
};

static int salvage_put(struct salvage *sv, const char *key, uint32_t key_len, struct kv_jent *e)
{
	struct replay rp = {.rp_st = sv->sv_st, .rp_ns = sv->sv_ns};
	struct timespec now_ts;

	e->je_type = KV_J_PUT;
	e->je_mode = 0644;
	kv_inode_now(&now_ts);
	e->je_atime_ns = e->je_mtime_ns = e->je_ctime_ns = ns_of(&now_ts);
	e->je_path = key;
	e->je_path_len = key_len;
	return apply(e, 0, &rp);
}

static bool grow(void **a, size_t *max, size_t n, size_t size)
{
	void *b;

	if (n < *max)
		return true;
	b = realloc(*a, (*max ? *max * 2 : 256) * size);
	if (!b)
		return false;
	*a = b;
	*max = *max ? *max * 2 : 256;
	return true;
}

static int salvage_rec(const struct kv_bucket_rec *r, void *arg)
{
	struct salvage *sv = arg;
	struct kv_jent e = {0};
	char *key;

	if (r->br_key_len == 0 || r->br_key_len > KV_JPATH_MAX)
		return 0;
	if (r->br_flags == KV_REC_WHOLE) {
		e.je_seq = r->br_loc.kl_seq;
		e.je_bucket = r->br_loc.kl_bucket;
		e.je_off = r->br_loc.kl_off;
		e.je_len = r->br_loc.kl_len;
		e.je_head_len = r->br_loc.kl_head_len;
		return salvage_put(sv, r->br_key, r->br_key_len, &e);
	}
	if (r->br_flags == KV_REC_EXTENT) {
		if (!grow((void **)&sv->sv_ext, &sv->sv_maxext, sv->sv_next, sizeof(*sv->sv_ext)))
			return sv->sv_err = -ENOMEM;
		sv->sv_ext[sv->sv_next++] = (struct sv_ext){.se_loc = r->br_loc};
		return 0;
	}
	key = strndup(r->br_key, r->br_key_len);
	if (!key)
		return sv->sv_err = -ENOMEM;
	if (!r->br_value || !grow((void **)&sv->sv_man, &sv->sv_maxman, sv->sv_nman,
				  sizeof(*sv->sv_man))) {
		free(key);
		return r->br_value ? (sv->sv_err = -ENOMEM) : 0;
	}
	sv->sv_man[sv->sv_nman] =
	    (struct sv_man){.sm_key = key, .sm_key_len = r->br_key_len, .sm_loc = r->br_loc};
	sv->sv_man[sv->sv_nman].sm_value = malloc(r->br_loc.kl_len ? r->br_loc.kl_len : 1);
	if (!sv->sv_man[sv->sv_nman].sm_value) {
		free(key);
		return sv->sv_err = -ENOMEM;
	}
	memcpy(sv->sv_man[sv->sv_nman++].sm_value, r->br_value, r->br_loc.kl_len);
	return 0;
}

/* By birth sequence number, extent index, then place (bucket, offset). */
static int sv_ext_order(const void *a, const void *b)
{
	const struct kv_loc *x = &((const struct sv_ext *)a)->se_loc;
	const struct kv_loc *y = &((const struct sv_ext *)b)->se_loc;

	if (x->kl_seq != y->kl_seq)
		return x->kl_seq < y->kl_seq ? -1 : 1;
	if (x->kl_index != y->kl_index)
		return x->kl_index < y->kl_index ? -1 : 1;
	if (x->kl_bucket != y->kl_bucket)
		return x->kl_bucket < y->kl_bucket ? -1 : 1;
	return x->kl_off < y->kl_off ? -1 : x->kl_off > y->kl_off;
}

/* The extent record with birth seq `seq` and index `index` placed last, or NULL. */
static const struct sv_ext *sv_find(const struct salvage *sv, uint64_t seq, uint32_t index)
{
	size_t lo = 0, hi = sv->sv_next;

	while (lo < hi) { /* the first entry past (seq, index) */
		size_t mid = lo + (hi - lo) / 2;
		const struct kv_loc *l = &sv->sv_ext[mid].se_loc;

		if (l->kl_seq < seq || (l->kl_seq == seq && l->kl_index <= index))
			lo = mid + 1;
		else
			hi = mid;
	}
	if (!lo || sv->sv_ext[lo - 1].se_loc.kl_seq != seq ||
	    sv->sv_ext[lo - 1].se_loc.kl_index != index)
		return NULL;
	return &sv->sv_ext[lo - 1];
}

/* Turns a manifest whose every extent is there into a PUT. */
static int salvage_manifest(struct salvage *sv, const struct sv_man *sm)
{
	struct kv_manifest mf;
	struct kv_jext *x;
	struct kv_jent e = {0};
	int err = 0;

	if (sm->sm_loc.kl_len < sizeof(mf))
		return 0;
	memcpy(&mf, sm->sm_value, sizeof(mf));
	if (mf.mf_seq != sm->sm_loc.kl_seq || mf.mf_count >= KV_JEXT_MAX ||
	    sm->sm_loc.kl_len != sizeof(mf) + (uint64_t)mf.mf_count * sizeof(struct kv_manifest_ent))
		return 0;
	x = calloc(mf.mf_count + 1, sizeof(*x));
	if (!x)
		return -ENOMEM;
	for (uint32_t i = 0; !err && i < mf.mf_count; i++) {
		struct kv_manifest_ent me;
		const struct sv_ext *se;

		memcpy(&me, (char *)sm->sm_value + sizeof(mf) + i * sizeof(me), sizeof(me));
		se = sv_find(sv, me.me_seq, me.me_index);
		if (!se || se->se_loc.kl_len != me.me_len) {
			err = 1; /* incomplete: an older version may still be whole */
			break;
		}
		x[i] = jext_of(&se->se_loc);
	}
	if (!err) {
		x[mf.mf_count] = jext_of(&sm->sm_loc); /* the manifest: KV_MANIFEST_INDEX */
		e.je_flags = KV_JPUT_EXTENTS;
		e.je_seq = mf.mf_seq;
		e.je_len = mf.mf_size;
		e.je_next = mf.mf_count + 1;
		e.je_ext = x;
		err = salvage_put(sv, sm->sm_key, sm->sm_key_len, &e);
	}
	free(x);
	return err > 0 ? 0 : err;
}

static int salvage_resolve(struct salvage *sv)
{
	int err = 0;

	qsort(sv->sv_ext, sv->sv_next, sizeof(*sv->sv_ext), sv_ext_order);
	for (size_t i = 0; !err && i < sv->sv_nman; i++)
		err = salvage_manifest(sv, &sv->sv_man[i]);
	return err;
}

static void salvage_free(struct salvage *sv)
{
	for (size_t i = 0; i < sv->sv_nman; i++) {
		free(sv->sv_man[i].sm_key);
		free(sv->sv_man[i].sm_value);
	}
	free(sv->sv_ext);
	free(sv->sv_man);
}

/* The highest journal generation in DATA_DIR, or 0. */
static uint64_t max_gen(int dirfd)
{
	/* A descriptor of its own: a dup would share (and move) the offset. */
	DIR *d = fdopendir(openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
	struct dirent *de;
	uint64_t max = 0;

	if (!d)
		return 0;
	while ((de = readdir(d))) {
		char *end;
		uint64_t g;

		if (strncmp(de->d_name, "journal.", 8))
			continue;
		g = strtoull(de->d_name + 8, &end, 10);
		if (!*end && g > max)
			max = g;
	}
	closedir(d);
	return max;
}

int kv_persist_salvage(struct kv_store *st, const struct kv_persist_ns *ns, int datadir_fd,
		       FILE *out)
{
	const struct kv_config *cfg = st->ks_cfg;
	struct kv_bucket_opts bo = {.bo_bucket_size = cfg->kc_bucket_size,
				    .bo_bucket_keys = cfg->kc_bucket_keys,
				    .bo_cap = UINT64_MAX};
	struct kv_bucket_set *bs;
	struct kv_aio *aio;
	struct snap sn = {0};
	struct salvage sv = {0};
	uint64_t bad = 0, gen;
	int err;

	err = kv_aio_create(&aio, 64);
	if (err)
		return err;
	err = kv_bucket_open(&bs, datadir_fd, &bo, aio);
	if (err)
		goto out_aio;
	err = kv_ckpt_img_new(&sn.sn_img, 0);
	if (err)
		goto out_buckets;
	pthread_rwlock_wrlock(&st->ks_ns_lock);
	sv.sv_st = st;
	sv.sv_ns = ns;
	err = kv_bucket_scan(bs, true, salvage_rec, &sv, &bad);
	if (!err)
		err = sv.sv_err;
	if (!err)
		err = salvage_resolve(&sv);
	if (!err)
		snapshot(st, &sn);
	pthread_rwlock_unlock(&st->ks_ns_lock);
	gen = max_gen(datadir_fd) + 1;
	if (!err)
		err = sn.sn_err;
	if (!err)
		err = kv_ckpt_img_write(sn.sn_img, datadir_fd, atomic_load(&st->ks_seq) + 1,
					kv_bucket_next_id(bs), gen);
	if (!err)
		kv_journal_drop_before(datadir_fd, gen);
	fprintf(out,
		"salvage: %" PRIu64 " keys rebuilt from the buckets, %" PRIu64
		" damaged records skipped%s\n",
		atomic_load(&st->ks_keys), bad, err ? "; FAILED" : "");
	kv_ckpt_img_free(sn.sn_img);
	salvage_free(&sv);
out_buckets:
	kv_bucket_close(bs);
out_aio:
	kv_aio_destroy(aio);
	return err;
}
