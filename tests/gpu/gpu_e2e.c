/* SPDX-License-Identifier: MIT */
/*
 * tests/gpu/gpu_e2e.c — the CUDA tests, against a kvfs mounted with
 * --gpu=cuda on a machine with a GPU (tests/integration/test_gpu.py and
 * tests/gpu/run.sh drive it). Every check compares bytes on the host after
 * a round trip through the daemon; each subcommand ends with "ok".
 *
 *   gpu_e2e probe                exit 0 with a device, 77 (and why) without
 *   gpu_e2e ipc DIR              cudaMalloc memory (CUDA_IPC): two regions on
 *                                one allocation, offsets, a put that waits on
 *                                the caller's event, the daemon's own checks
 *                                (range, UUID, handle) by raw ioctl
 *   gpu_e2e vmm DIR              cuMemCreate memory with a POSIX-fd handle (CUDA_VMM)
 *   gpu_e2e layers DIR N         a layout over N layer tensors (K and V), 64 blocks
 *   gpu_e2e ssd DIR              more values than the pool holds: gets from the SSD
 *   gpu_e2e hold DIR             puts 2 MiB keys forever (killed by the test)
 *   gpu_e2e deny DIR             another process naming this one's region: EPERM
 *   gpu_e2e bench DIR MiB        batch put/get of 2 MiB blocks against plain
 *                                cudaMemcpy to and from pinned memory, as ratios
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../ioctl/ioc_util.h" /* CHECK, and the raw ioctl helpers */
#include "kvfs/kvfs.h"
#include "kvfs/kvfs_ioctl.h"

#define MiB (1ul << 20)

#define CU(call) CHECK((call) == cudaSuccess, "%s", cudaGetErrorString(cudaGetLastError()))

static void pattern(unsigned char *p, size_t n, unsigned seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;

	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = (unsigned char)x;
	}
}

static struct kvfs *open_kv(const char *dir)
{
	struct kvfs *kv;
	int err = kvfs_open(dir, &kv);

	CHECK(!err, "kvfs_open %s: %s", dir, strerror(-err));
	return kv;
}

/*
 * n keys "prefix/i", key i = [i * len, + len) of region id; put (after the
 * CUDA IPC event `event`, when not NULL) or get; all must succeed.
 */
static void batch_ev(struct kvfs *kv, const char *prefix, uint32_t id, uint64_t off0, size_t n,
		     size_t len, int get, const void *event)
{
	struct kvfs_iov *iov = calloc(n, sizeof(*iov));
	struct kvfs_key *keys = calloc(n, sizeof(*keys));
	struct kvfs_status *st = calloc(n, sizeof(*st));
	char(*names)[64] = calloc(n, 64);
	struct kvfs_summary sum;
	int err;

	for (size_t i = 0; i < n; i++) {
		snprintf(names[i], 64, "%s/%zu", prefix, i);
		iov[i] = (struct kvfs_iov){id, off0 + i * len, len};
		keys[i] = (struct kvfs_key){.kk_name = names[i], .kk_niov = 1, .kk_iov = &iov[i]};
	}
	if (get)
		err = kvfs_get(kv, keys, n, 0, st, &sum);
	else if (event)
		err = kvfs_put_event(kv, keys, n, KVFS_PUT_FLAG_MKDIR, event, 0, st, &sum);
	else
		err = kvfs_put(kv, keys, n, KVFS_PUT_FLAG_MKDIR, 0, st, &sum);
	CHECK(!err, "batch: %s", strerror(-err));
	for (size_t i = 0; i < n; i++)
		CHECK(st[i].ks_result == (int64_t)len, "%s %s: %lld", get ? "get" : "put", names[i],
		      (long long)st[i].ks_result);
	free(iov);
	free(keys);
	free(st);
	free(names);
}

static void batch(struct kvfs *kv, const char *prefix, uint32_t id, uint64_t off0, size_t n,
		  size_t len, int get)
{
	batch_ev(kv, prefix, id, off0, n, len, get, NULL);
}

/* Fills dev (n bytes) with pattern seed; returns the host copy. */
static unsigned char *dev_fill(void *dev, size_t n, unsigned seed)
{
	unsigned char *h = malloc(n);

	CHECK(h, "malloc");
	pattern(h, n, seed);
	CU(cudaMemcpy(dev, h, n, cudaMemcpyHostToDevice));
	return h;
}

static void dev_expect(const void *dev, const unsigned char *want, size_t n, const char *what)
{
	unsigned char *h = malloc(n);

	CHECK(h, "malloc");
	CU(cudaMemcpy(h, dev, n, cudaMemcpyDeviceToHost));
	CHECK(!memcmp(h, want, n), "%s: bytes differ", what);
	free(h);
}

/* A raw CUDA_IPC registration; returns 0 (and unregisters) or -errno. */
static int raw_ipc(int fd, const cudaIpcMemHandle_t *h, const uint8_t *uuid, uint64_t off,
		   uint64_t len)
{
	struct kvfs_ioc_region rg;
	struct kvfs_ioc_id id;

	memset(&rg, 0, sizeof(rg));
	rg.rg_hdr = (struct kvfs_ioc_hdr){sizeof(rg), KVFS_IOC_ABI_VERSION, 0};
	rg.rg_kind = KVFS_REGION_CUDA_IPC;
	rg.rg_offset = off;
	rg.rg_length = len;
	memcpy(rg.rg_dev_uuid, uuid, 16);
	memcpy(rg.rg_ipc_handle, h, 64);
	if (ioctl(fd, KVFS_IOC_REGION_REGISTER, &rg))
		return -errno;
	memset(&id, 0, sizeof(id));
	id.id_hdr = (struct kvfs_ioc_hdr){sizeof(id), KVFS_IOC_ABI_VERSION, 0};
	id.id_id = rg.rg_id;
	ioctl(fd, KVFS_IOC_REGION_UNREGISTER, &id);
	return 0;
}

/*
 * A put that waits on the caller's event instead of a synchronisation:
 * the bytes are still being copied in on the caller's stream when the
 * ioctl starts, and the daemon must copy what the stream leaves.
 */
static void event_put(struct kvfs *kv, void *dev, size_t total)
{
	size_t n = 8 * MiB;
	cudaIpcEventHandle_t eh;
	unsigned char *pin;
	cudaStream_t s;
	cudaEvent_t ev;
	uint32_t id;

	CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	CU(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming | cudaEventInterprocess));
	CU(cudaMallocHost((void **)&pin, n));
	pattern(pin, n, 7);
	CU(cudaMemset(dev, 0, total));
	CU(cudaDeviceSynchronize());
	CHECK(!kvfs_register_device(kv, (char *)dev + MiB, n, &id), "register for the event put");
	/* Several passes over the same bytes: the stream is busy for a while. */
	for (int i = 0; i < 8; i++)
		CU(cudaMemcpyAsync((char *)dev + MiB, pin, n, cudaMemcpyHostToDevice, s));
	CU(cudaEventRecord(ev, s));
	CU(cudaIpcGetEventHandle(&eh, ev));
	batch_ev(kv, "ipc/event", id, 0, 8, MiB, 0, &eh);
	CU(cudaStreamSynchronize(s));
	CU(cudaMemset(dev, 0, total));
	CU(cudaDeviceSynchronize());
	batch(kv, "ipc/event", id, 0, 8, MiB, 1);
	dev_expect((char *)dev + MiB, pin, n, "put after the caller's event");
	CHECK(!kvfs_region_unregister(kv, id), "unregister the event put's region");
	CU(cudaEventDestroy(ev));
	CU(cudaStreamDestroy(s));
	CU(cudaFreeHost(pin));
}

static int ipc_main(const char *dir)
{
	struct kvfs *kv = open_kv(dir);
	size_t total = 16 * MiB;
	struct cudaDeviceProp p;
	cudaIpcMemHandle_t h;
	unsigned char *want;
	uint8_t uuid[16];
	uint32_t a, b;
	void *dev;

	CU(cudaMalloc(&dev, total));
	want = dev_fill(dev, total, 1);
	/* Two regions on one allocation: the daemon opens the handle once for both. */
	CHECK(!kvfs_register_device(kv, (char *)dev + MiB, 8 * MiB, &a), "register a");
	CHECK(!kvfs_register_device(kv, (char *)dev + 9 * MiB, 4 * MiB, &b), "register b");
	batch(kv, "ipc/a", a, 0, 8, MiB, 0);
	batch(kv, "ipc/b", b, 0, 4, MiB, 0);
	CU(cudaMemset(dev, 0, total));
	batch(kv, "ipc/a", a, 0, 8, MiB, 1);
	CHECK(!kvfs_region_unregister(kv, a), "unregister a");
	batch(kv, "ipc/b", b, 0, 4, MiB, 1); /* still open for b */
	dev_expect((char *)dev + MiB, want + MiB, 12 * MiB, "ipc round trip");
	event_put(kv, dev, total);
	/* The daemon's own checks, past the library's. */
	CU(cudaIpcGetMemHandle(&h, dev));
	CU(cudaGetDeviceProperties(&p, 0));
	memcpy(uuid, p.uuid.bytes, 16);
	CHECK(raw_ipc(kvfs_fd(kv), &h, uuid, 0, total) == 0, "whole allocation");
	CHECK(raw_ipc(kvfs_fd(kv), &h, uuid, total - 4096, 8192) == -EFAULT, "past its end");
	uuid[0] ^= 0xff;
	CHECK(raw_ipc(kvfs_fd(kv), &h, uuid, 0, 4096) == -ENODEV, "unknown uuid");
	uuid[0] ^= 0xff;
	memset(&h, 0x5a, sizeof(h));
	CHECK(raw_ipc(kvfs_fd(kv), &h, uuid, 0, 4096) == -EINVAL, "made-up handle");
	kvfs_close(kv);
	CU(cudaFree(dev));
	free(want);
	puts("ok");
	return 0;
}

static cudaError_t entry_point(const char *sym, void **fn)
{
#if CUDART_VERSION >= 12050
	return cudaGetDriverEntryPointByVersion(sym, fn, 12000, cudaEnableDefault, NULL);
#else
	return cudaGetDriverEntryPoint(sym, fn, cudaEnableDefault, NULL);
#endif
}

/* cuMemCreate memory with a POSIX-fd handle type, mapped read/write on device 0. */
static void *vmm_alloc(size_t *size)
{
	CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
			   unsigned long long);
	CUresult (*gran)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags);
	CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
	CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
			unsigned long long);
	CUresult (*access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
	CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				    .requestedHandleTypes =
					CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
				    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
	CUmemAccessDesc acc = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
			       .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	CUmemGenericAllocationHandle h;
	CUdeviceptr ptr;
	size_t g;

	CU(cudaFree(0)); /* the primary context, current */
	CU(entry_point("cuMemCreate", (void **)&create));
	CU(entry_point("cuMemGetAllocationGranularity", (void **)&gran));
	CU(entry_point("cuMemAddressReserve", (void **)&reserve));
	CU(entry_point("cuMemMap", (void **)&map));
	CU(entry_point("cuMemSetAccess", (void **)&access));
	CHECK(gran(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) == CUDA_SUCCESS, "granularity");
	*size = (*size + g - 1) / g * g;
	CHECK(create(&h, *size, &prop, 0) == CUDA_SUCCESS, "cuMemCreate");
	CHECK(reserve(&ptr, *size, g, 0, 0) == CUDA_SUCCESS, "reserve");
	CHECK(map(ptr, *size, 0, h, 0) == CUDA_SUCCESS, "map");
	CHECK(access(ptr, *size, &acc, 1) == CUDA_SUCCESS, "access");
	return (void *)(uintptr_t)ptr;
}

static int vmm_main(const char *dir)
{
	struct kvfs *kv = open_kv(dir);
	size_t size = 8 * MiB;
	void *dev = vmm_alloc(&size);
	unsigned char *want = dev_fill(dev, size, 2);
	uint32_t id;
	int err = kvfs_register_device(kv, (char *)dev + MiB, 4 * MiB, &id);

	CHECK(!err, "register VMM memory: %s (%s)", strerror(-err), kvfs_device_note());
	batch(kv, "vmm", id, 0, 4, MiB, 0);
	CU(cudaMemset(dev, 0, size));
	batch(kv, "vmm", id, 0, 4, MiB, 1);
	dev_expect((char *)dev + MiB, want + MiB, 4 * MiB, "vmm round trip");
	kvfs_close(kv);
	free(want);
	puts("ok");
	return 0;
}

static int layers_main(const char *dir, int nl)
{
	enum { NB = 64, BLK = 16 << 10 };
	struct kvfs *kv = open_kv(dir);
	struct kvfs_segment *segs = calloc(2 * nl, sizeof(*segs));
	struct kvfs_status st[NB];
	struct kvfs_key keys[NB];
	struct kvfs_summary sum;
	unsigned char **want = calloc(nl, sizeof(*want));
	void **t = calloc(nl, sizeof(*t));
	char names[NB][32];
	uint32_t layout;
	uint64_t nblocks;

	for (int l = 0; l < nl; l++) {
		uint32_t id;

		CU(cudaMalloc(&t[l], 2 * NB * BLK));
		want[l] = dev_fill(t[l], 2 * NB * BLK, 10 + l);
		CHECK(!kvfs_register_device(kv, t[l], 2 * NB * BLK, &id), "layer %d", l);
		segs[2 * l] = (struct kvfs_segment){id, 0, BLK, BLK};
		segs[2 * l + 1] = (struct kvfs_segment){id, NB * BLK, BLK, BLK};
	}
	CHECK(!kvfs_layout_register(kv, segs, 2 * nl, &layout, &nblocks) && nblocks == NB,
	      "layout");
	for (int b = 0; b < NB; b++) {
		snprintf(names[b], sizeof(names[b]), "layers/%d", b);
		keys[b] =
		    (struct kvfs_key){.kk_name = names[b], .kk_layout = layout, .kk_block = b};
	}
	CHECK(!kvfs_put(kv, keys, NB, KVFS_PUT_FLAG_MKDIR, 0, st, &sum) && sum.ksum_ok == NB,
	      "put");
	for (int l = 0; l < nl; l++)
		CU(cudaMemset(t[l], 0, 2 * NB * BLK));
	CHECK(!kvfs_get(kv, keys, NB, 0, st, &sum) && sum.ksum_ok == NB, "get");
	for (int l = 0; l < nl; l++)
		dev_expect(t[l], want[l], 2 * NB * BLK, "layer");
	printf("block_len=%d\n", 2 * nl * BLK);
	kvfs_close(kv);
	puts("ok");
	return 0;
}

static int ssd_main(const char *dir)
{
	enum { N = 48 };
	struct kvfs *kv = open_kv(dir);
	size_t total = N * 2 * MiB;
	const char *names[N];
	struct kvfs_status st[N];
	struct kvfs_summary sum;
	unsigned char *want;
	char buf[N][32];
	int ssd = 0;
	uint32_t id;
	void *dev;

	CU(cudaMalloc(&dev, total));
	want = dev_fill(dev, total, 3);
	CHECK(!kvfs_register_device(kv, dev, total, &id), "register");
	batch(kv, "ssd", id, 0, N, 2 * MiB, 0); /* 96 MiB into a 64 MiB pool */
	for (int i = 0; i < N; i++) {
		snprintf(buf[i], sizeof(buf[i]), "ssd/%d", i);
		names[i] = buf[i];
	}
	CHECK(!kvfs_lookup(kv, names, N, 0, st, &sum) && sum.ksum_ok == N, "lookup");
	for (int i = 0; i < N; i++)
		ssd += (st[i].ks_flags & (KVFS_KEY_SSD | KVFS_KEY_DRAM)) == KVFS_KEY_SSD;
	CU(cudaMemset(dev, 0, total));
	batch(kv, "ssd", id, 0, N, 2 * MiB, 1);
	dev_expect(dev, want, total, "ssd round trip");
	CHECK(ssd > 0, "no value was on the SSD only");
	printf("ssd_keys=%d\n", ssd);
	kvfs_close(kv);
	puts("ok");
	return 0;
}

static int hold_main(const char *dir)
{
	struct kvfs *kv = open_kv(dir);
	uint32_t id;
	void *dev;

	CU(cudaMalloc(&dev, 16 * MiB));
	free(dev_fill(dev, 16 * MiB, 4));
	CHECK(!kvfs_register_device(kv, dev, 16 * MiB, &id), "register");
	puts("ready");
	fflush(stdout);
	for (;;)
		batch(kv, "hold", id, 0, 8, 2 * MiB, 0);
}

/* The child of deny: a process that names another's region. */
static int deny_child(const char *dir, uint32_t id)
{
	struct kvfs *kv = open_kv(dir);
	struct kvfs_iov iov = {id, 0, 4096};
	struct kvfs_key k = {.kk_name = "deny/x", .kk_niov = 1, .kk_iov = &iov};
	struct kvfs_status st;
	struct kvfs_summary sum;

	CHECK(!kvfs_put(kv, &k, 1, KVFS_PUT_FLAG_MKDIR, 0, &st, &sum), "put");
	CHECK(st.ks_result == -EPERM, "put through another's region: %lld",
	      (long long)st.ks_result);
	CHECK(!kvfs_get(kv, &k, 1, 0, &st, &sum), "get");
	CHECK(st.ks_result == -EPERM, "get: %lld", (long long)st.ks_result);
	CHECK(kvfs_region_unregister(kv, id) == -EPERM, "unregister another's region");
	kvfs_close(kv);
	return 0;
}

static int deny_main(const char *self, const char *dir)
{
	struct kvfs *kv = open_kv(dir);
	char arg[32];
	uint32_t id;
	void *dev;
	pid_t pid;
	int status;

	CU(cudaMalloc(&dev, MiB));
	CHECK(!kvfs_register_device(kv, dev, MiB, &id), "register");
	snprintf(arg, sizeof(arg), "%u", id);
	pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0) {
		execl(self, self, "deny-child", dir, arg, (char *)NULL);
		_exit(127);
	}
	CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && !WEXITSTATUS(status),
	      "child refused as it should be");
	batch(kv, "deny-own", id, 0, 1, MiB, 0); /* still ours */
	kvfs_close(kv);
	puts("ok");
	return 0;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int bench_main(const char *dir, size_t mib)
{
	size_t total = mib * MiB, n = total / (2 * MiB);
	struct kvfs *kv = open_kv(dir);
	double t, put_s = 1e9, get_s = 1e9, d2h_s = 1e9, h2d_s = 1e9;
	void *dev, *pinned;
	uint32_t id;

	CU(cudaMalloc(&dev, total));
	CU(cudaMallocHost(&pinned, total));
	free(dev_fill(dev, total, 5));
	CHECK(!kvfs_register_device(kv, dev, total, &id), "register");
	batch(kv, "bench", id, 0, n, 2 * MiB, 0); /* warm: keys, pool pages */
	for (int rep = 0; rep < 3; rep++) {
		t = now_s();
		CU(cudaMemcpy(pinned, dev, total, cudaMemcpyDeviceToHost));
		d2h_s = now_s() - t < d2h_s ? now_s() - t : d2h_s;
		t = now_s();
		CU(cudaMemcpy(dev, pinned, total, cudaMemcpyHostToDevice));
		h2d_s = now_s() - t < h2d_s ? now_s() - t : h2d_s;
		t = now_s();
		batch(kv, "bench", id, 0, n, 2 * MiB, 0);
		put_s = now_s() - t < put_s ? now_s() - t : put_s;
		t = now_s();
		batch(kv, "bench", id, 0, n, 2 * MiB, 1);
		get_s = now_s() - t < get_s ? now_s() - t : get_s;
	}
	printf("bytes=%zu\n", total);
	printf("cudaMemcpy D2H pinned: %.2f GB/s\n", total / d2h_s / 1e9);
	printf("cudaMemcpy H2D pinned: %.2f GB/s\n", total / h2d_s / 1e9);
	printf("kvfs batch put (D2H):  %.2f GB/s  ratio %.2f (target >= 0.8)\n",
	       total / put_s / 1e9, d2h_s / put_s);
	printf("kvfs batch get (H2D):  %.2f GB/s  ratio %.2f (target >= 0.8)\n",
	       total / get_s / 1e9, h2d_s / get_s);
	kvfs_close(kv);
	puts("ok");
	return 0;
}

int main(int argc, char **argv)
{
	int n = 0, drv = 0, rt = 0;

	if (argc >= 4 && !strcmp(argv[1], "deny-child"))
		return deny_child(argv[2], (uint32_t)strtoul(argv[3], NULL, 10));
	cudaDriverGetVersion(&drv);
	cudaRuntimeGetVersion(&rt);
	if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
		printf("no CUDA device: %s (driver %d, runtime %d)\n",
		       cudaGetErrorString(cudaGetLastError()), drv, rt);
		return 77;
	}
	if (argc >= 2 && !strcmp(argv[1], "probe")) {
		printf("devices=%d driver=%d runtime=%d\n", n, drv, rt);
		return 0;
	}
	if (argc >= 3 && !strcmp(argv[1], "ipc"))
		return ipc_main(argv[2]);
	if (argc >= 3 && !strcmp(argv[1], "vmm"))
		return vmm_main(argv[2]);
	if (argc >= 4 && !strcmp(argv[1], "layers"))
		return layers_main(argv[2], atoi(argv[3]));
	if (argc >= 3 && !strcmp(argv[1], "ssd"))
		return ssd_main(argv[2]);
	if (argc >= 3 && !strcmp(argv[1], "hold"))
		return hold_main(argv[2]);
	if (argc >= 3 && !strcmp(argv[1], "deny"))
		return deny_main(argv[0], argv[2]);
	if (argc >= 4 && !strcmp(argv[1], "bench"))
		return bench_main(argv[2], strtoul(argv[3], NULL, 10));
	fprintf(stderr, "usage: gpu_e2e probe|ipc|vmm|layers|ssd|hold|deny|bench DIR [N]\n");
	return 2;
}
