/* SPDX-License-Identifier: MIT */
/*
 * fs/uring.h — FUSE over io_uring: the kernel's requests carried in ring
 * entries instead of read()/writev() on /dev/fuse (Linux 6.14+, with
 * /sys/module/fuse/parameters/enable_uring set).
 *
 * libfuse 3.14 neither speaks it nor can set its INIT flag, so kvfs owns
 * the transport through libfuse's custom I/O hooks and libfuse keeps
 * decoding and dispatching: kv_uring_setup() installs hooks on a mounted
 * session that pass /dev/fuse traffic through unchanged, see the kernel's
 * INIT offer (FUSE_OVER_IO_URING in flags2) and, when kvfs wants it, accept
 * it in the INIT reply and start the queues. From then on:
 *
 *  - one queue per possible CPU (the kernel queues a request on the queue
 *    of the CPU its caller runs on), each with `depth` entries; an entry is
 *    a header buffer, a payload buffer and a thread of its own with an
 *    io_uring of its own (IORING_SETUP_SQE128). The threads are not pinned
 *    to their queue's CPU: pinned, the caller and the thread serving it
 *    take turns on one CPU while the other idles (fio 4 KiB random reads on
 *    2 CPUs: 0.76x the /dev/fuse loop pinned, 1.9x not).
 *    The thread registers the entry (FUSE_IO_URING_CMD_REGISTER, retried
 *    while the kernel answers EAGAIN), then loops: a completion carries a
 *    request; the thread lays the headers in front of the payload, where
 *    libfuse expects one contiguous message, and hands it to
 *    fuse_session_process_buf(), so a WRITE's or an IOCTL's data is read
 *    where the kernel put it; the reply, which the handler's
 *    fuse_reply_*() passes to the writev hook, is laid into the entry's
 *    buffers and committed with the fetch of the next request in one
 *    submission (FUSE_IO_URING_CMD_COMMIT_AND_FETCH), always by the
 *    entry's own thread (the kernel runs the next request's copy in the
 *    submitting task's context);
 *  - FORGET, INTERRUPT and the kernel's requests before the ring is live
 *    still come through /dev/fuse, to libfuse's loop, and notifications
 *    (fuse_lowlevel_notify_*) go out through it;
 *  - a reply bigger than the payload buffer is refused: the request ends
 *    with EIO and the hook returns EMSGSIZE to libfuse;
 *  - an unmount, a kill -9 or the connection's abort ends every pending
 *    command with ENOTCONN: the threads end; kv_uring_stop() tells them to
 *    end (they look every 200 ms) and joins them, before the unmount closes
 *    /dev/fuse, which a request they serve may still write to.
 *
 * Threads: the queues' threads replace none of libfuse's; each serves one
 * request at a time. Locks: ue_lock guards an entry's reply hand-off
 * between a handler replying from another thread and the entry's thread
 * (a leaf lock); u_lock guards the start (a leaf lock taken by the INIT
 * reply's thread).
 */
#ifndef KVFS_FS_URING_H
#define KVFS_FS_URING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

enum kv_uring_mode {
	KV_URING_AUTO, /* io_uring when the kernel offers it, else /dev/fuse */
	KV_URING_ON,   /* io_uring or no mount */
	KV_URING_OFF,  /* /dev/fuse only: no hooks installed */
};

struct kv_uring;

#define KV_URING_STATS_QUEUES 64

/* What kv_uring_stats() reports. */
struct kv_uring_stats {
	bool us_active;		/* the queues serve requests */
	unsigned us_queues;	/* queues (possible CPUs) */
	unsigned us_depth;	/* entries (threads) per queue */
	uint64_t us_ring_reqs;	/* requests served through the ring */
	uint64_t us_dev_reqs;	/* requests read from /dev/fuse */
	uint64_t us_refused;	/* replies too big for the payload buffer */
	uint64_t us_interrupts; /* INTERRUPTs read from /dev/fuse */
	uint64_t us_inplace;	/* replies already in the payload buffer: no copy */
	uint64_t us_q_reqs[KV_URING_STATS_QUEUES]; /* requests per queue (the first ones) */
};

/* True when this kvfs was built with liburing. */
bool kv_uring_built(void);

/*
 * Whether this kernel can carry FUSE over io_uring now: 0, or -EOPNOTSUPP
 * with the reason in why (no liburing in this build, a kernel without
 * it, enable_uring off). Reads /sys/module/fuse/parameters/enable_uring.
 */
int kv_uring_available(char *why, size_t len);

/*
 * Installs the transport's hooks on `se`, mounted (fd: fuse_session_fd):
 * /dev/fuse traffic passes through, the INIT reply accepts io_uring when
 * mode is AUTO or ON and the kernel offered it, and the queues start right
 * after it (threads: the most FUSE worker threads, split over the queues,
 * at least one per queue). `userdata` is what libfuse hands the hooks:
 * the session's userdata, whose struct kv_fs holds *out (kf_uring).
 * 0 or -errno. With mode OFF nothing is installed and *out is NULL.
 */
int kv_uring_setup(struct fuse_session *se, enum kv_uring_mode mode, unsigned threads,
		   struct kv_uring **out);

/*
 * True when --uring=on could not be honoured at INIT (the kernel did not
 * offer io_uring, or no entry could be registered): the INIT reply or the
 * queues failed, the session was told to exit, and kvfs must exit 1.
 */
bool kv_uring_failed(const struct kv_uring *u);

/*
 * The payload buffer of the ring request this thread serves, when it holds
 * len bytes, to build the reply in (fuse_reply_buf with it: no copy); NULL
 * when this thread serves no ring request. 4 KiB aligned (O_DIRECT lands
 * there).
 */
void *kv_uring_payload(size_t len);

/* The counts so far; u may be NULL (--uring=off: all zero). */
void kv_uring_stats(const struct kv_uring *u, struct kv_uring_stats *out);

/*
 * After the session loop ended, before the unmount closes /dev/fuse: ends
 * and joins the queues' threads (each finishes the request it serves; the
 * ring's teardown cancels their pending commands) and frees u. NULL: nothing.
 */
void kv_uring_stop(struct kv_uring *u);

#endif
