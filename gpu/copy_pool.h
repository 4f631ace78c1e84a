/* SPDX-License-Identifier: MIT */
/*
 * gpu/copy_pool.h — helper threads that share one large host copy with the
 * thread that asks for it.
 *
 * A copy between daemon memory and a host region (shared memory the
 * daemon maps, a process reached with process_vm_readv/writev) runs on
 * the calling thread: one core's worth of memory bandwidth, while the
 * client waits in its ioctl and the other cores may sit idle. The region
 * table (gpu/region.c) cuts a large copy into parts and runs them with
 * kv_copy_pool_run: part 0 on the caller, the others on idle helpers.
 *
 * Never waiting for a busy pool. A part no helper has picked up by the
 * time the caller is done with its own is taken back and run by the
 * caller, so with every helper busy (other batches' copies) a copy takes
 * as long as it would alone, and no caller waits for another caller's
 * work. A caller waits only for the parts a helper is running.
 *
 * Locking. cp_lock (a leaf: nothing is taken inside it, and the parts run
 * without it) guards the queue of parts not yet picked up, each queued
 * part's state, and the stop flag. The helper count is immutable.
 */
#ifndef KVFS_GPU_COPY_POOL_H
#define KVFS_GPU_COPY_POOL_H

/* Parts of one run at most: the caller's and those of KV_COPY_HELPERS_MAX helpers. */
#define KV_COPY_HELPERS_MAX 3
#define KV_COPY_PARTS_MAX   (KV_COPY_HELPERS_MAX + 1)

struct kv_copy_pool;

/*
 * Starts `helpers` threads (at most KV_COPY_HELPERS_MAX). helpers 0 gives a
 * pool that runs everything on the caller. Returns 0, -ENOMEM or
 * pthread_create's error (no thread is left running then).
 */
int kv_copy_pool_create(unsigned helpers, struct kv_copy_pool **out);

/*
 * The helpers a daemon on this machine starts: one fewer than the CPUs it
 * may run on (sched_getaffinity), at most KV_COPY_HELPERS_MAX.
 */
unsigned kv_copy_pool_default_helpers(void);

/* Stops and joins the helpers. No run may be in progress. */
void kv_copy_pool_destroy(struct kv_copy_pool *p);

/* Parts a run can spread over: the helpers and the caller. */
unsigned kv_copy_pool_width(const struct kv_copy_pool *p);

/*
 * Runs part(arg, i) once for each i in [0, n), n <= KV_COPY_PARTS_MAX,
 * part 0 on the calling thread and the others on helpers or the caller
 * (see above), and returns when every part has returned. Parts may run
 * concurrently: they must touch disjoint memory. Thread-safe.
 */
void kv_copy_pool_run(struct kv_copy_pool *p, void (*part)(void *arg, unsigned i), void *arg,
		      unsigned n);

#endif
