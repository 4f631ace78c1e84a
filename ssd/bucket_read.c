/* SPDX-License-Identifier: MIT */
/*
 * ssd/bucket_read.c — the foreground reads: a record's checksums, value
 * bytes (synchronous, in the background for read-ahead, or a whole value
 * into pool memory), each verified against the record's checksums.
 *
 * Layer: above bucket_set.c and bucket_io.c.
 * Locks: bs_lock briefly, in kv_bkt_get and kv_bkt_release, to hold the
 * bucket for the I/O, which runs unlocked.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "ssd/bucket_int.h"

/* kv_bkt_get for a foreground read: compaction yields to it (gc_io). */
static struct kv_bucket *fg_get(struct kv_bucket_set *bs, const struct kv_loc *loc)
{
	uint64_t now = kv_bkt_mono_ns();

	atomic_store_explicit(&bs->bs_fg_ns, now, memory_order_relaxed);
	return kv_bkt_get(bs, loc, now);
}

int kv_bucket_load_csums(struct kv_bucket_set *bs, const struct kv_loc *loc, uint64_t **csums,
			 uint32_t *nchunks)
{
	struct kv_bucket *b = fg_get(bs, loc);
	struct kv_rec_head h;
	void *head;
	int err;

	if (!b)
		return -ENOENT;
	err = kv_bkt_read_head(bs, b, NULL, loc->kl_off, &head);
	kv_bkt_release(bs, b);
	if (err) {
		atomic_fetch_add(&bs->bs_csum_errors, 1);
		return err;
	}
	kv_bkt_head_get(head, &h);
	if (!kv_bkt_head_is(&h, loc)) {
		atomic_fetch_add(&bs->bs_csum_errors, 1);
		free(head);
		return -EIO;
	}
	*csums = kv_bkt_head_csums(head);
	if (!*csums) {
		free(head);
		return -ENOMEM;
	}
	*nchunks = h.rh_nchunks;
	free(head);
	return 0;
}

int kv_bucket_read(struct kv_bucket_set *bs, const struct kv_loc *loc, const uint64_t *csums,
		   uint64_t off, uint64_t len, void **buf, char **data, uint64_t *n)
{
	struct kv_bucket *b = fg_get(bs, loc);
	int err;

	if (!b)
		return -ENOENT;
	err = kv_bkt_read_value(bs, b, NULL, loc, csums, off, len, buf, data, n);
	kv_bkt_release(bs, b);
	return err;
}

int kv_bucket_aread_start(struct kv_bucket_set *bs, const struct kv_loc *loc, uint64_t off,
			  uint64_t len, void *buf, struct kv_bucket_aread *r)
{
	struct kv_bucket *b;
	uint64_t c1;
	int err;

	r->ba_fd = -1;
	r->ba_len = 0;
	if (off >= loc->kl_len || len == 0)
		return -EINVAL;
	if (len > loc->kl_len - off)
		len = loc->kl_len - off;
	r->ba_start = off / CHUNK * CHUNK;
	c1 = (off + len + CHUNK - 1) / CHUNK * CHUNK;
	r->ba_len = (c1 < loc->kl_len ? c1 : loc->kl_len) - r->ba_start;
	b = fg_get(bs, loc);
	if (!b)
		return -ENOENT;
	r->ba_fd = fcntl(b->kb_fd, F_DUPFD_CLOEXEC, 0);
	err = r->ba_fd < 0 ? -errno : 0;
	kv_bkt_release(bs, b);
	if (err)
		return err;
	r->ba_iov = (struct iovec){.iov_base = buf, .iov_len = ROUND_UP(r->ba_len)};
	r->ba_op = (struct kv_aio_op){.kao_fd = r->ba_fd,
				      .kao_off = loc->kl_off + loc->kl_head_len + r->ba_start,
				      .kao_iov = &r->ba_iov,
				      .kao_iovcnt = 1};
	err = kv_aio_start(bs->bs_aio, &r->ba_op, 1, &r->ba_batch);
	if (err) {
		close(r->ba_fd);
		r->ba_fd = -1;
	}
	return err;
}

bool kv_bucket_aread_done(struct kv_bucket_set *bs, struct kv_bucket_aread *r)
{
	return kv_aio_done(bs->bs_aio, r->ba_batch);
}

int kv_bucket_aread_end(struct kv_bucket_set *bs, struct kv_bucket_aread *r, const uint64_t *csums)
{
	int err = kv_aio_wait(bs->bs_aio, r->ba_batch);

	close(r->ba_fd);
	r->ba_fd = -1;
	if (err)
		return -EIO;
	atomic_fetch_add(&bs->bs_read, ROUND_UP(r->ba_len));
	if (csums && kv_bkt_verify(NULL, r->ba_iov.iov_base, r->ba_len, r->ba_start / CHUNK, csums))
		return -EIO;
	return 0;
}

int kv_bucket_read_iov(struct kv_bucket_set *bs, const struct kv_loc *loc, const uint64_t *csums,
		       const struct iovec *iov, int iovcnt)
{
	struct kv_bucket *b = fg_get(bs, loc);
	struct kv_aio_op op;
	char *scratch;
	int err;

	if (!b)
		return -ENOENT;
	op = (struct kv_aio_op){.kao_fd = b->kb_fd,
				.kao_off = loc->kl_off + loc->kl_head_len,
				.kao_iov = iov,
				.kao_iovcnt = iovcnt};
	err = kv_aio_run(bs->bs_aio, &op, 1);
	kv_bkt_release(bs, b);
	if (err)
		return -EIO;
	atomic_fetch_add(&bs->bs_read, ROUND_UP(loc->kl_len));
	scratch = malloc(CHUNK);
	if (!scratch)
		return -ENOMEM;
	for (uint64_t c = 0; !err && c * CHUNK < loc->kl_len; c++) {
		uint64_t n = loc->kl_len - c * CHUNK < CHUNK ? loc->kl_len - c * CHUNK : CHUNK;

		if (kv_bkt_hash_iov(iov, iovcnt, c * CHUNK, n, scratch) != csums[c]) {
			atomic_fetch_add(&bs->bs_csum_errors, 1);
			err = -EIO;
		}
	}
	free(scratch);
	return err;
}
