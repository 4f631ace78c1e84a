/* SPDX-License-Identifier: MIT */
/*
 * rados/shared.c — the shared tier on RADOS (see rados/shared.h; the objects
 * are drawn in rados/rados_format.h).
 *
 * One thread, sh_thread, does everything that changes the cluster: it
 * connects (attempts until one works or kv_shared_stop, sleeping on sh_cond
 * between them), then takes the change queue in order. The store's hooks
 * (kh_sealed, kh_changed) append to that queue and never wait; since one
 * thread applies the changes in the order they were made, a delete can
 * never overtake the put it follows, and no lock is needed around the
 * compare-and-set protocols. A change the cluster cannot take now (a
 * timeout, a full cluster) stays at the head and is tried again after a
 * backoff: the backlog waits, in order, bounded by the SSD quota (the
 * values it names are local keys).
 *
 * FUSE threads read the cluster (lookups, readdir) and change only the
 * local store, "quietly": tl_quiet tells the hooks that the change comes
 * from the cluster and must not go back to it.
 *
 * Every change queued is also appended to DATA_DIR/rados.log
 * (rados/rados_log.h), under sh_lock so the log is in queue order, and the
 * thread records there how far it got: what a stop, a kill -9 or an outage
 * left unsent is queued again at the next start. A put is logged by its
 * local sequence number; the thread finds the key that still has it (one
 * walk of the namespace) before it sends anything.
 *
 * The known table remembers, per local key (inode number), which local
 * version (sequence number) is the same bytes as which cluster version
 * (node, seq), and when that was last checked against the directory entry.
 * What it says of clean versions is also kept in DATA_DIR/rados.known
 * (rados/rados_known.h), by sequence number, so that after a restart a copy
 * is still known as a copy (replaced or removed with the cluster's
 * version) and a key made here (kept until it is sent) is not.
 */
#include "rados/shared.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "core/obj.h"
#include "core/pool.h"
#include "core/stats.h"
#include "core/store.h"
#include "rados/rados.h"
#include "rados/rados_format.h"
#include "rados/rados_known.h"
#include "rados/rados_log.h"

/* the known table: its chains (a power of two), and its records (about 200 MiB) */
#define KNOWN_BUCKETS 65536
#define KNOWN_MAX     (4u << 20) /* keys deleted elsewhere leave theirs: a full chain gives way */
#define IO_BATCH      8		 /* data objects in flight per put or fetch */
#define CAS_TRIES     16	 /* compare-and-set attempts before giving up */
#define SMALL_PUTS    16	 /* small puts whose objects the thread writes at once */
#define FETCH_PREFIX  ".kvfs-fetch."
#define DC_DIRS	      256  /* directory listings kept (for the TTL) */
#define DC_MAX	      4096 /* entries of the largest listing kept; larger: asked per key */
#define BIG_DIRS      16   /* directories remembered as too large to list (prefetch) */

/*
 * A connection and its users: FUSE threads count themselves in (conn_get,
 * under sh_lock) so that the thread can replace a connection that stopped
 * answering and close the old one once they are out.
 */
struct conn {
	struct kv_rados *c_r;
	_Atomic unsigned c_users;
	struct conn *c_next; /* on sh_retired */
};

/* A local key whose version is known in the cluster (sh_known_lock). */
struct known {
	struct known *kn_next;
	uint64_t kn_ino;	   /* kv_inode_ino */
	uint64_t kn_seq;	   /* the local version this describes */
	uint64_t kn_node, kn_rseq; /* kn_clean: the cluster version with the same bytes */
	bool kn_clean;		   /* the local version is the cluster's (fetched or published) */
	uint64_t kn_checked_ns;	   /* CLOCK_MONOTONIC when last checked against the entry */
};

enum change_kind { CH_PUT, CH_DEL, CH_MKDIR, CH_RMDIR, CH_RENAME, CH_SYMLINK };

/* A change for the cluster, in the queue (sh_q_lock). */
struct change {
	struct change *ch_next;
	enum change_kind ch_kind;
	uint64_t ch_id;		  /* its place in the queue, from 1 */
	struct kv_inode *ch_ino;  /* PUT, SYMLINK: referenced; NULL: from the log (PUT: key not
				     found yet) */
	uint64_t ch_seq, ch_size; /* PUT (SYMLINK: ch_seq, its owner: uid << 32 | gid) */
	char *ch_path, *ch_path2; /* the others: "/a/b" (RENAME: from, to; SYMLINK: the target) */
	int64_t ch_time_ns;	  /* not PUT: CLOCK_REALTIME when made here */
	uint64_t ch_vnode, ch_vseq; /* DEL, RENAME: the cluster version the key was a copy of
				       here (ch_vnode 0: none known) */
	uint64_t ch_mark;	    /* DEL, RENAME: the store's last sequence number then */
	mode_t ch_mode;		  /* MKDIR */
};

struct dlist; /* a directory's listing (below) */

struct kv_shared {
	/* immutable after kv_shared_start */
	char *sh_pool, *sh_ns, *sh_conf, *sh_id;
	unsigned sh_timeout_s;
	uint64_t sh_ttl_ns;
	bool sh_sync;
	uint64_t sh_node;
	unsigned sh_pause_ms;	    /* KVFS_TEST_RADOS_PUBLISH_PAUSE_MS: tests only */
	uint64_t sh_reconnected_ns; /* the thread only: when probe() last replaced the connection */
	uint64_t sh_gc_interval_ns, sh_gc_grace_ns; /* the background sweep; interval 0: none */
	struct kv_store *sh_st;
	struct kv_rknown *sh_rk; /* DATA_DIR/rados.known, or NULL (thread-safe itself) */
	pthread_t sh_thread;

	/*
	 * sh_lock guards the fields below it and is a leaf (rados/shared.h,
	 * "Locks"); sh_cond (CLOCK_MONOTONIC) wakes the thread for a stop or
	 * a change.
	 */
	pthread_mutex_t sh_lock;
	pthread_cond_t sh_cond;
	bool sh_stop; /* kv_shared_stop was called */
	enum kv_shared_state sh_state;
	struct conn *sh_conn;	 /* the connection (NULL before); replaced by reconnect() */
	struct conn *sh_retired; /* connections replaced, closed once nobody uses them */
	int sh_last_err;	 /* -errno of the last failure */
	char sh_last_text[160];	 /* its step and strerror */
	/* the change queue, and its log (NULL: none) */
	struct change *sh_q_head, *sh_q_tail;
	struct kv_rlog *sh_log;
	uint64_t sh_log_limit;	     /* log bytes that make a rewrite worth it */
	bool sh_log_failed;	     /* an append failed (logged once); until nothing is left, or a
					rewrite, fsync answers EIO */
	uint64_t sh_unresolved;	     /* puts read back from the log, their keys not yet found */
	uint64_t sh_q_last;	     /* the id of the last change queued */
	uint64_t sh_q_done;	     /* every change up to this id is done */
	uint64_t sh_q_n, sh_q_bytes; /* the backlog */
	pthread_cond_t sh_done_cond; /* sh_q_done moved */

	/* sh_known_lock (a leaf) guards the known table */
	pthread_mutex_t sh_known_lock;
	struct known **sh_known;
	uint64_t sh_known_n; /* its records, at most KNOWN_MAX */

	/* sh_dc_lock (a leaf) guards sh_dc and sh_ndc, the cached listings, and sh_big */
	pthread_mutex_t sh_dc_lock;
	struct dlist *sh_dc[DC_DIRS];
	unsigned sh_ndc;
	uint64_t sh_big[BIG_DIRS], sh_big_ns[BIG_DIRS]; /* big_dir(): hashes of doids, when */
	unsigned sh_nbig;

	_Atomic bool sh_healthy;       /* the last cluster operation answered */
	_Atomic uint64_t sh_renames;   /* renames made here: start_walk's prune needs none */
	_Atomic uint64_t sh_fetch_seq; /* names of fetches in flight */

	/* only the thread: directories known to have their entry in the cluster (since) */
	uint64_t *sh_dirs, sh_dirs_since_ns;
	size_t sh_ndirs, sh_cap_dirs;

	/* atomics: read by the stats at any time */
	_Atomic uint64_t sh_attempts, sh_failures;
	_Atomic uint64_t sh_objects_read, sh_objects_written;
	_Atomic uint64_t sh_bytes_read, sh_bytes_written;
	_Atomic uint64_t sh_errors, sh_timeouts, sh_hits, sh_puts, sh_deletes;
	_Atomic uint64_t sh_gc_sweeps, sh_gc_removed;
	_Atomic uint64_t sh_prefetched; /* of sh_hits, brought in by kv_shared_prefetch */
	uint64_t sh_replayed; /* changes read back from the log (immutable after start) */
	struct kv_hist sh_lat;
};

/* Set while a thread changes the local store for the cluster: the hooks ignore it. */
static _Thread_local bool tl_quiet;

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int64_t realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

bool kv_shared_built(void)
{
	return kv_rados_built();
}

const char *kv_shared_state_name(enum kv_shared_state st)
{
	switch (st) {
	case KV_SHARED_CONNECTING:
		return "connecting";
	case KV_SHARED_CONNECTED:
		return "connected";
	case KV_SHARED_UNREACHABLE:
		return "unreachable";
	}
	return "?";
}

const char *kv_shared_pool(const struct kv_shared *sh)
{
	return sh->sh_pool;
}

const char *kv_shared_namespace(const struct kv_shared *sh)
{
	return sh->sh_ns;
}

/* --- talking to the cluster --- */

/* The connection, counted in, once there; NULL before. Pair with conn_put. */
static struct conn *conn_get(struct kv_shared *sh)
{
	struct conn *c;

	pthread_mutex_lock(&sh->sh_lock);
	c = sh->sh_state == KV_SHARED_CONNECTED ? sh->sh_conn : NULL;
	if (c)
		atomic_fetch_add(&c->c_users, 1);
	pthread_mutex_unlock(&sh->sh_lock);
	return c;
}

static void conn_put(struct conn *c)
{
	if (c)
		atomic_fetch_sub(&c->c_users, 1);
}

/* Wraps r; NULL (r closed) without memory. */
static struct conn *conn_new(struct kv_rados *r)
{
	struct conn *c = calloc(1, sizeof(*c));

	if (c)
		c->c_r = r;
	else
		kv_rados_close(r);
	return c;
}

/*
 * Takes the retired connections nobody uses any more (all: every one) off
 * sh_retired (sh_lock held, or no other thread left) and returns them, for
 * conn_close_all once the lock is dropped: closing one shuts a librados
 * client down, which never happens under sh_lock.
 */
static struct conn *conn_idle(struct kv_shared *sh, bool all)
{
	struct conn *idle = NULL;

	for (struct conn **p = &sh->sh_retired; *p;) {
		struct conn *c = *p;

		if (!all && atomic_load(&c->c_users)) {
			p = &c->c_next;
			continue;
		}
		*p = c->c_next;
		c->c_next = idle;
		idle = c;
	}
	return idle;
}

static void conn_close_all(struct conn *c)
{
	while (c) {
		struct conn *next = c->c_next;

		kv_rados_close(c->c_r);
		free(c);
		c = next;
	}
}

/* A failure that may pass: the change is kept and tried again. */
static bool transient(int err)
{
	return err == -ETIMEDOUT || err == -ENOTCONN || err == -ESHUTDOWN || err == -ECONNREFUSED ||
	       err == -ENOSPC || err == -EAGAIN || err == -ENOMEM;
}

/*
 * Counts a cluster operation that started at t0 and ended with err: its
 * latency, and a timeout or error (told once per run of failures, the
 * first time, on stderr). Returns err.
 */
static int counted(struct kv_shared *sh, uint64_t t0, int err, const char *what)
{
	kv_hist_record(&sh->sh_lat, kv_now_ns() - t0);
	if (err >= 0 || err == -ENOENT || err == -ECANCELED) {
		if (!atomic_exchange(&sh->sh_healthy, true))
			fprintf(stderr, "kvfs: rados: pool '%s' answers again\n", sh->sh_pool);
		return err;
	}
	if (err == -ETIMEDOUT)
		atomic_fetch_add(&sh->sh_timeouts, 1);
	else
		atomic_fetch_add(&sh->sh_errors, 1);
	pthread_mutex_lock(&sh->sh_lock);
	sh->sh_last_err = err;
	snprintf(sh->sh_last_text, sizeof(sh->sh_last_text), "%s: %s", what, strerror(-err));
	pthread_mutex_unlock(&sh->sh_lock);
	if (transient(err) && atomic_exchange(&sh->sh_healthy, false)) {
		/* the thread probes while nothing else is to be sent */
		pthread_mutex_lock(&sh->sh_lock);
		pthread_cond_broadcast(&sh->sh_cond);
		pthread_mutex_unlock(&sh->sh_lock);
		fprintf(stderr,
			"kvfs: rados: pool '%s' does not answer (%s: %s): local keys are "
			"served, changes wait\n",
			sh->sh_pool, what, strerror(-err));
	}
	return err;
}

static void dir_oid_of(char *oid, const char *path)
{
	kv_rados_dir_oid(oid, path, strlen(path));
}

/* Splits "/a/b" into its parent ("/a", malloc'ed) and its last name (in path). */
static char *parent_of(const char *path, const char **name)
{
	const char *slash = strrchr(path, '/');
	size_t n = slash == path ? 1 : (size_t)(slash - path);
	char *p = strndup(path, n);

	*name = slash + 1;
	return p;
}

/*
 * Where the entry of path lives: sets *name to its last name and doid to its
 * parent's object; returns the parent's path (malloc'ed; NULL: no memory).
 */
static char *entry_place(const char *path, const char **name, char *doid)
{
	char *pp = parent_of(path, name);

	if (pp)
		dir_oid_of(doid, pp);
	return pp;
}

/* Whether an entry (len bytes) is well formed; a damaged one is counted and told. */
static bool entry_ok(struct kv_shared *sh, const char *doid, const char *name,
		     const struct kv_rdent *e, size_t len)
{
	if (len >= sizeof(*e) && e->re_magic == KV_RDENT_MAGIC && e->re_format == KV_RDENT_FORMAT &&
	    (e->re_type != KV_RDENT_SYMLINK ||
	     (e->re_size && e->re_size <= KV_SYMLINK_MAX && len == sizeof(*e) + e->re_size &&
	      !memchr(e + 1, '\0', e->re_size))) &&
	    (e->re_type != KV_RDENT_FILE ||
	     (e->re_extent && e->re_nobj <= KV_RDENT_MAX_OBJ &&
	      len == sizeof(*e) + 8ull * e->re_nobj &&
	      e->re_nobj == (e->re_size + e->re_extent - 1) / e->re_extent)))
		return true;
	fprintf(stderr, "kvfs: rados: entry '%s' in %s is damaged: ignored\n", name, doid);
	atomic_fetch_add(&sh->sh_errors, 1);
	return false;
}

/* Reads and checks an entry; the sums (FILE) follow the header in *ent. */
static int entry_get(struct kv_shared *sh, struct kv_rados *r, const char *doid, const char *name,
		     struct kv_rdent **ent, size_t *len)
{
	uint64_t t0 = kv_now_ns();
	void *v = NULL;
	int err = counted(sh, t0, kv_rados_omap_get(r, doid, name, &v, len), "read entry");
	const struct kv_rdent *e = v;

	if (err)
		return err;
	if (!entry_ok(sh, doid, name, e, *len)) {
		free(v);
		return -EIO;
	}
	*ent = v;
	return 0;
}

/* --- listings of directories, kept for the TTL --- */

/*
 * A directory's entries in the cluster, sorted by name, as read at
 * dl_fetched_ns. Immutable once built; shared by reference count. The
 * cache (sh_dc, under sh_dc_lock) keeps the newest listing of up to
 * DC_DIRS directories of at most DC_MAX entries each: a lookup within the
 * TTL of a listing answers from it, so checking the keys of one directory
 * costs one cluster read per TTL, not one per key. A listing older than
 * what the known table says of a key, or than a change this node made in
 * that directory (the thread drops it), is not used.
 */
struct dl_ent {
	char *de_name;
	struct kv_rdent *de_e;
	size_t de_len;
};

struct dlist {
	_Atomic unsigned dl_refs;
	char dl_oid[KV_RADOS_OID_MAX];
	uint64_t dl_fetched_ns;
	size_t dl_n, dl_cap;
	struct dl_ent *dl_ent;
};

static void dlist_put(struct dlist *dl)
{
	if (!dl || atomic_fetch_sub(&dl->dl_refs, 1) != 1)
		return;
	for (size_t i = 0; i < dl->dl_n; i++) {
		free(dl->dl_ent[i].de_name);
		free(dl->dl_ent[i].de_e);
	}
	free(dl->dl_ent);
	free(dl);
}

struct dl_fill {
	struct kv_shared *sh;
	struct dlist *dl;
	unsigned max; /* 0: all */
};

static int dl_add(void *arg, const char *key, size_t klen, const void *val, size_t vlen)
{
	struct dl_fill *f = arg;
	struct dlist *dl = f->dl;
	struct dl_ent *d;

	if (f->max && dl->dl_n >= f->max)
		return -E2BIG;
	if (!entry_ok(f->sh, dl->dl_oid, "(listed)", val, vlen))
		return 0;
	if (dl->dl_n == dl->dl_cap) {
		size_t cap = dl->dl_cap ? dl->dl_cap * 2 : 64;

		d = realloc(dl->dl_ent, cap * sizeof(*d));
		if (!d)
			return -ENOMEM;
		dl->dl_ent = d;
		dl->dl_cap = cap;
	}
	d = &dl->dl_ent[dl->dl_n];
	d->de_name = strndup(key, klen);
	d->de_e = malloc(vlen);
	if (!d->de_name || !d->de_e) {
		free(d->de_name);
		free(d->de_e);
		return -ENOMEM;
	}
	memcpy(d->de_e, val, vlen);
	d->de_len = vlen;
	dl->dl_n++;
	return 0;
}

static int dl_cmp(const void *a, const void *b)
{
	return strcmp(((const struct dl_ent *)a)->de_name, ((const struct dl_ent *)b)->de_name);
}

/* Reads directory doid's listing (at most max entries, 0: all; -E2BIG past it). */
static int dlist_fetch(struct kv_shared *sh, struct kv_rados *r, const char *doid, unsigned max,
		       struct dlist **out)
{
	struct dl_fill f = {.sh = sh, .dl = calloc(1, sizeof(struct dlist)), .max = max};
	uint64_t t0 = kv_now_ns();
	int err;

	if (!f.dl)
		return -ENOMEM;
	atomic_init(&f.dl->dl_refs, 1);
	snprintf(f.dl->dl_oid, sizeof(f.dl->dl_oid), "%s", doid);
	f.dl->dl_fetched_ns = mono_ns();
	err = kv_rados_omap_each(r, doid, dl_add, &f);
	if (err != -E2BIG && err != -ENOMEM)
		err = counted(sh, t0, err, "list directory");
	if (err) {
		dlist_put(f.dl);
		return err;
	}
	/* omap order is bytewise already; sorting again costs little and makes bsearch safe */
	qsort(f.dl->dl_ent, f.dl->dl_n, sizeof(*f.dl->dl_ent), dl_cmp);
	*out = f.dl;
	return 0;
}

/* The entry of name in dl, or NULL. */
static const struct dl_ent *dlist_find(const struct dlist *dl, const char *name)
{
	const struct dl_ent key = {.de_name = (char *)name};

	return bsearch(&key, dl->dl_ent, dl->dl_n, sizeof(key), dl_cmp);
}

/* A cached listing of doid read after not_before and within the TTL, referenced; or NULL. */
static struct dlist *dlist_cached(struct kv_shared *sh, const char *doid, uint64_t not_before)
{
	uint64_t now = mono_ns();
	struct dlist *dl = NULL;

	pthread_mutex_lock(&sh->sh_dc_lock);
	for (unsigned i = 0; i < sh->sh_ndc; i++)
		if (!strcmp(sh->sh_dc[i]->dl_oid, doid)) {
			struct dlist *c = sh->sh_dc[i];

			if (now - c->dl_fetched_ns < sh->sh_ttl_ns &&
			    c->dl_fetched_ns >= not_before) {
				atomic_fetch_add(&c->dl_refs, 1);
				dl = c;
			}
			break;
		}
	pthread_mutex_unlock(&sh->sh_dc_lock);
	return dl;
}

/* Forgets the cached listing of doid (dl NULL), or puts dl in its place (taking a reference). */
static void dlist_set(struct kv_shared *sh, const char *doid, struct dlist *dl)
{
	struct dlist *gone[DC_DIRS + 1];
	unsigned ngone = 0, keep = 0;
	uint64_t now = mono_ns();

	pthread_mutex_lock(&sh->sh_dc_lock);
	for (unsigned i = 0; i < sh->sh_ndc; i++) {
		struct dlist *c = sh->sh_dc[i];

		/* this directory's, and every one past its TTL, go */
		if (!strcmp(c->dl_oid, doid) || now - c->dl_fetched_ns >= sh->sh_ttl_ns)
			gone[ngone++] = c;
		else
			sh->sh_dc[keep++] = c;
	}
	sh->sh_ndc = keep;
	if (dl && keep == DC_DIRS)
		gone[ngone++] = sh->sh_dc[--sh->sh_ndc]; /* full of fresh ones: one goes */
	if (dl) {
		atomic_fetch_add(&dl->dl_refs, 1);
		sh->sh_dc[sh->sh_ndc++] = dl;
	}
	pthread_mutex_unlock(&sh->sh_dc_lock);
	for (unsigned i = 0; i < ngone; i++)
		dlist_put(gone[i]);
}

/*
 * The entry of name in directory doid, as a lookup wants it: from a fresh
 * listing (read after not_before), else by reading the listing (cached
 * when small), else by reading the one entry. *ent malloc'ed; -ENOENT.
 */
/*
 * Directories whose listing was too large to keep (DC_MAX), remembered for
 * 10 s: their names are then asked one by one, not listed again.
 */
static bool big_dir(struct kv_shared *sh, const char *doid, bool mark)
{
	uint64_t h = XXH3_64bits(doid, strlen(doid)), now = mono_ns();
	bool found = false;
	unsigned i;

	pthread_mutex_lock(&sh->sh_dc_lock);
	for (i = 0; i < BIG_DIRS && !found; i++)
		found = sh->sh_big[i] == h && now - sh->sh_big_ns[i] < 10000000000ull;
	if (!found && mark) {
		i = sh->sh_nbig++ % BIG_DIRS;
		sh->sh_big[i] = h;
		sh->sh_big_ns[i] = now;
	}
	pthread_mutex_unlock(&sh->sh_dc_lock);
	return found;
}

static int entry_lookup(struct kv_shared *sh, struct kv_rados *r, const char *doid,
			const char *name, uint64_t not_before, struct kv_rdent **ent, size_t *len)
{
	struct dlist *dl = dlist_cached(sh, doid, not_before);
	const struct dl_ent *d;
	int err = 0;

	if (!dl && big_dir(sh, doid, false))
		return entry_get(sh, r, doid, name, ent, len); /* not listed again and again */
	if (!dl) {
		err = dlist_fetch(sh, r, doid, DC_MAX, &dl);
		if (err == -E2BIG) {
			big_dir(sh, doid, true);
			return entry_get(sh, r, doid, name, ent, len);
		}
		if (err)
			return err;
		dlist_set(sh, doid, dl);
	}
	d = dlist_find(dl, name);
	if (!d)
		err = -ENOENT;
	else if (!(*ent = malloc(d->de_len)))
		err = -ENOMEM;
	else {
		memcpy(*ent, d->de_e, d->de_len);
		*len = d->de_len;
	}
	dlist_put(dl);
	return err;
}

static bool same_version(const struct kv_rdent *a, uint64_t node, uint64_t seq)
{
	return a->re_type == KV_RDENT_FILE && a->re_node == node && a->re_seq == seq;
}

/* Removes the data objects of a FILE entry, best effort (--rados-gc takes what is left). */
static void remove_objects(struct kv_shared *sh, struct kv_rados *r, const struct kv_rdent *e)
{
	char oid[KV_RADOS_OID_MAX];

	if (e->re_type != KV_RDENT_FILE)
		return;
	for (uint32_t i = 0; i < e->re_nobj; i++) {
		uint64_t t0 = kv_now_ns();

		kv_rados_data_oid(oid, e->re_node, e->re_seq, i);
		counted(sh, t0, kv_rados_remove(r, oid), "remove"); /* a failure: --rados-gc */
	}
}

/* --- the known table --- */

static struct known **known_slot(struct kv_shared *sh, uint64_t ino)
{
	struct known **k = &sh->sh_known[XXH3_64bits(&ino, sizeof(ino)) & (KNOWN_BUCKETS - 1)];

	while (*k && (*k)->kn_ino != ino)
		k = &(*k)->kn_next;
	return k;
}

/* Copies the record of ino into *out; false when there is none. */
static bool known_get(struct kv_shared *sh, uint64_t ino, struct known *out)
{
	struct known *k;

	pthread_mutex_lock(&sh->sh_known_lock);
	k = *known_slot(sh, ino);
	if (k)
		*out = *k;
	pthread_mutex_unlock(&sh->sh_known_lock);
	return k != NULL;
}

/* Records that local version seq of ino is (clean) cluster version (node, rseq), checked now. */
static void known_set(struct kv_shared *sh, uint64_t ino, uint64_t seq, bool clean, uint64_t node,
		      uint64_t rseq)
{
	struct known **slot, *k;
	uint64_t old = 0; /* a clean version this record described before */

	pthread_mutex_lock(&sh->sh_known_lock);
	slot = known_slot(sh, ino);
	k = *slot;
	if (k && k->kn_clean)
		old = k->kn_seq;
	if (!k && sh->sh_known_n >= KNOWN_MAX) {
		/* full: this chain's records go (a key without one is only checked again) */
		struct known **head =
		    &sh->sh_known[XXH3_64bits(&ino, sizeof(ino)) & (KNOWN_BUCKETS - 1)];

		while (*head) {
			struct known *g = *head;

			*head = g->kn_next;
			free(g);
			sh->sh_known_n--;
		}
		slot = head;
	}
	if (!k) {
		k = calloc(1, sizeof(*k));
		if (!k) { /* only a check too many later */
			pthread_mutex_unlock(&sh->sh_known_lock);
			return;
		}
		k->kn_ino = ino;
		*slot = k;
		sh->sh_known_n++;
	}
	k->kn_seq = seq;
	k->kn_clean = clean;
	k->kn_node = node;
	k->kn_rseq = rseq;
	k->kn_checked_ns = mono_ns();
	pthread_mutex_unlock(&sh->sh_known_lock);
	if (!sh->sh_rk)
		return;
	if (old && (old != seq || !clean))
		kv_rknown_forget(sh->sh_rk, old);
	if (clean && seq) /* a failed write: known until the process ends */
		kv_rknown_set(sh->sh_rk, seq, node, rseq);
}

static void known_drop(struct kv_shared *sh, uint64_t ino)
{
	struct known **slot, *k;

	pthread_mutex_lock(&sh->sh_known_lock);
	slot = known_slot(sh, ino);
	k = *slot;
	if (k) {
		*slot = k->kn_next;
		sh->sh_known_n--;
	}
	pthread_mutex_unlock(&sh->sh_known_lock);
	if (k && k->kn_clean && sh->sh_rk)
		kv_rknown_forget(sh->sh_rk, k->kn_seq);
	free(k);
}

/*
 * What is known of local key ino at version seq: its record, or, when it
 * has none for that version (after a restart), rados.known's (clean, not
 * checked yet). False: nothing (a version made here and not yet sent).
 */
static bool known_of(struct kv_shared *sh, uint64_t ino, uint64_t seq, struct known *out)
{
	uint64_t node, rseq;

	if (known_get(sh, ino, out) && out->kn_seq == seq)
		return true;
	if (!sh->sh_rk || !kv_rknown_get(sh->sh_rk, seq, &node, &rseq))
		return false;
	*out = (struct known){
	    .kn_ino = ino, .kn_seq = seq, .kn_node = node, .kn_rseq = rseq, .kn_clean = true};
	return true;
}

/* --- the change queue --- */

static void change_free(struct change *ch)
{
	if (ch->ch_ino)
		kv_inode_put(ch->ch_ino);
	free(ch->ch_path);
	free(ch->ch_path2);
	free(ch);
}

static const enum kv_rlog_kind log_kinds[] = {
    [CH_PUT] = KV_RLOG_PUT,	[CH_DEL] = KV_RLOG_DEL,	      [CH_MKDIR] = KV_RLOG_MKDIR,
    [CH_RMDIR] = KV_RLOG_RMDIR, [CH_RENAME] = KV_RLOG_RENAME, [CH_SYMLINK] = KV_RLOG_SYMLINK};

static struct kv_rlog_change log_change(const struct change *ch)
{
	return (struct kv_rlog_change){
	    .rc_id = ch->ch_id,
	    .rc_kind = log_kinds[ch->ch_kind],
	    .rc_seq = ch->ch_kind == CH_DEL || ch->ch_kind == CH_RENAME ? ch->ch_vseq : ch->ch_seq,
	    .rc_node = ch->ch_vnode,
	    .rc_mark = ch->ch_mark,
	    .rc_size = ch->ch_kind == CH_PUT ? ch->ch_size : (uint64_t)ch->ch_time_ns,
	    .rc_mode = ch->ch_mode,
	    .rc_path = ch->ch_path,
	    .rc_path2 = ch->ch_path2};
}

/* Appends ch to the queue (sh_lock held), not to the log. */
static void queue_add(struct kv_shared *sh, struct change *ch)
{
	if (sh->sh_q_tail)
		sh->sh_q_tail->ch_next = ch;
	else
		sh->sh_q_head = ch;
	sh->sh_q_tail = ch;
	sh->sh_q_n++;
	sh->sh_q_bytes += ch->ch_size;
}

/* Appends ch to the queue and the log (sh_lock not held); wakes the thread. */
static void enqueue(struct kv_shared *sh, struct change *ch)
{
	pthread_mutex_lock(&sh->sh_lock);
	ch->ch_id = ++sh->sh_q_last;
	queue_add(sh, ch);
	if (sh->sh_log) {
		const struct kv_rlog_change c = log_change(ch);
		int err = kv_rlog_append(sh->sh_log, &c);

		if (err && !sh->sh_log_failed)
			fprintf(stderr,
				"kvfs: rados: cannot log a change to %s: %s (changes not sent "
				"when kvfs stops are lost)\n",
				KV_RLOG_NAME, strerror(-err));
		sh->sh_log_failed |= err != 0;
		if (err)
			atomic_fetch_add(&sh->sh_errors, 1);
	}
	pthread_cond_broadcast(&sh->sh_cond);
	pthread_mutex_unlock(&sh->sh_lock);
}

/* kh_sealed: a named file has a new sealed value. */
static void on_sealed(void *arg, struct kv_inode *ino, uint64_t seq, uint64_t size)
{
	struct kv_shared *sh = arg;
	struct change *ch;

	if (tl_quiet)
		return;
	ch = calloc(1, sizeof(*ch));
	if (!ch) {
		atomic_fetch_add(&sh->sh_errors, 1); /* a lookup on this node still finds it */
		return;
	}
	ch->ch_kind = CH_PUT;
	kv_inode_get(ino);
	ch->ch_ino = ino;
	ch->ch_seq = seq;
	ch->ch_size = size;
	enqueue(sh, ch);
}

/* "/dir" + "/" + name, malloc'ed; NULL when dir has no path (or no memory). */
static char *path_in(struct kv_shared *sh, struct kv_inode *dir, const char *name)
{
	char *d = NULL, *p = NULL;

	if (kv_store_path_of(sh->sh_st, dir, &d))
		return NULL;
	if (asprintf(&p, "%s%s%s", d, strcmp(d, "/") ? "/" : "", name) < 0)
		p = NULL;
	free(d);
	return p;
}

/*
 * The cluster version the file ino is a clean copy of (fetched or
 * published; a version made here and not sent yet: the one it replaces),
 * in *node and *seq; *node 0: none known.
 */
static void copy_of(struct kv_shared *sh, struct kv_inode *ino, uint64_t *node, uint64_t *seq)
{
	struct kv_attr a;
	struct known k;

	*node = *seq = 0;
	kv_store_getattr(sh->sh_st, ino, &a);
	if (!S_ISREG(a.ka_mode))
		return;
	/* a version made here and not yet sent: the one its record describes, which it replaces */
	if ((a.ka_seq && known_of(sh, a.ka_ino, a.ka_seq, &k)) || known_get(sh, a.ka_ino, &k))
		if (k.kn_clean) {
			*node = k.kn_node;
			*seq = k.kn_rseq;
		}
}

/* kh_changed: the namespace changed through the store's API. */
static void on_changed(void *arg, enum kv_store_change what, struct kv_inode *dir, const char *name,
		       struct kv_inode *dir2, const char *name2)
{
	static const enum change_kind kinds[] = {[KV_CHANGE_MKDIR] = CH_MKDIR,
						 [KV_CHANGE_UNLINK] = CH_DEL,
						 [KV_CHANGE_RMDIR] = CH_RMDIR,
						 [KV_CHANGE_RENAME] = CH_RENAME,
						 [KV_CHANGE_SYMLINK] = CH_SYMLINK};
	struct kv_shared *sh = arg;
	struct change *ch;

	if (tl_quiet || !strncmp(name, FETCH_PREFIX, strlen(FETCH_PREFIX)))
		return;
	ch = calloc(1, sizeof(*ch));
	if (!ch)
		goto fail;
	ch->ch_kind = kinds[what];
	ch->ch_mode = 0755;
	ch->ch_time_ns = realtime_ns();
	if (what == KV_CHANGE_UNLINK || what == KV_CHANGE_RENAME)
		ch->ch_mark = kv_store_last_seq(sh->sh_st);
	if (what == KV_CHANGE_RENAME) {
		struct kv_inode *moved;
		struct kv_attr a;

		atomic_fetch_add(&sh->sh_renames, 1);
		if (!kv_store_lookup(sh->sh_st, dir2, name2, &moved, &a)) {
			copy_of(sh, moved, &ch->ch_vnode, &ch->ch_vseq);
			kv_inode_put(moved);
		}
	}
	if (what == KV_CHANGE_UNLINK && dir2) /* dir2: the inode that lost the name */
		copy_of(sh, dir2, &ch->ch_vnode, &ch->ch_vseq);
	if (what == KV_CHANGE_MKDIR) { /* the hook may call the store: the mode it was made with */
		struct kv_inode *d;
		struct kv_attr a;

		if (!kv_store_lookup(sh->sh_st, dir, name, &d, &a)) {
			ch->ch_mode = a.ka_mode & 07777;
			kv_inode_put(d);
		}
	}
	if (what == KV_CHANGE_SYMLINK) { /* its target and owner */
		struct kv_attr a;
		const char *target;

		if (kv_store_lookup(sh->sh_st, dir, name, &ch->ch_ino, &a) ||
		    kv_store_readlink(sh->sh_st, ch->ch_ino, &target) ||
		    !(ch->ch_path2 = strdup(target)))
			goto fail;
		ch->ch_seq = (uint64_t)a.ka_uid << 32 | a.ka_gid;
	}
	ch->ch_path = path_in(sh, dir, name);
	if (!ch->ch_path)
		goto fail;
	if (what == KV_CHANGE_RENAME && !(ch->ch_path2 = path_in(sh, dir2, name2)))
		goto fail;
	enqueue(sh, ch);
	return;
fail:
	if (ch)
		change_free(ch);
	atomic_fetch_add(&sh->sh_errors, 1);
}

/* --- applying changes (the thread only) --- */

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
		pp = parent_of(sub, &name);
		if (!pp) {
			free(sub);
			return -ENOMEM;
		}
		dir_oid_of(parent, pp);
		t0 = kv_now_ns();
		err =
		    counted(sh, t0, kv_rados_omap_cas(r, parent, name, NULL, 0, &d, sizeof(d), pp),
			    "make directory");
		if (!err)
			dlist_set(sh, parent, NULL);
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
	char *pp = entry_place(path, &name, doid);
	int err = -ECANCELED;

	*lost = false;
	*old = NULL;
	if (!pp)
		return -ENOMEM;
	for (int tries = 0; tries < CAS_TRIES && err == -ECANCELED; tries++) {
		struct kv_rdent *cur = NULL;
		size_t clen = 0;
		uint64_t t0;

		err = entry_get(sh, r, doid, name, &cur, &clen);
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
		    (same_version(cur, ent->re_node, ent->re_seq) ||
		     cur->re_mtime_ns > ent->re_mtime_ns ||
		     (cur->re_mtime_ns == ent->re_mtime_ns && cur->re_node > ent->re_node))) {
			*lost = !same_version(cur, ent->re_node, ent->re_seq);
			free(cur);
			break;
		}
		t0 = kv_now_ns();
		err = counted(sh, t0, kv_rados_omap_cas(r, doid, name, cur, clen, ent, elen, pp),
			      "publish");
		if (!err)
			dlist_set(sh, doid, NULL); /* our own listings do not hide our change */
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

/* Bytes of data object i of e, and how many objects of e a batch from first takes. */
static size_t object_len(const struct kv_rdent *e, uint64_t i)
{
	uint64_t off = i * e->re_extent;

	return e->re_size - off < e->re_extent ? e->re_size - off : e->re_extent;
}

static unsigned batch_of(const struct kv_rdent *e, uint64_t first)
{
	return e->re_nobj - first < IO_BATCH ? (unsigned)(e->re_nobj - first) : IO_BATCH;
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
	    (known_of(sh, a.ka_ino, ch->ch_seq, &k) && k.kn_clean)) {
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

		lens[i] = object_len(j->pj_ent, first + i);
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
	err = counted(sh, t0, kv_rados_put_many(r, n, op, bp, lens), "write data");
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
		remove_objects(sh, r, ent); /* not this version any more: what it wrote goes */
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
		known_set(sh, a.ka_ino, ch->ch_seq, true, lost ? 0 : sh->sh_node,
			  lost ? 0 : ch->ch_seq);
		atomic_fetch_add(&sh->sh_puts, 1);
		if (lost)
			remove_objects(sh, r, ent);
	} else if (err == -EEXIST) {
		fprintf(stderr, "kvfs: rados: '%s' is not a file in the cluster: not shared\n",
			path);
		remove_objects(sh, r, ent);
	}
	if (old)
		remove_objects(sh, r, old);
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
		unsigned n = batch_of(j.pj_ent, first);

		err = put_read(sh, &j, first, n, oids, bufs, lens);
		if (!err)
			err = put_objects(sh, r, n, oids, bufs, lens);
	}
	if (!err && !j.pj_skip)
		err = put_finish(sh, r, &j);
	else if (err == -ESTALE) {
		remove_objects(sh, r, j.pj_ent);
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
static unsigned apply_small_puts(struct kv_shared *sh, struct kv_rados *r, struct change **chs,
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
	if (err && !transient(err))
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

	dir_oid_of(doid, path);
	err = dlist_fetch(sh, r, doid, 1, &dl);
	if (err == -ENOENT)
		return false;
	any = err || dl->dl_n;
	if (dl)
		dlist_put(dl);
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
	    (ch->ch_vnode && same_version(cur, ch->ch_vnode, ch->ch_vseq)))
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
	char *pp = entry_place(path, &name, doid);
	int err = -ECANCELED;

	if (!pp)
		return -ENOMEM;
	for (int tries = 0; tries < CAS_TRIES && err == -ECANCELED; tries++) {
		struct kv_rdent *cur = NULL;
		size_t clen = 0;
		uint64_t t0;

		err = entry_get(sh, r, doid, name, &cur, &clen);
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
		err = counted(sh, t0, kv_rados_omap_cas(r, doid, name, cur, clen, NULL, 0, NULL),
			      "delete");
		if (!err) {
			dlist_set(sh, doid, NULL);
			atomic_fetch_add(&sh->sh_deletes, 1);
			remove_objects(sh, r, cur);
		}
		free(cur);
	}
	if (!err && want == KV_RDENT_DIR) {
		uint64_t t0 = kv_now_ns();

		dir_oid_of(doid, path);
		/* Its entry is gone; the object goes too (a put racing this leaves it for gc). */
		counted(sh, t0, kv_rados_remove(r, doid), "remove directory");
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
	char *pp = entry_place(path, &name, doid);
	struct kv_rdent *cur = NULL, *old = NULL;
	size_t clen = 0;
	bool lost;
	int err;

	if (!pp)
		return -ENOMEM;
	err = entry_get(sh, r, doid, name, &cur, &clen);
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
		if (!err && old && !same_version(old, cur->re_node, cur->re_seq))
			remove_objects(sh, r, old);
	}
	if (!err) {
		uint64_t t0 = kv_now_ns();

		err = counted(sh, t0, kv_rados_omap_cas(r, doid, name, cur, clen, NULL, 0, NULL),
			      "rename");
		dlist_set(sh, doid, NULL);
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
			known_set(sh, a.ka_ino, a.ka_seq, true, 0, 0);
	}
	free(old);
	free(ent);
	free(dir);
	return err;
}

static int apply(struct kv_shared *sh, struct kv_rados *r, struct change *ch)
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

/* Waits up to `ms` milliseconds or until a stop (sh_lock held). Returns true on a stop. */
static bool wait_stop_ms(struct kv_shared *sh, unsigned ms)
{
	struct timespec dl;

	clock_gettime(CLOCK_MONOTONIC, &dl);
	dl.tv_sec += ms / 1000;
	dl.tv_nsec += (long)(ms % 1000) * 1000000;
	if (dl.tv_nsec >= 1000000000) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000;
	}
	while (!sh->sh_stop)
		if (pthread_cond_timedwait(&sh->sh_cond, &sh->sh_lock, &dl) == ETIMEDOUT)
			break;
	return sh->sh_stop;
}

/* Records a failed connection attempt (sh_lock held); logs the first of a run. */
static void attempt_failed(struct kv_shared *sh, int err, const char *step)
{
	const char *why = err == -ENOENT && !strcmp(step, "pool") ? "no such pool" : strerror(-err);

	atomic_fetch_add(&sh->sh_failures, 1);
	sh->sh_last_err = err;
	snprintf(sh->sh_last_text, sizeof(sh->sh_last_text), "%s: %s", step, why);
	if (sh->sh_state != KV_SHARED_UNREACHABLE)
		fprintf(stderr,
			"kvfs: rados: cannot connect to pool '%s': %s; retrying every 1 to %d s\n",
			sh->sh_pool, sh->sh_last_text, KV_SHARED_RETRY_MAX_S);
	sh->sh_state = KV_SHARED_UNREACHABLE;
}

/* Connects (sh_lock held, dropped meanwhile). Returns false on a stop. */
static bool connect_loop(struct kv_shared *sh)
{
	const struct kv_rados_params p = {.rp_conf = sh->sh_conf,
					  .rp_id = sh->sh_id,
					  .rp_pool = sh->sh_pool,
					  .rp_namespace = sh->sh_ns,
					  .rp_timeout_s = sh->sh_timeout_s};
	unsigned backoff = 1;

	while (!sh->sh_stop) {
		struct kv_rados *r = NULL;
		const char *step = "";
		int err;

		pthread_mutex_unlock(&sh->sh_lock);
		atomic_fetch_add(&sh->sh_attempts, 1);
		err = kv_rados_open(&p, &r, &step);
		pthread_mutex_lock(&sh->sh_lock);
		if (!err && !(sh->sh_conn = conn_new(r)))
			err = -ENOMEM;
		if (!err) {
			if (sh->sh_state == KV_SHARED_UNREACHABLE)
				fprintf(stderr, "kvfs: rados: connected to pool '%s'\n",
					sh->sh_pool);
			sh->sh_state = KV_SHARED_CONNECTED;
			atomic_store(&sh->sh_healthy, true);
			return true;
		}
		attempt_failed(sh, err, step);
		if (wait_stop_ms(sh, backoff * 1000))
			break;
		backoff = backoff * 2 > KV_SHARED_RETRY_MAX_S ? KV_SHARED_RETRY_MAX_S : backoff * 2;
	}
	return false;
}

/*
 * Reads an entry nobody has: an answer (-ENOENT) makes the tier healthy
 * again. librados clients whose operations timed out while an OSD was
 * down were seen to time out for good after it came back, while a new
 * client worked at once: a probe that fails replaces the connection (at
 * most every 10 s); the old one is closed once no FUSE thread uses it.
 */
static void probe(struct kv_shared *sh)
{
	const struct kv_rados_params p = {.rp_conf = sh->sh_conf,
					  .rp_id = sh->sh_id,
					  .rp_pool = sh->sh_pool,
					  .rp_namespace = sh->sh_ns,
					  .rp_timeout_s = sh->sh_timeout_s};
	char doid[KV_RADOS_OID_MAX];
	struct kv_rdent *e = NULL;
	struct kv_rados *r = NULL;
	struct conn *c, *idle;
	const char *step;
	size_t len;
	int err;

	dir_oid_of(doid, "/");
	pthread_mutex_lock(&sh->sh_lock);
	idle = conn_idle(sh, false);
	pthread_mutex_unlock(&sh->sh_lock);
	conn_close_all(idle);
	err = entry_get(sh, sh->sh_conn->c_r, doid, FETCH_PREFIX "probe", &e, &len);
	free(e);
	if (err != -ETIMEDOUT || mono_ns() - sh->sh_reconnected_ns < 10000000000ull)
		return;
	sh->sh_reconnected_ns = mono_ns();
	if (kv_rados_open(&p, &r, &step) || !(c = conn_new(r)))
		return;
	pthread_mutex_lock(&sh->sh_lock);
	sh->sh_conn->c_next = sh->sh_retired;
	sh->sh_retired = sh->sh_conn;
	sh->sh_conn = c;
	idle = conn_idle(sh, false);
	pthread_mutex_unlock(&sh->sh_lock);
	conn_close_all(idle);
	err = entry_get(sh, c->c_r, doid, FETCH_PREFIX "probe", &e, &len);
	free(e);
}

/* --- --rados-gc --- */

struct gc_state {
	struct kv_rados *r;
	char **dirs; /* d.* objects */
	size_t ndirs, cap_dirs;
	char **data; /* x.* objects */
	size_t ndata, cap_data;
	uint64_t (*refs)[2]; /* referenced (node, seq), sorted */
	size_t nrefs, cap_refs;
	int err;
};

static int push(char ***v, size_t *n, size_t *cap, const char *s)
{
	if (*n == *cap) {
		size_t c = *cap ? *cap * 2 : 256;
		char **nv = realloc(*v, c * sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		*v = nv;
		*cap = c;
	}
	(*v)[*n] = strdup(s);
	return (*v)[(*n)++] ? 0 : -ENOMEM;
}

static int gc_list(void *arg, const char *oid)
{
	struct gc_state *g = arg;

	if (!strncmp(oid, "d.", 2))
		return push(&g->dirs, &g->ndirs, &g->cap_dirs, oid);
	if (!strncmp(oid, "x.", 2))
		return push(&g->data, &g->ndata, &g->cap_data, oid);
	return 0;
}

static int gc_ref(void *arg, const char *key, size_t klen, const void *val, size_t vlen)
{
	struct gc_state *g = arg;
	const struct kv_rdent *e = val;

	if (vlen < sizeof(*e) || e->re_magic != KV_RDENT_MAGIC || e->re_type != KV_RDENT_FILE)
		return 0;
	if (g->nrefs == g->cap_refs) {
		size_t c = g->cap_refs ? g->cap_refs * 2 : 256;
		uint64_t(*nr)[2] = realloc(g->refs, c * sizeof(*nr));

		if (!nr)
			return -ENOMEM;
		g->refs = nr;
		g->cap_refs = c;
	}
	g->refs[g->nrefs][0] = e->re_node;
	g->refs[g->nrefs++][1] = e->re_seq;
	return 0;
}

static int ref_cmp(const void *a, const void *b)
{
	const uint64_t *x = a, *y = b;

	if (x[0] != y[0])
		return x[0] < y[0] ? -1 : 1;
	return x[1] < y[1] ? -1 : x[1] > y[1];
}

/* What one sweep found. */
struct gc_counts {
	size_t gc_dirs, gc_refs;
	uint64_t gc_kept, gc_removed, gc_young;
};

/*
 * One sweep of the namespace: lists every object, reads every directory's
 * entries, and removes the data objects no entry refers to that are older
 * than grace_ns (a put in flight writes its objects before its entry).
 */
static int gc_sweep(struct kv_rados *r, uint64_t grace_ns, struct gc_counts *c)
{
	const uint64_t sec = 1000ull * 1000 * 1000;
	struct gc_state g = {.r = r};
	time_t now = time(NULL);
	int err;

	memset(c, 0, sizeof(*c));
	err = kv_rados_list(r, gc_list, &g);
	for (size_t i = 0; !err && i < g.ndirs; i++)
		err = kv_rados_omap_each(r, g.dirs[i], gc_ref, &g);
	if (!err)
		qsort(g.refs, g.nrefs, sizeof(*g.refs), ref_cmp);
	for (size_t i = 0; !err && i < g.ndata; i++) {
		uint64_t key[2];
		uint32_t idx;
		time_t mtime;

		if (!kv_rados_parse_data_oid(g.data[i], &key[0], &key[1], &idx))
			continue;
		if (bsearch(key, g.refs, g.nrefs, sizeof(*g.refs), ref_cmp)) {
			c->gc_kept++;
			continue;
		}
		if (kv_rados_mtime(r, g.data[i], &mtime))
			continue; /* gone meanwhile */
		if ((uint64_t)(now > mtime ? now - mtime : 0) * sec < grace_ns) {
			c->gc_young++; /* maybe a put in flight */
			continue;
		}
		if (!kv_rados_remove(r, g.data[i]))
			c->gc_removed++;
	}
	c->gc_dirs = g.ndirs;
	c->gc_refs = g.nrefs;
	for (size_t i = 0; i < g.ndirs; i++)
		free(g.dirs[i]);
	for (size_t i = 0; i < g.ndata; i++)
		free(g.data[i]);
	free(g.dirs);
	free(g.data);
	free(g.refs);
	return err;
}

/* A sweep from the thread (--rados-gc-interval), counted in the stats. */
static void background_sweep(struct kv_shared *sh)
{
	struct gc_counts c;
	uint64_t t0 = kv_now_ns();
	int err = counted(sh, t0, gc_sweep(sh->sh_conn->c_r, sh->sh_gc_grace_ns, &c), "sweep");

	if (err)
		return;
	atomic_fetch_add(&sh->sh_gc_sweeps, 1);
	atomic_fetch_add(&sh->sh_gc_removed, c.gc_removed);
}

/*
 * The thread: connects, then applies the queue in order. After a stop it
 * goes on while the cluster answers, for at most --rados-timeout, so that
 * an unmount sends what it can.
 */
/* --- the log (the thread only) --- */

/* Writes the log anew with only the changes left (sh_lock held). */
static int log_rewrite(struct kv_shared *sh)
{
	int err = kv_rlog_rewrite_begin(sh->sh_log), end;

	if (err)
		return err;
	for (struct change *c = sh->sh_q_head; !err && c; c = c->ch_next) {
		const struct kv_rlog_change lc = log_change(c);

		err = kv_rlog_rewrite_add(sh->sh_log, &lc);
	}
	end = kv_rlog_rewrite_end(sh->sh_log, !err);
	return err ? err : end;
}

/* Records in the log how far the queue got (sh_lock held); rewrites a log grown large. */
static void log_done(struct kv_shared *sh)
{
	bool empty = !sh->sh_q_head;
	int err = kv_rlog_done(sh->sh_log, sh->sh_q_done, empty);

	if (!err && empty)
		sh->sh_log_failed = false; /* what the log missed is sent */
	if (!err && !empty && (kv_rlog_bytes(sh->sh_log) > sh->sh_log_limit || sh->sh_log_failed)) {
		err = log_rewrite(sh);
		if (!err)
			sh->sh_log_failed = false;
		/* one that stays large is not rewritten again before it doubles */
		sh->sh_log_limit = 2 * kv_rlog_bytes(sh->sh_log) > KV_RLOG_REWRITE
				       ? 2 * kv_rlog_bytes(sh->sh_log)
				       : KV_RLOG_REWRITE;
	}
	if (err) /* the next start sends a change twice: harmless */
		atomic_fetch_add(&sh->sh_errors, 1);
}

/* A version a put read back from the log names, and the key found with it. */
struct found {
	uint64_t f_seq;
	struct kv_inode *f_ino; /* referenced, or NULL */
};

static int found_cmp(const void *a, const void *b)
{
	const struct found *x = a, *y = b;

	return x->f_seq < y->f_seq ? -1 : x->f_seq > y->f_seq;
}

static int seq_cmp(const void *a, const void *b)
{
	const uint64_t *x = a, *y = b;

	return *x < *y ? -1 : *x > *y;
}

/* What one walk of the local namespace looks for, and what it found. */
struct walk {
	struct found *w_f; /* sorted by f_seq: the keys with these versions */
	size_t w_nf;
	uint64_t *w_live; /* every key's version (NULL: not wanted) */
	size_t w_nlive, w_cap_live;
	bool w_short; /* out of memory: w_live misses some */
};

static void walk_key(struct walk *w, struct kv_inode *ino, const struct kv_attr *a)
{
	struct found key = {.f_seq = a->ka_seq}, *hit;

	if (w->w_live && w->w_nlive == w->w_cap_live) {
		uint64_t *more = realloc(w->w_live, 2 * w->w_cap_live * sizeof(*more));

		w->w_short |= !more;
		if (more) {
			w->w_live = more;
			w->w_cap_live *= 2;
		}
	}
	if (w->w_live && w->w_nlive < w->w_cap_live)
		w->w_live[w->w_nlive++] = a->ka_seq;
	hit = w->w_nf ? bsearch(&key, w->w_f, w->w_nf, sizeof(key), found_cmp) : NULL;
	if (hit && !hit->f_ino) {
		kv_inode_get(ino);
		hit->f_ino = ino;
	}
}

/* Visits every regular file of the local store once (directories by a stack). */
static void walk_store(struct kv_store *st, struct walk *w)
{
	struct kv_inode **dirs = malloc(sizeof(*dirs)), *root = kv_store_root(st);
	size_t nd = 0, cap = 1;

	w->w_short |= !dirs;
	if (!dirs)
		return;
	kv_inode_get(root);
	dirs[nd++] = root;
	while (nd) {
		struct kv_inode *d = dirs[--nd], *ino;
		struct kv_dir_snap snap = {0};
		struct kv_attr a;

		if (kv_store_readdir(st, d, &snap)) {
			snap.kds_count = 0; /* no memory: that directory is not searched */
			w->w_short = true;
		}
		for (uint32_t i = 0; i < snap.kds_count; i++) {
			const struct kv_dirent *e = &snap.kds_ent[i];

			if ((!S_ISDIR(e->kde_type) && !S_ISREG(e->kde_type)) ||
			    kv_store_lookup(st, d, e->kde_name, &ino, &a))
				continue;
			if (S_ISDIR(a.ka_mode) && nd == cap) {
				struct kv_inode **more = realloc(dirs, 2 * cap * sizeof(*dirs));

				w->w_short |= !more;
				if (more) {
					dirs = more;
					cap *= 2;
				}
			}
			if (S_ISDIR(a.ka_mode) && nd < cap) {
				dirs[nd++] = ino;
				continue;
			}
			if (S_ISREG(a.ka_mode))
				walk_key(w, ino, &a);
			kv_inode_put(ino);
		}
		kv_dir_snap_free(&snap);
		kv_inode_put(d);
	}
	free(dirs);
}

static bool seq_live(void *arg, uint64_t seq)
{
	const struct walk *w = arg;

	return bsearch(&seq, w->w_live, w->w_nlive, sizeof(seq), seq_cmp) != NULL;
}

/*
 * Before the thread sends anything after a start, one walk of the local
 * namespace does two things. It gives each put read back from the log the
 * key whose value still has its sequence number; a put whose version no
 * key has any more (replaced: the replacing put follows it; deleted: so
 * does the delete) is skipped when its turn comes. And it forgets, in
 * rados.known, the versions no key has any more (deleted, overwritten or
 * evicted while nobody told the tier), as far as the highest version
 * known when the walk began: versions made during the walk are newer. The
 * store serves meanwhile: a rename during the walk may hide a key from it,
 * so then nothing is forgotten (the next start tries again).
 */
static void start_walk(struct kv_shared *sh)
{
	struct walk w = {0};
	uint64_t upto = 0, renames = atomic_load(&sh->sh_renames);
	struct found key = {0}, *hit;

	if (sh->sh_rk && kv_rknown_count(sh->sh_rk, &upto)) {
		w.w_cap_live = 1024;
		w.w_live = malloc(w.w_cap_live * sizeof(*w.w_live));
		w.w_short |= !w.w_live;
	}
	pthread_mutex_lock(&sh->sh_lock);
	if (sh->sh_unresolved)
		w.w_f = calloc(sh->sh_unresolved, sizeof(*w.w_f));
	for (struct change *c = sh->sh_q_head; w.w_f && c; c = c->ch_next)
		if (c->ch_kind == CH_PUT && !c->ch_ino)
			w.w_f[w.w_nf++].f_seq = c->ch_seq;
	pthread_mutex_unlock(&sh->sh_lock);
	if (sh->sh_unresolved && !w.w_f)
		fprintf(stderr, "kvfs: rados: out of memory: %" PRIu64 " logged puts not sent\n",
			sh->sh_unresolved);
	if (!w.w_nf && !w.w_live)
		return;
	qsort(w.w_f, w.w_nf, sizeof(*w.w_f), found_cmp);
	walk_store(sh->sh_st, &w);
	/* a key renamed during the walk may have been missed: no prune then */
	if (w.w_live && !w.w_short && atomic_load(&sh->sh_renames) == renames) {
		qsort(w.w_live, w.w_nlive, sizeof(*w.w_live), seq_cmp);
		kv_rknown_prune(sh->sh_rk, upto, seq_live, &w);
	}
	free(w.w_live);
	pthread_mutex_lock(&sh->sh_lock);
	for (struct change *c = sh->sh_q_head; w.w_nf && c; c = c->ch_next) {
		key.f_seq = c->ch_seq;
		if (c->ch_kind == CH_PUT && !c->ch_ino &&
		    (hit = bsearch(&key, w.w_f, w.w_nf, sizeof(key), found_cmp))) {
			c->ch_ino = hit->f_ino; /* its reference; NULL: skipped */
			hit->f_ino = NULL;
		}
	}
	sh->sh_unresolved = 0;
	pthread_mutex_unlock(&sh->sh_lock);
	for (size_t i = 0; i < w.w_nf; i++)
		if (w.w_f[i].f_ino)
			kv_inode_put(w.w_f[i].f_ino);
	free(w.w_f);
}

static void *worker(void *arg)
{
	struct kv_shared *sh = arg;
	struct change *small[SMALL_PUTS];
	uint64_t drain_until = 0, gc_last = mono_ns();
	bool moved = false;
	unsigned backoff_ms = 250, nsmall, ndone;

	start_walk(sh);
	pthread_mutex_lock(&sh->sh_lock);
	if (!connect_loop(sh)) {
		pthread_mutex_unlock(&sh->sh_lock);
		return NULL;
	}
	for (;;) {
		struct change *ch;
		int err;

		while (!sh->sh_stop && !sh->sh_q_head) {
			if (atomic_load(&sh->sh_healthy) && sh->sh_gc_interval_ns) {
				/* the slow background sweep, when due and nothing is queued */
				uint64_t now = mono_ns(), due = gc_last + sh->sh_gc_interval_ns;

				if (now < due) {
					struct timespec dl;

					/* one wait: a change queued, or a stop, wakes it */
					clock_gettime(CLOCK_MONOTONIC, &dl);
					dl.tv_sec += (time_t)((due - now) / 1000000000);
					dl.tv_nsec += (long)((due - now) % 1000000000);
					if (dl.tv_nsec >= 1000000000) {
						dl.tv_sec++;
						dl.tv_nsec -= 1000000000;
					}
					pthread_cond_timedwait(&sh->sh_cond, &sh->sh_lock, &dl);
					continue;
				}
				gc_last = now;
				pthread_mutex_unlock(&sh->sh_lock);
				background_sweep(sh);
				pthread_mutex_lock(&sh->sh_lock);
				continue;
			}
			if (atomic_load(&sh->sh_healthy)) {
				pthread_cond_wait(&sh->sh_cond, &sh->sh_lock);
				continue;
			}
			/* Nothing to send, and the cluster did not answer: ask it every second. */
			if (wait_stop_ms(sh, 1000) || sh->sh_q_head)
				continue;
			pthread_mutex_unlock(&sh->sh_lock);
			probe(sh);
			pthread_mutex_lock(&sh->sh_lock);
		}
		if (sh->sh_stop && !drain_until)
			drain_until = mono_ns() + sh->sh_timeout_s * 1000000000ull;
		if (!sh->sh_q_head || (sh->sh_stop && mono_ns() > drain_until))
			break;
		ch = sh->sh_q_head;
		nsmall = 0;
		for (struct change *c = ch; c && nsmall < SMALL_PUTS && c->ch_kind == CH_PUT &&
					    c->ch_size <= KV_RADOS_EXTENT;
		     c = c->ch_next)
			small[nsmall++] = c;
		pthread_mutex_unlock(&sh->sh_lock);
		if (nsmall > 1) {
			ndone = apply_small_puts(sh, sh->sh_conn->c_r, small, nsmall, &err);
		} else {
			err = apply(sh, sh->sh_conn->c_r, ch);
			ndone = transient(err) ? 0 : 1;
		}
		pthread_mutex_lock(&sh->sh_lock);
		if (ndone && sh->sh_log)
			moved = true;
		for (; ndone; ndone--) {
			ch = sh->sh_q_head;
			if (err && !transient(err) && ndone == 1) {
				atomic_fetch_add(&sh->sh_errors, 1);
				fprintf(stderr,
					"kvfs: rados: a change to '%s' was not shared: %s\n",
					ch->ch_path ? ch->ch_path : "a key", strerror(-err));
			}
			sh->sh_q_head = ch->ch_next;
			if (!sh->sh_q_head)
				sh->sh_q_tail = NULL;
			sh->sh_q_n--;
			sh->sh_q_bytes -= ch->ch_size;
			sh->sh_q_done = ch->ch_id;
			pthread_cond_broadcast(&sh->sh_done_cond);
			pthread_mutex_unlock(&sh->sh_lock);
			change_free(ch);
			pthread_mutex_lock(&sh->sh_lock);
		}
		if (moved)
			log_done(sh);
		moved = false;
		if (transient(err)) {
			if (sh->sh_stop)
				break;
			/* kept at the head: tried again, after a pause that grows to 5 s */
			if (wait_stop_ms(sh, backoff_ms))
				continue;
			backoff_ms = backoff_ms * 2 > 5000 ? 5000 : backoff_ms * 2;
			pthread_mutex_unlock(&sh->sh_lock);
			probe(sh); /* replaces a connection that stopped answering */
			pthread_mutex_lock(&sh->sh_lock);
			continue;
		}
		backoff_ms = 250;
	}
	if (sh->sh_q_n)
		fprintf(stderr, "kvfs: rados: %" PRIu64 " changes were not sent to pool '%s'%s\n",
			sh->sh_q_n, sh->sh_pool,
			sh->sh_log ? ": kept in " KV_RLOG_NAME " for the next start" : "");
	pthread_mutex_unlock(&sh->sh_lock);
	return NULL;
}

static void shared_free(struct kv_shared *sh)
{
	while (sh->sh_q_head) {
		struct change *ch = sh->sh_q_head;

		sh->sh_q_head = ch->ch_next;
		change_free(ch);
	}
	for (unsigned b = 0; sh->sh_known && b < KNOWN_BUCKETS; b++)
		while (sh->sh_known[b]) {
			struct known *k = sh->sh_known[b];

			sh->sh_known[b] = k->kn_next;
			free(k);
		}
	free(sh->sh_known);
	free(sh->sh_dirs);
	kv_rlog_close(sh->sh_log);
	kv_rknown_close(sh->sh_rk);
	if (sh->sh_conn) {
		kv_rados_close(sh->sh_conn->c_r);
		free(sh->sh_conn);
	}
	conn_close_all(conn_idle(sh, true));
	pthread_cond_destroy(&sh->sh_done_cond);
	pthread_cond_destroy(&sh->sh_cond);
	for (unsigned i = 0; i < sh->sh_ndc; i++)
		dlist_put(sh->sh_dc[i]);
	pthread_mutex_destroy(&sh->sh_dc_lock);
	pthread_mutex_destroy(&sh->sh_known_lock);
	pthread_mutex_destroy(&sh->sh_lock);
	free(sh->sh_pool);
	free(sh->sh_ns);
	free(sh->sh_conf);
	free(sh->sh_id);
	free(sh);
}

/* kv_rlog_open's: a change read back from the log goes to the queue (before the thread runs). */
static int replayed(void *arg, const struct kv_rlog_change *c)
{
	static const enum change_kind kinds[] = {
	    [KV_RLOG_PUT] = CH_PUT,	  [KV_RLOG_DEL] = CH_DEL,
	    [KV_RLOG_MKDIR] = CH_MKDIR,	  [KV_RLOG_RMDIR] = CH_RMDIR,
	    [KV_RLOG_RENAME] = CH_RENAME, [KV_RLOG_SYMLINK] = CH_SYMLINK};
	struct kv_shared *sh = arg;
	struct change *ch = calloc(1, sizeof(*ch));

	if (!ch)
		return -ENOMEM;
	ch->ch_kind = kinds[c->rc_kind];
	ch->ch_id = c->rc_id;
	ch->ch_seq = c->rc_seq;
	ch->ch_size = c->rc_kind == KV_RLOG_PUT ? c->rc_size : 0;
	ch->ch_time_ns = c->rc_kind == KV_RLOG_PUT ? 0 : (int64_t)c->rc_size;
	if (c->rc_kind == KV_RLOG_DEL || c->rc_kind == KV_RLOG_RENAME) {
		ch->ch_vnode = c->rc_node;
		ch->ch_vseq = c->rc_node ? c->rc_seq : 0;
		ch->ch_mark = c->rc_mark;
		ch->ch_seq = 0;
	}
	ch->ch_mode = c->rc_mode;
	if (c->rc_kind != KV_RLOG_PUT && !(ch->ch_path = strdup(c->rc_path)))
		goto nomem;
	if ((c->rc_kind == KV_RLOG_RENAME || c->rc_kind == KV_RLOG_SYMLINK) &&
	    !(ch->ch_path2 = strdup(c->rc_path2)))
		goto nomem;
	if (c->rc_kind == KV_RLOG_PUT)
		sh->sh_unresolved++;
	queue_add(sh, ch);
	sh->sh_replayed++;
	return 0;
nomem:
	change_free(ch);
	return -ENOMEM;
}

static bool seq_at_most(void *arg, uint64_t seq)
{
	return seq <= *(const uint64_t *)arg;
}

/* Opens DATA_DIR's log and queues what it holds; without one (logged) the tier still runs. */
static void log_open(struct kv_shared *sh, int dirfd)
{
	uint64_t last = 0;
	int err;

	sh->sh_log_limit = KV_RLOG_REWRITE;
	err = kv_rlog_open(dirfd, sh->sh_pool, sh->sh_ns, replayed, sh, &sh->sh_log, &last);
	if (err) {
		fprintf(stderr,
			"kvfs: rados: cannot open %s: %s (changes not sent when kvfs stops are "
			"lost)\n",
			KV_RLOG_NAME, strerror(-err));
		while (sh->sh_q_head) { /* a part read before the failure */
			struct change *ch = sh->sh_q_head;

			sh->sh_q_head = ch->ch_next;
			change_free(ch);
		}
		sh->sh_q_tail = NULL;
		sh->sh_q_n = sh->sh_q_bytes = sh->sh_unresolved = sh->sh_replayed = 0;
		return;
	}
	sh->sh_q_last = last;
	sh->sh_q_done = sh->sh_q_head ? sh->sh_q_head->ch_id - 1 : last;
	if (sh->sh_replayed)
		fprintf(stderr,
			"kvfs: rados: %" PRIu64 " changes not sent before the last stop: "
			"queued again\n",
			sh->sh_replayed);
}

int kv_shared_start(const struct kv_config *cfg, struct kv_store *st, uint64_t node, int dirfd,
		    struct kv_shared **out)
{
	const uint64_t sec = 1000ull * 1000 * 1000;
	const struct kv_store_hooks hooks = {
	    .kh_sealed = on_sealed, .kh_changed = on_changed, .kh_arg = NULL};
	struct kv_store_hooks h = hooks;
	struct kv_shared *sh;
	pthread_condattr_t ca;
	int err;

	if (!kv_shared_built())
		return -ENOTSUP;
	sh = calloc(1, sizeof(*sh));
	if (!sh)
		return -ENOMEM;
	sh->sh_pool = strdup(cfg->kc_rados_pool);
	sh->sh_ns = strdup(cfg->kc_rados_namespace ? cfg->kc_rados_namespace : "");
	sh->sh_conf = strdup(cfg->kc_rados_conf ? cfg->kc_rados_conf : KV_RADOS_CONF_DEFAULT);
	sh->sh_id = strdup(cfg->kc_rados_id ? cfg->kc_rados_id : KV_RADOS_ID_DEFAULT);
	sh->sh_known = calloc(KNOWN_BUCKETS, sizeof(*sh->sh_known));
	sh->sh_timeout_s = (unsigned)((cfg->kc_rados_timeout_ns + sec - 1) / sec);
	if (sh->sh_timeout_s < 1)
		sh->sh_timeout_s = 1;
	sh->sh_ttl_ns = cfg->kc_rados_cache_ttl_ns;
	sh->sh_sync = cfg->kc_rados_sync;
	sh->sh_gc_interval_ns = cfg->kc_rados_gc_interval_ns;
	sh->sh_gc_grace_ns = cfg->kc_rados_gc_grace_ns;
	sh->sh_node = node;
	sh->sh_st = st;
	if (getenv("KVFS_TEST_RADOS_PUBLISH_PAUSE_MS"))
		sh->sh_pause_ms =
		    (unsigned)strtoul(getenv("KVFS_TEST_RADOS_PUBLISH_PAUSE_MS"), NULL, 10);
	pthread_mutex_init(&sh->sh_lock, NULL);
	pthread_mutex_init(&sh->sh_known_lock, NULL);
	pthread_mutex_init(&sh->sh_dc_lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&sh->sh_cond, &ca);
	pthread_cond_init(&sh->sh_done_cond, &ca);
	pthread_condattr_destroy(&ca);
	sh->sh_state = KV_SHARED_CONNECTING;
	if (!sh->sh_pool || !sh->sh_ns || !sh->sh_conf || !sh->sh_id || !sh->sh_known) {
		shared_free(sh);
		return -ENOMEM;
	}
	if (dirfd >= 0) {
		log_open(sh, dirfd);
		err = kv_rknown_open(dirfd, sh->sh_pool, sh->sh_ns, &sh->sh_rk);
		if (err) /* copies are then kept as local keys after a restart */
			fprintf(stderr, "kvfs: rados: cannot open %s: %s\n", KV_RKNOWN_NAME,
				strerror(-err));
		if (!err && kv_rknown_count(sh->sh_rk, NULL)) {
			/*
			 * Versions past the store's last sequence number are not this
			 * store's (it lost them: no SSD tier, a journal tail lost to a
			 * power cut): forgotten before a new value can take the number.
			 */
			uint64_t last = kv_store_last_seq(st);

			kv_rknown_prune(sh->sh_rk, UINT64_MAX, seq_at_most, &last);
		}
	}
	err = pthread_create(&sh->sh_thread, NULL, worker, sh);
	if (err) {
		shared_free(sh);
		return -err;
	}
	h.kh_arg = sh;
	kv_store_set_hooks(st, &h);
	*out = sh;
	return 0;
}

void kv_shared_stop(struct kv_shared *sh)
{
	struct timespec dl;

	if (!sh)
		return;
	kv_store_set_hooks(sh->sh_st, NULL);
	pthread_mutex_lock(&sh->sh_lock);
	sh->sh_stop = true;
	pthread_cond_broadcast(&sh->sh_cond);
	pthread_mutex_unlock(&sh->sh_lock);
	/* The drain and an operation in flight end within twice the timeout; a little slack. */
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += 2 * sh->sh_timeout_s + 2;
	if (pthread_timedjoin_np(sh->sh_thread, NULL, &dl) != 0) {
		fprintf(stderr,
			"kvfs: rados: an operation on pool '%s' is stuck in librados: left "
			"behind\n",
			sh->sh_pool);
		return;
	}
	shared_free(sh);
}

int kv_shared_sync(struct kv_shared *sh)
{
	struct timespec dl;
	uint64_t want;
	int err = 0;

	clock_gettime(CLOCK_MONOTONIC, &dl);
	dl.tv_sec += sh->sh_timeout_s;
	pthread_mutex_lock(&sh->sh_lock);
	want = sh->sh_q_last;
	while (sh->sh_q_done < want && !err)
		if (pthread_cond_timedwait(&sh->sh_done_cond, &sh->sh_lock, &dl) == ETIMEDOUT)
			err = -EIO;
	pthread_mutex_unlock(&sh->sh_lock);
	return err;
}

int kv_shared_persist(struct kv_shared *sh)
{
	int fd = -EBADF, err = 0;

	pthread_mutex_lock(&sh->sh_lock);
	if (sh->sh_log)
		fd = sh->sh_log_failed ? -EIO : kv_rlog_dup(sh->sh_log);
	pthread_mutex_unlock(&sh->sh_lock);
	if (fd == -EBADF)
		return 0; /* no log */
	if (fd < 0)
		return fd;
	if (fdatasync(fd) < 0)
		err = -errno;
	close(fd);
	return err;
}

bool kv_shared_sync_on(const struct kv_shared *sh)
{
	return sh->sh_sync;
}

/* --- reading the cluster (FUSE threads) --- */

/* The credentials a key from the cluster is made with. */
static struct kv_cred cred_of(const struct kv_rdent *e)
{
	return (struct kv_cred){.kc_uid = e->re_uid, .kc_gid = e->re_gid};
}

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
	err = counted(sh, t0, kv_rados_get_many(r, n, op, bufs, lens), "read data");
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
	struct kv_cred cred = cred_of(e);
	void *bounce[IO_BATCH] = {0};
	struct kv_obj *obj = NULL;
	int err = kv_store_value_new(st, e->re_size, dir, name, &obj);

	for (uint64_t first = 0; !err && first < e->re_nobj; first += IO_BATCH) {
		unsigned n = batch_of(e, first);
		void *bufs[IO_BATCH];
		size_t lens[IO_BATCH];

		for (unsigned i = 0; i < n && !err; i++) {
			struct iovec iov;
			uint64_t got = 0;

			lens[i] = object_len(e, first + i);
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
	struct kv_cred cred = cred_of(e);
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
		unsigned n = batch_of(e, first);
		size_t lens[IO_BATCH];

		for (unsigned i = 0; i < n && !err; i++) {
			lens[i] = object_len(e, first + i);
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
 * mode and mtime and is known as a copy of e's version (tl_quiet set).
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
	known_set(sh, a.ka_ino, a.ka_seq, true, e->re_node, e->re_seq);
	atomic_fetch_add(&sh->sh_hits, 1);
	kv_inode_put(ino);
}

/*
 * Brings cluster version e (a FILE entry) in as the value of `name` in dir,
 * quietly, with the entry's mode and mtime, and records it as a clean copy
 * of that version. -EAGAIN when the version was replaced meanwhile.
 */
static int fetch(struct kv_shared *sh, struct kv_rados *r, struct kv_inode *dir, const char *name,
		 const struct kv_rdent *e)
{
	struct kv_store *st = sh->sh_st;
	struct kv_inode *ino = NULL;
	int err;

	tl_quiet = true;
	if (e->re_size <= kv_pool_size(kv_store_pool(st)) / 4)
		err = fetch_whole(sh, r, dir, name, e, &ino);
	else
		err = fetch_stream(sh, r, dir, name, e, &ino);
	if (!err)
		adopt(sh, ino, e);
	tl_quiet = false;
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
	err = counted(sh, t0, kv_rados_get_many(r, m, op, bufs, lens), "read data");
	if (!err) {
		atomic_fetch_add(&sh->sh_objects_read, m);
		atomic_fetch_add(&sh->sh_bytes_read, bytes);
	}
	tl_quiet = true;
	for (unsigned i = 0; i < m; i++) {
		const uint64_t *sums = (const uint64_t *)(k[i].pk_e + 1);
		struct kv_cred cred = cred_of(k[i].pk_e);
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
	tl_quiet = false;
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
	dir_oid_of(doid, dpath);
	free(dpath);
	if (big_dir(sh, doid, false))
		return;
	dl = dlist_cached(sh, doid, 0);
	if (!dl) {
		int err = dlist_fetch(sh, r, doid, DC_MAX, &dl);

		if (err == -E2BIG)
			big_dir(sh, doid, true);
		if (err)
			return; /* too large to keep, or unreachable: each lookup asks */
		dlist_set(sh, doid, dl);
	}
	for (unsigned i = 0; i < n; i++) {
		const struct dl_ent *d = dlist_find(dl, names[i]);
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
	dlist_put(dl);
}

void kv_shared_prefetch(struct kv_shared *sh, struct kv_inode *dir, const char *const *names,
			unsigned n)
{
	struct conn *c;

	if (n < 2 || !atomic_load(&sh->sh_healthy))
		return;
	c = conn_get(sh);
	if (c)
		prefetch_in(sh, c->c_r, dir, names, n);
	conn_put(c);
}

/* Removes a local copy the cluster no longer has (quietly). */
static void drop_local(struct kv_shared *sh, struct kv_inode *dir, const char *name, uint64_t ino)
{
	tl_quiet = true;
	kv_store_unlink(sh->sh_st, dir, name);
	tl_quiet = false;
	known_drop(sh, ino);
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
	if (!S_ISDIR(a.ka_mode) || !known_get(sh, a.ka_ino, &k) || !k.kn_clean ||
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
			if (known_of(sh, ca.ka_ino, ca.ka_seq, &k) && k.kn_clean)
				drop_local(sh, dir, d->kde_name, ca.ka_ino);
		}
	}
	kv_dir_snap_free(&snap);
	kv_inode_put(dir);
	tl_quiet = true;
	if (!kv_store_rmdir(st, parent, name))
		known_drop(sh, a.ka_ino);
	tl_quiet = false;
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
	struct kv_cred cred = cred_of(e);
	char *target = strndup((const char *)(e + 1), e->re_size);
	struct kv_inode *l;
	struct kv_attr a;

	if (!target)
		return;
	tl_quiet = true;
	if (!kv_store_symlink(sh->sh_st, dir, name, target, &cred, &l, &a)) {
		known_set(sh, a.ka_ino, a.ka_seq, true, 0, 0);
		kv_store_forget(sh->sh_st, l, 1);
	}
	tl_quiet = false;
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
			have = known_of(sh, a.ka_ino, a.ka_seq, &k);
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
			dir_oid_of(doid, dpath);
		}
		err = entry_lookup(sh, r, doid, name, have ? k.kn_checked_ns : 0, &e, &elen);
		if (err == -ENOENT) {
			err = 0;
			if (local && clean && S_ISDIR(a.ka_mode))
				drop_tree(sh, dir, name, 0); /* removed in the cluster */
			else if (local && clean)
				drop_local(sh, dir, name, a.ka_ino); /* deleted in the cluster */
			else if (local)
				known_set(sh, a.ka_ino, a.ka_seq, false, 0, 0);
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
			known_set(sh, a.ka_ino, 0, true, 0, 0); /* still there */
		} else if (local && S_ISLNK(a.ka_mode)) {
			if (!same_link(st, dir, name, e)) {
				drop_local(sh, dir, name, a.ka_ino); /* replaced there */
				free(e);
				continue;
			}
			known_set(sh, a.ka_ino, a.ka_seq, true, 0, 0); /* still there */
		} else if (!local && e->re_type == KV_RDENT_DIR) {
			struct kv_inode *d;
			struct kv_cred cred = cred_of(e);

			tl_quiet = true;
			if (!kv_store_mkdir(st, dir, name, e->re_mode & 07777, &cred, &d, &a)) {
				/* brought in: dropped when the cluster removes it */
				known_set(sh, a.ka_ino, 0, true, 0, 0);
				kv_store_forget(st, d, 1);
			}
			tl_quiet = false;
		} else if (!local && e->re_type == KV_RDENT_SYMLINK) {
			bring_link(sh, dir, name, e);
		} else if (e->re_type == KV_RDENT_FILE) {
			int64_t lmtime =
			    local ? a.ka_mtime.tv_sec * 1000000000ll + a.ka_mtime.tv_nsec : 0;

			if (local && clean && same_version(e, k.kn_node, k.kn_rseq)) {
				known_set(sh, a.ka_ino, a.ka_seq, true, e->re_node, e->re_seq);
			} else if (local && e->re_node == sh->sh_node && e->re_seq == a.ka_seq) {
				/* ours, published before a restart */
				known_set(sh, a.ka_ino, a.ka_seq, true, e->re_node, e->re_seq);
			} else if (local && !clean && lmtime >= e->re_mtime_ns) {
				/* a newer local value: its put is queued (or, after a restart, is
				 * not: the next seal sends it) */
				known_set(sh, a.ka_ino, a.ka_seq, false, 0, 0);
			} else {
				err = fetch(sh, r, dir, name, e);
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
	dir_oid_of(doid, dpath);
	free(dpath);
	dl = dlist_cached(sh, doid, 0);
	if (!dl) {
		err = dlist_fetch(sh, r, doid, 0, &dl);
		if (err)
			return err == -ENOMEM ? err : 0; /* unreachable: the local listing */
		if (dl->dl_n <= DC_MAX)
			dlist_set(sh, doid, dl);
	}
	/* Local copies of keys the cluster no longer has go; local-only keys stay. */
	for (uint32_t i = 0; i < snap->kds_count; i++) {
		struct kv_dirent *d = &snap->kds_ent[i];
		bool listed = dlist_find(dl, d->kde_name) != NULL;
		struct known k = {0};
		struct kv_inode *ino;
		struct kv_attr a;

		if (S_ISDIR(d->kde_type) && !listed && known_get(sh, d->kde_ino, &k) &&
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
			if (known_of(sh, a.ka_ino, a.ka_seq, &k) && k.kn_clean) {
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
	dlist_put(dl);
	return err;
}

int kv_shared_lookup(struct kv_shared *sh, struct kv_inode *dir, const char *name)
{
	struct conn *c = conn_get(sh);
	int err = c ? lookup_in(sh, c->c_r, dir, name) : 0;

	conn_put(c);
	return err;
}

int kv_shared_readdir(struct kv_shared *sh, struct kv_inode *dir, struct kv_dir_snap *snap)
{
	struct conn *c = conn_get(sh);
	int err = c ? readdir_in(sh, c->c_r, dir, snap) : 0;

	conn_put(c);
	return err;
}

int kv_shared_gc(const struct kv_config *cfg, uint64_t grace_ns, FILE *out)
{
	const uint64_t sec = 1000ull * 1000 * 1000;
	const struct kv_rados_params p = {
	    .rp_conf = cfg->kc_rados_conf ? cfg->kc_rados_conf : KV_RADOS_CONF_DEFAULT,
	    .rp_id = cfg->kc_rados_id ? cfg->kc_rados_id : KV_RADOS_ID_DEFAULT,
	    .rp_pool = cfg->kc_rados_pool,
	    .rp_namespace = cfg->kc_rados_namespace ? cfg->kc_rados_namespace : "",
	    .rp_timeout_s = (unsigned)((cfg->kc_rados_timeout_ns + sec - 1) / sec)};
	struct kv_rados *r = NULL;
	struct gc_counts c;
	const char *step = "";
	int err;

	if (!kv_shared_built())
		return -ENOTSUP;
	err = kv_rados_open(&p, &r, &step);
	if (err) {
		fprintf(out, "rados-gc: cannot connect to pool '%s' (%s): %s\n", p.rp_pool, step,
			strerror(-err));
		return err;
	}
	err = gc_sweep(r, grace_ns, &c);
	if (err)
		fprintf(out, "rados-gc: pool '%s': %s\n", p.rp_pool, strerror(-err));
	else
		fprintf(out,
			"rados-gc: pool '%s' namespace '%s': %zu directories, %zu referenced "
			"versions; data objects: %" PRIu64 " in use, %" PRIu64
			" orphans removed, %" PRIu64 " orphans younger than the grace period "
			"kept\n",
			p.rp_pool, p.rp_namespace, c.gc_dirs, c.gc_refs, c.gc_kept, c.gc_removed,
			c.gc_young);
	kv_rados_close(r);
	return err;
}

/* --- stats --- */

void kv_shared_stats(struct kv_shared *sh, struct kv_shared_stats *out)
{
	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&sh->sh_lock);
	out->ss_state = sh->sh_state;
	out->ss_last_err = sh->sh_last_err;
	memcpy(out->ss_last_error_text, sh->sh_last_text, sizeof(out->ss_last_error_text));
	out->ss_backlog = sh->sh_q_n;
	out->ss_backlog_bytes = sh->sh_q_bytes;
	pthread_mutex_unlock(&sh->sh_lock);
	out->ss_healthy = atomic_load(&sh->sh_healthy);
	out->ss_connect_attempts = atomic_load(&sh->sh_attempts);
	out->ss_connect_failures = atomic_load(&sh->sh_failures);
	out->ss_objects_read = atomic_load(&sh->sh_objects_read);
	out->ss_objects_written = atomic_load(&sh->sh_objects_written);
	out->ss_bytes_read = atomic_load(&sh->sh_bytes_read);
	out->ss_bytes_written = atomic_load(&sh->sh_bytes_written);
	out->ss_errors = atomic_load(&sh->sh_errors);
	out->ss_timeouts = atomic_load(&sh->sh_timeouts);
	out->ss_hits = atomic_load(&sh->sh_hits);
	out->ss_puts = atomic_load(&sh->sh_puts);
	out->ss_deletes = atomic_load(&sh->sh_deletes);
	out->ss_gc_sweeps = atomic_load(&sh->sh_gc_sweeps);
	out->ss_gc_removed = atomic_load(&sh->sh_gc_removed);
	out->ss_replayed = sh->sh_replayed;
	out->ss_prefetched = atomic_load(&sh->sh_prefetched);
	out->ss_lat_p50 = kv_hist_percentile(&sh->sh_lat, 50);
	out->ss_lat_p90 = kv_hist_percentile(&sh->sh_lat, 90);
	out->ss_lat_p99 = kv_hist_percentile(&sh->sh_lat, 99);
}

/* Writes s as a JSON string literal, quotes included. */
static void json_string(FILE *f, const char *s)
{
	fputc('"', f);
	kv_json_str(f, s, strlen(s));
	fputc('"', f);
}

int kv_shared_render(const char *pool, const char *ns, const struct kv_shared_stats *s, char **out)
{
	const char *ename = s->ss_last_err ? strerrorname_np(-s->ss_last_err) : "";
	size_t len;
	FILE *f = open_memstream(out, &len);

	if (!f)
		return -ENOMEM;
	fprintf(f, "\"rados\": {\"state\": \"%s\", \"pool\": ", kv_shared_state_name(s->ss_state));
	json_string(f, pool);
	fputs(", \"namespace\": ", f);
	json_string(f, ns);
	fprintf(f,
		", \"connect_attempts\": %" PRIu64 ", \"connect_failures\": %" PRIu64
		", \"last_error\": ",
		s->ss_connect_attempts, s->ss_connect_failures);
	json_string(f, ename ? ename : "other");
	fputs(", \"last_error_text\": ", f);
	json_string(f, s->ss_last_error_text);
	fprintf(
	    f,
	    ", \"healthy\": %s, \"objects_read\": %" PRIu64 ", \"objects_written\": %" PRIu64
	    ", \"bytes_read\": %" PRIu64 ", \"bytes_written\": %" PRIu64 ", \"hits\": %" PRIu64
	    ", \"prefetched\": %" PRIu64 ", \"puts\": %" PRIu64 ", \"deletes\": %" PRIu64 ", \"backlog\": %" PRIu64
	    ", \"backlog_bytes\": %" PRIu64 ", \"replayed\": %" PRIu64 ", \"gc_sweeps\": %" PRIu64
	    ", \"gc_removed\": %" PRIu64 ", \"errors\": %" PRIu64 ", \"timeouts\": %" PRIu64
	    ", \"lat_ns\": {\"p50\": %" PRIu64 ", \"p90\": %" PRIu64 ", \"p99\": %" PRIu64 "}}",
	    s->ss_healthy ? "true" : "false", s->ss_objects_read, s->ss_objects_written,
	    s->ss_bytes_read, s->ss_bytes_written, s->ss_hits, s->ss_prefetched, s->ss_puts,
	    s->ss_deletes,
	    s->ss_backlog, s->ss_backlog_bytes, s->ss_replayed, s->ss_gc_sweeps, s->ss_gc_removed,
	    s->ss_errors, s->ss_timeouts, s->ss_lat_p50, s->ss_lat_p90, s->ss_lat_p99);
	if (fclose(f) != 0)
		return -ENOMEM;
	return 0;
}
