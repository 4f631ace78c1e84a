/* SPDX-License-Identifier: MIT */
/*
 * ssd/bucket_io.c — reading records from one bucket's file, checked: a
 * record's head (read until whole, then kv_bkt_head_check), value bytes in
 * whole checksum chunks verified against the head's checksums, the
 * read-ahead window a walk of a file's records reads through, and the
 * per-thread read buffers (kv_bucket_read_free).
 *
 * Layer: above bucket_format.c; below the reads, the scan and compaction.
 * Takes no lock: the caller holds the bucket (a read's reference, or a
 * bucket nothing else touches). Counts bs_read and bs_csum_errors
 * (atomics).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "ssd/bucket_int.h"
#include "ssd/fileio.h"

/*
 * Reads len bytes at off of b's file into buf: through w (NULL: none) when
 * they fit in it, else (or when reading the window fails: a bad block
 * beyond what is asked for must not fail it) with a read of their own.
 */
static int win_read(struct kv_bucket *b, struct kv_bkt_rwin *w, void *buf, uint64_t len,
		    uint64_t off)
{
	uint64_t start = off / KV_BLOCK * KV_BLOCK;

	if (!w || !w->rw_buf || off + len > w->rw_limit)
		return kv_prw_all(b->kb_fd, false, buf, len, off);
	if (off < w->rw_off || off + len > w->rw_off + w->rw_len) {
		uint64_t n = w->rw_limit - start < RWIN_SIZE ? w->rw_limit - start : RWIN_SIZE;

		w->rw_len = 0;
		if (off + len > start + n || kv_prw_all(b->kb_fd, false, w->rw_buf, n, start))
			return kv_prw_all(b->kb_fd, false, buf, len, off);
		w->rw_off = start;
		w->rw_len = n;
	}
	memcpy(buf, w->rw_buf + (off - w->rw_off), len);
	return 0;
}

/*
 * Reads the head of the record at `off` in b into a malloc'ed buffer.
 * Returns 0, -EIO for a damaged or missing head.
 */
int kv_bkt_read_head(struct kv_bucket_set *bs, struct kv_bucket *b, struct kv_bkt_rwin *w,
		     uint64_t off, void **out)
{
	uint64_t len = KV_BLOCK;
	void *buf = NULL;
	int err;

	for (;;) {
		free(buf);
		buf = kv_bkt_aligned(len);
		if (!buf)
			return -ENOMEM;
		err = win_read(b, w, buf, len, off);
		if (err)
			break;
		err = kv_bkt_head_check(buf, len);
		if (err != -EAGAIN)
			break;
		len = ((const struct kv_rec_head *)buf)->rh_head_len;
	}
	if (err) {
		free(buf);
		return err == -ENOMEM ? err : -EIO;
	}
	*out = buf;
	return 0;
}

/* Checks `len` value bytes in buf (starting at chunk c0) against csums. */
int kv_bkt_verify(struct kv_bucket_set *bs, const char *buf, uint64_t len, uint64_t c0,
		  const uint64_t *csums)
{
	for (uint64_t done = 0, c = c0; done < len; c++) {
		uint64_t n = len - done < CHUNK ? len - done : CHUNK;

		if (XXH3_64bits(buf + done, n) != csums[c]) {
			if (bs)
				atomic_fetch_add(&bs->bs_csum_errors, 1);
			return -EIO;
		}
		done += n;
	}
	return 0;
}

/*
 * Read buffers. A FUSE worker reads a value piece, replies from the buffer
 * and frees it, over and over: each thread keeps one buffer (up to
 * READ_KEEP bytes) for the next read, so O_DIRECT never lands in freshly
 * mapped pages (a page fault per 4 KiB was a third of a read's cost).
 * Thread-local, so no lock; the buffer goes with its thread.
 */
#define READ_KEEP (4u << 20)

struct read_cache {
	void *rc_buf;
	size_t rc_len;
	bool rc_busy;
};

static pthread_key_t read_cache_key;

static pthread_once_t read_cache_once = PTHREAD_ONCE_INIT;

static void read_cache_free(void *arg)
{
	struct read_cache *rc = arg;

	free(rc->rc_buf);
	free(rc);
}

static void read_cache_init(void)
{
	pthread_key_create(&read_cache_key, read_cache_free);
}

static void *read_buf(size_t len)
{
	struct read_cache *rc;

	pthread_once(&read_cache_once, read_cache_init);
	rc = pthread_getspecific(read_cache_key);
	if (!rc && (rc = calloc(1, sizeof(*rc))) && pthread_setspecific(read_cache_key, rc)) {
		free(rc);
		rc = NULL;
	}
	if (!rc || rc->rc_busy || len > READ_KEEP)
		return kv_bkt_aligned_buf(len, false);
	if (rc->rc_len < len) {
		free(rc->rc_buf);
		rc->rc_len = 0;
		rc->rc_buf = kv_bkt_aligned_buf(len, false);
		if (!rc->rc_buf)
			return NULL;
		rc->rc_len = len;
	}
	rc->rc_busy = true;
	return rc->rc_buf;
}

void kv_bucket_read_free(void *buf)
{
	struct read_cache *rc;

	pthread_once(&read_cache_once, read_cache_init);
	rc = pthread_getspecific(read_cache_key);
	if (rc && buf && buf == rc->rc_buf)
		rc->rc_busy = false;
	else
		free(buf);
}

/*
 * Reads value bytes [off, off + len) of the record at loc in b, in whole
 * chunks, and verifies them (see kv_bucket_read).
 */
int kv_bkt_read_value(struct kv_bucket_set *bs, struct kv_bucket *b, struct kv_bkt_rwin *w,
		      const struct kv_loc *loc, const uint64_t *csums, uint64_t off, uint64_t len,
		      void **buf, char **data, uint64_t *n)
{
	uint64_t c0, c1, start, bytes;
	int err;

	*buf = NULL;
	*n = 0;
	if (off >= loc->kl_len || len == 0)
		return 0;
	if (len > loc->kl_len - off)
		len = loc->kl_len - off;
	c0 = off / CHUNK;
	c1 = (off + len + CHUNK - 1) / CHUNK;
	start = c0 * CHUNK;
	bytes = (c1 * CHUNK < loc->kl_len ? c1 * CHUNK : loc->kl_len) - start;
	*buf = read_buf(ROUND_UP(bytes));
	if (!*buf)
		return -ENOMEM;
	err = win_read(b, w, *buf, ROUND_UP(bytes), loc->kl_off + loc->kl_head_len + start);
	if (!err)
		err = kv_bkt_verify(bs, *buf, bytes, c0, csums);
	if (err) {
		kv_bucket_read_free(*buf);
		*buf = NULL;
		return err == -ENOMEM ? err : -EIO;
	}
	atomic_fetch_add(&bs->bs_read, ROUND_UP(bytes));
	*data = (char *)*buf + (off - start);
	*n = len;
	return 0;
}
