/* SPDX-License-Identifier: MIT */
/*
 * ssd/aio.c — batched O_DIRECT I/O on one libaio context. The contract is in
 * ssd/aio.h.
 *
 * Slots. The context is set up for ka_depth operations, and ka_free counts
 * the slots no operation holds. A submitter reserves up to ka_free slots,
 * io_submits that many iocbs, and gives back at once whatever the kernel did
 * not take; the reaper gives a slot back for every completion it collects.
 * So at most ka_depth operations are in flight across all callers, and a
 * batch larger than that is fed in as completions free room.
 *
 * Completions. The reaper thread loops on io_getevents. Every submitted
 * iocb's data points at its struct kv_aio_req, which names the caller's op
 * and its batch: the reaper stores the result in the op and counts the batch
 * down, waking its caller at zero. A batch and its reqs live in the frame of
 * the kv_aio_run call that owns them, or, for kv_aio_start, in one
 * allocation that kv_aio_wait frees; either returns (frees) only after it
 * saw kb_inflight at zero under ka_lock, so the reaper never touches a batch
 * after its last completion.
 *
 * Shutdown. kv_aio_destroy sets ka_stop and submits a poll for POLLOUT on an
 * eventfd, which is always ready and completes at once, so the reaper leaves
 * io_getevents promptly; its timeout bounds the wait should that submission
 * fail.
 */
#include "ssd/aio.h"

#include <errno.h>
#include <libaio.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define KV_AIO_REAP	 64		      /* events collected per io_getevents */
#define KV_AIO_REAP_NS	 (100 * 1000 * 1000L) /* reaper's io_getevents timeout */
#define KV_AIO_STACK_OPS 8		      /* batches this small need no allocation */
/* The most one read or write moves: the kernel's MAX_RW_COUNT on 4 KiB pages. */
#define KV_AIO_MAX_OP_LEN (INT_MAX & ~(KV_AIO_ALIGN - 1))

/*
 * ka_ctx, ka_depth, ka_wakefd and ka_reaper are immutable after
 * kv_aio_create; ka_wake is used once, by kv_aio_destroy. ka_lock guards ka_free and ka_reaped, and
 * also, in every batch running on this context, kb_inflight and the kao_res of its ops that were
 * submitted. It is a leaf lock: nothing else is taken while it is held. ka_room is broadcast, under
 * ka_lock, whenever ka_free or ka_reaped changes. ka_stop is written once, by kv_aio_destroy, and
 * read by the reaper.
 */
struct kv_aio {
	io_context_t ka_ctx;
	unsigned ka_depth;
	int ka_wakefd;	     /* an eventfd, only ever polled for POLLOUT */
	struct iocb ka_wake; /* the poll that wakes the reaper at shutdown */
	pthread_t ka_reaper;
	_Atomic bool ka_stop;
	pthread_mutex_t ka_lock;
	pthread_cond_t ka_room;
	unsigned ka_free;   /* slots not held by any operation */
	uint64_t ka_reaped; /* io_getevents rounds that collected completions */
};

/*
 * One kv_aio_run call, or one started batch. kb_inflight is under ka_lock;
 * the rest is set before submission and immutable until the batch ends.
 */
struct kv_aio_batch {
	pthread_cond_t kb_done; /* signalled when kb_inflight drops to 0 */
	unsigned kb_inflight;	/* slots held: by ops in flight, or reserved for submission */
	struct kv_aio_op *kb_ops;
	struct kv_aio_req *kb_reqs;
	unsigned kb_n;
};

/* One operation of a batch; kr_iocb.data points back at it. */
struct kv_aio_req {
	struct iocb kr_iocb;
	struct kv_aio_op *kr_op;
	struct kv_aio_batch *kr_batch;
	size_t kr_len; /* bytes the op should move */
};

/* Stores the results of n events and gives their slots back. */
static void reap_events(struct kv_aio *aio, struct io_event *evs, int n)
{
	unsigned done = 0;

	pthread_mutex_lock(&aio->ka_lock);
	for (int i = 0; i < n; i++) {
		struct kv_aio_req *r = evs[i].data;
		struct kv_aio_batch *b;

		if (!r)
			continue; /* the shutdown poll */
		b = r->kr_batch;
		r->kr_op->kao_res = (long)evs[i].res;
		if (--b->kb_inflight == 0)
			pthread_cond_signal(&b->kb_done);
		done++;
	}
	if (done) {
		aio->ka_free += done;
		aio->ka_reaped++;
		pthread_cond_broadcast(&aio->ka_room);
	}
	pthread_mutex_unlock(&aio->ka_lock);
}

/* The reaper: collects completions until kv_aio_destroy sets ka_stop. */
static void *reaper_main(void *arg)
{
	struct kv_aio *aio = arg;
	struct io_event evs[KV_AIO_REAP];

	while (!atomic_load_explicit(&aio->ka_stop, memory_order_acquire)) {
		struct timespec ts = {.tv_sec = 0, .tv_nsec = KV_AIO_REAP_NS};
		int got = io_getevents(aio->ka_ctx, 1, KV_AIO_REAP, evs, &ts);

		if (got > 0) {
			reap_events(aio, evs, got);
		} else if (got < 0 && got != -EINTR) {
			/* Only a corrupt context gets here; its I/O can never be reaped. */
			fprintf(stderr, "kv_aio: io_getevents: %s\n", strerror(-got));
			abort();
		}
	}
	return NULL;
}

int kv_aio_create(struct kv_aio **out, unsigned depth)
{
	struct kv_aio *aio;
	int rc;

	if (!out || depth == 0 || depth > INT_MAX)
		return -EINVAL;
	aio = calloc(1, sizeof(*aio));
	if (!aio)
		return -ENOMEM;
	aio->ka_depth = depth;
	aio->ka_free = depth;
	atomic_init(&aio->ka_stop, false);

	rc = -pthread_mutex_init(&aio->ka_lock, NULL);
	if (rc)
		goto out_free;
	rc = -pthread_cond_init(&aio->ka_room, NULL);
	if (rc)
		goto out_destroy_lock;
	aio->ka_wakefd = eventfd(0, EFD_CLOEXEC);
	if (aio->ka_wakefd < 0) {
		rc = -errno;
		goto out_destroy_room;
	}
	rc = io_setup((int)depth, &aio->ka_ctx);
	if (rc)
		goto out_close_wakefd;
	rc = -pthread_create(&aio->ka_reaper, NULL, reaper_main, aio);
	if (rc)
		goto out_io_destroy;
	*out = aio;
	return 0;

out_io_destroy:
	io_destroy(aio->ka_ctx);
out_close_wakefd:
	close(aio->ka_wakefd);
out_destroy_room:
	pthread_cond_destroy(&aio->ka_room);
out_destroy_lock:
	pthread_mutex_destroy(&aio->ka_lock);
out_free:
	free(aio);
	return rc;
}

void kv_aio_destroy(struct kv_aio *aio)
{
	struct iocb *wake;

	if (!aio)
		return;
	atomic_store_explicit(&aio->ka_stop, true, memory_order_release);
	wake = &aio->ka_wake;
	io_prep_poll(wake, aio->ka_wakefd, POLLOUT);
	io_submit(aio->ka_ctx, 1, &wake); /* on failure the reaper's timeout still ends it */
	pthread_join(aio->ka_reaper, NULL);
	io_destroy(aio->ka_ctx);
	close(aio->ka_wakefd);
	pthread_cond_destroy(&aio->ka_room);
	pthread_mutex_destroy(&aio->ka_lock);
	free(aio);
}

/*
 * Returns the number of bytes op moves, or -EINVAL when it is not
 * O_DIRECT-shaped or is longer than one kernel read or write can move.
 */
static ssize_t op_len(const struct kv_aio_op *op)
{
	size_t len = 0;

	if (!op->kao_iov || op->kao_iovcnt < 1 || op->kao_iovcnt > IOV_MAX)
		return -EINVAL;
	if (op->kao_off % KV_AIO_ALIGN || op->kao_off > INT64_MAX)
		return -EINVAL;
	for (int i = 0; i < op->kao_iovcnt; i++) {
		const struct iovec *v = &op->kao_iov[i];

		if ((uintptr_t)v->iov_base % KV_AIO_ALIGN || v->iov_len % KV_AIO_ALIGN)
			return -EINVAL;
		if (v->iov_len > KV_AIO_MAX_OP_LEN - len)
			return -EINVAL;
		len += v->iov_len;
	}
	return (ssize_t)len;
}

/*
 * Checks every op and prepares its iocb. When any op is malformed, nothing
 * may be submitted: the malformed ops get -EINVAL, the others -ECANCELED.
 */
static int prepare(struct kv_aio_op *ops, unsigned n, struct kv_aio_req *reqs, struct iocb **iocbs,
		   struct kv_aio_batch *b)
{
	bool bad = false;

	for (unsigned i = 0; i < n; i++) {
		struct kv_aio_op *op = &ops[i];
		struct kv_aio_req *r = &reqs[i];
		ssize_t len = op_len(op);

		if (len < 0) {
			op->kao_res = len;
			bad = true;
			continue;
		}
		op->kao_res = 0;
		r->kr_op = op;
		r->kr_batch = b;
		r->kr_len = (size_t)len;
		if (op->kao_write)
			io_prep_pwritev(&r->kr_iocb, op->kao_fd, op->kao_iov, op->kao_iovcnt,
					(long long)op->kao_off);
		else
			io_prep_preadv(&r->kr_iocb, op->kao_fd, op->kao_iov, op->kao_iovcnt,
				       (long long)op->kao_off);
		r->kr_iocb.data = r;
		iocbs[i] = &r->kr_iocb;
	}
	if (!bad)
		return 0;
	for (unsigned i = 0; i < n; i++)
		if (ops[i].kao_res != -EINVAL)
			ops[i].kao_res = -ECANCELED;
	return -EINVAL;
}

/*
 * Submits iocbs[0..n), as many at a time as there are free slots. An iocb
 * the kernel refuses gets the error as its op's kao_res and is skipped,
 * except -EAGAIN (the kernel is short of room), on which we retry after a
 * completion, or fail the op if nothing at all is in flight to wait for.
 */
static void submit_all(struct kv_aio *aio, struct kv_aio_batch *b, struct iocb **iocbs, unsigned n)
{
	unsigned next = 0;

	while (next < n) {
		unsigned got, took;
		uint64_t seen;
		int ret;

		pthread_mutex_lock(&aio->ka_lock);
		while (aio->ka_free == 0)
			pthread_cond_wait(&aio->ka_room, &aio->ka_lock);
		got = n - next < aio->ka_free ? n - next : aio->ka_free;
		aio->ka_free -= got;
		b->kb_inflight += got;
		seen = aio->ka_reaped;
		pthread_mutex_unlock(&aio->ka_lock);

		ret = io_submit(aio->ka_ctx, got, &iocbs[next]);
		took = ret > 0 ? (unsigned)ret : 0;
		next += took;
		if (took == got)
			continue;

		pthread_mutex_lock(&aio->ka_lock);
		aio->ka_free += got - took;
		b->kb_inflight -= got - took;
		pthread_cond_broadcast(&aio->ka_room);
		if (ret == 0)
			ret = -EAGAIN;
		if (ret == -EAGAIN) {
			while (aio->ka_reaped == seen && aio->ka_free < aio->ka_depth)
				pthread_cond_wait(&aio->ka_room, &aio->ka_lock);
			if (aio->ka_reaped != seen)
				ret = 0; /* room was freed: retry */
		}
		pthread_mutex_unlock(&aio->ka_lock);
		if (ret < 0) {
			((struct kv_aio_req *)iocbs[next]->data)->kr_op->kao_res = ret;
			next++;
		}
	}
}

/* Returns the first failure among ops[0..n), in array order, or 0. */
static int first_failure(const struct kv_aio_op *ops, const struct kv_aio_req *reqs, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		if (ops[i].kao_res < 0)
			return (int)ops[i].kao_res;
		if ((size_t)ops[i].kao_res != reqs[i].kr_len)
			return ops[i].kao_write ? -ENOSPC : -EIO;
	}
	return 0;
}

/*
 * Checks and submits b's ops (b's kb_ops, kb_reqs, kb_n set; iocbs room for
 * kb_n pointers). Returns 0 once submitted, or -errno with nothing
 * submitted and kb_done not initialised (each op's kao_res says why).
 */
static int batch_begin(struct kv_aio *aio, struct kv_aio_batch *b, struct iocb **iocbs)
{
	int rc = prepare(b->kb_ops, b->kb_n, b->kb_reqs, iocbs, b);

	if (rc)
		return rc;
	rc = -pthread_cond_init(&b->kb_done, NULL);
	if (rc) {
		for (unsigned i = 0; i < b->kb_n; i++)
			b->kb_ops[i].kao_res = rc;
		return rc;
	}
	submit_all(aio, b, iocbs, b->kb_n);
	return 0;
}

/* Waits for a begun batch's ops; returns its first failure, or 0. */
static int batch_end(struct kv_aio *aio, struct kv_aio_batch *b)
{
	pthread_mutex_lock(&aio->ka_lock);
	while (b->kb_inflight)
		pthread_cond_wait(&b->kb_done, &aio->ka_lock);
	pthread_mutex_unlock(&aio->ka_lock);
	pthread_cond_destroy(&b->kb_done);
	return first_failure(b->kb_ops, b->kb_reqs, b->kb_n);
}

int kv_aio_run(struct kv_aio *aio, struct kv_aio_op *ops, unsigned n)
{
	struct kv_aio_req stack_reqs[KV_AIO_STACK_OPS];
	struct iocb *stack_iocbs[KV_AIO_STACK_OPS];
	struct kv_aio_batch b = {.kb_ops = ops, .kb_reqs = stack_reqs, .kb_n = n};
	struct iocb **iocbs = stack_iocbs;
	int rc;

	if (n == 0)
		return 0;
	if (!aio || !ops)
		return -EINVAL;
	if (n > KV_AIO_STACK_OPS) {
		/* One block: the reqs, then the iocb pointers. */
		b.kb_reqs = calloc(n, sizeof(*b.kb_reqs) + sizeof(*iocbs));
		if (!b.kb_reqs) {
			for (unsigned i = 0; i < n; i++)
				ops[i].kao_res = -ENOMEM;
			return -ENOMEM;
		}
		iocbs = (struct iocb **)(b.kb_reqs + n);
	}
	rc = batch_begin(aio, &b, iocbs);
	if (!rc)
		rc = batch_end(aio, &b);
	if (b.kb_reqs != stack_reqs)
		free(b.kb_reqs);
	return rc;
}

int kv_aio_start(struct kv_aio *aio, struct kv_aio_op *ops, unsigned n, struct kv_aio_batch **out)
{
	struct kv_aio_batch *b;
	int rc;

	if (!aio || !ops || n == 0)
		return -EINVAL;
	/* One block: the batch, its reqs, then the iocb pointers. */
	b = calloc(1, sizeof(*b) + n * (sizeof(*b->kb_reqs) + sizeof(struct iocb *)));
	if (!b)
		return -ENOMEM;
	b->kb_ops = ops;
	b->kb_reqs = (struct kv_aio_req *)(b + 1);
	b->kb_n = n;
	rc = batch_begin(aio, b, (struct iocb **)(b->kb_reqs + n));
	if (rc) {
		free(b);
		return rc;
	}
	*out = b;
	return 0;
}

bool kv_aio_done(struct kv_aio *aio, struct kv_aio_batch *b)
{
	bool done;

	pthread_mutex_lock(&aio->ka_lock);
	done = b->kb_inflight == 0;
	pthread_mutex_unlock(&aio->ka_lock);
	return done;
}

int kv_aio_wait(struct kv_aio *aio, struct kv_aio_batch *b)
{
	int rc = batch_end(aio, b);

	free(b);
	return rc;
}
