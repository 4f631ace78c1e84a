/* SPDX-License-Identifier: MIT */
/*
 * rados/shared_int.h — what the shared tier's files (rados/shared*.c)
 * share: struct kv_shared and its locks, the change queue's and the known
 * table's records, a directory listing, and each file's functions that
 * the files above it call (prefixed kv_sh_). Not for use outside rados/:
 * the tier's contract is rados/shared.h.
 *
 * Lock order: sh_lock, sh_known_lock and sh_dc_lock are leaves, never
 * taken with each other nor held across a librados call or a call into
 * the store (rados/shared.h, "Locks").
 */
#ifndef KVFS_RADOS_SHARED_INT_H
#define KVFS_RADOS_SHARED_INT_H

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
#include "rados/shared.h"

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
 * A connection and its users: FUSE threads count themselves in (kv_sh_conn_get,
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
	struct conn *sh_conn;	 /* the connection (NULL before); replaced by probe() */
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
	uint64_t sh_big[BIG_DIRS], sh_big_ns[BIG_DIRS]; /* kv_sh_big_dir(): hashes of doids, when */
	unsigned sh_nbig;

	_Atomic bool sh_healthy;       /* the last cluster operation answered */
	_Atomic uint64_t sh_renames;   /* renames made here: kv_sh_start_walk's prune needs none */
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

/* Set while a thread changes the local store for the cluster: the hooks ignore it. */
extern _Thread_local bool kv_sh_quiet;

static inline uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline int64_t realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/* rados/shared_cluster.c: talking to the cluster: connections, counted operations, entries */
struct conn *kv_sh_conn_get(struct kv_shared *sh);
void kv_sh_conn_put(struct conn *c);
struct conn *kv_sh_conn_new(struct kv_rados *r);
struct conn *kv_sh_conn_idle(struct kv_shared *sh, bool all);
void kv_sh_conn_close_all(struct conn *c);
bool kv_sh_transient(int err);
int kv_sh_counted(struct kv_shared *sh, uint64_t t0, int err, const char *what);
void kv_sh_dir_oid_of(char *oid, const char *path);
char *kv_sh_parent_of(const char *path, const char **name);
char *kv_sh_entry_place(const char *path, const char **name, char *doid);
bool kv_sh_entry_ok(struct kv_shared *sh, const char *doid, const char *name,
		    const struct kv_rdent *e, size_t len);
int kv_sh_entry_get(struct kv_shared *sh, struct kv_rados *r, const char *doid, const char *name,
		    struct kv_rdent **ent, size_t *len);
bool kv_sh_same_version(const struct kv_rdent *a, uint64_t node, uint64_t seq);
void kv_sh_remove_objects(struct kv_shared *sh, struct kv_rados *r, const struct kv_rdent *e);
size_t kv_sh_object_len(const struct kv_rdent *e, uint64_t i);
unsigned kv_sh_batch_of(const struct kv_rdent *e, uint64_t first);
struct kv_cred kv_sh_cred_of(const struct kv_rdent *e);

/* rados/shared_known.c: the known table */
bool kv_sh_known_get(struct kv_shared *sh, uint64_t ino, struct known *out);
void kv_sh_known_set(struct kv_shared *sh, uint64_t ino, uint64_t seq, bool clean, uint64_t node,
		     uint64_t rseq);
void kv_sh_known_drop(struct kv_shared *sh, uint64_t ino);
bool kv_sh_known_of(struct kv_shared *sh, uint64_t ino, uint64_t seq, struct known *out);

/* rados/shared_dircache.c: listings of directories, kept for the TTL */
void kv_sh_dlist_put(struct dlist *dl);
int kv_sh_dlist_fetch(struct kv_shared *sh, struct kv_rados *r, const char *doid, unsigned max,
		      struct dlist **out);
const struct dl_ent *kv_sh_dlist_find(const struct dlist *dl, const char *name);
struct dlist *kv_sh_dlist_cached(struct kv_shared *sh, const char *doid, uint64_t not_before);
void kv_sh_dlist_set(struct kv_shared *sh, const char *doid, struct dlist *dl);
bool kv_sh_big_dir(struct kv_shared *sh, const char *doid, bool mark);
int kv_sh_entry_lookup(struct kv_shared *sh, struct kv_rados *r, const char *doid, const char *name,
		       uint64_t not_before, struct kv_rdent **ent, size_t *len);

/* rados/shared_fetch.c: bringing values in (FUSE threads) */
int kv_sh_fetch(struct kv_shared *sh, struct kv_rados *r, struct kv_inode *dir, const char *name,
		const struct kv_rdent *e);

/* rados/shared_queue.c: the change queue and its log */
void kv_sh_change_free(struct change *ch);
void kv_sh_enqueue(struct kv_shared *sh, struct change *ch);
void kv_sh_log_done(struct kv_shared *sh);
void kv_sh_start_walk(struct kv_shared *sh);
void kv_sh_log_open(struct kv_shared *sh, int dirfd);

/* rados/shared_publish.c: applying changes to the cluster (the thread only) */
unsigned kv_sh_apply_small_puts(struct kv_shared *sh, struct kv_rados *r, struct change **chs,
				unsigned n, int *errp);
int kv_sh_apply(struct kv_shared *sh, struct kv_rados *r, struct change *ch);

/* rados/shared_sweep.c: the pool sweep */
void kv_sh_background_sweep(struct kv_shared *sh);

/* rados/shared_thread.c: the thread */
void *kv_sh_worker(void *arg);

#endif
