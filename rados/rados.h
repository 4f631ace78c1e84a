/* SPDX-License-Identifier: MIT */
/*
 * rados/rados.h — the RADOS object layer: kvfs's only door to librados.
 *
 * The bottom of rados/: it knows objects and a cluster, nothing of the
 * store; the shared tier (rados/shared*.c, whose contract is
 * rados/shared.h) decides what to do with them (the objects are drawn in
 * rados/rados_format.h). It connects (one cluster handle and one I/O context
 * on a pool and namespace, with every client timeout set so that no call
 * ever blocks for longer than that: librados's defaults wait forever),
 * reads and writes whole objects several at a time, reads and
 * compare-and-sets omap entries, and lists objects for --rados-gc. Every
 * write is made with LIBRADOS_OPERATION_FULL_TRY, so a full cluster answers
 * -ENOSPC at once instead of blocking until the timeout.
 *
 * Built only when librados is (KVFS_HAVE_RADOS, CMake -DKVFS_RADOS); without
 * it the functions below fail with -ENOTSUP, so their callers need no
 * #ifdef. librados's types stay out of this header.
 *
 * Errors: -ENOENT (no such object, or key), -ECANCELED (a compare-and-set
 * found another value), -ETIMEDOUT (--rados-timeout passed), -ENOSPC (the
 * cluster is full), -EIO (a short object), or another -errno from librados.
 *
 * Thread-safety: once kv_rados_open returned, any number of threads may
 * call the functions below on the same struct kv_rados at once (librados's
 * I/O contexts are thread-safe); kv_rados_close must run alone.
 */
#ifndef KVFS_RADOS_RADOS_H
#define KVFS_RADOS_RADOS_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

struct kv_rados; /* a connected cluster handle and an ioctx on one pool */

/* Room for any object name below, with its NUL. */
#define KV_RADOS_OID_MAX 64

/* Data object i of version (node, seq): "x.<node>.<seq>.<i>". */
void kv_rados_data_oid(char *oid, uint64_t node, uint64_t seq, uint32_t i);

/* The directory object of path ("/", "/a/b"; len bytes): "d.<XXH3-128>". */
void kv_rados_dir_oid(char *oid, const char *path, size_t len);

/*
 * Parses a data object's name. Returns true and fills the three numbers
 * for "x.<16 hex>.<16 hex>.<8 hex>", false for any other name.
 */
bool kv_rados_parse_data_oid(const char *oid, uint64_t *node, uint64_t *seq, uint32_t *i);

/* Called for each omap entry by kv_rados_omap_each; nonzero stops the walk (returned). */
typedef int (*kv_rados_omap_fn)(void *arg, const char *key, size_t klen, const void *val,
				size_t vlen);

/* Called for each object by kv_rados_list; nonzero stops the listing (returned). */
typedef int (*kv_rados_list_fn)(void *arg, const char *oid);

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

/*
 * Reads the omap entry `key` of object oid into *val (malloc'ed, *len
 * bytes). -ENOENT when the object or the key is missing.
 */
int kv_rados_omap_get(struct kv_rados *r, const char *oid, const char *key, void **val,
		      size_t *len);

/*
 * Calls fn for every omap entry of oid in key order (read 512 at a time).
 * A missing object has none: returns 0.
 */
int kv_rados_omap_each(struct kv_rados *r, const char *oid, kv_rados_omap_fn fn, void *arg);

/*
 * In one atomic write op on oid: if the entry `key` holds exactly expect
 * (elen bytes; elen 0: the key is absent), sets it to val (vlen bytes), or
 * removes it when val is NULL. Setting creates oid when missing and sets
 * its xattr "kvfs.path" to path (NULL: left alone). -ECANCELED when the
 * entry held something else (nothing changed); -ENOENT when removing from
 * a missing object.
 */
int kv_rados_omap_cas(struct kv_rados *r, const char *oid, const char *key, const void *expect,
		      size_t elen, const void *val, size_t vlen, const char *path);

/*
 * Writes n whole objects (oids[i] <- bufs[i], lens[i] bytes), all in flight
 * at once, and waits for all. Returns 0 or the first error.
 */
int kv_rados_put_many(struct kv_rados *r, unsigned n, const char *const *oids,
		      const void *const *bufs, const size_t *lens);

/*
 * Reads n whole objects, all in flight at once: each must hold exactly
 * lens[i] bytes (-EIO otherwise). Returns 0 or the first error.
 */
int kv_rados_get_many(struct kv_rados *r, unsigned n, const char *const *oids, void *const *bufs,
		      const size_t *lens);

/* Removes an object. -ENOENT when it is missing. */
int kv_rados_remove(struct kv_rados *r, const char *oid);

/* Sets *mtime to an object's modification time (whole seconds). */
int kv_rados_mtime(struct kv_rados *r, const char *oid, time_t *mtime);

/* Calls fn for every object of the pool's namespace, in no order. */
int kv_rados_list(struct kv_rados *r, kv_rados_list_fn fn, void *arg);

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

static inline int kv_rados_omap_get(struct kv_rados *r, const char *oid, const char *key,
				    void **val, size_t *len)
{
	(void)r, (void)oid, (void)key, (void)val, (void)len;
	return -ENOTSUP;
}

static inline int kv_rados_omap_each(struct kv_rados *r, const char *oid, kv_rados_omap_fn fn,
				     void *arg)
{
	(void)r, (void)oid, (void)fn, (void)arg;
	return -ENOTSUP;
}

static inline int kv_rados_omap_cas(struct kv_rados *r, const char *oid, const char *key,
				    const void *expect, size_t elen, const void *val, size_t vlen,
				    const char *path)
{
	(void)r, (void)oid, (void)key, (void)expect, (void)elen, (void)val, (void)vlen, (void)path;
	return -ENOTSUP;
}

static inline int kv_rados_put_many(struct kv_rados *r, unsigned n, const char *const *oids,
				    const void *const *bufs, const size_t *lens)
{
	(void)r, (void)n, (void)oids, (void)bufs, (void)lens;
	return -ENOTSUP;
}

static inline int kv_rados_get_many(struct kv_rados *r, unsigned n, const char *const *oids,
				    void *const *bufs, const size_t *lens)
{
	(void)r, (void)n, (void)oids, (void)bufs, (void)lens;
	return -ENOTSUP;
}

static inline int kv_rados_remove(struct kv_rados *r, const char *oid)
{
	(void)r, (void)oid;
	return -ENOTSUP;
}

static inline int kv_rados_mtime(struct kv_rados *r, const char *oid, time_t *mtime)
{
	(void)r, (void)oid, (void)mtime;
	return -ENOTSUP;
}

static inline int kv_rados_list(struct kv_rados *r, kv_rados_list_fn fn, void *arg)
{
	(void)r, (void)fn, (void)arg;
	return -ENOTSUP;
}

#endif
#endif
