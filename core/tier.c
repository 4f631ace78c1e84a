/* SPDX-License-Identifier: MIT */
/*
 * core/tier.c — the policy between the DRAM pool and the SSD buckets.
 *
 * Offload. A sealed version is queued (kv_tier_enqueue) and one offloader
 * thread writes queued values to the buckets in batches: it waits at most
 * the flush delay after the first value arrives, so no value ever waits
 * for others to fill a bucket. Values are written straight from their pool
 * extents. Once a batch is durable, each value that is still the inode's
 * newest gets its location (ki_loc) and a KV_J_PUT journal entry with the
 * key's *current* path; a version superseded or deleted meanwhile is
 * counted as dead space instead.
 *
 * Eviction. A value that is sealed and durable is *clean*: its DRAM copy
 * may go. Clean values sit on a clock (second-chance LRU): a read sets the
 * inode's referenced bit, the hand clears it once before evicting. A value
 * with readers (a reference besides the inode's) is skipped.
 *
 * Back-pressure. A writer that finds the pool full calls
 * kv_tier_make_room: it evicts clean values, or, when there are none yet,
 * sleeps until the offloader finishes a batch (making some clean), for at
 * most the back-pressure bound; then the write fails with ENOSPC. When
 * nothing is queued or being written there is nothing to wait for: ENOSPC
 * at once.
 *
 * The SSD quota. A put the buckets refuse (-ENOSPC) is retried while
 * compaction gives space back (kv_gc_make_room runs an urgent pass in the
 * offloader's thread), for at most the back-pressure bound: with dead
 * space on the SSD the offload waits instead of failing; with none
 * (explicit-delete mode at the quota) it fails at once.
 *
 * Locks: kt_lock guards the queue, kt_stop, kt_busy and kt_batches, and
 * goes with two condition variables (kt_wake: work for the offloader;
 * kt_done: a batch finished). kt_clock_lock guards the clock. See
 * core/store_int.h for the order against the store's locks.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/gc.h"
#include "core/store_int.h"
#include "core/stats.h"

#define BATCH_KEYS  256
#define BATCH_BYTES (64ull << 20)
#define AIO_DEPTH   64
/* Journal bytes after which the offloader writes a checkpoint. */
#define CHECKPOINT_BYTES (64ull << 20)

struct kv_tier {
	struct kv_store *kt_st;	     /* immutable */
	struct kv_aio *kt_aio;	     /* immutable */
	struct kv_bucket_set *kt_bs; /* immutable */
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

	pthread_mutex_t kt_clock_lock;
	struct kv_inode *kt_hand; /* the clock of clean values: circular, NULL when empty */
	uint64_t kt_clock_n;

	_Atomic uint64_t kt_dram_hits, kt_ssd_hits, kt_evictions, kt_promotions;
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
}

/* True when ino's DRAM value is sealed and durable (ki_lock held). */
static bool is_clean(const struct kv_inode *ino)
{
	const struct kv_obj *o = ino->ki_obj;

	return o && o->ko_sealed && ino->ki_loc.kl_bucket && o->ko_seq == ino->ki_loc.kl_seq;
}

/* Evicts clean values until `bytes` are freed or the clock has gone round twice. */
static uint64_t evict(struct kv_tier *t, uint64_t bytes)
{
	uint64_t freed = 0, scanned = 0;

	pthread_mutex_lock(&t->kt_clock_lock);
	while (t->kt_hand && freed < bytes && scanned <= 2 * t->kt_clock_n) {
		struct kv_inode *ino = t->kt_hand;

		t->kt_hand = ino->ki_cnext;
		scanned++;
		if (atomic_exchange_explicit(&ino->ki_referenced, false, memory_order_relaxed))
			continue;
		if (pthread_rwlock_trywrlock(&ino->ki_lock))
			continue;
		if (!is_clean(ino)) {
			clock_remove(t, ino);
		} else if (atomic_load(&ino->ki_obj->ko_ref) == 1) {
			freed += ino->ki_obj->ko_cap;
			kv_obj_put(ino->ki_obj);
			ino->ki_obj = NULL;
			clock_remove(t, ino);
			atomic_fetch_add(&t->kt_evictions, 1);
		}
		pthread_rwlock_unlock(&ino->ki_lock);
	}
	pthread_mutex_unlock(&t->kt_clock_lock);
	return freed;
}

int kv_tier_make_room(struct kv_tier *t, uint64_t bytes)
{
	const struct kv_config *cfg = t->kt_st->ks_cfg;
	struct timespec until;
	int rc = 0;

	deadline_in(&until, cfg->kc_backpressure_ns);
	for (;;) {
		uint64_t gen;

		if (evict(t, bytes ? bytes : KV_PAGE_SIZE))
			return 0;
		pthread_mutex_lock(&t->kt_lock);
		if (!t->kt_qhead && !t->kt_busy) {
			pthread_mutex_unlock(&t->kt_lock);
			return -ENOSPC; /* nothing on its way to becoming clean */
		}
		t->kt_waiters++;
		pthread_cond_signal(&t->kt_wake);
		gen = t->kt_batches;
		while (t->kt_batches == gen && !t->kt_stop && rc == 0)
			rc = pthread_cond_timedwait(&t->kt_done, &t->kt_lock, &until);
		t->kt_waiters--;
		pthread_mutex_unlock(&t->kt_lock);
		if (rc)
			return -ENOSPC; /* the back-pressure bound */
	}
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

/* One value of a batch. */
struct item {
	struct kv_inode *it_ino;
	struct kv_obj *it_obj; /* the version written, or NULL: nothing to do */
	struct iovec *it_iov;
	char *it_key;
	uint64_t it_bytes; /* what it counted in the backlog */
};

/* Takes a reference to the version to write, with its current path. */
static void item_prepare(struct kv_store *st, struct item *it, struct kv_bucket_put *p)
{
	struct kv_inode *ino = it->it_ino;
	char path[KV_JPATH_MAX];
	struct kv_obj *obj;
	uint64_t bytes;
	int len = -1, n;

	memset(p, 0, sizeof(*p));
	p->bp_err = -ECANCELED; /* until proven worth writing */
	pthread_rwlock_rdlock(&st->ks_ns_lock);
	pthread_rwlock_rdlock(&ino->ki_lock);
	obj = ino->ki_obj;
	if (obj && obj->ko_sealed && obj->ko_seq > ino->ki_loc.kl_seq && ino->ki_parent)
		len = kv_store_path(ino, path, sizeof(path));
	if (len > 0 || len == -ENAMETOOLONG) {
		kv_obj_get(obj);
		it->it_obj = obj;
	}
	pthread_rwlock_unlock(&ino->ki_lock);
	pthread_rwlock_unlock(&st->ks_ns_lock);
	if (len == -ENAMETOOLONG)
		p->bp_err = len; /* a key too long for a record: its fsync fails */
	if (len <= 0)
		return;
	it->it_key = strndup(path, (size_t)len);
	it->it_iov = calloc(kv_obj_niov(obj) + 1, sizeof(*it->it_iov));
	if (!it->it_key || !it->it_iov) {
		p->bp_err = -ENOMEM;
		return;
	}
	n = kv_obj_iov(obj, 0, obj->ko_size, it->it_iov, (int)kv_obj_niov(obj), &bytes);
	if (n > 0) /* whole pages: sealing trimmed the extents to the size rounded up */
		it->it_iov[n - 1].iov_len =
		    (it->it_iov[n - 1].iov_len + KV_PAGE_SIZE - 1) / KV_PAGE_SIZE * KV_PAGE_SIZE;
	*p = (struct kv_bucket_put){
	    .bp_key = it->it_key,
	    .bp_key_len = (uint32_t)len,
	    .bp_seq = obj->ko_seq,
	    .bp_len = obj->ko_size,
	    .bp_iov = it->it_iov,
	    .bp_iovcnt = n,
	};
}

/* Records where a written value lives, or why it could not be written. */
static void item_finish(struct kv_tier *t, struct item *it, const struct kv_bucket_put *p)
{
	struct kv_store *st = t->kt_st;
	struct kv_inode *ino = it->it_ino;

	if (!it->it_obj)
		return;
	pthread_rwlock_rdlock(&st->ks_ns_lock);
	pthread_rwlock_wrlock(&ino->ki_lock);
	if (p->bp_err) {
		if (ino->ki_obj == it->it_obj)
			ino->ki_offload_err = p->bp_err;
		atomic_fetch_add(&t->kt_offload_errors, 1);
	} else if (!ino->ki_parent || p->bp_loc.kl_seq <= ino->ki_loc.kl_seq) {
		kv_bucket_dead(t->kt_bs, &p->bp_loc); /* deleted or superseded meanwhile */
	} else {
		struct kv_loc old = ino->ki_loc;

		ino->ki_loc = p->bp_loc;
		free(ino->ki_csums);
		ino->ki_csums = NULL;
		kv_persist_put(st, ino);
		if (old.kl_bucket)
			kv_bucket_dead(t->kt_bs, &old);
		if (ino->ki_obj == it->it_obj)
			kv_tier_clean(t, ino);
	}
	pthread_rwlock_unlock(&ino->ki_lock);
	pthread_rwlock_unlock(&st->ks_ns_lock);
}

/* Appends puts[0..n), retrying those the quota refused while compaction makes room. */
static void append_with_room(struct kv_tier *t, struct kv_bucket_put *puts, unsigned n)
{
	struct kv_gc *gc = t->kt_st->ks_gc;
	struct timespec until, now;

	kv_bucket_append(t->kt_bs, puts, n);
	deadline_in(&until, t->kt_st->ks_cfg->kc_backpressure_ns);
	for (;;) {
		struct kv_bucket_put again[BATCH_KEYS];
		unsigned map[BATCH_KEYS], k = 0;

		for (unsigned i = 0; i < n; i++)
			if (puts[i].bp_err == -ENOSPC) {
				if (puts[i].bp_loc.kl_bucket) /* placed, then the write failed */
					kv_bucket_settle(t->kt_bs, &puts[i].bp_loc);
				again[k] = puts[i];
				again[k].bp_loc = (struct kv_loc){0};
				again[k].bp_err = 0;
				map[k++] = i;
			}
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (!k || !gc || now.tv_sec > until.tv_sec || kv_gc_make_room(gc))
			return;
		kv_bucket_append(t->kt_bs, again, k);
		for (unsigned i = 0; i < k; i++)
			puts[map[i]] = again[i];
	}
}

static void run_batch(struct kv_tier *t, struct item *items, unsigned n)
{
	struct kv_bucket_put puts[BATCH_KEYS];
	unsigned i, k = 0;

	for (i = 0; i < n; i++)
		item_prepare(t->kt_st, &items[i], &puts[i]);
	/* Compact the puts worth writing to the front, remembering their items. */
	{
		struct kv_bucket_put w[BATCH_KEYS];
		unsigned map[BATCH_KEYS];

		for (i = 0; i < n; i++)
			if (puts[i].bp_err == 0) {
				w[k] = puts[i];
				map[k++] = i;
			}
		if (k)
			append_with_room(t, w, k);
		for (i = 0; i < k; i++)
			puts[map[i]] = w[i];
	}
	for (i = 0; i < n; i++) {
		item_finish(t, &items[i], &puts[i]);
		/* Only now may compaction pick the record's bucket: its key holds it. */
		if (puts[i].bp_loc.kl_bucket)
			kv_bucket_settle(t->kt_bs, &puts[i].bp_loc);
		if (items[i].it_obj)
			kv_obj_put(items[i].it_obj);
		free(items[i].it_iov);
		free(items[i].it_key);
	}
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
 * Keeps a quarter of the pool free by evicting clean values after each
 * batch, so writers find room without waiting and the offloader always
 * has their next values queued: writing to DRAM and to the SSD overlap.
 */
static void keep_free(struct kv_tier *t)
{
	struct kv_pool *pool = t->kt_st->ks_pool;
	uint64_t size = kv_pool_size(pool), used = kv_pool_used(pool);

	if (size - used < size / 4)
		evict(t, size / 4 - (size - used));
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
		unsigned n;

		if (!t->kt_qhead) {
			pthread_cond_wait(&t->kt_wake, &t->kt_lock);
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
		if (ino->ki_loc.kl_seq >= seq) {
			done = true;
		} else if (ino->ki_offload_err) {
			err = ino->ki_offload_err;
		} else if (atomic_load(&ino->ki_nlink) == 0) {
			done = true; /* deleted: nothing left to make durable */
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
 * Whether ino still has the value at loc in the same place: compaction
 * moves a value (same sequence number) to another bucket, and the reader
 * then reads it there (ki_lock held).
 */
static bool same_loc(const struct kv_loc *a, const struct kv_loc *b)
{
	return a->kl_seq == b->kl_seq && a->kl_bucket == b->kl_bucket && a->kl_off == b->kl_off;
}

/* Loads ino's chunk checksums if missing (ki_lock not held). */
static int ensure_csums(struct kv_tier *t, struct kv_inode *ino, struct kv_loc *loc)
{
	uint64_t *csums;
	uint32_t nchunks;
	bool have;
	int err;

	pthread_rwlock_rdlock(&ino->ki_lock);
	*loc = ino->ki_loc;
	have = ino->ki_csums != NULL;
	pthread_rwlock_unlock(&ino->ki_lock);
	if (have)
		return 0;
	err = kv_bucket_load_csums(t->kt_bs, loc, &csums, &nchunks);
	if (err)
		return err == -ENOENT ? -EIO : err;
	pthread_rwlock_wrlock(&ino->ki_lock);
	if (!ino->ki_csums && ino->ki_loc.kl_seq == loc->kl_seq) {
		ino->ki_csums = csums;
		csums = NULL;
	}
	pthread_rwlock_unlock(&ino->ki_lock);
	free(csums);
	return 0;
}

/*
 * Brings a whole SSD-only value into DRAM as a clean version. Returns 0
 * when the inode has a DRAM version afterwards, or -errno (the caller then
 * reads from the SSD directly).
 */
static int promote(struct kv_tier *t, struct kv_inode *ino, const struct kv_loc *loc)
{
	struct kv_obj *obj;
	struct iovec *iov;
	uint64_t bytes;
	int n, err;

	/* A value that can never fit is read in place. */
	if (loc->kl_len > kv_pool_size(t->kt_st->ks_pool))
		return -EFBIG;
	err = kv_obj_new(t->kt_st->ks_pool, &obj);
	if (err)
		return err;
	err = kv_obj_truncate(obj, loc->kl_len);
	/* Room for it may be held by clean values: a read never waits, but evicts. */
	if (err == -ENOSPC && evict(t, loc->kl_len))
		err = kv_obj_truncate(obj, loc->kl_len);
	iov = calloc(kv_obj_niov(obj) + 1, sizeof(*iov));
	if (err || !iov) {
		err = err ? err : -ENOMEM;
		goto out_put;
	}
	n = kv_obj_iov(obj, 0, loc->kl_len, iov, (int)kv_obj_niov(obj), &bytes);
	if (n > 0)
		iov[n - 1].iov_len =
		    (iov[n - 1].iov_len + KV_PAGE_SIZE - 1) / KV_PAGE_SIZE * KV_PAGE_SIZE;
	pthread_rwlock_rdlock(&ino->ki_lock);
	err = ino->ki_csums && same_loc(&ino->ki_loc, loc)
		  ? (n ? kv_bucket_read_iov(t->kt_bs, loc, ino->ki_csums, iov, n) : 0)
		  : -EAGAIN;
	pthread_rwlock_unlock(&ino->ki_lock);
	free(iov);
	if (err)
		goto out_put;
	kv_obj_seal(obj, loc->kl_seq);
	pthread_rwlock_wrlock(&ino->ki_lock);
	if (!ino->ki_obj && ino->ki_loc.kl_seq == loc->kl_seq) {
		ino->ki_obj = obj;
		obj = NULL;
		/* Just read: the clock hand passes it over once. */
		atomic_store_explicit(&ino->ki_referenced, true, memory_order_relaxed);
		kv_tier_clean(t, ino);
		atomic_fetch_add(&t->kt_promotions, 1);
	}
	pthread_rwlock_unlock(&ino->ki_lock);
out_put:
	if (obj)
		kv_obj_put(obj);
	return err;
}

int kv_tier_read(struct kv_tier *t, struct kv_inode *ino, uint64_t off, uint64_t len,
		 struct iovec *iov, int maxiov, uint64_t *bytes, struct kv_read_guard *guard)
{
	struct kv_store *st = t->kt_st;
	struct kv_loc loc;
	char *data;
	int err;

	*bytes = 0;
	err = ensure_csums(t, ino, &loc);
	if (err)
		return err;
	if (st->ks_cfg->kc_promote && promote(t, ino, &loc) == 0)
		return kv_store_read(st, ino, off, len, iov, maxiov, bytes, guard);
	/*
	 * Shared across the read: the offloader frees ki_csums when it installs
	 * a newer location. Other readers go on; a writer of this key waits.
	 */
	pthread_rwlock_rdlock(&ino->ki_lock);
	if (!same_loc(&ino->ki_loc, &loc) || !ino->ki_csums)
		err = -EAGAIN;
	else
		err = kv_bucket_read(t->kt_bs, &loc, ino->ki_csums, off, len, &guard->krg_buf,
				     &data, bytes);
	pthread_rwlock_unlock(&ino->ki_lock);
	if (err == -EAGAIN) /* a newer version arrived meanwhile: read that */
		return kv_store_read(st, ino, off, len, iov, maxiov, bytes, guard);
	if (err)
		return err == -ENOENT ? -EIO : err;
	atomic_fetch_add(&t->kt_ssd_hits, 1);
	if (*bytes == 0)
		return 0;
	iov[0].iov_base = data;
	iov[0].iov_len = *bytes;
	return 1;
}

int kv_tier_read_direct(struct kv_tier *t, struct kv_inode *ino, const struct iovec *iov, int n,
			uint64_t len)
{
	struct kv_loc loc;
	int err;

	if (t->kt_st->ks_cfg->kc_promote)
		return -EAGAIN; /* a read brings the value into DRAM: kv_tier_read does that */
	err = ensure_csums(t, ino, &loc);
	if (err)
		return err;
	/*
	 * Shared across the read, as in kv_tier_read. The record must still be
	 * where loc says (the same version, and not moved by compaction).
	 */
	pthread_rwlock_rdlock(&ino->ki_lock);
	if (ino->ki_obj || !ino->ki_loc.kl_bucket || ino->ki_loc.kl_seq != loc.kl_seq ||
	    ino->ki_loc.kl_bucket != loc.kl_bucket || ino->ki_loc.kl_off != loc.kl_off ||
	    !ino->ki_csums || loc.kl_len != len)
		err = -EAGAIN;
	else
		err = kv_bucket_read_iov(t->kt_bs, &loc, ino->ki_csums, iov, n);
	pthread_rwlock_unlock(&ino->ki_lock);
	if (err == -EAGAIN)
		return err;
	if (err)
		return err == -ENOENT || err == -EFAULT ? -EIO : err;
	atomic_fetch_add(&t->kt_ssd_hits, 1);
	return 0;
}

/* --- life --- */

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
	*out = t;
	return 0;

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
}

void kv_tier_destroy(struct kv_tier *t)
{
	kv_tier_flush_stop(t);
	kv_bucket_close(t->kt_bs);
	kv_aio_destroy(t->kt_aio);
	pthread_cond_destroy(&t->kt_wake);
	pthread_cond_destroy(&t->kt_done);
	pthread_mutex_destroy(&t->kt_lock);
	pthread_mutex_destroy(&t->kt_clock_lock);
	free(t);
}

void kv_tier_hit(struct kv_tier *t)
{
	atomic_fetch_add_explicit(&t->kt_dram_hits, 1, memory_order_relaxed);
}

void kv_tier_usage(struct kv_tier *t, struct kv_store_usage *u)
{
	struct kv_bucket_stats b;

	kv_bucket_stats(t->kt_bs, &b);
	u->ku_ssd = true;
	u->ku_ssd_used = b.bst_used;
	u->ku_ssd_cap = b.bst_cap;
	u->ku_ssd_dead = b.bst_dead;
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
	u->ku_offload_errors = atomic_load(&t->kt_offload_errors);
	u->ku_recovery_ns = t->kt_recovery_ns;
	u->ku_recovered_keys = t->kt_recovered_keys;
	u->ku_lost_keys = t->kt_lost_keys;
}
