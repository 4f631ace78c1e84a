/* SPDX-License-Identifier: MIT */
/*
 * core/gc.c — compaction and cache-mode eviction: the policy and the
 * switch. See core/gc.h for the protocol; the record copying is in
 * ssd/bucket.c (kv_compact_*).
 */
#include "core/gc.h"

#include <errno.h>
#include <linux/ioprio.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/stats.h"
#include "core/store_int.h"

/* Bytes/s a periodic pass copies when --gc-rate is 0. */
#define AUTO_RATE (256ull << 20)
/* Journal bytes after which the thread writes a checkpoint. */
#define CHECKPOINT_BYTES (64ull << 20)
/* Periodic passes leave dying buckets for at most this many intervals in a row (core/gc.h). */
#define SETTLE_PASSES 30
/* Bytes of victims whose removal may wait for foreground I/O to pause (drops_wait). */
#define DROPS_WAIT_MAX (64ull << 20)

static const char *const point_names[KV_GC__POINTS] = {
    [KV_GC_AFTER_COPY] = "gc_after_copy",	[KV_GC_AFTER_DURABLE] = "gc_after_durable",
    [KV_GC_AFTER_SWITCH] = "gc_after_switch",	[KV_GC_AFTER_JOURNAL] = "gc_after_journal",
    [KV_GC_BEFORE_REMOVE] = "gc_before_remove", [KV_GC_AFTER_REMOVE] = "gc_after_remove",
};

enum pass_kind {
	PASS_PERIODIC, /* the thread: by ratio and coldness, paced, unless above the watermark */
	PASS_URGENT,   /* the quota is full: deadest first, unpaced */
	PASS_FULL,     /* kv_gc_run: every bucket with a dead byte, unpaced */
};

struct kv_gc {
	struct kv_store *kg_st;		/* immutable */
	struct kv_bucket_set *kg_bs;	/* immutable */
	const struct kv_gc_ops *kg_ops; /* immutable */
	int kg_fault;			/* immutable: the KVFS_FAULT point, or -1 */
	_Atomic bool kg_idle_ok;	/* passes may copy as SCHED_IDLE (idle_probe, cpu_idle) */
	unsigned kg_fault_left;		/* kg_pass_lock: times it is reached before the abort */

	pthread_mutex_t kg_pass_lock;			/* one pass at a time; before ks_ns_lock */
	void (*kg_hook)(enum kv_gc_point p, void *arg); /* kg_pass_lock */
	void *kg_hook_arg;
	uint64_t kg_settle_since; /* kg_pass_lock: periodic passes found buckets dying since */

	pthread_mutex_t kg_lock; /* guards kg_stop */
	pthread_cond_t kg_wake;
	bool kg_stop;
	pthread_t kg_thread;
	bool kg_started;

	_Atomic uint64_t kg_passes, kg_compacted, kg_dropped, kg_reclaimed, kg_rewritten, kg_copied,
	    kg_skips, kg_csum_failures, kg_ns, kg_evicted_keys, kg_evicted_bytes, kg_room_waits,
	    kg_recycled;
};

/* --- victim selection --- */

static int by_dead_desc(const void *a, const void *b)
{
	const struct kv_bucket_info *x = a, *y = b;

	if (x->bi_dead != y->bi_dead)
		return x->bi_dead > y->bi_dead ? -1 : 1;
	return x->bi_id < y->bi_id ? -1 : x->bi_id > y->bi_id;
}

static int by_cold(const void *a, const void *b)
{
	const struct kv_bucket_info *x = a, *y = b;

	if (x->bi_access_ns != y->bi_access_ns)
		return x->bi_access_ns < y->bi_access_ns ? -1 : 1;
	return x->bi_id < y->bi_id ? -1 : x->bi_id > y->bi_id;
}

uint32_t kv_gc_select(struct kv_bucket_info *info, uint32_t n, struct kv_gc_policy *p,
		      uint64_t *ids)
{
	bool urgent = p->gp_urgent || (double)p->gp_used > p->gp_high_watermark * (double)p->gp_cap;
	uint32_t k = 0;

	qsort(info, n, sizeof(*info), p->gp_all || urgent ? by_dead_desc : by_cold);
	for (uint32_t i = 0; i < n && (p->gp_all || k < p->gp_max); i++) {
		const struct kv_bucket_info *b = &info[i];

		if (b->bi_busy || b->bi_dead == 0)
			continue;
		if (!p->gp_all && !urgent &&
		    (double)b->bi_dead <
			p->gp_dead_ratio * (double)(b->bi_records ? b->bi_records : 1))
			continue;
		if (!p->gp_all && !urgent && b->bi_dead < b->bi_records &&
		    b->bi_dead_ns + p->gp_settle_ns > p->gp_now) {
			p->gp_dying++;
			if (p->gp_settle)
				continue;
		}
		ids[k++] = b->bi_id;
	}
	return k;
}

/* --- finding the live records of the victims --- */

/* One live record of a victim: the key that points at it, a reference held. */
struct rec {
	struct kv_inode *r_ino;
	struct kv_loc r_from;
	struct kv_loc r_to; /* the copy, once made */
};

struct victim {
	uint64_t v_id;
	uint64_t v_size; /* bytes of its file */
	uint64_t v_live; /* live records found in it */
	bool v_keep;	 /* a record could not be copied: never dropped */
	bool v_done;	 /* all its records are in outputs */
	bool v_ready;	 /* and those outputs are durable and switched: it may be dropped */
};

struct pass {
	struct kv_gc *p_gc;
	enum pass_kind p_kind;
	struct victim *p_vic; /* sorted by id */
	uint32_t p_nvic;
	struct rec *p_rec;
	size_t p_nrec, p_maxrec;
	uint64_t p_t0, p_paced; /* pacing: start, bytes copied */
	uint64_t p_rate;	/* 0: unpaced */
	bool p_yield;		/* foreground I/O first: small I/Os, later removals */
	bool p_idle_ok;		/* p_yield, kg_idle_ok, and p_policy one SCHED_IDLE may leave */
	int p_policy;		/* the thread's scheduling policy and its parameters (cpu_idle) */
	struct sched_param p_sched;
	uint64_t p_owed;	/* bytes written to outputs since victims were last dropped */
	int p_err;
};

static struct victim *victim_of(struct pass *p, uint64_t id)
{
	uint32_t lo = 0, hi = p->p_nvic;

	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;

		if (p->p_vic[mid].v_id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < p->p_nvic && p->p_vic[lo].v_id == id ? &p->p_vic[lo] : NULL;
}

static void rec_add(struct pass *p, struct kv_inode *ino, const struct kv_loc *loc)
{
	if (p->p_nrec == p->p_maxrec) {
		size_t n = p->p_maxrec ? p->p_maxrec * 2 : 256;
		struct rec *a = realloc(p->p_rec, n * sizeof(*a));

		if (!a) {
			p->p_err = -ENOMEM;
			return;
		}
		p->p_rec = a;
		p->p_maxrec = n;
	}
	kv_inode_get(ino);
	p->p_rec[p->p_nrec++] = (struct rec){.r_ino = ino, .r_from = *loc};
}

/* Collects the keys under dir whose value lies in a victim (ks_ns_lock held). */
static void collect(struct pass *p, struct kv_inode *dir)
{
	for (uint32_t b = 0; b < dir->kd_nbuckets; b++) {
		for (struct kv_inode *c = dir->kd_table[b]; c; c = c->ki_hnext) {
			if (S_ISDIR(c->ki_type)) {
				collect(p, c);
				continue;
			}
			pthread_rwlock_rdlock(&c->ki_lock);
			for (uint32_t i = 0; i < c->ki_map.xm_n; i++) {
				const struct kv_loc *loc = &kv_xmap_at(&c->ki_map, i)->xe_loc;

				if (victim_of(p, loc->kl_bucket))
					rec_add(p, c, loc);
			}
			/* The spilled extents of a version being written are live too. */
			for (uint32_t i = 0; i < kv_spill_n(c); i++) {
				const struct kv_loc *loc = &kv_xmap_at(c->ki_spill, i)->xe_loc;

				if (victim_of(p, loc->kl_bucket))
					rec_add(p, c, loc);
			}
			pthread_rwlock_unlock(&c->ki_lock);
		}
	}
}

static int rec_order(const void *a, const void *b)
{
	const struct rec *x = a, *y = b;

	if (x->r_from.kl_bucket != y->r_from.kl_bucket)
		return x->r_from.kl_bucket < y->r_from.kl_bucket ? -1 : 1;
	return x->r_from.kl_off < y->r_from.kl_off ? -1 : x->r_from.kl_off > y->r_from.kl_off;
}

/* --- the steps --- */

static void at_point(struct kv_gc *gc, enum kv_gc_point pt)
{
	if (gc->kg_hook) {
		gc->kg_hook(pt, gc->kg_hook_arg);
	} else if (gc->kg_fault == (int)pt && --gc->kg_fault_left == 0) {
		fprintf(stderr, "kvfs: KVFS_FAULT=%s: aborting\n", point_names[pt]);
		abort();
	}
}

/* Journals that one record of ino's value moved to `to` (ks_ns_lock and ki_lock held). */
static void journal_move(struct kv_store *st, struct kv_inode *ino, const struct kv_loc *to)
{
	char path[KV_JPATH_MAX];
	int len = kv_inode_path(ino, path, sizeof(path));
	struct kv_jent e = {
	    .je_type = KV_J_MOVE,
	    .je_seq = to->kl_seq,
	    .je_bucket = to->kl_bucket,
	    .je_off = to->kl_off,
	    .je_len = to->kl_len,
	    .je_head_len = to->kl_head_len,
	    .je_next = to->kl_index,
	    .je_path = path,
	    .je_path_len = (uint32_t)len,
	};
	int err = len > 0 ? kv_journal_append(st->ks_journal, &e, NULL) : len;

	if (err)
		atomic_store(&st->ks_meta_err, err);
}

/* Switches the keys of records [from, to) to their copies, where they still point at the old. */
static void switch_keys(struct pass *p, size_t from, size_t to)
{
	struct kv_gc *gc = p->p_gc;
	struct kv_store *st = gc->kg_st;

	for (size_t i = from; i < to; i++) {
		struct rec *r = &p->p_rec[i];
		struct kv_inode *ino = r->r_ino;
		bool named, moved = false;
		struct kv_xent *x;

		if (!r->r_to.kl_bucket)
			continue;
		pthread_rwlock_rdlock(&st->ks_ns_lock);
		pthread_rwlock_wrlock(&ino->ki_lock);
		/* Same bytes, same chunk checksums: xe_csums stays right. */
		named = ino->ki_parent && atomic_load(&ino->ki_nlink);
		x = kv_xmap_holds(&ino->ki_map, &r->r_from);
		if (named && x) {
			x->xe_loc = r->r_to;
			journal_move(st, ino, &r->r_to);
			moved = true;
		}
		/*
		 * A spilled extent needs no entry: nothing names it before the seal.
		 * A borrowed one is the map's record, maybe borrowed after the walk:
		 * it follows the map's move (one record, one copy).
		 */
		x = kv_xmap_holds(ino->ki_spill, &r->r_from);
		if (named && x) {
			x->xe_loc = r->r_to;
			moved = true;
		}
		pthread_rwlock_unlock(&ino->ki_lock);
		pthread_rwlock_unlock(&st->ks_ns_lock);
		if (moved) {
			atomic_fetch_add(&gc->kg_rewritten, kv_loc_size(&r->r_to));
			/* the old copy: counts where its bucket stays (kept, a pass cut short) */
			kv_bucket_dead(gc->kg_bs, &r->r_from);
		} else {
			atomic_fetch_add(&gc->kg_skips, 1);
			kv_bucket_dead(gc->kg_bs, &r->r_to);
		}
	}
}

/*
 * Whether the `ready` bytes of victims ready so far may wait to be removed:
 * the pass yields, foreground I/O is using the disk, fewer than
 * DROPS_WAIT_MAX bytes wait, and the buckets are below the high watermark
 * (the space is not needed yet). Removing a bucket file makes a filesystem
 * mounted with `discard` trim its blocks, and a disk that serves one
 * request at a time holds every read queued behind that trim: 4 ms for a
 * 16 MiB bucket on the bench's virtual disk, fifteen times a read. So a
 * yielding pass removes its victims when the reads pause, when it ends, or
 * together once 64 MiB wait: one pause of the reads (16 ms there) instead
 * of one per bucket.
 */
static bool drops_wait(struct pass *p, uint64_t ready)
{
	const struct kv_config *cfg = p->p_gc->kg_st->ks_cfg;
	struct kv_bucket_stats bst;

	if (!p->p_yield || ready >= DROPS_WAIT_MAX || !kv_bucket_fg_active(p->p_gc->kg_bs))
		return false;
	kv_bucket_stats(p->p_gc->kg_bs, &bst);
	return (double)(bst.bst_used + bst.bst_reserved) <=
	       cfg->kc_gc_high_watermark * (double)bst.bst_cap;
}

/*
 * Syncs the journal, then drops every victim ready and not kept; `written`
 * bytes of outputs were just made. Unless `last`, the drops may wait
 * (drops_wait) for a later call, all but as many as the bucket set keeps
 * as spares for the next outputs (kv_bucket_spare_room): those cost no
 * trim, and an output with no spare would allocate a new file; the
 * pass's last call drops them all.
 */
static int drop_done(struct pass *p, uint64_t written, bool last)
{
	struct kv_gc *gc = p->p_gc;
	struct kv_journal *j = gc->kg_st->ks_journal;
	uint64_t freed = 0, ready = 0;
	uint32_t room = UINT32_MAX; /* victims to drop now at most */
	bool first = true;
	int err;

	p->p_owed += written;
	for (uint32_t i = 0; i < p->p_nvic; i++)
		if (p->p_vic[i].v_ready && !p->p_vic[i].v_keep)
			ready += p->p_vic[i].v_size;
	if (ready && !last && drops_wait(p, ready))
		room = kv_bucket_spare_room(gc->kg_bs);
	if (!ready || !room)
		return 0; /* nothing to drop, or not yet */
	err = kv_journal_sync(j, kv_journal_last_lsn(j));
	if (!err)
		err = atomic_load(&gc->kg_st->ks_meta_err);
	if (err)
		return err;
	at_point(gc, KV_GC_AFTER_JOURNAL);
	for (uint32_t i = 0; i < p->p_nvic; i++) {
		struct victim *v = &p->p_vic[i];

		if (!v->v_ready || v->v_keep || !v->v_size)
			continue;
		if (!room)
			break;
		room--;
		if (first)
			at_point(gc, KV_GC_BEFORE_REMOVE);
		first = false;
		if (kv_bucket_drop(gc->kg_bs, v->v_id) == 0) {
			freed += v->v_size;
			atomic_fetch_add(v->v_live ? &gc->kg_compacted : &gc->kg_dropped, 1);
		}
		v->v_size = 0; /* dropped (or gone): not again */
	}
	if (!first)
		at_point(gc, KV_GC_AFTER_REMOVE);
	atomic_fetch_add(&gc->kg_reclaimed, freed > p->p_owed ? freed - p->p_owed : 0);
	p->p_owed = freed > p->p_owed ? 0 : p->p_owed - freed;
	return 0;
}

/*
 * Makes an output durable, switches its keys, then drops the victims
 * whose records are all in outputs. Records [from, to) are in `out`.
 */
static int finish(struct pass *p, struct kv_compact *out, size_t from, size_t to)
{
	uint64_t written = 0;
	int err;

	at_point(p->p_gc, KV_GC_AFTER_COPY);
	err = kv_compact_commit(out);
	if (err) {
		kv_compact_abort(out);
		return err;
	}
	at_point(p->p_gc, KV_GC_AFTER_DURABLE);
	switch_keys(p, from, to);
	at_point(p->p_gc, KV_GC_AFTER_SWITCH);
	for (size_t i = from; i < to; i++)
		written += p->p_rec[i].r_to.kl_bucket ? kv_loc_size(&p->p_rec[i].r_to) : 0;
	for (uint32_t i = 0; i < p->p_nvic; i++)
		p->p_vic[i].v_ready |= p->p_vic[i].v_done;
	return drop_done(p, written, false);
}

/* Sleeps so that a paced pass copies at most p_rate bytes/s. */
static void pace(struct pass *p, uint64_t bytes)
{
	uint64_t due, now;

	if (!p->p_rate)
		return;
	p->p_paced += bytes;
	due = p->p_t0 + p->p_paced * 1000000000ull / p->p_rate;
	now = kv_now_ns();
	if (due > now) {
		uint64_t ns = due - now;
		struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000),
				      .tv_nsec = (long)(ns % 1000000000)};

		nanosleep(&ts, NULL);
	}
}

/* Records handed to the bucket set at a time (their reads run together). */
#define BATCH 64

/* idle_probe's thread: whether it could enter SCHED_IDLE and leave it again. */
static void *idle_probe_main(void *arg)
{
	static const struct sched_param zero;
	struct sched_param sp;
	int policy = sched_getscheduler(0);

	*(bool *)arg = (policy == SCHED_OTHER || policy == SCHED_BATCH) &&
		       !sched_getparam(0, &sp) && !sched_setscheduler(0, SCHED_IDLE, &zero) &&
		       !sched_setscheduler(0, policy, &sp);
	return NULL;
}

/*
 * Whether threads like this one may leave SCHED_IDLE again (CAP_SYS_NICE
 * in the initial namespace, or RLIMIT_NICE): tried once on a thread of its
 * own, which may stay idle (it ends), since no prediction from this side
 * matches the kernel's in every namespace.
 */
static bool idle_probe(void)
{
	pthread_t t;
	bool ok = false;

	if (pthread_create(&t, NULL, idle_probe_main, &ok))
		return false;
	pthread_join(t, NULL);
	return ok;
}

/*
 * The CPU while a yielding pass copies (not while it switches keys, syncs
 * or removes: those take the index and journal locks): SCHED_IDLE, so that
 * a FUSE worker woken for a read runs at once rather than after the
 * copier's time slice. Measured on two cores (bench.sh gc, 4 KiB reads
 * during a pass): the copier's checksums and copies at the normal policy
 * took the reads' p50 up a fifth and their p99.9 from 0.6 ms to 5 ms; idle,
 * both stayed at their idle values. Only where the thread may switch back
 * (p_idle_ok). While idle it still takes bs_lock and the aio lock, for
 * moments: on CPUs saturated by other work a reader may wait behind it.
 * on == false restores p_policy.
 */
static void cpu_idle(struct pass *p, bool on)
{
	static const struct sched_param zero;

	if (!p->p_idle_ok)
		return;
	if (on) {
		p->p_idle_ok = !sched_setscheduler(0, SCHED_IDLE, &zero);
	} else if (sched_setscheduler(0, p->p_policy, &p->p_sched)) {
		/* Refused after all (RLIMIT_NICE lowered since the probe): no more idling. */
		p->p_idle_ok = false;
		if (atomic_exchange(&p->p_gc->kg_idle_ok, false))
			fprintf(stderr,
				"kvfs: gc: could not leave SCHED_IDLE (%s); not idling again\n",
				strerror(errno));
	}
}

/* Copies every record of the victims, finishing outputs as they fill. */
static int copy_all(struct pass *p)
{
	struct kv_gc *gc = p->p_gc;
	struct kv_compact *out = NULL;
	size_t first = 0; /* the first record in `out` */
	size_t i = 0;
	int err = 0;

	while (i < p->p_nrec) {
		struct kv_loc from[BATCH], to[BATCH];
		int errs[BATCH], k;
		unsigned n = 0;

		if (!out) {
			err = kv_compact_begin(gc->kg_bs, p->p_yield, &out);
			if (err)
				break;
			if (kv_compact_recycled(out))
				atomic_fetch_add(&gc->kg_recycled, 1);
		}
		while (n < BATCH && i + n < p->p_nrec) {
			from[n] = p->p_rec[i + n].r_from;
			n++;
		}
		cpu_idle(p, true);
		k = kv_compact_copy_many(out, from, to, errs, n);
		cpu_idle(p, false);
		if (k == 0) { /* the output is full: finish it, start another */
			err = finish(p, out, first, i);
			out = NULL;
			first = i;
			if (err)
				break;
			continue;
		}
		if (k < 0) {
			err = k;
			break;
		}
		for (int j = 0; j < k; j++, i++) {
			struct rec *r = &p->p_rec[i];
			struct victim *v = victim_of(p, r->r_from.kl_bucket);

			if (errs[j]) {
				/* Damaged: not copied; its key still points at it: its bucket
				 * stays. */
				atomic_fetch_add(&gc->kg_csum_failures, 1);
				memset(&r->r_to, 0, sizeof(r->r_to));
				v->v_keep = true;
			} else {
				r->r_to = to[j];
				atomic_fetch_add(&gc->kg_copied, kv_loc_size(&r->r_to));
				pace(p, kv_loc_size(&r->r_to));
			}
			if (i + 1 == p->p_nrec || p->p_rec[i + 1].r_from.kl_bucket != v->v_id)
				v->v_done = true;
		}
	}
	if (err) {
		if (out)
			kv_compact_abort(out);
		return err;
	}
	if (out && kv_compact_records(out))
		return finish(p, out, first, p->p_nrec);
	if (out)
		kv_compact_abort(out);
	/* No record in `out`: the victims done with it had none to copy (or are kept). */
	for (uint32_t v = 0; v < p->p_nvic; v++)
		p->p_vic[v].v_ready |= p->p_vic[v].v_done;
	return 0;
}

/* --- cache mode --- */

struct cand {
	struct kv_inode *c_ino;
	uint64_t c_used, c_seq, c_bytes;
};

struct cands {
	struct cand *cs_a;
	size_t cs_n, cs_max;
};

/* Collects the keys eviction may take: named, durable, not open (ks_ns_lock held). */
static void collect_lru(struct cands *cs, struct kv_inode *dir)
{
	for (uint32_t b = 0; b < dir->kd_nbuckets; b++) {
		for (struct kv_inode *c = dir->kd_table[b]; c; c = c->ki_hnext) {
			struct cand x = {.c_ino = c};
			bool ok;

			if (S_ISDIR(c->ki_type)) {
				collect_lru(cs, c);
				continue;
			}
			pthread_rwlock_rdlock(&c->ki_lock);
			ok = c->ki_map.xm_seq && c->ki_nopen == 0;
			x.c_used = atomic_load(&c->ki_used);
			x.c_seq = c->ki_map.xm_seq;
			x.c_bytes = kv_xmap_bytes(&c->ki_map);
			pthread_rwlock_unlock(&c->ki_lock);
			if (!ok)
				continue;
			if (cs->cs_n == cs->cs_max) {
				size_t n = cs->cs_max ? cs->cs_max * 2 : 1024;
				struct cand *a = realloc(cs->cs_a, n * sizeof(*a));

				if (!a)
					return;
				cs->cs_a = a;
				cs->cs_max = n;
			}
			kv_inode_get(c);
			cs->cs_a[cs->cs_n++] = x;
		}
	}
}

static int by_lru(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;

	if (x->c_used != y->c_used)
		return x->c_used < y->c_used ? -1 : 1;
	return x->c_seq < y->c_seq ? -1 : x->c_seq > y->c_seq;
}

/* Deletes least recently used keys until the live bytes are under the low watermark. */
static void evict_lru(struct kv_gc *gc)
{
	const struct kv_config *cfg = gc->kg_st->ks_cfg;
	struct kv_bucket_stats bst;
	struct cands cs = {0};
	uint64_t live, target;

	kv_bucket_stats(gc->kg_bs, &bst);
	/* Quota reserved for unwritten extents counts as used: it is promised. */
	bst.bst_used += bst.bst_reserved;
	live = bst.bst_used > bst.bst_dead ? bst.bst_used - bst.bst_dead : 0;
	target = (uint64_t)(cfg->kc_gc_low_watermark * (double)bst.bst_cap);
	if ((double)bst.bst_used <= cfg->kc_gc_high_watermark * (double)bst.bst_cap ||
	    live <= target)
		return;
	pthread_rwlock_rdlock(&gc->kg_st->ks_ns_lock);
	collect_lru(&cs, gc->kg_st->ks_root);
	pthread_rwlock_unlock(&gc->kg_st->ks_ns_lock);
	if (cs.cs_n) /* none: cs_a is NULL, which qsort may not get */
		qsort(cs.cs_a, cs.cs_n, sizeof(*cs.cs_a), by_lru);
	for (size_t i = 0; i < cs.cs_n; i++) {
		uint64_t bytes;

		if (live > target && gc->kg_ops->go_evict(gc->kg_st, cs.cs_a[i].c_ino,
							  cs.cs_a[i].c_used, &bytes) == 0) {
			live = live > bytes ? live - bytes : 0;
			atomic_fetch_add(&gc->kg_evicted_keys, 1);
			atomic_fetch_add(&gc->kg_evicted_bytes, bytes);
		}
		kv_inode_put(cs.cs_a[i].c_ino);
	}
	free(cs.cs_a);
}

/* --- a pass --- */

/*
 * Whether a periodic pass leaves dying buckets for later (core/gc.h): for at
 * most SETTLE_PASSES intervals since passes began to find some (kg_pass_lock).
 */
static void settle(struct kv_gc *gc, const struct pass *p, struct kv_gc_policy *pol)
{
	uint64_t interval = gc->kg_st->ks_cfg->kc_gc_interval_ns;

	pol->gp_now = kv_now_ns();
	pol->gp_settle_ns = interval;
	pol->gp_settle = p->p_kind == PASS_PERIODIC &&
			 (!gc->kg_settle_since ||
			  pol->gp_now - gc->kg_settle_since < SETTLE_PASSES * interval);
}

/* Chooses the victims of a pass into p->p_vic. */
static int choose(struct pass *p)
{
	struct kv_gc *gc = p->p_gc;
	const struct kv_config *cfg = gc->kg_st->ks_cfg;
	struct kv_bucket_stats bst;
	struct kv_bucket_info *info;
	struct kv_gc_policy pol;
	uint64_t *ids;
	uint32_t n, k;
	int err;

	kv_bucket_stats(gc->kg_bs, &bst);
	pol = (struct kv_gc_policy){
	    .gp_dead_ratio = cfg->kc_gc_dead_ratio,
	    .gp_high_watermark = cfg->kc_gc_high_watermark,
	    .gp_max = cfg->kc_gc_max_buckets,
	    .gp_used = bst.bst_used + bst.bst_reserved, /* reserved: promised, so used */
	    .gp_cap = bst.bst_cap,
	    .gp_all = p->p_kind == PASS_FULL,
	    .gp_urgent = p->p_kind == PASS_URGENT,
	};
	err = kv_bucket_list(gc->kg_bs, &info, &n);
	if (err)
		return err;
	/* Dead records in the active bucket: seal it so they can go (not for the thread's passes).
	 */
	for (uint32_t i = 0; p->p_kind != PASS_PERIODIC && i < n; i++)
		if (info[i].bi_active && info[i].bi_dead) {
			free(info);
			err = kv_bucket_seal_active(gc->kg_bs);
			if (!err)
				err = kv_bucket_list(gc->kg_bs, &info, &n);
			if (err)
				return err;
			break;
		}
	ids = malloc((n ? n : 1) * sizeof(*ids));
	p->p_vic = calloc(n ? n : 1, sizeof(*p->p_vic));
	if (!ids || !p->p_vic) {
		free(ids);
		free(info);
		return -ENOMEM;
	}
	p->p_yield = !pol.gp_urgent;
	if (!pol.gp_urgent && (double)pol.gp_used > pol.gp_high_watermark * (double)pol.gp_cap) {
		p->p_rate = 0; /* above the watermark: unpaced, large I/Os */
		p->p_yield = false;
	}
	p->p_policy = sched_getscheduler(0);
	p->p_idle_ok = p->p_yield && atomic_load(&gc->kg_idle_ok) &&
		       (p->p_policy == SCHED_OTHER || p->p_policy == SCHED_BATCH) &&
		       !sched_getparam(0, &p->p_sched);
	settle(gc, p, &pol);
	k = kv_gc_select(info, n, &pol, ids);
	if (p->p_kind == PASS_PERIODIC && !pol.gp_dying)
		gc->kg_settle_since = 0; /* nothing dying: the next wait may be long again */
	else if (p->p_kind == PASS_PERIODIC && !gc->kg_settle_since)
		gc->kg_settle_since = pol.gp_now;
	for (uint32_t i = 0; i < k; i++) {
		p->p_vic[i].v_id = ids[i];
		for (uint32_t j = 0; j < n; j++)
			if (info[j].bi_id == ids[i])
				p->p_vic[i].v_size = info[j].bi_size;
	}
	p->p_nvic = k;
	free(ids);
	free(info);
	return 0;
}

static int by_vid(const void *a, const void *b)
{
	const struct victim *x = a, *y = b;

	return x->v_id < y->v_id ? -1 : x->v_id > y->v_id;
}

/* One pass of the given kind (kg_pass_lock held). Sets *did when it found victims. */
static int pass_locked(struct kv_gc *gc, enum pass_kind kind, bool *did)
{
	const struct kv_config *cfg = gc->kg_st->ks_cfg;
	struct pass p = {.p_gc = gc, .p_kind = kind, .p_t0 = kv_now_ns()};
	int err, err2;

	*did = false;
	if (kind == PASS_PERIODIC)
		p.p_rate = cfg->kc_gc_rate ? cfg->kc_gc_rate : AUTO_RATE;
	if (cfg->kc_evict_lru)
		evict_lru(gc);
	err = choose(&p);
	if (err || !p.p_nvic)
		goto out;
	*did = true;
	qsort(p.p_vic, p.p_nvic, sizeof(*p.p_vic), by_vid);
	pthread_rwlock_rdlock(&gc->kg_st->ks_ns_lock);
	collect(&p, gc->kg_st->ks_root);
	pthread_rwlock_unlock(&gc->kg_st->ks_ns_lock);
	err = p.p_err;
	if (!err) {
		if (p.p_nrec) /* no records at all: p_rec is NULL, which qsort may not get */
			qsort(p.p_rec, p.p_nrec, sizeof(*p.p_rec), rec_order);
		for (size_t i = 0; i < p.p_nrec; i++)
			victim_of(&p, p.p_rec[i].r_from.kl_bucket)->v_live++;
		/* A victim without a live record is done before any copying. */
		for (uint32_t i = 0; i < p.p_nvic; i++)
			p.p_vic[i].v_done = p.p_vic[i].v_ready = p.p_vic[i].v_live == 0;
		/* Victims dropped become the next outputs' files (kv_bucket_recycle). */
		kv_bucket_recycle(gc->kg_bs, true);
		err = copy_all(&p);
		/* Drops what waited (drops_wait), also after an error: ready is ready. */
		err2 = drop_done(&p, 0, true);
		kv_bucket_recycle(gc->kg_bs, false);
		err = err ? err : err2;
	}
	for (size_t i = 0; i < p.p_nrec; i++)
		kv_inode_put(p.p_rec[i].r_ino);
	atomic_fetch_add(&gc->kg_passes, 1);
out:
	atomic_fetch_add(&gc->kg_ns, kv_now_ns() - p.p_t0);
	free(p.p_rec);
	free(p.p_vic);
	return err;
}

/*
 * Runs a pass. Returns 0 or -errno; *did: it found victims. The thread's
 * periodic passes run in the idle I/O class: the disk serves them when no
 * foreground I/O waits (mq-deadline and BFQ honour it, and age it so they
 * are not starved). A forced pass (MNT/.kvfs/ctl, "flat out") and an
 * urgent one (writers wait for it) keep the caller's class, which is
 * restored after in any case.
 */
static int pass(struct kv_gc *gc, enum pass_kind kind, bool *did)
{
	long prio = kind != PASS_PERIODIC ? -1 : syscall(SYS_ioprio_get, IOPRIO_WHO_PROCESS, 0);
	int err;

	if (prio >= 0)
		syscall(SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0,
			IOPRIO_PRIO_VALUE(IOPRIO_CLASS_IDLE, 0));
	pthread_mutex_lock(&gc->kg_pass_lock);
	err = pass_locked(gc, kind, did);
	pthread_mutex_unlock(&gc->kg_pass_lock);
	if (prio >= 0)
		syscall(SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, (int)prio);
	return err;
}

int kv_gc_run(struct kv_gc *gc)
{
	bool did;

	return pass(gc, PASS_FULL, &did);
}

int kv_gc_make_room(struct kv_gc *gc)
{
	uint64_t before = atomic_load(&gc->kg_reclaimed) + atomic_load(&gc->kg_evicted_keys);
	bool did;

	atomic_fetch_add(&gc->kg_room_waits, 1);
	pass(gc, PASS_URGENT, &did);
	return atomic_load(&gc->kg_reclaimed) + atomic_load(&gc->kg_evicted_keys) != before
		   ? 0
		   : -ENOSPC;
}

static void *gc_thread(void *arg)
{
	struct kv_gc *gc = arg;
	uint64_t interval = gc->kg_st->ks_cfg->kc_gc_interval_ns;

	pthread_mutex_lock(&gc->kg_lock);
	while (!gc->kg_stop) {
		struct timespec until;
		bool did;

		clock_gettime(CLOCK_MONOTONIC, &until);
		until.tv_sec += (time_t)(interval / 1000000000);
		until.tv_nsec += (long)(interval % 1000000000);
		if (until.tv_nsec >= 1000000000) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000;
		}
		while (!gc->kg_stop &&
		       pthread_cond_timedwait(&gc->kg_wake, &gc->kg_lock, &until) == 0)
			;
		if (gc->kg_stop)
			break;
		pthread_mutex_unlock(&gc->kg_lock);
		pass(gc, PASS_PERIODIC, &did);
		if (did && kv_journal_size(gc->kg_st->ks_journal) > CHECKPOINT_BYTES)
			gc->kg_ops->go_checkpoint(gc->kg_st);
		pthread_mutex_lock(&gc->kg_lock);
	}
	pthread_mutex_unlock(&gc->kg_lock);
	return NULL;
}

int kv_gc_create(struct kv_store *st, struct kv_bucket_set *bs, const struct kv_gc_ops *ops,
		 struct kv_gc **out)
{
	struct kv_gc *gc = calloc(1, sizeof(*gc));
	const char *fault = getenv("KVFS_FAULT");
	pthread_condattr_t ca;

	if (!gc)
		return -ENOMEM;
	gc->kg_st = st;
	gc->kg_bs = bs;
	gc->kg_ops = ops;
	gc->kg_fault = -1;
	atomic_init(&gc->kg_idle_ok, idle_probe());
#ifdef KVFS_FAULTS
	/* KVFS_FAULT=point[:n]: the n-th time the point is reached (the first by default) */
	for (int i = 0; fault && i < KV_GC__POINTS; i++) {
		size_t len = strlen(point_names[i]);

		if (!strncmp(fault, point_names[i], len) &&
		    (!fault[len] || (fault[len] == ':' && atoi(fault + len + 1) > 0))) {
			gc->kg_fault = i;
			gc->kg_fault_left = fault[len] ? (unsigned)atoi(fault + len + 1) : 1;
		}
	}
#else
	if (fault)
		fprintf(stderr, "kvfs: KVFS_FAULT=%s ignored: built without -DKVFS_FAULTS=ON\n",
			fault);
#endif
	pthread_mutex_init(&gc->kg_pass_lock, NULL);
	pthread_mutex_init(&gc->kg_lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&gc->kg_wake, &ca);
	pthread_condattr_destroy(&ca);
	*out = gc;
	return 0;
}

void kv_gc_start(struct kv_gc *gc)
{
	if (gc->kg_st->ks_cfg->kc_gc)
		gc->kg_started = pthread_create(&gc->kg_thread, NULL, gc_thread, gc) == 0;
}

void kv_gc_stop(struct kv_gc *gc)
{
	if (!gc->kg_started)
		return;
	pthread_mutex_lock(&gc->kg_lock);
	gc->kg_stop = true;
	pthread_cond_broadcast(&gc->kg_wake);
	pthread_mutex_unlock(&gc->kg_lock);
	pthread_join(gc->kg_thread, NULL);
	gc->kg_started = false;
}

void kv_gc_destroy(struct kv_gc *gc)
{
	kv_gc_stop(gc);
	pthread_cond_destroy(&gc->kg_wake);
	pthread_mutex_destroy(&gc->kg_lock);
	pthread_mutex_destroy(&gc->kg_pass_lock);
	free(gc);
}

void kv_gc_stats(struct kv_gc *gc, struct kv_gc_stats *o)
{
	*o = (struct kv_gc_stats){
	    .gs_passes = atomic_load(&gc->kg_passes),
	    .gs_compacted = atomic_load(&gc->kg_compacted),
	    .gs_dropped = atomic_load(&gc->kg_dropped),
	    .gs_reclaimed = atomic_load(&gc->kg_reclaimed),
	    .gs_rewritten = atomic_load(&gc->kg_rewritten),
	    .gs_copied = atomic_load(&gc->kg_copied),
	    .gs_skips = atomic_load(&gc->kg_skips),
	    .gs_csum_failures = atomic_load(&gc->kg_csum_failures),
	    .gs_ns = atomic_load(&gc->kg_ns),
	    .gs_evicted_keys = atomic_load(&gc->kg_evicted_keys),
	    .gs_evicted_bytes = atomic_load(&gc->kg_evicted_bytes),
	    .gs_room_waits = atomic_load(&gc->kg_room_waits),
	    .gs_recycled = atomic_load(&gc->kg_recycled),
	};
}

void kv_gc_set_hook(struct kv_gc *gc, void (*fn)(enum kv_gc_point p, void *arg), void *arg)
{
	pthread_mutex_lock(&gc->kg_pass_lock);
	gc->kg_hook = fn;
	gc->kg_hook_arg = arg;
	pthread_mutex_unlock(&gc->kg_pass_lock);
}
