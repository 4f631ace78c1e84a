/* SPDX-License-Identifier: MIT */
/*
 * include/kvfs/kvfs_ioctl.h — the kvfs ioctl ABI.
 *
 * An inference engine moves KV blocks between its own memory and the store
 * with a handful of ioctls on any fd of a kvfs mount, instead of one
 * read()/write() per block. It names its memory once (a *region*), names
 * the shape of a block inside that memory once (a *layout*), and then asks
 * about, saves, loads or removes hundreds of keys per call. The daemon copies
 * the bytes itself, straight between the region and the store: no bulk byte
 * crosses /dev/fuse, only these fixed-size structs do.
 *
 * This header is the whole contract; the client library (kvfs.h) is one
 * user of it, and nothing here needs the library.
 *
 * Restricted ioctls
 * -----------------
 * FUSE passes only "restricted" ioctls on an ordinary mount: the kernel
 * copies exactly _IOC_SIZE(cmd) bytes from the caller's argument to the
 * daemon and the same number back, and follows no pointer inside them. So
 * every command is _IOWR with one fixed-size struct (at most 16383 bytes):
 * fixed-width fields only, explicit padding, every 64-bit field at an offset
 * that is a multiple of 8 and every struct a multiple of 8 bytes, so 32- and
 * 64-bit callers share one layout (asserted below). Addresses travel as
 * numbers the daemon uses through the region's kind, never as pointers the
 * kernel would follow. Padding and reserved fields must be zero.
 *
 * Every struct starts with struct kvfs_ioc_hdr: the caller's size of the
 * struct (must equal _IOC_SIZE(cmd)), the ABI version it was built for, and
 * a 64-bit trace id of the caller's choice that the daemon writes into its
 * trace (kvfs --trace=FILE) next to every batch and key it served.
 *
 * Errors
 * ------
 * A command that cannot run at all fails as a whole: ioctl() returns -1 and
 * sets errno; the struct is not copied back. A batch command that runs
 * returns 0 and reports each key on its own (kvfs_ioc_key.ik_result: bytes or
 * -errno), so one bad key never fails the batch. Whole-command errors:
 *   ENOTTY           not a kvfs command (unknown number, or another size)
 *   EINVAL           ih_size is not the struct's size; a nonzero pad field;
 *                    an unknown flag or kind; a count out of range; a
 *                    zero rg_length; HOST_SHM: a name that is not "/" and
 *                    one component (nor "/." or "/.."), or an object that
 *                    is not a regular file
 *   EPROTO           ih_version is not KVFS_IOC_ABI_VERSION (query
 *                    KVFS_IOC_VERSION, which accepts any version)
 *   E2BIG            a batch whose key array does not fit bt_data
 *   ENOTDIR          a batch on an fd that is not a directory
 *   EBADF            an unknown region or layout id (unregister, layout)
 *   EPERM            a region or layout registered by another process; a
 *                    shared-memory object owned by another user
 *   EBUSY            unregistering a region a layout still uses
 *   EFAULT           a range outside the region, or one whose end overflows
 *   EOPNOTSUPP       a region kind this daemon does not serve now (CUDA
 *                    without the CUDA backend in force)
 *   ENODEV           a device region whose UUID names no device of the daemon's
 *   EMFILE           the process has KVFS_MAX_REGIONS regions (or layouts);
 *                    also EMFILE or ENFILE when the daemon has no file
 *                    descriptor left for the region (shm_open, pidfd_open)
 *   ENOSPC           the daemon's table of regions (or layouts) is full
 *   ENOENT, EACCES   HOST_SHM: no such object, or the daemon may not open it
 *   ELOOP            HOST_SHM: the name is a symbolic link in /dev/shm
 *                    (shm_open follows none, whatever it points to)
 *   ENXIO            HOST_SHM: the name is a socket
 *   ENAMETOOLONG     HOST_SHM: rg_shm_name holds no NUL in its
 *                    KVFS_SHM_NAME_MAX bytes
 *   ENOMEM           the daemon could not allocate what the call needs
 *                    (also the mapping of a HOST_SHM range)
 *   ESRCH            the calling process could not be identified (it is in
 *                    another pid namespace, or gone)
 * Per-key errors (ik_result) are listed at each batch command.
 *
 * Regions and layouts
 * -------------------
 * A region is a range of bytes the daemon may read and write, registered by
 * one process and known by a small id (1..). It belongs to the registering
 * *process* (its thread-group id): any thread of it may use the id, any other
 * process naming it gets EPERM. A region is released by
 * KVFS_IOC_REGION_UNREGISTER, when the fd it was registered on is closed
 * (the last close of that open file: every open(2) of a file of the mount,
 * .kvfs/ctl's included, is an open file of its own, and another's close
 * leaves the region alone), or when the process exits, whatever comes
 * first; the daemon keeps no memory of a vanished client. A region id used
 * after that fails with EBADF. Kinds:
 *
 *   KVFS_REGION_HOST_SHM   a POSIX shared-memory object (shm_open name,
 *                          "/name"): the daemon maps [rg_offset, rg_offset +
 *                          rg_length) of it once. The object must be owned by
 *                          the caller's uid (EPERM otherwise) and at least
 *                          that long (EFAULT otherwise).
 *   KVFS_REGION_HOST_PROC  [rg_addr, rg_addr + rg_length) of the caller's own
 *                          address space, which the daemon reads and writes
 *                          with process_vm_readv/process_vm_writev on the
 *                          caller's pid: memory the process already has (a
 *                          pinned tensor, a numa_alloc_local buffer) needs no
 *                          shared object. The kernel allows this when the
 *                          daemon may ptrace the caller: the daemon runs as
 *                          root (CAP_SYS_PTRACE), or the caller runs as the
 *                          daemon's user and either Yama's ptrace_scope is 0
 *                          or the caller has named the daemon with
 *                          prctl(PR_SET_PTRACER, daemon pid or
 *                          PR_SET_PTRACER_ANY) — the library does this,
 *                          naming vr_daemon_pid where it can. The
 *                          daemon probes the range at registration and fails
 *                          with EPERM when it may not reach it, EFAULT when
 *                          the range is not mapped.
 *   KVFS_REGION_CUDA_IPC   a cudaMalloc allocation: its 64-byte
 *                          cudaIpcMemHandle_t (of the allocation's base) in
 *                          rg_ipc_handle, rg_offset from that base,
 *                          rg_length, and the device's UUID in rg_dev_uuid
 *                          (not its ordinal: CUDA_VISIBLE_DEVICES numbers
 *                          devices differently in each process); rg_fd 0.
 *                          The daemon opens each (process, device, handle)
 *                          once and shares it among that process's regions.
 *   KVFS_REGION_CUDA_VMM   cuMemCreate memory (exported with a POSIX-fd
 *                          handle type): rg_fd is the caller's fd of the
 *                          exported handle, which the daemon takes with
 *                          pidfd_getfd during the call (the caller may close
 *                          it afterwards), rg_offset from the allocation's
 *                          start, rg_length, rg_dev_uuid; rg_ipc_handle zero.
 *                          Both device kinds: EINVAL for a zero UUID, a
 *                          missing or misplaced handle or fd, or a field of
 *                          the host kinds; EFAULT for a range whose end
 *                          overflows or that leaves the allocation; EBADF
 *                          for an fd the caller does not hold; ENODEV for a
 *                          UUID that names no device of the daemon's;
 *                          EOPNOTSUPP when the daemon has no CUDA backend in
 *                          force (built without CUDA, --gpu=off, or no
 *                          device: vr_kinds says). Puts copy device -> DRAM
 *                          and gets DRAM -> device on the daemon's streams;
 *                          a put reads the memory when it runs, so the
 *                          caller synchronises the producing stream first;
 *                          a get returns once the bytes are in the device.
 *
 * A layout names where block b of a KV cache lies: a list of segments
 * (region, base, stride, length), and block b is the concatenation, in
 * segment order, of the ranges [base + b * stride, + length) of each
 * segment's region. A vLLM cache with one tensor per layer (K and V apart)
 * is 2 x layers segments. The layout's block length is the sum of the
 * segment lengths; its block count is the largest count for which every
 * segment stays inside its region (UINT64_MAX when every stride is 0).
 * Layouts belong to the process as regions do; a region a layout uses
 * cannot be unregistered before the layout.
 *
 * Batches
 * -------
 * KVFS_IOC_LOOKUP, _PUT, _GET and _REMOVE take one struct kvfs_ioc_batch on
 * a directory fd of the mount; its names are relative to that directory and
 * may have several components ("tp0/9f86d081884c7d65"). A batch holds as
 * many keys as fit in bt_data (about 150 keys with 64-byte names, 290 with
 * 16-byte ones); a client splits longer lists into several ioctls. bt_data
 * is a small heap addressed by byte offsets from its start:
 *
 *   struct kvfs_ioc_batch (KVFS_IOC_BATCH_SIZE = 16376 bytes)
 *   0      +-----------------------------------------------+
 *          | struct kvfs_ioc_hdr bt_hdr   size, version,   |
 *          |                              trace id         |
 *   16     | bt_nkeys bt_flags bt_ok bt_prefix             |
 *   32     | bt_bytes                     (out)            |
 *   40     | bt_ns                        (out)            |
 *   48     +-- bt_data[16328] -----------------------------+ offset 0
 *          | struct kvfs_ioc_key [bt_nkeys]   40 bytes each|
 *          |   ik_name_off/len ------------------------+   |
 *          |   ik_iov_off/ik_niov ------------+        |   |
 *          +- then, anywhere after the keys: -|--------|---+
 *          | struct kvfs_ioc_iov [...] <------+ 8-aligned  |
 *          | name bytes (no NUL)  <--------------------+   |
 *          | ...                                           |
 *          +-----------------------------------------------+ 16376
 *
 * Each key names its value's memory either by a layout (ik_layout = id,
 * ik_block = block index; ik_niov = 0) or by an explicit list of ik_niov
 * struct kvfs_ioc_iov (ik_layout = 0), concatenated in order. A key's
 * per-key errors: EINVAL (name or iov outside bt_data, a misaligned iov
 * list, an iov of length 0 or with a nonzero pad, an empty name or
 * component, ".", "..", a leading, trailing or double "/", a NUL byte,
 * ".kvfs" at the mount's root; for a lookup or a get, a name that is a
 * symlink, FIFO or socket: a name, not a key), ENAMETOOLONG (a
 * component over KVFS_NAME_MAX, a name over KVFS_PATH_MAX), EBADF (unknown
 * layout or region), EPERM (another process's), EFAULT (a block past the
 * layout's block count, a range outside its region or overflowing), ENOENT
 * or ENOTDIR (a missing or non-directory parent; a missing key), EISDIR
 * (the name is a directory), EIO (the bytes could not be read or written:
 * an SSD error, or a HOST_PROC range the process has since unmapped),
 * ENOMEM (the daemon could not allocate what the key needs),
 * EACCES or EPERM (the caller may not: names are checked as the system
 * calls on the same paths would check them, on every mount: search
 * permission on the fd's directory and every directory of the name, read
 * permission on a key to get it, write permission on the directory a put
 * or a remove changes or a put creates in, and a sticky directory's rule
 * that only the owners take away or replace a name). The batch's other
 * fields:
 *   bt_nkeys   in: keys in bt_data, 1..KVFS_BATCH_MAX_KEYS
 *   bt_flags   in: KVFS_PUT_* for a put, KVFS_REMOVE_* for a remove, else 0
 *   bt_ok      out: keys with ik_result >= 0
 *   bt_prefix  out: the length of the leading run of keys with
 *              ik_result >= 0 (for a lookup: how many leading blocks of a
 *              prompt are stored)
 *   bt_bytes   out: value bytes the batch moved (put, get) or found (lookup)
 *   bt_ns      out: nanoseconds the daemon spent on the batch
 *
 * KVFS_IOC_LOOKUP: for each name, whether a sealed value is stored there.
 *   ik_result: the value's size, or -ENOENT (no such key), -EBUSY (the key
 *   exists but is still being written: not counted as a hit), -EISDIR.
 *   ik_size: the size, ik_flags: KVFS_KEY_*. ik_layout/ik_block/iov unused.
 * KVFS_IOC_PUT: stores each key's bytes (the layout block or the iov list)
 *   as the key's new sealed value. Atomic per key: nobody sees the key, or
 *   its new bytes, before the copy is complete; then it replaces any old
 *   value as rename() over it would (open fds keep the old bytes). The
 *   parent directories must exist unless KVFS_PUT_MKDIR. ik_result: the
 *   bytes stored, or -ENOSPC, -EEXIST (KVFS_PUT_NOREPLACE and the key
 *   exists), -EFBIG (more than 16 TiB, the largest value; nothing is
 *   copied), or a per-key error above.
 * KVFS_IOC_GET: copies each key's current sealed value into its memory; the
 *   value's size must equal the memory's total length. That is checked
 *   against the whole value before any byte is copied, wherever the value
 *   lies (DRAM, the SSD, partly both): -EMSGSIZE leaves the memory
 *   untouched, and ik_size holds the value's whole size. Every byte comes
 *   from one version, also when a put replaces the key meanwhile.
 *   ik_result: the bytes copied, or -ENOENT, -EBUSY (still being written,
 *   or replaced again during each of the daemon's reads of it: the memory
 *   may then hold part of a version), -EMSGSIZE, or a per-key error above.
 *   Values on the SSD tier are read from there. ik_flags tells the tier it
 *   came from.
 *   Device copies of consecutive keys may overlap one another (the next
 *   key is looked up and read while the previous one's copy runs), so
 *   keys of one get whose memory overlaps land in no defined order; all
 *   have landed when the ioctl returns.
 * KVFS_IOC_REMOVE: removes each name as unlink() would; a directory fails
 *   with -EISDIR unless KVFS_REMOVE_RECURSIVE, which removes it and all
 *   below it as rm -rf would. ik_result: the number of keys removed, or
 *   -ENOENT, -ENOTEMPTY (the directory kept being refilled while it was
 *   emptied), or a per-key error above.
 */
#ifndef KVFS_KVFS_IOCTL_H
#define KVFS_KVFS_IOCTL_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/ioctl.h>

/* Bumped on any incompatible change of this file. */
#define KVFS_IOC_ABI_VERSION 1

/* The ioctl type byte: none of the numbers the VFS handles before FUSE sees a call. */
#define KVFS_IOC_MAGIC 0xCB

#define KVFS_NAME_MAX	     255  /* bytes of one path component */
#define KVFS_PATH_MAX	     1024 /* bytes of a batch key name */
#define KVFS_SHM_NAME_MAX    256  /* bytes of rg_shm_name, NUL included */
#define KVFS_MAX_REGIONS     64	  /* regions one process may hold */
#define KVFS_MAX_LAYOUTS     64	  /* layouts one process may hold */
#define KVFS_LAYOUT_MAX_SEGS 256  /* segments of one layout */

/* Starts every struct. */
struct kvfs_ioc_hdr {
	uint32_t ih_size;     /* in: sizeof the struct = _IOC_SIZE(cmd) */
	uint32_t ih_version;  /* in: KVFS_IOC_ABI_VERSION */
	uint64_t ih_trace_id; /* in: the caller's id for this call, echoed in the trace */
};

/*
 * KVFS_IOC_VERSION: what the daemon speaks. Any fd of the mount; accepts any
 * ih_version (only ih_size is checked).
 */
struct kvfs_ioc_version {
	struct kvfs_ioc_hdr vr_hdr;
	uint32_t vr_abi;	 /* out: KVFS_IOC_ABI_VERSION of the daemon */
	uint32_t vr_kinds;	 /* out: bit (1 << kind) per region kind it serves */
	uint32_t vr_max_keys;	 /* out: KVFS_BATCH_MAX_KEYS */
	uint32_t vr_max_segs;	 /* out: KVFS_LAYOUT_MAX_SEGS */
	uint32_t vr_max_regions; /* out: KVFS_MAX_REGIONS */
	uint32_t vr_max_layouts; /* out: KVFS_MAX_LAYOUTS */
	uint32_t vr_path_max;	 /* out: KVFS_PATH_MAX */
	uint32_t vr_daemon_pid;	 /* out: the daemon's pid (its namespace; 0: unknown) */
	char vr_daemon[32]; /* out: the daemon's version, NUL-terminated */
};

/* Region kinds (rg_kind). */
enum kvfs_region_kind {
	KVFS_REGION_HOST_SHM = 1,
	KVFS_REGION_HOST_PROC = 2,
	KVFS_REGION_CUDA_IPC = 3,
	KVFS_REGION_CUDA_VMM = 4,
};

/*
 * KVFS_IOC_REGION_REGISTER: any fd of the mount; the region lives until
 * unregistered, that fd's last close, or the process's exit. Which fields a
 * kind reads is listed above; the others must be zero.
 */
struct kvfs_ioc_region {
	struct kvfs_ioc_hdr rg_hdr;
	uint32_t rg_kind; /* in: enum kvfs_region_kind */
	uint32_t rg_id;	  /* out: the region's id, 1.. */
	uint64_t
	    rg_offset;	  /* in: HOST_SHM: offset in the object; CUDA_*: from the allocation base */
	uint64_t rg_addr; /* in: HOST_PROC: the range's start in the caller's address space */
	uint64_t rg_length; /* in: bytes, > 0 */
	int32_t rg_fd;	    /* in: CUDA_VMM: the caller's fd of the exported handle */
	uint32_t rg_pad;
	uint8_t rg_dev_uuid[16];	     /* in: CUDA_*: the device's UUID */
	uint8_t rg_ipc_handle[64];	     /* in: CUDA_IPC: cudaIpcMemHandle_t */
	char rg_shm_name[KVFS_SHM_NAME_MAX]; /* in: HOST_SHM: "/name", NUL-terminated */
};

/* KVFS_IOC_REGION_UNREGISTER and KVFS_IOC_LAYOUT_UNREGISTER: one id. */
struct kvfs_ioc_id {
	struct kvfs_ioc_hdr id_hdr;
	uint32_t id_id; /* in */
	uint32_t id_pad;
};

/* One layout segment: block b lies at [sg_base + b * sg_stride, + sg_length) of sg_region. */
struct kvfs_ioc_seg {
	uint32_t sg_region; /* a region id of the caller's */
	uint32_t sg_pad;
	uint64_t sg_base;
	uint64_t sg_stride;
	uint64_t sg_length; /* > 0 */
};

/* KVFS_IOC_LAYOUT_REGISTER: any fd of the mount; lives as its regions do. */
struct kvfs_ioc_layout {
	struct kvfs_ioc_hdr ly_hdr;
	uint32_t ly_id;	       /* out: the layout's id, 1.. */
	uint32_t ly_nsegs;     /* in: 1..KVFS_LAYOUT_MAX_SEGS */
	uint64_t ly_block_len; /* out: bytes of one block (sum of sg_length) */
	uint64_t ly_nblocks;   /* out: blocks 0..ly_nblocks-1 lie inside every region */
	struct kvfs_ioc_seg ly_segs[KVFS_LAYOUT_MAX_SEGS];
};

/* One explicit range of a key's memory (ik_layout = 0). */
struct kvfs_ioc_iov {
	uint32_t iv_region;
	uint32_t iv_pad;
	uint64_t iv_offset; /* from the region's start */
	uint64_t iv_length; /* > 0 */
};

/* ik_flags (out). */
enum {
	KVFS_KEY_PRESENT = 1 << 0, /* the name exists */
	KVFS_KEY_SEALED = 1 << 1,  /* it holds a complete value */
	KVFS_KEY_DIR = 1 << 2,	   /* it is a directory */
	KVFS_KEY_DRAM = 1 << 3,	   /* the value is (or was served) in DRAM */
	KVFS_KEY_SSD = 1 << 4,	   /* the value is on the SSD (served from there if not DRAM) */
};

/* One key of a batch. */
struct kvfs_ioc_key {
	uint16_t ik_name_off; /* in: offset of the name in bt_data */
	uint16_t ik_name_len; /* in: bytes, no NUL */
	uint16_t ik_iov_off;  /* in: offset of the first struct kvfs_ioc_iov (multiple of 8) */
	uint16_t ik_niov;     /* in: explicit ranges, 1..KVFS_LAYOUT_MAX_SEGS; 0 with a layout */
	uint32_t ik_layout;   /* in: layout id, or 0 for the iov list */
	uint32_t ik_flags;    /* out: KVFS_KEY_* */
	uint64_t ik_block;    /* in: block index in the layout */
	uint64_t ik_size;     /* out: the value's size (lookup, get), when known */
	int64_t ik_result;    /* out: bytes (see each command), or -errno */
};

/* bt_flags of KVFS_IOC_PUT. */
enum {
	KVFS_PUT_NOREPLACE = 1 << 0, /* an existing key fails with -EEXIST, keeps its value */
	KVFS_PUT_MKDIR = 1 << 1,     /* create missing parent directories (mode 0755) */
	/*
	 * The put contract for device memory: without this flag the caller has
	 * synchronised the stream that produced the bytes before the ioctl.
	 * With it, bt_data's last KVFS_BATCH_EVENT_SIZE bytes hold a
	 * cudaIpcEventHandle_t (the caller records the event after the
	 * producing work) and the daemon makes its device copies wait for it
	 * (cudaStreamWaitEvent); names and iov lists stay out of those bytes.
	 * Copies from host regions are not ordered by it. EOPNOTSUPP (the whole
	 * batch) without the CUDA backend in force, EINVAL for a handle the
	 * driver refuses.
	 */
	KVFS_PUT_WAIT_EVENT = 1 << 2,
};

/* bt_flags of KVFS_IOC_REMOVE. */
enum {
	KVFS_REMOVE_RECURSIVE = 1 << 0, /* a directory name removes it and everything below */
};

#define KVFS_IOC_BATCH_SIZE  16376u
#define KVFS_BATCH_HDR_SIZE  48u
#define KVFS_BATCH_DATA_SIZE (KVFS_IOC_BATCH_SIZE - KVFS_BATCH_HDR_SIZE)
/* KVFS_PUT_WAIT_EVENT: the event handle's bytes, at the end of bt_data. */
#define KVFS_BATCH_EVENT_SIZE 64u
#define KVFS_BATCH_EVENT_OFF  (KVFS_BATCH_DATA_SIZE - KVFS_BATCH_EVENT_SIZE)
/* Keys with one-byte names fill bt_data: the most a batch can carry. */
#define KVFS_BATCH_MAX_KEYS (KVFS_BATCH_DATA_SIZE / (sizeof(struct kvfs_ioc_key) + 1))

/* KVFS_IOC_LOOKUP, _PUT, _GET, _REMOVE: on a directory fd; drawn above. */
struct kvfs_ioc_batch {
	struct kvfs_ioc_hdr bt_hdr;
	uint32_t bt_nkeys;  /* in */
	uint32_t bt_flags;  /* in */
	uint32_t bt_ok;	    /* out: keys with ik_result >= 0 */
	uint32_t bt_prefix; /* out: leading keys with ik_result >= 0 */
	uint64_t bt_bytes;  /* out */
	uint64_t bt_ns;	    /* out */
	uint8_t bt_data[KVFS_BATCH_DATA_SIZE];
};

#define KVFS_IOC_VERSION	   _IOWR(KVFS_IOC_MAGIC, 0x00, struct kvfs_ioc_version)
#define KVFS_IOC_REGION_REGISTER   _IOWR(KVFS_IOC_MAGIC, 0x01, struct kvfs_ioc_region)
#define KVFS_IOC_REGION_UNREGISTER _IOWR(KVFS_IOC_MAGIC, 0x02, struct kvfs_ioc_id)
#define KVFS_IOC_LAYOUT_REGISTER   _IOWR(KVFS_IOC_MAGIC, 0x03, struct kvfs_ioc_layout)
#define KVFS_IOC_LAYOUT_UNREGISTER _IOWR(KVFS_IOC_MAGIC, 0x04, struct kvfs_ioc_id)
#define KVFS_IOC_LOOKUP		   _IOWR(KVFS_IOC_MAGIC, 0x10, struct kvfs_ioc_batch)
#define KVFS_IOC_PUT		   _IOWR(KVFS_IOC_MAGIC, 0x11, struct kvfs_ioc_batch)
#define KVFS_IOC_GET		   _IOWR(KVFS_IOC_MAGIC, 0x12, struct kvfs_ioc_batch)
#define KVFS_IOC_REMOVE		   _IOWR(KVFS_IOC_MAGIC, 0x13, struct kvfs_ioc_batch)

static_assert(sizeof(struct kvfs_ioc_hdr) == 16, "kvfs_ioc_hdr size");
static_assert(sizeof(struct kvfs_ioc_version) == 80, "kvfs_ioc_version size");
static_assert(sizeof(struct kvfs_ioc_region) == 392, "kvfs_ioc_region size");
static_assert(offsetof(struct kvfs_ioc_region, rg_offset) == 24, "rg_offset offset");
static_assert(offsetof(struct kvfs_ioc_region, rg_shm_name) == 136, "rg_shm_name offset");
static_assert(sizeof(struct kvfs_ioc_id) == 24, "kvfs_ioc_id size");
static_assert(sizeof(struct kvfs_ioc_seg) == 32, "kvfs_ioc_seg size");
static_assert(sizeof(struct kvfs_ioc_layout) == 40 + 32 * KVFS_LAYOUT_MAX_SEGS,
	      "kvfs_ioc_layout size");
static_assert(offsetof(struct kvfs_ioc_layout, ly_segs) == 40, "ly_segs offset");
static_assert(sizeof(struct kvfs_ioc_iov) == 24, "kvfs_ioc_iov size");
static_assert(sizeof(struct kvfs_ioc_key) == 40, "kvfs_ioc_key size");
static_assert(offsetof(struct kvfs_ioc_key, ik_block) == 16, "ik_block offset");
static_assert(offsetof(struct kvfs_ioc_batch, bt_bytes) == 32, "bt_bytes offset");
static_assert(offsetof(struct kvfs_ioc_batch, bt_data) == KVFS_BATCH_HDR_SIZE, "bt_data offset");
static_assert(sizeof(struct kvfs_ioc_batch) == KVFS_IOC_BATCH_SIZE, "kvfs_ioc_batch size");
static_assert(KVFS_IOC_BATCH_SIZE <= 16383, "restricted FUSE ioctls carry at most 16383 bytes");
static_assert(KVFS_BATCH_DATA_SIZE < 65536, "bt_data offsets are 16-bit");

#endif
