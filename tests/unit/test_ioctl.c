/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_ioctl.c — the checks fs/ioctl.c makes of every ioctl
 * struct (fs/ioctl.h): commands, headers, region and layout registrations,
 * batch headers, name and range offsets inside bt_data, and a key's memory
 * (layout block or explicit ranges) against a real region table. Each
 * case is one field made wrong in an otherwise valid struct, so a check
 * that is missing, or one that refuses a valid struct, fails here.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fs/ioctl.h"

#define KEY sizeof(struct kvfs_ioc_key)

static void test_commands(void **state)
{
	static const unsigned long known[] = {
	    KVFS_IOC_VERSION,
	    KVFS_IOC_REGION_REGISTER,
	    KVFS_IOC_REGION_UNREGISTER,
	    KVFS_IOC_LAYOUT_REGISTER,
	    KVFS_IOC_LAYOUT_UNREGISTER,
	    KVFS_IOC_LOOKUP,
	    KVFS_IOC_PUT,
	    KVFS_IOC_GET,
	    KVFS_IOC_REMOVE,
	};

	(void)state;
	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		assert_true(kv_ioc_known((unsigned int)known[i]));
	/* Same number, another size or direction; another type; a neighbour. */
	assert_false(kv_ioc_known(_IOWR(KVFS_IOC_MAGIC, 0x10, struct kvfs_ioc_version)));
	assert_false(kv_ioc_known(_IOR(KVFS_IOC_MAGIC, 0x10, struct kvfs_ioc_batch)));
	assert_false(kv_ioc_known(_IOWR('T', 0x10, struct kvfs_ioc_batch)));
	assert_false(kv_ioc_known(_IOWR(KVFS_IOC_MAGIC, 0x14, struct kvfs_ioc_batch)));
	assert_false(kv_ioc_known(0x5401)); /* TCGETS, which isatty() sends */
	assert_int_equal(kv_ioc_kind_of(KVFS_IOC_LOOKUP), KV_IOC_LOOKUP);
	assert_int_equal(kv_ioc_kind_of(KVFS_IOC_PUT), KV_IOC_PUT);
	assert_int_equal(kv_ioc_kind_of(KVFS_IOC_GET), KV_IOC_GET);
	assert_int_equal(kv_ioc_kind_of(KVFS_IOC_REMOVE), KV_IOC_REMOVE);
}

static void test_header(void **state)
{
	struct kvfs_ioc_hdr h = {.ih_size = sizeof(struct kvfs_ioc_batch),
				 .ih_version = KVFS_IOC_ABI_VERSION};

	(void)state;
	assert_int_equal(kv_ioc_hdr_check(KVFS_IOC_GET, &h), 0);
	h.ih_size--;
	assert_int_equal(kv_ioc_hdr_check(KVFS_IOC_GET, &h), -EINVAL);
	h.ih_size = sizeof(struct kvfs_ioc_batch);
	h.ih_version = KVFS_IOC_ABI_VERSION + 1;
	assert_int_equal(kv_ioc_hdr_check(KVFS_IOC_GET, &h), -EPROTO);
	/* The version query takes any version: that is how a client learns the daemon's. */
	h.ih_size = sizeof(struct kvfs_ioc_version);
	assert_int_equal(kv_ioc_hdr_check(KVFS_IOC_VERSION, &h), 0);
	h.ih_size = 0;
	assert_int_equal(kv_ioc_hdr_check(KVFS_IOC_VERSION, &h), -EINVAL);
}

static struct kvfs_ioc_region shm_region(void)
{
	struct kvfs_ioc_region rg;

	memset(&rg, 0, sizeof(rg));
	rg.rg_kind = KVFS_REGION_HOST_SHM;
	rg.rg_offset = 4096;
	rg.rg_length = 1;
	strcpy(rg.rg_shm_name, "/x");
	return rg;
}

static void test_region_fields(void **state)
{
	struct kvfs_ioc_region rg = shm_region();

	(void)state;
	assert_int_equal(kv_ioc_region_check(&rg), 0);
	rg.rg_addr = 1;
	assert_int_equal(kv_ioc_region_check(&rg), -EINVAL);
	rg = shm_region();
	rg.rg_pad = 1;
	assert_int_equal(kv_ioc_region_check(&rg), -EINVAL);
	rg = shm_region();
	rg.rg_id = 5; /* an out field, must come in as zero */
	assert_int_equal(kv_ioc_region_check(&rg), -EINVAL);
	rg = shm_region();
	rg.rg_ipc_handle[63] = 1;
	assert_int_equal(kv_ioc_region_check(&rg), -EINVAL);
	rg = shm_region();
	rg.rg_fd = 3;
	assert_int_equal(kv_ioc_region_check(&rg), -EINVAL);
	rg = shm_region();
	memset(rg.rg_shm_name, 0, sizeof(rg.rg_shm_name));
	assert_int_equal(kv_ioc_region_check(&rg), -EINVAL);
	memset(rg.rg_shm_name, 'n', sizeof(rg.rg_shm_name)); /* no NUL */
	assert_int_equal(kv_ioc_region_check(&rg), -ENAMETOOLONG);

	memset(&rg, 0, sizeof(rg));
	rg.rg_kind = KVFS_REGION_HOST_PROC;
	rg.rg_addr = 0x10000;
	rg.rg_length = 1;
	assert_int_equal(kv_ioc_region_check(&rg), 0);
	rg.rg_offset = 1;
	assert_int_equal(kv_ioc_region_check(&rg), -EINVAL);
	rg.rg_offset = 0;
	rg.rg_shm_name[100] = 'x';
	assert_int_equal(kv_ioc_region_check(&rg), -EINVAL);
	rg.rg_shm_name[100] = 0;
	rg.rg_dev_uuid[0] = 1;
	assert_int_equal(kv_ioc_region_check(&rg), -EINVAL);

	rg.rg_kind = 0;
	assert_int_equal(kv_ioc_region_check(&rg), -EINVAL);
	rg.rg_kind = 5;
	assert_int_equal(kv_ioc_region_check(&rg), -EINVAL);
}

static struct kvfs_ioc_region dev_region(uint32_t kind)
{
	struct kvfs_ioc_region rg;

	memset(&rg, 0, sizeof(rg));
	rg.rg_kind = kind;
	rg.rg_offset = 4096;
	rg.rg_length = 1 << 20;
	rg.rg_dev_uuid[3] = 0x42;
	if (kind == KVFS_REGION_CUDA_IPC)
		rg.rg_ipc_handle[10] = 7;
	else
		rg.rg_fd = 5;
	return rg;
}

/* Device registrations: the struct checks that run whether or not the daemon has a device. */
static void test_device_region_fields(void **state)
{
	static const uint32_t kinds[] = {KVFS_REGION_CUDA_IPC, KVFS_REGION_CUDA_VMM};
	struct kvfs_ioc_region rg;

	(void)state;
	for (int i = 0; i < 2; i++) {
		uint32_t k = kinds[i];

		rg = dev_region(k);
		assert_int_equal(kv_ioc_region_check(&rg), 0);
		memset(rg.rg_dev_uuid, 0, sizeof(rg.rg_dev_uuid)); /* no device named */
		assert_int_equal(kv_ioc_region_check(&rg), -EINVAL);
		rg = dev_region(k);
		rg.rg_addr = 0x1000; /* a host field */
		assert_int_equal(kv_ioc_region_check(&rg), -EINVAL);
		rg = dev_region(k);
		rg.rg_shm_name[0] = '/';
		assert_int_equal(kv_ioc_region_check(&rg), -EINVAL);
		rg = dev_region(k);
		rg.rg_pad = 1;
		assert_int_equal(kv_ioc_region_check(&rg), -EINVAL);
		rg = dev_region(k);
		rg.rg_length = 0;
		assert_int_equal(kv_ioc_region_check(&rg), -EINVAL);
		rg = dev_region(k);
		rg.rg_offset = UINT64_MAX - 10; /* the end overflows */
		assert_int_equal(kv_ioc_region_check(&rg), -EFAULT);
	}
	rg = dev_region(KVFS_REGION_CUDA_IPC);
	memset(rg.rg_ipc_handle, 0, sizeof(rg.rg_ipc_handle)); /* no handle */
	assert_int_equal(kv_ioc_region_check(&rg), -EINVAL);
	rg = dev_region(KVFS_REGION_CUDA_IPC);
	rg.rg_fd = 3; /* an fd is VMM's */
	assert_int_equal(kv_ioc_region_check(&rg), -EINVAL);
	rg = dev_region(KVFS_REGION_CUDA_VMM);
	rg.rg_ipc_handle[0] = 1; /* a handle is IPC's */
	assert_int_equal(kv_ioc_region_check(&rg), -EINVAL);
	rg = dev_region(KVFS_REGION_CUDA_VMM);
	rg.rg_fd = -1;
	assert_int_equal(kv_ioc_region_check(&rg), -EBADF);
	rg.rg_fd = 0; /* fd 0 is an fd */
	assert_int_equal(kv_ioc_region_check(&rg), 0);
}

static void test_layout_fields(void **state)
{
	struct kvfs_ioc_layout *ly = calloc(1, sizeof(*ly));

	(void)state;
	ly->ly_nsegs = 2;
	ly->ly_segs[0].sg_length = ly->ly_segs[1].sg_length = 1;
	assert_int_equal(kv_ioc_layout_check(ly), 0);
	ly->ly_segs[2].sg_base = 1; /* past ly_nsegs: must be zero */
	assert_int_equal(kv_ioc_layout_check(ly), -EINVAL);
	ly->ly_segs[2].sg_base = 0;
	ly->ly_segs[KVFS_LAYOUT_MAX_SEGS - 1].sg_pad = 1;
	assert_int_equal(kv_ioc_layout_check(ly), -EINVAL);
	ly->ly_segs[KVFS_LAYOUT_MAX_SEGS - 1].sg_pad = 0;
	ly->ly_nblocks = 1;
	assert_int_equal(kv_ioc_layout_check(ly), -EINVAL);
	ly->ly_nblocks = 0;
	ly->ly_nsegs = 0;
	assert_int_equal(kv_ioc_layout_check(ly), -EINVAL);
	ly->ly_nsegs = KVFS_LAYOUT_MAX_SEGS + 1;
	assert_int_equal(kv_ioc_layout_check(ly), -EINVAL);
	ly->ly_nsegs = KVFS_LAYOUT_MAX_SEGS;
	assert_int_equal(kv_ioc_layout_check(ly), 0);
	free(ly);
}

static void test_batch_header(void **state)
{
	struct kvfs_ioc_batch *bt = calloc(1, sizeof(*bt));

	(void)state;
	bt->bt_nkeys = 1;
	for (int k = 0; k < KV_IOC__COUNT; k++)
		assert_int_equal(kv_ioc_batch_check((enum kv_ioc_kind)k, bt), 0);
	bt->bt_nkeys = 0;
	assert_int_equal(kv_ioc_batch_check(KV_IOC_LOOKUP, bt), -EINVAL);
	bt->bt_nkeys = KVFS_BATCH_DATA_SIZE / KEY;
	assert_int_equal(kv_ioc_batch_check(KV_IOC_LOOKUP, bt), 0);
	bt->bt_nkeys++;
	assert_int_equal(kv_ioc_batch_check(KV_IOC_LOOKUP, bt), -E2BIG);
	bt->bt_nkeys = UINT32_MAX;
	assert_int_equal(kv_ioc_batch_check(KV_IOC_GET, bt), -E2BIG);
	bt->bt_nkeys = 1;
	bt->bt_flags = KVFS_PUT_NOREPLACE | KVFS_PUT_MKDIR | KVFS_PUT_WAIT_EVENT;
	assert_int_equal(kv_ioc_batch_check(KV_IOC_PUT, bt), 0);
	assert_int_equal(kv_ioc_batch_check(KV_IOC_GET, bt), -EINVAL);
	assert_int_equal(kv_ioc_batch_check(KV_IOC_LOOKUP, bt), -EINVAL);
	bt->bt_flags = KVFS_REMOVE_RECURSIVE;
	assert_int_equal(kv_ioc_batch_check(KV_IOC_REMOVE, bt), 0);
	bt->bt_flags = 1u << 31;
	for (int k = 0; k < KV_IOC__COUNT; k++)
		assert_int_equal(kv_ioc_batch_check((enum kv_ioc_kind)k, bt), -EINVAL);
	free(bt);
}

static void test_in_data(void **state)
{
	(void)state;
	assert_true(kv_ioc_in_data(2, 2 * KEY, 10));
	assert_false(kv_ioc_in_data(2, 2 * KEY - 1, 10)); /* inside the keys */
	assert_true(kv_ioc_in_data(1, KVFS_BATCH_DATA_SIZE - 1, 1));
	assert_false(kv_ioc_in_data(1, KVFS_BATCH_DATA_SIZE - 1, 2));
	assert_true(kv_ioc_in_data(1, KVFS_BATCH_DATA_SIZE, 0));
	assert_false(kv_ioc_in_data(1, 65535, 65535));
	assert_false(kv_ioc_in_data(0, UINT64_MAX, 2)); /* no wrap-around */
}

/* Puts iov list `v` (n entries) at offset off of bt_data. */
static void put_iov(struct kvfs_ioc_batch *bt, uint32_t off, const struct kvfs_ioc_iov *v, int n)
{
	memcpy(bt->bt_data + off, v, (size_t)n * sizeof(*v));
}

static void test_key_memory(void **state)
{
	struct kv_region_table *t = NULL;
	struct kv_caller c = {.kc_tgid = getpid(), .kc_uid = getuid(), .kc_tag = 1};
	char *buf = malloc(1 << 16);
	struct kv_region_desc d = {
	    .rd_kind = KVFS_REGION_HOST_PROC, .rd_addr = (uintptr_t)buf, .rd_length = 1 << 16};
	struct kvfs_ioc_seg seg = {.sg_stride = 4096, .sg_length = 4096};
	struct kvfs_ioc_batch *bt = calloc(1, sizeof(*bt));
	struct kv_span sp[KVFS_LAYOUT_MAX_SEGS];
	struct kvfs_ioc_key k = {0};
	struct kvfs_ioc_iov v[2];
	uint32_t r, l;
	uint64_t blen, nb, len;
	int n;

	(void)state;
	assert_int_equal(kv_region_table_create(0, &t), 0);
	assert_int_equal(kv_region_register(t, &c, &d, &r), 0);
	seg.sg_region = r;
	assert_int_equal(kv_layout_register(t, &c, &seg, 1, &l, &blen, &nb), 0);
	bt->bt_nkeys = 2;
	kv_region_begin(t);

	/* By layout. */
	k.ik_layout = l;
	k.ik_block = 15;
	assert_int_equal(kv_ioc_key_mem(t, getpid(), bt, &k, sp, &n, &len), 0);
	assert_int_equal(n, 1);
	assert_int_equal(len, 4096);
	assert_int_equal(sp[0].sp_off, 15 * 4096);
	k.ik_block = 16;
	assert_int_equal(kv_ioc_key_mem(t, getpid(), bt, &k, sp, &n, &len), -EFAULT);
	k.ik_block = 0;
	assert_int_equal(kv_ioc_key_mem(t, getpid() + 1, bt, &k, sp, &n, &len), -EPERM);
	k.ik_niov = 1; /* a layout and ranges at once */
	assert_int_equal(kv_ioc_key_mem(t, getpid(), bt, &k, sp, &n, &len), -EINVAL);
	k.ik_niov = 0;
	k.ik_layout = l + 1;
	assert_int_equal(kv_ioc_key_mem(t, getpid(), bt, &k, sp, &n, &len), -EBADF);

	/* By explicit ranges, after the two keys. */
	v[0] = (struct kvfs_ioc_iov){.iv_region = r, .iv_offset = 100, .iv_length = 200};
	v[1] = (struct kvfs_ioc_iov){.iv_region = r, .iv_offset = 0, .iv_length = 1 << 16};
	put_iov(bt, 2 * KEY, v, 2);
	k = (struct kvfs_ioc_key){.ik_iov_off = 2 * KEY, .ik_niov = 2};
	assert_int_equal(kv_ioc_key_mem(t, getpid(), bt, &k, sp, &n, &len), 0);
	assert_int_equal(n, 2);
	assert_int_equal(len, 200 + (1 << 16));
	assert_int_equal(sp[0].sp_off, 100);
	k.ik_iov_off = 2 * KEY + 4; /* misaligned */
	assert_int_equal(kv_ioc_key_mem(t, getpid(), bt, &k, sp, &n, &len), -EINVAL);
	k.ik_iov_off = KEY; /* inside the keys */
	assert_int_equal(kv_ioc_key_mem(t, getpid(), bt, &k, sp, &n, &len), -EINVAL);
	k.ik_iov_off =
	    (uint16_t)(KVFS_BATCH_DATA_SIZE - 24) & ~7u; /* the second one past the end */
	assert_int_equal(kv_ioc_key_mem(t, getpid(), bt, &k, sp, &n, &len), -EINVAL);
	k.ik_iov_off = 2 * KEY;
	k.ik_niov = 0;
	assert_int_equal(kv_ioc_key_mem(t, getpid(), bt, &k, sp, &n, &len), -EINVAL);
	k.ik_niov = KVFS_LAYOUT_MAX_SEGS + 1;
	assert_int_equal(kv_ioc_key_mem(t, getpid(), bt, &k, sp, &n, &len), -EINVAL);
	k.ik_niov = 2;
	k.ik_block = 1; /* a block index with ranges */
	assert_int_equal(kv_ioc_key_mem(t, getpid(), bt, &k, sp, &n, &len), -EINVAL);
	k.ik_block = 0;
	v[1].iv_pad = 1;
	put_iov(bt, 2 * KEY, v, 2);
	assert_int_equal(kv_ioc_key_mem(t, getpid(), bt, &k, sp, &n, &len), -EINVAL);
	v[1].iv_pad = 0;
	v[1].iv_offset = 1; /* one byte past the region */
	put_iov(bt, 2 * KEY, v, 2);
	assert_int_equal(kv_ioc_key_mem(t, getpid(), bt, &k, sp, &n, &len), -EFAULT);
	v[1].iv_offset = UINT64_MAX;
	v[1].iv_length = 2; /* wraps around */
	put_iov(bt, 2 * KEY, v, 2);
	assert_int_equal(kv_ioc_key_mem(t, getpid(), bt, &k, sp, &n, &len), -EFAULT);
	v[1] = (struct kvfs_ioc_iov){.iv_region = r + 4096, .iv_length = 1};
	put_iov(bt, 2 * KEY, v, 2);
	assert_int_equal(kv_ioc_key_mem(t, getpid(), bt, &k, sp, &n, &len), -EBADF);
	v[1] = (struct kvfs_ioc_iov){.iv_region = r, .iv_length = 0};
	put_iov(bt, 2 * KEY, v, 2);
	assert_int_equal(kv_ioc_key_mem(t, getpid(), bt, &k, sp, &n, &len), -EINVAL);
	v[1] = (struct kvfs_ioc_iov){.iv_region = r, .iv_length = 1};
	put_iov(bt, 2 * KEY, v, 2);
	assert_int_equal(kv_ioc_key_mem(t, getpid() + 1, bt, &k, sp, &n, &len), -EPERM);

	kv_region_end(t);
	kv_region_table_destroy(t);
	free(bt);
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_commands),	  cmocka_unit_test(test_header),
	    cmocka_unit_test(test_region_fields), cmocka_unit_test(test_device_region_fields),
	    cmocka_unit_test(test_layout_fields), cmocka_unit_test(test_batch_header),
	    cmocka_unit_test(test_in_data),	  cmocka_unit_test(test_key_memory),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
