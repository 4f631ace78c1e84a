/* SPDX-License-Identifier: MIT */
/*
 * gpu/dev.c — which device backend is in force (see gpu/dev.h). Set once
 * by kv_dev_start before the daemon serves; read-only afterwards.
 */
#include "gpu/dev.h"

#include <errno.h>
#include <stdio.h>

#ifdef KVFS_HAVE_CUDA
#include "gpu/cuda.h"
#endif

static bool cuda_on;	   /* immutable after kv_dev_start */
static char dev_note[256]; /* ditto */

const char *kv_dev_mode_name(enum kv_dev_mode m)
{
	return m == KV_DEV_CUDA ? "cuda" : m == KV_DEV_OFF ? "off" : "auto";
}

const char *kv_dev_built(void)
{
#ifdef KVFS_HAVE_CUDA
	return "cuda";
#else
	return "none";
#endif
}

int kv_dev_start(enum kv_dev_mode mode, char *note, size_t note_len)
{
	int err;

	note[0] = '\0';
	if (mode == KV_DEV_OFF)
		return 0;
#ifdef KVFS_HAVE_CUDA
	err = kv_cuda_start(note, note_len);
#else
	snprintf(note, note_len, "this kvfs was built without CUDA (cmake -DKVFS_CUDA=ON)");
	err = -ENODEV;
#endif
	if (!err)
		cuda_on = true;
	snprintf(dev_note, sizeof(dev_note), "%s", note);
	return mode == KV_DEV_CUDA ? err : 0;
}

const char *kv_dev_note(void)
{
	return dev_note;
}

const char *kv_dev_backend(void)
{
	return cuda_on ? "cuda" : "none";
}

bool kv_dev_cuda(void)
{
	return cuda_on;
}

int kv_dev_count(void)
{
#ifdef KVFS_HAVE_CUDA
	return cuda_on ? kv_cuda_count() : 0;
#else
	return 0;
#endif
}

void kv_dev_versions(int *driver, int *runtime)
{
	*driver = *runtime = 0;
#ifdef KVFS_HAVE_CUDA
	if (cuda_on)
		kv_cuda_versions(driver, runtime);
#endif
}

void kv_dev_pin(void *base, size_t len)
{
#ifdef KVFS_HAVE_CUDA
	if (cuda_on)
		kv_cuda_pin(base, len);
#endif
}

void kv_dev_pin_progress(uint64_t *pinned, uint64_t *total)
{
	*pinned = *total = 0;
#ifdef KVFS_HAVE_CUDA
	if (cuda_on)
		kv_cuda_pin_progress(pinned, total);
#endif
}

int kv_dev_event_begin(const uint8_t *handle)
{
#ifdef KVFS_HAVE_CUDA
	if (cuda_on)
		return kv_cuda_event_begin(handle);
#endif
	return -EOPNOTSUPP;
}

void kv_dev_event_end(void)
{
#ifdef KVFS_HAVE_CUDA
	if (cuda_on)
		kv_cuda_event_end();
#endif
}

void kv_dev_stop(void)
{
#ifdef KVFS_HAVE_CUDA
	if (cuda_on)
		kv_cuda_stop();
#endif
	cuda_on = false;
}
