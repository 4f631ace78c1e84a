/* SPDX-License-Identifier: MIT */
/*
 * core/tier.c — the policy between the DRAM pool and the SSD buckets.
 *
 * Offload. A sealed version is queued (kv_tier_enqueue) and one offloader
 * thread writes queued values to the buckets in batches: it waits at most
 * the flush delay after the first value arrives, so no value ever waits
 * for others to fill a bucket. Values are written straight from their pool
 * extents, one record per extent (core/xmap.h). Once a batch is durable,
 * each value that is still the inode's newest gets its map (ki_map) and a
 * KV_J_PUT journal entry with the key's *current* path; a version
 * superseded or deleted meanwhile is counted as dead space instead.
 *
 * Eviction. A value that is sealed and durable is *clean*: its DRAM copy
 * may go. Clean values sit on a clock (second-chance LRU): a read sets the
 * inode's referenced bit, the hand clears it once before evicting. A value
 * with readers (a reference besides the inode's) is skipped.
 *
 * Back-pressure. A writer that finds the pool full calls
 * kv_tier_make_room: it evicts clean values, or, when there are none yet,
 * sleeps until the offloader finishes a batch (making some clean) or a
 * spill round (sending files being written to the SSD), for at most the
 * back-pressure bound; then the write fails with ENOSPC. When nothing is
 * queued, being written or able to spill there is nothing to wait for,
 * and when a spill round freed nothing neither: ENOSPC at once.
 *
 * The SSD quota. Every change promised its records' room before it was
 * acknowledged (core/obj.h, "SSD quota owed"; a change the quota refuses
 * waits in kv_tier_quota_room for a batch or a pass, else fails), and its
 * puts place them with that room (fills_take). A put the buckets still
 * refuse (-ENOSPC: the dead bytes a promise did not count are not yet
 * reclaimed) is retried while compaction gives space back
 * (kv_gc_make_room runs an urgent pass in the offloader's thread), for at
 * most the back-pressure bound; when none comes back, a promised put is
 * placed past the quota (bp_over), its room counted on the version it
 * replaces.
 *
 * Layer (core/tier.h): below the namespace (core/store.c, core/write.c,
 * core/read.c), above compaction (kv_gc_make_room), persistence
 * (kv_persist_put, kv_persist_checkpoint) and the object model
 * (core/inode.h). It never
 * calls the namespace: a read that must start over returns -EAGAIN to
 * kv_store_read, and what an inode's last reference releases here
 * (kv_tier_forget) the namespace calls from its struct kv_inode_ops.
 *
 * Locks: kt_lock guards the queue, kt_stop, kt_busy, kt_batches and the
 * spill list (kt_shead, ki_snext, ki_spillable; while the offloader holds
 * the list taken off kt_shead, it alone walks ki_snext), and goes with two
 * condition variables (kt_wake: work for the offloader;
 * kt_done: a batch finished). kt_clock_lock guards the clock. See
 * core/store_int.h for the order against the store's locks.
 *
 * Read-ahead. A read of bytes only on the SSD (kv_tier_read, and
 * kv_tier_read_mixed for a value partly in DRAM) first looks for each
 * record piece in the read-ahead buffers (core/readahead.h), then tells
 * the stream where it read, and starts reading the records of the next
 * window that are not in DRAM (read_ahead), all under the ki_lock shared
 * it reads the map with. The buffers' own lock, kr_lock, comes below
 * every lock here.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/tier.h"

#include "core/gc.h"
#include "core/persist.h"
#include "core/readahead.h"
#include "core/stats.h"
#include "core/store_int.h"

#define BATCH_KEYS  256
#define BATCH_BYTES (64ull << 20)
#define AIO_DEPTH   64
/* Journal bytes after which the offloader writes a checkpoint. */
#define CHECKPOINT_BYTES (64ull << 20)

struct kv_tier {
	struct kv_store *kt_st;	     /* immutable */
	struct kv_aio *kt_aio;	     /* immutable */
	struct kv_bucket_set *kt_bs; /* immutable */
	struct kv_ra *kt_ra;	     /* immutable: read-ahead (core/readahead.h) */
	pthread_t kt_thread;
	bool kt_started;

	pthread_mutex_t kt_lock;
	pthread_cond_t kt_wake;
	pthread_cond_t kt_done;
	struct kv_inode *kt_qhead, *kt_qtail; /* queued inodes, each holding a reference */
	uint64_t kt_qkeys, kt_qbytes;	      /* the backlog, queued and being written */
	uint64_t kt_batches;		      /* batches finished: waiters watch it change */
	uint64_t kt_enqueued, kt_finished;    /* values queued / taken through a batch, ever */
	bool kt_busy;			      /* a batch is being written */
	unsigned kt_waiters;		      /* writers waiting for room: write now */
	bool kt_stop;
	struct kv_inode *kt_shead; /* files being written that may spill (ki_snext), each
				      holding a reference ("Spill") */
	uint64_t kt_nspill;	   /* files on the spill list, with those a round has taken */
	uint64_t kt_spill_started, kt_spill_rounds; /* spill rounds begun, ended: ever */
	uint64_t kt_spill_freed;		    /* bytes spill rounds freed, ever */

	pthread_mutex_t kt_clock_lock;
	struct kv_inode *kt_hand; /* the clock of clean values: circular, NULL when empty */
	uint64_t kt_clock_n;

	_Atomic uint64_t kt_dram_hits, kt_ssd_hits, kt_evictions, kt_promotions, kt_spilled;
	_Atomic uint64_t kt_shared; /* bytes of records a new version shared, not written */
	_Atomic uint64_t kt_offload_errors;
	uint64_t kt_recovery_ns, kt_recovered_keys, kt_lost_keys; /* set once at start */
};

struct kv_bucket_set *kv_tier_buckets(struct kv_tier *t)
{
	return t->kt_bs;
}

void kv_tier_recovered(struct kv_tier *t, uint64_t ns, uint64_t keys, uint64_t lost)
{
	t->kt_recovery_ns = ns;
	t->kt_recovered_keys = keys;
	t->kt_lost_keys = lost;
}

static void deadline_in(struct timespec *ts, uint64_t ns)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += (time_t)(ns / 1000000000);
	ts->tv_nsec += (long)(ns % 1000000000);
	if (ts->tv_nsec >= 1000000000) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000;
	}
}

static int cond_init_mono(pthread_cond_t *c)
{
	pthread_condattr_t a;
	int err;

	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	err = pthread_cond_init(c, &a);
	pthread_condattr_destroy(&a);
	return -err;
}

/* --- the clock (kt_clock_lock held) --- */

static void clock_remove(struct kv_tier *t, struct kv_inode *ino)
{
	if (!ino->ki_on_clock)
		return;
	if (ino->ki_cnext == ino) {
		t->kt_hand = NULL;
	} else {
		ino->ki_cprev->ki_cnext = ino->ki_cnext;
		ino->ki_cnext->ki_cprev = ino->ki_cprev;
		if (t->kt_hand == ino)
			t->kt_hand = ino->ki_cnext;
	}
	ino->ki_cprev = ino->ki_cnext = NULL;
	ino->ki_on_clock = false;
	t->kt_clock_n--;
}

void kv_tier_clean(struct kv_tier *t, struct kv_inode *ino)
{
	pthread_mutex_lock(&t->kt_clock_lock);
	if (!ino->ki_on_clock) {
		struct kv_inode *h = t->kt_hand;

		if (!h) {
			ino->ki_cprev = ino->ki_cnext = ino;
			t->kt_hand = ino;
		} else {
			/* Just behind the hand: the last to be looked at. */
			ino->ki_cnext = h;
			ino->ki_cprev = h->ki_cprev;
			h->ki_cprev->ki_cnext = ino;
			h->ki_cprev = ino;
		}
		ino->ki_on_clock = true;
		t->kt_clock_n++;
	}
	pthread_mutex_unlock(&t->kt_clock_lock);
}

void kv_tier_forget(struct kv_tier *t, struct kv_inode *ino)
{
	/* A queued inode holds a reference, so a dying one is never queued. */
	pthread_mutex_lock(&t->kt_clock_lock);
	clock_remove(t, ino);
	pthread_mutex_unlock(&t->kt_clock_lock);
	kv_ra_drop(t->kt_ra, ino);
}

void kv_tier_ra_drop(struct kv_tier *t, struct kv_inode *ino)
{
	kv_ra_drop(t->kt_ra, ino);
}

/* True when ino's DRAM value is sealed and durable (ki_lock held). */
static bool is_clean(const struct kv_inode *ino)
{
	const struct kv_obj *o = ino->ki_obj;

	return o && o->ko_sealed && ino->ki_map.xm_seq && o->ko_seq == ino->ki_map.xm_seq;
}

/*
 * Lets the clean value's extents go from the last one down until `bytes`
 * are freed (ki_lock held exclusive, the inode's the only reference): the
 * value stays, partly in DRAM. Returns the bytes freed.
 */
static uint64_t evict_part(struct kv_inode *ino, uint64_t bytes)
{
	struct kv_obj *o = ino->ki_obj;
	uint64_t freed = 0;

	while (o->ko_nx && freed < bytes) {
		uint64_t cap = o->ko_cap;

		kv_obj_drop_extent(o, o->ko_nx - 1);
		freed += cap - o->ko_cap;
	}
	o->ko_partial = true;
	return freed;
}

/*
 * Evicts clean values until `bytes` are freed or the clock has gone round
 * twice: a value much larger than what is still wanted only in part (its
 * last extents), so a large value leaves DRAM an extent at a time.
 */
static uint64_t evict(struct kv_tier *t, uint64_t bytes, const struct kv_inode *spare)
{
	uint64_t freed = 0, scanned = 0;

	pthread_mutex_lock(&t->kt_clock_lock);
	while (t->kt_hand && freed < bytes && scanned <= 2 * t->kt_clock_n) {
		struct kv_inode *ino = t->kt_hand;

		t->kt_hand = ino->ki_cnext;
		scanned++;
		if (ino == spare ||
		    atomic_exchange_explicit(&ino->ki_referenced, false, memory_order_relaxed))
			continue;
		if (pthread_rwlock_trywrlock(&ino->ki_lock))
			continue;
		if (!is_clean(ino)) {
			clock_remove(t, ino);
		} else if (atomic_load(&ino->ki_obj->ko_ref) == 1) {
			uint64_t want = bytes - freed; /* > 0: the loop's condition */

			if (ino->ki_obj->ko_cap > 2 * want + KV_EXTENT &&
			    !kv_xmap_whole(&ino->ki_map)) {
				freed += evict_part(ino, want);
			} else {
				freed += ino->ki_obj->ko_cap;
				kv_obj_put(ino->ki_obj);
				ino->ki_obj = NULL;
				clock_remove(t, ino);
			}
			atomic_fetch_add(&t->kt_evictions, 1);
		}
		pthread_rwlock_unlock(&ino->ki_lock);
	}
	pthread_mutex_unlock(&t->kt_clock_lock);
	return freed;
}

/*
 * When there are clean values (busy: being read, or their inode locked)
 * and the deadline has not passed, sleeps a millisecond and returns true:
 * try evicting again.
 */
static bool clock_busy(struct kv_tier *t, const struct timespec *until)
{
	struct timespec now, ms = {.tv_nsec = 1000 * 1000};
	uint64_t n;

	pthread_mutex_lock(&t->kt_clock_lock);
	n = t->kt_clock_n;
	pthread_mutex_unlock(&t->kt_clock_lock);
	clock_gettime(CLOCK_MONOTONIC, &now);
	if (!n || now.tv_sec > until->tv_sec ||
	    (now.tv_sec == until->tv_sec && now.tv_nsec >= until->tv_nsec))
		return false;
	nanosleep(&ms, NULL);
	return true;
}

int kv_tier_make_room(struct kv_tier *t, uint64_t bytes)
{
	const struct kv_config *cfg = t->kt_st->ks_cfg;
	struct timespec until;
	int rc = 0;

	deadline_in(&until, cfg->kc_backpressure_ns);
	for (;;) {
		uint64_t gen, round, freed;
		bool spilled, barren, stop;

		if (evict(t, bytes ? bytes : KV_PAGE_SIZE, NULL))
			return 0;
		/* Freed meanwhile (a read or an older version let go): room for the change. */
		if (kv_pool_size(t->kt_st->ks_pool) - kv_pool_used(t->kt_st->ks_pool) >=
		    bytes + 2 * KV_EXTENT)
			return 0;
		pthread_mutex_lock(&t->kt_lock);
		if (!t->kt_qhead && !t->kt_busy && !t->kt_nspill) {
			pthread_mutex_unlock(&t->kt_lock);
			/* Clean values being read cannot go this instant, but will. */
			if (!clock_busy(t, &until))
				return -ENOSPC; /* nothing on its way to clean or spilled */
			continue;
		}
		t->kt_waiters++;
		pthread_cond_signal(&t->kt_wake);
		/* Until a batch ends, something is spilled, or a round begun from now on ends. */
		gen = t->kt_batches;
		round = t->kt_spill_started + 1;
		freed = t->kt_spill_freed;
		while (t->kt_batches == gen && t->kt_spill_freed == freed &&
		       t->kt_spill_rounds < round && !t->kt_stop && rc == 0)
			rc = pthread_cond_timedwait(&t->kt_done, &t->kt_lock, &until);
		t->kt_waiters--;
		spilled = t->kt_spill_freed != freed;
		barren = t->kt_batches == gen && t->kt_spill_rounds >= round && !spilled &&
			 !t->kt_qhead && !t->kt_busy;
		stop = t->kt_stop;
		pthread_mutex_unlock(&t->kt_lock);
		if (rc || stop)
			return -ENOSPC; /* the back-pressure bound */
		if (spilled)
			return 0;
		if (barren && !clock_busy(t, &until))
			return -ENOSPC; /* nothing could be spilled, nothing is clean */
	}
}

int kv_tier_quota_room(struct kv_tier *t)
{
	struct timespec until;
	uint64_t gen;
	int rc = 0;

	pthread_mutex_lock(&t->kt_lock);
	if (!t->kt_qhead && !t->kt_busy) {
		pthread_mutex_unlock(&t->kt_lock);
		return t->kt_st->ks_gc && kv_gc_make_room(t->kt_st->ks_gc) == 0 ? 0 : -ENOSPC;
	}
	deadline_in(&until, t->kt_st->ks_cfg->kc_backpressure_ns);
	t->kt_waiters++;
	pthread_cond_signal(&t->kt_wake);
	gen = t->kt_batches;
	while (t->kt_batches == gen && !t->kt_stop && rc == 0)
		rc = pthread_cond_timedwait(&t->kt_done, &t->kt_lock, &until);
	t->kt_waiters--;
	rc = t->kt_batches != gen ? 0 : -ENOSPC;
	pthread_mutex_unlock(&t->kt_lock);
	return rc;
}

void kv_tier_spillable(struct kv_tier *t, struct kv_inode *ino)
{
	if (atomic_load_explicit(&ino->ki_spillable, memory_order_relaxed))
		return;
	pthread_mutex_lock(&t->kt_lock);
	ino->ki_sdrop = false;
	if (!atomic_load_explicit(&ino->ki_spillable, memory_order_relaxed)) {
		atomic_store_explicit(&ino->ki_spillable, true, memory_order_relaxed);
		kv_inode_get(ino);
		ino->ki_snext = t->kt_shead;
		t->kt_shead = ino;
		t->kt_nspill++;
	}
	pthread_mutex_unlock(&t->kt_lock);
}

void kv_tier_unspillable(struct kv_tier *t, struct kv_inode *ino)
{
	bool found = false;

	if (!atomic_load_explicit(&ino->ki_spillable, memory_order_relaxed))
		return;
	pthread_mutex_lock(&t->kt_lock);
	for (struct kv_inode **pp = &t->kt_shead; *pp; pp = &(*pp)->ki_snext)
		if (*pp == ino) {
			*pp = ino->ki_snext;
			atomic_store_explicit(&ino->ki_spillable, false, memory_order_relaxed);
			t->kt_nspill--;
			found = true;
			break;
		}
	/* Not found: a spill round has the list; it takes the file off when done. */
	ino->ki_sdrop = !found;
	pthread_mutex_unlock(&t->kt_lock);
	if (found)
		kv_inode_put(ino); /* never the last: the caller holds one */
}

/* --- the offloader --- */

void kv_tier_enqueue(struct kv_tier *t, struct kv_inode *ino)
{
	pthread_mutex_lock(&t->kt_lock);
	if (!ino->ki_queued) {
		ino->ki_queued = true;
		ino->ki_qnext = NULL;
		if (t->kt_qtail)
			t->kt_qtail->ki_qnext = ino;
		else
			t->kt_qhead = ino;
		t->kt_qtail = ino;
		kv_inode_get(ino);
		t->kt_enqueued++;
		ino->ki_qbytes = ino->ki_obj->ko_size;
		t->kt_qkeys++;
		t->kt_qbytes += ino->ki_qbytes;
		if (!t->kt_qhead->ki_qnext)
			pthread_cond_signal(&t->kt_wake);
	}
	pthread_mutex_unlock(&t->kt_lock);
}

/* One value of a batch: the records of one version (core/xmap.h). */
struct item {
	struct kv_inode *it_ino;
	struct kv_obj *it_obj;	       /* the version written, or NULL: nothing to do */
	int it_err;		       /* 0: it_puts are worth writing; else why not */
	struct kv_bucket_put *it_puts; /* its extents' records, then its manifest */
	uint32_t it_nput;
	struct iovec *it_iov; /* every record's pieces */
	char *it_key;
	void *it_manifest; /* the manifest record's value (page aligned), or NULL */
	struct kv_loc *it_keep; /* records the version has already, not written (by index): */
	uint32_t it_nkeep;	/* spilled or borrowed (ki_spill), or shared (ki_map) */
	bool it_spilled;	/* part of the version is spilled or borrowed: holes in memory */
	uint64_t it_bytes;	/* what it counted in the backlog */
	uint32_t it_at;		/* run_batch: where its puts lie in the batch's array */
	bool it_done;		/* run_batch: finished (batch_finish) */
};

static void item_free(struct item *it)
{
	if (it->it_obj)
		kv_obj_put(it->it_obj);
	for (uint32_t i = 0; it->it_puts && i < it->it_nput; i++)
		free(it->it_puts[i].bp_csums);
	free(it->it_puts);
	free(it->it_iov);
	free(it->it_key);
	free(it->it_manifest);
	free(it->it_keep);
}

/* Rounds the last of n pieces up to whole pages: sealing trimmed each extent that far. */
static void round_pages(struct iovec *iov, int n)
{
	if (n > 0)
		iov[n - 1].iov_len =
		    (iov[n - 1].iov_len + KV_PAGE_SIZE - 1) / KV_PAGE_SIZE * KV_PAGE_SIZE;
}

/*
 * The manifest of a version whose data extents are the n puts (ssd/format.h),
 * in a page-aligned buffer *out of *len bytes (rounded up to a page in the
 * buffer, zeroed).
 */
static int manifest_build(const struct kv_obj *obj, const struct kv_bucket_put *puts, uint32_t n,
			  void **out, uint64_t *len)
{
	struct kv_manifest mf = {.mf_size = obj->ko_size, .mf_seq = obj->ko_seq, .mf_count = n};
	uint64_t bytes = sizeof(mf) + (uint64_t)n * sizeof(struct kv_manifest_ent);
	uint64_t cap = (bytes + KV_PAGE_SIZE - 1) / KV_PAGE_SIZE * KV_PAGE_SIZE;
	char *buf = aligned_alloc(KV_PAGE_SIZE, cap);

	if (!buf)
		return -ENOMEM;
	memset(buf, 0, cap);
	memcpy(buf, &mf, sizeof(mf));
	for (uint32_t i = 0; i < n; i++) {
		struct kv_manifest_ent me = {
		    .me_seq = puts[i].bp_seq,
		    .me_index = puts[i].bp_index,
		    .me_len = (uint32_t)puts[i].bp_len,
		};

		memcpy(buf + sizeof(mf) + i * sizeof(me), &me, sizeof(me));
	}
	*out = buf;
	*len = bytes;
	return 0;
}

/* The manifest of the data puts[0..n) and the kept records keep[0..ns), both by index. */
static int manifest_of(const struct kv_obj *obj, const struct kv_bucket_put *puts, uint32_t n,
		       const struct kv_loc *keep, uint32_t ns, void **out, uint64_t *len)
{
	struct kv_bucket_put *all;
	uint32_t i = 0, j = 0, k = 0;
	int err;

	if (!ns)
		return manifest_build(obj, puts, n, out, len);
	all = malloc((n + ns) * sizeof(*all));
	if (!all)
		return -ENOMEM;
	while (i < n || j < ns) {
		if (j == ns || (i < n && puts[i].bp_index < keep[j].kl_index))
			all[k++] = puts[i++];
		else
			all[k++] = (struct kv_bucket_put){.bp_seq = keep[j].kl_seq,
							  .bp_index = keep[j].kl_index,
							  .bp_len = keep[j++].kl_len};
	}
	err = manifest_build(obj, all, k, out, len);
	free(all);
	return err;
}

/*
 * The records a version of more than one extent has without writing them
 * (ki_lock held), by index, into it_keep: its spilled and borrowed extents
 * (ki_spill: holes in its memory), and each extent whose block is still
 * tagged with the birth sequence number of the durable version's record
 * of that extent, of the same length ("Shared records"). Returns 0 or
 * -ENOMEM.
 */
static int item_keep(struct item *it, const struct kv_inode *ino, const struct kv_obj *obj)
{
	const struct kv_xmap *sp = ino->ki_spill, *m = &ino->ki_map;
	uint32_t ns = kv_spill_n(ino), j = 0, n = 0;
	uint64_t nx = (obj->ko_size + KV_EXTENT - 1) >> KV_EXTENT_SHIFT;
	bool share = m->xm_seq && !kv_xmap_whole(m);
	struct kv_loc *keep;

	it->it_spilled = ns > 0;
	if (!ns && !share)
		return 0;
	keep = malloc(((uint64_t)ns + obj->ko_nx + 1) * sizeof(*keep));
	if (!keep)
		return -ENOMEM;
	for (uint64_t k = 0; k < nx; k++) {
		uint64_t base = k << KV_EXTENT_SHIFT, rec;
		int64_t at;

		while (j < ns && kv_xmap_cat(sp, j)->xe_loc.kl_index <= k)
			keep[n++] = kv_xmap_cat(sp, j++)->xe_loc;
		if (!share || !(rec = kv_obj_extent_rec(obj, k)))
			continue;
		at = kv_xmap_find(m, (uint32_t)k);
		if (at >= 0 && kv_xmap_cat(m, (uint32_t)at)->xe_loc.kl_seq == rec &&
		    kv_xmap_cat(m, (uint32_t)at)->xe_loc.kl_len ==
			(obj->ko_size - base < KV_EXTENT ? obj->ko_size - base : KV_EXTENT))
			keep[n++] = kv_xmap_cat(m, (uint32_t)at)->xe_loc;
	}
	while (j < ns)
		keep[n++] = kv_xmap_cat(sp, j++)->xe_loc;
	it->it_keep = keep;
	it->it_nkeep = n;
	return 0;
}

/* Whose promise a put takes: its extent's block, or the object's (a record of no extent's bytes). */
static uint64_t owed_of(const struct kv_bucket_put *p)
{
	return p->bp_flags == KV_REC_MANIFEST || !p->bp_len ? KV_OBJ_OWED_OWN : p->bp_index;
}

/*
 * Puts take the quota promised to what they write, so their records
 * cannot be refused for room that others took (bp_fill): what the extent's
 * block or the version owes (core/obj.h, "SSD quota owed": every change
 * promises it before it is acknowledged), and a reserved extent's
 * reservation (ki_resv; obj the current version, ki_lock held exclusive),
 * which leaves ino's set. What a put does not place goes back to obj
 * (fills_return), which gives it back to the bucket set when it is freed.
 */
static void fills_take(struct kv_inode *ino, struct kv_obj *obj, struct kv_bucket_put *puts,
		       uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		puts[i].bp_fill = kv_obj_owed_take(obj, owed_of(&puts[i]));
		if (puts[i].bp_flags == KV_REC_MANIFEST || !puts[i].bp_len) /* no bytes of it */
			continue;
		if (ino->ki_obj == obj && kv_resv_has(ino->ki_resv, puts[i].bp_index) &&
		    kv_resv_cut(&ino->ki_resv, puts[i].bp_index, puts[i].bp_index + 1) == 1)
			puts[i].bp_fill += KV_RESV_BYTES;
	}
}

/* Gives the quota puts[0..n) took and did not place back to obj's blocks. */
static void fills_return(struct kv_obj *obj, struct kv_bucket_put *puts, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		if (puts[i].bp_fill)
			kv_obj_owed_give(obj, owed_of(&puts[i]), puts[i].bp_fill);
		puts[i].bp_fill = 0;
	}
}

/*
 * Takes a reference to the version to write, with its current path, and
 * describes its records: one WHOLE record for a value of at most one
 * extent (a hole in it written as zeros), else one EXTENT record per
 * extent with data that it does not keep (item_keep) and the MANIFEST.
 */
static void item_prepare(struct kv_store *st, struct item *it)
{
	struct kv_inode *ino = it->it_ino;
	char path[KV_JPATH_MAX];
	struct kv_obj *obj;
	uint64_t bytes, mlen = 0, nx;
	uint32_t npieces, k, nput = 0, j = 0;
	bool whole = false;
	int len = -1, used = 0;

	it->it_err = -ECANCELED; /* until proven worth writing */
	pthread_rwlock_rdlock(&st->ks_ns_lock);
	pthread_rwlock_rdlock(&ino->ki_lock);
	obj = ino->ki_obj;
	if (obj && obj->ko_sealed && obj->ko_seq > ino->ki_map.xm_seq && ino->ki_parent)
		len = kv_inode_path(ino, path, sizeof(path));
	if (len > 0 || len == -ENAMETOOLONG) {
		kv_obj_get(obj);
		it->it_obj = obj;
		whole = obj->ko_size <= KV_EXTENT;
	}
	/* What it has on the SSD already: in the manifest, not written again. */
	if (len > 0 && !whole && item_keep(it, ino, obj))
		len = -ENOMEM;
	pthread_rwlock_unlock(&ino->ki_lock);
	pthread_rwlock_unlock(&st->ks_ns_lock);
	if (len == -ENAMETOOLONG || len == -ENOMEM)
		it->it_err = len; /* a key too long for a record: its fsync fails */
	if (len <= 0)
		return;
	nx = whole ? 1 : (obj->ko_size + KV_EXTENT - 1) >> KV_EXTENT_SHIFT;
	npieces = kv_obj_niov(obj) + 2;
	it->it_key = strndup(path, (size_t)len);
	it->it_iov = calloc(npieces, sizeof(*it->it_iov));
	it->it_puts = calloc(whole ? 1 : obj->ko_nx + 1, sizeof(*it->it_puts));
	it->it_err = it->it_key && it->it_iov && it->it_puts ? 0 : -ENOMEM;
	if (it->it_err)
		return;
	for (k = 0; k < nx; k++) {
		uint64_t off = (uint64_t)k << KV_EXTENT_SHIFT;
		uint64_t elen = obj->ko_size - off < KV_EXTENT ? obj->ko_size - off : KV_EXTENT;
		struct iovec *iov = it->it_iov + used;
		int n;

		while (j < it->it_nkeep && it->it_keep[j].kl_index < k)
			j++;
		if (!whole && (!kv_obj_has_data(obj, k) ||
			       (j < it->it_nkeep && it->it_keep[j].kl_index == k)))
			continue; /* a hole (no record), or a record it keeps */
		n = kv_obj_iov(obj, off, elen, iov, (int)npieces - used, &bytes);
		round_pages(iov, n);
		used += n;
		it->it_puts[nput++] = (struct kv_bucket_put){
		    .bp_key = it->it_key,
		    .bp_key_len = (uint32_t)len,
		    .bp_seq = obj->ko_seq,
		    .bp_index = k,
		    .bp_flags = whole ? KV_REC_WHOLE : KV_REC_EXTENT,
		    .bp_len = elen,
		    .bp_iov = iov,
		    .bp_iovcnt = n,
		    .bp_csums = kv_csums_new(elen), /* the map keeps them: no read of the head */
		};
	}
	if (!whole) {
		it->it_err = manifest_of(obj, it->it_puts, nput, it->it_keep, it->it_nkeep,
					 &it->it_manifest, &mlen);
		if (it->it_err)
			return;
		it->it_iov[used] = (struct iovec){
		    .iov_base = it->it_manifest,
		    .iov_len = (mlen + KV_PAGE_SIZE - 1) / KV_PAGE_SIZE * KV_PAGE_SIZE};
		it->it_puts[nput++] = (struct kv_bucket_put){
		    .bp_key = it->it_key,
		    .bp_key_len = (uint32_t)len,
		    .bp_seq = obj->ko_seq,
		    .bp_index = KV_MANIFEST_INDEX,
		    .bp_flags = KV_REC_MANIFEST,
		    .bp_len = mlen,
		    .bp_iov = &it->it_iov[used],
		    .bp_iovcnt = 1,
		};
	}
	it->it_nput = nput;
	pthread_rwlock_wrlock(&ino->ki_lock);
	fills_take(ino, obj, it->it_puts, nput); /* a newer version's reservations are its own */
	pthread_rwlock_unlock(&ino->ki_lock);
}

/* Counts the records an item placed as dead: no key will hold them. */
static void item_dead(struct kv_tier *t, const struct item *it)
{
	for (uint32_t i = 0; i < it->it_nput; i++)
		if (it->it_puts[i].bp_loc.kl_bucket)
			kv_bucket_dead(t->kt_bs, &it->it_puts[i].bp_loc);
}

/*
 * Where kept record l is now (compaction may have moved it): in ki_spill,
 * else in the durable map, by extent index and birth sequence number; NULL
 * when neither holds it. ki_lock held.
 */
static struct kv_xent *kept_where(struct kv_inode *ino, const struct kv_loc *l)
{
	struct kv_xmap *maps[2] = {ino->ki_spill, &ino->ki_map};

	for (int i = 0; i < 2; i++) {
		int64_t at = maps[i] ? kv_xmap_find(maps[i], l->kl_index) : -1;

		if (at >= 0 && kv_xmap_at(maps[i], (uint32_t)at)->xe_loc.kl_seq == l->kl_seq)
			return kv_xmap_at(maps[i], (uint32_t)at);
	}
	return NULL;
}

/*
 * The map of a written version: its kept records (item_keep, where they
 * are now) and its data puts, by index, then its manifest (the last put).
 * The kept records' checksums move to it. ki_lock held exclusive.
 */
static int item_map(const struct item *it, struct kv_inode *ino, struct kv_xmap *map)
{
	uint32_t nd = it->it_nput - (it->it_manifest ? 1 : 0), ns = it->it_nkeep;
	uint32_t i = 0, j = 0, k = 0;
	struct kv_xent **kept = NULL;
	struct kv_loc *locs;
	int err = 0;

	locs = malloc((it->it_nput + ns) * sizeof(*locs));
	if (ns)
		kept = malloc(ns * sizeof(*kept));
	if (!locs || (ns && !kept))
		err = -ENOMEM;
	for (j = 0; !err && j < ns; j++) {
		kept[j] = kept_where(ino, &it->it_keep[j]);
		if (!kept[j])
			err = -EIO; /* cannot happen: kept records stay while written */
	}
	for (j = 0; !err && (i < nd || j < ns);) {
		if (j == ns || (i < nd && it->it_puts[i].bp_index < it->it_keep[j].kl_index))
			locs[k++] = it->it_puts[i++].bp_loc;
		else
			locs[k++] = kept[j++]->xe_loc;
	}
	if (!err && it->it_manifest)
		locs[k++] = it->it_puts[nd].bp_loc;
	if (!err)
		err = kv_xmap_set(map, it->it_obj->ko_seq, it->it_obj->ko_size, locs, k);
	for (i = 0; !err && i < nd; i++) {
		int64_t at = kv_xmap_find(map, it->it_puts[i].bp_index);

		if (at >= 0) {
			kv_xmap_at(map, (uint32_t)at)->xe_csums = it->it_puts[i].bp_csums;
			it->it_puts[i].bp_csums = NULL;
		}
	}
	for (j = 0; !err && j < ns; j++) {
		int64_t at = kv_xmap_find(map, kept[j]->xe_loc.kl_index);

		if (at >= 0) {
			kv_xmap_at(map, (uint32_t)at)->xe_csums = kept[j]->xe_csums;
			kept[j]->xe_csums = NULL;
		}
	}
	free(kept);
	free(locs);
	return err;
}

/* Records where a written version lives, or why it could not be written. */
static void item_finish(struct kv_tier *t, struct item *it)
{
	struct kv_store *st = t->kt_st;
	struct kv_inode *ino = it->it_ino;
	struct kv_xmap map = {0};
	int err = it->it_err;

	if (!it->it_obj)
		return;
	fills_return(it->it_obj, it->it_puts, it->it_nput);
	for (uint32_t i = 0; !err && i < it->it_nput; i++)
		err = it->it_puts[i].bp_err;
	if (!err) /* written: what it promised and no record took is free again */
		kv_pool_owed_release(st->ks_pool, kv_obj_owed_take(it->it_obj, KV_OBJ_OWED_OWN));
	pthread_rwlock_rdlock(&st->ks_ns_lock);
	pthread_rwlock_wrlock(&ino->ki_lock);
	if (!err && ino->ki_parent && it->it_obj->ko_seq > ino->ki_map.xm_seq)
		err = item_map(it, ino, &map);
	if (err) {
		if (ino->ki_obj == it->it_obj)
			ino->ki_offload_err = err;
		atomic_fetch_add(&t->kt_offload_errors, 1);
		item_dead(t, it);
	} else if (!ino->ki_parent || it->it_obj->ko_seq <= ino->ki_map.xm_seq) {
		item_dead(t, it); /* deleted or superseded meanwhile */
	} else {
		struct kv_xmap old = ino->ki_map;

		ino->ki_map = map;
		map = old;
		kv_persist_put(st, ino);
		/* The old version's records die, but for those the new one shares. */
		for (uint32_t i = 0; i < old.xm_n; i++) {
			const struct kv_loc *l = &kv_xmap_at(&old, i)->xe_loc;

			if (!kv_xmap_holds(&ino->ki_map, l))
				kv_bucket_dead(t->kt_bs, l);
		}
		/* The extents written: a later version still holding one shares its record. */
		for (uint32_t i = 0; i < it->it_nput; i++)
			if (it->it_puts[i].bp_flags == KV_REC_EXTENT)
				kv_obj_tag_extent(it->it_obj, it->it_puts[i].bp_index,
						  it->it_puts[i].bp_seq);
		for (uint32_t j = 0; j < it->it_nkeep; j++)
			if (it->it_keep[j].kl_seq != it->it_obj->ko_seq)
				atomic_fetch_add(&t->kt_shared, it->it_keep[j].kl_len);
		if (it->it_spilled) /* its records are the map's now */
			kv_spill_free(ino);
		if (ino->ki_obj == it->it_obj && it->it_spilled && !it->it_obj->ko_nx) {
			kv_obj_put(ino->ki_obj); /* nothing of it in DRAM */
			ino->ki_obj = NULL;
		} else if (ino->ki_obj == it->it_obj) {
			/* Spilled or borrowed extents: in DRAM in part ("Residency"). */
			it->it_obj->ko_partial = it->it_spilled;
			kv_tier_clean(t, ino);
		}
	}
	pthread_rwlock_unlock(&ino->ki_lock);
	pthread_rwlock_unlock(&st->ks_ns_lock);
	kv_xmap_clear(&map); /* the old map, or nothing (item_map fails whole) */
}

/*
 * Appends puts[0..n), retrying those the quota refused while compaction
 * makes room. Before each request for room, land(arg, puts) (unless NULL)
 * may record what went in: puts refused have bp_err -ENOSPC there.
 */
static void append_with_room(struct kv_tier *t, struct kv_bucket_put *puts, unsigned n,
			     void (*land)(void *arg, const struct kv_bucket_put *puts), void *arg)
{
	struct kv_gc *gc = t->kt_st->ks_gc;
	struct kv_bucket_put *again = malloc(n * sizeof(*again));
	unsigned *map = malloc(n * sizeof(*map));
	struct timespec until, now;
	bool last = false;

	kv_bucket_append(t->kt_bs, puts, n);
	deadline_in(&until, t->kt_st->ks_cfg->kc_backpressure_ns);
	while (again && map) {
		unsigned k = 0;

		for (unsigned i = 0; i < n; i++)
			if (puts[i].bp_err == -ENOSPC) {
				if (puts[i].bp_loc.kl_bucket) { /* placed, then the write failed */
					kv_bucket_dead(t->kt_bs, &puts[i].bp_loc);
					kv_bucket_settle(t->kt_bs, &puts[i].bp_loc);
				}
				again[k] = puts[i];
				again[k].bp_loc = (struct kv_loc){0};
				again[k].bp_err = 0;
				map[k++] = i;
			}
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (!k || last)
			break;
		if (land)
			land(arg, puts);
		/*
		 * When compaction gives nothing back, the puts promised their room
		 * are placed past the quota (bp_over): it was counted on the
		 * versions they replace, which die once they land.
		 */
		last = !gc || now.tv_sec > until.tv_sec || kv_gc_make_room(gc);
		for (unsigned i = 0; last && i < k; i++)
			again[i].bp_over = true;
		kv_bucket_append(t->kt_bs, again, k);
		for (unsigned i = 0; i < k; i++) {
			again[i].bp_over = false;
			puts[map[i]] = again[i];
		}
	}
	free(again);
	free(map);
}

/* Extents one spill writes at most (each a record, written together). */
#define SPILL_EXTENTS 64
/* How often an idle offloader looks at the pool while files being written could spill. */
#define SPILL_LOOK_NS (5 * 1000 * 1000ull)

/*
 * Spill. Files being written give their complete extents (every one but
 * the last) to the SSD in the background, so a file can outgrow the pool:
 * a write that leaves a file longer than one extent puts it on the spill
 * list (kv_tier_spillable), and when the pool is short of free room (under
 * a quarter free, or a writer waits for room) and evicting clean values
 * does not give it back, the offloader runs a spill round (spill_round)
 * over the list, spilling files until the room is back. A file leaves the
 * list at its last close (kv_tier_unspillable), or at the first round
 * after it is sealed. For one file (spill): under
 * ki_lock the chosen extents' blocks get an extra reference
 * (so a write meanwhile copies them instead of changing them); they are
 * written with no lock held, as EXTENT records of the version (which takes
 * its sequence number at its first spill, ki_spill.xm_seq); then, under
 * ki_lock again, each extent still holding the block written becomes a
 * hole in memory and its record goes into ki_spill. A crash before the
 * seal leaves the records unnamed: dead space, never a visible half-file.
 * Reads of the version take their bytes from the records
 * (kv_tier_read_mixed); a change to a spilled extent reads it back
 * first (core/write.c, kv_write_unspill). The seal writes the rest and the
 * manifest, and the version becomes a value on the SSD (item_finish).
 */
static uint64_t spill(struct kv_tier *t, struct kv_inode *ino, uint64_t want)
{
	struct kv_store *st = t->kt_st;
	struct kv_bucket_put puts[SPILL_EXTENTS];
	struct kv_xblk *blk[SPILL_EXTENTS];
	uint64_t *csums[SPILL_EXTENTS], *kcsums[SPILL_EXTENTS];
	struct kv_loc locs[SPILL_EXTENTS];
	bool kept[SPILL_EXTENTS];
	struct iovec *iov = NULL;
	char path[KV_JPATH_MAX];
	struct kv_obj *obj;
	uint32_t n = 0, used = 0, nkept = 0;
	uint64_t seq = 0, last, freed = 0;
	int len = -1;

	pthread_rwlock_rdlock(&st->ks_ns_lock);
	pthread_rwlock_wrlock(&ino->ki_lock);
	obj = ino->ki_obj;
	/* A file deleted while open spills too: its records have no key, and are dead at once. */
	if (obj && !obj->ko_sealed && obj->ko_size > KV_EXTENT)
		len = ino->ki_parent ? kv_inode_path(ino, path, sizeof(path)) : 0;
	pthread_rwlock_unlock(&st->ks_ns_lock);
	if (len >= 0) /* the writer may close, seal and replace it while it is written */
		kv_obj_get(obj);
	if (len >= 0)
		iov = malloc(SPILL_EXTENTS * (KV_EXTENT / KV_PAGE_SIZE) * sizeof(*iov));
	if (len < 0 || !iov)
		goto out_unlock;
	last = (obj->ko_size - 1) >> KV_EXTENT_SHIFT;
	if (!ino->ki_spill) {
		ino->ki_spill = calloc(1, sizeof(*ino->ki_spill));
		if (!ino->ki_spill)
			goto out_unlock;
	}
	if (!ino->ki_spill->xm_seq) { /* the version's sequence number, at its first spill */
		ino->ki_spill->xm_seq = atomic_fetch_add(&st->ks_seq, 1) + 1;
		ino->ki_spill->xm_size = UINT64_MAX; /* a spill is no whole value */
	}
	seq = ino->ki_spill->xm_seq;
	for (uint64_t k = 0; k < last && n < SPILL_EXTENTS && (uint64_t)n * KV_EXTENT < want; k++) {
		uint64_t bytes;
		int c;

		if (!kv_obj_has_data(obj, k))
			continue;
		blk[n] = kv_obj_hold_extent(obj, k);
		c = kv_obj_iov(obj, k << KV_EXTENT_SHIFT, KV_EXTENT, iov + used,
			       (int)(SPILL_EXTENTS * (KV_EXTENT / KV_PAGE_SIZE) - used), &bytes);
		puts[n] = (struct kv_bucket_put){
		    .bp_key = path,
		    .bp_key_len = (uint32_t)len,
		    .bp_seq = seq,
		    .bp_index = (uint32_t)k,
		    .bp_flags = KV_REC_EXTENT,
		    .bp_len = KV_EXTENT,
		    .bp_iov = iov + used,
		    .bp_iovcnt = c,
		    .bp_csums = kv_csums_new(KV_EXTENT),
		};
		used += (uint32_t)c;
		n++;
	}
	fills_take(ino, obj, puts, n);
	pthread_rwlock_unlock(&ino->ki_lock);
	if (!n)
		goto out;
	append_with_room(t, puts, n, NULL, NULL);
	fills_return(obj, puts, n);
	for (uint32_t i = 0; i < n; i++) {
		csums[i] = puts[i].bp_csums;
		if (!csums[i] && !puts[i].bp_err)
			puts[i].bp_err = -ENOMEM;
	}
	pthread_rwlock_wrlock(&ino->ki_lock);
	/* Kept: written, and the extent unchanged meanwhile (it still holds the block written). */
	for (uint32_t i = 0; i < n; i++) {
		kept[i] = !puts[i].bp_err && ino->ki_obj == obj && !obj->ko_sealed &&
			  (ino->ki_parent || ino->ki_pinned) && ino->ki_spill &&
			  ino->ki_spill->xm_seq == seq &&
			  kv_obj_extent_is(obj, puts[i].bp_loc.kl_index, blk[i]);
		if (kept[i]) {
			locs[nkept] = puts[i].bp_loc;
			kcsums[nkept++] = csums[i];
		}
	}
	if (nkept && kv_xmap_add(ino->ki_spill, locs, kcsums, nkept))
		memset(kept, 0, sizeof(kept));
	for (uint32_t i = 0; i < n; i++) {
		const struct kv_loc *loc = &puts[i].bp_loc;

		if (kept[i]) {
			kv_obj_drop_extent(obj, loc->kl_index);
			freed += loc->kl_len;
			atomic_fetch_add(&t->kt_spilled, loc->kl_len);
			if (ino->ki_pinned) { /* deleted while open: as name_gone does */
				kv_bucket_dead(t->kt_bs, loc);
				kv_bucket_pin(t->kt_bs, loc->kl_bucket, true);
			}
		} else {
			free(csums[i]);
			if (loc->kl_bucket)
				kv_bucket_dead(t->kt_bs, loc);
		}
		if (loc->kl_bucket)
			kv_bucket_settle(t->kt_bs, loc);
	}
	pthread_rwlock_unlock(&ino->ki_lock);
	for (uint32_t i = 0; i < n; i++)
		kv_obj_release_extent(obj, blk[i]);
	goto out;

out_unlock:
	pthread_rwlock_unlock(&ino->ki_lock);
out:
	if (len >= 0)
		kv_obj_put(obj);
	free(iov);
	return freed;
}

/*
 * One spill round (the offloader, no lock held): spills the files on the
 * spill list until `want` bytes are freed, takes sealed ones off it, and
 * tells waiting writers what it freed. Returns the bytes freed.
 */
static uint64_t spill_round(struct kv_tier *t, uint64_t want)
{
	struct kv_inode *ino, *next, *keep = NULL, *gone = NULL;
	uint64_t freed = 0;

	pthread_mutex_lock(&t->kt_lock);
	ino = t->kt_shead;
	t->kt_shead = NULL;
	t->kt_spill_started++;
	pthread_mutex_unlock(&t->kt_lock);
	for (; ino; ino = next) {
		bool open;

		next = ino->ki_snext;
		pthread_rwlock_rdlock(&ino->ki_lock);
		open = ino->ki_obj && !ino->ki_obj->ko_sealed;
		pthread_rwlock_unlock(&ino->ki_lock);
		if (open && freed < want)
			freed += spill(t, ino, want - freed);
		ino->ki_snext = open ? keep : gone;
		*(open ? &keep : &gone) = ino;
	}
	pthread_mutex_lock(&t->kt_lock);
	for (ino = keep; ino; ino = next) {
		next = ino->ki_snext;
		if (ino->ki_sdrop) { /* closed for good while the round ran */
			ino->ki_snext = gone;
			gone = ino;
			continue;
		}
		ino->ki_snext = t->kt_shead;
		t->kt_shead = ino;
	}
	t->kt_spill_rounds++;
	t->kt_spill_freed += freed;
	pthread_cond_broadcast(&t->kt_done);
	pthread_mutex_unlock(&t->kt_lock);
	/* Sealed: off the list (a later write puts it back, ki_snext and all). */
	for (ino = gone; ino; ino = next) {
		next = ino->ki_snext;
		pthread_mutex_lock(&t->kt_lock);
		atomic_store_explicit(&ino->ki_spillable, false, memory_order_relaxed);
		ino->ki_sdrop = false;
		t->kt_nspill--;
		pthread_mutex_unlock(&t->kt_lock);
		kv_inode_put(ino);
	}
	return freed;
}

/*
 * Reads record bytes [off, off + len) ∩ [0, kl_len) of loc for a reply,
 * into guard's slot `slot`: from a read-ahead buffer of ino's when one
 * holds them, else from the bucket file. As kv_bucket_read otherwise.
 */
static int read_piece(struct kv_tier *t, const struct kv_inode *ino, const struct kv_loc *loc,
		      const uint64_t *csums, uint64_t off, uint64_t len,
		      struct kv_read_guard *guard, int slot, char **data, uint64_t *got)
{
	const char *d;
	struct kv_ra_buf *b = ino ? kv_ra_take(t->kt_ra, ino, loc, csums, off, len, &d) : NULL;

	if (!b)
		return kv_bucket_read(t->kt_bs, loc, csums, off, len, &guard->krg_buf[slot], data,
				      got);
	guard->krg_ra[slot] = b;
	*data = (char *)d; /* only ever read: the reply is sent from it */
	*got = len < loc->kl_len - off ? len : loc->kl_len - off;
	return 0;
}

/*
 * After a read of [off, off + len) of ino's durable version m (ki_lock
 * held shared; obj its extents in DRAM, or NULL): tells the read-ahead
 * where the reader is and, when it reads sequentially, starts reading the
 * records of the window ahead that are only on the SSD, in pieces of at
 * most KV_RA_UNIT starting on chunk boundaries.
 */
static void read_ahead(struct kv_tier *t, const struct kv_inode *ino, const struct kv_obj *obj,
		       const struct kv_xmap *m, uint64_t off, uint64_t len)
{
	struct kv_ra_piece p[KV_RA_MAX_PIECES];
	struct kv_ra_plan plan;
	uint32_t first, end;
	unsigned n = 0;

	if (obj && kv_xmap_whole(m))
		return; /* partly in DRAM is per extent: never one WHOLE record */
	if (!kv_ra_note(t->kt_ra, ino, m->xm_size, off, len, &plan))
		return;
	kv_xmap_range(m, plan.rp_from, plan.rp_to - plan.rp_from, &first, &end);
	for (uint32_t i = first; i < end && n < KV_RA_MAX_PIECES; i++) {
		const struct kv_loc *l = &kv_xmap_cat(m, i)->xe_loc;
		uint64_t base = (uint64_t)l->kl_index << KV_EXTENT_SHIFT, q, e;

		if (obj && kv_obj_has_data(obj, l->kl_index))
			continue; /* in DRAM */
		q = plan.rp_from > base ? plan.rp_from - base : 0;
		q -= q % (1ull << KV_CHUNK_SHIFT);
		e = plan.rp_to - base < l->kl_len ? plan.rp_to - base : l->kl_len;
		while (q < e && n < KV_RA_MAX_PIECES) {
			uint64_t qe = (q / KV_RA_UNIT + 1) * KV_RA_UNIT;

			if (qe > l->kl_len)
				qe = l->kl_len;
			p[n++] = (struct kv_ra_piece){
			    .pp_loc = *l, .pp_off = q, .pp_len = qe - q, .pp_vend = base + qe};
			q = qe;
		}
	}
	if (n)
		kv_ra_start(t->kt_ra, ino, &plan, p, n);
}

int kv_tier_read_mixed(struct kv_tier *t, const struct kv_inode *ino, const struct kv_obj *obj,
		       const struct kv_xmap *map, uint64_t off, uint64_t len, struct iovec *iov,
		       int maxiov, uint64_t *bytes, struct kv_read_guard *guard)
{
	uint64_t end = len < obj->ko_size - off ? off + len : obj->ko_size, pos = off;
	int n = 0, nbuf = 0, err = 0;

	*bytes = 0;
	if (off >= obj->ko_size)
		return 0;
	while (!err && pos < end && n < maxiov) {
		uint64_t k = pos >> KV_EXTENT_SHIFT, base = k << KV_EXTENT_SHIFT, got;
		uint64_t eend = base + KV_EXTENT < end ? base + KV_EXTENT : end;
		int64_t at = kv_obj_has_data(obj, k) ? -1 : kv_xmap_find(map, (uint32_t)k);
		const struct kv_xent *x;
		uint64_t *csums = NULL;
		uint32_t nchunks;
		char *data;

		if (at < 0) { /* in memory, or a hole */
			int c = kv_obj_iov(obj, pos, eend - pos, iov + n, maxiov - n, &got);

			n += c;
			pos += got;
			if (!got)
				break;
			continue;
		}
		if (nbuf == KV_READ_EXTENTS)
			break;
		x = kv_xmap_cat(map, (uint32_t)at);
		/* Checksums not loaded yet (a shared lock cannot keep them): read for this read. */
		if (!x->xe_csums)
			err = kv_bucket_load_csums(t->kt_bs, &x->xe_loc, &csums, &nchunks);
		if (!err)
			err = read_piece(t, ino, &x->xe_loc, x->xe_csums ? x->xe_csums : csums,
					 pos - base, eend - pos, guard, nbuf++, &data, &got);
		free(csums);
		if (!err && !got)
			err = -EIO;
		if (!err) {
			iov[n].iov_base = data;
			iov[n++].iov_len = got;
			pos += got;
		}
	}
	if (err)
		return err == -ENOENT ? -EIO : err;
	*bytes = pos - off;
	/* Also a read all in DRAM: it moves the stream towards the extents only on the SSD. */
	if (ino)
		read_ahead(t, ino, obj, map, off, *bytes);
	return n;
}

/* Finishes an item of a batch whose puts lie in w: where its records are, or why not. */
static void batch_finish(struct kv_tier *t, struct item *it, const struct kv_bucket_put *w)
{
	if (!it->it_err)
		memcpy(it->it_puts, w + it->it_at, it->it_nput * sizeof(*w));
	item_finish(t, it);
	/* Only now may compaction pick the records' buckets: the key holds them. */
	for (uint32_t j = 0; !it->it_err && j < it->it_nput; j++)
		if (it->it_puts[j].bp_loc.kl_bucket)
			kv_bucket_settle(t->kt_bs, &it->it_puts[j].bp_loc);
	it->it_done = true;
}

struct batch {
	struct kv_tier *b_t;
	struct item *b_items;
	unsigned b_n;
};

/*
 * append_with_room's land for run_batch: finishes the items none of whose
 * records the quota refused, before compaction is asked for room. The
 * versions they replace die as they land, so their records count as
 * dead: at a quota full of live values being overwritten, the new
 * versions that fit make the room for the rest (a clean stop with a
 * pool of overwrites lost every one that did not fit before).
 */
static void batch_land(void *arg, const struct kv_bucket_put *w)
{
	struct batch *b = arg;

	for (unsigned i = 0; i < b->b_n; i++) {
		struct item *it = &b->b_items[i];
		bool refused = false;

		if (it->it_done || it->it_err)
			continue;
		for (uint32_t j = 0; j < it->it_nput; j++)
			refused |= w[it->it_at + j].bp_err == -ENOSPC;
		if (!refused)
			batch_finish(b->b_t, it, w);
	}
}

static void run_batch(struct kv_tier *t, struct item *items, unsigned n)
{
	struct batch b = {.b_t = t, .b_items = items, .b_n = n};
	struct kv_bucket_put *w;
	unsigned i, k = 0, total = 0;

	for (i = 0; i < n; i++) {
		item_prepare(t->kt_st, &items[i]);
		total += items[i].it_err ? 0 : items[i].it_nput;
	}
	/* Every record worth writing in one array, written together. */
	w = malloc((total ? total : 1) * sizeof(*w));
	for (i = 0; i < n; i++) {
		struct item *it = &items[i];

		if (!w && !it->it_err)
			it->it_err = -ENOMEM;
		if (it->it_err)
			continue;
		memcpy(w + k, it->it_puts, it->it_nput * sizeof(*w));
		it->it_at = k;
		k += it->it_nput;
	}
	if (k)
		append_with_room(t, w, k, batch_land, &b);
	for (i = 0; i < n; i++) {
		if (!items[i].it_done)
			batch_finish(t, &items[i], w);
		item_free(&items[i]);
	}
	free(w);
}

/* Takes up to a batch off the queue (kt_lock held). Returns how many. */
static unsigned take_batch(struct kv_tier *t, struct item *items)
{
	uint64_t bytes = 0;
	unsigned n = 0;

	while (t->kt_qhead && n < BATCH_KEYS && bytes < BATCH_BYTES) {
		struct kv_inode *ino = t->kt_qhead;

		t->kt_qhead = ino->ki_qnext;
		if (!t->kt_qhead)
			t->kt_qtail = NULL;
		ino->ki_queued = false;
		ino->ki_qnext = NULL;
		memset(&items[n], 0, sizeof(items[n]));
		items[n].it_ino = ino;
		items[n].it_bytes = ino->ki_qbytes;
		bytes += items[n].it_bytes;
		n++;
	}
	return n;
}

/*
 * Keeps a quarter of the pool free, so writers find room without waiting
 * and writing to DRAM and to the SSD overlap: evicts clean values, then,
 * if that is not enough (or a writer waits for room), runs a spill round.
 * Returns the bytes it freed.
 */
static uint64_t keep_free(struct kv_tier *t)
{
	struct kv_pool *pool = t->kt_st->ks_pool;
	uint64_t size = kv_pool_size(pool), used = kv_pool_used(pool), freed = 0;
	uint64_t want = size - used < size / 4 ? size / 4 - (size - used) : 0;
	bool waiters, spillable;

	if (want)
		freed = evict(t, want, NULL);
	pthread_mutex_lock(&t->kt_lock);
	waiters = t->kt_waiters;
	spillable = t->kt_shead;
	pthread_mutex_unlock(&t->kt_lock);
	if (spillable && (freed < want || waiters))
		freed += spill_round(t, want > freed + KV_EXTENT ? want - freed : KV_EXTENT);
	return freed;
}

static void *offloader(void *arg)
{
	struct kv_tier *t = arg;
	const struct kv_config *cfg = t->kt_st->ks_cfg;
	uint64_t pool_size = kv_pool_size(t->kt_st->ks_pool);
	struct item *items = calloc(BATCH_KEYS, sizeof(*items));

	pthread_mutex_lock(&t->kt_lock);
	while (items && (!t->kt_stop || t->kt_qhead)) {
		struct timespec until;
		uint64_t freed;
		unsigned n;

		if (!t->kt_qhead) {
			/*
			 * Idle: files being written spill when room runs short (keep_free);
			 * while there are any, the pool is looked at every few ms.
			 */
			if (t->kt_shead && !t->kt_stop) {
				pthread_mutex_unlock(&t->kt_lock);
				freed = keep_free(t);
				pthread_mutex_lock(&t->kt_lock);
				if (freed || t->kt_qhead)
					continue;
				deadline_in(&until, SPILL_LOOK_NS);
				if (t->kt_shead && !t->kt_qhead)
					pthread_cond_timedwait(&t->kt_wake, &t->kt_lock, &until);
			} else if (!t->kt_stop) {
				pthread_cond_wait(&t->kt_wake, &t->kt_lock);
			}
			continue;
		}
		/*
		 * Gather for at most the flush delay, never longer; not at all
		 * when someone waits on this batch (a writer for room, fsync)
		 * or when the backlog is already an eighth of the pool.
		 */
		deadline_in(&until, cfg->kc_flush_delay_ns);
		while (!t->kt_stop && !t->kt_waiters && t->kt_qkeys < BATCH_KEYS &&
		       t->kt_qbytes < BATCH_BYTES && t->kt_qbytes < pool_size / 8 &&
		       pthread_cond_timedwait(&t->kt_wake, &t->kt_lock, &until) == 0)
			;
		n = take_batch(t, items);
		t->kt_busy = true;
		pthread_mutex_unlock(&t->kt_lock);
		run_batch(t, items, n);
		for (unsigned i = 0; i < n; i++)
			kv_inode_put(items[i].it_ino);
		pthread_mutex_lock(&t->kt_lock);
		for (unsigned i = 0; i < n; i++) {
			t->kt_qkeys--;
			t->kt_qbytes -= items[i].it_bytes;
		}
		t->kt_busy = false;
		t->kt_finished += n;
		t->kt_batches++;
		pthread_cond_broadcast(&t->kt_done);
		pthread_mutex_unlock(&t->kt_lock);
		keep_free(t);
		pthread_mutex_lock(&t->kt_lock);
		/* A checkpoint bounds what the next start replays. */
		if (kv_journal_size(t->kt_st->ks_journal) > CHECKPOINT_BYTES) {
			pthread_mutex_unlock(&t->kt_lock);
			kv_persist_checkpoint(t->kt_st);
			pthread_mutex_lock(&t->kt_lock);
		}
	}
	pthread_mutex_unlock(&t->kt_lock);
	free(items);
	return NULL;
}

int kv_tier_wait_durable(struct kv_tier *t, struct kv_inode *ino, uint64_t seq)
{
	struct kv_journal *j = t->kt_st->ks_journal;

	if (seq == 0) {
		int err = kv_journal_sync(j, kv_journal_last_lsn(j));

		return err ? err : atomic_load(&t->kt_st->ks_meta_err);
	}
	for (;;) {
		uint64_t gen;
		int err = 0;
		bool done = false;

		pthread_mutex_lock(&t->kt_lock);
		gen = t->kt_batches;
		pthread_mutex_unlock(&t->kt_lock);
		pthread_rwlock_rdlock(&ino->ki_lock);
		if (ino->ki_map.xm_seq >= seq) {
			done = true;
		} else if (ino->ki_offload_err) {
			err = ino->ki_offload_err;
		} else if (atomic_load(&ino->ki_nlink) == 0) {
			done = true; /* deleted: nothing left to make durable */
		} else if (ino->ki_obj && ino->ki_obj->ko_seq != seq) {
			err = -EAGAIN; /* a newer version (open, or sealed) took its place */
		}
		pthread_rwlock_unlock(&ino->ki_lock);
		if (!err)
			err = atomic_load(&t->kt_st->ks_meta_err);
		if (err)
			return err;
		/* All metadata so far, not just this key's: deletes before it too. */
		if (done)
			return kv_journal_sync(j, kv_journal_last_lsn(j));
		pthread_mutex_lock(&t->kt_lock);
		t->kt_waiters++;
		pthread_cond_signal(&t->kt_wake);
		while (t->kt_batches == gen && !t->kt_stop)
			pthread_cond_wait(&t->kt_done, &t->kt_lock);
		t->kt_waiters--;
		err = t->kt_stop ? -EIO : 0;
		pthread_mutex_unlock(&t->kt_lock);
		if (err)
			return err;
	}
}

int kv_tier_drain(struct kv_tier *t)
{
	struct kv_journal *j = t->kt_st->ks_journal;

	uint64_t errors = atomic_load(&t->kt_offload_errors), ticket;
	int err;

	/* Wait for what was queued before the call, not for a queue that never empties. */
	pthread_mutex_lock(&t->kt_lock);
	ticket = t->kt_enqueued;
	t->kt_waiters++;
	while (t->kt_finished < ticket && !t->kt_stop) {
		pthread_cond_signal(&t->kt_wake);
		pthread_cond_wait(&t->kt_done, &t->kt_lock);
	}
	t->kt_waiters--;
	pthread_mutex_unlock(&t->kt_lock);
	err = kv_journal_sync(j, kv_journal_last_lsn(j));
	if (!err)
		err = atomic_load(&t->kt_st->ks_meta_err);
	/* Some value could not be written (the SSD is full, an I/O error). */
	if (!err && atomic_load(&t->kt_offload_errors) != errors)
		err = -EIO;
	return err;
}

/* --- reads of values that are only on SSD --- */

/*
 * The records a read needs, copied under ki_lock shared so the read can
 * check afterwards that they are still the key's (compaction moves a
 * record, same birth sequence number, to another bucket; a new version
 * replaces the map).
 */
struct want {
	uint64_t w_seq, w_size;
	uint32_t w_first, w_end;
	bool w_more; /* entries past w_end hold bytes of the range too */
	struct kv_loc w_loc[KV_READ_EXTENTS];
};

/* True when ino's value is wholly in its durable map: only on the SSD, or partly in DRAM. */
static bool on_ssd(const struct kv_inode *ino)
{
	return !ino->ki_obj || ino->ki_obj->ko_partial;
}

/* True when ino's map still holds w's records, checksums loaded (ki_lock held). */
static bool still(const struct kv_inode *ino, const struct want *w)
{
	const struct kv_xmap *m = &ino->ki_map;

	if (!on_ssd(ino) || m->xm_seq != w->w_seq || w->w_end > kv_xmap_nx(m))
		return false;
	for (uint32_t i = w->w_first; i < w->w_end; i++) {
		const struct kv_xent *x = kv_xmap_cat(m, i);

		if (!x->xe_csums || !kv_loc_eq(&x->xe_loc, &w->w_loc[i - w->w_first]))
			return false;
	}
	return true;
}

/*
 * Finds the records of ino's durable version that hold [off, off + len),
 * at most KV_READ_EXTENTS of them (`all`: every data extent, however many:
 * then w_loc is not filled), and loads their chunk checksums if missing
 * (ki_lock not held). -EAGAIN when the value is in DRAM (read it there) or
 * its records changed meanwhile (look again).
 */
static int want_range(struct kv_tier *t, struct kv_inode *ino, uint64_t off, uint64_t len,
		      bool all, struct want *w)
{
	struct kv_xmap *m = &ino->ki_map;
	struct kv_loc *need = NULL;
	uint32_t nneed = 0;
	int err = 0;

	pthread_rwlock_rdlock(&ino->ki_lock);
	if (!on_ssd(ino) || !m->xm_seq) {
		err = !on_ssd(ino) ? -EAGAIN : -EIO; /* neither: nothing to read, never loop */
		pthread_rwlock_unlock(&ino->ki_lock);
		return err;
	}
	w->w_seq = m->xm_seq;
	w->w_size = m->xm_size;
	w->w_more = false;
	if (all) {
		w->w_first = 0;
		w->w_end = kv_xmap_nx(m);
	} else {
		kv_xmap_range(m, off, len, &w->w_first, &w->w_end);
		w->w_more = w->w_end - w->w_first > KV_READ_EXTENTS;
		if (w->w_more)
			w->w_end = w->w_first + KV_READ_EXTENTS;
		for (uint32_t i = w->w_first; i < w->w_end; i++)
			w->w_loc[i - w->w_first] = kv_xmap_cat(m, i)->xe_loc;
	}
	for (uint32_t i = w->w_first; i < w->w_end; i++)
		nneed += !kv_xmap_cat(m, i)->xe_csums;
	if (nneed)
		need = malloc(nneed * sizeof(*need));
	if (nneed && !need)
		err = -ENOMEM;
	nneed = 0;
	for (uint32_t i = w->w_first; need && i < w->w_end; i++)
		if (!kv_xmap_cat(m, i)->xe_csums)
			need[nneed++] = kv_xmap_cat(m, i)->xe_loc;
	pthread_rwlock_unlock(&ino->ki_lock);
	for (uint32_t j = 0; !err && j < nneed; j++) {
		uint64_t *csums = NULL;
		uint32_t nchunks;
		int rc = kv_bucket_load_csums(t->kt_bs, &need[j], &csums, &nchunks);
		struct kv_xent *x;

		pthread_rwlock_wrlock(&ino->ki_lock);
		x = m->xm_seq == w->w_seq ? kv_xmap_holds(m, &need[j]) : NULL;
		if (!x)
			err = -EAGAIN; /* moved or replaced meanwhile: look again */
		else if (rc)
			err = rc == -ENOENT ? -EIO : rc;
		else if (!x->xe_csums) {
			x->xe_csums = csums;
			csums = NULL;
		}
		pthread_rwlock_unlock(&ino->ki_lock);
		free(csums);
	}
	free(need);
	return err;
}

/*
 * A new sealed object of the same version as `now` (partly in DRAM) with
 * now's extents and those of locs[0..n) that obj has and now lacks; obj is
 * let go. NULL when memory ran out.
 */
static struct kv_obj *merge(struct kv_obj *now, struct kv_obj *obj, const struct kv_loc *locs,
			    uint32_t n)
{
	struct kv_obj *m = NULL;
	int err = kv_obj_clone(now, UINT64_MAX, &m);

	for (uint32_t i = 0; !err && i < n; i++)
		if (!kv_obj_has_data(m, locs[i].kl_index))
			err = kv_obj_adopt_extent(m, obj, locs[i].kl_index);
	kv_obj_put(obj);
	if (err && m)
		kv_obj_put(m);
	if (err)
		return NULL;
	kv_obj_seal(m, now->ko_seq);
	return m;
}

/*
 * True when `bytes` more fit with a quarter of the pool free, after
 * evicting values other than `spare` (may be NULL) if need be.
 */
static bool room_for(struct kv_tier *t, const struct kv_inode *spare, uint64_t bytes)
{
	struct kv_pool *pool = t->kt_st->ks_pool;
	uint64_t size = kv_pool_size(pool), want = bytes + size / 4,
		 free = size - kv_pool_used(pool);

	if (free < want)
		evict(t, want - free, spare);
	return size - kv_pool_used(pool) >= want;
}

/* Extents one promotion of part of a value larger than the pool reads at most. */
#define PROMOTE_EXTENTS 16

/*
 * Residency. A clean value (sealed and durable) may be in DRAM in part:
 * its extents leave one at a time under pressure (evict_part), and come
 * back when read (kv_tier_promote): all of them at the first read when
 * the value fits in three quarters of the pool, else only those read, so a
 * file larger than the pool can be partly cached. A promotion takes
 * memory only while a quarter of the pool stays free, evicting other
 * values for it (and, for a value larger than the pool, its own other
 * extents). Such a version is marked ko_partial: a hole in
 * its memory where the durable map has a record is data on the SSD, read
 * from there (kv_tier_read_mixed); user.kvfs.tier says partly-dram+ssd.
 * A version made from it borrows the records of the extents not in DRAM
 * (core/write.c, borrow), and a spilled version, once durable, stays in
 * DRAM as far as it is. A promotion never changes an object readers may
 * hold, nor holds one while it reads: it reads the missing extents into an
 * object of their own, then, if the value is still the same version, swaps
 * in a new sealed object sharing the blocks in DRAM at that moment and the
 * extents read (merge).
 */
int kv_tier_promote(struct kv_tier *t, struct kv_inode *ino, uint64_t off, uint64_t len)
{
	struct kv_loc *locs = NULL;
	uint64_t **csums = NULL;
	struct kv_xmap need = {0};
	struct kv_obj *cur, *now, *obj = NULL;
	const struct kv_xmap *m = &ino->ki_map;
	uint64_t seq, size;
	uint32_t first = 0, end = 0, n = 0, nchunks;
	bool whole, fits, partial = false;
	int err = 0;

	pthread_rwlock_rdlock(&ino->ki_lock);
	cur = ino->ki_obj;
	seq = m->xm_seq;
	size = m->xm_size;
	whole = kv_xmap_whole(m);
	if (!seq || (cur && (!cur->ko_partial || cur->ko_seq != seq)))
		err = -EAGAIN; /* not a clean value on the SSD, not partly in DRAM */
	/* A value the pool can hold (a quarter free) comes in whole; a larger one, what is read. */
	fits = whole || size <= kv_pool_size(t->kt_st->ks_pool) / 4 * 3;
	if (!err)
		kv_xmap_range(m, fits ? 0 : off, fits ? UINT64_MAX : len, &first, &end);
	if (end - first > PROMOTE_EXTENTS && !fits)
		end = first + PROMOTE_EXTENTS;
	if (end > first) {
		locs = malloc((end - first) * sizeof(*locs));
		csums = calloc(end - first, sizeof(*csums));
		if (!locs || !csums)
			err = -ENOMEM;
	}
	for (uint32_t i = first; !err && i < end; i++) {
		const struct kv_xent *x = kv_xmap_cat(m, i);

		if (cur && kv_obj_has_data(cur, x->xe_loc.kl_index))
			continue;
		locs[n] = x->xe_loc;
		csums[n++] = kv_csums_dup(&x->xe_loc, x->xe_csums); /* NULL: loaded below */
	}
	pthread_rwlock_unlock(&ino->ki_lock);
	if (!err && !n)
		err = cur ? 0 : -EAGAIN; /* all of it in DRAM already; or nothing to read */
	if (err || !n)
		goto out;
	/* A WHOLE record larger than the pool can never come in: it is read in place. */
	if (whole && size > kv_pool_size(t->kt_st->ks_pool)) {
		err = -EFBIG;
		goto out;
	}
	for (uint32_t i = 0; !err && i < n; i++)
		if (!csums[i])
			err = kv_bucket_load_csums(t->kt_bs, &locs[i], &csums[i], &nchunks);
	if (!err)
		err = kv_xmap_set(&need, seq, whole ? size : UINT64_MAX, locs, n);
	for (uint32_t i = 0; !err && i < n; i++) {
		kv_xmap_at(&need, i)->xe_csums = csums[i];
		csums[i] = NULL;
	}
	/*
	 * A promotion is a bonus: it takes memory only while a quarter of the
	 * pool stays free (evicting clean values for it), so reads never crowd
	 * out writers; else the read is served in place.
	 */
	if (!err && !room_for(t, fits ? ino : NULL, (uint64_t)n * KV_EXTENT))
		err = -ENOSPC;
	/* The extents read, alone: no hold on the version in DRAM while reading. */
	if (!err)
		err = kv_obj_new(t->kt_st->ks_pool, &obj);
	if (!err)
		err = kv_obj_truncate(obj, size);
	if (!err)
		err = kv_xmap_read_obj(t->kt_bs, &need, 0, n, obj);
	if (err)
		goto out;
	for (uint32_t i = 0; !whole && i < n; i++)
		kv_obj_tag_extent(obj, locs[i].kl_index, locs[i].kl_seq);
	kv_obj_seal(obj, seq);
	pthread_rwlock_wrlock(&ino->ki_lock);
	now = ino->ki_obj;
	if (ino->ki_map.xm_seq != seq || (now && (!now->ko_partial || now->ko_seq != seq)))
		err = -EAGAIN; /* another version meanwhile */
	else if (now && !(obj = merge(now, obj, locs, n)))
		err = -ENOMEM; /* the extents read join those in DRAM now */
	if (!err) {
		for (uint32_t i = 0; !whole && i < kv_xmap_nx(m); i++)
			partial |= !kv_obj_has_data(obj, kv_xmap_cat(m, i)->xe_loc.kl_index);
		obj->ko_partial = partial;
		if (now)
			kv_obj_put(now);
		ino->ki_obj = obj;
		obj = NULL;
		/* Just read: the clock hand passes it over once. */
		atomic_store_explicit(&ino->ki_referenced, true, memory_order_relaxed);
		kv_tier_clean(t, ino);
		atomic_fetch_add(&t->kt_promotions, 1);
	}
	pthread_rwlock_unlock(&ino->ki_lock);
out:
	if (obj)
		kv_obj_put(obj);
	kv_xmap_clear(&need);
	for (uint32_t i = 0; csums && i < n; i++)
		free(csums[i]);
	free(csums);
	free(locs);
	return err;
}

int kv_tier_read(struct kv_tier *t, struct kv_inode *ino, uint64_t off, uint64_t len,
		 struct iovec *iov, int maxiov, uint64_t *bytes, struct kv_read_guard *guard)
{
	struct kv_store *st = t->kt_st;
	uint64_t pos = off, end;
	struct want w;
	int err, n = 0, nbuf = 0;

	*bytes = 0;
	if (st->ks_cfg->kc_promote && kv_tier_promote(t, ino, off, len) == 0)
		return -EAGAIN; /* in DRAM now: the caller reads it there */
	err = want_range(t, ino, off, len, false, &w);
	if (err) /* -EAGAIN: a newer version arrived meanwhile, the caller reads that */
		return err;
	guard->krg_size = w.w_size;
	guard->krg_seq = w.w_seq;
	if (off >= w.w_size)
		return 0;
	/*
	 * Shared across the read: the offloader frees the checksums when it
	 * installs a newer map. Other readers go on; a writer of this key waits.
	 */
	pthread_rwlock_rdlock(&ino->ki_lock);
	if (!still(ino, &w))
		err = -EAGAIN;
	end = len < w.w_size - off ? off + len : w.w_size; /* off < w_size: want_range */
	for (uint32_t i = w.w_first; !err && pos < end && n < maxiov;) {
		const struct kv_xent *x = i < w.w_end ? kv_xmap_cat(&ino->ki_map, i) : NULL;
		uint64_t base = x ? (uint64_t)x->xe_loc.kl_index << KV_EXTENT_SHIFT : end, got;
		char *data;

		if (!x && w.w_more)
			break; /* KV_READ_EXTENTS read: the caller asks again for the rest */
		if (pos < base) { /* a hole: zeros, up to the extent's end */
			uint64_t in = pos & (KV_EXTENT - 1), m = KV_EXTENT - in;

			if (m > base - pos)
				m = base - pos;
			iov[n].iov_base = (char *)kv_obj_zeros() + in;
			iov[n++].iov_len = m;
			pos += m;
			continue;
		}
		err = read_piece(t, ino, &x->xe_loc, x->xe_csums, pos - base, end - pos, guard,
				 nbuf++, &data, &got);
		if (!err && !got)
			err = -EIO; /* the map says there are bytes here */
		if (!err) {
			iov[n].iov_base = data;
			iov[n++].iov_len = got;
			pos += got;
		}
		i++;
	}
	*bytes = pos - off;
	if (!err)
		read_ahead(t, ino, NULL, &ino->ki_map, off, *bytes);
	pthread_rwlock_unlock(&ino->ki_lock);
	if (err == -EAGAIN) {
		kv_read_done(guard);
		memset(guard, 0, sizeof(*guard));
		return -EAGAIN;
	}
	if (err)
		return err == -ENOENT ? -EIO : err;
	atomic_fetch_add(&t->kt_ssd_hits, 1);
	return n;
}

int kv_tier_read_direct(struct kv_tier *t, struct kv_inode *ino, const struct iovec *iov, int n,
			uint64_t len)
{
	struct want w;
	int err;

	if (t->kt_st->ks_cfg->kc_promote)
		return -EAGAIN; /* a read brings the value into DRAM: kv_tier_read does that */
	/* not only on the SSD, or of another size: nothing to load checksums for */
	pthread_rwlock_rdlock(&ino->ki_lock);
	err = on_ssd(ino) && ino->ki_map.xm_size == len ? 0 : -EAGAIN;
	pthread_rwlock_unlock(&ino->ki_lock);
	if (err)
		return err;
	err = want_range(t, ino, 0, UINT64_MAX, true, &w);
	if (err)
		return err;
	/*
	 * Shared across the read, as in kv_tier_read. The records must still be
	 * where they were (the same version, and not moved by compaction).
	 */
	pthread_rwlock_rdlock(&ino->ki_lock);
	if (!on_ssd(ino) || ino->ki_map.xm_seq != w.w_seq || w.w_size != len)
		err = -EAGAIN;
	for (uint32_t i = 0; !err && i < kv_xmap_nx(&ino->ki_map); i++)
		if (!kv_xmap_cat(&ino->ki_map, i)->xe_csums)
			err = -EAGAIN;
	if (!err)
		err = kv_xmap_read_iov(t->kt_bs, &ino->ki_map, iov, n);
	pthread_rwlock_unlock(&ino->ki_lock);
	if (err == -EAGAIN)
		return err;
	if (err)
		return err == -ENOENT || err == -EFAULT ? -EIO : err;
	atomic_fetch_add(&t->kt_ssd_hits, 1);
	return 0;
}

/* --- life --- */

/* The pool's hook (kv_pool_set_owed_hook): quota a freed block still owed. */
static void owed_back(void *arg, uint64_t bytes)
{
	kv_bucket_unreserve(arg, bytes);
}

int kv_tier_create(struct kv_store *st, int datadir_fd, struct kv_tier **out)
{
	const struct kv_config *cfg = st->ks_cfg;
	struct kv_bucket_opts bo = {
	    .bo_bucket_size = cfg->kc_bucket_size,
	    .bo_bucket_keys = cfg->kc_bucket_keys,
	    .bo_cap = cfg->kc_ssd_size,
	};
	struct kv_tier *t = calloc(1, sizeof(*t));
	int err;

	if (!t)
		return -ENOMEM;
	t->kt_st = st;
	pthread_mutex_init(&t->kt_lock, NULL);
	pthread_mutex_init(&t->kt_clock_lock, NULL);
	err = cond_init_mono(&t->kt_wake);
	if (!err)
		err = cond_init_mono(&t->kt_done);
	if (err)
		goto out_free;
	err = kv_aio_create(&t->kt_aio, AIO_DEPTH);
	if (err)
		goto out_free;
	err = kv_bucket_open(&t->kt_bs, datadir_fd, &bo, t->kt_aio);
	if (err)
		goto out_aio;
	err = kv_ra_create(&t->kt_ra, t->kt_bs, cfg->kc_readahead);
	if (err)
		goto out_buckets;
	kv_pool_set_owed_hook(st->ks_pool, owed_back, t->kt_bs);
	*out = t;
	return 0;

out_buckets:
	kv_bucket_close(t->kt_bs);
out_aio:
	kv_aio_destroy(t->kt_aio);
out_free:
	free(t);
	return err;
}

void kv_tier_start(struct kv_tier *t)
{
	t->kt_started = pthread_create(&t->kt_thread, NULL, offloader, t) == 0;
}

void kv_tier_flush_stop(struct kv_tier *t)
{
	if (!t->kt_started)
		return;
	pthread_mutex_lock(&t->kt_lock);
	t->kt_stop = true;
	pthread_cond_broadcast(&t->kt_wake);
	pthread_cond_broadcast(&t->kt_done);
	pthread_mutex_unlock(&t->kt_lock);
	pthread_join(t->kt_thread, NULL);
	t->kt_started = false;
	while (t->kt_shead) { /* the spill list's references */
		struct kv_inode *ino = t->kt_shead;

		t->kt_shead = ino->ki_snext;
		atomic_store_explicit(&ino->ki_spillable, false, memory_order_relaxed);
		t->kt_nspill--;
		kv_inode_put(ino);
	}
}

void kv_tier_destroy(struct kv_tier *t)
{
	kv_tier_flush_stop(t);
	kv_pool_set_owed_hook(t->kt_st->ks_pool, NULL, NULL); /* the buckets go: nothing owed */
	kv_ra_destroy(t->kt_ra);
	kv_bucket_close(t->kt_bs);
	kv_aio_destroy(t->kt_aio);
	pthread_cond_destroy(&t->kt_wake);
	pthread_cond_destroy(&t->kt_done);
	pthread_mutex_destroy(&t->kt_lock);
	pthread_mutex_destroy(&t->kt_clock_lock);
	free(t);
}

void kv_tier_hit(struct kv_tier *t, bool ssd)
{
	atomic_fetch_add_explicit(ssd ? &t->kt_ssd_hits : &t->kt_dram_hits, 1,
				  memory_order_relaxed);
}

void kv_tier_usage(struct kv_tier *t, struct kv_store_usage *u)
{
	struct kv_bucket_stats b;
	struct kv_ra_stats ra;

	kv_bucket_stats(t->kt_bs, &b);
	u->ku_ssd = true;
	u->ku_ssd_used = b.bst_used;
	u->ku_ssd_cap = b.bst_cap;
	u->ku_ssd_dead = b.bst_dead;
	u->ku_ssd_reserved = b.bst_reserved;
	u->ku_buckets = b.bst_buckets;
	u->ku_ssd_written = b.bst_written;
	u->ku_ssd_read = b.bst_read;
	u->ku_csum_errors = b.bst_csum_errors;
	u->ku_torn_buckets = b.bst_truncated;
	pthread_mutex_lock(&t->kt_lock);
	u->ku_backlog_keys = t->kt_qkeys;
	u->ku_backlog_bytes = t->kt_qbytes;
	pthread_mutex_unlock(&t->kt_lock);
	u->ku_dram_hits = atomic_load(&t->kt_dram_hits);
	u->ku_ssd_hits = atomic_load(&t->kt_ssd_hits);
	u->ku_evictions = atomic_load(&t->kt_evictions);
	u->ku_promotions = atomic_load(&t->kt_promotions);
	u->ku_spilled = atomic_load(&t->kt_spilled);
	u->ku_shared = atomic_load(&t->kt_shared);
	u->ku_offload_errors = atomic_load(&t->kt_offload_errors);
	kv_ra_stats(t->kt_ra, &ra);
	u->ku_prefetch_bytes = ra.rst_bytes;
	u->ku_prefetch_hits = ra.rst_hits;
	u->ku_prefetch_unused = ra.rst_unused;
	u->ku_recovery_ns = t->kt_recovery_ns;
	u->ku_recovered_keys = t->kt_recovered_keys;
	u->ku_lost_keys = t->kt_lost_keys;
}
