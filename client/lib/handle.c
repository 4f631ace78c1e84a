/* SPDX-License-Identifier: MIT */
/*
 * client/lib/handle.c — a kvfs handle: open, close, limits, trace ids.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "client/lib/client.h"

static int sys_ioctl(int fd, unsigned long cmd, void *arg)
{
	return ioctl(fd, cmd, arg) < 0 ? -errno : 0;
}

void kvfs__hdr(struct kvfs_ioc_hdr *h, uint32_t size, uint64_t trace)
{
	h->ih_size = size;
	h->ih_version = KVFS_IOC_ABI_VERSION;
	h->ih_trace_id = trace;
}

int kvfs__open_fd(int fd, kvfs__ioctl_fn fn, struct kvfs **kvp)
{
	struct kvfs_ioc_version v;
	struct kvfs *kv;
	int err;

	memset(&v, 0, sizeof(v));
	kvfs__hdr(&v.vr_hdr, sizeof(v), 0);
	err = fn(fd, KVFS_IOC_VERSION, &v);
	if (err == -EINVAL || err == -ENOSYS || err == -EOPNOTSUPP)
		err = -ENOTTY; /* a filesystem that knows no kvfs ioctl */
	if (err)
		goto out_close;
	if (v.vr_abi != KVFS_IOC_ABI_VERSION || v.vr_max_keys == 0 || v.vr_path_max == 0) {
		err = -EPROTO;
		goto out_close;
	}
	kv = calloc(1, sizeof(*kv));
	if (!kv) {
		err = -ENOMEM;
		goto out_close;
	}
	kv->kv_fd = fd;
	kv->kv_ioctl = fn;
	kv->kv_max_keys = v.vr_max_keys < KVFS_BATCH_MAX_KEYS ? v.vr_max_keys : KVFS_BATCH_MAX_KEYS;
	kv->kv_max_segs = v.vr_max_segs;
	kv->kv_max_regions = v.vr_max_regions;
	kv->kv_path_max = v.vr_path_max;
	kv->kv_kinds = v.vr_kinds;
	kv->kv_daemon_pid = (pid_t)v.vr_daemon_pid;
	atomic_init(&kv->kv_trace, (uint64_t)getpid() << 32);
	pthread_mutex_init(&kv->kv_lock, NULL);
	*kvp = kv;
	return 0;
out_close:
	close(fd);
	return err;
}

int kvfs_open(const char *dir, struct kvfs **kvp)
{
	int fd;

	if (!dir || !kvp)
		return -EINVAL;
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	return kvfs__open_fd(fd, sys_ioctl, kvp);
}

/*
 * Layouts go first: the daemon refuses to drop a region a layout still
 * uses. Closing the fd would release everything in the daemon too, but only
 * at the last close of the open file (a forked child may hold it), so each
 * is unregistered explicitly.
 */
int kvfs_close(struct kvfs *kv)
{
	struct kvfs_ioc_id id;
	int err = 0, e;
	size_t i;

	if (!kv)
		return 0;
	for (int pass = 0; pass < 2; pass++) {
		enum kvfs__ent_kind kind = pass == 0 ? KVFS__ENT_LAYOUT : KVFS__ENT_REGION;
		unsigned long cmd =
		    pass == 0 ? KVFS_IOC_LAYOUT_UNREGISTER : KVFS_IOC_REGION_UNREGISTER;

		for (i = 0; i < kv->kv_nents; i++) {
			struct kvfs__ent *ke = &kv->kv_ents[i];

			if (ke->ke_kind != kind)
				continue;
			memset(&id, 0, sizeof(id));
			kvfs__hdr(&id.id_hdr, sizeof(id), kvfs_trace_next(kv));
			id.id_id = ke->ke_id;
			e = kv->kv_ioctl(kv->kv_fd, cmd, &id);
			if (e && !err)
				err = e;
			if (ke->ke_addr)
				munmap(ke->ke_addr, ke->ke_len);
		}
	}
	if (close(kv->kv_fd) && !err)
		err = -errno;
	pthread_mutex_destroy(&kv->kv_lock);
	free(kv->kv_ents);
	free(kv);
	return err;
}

int kvfs_fd(const struct kvfs *kv)
{
	return kv->kv_fd;
}

uint64_t kvfs_trace_next(struct kvfs *kv)
{
	return atomic_fetch_add(&kv->kv_trace, 1) + 1;
}

void kvfs_limits(const struct kvfs *kv, uint32_t *max_keys, uint32_t *max_segs,
		 uint32_t *max_regions, uint32_t *path_max)
{
	if (max_keys)
		*max_keys = kv->kv_max_keys;
	if (max_segs)
		*max_segs = kv->kv_max_segs;
	if (max_regions)
		*max_regions = kv->kv_max_regions;
	if (path_max)
		*path_max = kv->kv_path_max;
}

int kvfs__ent_add(struct kvfs *kv, enum kvfs__ent_kind kind, uint32_t id, void *addr, size_t len)
{
	int err = 0;

	pthread_mutex_lock(&kv->kv_lock);
	if (kv->kv_nents == kv->kv_cap) {
		size_t cap = kv->kv_cap ? kv->kv_cap * 2 : 16;
		struct kvfs__ent *n = realloc(kv->kv_ents, cap * sizeof(*n));

		if (!n) {
			err = -ENOMEM;
			goto out_unlock;
		}
		kv->kv_ents = n;
		kv->kv_cap = cap;
	}
	kv->kv_ents[kv->kv_nents++] =
	    (struct kvfs__ent){.ke_kind = kind, .ke_id = id, .ke_addr = addr, .ke_len = len};
out_unlock:
	pthread_mutex_unlock(&kv->kv_lock);
	return err;
}
