/* SPDX-License-Identifier: MIT */
/*
 * fs/uring.c — FUSE over io_uring (see fs/uring.h for the design).
 *
 * The kernel's interface (include/uapi/linux/fuse.h from protocol 7.42,
 * fs/fuse/dev_uring.c for its rules) is newer than the headers of the
 * distribution this builds on (linux-libc-dev 7.38), so the few structs
 * and constants it needs are declared here, checked against the sizes the
 * kernel documents.
 */
#include "fs/uring.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "fs/fs.h"

#ifdef KVFS_HAVE_URING
#include <liburing.h>
#endif

/* --- the kernel's FUSE-over-io_uring ABI (protocol 7.42) --- */

#define KV_FUSE_OVER_IO_URING	  (1ULL << 41) /* INIT flag, bit 9 of flags2 */
#define KV_URING_IN_OUT_HEADER_SZ 128
#define KV_URING_OP_IN_OUT_SZ	  128

enum {
	KV_FUSE_IO_URING_CMD_REGISTER = 1,	   /* register an entry, fetch a request */
	KV_FUSE_IO_URING_CMD_COMMIT_AND_FETCH = 2, /* commit a reply, fetch the next */
};

struct kv_uring_ent_in_out {
	uint64_t flags;
	uint64_t commit_id; /* the request's unique, echoed in the commit */
	uint32_t payload_sz; /* payload bytes, either way */
	uint32_t padding;
	uint64_t reserved;
};

struct kv_uring_req_header {
	char in_out[KV_URING_IN_OUT_HEADER_SZ]; /* fuse_in_header, or our fuse_out_header */
	char op_in[KV_URING_OP_IN_OUT_SZ];	/* the opcode's own header (in_args[0]) */
	struct kv_uring_ent_in_out ring_ent_in_out;
};

/* In the 80 command bytes of a 128-byte SQE. */
struct kv_uring_cmd_req {
	uint64_t flags;
	uint64_t commit_id;
	uint16_t qid;
	uint8_t padding[6];
};

static_assert(sizeof(struct kv_uring_ent_in_out) == 32, "fuse_uring_ent_in_out is 32 bytes");
static_assert(sizeof(struct kv_uring_req_header) == 288, "fuse_uring_req_header is 288 bytes");
static_assert(sizeof(struct kv_uring_cmd_req) == 24, "fuse_uring_cmd_req is 24 bytes");
static_assert(sizeof(struct fuse_in_header) == 40, "fuse_in_header");
static_assert(sizeof(struct fuse_out_header) == 16, "fuse_out_header");
static_assert(offsetof(struct fuse_init_in, flags2) == 16, "fuse_init_in.flags2");
static_assert(offsetof(struct fuse_init_out, flags2) == 32, "fuse_init_out.flags2");

#define ENABLE_URING "/sys/module/fuse/parameters/enable_uring"

/* Room in front of the payload for the headers libfuse wants before it. */
#define PREFIX 4096

struct kv_uring;

struct kv_uring_ent {
	struct kv_uring *ue_u;
	unsigned ue_qid;
	pthread_t ue_thread;
	bool ue_started;
#ifdef KVFS_HAVE_URING
	struct io_uring ue_ring; /* its own: only its thread submits or waits */
#endif
	bool ue_ring_ok;
	struct kv_uring_req_header *ue_hdr;
	char *ue_buf;	  /* PREFIX + payload */
	char *ue_payload; /* ue_buf + PREFIX */
	struct iovec ue_iov[2];
	/* ue_replied: the request's reply is laid in the buffers. The entry's own thread
	 * lays and sets it without a lock; a reply from another thread does so under
	 * ue_lock (a leaf lock) and signals ue_cond, which the entry's thread waits on */
	pthread_mutex_t ue_lock;
	pthread_cond_t ue_cond;
	atomic_bool ue_replied;
	_Atomic uint64_t ue_serving; /* the unique of the request it serves; 0: none */
};

struct kv_uring {
	struct fuse_session *u_se;
	int u_fd; /* the session's /dev/fuse */
	enum kv_uring_mode u_mode;
	unsigned u_nq, u_depth;
	size_t u_payload; /* bytes of each payload buffer: the kernel's max_payload_sz or more */
	struct kv_uring_ent *u_ents; /* u_nq * u_depth, queue-major */
	_Atomic uint64_t u_init_unique; /* the INIT request's, 0 before it */
	_Atomic uint32_t u_init_flags2; /* what the kernel offered */
	_Atomic bool u_init_ext;
	atomic_bool u_active, u_failed, u_stop;
	_Atomic uint64_t u_ring_reqs, u_dev_reqs, u_interrupts, u_refused, u_inplace;
	_Atomic uint64_t *u_q_reqs; /* requests per queue */
	size_t u_reply_max;	   /* the largest reply payload: u_payload (a test build may lower it) */
	/* u_lock guards the start (u_started) */
	pthread_mutex_t u_lock;
	bool u_started;
};

static __thread struct kv_uring_ent *serving; /* the entry this thread serves a request of */

bool kv_uring_built(void)
{
#ifdef KVFS_HAVE_URING
	return true;
#else
	return false;
#endif
}

int kv_uring_available(char *why, size_t len)
{
	char c = 0;
	int fd;

	if (!kv_uring_built()) {
		snprintf(why, len, "this kvfs was built without liburing");
		return -EOPNOTSUPP;
	}
	fd = open(ENABLE_URING, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		snprintf(why, len, "this kernel has no FUSE over io_uring (no %s)", ENABLE_URING);
		return -EOPNOTSUPP;
	}
	if (read(fd, &c, 1) != 1)
		c = 0;
	close(fd);
	if (c != 'Y' && c != '1') {
		snprintf(why, len, "FUSE over io_uring is off in this kernel (%s is %c)",
			 ENABLE_URING, c ? c : '?');
		return -EOPNOTSUPP;
	}
	return 0;
}

/* The kernel's queue count: one per possible CPU, numbered 0..n-1. */
static unsigned possible_cpus(void)
{
	char line[64];
	unsigned lo, hi;
	FILE *f = fopen("/sys/devices/system/cpu/possible", "re");
	int n = 0;

	if (f) {
		if (fgets(line, sizeof(line), f)) {
			if (sscanf(line, "%u-%u", &lo, &hi) == 2 && lo == 0)
				n = (int)hi + 1;
			else if (sscanf(line, "%u", &lo) == 1 && lo == 0)
				n = 1;
		}
		fclose(f);
	}
	return n > 0 ? (unsigned)n : (unsigned)get_nprocs_conf();
}

#ifdef KVFS_HAVE_URING

static void prep_cmd(struct kv_uring_ent *e, struct io_uring_sqe *sqe, uint32_t op,
		     uint64_t commit_id)
{
	struct kv_uring_cmd_req *req = (struct kv_uring_cmd_req *)sqe->cmd;

	memset(sqe, 0, 2 * sizeof(*sqe)); /* SQE128: the command area is the second half */
	sqe->opcode = IORING_OP_URING_CMD;
	sqe->fd = e->ue_u->u_fd;
	sqe->cmd_op = op;
	if (op == KV_FUSE_IO_URING_CMD_REGISTER) {
		sqe->addr = (uint64_t)(uintptr_t)e->ue_iov;
		sqe->len = 2;
	}
	req->commit_id = commit_id;
	req->qid = (uint16_t)e->ue_qid;
	io_uring_sqe_set_data(sqe, e);
}

/*
 * Submits what is queued (if anything) and waits for the next completion,
 * in one system call: its result, or 1 when none came in 200 ms (to look
 * at u_stop).
 */
static int wait_cmd(struct kv_uring_ent *e, int *res)
{
	struct __kernel_timespec ts = {.tv_nsec = 200 * 1000 * 1000};
	struct io_uring_cqe *cqe = NULL;
	int rc = io_uring_submit_and_wait_timeout(&e->ue_ring, &cqe, 1, &ts, NULL);

	if (rc == -ETIME || rc == -EINTR || (rc >= 0 && !cqe))
		return 1;
	if (rc < 0)
		return rc;
	*res = cqe->res;
	io_uring_cqe_seen(&e->ue_ring, cqe);
	return 0;
}

/*
 * Lays the reply `oh` with a payload of `n` bytes in e's buffers: what a
 * handler built in place (kv_uring_payload) stays there, counted.
 */
static void lay_reply(struct kv_uring_ent *e, const struct fuse_out_header *oh,
		      const struct iovec *iov, int count, size_t n)
{
	char *to = e->ue_payload;
	bool moved = false;

	for (int i = 0; i < count; i++) {
		if (iov[i].iov_base != to && iov[i].iov_len) {
			memmove(to, iov[i].iov_base, iov[i].iov_len);
			moved = true;
		}
		to += iov[i].iov_len;
	}
	if (n && !moved)
		atomic_fetch_add_explicit(&e->ue_u->u_inplace, 1, memory_order_relaxed);
	memcpy(e->ue_hdr->in_out, oh, sizeof(*oh));
	e->ue_hdr->ring_ent_in_out.payload_sz = (uint32_t)n;
}

/* A reply for a request that cannot be served: the error alone. */
static void lay_error(struct kv_uring_ent *e, uint64_t unique, int err)
{
	struct fuse_out_header oh = {.len = sizeof(oh), .error = err, .unique = unique};

	lay_reply(e, &oh, NULL, 0, 0);
}

/*
 * Hands the request in e's buffers to libfuse as one message: the headers
 * go right in front of the payload, where the kernel put the rest. Returns
 * once the reply is laid (by this thread or, rarely, another one).
 */
static void serve(struct kv_uring_ent *e)
{
	struct kv_uring *u = e->ue_u;
	struct fuse_in_header ih;
	uint64_t id = e->ue_hdr->ring_ent_in_out.commit_id;
	size_t psz = e->ue_hdr->ring_ent_in_out.payload_sz, opsz;
	struct fuse_buf fb = {0};
	char *msg;

	memcpy(&ih, e->ue_hdr->in_out, sizeof(ih));
	atomic_fetch_add_explicit(&u->u_ring_reqs, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&u->u_q_reqs[e->ue_qid], 1, memory_order_relaxed);
	if (ih.len < sizeof(ih) + psz || psz > u->u_payload ||
	    (opsz = ih.len - sizeof(ih) - psz) > KV_URING_OP_IN_OUT_SZ) {
		lay_error(e, id, -EPROTO);
		return;
	}
	msg = e->ue_payload - sizeof(ih) - opsz;
	memcpy(msg, &ih, sizeof(ih));
	memcpy(msg + sizeof(ih), e->ue_hdr->op_in, opsz);
	fb.mem = msg;
	fb.size = ih.len;
	atomic_store(&e->ue_replied, false);
	atomic_store(&e->ue_serving, id);
	serving = e;
	fuse_session_process_buf(u->u_se, &fb);
	serving = NULL;
	if (!atomic_load(&e->ue_replied)) { /* another thread replies later */
		pthread_mutex_lock(&e->ue_lock);
		while (!atomic_load(&e->ue_replied) && !atomic_load(&u->u_stop))
			pthread_cond_wait(&e->ue_cond, &e->ue_lock);
		pthread_mutex_unlock(&e->ue_lock);
	}
	atomic_store(&e->ue_serving, 0);
}

/*
 * Submits a command and waits for its completion (a command that fetches
 * completes when a request comes); looks at u_stop every 200 ms. 0 with
 * *res, -ECANCELED when stopped, or -errno.
 */
static int run_cmd(struct kv_uring_ent *e, uint32_t op, uint64_t commit_id, int *res)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&e->ue_ring);
	int rc = 0;

	if (!sqe)
		return -EBUSY; /* one command in flight at a time: cannot happen */
	prep_cmd(e, sqe, op, commit_id);
	while (rc == 0 && (rc = wait_cmd(e, res)) == 1)
		rc = atomic_load(&e->ue_u->u_stop) ? -ECANCELED : 0;
	return rc;
}

/* Says why a queue could not start; --uring=on makes it fatal. */
static void queue_failed(struct kv_uring *u, const char *what, int err)
{
	static atomic_bool said;

	if (!atomic_exchange(&said, true))
		fprintf(stderr, "kvfs: FUSE over io_uring: %s: %s%s\n", what, strerror(-err),
			u->u_mode == KV_URING_ON ? "" : "; serving through /dev/fuse");
	if (u->u_mode == KV_URING_ON) {
		atomic_store(&u->u_failed, true);
		fuse_session_exit(u->u_se);
	}
}

static void *ent_main(void *arg)
{
	struct kv_uring_ent *e = arg;
	struct kv_uring *u = e->ue_u;
	int res = 0, rc;

	/* REGISTER answers EAGAIN until the kernel has processed INIT */
	for (;;) {
		rc = run_cmd(e, KV_FUSE_IO_URING_CMD_REGISTER, 0, &res);
		if (rc == 0 && res == -EAGAIN && !atomic_load(&u->u_stop)) {
			nanosleep(&(struct timespec){.tv_nsec = 1000 * 1000}, NULL);
			continue;
		}
		break;
	}
	if (rc == 0 && res < 0)
		rc = res;
	if (rc < 0) {
		if (rc != -ENOTCONN && rc != -ECONNABORTED && rc != -ECANCELED)
			queue_failed(u, "registering an entry", rc);
		return NULL;
	}
	atomic_store(&u->u_active, true);
	for (;;) {
		serve(e);
		rc = run_cmd(e, KV_FUSE_IO_URING_CMD_COMMIT_AND_FETCH,
			     e->ue_hdr->ring_ent_in_out.commit_id, &res);
		if (rc == 0)
			rc = res;
		if (rc < 0)
			return NULL; /* ENOTCONN, ECONNABORTED: the connection ended */
	}
}

/* Buffers and rings for every entry, before INIT accepts io_uring. 0 or -errno. */
static int make_entries(struct kv_uring *u)
{
	size_t n = (size_t)u->u_nq * u->u_depth;

	u->u_ents = calloc(n, sizeof(*u->u_ents));
	if (!u->u_ents)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		struct kv_uring_ent *e = &u->u_ents[i];
		int rc;

		e->ue_u = u;
		e->ue_qid = (unsigned)(i / u->u_depth);
		pthread_mutex_init(&e->ue_lock, NULL);
		pthread_cond_init(&e->ue_cond, NULL);
		rc = io_uring_queue_init(4, &e->ue_ring, IORING_SETUP_SQE128);
		if (rc < 0)
			return rc;
		e->ue_ring_ok = true;
	}
	return 0;
}

/* The payload buffers, sized from the INIT reply. 0 or -ENOMEM. */
static int make_buffers(struct kv_uring *u)
{
	for (size_t i = 0; i < (size_t)u->u_nq * u->u_depth; i++) {
		struct kv_uring_ent *e = &u->u_ents[i];

		if (posix_memalign((void **)&e->ue_hdr, 4096, 4096) ||
		    posix_memalign((void **)&e->ue_buf, 4096, PREFIX + u->u_payload))
			return -ENOMEM;
		memset(e->ue_hdr, 0, sizeof(*e->ue_hdr));
		e->ue_payload = e->ue_buf + PREFIX;
		e->ue_iov[0] = (struct iovec){e->ue_hdr, sizeof(*e->ue_hdr)};
		e->ue_iov[1] = (struct iovec){e->ue_payload, u->u_payload};
	}
	return 0;
}

/* After the INIT reply went out with io_uring accepted: the entries' threads. */
static void start_queues(struct kv_uring *u)
{
	pthread_mutex_lock(&u->u_lock);
	if (!u->u_started) {
		u->u_started = true;
		for (size_t i = 0; i < (size_t)u->u_nq * u->u_depth; i++) {
			struct kv_uring_ent *e = &u->u_ents[i];
			int rc = pthread_create(&e->ue_thread, NULL, ent_main, e);

			if (rc) {
				queue_failed(u, "starting a queue's thread", -rc);
				break;
			}
			e->ue_started = true;
		}
	}
	pthread_mutex_unlock(&u->u_lock);
}

/* The entry serving the request `unique`: this thread's, or one another thread replies to. */
static struct kv_uring_ent *find_entry(struct kv_uring *u, uint64_t unique)
{
	if (serving && atomic_load(&serving->ue_serving) == unique)
		return serving;
	if (!atomic_load(&u->u_active))
		return NULL;
	for (size_t i = 0; i < (size_t)u->u_nq * u->u_depth; i++)
		if (atomic_load(&u->u_ents[i].ue_serving) == unique)
			return &u->u_ents[i];
	return NULL;
}

/* A ring request's reply: laid in its entry, handed to the entry's thread to commit. */
static ssize_t ring_reply(struct kv_uring *u, struct kv_uring_ent *e, struct iovec *iov,
			  int count)
{
	struct fuse_out_header *oh = iov[0].iov_base;
	bool own = serving == e; /* the entry's own thread: nobody waits, no lock */
	size_t n = 0, total;
	ssize_t ret;

	for (int i = 1; i < count; i++)
		n += iov[i].iov_len;
	total = iov[0].iov_len + n;
	if (!own)
		pthread_mutex_lock(&e->ue_lock);
	if (n > u->u_reply_max) {
		atomic_fetch_add_explicit(&u->u_refused, 1, memory_order_relaxed);
		lay_error(e, oh->unique, -EIO);
		errno = EMSGSIZE;
		ret = -1;
	} else {
		lay_reply(e, oh, iov + 1, count - 1, n);
		ret = (ssize_t)total;
	}
	atomic_store(&e->ue_replied, true);
	if (!own) {
		pthread_cond_signal(&e->ue_cond);
		pthread_mutex_unlock(&e->ue_lock);
	}
	return ret;
}

#endif /* KVFS_HAVE_URING */

static struct kv_uring *uring_of(void *userdata)
{
	return userdata ? ((struct kv_fs *)userdata)->kf_uring : NULL;
}

/* A request read from /dev/fuse: INIT's offer is noted. */
static ssize_t hook_read(int fd, void *buf, size_t len, void *userdata)
{
	struct kv_uring *u = uring_of(userdata);
	ssize_t n = read(fd, buf, len); /* as libfuse does: -1 and errno */
	const struct fuse_in_header *ih = buf;

	if (u && n >= (ssize_t)sizeof(*ih)) {
		atomic_fetch_add_explicit(&u->u_dev_reqs, 1, memory_order_relaxed);
		if (ih->opcode == FUSE_INTERRUPT)
			atomic_fetch_add_explicit(&u->u_interrupts, 1, memory_order_relaxed);
		if (u->u_mode != KV_URING_OFF && ih->opcode == FUSE_INIT &&
		    n >= (ssize_t)(sizeof(*ih) + offsetof(struct fuse_init_in, flags2) +
				   sizeof(uint32_t))) {
			const struct fuse_init_in *in = (const void *)(ih + 1);

			atomic_store(&u->u_init_ext, (in->flags & FUSE_INIT_EXT) != 0);
			atomic_store(&u->u_init_flags2, in->flags2);
			atomic_store(&u->u_init_unique, ih->unique);
		}
	}
	return n;
}

/*
 * The INIT reply: accepts io_uring when wanted and offered, and sizes the
 * payload buffers from it (the kernel wants max(8 KiB, max_write,
 * max_pages pages)). Returns whether the queues should start once it is out.
 */
static bool init_reply(struct kv_uring *u, struct iovec *iov, int count)
{
	struct fuse_out_header *oh = iov[0].iov_base;
	struct fuse_init_out *out;
	bool offered = atomic_load(&u->u_init_ext) &&
		       (atomic_load(&u->u_init_flags2) & (KV_FUSE_OVER_IO_URING >> 32));
	size_t payload;

	if (count < 2 || oh->error || iov[1].iov_len < offsetof(struct fuse_init_out, flags2) + 4)
		return false;
	out = iov[1].iov_base;
	if (!offered) {
		if (u->u_mode == KV_URING_ON) {
			fprintf(stderr, "kvfs: --uring=on: the kernel did not offer FUSE over "
					"io_uring at INIT\n");
			atomic_store(&u->u_failed, true);
			oh->error = -EPROTO; /* the mount fails: no request is served */
			fuse_session_exit(u->u_se);
		}
		return false;
	}
	payload = 32 * 4096; /* the kernel's max_pages when the reply sets none */
	if (out->max_write > payload)
		payload = out->max_write;
	if ((size_t)out->max_pages * 4096 > payload)
		payload = (size_t)out->max_pages * 4096;
#ifdef KVFS_HAVE_URING
	u->u_payload = u->u_reply_max = payload;
#ifdef KVFS_FAULTS
	/* a test build: KVFS_FAULT_URING_REPLY_MAX=N refuses replies over N bytes, as if
	 * they outgrew the payload buffer (which no reply the kernel asks for can) */
	if (getenv("KVFS_FAULT_URING_REPLY_MAX") &&
	    strtoull(getenv("KVFS_FAULT_URING_REPLY_MAX"), NULL, 10) < payload)
		u->u_reply_max = strtoull(getenv("KVFS_FAULT_URING_REPLY_MAX"), NULL, 10);
#endif
	if (make_buffers(u)) {
		queue_failed(u, "allocating the ring buffers", -ENOMEM);
		if (u->u_mode == KV_URING_ON)
			oh->error = -ENOMEM;
		return false;
	}
	out->flags |= FUSE_INIT_EXT;
	out->flags2 |= (uint32_t)(KV_FUSE_OVER_IO_URING >> 32);
	return true;
#else
	(void)payload;
	return false;
#endif
}

/* A reply or a notification: into its ring entry, or out through /dev/fuse. */
static ssize_t hook_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	struct kv_uring *u = uring_of(userdata);
	const struct fuse_out_header *oh = iov[0].iov_base;
	bool start = false;
	ssize_t n;

#ifdef KVFS_HAVE_URING
	if (u && oh->unique) {
		struct kv_uring_ent *e = find_entry(u, oh->unique);

		if (e)
			return ring_reply(u, e, iov, count);
	}
#endif
	if (u && oh->unique && oh->unique == atomic_load(&u->u_init_unique))
		start = init_reply(u, iov, count);
	n = writev(fd, iov, count);
#ifdef KVFS_HAVE_URING
	if (start && n >= 0)
		start_queues(u);
#else
	(void)start;
#endif
	return n;
}

int kv_uring_setup(struct fuse_session *se, enum kv_uring_mode mode, unsigned threads,
		   struct kv_uring **out)
{
	static const struct fuse_custom_io io = {.read = hook_read, .writev = hook_writev};
	struct kv_uring *u;
	int rc;

	*out = NULL;
	if (mode == KV_URING_OFF)
		return 0;
	u = calloc(1, sizeof(*u));
	if (!u)
		return -ENOMEM;
	u->u_se = se;
	u->u_fd = fuse_session_fd(se);
	u->u_mode = mode;
	u->u_nq = possible_cpus();
	u->u_depth = threads / u->u_nq ? threads / u->u_nq : 1;
	pthread_mutex_init(&u->u_lock, NULL);
	u->u_q_reqs = calloc(u->u_nq, sizeof(*u->u_q_reqs));
	if (!u->u_q_reqs) {
		kv_uring_stop(u);
		return -ENOMEM;
	}
#ifdef KVFS_HAVE_URING
	rc = make_entries(u);
	if (rc) {
		if (mode == KV_URING_ON) {
			kv_uring_stop(u);
			return rc;
		}
		fprintf(stderr, "kvfs: FUSE over io_uring: cannot set up its rings: %s; serving "
				"through /dev/fuse\n", strerror(-rc));
		u->u_mode = KV_URING_OFF; /* INIT does not accept it */
	}
#else
	if (mode == KV_URING_ON) {
		kv_uring_stop(u);
		return -EOPNOTSUPP;
	}
	u->u_mode = KV_URING_OFF;
#endif
	rc = fuse_session_custom_io(se, &io, u->u_fd);
	if (rc) {
		kv_uring_stop(u);
		return rc < 0 ? rc : -EINVAL;
	}
	*out = u;
	return 0;
}

void *kv_uring_payload(size_t len)
{
#ifdef KVFS_HAVE_URING
	if (serving && len <= serving->ue_u->u_reply_max)
		return serving->ue_payload;
#else
	(void)len;
#endif
	return NULL;
}

bool kv_uring_failed(const struct kv_uring *u)
{
	return u && atomic_load(&u->u_failed);
}

void kv_uring_stats(const struct kv_uring *u, struct kv_uring_stats *s)
{
	memset(s, 0, sizeof(*s));
	if (!u)
		return;
	s->us_active = atomic_load(&u->u_active);
	s->us_queues = u->u_nq;
	s->us_depth = u->u_depth;
	s->us_ring_reqs = atomic_load(&u->u_ring_reqs);
	s->us_dev_reqs = atomic_load(&u->u_dev_reqs);
	s->us_refused = atomic_load(&u->u_refused);
	s->us_interrupts = atomic_load(&u->u_interrupts);
	s->us_inplace = atomic_load(&u->u_inplace);
	for (unsigned q = 0; q < u->u_nq && q < KV_URING_STATS_QUEUES; q++)
		s->us_q_reqs[q] = atomic_load(&u->u_q_reqs[q]);
}

void kv_uring_stop(struct kv_uring *u)
{
	if (!u)
		return;
	atomic_store(&u->u_stop, true);
	for (size_t i = 0; u->u_ents && i < (size_t)u->u_nq * u->u_depth; i++) {
		struct kv_uring_ent *e = &u->u_ents[i];

		pthread_mutex_lock(&e->ue_lock);
		pthread_cond_broadcast(&e->ue_cond);
		pthread_mutex_unlock(&e->ue_lock);
		if (e->ue_started)
			pthread_join(e->ue_thread, NULL);
#ifdef KVFS_HAVE_URING
		if (e->ue_ring_ok)
			io_uring_queue_exit(&e->ue_ring);
#endif
		pthread_cond_destroy(&e->ue_cond);
		pthread_mutex_destroy(&e->ue_lock);
		free(e->ue_hdr);
		free(e->ue_buf);
	}
	free(u->u_ents);
	free(u->u_q_reqs);
	pthread_mutex_destroy(&u->u_lock);
	free(u);
}
