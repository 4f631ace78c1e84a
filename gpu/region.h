/* SPDX-License-Identifier: MIT */
/*
 * gpu/region.h — client memory the daemon may copy to and from: regions,
 * the layouts over them, and the backends that reach them.
 *
 * A region is a range of some client process's memory, reached through one
 * backend of the ops table below: host_shm (a POSIX shared-memory object the
 * daemon maps), host_proc (process_vm_readv/writev on the client's pid), or
 * with the CUDA backend in force (gpu/dev.h) cuda_ipc and cuda_vmm
 * (gpu/cuda.h). A layout is a list of segments over regions
 * that says where block b of a KV cache lies (include/kvfs/kvfs_ioctl.h
 * draws it). Both live in one table per daemon and are known to clients by
 * small ids.
 *
 * Ownership. Every region and layout belongs to the process (thread-group
 * id) that registered it and to the open file (its *tag*: the FUSE file
 * handle) it was registered on. Only the owner may name it (others get
 * -EPERM). It goes away when unregistered, when its tag is released (the
 * last close of that open file: kv_region_release_tag), or when its owner
 * has exited (kv_region_reap, which polls each region's pidfd). A layout
 * goes with the first of its regions to go; a region a layout uses cannot
 * be unregistered explicitly (-EBUSY).
 *
 * Locking. rt_lock (a writer-preferring rwlock) guards the whole table,
 * except the set of tags that hold something, which has its own mutex
 * (taken inside rt_lock, or alone by kv_region_release_tag to see at once
 * that a closing file holds nothing).
 * Registration, release and reaping take it exclusive. A batch takes it
 * shared for its whole duration (kv_region_begin / kv_region_end), so the
 * struct kv_span pointers it resolves stay valid while it copies, and a
 * region is never unmapped under a copy. Taken inside it: rt_tag_lock, the
 * store's locks (a batch's keys), and the CUDA backend's leaf locks
 * (gpu/cuda.c: cu_ipc_lock when a region is freed, a device's sp_lock when
 * a copy takes a stream); never take it while holding any of them.
 *
 * Host copies. A copy to or from host regions only (synchronous backends)
 * of a megabyte or more runs on several threads: the table's copy pool
 * (gpu/copy_pool.h) takes parts of it, so one batch is not held to one
 * core's memory bandwidth.
 *
 * Every function returns 0 or a negative errno.
 */
#ifndef KVFS_GPU_REGION_H
#define KVFS_GPU_REGION_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "kvfs/kvfs_ioctl.h"

struct kv_region;
struct kv_region_table;
struct kv_copy_ticket;

/* Who asks: the calling process, its uid, and the open file it asks through. */
struct kv_caller {
	pid_t kc_tgid;
	uid_t kc_uid;
	uint64_t kc_tag;
};

/* A region to register: the fields of struct kvfs_ioc_region, checked by the caller. */
struct kv_region_desc {
	uint32_t rd_kind; /* enum kvfs_region_kind */
	uint64_t rd_offset;
	uint64_t rd_addr;
	uint64_t rd_length;
	int32_t rd_fd;
	const char *rd_shm_name; /* NUL-terminated */
	const uint8_t *rd_dev_uuid;
	const uint8_t *rd_ipc_handle;
};

/*
 * One backend. ro_open reaches the memory a descriptor names (mapping it,
 * probing it) and fills r's private part; ro_close lets go of it. ro_copy
 * moves the iov's bytes (daemon memory) to or from the region's bytes
 * [off, off + total of iov), which the caller has checked lie inside the
 * region; it may be asynchronous for a device backend, and ro_sync waits
 * until every copy issued on the region has landed. ro_sync may be NULL
 * (copies are synchronous). ro_direct, when the backend maps the region
 * in the daemon, gives the address of a region byte, so that SSD reads can
 * land there with no bounce buffer; NULL otherwise.
 */
struct kv_region_ops {
	const char *ro_name;
	int (*ro_open)(struct kv_region *r, const struct kv_region_desc *d,
		       const struct kv_caller *c);
	void (*ro_close)(struct kv_region *r);
	int (*ro_copy)(struct kv_region *r, bool to_region, uint64_t off, const struct iovec *iov,
		       int n);
	int (*ro_sync)(struct kv_region *r);
	/*
	 * Optional, with ro_sync: issues what ro_copy queued without waiting;
	 * fills *t with how to wait (t->ct_wait NULL: nothing in flight). On
	 * an error nothing is left in flight.
	 */
	int (*ro_issue)(struct kv_region *r, struct kv_copy_ticket *t);
	/* Optional: the daemon's address of region byte off, when the daemon maps it. */
	void *(*ro_direct)(struct kv_region *r, uint64_t off);
};

/* Copies in flight: ct_wait(ct_arg) waits for them (and frees ct_arg); ct_wait NULL: none. */
struct kv_copy_ticket {
	int (*ct_wait)(void *arg);
	void *ct_arg;
};

/* A region (the table owns it; the fields from rg_map on belong to the backend). */
struct kv_region {
	uint32_t rg_id;	   /* immutable */
	uint32_t rg_kind;  /* immutable */
	pid_t rg_owner;	   /* immutable: the registering process */
	uint64_t rg_tag;   /* immutable: the open file it was registered on */
	int rg_pidfd;	   /* immutable: the owner's pidfd, to see it exit */
	uint32_t rg_users; /* layouts using it (rt_lock) */
	uint64_t rg_len;   /* immutable: bytes */
	const struct kv_region_ops *rg_ops;
	struct kv_region_table *rg_table; /* immutable: the table holding it */
	/* backend state, immutable while registered */
	void *rg_map; /* host_shm: the mapping; rg_base points into it */
	size_t rg_map_len;
	char *rg_base;	  /* host_shm: the region's first byte in the daemon */
	pid_t rg_pid;	  /* host_proc: the process to copy to and from */
	uint64_t rg_addr; /* host_proc: the region's first byte in that process */
	int rg_dev;	  /* cuda_*: the device's ordinal in the daemon */
	uint64_t rg_dptr; /* cuda_*: the region's first byte, a device address in the daemon */
	void *rg_cuda;	  /* cuda_*: the opened allocation */
};

/* A piece of a key's memory: [sp_off, sp_off + sp_len) of one region. */
struct kv_span {
	struct kv_region *sp_region;
	uint64_t sp_off;
	uint64_t sp_len;
};

/* The backends; NULL for a kind this daemon cannot serve (CUDA not in force). */
const struct kv_region_ops *kv_region_ops_of(uint32_t kind);
extern const struct kv_region_ops kv_host_shm_ops;
extern const struct kv_region_ops kv_host_proc_ops;

/* Bit (1 << kind) for each kind this build serves (kvfs_ioc_version.vr_kinds). */
uint32_t kv_region_kinds(void);

/*
 * Creates the table and its copy pool of copy_helpers threads (at most
 * KV_COPY_HELPERS_MAX; a daemon passes kv_copy_pool_default_helpers()).
 * Returns 0, -ENOMEM or a thread's creation error.
 */
int kv_region_table_create(unsigned copy_helpers, struct kv_region_table **out);
/* Releases every region and layout. Nothing else may run concurrently. */
void kv_region_table_destroy(struct kv_region_table *t);

/*
 * Registers a region for c. -EINVAL (length 0, unknown kind), -EOPNOTSUPP
 * (kind not built), -EMFILE (c's process holds KVFS_MAX_REGIONS), -ENOSPC
 * (the table is full), or the backend's error: -EPERM, -EFAULT, -ENOENT...
 */
int kv_region_register(struct kv_region_table *t, const struct kv_caller *c,
		       const struct kv_region_desc *d, uint32_t *id);

/* -EBADF (no such id), -EPERM (another process's), -EBUSY (a layout uses it). */
int kv_region_unregister(struct kv_region_table *t, const struct kv_caller *c, uint32_t id);

/*
 * Registers a layout over c's regions. segs[i] is region, base, stride,
 * length. Sets *block_len (sum of lengths) and *nblocks (blocks lying
 * inside every region; UINT64_MAX when every stride is 0). -EINVAL (no
 * segment, too many, a zero length or a nonzero pad), -EBADF, -EPERM,
 * -EFAULT (block 0 does not fit, or sums overflow), -EMFILE, -ENOSPC.
 */
int kv_layout_register(struct kv_region_table *t, const struct kv_caller *c,
		       const struct kvfs_ioc_seg *segs, uint32_t nsegs, uint32_t *id,
		       uint64_t *block_len, uint64_t *nblocks);

/* -EBADF, -EPERM. */
int kv_layout_unregister(struct kv_region_table *t, const struct kv_caller *c, uint32_t id);

/*
 * The open file `tag` was closed for good: releases what was registered on
 * it. Returns how many regions and layouts that was.
 */
unsigned kv_region_release_tag(struct kv_region_table *t, uint64_t tag);

/* Releases everything whose owner has exited. */
void kv_region_reap(struct kv_region_table *t);

/* How many regions and layouts are registered now. */
void kv_region_counts(struct kv_region_table *t, uint64_t *regions, uint64_t *layouts);

/* Takes and drops the table shared around a batch that resolves spans and copies. */
void kv_region_begin(struct kv_region_table *t);
void kv_region_end(struct kv_region_table *t);

/*
 * Resolves [off, off + len) of region id for process tgid (between begin
 * and end). -EBADF, -EPERM, -EINVAL (len 0), -EFAULT (outside the region).
 */
int kv_region_span(struct kv_region_table *t, pid_t tgid, uint32_t id, uint64_t off, uint64_t len,
		   struct kv_span *out);

/*
 * Resolves block `block` of layout id for process tgid into spans (between
 * begin and end); out must hold KVFS_LAYOUT_MAX_SEGS. Returns the number of
 * spans and sets *total; -EBADF, -EPERM, -EFAULT (block >= nblocks).
 */
int kv_layout_spans(struct kv_region_table *t, pid_t tgid, uint32_t id, uint64_t block,
		    struct kv_span *out, uint64_t *total);

/*
 * Copies between the memory the spans describe (logically concatenated)
 * and daemon memory iov, which stands for logical bytes [off, off + total
 * of iov). to_region: from iov into the spans. The caller has checked that
 * the range lies inside the spans. Then syncs every region it touched,
 * also after a failed copy, so nothing issued outlives the call. Returns 0
 * or the first backend error.
 */
int kv_span_copy(const struct kv_span *sp, int nsp, bool to_region, uint64_t off,
		 const struct iovec *iov, int niov);

/*
 * As kv_span_copy, but copies into or out of device memory may still be in
 * flight when it returns: t->ct_wait(t->ct_arg) waits for them; the
 * daemon memory iov must stay valid until then. Host regions are copied
 * before it returns. On an error nothing is left in flight.
 */
int kv_span_copy_start(const struct kv_span *sp, int nsp, bool to_region, uint64_t off,
		       const struct iovec *iov, int niov, struct kv_copy_ticket *t);

/*
 * Describes the spans as daemon addresses in iov (room for max) when every
 * one is mapped by the daemon (ro_direct) with address and length aligned
 * to `align`: what O_DIRECT needs to land in client memory. Returns nsp,
 * or 0 when that does not hold.
 */
int kv_span_direct(const struct kv_span *sp, int nsp, size_t align, struct iovec *iov, int max);

#endif
