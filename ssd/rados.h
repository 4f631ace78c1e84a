/* SPDX-License-Identifier: MIT */
/*
 * ssd/rados.h — the RADOS object layer: kvfs's only door to librados.
 *
 * It knows objects and a cluster, nothing of the store: core/shared.c
 * decides what to do with them. Today (issue 10, step 1) it connects: one
 * cluster handle and one I/O context on a pool and namespace, with every
 * client timeout set so that no call ever blocks for longer than that
 * (librados's defaults wait forever). Object names, reads, writes and
 * compare-and-set come with the next steps.
 *
 * Built only when librados is (KVFS_HAVE_RADOS, CMake -DKVFS_RADOS); without
 * it the functions below are inline stubs that fail with -ENOTSUP, so their
 * callers need no #ifdef. librados's types stay out of this header.
 *
 * Thread-safety: a struct kv_rados is used by one thread at a time until
 * later steps say otherwise; kv_rados_open may run in any thread.
 */
#ifndef KVFS_SSD_RADOS_H
#define KVFS_SSD_RADOS_H

#include <errno.h>
#include <stdbool.h>

struct kv_rados; /* a connected cluster handle and an ioctx on one pool */

/* Where to connect; the strings are only read during kv_rados_open. */
struct kv_rados_params {
	const char *rp_conf;	  /* ceph.conf to read */
	const char *rp_id;	  /* client id, without "client." ("admin") */
	const char *rp_pool;	  /* the pool; must exist */
	const char *rp_namespace; /* "" for the default namespace */
	unsigned rp_timeout_s;	  /* rados_osd_op_timeout, rados_mon_op_timeout and
				     client_mount_timeout, in whole seconds (>= 1) */
};

#ifdef KVFS_HAVE_RADOS

/*
 * Connects to the cluster and opens the pool: reads the conf file, then sets
 * the timeouts (after it, so they win over the file's), connects, creates
 * the I/O context (which fails when the pool does not exist) and sets the
 * namespace. Blocks for at most about rp_timeout_s. Returns 0 and sets
 * *out, or -errno with *step naming what failed ("create", "conf",
 * "timeouts", "connect", "pool"): -ENOENT from "pool" means no such pool,
 * -ETIMEDOUT from "connect" no monitor answered.
 */
int kv_rados_open(const struct kv_rados_params *p, struct kv_rados **out, const char **step);

/* Destroys the I/O context and shuts the cluster handle down. NULL is fine. */
void kv_rados_close(struct kv_rados *r);

static inline bool kv_rados_built(void)
{
	return true;
}

#else

static inline int kv_rados_open(const struct kv_rados_params *p, struct kv_rados **out,
				const char **step)
{
	(void)p;
	(void)out;
	*step = "build";
	return -ENOTSUP;
}

static inline void kv_rados_close(struct kv_rados *r)
{
	(void)r;
}

static inline bool kv_rados_built(void)
{
	return false;
}

#endif
#endif
