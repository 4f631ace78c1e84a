/* SPDX-License-Identifier: MIT */
/*
 * gpu/dev.h — the device backend in force.
 *
 * kvfs is built with the CUDA backend when the toolkit is found (CMake
 * option KVFS_CUDA=AUTO|ON|OFF). Such a build links the CUDA runtime
 * statically and reaches the driver only through
 * cudaGetDriverEntryPointByVersion, never by linking libcuda, so one binary
 * runs on machines with and without a GPU driver: kv_dev_start probes at
 * start what the machine offers and the option --gpu=auto|cuda|off decides
 * what to do with it.
 *
 * With CUDA in force the daemon serves the region kinds CUDA_IPC and
 * CUDA_VMM (gpu/cuda.c) and pins the DRAM pool for the devices' DMA
 * (cudaHostRegister, in chunks, by a background thread: kv_dev_pin), so
 * device copies run at full PCIe speed; until a chunk is pinned, copies
 * through it still work (the runtime stages them).
 *
 * State. One backend per process: kv_dev_start runs once, before the
 * daemon serves, and what it sets is immutable afterwards; kv_dev_stop
 * runs once, after serving, before the pool goes away. The pinning
 * progress is atomic and may be read at any time.
 */
#ifndef KVFS_GPU_DEV_H
#define KVFS_GPU_DEV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* --gpu= */
enum kv_dev_mode {
	KV_DEV_AUTO, /* CUDA when a usable device is present, else host regions only */
	KV_DEV_CUDA, /* CUDA, or refuse to start */
	KV_DEV_OFF,  /* host regions only */
};

/* "auto", "cuda", "off". */
const char *kv_dev_mode_name(enum kv_dev_mode m);

/* "cuda" when built with the CUDA backend, else "none". */
const char *kv_dev_built(void);

/*
 * Probes the devices and starts the backend `mode` asks for. Returns 0 (the
 * backend in force is then kv_dev_backend(); with KV_DEV_AUTO and no usable
 * device, note holds one line saying why CUDA is not in force, else "") or
 * -ENODEV with KV_DEV_CUDA when CUDA cannot be used (no CUDA build, no
 * driver, a driver older than the runtime needs, no device), the reason
 * in one line in note (note_len bytes). kv_dev_note() keeps that line.
 */
int kv_dev_start(enum kv_dev_mode mode, char *note, size_t note_len);

/* Why CUDA is not in force ("" when it is, or with --gpu=off). */
const char *kv_dev_note(void);

/* "cuda" when the CUDA backend is in force, else "none". */
const char *kv_dev_backend(void);

/* True when the CUDA backend is in force. */
bool kv_dev_cuda(void);

/* The number of CUDA devices in use (0 unless CUDA is in force). */
int kv_dev_count(void);

/* The driver's and the runtime's CUDA versions (1000 * major + 10 * minor; 0: none). */
void kv_dev_versions(int *driver, int *runtime);

/*
 * Starts pinning [base, base + len) for device DMA in the background, in
 * chunks. Does nothing unless CUDA is in force.
 */
void kv_dev_pin(void *base, size_t len);

/* Bytes pinned so far, and bytes kv_dev_pin was asked to pin. */
void kv_dev_pin_progress(uint64_t *pinned, uint64_t *total);

/*
 * KVFS_PUT_WAIT_EVENT: until kv_dev_event_end, the calling thread's device
 * copies wait for the client's event (handle: a cudaIpcEventHandle_t,
 * KVFS_BATCH_EVENT_SIZE bytes). Returns 0, -EOPNOTSUPP without CUDA in
 * force, or -EINVAL for a handle the driver refuses.
 */
int kv_dev_event_begin(const uint8_t *handle);
void kv_dev_event_end(void);

/* Stops the pinning, unpins, and releases the devices. */
void kv_dev_stop(void);

#endif
