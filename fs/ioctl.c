/* SPDX-License-Identifier: MIT */
/*
 * fs/ioctl.c — the kvfs ioctls (include/kvfs/kvfs_ioctl.h): decoding,
 * validation, dispatch, statistics and the trace.
 *
 * The protocol. FUSE hands a restricted ioctl over with exactly
 * _IOC_SIZE(cmd) bytes in (in_buf) and room for as many out; the daemon
 * answers with fuse_reply_ioctl(result 0, the whole struct) or with an
 * error and no struct. Nothing in the struct is trusted: its size and ABI
 * version are checked against the command, every pad must be zero, every
 * offset into bt_data must lie inside it (and after the key array), every
 * id must name a region or layout of the calling process, and every range
 * must lie inside its region without overflowing. The daemon reaches
 * client memory only through struct kv_span ranges that
 * kv_region_span/kv_layout_spans checked, so a bad request can fail but
 * never make the daemon touch anything else.
 *
 * Who asks. The FUSE context gives the calling *thread*'s id; regions
 * belong to processes, so the thread-group id is read from
 * /proc/<tid>/status (only for the commands that use regions: a lookup or
 * remove needs none). The tag of a registration is the open file's fh,
 * unique while that file is open (fs/ops.c gives regular files one);
 * kv_fs_ioctl_release drops what was registered on it at its last close.
 *
 * A batch runs key by key: a bad key gets its own -errno in ik_result and
 * the others go on. It holds the region table shared (kv_region_begin) for
 * its whole run, so no region is unmapped under a copy. A name a batch
 * replaced or removed is dropped from the kernel's dentry cache at once
 * (fuse_lowlevel_notify_inval_entry), so the next open() by path sees the
 * new key, not the old one for up to KV_FS_TIMEOUT; an ioctl holds no lock
 * of the directory that the kernel's invalidation would wait for.
 *
 * Trace (--trace=FILE): after each batch, one JSON line for the batch and
 * one per key, written with a single write() to a file opened O_APPEND, so
 * lines of concurrent batches never interleave. With no trace file the
 * cost is one branch on kf_trace_fd.
 */
#include "fs/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/batch.h"
#include "fs/ioctl.h"
#include "rados/shared.h"
#include "gpu/dev.h"
#include "gpu/region.h"
#include "kvfs/kvfs_ioctl.h"

static_assert(KVFS_PATH_MAX == KV_BATCH_PATH_MAX, "the ABI's path limit is the store's");
static_assert(KVFS_NAME_MAX == KV_NAME_MAX, "the ABI's name limit is the store's");

#define KEY_SIZE sizeof(struct kvfs_ioc_key)
#define IOV_SIZE sizeof(struct kvfs_ioc_iov)

/* One ioctl being served. */
struct ioc {
	struct kv_fs *io_fs;
	fuse_req_t io_req;
	fuse_ino_t io_ino;
	uint64_t io_tag; /* the open file's fh */
	pid_t io_tid;	 /* the calling thread */
	pid_t io_tgid;	 /* its process, once resolved (0 before) */
};

/* A key's memory: spans checked against the caller's regions. */
struct key_mem {
	struct kv_span km_sp[KVFS_LAYOUT_MAX_SEGS];
	int km_n;
};

/* The thread group of thread tid, from /proc/<tid>/status. -ESRCH when gone. */
static int tgid_of(pid_t tid, pid_t *out)
{
	char path[64], buf[1024], *p;
	ssize_t n;
	int fd;

	if (tid <= 0)
		return -ESRCH;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)tid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -ESRCH;
	/* Tgid comes within the first few lines. */
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -ESRCH;
	buf[n] = '\0';
	p = strstr(buf, "\nTgid:");
	if (!p || sscanf(p + 6, "%d", out) != 1 || *out <= 0)
		return -ESRCH;
	return 0;
}

static int caller(struct ioc *io, struct kv_caller *c)
{
	int err = io->io_tgid ? 0 : tgid_of(io->io_tid, &io->io_tgid);

	if (err)
		return err;
	*c = (struct kv_caller){
	    .kc_tgid = io->io_tgid,
	    .kc_uid = fuse_req_ctx(io->io_req)->uid,
	    .kc_tag = io->io_tag,
	};
	return 0;
}

/*
 * Keeps the region and layout gauges of the statistics in step with the
 * table, after each change. gauge_lock (a leaf) makes reading the counts
 * and storing them one step, so the last update stores the last counts.
 */
static pthread_mutex_t gauge_lock = PTHREAD_MUTEX_INITIALIZER;

static void update_gauges(struct kv_fs *fs)
{
	uint64_t r, l;

	pthread_mutex_lock(&gauge_lock);
	kv_region_counts(fs->kf_regions, &r, &l);
	atomic_store_explicit(&fs->kf_stats.ks_regions, r, memory_order_relaxed);
	atomic_store_explicit(&fs->kf_stats.ks_layouts, l, memory_order_relaxed);
	pthread_mutex_unlock(&gauge_lock);
}

static bool all_zero(const void *p, size_t n)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
		if (b[i])
			return false;
	return true;
}

/* --- version, regions, layouts --- */

static int do_version(struct ioc *io, struct kvfs_ioc_version *v)
{
	memset((char *)v + sizeof(v->vr_hdr), 0, sizeof(*v) - sizeof(v->vr_hdr));
	v->vr_abi = KVFS_IOC_ABI_VERSION;
	v->vr_kinds = kv_region_kinds();
	v->vr_max_keys = (uint32_t)KVFS_BATCH_MAX_KEYS;
	v->vr_max_segs = KVFS_LAYOUT_MAX_SEGS;
	v->vr_max_regions = KVFS_MAX_REGIONS;
	v->vr_max_layouts = KVFS_MAX_LAYOUTS;
	v->vr_path_max = KVFS_PATH_MAX;
	v->vr_daemon_pid = (uint32_t)getpid();
	snprintf(v->vr_daemon, sizeof(v->vr_daemon), "kvfs %s", KVFS_VERSION);
	return 0;
}

/*
 * A device region, before any backend sees it (so the same answers come
 * from a daemon with or without a device): a UUID, for CUDA_IPC a handle
 * and no fd, for CUDA_VMM an fd and no handle, nothing of the host kinds,
 * and a range whose end does not overflow.
 */
static int device_region_check(const struct kvfs_ioc_region *rg)
{
	bool handle = !all_zero(rg->rg_ipc_handle, sizeof(rg->rg_ipc_handle));
	uint64_t end;

	if (rg->rg_addr || !all_zero(rg->rg_shm_name, sizeof(rg->rg_shm_name)) ||
	    all_zero(rg->rg_dev_uuid, sizeof(rg->rg_dev_uuid)))
		return -EINVAL;
	if (rg->rg_kind == KVFS_REGION_CUDA_IPC && (rg->rg_fd || !handle))
		return -EINVAL;
	if (rg->rg_kind == KVFS_REGION_CUDA_VMM && handle)
		return -EINVAL;
	if (rg->rg_kind == KVFS_REGION_CUDA_VMM && rg->rg_fd < 0)
		return -EBADF;
	if (rg->rg_length == 0)
		return -EINVAL;
	if (__builtin_add_overflow(rg->rg_offset, rg->rg_length, &end))
		return -EFAULT;
	return 0;
}

int kv_ioc_region_check(const struct kvfs_ioc_region *rg)
{
	bool name = !all_zero(rg->rg_shm_name, sizeof(rg->rg_shm_name));
	bool cuda = !all_zero(rg->rg_dev_uuid, sizeof(rg->rg_dev_uuid)) ||
		    !all_zero(rg->rg_ipc_handle, sizeof(rg->rg_ipc_handle));

	if (rg->rg_pad || rg->rg_id)
		return -EINVAL;
	switch (rg->rg_kind) {
	case KVFS_REGION_HOST_SHM:
		if (rg->rg_addr || rg->rg_fd || cuda || !name)
			return -EINVAL;
		return memchr(rg->rg_shm_name, '\0', sizeof(rg->rg_shm_name)) ? 0 : -ENAMETOOLONG;
	case KVFS_REGION_HOST_PROC:
		return rg->rg_offset || rg->rg_fd || cuda || name ? -EINVAL : 0;
	case KVFS_REGION_CUDA_IPC:
	case KVFS_REGION_CUDA_VMM:
		return device_region_check(rg);
	default:
		return -EINVAL;
	}
}

static int do_region_register(struct ioc *io, struct kvfs_ioc_region *rg)
{
	struct kv_region_desc d;
	struct kv_caller c;
	int err = kv_ioc_region_check(rg);

	if (!err)
		err = caller(io, &c);
	if (err)
		return err;
	d = (struct kv_region_desc){
	    .rd_kind = rg->rg_kind,
	    .rd_offset = rg->rg_offset,
	    .rd_addr = rg->rg_addr,
	    .rd_length = rg->rg_length,
	    .rd_fd = rg->rg_fd,
	    .rd_shm_name = rg->rg_shm_name,
	    .rd_dev_uuid = rg->rg_dev_uuid,
	    .rd_ipc_handle = rg->rg_ipc_handle,
	};
	err = kv_region_register(io->io_fs->kf_regions, &c, &d, &rg->rg_id);
	update_gauges(io->io_fs);
	return err;
}

static int do_unregister(struct ioc *io, struct kvfs_ioc_id *id, bool layout)
{
	struct kv_caller c;
	int err = id->id_pad ? -EINVAL : caller(io, &c);

	if (err)
		return err;
	err = layout ? kv_layout_unregister(io->io_fs->kf_regions, &c, id->id_id)
		     : kv_region_unregister(io->io_fs->kf_regions, &c, id->id_id);
	update_gauges(io->io_fs);
	return err;
}

int kv_ioc_layout_check(const struct kvfs_ioc_layout *ly)
{
	if (ly->ly_id || ly->ly_block_len || ly->ly_nblocks)
		return -EINVAL;
	if (ly->ly_nsegs == 0 || ly->ly_nsegs > KVFS_LAYOUT_MAX_SEGS)
		return -EINVAL;
	if (!all_zero(&ly->ly_segs[ly->ly_nsegs],
		      (KVFS_LAYOUT_MAX_SEGS - ly->ly_nsegs) * sizeof(ly->ly_segs[0])))
		return -EINVAL;
	return 0;
}

static int do_layout_register(struct ioc *io, struct kvfs_ioc_layout *ly)
{
	struct kv_caller c;
	int err = kv_ioc_layout_check(ly);

	if (!err)
		err = caller(io, &c);
	if (err)
		return err;
	err = kv_layout_register(io->io_fs->kf_regions, &c, ly->ly_segs, ly->ly_nsegs, &ly->ly_id,
				 &ly->ly_block_len, &ly->ly_nblocks);
	update_gauges(io->io_fs);
	return err;
}

/* --- batches --- */

static int mem_copy(void *arg, bool to_store, uint64_t off, const struct iovec *iov, int n)
{
	struct key_mem *km = arg;

	return kv_span_copy(km->km_sp, km->km_n, !to_store, off, iov, n);
}

static int mem_copy_start(void *arg, bool to_store, const struct iovec *iov, int n,
			  struct kv_batch_wait *w)
{
	struct key_mem *km = arg;
	struct kv_copy_ticket t;
	int err = kv_span_copy_start(km->km_sp, km->km_n, !to_store, 0, iov, n, &t);

	*w = (struct kv_batch_wait){t.ct_wait, t.ct_arg};
	return err;
}

static int mem_direct(void *arg, struct iovec *iov, int max)
{
	struct key_mem *km = arg;

	return kv_span_direct(km->km_sp, km->km_n, KV_PAGE_SIZE, iov, max);
}

bool kv_ioc_in_data(uint32_t nkeys, uint64_t off, uint64_t len)
{
	return off >= (uint64_t)nkeys * KEY_SIZE && off <= KVFS_BATCH_DATA_SIZE &&
	       len <= KVFS_BATCH_DATA_SIZE - off;
}

int kv_ioc_key_mem(struct kv_region_table *t, pid_t tgid, const struct kvfs_ioc_batch *bt,
		   const struct kvfs_ioc_key *k, struct kv_span *sp, int *n, uint64_t *len)
{
	if (k->ik_layout) {
		if (k->ik_niov || k->ik_iov_off)
			return -EINVAL;
		*n = kv_layout_spans(t, tgid, k->ik_layout, k->ik_block, sp, len);
		return *n < 0 ? *n : 0;
	}
	if (k->ik_block || k->ik_niov == 0 || k->ik_niov > KVFS_LAYOUT_MAX_SEGS ||
	    k->ik_iov_off % 8 ||
	    !kv_ioc_in_data(bt->bt_nkeys, k->ik_iov_off, k->ik_niov * IOV_SIZE))
		return -EINVAL;
	*len = 0;
	for (int i = 0; i < k->ik_niov; i++) {
		struct kvfs_ioc_iov v;
		int err;

		memcpy(&v, bt->bt_data + k->ik_iov_off + i * IOV_SIZE, sizeof(v));
		if (v.iv_pad)
			return -EINVAL;
		err = kv_region_span(t, tgid, v.iv_region, v.iv_offset, v.iv_length, &sp[i]);
		if (!err && __builtin_add_overflow(*len, v.iv_length, len))
			err = -EFAULT;
		if (err)
			return err;
	}
	*n = k->ik_niov;
	return 0;
}

static unsigned key_flags(unsigned f)
{
	return (f & KV_BK_PRESENT ? KVFS_KEY_PRESENT : 0) |
	       (f & KV_BK_SEALED ? KVFS_KEY_SEALED : 0) | (f & KV_BK_DIR ? KVFS_KEY_DIR : 0) |
	       (f & KV_BK_DRAM ? KVFS_KEY_DRAM : 0) | (f & KV_BK_SSD ? KVFS_KEY_SSD : 0);
}

/* Serves one key of a batch; returns ik_result. */
static int64_t one_key(struct ioc *io, struct kv_batch *b, enum kv_ioc_kind kind,
		       const struct kvfs_ioc_batch *bt, struct kvfs_ioc_key *k)
{
	struct kv_key_info ki = {0};
	struct key_mem km;
	struct kv_batch_mem m = {.km_copy = mem_copy, .km_direct = mem_direct, .km_arg = &km};

	/* A put's or get's copy may outlive this call (kv_batch_retire): spans are read at issue.
	 */
	if (kind == KV_IOC_PUT || kind == KV_IOC_GET)
		m.km_copy_start = mem_copy_start;
	uint64_t t0 = kv_now_ns();
	const char *name = NULL;
	int64_t r = 0;

	if (!kv_ioc_in_data(bt->bt_nkeys, k->ik_name_off, k->ik_name_len))
		r = -EINVAL;
	else
		name = (const char *)bt->bt_data + k->ik_name_off;
	if (!r && (kind == KV_IOC_PUT || kind == KV_IOC_GET))
		r = kv_ioc_key_mem(io->io_fs->kf_regions, io->io_tgid, bt, k, km.km_sp, &km.km_n,
				   &m.km_len);
	b->kb_ns[KV_STAGE_VALIDATE] += kv_now_ns() - t0;
	if (r)
		return r;
	switch (kind) {
	case KV_IOC_LOOKUP:
		r = kv_batch_lookup(b, name, k->ik_name_len, &ki);
		break;
	case KV_IOC_PUT:
		r = kv_batch_put(b, name, k->ik_name_len,
				 (bt->bt_flags & KVFS_PUT_NOREPLACE ? KV_BATCH_NOREPLACE : 0) |
				     (bt->bt_flags & KVFS_PUT_MKDIR ? KV_BATCH_MKDIR : 0),
				 &m, &ki);
		break;
	case KV_IOC_GET:
		r = kv_batch_get(b, name, k->ik_name_len, &m, &ki);
		break;
	default:
		r = kv_batch_remove(b, name, k->ik_name_len, bt->bt_flags & KVFS_REMOVE_RECURSIVE);
		break;
	}
	k->ik_size = ki.kki_size;
	k->ik_flags = key_flags(ki.kki_flags);
	return r;
}

/*
 * Names a batch put or removed. The kernel may hold their old entries for
 * KV_FS_TIMEOUT: they are dropped once the batch is over and holds no lock
 * (an invalidation waits for the directory's lock in the kernel, whose
 * holder may wait for a reply from this daemon). A removed name is
 * reported as deleted, with the node it named (fuse_lowlevel_notify_delete):
 * the kernel then lets that node go at its last close, and forgets it,
 * instead of keeping it cached under a name that is gone until the mount
 * ends (when a forget no longer reaches the daemon). A removed tree comes
 * children first, so each directory is empty in the kernel's cache by the
 * time it is deleted there.
 */
struct changed {
	struct kv_fs *ch_fs;
	struct change {
		fuse_ino_t c_parent;
		fuse_ino_t c_gone; /* the node removed, 0: the name was replaced */
		char *c_name;
	} * ch_a;
	uint32_t ch_n, ch_max;
};

static void invalidate(struct kv_fs *fs, fuse_ino_t parent, fuse_ino_t gone, const char *name)
{
	if (!fs->kf_se)
		return;
	if (gone)
		fuse_lowlevel_notify_delete(fs->kf_se, parent, gone, name, strlen(name));
	else
		fuse_lowlevel_notify_inval_entry(fs->kf_se, parent, name, strlen(name));
}

static void name_changed(void *arg, struct kv_inode *dir, const char *name, struct kv_inode *gone)
{
	struct changed *ch = arg;
	struct change c = {.c_parent = kv_fs_nodeid(ch->ch_fs, dir),
			   .c_gone = gone ? kv_fs_nodeid(ch->ch_fs, gone) : 0};

	if (ch->ch_n == ch->ch_max) {
		uint32_t n = ch->ch_max ? 2 * ch->ch_max : 16;
		struct change *a = realloc(ch->ch_a, n * sizeof(*a));

		if (a) {
			ch->ch_a = a;
			ch->ch_max = n;
		}
	}
	c.c_name = ch->ch_n < ch->ch_max ? strdup(name) : NULL;
	if (!c.c_name) /* out of memory: now, then */
		return invalidate(ch->ch_fs, c.c_parent, c.c_gone, name);
	ch->ch_a[ch->ch_n++] = c;
}

static void changed_flush(struct changed *ch)
{
	for (uint32_t i = 0; i < ch->ch_n; i++) {
		invalidate(ch->ch_fs, ch->ch_a[i].c_parent, ch->ch_a[i].c_gone, ch->ch_a[i].c_name);
		free(ch->ch_a[i].c_name);
	}
	free(ch->ch_a);
}

static const uint32_t batch_flags[KV_IOC__COUNT] = {
    [KV_IOC_PUT] = KVFS_PUT_NOREPLACE | KVFS_PUT_MKDIR | KVFS_PUT_WAIT_EVENT,
    [KV_IOC_REMOVE] = KVFS_REMOVE_RECURSIVE,
};

int kv_ioc_batch_check(enum kv_ioc_kind kind, const struct kvfs_ioc_batch *bt)
{
	if (bt->bt_nkeys == 0 || bt->bt_flags & ~batch_flags[kind])
		return -EINVAL;
	if ((uint64_t)bt->bt_nkeys * KEY_SIZE > KVFS_BATCH_DATA_SIZE)
		return -E2BIG;
	return 0;
}

static void trace_batch(struct ioc *io, enum kv_ioc_kind kind, const struct kvfs_ioc_batch *bt,
			const struct kv_batch *b, uint64_t total_ns);

/* A batch being answered, for keys whose copy fails after their result was written. */
struct answer {
	struct kv_fs *an_fs;
	struct kvfs_ioc_batch *an_bt;
	uint64_t *an_failed;
};

/* kv_batch_retire's report: a get's copy that failed in flight fails its key after all. */
static void copy_done(void *arg, uint64_t i, int err)
{
	struct answer *an = arg;
	struct kvfs_ioc_batch *bt = an->an_bt;
	struct kvfs_ioc_key k;

	if (!err)
		return;
	memcpy(&k, bt->bt_data + i * KEY_SIZE, sizeof(k));
	if (k.ik_result >= 0) {
		bt->bt_ok--;
		bt->bt_bytes -= (uint64_t)k.ik_result;
		if (bt->bt_prefix > i)
			bt->bt_prefix = (uint32_t)i;
		(*an->an_failed)++;
		kv_stats_key_error(&an->an_fs->kf_stats, err);
	}
	k.ik_result = err;
	memcpy(bt->bt_data + i * KEY_SIZE, &k, sizeof(k));
}

/* A get's keys that only the shared tier has come in together (kv_batch_prefetch). */
static void prefetch(struct kv_batch *b, const struct kvfs_ioc_batch *bt)
{
	const char *names[KVFS_BATCH_DATA_SIZE / KEY_SIZE];
	size_t lens[KVFS_BATCH_DATA_SIZE / KEY_SIZE];
	unsigned n = 0;

	/* bt_nkeys keys fit bt_data: at most KVFS_BATCH_DATA_SIZE / KEY_SIZE (empty names) */
	for (uint32_t i = 0; i < bt->bt_nkeys && n < sizeof(lens) / sizeof(*lens); i++) {
		struct kvfs_ioc_key k;

		memcpy(&k, bt->bt_data + i * KEY_SIZE, sizeof(k));
		if (!kv_ioc_in_data(bt->bt_nkeys, k.ik_name_off, k.ik_name_len))
			continue; /* its own turn reports it */
		names[n] = (const char *)bt->bt_data + k.ik_name_off;
		lens[n++] = k.ik_name_len;
	}
	kv_batch_prefetch(b, names, lens, n);
}

/* The shared tier as the batch's kb_remote (core/batch.h): arg is fs->kf_shared. */
static int shared_lookup(void *arg, struct kv_inode *dir, const char *name)
{
	return kv_shared_lookup(arg, dir, name);
}

static void shared_prefetch(void *arg, struct kv_inode *dir, const char *const *names, unsigned n)
{
	kv_shared_prefetch(arg, dir, names, n);
}

static int do_batch(struct ioc *io, enum kv_ioc_kind kind, struct kvfs_ioc_batch *bt, uint64_t t0)
{
	struct kv_fs *fs = io->io_fs;
	struct changed ch = {.ch_fs = fs};
	struct kv_batch b = {
	    .kb_st = fs->kf_store,
	    .kb_cred = kv_fs_cred(io->io_req),
	    .kb_changed = name_changed,
	    .kb_arg = &ch,
	};
	bool regions = kind == KV_IOC_PUT || kind == KV_IOC_GET, event;
	uint64_t failed = 0, total;
	struct answer an = {fs, bt, &failed};
	int err = 0;

	if (kv_ctl_is(io->io_ino))
		return -ENOTDIR;
	if (fs->kf_shared)
		b.kb_remote =
		    (struct kv_batch_remote){shared_lookup, shared_prefetch, fs->kf_shared};
	b.kb_dir = kv_fs_inode(fs, io->io_ino);
	if (!kv_inode_is_dir(b.kb_dir))
		return -ENOTDIR;
	err = kv_ioc_batch_check(kind, bt);
	if (err)
		return err;
	if (regions) {
		err = tgid_of(io->io_tid, &io->io_tgid);
		if (err)
			return err;
	}
	event = kind == KV_IOC_PUT && (bt->bt_flags & KVFS_PUT_WAIT_EVENT);
	if (event) {
		err = kv_dev_event_begin(bt->bt_data + KVFS_BATCH_EVENT_OFF);
		if (err)
			return err;
	}
	if (regions)
		kv_region_begin(fs->kf_regions);
	b.kb_ns[KV_STAGE_VALIDATE] = kv_now_ns() - t0;
	if (kind == KV_IOC_GET && fs->kf_shared) {
		uint64_t t1 = kv_now_ns();

		prefetch(&b, bt);
		b.kb_ns[KV_STAGE_INDEX] += kv_now_ns() - t1;
	}
	bt->bt_ok = bt->bt_prefix = 0;
	bt->bt_bytes = 0;
	for (uint32_t i = 0; i < bt->bt_nkeys; i++) {
		struct kvfs_ioc_key k;

		memcpy(&k, bt->bt_data + i * KEY_SIZE, sizeof(k));
		b.kb_key = i;
		k.ik_result = one_key(io, &b, kind, bt, &k);
		if (k.ik_result >= 0) {
			bt->bt_ok++;
			bt->bt_prefix += bt->bt_prefix == i;
			if (kind != KV_IOC_REMOVE)
				bt->bt_bytes += (uint64_t)k.ik_result;
		} else {
			failed++;
			kv_stats_key_error(&fs->kf_stats, (int)k.ik_result);
		}
		memcpy(bt->bt_data + i * KEY_SIZE, &k, sizeof(k));
		/* Earlier keys' copies ran beside this lookup: the oldest may be waited for. */
		kv_batch_retire(&b, false, copy_done, &an);
	}
	kv_batch_retire(&b, true, copy_done, &an);
	if (regions)
		kv_region_end(fs->kf_regions);
	if (event)
		kv_dev_event_end();
	changed_flush(&ch);
	/* --rados-sync: puts and removes return once the cluster has them (or after the timeout) */
	if ((kind == KV_IOC_PUT || kind == KV_IOC_REMOVE) && bt->bt_ok && fs->kf_shared &&
	    kv_shared_sync_on(fs->kf_shared))
		kv_shared_sync(fs->kf_shared);
	total = kv_now_ns() - t0;
	bt->bt_ns = total;
	kv_stats_ioc(&fs->kf_stats, kind, t0, bt->bt_nkeys, failed, bt->bt_bytes, b.kb_ns);
	atomic_fetch_add_explicit(&fs->kf_stats.ks_ssd_direct, b.kb_direct, memory_order_relaxed);
	if (fs->kf_trace_fd >= 0)
		trace_batch(io, kind, bt, &b, total);
	return 0;
}

/* --- the trace --- */

static const char *tier_name(uint32_t f)
{
	if ((f & KVFS_KEY_DRAM) && (f & KVFS_KEY_SSD))
		return "dram+ssd";
	return f & KVFS_KEY_DRAM ? "dram" : f & KVFS_KEY_SSD ? "ssd" : "none";
}

static void trace_batch(struct ioc *io, enum kv_ioc_kind kind, const struct kvfs_ioc_batch *bt,
			const struct kv_batch *b, uint64_t total_ns)
{
	uint64_t id = bt->bt_hdr.ih_trace_id;
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (!f)
		return;
	fprintf(f,
		"{\"type\": \"batch\", \"trace_id\": %" PRIu64 ", \"pid\": %d, \"op\": \"%s\", "
		"\"keys\": %u, \"failures\": %u, \"bytes\": %" PRIu64 ", \"total_us\": %.3f",
		id, (int)io->io_tid, kv_ioc_name(kind), bt->bt_nkeys, bt->bt_nkeys - bt->bt_ok,
		bt->bt_bytes, total_ns / 1e3);
	for (int s = 0; s < KV_STAGE__COUNT; s++)
		fprintf(f, ", \"%s_us\": %.3f", kv_stage_name((enum kv_stage)s), b->kb_ns[s] / 1e3);
	fputs("}\n", f);
	for (uint32_t i = 0; i < bt->bt_nkeys; i++) {
		struct kvfs_ioc_key k;

		memcpy(&k, bt->bt_data + i * KEY_SIZE, sizeof(k));
		fprintf(f, "{\"type\": \"key\", \"trace_id\": %" PRIu64 ", \"key\": \"", id);
		if (kv_ioc_in_data(bt->bt_nkeys, k.ik_name_off, k.ik_name_len))
			kv_json_str(f, (const char *)bt->bt_data + k.ik_name_off, k.ik_name_len);
		fprintf(f,
			"\", \"size\": %" PRIu64 ", \"tier\": \"%s\", \"status\": %" PRId64 "}\n",
			k.ik_size, tier_name(k.ik_flags), k.ik_result);
	}
	/* Best effort: a full disk loses trace lines, never a batch. */
	if (fclose(f) == 0 && write(io->io_fs->kf_trace_fd, buf, len) < 0)
		buf[0] = '\0';
	free(buf);
}

/* --- dispatch --- */

enum kv_ioc_kind kv_ioc_kind_of(unsigned int cmd)
{
	switch (cmd) {
	case KVFS_IOC_LOOKUP:
		return KV_IOC_LOOKUP;
	case KVFS_IOC_PUT:
		return KV_IOC_PUT;
	case KVFS_IOC_GET:
		return KV_IOC_GET;
	default:
		return KV_IOC_REMOVE;
	}
}

int kv_ioc_hdr_check(unsigned int cmd, const struct kvfs_ioc_hdr *h)
{
	if (h->ih_size != _IOC_SIZE(cmd))
		return -EINVAL;
	if (cmd != KVFS_IOC_VERSION && h->ih_version != KVFS_IOC_ABI_VERSION)
		return -EPROTO;
	return 0;
}

static int dispatch(struct ioc *io, unsigned int cmd, void *buf, uint64_t t0)
{
	int err = kv_ioc_hdr_check(cmd, buf);

	if (err)
		return err;
	switch (cmd) {
	case KVFS_IOC_VERSION:
		return do_version(io, buf);
	case KVFS_IOC_REGION_REGISTER:
		return do_region_register(io, buf);
	case KVFS_IOC_REGION_UNREGISTER:
		return do_unregister(io, buf, false);
	case KVFS_IOC_LAYOUT_REGISTER:
		return do_layout_register(io, buf);
	case KVFS_IOC_LAYOUT_UNREGISTER:
		return do_unregister(io, buf, true);
	default:
		return do_batch(io, kv_ioc_kind_of(cmd), buf, t0);
	}
}

bool kv_ioc_known(unsigned int cmd)
{
	switch (cmd) {
	case KVFS_IOC_VERSION:
	case KVFS_IOC_REGION_REGISTER:
	case KVFS_IOC_REGION_UNREGISTER:
	case KVFS_IOC_LAYOUT_REGISTER:
	case KVFS_IOC_LAYOUT_UNREGISTER:
	case KVFS_IOC_LOOKUP:
	case KVFS_IOC_PUT:
	case KVFS_IOC_GET:
	case KVFS_IOC_REMOVE:
		return true;
	default:
		return false;
	}
}

void kv_fs_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg,
		 struct fuse_file_info *fi, unsigned flags, const void *in_buf, size_t in_bufsz,
		 size_t out_bufsz)
{
	uint64_t t0 = kv_now_ns();
	struct kv_fs *fs = fuse_req_userdata(req);
	struct ioc io = {
	    .io_fs = fs,
	    .io_req = req,
	    .io_ino = ino,
	    .io_tag = fi ? fi->fh : 0,
	    .io_tid = fuse_req_ctx(req)->pid,
	};
	size_t size = _IOC_SIZE(cmd);
	void *buf = NULL;
	int err;

	if (!kv_ioc_known(cmd) || (flags & FUSE_IOCTL_UNRESTRICTED))
		err = -ENOTTY;
	else if (in_bufsz != size || out_bufsz != size)
		err = -EINVAL;
	else if (!(buf = malloc(size)))
		err = -ENOMEM;
	else {
		memcpy(buf, in_buf, size);
		err = dispatch(&io, cmd, buf, t0);
	}
	kv_stats_op(&fs->kf_stats, KV_OP_IOCTL, t0, 0, err);
	if (err)
		fuse_reply_err(req, -err);
	else
		fuse_reply_ioctl(req, 0, buf, size);
	free(buf);
}

void kv_fs_ioctl_release(struct kv_fs *fs, uint64_t fh)
{
	/*
	 * The common case, a close with nothing registered anywhere, costs one
	 * load: the gauge is exact after every change (gauge_lock), and a
	 * registration on this file finished before its release began.
	 */
	if (!fs->kf_regions ||
	    !atomic_load_explicit(&fs->kf_stats.ks_regions, memory_order_relaxed) ||
	    !kv_region_release_tag(fs->kf_regions, fh))
		return;
	kv_region_reap(fs->kf_regions);
	update_gauges(fs);
}
