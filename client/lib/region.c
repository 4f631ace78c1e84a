/* SPDX-License-Identifier: MIT */
/*
 * client/lib/region.c — regions (HOST_SHM, HOST_PROC) and layouts.
 *
 * A HOST_SHM region is a POSIX shared-memory object the library creates
 * (0600, a name unique to this process), sizes, binds to a NUMA node, faults
 * in, and hands to the daemon by name; the daemon maps it during the
 * register ioctl, after which the name is removed: the memory lives on in
 * the two mappings and vanishes with the last of them, so a crashed client
 * leaves nothing in /dev/shm.
 */
#include <errno.h>
#include <fcntl.h>
#include <numa.h>
#include <numaif.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client/lib/client.h"

/* Removes the table entry of (kind, id); returns 1 with its memory in *addr and *len, or 0. */
static int ent_take(struct kvfs *kv, enum kvfs__ent_kind kind, uint32_t id, void **addr,
		    size_t *len)
{
	int found = 0;

	pthread_mutex_lock(&kv->kv_lock);
	for (size_t i = 0; i < kv->kv_nents; i++) {
		struct kvfs__ent *ke = &kv->kv_ents[i];

		if (ke->ke_kind == kind && ke->ke_id == id) {
			*addr = ke->ke_addr;
			*len = ke->ke_len;
			kv->kv_ents[i] = kv->kv_ents[--kv->kv_nents];
			found = 1;
			break;
		}
	}
	pthread_mutex_unlock(&kv->kv_lock);
	return found;
}

static int unregister(struct kvfs *kv, unsigned long cmd, uint32_t id)
{
	struct kvfs_ioc_id ioc;

	memset(&ioc, 0, sizeof(ioc));
	kvfs__hdr(&ioc.id_hdr, sizeof(ioc), kvfs_trace_next(kv));
	ioc.id_id = id;
	return kv->kv_ioctl(kv->kv_fd, cmd, &ioc);
}

static int region_ioctl(struct kvfs *kv, struct kvfs_ioc_region *rg, uint32_t *idp)
{
	int err;

	kvfs__hdr(&rg->rg_hdr, sizeof(*rg), kvfs_trace_next(kv));
	err = kv->kv_ioctl(kv->kv_fd, KVFS_IOC_REGION_REGISTER, rg);
	if (!err)
		*idp = rg->rg_id;
	return err;
}

/*
 * Makes `node` (-1: the node of the caller's CPU) the preferred node of
 * [addr, +len) before it is touched. Preferred, not bound: a full node
 * spills to another instead of failing the fault (SIGBUS on shared memory).
 */
static int prefer_node(void *addr, size_t len, int node)
{
	unsigned long mask[16] = {0};

	if (numa_available() < 0)
		return node <= 0 ? 0 : -EINVAL;
	if (node < 0) {
		int cpu = sched_getcpu();

		node = cpu < 0 ? 0 : numa_node_of_cpu(cpu);
		if (node < 0)
			return 0;
	}
	if (node > numa_max_node() || (size_t)node >= sizeof(mask) * 8)
		return -EINVAL;
	mask[node / (8 * sizeof(mask[0]))] = 1ul << (node % (8 * sizeof(mask[0])));
	if (mbind(addr, len, MPOL_PREFERRED, mask, sizeof(mask) * 8, 0))
		return -errno;
	return 0;
}

static int shm_create(char *name, size_t size)
{
	static atomic_uint counter;

	for (int tries = 0; tries < 16; tries++) {
		int fd;

		snprintf(name, KVFS_SHM_NAME_MAX, "/kvfs.%d.%u", (int)getpid(),
			 atomic_fetch_add(&counter, 1));
		fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (fd >= 0)
			return fd;
		if (errno != EEXIST)
			return -errno;
	}
	return -EEXIST;
}

int kvfs_region_alloc(struct kvfs *kv, size_t len, int numa_node, void **addrp, uint32_t *idp)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE), size;
	struct kvfs_ioc_region *rg;
	void *addr;
	int fd, err;

	if (!kv || !addrp || !idp || len == 0 || len > SIZE_MAX - page)
		return -EINVAL;
	size = (len + page - 1) / page * page;
	rg = calloc(1, sizeof(*rg));
	if (!rg)
		return -ENOMEM;
	fd = shm_create(rg->rg_shm_name, size);
	if (fd < 0) {
		err = fd;
		goto out_free;
	}
	if (ftruncate(fd, (off_t)size)) {
		err = -errno;
		goto out_unlink;
	}
	addr = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (addr == MAP_FAILED) {
		err = -errno;
		goto out_unlink;
	}
	err = prefer_node(addr, size, numa_node);
	if (err)
		goto out_unmap;
	memset(addr, 0, size);
	rg->rg_kind = KVFS_REGION_HOST_SHM;
	rg->rg_length = size;
	err = region_ioctl(kv, rg, idp);
	if (err)
		goto out_unmap;
	err = kvfs__ent_add(kv, KVFS__ENT_REGION, *idp, addr, size);
	if (err) {
		unregister(kv, KVFS_IOC_REGION_UNREGISTER, *idp);
		goto out_unmap;
	}
	shm_unlink(rg->rg_shm_name);
	close(fd);
	free(rg);
	*addrp = addr;
	return 0;
out_unmap:
	munmap(addr, size);
out_unlink:
	shm_unlink(rg->rg_shm_name);
	close(fd);
out_free:
	free(rg);
	return err;
}

/* 1 when Yama restricts ptrace to descendants and named tracers (ptrace_scope 1). */
static int yama_scope_one(void)
{
	char c = 0;
	int fd = open("/proc/sys/kernel/yama/ptrace_scope", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return 0;
	if (read(fd, &c, 1) != 1)
		c = 0;
	close(fd);
	return c == '1';
}

/*
 * Registers rg, letting the daemon reach this process: a HOST_PROC region
 * is read with process_vm_readv and a CUDA_VMM handle taken with
 * pidfd_getfd, both of which need the daemon to be allowed to ptrace us.
 * On EPERM where Yama allows only named tracers, names the daemon (its pid
 * is from its own pid namespace, so when that does not let it in, any
 * tracer) and tries again, once per process.
 */
int kvfs__register_traced(struct kvfs *kv, struct kvfs_ioc_region *rg, uint32_t *idp)
{
	static atomic_bool ptracer_set;
	int err = region_ioctl(kv, rg, idp);

	if (err == -EPERM && !atomic_load(&ptracer_set) && geteuid() != 0 && yama_scope_one()) {
		if (kv->kv_daemon_pid > 0 &&
		    prctl(PR_SET_PTRACER, (unsigned long)kv->kv_daemon_pid, 0, 0, 0) == 0) {
			rg->rg_id = 0;
			err = region_ioctl(kv, rg, idp);
		}
		if (err == -EPERM && prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0) == 0) {
			rg->rg_id = 0;
			err = region_ioctl(kv, rg, idp);
		}
		atomic_store(&ptracer_set, err != -EPERM);
	}
	return err;
}

int kvfs_region_register(struct kvfs *kv, void *addr, size_t len, uint32_t *idp)
{
	struct kvfs_ioc_region rg;
	int err;

	if (!kv || !addr || !idp || len == 0 || (uintptr_t)addr + len < (uintptr_t)addr)
		return -EINVAL;
	memset(&rg, 0, sizeof(rg));
	rg.rg_kind = KVFS_REGION_HOST_PROC;
	rg.rg_addr = (uintptr_t)addr;
	rg.rg_length = len;
	err = kvfs__register_traced(kv, &rg, idp);
	if (err)
		return err;
	err = kvfs__ent_add(kv, KVFS__ENT_REGION, *idp, NULL, 0);
	if (err)
		unregister(kv, KVFS_IOC_REGION_UNREGISTER, *idp);
	return err;
}

int kvfs_region_unregister(struct kvfs *kv, uint32_t id)
{
	void *addr;
	size_t len;
	int err;

	if (!kv)
		return -EINVAL;
	err = unregister(kv, KVFS_IOC_REGION_UNREGISTER, id);
	if (err)
		return err;
	if (ent_take(kv, KVFS__ENT_REGION, id, &addr, &len) && addr)
		munmap(addr, len);
	return 0;
}

int kvfs_layout_register(struct kvfs *kv, const struct kvfs_segment *segs, size_t n, uint32_t *idp,
			 uint64_t *nblocks)
{
	struct kvfs_ioc_layout *ly;
	int err;

	if (!kv || !segs || !idp || n == 0)
		return -EINVAL;
	if (n > KVFS_LAYOUT_MAX_SEGS || n > kv->kv_max_segs)
		return -E2BIG;
	ly = calloc(1, sizeof(*ly));
	if (!ly)
		return -ENOMEM;
	kvfs__hdr(&ly->ly_hdr, sizeof(*ly), kvfs_trace_next(kv));
	ly->ly_nsegs = (uint32_t)n;
	for (size_t i = 0; i < n; i++) {
		ly->ly_segs[i].sg_region = segs[i].ks_region;
		ly->ly_segs[i].sg_base = segs[i].ks_base;
		ly->ly_segs[i].sg_stride = segs[i].ks_stride;
		ly->ly_segs[i].sg_length = segs[i].ks_len;
	}
	err = kv->kv_ioctl(kv->kv_fd, KVFS_IOC_LAYOUT_REGISTER, ly);
	if (err)
		goto out_free;
	*idp = ly->ly_id;
	if (nblocks)
		*nblocks = ly->ly_nblocks;
	err = kvfs__ent_add(kv, KVFS__ENT_LAYOUT, ly->ly_id, NULL, 0);
	if (err)
		unregister(kv, KVFS_IOC_LAYOUT_UNREGISTER, ly->ly_id);
out_free:
	free(ly);
	return err;
}

int kvfs_layout_unregister(struct kvfs *kv, uint32_t id)
{
	void *addr;
	size_t len;
	int err;

	if (!kv)
		return -EINVAL;
	err = unregister(kv, KVFS_IOC_LAYOUT_UNREGISTER, id);
	if (!err)
		ent_take(kv, KVFS__ENT_LAYOUT, id, &addr, &len);
	return err;
}
