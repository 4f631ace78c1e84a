/* SPDX-License-Identifier: MIT */
/*
 * ssd/bucket_seal.c — sealing a bucket: the index of its records kept in
 * memory while it is written (kv_bkt_idx_add), and the seal itself: index
 * block and trailer after the last record, the file cut to its end and
 * synced (kv_bkt_seal, kv_bucket_seal_active).
 *
 * Layer: above bucket_format.c; called by appends, compaction, recovery
 * and close.
 * Locks: kv_bucket_seal_active takes bs_append_lock > bs_lock;
 * kv_bkt_seal is called with bs_append_lock held for the active bucket
 * (or on a bucket nothing else writes) and takes bs_lock after the I/O.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ssd/bucket_int.h"
#include "ssd/fileio.h"

/* Remembers a record (with its KV_REC_* flags) of the active bucket for its index block. */
int kv_bkt_idx_add(struct kv_bucket *b, const struct kv_loc *loc, uint16_t flags, const char *key,
		   uint32_t klen)
{
	struct kv_bkt_idx_rec *r;

	if (b->kb_nidx == b->kb_maxidx) {
		uint64_t n = b->kb_maxidx ? b->kb_maxidx * 2 : 64;
		struct kv_bkt_idx_rec *t = realloc(b->kb_idx, n * sizeof(*t));

		if (!t)
			return -ENOMEM;
		b->kb_idx = t;
		b->kb_maxidx = n;
	}
	r = &b->kb_idx[b->kb_nidx];
	r->ir_key = malloc(klen ? klen : 1);
	if (!r->ir_key)
		return -ENOMEM;
	memcpy(r->ir_key, key, klen);
	r->ir_ent = (struct kv_idx_ent){
	    .ie_off = loc->kl_off,
	    .ie_value_len = loc->kl_len,
	    .ie_seq = loc->kl_seq,
	    .ie_head_len = loc->kl_head_len,
	    .ie_key_len = klen,
	    .ie_ext_index = loc->kl_index,
	    .ie_flags = flags,
	};
	b->kb_nidx++;
	return 0;
}

/*
 * Seals b: writes its index block and trailer after the last record,
 * syncs, truncates the preallocated rest. Returns 0 or -errno.
 */
int kv_bkt_seal(struct kv_bucket_set *bs, struct kv_bucket *b)
{
	uint64_t ilen = kv_bkt_index_len(b->kb_idx, b->kb_nidx, b->kb_version), total;
	char *buf;
	int err;

	total = ROUND_UP(ilen) + KV_BLOCK;
	buf = kv_bkt_aligned(total);
	if (!buf)
		return -ENOMEM;
	kv_bkt_index_encode(buf, b->kb_idx, b->kb_nidx, b->kb_version);
	kv_bkt_trailer_fill((struct kv_bucket_trailer *)(buf + total - KV_BLOCK), b->kb_id,
			    b->kb_end, buf, ilen, b->kb_count);
	err = kv_prw_all(b->kb_fd, true, buf, total, b->kb_end);
	free(buf);
	/* Cut to its end before the sync, so that the size the trailer is found by is durable. */
	if (!err &&
	    (ftruncate(b->kb_fd, (off_t)(b->kb_end + total)) < 0 || fdatasync(b->kb_fd) < 0))
		err = -errno;
	if (err)
		return err;
	pthread_mutex_lock(&bs->bs_lock);
	b->kb_rec_end = b->kb_end;
	b->kb_end += total;
	bs->bs_used += total;
	b->kb_sealed = true;
	pthread_mutex_unlock(&bs->bs_lock);
	for (uint64_t i = 0; i < b->kb_nidx; i++)
		free(b->kb_idx[i].ir_key);
	free(b->kb_idx);
	b->kb_idx = NULL;
	b->kb_nidx = b->kb_maxidx = 0;
	return 0;
}

int kv_bucket_seal_active(struct kv_bucket_set *bs)
{
	int err = 0;

	pthread_mutex_lock(&bs->bs_append_lock);
	if (bs->bs_active && bs->bs_active->kb_count) {
		err = kv_bkt_seal(bs, bs->bs_active);
		pthread_mutex_lock(&bs->bs_lock);
		if (!err)
			bs->bs_active = NULL;
		pthread_mutex_unlock(&bs->bs_lock);
	}
	pthread_mutex_unlock(&bs->bs_append_lock);
	return err;
}
