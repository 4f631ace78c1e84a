/* SPDX-License-Identifier: MIT */
/*
 * examples/c/roundtrip.c — a put/get round trip through libkvfs.
 *
 *   kvfs-roundtrip DIR      (DIR: a directory in a kvfs mount)
 *
 * From host memory: a shared-memory region from kvfs_region_alloc, four
 * keys put from it, the region cleared, the keys got back into it and
 * compared. Built with CUDA (cmake -DKVFS_CUDA=ON), the same from device
 * memory: cudaMalloc, kvfs_register_device, put (device -> kvfs), clear,
 * get (kvfs -> device), compare on the host; where device memory cannot
 * be registered here it says why and skips that part. Exits 0 when every
 * byte came back.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvfs/kvfs.h>

#ifdef KVFS_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define KEYS	4
#define KEY_LEN (256u << 10)

static void fill(unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)(i * 131 + seed * 7 + (i >> 12));
}

/* Puts KEYS keys of region `id` (offsets i * KEY_LEN) under prefix, or gets them back. */
static int move(struct kvfs *kv, uint32_t id, const char *prefix, int get)
{
	struct kvfs_iov iov[KEYS];
	struct kvfs_key keys[KEYS];
	struct kvfs_status st[KEYS];
	struct kvfs_summary sum;
	char names[KEYS][64];
	int err;

	for (int i = 0; i < KEYS; i++) {
		snprintf(names[i], sizeof(names[i]), "%s/key%d", prefix, i);
		iov[i] = (struct kvfs_iov){id, (uint64_t)i * KEY_LEN, KEY_LEN};
		keys[i] = (struct kvfs_key){.kk_name = names[i], .kk_niov = 1, .kk_iov = &iov[i]};
	}
	err = get ? kvfs_get(kv, keys, KEYS, 0, st, &sum)
		  : kvfs_put(kv, keys, KEYS, KVFS_PUT_FLAG_MKDIR, 0, st, &sum);
	if (err)
		return err;
	for (int i = 0; i < KEYS; i++)
		if (st[i].ks_result < 0) {
			fprintf(stderr, "%s %s: %s\n", get ? "get" : "put", names[i],
				strerror((int)-st[i].ks_result));
			return (int)st[i].ks_result;
		}
	return 0;
}

static int host_roundtrip(struct kvfs *kv)
{
	unsigned char *want = malloc(KEYS * KEY_LEN);
	void *mem;
	uint32_t id;
	int err;

	if (!want)
		return -ENOMEM;
	err = kvfs_region_alloc(kv, KEYS * KEY_LEN, -1, &mem, &id);
	if (!err) {
		fill(want, KEYS * KEY_LEN, 1);
		memcpy(mem, want, KEYS * KEY_LEN);
		err = move(kv, id, "example-host", 0);
		if (!err) {
			memset(mem, 0, KEYS * KEY_LEN);
			err = move(kv, id, "example-host", 1);
		}
		if (!err && memcmp(mem, want, KEYS * KEY_LEN))
			err = -EIO;
		kvfs_region_unregister(kv, id);
	}
	free(want);
	printf("host memory: %s\n", err ? strerror(-err) : "round trip ok");
	return err;
}

#ifdef KVFS_HAVE_CUDA
static int device_roundtrip(struct kvfs *kv)
{
	unsigned char *want = malloc(KEYS * KEY_LEN), *got = malloc(KEYS * KEY_LEN);
	void *dev = NULL;
	uint32_t id;
	int err = 0;

	if (!want || !got)
		err = -ENOMEM;
	else if (cudaMalloc(&dev, KEYS * KEY_LEN) != cudaSuccess)
		err = -ENODEV;
	if (!err) {
		fill(want, KEYS * KEY_LEN, 2);
		err = cudaMemcpy(dev, want, KEYS * KEY_LEN, cudaMemcpyHostToDevice) == cudaSuccess
			  ? 0
			  : -EIO;
	}
	if (!err)
		err = kvfs_register_device(kv, dev, KEYS * KEY_LEN, &id);
	if (err == -ENODEV || err == -EOPNOTSUPP) {
		printf("device memory: skipped: %s\n",
		       kvfs_device_note()[0] ? kvfs_device_note() : strerror(-err));
		err = 0;
		goto out;
	}
	if (!err) {
		err = move(kv, id, "example-dev", 0);
		if (!err && cudaMemset(dev, 0, KEYS * KEY_LEN) != cudaSuccess)
			err = -EIO;
		if (!err)
			err = move(kv, id, "example-dev", 1);
		if (!err &&
		    cudaMemcpy(got, dev, KEYS * KEY_LEN, cudaMemcpyDeviceToHost) != cudaSuccess)
			err = -EIO;
		if (!err && memcmp(got, want, KEYS * KEY_LEN))
			err = -EIO;
		kvfs_region_unregister(kv, id);
	}
	printf("device memory: %s\n", err ? strerror(-err) : "round trip ok");
out:
	if (dev)
		cudaFree(dev);
	free(want);
	free(got);
	return err;
}
#endif

int main(int argc, char **argv)
{
	struct kvfs *kv;
	int err;

	if (argc != 2) {
		fprintf(stderr, "usage: kvfs-roundtrip DIR\n");
		return 2;
	}
	err = kvfs_open(argv[1], &kv);
	if (err) {
		fprintf(stderr, "kvfs_open %s: %s\n", argv[1], strerror(-err));
		return 1;
	}
	err = host_roundtrip(kv);
#ifdef KVFS_HAVE_CUDA
	if (!err)
		err = device_roundtrip(kv);
#else
	printf("device memory: skipped: built without CUDA\n");
#endif
	kvfs_close(kv);
	return err ? 1 : 0;
}
