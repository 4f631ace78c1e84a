/* SPDX-License-Identifier: MIT */
/*
 * ssd/bucket_set.c — the bucket set's table and each bucket's state: find
 * and insert by id, create a bucket file, a read's reference on a bucket
 * (kv_bkt_get, kv_bkt_release), and the calls that ask or set a bucket's
 * state (holds, valid, dead, live, settle, pin, list, ids, stats, each).
 *
 * Layer: above bucket_format.c; below everything that places, reads or
 * removes buckets.
 * Locks: bs_lock only (the table, the counters, kb_*), never held across
 * I/O; kv_bkt_find and kv_bkt_insert are called with it held,
 * kv_bkt_create takes it for the id alone.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ssd/bucket_int.h"
#include "ssd/fileio.h"

struct kv_bucket *kv_bkt_find(struct kv_bucket_set *bs, uint64_t id)
{
	uint32_t lo = 0, hi = bs->bs_n;

	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;

		if (bs->bs_tab[mid]->kb_id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < bs->bs_n && bs->bs_tab[lo]->kb_id == id ? bs->bs_tab[lo] : NULL;
}

int kv_bkt_insert(struct kv_bucket_set *bs, struct kv_bucket *b)
{
	uint32_t i;

	if (bs->bs_n == bs->bs_max) {
		uint32_t n = bs->bs_max ? bs->bs_max * 2 : 16;
		struct kv_bucket **t = realloc(bs->bs_tab, n * sizeof(*t));

		if (!t)
			return -ENOMEM;
		bs->bs_tab = t;
		bs->bs_max = n;
	}
	for (i = bs->bs_n; i > 0 && bs->bs_tab[i - 1]->kb_id > b->kb_id; i--)
		bs->bs_tab[i] = bs->bs_tab[i - 1];
	bs->bs_tab[i] = b;
	bs->bs_n++;
	if (b->kb_id >= bs->bs_next_id)
		bs->bs_next_id = b->kb_id + 1;
	return 0;
}

void kv_bkt_free(struct kv_bucket *b)
{
	for (uint64_t i = 0; i < b->kb_nidx; i++)
		free(b->kb_idx[i].ir_key);
	free(b->kb_idx);
	if (b->kb_fd >= 0)
		close(b->kb_fd);
	free(b);
}

/*
 * Creates a new bucket file (header written and synced, directory synced).
 * Call without bs_lock: it takes it only for the id, so readers are not
 * held up by the syncs. prealloc 0 makes a compaction output: no
 * preallocation and no sync here (kv_compact_commit syncs the file and the
 * directory). Its file only grows by its own writes, header first, so a
 * crash leaves it empty (recovery removes it) or with its header, never a
 * large file without one (kv_compact_begin makes it a sparse one, its
 * header written); and as its writes fill that sparse file, it has no use
 * for preallocation. So an output costs one journal commit of the
 * filesystem, not three.
 */
int kv_bkt_create(struct kv_bucket_set *bs, uint64_t prealloc, struct kv_bucket **out)
{
	struct kv_bucket_hdr *h;
	struct kv_bucket *b;
	char name[32];
	int err;

	b = calloc(1, sizeof(*b));
	h = kv_bkt_aligned(KV_BLOCK);
	if (!b || !h) {
		err = -ENOMEM;
		goto out_free;
	}
	pthread_mutex_lock(&bs->bs_lock);
	b->kb_id = bs->bs_next_id++;
	pthread_mutex_unlock(&bs->bs_lock);
	b->kb_version = KV_FORMAT_VERSION;
	kv_bkt_name(b->kb_id, name, sizeof(name));
	b->kb_fd =
	    openat(bs->bs_dirfd, name, O_RDWR | O_CREAT | O_EXCL | O_DIRECT | O_CLOEXEC, 0600);
	if (b->kb_fd < 0) {
		err = -errno;
		goto out_free;
	}
	kv_bkt_header_fill(h, b->kb_id);
	/*
	 * The header before the preallocation: a crash in between leaves a
	 * bucket with no records, or a file too short to be one (recovery
	 * removes both), never a large file without a header (kept for salvage,
	 * and damage to --fsck).
	 */
	err = kv_prw_all(b->kb_fd, true, h, KV_BLOCK, 0);
	if (!err && prealloc && fallocate(b->kb_fd, 0, 0, (off_t)prealloc) < 0 &&
	    errno != EOPNOTSUPP)
		err = -errno;
	if (!err && prealloc && (fdatasync(b->kb_fd) < 0 || fsync(bs->bs_dirfd) < 0))
		err = -errno;
	if (err)
		goto out_unlink;
	b->kb_end = KV_BLOCK;
	free(h);
	*out = b;
	return 0;

out_unlink:
	close(b->kb_fd);
	unlinkat(bs->bs_dirfd, name, 0);
out_free:
	free(h);
	free(b);
	return err;
}

/*
 * Finds the bucket of loc, or NULL, and counts a read in flight on it:
 * kv_bucket_drop frees a bucket only once every such read is released.
 * now: a foreground read's time, which makes the bucket warm; 0 for
 * compaction's own reads, which leave its coldness alone.
 */
struct kv_bucket *kv_bkt_get(struct kv_bucket_set *bs, const struct kv_loc *loc, uint64_t now)
{
	struct kv_bucket *b;

	pthread_mutex_lock(&bs->bs_lock);
	b = kv_bkt_find(bs, loc->kl_bucket);
	if (b && (b->kb_broken || loc->kl_off + kv_loc_size(loc) > b->kb_end))
		b = NULL;
	if (b) {
		b->kb_readers++;
		if (now)
			b->kb_access_ns = now;
	}
	pthread_mutex_unlock(&bs->bs_lock);
	return b;
}

void kv_bkt_release(struct kv_bucket_set *bs, struct kv_bucket *b)
{
	pthread_mutex_lock(&bs->bs_lock);
	if (--b->kb_readers == 0)
		pthread_cond_broadcast(&bs->bs_drained);
	pthread_mutex_unlock(&bs->bs_lock);
}

bool kv_bucket_holds(struct kv_bucket_set *bs, uint64_t id, uint64_t off, uint64_t end)
{
	const struct kv_bucket *b;
	bool ok;

	if (off < KV_BLOCK)
		return false;
	/* kv_bkt_get's test, without a read's bookkeeping: recovery asks for every key. */
	pthread_mutex_lock(&bs->bs_lock);
	b = kv_bkt_find(bs, id);
	ok = b && !b->kb_broken && end <= b->kb_end;
	pthread_mutex_unlock(&bs->bs_lock);
	return ok;
}

bool kv_bucket_valid(struct kv_bucket_set *bs, const struct kv_loc *loc)
{
	return kv_bucket_holds(bs, loc->kl_bucket, loc->kl_off, loc->kl_off + kv_loc_size(loc));
}

void kv_bucket_dead(struct kv_bucket_set *bs, const struct kv_loc *loc)
{
	struct kv_bucket *b;

	pthread_mutex_lock(&bs->bs_lock);
	b = kv_bkt_find(bs, loc->kl_bucket);
	if (b) {
		b->kb_dead += kv_loc_size(loc);
		b->kb_dead_ns = kv_bkt_mono_ns();
	}
	pthread_mutex_unlock(&bs->bs_lock);
}

void kv_bucket_set_live(struct kv_bucket_set *bs, uint64_t id, uint64_t live)
{
	struct kv_bucket *b;

	pthread_mutex_lock(&bs->bs_lock);
	b = kv_bkt_find(bs, id);
	if (b && b->kb_sealed && b->kb_rec_end >= KV_BLOCK + live)
		b->kb_dead = b->kb_rec_end - KV_BLOCK - live;
	pthread_mutex_unlock(&bs->bs_lock);
}

void kv_bucket_settle(struct kv_bucket_set *bs, const struct kv_loc *loc)
{
	struct kv_bucket *b;

	pthread_mutex_lock(&bs->bs_lock);
	b = kv_bkt_find(bs, loc->kl_bucket);
	if (b && b->kb_unsettled)
		b->kb_unsettled--;
	pthread_mutex_unlock(&bs->bs_lock);
}

void kv_bucket_pin(struct kv_bucket_set *bs, uint64_t id, bool pin)
{
	struct kv_bucket *b;

	pthread_mutex_lock(&bs->bs_lock);
	b = kv_bkt_find(bs, id);
	if (b && pin)
		b->kb_pins++;
	else if (b && b->kb_pins)
		b->kb_pins--;
	pthread_mutex_unlock(&bs->bs_lock);
}

int kv_bucket_list(struct kv_bucket_set *bs, struct kv_bucket_info **out, uint32_t *n)
{
	struct kv_bucket_info *a;

	pthread_mutex_lock(&bs->bs_lock);
	a = calloc(bs->bs_n ? bs->bs_n : 1, sizeof(*a));
	for (uint32_t i = 0; a && i < bs->bs_n; i++) {
		const struct kv_bucket *b = bs->bs_tab[i];

		a[i] = (struct kv_bucket_info){
		    .bi_id = b->kb_id,
		    .bi_size = b->kb_end,
		    .bi_records = (b->kb_sealed ? b->kb_rec_end : b->kb_end) - KV_BLOCK,
		    .bi_dead = b->kb_dead,
		    .bi_access_ns = b->kb_access_ns,
		    .bi_dead_ns = b->kb_dead_ns,
		    .bi_count = b->kb_count,
		    .bi_busy = !b->kb_sealed || b->kb_broken || b->kb_pins || b->kb_unsettled ||
			       b->kb_compacting || b == bs->bs_active,
		    .bi_active = b == bs->bs_active,
		};
	}
	*n = a ? bs->bs_n : 0;
	pthread_mutex_unlock(&bs->bs_lock);
	*out = a;
	return a ? 0 : -ENOMEM;
}

void kv_bucket_min_id(struct kv_bucket_set *bs, uint64_t next)
{
	pthread_mutex_lock(&bs->bs_lock);
	if (bs->bs_next_id < next)
		bs->bs_next_id = next;
	pthread_mutex_unlock(&bs->bs_lock);
}

uint64_t kv_bucket_next_id(struct kv_bucket_set *bs)
{
	uint64_t id;

	pthread_mutex_lock(&bs->bs_lock);
	id = bs->bs_next_id;
	pthread_mutex_unlock(&bs->bs_lock);
	return id;
}

void kv_bucket_stats(struct kv_bucket_set *bs, struct kv_bucket_stats *st)
{
	pthread_mutex_lock(&bs->bs_lock);
	st->bst_buckets = bs->bs_n;
	st->bst_used = bs->bs_used;
	st->bst_reserved = bs->bs_reserved;
	st->bst_dead = 0;
	for (uint32_t i = 0; i < bs->bs_n; i++)
		st->bst_dead += bs->bs_tab[i]->kb_dead;
	pthread_mutex_unlock(&bs->bs_lock);
	st->bst_cap = bs->bs_opts.bo_cap;
	st->bst_written = atomic_load(&bs->bs_written);
	st->bst_read = atomic_load(&bs->bs_read);
	st->bst_csum_errors = atomic_load(&bs->bs_csum_errors);
	st->bst_truncated = atomic_load(&bs->bs_truncated);
}

void kv_bucket_each(struct kv_bucket_set *bs, void (*fn)(uint64_t id, void *arg), void *arg)
{
	uint64_t *ids;
	uint32_t n;

	pthread_mutex_lock(&bs->bs_lock);
	n = bs->bs_n;
	ids = malloc((n ? n : 1) * sizeof(*ids));
	for (uint32_t i = 0; ids && i < n; i++)
		ids[i] = bs->bs_tab[i]->kb_id;
	pthread_mutex_unlock(&bs->bs_lock);
	for (uint32_t i = 0; ids && i < n; i++)
		fn(ids[i], arg);
	free(ids);
}
