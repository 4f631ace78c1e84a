/* SPDX-License-Identifier: MIT */
/*
 * gpu/cuda.h — the CUDA backend (gpu/cuda.c), built with KVFS_HAVE_CUDA
 * only and used by gpu/dev.c and gpu/region.c alone.
 *
 * Regions. CUDA_IPC opens the client's cudaIpcMemHandle_t with
 * cudaIpcOpenMemHandle on the device whose UUID the client named; each
 * (client process, device, handle) is opened once and shared by every
 * region over it, and closed when the last of them goes (unregister, fd
 * close, client exit all end in ro_close). CUDA_VMM takes the client's fd
 * of an exported POSIX-fd handle with pidfd_getfd, imports it, maps it
 * into a reserved range of the daemon and gives the daemon's device
 * read/write access. Both check the registered range against the
 * allocation's size (-EFAULT), an unknown UUID (-ENODEV), a handle the
 * driver refuses (-EINVAL) and an fd the caller does not hold (-EBADF).
 *
 * Copies. ro_copy only queues (device, dst, src, len) on the calling
 * thread; ro_sync issues the thread's queue on streams of the daemon's own
 * (a small pool per device, taken for the issue and the wait), as one
 * cudaMemcpyBatchAsync per device where the driver offers it (one
 * cudaMemcpyAsync per piece where not), then waits once per stream. So
 * every segment of a key (64 layers' slices, say) is issued before one
 * synchronisation, and a key's copy is complete when ro_sync returns.
 *
 * Locks: cu_ipc_lock guards the IPC cache; each device's stream pool has
 * its own mutex. Neither is held while a copy is waited for; cu_ipc_lock
 * is held across cudaIpcOpenMemHandle (registrations are rare).
 */
#ifndef KVFS_GPU_CUDA_H
#define KVFS_GPU_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "gpu/region.h"

/*
 * Probes the driver, the runtime and the devices, and loads the driver
 * entry points. Returns 0, or -ENODEV with the reason in one line in note.
 */
int kv_cuda_start(char *note, size_t note_len);
void kv_cuda_stop(void);
int kv_cuda_count(void);
void kv_cuda_versions(int *driver, int *runtime);

/* Pins [base, base + len) in chunks on a thread of its own; unpinned at kv_cuda_stop. */
void kv_cuda_pin(void *base, size_t len);
void kv_cuda_pin_progress(uint64_t *pinned, uint64_t *total);

/* The thread's copies wait for this client event until kv_cuda_event_end (gpu/dev.h). */
int kv_cuda_event_begin(const uint8_t *handle);
void kv_cuda_event_end(void);

extern const struct kv_region_ops kv_cuda_ipc_ops;
extern const struct kv_region_ops kv_cuda_vmm_ops;

#endif
