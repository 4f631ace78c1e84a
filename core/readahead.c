/* SPDX-License-Identifier: MIT */
/*
 * core/readahead.c — read-ahead of values that are only on the SSD. The
 * policy and the locks are in core/readahead.h.
 *
 * A buffer's life:
 *
 *   SUBMITTING  made by kv_ra_start and put on its stream; the starter
 *               holds a reference while it starts the read, unlocked.
 *   INFLIGHT    the read is started and nobody has ended it.
 *   ENDING      a reader (kv_ra_take) is ending it: waiting for the read
 *               and verifying its checksums, unlocked.
 *   READY       ended and verified: readers take bytes from it.
 *   FAILED      could not be started, or ended with an error: useless.
 *
 * References (rb_ref): one for its stream while it is on one, one per
 * reader that took it (until kv_ra_put) or is ending it, one for the
 * starter while it starts. At zero a buffer that is INFLIGHT goes on the
 * zombie list (its read still lands in its memory, through its own
 * descriptor of the bucket file), and is ended and recycled once the read
 * is done: kv_ra_note and kv_ra_drop look, kv_ra_destroy waits. So a
 * writer that drops a key's read-ahead never waits for the disk.
 * Any other buffer at zero is recycled at once (the free list keeps a few,
 * so O_DIRECT never lands in freshly mapped pages).
 */
#include "core/readahead.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "ssd/format.h"

#define CHUNK (1ull << KV_CHUNK_SHIFT)
/* A buffer's memory: a piece widened to whole chunks at both ends. */
#define BUF_BYTES (KV_RA_UNIT + 2 * CHUNK)

enum rb_state { RB_SUBMITTING, RB_INFLIGHT, RB_ENDING, RB_READY, RB_FAILED };

struct kv_ra_buf {
	struct kv_ra *rb_ra; /* immutable */
	void *rb_mem;	     /* immutable: BUF_BYTES, 4 KiB aligned */
	/* kr_lock */
	struct kv_ra_buf *rb_next; /* on its stream, the zombie list or the free list */
	unsigned rb_ref;
	enum rb_state rb_state;
	bool rb_taken;	      /* a reader took bytes from it */
	struct kv_loc rb_loc; /* the record, and its bytes [rb_off, rb_off + rb_len) */
	uint64_t rb_off, rb_len;
	uint64_t rb_vend; /* the value offset where it ends: its stream drops it once past */
	/* the read: set by the starter (SUBMITTING), ended by one thread (ENDING, or a zombie's) */
	struct kv_bucket_aread rb_io;
};

/* A stream (kr_lock). rs_key NULL: a free slot. */
struct ra_stream {
	const void *rs_key;
	uint64_t rs_gen;   /* bumped whenever the slot is given to a new stream */
	uint64_t rs_next;  /* the end of the furthest read */
	uint64_t rs_ahead; /* read ahead up to here (value offset) */
	uint64_t rs_used;  /* kr_tick at its last read: least recently used gives way */
	bool rs_live;	   /* continued (or started at 0): reads ahead */
	struct kv_ra_buf *rs_bufs;
};

struct kv_ra {
	struct kv_bucket_set *kr_bs; /* immutable */
	uint64_t kr_window;	     /* immutable */
	unsigned kr_maxbuf;	     /* immutable: buffers in use at most */
	unsigned kr_keep;	     /* immutable: buffers the free list keeps at most */
	pthread_mutex_t kr_lock;
	pthread_cond_t kr_cond;
	struct ra_stream kr_s[KV_RA_STREAMS];
	uint64_t kr_tick;
	unsigned kr_nbuf;	      /* buffers in use: on a stream, held, or zombies */
	struct kv_ra_buf *kr_zombies; /* no reference, read still in flight */
	struct kv_ra_buf *kr_free;    /* recycled buffers */
	unsigned kr_nfree;
	_Atomic uint64_t kr_bytes, kr_hits, kr_unused;
};

int kv_ra_create(struct kv_ra **out, struct kv_bucket_set *bs, uint64_t window)
{
	struct kv_ra *ra;
	unsigned per;

	if (window > KV_RA_MAX_WINDOW)
		return -EINVAL;
	ra = calloc(1, sizeof(*ra));
	if (!ra)
		return -ENOMEM;
	ra->kr_bs = bs;
	ra->kr_window = window;
	/* A stream holds its window, the piece being read and two it has just passed. */
	per = (unsigned)((window + KV_RA_UNIT - 1) / KV_RA_UNIT) + 3;
	ra->kr_maxbuf = KV_RA_STREAMS * per;
	ra->kr_keep = per;
	pthread_mutex_init(&ra->kr_lock, NULL);
	pthread_cond_init(&ra->kr_cond, NULL);
	*out = ra;
	return 0;
}

/* Frees a list of buffers linked by rb_next (no lock: nobody else has them). */
static void free_list(struct kv_ra_buf *b)
{
	while (b) {
		struct kv_ra_buf *next = b->rb_next;

		free(b->rb_mem);
		free(b);
		b = next;
	}
}

/*
 * A buffer with no reference and no read in flight (kr_lock held): counts
 * it unused if no reader took it, and puts it on the free list, or on
 * *gone (freed by the caller, unlocked) when the list is full.
 */
static void recycle(struct kv_ra *ra, struct kv_ra_buf *b, struct kv_ra_buf **gone)
{
	if (!b->rb_taken && b->rb_state == RB_READY)
		atomic_fetch_add_explicit(&ra->kr_unused, b->rb_io.ba_len, memory_order_relaxed);
	ra->kr_nbuf--;
	if (ra->kr_nfree < ra->kr_keep) {
		b->rb_next = ra->kr_free;
		ra->kr_free = b;
		ra->kr_nfree++;
	} else {
		b->rb_next = *gone;
		*gone = b;
	}
}

/* Drops a reference (kr_lock held); see recycle for *gone. */
static void unref(struct kv_ra *ra, struct kv_ra_buf *b, struct kv_ra_buf **gone)
{
	if (--b->rb_ref)
		return;
	if (b->rb_state == RB_INFLIGHT) {
		b->rb_next = ra->kr_zombies;
		ra->kr_zombies = b;
	} else {
		recycle(ra, b, gone);
	}
}

/* Takes a stream's buffers off it, dropping its references (kr_lock held). */
static void stream_clear(struct kv_ra *ra, struct ra_stream *s, struct kv_ra_buf **gone)
{
	while (s->rs_bufs) {
		struct kv_ra_buf *b = s->rs_bufs;

		s->rs_bufs = b->rb_next;
		unref(ra, b, gone);
	}
	s->rs_key = NULL;
	s->rs_gen++;
}

/*
 * Drops the buffers a stream has moved past: they end a unit or more
 * before off, a read at off (kr_lock held); all of them for UINT64_MAX.
 * The unit spares the reads of one stream the kernel runs at once, a
 * little out of order.
 */
static void stream_trim(struct kv_ra *ra, struct ra_stream *s, uint64_t off,
			struct kv_ra_buf **gone)
{
	for (struct kv_ra_buf **p = &s->rs_bufs; *p;) {
		struct kv_ra_buf *b = *p;

		if (off != UINT64_MAX && b->rb_vend + KV_RA_UNIT > off) {
			p = &b->rb_next;
			continue;
		}
		*p = b->rb_next;
		unref(ra, b, gone);
	}
}

/*
 * Takes the zombies whose reads are done off their list (kr_lock held);
 * the caller ends them unlocked (zombies_end).
 */
static struct kv_ra_buf *zombies_done(struct kv_ra *ra)
{
	struct kv_ra_buf *done = NULL;

	for (struct kv_ra_buf **p = &ra->kr_zombies; *p;) {
		struct kv_ra_buf *b = *p;

		if (!kv_bucket_aread_done(ra->kr_bs, &b->rb_io)) {
			p = &b->rb_next;
			continue;
		}
		*p = b->rb_next;
		b->rb_next = done;
		done = b;
	}
	return done;
}

/* Ends the reads of zombies (waiting for them) and recycles them. Takes kr_lock. */
static void zombies_end(struct kv_ra *ra, struct kv_ra_buf *z)
{
	struct kv_ra_buf *gone = NULL;

	for (struct kv_ra_buf *b = z; b; b = b->rb_next) {
		/* Not verified: nobody will read it. Unused, so counted in kr_unused too. */
		b->rb_state =
		    kv_bucket_aread_end(ra->kr_bs, &b->rb_io, NULL) ? RB_FAILED : RB_READY;
		if (b->rb_state == RB_READY)
			atomic_fetch_add_explicit(&ra->kr_bytes, b->rb_io.ba_len,
						  memory_order_relaxed);
	}
	if (!z)
		return;
	pthread_mutex_lock(&ra->kr_lock);
	while (z) {
		struct kv_ra_buf *b = z;

		z = b->rb_next;
		recycle(ra, b, &gone);
	}
	pthread_mutex_unlock(&ra->kr_lock);
	free_list(gone);
}

void kv_ra_destroy(struct kv_ra *ra)
{
	struct kv_ra_buf *gone = NULL, *z;

	if (!ra)
		return;
	pthread_mutex_lock(&ra->kr_lock);
	for (unsigned i = 0; i < KV_RA_STREAMS; i++)
		stream_clear(ra, &ra->kr_s[i], &gone);
	z = ra->kr_zombies;
	ra->kr_zombies = NULL;
	pthread_mutex_unlock(&ra->kr_lock);
	zombies_end(ra, z);
	free_list(gone);
	free_list(ra->kr_free);
	pthread_cond_destroy(&ra->kr_cond);
	pthread_mutex_destroy(&ra->kr_lock);
	free(ra);
}

/*
 * The slot for a new stream of key (kr_lock held): a free one, else the
 * least recently used of key's own when it has KV_RA_PER_KEY, else the
 * least recently used of all. Its old stream, if any, is cleared.
 */
static struct ra_stream *stream_new(struct kv_ra *ra, const void *key, struct kv_ra_buf **gone)
{
	struct ra_stream *free_slot = NULL, *lru = NULL, *lru_own = NULL;
	unsigned own = 0;

	for (unsigned i = 0; i < KV_RA_STREAMS; i++) {
		struct ra_stream *s = &ra->kr_s[i];

		if (!s->rs_key) {
			free_slot = free_slot ? free_slot : s;
			continue;
		}
		if (!lru || s->rs_used < lru->rs_used)
			lru = s;
		if (s->rs_key == key) {
			own++;
			if (!lru_own || s->rs_used < lru_own->rs_used)
				lru_own = s;
		}
	}
	if (own >= KV_RA_PER_KEY)
		free_slot = lru_own;
	else if (!free_slot)
		free_slot = lru;
	if (free_slot->rs_key)
		stream_clear(ra, free_slot, gone);
	free_slot->rs_key = key;
	return free_slot;
}

bool kv_ra_note(struct kv_ra *ra, const void *key, uint64_t size, uint64_t off, uint64_t len,
		struct kv_ra_plan *plan)
{
	struct kv_ra_buf *gone = NULL, *z;
	struct ra_stream *s = NULL;
	uint64_t end = off + len;
	bool go = false;

	if (!ra->kr_window || !len)
		return false;
	pthread_mutex_lock(&ra->kr_lock);
	for (unsigned i = 0; i < KV_RA_STREAMS && !s; i++) {
		struct ra_stream *c = &ra->kr_s[i];

		if (c->rs_key == key && off + KV_RA_SLACK >= c->rs_next &&
		    off <= c->rs_next + KV_RA_SLACK)
			s = c;
	}
	if (s) {
		s->rs_live = true;
		if (end > s->rs_next)
			s->rs_next = end;
		/* At the end of the value every buffer is passed (the reader holds its own). */
		stream_trim(ra, s, end >= size ? UINT64_MAX : off, &gone);
	} else {
		s = stream_new(ra, key, &gone);
		s->rs_next = s->rs_ahead = end;
		s->rs_live = off == 0;
	}
	s->rs_used = ++ra->kr_tick;
	plan->rp_from = s->rs_ahead > s->rs_next ? s->rs_ahead : s->rs_next;
	plan->rp_to = s->rs_next + ra->kr_window < size ? s->rs_next + ra->kr_window : size;
	if (s->rs_live && plan->rp_from < plan->rp_to) {
		plan->rp_stream = (unsigned)(s - ra->kr_s);
		plan->rp_gen = s->rs_gen;
		s->rs_ahead = plan->rp_to;
		go = true;
	}
	z = zombies_done(ra);
	pthread_mutex_unlock(&ra->kr_lock);
	zombies_end(ra, z);
	free_list(gone);
	return go;
}

/* True when one of key's buffers holds record bytes [off, off + len) of loc (kr_lock held). */
static struct kv_ra_buf *find(struct kv_ra *ra, const void *key, const struct kv_loc *loc,
			      uint64_t off, uint64_t len)
{
	for (unsigned i = 0; i < KV_RA_STREAMS; i++) {
		if (ra->kr_s[i].rs_key != key)
			continue;
		for (struct kv_ra_buf *b = ra->kr_s[i].rs_bufs; b; b = b->rb_next)
			if (b->rb_state != RB_FAILED && kv_loc_eq(&b->rb_loc, loc) &&
			    b->rb_off <= off && off + len <= b->rb_off + b->rb_len)
				return b;
	}
	return NULL;
}

/* A buffer for a new piece (kr_lock held), or NULL past the bound or without memory. */
static struct kv_ra_buf *buf_get(struct kv_ra *ra)
{
	struct kv_ra_buf *b = ra->kr_free;

	if (ra->kr_nbuf >= ra->kr_maxbuf)
		return NULL;
	if (b) {
		ra->kr_free = b->rb_next;
		ra->kr_nfree--;
	} else {
		b = calloc(1, sizeof(*b));
		if (b && posix_memalign(&b->rb_mem, KV_BLOCK, BUF_BYTES)) {
			free(b);
			b = NULL;
		}
		if (!b)
			return NULL;
		b->rb_ra = ra;
	}
	ra->kr_nbuf++;
	return b;
}

void kv_ra_start(struct kv_ra *ra, const void *key, const struct kv_ra_plan *plan,
		 const struct kv_ra_piece *p, unsigned n)
{
	struct kv_ra_buf *mine[KV_RA_MAX_PIECES], *gone = NULL;
	bool started[KV_RA_MAX_PIECES];
	struct ra_stream *s;
	unsigned m = 0;

	if (n > KV_RA_MAX_PIECES)
		n = KV_RA_MAX_PIECES;
	pthread_mutex_lock(&ra->kr_lock);
	s = &ra->kr_s[plan->rp_stream]; /* kv_ra_note set it below KV_RA_STREAMS */
	for (unsigned i = 0; s->rs_key == key && s->rs_gen == plan->rp_gen && i < n; i++) {
		uint64_t len = p[i].pp_len;
		struct kv_ra_buf *b;

		if (p[i].pp_off >= p[i].pp_loc.kl_len || !len)
			continue;
		if (len > KV_RA_UNIT)
			len = KV_RA_UNIT;
		if (len > p[i].pp_loc.kl_len - p[i].pp_off)
			len = p[i].pp_loc.kl_len - p[i].pp_off;
		if (find(ra, key, &p[i].pp_loc, p[i].pp_off, len))
			continue;
		b = buf_get(ra);
		if (!b)
			break; /* the bound: the rest is read when it is asked for */
		b->rb_ref = 2; /* the stream's and ours, while we start it */
		b->rb_state = RB_SUBMITTING;
		b->rb_taken = false;
		b->rb_loc = p[i].pp_loc;
		b->rb_off = p[i].pp_off;
		b->rb_len = len;
		b->rb_vend = p[i].pp_vend;
		b->rb_next = s->rs_bufs;
		s->rs_bufs = b;
		mine[m++] = b;
	}
	pthread_mutex_unlock(&ra->kr_lock);
	if (!m)
		return;
	/* While SUBMITTING, only we touch rb_io; rb_loc, rb_off and rb_len never change. */
	for (unsigned i = 0; i < m; i++)
		started[i] =
		    !kv_bucket_aread_start(ra->kr_bs, &mine[i]->rb_loc, mine[i]->rb_off,
					   mine[i]->rb_len, mine[i]->rb_mem, &mine[i]->rb_io);
	pthread_mutex_lock(&ra->kr_lock);
	for (unsigned i = 0; i < m; i++) {
		mine[i]->rb_state = started[i] ? RB_INFLIGHT : RB_FAILED;
		unref(ra, mine[i], &gone);
	}
	pthread_cond_broadcast(&ra->kr_cond);
	pthread_mutex_unlock(&ra->kr_lock);
	free_list(gone);
}

struct kv_ra_buf *kv_ra_take(struct kv_ra *ra, const void *key, const struct kv_loc *loc,
			     const uint64_t *csums, uint64_t off, uint64_t len, const char **data)
{
	struct kv_ra_buf *b, *gone = NULL;

	if (!ra->kr_window || off >= loc->kl_len || !len)
		return NULL;
	if (len > loc->kl_len - off)
		len = loc->kl_len - off;
	pthread_mutex_lock(&ra->kr_lock);
	b = find(ra, key, loc, off, len);
	if (b)
		b->rb_ref++;
	while (b && b->rb_state != RB_READY && b->rb_state != RB_FAILED) {
		if (b->rb_state != RB_INFLIGHT) { /* being started, or ended by another reader */
			pthread_cond_wait(&ra->kr_cond, &ra->kr_lock);
			continue;
		}
		b->rb_state = RB_ENDING;
		pthread_mutex_unlock(&ra->kr_lock);
		/* Only we touch rb_io while ENDING; the verify covers every byte read. */
		if (kv_bucket_aread_end(ra->kr_bs, &b->rb_io, csums)) {
			pthread_mutex_lock(&ra->kr_lock);
			b->rb_state = RB_FAILED;
		} else {
			atomic_fetch_add_explicit(&ra->kr_bytes, b->rb_io.ba_len,
						  memory_order_relaxed);
			pthread_mutex_lock(&ra->kr_lock);
			b->rb_state = RB_READY;
		}
		pthread_cond_broadcast(&ra->kr_cond);
	}
	if (b && b->rb_state == RB_FAILED) {
		unref(ra, b, &gone);
		b = NULL;
	}
	if (b)
		b->rb_taken = true;
	pthread_mutex_unlock(&ra->kr_lock);
	free_list(gone);
	if (!b)
		return NULL;
	atomic_fetch_add_explicit(&ra->kr_hits, 1, memory_order_relaxed);
	*data = (const char *)b->rb_mem + (off - b->rb_io.ba_start);
	return b;
}

void kv_ra_put(struct kv_ra_buf *b)
{
	struct kv_ra_buf *gone = NULL;
	struct kv_ra *ra;

	if (!b)
		return;
	ra = b->rb_ra;
	pthread_mutex_lock(&ra->kr_lock);
	unref(ra, b, &gone);
	pthread_mutex_unlock(&ra->kr_lock);
	free_list(gone);
}

void kv_ra_drop(struct kv_ra *ra, const void *key)
{
	struct kv_ra_buf *gone = NULL, *z;

	if (!ra->kr_window)
		return;
	pthread_mutex_lock(&ra->kr_lock);
	for (unsigned i = 0; i < KV_RA_STREAMS; i++)
		if (ra->kr_s[i].rs_key == key)
			stream_clear(ra, &ra->kr_s[i], &gone);
	z = zombies_done(ra);
	pthread_mutex_unlock(&ra->kr_lock);
	zombies_end(ra, z);
	free_list(gone);
}

void kv_ra_stats(struct kv_ra *ra, struct kv_ra_stats *out)
{
	out->rst_bytes = atomic_load_explicit(&ra->kr_bytes, memory_order_relaxed);
	out->rst_hits = atomic_load_explicit(&ra->kr_hits, memory_order_relaxed);
	out->rst_unused = atomic_load_explicit(&ra->kr_unused, memory_order_relaxed);
}
