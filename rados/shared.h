/* SPDX-License-Identifier: MIT */
/*
 * rados/shared.h — the shared tier on Ceph RADOS: its contract.
 *
 * With --rados-pool a kvfs node is a local cache (DRAM + SSD) in front of a
 * pool that many nodes share (issue 10): every mount on the same pool and
 * --rados-namespace sees one namespace of keys, and a block computed on
 * node A is a hit on node B. Ceph does placement, replication and
 * recovery; kvfs keeps no distributed state of its own. This header is
 * what the rest of kvfs may rely on; rados/shared.c lists the files that
 * keep it. The tier calls down to rados/rados.h for every librados call;
 * the store calls it through the hooks it installs (kv_store_set_hooks),
 * fs/ through the functions below, and core/batch.c through the table
 * (struct kv_batch_remote) fs/ioctl.c fills with two of them.
 *
 * The objects (drawn in rados/rados_format.h):
 *
 *   d.<XXH3-128 of the directory's path>   a directory: its omap maps each
 *       child's name to a struct kv_rdent (type, mode, owner, mtime, size,
 *       the version (node, seq), one XXH3-64 checksum per data object).
 *   x.<node>.<seq>.<i>   object i (2 MiB) of the version born (node, seq),
 *       written whole once, never changed: node is the writing daemon's
 *       random id (DATA_DIR/node, or new at each start without a data
 *       directory), seq its own sequence number of the value, so versions
 *       never collide. A 2 MiB KV block is one data object and one entry.
 *
 * A put writes the data objects first, then changes the entry in one
 * atomic write op (a compare-and-set on the entry it replaces; the newer
 * by (mtime, node) wins a race): another node sees a key only once it is
 * complete, and a put replaces the key everywhere at once, as a rename
 * would. A delete removes the entry first (the shared namespace forgets
 * the key at once), then the version's objects, best effort. A delete or
 * rename applies to the version the key was here (this node's own, or the
 * one it had fetched): what another node wrote after that stays. When no
 * version was known, the newer mtime wins, as between two puts.
 *
 * What is shared: the store's hooks queue a put for every sealed value of
 * a named file, and a change for every mkdir, symlink, unlink, rmdir and
 * rename; one thread sends them to the cluster in the order they were
 * made (a delete never overtakes the put it follows). The FUSE layer asks
 * the cluster before a lookup (kv_shared_lookup: brings a key in, or drops
 * a local copy the cluster deleted, at most once per --rados-cache-ttl per
 * key) and a readdir (kv_shared_readdir). A value brought in is a local
 * key, evicted like any other. FIFOs and sockets stay local.
 *
 * Consistency (close-to-open): once kv_shared_sync returned 0 on node A
 * (fsync and the ioctl put call it with --rados-sync), a lookup on node B
 * that starts afterwards sees A's changes, or newer ones; B answers from
 * what it read of the same directory within the last --rados-cache-ttl,
 * so a name may be that stale. A local change not yet sent stays until it
 * is. Without --rados-sync, changes reach the cluster in the background,
 * in order (rados.backlog counts those waiting).
 *
 * Across a restart: every change queued is appended to DATA_DIR/rados.log
 * (rados/rados_log.h; synced by kv_shared_persist, which fsync calls, so a
 * kill -9 never loses one and a power cut none that was fsynced): what a
 * clean stop could not send, or what a kill -9 or a power cut left, is
 * queued again at the next start with the same pool and namespace, before
 * anything newer. A log kept for another pool or namespace is set aside
 * as rados.log.old, not sent. Which local values are copies of cluster
 * versions is kept in DATA_DIR/rados.known (rados/rados_known.h), by
 * sequence number: after a restart a copy is still replaced or removed
 * with the cluster's version, while a key made here and not yet sent
 * stays. Not kept: changes made while the tier is off (a mount without
 * --rados-pool), and a directory or symlink brought in from the cluster,
 * which is the node's own after its restart. A node killed in the middle
 * of a put leaves data objects without an entry (others never see a
 * partial key): the sweep (kv_shared_gc, and the thread every
 * --rados-gc-interval) removes the data objects no entry refers to once
 * they are older than --rados-gc-grace.
 *
 * Through an outage: the tier connects in the background. kv_shared_start
 * returns at once and its thread connects with every client timeout set
 * to --rados-timeout, so a mount never waits for the cluster. A failed
 * attempt logs one line on stderr (the first of a run of failures only),
 * counts in the stats, and is retried after 1 s, then 2 s, 4 s, ... at
 * most KV_SHARED_RETRY_MAX_S apart, until it works or kv_shared_stop.
 * Local keys are served all along. A lookup that needs the cluster waits
 * for --rados-timeout and fails with -EIO; from then on, while "healthy"
 * is false, lookups and readdir answer from the local store at once,
 * changes queue (bounded by the SSD quota: they are local keys) and wait
 * in order, and the thread asks the cluster every second, replacing a
 * connection that keeps timing out. When it answers, the queue drains in
 * order. A full cluster answers -ENOSPC at once; the change stays at the
 * head of the queue and is tried again after a backoff.
 *
 * States: CONNECTING (the first attempt runs), CONNECTED (a cluster handle
 * and an I/O context on the pool and namespace are open), UNREACHABLE (the
 * last attempt failed; the next one is due). While connected, "healthy"
 * says whether the last operation answered.
 *
 * Locks: sh_lock, sh_known_lock and sh_dc_lock (struct kv_shared,
 * rados/shared_int.h) are leaves: held for a few field accesses only, never
 * across a librados call (a connection is closed after sh_lock is dropped)
 * or a call into the store, and never taken with each other. sh_lock also
 * orders DATA_DIR/rados.log: each change's record is appended under it
 * (one write(2) to the page cache), and a rewrite of a log grown past
 * KV_RLOG_REWRITE runs under it (rare; fdatasync included). rados.known
 * has its own leaf mutex (rados/rados_known.h), taken with none of these.
 * The hooks run under store locks and take only sh_lock. The functions
 * below take store locks through the store's API, holding none of their
 * own.
 */
#ifndef KVFS_RADOS_SHARED_H
#define KVFS_RADOS_SHARED_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/config.h"
#include "core/store.h"

#define KV_SHARED_RETRY_MAX_S 30

struct kv_shared;

enum kv_shared_state {
	KV_SHARED_CONNECTING,
	KV_SHARED_CONNECTED,
	KV_SHARED_UNREACHABLE,
};

/* A snapshot of the tier's state and counters, for MNT/.kvfs/stats. */
struct kv_shared_stats {
	enum kv_shared_state ss_state;
	uint64_t ss_connect_attempts;
	uint64_t ss_connect_failures;
	int ss_last_err;	      /* the last failure's -errno; 0: none yet */
	char ss_last_error_text[160]; /* "connect: Connection timed out", or "" */
	bool ss_healthy;	      /* the last cluster operation answered */
	uint64_t ss_objects_read, ss_objects_written;
	uint64_t ss_bytes_read, ss_bytes_written;
	uint64_t ss_hits;		       /* values brought in from the cluster */
	uint64_t ss_prefetched;		       /* of those, by a batch's prefetch */
	uint64_t ss_puts, ss_deletes;	       /* entries published and removed */
	uint64_t ss_backlog, ss_backlog_bytes; /* changes waiting, and the bytes of their values */
	uint64_t
	    ss_replayed; /* changes the log held at the start (not sent before the last stop) */
	uint64_t ss_gc_sweeps, ss_gc_removed;  /* background sweeps done, orphans they removed */
	uint64_t ss_errors, ss_timeouts;
	uint64_t ss_lat_p50, ss_lat_p90, ss_lat_p99; /* of each cluster operation, ns */
};

/* Whether this kvfs was built with librados (CMake -DKVFS_RADOS). */
bool kv_shared_built(void);

/*
 * Starts the tier for cfg->kc_rados_pool (which must be set) and the other
 * kc_rados_* settings, copied: cfg may go after this returns, st may not.
 * node is this node's id (kv_datadir_node). dirfd is DATA_DIR (-1: none):
 * its change log (rados/rados_log.h) is read and what it holds queued again,
 * to be sent before anything newer. Installs the store's hooks
 * (kv_store_set_hooks): call it before the store serves. Never waits for
 * the cluster. Returns 0 and sets *out, -ENOTSUP when built without
 * librados, -ENOMEM, or pthread_create's -errno.
 */
int kv_shared_start(const struct kv_config *cfg, struct kv_store *st, uint64_t node, int dirfd,
		    struct kv_shared **out);

/*
 * After the FUSE session ended: removes the store's hooks, lets the thread
 * send what is queued while the cluster answers (for at most
 * --rados-timeout; what is left is logged as not sent), closes the
 * connection and frees sh. A thread still stuck in librados after twice
 * the timeout is left behind with its memory (logged), the process being
 * about to exit. NULL is fine.
 */
void kv_shared_stop(struct kv_shared *sh);

/*
 * Before a lookup of name in dir: brings the local store up to date with
 * the cluster for that name. A key only the cluster has is brought in (its
 * value read, checked and stored as a local key; a directory is made);
 * a local copy of a cluster value is checked against the entry at most
 * once per --rados-cache-ttl: replaced when the cluster has a newer
 * version, removed when the cluster deleted it. A local value not yet
 * published, or newer, stays. Returns 0 (then look name up in the store),
 * or -EIO when the name is not here and the cluster does not answer.
 */
int kv_shared_lookup(struct kv_shared *sh, struct kv_inode *dir, const char *name);

/*
 * Before the lookups of a batch of keys in dir (the ioctl get): the values
 * of one data object (2 MiB at most) that only the cluster has are read
 * all in flight at once, KV_SHARED_PREFETCH_MAX at a time, instead of one
 * after the other by each lookup. Best effort: what it does not bring in,
 * kv_shared_lookup does. The cluster's listing of dir is used as
 * kv_shared_lookup would (at most --rados-cache-ttl old).
 */
#define KV_SHARED_PREFETCH_MAX 32
void kv_shared_prefetch(struct kv_shared *sh, struct kv_inode *dir, const char *const *names,
			unsigned n);

/*
 * Before listing dir (snap: kv_store_readdir's): removes local copies of
 * keys the cluster deleted (from the store and from snap) and appends the
 * names only the cluster has, with kde_ino 0 (a lookup brings them in).
 * An unreachable cluster leaves snap as it is. Returns 0 or -ENOMEM.
 */
int kv_shared_readdir(struct kv_shared *sh, struct kv_inode *dir, struct kv_dir_snap *snap);

/*
 * Waits until every change queued so far reached the cluster. Returns 0,
 * or -EIO when that did not happen within --rados-timeout.
 */
int kv_shared_sync(struct kv_shared *sh);

/*
 * Makes the changes queued so far survive a power cut (their log is
 * synced; fsync calls it). A kill -9 never loses them. Returns 0 or -errno.
 */
int kv_shared_persist(struct kv_shared *sh);

/* --rados-sync: fsync and the ioctl put call kv_shared_sync. */
bool kv_shared_sync_on(const struct kv_shared *sh);

/*
 * kvfs --rados-gc: removes the data objects of the pool's namespace that no
 * directory entry refers to and that are older than grace_ns (a put in
 * flight writes its objects before its entry). Reports to out. Returns 0
 * or -errno.
 */
int kv_shared_gc(const struct kv_config *cfg, uint64_t grace_ns, FILE *out);

/* Fills *out with a snapshot; thread-safe. */
void kv_shared_stats(struct kv_shared *sh, struct kv_shared_stats *out);

/* "connecting", "connected" or "unreachable". */
const char *kv_shared_state_name(enum kv_shared_state st);

/*
 * Renders the stats section as one JSON object member into a malloc'ed
 * string (no trailing newline):
 *
 * "rados": {"state": "connected", "pool": "P", "namespace": "NS",
 *           "connect_attempts": N, "connect_failures": N,
 *           "last_error": "ETIMEDOUT", "last_error_text": "connect: ...",
 *           "healthy": true, "objects_read": N, "objects_written": N,
 *           "bytes_read": N, "bytes_written": N, "hits": N, "prefetched": N,
 *           "puts": N,
 *           "deletes": N, "backlog": N, "backlog_bytes": N, "replayed": N,
 *           "gc_sweeps": N,
 *           "gc_removed": N, "errors": N,
 *           "timeouts": N, "lat_ns": {"p50": N, "p90": N, "p99": N}}
 *
 * last_error is the errno's name, "" before any failure. Pool and
 * namespace are JSON-escaped. Returns 0 or -ENOMEM.
 */
int kv_shared_render(const char *pool, const char *ns, const struct kv_shared_stats *s, char **out);

/* The pool and namespace sh was started with (immutable). */
const char *kv_shared_pool(const struct kv_shared *sh);
const char *kv_shared_namespace(const struct kv_shared *sh);

#endif
