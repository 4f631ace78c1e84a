/* SPDX-License-Identifier: MIT */
/*
 * ssd/aio.h — batched asynchronous O_DIRECT I/O on libaio.
 *
 * One kv_aio owns one kernel AIO context and one reaper thread that
 * collects completions. A caller hands in a batch of operations; they are
 * submitted together (io_submit, several in flight at once, up to the
 * context's depth) and the caller sleeps until every one of them has
 * completed. Many threads may run batches on the same kv_aio at once: each
 * batch waits only for its own operations.
 *
 * Every operation is O_DIRECT-shaped: the file offset, every buffer address
 * and every buffer length are multiples of KV_AIO_ALIGN. The fd must have
 * been opened with O_DIRECT.
 *
 * A batch may also run in the background: kv_aio_start submits it and
 * returns, kv_aio_done asks whether it has completed, kv_aio_wait waits
 * for it and ends it (read-ahead, core/readahead.c).
 *
 * Thread-safety: kv_aio_run and kv_aio_start may be called from any number
 * of threads; a started batch may be asked about and waited for from any
 * thread, waited for exactly once; kv_aio_destroy must be the last call,
 * when no batch is running or started and not yet waited for.
 */
#ifndef KVFS_SSD_AIO_H
#define KVFS_SSD_AIO_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#define KV_AIO_ALIGN 4096u

struct kv_aio;

struct kv_aio_op {
	int kao_fd;
	bool kao_write;		     /* true: pwritev, false: preadv */
	uint64_t kao_off;	     /* file offset, KV_AIO_ALIGN aligned */
	const struct iovec *kao_iov; /* aligned buffers, aligned lengths */
	int kao_iovcnt;		     /* 1..IOV_MAX */
	ssize_t kao_res;	     /* out: bytes moved, or -errno */
};

/*
 * Creates a context with room for `depth` operations in flight (at least
 * 1) and starts its reaper thread. Returns 0, -EAGAIN when the kernel's
 * aio-max-nr is exhausted, or another -errno.
 */
int kv_aio_create(struct kv_aio **out, unsigned depth);

/* Stops the reaper and frees the context. */
void kv_aio_destroy(struct kv_aio *aio);

/*
 * Submits ops[0..n) and waits until all have completed; a batch larger
 * than the depth is fed in as room frees up. Sets each op's kao_res.
 * Returns 0 when every op moved all its bytes, else the first failure in
 * array order: its -errno, or -EIO for a short transfer (-ENOSPC for a
 * short write on a full device). Misaligned ops fail with -EINVAL without
 * being submitted.
 */
int kv_aio_run(struct kv_aio *aio, struct kv_aio_op *ops, unsigned n);

/* A batch started by kv_aio_start, until kv_aio_wait ends it. */
struct kv_aio_batch;

/*
 * Submits ops[0..n) (n >= 1) as kv_aio_run does, and returns without
 * waiting for them: *out is the batch, to be ended by kv_aio_wait, and
 * until then ops and their buffers belong to it. Returns 0, or -EINVAL
 * (a misaligned op) or -ENOMEM, and then nothing was submitted and there
 * is no batch to wait for. An op the kernel refuses is not an error here:
 * kv_aio_wait reports it.
 */
int kv_aio_start(struct kv_aio *aio, struct kv_aio_op *ops, unsigned n, struct kv_aio_batch **out);

/* True when every op of b has completed (kv_aio_wait will not sleep). Does not end b. */
bool kv_aio_done(struct kv_aio *aio, struct kv_aio_batch *b);

/* Waits for b's ops, frees b and returns what kv_aio_run would have. */
int kv_aio_wait(struct kv_aio *aio, struct kv_aio_batch *b);

#endif
