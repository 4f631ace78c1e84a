/* SPDX-License-Identifier: MIT */
/*
 * client/lib/client.h — libkvfs internals, shared by its sources and its
 * unit test (tests/unit/test_client.c), never installed.
 *
 * A handle is an fd, the limits the daemon reported, a trace counter, and a
 * table of the regions and layouts registered through it. The table lets
 * kvfs_close release everything and unmap the memory kvfs_region_alloc
 * gave out.
 *
 * Locks: kv_lock (one mutex per handle) guards kv_ents and kv_nents, the
 * table. It is held while the table is searched or changed, never across
 * an ioctl or a syscall that may block. Everything else in struct kvfs is
 * immutable after kvfs__open_fd, except kv_trace (an atomic).
 *
 * Every ioctl goes through kv_ioctl, which is ioctl(2) in the library and a
 * mock in the unit test, so the splitting of batches can be tested without
 * a daemon.
 */
#ifndef KVFS_CLIENT_LIB_CLIENT_H
#define KVFS_CLIENT_LIB_CLIENT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvfs/kvfs.h"
#include "kvfs/kvfs_ioctl.h"

/* ioctl(fd, cmd, arg): returns 0 or -errno. */
typedef int (*kvfs__ioctl_fn)(int fd, unsigned long cmd, void *arg);

enum kvfs__ent_kind {
	KVFS__ENT_REGION,
	KVFS__ENT_LAYOUT,
};

/* One region or layout registered through the handle. */
struct kvfs__ent {
	enum kvfs__ent_kind ke_kind;
	uint32_t ke_id;
	void *ke_addr; /* memory to munmap at unregister (kvfs_region_alloc), or NULL */
	size_t ke_len; /* its mapped length */
};

struct kvfs {
	int kv_fd;
	kvfs__ioctl_fn kv_ioctl;
	uint32_t kv_max_keys; /* keys per batch ioctl */
	uint32_t kv_max_segs;
	uint32_t kv_max_regions;
	uint32_t kv_path_max;
	uint32_t kv_kinds; /* bit (1 << kind) per region kind the daemon serves */
	pid_t kv_daemon_pid; /* 0: not known */
	atomic_uint_fast64_t kv_trace;
	pthread_mutex_t kv_lock; /* guards kv_ents, kv_nents, kv_cap */
	struct kvfs__ent *kv_ents;
	size_t kv_nents, kv_cap;
};

/*
 * Makes a handle of an already open directory fd (which it then owns, also
 * on failure) talking through `fn`: asks the daemon's version and limits.
 * Returns 0 or -errno as kvfs_open.
 */
int kvfs__open_fd(int fd, kvfs__ioctl_fn fn, struct kvfs **kvp);

/* Fills the header of an ioctl struct of `size` bytes. */
void kvfs__hdr(struct kvfs_ioc_hdr *h, uint32_t size, uint64_t trace);

/*
 * Registers the region rg describes (header filled here), naming the daemon
 * as a tracer of this process when it needs one (region.c). Sets *idp.
 * Returns 0 or -errno.
 */
int kvfs__register_traced(struct kvfs *kv, struct kvfs_ioc_region *rg, uint32_t *idp);

/* Adds an entry to the handle's table. Returns 0 or -ENOMEM. */
int kvfs__ent_add(struct kvfs *kv, enum kvfs__ent_kind kind, uint32_t id, void *addr, size_t len);

#endif
