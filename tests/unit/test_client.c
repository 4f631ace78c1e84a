/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_client.c — libkvfs against a mock daemon: how batches of
 * any size are cut into ioctls, how per-key results come back to the right
 * key, the errors the library decides itself, whole-ioctl failures, EINTR,
 * regions and layouts, the version handshake, and many threads batching on
 * one handle at once.
 *
 * The mock (mock_ioctl) stands where ioctl(2) would: it checks every batch
 * the way the daemon's ABI demands (sizes, version, counts, every offset
 * inside bt_data, names after the key array, iov lists 8-aligned, pads
 * zero), records the names it saw in order, and answers each key with a
 * result computed from the key itself, so a result that lands on the wrong
 * key is seen.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client/lib/client.h"

#define MOCK_MAX_KEYS 399
#define MOCK_LOG      (1 << 20)

/* The mock daemon's state: guarded by mk_lock (the concurrency test calls from many threads). */
static struct {
	pthread_mutex_t mk_lock;
	uint32_t mk_max_keys;  /* what KVFS_IOC_VERSION reports */
	uint32_t mk_abi;       /* ditto */
	int mk_version_err;    /* KVFS_IOC_VERSION fails with this */
	unsigned mk_calls;     /* batch ioctls answered */
	unsigned mk_fail_call; /* batch ioctl number (1..) that fails as a whole, 0: none */
	int mk_fail_err;       /* ... with this */
	unsigned mk_eintr;     /* the next this many batch ioctls fail with EINTR */
	uint32_t mk_nkeys[64]; /* keys of each batch ioctl (the first 64) */
	uint64_t mk_trace[64]; /* trace id of each */
	uint32_t mk_flags;     /* bt_flags of the last batch */
	char *mk_names;	       /* every name seen, '\n'-terminated, in order */
	size_t mk_names_len;
	uint32_t mk_next_id; /* ids handed out */
	char mk_unreg[256];  /* 'L'/'R' + id for each unregister, in order */
	char mk_shm_seen[KVFS_SHM_NAME_MAX];
	uint64_t mk_shm_size;			 /* fstat of that object at register time */
	uint8_t mk_event[KVFS_BATCH_EVENT_SIZE]; /* the event handle of the last WAIT_EVENT put */
	unsigned mk_events;			 /* WAIT_EVENT puts seen */
} mk = {.mk_lock = PTHREAD_MUTEX_INITIALIZER};

static int64_t name_result(const char *name, size_t len)
{
	uint64_t h = 1469598103934665603ull;

	if (len >= 4 && !memcmp(name, "miss", 4))
		return -ENOENT;
	for (size_t i = 0; i < len; i++)
		h = (h ^ (uint8_t)name[i]) * 1099511628211ull;
	return (int64_t)(h >> 20);
}

/* What a put/get of this key answers: bytes of its iov list, or a mark of (layout, block). */
static int64_t key_result(const struct kvfs_ioc_batch *b, const struct kvfs_ioc_key *ik)
{
	int64_t sum = 0;

	if (ik->ik_layout)
		return (int64_t)(ik->ik_layout * 1000000 + ik->ik_block);
	for (unsigned v = 0; v < ik->ik_niov; v++) {
		struct kvfs_ioc_iov iv;

		memcpy(&iv, b->bt_data + ik->ik_iov_off + v * sizeof(iv), sizeof(iv));
		assert_int_equal(iv.iv_pad, 0);
		sum += (int64_t)(iv.iv_region * 1000 + iv.iv_offset + iv.iv_length);
	}
	return sum;
}

static int mock_batch(unsigned long cmd, struct kvfs_ioc_batch *b)
{
	struct kvfs_ioc_key *ik = (struct kvfs_ioc_key *)b->bt_data;
	size_t keys_end, room;
	unsigned call;

	assert_int_equal(b->bt_hdr.ih_size, sizeof(*b));
	assert_int_equal(b->bt_hdr.ih_version, KVFS_IOC_ABI_VERSION);
	assert_true(b->bt_nkeys >= 1 && b->bt_nkeys <= mk.mk_max_keys);
	assert_int_equal(b->bt_ok, 0);
	assert_int_equal(b->bt_prefix, 0);
	keys_end = b->bt_nkeys * sizeof(*ik);
	assert_true(keys_end <= KVFS_BATCH_DATA_SIZE);
	pthread_mutex_lock(&mk.mk_lock);
	if (mk.mk_eintr) {
		mk.mk_eintr--;
		pthread_mutex_unlock(&mk.mk_lock);
		return -EINTR;
	}
	call = ++mk.mk_calls;
	if (call <= 64) {
		mk.mk_nkeys[call - 1] = b->bt_nkeys;
		mk.mk_trace[call - 1] = b->bt_hdr.ih_trace_id;
	}
	mk.mk_flags = b->bt_flags;
	if (call == mk.mk_fail_call) {
		pthread_mutex_unlock(&mk.mk_lock);
		return mk.mk_fail_err;
	}
	/* With an event handle, the keys' bytes stay out of its place at the end. */
	room = KVFS_BATCH_DATA_SIZE;
	if (b->bt_flags & KVFS_PUT_WAIT_EVENT) {
		assert_int_equal(cmd, KVFS_IOC_PUT);
		room = KVFS_BATCH_EVENT_OFF;
		memcpy(mk.mk_event, b->bt_data + room, sizeof(mk.mk_event));
		mk.mk_events++;
	}
	for (uint32_t j = 0; j < b->bt_nkeys; j++) {
		const char *name = (const char *)b->bt_data + ik[j].ik_name_off;

		assert_true((size_t)ik[j].ik_name_off + ik[j].ik_name_len <= room);
		assert_true(
		    (size_t)ik[j].ik_iov_off + ik[j].ik_niov * sizeof(struct kvfs_ioc_iov) <= room);

		assert_int_equal(ik[j].ik_flags, 0);
		assert_int_equal(ik[j].ik_size, 0);
		assert_int_equal(ik[j].ik_result, 0);
		assert_true(ik[j].ik_name_len == 0 || ik[j].ik_name_off >= keys_end);
		assert_true((size_t)ik[j].ik_name_off + ik[j].ik_name_len <= KVFS_BATCH_DATA_SIZE);
		if (ik[j].ik_niov) {
			assert_int_equal(ik[j].ik_layout, 0);
			assert_int_equal(ik[j].ik_iov_off % 8, 0);
			assert_true(ik[j].ik_iov_off >= keys_end);
			assert_true((size_t)ik[j].ik_iov_off +
					ik[j].ik_niov * sizeof(struct kvfs_ioc_iov) <=
				    KVFS_BATCH_DATA_SIZE);
		} else {
			assert_int_equal(ik[j].ik_iov_off, 0);
		}
		if (mk.mk_names_len + ik[j].ik_name_len + 1 < MOCK_LOG) {
			memcpy(mk.mk_names + mk.mk_names_len, name, ik[j].ik_name_len);
			mk.mk_names_len += ik[j].ik_name_len;
			mk.mk_names[mk.mk_names_len++] = '\n';
		}
		if (cmd == KVFS_IOC_LOOKUP || cmd == KVFS_IOC_REMOVE)
			ik[j].ik_result = name_result(name, ik[j].ik_name_len);
		else
			ik[j].ik_result = key_result(b, &ik[j]);
		ik[j].ik_size = (uint64_t)j;
		ik[j].ik_flags = KVFS_KEY_PRESENT;
		b->bt_ok += ik[j].ik_result >= 0;
	}
	b->bt_bytes = b->bt_nkeys;
	b->bt_ns = 1000;
	pthread_mutex_unlock(&mk.mk_lock);
	return 0;
}

static int mock_ioctl(int fd, unsigned long cmd, void *arg)
{
	(void)fd;
	switch (cmd) {
	case KVFS_IOC_VERSION: {
		struct kvfs_ioc_version *v = arg;

		if (mk.mk_version_err)
			return mk.mk_version_err;
		assert_int_equal(v->vr_hdr.ih_size, sizeof(*v));
		v->vr_abi = mk.mk_abi;
		v->vr_max_keys = mk.mk_max_keys;
		v->vr_max_segs = KVFS_LAYOUT_MAX_SEGS;
		v->vr_max_regions = KVFS_MAX_REGIONS;
		v->vr_path_max = KVFS_PATH_MAX;
		return 0;
	}
	case KVFS_IOC_REGION_REGISTER: {
		struct kvfs_ioc_region *rg = arg;

		assert_int_equal(rg->rg_hdr.ih_size, sizeof(*rg));
		if (rg->rg_kind == KVFS_REGION_HOST_SHM) {
			struct stat st;
			int sfd = shm_open(rg->rg_shm_name, O_RDONLY, 0);

			assert_true(sfd >= 0);
			assert_int_equal(fstat(sfd, &st), 0);
			close(sfd);
			mk.mk_shm_size = (uint64_t)st.st_size;
			snprintf(mk.mk_shm_seen, sizeof(mk.mk_shm_seen), "%s", rg->rg_shm_name);
			assert_int_equal(rg->rg_addr, 0);
		} else {
			assert_int_equal(rg->rg_kind, KVFS_REGION_HOST_PROC);
			assert_int_not_equal(rg->rg_addr, 0);
		}
		rg->rg_id = ++mk.mk_next_id;
		return 0;
	}
	case KVFS_IOC_LAYOUT_REGISTER: {
		struct kvfs_ioc_layout *ly = arg;

		assert_int_equal(ly->ly_hdr.ih_size, sizeof(*ly));
		ly->ly_block_len = 0;
		for (uint32_t i = 0; i < ly->ly_nsegs; i++)
			ly->ly_block_len += ly->ly_segs[i].sg_length;
		ly->ly_nblocks = 7;
		ly->ly_id = ++mk.mk_next_id;
		return 0;
	}
	case KVFS_IOC_REGION_UNREGISTER:
	case KVFS_IOC_LAYOUT_UNREGISTER: {
		struct kvfs_ioc_id *id = arg;
		size_t n = strlen(mk.mk_unreg);

		snprintf(mk.mk_unreg + n, sizeof(mk.mk_unreg) - n, "%c%u",
			 cmd == KVFS_IOC_LAYOUT_UNREGISTER ? 'L' : 'R', id->id_id);
		return 0;
	}
	case KVFS_IOC_LOOKUP:
	case KVFS_IOC_PUT:
	case KVFS_IOC_GET:
	case KVFS_IOC_REMOVE:
		return mock_batch(cmd, arg);
	}
	return -ENOTTY;
}

static struct kvfs *mock_open(uint32_t max_keys)
{
	struct kvfs *kv = NULL;

	mk.mk_max_keys = max_keys;
	assert_int_equal(kvfs__open_fd(open("/dev/null", O_RDONLY), mock_ioctl, &kv), 0);
	return kv;
}

static int setup(void **state)
{
	(void)state;
	free(mk.mk_names);
	memset((char *)&mk + sizeof(mk.mk_lock), 0, sizeof(mk) - sizeof(mk.mk_lock));
	mk.mk_abi = KVFS_IOC_ABI_VERSION;
	mk.mk_names = malloc(MOCK_LOG);
	return mk.mk_names ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	free(mk.mk_names);
	mk.mk_names = NULL;
	return 0;
}

/* n names "<prefix>%0*u" of exactly `len` bytes (len >= 8), in one allocation. */
static char **make_names(size_t n, size_t len, const char *prefix)
{
	char **v = calloc(n, sizeof(*v));

	assert_non_null(v);
	for (size_t i = 0; i < n; i++) {
		v[i] = malloc(len + 1);
		assert_non_null(v[i]);
		memset(v[i], 'x', len);
		v[i][len] = 0;
		snprintf(v[i], len + 1, "%s%0*zu", prefix, (int)(len - strlen(prefix)), i);
	}
	return v;
}

static void free_names(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

/* The names the mock saw equal names[0..n) in order (skipping those in `skip`). */
static void assert_seen(char **names, size_t n, const char *skip)
{
	size_t off = 0;

	for (size_t i = 0; i < n; i++) {
		size_t len = strlen(names[i]);

		if (skip && skip[i])
			continue;
		assert_true(off + len < mk.mk_names_len);
		assert_memory_equal(mk.mk_names + off, names[i], len);
		assert_int_equal(mk.mk_names[off + len], '\n');
		off += len + 1;
	}
	assert_int_equal(off, mk.mk_names_len);
}

static void test_open_version(void **state)
{
	struct kvfs *kv = NULL;
	uint32_t keys, segs, regions, path;

	(void)state;
	kv = mock_open(123);
	kvfs_limits(kv, &keys, &segs, &regions, &path);
	assert_int_equal(keys, 123);
	assert_int_equal(segs, KVFS_LAYOUT_MAX_SEGS);
	assert_int_equal(regions, KVFS_MAX_REGIONS);
	assert_int_equal(path, KVFS_PATH_MAX);
	assert_true(kvfs_fd(kv) >= 0);
	assert_true(kvfs_trace_next(kv) != kvfs_trace_next(kv));
	assert_int_equal(kvfs_close(kv), 0);

	mk.mk_abi = KVFS_IOC_ABI_VERSION + 1;
	assert_int_equal(kvfs__open_fd(open("/dev/null", O_RDONLY), mock_ioctl, &kv), -EPROTO);
	mk.mk_abi = KVFS_IOC_ABI_VERSION;
	mk.mk_version_err = -ENOTTY;
	assert_int_equal(kvfs__open_fd(open("/dev/null", O_RDONLY), mock_ioctl, &kv), -ENOTTY);
	mk.mk_version_err = -EINVAL; /* another file system's answer to an unknown ioctl */
	assert_int_equal(kvfs__open_fd(open("/dev/null", O_RDONLY), mock_ioctl, &kv), -ENOTTY);
	assert_int_equal(kvfs_close(NULL), 0);
	assert_int_equal(kvfs_open("/nonexistent/kvfs", &kv), -ENOENT);
	assert_int_equal(kvfs_open("/dev/null", &kv), -ENOTDIR);
	assert_int_equal(kvfs_open("/", &kv), -ENOTTY); /* a directory of another file system */
}

static void test_empty_batch_sends_nothing(void **state)
{
	struct kvfs *kv = mock_open(MOCK_MAX_KEYS);
	struct kvfs_summary sum;

	(void)state;
	assert_int_equal(kvfs_lookup(kv, NULL, 0, 0, NULL, &sum), 0);
	assert_int_equal(sum.ksum_ioctls, 0);
	assert_int_equal(sum.ksum_ok, 0);
	assert_int_not_equal(sum.ksum_trace, 0);
	assert_int_equal(kvfs_put(kv, NULL, 0, 0, 0, NULL, NULL), 0);
	assert_int_equal(kvfs_lookup(kv, NULL, 3, 0, NULL, NULL), -EINVAL);
	assert_int_equal(kvfs_put(kv, NULL, 3, 0, 0, NULL, NULL), -EINVAL);
	assert_int_equal(kvfs_put(kv, (struct kvfs_key[1]){{.kk_name = "a"}}, 1, 4, 0, NULL, NULL),
			 -EINVAL);
	assert_int_equal(kvfs_remove(kv, (const char *[]){"a"}, 1, 2, 0, NULL, NULL), -EINVAL);
	assert_int_equal(mk.mk_calls, 0);
	kvfs_close(kv);
}

/*
 * 1000 names of 16 bytes: each takes 40 + 16 = 56 bytes, so 291 fit in
 * bt_data (16328 bytes) -> 291, 291, 291, 127. Every result lands on its
 * key, all ioctls carry the caller's trace id, misses end the prefix.
 */
static void test_lookup_splits_by_bytes(void **state)
{
	const size_t n = 1000, per = KVFS_BATCH_DATA_SIZE / 56;
	char **names = make_names(n, 16, "k");
	struct kvfs *kv = mock_open(MOCK_MAX_KEYS);
	struct kvfs_status *st = calloc(n, sizeof(*st));
	struct kvfs_summary sum;

	(void)state;
	assert_int_equal(per, 291);
	memcpy(names[500], "miss", 4);
	memcpy(names[900], "miss", 4);
	assert_int_equal(kvfs_lookup(kv, (const char *const *)names, n, 77, st, &sum), 0);
	assert_int_equal(sum.ksum_ioctls, 4);
	assert_int_equal(mk.mk_calls, 4);
	assert_int_equal(mk.mk_nkeys[0], per);
	assert_int_equal(mk.mk_nkeys[1], per);
	assert_int_equal(mk.mk_nkeys[2], per);
	assert_int_equal(mk.mk_nkeys[3], n - 3 * per);
	for (int i = 0; i < 4; i++)
		assert_int_equal(mk.mk_trace[i], 77);
	assert_int_equal(sum.ksum_trace, 77);
	assert_seen(names, n, NULL);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(st[i].ks_result, name_result(names[i], 16));
		assert_int_equal(st[i].ks_flags, KVFS_KEY_PRESENT);
	}
	assert_int_equal(sum.ksum_ok, n - 2);
	assert_int_equal(sum.ksum_prefix, 500);
	assert_int_equal(sum.ksum_bytes, n); /* the mock's bt_bytes = nkeys */
	assert_int_equal(sum.ksum_ns, 4000);
	free(st);
	free_names(names, n);
	kvfs_close(kv);
}

/*
 * kvfs_lookup_prefix sends no ioctl after the one that met the first miss:
 * 1000 names are 4 ioctls of 291, 291, 291, 127 when all hit.
 */
static void test_lookup_prefix_stops_early(void **state)
{
	const size_t n = 1000;
	char **names = make_names(n, 16, "k");
	struct kvfs *kv = mock_open(MOCK_MAX_KEYS);

	(void)state;
	assert_int_equal(kvfs_lookup_prefix(kv, (const char *const *)names, n, 9), 1000);
	assert_int_equal(mk.mk_calls, 4);
	memcpy(names[10], "miss", 4);
	assert_int_equal(kvfs_lookup_prefix(kv, (const char *const *)names, n, 9), 10);
	assert_int_equal(mk.mk_calls, 5);
	memcpy(names[10], "kkkk", 4);
	memcpy(names[300], "miss", 4);
	assert_int_equal(kvfs_lookup_prefix(kv, (const char *const *)names, n, 9), 300);
	assert_int_equal(mk.mk_calls, 7);
	/* a miss in the last key of a chunk still stops before the next chunk */
	memcpy(names[300], "kkkk", 4);
	memcpy(names[290], "miss", 4);
	assert_int_equal(kvfs_lookup_prefix(kv, (const char *const *)names, n, 9), 290);
	assert_int_equal(mk.mk_calls, 8);
	/* a name the library refuses is a miss too */
	memcpy(names[290], "kkkk", 4);
	free(names[0]);
	names[0] = NULL;
	assert_int_equal(kvfs_lookup_prefix(kv, (const char *const *)names, n, 9), 0);
	assert_int_equal(mk.mk_calls, 9);
	assert_int_equal(kvfs_lookup_prefix(kv, NULL, 0, 0), 0);
	assert_int_equal(kvfs_lookup_prefix(kv, NULL, 5, 0), -EINVAL);
	assert_int_equal(mk.mk_calls, 9);
	free_names(names, n);
	kvfs_close(kv);
}

/* Keys that fill bt_data to the last byte go in one ioctl; one byte more needs two. */
static void test_exact_fit(void **state)
{
	/* 16328 = 2 * 8164: two keys of 40 + 8124-byte names fill it exactly */
	struct kvfs *kv = mock_open(MOCK_MAX_KEYS);
	struct kvfs_summary sum;
	struct kvfs_status st;
	uint32_t path_max;
	char **names;

	(void)state;
	/* names that long are over the daemon's path limit: raise the handle's for this test */
	kvfs_limits(kv, NULL, NULL, NULL, &path_max);
	kv->kv_path_max = 20000;
	names = make_names(2, 8124, "e");
	assert_int_equal(kvfs_lookup(kv, (const char *const *)names, 2, 0, NULL, &sum), 0);
	assert_int_equal(sum.ksum_ioctls, 1);
	assert_int_equal(mk.mk_nkeys[0], 2);
	free_names(names, 2);

	names = make_names(2, 8125, "e");
	assert_int_equal(kvfs_lookup(kv, (const char *const *)names, 2, 0, NULL, &sum), 0);
	assert_int_equal(sum.ksum_ioctls, 2);
	assert_int_equal(mk.mk_nkeys[1], 1);
	assert_int_equal(mk.mk_nkeys[2], 1);
	assert_int_equal(sum.ksum_ok, 2);
	free_names(names, 2);

	/* one key that can never fit: 40 + 16289 bytes */
	names = make_names(1, KVFS_BATCH_DATA_SIZE - 39, "e");
	assert_int_equal(kvfs_lookup(kv, (const char *const *)names, 1, 0, &st, &sum), 0);
	assert_int_equal(st.ks_result, -E2BIG);
	assert_int_equal(sum.ksum_ioctls, 0);
	kv->kv_path_max = path_max;
	free_names(names, 1);
	kvfs_close(kv);
}

/* The daemon's key limit caps a batch even when bytes would allow more. */
static void test_key_limit(void **state)
{
	char **names = make_names(25, 8, "c");
	struct kvfs *kv = mock_open(10);
	struct kvfs_summary sum;

	(void)state;
	assert_int_equal(kvfs_remove(kv, (const char *const *)names, 25, KVFS_REMOVE_FLAG_RECURSIVE,
				     0, NULL, &sum),
			 0);
	assert_int_equal(sum.ksum_ioctls, 3);
	assert_int_equal(mk.mk_nkeys[0], 10);
	assert_int_equal(mk.mk_nkeys[1], 10);
	assert_int_equal(mk.mk_nkeys[2], 5);
	assert_int_equal(mk.mk_flags, KVFS_REMOVE_RECURSIVE);
	assert_int_equal(sum.ksum_ok, 25);
	assert_seen(names, 25, NULL);
	free_names(names, 25);
	kvfs_close(kv);
}

/*
 * Keys the library refuses itself (a name over the path limit, a NULL name)
 * get their error; the others around them are sent and answered.
 */
static void test_local_refusals(void **state)
{
	const size_t n = 600;
	char **names = make_names(n, 24, "r");
	char skip[600] = {0};
	struct kvfs *kv = mock_open(MOCK_MAX_KEYS);
	struct kvfs_status *st = calloc(n, sizeof(*st));
	struct kvfs_summary sum;
	char *slot10 = names[10], *slot300 = names[300];

	(void)state;
	names[10] = malloc(KVFS_PATH_MAX + 2);
	memset(names[10], 'n', KVFS_PATH_MAX + 1);
	names[10][KVFS_PATH_MAX + 1] = 0;
	names[300] = NULL;
	skip[10] = skip[300] = 1;
	assert_int_equal(kvfs_lookup(kv, (const char *const *)names, n, 0, st, &sum), 0);
	assert_int_equal(st[10].ks_result, -ENAMETOOLONG);
	assert_int_equal(st[300].ks_result, -EINVAL);
	assert_int_equal(sum.ksum_ok, n - 2);
	assert_int_equal(sum.ksum_prefix, 10);
	for (size_t i = 0; i < n; i++)
		if (!skip[i])
			assert_int_equal(st[i].ks_result, name_result(names[i], 24));
	free(names[10]);
	names[10] = slot10;
	names[300] = slot300;
	assert_seen(names, n, skip);
	/* a name exactly at the limit is sent */
	free(names[0]);
	names[0] = malloc(KVFS_PATH_MAX + 1);
	memset(names[0], 'm', KVFS_PATH_MAX);
	names[0][KVFS_PATH_MAX] = 0;
	assert_int_equal(kvfs_lookup(kv, (const char *const *)names, 1, 0, st, &sum), 0);
	assert_true(st[0].ks_result >= 0);
	free(st);
	free_names(names, n);
	kvfs_close(kv);
}

/*
 * Puts and gets by layout and by iov lists: the iov lists arrive intact and
 * 8-aligned, a list over KVFS_LAYOUT_MAX_SEGS ranges is refused alone (-E2BIG), and
 * lists that need several ioctls are cut between keys, never inside one.
 */
static void test_put_get_iovs(void **state)
{
	const size_t n = 40;
	struct kvfs *kv = mock_open(MOCK_MAX_KEYS);
	struct kvfs_key keys[40];
	struct kvfs_status st[40];
	struct kvfs_summary sum;
	struct kvfs_iov *iov = calloc(700, sizeof(*iov)), *huge;
	char **names = make_names(n, 12, "p");
	size_t huge_n = KVFS_BATCH_DATA_SIZE / sizeof(struct kvfs_ioc_iov) + 1;

	(void)state;
	for (size_t v = 0; v < 700; v++)
		iov[v] = (struct kvfs_iov){
		    .ki_region = (uint32_t)(v % 5 + 1), .ki_offset = v * 4096, .ki_len = 4096 + v};
	for (size_t i = 0; i < n; i++) {
		keys[i] = (struct kvfs_key){.kk_name = names[i]};
		if (i % 2)
			keys[i].kk_layout = 3, keys[i].kk_block = i;
		else
			keys[i].kk_iov = iov + i * 17, keys[i].kk_niov = 35 + (uint32_t)(i % 3);
	}
	huge = calloc(huge_n, sizeof(*huge));
	for (size_t v = 0; v < huge_n; v++)
		huge[v] = (struct kvfs_iov){.ki_region = 1, .ki_len = 1};
	keys[7] =
	    (struct kvfs_key){.kk_name = names[7], .kk_iov = huge, .kk_niov = (uint32_t)huge_n};
	keys[9] = (struct kvfs_key){.kk_name = names[9], .kk_niov = 2}; /* no iov pointer */
	for (int pass = 0; pass < 2; pass++) {
		int err = pass ? kvfs_get(kv, keys, n, 5, st, &sum)
			       : kvfs_put(kv, keys, n, KVFS_PUT_FLAG_MKDIR, 5, st, &sum);

		assert_int_equal(err, 0);
		if (!pass)
			assert_int_equal(mk.mk_flags, KVFS_PUT_MKDIR);
		else
			assert_int_equal(mk.mk_flags, 0);
		/* ~19 keys x ~36 iovs x 24 bytes = 16 KiB of iovs: more than one ioctl */
		assert_true(sum.ksum_ioctls >= 2);
		assert_int_equal(st[7].ks_result, -E2BIG);
		assert_int_equal(st[9].ks_result, -EINVAL);
		for (size_t i = 0; i < n; i++) {
			int64_t want = 0;

			if (i == 7 || i == 9)
				continue;
			if (keys[i].kk_layout) {
				want = 3 * 1000000 + (int64_t)i;
			} else {
				for (uint32_t v = 0; v < keys[i].kk_niov; v++)
					want += keys[i].kk_iov[v].ki_region * 1000 +
						(int64_t)(keys[i].kk_iov[v].ki_offset +
							  keys[i].kk_iov[v].ki_len);
			}
			assert_int_equal(st[i].ks_result, want);
		}
		assert_int_equal(sum.ksum_ok, n - 2);
		assert_int_equal(sum.ksum_prefix, 7);
		mk.mk_calls = 0;
	}
	/* the ABI's most ranges per key is sent; one more is refused here */
	keys[0] = (struct kvfs_key){.kk_name = names[0], .kk_iov = huge, .kk_niov = 256};
	keys[1] = (struct kvfs_key){.kk_name = names[1], .kk_iov = huge, .kk_niov = 257};
	assert_int_equal(kvfs_put(kv, keys, 2, 0, 0, st, &sum), 0);
	assert_int_equal(st[0].ks_result, 256 * 1001);
	assert_int_equal(st[1].ks_result, -E2BIG);
	assert_int_equal(sum.ksum_ioctls, 1);
	free(huge);
	free(iov);
	free_names(names, n);
	kvfs_close(kv);
}

/*
 * kvfs_put_event: every ioctl of a split call carries the event handle in
 * bt_data's last 64 bytes with KVFS_PUT_WAIT_EVENT, and no name or iov
 * list reaches into them; a NULL handle or an unknown flag is refused.
 */
static void test_put_event(void **state)
{
	const size_t n = 600;
	struct kvfs *kv = mock_open(MOCK_MAX_KEYS);
	struct kvfs_key *keys = calloc(n, sizeof(*keys));
	struct kvfs_status *st = calloc(n, sizeof(*st));
	struct kvfs_iov iov = {.ki_region = 2, .ki_offset = 0, .ki_len = 4096};
	char **names = make_names(n, 40, "ev");
	uint8_t ev[KVFS_BATCH_EVENT_SIZE];
	struct kvfs_summary sum;

	(void)state;
	for (size_t i = 0; i < KVFS_BATCH_EVENT_SIZE; i++)
		ev[i] = (uint8_t)(0xa0 + i);
	for (size_t i = 0; i < n; i++)
		keys[i] = (struct kvfs_key){.kk_name = names[i], .kk_iov = &iov, .kk_niov = 1};
	mk.mk_events = 0;
	assert_int_equal(kvfs_put_event(kv, keys, n, KVFS_PUT_FLAG_MKDIR, ev, 0, st, &sum), 0);
	assert_int_equal(sum.ksum_ok, n);
	assert_true(sum.ksum_ioctls >= 2);
	assert_int_equal(mk.mk_events, sum.ksum_ioctls);
	assert_int_equal(mk.mk_flags, KVFS_PUT_MKDIR | KVFS_PUT_WAIT_EVENT);
	assert_memory_equal(mk.mk_event, ev, sizeof(ev));
	for (size_t i = 0; i < n; i++)
		assert_int_equal(st[i].ks_result, 2 * 1000 + 4096);
	assert_int_equal(kvfs_put_event(kv, keys, n, 0, NULL, 0, st, &sum), -EINVAL);
	assert_int_equal(kvfs_put_event(kv, keys, n, KVFS_PUT_WAIT_EVENT, ev, 0, st, &sum),
			 -EINVAL);
	free_names(names, n);
	free(keys);
	free(st);
	kvfs_close(kv);
}

/*
 * An ioctl the daemon refuses as a whole ends the call: the keys already
 * answered keep their results, that ioctl's keys and the later ones get the
 * error, and no further ioctl is sent.
 */
static void test_whole_ioctl_failure(void **state)
{
	const size_t n = 1000;
	char **names = make_names(n, 16, "f");
	struct kvfs *kv = mock_open(MOCK_MAX_KEYS);
	struct kvfs_status *st = calloc(n, sizeof(*st));
	struct kvfs_summary sum;

	(void)state;
	mk.mk_fail_call = 2;
	mk.mk_fail_err = -ENOTDIR;
	assert_int_equal(kvfs_lookup(kv, (const char *const *)names, n, 0, st, &sum), -ENOTDIR);
	assert_int_equal(mk.mk_calls, 2);
	assert_int_equal(sum.ksum_ioctls, 2);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(st[i].ks_result, i < 291 ? name_result(names[i], 16) : -ENOTDIR);
	assert_int_equal(sum.ksum_ok, 291);
	assert_int_equal(sum.ksum_prefix, 291);
	free(st);
	free_names(names, n);
	kvfs_close(kv);
}

/* EINTR sends a lookup/put/get again; a remove is not repeated (its keys would be gone). */
static void test_eintr(void **state)
{
	const char *names[] = {"a", "b", "c"};
	struct kvfs *kv = mock_open(MOCK_MAX_KEYS);
	struct kvfs_status st[3];
	struct kvfs_summary sum;

	(void)state;
	mk.mk_eintr = 2;
	assert_int_equal(kvfs_lookup(kv, names, 3, 0, st, &sum), 0);
	assert_int_equal(sum.ksum_ok, 3);
	assert_int_equal(mk.mk_calls, 1);
	mk.mk_eintr = 1;
	assert_int_equal(kvfs_remove(kv, names, 3, 0, 0, st, &sum), -EINTR);
	assert_int_equal(st[0].ks_result, -EINTR);
	assert_int_equal(st[2].ks_result, -EINTR);
	assert_int_equal(mk.mk_calls, 1);
	assert_true(kvfs_remove_prefix(kv, "dir", 0) >= 0);
	assert_int_equal(mk.mk_flags, KVFS_REMOVE_RECURSIVE);
	assert_int_equal(kvfs_remove_prefix(kv, "miss-dir", 0), -ENOENT);
	kvfs_close(kv);
}

/*
 * kvfs_region_alloc hands the daemon a shared-memory object of the rounded
 * size, removes its name once registered (nothing left in /dev/shm), and
 * gives back zeroed, writable memory; layouts carry their segments; close
 * unregisters layouts before the regions they use.
 */
static void test_regions_and_layouts(void **state)
{
	struct kvfs *kv = mock_open(MOCK_MAX_KEYS);
	struct kvfs_segment seg[KVFS_LAYOUT_MAX_SEGS + 1];
	uint32_t shm_id, proc_id, lay, lay2;
	uint64_t nblocks = 0;
	static char local[8192];
	uint8_t *mem;
	void *addr;
	int fd;

	(void)state;
	assert_int_equal(kvfs_region_alloc(kv, 10000, -1, &addr, &shm_id), 0);
	mem = addr;
	assert_int_equal(mk.mk_shm_size, 12288);
	assert_int_equal((uintptr_t)mem % 4096, 0);
	for (int i = 0; i < 12288; i++)
		assert_int_equal(mem[i], 0);
	memset(mem, 0x5a, 12288);
	fd = shm_open(mk.mk_shm_seen, O_RDONLY, 0);
	assert_int_equal(fd, -1);
	assert_int_equal(errno, ENOENT);
	assert_int_equal(kvfs_region_alloc(kv, 0, -1, &addr, &shm_id), -EINVAL);
	assert_int_equal(kvfs_region_alloc(kv, 4096, 1 << 20, &addr, &proc_id), -EINVAL);

	assert_int_equal(kvfs_region_register(kv, local, sizeof(local), &proc_id), 0);
	assert_int_equal(kvfs_region_register(kv, local, 0, &proc_id), -EINVAL);
	assert_int_equal(kvfs_region_register(kv, (void *)(UINTPTR_MAX - 10), 100, &proc_id),
			 -EINVAL);

	for (int i = 0; i <= KVFS_LAYOUT_MAX_SEGS; i++)
		seg[i] = (struct kvfs_segment){
		    .ks_region = shm_id, .ks_base = (uint64_t)i, .ks_stride = 64, .ks_len = 2};
	assert_int_equal(kvfs_layout_register(kv, seg, KVFS_LAYOUT_MAX_SEGS + 1, &lay, NULL),
			 -E2BIG);
	assert_int_equal(kvfs_layout_register(kv, seg, 0, &lay, NULL), -EINVAL);
	assert_int_equal(kvfs_layout_register(kv, seg, 32, &lay, &nblocks), 0);
	assert_int_equal(nblocks, 7);
	assert_int_equal(kvfs_layout_register(kv, seg, 1, &lay2, NULL), 0);
	assert_int_equal(kvfs_layout_unregister(kv, lay2), 0);
	assert_string_equal(mk.mk_unreg, "L4");
	assert_int_equal(kvfs_close(kv), 0);
	/* close: the remaining layout, then the two regions */
	assert_true(!strncmp(mk.mk_unreg, "L4L3R", 5));
	assert_true(strstr(mk.mk_unreg, "R1") && strstr(mk.mk_unreg, "R2"));
}

/* Eight threads batch on one handle at once: every result still lands on its own key. */
struct conc_arg {
	struct kvfs *ca_kv;
	unsigned ca_id;
	int ca_bad;
};

static void *conc_main(void *p)
{
	struct conc_arg *a = p;
	const size_t n = 700;
	char **names = malloc(n * sizeof(*names));
	struct kvfs_status *st = calloc(n, sizeof(*st));
	struct kvfs_summary sum;

	for (size_t i = 0; i < n; i++) {
		names[i] = malloc(32);
		snprintf(names[i], 32, "t%u/%zu", a->ca_id, i * 7919 + a->ca_id);
	}
	for (int round = 0; round < 20; round++) {
		if (kvfs_lookup(a->ca_kv, (const char *const *)names, n, a->ca_id + 1, st, &sum) ||
		    sum.ksum_ok != n)
			a->ca_bad++;
		for (size_t i = 0; i < n; i++)
			if (st[i].ks_result != name_result(names[i], strlen(names[i])))
				a->ca_bad++;
	}
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	free(st);
	return NULL;
}

static void test_concurrent_batches(void **state)
{
	struct kvfs *kv = mock_open(MOCK_MAX_KEYS);
	struct conc_arg args[8];
	pthread_t t[8];

	(void)state;
	for (unsigned i = 0; i < 8; i++) {
		args[i] = (struct conc_arg){.ca_kv = kv, .ca_id = i};
		assert_int_equal(pthread_create(&t[i], NULL, conc_main, &args[i]), 0);
	}
	for (unsigned i = 0; i < 8; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(args[i].ca_bad, 0);
	}
	assert_true(mk.mk_calls >= 8 * 20 * 2);
	kvfs_close(kv);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_open_version, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_empty_batch_sends_nothing, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_lookup_splits_by_bytes, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_lookup_prefix_stops_early, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_exact_fit, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_key_limit, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_local_refusals, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_put_get_iovs, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_put_event, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_whole_ioctl_failure, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_eintr, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_regions_and_layouts, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_concurrent_batches, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
