/* SPDX-License-Identifier: MIT */
/*
 * include/kvfs/kvfs.h — libkvfs, the kvfs client library.
 *
 * An inference engine uses a kvfs mount as its KV-cache store through this
 * library: it opens a directory of the mount, names its memory once (a
 * *region*), names where a KV block lies in that memory once (a *layout*),
 * and then asks which of many keys are stored, saves, loads and removes
 * them in batches. The daemon copies the bytes itself, straight between the
 * region and the store; no bulk byte crosses /dev/fuse. The library speaks
 * the ioctl ABI of kvfs_ioctl.h and links nothing of the daemon.
 *
 *	struct kvfs *kv;
 *	void *buf;
 *	uint32_t rg, lay;
 *	kvfs_open("/mnt/kv/llama/tp0", &kv);
 *	kvfs_region_alloc(kv, layers * nblocks * block_bytes, -1, &buf, &rg);
 *	struct kvfs_segment seg[32];        // layer l's tensor at l * nblocks * block_bytes
 *	...
 *	kvfs_layout_register(kv, seg, 32, &lay, NULL);
 *	struct kvfs_key keys[n] = {{.kk_name = "9f86d081", .kk_layout = lay, .kk_block = 7}, ...};
 *	kvfs_put(kv, keys, n, 0, 0, st, &sum);
 *
 * Batches of any size. One ioctl carries one fixed-size struct (about 16
 * KiB: 150 keys with 64-byte names); kvfs_lookup, kvfs_put, kvfs_get and
 * kvfs_remove take any number of keys and send as many ioctls as they need,
 * in order, each with the call's trace id. Every key gets its own status.
 *
 * Errors. Every function returns 0 (or a documented count) on success and a
 * negative errno on failure; none sets errno. A batch call that ran returns
 * 0 even when some keys failed: each key's outcome is in its struct
 * kvfs_status (ks_result: bytes or -errno), and struct kvfs_summary counts
 * them. A batch call returns -errno only when it could not run: bad
 * arguments (-EINVAL, nothing sent) or an ioctl the daemon refused as a
 * whole (-ENOTDIR: the handle's directory is not a kvfs directory any
 * more, -EPROTO, -EINTR, ...). The keys of ioctls already done keep their
 * statuses; that ioctl's keys and all later ones get the error.
 * Per-key errors are those of kvfs_ioctl.h, plus two the library decides
 * without asking the daemon: -ENAMETOOLONG for a name over the daemon's
 * path limit (KVFS_PATH_MAX), -E2BIG for a key with more than
 * KVFS_LAYOUT_MAX_SEGS ranges in its iov list.
 *
 * Trace ids. Every call that talks to the daemon carries a 64-bit trace id
 * that the daemon writes next to each batch and key in its trace (kvfs
 * --trace=FILE). Pass your own (a request id) to follow one request end to
 * end, or 0 to let the library pick a fresh one (kvfs_trace_next); the id
 * used is reported in kvfs_summary.ksum_trace.
 *
 * Threads. A struct kvfs may be shared by any number of threads: batch
 * calls keep their scratch per call and ioctls on one fd run concurrently;
 * the handle's region table (which regions the library allocated, so it
 * can unmap them) is guarded by a mutex held only while the table changes
 * or is searched, never across an ioctl. The caller must not use a handle
 * after, or while, kvfs_close runs on it, nor unregister a region or
 * layout while another thread still uses it in a batch (the daemon then
 * fails those keys with -EBADF; no memory is touched). A region's memory
 * must not be written by the caller while a put reads it, nor read while a
 * get fills it.
 *
 * Ownership. Regions and layouts belong to the process and to the handle's
 * open file: the daemon drops them when they are unregistered, when the
 * handle is closed, or when the process exits, whichever comes first. A
 * child process after fork() cannot use its parent's regions (-EPERM).
 */
#ifndef KVFS_KVFS_H
#define KVFS_KVFS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* An open kvfs directory: the handle every other call takes. */
struct kvfs;

/* One segment of a layout: block b lies at [ks_base + b * ks_stride, + ks_len) of ks_region. */
struct kvfs_segment {
	uint32_t ks_region; /* a region id from kvfs_region_alloc or kvfs_region_register */
	uint64_t ks_base;
	uint64_t ks_stride;
	uint64_t ks_len; /* > 0 */
};

/* One explicit range of a key's memory: [ki_offset, + ki_len) of region ki_region. */
struct kvfs_iov {
	uint32_t ki_region;
	uint64_t ki_offset;
	uint64_t ki_len; /* > 0 */
};

/*
 * One key of a put or get: its name, and its memory, either block kk_block
 * of layout kk_layout, or (kk_layout = 0) the concatenation of kk_niov
 * ranges at kk_iov.
 */
struct kvfs_key {
	const char *kk_name; /* relative to the handle's directory; "a/b" works */
	uint32_t kk_layout;  /* a layout id, or 0 for kk_iov */
	uint32_t kk_niov;    /* ranges at kk_iov when kk_layout is 0 */
	uint64_t kk_block;   /* block index in the layout */
	const struct kvfs_iov *kk_iov;
};

/* What happened to one key. */
struct kvfs_status {
	int64_t ks_result; /* >= 0: success (bytes: see each call); < 0: -errno */
	uint64_t ks_size;  /* the value's size where the daemon knows it (lookup, get) */
	uint32_t ks_flags; /* KVFS_KEY_* of kvfs_ioctl.h: present, sealed, dir, dram, ssd */
};

/* What a whole batch call did. */
struct kvfs_summary {
	uint64_t ksum_trace;  /* the trace id the call carried */
	size_t ksum_ok;	      /* keys with ks_result >= 0 */
	size_t ksum_prefix;   /* leading keys with ks_result >= 0 */
	uint64_t ksum_bytes;  /* value bytes moved (put, get) or found (lookup) */
	uint64_t ksum_ns;     /* nanoseconds the daemon spent, all ioctls together */
	unsigned ksum_ioctls; /* ioctls sent */
};

/* kvfs_put flags: the ABI's KVFS_PUT_* (kvfs_ioctl.h). */
#define KVFS_PUT_FLAG_NOREPLACE 1u /* an existing key fails with -EEXIST, keeps its value */
#define KVFS_PUT_FLAG_MKDIR	2u /* create missing parent directories (mode 0755) */

/* kvfs_remove flags: the ABI's KVFS_REMOVE_*. */
#define KVFS_REMOVE_FLAG_RECURSIVE 1u /* a directory name removes it and all below it */

/*
 * Opens the kvfs directory `dir` (the mount's root or any directory in it;
 * batch key names are relative to it) and checks that the daemon speaks
 * this library's ABI. The handle holds one directory fd (O_CLOEXEC).
 * Returns 0 and stores the handle in *kvp, or -errno: those of open(2)
 * (-ENOENT, -ENOTDIR, -EACCES, ...), -ENOTTY when `dir` is not in a kvfs
 * mount, -EPROTO when the daemon speaks another ABI version, -ENOMEM.
 */
int kvfs_open(const char *dir, struct kvfs **kvp);

/*
 * Unregisters every region and layout the handle registered, unmaps the
 * memory kvfs_region_alloc gave out (pointers into it become invalid),
 * closes the fd and frees the handle. NULL is a no-op. Returns 0, or the
 * first -errno met (everything is released anyway).
 */
int kvfs_close(struct kvfs *kv);

/* The handle's directory fd (for fstat, openat, ...): owned by the handle, do not close it. */
int kvfs_fd(const struct kvfs *kv);

/* A fresh trace id, unique within the process: (pid << 32) | counter. Thread-safe. */
uint64_t kvfs_trace_next(struct kvfs *kv);

/*
 * Limits the daemon reported at kvfs_open: most keys per ioctl, segments
 * per layout, regions and layouts per process, bytes of a key name. Any
 * pointer may be NULL.
 */
void kvfs_limits(const struct kvfs *kv, uint32_t *max_keys, uint32_t *max_segs,
		 uint32_t *max_regions, uint32_t *path_max);

/*
 * Allocates `len` bytes (rounded up to the page size) of POSIX shared
 * memory, page-aligned, zeroed and faulted in on NUMA node `numa_node` (-1:
 * the node of the CPU the caller runs on; a preference, so a full node
 * spills over instead of failing; without NUMA only -1 and 0 are valid), and
 * registers it with the daemon as a HOST_SHM region, which the daemon maps
 * once and then copies to and from with plain memcpy (the fastest kind).
 * The object's name is removed as soon as the daemon has mapped it, so
 * nothing is left in /dev/shm, even if the process dies. Stores the memory
 * in *addrp and the region id in *idp. Returns 0 or -errno: -EINVAL (len
 * 0), -EINVAL (numa_node not a node), -ENOMEM, -EMFILE (the process holds
 * KVFS_MAX_REGIONS regions), errors of shm_open(3)/mmap(2)/mbind(2).
 */
int kvfs_region_alloc(struct kvfs *kv, size_t len, int numa_node, void **addrp, uint32_t *idp);

/*
 * Registers [addr, addr + len) of the caller's own memory (a pinned tensor,
 * a numa_alloc_local buffer, a bytearray) as a HOST_PROC region: the daemon
 * reads and writes it with process_vm_readv/process_vm_writev, so nothing
 * is copied into shared memory first. The memory stays the caller's: it
 * must stay mapped until the region is unregistered (a get into memory
 * unmapped meanwhile fails that key with -EIO, nothing else is touched).
 *
 * The kernel lets the daemon reach the memory when it may ptrace the
 * caller: the daemon runs as root, or as the caller's user with Yama's
 * ptrace_scope at 0 — or at 1 when the caller has named a tracer with
 * prctl(PR_SET_PTRACER). When the daemon refuses a registration with
 * EPERM and ptrace_scope is 1, the library calls
 * prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY) once (a client does not know
 * the daemon's pid) and tries again: from then on any process of the
 * caller's user may ptrace it, as with ptrace_scope 0. With ptrace_scope 2
 * or 3 only a root daemon can serve HOST_PROC: use kvfs_region_alloc.
 *
 * Returns 0 and the region id in *idp, or -errno: -EINVAL (len 0 or a
 * range that wraps), -EPERM (the daemon may not reach this process: use
 * kvfs_region_alloc), -EFAULT (the range is not mapped), -EMFILE, -ENOMEM.
 */
int kvfs_region_register(struct kvfs *kv, void *addr, size_t len, uint32_t *idp);

/*
 * Registers [ptr, ptr + len) of CUDA device memory — a plain device
 * pointer and length, such as a torch.Tensor's data_ptr() and nbytes — as a
 * region. The library finds the allocation and its device itself: memory
 * from cudaMalloc (or any allocation cudaIpcGetMemHandle accepts) becomes a
 * CUDA_IPC region, memory from cuMemCreate with a POSIX-fd handle type
 * (PyTorch's expandable segments) a CUDA_VMM region. The range must lie in
 * one allocation. Puts copy device -> DRAM and gets DRAM -> device inside
 * the daemon; a put reads the memory as it is when the daemon copies, so
 * the caller synchronises the stream that produced the data first. A get
 * returns once the bytes are in device memory.
 *
 * Returns 0 and the region id in *idp, or -errno: -EINVAL (len 0, not
 * device memory), -EFAULT (the range leaves its allocation), -EOPNOTSUPP
 * (libkvfs or the daemon has no CUDA backend in force, or the allocation
 * can be shared neither way), -ENODEV (no usable CUDA driver here, or the
 * daemon does not see the device), -EMFILE, -ENOMEM. kvfs_device_note()
 * says in one line why device registration cannot work here ("" when it
 * can, as far as this process can tell).
 */
int kvfs_register_device(struct kvfs *kv, const void *ptr, size_t len, uint32_t *idp);
const char *kvfs_device_note(void);

/*
 * Unregisters a region; memory from kvfs_region_alloc is unmapped (its
 * pointers become invalid), memory of kvfs_region_register stays the
 * caller's. Returns 0 or -errno: -EBADF (no such region), -EPERM (not this
 * process's), -EBUSY (a layout still uses it: unregister the layout first).
 */
int kvfs_region_unregister(struct kvfs *kv, uint32_t id);

/*
 * Registers a layout of `n` segments (1..KVFS_LAYOUT_MAX_SEGS): block b of
 * it is the concatenation, in order, of [ks_base + b * ks_stride, + ks_len)
 * of each segment's region. A vLLM cache with one tensor per layer is one
 * segment per layer (two with K and V apart), stride = the bytes of one
 * block in that tensor. Stores the id in *idp and, when `nblocks` is not
 * NULL, the number of blocks that lie inside every region. Returns 0 or
 * -errno: -EINVAL (n is 0, a zero length), -E2BIG (n over the daemon's
 * limit), -EBADF (an unknown region), -EFAULT (block 0 already outside a
 * region), -EMFILE (too many layouts).
 */
int kvfs_layout_register(struct kvfs *kv, const struct kvfs_segment *segs, size_t n, uint32_t *idp,
			 uint64_t *nblocks);

/* Unregisters a layout. Returns 0 or -errno: -EBADF (no such layout), -EPERM. */
int kvfs_layout_unregister(struct kvfs *kv, uint32_t id);

/*
 * For each of `n` names (relative to the handle's directory): whether a
 * complete (sealed) value is stored there, and its size. st[i].ks_result is
 * the size, or -ENOENT (absent), -EBUSY (still being written: not a hit),
 * -EISDIR, or a per-key error. sum->ksum_prefix is the length of the
 * leading run of hits — how many leading blocks of a prompt are stored —
 * and ksum_ok the number of hits. `st` (n entries) and `sum` may be NULL.
 * Returns 0 when the lookup ran (misses included), or -errno (see the top).
 */
int kvfs_lookup(struct kvfs *kv, const char *const *names, size_t n, uint64_t trace,
		struct kvfs_status *st, struct kvfs_summary *sum);

/*
 * How many leading names of `names` hold a complete value: the question a
 * scheduler asks about a prompt's block hashes. Like kvfs_lookup, but it
 * sends no ioctl after the first one that met a miss, so a prompt whose
 * third block is missing costs one ioctl however long it is. Returns the
 * length of the leading run of hits (0..n), or -errno as kvfs_lookup.
 */
int64_t kvfs_lookup_prefix(struct kvfs *kv, const char *const *names, size_t n, uint64_t trace);

/*
 * Stores each key's memory as the key's new value: atomic per key
 * (invisible until complete, then it replaces the old value as rename()
 * would). `flags`: KVFS_PUT_FLAG_*. st[i].ks_result is the bytes stored, or
 * -ENOSPC, -EEXIST (NOREPLACE), -ENOENT (a missing parent directory
 * without MKDIR), -EFBIG (more than 16 TiB, the largest value), or a
 * per-key error. Returns 0 when the batch ran, or -errno (see the top).
 */
int kvfs_put(struct kvfs *kv, const struct kvfs_key *keys, size_t n, unsigned flags, uint64_t trace,
	     struct kvfs_status *st, struct kvfs_summary *sum);

/*
 * kvfs_put for device memory whose producing work the caller has not
 * waited for: `event` is a cudaIpcEventHandle_t (64 bytes, from
 * cudaIpcGetEventHandle of an event made with cudaEventInterprocess |
 * cudaEventDisableTiming and recorded after that work). The daemon's
 * device copies wait for it on the GPU (cudaStreamWaitEvent); host
 * regions are not ordered by it. Returns as kvfs_put; the whole call fails
 * with -EOPNOTSUPP when the daemon has no CUDA backend in force and with
 * -EINVAL for a handle its driver refuses.
 */
int kvfs_put_event(struct kvfs *kv, const struct kvfs_key *keys, size_t n, unsigned flags,
		   const void *event, uint64_t trace, struct kvfs_status *st,
		   struct kvfs_summary *sum);

/*
 * Copies each key's current value into its memory, whose total length must
 * equal the value's size. Every byte of a key comes from one version.
 * st[i].ks_result is the bytes copied, or -ENOENT, -EBUSY, -EMSGSIZE (the
 * size differs: st[i].ks_size holds the value's whole size, and the memory
 * is untouched: the size is checked before any byte is copied), -EIO, or a
 * per-key error; the memory of a key that failed otherwise may have been
 * partly written. Returns 0 when the batch ran, or -errno (see the top).
 */
int kvfs_get(struct kvfs *kv, const struct kvfs_key *keys, size_t n, uint64_t trace,
	     struct kvfs_status *st, struct kvfs_summary *sum);

/*
 * Removes each name as unlink() would (open fds keep reading the old
 * bytes); with KVFS_REMOVE_FLAG_RECURSIVE a directory name removes it and
 * all below it as rm -rf would. st[i].ks_result is the number of keys
 * removed, or -ENOENT, -EISDIR (a directory without RECURSIVE), or a
 * per-key error. Returns 0 when the batch ran, or -errno (see the top).
 */
int kvfs_remove(struct kvfs *kv, const char *const *names, size_t n, unsigned flags, uint64_t trace,
		struct kvfs_status *st, struct kvfs_summary *sum);

/*
 * Removes the directory `prefix` (relative to the handle's directory) and
 * every key below it, as rm -rf would. Returns the number of keys removed,
 * or -errno: -ENOENT, -ENOTDIR, -EINVAL (an empty or malformed name), ...
 */
int64_t kvfs_remove_prefix(struct kvfs *kv, const char *prefix, uint64_t trace);

#ifdef __cplusplus
}
#endif

#endif
