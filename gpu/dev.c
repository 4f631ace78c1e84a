/* SPDX-License-Identifier: MIT */
#include "gpu/dev.h"

#ifdef KVFS_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

const char *kv_dev_backend(void)
{
#ifdef KVFS_HAVE_CUDA
	return "cuda";
#else
	return "none";
#endif
}

int kv_dev_count(void)
{
#ifdef KVFS_HAVE_CUDA
	int n = 0;

	if (cudaGetDeviceCount(&n) != cudaSuccess)
		return 0;
	return n;
#else
	return 0;
#endif
}
