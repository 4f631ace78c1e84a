/* SPDX-License-Identifier: MIT */
/*
 * ssd/bucket_append.c — placing records: the quota (what an append may
 * take, the reservations for unwritten extents), choosing the bucket (the
 * active one, or a new one once it is sealed), and the batched writes and
 * fdatasyncs of kv_bucket_append.
 *
 * Layer: above bucket_set.c, bucket_seal.c and bucket_format.c.
 * Locks: bs_append_lock > bs_lock. bs_append_lock is held across an
 * append's I/O (one appender fills the active bucket); bs_lock only for
 * the counters and the table, never across I/O.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ssd/bucket_int.h"

/* Whether the active bucket b can take a record of `size` bytes (a first record always). */
static bool fits(struct kv_bucket_set *bs, const struct kv_bucket *b, uint64_t size)
{
	const struct kv_bucket_opts *o = &bs->bs_opts;

	return b && (b->kb_end + size <= o->bo_bucket_size || b->kb_count == 0) &&
	       b->kb_count < o->bo_bucket_keys;
}

/*
 * Makes room for a record of `size` bytes: returns the bucket to write it
 * to (the active one, or a new one, sealing the full one first), or NULL
 * with *err set. bs_append_lock held.
 */
static struct kv_bucket *room_for(struct kv_bucket_set *bs, uint64_t size, int *err)
{
	const struct kv_bucket_opts *o = &bs->bs_opts;
	struct kv_bucket *b = bs->bs_active, *nb = NULL;
	uint64_t prealloc;

	if (fits(bs, b, size))
		return b;
	if (b) {
		*err = kv_bkt_seal(bs, b);
		if (*err)
			return NULL;
		pthread_mutex_lock(&bs->bs_lock);
		bs->bs_active = NULL;
		pthread_mutex_unlock(&bs->bs_lock);
	}
	prealloc = KV_BLOCK + size > o->bo_bucket_size ? KV_BLOCK + size : o->bo_bucket_size;
	*err = kv_bkt_create(bs, prealloc, &nb);
	pthread_mutex_lock(&bs->bs_lock);
	if (!*err) {
		*err = kv_bkt_insert(bs, nb);
		if (*err)
			kv_bkt_free(nb);
		else
			bs->bs_used += KV_BLOCK;
	}
	if (!*err)
		bs->bs_active = nb;
	pthread_mutex_unlock(&bs->bs_lock);
	return *err ? NULL : nb;
}

/* What one put becomes: two writes, head then value. */
struct pending {
	struct kv_bucket *pd_b;
	unsigned pd_op, pd_nops; /* its ops in the batch: the head's, then the value's if any */
	struct iovec pd_hiov;
	struct iovec *pd_viov;
	int pd_vcnt;
};

/* The value's iovecs trimmed to exactly round_up(len, 4K) bytes. */
static int value_iov(const struct kv_bucket_put *p, struct pending *pd)
{
	uint64_t want = ROUND_UP(p->bp_len);
	int n = 0;

	pd->pd_viov = calloc((size_t)p->bp_iovcnt + 1, sizeof(struct iovec));
	if (!pd->pd_viov)
		return -ENOMEM;
	for (int i = 0; i < p->bp_iovcnt && want; i++) {
		uint64_t l = p->bp_iov[i].iov_len < want ? p->bp_iov[i].iov_len : want;

		pd->pd_viov[n].iov_base = p->bp_iov[i].iov_base;
		pd->pd_viov[n].iov_len = l;
		want -= l;
		n++;
	}
	if (want)
		return -EINVAL;
	pd->pd_vcnt = n;
	return 0;
}

static uint64_t iov_bytes(const struct iovec *iov, int cnt)
{
	uint64_t n = 0;

	for (int i = 0; i < cnt; i++)
		n += iov[i].iov_len;
	return n;
}

/*
 * Writes the ops of puts [from, to) (ops [op0, nops)) and makes them
 * durable: one fdatasync per bucket written. Sets each put's bp_err.
 */
static void flush(struct kv_bucket_set *bs, struct kv_bucket_put *puts, struct pending *pd,
		  unsigned from, unsigned to, struct kv_aio_op *ops, unsigned op0, unsigned nops)
{
	if (nops > op0)
		kv_aio_run(bs->bs_aio, ops + op0, nops - op0);
	for (unsigned i = from; i < to; i++) {
		struct kv_bucket_put *p = &puts[i];
		bool synced = false;

		if (!pd[i].pd_b)
			continue;
		for (unsigned k = pd[i].pd_op; k < pd[i].pd_op + pd[i].pd_nops; k++)
			if (ops[k].kao_res !=
				(ssize_t)iov_bytes(ops[k].kao_iov, ops[k].kao_iovcnt) &&
			    !p->bp_err)
				p->bp_err = ops[k].kao_res < 0 ? (int)ops[k].kao_res : -ENOSPC;
		for (unsigned j = from; j < i; j++)
			synced |= pd[j].pd_b == pd[i].pd_b;
		if (!synced && fdatasync(pd[i].pd_b->kb_fd) < 0) {
			int err = -errno;

			for (unsigned j = i; j < to; j++)
				if (pd[j].pd_b == pd[i].pd_b && !puts[j].bp_err)
					puts[j].bp_err = err;
		}
		if (!p->bp_err)
			atomic_fetch_add(&bs->bs_written, kv_loc_size(&p->bp_loc));
	}
}

/*
 * Whether a record of `size` bytes may be written within the quota, with
 * every byte it will cost counted: its index entry, the seal (index block
 * and trailer) of the bucket it lands in, and, when it starts a new bucket,
 * the old one's seal and the new one's header. So the buckets stay within
 * bo_cap once sealed, not just while open.
 */
static bool within_quota(struct kv_bucket_set *bs, uint64_t size, uint32_t key_len, uint64_t *fill,
			 bool over)
{
	const struct kv_bucket *a = bs->bs_active;
	uint64_t need, cap = bs->bs_opts.bo_cap;
	bool ok;

	pthread_mutex_lock(&bs->bs_lock);
	if (fits(bs, a, size)) {
		need = size + ROUND_UP(a->kb_idx_bytes + kv_bkt_idx_bytes(key_len)) + KV_BLOCK;
	} else {
		need = (a ? ROUND_UP(a->kb_idx_bytes) + KV_BLOCK : 0) + KV_BLOCK + size +
		       ROUND_UP(kv_bkt_idx_bytes(key_len)) + KV_BLOCK;
	}
	/*
	 * What others reserved is not ours to take; what this record fills is.
	 * With `over`, a record promised all it needs (the active bucket's seal
	 * aside: kv_bucket_reserve leaves room for it) is placed whatever else
	 * the buckets hold.
	 */
	if (*fill > bs->bs_reserved)
		*fill = bs->bs_reserved; /* cannot happen: a fill is a reservation's */
	cap -= bs->bs_reserved - *fill < cap ? bs->bs_reserved - *fill : cap;
	ok = (bs->bs_used <= cap && need <= cap - bs->bs_used) ||
	     (over && *fill >= size + ROUND_UP(kv_bkt_idx_bytes(key_len)) + 2 * KV_BLOCK);
	bs->bs_pending = ok ? need : 0;
	pthread_mutex_unlock(&bs->bs_lock);
	return ok;
}

int kv_bucket_reserve(struct kv_bucket_set *bs, uint64_t bytes, bool force)
{
	uint64_t live, dead = 0;
	int err = 0;

	pthread_mutex_lock(&bs->bs_lock);
	for (uint32_t i = 0; i < bs->bs_n; i++)
		dead += bs->bs_tab[i]->kb_dead;
	/* Live bytes, what an append has in flight, and the active bucket's seal to come. */
	live = bs->bs_used - (dead < bs->bs_used ? dead : bs->bs_used) + bs->bs_pending;
	if (bs->bs_active)
		live += ROUND_UP(bs->bs_active->kb_idx_bytes) + KV_BLOCK;
	if (!force && (live + bs->bs_reserved > bs->bs_opts.bo_cap ||
		       bytes > bs->bs_opts.bo_cap - live - bs->bs_reserved))
		err = -ENOSPC;
	else
		bs->bs_reserved += bytes;
	pthread_mutex_unlock(&bs->bs_lock);
	return err;
}

void kv_bucket_unreserve(struct kv_bucket_set *bs, uint64_t bytes)
{
	pthread_mutex_lock(&bs->bs_lock);
	bs->bs_reserved -= bytes < bs->bs_reserved ? bytes : bs->bs_reserved;
	pthread_mutex_unlock(&bs->bs_lock);
}

int kv_bucket_append(struct kv_bucket_set *bs, struct kv_bucket_put *puts, unsigned n)
{
	struct pending *pd = calloc(n ? n : 1, sizeof(*pd));
	struct kv_aio_op *ops = calloc(2 * (size_t)n + 1, sizeof(*ops));
	unsigned nops = 0, seg = 0, seg_op = 0;
	int first = 0;

	if (!pd || !ops) {
		free(pd);
		free(ops);
		for (unsigned i = 0; i < n; i++)
			puts[i].bp_err = -ENOMEM;
		return -ENOMEM;
	}
	atomic_store_explicit(&bs->bs_fg_ns, kv_bkt_mono_ns(), memory_order_relaxed);
	pthread_mutex_lock(&bs->bs_append_lock);
	for (unsigned i = 0; i < n; i++) {
		struct kv_bucket_put *p = &puts[i];
		uint64_t size = kv_rec_size(p->bp_key_len, p->bp_len);
		struct kv_bucket *b;
		int err = 0;

		if (!kv_bkt_rec_shape_ok(p->bp_flags, p->bp_index, p->bp_len)) {
			p->bp_err = -EINVAL;
			continue;
		}
		if (!within_quota(bs, size, p->bp_key_len, &p->bp_fill, p->bp_over)) {
			p->bp_err = -ENOSPC;
			continue;
		}
		/* A bucket is sealed only after its records are written. */
		if (!fits(bs, bs->bs_active, size)) {
			flush(bs, puts, pd, seg, i, ops, seg_op, nops);
			seg = i;
			seg_op = nops;
		}
		b = room_for(bs, size, &err);
		if (!err)
			err = kv_bkt_head_build(p, &pd[i].pd_hiov);
		if (!err)
			err = value_iov(p, &pd[i]);
		p->bp_err = err;
		if (err)
			continue;
		p->bp_loc = (struct kv_loc){.kl_bucket = b->kb_id,
					    .kl_off = b->kb_end,
					    .kl_len = p->bp_len,
					    .kl_seq = p->bp_seq,
					    .kl_head_len = (uint32_t)pd[i].pd_hiov.iov_len,
					    .kl_index = p->bp_index};
		pd[i].pd_b = b;
		pd[i].pd_op = nops;
		ops[nops++] = (struct kv_aio_op){.kao_fd = b->kb_fd,
						 .kao_write = true,
						 .kao_off = b->kb_end,
						 .kao_iov = &pd[i].pd_hiov,
						 .kao_iovcnt = 1};
		if (pd[i].pd_vcnt) /* an empty value is all head */
			ops[nops++] =
			    (struct kv_aio_op){.kao_fd = b->kb_fd,
					       .kao_write = true,
					       .kao_off = b->kb_end + pd[i].pd_hiov.iov_len,
					       .kao_iov = pd[i].pd_viov,
					       .kao_iovcnt = pd[i].pd_vcnt};
		pd[i].pd_nops = nops - pd[i].pd_op;
		pthread_mutex_lock(&bs->bs_lock);
		b->kb_end += size;
		b->kb_count++;
		b->kb_idx_bytes += kv_bkt_idx_bytes(p->bp_key_len);
		b->kb_access_ns = kv_bkt_mono_ns();
		b->kb_unsettled++;
		bs->bs_used += size;
		bs->bs_pending = 0;
		bs->bs_reserved -= p->bp_fill; /* the quota it was promised is its now */
		p->bp_fill = 0;
		pthread_mutex_unlock(&bs->bs_lock);
		if (kv_bkt_idx_add(b, &p->bp_loc, p->bp_flags, p->bp_key, p->bp_key_len))
			p->bp_err = -ENOMEM;
	}
	flush(bs, puts, pd, seg, n, ops, seg_op, nops);
	pthread_mutex_lock(&bs->bs_lock);
	bs->bs_pending = 0; /* a put that failed between its check and its placing */
	pthread_mutex_unlock(&bs->bs_lock);
	for (unsigned i = 0; i < n; i++) {
		if (puts[i].bp_err && !first)
			first = puts[i].bp_err;
		free(pd[i].pd_hiov.iov_base);
		free(pd[i].pd_viov);
	}
	pthread_mutex_unlock(&bs->bs_append_lock);
	free(pd);
	free(ops);
	return first;
}
