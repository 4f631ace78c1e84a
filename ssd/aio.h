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
 * Thread-safety: kv_aio_run may be called from any number of threads;
 * kv_aio_destroy must be the last call, when no batch is running.
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

#endif
