/* SPDX-License-Identifier: MIT */
/*
 * fs/notify.c — tells the kernel about names that cache mode evicted.
 *
 * The kernel keeps a name it looked up for KV_FS_TIMEOUT. A name that the
 * compactor took away (--evict=lru) went without any request, so the kernel
 * must be told (fuse_lowlevel_notify_inval_entry): otherwise the name stays
 * visible for up to that long, and the inode behind it is forgotten only
 * when the kernel happens to drop the entry (or never, before an unmount).
 *
 * The invalidation takes the parent directory's i_rwsem in the kernel, and
 * the holder of that lock may be waiting for a request this daemon serves.
 * So it is never sent holding a lock, nor from a thread serving a request:
 * the store's eviction hook (kv_fs_notify_evicted, called once the store
 * dropped its locks) copies (parent node id, name) into a queue, and a
 * thread of our own sends them, holding nothing. No FUSE worker waits for
 * that thread, so while the loop serves its wait in the kernel always ends.
 * A node id sent late may name a directory gone meanwhile (the kernel
 * answers -ENOENT) or, its address reused, another one: dropping a cached
 * name there costs one lookup, nothing more.
 *
 * Stopping. Once the loop has ended nobody answers requests: a send in
 * flight may wait for a directory lock held by a process whose request is
 * never answered, and closing our fd does not abort the connection while
 * that very send holds it. kv_fs_notify_stop drops what is queued, gives a
 * send in flight STOP_WAIT_MS, then aborts the connection (fusectl's
 * /sys/fs/fuse/connections/N/abort, open to the mount's owner, or a forced
 * unmount as root): every request fails, the lock is let go. It waits
 * ABORT_WAIT_MS more; a thread still in the kernel after that is left
 * there with its notifier and the session, which the caller must then
 * never destroy.
 *
 * kn_lock guards the queue (kn_head, kn_tail, kn_len), kn_stop, kn_done and
 * the counters. It is taken inside the store's ks_evict_lock (the hook),
 * never held across a send, and nothing is taken while holding it.
 */
#include "fs/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <time.h>
#include <unistd.h>

/* Names waiting at most: past that an eviction goes untold (the entry times out). */
#define KN_MAX_QUEUED (1u << 16)
#define STOP_WAIT_MS  1000
#define ABORT_WAIT_MS 5000

struct kn_item {
	struct kn_item *ki_next;
	fuse_ino_t ki_parent;
	size_t ki_len;
	char ki_name[];
};

struct kv_fs_notify {
	/* immutable while the thread runs */
	struct kv_fs *kn_fs;	    /* for node ids */
	struct fuse_session *kn_se; /* mounted */
	unsigned long kn_conn;	    /* the fusectl connection number (the mount's dev_t) */
	pthread_t kn_thread;
	pthread_cond_t kn_wake; /* the thread waits here for items or kn_stop */
	pthread_cond_t kn_exit; /* kv_fs_notify_stop waits here for kn_done */
	pthread_mutex_t kn_lock;
	/* kn_lock */
	struct kn_item *kn_head, *kn_tail;
	uint32_t kn_len;
	bool kn_stop; /* stopping: queue nothing more, send nothing more */
	bool kn_done; /* the thread is out of its loop: it touches the session no more */
	uint64_t kn_sent, kn_dropped;
};

static void *notify_main(void *arg)
{
	struct kv_fs_notify *n = arg;
	struct kn_item *it;

	pthread_mutex_lock(&n->kn_lock);
	for (;;) {
		while (!n->kn_head && !n->kn_stop)
			pthread_cond_wait(&n->kn_wake, &n->kn_lock);
		if (n->kn_stop)
			break;
		it = n->kn_head;
		n->kn_head = it->ki_next;
		if (!n->kn_head)
			n->kn_tail = NULL;
		n->kn_len--;
		pthread_mutex_unlock(&n->kn_lock);
		/* -ENOENT (the kernel had no such entry) is as good as done */
		fuse_lowlevel_notify_inval_entry(n->kn_se, it->ki_parent, it->ki_name, it->ki_len);
		free(it);
		pthread_mutex_lock(&n->kn_lock);
		n->kn_sent++;
	}
	n->kn_done = true;
	pthread_cond_broadcast(&n->kn_exit);
	pthread_mutex_unlock(&n->kn_lock);
	return NULL;
}

int kv_fs_notify_start(struct kv_fs *fs, struct fuse_session *se, unsigned long conn,
		       struct kv_fs_notify **out)
{
	struct kv_fs_notify *n = calloc(1, sizeof(*n));
	pthread_condattr_t ca;
	int err;

	if (!n)
		return -ENOMEM;
	n->kn_fs = fs;
	n->kn_se = se;
	n->kn_conn = conn;
	pthread_mutex_init(&n->kn_lock, NULL);
	pthread_cond_init(&n->kn_wake, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&n->kn_exit, &ca);
	pthread_condattr_destroy(&ca);
	err = -pthread_create(&n->kn_thread, NULL, notify_main, n);
	if (err)
		goto out_free;
	*out = n;
	return 0;

out_free:
	pthread_cond_destroy(&n->kn_exit);
	pthread_cond_destroy(&n->kn_wake);
	pthread_mutex_destroy(&n->kn_lock);
	free(n);
	return err;
}

void kv_fs_notify_evicted(void *arg, struct kv_inode *dir, const char *name)
{
	struct kv_fs_notify *n = arg;
	size_t len = strlen(name);
	struct kn_item *it = malloc(sizeof(*it) + len + 1);

	if (it) {
		it->ki_next = NULL;
		it->ki_parent = kv_fs_nodeid(n->kn_fs, dir);
		it->ki_len = len;
		memcpy(it->ki_name, name, len + 1);
	}
	pthread_mutex_lock(&n->kn_lock);
	if (!it || n->kn_stop || n->kn_len >= KN_MAX_QUEUED) {
		n->kn_dropped++;
		pthread_mutex_unlock(&n->kn_lock);
		free(it);
		return;
	}
	if (n->kn_tail)
		n->kn_tail->ki_next = it;
	else
		n->kn_head = it;
	n->kn_tail = it;
	n->kn_len++;
	pthread_cond_signal(&n->kn_wake);
	pthread_mutex_unlock(&n->kn_lock);
}

void kv_fs_notify_counts(struct kv_fs_notify *n, uint64_t *sent, uint64_t *dropped)
{
	pthread_mutex_lock(&n->kn_lock);
	*sent = n->kn_sent;
	*dropped = n->kn_dropped;
	pthread_mutex_unlock(&n->kn_lock);
}

/* Waits up to ms for the thread to leave its loop (kn_lock held). Returns kn_done. */
static bool wait_done(struct kv_fs_notify *n, long ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (ms % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	while (!n->kn_done && pthread_cond_timedwait(&n->kn_exit, &n->kn_lock, &ts) != ETIMEDOUT)
		;
	return n->kn_done;
}

/*
 * Aborts the FUSE connection, so every request in flight fails: through
 * fusectl, else (root, no fusectl mounted) a forced unmount, whose first
 * step is the abort. Best effort.
 */
static void abort_conn(struct kv_fs_notify *n)
{
	char path[64];
	int fd;

	snprintf(path, sizeof(path), "/sys/fs/fuse/connections/%lu/abort", n->kn_conn);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t r = write(fd, "1", 1);

		close(fd);
		if (r == 1)
			return;
	}
	umount2(n->kn_fs->kf_cfg->kc_mountpoint, MNT_FORCE);
}

bool kv_fs_notify_stop(struct kv_fs_notify *n)
{
	struct kn_item *it;
	bool done;

	pthread_mutex_lock(&n->kn_lock);
	n->kn_stop = true;
	while ((it = n->kn_head)) {
		n->kn_head = it->ki_next;
		n->kn_dropped++;
		free(it);
	}
	n->kn_tail = NULL;
	n->kn_len = 0;
	pthread_cond_signal(&n->kn_wake);
	done = wait_done(n, STOP_WAIT_MS);
	pthread_mutex_unlock(&n->kn_lock);
	if (!done) {
		abort_conn(n);
		pthread_mutex_lock(&n->kn_lock);
		done = wait_done(n, ABORT_WAIT_MS);
		pthread_mutex_unlock(&n->kn_lock);
	}
	if (!done) {
		pthread_detach(n->kn_thread);
		return false;
	}
	pthread_join(n->kn_thread, NULL);
	pthread_cond_destroy(&n->kn_exit);
	pthread_cond_destroy(&n->kn_wake);
	pthread_mutex_destroy(&n->kn_lock);
	free(n);
	return true;
}
