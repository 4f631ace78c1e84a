/* SPDX-License-Identifier: MIT */
/*
 * ssd/bucket_compact.c — compaction's side of the bucket set (the policy
 * is core/gc.c's): an output bucket that live records are copied into,
 * checked, through two staging buffers, yielding to foreground I/O, then
 * committed (sealed) or aborted (removed).
 *
 * Layer: above bucket_recycle.c, bucket_set.c, bucket_seal.c and
 * bucket_io.c.
 * Locks: bs_lock briefly for the table and the counters; never
 * bs_append_lock (an output is never the active bucket). One struct
 * kv_compact is used by one thread at a time.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ssd/bucket_int.h"
#include "ssd/fileio.h"

/*
 * The output is written through a staging buffer: each record is read
 * whole (head and value, one read), checked in the buffer, and the buffer
 * goes to the output in one write when full — a few large sequential I/Os
 * instead of four small ones per record. A record larger than the buffer
 * is copied in pieces, straight through.
 *
 * There are two such buffers. Unless the compaction yields (below), a
 * full one goes to the output in the background (libaio) while the
 * records of the next are read into the other: a disk that reads and
 * writes at once (most do, virtual ones too) copies at the pace of the
 * slower of the two instead of their sum. One write is in flight at most;
 * the next flush, the commit and the abort wait for it.
 */
#define STAGE (8u << 20)

/* A stage's buffer: STAGE bytes and the zeroed block that follows them in a recycled output. */
#define HALF (STAGE + KV_BLOCK)

/*
 * A compaction that yields to foreground I/O, while a foreground read or
 * append began in the last FG_QUIET_NS, has at most GC_IO bytes in flight
 * (one I/O of at most GC_IO, a record larger than that read in pieces):
 * a read that arrives meanwhile waits behind one small transfer, not
 * behind megabytes already queued in the device. Disks that serve one
 * request at a time (virtual disks often do) make that wait the whole
 * transfer: 64 KiB is about what a 4 KiB read costs itself, so a read's
 * latency at most doubles while one is in the way, where a 256 KiB
 * transfer tripled it. Otherwise (nothing else uses the disk, or writers
 * wait for the pass) it moves STAGE bytes at a time.
 */
#define GC_IO (64u << 10)

#define FG_QUIET_NS (20ull * 1000 * 1000)

struct kv_compact {
	struct kv_bucket_set *kc_bs;
	struct kv_bucket *kc_b; /* the output: in the table, kb_compacting, never bs_active */
	char *kc_mem;		/* 2 * HALF bytes, 4 KiB aligned: the two stages */
	char *kc_buf;		/* the stage being filled: a half of kc_mem */
	uint64_t kc_fill;	/* bytes staged, to go at kb_end - kc_fill */
	bool kc_yield;		/* small I/Os while foreground I/O goes on (gc_io) */
	/* the other half, on its way to the output until stage_wait */
	struct kv_aio_batch *kc_wr;
	struct kv_aio_op kc_wr_op;
	struct iovec kc_wr_iov;
};

/* Waits for the stage in flight, if any. Returns 0 or -EIO. */
static int stage_wait(struct kv_compact *c)
{
	int err = 0;

	if (c->kc_wr)
		err = kv_aio_wait(c->kc_bs->bs_aio, c->kc_wr) ? -EIO : 0;
	c->kc_wr = NULL;
	return err;
}

/* Frees c (no stage in flight), keeping its staging buffers for the next compaction. */
static void compact_free(struct kv_compact *c)
{
	free(atomic_exchange(&c->kc_bs->bs_stage, c->kc_mem));
	free(c);
}

/*
 * Gives an output at least its size ahead, sparse (kv_compact_begin says
 * why); a spare's larger file stays as it is. A failure costs nothing else.
 */
static void presize(int fd, uint64_t size)
{
	struct stat st;

	if (fstat(fd, &st) == 0 && (uint64_t)st.st_size >= size)
		return;
	if (ftruncate(fd, (off_t)size) < 0)
		return;
}

int kv_compact_begin(struct kv_bucket_set *bs, bool yield, struct kv_compact **out)
{
	struct kv_compact *c = calloc(1, sizeof(*c));
	struct kv_bucket *b = NULL;
	int err = -ENOMEM;

	if (!c)
		return -ENOMEM;
	c->kc_bs = bs;
	c->kc_yield = yield;
	c->kc_mem = atomic_exchange(&bs->bs_stage, NULL);
	if (!c->kc_mem)
		c->kc_mem = kv_bkt_aligned_buf(2 * (size_t)HALF, false);
	if (!c->kc_mem)
		goto out_free;
	c->kc_buf = c->kc_mem;
	err = kv_bkt_recycle_create(bs, &b);
	if (err)
		err = kv_bkt_create(bs, 0, &b);
	/*
	 * The file at its full size at once, sparse: ext4 runs a direct write
	 * that extends a file synchronously, even through libaio, so a stage
	 * written in the background must land below the end (kv_bkt_seal cuts
	 * the file to its records again; a crash leaves a bucket with no
	 * records, which recovery removes). Should it fail, the writes still
	 * go, one at a time: no error.
	 */
	if (!err)
		presize(b->kb_fd, bs->bs_opts.bo_bucket_size);
	pthread_mutex_lock(&bs->bs_lock);
	if (!err) {
		b->kb_compacting = true;
		b->kb_access_ns = kv_bkt_mono_ns();
		err = kv_bkt_insert(bs, b);
		if (err)
			kv_bkt_free(b);
		else
			bs->bs_used += KV_BLOCK;
	}
	pthread_mutex_unlock(&bs->bs_lock);
	if (err)
		goto out_free;
	c->kc_b = b;
	*out = c;
	return 0;

out_free:
	compact_free(c);
	return err;
}

bool kv_bucket_fg_active(struct kv_bucket_set *bs)
{
	return kv_bkt_mono_ns() - atomic_load_explicit(&bs->bs_fg_ns, memory_order_relaxed) <
	       FG_QUIET_NS;
}

/* The most bytes compaction may have in flight now (see GC_IO). */
static uint64_t gc_io(const struct kv_compact *c)
{
	return c->kc_yield && kv_bucket_fg_active(c->kc_bs) ? GC_IO : STAGE;
}

/*
 * After a compaction's I/O of at most io bytes that began at t0: when it
 * was a yielding one (gc_io() was below STAGE) and foreground I/O goes on,
 * a pause twice as long as the I/O took. The disk and a CPU are then the
 * foreground's at least two thirds of the time, whatever the compaction
 * would take of them (its checksums and copies need a CPU too, and
 * two-core machines have none to spare). Measured (bench.sh gc), the pause
 * took the p99 of 4 KiB reads during a pass from 2-4x idle to about 1.5x;
 * once as long as the I/O left it nearer 1.6x.
 */
static void gc_pause(const struct kv_compact *c, uint64_t io, uint64_t t0)
{
	uint64_t ns;
	struct timespec ts;

	if (io >= STAGE || !kv_bucket_fg_active(c->kc_bs))
		return;
	ns = 2 * (kv_bkt_mono_ns() - t0);
	ts = (struct timespec){.tv_sec = (time_t)(ns / 1000000000u),
			       .tv_nsec = (long)(ns % 1000000000u)};
	nanosleep(&ts, NULL);
}

/*
 * kv_prw_all() (synchronous pread/pwrite: the lowest latency for one I/O;
 * batches go through libaio) in pieces of at most gc_io() bytes, one at a
 * time.
 */
static int gc_rw(const struct kv_compact *c, int fd, bool write, void *buf, uint64_t len,
		 uint64_t off)
{
	uint64_t io;
	int err = 0;

	for (uint64_t done = 0; !err && done < len; done += io) {
		uint64_t t0 = kv_bkt_mono_ns();

		io = gc_io(c);
		err = kv_prw_all(fd, write, (char *)buf + done, len - done < io ? len - done : io,
				 off + done);
		gc_pause(c, io, t0);
	}
	return err;
}

/*
 * Sends what is staged to the output: in the background, the stage
 * switching halves, unless `sync` or the compaction yields (gc_io), then
 * at once in gc_io() pieces. Either way after the stage in flight, which a
 * sync flush leaves none of. Returns 0 or -EIO (this stage's or the one
 * in flight's).
 */
static int stage_flush(struct kv_compact *c, bool sync)
{
	uint64_t at = c->kc_b->kb_end - c->kc_fill, len = c->kc_fill;
	int err = stage_wait(c);

	if (err || !c->kc_fill) {
		c->kc_fill = 0;
		return err;
	}
	if (c->kc_b->kb_recycled) { /* after the last record, no old one (kv_bkt_recycle_create) */
		memset(c->kc_buf + len, 0, KV_BLOCK);
		len += KV_BLOCK;
	}
	if (sync || gc_io(c) < STAGE) {
		err = gc_rw(c, c->kc_b->kb_fd, true, c->kc_buf, len, at) ? -EIO : 0;
	} else {
		c->kc_wr_iov = (struct iovec){.iov_base = c->kc_buf, .iov_len = len};
		c->kc_wr_op = (struct kv_aio_op){.kao_fd = c->kc_b->kb_fd,
						 .kao_write = true,
						 .kao_off = at,
						 .kao_iov = &c->kc_wr_iov,
						 .kao_iovcnt = 1};
		err = kv_aio_start(c->kc_bs->bs_aio, &c->kc_wr_op, 1, &c->kc_wr) ? -EIO : 0;
		if (err)
			c->kc_wr = NULL;
		c->kc_buf = c->kc_buf == c->kc_mem ? c->kc_mem + HALF : c->kc_mem;
	}
	c->kc_fill = 0;
	return err;
}

/* Checks a whole record (head and value) in buf against `from`. Returns 0 or -EBADMSG. */
static int record_check(struct kv_bucket_set *bs, const char *buf, const struct kv_loc *from)
{
	struct kv_rec_head h;
	uint64_t *csums;
	int err = kv_bkt_head_check(buf, from->kl_head_len);

	if (!err) {
		kv_bkt_head_get(buf, &h);
		err = kv_bkt_head_is(&h, from) ? 0 : -EIO;
	}
	if (err) {
		atomic_fetch_add(&bs->bs_csum_errors, 1);
		return -EBADMSG;
	}
	/* The checksums follow the key in the head: copied out, 8-byte aligned. */
	csums = kv_bkt_head_csums(buf);
	if (!csums)
		return -ENOMEM;
	err = kv_bkt_verify(bs, buf + from->kl_head_len, from->kl_len, 0, csums) ? -EBADMSG : 0;
	free(csums);
	return err;
}

/*
 * Copies a record larger than the staging buffer, piece by piece, checked
 * on the way. Sets *headp to its head (malloc'ed) on success.
 */
static int copy_large(struct kv_compact *c, struct kv_bucket *src, const struct kv_loc *from,
		      void **headp)
{
	struct kv_bucket_set *bs = c->kc_bs;
	struct kv_bucket *b = c->kc_b;
	uint64_t at = b->kb_end + from->kl_head_len, *csums;
	struct kv_rec_head h;
	void *head;
	int err;

	err = kv_bkt_read_head(bs, src, NULL, from->kl_off, &head);
	if (err) {
		atomic_fetch_add(&bs->bs_csum_errors, 1);
		return err == -ENOMEM ? err : -EBADMSG;
	}
	kv_bkt_head_get(head, &h);
	if (!kv_bkt_head_is(&h, from)) {
		atomic_fetch_add(&bs->bs_csum_errors, 1);
		free(head);
		return -EBADMSG;
	}
	csums = kv_bkt_head_csums(head);
	if (!csums) {
		free(head);
		return -ENOMEM;
	}
	/* Errors writing the output are -EIO; the record's own (unreadable, damaged) -EBADMSG. */
	err = gc_rw(c, b->kb_fd, true, head, from->kl_head_len, b->kb_end) ? -EIO : 0;
	for (uint64_t off = 0; !err && off < from->kl_len; off += STAGE) {
		uint64_t n = from->kl_len - off < STAGE ? from->kl_len - off : STAGE;

		if (gc_rw(c, src->kb_fd, false, c->kc_buf, ROUND_UP(n),
			  from->kl_off + from->kl_head_len + off) ||
		    kv_bkt_verify(bs, c->kc_buf, n, off / CHUNK, csums))
			err = -EBADMSG;
		else if (gc_rw(c, b->kb_fd, true, c->kc_buf, ROUND_UP(n), at + off))
			err = -EIO;
	}
	free(csums);
	if (err)
		free(head);
	else
		*headp = head;
	return err;
}

/*
 * Takes a checked record at `rec` (its head at least) into the output's
 * index and counts; `staged`: its bytes wait in the stage to be written
 * (bs_lock not held).
 */
static int take(struct kv_compact *c, const char *rec, const struct kv_loc *from, struct kv_loc *to,
		bool staged)
{
	struct kv_bucket_set *bs = c->kc_bs;
	struct kv_bucket *b = c->kc_b;
	uint64_t size = kv_loc_size(from);
	struct kv_rec_head h;
	size_t slen = kv_bkt_head_get(rec, &h);
	int err;

	*to = *from;
	to->kl_bucket = b->kb_id;
	to->kl_off = b->kb_end;
	err = kv_bkt_idx_add(b, to, h.rh_flags, rec + slen, h.rh_key_len);
	if (err)
		return err;
	if (staged)
		c->kc_fill += size;
	pthread_mutex_lock(&bs->bs_lock);
	b->kb_end += size;
	b->kb_count++;
	b->kb_idx_bytes += kv_bkt_idx_bytes(h.rh_key_len);
	bs->bs_used += size;
	pthread_mutex_unlock(&bs->bs_lock);
	return 0;
}

/*
 * Copies one record larger than the stage (kv_compact_copy_many copies the
 * others): 0, -EBADMSG, -ENOSPC (output full) or -errno.
 */
static int copy_one(struct kv_compact *c, const struct kv_loc *from, struct kv_loc *to)
{
	struct kv_bucket_set *bs = c->kc_bs;
	struct kv_bucket *b = c->kc_b, *src;
	uint64_t size = kv_loc_size(from);
	void *head = NULL;
	int err;

	if (b->kb_count && (b->kb_end + size > bs->bs_opts.bo_bucket_size ||
			    b->kb_count >= bs->bs_opts.bo_bucket_keys))
		return -ENOSPC;
	src = kv_bkt_get(bs, from, 0);
	if (!src)
		return -ENOENT;
	/*
	 * The stage written first, and landed (a sync flush): its write may
	 * end with a zeroed block (a recycled output) where the record's head
	 * goes.
	 */
	err = stage_flush(c, true);
	if (!err)
		err = copy_large(c, src, from, &head);
	kv_bkt_release(bs, src);
	if (!err && b->kb_recycled) { /* after the record, no old one (kv_bkt_recycle_create) */
		memset(c->kc_buf, 0, KV_BLOCK); /* copy_large is done with the stage */
		if (gc_rw(c, b->kb_fd, true, c->kc_buf, KV_BLOCK, b->kb_end + size))
			err = -EIO;
	}
	if (!err)
		err = take(c, head, from, to, false);
	free(head);
	return err;
}

#define MANY 32 /* records read at once (gc_io() bytes at most, unless one is larger) */

int kv_compact_copy_many(struct kv_compact *c, const struct kv_loc *from, struct kv_loc *to,
			 int *errs, unsigned n)
{
	struct kv_bucket_set *bs = c->kc_bs;
	const struct kv_bucket_opts *o = &bs->bs_opts;
	struct kv_bucket *b = c->kc_b, *src[MANY];
	struct kv_aio_op ops[MANY];
	struct iovec iov[MANY];
	uint64_t end = b->kb_end, count = b->kb_count, fill = c->kc_fill, batch = 0, io = gc_io(c);
	unsigned k = 0;
	int err = 0;

	if (n && kv_loc_size(&from[0]) > STAGE) {
		err = copy_one(c, &from[0], &to[0]);
		errs[0] = err == -EBADMSG ? err : 0;
		return err == -ENOSPC ? 0 : err && err != -EBADMSG ? err : 1;
	}
	if (n && fill + kv_loc_size(&from[0]) > STAGE) {
		err = stage_flush(c, false);
		if (err)
			return err;
		fill = 0;
	}
	/* As many as fit the output and the staging buffer, read together. */
	while (k < n && k < MANY) {
		uint64_t size = kv_loc_size(&from[k]);

		if (size > STAGE || fill + size > STAGE || (k && batch + size > io) ||
		    (count && (end + size > o->bo_bucket_size || count >= o->bo_bucket_keys)))
			break;
		src[k] = kv_bkt_get(bs, &from[k], 0);
		if (!src[k]) {
			err = -ENOENT;
			break;
		}
		iov[k] = (struct iovec){.iov_base = c->kc_buf + fill, .iov_len = size};
		ops[k] = (struct kv_aio_op){.kao_fd = src[k]->kb_fd,
					    .kao_off = from[k].kl_off,
					    .kao_iov = &iov[k],
					    .kao_iovcnt = 1};
		fill += size;
		batch += size;
		end += size;
		count++;
		k++;
	}
	if (k == 1 && !err && iov[0].iov_len > io) {
		/* Yielding: a record larger than an I/O is read in pieces, one at a time. */
		ops[0].kao_res =
		    gc_rw(c, ops[0].kao_fd, false, iov[0].iov_base, iov[0].iov_len, ops[0].kao_off)
			? -EIO
			: (ssize_t)iov[0].iov_len;
	} else if (k && !err) {
		uint64_t t0 = kv_bkt_mono_ns();

		err = kv_aio_run(bs->bs_aio, ops, k) == -ENOMEM ? -ENOMEM : 0;
		gc_pause(c, io, t0);
	}
	for (unsigned i = 0; i < k; i++)
		kv_bkt_release(bs, src[i]);
	if (err)
		return err;
	/* Check each; the good ones move down over the gaps the damaged leave. */
	for (unsigned i = 0; i < k; i++) {
		char *rec = iov[i].iov_base, *at = c->kc_buf + c->kc_fill;

		errs[i] = ops[i].kao_res == (ssize_t)iov[i].iov_len
			      ? record_check(bs, rec, &from[i])
			      : -EBADMSG;
		if (ops[i].kao_res != (ssize_t)iov[i].iov_len)
			atomic_fetch_add(&bs->bs_csum_errors, 1);
		if (errs[i] == -ENOMEM)
			return -ENOMEM;
		if (errs[i])
			continue;
		if (at != rec)
			memmove(at, rec, iov[i].iov_len);
		err = take(c, at, &from[i], &to[i], true);
		if (err)
			return err;
	}
	return (int)k;
}

uint64_t kv_compact_id(const struct kv_compact *c)
{
	return c->kc_b->kb_id;
}

bool kv_compact_recycled(const struct kv_compact *c)
{
	return c->kc_b->kb_recycled;
}

uint64_t kv_compact_records(const struct kv_compact *c)
{
	return c->kc_b->kb_count;
}

int kv_compact_commit(struct kv_compact *c)
{
	struct kv_bucket_set *bs = c->kc_bs;
	int err = stage_flush(c, true);

	if (!err)
		err = kv_bkt_seal(bs, c->kc_b);
	if (!err && fsync(bs->bs_dirfd) < 0) /* its name: kv_bkt_create did not sync it */
		err = -errno;
	if (err)
		return err;
	pthread_mutex_lock(&bs->bs_lock);
	c->kc_b->kb_compacting = false;
	pthread_mutex_unlock(&bs->bs_lock);
	compact_free(c);
	return 0;
}

void kv_compact_abort(struct kv_compact *c)
{
	struct kv_bucket_set *bs = c->kc_bs;

	stage_wait(c); /* its buffer and the output's fd are the write's until it ends */
	pthread_mutex_lock(&bs->bs_lock);
	kv_bkt_unlink_drained(bs, c->kc_b);
	pthread_mutex_unlock(&bs->bs_lock);
	compact_free(c);
}
