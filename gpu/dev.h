/* SPDX-License-Identifier: MIT */
/*
 * gpu/dev.h — device backends.
 *
 * kvfs is built with the CUDA backend when the toolkit is found (CMake
 * option KVFS_CUDA=AUTO|ON|OFF) and runs without a GPU either way: the
 * backend is probed at start and the daemon reports what it found.
 */
#ifndef KVFS_GPU_DEV_H
#define KVFS_GPU_DEV_H

/* "cuda" when built with the CUDA backend, else "none". */
const char *kv_dev_backend(void);

/*
 * Returns the number of CUDA devices usable now: 0 without the CUDA backend,
 * without a driver or without a device. Never fails.
 */
int kv_dev_count(void);

#endif
