/* SPDX-License-Identifier: MIT */
/*
 * core/gc.h — compaction of SSD buckets, and cache-mode eviction.
 *
 * A delete, a rename over a key, an overwrite (its copy-on-write) and a
 * truncate leave the old record where it is and count its bytes as dead in
 * its bucket (kv_bucket_dead: no data I/O). The collector gives those
 * bytes back:
 *
 *   victims  every --gc-interval the thread lists the buckets and takes,
 *            coldest first (least recently read or appended), those whose
 *            dead ratio is at least --gc-dead-ratio, leaving for later
 *            those still dying (a record died since the last pass: a tree
 *            being removed, a cache being dropped), since copying records
 *            about to die is wasted work and an `rm -rf` would pay for it;
 *            that waiting ends once nothing has been dying for a pass, and
 *            lasts 30 intervals at most, so a steady stream of overwrites
 *            still gets compacted, and a fully dead bucket never waits (it
 *            costs no copy). When the buckets use
 *            more than --gc-high-watermark of the quota it takes the
 *            deadest ones whatever their ratio; at most --gc-max-buckets
 *            per pass. Busy buckets (the active one, a compaction output, a
 *            pinned one: a deleted key still open reads from it) never are.
 *   copy     the live records of the victims (found by walking the index)
 *            are copied into a new bucket, checked chunk by chunk on the way
 *            (a record failing its checksum is not copied: its bucket is
 *            kept); the copy is a new file, the victims are never written.
 *   durable  the new bucket is sealed and synced.
 *   switch   per key, under ks_ns_lock (shared) and its ki_lock
 *            (exclusive): only if the key still has a name and still points
 *            at the very record copied (same bucket, offset, sequence
 *            number) does it switch to the copy, with a KV_J_MOVE journal
 *            entry naming its current path. A key deleted or rewritten
 *            meanwhile is skipped (revalidation_skips) and its copy counted
 *            dead. A key renamed meanwhile is the same inode with the same
 *            value: it is moved, under its new name.
 *   remove   the journal is synced up to its last entry — the moves and
 *            every tombstone of the victims' keys — and only then each
 *            victim is dropped; its file goes when the reads in flight on
 *            it are done (kv_bucket_drop waits for their references). A
 *            pass that yields (not urgent, below the high watermark)
 *            leaves its ready victims in place while foreground I/O uses
 *            the disk (kv_bucket_fg_active), and drops them when it pauses,
 *            at the end of the pass, or together once 64 MiB wait:
 *            removing a file makes a filesystem mounted with `discard` trim
 *            it, which a disk serving one request at a time makes every
 *            queued read wait for; so reads pause seldom, not per bucket.
 *   A victim with no live record is dropped without any copying.
 *
 * Replay applies a MOVE only while the key's value has the move's sequence
 * number, so a move followed by a rewrite or a delete never brings an old
 * value back. A crash at any step leaves either the old or the new bucket
 * unreferenced, and recovery deletes it (an orphan).
 *
 * Pressure. When an offload finds the quota full, the offloader calls
 * kv_gc_make_room: an urgent pass (deadest first, unpaced, sealing the
 * active bucket when it holds dead records) runs in its thread, and the
 * put is retried while passes give space back; so writers wait instead of
 * failing while dead space exists. With --evict=lru, a pass that finds the
 * buckets above the high watermark first deletes the least recently used
 * keys that no fd holds open (through the store's evict callback, exactly
 * as unlink would) until the live bytes are under --gc-low-watermark.
 *
 * Pacing: below the high watermark a periodic pass copies at most
 * --gc-rate bytes/s (0: 256 MiB/s), in the idle I/O class; urgent and
 * forced passes are unpaced. Reads of the victims go 32 at a time
 * (libaio) and the output is written 8 MiB at a time; while foreground I/O
 * uses the disk, a pass that is not urgent moves 64 KiB at a time.
 *
 * Calls. The collector reads the index (struct kv_inode, core/store_int.h)
 * under its locks, takes references and paths through the object model
 * (core/inode.h), writes buckets and journal entries (ssd/), and calls
 * into the store only through the callbacks given to kv_gc_create;
 * the store and the tier call the kv_gc_* functions below. It never calls
 * the tier, the namespace or persistence: its layer is below the tier,
 * beside core/persist.c, above the object model. After a pass the thread writes a checkpoint when the journal
 * has grown past 64 MiB, so moves and tombstones are folded into it like
 * every other entry and replay stays bounded.
 *
 * Locks: kg_pass_lock (a mutex) serialises passes; it is taken with no
 * other lock held, so it comes before ks_ns_lock. kg_lock guards kg_stop
 * and goes with kg_wake (the thread's sleep). Counters are atomics.
 */
#ifndef KVFS_CORE_GC_H
#define KVFS_CORE_GC_H

#include <stdbool.h>
#include <stdint.h>

#include "ssd/bucket.h"

struct kv_store;
struct kv_inode;
struct kv_gc;

/* The collector's counters (MNT/.kvfs/stats, section "gc"). */
struct kv_gc_stats {
	uint64_t gs_passes;	   /* passes that found victims */
	uint64_t gs_compacted;	   /* victims dropped after their live records were copied */
	uint64_t gs_dropped;	   /* victims dropped whole: no live record */
	uint64_t gs_reclaimed;	   /* bytes of victims dropped, less the copies written */
	uint64_t gs_rewritten;	   /* bytes of live records copied and switched */
	uint64_t gs_copied;	   /* bytes copied, switched or not */
	uint64_t gs_skips;	   /* copies not switched: their key changed meanwhile */
	uint64_t gs_csum_failures; /* records not copied: they failed their checksums */
	uint64_t gs_ns;		   /* time spent in passes */
	uint64_t gs_evicted_keys;  /* cache mode: keys deleted */
	uint64_t gs_evicted_bytes; /* and their bytes */
	uint64_t gs_room_waits;	   /* times an offload found the quota full and waited */
	uint64_t gs_recycled;	   /* outputs written over a victim's file (kv_bucket_recycle) */
};

/* How victims are chosen (kv_gc_select). */
struct kv_gc_policy {
	double gp_dead_ratio;
	double gp_high_watermark;
	uint32_t gp_max;  /* victims at most (ignored by gp_all) */
	uint64_t gp_used; /* bytes the buckets use */
	uint64_t gp_cap;  /* the quota */
	bool gp_all;	  /* a forced pass: every bucket with a dead byte */
	bool gp_urgent;	  /* deadest first whatever the ratio (also when gp_used is high) */
	uint64_t gp_now;	/* CLOCK_MONOTONIC ns, for gp_settle_ns */
	uint64_t gp_settle_ns;	/* a record of the bucket died less than this ago: it is dying */
	bool gp_settle;		/* pass dying buckets over (by ratio only) */
	uint32_t gp_dying;	/* out: candidates by ratio found dying, passed over or not */
};

/*
 * Chooses victims among info[0..n) (sorting info in place) and writes their
 * ids to ids[] (room for n). Busy buckets and buckets without a dead byte
 * never are. gp_all: all the rest, deadest first. Urgent (gp_urgent, or
 * gp_used above gp_high_watermark * gp_cap): the gp_max deadest. Else the
 * gp_max coldest of those at least gp_dead_ratio dead, passing over, with
 * gp_settle, those still dying (a record died in the last gp_settle_ns)
 * that have a live record left: counted in gp_dying. Returns how many.
 */
uint32_t kv_gc_select(struct kv_bucket_info *info, uint32_t n, struct kv_gc_policy *p,
		      uint64_t *ids);

/* What the store lends the collector: its only calls back into the store. */
struct kv_gc_ops {
	/*
	 * Deletes a key as unlink would, for cache mode: only if it still has
	 * a name, no fd holds it open and it was not used since `used` (its
	 * last-use stamp). Returns 0 and its record's bytes in *bytes, or -errno.
	 */
	int (*go_evict)(struct kv_store *st, struct kv_inode *ino, uint64_t used, uint64_t *bytes);
	/* Writes a checkpoint (the journal grew past a bound with moves and tombstones). */
	int (*go_checkpoint)(struct kv_store *st);
};

/*
 * The places a pass can be stopped at by KVFS_FAULT=<name>[:<n>] (crash
 * tests: the n-th time it is reached; only in a build configured with
 * -DKVFS_FAULTS=ON) or a test hook.
 */
enum kv_gc_point {
	KV_GC_AFTER_COPY,    /* "gc_after_copy": the new bucket written, not yet durable */
	KV_GC_AFTER_DURABLE, /* "gc_after_durable": it is sealed and synced */
	KV_GC_AFTER_SWITCH,  /* "gc_after_switch": keys switched, MOVE entries appended */
	KV_GC_AFTER_JOURNAL, /* "gc_after_journal": the journal synced */
	KV_GC_BEFORE_REMOVE, /* "gc_before_remove": about to drop the first victim */
	KV_GC_AFTER_REMOVE,  /* "gc_after_remove": the victims dropped */
	KV_GC__POINTS,
};

int kv_gc_create(struct kv_store *st, struct kv_bucket_set *bs, const struct kv_gc_ops *ops,
		 struct kv_gc **out);
/* Starts the thread (unless --gc=off). */
void kv_gc_start(struct kv_gc *gc);
/* Stops the thread; kv_gc_run and kv_gc_make_room keep working until destroy. */
void kv_gc_stop(struct kv_gc *gc);
void kv_gc_destroy(struct kv_gc *gc);

/*
 * One full pass over every bucket with a dead byte (MNT/.kvfs/ctl `gc`),
 * unpaced; returns when it is done: 0, or the -errno that stopped it.
 */
int kv_gc_run(struct kv_gc *gc);

/*
 * The quota is full (an offload got -ENOSPC): runs an urgent pass (in cache
 * mode, evicting first). Returns 0 when it gave space back (retry the put),
 * -ENOSPC when there was nothing to give back.
 */
int kv_gc_make_room(struct kv_gc *gc);

void kv_gc_stats(struct kv_gc *gc, struct kv_gc_stats *out);

/*
 * Calls fn(point, arg) at each point of every later pass (tests), instead
 * of the KVFS_FAULT abort. NULL restores it.
 */
void kv_gc_set_hook(struct kv_gc *gc, void (*fn)(enum kv_gc_point p, void *arg), void *arg);

#endif
