/* SPDX-License-Identifier: MIT */
/*
 * core/shared.h — the shared tier on Ceph RADOS: its policy and state.
 *
 * With --rados-pool a kvfs node is a local cache (DRAM + SSD) in front of a
 * pool that many nodes share (issue 10; the data model is drawn in the
 * design notes). This module owns the node's connection to the cluster and,
 * in the steps to come, the write-back queue, the read-miss path and the
 * TTL cache of directory entries. It calls down to ssd/rados.h for every
 * librados call; the store will call it through this header.
 *
 * Today (step 1) it connects, in the background: kv_shared_start returns at
 * once and a thread connects with every client timeout set to
 * --rados-timeout, so a mount never waits for the cluster. A failed attempt
 * logs one line on stderr (the first of a run of failures only), counts
 * in the stats, and is retried after 1 s, then 2 s, 4 s, ... at most
 * KV_SHARED_RETRY_MAX_S apart, until it works or kv_shared_stop. Local keys
 * are served all along: nothing waits for this tier.
 *
 * States: CONNECTING (the first attempt runs), CONNECTED (a cluster handle
 * and an I/O context on the pool and namespace are open), UNREACHABLE (the
 * last attempt failed; the next one is due). The stats counters of data
 * traffic stay zero until the write-back and read paths exist.
 *
 * Locks: sh_lock (struct kv_shared, core/shared.c) is a leaf. It guards the
 * connection state and the last error, is held for a few field accesses
 * only, never across a librados call, and is never taken with any lock of
 * the store (core/store_int.h) held, nor does it take one.
 */
#ifndef KVFS_CORE_SHARED_H
#define KVFS_CORE_SHARED_H

#include <stdbool.h>
#include <stdint.h>

#include "core/config.h"

#define KV_SHARED_RETRY_MAX_S 30

struct kv_shared;

enum kv_shared_state {
	KV_SHARED_CONNECTING,
	KV_SHARED_CONNECTED,
	KV_SHARED_UNREACHABLE,
};

/* A snapshot of the tier's state and counters, for MNT/.kvfs/stats. */
struct kv_shared_stats {
	enum kv_shared_state ss_state;
	uint64_t ss_connect_attempts;
	uint64_t ss_connect_failures;
	int ss_last_err;	      /* the last failure's -errno; 0: none yet */
	char ss_last_error_text[160]; /* "connect: Connection timed out", or "" */
	/* data traffic (filled from step 2 on) */
	uint64_t ss_objects_read, ss_objects_written;
	uint64_t ss_bytes_read, ss_bytes_written;
	uint64_t ss_errors, ss_timeouts;
};

/* Whether this kvfs was built with librados (CMake -DKVFS_RADOS). */
bool kv_shared_built(void);

/*
 * Starts the tier for cfg->kc_rados_pool (which must be set) and the other
 * kc_rados_* settings, copied: cfg may go after this returns. Never waits
 * for the cluster. Returns 0 and sets *out, -ENOTSUP when built without
 * librados, -ENOMEM, or pthread_create's -errno.
 */
int kv_shared_start(const struct kv_config *cfg, struct kv_shared **out);

/*
 * Stops the connecting thread, closes the connection and frees sh. Waits
 * at most about --rados-timeout for an attempt in flight; a thread still
 * stuck in librados after that is left behind with its memory (logged),
 * the process being about to exit. NULL is fine.
 */
void kv_shared_stop(struct kv_shared *sh);

/* Fills *out with a snapshot; thread-safe. */
void kv_shared_stats(struct kv_shared *sh, struct kv_shared_stats *out);

/* "connecting", "connected" or "unreachable". */
const char *kv_shared_state_name(enum kv_shared_state st);

/*
 * Renders the stats section as one JSON object member into a malloc'ed
 * string (no trailing newline):
 *
 * "rados": {"state": "connected", "pool": "P", "namespace": "NS",
 *           "connect_attempts": N, "connect_failures": N,
 *           "last_error": "ETIMEDOUT", "last_error_text": "connect: ...",
 *           "objects_read": N, "objects_written": N, "bytes_read": N,
 *           "bytes_written": N, "errors": N, "timeouts": N}
 *
 * last_error is the errno's name, "" before any failure. Pool and
 * namespace are JSON-escaped. Returns 0 or -ENOMEM.
 */
int kv_shared_render(const char *pool, const char *ns, const struct kv_shared_stats *s, char **out);

/* The pool and namespace sh was started with (immutable). */
const char *kv_shared_pool(const struct kv_shared *sh);
const char *kv_shared_namespace(const struct kv_shared *sh);

#endif
