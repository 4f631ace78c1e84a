/* SPDX-License-Identifier: MIT */
/*
 * tests/ioctl/ioc_util.h — raw-ioctl helpers for the ioctl test programs:
 * building batches by hand, registering regions and layouts, shared-memory
 * objects, and a fail-fast check macro. Test code only: it uses nothing but
 * include/kvfs/kvfs_ioctl.h and libc, as any client of the ABI could.
 */
#ifndef KVFS_TESTS_IOC_UTIL_H
#define KVFS_TESTS_IOC_UTIL_H

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kvfs/kvfs_ioctl.h"

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);   \
			fprintf(stderr, __VA_ARGS__);                                              \
			fprintf(stderr, "\n");                                                     \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

static inline void hdr_init(struct kvfs_ioc_hdr *h, uint32_t size, uint64_t trace)
{
	h->ih_size = size;
	h->ih_version = KVFS_IOC_ABI_VERSION;
	h->ih_trace_id = trace;
}

/*
 * What this program asked of the daemon, counted as the daemon's statistics
 * count it (ops.ioctl and the ioctl section), so a test can compare them.
 * Defined in ioctl_e2e.c.
 */
struct tally {
	_Atomic uint64_t ioctls, ioctl_errors;
	_Atomic uint64_t calls[4], keys[4], failed[4]; /* lookup, put, get, remove */
};
extern struct tally tally;

/* ioctl returning 0 or -errno, counted in tally. */
static inline int ioc(int fd, unsigned long cmd, void *arg)
{
	int err = ioctl(fd, cmd, arg) ? -errno : 0;
	unsigned nr = _IOC_NR(cmd);

	tally.ioctls++;
	if (err) {
		tally.ioctl_errors++;
	} else if (_IOC_TYPE(cmd) == KVFS_IOC_MAGIC && nr >= 0x10 && nr <= 0x13 &&
		   _IOC_SIZE(cmd) == sizeof(struct kvfs_ioc_batch)) {
		const struct kvfs_ioc_batch *bt = arg;

		tally.calls[nr - 0x10]++;
		tally.keys[nr - 0x10] += bt->bt_nkeys;
		tally.failed[nr - 0x10] += bt->bt_nkeys - bt->bt_ok;
	}
	return err;
}

/* The tally as numbers, to hand from a child process to its parent. */
#define TALLY_N 14
static inline void tally_read(uint64_t v[TALLY_N])
{
	v[0] = tally.ioctls;
	v[1] = tally.ioctl_errors;
	for (int k = 0; k < 4; k++) {
		v[2 + k] = tally.calls[k];
		v[6 + k] = tally.keys[k];
		v[10 + k] = tally.failed[k];
	}
}

static inline void tally_add(const uint64_t v[TALLY_N])
{
	tally.ioctls += v[0];
	tally.ioctl_errors += v[1];
	for (int k = 0; k < 4; k++) {
		tally.calls[k] += v[2 + k];
		tally.keys[k] += v[6 + k];
		tally.failed[k] += v[10 + k];
	}
}

static inline void tally_print(void)
{
	static const char *const kinds[] = {"lookup", "put", "get", "remove"};

	printf("ioctls=%llu\nioctl_errors=%llu\n", (unsigned long long)tally.ioctls,
	       (unsigned long long)tally.ioctl_errors);
	for (int k = 0; k < 4; k++)
		printf("calls_%s=%llu\nkeys_%s=%llu\nfailed_%s=%llu\n", kinds[k],
		       (unsigned long long)tally.calls[k], kinds[k],
		       (unsigned long long)tally.keys[k], kinds[k],
		       (unsigned long long)tally.failed[k]);
}

static inline int reg_shm(int fd, const char *name, uint64_t off, uint64_t len, uint32_t *id)
{
	struct kvfs_ioc_region rg;
	int err;

	memset(&rg, 0, sizeof(rg));
	hdr_init(&rg.rg_hdr, sizeof(rg), 1);
	rg.rg_kind = KVFS_REGION_HOST_SHM;
	rg.rg_offset = off;
	rg.rg_length = len;
	snprintf(rg.rg_shm_name, sizeof(rg.rg_shm_name), "%s", name);
	err = ioc(fd, KVFS_IOC_REGION_REGISTER, &rg);
	if (!err)
		*id = rg.rg_id;
	return err;
}

static inline int reg_proc(int fd, const void *addr, uint64_t len, uint32_t *id)
{
	struct kvfs_ioc_region rg;
	int err;

	memset(&rg, 0, sizeof(rg));
	hdr_init(&rg.rg_hdr, sizeof(rg), 2);
	rg.rg_kind = KVFS_REGION_HOST_PROC;
	rg.rg_addr = (uintptr_t)addr;
	rg.rg_length = len;
	err = ioc(fd, KVFS_IOC_REGION_REGISTER, &rg);
	if (!err)
		*id = rg.rg_id;
	return err;
}

static inline int unreg(int fd, unsigned long cmd, uint32_t id)
{
	struct kvfs_ioc_id x;

	memset(&x, 0, sizeof(x));
	hdr_init(&x.id_hdr, sizeof(x), 3);
	x.id_id = id;
	return ioc(fd, cmd, &x);
}

static inline int reg_layout(int fd, const struct kvfs_ioc_seg *segs, uint32_t n, uint32_t *id,
			     uint64_t *block_len, uint64_t *nblocks)
{
	struct kvfs_ioc_layout *ly = calloc(1, sizeof(*ly));
	int err;

	hdr_init(&ly->ly_hdr, sizeof(*ly), 4);
	ly->ly_nsegs = n;
	memcpy(ly->ly_segs, segs, n * sizeof(*segs));
	err = ioc(fd, KVFS_IOC_LAYOUT_REGISTER, ly);
	if (!err) {
		*id = ly->ly_id;
		*block_len = ly->ly_block_len;
		*nblocks = ly->ly_nblocks;
	}
	free(ly);
	return err;
}

/*
 * A batch under construction: keys first (room for `cap` of them), then a
 * heap of iov lists and names after the key array.
 */
struct bt_build {
	struct kvfs_ioc_batch *bt;
	uint32_t cap;
	uint32_t heap; /* next free byte of bt_data */
};

static inline void bt_init(struct bt_build *b, struct kvfs_ioc_batch *bt, uint32_t cap,
			   uint64_t trace, uint32_t flags)
{
	memset(bt, 0, sizeof(*bt));
	hdr_init(&bt->bt_hdr, sizeof(*bt), trace);
	bt->bt_flags = flags;
	b->bt = bt;
	b->cap = cap;
	b->heap = cap * sizeof(struct kvfs_ioc_key);
}

/* Adds a key named by len bytes (NULs too); returns its index, or -1 when it does not fit. */
static inline int bt_addn(struct bt_build *b, const char *name, size_t len, uint32_t layout,
			  uint64_t block, const struct kvfs_ioc_iov *iov, uint16_t niov)
{
	struct kvfs_ioc_batch *bt = b->bt;
	uint32_t iov_off = (b->heap + 7) & ~7u;
	struct kvfs_ioc_key k = {0};

	if (bt->bt_nkeys == b->cap || iov_off + niov * sizeof(*iov) + len > KVFS_BATCH_DATA_SIZE)
		return -1;
	if (niov) {
		memcpy(bt->bt_data + iov_off, iov, niov * sizeof(*iov));
		k.ik_iov_off = (uint16_t)iov_off;
		k.ik_niov = niov;
		b->heap = iov_off + niov * sizeof(*iov);
	}
	memcpy(bt->bt_data + b->heap, name, len);
	k.ik_name_off = (uint16_t)b->heap;
	k.ik_name_len = (uint16_t)len;
	b->heap += len;
	k.ik_layout = layout;
	k.ik_block = block;
	memcpy(bt->bt_data + bt->bt_nkeys * sizeof(k), &k, sizeof(k));
	return (int)bt->bt_nkeys++;
}

/* Adds a key; returns its index, or -1 when it does not fit. */
static inline int bt_add(struct bt_build *b, const char *name, uint32_t layout, uint64_t block,
			 const struct kvfs_ioc_iov *iov, uint16_t niov)
{
	return bt_addn(b, name, strlen(name), layout, block, iov, niov);
}

static inline struct kvfs_ioc_key bt_key(const struct kvfs_ioc_batch *bt, uint32_t i)
{
	struct kvfs_ioc_key k;

	memcpy(&k, bt->bt_data + i * sizeof(k), sizeof(k));
	return k;
}

/* Creates a shared-memory object of len bytes, maps it; returns the mapping. */
static inline void *shm_make(const char *name, size_t len)
{
	int fd = shm_open(name, O_RDWR | O_CREAT | O_TRUNC, 0600);
	void *p;

	CHECK(fd >= 0, "shm_open %s: %s", name, strerror(errno));
	CHECK(ftruncate(fd, (off_t)len) == 0, "ftruncate: %s", strerror(errno));
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(p != MAP_FAILED, "mmap: %s", strerror(errno));
	close(fd);
	return p;
}

/* Deterministic bytes: splitmix64 of a seed. */
static inline void fill_rand(void *buf, size_t len, uint64_t seed)
{
	uint8_t *p = buf;

	for (size_t i = 0; i < len; i += 8) {
		uint64_t z = (seed += 0x9e3779b97f4a7c15ull);

		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
		z ^= z >> 31;
		memcpy(p + i, &z, len - i < 8 ? len - i : 8);
	}
}

#endif
