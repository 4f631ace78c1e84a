/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_aio.c — batched O_DIRECT I/O (ssd/aio.h), on real files in
 * a temporary directory under /tmp (which must take O_DIRECT: the tests skip,
 * saying so, where it does not).
 *
 * Data written is a pattern derived from (seed, byte position), so every
 * read back is compared byte for byte with what was meant to be there.
 *
 * The test defines io_submit and io_getevents itself, wrapping libaio's:
 * they count the operations in flight (to check that a context never has
 * more than its depth) and can make the kernel look short of room (partial
 * submissions, -EAGAIN). They tell the shutdown poll of ssd/aio.c from an
 * operation by its iocb's data pointer, which is NULL only for that poll.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <libaio.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ssd/aio.h"

#define KIB   1024u
#define MIB   (1024u * KIB)
#define ALIGN KV_AIO_ALIGN

static char tmpdir[64];
static bool direct_ok; /* tmpdir takes O_DIRECT opens; set once by setup() */

enum inject {
	INJ_NONE,
	INJ_PARTIAL,	 /* io_submit takes only the first half (rounded up) of what it is given */
	INJ_EAGAIN_BUSY, /* every second io_submit fails -EAGAIN, when other ops are in flight */
	INJ_EAGAIN_ALL,	 /* every io_submit fails -EAGAIN */
};

static int (*real_submit)(io_context_t, long, struct iocb **);
static int (*real_getevents)(io_context_t, long, long, struct io_event *, struct timespec *);
static _Atomic int inject;	 /* an enum inject */
static atomic_long inflight;	 /* ops being submitted or not yet reaped: never too few */
static atomic_long max_inflight; /* the most inflight has been since last reset */
static atomic_long injected;	 /* io_submit calls cut short or failed by `inject` */
static atomic_ulong busy_calls;	 /* io_submit calls that INJ_EAGAIN_BUSY considered */

static long count_ops(struct iocb **ios, long n)
{
	long ops = 0;

	for (long i = 0; i < n; i++)
		ops += ios[i]->data != NULL;
	return ops;
}

static void reset_counters(enum inject mode)
{
	atomic_store(&inject, mode);
	atomic_store(&max_inflight, 0);
	atomic_store(&injected, 0);
}

/*
 * Counts ops as in flight before the real call, and takes back those it
 * did not submit after: so `inflight` may run ahead of the kernel's count,
 * never behind it, and max_inflight <= depth proves the kernel's never
 * passed depth.
 */
int io_submit(io_context_t ctx, long nr, struct iocb *ios[])
{
	int mode = atomic_load(&inject);
	long ops, now, max;
	int ret;

	if (mode == INJ_EAGAIN_ALL || (mode == INJ_EAGAIN_BUSY && atomic_load(&inflight) > 0 &&
				       atomic_fetch_add(&busy_calls, 1) % 2 == 0)) {
		atomic_fetch_add(&injected, 1);
		return -EAGAIN;
	}
	if (mode == INJ_PARTIAL && nr > 1) {
		nr = (nr + 1) / 2;
		atomic_fetch_add(&injected, 1);
	}
	ops = count_ops(ios, nr);
	now = atomic_fetch_add(&inflight, ops) + ops;
	max = atomic_load(&max_inflight);
	while (now > max && !atomic_compare_exchange_weak(&max_inflight, &max, now))
		;
	ret = real_submit(ctx, nr, ios);
	atomic_fetch_sub(&inflight, ops - count_ops(ios, ret > 0 ? ret : 0));
	return ret;
}

int io_getevents(io_context_t ctx, long min_nr, long nr, struct io_event *events,
		 struct timespec *timeout)
{
	int ret = real_getevents(ctx, min_nr, nr, events, timeout);
	long ops = 0;

	for (int i = 0; i < ret; i++)
		ops += events[i].data != NULL;
	atomic_fetch_sub(&inflight, ops);
	return ret;
}

/* Skips the calling test, saying why, when tmpdir cannot do O_DIRECT. */
static void require_direct(void)
{
	if (direct_ok)
		return;
	print_message("SKIP: %s does not support O_DIRECT\n", tmpdir);
	skip();
}

/* Opens (creating) tmpdir/name for O_DIRECT reading and writing. */
static int open_direct(const char *name)
{
	char path[128];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
	fd = open(path, O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	return fd;
}

static void *abuf(size_t len)
{
	void *p = NULL;

	assert_int_equal(posix_memalign(&p, ALIGN, len ? len : ALIGN), 0);
	return p;
}

/* Fills buf with the pattern of `seed` for file bytes [off, off + len). */
static void pattern(void *buf, size_t len, uint64_t seed, uint64_t off)
{
	uint64_t *w = buf;

	for (size_t i = 0; i < len / 8; i++) {
		uint64_t x = seed * 0x9e3779b97f4a7c15ull + off + i * 8;

		x ^= x >> 31;
		x *= 0xbf58476d1ce4e5b9ull;
		x ^= x >> 29;
		w[i] = x;
	}
}

/* An op over one or more buffers; they are laid out back to back in the file. */
struct tio {
	struct kv_aio_op op;
	struct iovec iov[4];
	size_t len;
	uint64_t seed;
};

/* Sets t up as a write (or read) of `nseg` buffers of seg bytes at off in fd. */
static void tio_init(struct tio *t, int fd, bool write, uint64_t off, size_t seg, int nseg,
		     uint64_t seed)
{
	memset(t, 0, sizeof(*t));
	assert_true(nseg >= 1 && nseg <= 4);
	for (int i = 0; i < nseg; i++) {
		t->iov[i].iov_base = abuf(seg);
		t->iov[i].iov_len = seg;
		if (write)
			pattern(t->iov[i].iov_base, seg, seed, off + (uint64_t)i * seg);
		else
			memset(t->iov[i].iov_base, 0xa5, seg);
	}
	t->op = (struct kv_aio_op){.kao_fd = fd,
				   .kao_write = write,
				   .kao_off = off,
				   .kao_iov = t->iov,
				   .kao_iovcnt = nseg,
				   .kao_res = -1};
	t->len = seg * (size_t)nseg;
	t->seed = seed;
}

/* Checks that t's buffers hold the pattern its write would have put there. */
static void tio_verify(const struct tio *t)
{
	uint64_t off = t->op.kao_off;

	for (int i = 0; i < t->op.kao_iovcnt; i++) {
		size_t seg = t->iov[i].iov_len;
		void *want = abuf(seg);

		pattern(want, seg, t->seed, off);
		assert_memory_equal(t->iov[i].iov_base, want, seg);
		free(want);
		off += seg;
	}
}

static void tio_free(struct tio *t)
{
	for (int i = 0; i < t->op.kao_iovcnt; i++)
		free(t->iov[i].iov_base);
}

/* Runs the ops of ts[0..n) as one batch. */
static int run_tios(struct kv_aio *aio, struct tio *ts, unsigned n)
{
	struct kv_aio_op *ops = calloc(n, sizeof(*ops));
	int rc;

	assert_non_null(ops);
	for (unsigned i = 0; i < n; i++)
		ops[i] = ts[i].op;
	rc = kv_aio_run(aio, ops, n);
	for (unsigned i = 0; i < n; i++)
		ts[i].op.kao_res = ops[i].kao_res;
	free(ops);
	return rc;
}

/* Every test but test_create_destroy starts here, so it skips here too. */
static struct kv_aio *aio_new(unsigned depth)
{
	struct kv_aio *aio = NULL;

	require_direct();
	assert_int_equal(kv_aio_create(&aio, depth), 0);
	assert_non_null(aio);
	return aio;
}

/*
 * Writes n ops of assorted sizes spread over nfd files, reads them all back
 * as one batch into fresh buffers, and compares.
 */
static void write_read_back(struct kv_aio *aio, const int *fds, unsigned nfd, unsigned n,
			    size_t max_seg, uint64_t seed)
{
	struct tio *w = calloc(n, sizeof(*w)), *r = calloc(n, sizeof(*r));
	uint64_t *end = calloc(nfd, sizeof(*end)), *size = calloc(nfd, sizeof(*size));

	assert_non_null(w);
	assert_non_null(r);
	assert_non_null(end);
	assert_non_null(size);
	for (unsigned i = 0; i < n; i++) {
		unsigned f = i % nfd;
		size_t seg = ((size_t)ALIGN << (i % 9)); /* 4 KiB .. 1 MiB */
		int nseg = 1 + (int)(i / 9 % 3);

		while (seg * (size_t)nseg > max_seg && seg > ALIGN)
			seg /= 2;
		tio_init(&w[i], fds[f], true, end[f], seg, nseg, seed + i);
		tio_init(&r[i], fds[f], false, end[f], seg, nseg, seed + i);
		size[f] = end[f] + w[i].len;
		end[f] = size[f] + (i % 2 ? ALIGN : 0); /* sometimes leave a hole */
	}

	assert_int_equal(run_tios(aio, w, n), 0);
	for (unsigned i = 0; i < n; i++)
		assert_int_equal(w[i].op.kao_res, (ssize_t)w[i].len);
	assert_int_equal(run_tios(aio, r, n), 0);
	for (unsigned i = 0; i < n; i++) {
		assert_int_equal(r[i].op.kao_res, (ssize_t)r[i].len);
		tio_verify(&r[i]);
	}
	for (unsigned f = 0; f < nfd; f++) {
		struct stat st;

		assert_int_equal(fstat(fds[f], &st), 0);
		assert_true((uint64_t)st.st_size >= size[f]); /* more if written before */
	}

	for (unsigned i = 0; i < n; i++) {
		tio_free(&w[i]);
		tio_free(&r[i]);
	}
	free(w);
	free(r);
	free(end);
	free(size);
}

static void test_batch_one_file(void **state)
{
	struct kv_aio *aio = aio_new(64);
	int fd = open_direct("one");

	write_read_back(aio, &fd, 1, 32, 1 * MIB, 1000);
	close(fd);
	kv_aio_destroy(aio);
}

static void test_batch_several_files(void **state)
{
	struct kv_aio *aio = aio_new(32);
	int fds[3] = {open_direct("sev0"), open_direct("sev1"), open_direct("sev2")};

	write_read_back(aio, fds, 3, 32, 1 * MIB, 2000);
	for (int i = 0; i < 3; i++)
		close(fds[i]);
	kv_aio_destroy(aio);
}

/* A single op: the batch size the bucket code uses most. */
static void test_single_op(void **state)
{
	struct kv_aio *aio = aio_new(1);
	int fd = open_direct("single");
	struct tio w, r;

	tio_init(&w, fd, true, 8 * ALIGN, 64 * KIB, 1, 7);
	tio_init(&r, fd, false, 8 * ALIGN, 64 * KIB, 1, 7);
	assert_int_equal(kv_aio_run(aio, &w.op, 1), 0);
	assert_int_equal(w.op.kao_res, 64 * KIB);
	assert_int_equal(kv_aio_run(aio, &r.op, 1), 0);
	assert_int_equal(r.op.kao_res, 64 * KIB);
	tio_verify(&r);
	assert_int_equal(kv_aio_run(aio, NULL, 0), 0);
	tio_free(&w);
	tio_free(&r);
	close(fd);
	kv_aio_destroy(aio);
}

static void test_batch_larger_than_depth(void **state)
{
	struct kv_aio *aio = aio_new(4);
	int fds[2] = {open_direct("deep0"), open_direct("deep1")};

	write_read_back(aio, fds, 2, 64, 64 * KIB, 3000);
	write_read_back(aio, fds, 1, 64, 16 * KIB, 4000); /* overwrites the start of deep0 */
	close(fds[0]);
	close(fds[1]);
	kv_aio_destroy(aio);
}

/* Fills a 64 KiB file with the pattern of seed 99 and returns its O_DIRECT fd. */
static int prefilled(const char *name)
{
	int fd = open_direct(name);
	void *buf = abuf(64 * KIB);

	pattern(buf, 64 * KIB, 99, 0);
	assert_int_equal(pwrite(fd, buf, 64 * KIB, 0), 64 * KIB);
	free(buf);
	return fd;
}

/* Checks that a file made by prefilled() still holds exactly what it did. */
static void assert_prefilled(int fd)
{
	void *buf = abuf(128 * KIB), *want = abuf(64 * KIB);
	struct stat st;

	assert_int_equal(fstat(fd, &st), 0);
	assert_int_equal(st.st_size, 64 * KIB);
	assert_int_equal(pread(fd, buf, 128 * KIB, 0), 64 * KIB);
	pattern(want, 64 * KIB, 99, 0);
	assert_memory_equal(buf, want, 64 * KIB);
	free(buf);
	free(want);
}

/*
 * Runs batches of 2 and of 12 ops, all well formed but `bad`, which sits
 * first or last: each batch must fail with -EINVAL as a whole, marking the
 * bad op -EINVAL and the others -ECANCELED, and write nothing.
 */
static void check_rejected(struct kv_aio *aio, int fd, struct kv_aio_op bad)
{
	static const unsigned sizes[] = {2, 12};
	struct kv_aio_op ops[12];
	struct tio good;

	tio_init(&good, fd, true, 0, 16 * KIB, 2, 5);
	for (unsigned s = 0; s < 2; s++) {
		unsigned n = sizes[s];

		for (unsigned bad_at = 0; bad_at < n; bad_at += n - 1) {
			for (unsigned i = 0; i < n; i++) {
				ops[i] = i == bad_at ? bad : good.op;
				ops[i].kao_res = 12345;
			}
			assert_int_equal(kv_aio_run(aio, ops, n), -EINVAL);
			for (unsigned i = 0; i < n; i++)
				assert_int_equal(ops[i].kao_res,
						 i == bad_at ? -EINVAL : -ECANCELED);
			assert_prefilled(fd);
		}
	}
	tio_free(&good);
}

static void test_misaligned(void **state)
{
	struct kv_aio *aio = aio_new(8);
	int fd = prefilled("misaligned");
	char *buf = abuf(64 * KIB);
	struct iovec iov[2];
	struct iovec *many;
	struct kv_aio_op op = {
	    .kao_fd = fd, .kao_write = true, .kao_off = 0, .kao_iov = iov, .kao_iovcnt = 1};

	memset(buf, 0x5a, 64 * KIB);

	/* Offset. */
	iov[0] = (struct iovec){.iov_base = buf, .iov_len = 8 * KIB};
	op.kao_off = 512;
	check_rejected(aio, fd, op);
	op.kao_off = ALIGN + 1;
	check_rejected(aio, fd, op);
	op.kao_off = 0;

	/* Buffer address, in the first or a later iovec. */
	iov[0].iov_base = buf + 512;
	check_rejected(aio, fd, op);
	iov[0].iov_base = buf;
	iov[1] = (struct iovec){.iov_base = buf + 8 * KIB + 2048, .iov_len = 8 * KIB};
	op.kao_iovcnt = 2;
	check_rejected(aio, fd, op);
	iov[1].iov_base = buf + 8 * KIB;

	/* Length, in the first or a later iovec. */
	iov[0].iov_len = 512;
	check_rejected(aio, fd, op);
	iov[0].iov_len = 8 * KIB;
	iov[1].iov_len = 8 * KIB + 512;
	check_rejected(aio, fd, op);
	iov[1].iov_len = 8 * KIB;

	/* iovcnt out of 1..IOV_MAX, and no iovec at all. */
	op.kao_iovcnt = 0;
	check_rejected(aio, fd, op);
	many = calloc(IOV_MAX + 1, sizeof(*many));
	assert_non_null(many);
	for (int i = 0; i <= IOV_MAX; i++)
		many[i] = (struct iovec){.iov_base = buf, .iov_len = ALIGN};
	op.kao_iov = many;
	op.kao_iovcnt = IOV_MAX + 1;
	check_rejected(aio, fd, op);
	op.kao_iov = NULL;
	op.kao_iovcnt = 1;
	check_rejected(aio, fd, op);

	/* The same op, well formed, goes through: the rejections were the shape's. */
	op.kao_iov = iov;
	op.kao_iovcnt = 2;
	assert_int_equal(kv_aio_run(aio, &op, 1), 0);
	assert_int_equal(op.kao_res, 16 * KIB);

	free(many);
	free(buf);
	close(fd);
	kv_aio_destroy(aio);
}

static void test_read_past_eof(void **state)
{
	struct kv_aio *aio = aio_new(8);
	int fd = prefilled("eof"); /* 64 KiB */
	void *want = abuf(8 * KIB);
	struct tio r[3];
	struct kv_aio_op ops[3];

	/* Straddling EOF: the bytes before it arrive, the read is short. */
	tio_init(&r[0], fd, false, 56 * KIB, 32 * KIB, 1, 99);
	assert_int_equal(kv_aio_run(aio, &r[0].op, 1), -EIO);
	assert_int_equal(r[0].op.kao_res, 8 * KIB);
	pattern(want, 8 * KIB, 99, 56 * KIB);
	assert_memory_equal(r[0].iov[0].iov_base, want, 8 * KIB);

	/* Wholly past EOF: nothing arrives. */
	tio_init(&r[1], fd, false, 1 * MIB, 8 * KIB, 2, 99);
	assert_int_equal(kv_aio_run(aio, &r[1].op, 1), -EIO);
	assert_int_equal(r[1].op.kao_res, 0);

	/* In a batch, the good read is whole and the first failure is returned. */
	tio_init(&r[2], fd, false, 0, 16 * KIB, 2, 99);
	ops[0] = r[2].op;
	ops[1] = r[1].op;
	ops[2] = r[0].op;
	assert_int_equal(kv_aio_run(aio, ops, 3), -EIO);
	assert_int_equal(ops[0].kao_res, 32 * KIB);
	assert_int_equal(ops[1].kao_res, 0);
	assert_int_equal(ops[2].kao_res, 8 * KIB);
	tio_verify(&r[2]);

	for (int i = 0; i < 3; i++)
		tio_free(&r[i]);
	free(want);
	close(fd);
	kv_aio_destroy(aio);
}

/*
 * Batches in the background (kv_aio_start / kv_aio_done / kv_aio_wait):
 * several started at once, more than the depth (the last submissions wait
 * for room), ended in another order than started; a short read reported
 * by the wait; a misaligned op refused at the start with nothing to wait
 * for.
 */
static void test_start_wait(void **state)
{
	enum { N = 6 };
	struct kv_aio *aio = aio_new(4);
	int fd = open_direct("started");
	int eof = prefilled("started-eof");
	struct kv_aio_batch *b[N], *bad = NULL;
	struct tio w[N], r[N], past;

	for (int i = 0; i < N; i++) {
		tio_init(&w[i], fd, true, (uint64_t)i * 256 * KIB, 64 * KIB, 4, 40 + i);
		assert_int_equal(kv_aio_start(aio, &w[i].op, 1, &b[i]), 0);
	}
	for (int i = N - 1; i >= 0; i--)
		assert_int_equal(kv_aio_wait(aio, b[i]), 0);
	for (int i = 0; i < N; i++) {
		assert_int_equal(w[i].op.kao_res, 256 * KIB);
		tio_init(&r[i], fd, false, (uint64_t)i * 256 * KIB, 64 * KIB, 4, 40 + i);
		assert_int_equal(kv_aio_start(aio, &r[i].op, 1, &b[i]), 0);
	}
	for (int i = 0; i < N; i++) {
		while (!kv_aio_done(aio, b[i]))
			usleep(100);
		assert_true(kv_aio_done(aio, b[i])); /* asking does not end it */
		assert_int_equal(kv_aio_wait(aio, b[i]), 0);
		tio_verify(&r[i]);
	}

	tio_init(&past, eof, false, 56 * KIB, 32 * KIB, 1, 99);
	assert_int_equal(kv_aio_start(aio, &past.op, 1, &b[0]), 0);
	assert_int_equal(kv_aio_wait(aio, b[0]), -EIO);
	assert_int_equal(past.op.kao_res, 8 * KIB);
	tio_free(&past);

	tio_init(&past, fd, false, 100, 4 * KIB, 1, 99);
	assert_int_equal(kv_aio_start(aio, &past.op, 1, &bad), -EINVAL);
	assert_null(bad);
	assert_int_equal(past.op.kao_res, -EINVAL);
	assert_int_equal(kv_aio_start(aio, &past.op, 0, &bad), -EINVAL);
	tio_free(&past);

	for (int i = 0; i < N; i++) {
		tio_free(&w[i]);
		tio_free(&r[i]);
	}
	close(fd);
	close(eof);
	kv_aio_destroy(aio);
}

/*
 * A short write. RLIMIT_FSIZE cuts a write that crosses it short, as a full
 * device would; the file is not preallocated, so the write extends it.
 */
static void test_short_write(void **state)
{
	struct kv_aio *aio = aio_new(4);
	int fd = open_direct("short");
	struct rlimit old, lim;
	void (*old_xfsz)(int);
	struct stat st;
	struct tio w;
	int rc;

	tio_init(&w, fd, true, 8 * KIB, 16 * KIB, 1, 42);
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
	lim = (struct rlimit){.rlim_cur = 12 * KIB, .rlim_max = old.rlim_max};
	old_xfsz = signal(SIGXFSZ, SIG_IGN);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
	rc = kv_aio_run(aio, &w.op, 1);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
	signal(SIGXFSZ, old_xfsz);
	assert_int_equal(rc, -ENOSPC);
	assert_int_equal(w.op.kao_res, 4 * KIB);
	assert_int_equal(fstat(fd, &st), 0);
	assert_int_equal(st.st_size, 12 * KIB);

	tio_free(&w);
	close(fd);
	kv_aio_destroy(aio);
}

static void test_bad_fd(void **state)
{
	struct kv_aio *aio = aio_new(8);
	int fd = open_direct("badfd"), closed = open_direct("closed");
	struct tio t[3];
	struct kv_aio_op ops[3];
	char path[128];
	int rdonly;

	close(closed);
	tio_init(&t[0], fd, true, 0, 8 * KIB, 1, 11);
	tio_init(&t[1], closed, true, 0, 8 * KIB, 1, 12);
	tio_init(&t[2], -1, false, 0, 8 * KIB, 1, 13);

	/* Alone. */
	assert_int_equal(kv_aio_run(aio, &t[1].op, 1), -EBADF);
	assert_int_equal(t[1].op.kao_res, -EBADF);
	assert_int_equal(kv_aio_run(aio, &t[2].op, 1), -EBADF);
	assert_int_equal(t[2].op.kao_res, -EBADF);

	/* Among good ops: they still run. */
	ops[0] = t[1].op;
	ops[1] = t[0].op;
	ops[2] = t[2].op;
	assert_int_equal(kv_aio_run(aio, ops, 3), -EBADF);
	assert_int_equal(ops[0].kao_res, -EBADF);
	assert_int_equal(ops[1].kao_res, 8 * KIB);
	assert_int_equal(ops[2].kao_res, -EBADF);

	/* Writing through a read-only fd. */
	snprintf(path, sizeof(path), "%s/badfd", tmpdir);
	rdonly = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
	assert_true(rdonly >= 0);
	t[0].op.kao_fd = rdonly;
	assert_int_equal(kv_aio_run(aio, &t[0].op, 1), -EBADF);
	assert_int_equal(t[0].op.kao_res, -EBADF);

	for (int i = 0; i < 3; i++)
		tio_free(&t[i]);
	close(rdonly);
	close(fd);
	kv_aio_destroy(aio);
}

#define NTHREADS 8
#define NROUNDS	 6
#define NOPS	 12

struct worker {
	struct kv_aio *aio;
	int fd;
	unsigned id;
	int failed; /* the first bad result, for the main thread to assert on */
};

/* Each round: a batch of writes over this worker's file, then a batch reading them back. */
static void *worker_main(void *arg)
{
	struct worker *wk = arg;

	for (unsigned round = 0; round < NROUNDS && !wk->failed; round++) {
		struct kv_aio_op wops[NOPS], rops[NOPS];
		struct iovec wiov[NOPS], riov[NOPS];
		uint64_t off = 0;

		for (unsigned i = 0; i < NOPS; i++) {
			size_t len = (size_t)ALIGN << (i % 5); /* 4 .. 64 KiB */
			uint64_t seed = (uint64_t)wk->id << 32 | round << 16 | i;
			void *wb = NULL, *rb = NULL;

			if (posix_memalign(&wb, ALIGN, len) || posix_memalign(&rb, ALIGN, len))
				abort();
			pattern(wb, len, seed, off);
			memset(rb, 0, len);
			wiov[i] = (struct iovec){.iov_base = wb, .iov_len = len};
			riov[i] = (struct iovec){.iov_base = rb, .iov_len = len};
			wops[i] = (struct kv_aio_op){.kao_fd = wk->fd,
						     .kao_write = true,
						     .kao_off = off,
						     .kao_iov = &wiov[i],
						     .kao_iovcnt = 1};
			rops[i] = wops[i];
			rops[i].kao_write = false;
			rops[i].kao_iov = &riov[i];
			off += len;
		}
		if (kv_aio_run(wk->aio, wops, NOPS) != 0)
			wk->failed = 1;
		else if (kv_aio_run(wk->aio, rops, NOPS) != 0)
			wk->failed = 2;
		for (unsigned i = 0; i < NOPS && !wk->failed; i++) {
			if (rops[i].kao_res != (ssize_t)riov[i].iov_len ||
			    memcmp(riov[i].iov_base, wiov[i].iov_base, riov[i].iov_len) != 0)
				wk->failed = 3;
		}
		for (unsigned i = 0; i < NOPS; i++) {
			free(wiov[i].iov_base);
			free(riov[i].iov_base);
		}
	}
	return NULL;
}

static void run_workers(struct kv_aio *aio, unsigned n, const char *prefix)
{
	struct worker wk[NTHREADS];
	pthread_t tid[NTHREADS];

	assert_true(n <= NTHREADS);
	for (unsigned t = 0; t < n; t++) {
		char name[32];

		snprintf(name, sizeof(name), "%s%u", prefix, t);
		wk[t] = (struct worker){.aio = aio, .fd = open_direct(name), .id = t};
	}
	for (unsigned t = 0; t < n; t++)
		assert_int_equal(pthread_create(&tid[t], NULL, worker_main, &wk[t]), 0);
	for (unsigned t = 0; t < n; t++)
		assert_int_equal(pthread_join(tid[t], NULL), 0);
	for (unsigned t = 0; t < n; t++) {
		assert_int_equal(wk[t].failed, 0);
		close(wk[t].fd);
	}
}

/* 8 threads, each running batches over its own file, on one context. */
static void test_threads(void **state)
{
	struct kv_aio *aio = aio_new(16);

	run_workers(aio, NTHREADS, "thread");
	kv_aio_destroy(aio);
}

/* The same through a depth-1 context: every op waits for every other. */
static void test_threads_depth_one(void **state)
{
	struct kv_aio *aio = aio_new(1);

	run_workers(aio, 4, "depth1_");
	kv_aio_destroy(aio);
}

/* However many threads, batches and ops there are, at most `depth` are in flight. */
static void test_depth_bound(void **state)
{
	static const unsigned depths[] = {1, 3, 16};

	for (unsigned d = 0; d < 3; d++) {
		struct kv_aio *aio = aio_new(depths[d]);
		int fd = open_direct("bound");

		reset_counters(INJ_NONE);
		write_read_back(aio, &fd, 1, 40, 64 * KIB, 5000 + d);
		assert_int_equal(atomic_load(&max_inflight), depths[d]);
		reset_counters(INJ_NONE);
		run_workers(aio, NTHREADS, "bound_");
		assert_true(atomic_load(&max_inflight) <= depths[d]);
		assert_int_equal(atomic_load(&inflight), 0);
		close(fd);
		kv_aio_destroy(aio);
	}
}

/* The kernel taking fewer iocbs than given: the rest go in later. */
static void test_partial_submit(void **state)
{
	struct kv_aio *aio = aio_new(8);
	int fds[2] = {open_direct("partial0"), open_direct("partial1")};

	reset_counters(INJ_PARTIAL);
	write_read_back(aio, fds, 2, 32, 256 * KIB, 6000);
	assert_true(atomic_load(&injected) > 0);
	assert_true(atomic_load(&max_inflight) <= 8);
	reset_counters(INJ_NONE);
	close(fds[0]);
	close(fds[1]);
	kv_aio_destroy(aio);
}

/*
 * -EAGAIN while other ops are in flight: wait for one to complete and retry.
 * Whether a submission finds others in flight is up to timing, so threads
 * run batches until that has happened a few times.
 */
static void test_eagain_retry(void **state)
{
	struct kv_aio *aio = aio_new(6);

	reset_counters(INJ_EAGAIN_BUSY);
	for (unsigned i = 0; i < 50 && atomic_load(&injected) < 8; i++)
		run_workers(aio, NTHREADS, "eagain_");
	assert_true(atomic_load(&injected) > 0);
	assert_true(atomic_load(&max_inflight) <= 6);
	reset_counters(INJ_NONE);
	kv_aio_destroy(aio);
}

/* -EAGAIN with nothing in flight to wait for: the op fails with it. */
static void test_eagain_idle(void **state)
{
	struct kv_aio *aio = aio_new(4);
	int fd = open_direct("idle");
	struct tio w[2];
	struct kv_aio_op ops[2];
	struct stat st;

	tio_init(&w[0], fd, true, 0, 8 * KIB, 1, 21);
	tio_init(&w[1], fd, true, 8 * KIB, 8 * KIB, 2, 22);
	ops[0] = w[0].op;
	ops[1] = w[1].op;
	reset_counters(INJ_EAGAIN_ALL);
	assert_int_equal(kv_aio_run(aio, ops, 2), -EAGAIN);
	reset_counters(INJ_NONE);
	assert_int_equal(ops[0].kao_res, -EAGAIN);
	assert_int_equal(ops[1].kao_res, -EAGAIN);
	assert_int_equal(fstat(fd, &st), 0);
	assert_int_equal(st.st_size, 0);

	assert_int_equal(kv_aio_run(aio, ops, 2), 0);
	assert_int_equal(ops[0].kao_res, 8 * KIB);
	assert_int_equal(ops[1].kao_res, 16 * KIB);
	tio_free(&w[0]);
	tio_free(&w[1]);
	close(fd);
	kv_aio_destroy(aio);
}

static void test_create_destroy(void **state)
{
	static char sentinel;
	struct kv_aio *untouched = (struct kv_aio *)&sentinel, *aio = untouched;
	int fd, rc;

	require_direct();
	assert_int_equal(kv_aio_create(&aio, 0), -EINVAL);
	assert_int_equal(kv_aio_create(&aio, UINT_MAX), -EINVAL);
	assert_int_equal(kv_aio_create(NULL, 4), -EINVAL);
	/* Far past aio-max-nr (65536 by default), or past the kernel's own cap. */
	rc = kv_aio_create(&aio, 1u << 30);
	assert_true(rc == -EAGAIN || rc == -EINVAL);
	assert_ptr_equal(aio, untouched);

	fd = open_direct("cycle");
	for (unsigned i = 0; i < 50; i++) {
		aio = aio_new(1 + i % 40);
		if (i % 5 == 0) {
			struct tio w;

			tio_init(&w, fd, true, (uint64_t)i * ALIGN, ALIGN, 1, i);
			assert_int_equal(kv_aio_run(aio, &w.op, 1), 0);
			assert_int_equal(w.op.kao_res, ALIGN);
			tio_free(&w);
		}
		kv_aio_destroy(aio);
	}
	kv_aio_destroy(NULL);
	close(fd);
}

static int setup(void **state)
{
	char path[128];
	int fd;

	real_submit = (int (*)(io_context_t, long, struct iocb **))dlsym(RTLD_NEXT, "io_submit");
	real_getevents = (int (*)(io_context_t, long, long, struct io_event *,
				  struct timespec *))dlsym(RTLD_NEXT, "io_getevents");
	if (!real_submit || !real_getevents)
		return -1;
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/kvfs-test-aio-XXXXXX");
	if (!mkdtemp(tmpdir))
		return -1;
	snprintf(path, sizeof(path), "%s/probe", tmpdir);
	fd = open(path, O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
	direct_ok = fd >= 0;
	if (fd >= 0)
		close(fd);
	unlink(path);
	return 0;
}

/* Removes tmpdir and every file the tests left in it. */
static int teardown(void **state)
{
	DIR *dir = opendir(tmpdir);
	struct dirent *de;

	if (!dir)
		return -1;
	while ((de = readdir(dir)) != NULL)
		if (de->d_type != DT_DIR)
			unlinkat(dirfd(dir), de->d_name, 0);
	closedir(dir);
	return rmdir(tmpdir) ? -1 : 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_batch_one_file), cmocka_unit_test(test_batch_several_files),
	    cmocka_unit_test(test_single_op),	   cmocka_unit_test(test_batch_larger_than_depth),
	    cmocka_unit_test(test_misaligned),	   cmocka_unit_test(test_read_past_eof),
	    cmocka_unit_test(test_short_write),	   cmocka_unit_test(test_bad_fd),
	    cmocka_unit_test(test_threads),	   cmocka_unit_test(test_threads_depth_one),
	    cmocka_unit_test(test_depth_bound),	   cmocka_unit_test(test_partial_submit),
	    cmocka_unit_test(test_eagain_retry),   cmocka_unit_test(test_eagain_idle),
	    cmocka_unit_test(test_create_destroy), cmocka_unit_test(test_start_wait),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
