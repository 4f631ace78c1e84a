/* SPDX-License-Identifier: MIT */
/*
 * client/lib/device.c — kvfs_register_device: a device pointer and length
 * become a CUDA_IPC or CUDA_VMM region.
 *
 * The library finds the allocation itself: cuMemGetAddressRange gives its
 * base and size; cuPointerGetAttribute says whether cudaIpcGetMemHandle
 * works on it (cudaMalloc memory) or not (cuMemCreate memory, PyTorch's
 * expandable segments), in which case the allocation's handle is exported
 * as a POSIX fd that the daemon takes from this process with pidfd_getfd
 * during the register ioctl; the library closes its fd afterwards. The
 * device is named by UUID, which means the same in the daemon whatever
 * CUDA_VISIBLE_DEVICES either side has.
 *
 * The driver is reached only through cudaGetDriverEntryPointByVersion (the
 * runtime is linked statically), so the library loads on machines without
 * a driver; there, and in a build without CUDA, registration fails with
 * -ENODEV or -EOPNOTSUPP and kvfs_device_note says why. The calls run in
 * the pointer's device's primary context, pushed and popped around them:
 * the caller's current context is left as it was.
 *
 * State: the entry points are loaded once (pthread_once) and immutable
 * after; no lock.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "client/lib/client.h"

#ifdef KVFS_HAVE_CUDA
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <pthread.h>

#define DRV_ABI 12000 /* the driver ABI the entry points are asked for */

static struct {
	CUresult (*ptr_attr)(void *data, CUpointer_attribute a, CUdeviceptr p);
	CUresult (*get_range)(CUdeviceptr *base, size_t *size, CUdeviceptr p);
	CUresult (*dev_get)(CUdevice *d, int ordinal);
	CUresult (*uuid)(CUuuid *u, CUdevice d);
	CUresult (*ctx_retain)(CUcontext *c, CUdevice d);
	CUresult (*ctx_release)(CUdevice d);
	CUresult (*ctx_push)(CUcontext c);
	CUresult (*ctx_pop)(CUcontext *c);
	CUresult (*ipc_handle)(CUipcMemHandle *h, CUdeviceptr p);
	CUresult (*retain)(CUmemGenericAllocationHandle *h, void *addr);
	CUresult (*export_fd)(void *os, CUmemGenericAllocationHandle h, CUmemAllocationHandleType t,
			      unsigned long long flags);
	CUresult (*release)(CUmemGenericAllocationHandle h);
	CUresult (*init)(unsigned flags);
} drv;
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;
static int drv_err; /* 0, or why there is no driver (immutable after drv_once) */
static char drv_note[160];

/* A driver function by name: by ABI version where the runtime can (12.5 on). */
static cudaError_t entry_point(const char *sym, void **fn, enum cudaDriverEntryPointQueryResult *q)
{
#if CUDART_VERSION >= 12050
	return cudaGetDriverEntryPointByVersion(sym, fn, DRV_ABI, cudaEnableDefault, q);
#else
	return cudaGetDriverEntryPoint(sym, fn, cudaEnableDefault, q);
#endif
}

static void drv_load(void)
{
	static const struct {
		const char *name;
		void **fn;
	} syms[] = {
	    {"cuInit", (void **)&drv.init},
	    {"cuPointerGetAttribute", (void **)&drv.ptr_attr},
	    {"cuMemGetAddressRange", (void **)&drv.get_range},
	    {"cuDeviceGet", (void **)&drv.dev_get},
	    {"cuDeviceGetUuid", (void **)&drv.uuid},
	    {"cuDevicePrimaryCtxRetain", (void **)&drv.ctx_retain},
	    {"cuDevicePrimaryCtxRelease", (void **)&drv.ctx_release},
	    {"cuCtxPushCurrent", (void **)&drv.ctx_push},
	    {"cuCtxPopCurrent", (void **)&drv.ctx_pop},
	    {"cuIpcGetMemHandle", (void **)&drv.ipc_handle},
	    {"cuMemRetainAllocationHandle", (void **)&drv.retain},
	    {"cuMemExportToShareableHandle", (void **)&drv.export_fd},
	    {"cuMemRelease", (void **)&drv.release},
	};
	enum cudaDriverEntryPointQueryResult q;
	int version = 0, rt = 0;

	cudaRuntimeGetVersion(&rt);
	if (cudaDriverGetVersion(&version) != cudaSuccess || version == 0) {
		snprintf(drv_note, sizeof(drv_note), "no CUDA driver on this machine");
		drv_err = -ENODEV;
		return;
	}
	/* Minor-version compatibility: any driver of the runtime's major version will do. */
	if (version / 1000 < rt / 1000) {
		snprintf(drv_note, sizeof(drv_note),
			 "the CUDA driver (%d.%d) is older than libkvfs's runtime (%d.%d) needs",
			 version / 1000, version % 1000 / 10, rt / 1000, rt % 1000 / 10);
		drv_err = -ENODEV;
		return;
	}
	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++)
		if (entry_point(syms[i].name, syms[i].fn, &q) != cudaSuccess ||
		    q != cudaDriverEntryPointSuccess) {
			snprintf(drv_note, sizeof(drv_note), "the CUDA driver lacks %s",
				 syms[i].name);
			drv_err = -ENODEV;
			return;
		}
	if (drv.init(0) != CUDA_SUCCESS) {
		snprintf(drv_note, sizeof(drv_note), "the CUDA driver found no usable device");
		drv_err = -ENODEV;
	}
}

/* Fills rg (kind, offset, length, UUID, handle or fd) for [ptr, ptr + len) in the current context.
 */
static int describe(CUdeviceptr p, size_t len, CUdevice dev, struct kvfs_ioc_region *rg, int *fd)
{
	CUmemGenericAllocationHandle h;
	CUdeviceptr base;
	CUipcMemHandle ipc;
	CUuuid uuid;
	size_t size;
	int legacy = 0;

	if (drv.get_range(&base, &size, p) != CUDA_SUCCESS)
		return -EINVAL;
	if (p + len < p || p + len > base + size)
		return -EFAULT;
	if (drv.uuid(&uuid, dev) != CUDA_SUCCESS)
		return -ENODEV;
	memcpy(rg->rg_dev_uuid, uuid.bytes, sizeof(rg->rg_dev_uuid));
	rg->rg_offset = p - base;
	rg->rg_length = len;
	if (drv.ptr_attr(&legacy, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, base) ==
		CUDA_SUCCESS &&
	    legacy) {
		if (drv.ipc_handle(&ipc, base) != CUDA_SUCCESS)
			return -EOPNOTSUPP;
		static_assert(sizeof(ipc.reserved) == sizeof(rg->rg_ipc_handle), "IPC handle");
		memcpy(rg->rg_ipc_handle, ipc.reserved, sizeof(rg->rg_ipc_handle));
		rg->rg_kind = KVFS_REGION_CUDA_IPC;
		return 0;
	}
	/* cuMemCreate memory: its handle, exported as an fd, if it was made exportable. */
	if (drv.retain(&h, (void *)(uintptr_t)p) != CUDA_SUCCESS)
		return -EOPNOTSUPP;
	if (drv.export_fd(fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) != CUDA_SUCCESS)
		*fd = -1;
	drv.release(h);
	if (*fd < 0)
		return -EOPNOTSUPP;
	rg->rg_kind = KVFS_REGION_CUDA_VMM;
	rg->rg_fd = *fd;
	return 0;
}

int kvfs_register_device(struct kvfs *kv, const void *ptr, size_t len, uint32_t *idp)
{
	CUdeviceptr p = (CUdeviceptr)(uintptr_t)ptr;
	struct kvfs_ioc_region rg;
	CUcontext ctx, popped;
	CUdevice dev;
	int ordinal = -1, type = 0, fd = -1, err;

	if (!kv || !ptr || !idp || len == 0)
		return -EINVAL;
	pthread_once(&drv_once, drv_load);
	if (drv_err)
		return drv_err;
	if (!(kv->kv_kinds & (1u << KVFS_REGION_CUDA_IPC)))
		return -EOPNOTSUPP; /* the daemon serves no device regions */
	if (drv.ptr_attr(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p) != CUDA_SUCCESS ||
	    type != CU_MEMORYTYPE_DEVICE ||
	    drv.ptr_attr(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p) != CUDA_SUCCESS ||
	    drv.dev_get(&dev, ordinal) != CUDA_SUCCESS)
		return -EINVAL; /* not device memory */
	if (drv.ctx_retain(&ctx, dev) != CUDA_SUCCESS)
		return -ENODEV;
	memset(&rg, 0, sizeof(rg));
	err = drv.ctx_push(ctx) == CUDA_SUCCESS ? 0 : -ENODEV;
	if (!err) {
		err = describe(p, len, dev, &rg, &fd);
		drv.ctx_pop(&popped);
	}
	drv.ctx_release(dev);
	if (!err) /* a VMM handle's fd is taken with pidfd_getfd: ptrace rights */
		err = kvfs__register_traced(kv, &rg, idp);
	if (fd >= 0)
		close(fd); /* the daemon took its own copy during the ioctl */
	if (err)
		return err;
	err = kvfs__ent_add(kv, KVFS__ENT_REGION, *idp, NULL, 0);
	if (err)
		kvfs_region_unregister(kv, *idp);
	return err;
}

const char *kvfs_device_note(void)
{
	pthread_once(&drv_once, drv_load);
	return drv_err ? drv_note : "";
}

#else

int kvfs_register_device(struct kvfs *kv, const void *ptr, size_t len, uint32_t *idp)
{
	if (!kv || !ptr || !idp || len == 0)
		return -EINVAL;
	return -EOPNOTSUPP;
}

const char *kvfs_device_note(void)
{
	return "libkvfs was built without CUDA (cmake -DKVFS_CUDA=ON)";
}

#endif
