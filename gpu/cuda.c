/* SPDX-License-Identifier: MIT */
/*
 * gpu/cuda.c — CUDA_IPC and CUDA_VMM regions, device copies on the
 * daemon's streams, and the pinning of the DRAM pool (see gpu/cuda.h).
 *
 * The driver API is reached only through cudaGetDriverEntryPointByVersion
 * (asking for the ABI of CUDA 12.0, which every function used here has
 * kept since), so the binary needs no libcuda at link time and starts on
 * machines without a driver.
 */
#include "gpu/cuda.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAXDEV	    16		  /* devices the daemon uses */
#define DEV_STREAMS 32		  /* streams per device, at most */
#define QMAX	    512		  /* copies a thread queues before it issues them */
#define PIN_CHUNK   (256ul << 20) /* bytes pinned per cudaHostRegister */
#define DRV_ABI	    12000	  /* the driver ABI the entry points are asked for */

/* The driver functions used, as cudaGetDriverEntryPointByVersion gives them. */
static struct {
	CUresult (*get_range)(CUdeviceptr *base, size_t *size, CUdeviceptr p);
	CUresult (*import)(CUmemGenericAllocationHandle *h, void *os,
			   CUmemAllocationHandleType type);
	CUresult (*props)(CUmemAllocationProp *prop, CUmemGenericAllocationHandle h);
	CUresult (*granularity)(size_t *g, const CUmemAllocationProp *prop,
				CUmemAllocationGranularity_flags o);
	CUresult (*reserve)(CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr,
			    unsigned long long flags);
	CUresult (*addr_free)(CUdeviceptr p, size_t size);
	CUresult (*map)(CUdeviceptr p, size_t size, size_t off, CUmemGenericAllocationHandle h,
			unsigned long long flags);
	CUresult (*unmap)(CUdeviceptr p, size_t size);
	CUresult (*set_access)(CUdeviceptr p, size_t size, const CUmemAccessDesc *d, size_t n);
	CUresult (*release)(CUmemGenericAllocationHandle h);
} drv;

/* Immutable after kv_cuda_start. */
static int ndev, drv_version, rt_version;
static uint8_t dev_uuid[MAXDEV][16];

/* A device's streams: created on demand, lent for one issue and wait. */
struct stream_pool {
	pthread_mutex_t sp_lock; /* guards the rest */
	pthread_cond_t sp_cond;
	cudaStream_t sp_free[DEV_STREAMS];
	int sp_nfree, sp_made;
	cudaStream_t sp_all[DEV_STREAMS];
};
static struct stream_pool pools[MAXDEV];
static atomic_bool no_batch; /* the driver refused cudaMemcpyBatchAsync once */

/* One (client, device, handle) opened with cudaIpcOpenMemHandle. */
struct ipc_ent {
	struct ipc_ent *ie_next;
	pid_t ie_owner;
	int ie_dev;
	uint8_t ie_handle[64];
	void *ie_ptr;
	size_t ie_size;
	unsigned ie_refs;
};
static pthread_mutex_t cu_ipc_lock = PTHREAD_MUTEX_INITIALIZER; /* guards ipc_list */
static struct ipc_ent *ipc_list;

/* A CUDA_VMM mapping in the daemon. */
struct vmm_map {
	CUdeviceptr vm_base;
	size_t vm_size;
};

/* The calling thread's queued copies (see gpu/cuda.h). */
struct copyq {
	int cq_n;
	int cq_dev[QMAX];
	void *cq_dst[QMAX];
	const void *cq_src[QMAX];
	size_t cq_len[QMAX];
	cudaStream_t cq_held[MAXDEV]; /* streams taken by this thread, until it syncs */
	int cq_err;
	cudaEvent_t cq_event; /* KVFS_PUT_WAIT_EVENT: what every stream taken waits for */
};
static __thread struct copyq tq;

/* Pinning (kv_cuda_pin): the thread's own state, and progress for anyone. */
static pthread_t pin_thread;
static atomic_bool pin_started; /* set by the starting thread; pin_base and pin_len before it */
static void *pin_base;
static size_t pin_len;
static atomic_bool pin_stop;
static _Atomic uint64_t pin_done; /* bytes pinned: chunks [0, pin_done / PIN_CHUNK] */

static int cu_errno(cudaError_t e)
{
	cudaGetLastError(); /* a failed call leaves an error to clear, unless sticky */
	switch (e) {
	case cudaSuccess:
		return 0;
	case cudaErrorMemoryAllocation:
		return -ENOMEM;
	case cudaErrorInvalidValue:
	case cudaErrorInvalidResourceHandle:
	case cudaErrorMapBufferObjectFailed:
	case cudaErrorInvalidDevicePointer:
		return -EINVAL;
	default:
		return -EIO;
	}
}

static int drv_errno(CUresult e)
{
	switch (e) {
	case CUDA_SUCCESS:
		return 0;
	case CUDA_ERROR_OUT_OF_MEMORY:
		return -ENOMEM;
	case CUDA_ERROR_INVALID_VALUE:
	case CUDA_ERROR_INVALID_HANDLE:
	case CUDA_ERROR_NOT_SUPPORTED:
		return -EINVAL;
	default:
		return -EIO;
	}
}

/* A driver function by name: by ABI version where the runtime can (12.5 on). */
static cudaError_t entry_point(const char *sym, void **fn, enum cudaDriverEntryPointQueryResult *q)
{
#if CUDART_VERSION >= 12050
	return cudaGetDriverEntryPointByVersion(sym, fn, DRV_ABI, cudaEnableDefault, q);
#else
	return cudaGetDriverEntryPoint(sym, fn, cudaEnableDefault, q);
#endif
}

static int load(const char *sym, void **fn)
{
	enum cudaDriverEntryPointQueryResult q;

	if (entry_point(sym, fn, &q) != cudaSuccess || q != cudaDriverEntryPointSuccess || !*fn) {
		cudaGetLastError();
		return -ENOSYS;
	}
	return 0;
}

static int load_driver(const char **missing)
{
	static const struct {
		const char *name;
		void **fn;
	} syms[] = {
	    {"cuMemGetAddressRange", (void **)&drv.get_range},
	    {"cuMemImportFromShareableHandle", (void **)&drv.import},
	    {"cuMemGetAllocationPropertiesFromHandle", (void **)&drv.props},
	    {"cuMemGetAllocationGranularity", (void **)&drv.granularity},
	    {"cuMemAddressReserve", (void **)&drv.reserve},
	    {"cuMemAddressFree", (void **)&drv.addr_free},
	    {"cuMemMap", (void **)&drv.map},
	    {"cuMemUnmap", (void **)&drv.unmap},
	    {"cuMemSetAccess", (void **)&drv.set_access},
	    {"cuMemRelease", (void **)&drv.release},
	};

	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++)
		if (load(syms[i].name, syms[i].fn)) {
			*missing = syms[i].name;
			return -ENOSYS;
		}
	return 0;
}

int kv_cuda_start(char *note, size_t note_len)
{
	const char *missing = NULL;
	cudaError_t e;
	int n = 0;

	cudaRuntimeGetVersion(&rt_version);
	if (cudaDriverGetVersion(&drv_version) != cudaSuccess || drv_version == 0) {
		snprintf(note, note_len,
			 "no CUDA driver on this machine (libcuda.so.1 not loaded)");
		return -ENODEV;
	}
	/* Minor-version compatibility: any driver of the runtime's major version will do. */
	if (drv_version / 1000 < rt_version / 1000) {
		snprintf(note, note_len,
			 "the CUDA driver (%d.%d) is older than the runtime kvfs was built with "
			 "(%d.%d) needs: update the driver or use --gpu=off",
			 drv_version / 1000, drv_version % 1000 / 10, rt_version / 1000,
			 rt_version % 1000 / 10);
		return -ENODEV;
	}
	e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess || n <= 0) {
		snprintf(note, note_len, "no usable CUDA device (%s)",
			 e != cudaSuccess ? cudaGetErrorString(e) : "none found");
		cudaGetLastError();
		return -ENODEV;
	}
	if (load_driver(&missing)) {
		snprintf(note, note_len, "the CUDA driver (%d.%d) lacks %s", drv_version / 1000,
			 drv_version % 1000 / 10, missing);
		return -ENODEV;
	}
	ndev = n < MAXDEV ? n : MAXDEV;
	for (int d = 0; d < ndev; d++) {
		struct cudaDeviceProp p;

		if (cudaGetDeviceProperties(&p, d) != cudaSuccess) {
			snprintf(note, note_len, "CUDA device %d: cannot read its properties", d);
			ndev = 0;
			return -ENODEV;
		}
		memcpy(dev_uuid[d], p.uuid.bytes, 16);
		pthread_mutex_init(&pools[d].sp_lock, NULL);
		pthread_cond_init(&pools[d].sp_cond, NULL);
	}
	return 0;
}

int kv_cuda_count(void)
{
	return ndev;
}

void kv_cuda_versions(int *driver, int *runtime)
{
	*driver = drv_version;
	*runtime = rt_version;
}

static int dev_of_uuid(const uint8_t *uuid)
{
	for (int d = 0; d < ndev; d++)
		if (!memcmp(dev_uuid[d], uuid, 16))
			return d;
	return -1;
}

/* --- streams and copies --- */

static int stream_take(int dev, cudaStream_t *out)
{
	struct stream_pool *p = &pools[dev];
	int err = 0;

	pthread_mutex_lock(&p->sp_lock);
	while (!p->sp_nfree && p->sp_made == DEV_STREAMS)
		pthread_cond_wait(&p->sp_cond, &p->sp_lock);
	if (p->sp_nfree) {
		*out = p->sp_free[--p->sp_nfree];
	} else {
		err = cu_errno(cudaStreamCreateWithFlags(out, cudaStreamNonBlocking));
		if (!err)
			p->sp_all[p->sp_made++] = *out;
	}
	pthread_mutex_unlock(&p->sp_lock);
	return err;
}

static void stream_give(int dev, cudaStream_t s)
{
	struct stream_pool *p = &pools[dev];

	pthread_mutex_lock(&p->sp_lock);
	p->sp_free[p->sp_nfree++] = s;
	pthread_cond_signal(&p->sp_cond);
	pthread_mutex_unlock(&p->sp_lock);
}

/*
 * Issues n copies on s: one cudaMemcpyBatchAsync where the driver offers it
 * (the source is read in stream order, so a KVFS_PUT_WAIT_EVENT wait ahead
 * of it holds), else one cudaMemcpyAsync each.
 */
static int issue(cudaStream_t s, void **dst, const void **src, size_t *len, size_t n)
{
	struct cudaMemcpyAttributes attr = {.srcAccessOrder = cudaMemcpySrcAccessOrderStream};
	size_t idx = 0;
	int err = 0;

	if (n > 1 && !atomic_load_explicit(&no_batch, memory_order_relaxed)) {
#if CUDART_VERSION >= 13000
		cudaError_t e = cudaMemcpyBatchAsync(dst, src, len, n, &attr, &idx, 1, s);
#elif CUDART_VERSION >= 12080
		size_t fail;
		cudaError_t e =
		    cudaMemcpyBatchAsync(dst, (void **)src, len, n, &attr, &idx, 1, &fail, s);
#else
		cudaError_t e = cudaErrorNotSupported; /* no batched copy in this runtime */
#endif

		if (e == cudaSuccess)
			return 0;
		cudaGetLastError();
		/* Not offered: never again. Refused: these copies one by one, which report why. */
		if (e == cudaErrorNotSupported || e == cudaErrorCallRequiresNewerDriver)
			atomic_store_explicit(&no_batch, true, memory_order_relaxed);
	}
	for (size_t i = 0; !err && i < n; i++)
		err = cu_errno(cudaMemcpyAsync(dst[i], src[i], len[i], cudaMemcpyDefault, s));
	return err;
}

/* Issues the thread's queue, device by device, on streams it then holds until sync. */
static void flush_queue(void)
{
	void *dst[QMAX];
	const void *src[QMAX];
	size_t len[QMAX];

	for (int d = 0; d < ndev && tq.cq_n; d++) {
		size_t n = 0;
		int err = 0;

		for (int i = 0; i < tq.cq_n; i++)
			if (tq.cq_dev[i] == d) {
				dst[n] = tq.cq_dst[i];
				src[n] = tq.cq_src[i];
				len[n++] = tq.cq_len[i];
			}
		if (!n)
			continue;
		err = cu_errno(cudaSetDevice(d));
		if (!err && !tq.cq_held[d]) {
			err = stream_take(d, &tq.cq_held[d]);
			if (!err && tq.cq_event)
				err = cu_errno(cudaStreamWaitEvent(tq.cq_held[d], tq.cq_event, 0));
		}
		if (!err)
			err = issue(tq.cq_held[d], dst, src, len, n);
		if (err && !tq.cq_err)
			tq.cq_err = err;
	}
	tq.cq_n = 0;
}

static int cuda_copy(struct kv_region *r, bool to_region, uint64_t off, const struct iovec *iov,
		     int n)
{
	char *dev = (char *)(uintptr_t)(r->rg_dptr + off);

	for (int i = 0; i < n; i++) {
		int k;

		if (tq.cq_n == QMAX)
			flush_queue();
		k = tq.cq_n++;
		tq.cq_dev[k] = r->rg_dev;
		tq.cq_len[k] = iov[i].iov_len;
		tq.cq_dst[k] = to_region ? dev : iov[i].iov_base;
		tq.cq_src[k] = to_region ? iov[i].iov_base : dev;
		dev += iov[i].iov_len;
	}
	return 0;
}

/* Issues what the thread queued and waits for every stream it holds. */
static int cuda_sync(struct kv_region *r)
{
	int err;

	flush_queue();
	for (int d = 0; d < ndev; d++) {
		int e;

		if (!tq.cq_held[d])
			continue;
		e = cu_errno(cudaStreamSynchronize(tq.cq_held[d]));
		if (e && !tq.cq_err)
			tq.cq_err = e;
		stream_give(d, tq.cq_held[d]);
		tq.cq_held[d] = NULL;
	}
	err = tq.cq_err;
	tq.cq_err = 0;
	return err;
}

/* What cuda_issue leaves in flight: one event per device, recorded after its copies. */
struct cu_ticket {
	cudaEvent_t ct_ev[MAXDEV];
};

static int ticket_wait(void *arg)
{
	struct cu_ticket *ct = arg;
	int err = 0;

	for (int d = 0; d < MAXDEV; d++) {
		int e;

		if (!ct->ct_ev[d])
			continue;
		e = cu_errno(cudaEventSynchronize(ct->ct_ev[d]));
		err = err ? err : e;
		cudaEventDestroy(ct->ct_ev[d]);
	}
	free(ct);
	return err;
}

/*
 * Issues the thread's queue and gives its streams back with an event
 * recorded after the copies, so the thread can go on (read the next key
 * from the SSD, say) while they run. Where an event cannot be made, waits.
 */
static int cuda_issue(struct kv_region *r, struct kv_copy_ticket *t)
{
	struct cu_ticket *ct = calloc(1, sizeof(*ct));
	int err;

	if (!ct)
		return cuda_sync(r);
	flush_queue();
	for (int d = 0; d < ndev; d++) {
		if (!tq.cq_held[d])
			continue;
		if (cudaSetDevice(d) != cudaSuccess ||
		    cudaEventCreateWithFlags(&ct->ct_ev[d], cudaEventDisableTiming) !=
			cudaSuccess ||
		    cudaEventRecord(ct->ct_ev[d], tq.cq_held[d]) != cudaSuccess) {
			cudaGetLastError();
			if (ct->ct_ev[d])
				cudaEventDestroy(ct->ct_ev[d]);
			ct->ct_ev[d] = NULL;
			continue; /* left held: cuda_sync below waits for it */
		}
		stream_give(d, tq.cq_held[d]);
		tq.cq_held[d] = NULL;
	}
	err = cuda_sync(r); /* what could not be ticketed, and the issue's errors */
	if (err) {
		ticket_wait(ct);
		return err;
	}
	*t = (struct kv_copy_ticket){ticket_wait, ct};
	return 0;
}

int kv_cuda_event_begin(const uint8_t *handle)
{
	cudaIpcEventHandle_t h;
	int err;

	static_assert(sizeof(h.reserved) == KVFS_BATCH_EVENT_SIZE, "event handle size");
	memcpy(h.reserved, handle, sizeof(h.reserved));
	err = cu_errno(cudaIpcOpenEventHandle(&tq.cq_event, h));
	if (err)
		tq.cq_event = NULL;
	return err == -ENOMEM ? err : err ? -EINVAL : 0;
}

void kv_cuda_event_end(void)
{
	if (tq.cq_event)
		cudaEventDestroy(tq.cq_event);
	tq.cq_event = NULL;
}

/* --- CUDA_IPC --- */

static int ipc_open(struct kv_region *r, const struct kv_region_desc *d, const struct kv_caller *c)
{
	cudaIpcMemHandle_t h;
	struct ipc_ent *e;
	uint64_t end;
	int dev = dev_of_uuid(d->rd_dev_uuid), err = 0;

	if (dev < 0)
		return -ENODEV;
	if (__builtin_add_overflow(d->rd_offset, d->rd_length, &end))
		return -EFAULT;
	pthread_mutex_lock(&cu_ipc_lock);
	for (e = ipc_list; e; e = e->ie_next)
		if (e->ie_owner == c->kc_tgid && e->ie_dev == dev &&
		    !memcmp(e->ie_handle, d->rd_ipc_handle, 64))
			break;
	if (!e) {
		CUdeviceptr base;

		e = calloc(1, sizeof(*e));
		err = e ? cu_errno(cudaSetDevice(dev)) : -ENOMEM;
		if (!err) {
			memcpy(h.reserved, d->rd_ipc_handle, sizeof(h.reserved));
			err = cu_errno(
			    cudaIpcOpenMemHandle(&e->ie_ptr, h, cudaIpcMemLazyEnablePeerAccess));
		}
		if (!err && (err = drv_errno(drv.get_range(&base, &e->ie_size,
							   (CUdeviceptr)(uintptr_t)e->ie_ptr))))
			cudaIpcCloseMemHandle(e->ie_ptr);
		if (err) {
			free(e);
			pthread_mutex_unlock(&cu_ipc_lock);
			return err == -ENOMEM ? err : -EINVAL;
		}
		e->ie_owner = c->kc_tgid;
		e->ie_dev = dev;
		memcpy(e->ie_handle, d->rd_ipc_handle, 64);
		e->ie_next = ipc_list;
		ipc_list = e;
	}
	if (end > e->ie_size) {
		err = -EFAULT;
	} else {
		e->ie_refs++;
		r->rg_dev = dev;
		r->rg_dptr = (uint64_t)(uintptr_t)e->ie_ptr + d->rd_offset;
		r->rg_cuda = e;
	}
	if (!e->ie_refs) { /* opened for a range that does not fit it: nobody holds it */
		ipc_list = e->ie_next;
		cudaSetDevice(dev);
		cudaIpcCloseMemHandle(e->ie_ptr);
		free(e);
	}
	pthread_mutex_unlock(&cu_ipc_lock);
	return err;
}

static void ipc_close(struct kv_region *r)
{
	struct ipc_ent *e = r->rg_cuda, **pp;

	pthread_mutex_lock(&cu_ipc_lock);
	if (--e->ie_refs == 0) {
		for (pp = &ipc_list; *pp != e; pp = &(*pp)->ie_next)
			;
		*pp = e->ie_next;
		cudaSetDevice(e->ie_dev);
		cudaIpcCloseMemHandle(e->ie_ptr);
		free(e);
	}
	pthread_mutex_unlock(&cu_ipc_lock);
}

const struct kv_region_ops kv_cuda_ipc_ops = {
    .ro_name = "cuda_ipc",
    .ro_open = ipc_open,
    .ro_close = ipc_close,
    .ro_copy = cuda_copy,
    .ro_sync = cuda_sync,
    .ro_issue = cuda_issue,
};

/* --- CUDA_VMM --- */

static int vmm_open(struct kv_region *r, const struct kv_region_desc *d, const struct kv_caller *c)
{
	CUmemAccessDesc acc = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE},
			       .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	CUmemGenericAllocationHandle h;
	CUmemAllocationProp prop;
	struct vmm_map *m;
	size_t gran = 0;
	uint64_t end;
	int dev = dev_of_uuid(d->rd_dev_uuid), fd, err;

	if (dev < 0)
		return -ENODEV;
	if (d->rd_fd < 0)
		return -EBADF;
	if (__builtin_add_overflow(d->rd_offset, d->rd_length, &end) || end > SIZE_MAX / 2)
		return -EFAULT;
	fd = (int)syscall(SYS_pidfd_getfd, r->rg_pidfd, d->rd_fd, 0);
	if (fd < 0)
		return -errno;
	err = cu_errno(cudaSetDevice(dev));
	if (!err)
		err = drv_errno(drv.import(&h, (void *)(uintptr_t)fd,
					   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
	close(fd);
	if (err)
		return err == -ENOMEM ? err : -EINVAL;
	m = calloc(1, sizeof(*m));
	err = m ? drv_errno(drv.props(&prop, h)) : -ENOMEM;
	if (!err)
		err = drv_errno(drv.granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	if (!err && !gran)
		err = -EINVAL;
	if (err)
		goto out_release;
	m->vm_size = (end + gran - 1) / gran * gran;
	err = drv_errno(drv.reserve(&m->vm_base, m->vm_size, gran, 0, 0));
	if (err)
		goto out_release;
	/* A range past the allocation's end does not map. */
	if (drv.map(m->vm_base, m->vm_size, 0, h, 0) != CUDA_SUCCESS) {
		err = -EFAULT;
		goto out_free;
	}
	acc.location.id = dev;
	err = drv_errno(drv.set_access(m->vm_base, m->vm_size, &acc, 1));
	if (err) {
		drv.unmap(m->vm_base, m->vm_size);
		goto out_free;
	}
	drv.release(h); /* the mapping holds the memory now */
	r->rg_dev = dev;
	r->rg_dptr = (uint64_t)m->vm_base + d->rd_offset;
	r->rg_cuda = m;
	return 0;
out_free:
	drv.addr_free(m->vm_base, m->vm_size);
out_release:
	drv.release(h);
	free(m);
	return err;
}

static void vmm_close(struct kv_region *r)
{
	struct vmm_map *m = r->rg_cuda;

	cudaSetDevice(r->rg_dev);
	drv.unmap(m->vm_base, m->vm_size);
	drv.addr_free(m->vm_base, m->vm_size);
	free(m);
}

const struct kv_region_ops kv_cuda_vmm_ops = {
    .ro_name = "cuda_vmm",
    .ro_open = vmm_open,
    .ro_close = vmm_close,
    .ro_copy = cuda_copy,
    .ro_sync = cuda_sync,
    .ro_issue = cuda_issue,
};

/* --- pinning the pool --- */

static void *pin_main(void *arg)
{
	for (size_t off = 0; off < pin_len && !atomic_load(&pin_stop); off += PIN_CHUNK) {
		size_t n = pin_len - off < PIN_CHUNK ? pin_len - off : PIN_CHUNK;

		if (cudaHostRegister((char *)pin_base + off, n, cudaHostRegisterPortable) !=
		    cudaSuccess) {
			cudaGetLastError();
			break; /* copies through unpinned memory still work */
		}
		atomic_store(&pin_done, off + n);
	}
	return NULL;
}

void kv_cuda_pin(void *base, size_t len)
{
	if (!ndev || atomic_load(&pin_started))
		return;
	pin_base = base;
	pin_len = len;
	atomic_store(&pin_started, pthread_create(&pin_thread, NULL, pin_main, NULL) == 0);
}

void kv_cuda_pin_progress(uint64_t *pinned, uint64_t *total)
{
	*pinned = atomic_load(&pin_done);
	*total = atomic_load(&pin_started) ? pin_len : 0;
}

void kv_cuda_stop(void)
{
	uint64_t done;

	if (atomic_load(&pin_started)) {
		atomic_store(&pin_stop, true);
		pthread_join(pin_thread, NULL);
		done = atomic_load(&pin_done);
		for (size_t off = 0; off < done; off += PIN_CHUNK)
			cudaHostUnregister((char *)pin_base + off);
		atomic_store(&pin_started, false);
	}
	for (int d = 0; d < ndev; d++) {
		cudaSetDevice(d);
		for (int i = 0; i < pools[d].sp_made; i++)
			cudaStreamDestroy(pools[d].sp_all[i]);
		pools[d].sp_made = pools[d].sp_nfree = 0;
	}
	ndev = 0;
}
